//! The streamer's frame protocol on lavapipe, on both residency paths: textures from `FnSource`s
//! primed by `add_texture` (frame 0 is not blank), tiles requested through the feedback buffer
//! (written by the CPU here, as a CPU renderer would) resident within a few frames, a texture
//! removed mid-run leaving nothing behind, 1–3 frames in flight, failing sources as typed errors.

use residency_core::format::Format;
use residency_core::streaming::{FnSource, SourceError, TileKey, TileSource};
use residency_core::tiles::{ImageId, ResidencyPath, TexelRegion, TileCoord};
use residency_core::vt_file::VtDesc;
use residency_vulkan::streaming::{StreamError, Streamer, StreamerDesc};
use residency_vulkan::testing::with_gpu;
use residency_vulkan::{CommandContext, Device};
use std::sync::{Arc, Condvar, Mutex};

mod common;

/// A gate the reads of a source wait at once it is armed, until the test opens it: loads stay in
/// flight for exactly the frames the test needs, however fast or slow the machine runs (a sleep
/// in the read would make that depend on the machine). Opened when the test ends, so a failing
/// assertion never leaves a worker waiting (the streamer's drop joins its workers).
#[derive(Default)]
struct Gate {
    /// (armed, open).
    state: Mutex<(bool, bool)>,
    opened: Condvar,
}

impl Gate {
    fn arm(&self) {
        self.state.lock().unwrap().0 = true;
    }

    fn wait(&self) {
        let mut state = self.state.lock().unwrap();
        while state.0 && !state.1 {
            state = self.opened.wait(state).unwrap();
        }
    }

    fn open(&self) {
        self.state.lock().unwrap().1 = true;
        self.opened.notify_all();
    }
}

/// Opens the gate when dropped (also when the test fails).
struct OpenOnDrop(Arc<Gate>);

impl Drop for OpenOnDrop {
    fn drop(&mut self) {
        self.0.open();
    }
}

const SIDE: u32 = 1024;

fn texel(texture: u32, mip: u32, x: u32, y: u32) -> [u8; 4] {
    [(x % 251) as u8, (y % 241) as u8, (mip * 29 + texture) as u8, 0xe0 | texture as u8]
}

/// A procedural RGBA8 source; tiles of mips below `fail_below` fail to read.
fn source(name: &str, texture: u32, fail_below: u32) -> Arc<dyn TileSource> {
    let desc = VtDesc::new(Format::R8G8B8A8Unorm, SIDE, SIDE, 128, 128);
    let owned = name.to_owned();
    Arc::new(FnSource::new(name, desc, move |mip, x, y| {
        if mip < fail_below {
            return Err(SourceError::Read {
                source_name: owned.clone(),
                reason: format!("mip {mip} is damaged"),
            });
        }
        let (w, h) = desc.tile_extent(mip, x, y).expect("in the grid");
        Ok((0..h)
            .flat_map(|ty| (0..w).flat_map(move |tx| texel(texture, mip, x * 128 + tx, y * 128 + ty)))
            .collect())
    }))
}

fn desc(path: ResidencyPath, frames_in_flight: u32) -> StreamerDesc {
    StreamerDesc::default()
        .with_name("test streamer")
        .with_path(path)
        .with_frames_in_flight(frames_in_flight)
        .with_budget_tiles(96)
        .with_workers(2)
}

fn tile(streamer: &Streamer, id: ImageId, mip: u32, x: u32, y: u32) -> TileKey {
    let layout = streamer.manager().residency(id).unwrap().layout();
    TileKey::tile(id, layout.tile_index(TileCoord { layer: 0, mip, x, y, z: 0 }).unwrap())
}

fn live_named(device: &Device, name: &str) -> usize {
    device.ledger().live_objects().iter().filter(|o| o.name.contains(name)).count()
}

/// One frame: begin, the CPU writes misses for `wanted`, an (empty but real) GPU frame, end.
fn frame(streamer: &mut Streamer, commands: &CommandContext, wanted: &[TileKey]) -> u64 {
    let frame = common::cpu_feedback_frame(streamer, commands, wanted);
    // Loads overlap frames; these frames take microseconds, so wait for the workers to count
    // latency in frames deterministically.
    streamer.wait_for_loads();
    frame
}

