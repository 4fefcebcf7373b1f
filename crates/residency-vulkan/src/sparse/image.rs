//! Sparse images: creation with the driver's mip tail, commits and releases queued per tile,
//! read-back, and their garbage (the image, its view and its tiles) once dropped.

use super::*;
use crate::device::life::Retire;

/// A partially resident image. It is released when dropped: its tiles go back to its pool, and its
/// `VkImage` and view are destroyed, once the GPU work that may use it has completed (residency's
/// own submissions before the drop and the uses declared with [`SparseImage::used_until`]). It
/// keeps what it points into alive: its device, and its pool's state and heaps (or the
/// [`TileHeaps`] it was made for), so memory bound to a live sparse image is never freed.
#[derive(Debug)]
pub struct SparseImage {
    pub(super) life: Arc<Life>,
    pub(super) raw: vk::Image,
    pub(super) view: vk::ImageView,
    pub(super) desc: SparseImageDesc,
    pub(super) name: String,
    pub(super) residency: SparseResidency,
    /// Changes queued for the next flush, folded per tile.
    pub(super) pending: PendingChanges,
    /// For an image made by [`SparseImage::new_external`]: the serial of its [`TileHeaps`].
    pub(super) external: Option<u64>,
    /// What its heaps know its bindings by.
    pub(super) key: u64,
    /// Its device's process-unique id and its usage, for descriptor sets.
    pub(super) device_uid: u64,
    pub(super) usage: vk::ImageUsageFlags,
}

pub(super) static NEXT_SPARSE_IMAGE: AtomicU64 = AtomicU64::new(1);

/// What a dropped sparse image leaves behind: destroyed once the GPU is done with it.
#[derive(Debug)]
pub(crate) struct SparseImageGarbage {
    pub(super) raw: vk::Image,
    pub(super) view: vk::ImageView,
    pub(super) id: ObjectId,
    pub(super) key: u64,
    /// Its heaps, to forget its bindings (weak: the retire queue keeps nothing alive).
    pub(super) heaps: Weak<HeapsShared>,
    /// Its tiles, back to its pool (none for an image of [`SparseImage::new_external`]).
    pub(super) tiles: Option<TileReturn>,
}

impl Retire for SparseImageGarbage {
    fn retire(self: Box<Self>, device: &Device) {
        // SAFETY: the image and view belong to this device, no handle to them is left and the GPU
        // work that used them has completed (the retire queue's contract); destroying a sparse
        // image releases its bindings.
        unsafe {
            device.raw().destroy_image_view(self.view, None);
            device.raw().destroy_image(self.raw, None);
        }
        device.ledger().untrack(self.id);
        if let Some(heaps) = self.heaps.upgrade() {
            heaps.forget(self.key);
        }
        if let Some(tiles) = self.tiles {
            tiles.give_back();
        }
    }
}

/// Where a new sparse image's memory comes from, and what it holds.
pub(super) struct Origin {
    pub(super) device: Arc<Device>,
    pub(super) heaps: Arc<HeapsShared>,
    pub(super) parent: Arc<dyn Parent>,
    pub(super) tile_bytes: u64,
    pub(super) pool: PoolId,
    pub(super) owner: ImageId,
    /// Its tiles go back to this pool when it is destroyed.
    pub(super) tiles: Option<Weak<dyn TileOwner>>,
    pub(super) external: Option<u64>,
}

/// What a sparse image can be used as besides sampled and copied (upload, read-back), which
/// every sparse image is. The default adds nothing.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SparseUsage {
    /// Storage-image usage: shaders write it with `imageStore` (a compute pass rendering into the
    /// texture). Writes to non-resident tiles are dropped on devices with
    /// `residencyNonResidentStrict` and land nowhere defined elsewhere (never in another
    /// resource or in a resident tile): [`SparseImage::unbound_texels_read_zero`].
    pub storage: bool,
    /// Colour-attachment usage: rendered into through [`SparseImage::attachment`] and
    /// [`GraphicsProgram::render_sparse`](crate::graphics::GraphicsProgram::render_sparse) (the
    /// seed's FBO with a PRT attached). Only 2D images, and only where the device reports sparse
    /// residency for the format with this usage and renders into it correctly (not lavapipe,
    /// which renders into sparse images as if they were linear); elsewhere creation is
    /// [`SparseError::UsageUnsupported`].
    pub color_attachment: bool,
}

impl SparseUsage {
    /// Storage-image usage.
    pub const STORAGE: SparseUsage = SparseUsage { storage: true, color_attachment: false };
    /// Colour-attachment usage.
    pub const COLOR_ATTACHMENT: SparseUsage = SparseUsage { storage: false, color_attachment: true };
}

