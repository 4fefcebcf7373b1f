//! Multi-device buffers on two logical devices (lavapipe opened twice in CI; two GPUs on the H200 x2).

use residency_core::device_mask::{DeviceIndex, DeviceMask};
use residency_core::usage::{BufferPoolUsage, BufferUsage};
use residency_vulkan::multi::{InitialData, MultiBufferPool, MultiDevice, MultiDeviceError, MultiUploader};
use residency_vulkan::testing::with_gpu;
use residency_vulkan::{BufferInit, BufferPoolDesc, MemoryError};

fn d(i: u32) -> DeviceIndex {
    DeviceIndex::new(i).unwrap()
}

fn pool_desc() -> BufferPoolDesc {
    BufferPoolDesc::new("multi", BufferPoolUsage::Unknown).with_page_size(1 << 20)
}

fn storage(name: &str, size: u64) -> BufferInit {
    BufferInit::new(name, size)
        .with_usage(BufferUsage::STORAGE | BufferUsage::COPY_DST | BufferUsage::COPY_SRC)
}

#[test]
fn a_buffer_with_mask_0b11_exists_on_both_devices_with_the_same_data() {
    with_gpu(|set| {
        assert!(set.devices().len() >= 2, "the harness opens at least two devices");
        let mask = DeviceMask::from_bits(0b11);
        let pool = MultiBufferPool::new(set, mask, &pool_desc()).unwrap();
        let uploader = MultiUploader::new(set, mask, 1 << 20).unwrap();
        let buffer = pool.init_buffer(&storage("mesh", 100_000), mask).unwrap();
        assert_eq!(buffer.mask(), mask);
        let data: Vec<u8> = (0..100_000u32).map(|i| (i * 7 % 251) as u8).collect();
        uploader.broadcast(&buffer, 0, &data).unwrap();
        uploader.wait_idle().unwrap();
        for device in set.devices().iter().take(2) {
            let instance = buffer.instance(device.index()).unwrap();
            assert_eq!(instance.device_index(), device.index());
            assert_eq!(device.read_back(instance, 0, data.len() as u64).unwrap(), data, "{}", device.index());
        }
        pool.free_buffer(buffer).unwrap();
        uploader.destroy().unwrap();
    });
}

#[test]
fn mask_changes_add_instances_with_initial_data_and_remove_instances() {
    with_gpu(|set| {
        let both = DeviceMask::from_bits(0b11);
        let pool = MultiBufferPool::new(set, both, &pool_desc()).unwrap();
        let uploader = MultiUploader::new(set, both, 1 << 20).unwrap();
        let mut buffer = pool.init_buffer(&storage("grows", 4096), d(0).mask()).unwrap();
        assert_eq!(buffer.mask(), d(0).mask());
        assert!(buffer.instance(d(1)).is_none());
        let initial = vec![0x5au8; 4096];
        pool.set_buffer_mask(&mut buffer, both, InitialData::Bytes(&initial), &uploader).unwrap();
        assert_eq!(buffer.mask(), both);
        let device1 = set.device(d(1)).unwrap();
        assert_eq!(device1.read_back(buffer.instance(d(1)).unwrap(), 0, 4096).unwrap(), initial);
        let before = pool.stats();
        pool.set_buffer_mask(&mut buffer, d(1).mask(), InitialData::Undefined, &uploader).unwrap();
        assert_eq!(buffer.mask(), d(1).mask());
        let after = pool.stats();
        assert_eq!(after[0].1.buffers + 1, before[0].1.buffers, "device 0's instance was freed");
        let err = pool.set_buffer_mask(
            &mut buffer,
            DeviceMask::from_bits(0b100),
            InitialData::Undefined,
            &uploader,
        );
        if set.devices().len() > 2 {
            assert!(matches!(err, Err(MultiDeviceError::MaskNotSubset { .. })));
        } else {
            // Device 2 does not exist: its bit is ignored, leaving an empty mask.
            assert!(matches!(err, Err(MultiDeviceError::EmptyMask(_))), "{err:?}");
        }
        assert_eq!(buffer.mask(), d(1).mask(), "a refused change changes nothing");
        pool.free_buffer(buffer).unwrap();
        uploader.destroy().unwrap();
    });
}

#[test]
fn a_fan_out_failure_on_device_1_rolls_back_device_0() {
    with_gpu(|set| {
        let both = DeviceMask::from_bits(0b11);
        let pool = MultiBufferPool::new(set, both, &pool_desc()).unwrap();
        let objects: Vec<u64> = set.devices().iter().map(|d| d.ledger().memory_objects()).collect();
        set.device(d(1)).unwrap().ledger().inject_out_of_memory(1);
        let err = pool.init_buffer(&storage("doomed", 4096), both).unwrap_err();
        assert!(
            matches!(err, MultiDeviceError::Failed { device, source: MemoryError::OutOfDeviceMemory { .. } } if device == d(1)),
            "{err}"
        );
        assert!(pool.stats().iter().all(|(_, s)| s.buffers == 0), "device 0's instance was rolled back");
        // Device 0's page is kept for reuse (hysteresis) but holds nothing; device 1 made none.
        assert_eq!(set.device(d(1)).unwrap().ledger().memory_objects(), objects[1]);
        let ok = pool.init_buffer(&storage("fine", 4096), both).unwrap();
        pool.free_buffer(ok).unwrap();
    });
}

#[test]
fn per_device_statistics_sum_to_the_totals() {
    with_gpu(|set| {
        let all = DeviceMask::ALL;
        let pool = MultiBufferPool::new(set, all, &pool_desc()).unwrap();
        assert_eq!(pool.mask(), set.mask(), "ALL means every open device");
        let a = pool.init_buffer(&storage("a", 1000), all).unwrap();
        let b = pool.init_buffer(&storage("b", 3000), d(0).mask()).unwrap();
        let per = pool.stats();
        let total = pool.total_stats();
        assert_eq!(per.iter().map(|(_, s)| s.buffers).sum::<u64>(), total.buffers);
        assert_eq!(per.iter().map(|(_, s)| s.used_bytes).sum::<u64>(), total.used_bytes);
        assert_eq!(per.iter().map(|(_, s)| s.page_bytes).sum::<u64>(), total.page_bytes);
        assert_eq!(total.buffers, set.devices().len() as u64 + 1);
        pool.free_buffer(a).unwrap();
        pool.free_buffer(b).unwrap();
        assert_eq!(pool.total_stats().buffers, 0);
    });
}
