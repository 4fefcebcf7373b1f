//! The seed's two texture-array use cases on sparse residency:
//!
//! 1. **A sparsely populated texture array**: 64 slices of 256² RGBA8 with full mip chains, of
//!    which four are resident. One bind serves every slice; a sample of a populated slice returns
//!    its texel, a sample of an empty one the default value with a non-resident code.
//! 2. **An array of variable-sized textures**: 8 slices of 512² where slice `s` holds a texture of
//!    `512 >> bias[s]` texels — only its mips from `bias[s]` down are populated — and a uniform
//!    buffer holds the per-slice LOD bias, which `crates/residency-vulkan/shaders/texture_array.comp` adds to
//!    every sample's LOD. With the biases in the buffer, every slice samples its own finest level at LOD
//!    0; changing the buffer changes the level sampled (coarser levels of the same texture), and
//!    with no bias the slices whose finest levels are absent read non-resident.
//!
//! Prints the resident bytes of each against the same array fully resident.
//!
//! Run: `RESIDENCY_VALIDATION=sync cargo run --example texture_array`

use residency::vulkan::ash::vk;
use residency::vulkan::compute::{Binding, ComputeProgram};
use residency::vulkan::shaders;
use residency::vulkan::sparse::{SparseImage, SparseImageDesc, SparseTilePool, TexelRegion, TilePoolDesc};
use residency::vulkan::{
    Buffer, BufferDesc, BufferUsage, Device, DeviceSet, DeviceSetDesc, Filter, Format, ImageRegion,
    MemoryIntent, Sampler, Uploader,
};
use std::sync::Arc;

/// Slices of the sparsely populated array, its side, and the slices that are resident.
const SPARSE_SLICES: u32 = 64;
const SPARSE_SIDE: u32 = 256;
const POPULATED: [u32; 4] = [3, 17, 40, 63];

/// Slices of the array of variable-sized textures and its side.
const VARIABLE_SLICES: u32 = 8;
const VARIABLE_SIDE: u32 = 512;
/// The LOD bias of each slice: slice `s` holds a texture of `VARIABLE_SIDE >> BIAS[s]` texels.
pub const BIAS: [u32; 8] = [0, 1, 2, 3, 0, 1, 2, 3];
/// Biases written into the uniform buffer for the second pass: each at or above the slice's first
/// populated level, so every sample is resident and reads that coarser level.
pub const BIAS_COARSER: [u32; 8] = [1, 2, 3, 4, 2, 3, 4, 5];

const DEFAULT: [f32; 4] = [1.0, 0.0, 1.0, 1.0];

/// The texel at (x, y) of `mip` of slice `layer`.
fn texel(x: u32, y: u32, mip: u32, layer: u32) -> [u8; 4] {
    [(x % 251) as u8, (y % 241) as u8, (mip * 20) as u8, (layer * 3 + 1) as u8]
}

/// A sample: mip-0 texel (x, y) of `layer` at `lod` (before the slice's bias).
#[derive(Clone, Copy, Debug)]
struct Probe {
    x: u32,
    y: u32,
    layer: u32,
    lod: u32,
}

/// What a sample returned: the texel (× 255, rounded), resident, the LOD sampled.
type Sampled = ([u8; 4], bool, f32);

/// What the example checked, for the test that runs it.
#[derive(Debug, Default)]
pub struct Outcome {
    /// Samples of the sparsely populated array, and those that came back as expected (populated
    /// slices: the texel, resident; empty ones: the default, not resident).
    pub sparse_probes: usize,
    /// Samples of the sparsely populated array as expected.
    pub sparse_matched: usize,
    /// Resident bytes of the sparsely populated array, and its bytes fully resident.
    pub sparse_resident_bytes: u64,
    /// Bytes of the sparsely populated array fully resident.
    pub sparse_full_bytes: u64,
    /// Per slice of the variable-sized array, the LOD sampled at LOD 0 with [`BIAS`] in the
    /// uniform buffer, then with [`BIAS_COARSER`].
    pub levels_biased: Vec<f32>,
    /// The LOD sampled per slice with [`BIAS_COARSER`].
    pub levels_coarser: Vec<f32>,
    /// Per slice, whether a sample at LOD 0 with no bias was resident.
    pub resident_unbiased: Vec<bool>,
    /// Samples of the variable-sized array (all three passes), and those as expected (texel of
    /// the level sampled, residency as the populated levels say).
    pub variable_probes: usize,
    /// Samples of the variable-sized array as expected.
    pub variable_matched: usize,
    /// Resident bytes of the variable-sized array, and its bytes with every slice at full size.
    pub variable_resident_bytes: u64,
    /// Bytes of the variable-sized array with every slice at full size.
    pub variable_full_bytes: u64,
}