/// The create info of a sparse image; `aliased` (the device enabled `sparseResidencyAliased`) adds
/// `SPARSE_ALIASED`, so a compaction's carrier images ([`create_carrier`]) may alias its tiles'
/// memory with the data consistent.
pub(super) fn sparse_create_info(
    desc: &SparseImageDesc,
    usage: SparseUsage,
    aliased: bool,
) -> vk::ImageCreateInfo<'static> {
    let extra = usage;
    let mut usage =
        vk::ImageUsageFlags::SAMPLED | vk::ImageUsageFlags::TRANSFER_DST | vk::ImageUsageFlags::TRANSFER_SRC;
    if extra.storage {
        usage |= vk::ImageUsageFlags::STORAGE;
    }
    if extra.color_attachment {
        usage |= vk::ImageUsageFlags::COLOR_ATTACHMENT;
    }
    let mut flags = vk::ImageCreateFlags::SPARSE_BINDING | vk::ImageCreateFlags::SPARSE_RESIDENCY;
    if aliased {
        flags |= vk::ImageCreateFlags::SPARSE_ALIASED;
    }
    vk::ImageCreateInfo::default()
        .flags(flags)
        .image_type(match desc.dimension {
            SparseDimension::D2 => vk::ImageType::TYPE_2D,
            SparseDimension::D3 => vk::ImageType::TYPE_3D,
        })
        .format(vk_format(desc.format))
        .extent(vk::Extent3D { width: desc.width, height: desc.height, depth: desc.depth })
        .mip_levels(desc.mip_levels)
        .array_layers(desc.array_layers)
        .samples(vk::SampleCountFlags::TYPE_1)
        .tiling(vk::ImageTiling::OPTIMAL)
        .usage(usage)
        .sharing_mode(vk::SharingMode::EXCLUSIVE)
        .initial_layout(vk::ImageLayout::UNDEFINED)
}

impl SparseImage {
    /// Creates a partially resident image with nothing resident, in `GENERAL` layout, with a view of
    /// all its mips (and layers). `storage` adds storage-image usage (writes into resident tiles).
    pub fn new(
        pool: &SparseTilePool,
        name: &str,
        desc: &SparseImageDesc,
        storage: bool,
    ) -> Result<SparseImage, SparseError> {
        let shared = &pool.shared;
        let owner = shared.take_owner(name)?;
        let tiles: Weak<dyn TileOwner> = Arc::downgrade(shared) as Weak<dyn TileOwner>;
        let origin = Origin {
            device: Arc::clone(&shared.device),
            heaps: Arc::clone(&shared.heaps),
            parent: Arc::clone(shared) as Arc<dyn Parent>,
            tile_bytes: pool.with_pool(|p| p.tile_bytes()),
            pool: shared.tile_pool,
            owner,
            tiles: Some(tiles),
            external: None,
        };
        let image = Self::create(origin, name, desc, SparseUsage { storage, color_attachment: false })
            .inspect_err(|_| shared.owners.give_back(owner))?;
        shared.images.fetch_add(1, Ordering::Relaxed);
        Ok(image)
    }

    /// Creates a partially resident image as [`SparseImage::new`] does, with the usages of `usage`
    /// (storage, colour attachment). A colour attachment the device cannot make sparse for this
    /// format (no `COLOR_ATTACHMENT` format feature, or no sparse image format properties for
    /// that usage), one of a 3D image, or one on lavapipe (which reports sparse colour
    /// attachments but renders into them as if the image were linear) is
    /// [`SparseError::UsageUnsupported`] with nothing created.
    pub fn new_with_usage(
        pool: &SparseTilePool,
        name: &str,
        desc: &SparseImageDesc,
        usage: SparseUsage,
    ) -> Result<SparseImage, SparseError> {
        let shared = &pool.shared;
        let owner = shared.take_owner(name)?;
        let tiles: Weak<dyn TileOwner> = Arc::downgrade(shared) as Weak<dyn TileOwner>;
        let origin = Origin {
            device: Arc::clone(&shared.device),
            heaps: Arc::clone(&shared.heaps),
            parent: Arc::clone(shared) as Arc<dyn Parent>,
            tile_bytes: pool.with_pool(|p| p.tile_bytes()),
            pool: shared.tile_pool,
            owner,
            tiles: Some(tiles),
            external: None,
        };
        let image =
            Self::create(origin, name, desc, usage).inspect_err(|_| shared.owners.give_back(owner))?;
        shared.images.fetch_add(1, Ordering::Relaxed);
        Ok(image)
    }

