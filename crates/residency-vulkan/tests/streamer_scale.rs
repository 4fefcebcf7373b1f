//! The streamer at scale (issue #32): 1024 textures registered, some removed and others added
//! mid-run, and each frame's work counted — textures visited, feedback images decoded, feedback
//! words read ([`FrameWork`]) — not timed: the counts follow what the frame's feedback asked for
//! and what changed, never the textures registered. On lavapipe, the feedback written by the CPU
//! in the shader's protocol (touched bits included, `FeedbackBuffer`).

use residency_core::format::Format;
use residency_core::streaming::{FnSource, TileKey, TileSource};
use residency_core::tiles::TileCoord;
use residency_core::vt_file::VtDesc;
use residency_vulkan::streaming::{FrameWork, Streamer, StreamerDesc, VirtualTexture};
use residency_vulkan::testing::with_gpu;
use residency_vulkan::CommandContext;
use std::sync::Arc;

mod common;

/// Textures registered at once.
const TEXTURES: usize = 1024;

/// A 256² RGBA8 source in 128² tiles with two mips: mip 0 is 2 × 2 tiles (streamed), mip 1 one
/// tile (the pinned coarse chain), so a thousand textures stay small.
fn source(name: &str) -> Arc<dyn TileSource> {
    let desc = VtDesc::new(Format::R8G8B8A8Unorm, 256, 256, 128, 128).with_mip_count(2);
    Arc::new(FnSource::new(name, desc, move |mip, x, y| {
        let (w, h) = desc.tile_extent(mip, x, y).expect("in the grid");
        Ok(vec![mip as u8 ^ x as u8 ^ y as u8; (w * h * 4) as usize])
    }))
}

/// The four mip-0 tiles of `texture`.
fn mip0(streamer: &Streamer, texture: &VirtualTexture) -> Vec<TileKey> {
    let layout = streamer.manager().residency(texture.id()).unwrap().layout();
    (0..4)
        .map(|i| {
            let c = TileCoord { layer: 0, mip: 0, x: i % 2, y: i / 2, z: 0 };
            TileKey::tile(texture.id(), layout.tile_index(c).unwrap())
        })
        .collect()
}

/// Words one frame's decode reads when `images` textures asked for `requests` tiles in all, each
/// image's bitsets one word a kind (4 tiles), with `touched_words` words of touched bits: the
/// header, the touched bitset, two words a record, three bitset words an image, one pixel counter
/// a request.
fn words_for(touched_words: u64, images: u64, requests: u64) -> u64 {
    4 + touched_words + 2 * requests + 3 * images + requests
}

/// Runs `frames` frames, frame `f` sampling the textures `sampled(f)` (every mip-0 tile of each),
/// and checks each frame's counted work against what the previous frame sampled (one frame in
/// flight: frame `f` reads frame `f - 1`'s feedback): exactly those textures' bitsets decoded,
/// exactly their words read, and at most the textures of the last two frames visited (the loads
/// the previous feedback starts, the loads the frame before started finishing), from the run's
/// second frame on. Returns the
/// largest number of textures visited in a frame.
fn run(
    streamer: &mut Streamer,
    commands: &CommandContext,
    textures: &[VirtualTexture],
    frames: std::ops::Range<usize>,
    sampled: impl Fn(usize) -> Vec<usize>,
) -> u32 {
    let mut most = 0;
    let mut before: Vec<usize> = Vec::new();
    let mut last: Vec<usize> = Vec::new();
    for f in frames {
        let mut now = sampled(f);
        now.sort_unstable();
        now.dedup();
        let wanted: Vec<TileKey> = now.iter().flat_map(|&i| mip0(streamer, &textures[i])).collect();
        common::cpu_feedback_frame(streamer, commands, &wanted);
        streamer.wait_for_loads();
        let work: FrameWork = streamer.stats().last_frame_work;
        let touched_words = (streamer.texture_count() as u64).div_ceil(32);
        if !last.is_empty() {
            assert_eq!(work.feedback_images_decoded as usize, last.len(), "frame {f}: {work:?}");
            assert_eq!(work.requests as usize, 4 * last.len(), "frame {f}: {work:?}");
            assert_eq!(
                work.feedback_words_read,
                words_for(touched_words, last.len() as u64, 4 * last.len() as u64),
                "frame {f}: {work:?}"
            );
        }
        let recent: std::collections::BTreeSet<usize> = last.iter().chain(&before).copied().collect();
        // From the run's second frame on (its first finishes what came before the run).
        assert!(
            last.is_empty() || work.textures_visited as usize <= recent.len(),
            "frame {f}: {} textures visited, {} sampled in the last two frames ({} registered)",
            work.textures_visited,
            recent.len(),
            streamer.texture_count()
        );
        most = most.max(work.textures_visited);
        streamer.manager().check_contract().unwrap();
        before = std::mem::replace(&mut last, now);
    }
    most
}

