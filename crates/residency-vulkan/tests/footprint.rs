//! Footprint-exact residency codes (issue #32) on both residency paths: the fallback and warn
//! helpers say "resident" only when every tap of the sampler's footprint is resident — the
//! bilinear neighbours across a tile edge, the next mip of a trilinear sample, the taps of a 16×
//! anisotropic sample — and otherwise fall back to a coarser LOD whose whole footprint is, or
//! miss with the default value. Each probe's answer is checked against a fully resident twin of
//! the texture sampled at the LOD the helper used: a resident answer is the data a fully resident
//! texture gives there. The helper before #32 (the min-LOD of the sample's centre region only)
//! answers "resident at the asked LOD" at the edge probes below and fails this test.

use residency_core::format::Format;
use residency_core::memory::MemoryIntent;
use residency_core::tiles::{ResidencyPath, SparseImageDesc, TexelRegion};
use residency_core::usage::BufferUsage;
use residency_vulkan::ash::vk;
use residency_vulkan::compute::{Binding, ComputeProgram, ProgramError};
use residency_vulkan::graphics::{GraphicsProgram, VertexAttribute};
use residency_vulkan::shaders::{self, Shader};
use residency_vulkan::testing::with_gpu;
use residency_vulkan::{BufferDesc, Device, Filter, ResidencyError, Uploader, VulkanError};
use std::sync::Arc;

mod common;
use common::paths::Texture;
use common::DEFAULT;

const SIZE: u32 = 512;
/// RGBA8 tiles on lavapipe (and the standard 64 KiB shape): 128 × 128 texels.
const TILE: u32 = 128;

/// One probe: `uv`, an explicit LOD or derivatives, and how it samples.
#[derive(Clone, Copy, Debug)]
struct Probe {
    uv: [f32; 2],
    lod: f32,
    mode: Mode,
    dx: [f32; 2],
    dy: [f32; 2],
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Mode {
    /// `residencySampleFallback` at `lod`.
    Lod,
    /// `residencySampleGradFallback` with the derivatives.
    Grad,
    /// `residencySampleGradWarn` with the derivatives.
    GradWarn,
    /// `residencySampleGradClamp` (`SPARSE_FOOTPRINT_CLAMP` only).
    GradClamp,
}

/// What a probe answered.
#[derive(Clone, Copy, Debug)]
struct Answer {
    texel: [f32; 4],
    twin: [f32; 4],
    resident: bool,
    used_lod: f32,
    code: u32,
    twin_resident: bool,
}

/// uv of mip-0 position (x, y) in texels.
fn at(x: f32, y: f32) -> [f32; 2] {
    [x / SIZE as f32, y / SIZE as f32]
}

fn lod(x: f32, y: f32, lod: f32) -> Probe {
    Probe { uv: at(x, y), lod, mode: Mode::Lod, dx: [0.0; 2], dy: [0.0; 2] }
}

/// A gradient probe at (x, y) whose derivatives span `along_x` texels in x and `along_y` in y.
fn grad(x: f32, y: f32, along_x: f32, along_y: f32) -> Probe {
    let s = SIZE as f32;
    Probe { uv: at(x, y), lod: 0.0, mode: Mode::Grad, dx: [along_x / s, 0.0], dy: [0.0, along_y / s] }
}

/// The partial texture: mip-0 tile (1, 1), mip-1 tile (0, 0) and, when the image has more mips,
/// every coarser mip whole; written with the test pattern. Its twin: every tile of every mip.
fn textures(
    device: &Arc<Device>,
    path: ResidencyPath,
    desc: SparseImageDesc,
    uploader: &Uploader,
) -> (Texture, Texture) {
    let mips = desc.mip_levels;
    let mut partial = Texture::new(device, path, desc, 64);
    let mut twin = Texture::new(device, path, desc, 64);
    let tile = |x: u32, y: u32| TexelRegion { offset: [x * TILE, y * TILE, 0], extent: [TILE, TILE, 1] };
    let mut regions = vec![(0, tile(1, 1)), (1, tile(0, 0))];
    regions.extend((2..mips).map(|m| (m, partial.whole(m))));
    for (mip, r) in regions {
        partial.commit(mip, r).unwrap();
        partial.write(device, uploader, mip, r);
    }
    for mip in 0..mips {
        let r = twin.whole(mip);
        twin.commit(mip, r).unwrap();
        twin.write(device, uploader, mip, r);
    }
    partial.flush(uploader);
    twin.flush(uploader);
    (partial, twin)
}

/// Runs `body` over [`textures`] of `mips` mips on `path`, then drops them (checking that their
/// pools get every tile back).
fn with_textures(
    device: &Arc<Device>,
    path: ResidencyPath,
    mips: u32,
    body: impl FnOnce(&Texture, &Texture),
) {
    let uploader = Uploader::new(device, "footprint uploads", 16 << 20).unwrap();
    let desc = SparseImageDesc::new_2d(Format::R8G8B8A8Unorm, SIZE, SIZE).with_mip_levels(mips);
    let (partial, twin) = textures(device, path, desc, &uploader);
    body(&partial, &twin);
    uploader.destroy().unwrap();
    partial.destroy(device);
    twin.destroy(device);
}

/// The path's footprint shader (`sparse_footprint{,_software}.comp`).
fn shader_of(path: ResidencyPath) -> &'static Shader {
    if path == ResidencyPath::Software {
        &shaders::SPARSE_FOOTPRINT_SOFTWARE
    } else {
        &shaders::SPARSE_FOOTPRINT
    }
}

