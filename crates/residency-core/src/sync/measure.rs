//! Pure, deterministic measurements for the benchmarks: barriers per frame under per-buffer and
//! per-page tracking, and transient peak bytes on a frame-graph-like workload. No timing here;
//! the bench crate times these same calls.

use super::barrier::{Flush, GlobalBarrierRule};
use super::flags::{PipelineStages, QueueFamily};
use super::region::Region;
use super::tracker::{PagedBufferDesc, StateTracker, TrackedBufferDesc, TrackerOptions};
use super::transient::{TransientDesc, TransientPlanner, TransientPlannerDesc, TransientReport};
use super::uses::Use;
use super::{ResourceId, TransientError};
use crate::device_mask::DeviceIndex;
use serde::{Deserialize, Serialize};

/// SplitMix64: a small deterministic generator, so figures are reproducible from a seed.
#[derive(Clone, Debug)]
pub struct SplitMix64(u64);

impl SplitMix64 {
    /// A generator from `seed`.
    pub fn new(seed: u64) -> SplitMix64 {
        SplitMix64(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A number in `[0, n)` (`n > 0`).
    pub fn below(&mut self, n: u64) -> u64 {
        ((u128::from(self.next_u64()) * u128::from(n)) >> 64) as u64
    }
}

/// The buffer uses the tracking benchmark draws from.
pub const BUFFER_USES: [Use; 8] = [
    Use::ComputeStorageWrite,
    Use::ComputeStorageRead,
    Use::IndexRead,
    Use::VertexRead,
    Use::IndirectRead,
    Use::UniformRead(PipelineStages::VERTEX_SHADER.union(PipelineStages::FRAGMENT_SHADER)),
    Use::TransferDst,
    Use::TransferSrc,
];

/// Parameters of [`compare_tracking`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TrackingBenchDesc {
    /// Number of buffers.
    pub buffers: usize,
    /// Buffers per page under per-page tracking.
    pub buffers_per_page: usize,
    /// Size of each buffer in bytes.
    pub buffer_size: u64,
    /// Frames to run.
    pub frames: usize,
    /// Passes (batches) per frame.
    pub passes_per_frame: usize,
    /// Buffers used by each pass, picked at random, each with a random use of [`BUFFER_USES`].
    pub uses_per_pass: usize,
    /// The global-barrier rule of both trackers.
    pub global_barriers: GlobalBarrierRule,
    /// Seed.
    pub seed: u64,
}

impl Default for TrackingBenchDesc {
    /// 10 000 buffers of 4 KiB, 16 per page, 4 frames of 20 passes of 200 uses, precise barriers.
    fn default() -> TrackingBenchDesc {
        TrackingBenchDesc {
            buffers: 10_000,
            buffers_per_page: 16,
            buffer_size: 4096,
            frames: 4,
            passes_per_frame: 20,
            uses_per_pass: 200,
            global_barriers: GlobalBarrierRule::Never,
            seed: 7,
        }
    }
}

/// Barrier figures of one tracking granularity, averaged per frame.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct TrackingFigures {
    /// Barrier structures (memory, buffer and image) per frame.
    pub barriers_per_frame: f64,
    /// Bytes named by buffer barriers per frame (a memory barrier counts as every tracked byte).
    pub bytes_covered_per_frame: f64,
    /// Passes that needed a `vkCmdPipelineBarrier2`, per frame.
    pub barrier_commands_per_frame: f64,
    /// Per-page only: page barriers in passes where no buffer of that page needed one under
    /// per-buffer tracking (pure over-synchronisation: a neighbour's use made the page wait), per
    /// frame. Counted from buffer barriers, so exact under [`GlobalBarrierRule::Never`].
    pub false_dependencies_per_frame: f64,
}

/// Per-buffer against per-page tracking on the same random uses.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct TrackingBenchReport {
    /// The parameters.
    pub desc: TrackingBenchDesc,
    /// Declared uses per frame.
    pub uses_per_frame: usize,
    /// Each placed buffer tracked on its own.
    pub per_buffer: TrackingFigures,
    /// Buffers tracked through their page (the legacy behaviour).
    pub per_page: TrackingFigures,
}

#[derive(Default)]
struct Tally {
    barriers: usize,
    bytes: u64,
    commands: usize,
    false_dependencies: usize,
}

impl Tally {
    fn add(&mut self, flush: &Flush, all_bytes: u64) {
        let n = flush.barrier_count();
        self.barriers += n;
        self.commands += usize::from(n > 0);
        self.bytes += flush.barriers.buffers.iter().map(|b| b.size).sum::<u64>();
        self.bytes += all_bytes * flush.barriers.memory.len() as u64;
    }

    fn per_frame(&self, frames: usize) -> TrackingFigures {
        let f = frames.max(1) as f64;
        TrackingFigures {
            barriers_per_frame: self.barriers as f64 / f,
            bytes_covered_per_frame: self.bytes as f64 / f,
            barrier_commands_per_frame: self.commands as f64 / f,
            false_dependencies_per_frame: self.false_dependencies as f64 / f,
        }
    }
}

