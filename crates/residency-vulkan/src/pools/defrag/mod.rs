//! Defragmentation the library carries out: moves buffers and images placed in the device's
//! general heaps, and buffers in a buffer pool's pages, so that the most-empty heaps (pages)
//! empty; copies their contents on the GPU, and swaps the handles' internals, the old objects
//! retiring behind the copy and every declared use.
//!
//! The renderer hands a pass the resources that may move as `&mut`: no CPU alias can see the old
//! `VkBuffer`/`VkImage` while the pass runs, and afterwards each handle names its new object,
//! memory and offset with the same size, usage, name (debug name too), state-tracking id and (for
//! images) layouts. A resource not handed to the pass never moves. The plan is the core's
//! ([`residency_core::allocator::plan_defragmentation`]).

use crate::device::blocks::{BlockAllocation, BlockList, MappedPtr, MemoryError};
use crate::device::blocks::{ResourceMemory, SubAllocation};
use crate::device::life::{DeviceParent, Garbage, GpuUse, Holder, Life, FRAMES, SPARSE, UNIVERSAL};
use crate::device::Device;
use crate::error::VulkanError;
use crate::poison::PoisonFree;
use crate::pools::buffer_pool::PoolArena;
use crate::resources::buffer::{bind_buffer, create_raw_buffer, Buffer, BufferPlacement};
use crate::resources::buffer::{BufferMemory, BufferObject, MovedBuffer};
use crate::resources::image::{Image, Layouts};
use crate::sync::commands::{CommandContext, Lane, Submission};
use crate::sync::recording::Timestamps;
use ash::vk;
use residency_core::allocator::{
    plan_defragmentation_with, BlockState, DefragBudget, DefragHeap, LiveBlock, Repack,
};
use residency_core::sync::LastUses;
use residency_core::usage::{BufferPoolUsage, BufferUsage};
use std::collections::HashMap;
use std::sync::{Arc, MutexGuard};
use std::time::{Duration, Instant};

mod images;
mod tiers;
use crate::error::{ErrorClass, ResidencyError};
use images::ImageCopies;
pub use tiers::RelieveStats;

/// What one pass may move, and whether it repacks. Defaults: 64 MiB and 256 moves, repacking
/// heaps under 90 % full into new heaps in whole 2 MiB.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DefragDesc {
    /// Bytes one pass may copy (the moved buffers' allocations).
    pub max_bytes_per_pass: u64,
    /// Buffers one pass may move.
    pub max_moves_per_pass: u32,
    /// Repacking: after emptying heaps into other heaps' holes, a pass drains the heaps under
    /// `max_occupancy_percent` full into one new heap sized to what it moves (in whole `unit`s; at
    /// most the list's page size — the largest heap it makes itself — whatever `max_heap` says),
    /// with the budget left; when that heap cannot be made (out of memory or budget) the pass
    /// moves only into existing holes ([`DefragStats::repack_out_of_memory`]). `None`:
    /// moves only into existing holes (no new memory during a pass). Pools with a fixed page size
    /// never repack.
    pub repack: Option<Repack>,
}

impl Default for DefragDesc {
    fn default() -> Self {
        DefragDesc { max_bytes_per_pass: 64 << 20, max_moves_per_pass: 256, repack: Some(Repack::default()) }
    }
}

impl DefragDesc {
    /// Sets the bytes one pass may copy.
    pub fn with_max_bytes_per_pass(mut self, bytes: u64) -> Self {
        self.max_bytes_per_pass = bytes;
        self
    }

    /// Sets the buffers one pass may move.
    pub fn with_max_moves_per_pass(mut self, moves: u32) -> Self {
        self.max_moves_per_pass = moves;
        self
    }

    /// Sets repacking (`None`: off).
    pub fn with_repack(mut self, repack: Option<Repack>) -> Self {
        self.repack = repack;
        self
    }
}

/// Why a buffer or image handed to a pass was not considered for a move. It stays where it is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unmovable {
    /// It lives on another device than the defragmenter's.
    OtherDevice,
    /// It is not placed in heaps that a pass moves within (committed memory, a transient buffer):
    /// passes move [`Device::create_buffer`] placements and [`BufferPool`](crate::BufferPool)
    /// buffers.
    NotPlaced,
    /// The renderer pinned the buffer ([`Buffer::set_movable`]).
    Pinned,
    /// Something else holds it: a descriptor set, a state tracker, a recording, a queued upload
    /// or (images) a view, which name its `VkBuffer`/`VkImage` and would keep using the old one.
    /// Drop or untrack them first.
    Shared,
    /// A use was declared in frames ([`Device::frames_from_now`]): no GPU event the copy can wait
    /// for. Declare it on a [`Timeline`](crate::Timeline) or a submission instead.
    FrameCountedUse,
    /// A use was declared on a renderer [`Timeline`](crate::Timeline) value that no announced
    /// signal reaches yet ([`Timeline::signal_submitted`](crate::Timeline::signal_submitted)):
    /// the frame that uses it has not been submitted, so the copy has nothing to wait for.
    UnsubmittedUse,
    /// The new `VkBuffer`'s (`VkImage`'s) memory requirements do not fit the planned place (or
    /// no copy alias could be bound over the old or new range).
    Requirements,
    /// An image without both `COPY_SRC` and `COPY_DST` usage (images are copied with
    /// `vkCmdCopyImage`; optimal images cannot be aliased for the copy as buffers are).
    NoCopyUsage,
    /// A use declared on it has not completed (a frame in flight uses it):
    /// [`Defragmenter::relieve`] never moves it between tiers under that frame.
    InFlight,
}

