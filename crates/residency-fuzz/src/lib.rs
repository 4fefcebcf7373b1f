#![doc = include_str!("../README.md")]
//!
//! ## The targets
//!
//! They panic only on a real bug: a broken invariant, an answer outside the spec's bounds, a model
//! disagreement, or a panic inside the core itself.
//!
//! The `fuzz/` directory at the repository root runs them under libFuzzer (`cargo +nightly fuzz
//! run <target>`); `tests/bounded.rs` runs every target a fixed number of times on its seed corpus,
//! its regressions and mutations of them, so that `cargo test` (and CI, on stable Rust) exercises
//! them too. See `docs/reliability.md` for the figures of the long runs and what they found.
//!
//! [`safe_api`] is of another kind: random sequences of public safe calls of `residency_vulkan`
//! on a real device set under the validation layer (its driver is the `safe-api-fuzz` binary,
//! its bounded run and corpus replay `tests/safe_api.rs`).
#![forbid(unsafe_code)]

mod alloc_ops;
mod defrag_ops;
mod fast_hash;
mod input;
mod json_ops;
mod linear_ops;
mod placement_ops;
mod placement_path_ops;
mod profiles;
mod retire_ops;
mod rvt_ops;
pub mod safe_api;
mod streamer_ops;
mod streaming_ops;
mod tile_ops;

/// Random operation sequences against the TLSF heap allocator, the per-frame ring and the
/// physical tile pool, checked after every operation by their invariant checkers and by a
/// reference model of the live ranges (no overlap, alignment, byte counts, empty at the end).
pub fn allocator(data: &[u8]) {
    alloc_ops::run(data);
}

/// Random resource descriptions on random devices into the placement engine: an answer within
/// the spec's bounds (or a typed error), tight never worse than legacy, the same answer twice.
pub fn placement(data: &[u8]) {
    placement_ops::run(data);
}

/// Random virtual images, tile shapes and mip tails laid out, then committed and released tile
/// by tile through a page table and a tile pool, each change set planned into binds.
pub fn tile_math(data: &[u8]) {
    tile_ops::run(data);
}

/// Arbitrary bytes as a `.rvt` file (as is, and with every checksum recomputed): a typed error or
/// an index that agrees with the file, whose tiles read back at their declared sizes.
pub fn rvt_reader(data: &[u8]) {
    rvt_ops::run(data);
}

/// Arbitrary text as the CLI's JSON inputs: a device profile, a list of profiles and an
/// `alloc-info` request, then what the CLI does with them.
pub fn profile_json(data: &[u8]) {
    json_ops::run(data);
}

/// Random frames of requests, completions, failures, budget changes and image registrations into
/// the streaming manager, its contract checked after every call.
pub fn streaming_manager(data: &[u8]) {
    streaming_ops::run(data);
}

/// Random releases, clock advances and collections into the deferred-destruction queue, against
/// a reference model (nothing early, nothing late, release order, nothing lost).
pub fn retire_queue(data: &[u8]) {
    retire_ops::run(data);
}

/// Random heaps of the TLSF allocator planned for defragmentation under a random budget: the
/// plan keeps its rules (`check_plan`), is deterministic, and carried out with `allocate_at` gets
/// the planned footprints, conserves live bytes and empties the heaps it says; raw heap
/// descriptions are a plan or a typed error.
pub fn defrag_plan(data: &[u8]) {
    defrag_ops::run(data);
}

/// Random allocations (lower and upper) and frees into the linear allocator in its three modes
/// (stack, double stack, ring) against a reference model in physical offsets: exact placement,
/// refusals only when the model has no room, no overlap, the counters, empty at the end.
pub fn linear_allocator(data: &[u8]) {
    linear_ops::run(data);
}

/// A CPU model of the streamer's frame protocol over the streaming manager: 1–3 frames in
/// flight, late feedback, loads finishing out of order, evictions, budget changes, textures added
/// and removed; no tile a frame in flight samples is rebound without a wait for that frame, the
/// changes handed out rebuild the page tables, the manager's contract after every tick.
pub fn streamer_frames(data: &[u8]) {
    streamer_ops::run(data);
}

/// The placement engine in the allocation path: a pool's request (tight or legacy, the caller's
/// floor) raised to the usage floors, placed in a TLSF heap of the device's granularity: offsets
/// aligned to every rule and non-overlapping, tight never above legacy.
pub fn placement_path(data: &[u8]) {
    placement_path_ops::run(data);
}

/// A fuzz target body.
pub type Target = fn(&[u8]);

/// Every target by name, as `fuzz/fuzz_targets/<name>.rs` and the corpus folders name them.
pub const TARGETS: &[(&str, Target)] = &[
    ("allocator", allocator),
    ("placement", placement),
    ("tile_math", tile_math),
    ("rvt_reader", rvt_reader),
    ("profile_json", profile_json),
    ("streaming_manager", streaming_manager),
    ("retire_queue", retire_queue),
    ("defrag_plan", defrag_plan),
    ("linear_allocator", linear_allocator),
    ("streamer_frames", streamer_frames),
    ("placement_path", placement_path),
];
