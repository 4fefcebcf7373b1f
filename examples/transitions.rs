//! Per-buffer state on shared pages, and transient memory aliasing over three frames.
//!
//! The seed's scenario on real Vulkan: a compute "culling" pass writes an index buffer placed on a
//! shared pool page, a graphics pass draws indexed from it into an offscreen image, while a
//! neighbouring buffer on the same page is written by another compute pass. Every barrier comes from
//! the state tracker's declared uses: the draw waits only for the index buffer (one buffer barrier),
//! not for the page. The image is read back and checked. Then a transient pool serves three frames of
//! different resources from the same heaps, aliasing those whose passes do not overlap.
//!
//! Run: `RESIDENCY_VALIDATION=sync cargo run --example transitions`

use residency::core::sync::{PagedBufferDesc, QueueFamily, TrackedBufferDesc};
use residency::vulkan::ash::vk;
use residency::vulkan::compute::{Binding, ComputeProgram};
use residency::vulkan::graphics::{GraphicsProgram, VertexAttribute};
use residency::vulkan::shaders;
use residency::vulkan::tracking::{Region, ResourceId, ResourceTracker, StateTracker, TrackerOptions, Use};
use residency::vulkan::transient::{TransientPool, TransientRequest};
use residency::vulkan::{
    BufferDesc, BufferInit, BufferPool, BufferPoolDesc, BufferPoolUsage, BufferUsage, Device, DeviceIndex,
    DeviceSet, DeviceSetDesc, Format, ImageDesc, ImageUsage, MemoryIntent, Uploader,
};
use std::sync::Arc;

const SIZE: u32 = 64;
const COLORS: [[f32; 4]; 4] =
    [[1.0, 0.0, 0.0, 1.0], [0.0, 1.0, 0.0, 1.0], [0.0, 0.0, 1.0, 1.0], [1.0, 1.0, 1.0, 1.0]];
const CULLED: u32 = 0b0010;

/// What the example found.
#[derive(Debug)]
pub struct Outcome {
    /// Quads whose pixels came out as expected (4 when all right).
    pub quads_correct: usize,
    /// Whether the neighbouring buffer holds what its compute pass wrote.
    pub neighbour_correct: bool,
    /// Buffer barriers before the draw with per-buffer tracking (1: the index buffer).
    pub draw_buffer_barriers: usize,
    /// Bytes those barriers cover, per-buffer tracking.
    pub per_buffer_bytes: u64,
    /// Bytes the barrier covers with per-page tracking (the whole page).
    pub per_page_bytes: u64,
    /// Per frame of the transient part: (peak bytes, sum of sizes).
    pub transient: Vec<(u64, u64)>,
    /// Heap bytes after the three frames.
    pub transient_heap_bytes: u64,
}

fn quad_vertices() -> Vec<u8> {
    let mut out = Vec::new();
    for (q, color) in COLORS.iter().enumerate() {
        let (x0, y0) = (-1.0 + (q % 2) as f32, -1.0 + (q / 2) as f32);
        for (dx, dy) in [(0.0, 0.0), (1.0, 0.0), (0.0, 1.0), (1.0, 1.0)] {
            for v in [x0 + dx, y0 + dy] {
                out.extend_from_slice(&f32::to_le_bytes(v));
            }
            for c in color {
                out.extend_from_slice(&c.to_le_bytes());
            }
        }
    }
    out
}

/// The same declarations on a known-flags page: bytes the draw's barrier covers (the whole page).
fn per_page_comparison(page_size: u64, indices: (u64, u64), neighbour: (u64, u64)) -> u64 {
    let mut tracker = StateTracker::new(TrackerOptions::default());
    let d = DeviceIndex::DEFAULT;
    let (page, idx, nb) = (ResourceId::new(1), ResourceId::new(2), ResourceId::new(3));
    let family = QueueFamily::new(0);
    let ok = tracker.register_page(d, page, TrackedBufferDesc::new("page", page_size)).is_ok()
        && tracker
            .register_paged_buffer(
                d,
                idx,
                PagedBufferDesc { name: "indices".into(), page, offset: indices.0, size: indices.1 },
            )
            .is_ok()
        && tracker
            .register_paged_buffer(
                d,
                nb,
                PagedBufferDesc { name: "neighbour".into(), page, offset: neighbour.0, size: neighbour.1 },
            )
            .is_ok();
    if !ok {
        return 0;
    }
    let mut first = tracker.batch(d, family);
    let _ = first
        .declare(idx, Region::Whole, Use::ComputeStorageWrite)
        .and_then(|b| b.declare(nb, Region::Whole, Use::ComputeStorageWrite));
    let _ = first.flush();
    let mut draw = tracker.batch(d, family);
    let _ = draw.declare(idx, Region::Whole, Use::IndexRead);
    draw.flush().barriers.buffers.iter().map(|b| b.size).sum()
}