/// What one pass did.
#[derive(Debug, Default)]
pub struct DefragStats {
    /// Buffers and images moved.
    pub moves: u32,
    /// Bytes copied (the moved resources' allocations).
    pub bytes_moved: u64,
    /// Heaps the pass left with no live resource. Each takes no new allocation and is freed when
    /// the old ranges retire (after the copy and every use declared on the old resources).
    pub heaps_emptied: u32,
    /// Heaps the pass created to repack into ([`DefragDesc::repack`]), and their bytes.
    pub heaps_created: u32,
    /// Bytes of the heaps created.
    pub heap_bytes_created: u64,
    /// A new heap to repack into could not be made (out of device memory or budget): the pass
    /// moved only into existing heaps' holes (and kept every part-drained heap's mark).
    pub repack_out_of_memory: bool,
    /// Buffers handed to the pass that it refused to consider, by their index in the slice.
    pub unmovable: Vec<(usize, Unmovable)>,
    /// Images handed to [`Defragmenter::pass_with_images`] that it refused, by their index.
    pub unmovable_images: Vec<(usize, Unmovable)>,
    /// CPU time the pass took (planning, creating, recording, submitting; not the GPU's copy).
    pub cpu_time: Duration,
    /// The copy submission, when anything moved: wait for it (or declare uses after it) before
    /// another queue touches a moved buffer. Residency's own submissions and the universal queue
    /// are ordered after it already (its last barrier covers every later command on the queue).
    pub submission: Option<Submission>,
}

/// Totals over a defragmenter's passes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DefragTotals {
    /// Passes run (refused ones included, failed ones not).
    pub passes: u64,
    /// Buffers and images moved.
    pub moves: u64,
    /// Bytes copied.
    pub bytes_moved: u64,
    /// Heaps emptied.
    pub heaps_emptied: u64,
    /// CPU time.
    pub cpu_time: Duration,
}

/// A pass failed; every resource is where it was (layouts included) and nothing is left allocated.
#[derive(Debug, thiserror::Error)]
pub enum DefragError {
    /// Creating or binding a new buffer or image failed (out of memory included).
    #[error(transparent)]
    Memory(#[from] MemoryError),
    /// The copy's submission failed.
    #[error(transparent)]
    Vulkan(#[from] VulkanError),
}

impl ResidencyError for DefragError {
    fn class(&self) -> ErrorClass {
        match self {
            DefragError::Memory(e) => e.class(),
            DefragError::Vulkan(e) => e.class(),
        }
    }
}

/// Carries out defragmentation passes on one device. See the module documentation.
///
/// ```no_run
/// # fn f(device: &residency_vulkan::Device, buffers: &mut [residency_vulkan::Buffer]) -> Result<(), Box<dyn std::error::Error>> {
/// use residency_vulkan::{DefragDesc, Defragmenter};
/// let mut defrag = Defragmenter::new(device, DefragDesc::default())?;
/// let mut movable: Vec<&mut residency_vulkan::Buffer> = buffers.iter_mut().collect();
/// let stats = defrag.pass(&mut movable)?;
/// println!("{} moves, {} B, {} heaps emptied in {:?}", stats.moves, stats.bytes_moved, stats.heaps_emptied, stats.cpu_time);
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct Defragmenter {
    device: Arc<Device>,
    commands: CommandContext,
    /// The copies of [`Defragmenter::relieve`], on the device's moves queue.
    moves: CommandContext,
    desc: DefragDesc,
    totals: DefragTotals,
    /// Written before and after the copies of each pass (measurement only).
    timestamps: Timestamps,
    /// Heaps an earlier pass left part drained (repacking), by their heaps' key, slot and name
    /// (unique within a list): described as draining to the next plan, which puts nothing into
    /// them and goes on draining them.
    draining: Vec<(HeapsKey, u32, String)>,
}

/// A set of heaps' key ([`Heaps::key`]).
type HeapsKey = (u8, u64, u32);

/// A heap a plan left part drained: its heaps' key, slot and name (`None`: a list's marks are
/// replaced by the ones after it).
type DrainMark = (HeapsKey, u32, Option<String>);

/// What planning a pass's lists gives besides the staged moves.
#[derive(Default)]
struct PlanOutcome {
    /// Heaps the plans empty: (heaps' key, block slot).
    emptied: Vec<(HeapsKey, u32)>,
    /// The lists' new part-drained marks.
    draining: Vec<DrainMark>,
    /// A repacking heap could not be made.
    repack_refused: bool,
}

/// The heaps a buffer lives in: one memory type of the device's general allocator, or one arena
/// of a buffer pool's pages. Moves stay within their heaps' owner.
#[derive(Clone)]
enum Heaps {
    General(u32),
    Pool(Arc<PoolArena>),
}

impl Heaps {
    fn lock<'a>(&'a self, device: &'a Device) -> MutexGuard<'a, BlockList> {
        let list = match self {
            Heaps::General(list) => &device.general[*list as usize],
            Heaps::Pool(arena) => arena.pages(),
        };
        list.locked()
    }

    /// An order and identity: general heaps by memory type, then pools by id and arena.
    fn key(&self) -> (u8, u64, u32) {
        match self {
            Heaps::General(type_index) => (0, 0, *type_index),
            Heaps::Pool(arena) => (1, arena.pool().identity().0, u32::from(arena.index())),
        }
    }

    fn type_index(&self, device: &Device) -> u32 {
        match self {
            Heaps::General(list) => device.list_type(*list),
            Heaps::Pool(arena) => arena.pool().identity().2,
        }
    }

    /// Where an allocation of these heaps returns when it is freed.
    fn memory(&self, allocation: BlockAllocation) -> ResourceMemory {
        match self {
            Heaps::General(list) => ResourceMemory::General { list: *list, allocation },
            Heaps::Pool(arena) => ResourceMemory::Sub {
                owner: Some(Arc::downgrade(arena) as _),
                allocation: SubAllocation::Block { arena: arena.index(), allocation },
            },
        }
    }

    /// The usage of the `VkBuffer` a range buffer of these heaps is a range of (a known-flags
    /// pool's page buffer).
    fn page_usage(&self) -> BufferUsage {
        match self {
            Heaps::Pool(arena) => match arena.pool().identity().1 {
                BufferPoolUsage::Known(usage) => usage,
                BufferPoolUsage::Unknown => BufferUsage::empty(),
            },
            Heaps::General(_) => BufferUsage::empty(),
        }
    }
}

/// What a move moves: a buffer or an image, by its index in the slice handed to the pass.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Target {
    Buffer(usize),
    Image(usize),
}

/// A resource the pass may move, as its memory says.
struct Candidate {
    target: Target,
    heaps: Heaps,
    block: u32,
    offset: u64,
    /// The allocation's size (what a new place must hold).
    size: u64,
    waits: Vec<GpuUse>,
}

/// One move being staged: its destination and the objects made for it.
struct Staged {
    target: Target,
    heaps: Heaps,
    /// The source heap (block slot), for counting emptied heaps.
    from_block: u32,
    destination: Option<BlockAllocation>,
    memory: vk::DeviceMemory,
    offset: u64,
    memory_size: u64,
    mapped: Option<MappedPtr>,
    /// The destination page's buffer (a known-flags pool's range buffer), else null.
    page_buffer: vk::Buffer,
    /// The new `VkBuffer` (null for a range of a page buffer).
    raw: vk::Buffer,
    /// Copy aliases (a `COPY_SRC` buffer over the old range, a `COPY_DST` one over the new), when
    /// the buffer's own usage (a range's: its page buffer's) lacks the bit; else null and the
    /// buffer itself is used.
    src_alias: vk::Buffer,
    dst_alias: vk::Buffer,
    /// An image's new `VkImage` (null for buffers), its size and its layout record.
    image: vk::Image,
    image_size: u64,
    layouts: Option<Arc<Layouts>>,
    waits: Vec<GpuUse>,
}

/// How the work submitted after a pass's copies is ordered after them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum LaterWork {
    /// All of it, by a barrier at the end of the copies (a defragmentation pass).
    Ordered,
    /// Only the work that uses a moved resource, through the semaphore wait its recording adds
    /// (a pass under pressure: [`Defragmenter::relieve`], whose copies run on the device's moves
    /// queue).
    PerResource,
}

