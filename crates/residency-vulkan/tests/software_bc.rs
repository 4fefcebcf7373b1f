//! Block-compressed textures on the software residency path (issue #19): BC7 and BC1 `.rvt` files
//! in their standard 64 KiB tiles (BC7 256 × 256, BC1 512 × 256) streamed into 128² atlas slots of
//! the BC format, assembled block by block on the workers, borders of whole blocks from the
//! neighbouring tiles. Sampled through `residency_software.glsl` and compared with a fully
//! resident BC texture of the same blocks sampled by the hardware helper: the same decoder reads
//! the same blocks, so texel centres match exactly and bilinear samples across slot borders within
//! a filter weight's rounding. Under sync validation; the ledger is checked at teardown by
//! `with_gpu`.

use residency_core::format::Format;
use residency_core::streaming::{RvtSource, StreamUnit, TileKey};
use residency_core::tiles::{
    bordered_block_tile, bordered_tile, software_slot_bytes, AtlasLayout, ImageId, ResidencyPath, TileCoord,
};
use residency_core::usage::ImageUsage;
use residency_core::vt_file::{VtDesc, VtWriter};
use residency_vulkan::sparse::software::{SoftwareAtlas, SoftwareAtlasDesc, SoftwareError, SoftwareTexture};
use residency_vulkan::streaming::{Streamer, StreamerDesc, TextureViews};
use residency_vulkan::testing::with_gpu;
use residency_vulkan::{CommandContext, ImageDesc, ImageRegion, Uploader};
use std::sync::Arc;

mod common;

/// Not square and not a power of two: partial tiles, a mip of 8 × 6 texels (2 × 2 blocks, the
/// second row partial), and 2 × 1 and 1 × 1 mips of one block each.
const W: u32 = 1024;
const H: u32 = 768;

/// Block `(bx, by)` of `mip`: bytes made from its place in the mip, the same whatever the tiling
/// (BC7: every mode in turn; BC1: any 8 bytes are a block).
fn block(format: Format, mip: u32, bx: u32, by: u32, out: &mut Vec<u8>) {
    let mut h = bx.wrapping_mul(0x9e37_79b1) ^ by.wrapping_mul(0x85eb_ca77) ^ mip.wrapping_mul(0xc2b2_ae3d);
    for i in 0..format.block_bytes() {
        h ^= h >> 15;
        h = h.wrapping_mul(0x2c1b_3c6d).wrapping_add(i);
        h ^= h >> 12;
        let mut byte = (h >> 8) as u8;
        if i == 0 && format == Format::Bc7Unorm {
            let mode = (bx + 3 * by + mip) % 8;
            byte = ((u32::from(byte) << (mode + 1)) | (1 << mode)) as u8;
        }
        out.push(byte);
    }
}

/// The blocks of a `w × h`-texel region at `(x0, y0)` of `mip`, rows of blocks.
fn region_blocks(format: Format, mip: u32, x0: u32, y0: u32, w: u32, h: u32) -> Vec<u8> {
    let mut out = Vec::new();
    for by in y0 / 4..(y0 + h).div_ceil(4) {
        for bx in x0 / 4..(x0 + w).div_ceil(4) {
            block(format, mip, bx, by, &mut out);
        }
    }
    out
}

fn mip_extent(mip: u32) -> (u32, u32) {
    ((W >> mip).max(1), (H >> mip).max(1))
}

/// A `.rvt` of `format` in its standard tiles (written with `VtWriter`, LZ4, as `vt build` does),
/// opened as the streamer's source.
fn rvt(format: Format, dir: &std::path::Path) -> Arc<RvtSource> {
    let desc = VtDesc::standard(format, W, H).unwrap();
    let path = dir.join(format!("{}.rvt", format.name()));
    let mut writer =
        VtWriter::new(std::io::BufWriter::new(std::fs::File::create(&path).unwrap()), desc).unwrap();
    for mip in 0..desc.mip_count {
        let (gx, gy) = desc.tile_grid(mip);
        for y in 0..gy {
            for x in 0..gx {
                let (w, h) = desc.tile_extent(mip, x, y).unwrap();
                let blocks = region_blocks(format, mip, x * desc.tile_width, y * desc.tile_height, w, h);
                writer.write_tile(mip, x, y, &blocks).unwrap();
            }
        }
    }
    writer.finish().unwrap();
    Arc::new(RvtSource::open(&path).unwrap())
}

