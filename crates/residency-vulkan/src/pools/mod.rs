//! What makes, moves and reports resources: buffer pools (placed buffers and ranges of pooled
//! pages), linear pools, transient (per-frame, aliased) pools, the defragmenter, and memory
//! reports. Above `sync/` (pools record copies and barriers, the defragmenter submits) and below
//! the residency paths.

pub(crate) mod buffer_pool;
pub(crate) mod defrag;
pub(crate) mod linear_pool;
pub(crate) mod local_ranges;
pub(crate) mod range_cache;
pub(crate) mod report;
pub mod transient;
