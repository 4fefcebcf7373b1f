//! Compaction of the streamer's own tile heaps (hardware path): after a session with evictions
//! the heaps are mostly holes; `Streamer::compact` moves resident tiles into fuller heaps (copy +
//! rebind over the manager's pool and page tables), the emptied heaps' memory goes back to the
//! device, every resident tile keeps its texels, residency and min-LOD mean what they meant, and
//! the next frames stream on. A fault at any allocation, resource creation, submission, bind or
//! wait of a pass leaves every tile where it was. Validation clean, nothing leaked.

use residency_core::format::Format;
use residency_core::streaming::{FnSource, TileKey, TileSource};
use residency_core::tiles::{ImageId, PhysicalTile, PoolStats, ResidencyPath, TileCoord, TileIndex};
use residency_core::vt_file::VtDesc;
use residency_vulkan::sparse::{CompactPath, SparseError};
use residency_vulkan::streaming::{StreamError, Streamer, StreamerDesc, VirtualTexture};
use residency_vulkan::testing::with_gpu;
use residency_vulkan::{CommandContext, Device, FaultSite, InjectedFault, VulkanError};
use std::sync::Arc;

mod common;

const NAME: &str = "compacted streamer";
const SIDE: u32 = 1024;

fn texel(mip: u32, x: u32, y: u32) -> [u8; 4] {
    [(x % 251) as u8, (y % 241) as u8, (mip * 29) as u8, 0xa5]
}

fn source() -> Arc<dyn TileSource> {
    let desc = VtDesc::new(Format::R8G8B8A8Unorm, SIDE, SIDE, 128, 128);
    Arc::new(FnSource::new("compacted source", desc, move |mip, x, y| {
        let (w, h) = desc.tile_extent(mip, x, y).expect("in the grid");
        Ok((0..h).flat_map(|ty| (0..w).flat_map(move |tx| texel(mip, x * 128 + tx, y * 128 + ty))).collect())
    }))
}

struct Scene {
    streamer: Streamer,
    texture: VirtualTexture,
    commands: CommandContext,
}

impl Scene {
    fn id(&self) -> ImageId {
        self.texture.id()
    }

    fn key(&self, mip: u32, x: u32, y: u32) -> TileKey {
        let layout = self.streamer.manager().residency(self.id()).unwrap().layout();
        TileKey::tile(self.id(), layout.tile_index(TileCoord { layer: 0, mip, x, y, z: 0 }).unwrap())
    }

    /// `frames` frames whose (CPU-written) feedback misses `tiles` of mip 0.
    fn run(&mut self, tiles: &[(u32, u32)], frames: u32) {
        let wanted: Vec<TileKey> = tiles.iter().map(|&(x, y)| self.key(0, x, y)).collect();
        for _ in 0..frames {
            common::cpu_feedback_frame(&mut self.streamer, &self.commands, &wanted);
            self.streamer.wait_for_loads();
        }
    }
}

/// 24 mip-0 tiles streamed in heaps of 8 tiles (with their parents and the pinned coarse mips:
/// 40 tiles in 5 heaps), then half of them evicted by a budget cut while the other half stay
/// wanted: 28 tiles in 5 heaps, the holes spread over them.
///
/// Which tiles the budget cut evicts follows the LRU, so the frames the workers' loads land in:
/// on a loaded machine the cut can empty a whole heap itself (4 heaps, 4 holes: nothing to
/// compact). The scene is built again (at most 8 times) until the holes are spread over 5 heaps.
fn scene(device: &Arc<Device>) -> Scene {
    for _ in 0..8 {
        let scene = try_scene(device);
        let pool = scene.streamer.manager().pool().stats();
        assert_eq!(pool.used_tiles, 28, "{pool:?}");
        if pool.heaps.len() >= 5 && pool.heaps.iter().filter(|h| h.used < h.tiles).count() >= 2 {
            return scene;
        }
        teardown(scene);
        // Its heaps retire before the next scene counts its own.
        device.wait_submitted().unwrap();
    }
    panic!("8 scenes in a row left fewer than 5 heaps after the budget cut");
}

fn try_scene(device: &Arc<Device>) -> Scene {
    let desc = StreamerDesc::default()
        .with_name(NAME)
        .with_path(ResidencyPath::Hardware)
        .with_frames_in_flight(2)
        .with_budget_tiles(48)
        .with_tiles_per_heap(8)
        .with_workers(2);
    let mut streamer = Streamer::new(device, desc).unwrap();
    let texture = streamer.add_texture("compacted", source()).unwrap();
    let commands = CommandContext::new(device, "compaction frames").unwrap();
    let mut scene = Scene { streamer, texture, commands };
    let all: Vec<(u32, u32)> = (0..4).flat_map(|y| (0..6).map(move |x| (x, y))).collect();
    scene.run(&all, 12);
    assert!(all.iter().all(|&(x, y)| scene.streamer.manager().is_resident(scene.key(0, x, y))));
    let even: Vec<(u32, u32)> = all.iter().copied().filter(|(x, _)| x % 2 == 0).collect();
    scene.run(&even, 2);
    scene.streamer.set_budget_tiles(28);
    scene.run(&even, 10);
    scene
}

