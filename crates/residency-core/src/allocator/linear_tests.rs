//! Tests of the linear allocator: named edge cases per mode and property tests against a model.

use proptest::prelude::*;

use super::{DescError, LinearAllocation, LinearAllocator, LinearDesc, LinearError, LinearMode};

fn linear(capacity: u64, mode: LinearMode) -> LinearAllocator {
    LinearAllocator::new(LinearDesc::new(capacity).with_mode(mode)).expect("valid capacity")
}

#[test]
fn zero_capacity_is_rejected() {
    assert_eq!(LinearAllocator::new(LinearDesc::new(0)).unwrap_err(), DescError::ZeroCapacity);
}

#[test]
fn bad_requests_are_typed_errors() {
    let mut a = linear(1024, LinearMode::Stack);
    assert_eq!(a.allocate(0, 1).unwrap_err(), LinearError::ZeroSize);
    assert_eq!(a.allocate(1, 3).unwrap_err(), LinearError::AlignmentNotPowerOfTwo { alignment: 3 });
    assert_eq!(a.allocate(1, 0).unwrap_err(), LinearError::AlignmentNotPowerOfTwo { alignment: 0 });
    assert_eq!(
        a.allocate_upper(1, 1).unwrap_err(),
        LinearError::UpperNeedsDoubleStack { mode: LinearMode::Stack }
    );
    assert_eq!(
        a.allocate(2048, 1).unwrap_err(),
        LinearError::OutOfSpace { size: 2048, alignment: 1, largest_free: 1024, free: 1024 }
    );
    a.check_invariants().unwrap();
}

#[test]
fn stack_allocations_are_aligned_and_padding_is_charged() {
    let mut a = linear(4096, LinearMode::Stack);
    let x = a.allocate(10, 1).unwrap();
    let y = a.allocate(10, 256).unwrap();
    let z = a.allocate(1, 16).unwrap();
    assert_eq!((x.offset(), y.offset(), z.offset()), (0, 256, 272));
    assert_eq!(a.requested_bytes(), 21);
    assert_eq!(a.used_bytes(), 273, "the 246 B gap before `y` and 6 B before `z` are padding");
    assert_eq!(a.free_bytes(), 4096 - 273);
    for h in [z, y, x] {
        a.free(h).unwrap();
        a.check_invariants().unwrap();
    }
    assert_eq!((a.used_bytes(), a.allocation_count()), (0, 0));
}

#[test]
fn stack_interior_free_returns_space_only_when_the_top_frees() {
    let mut a = linear(1000, LinearMode::Stack);
    let _bottom = a.allocate(100, 1).unwrap();
    let middle = a.allocate(200, 1).unwrap();
    let _top = a.allocate(300, 1).unwrap();
    a.free(middle).unwrap();
    a.check_invariants().unwrap();
    assert_eq!((a.used_bytes(), a.pending_bytes(), a.free_bytes()), (400, 200, 400));
    assert_eq!(a.largest_free(), 400, "the interior hole is not reusable yet");
    assert_eq!(a.allocate(50, 1).unwrap().offset(), 600, "allocation stays at the top");
    // (`a`'s handles leak on purpose: dropping a handle keeps its range.)
    let mut b = linear(1000, LinearMode::Stack);
    let bottom_b = b.allocate(100, 1).unwrap();
    let middle_b = b.allocate(200, 1).unwrap();
    let top_b = b.allocate(300, 1).unwrap();
    b.free(middle_b).unwrap();
    b.free(top_b).unwrap();
    b.check_invariants().unwrap();
    assert_eq!((b.used_bytes(), b.pending_bytes()), (100, 0), "top and the hole below it return together");
    assert_eq!(b.allocate(10, 1).unwrap().offset(), 100);
    b.free(bottom_b).unwrap();
    b.check_invariants().unwrap();
}

