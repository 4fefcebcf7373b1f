//! The seed's two texture-array use cases on sparse residency:
//!
//! 1. **A sparsely populated texture array**: 64 slices of 256² RGBA8 with full mip chains, of
//!    which four are resident. One bind serves every slice; a sample of a populated slice returns
//!    its texel, a sample of an empty one the default value with a non-resident code.
//! 2. **An array of variable-sized textures**, streamed: a sliced array on the library's
//!    [`Streamer`] (`Streamer::add_sliced_texture`): 8 slices of 512² where slice `s` holds a
//!    texture of `512 >> bias[s]` texels (its own source, filling the array's mips from `bias[s]`
//!    down), and the streamer's per-slice LOD-bias buffer, which
//!    `crates/residency-vulkan/shaders/slice_bias.comp` adds to every sample's LOD through
//!    `residency_slices.glsl`. The shader's own feedback streams each slice's tiles. With the
//!    biases the streamer set, every slice samples its own finest level at LOD 0;
//!    `Streamer::set_slice_bias` changes the level sampled (coarser levels of the same texture);
//!    a bias finer than a slice's texture is refused.
//!
//! Prints the resident bytes of each against the same array fully resident.
//!
//! Run: `RESIDENCY_VALIDATION=sync cargo run --example texture_array`

use residency::vulkan::ash::vk;
use residency::vulkan::compute::{Binding, ComputeProgram};
use residency::vulkan::recording::MemoryDependency;
use residency::vulkan::shaders;
use residency::vulkan::sparse::{
    ResidencyPath, SparseImage, SparseImageDesc, SparseTilePool, TexelRegion, TilePoolDesc,
};
use residency::vulkan::streaming::{
    FnSource, StreamError, Streamer, StreamerDesc, TextureViews, TileSource, VirtualTexture, VtDesc,
};
use residency::vulkan::{
    Buffer, BufferDesc, BufferUsage, CommandContext, Device, DeviceSet, DeviceSetDesc, Filter, Format,
    ImageRegion, MemoryIntent, Sampler, Uploader,
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
/// Biases set with `Streamer::set_slice_bias` for the second pass: each at or above the slice's
/// finest level, so every sample reads that coarser level of the slice's texture.
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
    /// Per slice of the variable-sized array, the LOD sampled at LOD 0 with the biases the
    /// streamer set ([`BIAS`], each slice's finest level).
    pub levels_biased: Vec<f32>,
    /// The LOD sampled per slice with [`BIAS_COARSER`].
    pub levels_coarser: Vec<f32>,
    /// Per slice, whether the streamer refused a bias of 0 (finer than the slice's texture).
    pub refused_below_finest: Vec<bool>,
    /// Frames the streamer ran until every sample of a pass read its level.
    pub frames: u32,
    /// Samples of the variable-sized array (both passes), and those as expected (resident, the
    /// texel of the level sampled).
    pub variable_probes: usize,
    /// Samples of the variable-sized array as expected.
    pub variable_matched: usize,
    /// Resident bytes of the variable-sized array (the streamer's tiles), and its bytes with every
    /// slice at full size.
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
            && self.refused_below_finest.len() == BIAS.len()
            && self.refused_below_finest.iter().zip(BIAS).all(|(&r, b)| r == (b != 0))
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
    let mut bias = device.create_buffer(
        &BufferDesc::new("no LOD bias", 256 * 16, BufferUsage::UNIFORM).with_intent(MemoryIntent::Upload),
    )?;
    bias.write(0, &[0u8; 256 * 16])?;
    let prober = Prober {
        device,
        program: ComputeProgram::new(device, "texture_array.comp", &shaders::TEXTURE_ARRAY, 3)?,
        sampler: device.create_sampler(Filter::Nearest)?,
        bias,
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

    drop(prober);
    uploader.destroy()?;
    drop(pool);

    // 2. Variable-sized textures: a sliced array on the streamer, slice s a texture of
    //    VARIABLE_SIDE >> BIAS[s] texels; the streamer's bias buffer; the shader's own feedback.
    variable_textures(device, &mut outcome)?;
    Ok(outcome)
}

/// The texture of slice `layer`: `VARIABLE_SIDE >> finest` texels, its mip `m` the array level
/// `finest + m` ([`texel`] of that level).
fn slice_texture(layer: u32, finest: u32) -> Arc<dyn TileSource> {
    let side = VARIABLE_SIDE >> finest;
    let desc = VtDesc::new(Format::R8G8B8A8Unorm, side, side, 128, 128);
    Arc::new(FnSource::new(format!("slice {layer}: {side}²"), desc, move |mip, x, y| {
        let (w, h) = desc.tile_extent(mip, x, y).expect("in the grid");
        Ok((0..h)
            .flat_map(|ty| (0..w).flat_map(move |tx| texel(x * 128 + tx, y * 128 + ty, finest + mip, layer)))
            .collect())
    }))
}

/// What a streamed sample returned: the texel (× 255, rounded), its residency code, the LOD used.
type Streamed = ([u8; 4], i32, f32);

/// The streamed frames of part 2: `slice_bias.comp` samples the probes through the frame's
/// bindings and writes their feedback.
struct Frames<'a> {
    device: &'a Arc<Device>,
    program: ComputeProgram,
    sampler: Sampler,
    commands: CommandContext,
    input: Buffer,
    output: Buffer,
    count: u32,
}

