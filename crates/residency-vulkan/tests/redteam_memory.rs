//! Red team, memory and resources: safe calls only, against the public API, under the GPU
//! harness (synchronization validation on; a validation message or a leaked object fails the
//! test) and a watchdog. Each test states what a correct library does with the call: a typed
//! error that changes nothing, or a documented safe outcome.
#![forbid(unsafe_code)]
#![allow(clippy::reversed_empty_ranges, reason = "reversed ranges are the point of some scenarios")]

#[path = "common/watchdog.rs"]
mod watchdog;

use residency_core::allocator::ResourceKind;
use residency_core::format::Format;
use residency_core::memory::MemoryIntent;
use residency_core::profile::ImageDimension;
use residency_core::tiles::{
    ImageId, ResidencyChanges, SparseImageDesc, SparseResidency, TexelRegion, TileChange, TileIndex,
    TilePool, TilePoolDesc,
};
use residency_core::usage::{BufferPoolUsage, BufferUsage, ImageUsage};
use residency_vulkan::ash::vk;
use residency_vulkan::sparse::{MinLodMap, SparseError, SparseImage, SparseTilePool, TileHeaps};
use residency_vulkan::testing::with_gpu;
use residency_vulkan::{
    AllocationDesc, BufferDesc, BufferInit, BufferPool, BufferPoolDesc, DefragDesc, Defragmenter, Device,
    ImageDesc, ImageRegion, ImageViewDesc, LinearPool, LinearPoolDesc, MemoryError, PlacementPolicy,
    ReportSources, UploadError, Uploader,
};
use std::sync::Arc;

fn gpu(what: &'static str, body: impl FnOnce(&Arc<Device>) + Send + 'static) {
    watchdog::within(what, move || {
        with_gpu(|set| body(&set.devices()[0]));
    });
}

fn image_2d(name: &str, w: u32, h: u32, usage: ImageUsage) -> ImageDesc {
    ImageDesc::new_2d(name, Format::R8G8B8A8Unorm, w, h, usage)
}

// ---------------------------------------------------------------- images

#[test]
fn rt_image_with_more_mips_than_its_extent_has_is_refused() {
    gpu("mips beyond extent", |device| {
        let desc = image_2d("rt 4x4 with 5 mips", 4, 4, ImageUsage::SAMPLED).with_mip_levels(5);
        let result = device.create_image(&desc);
        assert!(result.is_err(), "4×4 has 3 mips, 5 were accepted: {result:?}");
        let desc = image_2d("rt 4x4 with 3 mips", 4, 4, ImageUsage::SAMPLED).with_mip_levels(3);
        device.create_image(&desc).unwrap();
    });
}

#[test]
fn rt_multisampled_storage_image_without_the_feature_is_refused() {
    gpu("ms storage", |device| {
        let mut desc = image_2d("rt ms storage", 64, 64, ImageUsage::STORAGE | ImageUsage::COLOR_ATTACHMENT);
        desc.samples = 4;
        let _ = device.create_image(&desc);
    });
}

#[test]
fn rt_upload_into_a_multisampled_image_is_refused() {
    gpu("ms upload", |device| {
        let mut desc = image_2d("rt ms dst", 16, 16, ImageUsage::COPY_DST | ImageUsage::COLOR_ATTACHMENT);
        desc.samples = 4;
        let Ok(image) = device.create_image(&desc) else { return };
        device.discard_to_general(&[&image]).unwrap();
        let uploader = Uploader::new(device, "rt ms uploader", 1 << 16).unwrap();
        let region = ImageRegion::new(&image, 0, [0; 3], [16, 16, 1]);
        let result = uploader.write_image(&region, &[7u8; 16 * 16 * 4]);
        assert!(result.is_err(), "a copy into a multisampled image was queued");
        uploader.wait_idle().unwrap();
    });
}

#[test]
fn rt_upload_into_a_depth_stencil_image_is_refused_or_valid() {
    gpu("ds upload", |device| {
        let desc = ImageDesc::new_2d(
            "rt d24s8",
            Format::D24UnormS8Uint,
            16,
            16,
            ImageUsage::COPY_DST | ImageUsage::DEPTH_STENCIL_ATTACHMENT,
        );
        let Ok(image) = device.create_image(&desc) else { return };
        device.discard_to_general(&[&image]).unwrap();
        let uploader = Uploader::new(device, "rt ds uploader", 1 << 16).unwrap();
        let region = ImageRegion::new(&image, 0, [0; 3], [16, 16, 1]);
        let _ = uploader.write_image(&region, &[0u8; 16 * 16 * 4]);
        uploader.wait_idle().unwrap();
    });
}

#[test]
fn rt_upload_with_an_aspect_the_image_lacks_is_refused() {
    gpu("forged aspect", |device| {
        let image = device.create_image(&image_2d("rt colour", 16, 16, ImageUsage::COPY_DST)).unwrap();
        device.discard_to_general(&[&image]).unwrap();
        let uploader = Uploader::new(device, "rt aspect uploader", 1 << 16).unwrap();
        for aspect in [
            vk::ImageAspectFlags::DEPTH,
            vk::ImageAspectFlags::empty(),
            vk::ImageAspectFlags::from_raw(0x7fff_ffff),
            vk::ImageAspectFlags::COLOR | vk::ImageAspectFlags::STENCIL,
        ] {
            let mut region = ImageRegion::new(&image, 0, [0; 3], [16, 16, 1]);
            region.aspect = aspect;
            let result = uploader.write_image(&region, &[1u8; 16 * 16 * 4]);
            assert!(result.is_err(), "aspect {aspect:?} was accepted");
        }
        uploader.wait_idle().unwrap();
    });
}

