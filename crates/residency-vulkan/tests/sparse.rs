//! Partially resident images on the device's sparse residency: commit, upload, sample with
//! residency codes, release; tile pool accounting; validation clean.

use residency_core::format::Format;
use residency_core::memory::MemoryIntent;
use residency_core::tiles::{SparseImageDesc, TexelRegion, TilePoolDesc};
use residency_core::usage::BufferUsage;
use residency_vulkan::ash::vk;
use residency_vulkan::compute::{Binding, ComputeProgram};
use residency_vulkan::shaders::{self};
use residency_vulkan::sparse::{SparseError, SparseImage, SparseTilePool};
use residency_vulkan::testing::with_gpu;
use residency_vulkan::{BufferDesc, Device, Filter, ImageRegion, Uploader};
use std::sync::Arc;

const DEFAULT: [f32; 4] = [0.25, 0.5, 0.75, 1.0];

/// The texel stored at (x, y) of `mip`: a pattern that differs per texel and per mip.
fn texel(x: u32, y: u32, mip: u32) -> [u8; 4] {
    [(x % 251) as u8, (y % 241) as u8, (mip * 17) as u8, 0xab]
}

fn upload_tile(uploader: &Uploader, image: &SparseImage, mip: u32, tile: [u32; 2]) {
    let shape = image.layout().tile_shape();
    let extent = image.layout().mip(mip).unwrap().extent;
    let (x0, y0) = (tile[0] * shape.width, tile[1] * shape.height);
    let (w, h) = (shape.width.min(extent[0] - x0), shape.height.min(extent[1] - y0));
    let data: Vec<u8> = (0..h).flat_map(|y| (0..w).flat_map(move |x| texel(x0 + x, y0 + y, mip))).collect();
    let region = ImageRegion::new(image, mip, [x0, y0, 0], [w, h, 1]);
    uploader.write_image(&region, &data).unwrap();
}

fn tile_region(image: &SparseImage, tile: [u32; 2]) -> TexelRegion {
    let shape = image.layout().tile_shape();
    TexelRegion { offset: [tile[0] * shape.width, tile[1] * shape.height, 0], extent: [1, 1, 1] }
}

/// Reads each (x, y, lod) with residency codes: (texel as bytes, resident).
fn probe(device: &Arc<Device>, image: &SparseImage, points: &[[i32; 3]]) -> Vec<([u8; 4], bool)> {
    let program = ComputeProgram::new(device, "sparse probe", &shaders::SPARSE_PROBE, 1).unwrap();
    let sampler = device.create_sampler(Filter::Nearest).unwrap();
    let n = points.len() as u64;
    let mut probes = device
        .create_buffer(
            &BufferDesc::new("probes", n * 16, BufferUsage::STORAGE).with_intent(MemoryIntent::Upload),
        )
        .unwrap();
    let results = device
        .create_buffer(
            &BufferDesc::new("probe results", n * 32, BufferUsage::STORAGE)
                .with_intent(MemoryIntent::Readback),
        )
        .unwrap();
    let bytes: Vec<u8> =
        points.iter().flat_map(|p| [p[0], p[1], p[2], 0]).flat_map(i32::to_le_bytes).collect();
    probes.write(0, &bytes).unwrap();
    let set = program
        .descriptor_set(&[
            Binding::sampled(image, &sampler, vk::ImageLayout::GENERAL),
            Binding::Buffer(&probes),
            Binding::Buffer(&results),
        ])
        .unwrap();
    let mut push: Vec<u8> = DEFAULT.iter().flat_map(|f| f.to_le_bytes()).collect();
    push.extend_from_slice(&(n as u32).to_le_bytes());
    push.resize(32, 0);
    device
        .submit_compute("sparse probe", |rec| {
            program
                .dispatch(rec, &set, &push, [(n as u32).div_ceil(64), 1, 1])
                .expect("a few workgroups within the declared push constants");
        })
        .unwrap();
    let mut out = vec![0u8; (n * 32) as usize];
    results.read(0, &mut out).unwrap();
    drop(program);
    drop(sampler);
    drop(probes);
    drop(results);
    out.chunks_exact(32)
        .map(|r| {
            let f = |i: usize| f32::from_le_bytes([r[i], r[i + 1], r[i + 2], r[i + 3]]);
            let rgba = [f(0), f(4), f(8), f(12)].map(|v| (v * 255.0).round() as u8);
            (rgba, u32::from_le_bytes([r[16], r[17], r[18], r[19]]) == 1)
        })
        .collect()
}

