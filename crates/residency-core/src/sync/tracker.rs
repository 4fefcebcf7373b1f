//! The state tracker: registered buffers, pages and images keyed by (device, resource), and
//! their per-piece states.

use super::barrier::{GlobalBarrierRule, Scope};
use super::batch::Batch;
use super::error::SyncError;
use super::flags::{ImageAspects, ImageLayout, QueueFamily};
use super::range_map::RangeMap;
use super::region::Region;
use super::state::{PieceState, ResourceState};
use super::ResourceId;
use crate::device_mask::DeviceIndex;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;

/// How finely a placed buffer's state is tracked.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BufferTracking {
    /// Per byte range: ranges split where their uses differ and merge again when they agree.
    #[default]
    Ranges,
    /// The buffer as one piece: every use covers all of it.
    Whole,
}

/// Whether a resource is owned by one queue family at a time (`VK_SHARING_MODE_EXCLUSIVE`,
/// ownership transfers needed) or shared (`VK_SHARING_MODE_CONCURRENT`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Sharing {
    /// One queue family at a time; using it on another family transfers ownership.
    #[default]
    Exclusive,
    /// Every queue family at once; no ownership transfers.
    Concurrent,
}

/// A buffer whose state is tracked: a placed buffer, or a page buffer under per-page tracking.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TrackedBufferDesc {
    /// Name, for error messages.
    pub name: String,
    /// Size in bytes.
    pub size: u64,
    /// Granularity (default [`BufferTracking::Ranges`]).
    pub tracking: BufferTracking,
    /// Sharing mode (default [`Sharing::Exclusive`]).
    pub sharing: Sharing,
}

impl TrackedBufferDesc {
    /// A buffer of `size` bytes tracked per range, exclusive.
    pub fn new(name: impl Into<String>, size: u64) -> TrackedBufferDesc {
        TrackedBufferDesc {
            name: name.into(),
            size,
            tracking: BufferTracking::default(),
            sharing: Sharing::default(),
        }
    }

    /// With another tracking granularity.
    pub fn with_tracking(mut self, tracking: BufferTracking) -> TrackedBufferDesc {
        self.tracking = tracking;
        self
    }

    /// With another sharing mode.
    pub fn with_sharing(mut self, sharing: Sharing) -> TrackedBufferDesc {
        self.sharing = sharing;
        self
    }
}

/// A buffer that is a range of a page buffer (a known-flags pool): its uses are tracked on the
/// whole page, the legacy per-page behaviour.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PagedBufferDesc {
    /// Name, for error messages.
    pub name: String,
    /// The page, registered with [`StateTracker::register_page`].
    pub page: ResourceId,
    /// Offset of the buffer in the page.
    pub offset: u64,
    /// Size in bytes.
    pub size: u64,
}

/// An image whose state is tracked per subresource (mip level x array layer).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TrackedImageDesc {
    /// Name, for error messages.
    pub name: String,
    /// Mip levels.
    pub mip_levels: u32,
    /// Array layers.
    pub array_layers: u32,
    /// Aspects every barrier names (default colour; depth and stencil are tracked together).
    pub aspects: ImageAspects,
    /// Layout at creation (default `UNDEFINED`; `PREINITIALIZED` for host-written linear images).
    pub initial_layout: ImageLayout,
    /// Sharing mode (default [`Sharing::Exclusive`]).
    pub sharing: Sharing,
}

impl TrackedImageDesc {
    /// A colour image of `mip_levels` x `array_layers`, `UNDEFINED`, exclusive.
    pub fn new(name: impl Into<String>, mip_levels: u32, array_layers: u32) -> TrackedImageDesc {
        TrackedImageDesc {
            name: name.into(),
            mip_levels,
            array_layers,
            aspects: ImageAspects::COLOR,
            initial_layout: ImageLayout::UNDEFINED,
            sharing: Sharing::default(),
        }
    }

    /// With other aspects.
    pub fn with_aspects(mut self, aspects: ImageAspects) -> TrackedImageDesc {
        self.aspects = aspects;
        self
    }

    /// With another initial layout.
    pub fn with_initial_layout(mut self, layout: ImageLayout) -> TrackedImageDesc {
        self.initial_layout = layout;
        self
    }

    /// With another sharing mode.
    pub fn with_sharing(mut self, sharing: Sharing) -> TrackedImageDesc {
        self.sharing = sharing;
        self
    }
}

/// Options of a [`StateTracker`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TrackerOptions {
    /// When buffer barriers become global memory barriers (default [`GlobalBarrierRule::SameScope`]).
    pub global_barriers: GlobalBarrierRule,
}

