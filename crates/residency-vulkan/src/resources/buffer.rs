//! Buffers: placed (their own `VkBuffer` at an offset in a shared heap), committed (their own
//! memory), or ranges of a known-flags pool page.

// Sizes and offsets here come from callers: no operator that can wrap or panic (issue #29).
#![deny(clippy::arithmetic_side_effects)]

use crate::device::blocks::{MappedPtr, MemoryError, ResourceMemory};
use crate::device::ledger::FaultSite;
use crate::device::life::{ForeignUse, Garbage, GpuUse, Holder, Life};
use crate::device::Device;
use crate::error::VulkanError;
use crate::error::{ErrorClass, ResidencyError};
use crate::error::{ForeignReason, ForeignResource};
use crate::format_map::vk_buffer_usage;
use crate::memory::placement::{
    DedicatedTarget, ExistingAllocationInfo, PlaceRequest, PlacedWith, PlacementPolicy,
};
use crate::resources::Unused;
use ash::vk;
use residency_core::allocator::ResourceKind;
use residency_core::device_mask::DeviceIndex;
use residency_core::memory::MemoryIntent;
use residency_core::profile::MemoryRequirements;
use residency_core::usage::BufferUsage;
use std::sync::Arc;

/// How a buffer's memory was obtained.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum BufferPlacement {
    /// Its own `VkBuffer`, bound at an offset of a shared heap.
    Placed,
    /// Its own `VkBuffer` and its own memory.
    Committed,
    /// A range of a known-flags pool page's `VkBuffer` (no `VkBuffer` of its own).
    Range,
}

/// How to create a buffer outside a pool.
#[derive(Clone, Debug)]
pub struct BufferDesc {
    /// Its name (debug utils, errors, leak reports), shared (not copied) by the buffers made
    /// from this description.
    pub name: Arc<str>,
    /// Size in bytes.
    pub size: u64,
    /// How it will be used.
    pub usage: BufferUsage,
    /// What memory it needs. Default: device-local.
    pub intent: MemoryIntent,
    /// An alignment floor (0: none): the offset in its heap is a multiple of this.
    pub alignment: u64,
    /// Give it memory of its own (a committed resource) instead of a place in a shared heap.
    pub committed: bool,
    /// Allocate even when over the heap budget.
    pub allow_over_budget: bool,
    /// Whether it may go down its memory-type fallback chain (device-local → device-local
    /// host-visible → host, `residency_core::memory::fallback_chain`) when its preferred tier is
    /// out of memory or budget, the device-local limit included (default true, as VMA falls back
    /// to another type). False refuses it there with the preferred tier's error (`OutOfBudget`,
    /// `OutOfDeviceMemory`). With `allow_over_budget` false (the default) an allocation never
    /// takes a heap over its budget: VMA's `WITHIN_BUDGET`.
    pub fallback: bool,
    /// VK_EXT_memory_priority's priority in `[0, 1]` (`None`: the default, 0.5). A priority
    /// belongs to a whole `VkDeviceMemory`, so a resource that asks for one gets memory of its
    /// own; without the extension it is checked and otherwise ignored.
    pub priority: Option<f32>,
    /// Its own alignment rules, over the device's ([`PlacementPolicy`]: D3D12's per-resource
    /// `USE_TIGHT_ALIGNMENT`; `None`, the default: the device's). Its own `Tight` on a device
    /// without tight support is [`MemoryError::Placement`].
    pub policy: Option<PlacementPolicy>,
}

impl BufferDesc {
    /// A device-local placed buffer.
    pub fn new(name: impl Into<Arc<str>>, size: u64, usage: BufferUsage) -> BufferDesc {
        BufferDesc {
            name: name.into(),
            size,
            usage,
            intent: MemoryIntent::DeviceLocal,
            alignment: 0,
            committed: false,
            allow_over_budget: false,
            fallback: true,
            priority: None,
            policy: None,
        }
    }

    /// Forbids the fallback chain (see the `fallback` field).
    pub fn without_fallback(mut self) -> Self {
        self.fallback = false;
        self
    }

    /// Sets its own alignment rules (see [`BufferDesc::policy`]).
    pub fn with_policy(mut self, policy: PlacementPolicy) -> Self {
        self.policy = Some(policy);
        self
    }

    /// Sets the memory priority (see the `priority` field).
    pub fn with_priority(mut self, priority: f32) -> Self {
        self.priority = Some(priority);
        self
    }

    /// Sets the memory intent.
    pub fn with_intent(mut self, intent: MemoryIntent) -> Self {
        self.intent = intent;
        self
    }

    /// Sets the alignment floor.
    pub fn with_alignment(mut self, alignment: u64) -> Self {
        self.alignment = alignment;
        self
    }

    /// Makes it committed (own memory).
    pub fn committed(mut self) -> Self {
        self.committed = true;
        self
    }

    /// Allows allocation over budget.
    pub fn allowing_over_budget(mut self) -> Self {
        self.allow_over_budget = true;
        self
    }
}

