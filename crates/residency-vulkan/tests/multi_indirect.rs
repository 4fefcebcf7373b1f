//! Indirect dispatch from argument buffers written per device, on two logical devices: the
//! host writer's per-device values, a GPU writer's, and what is refused.

use residency_vulkan::compute::{Binding, ComputeProgram};
use residency_vulkan::multi::indirect::{
    DispatchArgs, DrawArgs, DrawIndexedArgs, GpuIndirectWriter, IndirectDispatchItem, IndirectError,
    IndirectWriter,
};
use residency_vulkan::multi::work::{
    BufferView, DispatchItem, MultiBinding, MultiComputeProgram, MultiSubmitter, WorkError, WorkItem,
};
use residency_vulkan::multi::{MultiBufferPool, MultiDevice, MultiDeviceError, MultiUploader};
use residency_vulkan::shaders;
use residency_vulkan::testing::with_gpu;
use residency_vulkan::{
    BufferDesc, BufferInit, BufferPoolDesc, BufferPoolUsage, BufferUsage, Device, DeviceIndex, DeviceMask,
    MemoryIntent,
};

/// Words of each fill target.
const WORDS: u32 = 1024;

fn d(i: u32) -> DeviceIndex {
    DeviceIndex::new(i).unwrap()
}

fn words(values: &[u32]) -> Vec<u8> {
    values.iter().flat_map(|v| v.to_le_bytes()).collect()
}

/// `fill.comp` with `push` dispatched directly with `groups` on one device into a zeroed buffer
/// of `WORDS` words: the single-device reference.
fn single_device_fill(device: &Device, push: &[u8], groups: [u32; 3]) -> Vec<u8> {
    let program = ComputeProgram::new(device, "single-device fill", &shaders::FILL, 1).unwrap();
    let bytes = u64::from(WORDS) * 4;
    let mut target = device
        .create_buffer(
            &BufferDesc::new(
                "single-device fill target",
                bytes,
                BufferUsage::STORAGE | BufferUsage::COPY_SRC,
            )
            .with_intent(MemoryIntent::Readback),
        )
        .unwrap();
    target.write(0, &vec![0; bytes as usize]).unwrap();
    let set = program.descriptor_set(&[Binding::Buffer(&target)]).unwrap();
    device
        .submit_compute("single-device fill", |rec| program.dispatch(rec, &set, push, groups).unwrap())
        .unwrap();
    device.wait_submitted().unwrap();
    device.read_back(&target, 0, bytes).unwrap()
}

struct Fixture {
    pool: MultiBufferPool,
    uploader: MultiUploader,
    program: MultiComputeProgram,
}

fn fixture(set: &residency_vulkan::DeviceSet) -> Fixture {
    let both = DeviceMask::from_bits(0b11);
    let pool = MultiBufferPool::new(
        set,
        both,
        &BufferPoolDesc::new("indirect", BufferPoolUsage::Unknown).with_page_size(1 << 20),
    )
    .unwrap();
    let uploader = MultiUploader::new(set, both, 1 << 20).unwrap();
    let program = MultiComputeProgram::new(set, both, "fill.comp", &shaders::FILL, 4).unwrap();
    Fixture { pool, uploader, program }
}

fn zeroed_target(f: &Fixture, name: &str) -> residency_vulkan::multi::MultiBuffer {
    let usage = BufferUsage::STORAGE | BufferUsage::COPY_DST | BufferUsage::COPY_SRC;
    let target = f
        .pool
        .init_buffer(
            &BufferInit::new(name, u64::from(WORDS) * 4).with_usage(usage),
            DeviceMask::from_bits(0b11),
        )
        .unwrap();
    f.uploader.broadcast(&target, 0, &vec![0; WORDS as usize * 4]).unwrap();
    f.uploader.wait_idle().unwrap();
    target
}

fn args_usage() -> BufferUsage {
    BufferUsage::INDIRECT | BufferUsage::STORAGE | BufferUsage::COPY_DST | BufferUsage::COPY_SRC
}

