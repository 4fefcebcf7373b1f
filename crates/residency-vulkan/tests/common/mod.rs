//! Helpers shared by the partially-resident-texture tests: the texel pattern they write, texel
//! centres, and sampling through the fallback GLSL of either path.
#![allow(dead_code, reason = "each test binary uses a part")]

use residency_core::memory::MemoryIntent;
use residency_core::usage::BufferUsage;
use residency_vulkan::ash::vk;
use residency_vulkan::compute::{Binding, ComputeProgram, ViewRef};
use residency_vulkan::shaders::{self, Shader};
use residency_vulkan::{BufferDesc, Device, Filter};

pub mod paths;

/// `sparse_fallback.comp`: the hardware path (sparse image + min-LOD map).
pub static HARDWARE_FALLBACK: &Shader = &shaders::SPARSE_FALLBACK;
/// `sparse_fallback_software.comp`: the software path (atlas + indirection).
pub static SOFTWARE_FALLBACK: &Shader = &shaders::SPARSE_FALLBACK_SOFTWARE;
/// What a sample of nothing resident returns.
pub const DEFAULT: [f32; 4] = [1.0, 0.0, 1.0, 1.0];

/// The colour of texel (x, y) of `mip` in every test texture.
pub fn texel(x: u32, y: u32, mip: u32) -> [u8; 4] {
    [(x % 251) as u8, (y % 241) as u8, (mip * 17) as u8, 0xff]
}

/// The texels of `extent` at `offset` of `mip`, rows packed.
pub fn region_texels(mip: u32, offset: [u32; 2], extent: [u32; 2]) -> Vec<u8> {
    let mut out = Vec::new();
    for y in offset[1]..offset[1] + extent[1] {
        for x in offset[0]..offset[0] + extent[0] {
            out.extend_from_slice(&texel(x, y, mip));
        }
    }
    out
}

/// uv of the centre of texel (x, y) of `mip` of a `size`² texture.
pub fn centre(size: u32, x: u32, y: u32, mip: u32) -> [f32; 2] {
    let side = (size >> mip) as f32;
    [(x as f32 + 0.5) / side, (y as f32 + 0.5) / side]
}

/// A texel as floats (0–255).
pub fn as_f32(t: [u8; 4]) -> [f32; 4] {
    t.map(f32::from)
}

/// Asserts that `got` is `want` within rounding.
pub fn close(got: [f32; 4], want: [f32; 4], what: &str) {
    assert!(got.iter().zip(want).all(|(g, w)| (g - w).abs() <= 0.6), "{what}: {got:?} vs {want:?}");
}

/// Samples `probes` (uv, lod) with `residencySampleFallback` of `spirv` over `views` (texture or
/// atlas, min-LOD map or indirection): texel × 255, resident, LOD used.
pub fn sample_fallback(
    device: &Device,
    shader: &Shader,
    views: (ViewRef<'_>, ViewRef<'_>),
    probes: &[([f32; 2], f32)],
) -> Vec<([f32; 4], bool, f32)> {
    let program = ComputeProgram::new(device, "sparse_fallback", shader, 1).unwrap();
    let (linear, nearest) =
        (device.create_sampler(Filter::Trilinear).unwrap(), device.create_sampler(Filter::Nearest).unwrap());
    let n = probes.len() as u64;
    let mut input = device
        .create_buffer(
            &BufferDesc::new("probes", n * 16, BufferUsage::STORAGE).with_intent(MemoryIntent::Upload),
        )
        .unwrap();
    let output = device
        .create_buffer(
            &BufferDesc::new("results", n * 32, BufferUsage::STORAGE).with_intent(MemoryIntent::Readback),
        )
        .unwrap();
    input.write(0, &probe_bytes(probes)).unwrap();
    let general = vk::ImageLayout::GENERAL;
    let set = program
        .descriptor_set(&[
            Binding::sampled(views.0, &linear, general),
            Binding::sampled(views.1, &nearest, general),
            Binding::Buffer(&input),
            Binding::Buffer(&output),
        ])
        .unwrap();
    let mut push: Vec<u8> = DEFAULT.iter().flat_map(|f| f.to_le_bytes()).collect();
    push.extend_from_slice(&(n as u32).to_le_bytes());
    push.resize(32, 0);
    device
        .submit_compute("sample", |rec| {
            program
                .dispatch(rec, &set, &push, [(n as u32).div_ceil(64), 1, 1])
                .expect("a few workgroups within the declared push constants")
        })
        .unwrap();
    let mut out = vec![0u8; (n * 32) as usize];
    output.read(0, &mut out).unwrap();
    drop(input);
    drop(output);
    drop(linear);
    drop(nearest);
    drop(set);
    drop(program);
    fallback_results(&out)
}