/// A buffer. It is released when dropped: its `VkBuffer` and memory go back once the GPU work that
/// may use it has completed (see [`Buffer::used_until`] and the crate's ownership rules). A buffer
/// keeps what it points into alive: its device, and its pool for a pool's buffer, so its mapping
/// stays valid as long as it lives. [`Device::destroy_buffer`] and
/// [`BufferPool::free_buffer`](crate::BufferPool::free_buffer) release it explicitly and refuse a
/// buffer of another device or pool.
#[derive(Debug)]
pub struct Buffer {
    /// What it releases and keeps alive: its `VkBuffer` (unless a range) and memory range.
    /// Released by [`Buffer`]'s `Drop` through [`Life::release`] (which reuses the allocation).
    life: std::mem::ManuallyDrop<Arc<Life>>,
    /// Its `VkBuffer`: its own, or a range of a pool page's (which gives [`Buffer::raw`],
    /// [`Buffer::offset`] and [`Buffer::placement`]).
    object: BufferObject,
    size: u64,
    usage: BufferUsage,
    name: Arc<str>,
    /// The memory its bytes are in.
    memory: BufferMemory,
    coherent: bool,
    /// The pool that made it (its id), if any.
    pool: Option<u64>,
    /// The id state tracking knows it by.
    resource: residency_core::sync::ResourceId,
    /// Whether a defragmentation pass may move it ([`Buffer::set_movable`]).
    movable: bool,
    /// The defragmentation copy that fills its bytes, when it was moved: CPU reads and writes
    /// wait for it first (a host write racing the copy would be overwritten, a read would see
    /// bytes not copied yet).
    copy_pending: Option<GpuUse>,
    /// The application's own word (VMA's `pUserData`), kept across defragmentation moves.
    user_data: u64,
    /// Its residency priority in `[0, 1]`: under pressure the lowest, least recently used
    /// buffers are demoted first ([`Defragmenter::relieve`](crate::Defragmenter::relieve)).
    priority: f32,
    /// The rules it was placed with (kept across defragmentation moves, which keep its alignment).
    placed_with: PlacedWith,
}

/// The `VkBuffer` a [`Buffer`] is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum BufferObject {
    /// Its own `VkBuffer`, bound at an offset of memory it shares (a heap, a pool's page or
    /// block, a transient heap); released with the buffer.
    Placed(vk::Buffer),
    /// Its own `VkBuffer` bound to memory of its own; released with the buffer.
    Committed(vk::Buffer),
    /// Bytes `offset..` of a pool page's `VkBuffer`, which stays with the page.
    Range {
        /// The page's buffer.
        page_buffer: vk::Buffer,
        /// Where the range starts in it.
        offset: u64,
    },
}

impl BufferObject {
    /// The `VkBuffer` the buffer's release destroys (null for a range).
    fn own(self) -> vk::Buffer {
        match self {
            BufferObject::Placed(raw) | BufferObject::Committed(raw) => raw,
            BufferObject::Range { .. } => vk::Buffer::null(),
        }
    }

    fn placement(self) -> BufferPlacement {
        match self {
            BufferObject::Placed(_) => BufferPlacement::Placed,
            BufferObject::Committed(_) => BufferPlacement::Committed,
            BufferObject::Range { .. } => BufferPlacement::Range,
        }
    }
}

/// The memory a [`Buffer`]'s bytes are in.
#[derive(Clone, Copy, Debug)]
pub(crate) struct BufferMemory {
    /// The memory object.
    pub(crate) memory: vk::DeviceMemory,
    /// The offset of the buffer's first byte in it.
    pub(crate) offset: u64,
    /// The memory object's size (flushes and invalidations are clamped to it).
    pub(crate) memory_size: u64,
    /// The memory object's mapping (`None`: not host-visible, or not mapped).
    pub(crate) mapped: Option<MappedPtr>,
}

/// What a [`Buffer`] is made of ([`Buffer::new`]); the rest (its tracking, its life, its state
/// tracking id, no pending copy, no user data) the constructor derives.
pub(crate) struct BufferParts {
    /// The device it lives on, and what it keeps alive while it lives (its pool's arena, its
    /// transient heap).
    pub(crate) holder: Holder,
    /// Its name (the ledger tracks it by this name).
    pub(crate) name: Arc<str>,
    /// Size in bytes.
    pub(crate) size: u64,
    /// Its bind flags.
    pub(crate) usage: BufferUsage,
    /// Its `VkBuffer`.
    pub(crate) object: BufferObject,
    /// What its release gives back.
    pub(crate) owner: ResourceMemory,
    /// The memory its bytes are in.
    pub(crate) memory: BufferMemory,
    /// Whether that memory is host-coherent.
    pub(crate) coherent: bool,
    /// The pool that made it (its id), if any.
    pub(crate) pool: Option<u64>,
    /// Whether defragmentation may move it.
    pub(crate) movable: bool,
    /// The rules it was placed with.
    pub(crate) placed_with: PlacedWith,
}

