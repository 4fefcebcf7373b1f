//! Tests of the TLSF allocator: named edge cases, and property tests against a reference model.

use std::collections::{BTreeMap, BTreeSet};

use proptest::prelude::*;

use super::bins::bin_floor;
use super::{AllocError, Allocation, BlockState, DescError, ResourceKind, TlsfAllocator, TlsfDesc};

use ResourceKind::{Linear, Optimal, Unknown};

fn heap(capacity: u64, granularity: u64) -> TlsfAllocator {
    TlsfAllocator::new(TlsfDesc::new(capacity).with_granularity(granularity)).expect("valid desc")
}

fn alloc(heap: &mut TlsfAllocator, size: u64, alignment: u64, kind: ResourceKind) -> Allocation {
    let a = heap.allocate(size, alignment, kind).expect("allocation fits");
    heap.check_invariants().expect("invariants after allocate");
    a
}

fn free(heap: &mut TlsfAllocator, a: Allocation) {
    heap.free(a).expect("own allocation");
    heap.check_invariants().expect("invariants after free");
}

fn page(offset: u64, granularity: u64) -> u64 {
    offset / granularity
}

#[test]
fn new_heap_is_one_free_block() {
    let h = heap(1000, 1);
    h.check_invariants().unwrap();
    let s = h.stats();
    assert_eq!((s.capacity, s.used_bytes, s.free_bytes, s.largest_free_bytes), (1000, 0, 1000, 1000));
    assert_eq!((s.allocation_count, s.free_range_count), (0, 1));
    assert_eq!(s.fragmentation, 0.0);
}

#[test]
fn desc_errors_are_typed() {
    assert_eq!(TlsfAllocator::new(TlsfDesc::new(0)).unwrap_err(), DescError::ZeroCapacity);
    assert_eq!(
        TlsfAllocator::new(TlsfDesc::new(64).with_granularity(3)).unwrap_err(),
        DescError::GranularityNotPowerOfTwo { granularity: 3 }
    );
    assert_eq!(
        TlsfAllocator::new(TlsfDesc::new(64).with_granularity(0)).unwrap_err(),
        DescError::GranularityNotPowerOfTwo { granularity: 0 }
    );
}

#[test]
fn zero_size_and_bad_alignment_are_errors() {
    let mut h = heap(1024, 1);
    assert_eq!(h.allocate(0, 1, Linear).unwrap_err(), AllocError::ZeroSize);
    assert_eq!(h.allocate(8, 0, Linear).unwrap_err(), AllocError::AlignmentNotPowerOfTwo { alignment: 0 });
    assert_eq!(h.allocate(8, 24, Linear).unwrap_err(), AllocError::AlignmentNotPowerOfTwo { alignment: 24 });
    h.check_invariants().unwrap();
}

#[test]
fn alignment_256_after_odd_sizes() {
    let mut h = heap(1 << 20, 1);
    let mut live = Vec::new();
    for size in [1, 3, 7, 255, 257, 1023, 13, 2049] {
        live.push(alloc(&mut h, size, 1, Linear));
        let a = alloc(&mut h, size, 256, Linear);
        assert_eq!(a.offset() % 256, 0, "{a:?}");
        live.push(a);
    }
    // The front padding went back to the free lists: an unaligned allocation can use it.
    let free_before = h.stats().free_range_count;
    assert!(free_before > 1);
    let small = alloc(&mut h, 1, 1, Linear);
    assert!(small.offset() < live.last().unwrap().offset());
    live.push(small);
    for a in live {
        free(&mut h, a);
    }
    assert_eq!(h.stats().free_range_count, 1);
}

