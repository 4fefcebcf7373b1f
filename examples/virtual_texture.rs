//! A renderer's frame loop with virtual textures streamed from fragment-shader feedback.
//!
//! Four planes lie on the ground, each with a procedural virtual texture (2048² or 1024², a
//! distinct pattern with detail at every mip, so no files are needed). A camera glides from high
//! over all four down to a close pass over the first and up to a view across them, where it rests
//! for the second half of the run. The renderer has its own graphics pipeline (`vt_quad.vert` with
//! `vt_quad.frag`, or `vt_quad_software.frag` on the software path), its own render targets (one
//! per frame in flight, moved between their uses by a `ResourceTracker`), two frames in flight and
//! a 60 Hz frame pace. The library's `Streamer` does the rest under an 8 MiB budget: priming makes
//! each texture's coarse chain resident before frame 0, the fragment shaders' feedback asks for
//! the tiles the view needs, and the streamer loads them on its workers, binds them and uploads
//! them inside the renderer's own command buffer.
//!
//! The streaming code is what lies between the `// --- streaming` and `// --- end streaming`
//! comments: 93 lines, comments included, all through the public API (the tile source, the
//! streamer, the descriptor sets and push constants made from its `FrameBindings`, and the frame
//! protocol: `begin_frame`, `FrameBindings::record` around the renderer's pass, `end_frame`).
//! Everything else — patterns, planes, camera, pipeline, targets, the reference — is the renderer.
//!
//! At the end the first and the last frame are compared with the same views drawn from fully
//! resident copies of the textures (`vt_quad_reference.frag`, the same LOD rule).
//!
//! Run: `RESIDENCY_VALIDATION=sync cargo run --release --example virtual_texture [-- hardware|software]`

use residency::vulkan::ash::vk;
use residency::vulkan::compute::{Binding, DescriptorSet, ViewRef};
use residency::vulkan::graphics::{Drawing, GraphicsProgram, VertexAttribute};
use residency::vulkan::recording::Recording;
use residency::vulkan::sparse::ResidencyPath;
use residency::vulkan::streaming::{
    FnSource, FrameBindings, Streamer, StreamerDesc, TextureViews, TileSource, VirtualTexture, VtDesc,
};
use residency::vulkan::tracking::{Region, ResourceId, ResourceTracker, TrackerOptions, Use};
use residency::vulkan::{
    shaders, Buffer, BufferDesc, BufferUsage, CommandContext, Device, DeviceSet, DeviceSetDesc, Filter,
    Format, Image, ImageDesc, ImageRegion, ImageUsage, ImageView, MemoryIntent, Sampler, Submission,
    Uploader,
};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>;

/// Frames drawn by default.
pub const FRAMES: u64 = 40;
/// The render target's side in pixels.
pub(crate) const SIDE: u32 = 256;
const FRAMES_IN_FLIGHT: usize = 2;
/// The frame rate the loop keeps to, as a renderer presenting at 60 Hz would.
const FRAME_TIME: Duration = Duration::from_micros(16_667);
/// The planes: world-space corner (each is 1 × 1 on the ground, z = 0) and texture side.
pub(crate) const PLANES: [([f32; 2], u32); 4] =
    [([0.0, 0.0], 2048), ([1.1, 0.0], 1024), ([0.0, 1.1], 1024), ([1.1, 1.1], 2048)];
/// The shaders' colour where nothing is resident.
pub(crate) const MAGENTA: [u8; 4] = [255, 0, 255, 255];
/// `vt_quad.vert`'s vertex: position (vec3), uv (vec2).
const VERTEX_BYTES: u32 = 20;
/// The streamer's budget: 8 MiB of tiles for the 55 MiB the four textures take fully resident.
const BUDGET_TILES: u32 = 128;
/// A 128 × 128 RGBA8 tile.
const TILE_BYTES: u64 = 64 << 10;

