//! Defragmentation the library carries out: moves buffers placed in the device's general heaps
//! so that the most-empty heaps empty, copies their contents on the GPU, and swaps the handles'
//! internals, the old objects retiring behind the copy and every declared use.
//!
//! The renderer hands a pass the buffers that may move as `&mut`: no CPU alias can see the old
//! `VkBuffer` while the pass runs, and afterwards each handle names its new `VkBuffer`, memory and
//! offset with the same size, usage, name (debug name too) and state-tracking id. A buffer not
//! handed to the pass never moves. The plan is the core's
//! ([`residency_core::allocator::plan_defragmentation`]).

use crate::buffer::{bind_buffer, create_raw_buffer, Buffer, BufferPlacement};
use crate::commands::{CommandContext, Submission};
use crate::device::Device;
use crate::error::VulkanError;
use crate::memory::{BlockAllocation, MappedPtr, MemoryError};
use crate::resource_memory::ResourceMemory;
use crate::retire::{Garbage, GpuUse, Life, FRAMES, SPARSE, UNIVERSAL};
use ash::vk;
use residency_core::allocator::{plan_defragmentation, BlockState, DefragBudget, DefragHeap, LiveBlock};
use residency_core::sync::LastUses;
use residency_core::usage::BufferUsage;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// What one pass may move. Defaults: 64 MiB and 256 moves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DefragDesc {
    /// Bytes one pass may copy (the moved buffers' allocations).
    pub max_bytes_per_pass: u64,
    /// Buffers one pass may move.
    pub max_moves_per_pass: u32,
}

impl Default for DefragDesc {
    fn default() -> Self {
        DefragDesc { max_bytes_per_pass: 64 << 20, max_moves_per_pass: 256 }
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
}

/// Why a buffer handed to a pass was not considered for a move. It stays where it is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unmovable {
    /// It lives on another device than the defragmenter's.
    OtherDevice,
    /// It is not placed in the device's general heaps (committed memory, a pool's buffer, a
    /// transient buffer): this increment moves only [`Device::create_buffer`] placements.
    NotPlaced,
    /// The renderer pinned it ([`Buffer::set_movable`]).
    Pinned,
    /// Something else holds it: a descriptor set, a state tracker or a recording that names its
    /// `VkBuffer` (they would keep reading the old buffer). Drop or untrack them first.
    Shared,
    /// A use was declared in frames ([`Device::frames_from_now`]): no GPU event the copy can wait
    /// for. Declare it on a [`Timeline`](crate::Timeline) or a submission instead.
    FrameCountedUse,
    /// The new `VkBuffer`'s memory requirements do not fit the planned place (or no copy alias
    /// could be bound over the old or new range).
    Requirements,
}

/// What one pass did.
#[derive(Debug, Default)]
pub struct DefragStats {
    /// Buffers moved.
    pub moves: u32,
    /// Bytes copied (the moved buffers' allocations).
    pub bytes_moved: u64,
    /// Heaps the pass left with no live resource. Each is freed by the heap-release policy when
    /// the old ranges retire (after the copy and every use declared on the old buffers), unless it
    /// is the one empty heap a memory type keeps.
    pub heaps_emptied: u32,
    /// Buffers handed to the pass that it refused to consider, by their index in the slice.
    pub unmovable: Vec<(usize, Unmovable)>,
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
    /// Buffers moved.
    pub moves: u64,
    /// Bytes copied.
    pub bytes_moved: u64,
    /// Heaps emptied.
    pub heaps_emptied: u64,
    /// CPU time.
    pub cpu_time: Duration,
}

