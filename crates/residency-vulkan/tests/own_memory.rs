//! Memory for the renderer's own objects (its `VkBuffer`s and `VkImage`s, raw requirements) and
//! the images `ImageDesc` describes beyond the core's formats: any `VkFormat`, cube maps, mutable
//! formats, concurrent sharing, linear next to optimal tiling.

use residency_core::allocator::ResourceKind;
use residency_core::format::Format;
use residency_core::memory::MemoryIntent;
use residency_core::usage::ImageUsage;
use residency_vulkan::ash::vk;
use residency_vulkan::testing::with_gpu;
use residency_vulkan::{AllocationDesc, BoundTo, Device, ImageDesc, ImageViewDesc, MemoryError};

fn own_buffer(device: &Device, size: u64, usage: vk::BufferUsageFlags) -> vk::Buffer {
    let info = vk::BufferCreateInfo::default().size(size).usage(usage);
    // SAFETY: a plain buffer description on a live device.
    unsafe { device.raw().create_buffer(&info, None) }.unwrap()
}

fn own_image(device: &Device, format: vk::Format, size: u32, usage: vk::ImageUsageFlags) -> vk::Image {
    let info = vk::ImageCreateInfo::default()
        .image_type(vk::ImageType::TYPE_2D)
        .format(format)
        .extent(vk::Extent3D { width: size, height: size, depth: 1 })
        .mip_levels(1)
        .array_layers(1)
        .samples(vk::SampleCountFlags::TYPE_1)
        .tiling(vk::ImageTiling::OPTIMAL)
        .usage(usage)
        .initial_layout(vk::ImageLayout::UNDEFINED);
    // SAFETY: a supported 2D image description on a live device.
    unsafe { device.raw().create_image(&info, None) }.unwrap()
}

fn live(device: &Device, name: &str) -> bool {
    device.ledger().live_objects().iter().any(|o| o.kind == "allocation" && &*o.name == name)
}

#[test]
fn own_buffer_bound_to_residency_memory_is_copied_by_the_gpu() {
    with_gpu(|set| {
        let device = &set.devices()[0];
        let src = own_buffer(device, 4096, vk::BufferUsageFlags::TRANSFER_SRC);
        let dst = own_buffer(device, 4096, vk::BufferUsageFlags::TRANSFER_DST);
        // SAFETY: both buffers are live, unbound buffers of this device, used only by the
        // residency submission below (waited for) and destroyed after their memory is dropped.
        let (src_memory, dst_memory) = unsafe {
            (
                device
                    .allocate_for_buffer(
                        src,
                        &AllocationDesc::new("own src").with_intent(MemoryIntent::Upload),
                    )
                    .unwrap(),
                device
                    .allocate_for_buffer(
                        dst,
                        &AllocationDesc::new("own dst").with_intent(MemoryIntent::Readback),
                    )
                    .unwrap(),
            )
        };
        assert_eq!(src_memory.bound_to(), BoundTo::Buffer(src));
        assert!(live(device, "own src") && live(device, "own dst"), "counted in the ledger by name");
        assert!(src_memory.size() >= 4096);
        let data: Vec<u8> = (0..4096u32).map(|i| (i * 7 % 251) as u8).collect();
        let ptr = src_memory.mapped_ptr().expect("upload memory is mapped");
        // SAFETY: 4096 bytes of the allocation, which no GPU work uses yet.
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), ptr.as_ptr(), data.len()) };
        if !src_memory.is_coherent() {
            let range = vk::MappedMemoryRange::default()
                .memory(src_memory.memory())
                .offset(src_memory.offset())
                .size(vk::WHOLE_SIZE);
            // SAFETY: the allocation's memory is mapped; the range starts at its offset.
            unsafe { device.raw().flush_mapped_memory_ranges(&[range]) }.unwrap();
        }
        device
            .submit_once("own copy", |rec| {
                let region = vk::BufferCopy { src_offset: 0, dst_offset: 0, size: 4096 };
                let to_host = vk::MemoryBarrier2::default()
                    .src_stage_mask(vk::PipelineStageFlags2::COPY)
                    .src_access_mask(vk::AccessFlags2::TRANSFER_WRITE)
                    .dst_stage_mask(vk::PipelineStageFlags2::HOST)
                    .dst_access_mask(vk::AccessFlags2::HOST_READ);
                // SAFETY: the recording is of this device; both buffers are live, bound and at
                // least 4096 bytes; the barrier makes the copy visible to the host read after.
                unsafe {
                    device.raw().cmd_copy_buffer(rec.raw(), src, dst, &[region]);
                    device.raw().cmd_pipeline_barrier2(
                        rec.raw(),
                        &vk::DependencyInfo::default().memory_barriers(std::slice::from_ref(&to_host)),
                    );
                }
            })
            .unwrap();
        if !dst_memory.is_coherent() {
            let range = vk::MappedMemoryRange::default()
                .memory(dst_memory.memory())
                .offset(dst_memory.offset())
                .size(vk::WHOLE_SIZE);
            // SAFETY: as above.
            unsafe { device.raw().invalidate_mapped_memory_ranges(&[range]) }.unwrap();
        }
        let mut back = vec![0u8; 4096];
        let ptr = dst_memory.mapped_ptr().expect("readback memory is mapped");
        // SAFETY: 4096 bytes of the allocation; the copy writing them has completed.
        unsafe { std::ptr::copy_nonoverlapping(ptr.as_ptr(), back.as_mut_ptr(), back.len()) };
        assert_eq!(back, data);
        drop((src_memory, dst_memory));
        // SAFETY: the GPU is done with them (the submission was waited for).
        unsafe {
            device.raw().destroy_buffer(src, None);
            device.raw().destroy_buffer(dst, None);
        }
        assert!(!live(device, "own src"), "freed once the GPU was done");
    });
}