impl Outcome {
    /// Whether the example's own checks passed.
    pub fn passed(&self) -> bool {
        let levels = |got: &[f32], want: &[u32]| {
            got.len() == want.len() && got.iter().zip(want).all(|(&g, &w)| g == w as f32)
        };
        self.sparse_matched == self.sparse_probes
            && self.variable_matched == self.variable_probes
            && levels(&self.levels_biased, &BIAS)
            && levels(&self.levels_coarser, &BIAS_COARSER)
            && self.resident_unbiased.iter().zip(BIAS).all(|(&r, b)| r == (b == 0))
            && self.sparse_resident_bytes < self.sparse_full_bytes
            && self.variable_resident_bytes < self.variable_full_bytes
    }
}

struct Prober<'a> {
    device: &'a Arc<Device>,
    program: ComputeProgram,
    sampler: Sampler,
    bias: Buffer,
}

impl Prober<'_> {
    /// Writes `bias` (per slice) into the uniform buffer. The previous dispatch has completed:
    /// `submit_compute` waits for it.
    fn set_bias(&mut self, bias: &[u32]) -> Result<(), Box<dyn std::error::Error>> {
        let mut bytes = vec![0u8; 256 * 16];
        for (s, &b) in bias.iter().enumerate() {
            bytes[s * 16..s * 16 + 4].copy_from_slice(&(b as f32).to_le_bytes());
        }
        self.bias.write(0, &bytes)?;
        Ok(())
    }

    fn run(
        &self,
        image: &SparseImage,
        side: u32,
        probes: &[Probe],
    ) -> Result<Vec<Sampled>, Box<dyn std::error::Error>> {
        let device = self.device;
        let n = probes.len() as u64;
        let mut input = device.create_buffer(
            &BufferDesc::new("array probes", n * 16, BufferUsage::STORAGE).with_intent(MemoryIntent::Upload),
        )?;
        let output = device.create_buffer(
            &BufferDesc::new("array results", n * 32, BufferUsage::STORAGE)
                .with_intent(MemoryIntent::Readback),
        )?;
        let uv = |v: u32| (v as f32 + 0.5) / side as f32;
        let bytes: Vec<u8> = probes
            .iter()
            .flat_map(|p| [uv(p.x), uv(p.y), p.layer as f32, p.lod as f32])
            .flat_map(f32::to_le_bytes)
            .collect();
        input.write(0, &bytes)?;
        let set = self.program.descriptor_set(&[
            Binding::sampled(image, &self.sampler, vk::ImageLayout::GENERAL),
            Binding::Buffer(&self.bias),
            Binding::Buffer(&input),
            Binding::Buffer(&output),
        ])?;
        let mut push: Vec<u8> = DEFAULT.iter().flat_map(|f| f.to_le_bytes()).collect();
        push.extend_from_slice(&(n as u32).to_le_bytes());
        push.resize(32, 0);
        let groups = [(n as u32).div_ceil(64), 1, 1];
        self.program.check_dispatch(&push, groups)?;
        device.submit_compute("sample the texture array", |rec| {
            self.program.dispatch(rec, &set, &push, groups).expect("checked before the submission");
        })?;
        let mut out = vec![0u8; (n * 32) as usize];
        output.read(0, &mut out)?;
        Ok(out
            .chunks_exact(32)
            .map(|r| {
                let f = |i: usize| f32::from_le_bytes([r[i], r[i + 1], r[i + 2], r[i + 3]]);
                ([f(0), f(4), f(8), f(12)].map(|v| (v * 255.0).round() as u8), f(16) == 1.0, f(20))
            })
            .collect())
    }
}

