//! The placement policy on real memory: placed buffers and images get the offsets
//! `PlacementEngine` gives (legacy: D3D12's 64 KiB placed layouts; tight: the driver's alignment),
//! usage floors are applied without the caller passing them, the caller's floor goes on top, and an
//! impossible floor is a typed error.

use residency_core::format::Format;
use residency_core::placement::{
    allocation_info, ErrorCode, MessageId, Placement, PlacementErrorKind, ResourceDesc,
};
use residency_core::usage::{BufferUsage, ImageUsage};
use residency_vulkan::ash::vk;
use residency_vulkan::testing::with_gpu;
use residency_vulkan::{
    usage_alignment_floor, AllocationDesc, Buffer, BufferDesc, Device, ImageDesc, MemoryError,
    PlacementPolicy,
};

const KIB_64: u64 = 64 << 10;

/// The tests share one device (`with_gpu`) and its policy: each holds this while it runs and sets
/// the policy it needs.
static POLICY: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn with_policy(policy: PlacementPolicy, f: impl FnOnce(&std::sync::Arc<Device>)) {
    let _serial = POLICY.lock().unwrap_or_else(|e| e.into_inner());
    with_gpu(|set| {
        let device = &set.devices()[0];
        device.set_placement_policy(policy);
        assert_eq!(device.placement_policy(), policy);
        f(device);
        device.set_placement_policy(PlacementPolicy::default());
    });
}

fn buffers(device: &Device, what: &str, count: usize, usage: BufferUsage) -> Vec<Buffer> {
    (0..count)
        .map(|i| device.create_buffer(&BufferDesc::new(format!("{what} {i}"), 100, usage)).unwrap())
        .collect()
}

/// The offsets of `buffers` in the one `VkDeviceMemory` they share.
fn offsets_in_one_heap(buffers: &[Buffer]) -> Vec<u64> {
    let memory = buffers[0].memory().0;
    assert!(buffers.iter().all(|b| b.memory().0 == memory), "the small buffers share one heap");
    buffers.iter().map(|b| b.memory().1).collect()
}

#[test]
fn legacy_policy_places_buffers_at_64_kib() {
    with_policy(PlacementPolicy::Legacy, |device| {
        let placed = buffers(device, "legacy", 4, BufferUsage::VERTEX);
        for b in &placed {
            assert_eq!(b.memory().1 % KIB_64, 0, "{}: legacy buffers are placed at 64 KiB", b.name());
        }
        // The engine's legacy layout of the same four buffers: each 100 B buffer takes 64 KiB.
        let descs = [ResourceDesc::buffer(100); 4];
        let info = allocation_info(&**device, Placement::Placed, &descs, &mut Vec::new()).unwrap();
        let expected: Vec<u64> = info.elements.iter().map(|e| e.offset).collect();
        assert_eq!(expected, [0, KIB_64, 2 * KIB_64, 3 * KIB_64]);
        // On real memory: four distinct 64 KiB slots of one heap, as the engine lays them out.
        let mut offsets = offsets_in_one_heap(&placed);
        offsets.sort_unstable();
        offsets.dedup();
        assert_eq!(offsets.len(), 4, "{offsets:?}");
        assert!(offsets.iter().all(|o| o % KIB_64 == 0), "offsets {offsets:?}, engine {expected:?}");
    });
}

