//! Graphics programs with descriptor sets and push constants: a textured quad drawn through a
//! descriptor set shows its texture; binds and draws that break a rule are typed errors that
//! record nothing; and the shipped `vt_quad` fragment shaders draw a streamed virtual texture on
//! both residency paths, writing the feedback that streams its tiles, with the colours of the
//! compute path's fallback sampling. Every test runs under synchronization validation: the harness
//! fails a test on any validation message or leaked object.

mod common;

use residency_core::format::Format;
use residency_core::memory::MemoryIntent;
use residency_core::streaming::{FnSource, RequestKind, TileKey, TileSource};
use residency_core::sync::{Region, TrackerOptions, Use};
use residency_core::tiles::{ImageId, ResidencyPath, TileCoord};
use residency_core::usage::{BufferUsage, ImageUsage};
use residency_core::vt_file::VtDesc;
use residency_vulkan::ash::vk;
use residency_vulkan::compute::{Binding, BindingKind, DescriptorSet, ViewRef};
use residency_vulkan::graphics::{DrawError, Drawing, GraphicsProgram, IndexFormat, VertexAttribute};
use residency_vulkan::recording::MemoryDependency;
use residency_vulkan::recording::Recording;
use residency_vulkan::streaming::{Streamer, StreamerDesc, TextureViews};
use residency_vulkan::testing::with_gpu;
use residency_vulkan::tracking::ResourceTracker;
use residency_vulkan::{
    shaders, Buffer, BufferDesc, CommandContext, Device, Filter, Image, ImageDesc, ImageRegion, ImageView,
    Uploader,
};
use std::sync::Arc;
use vk::{AccessFlags2 as A, PipelineStageFlags2 as S};

/// `vt_quad.vert`'s vertex layout: `vec3 position` at location 0, `vec2 uv` at location 1.
const STRIDE: u32 = 20;

fn attributes() -> [VertexAttribute; 2] {
    [
        VertexAttribute { location: 0, format: vk::Format::R32G32B32_SFLOAT, offset: 0 },
        VertexAttribute { location: 1, format: vk::Format::R32G32_SFLOAT, offset: 12 },
    ]
}

/// The unit square of the texture in world space (z = 0, position = uv): its 4 corners.
const CORNERS: [[f32; 2]; 4] = [[0.0, 0.0], [1.0, 0.0], [0.0, 1.0], [1.0, 1.0]];
/// Two triangles over the corners.
const QUAD_INDICES: [u16; 6] = [0, 1, 2, 2, 1, 3];

fn vertex_bytes(corners: impl IntoIterator<Item = [f32; 2]>) -> Vec<u8> {
    corners.into_iter().flat_map(|[u, v]| [u, v, 0.0, u, v]).flat_map(f32::to_le_bytes).collect()
}

/// A view-projection (column-major) that shows the square `[lo, hi]²` of the world plane over
/// the whole viewport, `lo` at the top-left.
fn ortho(lo: f32, hi: f32) -> Vec<u8> {
    let s = 2.0 / (hi - lo);
    let t = -1.0 - s * lo;
    let m = [s, 0.0, 0.0, 0.0, 0.0, s, 0.0, 0.0, 0.0, 0.0, 1.0, 0.0, t, t, 0.0, 1.0];
    m.iter().flat_map(|f: &f32| f.to_le_bytes()).collect()
}

/// The 96 bytes of `vt_quad.frag`'s push constants.
fn vt_push(view: &[u8], slot: u16, frame: u64, feedback: bool) -> Vec<u8> {
    let mut push = view.to_vec();
    for word in [u32::from(slot), frame as u32, 1, 1, u32::from(feedback), 0, 0, 0] {
        push.extend_from_slice(&word.to_le_bytes());
    }
    assert_eq!(push.len(), 96);
    push
}

fn host_buffer(device: &Device, name: &str, bytes: &[u8], usage: BufferUsage) -> Buffer {
    let mut buffer = device
        .create_buffer(&BufferDesc::new(name, bytes.len() as u64, usage).with_intent(MemoryIntent::Upload))
        .unwrap();
    buffer.write(0, bytes).unwrap();
    buffer
}

/// A render target with its read-back buffer and the tracker that moves it between uses.
struct Target {
    image: Image,
    view: ImageView,
    pixels: Buffer,
    tracker: ResourceTracker,
    ids: [residency_core::sync::ResourceId; 2],
    side: u32,
}

impl Target {
    fn new(device: &Device, name: &str, side: u32, usage: ImageUsage) -> Target {
        let image = device
            .create_image(&ImageDesc::new_2d(
                name,
                Format::R8G8B8A8Unorm,
                side,
                side,
                ImageUsage::COLOR_ATTACHMENT | ImageUsage::COPY_SRC | usage,
            ))
            .unwrap();
        let view = image.create_view(0..1).unwrap();
        let pixels = device
            .create_buffer(
                &BufferDesc::new(format!("{name} pixels"), u64::from(side * side * 4), BufferUsage::COPY_DST)
                    .with_intent(MemoryIntent::Readback),
            )
            .unwrap();
        let mut tracker = ResourceTracker::new(TrackerOptions::default());
        let ids = [
            tracker.track_image(&image, vk::ImageLayout::UNDEFINED).unwrap(),
            tracker.track_buffer(&pixels).unwrap(),
        ];
        Target { image, view, pixels, tracker, ids, side }
    }