#[test]
fn own_image_gets_dedicated_memory_when_the_driver_prefers_it() {
    with_gpu(|set| {
        let device = &set.devices()[0];
        let usage = vk::ImageUsageFlags::SAMPLED | vk::ImageUsageFlags::TRANSFER_DST;
        let image = own_image(device, vk::Format::R8G8B8A8_UNORM, 256, usage);
        let mut dedicated = vk::MemoryDedicatedRequirements::default();
        let mut out = vk::MemoryRequirements2::default().push_next(&mut dedicated);
        // SAFETY: a live image of this device; the output chain is live.
        unsafe {
            device.raw().get_image_memory_requirements2(
                &vk::ImageMemoryRequirementsInfo2::default().image(image),
                &mut out,
            )
        };
        let (requirements, prefers) = (
            out.memory_requirements,
            dedicated.prefers_dedicated_allocation == vk::TRUE
                || dedicated.requires_dedicated_allocation == vk::TRUE,
        );
        let desc = AllocationDesc::new("own image").with_kind(ResourceKind::Optimal);
        // SAFETY: a live, unbound, optimally tiled image of this device, unused by the GPU,
        // destroyed below after its memory.
        let memory = unsafe { device.allocate_for_image(image, &desc) }.unwrap();
        assert_eq!(memory.bound_to(), BoundTo::Image(image));
        assert_eq!(memory.offset() % requirements.alignment, 0);
        assert_eq!(memory.size(), requirements.size);
        if prefers {
            assert!(memory.is_dedicated(), "the driver prefers a dedicated allocation");
            assert_eq!(memory.offset(), 0);
        }
        // Asked for: dedicated whatever the driver says.
        let second = own_image(device, vk::Format::R8G8B8A8_UNORM, 64, usage);
        // SAFETY: as above.
        let own = unsafe { device.allocate_for_image(second, &desc.clone().dedicated()) }.unwrap();
        assert!(own.is_dedicated() && own.offset() == 0);
        assert_ne!(own.memory(), memory.memory());
        drop((memory, own));
        // SAFETY: never used by the GPU; their memory was dropped.
        unsafe {
            device.raw().destroy_image(image, None);
            device.raw().destroy_image(second, None);
        }
    });
}