/// Runs the example on `device`. With `forget_index_read`, the draw's use of the index buffer is
/// not declared (a bug the synchronization validation must catch).
pub fn run(device: &Arc<Device>, forget_index_read: bool) -> Result<Outcome, Box<dyn std::error::Error>> {
    let pool = BufferPool::new(
        Arc::clone(device),
        BufferPoolDesc::new("transitions page", BufferPoolUsage::Unknown).with_page_size(1 << 20),
    )?;
    let positions = pool.init_buffer(
        &BufferInit::new("quad vertices", 16 * 24).with_usage(BufferUsage::VERTEX | BufferUsage::COPY_DST),
    )?;
    let indices = pool.init_buffer(
        &BufferInit::new("culled indices", 24 * 4).with_usage(BufferUsage::INDEX | BufferUsage::STORAGE),
    )?;
    let neighbour = pool.init_buffer(
        &BufferInit::new("neighbour", 256 * 4).with_usage(BufferUsage::STORAGE | BufferUsage::COPY_SRC),
    )?;
    assert_eq!(indices.memory().0, neighbour.memory().0, "the index buffer and its neighbour share a page");
    let uploader = Uploader::new(device, "transitions", 1 << 20)?;
    uploader.write_buffer(&positions, 0, &quad_vertices())?;
    uploader.wait_idle()?;
    let target = device.create_image(&ImageDesc::new_2d(
        "offscreen",
        Format::R8G8B8A8Unorm,
        SIZE,
        SIZE,
        ImageUsage::COLOR_ATTACHMENT | ImageUsage::COPY_SRC,
    ))?;
    let view = target.create_view(0..1)?;
    let pixels = device.create_buffer(
        &BufferDesc::new("pixels", u64::from(SIZE * SIZE * 4), BufferUsage::COPY_DST)
            .with_intent(MemoryIntent::Readback),
    )?;
    let values = device.create_buffer(
        &BufferDesc::new("neighbour readback", 1024, BufferUsage::COPY_DST)
            .with_intent(MemoryIntent::Readback),
    )?;

    let cull = ComputeProgram::new(device, "cull_indices.comp", &shaders::CULL_INDICES, 1)?;
    let fill = ComputeProgram::new(device, "fill.comp", &shaders::FILL, 16)?;
    let draw = GraphicsProgram::new(
        device,
        "quads",
        &shaders::QUADS_VERT,
        &shaders::QUADS_FRAG,
        24,
        &[
            VertexAttribute { location: 0, format: vk::Format::R32G32_SFLOAT, offset: 0 },
            VertexAttribute { location: 1, format: vk::Format::R32G32B32A32_SFLOAT, offset: 8 },
        ],
        vk::Format::R8G8B8A8_UNORM,
        1,
    )?;
    let cull_set = cull.descriptor_set(&[Binding::Buffer(&indices)])?;
    let fill_set = fill.descriptor_set(&[Binding::Buffer(&neighbour)])?;

    let mut tracker = ResourceTracker::new(TrackerOptions::default());
    let ids = [
        tracker.track_buffer(&indices)?,
        tracker.track_buffer(&neighbour)?,
        tracker.track_buffer(&positions)?,
        tracker.track_buffer(&pixels)?,
        tracker.track_buffer(&values)?,
        tracker.track_image(&target, vk::ImageLayout::UNDEFINED)?,
    ];
    let [idx, nb, pos, px, vals, img] = ids;
    let family = device.universal_queue().family();
    let index = device.index();
    let mut draw_buffer_barriers = 0;
    let mut per_buffer_bytes = 0;
    let mut recorded: Result<(), Box<dyn std::error::Error>> = Ok(());
    device.submit_once("transitions frame", |rec| {
        let mut step = || -> Result<(), Box<dyn std::error::Error>> {
            // Two compute passes: culling writes the index buffer, another writes its neighbour.
            let mut batch = tracker.batch(index, family);
            batch.declare(idx, Region::Whole, Use::ComputeStorageWrite)?.declare(
                nb,
                Region::Whole,
                Use::ComputeStorageWrite,
            )?;
            let flush = batch.flush();
            tracker.record(rec, &flush.barriers)?;
            let push: Vec<u8> = [4u32, CULLED].iter().flat_map(|v| v.to_le_bytes()).collect();
            cull.dispatch(rec, &cull_set, &push, [1, 1, 1])?;
            let push: Vec<u8> = [256u32, 1000].iter().flat_map(|v| v.to_le_bytes()).collect();
            fill.dispatch(rec, &fill_set, &push, [4, 1, 1])?;

            // The draw reads the indices as an index buffer: only that buffer is waited for.
            let mut batch = tracker.batch(index, family);
            if !forget_index_read {
                batch.declare(idx, Region::Whole, Use::IndexRead)?;
            }
            batch.declare(pos, Region::Whole, Use::VertexRead)?;
            batch.declare_discard(img, Region::Whole, Use::ColorAttachmentWrite)?;
            let flush = batch.flush();
            draw_buffer_barriers = flush.barriers.buffers.len();
            per_buffer_bytes = flush.barriers.buffers.iter().map(|b| b.size).sum();
            tracker.record(rec, &flush.barriers)?;
            draw.render(rec, &view, [SIZE, SIZE], [0.0, 0.0, 0.0, 1.0], |pass| {
                let cmd = pass.raw();
                // SAFETY: `cmd` is inside rendering on this device; both buffers are live (borrowed
                // by the closure, so alive until the submission below completes).
                unsafe {
                    device.raw().cmd_bind_vertex_buffers(cmd, 0, &[positions.raw()], &[positions.offset()]);
                    device.raw().cmd_bind_index_buffer(
                        cmd,
                        indices.raw(),
                        indices.offset(),
                        vk::IndexType::UINT32,
                    );
                    device.raw().cmd_draw_indexed(cmd, 24, 1, 0, 0, 0);
                }
            })?;

            // Read back the image and the neighbour.
            let mut batch = tracker.batch(index, family);
            batch
                .declare(img, Region::Whole, Use::TransferSrc)?
                .declare(nb, Region::Whole, Use::TransferSrc)?
                .declare(px, Region::Whole, Use::TransferDst)?
                .declare(vals, Region::Whole, Use::TransferDst)?;
            let flush = batch.flush();
            tracker.record(rec, &flush.barriers)?;
            rec.copy_image_to_buffer(&target, vk::ImageLayout::TRANSFER_SRC_OPTIMAL, &pixels)?;
            rec.copy_buffer(&neighbour, 0, &values, 0, 1024)?;
            let mut batch = tracker.batch(index, family);
            batch.declare(px, Region::Whole, Use::HostRead)?.declare(vals, Region::Whole, Use::HostRead)?;
            let flush = batch.flush();
            tracker.record(rec, &flush.barriers)?;
            Ok(())
        };
        #[allow(
            clippy::redundant_closure_call,
            reason = "the closure lets `?` work inside the recording callback"
        )]
        {
            recorded = step();
        }
    })?;
    recorded?;

    let mut image = vec![0u8; (SIZE * SIZE * 4) as usize];
    pixels.read(0, &mut image)?;
    let quads_correct = (0..4)
        .filter(|&q| {
            let (cx, cy) = ((q % 2) as u32 * SIZE / 2 + SIZE / 4, (q / 2) as u32 * SIZE / 2 + SIZE / 4);
            let at = ((cy * SIZE + cx) * 4) as usize;
            let expected =
                if CULLED >> q & 1 == 1 { [0, 0, 0, 255] } else { COLORS[q].map(|c| (c * 255.0) as u8) };
            image[at..at + 4] == expected
        })
        .count();
    let mut raw = vec![0u8; 1024];
    values.read(0, &mut raw)?;
    let neighbour_correct = raw
        .chunks_exact(4)
        .enumerate()
        .all(|(i, c)| u32::from_le_bytes([c[0], c[1], c[2], c[3]]) == 1000 + i as u32);
    let per_page_bytes =
        per_page_comparison(pool.desc().page_size, (indices.memory().1, 96), (neighbour.memory().1, 1024));
    println!("draw: {draw_buffer_barriers} buffer barrier(s) covering {per_buffer_bytes} B with per-buffer tracking; per-page tracking covers {per_page_bytes} B");
    println!("quads drawn correctly: {quads_correct} of 4 (quad 1 culled by the compute pass); neighbour buffer correct: {neighbour_correct}");

    // Transient memory over three frames: different resources each frame, aliased where their
    // passes do not overlap, in heaps the pool keeps.
    let mut transient = TransientPool::new(Arc::clone(device), "frame transients")?;
    let write = (Use::ComputeStorageWrite, Use::ComputeStorageWrite);
    let buffer = |name: &str, kib: u64, passes: std::ops::RangeInclusive<u32>| TransientRequest::Buffer {
        name: name.into(),
        size: kib << 10,
        usage: BufferUsage::STORAGE,
        passes,
        uses: write,
    };
    let frames = [
        vec![
            buffer("BLAS build scratch", 256, 0..=0),
            buffer("BLAS instances", 64, 0..=1),
            buffer("light lists", 128, 1..=2),
            buffer("post scratch", 192, 2..=2),
        ],
        vec![
            buffer("terrain heights", 384, 0..=1),
            buffer("terrain normals", 128, 1..=1),
            buffer("decals", 96, 2..=2),
        ],
        vec![
            buffer("particles", 64, 0..=2),
            buffer("sort keys", 256, 0..=0),
            buffer("histogram", 32, 1..=1),
            buffer("bloom", 320, 2..=2),
        ],
    ];
    let mut figures = Vec::new();
    for requests in &frames {
        let frame = transient.begin_frame(requests)?;
        let mut tracker = ResourceTracker::new(TrackerOptions::default());
        let mut ids = Vec::new();
        for i in 0..requests.len() {
            ids.push(tracker.track_buffer(frame.buffer(i).ok_or("a buffer")?)?);
        }
        let sets: Vec<_> = (0..requests.len())
            .map(|i| frame.buffer(i).map(|b| fill.descriptor_set(&[Binding::Buffer(b)])))
            .collect::<Option<Result<Vec<_>, _>>>()
            .ok_or("a buffer")??;
        let mut recorded: Result<(), Box<dyn std::error::Error>> = Ok(());
        device.submit_once("transient frame", |rec| {
            let mut pass = |p: u32| -> Result<(), Box<dyn std::error::Error>> {
                transient.record_pass_start(rec, &frame, p)?;
                let live: Vec<usize> = requests
                    .iter()
                    .enumerate()
                    .filter(
                        |(_, r)| matches!(r, TransientRequest::Buffer { passes, .. } if passes.contains(&p)),
                    )
                    .map(|(i, _)| i)
                    .collect();
                let mut batch = tracker.batch(index, family);
                for &i in &live {
                    batch.declare(ids[i], Region::Whole, Use::ComputeStorageWrite)?;
                }
                let flush = batch.flush();
                tracker.record(rec, &flush.barriers)?;
                for &i in &live {
                    let size = frame.buffer(i).map_or(0, |b| b.size());
                    let push: Vec<u8> =
                        [(size / 4).min(4096) as u32, p].iter().flat_map(|v| v.to_le_bytes()).collect();
                    fill.dispatch(rec, &sets[i], &push, [64, 1, 1])?;
                }
                Ok(())
            };
            recorded = (0..3).try_for_each(&mut pass);
        })?;
        recorded?;
        let report = frame.report();
        println!(
            "transient frame: {} resources, sum {} KiB, peak {} KiB, lower bound {} KiB",
            report.resources,
            report.sum_of_sizes >> 10,
            report.peak_bytes >> 10,
            report.lower_bound >> 10
        );
        figures.push((report.peak_bytes, report.sum_of_sizes));
        transient.end_frame(frame);
    }
    let transient_heap_bytes = transient.heap_bytes();
    drop(transient);

    drop(draw);
    drop(cull);
    drop(fill);
    drop(view);
    drop(target);
    drop(pixels);
    drop(values);
    uploader.destroy()?;
    for b in [positions, indices, neighbour] {
        pool.free_buffer(b).map_err(|refused| refused.to_string())?;
    }
    Ok(Outcome {
        quads_correct,
        neighbour_correct,
        draw_buffer_barriers,
        per_buffer_bytes,
        per_page_bytes,
        transient: figures,
        transient_heap_bytes,
    })
}

#[allow(dead_code, reason = "the test that runs this example calls `run` and not `main`")]
fn main() -> Result<(), Box<dyn std::error::Error>> {
    tracing_subscriber::fmt().with_env_filter("warn").init();
    let set = DeviceSet::new(&DeviceSetDesc::default())?;
    let outcome = run(&set.devices()[0], false)?;
    let problems = set.validation_log().problem_count();
    drop(set);
    let leaks = residency::vulkan::LEAKS_AT_TEARDOWN.load(std::sync::atomic::Ordering::SeqCst);
    println!(
        "transient heaps after three frames: {} KiB; validation problems: {problems}; leaks: {leaks}",
        outcome.transient_heap_bytes >> 10
    );
    if outcome.quads_correct != 4 || !outcome.neighbour_correct || problems != 0 || leaks != 0 {
        return Err("the example failed its checks".into());
    }
    Ok(())
}
