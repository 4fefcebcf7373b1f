//! The `linear_allocator` target: random allocations (lower and upper), frees (any, the oldest,
//! the newest, all) and foreign frees against the core's [`LinearAllocator`] in its three modes
//! (stack, double stack, ring), each checked against a reference model that works in physical
//! offsets: every allocation's place predicted exactly (and a refusal only when the model has no
//! room either), no two live allocations overlapping, the counters and `largest_free` after every
//! operation, the allocator's own full checker every [`FULL_CHECK_INTERVAL`] operations (and
//! after each of the first [`FULL_CHECK_PREFIX`] and the last), empty once everything is freed.

use crate::input::Input;
use residency_core::allocator::{
    DescError, LinearAllocation, LinearAllocator, LinearDesc, LinearError, LinearMode,
};
use std::collections::{BTreeMap, VecDeque};

/// Operations per input at most.
const MAX_OPS: usize = 4096;
/// The full checker runs after each of the first this many operations…
const FULL_CHECK_PREFIX: usize = 16;
/// …then after every this many (it walks every record), and after the last.
const FULL_CHECK_INTERVAL: usize = 64;

const MODES: [LinearMode; 3] = [LinearMode::Stack, LinearMode::DoubleStack, LinearMode::Ring];

/// One allocation in the model: its place and the physical bytes its placement holds (padding
/// included): one run, or for a ring allocation that wrapped the skipped end of the block
/// `[prev, capacity)` and `[0, offset + size)`.
#[derive(Clone, Debug)]
struct Entry {
    offset: u64,
    size: u64,
    /// Held runs `[start, end)`, the first one non-empty unless the allocation is the whole run.
    held: [(u64, u64); 2],
    live: bool,
}

impl Entry {
    fn held_bytes(&self) -> u64 {
        self.held.iter().map(|(s, e)| e - s).sum()
    }

    /// Where the physical bytes it holds start.
    fn held_start(&self) -> u64 {
        self.held[0].0
    }
}

/// A model of the three modes in physical offsets. The lower stack (or the ring, oldest first)
/// and the upper stack (bottom last); held bytes are counted separately for live and freed
/// entries; the live ranges by offset for the overlap check.
struct Model {
    capacity: u64,
    mode: LinearMode,
    lower: VecDeque<Entry>,
    upper: Vec<Entry>,
    /// Sequence number of `lower[0]` (entries are found by the number given at allocation).
    lower_base: u64,
    used: u64,
    pending: u64,
    requested: u64,
    /// Bytes held by the lower entries, live and freed.
    lower_held: u64,
    live: BTreeMap<u64, u64>,
}

/// Where the model places a request: offset and held runs.
type Placement = (u64, [(u64, u64); 2]);

impl Model {
    fn new(capacity: u64, mode: LinearMode) -> Self {
        Self {
            capacity,
            mode,
            lower: VecDeque::new(),
            upper: Vec::new(),
            lower_base: 0,
            used: 0,
            pending: 0,
            requested: 0,
            lower_held: 0,
            live: BTreeMap::new(),
        }
    }

    /// End of the newest lower allocation: where the next one goes (0 when there is none).
    fn lower_top(&self) -> u64 {
        self.lower.back().map_or(0, |e| e.offset + e.size)
    }

    /// Bottom of the upper stack (the capacity when it is empty).
    fn upper_bottom(&self) -> u64 {
        self.upper.last().map_or(self.capacity, |e| e.offset)
    }

    fn place_lower(&self, size: u64, alignment: u64) -> Option<Placement> {
        let prev = self.lower_top();
        let in_place = prev
            .checked_add(alignment - 1)
            .map(|v| v & !(alignment - 1))
            .and_then(|offset| Some((offset, offset.checked_add(size)?)));
        match self.mode {
            LinearMode::Stack | LinearMode::DoubleStack => {
                let (offset, end) = in_place?;
                (end <= self.upper_bottom()).then_some((offset, [(prev, end), (end, end)]))
            }
            LinearMode::Ring => {
                // The held bytes are one circular run ending at `prev`; a new one starting there
                // overlaps nothing exactly when the two together fit in the block.
                let (offset, held) = match in_place.filter(|&(_, end)| end <= self.capacity) {
                    Some((offset, end)) => (offset, [(prev, end), (end, end)]),
                    None if prev == self.capacity => (0, [(0, size), (size, size)]),
                    None => (0, [(prev, self.capacity), (0, size)]),
                };
                if size > self.capacity {
                    return None;
                }
                let new = (held[0].1 - held[0].0).checked_add(held[1].1 - held[1].0);
                let fits =
                    new.and_then(|n| n.checked_add(self.lower_held)).is_some_and(|t| t <= self.capacity);
                fits.then_some((offset, held))
            }
        }
    }

