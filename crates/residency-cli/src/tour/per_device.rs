//! The multi-device step's second half: one texture streamed on every device through one
//! decoded-tile cache, each device asking for its own tiles, and one statistics panel per device.

use residency::core::report::charts::stat_panel;
use residency::core::report::format_bytes;
use residency::vulkan::multi::streaming::{MultiStreamer, MultiVirtualTexture};
use residency::vulkan::multi::work::MultiSubmitter;
use residency::vulkan::multi::{MultiBufferPool, MultiDevice};
use residency::vulkan::sparse::TileCoord;
use residency::vulkan::streaming::{
    DecodedTileCache, FeedbackBuffer, FnSource, RequestKind, StreamUnit, Streamer, StreamerDesc, TileKey,
    TileSource, VtDesc,
};
use residency::vulkan::{CommandContext, DeviceIndex, DeviceMask, DeviceSet, Format};
use serde_json::json;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// What the per-device part showed.
pub struct PerDevice {
    pub lines: Vec<String>,
    pub panels: Vec<String>,
    pub figures: serde_json::Value,
    pub ok: bool,
}

const SIDE: u32 = 1024;
const FRAMES: usize = 6;

/// Decodes per tile.
type Decodes = Arc<Mutex<HashMap<(u32, u32, u32), u32>>>;

/// A procedural 1024² RGBA8 texture whose reads are counted per tile.
fn source(decodes: Decodes) -> Arc<dyn TileSource> {
    let desc = VtDesc::new(Format::R8G8B8A8Unorm, SIDE, SIDE, 128, 128);
    Arc::new(FnSource::new("tour shared texture", desc, move |mip, x, y| {
        *decodes.lock().unwrap_or_else(|e| e.into_inner()).entry((mip, x, y)).or_default() += 1;
        let (w, h) = desc.tile_extent(mip, x, y).expect("inside the tile grid");
        Ok((0..w * h)
            .flat_map(|i| [(x * 40 + i % w) as u8, (y * 40 + i / w) as u8, (mip * 30) as u8, 255])
            .collect())
    }))
}

/// The mip-0 tiles (`x`, `y`) of `texture` as device `index`'s streamer names them.
fn keys(
    streaming: &MultiStreamer,
    texture: &MultiVirtualTexture,
    index: DeviceIndex,
    tiles: &[(u32, u32)],
) -> Vec<TileKey> {
    let (Some(s), Some(t)) = (streaming.streamer(index), texture.instance(index)) else { return Vec::new() };
    let Some(residency) = s.manager().residency(t.id()) else { return Vec::new() };
    tiles
        .iter()
        .filter_map(|&(x, y)| residency.layout().tile_index(TileCoord { layer: 0, mip: 0, x, y, z: 0 }))
        .map(|tile| TileKey::tile(t.id(), tile))
        .collect()
}

/// One frame of `streamer` whose feedback (written by the CPU, as a CPU renderer would) misses
/// `wanted`, submitted on `commands`.
fn frame(streamer: &mut Streamer, commands: &CommandContext, wanted: &[TileKey]) -> anyhow::Result<()> {
    let bindings = streamer.begin_frame()?;
    let frame = bindings.frame;
    let records = bindings.layout.map(|layout| {
        let mut records = FeedbackBuffer::new(layout, frame);
        for key in wanted {
            if let (Some(slot), StreamUnit::Tile(t)) = (layout.slot_of(key.image), key.unit) {
                records.record(layout, slot, t, RequestKind::Miss);
            }
        }
        records
    });
    drop(bindings);
    if let Some(records) = records {
        streamer.write_cpu_feedback(&records)?;
    }
    let bindings = streamer.frame_bindings()?;
    let mut recorded = Ok(());
    let submission = commands.submit(&[], |rec| recorded = bindings.record(rec, |_| ()))?;
    drop(bindings);
    recorded?;
    streamer.end_frame(submission.gpu_use())?;
    Ok(())
}

