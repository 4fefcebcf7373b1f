//! GPU lifetimes: what a dropped resource leaves behind is destroyed once the GPU is done with it.
//!
//! Every resource holds a [`Life`]: an `Arc` to its device, the Vulkan objects and memory to
//! release ([`Garbage`]), the uses the renderer declared ([`GpuUse`]) and the parent whose memory
//! it points into (a pool, a transient heap, an image for a view), which it keeps alive. When the
//! last handle goes, the garbage retires after
//! - every submission residency made to the device's universal queue before the drop (each
//!   signals the device's *universal* timeline semaphore; this covers uploads, read-backs, compute
//!   and everything submitted through a [`CommandContext`](crate::CommandContext): the
//!   [`Recording`](crate::recording::Recording) of a submission holds what its helpers recorded until the
//!   submission has its timeline value, so even an object dropped while it is being recorded
//!   retires after it), and
//! - every use the renderer declared with `used_until`: a point of one of its [`Timeline`]s, a
//!   point of a residency [`Submission`](crate::Submission), or `N` frames from now
//!   ([`Device::advance_frame`] counts frames). A recording over the renderer's own command
//!   buffer ([`Recording::from_raw`](crate::recording::Recording::from_raw)) declares its uses this way too.
//!
//! If those have passed at the drop, the objects are destroyed at once; otherwise they wait in the
//! device's [`RetireQueue`] until [`Device::maintain`] (run at every residency submission, at
//! `advance_frame`, and at teardown after the device is idle) finds them done. On a lost device
//! they wait until `maintain` has waited for the work already submitted.
//!
//! Destruction order does not matter for correctness: Vulkan lets memory be freed while
//! resources are bound to it, and an image be destroyed before its views, as long as none of them
//! is used afterwards; what matters is that no GPU work that may use them is pending, which every
//! path above waits for. A deferred
//! resource's parent is told its uses, so a pool's pages or a transient heap never retire before
//! the resources placed in them.

use crate::device::blocks::MemoryBlock;
use crate::device::blocks::{ResourceMemory, SubAllocator};
use crate::device::ledger::ObjectId;
use crate::device::lock::{thread_shard, CachePadded, SHARDS};
use crate::device::Device;
use crate::error::{ErrorClass, ResidencyError};
use crate::error::{Result, VkResultExt};
use crate::poison::PoisonFree;
use ash::vk;
use residency_core::sync::{ClockCache, ClockId, GpuPoint, LastUses, RetireQueue};
use residency_core::tiles::ImageId;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};

/// The clock of residency's submissions to the universal queue.
pub(crate) const UNIVERSAL: ClockId = ClockId(0);
/// The renderer's frame counter ([`Device::advance_frame`]).
pub(crate) const FRAMES: ClockId = ClockId(1);
/// The clock of residency's sparse binds (the device's sparse timeline semaphore).
pub(crate) const SPARSE: ClockId = ClockId(2);
/// The clock of residency's submissions to its moves queue (the copies of moves under memory
/// pressure: [`Device::moves_queue`]).
pub(crate) const MOVES: ClockId = ClockId(3);
/// The first clock of a renderer [`Timeline`].
const FIRST_TIMELINE: u32 = 4;
/// How long the teardown of an adopted device waits for work residency knows of (its own
/// submissions, announced renderer frames) before it gives up and keeps the device's objects
/// alive: the application's other work may hold the GPU, and teardown never waits forever.
pub const ADOPTED_TEARDOWN_WAIT_NS: u64 = 30_000_000_000;

/// The moment a GPU use of a resource ends. Declare it with `used_until` on the resource
/// ([`Buffer::used_until`](crate::Buffer::used_until), …): dropping the resource before then defers
/// its destruction until then.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GpuUse {
    pub(crate) device: u64,
    pub(crate) point: GpuPoint,
}

/// Something residency can destroy later on a device.
#[derive(Debug)]
pub(crate) enum Garbage {
    /// A buffer (`raw` is null for a range of a page buffer) and its memory.
    Buffer { raw: vk::Buffer, memory: ResourceMemory, id: ObjectId },
    /// An image and its memory.
    Image { raw: vk::Image, memory: ResourceMemory, id: ObjectId },
    /// An image view.
    ImageView { raw: vk::ImageView, id: ObjectId },
    /// A sampler.
    Sampler { raw: vk::Sampler, id: ObjectId },
    /// A whole memory block (a pool page, a transient heap, a sparse tile heap).
    Memory(Box<MemoryBlock>),
    /// Objects of a layer above this one (a sparse image, its view, bindings and tiles), which
    /// destroy themselves: the seam through which upper layers retire what this layer does not
    /// know.
    Custom(Box<dyn Retire>),
    /// An image's tiles in a tile pool (a software image's atlas slots).
    Tiles(TileReturn),
    /// A pipeline (compute or graphics).
    Pipeline { raw: vk::Pipeline, id: ObjectId },
    /// A pipeline layout.
    PipelineLayout { raw: vk::PipelineLayout, id: ObjectId },
    /// A descriptor set layout.
    DescriptorSetLayout { raw: vk::DescriptorSetLayout, id: ObjectId },
    /// A descriptor pool and every set allocated from it.
    DescriptorPool { raw: vk::DescriptorPool, id: ObjectId },
    /// A query pool.
    QueryPool { raw: vk::QueryPool, id: ObjectId },
    /// A semaphore.
    Semaphore { raw: vk::Semaphore, id: ObjectId },
    /// Objects released together (a program's pipeline, layouts and descriptor pool), destroyed
    /// in order.
    Group(Vec<Garbage>),
    /// A range of a pool page (a `PoolRange`): only its memory goes back.
    Range(ResourceMemory),
    /// Nothing to destroy: a flag raised once the GPU is done (staging space of copies recorded
    /// into a renderer's command buffer comes back when it is).
    Signal(Arc<std::sync::atomic::AtomicBool>),
}

impl Garbage {
    /// Destroys the objects and returns the memory where it came from.
    pub(crate) fn destroy(self, device: &Device) {
        self.destroy_to(device, None);
    }

