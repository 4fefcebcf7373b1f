//! Compaction of a sparse tile pool on the device: resident tiles move out of half-used heaps into
//! the holes of fuller ones, their texels copied and their tiles rebound; contents, residency and
//! the min-LOD map are unchanged, emptied heaps' memory is freed, and a fault at any allocation,
//! resource creation, submission or bind of a pass leaves every tile where it was.

use residency_core::format::Format;
use residency_core::tiles::{PhysicalTile, SparseImageDesc, TexelRegion, TileIndex, TilePoolDesc};
use residency_vulkan::sparse::{CompactCopy, CompactPath, SparseError, SparseImage, SparseTilePool};
use residency_vulkan::testing::with_gpu;
use residency_vulkan::{Device, FaultSite, InjectedFault, Uploader, VulkanError};
use std::sync::Arc;

const POOL: &str = "compaction tiles";
const SIZE: u32 = 1024;

struct Scene {
    pool: SparseTilePool,
    a: SparseImage,
    b: SparseImage,
}

/// What must survive a compaction: per image, its resident tiles with their texels, the min-LOD
/// map; and the physical tiles (which a compaction changes and a failed one must not).
#[derive(Debug, PartialEq)]
struct Snapshot {
    tiles: Vec<Vec<(TileIndex, Vec<u8>)>>,
    min_lod: Vec<Vec<u8>>,
}

fn physical(image: &SparseImage) -> Vec<(TileIndex, PhysicalTile)> {
    image.residency().page_table().mapped().collect()
}

fn tile_origin(image: &SparseImage, x: u32, y: u32) -> TexelRegion {
    let shape = image.layout().tile_shape();
    TexelRegion { offset: [x * shape.width, y * shape.height, 0], extent: [1, 1, 1] }
}

/// Texels of tile (x, y) of an image: differ per image, tile and texel.
fn pattern(seed: u8, x: u32, y: u32, bytes: usize) -> Vec<u8> {
    (0..bytes).map(|i| (i as u32).wrapping_mul(31).wrapping_add(x * 7 + y * 13) as u8 ^ seed).collect()
}

/// Two images of 8 × 8 tiles in heaps of 8 tiles: A has 4 rows (heaps 0–3), B 2 rows (heaps 4,
/// 5); then every other tile of A's rows 1–3 and of B's row 0 is released, so heaps 1–4 are half
/// full: 32 tiles in 6 heaps where 4 would do.
fn scene(device: &Arc<Device>) -> Scene {
    let pool = SparseTilePool::new(
        Arc::clone(device),
        TilePoolDesc::default().with_name(POOL).with_tiles_per_heap(8),
    )
    .unwrap();
    let desc = SparseImageDesc::new_2d(Format::R8G8B8A8Unorm, SIZE, SIZE).with_mip_levels(1);
    let mut a = SparseImage::new(&pool, "compacted A", &desc, false).unwrap();
    let mut b = SparseImage::new(&pool, "compacted B", &desc, false).unwrap();
    let shape = a.layout().tile_shape();
    let per_row = SIZE / shape.width;
    for (image, rows) in [(&mut a, 4), (&mut b, 2)] {
        for row in 0..rows {
            let region = TexelRegion { offset: [0, row * shape.height, 0], extent: [SIZE, shape.height, 1] };
            image.commit_region(&pool, 0, 0, region).unwrap();
        }
    }
    pool.flush_binds(&mut [&mut a, &mut b]).unwrap();
    let uploader = Uploader::new(device, "compaction upload", 4 << 20).unwrap();
    let bytes = (shape.width * shape.height * 4) as usize;
    for (seed, image, rows) in [(0x5a, &a, 4), (0xc3, &b, 2)] {
        for y in 0..rows {
            for x in 0..per_row {
                let region = residency_vulkan::ImageRegion::new(
                    image,
                    0,
                    [x * shape.width, y * shape.height, 0],
                    [shape.width, shape.height, 1],
                );
                uploader.write_image(&region, &pattern(seed, x, y, bytes)).unwrap();
            }
        }
    }
    uploader.wait_idle().unwrap();
    uploader.destroy().unwrap();
    device.wait_idle().unwrap();
    for (image, rows) in [(&mut a, 1..4), (&mut b, 0..1)] {
        for y in rows {
            for x in (1..per_row).step_by(2) {
                image.release_region(&pool, 0, 0, tile_origin(image, x, y)).unwrap();
            }
        }
    }
    pool.flush_binds(&mut [&mut a, &mut b]).unwrap();
    for image in [&mut a, &mut b] {
        image.refresh_min_lod();
    }
    assert_eq!(pool.stats().heaps.len(), 6);
    assert_eq!(pool.used_tiles(), 32);
    Scene { pool, a, b }
}

