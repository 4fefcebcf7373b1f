//! One mesh and one partially resident texture on every GPU, a compute dispatch on each.
//!
//! A mesh-sized buffer and a sparse 4096 × 4096 texture are created under a device mask covering
//! every device (on a machine with one GPU, or lavapipe, the device is opened twice), their data is
//! uploaded to all devices from one source in parallel, and a compute shader on each device reads
//! both; the results are checked on the CPU per device. Broadcast uploads to all devices are timed
//! against an upload to one device in the same run. The dispatch is a 2D grid of workgroups kept
//! within every device's `maxComputeWorkGroupCount` (64 MiB is 65 536 workgroups of 64, one more
//! than lavapipe's 65 535 on x).
//!
//! Run: `cargo run --release --example multi_device -- [MIB]` (default 64 MiB of vertices).

use residency::vulkan::ash::vk;
use residency::vulkan::compute::Binding;
use residency::vulkan::multi::work::{
    BufferView, DispatchItem, MultiBinding, MultiComputeProgram, MultiSubmitter, PerDeviceImage, WorkItem,
};
use residency::vulkan::multi::{
    MultiBufferPool, MultiDevice, MultiSparseImage, MultiTilePool, MultiUploader,
};
use residency::vulkan::shaders;
use residency::vulkan::sparse::{SparseImageDesc, TexelRegion, TilePoolDesc};
use residency::vulkan::{
    BufferInit, BufferPoolDesc, BufferPoolUsage, BufferUsage, DeviceIndex, DeviceMask, DeviceSet,
    DeviceSetDesc, Filter, Format,
};
use std::time::Instant;

/// MiB of vertices when no size is given (the README's).
pub const DEFAULT_MIB: u64 = 64;

/// What the example measured.
#[derive(Debug)]
pub struct Outcome {
    /// Devices the resources lived on.
    pub devices: usize,
    /// Results checked per device, all correct.
    pub checked: Vec<(DeviceIndex, usize)>,
    /// Median seconds to upload the mesh to one device.
    pub one_device_s: f64,
    /// Median seconds to upload the mesh to every device (broadcast).
    pub all_devices_s: f64,
    /// The workgroup grid of the dispatch.
    pub groups: [u32; 3],
}

fn texel(x: u32, y: u32) -> [u8; 4] {
    [(x % 251) as u8, (y % 241) as u8, ((x + y) % 239) as u8, 255]
}

