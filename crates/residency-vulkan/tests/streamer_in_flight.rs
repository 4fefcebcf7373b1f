//! A direct GPU check of the streamer's rule "no tile a frame in flight samples is unbound, nor its
//! memory or atlas slot given new texels, before that frame ends" (issue #21), on both paths.
//!
//! A frame is held on the GPU: its submission waits for a gate (a timeline the test signals from
//! the host once the checks below are done), and its command buffer samples 16 mip-0 tiles of a
//! streamed texture at texel centres. Held by state, never by time: the frame is still pending at
//! the evicting tick however fast or slow the GPU and the threads run. It is the renderer's own
//! command buffer (`Recording::from_raw`), submitted by the renderer with `submit_checked` and
//! signalling the renderer's own timeline: residency orders every sparse bind after its own
//! earlier submissions anyway, so a frame residency submitted would be protected twice; a frame
//! the renderer submits itself is protected only by the waits the streamer gives its unbinds (the
//! frames `end_frame` declared). While the frame is held, a budget cut makes the next tick evict
//! those tiles: on the hardware path the unbinds go to the sparse queue (had they not waited for
//! the held frame, they could take effect before it samples, and its samples would read unbound
//! memory); on the software path the freed atlas slots are given to other tiles by later frames.
//! The held frame's samples must still be the evicted tiles' texels, at mip 0, resident; the
//! evictions must have happened while it was held (checked).

use residency_core::format::Format;
use residency_core::memory::MemoryIntent;
use residency_core::streaming::{FnSource, TileKey, TileSource};
use residency_core::tiles::{ImageId, ResidencyPath, TileCoord};
use residency_core::usage::BufferUsage;
use residency_core::vt_file::VtDesc;
use residency_vulkan::ash::vk;
use residency_vulkan::compute::{Binding, ComputeProgram, ViewRef};
use residency_vulkan::recording::MemoryDependency;
use residency_vulkan::shaders;
use residency_vulkan::streaming::{Streamer, StreamerDesc, TextureViews};
use residency_vulkan::testing::with_gpu;
use residency_vulkan::{BufferDesc, CommandContext, Filter};
use std::sync::Arc;

mod common;

const SIDE: u32 = 1024;
const TILE: u32 = 128;

fn texel(mip: u32, x: u32, y: u32) -> [u8; 4] {
    [(x % 251) as u8, (y % 241) as u8, (mip * 29 + 3) as u8, 0xe3]
}

fn source(name: &str) -> Arc<dyn TileSource> {
    let desc = VtDesc::new(Format::R8G8B8A8Unorm, SIDE, SIDE, TILE, TILE);
    Arc::new(FnSource::new(name, desc, move |mip, x, y| {
        let (w, h) = desc.tile_extent(mip, x, y).expect("in the grid");
        Ok((0..h)
            .flat_map(|ty| (0..w).flat_map(move |tx| texel(mip, x * TILE + tx, y * TILE + ty)))
            .collect())
    }))
}

fn tile(streamer: &Streamer, id: ImageId, x: u32, y: u32) -> TileKey {
    let layout = streamer.manager().residency(id).unwrap().layout();
    TileKey::tile(id, layout.tile_index(TileCoord { layer: 0, mip: 0, x, y, z: 0 }).unwrap())
}

/// Mip-0 tiles of rows `rows` (8 a row).
fn rows(streamer: &Streamer, id: ImageId, rows: std::ops::Range<u32>) -> Vec<TileKey> {
    rows.flat_map(|y| (0..8).map(move |x| (x, y))).map(|(x, y)| tile(streamer, id, x, y)).collect()
}

/// One ordinary frame (misses for `wanted` written by the CPU), waited for, its loads finished.
fn frame(streamer: &mut Streamer, commands: &CommandContext, wanted: &[TileKey]) {
    common::cpu_feedback_frame(streamer, commands, wanted);
    streamer.device().wait_idle().unwrap();
    streamer.wait_for_loads();
}

/// What one held frame saw, and whether the evictions happened while it was held.
struct Held {
    evicted_while_held: usize,
    held_at_tick: bool,
    samples: Vec<([f32; 4], bool, f32)>,
    probes: Vec<(u32, u32)>,
}