    /// Records a pass of `program` into the target (its contents discarded) with `draw`, then
    /// the barriers and copy that make the pixels and the fragment shaders' storage writes
    /// visible to the host. Returns what `draw` returns.
    fn record<R>(
        &mut self,
        rec: &mut Recording<'_>,
        program: &GraphicsProgram,
        draw: impl FnOnce(&mut Drawing<'_, '_>) -> R,
    ) -> R {
        let (index, family) = (rec.device().index(), rec.device().universal_queue().family());
        let [image, pixels] = self.ids;
        let mut batch = self.tracker.batch(index, family);
        batch.declare_discard(image, Region::Whole, Use::ColorAttachmentWrite).unwrap();
        let flush = batch.flush();
        self.tracker.record(rec, &flush.barriers).unwrap();
        let drawn = program.render(rec, &self.view, [self.side; 2], [0.0; 4], draw).unwrap();
        rec.memory_barrier(MemoryDependency {
            src_stages: S::FRAGMENT_SHADER,
            src_access: A::SHADER_WRITE,
            dst_stages: S::HOST,
            dst_access: A::HOST_READ,
        })
        .unwrap();
        let mut batch = self.tracker.batch(index, family);
        batch
            .declare(image, Region::Whole, Use::TransferSrc)
            .unwrap()
            .declare(pixels, Region::Whole, Use::TransferDst)
            .unwrap();
        let flush = batch.flush();
        self.tracker.record(rec, &flush.barriers).unwrap();
        rec.copy_image_to_buffer(&self.image, vk::ImageLayout::TRANSFER_SRC_OPTIMAL, &self.pixels).unwrap();
        let mut batch = self.tracker.batch(index, family);
        batch.declare(pixels, Region::Whole, Use::HostRead).unwrap();
        let flush = batch.flush();
        self.tracker.record(rec, &flush.barriers).unwrap();
        drawn
    }

    fn read(&self) -> Vec<u8> {
        let mut out = vec![0u8; (self.side * self.side * 4) as usize];
        self.pixels.read(0, &mut out).unwrap();
        out
    }

    fn release(mut self) {
        let index = self.image.device().index();
        for id in self.ids {
            self.tracker.untrack(index, id).unwrap();
        }
    }
}

/// A 16 × 16 texture of `common::texel`, uploaded and in `GENERAL`.
fn texture(device: &Device, uploader: &Uploader, name: &str) -> (Image, ImageView) {
    let usage = ImageUsage::SAMPLED | ImageUsage::COPY_DST;
    let image = device.create_image(&ImageDesc::new_2d(name, Format::R8G8B8A8Unorm, 16, 16, usage)).unwrap();
    device.discard_to_general(&[&image]).unwrap();
    let region = ImageRegion::new(&image, 0, [0; 3], [16, 16, 1]);
    uploader.write_image(&region, &common::region_texels(0, [0, 0], [16, 16])).unwrap();
    uploader.wait_idle().unwrap();
    let view = image.create_view(0..1).unwrap();
    (image, view)
}

fn reference_program(device: &Device, name: &str) -> GraphicsProgram {
    GraphicsProgram::new(
        device,
        name,
        &shaders::VT_QUAD_VERT,
        &shaders::VT_QUAD_REFERENCE_FRAG,
        STRIDE,
        &attributes(),
        vk::Format::R8G8B8A8_UNORM,
        2,
    )
    .unwrap()
}

/// Binds `set` and the 6 vertices of two triangles over the texture, shown whole, and draws them.
fn draw_whole_texture(pass: &mut Drawing<'_, '_>, set: &DescriptorSet, vertices: &Buffer) {
    pass.bind_descriptor_set(set).unwrap();
    pass.push_constants(&ortho(0.0, 1.0)).unwrap();
    pass.bind_vertex_buffer(vertices, 0).unwrap();
    pass.draw(6, 1).unwrap();
}

#[test]
fn a_textured_quad_drawn_through_a_descriptor_set_shows_its_texture() {
    with_gpu(|set| {
        let device = &set.devices()[0];
        let uploader = Uploader::new(device, "draw upload", 1 << 20).unwrap();
        let (_image, view) = texture(device, &uploader, "draw texture");
        let nearest = device.create_sampler(Filter::Nearest).unwrap();
        let program = reference_program(device, "draw reference");
        assert_eq!(program.bindings(), [BindingKind::SampledImage]);
        assert_eq!(program.push_constant_bytes(), 64, "vt_quad.vert's view-projection");
        let ds =
            program.descriptor_set(&[Binding::sampled(&view, &nearest, vk::ImageLayout::GENERAL)]).unwrap();
        // Two triangles, not indexed: 6 vertices.
        let triangles = QUAD_INDICES.map(|i| CORNERS[i as usize]);
        let vertices = host_buffer(device, "draw vertices", &vertex_bytes(triangles), BufferUsage::VERTEX);
        let mut target = Target::new(device, "draw target", 16, ImageUsage::NONE);
        device
            .submit_once("draw a textured quad", |rec| {
                target.record(rec, &program, |pass| {
                    let before = pass.helper_commands();
                    draw_whole_texture(pass, &ds, &vertices);
                    assert_eq!(pass.helper_commands(), before + 4, "set, push, vertex buffer, draw");
                })
            })
            .unwrap();
        // Every pixel centre is a texel centre at LOD 0 (the quad covers 16 × 16 pixels with
        // 16 × 16 texels): the texture, texel for texel.
        assert_eq!(target.read(), common::region_texels(0, [0, 0], [16, 16]));

        // Dropped inside the recording (after the draw bound them), the program, set, vertex
        // buffer and texture stay alive until the submission is done.
        let mut target2 = Target::new(device, "draw target 2", 16, ImageUsage::NONE);
        let mut held = Some((program, ds, vertices, view, nearest));
        device
            .submit_once("draw, then drop", |rec| {
                let (program, ds, vertices, view, nearest) = held.take().unwrap();
                target2.record(rec, &program, |pass| draw_whole_texture(pass, &ds, &vertices));
                drop((ds, vertices, view, nearest, program));
            })
            .unwrap();
        assert_eq!(target2.read(), common::region_texels(0, [0, 0], [16, 16]));
        target.release();
        target2.release();
        uploader.destroy().unwrap();
    });
}

