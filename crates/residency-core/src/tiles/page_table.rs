//! The page table of one partially resident image: virtual tile → physical tile, a residency
//! bitmap per mip, the mip tails, and the per-region min-LOD map that shaders clamp to.

use super::layout::{SparseImageLayout, TileIndex, TileRange};
use super::pool::HeapIndex;
use serde::{Deserialize, Serialize};

/// A physical tile: tile `tile` of heap `heap` in a [`TilePool`](super::pool::TilePool)
/// (byte offset `tile × tile_bytes` in that heap's memory).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct PhysicalTile {
    /// The heap.
    pub heap: HeapIndex,
    /// The tile within the heap.
    pub tile: u32,
}

impl PhysicalTile {
    const NONE: u64 = u64::MAX;

    fn pack(self) -> u64 {
        (u64::from(self.heap.0) << 32) | u64::from(self.tile)
    }

    fn unpack(v: u64) -> Option<Self> {
        (v != Self::NONE).then_some(Self { heap: HeapIndex((v >> 32) as u32), tile: v as u32 })
    }
}

/// The min-LOD value of a region of which not even the coarsest level is resident.
pub const MIN_LOD_NONE: u8 = u8::MAX;

/// A box of min-LOD map entries (in mip-0 tiles) of one layer that changed since the last
/// [`PageTable::refresh_min_lod`]; the backend uploads just that box of the min-LOD texture.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MinLodUpdate {
    /// The layer.
    pub layer: u32,
    /// The entries that changed, in mip-0 tile coordinates.
    pub regions: TileRange,
}

/// A page-table operation was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PageTableError {
    /// The tile index is not a tile of this image.
    #[error("tile {tile} is out of range (the image has {count} tiles)")]
    TileOutOfRange {
        /// The index given.
        tile: u32,
        /// Tiles in the image.
        count: u32,
    },
    /// The tile is already mapped; unmap it first.
    #[error("tile {tile} is already mapped to heap {} tile {}", current.heap.0, current.tile)]
    AlreadyMapped {
        /// The index given.
        tile: u32,
        /// Its current physical tile.
        current: PhysicalTile,
    },
    /// The tile is not mapped.
    #[error("tile {tile} is not mapped")]
    NotMapped {
        /// The index given.
        tile: u32,
    },
    /// The mip tail index is not one of this image's tails.
    #[error("mip tail {tail} is out of range (the image has {count} mip tails)")]
    TailOutOfRange {
        /// The tail given.
        tail: u32,
        /// Tails in the image.
        count: u32,
    },
    /// The mip tail is already mapped.
    #[error("mip tail {tail} is already mapped")]
    TailAlreadyMapped {
        /// The tail given.
        tail: u32,
    },
    /// The mip tail is not mapped.
    #[error("mip tail {tail} is not mapped")]
    TailNotMapped {
        /// The tail given.
        tail: u32,
    },
    /// A mip tail needs exactly its tile count of physical tiles.
    #[error("mip tail {tail} needs {expected} physical tiles, {got} given")]
    TailSizeMismatch {
        /// The tail given.
        tail: u32,
        /// Tiles of one tail.
        expected: u32,
        /// Tiles given.
        got: usize,
    },
}

/// Virtual → physical tile map of one image, with residency bitmaps and the min-LOD map.
///
/// Invariants (checked by [`check_invariants`](Self::check_invariants)): a tile's residency bit is
/// set exactly when it has a physical tile; the per-mip counts equal the bits set in that mip;
/// after [`refresh_min_lod`](Self::refresh_min_lod), every min-LOD entry equals the finest LOD of
/// an all-resident chain from that LOD to the coarsest level for its region.
#[derive(Clone, Debug)]
pub struct PageTable {
    layout: SparseImageLayout,
    entries: Vec<u64>,
    bits: Vec<u64>,
    mip_resident: Vec<u32>,
    resident: u32,
    tails: Vec<Option<Vec<PhysicalTile>>>,
    regions: [u32; 3],
    /// `cover[mip][axis][r]`: the tiles of `mip` along `axis` that mip-0 region `r` samples.
    cover: Vec<[Vec<(u32, u32)>; 3]>,
    /// `covered_by[mip][axis][t]`: the mip-0 regions whose cover includes tile `t` of `mip`.
    covered_by: Vec<[Vec<(u32, u32)>; 3]>,
    min_lod: Vec<u8>,
    dirty: Vec<Option<TileRange>>,
}

