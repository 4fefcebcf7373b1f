//! `MultiImagePool` on two logical devices (lavapipe opened twice): images on every device of a
//! mask, per-device budgets, all-or-nothing creation (budget refusals and injected faults on
//! device 1 roll device 0 back), the budget coming back when an image is released, per-device
//! uploads and read-backs, names in reports. Every test runs under `with_gpu` (synchronization
//! validation on; no object may outlive it).

use residency_core::device_mask::{DeviceIndex, DeviceMask};
use residency_core::format::Format;
use residency_core::memory::MemoryIntent;
use residency_core::report::RangeKind;
use residency_core::usage::BufferUsage;
use residency_core::usage::ImageUsage;
use residency_vulkan::ash::vk;
use residency_vulkan::compute::{Binding, ComputeProgram};
use residency_vulkan::multi::{
    ImagePoolError, ImagePoolStats, MultiDevice, MultiDeviceError, MultiImage, MultiImagePool,
    MultiImagePoolDesc, MultiUploader,
};
use residency_vulkan::shaders;
use residency_vulkan::testing::with_gpu;
use residency_vulkan::{
    BufferDesc, Device, DeviceSet, FaultSite, Filter, ImageDesc, ImageRegion, ImageView, InjectedFault,
    MemoryError,
};

fn d(i: u32) -> DeviceIndex {
    DeviceIndex::new(i).unwrap()
}

fn both() -> DeviceMask {
    DeviceMask::from_bits(0b11)
}

/// No fallback to the host tier: the fault tests exhaust the intent's memory types.
fn desc(name: &str) -> ImageDesc {
    let usage = ImageUsage::SAMPLED | ImageUsage::COPY_DST | ImageUsage::COPY_SRC;
    ImageDesc::new_2d(name, Format::R8G8B8A8Unorm, 64, 64, usage).without_fallback()
}

/// The bytes an image of `desc("…")` occupies on device 0 (lavapipe's two devices agree).
fn image_bytes(set: &DeviceSet) -> u64 {
    let probe = MultiImage::create(set, d(0).mask(), &desc("image pool probe")).unwrap();
    probe.instance(d(0)).unwrap().size()
}

/// Names of the live objects of device `i` (after its work is done and the retire queue ran).
fn live_names(set: &DeviceSet, i: DeviceIndex) -> Vec<String> {
    let device = set.device(i).unwrap();
    device.wait_idle().unwrap();
    device.maintain();
    let mut names: Vec<String> =
        device.ledger().live_objects().into_iter().map(|o| o.name.to_string()).collect();
    names.sort();
    names
}

/// Every texel of mip 0 of a 64 × 64 RGBA8 view (in `GENERAL`), as `sample_texels.comp` reads it
/// through a sampler on `device`, back in bytes.
fn sample_texels(device: &Device, view: &ImageView) -> Vec<u8> {
    const COUNT: u32 = 64 * 64;
    let program = ComputeProgram::new(device, "image pool sampling", &shaders::SAMPLE_TEXELS, 1).unwrap();
    let sampler = device.create_sampler(Filter::Nearest).unwrap();
    let usage = BufferUsage::STORAGE;
    let out = device
        .create_buffer(
            &BufferDesc::new("image pool samples", u64::from(COUNT) * 16, usage)
                .with_intent(MemoryIntent::Readback),
        )
        .unwrap();
    let bindings = program
        .descriptor_set(&[Binding::sampled(view, &sampler, vk::ImageLayout::GENERAL), Binding::Buffer(&out)])
        .unwrap();
    let push: Vec<u8> = [COUNT, 64].iter().flat_map(|v| v.to_le_bytes()).collect();
    device
        .submit_compute("image pool sampling", |rec| {
            program
                .dispatch(rec, &bindings, &push, [COUNT / 64, 1, 1])
                .expect("within the declared push constants")
        })
        .unwrap();
    let mut bytes = vec![0u8; (COUNT * 16) as usize];
    out.read(0, &mut bytes).unwrap();
    bytes
        .chunks_exact(4)
        .map(|f| (f32::from_le_bytes([f[0], f[1], f[2], f[3]]) * 255.0).round() as u8)
        .collect()
}