    /// [`Garbage::destroy`], with `parent` the sub-allocator its memory returns to when it has
    /// no `Weak` of its own ([`ResourceMemory::Sub`]: its life's parent, alive here).
    fn destroy_to(self, device: &Device, parent: Option<&dyn SubAllocator>) {
        match self {
            Garbage::Buffer { raw, memory, id } => {
                if raw != vk::Buffer::null() {
                    // SAFETY: the buffer belongs to this device and no handle to it is left. Garbage
                    // is destroyed only when every use it waited for has passed on this device's
                    // clocks, and a clock only advances on what its own issuer published and the
                    // GPU completed (a submission is refused by any context but its own, and
                    // `ClockCache` caps completions at the published value), or after the device
                    // is idle or lost at teardown; so the GPU work that used it has completed.
                    unsafe { device.raw().destroy_buffer(raw, None) };
                }
                device.ledger().untrack(id);
                device.release_to(memory, parent);
            }
            Garbage::Image { raw, memory, id } => {
                // SAFETY: as for buffers; its views retired before it (they hold the image alive).
                unsafe { device.raw().destroy_image(raw, None) };
                device.ledger().untrack(id);
                device.release(memory);
            }
            Garbage::ImageView { raw, id } => {
                // SAFETY: the view belongs to this device; no handle or pending GPU use is left.
                unsafe { device.raw().destroy_image_view(raw, None) };
                device.ledger().untrack(id);
            }
            Garbage::Sampler { raw, id } => {
                // SAFETY: as for views.
                unsafe { device.raw().destroy_sampler(raw, None) };
                device.ledger().untrack(id);
            }
            Garbage::Memory(block) => block.destroy(device),
            Garbage::Range(memory) => device.release(memory),
            Garbage::Custom(custom) => custom.retire(device),
            Garbage::Tiles(tiles) => tiles.give_back(),
            Garbage::Pipeline { raw, id } => {
                // SAFETY: the pipeline belongs to this device; no handle to it is left and every
                // submission that bound it has completed (the retire queue's contract).
                unsafe { device.raw().destroy_pipeline(raw, None) };
                device.ledger().untrack(id);
            }
            Garbage::PipelineLayout { raw, id } => {
                // SAFETY: as for pipelines; a layout may be destroyed while pipelines made with it
                // live, and none of its command buffers is still recording.
                unsafe { device.raw().destroy_pipeline_layout(raw, None) };
                device.ledger().untrack(id);
            }
            Garbage::DescriptorSetLayout { raw, id } => {
                // SAFETY: as for pipeline layouts.
                unsafe { device.raw().destroy_descriptor_set_layout(raw, None) };
                device.ledger().untrack(id);
            }
            Garbage::DescriptorPool { raw, id } => {
                // SAFETY: the pool belongs to this device; its sets are held by nothing (every
                // `DescriptorSet` keeps the pool's life) and no pending submission binds one.
                unsafe { device.raw().destroy_descriptor_pool(raw, None) };
                device.ledger().untrack(id);
            }
            Garbage::QueryPool { raw, id } => {
                // SAFETY: the pool belongs to this device; no pending submission writes or resets it.
                unsafe { device.raw().destroy_query_pool(raw, None) };
                device.ledger().untrack(id);
            }
            Garbage::Semaphore { raw, id } => {
                // SAFETY: the semaphore belongs to this device; no pending submission waits on or
                // signals it, and no host wait runs (waits borrow the owner, which is gone).
                unsafe { device.raw().destroy_semaphore(raw, None) };
                device.ledger().untrack(id);
            }
            Garbage::Signal(flag) => flag.store(true, Ordering::Release),
            Garbage::Group(all) => {
                for garbage in all {
                    garbage.destroy(device);
                }
            }
        }
    }
}

impl Garbage {
    /// Gives memory returned through its life's parent ([`ResourceMemory::Sub`] without a `Weak`)
    /// the parent's `Weak` (`parent`), before the garbage leaves the life that holds the parent
    /// (queued behind its uses: the queue keeps no pool alive).
    fn resolve_owner(&mut self, parent: impl FnOnce() -> Option<Weak<dyn SubAllocator>>) {
        if let Garbage::Buffer { memory: ResourceMemory::Sub { owner: owner @ None, .. }, .. }
        | Garbage::Image { memory: ResourceMemory::Sub { owner: owner @ None, .. }, .. } = self
        {
            *owner = parent();
        }
    }
}

/// Garbage of a layer above this one ([`Garbage::Custom`]): destroyed by the retire queue once
/// every use it waited for has passed, like every other garbage.
pub(crate) trait Retire: Send + Sync + std::fmt::Debug {
    /// Destroys the objects and returns what they held (the retire queue's contract holds: the
    /// GPU work that used them has completed).
    fn retire(self: Box<Self>, device: &Device);
}

/// A tile pool that takes an image's tiles back once the GPU is done with the image.
pub(crate) trait TileOwner: Send + Sync {
    /// Frees every tile `owner` holds.
    fn free_owner(&self, owner: ImageId);
}

/// An image's tiles, to go back to their pool when its garbage is destroyed. Weak: a pool dropped
/// before (its memory retires after the image, and with it the tiles) takes nothing back, and the
/// retire queue never keeps a pool (and through it a device) alive.
pub(crate) struct TileReturn {
    pub(crate) pool: Weak<dyn TileOwner>,
    pub(crate) owner: ImageId,
}

impl std::fmt::Debug for TileReturn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TileReturn").field("owner", &self.owner).finish_non_exhaustive()
    }
}

impl TileReturn {
    pub(crate) fn give_back(self) {
        if let Some(pool) = self.pool.upgrade() {
            pool.free_owner(self.owner);
        }
    }
}

/// Something whose memory a resource points into: it must not retire before that resource.
pub(crate) trait Parent: Send + Sync {
    /// A child was released with these uses pending.
    fn note_pending(&self, uses: &LastUses);
    /// Its name, for messages.
    fn name(&self) -> String;
    /// A child's last handle was dropped (its objects may still wait for the GPU).
    fn child_released(&self) {}
}

/// A [`Parent`] that also holds the device of the resources in it (a buffer pool's arena): a
/// resource held by [`Holder::Parent`] keeps its device alive through it, so creating and
/// releasing the resource touches one reference count (the parent's, which is per arena) instead
/// of two shared ones (the device's and the pool's).
pub(crate) trait DeviceParent: Parent {
    /// The device of the resources in it.
    fn device(&self) -> &Arc<Device>;
    /// Itself as a plain parent.
    fn as_parent(&self) -> &dyn Parent;
    /// Itself as the sub-allocator its children's memory returns to (a buffer pool's arena),
    /// if it is one: a child's [`ResourceMemory::Sub`] without a `Weak` returns there.
    fn as_sub_allocator(&self) -> Option<&dyn SubAllocator> {
        None
    }
    /// The same as a `Weak` (for garbage queued behind its uses, which keeps nothing alive).
    fn weak_sub_allocator(self: Arc<Self>) -> Option<Weak<dyn SubAllocator>> {
        None
    }
}

/// How a [`Life`] keeps its device (and its parent) alive.
pub(crate) enum Holder {
    /// Its own reference to the device, and its parent if it has one.
    Device(Arc<Device>, Option<Arc<dyn Parent>>),
    /// Through its parent, which holds the device.
    Parent(Arc<dyn DeviceParent>),
}

impl Holder {
    /// The device it keeps alive.
    pub(crate) fn device(&self) -> &Arc<Device> {
        match self {
            Holder::Device(device, _) => device,
            Holder::Parent(parent) => parent.device(),
        }
    }
}

/// Spare lives a thread keeps at most ([`Life::release`]).
const SPARE_LIVES: usize = 64;

thread_local! {
    /// This thread's spare lives: allocations of released resources' lives, reused by its next
    /// [`Life::held`] (issue #31: creating and releasing a pool buffer allocates nothing in steady
    /// state). Each is the only handle to its life and holds nothing (no holder, garbage or
    /// uses), so a spare keeps no device or pool alive.
    static SPARES: std::cell::RefCell<Vec<Arc<Life>>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// What a resource leaves behind, and what it keeps alive. Dropped with the last handle.
pub(crate) struct Life {
    /// `None` only for a spare (kept for reuse by [`Life::release`], never handed out).
    holder: Option<Holder>,
    garbage: Option<Garbage>,
    uses: Mutex<LastUses>,
    /// The frame count when a use was last declared (or it was made): how cold it is under
    /// memory pressure.
    last_used_frame: AtomicU64,
    /// The value of the copy that fills this resource's memory on residency's moves timeline
    /// ([`MOVES`]), while it may still be pending (0: none): a move under pressure orders later
    /// work after it per resource, through the waits of the recordings that use it
    /// ([`Life::pending_fill`]).
    filled_at: AtomicU64,
}

impl std::fmt::Debug for Life {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Life").field("garbage", &self.garbage).finish_non_exhaustive()
    }
}