impl PageTable {
    /// An empty page table (nothing resident) for `layout`.
    pub fn new(layout: &SparseImageLayout) -> Self {
        let tiles = layout.tile_count() as usize;
        let layers = layout.array_layers();
        let mips = layout.mip_levels() as usize;
        let first_tail = layout.first_tail_lod() as usize;
        let mip0 = layout.mips()[0];
        let regions = if mip0.in_tail { [1, 1, 1] } else { mip0.tiles };
        let tile = layout.tile_shape().to_array();
        let mut cover = Vec::with_capacity(first_tail);
        let mut covered_by = Vec::with_capacity(first_tail);
        for m in &layout.mips()[..first_tail] {
            let mut c: [Vec<(u32, u32)>; 3] = Default::default();
            let mut inv: [Vec<(u32, u32)>; 3] = Default::default();
            for a in 0..3 {
                let e0 = u64::from(mip0.extent[a]);
                let em = u64::from(m.extent[a]);
                let t = u64::from(tile[a]);
                inv[a] = vec![(u32::MAX, 0); m.tiles[a] as usize];
                for r in 0..u64::from(regions[a]) {
                    let lo0 = r * t;
                    let hi0 = ((r + 1) * t).min(e0);
                    let lo = lo0 * em / e0;
                    let hi = (hi0 * em).div_ceil(e0).max(lo + 1).min(em);
                    let (ts, te) = ((lo / t) as u32, ((hi - 1) / t + 1) as u32);
                    c[a].push((ts, te));
                    for x in ts..te {
                        let slot = &mut inv[a][x as usize];
                        slot.0 = slot.0.min(r as u32);
                        slot.1 = slot.1.max(r as u32 + 1);
                    }
                }
            }
            cover.push(c);
            covered_by.push(inv);
        }
        let region_count = regions.iter().map(|&r| r as usize).product::<usize>();
        let mut table = Self {
            layout: layout.clone(),
            entries: vec![PhysicalTile::NONE; tiles],
            bits: vec![0; tiles.div_ceil(64)],
            mip_resident: vec![0; layers as usize * mips],
            resident: 0,
            tails: vec![None; layout.mip_tail_count() as usize],
            regions,
            cover,
            covered_by,
            min_lod: vec![MIN_LOD_NONE; region_count * layers as usize],
            dirty: vec![None; layers as usize],
        };
        for layer in 0..layers {
            table.mark_all_dirty(layer);
        }
        table.refresh_min_lod();
        table
    }

    /// The layout this table maps.
    pub fn layout(&self) -> &SparseImageLayout {
        &self.layout
    }

    fn check_tile(&self, tile: TileIndex) -> Result<usize, PageTableError> {
        if tile.0 >= self.layout.tile_count() {
            return Err(PageTableError::TileOutOfRange { tile: tile.0, count: self.layout.tile_count() });
        }
        Ok(tile.0 as usize)
    }

    fn bit(&self, i: usize) -> bool {
        self.bits[i / 64] & (1 << (i % 64)) != 0
    }

    fn mip_slot(&self, tile: TileIndex) -> (u32, u32, usize) {
        let c = self.layout.tile_coord(tile).expect("checked tile index");
        (c.layer, c.mip, (c.layer * self.layout.mip_levels() + c.mip) as usize)
    }

    /// Maps virtual `tile` to `physical`. Refused when the tile is already mapped.
    pub fn map(&mut self, tile: TileIndex, physical: PhysicalTile) -> Result<(), PageTableError> {
        let i = self.check_tile(tile)?;
        if let Some(current) = PhysicalTile::unpack(self.entries[i]) {
            return Err(PageTableError::AlreadyMapped { tile: tile.0, current });
        }
        self.entries[i] = physical.pack();
        self.bits[i / 64] |= 1 << (i % 64);
        let (layer, mip, slot) = self.mip_slot(tile);
        self.mip_resident[slot] += 1;
        self.resident += 1;
        self.mark_tile_dirty(layer, mip, tile);
        Ok(())
    }

    /// Unmaps virtual `tile`, returning the physical tile it had.
    pub fn unmap(&mut self, tile: TileIndex) -> Result<PhysicalTile, PageTableError> {
        let i = self.check_tile(tile)?;
        let current =
            PhysicalTile::unpack(self.entries[i]).ok_or(PageTableError::NotMapped { tile: tile.0 })?;
        self.entries[i] = PhysicalTile::NONE;
        self.bits[i / 64] &= !(1 << (i % 64));
        let (layer, mip, slot) = self.mip_slot(tile);
        self.mip_resident[slot] -= 1;
        self.resident -= 1;
        self.mark_tile_dirty(layer, mip, tile);
        Ok(current)
    }