#[test]
fn indirect_dispatch_runs_the_counts_written_for_each_device_as_a_single_device_dispatch_does() {
    with_gpu(|set| {
        let both = DeviceMask::from_bits(0b11);
        let f = fixture(set);
        let args =
            f.pool.init_buffer(&BufferInit::new("arguments", 64).with_usage(args_usage()), both).unwrap();
        let target = zeroed_target(&f, "indirect fill target");
        // Each device its own counts, at byte 16 of the arguments.
        let view = BufferView::range(&args, 16, 12).unwrap();
        let groups = [(d(0), [2, 1, 1]), (d(1), [5, 1, 1])];
        let values: Vec<_> = groups.iter().map(|&(i, g)| (i, DispatchArgs { groups: g })).collect();
        IndirectWriter::new(&f.uploader).write(view, &values).unwrap();
        f.uploader.wait_idle().unwrap();
        for (i, g) in groups {
            let written = set.device(i).unwrap().read_back(args.instance(i).unwrap(), 16, 12).unwrap();
            assert_eq!(written, words(&g), "{i}: the command as Vulkan reads it");
        }

        let push = words(&[WORDS, 1000]);
        let item = IndirectDispatchItem::new(
            &f.program,
            vec![MultiBinding::Buffer(BufferView::whole(&target))],
            &push,
            view,
        );
        let submitter = MultiSubmitter::new(set, both).unwrap();
        for device in [d(1), d(0), d(1)] {
            let submission = submitter.submit(device, &[WorkItem::DispatchIndirect(&item)]).unwrap();
            submitter.wait(device, submission).unwrap();
        }
        assert_eq!(item.cached_devices(), 2, "one cached form per device, reused");
        for (i, g) in groups {
            let device = set.device(i).unwrap();
            let got = device.read_back(target.instance(i).unwrap(), 0, u64::from(WORDS) * 4).unwrap();
            assert_eq!(got, single_device_fill(device, &push, g), "{i}: as a direct dispatch of {g:?}");
            let filled = got.chunks_exact(4).filter(|w| *w != [0; 4]).count();
            assert_eq!(filled as u32, g[0] * 64, "{i}: {g:?} workgroups of 64");
        }

        submitter.destroy();
        drop(item);
        f.pool.free_buffer(target).unwrap();
        f.pool.free_buffer(args).unwrap();
        f.uploader.destroy().unwrap();
    });
}

#[test]
fn indirect_dispatch_of_counts_a_compute_shader_wrote_is_clamped_soundly_over_the_limit() {
    with_gpu(|set| {
        let both = DeviceMask::from_bits(0b11);
        let f = fixture(set);
        let args =
            f.pool.init_buffer(&BufferInit::new("gpu arguments", 12).with_usage(args_usage()), both).unwrap();
        let target = zeroed_target(&f, "gpu-driven fill target");
        // A compute shader (fill.comp: word i = value + i, for i < 3) writes the command on the
        // GPU: on device 0 counts far over maxComputeWorkGroupCount, on device 1 (1, 2, 3).
        let limit = set.device(d(0)).unwrap().limits().max_compute_work_group_count;
        let over = u32::MAX - 8;
        assert!(over > limit[0] && over > limit[1] && over > limit[2]);
        let writers = [(d(0), words(&[3, over])), (d(1), words(&[3, 1]))];
        let write_items: Vec<_> = writers
            .iter()
            .map(|(_, push)| {
                DispatchItem::new(
                    &f.program,
                    vec![MultiBinding::Buffer(BufferView::whole(&args))],
                    push,
                    [1, 1, 1],
                )
            })
            .collect();
        let push = words(&[WORDS, 7]);
        let item = IndirectDispatchItem::new(
            &f.program,
            vec![MultiBinding::Buffer(BufferView::whole(&target))],
            &push,
            BufferView::whole(&args),
        );
        let submitter = MultiSubmitter::new(set, both).unwrap();
        for ((device, _), writer) in writers.iter().zip(&write_items) {
            let items = [WorkItem::Dispatch(writer), WorkItem::Barrier, WorkItem::DispatchIndirect(&item)];
            let submission = submitter.submit(*device, &items).unwrap();
            submitter.wait(*device, submission).unwrap();
        }
        let read = |i: DeviceIndex, b: &residency_vulkan::multi::MultiBuffer, bytes: u64| {
            set.device(i).unwrap().read_back(b.instance(i).unwrap(), 0, bytes).unwrap()
        };
        assert_eq!(read(d(0), &args, 12), words(&[over, over + 1, over + 2]), "the GPU wrote over the limit");
        assert_eq!(
            read(d(0), &target, u64::from(WORDS) * 4),
            vec![0; WORDS as usize * 4],
            "an over-limit command dispatches nothing"
        );
        assert_eq!(read(d(1), &args, 12), words(&[1, 2, 3]));
        let device = set.device(d(1)).unwrap();
        assert_eq!(
            read(d(1), &target, u64::from(WORDS) * 4),
            single_device_fill(device, &push, [1, 2, 3]),
            "a command within the limits runs as written"
        );

        submitter.destroy();
        drop((item, write_items));
        f.pool.free_buffer(target).unwrap();
        f.pool.free_buffer(args).unwrap();
        f.uploader.destroy().unwrap();
    });
}

