//! Misuse of the safe API is a typed error that changes nothing (issue #15): dispatches over the
//! device's limits, barriers of resources the tracker does not hold, timeline values that do not
//! increase, and image views outside their image. Each test checks the error's variant and
//! numbers and that nothing was recorded, signalled or created; the harness fails a test on any
//! validation message or leaked object.

use residency_core::device_mask::{DeviceIndex, DeviceMask};
use residency_core::format::Format;
use residency_core::memory::MemoryIntent;
use residency_core::sync::{Region, ResourceId, SyncError, TrackerOptions, Use};
use residency_core::usage::{BufferUsage, ImageUsage};
use residency_vulkan::ash::vk;
use residency_vulkan::compute::{Binding, ComputeProgram, DispatchError};
use residency_vulkan::multi::work::{
    BufferView, CopyItem, DispatchItem, MultiBinding, MultiComputeProgram, MultiSubmitter, MultiTimeline,
    TimelineError, WorkError, WorkItem,
};
use residency_vulkan::multi::{MultiBuffer, MultiDevice, MultiDeviceError};
use residency_vulkan::shaders::{self, Shader};
use residency_vulkan::testing::with_gpu;
use residency_vulkan::tracking::{RecordError, ResourceTracker};
use residency_vulkan::{BufferDesc, Device, ImageDesc, VulkanError};

/// `fill.comp`: `values[i] = value + i` for `i < count`; push constants `{ count, value }`.
static FILL: &Shader = &shaders::FILL;
const N: u32 = 256;

fn d(i: u32) -> DeviceIndex {
    DeviceIndex::new(i).unwrap()
}

fn push(count: u32, value: u32) -> Vec<u8> {
    [count, value].iter().flat_map(|v| v.to_le_bytes()).collect()
}

fn words(bytes: &[u8]) -> Vec<u32> {
    bytes.chunks_exact(4).map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect()
}

fn filled(value: u32) -> Vec<u32> {
    (0..N).map(|i| value + i).collect()
}

/// Group counts one past the device's limit on `axis`, 1 elsewhere; `None` when the limit is
/// `u32::MAX` (nothing can exceed it).
fn over_limit(device: &Device, axis: usize) -> Option<([u32; 3], u32)> {
    let limit = device.limits().max_compute_work_group_count[axis];
    let mut groups = [1; 3];
    groups[axis] = limit.checked_add(1)?;
    Some((groups, limit))
}

#[test]
fn misuse_dispatch_over_the_workgroup_limit_is_a_typed_error_and_records_nothing() {
    with_gpu(|set| {
        let device = &set.devices()[0];
        let target = device
            .create_buffer(
                &BufferDesc::new("misuse fill target", u64::from(N) * 4, BufferUsage::STORAGE)
                    .with_intent(MemoryIntent::Readback),
            )
            .unwrap();
        let program = ComputeProgram::new(device, "fill.comp", FILL, 1).unwrap();
        let ds = program.descriptor_set(&[Binding::Buffer(&target)]).unwrap();
        let read = || {
            let mut out = vec![0u8; N as usize * 4];
            target.read(0, &mut out).unwrap();
            words(&out)
        };
        device
            .submit_compute("valid fill", |rec| {
                program.dispatch(rec, &ds, &push(N, 7), [N / 64, 1, 1]).unwrap();
            })
            .unwrap();
        assert_eq!(read(), filled(7));

        let mut axes = 0;
        for axis in 0..3 {
            let Some((groups, limit)) = over_limit(device, axis) else { continue };
            axes += 1;
            let expected = DispatchError::GroupCountOverLimit {
                program: "fill.comp".into(),
                axis,
                requested: limit + 1,
                limit,
            };
            assert_eq!(program.check_dispatch(&push(N, 100), groups), Err(expected.clone()));
            let mut refused = None;
            device
                .submit_compute("refused fill", |rec| {
                    refused = Some(program.dispatch(rec, &ds, &push(N, 100), groups));
                })
                .unwrap();
            assert_eq!(refused, Some(Err(expected)), "axis {axis}");
            assert_eq!(read(), filled(7), "axis {axis}: the refused dispatch wrote nothing");
            // At the limit is allowed (checked, not run: it would be `limit` workgroups).
            let mut at_limit = [1; 3];
            at_limit[axis] = limit;
            assert_eq!(program.check_dispatch(&push(N, 100), at_limit), Ok(()));
        }
        assert!(axes > 0, "some axis has a limit below u32::MAX");
        // Zero workgroups is a valid dispatch that does nothing.
        assert_eq!(program.check_dispatch(&push(N, 100), [0, 1, 1]), Ok(()));

        drop(program);
        drop(target);
    });
}

