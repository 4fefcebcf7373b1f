//! Commit and release of one image's tiles: the page table and the shared tile pool kept in step,
//! producing the changes the bind planner turns into binds.

use super::bind_plan::{TailChange, TileChange};
use super::layout::{MipInfo, SparseImageLayout, TexelRegion, TileIndex};
use super::page_table::{PageTable, PageTableError, PhysicalTile};
use super::pool::{HeapIndex, ImageId, PoolError, PoolId, TilePool, TileRun};

/// What a commit or release changed: feed `tiles` and `tails` to
/// [`plan_binds`](super::bind_plan::plan_binds); create memory for `heaps_added` first.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ResidencyChanges {
    /// Tiles bound or unbound.
    pub tiles: Vec<TileChange>,
    /// Mip tails bound or unbound.
    pub tails: Vec<TailChange>,
    /// Heaps the pool added.
    pub heaps_added: Vec<HeapIndex>,
    /// The pool whose tiles `tiles` and `tails` name ([`PoolId::NONE`] for changes made by hand):
    /// a backend binds them only through that pool's heaps.
    pub pool: PoolId,
}

impl ResidencyChanges {
    /// Whether nothing changed.
    pub fn is_empty(&self) -> bool {
        self.tiles.is_empty() && self.tails.is_empty() && self.heaps_added.is_empty()
    }

    /// Appends `other` (changes of a later call in the same frame, against the same pool; the
    /// first pool named is kept).
    pub fn extend(&mut self, other: ResidencyChanges) {
        if self.pool == PoolId::NONE {
            self.pool = other.pool;
        }
        self.tiles.extend(other.tiles);
        self.tails.extend(other.tails);
        self.heaps_added.extend(other.heaps_added);
    }
}

/// A commit, release or flush was refused; nothing changed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CommitError {
    /// The pool given is not the one that holds the image's tiles (or the one the changes were
    /// made against).
    #[error("tile pool `{pool}` ({given}) does not hold these tiles; they belong to {owner}")]
    WrongPool {
        /// The name of the pool given.
        pool: String,
        /// Its id.
        given: PoolId,
        /// The pool the image (or the changes) belong to.
        owner: PoolId,
    },
    /// The pool could not serve the tiles.
    #[error(transparent)]
    Pool(#[from] PoolError),
    /// A tile or tail index is wrong.
    #[error(transparent)]
    PageTable(#[from] PageTableError),
    /// The layer or mip is not in the image.
    #[error("layer {layer} mip {mip} is not in the image")]
    NoSuchSubresource {
        /// The layer given.
        layer: u32,
        /// The mip given.
        mip: u32,
    },
    /// The texel region reaches outside its mip.
    #[error(
        "texels {:?} + {:?} of layer {layer} mip {mip} reach outside the mip's {:?} texels",
        region.offset, region.extent, extent
    )]
    RegionOutOfRange {
        /// The layer.
        layer: u32,
        /// The mip.
        mip: u32,
        /// The region given.
        region: TexelRegion,
        /// The mip's extent in texels.
        extent: [u32; 3],
    },
}

/// The residency state of one partially resident image: its page table, the pool its tiles come
/// from and its owner id there.
///
/// Every commit and release checks first that it is given that pool (else
/// [`CommitError::WrongPool`]) and that the tiles, tails, layers, mips and texel regions exist in
/// the image; a refused call changes nothing.
#[derive(Clone, Debug)]
pub struct SparseResidency {
    pool: PoolId,
    owner: ImageId,
    table: PageTable,
}

impl SparseResidency {
    /// An image with nothing resident, taking tiles from the pool `pool` ([`TilePool::id`]) as
    /// `owner`. With [`PoolId::NONE`] every pool is refused (residency another owner keeps).
    pub fn new(pool: PoolId, owner: ImageId, layout: &SparseImageLayout) -> Self {
        Self { pool, owner, table: PageTable::new(layout) }
    }

    /// The owner id used in the pool.
    pub fn owner(&self) -> ImageId {
        self.owner
    }

    /// The pool the tiles come from.
    pub fn pool(&self) -> PoolId {
        self.pool
    }

    /// Whether `pool` is the pool the tiles come from: [`CommitError::WrongPool`] if not.
    pub fn check_pool(&self, pool: &TilePool) -> Result<(), CommitError> {
        if pool.id() == self.pool && self.pool != PoolId::NONE {
            Ok(())
        } else {
            Err(CommitError::WrongPool { pool: pool.desc().name.clone(), given: pool.id(), owner: self.pool })
        }
    }

