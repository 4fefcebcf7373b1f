//! The software residency path: a partially resident texture as a tile-cache atlas (a normal
//! image of bordered tile slots) and an indirection texture, for devices without sparse residency
//! for a format, or when a caller forces it ([`ResidencyPath::Software`]).
//!
//! It takes the same inputs as the hardware path: a page table and tile pool owned by the core
//! (a [`StreamingManager`](residency_core::streaming::StreamingManager) or a
//! [`SparseResidency`](residency_core::tiles::SparseResidency)), whose [`PhysicalTile`]s are the
//! atlas slots. Binding a tile is writing its bordered texels into its slot; unbinding is nothing
//! but the indirection no longer pointing there. Shaders sample through
//! `shaders/include/residency_software.glsl`, whose `residencySampleFallback` has the signature of
//! the hardware helper's.
//!
//! The atlas is allocated at its full capacity up front (an image cannot grow in place): size it
//! for the tile budget ([`SoftwareTexture::capacity_for_budget`]). The textures of one tile pool
//! share one atlas ([`SoftwareAtlas`], [`SoftwareTexture::new_in`]; the pool never gives one slot
//! to two of them at a time), each with an indirection texture of its own.

use crate::device::blocks::MemoryError;
use crate::device::life::{ForeignUse, Garbage, GpuUse, Life, Parent, TileOwner, TileReturn};
use crate::device::Device;
use crate::error::VulkanError;
use crate::error::{ErrorClass, Exhausted, ResidencyError};
use crate::poison::PoisonFree;
use crate::resources::image::{Image, ImageDesc};
use crate::sparse::backend::{Checked, ResidencyBackend};
use crate::sync::upload::{ImageRegion, UploadError, Uploader};
use ash::vk;
use residency_core::format::{Format, FormatKind};
use residency_core::tiles::{
    border_copies, CommitError, PageTable, PhysicalTile, ResidencyPath, SparseDimension, SparseImageLayout,
    TexelRegion, TileCoord,
};
// The software path's indirection types from the core (crate docs: "The core's types").
pub use residency_core::tiles::{AtlasLayout, HardwarePathUnsupported, Indirection, IndirectionError};
use residency_core::usage::ImageUsage;

/// Border texels on each side of an atlas slot: enough for bilinear and trilinear footprints and
/// anisotropic ones up to 8×.
pub const DEFAULT_BORDER: u32 = 4;

