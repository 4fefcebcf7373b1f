//! The hazard state of one tracked piece (a byte range or a subresource range) and the rule that
//! turns a use into the barrier it needs.
//!
//! Per piece we keep what Vulkan's execution and memory dependencies need:
//! - the last write (its stages and accesses): a later read must wait for it and see it (RAW), a
//!   later write must wait for it and have it made available (WAW);
//! - the union of the stages that read since that write: a later write must wait for all of them
//!   (WAR), even though the reads needed no barrier between themselves;
//! - the (stages, accesses) pairs the last write was already made visible to, so a second read
//!   in a stage that already saw the write needs no barrier (RAR);
//! - the image layout and the owning queue family.

use super::barrier::Scope;
use super::flags::{AccessFlags, ImageLayout, PipelineStages, QueueFamily};
use serde::{Deserialize, Serialize};

/// The state of (part of) a resource after the uses declared so far, as the tracker reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ResourceState {
    /// Stages that accessed the resource since (and including) its last write: what a later write
    /// must wait for.
    pub stages: PipelineStages,
    /// Accesses since (and including) the last write.
    pub access: AccessFlags,
    /// Stages and accesses of the last write still to be waited for ([`Scope::NONE`] when nothing
    /// was written since the resource was registered or discarded).
    pub last_write: Scope,
    /// The image layout; `None` for buffers.
    pub layout: Option<ImageLayout>,
    /// The queue family owning the resource ([`QueueFamily::IGNORED`] before the first use, or
    /// always for concurrently shared resources).
    pub queue_family: QueueFamily,
}

/// Up to four (stages, accesses) pairs, both expanded, that a write was made visible to. When a
/// fifth is added the oldest is forgotten, which can only cause an extra barrier, never a missing
/// one.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Visible {
    pairs: [(u64, u64); 4],
    len: u8,
}

impl Visible {
    /// Whether every access of `access` by every stage of `stages` already sees the write.
    fn covers(&self, stages: PipelineStages, access: AccessFlags) -> bool {
        let need = access.expand().bits();
        let mut bits = stages.expand().bits();
        if bits == 0 {
            return false;
        }
        while bits != 0 {
            let stage = bits & bits.wrapping_neg();
            bits &= bits - 1;
            let seen = self.pairs[..self.len as usize]
                .iter()
                .filter(|(s, _)| s & stage != 0)
                .fold(0, |acc, (_, a)| acc | a);
            if need & !seen != 0 {
                return false;
            }
        }
        true
    }

    fn add(&mut self, stages: PipelineStages, access: AccessFlags) {
        let (s, a) = (stages.expand().bits(), access.expand().bits());
        for pair in &mut self.pairs[..self.len as usize] {
            if pair.0 == s {
                pair.1 |= a;
                return;
            }
            if pair.1 == a {
                pair.0 |= s;
                return;
            }
        }
        if self.len as usize == self.pairs.len() {
            self.pairs.copy_within(1.., 0);
            self.len -= 1;
        }
        self.pairs[self.len as usize] = (s, a);
        self.len += 1;
    }
}

/// The hazard state of one piece.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct PieceState {
    /// Stages of the last write, or the stages a layout transition or ownership acquire was made
    /// visible to (then with no access: the point later barriers chain from).
    pub write: Scope,
    /// Stages that read since the last write.
    pub read_stages: PipelineStages,
    /// Accesses of those reads.
    pub read_access: AccessFlags,
    /// Where the last write is visible already.
    pub visible: Visible,
    /// Image layout (`UNDEFINED` for buffers).
    pub layout: ImageLayout,
    /// Owning queue family.
    pub queue: QueueFamily,
}

impl PieceState {
    /// A fresh piece in `layout`, never accessed, owned by nobody.
    pub(crate) fn new(layout: ImageLayout) -> PieceState {
        PieceState { layout, queue: QueueFamily::IGNORED, ..PieceState::default() }
    }

    /// The public view.
    pub(crate) fn public(&self, is_image: bool) -> ResourceState {
        ResourceState {
            stages: self.write.stages | self.read_stages,
            access: self.write.access | self.read_access,
            last_write: self.write,
            layout: is_image.then_some(self.layout),
            queue_family: self.queue,
        }
    }

    /// The first scope a barrier before any later access must wait for: every stage since the
    /// last write, and the write's accesses to make available.
    fn all_since_write(&self) -> Scope {
        Scope::new(self.write.stages | self.read_stages, self.write.access)
    }

    /// The state after a barrier that completed (layout transition or ownership acquire) before
    /// `use_` ran.
    fn after_barrier(&mut self, use_: &MergedUse, layout: ImageLayout, queue: QueueFamily) {
        if use_.writes {
            *self = PieceState {
                write: Scope::new(use_.stages, use_.access.writes()),
                layout,
                queue,
                ..PieceState::default()
            };
        } else {
            let mut visible = Visible::default();
            visible.add(use_.stages, use_.access);
            *self = PieceState {
                write: Scope::new(use_.stages, AccessFlags::NONE),
                read_stages: use_.stages,
                read_access: use_.access,
                visible,
                layout,
                queue,
            };
        }
    }
}