/// Every resident tile's texels, read back in one region per image.
fn snapshot(scene: &Scene) -> Snapshot {
    let mut tiles = Vec::new();
    let mut min_lod = Vec::new();
    for image in [&scene.a, &scene.b] {
        let shape = image.layout().tile_shape();
        let rows = if std::ptr::eq(image, &scene.a) { 4 } else { 2 };
        let all = image
            .read_region(
                0,
                0,
                TexelRegion { offset: [0; 3], extent: [SIZE, rows * shape.height, 1] },
                64 << 20,
            )
            .unwrap();
        let row_bytes = (SIZE * 4) as usize;
        let mut resident = Vec::new();
        for (tile, _) in image.residency().page_table().mapped() {
            let c = image.layout().tile_coord(tile).unwrap();
            let mut texels = Vec::new();
            for y in 0..shape.height {
                let start = (c.y * shape.height + y) as usize * row_bytes + (c.x * shape.width * 4) as usize;
                texels.extend_from_slice(&all[start..start + (shape.width * 4) as usize]);
            }
            assert_eq!(texels, pattern(if rows == 4 { 0x5a } else { 0xc3 }, c.x, c.y, texels.len()));
            resident.push((tile, texels));
        }
        tiles.push(resident);
        min_lod.push(image.residency().page_table().min_lod_layer(0).to_vec());
    }
    Snapshot { tiles, min_lod }
}

fn heap_memories(device: &Device) -> usize {
    device
        .ledger()
        .live_objects()
        .iter()
        .filter(|o| o.kind == "memory" && o.name.starts_with(&format!("{POOL} heap")))
        .count()
}

fn teardown(mut scene: Scene, device: &Device) {
    device.wait_idle().unwrap();
    for image in [&mut scene.a, &mut scene.b] {
        image.release_all(&scene.pool).unwrap();
    }
    scene.pool.flush_binds(&mut [&mut scene.a, &mut scene.b]).unwrap();
    scene.pool.trim();
    drop(scene);
}

#[test]
fn compaction_moves_tiles_into_fuller_heaps_keeps_contents_and_residency_and_frees_heaps() {
    with_gpu(|set| moves_tiles_and_keeps_contents(&set.devices()[0], CompactCopy::Direct));
}

#[test]
fn compaction_by_image_copies_keeps_contents_and_residency_and_frees_heaps() {
    with_gpu(|set| moves_tiles_and_keeps_contents(&set.devices()[0], CompactCopy::ImageCopy));
}

#[test]
fn compaction_through_staging_keeps_contents_and_residency_and_frees_heaps() {
    with_gpu(|set| moves_tiles_and_keeps_contents(&set.devices()[0], CompactCopy::Staging));
}