impl Life {
    pub(crate) fn new(device: Arc<Device>, garbage: Garbage, parent: Option<Arc<dyn Parent>>) -> Arc<Life> {
        Life::held(Holder::Device(device, parent), garbage)
    }

    /// The life of a resource whose device (and parent) `holder` keeps alive.
    pub(crate) fn held(holder: Holder, garbage: Garbage) -> Arc<Life> {
        let frame = holder.device().retirement().frame.load(Ordering::Acquire);
        // A spare of this thread's, if it has one (none while the thread is being torn down).
        let spare = SPARES.try_with(|spares| spares.borrow_mut().pop()).ok().flatten();
        if let Some(mut life) = spare {
            // A spare is the only handle to its life (`release` keeps only those), so this holds.
            if let Some(inner) = Arc::get_mut(&mut life) {
                debug_assert!(inner.holder.is_none() && inner.garbage.is_none());
                debug_assert!(inner.uses.value_mut().is_empty());
                inner.holder = Some(holder);
                inner.garbage = Some(garbage);
                *inner.last_used_frame.get_mut() = frame;
                *inner.filled_at.get_mut() = 0;
                return life;
            }
        }
        Arc::new(Life {
            holder: Some(holder),
            garbage: Some(garbage),
            uses: Mutex::new(LastUses::none()),
            last_used_frame: AtomicU64::new(frame),
            filled_at: AtomicU64::new(0),
        })
    }

    /// Releases a resource's handle to its life: when it was the last, the life's garbage
    /// retires as dropping it does ([`Drop`]), and the emptied allocation becomes a spare of this
    /// thread for its next [`Life::held`] instead of going back to the heap. When another handle
    /// is left (a recording holding the resource), that one's drop retires it later.
    pub(crate) fn release(mut life: Arc<Life>) {
        let Some(inner) = Arc::get_mut(&mut life) else { return };
        inner.retire();
        // What it kept alive goes now: a spare holds nothing.
        drop(inner.holder.take());
        // A thread being torn down keeps no spare (the closure, and with it `life`, is dropped).
        let _ = SPARES.try_with(move |spares| {
            let mut spares = spares.borrow_mut();
            if spares.len() < SPARE_LIVES {
                if spares.capacity() == 0 {
                    spares.reserve_exact(SPARE_LIVES);
                }
                spares.push(life);
            }
        });
    }

    /// Retires its garbage (once): destroyed now or queued behind its uses, its parent told.
    fn retire(&mut self) {
        let Some(mut garbage) = self.garbage.take() else { return };
        let uses = std::mem::take(self.uses.value_mut());
        let device = self.device();
        if device.retires_now(&uses) {
            // Destroyed here, while this life still holds its parent: memory without a `Weak`
            // of its own returns to it directly.
            garbage.destroy_to(device, self.sub_parent());
            if let Some(parent) = self.parent() {
                parent.child_released();
            }
            return;
        }
        garbage.resolve_owner(|| match &self.holder {
            Some(Holder::Parent(parent)) => Arc::clone(parent).weak_sub_allocator(),
            _ => None,
        });
        let uses = device.retire(garbage, uses);
        if let Some(parent) = self.parent() {
            if let Some(uses) = uses {
                parent.note_pending(&uses);
            }
            parent.child_released();
        }
    }

    /// Notes that `copy` (a residency submission on the moves queue) fills this resource's
    /// memory: every recording that uses it waits for `copy` until it has completed.
    pub(crate) fn set_filled_by(&self, copy: GpuUse) {
        debug_assert!(copy.point.clock == MOVES && copy.device == self.device().uid());
        self.filled_at.fetch_max(copy.point.value, Ordering::AcqRel);
    }

    /// The copy that fills this resource's memory ([`Life::set_filled_by`]), while the GPU has
    /// not passed it; `None` once it has (one atomic load for a resource never moved).
    pub(crate) fn pending_fill(&self) -> Option<GpuUse> {
        let value = self.filled_at.load(Ordering::Acquire);
        if value == 0 {
            return None;
        }
        let device = self.device();
        let fill = GpuUse { device: device.uid(), point: GpuPoint::new(MOVES, value) };
        if device.has_completed(&fill) {
            // A later fill (a greater value) stays.
            let _ = self.filled_at.compare_exchange(value, 0, Ordering::AcqRel, Ordering::Relaxed);
            return None;
        }
        Some(fill)
    }

    /// The frame count when a use was last declared on it, or when it was made.
    pub(crate) fn last_used_frame(&self) -> u64 {
        self.last_used_frame.load(Ordering::Relaxed)
    }

    /// Carries the last-used frame of the life it replaces (a move is no use).
    pub(crate) fn set_last_used_frame(&self, frame: u64) {
        self.last_used_frame.store(frame, Ordering::Relaxed);
    }

    /// Notes a use in the frame being recorded (the device's frame count now).
    pub(crate) fn note_used_now(&self) {
        self.note_used_in_frame(self.device().retirement().frame.load(Ordering::Acquire));
    }

    /// Notes a use in frame `frame` (a later one than noted so far wins).
    pub(crate) fn note_used_in_frame(&self, frame: u64) {
        self.last_used_frame.fetch_max(frame, Ordering::Relaxed);
    }

    pub(crate) fn device(&self) -> &Arc<Device> {
        match &self.holder {
            Some(holder) => holder.device(),
            None => unreachable!("a spare life is never handed out"),
        }
    }

    /// Its parent as the sub-allocator its memory returns to (a buffer pool's arena), shared.
    pub(crate) fn sub_allocator(&self) -> Option<Arc<dyn SubAllocator>> {
        match self.holder.as_ref()? {
            Holder::Parent(parent) => Arc::clone(parent).weak_sub_allocator()?.upgrade(),
            Holder::Device(..) => None,
        }
    }

    /// Its parent as the sub-allocator its memory may return to (a buffer pool's arena).
    fn sub_parent(&self) -> Option<&dyn SubAllocator> {
        match self.holder.as_ref()? {
            Holder::Parent(parent) => parent.as_sub_allocator(),
            Holder::Device(..) => None,
        }
    }

    /// What it points into, if anything.
    fn parent(&self) -> Option<&dyn Parent> {
        match self.holder.as_ref()? {
            Holder::Device(_, parent) => parent.as_deref(),
            Holder::Parent(parent) => Some(parent.as_parent()),
        }
    }

    /// What it will release.
    pub(crate) fn garbage(&self) -> Option<&Garbage> {
        self.garbage.as_ref()
    }

    /// The uses declared on it so far.
    pub(crate) fn declared_uses(&self) -> LastUses {
        self.uses.locked().clone()
    }

    /// The name of what it points into, if anything.
    pub(crate) fn parent_name(&self) -> Option<String> {
        self.parent().map(|p| p.name())
    }