    fn place_upper(&self, size: u64, alignment: u64) -> Option<Placement> {
        let bottom = self.upper_bottom();
        let offset = bottom.checked_sub(size)? & !(alignment - 1);
        (offset >= self.lower_top()).then_some((offset, [(offset, bottom), (bottom, bottom)]))
    }

    /// The longest free run an allocation can be placed in (what the allocator promises).
    fn largest_free(&self) -> u64 {
        match self.mode {
            LinearMode::Stack | LinearMode::DoubleStack => self.upper_bottom() - self.lower_top(),
            LinearMode::Ring => {
                // The free bytes are one circular run from the head; where it crosses the end of
                // the block it is two runs, the one up to the end and the one from offset 0.
                let free = self.capacity - self.lower_held;
                let to_end = self.capacity - self.lower_top() % self.capacity;
                if free <= to_end {
                    free
                } else {
                    to_end.max(free - to_end)
                }
            }
        }
    }

    /// The tail of the ring: where the oldest entry's held bytes start (the head when empty).
    fn ring_tail(&self) -> u64 {
        self.lower.front().map_or(0, Entry::held_start)
    }

    /// Records a new allocation; returns its sequence number in its stack.
    fn add(&mut self, upper: bool, (offset, held): Placement, size: u64) -> u64 {
        let entry = Entry { offset, size, held, live: true };
        self.used += entry.held_bytes();
        self.requested += size;
        // No live allocation overlaps the new one.
        if let Some((&o, &s)) = self.live.range(..=offset).next_back() {
            assert!(o + s <= offset, "[{offset}, +{size}) overlaps the live [{o}, +{s})");
        }
        if let Some((&o, _)) = self.live.range(offset..).next() {
            assert!(offset + size <= o, "[{offset}, +{size}) overlaps the live allocation at {o}");
        }
        self.live.insert(offset, size);
        if upper {
            self.upper.push(entry);
            self.upper.len() as u64 - 1
        } else {
            self.lower_held += entry.held_bytes();
            self.lower.push_back(entry);
            self.lower_base + self.lower.len() as u64 - 1
        }
    }

    fn free(&mut self, a: &LinearAllocation, seq: u64) {
        let e = if a.is_upper() {
            self.upper.get_mut(seq as usize)
        } else {
            self.lower.get_mut((seq - self.lower_base) as usize)
        };
        let e = e.filter(|e| e.live && e.offset == a.offset() && e.size == a.size());
        let e = e.unwrap_or_else(|| panic!("{a:?} (entry {seq}) is live in the model"));
        e.live = false;
        let bytes = e.held_bytes();
        self.used -= bytes;
        self.pending += bytes;
        self.requested -= a.size();
        assert_eq!(self.live.remove(&a.offset()), Some(a.size()));
        // Freed entries at a reclaimable end return their bytes.
        while self.upper.last().is_some_and(|e| !e.live) {
            self.pending -= self.upper.pop().expect("checked").held_bytes();
        }
        while self.lower.back().is_some_and(|e| !e.live) {
            let bytes = self.lower.pop_back().expect("checked").held_bytes();
            self.pending -= bytes;
            self.lower_held -= bytes;
        }
        if self.mode == LinearMode::Ring {
            while self.lower.front().is_some_and(|e| !e.live) {
                let bytes = self.lower.pop_front().expect("checked").held_bytes();
                self.pending -= bytes;
                self.lower_held -= bytes;
                self.lower_base += 1;
            }
        }
    }
}

