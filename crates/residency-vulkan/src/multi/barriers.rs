//! The barriers between the work items of one [`MultiSubmitter`](crate::multi::work::MultiSubmitter)
//! submission, from the state tracker on the submission's device.
//!
//! Each resolved item declares what it reads and writes on that device ([`Declared`]): buffer
//! ranges with the stage and access of their use, render targets (mip 0 of the view's layers,
//! contents discarded), and mips × layers of images used in `GENERAL` ([`Access::Image`]: image
//! copies, sampled bindings). Images rest in `GENERAL` between items, and an image copy moves the
//! subresources it touches there itself (from whatever layout they are in), so the image barriers
//! the plan would record without a layout change are recorded as one memory barrier instead
//! ([`relaxed`]): the same dependency, with no claim on a layout the plan did not set.
//!
//! The plan runs the declarations through a [`ResourceTracker`] of that device, in item order,
//! and keeps per gap the barriers the states require, as one
//! `vkCmdPipelineBarrier2` (nothing when none is needed). An item that does not declare its
//! accesses ([`Declared::Undeclared`]) gets the full barrier before it (with every tracked
//! resource closed, images back to `GENERAL`), and the submission ends with one after it.
//!
//! **States across submissions.** Other submitters, the uploader and the renderer's own frames
//! use the same resources between two submissions, and residency sees none of that. So no state
//! is carried from one submission to the next: the first use of a resource in a submission
//! assumes an unknown prior state (written by any command: a barrier from `ALL_COMMANDS` /
//! `MEMORY_WRITE` for that resource only; up to the first full barrier these are declared together
//! in the submission's first barrier, unless the resource's memory may be memory an earlier item
//! used through another resource, whose first use then keeps its barrier at its item), and the
//! submission ends with every used resource made available and visible to everything after it
//! (`ALL_COMMANDS | HOST`, host reads included, images in `GENERAL`) — one barrier command at the
//! end, so a host read after waiting for the submission, or any later submission, sees the writes.

use crate::device::Device;
use crate::resources::buffer::Buffer;
use crate::resources::image::Image;
use crate::sync::recording::Recording;
use crate::sync::tracking::{RecordError, ResourceTracker};
use ash::vk;
use residency_core::sync::{
    AccessFlags, BarrierBatch, CustomUse, ImageLayout, MemoryBarrier, PipelineStages, Region, ResourceId,
    Scope, SyncError, TrackerOptions, Use,
};
use std::ops::Range;

/// How a [`MultiSubmitter`](crate::multi::work::MultiSubmitter) orders the work items of a
/// submission.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum BarrierMode {
    /// The barriers the per-device resource states require, from the state tracker (the
    /// default): see [`MultiSubmitter::submit`](crate::multi::work::MultiSubmitter::submit).
    #[default]
    Tracked,
    /// A full barrier (`ALL_COMMANDS`, every memory access) before and after every submission and
    /// for every [`WorkItem::Barrier`](crate::multi::work::WorkItem::Barrier), and a render
    /// item's own barriers around its target: what the submitter did before the tracker, kept
    /// for comparison.
    Full,
}

/// Barriers a [`MultiSubmitter`](crate::multi::work::MultiSubmitter) recorded on a device, summed
/// over its submissions.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct BarrierStats {
    /// Submissions recorded.
    pub submissions: u64,
    /// `vkCmdPipelineBarrier2` commands.
    pub commands: u64,
    /// Global memory barriers (`VkMemoryBarrier2`) in them.
    pub memory: u64,
    /// Buffer barriers (`VkBufferMemoryBarrier2`) in them.
    pub buffer: u64,
    /// Image barriers (`VkImageMemoryBarrier2`) in them.
    pub image: u64,
}

impl BarrierStats {
    /// Barrier structures of every kind.
    pub fn barriers(&self) -> u64 {
        self.memory + self.buffer + self.image
    }

    /// What was recorded since `earlier` (a copy of these stats taken before).
    pub fn since(&self, earlier: &BarrierStats) -> BarrierStats {
        BarrierStats {
            submissions: self.submissions.saturating_sub(earlier.submissions),
            commands: self.commands.saturating_sub(earlier.commands),
            memory: self.memory.saturating_sub(earlier.memory),
            buffer: self.buffer.saturating_sub(earlier.buffer),
            image: self.image.saturating_sub(earlier.image),
        }
    }

    pub(crate) fn add(&mut self, other: &BarrierStats) {
        self.submissions += other.submissions;
        self.commands += other.commands;
        self.memory += other.memory;
        self.buffer += other.buffer;
        self.image += other.image;
    }