/// Samples `probes` through `shader` (the path's: [`shader_of`]) over `partial` and `twin`;
/// `filter` is the texture's sampler on the hardware path (the software path filters in the
/// shader, its atlas trilinear), `max_anisotropy` what the shader is told.
#[allow(clippy::too_many_arguments, reason = "a test's knobs, named at each call")]
fn sample(
    device: &Device,
    shader: &Shader,
    path: ResidencyPath,
    (partial, twin): (&Texture, &Texture),
    filter: Filter,
    max_anisotropy: f32,
    low_water: u32,
    probes: &[Probe],
) -> Vec<Answer> {
    let filter = if path == ResidencyPath::Software { Filter::Trilinear } else { filter };
    let program = ComputeProgram::new(device, "sparse_footprint", shader, 1).unwrap();
    let (linear, nearest) =
        (device.create_sampler(filter).unwrap(), device.create_sampler(Filter::Nearest).unwrap());
    let n = probes.len() as u64;
    let mut input = device
        .create_buffer(
            &BufferDesc::new("probes", n * 32, BufferUsage::STORAGE).with_intent(MemoryIntent::Upload),
        )
        .unwrap();
    let output = device
        .create_buffer(
            &BufferDesc::new("results", n * 48, BufferUsage::STORAGE).with_intent(MemoryIntent::Readback),
        )
        .unwrap();
    let bytes: Vec<u8> = probes
        .iter()
        .flat_map(|p| {
            let mode = match p.mode {
                Mode::Lod => 0.0,
                Mode::Grad => 1.0,
                Mode::GradWarn => 2.0,
                Mode::GradClamp => 3.0,
            };
            [p.uv[0], p.uv[1], p.lod, mode, p.dx[0], p.dx[1], p.dy[0], p.dy[1]]
        })
        .flat_map(f32::to_le_bytes)
        .collect();
    input.write(0, &bytes).unwrap();
    let general = vk::ImageLayout::GENERAL;
    let (views, twin_views) = (partial.views(), twin.views());
    let set = program
        .descriptor_set(&[
            Binding::sampled(views.0, &linear, general),
            Binding::sampled(views.1, &nearest, general),
            Binding::sampled(twin_views.0, &linear, general),
            Binding::sampled(twin_views.1, &nearest, general),
            Binding::Buffer(&input),
            Binding::Buffer(&output),
        ])
        .unwrap();
    let mut push: Vec<u8> = DEFAULT.iter().flat_map(|f| f.to_le_bytes()).collect();
    push.extend_from_slice(&(n as u32).to_le_bytes());
    push.extend_from_slice(&max_anisotropy.to_le_bytes());
    push.extend_from_slice(&low_water.to_le_bytes());
    push.resize(32, 0);
    device
        .submit_compute("footprint", |rec| {
            program.dispatch(rec, &set, &push, [(n as u32).div_ceil(64), 1, 1]).expect("a few workgroups")
        })
        .unwrap();
    let mut out = vec![0u8; (n * 48) as usize];
    output.read(0, &mut out).unwrap();
    out.chunks_exact(48)
        .map(|r| {
            let f = |i: usize| f32::from_le_bytes([r[i], r[i + 1], r[i + 2], r[i + 3]]);
            Answer {
                texel: [f(0), f(4), f(8), f(12)].map(|v| v * 255.0),
                twin: [f(16), f(20), f(24), f(28)].map(|v| v * 255.0),
                resident: f(32) == 1.0,
                used_lod: f(36),
                code: f(40) as u32,
                twin_resident: f(44) == 1.0,
            }
        })
        .collect()
}

