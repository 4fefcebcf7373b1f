//! Compaction of the manager's tile pool: resident tiles of its images move out of sparsely used
//! heaps into the holes of fuller ones, so the heaps they leave can go back to the device. The
//! manager plans and keeps the accounting (pool and page tables); the backend copies the texels
//! and rebinds the tiles in between, and undoes the accounting when the GPU side fails.

use super::StreamingManager;
use crate::tiles::{
    CommitError, CompactionPlan, HeapIndex, ImageId, PageTableError, PhysicalTile, PoolError,
    ResidencyChanges, TileIndex,
};
use std::collections::{HashMap, HashSet};

/// One image's part of a compaction plan: each moved tile with where it is and where it goes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ImageCompaction {
    /// The image.
    pub image: ImageId,
    /// (virtual tile, from, to), in the plan's order.
    pub moves: Vec<(TileIndex, PhysicalTile, PhysicalTile)>,
}

impl StreamingManager {
    /// Plans moving at most `max_tiles` resident tiles out of the least used heaps of the pool
    /// into free tiles of fuller ones ([`TilePool::plan_compaction`](crate::tiles::TilePool)),
    /// with the moves grouped per image, each with its virtual tile. Only tiles of the images'
    /// page tables move: mip tails stay, so a heap that holds one is never emptied. Nothing
    /// changes until [`apply_compaction`](Self::apply_compaction).
    pub fn plan_compaction(&self, max_tiles: u32) -> (CompactionPlan, Vec<ImageCompaction>) {
        let mut at: HashMap<PhysicalTile, (ImageId, TileIndex)> = HashMap::new();
        for (&id, state) in &self.images {
            at.extend(state.residency.page_table().mapped().map(|(t, p)| (p, (id, t))));
        }
        let plan =
            self.pool.plan_compaction(max_tiles, |p, owner| at.get(&p).is_some_and(|&(i, _)| i == owner));
        let mut per_image: Vec<ImageCompaction> = Vec::new();
        for m in &plan.moves {
            let (image, tile) = at[&m.from];
            match per_image.iter_mut().find(|c| c.image == image) {
                Some(c) => c.moves.push((tile, m.from, m.to)),
                None => per_image.push(ImageCompaction { image, moves: vec![(tile, m.from, m.to)] }),
            }
        }
        (plan, per_image)
    }

    /// Applies a plan of [`plan_compaction`](Self::plan_compaction): the pool's accounting, then
    /// each image's page table (only the physical tile of each moved tile changes: residency, the
    /// min-LOD map, the LRU and the loads in flight keep their meaning). Returns, in the order of
    /// `moves`, each image's changes: the binds of its tiles at their new places. All checked
    /// first (the plan against the pool, every move against its page table); on an error nothing
    /// changed.
    pub fn apply_compaction(
        &mut self,
        plan: &CompactionPlan,
        moves: &[ImageCompaction],
    ) -> Result<Vec<ResidencyChanges>, CommitError> {
        // Every move of `moves` is one of the plan's, at a tile its image has mapped there, and
        // every one of the plan's is given.
        let planned: HashSet<(PhysicalTile, PhysicalTile)> =
            plan.moves.iter().map(|m| (m.from, m.to)).collect();
        let mut given: HashSet<(PhysicalTile, PhysicalTile)> = HashSet::with_capacity(plan.moves.len());
        let mut count = 0;
        for c in moves {
            let table = self.images.get(&c.image).map(|s| s.residency.page_table());
            for &(tile, from, to) in &c.moves {
                // A move given twice would leave one virtual tile naming a physical tile the pool
                // has freed.
                if table.and_then(|t| t.get(tile)) != Some(from)
                    || !planned.contains(&(from, to))
                    || !given.insert((from, to))
                {
                    return Err(PageTableError::NotMapped { tile: tile.0 }.into());
                }
                count += 1;
            }
        }
        if count != plan.moves.len() || given.len() != plan.moves.len() || planned.len() != plan.moves.len() {
            let missing =
                plan.moves.iter().find(|m| !moves.iter().any(|c| c.moves.iter().any(|x| x.1 == m.from)));
            return Err(PoolError::NotAllocated {
                heap: missing.map_or(0, |m| m.from.heap.0),
                tile: missing.map_or(0, |m| m.from.tile),
            }
            .into());
        }
        self.pool.apply_compaction(plan)?;
        let mut changes = Vec::with_capacity(moves.len());
        for c in moves {
            let state = self.images.get_mut(&c.image).expect("checked above");
            changes.push(state.residency.remap(&c.moves).expect("checked above"));
        }
        Ok(changes)
    }

    /// Undoes [`apply_compaction`](Self::apply_compaction) of `plan` and `moves`: every moved
    /// tile back where it was, in the page tables and the pool (when the GPU side of the pass
    /// failed).
    pub fn revert_compaction(
        &mut self,
        plan: &CompactionPlan,
        moves: &[ImageCompaction],
    ) -> Result<(), CommitError> {
        for c in moves {
            let back: Vec<_> = c.moves.iter().map(|&(t, from, to)| (t, to, from)).collect();
            if let Some(state) = self.images.get_mut(&c.image) {
                state.residency.remap(&back)?;
            }
        }
        self.pool.revert_compaction(plan)?;
        Ok(())
    }

    /// Releases those of `heaps` that hold no tile (the heaps a compaction emptied) and returns
    /// them: their memory may go back to the device once the GPU is done with it.
    pub fn release_empty_heaps(&mut self, heaps: &[HeapIndex]) -> Vec<HeapIndex> {
        self.pool.trim_heaps(heaps)
    }
}
