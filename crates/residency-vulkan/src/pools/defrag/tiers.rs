//! Demotion and promotion between memory tiers under pressure (issue #34), through the
//! defragmenter's machinery: a move's new `VkBuffer` is made at its destination, the contents are
//! copied in one submission, the handle's internals are swapped (name, usage, state-tracking id,
//! user data, priority and last-used frame kept) and the old buffer and range retire behind the
//! copy. A pass that fails leaves every buffer where it was and nothing allocated.

use super::{DefragError, Defragmenter, Heaps, LaterWork, Movable, Stage, Staged, Unmovable};
use crate::device::blocks::{MemoryError, ResourceMemory, SubRequest};
use crate::device::life::Garbage;
use crate::device::pressure::Counter;
use crate::device::Device;
use crate::poison::PoisonFree;
use crate::resources::buffer::Buffer;
use crate::sync::commands::Submission;
use residency_core::allocator::ResourceKind;
use residency_core::memory::{fallback_chain, ChainStep, MemoryIntent, MemoryTier};
use std::cmp::Ordering;
use std::sync::Arc;

/// What one [`Defragmenter::relieve`] pass did.
#[derive(Debug, Default)]
pub struct RelieveStats {
    /// Buffers moved from a device tier to the host tier.
    pub demotions: u32,
    /// Their bytes (the moved buffers' allocations).
    pub demoted_bytes: u64,
    /// Buffers moved back from the host tier to a device tier.
    pub promotions: u32,
    /// Their bytes.
    pub promoted_bytes: u64,
    /// Buffers handed to the pass that it would not move, by their index in the slice: not placed
    /// in the device's general heaps, pinned, shared, of another device, or used by a frame in
    /// flight ([`Unmovable::InFlight`]).
    pub unmovable: Vec<(usize, Unmovable)>,
    /// The copy submission, when anything moved (as [`DefragStats::submission`](crate::DefragStats::submission)).
    pub submission: Option<Submission>,
}

/// A buffer handed to the pass, placed in the general heaps.
struct Resident {
    index: usize,
    block: u32,
    /// Its allocation's size.
    size: u64,
    tier: MemoryTier,
    priority: f32,
    last_used: u64,
    movable: bool,
}

impl Resident {
    /// Hotter first: higher priority, then used later, then handed earlier.
    fn hotter(&self, other: &Resident) -> Ordering {
        other
            .priority
            .partial_cmp(&self.priority)
            .unwrap_or(Ordering::Equal)
            .then(other.last_used.cmp(&self.last_used))
            .then(self.index.cmp(&other.index))
    }
}

