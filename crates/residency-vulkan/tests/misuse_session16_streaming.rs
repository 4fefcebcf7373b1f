//! Red-team review of the residency and streaming layers (session 16): safe calls that try to
//! make a token answer for another issuer, make two images share an owner in a tile pool, or
//! panic or spin on an array description nothing validated yet. Each finding is closed at its
//! cause; the harness fails a test on any validation message or leaked object, a watchdog on a
//! hang.
//!
//! - A [`FrameBindings`](residency_vulkan::streaming::FrameBindings) of one streamer asked for a
//!   texture handle of another streamer whose id equals one of its own.
//! - A hardware tile pool's owner ids (`pool << 20 | serial`) after 2^20 image creations, most of
//!   them refused: the serial carried into the pool's bits and named a live image's owner, so the
//!   later image's drop freed the earlier one's tiles while it still held them.
//! - `Streamer::add_sliced_texture` with an array description of more mips than a `u32` has
//!   bits (a shift overflow), or `u32::MAX` mips (a walk of 4 billion levels).
//! - Sparse image descriptions at the extremes on both paths: typed errors, nothing created.

mod common;
#[path = "common/watchdog.rs"]
mod watchdog;

use residency_core::format::Format;
use residency_core::streaming::{FnSource, TileSource};
use residency_core::tiles::{ResidencyPath, SparseImageDesc, TileIndex, TilePoolDesc};
use residency_core::vt_file::VtDesc;
use residency_vulkan::sparse::software::{SoftwareImage, SoftwareTilePool, DEFAULT_BORDER};
use residency_vulkan::sparse::{SparseError, SparseImage, SparseTilePool};
use residency_vulkan::streaming::{StreamError, Streamer, StreamerDesc};
use residency_vulkan::testing::with_gpu;
use residency_vulkan::Device;
use std::sync::Arc;

fn gpu(what: &'static str, body: impl FnOnce(&Arc<Device>) + Send + 'static) {
    watchdog::within(what, move || {
        with_gpu(|set| body(&set.devices()[0]));
    });
}

/// A procedural RGBA8 source of 128² tiles, `side` texels square.
fn source(name: &str, side: u32, pattern: u8) -> Arc<dyn TileSource> {
    let desc = VtDesc::new(Format::R8G8B8A8Unorm, side, side, 128, 128);
    Arc::new(FnSource::new(name, desc, move |mip, x, y| {
        let (w, h) = desc.tile_extent(mip, x, y).expect("in the grid");
        Ok(vec![pattern; (w * h * 4) as usize])
    }))
}

fn live_objects(device: &Device) -> usize {
    device.ledger().live_objects().len()
}

/// Two streamers' first textures have the same id; each streamer's frame bindings answer only
/// for its own handle. The other streamer's handle (same id) got the first streamer's texture's
/// binding (its views, feedback slot and name): a token answered for another issuer.
#[test]
fn misuse_frame_bindings_answer_only_for_their_own_streamers_textures() {
    gpu("frame bindings and a foreign texture", |device| {
        let desc = StreamerDesc::default().with_path(ResidencyPath::Auto).with_frames_in_flight(2);
        let mut one = Streamer::new(device, desc.clone()).unwrap();
        let mut two = Streamer::new(device, desc).unwrap();
        let a = one.add_texture("one's", source("one's", 512, 1)).unwrap();
        let b = two.add_texture("two's", source("two's", 512, 2)).unwrap();
        assert_eq!(a.id(), b.id(), "both first textures");
        let bindings = one.begin_frame().unwrap();
        assert_eq!(bindings.texture(&a).map(|t| t.name), Some("one's"));
        assert!(
            bindings.texture(&b).is_none(),
            "another streamer's handle named one of this frame's textures"
        );
        drop(bindings);
        one.abandon_frame().unwrap();
        drop((a, b, one, two));
    });
}

