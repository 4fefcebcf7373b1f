//! Mapping a multi-device buffer on a subset of its mask (the seed's BufferMapRequest/Response),
//! on two logical devices: writes reach only the chosen devices, reads return each device's
//! bytes (checked against a GPU read-back of each copy), a map waits for GPU work that writes the
//! buffer, and misuse is refused with nothing changed on any device.

use residency_core::device_mask::{DeviceIndex, DeviceMask};
use residency_core::usage::BufferUsage;
use residency_vulkan::ash::vk;
use residency_vulkan::multi::map::{BufferMapRequest, MapError};
use residency_vulkan::multi::work::{
    BufferView, DispatchItem, MultiBinding, MultiComputeProgram, MultiSubmitter, WorkItem,
};
use residency_vulkan::multi::{MultiBuffer, MultiDevice, MultiDeviceError};
use residency_vulkan::shaders;
use residency_vulkan::testing::with_gpu;
use residency_vulkan::{BufferDesc, DeviceSet};

fn d(i: u32) -> DeviceIndex {
    DeviceIndex::new(i).unwrap()
}

const SIZE: u64 = 256;

/// Each device's copy as the GPU sees it (a copy into a read-back buffer).
fn gpu_contents(set: &DeviceSet, buffer: &MultiBuffer) -> Vec<(DeviceIndex, Vec<u8>)> {
    buffer.iter().map(|(i, b)| (i, set.device(i).unwrap().read_back(b, 0, SIZE).unwrap())).collect()
}

#[test]
fn a_map_of_a_subset_of_the_mask_writes_only_the_chosen_devices_and_reads_each_devices_bytes() {
    with_gpu(|set| {
        // Where the copies are not host-visible (the H200's device-local memory), writes stage
        // through the devices' uploaders.
        let uploader =
            residency_vulkan::multi::MultiUploader::new(set, DeviceMask::from_bits(0b11), 1 << 16).unwrap();
        let both = DeviceMask::from_bits(0b11);
        let usage = BufferUsage::STORAGE | BufferUsage::COPY_SRC | BufferUsage::COPY_DST;
        let mut buffer = MultiBuffer::create(set, both, &BufferDesc::new("mapped", SIZE, usage)).unwrap();

        // Different bytes per device, through one write map of the whole mask.
        let mut map =
            buffer.map_write(set, Some(&uploader), &BufferMapRequest::whole(DeviceMask::ALL, SIZE)).unwrap();
        assert_eq!(map.devices(), both);
        map.data_mut(d(0)).unwrap().fill(0x10);
        map.data_mut(d(1)).unwrap().fill(0x20);
        map.unmap().unwrap();
        let read = buffer.map_read(set, &BufferMapRequest::whole(DeviceMask::ALL, SIZE)).unwrap();
        assert_eq!(read.data(d(0)).unwrap(), &[0x10; SIZE as usize][..]);
        assert_eq!(read.data(d(1)).unwrap(), &[0x20; SIZE as usize][..]);

        // A write map of device 1 only, bytes 64..128: device 0 keeps its bytes.
        let request = BufferMapRequest { mask: d(1).mask(), offset: 64, size: 64 };
        let mut map = buffer.map_write(set, Some(&uploader), &request).unwrap();
        assert_eq!(map.devices(), d(1).mask());
        assert!(map.data(d(0)).is_none(), "device 0 is not mapped");
        assert_eq!(map.data(d(1)).unwrap(), &[0x20; 64][..], "the map holds the device's bytes");
        map.data_mut(d(1)).unwrap().copy_from_slice(&[0xab; 64]);
        map.unmap().unwrap();
        let mut one = vec![0x20u8; SIZE as usize];
        one[64..128].fill(0xab);
        let expected = vec![(d(0), vec![0x10u8; SIZE as usize]), (d(1), one.clone())];
        assert_eq!(gpu_contents(set, &buffer), expected, "the GPU sees the write on device 1 only");
        // A read map of a subset returns that device's bytes of the range.
        let read =
            buffer.map_read(set, &BufferMapRequest { mask: d(1).mask(), offset: 60, size: 8 }).unwrap();
        assert_eq!(read.devices(), d(1).mask());
        assert_eq!(read.offset(), 60);
        assert_eq!(read.data(d(1)).unwrap(), &[0x20, 0x20, 0x20, 0x20, 0xab, 0xab, 0xab, 0xab]);
        assert!(read.data(d(0)).is_none());

        // A map waits for GPU work that writes the buffer: a fill on device 0, not waited for.
        let program = MultiComputeProgram::new(set, both, "map fill", &shaders::FILL, 1).unwrap();
        let push: Vec<u8> = [64u32, 1000].iter().flat_map(|w| w.to_le_bytes()).collect();
        let fill = DispatchItem::new(
            &program,
            vec![MultiBinding::Buffer(BufferView::whole(&buffer))],
            &push,
            [1, 1, 1],
        );
        let submitter = MultiSubmitter::new(set, both).unwrap();
        let _in_flight = submitter.submit(d(0), &[WorkItem::Dispatch(&fill)]).unwrap();
        drop(fill);
        let read = buffer.map_read(set, &BufferMapRequest::whole(both, SIZE)).unwrap();
        let words: Vec<u32> = read
            .data(d(0))
            .unwrap()
            .chunks_exact(4)
            .map(|c| u32::from_le_bytes(c.try_into().unwrap()))
            .collect();
        assert_eq!(words, (1000..1064).collect::<Vec<u32>>(), "the fill's words, read after it completed");
        assert_eq!(read.data(d(1)).unwrap(), &one[..], "device 1 untouched");
        submitter.destroy();
        drop(program);
        uploader.destroy().unwrap();
    });
}