    /// Creates an image whose residency someone else keeps (a streaming manager): its tiles are
    /// bound with [`TileHeaps::bind`] through `heaps` from that owner's changes, and its own page
    /// table stays empty (its residency names [`PoolId::NONE`]: every commit, release and flush
    /// through a [`SparseTilePool`] is refused). It keeps `heaps`' memory alive.
    ///
    /// `owner` is the id the owner's pool allocates the image's tiles to: [`TileHeaps::bind`]
    /// binds the image only to tiles the pool gave that id, so a second live image with the same
    /// owner in these heaps is refused ([`SparseError::DuplicateOwner`]); the id is free again
    /// once the image is destroyed (after the GPU work that may use it).
    pub fn new_external(
        heaps: &TileHeaps,
        tile_bytes: u64,
        owner: ImageId,
        name: &str,
        desc: &SparseImageDesc,
        storage: bool,
    ) -> Result<SparseImage, SparseError> {
        let shared = &heaps.shared;
        {
            let mut state = shared.lock();
            if state.external_owners.contains_key(&owner.0) {
                return Err(SparseError::DuplicateOwner {
                    name: name.to_owned(),
                    owner,
                    heaps: shared.name.clone(),
                });
            }
            // Reserved while the image is created (key 0: no image has it).
            state.external_owners.insert(owner.0, 0);
        }
        let origin = Origin {
            device: Arc::clone(&shared.device),
            heaps: Arc::clone(shared),
            parent: Arc::clone(shared) as Arc<dyn Parent>,
            tile_bytes,
            pool: PoolId::NONE,
            owner,
            tiles: None,
            external: Some(shared.serial),
        };
        let image = Self::create(origin, name, desc, SparseUsage { storage, color_attachment: false });
        let mut state = shared.lock();
        match image {
            Ok(image) => {
                state.external_owners.insert(owner.0, image.key);
                shared.images.fetch_add(1, Ordering::Relaxed);
                Ok(image)
            }
            Err(e) => {
                state.external_owners.remove(&owner.0);
                Err(e)
            }
        }
    }

    pub(super) fn create(
        origin: Origin,
        name: &str,
        desc: &SparseImageDesc,
        usage: SparseUsage,
    ) -> Result<SparseImage, SparseError> {
        let device = &*origin.device;
        let (memory_type, tile_bytes) = (origin.heaps.memory_type, origin.tile_bytes);
        let profile = device.profile();
        let info = SparseFormatInfo::from_profile(profile, desc.format, desc.dimension)?;
        let limits = LayoutLimits::from_profile(profile);
        // Validate the description (limits, address space) before creating anything.
        SparseImageLayout::new(desc, &info, &limits)?;
        let create = sparse_create_info(desc, usage, device.features().sparse_residency_aliased);
        if usage.color_attachment {
            check_sparse_attachment(device, desc, &create)?;
        }
        // SAFETY: a pure query on this device's physical device.
        let supported = unsafe {
            device.instance().get_physical_device_image_format_properties(
                device.physical(),
                create.format,
                create.image_type,
                create.tiling,
                create.usage,
                create.flags,
            )
        };
        if supported.is_err() {
            return Err(SparseError::Unsupported(ShapeError::FormatUnsupported {
                device: device.name().to_owned(),
                format: desc.format,
                dimension: desc.dimension,
            }));
        }
        let raw = device
            .ledger()
            .guard(FaultSite::CreateResource, || {
                // SAFETY: the description was checked against the device's limits and format
                // properties.
                unsafe { device.raw().create_image(&create, None) }
            })
            .during("vkCreateImage")?;
        // Until it is handed to its `Life`, every error path retires it (after any work submitted).
        let mut guard = Unfinished::new(device, raw, name);
        // SAFETY: raw is a sparse image of this device.
        let requirements = unsafe { device.raw().get_image_memory_requirements(raw) };
        if requirements.alignment != tile_bytes || requirements.memory_type_bits & (1 << memory_type) == 0 {
            return Err(SparseError::Incompatible {
                name: name.to_owned(),
                reason: format!(
                    "sparse block {} B and memory types {:#b} do not fit the pool ({} B tiles, type {})",
                    requirements.alignment, requirements.memory_type_bits, tile_bytes, memory_type
                ),
            });
        }
        // SAFETY: raw is a sparse image of this device.
        let sparse_reqs = unsafe { device.raw().get_image_sparse_memory_requirements(raw) };
        let wanted = aspect(desc.format);
        let Some(req) = sparse_reqs.iter().find(|r| r.format_properties.aspect_mask.intersects(wanted))
        else {
            return Err(SparseError::Incompatible {
                name: name.to_owned(),
                reason: "the driver reports no sparse requirements for the image's aspect".into(),
            });
        };
        let tail = DeviceMipTail {
            first_lod: req.image_mip_tail_first_lod,
            size: req.image_mip_tail_size,
            offset: req.image_mip_tail_offset,
            stride: req.image_mip_tail_stride,
        };
        let layout = SparseImageLayout::with_device_mip_tail(desc, &info, &limits, tail)?;
        let view_info = vk::ImageViewCreateInfo::default()
            .image(raw)
            .view_type(view_type(desc))
            .format(create.format)
            .subresource_range(vk::ImageSubresourceRange {
                aspect_mask: wanted,
                base_mip_level: 0,
                level_count: desc.mip_levels,
                base_array_layer: 0,
                layer_count: desc.array_layers,
            });
        // SAFETY: raw is live; the range covers exactly its mips and layers.
        let view = unsafe { device.raw().create_image_view(&view_info, None) }
            .map_err(|r| SparseError::from(VulkanError::from_vk("vkCreateImageView", r)))?;
        guard.garbage.as_mut().expect("held until the end").view = view;
        device.set_name(view, &format!("{name} view"));
        let to_general = [vk::ImageMemoryBarrier2::default()
            .src_stage_mask(vk::PipelineStageFlags2::NONE)
            .dst_stage_mask(vk::PipelineStageFlags2::ALL_COMMANDS)
            .dst_access_mask(vk::AccessFlags2::MEMORY_READ | vk::AccessFlags2::MEMORY_WRITE)
            .old_layout(vk::ImageLayout::UNDEFINED)
            .new_layout(vk::ImageLayout::GENERAL)
            .image(raw)
            .subresource_range(view_info.subresource_range)];
        let transitioned = device.submit_once("sparse image to GENERAL", |rec| {
            // SAFETY: `rec` is recording on this device outside a render pass; the image is live.
            unsafe {
                device.raw().cmd_pipeline_barrier2(
                    rec.raw(),
                    &vk::DependencyInfo::default().image_memory_barriers(&to_general),
                );
            }
        });
        transitioned?;
        let mut garbage = guard.garbage.take().expect("held until the end");
        let key = garbage.key;
        garbage.heaps = Arc::downgrade(&origin.heaps);
        garbage.tiles = origin.tiles.map(|pool| TileReturn { pool, owner: origin.owner });
        let life =
            Life::new(Arc::clone(&origin.device), Garbage::Custom(Box::new(garbage)), Some(origin.parent));
        Ok(SparseImage {
            life,
            raw,
            view,
            desc: *desc,
            name: name.to_owned(),
            residency: SparseResidency::new(origin.pool, origin.owner, &layout),
            pending: PendingChanges::new(),
            external: origin.external,
            key,
            device_uid: origin.device.uid(),
            usage: create.usage,
        })
    }