/// A defragmentation move of a [`Buffer`] ([`Buffer::rebind`]): its new place, in memory of the
/// same type.
pub(crate) struct MovedBuffer {
    /// Its new `VkBuffer` (placed) or page range (a range): the same kind as before.
    pub(crate) object: BufferObject,
    /// What the new place's release gives back.
    pub(crate) owner: ResourceMemory,
    /// The device, and what the new place keeps alive (its pool's arena).
    pub(crate) holder: Holder,
    /// The memory its bytes are in now.
    pub(crate) memory: BufferMemory,
    /// The copy that fills the new place.
    pub(crate) copy: GpuUse,
}

static NEXT_RESOURCE: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

/// Ids a thread takes from [`NEXT_RESOURCE`] at once: threads creating buffers at the same time
/// touch the shared counter once per this many.
const RESOURCE_ID_BLOCK: u64 = 1024;

thread_local! {
    /// This thread's block of ids: the next one and the end of the block.
    static RESOURCE_IDS: std::cell::Cell<(u64, u64)> = const { std::cell::Cell::new((0, 0)) };
}

/// A fresh id for state tracking (buffers and images; pages use `1 << 63 | handle`): unique in
/// the process, taken from this thread's block (ids are not in creation order across threads).
pub(crate) fn next_resource_id() -> residency_core::sync::ResourceId {
    let id = RESOURCE_IDS.with(|ids| {
        let (mut next, mut end) = ids.get();
        if next == end {
            // 2^64 ids last longer than any process: the shared counter never wraps.
            next = NEXT_RESOURCE.fetch_add(RESOURCE_ID_BLOCK, std::sync::atomic::Ordering::Relaxed);
            end = next.saturating_add(RESOURCE_ID_BLOCK);
        }
        ids.set((next.saturating_add(1), end));
        next
    });
    residency_core::sync::ResourceId::new(id)
}

/// Reading or writing a buffer's mapped memory failed.
#[derive(Debug, thiserror::Error)]
pub enum AccessError {
    /// The buffer's memory is not host-visible.
    #[error("buffer `{name}` is not host-visible and cannot be mapped")]
    NotMappable {
        /// The buffer.
        name: String,
    },
    /// The range is outside the buffer.
    #[error("buffer `{name}`: bytes {offset}..{end} are outside its {size} B")]
    OutOfBounds {
        /// The buffer.
        name: String,
        /// Start of the access.
        offset: u64,
        /// End of the access.
        end: u64,
        /// The buffer's size.
        size: u64,
    },
    /// Flushing or invalidating failed.
    #[error(transparent)]
    Vulkan(#[from] VulkanError),
}

impl ResidencyError for AccessError {
    fn class(&self) -> ErrorClass {
        match self {
            AccessError::Vulkan(e) => e.class(),
            AccessError::NotMappable { .. } | AccessError::OutOfBounds { .. } => ErrorClass::Refused,
        }
    }
}

impl Buffer {
    /// The one constructor of a buffer: tracks it in the device's ledger by its name and gives it
    /// its life (which releases `parts.object`'s own `VkBuffer` and `parts.owner`, and keeps
    /// `parts.holder` alive) and a fresh state-tracking id.
    pub(crate) fn new(parts: BufferParts) -> Buffer {
        let BufferParts {
            holder,
            name,
            size,
            usage,
            object,
            owner,
            memory,
            coherent,
            pool,
            movable,
            placed_with,
        } = parts;
        let id = holder.device().ledger().track("buffer", Arc::clone(&name));
        let life = Life::held(holder, Garbage::Buffer { raw: object.own(), memory: owner, id });
        Buffer {
            life: std::mem::ManuallyDrop::new(life),
            object,
            size,
            usage,
            name,
            memory,
            coherent,
            pool,
            resource: next_resource_id(),
            movable,
            copy_pending: None,
            user_data: 0,
            priority: crate::device::blocks::DEFAULT_PRIORITY,
            placed_with,
        }
    }

    /// A defragmentation pass moved it to `moved`: its `VkBuffer` (or page range), memory and
    /// life are the new place's, and CPU access waits for `moved.copy`. Its size, usage, name,
    /// pool, state-tracking id, user data and pin stay. The old life is dropped here: the old
    /// `VkBuffer` and range retire behind the copy (submitted before) and every use declared on
    /// them.
    pub(crate) fn rebind(&mut self, moved: MovedBuffer) {
        let MovedBuffer { object, owner, holder, memory, copy } = moved;
        debug_assert_eq!(object.placement(), self.placement(), "a move keeps the kind of place");
        debug_assert!(holder.device().is(self.device()), "a move stays on its device");
        let id = holder.device().ledger().track("buffer", Arc::clone(&self.name));
        let life = Life::held(holder, Garbage::Buffer { raw: object.own(), memory: owner, id });
        life.set_last_used_frame(self.life.last_used_frame());
        let old = std::mem::replace(&mut self.life, std::mem::ManuallyDrop::new(life));
        self.object = object;
        self.memory = memory;
        self.copy_pending = Some(copy);
        Life::release(std::mem::ManuallyDrop::into_inner(old));
    }

