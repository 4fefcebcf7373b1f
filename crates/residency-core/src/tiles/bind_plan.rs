//! The bind planner: a frame's tile changes → few sparse bind regions.
//!
//! On the H200 a `VkSparseImageMemoryBind` costs ~40–70 µs whatever its size, so 4096 one-tile
//! binds take ~155 ms and the same tiles as 32 row binds 1.5 ms. The planner therefore merges
//! tiles that are neighbours in the image **and** whose physical tiles are consecutive in one heap:
//! first into rows (x), then rows into rectangles (y), then rectangles into boxes (z). Unbinds merge
//! on image adjacency alone.
//!
//! Memory order inside a multi-tile region: the region's tiles take consecutive sparse blocks of
//! memory starting at `memoryOffset`, x fastest, then y, then z. Rows alone only rely on x order;
//! [`Coalesce::Rows`] keeps to them for a driver that lays rectangles out differently.

use super::layout::{SparseImageLayout, TileCoord, TileIndex, TileRange};
use super::page_table::PhysicalTile;
use super::pool::HeapIndex;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;

/// One tile's change this frame: bind it to a physical tile, or unbind it (`None`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct TileChange {
    /// The virtual tile.
    pub tile: TileIndex,
    /// Its new physical tile, or `None` to unbind.
    pub physical: Option<PhysicalTile>,
}

/// One mip tail's change this frame: bind it (its tiles in resource order) or unbind it.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct TailChange {
    /// The tail (a layer, or 0 for a single tail).
    pub tail: u32,
    /// Its physical tiles, exactly the tail's tile count, or `None` to unbind.
    pub physical: Option<Vec<PhysicalTile>>,
}

/// How far the planner merges tiles.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Coalesce {
    /// One bind per tile (for measuring what coalescing saves).
    None,
    /// Rows of tiles along x.
    Rows,
    /// Rows, then rectangles, then boxes.
    #[default]
    Boxes,
}

/// Options of [`plan_binds`]. Default: merge into boxes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BindPlanOptions {
    /// How far to merge.
    pub coalesce: Coalesce,
}

/// Where a bind region's memory starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct BindMemory {
    /// The heap (the backend's `VkDeviceMemory`).
    pub heap: HeapIndex,
    /// Byte offset in the heap (`memoryOffset`).
    pub offset: u64,
}

/// One `VkSparseImageMemoryBind`: a box of tiles of one subresource.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ImageBind {
    /// Array layer.
    pub layer: u32,
    /// Mip level.
    pub mip: u32,
    /// First texel.
    pub offset: [u32; 3],
    /// Extent in texels, clamped to the mip's extent at its far edges.
    pub extent: [u32; 3],
    /// The tiles covered, in tile coordinates of the mip.
    pub tiles: TileRange,
    /// The memory bound, or `None` to unbind.
    pub memory: Option<BindMemory>,
}

/// One `VkSparseMemoryBind` of a mip tail (an opaque bind).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct OpaqueBind {
    /// The tail (a layer, or 0 for a single tail).
    pub tail: u32,
    /// `resourceOffset`.
    pub resource_offset: u64,
    /// `size` in bytes.
    pub size: u64,
    /// The memory bound, or `None` to unbind.
    pub memory: Option<BindMemory>,
}

/// The binds of one frame for one image.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BindPlan {
    /// Tile-region binds.
    pub image_binds: Vec<ImageBind>,
    /// Mip tail binds.
    pub opaque_binds: Vec<OpaqueBind>,
}

impl BindPlan {
    /// Bind entries in the plan (image and opaque): what the driver charges for.
    pub fn bind_count(&self) -> usize {
        self.image_binds.len() + self.opaque_binds.len()
    }