fn streams(path: ResidencyPath, frames_in_flight: u32) {
    with_gpu(|set| {
        let device = Arc::clone(&set.devices()[0]);
        let mut streamer = Streamer::new(&device, desc(path, frames_in_flight)).unwrap();
        assert_eq!(streamer.path(), path);
        let names = ["vt rock", "vt grass", "vt sand"];
        let textures: Vec<_> = names
            .iter()
            .enumerate()
            .map(|(i, name)| streamer.add_texture(name, source(name, i as u32, 0)).unwrap())
            .collect();

        // Priming: every texture's coarse chain is resident before its first frame.
        for t in &textures {
            let chain = streamer.coarse_chain(t);
            assert!(!chain.is_empty());
            assert!(chain.iter().all(|&k| streamer.manager().is_resident(k)), "coarse chain of {:?}", t.id());
        }
        if let Some(image) = streamer.sparse_image(&textures[1]) {
            // The texels are there too: the finest mip of the coarse chain of the second texture
            // (the 128² mip, one tile, where the device has no mip tail, as lavapipe; the first
            // mip of the tail where it has one, as the H200).
            let mip = image.layout().mip_tail().map_or(3, |_| image.layout().first_tail_lod());
            let side = 1024u32 >> mip;
            let got = image
                .read_region(0, mip, TexelRegion { offset: [0; 3], extent: [side, side, 1] }, 1 << 20)
                .unwrap();
            let want: Vec<u8> =
                (0..side).flat_map(|y| (0..side).flat_map(move |x| texel(1, mip, x, y))).collect();
            assert_eq!(got, want, "mip {mip} of the second texture after priming");
        }

        let commands = CommandContext::new(&device, "test frames").unwrap();
        let (a, b, c) = (textures[0].id(), textures[1].id(), textures[2].id());
        let wanted =
            vec![tile(&streamer, a, 0, 2, 3), tile(&streamer, b, 1, 1, 1), tile(&streamer, c, 0, 7, 7)];
        let mut resident_at = None;
        for f in 0..12 {
            frame(&mut streamer, &commands, &wanted);
            if resident_at.is_none() && wanted.iter().all(|&k| streamer.manager().is_resident(k)) {
                resident_at = Some(f);
            }
        }
        let at = resident_at.unwrap_or_else(|| {
            panic!(
                "the requested tiles became resident: {:?} {:?} {:?}",
                wanted.iter().map(|&k| streamer.manager().is_resident(k)).collect::<Vec<_>>(),
                streamer.manager_stats(),
                streamer.stats()
            )
        });
        assert!(at <= 2 + 2 * frames_in_flight as u64, "resident at frame {at}");
        assert!(streamer.manager_stats().tiles_streamed >= 3);
        if path == ResidencyPath::Hardware {
            let image = streamer.sparse_image(&textures[0]).unwrap();
            let got = image
                .read_region(0, 0, TexelRegion { offset: [256, 384, 0], extent: [128, 128, 1] }, 1 << 20)
                .unwrap();
            let want: Vec<u8> =
                (0..128).flat_map(|y| (0..128).flat_map(move |x| texel(0, 0, 256 + x, 384 + y))).collect();
            assert_eq!(got, want, "the streamed tile's texels");
        }

        // A texture removed mid-run: unregistered at once, its objects gone once the GPU is done.
        let mut textures = textures;
        let removed = textures.remove(1);
        let removed_id = removed.id();
        streamer.remove_texture(removed).unwrap();
        assert!(streamer.manager().residency(removed_id).is_none());
        let wanted: Vec<TileKey> = wanted.into_iter().filter(|k| k.image != removed_id).collect();
        for _ in 0..4 {
            frame(&mut streamer, &commands, &wanted);
        }
        assert_eq!(streamer.texture_count(), 2);
        device.wait_idle().unwrap();
        device.maintain();
        assert_eq!(live_named(&device, "vt grass"), 0, "{:?}", device.ledger().live_objects());
        assert!(streamer.manager().check_invariants().is_ok());
        assert!(streamer.take_load_failures().is_empty());
        for t in textures {
            streamer.remove_texture(t).unwrap();
        }
        drop(streamer);
        drop(commands);
    });
}

#[test]
fn hardware_path_one_frame_in_flight() {
    streams(ResidencyPath::Hardware, 1);
}

#[test]
fn hardware_path_three_frames_in_flight() {
    streams(ResidencyPath::Hardware, 3);
}

#[test]
fn software_path_two_frames_in_flight() {
    streams(ResidencyPath::Software, 2);
}

#[test]
fn software_path_three_frames_in_flight() {
    streams(ResidencyPath::Software, 3);
}

#[test]
fn a_failing_source_is_a_typed_error_and_keeps_its_coarse_data() {
    for path in [ResidencyPath::Hardware, ResidencyPath::Software] {
        with_gpu(|set| {
            let device = Arc::clone(&set.devices()[0]);
            let mut streamer = Streamer::new(&device, desc(path, 2)).unwrap();
            // Mip 0 is damaged: requests for it fail, the coarse chain (mips 3…) is fine.
            let t = streamer.add_texture("vt damaged", source("vt damaged", 3, 1)).unwrap();
            let commands = CommandContext::new(&device, "test frames").unwrap();
            let wanted = vec![tile(&streamer, t.id(), 0, 0, 0)];
            for _ in 0..8 {
                frame(&mut streamer, &commands, &wanted);
            }
            let failures = streamer.take_load_failures();
            assert!(!failures.is_empty());
            assert!(failures
                .iter()
                .all(|f| f.texture == "vt damaged" && matches!(f.error, SourceError::Read { .. })));
            assert!(streamer.stats().loads_failed >= 1);
            assert!(streamer.manager_stats().loads_failed >= 1);
            assert!(!streamer.manager().is_resident(wanted[0]));
            assert!(streamer.coarse_chain(&t).iter().all(|&k| streamer.manager().is_resident(k)));
            // Its parent (mip 1) did load: the texture samples the next coarser level.
            assert!(streamer.manager().is_resident(tile(&streamer, t.id(), 1, 0, 0)));

            // A source whose coarse chain fails is refused at add_texture and leaves nothing.
            let err = streamer.add_texture("vt broken", source("vt broken", 4, 99)).unwrap_err();
            assert!(matches!(err, StreamError::Priming { .. }), "{err}");
            assert_eq!(streamer.texture_count(), 1);
            streamer.remove_texture(t).unwrap();
            drop(streamer);
            drop(commands);
            device.wait_idle().unwrap();
            device.maintain();
            assert_eq!(live_named(&device, "vt broken"), 0);
            assert_eq!(live_named(&device, "vt damaged"), 0);
        });
    }
}

#[test]
fn other_formats_are_refused() {
    with_gpu(|set| {
        let device = Arc::clone(&set.devices()[0]);
        let mut streamer = Streamer::new(&device, desc(ResidencyPath::Auto, 2)).unwrap();
        let desc = VtDesc::new(Format::R8Uint, 512, 512, 128, 128);
        let err = streamer
            .add_texture("vt r8", Arc::new(FnSource::new("vt r8", desc, |_, _, _| Ok(vec![0; 128 * 128]))))
            .unwrap_err();
        assert!(matches!(err, StreamError::UnsupportedSource { .. }), "{err}");
        assert_eq!(streamer.texture_count(), 0);
        // A frame with no textures has no feedback to bind.
        let bindings = streamer.begin_frame().unwrap();
        assert!(bindings.feedback.is_none());
        drop(bindings);
        streamer.end_frame(device.submitted_work()).unwrap();
    });
}

