//! The memory-and-resources red team's findings (issue #29), each closed at its cause: safe calls
//! that reached Vulkan with values it forbids (a validation message, undefined behaviour in the
//! driver), aborted the process, panicked, or gave a silently wrong result. Each is now a typed
//! error that changes nothing, or a documented safe outcome. The harness fails a test on any
//! validation message or leaked object; a watchdog fails a hang.
#![forbid(unsafe_code)]

#[path = "common/watchdog.rs"]
mod watchdog;

use residency_core::format::Format;
use residency_core::memory::MemoryIntent;
use residency_core::tiles::{
    software_layout, ImageId, IndirectionError, MinLodUpdate, PageTable, ResidencyChanges, SparseImageDesc,
    SparseResidency, TileChange, TileIndex, TilePool, TilePoolDesc, TileRange,
};
use residency_core::usage::{BufferUsage, ImageUsage};
use residency_vulkan::ash::vk;
use residency_vulkan::sparse::software::{SoftwareError, SoftwareTexture};
use residency_vulkan::sparse::{MinLodMap, SparseError, SparseImage, SparseTilePool, TileHeaps};
use residency_vulkan::testing::with_gpu;
use residency_vulkan::{
    AccessError, BufferDesc, Device, ImageDesc, ImageRegion, MemoryError, UploadError, Uploader,
};
use std::sync::Arc;

fn gpu(what: &'static str, body: impl FnOnce(&Arc<Device>) + Send + 'static) {
    watchdog::within(what, move || {
        with_gpu(|set| body(&set.devices()[0]));
    });
}

fn rgba(name: &str, w: u32, h: u32, usage: ImageUsage) -> ImageDesc {
    ImageDesc::new_2d(name, Format::R8G8B8A8Unorm, w, h, usage)
}

fn unsatisfiable<T: std::fmt::Debug>(result: Result<T, MemoryError>, what: &str) {
    assert!(matches!(result, Err(MemoryError::Unsatisfiable { .. })), "{what}: {result:?}");
}

/// `VUID-VkImageCreateInfo-mipLevels-00958`: the mip count was checked against the format's
/// `maxMipLevels` only, not against the chain the extent has.
#[test]
fn misuse_an_image_with_more_mips_than_its_extent_has_is_refused_before_vkcreateimage() {
    gpu("mips beyond the chain", |device| {
        let usage = ImageUsage::SAMPLED;
        unsatisfiable(device.create_image(&rgba("4x4 with 4 mips", 4, 4, usage).with_mip_levels(4)), "4×4");
        let volume = ImageDesc {
            dimension: residency_core::profile::ImageDimension::D3,
            extent: [2, 2, 16],
            ..rgba("2x2x16 with 6 mips", 2, 2, usage)
        };
        unsatisfiable(device.create_image(&volume.clone().with_mip_levels(6)), "2×2×16");
        device.create_image(&rgba("4x4 with 3 mips", 4, 4, usage).with_mip_levels(3)).unwrap();
        device.create_image(&volume.with_mip_levels(5)).unwrap();
    });
}

/// `VUID-VkImageCreateInfo-usage-00968`: residency does not enable
/// `shaderStorageImageMultisample`, and the format query reports the sample counts the device
/// supports, not what was enabled.
#[test]
fn misuse_a_multisampled_storage_image_is_refused_without_the_feature() {
    gpu("multisampled storage", |device| {
        let desc = ImageDesc { samples: 4, ..rgba("ms storage", 16, 16, ImageUsage::STORAGE) };
        unsatisfiable(device.create_image(&desc), "4 samples with STORAGE");
        let desc = ImageDesc { samples: 4, ..rgba("ms colour", 16, 16, ImageUsage::COLOR_ATTACHMENT) };
        device.create_image(&desc).unwrap();
    });
}