/// What a run found, for the test that runs it.
#[derive(Debug)]
pub struct Outcome {
    /// The residency path the streamer took.
    pub path: ResidencyPath,
    /// Frames drawn.
    pub frames: u64,
    /// Pixels of frame 0 drawn in the nothing-resident colour (priming makes this 0).
    pub magenta_frame0: usize,
    /// Tiles (and tails) priming made resident before frame 0.
    pub primed_tiles: u64,
    /// Tiles made resident after priming: asked for by the fragment shaders' feedback alone.
    pub streamed_tiles: u64,
    /// Most tiles resident at once (resident bytes over 64 KiB tiles, mip tails included).
    pub resident_tiles_peak: u64,
    /// Tiles of the four textures, every mip.
    pub full_tiles: u64,
    /// Frames at the end whose feedback missed nothing (every sampled pixel had its LOD).
    pub settled_frames: u64,
    /// PSNR (dB, RGB) of the first and the last frame against the fully resident reference.
    pub psnr_frame0_db: f64,
    /// See `psnr_frame0_db`.
    pub psnr_last_db: f64,
}

/// Texture `index`'s colour at `uv` in mip `mip`: rings, dots, stripes or a grid, in four
/// octaves (periods of 512 down to 8 mip-0 texels); an octave fades to its mean in the mips where
/// it would be finer than 4 texels, so every mip shows the detail it can hold and none aliases.
fn pattern(index: usize, side: u32, mip: u32, u: f32, v: f32) -> [u8; 4] {
    let tri = |x: f32| (2.0 * (x - x.floor()) - 1.0).abs();
    let mut ink = 0.0;
    for period in [512.0, 128.0, 32.0, 8.0] {
        let f = side as f32 / period;
        let wave = match index {
            0 => tri(((u - 0.5) * (u - 0.5) + (v - 0.5) * (v - 0.5)).sqrt() * f),
            1 => tri(u * f) * tri(v * f),
            2 => tri((u + 2.0 * v) * f),
            _ => tri(u * f).max(tri(v * f)).powi(4),
        };
        let weight = ((period / (1u32 << mip) as f32 - 2.0) / 2.0).clamp(0.0, 1.0);
        ink += 0.25 * (weight * wave + (1.0 - weight) * 0.5);
    }
    let tint = [[1.0, 0.6, 0.2], [0.3, 0.8, 1.0], [0.5, 1.0, 0.4], [1.0, 0.4, 0.6]][index];
    let shade = [0.5 + 0.5 * u, 0.5 + 0.5 * v, 1.0];
    let c = |i: usize| ((0.15 + 0.85 * ink) * tint[i] * shade[i] * 255.0) as u8;
    [c(0), c(1), c(2), 255]
}

/// The texels of tile (`x`, `y`) of `mip` of texture `index`: the pattern at each texel's centre.
fn tile_texels(index: usize, desc: &VtDesc, mip: u32, x: u32, y: u32) -> Vec<u8> {
    let (w, h) = desc.tile_extent(mip, x, y).expect("inside the tile grid");
    let (mw, mh) = desc.mip_extent(mip);
    let mut texels = Vec::with_capacity((w * h * 4) as usize);
    for j in y * desc.tile_height..y * desc.tile_height + h {
        for i in x * desc.tile_width..x * desc.tile_width + w {
            let (u, v) = ((i as f32 + 0.5) / mw as f32, (j as f32 + 0.5) / mh as f32);
            texels.extend_from_slice(&pattern(index, desc.width, mip, u, v));
        }
    }
    texels
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
    // Clip = rows · (p - eye): x right, y down, z = depth in 0..1, w = distance along `forward`.
    let rows = [right.map(|c| c * focal), up.map(|c| -c * focal), forward.map(|c| c * depth), forward];
    let offsets = [0.0, 0.0, -near * depth, 0.0];
    let mut m = [0.0; 16];
    for (r, row) in rows.iter().enumerate() {
        m[r..12].iter_mut().step_by(4).zip(row).for_each(|(m, v)| *m = *v);
        m[12 + r] = offsets[r] - dot(*row, eye);
    }
    m
}

