//! Multi-device resources: one object standing for the same resource on every device of a mask.
//!
//! A multi-device object keeps its per-device instances keyed by device index ([`PerDevice`]) and
//! fans each call out to the devices of its mask (or a sub-mask the caller gives). A fan-out that
//! fails on one device drops what it made on the others (every resource releases itself on drop),
//! so a failed call changes nothing. Calls that change existing instances (releases, binds,
//! uploads) check everything on every device before they change anything on any (see each call
//! for what a Vulkan failure part-way leaves). Every multi-device type implements
//! [`MultiDevice`], whose provided methods are the mask, the per-device accessors and iteration.
//!
//! Masks: bits for devices that do not exist are ignored. A constructor's mask selects among the
//! set's open devices ([`DeviceMask::ALL`]: every device there is). A call on an existing object
//! takes a mask within the object's own mask ([`resolve_mask`]): [`DeviceMask::ALL`] means the
//! object's mask, a mask naming an open device the object is not on is
//! [`MultiDeviceError::MaskNotSubset`], and one naming no open device is
//! [`MultiDeviceError::EmptyMask`].
//! With one device everything reduces to a single instance: no extra allocation beyond a one-entry
//! vector.

pub mod accel;
mod barriers;
pub mod bindless;
mod copy;
mod image_pool;
mod image_upload;
pub mod indirect;
pub mod map;
pub mod queries;
pub mod streaming;
pub mod work;

pub use image_pool::{DeviceImagePool, ImagePoolError, ImagePoolStats, MultiImagePool, MultiImagePoolDesc};

use crate::device::blocks::MemoryError;
use crate::device::set::DeviceSet;
use crate::device::Device;
use crate::error::{ErrorClass, ResidencyError};
use crate::error::{ForeignReason, ForeignResource};
use crate::poison::PoisonFree;
use crate::pools::buffer_pool::{BufferInit, BufferPool, BufferPoolDesc, PoolStats};
use crate::resources::buffer::Buffer;
use crate::resources::image::ImageView;
use crate::sync::upload::{UploadError, Uploader};
use residency_core::device_mask::{DeviceIndex, DeviceMask};
use std::sync::Arc;

/// One value per device, ordered by device index.
#[derive(Debug)]
pub struct PerDevice<T> {
    entries: Vec<(DeviceIndex, T)>,
}

impl<T> Default for PerDevice<T> {
    fn default() -> Self {
        PerDevice { entries: Vec::new() }
    }
}

impl<T> PerDevice<T> {
    /// The value of device `index`.
    pub fn get(&self, index: DeviceIndex) -> Option<&T> {
        self.entries.iter().find(|(i, _)| *i == index).map(|(_, v)| v)
    }

    /// The value of device `index`, mutably.
    pub fn get_mut(&mut self, index: DeviceIndex) -> Option<&mut T> {
        self.entries.iter_mut().find(|(i, _)| *i == index).map(|(_, v)| v)
    }

    /// The devices that have a value.
    pub fn mask(&self) -> DeviceMask {
        self.entries.iter().map(|(i, _)| *i).collect()
    }

    /// Every (device, value), lowest device first.
    pub fn iter(&self) -> impl Iterator<Item = (DeviceIndex, &T)> {
        self.entries.iter().map(|(i, v)| (*i, v))
    }

    /// How many devices have a value.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether no device has a value.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Every (device, value), lowest device first, mutably.
    pub fn iter_mut(&mut self) -> impl Iterator<Item = (DeviceIndex, &mut T)> {
        self.entries.iter_mut().map(|(i, v)| (*i, v))
    }

    fn insert(&mut self, index: DeviceIndex, value: T) {
        let at = self.entries.partition_point(|(i, _)| *i < index);
        self.entries.insert(at, (index, value));
    }

    fn remove(&mut self, index: DeviceIndex) -> Option<T> {
        let at = self.entries.iter().position(|(i, _)| *i == index)?;
        Some(self.entries.remove(at).1)
    }

    /// Consumes the map into its values.
    pub fn into_values(self) -> impl Iterator<Item = (DeviceIndex, T)> {
        self.entries.into_iter()
    }
}

/// An object standing for one resource on every device of a mask: its per-device instances and
/// what every multi-device type answers from them (the mask, one device's instance, iteration).
///
/// Implemented by every multi-device type; only [`MultiDevice::instances`] is implemented, the
/// rest are provided.
pub trait MultiDevice {
    /// What it holds on each device.
    type Instance;

    /// Every instance, lowest device first.
    fn instances(&self) -> &PerDevice<Self::Instance>;

    /// The devices it exists on.
    fn mask(&self) -> DeviceMask {
        self.instances().mask()
    }

    /// Its instance on device `index`.
    fn instance(&self, index: DeviceIndex) -> Option<&Self::Instance> {
        self.instances().get(index)
    }

    /// Every (device, instance), lowest device first.
    fn iter(&self) -> impl Iterator<Item = (DeviceIndex, &Self::Instance)> {
        self.instances().iter()
    }
}

