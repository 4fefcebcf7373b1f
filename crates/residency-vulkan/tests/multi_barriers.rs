//! The barriers between multi-device work items from the per-device state tracker: a multi-pass
//! frame (dispatch, copy, dispatch, copy, render, timestamps) submitted with the full barriers of
//! before the tracker and with the tracker's, on both devices, counted and compared with each
//! other and with a single-device run.

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