    fn count(&mut self, batch: &BarrierBatch) {
        if !batch.is_empty() {
            self.commands += 1;
            self.memory += batch.memory.len() as u64;
            self.buffer += batch.buffers.len() as u64;
            self.image += batch.images.len() as u64;
        }
    }
}

/// One resource a resolved work item accesses on the submission's device.
#[derive(Clone, Debug)]
pub(crate) enum Access<'r> {
    /// `size` bytes of `buffer` from `offset` (bytes into the buffer, not its `VkBuffer`).
    Buffer { buffer: &'r Buffer, offset: u64, size: u64, use_: Use },
    /// Mip 0 and `layers` of `image` written as a colour attachment, its contents discarded (a
    /// render item's target).
    RenderTarget { image: &'r Image, layers: Range<u32> },
    /// Mips `mips` and layers `layers` of `image` used as `use_`, in `GENERAL` (the layout
    /// residency's image copies and sampled bindings use, see [`image_use`]); the item itself
    /// moves a subresource that is in another layout (an image copy's own transitions), so the
    /// plan orders these uses with memory barriers only and never changes their layout.
    Image { image: &'r Image, mips: Range<u32>, layers: Range<u32>, use_: Use },
}

/// A use of an image in `GENERAL` by `stages` with `access` (for [`Access::Image`]).
pub(crate) fn image_use(stages: PipelineStages, access: AccessFlags) -> Use {
    Use::Custom(CustomUse { stages, access, layout: Some(ImageLayout::GENERAL) })
}

/// What a resolved work item says about its accesses.
#[derive(Clone, Debug)]
pub(crate) enum Declared<'r> {
    /// Everything it reads and writes (empty: no memory access, e.g. a timestamp).
    Accesses(Vec<Access<'r>>),
    /// Nothing: a full barrier before it and after it (the fallback for item kinds that do not
    /// declare their accesses).
    Undeclared,
    /// An explicit full barrier between the items before and after it.
    FullBarrier,
}

impl Access<'_> {
    /// The resource.
    fn id(&self) -> ResourceId {
        match self {
            Access::Buffer { buffer, .. } => buffer.resource_id(),
            Access::RenderTarget { image, .. } | Access::Image { image, .. } => image.resource_id(),
        }
    }

    /// The memory the whole resource is bound to and its bytes there (null: sparse).
    fn memory(&self) -> (vk::DeviceMemory, Range<u64>) {
        let ((memory, offset), size) = match self {
            Access::Buffer { buffer, .. } => (buffer.memory(), buffer.size()),
            Access::RenderTarget { image, .. } | Access::Image { image, .. } => {
                (image.memory(), image.size())
            }
        };
        (memory, offset..offset.saturating_add(size))
    }
}

/// Declares `access` in `batch` and notes its region as used.
fn declare(
    batch: &mut residency_core::sync::Batch<'_>,
    access: &Access<'_>,
    used: &mut Vec<(ResourceId, Region)>,
) -> Result<(), SyncError> {
    let region = match access {
        Access::Buffer { offset, size, use_, .. } => {
            let region = Region::bytes(*offset, *size);
            batch.declare(access.id(), region, *use_)?;
            region
        }
        Access::RenderTarget { layers, .. } => {
            let region = Region::subresources(0, 1, layers.start, layers.end - layers.start);
            batch.declare_discard(access.id(), region, Use::ColorAttachmentWrite)?;
            region
        }
        Access::Image { mips, layers, use_, .. } => {
            let region =
                Region::subresources(mips.start, mips.len() as u32, layers.start, layers.len() as u32);
            batch.declare(access.id(), region, *use_)?;
            region
        }
    };
    if !used.contains(&(access.id(), region)) {
        used.push((access.id(), region));
    }
    Ok(())
}

/// `batch` with its image barriers that keep the layout (`GENERAL` to `GENERAL`: the uses of
/// [`Access::Image`] and the closing of every image) merged into one global memory barrier: the
/// same dependency, without a layout requirement on the image. The plan believes every image it
/// has not transitioned itself to be in `GENERAL`; an image copy moves the subresources it
/// touches there itself (from whatever layout they are in, with its own barrier), and a sampled
/// binding in `GENERAL` is checked by its item, so no barrier of the plan may claim that layout.
/// Barriers that change the layout (a render target's) stay image barriers.
fn relaxed(mut batch: BarrierBatch) -> BarrierBatch {
    let mut merged: Option<MemoryBarrier> = None;
    batch.images.retain(|b| {
        if b.old_layout != b.new_layout || b.src_queue_family != b.dst_queue_family {
            return true;
        }
        let m = merged.get_or_insert(MemoryBarrier { src: Scope::NONE, dst: Scope::NONE });
        m.src = Scope::new(m.src.stages.union(b.src.stages), m.src.access.union(b.src.access));
        m.dst = Scope::new(m.dst.stages.union(b.dst.stages), m.dst.access.union(b.dst.access));
        false
    });
    batch.memory.extend(merged);
    batch
}

/// Everything before, made available and visible to everything after (host reads included).
const FULL: MemoryBarrier = MemoryBarrier {
    src: Scope::new(PipelineStages::ALL_COMMANDS, AccessFlags::MEMORY_READ.union(AccessFlags::MEMORY_WRITE)),
    dst: Scope::new(
        PipelineStages::ALL_COMMANDS.union(PipelineStages::HOST),
        AccessFlags::MEMORY_READ.union(AccessFlags::MEMORY_WRITE).union(AccessFlags::HOST_READ),
    ),
};

/// The state a resource is assumed to be in at its first use in a submission: written by any
/// earlier command (images: in `GENERAL`, where every submission leaves them; a render target
/// discards its contents, and the barriers of other image uses keep `GENERAL` and are recorded
/// as memory barriers, see [`relaxed`], so the assumption is never claimed on the GPU).
const UNKNOWN: CustomUse = CustomUse {
    stages: PipelineStages::ALL_COMMANDS,
    access: AccessFlags::MEMORY_WRITE,
    layout: Some(ImageLayout::GENERAL),
};

/// The use that closes a resource: every later command and the host may read or write it.
const CLOSE: CustomUse = CustomUse {
    stages: PipelineStages::ALL_COMMANDS.union(PipelineStages::HOST),
    access: AccessFlags::MEMORY_READ.union(AccessFlags::MEMORY_WRITE).union(AccessFlags::HOST_READ),
    layout: Some(ImageLayout::GENERAL),
};

/// The barriers of one submission: what to record before the first item, before each item and
/// after the last.
#[derive(Debug)]
pub(crate) struct Plan {
    /// Holds the handles the barriers name (and keeps their resources alive).
    tracker: ResourceTracker,
    opening: BarrierBatch,
    gaps: Vec<BarrierBatch>,
    closing: BarrierBatch,
    /// Per item: whether it orders itself (a render item's own barriers around its target).
    own: Vec<bool>,
}

/// Where in the submission a batch goes.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Point {
    /// Before the first item.
    Opening,
    /// Before item `n`.
    Before(usize),
    /// After the last item.
    Closing,
}