    /// Points resident `tile` at `physical` instead (its contents moved there): residency, the
    /// min-LOD map and its dirty boxes are unchanged, since what is resident is. Returns the
    /// physical tile it had.
    pub fn remap(&mut self, tile: TileIndex, physical: PhysicalTile) -> Result<PhysicalTile, PageTableError> {
        let i = self.check_tile(tile)?;
        let current =
            PhysicalTile::unpack(self.entries[i]).ok_or(PageTableError::NotMapped { tile: tile.0 })?;
        self.entries[i] = physical.pack();
        Ok(current)
    }

    /// The physical tile of `tile`, if resident (and in range).
    pub fn get(&self, tile: TileIndex) -> Option<PhysicalTile> {
        self.entries.get(tile.0 as usize).copied().and_then(PhysicalTile::unpack)
    }

    /// Whether `tile` is resident.
    pub fn is_resident(&self, tile: TileIndex) -> bool {
        (tile.0 as usize) < self.entries.len() && self.bit(tile.0 as usize)
    }

    /// Bytes of host memory the table holds (its entries, residency bits, min-LOD map and the
    /// region covers behind it, tails included): the CPU cost of the image's virtual size.
    pub fn memory_bytes(&self) -> u64 {
        let vec = |len: usize, size: usize| (len * size) as u64;
        let covers: u64 = self
            .cover
            .iter()
            .chain(&self.covered_by)
            .flat_map(|axes| axes.iter())
            .map(|v| vec(v.capacity(), std::mem::size_of::<(u32, u32)>()))
            .sum();
        let tails: u64 =
            self.tails.iter().flatten().map(|t| vec(t.capacity(), std::mem::size_of::<PhysicalTile>())).sum();
        vec(self.entries.capacity(), 8)
            + vec(self.bits.capacity(), 8)
            + vec(self.mip_resident.capacity(), 4)
            + vec(self.tails.capacity(), std::mem::size_of::<Option<Vec<PhysicalTile>>>())
            + tails
            + covers
            + vec(
                self.cover.capacity() + self.covered_by.capacity(),
                std::mem::size_of::<[Vec<(u32, u32)>; 3]>(),
            )
            + vec(self.min_lod.capacity(), 1)
            + vec(self.dirty.capacity(), std::mem::size_of::<Option<TileRange>>())
    }

    /// Resident tiles in the whole image (mip tails excluded).
    pub fn resident_tiles(&self) -> u32 {
        self.resident
    }

    /// Resident tiles of (`layer`, `mip`); 0 for tail mips.
    pub fn resident_in_mip(&self, layer: u32, mip: u32) -> u32 {
        if layer >= self.layout.array_layers() || mip >= self.layout.mip_levels() {
            return 0;
        }
        self.mip_resident[(layer * self.layout.mip_levels() + mip) as usize]
    }

    /// Whether every tile of (`layer`, `mip`) is resident; for tail mips, whether the tail is.
    pub fn is_mip_resident(&self, layer: u32, mip: u32) -> bool {
        match self.layout.mip(mip) {
            Some(m) if m.in_tail => {
                self.layout.tail_of_layer(layer).is_some_and(|t| self.is_tail_resident(t))
            }
            Some(m) => {
                layer < self.layout.array_layers() && self.resident_in_mip(layer, mip) == m.tile_count()
            }
            None => false,
        }
    }

    /// Whether every tile of a box in (`layer`, `mip`) is resident. Rows are checked a bitmap word
    /// at a time.
    pub fn is_range_resident(&self, layer: u32, mip: u32, range: TileRange) -> bool {
        let Some((first, _)) = self.layout.mip_tile_span(layer, mip) else { return false };
        let m = &self.layout.mips()[mip as usize];
        let [tx, ty, tz] = m.tiles;
        if (0..3).any(|a| range.end[a] > [tx, ty, tz][a]) {
            return false;
        }
        if range.is_empty() {
            return true;
        }
        for z in range.start[2]..range.end[2] {
            for y in range.start[1]..range.end[1] {
                let row = first.0 + (z * ty + y) * tx;
                if !self.bits_all_set((row + range.start[0]) as usize, (row + range.end[0]) as usize) {
                    return false;
                }
            }
        }
        true
    }

    fn bits_all_set(&self, start: usize, end: usize) -> bool {
        let mut i = start;
        while i < end {
            let word = i / 64;
            let lo = i % 64;
            let hi = (end - word * 64).min(64);
            let mask = if hi - lo == 64 { u64::MAX } else { ((1u64 << (hi - lo)) - 1) << lo };
            if self.bits[word] & mask != mask {
                return false;
            }
            i = word * 64 + hi;
        }
        true
    }