#[test]
fn legacy_policy_gives_images_d3d12s_layouts_small_default_and_multisampled() {
    with_policy(PlacementPolicy::Legacy, |device| {
        let colour = ImageUsage::COLOR_ATTACHMENT | ImageUsage::SAMPLED;
        let mut msaa = ImageDesc::new_2d("legacy msaa", Format::R8G8B8A8Unorm, 64, 64, colour);
        msaa.samples = 4;
        // (description, the legacy alignment D3D12 gives it)
        let cases = [
            // 16 × 16 RGBA8, sampled only: a small resource (its mip 0 fits in 64 KiB): 4 KiB.
            (ImageDesc::new_2d("legacy small", Format::R8G8B8A8Unorm, 16, 16, ImageUsage::SAMPLED), 4 << 10),
            // The same size as a render target: never small, 64 KiB.
            (ImageDesc::new_2d("legacy target", Format::R8G8B8A8Unorm, 16, 16, colour), KIB_64),
            // Large and sampled: 64 KiB.
            (
                ImageDesc::new_2d("legacy large", Format::R8G8B8A8Unorm, 1024, 1024, ImageUsage::SAMPLED),
                KIB_64,
            ),
            // Multisampled: 4 MiB.
            (msaa, 4 << 20),
        ];
        let mut images = Vec::new();
        for (desc, want) in cases {
            let info =
                allocation_info(&**device, Placement::Placed, &[desc.placement_desc()], &mut Vec::new())
                    .unwrap();
            let engine = info.elements[0].alignment;
            assert_eq!(engine.max(want), engine, "{}: the engine's legacy alignment {engine}", desc.name);
            assert_eq!(engine, want.max(device.limits().buffer_image_granularity), "{}", desc.name);
            let image = device.create_image(&desc).unwrap();
            assert_eq!(
                image.memory().1 % engine,
                0,
                "{}: at the engine's {engine} B on real memory",
                desc.name
            );
            images.push(image);
        }
        // Tight: the same small image at the driver's alignment (on its granularity page).
        device.set_placement_policy(PlacementPolicy::Tight);
        let small = ImageDesc::new_2d("tight small", Format::R8G8B8A8Unorm, 16, 16, ImageUsage::SAMPLED);
        let info =
            allocation_info(&**device, Placement::Placed, &[small.placement_desc().tight()], &mut Vec::new())
                .unwrap();
        assert!(info.elements[0].alignment <= 4 << 10, "tight is never coarser than legacy");
    });
}

#[test]
fn tight_policy_packs_small_buffers_at_the_drivers_alignment() {
    assert_eq!(PlacementPolicy::default(), PlacementPolicy::Tight, "tight is the default");
    with_policy(PlacementPolicy::Tight, |device| {
        let placed = buffers(device, "tight", 4, BufferUsage::VERTEX);
        let descs = [ResourceDesc::buffer(100).tight(); 4];
        let info = allocation_info(&**device, Placement::Placed, &descs, &mut Vec::new()).unwrap();
        let alignment = info.elements[0].alignment;
        assert!(alignment <= 256, "tight buffer alignment {alignment}");
        // The engine's answer for a buffer of unknown usage is an upper bound; a vertex buffer is
        // placed at its own requirement (the driver's, through the same engine), at most that.
        let raw = own_buffer(device, vk::BufferUsageFlags::VERTEX_BUFFER);
        // SAFETY: a live buffer of this device, destroyed right after the query.
        let own = unsafe { device.raw().get_buffer_memory_requirements(raw) }.alignment;
        // SAFETY: unused, never bound.
        unsafe { device.raw().destroy_buffer(raw, None) };
        assert!(own <= alignment, "the vertex buffer's own {own} within the engine's {alignment}");
        for b in &placed {
            assert_eq!(b.memory().1 % own, 0, "{} at its own alignment {own}", b.name());
        }
        let offsets = offsets_in_one_heap(&placed);
        let span = offsets.iter().max().unwrap() - offsets.iter().min().unwrap();
        assert!(span < KIB_64, "four tight 100 B buffers within one 64 KiB page: {offsets:?}");
        let image = device
            .create_image(&ImageDesc::new_2d(
                "tight image",
                Format::R8G8B8A8Unorm,
                16,
                16,
                ImageUsage::SAMPLED,
            ))
            .unwrap();
        let granularity = device.limits().buffer_image_granularity.max(1);
        assert_eq!(image.memory().1 % granularity, 0, "optimal images on their own granularity pages");
    });
}

fn own_buffer(device: &Device, usage: vk::BufferUsageFlags) -> vk::Buffer {
    let info = vk::BufferCreateInfo::default().size(100).usage(usage);
    // SAFETY: a plain buffer description on a live device.
    unsafe { device.raw().create_buffer(&info, None) }.unwrap()
}

