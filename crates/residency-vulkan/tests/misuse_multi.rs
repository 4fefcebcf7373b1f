//! Misuse of multi-device objects: each scenario is a typed error that changes nothing, or a
//! documented safe outcome (what the GPU still uses outlives the handle that named it). Every test
//! runs on two logical devices under synchronization validation: destroying an image or view a
//! pending dispatch samples would be reported and fail the test.

use ash::vk;
use residency_core::device_mask::{DeviceIndex, DeviceMask};
use residency_core::format::Format;
use residency_core::memory::MemoryIntent;
use residency_core::usage::{BufferPoolUsage, BufferUsage, ImageUsage};
use residency_vulkan::compute::{Binding, ComputeProgram};
use residency_vulkan::multi::{
    MultiBuffer, MultiBufferPool, MultiDevice, MultiDeviceError, MultiImage, MultiUploader,
};
use residency_vulkan::shaders;
use residency_vulkan::testing::with_gpu;
use residency_vulkan::{
    BufferDesc, BufferInit, BufferPoolDesc, CommandContext, Device, DeviceSet, Filter, ForeignReason,
    ImageDesc, MemoryError, Timeline, UploadError,
};
use std::sync::Arc;

const N: u32 = 256;

fn d(i: u32) -> DeviceIndex {
    DeviceIndex::new(i).unwrap()
}

fn both() -> DeviceMask {
    DeviceMask::from_bits(0b11)
}

fn live(device: &Device, name: &str) -> bool {
    device.ledger().live_objects().iter().any(|o| &*o.name == name)
}