fn hold_a_frame_across_evictions(path: ResidencyPath) -> Held {
    let mut held = None;
    with_gpu(|set| {
        let device = Arc::clone(&set.devices()[0]);
        let desc = StreamerDesc::default()
            .with_name("in-flight streamer")
            .with_path(path)
            .with_frames_in_flight(3)
            .with_budget_tiles(32)
            .with_workers(2);
        let mut streamer = Streamer::new(&device, desc).unwrap();
        let t = streamer.add_texture("vt held", source("vt held")).unwrap();
        let commands = CommandContext::new(&device, "in-flight frames").unwrap();
        let (a, b) = (rows(&streamer, t.id(), 0..2), rows(&streamer, t.id(), 6..8));

        // A (16 tiles and their parents) resident, within the budget of 32.
        for _ in 0..8 {
            frame(&mut streamer, &commands, &a);
        }
        assert!(a.iter().all(|&k| streamer.manager().is_resident(k)), "{:?}", streamer.manager_stats());
        // Frames that report nothing: A becomes evictable (not wanted for the eviction delay) but
        // stays resident while nothing needs its room. The held frame samples A without reporting
        // it, as a frame whose feedback covers a part of its pixels does.
        for _ in 0..10 {
            frame(&mut streamer, &commands, &[]);
        }
        let program = ComputeProgram::new(&device, "sparse fallback", common_shader(path), 2).unwrap();
        let (trilinear, nearest) = (
            device.create_sampler(Filter::Trilinear).unwrap(),
            device.create_sampler(Filter::Nearest).unwrap(),
        );
        // A probe at the centre of texel (17, 9) of each tile of A.
        let probes: Vec<(u32, u32)> =
            (0..2).flat_map(|y| (0..8).map(move |x| (x * TILE + 17, y * TILE + 9))).collect();
        let n = probes.len() as u64;
        let mut input = device
            .create_buffer(
                &BufferDesc::new("probes", n * 16, BufferUsage::STORAGE).with_intent(MemoryIntent::Upload),
            )
            .unwrap();
        let at_lod_0: Vec<([f32; 2], f32)> =
            probes.iter().map(|&(x, y)| (common::centre(SIDE, x, y, 0), 0.0)).collect();
        input.write(0, &common::probe_bytes(&at_lod_0)).unwrap();
        let output = device
            .create_buffer(
                &BufferDesc::new("samples", n * 32, BufferUsage::STORAGE).with_intent(MemoryIntent::Readback),
            )
            .unwrap();

        // The held frame: A is resident when it records (nothing needed its room).
        let evicted_before = streamer.manager_stats().tiles_evicted;
        let bindings = streamer.begin_frame().unwrap();
        let (texture, map): (ViewRef<'_>, ViewRef<'_>) = match bindings.textures()[0].views {
            TextureViews::Hardware { image, min_lod } => (image.into(), min_lod.into()),
            TextureViews::Software { atlas, indirection } => (atlas.into(), indirection.into()),
        };
        let general = vk::ImageLayout::GENERAL;
        let sample_set = program
            .descriptor_set(&[
                Binding::sampled(texture, &trilinear, general),
                Binding::sampled(map, &nearest, general),
                Binding::Buffer(&input),
                Binding::Buffer(&output),
            ])
            .unwrap();
        let mut push: Vec<u8> = common::DEFAULT.iter().flat_map(|f| f.to_le_bytes()).collect();
        push.extend_from_slice(&(n as u32).to_le_bytes());
        push.resize(32, 0);
        use vk::{AccessFlags2 as Ac, PipelineStageFlags2 as St};
        // The renderer's own command buffer, submitted by the renderer and signalling its own
        // timeline: residency orders its binds after its own submissions anyway, so a frame the
        // renderer submits itself is the case only the streamer's waits protect.
        let own = OwnFrame::new(&device);
        let held_until = own.timeline.at(1);
        // The gate the held frame's submission waits for: the test signals it from the host once
        // the evicting tick has run and been checked (nothing waits for the held frame before).
        // Declared after everything whose drop waits for the GPU, so that a failing assertion
        // opens it (and waits for the frame) first instead of hanging there.
        let mut gate = Gate::new(&device, held_until);
        let begin = vk::CommandBufferBeginInfo::default().flags(vk::CommandBufferUsageFlags::ONE_TIME_SUBMIT);
        // SAFETY: the command buffer is new (never submitted) and only this test uses it.
        unsafe { device.raw().begin_command_buffer(own.cmd, &begin) }.unwrap();
        // SAFETY: `own.cmd` is a primary command buffer of the universal family, recording and
        // outside a render pass until `submit_checked` ends it; nothing else records into it; the
        // recording declares the use that ends with its submission (`held_until`) and is submitted
        // through `submit_checked` with the waits it hands over.
        let mut rec = unsafe { residency_vulkan::recording::Recording::from_raw(&device, own.cmd) };
        bindings
            .record(&mut rec, |rec| {
                program.dispatch(rec, &sample_set, &push, [(n as u32).div_ceil(64), 1, 1]).unwrap();
            })
            .unwrap();
        rec.memory_barrier(MemoryDependency {
            src_stages: St::COMPUTE_SHADER,
            src_access: Ac::SHADER_WRITE,
            dst_stages: St::HOST,
            dst_access: Ac::HOST_READ,
        })
        .unwrap();
        rec.used_until(held_until).unwrap();
        let (cmd, timeline, gate_raw) = (own.cmd, own.timeline.raw(), gate.timeline.raw());
        rec.submit_checked(|queue, waits| {
            let buffers = [vk::CommandBufferSubmitInfo::default().command_buffer(cmd)];
            // The waits residency hands over, and the gate.
            let mut waits = waits.to_vec();
            waits.push(
                vk::SemaphoreSubmitInfo::default().semaphore(gate_raw).value(1).stage_mask(St::ALL_COMMANDS),
            );
            let signals = [vk::SemaphoreSubmitInfo::default()
                .semaphore(timeline)
                .value(1)
                .stage_mask(St::ALL_COMMANDS)];
            let submit = vk::SubmitInfo2::default()
                .command_buffer_infos(&buffers)
                .wait_semaphore_infos(&waits)
                .signal_semaphore_infos(&signals);
            // SAFETY: recording began above; `queue` is the locked universal queue; the timeline
            // is at 0 and this is its only signal; the gate is a timeline of this device, signalled
            // to 1 from the host below.
            unsafe {
                device.raw().end_command_buffer(cmd)?;
                device.raw().queue_submit2(queue, &[submit], vk::Fence::null())
            }
        })
        .unwrap();
        // SAFETY: the submission above signals the timeline to 1 and succeeded.
        unsafe { own.timeline.signal_submitted(1) };
        drop(bindings);
        streamer.end_frame(held_until).unwrap();
        assert_eq!(
            streamer.manager_stats().tiles_evicted,
            evicted_before,
            "the held frame's tick only starts loads"
        );
        assert!(
            a.iter().all(|&k| streamer.manager().is_resident(k)),
            "A resident when the held frame recorded"
        );

        // A budget cut: the next tick evicts what is evictable (A, not wanted for the eviction delay)
        // down to it, while the held frame waits at its gate; that frame asks for B, whose loads
        // reuse A's room.
        let unbinds_before = streamer.stats().unbinds_after_frames;
        assert_eq!(streamer.set_budget_tiles(16), 16);
        common::cpu_feedback_frame(&mut streamer, &commands, &b);
        // Still pending after the tick's binds were submitted (the gate is closed): held at the tick.
        let held_at_tick = own.value(&device) < 1;
        let evicted_while_held = a.iter().filter(|&&k| !streamer.manager().is_resident(k)).count();
        assert!(
            streamer.manager_stats().tiles_evicted > evicted_before,
            "the tick evicted: {} committed, {:?}, {:?}",
            streamer.manager().committed_tiles(),
            streamer.manager_stats(),
            streamer.stats()
        );
        if path == ResidencyPath::Hardware {
            assert!(streamer.stats().unbinds_after_frames > unbinds_before, "{:?}", streamer.stats());
        }

        // The gate opens: the held frame samples, behind whatever the tick submitted.
        gate.open();
        device.wait_until(&held_until).unwrap();
        let mut out = vec![0u8; (n * 32) as usize];
        output.read(0, &mut out).unwrap();
        let samples = common::fallback_results(&out);
        // The frames after it go on: B resident under the budget raised again.
        streamer.set_budget_tiles(48);
        for _ in 0..8 {
            frame(&mut streamer, &commands, &b);
        }
        assert!(b.iter().all(|&k| streamer.manager().is_resident(k)), "{:?}", streamer.manager_stats());
        assert!(streamer.manager().check_invariants().is_ok());
        device.wait_idle().unwrap();
        own.destroy(&device);
        drop((sample_set, input, output, trilinear, nearest, program, gate));
        streamer.remove_texture(t).unwrap();
        drop(streamer);
        drop(commands);
        held = Some(Held { evicted_while_held, held_at_tick, samples, probes });
    });
    held.expect("ran")
}