#[test]
fn a_map_misused_is_refused_and_changes_nothing_on_any_device() {
    with_gpu(|set| {
        // Where the copies are not host-visible (the H200's device-local memory), writes stage
        // through the devices' uploaders.
        let uploader =
            residency_vulkan::multi::MultiUploader::new(set, DeviceMask::from_bits(0b11), 1 << 16).unwrap();
        let both = DeviceMask::from_bits(0b11);
        let usage = BufferUsage::STORAGE | BufferUsage::COPY_SRC | BufferUsage::COPY_DST;
        let mut buffer = MultiBuffer::create(set, both, &BufferDesc::new("map misuse", SIZE, usage)).unwrap();
        let mut map = buffer.map_write(set, Some(&uploader), &BufferMapRequest::whole(both, SIZE)).unwrap();
        map.data_mut(d(0)).unwrap().fill(1);
        map.data_mut(d(1)).unwrap().fill(2);
        map.unmap().unwrap();
        let before = gpu_contents(set, &buffer);

        // A mask outside the buffer's: a buffer on device 0 only, mapped on device 1 or both.
        let mut only_0 =
            MultiBuffer::create(set, d(0).mask(), &BufferDesc::new("map only 0", SIZE, usage)).unwrap();
        for mask in [d(1).mask(), both] {
            let err =
                only_0.map_write(set, Some(&uploader), &BufferMapRequest::whole(mask, SIZE)).unwrap_err();
            assert!(matches!(err, MultiDeviceError::MaskNotSubset { .. }), "{err}");
            let err = only_0.map_read(set, &BufferMapRequest::whole(mask, SIZE)).unwrap_err();
            assert!(matches!(err, MultiDeviceError::MaskNotSubset { .. }), "{err}");
        }
        // Bits of devices the set does not have are ignored; none left is an empty mask.
        let err =
            buffer.map_read(set, &BufferMapRequest::whole(DeviceMask::from_bits(1 << 30), SIZE)).unwrap_err();
        assert!(matches!(err, MultiDeviceError::EmptyMask(_)), "{err}");
        drop(only_0);

        // A range outside the buffer, an empty one, one that overflows.
        for (offset, size) in [(200, 100), (0, 0), (8, u64::MAX)] {
            let request = BufferMapRequest { mask: both, offset, size };
            let err = buffer.map_write(set, Some(&uploader), &request).unwrap_err();
            assert!(
                matches!(err, MultiDeviceError::Failed { device, source: MapError::Range { .. } } if device == d(0)),
                "{err}"
            );
            assert!(buffer.map_read(set, &request).is_err());
        }

        // A device where the map fails: device 1's copy has a declared use of the renderer's
        // that nothing announced, so waiting for it is refused; device 0 was mapped already,
        // and nothing is written anywhere.
        let d1 = set.device(d(1)).unwrap();
        let gate = d1.create_timeline("map gate").unwrap();
        buffer.instance(d(1)).unwrap().used_until(gate.at(1)).unwrap();
        let err = buffer.map_write(set, Some(&uploader), &BufferMapRequest::whole(both, SIZE)).unwrap_err();
        assert!(
            matches!(err, MultiDeviceError::Failed { device, source: MapError::Vulkan(_) } if device == d(1)),
            "{err}"
        );
        assert!(buffer.map_read(set, &BufferMapRequest::whole(both, SIZE)).is_err());
        // Device 0 alone still maps.
        assert!(buffer.map_read(set, &BufferMapRequest::whole(d(0).mask(), SIZE)).is_ok());
        let info = vk::SemaphoreSignalInfo::default().semaphore(gate.raw()).value(1);
        // SAFETY: a timeline semaphore of device 1, signalled once, upwards.
        unsafe { d1.raw().signal_semaphore(&info) }.unwrap();

        // A write map dropped without unmap writes nothing.
        let mut map = buffer.map_write(set, Some(&uploader), &BufferMapRequest::whole(both, SIZE)).unwrap();
        map.data_mut(d(0)).unwrap().fill(0xee);
        map.data_mut(d(1)).unwrap().fill(0xee);
        drop(map);
        assert_eq!(gpu_contents(set, &buffer), before, "nothing changed on any device");
        drop(buffer);
        d1.maintain();
        uploader.destroy().unwrap();
    });
}