    /// Every tile the image binds cover, with its physical tile (`None` for unbinds), in the
    /// order memory is consumed (x fastest). For checking plans; O(tiles).
    pub fn expand(&self, layout: &SparseImageLayout) -> Vec<(TileIndex, Option<PhysicalTile>)> {
        let tile_bytes = layout.tile_bytes();
        let mut out = Vec::new();
        for b in &self.image_binds {
            for (k, [x, y, z]) in b.tiles.iter().enumerate() {
                let Some(index) = layout.tile_index(TileCoord { layer: b.layer, mip: b.mip, x, y, z }) else {
                    continue;
                };
                let physical = b
                    .memory
                    .map(|m| PhysicalTile { heap: m.heap, tile: (m.offset / tile_bytes) as u32 + k as u32 });
                out.push((index, physical));
            }
        }
        out
    }
}

/// A change list could not be planned.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum BindPlanError {
    /// A tile index is not a tile of the image.
    #[error("tile {tile} is out of range (the image has {count} tiles)")]
    TileOutOfRange {
        /// The index given.
        tile: u32,
        /// Tiles in the image.
        count: u32,
    },
    /// A tile appears twice in one frame's changes.
    #[error("tile {tile} is changed twice in one plan")]
    DuplicateTile {
        /// The index given.
        tile: u32,
    },
    /// A mip tail is not one of the image's tails.
    #[error("mip tail {tail} is out of range (the image has {count} mip tails)")]
    TailOutOfRange {
        /// The tail given.
        tail: u32,
        /// Tails in the image.
        count: u32,
    },
    /// A mip tail appears twice in one frame's changes.
    #[error("mip tail {tail} is changed twice in one plan")]
    DuplicateTail {
        /// The tail given.
        tail: u32,
    },
    /// A mip tail bind has the wrong number of physical tiles.
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

#[derive(Clone, Copy, Debug)]
struct Run {
    layer: u32,
    mip: u32,
    start: [u32; 3],
    size: [u32; 3],
    memory: Option<PhysicalTile>,
}

impl Run {
    fn tiles(&self) -> u32 {
        self.size[0] * self.size[1] * self.size[2]
    }

    /// Whether `next`'s memory starts where this run's ends (or both unbind).
    fn memory_continues(&self, next: &Run) -> bool {
        match (self.memory, next.memory) {
            (None, None) => true,
            (Some(a), Some(b)) => {
                a.heap == b.heap && u64::from(a.tile) + u64::from(self.tiles()) == u64::from(b.tile)
            }
            _ => false,
        }
    }
}

/// Plans the binds for one frame's `tiles` and `tails` changes of an image with `layout`.
///
/// The plan covers exactly the changed tiles and maps each to its physical tile. Errors, with
/// nothing planned: a tile or tail out of range, changed twice, or a tail with the wrong tile count.
pub fn plan_binds(
    layout: &SparseImageLayout,
    tiles: &[TileChange],
    tails: &[TailChange],
    options: BindPlanOptions,
) -> Result<BindPlan, BindPlanError> {
    let mut sorted: Vec<TileChange> = tiles.to_vec();
    sorted.sort_unstable_by_key(|c| c.tile);
    let count = layout.tile_count();
    for pair in sorted.windows(2) {
        if pair[0].tile == pair[1].tile {
            return Err(BindPlanError::DuplicateTile { tile: pair[0].tile.0 });
        }
    }
    if let Some(last) = sorted.last().filter(|c| c.tile.0 >= count) {
        return Err(BindPlanError::TileOutOfRange { tile: last.tile.0, count });
    }
    let opaque_binds = plan_tails(layout, tails)?;

    // Tile index order is (layer, mip, z, y, x): rows come out of one pass.
    let mut rows: Vec<Run> = Vec::new();
    for c in &sorted {
        let t = layout.tile_coord(c.tile).expect("tile index in range");
        let run =
            Run { layer: t.layer, mip: t.mip, start: [t.x, t.y, t.z], size: [1, 1, 1], memory: c.physical };
        if options.coalesce != Coalesce::None {
            if let Some(last) = rows.last_mut() {
                let adjacent = last.layer == run.layer
                    && last.mip == run.mip
                    && last.start[1] == run.start[1]
                    && last.start[2] == run.start[2]
                    && last.start[0] + last.size[0] == run.start[0];
                if adjacent && last.memory_continues(&run) {
                    last.size[0] += 1;
                    continue;
                }
            }
        }
        rows.push(run);
    }
    let runs = if options.coalesce == Coalesce::Boxes { merge(merge(rows, 1), 2) } else { rows };

    let tile = layout.tile_shape().to_array();
    let tile_bytes = layout.tile_bytes();
    let image_binds = runs
        .iter()
        .map(|r| {
            let extent_of_mip = layout.mips()[r.mip as usize].extent;
            let offset = [0, 1, 2].map(|a| r.start[a] * tile[a]);
            let extent = [0, 1, 2].map(|a| (r.size[a] * tile[a]).min(extent_of_mip[a] - offset[a]));
            ImageBind {
                layer: r.layer,
                mip: r.mip,
                offset,
                extent,
                tiles: TileRange { start: r.start, end: [0, 1, 2].map(|a| r.start[a] + r.size[a]) },
                memory: r.memory.map(|p| BindMemory { heap: p.heap, offset: u64::from(p.tile) * tile_bytes }),
            }
        })
        .collect();
    Ok(BindPlan { image_binds, opaque_binds })
}