#[test]
fn misuse_binds_and_draws_that_break_a_rule_are_typed_errors_and_record_nothing() {
    with_gpu(|set| {
        let device = &set.devices()[0];
        let uploader = Uploader::new(device, "misuse draw upload", 1 << 20).unwrap();
        let (_image, view) = texture(device, &uploader, "misuse draw texture");
        let nearest = device.create_sampler(Filter::Nearest).unwrap();
        let program = reference_program(device, "misuse draw reference");
        let other = reference_program(device, "misuse draw other");
        let general = vk::ImageLayout::GENERAL;
        let ds = program.descriptor_set(&[Binding::sampled(&view, &nearest, general)]).unwrap();
        let foreign = other.descriptor_set(&[Binding::sampled(&view, &nearest, general)]).unwrap();
        let mut target = Target::new(device, "misuse draw target", 16, ImageUsage::SAMPLED);
        // A set that samples the render target itself, which is an attachment during the pass.
        let feedback_loop =
            program.descriptor_set(&[Binding::sampled(&target.view, &nearest, general)]).unwrap();
        // Five vertices: one short of the 6 a quad of two triangles reads.
        let five = vertex_bytes(CORNERS.into_iter().chain([[0.5, 0.5]]));
        let vertices = host_buffer(device, "misuse draw vertices", &five, BufferUsage::VERTEX);
        let index_bytes: Vec<u8> = QUAD_INDICES.iter().flat_map(|i| u32::from(*i).to_le_bytes()).collect();
        let indices = host_buffer(device, "misuse draw indices", &index_bytes, BufferUsage::INDEX);
        let name = "misuse draw reference".to_owned();

        device
            .submit_once("misuse draws", |rec| {
                target.record(rec, &program, |pass| {
                    let before = pass.helper_commands();
                    let refused = |pass: &Drawing<'_, '_>, what: &str| {
                        assert_eq!(pass.helper_commands(), before, "{what}: nothing recorded");
                    };
                    // Nothing bound: the set is the first thing missing, then the push constants,
                    // then the vertex buffer.
                    assert!(matches!(
                        pass.draw(6, 1),
                        Err(DrawError::NotBound { what: "descriptor set", .. })
                    ));
                    refused(pass, "a draw without the set");
                    assert!(matches!(pass.bind_descriptor_set(&foreign), Err(DrawError::ForeignSet { .. })));
                    refused(pass, "another program's set");
                    match pass.bind_descriptor_set(&feedback_loop) {
                        Err(DrawError::ImageLayout(residency_vulkan::VulkanError::ImageLayout {
                            expected,
                            actual,
                            ..
                        })) => {
                            assert_eq!(
                                (expected, actual),
                                (general, vk::ImageLayout::COLOR_ATTACHMENT_OPTIMAL)
                            )
                        }
                        other => panic!("sampling the render target: {other:?}"),
                    }
                    refused(pass, "a set sampling the attachment");
                    // Push constants: 68 bytes for a 64-byte range, and not whole words.
                    match pass.push_constants(&[0; 68]) {
                        Err(DrawError::PushConstantSize { program, given: 68, declared: 64 }) => {
                            assert_eq!(program, name)
                        }
                        other => panic!("68 push bytes: {other:?}"),
                    }
                    assert!(matches!(
                        pass.push_constants(&[0; 6]),
                        Err(DrawError::PushConstantSize { given: 6, .. })
                    ));
                    refused(pass, "push constants that do not fit");
                    pass.bind_descriptor_set(&ds).unwrap();
                    let before = pass.helper_commands();
                    assert!(matches!(
                        pass.draw(6, 1),
                        Err(DrawError::NotBound { what: "push constants", .. })
                    ));
                    assert_eq!(pass.helper_commands(), before);
                    pass.push_constants(&ortho(0.0, 1.0)).unwrap();
                    let before = pass.helper_commands();
                    assert!(matches!(
                        pass.draw(6, 1),
                        Err(DrawError::NotBound { what: "vertex buffer", .. })
                    ));
                    // Buffers: the index buffer as a vertex buffer (no VERTEX usage), an offset
                    // past the end, an index offset that is not a multiple of the index size.
                    assert!(matches!(pass.bind_vertex_buffer(&indices, 0), Err(DrawError::Buffer { .. })));
                    assert!(matches!(
                        pass.bind_vertex_buffer(&vertices, vertices.size()),
                        Err(DrawError::Buffer { .. })
                    ));
                    assert!(matches!(
                        pass.bind_index_buffer(&indices, 2, IndexFormat::U32),
                        Err(DrawError::Buffer { .. })
                    ));
                    assert!(matches!(
                        pass.bind_index_buffer(&vertices, 0, IndexFormat::U32),
                        Err(DrawError::Buffer { .. })
                    ));
                    assert_eq!(pass.helper_commands(), before);
                    pass.bind_vertex_buffer(&vertices, 0).unwrap();
                    let before = pass.helper_commands();
                    // 6 vertices of 20 bytes from a 100-byte buffer.
                    assert!(matches!(
                        pass.draw(6, 1),
                        Err(DrawError::OutOfRange { what: "vertex", needed: 120, available: 100, .. })
                    ));
                    // SAFETY: refused before anything is recorded (no index buffer bound).
                    let err = unsafe { pass.draw_indexed(6, 1) };
                    assert!(matches!(err, Err(DrawError::NotBound { what: "index buffer", .. })));
                    assert_eq!(pass.helper_commands(), before);
                    pass.bind_index_buffer(&indices, 0, IndexFormat::U32).unwrap();
                    let before = pass.helper_commands();
                    // SAFETY: refused before anything is recorded (7 indices of a 6-index buffer).
                    let err = unsafe { pass.draw_indexed(7, 1) };
                    assert!(matches!(
                        err,
                        Err(DrawError::OutOfRange { what: "index", needed: 28, available: 24, .. })
                    ));
                    assert_eq!(pass.helper_commands(), before);
                    // What is right draws: 5 vertices fit, and the indices 0–3 name 4 of them.
                    pass.draw(5, 1).unwrap();
                    // SAFETY: QUAD_INDICES are 0–3, inside the 5 bound vertices.
                    unsafe { pass.draw_indexed(6, 1) }.unwrap();
                    assert_eq!(pass.helper_commands(), before + 2);
                })
            })
            .unwrap();
        assert_eq!(target.read(), common::region_texels(0, [0, 0], [16, 16]), "the indexed quad");
        target.release();
        uploader.destroy().unwrap();
    });
}