/// What a compaction must keep: the resident tiles (each read back and checked against the
/// source) and the min-LOD map; and the physical tiles, which only a compaction changes.
#[derive(Debug, PartialEq)]
struct Snapshot {
    tiles: Vec<(TileIndex, PhysicalTile)>,
    min_lod: Vec<u8>,
}

fn snapshot(scene: &Scene) -> Snapshot {
    let residency = scene.streamer.manager().residency(scene.id()).unwrap();
    let layout = residency.layout();
    let image = scene.streamer.sparse_image(&scene.texture).unwrap();
    let tiles: Vec<(TileIndex, PhysicalTile)> = residency.page_table().mapped().collect();
    for &(tile, _) in &tiles {
        let c = layout.tile_coord(tile).unwrap();
        let r = layout.tile_region(c).unwrap();
        let want: Vec<u8> = (0..r.extent[1])
            .flat_map(|y| (0..r.extent[0]).flat_map(move |x| texel(c.mip, r.offset[0] + x, r.offset[1] + y)))
            .collect();
        assert_eq!(image.read_region(0, c.mip, r, 1 << 20).unwrap(), want, "the texels of {c:?}");
    }
    Snapshot { tiles, min_lod: residency.page_table().min_lod_layer(0).to_vec() }
}

fn heap_memories(device: &Device) -> usize {
    let prefix = format!("{NAME} tile pool heap");
    device
        .ledger()
        .live_objects()
        .iter()
        .filter(|o| o.kind == "memory" && o.name.starts_with(&prefix))
        .count()
}

fn state(scene: &Scene) -> (Snapshot, PoolStats, u64) {
    (snapshot(scene), scene.streamer.manager().pool().stats(), scene.streamer.backing_bytes())
}

fn teardown(mut scene: Scene) {
    scene.streamer.remove_texture(scene.texture).unwrap();
    drop(scene.streamer);
    drop(scene.commands);
}

#[test]
fn streamer_compaction_frees_heaps_and_keeps_every_tile_and_the_next_frames_stream() {
    with_gpu(|set| {
        let device = Arc::clone(&set.devices()[0]);
        let mut scene = scene(&device);
        let before = snapshot(&scene);
        let heaps_before = scene.streamer.manager().pool().stats().heaps.len();
        let backing_before = scene.streamer.backing_bytes();
        assert_eq!(heap_memories(&device), heaps_before);

        // Between frames only.
        scene.streamer.begin_frame().unwrap();
        assert!(matches!(scene.streamer.compact(u32::MAX), Err(StreamError::FrameOrder(_))));
        let bindings = scene.streamer.frame_bindings().unwrap();
        let submission = scene.commands.submit(&[], |rec| bindings.record(rec, |_| ()).unwrap()).unwrap();
        drop(bindings);
        scene.streamer.end_frame(submission.gpu_use()).unwrap();

        // Frames are still in flight here: the pass waits for them itself.
        let stats = scene.streamer.compact(u32::MAX).unwrap();
        println!("streamer compaction: {stats:?}");
        assert!(stats.moves > 0 && stats.heaps_released > 0, "{stats:?}");
        assert_eq!(stats.bytes_moved, u64::from(stats.moves) << 16);
        assert_eq!(stats.bind.tiles_bound, u64::from(stats.moves), "{stats:?}");
        // Batched, counted: heap to heap one compute dispatch (one image class, RGBA8: R32_UINT
        // storage carriers) between one barrier before and one after (plus the carriers'
        // transition), whatever the moves.
        if device.features().sparse_residency_aliased {
            assert!(stats.direct, "{stats:?}");
            assert_eq!(stats.path, CompactPath::Compute, "{stats:?}");
            assert_eq!((stats.dispatches, stats.compute_tiles), (1, stats.moves), "{stats:?}");
            assert_eq!((stats.copy_commands, stats.copy_regions), (0, 0), "{stats:?}");
            assert_eq!(stats.barriers, 3, "{stats:?}");
            assert!(stats.carrier_bind_entries <= 2 * u64::from(stats.moves), "{stats:?}");
        }
        let pool = scene.streamer.manager().pool().stats();
        assert_eq!(pool.used_tiles, 28);
        assert_eq!(pool.heaps.len(), heaps_before - stats.heaps_released as usize);
        assert_eq!(pool.heaps.len(), 4, "28 tiles in heaps of 8: {pool:?}");
        assert_eq!(
            scene.streamer.backing_bytes(),
            backing_before - ((u64::from(stats.heaps_released) * 8) << 16)
        );
        scene.streamer.manager().check_invariants().unwrap();

        // The same tiles resident with the same texels and the same min-LOD map: only the
        // physical tiles of the moved ones changed.
        let after = snapshot(&scene);
        assert_eq!(after.min_lod, before.min_lod);
        assert_eq!(
            after.tiles.iter().map(|t| t.0).collect::<Vec<_>>(),
            before.tiles.iter().map(|t| t.0).collect::<Vec<_>>()
        );
        let moved = before.tiles.iter().zip(&after.tiles).filter(|(b, a)| b.1 != a.1).count();
        assert_eq!(moved, stats.moves as usize);
        // The emptied heaps' memory goes once the GPU is past the frames and the rebind.
        device.wait_idle().unwrap();
        assert_eq!(heap_memories(&device), heaps_before - stats.heaps_released as usize);
        assert_eq!(scene.streamer.compact(u32::MAX).unwrap().moves, 0, "nothing left to gain");

        // The next frames stream on: new tiles come in (in new heaps), the moved ones stay.
        scene.streamer.set_budget_tiles(48);
        let even: Vec<(u32, u32)> = (0..4).flat_map(|y| (0..3).map(move |x| (2 * x, y))).collect();
        let more: Vec<(u32, u32)> = even.iter().copied().chain([(7, 0), (7, 1), (6, 6)]).collect();
        scene.run(&more, 10);
        for &(x, y) in &more {
            assert!(scene.streamer.manager().is_resident(scene.key(0, x, y)), "tile ({x}, {y})");
        }
        scene.streamer.manager().check_invariants().unwrap();
        snapshot(&scene);
        teardown(scene);
    });
}