/// The uses declared on one piece in one batch, merged: union of stages and accesses; writes if
/// any writes; discards only if every one discards.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct MergedUse {
    pub stages: PipelineStages,
    pub access: AccessFlags,
    pub layout: ImageLayout,
    pub writes: bool,
    pub discard: bool,
}

/// The barrier one piece needs, before merging.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct PieceBarrier {
    pub src: Scope,
    pub dst: Scope,
    pub old_layout: ImageLayout,
    pub new_layout: ImageLayout,
    /// `Some(from)` when ownership moves from queue family `from` to the batch's queue family.
    pub transfer_from: Option<QueueFamily>,
}

/// Applies `use_` (run on `queue`) to `state`; returns the barrier needed before it, if any.
///
/// The rules, in order:
/// 1. Ownership transfer (exclusive sharing, owned by another family, contents kept): a
///    release/acquire pair; first scope everything since the last write.
/// 2. Layout transition (images: the layout differs, or the use discards and so transitions from
///    `UNDEFINED`): always a barrier; first scope everything since the last write.
/// 3. Write: waits for the last write (WAW, memory dependency) and every read since (WAR,
///    execution dependency); nothing when the piece was never accessed.
/// 4. Read: waits for the last write and makes it visible (RAW), unless nothing was written or
///    the write is already visible to these stages and accesses (RAR: no barrier).
pub(crate) fn apply(
    state: &mut PieceState,
    use_: &MergedUse,
    is_image: bool,
    queue: QueueFamily,
    exclusive: bool,
) -> Option<PieceBarrier> {
    let dst = Scope::new(use_.stages, use_.access);
    let owner = if exclusive { queue } else { QueueFamily::IGNORED };
    let old_layout = if use_.discard { ImageLayout::UNDEFINED } else { state.layout };
    let new_layout = if is_image { use_.layout } else { ImageLayout::UNDEFINED };
    let transfer = exclusive && !use_.discard && !state.queue.is_ignored() && state.queue != queue;
    let layout_change = is_image && (use_.discard || state.layout != use_.layout);
    if transfer || layout_change {
        let barrier = PieceBarrier {
            src: state.all_since_write(),
            dst,
            old_layout: if is_image { old_layout } else { ImageLayout::UNDEFINED },
            new_layout,
            transfer_from: transfer.then_some(state.queue),
        };
        state.after_barrier(use_, new_layout, owner);
        return Some(barrier);
    }
    let never_accessed = state.write.stages.is_empty() && state.read_stages.is_empty();
    if use_.writes {
        let barrier = (!never_accessed).then(|| PieceBarrier {
            src: state.all_since_write(),
            dst,
            old_layout: new_layout,
            new_layout,
            transfer_from: None,
        });
        *state = PieceState {
            write: Scope::new(use_.stages, use_.access.writes()),
            layout: new_layout,
            queue: owner,
            ..PieceState::default()
        };
        return barrier;
    }
    let barrier = if state.write.stages.is_empty() || state.visible.covers(use_.stages, use_.access) {
        None
    } else {
        state.visible.add(use_.stages, use_.access);
        Some(PieceBarrier { src: state.write, dst, old_layout: new_layout, new_layout, transfer_from: None })
    };
    state.read_stages |= use_.stages;
    state.read_access |= use_.access;
    state.queue = owner;
    barrier
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn visibility_is_per_stage() {
        let mut v = Visible::default();
        v.add(PipelineStages::INDEX_INPUT, AccessFlags::INDEX_READ);
        v.add(PipelineStages::COMPUTE_SHADER, AccessFlags::SHADER_STORAGE_READ);
        assert!(v.covers(PipelineStages::INDEX_INPUT, AccessFlags::INDEX_READ));
        assert!(v.covers(
            PipelineStages::VERTEX_INPUT.intersection(PipelineStages::NONE) | PipelineStages::INDEX_INPUT,
            AccessFlags::INDEX_READ
        ));
        // The product of the two pairs is not visible: index reads by the compute stage.
        assert!(!v.covers(PipelineStages::COMPUTE_SHADER, AccessFlags::INDEX_READ));
        assert!(
            !v.covers(PipelineStages::VERTEX_INPUT, AccessFlags::INDEX_READ),
            "needs vertex attribute input too"
        );
    }

    #[test]
    fn visibility_forgets_oldest_beyond_four() {
        let mut v = Visible::default();
        let stages = [
            PipelineStages::VERTEX_SHADER,
            PipelineStages::FRAGMENT_SHADER,
            PipelineStages::COMPUTE_SHADER,
            PipelineStages::COPY,
            PipelineStages::HOST,
        ];
        let access = [
            AccessFlags::UNIFORM_READ,
            AccessFlags::SHADER_SAMPLED_READ,
            AccessFlags::SHADER_STORAGE_READ,
            AccessFlags::TRANSFER_READ,
            AccessFlags::HOST_READ,
        ];
        for (s, a) in stages.into_iter().zip(access) {
            v.add(s, a);
        }
        assert!(!v.covers(stages[0], access[0]));
        assert!(v.covers(stages[4], access[4]));
    }
}