/// The resources handed to a pass.
struct Movable<'r, 'b, 'i> {
    buffers: &'r mut [&'b mut Buffer],
    images: &'r mut [&'i mut Image],
}

/// The moves of a pass until they are committed: dropping it destroys what was made (never used
/// by the GPU) and gives the destinations back, so an error anywhere leaves everything as it was.
struct Stage<'a> {
    device: &'a Device,
    moves: Vec<Staged>,
    /// Heaps made for repacking: freed again when the pass fails (nothing is left in them).
    new_heaps: Vec<(Heaps, u32)>,
}

impl Staged {
    /// A buffer move to `destination` in `block` of `heaps`, nothing made for it yet.
    fn to_block(
        target: Target,
        heaps: Heaps,
        from_block: u32,
        block: &crate::device::blocks::MemoryBlock,
        destination: BlockAllocation,
        waits: Vec<GpuUse>,
    ) -> Staged {
        Staged {
            target,
            heaps,
            from_block,
            offset: destination.allocation.offset(),
            destination: Some(destination),
            memory: block.memory,
            memory_size: block.size,
            mapped: block.mapped,
            page_buffer: block.page_buffer.unwrap_or_default(),
            raw: vk::Buffer::null(),
            src_alias: vk::Buffer::null(),
            dst_alias: vk::Buffer::null(),
            image: vk::Image::null(),
            image_size: 0,
            layouts: None,
            waits,
        }
    }
}

impl Stage<'_> {
    fn undo(&self, m: &mut Staged) {
        for raw in [&mut m.raw, &mut m.src_alias, &mut m.dst_alias] {
            if *raw != vk::Buffer::null() {
                // SAFETY: made by this pass on this device, never submitted (the pass commits
                // only after its submission succeeded), and no handle to it was given out.
                unsafe { self.device.raw().destroy_buffer(*raw, None) };
                *raw = vk::Buffer::null();
            }
        }
        if m.image != vk::Image::null() {
            // SAFETY: as above, for the image made by this pass.
            unsafe { self.device.raw().destroy_image(m.image, None) };
            m.image = vk::Image::null();
        }
        if let Some(destination) = m.destination.take() {
            m.heaps.lock(self.device).free(self.device, destination);
        }
    }
}

impl Drop for Stage<'_> {
    fn drop(&mut self) {
        let mut moves = std::mem::take(&mut self.moves);
        for m in &mut moves {
            self.undo(m);
        }
        for (heaps, slot) in std::mem::take(&mut self.new_heaps) {
            heaps.lock(self.device).remove_if_empty(self.device, slot);
        }
    }
}