#[test]
fn padding_blocks_are_reused_and_coalesced() {
    let mut h = heap(4096, 1);
    let a = alloc(&mut h, 10, 1, Linear); // [0, 10)
    let b = alloc(&mut h, 16, 64, Linear); // [64, 80); padding [10, 64) is free
    assert_eq!(b.offset(), 64);
    let pad = h.blocks().nth(1).unwrap();
    assert_eq!((pad.offset, pad.size, pad.state), (10, 54, BlockState::Free));
    free(&mut h, a); // [0, 64) coalesces into one free block
    let first = h.blocks().next().unwrap();
    assert_eq!((first.offset, first.size, first.state), (0, 64, BlockState::Free));
    free(&mut h, b);
    assert_eq!(h.blocks().count(), 1);
}

#[test]
fn granularity_moves_optimal_after_linear_to_next_page() {
    let mut h = heap(1 << 16, 1024);
    let buffer = alloc(&mut h, 100, 16, Linear);
    let image = alloc(&mut h, 100, 16, Optimal);
    assert_eq!(buffer.offset(), 0);
    assert_eq!(image.offset(), 1024, "optimal image must start on the next granularity page");
    // Another buffer shares the first page with the first buffer, not the image's page.
    let buffer2 = alloc(&mut h, 100, 16, Linear);
    assert!(page(buffer2.offset(), 1024) != page(image.offset(), 1024));
    for a in [buffer, image, buffer2] {
        free(&mut h, a);
    }
}

#[test]
fn granularity_limits_the_end_before_a_conflicting_neighbour() {
    let mut h = heap(4096, 1024);
    let filler = alloc(&mut h, 1024, 1, Linear); // [0, 1024)
    let image = alloc(&mut h, 100, 1, Optimal); // [1024, 1124)
    assert_eq!(image.offset(), 1024);
    free(&mut h, filler); // [0, 1024) free, above it an optimal image
                          // Below the image, a buffer may use the whole page before the image's page...
    let buffer = alloc(&mut h, 1000, 1, Linear);
    assert_eq!(buffer.offset(), 0);
    // ...and a buffer that would not fit there goes above the image, on the page after its last.
    let above = alloc(&mut h, 30, 1, Linear);
    assert_eq!(above.offset(), 2048);
    // A buffer that ends exactly at the page boundary below the image is fine.
    let small = alloc(&mut h, 24, 1, Linear);
    assert_eq!(small.offset(), 1000);
    // An optimal image, the same kind as the neighbour, can share the image's pages.
    let image2 = alloc(&mut h, 16, 1, Optimal);
    assert_eq!(image2.offset(), 1124);
    for a in [buffer, image, small, above, image2] {
        free(&mut h, a);
    }
}

#[test]
fn same_kind_shares_a_page() {
    let mut h = heap(1 << 16, 1024);
    let a = alloc(&mut h, 100, 1, Optimal);
    let b = alloc(&mut h, 100, 1, Optimal);
    assert_eq!(b.offset(), 100);
    let c = alloc(&mut h, 100, 1, Linear);
    assert_eq!(c.offset(), 1024);
    let d = alloc(&mut h, 100, 1, Linear);
    assert_eq!(d.offset(), 1124);
    for x in [a, b, c, d] {
        free(&mut h, x);
    }
}

#[test]
fn unknown_kind_gets_pages_of_its_own() {
    let mut h = heap(1 << 16, 256);
    let a = alloc(&mut h, 10, 1, Unknown);
    let b = alloc(&mut h, 10, 1, Unknown);
    let c = alloc(&mut h, 10, 1, Linear);
    assert_eq!((a.offset(), b.offset(), c.offset()), (0, 256, 512));
    for x in [a, b, c] {
        free(&mut h, x);
    }
}

#[test]
fn full_heap_returns_out_of_space_with_numbers() {
    let mut h = heap(1000, 1);
    let a = alloc(&mut h, 600, 1, Linear);
    let err = h.allocate(500, 1, Linear).unwrap_err();
    assert_eq!(err, AllocError::OutOfSpace { size: 500, alignment: 1, largest_free: 400, free: 400 });
    assert!(err.to_string().contains("largest free range 400 B"));
    let b = alloc(&mut h, 400, 1, Linear);
    assert_eq!(h.stats().free_bytes, 0);
    assert_eq!(h.stats().largest_free_bytes, 0);
    assert!(matches!(h.allocate(1, 1, Linear), Err(AllocError::OutOfSpace { largest_free: 0, .. })));
    free(&mut h, a);
    free(&mut h, b);
}