#[test]
fn rt_extreme_image_descriptions_are_typed_errors() {
    gpu("extreme images", |device| {
        let usage = ImageUsage::SAMPLED;
        let cases = [
            image_2d("rt wide", u32::MAX, 1, usage),
            image_2d("rt tall", 1, u32::MAX, usage),
            image_2d("rt layers", 16, 16, usage).with_array_layers(u32::MAX),
            image_2d("rt mips", 16, 16, usage).with_mip_levels(u32::MAX),
            image_2d("rt cubes", 16, 16, usage).cube(u32::MAX),
            image_2d("rt zero", 0, 16, usage),
            ImageDesc { samples: 0, ..image_2d("rt zero samples", 16, 16, usage) },
            ImageDesc { samples: 3, ..image_2d("rt three samples", 16, 16, usage) },
            ImageDesc { samples: 128, ..image_2d("rt 128 samples", 16, 16, usage) },
            ImageDesc {
                dimension: ImageDimension::D3,
                extent: [16, 16, u32::MAX],
                ..image_2d("rt deep", 16, 16, usage)
            },
            ImageDesc {
                dimension: ImageDimension::D1,
                extent: [16, 2, 1],
                ..image_2d("rt 1d tall", 16, 16, usage)
            },
            image_2d("rt cube not square", 16, 8, usage).cube(1),
            ImageDesc {
                flags: vk::ImageCreateFlags::SPARSE_BINDING,
                ..image_2d("rt sparse flag", 16, 16, usage)
            },
            ImageDesc {
                flags: vk::ImageCreateFlags::from_raw(0x8000_0000),
                ..image_2d("rt raw flag", 16, 16, usage)
            },
            ImageDesc { usage: ImageUsage::NONE, ..image_2d("rt no usage", 16, 16, usage) },
            image_2d("rt linear mips", 16, 16, usage).linear(MemoryIntent::Upload).with_mip_levels(5),
            image_2d("rt linear layers", 16, 16, usage).linear(MemoryIntent::Upload).with_array_layers(4),
            ImageDesc { priority: Some(f32::NAN), ..image_2d("rt nan priority", 16, 16, usage) },
            image_2d("rt bad vk format", 16, 16, usage).with_vk_format(vk::Format::from_raw(0x7fff_0000)),
            image_2d("rt astc", 16, 16, usage).with_vk_format(vk::Format::ASTC_4X4_UNORM_BLOCK),
            image_2d("rt ycbcr", 16, 16, usage).with_vk_format(vk::Format::G8_B8_R8_3PLANE_420_UNORM),
            image_2d("rt concurrent", 16, 16, usage).concurrent(&[0, u32::MAX]),
            image_2d("rt 3d multisampled", 16, 16, usage),
        ];
        for mut desc in cases {
            if desc.name == "rt 3d multisampled" {
                desc.dimension = ImageDimension::D3;
                desc.extent = [16, 16, 4];
                desc.samples = 4;
            }
            let _ = device.create_image(&desc);
        }
    });
}

#[test]
fn rt_cube_3d_and_1d_views_fit_or_are_refused() {
    gpu("odd views", |device| {
        let cube = device
            .create_image(&image_2d("rt cube", 16, 16, ImageUsage::SAMPLED).cube(2).with_mip_levels(5))
            .unwrap();
        let ok = cube.create_view_as(&ImageViewDesc {
            mips: 0..5,
            layers: 3..9,
            view_type: Some(vk::ImageViewType::CUBE),
            format: None,
            aspect: None,
        });
        ok.unwrap();
        for (mips, layers, ty) in [
            (0..5, 0..12, vk::ImageViewType::CUBE_ARRAY),
            (0..5, 0..7, vk::ImageViewType::CUBE),
            (0..5, 0..1, vk::ImageViewType::TYPE_3D),
            (0..5, 0..1, vk::ImageViewType::from_raw(77)),
            (0..6, 0..6, vk::ImageViewType::CUBE),
            (4..4, 0..6, vk::ImageViewType::CUBE),
            (0..1, u32::MAX..0, vk::ImageViewType::TYPE_2D),
        ] {
            let result = cube.create_view_as(&ImageViewDesc {
                mips: mips.clone(),
                layers: layers.clone(),
                view_type: Some(ty),
                format: None,
                aspect: None,
            });
            assert!(result.is_err(), "{mips:?} {layers:?} {ty:?} accepted");
        }
        let volume = ImageDesc {
            dimension: ImageDimension::D3,
            extent: [16, 16, 16],
            ..image_2d("rt volume", 16, 16, ImageUsage::SAMPLED | ImageUsage::COPY_DST | ImageUsage::COPY_SRC)
        }
        .with_mip_levels(5);
        let volume = device.create_image(&volume).unwrap();
        volume.create_view(0..5).unwrap();
        for ty in [vk::ImageViewType::TYPE_2D, vk::ImageViewType::TYPE_2D_ARRAY] {
            let r = volume.create_view_as(&ImageViewDesc {
                mips: 0..1,
                layers: 0..1,
                view_type: Some(ty),
                format: None,
                aspect: None,
            });
            assert!(r.is_err(), "a 2D view of a 3D image without 2D_ARRAY_COMPATIBLE");
        }
        device.discard_to_general(&[&volume]).unwrap();
        let uploader = Uploader::new(device, "rt volume uploader", 1 << 16).unwrap();
        uploader.write_image(&ImageRegion::new(&volume, 4, [0; 3], [1, 1, 1]), &[9, 8, 7, 6]).unwrap();
        let r = uploader.write_image(&ImageRegion::new(&volume, 4, [0, 0, 1], [1, 1, 1]), &[9, 8, 7, 6]);
        assert!(r.is_err(), "z past mip 4's depth of 1");
        let r = uploader.write_image(&ImageRegion::new(&volume, 0, [0; 3], [1, 1, 1]).with_layer(1), &[0; 4]);
        assert!(r.is_err(), "layer 1 of a 3D image");
        uploader.flush().unwrap();
        uploader.wait_idle().unwrap();
        let texels = device.read_image(&volume, vk::ImageLayout::GENERAL).unwrap();
        assert_eq!(texels.len(), 16 * 16 * 16 * 4);
        let line = ImageDesc {
            dimension: ImageDimension::D1,
            extent: [64, 1, 1],
            ..image_2d("rt line", 64, 1, ImageUsage::SAMPLED)
        }
        .with_array_layers(3);
        let line = device.create_image(&line).unwrap();
        let view = line.create_view(0..1).unwrap();
        assert_eq!(view.view_type(), vk::ImageViewType::TYPE_1D_ARRAY);
    });
}

