//! A renderer's own Vulkan instance and device, adopted: residency places buffers in a pool,
//! uploads, commits and binds sparse tiles and reads them back on the application's device,
//! its messenger sees the validation layer's messages (synchronization validation on, none
//! reported), and dropping the set destroys only what residency made — the application's device
//! and instance are still alive and are destroyed by the application afterwards.

#[path = "common/app.rs"]
mod app;
use app::app;
use ash::vk;
use residency_core::format::Format;
use residency_core::memory::MemoryIntent;
use residency_core::tiles::{SparseImageDesc, TexelRegion, TilePoolDesc};
use residency_core::usage::{BufferPoolUsage, BufferUsage};
use residency_vulkan::sparse::{SparseImage, SparseTilePool};
use residency_vulkan::{
    BufferInit, BufferPool, BufferPoolDesc, DeviceSet, ExternalDevice, ImageRegion, UploadPath, Uploader,
};
use std::sync::Arc;

#[test]
fn an_applications_own_device_is_used_and_left_alive() {
    let Some(app) = app() else { return };
    let external = ExternalDevice {
        physical: app.physical,
        device: app.device.clone(),
        universal_queue: (app.family, 0),
        sparse_queue: app.features.sparse_binding.then_some((app.family, 0)),
        features: app.features,
    };
    // SAFETY: the instance and device above were made as `adopt` requires and outlive the set;
    // this test submits nothing itself while the set lives, and waits for residency's work
    // (every call below waits) before dropping it.
    let set =
        unsafe { DeviceSet::adopt(app.entry.clone(), app.instance.clone(), true, &[external]) }.unwrap();
    let device = Arc::clone(&set.devices()[0]);
    assert_eq!(device.raw().handle(), app.device.handle(), "the application's device");

    // Buffers placed in a pool, written through the staging ring and read back.
    let pool = BufferPool::new(
        Arc::clone(&device),
        BufferPoolDesc::new("adopted pool", BufferPoolUsage::Unknown).with_memory(MemoryIntent::DeviceLocal),
    )
    .unwrap();
    let usage = BufferUsage::STORAGE | BufferUsage::COPY_SRC | BufferUsage::COPY_DST;
    let buffer = pool.init_buffer(&BufferInit::new("adopted buffer", 4096).with_usage(usage)).unwrap();
    let uploader = Uploader::new(&device, "adopted uploads", 1 << 20).unwrap();
    let data: Vec<u8> = (0..4096u32).map(|i| (i * 7 % 251) as u8).collect();
    uploader.write_buffer(&buffer, 0, &data).unwrap();
    uploader.wait_idle().unwrap();
    assert_eq!(device.read_back(&buffer, 0, 4096).unwrap(), data);
    // The application did not enable VK_EXT_external_memory_host: `upload_buffer` stages.
    assert_eq!(device.host_import_alignment(), None);
    let uploader = uploader.with_import_threshold(0);
    let again: Vec<u8> = data.iter().map(|b| b ^ 0x5a).collect();
    assert_eq!(uploader.upload_buffer(&buffer, 0, &again).unwrap(), UploadPath::Staged);
    assert_eq!(device.read_back(&buffer, 0, 4096).unwrap(), again);

    // Sparse tiles, when the device has them: committed, bound, uploaded, read back.
    if app.features.sparse_binding {
        let tiles =
            SparseTilePool::new(Arc::clone(&device), TilePoolDesc::default().with_name("adopted tiles"))
                .unwrap();
        let desc = SparseImageDesc::new_2d(Format::R8G8B8A8Unorm, 1024, 1024);
        let mut image = SparseImage::new(&tiles, "adopted sparse image", &desc, false).unwrap();
        let shape = image.layout().tile_shape();
        let region = TexelRegion { offset: [0, 0, 0], extent: [shape.width, shape.height, 1] };
        image.commit_region(&tiles, 0, 0, region).unwrap();
        tiles.flush_binds(&mut [&mut image]).unwrap();
        let texels: Vec<u8> = (0..shape.width * shape.height * 4).map(|i| (i % 253) as u8).collect();
        let target = ImageRegion::new(&image, 0, [0, 0, 0], region.extent);
        uploader.write_image(&target, &texels).unwrap();
        uploader.wait_idle().unwrap();
        assert_eq!(image.read_region(0, 0, region, 1 << 20).unwrap(), texels);
        drop((image, tiles));
    }

    uploader.destroy().unwrap();
    pool.free_buffer(buffer).unwrap();
    drop(pool);
    let problems = set.validation_log().problem_count();
    assert_eq!(problems, 0, "{:?}", set.validation_log().messages());
    // Residency's messenger on the application's instance hears the layer: a deliberate bad call.
    let info = vk::BufferCreateInfo::default()
        .size(0)
        .usage(vk::BufferUsageFlags::TRANSFER_DST)
        .sharing_mode(vk::SharingMode::EXCLUSIVE);
    // SAFETY: deliberately invalid (size 0) to trigger validation; lavapipe and NVIDIA accept the
    // call, and any buffer created is destroyed at once.
    if let Ok(buffer) = unsafe { app.device.create_buffer(&info, None) } {
        // SAFETY: the buffer was just created on this device and is unused.
        unsafe { app.device.destroy_buffer(buffer, None) };
    }
    if residency_vulkan::testing::gpu_required() {
        let messages = set.validation_log().messages();
        assert!(messages.iter().any(|m| m.id.contains("VUID-VkBufferCreateInfo-size-00912")), "{messages:?}");
    }
    // Dropping the set frees residency's own memory (the general allocator's heaps) and checks
    // that nothing it made is left; it destroys neither the device nor the instance.
    let leaks = residency_vulkan::LEAKS_AT_TEARDOWN.load(std::sync::atomic::Ordering::SeqCst);
    drop(device);
    drop(set);
    assert_eq!(residency_vulkan::LEAKS_AT_TEARDOWN.load(std::sync::atomic::Ordering::SeqCst), leaks);

    // Still the application's: alive, usable, and destroyed by it.
    // SAFETY: the device is valid (residency did not destroy it) and idle; nothing else uses it.
    unsafe {
        app.device.device_wait_idle().unwrap();
        app.device.destroy_device(None);
        app.instance.destroy_instance(None);
    }
}