/// `VUID-vkGetPhysicalDeviceImageFormatProperties-format-parameter`: a value that is no
/// `VkFormat` reached the driver's format query.
#[test]
fn misuse_an_image_whose_vk_format_is_no_format_is_refused_before_any_query() {
    gpu("no such format", |device| {
        for raw in [0x7fff_0000, 185, 999_999, -1] {
            let desc =
                rgba("not a format", 16, 16, ImageUsage::SAMPLED).with_vk_format(vk::Format::from_raw(raw));
            unsatisfiable(device.create_image(&desc), &format!("format {raw}"));
        }
        // A core format the core crate does not name is still created.
        device
            .create_image(&rgba("r32 sint", 16, 16, ImageUsage::SAMPLED).with_vk_format(vk::Format::R32_SINT))
            .unwrap();
    });
}

/// `VUID-vkCmdCopyBufferToImage-dstImage-07973`: the upload path did not check the sample count
/// its read-back twin (`check_image_to_buffer`) refuses.
#[test]
fn misuse_an_upload_into_a_multisampled_image_is_refused_and_stages_nothing() {
    gpu("multisampled upload", |device| {
        let desc = ImageDesc {
            samples: 4,
            ..rgba("ms dst", 16, 16, ImageUsage::COPY_DST | ImageUsage::COLOR_ATTACHMENT)
        };
        let image = device.create_image(&desc).unwrap();
        device.discard_to_general(&[&image]).unwrap();
        let uploader = Uploader::new(device, "ms uploader", 1 << 16).unwrap();
        let result = uploader.write_image(&ImageRegion::new(&image, 0, [0; 3], [16, 16, 1]), &[7; 1024]);
        assert!(matches!(result, Err(UploadError::Multisampled { samples: 4, .. })), "{result:?}");
        assert_eq!(uploader.staging_in_use(), (0, 0), "nothing staged");
        uploader.wait_idle().unwrap();
    });
}

/// `VUID-VkBufferImageCopy-aspectMask-00212`: a region of a depth/stencil image named both
/// aspects (its format's), and `ImageRegion::aspect`, a public field, was never checked: any
/// aspect (`DEPTH` of a colour image, none, unknown bits) reached `vkCmdCopyBufferToImage`.
#[test]
fn misuse_an_upload_region_copies_exactly_one_aspect_of_its_format() {
    gpu("aspects", |device| {
        let uploader = Uploader::new(device, "aspect uploader", 1 << 16).unwrap();
        let colour = device.create_image(&rgba("colour", 16, 16, ImageUsage::COPY_DST)).unwrap();
        device.discard_to_general(&[&colour]).unwrap();
        for aspect in [
            vk::ImageAspectFlags::DEPTH,
            vk::ImageAspectFlags::empty(),
            vk::ImageAspectFlags::from_raw(0x7fff_ffff),
            vk::ImageAspectFlags::COLOR | vk::ImageAspectFlags::STENCIL,
        ] {
            let region = ImageRegion { aspect, ..ImageRegion::new(&colour, 0, [0; 3], [16, 16, 1]) };
            let result = uploader.write_image(&region, &[1; 1024]);
            assert!(matches!(result, Err(UploadError::Aspect { .. })), "{aspect:?}: {result:?}");
        }
        let desc = ImageDesc::new_2d(
            "depth stencil",
            Format::D24UnormS8Uint,
            16,
            16,
            ImageUsage::COPY_DST | ImageUsage::DEPTH_STENCIL_ATTACHMENT,
        );
        // Lavapipe has D24S8; a device without it has nothing to show here.
        if let Ok(ds) = device.create_image(&desc) {
            device.discard_to_general(&[&ds]).unwrap();
            let depth = ImageRegion::new(&ds, 0, [0; 3], [16, 16, 1]);
            assert_eq!(depth.aspect, vk::ImageAspectFlags::DEPTH, "one aspect by default");
            uploader.write_image(&depth, &[0; 1024]).unwrap();
            let both = ImageRegion { aspect: depth.aspect | vk::ImageAspectFlags::STENCIL, ..depth };
            assert!(matches!(uploader.write_image(&both, &[0; 1024]), Err(UploadError::Aspect { .. })));
            let stencil = ImageRegion { aspect: vk::ImageAspectFlags::STENCIL, ..depth };
            let wrong = uploader.write_image(&stencil, &[0; 1024]);
            assert!(matches!(wrong, Err(UploadError::WrongSize { expected: 256, .. })), "{wrong:?}");
            uploader.write_image(&stencil, &[5; 256]).unwrap();
        }
        uploader.flush().unwrap();
        uploader.wait_idle().unwrap();
    });
}