    /// Queues changes for the next flush, folded ([`PendingChanges::queue`]).
    pub(super) fn queue(&mut self, changes: ResidencyChanges) {
        self.pending.queue(changes);
    }

    /// The queued changes reached the GPU.
    pub(super) fn flushed(&mut self) {
        self.pending.flushed();
    }

    /// A flush failed, so nothing queued reached the GPU: the commits queued since the last flush
    /// are undone and the unbinds of what the GPU still has bound stay queued
    /// ([`PendingChanges::roll_back`]).
    pub(super) fn roll_back(&mut self, pool: &mut TilePool) {
        if let Err(e) = self.pending.roll_back(&mut self.residency, pool) {
            tracing::error!(image = %self.name, error = %e, "undoing the commits of a failed flush");
        }
    }

    /// The `VkImage`.
    pub fn raw(&self) -> vk::Image {
        self.raw
    }

    /// The device it lives on (kept alive by the image).
    pub fn device(&self) -> &Arc<Device> {
        self.life.device()
    }

    /// Declares that GPU work the renderer submitted itself uses this image (or its view) until
    /// `until`; see [`Buffer::used_until`](crate::Buffer::used_until). Dropping the image earlier
    /// defers its destruction, and the return of its tiles, until then; its pool's memory waits
    /// for it too.
    pub fn used_until(&self, until: GpuUse) -> Result<(), ForeignUse> {
        self.life.used_until(until)
    }

    /// A view of all its mips and layers.
    pub fn view(&self) -> vk::ImageView {
        self.view
    }

    /// What a descriptor set binding the view needs: the view, its device's id, the usage.
    pub(crate) fn view_binding(&self) -> (vk::ImageView, u64, vk::ImageUsageFlags, &Arc<Life>) {
        (self.view, self.device_uid, self.usage, &self.life)
    }

    /// The type of its whole-image view (what a shader binding it must declare).
    pub(crate) fn view_type(&self) -> vk::ImageViewType {
        view_type(&self.desc)
    }

    /// Its name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Its description.
    pub fn desc(&self) -> &SparseImageDesc {
        &self.desc
    }

    /// Its layout (tile grid per mip, mip tail as the driver reported it).
    pub fn layout(&self) -> &SparseImageLayout {
        self.residency.layout()
    }

    /// Its residency: the page table, residency bitmaps and the min-LOD map. Read-only: its page
    /// table names physical tiles of the image's pool, so a change made without the pool (a
    /// `SparseResidency::remap`, a commit against another pool) would free or bind tiles other
    /// images own. Changes go through the checked commits and releases below; the min-LOD
    /// refresh through [`SparseImage::refresh_min_lod`].
    pub fn residency(&self) -> &SparseResidency {
        &self.residency
    }

    /// Recomputes its min-LOD entries touched by the commits and releases since the last refresh
    /// and returns the boxes recomputed ([`SparseResidency::refresh_min_lod`]).
    /// [`MinLodMap::update`] calls it and uploads them; call it yourself only for a map you upload
    /// yourself (a box it returns is not returned again).
    pub fn refresh_min_lod(&mut self) -> Vec<residency_core::tiles::MinLodUpdate> {
        self.residency.refresh_min_lod()
    }

    /// Whether changes are queued for the next flush.
    pub fn has_pending_binds(&self) -> bool {
        !self.pending.is_empty()
    }