/// Streams one texture on every device of `set` (each device asking for tiles of its own and two
/// shared ones), then makes one panel per device: its memory, its share of `pool`, its streaming.
pub fn run(set: &DeviceSet, pool: &MultiBufferPool, submitter: &MultiSubmitter) -> anyhow::Result<PerDevice> {
    let cache = DecodedTileCache::new(32 << 20);
    let desc = StreamerDesc::default().with_name("tour multi-device").with_budget_tiles(64);
    let mut streaming = MultiStreamer::new(set, DeviceMask::ALL, &desc, Arc::clone(&cache))?;
    let decodes: Decodes = Arc::default();
    let texture =
        streaming.add_texture("tour shared texture", source(Arc::clone(&decodes)), DeviceMask::ALL)?;
    let devices: Vec<DeviceIndex> = set.devices().iter().map(|d| d.index()).collect();
    let wanted: Vec<Vec<TileKey>> = devices
        .iter()
        .map(|&i| {
            let column = 2 * (i.get() % 3);
            keys(&streaming, &texture, i, &[(column, 0), (column, 1), (column + 1, 0), (7, 7), (6, 7)])
        })
        .collect();
    for _ in 0..FRAMES {
        for (n, &index) in devices.iter().enumerate() {
            let commands =
                submitter.instance(index).ok_or_else(|| anyhow::anyhow!("no submitter on {index}"))?;
            let streamer =
                streaming.streamer_mut(index).ok_or_else(|| anyhow::anyhow!("no streamer on {index}"))?;
            frame(streamer, commands, &wanted[n])?;
        }
        for (_, s) in streaming.streamers_mut() {
            s.wait_for_loads();
        }
    }
    let stats = streaming.stats();
    let counts = decodes.lock().unwrap_or_else(|e| e.into_inner()).clone();
    let decoded_once = counts.values().all(|&n| n == 1);
    let mut ok = decoded_once;
    let mut lines = vec![format!(
        "One 1024² texture streamed on every device, each device a streamer of its own (feedback, budget, loads, statistics) over one decoded-tile cache: {} tiles decoded for {} reads, {:.0} % cache hits, every tile decoded once = {decoded_once}.",
        stats.cache.decodes,
        stats.cache.hits + stats.cache.decodes,
        stats.cache.hit_rate() * 100.0
    )];
    let pools = pool.stats();
    let mut panels = Vec::new();
    let mut figures = Vec::new();
    for (n, d) in stats.devices.iter().enumerate() {
        let device = set.device(d.device).ok_or_else(|| anyhow::anyhow!("device {} vanished", d.device))?;
        let resident = wanted[n]
            .iter()
            .all(|&k| streaming.streamer(d.device).is_some_and(|s| s.manager().is_resident(k)));
        ok &= resident;
        let memory = device.memory_report().statistics().total;
        let (buffers, pool_bytes) =
            pools.iter().find(|(i, _)| *i == d.device).map_or((0, 0), |(_, p)| (p.buffers, p.used_bytes));
        lines.push(format!(
            "device {}: its tiles resident = {resident}; {} units streamed ({} tiles in use of a budget of {}), {} feedback frames read, cache reads {} hits / {} decodes",
            d.device.get(),
            d.manager.tiles_streamed,
            d.used_tiles,
            d.budget_tiles,
            d.streamer.feedback_frames_read,
            d.cache.hits,
            d.cache.decodes
        ));
        let rows = [
            ("device", device.name().to_owned()),
            (
                "general allocator blocks",
                format!("{} ({})", memory.block_count, format_bytes(memory.block_bytes)),
            ),
            (
                "general allocator used / free",
                format!("{} / {}", format_bytes(memory.allocation_bytes), format_bytes(memory.free_bytes)),
            ),
            ("multi-device pool buffers", format!("{buffers} ({})", format_bytes(pool_bytes))),
            ("streaming path", d.path.name().to_owned()),
            ("tile budget / in use", format!("{} / {}", d.budget_tiles, d.used_tiles)),
            ("units streamed", d.manager.tiles_streamed.to_string()),
            ("tile memory", format_bytes(d.backing_bytes)),
            ("feedback frames read", d.streamer.feedback_frames_read.to_string()),
            ("decoded-tile cache: hits / decodes", format!("{} / {}", d.cache.hits, d.cache.decodes)),
            ("its requested tiles resident", resident.to_string()),
        ];
        panels.push(stat_panel(
            &format!("device-panel-{}", d.device.get()),
            &format!("device {}", d.device.get()),
            &rows,
        ));
        figures.push(json!({
            "device": d.device.get(),
            "tiles_streamed": d.manager.tiles_streamed,
            "used_tiles": d.used_tiles,
            "budget_tiles": d.budget_tiles,
            "feedback_frames_read": d.streamer.feedback_frames_read,
            "cache_hits": d.cache.hits,
            "cache_decodes": d.cache.decodes,
            "pool_buffers": buffers,
            "pool_bytes": pool_bytes,
            "block_bytes": memory.block_bytes,
            "resident": resident,
        }));
    }
    streaming.remove_texture(texture).map_err(|e| anyhow::anyhow!("{e}"))?;
    let figures = json!({
        "per_device": figures,
        "cache": {"hits": stats.cache.hits, "decodes": stats.cache.decodes, "hit_rate": stats.cache.hit_rate()},
        "decoded_once": decoded_once,
    });
    Ok(PerDevice { lines, panels, figures, ok })
}