impl Frames<'_> {
    /// One frame; returns what it sampled: (texel, code, LOD used) per probe.
    fn frame(
        &self,
        streamer: &mut Streamer,
        texture: &VirtualTexture,
    ) -> Result<Vec<Streamed>, Box<dyn std::error::Error>> {
        use vk::{AccessFlags2 as A, PipelineStageFlags2 as S};
        let bindings = streamer.begin_frame()?;
        let binding = bindings.texture(texture).ok_or("the streamer's texture")?;
        let TextureViews::Hardware { image, min_lod } = binding.views else {
            return Err("sliced arrays stream on the hardware path".into());
        };
        let general = vk::ImageLayout::GENERAL;
        let set = self.program.descriptor_set(&[
            Binding::sampled(image, &self.sampler, general),
            Binding::sampled(min_lod, &self.sampler, general),
            Binding::Buffer(binding.slice_bias.ok_or("a sliced array's bias buffer")?),
            Binding::Buffer(&self.input),
            Binding::Buffer(&self.output),
            Binding::Buffer(bindings.feedback.ok_or("a feedback buffer")?),
            Binding::Buffer(bindings.image_table.ok_or("an image table")?),
        ])?;
        let mut push: Vec<u8> = DEFAULT.iter().flat_map(|f| f.to_le_bytes()).collect();
        let writes = u32::from(bindings.feedback_active);
        for word in [self.count, u32::MAX, u32::from(binding.feedback_slot), writes] {
            push.extend_from_slice(&word.to_le_bytes());
        }
        let groups = [self.count.div_ceil(64), 1, 1];
        self.program.check_dispatch(&push, groups)?;
        let submission = self.commands.submit(&[], |rec| {
            let dispatched = bindings.record(rec, |rec| {
                self.program.dispatch(rec, &set, &push, groups).expect("checked before the submission")
            });
            dispatched.expect("recorded once, on this device");
            rec.memory_barrier(MemoryDependency {
                src_stages: S::COMPUTE_SHADER,
                src_access: A::SHADER_WRITE,
                dst_stages: S::HOST,
                dst_access: A::HOST_READ,
            })
            .expect("a host barrier");
        })?;
        drop(bindings);
        let until = submission.gpu_use();
        streamer.end_frame(until)?;
        self.device.wait_until(&until)?;
        let mut out = vec![0u8; self.count as usize * 32];
        self.output.read(0, &mut out)?;
        drop(set);
        Ok(out
            .chunks_exact(32)
            .map(|r| {
                let f = |i: usize| f32::from_le_bytes([r[i], r[i + 1], r[i + 2], r[i + 3]]);
                ([f(0), f(4), f(8), f(12)].map(|v| (v * 255.0).round() as u8), f(16) as i32, f(20))
            })
            .collect())
    }
}

