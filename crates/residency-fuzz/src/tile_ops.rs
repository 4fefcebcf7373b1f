//! The `tile_math` target: random virtual images laid out with standard, profile or arbitrary
//! device tile shapes (what a device profile can claim), then random commits and releases through
//! a [`SparseResidency`] and a [`TilePool`], each frame's changes planned into binds.
//!
//! Checked: layout bookkeeping (tile index ↔ coordinates, tile grids covering every mip, regions
//! inside their mips), residency counts that agree between page table and pool after every
//! operation, the page table's and the pool's own invariant checkers after each of the first
//! [`FULL_CHECK_PREFIX`] operations, then every [`FULL_CHECK_INTERVAL`]-th and at the end, bind
//! plans that cover exactly the changed tiles, and compaction passes (planned, applied, remapped,
//! sometimes reverted exactly) in between.

use crate::input::Input;
use crate::profiles;
use residency_core::format::Format;
use residency_core::profile::{ImageDimension, ImageProbeDesc, MemoryRequirements, SparseImageProbe};
use residency_core::tiles::{
    plan_binds, BindPlanOptions, Coalesce, DeviceMipTail, ImageId, LayoutLimits, MipTailModel, PhysicalTile,
    ResidencyChanges, ShapeSource, SparseDimension, SparseFormatInfo, SparseImageDesc, SparseImageLayout,
    SparseResidency, TexelRegion, TileChange, TileIndex, TilePool, TilePoolDesc, TileShape,
    STANDARD_TILE_BYTES,
};
use std::collections::BTreeMap;

/// Images with more tiles than this are only laid out, not committed (a page table holds an entry
/// per tile).
const MAX_RESIDENT_TILES: u32 = 1 << 12;
/// Likewise for layers: a page table holds per-layer counts, min-LOD maps and mip tails, so an
/// image of 2^31 layers whose mips all live in the tail has no tiles but a huge table (the
/// device's `maxImageArrayLayers` bounds it in practice).
const MAX_RESIDENT_LAYERS: u32 = 64;
/// Operations per input at most (a 4 KiB input holds hundreds).
const MAX_OPS: usize = 128;
/// The page table's and the pool's own checkers (walks of every tile, and a recomputation of
/// every min-LOD region) run after each of the first this many operations of an input…
const FULL_CHECK_PREFIX: usize = 4;
/// …then after every this many, and at the end; page table and pool are compared (resident
/// counts, tiles held) after every operation. Running the walks after every operation spent
/// 52 % of the target's time in them, and with 16 and 16 still 30 %; a corruption they would see
/// persists until the next one.
const FULL_CHECK_INTERVAL: usize = 32;

pub(crate) fn run(data: &[u8]) {
    let mut input = Input::new(data);
    let desc = image_desc(&mut input);
    let limits = match input.u8() % 3 {
        0 => LayoutLimits::unbounded(),
        1 => LayoutLimits::from_profile(&profiles::all()[0]),
        _ => LayoutLimits {
            max_dimension_2d: input.u32(),
            max_dimension_3d: input.u32(),
            max_array_layers: input.u32(),
            sparse_address_space_size: input.size(),
        },
    };
    let info = match input.u8() % 4 {
        0 => SparseFormatInfo::standard(desc.format, desc.dimension),
        1 => SparseFormatInfo::from_profile(&profiles::all()[0], desc.format, desc.dimension),
        2 => SparseFormatInfo::from_profile(&profiles::all()[1], desc.format, desc.dimension),
        _ => Ok(device_info(&mut input, &desc)),
    };
    let Ok(info) = info else { return };
    let info = if input.u8() % 4 == 0 { info.with_mip_tail_model(MipTailModel::NoTail) } else { info };
    let layout = if input.u8() % 4 == 0 {
        let tail = DeviceMipTail {
            first_lod: input.u32(),
            size: input.size(),
            offset: input.size(),
            stride: input.size(),
        };
        SparseImageLayout::with_device_mip_tail(&desc, &info, &limits, tail)
    } else {
        SparseImageLayout::new(&desc, &info, &limits)
    };
    let Ok(layout) = layout else { return };
    check_layout(&layout, &mut input);
    if layout.tile_count() <= MAX_RESIDENT_TILES && layout.array_layers() <= MAX_RESIDENT_LAYERS {
        residency_ops(&layout, &mut input);
    }
}