pub(crate) fn run(data: &[u8]) {
    let mut input = Input::new(data);
    let mode = input.pick(&MODES);
    let capacity = match input.u8() % 4 {
        0 => input.size(),
        _ => input.range(0, 1 << 16),
    };
    let mut a = match LinearAllocator::new(LinearDesc::new(capacity).with_mode(mode)) {
        Ok(a) => a,
        Err(e) => return assert_eq!((capacity, e), (0, DescError::ZeroCapacity)),
    };
    assert_eq!((a.capacity(), a.mode()), (capacity, mode));
    // Another allocator of the same mode and capacity, whose handles ours must refuse.
    let mut other = LinearAllocator::new(LinearDesc::new(capacity).with_mode(mode)).expect("valid");
    let mut model = Model::new(capacity, mode);
    // Live handles with their model entries' sequence numbers, oldest first (lower and upper).
    let mut live: VecDeque<(LinearAllocation, u64)> = VecDeque::new();
    for op in 0..MAX_OPS {
        if input.is_empty() {
            break;
        }
        match input.u8() % 10 {
            0..=4 => {
                let upper = input.u8() % 3 == 0;
                let size = match input.u8() % 4 {
                    0 => input.size(),
                    _ => input.below(capacity.min(1 << 16) + 1),
                };
                let alignment = input.alignment(20);
                allocate(&mut a, &mut model, &mut live, upper, size, alignment);
            }
            5..=7 => {
                if !live.is_empty() {
                    let i = match input.u8() % 4 {
                        0 => 0,
                        1 => live.len() - 1,
                        _ => input.below(live.len() as u64) as usize,
                    };
                    let (h, seq) = live.remove(i).expect("in range");
                    model.free(&h, seq);
                    a.free(h).expect("freeing a live allocation");
                }
            }
            8 => {
                // Everything, oldest first or newest first.
                let newest_first = input.bool();
                while let Some((h, seq)) = if newest_first { live.pop_back() } else { live.pop_front() } {
                    model.free(&h, seq);
                    a.free(h).expect("freeing a live allocation");
                }
                check_empty(&a);
            }
            _ => {
                let size = 1 + input.below(capacity.min(4096));
                let foreign =
                    if input.bool() { other.allocate(size, 1) } else { other.allocate_upper(size, 1) };
                if let Ok(foreign) = foreign {
                    let (offset, size) = (foreign.offset(), foreign.size());
                    assert_eq!(a.free(foreign), Err(LinearError::UnknownAllocation { offset, size }));
                }
            }
        }
        check_counters(&a, &model, live.len());
        if op < FULL_CHECK_PREFIX || (op + 1) % FULL_CHECK_INTERVAL == 0 {
            check_full(&a, &model, &live);
        }
    }
    check_full(&a, &model, &live);
    for (h, seq) in live.drain(..) {
        model.free(&h, seq);
        a.free(h).expect("freeing a live allocation");
    }
    check_empty(&a);
    a.check_invariants().unwrap_or_else(|e| panic!("invariant broken: {e}"));
}

