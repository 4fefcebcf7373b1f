//! Partially resident images on Vulkan sparse residency.
//!
//! A [`SparseTilePool`] owns the physical tiles: 64 KiB tiles carved out of large `VkDeviceMemory`
//! heaps (the core's [`TilePool`] does the accounting; never one allocation per tile), shared by
//! many [`SparseImage`]s. An image's commits and releases change its page table at once and queue
//! the tile changes; [`SparseTilePool::flush_binds`] turns every queued change of every image into
//! coalesced bind regions (rows, rectangles, whole mips: the driver charges per bind entry) and
//! issues them in one `vkQueueBindSparse` on the sparse queue: unbinds in a first batch, binds in a
//! second that waits on it, so memory released by one image can be bound to another in the same
//! flush. The flush waits for the binds to complete before it returns.
//!
//! Images stay in `GENERAL` layout for their whole life (one transition at creation): a layout
//! transition applies to whole subresources and would discard the contents of resident tiles.
//! Releasing tiles requires that GPU work reading them has completed (the streaming manager tracks
//! that per frame; tests wait for idle). A [`SparseTilePool::flush_binds`] that unbinds also
//! waits on the GPU for every submission residency made so far, so work rendering into released
//! tiles (storage writes, colour attachments) cannot write memory bound elsewhere by then.
//!
//! Ownership follows the crate's rules: pools, heaps, images and min-LOD maps are released on drop,
//! deferred until the GPU work that may use them has completed. An image keeps its pool's state and
//! heaps alive, and a heap's memory is freed only once no image has tiles of it bound on the GPU
//! ([`TileHeaps`] counts, per heap, the tiles its completed binds left bound), through the device's
//! retire queue. A dropped image's tiles go back to its pool when its garbage is destroyed.

pub(crate) mod backend;
mod bind;
mod compact;
mod compact_compute;
mod distance_field;
mod heaps;
mod image;
mod min_lod;
mod owners;
mod pool;
pub mod ptex;
mod render_target;
pub mod software;

use crate::device::blocks::{MemoryBlock, MemoryError, RawMemoryDesc};
use crate::device::ledger::{FaultSite, ObjectId};
use crate::device::life::{ForeignUse, Garbage, GpuUse, Life, Parent, PendingUses, TileOwner, TileReturn};
use crate::device::Device;
use crate::error::{VkResultExt, VulkanError};
use crate::format_map::{aspect, vk_format};
use crate::sparse::backend::Checked;
pub use crate::sparse::backend::ResidencyBackend;
use ash::vk;
use residency_core::memory::{memory_type_candidates, MemoryIntent};
use residency_core::sync::LastUses;
use residency_core::tiles::{
    plan_binds, DeviceMipTail, LayoutLimits, PendingChanges, PoolError, SparseFormatInfo,
};
// The core's tile types this layer's signatures take, re-exported here once (crate docs: "The
// core's types"); the software path's indirection types are in `software`.
pub use residency_core::tiles::{
    BindPlanError, BindPlanOptions, BrickGrid, CommitError, DistanceField, DistanceFieldError, HeapIndex,
    ImageId, LayoutError, MarchParams, MarchResult, MinLodUpdate, PageTable, PhysicalTile, PoolId,
    PoolInvariantError, PoolStats, Ray, ResidencyChanges, ResidencyPath, ShapeError, SparseDimension,
    SparseImageDesc, SparseImageLayout, SparseResidency, TexelRegion, TileCoord, TileIndex, TilePool,
    TilePoolDesc, MAX_MARCH_STEPS,
};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Instant;

