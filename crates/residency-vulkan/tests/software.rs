//! The software residency path on a real device: a tile-cache atlas and an indirection texture
//! behind the core's tile pool and page table, sampled by the same GLSL fallback code as the
//! hardware path (`shaders/sparse_fallback_software.comp`). Resident texels come back exactly, a
//! bilinear footprint across a tile edge reads the neighbour through the slot border, missing tiles
//! fall back to the finest resident coarser mip, released tiles stop being sampled, nothing
//! resident gives the default value, and the path choice follows the device. Validation clean.

use residency_core::format::Format;
use residency_core::tiles::{
    bordered_tile, software_layout, ImageId, ResidencyPath, SparseImageDesc, SparseImageLayout,
    SparseResidency, TexelRegion, TileCoord, TilePool, TilePoolDesc,
};
use residency_vulkan::sparse::software::{SoftwareAtlas, SoftwareAtlasDesc, SoftwareError, SoftwareTexture};
use residency_vulkan::testing::with_gpu;
use residency_vulkan::{Device, Uploader};

mod common;
use common::{as_f32, sample_fallback, texel, DEFAULT, SOFTWARE_FALLBACK};

const SIZE: u32 = 1024;
const BORDER: u32 = 4;

/// A probe at `uv` and `lod` through the software fallback GLSL: texel × 255, resident, LOD used.
fn sample(
    device: &Device,
    texture: &SoftwareTexture,
    probes: &[([f32; 2], f32)],
) -> Vec<([f32; 4], bool, f32)> {
    sample_fallback(
        device,
        SOFTWARE_FALLBACK,
        (texture.atlas_view().into(), texture.indirection_view().into()),
        probes,
    )
}

/// Writes the texels of every tile `residency` has resident that `written` does not yet hold.
fn write_tiles(
    uploader: &Uploader,
    texture: &SoftwareTexture,
    layout: &SparseImageLayout,
    residency: &SparseResidency,
) {
    for (tile, physical) in residency.page_table().mapped() {
        let c = layout.tile_coord(tile).unwrap();
        let extent = layout.mips()[c.mip as usize].extent;
        let data = bordered_tile(|x, y| texel(x, y, c.mip), [extent[0], extent[1]], 128, BORDER, c.x, c.y);
        texture.write_tile(uploader, physical, &data).unwrap();
    }
}