    /// Declares a use that ends at `until`. A use on another device is refused.
    pub(crate) fn used_until(&self, until: GpuUse) -> std::result::Result<(), ForeignUse> {
        if until.device != self.device().uid() {
            return Err(ForeignUse);
        }
        self.uses.locked().note(until.point);
        self.note_used_now();
        Ok(())
    }
}

impl Parent for Life {
    fn note_pending(&self, uses: &LastUses) {
        self.uses.locked().merge(uses);
    }

    fn name(&self) -> String {
        "a resource".to_owned()
    }
}

impl Drop for Life {
    fn drop(&mut self) {
        self.retire();
    }
}

/// A `GpuUse` of another device.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("the GPU use belongs to another device")]
pub struct ForeignUse;

/// Declared uses a parent (a pool, a transient heap) collects from its deferred children.
#[derive(Debug, Default)]
pub(crate) struct PendingUses(Mutex<LastUses>);

impl PendingUses {
    pub(crate) fn note(&self, uses: &LastUses) {
        self.0.locked().merge(uses);
    }

    pub(crate) fn take(&mut self) -> LastUses {
        std::mem::take(self.0.value_mut())
    }

    /// The uses collected so far (for memory that retires while its parent lives on).
    pub(crate) fn get(&self) -> LastUses {
        self.0.locked().clone()
    }

    /// Declares a use of `device`'s work that ends at `until`; a use of another device is refused.
    pub(crate) fn used_until(&self, device: &Device, until: GpuUse) -> std::result::Result<(), ForeignUse> {
        if until.device != device.uid() {
            return Err(ForeignUse);
        }
        self.0.locked().note(until.point);
        Ok(())
    }
}

impl ResidencyError for ForeignUse {
    fn class(&self) -> ErrorClass {
        ErrorClass::Refused
    }
}

/// A renderer timeline semaphore residency can wait on: signal it in your own submissions,
/// announce each signal you submit with [`Timeline::signal_submitted`], and declare uses with
/// [`Timeline::at`]. It lives until its device is destroyed.
///
/// Residency waits (on the host or on the GPU) only for values a signal announced to it reaches
/// (or that the timeline has reached): a wait for any other value could never end, and is refused
/// with [`VulkanError::UnreachableWait`](crate::VulkanError::UnreachableWait) where it would be
/// created. A *use* may be declared before its signal is announced (declare, then submit); at
/// teardown, residency waits only up to the announced value, and objects whose declared uses lie
/// beyond it stay queued ([`DeviceSet::close`](crate::DeviceSet::close) reports them).
#[derive(Debug, Clone)]
pub struct Timeline {
    device: u64,
    clock: ClockId,
    raw: vk::Semaphore,
    name: Arc<str>,
    announced: Arc<AtomicU64>,
}

/// The renderer timeline of `clock` (`None` for residency's own clocks and the frame count).
fn timeline_entry(timelines: &[TimelineEntry], clock: ClockId) -> Option<&TimelineEntry> {
    timelines.get(clock.0.checked_sub(FIRST_TIMELINE)? as usize)
}

/// A renderer timeline as the device keeps it.
#[derive(Debug)]
struct TimelineEntry {
    raw: vk::Semaphore,
    name: Arc<str>,
    /// The highest value an announced signal reaches.
    announced: Arc<AtomicU64>,
    /// Imported ([`Device::import_timeline`]): the application's semaphore, never destroyed here.
    imported: bool,
}

impl Timeline {
    /// The `VkSemaphore` (timeline type) to signal in your submissions (announce each signal
    /// with [`Timeline::signal_submitted`]).
    pub fn raw(&self) -> vk::Semaphore {
        self.raw
    }

    /// Announces a signal of this timeline to `value` (or more) that you submitted to a queue of
    /// its device (or performed on the host): residency may now wait for values up to `value`.
    /// [`CommandContext::submit_signalling`](crate::CommandContext::submit_signalling) announces
    /// the signals it submits itself.
    ///
    /// # Safety
    /// The timeline will reach `value`: a signal of it to `value` or more was submitted (and the
    /// submission succeeded) or performed, or you will submit or perform one without first
    /// waiting for work that waits for it. Residency trusts this: its submissions may wait for
    /// `value` on the GPU and teardown waits for it, so a false announcement can leave them
    /// waiting forever.
    /// Conversely, every signal you submit that a declared use ([`Timeline::at`]) relies on must be
    /// announced: at teardown residency treats uses past the announced value as never submitted.
    pub unsafe fn signal_submitted(&self, value: u64) {
        self.announced.fetch_max(value, Ordering::AcqRel);
    }

    /// The highest value a signal announced to residency reaches.
    pub fn announced(&self) -> u64 {
        self.announced.load(Ordering::Acquire)
    }

    /// Its name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The use that ends when the timeline reaches `value`.
    pub fn at(&self, value: u64) -> GpuUse {
        GpuUse { device: self.device, point: GpuPoint::new(self.clock, value) }
    }

    /// Whether it belongs to the device of unique id `device`.
    pub(crate) fn is_of(&self, device: &Device) -> bool {
        self.device == device.uid()
    }

    /// Raises the announced value to `value` (a signal residency itself submitted).
    pub(crate) fn announce(&self, value: u64) {
        self.announced.fetch_max(value, Ordering::AcqRel);
    }
}

/// The device's clocks and its retire queue.
#[derive(Debug)]
pub(crate) struct Retirement {
    /// The timeline semaphore residency's universal-queue submissions signal.
    pub(crate) universal: vk::Semaphore,
    /// The universal timeline's value last submitted and highest seen completed.
    universal_clock: ClockCache,
    /// The timeline semaphore residency's sparse binds signal (on the sparse queue, whose values
    /// are taken under its lock).
    pub(crate) sparse: vk::Semaphore,
    sparse_clock: ClockCache,
    /// The timeline semaphore residency's submissions to its moves queue signal (values taken
    /// under that queue's lock).
    pub(crate) moves: vk::Semaphore,
    moves_clock: ClockCache,
    frame: AtomicU64,
    timelines: Mutex<Vec<TimelineEntry>>,
    /// The retire queue, one shard per releasing thread's [`thread_shard`]: threads dropping
    /// resources while GPU work runs queue them without sharing a lock.
    queues: [CachePadded<Mutex<RetireQueue<Garbage>>>; SHARDS],
    /// The latest renderer frame submitted through residency on each renderer timeline
    /// ([`Recording::submit`](crate::recording::Recording::submit), [`PendingFrame`](crate::PendingFrame)):
    /// everything released after a frame's submission waits for it, as for residency's own
    /// submissions. Points the GPU passed are pruned.
    frames: Mutex<LastUses>,
    /// Whether `frames` may hold a point (the lock-free fast path of `retire`).
    frames_pending: std::sync::atomic::AtomicBool,
    /// Frames submitted on a queue other than residency's universal queue
    /// ([`PendingFrame::submitted`](crate::PendingFrame::submitted)): residency's later
    /// submissions and binds wait for them on the GPU (layouts and memory they touch).
    external_frames: Mutex<LastUses>,
}

