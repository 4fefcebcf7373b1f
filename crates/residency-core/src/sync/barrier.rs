//! The barriers a flush returns: plain data the backend turns into `VkMemoryBarrier2`,
//! `VkBufferMemoryBarrier2` and `VkImageMemoryBarrier2` for one `vkCmdPipelineBarrier2`.

use super::flags::{AccessFlags, ImageAspects, ImageLayout, PipelineStages, QueueFamily};
use super::region::SubresourceRange;
use super::ResourceId;
use serde::{Deserialize, Serialize};

/// One side of a dependency: stages and the accesses they perform.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Scope {
    /// Pipeline stages.
    pub stages: PipelineStages,
    /// Memory accesses.
    pub access: AccessFlags,
}

impl Scope {
    /// No stage, no access.
    pub const NONE: Scope = Scope { stages: PipelineStages::NONE, access: AccessFlags::NONE };

    /// A scope of `stages` and `access`.
    pub const fn new(stages: PipelineStages, access: AccessFlags) -> Scope {
        Scope { stages, access }
    }

    /// The union of two scopes.
    pub const fn union(self, other: Scope) -> Scope {
        Scope { stages: self.stages.union(other.stages), access: self.access.union(other.access) }
    }
}

/// A global memory barrier (`VkMemoryBarrier2`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct MemoryBarrier {
    /// First scope: the work and writes to wait for.
    pub src: Scope,
    /// Second scope: the work that waits and the accesses the writes are made visible to.
    pub dst: Scope,
}

/// A buffer barrier (`VkBufferMemoryBarrier2`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct BufferBarrier {
    /// The tracked buffer (a placed buffer, or a page buffer under per-page tracking).
    pub resource: ResourceId,
    /// First byte covered.
    pub offset: u64,
    /// Bytes covered.
    pub size: u64,
    /// First scope.
    pub src: Scope,
    /// Second scope.
    pub dst: Scope,
    /// Queue family releasing ownership ([`QueueFamily::IGNORED`] when no transfer).
    pub src_queue_family: QueueFamily,
    /// Queue family acquiring ownership ([`QueueFamily::IGNORED`] when no transfer).
    pub dst_queue_family: QueueFamily,
}

/// An image barrier (`VkImageMemoryBarrier2`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ImageBarrier {
    /// The tracked image.
    pub resource: ResourceId,
    /// The aspects covered (the image's aspects).
    pub aspects: ImageAspects,
    /// Mip levels and array layers covered.
    pub range: SubresourceRange,
    /// Layout before (`UNDEFINED` when the contents are discarded).
    pub old_layout: ImageLayout,
    /// Layout after.
    pub new_layout: ImageLayout,
    /// First scope.
    pub src: Scope,
    /// Second scope.
    pub dst: Scope,
    /// Queue family releasing ownership ([`QueueFamily::IGNORED`] when no transfer).
    pub src_queue_family: QueueFamily,
    /// Queue family acquiring ownership ([`QueueFamily::IGNORED`] when no transfer).
    pub dst_queue_family: QueueFamily,
}

/// The barriers of one `vkCmdPipelineBarrier2` (one `VkDependencyInfo`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BarrierBatch {
    /// Global memory barriers.
    pub memory: Vec<MemoryBarrier>,
    /// Buffer barriers.
    pub buffers: Vec<BufferBarrier>,
    /// Image barriers.
    pub images: Vec<ImageBarrier>,
}

impl BarrierBatch {
    /// Whether there is nothing to record (skip the `vkCmdPipelineBarrier2`).
    pub fn is_empty(&self) -> bool {
        self.memory.is_empty() && self.buffers.is_empty() && self.images.is_empty()
    }

    /// The number of barrier structures.
    pub fn len(&self) -> usize {
        self.memory.len() + self.buffers.len() + self.images.len()
    }
}

/// The barriers a queue must record to release ownership of resources that the flushed batch
/// acquires on another queue. Record them on that queue, then signal a semaphore that the
/// acquiring submission waits on.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct QueueRelease {
    /// The queue family that releases (records these barriers).
    pub queue_family: QueueFamily,
    /// The release barriers (second scope empty).
    pub barriers: BarrierBatch,
}

/// What [`Batch::flush`](super::Batch::flush) returns.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Flush {
    /// The device the batch records on.
    pub device: crate::device_mask::DeviceIndex,
    /// The queue family the batch records on.
    pub queue_family: QueueFamily,
    /// The barriers to record before the batch's commands (acquire barriers included).
    pub barriers: BarrierBatch,
    /// Release barriers for other queues, one entry per releasing queue family.
    pub releases: Vec<QueueRelease>,
}

impl Flush {
    /// The number of barrier structures, releases included.
    pub fn barrier_count(&self) -> usize {
        self.barriers.len() + self.releases.iter().map(|r| r.barriers.len()).sum::<usize>()
    }
}

/// When the batcher replaces buffer barriers by global memory barriers.
///
/// Only buffer barriers that transfer no queue ownership are ever replaced (a transfer needs the
/// buffer); image barriers never are (they carry layouts). A memory barrier with the same scopes
/// orders the same work; it also covers memory the buffer barriers did not name, which costs
/// nothing on drivers that implement buffer barriers as global cache operations (all desktop
/// drivers we know of) and saves the per-barrier CPU and driver work.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GlobalBarrierRule {
    /// Never: every buffer barrier names its buffer and range (the most precise output; what
    /// tools show per resource).
    Never,
    /// Two or more buffer barriers with the same first and second scopes become one memory
    /// barrier of those scopes: equivalent on the GPU timeline, fewer structures.
    #[default]
    SameScope,
    /// When at least this many buffer barriers remain, all of them become one memory barrier with
    /// the union of their scopes (cheaper to record, may wait for more work).
    AtLeast(usize),
}