fn tile(streamer: &Streamer, id: ImageId, mip: u32, x: u32, y: u32) -> TileKey {
    let layout = streamer.manager().residency(id).unwrap().layout();
    TileKey::tile(id, layout.tile_index(TileCoord { layer: 0, mip, x, y, z: 0 }).unwrap())
}

/// uv of texel coordinate `(x, y)` (centres at `.5`) of `mip`.
fn uv(mip: u32, x: f32, y: f32) -> [f32; 2] {
    let (w, h) = mip_extent(mip);
    [x / w as f32, y / h as f32]
}

/// The probes: `(uv, lod, across)`, `across` when the bilinear footprint reads a slot's border.
fn probes() -> Vec<([f32; 2], f32, bool)> {
    let mut p = Vec::new();
    // Texel centres of the streamed mip-0 tiles (3, 2), (4, 2), (3, 3), their edge texels included.
    for &x in &[384, 385, 400, 447, 510, 511, 512, 513, 600, 639] {
        for &y in &[256, 257, 300, 383, 384, 385, 450, 511] {
            if x >= 512 && y >= 384 {
                continue; // tile (4, 3) is not streamed
            }
            p.push((uv(0, x as f32 + 0.5, y as f32 + 0.5), 0.0, false));
        }
    }
    // Across slot borders at mip 0: x = 512 (tiles 3 | 4, another BC7 source tile), x = 384 (the
    // left border of tile 3, from tile 2, not resident), y = 384 (tiles (3, 2) / (3, 3)), a corner,
    // at half and at uneven weights.
    for &(x, y) in &[
        (512.0, 300.5),
        (512.0, 256.5),
        (512.3, 383.5),
        (511.7, 300.2),
        (384.0, 320.5),
        (384.4, 460.5),
        (420.5, 384.0),
        (500.2, 383.6),
        (384.0, 384.0),
        (511.9, 256.1),
    ] {
        p.push((uv(0, x, y), 0.0, true));
    }
    // Mip 1 tiles (1, 1), (2, 1) and mip 2 tiles (0, 0), (1, 0): centres and their shared borders.
    for &(mip, x, y, across) in &[
        (1, 130.5, 200.5, false),
        (1, 255.5, 255.5, false),
        (1, 256.0, 180.5, true),
        (1, 300.5, 140.5, false),
        (2, 0.5, 0.5, false),
        (2, 127.5, 100.5, false),
        (2, 128.0, 100.5, true),
        (2, 200.5, 127.5, false),
        (2, 128.3, 64.7, true),
    ] {
        p.push((uv(mip, x, y), mip as f32, across));
    }
    // Trilinear between mips 1 and 2 inside the streamed region.
    p.push((uv(1, 200.5, 180.5), 1.5, true));
    // The pinned coarse chain, down to the one-block mips (texel centres).
    for (mip, x, y) in [(3, 60, 40), (4, 63, 47), (5, 17, 9), (7, 5, 5), (8, 3, 2), (9, 1, 0), (10, 0, 0)] {
        p.push((uv(mip, x as f32 + 0.5, y as f32 + 0.5), mip as f32, false));
    }
    p
}

/// The mip-0 tiles streamed, and their parents (the chain the indirection needs to name mips 1
/// and 2 as data mips), in software tiles (128²).
const WANTED: [(u32, u32, u32); 7] =
    [(0, 3, 2), (0, 4, 2), (0, 3, 3), (1, 1, 1), (1, 2, 1), (2, 0, 0), (2, 1, 0)];

