//! The partially-resident-texture scenario on both residency paths, forced: hardware sparse
//! residency (`SparseTilePool` + `SparseImage` + `MinLodMap`) and the software path
//! (`SoftwareTilePool` + `SoftwareImage`: atlas + indirection), with the same commit / write /
//! flush / release calls and the same fallback GLSL (`sparse_fallback{,_software}.comp`).
//! Resident texels come back exactly, a bilinear footprint across two tiles blends them, a missing
//! tile falls back to the finest resident coarser mip, a released tile stops being sampled, an
//! exhausted pool is a typed error that changes nothing, the pool's accounting is exact, nothing
//! resident gives the default value; validation clean, nothing leaked.

use residency_core::format::Format;
use residency_core::tiles::{
    CommitError, ResidencyPath, SparseImageDesc, TexelRegion, TileCoord, TilePoolDesc,
};
use residency_vulkan::sparse::software::{SoftwareError, SoftwareImage, SoftwareTilePool, DEFAULT_BORDER};
use residency_vulkan::testing::with_gpu;
use residency_vulkan::{Device, Uploader};
use std::sync::Arc;

mod common;
use common::paths::Texture;
use common::{as_f32, close, sample_fallback, texel, HARDWARE_FALLBACK, SOFTWARE_FALLBACK};

const SIZE: u32 = 1024;

fn centre(x: u32, y: u32, mip: u32) -> [f32; 2] {
    common::centre(SIZE, x, y, mip)
}

/// Samples at `probes` (uv, lod) through the path's fallback GLSL.
fn sample(
    device: &Device,
    texture: &Texture,
    path: ResidencyPath,
    probes: &[([f32; 2], f32)],
) -> Vec<([f32; 4], bool, f32)> {
    let spirv = if path == ResidencyPath::Software { SOFTWARE_FALLBACK } else { HARDWARE_FALLBACK };
    sample_fallback(device, spirv, texture.views(), probes)
}

