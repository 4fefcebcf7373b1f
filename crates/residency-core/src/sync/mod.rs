//! Resource state tracking on synchronization2: per-resource states, the barrier batcher and
//! transient memory aliasing.
//!
//! - [`StateTracker`]: the state of every tracked resource, keyed by (device, resource): placed
//!   buffers per byte range, pages of known-flags pools as one piece (the legacy per-page
//!   behaviour), images per subresource (mip level x array layer).
//! - [`Batch`]: the uses the next commands make of resources; [`Batch::flush`] returns the
//!   barriers of one `vkCmdPipelineBarrier2` (plus release barriers for other queues when
//!   ownership moves).
//! - [`TransientPlanner`]: places a frame's transient buffers and images in shared heaps so that
//!   resources whose pass intervals do not overlap alias the same memory, with the aliasing
//!   barriers, reusing its heaps frame after frame.
//! - [`RetireQueue`]: deferred destruction keyed on GPU progress ([`LastUses`] per resource,
//!   clocks that only grow: queue timelines, frame counters).
//! - [`ClockCache`]: a GPU clock's progress as the host caches it (submitted, seen completed),
//!   shared by threads without a lock.
//! - [`measure`]: pure functions that count barriers and bytes, for the benchmarks.
//!
//! The flag types carry Vulkan's own bit values, so the backend converts them with
//! `from_raw(x.bits())`; nothing here depends on Vulkan. `docs/sync.md` explains the model.
#![warn(missing_docs)]

mod barrier;
mod batch;
mod clock;
mod error;
mod flags;
pub mod measure;
mod range_map;
mod region;
mod retire;
mod state;
mod tracker;
mod transient;
mod uses;

pub use barrier::{
    BarrierBatch, BufferBarrier, Flush, GlobalBarrierRule, ImageBarrier, MemoryBarrier, QueueRelease, Scope,
};
pub use batch::Batch;
pub use clock::{ClockCache, Counter};
pub use error::{SyncError, TransientError};
pub use flags::{AccessFlags, ImageAspects, ImageLayout, PipelineStages, QueueFamily};
pub use region::{Region, SubresourceRange};
pub use retire::{ClockId, GpuPoint, LastUses, RetireQueue};
pub use state::ResourceState;
pub use tracker::{
    BufferTracking, PagedBufferDesc, Sharing, StateTracker, TrackedBufferDesc, TrackedImageDesc,
    TrackerOptions,
};
pub use transient::{
    AliasingBarrier, FramePlan, HeapGrowth, TransientDesc, TransientPlacement, TransientPlanner,
    TransientPlannerDesc, TransientReport,
};
pub use uses::{CustomUse, Use, UseInfo};

use serde::{Deserialize, Serialize};
use std::fmt;

/// The caller's id for a tracked resource (a buffer, a page or an image): unique per device.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct ResourceId(u64);

impl ResourceId {
    /// The id `value`.
    pub const fn new(value: u64) -> ResourceId {
        ResourceId(value)
    }

    /// The number.
    pub const fn get(self) -> u64 {
        self.0
    }
}

impl fmt::Debug for ResourceId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ResourceId({})", self.0)
    }
}

impl fmt::Display for ResourceId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "resource #{}", self.0)
    }
}
