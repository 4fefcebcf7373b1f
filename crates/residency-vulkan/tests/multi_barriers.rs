//! The barriers between multi-device work items from the per-device state tracker: multi-pass
//! frames (dispatch, copy, dispatch, copy, render, timestamps; image copies, a sampled-image
//! dispatch, an indirect dispatch, a query and its results) submitted with the full barriers of
//! before the tracker and with the tracker's, on both devices, counted and compared with each
//! other and with what a single device computes.

use residency_core::device_mask::{DeviceIndex, DeviceMask};
use residency_core::format::Format;
use residency_core::usage::{BufferPoolUsage, BufferUsage, ImageUsage};
use residency_vulkan::ash::vk;
use residency_vulkan::compute::{Binding, ComputeProgram};
use residency_vulkan::multi::work::{
    BarrierMode, BarrierStats, BufferView, CopyItem, DispatchItem, DrawItem, MultiBinding,
    MultiComputeProgram, MultiGraphicsProgram, MultiSubmitter, MultiTimestamps, RenderItem, WorkItem,
};
use residency_vulkan::multi::{MultiBuffer, MultiBufferPool, MultiDevice, MultiImage, MultiUploader};
use residency_vulkan::recording::MemoryDependency;
use residency_vulkan::shaders;
use residency_vulkan::testing::with_gpu;
use residency_vulkan::{BufferDesc, BufferInit, BufferPoolDesc, Device, ImageDesc};

fn d(i: u32) -> DeviceIndex {
    DeviceIndex::new(i).unwrap()
}

fn f32s(values: impl IntoIterator<Item = f32>) -> Vec<u8> {
    values.into_iter().flat_map(f32::to_le_bytes).collect()
}

/// Elements of the compute passes.
const N: u32 = 256;
/// The render target's side.
const SIDE: u32 = 32;

/// `placed_buffers.comp`'s uniform block: scale, bias, count.
fn params(scale: f32, bias: f32) -> Vec<u8> {
    let mut p = f32s([scale; 4].into_iter().chain([bias; 4]));
    p.extend_from_slice(&N.to_le_bytes());
    p.resize(48, 0);
    p
}

fn vertices() -> Vec<u8> {
    f32s((0..N * 4).map(|i| i as f32))
}

fn indices() -> Vec<u8> {
    (0..N).rev().flat_map(u32::to_le_bytes).collect()
}

/// A red quad over the top-left quarter in clip space, as `quads.vert` reads it (position,
/// colour), 6 vertices.
fn quad() -> Vec<u8> {
    let v = |x: f32, y: f32| [x, y, 1.0, 0.0, 0.0, 1.0];
    let c = [v(-1.0, -1.0), v(0.0, -1.0), v(-1.0, 0.0), v(0.0, 0.0)];
    [0, 1, 2, 2, 1, 3].iter().flat_map(|&i| c[i]).flat_map(f32::to_le_bytes).collect()
}

/// Bytes the second copy moves: all of the second dispatch's results but the first element, to
/// 16 bytes into the output.
const COPY2: u64 = N as u64 * 16 - 16;