#[test]
fn raw_requirements_get_memory_the_renderer_binds_itself() {
    with_gpu(|set| {
        let device = &set.devices()[0];
        let buffer = own_buffer(device, 1000, vk::BufferUsageFlags::STORAGE_BUFFER);
        // SAFETY: a live buffer of this device.
        let requirements = unsafe { device.raw().get_buffer_memory_requirements(buffer) };
        let desc = AllocationDesc::new("raw").with_kind(ResourceKind::Linear).with_alignment(4096);
        let memory = device.allocate_memory(&requirements, &desc).unwrap();
        assert_eq!(memory.bound_to(), BoundTo::Nothing);
        assert_eq!(memory.offset() % 4096, 0, "the floor is kept");
        assert!(live(device, "raw"));
        // SAFETY: the buffer is live and unbound; the range was allocated for its requirements.
        unsafe { device.raw().bind_buffer_memory(buffer, memory.memory(), memory.offset()) }.unwrap();
        let before = device.memory_report();
        assert!(before.memory_types.iter().any(|t| !t.blocks.is_empty()), "placed in a general heap");
        device.free_allocation(memory).unwrap();
        assert!(!live(device, "raw"));
        // SAFETY: never used by the GPU.
        unsafe { device.raw().destroy_buffer(buffer, None) };
    });
}

#[test]
fn cube_map_has_six_layers_and_a_cube_view() {
    with_gpu(|set| {
        let device = &set.devices()[0];
        let desc = ImageDesc::new_2d("sky", Format::R8G8B8A8Unorm, 64, 64, ImageUsage::SAMPLED).cube(1);
        assert_eq!(desc.array_layers, 6);
        let image = device.create_image(&desc).unwrap();
        let view =
            image.create_view_as(&ImageViewDesc::of(&image).with_type(vk::ImageViewType::CUBE)).unwrap();
        assert_eq!(view.view_type(), vk::ImageViewType::CUBE);
        assert_eq!(view.layers(), 0..6);
        let face = image
            .create_view_as(
                &ImageViewDesc { layers: 2..3, ..ImageViewDesc::of(&image) }
                    .with_type(vk::ImageViewType::TYPE_2D),
            )
            .unwrap();
        assert_eq!(face.view_type(), vk::ImageViewType::TYPE_2D);
        drop((view, face, image));
    });
}

#[test]
fn mutable_format_image_is_viewed_as_another_format() {
    with_gpu(|set| {
        let device = &set.devices()[0];
        let formats = [vk::Format::R8G8B8A8_UNORM, vk::Format::R8G8B8A8_SRGB];
        let desc = ImageDesc::new_2d("mutable", Format::R8G8B8A8Unorm, 32, 32, ImageUsage::SAMPLED)
            .mutable_format(&formats);
        let image = device.create_image(&desc).unwrap();
        let srgb =
            image.create_view_as(&ImageViewDesc::of(&image).with_format(vk::Format::R8G8B8A8_SRGB)).unwrap();
        assert_eq!(srgb.vk_format(), vk::Format::R8G8B8A8_SRGB);
        assert_eq!(srgb.format(), Format::R8G8B8A8Srgb);
        // Not in the list: refused, though size-compatible.
        let err =
            image.create_view_as(&ImageViewDesc::of(&image).with_format(vk::Format::R32_UINT)).unwrap_err();
        assert!(err.to_string().contains("format list"), "{err}");
        // Without a list, any compatible format.
        let open = ImageDesc::new_2d("mutable any", Format::R8G8B8A8Unorm, 32, 32, ImageUsage::SAMPLED)
            .mutable_format(&[]);
        let open = device.create_image(&open).unwrap();
        let as_uint =
            open.create_view_as(&ImageViewDesc::of(&open).with_format(vk::Format::R32_UINT)).unwrap();
        assert_eq!(as_uint.vk_format(), vk::Format::R32_UINT);
        drop((srgb, image, as_uint, open));
    });
}