/// Every resident answer is the twin's (the data a fully resident texture gives at the LOD
/// used); every miss is the default value.
fn check_honest(name: &str, probes: &[Probe], answers: &[Answer]) {
    for (i, (p, a)) in probes.iter().zip(answers).enumerate() {
        if a.resident {
            assert!(a.twin_resident, "{name} probe {i} {p:?}: the twin is fully resident");
            assert!(
                a.texel.iter().zip(a.twin).all(|(g, w)| (g - w).abs() <= 0.01),
                "{name} probe {i} {p:?}: resident but {:?} where a fully resident texture gives {:?} (LOD {})",
                a.texel,
                a.twin,
                a.used_lod
            );
        } else {
            assert_eq!(
                a.texel,
                DEFAULT.map(|v| v * 255.0),
                "{name} probe {i} {p:?}: a miss is the default value"
            );
        }
    }
}

/// (resident, LOD used) of each probe, as asserted.
fn expect(name: &str, probes: &[Probe], answers: &[Answer], want: &[(bool, f32)]) {
    for (i, ((p, a), (resident, used))) in probes.iter().zip(answers).zip(want).enumerate() {
        assert_eq!(a.resident, *resident, "{name} probe {i} {p:?}: resident ({a:?})");
        if *resident {
            assert!(
                (a.used_lod - used).abs() < 1e-4,
                "{name} probe {i} {p:?}: LOD used {} vs {used}",
                a.used_lod
            );
        }
    }
}