/// Under a small budget the requests move across mip 0: tiles are evicted (unbound on the
/// hardware path, after waiting for the frames in flight), the budget holds, no validation message.
#[test]
fn a_small_budget_evicts_behind_the_frames_in_flight() {
    for path in [ResidencyPath::Hardware, ResidencyPath::Software] {
        with_gpu(|set| {
            let device = Arc::clone(&set.devices()[0]);
            let mut streamer = Streamer::new(&device, desc(path, 2).with_budget_tiles(32)).unwrap();
            let a = streamer.add_texture("vt tight a", source("vt tight a", 5, 0)).unwrap();
            let b = streamer.add_texture("vt tight b", source("vt tight b", 6, 0)).unwrap();
            let commands = CommandContext::new(&device, "test frames").unwrap();
            for f in 0..40u32 {
                let (x, y) = ((f / 4) % 8, (f / 8) % 8);
                let wanted = vec![tile(&streamer, a.id(), 0, x, y), tile(&streamer, b.id(), 0, 7 - x, y)];
                frame(&mut streamer, &commands, &wanted);
                assert!(streamer.manager().check_invariants().is_ok());
            }
            let stats = streamer.manager_stats().clone();
            assert!(stats.tiles_evicted > 0, "{stats:?}");
            assert!(streamer.manager().committed_tiles() <= 32, "{stats:?}");
            if path == ResidencyPath::Hardware {
                // Unbinds wait on the GPU for the frames in flight (those not done yet), never on
                // the host.
                assert!(streamer.stats().unbinds_after_frames <= streamer.stats().binds);
            }
            for k in streamer.coarse_chain(&a).iter().chain(streamer.coarse_chain(&b)) {
                assert!(streamer.manager().is_resident(*k), "pinned units are never evicted");
            }
            streamer.remove_texture(a).unwrap();
            streamer.remove_texture(b).unwrap();
        });
    }
}

/// The GPU side: the shipped `stream_view` shader (feedback image slot 0, so one texture) samples
/// the streamed texture through the bindings and writes the feedback itself. Frame 0 has no
/// magenta (nothing-resident) pixel; the mip-0 tiles under the camera become resident from the
/// GPU's feedback alone.
#[test]
fn the_stream_view_shader_streams_through_the_bindings() {
    use residency_core::usage::{BufferUsage, ImageUsage};
    use residency_vulkan::ash::vk;
    use residency_vulkan::compute::{Binding, ComputeProgram, ViewRef};
    use residency_vulkan::recording::MemoryDependency;
    use residency_vulkan::streaming::TextureViews;
    use residency_vulkan::{shaders, BufferDesc, Filter, ImageDesc};
    use vk::{AccessFlags2 as A, PipelineStageFlags2 as S};

    // Both paths, with the feedback buffers in host memory (the default) and in device-local
    // host-visible memory (`feedback_device_local`): the same feedback streams the same tiles.
    for path in [ResidencyPath::Hardware, ResidencyPath::Software] {
        for device_local in [false, true] {
            with_gpu(|set| {
                let device = Arc::clone(&set.devices()[0]);
                let desc = StreamerDesc { feedback_device_local: device_local, ..desc(path, 2) };
                let mut streamer = Streamer::new(&device, desc).unwrap();
                let t = streamer.add_texture("vt gpu", source("vt gpu", 7, 0)).unwrap();
                let shader = if path == ResidencyPath::Software {
                    &shaders::STREAM_VIEW_SOFTWARE
                } else {
                    &shaders::STREAM_VIEW
                };
                let program = ComputeProgram::new(&device, shader.name(), shader, 2).unwrap();
                let trilinear = device.create_sampler(Filter::Trilinear).unwrap();
                let nearest = device.create_sampler(Filter::Nearest).unwrap();
                let (w, h) = (64u32, 64u32);
                let output = device
                    .create_image(&ImageDesc::new_2d(
                        "vt gpu output",
                        Format::R8G8B8A8Unorm,
                        w,
                        h,
                        ImageUsage::STORAGE | ImageUsage::COPY_SRC,
                    ))
                    .unwrap();
                device.discard_to_general(&[&output]).unwrap();
                let output_view = output.create_view(0..1).unwrap();
                let readback = device
                    .create_buffer(
                        &BufferDesc::new("vt gpu read-back", u64::from(w * h * 4), BufferUsage::COPY_DST)
                            .with_intent(residency_core::memory::MemoryIntent::Readback),
                    )
                    .unwrap();
                let commands = CommandContext::new(&device, "test frames").unwrap();
                let general = vk::ImageLayout::GENERAL;
                // Looking straight down at the texture's centre from low enough for mip 0.
                let side = SIDE as f32;
                let tan = 30f32.to_radians().tan();
                let mut sets: Vec<Option<_>> = vec![None, None];
                let wanted: Vec<TileKey> = [(3, 3), (4, 3), (3, 4), (4, 4)]
                    .iter()
                    .map(|&(x, y)| tile(&streamer, t.id(), 0, x, y))
                    .collect();
                let mut resident_at = None;
                for f in 0..16u32 {
                    let bindings = streamer.begin_frame().unwrap();
                    let slot = bindings.slot;
                    if sets[slot].is_none() {
                        let (texture, map): (ViewRef<'_>, ViewRef<'_>) = match bindings.textures()[0].views {
                            TextureViews::Hardware { image, min_lod } => (image.into(), min_lod.into()),
                            TextureViews::Software { atlas, indirection } => {
                                (atlas.into(), indirection.into())
                            }
                        };
                        sets[slot] = Some(
                            program
                                .descriptor_set(&[
                                    Binding::sampled(texture, &trilinear, general),
                                    Binding::sampled(map, &nearest, general),
                                    Binding::storage(&output_view, general),
                                    Binding::Buffer(bindings.feedback.unwrap()),
                                    Binding::Buffer(bindings.image_table.unwrap()),
                                    Binding::sampled(texture, &trilinear, general),
                                ])
                                .unwrap(),
                        );
                    }
                    let v = [
                        side / 2.0,
                        side / 2.0,
                        20.0,
                        side,
                        0.0,
                        0.0,
                        -1.0,
                        tan,
                        1.0,
                        0.0,
                        0.0,
                        side,
                        0.0,
                        1.0,
                        0.0,
                        0.0,
                    ];
                    let mut push: Vec<u8> = v.iter().flat_map(|x: &f32| x.to_le_bytes()).collect();
                    let sampling = bindings.sampling;
                    for word in [bindings.frame as u32, sampling.pixel_stride, sampling.frame_interval, 0] {
                        push.extend_from_slice(&word.to_le_bytes());
                    }
                    let groups = [w.div_ceil(8), h.div_ceil(8), 1];
                    let submission = commands
                        .submit(&[], |rec| {
                            bindings
                                .record(rec, |rec| {
                                    program
                                        .dispatch(rec, sets[slot].as_ref().unwrap(), &push, groups)
                                        .unwrap()
                                })
                                .unwrap();
                            rec.memory_barrier(MemoryDependency {
                                src_stages: S::COMPUTE_SHADER,
                                src_access: A::SHADER_WRITE,
                                dst_stages: S::COPY | S::HOST,
                                dst_access: A::TRANSFER_READ | A::HOST_READ,
                            })
                            .unwrap();
                            rec.copy_image_to_buffer(&output, general, &readback).unwrap();
                            rec.memory_barrier(MemoryDependency {
                                src_stages: S::COPY,
                                src_access: A::TRANSFER_WRITE,
                                dst_stages: S::HOST,
                                dst_access: A::HOST_READ,
                            })
                            .unwrap();
                        })
                        .unwrap();
                    drop(bindings);
                    streamer.end_frame(submission.gpu_use()).unwrap();
                    commands.wait_for(&submission).unwrap();
                    let mut pixels = vec![0u8; (w * h * 4) as usize];
                    readback.read(0, &mut pixels).unwrap();
                    assert!(
                        pixels.chunks(4).all(|p| p != [255, 0, 255, 255]),
                        "frame {f}: a pixel with nothing resident under it"
                    );
                    streamer.wait_for_loads();
                    if resident_at.is_none() && wanted.iter().all(|&k| streamer.manager().is_resident(k)) {
                        resident_at = Some(f);
                    }
                }
                assert!(
                    resident_at.is_some_and(|f| f <= 8),
                    "{resident_at:?} {:?}",
                    streamer.manager_stats()
                );
                // The one kind of performance warning the streamer's calls raise, documented in
                // docs/reliability.md: copies into images that stay in GENERAL (the sparse image,
                // the min-LOD map, the atlas and the indirection), sampled by frames in flight.
                let warnings = set.validation_log().performance_warnings();
                assert!(
                    warnings.keys().all(|id| id == "UNASSIGNED-CoreValidation-DrawState-InvalidImageLayout"),
                    "{warnings:?}"
                );
                assert!(streamer.stats().feedback_frames_read >= 8);
                drop(sets);
                streamer.remove_texture(t).unwrap();
            });
        }
    }
}