/// The fallback shaders' probe buffer: each `(uv, lod)` as `vec4(u, v, lod, 0)`.
pub fn probe_bytes(probes: &[([f32; 2], f32)]) -> Vec<u8> {
    probes.iter().flat_map(|(uv, lod)| [uv[0], uv[1], *lod, 0.0]).flat_map(f32::to_le_bytes).collect()
}

/// The fallback shaders' results (32 bytes a probe): texel × 255, resident, LOD used.
pub fn fallback_results(out: &[u8]) -> Vec<([f32; 4], bool, f32)> {
    out.chunks_exact(32)
        .map(|r| {
            let f = |i: usize| f32::from_le_bytes([r[i], r[i + 1], r[i + 2], r[i + 3]]);
            ([f(0), f(4), f(8), f(12)].map(|v| v * 255.0), f(16) == 1.0, f(20))
        })
        .collect()
}

/// One streamer frame as a CPU renderer makes it: `begin_frame`, misses for `wanted` written as
/// the frame's feedback (keys of textures the frame does not have are skipped), a real (empty)
/// submission recorded through `FrameBindings::record`, `end_frame`. Returns the frame.
pub fn cpu_feedback_frame(
    streamer: &mut residency_vulkan::streaming::Streamer,
    commands: &residency_vulkan::CommandContext,
    wanted: &[residency_core::streaming::TileKey],
) -> u64 {
    try_cpu_feedback_frame(streamer, commands, wanted).unwrap()
}

/// The feedback a shader would write this frame had it missed the mip tiles `wanted`: one miss
/// record each (`None` when the frame has no feedback layout).
pub fn miss_records(
    bindings: &residency_vulkan::streaming::FrameBindings<'_>,
    wanted: &[residency_core::streaming::TileKey],
) -> Option<residency_core::streaming::FeedbackBuffer> {
    records_of(bindings, wanted, residency_core::streaming::RequestKind::Miss)
}

/// [`miss_records`] with records of `kind` (a miss, a min-LOD warning, …).
pub fn records_of(
    bindings: &residency_vulkan::streaming::FrameBindings<'_>,
    wanted: &[residency_core::streaming::TileKey],
    kind: residency_core::streaming::RequestKind,
) -> Option<residency_core::streaming::FeedbackBuffer> {
    use residency_core::streaming::{FeedbackBuffer, StreamUnit};
    bindings.layout.map(|layout| {
        let mut records = FeedbackBuffer::new(layout, bindings.frame);
        for key in wanted {
            let (Some(slot), StreamUnit::Tile(t)) = (layout.slot_of(key.image), key.unit) else { continue };
            records.record(layout, slot, t, kind);
        }
        records
    })
}

/// What the device holds: memory objects, bytes per heap, live objects by kind and name (after
/// waiting for residency's work, unless the device is lost, and retiring what it released).
#[derive(Debug, PartialEq, Eq)]
pub struct Accounting {
    pub memory_objects: u64,
    pub heap_bytes: Vec<u64>,
    pub live: Vec<(String, String)>,
}

/// The device's [`Accounting`] now.
pub fn accounting(device: &Device) -> Accounting {
    settle(device);
    held(device)
}