/// Part 2 of [`run`].
fn variable_textures(device: &Arc<Device>, outcome: &mut Outcome) -> Result<(), Box<dyn std::error::Error>> {
    let mut streamer = Streamer::new(
        device,
        StreamerDesc::default()
            .with_name("variable-sized textures")
            .with_path(ResidencyPath::Hardware)
            .with_budget_tiles(256)
            .with_frames_in_flight(2),
    )?;
    let slices: Vec<Option<Arc<dyn TileSource>>> =
        (0..VARIABLE_SLICES).map(|s| Some(slice_texture(s, BIAS[s as usize]))).collect();
    let desc = VtDesc::new(Format::R8G8B8A8Unorm, VARIABLE_SIDE, VARIABLE_SIDE, 128, 128);
    let texture = streamer.add_sliced_texture("variable-sized textures", desc, &slices)?;
    let layout = streamer.manager().residency(texture.id()).ok_or("registered")?.layout().clone();
    let mips = layout.mip_levels();
    // Probes at mip-0 texels of the array (the same uv in every slice's texture), LOD 0.
    let probes: Vec<Probe> = (0..VARIABLE_SLICES)
        .flat_map(|layer| [(3, 7), (300, 411), (511, 0)].map(|(x, y)| Probe { x, y, layer, lod: 0 }))
        .collect();
    let uv = |v: u32| (v as f32 + 0.5) / VARIABLE_SIDE as f32;
    let bytes: Vec<u8> = probes
        .iter()
        .flat_map(|p| [uv(p.x), uv(p.y), p.layer as f32, p.lod as f32])
        .flat_map(f32::to_le_bytes)
        .collect();
    let n = probes.len() as u64;
    let mut input = device.create_buffer(
        &BufferDesc::new("slice probes", n * 16, BufferUsage::STORAGE).with_intent(MemoryIntent::Upload),
    )?;
    input.write(0, &bytes)?;
    let frames = Frames {
        device,
        program: ComputeProgram::new(device, "slice_bias.comp", &shaders::SLICE_BIAS, 2)?,
        sampler: device.create_sampler(Filter::Nearest)?,
        commands: CommandContext::new(device, "variable-sized texture frames")?,
        input,
        output: device.create_buffer(
            &BufferDesc::new("slice results", n * 32, BufferUsage::STORAGE)
                .with_intent(MemoryIntent::Readback),
        )?,
        count: n as u32,
    };
    for (what, bias) in [("biased", BIAS), ("coarser", BIAS_COARSER)] {
        if what == "coarser" {
            for (s, &b) in bias.iter().enumerate() {
                streamer.set_slice_bias(&texture, s as u32, b)?;
            }
        }
        let level = |p: &Probe| (p.lod + bias[p.layer as usize]).min(mips - 1);
        // The shader's feedback streams what the probes want; a few frames until it all arrived.
        let mut got = Vec::new();
        for _ in 0..24 {
            got = frames.frame(&mut streamer, &texture)?;
            outcome.frames += 1;
            if probes.iter().zip(&got).all(|(p, g)| g.2 == level(p) as f32) {
                break;
            }
            streamer.wait_for_loads();
        }
        let mut levels = vec![f32::NAN; VARIABLE_SLICES as usize];
        for (p, &(rgba, code, lod)) in probes.iter().zip(&got) {
            let level = level(p);
            levels[p.layer as usize] = lod;
            outcome.variable_probes += 1;
            if lod == level as f32
                && code & 1 == 1
                && rgba == texel(p.x >> level, p.y >> level, level, p.layer)
            {
                outcome.variable_matched += 1;
            }
        }
        println!("  biases {bias:?} ({what}): LOD sampled per slice {levels:?}");
        match what {
            "biased" => outcome.levels_biased = levels,
            _ => outcome.levels_coarser = levels,
        }
    }
    // A bias finer than a slice's texture: refused (a typed error), nothing changed.
    for s in 0..VARIABLE_SLICES {
        let before = streamer.slice_bias(&texture, s)?;
        match streamer.set_slice_bias(&texture, s, 0) {
            Err(StreamError::SliceBiasOutOfRange { .. }) => {
                outcome.refused_below_finest.push(true);
                if streamer.slice_bias(&texture, s)? != before {
                    return Err("a refused bias changed the slice".into());
                }
            }
            Ok(()) => outcome.refused_below_finest.push(false),
            Err(e) => return Err(e.into()),
        }
    }
    outcome.variable_resident_bytes =
        streamer.manager().pool().used_tiles() * streamer.manager().pool().tile_bytes();
    outcome.variable_full_bytes = layout.virtual_bytes();
    println!(
        "variable-sized textures, {VARIABLE_SLICES} slices of up to {VARIABLE_SIDE}² with biases {BIAS:?}, \
         streamed in {} frames: {}/{} samples as expected, resident {} KiB of {} KiB at full size",
        outcome.frames,
        outcome.variable_matched,
        outcome.variable_probes,
        outcome.variable_resident_bytes >> 10,
        outcome.variable_full_bytes >> 10
    );
    streamer.remove_texture(texture)?;
    drop(frames);
    drop(streamer);
    Ok(())
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
