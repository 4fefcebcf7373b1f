//! The Vulkan backend of `residency`, on `ash`.
//!
//! All of the library's `unsafe` lives in this crate, each block with a `// SAFETY:` line.
//! - [`DeviceSet`]: loads the Vulkan loader at run time, enumerates every physical device in a stable
//!   order and opens a logical [`Device`] on each, with a universal queue and a sparse-binding queue.
//! - [`validation`]: the debug messenger that routes validation messages to `tracing` and counts them.
//! - [`DeviceProfile`](residency_core::profile::DeviceProfile) capture: [`Device::profile`].
//! - [`ResidencyBackend`]: one API over both residency paths (hardware [`sparse`], [`software`]),
//!   validated once for both.
//! - [`testing`]: the GPU test harness (one device set per test binary, validation failures fail tests).

// The folders mirror the architecture (docs/ARCHITECTURE.md): devices, memory, resources,
// synchronisation and lifetimes, pipelines, both residency paths, multi-device.
mod device;
mod error;
pub mod format_map;
mod instance;
mod memory;
pub mod multi;
mod pipelines;
mod resources;
pub mod sparse;
pub mod streaming;
mod sync;
pub mod testing;
pub mod validation;

// The flat paths the crate and its users name things by.
pub(crate) use device::{ledger, set as device_set};
pub use device::{profile_capture, requirements};
pub(crate) use memory::{defrag, placement as resource_memory, pool, report};
pub use multi::work as multi_work;
pub(crate) use pipelines::descriptors;
pub use pipelines::{compute, graphics, shaders, spirv};
pub(crate) use resources::{buffer, image, upload};
pub use sparse::{backend as residency_backend, software};
pub(crate) use sync::{commands, retire};
pub use sync::{recording, tracking, transient};

pub use ash;
pub use buffer::{
    vk_buffer_usage, AccessError, Buffer, BufferDesc, BufferPlacement, ForeignReason, ForeignResource,
};
pub use commands::{CommandContext, ReadBackError, Submission};
pub use defrag::{DefragDesc, DefragError, DefragStats, DefragTotals, Defragmenter, Unmovable};
pub use device::{Device, EnabledFeatures, ExternalDevice, HeapStatus, Queue, QueueGuard, LEAKS_AT_TEARDOWN};
pub use device_set::{DeviceSet, DeviceSetDesc, LiveDevice, TeardownError, SETS_DROPPED_IN_USE};
pub use error::{Result, VulkanError, LAVAPIPE_HINT};
pub use image::{Filter, Image, ImageDesc, ImageView, ImageViewDesc, Sampler};
pub use instance::{version_string, InstanceDesc};
pub use ledger::{FaultSite, InjectedFault, Ledger, LiveObject};
pub use memory::linear_pool::{LinearPool, LinearPoolDesc, LinearPoolStats};
pub use memory::MemoryError;
pub use pool::{BufferInit, BufferPool, BufferPoolDesc, PoolRange, PoolStats};
pub use recording::Recording;
pub use report::ReportSources;
pub use residency_backend::ResidencyBackend;
pub use resource_memory::{
    usage_alignment_floor, Allocation, AllocationDesc, BoundTo, PlacementPolicy, PLACEMENT_MESSAGES_KEPT,
};
pub use retire::{ForeignUse, GpuUse, Timeline, ADOPTED_TEARDOWN_WAIT_NS};
pub use sync::frame::PendingFrame;
pub use upload::{ImageRegion, ImageTarget, UploadError, Uploader, PARALLEL_COPY_PIECE};
pub use validation::ValidationMode;