#[test]
fn alignment_larger_than_the_heap_is_out_of_space_not_a_panic() {
    let mut h = heap(u64::MAX, 1);
    let a = alloc(&mut h, 1, 1, Linear);
    let high = alloc(&mut h, 1, 1 << 63, Linear);
    assert_eq!(high.offset(), 1 << 63);
    assert!(matches!(h.allocate(u64::MAX, 1, Linear), Err(AllocError::OutOfSpace { .. })));
    assert!(matches!(h.allocate(1, 1 << 63, Linear), Err(AllocError::OutOfSpace { .. })));
    h.check_invariants().unwrap();
    free(&mut h, a);
    free(&mut h, high);
}

#[test]
fn a_request_fits_in_the_whole_heap_exactly() {
    let mut h = heap(12345, 64);
    let a = alloc(&mut h, 12345, 1, Unknown);
    assert_eq!(h.stats().free_range_count, 0);
    free(&mut h, a);
    assert_eq!(h.stats().largest_free_bytes, 12345);
}

#[test]
fn free_everything_leaves_one_block_of_the_whole_capacity() {
    let mut h = heap(1 << 20, 256);
    let kinds = [Linear, Optimal, Unknown];
    let mut live: Vec<Allocation> =
        (0..300u64).map(|i| alloc(&mut h, 1 + i * 37 % 3000, 1 << (i % 9), kinds[i as usize % 3])).collect();
    // Free in an interleaved order so that coalescing meets free neighbours on both sides.
    let mut order: Vec<Allocation> = Vec::new();
    while !live.is_empty() {
        let i = (order.len() * 7919) % live.len();
        order.push(live.swap_remove(i));
    }
    for a in order {
        free(&mut h, a);
    }
    let blocks: Vec<_> = h.blocks().collect();
    assert_eq!(blocks.len(), 1);
    assert_eq!((blocks[0].offset, blocks[0].size, blocks[0].state), (0, 1 << 20, BlockState::Free));
    let s = h.stats();
    assert_eq!((s.used_bytes, s.allocation_count, s.free_range_count), (0, 0, 1));
}

#[test]
fn slow_path_finds_a_fitting_block_behind_the_bin_head() {
    // Two free blocks of 64 B in the same bin: one starts unaligned, one aligned. The head is
    // whichever was freed last; free the unaligned one last so the head does not fit.
    let mut h = heap(1024, 1);
    let a = alloc(&mut h, 64, 1, Linear); // [0, 64)
    let s1 = alloc(&mut h, 1, 1, Linear); // [64, 65)
    let b = alloc(&mut h, 64, 1, Linear); // [65, 129)
    let s2 = alloc(&mut h, 1, 1, Linear); // [129, 130)
    let rest = alloc(&mut h, 1024 - 130, 1, Linear);
    free(&mut h, a);
    free(&mut h, b); // head of the bin: [65, 129), not 64-aligned
    let c = alloc(&mut h, 64, 64, Linear);
    assert_eq!(c.offset(), 0);
    for x in [s1, s2, rest, c] {
        free(&mut h, x);
    }
}

#[test]
fn foreign_allocation_is_rejected() {
    let mut one = heap(1024, 1);
    let mut two = heap(1024, 1);
    let a = one.allocate(16, 1, Linear).unwrap();
    assert_eq!(two.free(a).unwrap_err(), AllocError::ForeignAllocation { offset: 0, size: 16 });
    two.check_invariants().unwrap();
    one.check_invariants().unwrap();
}