impl Defragmenter {
    /// A defragmenter for `device`, with its own command context for the copies.
    pub fn new(device: &Device, desc: DefragDesc) -> Result<Defragmenter, VulkanError> {
        let commands = CommandContext::new(device, "defragmenter")?;
        let moves = CommandContext::on_lane(device, "defragmenter moves", Lane::Moves)?;
        let timestamps = Timestamps::new(device, "defragmenter timestamps", 2)?;
        Ok(Defragmenter {
            device: device.arc(),
            commands,
            moves,
            desc,
            totals: DefragTotals::default(),
            timestamps,
            draining: Vec::new(),
        })
    }

    /// GPU time of the last pass's copies in milliseconds (timestamps before and after them),
    /// once its submission has completed; `None` before that, when no pass copied anything yet,
    /// or when the queue has no timestamps.
    pub fn last_copy_gpu_ms(&self) -> Option<f64> {
        self.timestamps.elapsed_ms(0, 1)
    }

    /// Its budget per pass.
    pub fn desc(&self) -> DefragDesc {
        self.desc
    }

    /// Totals over its passes.
    pub fn totals(&self) -> DefragTotals {
        self.totals
    }

    /// One pass over `movable`: per set of heaps (a memory type of the device's general
    /// allocator, an arena of a buffer pool), plans moves that empty the most-empty heaps into the
    /// fullest heaps' free ranges (within the per-pass budget), creates each moved buffer's new
    /// `VkBuffer` with the same size and usage at its destination (a known-flags pool's range
    /// becomes a range of the destination page's buffer), copies the contents in one submission
    /// (waiting on the GPU for every use declared on the moved buffers with `used_until` on a
    /// timeline; barriers before and after order it against all other work on the universal
    /// queue), and swaps the handles' internals. The old `VkBuffer` and range retire through the
    /// device's deferred destruction after the copy and those uses.
    ///
    /// Buffers it refuses are listed in [`DefragStats::unmovable`]. On an error (out of memory
    /// creating a buffer, a failed submission) every buffer is where it was and nothing is left
    /// allocated.
    pub fn pass(&mut self, buffers: &mut [&mut Buffer]) -> Result<DefragStats, DefragError> {
        self.pass_with_images(buffers, &mut [])
    }

    /// [`Defragmenter::pass`] over buffers and images of the device's general heaps, planned
    /// together (they share heaps). An image moves when it is placed (not committed, not a
    /// transient pool's), has `COPY_SRC` and `COPY_DST` usage, and nothing else holds it (a view,
    /// a descriptor set, a tracker, a recording, a queued upload). Its new `VkImage` has the same
    /// description; every subresource that is not `UNDEFINED` is copied through
    /// `TRANSFER_SRC_OPTIMAL` → `TRANSFER_DST_OPTIMAL` and returned to the layout it was in
    /// (`PREINITIALIZED` becomes `GENERAL`), so the image's layouts in submission order are what
    /// they were; `UNDEFINED` subresources stay `UNDEFINED` and are not copied.
    pub fn pass_with_images(
        &mut self,
        buffers: &mut [&mut Buffer],
        images: &mut [&mut Image],
    ) -> Result<DefragStats, DefragError> {
        let mut movable = Movable { buffers, images };
        self.run(&mut movable)
    }