    /// Whether `region` of (`layer`, `mip`) lies in the image: the mip's information if so,
    /// [`CommitError::NoSuchSubresource`] or [`CommitError::RegionOutOfRange`] if not. An empty
    /// region inside the mip is fine (it touches no tile).
    pub fn check_region(&self, layer: u32, mip: u32, region: TexelRegion) -> Result<MipInfo, CommitError> {
        let layout = self.layout();
        let info = *layout.mip(mip).ok_or(CommitError::NoSuchSubresource { layer, mip })?;
        if layer >= layout.array_layers() {
            return Err(CommitError::NoSuchSubresource { layer, mip });
        }
        if !region.lies_within(info.extent) {
            return Err(CommitError::RegionOutOfRange { layer, mip, region, extent: info.extent });
        }
        Ok(info)
    }

    /// The layout.
    pub fn layout(&self) -> &SparseImageLayout {
        self.table.layout()
    }

    /// The page table (residency queries, min-LOD map).
    pub fn page_table(&self) -> &PageTable {
        &self.table
    }

    /// Refreshes the min-LOD map after this frame's changes; see [`PageTable::refresh_min_lod`].
    pub fn refresh_min_lod(&mut self) -> Vec<super::page_table::MinLodUpdate> {
        self.table.refresh_min_lod()
    }

    /// Makes `tiles` resident: the ones not yet resident get pool tiles in one allocation, handed
    /// out in tile index order so that neighbouring tiles get consecutive memory where the pool
    /// has it. All or nothing: on error nothing changed.
    pub fn commit(
        &mut self,
        pool: &mut TilePool,
        tiles: &[TileIndex],
    ) -> Result<ResidencyChanges, CommitError> {
        self.check_pool(pool)?;
        let count = self.layout().tile_count();
        if let Some(bad) = tiles.iter().find(|t| t.0 >= count) {
            return Err(PageTableError::TileOutOfRange { tile: bad.0, count }.into());
        }
        let mut need: Vec<TileIndex> =
            tiles.iter().copied().filter(|&t| !self.table.is_resident(t)).collect();
        need.sort_unstable();
        need.dedup();
        let mut out = self.changes();
        if need.is_empty() {
            return Ok(out);
        }
        let alloc = pool.allocate(self.owner, need.len() as u32)?;
        out.heaps_added = alloc.heaps_added;
        let physical = alloc.runs.iter().flat_map(|r| r.tiles().collect::<Vec<_>>());
        for (tile, p) in need.into_iter().zip(physical) {
            self.table.map(tile, p).expect("tile checked non-resident and in range");
            out.tiles.push(TileChange { tile, physical: Some(p) });
        }
        Ok(out)
    }

    /// Makes resident every tile of (`layer`, `mip`) that `region` touches; for a tail mip, the
    /// mip tail that holds it. The seed's `TexSubImage` on a sparse texture, minus the upload.
    pub fn commit_region(
        &mut self,
        pool: &mut TilePool,
        layer: u32,
        mip: u32,
        region: TexelRegion,
    ) -> Result<ResidencyChanges, CommitError> {
        self.check_pool(pool)?;
        let m = self.check_region(layer, mip, region)?;
        if m.in_tail {
            let tail = self.layout().tail_of_layer(layer).expect("tail mip has a tail");
            return self.commit_tail(pool, tail);
        }
        let range = self.layout().tiles_covering(mip, region).expect("tiled mip");
        let tiles: Vec<TileIndex> = self.layout().tiles_in(layer, mip, range).collect();
        self.commit(pool, &tiles)
    }

    /// Makes mip tail `tail` resident (a no-op if it is): its tiles as one run where the pool has
    /// one. Tails are pinned: only [`release_tail`](Self::release_tail) or
    /// [`release_all`](Self::release_all) let go of them.
    pub fn commit_tail(&mut self, pool: &mut TilePool, tail: u32) -> Result<ResidencyChanges, CommitError> {
        self.check_pool(pool)?;
        let count = self.layout().mip_tail_count();
        if tail >= count {
            return Err(PageTableError::TailOutOfRange { tail, count }.into());
        }
        let mut out = self.changes();
        if self.table.is_tail_resident(tail) {
            return Ok(out);
        }
        let tiles = self.layout().mip_tail().map_or(0, |t| t.tiles);
        let alloc = pool.allocate(self.owner, tiles)?;
        out.heaps_added = alloc.heaps_added;
        let physical: Vec<PhysicalTile> =
            alloc.runs.iter().flat_map(|r| r.tiles().collect::<Vec<_>>()).collect();
        self.table.map_tail(tail, physical.clone()).expect("tail checked unmapped and sized");
        out.tails.push(TailChange { tail, physical: Some(physical) });
        Ok(out)
    }

