//! Streaming on two logical devices (lavapipe opened twice) through one decoded-tile cache: each
//! tile is decoded once for both devices, feedback, budgets and statistics are per device, and a
//! device dropped from a texture's mask loses its residency while the other keeps streaming.

use residency_core::device_mask::{DeviceIndex, DeviceMask};
use residency_core::format::Format;
use residency_core::streaming::{DecodedTileCache, FnSource, TileKey, TileSource};
use residency_core::tiles::{ImageId, ResidencyPath, TileCoord};
use residency_core::vt_file::VtDesc;
use residency_vulkan::multi::streaming::{MultiStreamer, MultiVirtualTexture};
use residency_vulkan::multi::{MultiDevice, MultiDeviceError};
use residency_vulkan::streaming::{StreamError, Streamer, StreamerDesc};
use residency_vulkan::testing::with_gpu;
use residency_vulkan::{CommandContext, Device, DeviceSet};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

mod common;

const SIDE: u32 = 1024;

fn d(i: u32) -> DeviceIndex {
    DeviceIndex::new(i).unwrap()
}

fn texel(mip: u32, x: u32, y: u32) -> [u8; 4] {
    [(x % 251) as u8, (y % 241) as u8, (mip * 29) as u8, 0xe0]
}

/// Decodes per tile `(mip, x, y)`.
type Decodes = Arc<Mutex<HashMap<(u32, u32, u32), u32>>>;

/// A procedural RGBA8 source that counts every read of each tile.
fn counting_source(name: &str) -> (Arc<dyn TileSource>, Decodes) {
    let desc = VtDesc::new(Format::R8G8B8A8Unorm, SIDE, SIDE, 128, 128);
    let decodes: Decodes = Arc::default();
    let counter = Arc::clone(&decodes);
    let source = Arc::new(FnSource::new(name, desc, move |mip, x, y| {
        *counter.lock().unwrap().entry((mip, x, y)).or_default() += 1;
        let (w, h) = desc.tile_extent(mip, x, y).expect("in the grid");
        Ok((0..h).flat_map(|ty| (0..w).flat_map(move |tx| texel(mip, x * 128 + tx, y * 128 + ty))).collect())
    }));
    (source, decodes)
}

fn desc(path: ResidencyPath) -> StreamerDesc {
    StreamerDesc::default().with_name("multi streamer").with_path(path).with_budget_tiles(96).with_workers(2)
}

fn tile_of(streamer: &Streamer, id: ImageId, mip: u32, x: u32, y: u32) -> TileKey {
    let layout = streamer.manager().residency(id).unwrap().layout();
    TileKey::tile(id, layout.tile_index(TileCoord { layer: 0, mip, x, y, z: 0 }).unwrap())
}

/// Tiles `(mip, x, y)` of `texture` on device `i`, as that device's streamer names them.
fn tiles(ms: &MultiStreamer, t: &MultiVirtualTexture, i: u32, coords: &[(u32, u32, u32)]) -> Vec<TileKey> {
    let s = ms.streamer(d(i)).unwrap();
    let id = t.instance(d(i)).unwrap().id();
    coords.iter().map(|&(m, x, y)| tile_of(s, id, m, x, y)).collect()
}

struct Frames {
    commands: Vec<CommandContext>,
}

impl Frames {
    fn new(set: &DeviceSet) -> Frames {
        Frames {
            commands: set.devices()[..2]
                .iter()
                .map(|d| CommandContext::new(d, "multi frames").unwrap())
                .collect(),
        }
    }

    /// One frame on each device, device `i` asking for `wanted[i]`; then the loads finish.
    fn run(&self, ms: &mut MultiStreamer, wanted: [&[TileKey]; 2]) {
        for (i, commands) in self.commands.iter().enumerate() {
            common::cpu_feedback_frame(ms.streamer_mut(d(i as u32)).unwrap(), commands, wanted[i]);
        }
        for (_, s) in ms.streamers_mut() {
            s.wait_for_loads();
        }
    }
}