/// A hardware tile pool's image owner ids: image A is made, 2^20 − 1 creations are refused (an
/// empty image: the layout refuses it before Vulkan), and image B is made. B must not have A's
/// owner; dropping B (with a tile of its own) must leave A's tile allocated to A.
#[test]
fn misuse_a_tile_pool_never_gives_two_live_images_one_owner() {
    gpu("tile pool owner ids", |device| {
        if device.residency_path(Format::R8G8B8A8Unorm, ResidencyPath::Hardware).is_err() {
            assert!(!residency_vulkan::testing::gpu_required(), "no sparse residency for RGBA8");
            return;
        }
        let desc = SparseImageDesc::new_2d(Format::R8G8B8A8Unorm, 512, 512);
        let empty = SparseImageDesc::new_2d(Format::R8G8B8A8Unorm, 0, 0);
        let pool_desc =
            |name: &str| TilePoolDesc::default().with_name(name).with_tiles_per_heap(8).with_budget_tiles(32);
        // Owner ids are `pool << 20 | serial`: the serial 2^20 + 1 carries into the pool's bits
        // and names serial 1 exactly when the pool's number is odd; of two pools made in a row,
        // one is.
        let mut pools = Vec::new();
        let (pool, mut a) = loop {
            let pool = SparseTilePool::new(Arc::clone(device), pool_desc("owners")).unwrap();
            let a = SparseImage::new(&pool, "A", &desc, false).unwrap();
            if a.residency().owner().0 >> 20 & 1 == 1 {
                break (pool, a);
            }
            pools.push((pool, a));
        };
        assert!(pools.len() <= 1);
        a.commit_tiles(&pool, &[TileIndex(0)]).unwrap();
        let used = pool.stats().used_tiles;
        assert_eq!(used, 1);
        let objects = live_objects(device);
        for _ in 1..1u32 << 20 {
            assert!(SparseImage::new(&pool, "refused", &empty, false).is_err());
        }
        assert_eq!(live_objects(device), objects, "refused images created nothing");
        match SparseImage::new(&pool, "B", &desc, false) {
            Ok(mut b) => {
                assert_ne!(b.residency().owner(), a.residency().owner(), "two live images, one owner");
                b.commit_tiles(&pool, &[TileIndex(1)]).unwrap();
                assert_eq!(pool.stats().used_tiles, 2);
                drop(b);
                device.wait_idle().unwrap();
                device.maintain();
            }
            Err(e) => assert!(matches!(e, SparseError::TooManyImages { .. }), "{e:?}"),
        }
        assert_eq!(pool.stats().used_tiles, used, "A's tile went back to the pool with B");
        pool.check_invariants().unwrap();
        drop((a, pool, pools));
    });
}

/// An owner id comes back to its pool once its image's tiles did, so a pool makes images for as
/// long as it lives (not 2^20 over its life): an image made after another was dropped and retired
/// takes its id, and only then.
#[test]
fn misuse_a_tile_pool_reuses_an_owner_id_only_after_its_images_tiles_came_back() {
    gpu("tile pool owner reuse", |device| {
        if device.residency_path(Format::R8G8B8A8Unorm, ResidencyPath::Hardware).is_err() {
            assert!(!residency_vulkan::testing::gpu_required(), "no sparse residency for RGBA8");
            return;
        }
        let desc = SparseImageDesc::new_2d(Format::R8G8B8A8Unorm, 512, 512);
        let pool_desc =
            TilePoolDesc::default().with_name("reuse").with_tiles_per_heap(8).with_budget_tiles(32);
        let pool = SparseTilePool::new(Arc::clone(device), pool_desc).unwrap();
        let mut a = SparseImage::new(&pool, "A", &desc, false).unwrap();
        a.commit_tiles(&pool, &[TileIndex(0), TileIndex(1)]).unwrap();
        let owner = a.residency().owner();
        let b = SparseImage::new(&pool, "B", &desc, false).unwrap();
        assert_ne!(b.residency().owner(), owner, "A is live");
        drop(a);
        device.wait_idle().unwrap();
        device.maintain();
        assert_eq!(pool.stats().used_tiles, 0, "A's tiles came back");
        let mut c = SparseImage::new(&pool, "C", &desc, false).unwrap();
        assert_eq!(c.residency().owner(), owner, "A's id came back with its tiles");
        c.commit_tiles(&pool, &[TileIndex(0)]).unwrap();
        assert_eq!(pool.stats().used_tiles, 1);
        pool.check_invariants().unwrap();
        drop((b, c, pool));
    });
}

