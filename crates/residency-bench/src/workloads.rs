//! The `alloc` workloads: W1 (VMA's virtual-block benchmark, ported), W2 (many tiny buffers) and
//! W5 (requests that fit no fragment).
//!
//! Every random number is drawn before the clock starts, so the timed loops measure the
//! allocators, not the generator; the operation sequence is the same for every allocator.

use std::hint::black_box;
use std::time::Instant;

use crate::suballocators::SubAllocator;
use crate::vma_rng::VmaRng;

/// VMA's `TestVirtualBlocksAlgorithmsBenchmark` constants.
pub const W1_SEED: u32 = 20_092_010;
/// Allocations made before the random phase.
pub const W1_ALLOCATION_COUNT: usize = 7200;
/// Sizes are `rand % W1_MAX_ALLOC_SIZE + 1`.
pub const W1_MAX_ALLOC_SIZE: u32 = 2056;
/// Random alloc/free operations after the initial allocations.
pub const W1_RANDOM_OPERATION_COUNT: usize = W1_ALLOCATION_COUNT * 2;
/// The alignments VMA's benchmark loops over.
pub const W1_ALIGNMENTS: [u64; 4] = [1, 16, 64, 256];
/// VMA runs 3 strategies x 2 algorithms per alignment, all drawing from one generator; its TLSF
/// default-strategy run is the first of the six.
const W1_CONFIGS_PER_ALIGNMENT: usize = 6;

/// One W1 configuration: the block size, the initial sizes, and the random phase's raw draws.
#[derive(Clone, Debug)]
pub struct W1Plan {
    /// Alignment of every allocation.
    pub alignment: u64,
    /// Block size: 2.5 x the sum of the initial sizes, as VMA computes it.
    pub capacity: u64,
    /// Sizes of the initial allocations.
    pub sizes: Vec<u32>,
    /// Per random operation: the draw that chooses alloc (odd) or free (even), and the draw that
    /// gives the size or the index.
    pub ops: Vec<(u32, u32)>,
}

/// The W1 plans for every alignment, with the draws VMA's TLSF default-strategy run sees at that
/// alignment: the generator is seeded once, sizes are drawn first, then every configuration of
/// VMA's loop consumes two draws per random operation in order.
pub fn w1_plans() -> Vec<W1Plan> {
    let mut rng = VmaRng::new(W1_SEED);
    let sizes: Vec<u32> = (0..W1_ALLOCATION_COUNT).map(|_| rng.generate() % W1_MAX_ALLOC_SIZE + 1).collect();
    let total: u64 = sizes.iter().map(|&s| u64::from(s)).sum();
    let capacity = (total as f64 * 2.5) as u64;
    W1_ALIGNMENTS
        .iter()
        .map(|&alignment| {
            let ops: Vec<(u32, u32)> =
                (0..W1_RANDOM_OPERATION_COUNT).map(|_| (rng.generate(), rng.generate())).collect();
            // Skip the draws of the other five configurations of this alignment.
            for _ in 0..(W1_CONFIGS_PER_ALIGNMENT - 1) * W1_RANDOM_OPERATION_COUNT * 2 {
                rng.generate();
            }
            W1Plan { alignment, capacity, sizes: sizes.clone(), ops }
        })
        .collect()
}

/// What one run of a workload measured.
#[derive(Clone, Copy, Debug, Default)]
pub struct RunResult {
    /// Allocations and frees performed in the timed region.
    pub ops: u64,
    /// Wall time of the timed region.
    pub nanos: u64,
    /// Highest end of any allocation's footprint: the heap size this workload needs.
    pub high_water: u64,
    /// Peak of the live requested bytes.
    pub peak_requested: u64,
    /// Live requested bytes when `largest_free` was taken.
    pub requested_at_end: u64,
    /// Largest free range as the allocator reports it, after the random phase.
    pub largest_free: u64,
    /// Allocations that failed (out of space).
    pub failures: u64,
}

/// Tracks footprint statistics; compiled out of the timed runs (`TRACK = false`).
#[derive(Default)]
struct Footprint<const TRACK: bool> {
    high_water: u64,
    live: u64,
    peak: u64,
}

impl<const TRACK: bool> Footprint<TRACK> {
    #[inline]
    fn on_alloc<A: SubAllocator>(&mut self, a: &A, h: &A::Handle, size: u64, alignment: u64) {
        if TRACK {
            assert_eq!(a.offset(h) % alignment, 0, "{} returned a misaligned offset", A::NAME);
            self.high_water = self.high_water.max(a.end(h));
            self.live += size;
            self.peak = self.peak.max(self.live);
        }
    }