fn failed_with(e: MultiDeviceError<IndirectError>) -> (DeviceIndex, IndirectError) {
    match e {
        MultiDeviceError::Failed { device, source } => (device, source),
        e => panic!("not a per-device refusal: {e}"),
    }
}

#[test]
fn indirect_dispatch_arguments_out_of_range_misaligned_or_without_usage_are_refused() {
    with_gpu(|set| {
        let both = DeviceMask::from_bits(0b11);
        let f = fixture(set);
        let args =
            f.pool.init_buffer(&BufferInit::new("arguments", 64).with_usage(args_usage()), both).unwrap();
        let target = zeroed_target(&f, "misuse fill target");
        let writer = IndirectWriter::new(&f.uploader);
        let ok = DispatchArgs { groups: [1, 1, 1] };
        let before = |i| set.device(i).unwrap().read_back(args.instance(i).unwrap(), 0, 64).unwrap();
        let untouched = [before(d(0)), before(d(1))];

        // Host writes: each refusal names its device and writes nothing anywhere.
        let misaligned = BufferView::range(&args, 2, 12).unwrap();
        let e = writer.write(misaligned, &[(d(0), ok), (d(1), ok)]).unwrap_err();
        assert!(matches!(failed_with(e), (_, IndirectError::Misaligned { offset: 2, .. })));
        let short = BufferView::range(&args, 0, 8).unwrap();
        let e = writer.write(short, &[(d(0), ok)]).unwrap_err();
        assert!(matches!(failed_with(e), (_, IndirectError::TooSmall { bytes: 8, needed: 12, .. })));
        let limit = set.device(d(1)).unwrap().limits().max_compute_work_group_count;
        let over = DispatchArgs { groups: [1, limit[1] + 1, 1] };
        let e = writer.write(BufferView::whole(&args), &[(d(0), ok), (d(1), over)]).unwrap_err();
        let (device, source) = failed_with(e);
        assert_eq!(device, d(1));
        assert!(matches!(source, IndirectError::GroupCountOverLimit { axis: 1, .. }), "{source}");
        let e = writer.write(BufferView::whole(&args), &[(d(0), ok), (d(0), ok)]).unwrap_err();
        assert!(matches!(failed_with(e), (_, IndirectError::DuplicateDevice { .. })));
        let draw = DrawArgs { vertex_count: 3, instance_count: 1, first_vertex: 0, first_instance: 1 };
        let e = writer.write(BufferView::whole(&args), &[(d(1), draw)]).unwrap_err();
        assert!(matches!(failed_with(e), (_, IndirectError::FirstInstance { first_instance: 1 })));
        let plain = f
            .pool
            .init_buffer(
                &BufferInit::new("not indirect", 64).with_usage(BufferUsage::STORAGE | BufferUsage::COPY_DST),
                both,
            )
            .unwrap();
        let e = writer.write(BufferView::whole(&plain), &[(d(0), ok)]).unwrap_err();
        assert!(
            matches!(failed_with(e), (_, IndirectError::Usage { missing, .. }) if missing == BufferUsage::INDIRECT)
        );
        f.uploader.wait_idle().unwrap();
        assert_eq!([before(d(0)), before(d(1))], untouched, "a refused write writes nothing");
        // Draw commands are encoded as Vulkan lays them out.
        let indexed = DrawIndexedArgs {
            index_count: 6,
            instance_count: 2,
            first_index: 3,
            vertex_offset: -1,
            first_instance: 0,
        };
        writer.write(BufferView::range(&args, 20, 20).unwrap(), &[(d(1), indexed)]).unwrap();
        f.uploader.wait_idle().unwrap();
        let written = set.device(d(1)).unwrap().read_back(args.instance(d(1)).unwrap(), 20, 20).unwrap();
        assert_eq!(written, words(&[6, 2, 3, u32::MAX, 0]));

        // Dispatches: refused at submission with nothing submitted; the args usage needs STORAGE
        // too (residency's clamp pass reads the command).
        let submitter = MultiSubmitter::new(set, both).unwrap();
        let indirect_only = f
            .pool
            .init_buffer(
                &BufferInit::new("indirect only", 64)
                    .with_usage(BufferUsage::INDIRECT | BufferUsage::COPY_DST),
                both,
            )
            .unwrap();
        let push = words(&[WORDS, 1]);
        let bindings = || vec![MultiBinding::Buffer(BufferView::whole(&target))];
        let cases = [
            IndirectDispatchItem::new(&f.program, bindings(), &push, misaligned),
            IndirectDispatchItem::new(&f.program, bindings(), &push, short),
            IndirectDispatchItem::new(&f.program, bindings(), &push, BufferView::whole(&indirect_only)),
            IndirectDispatchItem::new(&f.program, bindings(), &push, BufferView::whole(&plain)),
        ];
        for (at, item) in cases.iter().enumerate() {
            let e = submitter.submit(d(0), &[WorkItem::DispatchIndirect(item)]).unwrap_err();
            let expected = match &e {
                WorkError::Indirect(IndirectError::Misaligned { .. }) => at == 0,
                WorkError::Indirect(IndirectError::TooSmall { .. }) => at == 1,
                WorkError::Indirect(IndirectError::Usage { missing, .. }) => {
                    (at == 2 && *missing == BufferUsage::STORAGE)
                        || (at == 3 && *missing == BufferUsage::INDIRECT)
                }
                _ => false,
            };
            assert!(expected, "case {at}: {e}");
            assert_eq!(item.cached_devices(), 0, "case {at}: nothing resolved");
        }
        // Push constants over the program's are refused too.
        let long = IndirectDispatchItem::new(&f.program, bindings(), &[0; 64], BufferView::whole(&args));
        let e = submitter.submit(d(1), &[WorkItem::DispatchIndirect(&long)]).unwrap_err();
        assert!(matches!(e, WorkError::Dispatch(_)), "{e}");

        submitter.destroy();
        drop((cases, long));
        for b in [target, args, plain, indirect_only] {
            f.pool.free_buffer(b).unwrap();
        }
        f.uploader.destroy().unwrap();
    });
}

