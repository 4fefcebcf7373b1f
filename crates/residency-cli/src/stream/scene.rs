//! The renderer of `residency stream`: a grid of planes, one virtual texture each, drawn with the
//! shipped `vt_quad` shaders (fragment-shader feedback) three times per frame — streamed with
//! feedback, the same draw without feedback (the render's own cost), and from fully resident
//! copies (the reference) — with GPU timestamps around each pass and the streamed and reference
//! images read back for the PSNR. With `--source` files (the uncompressed originals of
//! block-compressed files) a fourth pass draws those fully resident too, for the PSNR against the
//! source. It binds what the streamer's `FrameBindings` give and knows
//! nothing of the streaming protocol.

use super::args::Ablate;
use anyhow::Context;
use residency::vulkan::ash::vk;
use residency::vulkan::compute::{Binding, DescriptorSet, ViewRef};
use residency::vulkan::graphics::{Drawing, GraphicsProgram, VertexAttribute};
use residency::vulkan::recording::Recording;
use residency::vulkan::recording::Timestamps;
use residency::vulkan::sparse::ResidencyPath;
use residency::vulkan::streaming::{FrameBindings, TextureViews, TileSource};
use residency::vulkan::tracking::{Region, ResourceId, ResourceTracker, TrackerOptions, Use};
use residency::vulkan::{
    shaders, Buffer, BufferDesc, BufferUsage, Device, Filter, Format, Image, ImageDesc, ImageRegion,
    ImageUsage, ImageView, MemoryIntent, Sampler, Uploader,
};
use std::sync::Arc;

/// World units per plane side.
pub const PLANE: f32 = 1000.0;
/// `vt_quad.vert`'s vertex: position (vec3) and uv (vec2).
const STRIDE: u32 = 20;
/// Timestamps per frame: start and end of the (up to) four passes.
const QUERIES: u32 = 8;

/// A colour target, its read-back buffer and the tracker that moves it between its uses.
struct Target {
    image: Image,
    view: ImageView,
    pixels: Option<Buffer>,
    tracker: ResourceTracker,
    ids: (ResourceId, Option<ResourceId>),
}

impl Target {
    fn new(device: &Device, name: &str, [w, h]: [u32; 2], read_back: bool) -> anyhow::Result<Target> {
        let image = device.create_image(&ImageDesc::new_2d(
            name,
            Format::R8G8B8A8Unorm,
            w,
            h,
            ImageUsage::COLOR_ATTACHMENT | ImageUsage::COPY_SRC,
        ))?;
        let view = image.create_view(0..1)?;
        let pixels = read_back
            .then(|| {
                device.create_buffer(
                    &BufferDesc::new(
                        format!("{name} pixels"),
                        u64::from(w) * u64::from(h) * 4,
                        BufferUsage::COPY_DST,
                    )
                    .with_intent(MemoryIntent::Readback),
                )
            })
            .transpose()?;
        let mut tracker = ResourceTracker::new(TrackerOptions::default());
        let ids = (
            tracker.track_image(&image, vk::ImageLayout::UNDEFINED)?,
            pixels.as_ref().map(|p| tracker.track_buffer(p)).transpose()?,
        );
        Ok(Target { image, view, pixels, tracker, ids })
    }