#[test]
fn rt_mutable_format_views_with_odd_formats_are_refused() {
    gpu("mutable views", |device| {
        let desc =
            image_2d("rt mutable", 16, 16, ImageUsage::SAMPLED | ImageUsage::STORAGE).mutable_format(&[]);
        let image = device.create_image(&desc).unwrap();
        for format in [
            vk::Format::UNDEFINED,
            vk::Format::from_raw(0x7fff_0000),
            vk::Format::R8_UNORM,
            vk::Format::D32_SFLOAT,
            vk::Format::BC1_RGBA_UNORM_BLOCK,
        ] {
            let r = image.create_view_as(&ImageViewDesc::of(&image).with_format(format));
            assert!(r.is_err(), "{format:?} accepted");
        }
        // R32_UINT is a same-size format but the core does not know it.
        let _ = image.create_view_as(&ImageViewDesc::of(&image).with_format(vk::Format::R32_SFLOAT));
        let _ = image.create_view_as(&ImageViewDesc::of(&image).with_format(vk::Format::R8G8B8A8_SRGB));
    });
}

// ---------------------------------------------------------------- buffers and allocations

#[test]
fn rt_extreme_buffer_descriptions_are_typed_errors() {
    gpu("extreme buffers", |device| {
        let cases = [
            BufferDesc::new("rt huge align", 16, BufferUsage::STORAGE).with_alignment(1 << 63),
            BufferDesc::new("rt odd align", 16, BufferUsage::STORAGE).with_alignment(3),
            BufferDesc::new("rt max", u64::MAX, BufferUsage::STORAGE),
            BufferDesc::new("rt max-1", u64::MAX - 1, BufferUsage::STORAGE).committed(),
            BufferDesc::new("rt no usage", 16, BufferUsage::NONE),
            BufferDesc::new("rt raw usage", 16, BufferUsage::ALL),
            BufferDesc::new("rt nan", 16, BufferUsage::STORAGE).with_priority(f32::NAN),
            BufferDesc::new("rt inf", 16, BufferUsage::STORAGE).with_priority(f32::INFINITY),
            BufferDesc::new("rt neg zero", 16, BufferUsage::STORAGE).with_priority(-0.0),
            BufferDesc::new("rt as", 256, BufferUsage::ACCELERATION_STRUCTURE_STORAGE),
            BufferDesc::new("rt sbt", 256, BufferUsage::SHADER_BINDING_TABLE),
            BufferDesc::new("rt bda", 256, BufferUsage::DEVICE_ADDRESS | BufferUsage::STORAGE),
        ];
        for desc in cases {
            let _ = device.create_buffer(&desc);
        }
        for align in [1u64 << 20, 1 << 32, 1 << 40] {
            let r = device.create_buffer(
                &BufferDesc::new("rt big align", 16, BufferUsage::STORAGE).with_alignment(align),
            );
            if let Ok(b) = r {
                assert_eq!(b.memory().1 % align, 0, "alignment {align} not honoured");
            }
        }
    });
}

#[test]
fn rt_raw_requirements_with_extreme_values_are_typed_errors() {
    gpu("raw requirements", |device| {
        let cases = [
            (u64::MAX, 1, !0u32),
            (1, 1 << 63, !0),
            (1, 0, 0),
            (1, 1, 1 << 31),
            (0, 1, !0),
            (1, 3, !0),
            (u64::MAX / 2 + 1, 1, !0),
            ((1 << 40) + 1, 1 << 16, !0),
        ];
        for (size, alignment, bits) in cases {
            let req = vk::MemoryRequirements { size, alignment, memory_type_bits: bits };
            for desc in [
                AllocationDesc::new("rt raw"),
                AllocationDesc::new("rt raw dedicated").dedicated(),
                AllocationDesc::new("rt raw upload")
                    .with_intent(MemoryIntent::Upload)
                    .with_kind(ResourceKind::Linear),
                AllocationDesc::new("rt raw align").with_alignment(1 << 62),
            ] {
                let r = device.allocate_memory(&req, &desc);
                if let Ok(a) = &r {
                    assert!(a.offset() % alignment.max(1) == 0);
                    assert!(a.size() == size);
                }
            }
        }
    });
}