/// Creates a timeline semaphore with initial value 0.
fn timeline_semaphore(raw: &ash::Device) -> Result<vk::Semaphore> {
    let mut ty = vk::SemaphoreTypeCreateInfo::default().semaphore_type(vk::SemaphoreType::TIMELINE);
    let info = vk::SemaphoreCreateInfo::default().push_next(&mut ty);
    // SAFETY: valid device with timeline semaphores enabled; the chain lives for the call.
    unsafe { raw.create_semaphore(&info, None) }.during("vkCreateSemaphore")
}

impl Retirement {
    pub(crate) fn new(raw: &ash::Device) -> Result<Retirement> {
        let universal = timeline_semaphore(raw)?;
        let sparse = match timeline_semaphore(raw) {
            Ok(s) => s,
            Err(e) => {
                // SAFETY: created above, never used.
                unsafe { raw.destroy_semaphore(universal, None) };
                return Err(e);
            }
        };
        let moves = match timeline_semaphore(raw) {
            Ok(s) => s,
            Err(e) => {
                // SAFETY: created above, never used.
                unsafe {
                    raw.destroy_semaphore(universal, None);
                    raw.destroy_semaphore(sparse, None);
                }
                return Err(e);
            }
        };
        Ok(Retirement {
            universal,
            universal_clock: ClockCache::new(),
            sparse,
            sparse_clock: ClockCache::new(),
            moves,
            moves_clock: ClockCache::new(),
            frame: AtomicU64::new(0),
            timelines: Mutex::new(Vec::new()),
            queues: std::array::from_fn(|_| CachePadded(Mutex::new(RetireQueue::new()))),
            frames: Mutex::new(LastUses::none()),
            frames_pending: std::sync::atomic::AtomicBool::new(false),
            external_frames: Mutex::new(LastUses::none()),
        })
    }

    /// The value the next universal submission signals. Call with the universal queue locked
    /// (every residency submission that signals the timeline holds it), and
    /// [`Retirement::published`] once the submission succeeded, still under the lock: until then
    /// nobody waits for the value, so a failed submission leaves nothing waiting forever.
    pub(crate) fn next_universal(&self) -> u64 {
        self.universal_clock.next()
    }

    /// The submission signalling `value` (from [`Retirement::next_universal`]) was made.
    pub(crate) fn published(&self, value: u64) {
        self.universal_clock.publish(value);
    }

    /// A submission's fence signalled: every command submitted up to it has completed (a fence
    /// signal's first scope includes all earlier commands on the queue), whether or not the
    /// timeline's own signal is visible yet.
    pub(crate) fn note_completed(&self, value: u64) {
        self.universal_clock.note_completed(value);
    }

    pub(crate) fn universal_submitted(&self) -> u64 {
        self.universal_clock.submitted()
    }

    /// The value the next sparse bind signals: call with the sparse queue locked, and
    /// [`Retirement::published_sparse`] once the bind was submitted, still under the lock.
    pub(crate) fn next_sparse(&self) -> u64 {
        self.sparse_clock.next()
    }

    /// The binds signalling up to `value` (from [`Retirement::next_sparse`]) were submitted.
    pub(crate) fn published_sparse(&self, value: u64) {
        self.sparse_clock.publish(value);
    }

    /// The value the next submission to the moves queue signals: call with that queue locked,
    /// and [`Retirement::published_moves`] once it was submitted, still under the lock.
    pub(crate) fn next_moves(&self) -> u64 {
        self.moves_clock.next()
    }

    /// The moves-queue submission signalling `value` (from [`Retirement::next_moves`]) was made.
    pub(crate) fn published_moves(&self, value: u64) {
        self.moves_clock.publish(value);
    }

    /// A moves-queue submission's fence signalled (as [`Retirement::note_completed`]).
    pub(crate) fn note_moves_completed(&self, value: u64) {
        self.moves_clock.note_completed(value);
    }

    /// The highest value submitted to the moves queue.
    pub(crate) fn moves_submitted(&self) -> u64 {
        self.moves_clock.submitted()
    }

    pub(crate) fn sparse_submitted(&self) -> u64 {
        self.sparse_clock.submitted()
    }

    /// Whether every residency submission and sparse bind made so far was already seen completed
    /// (two pairs of atomic loads; `false` only means "ask the semaphores").
    fn all_seen_completed(&self) -> bool {
        self.universal_clock.all_seen_completed()
            && self.sparse_clock.all_seen_completed()
            && self.moves_clock.all_seen_completed()
    }

    /// One of residency's own clocks: its semaphore and its cached progress.
    fn own(&self, clock: ClockId) -> Option<(vk::Semaphore, &ClockCache)> {
        match clock {
            UNIVERSAL => Some((self.universal, &self.universal_clock)),
            SPARSE => Some((self.sparse, &self.sparse_clock)),
            MOVES => Some((self.moves, &self.moves_clock)),
            _ => None,
        }
    }

    /// Destroys every semaphore (at device teardown: an owned device is idle; on an adopted one
    /// every value residency waited for was reached, and the application's contract
    /// ([`DeviceSet::adopt`](crate::DeviceSet::adopt)) is to stop using the set's timelines once it
    /// is closed).
    pub(crate) fn destroy(&self, raw: &ash::Device) {
        let timelines = std::mem::take(&mut *self.timelines.locked());
        // SAFETY: as above, no pending work signals or waits on these semaphores.
        unsafe {
            raw.destroy_semaphore(self.universal, None);
            raw.destroy_semaphore(self.sparse, None);
            raw.destroy_semaphore(self.moves, None);
            for t in timelines.into_iter().filter(|t| !t.imported) {
                raw.destroy_semaphore(t.raw, None);
            }
        }
    }
}

impl Device {
    fn clock_value(&self, clock: ClockId) -> u64 {
        let r = self.retirement();
        if let Some((semaphore, cache)) = r.own(clock) {
            return cache.value(|| {
                // SAFETY: the semaphore is a timeline semaphore of this device.
                unsafe { self.raw().get_semaphore_counter_value(semaphore) }
                    .map_err(|result| self.ledger().note_result(result))
                    .ok()
            });
        }
        match clock {
            UNIVERSAL | SPARSE | MOVES => 0, // answered above
            FRAMES => r.frame.load(Ordering::Acquire),
            ClockId(n) => {
                let timelines = r.timelines.locked();
                let Some(t) = timeline_entry(&timelines, ClockId(n)) else { return 0 };
                // SAFETY: a timeline semaphore of this device, destroyed only at teardown.
                unsafe { self.raw().get_semaphore_counter_value(t.raw) }.unwrap_or(0)
            }
        }
    }

    /// Takes `garbage` released with `uses`: destroys it now if they have all passed (and the work
    /// residency submitted before now has completed), else queues it. Returns the uses it waits
    /// for when it was queued.
    /// Whether every residency submission and sparse bind made so far was already seen completed:
    /// what was released now, with no use declared, may be destroyed at once.
    pub(crate) fn idle_so_far(&self) -> bool {
        !self.retirement().frames_pending.load(Ordering::Acquire) && self.retirement().all_seen_completed()
    }

    /// The renderer frames submitted through residency that the GPU may still run (pruning those
    /// it passed).
    fn pending_frames(&self) -> LastUses {
        let mut frames = self.retirement().frames.locked();
        let mut left = LastUses::none();
        for point in frames.points() {
            if self.clock_value(point.clock) < point.value {
                left.note(*point);
            }
        }
        if left.is_empty() {
            self.retirement().frames_pending.store(false, Ordering::Release);
        }
        *frames = left.clone();
        left
    }