    /// The `VkBuffer` to bind. For [`BufferPlacement::Range`] it is the page's buffer: bind it at
    /// [`Buffer::offset`].
    pub fn raw(&self) -> vk::Buffer {
        match self.object {
            BufferObject::Placed(raw) | BufferObject::Committed(raw) => raw,
            BufferObject::Range { page_buffer, .. } => page_buffer,
        }
    }

    /// The offset of this buffer's first byte in [`Buffer::raw`] (0 unless a range).
    pub fn offset(&self) -> u64 {
        match self.object {
            BufferObject::Placed(_) | BufferObject::Committed(_) => 0,
            BufferObject::Range { offset, .. } => offset,
        }
    }

    /// Size in bytes.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// Its bind flags.
    pub fn usage(&self) -> BufferUsage {
        self.usage
    }

    /// Its name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// How its memory was obtained.
    pub fn placement(&self) -> BufferPlacement {
        self.object.placement()
    }

    /// What it was placed with (the seed's `CheckExistingResourceAllocationInfo`): placed or
    /// committed, tight or legacy, the rules' size and alignment, its memory and offset there.
    /// A range of a known-flags pool's page reports the range (tight, at its usage's floors).
    pub fn existing_allocation_info(&self) -> ExistingAllocationInfo {
        let committed = matches!(self.object, BufferObject::Committed(_));
        self.placed_with.existing(committed, self.memory.memory, self.memory.offset)
    }

    /// The device it lives on.
    pub fn device_index(&self) -> DeviceIndex {
        self.life.device().index()
    }

    /// The device it lives on (kept alive by the buffer).
    pub fn device(&self) -> &Arc<Device> {
        self.life.device()
    }

    /// The memory tier it lives in (a later one than its intent's first: it fell back or was
    /// demoted); `None` for a pool's or transient buffer.
    pub fn memory_tier(&self) -> Option<residency_core::memory::MemoryTier> {
        match self.life.garbage() {
            Some(crate::device::life::Garbage::Buffer { memory, .. }) => self.life.device().tier_of(memory),
            _ => None,
        }
    }

    /// The memory it is bound to and the offset there.
    pub fn memory(&self) -> (vk::DeviceMemory, u64) {
        (self.memory.memory, self.memory.offset)
    }

    /// The id state tracking (`ResourceTracker`) knows this buffer by.
    pub fn resource_id(&self) -> residency_core::sync::ResourceId {
        self.resource
    }

    /// Whether the CPU can read and write it.
    pub fn is_mappable(&self) -> bool {
        self.memory.mapped.is_some()
    }

    /// Declares that GPU work the renderer submitted itself uses this buffer until `until` (a
    /// point of a [`Timeline`](crate::Timeline), of a residency [`Submission`](crate::Submission),
    /// or [`Device::frames_from_now`]): dropping the buffer earlier defers its destruction until
    /// then. Work residency submits needs no declaration. A use of another device is refused.
    pub fn used_until(&self, until: GpuUse) -> Result<(), ForeignUse> {
        self.life.used_until(until)
    }

    /// The application's own word attached to the buffer (VMA's `pUserData`; 0 until set): an
    /// index into the renderer's tables, say. Defragmentation keeps it.
    pub fn user_data(&self) -> u64 {
        self.user_data
    }

    /// Sets [`Buffer::user_data`].
    pub fn set_user_data(&mut self, user_data: u64) {
        self.user_data = user_data;
    }

    /// Its residency priority in `[0, 1]`: the `priority` of its description (its
    /// VK_EXT_memory_priority value where the device has the extension), else 0.5. Under
    /// pressure, buffers of lower priority, then those used longest ago
    /// ([`Buffer::last_used_frame`]), are demoted first and promoted last.
    pub fn priority(&self) -> f32 {
        self.priority
    }

    /// Sets [`Buffer::priority`] (residency's ordering only: the `VkDeviceMemory`'s own
    /// VK_EXT_memory_priority value is fixed at allocation). Outside `[0, 1]` or not a number:
    /// [`MemoryError::InvalidPriority`], nothing changed.
    pub fn set_priority(&mut self, priority: f32) -> Result<(), MemoryError> {
        crate::device::blocks::check_priority(&self.name, Some(priority))?;
        self.priority = priority;
        Ok(())
    }

    /// The frame count ([`Device::advance_frame`]) when a GPU use of it was last declared
    /// ([`Buffer::used_until`], a recording's uses at submission), or when it was made.
    pub fn last_used_frame(&self) -> u64 {
        self.life.last_used_frame()
    }

    /// The copy that fills its memory after a move under pressure
    /// ([`Defragmenter::relieve`](crate::Defragmenter::relieve)), while the GPU has not passed it:
    /// later work is not ordered after such a copy as a whole, so work that uses the buffer
    /// waits for it. Residency's submissions and the recordings of its helpers add this wait
    /// themselves ([`Recording::waits`](crate::recording::Recording::waits)); commands you record
    /// yourself with [`Buffer::raw`] must wait for it too (a semaphore wait:
    /// [`Device::semaphore_point`]). `None` for a buffer never moved so, or once the copy
    /// completed.
    pub fn pending_move(&self) -> Option<GpuUse> {
        self.life.pending_fill()
    }