/// Commits and uploads mips `first..` of slice `layer` (the mip tail with them where the device has
/// one).
fn populate(
    pool: &SparseTilePool,
    uploader: &Uploader,
    image: &mut SparseImage,
    layer: u32,
    first: u32,
) -> Result<(), Box<dyn std::error::Error>> {
    let mips = image.layout().mip_levels();
    for mip in first..mips {
        let e = image.layout().mip(mip).ok_or("no such mip")?.extent;
        image.commit_region(pool, layer, mip, TexelRegion { offset: [0; 3], extent: [e[0], e[1], 1] })?;
    }
    pool.flush_binds(&mut [image])?;
    for mip in first..mips {
        let e = image.layout().mip(mip).ok_or("no such mip")?.extent;
        let data: Vec<u8> =
            (0..e[1]).flat_map(|y| (0..e[0]).flat_map(move |x| texel(x, y, mip, layer))).collect();
        uploader
            .write_image(&ImageRegion::new(&*image, mip, [0; 3], [e[0], e[1], 1]).with_layer(layer), &data)?;
    }
    Ok(())
}

/// Runs the example on `device`.
pub fn run(device: &Arc<Device>) -> Result<Outcome, Box<dyn std::error::Error>> {
    let pool = SparseTilePool::new(
        Arc::clone(device),
        TilePoolDesc::default().with_name("texture array tiles").with_tiles_per_heap(256),
    )?;
    let uploader = Uploader::new(device, "texture arrays", 8 << 20)?;
    let mut prober = Prober {
        device,
        program: ComputeProgram::new(device, "texture_array.comp", &shaders::TEXTURE_ARRAY, 3)?,
        sampler: device.create_sampler(Filter::Nearest)?,
        bias: device.create_buffer(
            &BufferDesc::new("per-slice LOD bias", 256 * 16, BufferUsage::UNIFORM)
                .with_intent(MemoryIntent::Upload),
        )?,
    };
    let tile_bytes = pool.stats().tile_bytes;
    let mut outcome = Outcome::default();

    // 1. A sparsely populated array: four of 64 slices resident.
    let desc = SparseImageDesc::new_2d(Format::R8G8B8A8Unorm, SPARSE_SIDE, SPARSE_SIDE)
        .with_array_layers(SPARSE_SLICES);
    let mut sparse = SparseImage::new(&pool, "sparsely populated array", &desc, false)?;
    for &layer in &POPULATED {
        populate(&pool, &uploader, &mut sparse, layer, 0)?;
    }
    uploader.wait_idle()?;
    outcome.sparse_resident_bytes = pool.used_tiles() * tile_bytes;
    outcome.sparse_full_bytes = sparse.layout().virtual_bytes();
    prober.set_bias(&[0; 256])?;
    let probes: Vec<Probe> = (0..SPARSE_SLICES)
        .flat_map(|layer| [(5, 9), (200, 130)].map(|(x, y)| Probe { x, y, layer, lod: 0 }))
        .collect();
    let got = prober.run(&sparse, SPARSE_SIDE, &probes)?;
    outcome.sparse_probes = probes.len();
    outcome.sparse_matched = probes
        .iter()
        .zip(&got)
        .filter(|(p, (rgba, resident, lod))| {
            let want = POPULATED.contains(&p.layer);
            *lod == 0.0
                && *resident == want
                && *rgba
                    == if want {
                        texel(p.x, p.y, 0, p.layer)
                    } else {
                        DEFAULT.map(|v| (v * 255.0).round() as u8)
                    }
        })
        .count();
    println!(
        "{}: sparsely populated array, {} of {SPARSE_SLICES} slices of {SPARSE_SIDE}²: {}/{} samples as \
         expected, resident {} KiB of {} KiB",
        device.name(),
        POPULATED.len(),
        outcome.sparse_matched,
        outcome.sparse_probes,
        outcome.sparse_resident_bytes >> 10,
        outcome.sparse_full_bytes >> 10
    );
    device.wait_idle()?;
    sparse.release_all(&pool)?;
    pool.flush_binds(&mut [&mut sparse])?;
    drop(sparse);

    // 2. Variable-sized textures: slice s populated from mip BIAS[s]; the bias in a uniform buffer.
    let desc = SparseImageDesc::new_2d(Format::R8G8B8A8Unorm, VARIABLE_SIDE, VARIABLE_SIDE)
        .with_array_layers(VARIABLE_SLICES);
    let mut variable = SparseImage::new(&pool, "variable-sized textures", &desc, false)?;
    let mips = variable.layout().mip_levels();
    for layer in 0..VARIABLE_SLICES {
        populate(&pool, &uploader, &mut variable, layer, BIAS[layer as usize])?;
    }
    uploader.wait_idle()?;
    outcome.variable_resident_bytes = pool.used_tiles() * tile_bytes;
    outcome.variable_full_bytes = variable.layout().virtual_bytes();
    let probes: Vec<Probe> = (0..VARIABLE_SLICES)
        .flat_map(|layer| [(3, 7), (300, 411), (511, 0)].map(|(x, y)| Probe { x, y, layer, lod: 0 }))
        .collect();
    let passes: [(&str, [u32; 8]); 3] = [("biased", BIAS), ("coarser", BIAS_COARSER), ("unbiased", [0; 8])];
    for (what, bias) in passes {
        prober.set_bias(&bias)?;
        let got = prober.run(&variable, VARIABLE_SIDE, &probes)?;
        let mut levels = vec![f32::NAN; VARIABLE_SLICES as usize];
        let mut resident_at = vec![true; VARIABLE_SLICES as usize];
        for (p, (rgba, resident, lod)) in probes.iter().zip(&got) {
            let level = (p.lod + bias[p.layer as usize]).min(mips - 1);
            let populated = level >= BIAS[p.layer as usize];
            let want = if populated {
                texel(p.x >> level, p.y >> level, level, p.layer)
            } else {
                DEFAULT.map(|v| (v * 255.0).round() as u8)
            };
            levels[p.layer as usize] = *lod;
            resident_at[p.layer as usize] &= *resident;
            outcome.variable_probes += 1;
            if *lod == level as f32 && *resident == populated && *rgba == want {
                outcome.variable_matched += 1;
            }
        }
        println!("  bias {bias:?} ({what}): LOD sampled per slice {levels:?}, resident {resident_at:?}");
        match what {
            "biased" => outcome.levels_biased = levels,
            "coarser" => outcome.levels_coarser = levels,
            _ => outcome.resident_unbiased = resident_at,
        }
    }
    println!(
        "variable-sized textures, {VARIABLE_SLICES} slices of up to {VARIABLE_SIDE}² with biases {BIAS:?}: \
         {}/{} samples as expected, resident {} KiB of {} KiB at full size",
        outcome.variable_matched,
        outcome.variable_probes,
        outcome.variable_resident_bytes >> 10,
        outcome.variable_full_bytes >> 10
    );

    device.wait_idle()?;
    variable.release_all(&pool)?;
    pool.flush_binds(&mut [&mut variable])?;
    drop((prober, variable));
    uploader.destroy()?;
    drop(pool);
    Ok(outcome)
}

#[allow(dead_code, reason = "the test that runs this example calls `run` and not `main`")]
fn main() -> Result<(), Box<dyn std::error::Error>> {
    tracing_subscriber::fmt().with_env_filter("warn").init();
    let set = DeviceSet::new(&DeviceSetDesc::default())?;
    let outcome = run(&set.devices()[0])?;
    let problems = set.validation_log().problem_count();
    drop(set);
    let leaks = residency::vulkan::LEAKS_AT_TEARDOWN.load(std::sync::atomic::Ordering::SeqCst);
    println!("validation problems: {problems}; leaked at teardown: {leaks}");
    if !outcome.passed() || problems != 0 || leaks != 0 {
        return Err("the example failed its checks".into());
    }
    Ok(())
}