/// The floor of a buffer with several usages is the largest floor of any of them, for every
/// combination of the usage bits (issue #31: a uniform usage used to replace the floors before it,
/// so a uniform + acceleration-structure-storage buffer lost its 256 B).
#[test]
fn usage_floors_are_the_maximum_of_every_use_for_every_combination() {
    with_policy(PlacementPolicy::Tight, |device| {
        let limits = &device.profile().limits;
        let bits: Vec<BufferUsage> = BufferUsage::NAMED.iter().map(|&(usage, _)| usage).collect();
        for subset in 0u32..(1 << bits.len()) {
            let usage = (0..bits.len())
                .filter(|i| subset & (1 << i) != 0)
                .fold(BufferUsage::NONE, |all, i| all.union(bits[i]));
            let expected = (0..bits.len())
                .filter(|i| subset & (1 << i) != 0)
                .map(|i| usage_alignment_floor(bits[i], limits))
                .max()
                .unwrap_or(0);
            assert_eq!(usage_alignment_floor(usage, limits), expected, "{usage:?}");
        }
        let both = BufferUsage::UNIFORM.union(BufferUsage::ACCELERATION_STRUCTURE_STORAGE);
        assert!(usage_alignment_floor(both, limits) >= 256, "the acceleration-structure floor stays");
    });
}

#[test]
fn uniform_buffer_is_placed_at_min_uniform_buffer_offset_alignment_without_a_floor() {
    with_policy(PlacementPolicy::Tight, |device| {
        let limits = &device.profile().limits;
        let floor = usage_alignment_floor(BufferUsage::UNIFORM, limits);
        assert_eq!(floor, limits.min_uniform_buffer_offset_alignment.max(1).next_power_of_two());
        assert_eq!(
            usage_alignment_floor(BufferUsage::STORAGE, limits),
            limits.min_storage_buffer_offset_alignment.max(1).next_power_of_two()
        );
        assert_eq!(
            usage_alignment_floor(BufferUsage::UNIFORM_TEXEL, limits),
            limits.min_texel_buffer_offset_alignment.max(1).next_power_of_two()
        );
        assert_eq!(usage_alignment_floor(BufferUsage::VERTEX, limits), 0);
        let raw: Vec<_> = (0..3).map(|_| own_buffer(device, vk::BufferUsageFlags::UNIFORM_BUFFER)).collect();
        let mut allocations = Vec::new();
        for (i, &b) in raw.iter().enumerate() {
            let desc = AllocationDesc::new(format!("uniform {i}")).with_buffer_usage(BufferUsage::UNIFORM);
            // SAFETY: a live, unbound buffer of this device, never used by the GPU, destroyed
            // after its memory is dropped.
            allocations.push(unsafe { device.allocate_for_buffer(b, &desc) }.unwrap());
        }
        for a in &allocations {
            assert_eq!(a.offset() % floor, 0, "{} at {}", a.name(), a.offset());
        }
        assert!(device.placement_messages().iter().all(|(name, _)| !name.starts_with("uniform")));
        drop(allocations);
        for b in raw {
            // SAFETY: its memory was dropped and the GPU never used it.
            unsafe { device.raw().destroy_buffer(b, None) };
        }
    });
}

#[test]
fn callers_floor_goes_on_top_and_a_low_floor_is_reported_as_alignment_overridden() {
    with_policy(PlacementPolicy::Tight, |device| {
        let high =
            device.create_buffer(&BufferDesc::new("floor 256", 100, BufferUsage::VERTEX).with_alignment(256));
        let high = high.unwrap();
        assert_eq!(high.memory().1 % 256, 0);
        let low =
            device.create_buffer(&BufferDesc::new("floor 1", 100, BufferUsage::VERTEX).with_alignment(1));
        assert!(low.is_ok());
        let messages = device.placement_messages();
        let overridden = messages.iter().find(|(name, _)| name == "floor 1");
        let (_, message) = overridden.expect("a floor below the rules is clamped up and reported");
        assert_eq!(message.id, MessageId::AlignmentOverridden, "{message}");
        assert!(messages.iter().all(|(name, _)| name != "floor 256"), "{messages:?}");
    });
}