#[test]
fn any_vk_format_is_created_and_viewed() {
    with_gpu(|set| {
        let device = &set.devices()[0];
        // RGBA16 unorm: not one of the core's formats.
        let desc = ImageDesc::new_2d("rgba16", Format::Unknown, 16, 16, ImageUsage::SAMPLED)
            .with_vk_format(vk::Format::R16G16B16A16_UNORM);
        assert_eq!(desc.format, Format::Unknown);
        let image = device.create_image(&desc).unwrap();
        let view = image.create_view(0..1).unwrap();
        assert_eq!(view.vk_format(), vk::Format::R16G16B16A16_UNORM);
        // A format the core knows keeps its core name.
        let known = ImageDesc::new_2d("known", Format::Unknown, 16, 16, ImageUsage::SAMPLED)
            .with_vk_format(vk::Format::R32_SFLOAT);
        assert_eq!(known.format, Format::R32Float);
        drop((view, image));
    });
}

#[test]
fn concurrent_image_is_shared_by_queue_families() {
    with_gpu(|set| {
        let device = &set.devices()[0];
        // SAFETY: a pure query.
        let families =
            unsafe { device.instance().get_physical_device_queue_family_properties(device.physical()) }.len()
                as u32;
        let desc = ImageDesc::new_2d("shared", Format::R8G8B8A8Unorm, 16, 16, ImageUsage::SAMPLED);
        if families >= 2 {
            let image = device.create_image(&desc.clone().concurrent(&[0, 1])).unwrap();
            assert_eq!(image.desc().queue_families, vec![0, 1]);
            drop(image);
        }
        let err = device.create_image(&desc.concurrent(&[0, families])).unwrap_err();
        assert!(err.to_string().contains("does not exist") || err.to_string().contains("distinct"), "{err}");
    });
}

#[test]
fn linear_image_next_to_optimal_images_keeps_off_their_granularity_pages() {
    with_gpu(|set| {
        let device = &set.devices()[0];
        let granularity = device.limits().buffer_image_granularity.max(1);
        let usage = ImageUsage::SAMPLED | ImageUsage::COPY_DST;
        let mut images = Vec::new();
        for i in 0..3 {
            let optimal = ImageDesc::new_2d(format!("optimal {i}"), Format::R8G8B8A8Unorm, 40, 40, usage);
            images.push(device.create_image(&optimal).unwrap());
            let linear = ImageDesc::new_2d(format!("linear {i}"), Format::R8G8B8A8Unorm, 40, 40, usage)
                .linear(MemoryIntent::DeviceLocal);
            images.push(device.create_image(&linear).unwrap());
        }
        // SAFETY: a live buffer of this device, destroyed below; its memory is residency's.
        let buffer = own_buffer(device, 300, vk::BufferUsageFlags::STORAGE_BUFFER);
        // SAFETY: live, unbound, unused by the GPU, destroyed after its memory.
        let buffer_memory =
            unsafe { device.allocate_for_buffer(buffer, &AllocationDesc::new("own linear")) }.unwrap();
        let mut ranges: Vec<(vk::DeviceMemory, u64, u64, bool, String)> = images
            .iter()
            .map(|i| (i.memory().0, i.memory().1, i.size(), i.desc().linear, i.name().to_owned()))
            .collect();
        ranges.push((
            buffer_memory.memory(),
            buffer_memory.offset(),
            buffer_memory.size(),
            true,
            "own".into(),
        ));
        let mut shared = 0;
        for a in &ranges {
            for b in &ranges {
                if a.0 != b.0 || a.3 == b.3 {
                    continue;
                }
                shared += 1;
                let pages = |r: &(vk::DeviceMemory, u64, u64, bool, String)| {
                    (r.1 / granularity, (r.1 + r.2 - 1) / granularity)
                };
                let (pa, pb) = (pages(a), pages(b));
                assert!(pa.1 < pb.0 || pb.1 < pa.0, "{} and {} share a {granularity} B page", a.4, b.4);
            }
        }
        assert!(shared > 0, "linear and optimal resources were placed in one heap");
        drop((images, buffer_memory));
        // SAFETY: never used by the GPU.
        unsafe { device.raw().destroy_buffer(buffer, None) };
    });
}

