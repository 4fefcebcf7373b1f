//! Stereo on two devices: one scene, the left eye rendered on device 0 and the right eye on
//! device 1 in the same frame, each from its own submission.
//!
//! The scene lives on every device (`DeviceMask::ALL`): its meshes (a ground plane and three
//! upright panels, one vertex buffer broadcast to every device), two ordinary textures (mipmapped
//! images uploaded to every device) and one streamed virtual texture on the ground (a procedural
//! 2048² texture, streamed on each device by its own streamer from its own eye's fragment-shader
//! feedback, all streamers reading through one decoded-tile cache, so a tile decoded for one eye
//! is not decoded again for the other). The two programs (`vt_quad.vert` with `vt_quad.frag` /
//! `vt_quad_software.frag` for the ground, `vt_quad_reference.frag` for the panels) are described
//! once and created on each device at first use. Per frame, each device draws its eye: the
//! streamer's part, the ground (cleared), the panels over it, a copy to a read-back buffer, GPU
//! timestamps around it all (one `MultiTimestamps`).
//!
//! The loop keeps to 90 frames a second; the camera rests, so both devices' feedback settles. Then device 0 alone draws both views (the
//! single-device render) until its own feedback settles, and each eye of the stereo frame is
//! compared with the same view drawn on device 0.
//!
//! Devices: by default the first device opened twice (`logical_per_physical = 2`: lavapipe twice,
//! or one GPU twice); `all` takes every device there is (at least two, repeating if need be).
//! The ground's path: `auto` (default), `hardware` or `software`.
//!
//! Barriers: each eye's own barriers come from its state tracker (`ResourceTracker`: each use
//! declared, the barriers the target's and read-back buffer's states require). `full-barriers`
//! runs the comparison of before the tracker: a full barrier (`ALL_COMMANDS`, every memory
//! access) before and after each eye and every use declared as all commands and all memory, as
//! `MultiSubmitter`'s `BarrierMode::Full` orders work items. The example prints the barriers it
//! records per eye frame (commands and barrier structures; the streamer's part records its own,
//! the same in both modes) and the eyes' GPU time (timestamps).
//!
//! Run: `RESIDENCY_VALIDATION=sync cargo run --release --example stereo [-- [all] [auto|hardware|software] [full-barriers]]`

use residency::vulkan::ash::vk;
use residency::vulkan::compute::{Binding, DescriptorSet, ViewRef};
use residency::vulkan::graphics::{Drawing, GraphicsProgram, VertexAttribute};
use residency::vulkan::multi::streaming::{MultiStreamer, MultiVirtualTexture};
use residency::vulkan::multi::work::{MultiGraphicsProgram, MultiSubmitter, MultiTimestamps};
use residency::vulkan::multi::{MultiBuffer, MultiDevice, MultiImage, MultiUploader};
use residency::vulkan::recording::MemoryDependency;
use residency::vulkan::recording::Recording;
use residency::vulkan::sparse::ResidencyPath;
use residency::vulkan::streaming::{
    CacheStats, DecodedTileCache, FeedbackSampling, FnSource, FrameBindings, StreamerDesc, TextureViews,
    TileSource, VtDesc,
};
use residency::vulkan::tracking::{
    AccessFlags, CustomUse, PipelineStages, Region, ResourceId, ResourceTracker, TrackerOptions, Use,
};
use residency::vulkan::{
    shaders, Buffer, BufferDesc, BufferUsage, Device, DeviceIndex, DeviceMask, DeviceSet, DeviceSetDesc,
    Filter, Format, Image, ImageDesc, ImageRegion, ImageUsage, ImageView, MemoryIntent, Sampler,
};
use std::sync::Arc;
use std::time::{Duration, Instant};

type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>;

/// Frames each phase draws at most (it stops once the feedback has settled, usually within a
/// dozen frames).
pub const FRAMES: u64 = 120;
/// The frame rate the loop keeps to, as a headset's renderer would (the tile loads run on the
/// streamers' workers meanwhile).
const FRAME_TIME: Duration = Duration::from_micros(11_111);
/// Each eye's side in pixels.
const SIDE: u32 = 128;
/// `vt_quad.vert`'s vertex: position (vec3), uv (vec2).
const VERTEX_BYTES: u32 = 20;
/// The streamed ground texture's side.
const GROUND_SIDE: u32 = 2048;
/// The panels' textures' side (mipmapped).
const PANEL_SIDE: u32 = 256;
/// The panels, far to near (drawn in that order: no depth buffer): corner x, y, width, height, texture.
const PANELS: [(f32, f32, f32, f32, usize); 3] =
    [(0.7, 1.7, 0.5, 0.3, 0), (1.05, 1.25, 0.3, 0.2, 1), (0.85, 0.9, 0.15, 0.1, 1)];