/// A [`MultiDevice`] pool: its instance on a device is called that device's pool.
pub trait MultiPool: MultiDevice {
    /// The pool of device `index` (its [`MultiDevice::instance`]).
    fn pool(&self, index: DeviceIndex) -> Option<&Self::Instance> {
        self.instance(index)
    }
}

/// A multi-device call failed on one device; what it did on the others was undone.
#[derive(Debug, thiserror::Error)]
pub enum MultiDeviceError<E: std::error::Error + 'static> {
    /// The call failed on `device`.
    #[error("{device}: {source}")]
    Failed {
        /// The device it failed on.
        device: DeviceIndex,
        /// Why.
        #[source]
        source: E,
    },
    /// A requested mask names devices outside the object's own mask.
    #[error("mask {requested:?} is not within {allowed:?}")]
    MaskNotSubset {
        /// The mask asked for.
        requested: DeviceMask,
        /// The mask allowed.
        allowed: DeviceMask,
    },
    /// The mask names no device that exists.
    #[error("mask {0:?} names no open device")]
    EmptyMask(DeviceMask),
}

impl<E: ResidencyError + 'static> ResidencyError for MultiDeviceError<E> {
    fn class(&self) -> ErrorClass {
        match self {
            MultiDeviceError::Failed { source, .. } => source.class(),
            MultiDeviceError::MaskNotSubset { .. } | MultiDeviceError::EmptyMask(_) => ErrorClass::Refused,
        }
    }
}

impl<E: std::error::Error + 'static> MultiDeviceError<E> {
    /// Converts the per-device error into another type.
    pub fn map_source<F: std::error::Error + 'static>(self, f: impl FnOnce(E) -> F) -> MultiDeviceError<F> {
        match self {
            MultiDeviceError::Failed { device, source } => {
                MultiDeviceError::Failed { device, source: f(source) }
            }
            MultiDeviceError::MaskNotSubset { requested, allowed } => {
                MultiDeviceError::MaskNotSubset { requested, allowed }
            }
            MultiDeviceError::EmptyMask(mask) => MultiDeviceError::EmptyMask(mask),
        }
    }
}

/// Runs `create` on every device of `devices`; if one fails, drops each value already made
/// (newest first: every resource releases itself on drop, behind the GPU) and returns the failure
/// with its device.
pub fn fan_out<T, E: std::error::Error + 'static>(
    devices: &[&Arc<Device>],
    mut create: impl FnMut(&Arc<Device>) -> Result<T, E>,
) -> Result<PerDevice<T>, MultiDeviceError<E>> {
    let mut made: Vec<(DeviceIndex, T)> = Vec::with_capacity(devices.len());
    for &device in devices {
        match create(device) {
            Ok(value) => made.push((device.index(), value)),
            Err(source) => {
                while let Some(newest) = made.pop() {
                    drop(newest);
                }
                return Err(MultiDeviceError::Failed { device: device.index(), source });
            }
        }
    }
    let mut out = PerDevice::default();
    for (index, value) in made {
        out.insert(index, value);
    }
    Ok(out)
}

/// The number of device indices of `set` (mask bits from it on are ignored).
pub(crate) fn device_count(set: &DeviceSet) -> u32 {
    set.devices().iter().map(|d| d.index().get() + 1).max().unwrap_or(0)
}

/// What `mask`, given to a call on an object on the devices `object` of a set of `device_count`
/// device indices, names: [`DeviceMask::ALL`] is `object` itself; any other mask names its bits
/// of devices that exist, which must all be in `object` ([`MultiDeviceError::MaskNotSubset`])
/// and not be none ([`MultiDeviceError::EmptyMask`]). Every multi-device call that takes a mask
/// for an existing object resolves it here.
pub fn resolve_mask<E: std::error::Error + 'static>(
    mask: DeviceMask,
    object: DeviceMask,
    device_count: u32,
) -> Result<DeviceMask, MultiDeviceError<E>> {
    let requested = if mask == DeviceMask::ALL { object } else { mask.restricted_to(device_count) };
    if !object.is_superset_of(requested) {
        return Err(MultiDeviceError::MaskNotSubset { requested: mask, allowed: object });
    }
    if requested.is_empty() {
        return Err(MultiDeviceError::EmptyMask(mask));
    }
    Ok(requested)
}

/// The open devices of `set` in `mask`.
fn devices_in(set: &DeviceSet, mask: DeviceMask) -> Vec<&Arc<Device>> {
    set.devices().iter().filter(|d| mask.contains(d.index())).collect()
}

/// [`fan_out`] over the open devices of `set` in `mask`; an empty selection is an error.
pub fn fan_out_on<T, E: std::error::Error + 'static>(
    set: &DeviceSet,
    mask: DeviceMask,
    create: impl FnMut(&Arc<Device>) -> Result<T, E>,
) -> Result<PerDevice<T>, MultiDeviceError<E>> {
    let devices = devices_in(set, mask);
    if devices.is_empty() {
        return Err(MultiDeviceError::EmptyMask(mask));
    }
    fan_out(&devices, create)
}

