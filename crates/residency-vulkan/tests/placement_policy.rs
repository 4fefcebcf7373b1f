//! The placement policy on real memory: placed buffers and images get the offsets
//! `PlacementEngine` gives (legacy: D3D12's 64 KiB placed layouts; tight: the driver's alignment),
//! usage floors are applied without the caller passing them, the caller's floor goes on top, and an
//! impossible floor is a typed error.

use residency_core::format::Format;
use residency_core::memory::MemoryIntent;
use residency_core::placement::heap::explicit_heap_size;
use residency_core::placement::{
    allocation_info, ErrorCode, MessageId, ObjectRequirements, Placement, PlacementEngine,
    PlacementErrorKind, ResourceDesc, TightAlignmentTier,
};
use residency_core::profile::MemoryRequirements;
use residency_core::usage::{BufferPoolUsage, BufferUsage, ImageUsage};
use residency_vulkan::ash::vk;
use residency_vulkan::testing::with_gpu;
use residency_vulkan::{
    usage_alignment_floor, AllocationDesc, Buffer, BufferDesc, BufferInit, BufferPool, BufferPoolDesc,
    Device, ExistingAllocationInfo, ImageDesc, MemoryError, PlacementPolicy,
};
use std::sync::Arc;

const KIB_4: u64 = 4 << 10;
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

/// A 64 × 64 RGBA8 colour attachment with 4 samples: 4 MiB aligned under the legacy rules.
fn multisampled(name: &str) -> ImageDesc {
    let colour = ImageUsage::COLOR_ATTACHMENT | ImageUsage::SAMPLED;
    ImageDesc { samples: 4, ..ImageDesc::new_2d(name, Format::R8G8B8A8Unorm, 64, 64, colour) }
}