fn image_desc(input: &mut Input<'_>) -> SparseImageDesc {
    let format = input.pick(Format::ALL);
    let three_d = input.u8() % 4 == 0;
    let small = input.u8() % 8 != 0;
    let mut side = |max: u64| if small { input.range(0, max) as u32 } else { input.u32() };
    let (width, height) = (side(4096), side(4096));
    let mut desc = if three_d {
        let depth = side(256);
        SparseImageDesc::new_3d(format, width, height, depth)
    } else {
        SparseImageDesc::new_2d(format, width, height)
    };
    match input.u8() % 4 {
        0 => desc.mip_levels = input.u32(),
        1 => desc.mip_levels = input.range(0, 40) as u32,
        _ => {}
    }
    match input.u8() % 4 {
        0 => desc.array_layers = input.u32(),
        1 => desc.array_layers = input.range(0, 6) as u32,
        _ => {}
    }
    if input.u8() % 8 == 0 {
        desc.depth = input.u32();
    }
    desc
}

/// Format info as a device (through its profile) may report it: any non-empty tile shape, a
/// power-of-two tile size of at least 64 KiB, and possibly a probed mip tail.
fn device_info(input: &mut Input<'_>, desc: &SparseImageDesc) -> SparseFormatInfo {
    let mut side = || match input.u8() % 4 {
        0 => input.u32().max(1),
        _ => 1 << input.below(12),
    };
    let tile = TileShape::new(side(), side(), side());
    let tile_bytes = match input.u8() % 4 {
        0 => 1 << input.range(16, 63),
        _ => STANDARD_TILE_BYTES,
    };
    let probe = input.bool().then(|| SparseImageProbe {
        desc: ImageProbeDesc {
            dimension: if desc.dimension == SparseDimension::D3 {
                ImageDimension::D3
            } else {
                ImageDimension::D2
            },
            width: desc.width,
            height: desc.height,
            depth: desc.depth,
            array_layers: if input.bool() { desc.array_layers } else { input.u32() },
            mip_levels: desc.mip_levels,
            samples: 1,
            attachment: false,
        },
        mip_tail_first_lod: input.u32(),
        mip_tail_size: input.size(),
        mip_tail_offset: input.size(),
        mip_tail_stride: input.size(),
        requirements: MemoryRequirements {
            size: input.size(),
            alignment: tile_bytes,
            memory_type_bits: 1,
            prefers_dedicated: false,
        },
    });
    SparseFormatInfo {
        format: desc.format,
        dimension: desc.dimension,
        tile,
        tile_bytes,
        source: ShapeSource::Device,
        single_miptail: input.bool(),
        aligned_mip_size: input.bool(),
        mip_tail_model: if input.bool() { MipTailModel::Standard } else { MipTailModel::NoTail },
        probe,
    }
}

pub(crate) fn check_layout(layout: &SparseImageLayout, input: &mut Input<'_>) {
    let tile = layout.tile_shape().to_array();
    let count = layout.tile_count();
    assert_eq!(u64::from(count), u64::from(layout.tiles_per_layer()) * u64::from(layout.array_layers()));
    assert!(
        layout.virtual_bytes() >= u64::from(count) * layout.tile_bytes(),
        "virtual bytes below the tiles"
    );
    assert_eq!(layout.mips().len() as u32, layout.mip_levels());
    let mut next_first = 0u64;
    for (lod, m) in layout.mips().iter().enumerate() {
        assert_eq!(m.lod, lod as u32);
        assert_eq!(m.in_tail, m.lod >= layout.first_tail_lod());
        if m.in_tail {
            assert_eq!(m.tile_count(), 0);
            continue;
        }
        assert_eq!(u64::from(m.first_tile), next_first, "mips are consecutive tile spans");
        next_first += u64::from(m.tile_count());
        for (a, ((&tiles, &extent), &side)) in m.tiles.iter().zip(&m.extent).zip(&tile).enumerate() {
            // The grid covers the mip and no more than one partial tile beyond it.
            let covered = u64::from(tiles) * u64::from(side);
            assert!(covered >= u64::from(extent), "mip {lod} axis {a}: {m:?}");
            assert!(covered - u64::from(extent) < u64::from(side), "mip {lod} axis {a}: {m:?}");
        }
    }
    assert_eq!(next_first, u64::from(layout.tiles_per_layer()));
    if let Some(t) = layout.mip_tail() {
        assert_eq!(t.first_lod, layout.first_tail_lod());
        assert_eq!(t.count, layout.mip_tail_count());
        assert!(t.count == 1 || t.count == layout.array_layers());
    } else {
        assert_eq!(layout.mip_tail_count(), 0);
    }
    // Index ↔ coordinates on a few tiles: the first, the last and random ones.
    if count > 0 {
        let mut samples = vec![0, count - 1];
        samples.extend((0..8).map(|_| input.below(u64::from(count)) as u32));
        for i in samples {
            let c = layout
                .tile_coord(TileIndex(i))
                .unwrap_or_else(|| panic!("tile {i} of {count} has no coordinates"));
            assert_eq!(layout.tile_index(c), Some(TileIndex(i)), "{c:?}");
            let region = layout.tile_region(c).expect("a tile has a region");
            let extent = layout.mips()[c.mip as usize].extent;
            for ((&offset, &size), &mip_size) in region.offset.iter().zip(&region.extent).zip(&extent) {
                assert!(size >= 1 && offset + size <= mip_size, "{c:?} {region:?}");
            }
            let covering = layout.tiles_covering(c.mip, region).expect("tiled mip");
            assert_eq!(covering.count(), 1, "a tile's own region covers only it");
            assert_eq!(covering.start, [c.x, c.y, c.z]);
        }
        assert_eq!(layout.tile_coord(TileIndex(count)), None);
    }
    // Arbitrary texel boxes stay inside their mip's grid.
    for _ in 0..4 {
        let mip = input.below(u64::from(layout.mip_levels()) + 1) as u32;
        let region = TexelRegion {
            offset: [input.u32(), input.u16().into(), input.u8().into()],
            extent: [input.u32(), input.u16().into(), input.u8().into()],
        };
        if let Some(range) = layout.tiles_covering(mip, region) {
            let m = layout.mips()[mip as usize];
            for a in 0..3 {
                assert!(range.start[a] <= range.end[a] && range.end[a] <= m.tiles[a], "{range:?} {m:?}");
            }
        }
    }
}