fn resident(ms: &MultiStreamer, i: u32, keys: &[TileKey]) -> bool {
    let m = ms.streamer(d(i)).unwrap().manager();
    keys.iter().all(|&k| m.is_resident(k))
}

fn live_named(device: &Device, name: &str) -> usize {
    device.ledger().live_objects().iter().filter(|o| o.name.contains(name)).count()
}

fn both() -> DeviceMask {
    DeviceMask::from_bits(0b11)
}

#[test]
fn a_shared_cache_decodes_each_tile_once_for_both_devices() {
    for path in [ResidencyPath::Hardware, ResidencyPath::Software] {
        with_gpu(|set| {
            let cache = DecodedTileCache::new(64 << 20);
            let mut ms = MultiStreamer::new(set, both(), &desc(path), Arc::clone(&cache)).unwrap();
            assert_eq!(ms.mask(), both());
            let (source, decodes) = counting_source("vt shared");
            let t = ms.add_texture("vt shared", source, DeviceMask::ALL).unwrap();
            assert_eq!(t.mask(), both());
            // Priming on both devices decoded the coarse chain once.
            let primed: u32 = decodes.lock().unwrap().values().sum();
            assert!(primed > 0);
            assert!(decodes.lock().unwrap().values().all(|&n| n == 1), "{:?}", decodes.lock().unwrap());
            assert!(cache.requester_stats(Some(d(1))).hits > 0, "device 1 primed from the cache");

            let coords = [(0, 2, 3), (0, 5, 5), (1, 1, 1), (0, 7, 0)];
            let (w0, w1) = (tiles(&ms, &t, 0, &coords), tiles(&ms, &t, 1, &coords));
            let frames = Frames::new(set);
            for _ in 0..10 {
                frames.run(&mut ms, [&w0, &w1]);
            }
            assert!(resident(&ms, 0, &w0) && resident(&ms, 1, &w1), "{:?}", ms.stats());
            let counts = decodes.lock().unwrap().clone();
            assert!(counts.values().all(|&n| n == 1), "a tile decoded twice: {counts:?}");
            for &(m, x, y) in &coords {
                assert_eq!(counts.get(&(m, x, y)), Some(&1), "tile {m} {x} {y} decoded once");
            }
            let stats = ms.stats();
            assert_eq!(stats.cache.decodes, counts.len() as u64);
            let (s0, s1) = (&stats.devices[0], &stats.devices[1]);
            assert_eq!(s0.manager.tiles_streamed, s1.manager.tiles_streamed, "both streamed the same units");
            assert_eq!(
                s0.cache.hits + s0.cache.decodes + s1.cache.hits + s1.cache.decodes,
                stats.cache.hits + stats.cache.decodes
            );
            assert!(stats.cache.hit_rate() >= 0.5, "every tile read twice, decoded once: {:?}", stats.cache);
            assert!(stats.devices.iter().all(|s| s.streamer.loads_failed == 0));
            drop(frames);
            ms.remove_texture(t).unwrap();
            drop(ms);
        });
    }
}

