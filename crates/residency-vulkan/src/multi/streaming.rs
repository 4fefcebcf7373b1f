//! Streaming on every device of a mask: one [`Streamer`] per device, each with its own feedback,
//! budget, loader, staging and statistics, all reading their textures through one shared
//! [`DecodedTileCache`], so a tile decoded once feeds every device that asks for it.
//!
//! A [`MultiStreamer`] is a streamer per device of its mask. [`MultiStreamer::add_texture`]
//! registers the texture's [`TileSource`] with the cache once ([`DecodedTileCache::source`]) and
//! adds it to the streamer of every device of the texture's mask, each reading through its own
//! [`CachedSource::for_requester`] view (counted per device). The frame protocol stays per device
//! ([`Streamer::begin_frame`] … [`Streamer::end_frame`] on [`MultiStreamer::streamer_mut`], or on
//! all of them at once through [`MultiStreamer::streamers_mut`]): each device's frames, feedback
//! and budget are its own. [`MultiStreamer::set_texture_mask`] adds a texture to devices (primed
//! from the cache: its coarse chain is usually decoded already) and drops it from others (their
//! tiles go back to their budgets, their objects are destroyed after their frames).

use super::{device_count, resolve_mask, MultiDeviceError, PerDevice};
use crate::device::set::DeviceSet;
use crate::streaming::{StreamError, Streamer, StreamerDesc, StreamerStats, TextureStats, VirtualTexture};
use residency_core::device_mask::{DeviceIndex, DeviceMask};
use residency_core::streaming::{CacheStats, CachedSource, DecodedTileCache, StreamingStats, TileSource};
use residency_core::tiles::{ImageId, ResidencyPath};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Serials of multi-device streamers, so that a texture names one streamer's texture.
static MULTI_STREAMERS: AtomicU64 = AtomicU64::new(1);

/// A texture streamed on the devices of its mask: one [`VirtualTexture`] per device (bind each
/// device's through its own streamer's frame bindings: `bindings.texture(t.instance(i)?)`), one
/// cached source for all. Dropping it removes it from every device at that device's next
/// `begin_frame`.
#[derive(Debug)]
pub struct MultiVirtualTexture {
    name: String,
    source: Arc<CachedSource>,
    textures: PerDevice<VirtualTexture>,
    streamer: u64,
}

impl MultiVirtualTexture {
    /// Its name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The cached source every device reads.
    pub fn source(&self) -> &Arc<CachedSource> {
        &self.source
    }
}

/// One device's streaming figures ([`MultiStreamer::stats`]).
#[derive(Clone, Debug, PartialEq)]
pub struct DeviceStreamStats {
    /// The device.
    pub device: DeviceIndex,
    /// Its residency path.
    pub path: ResidencyPath,
    /// Textures streaming there.
    pub textures: usize,
    /// Its tile budget.
    pub budget_tiles: u32,
    /// Tiles of its pool in use (resident and reserved for loads in flight).
    pub used_tiles: u64,
    /// Device memory behind its textures ([`Streamer::backing_bytes`]).
    pub backing_bytes: u64,
    /// Its streamer's counters.
    pub streamer: StreamerStats,
    /// Its manager's statistics.
    pub manager: StreamingStats,
    /// Its reads through the shared cache.
    pub cache: CacheStats,
}

/// Every device's figures and the shared cache's ([`MultiStreamer::stats`]).
#[derive(Clone, Debug, PartialEq)]
pub struct MultiStreamStats {
    /// Per device, lowest first.
    pub devices: Vec<DeviceStreamStats>,
    /// The cache, all devices together.
    pub cache: CacheStats,
}

/// A streamer on every device of a mask over one decoded-tile cache (see the module docs).
pub struct MultiStreamer {
    streamers: PerDevice<Streamer>,
    cache: Arc<DecodedTileCache>,
    device_count: u32,
    serial: u64,
}

impl std::fmt::Debug for MultiStreamer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MultiStreamer")
            .field("mask", &self.streamers.mask())
            .field("cache", &self.cache)
            .finish_non_exhaustive()
    }
}