#[test]
fn misuse_raw_requirements_zero_size_bad_alignment_or_no_type() {
    with_gpu(|set| {
        let device = &set.devices()[0];
        let desc = AllocationDesc::new("bad");
        let r = vk::MemoryRequirements { size: 0, alignment: 16, memory_type_bits: !0 };
        assert!(matches!(device.allocate_memory(&r, &desc), Err(MemoryError::InvalidRequest { .. })));
        let r = vk::MemoryRequirements { size: 64, alignment: 24, memory_type_bits: !0 };
        assert!(matches!(device.allocate_memory(&r, &desc), Err(MemoryError::InvalidRequest { .. })));
        let r = vk::MemoryRequirements { size: 64, alignment: 16, memory_type_bits: !0 };
        let floor = desc.clone().with_alignment(3);
        assert!(matches!(device.allocate_memory(&r, &floor), Err(MemoryError::InvalidRequest { .. })));
        let r = vk::MemoryRequirements { size: 64, alignment: 16, memory_type_bits: 0 };
        assert!(matches!(device.allocate_memory(&r, &desc), Err(MemoryError::NoSuitableMemoryType { .. })));
        assert!(!live(device, "bad"));
    });
}

#[test]
fn misuse_free_allocation_on_another_device_is_refused() {
    with_gpu(|set| {
        let (d0, d1) = (&set.devices()[0], &set.devices()[1]);
        let r = vk::MemoryRequirements { size: 256, alignment: 16, memory_type_bits: !0 };
        let memory = d0.allocate_memory(&r, &AllocationDesc::new("foreign")).unwrap();
        let refused = d1.free_allocation(memory).unwrap_err();
        assert!(refused.to_string().contains("foreign"), "{refused}");
        d0.free_allocation(*refused.resource).unwrap();
    });
}

#[test]
fn misuse_image_format_usage_and_flags_are_refused() {
    with_gpu(|set| {
        let device = &set.devices()[0];
        let refused = |desc: ImageDesc, needle: &str| {
            let err = device.create_image(&desc).unwrap_err();
            assert!(matches!(err, MemoryError::Unsatisfiable { .. }), "{}: {err}", desc.name);
            assert!(err.to_string().contains(needle), "{}: {err}", desc.name);
        };
        // vkGetPhysicalDeviceImageFormatProperties says no: a block format as a render target.
        refused(
            ImageDesc::new_2d("bc1 target", Format::Bc1Unorm, 64, 64, ImageUsage::COLOR_ATTACHMENT),
            "does not support",
        );
        refused(
            ImageDesc::new_2d("not a cube", Format::R8G8B8A8Unorm, 64, 32, ImageUsage::SAMPLED).cube(1),
            "cube",
        );
        refused(
            ImageDesc {
                flags: vk::ImageCreateFlags::ALIAS,
                ..ImageDesc::new_2d("alias", Format::R8Unorm, 8, 8, ImageUsage::SAMPLED)
            },
            "create flags",
        );
        refused(
            ImageDesc {
                view_formats: vec![vk::Format::R8G8B8A8_SRGB],
                ..ImageDesc::new_2d("list", Format::R8G8B8A8Unorm, 8, 8, ImageUsage::SAMPLED)
            },
            "MUTABLE_FORMAT",
        );
        refused(
            ImageDesc::new_2d("incompatible list", Format::R8G8B8A8Unorm, 8, 8, ImageUsage::SAMPLED)
                .mutable_format(&[vk::Format::R16_UINT]),
            "viewable",
        );
        refused(
            ImageDesc::new_2d(
                "unknown copy src",
                Format::Unknown,
                8,
                8,
                ImageUsage::SAMPLED | ImageUsage::COPY_SRC,
            )
            .with_vk_format(vk::Format::R16G16B16A16_UNORM),
            "texel size",
        );
        refused(
            ImageDesc::new_2d("unknown depth", Format::Unknown, 8, 8, ImageUsage::DEPTH_STENCIL_ATTACHMENT)
                .with_vk_format(vk::Format::D32_SFLOAT_S8_UINT),
            "depth/stencil",
        );
        refused(
            ImageDesc {
                format: Format::R8Unorm,
                ..ImageDesc::new_2d("disagree", Format::Unknown, 8, 8, ImageUsage::SAMPLED)
                    .with_vk_format(vk::Format::R32_SFLOAT)
            },
            "disagree",
        );
        refused(
            ImageDesc::new_2d("one family", Format::R8Unorm, 8, 8, ImageUsage::SAMPLED).concurrent(&[0, 0]),
            "distinct",
        );
    });
}