#[test]
fn misuse_push_constants_longer_than_declared_or_unaligned_are_a_typed_error() {
    with_gpu(|set| {
        let device = &set.devices()[0];
        let program = ComputeProgram::new(device, "fill.comp", FILL, 1).unwrap();
        for given in [12usize, 6] {
            assert_eq!(
                program.check_dispatch(&vec![0; given], [1, 1, 1]),
                Err(DispatchError::PushConstantSize { program: "fill.comp".into(), given, declared: 8 })
            );
        }
        assert_eq!(program.check_dispatch(&[0; 8], [1, 1, 1]), Ok(()));
        drop(program);
    });
}

#[test]
fn misuse_dispatch_over_the_workgroup_limit_through_the_multi_submitter_submits_nothing() {
    with_gpu(|set| {
        let both = DeviceMask::from_bits(0b11);
        let usage = BufferUsage::STORAGE | BufferUsage::COPY_SRC | BufferUsage::COPY_DST;
        let size = u64::from(N) * 4;
        let src = MultiBuffer::create(set, both, &BufferDesc::new("misuse src", size, usage)).unwrap();
        let dst = MultiBuffer::create(set, both, &BufferDesc::new("misuse dst", size, usage)).unwrap();
        let program = MultiComputeProgram::new(set, both, "fill.comp", FILL, 8).unwrap();
        let submitter = MultiSubmitter::new(set, both).unwrap();
        let fill = |buffer: &MultiBuffer, value: u32, device: DeviceIndex| {
            let item = DispatchItem::new(
                &program,
                vec![MultiBinding::Buffer(BufferView::whole(buffer))],
                &push(N, value),
                [N / 64, 1, 1],
            );
            let s = submitter.submit(device, &[WorkItem::Dispatch(&item)]).unwrap();
            submitter.wait(device, s).unwrap();
        };
        let read = |buffer: &MultiBuffer, device: DeviceIndex| {
            let dev = set.device(device).unwrap();
            words(&dev.read_back(buffer.instance(device).unwrap(), 0, size).unwrap())
        };
        for device in [d(0), d(1)] {
            fill(&src, 1, device);
            fill(&dst, 2, device);
            let dev = set.device(device).unwrap();
            let (groups, limit) = over_limit(dev, 0).expect("lavapipe and the H200 limit x below u32::MAX");
            let bad = DispatchItem::new(
                &program,
                vec![MultiBinding::Buffer(BufferView::whole(&dst))],
                &push(N, 100),
                groups,
            );
            let copy = CopyItem {
                src: BufferView::whole(&src),
                dst: BufferView::whole(&dst),
                src_offset: 0,
                dst_offset: 0,
                size,
            };
            // A valid copy before the refused dispatch: neither is submitted.
            let err =
                submitter.submit(device, &[WorkItem::Copy(copy), WorkItem::Dispatch(&bad)]).unwrap_err();
            assert!(
                matches!(
                    &err,
                    WorkError::Dispatch(DispatchError::GroupCountOverLimit { axis: 0, requested, limit: l, .. })
                        if *requested == limit + 1 && *l == limit
                ),
                "{device}: {err}"
            );
            assert_eq!(bad.cached_devices(), 0, "{device}: no descriptor set was made for the refused item");
            assert_eq!(read(&dst, device), filled(2), "{device}: the copy before it was not submitted");
            assert_eq!(read(&src, device), filled(1));
        }
        submitter.destroy();
        drop(program);
        drop((src, dst));
    });
}