/// Where the eyes look from (between them) and at, and how far apart they are: low over the
/// ground, so that its nearest part needs the finest mips.
const HEAD: [f32; 3] = [1.0, 0.55, 0.15];
const LOOK_AT: [f32; 3] = [1.0, 1.1, 0.0];
const EYE_DISTANCE: f32 = 0.08;
/// The shaders' colour where nothing is resident, and the clear colour.
const MAGENTA: [u8; 4] = [255, 0, 255, 255];
const CLEAR: [f32; 4] = [0.05, 0.05, 0.08, 1.0];
/// Frames whose feedback missed nothing, in a row, before a phase stops.
const SETTLED: usize = 2;

/// What a run found, for the test that runs it.
#[derive(Debug)]
pub struct Outcome {
    /// Devices open (the eyes use the first two).
    pub devices: usize,
    /// The ground's residency path.
    pub path: ResidencyPath,
    /// Stereo frames drawn (both eyes), and single-device frames (both views on device 0).
    pub stereo_frames: u64,
    /// See `stereo_frames`.
    pub single_frames: u64,
    /// Whether each phase ended with settled feedback (left, right, single device).
    pub settled: [bool; 3],
    /// PSNR (dB, RGB; 99 when identical) of each eye against the single-device render of its view.
    pub psnr_db: [f64; 2],
    /// The largest channel difference of each eye against it.
    pub max_diff: [u8; 2],
    /// PSNR of the left eye against the right one (the views differ: parallax).
    pub parallax_db: f64,
    /// Pixels drawn in the nothing-resident colour, both eyes of the last stereo frame.
    pub magenta: usize,
    /// Pixels left at the clear colour, both eyes (the scene covers most of the view).
    pub clear_pixels: usize,
    /// Median GPU time of each eye's frame in ms (`None` without timestamps).
    pub eye_ms: [Option<f64>; 2],
    /// How the eyes' barriers were made.
    pub barriers: Barriers,
    /// The example's own barrier commands (`vkCmdPipelineBarrier2`) per eye frame, stereo phase
    /// (the streamer's part not counted: the same in both modes).
    pub barrier_commands_per_eye: f64,
    /// The barrier structures (memory, buffer, image) in them, per eye frame.
    pub barriers_per_eye: f64,
    /// Units each eye's device streamed (priming included).
    pub tiles_streamed: [u64; 2],
    /// Of them, the units priming made resident (the coarse chain, before the first frame).
    pub tiles_primed: [u64; 2],
    /// The decoded-tile cache, both devices together.
    pub cache: CacheStats,
}

/// Colour of pattern `index` (0: the ground, 1 and 2: the panels) at `uv` in `mip` of a texture
/// of `side` texels: four octaves, each fading to its mean where it would be finer than 4 texels.
fn pattern(index: usize, side: u32, mip: u32, u: f32, v: f32) -> [u8; 4] {
    let tri = |x: f32| (2.0 * (x - x.floor()) - 1.0).abs();
    let mut ink = 0.0;
    for period in [512.0, 128.0, 32.0, 8.0] {
        let f = side as f32 / period;
        let wave = match index {
            0 => tri(((u - 0.5) * (u - 0.5) + (v - 0.5) * (v - 0.5)).sqrt() * f),
            1 => tri(u * f) * tri(v * f),
            _ => tri(u * f).max(tri(v * f)).powi(4),
        };
        let weight = ((period / (1u32 << mip) as f32 - 2.0) / 2.0).clamp(0.0, 1.0);
        ink += 0.25 * (weight * wave + (1.0 - weight) * 0.5);
    }
    let tint = [[1.0, 0.6, 0.2], [0.3, 0.8, 1.0], [0.5, 1.0, 0.4]][index];
    let shade = [0.5 + 0.5 * u, 0.5 + 0.5 * v, 1.0];
    let c = |i: usize| ((0.15 + 0.85 * ink) * tint[i] * shade[i] * 255.0) as u8;
    [c(0), c(1), c(2), 255]
}

/// Texels of a `w` × `h` region at (`x0`, `y0`) of `mip` of pattern `index`.
fn texels(index: usize, side: u32, mip: u32, [x0, y0]: [u32; 2], [w, h]: [u32; 2]) -> Vec<u8> {
    let m = (side >> mip).max(1) as f32;
    (y0..y0 + h)
        .flat_map(|j| (x0..x0 + w).map(move |i| (i, j)))
        .flat_map(|(i, j)| pattern(index, side, mip, (i as f32 + 0.5) / m, (j as f32 + 0.5) / m))
        .collect()
}