impl TrackerOptions {
    /// With another global-barrier rule.
    pub fn with_global_barriers(mut self, rule: GlobalBarrierRule) -> TrackerOptions {
        self.global_barriers = rule;
        self
    }
}

#[derive(Clone, Debug)]
pub(crate) struct BufferEntry {
    pub(crate) name: String,
    pub(crate) size: u64,
    pub(crate) whole: bool,
    pub(crate) exclusive: bool,
    pub(crate) map: RangeMap<PieceState>,
}

#[derive(Clone, Debug)]
pub(crate) struct ImageEntry {
    pub(crate) name: String,
    pub(crate) mips: u32,
    pub(crate) layers: u32,
    pub(crate) aspects: ImageAspects,
    pub(crate) exclusive: bool,
    pub(crate) per_mip: Vec<RangeMap<PieceState>>,
}

#[derive(Clone, Debug)]
pub(crate) enum Entry {
    Buffer(BufferEntry),
    Paged { name: String, page: ResourceId, size: u64 },
    Image(ImageEntry),
}

impl Entry {
    pub(crate) fn name(&self) -> &str {
        match self {
            Entry::Buffer(b) => &b.name,
            Entry::Paged { name, .. } => name,
            Entry::Image(i) => &i.name,
        }
    }
}

/// Resource states on synchronization2, keyed by (device, resource).
///
/// Register each resource on each device it lives on, then record uses through a [`Batch`]
/// (one per `vkCmdPipelineBarrier2`). See `docs/sync.md` for the model.
#[derive(Clone, Debug, Default)]
pub struct StateTracker {
    pub(crate) entries: HashMap<(DeviceIndex, ResourceId), Entry>,
    pub(crate) options: TrackerOptions,
}

impl StateTracker {
    /// An empty tracker.
    pub fn new(options: TrackerOptions) -> StateTracker {
        StateTracker { entries: HashMap::new(), options }
    }

    /// The options.
    pub fn options(&self) -> TrackerOptions {
        self.options
    }

    /// The number of registered (device, resource) pairs, paged buffers included.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether nothing is registered.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Whether `resource` is registered on `device`.
    pub fn contains(&self, device: DeviceIndex, resource: ResourceId) -> bool {
        self.entries.contains_key(&(device, resource))
    }

    fn insert(&mut self, device: DeviceIndex, resource: ResourceId, entry: Entry) -> Result<(), SyncError> {
        if let Some(old) = self.entries.get(&(device, resource)) {
            return Err(SyncError::AlreadyRegistered { device, resource, name: old.name().to_owned() });
        }
        self.entries.insert((device, resource), entry);
        Ok(())
    }

    /// Tracks a buffer (a placed buffer, with its own state) on `device`.
    pub fn register_buffer(
        &mut self,
        device: DeviceIndex,
        resource: ResourceId,
        desc: TrackedBufferDesc,
    ) -> Result<(), SyncError> {
        if desc.size == 0 {
            return Err(SyncError::ZeroSize { resource, name: desc.name });
        }
        let entry = BufferEntry {
            size: desc.size,
            whole: desc.tracking == BufferTracking::Whole,
            exclusive: desc.sharing == Sharing::Exclusive,
            map: RangeMap::new(desc.size, PieceState::new(ImageLayout::UNDEFINED)),
            name: desc.name,
        };
        self.insert(device, resource, Entry::Buffer(entry))
    }

    /// Tracks a page buffer of a known-flags pool: one piece, whatever range its buffers use.
    pub fn register_page(
        &mut self,
        device: DeviceIndex,
        page: ResourceId,
        desc: TrackedBufferDesc,
    ) -> Result<(), SyncError> {
        self.register_buffer(device, page, desc.with_tracking(BufferTracking::Whole))
    }

    /// Registers a buffer that lives in a page: its uses are uses of the whole page.
    pub fn register_paged_buffer(
        &mut self,
        device: DeviceIndex,
        resource: ResourceId,
        desc: PagedBufferDesc,
    ) -> Result<(), SyncError> {
        let PagedBufferDesc { name, page, offset, size } = desc;
        if size == 0 {
            return Err(SyncError::ZeroSize { resource, name });
        }
        let page_size = match self.entries.get(&(device, page)) {
            Some(Entry::Buffer(b)) => b.size,
            _ => return Err(SyncError::NotAPage { device, resource, name, page }),
        };
        if offset.checked_add(size).is_none_or(|end| end > page_size) {
            return Err(SyncError::OutsidePage { resource, name, offset, size, page_size });
        }
        self.insert(device, resource, Entry::Paged { name, page, size })
    }