fn scenario(device: &Arc<Device>, path: ResidencyPath) {
    let name = path.name();
    let desc = SparseImageDesc::new_2d(Format::R8G8B8A8Unorm, SIZE, SIZE);
    let mut texture = Texture::new(device, path, desc, 64);
    let uploader = Uploader::new(device, "paths uploads", 16 << 20).unwrap();
    let mips = texture.layout().mip_levels();
    // Mip-0 tiles (2, 3) and (3, 3), and every coarser mip whole.
    let pair = TexelRegion { offset: [256, 384, 0], extent: [256, 128, 1] };
    texture.commit(0, pair).unwrap();
    for mip in 1..mips {
        let r = texture.whole(mip);
        texture.commit(mip, r).unwrap();
    }
    assert_eq!(texture.used_tiles(), texture.resident_tiles(), "{name}: pool accounting");
    // Written one tile at a time, in an order that writes a tile before its neighbour.
    texture.write(device, &uploader, 0, TexelRegion { offset: [256, 384, 0], extent: [128, 128, 1] });
    texture.write(device, &uploader, 0, TexelRegion { offset: [384, 384, 0], extent: [128, 128, 1] });
    for mip in 1..mips {
        let r = texture.whole(mip);
        texture.write(device, &uploader, mip, r);
    }
    texture.flush(&uploader);

    let probes = [
        (centre(300, 420, 0), 0.0),
        (centre(500, 510, 0), 0.0),
        ([384.0 / 1024.0, centre(0, 400, 0)[1]], 0.0), // mip-0 texels 383 | 384: two tiles
        (centre(50, 50, 1), 0.0),                      // no mip-0 tile here: mip 1
        (centre(7, 9, 3), 3.0),
    ];
    let got = sample(device, &texture, path, &probes);
    let want = [
        (as_f32(texel(300, 420, 0)), 0.0),
        (as_f32(texel(500, 510, 0)), 0.0),
        ([0, 1, 2, 3].map(|c| (as_f32(texel(383, 400, 0))[c] + as_f32(texel(384, 400, 0))[c]) / 2.0), 0.0),
        (as_f32(texel(50, 50, 1)), 1.0),
        (as_f32(texel(7, 9, 3)), 3.0),
    ];
    for (i, (w, lod)) in want.iter().enumerate() {
        assert!(got[i].1, "{name} probe {i}: resident");
        assert_eq!(got[i].2, *lod, "{name} probe {i}: LOD used");
        close(got[i].0, *w, &format!("{name} probe {i}"));
    }

    // Released: the mip-0 tile (2, 3) is no longer sampled; the fallback is mip 1.
    texture.release(0, TexelRegion { offset: [300, 420, 0], extent: [1, 1, 1] });
    texture.flush(&uploader);
    let got = sample(device, &texture, path, &[(centre(150, 210, 1), 0.0), (centre(500, 510, 0), 0.0)]);
    assert_eq!((got[0].2, got[1].2), (1.0, 0.0), "{name}");
    close(got[0].0, as_f32(texel(150, 210, 1)), name);
    close(got[1].0, as_f32(texel(500, 510, 0)), name);
    assert_eq!(texture.used_tiles(), texture.resident_tiles(), "{name}: pool accounting after a release");

    // An exhausted pool (budget = what is in use; the heaps' free tiles still count): committing
    // more mip-0 tiles ends in a typed error that changes nothing.
    let used = texture.used_tiles();
    match &texture {
        Texture::Hardware { pool, .. } => pool.set_budget_tiles(used as u32),
        Texture::Software { pool, .. } => pool.set_budget_tiles(used as u32),
    }
    let mut refused = None;
    'tiles: for y in 0..8 {
        for x in 0..8 {
            let before = (texture.used_tiles(), texture.resident_tiles());
            let r = TexelRegion { offset: [x * 128, y * 128, 0], extent: [1, 1, 1] };
            if let Err(e) = texture.commit(0, r) {
                assert_eq!(
                    (texture.used_tiles(), texture.resident_tiles()),
                    before,
                    "{name}: a refused commit changes nothing"
                );
                let tile = texture.layout().tile_index(TileCoord { layer: 0, mip: 0, x, y, z: 0 }).unwrap();
                assert!(!match &texture {
                    Texture::Hardware { image, .. } => image.residency().page_table().is_resident(tile),
                    Texture::Software { image, .. } => image.residency().page_table().is_resident(tile),
                });
                refused = Some(e);
                break 'tiles;
            }
        }
    }
    let err = refused.unwrap_or_else(|| panic!("{name}: the pool never ran out"));
    assert!(texture.used_tiles() <= 64, "{name}: {err}");
    assert_eq!(texture.used_tiles(), texture.resident_tiles(), "{name}");

    // Nothing resident: the default value.
    texture.release_all();
    texture.flush(&uploader);
    assert_eq!(texture.used_tiles(), 0, "{name}");
    let got = sample(device, &texture, path, &[(centre(1, 1, 0), 0.0)]);
    assert!(!got[0].1, "{name}");
    close(got[0].0, common::DEFAULT.map(|v| v * 255.0), name);

    uploader.destroy().unwrap();
    texture.destroy(device);
}

#[test]
fn the_sparse_texture_scenario_on_the_hardware_path() {
    with_gpu(|set| scenario(&set.devices()[0], ResidencyPath::Hardware));
}

#[test]
fn the_sparse_texture_scenario_on_the_software_path() {
    with_gpu(|set| scenario(&set.devices()[0], ResidencyPath::Software));
}

