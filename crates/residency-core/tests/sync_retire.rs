//! The deferred-destruction queue against a reference model: nothing retires before every clock it
//! waits on has passed, everything retires once they have, in release order, nothing is lost.

use proptest::prelude::*;
use residency_core::sync::{ClockId, GpuPoint, LastUses, RetireQueue};

const CLOCKS: u32 = 3;

#[derive(Clone, Debug)]
enum Op {
    /// Release an item used up to these (clock, value) points (values relative to the clock now).
    Push(Vec<(u32, u64)>),
    /// A clock advances.
    Advance(u32, u64),
    /// Collect what has retired.
    Collect,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => prop::collection::vec((0..CLOCKS, 0u64..6), 0..4).prop_map(Op::Push),
        3 => (0..CLOCKS, 1u64..4).prop_map(|(c, d)| Op::Advance(c, d)),
        2 => Just(Op::Collect),
    ]
}

proptest! {
    #[test]
    fn retires_exactly_what_has_completed_in_release_order(ops in prop::collection::vec(op(), 1..80)) {
        let mut queue = RetireQueue::new();
        let mut clocks = [0u64; CLOCKS as usize];
        // Model: pending (id, points).
        let mut pending: Vec<(u32, Vec<GpuPoint>)> = Vec::new();
        let mut next = 0u32;
        let mut asked = 0usize;
        for op in ops {
            match op {
                Op::Push(points) => {
                    let mut uses = LastUses::none();
                    let mut model = Vec::new();
                    for (c, ahead) in points {
                        let p = GpuPoint::new(ClockId(c), clocks[c as usize] + ahead);
                        uses.note(p);
                        model.push(p);
                    }
                    queue.push(next, uses);
                    pending.push((next, model));
                    next += 1;
                }
                Op::Advance(c, d) => clocks[c as usize] += d,
                Op::Collect => {
                    let mut questions = Vec::new();
                    let got = queue.collect(|c| { questions.push(c); asked += 1; clocks[c.0 as usize] });
                    let mut unique = questions.clone();
                    unique.sort();
                    unique.dedup();
                    prop_assert_eq!(unique.len(), questions.len(), "each clock asked at most once");
                    let (done, kept): (Vec<_>, Vec<_>) = pending
                        .drain(..)
                        .partition(|(_, pts)| pts.iter().all(|p| clocks[p.clock.0 as usize] >= p.value));
                    let want: Vec<u32> = done.iter().map(|(id, _)| *id).collect();
                    prop_assert_eq!(got, want);
                    pending = kept;
                }
            }
            prop_assert_eq!(queue.len(), pending.len());
        }
        let rest = queue.drain_all();
        prop_assert_eq!(rest, pending.iter().map(|(id, _)| *id).collect::<Vec<_>>());
    }
}

#[test]
fn last_uses_keep_the_highest_value_per_clock() {
    let mut uses = LastUses::none();
    uses.note(GpuPoint::new(ClockId(1), 5));
    uses.note(GpuPoint::new(ClockId(0), 2));
    uses.note(GpuPoint::new(ClockId(1), 3));
    assert_eq!(uses.points(), &[GpuPoint::new(ClockId(0), 2), GpuPoint::new(ClockId(1), 5)]);
    assert!(!uses.is_done(|c| if c.0 == 1 { 4 } else { 9 }));
    assert!(uses.is_done(|_| 5));
    let mut other = LastUses::none();
    other.note(GpuPoint::new(ClockId(2), 7));
    uses.merge(&other);
    assert_eq!(uses.points().len(), 3);
}

#[test]
fn an_item_without_uses_retires_at_the_next_collect() {
    let mut queue = RetireQueue::new();
    queue.push("a", LastUses::none());
    assert_eq!(queue.collect(|_| unreachable!("no clock to ask")), vec!["a"]);
    assert!(queue.is_empty());
}
