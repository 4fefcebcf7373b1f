//! Transient memory: a frame's short-lived buffers and images placed in shared heaps so that
//! resources whose pass intervals do not overlap alias the same bytes.
//!
//! The algorithm is *greedy by size with first-fit offsets*: resources are placed largest first;
//! each goes at the lowest offset, in the first heap, that is aligned and overlaps (in bytes, or
//! in `bufferImageGranularity` pages for a linear/optimal pair) no already-placed resource whose
//! interval overlaps its own. Heaps persist from frame to frame: a heap grows only when a frame
//! does not fit in it, and a new heap opens only when growing would pass the heap limit.

use super::barrier::Scope;
use super::error::TransientError;
use super::flags::{AccessFlags, ImageLayout, PipelineStages};
use super::range_map::RangeMap;
use super::uses::{CustomUse, Use};
use crate::allocator::ResourceKind;
use serde::{Deserialize, Serialize};
use std::ops::RangeInclusive;

/// One transient resource of a frame.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TransientDesc {
    /// Name, for errors and reports.
    pub name: String,
    /// Size in bytes (from the device's memory requirements).
    pub size: u64,
    /// Alignment in bytes (a power of two).
    pub alignment: u64,
    /// Linear (buffers, linear images) or optimal (optimal-tiling images), for
    /// `bufferImageGranularity`.
    pub kind: ResourceKind,
    /// Whether it is an image (its first use after aliasing transitions from `UNDEFINED`).
    pub is_image: bool,
    /// First pass that uses it.
    pub first_pass: u32,
    /// Last pass that uses it.
    pub last_pass: u32,
    /// How the first pass uses it (the second scope of its aliasing barrier).
    pub first_use: Use,
    /// How the last pass uses it (the first scope of the aliasing barrier of whatever comes
    /// next in its memory).
    pub last_use: Use,
}

/// Any access by any command: the default first and last use, always safe.
const ANY_USE: Use = Use::Custom(CustomUse {
    stages: PipelineStages::ALL_COMMANDS,
    access: AccessFlags::MEMORY_READ.union(AccessFlags::MEMORY_WRITE),
    layout: Some(ImageLayout::GENERAL),
});

impl TransientDesc {
    /// A buffer used by passes `passes` (inclusive), with conservative uses (any command, any
    /// access) until [`TransientDesc::with_uses`] says better.
    pub fn buffer(
        name: impl Into<String>,
        size: u64,
        alignment: u64,
        passes: RangeInclusive<u32>,
    ) -> TransientDesc {
        TransientDesc {
            name: name.into(),
            size,
            alignment,
            kind: ResourceKind::Linear,
            is_image: false,
            first_pass: *passes.start(),
            last_pass: *passes.end(),
            first_use: ANY_USE,
            last_use: ANY_USE,
        }
    }

    /// An optimal-tiling image used by passes `passes` (inclusive), with conservative uses in
    /// `GENERAL` until [`TransientDesc::with_uses`] says better.
    pub fn image(
        name: impl Into<String>,
        size: u64,
        alignment: u64,
        passes: RangeInclusive<u32>,
    ) -> TransientDesc {
        TransientDesc {
            kind: ResourceKind::Optimal,
            is_image: true,
            ..TransientDesc::buffer(name, size, alignment, passes)
        }
    }

    /// With the uses of its first and last passes.
    pub fn with_uses(mut self, first_use: Use, last_use: Use) -> TransientDesc {
        self.first_use = first_use;
        self.last_use = last_use;
        self
    }

    fn live_at(&self, pass: u32) -> bool {
        self.first_pass <= pass && pass <= self.last_pass
    }

    fn overlaps_in_time(&self, other: &TransientDesc) -> bool {
        self.first_pass <= other.last_pass && other.first_pass <= self.last_pass
    }

    fn last_scope(&self) -> Scope {
        let info = self.last_use.info();
        Scope::new(info.stages, info.access)
    }
}

/// Options of a [`TransientPlanner`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TransientPlannerDesc {
    /// `bufferImageGranularity` of the device (default 1: no constraint).
    pub granularity: u64,
    /// Largest heap the planner may make (default `u64::MAX`: one heap).
    pub max_heap_size: u64,
}

impl Default for TransientPlannerDesc {
    fn default() -> TransientPlannerDesc {
        TransientPlannerDesc { granularity: 1, max_heap_size: u64::MAX }
    }
}

impl TransientPlannerDesc {
    /// With the device's `bufferImageGranularity`.
    pub fn with_granularity(mut self, granularity: u64) -> TransientPlannerDesc {
        self.granularity = granularity;
        self
    }