/// Runs the same random uses through a per-buffer tracker and a per-page tracker and counts the
/// barriers each emits. Buffer `i` lives in page `i / buffers_per_page`.
pub fn compare_tracking(desc: TrackingBenchDesc) -> TrackingBenchReport {
    let device = DeviceIndex::DEFAULT;
    let queue = QueueFamily::new(0);
    let options = TrackerOptions::default().with_global_barriers(desc.global_barriers);
    let per_page = desc.buffers_per_page.max(1);
    let pages = desc.buffers.div_ceil(per_page);
    let page_size = desc.buffer_size * per_page as u64;
    let mut precise = StateTracker::new(options);
    let mut paged = StateTracker::new(options);
    let page_id = |p: usize| ResourceId::new((desc.buffers + p) as u64);
    for p in 0..pages {
        paged
            .register_page(device, page_id(p), TrackedBufferDesc::new(format!("page {p}"), page_size))
            .expect("fresh ids");
    }
    for i in 0..desc.buffers {
        let id = ResourceId::new(i as u64);
        precise
            .register_buffer(device, id, TrackedBufferDesc::new(format!("buffer {i}"), desc.buffer_size))
            .expect("fresh ids");
        let paged_desc = PagedBufferDesc {
            name: format!("buffer {i}"),
            page: page_id(i / per_page),
            offset: (i % per_page) as u64 * desc.buffer_size,
            size: desc.buffer_size,
        };
        paged.register_paged_buffer(device, id, paged_desc).expect("fits its page");
    }
    let mut rng = SplitMix64::new(desc.seed);
    let (mut a, mut b) = (Tally::default(), Tally::default());
    let all_bytes = desc.buffers as u64 * desc.buffer_size;
    for _ in 0..desc.frames {
        for _ in 0..desc.passes_per_frame {
            let mut batch_a = precise.batch(device, queue);
            let mut uses = Vec::with_capacity(desc.uses_per_pass);
            for _ in 0..desc.uses_per_pass {
                let id = ResourceId::new(rng.below(desc.buffers.max(1) as u64));
                let use_ = BUFFER_USES[rng.below(BUFFER_USES.len() as u64) as usize];
                batch_a.declare(id, Region::Whole, use_).expect("registered buffer");
                uses.push((id, use_));
            }
            let flush_a = batch_a.flush();
            a.add(&flush_a, all_bytes);
            let mut batch_b = paged.batch(device, queue);
            for (id, use_) in uses {
                batch_b.declare(id, Region::Whole, use_).expect("registered buffer");
            }
            let flush_b = batch_b.flush();
            b.add(&flush_b, all_bytes);
            let mut needed: Vec<ResourceId> = flush_a
                .barriers
                .buffers
                .iter()
                .map(|x| page_id(x.resource.get() as usize / per_page))
                .collect();
            needed.sort_unstable();
            b.false_dependencies += flush_b
                .barriers
                .buffers
                .iter()
                .filter(|x| needed.binary_search(&x.resource).is_err())
                .count();
        }
    }
    TrackingBenchReport {
        desc,
        uses_per_frame: desc.passes_per_frame * desc.uses_per_pass,
        per_buffer: a.per_frame(desc.frames),
        per_page: b.per_frame(desc.frames),
    }
}

/// A frame-graph-like frame of transient resources over `passes` passes: render targets and
/// depth buffers (optimal images, 1-32 MiB, 64 KiB aligned) that live a few passes, and
/// scratch, staging and culling buffers (linear, 4 KiB-8 MiB, 256 B aligned) that mostly live one
/// or two passes; a few resources live long (history, shadow maps).
pub fn frame_graph_workload(seed: u64, passes: u32) -> Vec<TransientDesc> {
    let mut rng = SplitMix64::new(seed);
    let passes = passes.max(1);
    let count = passes as usize * 3;
    (0..count)
        .map(|i| {
            let first = rng.below(u64::from(passes)) as u32;
            let span = match rng.below(10) {
                0 => rng.below(u64::from(passes)) as u32,
                1..=3 => rng.below(6) as u32,
                _ => rng.below(2) as u32,
            };
            let last = (first + span).min(passes - 1);
            if rng.below(3) == 0 {
                // 1-32 MiB, log-uniform, in 64 KiB units (render targets are rarely powers of two).
                let size = ((1u64 << 20) << rng.below(5)) * (64 + rng.below(64)) / 64 / 65536 * 65536;
                TransientDesc::image(format!("target {i}"), size, 64 << 10, first..=last)
                    .with_uses(Use::ColorAttachmentWrite, Use::SampledRead(PipelineStages::FRAGMENT_SHADER))
            } else {
                // 4 KiB-8 MiB, log-uniform, in 256 B units.
                let size = ((4u64 << 10) << rng.below(11)) * (64 + rng.below(64)) / 64 / 256 * 256;
                TransientDesc::buffer(format!("scratch {i}"), size, 256, first..=last)
                    .with_uses(Use::ComputeStorageWrite, Use::ComputeStorageRead)
            }
        })
        .collect()
}

/// Plans `frames` frames of [`frame_graph_workload`] (seeds `seed`, `seed + 1`, ...) on one
/// planner with a 1 KiB `bufferImageGranularity`, and returns each frame's report: the first
/// frame grows the heaps, later frames show how far they are reused.
pub fn compare_transient(
    seed: u64,
    passes: u32,
    frames: usize,
) -> Result<Vec<TransientReport>, TransientError> {
    let mut planner = TransientPlanner::new(TransientPlannerDesc::default().with_granularity(1024))?;
    (0..frames as u64)
        .map(|f| planner.plan(&frame_graph_workload(seed.wrapping_add(f), passes)).map(|plan| plan.report))
        .collect()
}