/// The frame on one device with single-device calls: the passes in one submission with memory
/// barriers between them; returns the output buffer's bytes.
fn single_device_frame(device: &Device) -> Vec<u8> {
    use vk::{AccessFlags2 as A, PipelineStageFlags2 as S};
    let program = ComputeProgram::new(device, "single passes", &shaders::PLACED_BUFFERS, 2).unwrap();
    let buffer = |name: &str, bytes: &[u8], usage: BufferUsage| {
        let mut b = device
            .create_buffer(
                &BufferDesc::new(name, bytes.len() as u64, usage)
                    .with_intent(residency_core::memory::MemoryIntent::Upload),
            )
            .unwrap();
        b.write(0, bytes).unwrap();
        b
    };
    let storage = BufferUsage::STORAGE | BufferUsage::COPY_SRC | BufferUsage::COPY_DST;
    let (v, i) = (buffer("v", &vertices(), storage), buffer("i", &indices(), storage));
    let (p1, p2) = (
        buffer("p1", &params(1.0, 0.5), BufferUsage::UNIFORM),
        buffer("p2", &params(2.0, 1.0), BufferUsage::UNIFORM),
    );
    let zeros = vec![0u8; N as usize * 16];
    // The output starts as junk, as in the multi-device runs (its first element is not copied).
    let junk = vec![0xabu8; N as usize * 16];
    let (a, mid, b, out) = (
        buffer("a", &zeros, storage),
        buffer("mid", &zeros, storage),
        buffer("b", &zeros, storage),
        buffer("out", &junk, storage),
    );
    let set1 = program
        .descriptor_set(&[
            Binding::Buffer(&v),
            Binding::Buffer(&i),
            Binding::Buffer(&p1),
            Binding::Buffer(&a),
        ])
        .unwrap();
    let set2 = program
        .descriptor_set(&[
            Binding::Buffer(&mid),
            Binding::Buffer(&i),
            Binding::Buffer(&p2),
            Binding::Buffer(&b),
        ])
        .unwrap();
    let dep = |src_stages, src_access, dst_stages, dst_access| MemoryDependency {
        src_stages,
        src_access,
        dst_stages,
        dst_access,
    };
    device
        .submit_once("single passes", |rec| {
            let groups = [N.div_ceil(64), 1, 1];
            program.dispatch(rec, &set1, &[], groups).unwrap();
            rec.memory_barrier(dep(S::COMPUTE_SHADER, A::SHADER_WRITE, S::COPY, A::TRANSFER_READ)).unwrap();
            rec.copy_buffer(&a, 0, &mid, 0, N as u64 * 16).unwrap();
            rec.memory_barrier(dep(S::COPY, A::TRANSFER_WRITE, S::COMPUTE_SHADER, A::SHADER_READ)).unwrap();
            program.dispatch(rec, &set2, &[], groups).unwrap();
            rec.memory_barrier(dep(S::COMPUTE_SHADER, A::SHADER_WRITE, S::COPY, A::TRANSFER_READ)).unwrap();
            rec.copy_buffer(&b, 0, &out, 16, COPY2).unwrap();
        })
        .unwrap();
    device.read_back(&out, 0, N as u64 * 16).unwrap()
}

/// Copies mip 0 of `image` (in `GENERAL`) to the host.
fn read_target(device: &Device, image: &residency_vulkan::Image) -> Vec<u8> {
    use vk::{AccessFlags2 as A, PipelineStageFlags2 as S};
    let pixels = device
        .create_buffer(
            &BufferDesc::new("target pixels", u64::from(SIDE * SIDE * 4), BufferUsage::COPY_DST)
                .with_intent(residency_core::memory::MemoryIntent::Readback),
        )
        .unwrap();
    device
        .submit_once("read the target", |rec| {
            rec.copy_image_to_buffer(image, vk::ImageLayout::GENERAL, &pixels).unwrap();
            rec.memory_barrier(MemoryDependency {
                src_stages: S::COPY,
                src_access: A::TRANSFER_WRITE,
                dst_stages: S::HOST,
                dst_access: A::HOST_READ,
            })
            .unwrap();
        })
        .unwrap();
    let mut out = vec![0u8; (SIDE * SIDE * 4) as usize];
    pixels.read(0, &mut out).unwrap();
    out
}

fn whole(b: &MultiBuffer) -> MultiBinding<'_> {
    MultiBinding::Buffer(BufferView::whole(b))
}

/// What one run of the frame left: the output buffer and the target's pixels.
type Frame = (Vec<u8>, Vec<u8>);