/// Two mips only: a footprint that reaches a non-resident tile has no coarser fallback, so the
/// answer is a miss and the default value — at a mip-0 tile edge, at a mip-1 tile edge of a
/// trilinear sample, and where 16× anisotropic taps cross either.
fn misses_at_tile_and_mip_edges(device: &Arc<Device>, path: ResidencyPath) {
    let name = path.name();
    with_textures(device, path, 2, |partial, twin| {
        let probes = [
            lod(190.5, 190.5, 0.0), // inside mip-0 tile (1, 1)
            lod(255.9, 190.5, 0.0), // bilinear across the mip-0 edge 255 | 256: tile (2, 1) absent
            lod(255.2, 190.5, 0.5), // mip 0 inside; mip 1 reads texel 128 of absent tile (1, 0)
            lod(255.2, 190.5, 0.0), // the same at LOD 0: mip 0 inside (the hardware path tests mip 1 too)
            lod(190.5, 190.5, 0.5), // trilinear, both mips inside
            lod(64.5, 64.5, 0.0),   // no mip-0 tile: mip 1 (resident) stands in
        ];
        let got =
            sample(device, shader_of(path), path, (partial, twin), Filter::Trilinear, 1.0, u32::MAX, &probes);
        check_honest(name, &probes, &got);
        // A trilinear sample at a whole LOD may fetch the next mip with weight 0, and lavapipe's
        // residency code counts it: the hardware path tests that mip too (docs/tiles.md).
        let whole_lod_alone = path == ResidencyPath::Software;
        expect(
            name,
            &probes,
            &got,
            &[(true, 0.0), (false, 0.0), (false, 0.0), (whole_lod_alone, 0.0), (true, 0.5), (true, 1.0)],
        );

        // 16× anisotropic gradient samples (a 16 : 1 footprint along x) against isotropic ones with
        // the same derivatives: the anisotropic taps spread ±8 texels at LOD 0, ±16 at LOD 1.
        let aniso = [
            grad(200.5, 190.5, 16.0, 1.0), // LOD 0, taps 192.5..208.5: inside
            grad(250.5, 190.5, 16.0, 1.0), // LOD 0, taps to 258.5: tile (2, 1)
            grad(230.5, 190.5, 32.0, 2.0), // LOD 1, taps 214.5..246.5: mip-1 texels to 123
            grad(240.5, 190.5, 32.0, 2.0), // LOD 1, taps to 256.5: mip-1 texel 128, tile (1, 0)
        ];
        let filter =
            if path == ResidencyPath::Software { Filter::Trilinear } else { Filter::Anisotropic(16) };
        let got = sample(device, shader_of(path), path, (partial, twin), filter, 16.0, u32::MAX, &aniso);
        check_honest(&format!("{name} 16x"), &aniso, &got);
        expect(&format!("{name} 16x"), &aniso, &got, &[(true, 0.0), (false, 0.0), (true, 1.0), (false, 0.0)]);
        // Isotropic, the same derivatives: one tap at the centre, LOD log2(16) = 4 clamped to 1.
        let got =
            sample(device, shader_of(path), path, (partial, twin), Filter::Trilinear, 1.0, u32::MAX, &aniso);
        check_honest(&format!("{name} 1x"), &aniso, &got);
        expect(&format!("{name} 1x"), &aniso, &got, &[(true, 1.0), (true, 1.0), (true, 1.0), (true, 1.0)]);
    });
}