#[test]
fn a_fault_at_any_step_of_a_streamer_compaction_leaves_every_tile_where_it_was() {
    with_gpu(|set| {
        let device = Arc::clone(&set.devices()[0]);
        let mut failed = Vec::new();
        for site in [
            FaultSite::CreateResource,
            FaultSite::AllocateMemory,
            FaultSite::QueueSubmit,
            FaultSite::BindSparse,
            FaultSite::Wait,
        ] {
            let mut scene = scene(&device);
            let before = state(&scene);
            for skip in 0.. {
                device.ledger().inject_fault(site, skip, InjectedFault::OutOfDeviceMemory);
                let result = scene.streamer.compact(u32::MAX);
                device.ledger().clear_faults();
                match result {
                    Ok(stats) => {
                        assert!(
                            stats.moves > 0 && stats.heaps_released > 0,
                            "{site:?} call {skip}: {stats:?}"
                        );
                        break;
                    }
                    Err(e) => {
                        let oom = matches!(
                            e,
                            StreamError::Vulkan(VulkanError::OutOfDeviceMemory { .. })
                                | StreamError::Sparse(SparseError::Vulkan(
                                    VulkanError::OutOfDeviceMemory { .. }
                                ))
                                | StreamError::Sparse(SparseError::Memory(_))
                                | StreamError::Memory(_)
                        ) || e.to_string().contains("OUT_OF_DEVICE_MEMORY");
                        assert!(oom, "{site:?} call {skip}: {e}");
                        failed.push((site, skip));
                        assert_eq!(state(&scene), before, "{site:?} call {skip}: {e}");
                        scene.streamer.manager().check_invariants().unwrap();
                    }
                }
            }
            // Compacted after the faults: the same tiles, the next frames stream.
            let after = snapshot(&scene);
            assert_eq!((after.min_lod, after.tiles.len()), (before.0.min_lod.clone(), before.0.tiles.len()));
            scene.streamer.set_budget_tiles(48);
            scene.run(&[(0, 0), (7, 7)], 8);
            assert!(scene.streamer.manager().is_resident(scene.key(0, 7, 7)));
            snapshot(&scene);
            teardown(scene);
        }
        // The staging buffer's creation, both copies, the rebind and the waits failed at least
        // once; a failed copy back was undone by binding the old tiles again.
        for site in
            [FaultSite::CreateResource, FaultSite::QueueSubmit, FaultSite::BindSparse, FaultSite::Wait]
        {
            assert!(failed.iter().any(|f| f.0 == site), "{site:?} never failed: {failed:?}");
        }
        assert!(failed.iter().filter(|f| f.0 == FaultSite::QueueSubmit).count() >= 2, "{failed:?}");
    });
}