/// Writes `fill` over `range` of the chosen devices' copies through a write map and checks every
/// device's copy against what the GPU sees; returns the expected contents per device.
fn write_and_check(
    set: &DeviceSet,
    buffer: &mut MultiBuffer,
    uploader: Option<&residency_vulkan::multi::MultiUploader>,
    expected: &mut [(DeviceIndex, Vec<u8>)],
    mask: DeviceMask,
    range: std::ops::Range<u64>,
    fill: u8,
) {
    let request = BufferMapRequest { mask, offset: range.start, size: range.end - range.start };
    let mut map = buffer.map_write(set, uploader, &request).unwrap();
    for device in mask.iter() {
        map.data_mut(device).unwrap().fill(fill);
    }
    map.unmap().unwrap();
    for (device, bytes) in expected.iter_mut() {
        if mask.contains(*device) {
            bytes[range.start as usize..range.end as usize].fill(fill);
        }
    }
    let size = buffer.size();
    let gpu: Vec<(DeviceIndex, Vec<u8>)> =
        buffer.iter().map(|(i, b)| (i, set.device(i).unwrap().read_back(b, 0, size).unwrap())).collect();
    assert_eq!(gpu, expected, "the GPU sees the writes on the chosen devices only");
    let read = buffer.map_read(set, &BufferMapRequest::whole(DeviceMask::ALL, size)).unwrap();
    for (device, bytes) in expected.iter() {
        assert_eq!(read.data(*device).unwrap(), &bytes[..], "{device}: the map reads what the GPU sees");
    }
}

/// Device-local copies: mapped where the host can map them (lavapipe, ReBAR), otherwise read
/// through a read-back copy and written through the device's uploader (the H200's device-local
/// memory without ReBAR).
#[test]
fn a_map_of_device_local_copies_reads_and_writes_each_chosen_device() {
    with_gpu(|set| {
        let both = DeviceMask::from_bits(0b11);
        let usage = BufferUsage::STORAGE | BufferUsage::COPY_SRC | BufferUsage::COPY_DST;
        let desc = BufferDesc::new("map device-local", SIZE, usage)
            .with_intent(residency_core::memory::MemoryIntent::DeviceLocal);
        let mut buffer = MultiBuffer::create(set, both, &desc).unwrap();
        let uploader = residency_vulkan::multi::MultiUploader::new(set, both, 1 << 16).unwrap();
        let mappable: Vec<bool> = buffer.iter().map(|(_, b)| b.is_mappable()).collect();
        eprintln!("device-local copies host-mappable: {mappable:?}");
        let mut expected = vec![(d(0), vec![0u8; SIZE as usize]), (d(1), vec![0u8; SIZE as usize])];
        write_and_check(set, &mut buffer, Some(&uploader), &mut expected, both, 0..SIZE, 0);
        write_and_check(set, &mut buffer, Some(&uploader), &mut expected, d(0).mask(), 16..48, 0x5a);
        write_and_check(set, &mut buffer, Some(&uploader), &mut expected, d(1).mask(), 32..200, 0xc3);
        drop(buffer);
        uploader.destroy().unwrap();
    });
}

/// Host-visible copies treated as non-coherent (a test configuration): maps flush and
/// invalidate atom-widened ranges of sizes and offsets that are not atom multiples, with no
/// validation message, and nothing leaks.
#[test]
fn a_map_of_non_coherent_copies_flushes_and_invalidates_on_each_device() {
    let desc = residency_vulkan::testing::test_desc().with_non_coherent_memory(256);
    let Ok(set) = DeviceSet::new(&desc) else {
        assert!(!residency_vulkan::testing::gpu_required(), "a device is required");
        return;
    };
    let both = DeviceMask::from_bits(0b11);
    assert_eq!(set.devices().len(), 2);
    let usage = BufferUsage::STORAGE | BufferUsage::COPY_SRC | BufferUsage::COPY_DST;
    let desc = BufferDesc::new("map non-coherent", SIZE, usage)
        .with_intent(residency_core::memory::MemoryIntent::Upload);
    let mut buffer = MultiBuffer::create(&set, both, &desc).unwrap();
    assert!(buffer.iter().all(|(_, b)| b.is_mappable()));
    let mut expected = vec![(d(0), vec![0u8; SIZE as usize]), (d(1), vec![0u8; SIZE as usize])];
    write_and_check(&set, &mut buffer, None, &mut expected, both, 0..SIZE, 0);
    write_and_check(&set, &mut buffer, None, &mut expected, d(1).mask(), 3..101, 0x77);
    write_and_check(&set, &mut buffer, None, &mut expected, both, 250..256, 0x11);
    let problems = set.validation_log().problem_count();
    let leaks = residency_vulkan::LEAKS_AT_TEARDOWN.load(std::sync::atomic::Ordering::SeqCst);
    drop(buffer);
    set.close().unwrap();
    assert_eq!(problems, 0);
    assert_eq!(
        residency_vulkan::LEAKS_AT_TEARDOWN.load(std::sync::atomic::Ordering::SeqCst),
        leaks,
        "no leaks"
    );
}