/// `add_sliced_texture` matches each slice against the array description level by level before
/// anything validates that description: 40 mips made `width >> 32` (a shift overflow, a panic in
/// debug), `u32::MAX` mips a walk of 4 billion levels. Both are typed refusals now, adding
/// nothing.
#[test]
fn misuse_a_sliced_array_with_mips_past_its_chain_is_refused_not_a_panic_or_a_spin() {
    gpu("sliced array mips", |device| {
        let Ok(mut streamer) = Streamer::new(
            device,
            StreamerDesc::default().with_path(ResidencyPath::Hardware).with_frames_in_flight(2),
        ) else {
            assert!(!residency_vulkan::testing::gpu_required());
            return;
        };
        let objects = live_objects(device);
        // A slice that is the array at no level, so every level is tried.
        let slice = source("slice", 384, 3);
        for mips in [0, 14, 33, 40, u32::MAX] {
            let mut desc = VtDesc::new(Format::R8G8B8A8Unorm, 4096, 4096, 128, 128);
            desc.mip_count = mips;
            let out = streamer.add_sliced_texture("sliced", desc, &[Some(Arc::clone(&slice)), None]);
            assert!(matches!(out, Err(StreamError::UnsupportedSource { .. })), "{mips} mips: {out:?}");
            assert_eq!(streamer.texture_count(), 0);
        }
        assert_eq!(live_objects(device), objects, "refused arrays created nothing");
        drop(streamer);
    });
}

/// Sparse image descriptions at the extremes on both paths: a typed error and nothing created.
#[test]
fn misuse_sparse_images_of_extreme_descriptions_are_typed_errors_on_both_paths() {
    gpu("extreme sparse descriptions", |device| {
        let base = |w, h| SparseImageDesc::new_2d(Format::R8G8B8A8Unorm, w, h);
        let descs = [
            base(0, 0),
            base(0, 512),
            base(u32::MAX, u32::MAX),
            SparseImageDesc { mip_levels: 0, ..base(512, 512) },
            SparseImageDesc { mip_levels: u32::MAX, ..base(512, 512) },
            SparseImageDesc { array_layers: 0, ..base(512, 512) },
            SparseImageDesc { array_layers: u32::MAX, ..base(512, 512) },
            SparseImageDesc::new_3d(Format::R8G8B8A8Unorm, 64, 64, u32::MAX),
            SparseImageDesc::new_3d(Format::R8G8B8A8Unorm, 64, 64, 0),
        ];
        let objects = live_objects(device);
        let pool_desc =
            || TilePoolDesc::default().with_name("extremes").with_tiles_per_heap(8).with_budget_tiles(32);
        if let Ok(pool) = SparseTilePool::new(Arc::clone(device), pool_desc()) {
            let objects = live_objects(device);
            for desc in &descs {
                assert!(SparseImage::new(&pool, "extreme", desc, false).is_err(), "{desc:?}");
            }
            assert_eq!(live_objects(device), objects);
        }
        if let Ok(pool) =
            SoftwareTilePool::new(Arc::clone(device), Format::R8G8B8A8Unorm, DEFAULT_BORDER, pool_desc())
        {
            let objects = live_objects(device);
            for desc in &descs {
                let desc = desc.with_path(ResidencyPath::Software);
                assert!(SoftwareImage::new(&pool, "extreme", &desc).is_err(), "{desc:?}");
            }
            assert_eq!(live_objects(device), objects);
        }
        assert_eq!(live_objects(device), objects);
    });
}