fn moves_tiles_and_keeps_contents(device: &Arc<Device>, copy: CompactCopy) {
    {
        let device = Arc::clone(device);
        let mut scene = scene(&device);
        let before = snapshot(&scene);
        let physical_before = [physical(&scene.a), physical(&scene.b)];
        assert_eq!(heap_memories(&device), 6);

        let stats = scene.pool.compact_with(&mut [&mut scene.a, &mut scene.b], u32::MAX, &[], copy).unwrap();
        assert_eq!(stats.moves, 8, "{stats:?}");
        assert_eq!(stats.bytes_moved, 8 << 16);
        // Every other tile of a heap moves into every other tile of another: 8 runs of one tile.
        assert_eq!(stats.runs, 8, "{stats:?}");
        let direct = copy != CompactCopy::Staging && device.features().sparse_residency_aliased;
        assert_eq!(stats.direct, direct, "{stats:?}");
        if direct && copy == CompactCopy::Direct {
            // RGBA8 tiles: R32_UINT storage carriers, one dispatch for the 8 tiles, no copy command.
            assert_eq!(stats.path, CompactPath::Compute, "{stats:?}");
            assert_eq!((stats.dispatches, stats.compute_tiles), (1, 8), "{stats:?}");
            assert_eq!((stats.copy_commands, stats.copy_regions, stats.barriers), (0, 0, 3), "{stats:?}");
            assert_eq!(stats.carrier_bind_entries, 16, "{stats:?}");
        } else if direct {
            assert_eq!(stats.path, CompactPath::ImageCopy, "{stats:?}");
            assert_eq!((stats.dispatches, stats.compute_tiles), (0, 0), "{stats:?}");
            assert_eq!((stats.copy_commands, stats.copy_regions, stats.barriers), (1, 1, 3), "{stats:?}");
            assert_eq!(stats.carrier_bind_entries, 16, "{stats:?}");
        } else {
            assert_eq!(stats.path, CompactPath::Staging, "{stats:?}");
            // Per tile a region out and one back, per image moved a copy each way.
            assert_eq!((stats.copy_regions, stats.barriers), (16, 3), "{stats:?}");
            assert!(stats.copy_commands == 2 || stats.copy_commands == 4, "{stats:?}");
            assert_eq!(stats.carrier_bind_entries, 0, "{stats:?}");
        }
        assert_eq!((stats.heaps_emptied, stats.heaps_released), (2, 2));
        assert!(stats.bind.tiles_bound == 8 && stats.bind.tiles_unbound == 0, "{stats:?}");
        scene.pool.check_invariants().unwrap();
        assert_eq!(scene.pool.used_tiles(), 32);
        assert_eq!(scene.pool.stats().heaps.len(), 4);
        assert!(scene.pool.stats().heaps.iter().all(|h| h.free == 0), "every heap left is full");

        // Residency and the min-LOD map mean what they meant: nothing to refresh, the same
        // resident tiles, the same texels; only physical tiles changed.
        for image in [&mut scene.a, &mut scene.b] {
            assert!(image.refresh_min_lod().is_empty(), "no min-LOD entry changed");
        }
        assert_eq!(snapshot(&scene), before);
        let physical_after = [physical(&scene.a), physical(&scene.b)];
        let moved: usize = physical_before
            .iter()
            .zip(&physical_after)
            .map(|(b, a)| b.iter().zip(a).filter(|(x, y)| x.0 == y.0 && x.1 != y.1).count())
            .sum();
        assert_eq!(moved, 8);

        // The emptied heaps' memory is freed once the GPU is past the rebind (and what waited for
        // it is destroyed).
        device.wait_submitted().unwrap();
        assert_eq!(heap_memories(&device), 4);
        let again = scene.pool.compact_with(&mut [&mut scene.a, &mut scene.b], u32::MAX, &[], copy).unwrap();
        assert_eq!(again.moves, 0, "nothing left to gain");
        teardown(scene, &device);
    }
}