#[test]
fn feedback_budgets_and_statistics_are_per_device() {
    with_gpu(|set| {
        let cache = DecodedTileCache::new(64 << 20);
        let mut ms =
            MultiStreamer::new(set, both(), &desc(ResidencyPath::Hardware), Arc::clone(&cache)).unwrap();
        let (source, decodes) = counting_source("vt per device");
        let t = ms.add_texture("vt per device", source, DeviceMask::ALL).unwrap();
        assert_eq!(ms.streamer_mut(d(1)).unwrap().set_budget_tiles(40), 40);
        let a = [(0, 0, 0), (0, 1, 0)];
        let b = [(0, 6, 6), (0, 7, 6), (0, 6, 7), (0, 7, 7)];
        let (w0, w1) = (tiles(&ms, &t, 0, &a), tiles(&ms, &t, 1, &b));
        let frames = Frames::new(set);
        for _ in 0..10 {
            frames.run(&mut ms, [&w0, &w1]);
        }
        assert!(resident(&ms, 0, &w0) && resident(&ms, 1, &w1));
        // Each device holds what its own feedback asked for, not the other's.
        assert!(!resident(&ms, 0, &tiles(&ms, &t, 0, &b[..1])));
        assert!(!resident(&ms, 1, &tiles(&ms, &t, 1, &a[..1])));
        let stats = ms.stats();
        let (s0, s1) = (&stats.devices[0], &stats.devices[1]);
        assert_eq!((s0.device, s1.device), (d(0), d(1)));
        assert_eq!((s0.budget_tiles, s1.budget_tiles), (96, 40));
        assert!(s1.used_tiles <= 40);
        assert!(s1.manager.tiles_streamed > s0.manager.tiles_streamed, "{s0:?} {s1:?}");
        assert_eq!((s0.textures, s1.textures), (1, 1));
        assert!(s0.streamer.feedback_frames_read > 0 && s1.streamer.feedback_frames_read > 0);
        let (t0, t1) = (ms.texture_stats(&t, d(0)).unwrap(), ms.texture_stats(&t, d(1)).unwrap());
        assert!(t1.resident_tiles > t0.resident_tiles, "{t0:?} {t1:?}");
        // The two devices' decodes are disjoint beyond the coarse chain: still each tile once.
        assert!(decodes.lock().unwrap().values().all(|&n| n == 1));
        assert_eq!(s0.cache.decodes + s1.cache.decodes, stats.cache.decodes);
        drop(frames);
        ms.remove_texture(t).unwrap();
    });
}

#[test]
fn a_device_dropped_from_the_mask_loses_its_residency_while_the_other_streams() {
    with_gpu(|set| {
        let cache = DecodedTileCache::new(64 << 20);
        let mut ms =
            MultiStreamer::new(set, both(), &desc(ResidencyPath::Hardware), Arc::clone(&cache)).unwrap();
        let (source, decodes) = counting_source("vt dropped");
        let mut t = ms.add_texture("vt dropped", source, DeviceMask::ALL).unwrap();
        let first = [(0, 3, 3), (0, 4, 3)];
        let (w0, w1) = (tiles(&ms, &t, 0, &first), tiles(&ms, &t, 1, &first));
        let frames = Frames::new(set);
        for _ in 0..8 {
            frames.run(&mut ms, [&w0, &w1]);
        }
        assert!(resident(&ms, 0, &w0) && resident(&ms, 1, &w1));
        let device1 = set.device(d(1)).unwrap();
        assert!(live_named(device1, "vt dropped") > 0);

        // Misuse first, changing nothing: a device of no streamer, a change mid-frame.
        let err = ms.set_texture_mask(&mut t, DeviceMask::from_bits(0b100));
        assert!(
            matches!(err, Err(MultiDeviceError::EmptyMask(_) | MultiDeviceError::MaskNotSubset { .. })),
            "{err:?}"
        );
        let s1 = ms.streamer_mut(d(1)).unwrap();
        let bindings = s1.begin_frame().unwrap();
        drop(bindings);
        let err = ms.set_texture_mask(&mut t, d(0).mask());
        assert!(
            matches!(err, Err(MultiDeviceError::Failed { device, source: StreamError::FrameOrder(_) }) if device == d(1)),
            "{err:?}"
        );
        assert_eq!(t.mask(), both());
        let s1 = ms.streamer_mut(d(1)).unwrap();
        let submission = frames.commands[1]
            .submit(&[], |rec| s1.frame_bindings().unwrap().record(rec, |_| ()).unwrap())
            .unwrap();
        s1.end_frame(submission.gpu_use()).unwrap();

        // Device 1 drops it: its residency goes, device 0 keeps streaming new tiles.
        ms.set_texture_mask(&mut t, d(0).mask()).unwrap();
        assert_eq!(t.mask(), d(0).mask());
        assert!(t.instance(d(1)).is_none());
        let s1 = ms.streamer(d(1)).unwrap();
        assert_eq!(s1.texture_count(), 0);
        assert_eq!(s1.manager().pool().stats().used_tiles, 0, "its tiles went back to its budget");
        assert!(ms.texture_stats(&t, d(1)).is_none());
        let more = tiles(&ms, &t, 0, &[(0, 0, 7), (0, 1, 7)]);
        for _ in 0..8 {
            frames.run(&mut ms, [&more, &[]]);
        }
        assert!(resident(&ms, 0, &more), "device 0 still streams");
        assert!(resident(&ms, 0, &w0), "and keeps what it had");
        device1.wait_idle().unwrap();
        device1.maintain();
        assert_eq!(live_named(device1, "vt dropped"), 0, "{:?}", device1.ledger().live_objects());

        // Back on both: device 1 is primed from the cache, nothing decoded again.
        let before: u32 = decodes.lock().unwrap().values().sum();
        ms.set_texture_mask(&mut t, DeviceMask::ALL).unwrap();
        assert_eq!(t.mask(), both());
        let s1 = ms.streamer(d(1)).unwrap();
        assert!(s1.coarse_chain(t.instance(d(1)).unwrap()).iter().all(|&k| s1.manager().is_resident(k)));
        assert_eq!(decodes.lock().unwrap().values().sum::<u32>(), before, "primed from the cache");
        drop(frames);
        // Dropping the handle removes it at each device's next frame; remove_texture at once.
        ms.remove_texture(t).unwrap();
        assert!(ms.streamers_mut().all(|(_, s)| s.texture_count() == 0));
    });
}