#[test]
fn fragmentation_is_one_minus_largest_over_free() {
    let mut h = heap(400, 1);
    let a = alloc(&mut h, 100, 1, Linear);
    let b = alloc(&mut h, 100, 1, Linear);
    let c = alloc(&mut h, 100, 1, Linear);
    free(&mut h, b); // free: [100, 200) and [300, 400)
    let s = h.stats();
    assert_eq!((s.free_bytes, s.largest_free_bytes, s.free_range_count), (200, 100, 2));
    assert!((s.fragmentation - 0.5).abs() < 1e-12);
    free(&mut h, a);
    free(&mut h, c);
    assert_eq!(h.stats().fragmentation, 0.0);
}

// ---- property tests against a reference model ----

/// The reference: live allocations by offset, each with its size and kind. Every question is
/// answered by brute force over this map.
#[derive(Default)]
struct Model {
    live: BTreeMap<u64, (u64, ResourceKind)>,
}

impl Model {
    fn check_new(&self, offset: u64, size: u64, alignment: u64, kind: ResourceKind, h: &TlsfAllocator) {
        let g = h.granularity();
        assert_eq!(offset % alignment, 0, "aligned");
        assert!(offset + size <= h.capacity(), "in bounds");
        for (&o, &(s, k)) in &self.live {
            assert!(offset + size <= o || o + s <= offset, "overlap with [{o}, {})", o + s);
            if k.conflicts_with(kind) {
                let (lo1, hi1) = (offset / g, (offset + size - 1) / g);
                let (lo2, hi2) = (o / g, (o + s - 1) / g);
                assert!(hi1 < lo2 || hi2 < lo1, "granularity page shared with [{o}, {}) {k:?}", o + s);
            }
        }
    }

    /// Whether some placement exists, by the same rule stated on the gaps between live blocks.
    fn any_fit(&self, size: u64, alignment: u64, kind: ResourceKind, capacity: u64, g: u64) -> bool {
        let mut below: Option<(u64, ResourceKind)> = None; // end and kind of the block below
        let mut gap_start = 0;
        let mut gaps = Vec::new();
        for (&o, &(s, k)) in &self.live {
            gaps.push((gap_start, o, below, Some((o, k))));
            gap_start = o + s;
            below = Some((o + s, k));
        }
        gaps.push((gap_start, capacity, below, None));
        gaps.into_iter().any(|(start, end, below, above)| {
            let Some(mut offset) = start.checked_next_multiple_of(alignment) else { return false };
            if let Some((below_end, k)) = below {
                if k.conflicts_with(kind) && (below_end - 1) / g == offset / g {
                    let Some(o) = offset.checked_next_multiple_of(g) else { return false };
                    offset = o;
                }
            }
            let mut limit = end;
            if let Some((above_start, k)) = above {
                if k.conflicts_with(kind) {
                    limit = above_start / g * g;
                }
            }
            offset.checked_add(size).is_some_and(|e| e <= limit)
        })
    }
}

/// The bound of the slow path: the same failing request again (nothing changed) visits only the
/// free blocks of bins that hold a block at least `size` large (each of which might fit, depending
/// on its start), and none at all at alignment 1 without granularity.
fn check_repeated_failure_is_bounded(h: &mut TlsfAllocator, size: u64, alignment: u64, kind: ResourceKind) {
    let free: Vec<u64> = h.blocks().filter(|b| b.state == BlockState::Free).map(|b| b.size).collect();
    let big_bins: BTreeSet<usize> = free.iter().filter(|&&s| s >= size).map(|&s| bin_floor(s)).collect();
    let bound = free.iter().filter(|&&s| big_bins.contains(&bin_floor(s))).count() as u64;
    let before = h.slow_path_visits();
    assert!(matches!(h.allocate(size, alignment, kind), Err(AllocError::OutOfSpace { .. })));
    let visited = h.slow_path_visits() - before;
    assert!(visited <= bound, "repeated failure visited {visited} blocks, bound {bound}");
    if alignment == 1 && h.granularity() == 1 {
        assert_eq!(visited, 0, "a repeated failure at alignment 1 visits nothing");
    }
}