    fn run(&mut self, movable: &mut Movable<'_, '_, '_>) -> Result<DefragStats, DefragError> {
        let start = Instant::now();
        let device = Arc::clone(&self.device);
        let device = &*device;
        device.maintain();
        let mut stats = DefragStats::default();
        let mut candidates = self.candidates(movable.buffers, &mut stats);
        candidates.extend(self.image_candidates(movable.images, &mut stats));
        let mut stage = Stage { device, moves: Vec::new(), new_heaps: Vec::new() };
        let mut outcome = PlanOutcome::default();
        let mut budget =
            DefragBudget { bytes: self.desc.max_bytes_per_pass, moves: self.desc.max_moves_per_pass };
        let mut owners: Vec<Heaps> = Vec::new();
        for c in &candidates {
            if !owners.iter().any(|h| h.key() == c.heaps.key()) {
                owners.push(c.heaps.clone());
            }
        }
        owners.sort_by_key(Heaps::key);
        for heaps in owners {
            let before = stage.moves.len();
            self.plan_heaps(&heaps, &candidates, budget, &mut stage, &mut outcome)?;
            let planned = &stage.moves[before..];
            budget.moves = budget.moves.saturating_sub(planned.len() as u32);
            budget.bytes = budget.bytes.saturating_sub(
                planned
                    .iter()
                    .map(|m| m.destination.as_ref().map_or(0, |d| d.allocation.size()))
                    .sum::<u64>(),
            );
        }
        // Create, check and bind the new buffers (and the copy aliases).
        let mut index = 0;
        while index < stage.moves.len() {
            let created = match stage.moves[index].target {
                Target::Buffer(i) => Self::create(device, &*movable.buffers[i], &mut stage.moves[index]),
                Target::Image(i) => Self::create_image(device, &*movable.images[i], &mut stage.moves[index]),
            };
            match created? {
                true => index += 1,
                false => {
                    let mut m = stage.moves.remove(index);
                    match m.target {
                        Target::Buffer(i) => stats.unmovable.push((i, Unmovable::Requirements)),
                        Target::Image(i) => stats.unmovable_images.push((i, Unmovable::Requirements)),
                    }
                    stage.undo(&mut m);
                }
            }
        }
        let mut copy = None;
        if !stage.moves.is_empty() {
            let submission = self.copy(&stage, movable, LaterWork::Ordered)?;
            copy = Some(submission.gpu_use());
            stats.submission = Some(submission);
        }
        // Committed: swap the handles' internals; the old lives retire behind the copy.
        let moves = std::mem::take(&mut stage.moves);
        for (heaps, slot) in std::mem::take(&mut stage.new_heaps) {
            // A new heap whose every move was dropped (requirements) is not kept.
            let mut list = heaps.lock(device);
            list.remove_if_empty(device, slot);
            if let Some(block) = list.blocks.get(slot as usize).and_then(Option::as_ref) {
                stats.heaps_created += 1;
                stats.heap_bytes_created += block.size;
            }
        }
        drop(stage);
        stats.bytes_moved =
            moves.iter().map(|m| m.destination.as_ref().map_or(0, |d| d.allocation.size())).sum();
        stats.moves = moves.len() as u32;
        stats.repack_out_of_memory = outcome.repack_refused;
        let emptied: Vec<(HeapsKey, u32)> = outcome
            .emptied
            .into_iter()
            .filter(|&(key, slot)| {
                let Some(heaps) = moves.iter().find(|m| m.heaps.key() == key).map(|m| &m.heaps) else {
                    return false;
                };
                let list = heaps.lock(device);
                let live = list
                    .blocks
                    .get(slot as usize)
                    .and_then(Option::as_ref)
                    .map_or(0, |b| b.allocator.allocation_count());
                let leaving = moves.iter().filter(|m| m.heaps.key() == key && m.from_block == slot).count();
                live == leaving as u64
            })
            .collect();
        stats.heaps_emptied = emptied.len() as u32;
        // An emptied heap takes no new allocation and goes when its old ranges retire.
        for &(key, slot) in &emptied {
            if let Some(m) = moves.iter().find(|m| m.heaps.key() == key) {
                if let Some(block) =
                    m.heaps.lock(device).blocks.get_mut(slot as usize).and_then(Option::as_mut)
                {
                    block.draining = true;
                }
            }
        }
        // Heaps of lists this pass did not plan keep their mark (their buffers were not handed).
        let planned: Vec<HeapsKey> = outcome.draining.iter().map(|(k, _, _)| *k).collect();
        self.draining.retain(|(k, _, _)| !planned.contains(k));
        self.draining
            .extend(outcome.draining.into_iter().filter_map(|(k, slot, name)| name.map(|n| (k, slot, n))));
        if let Some(copy) = copy {
            for m in moves {
                match m.target {
                    Target::Buffer(i) => Self::commit(device, &mut *movable.buffers[i], m, copy),
                    Target::Image(i) => Self::commit_image(&mut *movable.images[i], m),
                }
            }
        }
        stats.cpu_time = start.elapsed();
        self.totals.passes += 1;
        self.totals.moves += u64::from(stats.moves);
        self.totals.bytes_moved += stats.bytes_moved;
        self.totals.heaps_emptied += u64::from(stats.heaps_emptied);
        self.totals.cpu_time += stats.cpu_time;
        Ok(stats)
    }

    /// The buffers that may move, with their place; the others go to `stats.unmovable`.
    /// What a move's copy must wait for, from a resource's declared uses: the renderer's points
    /// (residency's own clocks need no wait: its submissions are on this queue, ordered by the
    /// copy's first barrier, and every submission waits for the binds before it). A use counted in
    /// frames cannot be waited for on the GPU, and one whose signal was never announced may never
    /// come: such a resource stays where it is.
    fn copy_waits(&self, life: &Life) -> Result<Vec<GpuUse>, Unmovable> {
        let uses = life.declared_uses();
        if uses.points().iter().any(|p| p.clock == FRAMES) {
            return Err(Unmovable::FrameCountedUse);
        }
        if !uses.points().iter().all(|&point| self.device.is_reachable(point)) {
            return Err(Unmovable::UnsubmittedUse);
        }
        Ok(uses
            .points()
            .iter()
            .filter(|p| p.clock != UNIVERSAL && p.clock != SPARSE)
            .map(|&point| GpuUse { device: self.device.uid(), point })
            .collect())
    }

    /// Why a buffer handed to a pass may not move at all, if it may not.
    fn refusal(&self, buffer: &Buffer) -> Option<Unmovable> {
        if !buffer.device().is(&self.device) {
            Some(Unmovable::OtherDevice)
        } else if buffer.placement() == BufferPlacement::Committed {
            Some(Unmovable::NotPlaced)
        } else if !buffer.is_movable() {
            Some(Unmovable::Pinned)
        } else if Arc::strong_count(buffer.life()) != 1 || Arc::weak_count(buffer.life()) != 0 {
            // `&mut` to the only handle: nobody can clone the life while the pass runs.
            Some(Unmovable::Shared)
        } else {
            None
        }
    }

    fn candidates(&self, movable: &[&mut Buffer], stats: &mut DefragStats) -> Vec<Candidate> {
        let mut out = Vec::new();
        for (index, buffer) in movable.iter().enumerate() {
            if let Some(refused) = self.refusal(buffer) {
                stats.unmovable.push((index, refused));
                continue;
            }
            let placed = match buffer.life().garbage() {
                Some(Garbage::Buffer { memory: ResourceMemory::General { list, allocation }, .. }) => {
                    Some((Heaps::General(*list), allocation))
                }
                Some(Garbage::Buffer {
                    memory: ResourceMemory::Sub { owner, allocation: SubAllocation::Block { allocation, .. } },
                    ..
                }) => {
                    // The buffer's life holds its pool's arena (its parent), so it is there; a
                    // buffer pool is the only sub-allocator handing out page ranges the
                    // defragmenter moves. No `Weak` of its own: the arena is that parent.
                    let owner = match owner {
                        Some(owner) => owner.upgrade(),
                        None => buffer.life().sub_allocator(),
                    };
                    let arena = owner.and_then(|o| o.as_any().downcast::<PoolArena>().ok());
                    arena.map(|arena| (Heaps::Pool(arena), allocation))
                }
                _ => None,
            };
            let Some((heaps, allocation)) = placed else {
                stats.unmovable.push((index, Unmovable::NotPlaced));
                continue;
            };
            let waits = match self.copy_waits(buffer.life()) {
                Ok(waits) => waits,
                Err(reason) => {
                    stats.unmovable.push((index, reason));
                    continue;
                }
            };
            out.push(Candidate {
                target: Target::Buffer(index),
                heaps,
                block: allocation.block,
                offset: allocation.allocation.offset(),
                size: allocation.allocation.size(),
                waits,
            });
        }
        out
    }