    /// A renderer frame signalling `point` of a renderer timeline was submitted (and its signal
    /// announced): what is released from now on waits for it. `external`: it went to a queue
    /// other than residency's universal queue, so residency's later submissions and binds wait
    /// for it on the GPU. Call under the universal queue lock (so that no residency submission
    /// slips between the frame's submission and this).
    pub(crate) fn note_frame(&self, point: GpuPoint, external: bool) {
        let r = self.retirement();
        r.frames.locked().note(point);
        r.frames_pending.store(true, Ordering::Release);
        if external {
            r.external_frames.locked().note(point);
        }
    }

    /// The frames a residency submission or bind must wait for: those submitted on the
    /// renderer's other queues that the GPU has not passed yet (see [`Device::note_frame`]).
    pub(crate) fn external_frame_waits(&self) -> Vec<GpuUse> {
        let mut external = self.retirement().external_frames.locked();
        if external.is_empty() {
            return Vec::new();
        }
        let mut left = LastUses::none();
        for point in external.points() {
            if self.clock_value(point.clock) < point.value {
                left.note(*point);
            }
        }
        *external = left;
        external.points().iter().map(|&point| GpuUse { device: self.uid(), point }).collect()
    }

    /// The raw semaphore, announced value and name of renderer timeline `timeline`, refusing a
    /// timeline of another device.
    pub(crate) fn timeline_state(&self, timeline: &Timeline) -> Option<(vk::Semaphore, u64)> {
        if !timeline.is_of(self) {
            return None;
        }
        let timelines = self.retirement().timelines.locked();
        let t = timeline_entry(&timelines, timeline.clock)?;
        Some((t.raw, t.announced.load(Ordering::Acquire)))
    }

    /// The announced value of every renderer timeline now (a floor for the frame being recorded:
    /// its own signal will lie above it).
    pub(crate) fn announced_values(&self) -> Vec<(ClockId, u64)> {
        let timelines = self.retirement().timelines.locked();
        timelines
            .iter()
            .enumerate()
            .map(|(i, t)| (ClockId(FIRST_TIMELINE + i as u32), t.announced.load(Ordering::Acquire)))
            .collect()
    }

    /// Whether garbage released now with `uses` declared is destroyed at once without a lock, a
    /// Vulkan call or an allocation (the common case): nothing declared, no renderer frame
    /// pending, and every submission and bind made so far already seen completed.
    pub(crate) fn retires_now(&self, uses: &LastUses) -> bool {
        uses.is_empty()
            && !self.retirement().frames_pending.load(Ordering::Acquire)
            && self.retirement().all_seen_completed()
    }

    pub(crate) fn retire(&self, garbage: Garbage, mut uses: LastUses) -> Option<LastUses> {
        if self.retires_now(&uses) {
            garbage.destroy(self);
            return None;
        }
        let frames_pending = self.retirement().frames_pending.load(Ordering::Acquire);
        // Renderer frames submitted through residency before the drop may still use it.
        if frames_pending {
            uses.merge(&self.pending_frames());
        }
        let submitted = self.retirement().universal_submitted();
        if submitted > 0 {
            uses.note(GpuPoint::new(UNIVERSAL, submitted));
        }
        // Sparse binds submitted before the drop may still bind or unbind its memory.
        let binds = self.retirement().sparse_submitted();
        if binds > 0 {
            uses.note(GpuPoint::new(SPARSE, binds));
        }
        // And moves' copies submitted before the drop (their sources and destinations).
        let moves = self.retirement().moves_submitted();
        if moves > 0 {
            uses.note(GpuPoint::new(MOVES, moves));
        }
        if uses.is_done(|clock| self.clock_value(clock)) {
            garbage.destroy(self);
            return None;
        }
        self.retirement().queues[thread_shard()].locked().push(garbage, uses.clone());
        Some(uses)
    }

    /// Destroys garbage that became due together: memory blocks after everything else, so that
    /// what was placed in a block goes before it, as in release order (the queue's shards keep
    /// the release order only within each shard).
    fn destroy_due(&self, due: Vec<Garbage>) {
        let (blocks, rest): (Vec<_>, Vec<_>) = due.into_iter().partition(|g| matches!(g, Garbage::Memory(_)));
        for garbage in rest.into_iter().chain(blocks) {
            garbage.destroy(self);
        }
    }

    /// Destroys what was released and whose GPU uses have all ended. Residency runs it at every
    /// submission and at [`Device::advance_frame`]; call it when you want memory back sooner.
    /// Returns how many objects it destroyed.
    pub fn maintain(&self) -> usize {
        let lost = self.is_lost();
        if self.pending_destruction() == 0 || (lost && !self.idle_after_loss()) {
            return 0;
        }
        let mut done = Vec::new();
        for queue in &self.retirement().queues {
            let mut queue = queue.locked();
            if queue.is_empty() {
                continue;
            }
            done.extend(if lost {
                queue.drain_all()
            } else {
                queue.collect(|clock| self.clock_value(clock))
            });
        }
        let n = done.len();
        self.destroy_due(done);
        n
    }

    /// Waits for the work that may use queued objects on a lost device (past the fault hook: after
    /// an injected loss the GPU still runs what was submitted, and destroying its objects must
    /// wait for it). An owned device waits idle with its queues locked; on an adopted one, whose
    /// other queues are the application's, residency waits for its own timeline and the renderer
    /// timelines the queued objects wait for.
    fn idle_after_loss(&self) -> bool {
        if self.is_owned() {
            // A thread that holds a queue lock (the caller's) cannot wait idle here: the queued
            // objects wait for a later `maintain`.
            let Ok(_universal) = self.universal_queue().lock() else { return false };
            let sparse = self.sparse_queue().filter(|s| !Arc::ptr_eq(s, self.universal_queue()));
            let Ok(_sparse) = sparse.map(|s| s.lock()).transpose() else { return false };
            let moves = Some(self.moves_queue()).filter(|m| !Arc::ptr_eq(m, self.universal_queue()));
            let Ok(_moves) = moves.map(|m| m.lock()).transpose() else { return false };
            // SAFETY: valid device; all its queues are locked. On a really lost device the call
            // returns in finite time, as the spec requires.
            let _ = unsafe { self.raw().device_wait_idle() };
            true
        } else {
            // Bounded on a lost device; what is queued is then destroyed (the device is lost).
            self.wait_for_pending_timelines(self.teardown_timeout());
            true
        }
    }

    /// Waits (at most `timeout` ns) until the universal and sparse timelines reach what residency
    /// submitted, and every renderer timeline the highest *announced* value something queued (or
    /// a renderer frame submitted through residency) waits for. Returns whether they did.
    fn wait_for_pending_timelines(&self, timeout: u64) -> bool {
        let mut pending = LastUses::none();
        for queue in &self.retirement().queues {
            pending.merge(&queue.locked().pending());
        }
        pending.merge(&self.retirement().frames.locked());
        let r = self.retirement();
        let mut semaphores = vec![r.universal, r.sparse, r.moves];
        let mut values = vec![r.universal_submitted(), r.sparse_submitted(), r.moves_submitted()];
        {
            let timelines = self.retirement().timelines.locked();
            for point in pending.points() {
                if let Some(t) = timeline_entry(&timelines, point.clock) {
                    // Only what an announced signal reaches: a use past it was never submitted
                    // (nothing would end the wait); it stays queued and teardown reports it.
                    semaphores.push(t.raw);
                    values.push(point.value.min(t.announced.load(Ordering::Acquire)));
                }
            }
        }
        let info = vk::SemaphoreWaitInfo::default().semaphores(&semaphores).values(&values);
        // SAFETY: timeline semaphores of this device (residency's, destroyed only at teardown
        // after this, or imported ones, which the application keeps until the set is closed);
        // the universal and sparse values were published after their submissions succeeded.
        // The wait is bounded: `Ok(())` only once every value is reached (`TIMEOUT` is a success
        // code ash maps to an error).
        unsafe { self.raw().wait_semaphores(&info, timeout) }.is_ok()
    }