#[test]
fn double_stack_grows_from_both_ends_and_refuses_to_overlap() {
    let mut a = linear(1000, LinearMode::DoubleStack);
    let low = a.allocate(300, 16).unwrap();
    let high = a.allocate_upper(100, 64).unwrap();
    assert_eq!(low.offset(), 0);
    assert_eq!(high.offset(), 896, "align_down(1000 - 100, 64)");
    assert!(high.is_upper());
    assert_eq!(a.used_bytes(), 300 + 104, "the 4 B above `high` are its padding");
    assert_eq!(
        a.allocate(700, 1).unwrap_err(),
        LinearError::StacksWouldOverlap { size: 700, alignment: 1, lower_top: 300, upper_bottom: 896 }
    );
    assert_eq!(
        a.allocate_upper(597, 1).unwrap_err(),
        LinearError::StacksWouldOverlap { size: 597, alignment: 1, lower_top: 300, upper_bottom: 896 }
    );
    let fill = a.allocate_upper(596, 1).unwrap();
    assert_eq!(fill.offset(), 300, "exactly meets the lower stack");
    assert_eq!(a.free_bytes(), 0);
    a.check_invariants().unwrap();
    a.free(high).unwrap();
    assert_eq!(a.pending_bytes(), 104, "interior of the upper stack");
    a.free(fill).unwrap();
    a.free(low).unwrap();
    a.check_invariants().unwrap();
    assert_eq!((a.used_bytes(), a.pending_bytes(), a.largest_free()), (0, 0, 1000));
    // Without anything in the other stack, too large is plain out of space.
    assert!(matches!(a.allocate_upper(1001, 1), Err(LinearError::OutOfSpace { .. })));
}

#[test]
fn ring_wraps_to_the_start_once_the_front_is_freed() {
    let mut a = linear(1000, LinearMode::Ring);
    let first = a.allocate(400, 1).unwrap();
    let second = a.allocate(400, 1).unwrap();
    assert_eq!(
        a.allocate(300, 1).unwrap_err(),
        LinearError::OutOfSpace { size: 300, alignment: 1, largest_free: 200, free: 200 }
    );
    a.free(first).unwrap();
    a.check_invariants().unwrap();
    assert_eq!(a.largest_free(), 400, "the 200 B tail or the 400 B front");
    let wrapped = a.allocate(300, 1).unwrap();
    assert_eq!(wrapped.offset(), 0);
    assert_eq!(a.used_bytes(), 400 + 200 + 300, "the skipped tail is charged to the wrapped allocation");
    a.check_invariants().unwrap();
    assert!(a.allocate(101, 1).unwrap_err().to_string().contains("largest free run 100 B"));
    let next = a.allocate(100, 1).unwrap();
    assert_eq!(next.offset(), 300);
    a.free(second).unwrap();
    a.check_invariants().unwrap();
    assert_eq!(a.used_bytes(), 300 + 200 + 100, "front is now the wrapped one");
    a.free(wrapped).unwrap();
    a.free(next).unwrap();
    a.check_invariants().unwrap();
    assert_eq!((a.used_bytes(), a.largest_free()), (0, 1000));
    assert_eq!(a.allocate(1000, 1).unwrap().offset(), 0, "an empty ring restarts at offset 0");
}

#[test]
fn ring_out_of_order_free_waits_for_the_front() {
    let mut a = linear(300, LinearMode::Ring);
    let x = a.allocate(100, 1).unwrap();
    let y = a.allocate(100, 1).unwrap();
    let z = a.allocate(100, 1).unwrap();
    a.free(y).unwrap();
    assert_eq!((a.used_bytes(), a.pending_bytes(), a.free_bytes()), (200, 100, 0));
    a.free(x).unwrap();
    assert_eq!((a.used_bytes(), a.pending_bytes(), a.free_bytes()), (100, 0, 200));
    assert_eq!(a.allocate(200, 1).unwrap().offset(), 0);
    a.check_invariants().unwrap();
    a.free(z).unwrap();
    a.check_invariants().unwrap();
}