/// A procedural RGBA8 source of `w × h` whose reads take `delay` (so loads overlap frames) and
/// wait at `gate` once it is armed.
fn sized_source(
    name: &str,
    texture: u32,
    (w, h): (u32, u32),
    delay: std::time::Duration,
    gate: Option<Arc<Gate>>,
) -> Arc<dyn TileSource> {
    let desc = VtDesc::new(Format::R8G8B8A8Unorm, w, h, 128, 128);
    Arc::new(FnSource::new(name, desc, move |mip, x, y| {
        std::thread::sleep(delay);
        if let Some(gate) = &gate {
            gate.wait();
        }
        let (tw, th) = desc.tile_extent(mip, x, y).expect("in the grid");
        Ok((0..th)
            .flat_map(|ty| (0..tw).flat_map(move |tx| texel(texture, mip, x * 128 + tx, y * 128 + ty)))
            .collect())
    }))
}

/// The finest tiles of every texture the streamer has, a few per texture.
fn wanted_of(streamer: &Streamer, ids: &[ImageId], frame: u32) -> Vec<TileKey> {
    let mut wanted = Vec::new();
    for (i, &id) in ids.iter().enumerate() {
        let layout = streamer.manager().residency(id).unwrap().layout();
        let [gx, gy, _] = layout.mips()[0].tiles;
        for k in 0..3 {
            let (x, y) = ((frame + i as u32 + k) % gx, (frame / 2 + k) % gy);
            wanted.push(tile(streamer, id, 0, x, y));
        }
    }
    wanted
}

/// Textures of different sizes registered and unregistered mid-run under one budget, on both
/// paths with 1–3 frames in flight: one removed with `remove_texture`, one whose handle is dropped
/// while its loads are in flight, one added late; the budget holds throughout, the others keep
/// streaming, per-texture counters add up, and the removed ones leave no object behind.
#[test]
fn many_textures_come_and_go_mid_run_under_one_budget() {
    let cases = [(ResidencyPath::Hardware, 1), (ResidencyPath::Software, 2), (ResidencyPath::Hardware, 3)];
    for (path, frames_in_flight) in cases {
        with_gpu(|set| {
            let device = Arc::clone(&set.devices()[0]);
            let mut streamer =
                Streamer::new(&device, desc(path, frames_in_flight).with_budget_tiles(64)).unwrap();
            let slow = std::time::Duration::from_millis(2);
            // The third one's reads (after its coarse chain) wait at the gate until its handle
            // goes: its loads are in flight then, whatever the machine's speed.
            let gate = Arc::new(Gate::default());
            let _open = OpenOnDrop(Arc::clone(&gate));
            let sizes = [(1024, 1024), (512, 512), (2048, 1024), (768, 1280)];
            let mut textures: Vec<_> = sizes
                .iter()
                .enumerate()
                .map(|(i, &size)| {
                    let name = format!("vt many {i}");
                    let gate = (i == 2).then(|| Arc::clone(&gate));
                    streamer.add_texture(&name, sized_source(&name, i as u32, size, slow, gate)).unwrap()
                })
                .collect();
            gate.arm();
            assert_eq!(streamer.texture_count(), 4);
            let commands = CommandContext::new(&device, "test frames").unwrap();
            for f in 0..24u32 {
                match f {
                    6 => {
                        let t = textures.remove(1);
                        streamer.remove_texture(t).unwrap();
                    }
                    9 => {
                        // Dropped while its loads are in flight (held at the gate): removed at the
                        // next `begin_frame`, the loads cancelled.
                        assert!(streamer.manager().in_flight().any(|k| k.image == textures[1].id()));
                        drop(textures.remove(1));
                        gate.open();
                    }
                    12 => {
                        let name = "vt many late";
                        let source = sized_source(name, 9, (640, 640), slow, None);
                        textures.push(streamer.add_texture(name, source).unwrap());
                    }
                    _ => {}
                }
                let ids: Vec<ImageId> = textures.iter().map(|t| t.id()).collect();
                let wanted = wanted_of(&streamer, &ids, f);
                // Loads overlap frames until the gated texture goes; from then on they are
                // waited for each frame, so what is streamed by the end does not depend on the
                // workers' speed.
                if f < 9 {
                    frame_no_wait(&mut streamer, &commands, &wanted);
                } else {
                    frame(&mut streamer, &commands, &wanted);
                }
                assert!(streamer.manager().committed_tiles() <= 64, "frame {f}");
                assert!(streamer.manager().check_invariants().is_ok(), "frame {f}");
            }
            assert_eq!(streamer.texture_count(), 3);
            for t in &textures {
                let stats = streamer.texture_stats(t).unwrap();
                assert!(stats.units_streamed > 0, "{stats:?}");
                assert!(streamer.coarse_chain(t).iter().all(|&k| streamer.manager().is_resident(k)));
            }
            device.wait_idle().unwrap();
            streamer.wait_for_loads();
            device.maintain();
            assert_eq!(live_named(&device, "vt many 1"), 0, "{:?}", device.ledger().live_objects());
            assert_eq!(live_named(&device, "vt many 2"), 0, "{:?}", device.ledger().live_objects());
            assert!(live_named(&device, "vt many 3") > 0);
            drop(textures);
            drop(streamer);
            drop(commands);
            device.wait_idle().unwrap();
            device.maintain();
            assert_eq!(live_named(&device, "vt many"), 0, "{:?}", device.ledger().live_objects());
        });
    }
}