    /// Maps mip tail `tail` to `physical` (exactly the tail's tile count, in resource order).
    pub fn map_tail(&mut self, tail: u32, physical: Vec<PhysicalTile>) -> Result<(), PageTableError> {
        let count = self.tails.len() as u32;
        let expected = self.layout.mip_tail().map_or(0, |t| t.tiles);
        let slot = self.tails.get_mut(tail as usize).ok_or(PageTableError::TailOutOfRange { tail, count })?;
        if slot.is_some() {
            return Err(PageTableError::TailAlreadyMapped { tail });
        }
        if physical.len() != expected as usize {
            return Err(PageTableError::TailSizeMismatch { tail, expected, got: physical.len() });
        }
        *slot = Some(physical);
        self.mark_tail_dirty(tail);
        Ok(())
    }

    /// Unmaps mip tail `tail`, returning its physical tiles.
    pub fn unmap_tail(&mut self, tail: u32) -> Result<Vec<PhysicalTile>, PageTableError> {
        let count = self.tails.len() as u32;
        let slot = self.tails.get_mut(tail as usize).ok_or(PageTableError::TailOutOfRange { tail, count })?;
        let tiles = slot.take().ok_or(PageTableError::TailNotMapped { tail })?;
        self.mark_tail_dirty(tail);
        Ok(tiles)
    }

    /// Whether mip tail `tail` is resident.
    pub fn is_tail_resident(&self, tail: u32) -> bool {
        self.tails.get(tail as usize).is_some_and(Option::is_some)
    }

    /// The physical tiles of mip tail `tail`, if resident.
    pub fn tail_tiles(&self, tail: u32) -> Option<&[PhysicalTile]> {
        self.tails.get(tail as usize)?.as_deref()
    }