#[test]
fn rt_mapped_access_at_extreme_offsets_is_out_of_bounds() {
    gpu("mapped extremes", |device| {
        let mut b = device
            .create_buffer(
                &BufferDesc::new("rt mapped", 64, BufferUsage::STORAGE).with_intent(MemoryIntent::Upload),
            )
            .unwrap();
        for (offset, len) in [(u64::MAX, 1usize), (u64::MAX - 1, 2), (64, 1), (63, 2), (1 << 63, 0)] {
            assert!(b.write(offset, &vec![0; len]).is_err() || len == 0 && offset <= 64);
            let mut out = vec![0; len];
            assert!(b.read(offset, &mut out).is_err() || len == 0 && offset <= 64);
        }
        b.write_with_threads(0, &[5; 64], 0).unwrap();
        b.write_with_threads(0, &[6; 64], usize::MAX).unwrap();
        assert_eq!(b.read_pod::<u8>(0, 64).unwrap(), vec![6; 64]);
        assert!(b.read_pod::<u64>(60, 1).is_err());
    });
}

#[test]
fn rt_legacy_policy_places_without_overlap() {
    gpu("legacy", |device| {
        device.set_placement_policy(PlacementPolicy::Legacy);
        let mut buffers = Vec::new();
        let mut images = Vec::new();
        for i in 0..8u64 {
            buffers.push(
                device
                    .create_buffer(&BufferDesc::new(format!("rt legacy {i}"), 100 + i, BufferUsage::UNIFORM))
                    .unwrap(),
            );
            let mut d = image_2d("rt legacy image", 8, 8, ImageUsage::SAMPLED | ImageUsage::COLOR_ATTACHMENT);
            if i % 2 == 0 {
                d.samples = 4;
            }
            images.push(device.create_image(&d).unwrap());
        }
        device.set_placement_policy(PlacementPolicy::Tight);
        let mut ranges: Vec<(vk::DeviceMemory, u64, u64)> = buffers
            .iter()
            .map(|b| (b.memory().0, b.memory().1, b.size()))
            .chain(images.iter().map(|i| (i.memory().0, i.memory().1, i.size())))
            .collect();
        for b in &buffers {
            assert_eq!(b.memory().1 % (64 << 10), 0);
        }
        ranges.sort_by_key(|r| (vk::Handle::as_raw(r.0), r.1));
        for w in ranges.windows(2) {
            if w[0].0 == w[1].0 {
                assert!(w[0].1 + w[0].2 <= w[1].1, "overlap {w:?}");
            }
        }
    });
}

// ---------------------------------------------------------------- pools

#[test]
fn rt_known_flags_pool_with_flags_the_device_lacks_is_refused_without_vulkan() {
    gpu("pool flags", |device| {
        for usage in [
            BufferUsage::ACCELERATION_STRUCTURE_STORAGE,
            BufferUsage::SHADER_BINDING_TABLE,
            BufferUsage::DEVICE_ADDRESS | BufferUsage::STORAGE,
            BufferUsage::ACCELERATION_STRUCTURE_BUILD_INPUT | BufferUsage::STORAGE,
        ] {
            let pool = BufferPool::new(
                Arc::clone(device),
                BufferPoolDesc::new("rt flags pool", BufferPoolUsage::Known(usage)).with_page_size(1 << 20),
            );
            if let Ok(pool) = pool {
                let _ = pool.init_buffer(&BufferInit::new("rt in flags pool", 256));
                let _ = pool.allocate_range(256, 0);
            }
        }
    });
}

#[test]
fn rt_pool_ranges_and_buffers_with_extreme_values_are_typed_errors() {
    gpu("pool extremes", |device| {
        let known = BufferPool::new(
            Arc::clone(device),
            BufferPoolDesc::new(
                "rt known",
                BufferPoolUsage::Known(BufferUsage::UNIFORM | BufferUsage::STORAGE),
            )
            .with_memory(MemoryIntent::Upload)
            .with_page_size(1 << 20),
        )
        .unwrap();
        for (size, align) in
            [(u64::MAX, 0), (1, 1 << 63), ((1 << 20) + 1, 0), (0, 0), (1, 3), (1 << 20, 1 << 20)]
        {
            let _ = known.allocate_range(size, align);
            let _ = known.init_buffer(&BufferInit::new("rt known buffer", size).with_alignment(align));
        }
        let mut range = known.allocate_range(64, 0).unwrap();
        for (offset, len) in [(u64::MAX, 1usize), (64, 1), (60, 8), (u64::MAX - 3, 4)] {
            assert!(range.write(offset, &vec![1; len]).is_err());
            assert!(range.read(offset, &mut vec![0; len]).is_err());
        }
        range.write(0, &[3; 64]).unwrap();
        let unknown = BufferPool::new(
            Arc::clone(device),
            BufferPoolDesc::new("rt unknown", BufferPoolUsage::Unknown).with_page_size(1 << 20),
        )
        .unwrap();
        for (size, align) in [(u64::MAX, 0), (1, 1 << 63), ((1 << 20) + 1, 0), (1, 1 << 40)] {
            let _ = unknown.init_buffer(
                &BufferInit::new("rt unknown buffer", size)
                    .with_usage(BufferUsage::STORAGE)
                    .with_alignment(align),
            );
        }
        assert!(unknown.allocate_range(16, 0).is_err());
        let weird = BufferPoolDesc {
            page_size: u64::MAX,
            ..BufferPoolDesc::new("rt weird", BufferPoolUsage::Unknown)
        };
        assert!(BufferPool::new(Arc::clone(device), weird).is_err());
        let weird = BufferPoolDesc {
            page_size: 0,
            arenas: 0,
            ..BufferPoolDesc::new("rt zero", BufferPoolUsage::Unknown)
        };
        let p = BufferPool::new(Arc::clone(device), weird).unwrap();
        let _b = p.init_buffer(&BufferInit::new("rt in zero", 16).with_usage(BufferUsage::VERTEX)).unwrap();
        let weird = BufferPoolDesc {
            priority: Some(2.0),
            ..BufferPoolDesc::new("rt prio", BufferPoolUsage::Unknown)
        };
        assert!(BufferPool::new(Arc::clone(device), weird).is_err());
        let _ = ReportSources::new();
    });
}