    /// Makes `tiles` non-resident and returns their pool tiles (the seed's `NULL` upload). Tiles
    /// already non-resident are skipped.
    pub fn release(
        &mut self,
        pool: &mut TilePool,
        tiles: &[TileIndex],
    ) -> Result<ResidencyChanges, CommitError> {
        self.check_pool(pool)?;
        let count = self.layout().tile_count();
        if let Some(bad) = tiles.iter().find(|t| t.0 >= count) {
            return Err(PageTableError::TileOutOfRange { tile: bad.0, count }.into());
        }
        let mut out = self.changes();
        let mut freed = Vec::new();
        for &tile in tiles {
            if let Ok(p) = self.table.unmap(tile) {
                freed.push(p);
                out.tiles.push(TileChange { tile, physical: None });
            }
        }
        free_tiles(pool, freed)?;
        Ok(out)
    }

    /// Makes non-resident every tile of (`layer`, `mip`) that `region` touches (tail mips: nothing;
    /// the tail is pinned).
    pub fn release_region(
        &mut self,
        pool: &mut TilePool,
        layer: u32,
        mip: u32,
        region: TexelRegion,
    ) -> Result<ResidencyChanges, CommitError> {
        self.check_pool(pool)?;
        let m = self.check_region(layer, mip, region)?;
        if m.in_tail {
            return Ok(self.changes());
        }
        let range = self.layout().tiles_covering(mip, region).expect("tiled mip");
        let tiles: Vec<TileIndex> = self.layout().tiles_in(layer, mip, range).collect();
        self.release(pool, &tiles)
    }

    /// Releases mip tail `tail` (a no-op if it is not resident).
    pub fn release_tail(&mut self, pool: &mut TilePool, tail: u32) -> Result<ResidencyChanges, CommitError> {
        self.check_pool(pool)?;
        let count = self.layout().mip_tail_count();
        if tail >= count {
            return Err(PageTableError::TailOutOfRange { tail, count }.into());
        }
        let mut out = self.changes();
        if let Ok(physical) = self.table.unmap_tail(tail) {
            free_tiles(pool, physical)?;
            out.tails.push(TailChange { tail, physical: None });
        }
        Ok(out)
    }

    /// Points resident tiles at the physical tiles a compaction moved them to (the pool's side is
    /// [`TilePool::apply_compaction`]); returns the changes that bind them there. Residency and the
    /// min-LOD map keep their meaning. All checked first (in range, resident, at the move's
    /// source): on error nothing changed.
    pub fn remap(
        &mut self,
        moves: &[(TileIndex, PhysicalTile, PhysicalTile)],
    ) -> Result<ResidencyChanges, CommitError> {
        let count = self.layout().tile_count();
        for &(tile, from, _) in moves {
            if tile.0 >= count {
                return Err(PageTableError::TileOutOfRange { tile: tile.0, count }.into());
            }
            match self.table.get(tile) {
                None => return Err(PageTableError::NotMapped { tile: tile.0 }.into()),
                Some(current) if current != from => {
                    return Err(PageTableError::AlreadyMapped { tile: tile.0, current }.into())
                }
                Some(_) => {}
            }
        }
        let mut out = self.changes();
        for &(tile, _, to) in moves {
            self.table.remap(tile, to).expect("checked resident");
            out.tiles.push(TileChange { tile, physical: Some(to) });
        }
        Ok(out)
    }

    /// Releases every tile and tail (before destroying the image).
    pub fn release_all(&mut self, pool: &mut TilePool) -> Result<ResidencyChanges, CommitError> {
        self.check_pool(pool)?;
        let tiles: Vec<TileIndex> = self.table.mapped().map(|(t, _)| t).collect();
        let mut out = self.release(pool, &tiles)?;
        for tail in 0..self.layout().mip_tail_count() {
            out.extend(self.release_tail(pool, tail)?);
        }
        Ok(out)
    }
}

impl SparseResidency {
    /// No changes yet, stamped with this residency's pool.
    fn changes(&self) -> ResidencyChanges {
        ResidencyChanges { pool: self.pool, ..ResidencyChanges::default() }
    }
}

/// Returns physical tiles to the pool, merged into runs.
fn free_tiles(pool: &mut TilePool, mut tiles: Vec<PhysicalTile>) -> Result<(), PoolError> {
    tiles.sort_unstable();
    let mut i = 0;
    while i < tiles.len() {
        let first = tiles[i];
        let mut n = 1;
        while i + n < tiles.len()
            && tiles[i + n].heap == first.heap
            && tiles[i + n].tile == first.tile + n as u32
        {
            n += 1;
        }
        pool.free(TileRun { heap: first.heap, first: first.tile, len: n as u32 })?;
        i += n;
    }
    Ok(())
}