/// One frame like `frame`, without waiting for the loads (they overlap frames).
fn frame_no_wait(streamer: &mut Streamer, commands: &CommandContext, wanted: &[TileKey]) {
    common::cpu_feedback_frame(streamer, commands, wanted);
}

/// A budget cut mid-run: the streamer evicts what is not in use down to it over the next frames
/// while the textures keep their coarse chains; on the software path the cut rounds up to whole heaps.
#[test]
fn a_budget_cut_mid_run_evicts_down_to_it() {
    for path in [ResidencyPath::Hardware, ResidencyPath::Software] {
        with_gpu(|set| {
            let device = Arc::clone(&set.devices()[0]);
            let mut streamer = Streamer::new(&device, desc(path, 2)).unwrap();
            let a = streamer.add_texture("vt cut a", source("vt cut a", 1, 0)).unwrap();
            let b = streamer.add_texture("vt cut b", source("vt cut b", 2, 0)).unwrap();
            let commands = CommandContext::new(&device, "test frames").unwrap();
            let mut all = Vec::new();
            for y in 0..8 {
                for x in 0..8 {
                    all.push(tile(&streamer, a.id(), 0, x, y));
                    all.push(tile(&streamer, b.id(), 0, x, y));
                }
            }
            for _ in 0..10 {
                frame(&mut streamer, &commands, &all[..80]);
            }
            let before = streamer.manager().committed_tiles();
            assert!(before > 64, "{before} tiles before the cut");
            // Above what stays in use (the coarse chains, 8 tiles and their parents).
            let cut = streamer.set_budget_tiles(48);
            assert_eq!(cut, 48);
            assert_eq!(streamer.budget_tiles(), 48);
            // The view narrows (tiles in use are not evicted): the rest goes down to the budget.
            for _ in 0..30 {
                frame(&mut streamer, &commands, &all[..8]);
                assert!(streamer.manager().check_invariants().is_ok());
            }
            assert!(
                streamer.manager().committed_tiles() <= 48,
                "{} after the cut",
                streamer.manager().committed_tiles()
            );
            for k in streamer.coarse_chain(&a).iter().chain(streamer.coarse_chain(&b)) {
                assert!(streamer.manager().is_resident(*k));
            }
            if path == ResidencyPath::Software {
                assert_eq!(streamer.set_budget_tiles(20), 32, "whole heaps of 16");
                assert_eq!(streamer.set_budget_tiles(48), 48);
                assert_eq!(streamer.set_budget_tiles(10_000), 96, "never above the atlas");
            }
        });
    }
}

/// A handle of another streamer is refused, not taken for this streamer's texture of the same id.
#[test]
fn misuse_a_texture_of_another_streamer_is_refused() {
    with_gpu(|set| {
        let device = Arc::clone(&set.devices()[0]);
        let mut one = Streamer::new(&device, desc(ResidencyPath::Auto, 2)).unwrap();
        let mut two = Streamer::new(&device, desc(ResidencyPath::Auto, 2)).unwrap();
        let a = one.add_texture("vt one", source("vt one", 1, 0)).unwrap();
        let b = two.add_texture("vt two", source("vt two", 2, 0)).unwrap();
        assert_eq!(a.id(), b.id(), "both first textures");
        assert!(two.texture_stats(&a).is_none());
        assert!(matches!(two.set_lod_warning(&a, 0, 64), Err(StreamError::ForeignTexture(_))));
        assert!(matches!(two.remove_texture(a), Err(StreamError::ForeignTexture(_))));
        assert_eq!(two.texture_count(), 1);
        // The refused handle was dropped: `one` removes its texture at its next frame.
        let bindings = one.begin_frame().unwrap();
        assert!(bindings.textures().is_empty());
        drop(bindings);
        one.end_frame(device.submitted_work()).unwrap();
        assert_eq!(one.texture_count(), 0);
        two.remove_texture(b).unwrap();
    });
}