const SIDE: u32 = 16;
const INDEX_BYTES: u64 = 64;
const DRAW_ARGS: u64 = 128;

/// A quad's four corners (x, y, r, g, b, a) at byte 0, six `u16` indices at `INDEX_BYTES`.
fn quad_geometry() -> Vec<u8> {
    let mut bytes = vec![0u8; DRAW_ARGS as usize];
    let corners = [[-1.0f32, -1.0], [1.0, -1.0], [-1.0, 1.0], [1.0, 1.0]];
    let vertices: Vec<u8> =
        corners.iter().flat_map(|&[x, y]| [x, y, 0.25, 0.5, 1.0, 1.0]).flat_map(f32::to_le_bytes).collect();
    bytes[..vertices.len()].copy_from_slice(&vertices);
    let indices: Vec<u8> = [0u16, 1, 2, 2, 1, 3].iter().flat_map(|i| i.to_le_bytes()).collect();
    bytes[INDEX_BYTES as usize..INDEX_BYTES as usize + 12].copy_from_slice(&indices);
    bytes
}

fn quad_attributes() -> [residency_vulkan::graphics::VertexAttribute; 2] {
    use residency_vulkan::ash::vk::Format as F;
    use residency_vulkan::graphics::VertexAttribute;
    [
        VertexAttribute { location: 0, format: F::R32G32_SFLOAT, offset: 0 },
        VertexAttribute { location: 1, format: F::R32G32B32A32_SFLOAT, offset: 8 },
    ]
}