/// The camera of frame `frame` of `frames`: from high over the four planes down to a close pass
/// over the first one (its finest mips), then up to a view across all four, at rest for the last
/// half of the run.
pub(crate) fn camera(frame: u64, frames: u64) -> [f32; 16] {
    // (eye, looking at) at 0 %, 25 % and 50 % of the run.
    let keys = [
        ([-0.15, -0.15, 1.5], [1.05, 1.05, 0.0]),
        ([0.3, 0.2, 0.05], [0.7, 0.6, 0.0]),
        ([0.2, 0.1, 0.3], [1.1, 1.0, 0.0]),
    ];
    let t = (frame as f32 / (frames as f32 * 0.25).max(1.0)).min(2.0);
    let (from, to) = (keys[(t as usize).min(1)], keys[(t as usize + 1).min(2)]);
    let s = t.fract() * t.fract() * (3.0 - 2.0 * t.fract());
    let mix = |a: [f32; 3], b: [f32; 3]| [0, 1, 2].map(|i| a[i] + (b[i] - a[i]) * s);
    view_proj(mix(from.0, to.0), mix(from.1, to.1))
}

/// A colour target with a read-back buffer; its tracker puts it in each use's layout.
pub(crate) struct Target {
    image: Image,
    view: ImageView,
    pixels: Buffer,
    tracker: ResourceTracker,
    ids: [ResourceId; 2],
}

impl Target {
    pub(crate) fn new(device: &Device, name: &str) -> Result<Target> {
        let usage = ImageUsage::COLOR_ATTACHMENT | ImageUsage::COPY_SRC;
        let image =
            device.create_image(&ImageDesc::new_2d(name, Format::R8G8B8A8Unorm, SIDE, SIDE, usage))?;
        let view = image.create_view(0..1)?;
        let bytes = u64::from(SIDE * SIDE * 4);
        let pixels = device.create_buffer(
            &BufferDesc::new(format!("{name} read-back"), bytes, BufferUsage::COPY_DST)
                .with_intent(MemoryIntent::Readback),
        )?;
        let mut tracker = ResourceTracker::new(TrackerOptions::default());
        let ids = [tracker.track_image(&image, vk::ImageLayout::UNDEFINED)?, tracker.track_buffer(&pixels)?];
        Ok(Target { image, view, pixels, tracker, ids })
    }

    /// Records the barriers for `uses` (the first of them may discard the image's contents).
    fn declare(&mut self, rec: &mut Recording<'_>, uses: &[(usize, Use)], discard: bool) -> Result<()> {
        let mut batch = self.tracker.batch(rec.device().index(), rec.device().universal_queue().family());
        for (n, &(which, usage)) in uses.iter().enumerate() {
            if discard && n == 0 {
                batch.declare_discard(self.ids[which], Region::Whole, usage)?;
            } else {
                batch.declare(self.ids[which], Region::Whole, usage)?;
            }
        }
        let flush = batch.flush();
        self.tracker.record(rec, &flush.barriers)?;
        Ok(())
    }

    /// Renders `draw` with `program` into the target, then copies it to the read-back buffer.
    pub(crate) fn render(
        &mut self,
        rec: &mut Recording<'_>,
        program: &GraphicsProgram,
        draw: impl FnOnce(&mut Drawing<'_, '_>) -> Result<()>,
    ) -> Result<()> {
        self.declare(rec, &[(0, Use::ColorAttachmentWrite)], true)?;
        program.render(rec, &self.view, [SIDE; 2], [0.05, 0.05, 0.08, 1.0], draw)??;
        self.declare(rec, &[(0, Use::TransferSrc), (1, Use::TransferDst)], false)?;
        rec.copy_image_to_buffer(&self.image, vk::ImageLayout::TRANSFER_SRC_OPTIMAL, &self.pixels)?;
        self.declare(rec, &[(1, Use::HostRead)], false)
    }