/// What a device's ledger holds: its live objects by kind and name, sorted, and its memory
/// objects.
fn ledger(device: &Device) -> (Vec<(&'static str, String)>, u64) {
    let mut objects: Vec<_> =
        device.ledger().live_objects().into_iter().map(|o| (o.kind, o.name.to_string())).collect();
    objects.sort();
    (objects, device.ledger().memory_objects())
}

fn pool(set: &DeviceSet, mask: DeviceMask, name: &str) -> MultiBufferPool {
    MultiBufferPool::new(
        set,
        mask,
        &BufferPoolDesc::new(name, BufferPoolUsage::Unknown).with_page_size(1 << 20),
    )
    .unwrap()
}

fn storage(name: &str) -> BufferInit {
    BufferInit::new(name, 4096).with_usage(BufferUsage::STORAGE)
}

/// Host-signals `timeline` to `value` (the renderer's frame finishing).
fn signal(device: &Device, timeline: &Timeline, value: u64) {
    let info = vk::SemaphoreSignalInfo::default().semaphore(timeline.raw()).value(value);
    // SAFETY: a timeline semaphore of this device; values only grow in these tests.
    unsafe { device.raw().signal_semaphore(&info) }.unwrap();
}

#[test]
fn misuse_a_multi_device_buffer_freed_into_another_multi_device_pool_is_refused_unchanged() {
    with_gpu(|set| {
        let a = pool(set, both(), "misuse multi a");
        let b = pool(set, both(), "misuse multi b");
        let buffer = a.init_buffer(&storage("misuse multi buffer"), both()).unwrap();
        let raws: Vec<_> = buffer.iter().map(|(i, x)| (i, x.raw(), x.offset())).collect();
        let (stats_a, stats_b) = (a.stats(), b.stats());

        let refused = b.free_buffer(buffer).unwrap_err();
        assert_eq!(
            refused.reason,
            ForeignReason::OtherPool {
                owner: Some("misuse multi a".into()),
                target: Some("misuse multi b".into())
            },
            "{refused}"
        );
        assert_eq!(refused.name, "misuse multi buffer");
        let buffer = *refused.resource;
        let back: Vec<_> = buffer.iter().map(|(i, x)| (i, x.raw(), x.offset())).collect();
        assert_eq!(back, raws, "the buffer comes back with every instance unchanged");
        assert_eq!(a.stats(), stats_a, "nothing was freed from its own pool");
        assert_eq!(b.stats(), stats_b);

        // An instance on a device the pool is not on.
        let only_1 = pool(set, d(1).mask(), "misuse multi on 1");
        let only_0 = pool(set, d(0).mask(), "misuse multi on 0");
        let on_1 = only_1.init_buffer(&storage("misuse multi on device 1"), DeviceMask::ALL).unwrap();
        let refused = only_0.free_buffer(on_1).unwrap_err();
        assert_eq!(refused.reason, ForeignReason::OutsideMask { device: d(1), mask: d(0).mask() });
        assert_eq!(refused.resource.mask(), d(1).mask());
        only_1.free_buffer(*refused.resource).unwrap();

        // A buffer of the devices' general allocators is no pool's.
        let general = MultiBuffer::create(
            set,
            both(),
            &BufferDesc::new("misuse multi general", 4096, BufferUsage::STORAGE),
        )
        .unwrap();
        let refused = a.free_buffer(general).unwrap_err();
        assert_eq!(
            refused.reason,
            ForeignReason::OtherPool { owner: None, target: Some("misuse multi a".into()) }
        );
        drop(refused);

        assert_eq!(a.total_stats().buffers, 2);
        a.free_buffer(buffer).unwrap();
        assert_eq!(a.total_stats().buffers, 0);
    });
}

#[test]
fn misuse_a_fan_out_failing_on_the_second_device_leaves_nothing_on_the_first() {
    with_gpu(|set| {
        let (d0, d1) = (Arc::clone(set.device(d(0)).unwrap()), Arc::clone(set.device(d(1)).unwrap()));
        let before = ledger(&d0);
        let out_of_memory = |err: &MultiDeviceError<MemoryError>| {
            matches!(err, MultiDeviceError::Failed { device, source: MemoryError::OutOfDeviceMemory { .. } }
                if *device == d(1))
        };

        // Committed, so each instance allocates its own memory: every allocation on device 1 fails
        // (every memory type of the intent's tier: the H200 has several; no fallback to the host
        // tier, which would place it there).
        let types = d1.memory_properties().types.len() as u64;
        d1.ledger().inject_out_of_memory(types);
        let desc = BufferDesc::new("misuse fan-out buffer", 1 << 16, BufferUsage::STORAGE)
            .committed()
            .without_fallback();
        let err = MultiBuffer::create(set, both(), &desc).unwrap_err();
        assert!(out_of_memory(&err), "{err}");
        d0.wait_submitted().unwrap();
        assert_eq!(ledger(&d0), before, "device 0's buffer and its memory were released");

        d1.ledger().inject_out_of_memory(types);
        let desc =
            ImageDesc::new_2d("misuse fan-out image", Format::R8G8B8A8Unorm, 64, 64, ImageUsage::SAMPLED)
                .committed()
                .without_fallback();
        let err = MultiImage::create(set, both(), &desc).unwrap_err();
        assert!(out_of_memory(&err), "{err}");
        d0.wait_submitted().unwrap();
        assert_eq!(ledger(&d0), before, "device 0's image and its memory were released");

        // The staging ring of device 1 cannot be allocated: device 0's uploader goes too.
        d1.ledger().inject_out_of_memory(types);
        let err = MultiUploader::new(set, both(), 1 << 20).unwrap_err();
        assert!(
            matches!(err, MultiDeviceError::Failed { device, source: UploadError::Memory(_) } if device == d(1)),
            "{err}"
        );
        d0.wait_submitted().unwrap();
        assert_eq!(ledger(&d0), before, "device 0's uploader, its ring and its commands were released");

        // Nothing is left injected: the same calls succeed.
        d1.ledger().clear_faults();
        let buffer = MultiBuffer::create(
            set,
            both(),
            &BufferDesc::new("misuse fan-out buffer", 1 << 16, BufferUsage::STORAGE).committed(),
        )
        .unwrap();
        assert_eq!(buffer.mask(), both());
    });
}

#[test]
fn misuse_a_multi_device_image_dropped_while_its_cached_views_are_bound_in_pending_work_is_safe() {
    with_gpu(|set| {
        let (d0, d1) = (Arc::clone(set.device(d(0)).unwrap()), Arc::clone(set.device(d(1)).unwrap()));
        let gate = d0.create_timeline("misuse multi view gate").unwrap();
        let context = CommandContext::new(&d0, "misuse multi view").unwrap();
        let image = MultiImage::create(
            set,
            both(),
            &ImageDesc::new_2d(
                "misuse multi image",
                Format::R8G8B8A8Unorm,
                256,
                256,
                ImageUsage::SAMPLED | ImageUsage::COPY_DST,
            ),
        )
        .unwrap();
        for (index, instance) in image.iter() {
            set.device(index).unwrap().discard_to_general(&[instance]).unwrap();
        }
        let view = image.view(set, d(0), 0..1).unwrap();
        let other_view = image.view(set, d(1), 0..1).unwrap();
        assert_eq!(image.cached_views(), 2);
        let sampler = d0.create_sampler(Filter::Nearest).unwrap();
        let usage = BufferUsage::STORAGE | BufferUsage::COPY_SRC;
        let results = d0
            .create_buffer(
                &BufferDesc::new("misuse multi results", u64::from(N) * 16, usage)
                    .with_intent(MemoryIntent::Readback),
            )
            .unwrap();
        let program =
            ComputeProgram::new(&d0, "misuse multi view program", &shaders::SAMPLE_TEXELS, 1).unwrap();
        let ds = program
            .descriptor_set(&[
                Binding::sampled(&*view, &sampler, vk::ImageLayout::GENERAL),
                Binding::Buffer(&results),
            ])
            .unwrap();
        let push: Vec<u8> = [N, 16].iter().flat_map(|v| v.to_le_bytes()).collect();
        // SAFETY: the test signals the gate from the host below, waiting for nothing first.
        unsafe { gate.signal_submitted(1) };
        let submission = context
            .submit(&[gate.at(1)], |rec| program.dispatch(rec, &ds, &push, [N / 64, 1, 1]).unwrap())
            .unwrap();

        // The image goes (with its cache and every handle to the views) while device 0's
        // dispatch that samples the cached view is held on the GPU.
        drop((view, other_view, image, ds, program, sampler));
        assert!(live(&d0, "misuse multi image view"), "the view waits for the dispatch that samples it");
        assert!(live(&d0, "misuse multi image"), "the image lives while its view does");
        d1.wait_submitted().unwrap();
        assert!(
            !live(&d1, "misuse multi image view") && !live(&d1, "misuse multi image"),
            "device 1's instance had no pending use: released at once"
        );

        signal(&d0, &gate, 1);
        context.wait(submission).unwrap();
        // The universal timeline (what destruction waits for) may trail the fence a moment.
        d0.wait_submitted().unwrap();
        assert!(!live(&d0, "misuse multi image view") && !live(&d0, "misuse multi image"));
        assert!(!live(&d0, "misuse multi view program"));
    });
}

#[test]
fn misuse_a_ranged_view_outside_its_buffer_or_misaligned_for_its_binding_is_refused_before_anything_is_recorded(
) {
    use residency_vulkan::multi::work::{
        BufferView, DispatchItem, MultiBinding, MultiComputeProgram, MultiSubmitter, ViewRangeError,
        WorkError, WorkItem,
    };
    with_gpu(|set| {
        let pool = pool(set, both(), "misuse ranges");
        let buffer = pool.init_buffer(&storage("misuse ranged"), both()).unwrap();
        // Outside the buffer, wrapping, empty: refused when made.
        for (offset, size) in [(4000, 200), (u64::MAX, 2), (16, 0)] {
            assert_eq!(
                BufferView::range(&buffer, offset, size).unwrap_err(),
                ViewRangeError { name: "misuse ranged".into(), offset, size, buffer_size: 4096 }
            );
        }
        // A range bound as a storage buffer at an offset off the device's alignment: a typed
        // binding error at submission, nothing recorded, no set cached.
        let alignment = set.device(d(0)).unwrap().limits().min_storage_buffer_offset_alignment;
        assert!(alignment > 1, "lavapipe and the H200 align storage buffer offsets");
        let program = MultiComputeProgram::new(set, both(), "fill.comp", &shaders::FILL, 1).unwrap();
        let view = BufferView::range(&buffer, alignment / 2, 256).unwrap();
        let push: Vec<u8> = [64u32, 1].iter().flat_map(|w| w.to_le_bytes()).collect();
        let fill = DispatchItem::new(&program, vec![MultiBinding::Buffer(view)], &push, [1, 1, 1]);
        let submitter = MultiSubmitter::new(set, both()).unwrap();
        let helper = set.device(d(0)).unwrap().ledger().site_calls(residency_vulkan::FaultSite::QueueSubmit);
        let err = submitter.submit(d(0), &[WorkItem::Dispatch(&fill)]).unwrap_err();
        assert!(matches!(err, WorkError::Binding(_)), "{err}");
        assert_eq!(fill.cached_devices(), 0);
        assert_eq!(
            set.device(d(0)).unwrap().ledger().site_calls(residency_vulkan::FaultSite::QueueSubmit),
            helper,
            "nothing was submitted"
        );
        // Aligned, it runs.
        let aligned = BufferView::range(&buffer, alignment, 256).unwrap();
        let fill = DispatchItem::new(&program, vec![MultiBinding::Buffer(aligned)], &push, [1, 1, 1]);
        let s = submitter.submit(d(1), &[WorkItem::Dispatch(&fill)]).unwrap();
        submitter.wait(d(1), s).unwrap();
        submitter.destroy();
        drop(fill);
        drop(program);
        pool.free_buffer(buffer).unwrap();
    });
}