#[test]
fn software_images_refuse_what_they_cannot_hold() {
    with_gpu(|set| {
        let device = &set.devices()[0];
        let pool = SoftwareTilePool::new(
            Arc::clone(device),
            Format::R8G8B8A8Unorm,
            DEFAULT_BORDER,
            TilePoolDesc::default().with_tiles_per_heap(4).with_budget_tiles(8),
        )
        .unwrap();
        assert!(matches!(
            SoftwareTilePool::new(
                Arc::clone(device),
                Format::Bc1Unorm,
                DEFAULT_BORDER,
                TilePoolDesc::default()
            ),
            Err(SoftwareError::UnsupportedFormat { format: Format::Bc1Unorm })
        ));
        let other = SparseImageDesc::new_2d(Format::R8Unorm, 256, 256);
        assert!(matches!(SoftwareImage::new(&pool, "r8", &other), Err(SoftwareError::FormatMismatch { .. })));
        let volume = SparseImageDesc::new_3d(Format::R8G8B8A8Unorm, 64, 64, 64);
        assert!(SoftwareImage::new(&pool, "volume", &volume).is_err());
        let mut image =
            SoftwareImage::new(&pool, "small", &SparseImageDesc::new_2d(Format::R8G8B8A8Unorm, 256, 256))
                .unwrap();
        let uploader = Uploader::new(device, "refusals", 1 << 20).unwrap();
        let r = TexelRegion { offset: [0, 0, 0], extent: [4, 4, 1] };
        // Data of the wrong size: a typed error that commits nothing (a write into tiles that are
        // not resident commits them: `uploads_into_uncommitted_tiles_commit_them_on_both_paths`).
        assert!(matches!(
            image.write_region(&pool, &uploader, 0, 0, r, &[0; 60]),
            Err(SoftwareError::WrongRegionSize { expected: 64, got: 60 })
        ));
        assert_eq!(pool.used_tiles(), 0, "a refused write commits nothing");
        image.commit_region(&pool, 0, 0, r).unwrap();
        assert!(matches!(
            image.write_region(&pool, &uploader, 0, 0, r, &[0; 60]),
            Err(SoftwareError::WrongRegionSize { expected: 64, got: 60 })
        ));
        assert!(image
            .write_region(
                &pool,
                &uploader,
                0,
                0,
                TexelRegion { offset: [250, 0, 0], extent: [8, 1, 1] },
                &[0; 32]
            )
            .is_err());
        // A pool that does not own the image.
        let stranger = SoftwareTilePool::new(
            Arc::clone(device),
            Format::R8G8B8A8Unorm,
            DEFAULT_BORDER,
            TilePoolDesc::default().with_budget_tiles(4),
        )
        .unwrap();
        assert!(matches!(
            image.commit_region(&stranger, 0, 0, r),
            Err(SoftwareError::Commit(CommitError::WrongPool { .. }))
        ));
        assert!(matches!(
            stranger.flush(&uploader, &mut [&mut image]),
            Err(SoftwareError::Commit(CommitError::WrongPool { .. }))
        ));
        assert_eq!(pool.used_tiles(), 1);
        uploader.destroy().unwrap();
        drop((image, pool, stranger));
    });
}

/// An upload into tiles that are not committed commits them (the seed's `glTexSubImage2D` into a
/// sparse texture), on both paths through `write_region`: a region across one resident and three
/// uncommitted mip-0 tiles commits exactly the three, and its texels come back (sampled at their
/// centres on both paths; read back byte for byte from the sparse image on the hardware path). An
/// exhausted pool refuses the write with a typed error and commits nothing.
fn uploads_commit_on_demand(device: &Arc<Device>, path: ResidencyPath) {
    let name = path.name();
    let desc = SparseImageDesc::new_2d(Format::R8G8B8A8Unorm, SIZE, SIZE);
    let mut texture = Texture::new(device, path, desc, 64);
    let uploader = Uploader::new(device, "on-demand uploads", 16 << 20).unwrap();
    let mips = texture.layout().mip_levels();
    for mip in 1..mips {
        let r = texture.whole(mip);
        texture.commit(mip, r).unwrap();
        texture.write(device, &uploader, mip, r);
    }
    texture.commit(0, TexelRegion { offset: [128, 128, 0], extent: [1, 1, 1] }).unwrap();
    let before = texture.used_tiles();
    // Mip-0 texels 200..300 in x and y: tiles (1, 1) (resident), (2, 1), (1, 2), (2, 2).
    let region = TexelRegion { offset: [200, 200, 0], extent: [100, 100, 1] };
    texture.write_on_demand(&uploader, 0, region).unwrap();
    assert_eq!(texture.used_tiles(), before + 3, "{name}: the three uncommitted tiles, committed");
    assert_eq!(texture.used_tiles(), texture.resident_tiles(), "{name}");
    texture.flush(&uploader);

    let texels = [(200, 200), (255, 256), (256, 255), (299, 299), (230, 290)];
    let probes: Vec<_> = texels.iter().map(|&(x, y)| (centre(x, y, 0), 0.0)).collect();
    let got = sample(device, &texture, path, &probes);
    for (&(x, y), (texel_got, resident, lod)) in texels.iter().zip(got) {
        assert!(resident && lod == 0.0, "{name}: texel ({x}, {y}) resident at LOD 0");
        close(texel_got, as_f32(texel(x, y, 0)), &format!("{name}: texel ({x}, {y})"));
    }
    if let Texture::Hardware { image, .. } = &texture {
        let bytes = image.read_region(0, 0, region, 1 << 20).unwrap();
        assert_eq!(bytes, common::region_texels(0, [200, 200], [100, 100]), "{name}: read back");
    }

    // An exhausted pool: a write into uncommitted tiles is refused and commits nothing.
    match &texture {
        Texture::Hardware { pool, .. } => pool.set_budget_tiles(texture.used_tiles() as u32),
        Texture::Software { pool, .. } => pool.set_budget_tiles(texture.used_tiles() as u32),
    }
    let used = texture.used_tiles();
    let far = TexelRegion { offset: [0, 768, 0], extent: [1024, 256, 1] };
    let refused = texture.write_on_demand(&uploader, 0, far);
    if refused.is_err() {
        assert_eq!(texture.used_tiles(), used, "{name}: a refused write commits nothing");
        assert_eq!(texture.used_tiles(), texture.resident_tiles(), "{name}");
    } else {
        panic!("{name}: 8 more tiles fit a pool of {used} used tiles at its budget");
    }

    uploader.destroy().unwrap();
    texture.destroy(device);
}