// --- The vt_quad shaders over a streamed virtual texture -------------------------------------

const SIDE: u32 = 1024;
/// The viewport, in pixels: 128 × 128 pixels showing texels 448..576 of mip 0 (tiles 3 and 4 of
/// 128 texels on both axes), one texel per pixel (LOD 0).
const VIEW: u32 = 128;
const FIRST_TEXEL: u32 = 448;

fn source(name: &str) -> Arc<dyn TileSource> {
    let desc = VtDesc::new(Format::R8G8B8A8Unorm, SIDE, SIDE, 128, 128);
    Arc::new(FnSource::new(name, desc, move |mip, x, y| {
        let (w, h) = desc.tile_extent(mip, x, y).expect("in the grid");
        Ok((0..h)
            .flat_map(|ty| (0..w).flat_map(move |tx| common::texel(x * 128 + tx, y * 128 + ty, mip)))
            .collect())
    }))
}

fn tile(streamer: &Streamer, id: ImageId, mip: u32, x: u32, y: u32) -> TileKey {
    let layout = streamer.manager().residency(id).unwrap().layout();
    TileKey::tile(id, layout.tile_index(TileCoord { layer: 0, mip, x, y, z: 0 }).unwrap())
}

/// One frame of the streamer drawn with `program`: its pixels and the decoded feedback requests
/// `(tile key, mip, kind)` this frame wrote. Also checks the pixels against the compute path's
/// fallback sampling (`sparse_fallback*.comp`) of the same views at the same uv and LOD.
fn draw_frame(
    streamer: &mut Streamer,
    commands: &CommandContext,
    program: &GraphicsProgram,
    target: &mut Target,
    buffers: (&Buffer, &Buffer),
    feedback: bool,
) -> (Vec<u8>, Vec<(TileKey, u32, RequestKind)>) {
    let device = Arc::clone(commands.device());
    let trilinear = device.create_sampler(Filter::Trilinear).unwrap();
    let nearest = device.create_sampler(Filter::Nearest).unwrap();
    let bindings = streamer.begin_frame().unwrap();
    let texture = bindings.textures()[0];
    let (views, fallback): ((ViewRef<'_>, ViewRef<'_>), _) = match texture.views {
        TextureViews::Hardware { image, min_lod } => {
            ((image.into(), min_lod.into()), common::HARDWARE_FALLBACK)
        }
        TextureViews::Software { atlas, indirection } => {
            ((atlas.into(), indirection.into()), common::SOFTWARE_FALLBACK)
        }
    };
    let general = vk::ImageLayout::GENERAL;
    let (fb, table) = (bindings.feedback.unwrap(), bindings.image_table.unwrap());
    let ds = program
        .descriptor_set(&[
            Binding::sampled(views.0, &trilinear, general),
            Binding::sampled(views.1, &nearest, general),
            Binding::Buffer(fb),
            Binding::Buffer(table),
        ])
        .unwrap();
    let lo = FIRST_TEXEL as f32 / SIDE as f32;
    let hi = (FIRST_TEXEL + VIEW) as f32 / SIDE as f32;
    let push = vt_push(&ortho(lo, hi), texture.feedback_slot, bindings.frame, feedback);
    let (vertices, indices) = buffers;
    let submission = commands
        .submit(&[], |rec| {
            bindings
                .record(rec, |rec| {
                    target.record(rec, program, |pass| {
                        pass.bind_descriptor_set(&ds).unwrap();
                        pass.push_constants(&push).unwrap();
                        pass.bind_vertex_buffer(vertices, 0).unwrap();
                        pass.bind_index_buffer(indices, 0, IndexFormat::U16).unwrap();
                        // SAFETY: the indices are 0–3 and the vertex buffer holds the 4 corners.
                        unsafe { pass.draw_indexed(6, 1) }.unwrap();
                    });
                })
                .unwrap();
        })
        .unwrap();
    commands.wait_for(&submission).unwrap();
    let pixels = target.read();
    let mut words = vec![0u8; fb.size() as usize];
    fb.read(0, &mut words).unwrap();
    let layout = bindings.layout.unwrap();
    let decoded = layout.decode(&words[..layout.buffer_bytes() as usize], bindings.frame).unwrap();
    assert!(!decoded.overflowed);
    let requests = decoded.requests.iter().map(|r| (TileKey::tile(r.image, r.tile), r.mip, r.kind)).collect();

    // The compute path at every 7th pixel's uv (its centre: a texel centre of mip 0) and LOD 0.
    let probes: Vec<([f32; 2], f32)> = (0..VIEW)
        .step_by(7)
        .flat_map(|y| (0..VIEW).step_by(7).map(move |x| (x, y)))
        .map(|(x, y)| (common::centre(SIDE, FIRST_TEXEL + x, FIRST_TEXEL + y, 0), 0.0))
        .collect();
    let computed = common::sample_fallback(&device, fallback, views, &probes);
    for (i, (texel, resident, _)) in computed.iter().enumerate() {
        assert!(resident, "probe {i}: the coarse chain is always resident");
        let (x, y) = ((i as u32 % VIEW.div_ceil(7)) * 7, (i as u32 / VIEW.div_ceil(7)) * 7);
        let at = ((y * VIEW + x) * 4) as usize;
        let drawn = common::as_f32(pixels[at..at + 4].try_into().unwrap());
        assert!(
            drawn.iter().zip(texel).all(|(d, c)| (d - c).abs() <= 1.0),
            "pixel ({x}, {y}): drawn {drawn:?}, compute path {texel:?}"
        );
    }
    drop(ds);
    drop(bindings);
    streamer.end_frame(submission.gpu_use()).unwrap();
    streamer.wait_for_loads();
    (pixels, requests)
}