#[test]
fn compaction_in_bounded_passes_and_its_refusals() {
    with_gpu(|set| {
        let device = Arc::clone(&set.devices()[0]);
        let mut scene = scene(&device);
        let before = snapshot(&scene);
        // Only A given: B's heaps (4, 5) hold tiles that cannot move, so neither is emptied (their
        // holes take A's tiles); A's heaps 3 and 2 go, in passes of 3 tiles.
        let first = scene.pool.compact(&mut [&mut scene.a], 3, &[]).unwrap();
        assert_eq!((first.moves, first.heaps_released), (3, 0));
        let second = scene.pool.compact(&mut [&mut scene.a], 3, &[]).unwrap();
        assert_eq!((second.moves, second.heaps_released), (3, 1), "{second:?}");
        let third = scene.pool.compact(&mut [&mut scene.a], 3, &[]).unwrap();
        assert_eq!(third.moves, 2, "{third:?}");
        let mut released = first.heaps_released + second.heaps_released + third.heaps_released;
        loop {
            let next = scene.pool.compact(&mut [&mut scene.a], 3, &[]).unwrap();
            if next.moves == 0 {
                break;
            }
            released += next.heaps_released;
        }
        assert_eq!(released, 2);
        let heaps: Vec<u32> = scene.pool.stats().heaps.iter().map(|h| h.heap.0).collect();
        assert_eq!(heaps, vec![0, 1, 4, 5], "B's heaps stay");
        scene.pool.check_invariants().unwrap();
        assert_eq!(snapshot(&scene), before);

        // An image with binds queued is refused, nothing changed.
        scene.b.release_region(&scene.pool, 0, 0, tile_origin(&scene.b, 0, 1)).unwrap();
        let (stats, table) = (scene.pool.stats(), physical(&scene.a));
        let err = scene.pool.compact(&mut [&mut scene.a, &mut scene.b], u32::MAX, &[]).unwrap_err();
        assert!(matches!(err, SparseError::PendingBinds { ref name } if name == "compacted B"), "{err}");
        assert_eq!((scene.pool.stats(), physical(&scene.a)), (stats, table));
        scene.pool.flush_binds(&mut [&mut scene.b]).unwrap();

        // A wait on a frame count (no GPU event to wait for) or on another device's work is
        // refused, nothing changed.
        let (stats, table) = (scene.pool.stats(), physical(&scene.a));
        let other_device = &set.devices()[1];
        for wait in [device.frames_from_now(1), other_device.submitted_work()] {
            let err = scene.pool.compact(&mut [&mut scene.a, &mut scene.b], u32::MAX, &[wait]).unwrap_err();
            assert!(matches!(err, SparseError::Vulkan(_)), "{err}");
        }
        assert_eq!((scene.pool.stats(), physical(&scene.a)), (stats, table));
        device.advance_frame();

        // An image of another pool is refused.
        let other =
            SparseTilePool::new(Arc::clone(&device), TilePoolDesc::default().with_name("other")).unwrap();
        let desc = SparseImageDesc::new_2d(Format::R8G8B8A8Unorm, 256, 256).with_mip_levels(1);
        let mut stranger = SparseImage::new(&other, "stranger", &desc, false).unwrap();
        let err = scene.pool.compact(&mut [&mut stranger], u32::MAX, &[]).unwrap_err();
        assert!(matches!(err, SparseError::Commit(_)), "{err}");
        drop(stranger);
        drop(other);
        teardown(scene, &device);
    });
}

#[test]
fn a_fault_at_any_step_of_a_compaction_leaves_every_tile_where_it_was() {
    with_gpu(|set| faults_leave_every_tile_where_it_was(&set.devices()[0], CompactCopy::Direct));
}

#[test]
fn a_fault_at_any_step_of_a_compaction_through_staging_leaves_every_tile_where_it_was() {
    with_gpu(|set| faults_leave_every_tile_where_it_was(&set.devices()[0], CompactCopy::Staging));
}

