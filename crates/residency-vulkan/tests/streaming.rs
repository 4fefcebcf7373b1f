//! The streaming manager driving a real sparse image: its loads are "read" (generated), its changes
//! bound through `TileHeaps`, the data uploaded after the binds and the min-LOD map updated, frame
//! after frame, until the requested tiles are resident; then a budget cut evicts what is not wanted.

use residency_core::format::Format;
use residency_core::streaming::{
    FrameInput, RequestKind, StreamUnit, StreamingDesc, StreamingManager, TileKey, TileRequest,
};
use residency_core::tiles::{
    BindPlanOptions, ImageId, SparseImageDesc, SparseImageLayout, TexelRegion, TileCoord,
};
use residency_vulkan::sparse::{MinLodMap, SparseImage, TileHeaps};
use residency_vulkan::testing::with_gpu;
use residency_vulkan::{ImageRegion, Uploader};
use std::sync::Arc;

fn texel(x: u32, y: u32, mip: u32) -> [u8; 4] {
    [(x % 251) as u8, (y % 241) as u8, (mip * 29) as u8, 0xee]
}

fn region_texels(mip: u32, r: TexelRegion) -> Vec<u8> {
    (r.offset[1]..r.offset[1] + r.extent[1])
        .flat_map(|y| (r.offset[0]..r.offset[0] + r.extent[0]).flat_map(move |x| texel(x, y, mip)))
        .collect()
}

/// The texel regions a streamed unit covers: a tile's clamped region, or every mip of a tail.
fn unit_regions(layout: &SparseImageLayout, unit: StreamUnit) -> Vec<(u32, TexelRegion)> {
    match unit {
        StreamUnit::Tile(t) => {
            let coord = layout.tile_coord(t).unwrap();
            vec![(coord.mip, layout.tile_region(coord).unwrap())]
        }
        StreamUnit::Tail(_) => (layout.first_tail_lod()..layout.mip_levels())
            .map(|m| {
                let e = layout.mip(m).unwrap().extent;
                (m, TexelRegion { offset: [0; 3], extent: [e[0], e[1], 1] })
            })
            .collect(),
    }
}

fn upload(uploader: &Uploader, image: &SparseImage, mip: u32, r: TexelRegion) {
    let region = ImageRegion::new(image, mip, r.offset, r.extent);
    uploader.write_image(&region, &region_texels(mip, r)).unwrap();
}

#[test]
fn the_manager_streams_requested_tiles_into_a_sparse_image_and_evicts_under_a_cut() {
    with_gpu(|set| {
        let device = Arc::clone(&set.devices()[0]);
        let mut heaps = TileHeaps::new(Arc::clone(&device), "stream heaps").unwrap();
        let id = ImageId(1);
        let desc = SparseImageDesc::new_2d(Format::R8G8B8A8Unorm, 2048, 2048);
        let image = SparseImage::new_external(&heaps, 65536, id, "streamed 2k", &desc, false).unwrap();
        let layout = image.layout().clone();
        let mut manager = StreamingManager::new(
            StreamingDesc::default().with_name("test stream").with_tiles_per_heap(64).with_budget_tiles(200),
        );
        manager.register_image(id, &layout).unwrap();
        let mut map = MinLodMap::new(&image).unwrap();
        let uploader = Uploader::new(&device, "stream test", 4 << 20).unwrap();

        // A view of the top-left 512 × 256 texels of mip 0.
        let view = TexelRegion { offset: [0; 3], extent: [512, 256, 1] };
        let range = layout.tiles_covering(0, view).unwrap();
        let wanted: Vec<_> = layout.tiles_in(0, 0, range).collect();
        let requests: Vec<TileRequest> = wanted
            .iter()
            .map(|&tile| TileRequest { image: id, tile, mip: 0, kind: RequestKind::Miss, pixels: 4 })
            .collect();
        let mut loaded: Vec<TileKey> = Vec::new();
        let mut frame = 0;
        let all_resident = |m: &StreamingManager| wanted.iter().all(|&t| m.is_resident(TileKey::tile(id, t)));
        while !all_resident(&manager) {
            assert!(frame < 64, "the view did not become resident");
            let out = manager
                .update(&FrameInput { frame, requests: &requests, loaded: &loaded, failed: &[] })
                .unwrap();
            for change in &out.changes {
                heaps.bind(manager.pool(), &[(&image, &change.changes)], BindPlanOptions::default()).unwrap();
            }
            for key in &out.resident {
                for (mip, r) in unit_regions(&layout, key.unit) {
                    upload(&uploader, &image, mip, r);
                }
            }
            let table = manager.residency(id).unwrap().page_table();
            for change in &out.changes {
                map.upload_updates(&uploader, table, &change.min_lod).unwrap();
            }
            uploader.wait_idle().unwrap();
            heaps.release(&out.heaps_released);
            loaded = out.loads.iter().map(|l| l.key).collect(); // loads complete next frame
            manager.check_invariants().unwrap();
            frame += 1;
        }
        let stats = manager.stats().clone();
        assert!(stats.tiles_streamed >= wanted.len() as u64, "{stats:?}");
        // Every requested tile reads back exactly what was streamed into it.
        for &tile in &wanted {
            let coord = layout.tile_coord(tile).unwrap();
            let r = layout.tile_region(coord).unwrap();
            let back = image.read_region(0, 0, r, 1 << 20).unwrap();
            assert!(back == region_texels(0, r), "tile {coord:?}");
        }
        let latency = stats.latency.summary();
        assert!(latency.count > 0 && u64::from(latency.max) <= frame, "{latency:?}");

        // A budget cut: with nothing requested any more, the manager evicts down to the budget and
        // the unbinds go through the same path. The pinned coarse data stays.
        device.wait_idle().unwrap();
        manager.set_budget_tiles(8);
        for _ in 0..32 {
            let out = manager.update(&FrameInput { frame, requests: &[], loaded: &[], failed: &[] }).unwrap();
            for change in &out.changes {
                heaps.bind(manager.pool(), &[(&image, &change.changes)], BindPlanOptions::default()).unwrap();
            }
            heaps.release(&out.heaps_released);
            manager.check_invariants().unwrap();
            frame += 1;
        }
        assert!(
            manager.committed_tiles() <= 8 + layout.mip_tail().map_or(0, |t| u64::from(t.tiles)),
            "{}",
            manager.committed_tiles()
        );
        assert!(manager.stats().tiles_evicted > 0);
        let coarsest = TileCoord { layer: 0, mip: layout.mip_levels() - 1, x: 0, y: 0, z: 0 };
        if let Some(t) = layout.tile_index(coarsest) {
            assert!(manager.is_resident(TileKey::tile(id, t)), "the pinned coarsest mip stays");
        }

        device.wait_idle().unwrap();
        uploader.destroy().unwrap();
        drop((map, image, heaps));
    });
}
