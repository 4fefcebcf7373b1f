//! Bindless arrays of multi-device images in work items, on two logical devices: sampled by
//! index on both devices as on one, and arrays over the binding or the device refused.

use residency_vulkan::ash::vk;
use residency_vulkan::compute::{Binding, BindingError, BindingKind, ComputeProgram, ProgramError, ViewRef};
use residency_vulkan::multi::bindless::{MultiSampled, MultiSampler};
use residency_vulkan::multi::work::{
    BufferView, DispatchItem, MultiBinding, MultiComputeProgram, MultiSubmitter, WorkError, WorkItem,
};
use residency_vulkan::multi::{MultiBufferPool, MultiDevice, MultiDeviceError, MultiImage, MultiUploader};
use residency_vulkan::shaders;
use residency_vulkan::testing::with_gpu;
use residency_vulkan::{
    BufferDesc, BufferInit, BufferPoolDesc, BufferPoolUsage, BufferUsage, DeviceIndex, DeviceMask, Filter,
    Format, ImageDesc, ImageRegion, ImageUsage, MemoryIntent,
};

fn d(i: u32) -> DeviceIndex {
    DeviceIndex::new(i).unwrap()
}

fn words(values: &[u32]) -> Vec<u8> {
    values.iter().flat_map(|v| v.to_le_bytes()).collect()
}

/// The colour of texture `k`.
fn color(k: usize) -> [u8; 4] {
    [40 * k as u8, 255 - 40 * k as u8, 7 * k as u8 + 3, 255]
}

/// `n` 4×4 textures on both devices, texture `k` all `color(k)`, in `GENERAL`.
fn textures(set: &residency_vulkan::DeviceSet, uploader: &MultiUploader, n: usize) -> Vec<MultiImage> {
    let both = DeviceMask::from_bits(0b11);
    (0..n)
        .map(|k| {
            let desc = ImageDesc::new_2d(
                format!("bindless texture {k}"),
                Format::R8G8B8A8Unorm,
                4,
                4,
                ImageUsage::SAMPLED | ImageUsage::COPY_DST,
            );
            let image = MultiImage::create(set, both, &desc).unwrap();
            let texels: Vec<u8> = (0..16).flat_map(|_| color(k)).collect();
            for (index, instance) in image.iter() {
                set.device(index).unwrap().discard_to_general(&[instance]).unwrap();
                let up = uploader.instance(index).unwrap();
                up.write_image(&ImageRegion::new(instance, 0, [0; 3], [4, 4, 1]), &texels).unwrap();
                up.wait_idle().unwrap();
            }
            image
        })
        .collect()
}

const INVOCATIONS: u32 = 12;