    /// Records `pass` into the target (its old contents discarded) between timestamps `timed`
    /// and `timed + 1`, then its copy into the read-back buffer, visible to the host at the
    /// submission's end.
    fn record(
        &mut self,
        rec: &mut Recording<'_>,
        (timestamps, timed): (&Timestamps, u32),
        pass: impl FnOnce(&mut Recording<'_>, &ImageView) -> anyhow::Result<()>,
    ) -> anyhow::Result<()> {
        let (device, family) = (rec.device().index(), rec.device().universal_queue().family());
        self.prepare(rec)?;
        timestamps.cmd_write(rec, timed)?;
        pass(rec, &self.view)?;
        timestamps.cmd_write(rec, timed + 1)?;
        if let (Some(pixels), Some(id)) = (&self.pixels, self.ids.1) {
            let mut batch = self.tracker.batch(device, family);
            batch.declare(self.ids.0, Region::Whole, Use::TransferSrc)?.declare(
                id,
                Region::Whole,
                Use::TransferDst,
            )?;
            let flush = batch.flush();
            self.tracker.record(rec, &flush.barriers)?;
            rec.copy_image_to_buffer(&self.image, vk::ImageLayout::TRANSFER_SRC_OPTIMAL, pixels)?;
            let mut batch = self.tracker.batch(device, family);
            batch.declare(id, Region::Whole, Use::HostRead)?;
            let flush = batch.flush();
            self.tracker.record(rec, &flush.barriers)?;
        }
        Ok(())
    }

    /// Records the barrier that makes the target a colour attachment, its old contents discarded.
    fn prepare(&mut self, rec: &mut Recording<'_>) -> anyhow::Result<()> {
        let (device, family) = (rec.device().index(), rec.device().universal_queue().family());
        let mut batch = self.tracker.batch(device, family);
        batch.declare_discard(self.ids.0, Region::Whole, Use::ColorAttachmentWrite)?;
        let flush = batch.flush();
        self.tracker.record(rec, &flush.barriers)?;
        Ok(())
    }

    fn read(&self) -> anyhow::Result<Vec<u8>> {
        let pixels = self.pixels.as_ref().context("a target without read-back")?;
        let mut out = vec![0; pixels.size() as usize];
        pixels.read(0, &mut out)?;
        Ok(out)
    }
}

/// One frame in flight: its three targets and the streamed draw's descriptor sets.
struct Slot {
    /// Streamed with feedback, streamed without, reference.
    targets: [Target; 3],
    /// The fully resident source files (`--source`).
    source: Option<Target>,
    /// Per plane, made for the streamer's bindings of `generation`: the streamed program's, and
    /// the feedback pass's (`--feedback-pass`; empty without).
    sets: Option<(u64, Vec<DescriptorSet>, Vec<DescriptorSet>)>,
    /// `--feedback-pass`: its target (1/stride of the render's extent).
    feedback_target: Option<Target>,
}

/// `--feedback-pass`: deferred feedback from a pass of its own at 1/stride of the resolution.
struct FeedbackPass {
    program: GraphicsProgram,
    /// Its target's extent: the record grid (`ceil(extent / stride)`).
    extent: [u32; 2],
}

/// What a finished frame rendered and how long its passes took.
pub struct FrameResult {
    pub streamed: Vec<u8>,
    pub reference: Vec<u8>,
    /// The frame drawn from the fully resident `--source` files, when given.
    pub source: Option<Vec<u8>>,
    /// GPU ms of the streamed draw with feedback, without, and of the reference draw.
    pub gpu_ms: [Option<f64>; 3],
    /// The device clock (ms) at the start and the end of the feedback pass.
    pub pass_at_ms: Option<(f64, f64)>,
}

/// The scene: planes, programs, reference copies, per-slot targets and timestamps.
pub struct Scene {
    streamed: GraphicsProgram,
    reference: GraphicsProgram,
    vertices: Buffer,
    /// Per plane: its file, whose reference descriptor set it draws with.
    plane_files: Vec<usize>,
    /// The planes drawn in the reference passes (`--references`), in plane order.
    referenced: Vec<usize>,
    /// Per file: its fully resident copy's descriptor set (`None`: no referenced plane takes it).
    reference_sets: Vec<Option<DescriptorSet>>,
    /// Per file: the descriptor set of its `--source` file's fully resident copy.
    source_sets: Vec<Option<DescriptorSet>>,
    /// Device memory of the fully resident copies.
    pub reference_bytes: u64,
    _references: Vec<(Image, ImageView)>,
    trilinear: Sampler,
    nearest: Sampler,
    slots: Vec<Slot>,
    timestamps: Timestamps,
    extent: [u32; 2],
    /// Planes per row of the grid.
    pub grid: u32,
    /// `--feedback-ablate`.
    ablate: Option<Ablate>,
    /// `--feedback-pass`.
    feedback_pass: Option<FeedbackPass>,
}

fn attributes() -> [VertexAttribute; 2] {
    [
        VertexAttribute { location: 0, format: vk::Format::R32G32B32_SFLOAT, offset: 0 },
        VertexAttribute { location: 1, format: vk::Format::R32G32_SFLOAT, offset: 12 },
    ]
}

/// Uploads every tile of `source` into a fully resident copy (all mips, `GENERAL`).
fn reference_copy(
    device: &Device,
    uploader: &Uploader,
    source: &dyn TileSource,
) -> anyhow::Result<(Image, ImageView)> {
    let vt = source.desc();
    let image = device.create_image(
        &ImageDesc::new_2d(
            format!("{} reference", source.name()),
            vt.format,
            vt.width,
            vt.height,
            ImageUsage::SAMPLED | ImageUsage::COPY_DST,
        )
        .with_mip_levels(vt.mip_count),
    )?;
    device.discard_to_general(&[&image])?;
    for mip in 0..vt.mip_count {
        let (gx, gy) = vt.tile_grid(mip);
        for y in 0..gy {
            for x in 0..gx {
                let (w, h) = vt.tile_extent(mip, x, y).context("tile extent")?;
                let data = source.read_tile(mip, x, y)?;
                let region =
                    ImageRegion::new(&image, mip, [x * vt.tile_width, y * vt.tile_height, 0], [w, h, 1]);
                uploader.write_image(&region, &data)?;
            }
        }
    }
    uploader.flush()?;
    let view = image.create_view(0..vt.mip_count)?;
    Ok((image, view))
}

impl Scene {
    /// `planes` planes on a square grid, plane `i` textured by `files[plane_files[i]]`; with
    /// `sources` (one per file, or none) a fourth pass draws `sources[plane_files[i]]` instead.
    /// The reference passes draw the `referenced` planes only (in plane order), from fully
    /// resident copies of their files alone.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        device: &Arc<Device>,
        path: ResidencyPath,
        files: &[Arc<dyn TileSource>],
        sources: &[Arc<dyn TileSource>],
        plane_files: Vec<usize>,
        referenced: Vec<usize>,
        extent: [u32; 2],
        frames_in_flight: u32,
        deferred: bool,
        ablate: Option<Ablate>,
        feedback_pass: Option<u32>,
    ) -> anyhow::Result<Scene> {
        let planes = plane_files.len() as u32;
        let grid = grid_of(plane_files.len());
        let fragment =
            if deferred { shaders::vt_quad_deferred_fragment(path) } else { shaders::vt_quad_fragment(path) };
        let color = vk::Format::R8G8B8A8_UNORM;
        let make = |name: &str, fragment, sets| {
            GraphicsProgram::new(
                device,
                name,
                &shaders::VT_QUAD_VERT,
                fragment,
                STRIDE,
                &attributes(),
                color,
                sets,
            )
        };
        let streamed = make("stream planes", fragment, frames_in_flight * planes)?;
        let feedback_pass = feedback_pass
            .map(|stride| -> anyhow::Result<FeedbackPass> {
                let program = make(
                    "stream feedback pass",
                    shaders::vt_feedback_fragment(path),
                    frames_in_flight * planes,
                )?;
                Ok(FeedbackPass { program, extent: extent.map(|e| e.div_ceil(stride.max(1))) })
            })
            .transpose()?;
        let reference = make(
            "stream reference planes",
            &shaders::VT_QUAD_REFERENCE_FRAG,
            (files.len() + sources.len()) as u32,
        )?;
        // Two triangles per plane, at its cell of the grid, uv 0..1 over it.
        let mut bytes = Vec::new();
        for i in 0..planes {
            let (x0, y0) = ((i % grid) as f32 * PLANE, (i / grid) as f32 * PLANE);
            for [u, v] in [[0.0f32, 0.0], [1.0, 0.0], [0.0, 1.0], [0.0, 1.0], [1.0, 0.0], [1.0, 1.0]] {
                for f in [x0 + u * PLANE, y0 + v * PLANE, 0.0, u, v] {
                    bytes.extend_from_slice(&f.to_le_bytes());
                }
            }
        }
        let mut vertices = device.create_buffer(
            &BufferDesc::new("stream planes", bytes.len() as u64, BufferUsage::VERTEX)
                .with_intent(MemoryIntent::Upload),
        )?;
        vertices.write(0, &bytes)?;
        let trilinear = device.create_sampler(Filter::Trilinear)?;
        let nearest = device.create_sampler(Filter::Nearest)?;
        let uploader = Uploader::new(device, "stream references", 32 << 20)?;
        let general = vk::ImageLayout::GENERAL;
        let mut wanted = vec![false; files.len()];
        for &plane in &referenced {
            wanted[plane_files[plane]] = true;
        }
        let mut references = Vec::new();
        let mut reference_bytes = 0;
        let mut reference_sets = Vec::new();
        for (i, file) in files.iter().chain(sources).enumerate() {
            if !wanted[i % files.len()] {
                reference_sets.push(None);
                continue;
            }
            let (image, view) = reference_copy(device, &uploader, &**file)?;
            reference_bytes += image.size();
            reference_sets
                .push(Some(reference.descriptor_set(&[Binding::sampled(&view, &trilinear, general)])?));
            references.push((image, view));
        }
        uploader.destroy()?;
        let source_sets = reference_sets.split_off(files.len());
        let mut slots = Vec::new();
        for n in 0..frames_in_flight {
            let target =
                |name: &str, read_back| Target::new(device, &format!("{name} frame {n}"), extent, read_back);
            let targets =
                [target("streamed", true)?, target("no-feedback", false)?, target("reference", true)?];
            let source = if sources.is_empty() { None } else { Some(target("source", true)?) };
            let feedback_target = feedback_pass
                .as_ref()
                .map(|p| Target::new(device, &format!("feedback pass frame {n}"), p.extent, false))
                .transpose()?;
            slots.push(Slot { targets, source, sets: None, feedback_target });
        }
        let timestamps = Timestamps::new(device, "stream pass timestamps", QUERIES * frames_in_flight)?;
        Ok(Scene {
            streamed,
            reference,
            vertices,
            plane_files,
            referenced,
            reference_sets,
            source_sets,
            reference_bytes,
            _references: references,
            trilinear,
            nearest,
            slots,
            timestamps,
            extent,
            grid,
            ablate,
            feedback_pass,
        })
    }