#[test]
fn a_foreign_handle_is_an_unknown_allocation() {
    let mut a = linear(100, LinearMode::Stack);
    let mut b = linear(100, LinearMode::Stack);
    let h = a.allocate(10, 1).unwrap();
    assert_eq!(b.free(h).unwrap_err(), LinearError::UnknownAllocation { offset: 0, size: 10 });
    assert_eq!(a.allocation_count(), 1, "`a` still counts it (the handle was consumed: a leak)");
    a.check_invariants().unwrap();
}

// ---- Property tests against a model ------------------------------------------------------------

/// One allocation in the model: its range and the bytes its placement held (padding included), in
/// physical offsets. A wrapped ring allocation holds `[prev_end, capacity)` and `[0, offset + size)`.
#[derive(Clone, Debug)]
struct ModelEntry {
    offset: u64,
    size: u64,
    held: Vec<(u64, u64)>,
    live: bool,
}

impl ModelEntry {
    fn held_bytes(&self) -> u64 {
        self.held.iter().map(|(s, e)| e - s).sum()
    }
}

/// A slow, physical-offset model of the three modes: where each allocation goes, found by checking
/// that the bytes it would hold overlap nothing held.
#[derive(Debug)]
struct Model {
    capacity: u64,
    mode: LinearMode,
    lower: Vec<ModelEntry>,
    upper: Vec<ModelEntry>,
}

impl Model {
    fn held(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.lower.iter().chain(&self.upper).flat_map(|e| e.held.iter().copied())
    }

    fn is_free(&self, runs: &[(u64, u64)]) -> bool {
        runs.iter().all(|&(s, e)| e <= self.capacity && self.held().all(|(hs, he)| e <= hs || he <= s))
    }

    fn allocate(&mut self, size: u64, alignment: u64, upper: bool) -> Option<u64> {
        let align_up = |v: u64| v.div_ceil(alignment) * alignment;
        if upper {
            let bottom = self.upper.last().map_or(self.capacity, |e| e.offset);
            let offset = bottom.checked_sub(size)? / alignment * alignment;
            let held = vec![(offset, bottom)];
            if !self.is_free(&held) {
                return None;
            }
            self.upper.push(ModelEntry { offset, size, held, live: true });
            return Some(offset);
        }
        let prev = self.lower.last().map_or(0, |e| e.offset + e.size);
        let aligned = align_up(prev);
        let mut held = vec![(prev, aligned + size)];
        let mut offset = aligned;
        if self.mode == LinearMode::Ring && aligned + size > self.capacity {
            held = vec![(prev, self.capacity), (0, size)];
            offset = 0;
        }
        if !self.is_free(&held) {
            return None;
        }
        self.lower.push(ModelEntry { offset, size, held, live: true });
        Some(offset)
    }

    fn free(&mut self, upper: bool, offset: u64) {
        let stack = if upper { &mut self.upper } else { &mut self.lower };
        stack.iter_mut().find(|e| e.live && e.offset == offset).expect("live in the model").live = false;
        while stack.last().is_some_and(|e| !e.live) {
            stack.pop();
        }
        if self.mode == LinearMode::Ring {
            while self.lower.first().is_some_and(|e| !e.live) {
                self.lower.remove(0);
            }
        }
    }

    fn used(&self) -> u64 {
        self.lower.iter().chain(&self.upper).filter(|e| e.live).map(ModelEntry::held_bytes).sum()
    }

    fn pending(&self) -> u64 {
        self.lower.iter().chain(&self.upper).filter(|e| !e.live).map(ModelEntry::held_bytes).sum()
    }
}

#[derive(Clone, Debug)]
enum Op {
    Allocate {
        size: u64,
        align_log2: u32,
        upper: bool,
    },
    /// Frees the live allocation at this index (modulo the count), or the oldest when `oldest`.
    Free {
        pick: usize,
        oldest: bool,
    },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (1u64..300, 0u32..9, any::<bool>())
            .prop_map(|(size, align_log2, upper)| Op::Allocate { size, align_log2, upper }),
        2 => (any::<usize>(), any::<bool>()).prop_map(|(pick, oldest)| Op::Free { pick, oldest }),
    ]
}