/// A pass failed; every buffer is where it was and nothing is left allocated.
#[derive(Debug, thiserror::Error)]
pub enum DefragError {
    /// Creating or binding a new buffer failed (out of memory included).
    #[error(transparent)]
    Memory(#[from] MemoryError),
    /// The copy's submission failed.
    #[error(transparent)]
    Vulkan(#[from] VulkanError),
}

/// Carries out defragmentation passes on one device. See the module documentation.
#[derive(Debug)]
pub struct Defragmenter {
    device: Arc<Device>,
    commands: CommandContext,
    desc: DefragDesc,
    totals: DefragTotals,
}

/// A buffer the pass may move, as its memory says.
struct Candidate {
    index: usize,
    type_index: u32,
    block: u32,
    offset: u64,
    /// The allocation's size (what a new place must hold).
    size: u64,
    waits: Vec<GpuUse>,
}

/// One move being staged: its destination and the objects made for it.
struct Staged {
    index: usize,
    type_index: u32,
    /// The source heap (block slot), for counting emptied heaps.
    from_block: u32,
    destination: Option<BlockAllocation>,
    memory: vk::DeviceMemory,
    offset: u64,
    memory_size: u64,
    mapped: Option<MappedPtr>,
    raw: vk::Buffer,
    /// Copy aliases (a `COPY_SRC` buffer over the old range, a `COPY_DST` one over the new), when
    /// the buffer's own usage lacks the bit; else null and the buffer itself is used.
    src_alias: vk::Buffer,
    dst_alias: vk::Buffer,
    waits: Vec<GpuUse>,
}

/// The moves of a pass until they are committed: dropping it destroys what was made (never used
/// by the GPU) and gives the destinations back, so an error anywhere leaves everything as it was.
struct Stage<'a> {
    device: &'a Device,
    moves: Vec<Staged>,
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
        if let Some(destination) = m.destination.take() {
            let mut list =
                self.device.general[m.type_index as usize].lock().unwrap_or_else(|e| e.into_inner());
            list.free(self.device, destination);
        }
    }
}

impl Drop for Stage<'_> {
    fn drop(&mut self) {
        let mut moves = std::mem::take(&mut self.moves);
        for m in &mut moves {
            self.undo(m);
        }
    }
}

impl Defragmenter {
    /// A defragmenter for `device`, with its own command context for the copies.
    pub fn new(device: &Device, desc: DefragDesc) -> Result<Defragmenter, VulkanError> {
        let commands = CommandContext::new(device, "defragmenter")?;
        Ok(Defragmenter { device: device.arc(), commands, desc, totals: DefragTotals::default() })
    }

    /// Its budget per pass.
    pub fn desc(&self) -> DefragDesc {
        self.desc
    }

    /// Totals over its passes.
    pub fn totals(&self) -> DefragTotals {
        self.totals
    }

