#![doc = include_str!("../README.md")]
//!
//! ## Where to start
//!
//! - [`DeviceSet`]: loads the Vulkan loader at run time, enumerates every physical device in a stable
//!   order and opens a logical [`Device`] on each, with a universal queue and a sparse-binding queue.
//! - [`ValidationMode`], [`ValidationLog`]: the debug messenger that routes validation messages to
//!   `tracing` and counts them.
//! - [`DeviceProfile`](residency_core::profile::DeviceProfile) capture: [`Device::profile`].
//! - [`sparse::ResidencyBackend`]: one API over both residency paths (hardware [`sparse`],
//!   [`sparse::software`]),
//!   validated once for both.
//! - [`testing`]: the GPU test harness (one device set per test binary, validation failures fail tests).

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
pub use pipelines::{compute, graphics, shaders, spirv};
pub use pools::transient;
pub use sync::{recording, tracking};

pub use ash;
pub use device::blocks::{MemoryError, PLACEMENT_MESSAGES_KEPT};
pub use device::ledger::{FaultSite, InjectedFault, Ledger, LiveObject};
pub use device::life::{ForeignUse, GpuUse, Timeline, ADOPTED_TEARDOWN_WAIT_NS};
pub use device::set::{DeviceSet, DeviceSetDesc, LiveDevice, TeardownError, SETS_DROPPED_IN_USE};
pub use device::{Device, EnabledFeatures, ExternalDevice, HeapStatus, Queue, QueueGuard, LEAKS_AT_TEARDOWN};
pub use error::{
    ErrorClass, Exhausted, ForeignReason, ForeignResource, ResidencyError, Result, VulkanError, LAVAPIPE_HINT,
};
pub use instance::{version_string, InstanceDesc};
pub use memory::placement::{usage_alignment_floor, Allocation, AllocationDesc, BoundTo, PlacementPolicy};
pub use pools::buffer_pool::{BufferInit, BufferPool, BufferPoolDesc, PoolRange, PoolStats};
pub use pools::defrag::{DefragDesc, DefragError, DefragStats, DefragTotals, Defragmenter, Unmovable};
pub use pools::linear_pool::{LinearPool, LinearPoolDesc, LinearPoolStats};
pub use pools::report::ReportSources;
pub use resources::buffer::{AccessError, Buffer, BufferDesc, BufferPlacement};
pub use resources::image::{Filter, Image, ImageDesc, ImageView, ImageViewDesc, Sampler};
pub use sync::commands::{CommandContext, ReadBackError, Submission};
pub use sync::frame::PendingFrame;
pub use sync::recording::Recording;
pub use sync::upload::{ImageRegion, ImageTarget, UploadError, Uploader, PARALLEL_COPY_PIECE};
pub use validation::{Severity, ValidationLog, ValidationMessage, ValidationMode};