impl Defragmenter {
    /// One pass of residency under pressure over `buffers` (the buffers that may change tiers;
    /// call it once a frame, after [`Device::advance_frame`]): the buffers placed in the device's
    /// general heaps are ordered hottest first — higher [`Buffer::priority`], then later
    /// [`Buffer::last_used_frame`] — and the device tiers' room (what the buffers there hold plus
    /// what the device tiers may still take: free ranges of their heaps, the device-local limit
    /// and the heaps' budgets) is given to the hottest. Buffers in a device tier that did not get
    /// room are *demoted* to the host tier, coldest first; buffers in the host tier (demoted
    /// earlier, or fallen back at creation) that got room are *promoted* back, hottest first,
    /// where the device tiers have room now (the ranges demoted buffers leave come back only
    /// when their copy retires: a later pass promotes into them). Together the moves copy at most
    /// `max_bytes`, so no frame stalls on them.
    ///
    /// A buffer a declared use has not completed on (a frame in flight) is never moved
    /// ([`Unmovable::InFlight`]), nor one the defragmenter would not move (committed, a pool's,
    /// pinned, shared). Moves copy in one submission on the device's moves queue
    /// ([`Device::moves_queue`]: a second queue of the universal family where there is one),
    /// ordered after every earlier residency submission but not before the later ones as a
    /// whole: each moved buffer carries its
    /// copy ([`Buffer::pending_move`]) until the GPU has passed it, and a recording that uses it
    /// waits for that copy ([`Recording::waits`](crate::recording::Recording::waits)), so only the
    /// frames that read or write a moved buffer wait for its move and the others run beside the
    /// copies. Demotions and promotions are counted in [`Device::pressure_stats`].
    ///
    /// On an error (out of memory or budget for a demotion's host memory, a failed submission)
    /// every buffer is where it was and nothing is left allocated; a promotion that finds no room
    /// is no error (the buffer stays in the host tier).
    pub fn relieve(
        &mut self,
        buffers: &mut [&mut Buffer],
        max_bytes: u64,
    ) -> Result<RelieveStats, DefragError> {
        let device = Arc::clone(&self.device);
        let device = &*device;
        device.maintain();
        let mut stats = RelieveStats::default();
        let residents = self.residents(buffers, &mut stats);
        let mut order: Vec<usize> = (0..residents.len()).collect();
        order.sort_by(|&a, &b| residents[a].hotter(&residents[b]));
        // The device tiers' room, given to the hottest; what cannot move stays where it is.
        let held: u64 = residents.iter().filter(|r| r.tier.is_device()).map(|r| r.size).sum();
        let capacity = held.saturating_add(device.device_tier_free());
        let mut wants_device = vec![false; residents.len()];
        let mut filled = 0u64;
        for &i in &order {
            let r = &residents[i];
            if !r.movable && r.tier.is_device() {
                wants_device[i] = true;
                filled = filled.saturating_add(r.size);
            }
        }
        for &i in &order {
            let r = &residents[i];
            if r.movable && filled.saturating_add(r.size) <= capacity {
                wants_device[i] = true;
                filled += r.size;
            }
        }
        let types = &device.memory_properties().types;
        let chain = fallback_chain(types, u32::MAX, MemoryIntent::DeviceLocal);
        let host: Vec<ChainStep> = chain.iter().copied().filter(|s| !s.tier.is_device()).collect();
        let home: Vec<ChainStep> = chain.iter().copied().filter(|s| s.tier.is_device()).collect();
        let mut stage = Stage { device, moves: Vec::new(), new_heaps: Vec::new() };
        let mut counted: Vec<(Counter, u64)> = Vec::new();
        let mut budget = max_bytes;
        // Demotions, coldest first: out of memory for them fails the pass.
        for &i in order.iter().rev() {
            let r = &residents[i];
            if !r.tier.is_device() || wants_device[i] || !r.movable || r.size > budget {
                continue;
            }
            if self.stage_move(device, buffers[r.index], r, &host, &mut stage)? {
                budget -= r.size;
                counted.push((Counter::Demotion, r.size));
            } else {
                stats.unmovable.push((r.index, Unmovable::Requirements));
            }
        }
        // Promotions, hottest first, where there is room now.
        for &i in &order {
            let r = &residents[i];
            if r.tier.is_device() || !wants_device[i] || !r.movable || r.size > budget {
                continue;
            }
            match self.stage_move(device, buffers[r.index], r, &home, &mut stage) {
                Ok(true) => {
                    budget -= r.size;
                    counted.push((Counter::Promotion, r.size));
                }
                Ok(false) => stats.unmovable.push((r.index, Unmovable::Requirements)),
                Err(MemoryError::OutOfBudget { .. } | MemoryError::OutOfDeviceMemory { .. }) => break,
                Err(e) => return Err(e.into()),
            }
        }
        if stage.moves.is_empty() {
            return Ok(stats);
        }
        let movable = Movable { buffers, images: &mut [] };
        let submission = self.copy(&stage, &movable, LaterWork::PerResource)?;
        let copy = submission.gpu_use();
        stats.submission = Some(submission);
        let Movable { buffers, .. } = movable;
        let moves = std::mem::take(&mut stage.moves);
        drop(stage);
        for (m, (counter, size)) in moves.into_iter().zip(counted) {
            let super::Target::Buffer(index) = m.target else { continue };
            Self::commit(device, &mut *buffers[index], m, copy);
            // Only the work that uses it waits for its copy (the copy orders no later work).
            buffers[index].life().set_filled_by(copy);
            device.pressure.count(counter, size);
            match counter {
                Counter::Demotion => {
                    stats.demotions += 1;
                    stats.demoted_bytes += size;
                }
                _ => {
                    stats.promotions += 1;
                    stats.promoted_bytes += size;
                }
            }
        }
        Ok(stats)
    }