#[test]
fn a_multi_pass_frame_records_fewer_barriers_from_the_tracker_with_the_same_results() {
    with_gpu(|set| {
        let both = DeviceMask::from_bits(0b11);
        let pool = MultiBufferPool::new(
            set,
            both,
            &BufferPoolDesc::new("passes", BufferPoolUsage::Unknown).with_page_size(1 << 20),
        )
        .unwrap();
        let uploader = MultiUploader::new(set, both, 1 << 20).unwrap();
        let storage = BufferUsage::STORAGE | BufferUsage::COPY_DST | BufferUsage::COPY_SRC;
        let init = |name: &str, size: u64, usage| {
            pool.init_buffer(&BufferInit::new(name, size).with_usage(usage), both).unwrap()
        };
        let bytes = u64::from(N) * 16;
        let v = init("vertices", bytes, storage);
        let i = init("indices", u64::from(N) * 4, storage);
        let uniform = BufferUsage::UNIFORM | BufferUsage::COPY_DST;
        let (p1, p2) = (init("params 1", 48, uniform), init("params 2", 48, uniform));
        let (a, mid, b, out) = (
            init("a", bytes, storage),
            init("mid", bytes, storage),
            init("b", bytes, storage),
            init("out", bytes, storage),
        );
        let geo = init("quad", 144, BufferUsage::VERTEX | BufferUsage::COPY_DST);
        uploader.broadcast(&v, 0, &vertices()).unwrap();
        uploader.broadcast(&i, 0, &indices()).unwrap();
        uploader.broadcast(&p1, 0, &params(1.0, 0.5)).unwrap();
        uploader.broadcast(&p2, 0, &params(2.0, 1.0)).unwrap();
        uploader.broadcast(&geo, 0, &quad()).unwrap();
        uploader.wait_idle().unwrap();

        let compute = MultiComputeProgram::new(set, both, "passes", &shaders::PLACED_BUFFERS, 4).unwrap();
        let groups = [N.div_ceil(64), 1, 1];
        let d1 = DispatchItem::new(&compute, vec![whole(&v), whole(&i), whole(&p1), whole(&a)], &[], groups);
        let d2 =
            DispatchItem::new(&compute, vec![whole(&mid), whole(&i), whole(&p2), whole(&b)], &[], groups);
        let c1 = CopyItem {
            src: BufferView::whole(&a),
            dst: BufferView::whole(&mid),
            src_offset: 0,
            dst_offset: 0,
            size: bytes,
        };
        let c2 = CopyItem {
            src: BufferView::whole(&b),
            dst: BufferView::whole(&out),
            src_offset: 0,
            dst_offset: 16,
            size: COPY2,
        };
        let target = MultiImage::create(
            set,
            both,
            &ImageDesc::new_2d(
                "passes target",
                Format::R8G8B8A8Unorm,
                SIDE,
                SIDE,
                ImageUsage::COLOR_ATTACHMENT | ImageUsage::COPY_SRC,
            ),
        )
        .unwrap();
        let quads = MultiGraphicsProgram::new(
            set,
            both,
            "passes quads",
            &shaders::QUADS_VERT,
            &shaders::QUADS_FRAG,
            24,
            &[
                residency_vulkan::graphics::VertexAttribute {
                    location: 0,
                    format: vk::Format::R32G32_SFLOAT,
                    offset: 0,
                },
                residency_vulkan::graphics::VertexAttribute {
                    location: 1,
                    format: vk::Format::R32G32B32A32_SFLOAT,
                    offset: 8,
                },
            ],
            vk::Format::R8G8B8A8_UNORM,
            1,
        )
        .unwrap();
        let red = DrawItem::new(&quads, vec![], Some(BufferView::whole(&geo)), 6, 1);
        let draws = [&red];
        let render = RenderItem {
            program: &quads,
            target: &target,
            extent: [SIDE; 2],
            clear: [0.0, 0.0, 0.0, 1.0],
            draws: &draws,
        };
        let stamps = MultiTimestamps::new(set, both, "passes", 2).unwrap();

        // Before the tracker, each dependent pass needed an explicit full barrier; the render does
        // not depend on the passes.
        let full_items = [
            WorkItem::Timestamp(&stamps, 0),
            WorkItem::Dispatch(&d1),
            WorkItem::Barrier,
            WorkItem::Copy(c1),
            WorkItem::Barrier,
            WorkItem::Dispatch(&d2),
            WorkItem::Barrier,
            WorkItem::Copy(c2),
            WorkItem::Render(render),
            WorkItem::Timestamp(&stamps, 1),
        ];
        let tracked_items: Vec<&WorkItem<'_, '_>> =
            full_items.iter().filter(|i| !matches!(i, WorkItem::Barrier)).collect();
        let tracked_items: Vec<WorkItem<'_, '_>> = tracked_items
            .into_iter()
            .map(|i| match i {
                WorkItem::Timestamp(t, n) => WorkItem::Timestamp(t, *n),
                WorkItem::Dispatch(d) => WorkItem::Dispatch(d),
                WorkItem::Copy(c) => WorkItem::Copy(*c),
                WorkItem::Render(r) => WorkItem::Render(*r),
                _ => unreachable!("no barriers left"),
            })
            .collect();

        let run = |submitter: &MultiSubmitter,
                   items: &[WorkItem<'_, '_>],
                   device: DeviceIndex|
         -> (Frame, BarrierStats) {
            // The outputs start from junk each run, so a run that wrote nothing would show.
            uploader.broadcast(&out, 0, &vec![0xab; bytes as usize]).unwrap();
            uploader.wait_idle().unwrap();
            let before = submitter.barrier_stats(device);
            let submission = submitter.submit(device, items).unwrap();
            submitter.wait(device, submission).unwrap();
            let stats = submitter.barrier_stats(device).since(&before);
            let dev = set.device(device).unwrap();
            let output = dev.read_back(out.instance(device).unwrap(), 0, bytes).unwrap();
            ((output, read_target(dev, target.instance(device).unwrap())), stats)
        };
        let full = MultiSubmitter::new(set, both).unwrap().with_barriers(BarrierMode::Full);
        let tracked = MultiSubmitter::new(set, both).unwrap();
        assert_eq!(tracked.barrier_mode(), BarrierMode::Tracked, "the tracker by default");
        let mut frames = Vec::new();
        let mut counts = Vec::new();
        for device in [d(0), d(1)] {
            let (frame, before) = run(&full, &full_items, device);
            frames.push(frame);
            let (frame, after) = run(&tracked, &tracked_items, device);
            frames.push(frame);
            println!("{device}: full barriers {before:?}; tracker {after:?}");
            counts.push((before, after));
        }
        let single = single_device_frame(set.device(d(0)).unwrap());
        for (n, (output, pixels)) in frames.iter().enumerate() {
            assert!(*output == single, "run {n}: not the output of a single-device run");
            assert!(*pixels == frames[0].1, "run {n}: other pixels");
        }
        // b[i] = a[n-1-i] * 2 + 1 = (v[i] + 0.5) * 2 + 1; out = b shifted by one element.
        let word =
            |bytes: &[u8], at: usize| f32::from_le_bytes(bytes[at * 4..at * 4 + 4].try_into().unwrap());
        assert_eq!(word(&single, 0).to_le_bytes(), [0xab; 4], "not copied");
        assert_eq!(word(&single, 4), 2.0 * 0.5 + 1.0, "the first element of b");
        assert_eq!(word(&single, 8), 2.0 * (4.0 + 0.5) + 1.0, "the second element of b");
        let pixel = |x: u32, y: u32| frames[0].1[((y * SIDE + x) * 4) as usize..][..4].to_vec();
        assert_eq!(pixel(8, 8), [255, 0, 0, 255], "the red quad");
        assert_eq!(pixel(24, 24), [0, 0, 0, 255], "cleared");

        for (before, after) in &counts {
            assert_eq!(before.submissions, 1);
            assert_eq!(after.submissions, 1);
            // Full: one before, three explicit, one after, two around the render target.
            assert_eq!(before.commands, 7, "{before:?}");
            assert_eq!(before.barriers(), 7, "{before:?}");
            // Tracker: one at the start (every resource's first use from the unknown prior state,
            // the target into its attachment layout), one before each pass that reads the one
            // before it (copy, dispatch, copy), one at the end (the target back to GENERAL).
            assert_eq!(after.commands, 5, "{after:?}");
            assert!(after.commands < before.commands, "fewer barrier commands: {after:?} against {before:?}");
            assert_eq!(*after, counts[0].1, "the same barriers on both devices");
        }

        full.destroy();
        tracked.destroy();
        drop((d1, d2, red));
        drop((compute, quads, stamps, target));
        for buffer in [v, i, p1, p2, a, mid, b, out, geo] {
            pool.free_buffer(buffer).unwrap();
        }
        uploader.destroy().unwrap();
    });
}