#[test]
fn failing_request_among_many_fragments_visits_at_most_one_block() {
    // w5-fail-fragmented in small: fragments of 64 B between used blocks of 64 B, then requests
    // that fit none of them (65 B lands in the fragments' bin, the others above it).
    const FRAGMENTS: u64 = 20_000;
    let mut h = heap(FRAGMENTS * 128, 1);
    let mut live: Vec<Allocation> = (0..2 * FRAGMENTS).map(|_| h.allocate(64, 1, Linear).unwrap()).collect();
    let mut kept = Vec::new();
    for (i, a) in live.drain(..).enumerate() {
        if i % 2 == 0 {
            h.free(a).unwrap();
        } else {
            kept.push(a);
        }
    }
    h.check_invariants().unwrap();
    assert_eq!(h.stats().free_range_count, FRAGMENTS);
    // The fragments' bin bounds its sizes by 64, so the first failure skips it and takes the
    // largest free range from the first block of the top bin; later failures visit nothing.
    let first = h.slow_path_visits();
    assert!(h.allocate(65, 1, Linear).is_err());
    assert!(h.slow_path_visits() - first <= 1);
    let settled = h.slow_path_visits();
    for size in [65, 66, 100, 128, 4096, 1 << 20].into_iter().cycle().take(600) {
        let err = h.allocate(size, 1, Linear).unwrap_err();
        assert_eq!(
            err,
            AllocError::OutOfSpace { size, alignment: 1, largest_free: 64, free: FRAGMENTS * 64 }
        );
    }
    assert_eq!(h.slow_path_visits(), settled, "failures on a settled heap visit no block");
    // Taking a fragment changes the heap: the next failure takes the largest free range again
    // (the top bin's first block is as large as its bound), then failures visit nothing.
    let taken = h.allocate(64, 1, Linear).unwrap();
    h.check_invariants().unwrap();
    assert!(h.allocate(65, 1, Linear).is_err());
    assert!(h.slow_path_visits() - settled <= 1);
    let settled = h.slow_path_visits();
    assert!(h.allocate(65, 1, Linear).is_err());
    assert_eq!(h.slow_path_visits(), settled);
    h.free(taken).unwrap();
    h.check_invariants().unwrap();
    for a in kept {
        h.free(a).unwrap();
    }
    h.check_invariants().unwrap();
    assert_eq!(h.stats().largest_free_bytes, FRAGMENTS * 128);
}

#[derive(Clone, Debug)]
enum Op {
    Alloc { size: u64, align_log2: u32, kind: ResourceKind },
    Free { index: usize },
}

fn op_strategy(max_size: u64) -> impl Strategy<Value = Op> {
    let kind = prop_oneof![Just(Linear), Just(Optimal), Just(Unknown)];
    prop_oneof![
        3 => (1..=max_size, 0u32..=9, kind).prop_map(|(size, align_log2, kind)| Op::Alloc { size, align_log2, kind }),
        2 => any::<usize>().prop_map(|index| Op::Free { index }),
    ]
}

