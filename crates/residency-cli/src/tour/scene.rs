//! A realistic resource set for the placement step: what one level of a game keeps in video memory.
//!
//! Counts and sizes follow a typical open-level scene: block-compressed material textures with full
//! mip chains, small UI and decal textures (the D3D12 "small resource" case), a deferred renderer's
//! render targets, a shadow map, thousands of mesh vertex/index buffers and constant buffers. A fixed
//! seed makes it the same on every run and machine.

use residency::core::placement::ResourceFlag;
use residency::core::sync::measure::SplitMix64;
use residency::vulkan::{Format, ResourceDesc};

/// One class of resources in the scene.
#[derive(Debug)]
pub struct Class {
    /// Its name in tables and charts.
    pub name: &'static str,
    /// The resources (legacy descriptions; the tour adds the tight flag for the other column).
    pub descs: Vec<ResourceDesc>,
}

/// The core's deterministic generator, with the distribution the scene needs.
struct Rng(SplitMix64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0.next_u64()
    }

    /// Log-uniform in `lo..=hi`.
    fn log_uniform(&mut self, lo: u64, hi: u64) -> u64 {
        let (a, b) = ((lo as f64).ln(), (hi as f64).ln());
        let t = (self.next() >> 11) as f64 / (1u64 << 53) as f64;
        (a + (b - a) * t).exp().round() as u64
    }
}

fn textures(count: usize, format: Format, side: u32) -> Vec<ResourceDesc> {
    (0..count).map(|_| ResourceDesc::texture_2d(format, u64::from(side), side)).collect()
}

/// The scene, by class.
pub fn scene() -> Vec<Class> {
    let mut rng = Rng(SplitMix64::new(0x5eed_2026_1129));
    let rt = |format: Format, w: u64, h: u32, flag: ResourceFlag| {
        ResourceDesc::texture_2d(format, w, h).with_mip_levels(1).with_flag(flag)
    };
    vec![
        Class {
            name: "material textures",
            descs: [
                textures(80, Format::Bc7Unorm, 2048),
                textures(80, Format::Bc5Unorm, 2048),
                textures(120, Format::Bc7Unorm, 1024),
                textures(200, Format::Bc1Unorm, 512),
            ]
            .concat(),
        },
        Class {
            name: "small textures",
            descs: [textures(300, Format::R8G8B8A8Unorm, 64), textures(300, Format::Bc7Unorm, 128)].concat(),
        },
        Class {
            name: "render targets",
            descs: vec![
                rt(Format::R8G8B8A8Unorm, 1920, 1080, ResourceFlag::AllowRenderTarget),
                rt(Format::R8G8B8A8Unorm, 1920, 1080, ResourceFlag::AllowRenderTarget),
                rt(Format::R10G10B10A2Unorm, 1920, 1080, ResourceFlag::AllowRenderTarget),
                rt(Format::R16G16B16A16Float, 1920, 1080, ResourceFlag::AllowRenderTarget),
                rt(Format::D32Float, 1920, 1080, ResourceFlag::AllowDepthStencil),
                rt(Format::D32Float, 4096, 4096, ResourceFlag::AllowDepthStencil),
                rt(Format::R16G16B16A16Float, 960, 540, ResourceFlag::AllowRenderTarget),
                rt(Format::R8G8B8A8Unorm, 1920, 1080, ResourceFlag::AllowRenderTarget).with_samples(4),
            ],
        },
        Class {
            name: "mesh buffers",
            descs: (0..3000)
                .flat_map(|_| {
                    let vertices = rng.log_uniform(4 << 10, 2 << 20);
                    let indices = (vertices / 4).max(256);
                    [ResourceDesc::buffer(vertices), ResourceDesc::buffer(indices)]
                })
                .collect(),
        },
        Class {
            name: "constant buffers",
            descs: (0..2000)
                .map(|_| ResourceDesc::buffer(rng.log_uniform(64, 1024)).with_alignment(256))
                .collect(),
        },
        Class {
            name: "structured buffers",
            descs: (0..800)
                .map(|_| {
                    ResourceDesc::buffer(rng.log_uniform(16, 4096))
                        .with_flag(ResourceFlag::AllowUnorderedAccess)
                })
                .collect(),
        },
    ]
}