/// The timeline the held frame's submission waits for at 1, signalled from the host by `open`,
/// or when dropped (a failed assertion), which then waits for the held frame too.
struct Gate {
    device: Arc<residency_vulkan::Device>,
    timeline: residency_vulkan::Timeline,
    held_until: residency_vulkan::GpuUse,
    open: bool,
}

impl Gate {
    fn new(device: &Arc<residency_vulkan::Device>, held_until: residency_vulkan::GpuUse) -> Gate {
        let timeline = device.create_timeline("held frame gate").unwrap();
        Gate { device: Arc::clone(device), timeline, held_until, open: false }
    }

    fn open(&mut self) {
        if !std::mem::replace(&mut self.open, true) {
            let signal = vk::SemaphoreSignalInfo::default().semaphore(self.timeline.raw()).value(1);
            // SAFETY: a timeline semaphore of this device at 0; this is its only signal.
            unsafe { self.device.raw().signal_semaphore(&signal) }.unwrap();
        }
    }
}

impl Drop for Gate {
    fn drop(&mut self) {
        self.open();
        // The held frame waits for the semaphore: it must be done before the semaphore goes.
        let _ = self.device.wait_until(&self.held_until);
    }
}

/// A renderer's own command pool, command buffer and timeline.
struct OwnFrame {
    pool: vk::CommandPool,
    cmd: vk::CommandBuffer,
    timeline: residency_vulkan::Timeline,
}