#[test]
fn rt_linear_pool_with_extreme_values_is_typed_errors() {
    gpu("linear extremes", |device| {
        let pool = LinearPool::new(Arc::clone(device), LinearPoolDesc::new("rt linear", 1 << 16)).unwrap();
        for (size, align, usage) in [
            (u64::MAX, 0, None),
            (1, 1 << 63, Some(BufferUsage::STORAGE)),
            (1 << 16, 0, Some(BufferUsage::STORAGE)),
            ((1 << 16) + 1, 0, Some(BufferUsage::STORAGE)),
            (0, 0, Some(BufferUsage::STORAGE)),
            (16, 0, Some(BufferUsage::ACCELERATION_STRUCTURE_STORAGE)),
            (16, 0, Some(BufferUsage::NONE)),
        ] {
            let mut init = BufferInit::new("rt linear buffer", size).with_alignment(align);
            init.usage = usage;
            let _ = pool.create_buffer(&init);
            let _ = pool.create_buffer_upper(&init);
        }
        pool.check_invariants().unwrap();
        for size in [0, 1, u64::MAX - (1 << 16), u64::MAX] {
            let _ = LinearPool::new(Arc::clone(device), LinearPoolDesc::new("rt linear sized", size));
        }
    });
}

// ---------------------------------------------------------------- uploads and readbacks

#[test]
fn rt_uploader_extremes_are_typed_errors() {
    gpu("uploader extremes", |device| {
        for capacity in [0, 63, u64::MAX, u64::MAX / 2] {
            assert!(Uploader::new(device, "rt ring", capacity).is_err() || capacity == u64::MAX / 2);
        }
        let uploader = Uploader::new(device, "rt odd ring", 67).unwrap();
        let dst = device
            .create_buffer(&BufferDesc::new(
                "rt dst",
                1000,
                BufferUsage::COPY_DST | BufferUsage::COPY_SRC | BufferUsage::STORAGE,
            ))
            .unwrap();
        let data: Vec<u8> = (0..1000u32).map(|i| i as u8).collect();
        uploader.write_buffer(&dst, 0, &data).unwrap();
        for (offset, len) in [(u64::MAX, 1usize), (1000, 1), (999, 2)] {
            assert!(uploader.write_buffer(&dst, offset, &vec![0; len]).is_err());
        }
        uploader.flush().unwrap();
        uploader.wait_idle().unwrap();
        assert_eq!(device.read_back(&dst, 0, 1000).unwrap(), data);
        for (offset, len) in [(u64::MAX, 2u64), (999, 2), (0, u64::MAX), (1000, 0)] {
            let _ = device.read_back(&dst, offset, len);
        }
        let image =
            device.create_image(&image_2d("rt small ring image", 8, 8, ImageUsage::COPY_DST)).unwrap();
        device.discard_to_general(&[&image]).unwrap();
        // 8×8×4 = 256 B > half the ring.
        let r = uploader.write_image(&ImageRegion::new(&image, 0, [0; 3], [8, 8, 1]), &[0; 256]);
        assert!(matches!(r, Err(UploadError::TooLarge { .. })), "{r:?}");
        uploader.write_image(&ImageRegion::new(&image, 0, [0; 3], [2, 2, 1]), &[1; 16]).unwrap();
        let mut transfer = ImageRegion::new(&image, 0, [2, 2, 0], [2, 2, 1]);
        transfer.layout = vk::ImageLayout::TRANSFER_DST_OPTIMAL;
        assert!(uploader.write_image(&transfer, &[1; 16]).is_err(), "image is GENERAL");
        for layout in
            [vk::ImageLayout::UNDEFINED, vk::ImageLayout::PREINITIALIZED, vk::ImageLayout::from_raw(12345)]
        {
            let r = uploader
                .write_image(&ImageRegion::new(&image, 0, [4, 4, 0], [1, 1, 1]).with_layout(layout), &[0; 4]);
            assert!(r.is_err());
        }
        uploader.flush().unwrap();
        uploader.wait_idle().unwrap();
    });
}

#[test]
fn rt_read_image_of_odd_images_is_refused_or_right() {
    gpu("read_image odd", |device| {
        let mut ms = image_2d("rt ms src", 8, 8, ImageUsage::COPY_SRC | ImageUsage::COLOR_ATTACHMENT);
        ms.samples = 4;
        if let Ok(ms) = device.create_image(&ms) {
            device.discard_to_general(&[&ms]).unwrap();
            assert!(device.read_image(&ms, vk::ImageLayout::GENERAL).is_err());
        }
        let ds = ImageDesc::new_2d(
            "rt ds src",
            Format::D24UnormS8Uint,
            8,
            8,
            ImageUsage::COPY_SRC | ImageUsage::DEPTH_STENCIL_ATTACHMENT,
        );
        if let Ok(ds) = device.create_image(&ds) {
            device.discard_to_general(&[&ds]).unwrap();
            assert!(device.read_image(&ds, vk::ImageLayout::GENERAL).is_err());
        }
        let bc = ImageDesc::new_2d(
            "rt bc src",
            Format::Bc1Unorm,
            5,
            5,
            ImageUsage::COPY_SRC | ImageUsage::COPY_DST | ImageUsage::SAMPLED,
        );
        let bc = device.create_image(&bc).unwrap();
        device.discard_to_general(&[&bc]).unwrap();
        let uploader = Uploader::new(device, "rt bc", 1 << 16).unwrap();
        // 5×5 of BC1: 2×2 blocks of 8 B.
        uploader.write_image(&ImageRegion::new(&bc, 0, [0; 3], [5, 5, 1]), &[0xab; 32]).unwrap();
        assert!(uploader.write_image(&ImageRegion::new(&bc, 0, [1, 0, 0], [4, 4, 1]), &[0; 8]).is_err());
        uploader.flush().unwrap();
        uploader.wait_idle().unwrap();
        assert_eq!(device.read_image(&bc, vk::ImageLayout::GENERAL).unwrap(), vec![0xab; 32]);
        for layout in [
            vk::ImageLayout::UNDEFINED,
            vk::ImageLayout::from_raw(999),
            vk::ImageLayout::TRANSFER_SRC_OPTIMAL,
        ] {
            assert!(device.read_image(&bc, layout).is_err());
        }
    });
}