    /// Records frame `frame`'s three passes into `rec` (inside the streamer's recording), seen
    /// from `view_proj`, for the streamer's `bindings`.
    pub fn record(
        &mut self,
        rec: &mut Recording<'_>,
        bindings: &FrameBindings<'_>,
        view_proj: &[f32; 16],
    ) -> anyhow::Result<()> {
        let general = vk::ImageLayout::GENERAL;
        let slot = &mut self.slots[bindings.slot];
        if slot.sets.as_ref().is_none_or(|(g, _, _)| *g != bindings.generation) {
            let (feedback, table) = (
                bindings.feedback.context("the streamer has textures")?,
                bindings.image_table.context("the streamer has textures")?,
            );
            // Deferred feedback: the shader writes the record buffer only.
            let feedback_bindings = match bindings.feedback_records {
                Some(records) => vec![Binding::Buffer(records)],
                None => vec![Binding::Buffer(feedback), Binding::Buffer(table)],
            };
            let (mut sets, mut feedback_sets) = (Vec::new(), Vec::new());
            for t in &bindings.textures() {
                let (texture, map): (ViewRef<'_>, ViewRef<'_>) = match t.views {
                    TextureViews::Hardware { image, min_lod } => (image.into(), min_lod.into()),
                    TextureViews::Software { atlas, indirection } => (atlas.into(), indirection.into()),
                };
                let mut set = vec![
                    Binding::sampled(texture, &self.trilinear, general),
                    Binding::sampled(map, &self.nearest, general),
                ];
                set.extend(feedback_bindings.iter().copied());
                sets.push(self.streamed.descriptor_set(&set)?);
                if let Some(p) = &self.feedback_pass {
                    // The same bindings: the sparse image or atlas, the map, the record buffer.
                    feedback_sets.push(p.program.descriptor_set(&set)?);
                }
            }
            slot.sets = Some((bindings.generation, sets, feedback_sets));
        }
        let (_, sets, feedback_sets) = slot.sets.as_ref().context("made above")?;
        let view: Vec<u8> = view_proj.iter().flat_map(|f| f.to_le_bytes()).collect();
        let q = QUERIES * bindings.slot as u32;
        self.timestamps.cmd_reset(rec, q..q + QUERIES)?;
        let (vertices, extent, ts) = (&self.vertices, self.extent, &self.timestamps);
        let (streamed, reference_program) = (&self.streamed, &self.reference);
        let (plane_files, referenced, reference_sets, source_sets) =
            (&self.plane_files, &self.referenced, &self.reference_sets, &self.source_sets);
        // `--feedback-pass` in a frame that writes feedback: the render draws without feedback
        // and the small pass writes the records, inside the feedback pass's timestamps.
        let low = self.feedback_pass.as_ref().filter(|_| bindings.feedback_active);
        if let (Some(_), Some(t)) = (low, &mut slot.feedback_target) {
            t.prepare(rec)?;
        }
        let low = low.zip(slot.feedback_target.as_ref());
        // The streamer's view-projection for the small pass (its target is the record grid).
        let low_view = match low {
            Some((p, _)) => {
                let (small, m) =
                    bindings.feedback_pass_view(view_proj).context("deferred single-pixel feedback")?;
                anyhow::ensure!(small == p.extent, "feedback pass target {:?}, records {small:?}", p.extent);
                Some(m.iter().flat_map(|f| f.to_le_bytes()).collect::<Vec<u8>>())
            }
            None => None,
        };
        let [with_feedback, without, reference] = &mut slot.targets;
        // The two streamed passes take turns going first, so that neither is always the one that
        // finds the texture caches cold.
        let mut passes = [(0u32, with_feedback), (1, without)];
        if bindings.frame % 2 == 1 {
            passes.reverse();
        }
        let textures = bindings.textures();
        // `--feedback-ablate`: the pass without feedback may do part of the feedback pass's work
        // (vt_quad.glsl's testing bits, in a frame that writes feedback), and the resolve may
        // leave the feedback pass's timestamps.
        let without_bits = self.ablate.and_then(Ablate::without_pass_bits);
        let resolve_outside = self.ablate == Some(Ablate::Resolve);
        for (pass, target) in passes {
            target.record(rec, (ts, q + 2 * pass), |rec, target| {
                let planes = textures.iter().enumerate().map(|(i, t)| {
                    let mut push = view.clone();
                    let mut words = bindings.feedback_words(t, pass == 0 && low.is_none());
                    if let (1, Some(bits), true) = (pass, without_bits, bindings.feedback_active) {
                        words[4] |= bits;
                    }
                    push.extend(words.iter().flat_map(|w| w.to_le_bytes()));
                    (i, &sets[i], push)
                });
                streamed
                    .render(rec, target, extent, [0.0; 4], |draw| draw_planes(draw, vertices, planes))??;
                if let (0, Some(((p, t), low_view))) = (pass, low.zip(low_view.as_ref())) {
                    let planes = textures.iter().enumerate().map(|(i, tex)| {
                        let mut push = low_view.clone();
                        push.extend(bindings.feedback_pass_words(tex).iter().flat_map(|w| w.to_le_bytes()));
                        (i, &feedback_sets[i], push)
                    });
                    p.program.render(rec, &t.view, p.extent, [0.0; 4], |draw| {
                        draw_planes(draw, vertices, planes)
                    })??;
                }
                // Deferred feedback's resolve pass belongs to the feedback pass's cost: inside its
                // timestamps (nothing is recorded without deferred feedback).
                if pass == 0 && !resolve_outside {
                    bindings.resolve_feedback(rec)?;
                }
                Ok(())
            })?;
            if pass == 0 && resolve_outside {
                bindings.resolve_feedback(rec)?;
            }
        }
        reference.record(rec, (ts, q + 4), |rec, target| {
            let planes = referenced
                .iter()
                .filter_map(|&i| Some((i, reference_sets[plane_files[i]].as_ref()?, view.clone())));
            reference_program
                .render(rec, target, extent, [0.0; 4], |draw| draw_planes(draw, vertices, planes))??;
            Ok(())
        })?;
        if let Some(source) = &mut slot.source {
            source.record(rec, (ts, q + 6), |rec, target| {
                let planes = referenced
                    .iter()
                    .filter_map(|&i| Some((i, source_sets[plane_files[i]].as_ref()?, view.clone())));
                reference_program
                    .render(rec, target, extent, [0.0; 4], |draw| draw_planes(draw, vertices, planes))??;
                Ok(())
            })?;
        }
        Ok(())
    }