    /// Whether a [`Defragmenter`](crate::Defragmenter) pass may move it (default: true). A pass
    /// moves only the buffers it is handed, and never a pinned one.
    pub fn is_movable(&self) -> bool {
        self.movable
    }

    /// Pins the buffer where it is (`false`) or lets defragmentation move it again (`true`).
    pub fn set_movable(&mut self, movable: bool) {
        self.movable = movable;
    }

    pub(crate) fn life(&self) -> &Arc<Life> {
        &self.life
    }

    /// The id of the pool that made it, if any.
    pub(crate) fn pool_id(&self) -> Option<u64> {
        self.pool
    }

    /// The size of the memory object it is bound to.
    pub(crate) fn memory_size(&self) -> u64 {
        self.memory.memory_size
    }

    /// Whether its memory is host-coherent.
    pub(crate) fn is_coherent(&self) -> bool {
        self.coherent
    }

    /// The mapped bytes `offset..offset + len` of the buffer's memory range (`offset` counts from
    /// the buffer's first byte), if it is mapped and they lie inside its memory object. For a
    /// crate-internal writer such as the staging ring, which keeps inside the buffer itself.
    pub(crate) fn mapped_range(&self, offset: u64, len: u64) -> Option<std::ptr::NonNull<u8>> {
        self.memory.mapped?.range(self.memory.offset.checked_add(offset)?, len)
    }

    fn check(&self, offset: u64, len: usize) -> Result<std::ptr::NonNull<u8>, AccessError> {
        let mapped =
            self.memory.mapped.ok_or_else(|| AccessError::NotMappable { name: self.name.to_string() })?;
        let end = offset.saturating_add(len as u64);
        let out_of_bounds =
            || AccessError::OutOfBounds { name: self.name.to_string(), offset, end, size: self.size };
        if end > self.size {
            return Err(out_of_bounds());
        }
        if let Some(copy) = self.copy_pending {
            // A defragmentation pass moved it: its bytes arrive with that copy.
            self.device().wait_until(&copy)?;
        }
        // The buffer lies inside its block, so this only fails on a bug; it is checked anyway.
        let start = self.memory.offset.checked_add(offset).ok_or_else(out_of_bounds)?;
        mapped.range(start, len as u64).ok_or_else(out_of_bounds)
    }

    /// The memory range to flush or invalidate for bytes `offset..offset+len`, widened to
    /// `nonCoherentAtomSize` and clamped to the memory object. Allocations in non-coherent memory
    /// are atom-aligned in offset and size, so the widened range stays inside this buffer's own
    /// allocation.
    fn atom_range(&self, offset: u64, len: u64) -> vk::MappedMemoryRange<'static> {
        let atom = self.device().limits().non_coherent_atom_size.max(1);
        // Saturating: callers pass ranges `check` accepted (inside the memory object), so none
        // of these saturate; a range that did would still stay inside the object.
        let first = self.memory.offset.saturating_add(offset);
        let start = first.saturating_sub(first.checked_rem(atom).unwrap_or(0));
        let end = first
            .saturating_add(len)
            .checked_next_multiple_of(atom)
            .unwrap_or(u64::MAX)
            .min(self.memory.memory_size);
        vk::MappedMemoryRange::default()
            .memory(self.memory.memory)
            .offset(start)
            .size(end.saturating_sub(start))
    }

    /// Copies `data` into the buffer at `offset` (flushing non-coherent memory). Writes need the
    /// buffer exclusively (`&mut`): two threads cannot write the same bytes. The GPU must not be
    /// using these bytes (order your submissions after the write). A buffer a
    /// [`Defragmenter`](crate::Defragmenter) moved first waits for the copy that fills its new
    /// place (as [`Buffer::read`] does), so the copy cannot overwrite the write.
    pub fn write(&mut self, offset: u64, data: &[u8]) -> Result<(), AccessError> {
        self.write_with_threads(offset, data, 1)
    }

    /// [`Buffer::write`] split among up to `threads` threads (the caller and persistent helpers started
    /// once per process), each copying a contiguous
    /// piece of at least 1 MiB: for large writes into mapped device-local memory (ReBAR) or a
    /// staging buffer, where one thread's stores do not reach the link's rate.
    pub fn write_with_threads(
        &mut self,
        offset: u64,
        data: &[u8],
        threads: usize,
    ) -> Result<(), AccessError> {
        self.write_threaded(offset, data, threads, false)
    }

    /// [`Buffer::write_with_threads`] with non-temporal (streaming) stores where the CPU has
    /// them (x86-64: AVX or SSE2), for pieces of 4 KiB and more: each line is written without
    /// being read into the cache first, and the written bytes do not stay in the cache (the
    /// uploader's ring writes with `Uploader::with_streaming_stores`).
    pub fn write_streaming(&mut self, offset: u64, data: &[u8], threads: usize) -> Result<(), AccessError> {
        self.write_threaded(offset, data, threads, true)
    }