    /// With a heap size limit (a resource never spans two heaps, so this must hold the largest).
    pub fn with_max_heap_size(mut self, max_heap_size: u64) -> TransientPlannerDesc {
        self.max_heap_size = max_heap_size;
        self
    }
}

/// Where a transient resource goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct TransientPlacement {
    /// Index of the heap.
    pub heap: usize,
    /// Offset in the heap.
    pub offset: u64,
}

/// The barrier before the first use of a resource whose bytes held other resources: the previous
/// occupants' last uses must finish before it, and its contents start undefined.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AliasingBarrier {
    /// The resource (index in the frame) whose first use needs the barrier.
    pub resource: usize,
    /// The pass before which to record it (the resource's first pass).
    pub before_pass: u32,
    /// The resources of this frame that last occupied its bytes.
    pub previous: Vec<usize>,
    /// Whether some of its bytes were last used by an earlier frame (recorded when the frames
    /// share a queue without a fence wait in between).
    pub after_previous_frame: bool,
    /// First scope: the previous occupants' last uses.
    pub src: Scope,
    /// Second scope: the resource's first use.
    pub dst: Scope,
    /// For images: the layout to transition to from `UNDEFINED`.
    pub new_layout: Option<ImageLayout>,
}

/// A heap that had to grow for a frame (the backend reallocates it).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct HeapGrowth {
    /// Index of the heap.
    pub heap: usize,
    /// Size before the frame (0 for a new heap).
    pub old_size: u64,
    /// Size after.
    pub new_size: u64,
}

/// Peak bytes of a frame against the sum of its sizes and the lower bound.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TransientReport {
    /// Number of resources.
    pub resources: usize,
    /// Sum of the sizes: the memory without aliasing.
    pub sum_of_sizes: u64,
    /// Largest sum of the sizes of the resources live in one pass: no placement can use less.
    pub lower_bound: u64,
    /// Bytes this frame's placement reaches: per heap, the end of its highest resource, summed.
    pub peak_bytes: u64,
    /// Bytes of all heaps after the frame (what stays allocated).
    pub heap_bytes: u64,
    /// Number of heaps.
    pub heaps: usize,
}

impl TransientReport {
    /// `peak_bytes / lower_bound` (1.0 is optimal).
    pub fn gap_to_lower_bound(&self) -> f64 {
        if self.lower_bound == 0 {
            return 1.0;
        }
        self.peak_bytes as f64 / self.lower_bound as f64
    }

    /// `peak_bytes / sum_of_sizes`: the fraction of the unaliased memory the frame needs.
    pub fn fraction_of_sum(&self) -> f64 {
        if self.sum_of_sizes == 0 {
            return 0.0;
        }
        self.peak_bytes as f64 / self.sum_of_sizes as f64
    }
}

/// A frame's placement.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FramePlan {
    /// Per resource, in the frame's order.
    pub placements: Vec<TransientPlacement>,
    /// Aliasing barriers, ordered by pass then resource.
    pub aliasing: Vec<AliasingBarrier>,
    /// Heaps that grew (or were created) for this frame.
    pub growth: Vec<HeapGrowth>,
    /// Figures.
    pub report: TransientReport,
}

/// Places frames of transient resources in persistent heaps.
///
/// # Algorithm
///
/// Greedy by size with first-fit offsets (the module docs): a frame's resources are placed
/// largest first (ties: earlier first pass, then index); in each heap its place is the lowest
/// offset aligned to it that overlaps no already placed resource whose pass interval overlaps its
/// own — the busy ranges sorted by offset and walked once, a conflicting [`ResourceKind`]
/// widening a range to whole granularity pages. It goes in the first heap where that place ends
/// within the heap's size; else in the heap that has to grow least, within `max_heap_size`
/// (reported as a [`HeapGrowth`]); else in a new heap. Nothing
/// is freed one by one: a frame's placements are dropped with it and the heaps stay, remembering
/// per byte range the last use of the earlier frames (for the aliasing barriers), so there is no
/// free list to coalesce.
///
/// # Efficiency
///
/// - [`plan`](Self::plan): O(h · n² log n) for n resources and h heaps (each placement collects
///   and sorts, per heap, the placed resources live at the same time), plus O(n²) for the
///   aliasing barriers. Measured
///   (`docs/benchmarks.md`, "`sync`", Planning time): 568 µs per frame (median) for 150
///   resources over 50 passes on this workplace.
/// - Memory: one [`TransientPlacement`] per resource per frame; per heap, its size and a range
///   map of last uses (one entry per distinct range). Space: the peak is within 1.013× of the
///   lower bound (the most bytes live in one pass) on average, 1.102× at worst, over that
///   benchmark's 32 frames.
/// - Locking: none; it takes `&mut self`. The backend's `TransientPool` owns one and plans once
///   per `begin_frame`.
#[derive(Clone, Debug)]
pub struct TransientPlanner {
    desc: TransientPlannerDesc,
    heaps: Vec<u64>,
    /// Per heap: the last use of each byte by earlier frames.
    last_uses: Vec<RangeMap<Option<Scope>>>,
}