#[test]
fn resident_texels_read_back_exactly_and_released_tiles_return_the_default() {
    with_gpu(|set| {
        let device = Arc::clone(&set.devices()[0]);
        let pool = SparseTilePool::new(Arc::clone(&device), TilePoolDesc::default().with_tiles_per_heap(256))
            .unwrap();
        let desc = SparseImageDesc::new_2d(Format::R8G8B8A8Unorm, 16384, 16384);
        let mut image = SparseImage::new(&pool, "virtual 16k", &desc, false).unwrap();
        let layout = image.layout().clone();
        let shape = layout.tile_shape();
        assert_eq!(shape.width * shape.height * 4, 65536);

        // Some tiles of mip 0, and everything from the mip tail (or, without one, the coarsest
        // tiled mips) so that coarse data is always there.
        let tiles = [[0, 0], [1, 0], [2, 0], [5, 3]];
        for t in tiles {
            image.commit_region(&pool, 0, 0, tile_region(&image, t)).unwrap();
        }
        let coarse_first = layout.first_tail_lod().min(layout.mip_levels() - 1).min(8);
        for mip in coarse_first..layout.mip_levels() {
            let e = layout.mip(mip).unwrap().extent;
            image
                .commit_region(&pool, 0, mip, TexelRegion { offset: [0; 3], extent: [e[0], e[1], 1] })
                .unwrap();
        }
        let expected_tiles = pool.used_tiles();
        let tail_tiles = u64::from(layout.mip_tail().map_or(0, |t| t.tiles * t.count));
        let tiled_coarse: u64 = (coarse_first..layout.first_tail_lod())
            .map(|m| u64::from(layout.mip(m).unwrap().tile_count()))
            .sum();
        assert_eq!(
            expected_tiles,
            tiles.len() as u64 + tiled_coarse + tail_tiles,
            "pool accounting is exact"
        );
        let stats = pool.flush_binds(&mut [&mut image]).unwrap();
        assert_eq!(stats.tiles_bound, expected_tiles);
        assert!(stats.bind_entries < expected_tiles, "adjacent tiles were coalesced: {stats:?}");

        let uploader = Uploader::new(&device, "sparse test", 4 << 20).unwrap();
        for t in tiles {
            upload_tile(&uploader, &image, 0, t);
        }
        for mip in coarse_first..layout.mip_levels() {
            let m = layout.mip(mip).unwrap();
            let e = m.extent;
            let grid = [e[0].div_ceil(shape.width), e[1].div_ceil(shape.height)];
            for ty in 0..grid[1] {
                for tx in 0..grid[0] {
                    upload_tile(&uploader, &image, mip, [tx, ty]);
                }
            }
        }
        uploader.wait_idle().unwrap();

        let w = shape.width as i32;
        let h = shape.height as i32;
        let points = [
            [0, 0, 0],
            [w - 1, h - 1, 0],
            [w + 17, 5, 0],
            [2 * w + 3, h - 2, 0],
            [5 * w + 9, 3 * h + 11, 0],
            [3 * w, 0, 0],   // tile (3, 0): not committed
            [9000, 9000, 0], // far away: not committed
            [0, h, 0],       // tile (0, 1): not committed
            [3, 4, coarse_first as i32],
            [0, 0, layout.mip_levels() as i32 - 1],
        ];
        let results = probe(&device, &image, &points);
        let resident = [true, true, true, true, true, false, false, false, true, true];
        for ((p, (rgba, is_resident)), expect) in points.iter().zip(&results).zip(resident) {
            assert_eq!(*is_resident, expect, "residency code at {p:?}");
            if expect {
                assert_eq!(*rgba, texel(p[0] as u32, p[1] as u32, p[2] as u32), "texel at {p:?}");
            } else {
                assert_eq!(*rgba, DEFAULT.map(|v| (v * 255.0).round() as u8), "default at {p:?}");
            }
        }

        // Release tile (1, 0): it becomes non-resident; its neighbours stay.
        device.wait_idle().unwrap();
        image.release_region(&pool, 0, 0, tile_region(&image, [1, 0])).unwrap();
        assert_eq!(pool.used_tiles(), expected_tiles - 1);
        let stats = pool.flush_binds(&mut [&mut image]).unwrap();
        assert_eq!(stats.tiles_unbound, 1);
        let results = probe(&device, &image, &[[w + 17, 5, 0], [0, 0, 0], [2 * w + 3, h - 2, 0]]);
        assert!(!results[0].1, "released tile is not resident");
        assert_eq!(results[0].0, DEFAULT.map(|v| (v * 255.0).round() as u8));
        assert!(results[1].1 && results[2].1, "neighbours stay resident");
        assert!(!image.residency().page_table().is_mip_resident(0, 0));

        device.wait_idle().unwrap();
        image.release_all(&pool).unwrap();
        pool.flush_binds(&mut [&mut image]).unwrap();
        assert_eq!(pool.used_tiles(), 0, "every tile is back in the pool");
        drop(image);
        uploader.destroy().unwrap();
        pool.trim();
        drop(pool);
    });
}

