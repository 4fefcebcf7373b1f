//! The `placement_path` target: the placement engine in the allocation path, as a pool places a
//! resource (`Device::placed_alignment` in `crates/residency-vulkan/src/memory/placement.rs`,
//! mirrored here from the core's pieces): the engine's answer under a policy (tight where the
//! device's tier allows, or legacy) for a buffer of the requested size or a non-small optimal
//! texture, with the caller's floor, raised to the usage floors ([`alignment_floor`] of the
//! buffer's use cases on the device's limits), then a TLSF heap of the device's
//! `bufferImageGranularity` placing it, and frees.
//!
//! Checked: an answer or `AlignmentAboveMaximum` exactly when the caller's floor is above the
//! rules' maximum; every alignment a power of two, at least the engine's, the usage floor and
//! the caller's floor; tight never above legacy for the same request; every placed offset a
//! multiple of all of them, inside the heap and overlapping no live resource (a model of live
//! ranges); the heap's own checker (kinds on separate granularity pages) every
//! [`FULL_CHECK_INTERVAL`] operations and at the end; empty once everything is freed.

use crate::input::Input;
use residency_core::allocator::{AllocError, Allocation, ResourceKind, TlsfAllocator, TlsfDesc};
use residency_core::format::Format;
use residency_core::placement::{
    alignment_floor, BufferUse, FixedRequirements, Placement, PlacementEngine, PlacementErrorKind,
    RequirementsSource, ResourceDesc, ResourceFlag, TightAlignmentTier,
};
use std::collections::BTreeMap;

/// Operations per input at most (a 4 KiB input holds hundreds).
const MAX_OPS: usize = 256;
/// The heap's full checker runs after each of the first this many operations…
const FULL_CHECK_PREFIX: usize = 4;
/// …then every this many and at the end (the model's overlap and alignment checks run after
/// every operation). With 16 and 32, the walks were 41 % of the target's time.
const FULL_CHECK_INTERVAL: usize = 64;

/// A random device as the `placement` target makes one: power-of-two alignments, sometimes no
/// tight alignment.
fn device(input: &mut Input<'_>) -> FixedRequirements {
    let mut s = FixedRequirements::discrete();
    let mut pow2 = |max: u64| 1u64 << input.below(max + 1);
    s.buffer_alignment = pow2(9);
    s.uniform_alignment = pow2(8);
    s.texel_alignment = pow2(8);
    s.buffer_size_granularity = pow2(8);
    s.image_alignment = pow2(16);
    s.large_image_alignment = pow2(16);
    s.limits.buffer_image_granularity = pow2(16);
    s.limits.min_uniform_buffer_offset_alignment = pow2(8);
    s.limits.min_storage_buffer_offset_alignment = pow2(8);
    s.limits.min_texel_buffer_offset_alignment = pow2(8);
    if input.u8() % 4 == 0 {
        s.tier_override = Some(TightAlignmentTier::NotSupported);
    }
    s
}

/// What a pool asks the engine: a buffer of `size` bytes, or (an image's raw requirements) a
/// non-small render-target texture; tight or not; with the caller's floor.
fn request(buffer: bool, size: u64, tight: bool, floor: u64) -> ResourceDesc {
    let desc = if buffer {
        ResourceDesc::buffer(size.max(1))
    } else {
        ResourceDesc::texture_2d(Format::R8Unorm, 1, 1)
            .with_mip_levels(1)
            .with_flag(ResourceFlag::AllowRenderTarget)
    };
    let desc = if tight { desc.tight() } else { desc };
    desc.with_alignment(floor)
}

pub(crate) fn run(data: &[u8]) {
    let mut input = Input::new(data);
    let source = device(&mut input);
    let limits = source.limits().clone();
    let engine = PlacementEngine::new(&source);
    let tier = engine.tier();
    let granularity = limits.buffer_image_granularity.max(1);
    let capacity = input.range(1, 1 << 26);
    let mut heap = TlsfAllocator::new(TlsfDesc::new(capacity).with_granularity(granularity)).expect("valid");
    // Live placements by offset: size, alignment they need.
    let mut live: BTreeMap<u64, (u64, u64)> = BTreeMap::new();
    let mut handles: Vec<Allocation> = Vec::new();
    for op in 0..MAX_OPS {
        if input.is_empty() {
            break;
        }
        if input.u8() % 3 == 0 {
            if !handles.is_empty() {
                let a = handles.swap_remove(input.below(handles.len() as u64) as usize);
                assert!(live.remove(&a.offset()).is_some());
                heap.free(a).expect("a live allocation frees");
            }
        } else {
            place(&engine, tier, &limits, &mut heap, &mut live, &mut handles, &mut input);
        }
        assert_eq!(heap.stats().allocation_count, live.len() as u64);
        if op < FULL_CHECK_PREFIX || (op + 1) % FULL_CHECK_INTERVAL == 0 {
            heap.check_invariants().unwrap_or_else(|e| panic!("heap invariant broken: {e}"));
        }
    }
    heap.check_invariants().unwrap_or_else(|e| panic!("heap invariant broken: {e}"));
    for a in handles {
        heap.free(a).expect("a live allocation frees");
    }
    let stats = heap.stats();
    assert_eq!((stats.allocation_count, stats.used_bytes), (0, 0));
    heap.check_invariants().unwrap_or_else(|e| panic!("heap invariant broken: {e}"));
}