/// The ground's virtual texture: tiles made on the loaders' threads (once: the cache keeps them).
fn ground_source() -> Arc<dyn TileSource> {
    let desc = VtDesc::new(Format::R8G8B8A8Unorm, GROUND_SIDE, GROUND_SIDE, 128, 128);
    Arc::new(FnSource::new("ground", desc, move |mip, x, y| {
        let (w, h) = desc.tile_extent(mip, x, y).expect("inside the tile grid");
        Ok(texels(0, GROUND_SIDE, mip, [x * 128, y * 128], [w, h]))
    }))
}

/// The world → clip matrix (column-major, Vulkan clip space) of a camera at `eye` looking at
/// `at`, z up, 60° vertical field of view, square viewport.
fn view_proj(eye: [f32; 3], at: [f32; 3]) -> [f32; 16] {
    let sub = |a: [f32; 3], b: [f32; 3]| [a[0] - b[0], a[1] - b[1], a[2] - b[2]];
    let dot = |a: [f32; 3], b: [f32; 3]| a[0] * b[0] + a[1] * b[1] + a[2] * b[2];
    let unit = |a: [f32; 3]| a.map(|c| c / dot(a, a).sqrt());
    let cross = |a: [f32; 3], b: [f32; 3]| {
        [a[1] * b[2] - a[2] * b[1], a[2] * b[0] - a[0] * b[2], a[0] * b[1] - a[1] * b[0]]
    };
    let forward = unit(sub(at, eye));
    let right = unit(cross(forward, [0.0, 0.0, 1.0]));
    let up = cross(right, forward);
    let focal = 1.0 / 30f32.to_radians().tan();
    let (near, far) = (0.02, 20.0);
    let depth = far / (far - near);
    let rows = [right.map(|c| c * focal), up.map(|c| -c * focal), forward.map(|c| c * depth), forward];
    let offsets = [0.0, 0.0, -near * depth, 0.0];
    let mut m = [0.0; 16];
    for (r, row) in rows.iter().enumerate() {
        m[r..12].iter_mut().step_by(4).zip(row).for_each(|(m, v)| *m = *v);
        m[12 + r] = offsets[r] - dot(*row, eye);
    }
    m
}

/// Eye `eye`'s (0 left, 1 right) view-projection as push-constant bytes: the head moved half the
/// eye distance along the view's right, both eyes looking at the same point.
fn eye_view(eye: usize) -> Vec<u8> {
    let side = if eye == 0 { -0.5 } else { 0.5 } * EYE_DISTANCE;
    let forward = [LOOK_AT[0] - HEAD[0], LOOK_AT[1] - HEAD[1]];
    let len = (forward[0] * forward[0] + forward[1] * forward[1]).sqrt();
    let right = [forward[1] / len, -forward[0] / len];
    let at = [HEAD[0] + right[0] * side, HEAD[1] + right[1] * side, HEAD[2]];
    view_proj(at, LOOK_AT).iter().flat_map(|f| f.to_le_bytes()).collect()
}

/// The meshes' vertices: the ground (2 × 2 at z = 0, vertices 0..6), then each panel (6 each).
fn mesh_vertices() -> Vec<u8> {
    let quad = [[0.0f32, 0.0], [1.0, 0.0], [0.0, 1.0], [0.0, 1.0], [1.0, 0.0], [1.0, 1.0]];
    let ground = quad.map(|[u, v]| [2.0 * u, 2.0 * v, 0.0, u, v]);
    let panels =
        PANELS.iter().flat_map(|&(x, y, w, h, _)| quad.map(|[u, v]| [x + w * u, y, h * (1.0 - v), u, v]));
    ground.into_iter().chain(panels).flatten().flat_map(f32::to_le_bytes).collect()
}

/// How an eye's barriers are made.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Barriers {
    /// From the eye's state tracker: the barriers its resources' states require.
    #[default]
    Tracker,
    /// As before the tracker: a full barrier before and after the eye, every use declared as all
    /// commands and all memory (its layout kept).
    Full,
}

/// `use_` as all commands and all memory, in its layout: what a full barrier waits for and
/// makes visible.
fn full_use(use_: Use) -> Use {
    let info = use_.info();
    Use::Custom(CustomUse {
        stages: PipelineStages::ALL_COMMANDS | info.stages,
        access: AccessFlags::MEMORY_READ | AccessFlags::MEMORY_WRITE | info.access,
        layout: info.layout,
    })
}