/// One allocation (lower or upper) against the model: placed exactly where the model places it,
/// or refused with the right error when the model has no room either.
fn allocate(
    a: &mut LinearAllocator,
    model: &mut Model,
    live: &mut VecDeque<(LinearAllocation, u64)>,
    upper: bool,
    size: u64,
    alignment: u64,
) {
    let mode = model.mode;
    let got = if upper { a.allocate_upper(size, alignment) } else { a.allocate(size, alignment) };
    let placed = if size == 0 || !alignment.is_power_of_two() || upper && mode != LinearMode::DoubleStack {
        None
    } else if upper {
        model.place_upper(size, alignment)
    } else {
        model.place_lower(size, alignment)
    };
    match got {
        Ok(h) => {
            let Some((offset, held)) = placed else { panic!("{h:?} placed where the model has no room") };
            assert_eq!((h.offset(), h.size(), h.is_upper()), (offset, size, upper), "placement");
            assert_eq!(h.offset() % alignment, 0);
            assert!(h.offset().checked_add(size).is_some_and(|end| end <= model.capacity), "{h:?}");
            let seq = model.add(upper, (offset, held), size);
            live.push_back((h, seq));
        }
        Err(LinearError::UpperNeedsDoubleStack { mode: m }) => {
            assert!(upper && m == mode && mode != LinearMode::DoubleStack)
        }
        Err(LinearError::ZeroSize) => assert_eq!(size, 0),
        Err(LinearError::AlignmentNotPowerOfTwo { alignment: al }) => {
            assert!(size != 0 && al == alignment && !alignment.is_power_of_two())
        }
        Err(LinearError::OutOfSpace { size: s, alignment: al, largest_free, free }) => {
            assert!(placed.is_none(), "refused what the model places at {placed:?}");
            let other_stack = if upper { !model.lower.is_empty() } else { !model.upper.is_empty() };
            assert!(mode != LinearMode::DoubleStack || !other_stack, "out of space with two stacks");
            assert_eq!((s, al), (size, alignment));
            assert_eq!(largest_free, model.largest_free());
            assert_eq!(free, model.capacity - model.used - model.pending);
        }
        Err(LinearError::StacksWouldOverlap { size: s, alignment: al, lower_top, upper_bottom }) => {
            assert!(placed.is_none(), "refused what the model places at {placed:?}");
            let other_stack = if upper { !model.lower.is_empty() } else { !model.upper.is_empty() };
            assert!(mode == LinearMode::DoubleStack && other_stack, "stacks overlap in {mode:?}");
            assert_eq!((s, al), (size, alignment));
            assert_eq!((lower_top, upper_bottom), (model.lower_top(), model.upper_bottom()));
        }
        Err(e @ LinearError::UnknownAllocation { .. }) => panic!("allocate returned {e}"),
    }
}

/// The counters against the model (cheap: after every operation).
fn check_counters(a: &LinearAllocator, model: &Model, live: usize) {
    assert_eq!(a.allocation_count(), live as u64);
    assert_eq!(a.used_bytes(), model.used);
    assert_eq!(a.pending_bytes(), model.pending);
    assert_eq!(a.requested_bytes(), model.requested);
    assert_eq!(a.used_bytes() + a.pending_bytes() + a.free_bytes(), a.capacity());
    assert_eq!(a.largest_free(), model.largest_free(), "largest free run");
    assert!(a.largest_free() <= a.free_bytes());
}

/// The allocator's own checker, and the model's sums and layout against the handles (walks
/// everything): lower entries tile their held bytes contiguously from the tail, upper entries
/// downwards from the capacity.
fn check_full(a: &LinearAllocator, model: &Model, live: &VecDeque<(LinearAllocation, u64)>) {
    a.check_invariants().unwrap_or_else(|e| panic!("invariant broken: {e}"));
    assert_eq!(model.requested, live.iter().map(|(h, _)| h.size()).sum::<u64>());
    assert_eq!(model.live.len(), live.len());
    let lower: u64 = model.lower.iter().map(Entry::held_bytes).sum();
    let upper: u64 = model.upper.iter().map(Entry::held_bytes).sum();
    assert_eq!(lower, model.lower_held);
    assert_eq!(lower + upper, model.used + model.pending);
    assert!(lower + upper <= a.capacity());
    if mode_is_stack(model.mode) {
        assert_eq!(model.ring_tail(), 0, "a stack starts at offset 0");
    }
    let mut at = model.ring_tail();
    for e in &model.lower {
        let start = e.held[0].0;
        assert!(start == at || start == 0 && at == model.capacity, "{e:?} does not start at {at}");
        at = if e.held[1].0 == e.held[1].1 { e.held[0].1 } else { e.held[1].1 };
    }
    let mut at = model.capacity;
    for e in &model.upper {
        assert_eq!(e.held[0].1, at, "{e:?}");
        at = e.held[0].0;
    }
}

fn mode_is_stack(mode: LinearMode) -> bool {
    mode != LinearMode::Ring
}

fn check_empty(a: &LinearAllocator) {
    assert_eq!((a.used_bytes(), a.pending_bytes(), a.requested_bytes(), a.allocation_count()), (0, 0, 0, 0));
    assert_eq!(a.largest_free(), a.capacity());
}