/// The software path's textures share the streamer's one atlas (sized for the budget once), each
/// with its own indirection: four textures make one atlas image, `backing_bytes` is that atlas
/// plus four small indirections, their streamed tiles hold distinct slots, and every texture
/// samples its own texels back through the software fallback GLSL over the shared atlas view.
/// The atlas outlives removed textures and goes with the streamer.
#[test]
fn software_textures_share_one_atlas_in_distinct_slots() {
    use residency_core::tiles::AtlasLayout;
    use residency_vulkan::sparse::software::SoftwareTexture;
    use residency_vulkan::streaming::TextureViews;
    with_gpu(|set| {
        let device = Arc::clone(&set.devices()[0]);
        let mut streamer = Streamer::new(&device, desc(ResidencyPath::Software, 2)).unwrap();
        let mut textures: Vec<_> = (0..4u32)
            .map(|i| {
                let name = format!("vt shared {i}");
                streamer.add_texture(&name, source(&name, i, 0)).unwrap()
            })
            .collect();
        let atlases = |device: &Device| {
            device
                .ledger()
                .live_objects()
                .iter()
                .filter(|o| o.kind == "image" && o.name.contains("atlas"))
                .count()
        };
        assert_eq!(atlases(&device), 1, "{:?}", device.ledger().live_objects());
        // One atlas for the budget (96 tiles: 7 heaps of 16 slots of 136² texels) and the
        // indirections (a few KiB each), not one atlas per texture.
        let [w, h] =
            AtlasLayout::new(128, 4, SoftwareTexture::capacity_for_budget(96, 16), 16).unwrap().extent();
        let atlas_bytes = u64::from(w) * u64::from(h) * 4;
        let backing = streamer.backing_bytes();
        assert!(
            backing > atlas_bytes && backing < atlas_bytes + 4 * (16 << 10),
            "{backing} vs {atlas_bytes}"
        );

        let commands = CommandContext::new(&device, "test frames").unwrap();
        let ids: Vec<ImageId> = textures.iter().map(|t| t.id()).collect();
        // Two mip-0 tiles of each texture, at different places.
        let spots: Vec<(usize, u32, u32)> =
            (0..4).flat_map(|i| [(i, i as u32 + 1, 2), (i, 5, i as u32 + 3)]).collect();
        let wanted: Vec<TileKey> = spots.iter().map(|&(i, x, y)| tile(&streamer, ids[i], 0, x, y)).collect();
        for _ in 0..8 {
            frame(&mut streamer, &commands, &wanted);
        }
        assert!(wanted.iter().all(|&k| streamer.manager().is_resident(k)), "{:?}", streamer.manager_stats());

        // Every resident tile of every texture holds a slot of its own.
        let mut slots = std::collections::BTreeSet::new();
        let mut mapped = 0;
        for &id in &ids {
            for (_, physical) in streamer.manager().residency(id).unwrap().page_table().mapped() {
                mapped += 1;
                slots.insert((physical.heap.0, physical.tile));
            }
        }
        assert_eq!(slots.len(), mapped, "two textures' tiles in one slot");
        assert!(mapped >= 4 * 9, "coarse chains and the streamed tiles: {mapped}");

        // Sample each texture back: its streamed mip-0 tiles exactly, and its coarse chain.
        let bindings = streamer.begin_frame().unwrap();
        let submission = commands.submit(&[], |rec| bindings.record(rec, |_| ()).unwrap()).unwrap();
        commands.wait_for(&submission).unwrap();
        let mut atlas_views = Vec::new();
        for (i, &id) in ids.iter().enumerate() {
            let binding = bindings.textures().into_iter().find(|t| t.id == id).unwrap();
            let TextureViews::Software { atlas, indirection } = binding.views else {
                panic!("software path")
            };
            atlas_views.push(atlas.raw());
            let mut probes = Vec::new();
            let mut want = Vec::new();
            for &(_, tx, ty) in spots.iter().filter(|s| s.0 == i) {
                let (x, y) = (tx * 128 + 5 + i as u32, ty * 128 + 7);
                probes.push((common::centre(SIDE, x, y, 0), 0.0));
                want.push((texel(i as u32, 0, x, y), 0.0));
            }
            probes.push((common::centre(SIDE, 50, 60, 3), 3.0));
            want.push((texel(i as u32, 3, 50, 60), 3.0));
            let got = common::sample_fallback(
                &device,
                common::SOFTWARE_FALLBACK,
                (atlas.into(), indirection.into()),
                &probes,
            );
            for (k, ((texels, resident, lod), (w, wlod))) in got.iter().zip(&want).enumerate() {
                assert!(resident, "texture {i} probe {k} resident");
                assert_eq!(*lod, *wlod, "texture {i} probe {k}: LOD used");
                common::close(*texels, common::as_f32(*w), &format!("texture {i} probe {k}"));
            }
        }
        assert!(atlas_views.windows(2).all(|v| v[0] == v[1]), "one atlas view for all");
        drop(bindings);
        streamer.end_frame(submission.gpu_use()).unwrap();

        // Three removed: the atlas stays for the last one (and the streamer).
        for t in textures.drain(1..) {
            streamer.remove_texture(t).unwrap();
        }
        for _ in 0..2 {
            frame(&mut streamer, &commands, &wanted[..2]);
        }
        device.wait_idle().unwrap();
        device.maintain();
        assert_eq!(live_named(&device, "vt shared 1"), 0, "{:?}", device.ledger().live_objects());
        assert_eq!(atlases(&device), 1);
        assert!(streamer.backing_bytes() < atlas_bytes + (16 << 10));
        assert!(streamer.take_load_failures().is_empty());
        drop(textures);
        drop(streamer);
        drop(commands);
        device.wait_idle().unwrap();
        device.maintain();
        assert_eq!(atlases(&device), 0, "{:?}", device.ledger().live_objects());
        assert_eq!(live_named(&device, "vt shared"), 0, "{:?}", device.ledger().live_objects());
    });
}