/// BC7 and BC1 textures from `.rvt`s stream on the software path into atlases of their own
/// formats whose slots are the BC size; every probe (texel centres of streamed tiles and of the
/// coarse chain, bilinear and trilinear samples across slot borders) matches the fully resident
/// texture of the same blocks: centres exactly, borders within a filter weight's rounding.
#[test]
fn bc7_and_bc1_rvt_textures_stream_on_the_software_path_and_sample_as_the_fully_resident_texture() {
    let dir = std::env::temp_dir().join(format!("residency-software-bc-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let formats = [Format::Bc7Unorm, Format::Bc1Unorm];
    let sources: Vec<_> = formats.iter().map(|&f| rvt(f, &dir)).collect();
    with_gpu(|set| {
        let device = Arc::clone(&set.devices()[0]);
        let desc = StreamerDesc::default()
            .with_name("bc soft")
            .with_path(ResidencyPath::Software)
            .with_budget_tiles(64)
            .with_workers(2)
            .with_software_slot_format(Some(Format::Bc7Unorm));
        let mut streamer = Streamer::new(&device, desc).unwrap();
        // One budget tile is one BC7 slot: 34 × 34 blocks of 16 bytes.
        assert_eq!(software_slot_bytes(Format::Bc7Unorm, 4), 18_496);
        assert_eq!(software_slot_bytes(Format::Bc1Unorm, 4), 9_248);
        assert_eq!(streamer.manager().pool().tile_bytes(), 18_496);
        let textures: Vec<_> = formats
            .iter()
            .zip(&sources)
            .map(|(f, s)| streamer.add_texture(&format!("soft {}", f.name()), Arc::clone(s) as _).unwrap())
            .collect();
        // The atlases: one per format, in that format, capacity × its own slot bytes (no RGBA8
        // atlas); plus an indirection texture per texture.
        let capacity = SoftwareTexture::capacity_for_budget(64, 16);
        let [aw, ah] = AtlasLayout::new(128, 4, capacity, 16).unwrap().extent();
        let atlas_bytes: u64 = formats.iter().map(|f| f.region_bytes(aw, ah, 1)).sum();
        assert!(atlas_bytes >= u64::from(capacity) * (18_496 + 9_248));
        let backing = streamer.backing_bytes();
        assert!(
            backing > atlas_bytes && backing < atlas_bytes + 2 * (16 << 10),
            "{backing} vs {atlas_bytes}"
        );
        let atlases: Vec<_> = device
            .ledger()
            .live_objects()
            .into_iter()
            .filter(|o| o.kind == "image" && o.name.contains("atlas"))
            .collect();
        assert_eq!(atlases.len(), 2, "{atlases:?}");

        let commands = CommandContext::new(&device, "bc frames").unwrap();
        let wanted: Vec<TileKey> = textures
            .iter()
            .flat_map(|t| {
                WANTED.iter().map(|&(m, x, y)| tile(&streamer, t.id(), m, x, y)).collect::<Vec<_>>()
            })
            .collect();
        for _ in 0..8 {
            common::cpu_feedback_frame(&mut streamer, &commands, &wanted);
            streamer.wait_for_loads();
        }
        assert!(wanted.iter().all(|&k| streamer.manager().is_resident(k)), "{:?}", streamer.manager_stats());
        assert!(streamer.take_load_failures().is_empty());
        assert!(streamer.manager().check_invariants().is_ok());
        // Resident bytes count BC7 slots.
        let stats = streamer.manager_stats();
        assert_eq!(stats.resident_bytes, streamer.manager().pool().used_tiles() * 18_496);

        let bindings = streamer.begin_frame().unwrap();
        let submission = commands.submit(&[], |rec| bindings.record(rec, |_| ()).unwrap()).unwrap();
        commands.wait_for(&submission).unwrap();
        let probes = probes();
        let plain: Vec<([f32; 2], f32)> = probes.iter().map(|p| (p.0, p.1)).collect();
        for (texture, &format) in textures.iter().zip(&formats) {
            let binding = bindings.textures().into_iter().find(|t| t.id == texture.id()).unwrap();
            let TextureViews::Software { atlas, indirection } = binding.views else {
                panic!("software path")
            };
            let got = common::sample_fallback(
                &device,
                common::SOFTWARE_FALLBACK,
                (atlas.into(), indirection.into()),
                &plain,
            );
            let want = fully_resident_samples(&device, format, &plain);
            let (mut worst_centre, mut worst_across) = (0f32, 0f32);
            for (k, (((g, resident, lod), (w, _, _)), probe)) in
                got.iter().zip(&want).zip(&probes).enumerate()
            {
                assert!(*resident, "{format:?} probe {k} {probe:?}: resident");
                assert_eq!(*lod, probe.1, "{format:?} probe {k} {probe:?}: sampled at the LOD asked");
                let diff = g.iter().zip(w).map(|(a, b)| (a - b).abs()).fold(0.0, f32::max);
                if probe.2 {
                    worst_across = worst_across.max(diff);
                    assert!(diff <= 1.5, "{format:?} probe {k} {probe:?} across a border: {g:?} vs {w:?}");
                } else {
                    worst_centre = worst_centre.max(diff);
                    assert!(diff < 0.5, "{format:?} probe {k} {probe:?}: {g:?} vs {w:?} (the same texel)");
                }
            }
            eprintln!(
                "{format:?}: worst texel centre {worst_centre:.3}, across borders {worst_across:.3} (of 255)"
            );
        }
        drop(bindings);
        streamer.end_frame(submission.gpu_use()).unwrap();
        for t in textures {
            streamer.remove_texture(t).unwrap();
        }
        drop(streamer);
        drop(commands);
    });
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Under a budget of two heaps (32 BC7 slots, 8 of them the pinned coarse chain) two sets of 3 × 3
/// mip-0 tiles with their parents (14 and 15 tiles) do not fit together: the slots of the first
/// are evicted and rewritten with the second's blocks, which sample exactly as the fully resident
/// texture; resident memory stays in the budget.
#[test]
fn evicted_bc_slots_are_rewritten_with_the_new_tiles_blocks() {
    let dir = std::env::temp_dir().join(format!("residency-software-bc-evict-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let source = rvt(Format::Bc7Unorm, &dir);
    with_gpu(|set| {
        let device = Arc::clone(&set.devices()[0]);
        let desc = StreamerDesc::default()
            .with_name("bc evict")
            .with_path(ResidencyPath::Software)
            .with_budget_tiles(32)
            .with_workers(2)
            .with_software_slot_format(Some(Format::Bc7Unorm));
        let mut streamer = Streamer::new(&device, desc).unwrap();
        let texture = streamer.add_texture("soft evict", Arc::clone(&source) as _).unwrap();
        let commands = CommandContext::new(&device, "bc evict frames").unwrap();
        let keys = |tiles: &[(u32, u32)]| -> Vec<TileKey> {
            tiles.iter().map(|&(x, y)| tile(&streamer, texture.id(), 0, x, y)).collect()
        };
        let square = |x0: u32, y0: u32| -> Vec<(u32, u32)> {
            (y0..y0 + 3).flat_map(|y| (x0..x0 + 3).map(move |x| (x, y))).collect()
        };
        let (first, second) = (keys(&square(0, 0)), keys(&square(5, 3)));
        let slots = |streamer: &Streamer, keys: &[TileKey]| -> std::collections::BTreeSet<(u32, u32)> {
            let table = streamer.manager().residency(texture.id()).unwrap().page_table();
            keys.iter()
                .filter_map(|k| match k.unit {
                    StreamUnit::Tile(t) => table.get(t).map(|p| (p.heap.0, p.tile)),
                    StreamUnit::Tail(_) => None,
                })
                .collect()
        };
        let mut first_slots = Default::default();
        for wanted in [&first, &second] {
            for _ in 0..14 {
                common::cpu_feedback_frame(&mut streamer, &commands, wanted);
                streamer.wait_for_loads();
                assert!(streamer.manager().pool().used_tiles() <= 32);
            }
            if std::ptr::eq(wanted, &first) {
                first_slots = slots(&streamer, &first);
                assert_eq!(first_slots.len(), 9);
            }
        }
        let reused = slots(&streamer, &second).intersection(&first_slots).count();
        assert!(reused > 0, "the second set reuses slots of the first");
        assert!(second.iter().all(|&k| streamer.manager().is_resident(k)), "{:?}", streamer.manager_stats());
        assert!(first.iter().any(|&k| !streamer.manager().is_resident(k)), "evicted for the second set");
        assert!(streamer.manager_stats().tiles_evicted >= 5, "{:?}", streamer.manager_stats());
        assert!(streamer.take_load_failures().is_empty());
        let bindings = streamer.begin_frame().unwrap();
        let submission = commands.submit(&[], |rec| bindings.record(rec, |_| ()).unwrap()).unwrap();
        commands.wait_for(&submission).unwrap();
        let binding = bindings.textures().into_iter().find(|t| t.id == texture.id()).unwrap();
        let TextureViews::Software { atlas, indirection } = binding.views else { panic!("software path") };
        let probes: Vec<([f32; 2], f32)> = square(5, 3)
            .iter()
            .flat_map(|&(x, y)| {
                [(3.5, 5.5), (64.5, 64.5), (127.5, 0.5)]
                    .map(|(dx, dy)| (uv(0, (x * 128) as f32 + dx, (y * 128) as f32 + dy), 0.0))
            })
            .collect();
        let got = common::sample_fallback(
            &device,
            common::SOFTWARE_FALLBACK,
            (atlas.into(), indirection.into()),
            &probes,
        );
        let want = fully_resident_samples(&device, Format::Bc7Unorm, &probes);
        for (k, ((g, resident, lod), (w, _, _))) in got.iter().zip(&want).enumerate() {
            assert!(*resident && *lod == 0.0, "probe {k}: resident at LOD 0");
            let diff = g.iter().zip(w).map(|(a, b)| (a - b).abs()).fold(0.0, f32::max);
            assert!(diff < 0.5, "probe {k} {:?}: {g:?} vs {w:?}", probes[k]);
        }
        drop(bindings);
        streamer.end_frame(submission.gpu_use()).unwrap();
        streamer.remove_texture(texture).unwrap();
        drop(streamer);
        drop(commands);
    });
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `probes` sampled by the hardware helper (`residencySampleFallback`: `textureLod`) from a fully
/// resident (normal) BC image of every mip's blocks, with a min-LOD map of one texel saying 0.
fn fully_resident_samples(
    device: &Arc<residency_vulkan::Device>,
    format: Format,
    probes: &[([f32; 2], f32)],
) -> Vec<([f32; 4], bool, f32)> {
    let mips = residency_core::tiles::full_mip_chain(W.max(H));
    let mut desc =
        ImageDesc::new_2d("bc reference", format, W, H, ImageUsage::SAMPLED | ImageUsage::COPY_DST);
    desc.mip_levels = mips;
    let image = device.create_image(&desc).unwrap();
    let map = device
        .create_image(&ImageDesc::new_2d(
            "bc reference map",
            Format::R8Uint,
            1,
            1,
            ImageUsage::SAMPLED | ImageUsage::COPY_DST,
        ))
        .unwrap();
    device.discard_to_general(&[&image, &map]).unwrap();
    let uploader = Uploader::new(device, "bc reference", 4 << 20).unwrap();
    for mip in 0..mips {
        let (w, h) = mip_extent(mip);
        uploader
            .write_image(
                &ImageRegion::new(&image, mip, [0; 3], [w, h, 1]),
                &region_blocks(format, mip, 0, 0, w, h),
            )
            .unwrap();
    }
    uploader.write_image(&ImageRegion::new(&map, 0, [0; 3], [1, 1, 1]), &[0]).unwrap();
    uploader.flush().unwrap();
    let (view, map_view) = (image.create_view(0..mips).unwrap(), map.create_view(0..1).unwrap());
    let samples = common::sample_fallback(
        device,
        common::HARDWARE_FALLBACK,
        ((&view).into(), (&map_view).into()),
        probes,
    );
    drop((view, map_view, uploader, image, map));
    samples
}

/// The worker's block assembly (`bordered_block_tile`) on the CPU: a BC7 slot of software tile
/// (1, 1) of a 256 × 200 mip is its 32 × 32 blocks with one block of each neighbour around; at the
/// mip's edges (and past its partial last tile) the edge block is repeated; a border that is not
/// whole blocks is refused.
#[test]
fn bc_slots_are_whole_blocks_with_neighbour_borders_and_edge_blocks_repeated() {
    let f = Format::Bc7Unorm;
    let at = |bx: u32, by: u32| {
        let mut b = Vec::new();
        block(f, 0, bx, by, &mut b);
        b
    };
    let slot =
        bordered_block_tile(|bx, by, out| block(f, 0, bx, by, out), f, [256, 200], 128, 4, 1, 1).unwrap();
    assert_eq!(slot.len(), 34 * 34 * 16);
    let get = |i: usize, j: usize| slot[(j * 34 + i) * 16..(j * 34 + i + 1) * 16].to_vec();
    // Interior: block (i - 1, j - 1) of the tile, i.e. mip block (32 + i - 1, 32 + j - 1).
    assert_eq!(get(1, 1), at(32, 32));
    assert_eq!(get(20, 10), at(51, 41));
    // Left and top borders: the neighbours' blocks.
    assert_eq!(get(0, 5), at(31, 36));
    assert_eq!(get(5, 0), at(36, 31));
    // Right border (x = 256, past the mip): block column 63 repeated.
    assert_eq!(get(33, 5), at(63, 36));
    // The mip is 200 texels high: 50 block rows; rows past it repeat row 49.
    assert_eq!(get(5, 18), at(36, 49));
    assert_eq!(get(5, 19), at(36, 49));
    assert_eq!(get(5, 33), at(36, 49));
    // Tile (0, 0): the top-left border repeats block (0, 0).
    let corner =
        bordered_block_tile(|bx, by, out| block(f, 0, bx, by, out), f, [256, 200], 128, 4, 0, 0).unwrap();
    assert_eq!(corner[..16], at(0, 0)[..]);
    assert_eq!(corner[16..32], at(0, 0)[..]);
    // With blocks of one texel it is `bordered_tile` (texels clamped at the mip's edges).
    let texel = |x: u32, y: u32| [x as u8, y as u8, (x >> 8) as u8, 7];
    for (tx, ty) in [(0, 0), (2, 1), (1, 0)] {
        let texels = bordered_tile(texel, [300, 200], 128, 4, tx, ty);
        let blocks = bordered_block_tile(
            |x, y, out| out.extend_from_slice(&texel(x, y)),
            Format::R8G8B8A8Unorm,
            [300, 200],
            128,
            4,
            tx,
            ty,
        );
        assert_eq!(blocks.as_deref(), Some(&texels[..]), "tile ({tx}, {ty})");
    }
    // Borders of other than whole blocks cannot be assembled from blocks.
    assert!(bordered_block_tile(|_, _, _| (), f, [256, 200], 128, 2, 0, 0).is_none());
}

/// A BC atlas needs whole-block borders (typed error otherwise); the `SparseImage`-style software
/// tile pool, whose borders are refilled texel by texel on the GPU, keeps refusing BC formats.
#[test]
fn a_bc_atlas_refuses_borders_of_other_than_whole_blocks() {
    with_gpu(|set| {
        let device = Arc::clone(&set.devices()[0]);
        let err = SoftwareAtlas::new(
            &device,
            &SoftwareAtlasDesc::new("bc odd", Format::Bc7Unorm, 4).with_border(2),
        )
        .unwrap_err();
        assert!(
            matches!(err, SoftwareError::NotWholeBlocks { format: Format::Bc7Unorm, border: 2, .. }),
            "{err}"
        );
        let atlas =
            SoftwareAtlas::new(&device, &SoftwareAtlasDesc::new("bc ok", Format::Bc1Unorm, 4)).unwrap();
        let [w, h] = atlas.layout().extent();
        assert_eq!(atlas.memory_bytes(), u64::from(w / 4) * u64::from(h / 4) * 8);
        drop(atlas);
        let pool = residency_vulkan::sparse::software::SoftwareTilePool::new(
            Arc::clone(&device),
            Format::Bc7Unorm,
            4,
            residency_core::tiles::TilePoolDesc::default(),
        );
        assert!(matches!(pool, Err(SoftwareError::UnsupportedFormat { format: Format::Bc7Unorm })));
    });
}