fn stats_of(pool: &MultiImagePool, i: DeviceIndex) -> ImagePoolStats {
    pool.stats().into_iter().find(|(index, _)| *index == i).unwrap().1
}

#[test]
fn image_pool_creates_images_on_all_and_on_a_subset_mask() {
    with_gpu(|set| {
        let pool = MultiImagePool::new(set, both(), &MultiImagePoolDesc::new("image pool masks")).unwrap();
        assert_eq!(pool.mask(), both());
        let everywhere = pool.init_image(&desc("image pool everywhere"), DeviceMask::ALL).unwrap();
        assert_eq!(everywhere.mask(), both(), "ALL is the pool's mask");
        let only_1 = pool.init_image(&desc("image pool on 1"), d(1).mask()).unwrap();
        assert_eq!(only_1.mask(), d(1).mask());
        for (index, image) in everywhere.iter() {
            assert_eq!(image.device_index(), index);
            assert_eq!(image.name(), "image pool everywhere");
        }
        let size = everywhere.instance(d(0)).unwrap().size();
        assert!(size >= 64 * 64 * 4);
        assert_eq!(stats_of(&pool, d(0)), ImagePoolStats { images: 1, bytes: size, ..Default::default() });
        assert_eq!(stats_of(&pool, d(1)).images, 2);
        let total = pool.total_stats();
        assert_eq!(total.images, 3);
        assert_eq!(total.bytes, pool.stats().iter().map(|(_, s)| s.bytes).sum::<u64>());
        assert_eq!(total.charged_bytes(), total.bytes);

        // Each device's report names its own instances.
        let report = pool.report_with(set, &[&everywhere, &only_1]);
        let named = |device: usize| -> Vec<String> {
            let mut names: Vec<String> = report.devices[device]
                .memory_types
                .iter()
                .flat_map(|t| t.blocks.iter())
                .flat_map(|b| b.ranges.iter())
                .filter_map(|r| match &r.kind {
                    RangeKind::Allocation(info) => info.name.clone(),
                    _ => None,
                })
                .filter(|n| n.starts_with("image pool"))
                .collect();
            names.sort();
            names
        };
        assert_eq!(named(0), ["image pool everywhere"]);
        assert_eq!(named(1), ["image pool everywhere", "image pool on 1"]);

        // A pool over device 1 only: ALL is device 1, device 0 is not within it.
        let narrow =
            MultiImagePool::new(set, d(1).mask(), &MultiImagePoolDesc::new("image pool narrow")).unwrap();
        let err = narrow.init_image(&desc("image pool refused"), both()).unwrap_err();
        assert!(
            matches!(err, MultiDeviceError::MaskNotSubset { requested, .. } if requested == both()),
            "{err}"
        );
        let err = narrow.init_image(&desc("image pool refused"), DeviceMask::from_bits(0b100)).unwrap_err();
        assert!(matches!(err, MultiDeviceError::MaskNotSubset { .. } | MultiDeviceError::EmptyMask(_)));
        let bad = ImageDesc { extent: [0, 64, 1], ..desc("image pool empty") };
        let err = pool.init_image(&bad, DeviceMask::ALL).unwrap_err();
        assert!(
            matches!(err, MultiDeviceError::Failed { device, source: ImagePoolError::Memory(_) } if device == d(0)),
            "{err}"
        );
        assert_eq!(pool.total_stats().images, 3, "refused calls change nothing");

        // An image the pool did not make is handed back unchanged.
        let foreign = MultiImage::create(set, both(), &desc("image pool foreign")).unwrap();
        let back = pool.free_image(foreign).unwrap_err();
        assert_eq!(back.name, "image pool foreign");
        assert_eq!(back.resource.mask(), both());
        let err = narrow.free_image(only_1).unwrap_err();
        pool.free_image(*err.resource).unwrap();
        pool.free_image(everywhere).unwrap();
        assert_eq!(pool.total_stats(), ImagePoolStats::default());
    });
}