#[test]
fn an_item_that_declares_no_accesses_gets_full_barriers_and_the_tracked_items_around_it_stay_ordered() {
    use residency_vulkan::multi::work::PerDeviceImage;
    use residency_vulkan::{Filter, ImageRegion};
    with_gpu(|set| {
        let both = DeviceMask::from_bits(0b11);
        let pool = MultiBufferPool::new(
            set,
            both,
            &BufferPoolDesc::new("fallback", BufferPoolUsage::Unknown).with_page_size(1 << 20),
        )
        .unwrap();
        let uploader = MultiUploader::new(set, both, 1 << 20).unwrap();
        let storage = BufferUsage::STORAGE | BufferUsage::COPY_DST | BufferUsage::COPY_SRC;
        let init = |name: &str, size: u64, usage| {
            pool.init_buffer(&BufferInit::new(name, size).with_usage(usage), both).unwrap()
        };
        let bytes = u64::from(N) * 16;
        let v = init("vertices", bytes, storage);
        let i = init("indices", u64::from(N) * 4, storage);
        let p1 = init("params", 48, BufferUsage::UNIFORM | BufferUsage::COPY_DST);
        let (a, mid, t, t_copy) = (
            init("a", bytes, storage),
            init("mid", bytes, storage),
            init("t", bytes, storage),
            init("t copy", bytes, storage),
        );
        uploader.broadcast(&v, 0, &vertices()).unwrap();
        uploader.broadcast(&i, 0, &indices()).unwrap();
        uploader.broadcast(&p1, 0, &params(1.0, 0.5)).unwrap();
        // A 16 × 16 texture, sampled by a dispatch that binds an image: it declares no accesses.
        let texture = MultiImage::create(
            set,
            both,
            &ImageDesc::new_2d(
                "fallback texture",
                Format::R8G8B8A8Unorm,
                16,
                16,
                ImageUsage::SAMPLED | ImageUsage::COPY_DST,
            ),
        )
        .unwrap();
        let texels: Vec<u8> = (0..256u32).flat_map(|n| [n as u8, 255 - n as u8, 7, 255]).collect();
        for (index, instance) in texture.iter() {
            set.device(index).unwrap().discard_to_general(&[instance]).unwrap();
            let up = uploader.instance(index).unwrap();
            up.write_image(&ImageRegion::new(instance, 0, [0; 3], [16, 16, 1]), &texels).unwrap();
        }
        uploader.wait_idle().unwrap();
        let samplers: Vec<_> =
            [d(0), d(1)].map(|n| set.device(n).unwrap().create_sampler(Filter::Nearest).unwrap()).into();
        let views: Vec<_> = [d(0), d(1)].map(|n| texture.view(set, n, 0..1).unwrap()).into();
        let general = vk::ImageLayout::GENERAL;
        let per_device = PerDeviceImage {
            views: vec![
                (d(0), Binding::sampled(&*views[0], &samplers[0], general)),
                (d(1), Binding::sampled(&*views[1], &samplers[1], general)),
            ],
        };
        let compute = MultiComputeProgram::new(set, both, "passes", &shaders::PLACED_BUFFERS, 4).unwrap();
        let sampling = MultiComputeProgram::new(set, both, "sampling", &shaders::SAMPLE_TEXELS, 4).unwrap();
        let groups = [N.div_ceil(64), 1, 1];
        let d1 = DispatchItem::new(&compute, vec![whole(&v), whole(&i), whole(&p1), whole(&a)], &[], groups);
        let push: Vec<u8> = [N, 16].iter().flat_map(|w| w.to_le_bytes()).collect();
        let sample =
            DispatchItem::new(&sampling, vec![MultiBinding::Image(per_device), whole(&t)], &push, groups);
        let copy = |src, dst| CopyItem {
            src: BufferView::whole(src),
            dst: BufferView::whole(dst),
            src_offset: 0,
            dst_offset: 0,
            size: bytes,
        };
        let items = [
            WorkItem::Dispatch(&d1),
            WorkItem::Dispatch(&sample),
            WorkItem::Copy(copy(&a, &mid)),
            WorkItem::Copy(copy(&t, &t_copy)),
        ];
        let submitter = MultiSubmitter::new(set, both).unwrap();
        for device in [d(0), d(1)] {
            let before = submitter.barrier_stats(device);
            let submission = submitter.submit(device, &items).unwrap();
            submitter.wait(device, submission).unwrap();
            let stats = submitter.barrier_stats(device).since(&before);
            // The start (the dispatch's first uses), the full barrier before the undeclared
            // dispatch (with everything used closed), one before each copy, the end (with a full
            // barrier after the undeclared work).
            assert_eq!(stats.commands, 5, "{stats:?}");
            let dev = set.device(device).unwrap();
            let mid = dev.read_back(mid.instance(device).unwrap(), 0, bytes).unwrap();
            let t = dev.read_back(t_copy.instance(device).unwrap(), 0, bytes).unwrap();
            let word = |b: &[u8], at: usize| f32::from_le_bytes(b[at * 4..at * 4 + 4].try_into().unwrap());
            for n in 0..N as usize {
                let source = (N as usize - 1 - n) * 4;
                assert_eq!(word(&mid, n * 4), source as f32 + 0.5, "{device}: a[{n}] copied");
                assert_eq!(
                    (word(&t, n * 4) * 255.0).round(),
                    f32::from(texels[n * 4]),
                    "{device}: texel {n}"
                );
            }
        }
        submitter.destroy();
        drop((d1, sample));
        drop((compute, sampling, views, samplers, texture));
        for buffer in [v, i, p1, a, mid, t, t_copy] {
            pool.free_buffer(buffer).unwrap();
        }
        uploader.destroy().unwrap();
    });
}