/// Copies mip 0 of `image` (in `layout`) to the host.
fn read_target(
    device: &Device,
    image: &residency_vulkan::Image,
    layout: residency_vulkan::ash::vk::ImageLayout,
) -> Vec<u8> {
    use residency_vulkan::ash::vk;
    use residency_vulkan::recording::MemoryDependency;
    let bytes = u64::from(SIDE * SIDE * 4);
    let pixels = device
        .create_buffer(
            &BufferDesc::new("indirect target pixels", bytes, BufferUsage::COPY_DST)
                .with_intent(MemoryIntent::Readback),
        )
        .unwrap();
    device
        .submit_once("read the target", |rec| {
            rec.copy_image_to_buffer(image, layout, &pixels).unwrap();
            rec.memory_barrier(MemoryDependency {
                src_stages: vk::PipelineStageFlags2::COPY,
                src_access: vk::AccessFlags2::TRANSFER_WRITE,
                dst_stages: vk::PipelineStageFlags2::HOST,
                dst_access: vk::AccessFlags2::HOST_READ,
            })
            .unwrap();
        })
        .unwrap();
    let mut out = vec![0u8; bytes as usize];
    pixels.read(0, &mut out).unwrap();
    out
}

/// The indexed indirect draw of `command` through a single-device `GraphicsProgram` on `device`.
fn single_device_indexed_indirect(device: &Device, command: DrawIndexedArgs) -> Vec<u8> {
    use residency_core::sync::{Region, TrackerOptions, Use};
    use residency_vulkan::ash::vk;
    use residency_vulkan::graphics::{GraphicsProgram, IndexFormat};
    use residency_vulkan::tracking::ResourceTracker;
    let program = GraphicsProgram::new(
        device,
        "single-device quads",
        &shaders::QUADS_VERT,
        &shaders::QUADS_FRAG,
        24,
        &quad_attributes(),
        vk::Format::R8G8B8A8_UNORM,
        1,
    )
    .unwrap();
    let mut geometry = quad_geometry();
    geometry.extend(words(&[
        command.index_count,
        command.instance_count,
        command.first_index,
        command.vertex_offset as u32,
        command.first_instance,
    ]));
    let mut buffer = device
        .create_buffer(
            &BufferDesc::new(
                "single-device geometry",
                geometry.len() as u64,
                BufferUsage::VERTEX | BufferUsage::INDEX | BufferUsage::INDIRECT,
            )
            .with_intent(MemoryIntent::Upload),
        )
        .unwrap();
    buffer.write(0, &geometry).unwrap();
    let image = device
        .create_image(&residency_vulkan::ImageDesc::new_2d(
            "single-device target",
            residency_vulkan::Format::R8G8B8A8Unorm,
            SIDE,
            SIDE,
            residency_vulkan::ImageUsage::COLOR_ATTACHMENT | residency_vulkan::ImageUsage::COPY_SRC,
        ))
        .unwrap();
    let view = image.create_view(0..1).unwrap();
    let mut tracker = ResourceTracker::new(TrackerOptions::default());
    let id = tracker.track_image(&image, vk::ImageLayout::UNDEFINED).unwrap();
    let family = device.universal_queue().family();
    device
        .submit_once("single-device render", |rec| {
            let mut batch = tracker.batch(device.index(), family);
            batch.declare_discard(id, Region::Whole, Use::ColorAttachmentWrite).unwrap();
            let flush = batch.flush();
            tracker.record(rec, &flush.barriers).unwrap();
            program
                .render(rec, &view, [SIDE; 2], [0.0, 0.0, 0.0, 1.0], |pass| {
                    pass.bind_vertex_buffer(&buffer, 0).unwrap();
                    pass.bind_index_buffer(&buffer, INDEX_BYTES, IndexFormat::U16).unwrap();
                    // SAFETY: the command reads the six indices bound, which name the 4 corners
                    // bound; first instance 0.
                    unsafe { pass.draw_indexed_indirect(&buffer, DRAW_ARGS) }.unwrap();
                })
                .unwrap();
            let mut batch = tracker.batch(device.index(), family);
            batch.declare(id, Region::Whole, Use::TransferSrc).unwrap();
            let flush = batch.flush();
            tracker.record(rec, &flush.barriers).unwrap();
        })
        .unwrap();
    let pixels = read_target(device, &image, vk::ImageLayout::TRANSFER_SRC_OPTIMAL);
    tracker.untrack(device.index(), id).unwrap();
    pixels
}