// ---------------------------------------------------------------- defragmentation

#[test]
fn rt_defragmenting_odd_images_is_valid() {
    gpu("defrag odd images", |device| {
        let usage = ImageUsage::COPY_SRC | ImageUsage::COPY_DST | ImageUsage::SAMPLED;
        let mut fillers = Vec::new();
        let mut images = Vec::new();
        for i in 0..6 {
            fillers.push(device.create_image(&image_2d("rt filler", 64, 64, usage)).unwrap());
            let d = match i % 3 {
                0 => ImageDesc::new_2d(
                    "rt ds",
                    Format::D24UnormS8Uint,
                    16,
                    16,
                    usage | ImageUsage::DEPTH_STENCIL_ATTACHMENT,
                ),
                1 => {
                    let mut d = image_2d("rt ms", 16, 16, usage | ImageUsage::COLOR_ATTACHMENT);
                    d.samples = 4;
                    d
                }
                _ => image_2d("rt cube", 16, 16, usage).cube(1).with_mip_levels(5),
            };
            if let Ok(image) = device.create_image(&d) {
                images.push(image);
            }
        }
        let refs: Vec<&residency_vulkan::Image> = images.iter().collect();
        device.discard_to_general(&refs).unwrap();
        drop(fillers);
        let mut defrag = Defragmenter::new(device, DefragDesc::default()).unwrap();
        let mut handles: Vec<&mut residency_vulkan::Image> = images.iter_mut().collect();
        let stats = defrag.pass_with_images(&mut [], &mut handles).unwrap();
        let _ = stats;
        device.wait_idle().unwrap();
    });
}

#[test]
fn rt_defragmenting_buffers_the_gpu_still_reads_and_pinned_ones_is_safe() {
    gpu("defrag in flight", |device| {
        let mut fillers = Vec::new();
        let mut buffers = Vec::new();
        for i in 0..16u64 {
            fillers.push(
                device.create_buffer(&BufferDesc::new("rt filler", 4096, BufferUsage::STORAGE)).unwrap(),
            );
            let mut b = device
                .create_buffer(
                    &BufferDesc::new(
                        format!("rt moved {i}"),
                        4096,
                        BufferUsage::STORAGE | BufferUsage::COPY_SRC | BufferUsage::COPY_DST,
                    )
                    .with_intent(MemoryIntent::Upload),
                )
                .unwrap();
            b.write(0, &[i as u8; 4096]).unwrap();
            if i % 4 == 0 {
                b.set_movable(false);
            }
            buffers.push(b);
        }
        drop(fillers);
        // A read back in flight while the pass runs.
        let uploader = Uploader::new(device, "rt defrag uploader", 1 << 16).unwrap();
        uploader.write_buffer(&buffers[1], 0, &[0xee; 16]).unwrap();
        uploader.flush().unwrap();
        let mut defrag = Defragmenter::new(device, DefragDesc::default()).unwrap();
        let mut handles: Vec<&mut residency_vulkan::Buffer> = buffers.iter_mut().collect();
        defrag.pass(&mut handles).unwrap();
        for (i, b) in buffers.iter().enumerate() {
            let mut out = [0u8; 16];
            b.read(16, &mut out).unwrap();
            assert_eq!(out, [i as u8; 16], "buffer {i} after the pass");
        }
        uploader.wait_idle().unwrap();
        let mut head = [0u8; 16];
        buffers[1].read(0, &mut head).unwrap();
        assert_eq!(head, [0xee; 16], "the upload queued before the pass landed");
        device.release_empty_heaps();
    });
}

// ---------------------------------------------------------------- sparse

fn sparse_desc() -> SparseImageDesc {
    SparseImageDesc::new_2d(Format::R8G8B8A8Unorm, 256, 256)
}