#[test]
fn a_frame_of_image_copies_a_sampled_dispatch_an_indirect_dispatch_and_a_query_is_ordered_by_the_tracker() {
    use residency_vulkan::multi::bindless::{MultiSampled, MultiSampler};
    use residency_vulkan::multi::indirect::{DispatchArgs, IndirectDispatchItem, IndirectWriter};
    use residency_vulkan::multi::queries::{MultiQueryPool, QueryCopyItem};
    use residency_vulkan::multi::work::{BufferImageRegion, ImageArea, ImageCopyItem};
    use residency_vulkan::queries::QueryKind;
    use residency_vulkan::Filter;
    const TEXELS: u32 = 16 * 16;
    const WORDS: u32 = 256;
    with_gpu(|set| {
        let both = DeviceMask::from_bits(0b11);
        let pool = MultiBufferPool::new(
            set,
            both,
            &BufferPoolDesc::new("declared frame", BufferPoolUsage::Unknown).with_page_size(1 << 20),
        )
        .unwrap();
        let uploader = MultiUploader::new(set, both, 1 << 20).unwrap();
        let usage = BufferUsage::STORAGE | BufferUsage::COPY_DST | BufferUsage::COPY_SRC;
        let init = |name: &str, size: u64, usage| {
            pool.init_buffer(&BufferInit::new(name, size).with_usage(usage), both).unwrap()
        };
        let texel_bytes = u64::from(TEXELS) * 4;
        let (staging, readback) = (init("staging", texel_bytes, usage), init("readback", texel_bytes, usage));
        let sampled_bytes = u64::from(TEXELS) * 16;
        let (t, t_copy) = (init("sampled", sampled_bytes, usage), init("sampled copy", sampled_bytes, usage));
        let fill_bytes = u64::from(WORDS) * 4;
        let target = init("indirect target", fill_bytes, usage);
        // The counts are written into one buffer and copied into the argument view by the
        // frame itself, and the query results copied on, so the indirect dispatch and the
        // query copy each depend on an item before them in the same submission.
        let args_src = init("written arguments", 16, usage | BufferUsage::INDIRECT);
        let args = init("arguments", 16, usage | BufferUsage::INDIRECT);
        let (results, results_copy) = (init("query results", 8, usage), init("query results copy", 8, usage));
        let texels: Vec<u8> = (0..TEXELS).flat_map(|n| [n as u8, 255 - n as u8, 7, 255]).collect();
        uploader.broadcast(&staging, 0, &texels).unwrap();
        let groups = [2, 1, 1];
        let values = [(d(0), DispatchArgs { groups }), (d(1), DispatchArgs { groups })];
        IndirectWriter::new(&uploader).write(BufferView::range(&args_src, 0, 12).unwrap(), &values).unwrap();
        uploader.wait_idle().unwrap();

        let texture = MultiImage::create(
            set,
            both,
            &ImageDesc::new_2d(
                "declared texture",
                Format::R8G8B8A8Unorm,
                16,
                16,
                ImageUsage::SAMPLED | ImageUsage::COPY_DST | ImageUsage::COPY_SRC,
            ),
        )
        .unwrap();
        let sampler = MultiSampler::new(set, both, Filter::Nearest).unwrap();
        let whole_image = [BufferImageRegion::packed(0, ImageArea::new(0, [0; 3], [16, 16, 1]))];
        let upload = ImageCopyItem::buffer_to_image(BufferView::whole(&staging), &texture, &whole_image);
        let read = ImageCopyItem::image_to_buffer(&texture, BufferView::whole(&readback), &whole_image);
        let sampling = MultiComputeProgram::new(set, both, "sampling", &shaders::SAMPLE_TEXELS, 4).unwrap();
        let push: Vec<u8> = [TEXELS, 16].iter().flat_map(|w| w.to_le_bytes()).collect();
        let sampled = MultiSampled::image(&texture, 0..1, &sampler, vk::ImageLayout::GENERAL);
        let sample = DispatchItem::new(
            &sampling,
            vec![MultiBinding::Sampled(sampled), whole(&t)],
            &push,
            [TEXELS.div_ceil(64), 1, 1],
        );
        let fill = MultiComputeProgram::new(set, both, "fill", &shaders::FILL, 4).unwrap();
        let fill_push: Vec<u8> = [WORDS, 1000].iter().flat_map(|w| w.to_le_bytes()).collect();
        let indirect = IndirectDispatchItem::new(
            &fill,
            vec![whole(&target)],
            &fill_push,
            BufferView::range(&args, 0, 12).unwrap(),
        );
        let stats = MultiQueryPool::new(
            set,
            both,
            "frame statistics",
            QueryKind::PipelineStatistics(vk::QueryPipelineStatisticFlags::COMPUTE_SHADER_INVOCATIONS),
            1,
        )
        .unwrap();
        let copy_t = CopyItem {
            src: BufferView::whole(&t),
            dst: BufferView::whole(&t_copy),
            src_offset: 0,
            dst_offset: 0,
            size: sampled_bytes,
        };
        let query_copy = QueryCopyItem { pool: &stats, queries: 0..1, dst: BufferView::whole(&results) };
        let copy = |src, dst, size| CopyItem {
            src: BufferView::whole(src),
            dst: BufferView::whole(dst),
            src_offset: 0,
            dst_offset: 0,
            size,
        };
        let (copy_args, copy_results) = (copy(&args_src, &args, 16), copy(&results, &results_copy, 8));

        // Before the tracker these items were ordered only by explicit full barriers (and each
        // kind here was undeclared, so the tracker put a full barrier around every one of them).
        let full_items = [
            WorkItem::ImageCopy(&upload),
            WorkItem::Copy(copy_args),
            WorkItem::Barrier,
            WorkItem::BeginQuery(&stats, 0),
            WorkItem::DispatchIndirect(&indirect),
            WorkItem::Dispatch(&sample),
            WorkItem::EndQuery(&stats, 0),
            WorkItem::Barrier,
            WorkItem::CopyQueryResults(query_copy.clone()),
            WorkItem::Barrier,
            WorkItem::Copy(copy_results),
            WorkItem::Copy(copy_t),
            WorkItem::ImageCopy(&read),
        ];
        // The same items in the same order, without the explicit barriers.
        let tracked_items = [
            WorkItem::ImageCopy(&upload),
            WorkItem::Copy(copy_args),
            WorkItem::BeginQuery(&stats, 0),
            WorkItem::DispatchIndirect(&indirect),
            WorkItem::Dispatch(&sample),
            WorkItem::EndQuery(&stats, 0),
            WorkItem::CopyQueryResults(query_copy.clone()),
            WorkItem::Copy(copy_results),
            WorkItem::Copy(copy_t),
            WorkItem::ImageCopy(&read),
        ];
        type Frame = (Vec<u8>, Vec<u8>, Vec<u8>, Vec<u8>);
        let run = |submitter: &MultiSubmitter, items: &[WorkItem<'_, '_>], device: DeviceIndex| {
            // Outputs start from junk each run, so a run that wrote nothing would show.
            for (b, bytes) in [
                (&readback, texel_bytes),
                (&t_copy, sampled_bytes),
                (&target, fill_bytes),
                (&args, 16),
                (&results, 8),
                (&results_copy, 8),
            ] {
                uploader.broadcast(b, 0, &vec![0xab; bytes as usize]).unwrap();
            }
            uploader.wait_idle().unwrap();
            let before = submitter.barrier_stats(device);
            let submission = submitter.submit(device, items).unwrap();
            submitter.wait(device, submission).unwrap();
            let stats = submitter.barrier_stats(device).since(&before);
            let dev = set.device(device).unwrap();
            let back = |b: &MultiBuffer, bytes| dev.read_back(b.instance(device).unwrap(), 0, bytes).unwrap();
            let frame: Frame = (
                back(&readback, texel_bytes),
                back(&t_copy, sampled_bytes),
                back(&target, fill_bytes),
                back(&results_copy, 8),
            );
            (frame, stats)
        };
        let full = MultiSubmitter::new(set, both).unwrap().with_barriers(BarrierMode::Full);
        let tracked = MultiSubmitter::new(set, both).unwrap();
        let mut frames = Vec::new();
        let mut counts = Vec::new();
        for device in [d(0), d(1)] {
            let (frame, before) = run(&full, &full_items, device);
            frames.push(frame);
            let (frame, after) = run(&tracked, &tracked_items, device);
            frames.push(frame);
            println!("{device}: full barriers {before:?}; tracker {after:?}");
            counts.push((before, after));
        }
        // What a single device computes, element by element: the texels copied through the
        // image, each sampled as a normalised vec4, the fill's `1000 + i` over 2 × 64 words, and
        // the compute invocations of the sampling pass, the clamp pass and the fill.
        let sampled_expected: Vec<u8> = texels
            .chunks_exact(4)
            .flat_map(|t| t.iter().flat_map(|&c| (f32::from(c) / 255.0).to_le_bytes()).collect::<Vec<_>>())
            .collect();
        let fill_expected: Vec<u8> = (0..WORDS)
            .flat_map(|i| if i < 128 { 1000 + i } else { u32::from_le_bytes([0xab; 4]) }.to_le_bytes())
            .collect();
        for (n, (back, sampled, filled, query)) in frames.iter().enumerate() {
            assert!(*back == texels, "run {n}: the image copied back is not the texels");
            assert_eq!(sampled.len(), sampled_expected.len());
            for (i, (got, want)) in sampled.chunks_exact(4).zip(sampled_expected.chunks_exact(4)).enumerate()
            {
                let (got, want) = (
                    f32::from_le_bytes(got.try_into().unwrap()),
                    f32::from_le_bytes(want.try_into().unwrap()),
                );
                assert!((got - want).abs() < 1e-6, "run {n}: sampled component {i}: {got} against {want}");
            }
            assert!(*filled == fill_expected, "run {n}: not the indirect fill of 2 workgroups");
            let invocations = u64::from_le_bytes(query.as_slice().try_into().unwrap());
            assert!(invocations >= u64::from(TEXELS) + 128, "run {n}: {invocations} compute invocations");
            assert!(*frames[n].3 == frames[0].3, "run {n}: another query result");
            assert!(frames[n] == frames[0], "run {n}: another frame than the first");
        }
        for (before, after) in &counts {
            assert_eq!(before.submissions, 1);
            assert_eq!(after.submissions, 1);
            // Full: one before, three explicit, one after, each over every stage and access.
            assert_eq!((before.commands, before.barriers(), before.memory), (5, 5, 5), "{before:?}");
            // Tracker: one at the start (every resource's first use from the unknown prior
            // state), one before each item that reads what an earlier item wrote — the indirect
            // dispatch (the copied arguments), the sampling dispatch (the uploaded image), the
            // copy of the query results, the copy of the samples, the image read back — and one
            // at the end; no full barrier anywhere, buffers by range, images by subresources
            // (merged into memory barriers, as their layout stays GENERAL). Before these item
            // kinds declared their accesses, the tracker put a full barrier around each of them:
            // 11 commands here (main at 17fa173, lavapipe).
            assert_eq!(after.commands, 7, "{after:?}");
            assert_eq!((after.buffer, after.image), (6, 0), "{after:?}");
            assert_eq!(*after, counts[0].1, "the same barriers on both devices");
            assert_eq!(*before, counts[0].0, "the same barriers on both devices");
        }

        full.destroy();
        tracked.destroy();
        drop((sample, indirect, upload, read));
        drop((sampling, fill, stats, sampler, texture));
        for buffer in [staging, readback, t, t_copy, target, args_src, args, results, results_copy] {
            pool.free_buffer(buffer).unwrap();
        }
        uploader.destroy().unwrap();
    });
}
