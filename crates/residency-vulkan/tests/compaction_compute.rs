//! Tile compaction's compute copy (`sparse/compact_compute.rs`): for each format a pass moves
//! tiles heap to heap by the compute shader where the format has a storage carrier (4-, 8- and
//! 16-byte texels; BC1, BC3, BC7 through carriers of their own format viewed as blocks),
//! by `vkCmdCopyImage` where it has none (1- and 2-byte texels), and every tile's bytes are the
//! same after the pass as before, bit for bit — also when `CompactCopy::ImageCopy` forces the
//! copy command. 0 validation messages and 0 leaks (`with_gpu`).

use residency_core::format::{Format, FormatKind};
use residency_core::tiles::{SparseImageDesc, TexelRegion, TilePoolDesc};
use residency_vulkan::sparse::{CompactCopy, CompactPath, SparseImage, SparseTilePool};
use residency_vulkan::testing::with_gpu;
use residency_vulkan::{Device, Uploader};
use std::sync::Arc;

const SIZE: u32 = 2048;

/// Bytes of tile (x, y): differ per format, tile and byte.
fn pattern(seed: u8, x: u32, y: u32, bytes: usize) -> Vec<u8> {
    (0..bytes).map(|i| (i as u32).wrapping_mul(37).wrapping_add(x * 11 + y * 5) as u8 ^ seed).collect()
}

/// The bytes of each resident tile (tile x, y, bytes), read back tile by tile.
fn resident_bytes(image: &SparseImage) -> Vec<(u32, u32, Vec<u8>)> {
    let shape = image.layout().tile_shape();
    image
        .residency()
        .page_table()
        .mapped()
        .map(|(tile, _)| {
            let c = image.layout().tile_coord(tile).unwrap();
            let region = TexelRegion {
                offset: [c.x * shape.width, c.y * shape.height, 0],
                extent: [shape.width, shape.height, 1],
            };
            (c.x, c.y, image.read_region(0, 0, region, 16 << 20).unwrap())
        })
        .collect()
}

/// One image of `format` in heaps of 4 tiles: 4 rows of 4 tiles (a heap each) written with a
/// pattern, then every other tile released, so 8 tiles sit in 4 half-empty heaps; compacted
/// with `copy`. Returns the pass's path and compute tiles; asserts every tile's bytes kept.
fn compact_one(device: &Arc<Device>, format: Format, copy: CompactCopy) -> (CompactPath, u32, u32) {
    let pool = SparseTilePool::new(
        Arc::clone(device),
        TilePoolDesc::default().with_name("compute compaction").with_tiles_per_heap(4),
    )
    .unwrap();
    let desc = SparseImageDesc::new_2d(format, SIZE, SIZE).with_mip_levels(1);
    let mut image = SparseImage::new(&pool, &format!("{} tiles", format.name()), &desc, false).unwrap();
    let shape = image.layout().tile_shape();
    assert!(SIZE >= 4 * shape.width && SIZE >= 4 * shape.height, "{shape:?}");
    for y in 0..4 {
        let region =
            TexelRegion { offset: [0, y * shape.height, 0], extent: [4 * shape.width, shape.height, 1] };
        image.commit_region(&pool, 0, 0, region).unwrap();
        pool.flush_binds(&mut [&mut image]).unwrap();
    }
    let uploader = Uploader::new(device, "compute compaction upload", 4 << 20).unwrap();
    let bytes = format.region_bytes(shape.width, shape.height, 1) as usize;
    let seed = format.block_bytes() as u8 ^ 0xa5;
    for y in 0..4 {
        for x in 0..4 {
            let region = residency_vulkan::ImageRegion::new(
                &image,
                0,
                [x * shape.width, y * shape.height, 0],
                [shape.width, shape.height, 1],
            );
            uploader.write_image(&region, &pattern(seed, x, y, bytes)).unwrap();
        }
    }
    uploader.wait_idle().unwrap();
    uploader.destroy().unwrap();
    device.wait_idle().unwrap();
    for y in 0..4 {
        for x in [1, 3] {
            let r = TexelRegion { offset: [x * shape.width, y * shape.height, 0], extent: [1, 1, 1] };
            image.release_region(&pool, 0, 0, r).unwrap();
        }
    }
    pool.flush_binds(&mut [&mut image]).unwrap();
    image.refresh_min_lod();
    let before = resident_bytes(&image);
    assert_eq!(before.len(), 8);
    for (x, y, b) in &before {
        assert_eq!(b, &pattern(seed, *x, *y, bytes), "{} tile ({x}, {y}) before", format.name());
    }
    let physical_before: Vec<_> = image.residency().page_table().mapped().collect();

    let stats = pool.compact_with(&mut [&mut image], u32::MAX, &[], copy).unwrap();
    println!("{}: {stats:?}", format.name());
    assert_eq!((stats.moves, stats.heaps_released), (4, 2), "{}: {stats:?}", format.name());
    pool.check_invariants().unwrap();
    let moved = image
        .residency()
        .page_table()
        .mapped()
        .zip(&physical_before)
        .filter(|(a, b)| a.0 == b.0 && a.1 != b.1)
        .count();
    assert_eq!(moved, 4);
    // Bit for bit, every tile (moved or not) where it was in the image.
    assert_eq!(resident_bytes(&image), before, "{} after {copy:?}", format.name());
    assert!(image.refresh_min_lod().is_empty());

    device.wait_submitted().unwrap();
    image.release_all(&pool).unwrap();
    pool.flush_binds(&mut [&mut image]).unwrap();
    pool.trim();
    drop(image);
    (stats.path, stats.compute_tiles, stats.dispatches)
}