#[test]
fn bindless_array_of_multi_device_images_is_sampled_by_index_on_both_devices_as_on_one() {
    with_gpu(|set| {
        let both = DeviceMask::from_bits(0b11);
        for device in set.devices() {
            assert!(device.features().descriptor_indexing, "{}: descriptor indexing", device.name());
        }
        let uploader = MultiUploader::new(set, both, 1 << 20).unwrap();
        let images = textures(set, &uploader, 5);
        let sampler = MultiSampler::new(set, both, Filter::Nearest).unwrap();
        let pool = MultiBufferPool::new(
            set,
            both,
            &BufferPoolDesc::new("bindless", BufferPoolUsage::Unknown).with_page_size(1 << 20),
        )
        .unwrap();
        let bytes = u64::from(INVOCATIONS) * 4;
        let out = pool
            .init_buffer(
                &BufferInit::new("bindless texels", bytes)
                    .with_usage(BufferUsage::STORAGE | BufferUsage::COPY_SRC | BufferUsage::COPY_DST),
                both,
            )
            .unwrap();
        let program =
            MultiComputeProgram::new(set, both, "bindless_sample.comp", &shaders::BINDLESS_SAMPLE, 4)
                .unwrap();
        assert_eq!(program.bindings()[1], BindingKind::BindlessSampledImages(64));
        let general = vk::ImageLayout::GENERAL;
        let array = MultiSampled::array(images.iter().collect(), 0..1, &sampler, general);
        // Invocation i samples texture i, clamped below the count pushed: 5 bound, then 64 (past
        // the 5 views, whose descriptors repeat the last view).
        let items: Vec<_> = [5u32, 64]
            .iter()
            .map(|&bound| {
                DispatchItem::new(
                    &program,
                    vec![MultiBinding::Buffer(BufferView::whole(&out)), MultiBinding::Sampled(array.clone())],
                    &words(&[INVOCATIONS, bound]),
                    [1, 1, 1],
                )
            })
            .collect();
        let expected: Vec<u8> = (0..INVOCATIONS as usize).flat_map(|i| color(i.min(4))).collect();
        let submitter = MultiSubmitter::new(set, both).unwrap();
        for item in &items {
            for device in [d(1), d(0)] {
                uploader.broadcast(&out, 0, &vec![0; bytes as usize]).unwrap();
                uploader.wait_idle().unwrap();
                let submission = submitter.submit(device, &[WorkItem::Dispatch(item)]).unwrap();
                submitter.wait(device, submission).unwrap();
                let dev = set.device(device).unwrap();
                let got = dev.read_back(out.instance(device).unwrap(), 0, bytes).unwrap();
                assert_eq!(got, expected, "{device}");
            }
            assert_eq!(item.cached_devices(), 2, "a descriptor set per device");
        }

        // The single-device run: the same shader on device 0 alone, each device's own views.
        let device = set.device(d(0)).unwrap();
        let single = ComputeProgram::new(device, "single bindless", &shaders::BINDLESS_SAMPLE, 1).unwrap();
        let views: Vec<_> = images.iter().map(|image| image.view(set, d(0), 0..1).unwrap()).collect();
        let refs: Vec<ViewRef<'_>> = views.iter().map(|v| ViewRef::View(v)).collect();
        let own_sampler = device.create_sampler(Filter::Nearest).unwrap();
        let mut target = device
            .create_buffer(
                &BufferDesc::new(
                    "single bindless texels",
                    bytes,
                    BufferUsage::STORAGE | BufferUsage::COPY_SRC,
                )
                .with_intent(MemoryIntent::Readback),
            )
            .unwrap();
        target.write(0, &vec![0; bytes as usize]).unwrap();
        let descriptors = single
            .descriptor_set(&[
                Binding::Buffer(&target),
                Binding::SampledArray { views: &refs, sampler: &own_sampler, layout: general },
            ])
            .unwrap();
        device
            .submit_compute("single bindless", |rec| {
                single.dispatch(rec, &descriptors, &words(&[INVOCATIONS, 5]), [1, 1, 1]).unwrap()
            })
            .unwrap();
        device.wait_submitted().unwrap();
        assert_eq!(device.read_back(&target, 0, bytes).unwrap(), expected, "the single-device run");

        submitter.destroy();
        drop((items, array, descriptors, single, views, own_sampler, target));
        drop((images, sampler, program));
        pool.free_buffer(out).unwrap();
        uploader.destroy().unwrap();
    });
}