fn align_up(value: u64, alignment: u64) -> u64 {
    value.div_ceil(alignment) * alignment
}

/// The largest sum of sizes of resources live in one pass.
pub(crate) fn lower_bound(frame: &[TransientDesc]) -> u64 {
    let mut passes: Vec<u32> = frame.iter().map(|r| r.first_pass).collect();
    passes.sort_unstable();
    passes.dedup();
    // The live set only grows at a first pass, so the maximum is at one of them.
    passes
        .iter()
        .map(|&p| frame.iter().filter(|r| r.live_at(p)).map(|r| r.size).sum::<u64>())
        .max()
        .unwrap_or(0)
}

impl TransientPlanner {
    /// A planner with no heaps yet.
    pub fn new(desc: TransientPlannerDesc) -> Result<TransientPlanner, TransientError> {
        if !desc.granularity.is_power_of_two() {
            return Err(TransientError::GranularityNotPowerOfTwo { granularity: desc.granularity });
        }
        Ok(TransientPlanner { desc, heaps: Vec::new(), last_uses: Vec::new() })
    }

    /// The options.
    pub fn desc(&self) -> TransientPlannerDesc {
        self.desc
    }

    /// The size of each heap.
    pub fn heap_sizes(&self) -> &[u64] {
        &self.heaps
    }

    fn validate(&self, frame: &[TransientDesc]) -> Result<(), TransientError> {
        for (index, r) in frame.iter().enumerate() {
            let name = || r.name.clone();
            if r.size == 0 {
                return Err(TransientError::ZeroSize { index, name: name() });
            }
            if !r.alignment.is_power_of_two() {
                return Err(TransientError::AlignmentNotPowerOfTwo {
                    index,
                    name: name(),
                    alignment: r.alignment,
                });
            }
            if r.first_pass > r.last_pass {
                return Err(TransientError::EmptyInterval {
                    index,
                    name: name(),
                    first: r.first_pass,
                    last: r.last_pass,
                });
            }
            if r.size > self.desc.max_heap_size {
                return Err(TransientError::TooLarge {
                    index,
                    name: name(),
                    size: r.size,
                    max_heap_size: self.desc.max_heap_size,
                });
            }
            if r.is_image && r.first_use.info().layout.is_none() {
                return Err(TransientError::NotAnImageUse { index, name: name() });
            }
        }
        Ok(())
    }

    /// The lowest aligned offset in `heap` where `r` overlaps no placed resource live at the same
    /// time (granularity pages count for conflicting kinds).
    fn first_fit(
        &self,
        frame: &[TransientDesc],
        placed: &[Option<TransientPlacement>],
        r: usize,
        heap: usize,
    ) -> u64 {
        let me = &frame[r];
        let g = self.desc.granularity;
        let mut busy: Vec<(u64, u64)> = placed
            .iter()
            .enumerate()
            .filter_map(|(i, p)| {
                let p = (*p)?;
                let other = &frame[i];
                (p.heap == heap && other.overlaps_in_time(me)).then(|| {
                    let (start, end) = (p.offset, p.offset + other.size);
                    if g > 1 && me.kind.conflicts_with(other.kind) {
                        (start / g * g, align_up(end, g))
                    } else {
                        (start, end)
                    }
                })
            })
            .collect();
        busy.sort_unstable();
        let mut offset = 0;
        for (start, end) in busy {
            if start >= offset + me.size {
                break;
            }
            if end > offset {
                offset = align_up(end, me.alignment);
            }
        }
        offset
    }