/// The full mip chain: the same edges fall back to the finest LOD whose whole footprint is
/// resident (mip 2, whole) instead of reading the absent neighbour at the LOD asked for; a sweep
/// across the edges at many LODs and footprints never answers "resident" with other data than
/// the fully resident twin's; the warn code follows the LOD used.
fn falls_back_at_tile_and_mip_edges(device: &Arc<Device>, path: ResidencyPath) {
    let name = path.name();
    with_textures(device, path, 10, |partial, twin| {
        let probes =
            [lod(190.5, 190.5, 0.0), lod(255.9, 190.5, 0.0), lod(255.2, 190.5, 0.5), lod(190.5, 255.7, 0.25)];
        let got =
            sample(device, shader_of(path), path, (partial, twin), Filter::Trilinear, 1.0, u32::MAX, &probes);
        check_honest(name, &probes, &got);
        expect(name, &probes, &got, &[(true, 0.0), (true, 2.0), (true, 2.0), (true, 2.0)]);

        // 16×: taps across the mip-0 edge fall back to mip 2 (the hardware path's half level of LOD
        // slack makes it 2.5 there: its filter may take the LOD half a level finer).
        let aniso = [grad(200.5, 190.5, 16.0, 1.0), grad(250.5, 190.5, 16.0, 1.0)];
        let filter =
            if path == ResidencyPath::Software { Filter::Trilinear } else { Filter::Anisotropic(16) };
        let slack = if path == ResidencyPath::Software { 0.0 } else { 0.5 };
        let got = sample(device, shader_of(path), path, (partial, twin), filter, 16.0, u32::MAX, &aniso);
        check_honest(&format!("{name} 16x"), &aniso, &got);
        expect(&format!("{name} 16x"), &aniso, &got, &[(true, 0.0), (true, 2.0 + slack)]);

        // The warn code of the same samples with the low-water mark at level 1: the sample at LOD 0
        // warns (level 0), the fallen-back one fetched from level 2 and does not.
        let warn: Vec<Probe> = aniso.iter().map(|p| Probe { mode: Mode::GradWarn, ..*p }).collect();
        let got = sample(device, shader_of(path), path, (partial, twin), filter, 16.0, 1, &warn);
        check_honest(&format!("{name} warn"), &warn, &got);
        assert_eq!((got[0].code, got[1].code), (1 | 2, 1), "{name}: warn codes");

        // The sweep: across the mip-0 edge x = 256 and the mip-1 edge under it, and across y = 256,
        // at LODs 0 to 3 in quarters, explicit and 1× / 16× gradients.
        let mut sweep = Vec::new();
        for i in 0..48 {
            let x = 236.0 + i as f32 * 0.75;
            for q in 0..13 {
                let l = q as f32 * 0.25;
                sweep.push(lod(x, 190.5, l));
                sweep.push(lod(190.5, x, l));
                let along = 2f32.powf(l);
                sweep.push(grad(x, 190.5, 16.0 * along, along));
                sweep.push(grad(190.5, x, along, 16.0 * along));
            }
        }
        for (filter, max) in [(Filter::Trilinear, 1.0), (filter, 16.0)] {
            let got = sample(device, shader_of(path), path, (partial, twin), filter, max, u32::MAX, &sweep);
            check_honest(&format!("{name} sweep {max}x"), &sweep, &got);
            let resident = got.iter().filter(|a| a.resident).count();
            let asked = got
                .iter()
                .zip(&sweep)
                .filter(|(a, p)| a.resident && p.mode == Mode::Lod && a.used_lod == p.lod);
            assert!(
                asked.count() > 0 && resident == sweep.len(),
                "{name} sweep {max}x: every probe has a fallback"
            );
        }
    });
}

/// The paths the footprint tests run on, each on its own.
const PATHS: [ResidencyPath; 2] = [ResidencyPath::Hardware, ResidencyPath::Software];

#[test]
fn footprint_codes_miss_at_tile_and_mip_edges_on_both_paths() {
    with_gpu(|set| PATHS.into_iter().for_each(|path| misses_at_tile_and_mip_edges(&set.devices()[0], path)));
}

#[test]
fn footprint_codes_fall_back_at_tile_and_mip_edges_on_both_paths() {
    with_gpu(|set| {
        PATHS.into_iter().for_each(|path| falls_back_at_tile_and_mip_edges(&set.devices()[0], path))
    });
}

/// Anisotropic samplers: checked against the feature and the device's limit before Vulkan sees
/// them; a refused one is a typed error and creates nothing.
#[test]
fn anisotropic_samplers_are_checked_against_the_device() {
    with_gpu(|set| {
        let device = &set.devices()[0];
        let before = device.ledger().live_objects().len();
        let maximum = device.limits().max_sampler_anisotropy as u32;
        if device.features().sampler_anisotropy {
            let sampler = device.create_sampler(Filter::Anisotropic(maximum)).unwrap();
            assert_eq!(sampler.filter(), Filter::Anisotropic(maximum));
            drop(sampler);
            let e = device.create_sampler(Filter::Anisotropic(maximum + 1)).unwrap_err();
            assert!(
                matches!(e, VulkanError::Anisotropy { asked, maximum: m } if asked == maximum + 1 && m == maximum)
            );
            assert_eq!(e.class(), residency_vulkan::ErrorClass::Unsupported);
        } else {
            let e = device.create_sampler(Filter::Anisotropic(2)).unwrap_err();
            assert!(matches!(e, VulkanError::Anisotropy { asked: 2, maximum: 0 }), "{e}");
        }
        let e = device.create_sampler(Filter::Anisotropic(0)).unwrap_err();
        assert_eq!(e.class(), residency_vulkan::ErrorClass::Refused);
        device.wait_idle().unwrap();
        device.maintain();
        assert_eq!(device.ledger().live_objects().len(), before, "nothing left behind");
    });
}