    /// Whether the reference passes draw only some of the planes (the PSNR then compares their
    /// pixels only).
    pub fn masked(&self) -> bool {
        self.referenced.len() < self.plane_files.len()
    }

    /// What the frame in `slot` rendered, once its submission has completed.
    pub fn finished(&self, slot: usize) -> anyhow::Result<FrameResult> {
        let q = QUERIES * slot as u32;
        let t = &self.timestamps;
        let targets = &self.slots[slot].targets;
        Ok(FrameResult {
            streamed: targets[0].read()?,
            reference: targets[2].read()?,
            source: self.slots[slot].source.as_ref().map(Target::read).transpose()?,
            gpu_ms: [t.elapsed_ms(q, q + 1), t.elapsed_ms(q + 2, q + 3), t.elapsed_ms(q + 4, q + 5)],
            pass_at_ms: t.at_ms(q).zip(t.at_ms(q + 1)),
        })
    }
}

/// Draws each `(i, set, push)` of `planes`: plane `i` of `vertices` with that set and push
/// constants.
fn draw_planes<'s>(
    draw: &mut Drawing<'_, '_>,
    vertices: &Buffer,
    planes: impl Iterator<Item = (usize, &'s DescriptorSet, Vec<u8>)>,
) -> anyhow::Result<()> {
    for (i, set, push) in planes {
        draw.bind_descriptor_set(set)?;
        draw.push_constants(&push)?;
        draw.bind_vertex_buffer(vertices, 6 * u64::from(STRIDE) * i as u64)?;
        draw.draw(6, 1)?;
    }
    Ok(())
}