/// A tracker record's sync error (any other error fails the test).
fn sync(result: Result<usize, RecordError>) -> Result<usize, SyncError> {
    result.map_err(|e| match e {
        RecordError::Sync(e) => e,
        other => panic!("expected a sync error, got {other:?}"),
    })
}

/// A buffer tracked with a write then a transfer read declared: the second flush has a buffer
/// barrier naming it.
fn tracked_with_barrier(
    device: &Device,
    tracker: &mut ResourceTracker,
    name: &str,
) -> (residency_vulkan::Buffer, ResourceId, residency_core::sync::BarrierBatch) {
    let buffer = device.create_buffer(&BufferDesc::new(name, 1024, BufferUsage::STORAGE)).unwrap();
    let id = tracker.track_buffer(&buffer).unwrap();
    let family = device.universal_queue().family();
    let mut batch = tracker.batch(device.index(), family);
    batch.declare(id, Region::Whole, Use::ComputeStorageWrite).unwrap();
    let _ = batch.flush();
    let mut batch = tracker.batch(device.index(), family);
    batch.declare(id, Region::Whole, Use::ComputeStorageRead).unwrap();
    let flush = batch.flush();
    assert_eq!(flush.barriers.buffers.len(), 1, "{:?}", flush.barriers);
    (buffer, id, flush.barriers)
}

#[test]
fn misuse_tracker_record_of_an_unknown_resource_is_a_typed_error_and_records_nothing() {
    with_gpu(|set| {
        let device = &set.devices()[0];
        let mut tracker = ResourceTracker::new(TrackerOptions::default());
        let (buffer, id, barriers) = tracked_with_barrier(device, &mut tracker, "misuse tracked");
        let unknown = ResourceId::new(u64::MAX - 12345);
        let mut bad = barriers.clone();
        let mut stranger = bad.buffers[0];
        stranger.resource = unknown;
        bad.buffers.push(stranger);
        let tracked_before = tracker.core().len();
        let mut results = Vec::new();
        device
            .submit_once("misuse record", |rec| {
                // The known barrier comes first in the batch; it is not recorded either.
                results.push(sync(tracker.record(rec, &bad)));
            })
            .unwrap();
        set.devices()[1]
            .submit_once("misuse record on device 1", |rec| {
                // Another device's recording: the resource is tracked on device 0 only.
                results.push(sync(tracker.record(rec, &barriers)));
                assert_eq!(rec.helper_commands(), 0, "nothing recorded");
            })
            .unwrap();
        device
            .submit_once("misuse record", |rec| {
                // The batch itself is fine.
                results.push(sync(tracker.record(rec, &barriers)));
            })
            .unwrap();
        assert_eq!(
            results,
            vec![
                Err(SyncError::UnknownResource { device: d(0), resource: unknown }),
                Err(SyncError::UnknownResource { device: d(1), resource: id }),
                Ok(1),
            ]
        );
        assert_eq!(tracker.core().len(), tracked_before, "the tracker is unchanged");
        tracker.untrack(device.index(), id).unwrap();
        drop(buffer);
    });
}

#[test]
fn misuse_tracker_record_of_an_untracked_destroyed_resource_is_a_typed_error() {
    with_gpu(|set| {
        let device = &set.devices()[0];
        let mut tracker = ResourceTracker::new(TrackerOptions::default());
        let (buffer, id, barriers) = tracked_with_barrier(device, &mut tracker, "misuse destroyed");
        tracker.untrack(device.index(), id).unwrap();
        drop(buffer);

        let image = device
            .create_image(&ImageDesc::new_2d(
                "misuse image",
                Format::R8G8B8A8Unorm,
                16,
                16,
                ImageUsage::STORAGE,
            ))
            .unwrap();
        let image_id = tracker.track_image(&image, vk::ImageLayout::UNDEFINED).unwrap();
        let mut batch = tracker.batch(device.index(), device.universal_queue().family());
        batch.declare(image_id, Region::Whole, Use::ComputeStorageWrite).unwrap();
        let image_barriers = batch.flush().barriers;
        assert_eq!(image_barriers.images.len(), 1, "{image_barriers:?}");
        tracker.untrack(device.index(), image_id).unwrap();
        drop(image);

        // A buffer barrier that names the image's id: no buffer of that id is held.
        let mut wrong_kind = barriers.clone();
        wrong_kind.buffers[0].resource = image_id;

        let mut results = Vec::new();
        device
            .submit_once("misuse record destroyed", |rec| {
                results.push(sync(tracker.record(rec, &barriers)));
                results.push(sync(tracker.record(rec, &image_barriers)));
                results.push(sync(tracker.record(rec, &wrong_kind)));
                assert_eq!(rec.helper_commands(), 0, "nothing recorded");
            })
            .unwrap();
        assert_eq!(
            results,
            vec![
                Err(SyncError::UnknownResource { device: d(0), resource: id }),
                Err(SyncError::UnknownResource { device: d(0), resource: image_id }),
                Err(SyncError::UnknownResource { device: d(0), resource: image_id }),
            ]
        );
        assert!(tracker.core().is_empty());
    });
}

