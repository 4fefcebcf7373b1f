//! Sparse tile math, page tables, residency bitmaps, the physical tile pool and the bind planner.
//!
//! The pieces, in the order a partially resident image uses them:
//! - [`shape`]: the sparse block (tile) shape of a format — the Vulkan standard block shapes, or the
//!   device's own answer from a [`DeviceProfile`](crate::profile::DeviceProfile) — and the seed's
//!   `GL_VIRTUAL_PAGE_SIZE_{X,Y,Z}_AMD` question as a function.
//! - [`layout`]: a [`SparseImageLayout`] for a virtual 2D image, 2D array or 3D volume: the tile grid
//!   of every mip, the mip tail (the seed's `GL_MIN_SPARSE_LEVEL_AMD`), tile index ↔ coordinates and
//!   the virtual size, all without creating an image.
//! - [`page_table`]: virtual tile → physical tile, a residency bitmap per mip and the per-region
//!   min-LOD map that shaders clamp to.
//! - [`pool`]: the physical tile pool — 64 KiB tiles carved out of large heaps under a budget, handing
//!   out physically contiguous runs, shared by many images.
//! - [`bind_plan`]: turns a frame's tile changes into few bind regions (rows, rectangles, boxes over
//!   contiguous memory) and opaque mip-tail binds.
//! - [`residency`]: commit and release of tiles for one image, tying the three together.
//! - [`changes`]: an image's changes queued until the next flush, folded (a commit and a release
//!   of the same tile before a flush cancel out).
//! - [`indirection`]: the software residency path — a page table as an indirection texture into a
//!   tile-cache atlas with bordered slots, for devices without sparse residency.
//! - [`ptex`]: PRT-Ptex packing — per-face textures with borders in a sparse array of one slice
//!   per resolution, the face table shaders read, and which tiles each face's levels hold.
//! - [`distance_field`]: distance-field volumes: which bricks a ray march needs resident (the
//!   seed's "default value is maximum step distance") and the reference march.
//!
//! Nothing here touches a GPU; the Vulkan backend turns the results into `vkQueueBindSparse` calls.
//! See `docs/tiles.md` for the model and the decisions behind it.
#![deny(missing_docs)]

pub mod bind_plan;
pub mod changes;
pub mod distance_field;
pub mod indirection;
pub mod layout;
pub mod page_table;
pub mod pool;
pub mod ptex;
pub mod residency;
pub mod shape;

pub use bind_plan::{
    plan_binds, BindMemory, BindPlan, BindPlanError, BindPlanOptions, Coalesce, ImageBind, OpaqueBind,
    TailChange, TileChange,
};
pub use changes::PendingChanges;
pub use distance_field::{
    march, BrickGrid, DistanceField, DistanceFieldError, MarchParams, MarchResult, Ray, MAX_MARCH_STEPS,
};
pub use indirection::{
    border_copies, bordered_block_tile, bordered_tile, software_layout, software_slot_bytes, AtlasLayout,
    BorderCopy, HardwarePathUnsupported, Indirection, IndirectionError, ResidencyPath, INDIRECTION_NONE,
    INDIRECTION_SOURCE_BORDERS, SOFTWARE_TILE_SIDE,
};
pub use layout::{
    full_mip_chain, DeviceMipTail, LayoutError, LayoutLimits, MipInfo, MipTail, MipTailSource,
    SparseImageDesc, SparseImageLayout, TexelRegion, TileCoord, TileIndex, TileRange,
};
pub use page_table::{MinLodUpdate, PageTable, PageTableError, PhysicalTile, MIN_LOD_NONE};
pub use pool::{
    CompactionPlan, HeapIndex, HeapStats, ImageId, MoveRun, PoolError, PoolId, PoolInvariantError, PoolStats,
    TileAllocation, TileMove, TilePool, TilePoolDesc, TileRun,
};
pub use residency::{CommitError, ResidencyChanges, SparseResidency};
pub use shape::{
    standard_block_shape, standard_block_shape_msaa, standard_tile_shape, virtual_page_size, MipTailModel,
    ShapeError, ShapeSource, SparseDimension, SparseFormatInfo, TileShape, STANDARD_TILE_BYTES,
};