#[test]
fn uploads_into_uncommitted_tiles_commit_them_on_both_paths() {
    with_gpu(|set| {
        uploads_commit_on_demand(&set.devices()[0], ResidencyPath::Hardware);
        uploads_commit_on_demand(&set.devices()[0], ResidencyPath::Software);
    });
}

/// Budgets are whole heaps inside the atlas: raising one past the atlas is clamped, and every tile
/// the pool hands out has a slot (no `SlotOutOfRange` however commits and budgets interleave).
/// Formats whose hardware tile is not square (2-byte R16F here) take the square software tile.
#[test]
fn software_pools_stay_inside_their_atlas_and_take_any_uncompressed_format() {
    with_gpu(|set| {
        let device = &set.devices()[0];
        let pool = SoftwareTilePool::new(
            Arc::clone(device),
            Format::R16Float,
            DEFAULT_BORDER,
            TilePoolDesc::default().with_tiles_per_heap(16).with_budget_tiles(20),
        )
        .unwrap();
        let capacity = u64::from(pool.atlas_layout().capacity());
        let desc = SparseImageDesc::new_2d(Format::R16Float, 1024, 1024);
        let mut image = SoftwareImage::new(&pool, "r16f", &desc).unwrap();
        assert_eq!(image.layout().tile_shape().width, image.layout().tile_shape().height, "square tiles");
        let uploader = Uploader::new(device, "atlas bounds", 4 << 20).unwrap();
        let mut committed = 0u64;
        'all: for budget in [20u32, 48, 1000] {
            pool.set_budget_tiles(budget);
            for y in 0..8 {
                for x in 0..8 {
                    let r = TexelRegion { offset: [x * 128, y * 128, 0], extent: [128, 128, 1] };
                    let tile = image.layout().tile_index(TileCoord { layer: 0, mip: 0, x, y, z: 0 }).unwrap();
                    if image.residency().page_table().is_resident(tile) {
                        continue;
                    }
                    match image.commit_region(&pool, 0, 0, r) {
                        Ok(()) => committed += 1,
                        Err(SoftwareError::Commit(_)) => continue 'all,
                        Err(e) => panic!("{e}"),
                    }
                    // Every committed tile has a slot in the atlas: writing it works.
                    image.write_region(&pool, &uploader, 0, 0, r, &vec![0x3c; 128 * 128 * 2]).unwrap();
                }
            }
        }
        assert!(committed > 20 && committed <= capacity, "{committed} of {capacity}");
        assert_eq!(pool.used_tiles(), committed);
        pool.flush(&uploader, &mut [&mut image]).unwrap();
        uploader.destroy().unwrap();
        drop((image, pool));
    });
}