fn residency_ops(layout: &SparseImageLayout, input: &mut Input<'_>) {
    let owner = ImageId(input.below(4) as u32);
    let budget = input.range(0, 2 * u64::from(MAX_RESIDENT_TILES)) as u32;
    let mut pool = TilePool::new(
        TilePoolDesc::default().with_tiles_per_heap(input.range(1, 512) as u32).with_budget_tiles(budget),
    );
    let mut image = SparseResidency::new(pool.id(), owner, layout);
    let count = layout.tile_count();
    let tails = layout.mip_tail_count();
    let tail_tiles = layout.mip_tail().map_or(0, |t| t.tiles);
    for op in 0..MAX_OPS {
        if input.is_empty() {
            break;
        }
        let tile_list = |input: &mut Input<'_>| -> Vec<TileIndex> {
            let n = input.below(17);
            (0..n).map(|_| TileIndex(input.below(u64::from(count) + 2) as u32)).collect()
        };
        let region = |input: &mut Input<'_>| TexelRegion {
            offset: [input.u16().into(), input.u16().into(), input.u8().into()],
            extent: [input.u16().into(), input.u16().into(), input.u8().into()],
        };
        let result = match input.u8() % 9 {
            0 | 1 => {
                let tiles = tile_list(input);
                image.commit(&mut pool, &tiles)
            }
            2 => {
                let (layer, mip) = (input.below(4) as u32, input.below(16) as u32);
                image.commit_region(&mut pool, layer, mip, region(input))
            }
            3 => image.commit_tail(&mut pool, input.below(u64::from(tails) + 1) as u32),
            4 | 5 => {
                let tiles = tile_list(input);
                image.release(&mut pool, &tiles)
            }
            6 => {
                let (layer, mip) = (input.below(4) as u32, input.below(16) as u32);
                image.release_region(&mut pool, layer, mip, region(input))
            }
            7 => image.release_tail(&mut pool, input.below(u64::from(tails) + 1) as u32),
            _ => image.release_all(&mut pool),
        };
        if let Ok(changes) = result {
            check_plan(layout, &changes, input);
        }
        let step = input.u8();
        if step % 4 == 0 {
            image.refresh_min_lod();
        } else if step % 16 == 7 {
            compact(&mut pool, &mut image, u32::from(step >> 4) * 8 + 1, layout, input);
        }
        if op < FULL_CHECK_PREFIX || (op + 1) % FULL_CHECK_INTERVAL == 0 {
            image.page_table().check_invariants().unwrap_or_else(|e| panic!("page table: {e}"));
            pool.check_invariants().unwrap_or_else(|e| panic!("pool: {e}"));
        }
        let table = image.page_table();
        let resident_tails = (0..tails).filter(|&t| table.is_tail_resident(t)).count() as u64;
        let expected = u64::from(table.resident_tiles()) + resident_tails * u64::from(tail_tiles);
        assert_eq!(u64::from(pool.owned_tiles(owner)), expected, "page table and pool disagree");
        assert_eq!(pool.used_tiles(), expected);
    }
    image.page_table().check_invariants().unwrap_or_else(|e| panic!("page table: {e}"));
    pool.check_invariants().unwrap_or_else(|e| panic!("pool: {e}"));
    let changes = image.release_all(&mut pool).expect("releasing everything");
    check_plan(layout, &changes, input);
    assert_eq!(pool.used_tiles(), 0);
    assert_eq!(image.page_table().resident_tiles(), 0);
    image.page_table().check_invariants().unwrap_or_else(|e| panic!("page table: {e}"));
    pool.check_invariants().unwrap_or_else(|e| panic!("pool: {e}"));
}