    /// Plans the moves within one set of heaps and takes their destinations (under the heaps'
    /// lock, so they cannot change between the plan and the destinations).
    fn plan_heaps(
        &self,
        heaps: &Heaps,
        candidates: &[Candidate],
        budget: DefragBudget,
        stage: &mut Stage<'_>,
        out: &mut PlanOutcome,
    ) -> Result<(), DefragError> {
        let PlanOutcome { emptied, draining, repack_refused } = out;
        let device = &*self.device;
        let here: HashMap<(u32, u64), &Candidate> = candidates
            .iter()
            .filter(|c| c.heaps.key() == heaps.key())
            .map(|c| ((c.block, c.offset), c))
            .collect();
        let mut list = heaps.lock(device);
        // Heaps an earlier pass emptied are neither sources nor destinations: they go once their
        // old ranges retire.
        let slots: Vec<u32> = list
            .blocks
            .iter()
            .enumerate()
            .filter(|(_, b)| b.as_ref().is_some_and(|b| !b.draining))
            .map(|(i, _)| i as u32)
            .collect();
        let described: Vec<DefragHeap> = slots
            .iter()
            .map(|&slot| {
                let block = list.block(slot);
                let blocks = block
                    .allocator
                    .blocks()
                    .filter_map(|b| {
                        let BlockState::Used { kind, alignment } = b.state else { return None };
                        let candidate = here.get(&(slot, b.offset));
                        Some(LiveBlock {
                            offset: b.offset,
                            footprint: b.size,
                            size: candidate.map_or(b.size, |c| c.size),
                            alignment,
                            kind,
                            movable: candidate.is_some(),
                        })
                    })
                    .collect();
                let key = heaps.key();
                let draining =
                    self.draining.iter().any(|(k, s, name)| *k == key && *s == slot && *name == block.name);
                DefragHeap {
                    capacity: block.size,
                    granularity: block.allocator.granularity(),
                    blocks,
                    draining,
                }
            })
            .collect();
        // New heaps are at most the list's page size (no larger than the heaps it makes itself).
        let repack = self
            .desc
            .repack
            .filter(|_| !list.fixed_size)
            .map(|r| Repack { max_heap: r.max_heap.min(list.growth.page_size), ..r });
        let mut plan = match plan_defragmentation_with(&described, budget, repack) {
            Ok(plan) => plan,
            Err(e) => {
                tracing::error!(list = %list.name, error = %e, "the heaps' own layout was refused by the planner");
                return Ok(());
            }
        };
        let before = stage.moves.len();
        // The new heap first. Out of memory (or budget) for it: the moves into existing holes need
        // no new memory, so plan those alone (memory is tight: the moment to give some back).
        let mut new_slots = Vec::with_capacity(plan.new_heaps.len());
        let mut refused_here = false;
        for new in &plan.new_heaps {
            match list.add_block(device, new.capacity) {
                Ok(slot) => {
                    stage.new_heaps.push((heaps.clone(), slot));
                    new_slots.push(slot);
                }
                Err(MemoryError::OutOfDeviceMemory { .. } | MemoryError::OutOfBudget { .. }) => {
                    refused_here = true;
                    *repack_refused = true;
                    plan = plan_defragmentation_with(&described, budget, None)
                        .expect("the same input was accepted with repacking");
                    break;
                }
                Err(e) => return Err(e.into()),
            }
        }
        if !plan.new_heaps.is_empty() && new_slots.is_empty() {
            plan.new_heaps.clear();
        }
        let slot_of = |h: usize| slots.get(h).copied().unwrap_or_else(|| new_slots[h - slots.len()]);
        for m in &plan.moves {
            let (from, to) = (slots[m.heap], slot_of(m.to_heap));
            let live = described[m.heap].blocks[m.block];
            let candidate = here[&(from, live.offset)];
            let block = list.blocks[to as usize].as_mut().expect("a planned heap is live");
            let taken = block.allocator.allocate_at(m.to_offset, candidate.size, live.alignment, live.kind);
            let allocation = match taken {
                Ok(allocation) => allocation,
                Err(e) => {
                    // The planner mirrors the allocator, so this is a bug: give back what this
                    // plan took and move nothing of these heaps.
                    tracing::error!(list = %list.name, error = %e, "a planned destination was refused");
                    let mut undone: Vec<Staged> = stage.moves.drain(before..).collect();
                    drop(list);
                    for m in &mut undone {
                        stage.undo(m);
                    }
                    return Ok(());
                }
            };
            let destination = BlockAllocation { block: to, allocation };
            let waits = candidate.waits.clone();
            stage.moves.push(Staged::to_block(
                candidate.target,
                heaps.clone(),
                from,
                block,
                destination,
                waits,
            ));
        }
        emptied.extend(plan.emptied.iter().map(|&h| (heaps.key(), slots[h])));
        // This list's marks are replaced by the plan's (a `None` name: none left), unless the
        // plan could not repack: then they stay for a pass that can.
        if !refused_here {
            draining.push((heaps.key(), u32::MAX, None));
            draining.extend(
                plan.draining
                    .iter()
                    .map(|&h| (heaps.key(), slots[h], Some(list.block(slots[h]).name.clone()))),
            );
        }
        Ok(())
    }

