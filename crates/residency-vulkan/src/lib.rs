#![doc = include_str!("../README.md")]
//!
//! ## Where to start
//!
//! - [`DeviceSet`]: loads the Vulkan loader at run time, enumerates every physical device in a stable
//!   order and opens a logical [`Device`] on each, with a universal queue and a sparse-binding queue.
//! - [`ValidationMode`], [`ValidationLog`]: the debug messenger that routes validation messages to
//!   `tracing` and counts them.
//! - [`DeviceProfile`] capture: [`Device::profile`].
//! - [`sparse::ResidencyBackend`]: one API over both residency paths (hardware [`sparse`],
//!   [`sparse::software`]),
//!   validated once for both.
//! - [`testing`]: the GPU test harness (one device set per test binary, validation failures fail tests).
//!
//! ## The core's types
//!
//! A program that uses this crate needs no other: every `residency-core` type that its public
//! signatures take or return (arguments, return values, public fields, error variants, trait
//! items) is re-exported here, once, and so are the core types a caller needs to build those
//! values or to drive the core objects this crate hands out: a [`tracking::Use`] and
//! [`tracking::Region`] for the tracker's [`tracking::Batch`], a [`sparse::TileCoord`] for a
//! tile, the [`streaming::TileSource`] implementations [`streaming::FnSource`] and
//! [`streaming::RvtSource`]. Where one lives follows the core module it comes from, mirrored:
//!
//! | core module | here |
//! |---|---|
//! | `tiles` (tile math, sparse residency, the residency path) | [`sparse`]; the software path's indirection types in [`sparse::software`] |
//! | `streaming`, and `vt_file`'s [`streaming::VtDesc`] | [`streaming`] |
//! | `sync` (state tracking, uses, barriers) | [`tracking`]; the transient planner's results in [`transient`] |
//! | `placement`'s requirement queries | [`requirements`]; `profile`'s probe descriptions in [`profile_capture`] |
//! | `format`, `usage`, `memory`, `device_mask`, `desc`, `allocator`, `placement`, `profile`, `report` | the crate root |
//!
//! The rest of the core stays at `residency_core` alone: what runs without a device and that no
//! signature here takes (the placement engine answering requests from a profile, `.rvt` writing,
//! report rendering to SVG and charts, tile-math functions, a standalone `StateTracker`'s
//! registrations).

// The folders are layers, bottom to top (docs/ARCHITECTURE.md; the order is checked by
// tests/layering.rs): device, memory, resources, sync, pools, sparse (residency), pipelines,
// streaming, multi.
mod device;
mod error;
pub mod format_map;
mod instance;
mod memory;
pub mod multi;
mod pipelines;
mod poison;
mod pools;
mod resources;
pub mod sparse;
pub mod streaming;
mod sync;
pub mod testing;
mod validation;

// Public modules (one path each) and the types users name from the crate root. Internal code
// names everything by its folder path (`crate::device::life::Life`), never through these.
pub use device::{profile_capture, requirements};
pub use pipelines::{acceleration, compute, graphics, ray_tracing, shaders, spirv};
pub use pools::transient;
pub use sync::{queries, recording, tracking};

pub use ash;
pub use device::blocks::{MemoryError, PLACEMENT_MESSAGES_KEPT};
pub use device::ledger::{FaultSite, InjectedFault, Ledger, LiveObject};
pub use device::life::{ForeignUse, GpuUse, Timeline, ADOPTED_TEARDOWN_WAIT_NS};
pub use device::pressure::{PressureStats, DEFAULT_HEADROOM_PERCENT, REFRESH_EVERY};
pub use device::set::{DeviceSet, DeviceSetDesc, LiveDevice, TeardownError, SETS_DROPPED_IN_USE};
pub use device::{Device, EnabledFeatures, ExternalDevice, HeapStatus, Queue, QueueGuard, LEAKS_AT_TEARDOWN};
pub use error::{
    ErrorClass, Exhausted, ForeignReason, ForeignResource, ResidencyError, Result, VulkanError, LAVAPIPE_HINT,
};
pub use instance::{version_string, InstanceDesc};
pub use memory::placement::{Allocation, AllocationDesc, BoundTo, ExistingAllocationInfo, PlacementPolicy};
pub use pools::buffer_pool::{BufferInit, BufferPool, BufferPoolDesc, PoolRange, PoolStats};
pub use pools::defrag::{
    DefragDesc, DefragError, DefragStats, DefragTotals, Defragmenter, RelieveStats, Unmovable,
};
pub use pools::linear_pool::{LinearPool, LinearPoolDesc, LinearPoolStats};
pub use pools::local_ranges::{LocalRange, LocalRanges, LocalRangesStats};
pub use pools::report::ReportSources;
pub use resources::buffer::{AccessError, Buffer, BufferDesc, BufferPlacement};
pub use resources::image::{Filter, Image, ImageDesc, ImageView, ImageViewDesc, Sampler};
pub use sync::commands::{CommandContext, ReadBackError, Submission};
pub use sync::frame::PendingFrame;
pub use sync::upload::{
    ImageRegion, ImageTarget, StagingMemory, UploadError, UploadPath, Uploader, DEFAULT_CHUNK_BYTES,
    DEFAULT_IMPORT_CHUNK, DEFAULT_IMPORT_THRESHOLD, DEFAULT_STREAM_WINDOW, PARALLEL_COPY_PIECE,
};
pub use validation::{Severity, ValidationLog, ValidationMessage, ValidationMode};

// The core types the root's signatures take (see "The core's types" above); the module-specific
// ones are re-exported by their modules (sparse, streaming, tracking, transient, requirements,
// profile_capture). Each core item is re-exported once (tests/public_face.rs).
pub use residency_core::allocator::{
    AllocError, InvariantError, LinearError, LinearInvariantError, LinearMode, Repack, ResourceKind,
};
pub use residency_core::desc::DescError;
pub use residency_core::device_mask::{DeviceIndex, DeviceMask};
pub use residency_core::format::Format;
pub use residency_core::memory::{HeapBudget, MemoryIntent, MemoryTier};
pub use residency_core::placement::{
    usage_alignment_floor, Message, Placement, PlacementError, ResourceDesc,
};
pub use residency_core::profile::{DeviceProfile, ImageDimension, Limits, MemoryHeap, MemoryProperties};
pub use residency_core::report::{DeviceSetReport, MemoryReport, PoolReport};
pub use residency_core::usage::{BufferPoolUsage, BufferUsage, ImageUsage};