    #[inline]
    fn on_free(&mut self, size: u64) {
        if TRACK {
            self.live -= size;
        }
    }
}

/// Runs W1 as VMA does: the initial allocations, the random phase (odd draw: allocate
/// `draw % 2056 + 1`; even: free a random live allocation, moving the last into its slot), then
/// the frees of the first 7200 slots in reverse. All three phases are timed.
pub fn run_w1<A: SubAllocator, const TRACK: bool>(context: &A::Context, plan: &W1Plan) -> RunResult {
    let mut allocator = A::with_capacity(context, plan.capacity);
    let mut fp = Footprint::<TRACK>::default();
    let mut live: Vec<(A::Handle, u64)> = Vec::with_capacity(W1_ALLOCATION_COUNT + W1_RANDOM_OPERATION_COUNT);
    let mut failures = 0;
    let mut ops = 0u64;

    let start = Instant::now();
    for &size in &plan.sizes {
        let size = u64::from(size);
        match allocator.allocate(size, plan.alignment) {
            Some(h) => {
                fp.on_alloc(&allocator, &h, size, plan.alignment);
                live.push((h, size));
            }
            None => failures += 1,
        }
        ops += 1;
    }
    for &(choice, value) in &plan.ops {
        if choice % 2 != 0 {
            let size = u64::from(value % W1_MAX_ALLOC_SIZE + 1);
            match allocator.allocate(size, plan.alignment) {
                Some(h) => {
                    fp.on_alloc(&allocator, &h, size, plan.alignment);
                    live.push((h, size));
                }
                None => failures += 1,
            }
        } else if !live.is_empty() {
            let index = value as usize % live.len();
            let (h, size) = live.swap_remove(index);
            allocator.free(h);
            fp.on_free(size);
        }
        ops += 1;
    }
    let random_done = start.elapsed();
    let largest_free = allocator.largest_free(live.iter().map(|(h, _)| h));
    let requested_at_end = live.iter().map(|(_, s)| s).sum();
    let restart = Instant::now();
    let frees = live.len().min(W1_ALLOCATION_COUNT);
    for (h, _) in live.drain(..frees).rev() {
        allocator.free(h);
        ops += 1;
    }
    let nanos = (random_done + restart.elapsed()).as_nanos() as u64;
    black_box(&allocator);
    RunResult {
        ops,
        nanos,
        high_water: fp.high_water,
        peak_requested: fp.peak,
        requested_at_end,
        largest_free,
        failures,
    }
}

/// W2's parameters: many tiny buffers with churn.
pub const W2_SEED: u32 = 20_092_010;
/// Total allocations.
pub const W2_ALLOCATION_COUNT: usize = 100_000;
/// Live allocations kept once the working set is built: beyond it every allocation first frees
/// a random live one.
pub const W2_LIVE_TARGET: usize = 20_000;
/// Smallest buffer.
pub const W2_MIN_SIZE: u32 = 16;
/// Largest buffer.
pub const W2_MAX_SIZE: u32 = 4096;
/// Block size given to every allocator (ample: the figure of merit is the high-water mark).
pub const W2_CAPACITY: u64 = 1 << 30;
/// The alignments W2 runs at.
pub const W2_ALIGNMENTS: [u64; 2] = [16, 256];

/// W2's draws: per allocation, its size and the draw that picks the victim once the working set
/// is full.
#[derive(Clone, Debug)]
pub struct W2Plan {
    /// Alignment of every allocation.
    pub alignment: u64,
    /// `(size, victim draw)` per allocation.
    pub ops: Vec<(u32, u32)>,
}

/// The W2 plans (the same draws at every alignment).
pub fn w2_plans() -> Vec<W2Plan> {
    let mut rng = VmaRng::new(W2_SEED);
    let ops: Vec<(u32, u32)> = (0..W2_ALLOCATION_COUNT)
        .map(|_| (W2_MIN_SIZE + rng.generate() % (W2_MAX_SIZE - W2_MIN_SIZE + 1), rng.generate()))
        .collect();
    W2_ALIGNMENTS.iter().map(|&alignment| W2Plan { alignment, ops: ops.clone() }).collect()
}