fn faults_leave_every_tile_where_it_was(device: &Arc<Device>, copy: CompactCopy) {
    {
        let device = Arc::clone(device);
        let mut failed = Vec::new();
        for site in [
            FaultSite::CreateResource,
            FaultSite::AllocateMemory,
            FaultSite::QueueSubmit,
            FaultSite::BindSparse,
            FaultSite::Wait,
        ] {
            for skip in 0.. {
                let mut scene = scene(&device);
                let before = (snapshot(&scene), physical(&scene.a), physical(&scene.b), scene.pool.stats());
                device.ledger().inject_fault(site, skip, InjectedFault::OutOfDeviceMemory);
                let result = scene.pool.compact_with(&mut [&mut scene.a, &mut scene.b], u32::MAX, &[], copy);
                device.ledger().clear_faults();
                match result {
                    Ok(stats) => {
                        assert_eq!(stats.moves, 8);
                        teardown(scene, &device);
                        break;
                    }
                    Err(e) => {
                        let oom = matches!(
                            e,
                            SparseError::Vulkan(VulkanError::OutOfDeviceMemory { .. })
                                | SparseError::Memory(_)
                        ) || e.to_string().contains("OUT_OF_DEVICE_MEMORY");
                        assert!(oom, "{site:?} call {skip}: {e}");
                        failed.push((site, skip));
                        let after =
                            (snapshot(&scene), physical(&scene.a), physical(&scene.b), scene.pool.stats());
                        assert_eq!(after, before, "{site:?} call {skip}: {e}");
                        scene.pool.check_invariants().unwrap();
                        // Retried without the fault, the pass completes.
                        let stats = scene
                            .pool
                            .compact_with(&mut [&mut scene.a, &mut scene.b], u32::MAX, &[], copy)
                            .unwrap();
                        assert_eq!(stats.moves, 8);
                        assert_eq!(snapshot(&scene), before.0);
                        teardown(scene, &device);
                    }
                }
            }
        }
        // The staging buffer's (or the carriers') creation, both copies (the carriers' transition
        // and the copy), the rebind (and the carriers' binds) and the waits failed at least once;
        // through staging a failed copy back (its submission or its wait) was undone by binding
        // the old tiles again.
        for site in
            [FaultSite::CreateResource, FaultSite::QueueSubmit, FaultSite::BindSparse, FaultSite::Wait]
        {
            assert!(failed.iter().any(|f| f.0 == site), "{site:?} never failed: {failed:?}");
        }
        assert!(failed.iter().filter(|f| f.0 == FaultSite::QueueSubmit).count() >= 2, "{failed:?}");
        if copy == CompactCopy::Direct && device.features().sparse_residency_aliased {
            assert!(failed.iter().filter(|f| f.0 == FaultSite::BindSparse).count() >= 2, "{failed:?}");
        }
    }
}

