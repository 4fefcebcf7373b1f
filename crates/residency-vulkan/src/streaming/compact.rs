//! Compaction of the streamer's tile heaps (hardware path): resident tiles move out of sparsely
//! used heaps into the holes of fuller ones, so whole heaps go back to the device after a
//! session with evictions. The streaming manager plans and keeps the accounting
//! ([`StreamingManager::plan_compaction`]); the copies and the rebind are the sparse pool's
//! compaction pass (`sparse/compact.rs`), shared with [`SparseTilePool::compact`](crate::sparse::SparseTilePool::compact).

use super::texture::TextureGpu;
use super::{StreamError, Streamer};
use crate::sparse::{CompactStats, CompactionOwner, ImageMoves, SparseError, SparseImage};
use residency_core::streaming::{ImageCompaction, StreamingManager};
use residency_core::tiles::{CompactionPlan, HeapIndex, ImageId, ResidencyChanges, TileIndex};
use std::collections::HashMap;
use std::time::Instant;

/// The manager as the owner of a pass: its pool and page tables, the streamer's images.
struct ManagerOwner<'a> {
    manager: &'a mut StreamingManager,
    ids: Vec<ImageId>,
    images: Vec<&'a SparseImage>,
}

impl ManagerOwner<'_> {
    fn grouped(&self, moves: &[ImageMoves]) -> Vec<ImageCompaction> {
        moves.iter().map(|m| ImageCompaction { image: self.ids[m.index()], moves: m.remap() }).collect()
    }
}

impl CompactionOwner for ManagerOwner<'_> {
    fn image(&self, index: usize) -> &SparseImage {
        self.images[index]
    }

    fn apply(
        &mut self,
        plan: &CompactionPlan,
        moves: &[ImageMoves],
    ) -> Result<Vec<ResidencyChanges>, SparseError> {
        let grouped = self.grouped(moves);
        Ok(self.manager.apply_compaction(plan, &grouped)?)
    }

    fn undo(&mut self, plan: &CompactionPlan, moves: &[ImageMoves]) {
        let grouped = self.grouped(moves);
        if let Err(e) = self.manager.revert_compaction(plan, &grouped) {
            tracing::error!(error = %e, "undoing a streamer compaction's accounting");
        }
    }

    fn trim(&mut self, heaps: &[HeapIndex]) -> Vec<HeapIndex> {
        self.manager.release_empty_heaps(heaps)
    }
}

impl Streamer {
    /// Moves at most `max_tiles` resident tiles out of the least used of the streamer's tile heaps
    /// into free tiles of fuller ones and hands the heaps that leaves empty back to the device
    /// (hardware path): after a session with evictions, heaps that are mostly holes. Call between
    /// frames, repeatedly until `moves` is 0 (or a few tiles per frame, to spread the cost).
    ///
    /// The pass is [`SparseTilePool::compact`](crate::sparse::SparseTilePool::compact)'s, over the
    /// manager's pool and page tables: after the frames in flight (the streamer passes them
    /// itself) the tiles' texels are copied heap to heap in one copy (carrier images, where the
    /// device has `sparseResidencyAliased`: by one compute dispatch per class of 4-, 8- or
    /// 16-byte texels or compressed blocks, else `vkCmdCopyImage`; elsewhere out to a staging
    /// buffer), the tiles rebound to
    /// their new memory on the sparse timeline after those frames (and, through staging, the
    /// texels copied back); it waits on the host for the copies. The page tables change only in which physical tile a resident tile names:
    /// residency, the min-LOD maps, the LRU and the loads in flight keep their meaning, so frames
    /// go on as before. Mip tails do not move (a heap holding one stays). An emptied heap's memory
    /// is freed through the retire queue once the frames declared on the heaps and the rebind
    /// have completed ([`backing_bytes`](Self::backing_bytes) drops at once).
    ///
    /// The software path's atlas is allocated whole: there is nothing to give back, and this
    /// returns zero moves. A frame open ([`StreamError::FrameOrder`]) is refused. A tick whose
    /// bind failed is applied first (its error is returned, nothing moved). On an error (out of
    /// memory for the staging buffer or a carrier, a failed submission or bind) every tile stays
    /// where it was,
    /// in the page tables, the pool and on the GPU — except when the copy back fails and binding
    /// the old tiles again fails too (a lost device): then the tiles are at their new places
    /// without their texels, the page tables saying so (as for `SparseTilePool::compact`).
    ///
    /// Call it after the GPU work of every frame ended with [`end_frame`](Self::end_frame) has
    /// been submitted: the copy out waits on the GPU for the frames' ends, and the pass waits on
    /// the host for that copy, so an end on the renderer's timeline that no submitted work
    /// signals yet never arrives (the call would not return).
    pub fn compact(&mut self, max_tiles: u32) -> Result<CompactStats, StreamError> {
        let started = Instant::now();
        if self.in_frame {
            return Err(StreamError::FrameOrder("compact between begin_frame and end_frame"));
        }
        if self.heaps.is_none() {
            return Ok(CompactStats::default());
        }
        // The GPU's bindings first catch up with the page tables the plan reads.
        self.apply_unapplied()?;
        let all: Vec<HeapIndex> = self.manager.pool().heap_indices().collect();
        let tile_bytes = self.manager.pool().tile_bytes();
        let waits = self.running_frames();
        let (plan, grouped) = self.manager.plan_compaction(max_tiles);
        let mut at = HashMap::new();
        let mut ids = Vec::with_capacity(grouped.len());
        let mut images = Vec::with_capacity(grouped.len());
        for g in &grouped {
            let index = ids.len();
            let image = match self.textures.get(&g.image).map(|t| &t.gpu) {
                Some(TextureGpu::Hardware { image, .. }) => &**image,
                _ => {
                    return Err(StreamError::Internal(format!(
                        "compaction of an unknown texture {}",
                        g.image.0
                    )))
                }
            };
            ids.push(g.image);
            images.push(image);
            at.extend(g.moves.iter().map(|&(tile, from, _): &(TileIndex, _, _)| (from, (index, tile))));
        }
        let heaps = self.heaps.as_mut().expect("the hardware path");
        // Every heap of the pool has memory (a bind made sure, unless it failed): destinations
        // are bound.
        heaps.ensure(self.manager.pool(), &all)?;
        let count = images.len();
        let mut owner = ManagerOwner { manager: &mut self.manager, ids, images };
        let stats = heaps.compact_external(&mut owner, count, (&plan, &at), tile_bytes, &waits, started)?;
        Ok(stats)
    }
}