/// `RESIDENCY_CODES`: the hardware helpers also require each sample's own residency code. The
/// footprint's misses stay misses, and a resident answer is still the twin's data; lavapipe's
/// code may add misses (it reports every invocation of a batch non-resident when all of them
/// sample at whole LODs, docs/tiles.md), so resident probes are not required here.
#[test]
fn footprint_codes_with_the_samples_own_residency_code_on_the_hardware_path() {
    with_gpu(|set| {
        let device = &set.devices()[0];
        let path = ResidencyPath::Hardware;
        with_textures(device, path, 2, |partial, twin| {
            let probes = [
                lod(190.5, 190.5, 0.25),
                lod(255.9, 190.5, 0.0),
                lod(255.2, 190.5, 0.5),
                grad(200.5, 190.5, 16.0, 1.0),
                grad(250.5, 190.5, 16.0, 1.0),
                grad(240.5, 190.5, 32.0, 2.0),
            ];
            let got = sample(
                device,
                &shaders::SPARSE_FOOTPRINT_CODES,
                path,
                (partial, twin),
                Filter::Anisotropic(16),
                16.0,
                u32::MAX,
                &probes,
            );
            for (i, (p, a)) in probes.iter().zip(&got).enumerate() {
                if a.resident && a.twin_resident {
                    assert!(
                        a.texel.iter().zip(a.twin).all(|(g, w)| (g - w).abs() <= 0.01),
                        "probe {i} {p:?}: {a:?}"
                    );
                } else if !a.resident {
                    assert_eq!(a.texel, DEFAULT.map(|v| v * 255.0), "probe {i} {p:?}");
                }
            }
            assert!(!got[1].resident && !got[2].resident && !got[4].resident && !got[5].resident, "{got:?}");
        });
    });
}

/// The minimum-LOD clamp variant (`residencySampleGradClamp`: `sparseTextureGradClampARB`, with
/// residency codes) needs `shaderResourceMinLod`: without it (lavapipe) the program is a typed
/// error and nothing is created; with it, the clamp's footprint answers as the others do.
#[test]
fn footprint_codes_with_the_hardware_lod_clamp() {
    with_gpu(|set| {
        let device = &set.devices()[0];
        let shader = &shaders::SPARSE_FOOTPRINT_CLAMP;
        if !device.features().shader_resource_min_lod {
            let before = device.ledger().live_objects().len();
            let e = ComputeProgram::new(device, "clamp", shader, 1).map(|_| ()).unwrap_err();
            assert!(
                matches!(e, ProgramError::CapabilityMissing { feature: "shaderResourceMinLod", .. }),
                "{e}"
            );
            assert_eq!(e.class(), residency_vulkan::ErrorClass::Unsupported);
            assert_eq!(device.ledger().live_objects().len(), before);
            return;
        }
        let path = ResidencyPath::Hardware;
        with_textures(device, path, 10, |partial, twin| {
            let clamp = |x: f32, ax: f32, ay: f32| Probe { mode: Mode::GradClamp, ..grad(x, 190.5, ax, ay) };
            let probes = [clamp(200.5, 16.0, 1.0), clamp(250.5, 16.0, 1.0), clamp(255.9, 1.0, 1.0)];
            let got = sample(
                device,
                shader,
                path,
                (partial, twin),
                Filter::Anisotropic(16),
                16.0,
                u32::MAX,
                &probes,
            );
            check_honest("clamp", &probes, &got);
            // The taps across the mip-0 edge are clamped to mip 2, the whole one.
            assert!(
                got[1].resident && got[1].used_lod == 2.0 && got[2].resident && got[2].used_lod == 2.0,
                "{got:?}"
            );
        });
    });
}