#[test]
fn pool_exhaustion_and_address_space_are_typed_errors() {
    with_gpu(|set| {
        let device = Arc::clone(&set.devices()[0]);
        let pool = SparseTilePool::new(
            Arc::clone(&device),
            TilePoolDesc::default().with_tiles_per_heap(8).with_budget_tiles(8),
        )
        .unwrap();
        let desc = SparseImageDesc::new_2d(Format::R8G8B8A8Unorm, 4096, 4096);
        let mut image = SparseImage::new(&pool, "small budget", &desc, false).unwrap();
        let whole = TexelRegion { offset: [0; 3], extent: [4096, 4096, 1] };
        let err = image.commit_region(&pool, 0, 0, whole).unwrap_err();
        assert!(err.to_string().contains("budget") || matches!(err, SparseError::Commit(_)), "{err}");
        assert_eq!(pool.used_tiles(), 0, "a refused commit changes nothing");
        image.commit_region(&pool, 0, 0, TexelRegion { offset: [0; 3], extent: [256, 256, 1] }).unwrap();
        assert_eq!(pool.used_tiles(), 4);
        pool.flush_binds(&mut [&mut image]).unwrap();
        image.release_all(&pool).unwrap();
        pool.flush_binds(&mut [&mut image]).unwrap();
        drop(image);

        let too_big = SparseImageDesc::new_2d(Format::R32G32B32A32Float, 16384, 16384);
        let limit = device.profile().limits.sparse_address_space_size;
        match SparseImage::new(&pool, "too big", &too_big, false) {
            Err(SparseError::Layout(e)) => assert!(limit < (6 << 30), "{e}"),
            Ok(_image) => {
                assert!(limit >= (6 << 30), "a 5.3 GB virtual image fits only a large address space");
            }
            Err(e) => panic!("unexpected {e}"),
        }
    });
}

fn upload_region(device: &Device, image: &SparseImage, layer: u32, region: TexelRegion, data: &[u8]) {
    let uploader = Uploader::new(device, "region upload", 4 << 20).unwrap();
    let target = ImageRegion::new(image, 0, region.offset, region.extent).with_layer(layer);
    uploader.write_image(&target, data).unwrap();
    uploader.destroy().unwrap();
}

fn pattern(bytes: u64, seed: u64) -> Vec<u8> {
    (0..bytes).map(|i| ((i * 31 + seed * 7) % 251) as u8).collect()
}