    /// One pass over `movable`: plans moves that empty the most-empty general heaps into the
    /// fullest heaps' free ranges (within the per-pass budget), creates each moved buffer's new
    /// `VkBuffer` with the same size and usage at its destination, copies the contents in one
    /// submission (waiting on the GPU for every use declared on the moved buffers with
    /// `used_until` on a timeline; barriers before and after order it against all other work on
    /// the universal queue), and swaps the handles' internals. The old `VkBuffer` and range retire
    /// through the device's deferred destruction after the copy and those uses.
    ///
    /// Buffers it refuses are listed in [`DefragStats::unmovable`]. On an error (out of memory
    /// creating a buffer, a failed submission) every buffer is where it was and nothing is left
    /// allocated.
    pub fn pass(&mut self, movable: &mut [&mut Buffer]) -> Result<DefragStats, DefragError> {
        let start = Instant::now();
        let device = Arc::clone(&self.device);
        let device = &*device;
        device.maintain();
        let mut stats = DefragStats::default();
        let candidates = self.candidates(movable, &mut stats);
        let mut stage = Stage { device, moves: Vec::new() };
        // Heaps each plan empties: (memory type, block slot) and the moves that leave it.
        let mut emptied: Vec<(u32, u32)> = Vec::new();
        let mut budget =
            DefragBudget { bytes: self.desc.max_bytes_per_pass, moves: self.desc.max_moves_per_pass };
        let mut types: Vec<u32> = candidates.iter().map(|c| c.type_index).collect();
        types.sort_unstable();
        types.dedup();
        for type_index in types {
            let before = stage.moves.len();
            self.plan_type(type_index, &candidates, budget, &mut stage, &mut emptied);
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
            let buffer = &*movable[stage.moves[index].index];
            match Self::create(device, buffer, &mut stage.moves[index])? {
                true => index += 1,
                false => {
                    let mut m = stage.moves.remove(index);
                    stats.unmovable.push((m.index, Unmovable::Requirements));
                    stage.undo(&mut m);
                }
            }
        }
        let mut copy = None;
        if !stage.moves.is_empty() {
            let submission = self.copy(&stage, movable)?;
            copy = Some(submission.gpu_use());
            stats.submission = Some(submission);
        }
        // Committed: swap the handles' internals; the old lives retire behind the copy.
        let moves = std::mem::take(&mut stage.moves);
        drop(stage);
        for m in &moves {
            let size = m.destination.as_ref().map_or(0, |d| d.allocation.size());
            stats.bytes_moved += size;
        }
        stats.moves = moves.len() as u32;
        stats.heaps_emptied = emptied
            .iter()
            .filter(|&&(t, slot)| {
                let list = device.general[t as usize].lock().unwrap_or_else(|e| e.into_inner());
                let live = list
                    .blocks
                    .get(slot as usize)
                    .and_then(Option::as_ref)
                    .map_or(0, |b| b.allocator.allocation_count());
                let leaving = moves.iter().filter(|m| m.type_index == t && m.from_block == slot).count();
                live == leaving as u64
            })
            .count() as u32;
        if let Some(copy) = copy {
            for m in moves {
                Self::commit(device, &mut *movable[m.index], m, copy);
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
    fn candidates(&self, movable: &[&mut Buffer], stats: &mut DefragStats) -> Vec<Candidate> {
        let mut out = Vec::new();
        for (index, buffer) in movable.iter().enumerate() {
            let refuse = |reason| Some((index, reason));
            let refused = if !buffer.device().is(&self.device) {
                refuse(Unmovable::OtherDevice)
            } else if buffer.placement != BufferPlacement::Placed || buffer.pool.is_some() {
                refuse(Unmovable::NotPlaced)
            } else if !buffer.movable {
                refuse(Unmovable::Pinned)
            } else if Arc::strong_count(&buffer.life) != 1 || Arc::weak_count(&buffer.life) != 0 {
                // `&mut` to the only handle: nobody can clone the life while the pass runs.
                refuse(Unmovable::Shared)
            } else {
                None
            };
            if let Some(refused) = refused {
                stats.unmovable.push(refused);
                continue;
            }
            let Some(Garbage::Buffer { memory: ResourceMemory::General { type_index, allocation }, .. }) =
                buffer.life.garbage()
            else {
                stats.unmovable.push((index, Unmovable::NotPlaced));
                continue;
            };
            let uses = buffer.life.declared_uses();
            if uses.points().iter().any(|p| p.clock == FRAMES) {
                stats.unmovable.push((index, Unmovable::FrameCountedUse));
                continue;
            }
            // Residency's own clocks need no wait: its submissions are on this queue (ordered by
            // the copy's first barrier) and every submission waits for the binds before it.
            let waits = uses
                .points()
                .iter()
                .filter(|p| p.clock != UNIVERSAL && p.clock != SPARSE)
                .map(|&point| GpuUse { device: self.device.uid(), point })
                .collect();
            out.push(Candidate {
                index,
                type_index: *type_index,
                block: allocation.block,
                offset: allocation.allocation.offset(),
                size: allocation.allocation.size(),
                waits,
            });
        }
        out
    }

    /// Plans the moves of one memory type's heaps and takes their destinations (under the list's
    /// lock, so the heaps cannot change between the plan and the destinations).
    fn plan_type(
        &self,
        type_index: u32,
        candidates: &[Candidate],
        budget: DefragBudget,
        stage: &mut Stage<'_>,
        emptied: &mut Vec<(u32, u32)>,
    ) {
        let device = &*self.device;
        let here: HashMap<(u32, u64), &Candidate> = candidates
            .iter()
            .filter(|c| c.type_index == type_index)
            .map(|c| ((c.block, c.offset), c))
            .collect();
        let mut list = device.general[type_index as usize].lock().unwrap_or_else(|e| e.into_inner());
        let slots: Vec<u32> =
            list.blocks.iter().enumerate().filter(|(_, b)| b.is_some()).map(|(i, _)| i as u32).collect();
        let heaps: Vec<DefragHeap> = slots
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
                DefragHeap { capacity: block.size, granularity: block.allocator.granularity(), blocks }
            })
            .collect();
        let plan = match plan_defragmentation(&heaps, budget) {
            Ok(plan) => plan,
            Err(e) => {
                tracing::error!(list = %list.name, error = %e, "the heaps' own layout was refused by the planner");
                return;
            }
        };
        let before = stage.moves.len();
        for m in &plan.moves {
            let (from, to) = (slots[m.heap], slots[m.to_heap]);
            let live = heaps[m.heap].blocks[m.block];
            let candidate = here[&(from, live.offset)];
            let block = list.blocks[to as usize].as_mut().expect("a planned heap is live");
            let taken = block.allocator.allocate_at(m.to_offset, candidate.size, live.alignment, live.kind);
            let allocation = match taken {
                Ok(allocation) => allocation,
                Err(e) => {
                    // The planner mirrors the allocator, so this is a bug: give back what this
                    // plan took and move nothing of this memory type.
                    tracing::error!(list = %list.name, error = %e, "a planned destination was refused");
                    let mut undone: Vec<Staged> = stage.moves.drain(before..).collect();
                    drop(list);
                    for m in &mut undone {
                        stage.undo(m);
                    }
                    return;
                }
            };
            let memory = block.memory;
            let (memory_size, mapped) = (block.size, block.mapped);
            stage.moves.push(Staged {
                index: candidate.index,
                type_index,
                from_block: from,
                offset: allocation.offset(),
                destination: Some(BlockAllocation { block: to, allocation }),
                memory,
                memory_size,
                mapped,
                raw: vk::Buffer::null(),
                src_alias: vk::Buffer::null(),
                dst_alias: vk::Buffer::null(),
                waits: candidate.waits.clone(),
            });
        }
        emptied.extend(plan.emptied.iter().map(|&h| (type_index, slots[h])));
    }

    /// Creates and binds the new buffer and the copy aliases of one move. `Ok(false)`: the
    /// requirements do not fit the planned place (the move is dropped); an error fails the pass.
    fn create(device: &Device, buffer: &Buffer, m: &mut Staged) -> Result<bool, MemoryError> {
        let fits = |requirements: residency_core::profile::MemoryRequirements, offset: u64, room: u64| {
            requirements.memory_type_bits & (1 << m.type_index) != 0
                && offset % requirements.alignment.max(1) == 0
                && requirements.size <= room
        };
        let room = m.destination.as_ref().map_or(0, |d| d.allocation.size());
        let (raw, requirements) = create_raw_buffer(device, &buffer.name, buffer.size, buffer.usage)?;
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
        let old_room = match buffer.life.garbage() {
            Some(Garbage::Buffer { memory: ResourceMemory::General { allocation, .. }, .. }) => {
                allocation.allocation.size()
            }
            _ => 0,
        };
        let aliases = [
            (BufferUsage::COPY_SRC, "source", buffer.memory, buffer.memory_offset, old_room),
            (BufferUsage::COPY_DST, "destination", m.memory, m.offset, room),
        ];
        for (usage, what, memory, offset, room) in aliases {
            if buffer.usage.contains(usage) {
                continue;
            }
            let name = format!("{} (move {what})", buffer.name);
            let (alias, requirements) = create_raw_buffer(device, &name, buffer.size, usage)?;
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

    /// Records and submits the copies of every staged move.
    fn copy(&self, stage: &Stage<'_>, movable: &[&mut Buffer]) -> Result<Submission, VulkanError> {
        let device = &*self.device;
        let mut waits: Vec<GpuUse> = stage.moves.iter().flat_map(|m| m.waits.iter().copied()).collect();
        waits.sort_by_key(|w| (w.point.clock.0, std::cmp::Reverse(w.point.value)));
        waits.dedup_by_key(|w| w.point.clock);
        let copies: Vec<(vk::Buffer, vk::Buffer, u64)> = stage
            .moves
            .iter()
            .map(|m| {
                let buffer = &*movable[m.index];
                let src = if m.src_alias != vk::Buffer::null() { m.src_alias } else { buffer.raw };
                let dst = if m.dst_alias != vk::Buffer::null() { m.dst_alias } else { m.raw };
                (src, dst, buffer.size)
            })
            .collect();
        let before = [vk::MemoryBarrier2::default()
            .src_stage_mask(vk::PipelineStageFlags2::ALL_COMMANDS)
            .src_access_mask(vk::AccessFlags2::MEMORY_WRITE)
            .dst_stage_mask(vk::PipelineStageFlags2::COPY)
            .dst_access_mask(vk::AccessFlags2::TRANSFER_READ | vk::AccessFlags2::TRANSFER_WRITE)];
        let after = [vk::MemoryBarrier2::default()
            .src_stage_mask(vk::PipelineStageFlags2::COPY)
            .src_access_mask(vk::AccessFlags2::TRANSFER_WRITE)
            .dst_stage_mask(vk::PipelineStageFlags2::ALL_COMMANDS | vk::PipelineStageFlags2::HOST)
            .dst_access_mask(
                vk::AccessFlags2::MEMORY_READ | vk::AccessFlags2::MEMORY_WRITE | vk::AccessFlags2::HOST_READ,
            )];
        self.commands.submit(&waits, |rec| {
            let cmd = rec.raw();
            // SAFETY: the command buffer is recording on this device outside a render pass (the
            // `Recording` invariant) and is left so. Every source is a live buffer of this device
            // with COPY_SRC usage bound over the moved buffer's bytes, every destination one with
            // COPY_DST usage bound over the planned place (made above, kept alive until they
            // retire behind this submission); each region is the buffer's size, inside both; the
            // destinations are ranges no live resource holds, so no copy overlaps another or its
            // own source. The barriers order the copies after every earlier command on the queue
            // and every later command after them.
            unsafe {
                device
                    .raw()
                    .cmd_pipeline_barrier2(cmd, &vk::DependencyInfo::default().memory_barriers(&before));
                for &(src, dst, size) in &copies {
                    let region = vk::BufferCopy { src_offset: 0, dst_offset: 0, size };
                    device.raw().cmd_copy_buffer(cmd, src, dst, &[region]);
                }
                device
                    .raw()
                    .cmd_pipeline_barrier2(cmd, &vk::DependencyInfo::default().memory_barriers(&after));
            }
        })
    }

    /// Swaps a buffer's internals for its new place; the old life retires behind the copy (its
    /// last handle was the buffer's: checked when it became a candidate).
    fn commit(device: &Device, buffer: &mut Buffer, mut m: Staged, copy: GpuUse) {
        let destination = m.destination.take().expect("a staged move has its destination");
        let id = device.ledger().track("buffer", Arc::clone(&buffer.name));
        let memory = ResourceMemory::General { type_index: m.type_index, allocation: destination };
        let life = Life::new(device.arc(), Garbage::Buffer { raw: m.raw, memory, id }, None);
        let old = std::mem::replace(&mut buffer.life, life);
        buffer.raw = m.raw;
        buffer.memory = m.memory;
        buffer.memory_offset = m.offset;
        buffer.memory_size = m.memory_size;
        buffer.mapped = m.mapped;
        buffer.copy_pending = Some(copy);
        // The old buffer and range wait for the copy (submitted before this drop) and for the
        // uses declared on them.
        drop(old);
        for (alias, what) in [(m.src_alias, "source"), (m.dst_alias, "destination")] {
            if alias != vk::Buffer::null() {
                let id = device.ledger().track("buffer", format!("{} (move {what})", buffer.name));
                let garbage = Garbage::Buffer { raw: alias, memory: ResourceMemory::Transient, id };
                device.retire(garbage, LastUses::none());
            }
        }
    }
}