#[test]
fn rt_forged_changes_binding_a_tile_another_image_owns_are_refused() {
    gpu("forged bind", |device| {
        let mut heaps = match TileHeaps::new(Arc::clone(device), "rt forged heaps") {
            Ok(h) => h,
            Err(SparseError::NoSparseQueue) => return,
            Err(e) => panic!("{e}"),
        };
        let mut served =
            TilePool::new(TilePoolDesc::default().with_name("rt forged pool").with_tiles_per_heap(8));
        let a = SparseImage::new_external(&heaps, 65536, ImageId(1), "rt a", &sparse_desc(), false).unwrap();
        let b = SparseImage::new_external(&heaps, 65536, ImageId(2), "rt b", &sparse_desc(), false).unwrap();
        let mut residency_a = SparseResidency::new(served.id(), ImageId(1), a.layout());
        let bound = residency_a.commit(&mut served, &[TileIndex(0)]).unwrap();
        heaps.bind(&served, &[(&a, &bound)], Default::default()).unwrap();
        let stolen = bound.tiles[0].physical;
        let forged = ResidencyChanges {
            tiles: vec![TileChange { tile: TileIndex(3), physical: stolen }],
            tails: vec![],
            heaps_added: vec![],
            pool: served.id(),
        };
        let r = heaps.bind(&served, &[(&b, &forged)], Default::default());
        assert!(r.is_err(), "b was bound to a's tile {stolen:?}");
        // A free tile the pool has not handed out.
        let free = residency_core::tiles::PhysicalTile { heap: stolen.unwrap().heap, tile: 5 };
        let forged = ResidencyChanges {
            tiles: vec![TileChange { tile: TileIndex(3), physical: Some(free) }],
            ..forged
        };
        assert!(heaps.bind(&served, &[(&b, &forged)], Default::default()).is_err(), "b bound to a free tile");
        // A second image claiming a's owner id.
        let twin =
            SparseImage::new_external(&heaps, 65536, ImageId(1), "rt twin of a", &sparse_desc(), false);
        if let Ok(twin) = twin {
            let forged = ResidencyChanges {
                tiles: vec![TileChange { tile: TileIndex(3), physical: stolen }],
                ..forged
            };
            assert!(
                heaps.bind(&served, &[(&twin, &forged)], Default::default()).is_err(),
                "twin bound to a's tile"
            );
        }
        let release = residency_a.release_all(&mut served).unwrap();
        heaps.bind(&served, &[(&a, &release)], Default::default()).unwrap();
    });
}

#[test]
fn rt_min_lod_map_refuses_another_images_table() {
    gpu("min lod other table", |device| {
        let pool = match SparseTilePool::new(
            Arc::clone(device),
            TilePoolDesc::default().with_name("rt min lod pool").with_tiles_per_heap(8),
        ) {
            Ok(p) => p,
            Err(SparseError::NoSparseQueue) => return,
            Err(e) => panic!("{e}"),
        };
        let big = SparseImage::new(
            &pool,
            "rt big",
            &SparseImageDesc::new_2d(Format::R8G8B8A8Unorm, 1024, 1024).with_mip_levels(4),
            false,
        )
        .unwrap();
        let mut small = SparseImage::new(
            &pool,
            "rt small",
            &SparseImageDesc::new_2d(Format::R8G8B8A8Unorm, 256, 256),
            false,
        )
        .unwrap();
        let mut map = MinLodMap::new(&big).unwrap();
        let uploader = Uploader::new(device, "rt min lod uploader", 1 << 16).unwrap();
        let r = map.upload_updates(&uploader, small.residency().page_table(), &[]);
        assert!(
            r.is_err(),
            "a 2×2 table filled a map of {:?}: {r:?}",
            big.residency().page_table().min_lod_extent()
        );
        let r = map.update(&uploader, &mut small);
        assert!(r.is_err(), "another image's entries went into the map: {r:?}");
        uploader.flush().unwrap();
        uploader.wait_idle().unwrap();
    });
}

#[test]
fn rt_sparse_calls_with_out_of_range_values_are_typed_errors() {
    gpu("sparse ranges", |device| {
        let pool = match SparseTilePool::new(
            Arc::clone(device),
            TilePoolDesc::default().with_name("rt range pool").with_tiles_per_heap(8),
        ) {
            Ok(p) => p,
            Err(SparseError::NoSparseQueue) => return,
            Err(e) => panic!("{e}"),
        };
        let desc =
            SparseImageDesc::new_2d(Format::R8G8B8A8Unorm, 512, 512).with_mip_levels(10).with_array_layers(2);
        let mut image = SparseImage::new(&pool, "rt ranges", &desc, false).unwrap();
        let tile = TexelRegion { offset: [0; 3], extent: [128, 128, 1] };
        for (layer, mip, region) in [
            (2, 0, tile),
            (u32::MAX, 0, tile),
            (0, 10, tile),
            (0, u32::MAX, tile),
            (0, 0, TexelRegion { offset: [512, 0, 0], extent: [128, 128, 1] }),
            (0, 0, TexelRegion { offset: [0, 0, 1], extent: [128, 128, 1] }),
            (0, 0, TexelRegion { offset: [0, 0, 0], extent: [0, 0, 0] }),
        ] {
            let committed = image.commit_region(&pool, layer, mip, region);
            assert!(committed.is_err() || region.is_empty(), "{layer} {mip} {region:?}");
            assert!(
                image.read_region(layer, mip, region, u64::MAX).is_err(),
                "read {layer} {mip} {region:?}"
            );
        }
        for tail in [2, u32::MAX] {
            assert!(image.commit_tail(&pool, tail).is_err());
        }
        assert!(image.commit_tiles(&pool, &[TileIndex(u32::MAX)]).is_err());
        assert!(image.release_tiles(&pool, &[TileIndex(u32::MAX)]).is_err());
        let _ = image.commit_tail(&pool, 1);
        let _ = image.commit_tail(&pool, 1);
        image.commit_region(&pool, 1, 0, tile).unwrap();
        image.commit_region(&pool, 1, 0, tile).unwrap();
        pool.flush_binds(&mut [&mut image]).unwrap();
        assert!(image.read_region(1, 0, tile, 10).is_err());
        image.release_all(&pool).unwrap();
        pool.flush_binds(&mut [&mut image]).unwrap();
        pool.trim();
        device.release_empty_heaps();
    });
}