    pub(crate) fn read(&self) -> Result<Vec<u8>> {
        let mut out = vec![0; self.pixels.size() as usize];
        self.pixels.read(0, &mut out)?;
        Ok(out)
    }
}

/// A fully resident copy of `source` (every tile of every mip, in `GENERAL`).
fn resident_copy(
    device: &Device,
    uploader: &Uploader,
    source: &dyn TileSource,
) -> Result<(Image, ImageView)> {
    let desc = source.desc();
    let usage = ImageUsage::SAMPLED | ImageUsage::COPY_DST;
    let name = format!("{} reference", source.name());
    let image_desc = ImageDesc::new_2d(name, desc.format, desc.width, desc.height, usage);
    let image = device.create_image(&image_desc.with_mip_levels(desc.mip_count))?;
    device.discard_to_general(&[&image])?;
    for mip in 0..desc.mip_count {
        let (columns, rows) = desc.tile_grid(mip);
        for (x, y) in (0..rows).flat_map(|y| (0..columns).map(move |x| (x, y))) {
            let (w, h) = desc.tile_extent(mip, x, y).ok_or("outside the tile grid")?;
            let region =
                ImageRegion::new(&image, mip, [x * desc.tile_width, y * desc.tile_height, 0], [w, h, 1]);
            uploader.write_image(&region, &source.read_tile(mip, x, y)?)?;
        }
    }
    let view = image.create_view(0..desc.mip_count)?;
    Ok((image, view))
}

/// The four planes' vertices: two triangles each, uv 0..1 across the plane.
pub(crate) fn plane_vertices(device: &Device) -> Result<Buffer> {
    let corners = [[0.0f32, 0.0], [1.0, 0.0], [0.0, 1.0], [0.0, 1.0], [1.0, 0.0], [1.0, 1.0]];
    let bytes: Vec<u8> = PLANES
        .iter()
        .flat_map(|&([x, y], _)| corners.map(|[u, v]| [x + u, y + v, 0.0, u, v]))
        .flatten()
        .flat_map(f32::to_le_bytes)
        .collect();
    let desc =
        BufferDesc::new("planes", bytes.len() as u64, BufferUsage::VERTEX).with_intent(MemoryIntent::Upload);
    let mut vertices = device.create_buffer(&desc)?;
    vertices.write(0, &bytes)?;
    Ok(vertices)
}

pub(crate) fn program(
    device: &Device,
    name: &str,
    fragment: &shaders::Shader,
    sets: u32,
) -> Result<GraphicsProgram> {
    let attributes = [
        VertexAttribute { location: 0, format: vk::Format::R32G32B32_SFLOAT, offset: 0 },
        VertexAttribute { location: 1, format: vk::Format::R32G32_SFLOAT, offset: 12 },
    ];
    let color = vk::Format::R8G8B8A8_UNORM;
    Ok(GraphicsProgram::new(
        device,
        name,
        &shaders::VT_QUAD_VERT,
        fragment,
        VERTEX_BYTES,
        &attributes,
        color,
        sets,
    )?)
}

/// Draws plane `plane` with `set` bound and `push` (the view-projection first).
pub(crate) fn draw_plane(
    draw: &mut Drawing<'_, '_>,
    vertices: &Buffer,
    plane: usize,
    set: &DescriptorSet,
    push: &[u8],
) -> Result<()> {
    draw.bind_descriptor_set(set)?;
    draw.push_constants(push)?;
    draw.bind_vertex_buffer(vertices, 6 * u64::from(VERTEX_BYTES) * plane as u64)?;
    Ok(draw.draw(6, 1)?)
}

pub(crate) fn matrix_bytes(m: &[f32; 16]) -> Vec<u8> {
    m.iter().flat_map(|f| f.to_le_bytes()).collect()
}