/// `vt_quad.frag` (hardware) or `vt_quad_software.frag` over the streamer's texture: frame 0 has
/// only the coarse chain resident, shows its colours (as the compute path samples them) and its
/// feedback asks for exactly the four mip-0 tiles under the view; the streamer makes them
/// resident from that fragment-shader feedback alone; then the view shows mip 0 texel for texel,
/// and a frame drawn with feedback off writes no request.
fn fragment_feedback_streams(path: ResidencyPath) {
    with_gpu(|set| {
        let device = Arc::clone(&set.devices()[0]);
        assert!(
            device.features().fragment_stores_and_atomics,
            "lavapipe writes storage from fragment shaders"
        );
        let desc = StreamerDesc::default()
            .with_name("vt quad streamer")
            .with_path(path)
            .with_frames_in_flight(1)
            .with_budget_tiles(96)
            .with_workers(2);
        let mut streamer = Streamer::new(&device, desc).unwrap();
        assert_eq!(streamer.path(), path);
        let t = streamer.add_texture("vt quad", source("vt quad")).unwrap();
        let fragment = match path {
            ResidencyPath::Software => &shaders::VT_QUAD_SOFTWARE_FRAG,
            _ => &shaders::VT_QUAD_FRAG,
        };
        let make = |name: &str| {
            GraphicsProgram::new(
                &device,
                name,
                &shaders::VT_QUAD_VERT,
                fragment,
                STRIDE,
                &attributes(),
                vk::Format::R8G8B8A8_UNORM,
                16,
            )
            .unwrap()
        };
        // Room for a set per frame (a set's memory returns to the pool with the program).
        let program = make(fragment.name());
        assert_eq!(
            program.bindings(),
            [
                BindingKind::SampledImage,
                BindingKind::SampledImage,
                BindingKind::StorageBuffer,
                BindingKind::StorageBuffer
            ]
        );
        assert_eq!(program.push_constant_bytes(), 96);
        let vertices = host_buffer(&device, "vt quad vertices", &vertex_bytes(CORNERS), BufferUsage::VERTEX);
        let index_bytes: Vec<u8> = QUAD_INDICES.iter().flat_map(|i| i.to_le_bytes()).collect();
        let indices = host_buffer(&device, "vt quad indices", &index_bytes, BufferUsage::INDEX);
        let mut target = Target::new(&device, "vt quad target", VIEW, ImageUsage::NONE);
        let commands = CommandContext::new(&device, "vt quad frames").unwrap();
        let buffers = (&vertices, &indices);
        let id = t.id();
        let mut wanted: Vec<_> = [(3, 3), (4, 3), (3, 4), (4, 4)]
            .iter()
            .map(|&(x, y)| (tile(&streamer, id, 0, x, y), 0, RequestKind::Miss))
            .collect();
        wanted.sort();

        // Frame 0: nothing of mip 0 is resident; every pixel samples the coarse chain (no
        // magenta) and asks for its mip-0 tile.
        let (pixels, mut requests) =
            draw_frame(&mut streamer, &commands, &program, &mut target, buffers, true);
        assert!(pixels.chunks(4).all(|p| p != [255, 0, 255, 255]), "a pixel with nothing resident");
        requests.sort();
        assert_eq!(requests, wanted, "the fragment shader asked for the four mip-0 tiles under the view");

        // The streamer streams them from that feedback (and what the next frames write).
        let mut resident_at = None;
        for f in 1..10 {
            if wanted.iter().all(|(k, _, _)| streamer.manager().is_resident(*k)) {
                resident_at = Some(f);
                break;
            }
            draw_frame(&mut streamer, &commands, &program, &mut target, buffers, true);
        }
        assert!(resident_at.is_some(), "{:?}", streamer.manager_stats());

        // Feedback off: the same draw, no request; the view is mip 0, texel for texel.
        let (pixels, requests) = draw_frame(&mut streamer, &commands, &program, &mut target, buffers, false);
        assert!(requests.is_empty(), "{requests:?}");
        let want = common::region_texels(0, [FIRST_TEXEL; 2], [VIEW; 2]);
        let worst = pixels.iter().zip(&want).map(|(a, b)| a.abs_diff(*b)).max().unwrap();
        assert!(worst <= 1, "mip 0 under the view differs by up to {worst}");

        drop(program);
        target.release();
        streamer.remove_texture(t).unwrap();
    });
}