    fn write_threaded(
        &mut self,
        offset: u64,
        data: &[u8],
        threads: usize,
        streaming: bool,
    ) -> Result<(), AccessError> {
        let dst = self.check(offset, data.len())?;
        // SAFETY: `dst..dst+len` lies inside this buffer's mapped bytes (checked), which stay
        // mapped while the buffer lives; `&mut self` makes this the only CPU access to them while
        // the slice lives, and `data` is ordinary host memory that cannot overlap the mapping.
        let bytes = unsafe { std::slice::from_raw_parts_mut(dst.as_ptr(), data.len()) };
        super::parallel_copy::copy_in_parallel(bytes, data, threads, streaming);
        if !self.coherent && !data.is_empty() {
            let range = self.atom_range(offset, data.len() as u64);
            // SAFETY: the range lies in mapped memory of this buffer's device, atom-aligned.
            unsafe { self.device().raw().flush_mapped_memory_ranges(&[range]) }
                .map_err(|r| VulkanError::from_vk("vkFlushMappedMemoryRanges", r))?;
        }
        Ok(())
    }

    /// Copies bytes of the buffer at `offset` into `out` (invalidating non-coherent memory first).
    ///
    /// It waits for no GPU work: bytes that GPU work still in flight writes (submitted earlier,
    /// or by another thread holding `&Buffer` meanwhile) may come back old, new or a mix of both
    /// (torn). That is not undefined behaviour — the bytes are copied through a raw pointer into
    /// the mapping, no reference to the mapped memory is formed, and every bit pattern is a valid
    /// `u8` — only stale data; wait for the work first (`Device::wait_until`, or
    /// [`MultiBuffer::map_read`](crate::multi::MultiBuffer::map_read), which waits and takes the
    /// buffer exclusively) to read what it wrote.
    pub fn read(&self, offset: u64, out: &mut [u8]) -> Result<(), AccessError> {
        let src = self.check(offset, out.len())?;
        if !self.coherent && !out.is_empty() {
            let range = self.atom_range(offset, out.len() as u64);
            // SAFETY: the range lies in mapped memory of this buffer's device, atom-aligned, and
            // inside this buffer's own allocation (so no neighbour's unflushed write is discarded).
            unsafe { self.device().raw().invalidate_mapped_memory_ranges(&[range]) }
                .map_err(|r| VulkanError::from_vk("vkInvalidateMappedMemoryRanges", r))?;
        }
        // SAFETY: the range lies inside this buffer's mapped bytes (checked); no CPU write can run
        // meanwhile (writes need `&mut self`); `out` is ordinary host memory.
        unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), out.as_mut_ptr(), out.len()) };
        Ok(())
    }

    /// Flushes bytes `offset..offset+len` of non-coherent memory (a crate-internal writer, such as
    /// the staging ring, wrote them through the mapping). A failure is logged: the bytes were
    /// written, only their visibility to the device is in question, and the next flush retries it.
    pub(crate) fn flush_range(&self, offset: u64, len: u64) {
        let range = self.atom_range(offset, len);
        // SAFETY: the range lies in mapped memory of this buffer's device, atom-aligned.
        if let Err(result) = unsafe { self.device().raw().flush_mapped_memory_ranges(&[range]) } {
            tracing::warn!(buffer = %self.name, ?result, "vkFlushMappedMemoryRanges failed");
        }
    }

    /// Writes a slice of plain-old-data values at `offset` (see [`Buffer::write`]).
    pub fn write_pod<T: bytemuck::NoUninit>(&mut self, offset: u64, values: &[T]) -> Result<(), AccessError> {
        self.write(offset, bytemuck::cast_slice(values))
    }

    /// Reads `count` plain-old-data values from `offset` (see [`Buffer::read`]). A range outside
    /// the buffer (or whose byte count overflows) is [`AccessError::OutOfBounds`], refused before
    /// anything is allocated for it.
    pub fn read_pod<T: bytemuck::AnyBitPattern + bytemuck::NoUninit>(
        &self,
        offset: u64,
        count: usize,
    ) -> Result<Vec<T>, AccessError> {
        let bytes = (count as u64).checked_mul(std::mem::size_of::<T>() as u64);
        if bytes.and_then(|b| offset.checked_add(b)).is_none_or(|end| end > self.size) {
            return Err(AccessError::OutOfBounds {
                name: self.name.to_string(),
                offset,
                end: bytes.map_or(u64::MAX, |b| offset.saturating_add(b)),
                size: self.size,
            });
        }
        let mut out = vec![T::zeroed(); count];
        self.read(offset, bytemuck::cast_slice_mut(&mut out))?;
        Ok(out)
    }
}