    /// Creates and binds the new buffer (none for a range of a page buffer) and the copy aliases
    /// of one move. `Ok(false)`: the requirements do not fit the planned place (the move is
    /// dropped); an error fails the pass.
    fn create(device: &Device, buffer: &Buffer, m: &mut Staged) -> Result<bool, MemoryError> {
        let type_index = m.heaps.type_index(device);
        let fits = |requirements: residency_core::profile::MemoryRequirements, offset: u64, room: u64| {
            requirements.memory_type_bits & (1 << type_index) != 0
                && offset % requirements.alignment.max(1) == 0
                && requirements.size <= room
        };
        let room = m.destination.as_ref().map_or(0, |d| d.allocation.size());
        let range = buffer.placement() == BufferPlacement::Range;
        // What the copy can use directly: the buffer's own usage, or its page buffer's.
        let copy_usage = if range { m.heaps.page_usage() } else { buffer.usage() };
        if !range {
            let (raw, requirements) =
                create_raw_buffer(device, buffer.name(), buffer.size(), buffer.usage())?;
            m.raw = raw;
            if !fits(requirements, m.offset, room) {
                return Ok(false);
            }
            // On failure the bind destroys the buffer.
            let bound = bind_buffer(device, raw, m.memory, m.offset);
            if bound.is_err() {
                m.raw = vk::Buffer::null();
            }
            bound?;
        }
        let old_room = match buffer.life().garbage() {
            Some(Garbage::Buffer {
                memory:
                    ResourceMemory::General { allocation, .. }
                    | ResourceMemory::Sub { allocation: SubAllocation::Block { allocation, .. }, .. },
                ..
            }) => allocation.allocation.size(),
            _ => 0,
        };
        let aliases = [
            (BufferUsage::COPY_SRC, "source", buffer.memory().0, buffer.memory().1, old_room),
            (BufferUsage::COPY_DST, "destination", m.memory, m.offset, room),
        ];
        for (usage, what, memory, offset, room) in aliases {
            if copy_usage.contains(usage) {
                continue;
            }
            let name = format!("{} (move {what})", buffer.name());
            let (alias, requirements) = create_raw_buffer(device, &name, buffer.size(), usage)?;
            let slot = if usage == BufferUsage::COPY_SRC { &mut m.src_alias } else { &mut m.dst_alias };
            *slot = alias;
            if !fits(requirements, offset, room) {
                return Ok(false);
            }
            let bound = bind_buffer(device, alias, memory, offset);
            if bound.is_err() {
                *slot = vk::Buffer::null();
            }
            bound?;
        }
        Ok(true)
    }