    /// Every mapped tile and its physical tile, in index order.
    pub fn mapped(&self) -> impl Iterator<Item = (TileIndex, PhysicalTile)> + '_ {
        self.entries
            .iter()
            .enumerate()
            .filter_map(|(i, &e)| PhysicalTile::unpack(e).map(|p| (TileIndex(i as u32), p)))
    }

    /// The min-LOD map's size in entries per layer: one per mip-0 tile (x, y, z).
    pub fn min_lod_extent(&self) -> [u32; 3] {
        self.regions
    }

    fn region_slot(&self, layer: u32, r: [u32; 3]) -> usize {
        let [rx, ry, rz] = self.regions;
        (((layer * rz + r[2]) * ry + r[1]) * rx + r[0]) as usize
    }

    /// The finest LOD of an all-resident chain for mip-0 region `r` of `layer`, computed now.
    fn compute_region(&self, layer: u32, r: [u32; 3]) -> u8 {
        let first_tail = self.layout.first_tail_lod();
        let mut best = MIN_LOD_NONE;
        if let Some(tail) = self.layout.tail_of_layer(layer) {
            if !self.is_tail_resident(tail) {
                return MIN_LOD_NONE;
            }
            best = first_tail as u8;
        }
        for mip in (0..first_tail).rev() {
            let c = &self.cover[mip as usize];
            let range = TileRange {
                start: [c[0][r[0] as usize].0, c[1][r[1] as usize].0, c[2][r[2] as usize].0],
                end: [c[0][r[0] as usize].1, c[1][r[1] as usize].1, c[2][r[2] as usize].1],
            };
            if !self.is_range_resident(layer, mip, range) {
                break;
            }
            best = mip as u8;
        }
        best
    }

    /// The finest LOD `l` such that every level from `l` to the coarsest (the mip tail included)
    /// is resident over the whole box `regions` of mip-0 tiles in `layer`; `None` when even the
    /// coarsest level is missing somewhere. Computed from the bitmaps, not the cached map.
    pub fn finest_resident_lod(&self, layer: u32, regions: TileRange) -> Option<u32> {
        if layer >= self.layout.array_layers() || (0..3).any(|a| regions.end[a] > self.regions[a]) {
            return None;
        }
        let mut worst = 0u8;
        for r in regions.iter() {
            let v = self.compute_region(layer, r);
            if v == MIN_LOD_NONE {
                return None;
            }
            worst = worst.max(v);
        }
        Some(u32::from(worst))
    }

    /// The cached min-LOD entry of mip-0 region `r` of `layer` (as of the last refresh);
    /// [`MIN_LOD_NONE`] for a layer or region outside the map.
    pub fn min_lod(&self, layer: u32, r: [u32; 3]) -> u8 {
        if layer >= self.layout.array_layers() || (0..3).any(|a| r[a] >= self.regions[a]) {
            return MIN_LOD_NONE;
        }
        self.min_lod[self.region_slot(layer, r)]
    }

    /// The cached min-LOD map of `layer`, x fastest, then y, then z (as of the last refresh);
    /// empty for a layer the image does not have.
    pub fn min_lod_layer(&self, layer: u32) -> &[u8] {
        let n = self.regions.iter().map(|&r| r as usize).product::<usize>();
        let start = (layer as usize).checked_mul(n);
        start.and_then(|s| self.min_lod.get(s..s.checked_add(n)?)).unwrap_or(&[])
    }

    /// Recomputes the min-LOD entries touched since the last refresh and returns the boxes that
    /// were recomputed, one per layer at most, for the backend to upload in the same frame as the
    /// binds.
    pub fn refresh_min_lod(&mut self) -> Vec<MinLodUpdate> {
        let mut updates = Vec::new();
        for layer in 0..self.layout.array_layers() {
            let Some(range) = self.dirty[layer as usize].take() else { continue };
            for r in range.iter() {
                let v = self.compute_region(layer, r);
                let slot = self.region_slot(layer, r);
                self.min_lod[slot] = v;
            }
            updates.push(MinLodUpdate { layer, regions: range });
        }
        updates
    }

    fn mark_dirty(&mut self, layer: u32, range: TileRange) {
        let d = &mut self.dirty[layer as usize];
        *d = Some(match *d {
            None => range,
            Some(old) => TileRange {
                start: [0, 1, 2].map(|a| old.start[a].min(range.start[a])),
                end: [0, 1, 2].map(|a| old.end[a].max(range.end[a])),
            },
        });
    }

    fn mark_all_dirty(&mut self, layer: u32) {
        self.mark_dirty(layer, TileRange { start: [0; 3], end: self.regions });
    }

    fn mark_tile_dirty(&mut self, layer: u32, mip: u32, tile: TileIndex) {
        let c = self.layout.tile_coord(tile).expect("checked tile index");
        let inv = &self.covered_by[mip as usize];
        let pos = [c.x, c.y, c.z];
        let start = [0, 1, 2].map(|a| inv[a][pos[a] as usize].0);
        let end = [0, 1, 2].map(|a| inv[a][pos[a] as usize].1);
        if (0..3).all(|a| start[a] < end[a]) {
            self.mark_dirty(layer, TileRange { start, end });
        }
    }

    fn mark_tail_dirty(&mut self, tail: u32) {
        let single = self.layout.mip_tail().is_some_and(|t| t.single);
        if single {
            for layer in 0..self.layout.array_layers() {
                self.mark_all_dirty(layer);
            }
        } else {
            self.mark_all_dirty(tail);
        }
    }

    /// Checks the table's invariants; `Err` names the first one broken (a bug, never user error).
    pub fn check_invariants(&self) -> Result<(), String> {
        let mut per_mip = vec![0u32; self.mip_resident.len()];
        let mut total = 0;
        for (i, &e) in self.entries.iter().enumerate() {
            let mapped = e != PhysicalTile::NONE;
            if mapped != self.bit(i) {
                return Err(format!("tile {i}: residency bit {} but entry {e:#x}", self.bit(i)));
            }
            if mapped {
                let (_, _, slot) = self.mip_slot(TileIndex(i as u32));
                per_mip[slot] += 1;
                total += 1;
            }
        }
        let tail_bits = self.bits.len() * 64 - self.entries.len();
        if tail_bits > 0 && self.bits.last().is_some_and(|w| w >> (64 - tail_bits) != 0) {
            return Err("residency bits set beyond the last tile".into());
        }
        if per_mip != self.mip_resident {
            return Err(format!("per-mip counts {:?} != recount {per_mip:?}", self.mip_resident));
        }
        if total != self.resident {
            return Err(format!("resident count {} != recount {total}", self.resident));
        }
        for layer in 0..self.layout.array_layers() {
            if self.dirty[layer as usize].is_some() {
                continue;
            }
            for r in (TileRange { start: [0; 3], end: self.regions }).iter() {
                let cached = self.min_lod(layer, r);
                let now = self.compute_region(layer, r);
                if cached != now {
                    return Err(format!(
                        "min-LOD of layer {layer} region {r:?}: cached {cached}, actual {now}"
                    ));
                }
            }
        }
        Ok(())
    }
}