/// PSNR in dB of the RGB channels of two RGBA images (99 when identical).
fn psnr(a: &[u8], b: &[u8]) -> f64 {
    let (mut sum, mut n) = (0.0, 0.0);
    for (p, q) in a.chunks_exact(4).zip(b.chunks_exact(4)) {
        sum += (0..3).map(|i| (f64::from(p[i]) - f64::from(q[i])).powi(2)).sum::<f64>();
        n += 3.0;
    }
    if sum == 0.0 {
        99.0
    } else {
        10.0 * (255.0f64.powi(2) * n / sum).log10()
    }
}

// --- streaming: the textures' source, and the sets and push constants of a frame's bindings
/// Texture `index` of `PLANES` as a tile source. Its tiles are made on the loader's threads and
/// kept: the software path reads a tile's neighbours too (for its border).
pub(crate) fn source(index: usize) -> Arc<dyn TileSource> {
    let side = PLANES[index].1;
    let desc = VtDesc::new(Format::R8G8B8A8Unorm, side, side, 128, 128);
    let made = Mutex::new(HashMap::new());
    let read = move |mip, x, y| {
        if let Some(texels) = made.lock().unwrap_or_else(|e| e.into_inner()).get(&(mip, x, y)) {
            return Ok(Vec::clone(texels));
        }
        let texels = tile_texels(index, &desc, mip, x, y);
        made.lock().unwrap_or_else(|e| e.into_inner()).insert((mip, x, y), texels.clone());
        Ok(texels)
    };
    Arc::new(FnSource::new(format!("pattern {index}"), desc, read))
}

/// Per plane: its descriptor set over the streamer's views and its feedback slot.
pub(crate) type PlaneSets = Vec<(DescriptorSet, u16)>;

/// The sets of the planes for `bindings` (made once per ring slot and generation).
pub(crate) fn plane_sets(
    program: &GraphicsProgram,
    samplers: &[Sampler; 2],
    bindings: &FrameBindings<'_>,
    textures: &[VirtualTexture],
) -> Result<PlaneSets> {
    let (feedback, table) =
        (bindings.feedback.ok_or("no texture")?, bindings.image_table.ok_or("no texture")?);
    let general = vk::ImageLayout::GENERAL;
    textures
        .iter()
        .map(|texture| {
            let t = bindings.texture(texture).ok_or("a texture not bound")?;
            let (image, map): (ViewRef<'_>, ViewRef<'_>) = match t.views {
                TextureViews::Hardware { image, min_lod } => (image.into(), min_lod.into()),
                TextureViews::Software { atlas, indirection } => (atlas.into(), indirection.into()),
            };
            let set = program.descriptor_set(&[
                Binding::sampled(image, &samplers[0], general),
                Binding::sampled(map, &samplers[1], general),
                Binding::Buffer(feedback),
                Binding::Buffer(table),
            ])?;
            Ok((set, t.feedback_slot))
        })
        .collect()
}

/// `vt_quad`'s 96 bytes of push constants: the view-projection, then the feedback slot, frame,
/// sampling and whether this frame writes feedback.
pub(crate) fn plane_push(view: &[u8], slot: u16, bindings: &FrameBindings<'_>) -> Vec<u8> {
    let texture = bindings.textures().into_iter().find(|t| t.feedback_slot == slot);
    let words = texture.map_or([0; 8], |t| bindings.feedback_words(&t, true));
    view.iter().copied().chain(words.into_iter().flat_map(u32::to_le_bytes)).collect()
}
// --- end streaming