fn timeline_error(err: MultiDeviceError<TimelineError>) -> (DeviceIndex, TimelineError) {
    match err {
        MultiDeviceError::Failed { device, source } => (device, source),
        e => panic!("expected a per-device failure, got {e}"),
    }
}

#[test]
fn misuse_decreasing_timeline_signal_is_a_typed_error_and_signals_nothing() {
    with_gpu(|set| {
        let both = DeviceMask::from_bits(0b11);
        let timeline = MultiTimeline::new(set, both, 0).unwrap();
        timeline.signal(both, 5).unwrap();
        let (device, source) = timeline_error(timeline.signal(both, 3).unwrap_err());
        assert_eq!(device, d(0));
        assert!(matches!(source, TimelineError::NotIncreasing { current: 5, requested: 3 }), "{source}");
        assert_eq!(timeline.values().unwrap(), vec![(d(0), 5), (d(1), 5)]);

        // Device 1 ahead: 7 would raise device 0 but not device 1, so neither is signalled.
        timeline.signal(d(1).mask(), 9).unwrap();
        let (device, source) = timeline_error(timeline.signal(both, 7).unwrap_err());
        assert_eq!(device, d(1));
        assert!(matches!(source, TimelineError::NotIncreasing { current: 9, requested: 7 }), "{source}");
        assert_eq!(timeline.values().unwrap(), vec![(d(0), 5), (d(1), 9)], "nothing was signalled");

        timeline.signal(both, 10).unwrap();
        assert_eq!(timeline.values().unwrap(), vec![(d(0), 10), (d(1), 10)]);
        drop(timeline);
    });
}

#[test]
fn misuse_equal_timeline_signal_is_a_typed_error() {
    with_gpu(|set| {
        let both = DeviceMask::from_bits(0b11);
        let timeline = MultiTimeline::new(set, both, 4).unwrap();
        let (device, source) = timeline_error(timeline.signal(d(1).mask(), 4).unwrap_err());
        assert_eq!(device, d(1));
        assert!(matches!(source, TimelineError::NotIncreasing { current: 4, requested: 4 }), "{source}");
        assert_eq!(timeline.values().unwrap(), vec![(d(0), 4), (d(1), 4)]);
        drop(timeline);
    });
}

/// Lavapipe's limit is `u64::MAX` (nothing can be past it: the test then checks that the largest
/// value is accepted); the H200's is far lower.
#[test]
fn misuse_timeline_signal_past_the_value_difference_limit_is_a_typed_error() {
    with_gpu(|set| {
        let device = &set.devices()[0];
        let mut timeline_props = vk::PhysicalDeviceTimelineSemaphoreProperties::default();
        let mut props = vk::PhysicalDeviceProperties2::default().push_next(&mut timeline_props);
        // SAFETY: a pure query of the device's physical device; the output chain is live.
        unsafe { device.instance().get_physical_device_properties2(device.physical(), &mut props) };
        let limit = timeline_props.max_timeline_semaphore_value_difference;
        let timeline = MultiTimeline::new(set, d(0).mask(), 1).unwrap();
        let Some(requested) = limit.checked_add(2) else {
            // No value is more than u64::MAX above another: the check refuses nothing.
            timeline.signal(d(0).mask(), u64::MAX).unwrap();
            assert_eq!(timeline.values().unwrap(), vec![(d(0), u64::MAX)]);
            drop(timeline);
            return;
        };
        let (device, source) = timeline_error(timeline.signal(d(0).mask(), requested).unwrap_err());
        assert_eq!(device, d(0));
        assert!(
            matches!(source, TimelineError::DifferenceTooLarge { current: 1, requested: r, limit: l }
                if r == requested && l == limit),
            "{source}"
        );
        assert_eq!(timeline.values().unwrap(), vec![(d(0), 1)]);
        drop(timeline);
    });
}