/// The full barrier of [`Barriers::Full`] (host reads included).
fn full_barrier() -> MemoryDependency {
    use vk::{AccessFlags2 as A, PipelineStageFlags2 as S};
    MemoryDependency {
        src_stages: S::ALL_COMMANDS,
        src_access: A::MEMORY_READ | A::MEMORY_WRITE,
        dst_stages: S::ALL_COMMANDS | S::HOST,
        dst_access: A::MEMORY_READ | A::MEMORY_WRITE | A::HOST_READ,
    }
}

/// Barrier commands and structures an eye recorded.
#[derive(Clone, Copy, Debug, Default)]
struct BarrierCount {
    commands: u64,
    barriers: u64,
}

/// An eye's colour target with a read-back buffer; its tracker puts it in each use's layout.
struct Target {
    image: Image,
    view: ImageView,
    pixels: Buffer,
    tracker: ResourceTracker,
    ids: [ResourceId; 2],
}

impl Target {
    fn new(device: &Device, name: &str) -> Result<Target> {
        let usage = ImageUsage::COLOR_ATTACHMENT | ImageUsage::COPY_SRC;
        let image =
            device.create_image(&ImageDesc::new_2d(name, Format::R8G8B8A8Unorm, SIDE, SIDE, usage))?;
        let view = image.create_view(0..1)?;
        let pixels = device.create_buffer(
            &BufferDesc::new(format!("{name} read-back"), u64::from(SIDE * SIDE * 4), BufferUsage::COPY_DST)
                .with_intent(MemoryIntent::Readback),
        )?;
        let mut tracker = ResourceTracker::new(TrackerOptions::default());
        let ids = [tracker.track_image(&image, vk::ImageLayout::UNDEFINED)?, tracker.track_buffer(&pixels)?];
        Ok(Target { image, view, pixels, tracker, ids })
    }

    /// Records the barriers for `uses` (the first of them may discard the image's contents),
    /// counted in `count`; under [`Barriers::Full`] each use is declared as all commands and all
    /// memory.
    fn declare(
        &mut self,
        rec: &mut Recording<'_>,
        uses: &[(usize, Use)],
        discard: bool,
        (mode, count): (Barriers, &mut BarrierCount),
    ) -> Result<()> {
        let mut batch = self.tracker.batch(rec.device().index(), rec.device().universal_queue().family());
        for (n, &(which, usage)) in uses.iter().enumerate() {
            let usage = if mode == Barriers::Full { full_use(usage) } else { usage };
            if discard && n == 0 {
                batch.declare_discard(self.ids[which], Region::Whole, usage)?;
            } else {
                batch.declare(self.ids[which], Region::Whole, usage)?;
            }
        }
        let flush = batch.flush();
        let recorded = self.tracker.record(rec, &flush.barriers)? as u64;
        count.commands += u64::from(recorded > 0);
        count.barriers += recorded;
        Ok(())
    }

    fn read(&self) -> Result<Vec<u8>> {
        let mut out = vec![0; self.pixels.size() as usize];
        self.pixels.read(0, &mut out)?;
        Ok(out)
    }
}

/// What one device draws with: its eyes' targets, samplers, the panels' descriptor sets, and the
/// ground's set for the streamer's current bindings.
struct DeviceScene {
    index: DeviceIndex,
    targets: [Target; 2],
    samplers: [Sampler; 2],
    panel_sets: Vec<DescriptorSet>,
    ground_set: Option<(u64, DescriptorSet, u16)>,
    /// The barriers its eyes recorded so far.
    barriers: BarrierCount,
}

/// The scene on every device.
struct Scene {
    meshes: MultiBuffer,
    ground: MultiVirtualTexture,
    ground_program: MultiGraphicsProgram,
    panel_program: MultiGraphicsProgram,
    stamps: MultiTimestamps,
    submitter: MultiSubmitter,
    barriers: Barriers,
}

fn attributes() -> [VertexAttribute; 2] {
    [
        VertexAttribute { location: 0, format: vk::Format::R32G32B32_SFLOAT, offset: 0 },
        VertexAttribute { location: 1, format: vk::Format::R32G32_SFLOAT, offset: 12 },
    ]
}

/// The ground's descriptor set on one device from its streamer's frame bindings.
fn ground_set(
    program: &GraphicsProgram,
    samplers: &[Sampler; 2],
    bindings: &FrameBindings<'_>,
    texture: &residency::vulkan::streaming::VirtualTexture,
) -> Result<(DescriptorSet, u16)> {
    let (feedback, table) =
        (bindings.feedback.ok_or("no texture")?, bindings.image_table.ok_or("no texture")?);
    let t = bindings.texture(texture).ok_or("the ground is not bound")?;
    let (image, map): (ViewRef<'_>, ViewRef<'_>) = match t.views {
        TextureViews::Hardware { image, min_lod } => (image.into(), min_lod.into()),
        TextureViews::Software { atlas, indirection } => (atlas.into(), indirection.into()),
    };
    let general = vk::ImageLayout::GENERAL;
    let set = program.descriptor_set(&[
        Binding::sampled(image, &samplers[0], general),
        Binding::sampled(map, &samplers[1], general),
        Binding::Buffer(feedback),
        Binding::Buffer(table),
    ])?;
    Ok((set, t.feedback_slot))
}