#[test]
fn image_pool_budget_refusal_on_device_1_rolls_back_device_0() {
    with_gpu(|set| {
        let size = image_bytes(set);
        let budget = size + size / 2;
        let pool = MultiImagePool::new(
            set,
            both(),
            &MultiImagePoolDesc::new("image pool budget").with_budget(budget),
        )
        .unwrap();
        let filler = pool.init_image(&desc("image pool filler"), d(1).mask()).unwrap();
        let before = pool.stats();
        let live_0 = live_names(set, d(0));
        let creates = |i| set.device(i).unwrap().ledger().site_calls(FaultSite::CreateResource);
        let creates_before = [creates(d(0)), creates(d(1))];
        let err = pool.init_image(&desc("image pool too much"), both()).unwrap_err();
        assert_eq!(creates(d(0)), creates_before[0] + 1, "device 0 made its image");
        assert_eq!(creates(d(1)), creates_before[1], "device 1 refused before creating anything");
        match &err {
            MultiDeviceError::Failed {
                device,
                source: ImagePoolError::OverBudget { requested, charged, budget: b, name, .. },
            } => {
                assert_eq!(*device, d(1), "{err}");
                assert_eq!((*requested, *charged, *b), (size, size, budget));
                assert_eq!(name, "image pool too much");
            }
            e => panic!("expected a budget refusal on device 1, got {e}"),
        }
        assert_eq!(pool.stats(), before, "no statistic changed");
        assert_eq!(live_names(set, d(0)), live_0, "device 0's image was destroyed again");
        assert!(!live_names(set, d(1)).contains(&"image pool too much".to_owned()));
        // Device 0 alone fits.
        let fits = pool.init_image(&desc("image pool fits"), d(0).mask()).unwrap();
        drop(fits);
        pool.free_image(filler).unwrap();
        let fine = pool.init_image(&desc("image pool now fits"), both()).unwrap();
        assert_eq!(fine.mask(), both());
        pool.free_image(fine).unwrap();
    });
}

#[test]
fn image_pool_fault_at_image_creation_on_device_1_rolls_back() {
    with_gpu(|set| {
        let pool = MultiImagePool::new(set, both(), &MultiImagePoolDesc::new("image pool faults")).unwrap();
        let device_1 = set.device(d(1)).unwrap();
        for (committed, site) in [(false, FaultSite::CreateResource), (true, FaultSite::AllocateMemory)] {
            let live_0 = live_names(set, d(0));
            let live_1 = live_names(set, d(1));
            let fired = device_1.ledger().faults_fired(site);
            // One fault per memory type: a device with another type for the intent (the H200's
            // non-device-local fallback) would otherwise place the image there.
            let types = device_1.memory_properties().types.len() as u64;
            let attempts = if site == FaultSite::AllocateMemory { types } else { 1 };
            for _ in 0..attempts {
                device_1.ledger().inject_fault(site, 0, InjectedFault::OutOfDeviceMemory);
            }
            let image =
                if committed { desc("image pool doomed").committed() } else { desc("image pool doomed") };
            let err = pool.init_image(&image, both()).unwrap_err();
            assert!(
                matches!(
                    &err,
                    MultiDeviceError::Failed {
                        device,
                        source: ImagePoolError::Memory(MemoryError::OutOfDeviceMemory { .. })
                    } if *device == d(1)
                ),
                "{site:?}: {err}"
            );
            assert!(device_1.ledger().faults_fired(site) > fired, "{site:?} fired");
            device_1.ledger().clear_faults();
            assert_eq!(pool.total_stats(), ImagePoolStats::default(), "{site:?}: nothing charged");
            assert_eq!(live_names(set, d(0)), live_0, "{site:?}: device 0 rolled back");
            assert_eq!(live_names(set, d(1)), live_1, "{site:?}: device 1 left nothing");
            let retry = pool.init_image(&image, both()).unwrap();
            assert_eq!(pool.total_stats().images, 2);
            pool.free_image(retry).unwrap();
        }
        assert_eq!(pool.total_stats(), ImagePoolStats::default());
    });
}