    /// Makes every tile of (`layer`, `mip`) that `region` touches resident (a mip in the tail
    /// commits the tail). The binds happen at the next [`SparseTilePool::flush_binds`].
    /// [`ResidencyBackend::commit_region`], callable without the trait in scope.
    pub fn commit_region(
        &mut self,
        pool: &SparseTilePool,
        layer: u32,
        mip: u32,
        region: TexelRegion,
    ) -> Result<(), SparseError> {
        ResidencyBackend::commit_region(self, pool, layer, mip, region)
    }

    /// Makes specific tiles resident: [`ResidencyBackend::commit_tiles`].
    pub fn commit_tiles(&mut self, pool: &SparseTilePool, tiles: &[TileIndex]) -> Result<(), SparseError> {
        ResidencyBackend::commit_tiles(self, pool, tiles)
    }

    /// Makes mip tail `tail` resident (one unit, pinned until released explicitly):
    /// [`ResidencyBackend::commit_tail`].
    pub fn commit_tail(&mut self, pool: &SparseTilePool, tail: u32) -> Result<(), SparseError> {
        ResidencyBackend::commit_tail(self, pool, tail)
    }

    /// Releases the tiles of (`layer`, `mip`) that `region` touches (the seed's NULL upload). GPU work
    /// reading them must have completed. [`ResidencyBackend::release_region`].
    pub fn release_region(
        &mut self,
        pool: &SparseTilePool,
        layer: u32,
        mip: u32,
        region: TexelRegion,
    ) -> Result<(), SparseError> {
        ResidencyBackend::release_region(self, pool, layer, mip, region)
    }

    /// Releases specific tiles: [`ResidencyBackend::release_tiles`].
    pub fn release_tiles(&mut self, pool: &SparseTilePool, tiles: &[TileIndex]) -> Result<(), SparseError> {
        ResidencyBackend::release_tiles(self, pool, tiles)
    }

    /// Releases everything, tails included: [`ResidencyBackend::release_all`].
    pub fn release_all(&mut self, pool: &SparseTilePool) -> Result<(), SparseError> {
        ResidencyBackend::release_all(self, pool)
    }
}

/// The driver name of lavapipe (`VkPhysicalDeviceDriverProperties::driverName`).
const LLVMPIPE: &str = "llvmpipe";

/// Why lavapipe's sparse colour attachments are refused although it reports them.
pub(super) const LLVMPIPE_SPARSE_ATTACHMENT: &str =
    "llvmpipe reports sparse colour attachments but renders into a sparse image as if it were \
     linear (fragments land in the wrong texels of resident tiles; seen on Mesa 25.0.7 by \
     render_into_prt_dropped_writes); render into a storage image with imageStore instead";

/// Refuses a sparse colour attachment the device cannot make: a 3D image, a format without the
/// `COLOR_ATTACHMENT` feature, no sparse image format properties for the usage, or lavapipe
/// (whose sparse colour attachments render to the wrong texels: [`LLVMPIPE_SPARSE_ATTACHMENT`]).
fn check_sparse_attachment(
    device: &Device,
    desc: &SparseImageDesc,
    create: &vk::ImageCreateInfo<'_>,
) -> Result<(), SparseError> {
    let refuse = |reason: &str| SparseError::UsageUnsupported {
        device: device.name().to_owned(),
        format: desc.format,
        usage: "COLOR_ATTACHMENT",
        reason: reason.to_owned(),
    };
    if desc.dimension != SparseDimension::D2 {
        return Err(refuse("only 2D images are colour attachments"));
    }
    // SAFETY: a pure query of this device's physical device.
    let features =
        unsafe { device.instance().get_physical_device_format_properties(device.physical(), create.format) };
    if !features.optimal_tiling_features.contains(vk::FormatFeatureFlags::COLOR_ATTACHMENT) {
        return Err(refuse("the format has no COLOR_ATTACHMENT feature with optimal tiling"));
    }
    // SAFETY: a pure query of this device's physical device.
    let sparse = unsafe {
        device.instance().get_physical_device_sparse_image_format_properties(
            device.physical(),
            create.format,
            create.image_type,
            vk::SampleCountFlags::TYPE_1,
            create.usage,
            create.tiling,
        )
    };
    if sparse.is_empty() {
        return Err(refuse("the device reports no sparse image format properties for this usage"));
    }
    if device.profile().identity.driver_name == LLVMPIPE {
        return Err(refuse(LLVMPIPE_SPARSE_ATTACHMENT));
    }
    Ok(())
}

impl SparseImage {
    /// Whether texels of non-resident tiles read as zero and writes to them are dropped on this
    /// image's device (`residencyNonResidentStrict`). Where this is false, reads of unbound texels
    /// return undefined values (writes to them still touch no other resource and no resident
    /// tile, as the specification guarantees): render and read only what is resident, or fall
    /// back through the residency codes.
    pub fn unbound_texels_read_zero(&self) -> bool {
        self.device().profile().sparse.non_resident_strict
    }

    /// Whether it has storage-image usage.
    pub fn is_storage(&self) -> bool {
        self.usage.contains(vk::ImageUsageFlags::STORAGE)
    }

    /// Whether it has colour-attachment usage.
    pub fn is_color_attachment(&self) -> bool {
        self.usage.contains(vk::ImageUsageFlags::COLOR_ATTACHMENT)
    }
}

