//! The tile changes one image queued since its last flush, folded so that the flush binds only
//! the difference between what the GPU has bound and what the page table now says.
//!
//! # Contract
//! Let `gpu` be what the GPU had bound at the last flush (every tile and tail the page table
//! mapped then) and `log` the changes queued since, in order. Then [`PendingChanges`] holds, for
//! every tile (and every tail) that `log` names, its last change — except a release of a tile the
//! GPU does not have bound, which is dropped (a commit and a release of the same tile before a
//! flush cancel out). So at most one change per tile is pending, an unbind is pending only for
//! what the GPU has bound, and applying the pending changes to `gpu` gives the page table.
//!
//! `tests/tiles_changes.rs` checks this against a reference model that replays the whole log.

use super::bind_plan::{TailChange, TileChange};
use super::layout::TileIndex;
use super::pool::{PoolId, TilePool};
use super::residency::{CommitError, ResidencyChanges, SparseResidency};
use std::collections::{HashMap, HashSet};

/// The changes of one image waiting for its next flush; see the [module contract](self).
#[derive(Clone, Debug, Default)]
pub struct PendingChanges {
    pending: ResidencyChanges,
    /// Where each tile's pending change sits in `pending.tiles`.
    index: HashMap<u32, usize>,
    /// Tiles and tails with a pending change that the GPU had bound at the last flush: releasing
    /// one after a re-commit must still unbind it, and a failed flush keeps its unbind.
    bound_at_flush: (HashSet<u32>, HashSet<u32>),
}

impl PendingChanges {
    /// Nothing pending.
    pub fn new() -> Self {
        Self::default()
    }

    /// The folded changes: feed `tiles` and `tails` to
    /// [`plan_binds`](super::bind_plan::plan_binds); memory for `heaps_added` must exist first.
    pub fn changes(&self) -> &ResidencyChanges {
        &self.pending
    }

    /// Whether nothing is pending.
    pub fn is_empty(&self) -> bool {
        self.pending.is_empty()
    }

    /// Adds the changes of a commit or release (made against the page table whose last flushed
    /// state the GPU has), folding a change of a tile (or tail) that already has one pending: bind
    /// then unbind is nothing (the GPU never saw the bind) unless the GPU still has the tile bound
    /// from before (unbind, bind, unbind is an unbind); unbind then bind is a bind to the new
    /// memory.
    pub fn queue(&mut self, changes: ResidencyChanges) {
        if self.pending.pool == PoolId::NONE {
            self.pending.pool = changes.pool;
        }
        for change in changes.tiles {
            match self.index.get(&change.tile.0) {
                Some(&at) => {
                    let earlier = self.pending.tiles[at];
                    if earlier.physical.is_some()
                        && change.physical.is_none()
                        && !self.bound_at_flush.0.contains(&change.tile.0)
                    {
                        // Bound and released before any flush: drop both (swap_remove keeps O(1)).
                        self.pending.tiles.swap_remove(at);
                        self.index.remove(&change.tile.0);
                        if let Some(moved) = self.pending.tiles.get(at) {
                            self.index.insert(moved.tile.0, at);
                        }
                    } else {
                        self.pending.tiles[at] = change;
                    }
                }
                None => {
                    // A first release means the GPU has the tile bound (the page table had it).
                    if change.physical.is_none() {
                        self.bound_at_flush.0.insert(change.tile.0);
                    }
                    self.index.insert(change.tile.0, self.pending.tiles.len());
                    self.pending.tiles.push(change);
                }
            }
        }
        for change in changes.tails {
            match self.pending.tails.iter().position(|t| t.tail == change.tail) {
                Some(at)
                    if self.pending.tails[at].physical.is_some()
                        && change.physical.is_none()
                        && !self.bound_at_flush.1.contains(&change.tail) =>
                {
                    self.pending.tails.remove(at);
                }
                Some(at) => self.pending.tails[at] = change,
                None => {
                    if change.physical.is_none() {
                        self.bound_at_flush.1.insert(change.tail);
                    }
                    self.pending.tails.push(change)
                }
            }
        }
        self.pending.heaps_added.extend(changes.heaps_added);
    }

    /// The pending changes reached the GPU: nothing is pending any more.
    pub fn flushed(&mut self) {
        let pool = self.pending.pool;
        *self = Self::default();
        self.pending.pool = pool;
    }

    /// A flush failed, so nothing pending reached the GPU: the commits queued since the last
    /// flush are undone (`residency` forgets them, their tiles go back to `pool`) and the unbinds
    /// of what the GPU still has bound stay pending for the next flush. `pool` must be the pool
    /// `residency` commits from. The pending changes are rolled back even when undoing a commit
    /// fails (a bug: the page table produced them); the first such error is returned.
    pub fn roll_back(
        &mut self,
        residency: &mut SparseResidency,
        pool: &mut TilePool,
    ) -> Result<(), CommitError> {
        let tiles: Vec<TileIndex> =
            self.pending.tiles.iter().filter(|c| c.physical.is_some()).map(|c| c.tile).collect();
        let tails: Vec<u32> =
            self.pending.tails.iter().filter(|c| c.physical.is_some()).map(|c| c.tail).collect();
        let mut undone = residency.release(pool, &tiles).map(|_| ());
        for tail in tails {
            undone = undone.and_then(|()| residency.release_tail(pool, tail).map(|_| ()));
        }
        let (bound_tiles, bound_tails) = &self.bound_at_flush;
        self.pending.tiles.retain(|c| bound_tiles.contains(&c.tile.0));
        self.pending.tiles.iter_mut().for_each(|c: &mut TileChange| c.physical = None);
        self.pending.tails.retain(|c| bound_tails.contains(&c.tail));
        self.pending.tails.iter_mut().for_each(|c: &mut TailChange| c.physical = None);
        self.pending.heaps_added.clear();
        self.index = self.pending.tiles.iter().enumerate().map(|(i, c)| (c.tile.0, i)).collect();
        undone
    }
}
