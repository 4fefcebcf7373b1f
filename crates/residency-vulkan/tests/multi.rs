//! Multi-device buffers on two logical devices (lavapipe opened twice in CI; two GPUs on the H200 x2).

use residency_core::device_mask::{DeviceIndex, DeviceMask};
use residency_core::format::Format;
use residency_core::tiles::{SparseImageDesc, TexelRegion, TilePoolDesc};
use residency_core::usage::{BufferPoolUsage, BufferUsage};
use residency_vulkan::multi::work::MultiTimeline;
use residency_vulkan::multi::{
    InitialData, MultiBufferPool, MultiDevice, MultiDeviceError, MultiSparseImage, MultiTilePool,
    MultiUploader,
};
use residency_vulkan::testing::with_gpu;
use residency_vulkan::{BufferInit, BufferPoolDesc, FaultSite, InjectedFault, MemoryError, UploadError};

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

#[test]
fn all_mask_means_the_objects_own_mask_on_every_call() {
    with_gpu(|set| {
        let only_1 = d(1).mask();
        let both = DeviceMask::from_bits(0b11);
        let not_subset = |e: &str| assert!(e.contains("is not within"), "{e}");

        // A pool over device 1 only: ALL is device 1, 0b11 names device 0, which it is not on.
        let pool = MultiBufferPool::new(set, only_1, &pool_desc()).unwrap();
        let uploader = MultiUploader::new(set, DeviceMask::ALL, 1 << 20).unwrap();
        let mut buffer = pool.init_buffer(&storage("all mask buffer", 256), DeviceMask::ALL).unwrap();
        assert_eq!(buffer.mask(), only_1);
        pool.set_buffer_mask(&mut buffer, DeviceMask::ALL, InitialData::Undefined, &uploader).unwrap();
        assert_eq!(buffer.mask(), only_1);
        let err = pool.init_buffer(&storage("all mask refused", 256), both).unwrap_err();
        assert!(matches!(err, MultiDeviceError::MaskNotSubset { requested, .. } if requested == both));
        let err = pool.set_buffer_mask(&mut buffer, both, InitialData::Undefined, &uploader).unwrap_err();
        not_subset(&err.to_string());
        assert_eq!(buffer.mask(), only_1, "a refused change changes nothing");
        assert_eq!(pool.total_stats().buffers, 1);

        // Sparse images: ALL is the pools' mask, then the image's.
        let pools =
            MultiTilePool::new(set, only_1, &TilePoolDesc::default().with_tiles_per_heap(16)).unwrap();
        let desc = SparseImageDesc::new_2d(Format::R8G8B8A8Unorm, 1024, 1024);
        let mut image = MultiSparseImage::new(&pools, DeviceMask::ALL, "all mask sparse", &desc).unwrap();
        assert_eq!(image.mask(), only_1);
        let tile = image.instance(d(1)).unwrap().layout().tile_shape();
        let first = TexelRegion { offset: [0; 3], extent: [tile.width, tile.height, 1] };
        image.commit_region(&pools, DeviceMask::ALL, 0, 0, first).unwrap();
        assert_eq!(pools.used_tiles(), vec![(d(1), 1)]);
        // A mask naming device 0, which the image is not on, used to be ignored silently.
        let err = image.commit_region(&pools, both, 0, 0, first).unwrap_err();
        not_subset(&err.to_string());
        let err = image.release_region(&pools, d(0).mask(), 0, 0, first).unwrap_err();
        not_subset(&err.to_string());
        assert_eq!(pools.used_tiles(), vec![(d(1), 1)], "refused calls change nothing");
        assert!(MultiSparseImage::new(&pools, both, "all mask refused", &desc).is_err());
        image.flush_binds(&pools).unwrap();
        image.release_region(&pools, DeviceMask::ALL, 0, 0, first).unwrap();
        assert_eq!(pools.used_tiles(), vec![(d(1), 0)]);
        image.flush_binds(&pools).unwrap();

        // Timelines: ALL is the timeline's mask.
        let timeline = MultiTimeline::new(set, only_1, 0).unwrap();
        timeline.signal(DeviceMask::ALL, 3).unwrap();
        timeline.wait(DeviceMask::ALL, 3, 1_000_000_000).unwrap();
        let err = timeline.signal(both, 4).unwrap_err();
        not_subset(&err.to_string());
        assert!(timeline.wait(both, 3, 0).is_err());
        assert_eq!(timeline.values().unwrap(), vec![(d(1), 3)], "nothing was signalled");

        drop((image, pools, timeline));
        pool.free_buffer(buffer).unwrap();
        uploader.destroy().unwrap();
    });
}

#[test]
fn broadcast_rolls_back_a_refusal_on_any_device_and_a_failed_submit_lands_on_retry() {
    with_gpu(|set| {
        let both = DeviceMask::from_bits(0b11);
        let pool = MultiBufferPool::new(set, both, &pool_desc()).unwrap();
        let uploader = MultiUploader::new(set, both, 1 << 20).unwrap();
        let buffer = pool.init_buffer(&storage("broadcast rollback", 4096), both).unwrap();
        let old = vec![0x11u8; 4096];
        let new = vec![0x22u8; 4096];
        uploader.broadcast(&buffer, 0, &old).unwrap();
        uploader.wait_idle().unwrap();
        let contents = || -> Vec<Vec<u8>> {
            [d(0), d(1)]
                .map(|i| set.device(i).unwrap().read_back(buffer.instance(i).unwrap(), 0, 4096).unwrap())
                .to_vec()
        };

        // An uploader without device 1: refused before device 0 is written (it used to upload to
        // device 0 and then refuse), nothing staged.
        let only_0 = MultiUploader::new(set, d(0).mask(), 1 << 20).unwrap();
        let err = only_0.broadcast(&buffer, 0, &new).unwrap_err();
        assert!(matches!(err, MultiDeviceError::MaskNotSubset { .. }), "{err}");
        only_0.wait_idle().unwrap();
        assert_eq!(contents(), vec![old.clone(), old.clone()], "no device was written");
        assert_eq!(only_0.instance(d(0)).unwrap().staging_in_use(), (0, 0), "nothing staged");

        // A range outside the buffer: refused on every device before anything is staged.
        let err = uploader.broadcast(&buffer, 4000, &new[..200]).unwrap_err();
        assert!(
            matches!(err, MultiDeviceError::Failed { source: UploadError::OutOfBounds { .. }, .. }),
            "{err}"
        );
        for (_, u) in uploader.iter() {
            assert_eq!(u.staging_in_use(), (0, 0), "nothing staged");
        }
        assert_eq!(contents(), vec![old.clone(), old.clone()]);

        // A submit failing on device 1: device 0's copy was submitted (it cannot be withdrawn);
        // device 1's stays queued and lands with the uploader's next flush.
        let d1 = set.device(d(1)).unwrap();
        d1.ledger().inject_fault(FaultSite::QueueSubmit, 0, InjectedFault::OutOfDeviceMemory);
        let err = uploader.broadcast(&buffer, 0, &new).unwrap_err();
        assert!(matches!(err, MultiDeviceError::Failed { device, .. } if device == d(1)), "{err}");
        d1.ledger().clear_faults();
        uploader.wait_idle().unwrap();
        assert_eq!(contents(), vec![new.clone(), new.clone()], "the retry completed the broadcast");

        pool.free_buffer(buffer).unwrap();
        only_0.destroy().unwrap();
        uploader.destroy().unwrap();
    });
}