#[test]
fn a_software_texture_samples_resident_tiles_exactly_and_falls_back_like_the_hardware_path() {
    with_gpu(|set| {
        let device = &set.devices()[0];
        // The path choice: both lavapipe and the H200 have sparse residency for RGBA8.
        assert_eq!(
            device.residency_path(Format::R8G8B8A8Unorm, ResidencyPath::Auto).unwrap(),
            ResidencyPath::Hardware
        );
        assert_eq!(
            device.residency_path(Format::R8G8B8A8Unorm, ResidencyPath::Software).unwrap(),
            ResidencyPath::Software
        );
        assert!(matches!(
            device.residency_path(Format::D24UnormS8Uint, ResidencyPath::Hardware),
            Err(SoftwareError::HardwareUnsupported(_))
        ));

        let desc =
            SparseImageDesc::new_2d(Format::R8G8B8A8Unorm, SIZE, SIZE).with_path(ResidencyPath::Software);
        let layout = software_layout(&desc, BORDER).unwrap();
        let mut pool = TilePool::new(
            TilePoolDesc::default().with_name("software tiles").with_tiles_per_heap(16).with_budget_tiles(48),
        );
        let capacity = SoftwareTexture::capacity_for_budget(48, 16);
        let mut texture =
            SoftwareTexture::new(device, "software texture", &layout, BORDER, capacity, 16).unwrap();
        assert!(texture.memory_bytes() >= u64::from(capacity) * 136 * 136 * 4);
        // Bad input: a 3D layout and a compressed format with a border of other than whole blocks
        // are refused with typed errors (BC atlases: tests/software_bc.rs).
        let volume =
            software_layout(&SparseImageDesc::new_3d(Format::R8G8B8A8Unorm, 64, 64, 64), BORDER).unwrap();
        assert!(SoftwareTexture::new(device, "volume", &volume, BORDER, 4, 4).is_err());
        let bc1 = software_layout(&SparseImageDesc::new_2d(Format::Bc1Unorm, 256, 256), 2).unwrap();
        assert!(matches!(
            SoftwareTexture::new(device, "bc1", &bc1, 2, 4, 4),
            Err(SoftwareError::NotWholeBlocks { format: Format::Bc1Unorm, border: 2, .. })
        ));
        // A texture sharing this atlas must be of its format and tile side.
        let bgra =
            software_layout(&SparseImageDesc::new_2d(Format::B8G8R8A8Unorm, 256, 256), BORDER).unwrap();
        assert!(matches!(
            SoftwareTexture::new_in(texture.atlas(), "bgra", &bgra),
            Err(SoftwareError::FormatMismatch {
                image: Format::B8G8R8A8Unorm,
                pool: Format::R8G8B8A8Unorm,
                ..
            })
        ));
        let small = SoftwareAtlas::new(
            device,
            &SoftwareAtlasDesc::new("small tiles", Format::R8G8B8A8Unorm, 4).with_tile_side(64),
        )
        .unwrap();
        assert!(matches!(
            SoftwareTexture::new_in(&small, "128 tiles", &layout),
            Err(SoftwareError::TileMismatch { tile: [128, 128], atlas: 64, .. })
        ));
        drop(small);
        let uploader = Uploader::new(device, "software uploads", 8 << 20).unwrap();
        let slot0 =
            residency_core::tiles::PhysicalTile { heap: residency_core::tiles::HeapIndex(0), tile: 0 };
        assert!(matches!(
            texture.write_tile(&uploader, slot0, &[0; 16]),
            Err(SoftwareError::WrongTileSize { side: 136, got: 16, .. })
        ));
        let mut residency = SparseResidency::new(pool.id(), ImageId(1), &layout);
        // Mip-0 tile (2, 3) and every mip from 1 down: 1 + 16 + 4 + 1 + 7 tiles.
        residency
            .commit_region(&mut pool, 0, 0, TexelRegion { offset: [300, 420, 0], extent: [1, 1, 1] })
            .unwrap();
        for mip in 1..layout.mip_levels() {
            let e = layout.mips()[mip as usize].extent;
            residency
                .commit_region(&mut pool, 0, mip, TexelRegion { offset: [0, 0, 0], extent: [e[0], e[1], 1] })
                .unwrap();
        }
        assert_eq!(residency.page_table().resident_tiles(), 1 + 16 + 4 + 1 + 7);
        assert_eq!(pool.stats().used_tiles, 29, "the same pool accounting as the hardware path");
        write_tiles(&uploader, &texture, &layout, &residency);
        texture.upload_indirection(&uploader, residency.page_table()).unwrap();
        uploader.wait_idle().unwrap();

        let probes = [
            (common::centre(SIZE, 300, 420, 0), 0.0), // resident mip 0: exact
            (common::centre(SIZE, 310, 500, 0), 0.0), // another texel of the same tile
            (common::centre(SIZE, 50, 50, 1), 0.0),   // mip-0 tile missing: mip 1 at its texel centre
            (common::centre(SIZE, 7, 9, 3), 3.0),     // a coarse mip asked for directly
            (common::centre(SIZE, 400, 60, 1), 0.0),  // far from the mip-0 tile: mip 1 (all resident)
            ([128.0 / 512.0, common::centre(SIZE, 0, 40, 1)[1]], 1.0), // mip-1 texels 127 | 128: across two slots
        ];
        let got = sample(device, &texture, &probes);
        let want = [
            (as_f32(texel(300, 420, 0)), 0.0),
            (as_f32(texel(310, 500, 0)), 0.0),
            (as_f32(texel(50, 50, 1)), 1.0),
            (as_f32(texel(7, 9, 3)), 3.0),
            (as_f32(texel(400, 60, 1)), 1.0),
        ];
        for (i, (w, lod)) in want.iter().enumerate() {
            assert!(got[i].1, "probe {i} resident");
            assert_eq!(got[i].2, *lod, "probe {i}: LOD used");
            common::close(got[i].0, *w, &format!("probe {i}: {:?} vs {w:?}", got[i].0));
        }
        // The bilinear footprint across the tile edge reads texel 128 from the neighbour's border.
        let (a, b) = (as_f32(texel(127, 40, 1)), as_f32(texel(128, 40, 1)));
        let mid = [0, 1, 2, 3].map(|c| (a[c] + b[c]) / 2.0);
        common::close(got[5].0, mid, &format!("across the slot edge: {:?} vs {mid:?}", got[5].0));

        // Release the mip-0 tile: the indirection stops pointing at it, samples fall back to mip 1.
        let tile = layout.tile_index(TileCoord { layer: 0, mip: 0, x: 2, y: 3, z: 0 }).unwrap();
        residency.release(&mut pool, &[tile]).unwrap();
        let rows = texture.upload_indirection(&uploader, residency.page_table()).unwrap();
        assert_eq!(rows, Some(4..5), "one row of mip 0 changed");
        uploader.wait_idle().unwrap();
        let got = sample(device, &texture, &[(common::centre(SIZE, 150, 210, 1), 0.0)]);
        assert_eq!(got[0].2, 1.0);
        common::close(got[0].0, as_f32(texel(150, 210, 1)), &format!("{:?}", got[0].0));

        // Nothing resident: the default value, not resident.
        residency.release_all(&mut pool).unwrap();
        assert_eq!(pool.stats().used_tiles, 0);
        texture.upload_indirection(&uploader, residency.page_table()).unwrap();
        uploader.wait_idle().unwrap();
        let got = sample(device, &texture, &[(common::centre(SIZE, 1, 1, 0), 0.0)]);
        assert!(!got[0].1);
        common::close(got[0].0, DEFAULT.map(|v| v * 255.0), "nothing resident");

        uploader.destroy().unwrap();
        drop(texture);
    });
}
