//! Random releases, clock advances and collections into the deferred-destruction queue
//! (`sync::RetireQueue`), against a reference model: nothing is handed back before every clock it
//! waits on has reached its value, everything is handed back once they have, in release order,
//! and nothing is lost (what is left at the end is exactly what still waits).

use crate::input::Input;
use residency_core::sync::{ClockId, GpuPoint, LastUses, RetireQueue};

const CLOCKS: u32 = 4;

/// Runs one input.
pub(crate) fn run(data: &[u8]) {
    let mut input = Input::new(data);
    let mut queue: RetireQueue<u32> = RetireQueue::new();
    let mut clocks = [0u64; CLOCKS as usize];
    let mut model: Vec<(u32, Vec<GpuPoint>)> = Vec::new();
    let mut next = 0u32;
    let mut steps = 0;
    while !input.is_empty() && steps < 4096 {
        steps += 1;
        match input.below(4) {
            0 | 1 => {
                // A release waiting on up to 4 points, some already passed.
                let mut uses = LastUses::none();
                let mut points = Vec::new();
                for _ in 0..input.below(5) {
                    let clock = input.below(u64::from(CLOCKS)) as u32;
                    let value = clocks[clock as usize].saturating_add(input.below(8)).saturating_sub(2);
                    let point = GpuPoint::new(ClockId(clock), value);
                    uses.note(point);
                    points.push(point);
                }
                // A second LastUses merged in, as a parent merges its children's.
                if input.bool() {
                    let mut more = LastUses::none();
                    let clock = input.below(u64::from(CLOCKS)) as u32;
                    let point = GpuPoint::new(ClockId(clock), clocks[clock as usize] + input.below(4));
                    more.note(point);
                    points.push(point);
                    uses.merge(&more);
                }
                for p in uses.points() {
                    let highest = points.iter().filter(|q| q.clock == p.clock).map(|q| q.value).max();
                    assert_eq!(Some(p.value), highest, "one point per clock, the highest noted");
                }
                queue.push(next, uses);
                model.push((next, points));
                next += 1;
            }
            2 => {
                // Clocks only grow.
                let clock = input.below(u64::from(CLOCKS)) as usize;
                clocks[clock] = clocks[clock].saturating_add(input.below(6));
            }
            _ => {
                let mut asked = [0u32; CLOCKS as usize];
                let got = queue.collect(|c| {
                    asked[c.0 as usize] += 1;
                    clocks[c.0 as usize]
                });
                assert!(asked.iter().all(|&n| n <= 1), "each clock read at most once per collect");
                let (done, kept): (Vec<_>, Vec<_>) = model
                    .drain(..)
                    .partition(|(_, pts)| pts.iter().all(|p| clocks[p.clock.0 as usize] >= p.value));
                let want: Vec<u32> = done.iter().map(|(id, _)| *id).collect();
                assert_eq!(got, want, "exactly what completed, in release order");
                model = kept;
            }
        }
        assert_eq!(queue.len(), model.len());
        let pending = queue.pending();
        for (_, pts) in &model {
            for p in pts {
                let max = pending.points().iter().find(|q| q.clock == p.clock).map(|q| q.value);
                assert!(max.is_some_and(|m| m >= p.value), "pending covers every waiting point");
            }
        }
    }
    let rest = queue.drain_all();
    assert_eq!(rest, model.iter().map(|(id, _)| *id).collect::<Vec<_>>());
}