/// One image of 8 × 8 tiles in heaps of 16: rows 0–1 in heap 0, rows 2–3 in heap 1; rows 1 and
/// 3 released, so each heap holds 8 consecutive tiles and heap 1's move as one run into heap 0's
/// 8 consecutive holes.
#[test]
fn a_run_of_adjacent_tiles_between_two_heaps_is_one_region_one_barrier_set_and_one_bind() {
    with_gpu(|set| {
        let device = Arc::clone(&set.devices()[0]);
        let pool = SparseTilePool::new(
            Arc::clone(&device),
            TilePoolDesc::default().with_name(POOL).with_tiles_per_heap(16),
        )
        .unwrap();
        let desc = SparseImageDesc::new_2d(Format::R8G8B8A8Unorm, SIZE, SIZE).with_mip_levels(1);
        let mut image = SparseImage::new(&pool, "run", &desc, false).unwrap();
        let shape = image.layout().tile_shape();
        let per_row = SIZE / shape.width;
        let row = |y: u32| TexelRegion { offset: [0, y * shape.height, 0], extent: [SIZE, shape.height, 1] };
        for rows in [0..2, 2..4] {
            for y in rows {
                image.commit_region(&pool, 0, 0, row(y)).unwrap();
            }
            pool.flush_binds(&mut [&mut image]).unwrap();
        }
        let uploader = Uploader::new(&device, "run upload", 4 << 20).unwrap();
        let bytes = (shape.width * shape.height * 4) as usize;
        for y in 0..4 {
            for x in 0..per_row {
                let region = residency_vulkan::ImageRegion::new(
                    &image,
                    0,
                    [x * shape.width, y * shape.height, 0],
                    [shape.width, shape.height, 1],
                );
                uploader.write_image(&region, &pattern(0x77, x, y, bytes)).unwrap();
            }
        }
        uploader.wait_idle().unwrap();
        uploader.destroy().unwrap();
        device.wait_idle().unwrap();
        for y in [1, 3] {
            image.release_region(&pool, 0, 0, row(y)).unwrap();
        }
        pool.flush_binds(&mut [&mut image]).unwrap();
        image.refresh_min_lod();
        // Rows 0 and 2 at tiles 0–7 of heaps 0 and 1.
        let before = physical(&image);
        assert_eq!(before.len(), 16);
        for (i, (_, p)) in before.iter().enumerate() {
            assert_eq!((p.heap.0, p.tile), (i as u32 / 8, i as u32 % 8), "{before:?}");
        }
        let read = |image: &SparseImage| {
            let all = image
                .read_region(
                    0,
                    0,
                    TexelRegion { offset: [0; 3], extent: [SIZE, 4 * shape.height, 1] },
                    64 << 20,
                )
                .unwrap();
            let row_bytes = (SIZE * 4) as usize;
            for (tile, _) in image.residency().page_table().mapped() {
                let c = image.layout().tile_coord(tile).unwrap();
                let mut texels = Vec::new();
                for y in 0..shape.height {
                    let start =
                        (c.y * shape.height + y) as usize * row_bytes + (c.x * shape.width * 4) as usize;
                    texels.extend_from_slice(&all[start..start + (shape.width * 4) as usize]);
                }
                assert_eq!(texels, pattern(0x77, c.x, c.y, texels.len()), "tile {tile:?}");
            }
        };
        read(&image);

        let stats = pool.compact(&mut [&mut image], u32::MAX, &[]).unwrap();
        assert_eq!((stats.moves, stats.heaps_released), (8, 1), "{stats:?}");
        assert_eq!(stats.runs, 1, "8 adjacent tiles between one heap pair: one run: {stats:?}");
        // Counted, never timed: one dispatch (RGBA8: a compute copy), one barrier set before it
        // and one after (and the carrier's layout transition before anything is bound to it),
        // one carrier bind each for the run's sources and destinations, and one rebind entry (a
        // row of the image whose new memory is consecutive).
        if device.features().sparse_residency_aliased {
            assert!(stats.direct, "{stats:?}");
            assert_eq!(stats.path, CompactPath::Compute, "{stats:?}");
            assert_eq!((stats.dispatches, stats.copy_commands, stats.barriers), (1, 0, 3), "{stats:?}");
            assert_eq!(stats.carrier_bind_entries, 2, "{stats:?}");
        }
        assert_eq!((stats.bind.bind_entries, stats.bind.tiles_bound), (1, 8), "{stats:?}");
        pool.check_invariants().unwrap();
        let after = physical(&image);
        for (i, (_, p)) in after.iter().enumerate() {
            assert_eq!((p.heap.0, p.tile), (0, i as u32), "{after:?}");
        }
        assert!(image.refresh_min_lod().is_empty(), "no min-LOD entry changed");
        read(&image);
        // Once the GPU is past the pass (and what waited for it destroyed), heap 1's memory is
        // freed.
        device.wait_submitted().unwrap();
        assert_eq!(heap_memories(&device), 1);

        image.release_all(&pool).unwrap();
        pool.flush_binds(&mut [&mut image]).unwrap();
        pool.trim();
        drop(image);
    });
}