impl ResidencyBackend for SparseImage {
    type Pool = SparseTilePool;
    type FlushContext<'a> = BindPlanOptions;
    type FlushStats = BindStats;
    type Error = SparseError;
    const GLSL_INCLUDE: &'static str = "residency.glsl";

    fn name(&self) -> &str {
        &self.name
    }

    fn device(&self) -> &Arc<Device> {
        self.life.device()
    }

    fn used_until(&self, until: GpuUse) -> Result<(), ForeignUse> {
        self.life.used_until(until)
    }

    fn residency(&self) -> &SparseResidency {
        &self.residency
    }

    fn commit_error(error: &SparseError) -> Option<&CommitError> {
        match error {
            SparseError::Commit(e) => Some(e),
            _ => None,
        }
    }

    fn with_tile_pool_unchecked<R>(
        pool: &SparseTilePool,
        f: impl FnOnce(&mut TilePool) -> R,
        _: Checked,
    ) -> R {
        pool.with_pool(f)
    }

    fn residency_mut_unchecked(&mut self, _: Checked) -> &mut SparseResidency {
        &mut self.residency
    }

    fn queue_unchecked(&mut self, changes: ResidencyChanges, _: Checked) {
        self.queue(changes);
    }

    fn flush_unchecked(
        pool: &SparseTilePool,
        options: BindPlanOptions,
        images: &mut [&mut SparseImage],
        _: Checked,
    ) -> Result<BindStats, SparseError> {
        pool.flush_checked(images, options)
    }
}

impl SparseImage {
    /// Writes `data` (the region's texels, rows packed) into `region` of (`layer`, `mip`),
    /// committing on demand, as the seed's `glTexSubImage2D` into a sparse texture: the tiles the
    /// region touches that are not resident (a tail mip: the tail) are committed from `pool` and
    /// bound — with the binds this image already had queued, in one
    /// [`SparseTilePool::flush_binds`] — before the copy is staged on `uploader`. Resident tiles
    /// keep their memory. Shaders see the texels after the upload is flushed and the min-LOD map
    /// refreshed, as with any commit.
    ///
    /// Checked before anything changes: the region and `data` as
    /// [`Uploader::write_image`](crate::Uploader::write_image) checks them
    /// ([`SparseError::Upload`]: outside the mip, misaligned, the wrong byte count, more than half
    /// the staging ring), the pool and the subresource ([`SparseError::Commit`]). An exhausted
    /// pool is [`SparseError::Commit`] with nothing committed. An empty region writes and commits
    /// nothing. A failure after the commit (the binds' or the staging's memory, a lost device)
    /// leaves the committed tiles resident, as a [`SparseImage::commit_region`] would.
    pub fn write_region(
        &mut self,
        pool: &SparseTilePool,
        uploader: &crate::sync::upload::Uploader,
        layer: u32,
        mip: u32,
        region: TexelRegion,
        data: &[u8],
    ) -> Result<(), SparseError> {
        {
            let target = crate::sync::upload::ImageRegion::new(&*self, mip, region.offset, region.extent)
                .with_layer(layer);
            uploader.check_image_write(&target, data.len() as u64)?;
        }
        if region.is_empty() {
            return Ok(());
        }
        self.commit_region(pool, layer, mip, region)?;
        if self.has_pending_binds() {
            pool.flush_binds(&mut [&mut *self])?;
        }
        let target = crate::sync::upload::ImageRegion::new(&*self, mip, region.offset, region.extent)
            .with_layer(layer);
        uploader.write_image(&target, data)?;
        Ok(())
    }

    /// Reads back the texels of `region` of (`layer`, `mip`), tightly packed. Non-resident texels read
    /// as whatever the device returns for unbound memory (zero with residencyNonResidentStrict;
    /// undefined elsewhere — never rely on it).
    ///
    /// The region is checked by the same validation as an upload into the image
    /// ([`Uploader::write_image`](crate::Uploader::write_image)), with checked arithmetic: a mip or
    /// layer the image lacks, or a box whose `offset + extent` passes the mip's edge (or
    /// overflows `u32`), is [`UploadError::RegionOutsideImage`](crate::UploadError::RegionOutsideImage),
    /// a block-compressed box that does not start on a block (or end on one or at the edge) is
    /// [`UploadError::RegionMisaligned`](crate::UploadError::RegionMisaligned) (both in
    /// [`SparseError::Upload`]), and an empty box is [`SparseError::EmptyRegion`]. A region of more
    /// than `limit` bytes is refused with the number of bytes it would read
    /// ([`SparseError::ReadbackTooLarge`]). Nothing is submitted when a check fails.
    pub fn read_region(
        &self,
        layer: u32,
        mip: u32,
        region: TexelRegion,
        limit: u64,
    ) -> Result<Vec<u8>, SparseError> {
        let texels =
            crate::sync::upload::ImageRegion::new(self, mip, region.offset, region.extent).with_layer(layer);
        texels.check()?;
        if region.is_empty() {
            return Err(SparseError::EmptyRegion { name: self.name.clone(), extent: region.extent });
        }
        let bytes = texels.bytes();
        if bytes > limit {
            return Err(SparseError::ReadbackTooLarge { bytes, limit });
        }
        let copy = texels.buffer_image_copy(0);
        let device = self.device();
        let bytes = device.copy_to_host(&self.name, bytes, |rec, staging| {
            // SAFETY: `rec` is recording on this device; the image and the buffer are live, the
            // region lies in the image (a mip and layer it has, `offset + extent` inside the mip
            // without overflow, block-aligned: `ImageRegion::check` above) and is not empty, and
            // the staging buffer holds exactly its bytes. A sparse image is in GENERAL for life (transitioned at creation,
            // and no helper or barrier residency records changes it: the tracker tracks `Image`s
            // only, and uploads and bindings of a sparse image require GENERAL).
            unsafe {
                device.raw().cmd_copy_image_to_buffer(
                    rec.raw(),
                    self.raw,
                    vk::ImageLayout::GENERAL,
                    staging,
                    &[copy],
                )
            };
        })?;
        Ok(bytes)
    }
}