#[test]
fn a_floor_above_the_rules_maximum_is_a_typed_error() {
    with_policy(PlacementPolicy::Tight, |device| {
        // Tight placed buffers align to at most 256 B (or the driver's requirement, if larger).
        let desc = BufferDesc::new("too aligned", 100, BufferUsage::VERTEX).with_alignment(1 << 20);
        match device.create_buffer(&desc) {
            Err(MemoryError::Placement { name, source }) => {
                assert_eq!(name, "too aligned");
                assert_eq!(source.code(), ErrorCode::InvalidArg);
                assert!(
                    matches!(
                        source.kind,
                        PlacementErrorKind::AlignmentAboveMaximum { alignment: 1_048_576, .. }
                    ),
                    "{source}"
                );
            }
            other => panic!("expected a placement error, got {other:?}"),
        }
        assert!(device.ledger().live_objects().iter().all(|o| &*o.name != "too aligned"), "nothing is left");
        // Legacy allows up to 64 KiB for buffers; 128 KiB is refused too.
        device.set_placement_policy(PlacementPolicy::Legacy);
        let desc = BufferDesc::new("too aligned legacy", 100, BufferUsage::VERTEX).with_alignment(128 << 10);
        assert!(matches!(device.create_buffer(&desc), Err(MemoryError::Placement { .. })));
        let ok = BufferDesc::new("64 KiB legacy", 100, BufferUsage::VERTEX).with_alignment(KIB_64);
        assert!(device.create_buffer(&ok).is_ok());
    });
}

#[test]
fn a_pool_has_a_policy_of_its_own_over_the_devices() {
    use residency_core::usage::BufferPoolUsage;
    use residency_vulkan::{BufferInit, BufferPool, BufferPoolDesc};
    with_policy(PlacementPolicy::Tight, |device| {
        let legacy = BufferPool::new(
            std::sync::Arc::clone(device),
            BufferPoolDesc::new("legacy pool", BufferPoolUsage::Unknown).with_policy(PlacementPolicy::Legacy),
        )
        .unwrap();
        let tight = BufferPool::new(
            std::sync::Arc::clone(device),
            BufferPoolDesc::new("device-policy pool", BufferPoolUsage::Unknown),
        )
        .unwrap();
        let make = |pool: &BufferPool, i: u32| {
            pool.init_buffer(
                &BufferInit::new(format!("{} {i}", pool_name(pool)), 100).with_usage(BufferUsage::VERTEX),
            )
            .unwrap()
        };
        fn pool_name(pool: &BufferPool) -> &'static str {
            if pool.desc().policy == Some(PlacementPolicy::Legacy) {
                "legacy"
            } else {
                "tight"
            }
        }
        let in_legacy: Vec<Buffer> = (0..4).map(|i| make(&legacy, i)).collect();
        let in_tight: Vec<Buffer> = (0..4).map(|i| make(&tight, i)).collect();
        let mut offsets: Vec<u64> = in_legacy.iter().map(|b| b.memory().1).collect();
        offsets.sort_unstable();
        assert_eq!(
            offsets,
            [0, KIB_64, 2 * KIB_64, 3 * KIB_64],
            "the legacy pool lays buffers out as D3D12 does"
        );
        let offsets: Vec<u64> = in_tight.iter().map(|b| b.memory().1).collect();
        let span = offsets.iter().max().unwrap() - offsets.iter().min().unwrap();
        assert!(span < KIB_64, "the device's tight policy packs them: {offsets:?}");
        // The device turns legacy: a pool without a policy of its own follows it.
        device.set_placement_policy(PlacementPolicy::Legacy);
        let later = make(&tight, 9);
        assert_eq!(later.memory().1 % KIB_64, 0);
    });
}