/// A texture device 1 cannot prime (its source fails the second read of any tile, and the cache
/// keeps nothing, so device 1 reads again what device 0 read) is removed from device 0 too.
#[test]
fn add_texture_is_all_or_nothing_across_devices() {
    with_gpu(|set| {
        let cache = DecodedTileCache::new(0);
        let mut ms =
            MultiStreamer::new(set, both(), &desc(ResidencyPath::Hardware), Arc::clone(&cache)).unwrap();
        let (inner, decodes) = counting_source("vt refused");
        let counter = Arc::clone(&decodes);
        let once: Arc<dyn TileSource> =
            Arc::new(FnSource::new("vt refused", inner.desc(), move |mip, x, y| {
                if counter.lock().unwrap().get(&(mip, x, y)).is_some_and(|&n| n > 0) {
                    return Err(residency_core::streaming::SourceError::Read {
                        source_name: "vt refused".into(),
                        reason: "read once only".into(),
                    });
                }
                inner.read_tile(mip, x, y)
            }));
        let err = ms.add_texture("vt refused", once, DeviceMask::ALL).unwrap_err();
        assert!(
            matches!(err, MultiDeviceError::Failed { device, source: StreamError::Priming { .. } } if device == d(1)),
            "{err:?}"
        );
        assert!(!decodes.lock().unwrap().is_empty(), "device 0 primed it first");
        for i in 0..2 {
            let s = ms.streamer(d(i)).unwrap();
            assert_eq!(s.texture_count(), 0, "nothing left on device {i}");
            assert_eq!(s.manager().pool().stats().used_tiles, 0, "device {i}'s tiles went back");
        }
        // A copy the failed priming queued (the map's first upload) goes with the next frame.
        Frames::new(set).run(&mut ms, [&[], &[]]);
        for device in &set.devices()[..2] {
            device.wait_idle().unwrap();
            device.maintain();
            assert_eq!(live_named(device, "vt refused"), 0, "{:?}", device.ledger().live_objects());
        }
    });
}