/// A grid of `groups` workgroups within `limits` (`maxComputeWorkGroupCount`): rows of at most
/// `limits[0]` workgroups, as few rows as fit, evenly filled. The shader turns (x, y) back into
/// one index and ignores the tail past `count`.
fn grid(groups: u32, limits: [u32; 3]) -> Result<[u32; 3], String> {
    let rows = groups.div_ceil(limits[0]).max(1);
    if rows > limits[1] {
        return Err(format!("{groups} workgroups do not fit in a {} × {} grid", limits[0], limits[1]));
    }
    Ok([groups.div_ceil(rows), rows, 1])
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Runs the example on every device of `set` with `mib` MiB of vertices.
pub fn run(set: &DeviceSet, mib: u64) -> Result<Outcome, Box<dyn std::error::Error>> {
    let mask = set.mask();
    let devices: Vec<DeviceIndex> = mask.iter().collect();
    let first = devices[0];
    let count = (mib << 20) / 16;
    let pool = MultiBufferPool::new(
        set,
        mask,
        &BufferPoolDesc::new("mesh pool", BufferPoolUsage::Unknown)
            .with_page_size((mib << 20) * 2 + (4 << 20)),
    )?;
    let uploader = MultiUploader::new(set, mask, 64 << 20)?;
    let usage = BufferUsage::VERTEX | BufferUsage::STORAGE | BufferUsage::COPY_DST;
    let mesh = pool.init_buffer(&BufferInit::new("mesh", count * 16).with_usage(usage), mask)?;
    let single =
        pool.init_buffer(&BufferInit::new("mesh on one device", count * 16).with_usage(usage), first.mask())?;
    let results = pool.init_buffer(
        &BufferInit::new("results", count * 16).with_usage(BufferUsage::STORAGE | BufferUsage::COPY_SRC),
        mask,
    )?;
    let vertices: Vec<u8> = (0..count * 4).flat_map(|i| ((i % 1000) as f32).to_le_bytes()).collect();

    // Upload to one device and to all, alternately; medians.
    let (mut one, mut all) = (Vec::new(), Vec::new());
    for _ in 0..5 {
        let t = Instant::now();
        uploader.broadcast(&single, 0, &vertices)?;
        uploader.wait_idle()?;
        one.push(t.elapsed().as_secs_f64());
        let t = Instant::now();
        uploader.broadcast(&mesh, 0, &vertices)?;
        uploader.wait_idle()?;
        all.push(t.elapsed().as_secs_f64());
    }
    let (one_device_s, all_devices_s) = (median(one), median(all));
    println!(
        "{} MiB to 1 device: {:.1} ms; to {} devices: {:.1} ms (ratio {:.2})",
        mib,
        one_device_s * 1e3,
        devices.len(),
        all_devices_s * 1e3,
        all_devices_s / one_device_s
    );

    // The sparse texture: the tiles covering texels 0..256 × 0..256 of mip 0, on every device.
    let pools = MultiTilePool::new(set, mask, &TilePoolDesc::default().with_tiles_per_heap(64))?;
    let mut texture = MultiSparseImage::new(
        &pools,
        mask,
        "sparse texture",
        &SparseImageDesc::new_2d(Format::R8G8B8A8Unorm, 4096, 4096),
    )?;
    let region = TexelRegion { offset: [0; 3], extent: [256, 256, 1] };
    texture.commit_region(&pools, mask, 0, 0, region)?;
    texture.flush_binds(&pools)?;
    let texels: Vec<u8> = (0..256).flat_map(|y| (0..256).flat_map(move |x| texel(x, y))).collect();
    texture.broadcast_region(&uploader, 0, [0; 3], [256, 256, 1], &texels)?;

    let program = MultiComputeProgram::new(set, mask, "multi_device.comp", &shaders::MULTI_DEVICE, 1)?;
    let mut keep = Vec::new();
    for &i in &devices {
        let device = set.device(i).ok_or("device vanished")?;
        keep.push((i, device.create_sampler(Filter::Nearest)?));
    }
    let mut samplers = Vec::new();
    for (i, sampler) in &keep {
        let image = texture.instance(*i).ok_or("no texture instance")?;
        samplers.push((*i, Binding::sampled(image, sampler, vk::ImageLayout::GENERAL)));
    }
    // The smallest limit of any device, so that one grid is valid everywhere.
    let limits = set
        .devices()
        .iter()
        .map(|d| d.limits().max_compute_work_group_count)
        .fold([u32::MAX; 3], |a, l| [a[0].min(l[0]), a[1].min(l[1]), a[2].min(l[2])]);
    let groups = grid((count as u32).div_ceil(64), limits)?;
    let dispatch = DispatchItem::new(
        &program,
        vec![
            MultiBinding::Image(PerDeviceImage { views: samplers.clone() }),
            MultiBinding::Buffer(BufferView::whole(&mesh)),
            MultiBinding::Buffer(BufferView::whole(&results)),
        ],
        &(count as u32).to_le_bytes(),
        groups,
    );
    let submitter = MultiSubmitter::new(set, mask)?;
    let mut checked = Vec::new();
    for &i in &devices {
        let submission = submitter.submit(i, &[WorkItem::Dispatch(&dispatch)])?;
        submitter.wait(i, submission)?;
        let device = set.device(i).ok_or("device vanished")?;
        let instance = results.instance(i).ok_or("no results instance")?;
        // The first and the last results: the last ones come from the grid's last row.
        let sample = count.min(1 << 16);
        let tail = (count - sample).max(sample);
        let (mut ok, mut total) = (0, 0);
        for start in [0, tail].into_iter().filter(|&start| start < count) {
            let out = device.read_back(instance, start * 16, (count - start).min(sample) * 16)?;
            total += out.len() / 16;
            ok += out
                .chunks_exact(16)
                .enumerate()
                .filter(|(k, c)| {
                    let k = start + *k as u64;
                    let t = texel((k % 256) as u32, ((k / 256) % 256) as u32);
                    (0..4).all(|ch| {
                        let v = f32::from_le_bytes([c[ch * 4], c[ch * 4 + 1], c[ch * 4 + 2], c[ch * 4 + 3]]);
                        let expect = ((k * 4 + ch as u64) % 1000) as f32 + f32::from(t[ch]) / 255.0;
                        (v - expect).abs() < 1e-3
                    })
                })
                .count();
        }
        println!("device {}: {ok} of {total} results correct ({groups:?} workgroups)", i.get());
        checked.push((i, if ok == total { ok } else { 0 }));
    }

    submitter.destroy();
    drop(dispatch);
    drop(program);
    drop(samplers);
    drop(keep);
    for device in set.devices() {
        device.wait_idle()?;
    }
    drop((texture, pools));
    for b in [mesh, single, results] {
        pool.free_buffer(b)?;
    }
    uploader.destroy()?;
    Ok(Outcome { devices: devices.len(), checked, one_device_s, all_devices_s, groups })
}

#[allow(dead_code, reason = "the test that runs this example calls `run` and not `main`")]
fn main() -> Result<(), Box<dyn std::error::Error>> {
    tracing_subscriber::fmt().with_env_filter("warn").init();
    let mib = std::env::args().nth(1).map_or(Ok(DEFAULT_MIB), |a| a.parse::<u64>())?;
    let set = DeviceSet::new(&DeviceSetDesc::default().with_devices(DeviceMask::ALL).with_min_devices(2))?;
    for d in set.devices() {
        println!("device {}: {} (physical {})", d.index().get(), d.name(), d.physical_index());
    }
    let outcome = run(&set, mib)?;
    let problems = set.validation_log().problem_count();
    drop(set);
    let leaks = residency::vulkan::LEAKS_AT_TEARDOWN.load(std::sync::atomic::Ordering::SeqCst);
    println!(
        "{{\"devices\":{},\"mib\":{mib},\"one_device_ms\":{:.2},\"all_devices_ms\":{:.2},\"ratio\":{:.3},\"validation_problems\":{problems},\"leaks\":{leaks}}}",
        outcome.devices,
        outcome.one_device_s * 1e3,
        outcome.all_devices_s * 1e3,
        outcome.all_devices_s / outcome.one_device_s
    );
    if outcome.checked.iter().any(|&(_, ok)| ok == 0) || problems != 0 || leaks != 0 {
        return Err("the example failed its checks".into());
    }
    Ok(())
}
