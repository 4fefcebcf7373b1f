#![doc = include_str!("../README.md")]
//!
//! ## Modules
//!
//! - [`desc`]: why a description is refused where it is consumed ([`desc::DescError`]).
//! - [`device_mask`]: device indices and 32-bit device masks.
//! - [`format`](mod@format): texel formats and their block sizes.
//! - [`memory`]: memory-type presets by intent, heap growth and budgets.
//! - [`profile`]: a device's capabilities as one serialisable value (a *device profile*), which can
//!   stand in for a live device wherever only requirements and limits are needed.
//! - [`placement`]: the tight placed-resource alignment engine (D3D12 tight alignment on Vulkan).
//! - [`allocator`]: offset allocators for heaps (O(1) two-level segregated fit) and per-frame rings.
//! - [`usage`]: buffer bind flags and pool usage (known or unknown flags).
//! - [`streaming`]: shader feedback, LOD warnings and the streaming manager's policy.
//! - [`vt_file`]: the `.rvt` tiled virtual-texture file format.
//! - [`sync`]: per-resource state tracking, the barrier batcher and transient memory aliasing.
//! - [`tiles`]: sparse tile math, page tables, residency bitmaps and the physical tile pool.
//! - [`report`]: memory reports, statistics, VMA-format JSON dumps and SVG heap maps.
#![forbid(unsafe_code)]

pub mod allocator;
pub mod desc;
pub mod device_mask;
pub mod format;
pub mod memory;
pub mod placement;
mod poison;
pub mod profile;
pub mod report;
pub mod streaming;
pub mod sync;
pub mod tiles;
pub mod usage;
pub mod vt_file;