fn place(
    engine: &PlacementEngine<&FixedRequirements>,
    tier: TightAlignmentTier,
    limits: &residency_core::profile::Limits,
    heap: &mut TlsfAllocator,
    live: &mut BTreeMap<u64, (u64, u64)>,
    handles: &mut Vec<Allocation>,
    input: &mut Input<'_>,
) {
    let buffer = input.u8() % 4 != 0;
    let size = match input.u8() % 8 {
        0 => input.size(),
        _ => input.range(1, 1 << 20),
    };
    let uses: Vec<BufferUse> = if buffer {
        let bits = input.u8();
        BufferUse::ALL.into_iter().enumerate().filter(|(i, _)| bits & (1 << i) != 0).map(|(_, u)| u).collect()
    } else {
        Vec::new()
    };
    let floor = match input.u8() % 4 {
        0 => 1 << input.below(20),
        1 => input.alignment(63),
        _ => 0,
    };
    let tight_policy = input.bool();
    let usage_floor = alignment_floor(&uses, limits);
    assert!(usage_floor == 0 || usage_floor.is_power_of_two(), "usage floor {usage_floor}");
    let tight = tight_policy && tier != TightAlignmentTier::NotSupported;
    let answer = engine.resource_allocation_info(
        Placement::Placed,
        &request(buffer, size, tight, floor),
        &mut Vec::new(),
    );
    // Tight is never above legacy for the same request.
    let legacy = engine.resource_allocation_info(
        Placement::Placed,
        &request(buffer, size, false, floor),
        &mut Vec::new(),
    );
    let element = match (answer, legacy) {
        (Ok(e), Ok(l)) => {
            assert!(e.alignment <= l.alignment && e.size <= l.size, "tight {e:?} above legacy {l:?}");
            e
        }
        (Err(e), _) => {
            match e.kind {
                PlacementErrorKind::AlignmentAboveMaximum { alignment, maximum } => {
                    assert!(alignment == floor && floor > maximum, "{e}")
                }
                PlacementErrorKind::AlignmentNotPowerOfTwo { alignment } => {
                    assert!(alignment == floor && !floor.is_power_of_two(), "{e}")
                }
                PlacementErrorKind::AboveDeviceLimit { what: "buffer width", value, maximum } => {
                    assert!(
                        buffer && value == size && size > maximum && maximum == limits.max_buffer_size,
                        "{e}"
                    )
                }
                PlacementErrorKind::SizeOverflow => assert!(buffer && size > 1 << 40, "{e}"),
                _ => panic!("a pool's request refused: {e}"),
            }
            return;
        }
        (Ok(e), Err(l)) => {
            // Legacy's maximum is at least tight's: a floor legacy refuses, tight refuses too.
            assert!(
                matches!(l.kind, PlacementErrorKind::SizeOverflow),
                "legacy refused what tight placed: {l} ({e:?})"
            );
            e
        }
    };
    assert!(element.alignment.is_power_of_two(), "{element:?}");
    assert!(element.alignment >= floor.max(1), "below the caller's floor: {element:?}");
    assert!(!buffer || element.size >= size, "smaller than the buffer: {element:?}");
    let alignment = element.alignment.max(usage_floor);
    let kind = if buffer { ResourceKind::Linear } else { ResourceKind::Optimal };
    match heap.allocate(element.size, alignment, kind) {
        Ok(a) => {
            let offset = a.offset();
            assert_eq!(offset % alignment, 0);
            assert_eq!(offset % element.alignment, 0);
            assert!(usage_floor == 0 || offset % usage_floor == 0);
            let end = offset.checked_add(element.size).expect("in the heap");
            assert!(end <= heap.capacity(), "{a:?} beyond the heap");
            if let Some((&o, &(s, _))) = live.range(..=offset).next_back() {
                assert!(o + s <= offset, "{a:?} overlaps the live [{o}, +{s})");
            }
            if let Some((&o, _)) = live.range(offset..).next() {
                assert!(end <= o, "{a:?} overlaps the live resource at {o}");
            }
            live.insert(offset, (element.size, alignment));
            handles.push(a);
        }
        Err(AllocError::OutOfSpace { .. }) => {}
        Err(e) => panic!("placing {element:?} at alignment {alignment}: {e}"),
    }
}