#[test]
fn legacy_policy_gives_images_d3d12s_layouts_small_default_and_multisampled() {
    with_policy(PlacementPolicy::Legacy, |device| {
        let colour = ImageUsage::COLOR_ATTACHMENT | ImageUsage::SAMPLED;
        let msaa = multisampled("legacy msaa");
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

/// The core's answer for `buffer`: the engine under `policy` for `placement`, over the buffer's own
/// requirements, with the core's usage floor (`usage_alignment_floor`) and `minimum` as the floor.
/// A pool's placed buffer (`size_class`) is placed by the requirements of its size class (issue
/// #31: asked once per class, not per buffer): those of a buffer of its usage whose size is its
/// own rounded up to its alignment.
fn core_answer(
    device: &Device,
    buffer: &Buffer,
    policy: PlacementPolicy,
    placement: Placement,
    minimum: u64,
    size_class: bool,
) -> (u64, u64) {
    // SAFETY: a live buffer of this device; a pure query.
    let mut own = unsafe { device.raw().get_buffer_memory_requirements(buffer.raw()) };
    if size_class {
        let info = vk::BufferCreateInfo::default()
            .size(buffer.size().next_multiple_of(own.alignment))
            .usage(residency_vulkan::format_map::vk_buffer_usage(buffer.usage()))
            .sharing_mode(vk::SharingMode::EXCLUSIVE);
        let query = vk::DeviceBufferMemoryRequirements::default().create_info(&info);
        let mut out = vk::MemoryRequirements2::default();
        // SAFETY: a valid buffer description of this device (the buffer's own usage); a pure query.
        unsafe { device.raw().get_device_buffer_memory_requirements(&query, &mut out) };
        own = out.memory_requirements;
    }
    let source = ObjectRequirements {
        limits: &device.profile().limits,
        requirements: MemoryRequirements {
            size: own.size,
            alignment: own.alignment,
            memory_type_bits: own.memory_type_bits,
            prefers_dedicated: false,
        },
        tier: device.tight_alignment_tier(),
    };
    // A possible build scratch (storage + device address) also takes the device's scratch
    // alignment, a feature the core's profile does not carry.
    let scratch = BufferUsage::STORAGE | BufferUsage::DEVICE_ADDRESS;
    let scratch =
        if buffer.usage().contains(scratch) { device.scratch_alignment().next_power_of_two() } else { 0 };
    let floor = usage_alignment_floor(buffer.usage(), &device.profile().limits).max(scratch).max(minimum);
    let size = if size_class { own.size } else { buffer.size() };
    let mut desc = ResourceDesc::buffer(size).with_alignment(floor);
    if policy == PlacementPolicy::Tight {
        desc = desc.tight();
    }
    let element = PlacementEngine::new(source)
        .resource_allocation_info(placement, &desc, &mut Vec::new())
        .unwrap_or_else(|e| panic!("{}: {e}", buffer.name()));
    (element.size, element.alignment)
}

/// Every combination of the usage bits this device supports.
fn usage_combinations(device: &Device) -> Vec<BufferUsage> {
    let bits: Vec<BufferUsage> = BufferUsage::NAMED
        .iter()
        .map(|&(usage, _)| usage)
        .filter(|&usage| device.unsupported_usage(usage).is_none())
        .collect();
    (1u32..(1 << bits.len()))
        .map(|subset| {
            (0..bits.len())
                .filter(|i| subset & (1 << i) != 0)
                .fold(BufferUsage::NONE, |all, i| all.union(bits[i]))
        })
        .collect()
}

/// Issue #31: for every combination of the usage bits, under both rules, on every path that places
/// a buffer by the engine (the general heaps placed and committed, an unknown-flags pool), what
/// the buffer was placed with (`existing_allocation_info`) is the core's answer: the engine over
/// the buffer's own requirements (a pool's: its size class's) with the core's usage floor.
#[test]
fn usage_floors_core_and_live_answers_are_equal_for_every_combination_on_every_path() {
    with_policy(PlacementPolicy::Tight, |device| {
        let pool =
            BufferPool::new(Arc::clone(device), BufferPoolDesc::new("floors pool", BufferPoolUsage::Unknown))
                .unwrap();
        let sizes = [1u64, 100, 256, 4097, 70_000];
        let mut checked = 0;
        for (i, usage) in usage_combinations(device).into_iter().enumerate() {
            let size = sizes[i % sizes.len()];
            for policy in [PlacementPolicy::Tight, PlacementPolicy::Legacy] {
                let name = format!("floors {usage:?} {policy:?}");
                let desc = BufferDesc::new(name.as_str(), size, usage).with_policy(policy);
                let check = |buffer: &Buffer, placement: Placement, minimum: u64, pooled: bool| {
                    let live = buffer.existing_allocation_info();
                    let (size, alignment) = core_answer(device, buffer, policy, placement, minimum, pooled);
                    assert_eq!((live.placement, live.policy), (placement, policy), "{name}");
                    assert_eq!((live.size, live.alignment), (size, alignment), "{name}: {placement:?}");
                    assert_eq!(live.offset % alignment, 0, "{name}: bound at its alignment");
                    assert_eq!(live.memory, buffer.memory().0, "{name}");
                };
                check(&device.create_buffer(&desc).unwrap(), Placement::Placed, 0, false);
                // A pool's buffers are at least 16 B aligned: a floor of its own.
                let init = BufferInit::new(name.as_str(), size).with_usage(usage).with_policy(policy);
                check(&pool.init_buffer(&init).unwrap(), Placement::Placed, 16, true);
                if i % 16 == 0 {
                    check(
                        &device.create_buffer(&desc.clone().committed()).unwrap(),
                        Placement::Committed,
                        0,
                        false,
                    );
                }
                checked += 1;
            }
        }
        assert!(checked >= 2 * 255, "every combination of at least 8 usage bits: {checked}");
    });
}

/// Issue #31: a thread keeps a placed pool buffer's answer per 16-byte class (pool, usage, size
/// class, floor, policies) and reuses it for the class's other sizes. Every size of the classes
/// up to 640 B, in both orders (so that the first of a class is kept and the others reuse it),
/// under both policies and with and without a floor, gets the core's answer over its size
/// class's requirements, room for its own requirements, and its own alignment.
#[test]
fn kept_class_answers_equal_the_engines_for_every_size_of_a_class() {
    with_policy(PlacementPolicy::Tight, |device| {
        let pool =
            BufferPool::new(Arc::clone(device), BufferPoolDesc::new("class pool", BufferPoolUsage::Unknown))
                .unwrap();
        let usages =
            [BufferUsage::STORAGE | BufferUsage::VERTEX, BufferUsage::UNIFORM | BufferUsage::COPY_DST];
        let ascending: Vec<u64> = (1..=640).collect();
        let descending: Vec<u64> = ascending.iter().rev().copied().collect();
        for usage in usages {
            for policy in [PlacementPolicy::Tight, PlacementPolicy::Legacy] {
                for floor in [0u64, 256] {
                    for sizes in [&ascending, &descending] {
                        let mut live = Vec::new();
                        for &size in sizes {
                            let name = format!("class {usage:?} {policy:?} floor {floor} {size} B");
                            let init = BufferInit::new(name.as_str(), size)
                                .with_usage(usage)
                                .with_policy(policy)
                                .with_alignment(floor);
                            let buffer = pool.init_buffer(&init).unwrap();
                            let info = buffer.existing_allocation_info();
                            let (class_size, alignment) =
                                core_answer(device, &buffer, policy, Placement::Placed, floor.max(16), true);
                            assert_eq!((info.size, info.alignment), (class_size, alignment), "{name}");
                            // SAFETY: a live buffer of this device; a pure query.
                            let own = unsafe { device.raw().get_buffer_memory_requirements(buffer.raw()) };
                            assert!(info.size >= own.size, "{name}: room for its own requirements");
                            assert_eq!(info.offset % own.alignment, 0, "{name}: at its own alignment");
                            live.push(buffer);
                        }
                        pool.check_invariants().unwrap();
                    }
                }
            }
        }
    });
}

/// Issue #31: tight alignment is a flag of each resource (`with_policy`), over the device's and a
/// pool's policy: tight and legacy resources side by side on one device, each placed and reported
/// by its own rules.
#[test]
fn tight_and_legacy_resources_live_side_by_side_on_one_device() {
    with_policy(PlacementPolicy::Tight, |device| {
        assert_eq!(device.tight_alignment_tier(), TightAlignmentTier::Tier1, "lavapipe supports tight");
        let vertex = |name: &str| BufferDesc::new(name, 100, BufferUsage::VERTEX);
        let mut live = Vec::new();
        for round in 0..3 {
            let legacy =
                device.create_buffer(&vertex("own legacy").with_policy(PlacementPolicy::Legacy)).unwrap();
            let tight =
                device.create_buffer(&vertex("own tight").with_policy(PlacementPolicy::Tight)).unwrap();
            let default = device.create_buffer(&vertex("device's tight")).unwrap();
            let info = legacy.existing_allocation_info();
            assert_eq!((info.policy, info.alignment, info.size), (PlacementPolicy::Legacy, KIB_64, KIB_64));
            assert_eq!(info.offset % KIB_64, 0, "round {round}");
            for b in [&tight, &default] {
                let info = b.existing_allocation_info();
                assert_eq!(info.policy, PlacementPolicy::Tight, "{}", b.name());
                assert!(info.alignment <= 256 && info.size < KIB_4, "{}: {info:?}", b.name());
            }
            live.extend([legacy, tight, default]);
        }
        // Images: a small sampled texture, 4 KiB legacy (D3D12's small-resource rule), the
        // driver's alignment tight.
        let small = ImageDesc::new_2d("small", Format::R8G8B8A8Unorm, 16, 16, ImageUsage::SAMPLED);
        let legacy = device.create_image(&small.clone().with_policy(PlacementPolicy::Legacy)).unwrap();
        let tight = device.create_image(&small.clone().with_policy(PlacementPolicy::Tight)).unwrap();
        let granularity = device.limits().buffer_image_granularity.max(1);
        let info = legacy.existing_allocation_info();
        assert_eq!((info.policy, info.alignment), (PlacementPolicy::Legacy, KIB_4.max(granularity)));
        let engine =
            allocation_info(&**device, Placement::Placed, &[small.placement_desc().tight()], &mut Vec::new())
                .unwrap();
        let info = tight.existing_allocation_info();
        assert_eq!((info.policy, info.alignment), (PlacementPolicy::Tight, engine.alignment));
        assert_eq!(tight.memory().1 % info.alignment, 0);
        // The device turns legacy: a resource's own Tight still wins; its default follows.
        device.set_placement_policy(PlacementPolicy::Legacy);
        let own =
            device.create_buffer(&vertex("own tight on legacy").with_policy(PlacementPolicy::Tight)).unwrap();
        let followed = device.create_buffer(&vertex("device's legacy")).unwrap();
        assert_eq!(own.existing_allocation_info().policy, PlacementPolicy::Tight);
        assert!(own.existing_allocation_info().alignment <= 256);
        assert_eq!(followed.existing_allocation_info().alignment, KIB_64);
        // A legacy pool with a tight buffer, and its default.
        let pool = BufferPool::new(
            Arc::clone(device),
            BufferPoolDesc::new("mixed pool", BufferPoolUsage::Unknown).with_policy(PlacementPolicy::Legacy),
        )
        .unwrap();
        let init = |name: &str| BufferInit::new(name, 100).with_usage(BufferUsage::VERTEX);
        let in_pool = pool.init_buffer(&init("pool default")).unwrap();
        let own = pool.init_buffer(&init("pool own tight").with_policy(PlacementPolicy::Tight)).unwrap();
        assert_eq!(in_pool.existing_allocation_info().policy, PlacementPolicy::Legacy);
        assert_eq!(own.existing_allocation_info().policy, PlacementPolicy::Tight);
        assert!(own.existing_allocation_info().alignment <= 256);
        pool.check_invariants().unwrap();
    });
}

fn assert_tight_not_supported(result: Result<impl std::fmt::Debug, MemoryError>, what: &str) {
    match result {
        Err(MemoryError::Placement { name, source }) => {
            assert_eq!(name, what);
            assert_eq!(source.kind, PlacementErrorKind::TightAlignmentNotSupported, "{what}");
            assert_eq!(source.id(), "TIGHT_ALIGNMENT_NOT_SUPPORTED");
        }
        other => panic!("{what}: expected TIGHT_ALIGNMENT_NOT_SUPPORTED, got {other:?}"),
    }
}

/// Issue #31: where the seed errors — the tight flag on a device without tight support — a
/// resource's own `Tight` is a typed error that creates nothing, on every path; the device's
/// default `Tight` (a preference) places by the legacy rules instead.
#[test]
fn a_resources_own_tight_on_a_device_without_tight_support_is_a_typed_error() {
    /// Turns tight support back on however the test ends (the device is shared).
    struct Restore<'a>(&'a Device);
    impl Drop for Restore<'_> {
        fn drop(&mut self) {
            self.0.set_tight_alignment_supported(true);
        }
    }
    with_policy(PlacementPolicy::Tight, |device| {
        let _restore = Restore(device);
        device.set_tight_alignment_supported(false);
        assert_eq!(device.tight_alignment_tier(), TightAlignmentTier::NotSupported);
        let tight =
            |name: &str| BufferDesc::new(name, 100, BufferUsage::VERTEX).with_policy(PlacementPolicy::Tight);
        assert_tight_not_supported(device.create_buffer(&tight("no tight buffer")), "no tight buffer");
        assert_tight_not_supported(
            device.create_buffer(&tight("no tight committed").committed()),
            "no tight committed",
        );
        let image = ImageDesc::new_2d("no tight image", Format::R8G8B8A8Unorm, 16, 16, ImageUsage::SAMPLED)
            .with_policy(PlacementPolicy::Tight);
        assert_tight_not_supported(device.create_image(&image), "no tight image");
        let pool = BufferPool::new(
            Arc::clone(device),
            BufferPoolDesc::new("unsupported pool", BufferPoolUsage::Unknown),
        )
        .unwrap();
        let init = BufferInit::new("no tight pooled", 100)
            .with_usage(BufferUsage::VERTEX)
            .with_policy(PlacementPolicy::Tight);
        assert_tight_not_supported(pool.init_buffer(&init), "no tight pooled");
        let requirements = vk::MemoryRequirements { size: 256, alignment: 16, memory_type_bits: !0 };
        let desc = AllocationDesc::new("no tight raw").with_policy(PlacementPolicy::Tight);
        assert_tight_not_supported(device.allocate_memory(&requirements, &desc), "no tight raw");
        assert!(
            device.ledger().live_objects().iter().all(|o| !o.name.starts_with("no tight")),
            "a refused request leaves nothing"
        );
        assert_eq!(pool.stats().buffers, 0);
        // The device's own Tight is "tight where supported": legacy here, no error.
        let fallback =
            device.create_buffer(&BufferDesc::new("legacy fallback", 100, BufferUsage::VERTEX)).unwrap();
        let info = fallback.existing_allocation_info();
        assert_eq!((info.policy, info.alignment), (PlacementPolicy::Legacy, KIB_64));
        // And the engine the live device feeds says the same.
        let err = allocation_info(
            &**device,
            Placement::Placed,
            &[ResourceDesc::buffer(100).tight()],
            &mut Vec::new(),
        );
        assert_eq!(err.unwrap_err().kind, PlacementErrorKind::TightAlignmentNotSupported);
        device.set_tight_alignment_supported(true);
        assert_eq!(device.tight_alignment_tier(), TightAlignmentTier::Tier1);
        assert!(device.create_buffer(&tight("tight again")).is_ok());
    });
}

/// Issue #31: committed resources are checked against the committed table, not the placed one:
/// a tight committed buffer is 4 KiB aligned and sized in 4 KiB (the implicit heap's granularity),
/// takes a 4 KiB floor that a tight placed buffer refuses (its maximum is 256 B), and refuses a
/// floor above 4 KiB; legacy committed buffers keep 64 KiB.
#[test]
fn committed_resources_are_checked_against_the_committed_tables_4_kib_cases() {
    with_policy(PlacementPolicy::Tight, |device| {
        let desc =
            |name: &str, floor: u64| BufferDesc::new(name, 100, BufferUsage::VERTEX).with_alignment(floor);
        for floor in [0, 256, KIB_4] {
            let buffer = device.create_buffer(&desc("committed tight", floor).committed()).unwrap();
            let info: ExistingAllocationInfo = buffer.existing_allocation_info();
            assert_eq!(info.placement, Placement::Committed);
            assert_eq!((info.policy, info.offset), (PlacementPolicy::Tight, 0));
            // SAFETY: a live buffer of this device; a pure query.
            let own = unsafe { device.raw().get_buffer_memory_requirements(buffer.raw()) };
            assert_eq!(info.alignment, KIB_4.max(own.alignment), "floor {floor}");
            assert_eq!(info.size, own.size.next_multiple_of(KIB_4), "the implicit heap's 4 KiB granularity");
        }
        match device.create_buffer(&desc("placed 4 KiB floor", KIB_4)) {
            Err(MemoryError::Placement { source, .. }) => assert!(
                matches!(
                    source.kind,
                    PlacementErrorKind::AlignmentAboveMaximum { alignment: KIB_4, maximum: 256 }
                ),
                "{source}"
            ),
            other => panic!("a tight placed buffer's maximum is 256 B: {other:?}"),
        }
        match device.create_buffer(&desc("committed 8 KiB floor", 8 << 10).committed()) {
            Err(MemoryError::Placement { source, .. }) => assert!(
                matches!(source.kind, PlacementErrorKind::AlignmentAboveMaximum { maximum: KIB_4, .. }),
                "{source}"
            ),
            other => panic!("a tight committed buffer's maximum is 4 KiB: {other:?}"),
        }
        // The same answers from the core's engine on the live device.
        let committed = |floor| ResourceDesc::buffer(100).tight().with_alignment(floor);
        let info =
            allocation_info(&**device, Placement::Committed, &[committed(KIB_4)], &mut Vec::new()).unwrap();
        assert_eq!(info.alignment, KIB_4);
        assert!(
            allocation_info(&**device, Placement::Committed, &[committed(8 << 10)], &mut Vec::new()).is_err()
        );
        // A small texture committed: 4 KiB (the committed table's small maximum), at offset 0.
        let small = ImageDesc::new_2d("committed small", Format::R8G8B8A8Unorm, 16, 16, ImageUsage::SAMPLED)
            .committed();
        let image = device.create_image(&small).unwrap();
        let engine = allocation_info(
            &**device,
            Placement::Committed,
            &[small.placement_desc().tight()],
            &mut Vec::new(),
        )
        .unwrap();
        let info = image.existing_allocation_info();
        assert_eq!((info.placement, info.offset), (Placement::Committed, 0));
        assert_eq!(info.alignment, engine.alignment);
        assert!(info.alignment >= KIB_4 && info.size % KIB_4 == 0, "{info:?}");
        // Raw requirements (the renderer binds its own object): committed when dedicated, in an
        // implicit heap of 4 KiB granularity; placed otherwise.
        let requirements = vk::MemoryRequirements { size: 100, alignment: 16, memory_type_bits: !0 };
        let raw =
            device.allocate_memory(&requirements, &AllocationDesc::new("raw committed").dedicated()).unwrap();
        let info = raw.existing_allocation_info();
        assert_eq!(
            (info.placement, info.policy, info.offset),
            (Placement::Committed, PlacementPolicy::Tight, 0)
        );
        assert!(info.alignment >= KIB_4 && info.size % KIB_4 == 0, "{info:?}");
        assert_eq!(info.memory, raw.memory());
        let placed = device.allocate_memory(&requirements, &AllocationDesc::new("raw placed")).unwrap();
        let info = placed.existing_allocation_info();
        assert_eq!(info.placement, Placement::Placed);
        assert_eq!((info.offset % info.alignment, info.offset), (0, placed.offset()));
        // Legacy committed buffers: the legacy table, 64 KiB.
        let legacy = device
            .create_buffer(&desc("committed legacy", 0).committed().with_policy(PlacementPolicy::Legacy))
            .unwrap();
        assert_eq!(legacy.existing_allocation_info().alignment, KIB_64);
    });
}

/// Issue #31: a buffer (or range) larger than a pool's page gets a page of its own, sized by the
/// heap rules, instead of being refused: it works (its bytes round-trip), nothing else is placed
/// on that page, the pool's statistics count it, and its page goes with it (0 leaks at teardown).
#[test]
fn a_buffer_larger_than_a_pools_page_gets_a_page_of_its_own() {
    with_policy(PlacementPolicy::Tight, |device| {
        for usage in
            [BufferPoolUsage::Unknown, BufferPoolUsage::Known(BufferUsage::STORAGE | BufferUsage::TRANSFER)]
        {
            let pool = BufferPool::new(
                Arc::clone(device),
                BufferPoolDesc::new("small pages", usage)
                    .with_page_size(KIB_64)
                    .with_memory(MemoryIntent::Upload),
            )
            .unwrap();
            let init = |name: &str, size| BufferInit::new(name, size).with_usage(BufferUsage::STORAGE);
            let small = pool.init_buffer(&init("small", 100)).unwrap();
            let before = pool.stats();
            assert_eq!((before.pages, before.page_bytes, before.buffers), (1, KIB_64, 1));
            let size = (1 << 20) + 3;
            let mut big = pool.init_buffer(&init("big", size)).unwrap();
            let stats = pool.stats();
            assert_eq!((stats.pages, stats.buffers), (2, 2), "{usage:?}: a page of its own, counted");
            assert_eq!(stats.page_bytes, KIB_64 + explicit_heap_size(size, false), "sized by the heap rules");
            assert!(stats.used_bytes >= size);
            let info = big.existing_allocation_info();
            assert_ne!(info.memory, small.memory().0, "not on the small buffers' page");
            assert_eq!(info.offset, 0);
            let bytes: Vec<u8> = (0..size).map(|i| (i % 251) as u8).collect();
            big.write(0, &bytes).unwrap();
            let mut back = vec![0; bytes.len()];
            big.read(0, &mut back).unwrap();
            assert!(back == bytes, "the big buffer's bytes round-trip");
            // Nothing else goes on its page, though it has room left.
            let more: Vec<Buffer> =
                (0..4).map(|i| pool.init_buffer(&init(&format!("more {i}"), 100)).unwrap()).collect();
            assert!(more.iter().all(|b| b.memory().0 != info.memory));
            pool.check_invariants().unwrap();
            drop(big);
            device.wait_submitted().unwrap();
            device.maintain();
            let after = pool.stats();
            assert_eq!(
                (after.pages, after.page_bytes, after.buffers),
                (1, KIB_64, 5),
                "its page went with it"
            );
            if let BufferPoolUsage::Known(_) = usage {
                let range = pool.allocate_range(3 * KIB_64, 0).unwrap();
                assert_eq!(pool.stats().pages, 2, "a range larger than a page too");
                drop(range);
                device.wait_submitted().unwrap();
                device.maintain();
                assert_eq!(pool.stats().pages, 1);
            }
            drop((small, more));
        }
    });
}

/// Issue #31: the core's heap rules (`placement::heap`) size every heap the device makes: the
/// general allocator's heaps are multiples of the explicit-heap alignment (64 KiB), one that holds
/// a legacy multisampled image (4 MiB aligned) a multiple of the MSAA heap alignment (4 MiB).
#[test]
fn the_core_heap_rules_size_every_heap() {
    use residency_core::placement::heap::{EXPLICIT_HEAP_ALIGNMENT, MSAA_HEAP_ALIGNMENT};
    use residency_core::report::RangeKind;
    use residency_vulkan::ReportSources;
    with_policy(PlacementPolicy::Legacy, |device| {
        let image = device.create_image(&multisampled("heap rules msaa")).unwrap();
        let info = image.existing_allocation_info();
        assert_eq!((info.placement, info.alignment), (Placement::Placed, MSAA_HEAP_ALIGNMENT));
        let buffer =
            device.create_buffer(&BufferDesc::new("heap rules buffer", 100, BufferUsage::VERTEX)).unwrap();
        let report =
            device.memory_report_with(&ReportSources::new().with_images([&image]).with_buffer(&buffer));
        let mut holding_msaa = 0;
        for (_, pool, block) in report.blocks().filter(|(_, pool, block)| pool.is_none() && !block.dedicated)
        {
            assert!(pool.is_none());
            assert_eq!(block.size % EXPLICIT_HEAP_ALIGNMENT, 0, "{}: {} B", block.name, block.size);
            let holds = block.ranges.iter().any(|r| {
                matches!(&r.kind, RangeKind::Allocation(a) if a.name.as_deref() == Some("heap rules msaa"))
            });
            if holds {
                holding_msaa += 1;
                assert_eq!(block.size % MSAA_HEAP_ALIGNMENT, 0, "{}: {} B", block.name, block.size);
            }
        }
        assert_eq!(holding_msaa, 1, "the image is in one general heap");
    });
}