/// A sparse operation failed; nothing changed.
#[derive(Debug, thiserror::Error)]
pub enum SparseError {
    /// The tile pool description has a field the pool cannot be made with
    /// ([`TilePoolDesc::validate`](residency_core::tiles::TilePoolDesc::validate)), or a pool's
    /// tiles are not the size of the images' tiles; nothing changed.
    #[error(transparent)]
    Desc(#[from] residency_core::desc::DescError),
    /// The device cannot do sparse residency for this image; use the software residency path.
    #[error("{0}")]
    Unsupported(#[from] ShapeError),
    /// The image description is invalid or beyond the device's limits (e.g. `sparseAddressSpaceSize`).
    #[error(transparent)]
    Layout(#[from] LayoutError),
    /// A commit or release was refused (the tile pool is exhausted, a region is wrong, …).
    #[error(transparent)]
    Commit(#[from] CommitError),
    /// Planning binds failed (a bug if it happens: the page table produced the changes).
    #[error(transparent)]
    Plan(#[from] BindPlanError),
    /// The image does not fit the pool (memory types or tile size differ).
    #[error("`{name}`: {reason}")]
    Incompatible {
        /// The image.
        name: String,
        /// Why.
        reason: String,
    },
    /// The device cannot give a sparse image of this format the usage (a sparse colour attachment
    /// where the driver reports no sparse residency for it); nothing was created.
    #[error("{device}: a sparse {format:?} image cannot have {usage} usage: {reason}")]
    UsageUnsupported {
        /// The device.
        device: String,
        /// The image's format.
        format: residency_core::format::Format,
        /// The usage refused.
        usage: &'static str,
        /// Why.
        reason: String,
    },
    /// The image lacks the usage the call needs (an attachment of an image without
    /// colour-attachment usage); nothing was created.
    #[error("sparse image `{name}` was not created with {usage} usage")]
    MissingUsage {
        /// The image.
        name: String,
        /// The usage it lacks.
        usage: &'static str,
    },
    /// The image has commits or releases queued that are not bound yet; flush them first.
    #[error("`{name}` has binds queued; flush them before compacting its pool")]
    PendingBinds {
        /// The image.
        name: String,
    },
    /// A change given to [`TileHeaps::bind`] leaves an image bound to a tile its pool did not
    /// allocate to that image's owner (another image's, or a free one); nothing was bound.
    #[error("`{name}` (owner {owner:?}) would be bound to tile {tile:?}, which the pool gave {held:?}")]
    NotOwner {
        /// The image.
        name: String,
        /// The tile.
        tile: PhysicalTile,
        /// The image's owner.
        owner: ImageId,
        /// The tile's owner in the pool (`None`: free).
        held: Option<ImageId>,
    },
    /// Another live image made for these tile heaps has this owner id
    /// ([`SparseImage::new_external`]); nothing was created.
    #[error("`{name}`: owner {owner:?} already has a live image in tile heaps `{heaps}`")]
    DuplicateOwner {
        /// The image asked for.
        name: String,
        /// The owner id.
        owner: ImageId,
        /// The heaps.
        heaps: String,
    },
    /// The tile pool has as many live images as its owner ids can name (`limit`: each image
    /// takes an id no other live image of the pool has; an id comes back once the image's tiles
    /// went back to the pool); nothing was created. Drop images, or make another pool.
    #[error("`{name}`: tile pool `{pool}` has {limit} live images, as many as its owner ids name")]
    TooManyImages {
        /// The image asked for.
        name: String,
        /// The pool.
        pool: String,
        /// The most live images a pool has.
        limit: u32,
    },
    /// The device has no sparse-binding queue.
    #[error("the device has no sparse-binding queue; use the software residency path")]
    NoSparseQueue,
    /// A readback larger than the caller's limit.
    #[error("reading back {bytes} B exceeds the limit of {limit} B; read a smaller region")]
    ReadbackTooLarge {
        /// Bytes the readback would read.
        bytes: u64,
        /// The limit.
        limit: u64,
    },
    /// A readback of a region that holds no texel (an extent of zero).
    #[error("reading back `{name}`: the region {extent:?} holds no texel")]
    EmptyRegion {
        /// The image.
        name: String,
        /// The region's extent.
        extent: [u32; 3],
    },
    /// Memory for a heap could not be allocated.
    #[error(transparent)]
    Memory(#[from] MemoryError),
    /// Reading texels back failed.
    #[error(transparent)]
    ReadBack(#[from] crate::sync::commands::ReadBackError),
    /// Queueing an upload failed.
    #[error(transparent)]
    Upload(#[from] crate::sync::upload::UploadError),
    /// A Vulkan call failed.
    #[error(transparent)]
    Vulkan(#[from] VulkanError),
}

impl ResidencyError for SparseError {
    fn class(&self) -> ErrorClass {
        match self {
            SparseError::Desc(e) => e.class(),
            SparseError::Unsupported(e) => e.class(),
            SparseError::Layout(e) => e.class(),
            SparseError::Commit(e) => e.class(),
            SparseError::Plan(e) => e.class(),
            SparseError::Memory(e) => e.class(),
            SparseError::ReadBack(e) => e.class(),
            SparseError::Upload(e) => e.class(),
            SparseError::Vulkan(e) => e.class(),
            SparseError::UsageUnsupported { .. } | SparseError::NoSparseQueue => ErrorClass::Unsupported,
            SparseError::TooManyImages { .. } => ErrorClass::OutOfMemory(crate::error::Exhausted::Capacity),
            SparseError::Incompatible { .. }
            | SparseError::MissingUsage { .. }
            | SparseError::PendingBinds { .. }
            | SparseError::NotOwner { .. }
            | SparseError::DuplicateOwner { .. }
            | SparseError::ReadbackTooLarge { .. }
            | SparseError::EmptyRegion { .. } => ErrorClass::Refused,
        }
    }
}

use crate::error::{ErrorClass, ResidencyError};
use bind::*;
use heaps::*;

pub use compact::{CompactCopy, CompactPath, CompactStats};
pub(crate) use compact::{CompactionOwner, ImageMoves};
pub use distance_field::{BrickResidency, DistanceFieldDesc, DistanceFieldVolume, VolumeError};
pub(crate) use heaps::PreparedBind;
pub use heaps::TileHeaps;
pub use image::{SparseImage, SparseUsage};
pub use min_lod::MinLodMap;
pub use pool::{BindStats, SparseTilePool};
pub use render_target::SparseAttachment;
