//! Device bootstrap on a real Vulkan device (lavapipe in CI).

use residency_core::format::Format;
use residency_core::profile::DeviceProfile;
use residency_vulkan::ash::vk;
use residency_vulkan::testing::{expect_validation_problem, with_gpu};
use std::sync::Arc;

#[test]
fn opens_every_device_with_a_universal_and_a_sparse_queue() {
    with_gpu(|set| {
        assert!(!set.devices().is_empty());
        for (i, device) in set.devices().iter().enumerate() {
            assert_eq!(device.index().get() as usize, i, "indices are 0..N in order");
            let features = device.features();
            let sparse = device.sparse_queue().expect("lavapipe and the H200 can bind sparse memory");
            assert!(features.sparse_binding);
            let profile = device.profile();
            assert_eq!(profile.sparse.queue_family, Some(sparse.family()));
            assert_eq!(
                profile.sparse.separate_queue_family,
                sparse.family() != device.universal_queue().family()
            );
            if !profile.sparse.separate_queue_family && !Arc::ptr_eq(sparse, device.universal_queue()) {
                assert_eq!(sparse.index(), 1, "a second queue of the universal family");
            }
            device.wait_idle().unwrap();
        }
    });
}

#[test]
fn profile_round_trips_through_json() {
    with_gpu(|set| {
        for device in set.devices() {
            let profile = device.profile();
            let json = profile.to_json();
            let back = DeviceProfile::from_json(&json).unwrap();
            assert_eq!(&back, profile);
        }
    });
}

#[test]
fn profile_has_sparse_tile_shapes_and_requirements() {
    with_gpu(|set| {
        let profile = set.devices()[0].profile();
        assert!(profile.sparse.residency_image_2d, "{}", profile.identity.name);
        for format in [
            Format::R8Unorm,
            Format::R8G8Unorm,
            Format::R8G8B8A8Unorm,
            Format::R16G16B16A16Float,
            Format::R32G32B32A32Float,
            Format::Bc1Unorm,
            Format::Bc7Unorm,
        ] {
            let caps = profile.format(format).unwrap_or_else(|| panic!("{format} not probed"));
            let shape = caps.sparse_2d.unwrap_or_else(|| panic!("{format}: no 2D tile shape"));
            let [w, h, d] = shape.tile_extent;
            if profile.sparse.standard_2d_block_shape && !shape.nonstandard_block_size {
                assert_eq!(format.region_bytes(w, h, d), 65536, "{format}: standard 2D tiles are 64 KiB");
            }
            let probe = caps.sparse_2d_probe.unwrap_or_else(|| panic!("{format}: no mip-tail probe"));
            // A first tail LOD equal to the mip count means no mip tail (lavapipe binds every mip by tile).
            assert!(probe.mip_tail_first_lod <= probe.desc.mip_levels);
            assert_eq!(probe.mip_tail_first_lod == probe.desc.mip_levels, probe.mip_tail_size == 0);
            assert!(probe.requirements.alignment >= 65536 || shape.nonstandard_block_size);
            if profile.sparse.residency_image_3d {
                let shape3 = caps.sparse_3d.unwrap_or_else(|| panic!("{format}: no 3D tile shape"));
                let [w, h, d] = shape3.tile_extent;
                if profile.sparse.standard_3d_block_shape && !shape3.nonstandard_block_size {
                    assert_eq!(format.region_bytes(w, h, d), 65536, "{format}: standard 3D tiles are 64 KiB");
                }
            }
            assert!(!caps.image_probes.is_empty(), "{format}: no image requirements");
        }
        assert!(profile.buffer_probes.iter().all(|p| p.requirements.size >= p.size));
    });
}

#[test]
fn validation_canary_catches_a_bad_call() {
    expect_validation_problem("VUID-VkBufferCreateInfo-size-00912", |set| {
        let device = &set.devices()[0];
        // A zero-sized buffer is invalid usage; the layer must report it.
        let info = vk::BufferCreateInfo::default()
            .size(0)
            .usage(vk::BufferUsageFlags::TRANSFER_DST)
            .sharing_mode(vk::SharingMode::EXCLUSIVE);
        // SAFETY: deliberately invalid (size 0) to trigger validation; lavapipe and NVIDIA accept the
        // call, and any buffer created is destroyed at once.
        if let Ok(buffer) = unsafe { device.raw().create_buffer(&info, None) } {
            // SAFETY: the buffer was just created on this device and is unused.
            unsafe { device.raw().destroy_buffer(buffer, None) };
        }
    });
}