#[test]
fn bindless_arrays_over_the_binding_or_the_device_limits_are_refused() {
    with_gpu(|set| {
        let both = DeviceMask::from_bits(0b11);
        let uploader = MultiUploader::new(set, both, 1 << 20).unwrap();
        let images = textures(set, &uploader, 1);
        let sampler = MultiSampler::new(set, both, Filter::Nearest).unwrap();
        let pool = MultiBufferPool::new(
            set,
            both,
            &BufferPoolDesc::new("bindless misuse", BufferPoolUsage::Unknown).with_page_size(1 << 20),
        )
        .unwrap();
        let out = pool
            .init_buffer(
                &BufferInit::new("bindless misuse texels", 64).with_usage(BufferUsage::STORAGE),
                both,
            )
            .unwrap();
        let program =
            MultiComputeProgram::new(set, both, "bindless_sample.comp", &shaders::BINDLESS_SAMPLE, 2)
                .unwrap();
        let general = vk::ImageLayout::GENERAL;
        let submitter = MultiSubmitter::new(set, both).unwrap();
        // 65 views (one image 65 times) for an array of 64; no view; one image for an array.
        let cases = [
            MultiSampled::array(vec![&images[0]; 65], 0..1, &sampler, general),
            MultiSampled::array(Vec::new(), 0..1, &sampler, general),
            MultiSampled::image(&images[0], 0..1, &sampler, general),
        ];
        for (at, sampled) in cases.into_iter().enumerate() {
            let item = DispatchItem::new(
                &program,
                vec![MultiBinding::Buffer(BufferView::whole(&out)), MultiBinding::Sampled(sampled)],
                &words(&[1, 1]),
                [1, 1, 1],
            );
            let e = submitter.submit(d(1), &[WorkItem::Dispatch(&item)]).unwrap_err();
            let expected = match &e {
                WorkError::Binding(BindingError::ArrayLength {
                    given, length: 64, bindless: true, ..
                }) => (at == 0 && *given == 65) || (at == 1 && *given == 0),
                WorkError::Binding(BindingError::Invalid { binding: 1, .. }) => at == 2,
                _ => false,
            };
            assert!(expected, "case {at}: {e}");
            assert_eq!(item.cached_devices(), 0, "case {at}: no set made");
        }
        // An array longer than the device's update-after-bind limits: refused before any Vulkan
        // call, on the first device.
        // SAFETY: the shipped shader's SPIR-V; its array is declared bindless (a runtime array of
        // sampled images), only with a length no device has — refused by the reflection checks.
        let e = unsafe {
            MultiComputeProgram::from_spirv(
                set,
                both,
                "bindless over the limit",
                shaders::BINDLESS_SAMPLE.words(),
                &[BindingKind::StorageBuffer, BindingKind::BindlessSampledImages(u32::MAX)],
                8,
                1,
            )
        }
        .unwrap_err();
        match e {
            MultiDeviceError::Failed {
                device,
                source: ProgramError::DescriptorCount { binding: 1, count: u32::MAX, limit_name, .. },
            } => {
                assert_eq!(device, d(0));
                assert!(limit_name.contains("UpdateAfterBind"), "{limit_name}");
            }
            e => panic!("{e}"),
        }
        // A fixed array of 64 is not the shader's runtime array.
        // SAFETY: as above; refused by the reflection.
        let e = unsafe {
            MultiComputeProgram::from_spirv(
                set,
                both,
                "bindless as a fixed array",
                shaders::BINDLESS_SAMPLE.words(),
                &[BindingKind::StorageBuffer, BindingKind::SampledImageArray(64)],
                8,
                1,
            )
        }
        .unwrap_err();
        assert!(
            matches!(
                e,
                MultiDeviceError::Failed { source: ProgramError::Binding { binding: 1, count: 0, .. }, .. }
            ),
            "{e}"
        );

        submitter.destroy();
        drop((images, sampler, program));
        pool.free_buffer(out).unwrap();
        uploader.destroy().unwrap();
    });
}