/// Records eye `eye`'s view into its target on the recording's device: the ground (cleared, with
/// feedback), the panels over it, the copy to the read-back buffer.
fn record_eye(
    rec: &mut Recording<'_>,
    scene: &Scene,
    ds: &mut DeviceScene,
    bindings: &FrameBindings<'_>,
    eye: usize,
) -> Result<()> {
    use vk::{AccessFlags2 as A, PipelineStageFlags2 as S};
    let (ground, panels) = (scene.ground_program.program(ds.index)?, scene.panel_program.program(ds.index)?);
    let meshes = scene.meshes.instance(ds.index).ok_or("no meshes here")?;
    let view = eye_view(eye);
    let (set, slot) = ds.ground_set.as_ref().map(|(_, s, slot)| (s, *slot)).ok_or("no ground set")?;
    let words = bindings
        .textures()
        .into_iter()
        .find(|t| t.feedback_slot == slot)
        .map_or([0; 8], |t| bindings.feedback_words(&t, true));
    let push: Vec<u8> = view.iter().copied().chain(words.into_iter().flat_map(u32::to_le_bytes)).collect();
    let mode = scene.barriers;
    let count = &mut ds.barriers;
    let target = &mut ds.targets[eye];
    if mode == Barriers::Full {
        rec.memory_barrier(full_barrier())?;
        count.commands += 1;
        count.barriers += 1;
    }
    target.declare(rec, &[(0, Use::ColorAttachmentWrite)], true, (mode, count))?;
    ground.render(rec, &target.view, [SIDE; 2], CLEAR, |draw: &mut Drawing<'_, '_>| -> Result<()> {
        draw.bind_descriptor_set(set)?;
        draw.push_constants(&push)?;
        draw.bind_vertex_buffer(meshes, 0)?;
        Ok(draw.draw(6, 1)?)
    })??;
    // The panels load what the ground pass stored; a later eye's ground pass writes the same
    // feedback buffer.
    rec.memory_barrier(match mode {
        Barriers::Tracker => MemoryDependency {
            src_stages: S::COLOR_ATTACHMENT_OUTPUT | S::FRAGMENT_SHADER,
            src_access: A::COLOR_ATTACHMENT_WRITE | A::SHADER_WRITE,
            dst_stages: S::COLOR_ATTACHMENT_OUTPUT | S::FRAGMENT_SHADER,
            dst_access: A::COLOR_ATTACHMENT_READ
                | A::COLOR_ATTACHMENT_WRITE
                | A::SHADER_READ
                | A::SHADER_WRITE,
        },
        Barriers::Full => full_barrier(),
    })?;
    count.commands += 1;
    count.barriers += 1;
    panels.render_over(rec, &target.view, [SIDE; 2], |draw| -> Result<()> {
        for (n, &(.., texture)) in PANELS.iter().enumerate() {
            draw.bind_descriptor_set(&ds.panel_sets[texture])?;
            draw.push_constants(&view)?;
            draw.bind_vertex_buffer(meshes, u64::from(VERTEX_BYTES) * 6 * (n as u64 + 1))?;
            draw.draw(6, 1)?;
        }
        Ok(())
    })??;
    target.declare(rec, &[(0, Use::TransferSrc), (1, Use::TransferDst)], false, (mode, count))?;
    rec.copy_image_to_buffer(&target.image, vk::ImageLayout::TRANSFER_SRC_OPTIMAL, &target.pixels)?;
    target.declare(rec, &[(1, Use::HostRead)], false, (mode, count))?;
    if mode == Barriers::Full {
        rec.memory_barrier(full_barrier())?;
        count.commands += 1;
        count.barriers += 1;
    }
    Ok(())
}