    /// Teardown of an adopted device: waits (bounded: [`ADOPTED_TEARDOWN_WAIT_NS`]) for
    /// residency's submissions, the announced renderer values queued objects and submitted
    /// frames wait for, and then for the driver to finish with everything submitted to
    /// residency's queues ([`Device::drain_queues`]); then destroys what has completed. Returns
    /// false when something must still wait (a use that has not ended: the application's frames
    /// or timelines, or work still running past the bound), so that nothing of the device may be
    /// freed. Never waits for a renderer value no announced signal reaches.
    pub(crate) fn settle_adopted(&self) -> bool {
        let timeout = self.teardown_timeout().min(ADOPTED_TEARDOWN_WAIT_NS);
        let reached = self.wait_for_pending_timelines(timeout);
        let drained = reached && self.drain_queues(timeout);
        self.maintain();
        drained && self.pending_destruction() == 0
    }

    /// Waits until every submission residency has made to this device has completed (its
    /// universal timeline; bounded on a lost device), then destroys what waited for it. Unlike
    /// [`Device::wait_idle`] it touches no queue, so it is safe on a device whose other queues the
    /// application uses at the same time.
    pub fn wait_submitted(&self) -> Result<()> {
        self.wait_universal(self.retirement().universal_submitted())?;
        self.wait_own(SPARSE, self.retirement().sparse_submitted())?;
        self.wait_own(MOVES, self.retirement().moves_submitted())?;
        self.maintain();
        Ok(())
    }

    /// Waits until the universal timeline reaches `value` (bounded on a lost device). A value not
    /// yet submitted returns at once: there is nothing to wait for.
    pub(crate) fn wait_universal(&self, value: u64) -> Result<()> {
        self.wait_own(UNIVERSAL, value)
    }

    /// Waits until residency's own clock `clock` (universal or sparse) reaches `value`, bounded
    /// on a lost device. A value not yet submitted returns at once.
    fn wait_own(&self, clock: ClockId, value: u64) -> Result<()> {
        let Some((semaphore, cache)) = self.retirement().own(clock) else { return Ok(()) };
        if value > cache.submitted() || value <= self.clock_value(clock) {
            return Ok(());
        }
        let semaphores = [semaphore];
        let values = [value];
        let info = vk::SemaphoreWaitInfo::default().semaphores(&semaphores).values(&values);
        // SAFETY: a timeline semaphore of this device; every value up to `value` was published
        // after its submission succeeded (checked above), so the wait ends.
        unsafe { self.raw().wait_semaphores(&info, self.teardown_timeout()) }.during("vkWaitSemaphores")?;
        cache.note_completed(value);
        Ok(())
    }

    /// The timeline semaphore and value that stand for `until` — residency's universal or sparse
    /// timeline, or a renderer [`Timeline`] of this device — for a wait in a submission residency
    /// does not make (another API's, such as wgpu's `Queue::add_wait_semaphore`). Refused as
    /// [`Device::wait_until`] refuses a GPU wait: a frame count, another device's use, a renderer
    /// timeline value no announced signal reaches. The values of residency's own timelines are
    /// those of submissions already made, so a wait for them never waits for a later signal.
    pub fn semaphore_point(&self, until: &GpuUse) -> Result<(vk::Semaphore, u64)> {
        let info = self.wait_info(until)?;
        Ok((info.semaphore, info.value))
    }