fn image_with(device: &Device, name: &str, mips: u32, layers: u32) -> residency_vulkan::Image {
    let mut desc =
        ImageDesc::new_2d(name, Format::R8G8B8A8Unorm, 64, 64, ImageUsage::SAMPLED).with_mip_levels(mips);
    desc.array_layers = layers;
    device.create_image(&desc).unwrap()
}

fn range_error(
    result: Result<residency_vulkan::ImageView, VulkanError>,
) -> (std::ops::Range<u32>, std::ops::Range<u32>, u32, u32) {
    match result {
        Err(VulkanError::SubresourceRange { mips, layers, mip_levels, array_layers, .. }) => {
            (mips, layers, mip_levels, array_layers)
        }
        other => panic!("expected a subresource range error, got {other:?}"),
    }
}

#[test]
#[allow(clippy::reversed_empty_ranges, reason = "reversed ranges are the misuse under test")]
fn misuse_reversed_or_empty_mip_range_is_a_typed_error() {
    with_gpu(|set| {
        let device = &set.devices()[0];
        let image = image_with(device, "misuse mips", 4, 1);
        assert_eq!(range_error(image.create_view(3..1)), (3..1, 0..1, 4, 1));
        assert_eq!(range_error(image.create_view(2..2)), (2..2, 0..1, 4, 1));
        let view = image.create_view(1..4).unwrap();
        drop(view);
        drop(image);
    });
}

#[test]
fn misuse_mip_range_past_the_image_is_a_typed_error() {
    with_gpu(|set| {
        let device = &set.devices()[0];
        let image = image_with(device, "misuse mips past", 3, 2);
        assert_eq!(range_error(image.create_view(2..4)), (2..4, 0..2, 3, 2));
        assert_eq!(range_error(image.create_view(3..4)), (3..4, 0..2, 3, 2));
        assert_eq!(
            range_error(image.create_view_range(u32::MAX - 1..u32::MAX, 0..1)),
            (u32::MAX - 1..u32::MAX, 0..1, 3, 2)
        );
        drop(image);
    });
}

#[test]
#[allow(clippy::reversed_empty_ranges, reason = "reversed ranges are the misuse under test")]
fn misuse_layer_range_past_the_image_is_a_typed_error() {
    with_gpu(|set| {
        let device = &set.devices()[0];
        let image = image_with(device, "misuse layers", 2, 3);
        assert_eq!(range_error(image.create_view_range(0..1, 1..4)), (0..1, 1..4, 2, 3));
        assert_eq!(range_error(image.create_view_range(0..1, 3..4)), (0..1, 3..4, 2, 3));
        assert_eq!(range_error(image.create_view_range(0..1, 2..1)), (0..1, 2..1, 2, 3));
        assert_eq!(range_error(image.create_view_range(0..1, 1..1)), (0..1, 1..1, 2, 3));
        let view = image.create_view_range(0..2, 1..3).unwrap();
        drop(view);
        drop(image);
    });
}

/// A view used to be asked of a device (`Device::create_image_view(&image, …)`), and an image of
/// another device was refused with `WrongDevice`. Views are now made by the image itself
/// (`Image::create_view`): no call can name another device, and the view lives on its image's.
#[test]
fn misuse_image_view_on_another_device_cannot_be_asked_for() {
    with_gpu(|set| {
        let second = &set.devices()[1];
        let image = image_with(second, "misuse other device", 1, 1);
        let view = image.create_view(0..1).unwrap();
        assert_eq!(view.device().index(), second.index(), "the view is on its image's device");
        drop(view);
        drop(image);
    });
}