/// One frame on device `ds.index`: its streamer's frame around eyes `eyes` drawn in one
/// submission between two timestamps. Returns the submission; the caller waits for it.
fn frame(
    streaming: &mut MultiStreamer,
    scene: &Scene,
    ds: &mut DeviceScene,
    eyes: &[usize],
) -> Result<residency::vulkan::Submission> {
    let index = ds.index;
    let texture = scene.ground.instance(index).ok_or("the ground is not on this device")?;
    let streamer = streaming.streamer_mut(index).ok_or("no streamer here")?;
    let bindings = streamer.begin_frame()?;
    if ds.ground_set.as_ref().is_none_or(|(generation, ..)| *generation != bindings.generation) {
        let program = scene.ground_program.program(index)?;
        let (set, slot) = ground_set(program, &ds.samplers, &bindings, texture)?;
        ds.ground_set = Some((bindings.generation, set, slot));
    }
    let stamps = scene.stamps.instance(index).ok_or("no timestamps here")?;
    let commands = scene.submitter.instance(index).ok_or("no submitter here")?;
    let mut recorded = Ok(());
    let submission = commands.submit(&[], |rec| {
        recorded = (|| -> Result<()> {
            stamps.cmd_write(rec, 0)?;
            bindings.record(rec, |rec| {
                eyes.iter().try_for_each(|&eye| record_eye(rec, scene, ds, &bindings, eye))
            })??;
            stamps.cmd_write(rec, 1)?;
            Ok(())
        })();
    })?;
    drop(bindings);
    recorded?;
    streamer.end_frame(submission.gpu_use())?;
    // Settling is counted in frames, so each frame's loads finish before the next begins
    // (frame-exact, on any machine); a renderer lets them overlap frames.
    streamer.wait_for_loads();
    Ok(submission)
}

/// Frames in a row at the end of `streamer`'s feedback so far that missed nothing, added to `run`.
fn settle(streaming: &mut MultiStreamer, index: DeviceIndex, run: &mut usize) {
    if let Some(s) = streaming.streamer_mut(index) {
        for f in s.take_feedback_frames() {
            *run = if f.misses == 0 && !f.overflowed { *run + 1 } else { 0 };
        }
    }
}

/// PSNR in dB of the RGB channels of two RGBA images (99 when identical) and the largest difference.
fn compare(a: &[u8], b: &[u8]) -> (f64, u8) {
    let (mut sum, mut n, mut max) = (0.0, 0.0, 0u8);
    for (p, q) in a.chunks_exact(4).zip(b.chunks_exact(4)) {
        for i in 0..3 {
            sum += (f64::from(p[i]) - f64::from(q[i])).powi(2);
            max = max.max(p[i].abs_diff(q[i]));
        }
        n += 3.0;
    }
    (if sum == 0.0 { 99.0 } else { 10.0 * (255.0f64.powi(2) * n / sum).log10() }, max)
}

fn median(mut v: Vec<f64>) -> Option<f64> {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied()
}

/// Runs the example on the first two devices of `set` (at most `frames` frames per phase), the
/// ground on the path `Auto` picks.
pub fn run(set: &DeviceSet, frames: u64) -> Result<Outcome> {
    run_on_path(set, ResidencyPath::Auto, frames)
}

/// [`run`] with the ground streamed on `path`.
pub fn run_on_path(set: &DeviceSet, path: ResidencyPath, frames: u64) -> Result<Outcome> {
    run_with(set, path, Barriers::Tracker, frames)
}