impl crate::sync::upload::Sealed for SparseImage {
    fn target(&self) -> crate::sync::upload::TargetInfo<'_> {
        crate::sync::upload::TargetInfo {
            raw: self.raw,
            name: &self.name,
            format: self.desc.format,
            extent: [self.desc.width, self.desc.height, self.desc.depth],
            mip_levels: self.desc.mip_levels,
            array_layers: self.desc.array_layers,
            samples: 1,
            copy_dst: true,
            life: &self.life,
            layouts: None,
        }
    }
}

impl crate::sync::upload::ImageTarget for SparseImage {}

/// A sparse image being created: on an error path its objects retire through the device's queue
/// (after the work submitted so far: the layout transition may have been submitted before a wait
/// failed), not at once.
pub(super) struct Unfinished<'a> {
    device: &'a Device,
    garbage: Option<SparseImageGarbage>,
}

impl<'a> Unfinished<'a> {
    /// Takes `raw`, a sparse image just made on `device`: tracked in the ledger and named `name`,
    /// with a key of its own; retired (after any work submitted) unless handed on.
    pub(super) fn new(device: &'a Device, raw: vk::Image, name: &str) -> Unfinished<'a> {
        let guard = Unfinished {
            device,
            garbage: Some(SparseImageGarbage {
                raw,
                view: vk::ImageView::null(),
                id: device.ledger().track("sparse image", name),
                key: NEXT_SPARSE_IMAGE.fetch_add(1, Ordering::Relaxed),
                heaps: Weak::new(),
                tiles: None,
            }),
        };
        device.set_name(raw, name);
        guard
    }
}

impl Drop for Unfinished<'_> {
    fn drop(&mut self) {
        if let Some(garbage) = self.garbage.take() {
            self.device.retire(Garbage::Custom(Box::new(garbage)), LastUses::none());
        }
    }
}

/// The type of a sparse image's whole-image view.
fn view_type(desc: &SparseImageDesc) -> vk::ImageViewType {
    match (desc.dimension, desc.array_layers) {
        (SparseDimension::D3, _) => vk::ImageViewType::TYPE_3D,
        (SparseDimension::D2, 1) => vk::ImageViewType::TYPE_2D,
        (SparseDimension::D2, _) => vk::ImageViewType::TYPE_2D_ARRAY,
    }
}

/// What a compaction's carrier image shares with the images whose tiles it carries: the
/// conditions under which aliased sparse memory reads the same through both (same format,
/// image type, usage and sparse block extent; a compute copy's storage carriers a compatible
/// format and the same block extent: `sparse/compact_compute.rs`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct CarrierClass {
    pub(super) format: vk::Format,
    pub(super) image_type: vk::ImageType,
    pub(super) usage: vk::ImageUsageFlags,
    pub(super) aspect: vk::ImageAspectFlags,
    /// The sparse block (tile) extent in texels.
    pub(super) tile: [u32; 3],
    /// The format's texel block extent (4 × 4 for block-compressed formats, else 1 × 1).
    pub(super) texel_block: [u32; 2],
    /// Creation flags beyond the sparse ones (a compute copy's block-compressed carriers:
    /// `sparse/compact_compute.rs`).
    pub(super) flags: vk::ImageCreateFlags,
}

impl CarrierClass {
    /// The class of `image`'s tiles.
    pub(super) fn of(image: &SparseImage) -> CarrierClass {
        let shape = image.layout().tile_shape();
        CarrierClass {
            format: vk_format(image.desc.format),
            image_type: match image.desc.dimension {
                SparseDimension::D2 => vk::ImageType::TYPE_2D,
                SparseDimension::D3 => vk::ImageType::TYPE_3D,
            },
            usage: image.usage,
            aspect: aspect(image.desc.format),
            tile: [shape.width, shape.height, shape.depth],
            texel_block: {
                let (w, h) = image.desc.format.block_extent();
                [w, h]
            },
            flags: vk::ImageCreateFlags::empty(),
        }
    }
}