/// 1024 textures registered, four sampled a frame (taken in turn): each frame decodes the
/// feedback of those four only and visits at most the eight of the last two frames. Then 100 are
/// removed (by `remove_texture` and by dropping handles, sampled ones and ones with loads
/// pending among them) and 64 added mid-run, and the counts still follow the sampled textures;
/// the same run with 64 textures registered counts the same work (but for the touched bitset's
/// words, one per 32 textures).
#[test]
fn a_frames_work_follows_what_it_sampled_not_the_1024_textures_registered() {
    with_gpu(|set| {
        let device = Arc::clone(&set.devices()[0]);
        let desc = StreamerDesc::default()
            .with_name("scale streamer")
            .with_frames_in_flight(1)
            .with_budget_tiles(TEXTURES as u32 + 512)
            .with_workers(2);
        let commands = CommandContext::new(&device, "scale frames").unwrap();

        // The baseline: 64 textures, the same sampling.
        let mut small = Streamer::new(&device, desc.clone().with_name("small streamer")).unwrap();
        let few: Vec<VirtualTexture> =
            (0..64).map(|i| small.add_texture(&format!("few {i}"), source("few")).unwrap()).collect();
        let turn = |f: usize| (0..4).map(|k| (4 * f + k) % 64).collect::<Vec<_>>();
        let small_most = run(&mut small, &commands, &few, 0..12, turn);
        let small_work = small.stats().clone();
        drop(few);
        drop(small);

        let mut streamer = Streamer::new(&device, desc).unwrap();
        let mut textures: Vec<VirtualTexture> = (0..TEXTURES)
            .map(|i| streamer.add_texture(&format!("plane {i}"), source("plane")).unwrap())
            .collect();
        assert_eq!(streamer.texture_count(), TEXTURES);
        let most = run(&mut streamer, &commands, &textures, 0..12, turn);
        assert!(most <= 8, "at most the textures of two frames visited: {most}");
        assert_eq!(
            most, small_most,
            "the same sampling visits as many textures with 1024 registered as with 64"
        );
        let work = streamer.stats().clone();
        assert_eq!(
            work.textures_visited, small_work.textures_visited,
            "12 frames visit as many textures with 1024 registered as with 64"
        );
        // The words differ only by the touched bitset: 32 words against 2, a frame (11 frames read).
        assert_eq!(work.feedback_words_read - small_work.feedback_words_read, 11 * (32 - 2));

        // Mid-run: the sampled textures of the last frame (their loads just started) and 96 others
        // go, half by `remove_texture`, half by dropping the handle; 64 come.
        let mut gone: Vec<usize> = turn(11);
        gone.extend(100..196);
        gone.sort_unstable();
        for (n, &i) in gone.iter().enumerate().rev() {
            let t = textures.remove(i);
            if n % 2 == 0 {
                streamer.remove_texture(t).unwrap();
            } else {
                drop(t);
            }
        }
        streamer.remove_dropped_textures().unwrap();
        for i in 0..64 {
            textures.push(streamer.add_texture(&format!("late {i}"), source("late")).unwrap());
        }
        assert_eq!(streamer.texture_count(), TEXTURES - 100 + 64);
        let n = textures.len();
        // The new textures are sampled along with old ones.
        let mixed = move |f: usize| vec![(4 * f) % n, n - 1 - (f % 64), (7 * f + 3) % n];
        let most = run(&mut streamer, &commands, &textures, 12..24, mixed);
        assert!(most <= 6, "at most the textures of two frames visited: {most}");
        streamer.manager().check_invariants().unwrap();
        drop(textures);
        streamer.remove_dropped_textures().unwrap();
        assert_eq!(streamer.texture_count(), 0);
    });
}