/// The built-in camera over a grid of `grid × grid` planes: a glide looking ahead and down at
/// 2 % of a plane's side above the ground, with a cut at mid-run. Returns the view-projection
/// (column-major, Vulkan clip space) for an `aspect` of width / height.
pub fn camera(frame: u64, frames: u64, grid: u32, aspect: f32) -> [f32; 16] {
    let total = grid as f32 * PLANE;
    let eye = eye(frame, frames, grid);
    let f = normalize(LOOK);
    let r = normalize(cross(f, [0.0, 0.0, 1.0]));
    let u = cross(r, f);
    let tan = 30f32.to_radians().tan();
    let (near, far) = (0.5f32, total * 4.0);
    let a = far / (far - near);
    let b = -near * far / (far - near);
    let dot = |x: [f32; 3], y: [f32; 3]| x[0] * y[0] + x[1] * y[1] + x[2] * y[2];
    // Rows of clip = M · (p, 1): x right, y down (Vulkan), z 0..1, w = depth along f.
    let rows = [
        [r[0] / (tan * aspect), r[1] / (tan * aspect), r[2] / (tan * aspect), -dot(r, eye) / (tan * aspect)],
        [-u[0] / tan, -u[1] / tan, -u[2] / tan, dot(u, eye) / tan],
        [a * f[0], a * f[1], a * f[2], -a * dot(f, eye) + b],
        [f[0], f[1], f[2], -dot(f, eye)],
    ];
    let mut m = [0.0; 16];
    for (row, values) in rows.iter().enumerate() {
        for (col, v) in values.iter().enumerate() {
            m[col * 4 + row] = *v;
        }
    }
    m
}