fn run(mode: LinearMode, capacity: u64, ops: Vec<Op>) -> Result<(), TestCaseError> {
    let mut a = linear(capacity, mode);
    let mut model = Model { capacity, mode, lower: Vec::new(), upper: Vec::new() };
    // Live handles in allocation order.
    let mut live: Vec<LinearAllocation> = Vec::new();
    for op in ops {
        match op {
            Op::Allocate { size, align_log2, upper } => {
                let alignment = 1u64 << align_log2;
                let upper = upper && mode == LinearMode::DoubleStack;
                let got = if upper { a.allocate_upper(size, alignment) } else { a.allocate(size, alignment) };
                let expected = model.allocate(size, alignment, upper);
                match got {
                    Ok(h) => {
                        prop_assert_eq!(Some(h.offset()), expected, "placement differs from the model");
                        prop_assert_eq!(h.offset() % alignment, 0);
                        prop_assert!(h.offset() + h.size() <= capacity);
                        live.push(h);
                    }
                    Err(e) => {
                        prop_assert_eq!(expected, None, "refused what the model placed: {}", e);
                        let largest_free = a.largest_free();
                        let ok = match e {
                            LinearError::OutOfSpace { largest_free: l, .. } => l == largest_free,
                            LinearError::StacksWouldOverlap { lower_top, upper_bottom, .. } => {
                                mode == LinearMode::DoubleStack && upper_bottom - lower_top == largest_free
                            }
                            _ => false,
                        };
                        prop_assert!(ok, "unexpected error {:?}", e);
                    }
                }
            }
            Op::Free { pick, oldest } => {
                if live.is_empty() {
                    continue;
                }
                let h = live.remove(if oldest { 0 } else { pick % live.len() });
                model.free(h.is_upper(), h.offset());
                a.free(h).map_err(|e| TestCaseError::fail(e.to_string()))?;
            }
        }
        a.check_invariants().map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert_eq!(a.used_bytes(), model.used());
        prop_assert_eq!(a.pending_bytes(), model.pending());
        prop_assert_eq!(a.requested_bytes(), live.iter().map(LinearAllocation::size).sum::<u64>());
        prop_assert_eq!(a.allocation_count(), live.len() as u64);
        prop_assert_eq!(a.used_bytes() + a.pending_bytes() + a.free_bytes(), capacity);
        for (i, x) in live.iter().enumerate() {
            for y in &live[i + 1..] {
                prop_assert!(
                    x.range().end <= y.offset() || y.range().end <= x.offset(),
                    "{x:?} overlaps {y:?}"
                );
            }
        }
    }
    for h in live.drain(..) {
        a.free(h).map_err(|e| TestCaseError::fail(e.to_string()))?;
        a.check_invariants().map_err(|e| TestCaseError::fail(e.to_string()))?;
    }
    prop_assert_eq!(
        (a.used_bytes(), a.pending_bytes(), a.requested_bytes(), a.allocation_count()),
        (0, 0, 0, 0)
    );
    prop_assert_eq!(a.largest_free(), capacity);
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn stack_matches_model(capacity in 1u64..3000, ops in prop::collection::vec(op(), 0..80)) {
        run(LinearMode::Stack, capacity, ops)?;
    }

    #[test]
    fn double_stack_matches_model(capacity in 1u64..3000, ops in prop::collection::vec(op(), 0..80)) {
        run(LinearMode::DoubleStack, capacity, ops)?;
    }

    #[test]
    fn ring_matches_model(capacity in 1u64..3000, ops in prop::collection::vec(op(), 0..80)) {
        run(LinearMode::Ring, capacity, ops)?;
    }
}