/// Creates an unbound `VkBuffer` and returns it with its memory requirements. The one place
/// residency creates a buffer: a size of zero or above `maxBufferSize`
/// (`VUID-VkBufferCreateInfo-size-06409`) is refused here before Vulkan sees it.
pub(crate) fn create_raw_buffer(
    device: &Device,
    name: &str,
    size: u64,
    usage: BufferUsage,
) -> Result<(vk::Buffer, MemoryRequirements), MemoryError> {
    let raw = create_unbound_buffer(device, name, size, usage, true)?;
    // SAFETY: raw was just created on this device.
    let requirements = unsafe { crate::device::profile_capture::requirements_of_buffer_object(device, raw) };
    Ok((raw, requirements))
}

/// [`create_raw_buffer`] without asking the requirements: for buffers placed in memory they
/// share (a pool's placed buffers), whose pool takes the requirements of their size class
/// ([`class_requirements`]) instead of asking the driver about each buffer. The `VkBuffer` is
/// named in the driver only when `named` (its pool's `debug_names`).
pub(crate) fn create_unbound_buffer(
    device: &Device,
    name: &str,
    size: u64,
    usage: BufferUsage,
    named: bool,
) -> Result<vk::Buffer, MemoryError> {
    if size == 0 {
        return Err(MemoryError::InvalidRequest {
            name: name.to_owned(),
            source: residency_core::allocator::AllocError::ZeroSize,
        });
    }
    let limit = device.profile().limits.max_buffer_size;
    if limit > 0 && size > limit {
        return Err(MemoryError::TooLarge {
            name: name.to_owned(),
            requested: size,
            limit_name: "maxBufferSize",
            limit,
        });
    }
    if usage.is_empty() {
        return Err(MemoryError::Unsatisfiable {
            name: name.to_owned(),
            reason: "a buffer needs a usage".into(),
        });
    }
    if let Some((asked, needs)) = device.unsupported_usage(usage) {
        return Err(MemoryError::Unsatisfiable {
            name: name.to_owned(),
            reason: format!("usage {asked:?} needs {needs}, which this device does not have enabled"),
        });
    }
    let info = vk::BufferCreateInfo::default()
        .size(size)
        .usage(vk_buffer_usage(usage))
        .sharing_mode(vk::SharingMode::EXCLUSIVE);
    let raw = device.ledger().guard(FaultSite::CreateResource, || {
        // SAFETY: valid device; non-zero size and non-empty usage (checked above).
        unsafe { device.raw().create_buffer(&info, None) }
    });
    let raw = raw.map_err(|r| match r {
        vk::Result::ERROR_OUT_OF_DEVICE_MEMORY | vk::Result::ERROR_OUT_OF_HOST_MEMORY => {
            MemoryError::OutOfDeviceMemory { name: name.to_owned(), requested: size }
        }
        r => VulkanError::from_vk("vkCreateBuffer", r).into(),
    })?;
    if named {
        device.set_name(raw, name);
    }
    Ok(raw)
}

/// Entries of a thread's requirements cache (direct-mapped).
const REQUIREMENT_ENTRIES: usize = 1024;

/// One answer of `vkGetDeviceBufferMemoryRequirements`: a buffer of `size` bytes and `usage` (no
/// flags, exclusive, no `pNext`) on the device of unique id `device`.
#[derive(Clone, Copy)]
struct RequirementsEntry {
    device: u64,
    usage: vk::BufferUsageFlags,
    size: u64,
    requirements: MemoryRequirements,
}

thread_local! {
    /// This thread's answers (issue #31): no lock, no atomic, nothing shared between threads.
    static REQUIREMENTS: std::cell::RefCell<Vec<Option<RequirementsEntry>>> =
        const { std::cell::RefCell::new(Vec::new()) };
}

/// The requirements of a buffer of `size` bytes and `usage` (created as [`create_raw_buffer`]
/// creates it), from this thread's cache of `vkGetDeviceBufferMemoryRequirements` answers.
fn device_requirements(device: &Device, size: u64, usage: vk::BufferUsageFlags) -> MemoryRequirements {
    let key = device.uid() ^ u64::from(usage.as_raw()).rotate_left(40) ^ size;
    // Fibonacci hashing onto the table's 10 bits.
    let at = (key.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 54) as usize % REQUIREMENT_ENTRIES;
    let hit = REQUIREMENTS.with(|table| {
        let table = table.borrow();
        let entry = table.get(at).copied().flatten()?;
        (entry.device == device.uid() && entry.usage == usage && entry.size == size)
            .then_some(entry.requirements)
    });
    if let Some(requirements) = hit {
        return requirements;
    }
    let requirements = crate::device::profile_capture::buffer_requirements(device, size, usage);
    REQUIREMENTS.with(|table| {
        let mut table = table.borrow_mut();
        if table.is_empty() {
            table.resize(REQUIREMENT_ENTRIES, None);
        }
        table[at] = Some(RequirementsEntry { device: device.uid(), usage, size, requirements });
    });
    requirements
}