    /// The semaphore wait standing for `until`: the universal timeline or a renderer
    /// [`Timeline`] of this device. A frame count is no GPU event, and another device's use is
    /// refused.
    pub(crate) fn wait_info(&self, until: &GpuUse) -> Result<vk::SemaphoreSubmitInfo<'static>> {
        let refuse = |reason: &str| crate::error::VulkanError::Unsupported {
            device: self.name().to_owned(),
            reason: reason.to_owned(),
        };
        if until.device != self.uid() {
            return Err(refuse("a submission can only wait for a use of its own device"));
        }
        let semaphore = match until.point.clock {
            UNIVERSAL => self.retirement().universal,
            SPARSE => self.retirement().sparse,
            MOVES => self.retirement().moves,
            FRAMES => return Err(refuse("a frame count is not a GPU event a submission can wait for")),
            ClockId(n) => {
                let timelines = self.retirement().timelines.locked();
                let t = timeline_entry(&timelines, ClockId(n))
                    .ok_or_else(|| refuse("no such timeline on this device"))?;
                self.check_reachable(t, until.point.value)?;
                t.raw
            }
        };
        Ok(vk::SemaphoreSubmitInfo::default()
            .semaphore(semaphore)
            .value(until.point.value)
            .stage_mask(vk::PipelineStageFlags2::ALL_COMMANDS))
    }

    /// Refuses a wait for a value of renderer timeline `t` that neither an announced signal nor
    /// the timeline itself has reached: nothing could end it.
    fn check_reachable(&self, t: &TimelineEntry, value: u64) -> Result<()> {
        let announced = t.announced.load(Ordering::Acquire);
        if value <= announced {
            return Ok(());
        }
        // SAFETY: a timeline semaphore of this device, destroyed only at teardown.
        let current =
            unsafe { self.raw().get_semaphore_counter_value(t.raw) }.during("vkGetSemaphoreCounterValue")?;
        if value <= current {
            return Ok(());
        }
        Err(crate::error::VulkanError::UnreachableWait {
            timeline: t.name.to_string(),
            value,
            current,
            announced,
        })
    }

    /// Whether a wait for `point` of this device could end: residency's own clocks always
    /// (their values are published after their submissions), a renderer timeline up to what an
    /// announced signal or the timeline itself reached, a frame count never (no GPU event).
    pub(crate) fn is_reachable(&self, point: GpuPoint) -> bool {
        match point.clock {
            UNIVERSAL | SPARSE | MOVES => true,
            FRAMES => false,
            ClockId(n) => {
                let timelines = self.retirement().timelines.locked();
                timeline_entry(&timelines, ClockId(n))
                    .is_some_and(|t| self.check_reachable(t, point.value).is_ok())
            }
        }
    }

    /// Announces signals of renderer timelines that a submission residency made includes
    /// (`submit_signalling`'s): semaphores that are not this device's timelines are ignored.
    pub(crate) fn announce_signals(&self, signals: &[vk::SemaphoreSubmitInfo<'_>]) {
        if signals.is_empty() {
            return;
        }
        let timelines = self.retirement().timelines.locked();
        for s in signals {
            if let Some(t) = timelines.iter().find(|t| t.raw == s.semaphore) {
                t.announced.fetch_max(s.value, Ordering::AcqRel);
            }
        }
    }

    /// Objects released but waiting for the GPU.
    pub fn pending_destruction(&self) -> usize {
        self.retirement().queues.iter().map(|queue| queue.locked().len()).sum()
    }

    /// Counts a frame: call it once per frame after the frame `N` frames back has completed on the
    /// GPU, for resources declared with [`Device::frames_from_now`]. Runs [`Device::maintain`].
    /// Returns the new frame count.
    pub fn advance_frame(&self) -> u64 {
        let frame = self.retirement().frame.fetch_add(1, Ordering::AcqRel) + 1;
        self.maintain();
        frame
    }

    /// The use that ends `frames` calls of [`Device::advance_frame`] from now (the RHI convention:
    /// a resource used by the frame being recorded is safe to destroy `frames in flight` frames
    /// later).
    pub fn frames_from_now(&self, frames: u64) -> GpuUse {
        let now = self.retirement().frame.load(Ordering::Acquire);
        GpuUse { device: self.uid(), point: GpuPoint::new(FRAMES, now.saturating_add(frames)) }
    }

    /// The use that ends when every submission residency has made to this device so far completes.
    pub fn submitted_work(&self) -> GpuUse {
        GpuUse {
            device: self.uid(),
            point: GpuPoint::new(UNIVERSAL, self.retirement().universal_submitted()),
        }
    }

    /// The use that ends when every universal submission residency has made so far completes
    /// (`None`: none was).
    pub(crate) fn submitted_universal(&self) -> Option<GpuUse> {
        let value = self.retirement().universal_submitted();
        (value > 0).then(|| GpuUse { device: self.uid(), point: GpuPoint::new(UNIVERSAL, value) })
    }

    /// The use that ends when every sparse bind residency has submitted to this device so far
    /// completes (`None`: none was).
    pub fn submitted_binds(&self) -> Option<GpuUse> {
        let value = self.retirement().sparse_submitted();
        (value > 0).then(|| GpuUse { device: self.uid(), point: GpuPoint::new(SPARSE, value) })
    }

    /// Whether the GPU has passed `until`; never waits. A use of another device, or a frame count
    /// ([`Device::frames_from_now`]) not yet counted, has not passed.
    pub fn has_completed(&self, until: &GpuUse) -> bool {
        until.device == self.uid() && self.clock_value(until.point.clock) >= until.point.value
    }

    /// Waits until the GPU has passed `until`: a residency submission or a point of a renderer
    /// [`Timeline`] (bounded on a lost device). A frame count is no GPU event and another device's
    /// use is refused with [`VulkanError::Unsupported`](crate::VulkanError::Unsupported).
    pub fn wait_until(&self, until: &GpuUse) -> Result<()> {
        if self.has_completed(until) {
            return Ok(());
        }
        if until.device == self.uid() && matches!(until.point.clock, UNIVERSAL | SPARSE | MOVES) {
            return self.wait_own(until.point.clock, until.point.value);
        }
        let info = self.wait_info(until)?;
        let semaphores = [info.semaphore];
        let values = [info.value];
        let wait = vk::SemaphoreWaitInfo::default().semaphores(&semaphores).values(&values);
        // SAFETY: a timeline semaphore of this device (`wait_info` checked the device and the
        // clock); the wait is bounded by the teardown timeout.
        unsafe { self.raw().wait_semaphores(&wait, self.teardown_timeout()) }.during("vkWaitSemaphores")?;
        Ok(())
    }

    /// Creates a timeline semaphore for the renderer's own submissions (signal it there; declare
    /// uses with [`Timeline::at`]). It is destroyed with the device.
    pub fn create_timeline(&self, name: &str) -> Result<Timeline> {
        let raw = timeline_semaphore(self.raw())?;
        self.set_name(raw, name);
        let mut timelines = self.retirement().timelines.locked();
        let clock = ClockId(FIRST_TIMELINE + timelines.len() as u32);
        let (name, announced): (Arc<str>, _) = (Arc::from(name), Arc::new(AtomicU64::new(0)));
        timelines.push(TimelineEntry {
            raw,
            name: Arc::clone(&name),
            announced: Arc::clone(&announced),
            imported: false,
        });
        Ok(Timeline { device: self.uid(), clock, raw, name, announced })
    }

    /// Takes the renderer's own timeline semaphore as a [`Timeline`] of this device: its frames
    /// submitted with [`Recording::submit`](crate::recording::Recording::submit) (or a
    /// [`PendingFrame`](crate::PendingFrame)) signal it, and the streamer's
    /// [`end_frame`](crate::streaming::Streamer::end_frame) and every `used_until` take its points
    /// like those of a timeline residency made. Residency never destroys it. The values it has
    /// reached count as announced.
    ///
    /// Refused with [`VulkanError::Unsupported`](crate::VulkanError::Unsupported), importing
    /// nothing: a null handle, one of residency's own semaphores, a semaphore already imported or
    /// created as a timeline of this device. Whether `raw` is a timeline semaphore of this device
    /// Vulkan gives no way to ask (the counter query on a binary semaphore is itself invalid), so
    /// that is the caller's promise.
    ///
    /// # Safety
    /// - `raw` is a timeline semaphore (`VK_SEMAPHORE_TYPE_TIMELINE`) created on this device;
    /// - it is destroyed only after the device set is closed ([`DeviceSet::close`](crate::DeviceSet::close)
    ///   returned `Ok`, or the set was dropped);
    /// - every signal of it you make other than through residency's frame submission is announced
    ///   ([`Timeline::signal_submitted`]) before you hand residency a value it reaches.
    pub unsafe fn import_timeline(&self, raw: vk::Semaphore, name: &str) -> Result<Timeline> {
        let refuse = |reason: &str| crate::error::VulkanError::Unsupported {
            device: self.name().to_owned(),
            reason: format!("importing timeline `{name}`: {reason}"),
        };
        if raw == vk::Semaphore::null() {
            return Err(refuse("a null semaphore"));
        }
        let r = self.retirement();
        if raw == r.universal || raw == r.sparse || raw == r.moves {
            return Err(refuse("one of residency's own timelines"));
        }
        let mut timelines = self.retirement().timelines.locked();
        if let Some(t) = timelines.iter().find(|t| t.raw == raw) {
            return Err(refuse(&format!("already a timeline of this device (`{}`)", t.name)));
        }
        // SAFETY: the caller promises a timeline semaphore of this device.
        let current =
            unsafe { self.raw().get_semaphore_counter_value(raw) }.during("vkGetSemaphoreCounterValue")?;
        let clock = ClockId(FIRST_TIMELINE + timelines.len() as u32);
        let (name, announced): (Arc<str>, _) = (Arc::from(name), Arc::new(AtomicU64::new(current)));
        timelines.push(TimelineEntry {
            raw,
            name: Arc::clone(&name),
            announced: Arc::clone(&announced),
            imported: true,
        });
        Ok(Timeline { device: self.uid(), clock, raw, name, announced })
    }

    /// Destroys everything queued, whatever its uses (teardown, after the device is idle).
    pub(crate) fn retire_all(&self) {
        let all = self.retirement().queues.iter().flat_map(|queue| queue.locked().drain_all()).collect();
        self.destroy_due(all);
    }
}