#[test]
fn rt_memory_report_json_of_mixed_sources() {
    gpu("report", |device| {
        let pool = BufferPool::new(
            Arc::clone(device),
            BufferPoolDesc::new("rt report pool", BufferPoolUsage::Unknown),
        )
        .unwrap();
        let b = pool
            .init_buffer(&BufferInit::new("rt \"quoted\" \n name", 64).with_usage(BufferUsage::STORAGE))
            .unwrap();
        let image =
            device.create_image(&image_2d("rt report image\u{0}", 8, 8, ImageUsage::SAMPLED)).unwrap();
        let alloc = device
            .allocate_memory(
                &vk::MemoryRequirements { size: 100, alignment: 1, memory_type_bits: !0 },
                &AllocationDesc::new("rt alloc"),
            )
            .unwrap();
        let sources = ReportSources::new()
            .with_pool(&pool)
            .with_pool(&pool)
            .with_buffer(&b)
            .with_buffer(&b)
            .with_images([&image, &image])
            .with_allocations([&alloc]);
        let report = device.memory_report_with(&sources);
        let json = serde_json::to_string(&report).unwrap();
        let _: serde_json::Value = serde_json::from_str(&json).unwrap();
        let _ = MemoryError::Vulkan(residency_vulkan::VulkanError::DeviceLost { call: "x" });
    });
}

#[test]
fn rt_depth_and_stencil_aspects_upload_one_at_a_time() {
    gpu("ds aspects", |device| {
        let desc = ImageDesc::new_2d(
            "rt d24s8 aspects",
            Format::D24UnormS8Uint,
            16,
            16,
            ImageUsage::COPY_DST | ImageUsage::DEPTH_STENCIL_ATTACHMENT,
        );
        let Ok(image) = device.create_image(&desc) else { return };
        device.discard_to_general(&[&image]).unwrap();
        let uploader = Uploader::new(device, "rt ds aspects uploader", 1 << 16).unwrap();
        let depth = ImageRegion::new(&image, 0, [0; 3], [16, 16, 1]);
        assert_eq!(depth.aspect, vk::ImageAspectFlags::DEPTH);
        uploader.write_image(&depth, &[0u8; 16 * 16 * 4]).unwrap();
        let mut stencil = depth;
        stencil.aspect = vk::ImageAspectFlags::STENCIL;
        assert!(uploader.write_image(&stencil, &[0u8; 16 * 16 * 4]).is_err(), "stencil is 1 B a texel");
        uploader.write_image(&stencil, &[7u8; 16 * 16]).unwrap();
        uploader.flush().unwrap();
        uploader.wait_idle().unwrap();
    });
}

#[test]
fn rt_software_texture_with_another_tables_size_or_slots_outside_the_atlas_is_refused() {
    use residency_core::tiles::{software_layout, HeapIndex, PageTable, PhysicalTile};
    use residency_vulkan::sparse::software::SoftwareTexture;
    gpu("software odd", |device| {
        let small = software_layout(&SparseImageDesc::new_2d(Format::R8G8B8A8Unorm, 256, 256), 4).unwrap();
        let big = software_layout(&SparseImageDesc::new_2d(Format::R8G8B8A8Unorm, 1024, 1024), 4).unwrap();
        let mut texture = SoftwareTexture::new(device, "rt software", &small, 4, 8, 4).unwrap();
        let uploader = Uploader::new(device, "rt software uploader", 1 << 20).unwrap();
        let r = texture.upload_indirection(&uploader, &PageTable::new(&big));
        assert!(r.is_err(), "a 1024² table went into a 256² indirection: {r:?}");
        texture.upload_indirection(&uploader, &PageTable::new(&small)).unwrap();
        let side = texture.atlas_layout().slot_side();
        let bytes = vec![0u8; (side * side * 4) as usize];
        for physical in [
            PhysicalTile { heap: HeapIndex(u32::MAX), tile: u32::MAX },
            PhysicalTile { heap: HeapIndex(1000), tile: 0 },
            PhysicalTile { heap: HeapIndex(0), tile: u32::MAX },
        ] {
            assert!(texture.write_tile(&uploader, physical, &bytes).is_err(), "{physical:?}");
        }
        texture.write_tile(&uploader, PhysicalTile { heap: HeapIndex(1), tile: 3 }, &bytes).unwrap();
        uploader.flush().unwrap();
        uploader.wait_idle().unwrap();
    });
}

#[test]
fn rt_odd_intents_and_tilings_create_or_refuse() {
    gpu("odd intents", |device| {
        for (linear, intent, usage) in [
            (true, MemoryIntent::DeviceLocal, ImageUsage::COLOR_ATTACHMENT | ImageUsage::SAMPLED),
            (
                false,
                MemoryIntent::Readback,
                ImageUsage::COPY_SRC | ImageUsage::COPY_DST | ImageUsage::SAMPLED,
            ),
            (true, MemoryIntent::DeviceLocalHostVisible, ImageUsage::STORAGE),
            (true, MemoryIntent::Upload, ImageUsage::DEPTH_STENCIL_ATTACHMENT),
        ] {
            let mut d = image_2d("rt odd intent", 32, 32, usage);
            d.linear = linear;
            d.intent = intent;
            if let Ok(image) = device.create_image(&d) {
                device.discard_to_general(&[&image]).unwrap();
                let _ = image.create_view(0..1);
            }
        }
        let ds = ImageDesc::new_2d(
            "rt d32 view",
            Format::D32Float,
            8,
            8,
            ImageUsage::SAMPLED | ImageUsage::DEPTH_STENCIL_ATTACHMENT,
        );
        let ds = device.create_image(&ds).unwrap();
        let _ = ds.create_view(0..1).unwrap();
        let heaps = device.heap_budgets();
        assert!(!heaps.is_empty());
    });
}