/// [`run_on_path`] with the eyes' barriers made as `barriers` says.
pub fn run_with(set: &DeviceSet, path: ResidencyPath, barriers: Barriers, frames: u64) -> Result<Outcome> {
    let devices: Vec<&Arc<Device>> = set.devices().iter().take(2).collect();
    if devices.len() < 2 {
        return Err("the stereo example needs two devices (open one twice: logical_per_physical)".into());
    }
    let (left, right) = (devices[0].index(), devices[1].index());
    let all = DeviceMask::ALL;

    // The scene on every device: meshes, textures, the streamed ground, programs, timestamps.
    let uploader = MultiUploader::new(set, all, 8 << 20)?;
    let bytes = mesh_vertices();
    let usage = BufferUsage::VERTEX | BufferUsage::COPY_DST;
    let meshes = MultiBuffer::create(set, all, &BufferDesc::new("stereo meshes", bytes.len() as u64, usage))?;
    uploader.broadcast(&meshes, 0, &bytes)?;
    let mips = PANEL_SIDE.ilog2() + 1;
    let mut textures = Vec::new();
    for t in 0..2 {
        let desc = ImageDesc::new_2d(
            format!("panel texture {t}"),
            Format::R8G8B8A8Unorm,
            PANEL_SIDE,
            PANEL_SIDE,
            ImageUsage::SAMPLED | ImageUsage::COPY_DST,
        );
        let texture = MultiImage::create(set, all, &desc.with_mip_levels(mips))?;
        for (index, image) in texture.iter() {
            let device = set.device(index).ok_or("a device vanished")?;
            device.discard_to_general(&[image])?;
            let up = uploader.instance(index).ok_or("no uploader here")?;
            for mip in 0..mips {
                let side = (PANEL_SIDE >> mip).max(1);
                let region = ImageRegion::new(image, mip, [0; 3], [side, side, 1]);
                up.write_image(&region, &texels(t + 1, PANEL_SIDE, mip, [0, 0], [side, side]))?;
            }
        }
        textures.push(texture);
    }
    uploader.wait_idle()?;
    let desc = StreamerDesc::default()
        .with_name("stereo")
        .with_path(path)
        .with_budget_tiles(192)
        .with_frames_in_flight(1)
        .with_sampling(FeedbackSampling::new(1, 1));
    let mut streaming = MultiStreamer::new(set, all, &desc, DecodedTileCache::new(64 << 20))?;
    let path = streaming.streamer(left).ok_or("no streamer")?.path();
    let ground = streaming.add_texture("ground", ground_source(), all)?;
    let primed = |s: &MultiStreamer, i| s.streamer(i).map_or(0, |s| s.manager_stats().tiles_streamed);
    let tiles_primed = [primed(&streaming, left), primed(&streaming, right)];
    let color = vk::Format::R8G8B8A8_UNORM;
    let ground_fragment = shaders::vt_quad_fragment(path);
    let ground_program = MultiGraphicsProgram::new(
        set,
        all,
        "stereo ground",
        &shaders::VT_QUAD_VERT,
        ground_fragment,
        VERTEX_BYTES,
        &attributes(),
        color,
        4,
    )?;
    let panel_program = MultiGraphicsProgram::new(
        set,
        all,
        "stereo panels",
        &shaders::VT_QUAD_VERT,
        &shaders::VT_QUAD_REFERENCE_FRAG,
        VERTEX_BYTES,
        &attributes(),
        color,
        2,
    )?;
    let scene = Scene {
        meshes,
        ground,
        ground_program,
        panel_program,
        stamps: MultiTimestamps::new(set, all, "stereo eye", 2)?,
        submitter: MultiSubmitter::new(set, all)?,
        barriers,
    };
    let mut per_device = Vec::new();
    for device in &devices {
        let index = device.index();
        let samplers = [device.create_sampler(Filter::Trilinear)?, device.create_sampler(Filter::Nearest)?];
        let program = scene.panel_program.program(index)?;
        let mut panel_sets = Vec::new();
        for texture in &textures {
            let view = texture.view(set, index, 0..mips)?;
            panel_sets.push(program.descriptor_set(&[Binding::sampled(
                &*view,
                &samplers[0],
                vk::ImageLayout::GENERAL,
            )])?);
        }
        let targets = [Target::new(device, "left eye")?, Target::new(device, "right eye")?];
        per_device.push(DeviceScene {
            index,
            targets,
            samplers,
            panel_sets,
            ground_set: None,
            barriers: BarrierCount::default(),
        });
    }

    // Stereo: in each frame the left eye on device 0 and the right eye on device 1, each its own
    // submission, both in flight together.
    let (mut runs, mut eye_ms, mut stereo_frames) = ([0usize; 3], [Vec::new(), Vec::new()], 0);
    let pace = |started: Instant, frame: u64| {
        if let Some(early) = (started + FRAME_TIME * frame as u32).checked_duration_since(Instant::now()) {
            std::thread::sleep(early);
        }
    };
    let started = Instant::now();
    while stereo_frames < frames.max(1) && !(runs[0] >= SETTLED && runs[1] >= SETTLED) {
        pace(started, stereo_frames);
        let mut submissions = Vec::new();
        for (eye, ds) in per_device.iter_mut().enumerate() {
            submissions.push(frame(&mut streaming, &scene, ds, &[eye])?);
        }
        for (eye, (ds, submission)) in per_device.iter().zip(submissions).enumerate() {
            scene.submitter.wait(ds.index, submission)?;
            eye_ms[eye].extend(scene.stamps.elapsed_ms(ds.index, 0, 1));
            settle(&mut streaming, ds.index, &mut runs[eye]);
        }
        stereo_frames += 1;
    }
    let stereo = [per_device[0].targets[0].read()?, per_device[1].targets[1].read()?];
    let eye_frames = (2 * stereo_frames).max(1) as f64;
    let barrier_commands_per_eye =
        per_device.iter().map(|ds| ds.barriers.commands).sum::<u64>() as f64 / eye_frames;
    let barriers_per_eye = per_device.iter().map(|ds| ds.barriers.barriers).sum::<u64>() as f64 / eye_frames;

    // The single-device render: both views on device 0, until its feedback (of both) settles.
    let mut single_frames = 0;
    let started = Instant::now();
    while single_frames < frames.max(1) && runs[2] < SETTLED {
        pace(started, single_frames);
        let submission = frame(&mut streaming, &scene, &mut per_device[0], &[0, 1])?;
        scene.submitter.wait(left, submission)?;
        settle(&mut streaming, left, &mut runs[2]);
        single_frames += 1;
    }
    let single = [per_device[0].targets[0].read()?, per_device[0].targets[1].read()?];

    let (l, r) = (compare(&stereo[0], &single[0]), compare(&stereo[1], &single[1]));
    let stats = streaming.stats();
    let streamed =
        |i: DeviceIndex| stats.devices.iter().find(|d| d.device == i).map_or(0, |d| d.manager.tiles_streamed);
    let count = |img: &[u8], c: [u8; 4]| img.chunks_exact(4).filter(|p| *p == c).count();
    let clear = CLEAR.map(|c| (c * 255.0).round() as u8);
    let outcome = Outcome {
        devices: set.devices().len(),
        path,
        stereo_frames,
        single_frames,
        settled: runs.map(|r| r >= SETTLED),
        psnr_db: [l.0, r.0],
        max_diff: [l.1, r.1],
        parallax_db: compare(&stereo[0], &stereo[1]).0,
        magenta: count(&stereo[0], MAGENTA) + count(&stereo[1], MAGENTA),
        clear_pixels: count(&stereo[0], clear) + count(&stereo[1], clear),
        eye_ms: eye_ms.map(median),
        barriers,
        barrier_commands_per_eye,
        barriers_per_eye,
        tiles_streamed: [streamed(left), streamed(right)],
        tiles_primed,
        cache: stats.cache,
    };
    streaming.remove_texture(scene.ground)?;
    Ok(outcome)
}