/// Two image classes in one pool (RGBA8 tiles of 128², R8 tiles of 256²): a pass moving tiles of
/// both copies each class through its own carrier pair — RGBA8 by the compute shader (R32_UINT
/// storage carriers), R8 (1-byte texels: no storage carrier) by `vkCmdCopyImage` — one dispatch
/// and one copy, and keeps every tile's texels.
#[test]
fn tiles_of_two_formats_move_through_one_carrier_each() {
    with_gpu(|set| {
        let device = Arc::clone(&set.devices()[0]);
        let pool = SparseTilePool::new(
            Arc::clone(&device),
            TilePoolDesc::default().with_name(POOL).with_tiles_per_heap(4),
        )
        .unwrap();
        let rgba = SparseImageDesc::new_2d(Format::R8G8B8A8Unorm, 512, 512).with_mip_levels(1);
        let r8 = SparseImageDesc::new_2d(Format::R8Unorm, 1024, 1024).with_mip_levels(1);
        let mut a = SparseImage::new(&pool, "rgba", &rgba, false).unwrap();
        let mut b = SparseImage::new(&pool, "r8", &r8, false).unwrap();
        let row = |image: &SparseImage, y: u32| {
            let shape = image.layout().tile_shape();
            TexelRegion { offset: [0, y * shape.height, 0], extent: [4 * shape.width, shape.height, 1] }
        };
        // Heap 0: A row 0; heap 1: A row 1; heap 2: B row 0; heap 3: A row 2.
        for (which, y) in [(0, 0), (0, 1), (1, 0), (0, 2)] {
            let image = if which == 0 { &mut a } else { &mut b };
            let region = row(image, y);
            image.commit_region(&pool, 0, 0, region).unwrap();
            pool.flush_binds(&mut [image]).unwrap();
        }
        let uploader = Uploader::new(&device, "two formats upload", 4 << 20).unwrap();
        for (seed, image, bpp) in [(0x11u8, &a, 4u32), (0x22, &b, 1)] {
            let shape = image.layout().tile_shape();
            for (tile, _) in image.residency().page_table().mapped() {
                let c = image.layout().tile_coord(tile).unwrap();
                let region = residency_vulkan::ImageRegion::new(
                    image,
                    0,
                    [c.x * shape.width, c.y * shape.height, 0],
                    [shape.width, shape.height, 1],
                );
                let bytes = (shape.width * shape.height * bpp) as usize;
                uploader.write_image(&region, &pattern(seed, c.x, c.y, bytes)).unwrap();
            }
        }
        uploader.wait_idle().unwrap();
        uploader.destroy().unwrap();
        device.wait_idle().unwrap();
        let one = |image: &SparseImage, x: u32, y: u32| tile_origin(image, x, y);
        // Heap 1 (A) and heap 2 (B) keep one tile each, heap 3 two, heap 0 three: the pass
        // empties heaps 2 and 1 into the holes of heaps 0 and 3.
        for x in 1..4 {
            let r = one(&a, x, 1);
            a.release_region(&pool, 0, 0, r).unwrap();
            let r = one(&b, x, 0);
            b.release_region(&pool, 0, 0, r).unwrap();
        }
        for x in 2..4 {
            let r = one(&a, x, 2);
            a.release_region(&pool, 0, 0, r).unwrap();
        }
        let r = one(&a, 3, 0);
        a.release_region(&pool, 0, 0, r).unwrap();
        pool.flush_binds(&mut [&mut a, &mut b]).unwrap();
        let read = |image: &SparseImage, seed: u8, bpp: u32| {
            let shape = image.layout().tile_shape();
            let mut n = 0;
            for (tile, _) in image.residency().page_table().mapped() {
                let c = image.layout().tile_coord(tile).unwrap();
                let region = TexelRegion {
                    offset: [c.x * shape.width, c.y * shape.height, 0],
                    extent: [shape.width, shape.height, 1],
                };
                let texels = image.read_region(0, 0, region, 16 << 20).unwrap();
                assert_eq!(
                    texels,
                    pattern(seed, c.x, c.y, (shape.width * shape.height * bpp) as usize),
                    "{tile:?}"
                );
                n += 1;
            }
            n
        };
        assert_eq!((read(&a, 0x11, 4), read(&b, 0x22, 1)), (6, 1));

        let stats = pool.compact(&mut [&mut a, &mut b], u32::MAX, &[]).unwrap();
        assert_eq!((stats.moves, stats.heaps_released), (2, 2), "{stats:?}");
        if device.features().sparse_residency_aliased {
            assert!(stats.direct, "{stats:?}");
            assert_eq!(stats.path, CompactPath::Mixed, "{stats:?}");
            assert_eq!((stats.dispatches, stats.compute_tiles), (1, 1), "{stats:?}");
            assert_eq!((stats.copy_commands, stats.copy_regions, stats.barriers), (1, 1, 3), "{stats:?}");
            assert_eq!(stats.carrier_bind_entries, 4, "{stats:?}");
        }
        pool.check_invariants().unwrap();
        assert_eq!((read(&a, 0x11, 4), read(&b, 0x22, 1)), (6, 1));

        device.wait_submitted().unwrap();
        for image in [&mut a, &mut b] {
            image.release_all(&pool).unwrap();
        }
        pool.flush_binds(&mut [&mut a, &mut b]).unwrap();
        pool.trim();
        drop((a, b));
    });
}
