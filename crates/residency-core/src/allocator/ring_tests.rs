//! Tests of the per-frame ring allocator: named edge cases and a property test against a model.

use proptest::prelude::*;

use super::{DescError, FrameId, RingAllocation, RingAllocator, RingError};

fn ring(capacity: u64) -> RingAllocator {
    RingAllocator::new(capacity).expect("valid capacity")
}

#[test]
fn zero_capacity_is_rejected() {
    assert_eq!(RingAllocator::new(0).unwrap_err(), DescError::ZeroCapacity);
}

#[test]
fn bad_requests_are_typed_errors() {
    let mut r = ring(1024);
    assert_eq!(r.allocate(0, 1).unwrap_err(), RingError::ZeroSize);
    assert_eq!(r.allocate(1, 3).unwrap_err(), RingError::AlignmentNotPowerOfTwo { alignment: 3 });
    assert_eq!(
        r.allocate(2048, 1).unwrap_err(),
        RingError::TooLarge { size: 2048, alignment: 1, capacity: 1024 }
    );
    assert_eq!(r.retire(FrameId(0)).unwrap_err(), RingError::FrameNotFinished { frame: 0, open: 0 });
    r.check_invariants().unwrap();
}

#[test]
fn allocations_are_aligned_and_sequential() {
    let mut r = ring(4096);
    let a = r.allocate(10, 1).unwrap();
    let b = r.allocate(10, 256).unwrap();
    let c = r.allocate(1, 16).unwrap();
    assert_eq!((a.offset, b.offset, c.offset), (0, 256, 272));
    assert_eq!(a.frame, FrameId(0));
    assert_eq!(r.used_bytes(), 273);
    r.check_invariants().unwrap();
}

#[test]
fn full_ring_is_an_error_until_the_frame_retires() {
    let mut r = ring(1000);
    r.allocate(600, 1).unwrap();
    let f0 = r.finish_frame();
    r.allocate(300, 1).unwrap();
    let err = r.allocate(200, 1).unwrap_err();
    assert_eq!(err, RingError::Full { size: 200, alignment: 1, free: 100, capacity: 1000 });
    assert_eq!(r.retire(f0).unwrap(), 600);
    // 100 B remain before the end, so the allocation skips to offset 0.
    let c = r.allocate(200, 1).unwrap();
    assert_eq!(c.offset, 0);
    assert_eq!(r.used_bytes(), 300 + 100 + 200);
    r.check_invariants().unwrap();
}

#[test]
fn frames_retire_in_order_and_retiring_twice_is_harmless() {
    let mut r = ring(1 << 12);
    let mut frames = Vec::new();
    for i in 0..4 {
        r.allocate(100 + i, 4).unwrap();
        frames.push(r.finish_frame());
    }
    assert_eq!(frames, [FrameId(0), FrameId(1), FrameId(2), FrameId(3)]);
    assert_eq!(r.pending_frames(), 4);
    let released = r.retire(FrameId(1)).unwrap();
    assert!(released >= 201);
    assert_eq!(r.pending_frames(), 2);
    assert_eq!(r.retire(FrameId(0)).unwrap(), 0);
    assert!(r.retire(FrameId(3)).unwrap() > 0);
    assert_eq!(r.retire(FrameId(3)).unwrap(), 0, "retiring a frame twice releases nothing");
    assert_eq!(r.used_bytes(), 0);
    r.check_invariants().unwrap();
}

#[test]
fn an_empty_ring_restarts_at_offset_zero() {
    let mut r = ring(1000);
    r.allocate(700, 1).unwrap();
    let f = r.finish_frame();
    r.retire(f).unwrap();
    let a = r.allocate(1000, 1).unwrap();
    assert_eq!(a.offset, 0);
}

#[derive(Clone, Debug)]
enum Op {
    /// `window`: through `allocate_within` (the window's share of the ring, in 1/8ths).
    Alloc {
        size: u64,
        align_log2: u32,
        window: Option<u64>,
    },
    Finish,
    Retire {
        back: u64,
    },
}

fn op_strategy() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (1u64..=300, 0u32..=8, prop::option::of(1u64..=8))
            .prop_map(|(size, align_log2, window)| Op::Alloc { size, align_log2, window }),
        2 => Just(Op::Finish),
        1 => (0u64..4).prop_map(|back| Op::Retire { back }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

    #[test]
    fn live_allocations_never_overlap(capacity in 1u64..=2048, ops in prop::collection::vec(op_strategy(), 1..200)) {
        let mut r = ring(capacity);
        let mut live: Vec<RingAllocation> = Vec::new();
        for op in ops {
            match op {
                Op::Alloc { size, align_log2, window } => {
                    let alignment = 1u64 << align_log2;
                    let limit = window.map_or(capacity, |eighths| (capacity * eighths / 8).max(1));
                    let result = match window {
                        Some(_) => r.allocate_within(size, alignment, limit),
                        None => r.allocate(size, alignment),
                    };
                    match result {
                        Ok(a) => {
                            prop_assert_eq!(a.offset % alignment, 0);
                            prop_assert!(a.offset + a.size <= limit, "{:?} past the window {}", a, limit);
                            prop_assert_eq!(a.frame, r.open_frame());
                            for b in &live {
                                prop_assert!(a.offset + a.size <= b.offset || b.offset + b.size <= a.offset,
                                    "{:?} overlaps {:?}", a, b);
                            }
                            live.push(a);
                        }
                        Err(RingError::Full { .. }) => {
                            // With nothing live the whole ring is free from offset 0: anything fits.
                            prop_assert!(!live.is_empty() || r.pending_frames() > 0);
                        }
                        Err(RingError::TooLarge { .. }) => prop_assert!(size > limit),
                        Err(e) => prop_assert!(false, "unexpected error {}", e),
                    }
                }
                Op::Finish => {
                    r.finish_frame();
                }
                Op::Retire { back } => {
                    let open = r.open_frame().0;
                    if open > back {
                        let frame = FrameId(open - 1 - back);
                        r.retire(frame).unwrap();
                        live.retain(|a| a.frame > frame);
                    }
                }
            }
            r.check_invariants().unwrap();
        }
    }
}

#[test]
fn allocations_within_a_window_cycle_through_its_bytes_only() {
    let mut r = ring(1000);
    let mut offsets = Vec::new();
    for _ in 0..6 {
        let a = r.allocate_within(100, 1, 250).unwrap();
        offsets.push(a.offset);
        let frame = r.finish_frame();
        r.retire(frame).unwrap();
    }
    // Two fit before the window's end; the third skips the rest of the ring to offset 0 (once
    // the ring is empty it restarts there anyway).
    assert!(offsets.iter().all(|&o| o + 100 <= 250), "{offsets:?}");
    assert_eq!(
        r.allocate_within(300, 1, 250).unwrap_err(),
        RingError::TooLarge { size: 300, alignment: 1, capacity: 250 }
    );
    // With a frame in flight at the start of the window, the skip waits for it like the end does.
    let mut r = ring(1000);
    let a = r.allocate_within(100, 1, 250).unwrap();
    let f0 = r.finish_frame();
    let b = r.allocate_within(100, 1, 250).unwrap();
    assert_eq!((a.offset, b.offset), (0, 100));
    let f1 = r.finish_frame();
    assert!(matches!(r.allocate_within(100, 1, 250), Err(RingError::Full { .. })), "needs frame 0's bytes");
    r.retire(f0).unwrap();
    assert_eq!(r.allocate_within(100, 1, 250).unwrap().offset, 0);
    r.retire(f1).unwrap();
    r.check_invariants().unwrap();
}