#[test]
fn vt_quad_frag_writes_feedback_that_streams_a_sparse_image() {
    fragment_feedback_streams(ResidencyPath::Hardware);
}

#[test]
fn vt_quad_software_frag_writes_feedback_that_streams_a_software_texture() {
    fragment_feedback_streams(ResidencyPath::Software);
}

// --- Deferred feedback: the same requests as the shaders' own ---------------------------------

/// One frame of `streamer` drawn with `program` (a direct or deferred `vt_quad` shader, whose
/// feedback bindings the streamer's frame gives) showing the square `[lo, hi]²` of the texture,
/// with the streamer's own push words: its pixels and the frame's decoded requests.
fn draw_streamer_frame(
    streamer: &mut Streamer,
    commands: &CommandContext,
    program: &GraphicsProgram,
    target: &mut Target,
    buffers: (&Buffer, &Buffer),
    [lo, hi]: [f32; 2],
) -> (Vec<u8>, Vec<residency_core::streaming::TileRequest>) {
    let device = Arc::clone(commands.device());
    let trilinear = device.create_sampler(Filter::Trilinear).unwrap();
    let nearest = device.create_sampler(Filter::Nearest).unwrap();
    let bindings = streamer.begin_frame().unwrap();
    let texture = bindings.textures()[0];
    let views: (ViewRef<'_>, ViewRef<'_>) = match texture.views {
        TextureViews::Hardware { image, min_lod } => (image.into(), min_lod.into()),
        TextureViews::Software { atlas, indirection } => (atlas.into(), indirection.into()),
    };
    let general = vk::ImageLayout::GENERAL;
    let (fb, table) = (bindings.feedback.unwrap(), bindings.image_table.unwrap());
    let mut set =
        vec![Binding::sampled(views.0, &trilinear, general), Binding::sampled(views.1, &nearest, general)];
    match bindings.feedback_records {
        Some(records) => set.push(Binding::Buffer(records)),
        None => set.extend([Binding::Buffer(fb), Binding::Buffer(table)]),
    }
    let ds = program.descriptor_set(&set).unwrap();
    let mut push = ortho(lo, hi);
    push.extend(bindings.feedback_words(&texture, true).iter().flat_map(|w| w.to_le_bytes()));
    let (vertices, indices) = buffers;
    let submission = commands
        .submit(&[], |rec| {
            bindings
                .record(rec, |rec| {
                    target.record(rec, program, |pass| {
                        pass.bind_descriptor_set(&ds).unwrap();
                        pass.push_constants(&push).unwrap();
                        pass.bind_vertex_buffer(vertices, 0).unwrap();
                        pass.bind_index_buffer(indices, 0, IndexFormat::U16).unwrap();
                        // SAFETY: the indices are 0–3 and the vertex buffer holds the 4 corners.
                        unsafe { pass.draw_indexed(6, 1) }.unwrap();
                    });
                })
                .unwrap();
        })
        .unwrap();
    commands.wait_for(&submission).unwrap();
    let pixels = target.read();
    let mut words = vec![0u8; fb.size() as usize];
    fb.read(0, &mut words).unwrap();
    let layout = bindings.layout.unwrap();
    let decoded = layout.decode(&words[..layout.buffer_bytes() as usize], bindings.frame).unwrap();
    assert!(!decoded.overflowed);
    drop(ds);
    drop(bindings);
    streamer.end_frame(submission.gpu_use()).unwrap();
    streamer.wait_for_loads();
    (pixels, decoded.requests)
}