/// Runs W2: 100 000 allocations of 16 B..=4 KiB; once 20 000 are live, each allocation first frees
/// a random live one; at the end everything is freed. All of it is timed.
pub fn run_w2<A: SubAllocator, const TRACK: bool>(context: &A::Context, plan: &W2Plan) -> RunResult {
    let mut allocator = A::with_capacity(context, W2_CAPACITY);
    let mut fp = Footprint::<TRACK>::default();
    let mut live: Vec<(A::Handle, u64)> = Vec::with_capacity(W2_LIVE_TARGET + 1);
    let mut failures = 0;
    let mut ops = 0u64;
    let mut largest_free = 0;
    let mut requested_at_end = 0;

    let start = Instant::now();
    for &(size, victim) in &plan.ops {
        if live.len() >= W2_LIVE_TARGET {
            let (h, size) = live.swap_remove(victim as usize % live.len());
            allocator.free(h);
            fp.on_free(size);
            ops += 1;
        }
        let size = u64::from(size);
        match allocator.allocate(size, plan.alignment) {
            Some(h) => {
                fp.on_alloc(&allocator, &h, size, plan.alignment);
                live.push((h, size));
            }
            None => failures += 1,
        }
        ops += 1;
    }
    if TRACK {
        largest_free = allocator.largest_free(live.iter().map(|(h, _)| h));
        requested_at_end = live.iter().map(|(_, s)| s).sum();
    }
    for (h, size) in live.drain(..) {
        allocator.free(h);
        fp.on_free(size);
        ops += 1;
    }
    let nanos = start.elapsed().as_nanos() as u64;
    black_box(&allocator);
    RunResult {
        ops,
        nanos,
        high_water: fp.high_water,
        peak_requested: fp.peak,
        requested_at_end,
        largest_free,
        failures,
    }
}

/// W5's free fragments: this many blocks of [`W5_FRAGMENT_SIZE`] stay free between used ones.
pub const W5_FRAGMENTS: usize = 100_000;
/// Size of every block of W5's setup (used and free alike).
pub const W5_FRAGMENT_SIZE: u64 = 64;
/// Alignment of every W5 request.
pub const W5_ALIGNMENT: u64 = 16;
/// Failing requests timed per run: sizes just above a fragment (same bin) and well above it.
pub const W5_REQUEST_SIZES: [u64; 4] = [65, 96, 128, 4096];
/// Failing requests per run.
pub const W5_REQUESTS: usize = 1000;
/// The block: exactly the setup's `2 * W5_FRAGMENTS` blocks, so no free tail is left.
pub const W5_CAPACITY: u64 = 2 * W5_FRAGMENTS as u64 * W5_FRAGMENT_SIZE;

/// W5 has no draws; the plan only names it.
#[derive(Clone, Copy, Debug, Default)]
pub struct W5Plan;

/// Runs W5 (`w5-fail-fragmented`): fills the block with `2 * W5_FRAGMENTS` blocks of 64 B and
/// frees every other one (untimed), then times [`W5_REQUESTS`] requests that fit no fragment.
/// `ops` is the number of failing requests; a request that succeeds is a bug of the allocator.
pub fn run_w5<A: SubAllocator, const TRACK: bool>(context: &A::Context, _plan: &W5Plan) -> RunResult {
    let mut allocator = A::with_capacity(context, W5_CAPACITY);
    let mut fp = Footprint::<TRACK>::default();
    let mut all: Vec<A::Handle> = Vec::with_capacity(2 * W5_FRAGMENTS);
    for _ in 0..2 * W5_FRAGMENTS {
        let h =
            allocator.allocate(W5_FRAGMENT_SIZE, W5_ALIGNMENT).expect("W5's setup fills its block exactly");
        fp.on_alloc(&allocator, &h, W5_FRAGMENT_SIZE, W5_ALIGNMENT);
        all.push(h);
    }
    let mut live = Vec::with_capacity(W5_FRAGMENTS);
    for (i, h) in all.into_iter().enumerate() {
        if i % 2 == 0 {
            allocator.free(h);
            fp.on_free(W5_FRAGMENT_SIZE);
        } else {
            live.push(h);
        }
    }
    let mut failures = 0;
    let start = Instant::now();
    for &size in W5_REQUEST_SIZES.iter().cycle().take(W5_REQUESTS) {
        match allocator.allocate(black_box(size), W5_ALIGNMENT) {
            Some(h) => panic!("{}: {size} B fitted a 64-B fragment at {}", A::NAME, allocator.offset(&h)),
            None => failures += 1,
        }
    }
    let nanos = start.elapsed().as_nanos() as u64;
    let largest_free = if TRACK { allocator.largest_free(live.iter()) } else { 0 };
    let requested_at_end = fp.live;
    for h in live {
        allocator.free(h);
    }
    black_box(&allocator);
    RunResult {
        ops: W5_REQUESTS as u64,
        nanos,
        high_water: fp.high_water,
        peak_requested: fp.peak,
        requested_at_end,
        largest_free,
        failures,
    }
}