/// Loads the camera moved away from are cancelled: tiles asked for in one frame only, read slowly,
/// are cancelled by the manager after its window and dropped by the loader; they never become
/// resident, are not load failures, and give their budget back. Both paths, sync validation.
#[test]
fn loads_no_longer_wanted_are_cancelled() {
    for path in [ResidencyPath::Hardware, ResidencyPath::Software] {
        with_gpu(|set| {
            let device = Arc::clone(&set.devices()[0]);
            let mut streamer = Streamer::new(&device, desc(path, 2)).unwrap();
            let vt = VtDesc::new(Format::R8G8B8A8Unorm, SIDE, SIDE, 128, 128);
            // The fine mips' reads wait at a gate until the loads were cancelled (however fast
            // the machine runs); the coarse chain (priming) reads at once.
            let gate = Arc::new(Gate::default());
            gate.arm();
            let _open = OpenOnDrop(Arc::clone(&gate));
            let held = Arc::clone(&gate);
            let slow: Arc<dyn TileSource> = Arc::new(FnSource::new("vt slow", vt, move |mip, x, y| {
                if mip < 3 {
                    held.wait();
                }
                let (w, h) = vt.tile_extent(mip, x, y).expect("in the grid");
                Ok((0..h)
                    .flat_map(|ty| (0..w).flat_map(move |tx| texel(3, mip, x * 128 + tx, y * 128 + ty)))
                    .collect())
            }));
            let t = streamer.add_texture("vt slow", slow).unwrap();
            let commands = CommandContext::new(&device, "test frames").unwrap();
            let wanted: Vec<TileKey> = (0..4).map(|x| tile(&streamer, t.id(), 0, x, 6)).collect();
            frame_no_wait(&mut streamer, &commands, &wanted);
            // The feedback of that frame is read a frame or two later (the loads start then);
            // then nothing is wanted.
            let mut peak = streamer.manager().committed_tiles();
            let mut frames = 0;
            while streamer.manager_stats().loads_cancelled == 0 {
                assert!(frames < 12, "nothing cancelled: {:?}", streamer.manager_stats());
                frame_no_wait(&mut streamer, &commands, &[]);
                peak = peak.max(streamer.manager().committed_tiles());
                frames += 1;
            }
            gate.open();
            streamer.wait_for_loads();
            for _ in 0..3 {
                frame_no_wait(&mut streamer, &commands, &[]);
            }
            // Every cancelled load gave its tile back (the others are resident).
            let cancelled = streamer.manager_stats().loads_cancelled;
            assert_eq!(streamer.manager().committed_tiles() + cancelled, peak);
            assert!(wanted.iter().all(|&k| !streamer.manager().is_resident(k)));
            assert_eq!(streamer.manager().in_flight().count(), 0, "{:?}", streamer.manager_stats());
            assert_eq!(streamer.manager_stats().loads_failed, 0);
            assert!(streamer.take_load_failures().is_empty());
            assert!(streamer.manager().check_invariants().is_ok());
            streamer.remove_texture(t).unwrap();
        });
    }
}

/// A source of `format` (any texel size) in its standard 64 KiB tiles: texel bytes from the
/// position, so a read-back shows where each came from.
fn format_source(name: &str, format: Format, side: u32) -> Arc<dyn TileSource> {
    let bytes = format.block_bytes();
    let (tw, th) = match bytes {
        1 => (256, 256),
        2 => (256, 128),
        4 => (128, 128),
        8 => (128, 64),
        _ => (64, 64),
    };
    let desc = VtDesc::new(format, side, side, tw, th);
    Arc::new(FnSource::new(name, desc, move |mip, x, y| {
        let (w, h) = desc.tile_extent(mip, x, y).expect("in the grid");
        Ok((0..h)
            .flat_map(|ty| {
                (0..w).flat_map(move |tx| {
                    let (px, py) = (x * tw + tx, y * th + ty);
                    (0..bytes).map(move |b| ((px * 7 + py * 13 + b * 29 + mip * 3) % 251) as u8)
                })
            })
            .collect())
    }))
}

/// Textures of different formats under one budget: on the hardware path RGBA8, sRGB RGBA8 and
/// RGBA16F (8-byte texels in 128 × 64 tiles) each in its own sparse image; on the software path
/// RGBA8 and BGRA8, each format with its atlas. Requested tiles become resident and read back
/// exactly (hardware); a format the path cannot stream is a typed error that adds nothing.
#[test]
fn textures_of_different_formats_stream_under_one_budget() {
    for path in [ResidencyPath::Hardware, ResidencyPath::Software] {
        with_gpu(|set| {
            let device = Arc::clone(&set.devices()[0]);
            let mut streamer = Streamer::new(&device, desc(path, 2)).unwrap();
            let formats: &[Format] = match path {
                ResidencyPath::Software => &[Format::R8G8B8A8Unorm, Format::B8G8R8A8Unorm],
                _ => &[Format::R8G8B8A8Unorm, Format::R8G8B8A8Srgb, Format::R16G16B16A16Float],
            };
            let textures: Vec<_> = formats
                .iter()
                .map(|&f| {
                    let name = format!("vt format {}", f.name());
                    streamer.add_texture(&name, format_source(&name, f, 1024)).unwrap()
                })
                .collect();
            let commands = CommandContext::new(&device, "test frames").unwrap();
            let wanted: Vec<TileKey> = textures.iter().map(|t| tile(&streamer, t.id(), 0, 1, 2)).collect();
            for _ in 0..8 {
                frame(&mut streamer, &commands, &wanted);
            }
            assert!(
                wanted.iter().all(|&k| streamer.manager().is_resident(k)),
                "{:?}",
                streamer.manager_stats()
            );
            if path == ResidencyPath::Hardware {
                for (t, &f) in textures.iter().zip(formats) {
                    let image = streamer.sparse_image(t).unwrap();
                    let (tw, th) = (image.layout().tile_shape().width, image.layout().tile_shape().height);
                    let got = image
                        .read_region(
                            0,
                            0,
                            TexelRegion { offset: [tw, 2 * th, 0], extent: [tw, th, 1] },
                            1 << 20,
                        )
                        .unwrap();
                    let src = format_source("check", f, 1024);
                    assert_eq!(got, src.read_tile(0, 1, 2).unwrap(), "{f:?}");
                }
                // 16-byte texels have no sparse support on every device: either streamed or refused.
                let r = streamer
                    .add_texture("vt rgba32f", format_source("vt rgba32f", Format::R32G32B32A32Float, 512));
                if let Err(e) = &r {
                    assert!(matches!(e, StreamError::UnsupportedSource { .. }), "{e}");
                }
            } else {
                let atlases =
                    device.ledger().live_objects().iter().filter(|o| o.name.contains("atlas")).count();
                assert!(atlases >= 2, "one atlas per format");
                let err = streamer
                    .add_texture("vt rgba16f", format_source("vt rgba16f", Format::R16G16B16A16Float, 512))
                    .unwrap_err();
                assert!(matches!(err, StreamError::UnsupportedSource { .. }), "{err}");
            }
            assert!(streamer.manager().check_invariants().is_ok());
        });
    }
}