    /// The buffers placed in the general heaps, with their tier and temperature; the others go
    /// to `stats.unmovable`.
    fn residents(&self, buffers: &[&mut Buffer], stats: &mut RelieveStats) -> Vec<Resident> {
        let device = &*self.device;
        let mut out = Vec::new();
        for (index, buffer) in buffers.iter().enumerate() {
            if !buffer.device().is(device) {
                stats.unmovable.push((index, Unmovable::OtherDevice));
                continue;
            }
            let Some(Garbage::Buffer { memory: ResourceMemory::General { list, allocation }, .. }) =
                buffer.life().garbage()
            else {
                stats.unmovable.push((index, Unmovable::NotPlaced));
                continue;
            };
            let refused = self.refusal(buffer).or_else(|| {
                let uses = buffer.life().declared_uses();
                let done = uses.points().iter().all(|&point| {
                    device.has_completed(&crate::device::life::GpuUse { device: device.uid(), point })
                });
                (!done).then_some(Unmovable::InFlight)
            });
            if let Some(reason) = refused {
                stats.unmovable.push((index, reason));
            }
            out.push(Resident {
                index,
                block: allocation.block,
                size: allocation.allocation.size(),
                tier: device.list_tier(*list),
                priority: buffer.priority(),
                last_used: buffer.last_used_frame(),
                movable: refused.is_none(),
            });
        }
        out
    }

    /// Stages one buffer's move to the first of `steps` with room: takes the destination, makes
    /// and binds the new `VkBuffer` there. `Ok(false)`: its requirements do not fit (nothing
    /// staged); an error: no step had room (nothing staged).
    fn stage_move(
        &self,
        device: &Device,
        buffer: &Buffer,
        resident: &Resident,
        steps: &[ChainStep],
        stage: &mut Stage<'_>,
    ) -> Result<bool, MemoryError> {
        // SAFETY: a placed buffer of this device (its memory is a general heap's range), alive
        // while the caller holds it.
        let requirements =
            unsafe { crate::device::profile_capture::requirements_of_buffer_object(device, buffer.raw()) };
        // The old offset's alignment (at most 64 KiB) keeps any floor the buffer was placed with.
        let floor = 1u64 << buffer.offset().trailing_zeros().min(16);
        let alignment = requirements.alignment.max(1).next_power_of_two().max(floor);
        let mut last = None;
        for &step in steps {
            if requirements.memory_type_bits & (1 << step.type_index) == 0 {
                continue;
            }
            let list_index = device.list_of(step);
            let mut list = device.general[list_index as usize].locked();
            let request = SubRequest {
                name: buffer.name(),
                size: resident.size,
                alignment,
                kind: ResourceKind::Linear,
                allow_over_budget: false,
            };
            let allocation = match list.allocate(device, request) {
                Ok(allocation) => allocation,
                Err(e @ (MemoryError::OutOfBudget { .. } | MemoryError::OutOfDeviceMemory { .. })) => {
                    last = Some(e);
                    continue;
                }
                Err(e) => return Err(e),
            };
            let target = super::Target::Buffer(resident.index);
            let heaps = Heaps::General(list_index);
            let staged = Staged::to_block(
                target,
                heaps,
                resident.block,
                list.block(allocation.block),
                allocation,
                Vec::new(),
            );
            drop(list);
            stage.moves.push(staged);
            let m = stage.moves.last_mut().expect("just pushed");
            let created = Self::create(device, buffer, m);
            if !matches!(created, Ok(true)) {
                let mut m = stage.moves.pop().expect("just pushed");
                stage.undo(&mut m);
            }
            return created;
        }
        Err(last.unwrap_or_else(|| MemoryError::NoSuitableMemoryType {
            name: buffer.name().to_owned(),
            allowed_bits: requirements.memory_type_bits,
            intent: MemoryIntent::DeviceLocal,
        }))
    }
}