    /// Tracks an image per subresource on `device`.
    pub fn register_image(
        &mut self,
        device: DeviceIndex,
        resource: ResourceId,
        desc: TrackedImageDesc,
    ) -> Result<(), SyncError> {
        if desc.mip_levels == 0 || desc.array_layers == 0 {
            return Err(SyncError::ZeroSize { resource, name: desc.name });
        }
        let fresh = RangeMap::new(u64::from(desc.array_layers), PieceState::new(desc.initial_layout));
        let entry = ImageEntry {
            mips: desc.mip_levels,
            layers: desc.array_layers,
            aspects: desc.aspects,
            exclusive: desc.sharing == Sharing::Exclusive,
            per_mip: vec![fresh; desc.mip_levels as usize],
            name: desc.name,
        };
        self.insert(device, resource, Entry::Image(entry))
    }

    /// Stops tracking `resource` on `device`.
    pub fn unregister(&mut self, device: DeviceIndex, resource: ResourceId) -> Result<(), SyncError> {
        self.entries
            .remove(&(device, resource))
            .map(|_| ())
            .ok_or(SyncError::UnknownResource { device, resource })
    }

    /// Declares that `resource` now occupies memory that `previous` resources used (aliasing):
    /// its contents are undefined (images go back to `UNDEFINED`) and its first use waits for
    /// every access of the previous occupants since their last write.
    pub fn alias_after(
        &mut self,
        device: DeviceIndex,
        resource: ResourceId,
        previous: &[ResourceId],
    ) -> Result<(), SyncError> {
        let target = self.resolve(device, resource)?;
        if previous.is_empty() {
            let name = self.entries[&(device, resource)].name().to_owned();
            return Err(SyncError::NoPredecessor { resource, name });
        }
        let mut scope = Scope::NONE;
        for &p in previous {
            let t = self.resolve(device, p)?;
            for (_, piece) in self.pieces(device, t) {
                scope = scope.union(Scope::new(piece.write.stages | piece.read_stages, piece.write.access));
            }
        }
        let fresh = PieceState { write: scope, ..PieceState::new(ImageLayout::UNDEFINED) };
        match self.entries.get_mut(&(device, target)) {
            Some(Entry::Buffer(b)) => b.map = RangeMap::new(b.size, fresh),
            Some(Entry::Image(i)) => {
                let layers = u64::from(i.layers);
                i.per_mip.iter_mut().for_each(|m| *m = RangeMap::new(layers, fresh));
            }
            _ => unreachable!("resolve returns buffers and images only"),
        }
        Ok(())
    }

    /// The resource a declaration on `resource` tracks: itself, or its page.
    pub(crate) fn resolve(&self, device: DeviceIndex, resource: ResourceId) -> Result<ResourceId, SyncError> {
        match self.entries.get(&(device, resource)) {
            None => Err(SyncError::UnknownResource { device, resource }),
            Some(Entry::Paged { page, .. }) if !self.entries.contains_key(&(device, *page)) => {
                Err(SyncError::UnknownResource { device, resource: *page })
            }
            Some(Entry::Paged { page, .. }) => Ok(*page),
            Some(_) => Ok(resource),
        }
    }

    fn pieces(&self, device: DeviceIndex, target: ResourceId) -> Vec<(Region, PieceState)> {
        match self.entries.get(&(device, target)) {
            Some(Entry::Buffer(b)) => {
                b.map.pieces().iter().map(|&(s, e, st)| (Region::bytes(s, e - s), st)).collect()
            }
            Some(Entry::Image(i)) => i
                .per_mip
                .iter()
                .enumerate()
                .flat_map(|(mip, m)| {
                    m.pieces().iter().map(move |&(s, e, st)| {
                        (Region::subresources(mip as u32, 1, s as u32, (e - s) as u32), st)
                    })
                })
                .collect(),
            _ => Vec::new(),
        }
    }

    /// The state of each tracked piece of `resource` on `device` (for a paged buffer, of its page):
    /// byte ranges for buffers, one mip level and a layer range for images.
    pub fn states(
        &self,
        device: DeviceIndex,
        resource: ResourceId,
    ) -> Result<Vec<(Region, ResourceState)>, SyncError> {
        let target = self.resolve(device, resource)?;
        let is_image = matches!(self.entries.get(&(device, target)), Some(Entry::Image(_)));
        Ok(self.pieces(device, target).into_iter().map(|(r, st)| (r, st.public(is_image))).collect())
    }

    /// Starts a batch of uses on `device`, recorded on a queue of `queue_family`.
    pub fn batch(&mut self, device: DeviceIndex, queue_family: QueueFamily) -> Batch<'_> {
        Batch::new(self, device, queue_family)
    }
}