impl MultiStreamer {
    /// A streamer on every open device of `set` in `mask` ([`DeviceMask::ALL`]: all of them),
    /// each made from `desc` (its name followed by the device index), over `cache` (shared with
    /// whatever else reads through it). All or nothing: a streamer that cannot be made drops the
    /// others.
    pub fn new(
        set: &DeviceSet,
        mask: DeviceMask,
        desc: &StreamerDesc,
        cache: Arc<DecodedTileCache>,
    ) -> Result<MultiStreamer, MultiDeviceError<StreamError>> {
        let streamers = super::fan_out_on(set, mask, |device| {
            Streamer::new(device, desc.clone().with_name(format!("{} {}", desc.name, device.index())))
        })?;
        Ok(MultiStreamer {
            streamers,
            cache,
            device_count: device_count(set),
            serial: MULTI_STREAMERS.fetch_add(1, Ordering::Relaxed),
        })
    }

    /// The shared decoded-tile cache.
    pub fn cache(&self) -> &Arc<DecodedTileCache> {
        &self.cache
    }

    /// The streamer of device `index` (its stats, manager, frame bindings).
    pub fn streamer(&self, index: DeviceIndex) -> Option<&Streamer> {
        self.streamers.get(index)
    }

    /// The streamer of device `index`, for its frame protocol and its budget
    /// ([`Streamer::set_budget_tiles`]). Textures added to it directly are its own, outside the
    /// multi-device textures.
    pub fn streamer_mut(&mut self, index: DeviceIndex) -> Option<&mut Streamer> {
        self.streamers.get_mut(index)
    }

    /// Every device's streamer, lowest first (e.g. to run each device's frame on its own thread).
    pub fn streamers_mut(&mut self) -> impl Iterator<Item = (DeviceIndex, &mut Streamer)> {
        self.streamers.iter_mut()
    }

    fn check_owner(&self, texture: &MultiVirtualTexture) -> Result<(), MultiDeviceError<StreamError>> {
        if texture.streamer == self.serial {
            return Ok(());
        }
        // A texture is on at least one device (its masks are never empty).
        let (device, id) =
            texture.textures.iter().next().map_or((DeviceIndex::DEFAULT, ImageId(0)), |(d, t)| (d, t.id()));
        Err(MultiDeviceError::Failed { device, source: StreamError::ForeignTexture(id) })
    }

    /// Refuses a call between a device's `begin_frame` and `end_frame`, before anything changed.
    fn check_between_frames(
        &self,
        mask: DeviceMask,
        what: &'static str,
    ) -> Result<(), MultiDeviceError<StreamError>> {
        for (device, s) in self.streamers.iter() {
            if mask.contains(device) && s.in_frame() {
                return Err(MultiDeviceError::Failed { device, source: StreamError::FrameOrder(what) });
            }
        }
        Ok(())
    }

    /// Adds `texture` from `source` on `source`'s view for `device`; primes it there.
    fn add_on(
        &mut self,
        device: DeviceIndex,
        name: &str,
        source: &Arc<CachedSource>,
    ) -> Result<VirtualTexture, MultiDeviceError<StreamError>> {
        let streamer = self.streamers.get_mut(device).expect("resolved within the streamer's mask");
        streamer
            .add_texture(name, source.for_requester(device))
            .map_err(|source| MultiDeviceError::Failed { device, source })
    }

    /// Adds a texture streamed from `source` on every device of `mask` (within the streamer's;
    /// [`DeviceMask::ALL`]: all of them), primed on each ([`Streamer::add_texture`]): the source
    /// is registered with the cache once, so its coarse chain is decoded once for all devices.
    /// All or nothing: a device that refuses it (or fails to prime it) removes it from the
    /// others. Must be called between frames on those devices.
    pub fn add_texture(
        &mut self,
        name: &str,
        source: Arc<dyn TileSource>,
        mask: DeviceMask,
    ) -> Result<MultiVirtualTexture, MultiDeviceError<StreamError>> {
        let mask = resolve_mask(mask, self.streamers.mask(), self.device_count)?;
        self.check_between_frames(mask, "add_texture between begin_frame and end_frame")?;
        let source = self.cache.source(source);
        let mut texture = MultiVirtualTexture {
            name: name.to_owned(),
            source,
            textures: PerDevice::default(),
            streamer: self.serial,
        };
        self.add_devices(&mut texture, mask)?;
        Ok(texture)
    }