#[test]
fn multi_device_images_bound_as_a_fixed_array_or_one_image_resolve_per_device_as_on_one() {
    with_gpu(|set| {
        let both = DeviceMask::from_bits(0b11);
        let uploader = MultiUploader::new(set, both, 1 << 20).unwrap();
        let images = textures(set, &uploader, 4);
        let sampler = MultiSampler::new(set, both, Filter::Nearest).unwrap();
        let pool = MultiBufferPool::new(
            set,
            both,
            &BufferPoolDesc::new("sampled", BufferPoolUsage::Unknown).with_page_size(1 << 20),
        )
        .unwrap();
        let usage = BufferUsage::STORAGE | BufferUsage::COPY_SRC | BufferUsage::COPY_DST;
        let bytes = 16 * 16;
        let out = pool.init_buffer(&BufferInit::new("sampled out", bytes).with_usage(usage), both).unwrap();
        let general = vk::ImageLayout::GENERAL;
        let submitter = MultiSubmitter::new(set, both).unwrap();
        let run = |item: &DispatchItem<'_>, device: DeviceIndex| {
            uploader.broadcast(&out, 0, &vec![0; bytes as usize]).unwrap();
            uploader.wait_idle().unwrap();
            let submission = submitter.submit(device, &[WorkItem::Dispatch(item)]).unwrap();
            submitter.wait(device, submission).unwrap();
            set.device(device).unwrap().read_back(out.instance(device).unwrap(), 0, bytes).unwrap()
        };

        // A fixed array of four: exactly four images.
        let fixed =
            MultiComputeProgram::new(set, both, "sample_array.comp", &shaders::SAMPLE_ARRAY, 2).unwrap();
        assert_eq!(fixed.bindings()[1], BindingKind::SampledImageArray(4));
        let array = DispatchItem::new(
            &fixed,
            vec![
                MultiBinding::Buffer(BufferView::whole(&out)),
                MultiBinding::Sampled(MultiSampled::array(images.iter().collect(), 0..1, &sampler, general)),
            ],
            &words(&[INVOCATIONS]),
            [1, 1, 1],
        );
        let expected: Vec<u8> = (0..INVOCATIONS as usize).flat_map(|i| color(i.min(3))).collect();
        for device in [d(0), d(1)] {
            assert_eq!(run(&array, device)[..expected.len()], expected[..], "{device}: the fixed array");
        }
        let three = DispatchItem::new(
            &fixed,
            vec![
                MultiBinding::Buffer(BufferView::whole(&out)),
                MultiBinding::Sampled(MultiSampled::array(
                    images.iter().take(3).collect(),
                    0..1,
                    &sampler,
                    general,
                )),
            ],
            &words(&[INVOCATIONS]),
            [1, 1, 1],
        );
        let e = submitter.submit(d(0), &[WorkItem::Dispatch(&three)]).unwrap_err();
        assert!(
            matches!(
                e,
                WorkError::Binding(BindingError::ArrayLength { given: 3, length: 4, bindless: false, .. })
            ),
            "{e}"
        );

        // One image by multi-device object: sample_texels.comp reads every texel of image 2.
        let texels =
            MultiComputeProgram::new(set, both, "sample_texels.comp", &shaders::SAMPLE_TEXELS, 2).unwrap();
        let one = DispatchItem::new(
            &texels,
            vec![
                MultiBinding::Sampled(MultiSampled::image(&images[2], 0..1, &sampler, general)),
                MultiBinding::Buffer(BufferView::whole(&out)),
            ],
            &words(&[16, 4]),
            [1, 1, 1],
        );
        let device = set.device(d(0)).unwrap();
        let single = ComputeProgram::new(device, "single texels", &shaders::SAMPLE_TEXELS, 1).unwrap();
        let view = images[2].view(set, d(0), 0..1).unwrap();
        let own_sampler = device.create_sampler(Filter::Nearest).unwrap();
        let mut target = device
            .create_buffer(
                &BufferDesc::new("single texels", bytes, BufferUsage::STORAGE | BufferUsage::COPY_SRC)
                    .with_intent(MemoryIntent::Readback),
            )
            .unwrap();
        target.write(0, &vec![0; bytes as usize]).unwrap();
        let descriptors = single
            .descriptor_set(&[Binding::sampled(&*view, &own_sampler, general), Binding::Buffer(&target)])
            .unwrap();
        device
            .submit_compute("single texels", |rec| {
                single.dispatch(rec, &descriptors, &words(&[16, 4]), [1, 1, 1]).unwrap()
            })
            .unwrap();
        device.wait_submitted().unwrap();
        let reference = device.read_back(&target, 0, bytes).unwrap();
        assert_ne!(reference, vec![0; bytes as usize]);
        for device in [d(1), d(0)] {
            assert_eq!(run(&one, device), reference, "{device}: one image, as on one device");
        }
        assert_eq!((array.cached_devices(), one.cached_devices()), (2, 2));

        submitter.destroy();
        drop((array, three, one, descriptors, single, view, own_sampler, target));
        drop((images, sampler, fixed, texels));
        pool.free_buffer(out).unwrap();
        uploader.destroy().unwrap();
    });
}