impl OwnFrame {
    fn new(device: &residency_vulkan::Device) -> OwnFrame {
        let (pool, cmd) = common::own_command_buffer(device);
        OwnFrame { pool, cmd, timeline: device.create_timeline("held frame timeline").unwrap() }
    }

    /// The timeline's value now.
    fn value(&self, device: &residency_vulkan::Device) -> u64 {
        // SAFETY: a timeline semaphore of this device.
        unsafe { device.raw().get_semaphore_counter_value(self.timeline.raw()) }.unwrap()
    }

    fn destroy(self, device: &residency_vulkan::Device) {
        // SAFETY: the device is idle (waited for by the caller): the command buffer is not pending.
        unsafe { device.raw().destroy_command_pool(self.pool, None) };
    }
}

fn common_shader(path: ResidencyPath) -> &'static shaders::Shader {
    match path {
        ResidencyPath::Software => common::SOFTWARE_FALLBACK,
        _ => common::HARDWARE_FALLBACK,
    }
}

fn check(path: ResidencyPath) {
    let held = hold_a_frame_across_evictions(path);
    for (&(x, y), (got, resident, lod)) in held.probes.iter().zip(&held.samples) {
        let want = texel(0, x, y).map(f32::from);
        assert!(
            *resident && *lod == 0.0 && got.iter().zip(want).all(|(g, w)| (g - w).abs() <= 0.6),
            "{path:?}: the held frame sampled texel ({x}, {y}) of an evicted tile as {got:?} \
             (resident {resident}, LOD {lod}) instead of {want:?}"
        );
    }
    assert!(held.held_at_tick, "{path:?}: the gated frame ended before its gate opened");
    assert!(held.evicted_while_held > 0, "{path:?}: the tick evicted none of the held frame's tiles");
    eprintln!("{path:?}: {} of 16 sampled tiles evicted while the frame was held", held.evicted_while_held);
}

#[test]
fn a_tile_a_frame_in_flight_samples_keeps_its_texels_until_the_frame_ends_hardware() {
    check(ResidencyPath::Hardware);
}

#[test]
fn a_tile_a_frame_in_flight_samples_keeps_its_texels_until_the_frame_ends_software() {
    check(ResidencyPath::Software);
}