/// The camera's viewing direction (before normalizing).
const LOOK: [f32; 3] = [0.6, 0.45, -0.35];

/// The camera's position at `frame` of `frames` over a `grid × grid` grid.
fn eye(frame: u64, frames: u64, grid: u32) -> [f32; 3] {
    let half = frames / 2;
    let (t, start) = if frame < half {
        (frame as f32, [0.15f32, 0.2f32])
    } else {
        ((frame - half) as f32, [0.6f32, 0.55f32])
    };
    let total = grid as f32 * PLANE;
    [total * start[0] + PLANE * 0.0015 * t, total * start[1] + PLANE * 0.001 * t, PLANE * 0.02]
}

/// Where the camera's centre ray meets the ground at `frame` (x, y).
pub fn focus(frame: u64, frames: u64, grid: u32) -> [f32; 2] {
    let e = eye(frame, frames, grid);
    let t = e[2] / -LOOK[2];
    [e[0] + LOOK[0] * t, e[1] + LOOK[1] * t]
}

/// Planes per row of a grid of `planes` planes.
pub fn grid_of(planes: usize) -> u32 {
    ((planes as f64).sqrt().ceil() as u32).max(1)
}

fn normalize(v: [f32; 3]) -> [f32; 3] {
    let l = (v[0] * v[0] + v[1] * v[1] + v[2] * v[2]).sqrt();
    [v[0] / l, v[1] / l, v[2] / l]
}

fn cross(a: [f32; 3], b: [f32; 3]) -> [f32; 3] {
    [a[1] * b[2] - a[2] * b[1], a[2] * b[0] - a[0] * b[2], a[0] * b[1] - a[1] * b[0]]
}