/// A buffer pool on every device of a mask.
#[derive(Debug)]
pub struct MultiBufferPool {
    /// How many devices the set has (mask bits beyond it are ignored).
    device_count: u32,
    pools: PerDevice<BufferPool>,
}

/// A buffer on every device of its mask (a subset of its pool's). Released when dropped: each
/// instance as a [`Buffer`] is, once the GPU work that may use it has completed.
#[derive(Debug)]
pub struct MultiBuffer {
    init: BufferInit,
    instances: PerDevice<Buffer>,
    /// Changes whenever the set of instances changes, so cached per-device forms (descriptor sets
    /// of work items) know to rebuild.
    generation: u64,
}

static NEXT_GENERATION: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

fn next_generation() -> u64 {
    NEXT_GENERATION.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

impl MultiBuffer {
    /// Creates a placed (or, with `desc.committed`, committed) buffer on every open device of `mask`
    /// through each device's general allocator. All or nothing. Released when dropped.
    pub fn create(
        set: &DeviceSet,
        mask: DeviceMask,
        desc: &crate::resources::buffer::BufferDesc,
    ) -> Result<MultiBuffer, MultiDeviceError<MemoryError>> {
        let instances = fan_out_on(set, mask, |d| d.create_buffer(desc))?;
        let init = BufferInit {
            name: desc.name.clone(),
            size: desc.size,
            alignment: desc.alignment,
            usage: Some(desc.usage),
            policy: desc.policy,
        };
        Ok(MultiBuffer { init, instances, generation: next_generation() })
    }

    /// Changes each time the instances change (mask changes); work items compare it to know that a
    /// cached per-device form is stale.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// Its name.
    pub fn name(&self) -> &str {
        &self.init.name
    }

    /// Its size in bytes.
    pub fn size(&self) -> u64 {
        self.init.size
    }
}

/// Where the data of instances created by a mask change comes from.
#[derive(Clone, Copy, Debug)]
pub enum InitialData<'a> {
    /// Leave the new instances' contents undefined.
    Undefined,
    /// Upload these bytes (at offset 0) to each new instance.
    Bytes(&'a [u8]),
}

impl MultiBufferPool {
    /// Creates the pool on every open device of `mask` (rolled back if any device fails).
    pub fn new(
        set: &DeviceSet,
        mask: DeviceMask,
        desc: &BufferPoolDesc,
    ) -> Result<Self, MultiDeviceError<MemoryError>> {
        let pools = fan_out_on(set, mask, |d| BufferPool::new(Arc::clone(d), desc.clone()))?;
        Ok(MultiBufferPool { device_count: device_count(set), pools })
    }

    /// `mask` resolved against the pool's mask ([`resolve_mask`]: [`DeviceMask::ALL`] is the
    /// pool's mask).
    fn check_mask<E: std::error::Error + 'static>(
        &self,
        mask: DeviceMask,
    ) -> Result<DeviceMask, MultiDeviceError<E>> {
        resolve_mask(mask, self.mask(), self.device_count)
    }

    fn pools_in(&self, mask: DeviceMask) -> Vec<(DeviceIndex, &BufferPool)> {
        self.pools.iter().filter(|(i, _)| mask.contains(*i)).collect()
    }

    fn create_on(
        &self,
        init: &BufferInit,
        mask: DeviceMask,
    ) -> Result<PerDevice<Buffer>, MultiDeviceError<MemoryError>> {
        let pools = self.pools_in(mask);
        let devices: Vec<&Arc<Device>> = pools.iter().map(|(_, p)| p.device()).collect();
        fan_out(&devices, |device| self.pools.get(device.index()).expect("pool exists").init_buffer(init))
    }

    /// Creates a buffer on every device of `mask` (which must be within the pool's mask;
    /// [`DeviceMask::ALL`] means the pool's). All or nothing.
    pub fn init_buffer(
        &self,
        init: &BufferInit,
        mask: DeviceMask,
    ) -> Result<MultiBuffer, MultiDeviceError<MemoryError>> {
        let mask = self.check_mask(mask)?;
        let instances = self.create_on(init, mask)?;
        Ok(MultiBuffer { init: init.clone(), instances, generation: next_generation() })
    }

    /// Changes the devices a buffer exists on (`mask` within the pool's; [`DeviceMask::ALL`]: the
    /// pool's): instances are created on added devices (with
    /// `initial` data, uploaded through `uploader` and waited for) and freed on removed ones. All or
    /// nothing: on failure the buffer is as it was (the new instances are dropped). Removed
    /// instances are dropped, so they are released once the GPU work that may use them completes.
    pub fn set_buffer_mask(
        &self,
        buffer: &mut MultiBuffer,
        mask: DeviceMask,
        initial: InitialData<'_>,
        uploader: &MultiUploader,
    ) -> Result<(), MultiDeviceError<UploadError>> {
        let mask = self.check_mask(mask)?;
        let current = buffer.mask();
        let added = self
            .create_on(&buffer.init, mask.difference(current))
            .map_err(|e| e.map_source(UploadError::from))?;
        if let InitialData::Bytes(bytes) = initial {
            let upload = |(index, b): (DeviceIndex, &Buffer)| -> Result<(), MultiDeviceError<UploadError>> {
                let failed = |source| MultiDeviceError::Failed { device: index, source };
                let uploader = uploader.instance(index).ok_or(MultiDeviceError::MaskNotSubset {
                    requested: index.mask(),
                    allowed: uploader.mask(),
                })?;
                uploader.write_buffer(b, 0, bytes).map_err(failed)?;
                uploader.wait_idle().map_err(failed)
            };
            // On failure `added` is dropped: the new instances go, the buffer is unchanged.
            added.iter().try_for_each(upload)?;
        }
        for (index, b) in added.into_values() {
            buffer.instances.insert(index, b);
        }
        if mask != current {
            buffer.generation = next_generation();
        }
        for index in current.difference(mask).iter() {
            drop(buffer.instances.remove(index));
        }
        Ok(())
    }

    /// Releases a buffer of this pool on every device it exists on (as dropping it does). A buffer
    /// with an instance that is not of this pool's pool on that device — another pool's, the
    /// general allocator's, or on a device the pool is not on — is refused and handed back
    /// unchanged, with the reason of its first such instance.
    pub fn free_buffer(&self, buffer: MultiBuffer) -> Result<(), ForeignResource<MultiBuffer>> {
        let foreign = buffer.instances.iter().find_map(|(index, b)| match self.pools.get(index) {
            Some(pool) => pool.foreign_reason(b),
            None => Some(ForeignReason::OutsideMask { device: index, mask: self.mask() }),
        });
        match foreign {
            None => {
                drop(buffer);
                Ok(())
            }
            Some(reason) => {
                Err(ForeignResource { name: buffer.name().to_owned(), resource: Box::new(buffer), reason })
            }
        }
    }

    /// Statistics per device.
    pub fn stats(&self) -> Vec<(DeviceIndex, PoolStats)> {
        self.pools.iter().map(|(i, p)| (i, p.stats())).collect()
    }

    /// Statistics summed over devices.
    pub fn total_stats(&self) -> PoolStats {
        self.pools.iter().map(|(_, p)| p.stats()).fold(PoolStats::default(), |a, s| PoolStats {
            pages: a.pages + s.pages,
            page_bytes: a.page_bytes + s.page_bytes,
            used_bytes: a.used_bytes + s.used_bytes,
            buffers: a.buffers + s.buffers,
        })
    }
}