/// A fault inside the streamer's frames: the sparse bind of the requested tiles fails. The frame
/// that hits it returns the typed error; the streamer keeps the tick and applies it at the next
/// frame, so the tiles still become resident with the right texels, nothing leaks and no
/// validation message is raised.
#[test]
fn faults_inside_frames_are_typed_errors_and_the_next_frames_catch_up() {
    use residency_vulkan::{FaultSite, InjectedFault};
    let site = FaultSite::BindSparse;
    {
        with_gpu(|set| {
            let device = Arc::clone(&set.devices()[0]);
            let mut streamer = Streamer::new(&device, desc(ResidencyPath::Hardware, 2)).unwrap();
            let t = streamer.add_texture("vt faults", source("vt faults", 7, 0)).unwrap();
            let commands = CommandContext::new(&device, "test frames").unwrap();
            let wanted: Vec<TileKey> = (0..6).map(|x| tile(&streamer, t.id(), 0, x, 3)).collect();
            // The next bind fails: the first bind of the requested tiles.
            device.ledger().inject_fault(site, 0, InjectedFault::OutOfDeviceMemory);
            let mut errors = 0;
            for _ in 0..12 {
                // `frame`, but a `begin_frame` that fails is counted and the loop goes on.
                if let Err(e) = common::try_cpu_feedback_frame(&mut streamer, &commands, &wanted) {
                    assert!(matches!(e, StreamError::Sparse(_)), "{site:?}: {e}");
                    errors += 1;
                    continue;
                }
                streamer.wait_for_loads();
            }
            device.ledger().clear_faults();
            assert!(errors >= 1, "{site:?}: the fault reached a frame");
            assert!(streamer.stats().ticks_retried >= 1);
            assert!(wanted.iter().all(|&k| streamer.manager().is_resident(k)), "{site:?}");
            let image = streamer.sparse_image(&t).unwrap();
            let got = image
                .read_region(0, 0, TexelRegion { offset: [256, 384, 0], extent: [128, 128, 1] }, 1 << 20)
                .unwrap();
            let want: Vec<u8> =
                (0..128).flat_map(|y| (0..128).flat_map(move |x| texel(7, 0, 256 + x, 384 + y))).collect();
            assert_eq!(got, want, "{site:?}: the tile bound after the retry has its texels");
            assert!(streamer.manager().check_invariants().is_ok());
        });
    }
}

/// A block-compressed source in its standard 64 KiB tiles (`VtDesc::standard`: BC7 256 × 256,
/// BC1 512 × 256): each tile's blocks are bytes made from its place, so a read-back is exact.
fn bc_source(name: &str, format: Format, side: u32) -> Arc<dyn TileSource> {
    let desc = VtDesc::standard(format, side, side).unwrap();
    Arc::new(FnSource::new(name, desc, move |mip, x, y| {
        let (w, h) = desc.tile_extent(mip, x, y).expect("in the grid");
        let n = format.region_bytes(w, h, 1) as u32;
        Ok((0..n).map(|i| ((i * 7 + x * 31 + y * 17 + mip * 3) % 253) as u8).collect())
    }))
}

/// BC7 and BC1 textures stream on the hardware path where the device has sparse residency for
/// them (lavapipe has, with no mip tail: the coarse chain down to the one-block 2 × 2 and 1 × 1
/// mips is bound tile by tile): primed, requested tiles resident and read back block for block.
/// (The software path streams them too: `tests/software_bc.rs`.)
#[test]
fn block_compressed_textures_stream_on_the_hardware_path() {
    with_gpu(|set| {
        let device = Arc::clone(&set.devices()[0]);
        let mut streamer = Streamer::new(&device, desc(ResidencyPath::Hardware, 2)).unwrap();
        let formats = [Format::Bc7Unorm, Format::Bc1Unorm];
        let textures: Vec<_> = formats
            .iter()
            .map(|&f| {
                let name = format!("vt bc {}", f.name());
                streamer.add_texture(&name, bc_source(&name, f, 1024)).unwrap()
            })
            .collect();
        // The coarse chain's last mip (1 × 1: one block) was uploaded by priming.
        for (t, &f) in textures.iter().zip(&formats) {
            let image = streamer.sparse_image(t).unwrap();
            assert_eq!(image.layout().tile_shape().width, if f == Format::Bc1Unorm { 512 } else { 256 });
            let last = image.layout().mip_levels() - 1;
            let got = image
                .read_region(0, last, TexelRegion { offset: [0; 3], extent: [1, 1, 1] }, 1 << 20)
                .unwrap();
            let src = bc_source("check", f, 1024);
            assert_eq!(got, src.read_tile(last, 0, 0).unwrap(), "{f:?}: mip {last} after priming");
        }
        let commands = CommandContext::new(&device, "test frames").unwrap();
        let wanted: Vec<TileKey> = textures.iter().map(|t| tile(&streamer, t.id(), 0, 1, 2)).collect();
        for _ in 0..8 {
            frame(&mut streamer, &commands, &wanted);
        }
        assert!(wanted.iter().all(|&k| streamer.manager().is_resident(k)), "{:?}", streamer.manager_stats());
        for (t, &f) in textures.iter().zip(&formats) {
            let image = streamer.sparse_image(t).unwrap();
            let (tw, th) = (image.layout().tile_shape().width, image.layout().tile_shape().height);
            let got = image
                .read_region(0, 0, TexelRegion { offset: [tw, 2 * th, 0], extent: [tw, th, 1] }, 1 << 20)
                .unwrap();
            assert_eq!(got.len(), 64 << 10);
            let src = bc_source("check", f, 1024);
            assert_eq!(got, src.read_tile(0, 1, 2).unwrap(), "{f:?}: the streamed tile's blocks");
        }
        assert!(streamer.manager().check_invariants().is_ok());
        assert!(streamer.take_load_failures().is_empty());
        // A BC source in other than its standard tile is refused by name.
        let odd = VtDesc::new(Format::Bc7Unorm, 512, 512, 128, 128);
        let err = streamer
            .add_texture("vt bc odd", Arc::new(FnSource::new("vt bc odd", odd, |_, _, _| Ok(Vec::new()))))
            .unwrap_err();
        assert!(
            matches!(&err, StreamError::UnsupportedSource { reason, .. } if reason.contains("256 × 256")),
            "{err}"
        );
        for t in textures {
            streamer.remove_texture(t).unwrap();
        }
        drop(streamer);
        drop(commands);
    });
}