    /// Adds `texture` on the devices of `add` it is not on; all or nothing.
    fn add_devices(
        &mut self,
        texture: &mut MultiVirtualTexture,
        add: DeviceMask,
    ) -> Result<(), MultiDeviceError<StreamError>> {
        let mut added = Vec::new();
        for device in add.difference(texture.textures.mask()).iter() {
            match self.add_on(device, &texture.name, &texture.source) {
                Ok(t) => added.push((device, t)),
                Err(e) => {
                    // Undo, newest first: each handle is dropped and removed at once; a removal
                    // that fails is retried by its device's next `begin_frame`.
                    while let Some((device, t)) = added.pop() {
                        drop(t);
                        if let Some(s) = self.streamers.get_mut(device) {
                            if let Err(undo) = s.remove_dropped_textures() {
                                tracing::warn!(%device, texture = %texture.name, "undo deferred to the next frame: {undo}");
                            }
                        }
                    }
                    return Err(e);
                }
            }
        }
        for (device, t) in added {
            texture.textures.insert(device, t);
        }
        Ok(())
    }

    /// Streams `texture` on exactly the devices of `mask` (within the streamer's; `ALL`: all
    /// of them): it is added (and primed) where it was not — all or nothing, before anything is
    /// dropped — and dropped where it no longer is: there its loads are cancelled, its tiles go
    /// back to that device's budget (unbound on the GPU after the frames in flight) and its
    /// objects are destroyed after the frames that sampled it, while the other devices keep
    /// streaming. A drop whose unbind fails now (logged) is retried by that device's next
    /// `begin_frame`, which returns the error if it fails again. Must be called between frames on
    /// the devices it changes.
    pub fn set_texture_mask(
        &mut self,
        texture: &mut MultiVirtualTexture,
        mask: DeviceMask,
    ) -> Result<(), MultiDeviceError<StreamError>> {
        self.check_owner(texture)?;
        let mask = resolve_mask(mask, self.streamers.mask(), self.device_count)?;
        let current = texture.textures.mask();
        let changed = mask.difference(current).union(current.difference(mask));
        self.check_between_frames(changed, "set_texture_mask between begin_frame and end_frame")?;
        self.add_devices(texture, mask)?;
        for device in current.difference(mask).iter() {
            let Some(t) = texture.textures.remove(device) else { continue };
            drop(t);
            if let Some(s) = self.streamers.get_mut(device) {
                if let Err(e) = s.remove_dropped_textures() {
                    tracing::warn!(%device, texture = %texture.name, "removal deferred to the next frame: {e}");
                }
            }
        }
        Ok(())
    }

    /// Removes `texture` from every device at once (see [`set_texture_mask`](Self::set_texture_mask)
    /// for what a drop does). The first device whose removal failed is returned: that removal is
    /// retried by the device's next `begin_frame`. Must be called between frames on its devices.
    pub fn remove_texture(
        &mut self,
        texture: MultiVirtualTexture,
    ) -> Result<(), MultiDeviceError<StreamError>> {
        self.check_owner(&texture)?;
        self.check_between_frames(
            texture.textures.mask(),
            "remove_texture between begin_frame and end_frame",
        )?;
        let mask = texture.textures.mask();
        drop(texture);
        let mut first_error = None;
        for (device, s) in self.streamers.iter_mut() {
            if mask.contains(device) {
                if let Err(source) = s.remove_dropped_textures() {
                    first_error.get_or_insert(MultiDeviceError::Failed { device, source });
                }
            }
        }
        first_error.map_or(Ok(()), Err)
    }

    /// `texture`'s counters on device `index` (`None`: not streamed there, or not this
    /// streamer's).
    pub fn texture_stats(&self, texture: &MultiVirtualTexture, index: DeviceIndex) -> Option<TextureStats> {
        if texture.streamer != self.serial {
            return None;
        }
        self.streamers.get(index)?.texture_stats(texture.textures.get(index)?)
    }

    /// Every device's figures and the cache's.
    pub fn stats(&self) -> MultiStreamStats {
        let devices = self
            .streamers
            .iter()
            .map(|(device, s)| DeviceStreamStats {
                device,
                path: s.path(),
                textures: s.texture_count(),
                budget_tiles: s.budget_tiles(),
                used_tiles: s.manager().pool().stats().used_tiles,
                backing_bytes: s.backing_bytes(),
                streamer: s.stats().clone(),
                manager: s.manager_stats().clone(),
                cache: self.cache.requester_stats(Some(device)),
            })
            .collect();
        MultiStreamStats { devices, cache: self.cache.stats() }
    }
}

super::multi_device!(MultiStreamer, streamers: Streamer);
super::multi_device!(MultiVirtualTexture, textures: VirtualTexture);