/// The requirements a buffer of `size` bytes and `usage` may be placed with, asked per size
/// class instead of per buffer. The spec's invariance rules ("Resource Memory Association"):
/// `memoryTypeBits` and `alignment` are identical for every buffer created with the same usage
/// and flags, and with `maintenance4` (which every residency device has enabled) "the size memory
/// requirement of a buffer is never greater than that of another buffer created with a greater
/// or equal size". So the answer for the class's largest size — `size` rounded up to the
/// usage's alignment (where drivers round sizes anyway) — has this buffer's types and alignment
/// and a size at least its own: memory reserved by it holds the buffer. A rounded size above
/// `maxBufferSize` is not asked: `size` itself is.
pub(crate) fn class_requirements(
    device: &Device,
    size: u64,
    usage: vk::BufferUsageFlags,
) -> MemoryRequirements {
    let alignment = device_requirements(device, 1, usage).alignment.max(1);
    let limit = device.profile().limits.max_buffer_size;
    let bound = size
        .checked_next_multiple_of(alignment)
        .filter(|&bound| limit == 0 || bound <= limit)
        .unwrap_or(size);
    device_requirements(device, bound, usage)
}

/// Binds `raw` to `memory` at `offset`, destroying `raw` on failure.
pub(crate) fn bind_buffer(
    device: &Device,
    raw: vk::Buffer,
    memory: vk::DeviceMemory,
    offset: u64,
) -> Result<(), MemoryError> {
    // SAFETY: raw is unbound; offset satisfies its alignment and the range lies in memory (the
    // allocator placed it so).
    if let Err(r) = unsafe { device.raw().bind_buffer_memory(raw, memory, offset) } {
        // SAFETY: raw was created by the caller on this device and is unused.
        unsafe { device.raw().destroy_buffer(raw, None) };
        return Err(VulkanError::from_vk("vkBindResourceMemory", r).into());
    }
    Ok(())
}

impl Device {
    /// Creates a buffer: placed in a shared heap of the device's general allocator, or committed
    /// (its own memory) when `desc.committed`, when the driver prefers it, or when it is too large
    /// for a heap.
    pub fn create_buffer(&self, desc: &BufferDesc) -> Result<Buffer, MemoryError> {
        let name: &str = &desc.name;
        if desc.alignment != 0 && !desc.alignment.is_power_of_two() {
            return Err(MemoryError::InvalidRequest {
                name: name.to_owned(),
                source: residency_core::allocator::AllocError::AlignmentNotPowerOfTwo {
                    alignment: desc.alignment,
                },
            });
        }
        let (raw, requirements) = create_raw_buffer(self, name, desc.size, desc.usage)?;
        let raw_guard = Unused::new(self, raw);
        let request = PlaceRequest {
            name,
            requirements,
            alignment_floor: desc.alignment,
            kind: ResourceKind::Linear,
            intent: desc.intent,
            committed: desc.committed,
            allow_over_budget: desc.allow_over_budget,
            fallback: desc.fallback,
            priority: desc.priority,
            image: None,
            target: DedicatedTarget::Buffer(raw),
            policy: desc.policy,
        };
        let placed = self.place_for_usage(&request, Some(desc.usage))?;
        if let Err(e) = bind_buffer(self, raw_guard.disarm(), placed.memory, placed.offset) {
            self.release(placed.owner);
            return Err(e);
        }
        let mut buffer = Buffer::new(BufferParts {
            holder: Holder::Device(self.arc(), None),
            name: Arc::clone(&desc.name),
            size: desc.size,
            usage: desc.usage,
            object: if placed.committed { BufferObject::Committed(raw) } else { BufferObject::Placed(raw) },
            owner: placed.owner,
            memory: BufferMemory {
                memory: placed.memory,
                offset: placed.offset,
                memory_size: placed.memory_size,
                mapped: placed.mapped,
            },
            coherent: placed.coherent,
            pool: None,
            movable: true,
            placed_with: placed.with,
        });
        buffer.priority = desc.priority.unwrap_or(crate::device::blocks::DEFAULT_PRIORITY);
        Ok(buffer)
    }

    /// Releases a buffer made by [`Device::create_buffer`] on this device (as dropping it does:
    /// deferred while the GPU may use it). A buffer of another device, or of a pool, is refused and
    /// handed back unchanged.
    pub fn destroy_buffer(&self, buffer: Buffer) -> Result<(), ForeignResource<Buffer>> {
        let reason = if !buffer.device().is(self) {
            ForeignReason::OtherDevice { owner: buffer.device_index(), target: self.index() }
        } else if buffer.pool.is_some() {
            ForeignReason::OtherPool { owner: Some(buffer.pool_name()), target: None }
        } else {
            drop(buffer);
            return Ok(());
        };
        Err(ForeignResource { name: buffer.name.to_string(), resource: Box::new(buffer), reason })
    }
}

impl Drop for Buffer {
    fn drop(&mut self) {
        // SAFETY: `self.life` is taken once, here, as the buffer goes: nothing reads it after.
        let life = unsafe { std::mem::ManuallyDrop::take(&mut self.life) };
        Life::release(life);
    }
}

impl Buffer {
    /// The name of the pool that made it (for messages).
    fn pool_name(&self) -> String {
        self.life.parent_name().unwrap_or_else(|| "a pool".to_owned())
    }
}