#[test]
fn misuse_views_of_the_wrong_type_or_format_are_refused() {
    with_gpu(|set| {
        let device = &set.devices()[0];
        let plain = ImageDesc::new_2d("plain", Format::R8G8B8A8Unorm, 16, 16, ImageUsage::SAMPLED)
            .with_array_layers(6);
        let image = device.create_image(&plain).unwrap();
        let cube = ImageViewDesc::of(&image).with_type(vk::ImageViewType::CUBE);
        let err = image.create_view_as(&cube).unwrap_err();
        assert!(err.to_string().contains("CUBE"), "{err}");
        let srgb = ImageViewDesc::of(&image).with_format(vk::Format::R8G8B8A8_SRGB);
        let err = image.create_view_as(&srgb).unwrap_err();
        assert!(err.to_string().contains("MUTABLE_FORMAT"), "{err}");
        let sky = ImageDesc::new_2d("sky", Format::R8G8B8A8Unorm, 16, 16, ImageUsage::SAMPLED).cube(1);
        let sky = device.create_image(&sky).unwrap();
        let five =
            ImageViewDesc { layers: 0..5, ..ImageViewDesc::of(&sky) }.with_type(vk::ImageViewType::CUBE);
        assert!(sky.create_view_as(&five).is_err(), "a cube view has six layers");
        drop((image, sky));
    });
}

#[test]
fn an_images_pnext_chain_of_the_callers_is_passed_through() {
    with_gpu(|set| {
        let device = &set.devices()[0];
        // A depth/stencil image whose stencil aspect is used only as an attachment while depth is
        // also sampled: VkImageStencilUsageCreateInfo, chained by the caller.
        let usage = ImageUsage::DEPTH_STENCIL_ATTACHMENT | ImageUsage::SAMPLED;
        let desc = ImageDesc::new_2d("depth stencil", Format::D24UnormS8Uint, 64, 64, usage);
        let stencil = vk::ImageStencilUsageCreateInfo::default()
            .stencil_usage(vk::ImageUsageFlags::DEPTH_STENCIL_ATTACHMENT);
        // SAFETY: one valid structure extending VkImageCreateInfo, alive for the call, for a
        // depth/stencil format the device supports with these usages.
        let image =
            unsafe { device.create_image_with_next(&desc, std::ptr::from_ref(&stencil).cast()) }.unwrap();
        assert_eq!(image.desc().raw_format(), vk::Format::D24_UNORM_S8_UINT);
        assert!(device
            .ledger()
            .live_objects()
            .iter()
            .any(|o| o.kind == "image" && &*o.name == "depth stencil"));
        // After residency's own format list: a mutable image with both.
        let formats = [vk::Format::R8G8B8A8_UNORM, vk::Format::R8G8B8A8_SRGB];
        let mutable =
            ImageDesc::new_2d("mutable chained", Format::R8G8B8A8Unorm, 32, 32, ImageUsage::SAMPLED)
                .mutable_format(&formats);
        let usage_list =
            vk::ImageStencilUsageCreateInfo::default().stencil_usage(vk::ImageUsageFlags::SAMPLED);
        // SAFETY: as above (a colour format ignores the stencil usage); the chain holds no format list.
        let image2 =
            unsafe { device.create_image_with_next(&mutable, std::ptr::from_ref(&usage_list).cast()) }
                .unwrap();
        let srgb = image2
            .create_view_as(&ImageViewDesc::of(&image2).with_format(vk::Format::R8G8B8A8_SRGB))
            .unwrap();
        drop((srgb, image2, image));
    });
}