/// Whether a reported sparse granularity `g` is the block (tile) extent `tile`, in texels — or,
/// for a compressed format (`texel_block` over 1 × 1), in compressed blocks, as some drivers
/// (lavapipe) report it (`device/profile_capture.rs` reads it the same way).
pub(super) fn granularity_is(g: vk::Extent3D, tile: [u32; 3], texel_block: [u32; 2]) -> bool {
    let texels = [g.width, g.height, g.depth] == tile;
    let blocks =
        texel_block != [1, 1] && [g.width * texel_block[0], g.height * texel_block[1], g.depth] == tile;
    texels || blocks
}

/// A carrier image of a compaction pass: a sparse, `SPARSE_ALIASED` image of one mip and layer in
/// a [`CarrierClass`], `tiles` (x, y) blocks large, whose blocks the pass binds to the moved
/// tiles' old and new memory to copy them heap to heap. Dropping it retires it after the work
/// submitted so far (its binds are released with it).
pub(super) struct Carrier<'a> {
    pub(super) raw: vk::Image,
    _guard: Unfinished<'a>,
}

/// Creates a carrier of `class`, `tiles` (x, y) blocks large, for heaps of `memory_type` and
/// `tile_bytes` blocks. `Ok(None)`: the device cannot make one that aliases the class's tiles
/// (no `sparseResidencyAliased`, an unsupported format or extent, a virtual size over
/// `sparseAddressSpaceSize`, another block extent or size, a memory type the heaps are not of,
/// metadata or a mip tail to bind); the caller copies through staging instead. An error: creation failed (out of memory, a fault), nothing left behind.
pub(super) fn create_carrier<'a>(
    device: &'a Device,
    name: &str,
    class: CarrierClass,
    tiles: [u32; 2],
    memory_type: u32,
    tile_bytes: u64,
) -> Result<Option<Carrier<'a>>, SparseError> {
    if !device.features().sparse_residency_aliased {
        return Ok(None);
    }
    let extent = vk::Extent3D {
        width: tiles[0] * class.tile[0],
        height: tiles[1] * class.tile[1],
        depth: class.tile[2],
    };
    let flags = vk::ImageCreateFlags::SPARSE_BINDING
        | vk::ImageCreateFlags::SPARSE_RESIDENCY
        | vk::ImageCreateFlags::SPARSE_ALIASED
        | class.flags;
    let create = vk::ImageCreateInfo::default()
        .flags(flags)
        .image_type(class.image_type)
        .format(class.format)
        .extent(extent)
        .mip_levels(1)
        .array_layers(1)
        .samples(vk::SampleCountFlags::TYPE_1)
        .tiling(vk::ImageTiling::OPTIMAL)
        .usage(class.usage | vk::ImageUsageFlags::TRANSFER_SRC | vk::ImageUsageFlags::TRANSFER_DST)
        .sharing_mode(vk::SharingMode::EXCLUSIVE)
        .initial_layout(vk::ImageLayout::UNDEFINED);
    // SAFETY: a pure query on this device's physical device.
    let supported = unsafe {
        device.instance().get_physical_device_image_format_properties(
            device.physical(),
            create.format,
            create.image_type,
            create.tiling,
            create.usage,
            create.flags,
        )
    };
    let fits = supported.is_ok_and(|p| {
        extent.width <= p.max_extent.width
            && extent.height <= p.max_extent.height
            && extent.depth <= p.max_extent.depth
    });
    // Its virtual size against sparseAddressSpaceSize, as every sparse image's.
    let virtual_bytes = u64::from(tiles[0]) * u64::from(tiles[1]) * tile_bytes;
    if !fits || virtual_bytes > device.limits().sparse_address_space_size {
        return Ok(None);
    }
    let raw = device
        .ledger()
        .guard(FaultSite::CreateResource, || {
            // SAFETY: the flags' features are enabled (sparse residency of the class's image type,
            // as its images have it, and sparseResidencyAliased) and the format properties allow
            // the extent.
            unsafe { device.raw().create_image(&create, None) }
        })
        .during("vkCreateImage")?;
    let guard = Unfinished::new(device, raw, name);
    // SAFETY: raw is a sparse image of this device.
    let requirements = unsafe { device.raw().get_image_memory_requirements(raw) };
    // SAFETY: raw is a sparse image of this device.
    let sparse_reqs = unsafe { device.raw().get_image_sparse_memory_requirements(raw) };
    let suits = requirements.alignment == tile_bytes
        && requirements.memory_type_bits & (1 << memory_type) != 0
        && sparse_reqs.iter().all(|r| {
            !r.format_properties.aspect_mask.contains(vk::ImageAspectFlags::METADATA)
                && r.image_mip_tail_first_lod >= 1
        })
        && sparse_reqs.iter().any(|r| {
            r.format_properties.aspect_mask.intersects(class.aspect)
                && granularity_is(r.format_properties.image_granularity, class.tile, class.texel_block)
        });
    if !suits {
        return Ok(None);
    }
    Ok(Some(Carrier { raw, _guard: guard }))
}