    /// Places `frame` in the heaps (growing them or adding heaps where it does not fit) and
    /// returns the placements, the aliasing barriers and the figures.
    pub fn plan(&mut self, frame: &[TransientDesc]) -> Result<FramePlan, TransientError> {
        self.validate(frame)?;
        let before = self.heaps.clone();
        let mut order: Vec<usize> = (0..frame.len()).collect();
        order.sort_by_key(|&i| (std::cmp::Reverse(frame[i].size), frame[i].first_pass, i));
        let mut placed: Vec<Option<TransientPlacement>> = vec![None; frame.len()];
        for &r in &order {
            let size = frame[r].size;
            let fits: Vec<(usize, u64)> =
                (0..self.heaps.len()).map(|h| (h, self.first_fit(frame, &placed, r, h))).collect();
            let choice = fits
                .iter()
                .find(|&&(h, off)| off + size <= self.heaps[h])
                .or_else(|| {
                    fits.iter()
                        .filter(|&&(_, off)| off + size <= self.desc.max_heap_size)
                        .min_by_key(|&&(h, off)| (off + size - self.heaps[h], h))
                })
                .copied();
            let (heap, offset) = choice.unwrap_or_else(|| {
                self.heaps.push(0);
                self.last_uses.push(RangeMap::new(u64::MAX, None));
                (self.heaps.len() - 1, 0)
            });
            self.heaps[heap] = self.heaps[heap].max(offset + size);
            placed[r] = Some(TransientPlacement { heap, offset });
        }
        let placements: Vec<TransientPlacement> =
            placed.into_iter().map(|p| p.expect("every resource placed")).collect();
        let aliasing = self.aliasing_barriers(frame, &placements);
        // Remember each byte's last use for the next frame, latest pass last.
        let mut by_last: Vec<usize> = (0..frame.len()).collect();
        by_last.sort_by_key(|&i| frame[i].last_pass);
        for i in by_last {
            let p = placements[i];
            let scope = frame[i].last_scope();
            self.last_uses[p.heap].update(p.offset..p.offset + frame[i].size, |_, _, v| *v = Some(scope));
        }
        let growth = self
            .heaps
            .iter()
            .enumerate()
            .filter_map(|(heap, &new_size)| {
                let old_size = before.get(heap).copied().unwrap_or(0);
                (new_size != old_size).then_some(HeapGrowth { heap, old_size, new_size })
            })
            .collect();
        let mut peak_per_heap = vec![0u64; self.heaps.len()];
        for (r, p) in frame.iter().zip(&placements) {
            peak_per_heap[p.heap] = peak_per_heap[p.heap].max(p.offset + r.size);
        }
        let report = TransientReport {
            resources: frame.len(),
            sum_of_sizes: frame.iter().map(|r| r.size).sum(),
            lower_bound: lower_bound(frame),
            peak_bytes: peak_per_heap.iter().sum(),
            heap_bytes: self.heaps.iter().sum(),
            heaps: self.heaps.len(),
        };
        Ok(FramePlan { placements, aliasing, growth, report })
    }

    /// For each resource, the latest earlier occupant of each of its bytes (this frame first,
    /// then earlier frames) and the barrier from their last uses to its first use.
    fn aliasing_barriers(
        &self,
        frame: &[TransientDesc],
        placements: &[TransientPlacement],
    ) -> Vec<AliasingBarrier> {
        let mut out = Vec::new();
        for (r, me) in frame.iter().enumerate() {
            let p = placements[r];
            let mine = (p.offset, p.offset + me.size);
            let mut preds: Vec<usize> = (0..frame.len())
                .filter(|&q| {
                    let o = placements[q];
                    q != r
                        && o.heap == p.heap
                        && frame[q].last_pass < me.first_pass
                        && o.offset < mine.1
                        && mine.0 < o.offset + frame[q].size
                })
                .collect();
            preds.sort_by_key(|&q| std::cmp::Reverse(frame[q].last_pass));
            // Bytes of `me` already claimed by a later predecessor.
            let mut covered = RangeMap::new(u64::MAX, false);
            let mut previous = Vec::new();
            let mut src = Scope::NONE;
            for q in preds {
                let o = placements[q];
                let range = o.offset.max(mine.0)..(o.offset + frame[q].size).min(mine.1);
                let mut claims = false;
                covered.update(range, |_, _, c| {
                    claims |= !*c;
                    *c = true;
                });
                if claims {
                    previous.push(q);
                    src = src.union(frame[q].last_scope());
                }
            }
            let mut after_previous_frame = false;
            let history = &self.last_uses[p.heap];
            for &(start, end, claimed) in covered.pieces() {
                if claimed || end <= mine.0 || start >= mine.1 {
                    continue;
                }
                for &(s, e, scope) in history.pieces() {
                    if let Some(scope) = scope {
                        if s < end.min(mine.1) && start.max(mine.0) < e {
                            after_previous_frame = true;
                            src = src.union(scope);
                        }
                    }
                }
            }
            if previous.is_empty() && !after_previous_frame {
                continue;
            }
            previous.sort_unstable();
            let first = me.first_use.info();
            out.push(AliasingBarrier {
                resource: r,
                before_pass: me.first_pass,
                previous,
                after_previous_frame,
                src,
                dst: Scope::new(first.stages, first.access),
                new_layout: if me.is_image { first.layout } else { None },
            });
        }
        out.sort_by_key(|b| (b.before_pass, b.resource));
        out
    }
}