/// [`accounting`] after freeing the empty heaps the general allocator keeps for reuse (one per
/// memory type, by design): for a leak check across code that touches memory types the baseline
/// did not (a read-back of the host-cached type on a device that has one, as the H200), where a
/// kept empty heap is no leak. A heap anything still holds stays and counts.
pub fn settled_accounting(device: &Device) -> Accounting {
    settle(device);
    device.release_empty_heaps();
    held(device)
}

/// Waits for residency's work (unless the device is lost) and retires what it released: objects
/// released while that work was in flight are destroyed once it completes.
fn settle(device: &Device) {
    if !device.is_lost() {
        device.wait_idle().unwrap();
    }
    device.maintain();
}

/// The ledger's memory objects, bytes per heap and live objects, as they are.
fn held(device: &Device) -> Accounting {
    let heaps = device.memory_properties().heaps.len() as u32;
    let mut live: Vec<(String, String)> =
        device.ledger().live_objects().into_iter().map(|o| (o.kind.to_owned(), o.name.to_string())).collect();
    live.sort();
    Accounting {
        memory_objects: device.ledger().memory_objects(),
        heap_bytes: (0..heaps).map(|h| device.ledger().heap_bytes(h)).collect(),
        live,
    }
}

/// [`cpu_feedback_frame`] with `begin_frame`'s error returned (the later steps must succeed).
pub fn try_cpu_feedback_frame(
    streamer: &mut residency_vulkan::streaming::Streamer,
    commands: &residency_vulkan::CommandContext,
    wanted: &[residency_core::streaming::TileKey],
) -> Result<u64, residency_vulkan::streaming::StreamError> {
    try_cpu_feedback_frame_of(streamer, commands, wanted, residency_core::streaming::RequestKind::Miss)
}

/// [`try_cpu_feedback_frame`] with records of `kind` ([`records_of`]).
pub fn try_cpu_feedback_frame_of(
    streamer: &mut residency_vulkan::streaming::Streamer,
    commands: &residency_vulkan::CommandContext,
    wanted: &[residency_core::streaming::TileKey],
    kind: residency_core::streaming::RequestKind,
) -> Result<u64, residency_vulkan::streaming::StreamError> {
    let bindings = streamer.begin_frame()?;
    let frame = bindings.frame;
    let records = records_of(&bindings, wanted, kind);
    drop(bindings);
    if let Some(records) = records {
        streamer.write_cpu_feedback(&records).unwrap();
    }
    let bindings = streamer.frame_bindings().unwrap();
    let submission = commands.submit(&[], |rec| bindings.record(rec, |_| ()).unwrap()).unwrap();
    drop(bindings);
    streamer.end_frame(submission.gpu_use()).unwrap();
    Ok(frame)
}

/// A renderer's own command pool on the universal queue's family (its buffers resettable) and one
/// primary command buffer of it, for `Recording::from_raw`. Destroy the pool with
/// `destroy_command_pool` once nothing recorded in it is pending.
pub fn own_command_buffer(device: &Device) -> (vk::CommandPool, vk::CommandBuffer) {
    let info = vk::CommandPoolCreateInfo::default()
        .flags(vk::CommandPoolCreateFlags::RESET_COMMAND_BUFFER)
        .queue_family_index(device.universal_queue().family());
    // SAFETY: a valid device and its universal queue family.
    let pool = unsafe { device.raw().create_command_pool(&info, None) }.unwrap();
    let alloc = vk::CommandBufferAllocateInfo::default()
        .command_pool(pool)
        .level(vk::CommandBufferLevel::PRIMARY)
        .command_buffer_count(1);
    // SAFETY: the pool belongs to this device and only the caller uses it.
    let cmd = unsafe { device.raw().allocate_command_buffers(&alloc) }.unwrap()[0];
    (pool, cmd)
}

/// `len` pseudo-random bytes (xorshift64 from `seed`; 0 counts as 1): data that shows a byte out
/// of place, different for every seed.
pub fn pattern(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed.max(1);
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}
