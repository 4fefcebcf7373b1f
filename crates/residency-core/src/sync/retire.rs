//! Deferred destruction keyed on GPU progress.
//!
//! A resource the GPU may still use is destroyed only once every use has ended. A use ends when a
//! *clock* reaches a value: a queue's timeline semaphore (the submission that used it signals that
//! value), a frame counter the renderer advances once a frame's work has completed, or a timeline
//! of the renderer's own. [`LastUses`] keeps the highest value per clock that a resource was used
//! up to; [`RetireQueue`] holds what was released while uses were pending and hands each item back,
//! in release order, once all of its clocks have passed. Nothing here knows Vulkan: the backend
//! maps its queues and timelines to [`ClockId`]s and reads their values.

use std::collections::VecDeque;

/// A clock whose value only grows (a queue's timeline, a frame counter, a renderer's timeline).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ClockId(pub u32);

/// The moment a use ends: when `clock` has reached `value`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct GpuPoint {
    /// The clock.
    pub clock: ClockId,
    /// The value it must reach.
    pub value: u64,
}

impl GpuPoint {
    /// `clock` at `value`.
    pub fn new(clock: ClockId, value: u64) -> GpuPoint {
        GpuPoint { clock, value }
    }
}

/// The last uses of one resource: for each clock, the highest value it was used up to.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LastUses {
    /// Sorted by clock, one entry per clock.
    points: Vec<GpuPoint>,
}

impl LastUses {
    /// No use at all: retires at once.
    #[inline]
    pub fn none() -> LastUses {
        LastUses::default()
    }

    /// Records a use that ends at `point` (a lower value than one already noted on the same clock
    /// changes nothing: values only grow).
    pub fn note(&mut self, point: GpuPoint) {
        match self.points.binary_search_by_key(&point.clock, |p| p.clock) {
            Ok(i) => self.points[i].value = self.points[i].value.max(point.value),
            Err(i) => self.points.insert(i, point),
        }
    }

    /// Every use of `other` as well.
    pub fn merge(&mut self, other: &LastUses) {
        for &point in &other.points {
            self.note(point);
        }
    }

    /// The points, one per clock, sorted by clock.
    pub fn points(&self) -> &[GpuPoint] {
        &self.points
    }

    /// Whether no use was recorded.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.points.is_empty()
    }

    /// Whether every use has ended, given each clock's current value.
    pub fn is_done(&self, mut completed: impl FnMut(ClockId) -> u64) -> bool {
        self.points.iter().all(|p| completed(p.clock) >= p.value)
    }
}

/// Items released while the GPU may still use them, each with its last uses.
#[derive(Debug)]
pub struct RetireQueue<T> {
    entries: VecDeque<(LastUses, T)>,
}

impl<T> Default for RetireQueue<T> {
    fn default() -> Self {
        RetireQueue { entries: VecDeque::new() }
    }
}

impl<T> RetireQueue<T> {
    /// An empty queue.
    pub fn new() -> RetireQueue<T> {
        RetireQueue::default()
    }

    /// Queues `item` until every use in `uses` has ended.
    pub fn push(&mut self, item: T, uses: LastUses) {
        self.entries.push_back((uses, item));
    }

    /// Items waiting.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether nothing waits.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Removes and returns, in the order they were pushed, the items whose uses have all ended.
    /// `completed` reads a clock's current value; it is asked at most once per clock per call.
    pub fn collect(&mut self, mut completed: impl FnMut(ClockId) -> u64) -> Vec<T> {
        if self.entries.is_empty() {
            return Vec::new();
        }
        let mut known: Vec<(ClockId, u64)> = Vec::new();
        let mut value = |clock: ClockId| match known.iter().find(|(c, _)| *c == clock) {
            Some(&(_, v)) => v,
            None => {
                let v = completed(clock);
                known.push((clock, v));
                v
            }
        };
        let mut done = Vec::new();
        let mut kept = VecDeque::with_capacity(self.entries.len());
        for (uses, item) in self.entries.drain(..) {
            if uses.is_done(&mut value) {
                done.push(item);
            } else {
                kept.push_back((uses, item));
            }
        }
        self.entries = kept;
        done
    }

    /// The highest value each clock must reach for everything waiting to retire.
    pub fn pending(&self) -> LastUses {
        let mut all = LastUses::none();
        for (uses, _) in &self.entries {
            all.merge(uses);
        }
        all
    }

    /// Removes and returns every item, in push order (at teardown, once the device is idle).
    pub fn drain_all(&mut self) -> Vec<T> {
        self.entries.drain(..).map(|(_, item)| item).collect()
    }
}