/// A staging uploader per device, for broadcast uploads.
#[derive(Debug)]
pub struct MultiUploader {
    uploaders: PerDevice<Uploader>,
}

impl MultiUploader {
    /// An uploader with a `capacity`-byte staging ring on each open device of `mask`.
    pub fn new(
        set: &DeviceSet,
        mask: DeviceMask,
        capacity: u64,
    ) -> Result<Self, MultiDeviceError<UploadError>> {
        let uploaders = fan_out_on(set, mask, |d| Uploader::new(d, "broadcast", capacity))?;
        Ok(MultiUploader { uploaders })
    }

    /// Uploads `data` to every instance of `buffer` at `offset`, from one source, the devices in
    /// parallel (one thread per device copies into its staging ring and submits).
    ///
    /// Everything that can be refused is checked on every device before anything is staged on
    /// any: an instance on a device the uploader is not on ([`MultiDeviceError::MaskNotSubset`]),
    /// a range outside the buffer ([`UploadError::OutOfBounds`]), a buffer without `COPY_DST`
    /// usage ([`UploadError::NotCopyDestination`]); such a call changes nothing anywhere. A
    /// Vulkan failure part-way (a submit or a wait for ring space, e.g. a lost device) cannot be
    /// undone on the devices whose copies were already submitted (a submitted copy cannot be
    /// withdrawn, and the old bytes are not kept): the error names the failing device, whose
    /// copies stay queued in its uploader (unless the device is lost) and land with its next
    /// flush, so [`MultiUploader::wait_idle`] or a second broadcast completes the upload. On a
    /// thread that holds a queue lock of one of the devices ([`Queue::lock`](crate::Queue::lock))
    /// it is refused with [`VulkanError::Reentrant`](crate::VulkanError::Reentrant) before
    /// anything is staged (its per-device threads would wait for that lock forever).
    pub fn broadcast(
        &self,
        buffer: &MultiBuffer,
        offset: u64,
        data: &[u8],
    ) -> Result<(), MultiDeviceError<UploadError>> {
        let mut targets = Vec::with_capacity(buffer.instances.len());
        for (index, instance) in buffer.instances.iter() {
            let failed = |source| MultiDeviceError::Failed { device: index, source };
            let uploader = self
                .uploaders
                .get(index)
                .ok_or(MultiDeviceError::MaskNotSubset { requested: buffer.mask(), allowed: self.mask() })?;
            // The checks of `Uploader::write_buffer`, on every device before anything is staged.
            uploader.check_buffer_write(instance, offset, data.len() as u64).map_err(failed)?;
            refuse_held_queue(uploader).map_err(failed)?;
            targets.push((index, instance, uploader));
        }
        let results: Vec<(DeviceIndex, Result<(), UploadError>)> = std::thread::scope(|scope| {
            let handles: Vec<_> = targets
                .into_iter()
                .map(|(index, instance, uploader)| {
                    scope.spawn(move || {
                        let result =
                            uploader.write_buffer(instance, offset, data).and_then(|()| uploader.flush());
                        (index, result)
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().expect("upload threads do not panic")).collect()
        });
        for (device, result) in results {
            result.map_err(|source| MultiDeviceError::Failed { device, source })?;
        }
        Ok(())
    }

    /// Waits until every upload on every device has landed.
    pub fn wait_idle(&self) -> Result<(), MultiDeviceError<UploadError>> {
        for (index, uploader) in self.uploaders.iter() {
            uploader.wait_idle().map_err(|source| MultiDeviceError::Failed { device: index, source })?;
        }
        Ok(())
    }

    /// Waits for all uploads and destroys the uploaders.
    pub fn destroy(self) -> Result<(), MultiDeviceError<UploadError>> {
        let mut first_error = None;
        for (index, uploader) in self.uploaders.into_values() {
            if let Err(source) = uploader.destroy() {
                first_error.get_or_insert(MultiDeviceError::Failed { device: index, source });
            }
        }
        first_error.map_or(Ok(()), Err)
    }
}

/// A sparse tile pool on every device of a mask: each device has its own physical tiles. Released
/// when dropped (each device's pool as a [`SparseTilePool`](crate::sparse::SparseTilePool) is).
#[derive(Debug)]
pub struct MultiTilePool {
    /// How many device indices the set has (mask bits beyond it are ignored).
    device_count: u32,
    pools: PerDevice<crate::sparse::SparseTilePool>,
}

/// A partially resident image on every device of a mask, each with its own page table; commits and
/// releases go to every device of the image or to a sub-mask. Released when dropped: each instance
/// as a [`SparseImage`](crate::sparse::SparseImage) is (its tiles back to its device's pool once
/// the GPU is done with it; it keeps that pool's state alive, so the pools may go first).
#[derive(Debug)]
pub struct MultiSparseImage {
    /// How many device indices the set has (mask bits beyond it are ignored).
    device_count: u32,
    images: PerDevice<crate::sparse::SparseImage>,
}

type SparseResult<T> = Result<T, MultiDeviceError<crate::sparse::SparseError>>;

impl MultiTilePool {
    /// Creates a tile pool on every open device of `mask`.
    pub fn new(
        set: &DeviceSet,
        mask: DeviceMask,
        desc: &residency_core::tiles::TilePoolDesc,
    ) -> Result<Self, MultiDeviceError<crate::sparse::SparseError>> {
        let pools =
            fan_out_on(set, mask, |d| crate::sparse::SparseTilePool::new(Arc::clone(d), desc.clone()))?;
        Ok(MultiTilePool { device_count: device_count(set), pools })
    }

    /// Tiles in use per device.
    pub fn used_tiles(&self) -> Vec<(DeviceIndex, u64)> {
        self.pools.iter().map(|(i, p)| (i, p.used_tiles())).collect()
    }
}

/// Refuses a broadcast on a thread that holds a queue lock of `uploader`'s device: the broadcast
/// submits from a thread of its own per device and waits for it, which would wait forever for
/// that lock (on one thread, the submission itself answers `Reentrant`).
fn refuse_held_queue(uploader: &Uploader) -> Result<(), UploadError> {
    if uploader.device().queue_locked_here() {
        return Err(crate::error::VulkanError::Reentrant {
            what: "a queue of the device is locked by this thread, and the broadcast submits on it \
                   from a thread of its own (a broadcast while holding `Queue::lock` or inside \
                   `submit_checked`)",
        }
        .into());
    }
    Ok(())
}

impl MultiSparseImage {
    /// Creates the image on every device of `mask` (within the pools' mask; [`DeviceMask::ALL`]:
    /// every device of the pools). All or nothing.
    pub fn new(
        pools: &MultiTilePool,
        mask: DeviceMask,
        name: &str,
        desc: &residency_core::tiles::SparseImageDesc,
    ) -> Result<Self, MultiDeviceError<crate::sparse::SparseError>> {
        let mask = resolve_mask(mask, pools.mask(), pools.device_count)?;
        let devices: Vec<&Arc<Device>> =
            pools.pools.iter().filter(|(i, _)| mask.contains(*i)).map(|(_, p)| p.device()).collect();
        let images = fan_out(&devices, |d| {
            crate::sparse::SparseImage::new(
                pools.pools.get(d.index()).expect("pool exists"),
                name,
                desc,
                false,
            )
        })?;
        Ok(MultiSparseImage { device_count: pools.device_count, images })
    }

    /// The devices of `mask` (resolved against the image's mask: [`resolve_mask`]), each with
    /// its pool in `pools`, checked to be the pool its image takes tiles from. Changes nothing.
    fn targets<'p>(
        &self,
        pools: &'p MultiTilePool,
        mask: DeviceMask,
    ) -> SparseResult<Vec<(DeviceIndex, &'p crate::sparse::SparseTilePool)>> {
        let mask = resolve_mask(mask, self.mask(), self.device_count)?;
        let mut out = Vec::with_capacity(mask.count() as usize);
        for index in mask.iter() {
            let pool = pools
                .pools
                .get(index)
                .ok_or(MultiDeviceError::MaskNotSubset { requested: self.mask(), allowed: pools.mask() })?;
            let image = self.images.get(index).expect("index from the image's mask");
            let owner = image.residency().pool();
            if pool.id() != owner {
                let source = residency_core::tiles::CommitError::WrongPool {
                    pool: format!("the tile pool of {index}"),
                    given: pool.id(),
                    owner,
                };
                return Err(MultiDeviceError::Failed { device: index, source: source.into() });
            }
            out.push((index, pool));
        }
        Ok(out)
    }

    /// Checks (`layer`, `mip`, `region`) against every target's image. Changes nothing.
    fn check_region(
        &self,
        targets: &[(DeviceIndex, &crate::sparse::SparseTilePool)],
        layer: u32,
        mip: u32,
        region: residency_core::tiles::TexelRegion,
    ) -> SparseResult<()> {
        for &(index, _) in targets {
            let image = self.images.get(index).expect("a target of the image");
            image
                .residency()
                .check_region(layer, mip, region)
                .map_err(|e| MultiDeviceError::Failed { device: index, source: e.into() })?;
        }
        Ok(())
    }

    /// Commits a region on every device of `mask` (within the image's; [`DeviceMask::ALL`]: the
    /// image's). The pools and the region are checked on every device first; a commit that fails
    /// part-way (the pool of a device is out of tiles) releases the commits already made on the
    /// other devices again (they were never flushed: a commit and a release before a flush cancel
    /// out). All or nothing.
    pub fn commit_region(
        &mut self,
        pools: &MultiTilePool,
        mask: DeviceMask,
        layer: u32,
        mip: u32,
        region: residency_core::tiles::TexelRegion,
    ) -> Result<(), MultiDeviceError<crate::sparse::SparseError>> {
        let targets = self.targets(pools, mask)?;
        self.check_region(&targets, layer, mip, region)?;
        let mut done: Vec<(DeviceIndex, Vec<residency_core::tiles::TileIndex>, Vec<u32>)> = Vec::new();
        for &(index, pool) in &targets {
            let image = self.images.get_mut(index).expect("index from the image's mask");
            let (tiles_before, tails_before) = resident(image);
            if let Err(source) = image.commit_region(pool, layer, mip, region) {
                for (i, tiles, tails) in done {
                    let pool = pools.pools.get(i).expect("a target");
                    let image = self.images.get_mut(i).expect("committed before");
                    let _ = image.release_tiles(pool, &tiles);
                    for tail in tails {
                        let _ = crate::sparse::backend::ResidencyBackend::release_tail(image, pool, tail);
                    }
                }
                return Err(MultiDeviceError::Failed { device: index, source });
            }
            let (tiles_after, tails_after) = resident(image);
            done.push((
                index,
                tiles_after.into_iter().filter(|t| !tiles_before.contains(t)).collect(),
                tails_after.into_iter().filter(|t| !tails_before.contains(t)).collect(),
            ));
        }
        Ok(())
    }

    /// Releases a region on every device of `mask` (within the image's; [`DeviceMask::ALL`]: the
    /// image's). GPU work reading the tiles must have completed. The pools and the region are
    /// checked on every device before any tile is released; a refused call changes nothing.
    pub fn release_region(
        &mut self,
        pools: &MultiTilePool,
        mask: DeviceMask,
        layer: u32,
        mip: u32,
        region: residency_core::tiles::TexelRegion,
    ) -> Result<(), MultiDeviceError<crate::sparse::SparseError>> {
        let targets = self.targets(pools, mask)?;
        self.check_region(&targets, layer, mip, region)?;
        for (index, pool) in targets {
            let image = self.images.get_mut(index).expect("index from the image's mask");
            // Checked above: the pool is the image's and the region lies in it, which is all a
            // release can refuse.
            image
                .release_region(pool, layer, mip, region)
                .map_err(|source| MultiDeviceError::Failed { device: index, source })?;
        }
        Ok(())
    }

    /// Issues every device's queued binds (one `vkQueueBindSparse` per device, lowest device
    /// first). The pools are checked for every device before anything is flushed.
    ///
    /// A flush that fails on one device (a bind, its wait or the memory of a new heap) leaves
    /// every page table as it was before the call: the failing device's pool drops that device's
    /// queued commits (as [`SparseTilePool::flush_binds`](crate::sparse::SparseTilePool::flush_binds)
    /// does), and they are queued again here, so the image is resident where it was and a retry
    /// binds them. The devices flushed before it stay flushed (what they bound is what their page
    /// tables already said); the devices after it keep their queued binds. The error names the
    /// failing device (if queueing again fails too, e.g. another image took the tiles meanwhile,
    /// those commits stay dropped on that device, as on a single device).
    pub fn flush_binds(
        &mut self,
        pools: &MultiTilePool,
    ) -> Result<Vec<(DeviceIndex, crate::sparse::BindStats)>, MultiDeviceError<crate::sparse::SparseError>>
    {
        let targets = self.targets(pools, DeviceMask::ALL)?;
        let mut out = Vec::with_capacity(targets.len());
        for (index, pool) in targets {
            let image = self.images.get_mut(index).expect("index from the image's mask");
            let (tiles_before, tails_before) = resident(image);
            match pool.flush_binds(&mut [&mut *image]) {
                Ok(stats) => out.push((index, stats)),
                Err(source) => {
                    let (tiles_after, tails_after) = resident(image);
                    let dropped: Vec<_> =
                        tiles_before.into_iter().filter(|t| !tiles_after.contains(t)).collect();
                    let _ = image.commit_tiles(pool, &dropped);
                    for tail in tails_before.into_iter().filter(|t| !tails_after.contains(t)) {
                        let _ = image.commit_tail(pool, tail);
                    }
                    return Err(MultiDeviceError::Failed { device: index, source });
                }
            }
        }
        Ok(out)
    }

    /// Uploads the same texels to a region of every instance (one thread per device), through each
    /// device's staging ring; waits until they have landed. Checked on every device before
    /// anything is staged on any: an instance on a device the uploader is not on
    /// ([`MultiDeviceError::MaskNotSubset`]; it used to be skipped silently), a region outside the
    /// image, and data that is not the region's size ([`UploadError::WrongSize`]). A Vulkan
    /// failure part-way leaves what [`MultiUploader::broadcast`] leaves.
    pub fn broadcast_region(
        &self,
        uploader: &MultiUploader,
        mip: u32,
        offset: [u32; 3],
        extent: [u32; 3],
        data: &[u8],
    ) -> Result<(), MultiDeviceError<UploadError>> {
        let mut targets = Vec::with_capacity(self.images.len());
        for (index, image) in self.images.iter() {
            let failed = |source| MultiDeviceError::Failed { device: index, source };
            let target = uploader.uploaders.get(index).ok_or(MultiDeviceError::MaskNotSubset {
                requested: self.mask(),
                allowed: uploader.mask(),
            })?;
            // The checks of `Uploader::write_image`, on every device before anything is staged.
            let region = crate::sync::upload::ImageRegion::new(image, mip, offset, extent);
            target.check_image_write(&region, data.len() as u64).map_err(failed)?;
            refuse_held_queue(target).map_err(failed)?;
            targets.push((index, image, target));
        }
        let results: Vec<(DeviceIndex, Result<(), UploadError>)> = std::thread::scope(|scope| {
            let handles: Vec<_> = targets
                .into_iter()
                .map(|(index, image, uploader)| {
                    scope.spawn(move || {
                        let region = crate::sync::upload::ImageRegion::new(image, mip, offset, extent);
                        let result = uploader.write_image(&region, data).and_then(|()| uploader.wait_idle());
                        (index, result)
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().expect("upload threads do not panic")).collect()
        });
        for (device, result) in results {
            result.map_err(|source| MultiDeviceError::Failed { device, source })?;
        }
        Ok(())
    }
}

/// The resident tiles and tails of `image`'s page table.
fn resident(image: &crate::sparse::SparseImage) -> (Vec<residency_core::tiles::TileIndex>, Vec<u32>) {
    let table = image.residency().page_table();
    let tiles = table.mapped().map(|(t, _)| t).collect();
    let tails = (0..image.layout().mip_tail_count()).filter(|&t| table.is_tail_resident(t)).collect();
    (tiles, tails)
}

/// An image on every device of a mask, with per-device views created on first use and cached.
/// Released when dropped: each instance and cached view as an [`Image`](crate::Image) and an
/// [`ImageView`] are, once the GPU work that may use them has completed (a view handed out keeps
/// its image alive while it lives). An image of a [`MultiImagePool`] tells the pool's devices
/// when it is dropped (see [`MultiImagePool`] for when the budget comes back).
#[derive(Debug)]
pub struct MultiImage {
    images: PerDevice<crate::resources::image::Image>,
    views: std::sync::Mutex<Vec<CachedView>>,
    /// The per-device pools that charged its instances (none for [`MultiImage::create`]'s).
    charged_by: Vec<Arc<image_pool::Charges>>,
}

impl Drop for MultiImage {
    fn drop(&mut self) {
        // Instances and cached views first, so that only the pools hold what nothing else does.
        self.views.value_mut().clear();
        drop(std::mem::take(&mut self.images));
        for pool in &self.charged_by {
            pool.sweep();
        }
    }
}

/// A view of [`MultiImage`]'s cache: its device, its mips and the view.
type CachedView = (DeviceIndex, std::ops::Range<u32>, Arc<ImageView>);

impl MultiImage {
    /// Creates a placed (or committed) image on every open device of `mask`. All or nothing.
    pub fn create(
        set: &DeviceSet,
        mask: DeviceMask,
        desc: &crate::resources::image::ImageDesc,
    ) -> Result<Self, MultiDeviceError<MemoryError>> {
        let images = fan_out_on(set, mask, |d| d.create_image(desc))?;
        Ok(MultiImage { images, views: std::sync::Mutex::new(Vec::new()), charged_by: Vec::new() })
    }

    /// The view of mips `mips` on `device`, created on first use and cached (resource + descriptor:
    /// the same description resolves to each device's own view). Bind it like any [`ImageView`]
    /// (`Binding::sampled(&view, ..)`): a descriptor set holds it, so it outlives the image.
    pub fn view(
        &self,
        set: &DeviceSet,
        index: DeviceIndex,
        mips: std::ops::Range<u32>,
    ) -> Result<Arc<ImageView>, MultiDeviceError<crate::error::VulkanError>> {
        let not_here = || MultiDeviceError::MaskNotSubset { requested: index.mask(), allowed: self.mask() };
        let device = set.device(index).ok_or_else(not_here)?;
        self.view_on(device, mips)
    }

    /// [`MultiImage::view`] on `device` (its index names the instance).
    pub(crate) fn view_on(
        &self,
        device: &Device,
        mips: std::ops::Range<u32>,
    ) -> Result<Arc<ImageView>, MultiDeviceError<crate::error::VulkanError>> {
        let index = device.index();
        let not_here = || MultiDeviceError::MaskNotSubset { requested: index.mask(), allowed: self.mask() };
        let image = self.images.get(index).ok_or_else(not_here)?;
        if !image.device().is(device) {
            return Err(not_here());
        }
        let mut views = self.views.locked();
        if let Some((.., view)) = views.iter().find(|(i, m, _)| *i == index && *m == mips) {
            return Ok(Arc::clone(view));
        }
        let view = image
            .create_view(mips.clone())
            .map_err(|source| MultiDeviceError::Failed { device: index, source })?;
        let view = Arc::new(view);
        views.push((index, mips, Arc::clone(&view)));
        Ok(view)
    }

    /// Views created so far (all devices).
    pub fn cached_views(&self) -> usize {
        self.views.locked().len()
    }
}

/// A transient pool on every device of a mask: each device plans and keeps its own heaps.
#[derive(Debug)]
pub struct MultiTransientPool {
    pools: PerDevice<crate::pools::transient::TransientPool>,
}

impl MultiTransientPool {
    /// A transient pool on every open device of `mask`.
    pub fn new(set: &DeviceSet, mask: DeviceMask, name: &str) -> Result<Self, MultiDeviceError<MemoryError>> {
        let pools =
            fan_out_on(set, mask, |d| crate::pools::transient::TransientPool::new(Arc::clone(d), name))?;
        Ok(MultiTransientPool { pools })
    }

    /// The pool of device `index` (frames are planned and recorded per device).
    pub fn pool_mut(&mut self, index: DeviceIndex) -> Option<&mut crate::pools::transient::TransientPool> {
        self.pools.get_mut(index)
    }

    /// Heap bytes per device.
    pub fn heap_bytes(&self) -> Vec<(DeviceIndex, u64)> {
        self.pools.iter().map(|(i, p)| (i, p.heap_bytes())).collect()
    }
}

/// Implements [`MultiDevice`] for `$ty` over its `PerDevice<$instance>` field `$field` (and
/// [`MultiPool`] with `pool`).
macro_rules! multi_device {
    ($ty:ty, $field:ident: $instance:ty) => {
        impl $crate::multi::MultiDevice for $ty {
            type Instance = $instance;

            fn instances(&self) -> &$crate::multi::PerDevice<$instance> {
                &self.$field
            }
        }
    };
    ($ty:ty, $field:ident: $instance:ty, pool) => {
        multi_device!($ty, $field: $instance);
        impl $crate::multi::MultiPool for $ty {}
    };
}
pub(crate) use multi_device;

multi_device!(MultiBufferPool, pools: BufferPool, pool);
multi_device!(MultiBuffer, instances: Buffer);
multi_device!(MultiUploader, uploaders: Uploader);
multi_device!(MultiTilePool, pools: crate::sparse::SparseTilePool, pool);
multi_device!(MultiSparseImage, images: crate::sparse::SparseImage);
multi_device!(MultiImage, images: crate::resources::image::Image);
multi_device!(MultiTransientPool, pools: crate::pools::transient::TransientPool, pool);