/// A feedback slot is reset only where its last frame wrote (the records, the touched bitset, the
/// touched textures' bitsets and counters), and that is everything it wrote: after a frame whose
/// feedback named 3 of 64 textures, the next frame on the same slot (one in flight) leaves the
/// whole buffer zero but its header — with the records kept, and after an overflow (bitsets
/// scanned). The CPU writes the first frame's feedback in the shader's protocol.
#[test]
fn a_feedback_slot_is_reset_where_its_last_frame_wrote_and_nothing_stays() {
    for capacity in [4096, 8] {
        with_gpu(|set| {
            let device = Arc::clone(&set.devices()[0]);
            let mut desc = StreamerDesc::default()
                .with_name("reset streamer")
                .with_frames_in_flight(1)
                .with_budget_tiles(512)
                .with_workers(1);
            desc.feedback.record_capacity = capacity;
            let mut streamer = Streamer::new(&device, desc).unwrap();
            let textures: Vec<VirtualTexture> = (0..64)
                .map(|i| streamer.add_texture(&format!("reset {i}"), source("reset")).unwrap())
                .collect();
            let commands = CommandContext::new(&device, "reset frames").unwrap();
            let wanted: Vec<TileKey> =
                [3, 17, 40].iter().flat_map(|&i| mip0(&streamer, &textures[i])).collect();
            common::cpu_feedback_frame(&mut streamer, &commands, &wanted);
            let bindings = streamer.begin_frame().unwrap();
            let frame = bindings.frame;
            let submission = commands.submit(&[], |rec| bindings.record(rec, |_| ()).unwrap()).unwrap();
            commands.wait_for(&submission).unwrap();
            let layout = bindings.layout.unwrap();
            let mut bytes = vec![0u8; layout.buffer_bytes() as usize];
            bindings.feedback.unwrap().read(0, &mut bytes).unwrap();
            let header = layout.header_words(frame);
            drop(bindings);
            streamer.end_frame(submission.gpu_use()).unwrap();
            let work = streamer.stats().last_frame_work;
            assert_eq!(
                (work.feedback_images_decoded, work.requests),
                (3, 12),
                "capacity {capacity}: {work:?}"
            );
            let words: Vec<u32> =
                bytes.chunks_exact(4).map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect();
            assert_eq!(words[..4], header, "capacity {capacity}");
            let stale: Vec<usize> = (4..words.len()).filter(|&i| words[i] != 0).collect();
            assert!(
                stale.is_empty(),
                "capacity {capacity}: words {stale:?} of the last frame were not reset"
            );
            drop(textures);
        });
    }
}

/// The software path's atlas cannot grow: a texture whose pinned tiles (here its one-tile mip 1)
/// would take the registered textures' past the atlas's whole heaps is refused with an
/// out-of-capacity error and nothing added; removing one makes room again. (Before, the
/// manager started pinned loads whatever the budget, and a frame failed on a slot beyond the
/// atlas.)
#[test]
fn the_software_atlas_refuses_pinned_tiles_past_its_slots() {
    use residency_core::tiles::ResidencyPath;
    use residency_vulkan::{ErrorClass, Exhausted, ResidencyError};
    with_gpu(|set| {
        let device = Arc::clone(&set.devices()[0]);
        let desc = StreamerDesc::default()
            .with_name("atlas capacity")
            .with_path(ResidencyPath::Software)
            .with_frames_in_flight(1)
            .with_budget_tiles(32);
        let commands = CommandContext::new(&device, "atlas capacity frames").unwrap();
        let mut streamer = Streamer::new(&device, desc).unwrap();
        let mut textures = Vec::new();
        let refused = loop {
            match streamer.add_texture(&format!("t{}", textures.len()), source("t")) {
                Ok(t) => textures.push(t),
                Err(e) => break e,
            }
            assert!(textures.len() <= 4096, "the atlas never refused");
        };
        assert_eq!(refused.class(), ErrorClass::OutOfMemory(Exhausted::Capacity), "{refused}");
        let added = textures.len();
        assert!(added >= 32 && added % 16 == 0, "whole heaps of slots, at least the budget: {added}");
        assert_eq!(streamer.texture_count(), added, "nothing added");
        // Frames run within the atlas; a removal makes room for another texture.
        let turn = |f: usize| vec![f % added];
        run(&mut streamer, &commands, &textures, 0..4, turn);
        let gone = textures.pop().unwrap();
        streamer.remove_texture(gone).unwrap();
        textures.push(streamer.add_texture("again", source("t")).unwrap());
        run(&mut streamer, &commands, &textures, 4..8, turn);
        streamer.manager().check_invariants().unwrap();
        drop(textures);
    });
}