/// What went wrong on the software path.
#[derive(Debug, thiserror::Error)]
pub enum SoftwareError {
    /// The layout cannot be held (3D, layers, a mip tail) or a slot is out of range.
    #[error(transparent)]
    Indirection(#[from] IndirectionError),
    /// Creating the atlas or the indirection texture failed (out of memory is a value here).
    #[error(transparent)]
    Memory(#[from] MemoryError),
    /// A Vulkan call failed.
    #[error(transparent)]
    Vulkan(#[from] VulkanError),
    /// Staging a tile or the indirection failed.
    #[error(transparent)]
    Upload(#[from] UploadError),
    /// The software path holds colour formats: uncompressed ones, and block-compressed ones in
    /// a [`SoftwareAtlas`] (a streamer's), not in a [`SoftwareTilePool`].
    #[error("the software residency path holds colour formats (block-compressed ones only in a software atlas), not {format:?}")]
    UnsupportedFormat {
        /// The format asked for.
        format: Format,
    },
    /// A block-compressed atlas whose format the device cannot sample with linear filtering from
    /// an optimally tiled image written by copies.
    #[error("{device} cannot sample {format:?} images with linear filtering (SAMPLED_IMAGE, SAMPLED_IMAGE_FILTER_LINEAR and TRANSFER_DST with optimal tiling): no software atlas of it")]
    FormatNotSampleable {
        /// The device.
        device: String,
        /// The format.
        format: Format,
    },
    /// A block-compressed atlas whose tile side or border is not whole blocks.
    #[error("a {format:?} atlas needs a tile side and border of whole {}-texel blocks, not {tile_side} and {border}", .block[0])]
    NotWholeBlocks {
        /// The format.
        format: Format,
        /// Its block extent.
        block: [u32; 2],
        /// The tile side asked for.
        tile_side: u32,
        /// The border asked for.
        border: u32,
    },
    /// A tile's data is not one bordered slot of texels.
    #[error("a bordered tile of {side} × {side} texels is {expected} bytes, got {got}")]
    WrongTileSize {
        /// Texels per slot side.
        side: u32,
        /// Bytes expected.
        expected: usize,
        /// Bytes given.
        got: usize,
    },
    /// The hardware path was forced where there is none.
    #[error(transparent)]
    HardwareUnsupported(#[from] HardwarePathUnsupported),
    /// The layout is invalid (zero extent, too many tiles, …).
    #[error(transparent)]
    Layout(#[from] residency_core::tiles::LayoutError),
    /// A commit, release, write or flush was refused (the pool is exhausted, a region is wrong,
    /// the pool does not hold the image's tiles: [`CommitError::WrongPool`], …).
    #[error(transparent)]
    Commit(#[from] residency_core::tiles::CommitError),
    /// An image (or texture) of another format than its pool's (or its shared) atlas.
    #[error("`{name}` is {image:?}; its pool's atlas is {pool:?}")]
    FormatMismatch {
        /// The image.
        name: String,
        /// Its format.
        image: Format,
        /// The pool's.
        pool: Format,
    },
    /// A texture whose tiles are not its atlas's tile side.
    #[error("`{name}` has tiles of {} × {}; its atlas holds tiles of {atlas} texels", .tile[0], .tile[1])]
    TileMismatch {
        /// The texture.
        name: String,
        /// Its tile shape.
        tile: [u32; 2],
        /// The atlas's tile side.
        atlas: u32,
    },
    /// A pool names its live images with ids of 20 bits (an id comes back once its image's tiles
    /// went back to the pool).
    #[error("a software tile pool has at most {limit} live images; drop some, or create another pool")]
    TooManyImages {
        /// Images one pool can make.
        limit: u32,
    },
    /// Texel data that is not the region's size.
    #[error("a region of {expected} bytes was given {got}")]
    WrongRegionSize {
        /// Bytes the region holds.
        expected: u64,
        /// Bytes given.
        got: u64,
    },
}

impl ResidencyError for SoftwareError {
    fn class(&self) -> ErrorClass {
        match self {
            SoftwareError::Indirection(e) => e.class(),
            SoftwareError::Memory(e) => e.class(),
            SoftwareError::Vulkan(e) => e.class(),
            SoftwareError::Upload(e) => e.class(),
            SoftwareError::HardwareUnsupported(e) => e.class(),
            SoftwareError::Layout(e) => e.class(),
            SoftwareError::Commit(e) => e.class(),
            SoftwareError::TooManyImages { .. } => ErrorClass::OutOfMemory(Exhausted::Capacity),
            SoftwareError::UnsupportedFormat { .. } | SoftwareError::FormatNotSampleable { .. } => {
                ErrorClass::Unsupported
            }
            SoftwareError::NotWholeBlocks { .. }
            | SoftwareError::WrongTileSize { .. }
            | SoftwareError::FormatMismatch { .. }
            | SoftwareError::TileMismatch { .. }
            | SoftwareError::WrongRegionSize { .. } => ErrorClass::Refused,
        }
    }
}

impl Device {
    /// Whether the device can keep a 2D image of `format` partially resident in hardware: sparse
    /// residency for 2D images, shader residency codes, a sparse queue and a sparse tile shape for
    /// the format.
    pub fn supports_hardware_residency(&self, format: Format) -> bool {
        let f = self.features();
        f.sparse_residency_image_2d
            && f.shader_resource_residency
            && self.sparse_queue().is_some()
            && self.profile().formats.iter().any(|p| p.format == format && p.sparse_2d.is_some())
    }

    /// The residency path an image of `format` takes here: `requested` resolved against
    /// [`supports_hardware_residency`](Self::supports_hardware_residency) (`Auto` → hardware when
    /// supported, else software; `Hardware` on a device without it → a typed error).
    pub fn residency_path(
        &self,
        format: Format,
        requested: ResidencyPath,
    ) -> Result<ResidencyPath, SoftwareError> {
        Ok(requested.resolve(self.supports_hardware_residency(format))?)
    }
}

/// What a [`SoftwareAtlas`] holds. Defaults: RGBA8, 128-texel tiles
/// ([`SOFTWARE_TILE_SIDE`](residency_core::tiles::SOFTWARE_TILE_SIDE)), [`DEFAULT_BORDER`], 64
/// slots in heaps of 16.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SoftwareAtlasDesc {
    /// The atlas image's name (its view is "`name` view").
    pub name: String,
    /// The texel format of every texture that shares it.
    pub format: Format,
    /// Tile side in texels (the payload of a slot).
    pub tile_side: u32,
    /// Border texels on each side of a slot.
    pub border: u32,
    /// Slots at least (the atlas is allocated whole: it cannot grow).
    pub capacity: u32,
    /// Tiles per pool heap: slot `i` holds the pool's heap `i / tiles_per_heap`, tile
    /// `i % tiles_per_heap`.
    pub tiles_per_heap: u32,
}

impl Default for SoftwareAtlasDesc {
    fn default() -> Self {
        Self {
            name: "software atlas".to_owned(),
            format: Format::R8G8B8A8Unorm,
            tile_side: residency_core::tiles::SOFTWARE_TILE_SIDE,
            border: DEFAULT_BORDER,
            capacity: 64,
            tiles_per_heap: 16,
        }
    }
}

impl SoftwareAtlasDesc {
    /// An atlas named `name` of `format` with the default tiles, border and heaps, and room for
    /// `capacity` slots (at least 1; raised and logged).
    pub fn new(name: impl Into<String>, format: Format, capacity: u32) -> Self {
        Self { name: name.into(), format, ..Self::default() }.with_capacity(capacity)
    }

    /// Sets the slots (at least 1; raised and logged).
    pub fn with_capacity(mut self, slots: u32) -> Self {
        if slots == 0 {
            tracing::debug!(name = %self.name, "SoftwareAtlasDesc: capacity 0 raised to 1");
        }
        self.capacity = slots.max(1);
        self
    }

    /// Sets the slots to [`SoftwareTexture::capacity_for_budget`] of `budget_tiles` in the
    /// current heaps.
    pub fn with_capacity_for_budget(self, budget_tiles: u32) -> Self {
        let slots = SoftwareTexture::capacity_for_budget(budget_tiles, self.tiles_per_heap);
        self.with_capacity(slots)
    }

    /// Sets the tiles per heap (at least 1; raised and logged).
    pub fn with_tiles_per_heap(mut self, tiles: u32) -> Self {
        if tiles == 0 {
            tracing::debug!(name = %self.name, "SoftwareAtlasDesc: tiles per heap 0 raised to 1");
        }
        self.tiles_per_heap = tiles.max(1);
        self
    }

    /// Sets the border texels per side.
    pub fn with_border(mut self, border: u32) -> Self {
        self.border = border;
        self
    }

    /// Sets the tile side in texels (at least 1; raised and logged).
    pub fn with_tile_side(mut self, side: u32) -> Self {
        if side == 0 {
            tracing::debug!(name = %self.name, "SoftwareAtlasDesc: tile side 0 raised to 1");
        }
        self.tile_side = side.max(1);
        self
    }
}

/// A tile-cache atlas (one image of bordered slots and its view) that several
/// [`SoftwareTexture`]s share: textures whose residency one tile pool keeps (a streaming manager
/// for all its textures under one budget) sample one atlas, each through its own indirection
/// texture, since the pool never hands one physical tile — one slot — to two textures at a time.
/// Clones are handles of the same atlas.
///
/// **Lifetimes.** Every texture made in it ([`SoftwareTexture::new_in`]) holds it, as a view holds
/// its image, and declares each of its uses on it too ([`SoftwareTexture::used_until`]): the
/// atlas image and view are released only after the last handle and the last texture are
/// dropped, and then retire after every use declared through any of them, so the GPU never
/// samples a destroyed atlas. A slot a texture released may be written for another texture at
/// once; the writes ([`SoftwareTexture::write_tile`]) go through the [`Uploader`], whose copies
/// run after the earlier work on the universal queue (a barrier from all earlier commands, or
/// from the shader readers when recorded into a frame), so frames in flight that still sample
/// the slot through the old texture's indirection finish reading before it is overwritten.
#[derive(Clone)]
pub struct SoftwareAtlas {
    shared: std::sync::Arc<AtlasShared>,
}

/// The atlas image and view; dropped (and retired) with the last texture or handle.
struct AtlasShared {
    name: String,
    format: Format,
    layout: AtlasLayout,
    image: Image,
    view: crate::resources::image::ImageView,
}

impl std::fmt::Debug for SoftwareAtlas {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SoftwareAtlas")
            .field("name", &self.shared.name)
            .field("format", &self.shared.format)
            .field("layout", &self.shared.layout)
            .finish_non_exhaustive()
    }
}

impl SoftwareAtlas {
    /// Creates the atlas: room for at least `desc.capacity` slots of `desc.tile_side` plus
    /// `desc.border` texels per side, in `GENERAL` layout, its memory undefined until tiles are
    /// written. Colour formats, uncompressed or block-compressed (else
    /// [`SoftwareError::UnsupportedFormat`]); a block-compressed atlas is in its format, slots and
    /// borders whole blocks ([`SoftwareError::NotWholeBlocks`]), and needs a device that samples
    /// the format with linear filtering ([`SoftwareError::FormatNotSampleable`]).
    pub fn new(device: &Device, desc: &SoftwareAtlasDesc) -> Result<SoftwareAtlas, SoftwareError> {
        check_atlas_format(device, desc.format, desc.tile_side.max(1), desc.border)?;
        let layout =
            AtlasLayout::new(desc.tile_side.max(1), desc.border, desc.capacity, desc.tiles_per_heap)?;
        let [aw, ah] = layout.extent();
        let (image, view) = sampled_image(
            device,
            &ImageDesc::new_2d(
                desc.name.clone(),
                desc.format,
                aw,
                ah,
                ImageUsage::SAMPLED | ImageUsage::COPY_DST,
            ),
        )?;
        Ok(SoftwareAtlas {
            shared: std::sync::Arc::new(AtlasShared {
                name: desc.name.clone(),
                format: desc.format,
                layout,
                image,
                view,
            }),
        })
    }

    /// Its name.
    pub fn name(&self) -> &str {
        &self.shared.name
    }

    /// The device it lives on (kept alive by the atlas).
    pub fn device(&self) -> &std::sync::Arc<Device> {
        self.shared.image.device()
    }

    /// The texel format.
    pub fn format(&self) -> Format {
        self.shared.format
    }

    /// Where the slots are.
    pub fn layout(&self) -> &AtlasLayout {
        &self.shared.layout
    }

    /// The atlas view (binding `tex` of `residency_software.glsl`; a bilinear sampler).
    pub fn view(&self) -> &crate::resources::image::ImageView {
        &self.shared.view
    }

    /// Bytes of device memory the atlas holds (whole blocks of its format: every slot is
    /// [`software_slot_bytes`](residency_core::tiles::software_slot_bytes) with the default tile).
    pub fn memory_bytes(&self) -> u64 {
        let [w, h] = self.shared.layout.extent();
        self.shared.format.region_bytes(w, h, 1)
    }

    /// Declares that GPU work the renderer submitted itself samples the atlas until `until` (see
    /// [`Buffer::used_until`](crate::Buffer::used_until)); a texture's
    /// [`used_until`](SoftwareTexture::used_until) declares it here as well.
    pub fn used_until(&self, until: GpuUse) -> Result<(), ForeignUse> {
        self.shared.view.used_until(until)?;
        self.shared.image.used_until(until)
    }
}

/// A partially resident 2D texture on the software path whose residency someone else keeps (a
/// streaming manager): an indirection texture of its own over an atlas, its own
/// ([`new`](Self::new)) or one shared with the other textures of the same tile pool
/// ([`new_in`](Self::new_in)); see the module docs. Images that keep their own residency share a
/// [`SoftwareTilePool`] instead ([`SoftwareImage`]).
///
/// It holds its atlas (which lives as long as its last texture); dropping it releases its
/// indirection texture once the GPU work declared on it has completed.
#[derive(Debug)]
pub struct SoftwareTexture {
    name: String,
    atlas: SoftwareAtlas,
    indirection: IndirectionTexture,
}

impl SoftwareTexture {
    /// Atlas slots for a pool of `budget_tiles` tiles in heaps of `tiles_per_heap`: whole heaps,
    /// plus one for the fragmentation the pool may need (saturating at `u32::MAX`).
    pub fn capacity_for_budget(budget_tiles: u32, tiles_per_heap: u32) -> u32 {
        let per_heap = tiles_per_heap.max(1);
        // Saturating: a budget near `u32::MAX` asks for more slots than any atlas holds, which
        // `AtlasLayout::new` refuses with a typed error.
        budget_tiles.div_ceil(per_heap).saturating_add(1).saturating_mul(per_heap)
    }

    /// Creates an atlas of its own ("`name` atlas": `capacity` slots of `layout`'s tile plus
    /// `border` texels per side) and the indirection texture, nothing resident. `layout` is a
    /// software layout ([`software_layout`](residency_core::tiles::software_layout)); slot `i`
    /// is the pool's heap `i / tiles_per_heap`, tile `i % tiles_per_heap`. Textures of one tile
    /// pool should share one atlas instead: [`new_in`](Self::new_in).
    pub fn new(
        device: &Device,
        name: &str,
        layout: &SparseImageLayout,
        border: u32,
        capacity: u32,
        tiles_per_heap: u32,
    ) -> Result<SoftwareTexture, SoftwareError> {
        check_plain_2d(layout)?;
        let tile = layout.tile_shape();
        // The atlas checks the format (block-compressed ones included).
        let atlas = SoftwareAtlas::new(
            device,
            &SoftwareAtlasDesc {
                name: format!("{name} atlas"),
                format: layout.desc().format,
                tile_side: tile.width.max(tile.height),
                border,
                capacity,
                tiles_per_heap,
            },
        )?;
        // On error the atlas is dropped: nothing is left behind.
        SoftwareTexture::new_in(&atlas, name, layout)
    }

    /// Creates the indirection texture of a texture that samples `atlas` (shared with the other
    /// textures of its tile pool), nothing resident. `layout` is a software layout of the atlas's
    /// format and tile side ([`SoftwareError::FormatMismatch`], [`SoftwareError::TileMismatch`]
    /// otherwise); its page table's physical tiles must come from the pool whose heaps the atlas's
    /// slots number. The texture holds the atlas.
    pub fn new_in(
        atlas: &SoftwareAtlas,
        name: &str,
        layout: &SparseImageLayout,
    ) -> Result<SoftwareTexture, SoftwareError> {
        let format = layout.desc().format;
        if format != atlas.format() {
            return Err(SoftwareError::FormatMismatch {
                name: name.to_owned(),
                image: format,
                pool: atlas.format(),
            });
        }
        check_plain_2d(layout)?;
        let tile = layout.tile_shape();
        let side = atlas.layout().tile_side;
        if tile.width != side || tile.height != side {
            return Err(SoftwareError::TileMismatch {
                name: name.to_owned(),
                tile: [tile.width, tile.height],
                atlas: side,
            });
        }
        let mut table = Indirection::new(layout, *atlas.layout())?;
        // The streamer assembles each slot's border from the source at load time.
        table.set_source_borders();
        let indirection = IndirectionTexture::new(atlas.device(), name, table)?;
        Ok(SoftwareTexture { name: name.to_owned(), atlas: atlas.clone(), indirection })
    }

    /// Its name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The device it lives on (kept alive by the texture).
    pub fn device(&self) -> &std::sync::Arc<Device> {
        self.atlas.device()
    }

    /// Declares that GPU work the renderer submitted itself samples the texture (its atlas and
    /// its indirection) until `until` (see [`Buffer::used_until`](crate::Buffer::used_until)).
    pub fn used_until(&self, until: GpuUse) -> Result<(), ForeignUse> {
        self.atlas.used_until(until)?;
        self.indirection.used_until(until)
    }

    /// The atlas it samples.
    pub fn atlas(&self) -> &SoftwareAtlas {
        &self.atlas
    }

    /// Where the slots are.
    pub fn atlas_layout(&self) -> &AtlasLayout {
        self.indirection.table.atlas()
    }

    /// The CPU copy of the indirection texture.
    pub fn indirection(&self) -> &Indirection {
        &self.indirection.table
    }

    /// The atlas view (binding `tex` of the GLSL helper; sample it with a bilinear sampler).
    pub fn atlas_view(&self) -> &crate::resources::image::ImageView {
        self.atlas.view()
    }

    /// The indirection view (binding `minLodMap` of the GLSL helper; a nearest sampler).
    pub fn indirection_view(&self) -> &crate::resources::image::ImageView {
        &self.indirection.view
    }

    /// Bytes of device memory the indirection and the whole atlas hold (a shared atlas counts
    /// in full here: for several textures of one atlas add their
    /// [`indirection_bytes`](Self::indirection_bytes) to one [`SoftwareAtlas::memory_bytes`]).
    pub fn memory_bytes(&self) -> u64 {
        self.atlas.memory_bytes() + self.indirection_bytes()
    }

    /// Bytes of device memory of the indirection texture alone.
    pub fn indirection_bytes(&self) -> u64 {
        let [iw, ih] = self.indirection.table.extent();
        u64::from(iw) * u64::from(ih) * 4 * u64::from(self.indirection.table.layers())
    }

    /// Stages `bordered` (the tile's `(tile + 2·border)²` texels, rows packed; see
    /// [`bordered_tile`](residency_core::tiles::bordered_tile); for a block-compressed atlas its
    /// rows of blocks, [`bordered_block_tile`](residency_core::tiles::bordered_block_tile)) into
    /// `physical`'s slot. It reaches
    /// the atlas at the uploader's next flush or recording; the indirection must point there only
    /// from then on (upload it after the tiles, as [`upload_indirection`](Self::upload_indirection)
    /// does when called after the writes of the same frame).
    ///
    /// In a shared atlas the slot may have belonged to another texture until its pool released it,
    /// and frames in flight may still sample it through that texture's indirection: the
    /// uploader's copy runs after them (it is submitted or recorded later on the universal queue,
    /// behind a barrier from the earlier shader reads), so they read the old texels and every
    /// later frame the new ones. `physical` must be a tile the texture's page table maps (the pool
    /// gives each tile to one texture at a time); a wrong one shows wrong texels, never
    /// out-of-bounds memory (the slot is checked to lie in the atlas).
    pub fn write_tile(
        &self,
        uploader: &Uploader,
        physical: PhysicalTile,
        bordered: &[u8],
    ) -> Result<(), SoftwareError> {
        let atlas = self.atlas_layout();
        let side = atlas.slot_side();
        let expected = self.atlas.format().region_bytes(side, side, 1) as usize;
        if bordered.len() != expected {
            return Err(SoftwareError::WrongTileSize { side, expected, got: bordered.len() });
        }
        let [x, y] = atlas.slot_origin(physical)?;
        let region = ImageRegion::new(&self.atlas.shared.image, 0, [x, y, 0], [side, side, 1]);
        uploader.write_image(&region, bordered)?;
        Ok(())
    }

    /// Recomputes the indirection from `table` and stages the rows that changed (everything the
    /// first time: the texture's memory starts undefined). Returns the rows staged.
    pub fn upload_indirection(
        &mut self,
        uploader: &Uploader,
        table: &PageTable,
    ) -> Result<Option<std::ops::Range<u32>>, SoftwareError> {
        self.indirection.upload(uploader, table)
    }
}

/// What one [`SoftwareTilePool::flush`] did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct SoftwareFlushStats {
    /// Indirection rows uploaded, over all images.
    pub indirection_rows: u64,
    /// Slots whose borders were refilled.
    pub slots_bordered: u64,
    /// Atlas-to-atlas copy regions recorded for the borders.
    pub border_copies: u64,
}

/// The software path's physical tiles: one atlas image of bordered slots and the core tile pool
/// that hands them out, shared by the [`SoftwareImage`]s of one format — the software twin of
/// [`SparseTilePool`](crate::sparse::SparseTilePool). The pool's tiles are slots; its budget is in
/// slots and its capacity (the atlas, allocated whole) is
/// [`SoftwareTexture::capacity_for_budget`] of the budget it was created with.
///
/// **Lifetimes.** Its images keep its state (the atlas, the core pool) alive: dropping the pool
/// while images hold slots is safe, and the atlas goes with the last image. A dropped image's
/// slots come back to the pool once the GPU work that may sample it has completed.
pub struct SoftwareTilePool {
    shared: std::sync::Arc<SoftwarePoolShared>,
}

/// The state of a [`SoftwareTilePool`], shared with its images.
pub(crate) struct SoftwarePoolShared {
    device: std::sync::Arc<Device>,
    name: String,
    format: Format,
    border: u32,
    atlas: Image,
    atlas_view: crate::resources::image::ImageView,
    atlas_layout: AtlasLayout,
    pool: std::sync::Mutex<residency_core::tiles::TilePool>,
    /// Its images' owner ids in the core pool.
    owners: super::owners::OwnerIds,
    /// Live images of the pool.
    images: std::sync::atomic::AtomicU64,
}

impl SoftwarePoolShared {
    fn with_pool<R>(&self, f: impl FnOnce(&mut residency_core::tiles::TilePool) -> R) -> R {
        f(&mut self.pool.locked())
    }
}

impl TileOwner for SoftwarePoolShared {
    fn free_owner(&self, owner: residency_core::tiles::ImageId) {
        self.with_pool(|p| p.free_owner(owner));
        // Nothing holds tiles under `owner` now: a later image may have it.
        self.owners.give_back(owner);
    }
}

impl Parent for SoftwarePoolShared {
    fn note_pending(&self, uses: &residency_core::sync::LastUses) {
        // A deferred image samples the atlas: its view and image wait for the same uses.
        self.atlas_view.life().note_pending(uses);
        self.atlas.life().note_pending(uses);
    }

    fn name(&self) -> String {
        self.name.clone()
    }

    fn child_released(&self) {
        self.images.fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
    }
}

impl Drop for SoftwareTilePool {
    fn drop(&mut self) {
        let live = self.shared.images.load(std::sync::atomic::Ordering::Relaxed);
        if live != 0 {
            tracing::warn!(
                pool = %self.shared.name,
                images = live,
                "software tile pool dropped with live images: its atlas stays until the last of them is released"
            );
        }
    }
}

impl std::fmt::Debug for SoftwareTilePool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SoftwareTilePool")
            .field("format", &self.shared.format)
            .field("atlas", &self.shared.atlas_layout)
            .finish_non_exhaustive()
    }
}

static NEXT_SOFTWARE_POOL: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(1);

/// A budget rounded up to whole heaps and clamped to the atlas: the pool then only ever makes
/// whole heaps, so heap `h`'s slots `h · per_heap ..` stay inside the atlas.
fn whole_heaps(tiles: u32, per_heap: u32, capacity: u32) -> u32 {
    let per_heap = per_heap.max(1);
    tiles.div_ceil(per_heap).saturating_mul(per_heap).min(capacity / per_heap * per_heap)
}

/// An image of `desc` in `GENERAL` layout with a view of its mip 0; nothing is left behind on
/// error.
fn sampled_image(
    device: &Device,
    desc: &ImageDesc,
) -> Result<(Image, crate::resources::image::ImageView), SoftwareError> {
    let image = device.create_image(desc)?;
    let view = device
        .discard_to_general(&[&image])
        .map_err(SoftwareError::from)
        .and_then(|()| image.create_view(0..1).map_err(SoftwareError::from));
    match view {
        Ok(view) => Ok((image, view)),
        Err(e) => {
            drop(image);
            Err(e)
        }
    }
}

fn check_format(format: Format) -> Result<(), SoftwareError> {
    if format.kind() != FormatKind::Color || format.block_extent() != (1, 1) || format == Format::Unknown {
        return Err(SoftwareError::UnsupportedFormat { format });
    }
    Ok(())
}

/// What a [`SoftwareAtlas`] holds: uncompressed colour formats as [`check_format`] (unchanged),
/// and block-compressed ones whose slots and borders are whole blocks on a device that samples
/// them.
fn check_atlas_format(
    device: &Device,
    format: Format,
    tile_side: u32,
    border: u32,
) -> Result<(), SoftwareError> {
    if !format.is_compressed() {
        return check_format(format);
    }
    let (bw, bh) = format.block_extent();
    if tile_side % bw != 0 || tile_side % bh != 0 || border % bw != 0 || border % bh != 0 {
        return Err(SoftwareError::NotWholeBlocks { format, block: [bw, bh], tile_side, border });
    }
    // SAFETY: a pure query of this device's physical device.
    let props = unsafe {
        device
            .instance()
            .get_physical_device_format_properties(device.physical(), crate::format_map::vk_format(format))
    };
    let needs = vk::FormatFeatureFlags::SAMPLED_IMAGE
        | vk::FormatFeatureFlags::SAMPLED_IMAGE_FILTER_LINEAR
        | vk::FormatFeatureFlags::TRANSFER_DST;
    if !props.optimal_tiling_features.contains(needs) {
        return Err(SoftwareError::FormatNotSampleable { device: device.name().to_owned(), format });
    }
    Ok(())
}

fn check_plain_2d(layout: &SparseImageLayout) -> Result<(), SoftwareError> {
    if layout.desc().dimension != SparseDimension::D2 {
        return Err(IndirectionError::NotPlain2d {
            layers: layout.array_layers(),
            depth: layout.desc().depth,
        }
        .into());
    }
    Ok(())
}

impl SoftwareTilePool {
    /// A pool for images of `format` with `border` texels around every tile. `desc.tile_bytes` is
    /// ignored: a tile is one bordered slot. The atlas holds
    /// [`SoftwareTexture::capacity_for_budget`]`(desc.budget_tiles, desc.tiles_per_heap)` slots.
    pub fn new(
        device: std::sync::Arc<Device>,
        format: Format,
        border: u32,
        desc: residency_core::tiles::TilePoolDesc,
    ) -> Result<SoftwareTilePool, SoftwareError> {
        check_format(format)?;
        let side = residency_core::tiles::SOFTWARE_TILE_SIDE;
        let per_heap = desc.tiles_per_heap.max(1);
        let capacity = SoftwareTexture::capacity_for_budget(desc.budget_tiles, per_heap);
        let atlas_layout = AtlasLayout::new(side, border, capacity, per_heap)?;
        let slot_bytes = u64::from(atlas_layout.slot_side()).pow(2) * u64::from(format.block_bytes());
        let [aw, ah] = atlas_layout.extent();
        let (atlas, atlas_view) = sampled_image(
            &device,
            &ImageDesc::new_2d(
                format!("{} atlas", desc.name),
                format,
                aw,
                ah,
                ImageUsage::SAMPLED | ImageUsage::COPY_DST | ImageUsage::COPY_SRC,
            ),
        )?;
        let desc_name = desc.name.clone();
        let pool = residency_core::tiles::TilePool::new(residency_core::tiles::TilePoolDesc {
            tile_bytes: slot_bytes,
            budget_tiles: whole_heaps(desc.budget_tiles, per_heap, capacity),
            tiles_per_heap: per_heap,
            ..desc
        });
        Ok(SoftwareTilePool {
            shared: std::sync::Arc::new(SoftwarePoolShared {
                device,
                name: desc_name,
                format,
                border,
                atlas,
                atlas_view,
                atlas_layout,
                pool: std::sync::Mutex::new(pool),
                owners: super::owners::OwnerIds::new(
                    NEXT_SOFTWARE_POOL.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
                ),
                images: std::sync::atomic::AtomicU64::new(0),
            }),
        })
    }

    /// The device.
    pub fn device(&self) -> &std::sync::Arc<Device> {
        &self.shared.device
    }

    /// The atlas view (binding `tex` of `residency_software.glsl`; a bilinear sampler).
    pub fn atlas_view(&self) -> &crate::resources::image::ImageView {
        &self.shared.atlas_view
    }

    /// Declares that GPU work the renderer submitted itself samples the atlas until `until` (see
    /// [`Buffer::used_until`](crate::Buffer::used_until)); declare per image with
    /// [`SoftwareImage::used_until`].
    pub fn used_until(&self, until: GpuUse) -> Result<(), ForeignUse> {
        self.shared.atlas_view.used_until(until)?;
        self.shared.atlas.used_until(until)
    }

    /// Where the slots are.
    pub fn atlas_layout(&self) -> &AtlasLayout {
        &self.shared.atlas_layout
    }

    /// The tile pool's statistics.
    pub fn stats(&self) -> residency_core::tiles::PoolStats {
        self.with_pool(|p| p.stats())
    }

    /// Tiles (slots) in use.
    pub fn used_tiles(&self) -> u64 {
        self.with_pool(|p| p.used_tiles())
    }

    /// Checks the tile pool's invariants.
    pub fn check_invariants(&self) -> Result<(), residency_core::tiles::PoolInvariantError> {
        self.with_pool(|p| p.check_invariants())
    }

    /// Changes the budget in slots: rounded up to whole heaps, at most the atlas's capacity
    /// (larger values are clamped: the atlas cannot grow).
    pub fn set_budget_tiles(&self, tiles: u32) {
        let layout = &self.shared.atlas_layout;
        let budget = whole_heaps(tiles, layout.tiles_per_heap, layout.capacity());
        self.with_pool(|p| p.set_budget_tiles(budget));
    }

    /// Device memory of the atlas.
    pub fn memory_bytes(&self) -> u64 {
        let [w, h] = self.shared.atlas_layout.extent();
        u64::from(w) * u64::from(h) * u64::from(self.shared.format.block_bytes())
    }

    fn with_pool<R>(&self, f: impl FnOnce(&mut residency_core::tiles::TilePool) -> R) -> R {
        self.shared.with_pool(f)
    }

    /// Makes the images' changes visible: stages the indirection rows that changed, flushes the
    /// uploader (the tiles written since the last flush land), then refills the borders of every
    /// written slot and of its resident neighbours from their payloads (atlas-to-atlas copies),
    /// and waits for them. Work submitted afterwards samples the new state.
    /// [`ResidencyBackend::flush`], callable without the trait in scope.
    pub fn flush(
        &self,
        uploader: &Uploader,
        images: &mut [&mut SoftwareImage],
    ) -> Result<SoftwareFlushStats, SoftwareError> {
        SoftwareImage::flush(self, uploader, images)
    }

    /// The flush after [`ResidencyBackend::flush`] checked that every image is this pool's.
    fn flush_checked(
        &self,
        uploader: &Uploader,
        images: &mut [&mut SoftwareImage],
    ) -> Result<SoftwareFlushStats, SoftwareError> {
        let shared = &*self.shared;
        let device = &*shared.device;
        let mut stats = SoftwareFlushStats::default();
        let mut regions = Vec::new();
        for image in images.iter_mut() {
            let rows = image.indirection.upload(uploader, image.residency.page_table())?;
            stats.indirection_rows += rows.map_or(0, |r| u64::from(r.end - r.start));
            let layout = image.residency.layout().clone();
            let table = image.residency.page_table();
            let mut refresh = std::collections::BTreeSet::new();
            for &tile in &image.written {
                let Some(c) = layout.tile_coord(tile) else { continue };
                let mip = layout.mips()[c.mip as usize];
                for dy in -1i64..=1 {
                    for dx in -1i64..=1 {
                        let (x, y) = (i64::from(c.x) + dx, i64::from(c.y) + dy);
                        if x < 0 || y < 0 || x >= i64::from(mip.tiles[0]) || y >= i64::from(mip.tiles[1]) {
                            continue;
                        }
                        let n = TileCoord { x: x as u32, y: y as u32, ..c };
                        if let Some(index) = layout.tile_index(n).filter(|&t| table.is_resident(t)) {
                            refresh.insert(index);
                        }
                    }
                }
            }
            let resident = |c: TileCoord| layout.tile_index(c).is_some_and(|t| table.is_resident(t));
            for tile in refresh {
                let (Some(c), Some(physical)) = (layout.tile_coord(tile), table.get(tile)) else { continue };
                let [dx0, dy0] = shared.atlas_layout.slot_origin(physical)?;
                stats.slots_bordered += 1;
                for copy in border_copies(&layout, c, shared.border, resident).into_iter().skip(1) {
                    let src_index = layout.tile_index(copy.src_tile).expect("a tile of the layout");
                    let src_physical = table.get(src_index).expect("border_copies reads resident tiles");
                    let [sx0, sy0] = shared.atlas_layout.slot_origin(src_physical)?;
                    regions.push(atlas_copy(
                        [sx0 + shared.border + copy.src[0], sy0 + shared.border + copy.src[1]],
                        [dx0 + copy.dst[0], dy0 + copy.dst[1]],
                        copy.extent,
                    ));
                }
            }
        }
        uploader.flush()?;
        stats.border_copies = regions.len() as u64;
        if !regions.is_empty() {
            use crate::sync::recording::MemoryDependency;
            use vk::{AccessFlags2 as A, PipelineStageFlags2 as S};
            let atlas = shared.atlas.raw();
            let atlas_layouts = shared.atlas.layouts();
            let atlas_range = shared.atlas.full_range();
            device.submit_once("software path borders", |rec| {
                rec.use_layout(
                    atlas_layouts,
                    0..atlas_range.level_count,
                    0..atlas_range.layer_count,
                    vk::ImageLayout::GENERAL,
                );
                // Payloads written by the uploader's copies before the border copies read them; the
                // borders before anything samples them.
                rec.memory_barrier(MemoryDependency {
                    src_stages: S::ALL_COMMANDS,
                    src_access: A::MEMORY_WRITE,
                    dst_stages: S::COPY,
                    dst_access: A::TRANSFER_READ | A::TRANSFER_WRITE,
                })
                .expect("core stages with accesses they perform");
                for chunk in regions.chunks(512) {
                    // SAFETY: `rec` is recording on this device outside a render pass; the atlas is
                    // live, in GENERAL when the copies run (the requirement noted above, checked
                    // by the submission); every region lies in it, and sources (payloads) never
                    // overlap destinations (borders).
                    unsafe {
                        device.raw().cmd_copy_image(
                            rec.raw(),
                            atlas,
                            vk::ImageLayout::GENERAL,
                            atlas,
                            vk::ImageLayout::GENERAL,
                            chunk,
                        )
                    };
                }
                rec.memory_barrier(MemoryDependency {
                    src_stages: S::COPY,
                    src_access: A::TRANSFER_WRITE,
                    dst_stages: S::ALL_COMMANDS,
                    dst_access: A::MEMORY_READ,
                })
                .expect("core stages with accesses they perform");
            })?;
        }
        // Only now are the borders done: a failure above leaves them to the next flush.
        for image in images.iter_mut() {
            image.written.clear();
        }
        Ok(stats)
    }
}

fn atlas_copy(src: [u32; 2], dst: [u32; 2], extent: [u32; 2]) -> vk::ImageCopy {
    let layers = vk::ImageSubresourceLayers {
        aspect_mask: vk::ImageAspectFlags::COLOR,
        mip_level: 0,
        base_array_layer: 0,
        layer_count: 1,
    };
    vk::ImageCopy {
        src_subresource: layers,
        src_offset: vk::Offset3D { x: src[0] as i32, y: src[1] as i32, z: 0 },
        dst_subresource: layers,
        dst_offset: vk::Offset3D { x: dst[0] as i32, y: dst[1] as i32, z: 0 },
        extent: vk::Extent3D { width: extent[0], height: extent[1], depth: 1 },
    }
}

/// The indirection texture of one software image.
#[derive(Debug)]
struct IndirectionTexture {
    image: Image,
    view: crate::resources::image::ImageView,
    table: Indirection,
    uploaded_once: bool,
}

impl IndirectionTexture {
    fn new(device: &Device, name: &str, table: Indirection) -> Result<IndirectionTexture, SoftwareError> {
        let [w, h] = table.extent();
        let mut desc = ImageDesc::new_2d(
            format!("{name} indirection"),
            Format::R32Uint,
            w,
            h,
            ImageUsage::SAMPLED | ImageUsage::COPY_DST,
        );
        // One layer per layer of a 2D array (a `usampler2DArray`).
        desc.array_layers = table.layers();
        let (image, view) = sampled_image(device, &desc)?;
        Ok(IndirectionTexture { image, view, table, uploaded_once: false })
    }

    /// Recomputes and stages the changed rows of every layer (all of them the first time).
    fn upload(
        &mut self,
        uploader: &Uploader,
        page_table: &PageTable,
    ) -> Result<Option<std::ops::Range<u32>>, SoftwareError> {
        let changed = self.table.update(page_table)?;
        let [width, height] = self.table.extent();
        let rows = if self.uploaded_once { changed } else { Some(0..height) };
        if let Some(rows) = &rows {
            let extent = [width, rows.end - rows.start, 1];
            for layer in 0..self.table.layers() {
                let region = ImageRegion::new(&self.image, 0, [0, rows.start, 0], extent).with_layer(layer);
                uploader.write_image(&region, &self.table.layer_row_bytes(layer, rows.clone()))?;
            }
            self.uploaded_once = true;
        }
        Ok(rows)
    }

    fn used_until(&self, until: GpuUse) -> Result<(), ForeignUse> {
        self.view.used_until(until)?;
        self.image.used_until(until)
    }
}

/// A partially resident 2D texture on the software path, with the commit/release API of
/// [`SparseImage`](crate::sparse::SparseImage): commits and releases change its page table at once
/// (tiles from its [`SoftwareTilePool`]); [`write_region`](Self::write_region) stages texels into
/// the slots of resident tiles; [`SoftwareTilePool::flush`] makes it all visible to shaders, which
/// sample it through `residency_software.glsl` (the pool's atlas view and this image's
/// [`indirection_view`](Self::indirection_view)).
///
/// It is released when dropped: its slots go back to its pool, and its indirection texture is
/// destroyed, once the GPU work that may sample it has completed (residency's own submissions
/// before the drop and the uses declared with [`SoftwareImage::used_until`]). It keeps its pool's
/// state (the atlas) alive.
#[derive(Debug)]
pub struct SoftwareImage {
    /// Its slots (returned to the pool on release) and its pool's state, kept alive.
    life: std::sync::Arc<Life>,
    name: String,
    desc: residency_core::tiles::SparseImageDesc,
    residency: residency_core::tiles::SparseResidency,
    indirection: IndirectionTexture,
    /// Tiles written since the last flush (their borders and their neighbours' need refilling).
    written: std::collections::BTreeSet<residency_core::tiles::TileIndex>,
}

impl SoftwareImage {
    /// Creates an image with nothing resident. Its format must be the pool's; 2D or a 2D array
    /// (one indirection layer per layer: sample it as a `usampler2DArray` with
    /// `residency_software.glsl`'s array overloads).
    pub fn new(
        pool: &SoftwareTilePool,
        name: &str,
        desc: &residency_core::tiles::SparseImageDesc,
    ) -> Result<SoftwareImage, SoftwareError> {
        let shared = &pool.shared;
        if desc.format != shared.format {
            return Err(SoftwareError::FormatMismatch {
                name: name.to_owned(),
                image: desc.format,
                pool: shared.format,
            });
        }
        let layout = residency_core::tiles::software_layout(desc, shared.border)?;
        let table = Indirection::new(&layout, shared.atlas_layout)?;
        let owner = shared
            .owners
            .take()
            .ok_or(SoftwareError::TooManyImages { limit: super::owners::OWNER_SERIALS - 1 })?;
        // A refused image gives its id back (it never held tiles).
        let indirection = IndirectionTexture::new(&shared.device, name, table)
            .inspect_err(|_| shared.owners.give_back(owner))?;
        let tile_pool = pool.with_pool(|p| p.id());
        let tiles: std::sync::Weak<dyn TileOwner> = std::sync::Arc::downgrade(shared) as _;
        let life = Life::new(
            std::sync::Arc::clone(&shared.device),
            Garbage::Tiles(TileReturn { pool: tiles, owner }),
            Some(std::sync::Arc::clone(shared) as std::sync::Arc<dyn Parent>),
        );
        shared.images.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Ok(SoftwareImage {
            life,
            name: name.to_owned(),
            desc: *desc,
            residency: residency_core::tiles::SparseResidency::new(tile_pool, owner, &layout),
            indirection,
            written: std::collections::BTreeSet::new(),
        })
    }

    /// Its name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The device it lives on (kept alive by the image).
    pub fn device(&self) -> &std::sync::Arc<Device> {
        self.life.device()
    }

    /// Declares that GPU work the renderer submitted itself samples the image (its indirection
    /// and its atlas slots) until `until`; see [`Buffer::used_until`](crate::Buffer::used_until).
    /// Dropping the image earlier defers its release, and the return of its slots, until then.
    pub fn used_until(&self, until: GpuUse) -> Result<(), ForeignUse> {
        self.life.used_until(until)?;
        self.indirection.used_until(until)
    }

    /// Its description.
    pub fn desc(&self) -> &residency_core::tiles::SparseImageDesc {
        &self.desc
    }

    /// Its (software) layout: every mip tiled, bordered slots as tiles.
    pub fn layout(&self) -> &SparseImageLayout {
        self.residency.layout()
    }

    /// Its residency (page table, bitmaps).
    pub fn residency(&self) -> &residency_core::tiles::SparseResidency {
        &self.residency
    }

    /// The indirection view (binding `minLodMap` of `residency_software.glsl`; a nearest sampler).
    pub fn indirection_view(&self) -> &crate::resources::image::ImageView {
        &self.indirection.view
    }

    /// The CPU copy of its indirection texture (as of the last [`SoftwareTilePool::flush`]).
    pub fn indirection(&self) -> &Indirection {
        &self.indirection.table
    }

    fn check_pool(&self, pool: &SoftwareTilePool) -> Result<(), SoftwareError> {
        Ok(pool.with_pool(|p| self.residency.check_pool(p))?)
    }

    /// Makes every tile of (`layer`, `mip`) that `region` touches resident. Visible to shaders
    /// after its texels are written and the pool flushed. [`ResidencyBackend::commit_region`],
    /// callable without the trait in scope.
    pub fn commit_region(
        &mut self,
        pool: &SoftwareTilePool,
        layer: u32,
        mip: u32,
        region: TexelRegion,
    ) -> Result<(), SoftwareError> {
        ResidencyBackend::commit_region(self, pool, layer, mip, region)
    }

    /// Makes specific tiles resident: [`ResidencyBackend::commit_tiles`].
    pub fn commit_tiles(
        &mut self,
        pool: &SoftwareTilePool,
        tiles: &[residency_core::tiles::TileIndex],
    ) -> Result<(), SoftwareError> {
        ResidencyBackend::commit_tiles(self, pool, tiles)
    }

    /// Releases the tiles of (`layer`, `mip`) that `region` touches. GPU work reading them must
    /// have completed before their slots are written again. [`ResidencyBackend::release_region`].
    pub fn release_region(
        &mut self,
        pool: &SoftwareTilePool,
        layer: u32,
        mip: u32,
        region: TexelRegion,
    ) -> Result<(), SoftwareError> {
        ResidencyBackend::release_region(self, pool, layer, mip, region)
    }

    /// Releases specific tiles: [`ResidencyBackend::release_tiles`].
    pub fn release_tiles(
        &mut self,
        pool: &SoftwareTilePool,
        tiles: &[residency_core::tiles::TileIndex],
    ) -> Result<(), SoftwareError> {
        ResidencyBackend::release_tiles(self, pool, tiles)
    }

    /// Releases everything: [`ResidencyBackend::release_all`].
    pub fn release_all(&mut self, pool: &SoftwareTilePool) -> Result<(), SoftwareError> {
        ResidencyBackend::release_all(self, pool)
    }

    /// Stages `data` (the region's texels, rows packed) into the slots of the tiles that `region`
    /// of `mip` covers, committing on demand, as the seed's `glTexSubImage2D` into a sparse
    /// texture and the hardware path's [`SparseImage::write_region`](crate::sparse::SparseImage::write_region):
    /// tiles the region touches that are not resident are committed from `pool` first (all or
    /// nothing: an exhausted pool is [`SoftwareError::Commit`] and nothing is committed or
    /// staged). The borders follow at the next [`SoftwareTilePool::flush`]. The pool must be the
    /// image's and the region inside its mip (else [`SoftwareError::Commit`]), `data` the region's
    /// byte count (else [`SoftwareError::WrongRegionSize`]); nothing changes then. An empty region
    /// writes and commits nothing.
    pub fn write_region(
        &mut self,
        pool: &SoftwareTilePool,
        uploader: &Uploader,
        layer: u32,
        mip: u32,
        region: TexelRegion,
        data: &[u8],
    ) -> Result<(), SoftwareError> {
        self.check_pool(pool)?;
        let info = self.residency.check_region(layer, mip, region)?;
        let texel = u64::from(self.desc.format.block_bytes());
        let expected =
            u64::from(region.extent[0]) * u64::from(region.extent[1]) * u64::from(region.extent[2]) * texel;
        if data.len() as u64 != expected {
            return Err(SoftwareError::WrongRegionSize { expected, got: data.len() as u64 });
        }
        if expected == 0 {
            return Ok(());
        }
        let tiles: Vec<_> = {
            let layout = self.residency.layout();
            let range = layout.tiles_covering(mip, region).expect("a tiled mip");
            layout.tiles_in(layer, mip, range).collect()
        };
        ResidencyBackend::commit_tiles(self, pool, &tiles)?;
        let layout = self.residency.layout();
        let table = self.residency.page_table();
        let shared = &*pool.shared;
        let side = shared.atlas_layout.tile_side;
        for &tile in &tiles {
            let c = layout.tile_coord(tile).expect("tile of the layout");
            let physical = table.get(tile).expect("checked resident");
            let [ox, oy] = shared.atlas_layout.slot_origin(physical)?;
            // The part of the region inside this tile, in texture texels.
            let x0 = region.offset[0].max(c.x * side);
            let y0 = region.offset[1].max(c.y * side);
            let x1 = (region.offset[0] + region.extent[0]).min((c.x + 1) * side).min(info.extent[0]);
            let y1 = (region.offset[1] + region.extent[1]).min((c.y + 1) * side).min(info.extent[1]);
            let mut part = Vec::with_capacity(((x1 - x0) * (y1 - y0)) as usize * texel as usize);
            for y in y0..y1 {
                let row = ((y - region.offset[1]) * region.extent[0] + (x0 - region.offset[0])) as usize
                    * texel as usize;
                part.extend_from_slice(&data[row..row + (x1 - x0) as usize * texel as usize]);
            }
            let offset = [ox + shared.border + (x0 - c.x * side), oy + shared.border + (y0 - c.y * side), 0];
            let target = ImageRegion::new(&shared.atlas, 0, offset, [x1 - x0, y1 - y0, 1]);
            uploader.write_image(&target, &part)?;
            self.written.insert(tile);
        }
        Ok(())
    }
}

impl ResidencyBackend for SoftwareImage {
    type Pool = SoftwareTilePool;
    type FlushContext<'a> = &'a Uploader;
    type FlushStats = SoftwareFlushStats;
    type Error = SoftwareError;
    const GLSL_INCLUDE: &'static str = "residency_software.glsl";

    fn name(&self) -> &str {
        &self.name
    }

    fn device(&self) -> &std::sync::Arc<Device> {
        self.life.device()
    }

    fn used_until(&self, until: GpuUse) -> Result<(), ForeignUse> {
        SoftwareImage::used_until(self, until)
    }

    fn residency(&self) -> &residency_core::tiles::SparseResidency {
        &self.residency
    }

    fn commit_error(error: &SoftwareError) -> Option<&CommitError> {
        match error {
            SoftwareError::Commit(e) => Some(e),
            _ => None,
        }
    }

    fn with_tile_pool_unchecked<R>(
        pool: &SoftwareTilePool,
        f: impl FnOnce(&mut residency_core::tiles::TilePool) -> R,
        _: Checked,
    ) -> R {
        pool.with_pool(f)
    }

    fn residency_mut_unchecked(&mut self, _: Checked) -> &mut residency_core::tiles::SparseResidency {
        &mut self.residency
    }

    /// Nothing to queue: the flush derives the indirection from the page table.
    fn queue_unchecked(&mut self, _: residency_core::tiles::ResidencyChanges, _: Checked) {}

    fn flush_unchecked(
        pool: &SoftwareTilePool,
        uploader: &Uploader,
        images: &mut [&mut SoftwareImage],
        _: Checked,
    ) -> Result<SoftwareFlushStats, SoftwareError> {
        pool.flush_checked(uploader, images)
    }
}