/// Runs `frames` frames on `device` with the textures on `path`.
pub fn run(device: &Arc<Device>, path: ResidencyPath, frames: u64) -> Result<Outcome> {
    let frames = frames.max(1);
    // --- streaming: the streamer and its four textures (each primed: its coarse chain resident)
    let desc = StreamerDesc::default()
        .with_name("virtual texture example")
        .with_path(path)
        .with_budget_tiles(BUDGET_TILES)
        .with_frames_in_flight(FRAMES_IN_FLIGHT as u32);
    let mut streamer = Streamer::new(device, desc)?;
    let sources: Vec<_> = (0..PLANES.len()).map(source).collect();
    let mut textures = Vec::new();
    for (index, source) in sources.iter().enumerate() {
        textures.push(streamer.add_texture(&format!("plane {index}"), Arc::clone(source))?);
    }
    let primed_tiles = streamer.manager_stats().tiles_streamed;
    let fragment = shaders::vt_quad_fragment(streamer.path());
    // --- end streaming
    // A set per plane and frame in flight: they are remade only when the textures change.
    let max_sets = (FRAMES_IN_FLIGHT * PLANES.len()) as u32;
    let streamed = program(device, "virtual texture planes", fragment, max_sets)?;
    let samplers = [device.create_sampler(Filter::Trilinear)?, device.create_sampler(Filter::Nearest)?];
    let vertices = plane_vertices(device)?;
    let mut targets = Vec::new();
    for n in 0..FRAMES_IN_FLIGHT {
        targets.push(Target::new(device, &format!("frame target {n}"))?);
    }
    let mut sets: Vec<Option<(u64, PlaneSets)>> = vec![None; FRAMES_IN_FLIGHT];
    let commands = CommandContext::new(device, "virtual texture frames")?;
    let mut in_flight: Vec<Option<(u64, Submission)>> = (0..FRAMES_IN_FLIGHT).map(|_| None).collect();
    let (mut first, mut last) = (Vec::new(), Vec::new());
    let started = Instant::now();
    for frame in 0..frames + FRAMES_IN_FLIGHT as u64 {
        let slot = frame as usize % FRAMES_IN_FLIGHT;
        if let Some((drawn, submission)) = in_flight[slot].take() {
            commands.wait(submission)?;
            if drawn == 0 {
                first = targets[slot].read()?;
            }
            if drawn + 1 == frames {
                last = targets[slot].read()?;
            }
        }
        if frame >= frames {
            continue;
        }
        if let Some(early) = (started + FRAME_TIME * frame as u32).checked_duration_since(Instant::now()) {
            std::thread::sleep(early);
        }
        let view = matrix_bytes(&camera(frame, frames));
        // --- streaming: one frame of the protocol around the renderer's draws
        let bindings = streamer.begin_frame()?;
        if sets[slot].as_ref().is_none_or(|(generation, _)| *generation != bindings.generation) {
            sets[slot] = Some((bindings.generation, plane_sets(&streamed, &samplers, &bindings, &textures)?));
        }
        let planes = &sets[slot].as_ref().ok_or("made above")?.1;
        let target = &mut targets[slot];
        let draws = |draw: &mut Drawing<'_, '_>| -> Result<()> {
            for (plane, (set, feedback_slot)) in planes.iter().enumerate() {
                draw_plane(draw, &vertices, plane, set, &plane_push(&view, *feedback_slot, &bindings))?;
            }
            Ok(())
        };
        let mut recorded = Ok(());
        let submission = commands.submit(&[], |rec| {
            let frame = bindings.record(rec, |rec| target.render(rec, &streamed, draws));
            recorded = frame.unwrap_or_else(|e| Err(e.into()));
        })?;
        drop(bindings);
        recorded?;
        streamer.end_frame(submission.gpu_use())?;
        // The check at the end counts frames, so each frame's loads finish before the next begins
        // (frame-exact, on any machine); a renderer lets them overlap frames, and the protocol
        // is the same either way.
        streamer.wait_for_loads();
        // --- end streaming
        in_flight[slot] = Some((frame, submission));
    }
    // --- streaming: what the feedback of the last frames asked for
    let feedback = streamer.take_feedback_frames();
    let settled = feedback.iter().rev().take_while(|f| f.misses == 0 && !f.overflowed).count();
    let streamed_tiles = streamer.manager_stats().tiles_streamed - primed_tiles;
    let resident_tiles_peak = streamer.manager_stats().resident_bytes_peak / TILE_BYTES;
    // --- end streaming

    // The reference: the first and the last view drawn from fully resident copies.
    let uploader = Uploader::new(device, "virtual texture references", 16 << 20)?;
    let copies =
        sources.iter().map(|s| resident_copy(device, &uploader, &**s)).collect::<Result<Vec<_>>>()?;
    uploader.destroy()?;
    let reference = program(device, "virtual texture reference planes", &shaders::VT_QUAD_REFERENCE_FRAG, 4)?;
    let reference_sets = copies
        .iter()
        .map(|(_, view)| {
            reference.descriptor_set(&[Binding::sampled(view, &samplers[0], vk::ImageLayout::GENERAL)])
        })
        .collect::<std::result::Result<Vec<_>, _>>()?;
    let mut psnr_db = [0.0; 2];
    for (n, (frame, streamed)) in [(0, &first), (frames - 1, &last)].into_iter().enumerate() {
        let view = matrix_bytes(&camera(frame, frames));
        let mut recorded = Ok(());
        device.submit_once("virtual texture reference", |rec| {
            recorded = targets[0].render(rec, &reference, |draw| {
                (0..PLANES.len())
                    .try_for_each(|plane| draw_plane(draw, &vertices, plane, &reference_sets[plane], &view))
            });
        })?;
        recorded?;
        psnr_db[n] = psnr(streamed, &targets[0].read()?);
    }
    let full_tiles = sources.iter().map(|s| s.desc().tile_count()).sum();
    Ok(Outcome {
        path: streamer.path(),
        frames,
        magenta_frame0: first.chunks_exact(4).filter(|p| *p == MAGENTA).count(),
        primed_tiles,
        streamed_tiles,
        resident_tiles_peak,
        full_tiles,
        settled_frames: settled as u64,
        psnr_frame0_db: psnr_db[0],
        psnr_last_db: psnr_db[1],
    })
}