#[test]
fn image_pool_free_returns_the_budget_once_the_image_is_released() {
    with_gpu(|set| {
        let size = image_bytes(set);
        let pool = MultiImagePool::new(
            set,
            both(),
            &MultiImagePoolDesc::new("image pool free").with_budget(2 * size),
        )
        .unwrap();
        let a = pool.init_image(&desc("image pool a"), both()).unwrap();
        let b = pool.init_image(&desc("image pool b"), both()).unwrap();
        let err = pool.init_image(&desc("image pool c"), both()).unwrap_err();
        assert!(
            matches!(err, MultiDeviceError::Failed { device, source: ImagePoolError::OverBudget { .. } } if device == d(0)),
            "{err}"
        );
        // Freed with nothing else holding it and no work pending: the budget is back at once.
        pool.free_image(a).unwrap();
        assert_eq!(pool.total_stats(), ImagePoolStats { images: 2, bytes: 2 * size, ..Default::default() });
        let c = pool.init_image(&desc("image pool c"), both()).unwrap();
        // Dropped without a pool call: its drop tells the pool, which lets the image go at once.
        let dropped = pool.init_image(&desc("image pool dropped"), d(1).mask());
        assert!(matches!(dropped, Err(MultiDeviceError::Failed { .. })), "device 1 is full");
        pool.free_image(c).unwrap();
        let c = pool.init_image(&desc("image pool dropped"), d(0).mask()).unwrap();
        drop(c);
        assert!(!live_names(set, d(0)).contains(&"image pool dropped".to_owned()), "destroyed at its drop");
        let c = pool.init_image(&desc("image pool c"), both()).unwrap();

        // A view handed out keeps device 0's instance (and its charge) alive.
        let view = b.view(set, d(0), 0..1).unwrap();
        pool.free_image(b).unwrap();
        assert_eq!(stats_of(&pool, d(0)).images, 2, "the view holds `b` on device 0");
        assert_eq!(stats_of(&pool, d(1)).images, 1);
        drop(view);
        assert!(
            live_names(set, d(0)).contains(&"image pool b".to_owned()),
            "the pool holds it until it looks"
        );
        assert_eq!(stats_of(&pool, d(0)), ImagePoolStats { images: 1, bytes: size, ..Default::default() });
        assert!(!live_names(set, d(0)).contains(&"image pool b".to_owned()), "let go when the pool looked");

        // A use declared until the next frame: released, but retiring (still charged) until then.
        let device_0 = set.device(d(0)).unwrap();
        c.instance(d(0)).unwrap().used_until(device_0.frames_from_now(1)).unwrap();
        drop(c);
        assert_eq!(
            stats_of(&pool, d(0)),
            ImagePoolStats { retiring_images: 1, retiring_bytes: size, ..Default::default() }
        );
        assert_eq!(stats_of(&pool, d(0)).charged_bytes(), size);
        assert_eq!(stats_of(&pool, d(1)), ImagePoolStats::default());
        assert!(live_names(set, d(0)).contains(&"image pool c".to_owned()), "its memory is not freed yet");
        device_0.advance_frame();
        assert_eq!(pool.total_stats(), ImagePoolStats::default());
        assert!(!live_names(set, d(0)).contains(&"image pool c".to_owned()));
    });
}

#[test]
fn image_pool_images_upload_sample_and_read_back_per_device() {
    with_gpu(|set| {
        let pool = MultiImagePool::new(set, both(), &MultiImagePoolDesc::new("image pool upload")).unwrap();
        let image = pool.init_image(&desc("image pool texels"), DeviceMask::ALL).unwrap();
        let uploader = MultiUploader::new(set, both(), 1 << 20).unwrap();
        let texels = |seed: u8| -> Vec<u8> { (0..64 * 64 * 4u32).map(|i| (i % 253) as u8 ^ seed).collect() };
        for (index, instance) in image.iter() {
            let device = set.device(index).unwrap();
            device.discard_to_general(&[instance]).unwrap();
            let up = uploader.instance(index).unwrap();
            let data = texels(0x40 + index.get() as u8);
            up.write_image(&ImageRegion::new(instance, 0, [0; 3], [64, 64, 1]), &data).unwrap();
            up.wait_idle().unwrap();
        }
        for (index, instance) in image.iter() {
            let device = set.device(index).unwrap();
            let back = device.read_image(instance, vk::ImageLayout::GENERAL).unwrap();
            assert!(back == texels(0x40 + index.get() as u8), "device {index}'s own texels");
            let sampled = sample_texels(device, &image.view(set, index, 0..1).unwrap());
            assert!(sampled == back, "device {index} samples its own texels through its own view");
        }
        assert_eq!(image.cached_views(), 2);
        uploader.destroy().unwrap();
        pool.free_image(image).unwrap();
        assert_eq!(pool.total_stats(), ImagePoolStats::default());
    });
}