#[test]
fn indirect_draws_read_the_commands_written_for_each_device_as_a_single_device_draw_does() {
    use residency_vulkan::ash::vk;
    use residency_vulkan::graphics::IndexFormat;
    use residency_vulkan::multi::work::{DrawItem, MultiGraphicsProgram, RenderItem};
    with_gpu(|set| {
        let both = DeviceMask::from_bits(0b11);
        let f = fixture(set);
        let usage = BufferUsage::VERTEX | BufferUsage::INDEX | BufferUsage::INDIRECT | BufferUsage::COPY_DST;
        let geometry =
            f.pool.init_buffer(&BufferInit::new("indirect geometry", 160).with_usage(usage), both).unwrap();
        f.uploader.broadcast(&geometry, 0, &quad_geometry()).unwrap();
        // The whole quad on device 0, its first triangle on device 1.
        let command = |index_count| DrawIndexedArgs {
            index_count,
            instance_count: 1,
            first_index: 0,
            vertex_offset: 0,
            first_instance: 0,
        };
        let commands = [(d(0), command(6)), (d(1), command(3))];
        let args = BufferView::range(&geometry, DRAW_ARGS, 20).unwrap();
        IndirectWriter::new(&f.uploader).write(args, &commands).unwrap();
        f.uploader.wait_idle().unwrap();
        let target = residency_vulkan::multi::MultiImage::create(
            set,
            both,
            &residency_vulkan::ImageDesc::new_2d(
                "indirect draw target",
                residency_vulkan::Format::R8G8B8A8Unorm,
                SIDE,
                SIDE,
                residency_vulkan::ImageUsage::COLOR_ATTACHMENT | residency_vulkan::ImageUsage::COPY_SRC,
            ),
        )
        .unwrap();
        let program = MultiGraphicsProgram::new(
            set,
            both,
            "indirect quads",
            &shaders::QUADS_VERT,
            &shaders::QUADS_FRAG,
            24,
            &quad_attributes(),
            vk::Format::R8G8B8A8_UNORM,
            1,
        )
        .unwrap();
        // SAFETY: every command written reads indices inside the index view naming the 4 corners
        // of the vertex view, first instance 0.
        let draw = unsafe {
            DrawItem::new_indexed_indirect(
                &program,
                vec![],
                Some(BufferView::range(&geometry, 0, 96).unwrap()),
                BufferView::range(&geometry, INDEX_BYTES, 12).unwrap(),
                IndexFormat::U16,
                args,
            )
        };
        let draws = [&draw];
        let render = RenderItem {
            program: &program,
            target: &target,
            extent: [SIDE; 2],
            clear: [0.0, 0.0, 0.0, 1.0],
            draws: &draws,
        };
        let submitter = MultiSubmitter::new(set, both).unwrap();
        let mut rendered = Vec::new();
        for (device, command) in commands {
            let submission = submitter.submit(device, &[WorkItem::Render(render)]).unwrap();
            submitter.wait(device, submission).unwrap();
            let dev = set.device(device).unwrap();
            let pixels = read_target(dev, target.instance(device).unwrap(), vk::ImageLayout::GENERAL);
            assert_eq!(pixels, single_device_indexed_indirect(dev, command), "{device}");
            rendered.push(pixels);
        }
        assert_ne!(rendered[0], rendered[1], "each device drew its own command");
        // An argument view under the 20-byte command is refused before anything is recorded.
        // SAFETY: as above (it is refused).
        let short = unsafe {
            DrawItem::new_indexed_indirect(
                &program,
                vec![],
                Some(BufferView::range(&geometry, 0, 96).unwrap()),
                BufferView::range(&geometry, INDEX_BYTES, 12).unwrap(),
                IndexFormat::U16,
                BufferView::range(&geometry, DRAW_ARGS, 16).unwrap(),
            )
        };
        let refused = [&short];
        let e = submitter
            .submit(d(0), &[WorkItem::Render(RenderItem { draws: &refused, ..render })])
            .unwrap_err();
        assert!(matches!(e, WorkError::Draw(_)), "{e}");

        submitter.destroy();
        drop((draw, short));
        drop((program, target));
        f.pool.free_buffer(geometry).unwrap();
        f.uploader.destroy().unwrap();
    });
}