/// Deferred feedback (`vt_quad_deferred.frag` / `vt_quad_software_deferred.frag`, the streamer's
/// resolve pass) against the shaders' own (`vt_quad.frag` / `vt_quad_software.frag`): two
/// streamers fed the same frames — views at LOD 3, 1 and 0, tiles made resident in between, so
/// misses, warnings and several mips — decode the same requests with the same pixel counts and
/// draw the same pixels, for samplings on the shift path (stride 8; stride 4 in 2 × 2 squares;
/// every pixel) and the dividing path (stride 3).
fn deferred_feedback_matches_direct(path: ResidencyPath) {
    use residency_core::streaming::FeedbackSampling;
    with_gpu(|set| {
        let device = Arc::clone(&set.devices()[0]);
        for sampling in [
            FeedbackSampling::new(8, 1),
            FeedbackSampling::new(4, 1).with_block(2),
            FeedbackSampling::new(1, 1),
            FeedbackSampling::new(3, 1),
        ] {
            let make_streamer = |deferred: bool| {
                let desc = StreamerDesc::default()
                    .with_name(if deferred { "deferred streamer" } else { "direct streamer" })
                    .with_path(path)
                    .with_frames_in_flight(1)
                    .with_budget_tiles(96)
                    .with_sampling(sampling)
                    .with_deferred_feedback(deferred.then_some([VIEW, VIEW]));
                let mut streamer = Streamer::new(&device, desc).unwrap();
                let t = streamer.add_texture("vt quad", source("vt quad")).unwrap();
                (streamer, t)
            };
            let make_program = |fragment: &shaders::Shader| {
                GraphicsProgram::new(
                    &device,
                    fragment.name(),
                    &shaders::VT_QUAD_VERT,
                    fragment,
                    STRIDE,
                    &attributes(),
                    vk::Format::R8G8B8A8_UNORM,
                    16,
                )
                .unwrap()
            };
            let (mut direct, t0) = make_streamer(false);
            let (mut deferred, t1) = make_streamer(true);
            assert_eq!(t0.id(), t1.id());
            let programs = [
                make_program(shaders::vt_quad_fragment(path)),
                make_program(shaders::vt_quad_deferred_fragment(path)),
            ];
            assert_eq!(programs[1].bindings().len(), 3, "the deferred shader binds the records only");
            let vertices =
                host_buffer(&device, "vt quad vertices", &vertex_bytes(CORNERS), BufferUsage::VERTEX);
            let index_bytes: Vec<u8> = QUAD_INDICES.iter().flat_map(|i| i.to_le_bytes()).collect();
            let indices = host_buffer(&device, "vt quad indices", &index_bytes, BufferUsage::INDEX);
            let mut targets = [
                Target::new(&device, "direct target", VIEW, ImageUsage::NONE),
                Target::new(&device, "deferred target", VIEW, ImageUsage::NONE),
            ];
            let commands = CommandContext::new(&device, "deferred frames").unwrap();
            let lo = FIRST_TEXEL as f32 / SIDE as f32;
            let views = [[0.0, 1.0], [0.25, 0.5], [lo, lo + VIEW as f32 / SIDE as f32]];
            let mut asked = 0;
            for frame in 0..9 {
                let view = views[frame % views.len()];
                let [a, b] = &mut targets;
                let (pixels, requests) =
                    draw_streamer_frame(&mut direct, &commands, &programs[0], a, (&vertices, &indices), view);
                let (pixels_deferred, requests_deferred) = draw_streamer_frame(
                    &mut deferred,
                    &commands,
                    &programs[1],
                    b,
                    (&vertices, &indices),
                    view,
                );
                assert_eq!(requests, requests_deferred, "{path:?} {sampling:?} frame {frame}");
                assert!(pixels == pixels_deferred, "{path:?} {sampling:?} frame {frame}: the pixels differ");
                asked += requests.len();
            }
            assert!(asked > 0, "the frames asked for tiles");
            assert_eq!(direct.manager_stats().tiles_streamed, deferred.manager_stats().tiles_streamed);
            for target in targets {
                target.release();
            }
            direct.remove_texture(t0).unwrap();
            deferred.remove_texture(t1).unwrap();
        }
    });
}

#[test]
fn deferred_feedback_asks_for_what_direct_feedback_asks_for_hardware() {
    deferred_feedback_matches_direct(ResidencyPath::Hardware);
}

#[test]
fn deferred_feedback_asks_for_what_direct_feedback_asks_for_software() {
    deferred_feedback_matches_direct(ResidencyPath::Software);
}