fn run_against_model(capacity: u64, granularity: u64, ops: Vec<Op>) {
    let mut h = heap(capacity, granularity);
    let mut model = Model::default();
    let mut handles: Vec<Allocation> = Vec::new();
    for op in ops {
        match op {
            Op::Alloc { size, align_log2, kind } => {
                let alignment = 1u64 << align_log2;
                match h.allocate(size, alignment, kind) {
                    Ok(a) => {
                        assert_eq!(a.size(), size);
                        // The model keeps footprints: the request with its end rounded up.
                        let footprint = h.blocks().find(|b| b.offset == a.offset()).expect("block").size;
                        let rounding = alignment.min(256);
                        assert!(footprint >= size && footprint - size < rounding, "footprint {footprint}");
                        model.check_new(a.offset(), footprint, alignment, kind, &h);
                        model.live.insert(a.offset(), (footprint, kind));
                        handles.push(a);
                    }
                    Err(AllocError::OutOfSpace { largest_free, free, .. }) => {
                        assert!(
                            !model.any_fit(size, alignment, kind, capacity, granularity),
                            "allocator refused {size} B @ {alignment} ({kind:?}) but the model has room"
                        );
                        let s = h.stats();
                        assert_eq!((largest_free, free), (s.largest_free_bytes, s.free_bytes));
                        check_repeated_failure_is_bounded(&mut h, size, alignment, kind);
                    }
                    Err(e) => panic!("unexpected error {e}"),
                }
            }
            Op::Free { index } => {
                if handles.is_empty() {
                    continue;
                }
                let a = handles.swap_remove(index % handles.len());
                assert!(model.live.remove(&a.offset()).is_some());
                h.free(a).unwrap();
            }
        }
        h.check_invariants().unwrap_or_else(|e| panic!("invariant broken: {e}"));
        let s = h.stats();
        assert_eq!(s.used_bytes, model.live.values().map(|&(s, _)| s).sum::<u64>());
        assert!(s.requested_bytes <= s.used_bytes);
        assert_eq!(s.allocation_count, model.live.len() as u64);
        assert_eq!(s.used_bytes + s.free_bytes, capacity);
    }
    for a in handles {
        h.free(a).unwrap();
        h.check_invariants().unwrap_or_else(|e| panic!("invariant broken while draining: {e}"));
    }
    let blocks: Vec<_> = h.blocks().collect();
    assert_eq!(blocks.len(), 1, "everything freed leaves one block");
    assert_eq!(blocks[0].size, capacity);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    #[test]
    fn matches_model_small_heaps(
        capacity in 1u64..=4096,
        granularity in prop_oneof![Just(1u64), Just(16), Just(64), Just(256)],
        ops in prop::collection::vec(op_strategy(600), 1..120),
    ) {
        run_against_model(capacity, granularity, ops);
    }

    #[test]
    fn matches_model_large_heaps(
        capacity in (1u64 << 16)..=(1u64 << 40),
        granularity in prop_oneof![Just(1u64), Just(1024), Just(65536)],
        ops in prop::collection::vec(op_strategy(1 << 20), 1..120),
    ) {
        run_against_model(capacity, granularity, ops);
    }
}

#[test]
fn ends_round_up_to_the_alignment_so_the_next_request_needs_no_padding() {
    let mut h = heap(1 << 16, 1);
    let a = alloc(&mut h, 10, 256, Linear);
    let b = alloc(&mut h, 300, 256, Linear);
    assert_eq!((a.offset(), b.offset()), (0, 256));
    let s = h.stats();
    assert_eq!((s.requested_bytes, s.used_bytes), (310, 256 + 512));
    assert_eq!(s.free_range_count, 1, "no padding blocks between aligned allocations");
    // Rounding stops at 256 B: a 4 KiB-aligned request leaves its tail to the free lists.
    let c = alloc(&mut h, 10, 4096, Linear);
    assert_eq!(c.offset(), 4096);
    assert_eq!(h.stats().used_bytes, 256 + 512 + 256);
    for x in [a, b, c] {
        free(&mut h, x);
    }
}

#[test]
fn reserved_nodes_are_used_before_new_ones_and_keep_the_invariants() {
    let mut h = heap(1 << 16, 64);
    h.reserve(4);
    let a = alloc(&mut h, 100, 1, Linear);
    let b = alloc(&mut h, 100, 256, Optimal); // padding, tail: more blocks than reserved spares
    free(&mut h, a); // a's node goes back to the spare stack
    h.reserve(3); // on top of the spares there are
    let mut live: Vec<Allocation> =
        (0..20u64).map(|i| alloc(&mut h, 1 + i * 97, 1 << (i % 5), Linear)).collect();
    live.push(b);
    for x in live {
        free(&mut h, x);
    }
    assert_eq!(h.blocks().count(), 1);
    assert_eq!(h.stats().free_range_count, 1);
}