#[test]
fn indirect_dispatch_of_commands_the_gpu_writer_made_from_per_device_counts() {
    with_gpu(|set| {
        let both = DeviceMask::from_bits(0b11);
        let f = fixture(set);
        let counts = f
            .pool
            .init_buffer(
                &BufferInit::new("survivors", 16).with_usage(BufferUsage::STORAGE | BufferUsage::COPY_DST),
                both,
            )
            .unwrap();
        let args = f
            .pool
            .init_buffer(&BufferInit::new("counted arguments", 32).with_usage(args_usage()), both)
            .unwrap();
        let target = zeroed_target(&f, "counted fill target");
        let writer = GpuIndirectWriter::new(set, both).unwrap();
        // Counts at word 1, the command at byte 16; 64 items per workgroup, or 1.
        let (count_view, args_view) =
            (BufferView::range(&counts, 4, 4).unwrap(), BufferView::range(&args, 16, 12).unwrap());
        let write = writer.dispatch_from_count(count_view, args_view, 64).unwrap();
        let write_each = writer.dispatch_from_count(count_view, args_view, 1).unwrap();
        let push = words(&[WORDS, 3]);
        let fill = IndirectDispatchItem::new(
            &f.program,
            vec![MultiBinding::Buffer(BufferView::whole(&target))],
            &push,
            args_view,
        );
        let submitter = MultiSubmitter::new(set, both).unwrap();
        let limit = set.device(d(0)).unwrap().limits().max_compute_work_group_count[0];
        assert!(limit < u32::MAX, "a count of u32::MAX at one item per group is over the limit");
        // 100 survivors on device 0 (2 groups of 64), 300 on device 1 (5 groups); then u32::MAX
        // at one per group on device 0, over the limit: nothing runs.
        let cases = [
            (d(0), 100u32, &write, [2, 1, 1]),
            (d(1), 300, &write, [5, 1, 1]),
            (d(0), u32::MAX, &write_each, [0, 1, 1]),
        ];
        for (device, survivors, writer_item, groups) in cases {
            let up = f.uploader.instance(device).unwrap();
            up.write_buffer(counts.instance(device).unwrap(), 4, &survivors.to_le_bytes()).unwrap();
            up.write_buffer(target.instance(device).unwrap(), 0, &vec![0; WORDS as usize * 4]).unwrap();
            up.wait_idle().unwrap();
            let items =
                [WorkItem::Dispatch(writer_item), WorkItem::Barrier, WorkItem::DispatchIndirect(&fill)];
            let submission = submitter.submit(device, &items).unwrap();
            submitter.wait(device, submission).unwrap();
            let dev = set.device(device).unwrap();
            assert_eq!(
                dev.read_back(args.instance(device).unwrap(), 16, 12).unwrap(),
                words(&groups),
                "{device}"
            );
            let got = dev.read_back(target.instance(device).unwrap(), 0, u64::from(WORDS) * 4).unwrap();
            assert_eq!(got, single_device_fill(dev, &push, groups), "{device}: {survivors} survivors");
        }
        // Views the writer cannot use are refused when the item is made.
        assert!(matches!(
            writer.dispatch_from_count(
                BufferView::range(&counts, 2, 4).unwrap(),
                BufferView::whole(&args),
                1
            ),
            Err(IndirectError::Misaligned { offset: 2, .. })
        ));
        assert!(matches!(
            writer.dispatch_from_count(
                BufferView::whole(&counts),
                BufferView::range(&args, 0, 8).unwrap(),
                1
            ),
            Err(IndirectError::TooSmall { bytes: 8, needed: 12, .. })
        ));

        submitter.destroy();
        drop((write, write_each, fill));
        drop(writer);
        for b in [counts, args, target] {
            f.pool.free_buffer(b).unwrap();
        }
        f.uploader.destroy().unwrap();
    });
}