/// `Buffer::read_pod` allocated `count` values before checking the range: a count from the
/// caller aborted the process (allocation failure) or panicked (capacity overflow).
#[test]
fn misuse_read_pod_of_a_count_past_the_buffer_is_out_of_bounds_not_an_abort() {
    gpu("read_pod", |device| {
        let mut buffer = device
            .create_buffer(
                &BufferDesc::new("pod", 64, BufferUsage::STORAGE).with_intent(MemoryIntent::Upload),
            )
            .unwrap();
        buffer.write_pod(0, &[7u32; 16]).unwrap();
        for (offset, count) in [(0, usize::MAX / 2), (0, usize::MAX), (u64::MAX, 1), (8, 15)] {
            let result = buffer.read_pod::<u32>(offset, count);
            assert!(
                matches!(result, Err(AccessError::OutOfBounds { size: 64, .. })),
                "{offset} {count}: {result:?}"
            );
        }
        assert_eq!(buffer.read_pod::<u32>(8, 14).unwrap(), vec![7; 14]);
    });
}

fn sparse_desc() -> SparseImageDesc {
    SparseImageDesc::new_2d(Format::R8G8B8A8Unorm, 256, 256)
}

/// `TileHeaps::bind` took any change made against its pool: a forged change bound image B to
/// a tile the pool gave image A (or to a free tile the pool could hand out later): two images on
/// one memory, silently (no validation message: aliasing is legal, the texels are not). Now every
/// tile an image is left bound to must be one the pool allocated to its owner, and an owner id
/// has one live image per heaps.
#[test]
fn misuse_tile_heaps_bind_of_a_forged_change_naming_another_owners_tile_is_refused() {
    gpu("forged bind", |device| {
        let mut heaps = match TileHeaps::new(Arc::clone(device), "forged heaps") {
            Err(SparseError::NoSparseQueue) => return,
            heaps => heaps.unwrap(),
        };
        let mut pool = TilePool::new(TilePoolDesc::default().with_name("forged pool").with_tiles_per_heap(8));
        let a = SparseImage::new_external(&heaps, 65536, ImageId(1), "a", &sparse_desc(), false).unwrap();
        let b = SparseImage::new_external(&heaps, 65536, ImageId(2), "b", &sparse_desc(), false).unwrap();
        let mut residency_a = SparseResidency::new(pool.id(), ImageId(1), a.layout());
        let bound = residency_a.commit(&mut pool, &[TileIndex(0)]).unwrap();
        heaps.bind(&pool, &[(&a, &bound)], Default::default()).unwrap();
        let stolen = bound.tiles[0].physical.unwrap();
        let forge = |physical| ResidencyChanges {
            tiles: vec![TileChange { tile: TileIndex(3), physical: Some(physical) }],
            tails: vec![],
            heaps_added: vec![],
            pool: pool.id(),
        };
        let result = heaps.bind(&pool, &[(&b, &forge(stolen))], Default::default());
        assert!(
            matches!(result, Err(SparseError::NotOwner { owner: ImageId(2), held: Some(ImageId(1)), .. })),
            "{result:?}"
        );
        let free = residency_core::tiles::PhysicalTile { tile: 5, ..stolen };
        let result = heaps.bind(&pool, &[(&b, &forge(free))], Default::default());
        assert!(matches!(result, Err(SparseError::NotOwner { held: None, .. })), "{result:?}");
        // A bind then an unbind of the stolen tile in one call leaves b with nothing: accepted.
        let unbind = ResidencyChanges {
            tiles: vec![TileChange { tile: TileIndex(3), physical: None }],
            ..forge(stolen)
        };
        heaps.bind(&pool, &[(&b, &forge(stolen)), (&b, &unbind)], Default::default()).unwrap();
        // A second live image cannot take a's owner id (it would own a's tiles too).
        let twin = SparseImage::new_external(&heaps, 65536, ImageId(1), "twin of a", &sparse_desc(), false);
        assert!(matches!(twin, Err(SparseError::DuplicateOwner { owner: ImageId(1), .. })), "{twin:?}");
        let release = residency_a.release_all(&mut pool).unwrap();
        heaps.bind(&pool, &[(&a, &release)], Default::default()).unwrap();
        drop(a);
        device.wait_submitted().unwrap();
        device.maintain();
        // Once a is destroyed, its id is free.
        let again = SparseImage::new_external(&heaps, 65536, ImageId(1), "a again", &sparse_desc(), false);
        again.unwrap();
    });
}