/// A compaction pass of at most `max_moves` tiles (tails pinned), applied to the pool and the page
/// table: residency and owners unchanged, every moved tile at its planned place, its changes plan
/// into binds; emptied heaps released. Half the time it is reverted afterwards, exactly.
fn compact(
    pool: &mut TilePool,
    image: &mut SparseResidency,
    max_moves: u32,
    layout: &SparseImageLayout,
    input: &mut Input<'_>,
) {
    let mapped: BTreeMap<PhysicalTile, TileIndex> =
        image.page_table().mapped().map(|(t, p)| (p, t)).collect();
    let plan = pool.plan_compaction(max_moves, |p, _| mapped.contains_key(&p));
    assert!(plan.moves.len() <= max_moves as usize);
    let (owned, resident) = (pool.owned_tiles(image.owner()), image.page_table().resident_tiles());
    let before = pool.stats();
    pool.apply_compaction(&plan).unwrap_or_else(|e| panic!("a plan applies: {e}"));
    let moves: Vec<_> = plan.moves.iter().map(|m| (mapped[&m.from], m.from, m.to)).collect();
    let changes = image.remap(&moves).unwrap_or_else(|e| panic!("a plan remaps: {e}"));
    check_plan(layout, &changes, input);
    assert_eq!((pool.owned_tiles(image.owner()), image.page_table().resident_tiles()), (owned, resident));
    for m in &plan.moves {
        assert_eq!(image.page_table().get(mapped[&m.from]), Some(m.to));
        assert_eq!(pool.owner_of(m.to), Some(image.owner()));
    }
    for heap in &plan.heaps_emptied {
        assert!(pool.stats().heaps.iter().any(|h| h.heap == *heap && h.used == 0), "heap {heap:?} emptied");
    }
    if input.u8() % 2 == 0 {
        pool.revert_compaction(&plan).unwrap_or_else(|e| panic!("a plan reverts: {e}"));
        let back: Vec<_> = moves.iter().map(|&(t, from, to)| (t, to, from)).collect();
        image.remap(&back).unwrap_or_else(|e| panic!("a plan remaps back: {e}"));
        assert_eq!(pool.stats(), before, "reverted exactly");
    } else {
        pool.trim_heaps(&plan.heaps_emptied);
    }
}

/// A frame's changes plan into binds that cover exactly the changed tiles, each with its memory.
fn check_plan(layout: &SparseImageLayout, changes: &ResidencyChanges, input: &mut Input<'_>) {
    let coalesce = input.pick(&[Coalesce::None, Coalesce::Rows, Coalesce::Boxes]);
    let plan = plan_binds(layout, &changes.tiles, &changes.tails, BindPlanOptions { coalesce })
        .unwrap_or_else(|e| panic!("the changes of one call plan: {e}"));
    // Sorted vectors, not maps: this runs after every operation.
    let mut expanded: Vec<(TileIndex, Option<PhysicalTile>)> = plan.expand(layout);
    expanded.sort_unstable_by_key(|&(tile, _)| tile);
    if let Some(w) = expanded.windows(2).find(|w| w[0].0 == w[1].0) {
        panic!("tile {:?} bound twice", w[0].0);
    }
    let mut wanted: Vec<(TileIndex, Option<PhysicalTile>)> =
        changes.tiles.iter().map(|&TileChange { tile, physical }| (tile, physical)).collect();
    // A change set names each tile once; the last change of a tile wins as in a map.
    wanted.reverse();
    wanted.sort_by_key(|&(tile, _)| tile);
    wanted.dedup_by_key(|&mut (tile, _)| tile);
    assert_eq!(expanded, wanted, "the plan covers exactly the changed tiles");
    // Each changed tail: one unbind, or binds (one per physically contiguous run) that cover it.
    for change in &changes.tails {
        let binds: Vec<_> = plan.opaque_binds.iter().filter(|b| b.tail == change.tail).collect();
        match &change.physical {
            None => assert!(binds.len() == 1 && binds[0].memory.is_none(), "{binds:?}"),
            Some(tiles) => {
                let size = layout.mip_tail().expect("a tail changed").size;
                // A tail the device says has no bytes binds nothing.
                assert!(binds.len() <= tiles.len() && (tiles.is_empty() || !binds.is_empty()), "{binds:?}");
                assert_eq!(binds.iter().map(|b| b.size).sum::<u64>(), size, "{binds:?}");
            }
        }
    }
    assert!(plan.opaque_binds.iter().all(|b| changes.tails.iter().any(|c| c.tail == b.tail)));
    if coalesce == Coalesce::None {
        assert_eq!(plan.image_binds.len(), changes.tiles.len());
    }
}