/// The resolve pass trusts no record: records written into the record buffer by the host's
/// commands (not by a shader) with an unknown slot (1, 999, 0xFFFF) or without the written bit ask
/// for nothing, and the good records
/// (slot 0, a uv, LOD 0, nothing resident) ask for the mip-0 tile under their uv, once each with
/// their pixels counted. `resolve_feedback` outside the
/// frame's `record`, into another recording than the frame's, or twice in one frame is refused.
#[test]
fn the_resolve_ignores_records_out_of_range() {
    use residency_core::streaming::FeedbackSampling;
    use residency_vulkan::streaming::StreamError;
    with_gpu(|set| {
        let device = Arc::clone(&set.devices()[0]);
        // 64 × 64 pixels, every pixel its record: 4096 records.
        let desc = StreamerDesc::default()
            .with_name("resolve streamer")
            .with_path(ResidencyPath::Software)
            .with_frames_in_flight(1)
            .with_sampling(FeedbackSampling::new(1, 1))
            .with_deferred_feedback(Some([64, 64]));
        let mut streamer = Streamer::new(&device, desc).unwrap();
        let t = streamer.add_texture("resolve", source("resolve")).unwrap();
        let id = t.id();
        let commands = CommandContext::new(&device, "resolve frames").unwrap();
        let other = CommandContext::new(&device, "another recording").unwrap();
        let record = |slot: u32, uv: [f32; 2], lambda: f32, written: bool| -> [u32; 4] {
            [uv[0].to_bits(), uv[1].to_bits(), lambda.to_bits(), slot | 255 << 16 | u32::from(written) << 31]
        };
        // Tile (1, 2) of mip 0 is under uv (0.2, 0.3) (128-texel tiles of 1024), (6, 7) under (0.8, 0.9).
        let good = [record(0, [0.2, 0.3], 0.0, true), record(0, [0.8, 0.9], 0.0, true)];
        let bad = [
            record(1, [0.2, 0.3], 0.0, true),
            record(999, [0.5, 0.5], 0.0, true),
            record(0xFFFF, [0.5, 0.5], 0.0, true),
            record(0, [0.5, 0.5], 0.0, false),
        ];
        let mut records: Vec<[u32; 4]> = vec![good[0], bad[0], good[0], bad[1], bad[2], good[1], bad[3]];
        records.resize(4096, [0; 4]);
        // The last record is a bad one too.
        records[4095] = bad[1];
        let bytes: Vec<u8> = records.iter().flatten().flat_map(|w| w.to_le_bytes()).collect();

        let want_tiles = [tile(&streamer, id, 0, 1, 2), tile(&streamer, id, 0, 6, 7)];
        let bindings = streamer.begin_frame().unwrap();
        let buffer = bindings.feedback_records.expect("deferred feedback has a record buffer");
        assert_eq!(buffer.size(), 4096 * 16);
        let mut early = None;
        let nothing = commands.submit(&[], |rec| early = Some(bindings.resolve_feedback(rec))).unwrap();
        assert!(matches!(early, Some(Err(StreamError::FrameOrder(_)))), "outside record: {early:?}");
        commands.wait_for(&nothing).unwrap();
        let submission = commands
            .submit(&[], |rec| {
                bindings
                    .record(rec, |rec| {
                        // After the streamer's own fill of the records (their first frame).
                        rec.memory_barrier(MemoryDependency {
                            src_stages: S::ALL_TRANSFER,
                            src_access: A::TRANSFER_WRITE,
                            dst_stages: S::ALL_TRANSFER,
                            dst_access: A::TRANSFER_WRITE,
                        })
                        .unwrap();
                        for (i, chunk) in bytes.chunks(65536).enumerate() {
                            rec.update_buffer(buffer, (i * 65536) as u64, chunk).unwrap();
                        }
                        rec.memory_barrier(MemoryDependency {
                            src_stages: S::ALL_TRANSFER,
                            src_access: A::TRANSFER_WRITE,
                            dst_stages: S::FRAGMENT_SHADER | S::COMPUTE_SHADER,
                            dst_access: A::SHADER_READ | A::SHADER_WRITE,
                        })
                        .unwrap();
                        // Into another recording than the frame's: refused, and the frame's own
                        // resolve still runs.
                        let mut wrong = None;
                        let elsewhere =
                            other.submit(&[], |o| wrong = Some(bindings.resolve_feedback(o))).unwrap();
                        assert!(
                            matches!(wrong, Some(Err(StreamError::FrameOrder(_)))),
                            "another recording: {wrong:?}"
                        );
                        other.wait_for(&elsewhere).unwrap();
                        bindings.resolve_feedback(rec).unwrap();
                        assert!(matches!(bindings.resolve_feedback(rec), Err(StreamError::FrameOrder(_))));
                    })
                    .unwrap();
            })
            .unwrap();
        commands.wait_for(&submission).unwrap();
        let fb = bindings.feedback.unwrap();
        let mut words = vec![0u8; fb.size() as usize];
        fb.read(0, &mut words).unwrap();
        let layout = bindings.layout.unwrap();
        let decoded = layout.decode(&words[..layout.buffer_bytes() as usize], bindings.frame).unwrap();
        let got: Vec<_> = decoded
            .requests
            .iter()
            .map(|r| (TileKey::tile(r.image, r.tile), r.mip, r.kind, r.pixels))
            .collect();
        let mut want =
            vec![(want_tiles[0], 0, RequestKind::Miss, 2), (want_tiles[1], 0, RequestKind::Miss, 1)];
        want.sort();
        let mut got_sorted = got.clone();
        got_sorted.sort();
        assert_eq!(got_sorted, want, "only the good records asked");
        drop(bindings);
        streamer.end_frame(submission.gpu_use()).unwrap();
        streamer.remove_texture(t).unwrap();
    });
}