#[allow(dead_code, reason = "the test that runs this example calls `run` and not `main`")]
fn main() -> Result<()> {
    tracing_subscriber::fmt().with_env_filter("warn").init();
    let (mut desc, mut path) = (DeviceSetDesc::default().with_logical_per_physical(2), ResidencyPath::Auto);
    let mut barriers = Barriers::Tracker;
    for arg in std::env::args().skip(1) {
        match arg.as_str() {
            "full-barriers" => barriers = Barriers::Full,
            "all" => desc = DeviceSetDesc::default().with_devices(DeviceMask::ALL).with_min_devices(2),
            "auto" => path = ResidencyPath::Auto,
            "hardware" => path = ResidencyPath::Hardware,
            "software" => path = ResidencyPath::Software,
            other => {
                return Err(format!(
                    "unknown argument `{other}`: all, auto, hardware, software or full-barriers"
                )
                .into())
            }
        }
    }
    let set = DeviceSet::new(&desc)?;
    for d in set.devices().iter().take(2) {
        println!("device {}: {} (physical {})", d.index().get(), d.name(), d.physical_index());
    }
    let outcome = run_with(&set, path, barriers, FRAMES)?;
    let problems = set.validation_log().problem_count();
    drop(set);
    let leaks = residency::vulkan::LEAKS_AT_TEARDOWN.load(std::sync::atomic::Ordering::SeqCst);
    let o = &outcome;
    let ms = |m: Option<f64>| m.map_or("n/a".to_owned(), |m| format!("{m:.3} ms"));
    println!(
        "{} stereo frames ({} path): left eye {} on device 0, right eye {} on device 1 (GPU, median); \
         {} + {} tiles streamed; decoded-tile cache: {:.0} % hits ({} hits, {} decodes)",
        o.stereo_frames,
        o.path.name(),
        ms(o.eye_ms[0]),
        ms(o.eye_ms[1]),
        o.tiles_streamed[0],
        o.tiles_streamed[1],
        o.cache.hit_rate() * 100.0,
        o.cache.hits,
        o.cache.decodes
    );
    println!(
        "barriers ({:?}): {:.1} barrier commands, {:.1} barriers per eye frame (the example's own); \
         GPU time per eye frame (median): left {}, right {}",
        o.barriers,
        o.barrier_commands_per_eye,
        o.barriers_per_eye,
        ms(o.eye_ms[0]),
        ms(o.eye_ms[1])
    );
    println!(
        "against device 0 alone ({} frames): left {:.1} dB (max diff {}), right {:.1} dB (max diff {}); \
         left vs right {:.1} dB; validation problems: {problems}; leaked at teardown: {leaks}",
        o.single_frames, o.psnr_db[0], o.max_diff[0], o.psnr_db[1], o.max_diff[1], o.parallax_db
    );
    let settled = o.settled.iter().all(|&s| s);
    if !settled || o.psnr_db.iter().any(|&p| p < 40.0) || o.magenta != 0 || problems != 0 || leaks != 0 {
        return Err("the example failed its checks".into());
    }
    Ok(())
}