/// The fragment shader's clamp variant (`residencySampleClamp`, `sparseTextureClampARB` at the
/// fragment's implicit LOD) compiles into a shipped shader; without `shaderResourceMinLod`
/// (lavapipe) its program is a typed error that creates nothing, with it the program is made.
#[test]
fn the_fragment_clamp_variant_needs_shader_resource_min_lod() {
    with_gpu(|set| {
        let device = &set.devices()[0];
        let before = device.ledger().live_objects().len();
        let attributes = [
            VertexAttribute { location: 0, format: vk::Format::R32G32B32_SFLOAT, offset: 0 },
            VertexAttribute { location: 1, format: vk::Format::R32G32_SFLOAT, offset: 12 },
        ];
        let made = GraphicsProgram::new(
            device,
            "clamp",
            &shaders::VT_QUAD_VERT,
            &shaders::SPARSE_CLAMP_FRAG,
            20,
            &attributes,
            vk::Format::R8G8B8A8_UNORM,
            1,
        );
        if device.features().shader_resource_min_lod {
            drop(made.unwrap());
        } else {
            let e = made.map(|_| ()).unwrap_err();
            assert!(
                matches!(e, ProgramError::CapabilityMissing { feature: "shaderResourceMinLod", .. }),
                "{e}"
            );
        }
        device.wait_idle().unwrap();
        device.maintain();
        assert_eq!(device.ledger().live_objects().len(), before);
    });
}

/// A texture whose sizes are not powers of two (500 × 300: partial tiles at the right and bottom
/// edges, mip tiles that do not halve): the sweep across the mip-0 and mip-1 edges, explicit and
/// 1× / 16× gradient samples, never answers "resident" with other data than the twin's, and
/// always finds a fallback.
fn npot_sweep(device: &Arc<Device>, path: ResidencyPath) {
    let name = format!("{} npot", path.name());
    let (w, h) = (500.0f32, 300.0f32);
    let desc = SparseImageDesc::new_2d(Format::R8G8B8A8Unorm, 500, 300);
    let uploader = Uploader::new(device, "footprint uploads", 16 << 20).unwrap();
    let (partial, twin) = textures(device, path, desc, &uploader);
    let mut sweep = Vec::new();
    for i in 0..40 {
        let x = 236.0 + i as f32 * 0.9;
        for q in 0..9 {
            let l = q as f32 * 0.375;
            let along = 2f32.powf(l);
            for (px, py) in [(x, 190.5), (190.5, x.min(299.0))] {
                let uv = [px / w, py / h];
                sweep.push(Probe { uv, lod: l, mode: Mode::Lod, dx: [0.0; 2], dy: [0.0; 2] });
                let dx = [16.0 * along / w, 0.0];
                let dy = [0.0, along / h];
                sweep.push(Probe { uv, lod: 0.0, mode: Mode::Grad, dx, dy });
            }
        }
    }
    let filter = if path == ResidencyPath::Software { Filter::Trilinear } else { Filter::Anisotropic(16) };
    for (filter, max) in [(Filter::Trilinear, 1.0), (filter, 16.0)] {
        let got = sample(device, shader_of(path), path, (&partial, &twin), filter, max, u32::MAX, &sweep);
        check_honest(&format!("{name} {max}x"), &sweep, &got);
        assert!(got.iter().all(|a| a.resident), "{name} {max}x: every probe has a fallback");
        assert!(got.iter().zip(&sweep).any(|(a, p)| p.mode == Mode::Lod && a.used_lod == p.lod), "{name}");
    }
    uploader.destroy().unwrap();
    partial.destroy(device);
    twin.destroy(device);
}

#[test]
fn footprint_codes_hold_on_sizes_that_are_not_powers_of_two_on_both_paths() {
    with_gpu(|set| PATHS.into_iter().for_each(|path| npot_sweep(&set.devices()[0], path)));
}