#[test]
fn arrays_volumes_and_block_compressed_images_keep_their_texels() {
    with_gpu(|set| {
        let device = Arc::clone(&set.devices()[0]);
        let pool = SparseTilePool::new(Arc::clone(&device), TilePoolDesc::default().with_tiles_per_heap(64))
            .unwrap();
        let cases = [
            ("2D array", SparseImageDesc::new_2d(Format::R8G8B8A8Unorm, 2048, 2048).with_array_layers(4), 2),
            ("3D volume", SparseImageDesc::new_3d(Format::R8G8B8A8Unorm, 256, 256, 256), 0),
            ("BC7", SparseImageDesc::new_2d(Format::Bc7Unorm, 4096, 4096), 0),
            ("BC1", SparseImageDesc::new_2d(Format::Bc1Unorm, 4096, 4096), 0),
        ];
        for (what, desc, layer) in cases {
            let mut image = SparseImage::new(&pool, what, &desc, false).unwrap();
            let shape = image.layout().tile_shape();
            let tile = TexelRegion { offset: [0; 3], extent: [shape.width, shape.height, shape.depth] };
            image.commit_region(&pool, layer, 0, tile).unwrap();
            if let Some(tail) = image.layout().tail_of_layer(layer) {
                image.commit_tail(&pool, tail).unwrap();
            }
            pool.flush_binds(&mut [&mut image]).unwrap();
            let bytes = desc.format.region_bytes(shape.width, shape.height, shape.depth);
            assert_eq!(bytes, 65536, "{what}: one tile is 64 KiB");
            let data = pattern(bytes, u64::from(layer) + 1);
            upload_region(&device, &image, layer, tile, &data);
            let back = image.read_region(layer, 0, tile, 1 << 20).unwrap();
            assert!(back == data, "{what}: the texels of the committed tile read back exactly");
            device.wait_idle().unwrap();
            image.release_all(&pool).unwrap();
            pool.flush_binds(&mut [&mut image]).unwrap();
        }
        assert_eq!(pool.used_tiles(), 0);
    });
}

#[test]
fn storage_writes_land_in_resident_tiles_and_large_readbacks_are_refused() {
    with_gpu(|set| {
        let device = Arc::clone(&set.devices()[0]);
        let pool = SparseTilePool::new(Arc::clone(&device), TilePoolDesc::default().with_tiles_per_heap(16))
            .unwrap();
        let desc = SparseImageDesc::new_2d(Format::R8G8B8A8Unorm, 1024, 1024).with_mip_levels(1);
        let mut image = SparseImage::new(&pool, "storage target", &desc, true).unwrap();
        let shape = image.layout().tile_shape();
        let tile = TexelRegion { offset: [0; 3], extent: [shape.width, shape.height, 1] };
        image.commit_region(&pool, 0, 0, tile).unwrap();
        pool.flush_binds(&mut [&mut image]).unwrap();

        let program = ComputeProgram::new(&device, "sparse store", &shaders::SPARSE_STORE, 1).unwrap();
        let set_ = program.descriptor_set(&[Binding::storage(&image, vk::ImageLayout::GENERAL)]).unwrap();
        let (w, h) = (shape.width as i32, shape.height as i32);
        let push: Vec<u8> = [0, 0, w, h].iter().flat_map(|v: &i32| v.to_le_bytes()).collect();
        device
            .submit_once("sparse storage writes", |rec| {
                program
                    .dispatch(rec, &set_, &push, [shape.width.div_ceil(8), shape.height.div_ceil(8), 1])
                    .expect("one tile's workgroups within the declared push constants");
            })
            .unwrap();
        let back = image.read_region(0, 0, tile, 1 << 20).unwrap();
        let expected: Vec<u8> = (0..shape.height)
            .flat_map(|y| (0..shape.width).flat_map(move |x| [(x % 256) as u8, (y % 256) as u8, 255, 255]))
            .collect();
        assert!(back == expected, "storage writes into the resident tile read back");

        let whole = TexelRegion { offset: [0; 3], extent: [1024, 1024, 1] };
        match image.read_region(0, 0, whole, 1 << 20) {
            Err(SparseError::ReadbackTooLarge { bytes, limit }) => {
                assert_eq!((bytes, limit), (4 << 20, 1 << 20))
            }
            other => panic!("expected ReadbackTooLarge, got {other:?}"),
        }
        drop(program);
        device.wait_idle().unwrap();
        image.release_all(&pool).unwrap();
        pool.flush_binds(&mut [&mut image]).unwrap();
    });
}