    /// Records and submits the copies of every staged move: on the universal queue after every
    /// earlier command there and before every later one ([`LaterWork::Ordered`]), or on the
    /// device's moves queue after every earlier universal submission (a semaphore wait) and every
    /// earlier command of the moves queue, before the host's reads only
    /// ([`LaterWork::PerResource`]: the caller marks each moved resource's life with the copy,
    /// which the recordings that use it wait for).
    fn copy(
        &self,
        stage: &Stage<'_>,
        movable: &Movable<'_, '_, '_>,
        later: LaterWork,
    ) -> Result<Submission, VulkanError> {
        let device = &*self.device;
        let mut waits: Vec<GpuUse> = stage.moves.iter().flat_map(|m| m.waits.iter().copied()).collect();
        // A buffer an earlier pass under pressure moved: after the copy that filled it (on the
        // moves queue, which this queue's barriers do not reach).
        for m in &stage.moves {
            if let Target::Buffer(i) = m.target {
                waits.extend(movable.buffers[i].life().pending_fill());
            }
        }
        waits.sort_by_key(|w| (w.point.clock.0, std::cmp::Reverse(w.point.value)));
        waits.dedup_by_key(|w| w.point.clock);
        let mut copies: Vec<(vk::Buffer, vk::Buffer, vk::BufferCopy)> = Vec::new();
        let mut images = ImageCopies::default();
        for m in &stage.moves {
            match m.target {
                Target::Buffer(i) => {
                    let buffer = &*movable.buffers[i];
                    let (src, src_offset) = match m.src_alias {
                        alias if alias != vk::Buffer::null() => (alias, 0),
                        _ => (buffer.raw(), buffer.offset()),
                    };
                    let (dst, dst_offset) = match m.dst_alias {
                        alias if alias != vk::Buffer::null() => (alias, 0),
                        _ if m.raw != vk::Buffer::null() => (m.raw, 0),
                        _ => (m.page_buffer, m.offset),
                    };
                    copies.push((src, dst, vk::BufferCopy { src_offset, dst_offset, size: buffer.size() }));
                }
                Target::Image(i) => images.add(&*movable.images[i], m),
            }
        }
        let before = [vk::MemoryBarrier2::default()
            .src_stage_mask(vk::PipelineStageFlags2::ALL_COMMANDS)
            .src_access_mask(vk::AccessFlags2::MEMORY_WRITE)
            .dst_stage_mask(vk::PipelineStageFlags2::COPY)
            .dst_access_mask(vk::AccessFlags2::TRANSFER_READ | vk::AccessFlags2::TRANSFER_WRITE)];
        let after = match later {
            LaterWork::Ordered => [vk::MemoryBarrier2::default()
                .src_stage_mask(vk::PipelineStageFlags2::COPY)
                .src_access_mask(vk::AccessFlags2::TRANSFER_WRITE)
                .dst_stage_mask(vk::PipelineStageFlags2::ALL_COMMANDS | vk::PipelineStageFlags2::HOST)
                .dst_access_mask(
                    vk::AccessFlags2::MEMORY_READ
                        | vk::AccessFlags2::MEMORY_WRITE
                        | vk::AccessFlags2::HOST_READ,
                )],
            // Only the host's reads (a buffer's `read` waits for the copy on the CPU): the GPU's
            // later work waits for the submission's signal where it uses a moved resource.
            LaterWork::PerResource => [vk::MemoryBarrier2::default()
                .src_stage_mask(vk::PipelineStageFlags2::COPY)
                .src_access_mask(vk::AccessFlags2::TRANSFER_WRITE)
                .dst_stage_mask(vk::PipelineStageFlags2::HOST)
                .dst_access_mask(vk::AccessFlags2::HOST_READ | vk::AccessFlags2::HOST_WRITE)],
        };
        let commands = match later {
            LaterWork::Ordered => &self.commands,
            LaterWork::PerResource => &self.moves,
        };
        commands.submit(&waits, |rec| {
            // Measurement only: a timestamp not written reads as `None`.
            self.timestamps.cmd_reset(rec, 0..2).ok();
            self.timestamps.cmd_write(rec, 0).ok();
            // The layouts the submission checks (the old image's at the start) and applies.
            for t in &images.transitions {
                let (mips, layers) = (t.mip..t.mip + 1, t.layer..t.layer + 1);
                rec.transition(
                    &t.old,
                    mips.clone(),
                    layers.clone(),
                    t.layout,
                    vk::ImageLayout::TRANSFER_SRC_OPTIMAL,
                );
                rec.transition(&t.new, mips, layers, vk::ImageLayout::UNDEFINED, t.final_layout);
            }
            let cmd = rec.raw();
            // SAFETY: the command buffer is recording on this device outside a render pass (the
            // `Recording` invariant) and is left so. Every buffer source is a live buffer of this
            // device with COPY_SRC usage over the moved buffer's bytes (the buffer, its page
            // buffer at its range offset, or an alias bound over them), every destination one with
            // COPY_DST usage over the planned place (the new buffer, the destination page's
            // buffer at the planned offset, or an alias), all kept alive until they retire behind
            // this submission; each region is the buffer's size, inside both. Every image source
            // is a live image with COPY_SRC usage whose subresources are in the layouts the
            // barriers name (the submission checks them: the transitions noted above), every image
            // destination a new image of the same description with COPY_DST usage, bound at its
            // planned place; each region is one whole subresource. The destinations are ranges no
            // live resource holds, so no copy overlaps another or its own source. The barriers
            // order the copies after every earlier command on the queue, transition the images
            // around them, and order every later command after them (`LaterWork::Ordered`) or
            // the host's accesses only (`LaterWork::PerResource`: the caller then has every
            // recording that uses a moved resource wait for this submission's signal).
            unsafe {
                let first = vk::DependencyInfo::default()
                    .memory_barriers(&before)
                    .image_memory_barriers(&images.before);
                device.raw().cmd_pipeline_barrier2(cmd, &first);
                for &(src, dst, region) in &copies {
                    device.raw().cmd_copy_buffer(cmd, src, dst, &[region]);
                }
                for (src, dst, regions) in &images.copies {
                    device.raw().cmd_copy_image(
                        cmd,
                        *src,
                        vk::ImageLayout::TRANSFER_SRC_OPTIMAL,
                        *dst,
                        vk::ImageLayout::TRANSFER_DST_OPTIMAL,
                        regions,
                    );
                }
                let last = vk::DependencyInfo::default()
                    .memory_barriers(&after)
                    .image_memory_barriers(&images.after);
                device.raw().cmd_pipeline_barrier2(cmd, &last);
            }
            self.timestamps.cmd_write(rec, 1).ok();
        })
    }

    /// Swaps a buffer's internals for its new place; the old life retires behind the copy (its
    /// last handle was the buffer's: checked when it became a candidate).
    fn commit(device: &Device, buffer: &mut Buffer, mut m: Staged, copy: GpuUse) {
        let destination = m.destination.take().expect("a staged move has its destination");
        let owner = m.heaps.memory(destination);
        let holder = match &m.heaps {
            Heaps::General(_) => Holder::Device(device.arc(), None),
            Heaps::Pool(arena) => {
                // The old life's release counts one buffer fewer.
                arena.count_moved();
                Holder::Parent(Arc::clone(arena) as Arc<dyn DeviceParent>)
            }
        };
        let object = if m.raw != vk::Buffer::null() {
            BufferObject::Placed(m.raw)
        } else {
            BufferObject::Range { page_buffer: m.page_buffer, offset: m.offset }
        };
        let memory =
            BufferMemory { memory: m.memory, offset: m.offset, memory_size: m.memory_size, mapped: m.mapped };
        // The old buffer and range wait for the copy (submitted before the rebind drops them) and
        // for the uses declared on them.
        buffer.rebind(MovedBuffer { object, owner, holder, memory, copy });
        for (alias, what) in [(m.src_alias, "source"), (m.dst_alias, "destination")] {
            if alias != vk::Buffer::null() {
                let id = device.ledger().track("buffer", format!("{} (move {what})", buffer.name()));
                let garbage = Garbage::Buffer { raw: alias, memory: ResourceMemory::Transient, id };
                device.retire(garbage, LastUses::none());
            }
        }
    }
}