/// `MinLodMap::upload_updates` documented that a table of another size is refused, but filled
/// part of the map from it (the rest stayed undefined); `MinLodMap::update` took any image; an
/// update naming a layer the table lacks panicked in `PageTable::min_lod_layer`.
#[test]
fn misuse_a_min_lod_map_takes_only_its_own_images_table() {
    gpu("min-LOD map", |device| {
        let pool = match SparseTilePool::new(
            Arc::clone(device),
            TilePoolDesc::default().with_name("min-LOD pool").with_tiles_per_heap(8),
        ) {
            Err(SparseError::NoSparseQueue) => return,
            pool => pool.unwrap(),
        };
        let big_desc = SparseImageDesc::new_2d(Format::R8G8B8A8Unorm, 1024, 1024).with_mip_levels(4);
        let mut big = SparseImage::new(&pool, "big", &big_desc, false).unwrap();
        let mut small = SparseImage::new(&pool, "small", &sparse_desc(), false).unwrap();
        let mut map = MinLodMap::new(&big).unwrap();
        let uploader = Uploader::new(device, "min-LOD uploader", 1 << 16).unwrap();
        let result = map.upload_updates(&uploader, small.residency().page_table(), &[]);
        assert!(matches!(result, Err(SparseError::Incompatible { .. })), "{result:?}");
        let result = map.update(&uploader, &mut small);
        assert!(matches!(result, Err(SparseError::Incompatible { .. })), "{result:?}");
        assert_eq!(uploader.staging_in_use(), (0, 0), "nothing staged");
        assert_eq!(map.update(&uploader, &mut big).unwrap(), 64, "the whole 8×8 map the first time");
        let forged = MinLodUpdate { layer: 9, regions: TileRange { start: [0; 3], end: [1, 1, 1] } };
        let result = map.upload_updates(&uploader, big.residency().page_table(), &[forged]);
        assert!(
            matches!(result, Err(SparseError::Upload(UploadError::RegionOutsideImage { .. }))),
            "{result:?}"
        );
        assert!(big.residency().page_table().min_lod_layer(9).is_empty());
        uploader.flush().unwrap();
        uploader.wait_idle().unwrap();
    });
}

/// The software path's twin: `SoftwareTexture::upload_indirection` recomputed its indirection
/// from a page table of another layout, whose tile indices name other tiles (wrong texels).
#[test]
fn misuse_a_software_indirection_takes_only_a_table_of_its_layout() {
    gpu("software table", |device| {
        let small = software_layout(&sparse_desc(), 4).unwrap();
        let big = software_layout(&SparseImageDesc::new_2d(Format::R8G8B8A8Unorm, 1024, 1024), 4).unwrap();
        let mut texture = SoftwareTexture::new(device, "software", &small, 4, 8, 4).unwrap();
        let uploader = Uploader::new(device, "software uploader", 1 << 20).unwrap();
        let result = texture.upload_indirection(&uploader, &PageTable::new(&big));
        assert!(
            matches!(result, Err(SoftwareError::Indirection(IndirectionError::OtherLayout { .. }))),
            "{result:?}"
        );
        assert_eq!(uploader.staging_in_use(), (0, 0), "nothing staged");
        texture.upload_indirection(&uploader, &PageTable::new(&small)).unwrap();
        uploader.flush().unwrap();
        uploader.wait_idle().unwrap();
    });
}