#[test]
fn compaction_copies_tiles_by_compute_where_a_storage_carrier_fits_and_keeps_every_bit() {
    with_gpu(|set| {
        let device = &set.devices()[0];
        if !device.features().sparse_residency_aliased {
            eprintln!("no sparseResidencyAliased: compaction goes through staging");
            return;
        }
        let formats = [
            Format::R8G8B8A8Unorm,
            Format::R8G8B8A8Srgb,
            Format::R32Float,
            Format::R16G16B16A16Float,
            Format::R32G32B32A32Uint,
            Format::Bc1Unorm,
            Format::Bc3Unorm,
            Format::Bc7Unorm,
            Format::R8Unorm,
            Format::R16Float,
        ];
        let mut paths = Vec::new();
        for format in formats {
            let ((path, tiles, dispatches), old) = {
                let supported = SparseImage::new(
                    &SparseTilePool::new(Arc::clone(device), TilePoolDesc::default().with_name("probe"))
                        .unwrap(),
                    "probe",
                    &SparseImageDesc::new_2d(format, SIZE, SIZE).with_mip_levels(1),
                    false,
                )
                .is_ok();
                if !supported {
                    eprintln!("{}: no sparse images of this format here", format.name());
                    continue;
                }
                (
                    compact_one(device, format, CompactCopy::Direct),
                    compact_one(device, format, CompactCopy::ImageCopy),
                )
            };
            // The copy command, forced, is never the compute copy.
            assert_eq!((old.0, old.1, old.2), (CompactPath::ImageCopy, 0, 0), "{}", format.name());
            match (format.kind(), format.block_bytes()) {
                // Uncompressed 4-, 8- and 16-byte texels: unsigned-integer storage carriers,
                // one dispatch for the pass's 4 tiles.
                (FormatKind::Color, 4 | 8 | 16) => {
                    assert_eq!((path, tiles, dispatches), (CompactPath::Compute, 4, 1), "{}", format.name())
                }
                // 1- and 2-byte texels have none: the copy command.
                (FormatKind::Color, _) => {
                    assert_eq!((path, tiles, dispatches), (CompactPath::ImageCopy, 0, 0), "{}", format.name())
                }
                // Compressed (BC1: 8-byte blocks, BC3 and BC7: 16): carriers of the image's
                // format viewed as blocks (rgba16ui / rgba32ui), one dispatch.
                _ => assert_eq!((path, tiles, dispatches), (CompactPath::Compute, 4, 1), "{}", format.name()),
            }
            paths.push((format.name(), path));
        }
        println!("compaction paths: {paths:?}");
        assert!(paths.iter().any(|p| p.1 == CompactPath::Compute), "{paths:?}");
    });
}