/// What runs must share to merge along an axis: layer, mip, start and size on the other axes, and
/// whether they bind or unbind.
type MergeKey = (u32, u32, [u32; 3], [u32; 3], bool);

/// Merges runs along `axis` (1: rows into rectangles, 2: rectangles into boxes) when they have the
/// same extent on the other axes, touch along `axis`, and their memory continues. `runs` is sorted
/// by (layer, mip, z, y, x) and stays so.
fn merge(runs: Vec<Run>, axis: usize) -> Vec<Run> {
    let mut out: Vec<Run> = Vec::with_capacity(runs.len());
    let mut open: HashMap<MergeKey, usize> = HashMap::new();
    for run in runs {
        let mut key_start = run.start;
        key_start[axis] = 0;
        let mut key_size = run.size;
        key_size[axis] = 0;
        let key = (run.layer, run.mip, key_start, key_size, run.memory.is_some());
        if let Some(&i) = open.get(&key) {
            let r = &mut out[i];
            if r.start[axis] + r.size[axis] == run.start[axis] && r.memory_continues(&run) {
                r.size[axis] += run.size[axis];
                continue;
            }
        }
        open.insert(key, out.len());
        out.push(run);
    }
    out.sort_unstable_by_key(|r| (r.layer, r.mip, r.start[2], r.start[1], r.start[0]));
    out
}

fn plan_tails(layout: &SparseImageLayout, tails: &[TailChange]) -> Result<Vec<OpaqueBind>, BindPlanError> {
    let count = layout.mip_tail_count();
    let mut seen = vec![false; count as usize];
    let mut out = Vec::new();
    let tile_bytes = layout.tile_bytes();
    for change in tails {
        let tail = change.tail;
        let Some(info) = layout.mip_tail().filter(|_| tail < count) else {
            return Err(BindPlanError::TailOutOfRange { tail, count });
        };
        if std::mem::replace(&mut seen[tail as usize], true) {
            return Err(BindPlanError::DuplicateTail { tail });
        }
        let base = info.resource_offset(tail);
        let Some(physical) = &change.physical else {
            out.push(OpaqueBind { tail, resource_offset: base, size: info.size, memory: None });
            continue;
        };
        if physical.len() != info.tiles as usize {
            return Err(BindPlanError::TailSizeMismatch { tail, expected: info.tiles, got: physical.len() });
        }
        let mut i = 0;
        while i < physical.len() {
            let first = physical[i];
            let n = 1 + physical[i + 1..]
                .iter()
                .enumerate()
                .take_while(|(k, p)| {
                    p.heap == first.heap && u64::from(p.tile) == u64::from(first.tile) + *k as u64 + 1
                })
                .count();
            let start = i as u64 * tile_bytes;
            out.push(OpaqueBind {
                tail,
                resource_offset: base + start,
                size: (n as u64 * tile_bytes).min(info.size - start),
                memory: Some(BindMemory { heap: first.heap, offset: u64::from(first.tile) * tile_bytes }),
            });
            i += n;
        }
    }
    Ok(out)
}