impl Plan {
    /// Plans the barriers of `items` (in submission order) on `device` under `mode`. Nothing is
    /// recorded; an error is a declaration the tracker refuses (a range outside its buffer).
    pub(crate) fn new(device: &Device, mode: BarrierMode, items: &[Declared<'_>]) -> Result<Plan, SyncError> {
        let full = || BarrierBatch { memory: vec![FULL], ..BarrierBatch::default() };
        let mut plan = Plan {
            tracker: ResourceTracker::new(TrackerOptions::default()),
            opening: BarrierBatch::default(),
            gaps: Vec::with_capacity(items.len()),
            closing: BarrierBatch::default(),
            own: Vec::with_capacity(items.len()),
        };
        if mode == BarrierMode::Full {
            plan.opening = full();
            plan.closing = full();
            for item in items {
                plan.gaps.push(if matches!(item, Declared::FullBarrier) {
                    full()
                } else {
                    BarrierBatch::default()
                });
                plan.own.push(true);
            }
            return Ok(plan);
        }
        let (index, family) = (device.index(), device.universal_queue().family());
        // The regions used since the resources were last closed.
        let mut used: Vec<(ResourceId, Region)> = Vec::new();
        // Up to the first full barrier, each resource's first use is declared in the opening
        // batch (its barrier from the unknown prior state moves there, merged), and not again at
        // its item: nothing between the opening and that item uses the resource. Not when its
        // memory may be memory an earlier item used through another resource (aliasing, or a
        // sparse resource): that first use keeps its barrier at its item.
        let declaring = items.iter().take_while(|i| matches!(i, Declared::Accesses(_)));
        let mut first: Vec<(ResourceId, usize)> = Vec::new();
        let mut seen: Vec<(ResourceId, vk::DeviceMemory, Range<u64>)> = Vec::new();
        for (n, item) in declaring.enumerate() {
            let Declared::Accesses(accesses) = item else { break };
            for access in accesses {
                plan.track(access)?;
                let (id, (memory, bytes)) = (access.id(), access.memory());
                let aliases = memory == vk::DeviceMemory::null()
                    || seen.iter().any(|(other, m, b)| {
                        *other != id && *m == memory && b.start < bytes.end && bytes.start < b.end
                    });
                if !aliases
                    && !seen.iter().any(|(other, ..)| *other == id)
                    && !first.iter().any(|(f, _)| *f == id)
                {
                    first.push((id, n));
                }
            }
            for access in accesses {
                let (memory, bytes) = access.memory();
                seen.push((access.id(), memory, bytes));
            }
        }
        let hoisted = |n: usize, access: &Access<'_>| first.contains(&(access.id(), n));
        let mut opening = plan.tracker.batch(index, family);
        for (n, item) in items.iter().enumerate() {
            let Declared::Accesses(accesses) = item else { break };
            for access in accesses.iter().filter(|a| hoisted(n, a)) {
                declare(&mut opening, access, &mut used)?;
            }
        }
        plan.opening = relaxed(opening.flush().barriers);
        // Undeclared work ran since the last full barrier.
        let mut dirty = false;
        for (n, item) in items.iter().enumerate() {
            match item {
                Declared::Accesses(accesses) => {
                    for access in accesses {
                        plan.track(access)?;
                    }
                    let mut batch = plan.tracker.batch(index, family);
                    for access in accesses.iter().filter(|a| !hoisted(n, a)) {
                        declare(&mut batch, access, &mut used)?;
                    }
                    plan.gaps.push(relaxed(batch.flush().barriers));
                    plan.own.push(false);
                }
                Declared::Undeclared | Declared::FullBarrier => {
                    let mut batch = plan.close(index, family, &mut used)?;
                    batch.memory.push(FULL);
                    plan.gaps.push(batch);
                    plan.own.push(true);
                    dirty = matches!(item, Declared::Undeclared);
                }
            }
        }
        plan.closing = plan.close(index, family, &mut used)?;
        if dirty {
            plan.closing.memory.push(FULL);
        }
        Ok(plan)
    }

    /// Tracks the resource of `access` from its first use in the submission, in the unknown
    /// prior state.
    fn track(&mut self, access: &Access<'_>) -> Result<(), SyncError> {
        let (device, id) = match access {
            Access::Buffer { buffer, .. } => (buffer.device_index(), buffer.resource_id()),
            Access::RenderTarget { image, .. } | Access::Image { image, .. } => {
                (image.device_index(), image.resource_id())
            }
        };
        if self.tracker.core().contains(device, id) {
            return Ok(());
        }
        let family = match access {
            Access::Buffer { buffer, .. } => {
                self.tracker.track_buffer(buffer)?;
                buffer.device().universal_queue().family()
            }
            Access::RenderTarget { image, .. } | Access::Image { image, .. } => {
                self.tracker.track_image(image, vk::ImageLayout::GENERAL)?;
                image.device().universal_queue().family()
            }
        };
        // The seed's barriers are not recorded: it only sets the state the first use starts from.
        let mut seed = self.tracker.batch(device, family);
        seed.declare(id, Region::Whole, Use::Custom(UNKNOWN))?;
        seed.flush();
        Ok(())
    }

    /// The barriers that close every region used since the last close (nothing when none was).
    fn close(
        &mut self,
        index: residency_core::device_mask::DeviceIndex,
        family: u32,
        used: &mut Vec<(ResourceId, Region)>,
    ) -> Result<BarrierBatch, SyncError> {
        if used.is_empty() {
            return Ok(BarrierBatch::default());
        }
        let mut batch = self.tracker.batch(index, family);
        for (id, region) in used.drain(..) {
            batch.declare(id, region, Use::Custom(CLOSE))?;
        }
        Ok(relaxed(batch.flush().barriers))
    }

    /// Whether item `n` records its own barriers (a render item's around its target).
    pub(crate) fn own_barriers(&self, n: usize) -> bool {
        self.own.get(n).copied().unwrap_or(true)
    }

    /// Records the batch of `point` into `rec` (nothing when it is empty) and counts it.
    pub(crate) fn record(
        &self,
        rec: &mut Recording<'_>,
        point: Point,
        stats: &mut BarrierStats,
    ) -> Result<(), RecordError> {
        let batch = match point {
            Point::Opening => &self.opening,
            Point::Before(n) => match self.gaps.get(n) {
                Some(batch) => batch,
                None => return Ok(()),
            },
            Point::Closing => &self.closing,
        };
        self.tracker.record(rec, batch)?;
        stats.count(batch);
        Ok(())
    }
}