#[allow(dead_code, reason = "the test that runs this example calls `run` and not `main`")]
fn main() -> Result<()> {
    tracing_subscriber::fmt().with_env_filter("warn").init();
    let path = match std::env::args().nth(1).as_deref() {
        None | Some("auto") => ResidencyPath::Auto,
        Some("hardware") => ResidencyPath::Hardware,
        Some("software") => ResidencyPath::Software,
        Some(other) => return Err(format!("unknown path `{other}`: auto, hardware or software").into()),
    };
    let set = DeviceSet::new(&DeviceSetDesc::default())?;
    let started = Instant::now();
    let outcome = run(&set.devices()[0], path, FRAMES)?;
    let seconds = started.elapsed().as_secs_f64();
    let problems = set.validation_log().problem_count();
    drop(set);
    let leaks = residency::vulkan::LEAKS_AT_TEARDOWN.load(std::sync::atomic::Ordering::SeqCst);
    let o = &outcome;
    println!(
        "{} frames on the {} path in {seconds:.1} s: {} tiles primed, {} streamed from feedback; \
         peak {} of {} tiles resident",
        o.frames,
        o.path.name(),
        o.primed_tiles,
        o.streamed_tiles,
        o.resident_tiles_peak,
        o.full_tiles
    );
    println!(
        "frame 0: {} nothing-resident pixels, {:.1} dB; last frame {:.1} dB against fully resident; \
         {} settled frames; validation problems: {problems}; leaked at teardown: {leaks}",
        o.magenta_frame0, o.psnr_frame0_db, o.psnr_last_db, o.settled_frames
    );
    if o.magenta_frame0 != 0 || o.streamed_tiles == 0 || o.settled_frames == 0 || problems != 0 || leaks != 0
    {
        return Err("the example failed its checks".into());
    }
    Ok(())
}
