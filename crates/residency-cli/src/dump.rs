//! `residency dump`: a demonstration workload on each device, then its memory report as VMA's JSON
//! dump, our JSON and an SVG heap map. With several devices, a multi-device pool adds buffers
//! under device masks, and every device is shown side by side (the combined view: each device's
//! totals, each resource's bytes on each device it lives on).

use anyhow::Context;
use residency::core::report::{format_bytes, to_json, to_svg_with, to_vma_json, SvgOptions, SvgScale};
use residency::vulkan::multi::{MultiBuffer, MultiBufferPool, MultiDevice, MultiPool};
use residency::vulkan::{
    Buffer, BufferDesc, BufferInit, BufferPool, BufferPoolDesc, BufferPoolUsage, BufferUsage, Device,
    DeviceIndex, DeviceMask, DeviceSet, DeviceSetDesc, DeviceSetReport, MemoryIntent, MemoryReport,
    ReportSources,
};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

#[derive(Debug, clap::Args)]
pub struct DumpArgs {
    /// Which devices: `all`, a list such as `0,1`, or a mask such as `0b11`.
    #[arg(long, default_value = "all")]
    devices: DeviceMask,
    /// Write VMA's JSON dump format (what `GpuMemDumpVis.py` reads) to FILE; with several devices,
    /// one file per device named FILE-dN.EXT.
    #[arg(long, value_name = "FILE")]
    vma_json: Option<PathBuf>,
    /// Write the SVG heap map to FILE; with several devices, one file per device named FILE-dN.EXT.
    #[arg(long, value_name = "FILE")]
    svg: Option<PathBuf>,
    /// Draw every SVG row to one scale (the largest block spans the width) instead of one per block.
    #[arg(long)]
    shared_scale: bool,
    /// Print our JSON report (every device, statistics and total; with several devices also
    /// `combined`, every device side by side) instead of the summary.
    #[arg(long)]
    json: bool,
    /// Open the selected physical devices repeatedly until there are at least N devices (one GPU,
    /// or lavapipe, opened twice shows the multi-device view).
    #[arg(long, value_name = "N", default_value_t = 0)]
    min_devices: u32,
}

/// The multi-device demonstration: a pool on every device, buffers under masks (every device,
/// one device only).
struct MultiWorkload {
    pool: MultiBufferPool,
    buffers: Vec<MultiBuffer>,
}

impl MultiWorkload {
    fn new(set: &DeviceSet) -> anyhow::Result<MultiWorkload> {
        let desc =
            BufferPoolDesc::new("demo multi-device pool", BufferPoolUsage::Unknown).with_page_size(256 << 10);
        let pool =
            MultiBufferPool::new(set, DeviceMask::ALL, &desc).context("creating the multi-device pool")?;
        let storage = BufferUsage::STORAGE | BufferUsage::COPY_DST;
        let last = set.devices().last().map_or(DeviceIndex::DEFAULT, |d| d.index());
        let requests = [
            ("shared mesh", 96 << 10, BufferUsage::VERTEX | BufferUsage::COPY_DST, DeviceMask::ALL),
            ("shared constants", 256, BufferUsage::UNIFORM, DeviceMask::ALL),
            ("first device's target", 32 << 10, storage, DeviceIndex::DEFAULT.mask()),
            ("last device's target", 32 << 10, storage, last.mask()),
        ];
        let mut buffers = Vec::new();
        for (name, size, usage, mask) in requests {
            let init = BufferInit::new(name, size).with_usage(usage);
            match pool.init_buffer(&init, mask) {
                Ok(buffer) => buffers.push(buffer),
                Err(e) => {
                    let workload = MultiWorkload { pool, buffers };
                    workload.free();
                    return Err(anyhow::Error::new(e).context(format!("creating `{name}`")));
                }
            }
        }
        Ok(MultiWorkload { pool, buffers })
    }

    fn free(self) {
        for buffer in self.buffers {
            if let Err(refused) = self.pool.free_buffer(buffer) {
                tracing::error!(error = %refused, "the multi-device pool refused its own buffer");
            }
        }
    }
}

/// The demonstration: an unknown-flags pool with buffers of every kind and some holes, plus placed
/// and committed buffers of the general allocator.
struct Workload {
    pool: BufferPool,
    pool_buffers: Vec<Buffer>,
    general: Vec<Buffer>,
}

impl Workload {
    fn new(device: &Arc<Device>) -> anyhow::Result<Workload> {
        let desc =
            BufferPoolDesc::new("demo placed pool", BufferPoolUsage::Unknown).with_page_size(256 << 10);
        let pool = BufferPool::new(Arc::clone(device), desc).context("creating the demonstration pool")?;
        let mut workload = Workload { pool, pool_buffers: Vec::new(), general: Vec::new() };
        if let Err(e) = workload.fill(device) {
            workload.free(device);
            return Err(e);
        }
        Ok(workload)
    }

    fn fill(&mut self, device: &Device) -> anyhow::Result<()> {
        let vertex = BufferUsage::VERTEX | BufferUsage::COPY_DST;
        let index = BufferUsage::INDEX | BufferUsage::COPY_DST;
        let pool_requests: [(&str, u64, BufferUsage, u64); 12] = [
            ("terrain vertices", 48_000, vertex, 0),
            ("terrain indices", 12_000, index, 0),
            ("frame constants", 200, BufferUsage::UNIFORM, 256),
            ("particles", 65_536, BufferUsage::STORAGE, 0),
            ("temporary upload", 9_000, BufferUsage::STORAGE | BufferUsage::COPY_SRC, 0),
            ("character vertices", 20_480, vertex, 0),
            ("character indices", 3_000, index, 0),
            ("object constants", 1_000, BufferUsage::UNIFORM, 256),
            ("culling scratch", 4_100, BufferUsage::STORAGE, 0),
            ("draw arguments", 640, BufferUsage::INDIRECT | BufferUsage::STORAGE, 0),
            ("light list", 3_333, BufferUsage::STORAGE, 0),
            ("sky vertices", 1_536, vertex, 0),
        ];
        for (name, size, usage, alignment) in pool_requests {
            let init = BufferInit::new(name, size).with_usage(usage).with_alignment(alignment);
            let buffer = self.pool.init_buffer(&init).with_context(|| format!("creating `{name}`"))?;
            self.pool_buffers.push(buffer);
        }
        // A few frees leave holes between live buffers.
        for name in ["temporary upload", "character indices", "culling scratch"] {
            if let Some(i) = self.pool_buffers.iter().position(|b| b.name() == name) {
                let buffer = self.pool_buffers.remove(i);
                if let Err(refused) = self.pool.free_buffer(buffer) {
                    self.pool_buffers.push(*refused.resource);
                }
            }
        }
        let general = [
            BufferDesc::new("upload staging", 64 << 10, BufferUsage::COPY_SRC)
                .with_intent(MemoryIntent::Upload),
            BufferDesc::new("readback", 4_096, BufferUsage::COPY_DST).with_intent(MemoryIntent::Readback),
            BufferDesc::new("gbuffer tiles", 20_000, BufferUsage::STORAGE),
            BufferDesc::new("instance data", 7_000, BufferUsage::VERTEX | BufferUsage::COPY_DST),
            BufferDesc::new("committed mesh", 192 << 10, BufferUsage::VERTEX).committed(),
        ];
        for desc in general {
            let buffer = device.create_buffer(&desc).with_context(|| format!("creating `{}`", desc.name))?;
            self.general.push(buffer);
        }
        Ok(())
    }

    fn report(&self, device: &Device, multi: Option<&MultiWorkload>) -> MemoryReport {
        let mut sources = ReportSources::new()
            .with_pool(&self.pool)
            .with_buffers(&self.pool_buffers)
            .with_buffers(&self.general);
        if let Some(multi) = multi {
            let index = device.index();
            sources = sources
                .with_pools(multi.pool.pool(index))
                .with_buffers(multi.buffers.iter().filter_map(|b| b.instance(index)));
        }
        device.memory_report_with(&sources)
    }

    fn free(self, _device: &Device) {
        for buffer in self.pool_buffers {
            if let Err(refused) = self.pool.free_buffer(buffer) {
                tracing::error!(error = %refused, "the pool refused its own buffer");
            }
        }
        for buffer in self.general {
            drop(buffer);
        }
    }
}

/// `FILE` for one device; `FILE-dN.EXT` for device N of several.
fn per_device_path(path: &Path, device: u32, several: bool) -> PathBuf {
    if !several {
        return path.to_owned();
    }
    let stem = path.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
    let name = match path.extension() {
        Some(ext) => format!("{stem}-d{device}.{}", ext.to_string_lossy()),
        None => format!("{stem}-d{device}"),
    };
    path.with_file_name(name)
}

fn summary(set: &DeviceSetReport) -> String {
    let mut s = String::new();
    for report in &set.devices {
        let stats = report.statistics();
        let d = &report.device;
        let _ = writeln!(s, "Device {}: {} (Vulkan {})", d.index, d.name, d.api_version);
        for heap in &report.heaps {
            let h = &stats.heaps[heap.index as usize];
            let _ = writeln!(
                s,
                "  heap {}: {:>10}  budget {:>10}  usage {:>10}  blocks {:>3} {:>10}  used {:>10}  padding {:>8}  free {:>10}",
                heap.index,
                format_bytes(heap.size),
                format_bytes(heap.budget),
                format_bytes(heap.usage),
                h.block_count,
                format_bytes(h.block_bytes),
                format_bytes(h.allocation_bytes),
                format_bytes(h.padding_bytes),
                format_bytes(h.free_bytes),
            );
        }
        for (pool, p) in report.pools.iter().zip(&stats.pools) {
            let _ = writeln!(
                s,
                "  pool `{}` (type {}): {} pages {}, {} buffers {}, padding {}, free {} in {} ranges (largest {})",
                pool.name,
                pool.memory_type,
                p.block_count,
                format_bytes(p.block_bytes),
                p.allocation_count,
                format_bytes(p.allocation_bytes),
                format_bytes(p.padding_bytes),
                format_bytes(p.free_bytes),
                p.free_range_count,
                format_bytes(p.free_range_size_max),
            );
        }
    }
    let t = set.total();
    let _ = writeln!(
        s,
        "Total: {} blocks {}, {} allocations {}, padding {}, free {}",
        t.block_count,
        format_bytes(t.block_bytes),
        t.allocation_count,
        format_bytes(t.allocation_bytes),
        format_bytes(t.padding_bytes),
        format_bytes(t.free_bytes),
    );
    s
}

pub fn run(args: &DumpArgs) -> anyhow::Result<ExitCode> {
    let desc = DeviceSetDesc::default().with_devices(args.devices).with_min_devices(args.min_devices);
    let set = DeviceSet::new(&desc)?;
    let multi = if set.devices().len() > 1 { Some(MultiWorkload::new(&set)?) } else { None };
    let mut reports = DeviceSetReport::default();
    for device in set.devices() {
        let workload = Workload::new(device)?;
        reports.devices.push(workload.report(device, multi.as_ref()));
        workload.free(device);
    }
    if let Some(multi) = multi {
        multi.free();
    }
    let several = reports.devices.len() > 1;
    let mut written = Vec::new();
    for report in &reports.devices {
        let index = report.device.index;
        if let Some(path) = &args.vma_json {
            let path = per_device_path(path, index, several);
            std::fs::write(&path, to_vma_json(report))
                .with_context(|| format!("writing {}", path.display()))?;
            written.push(path);
        }
        if let Some(path) = &args.svg {
            let path = per_device_path(path, index, several);
            let scale = if args.shared_scale { SvgScale::Shared } else { SvgScale::PerBlock };
            let svg = to_svg_with(report, &SvgOptions::default().with_scale(scale));
            std::fs::write(&path, svg).with_context(|| format!("writing {}", path.display()))?;
            written.push(path);
        }
    }
    if args.json {
        let mut json: serde_json::Value = serde_json::from_str(&to_json(&reports))?;
        if several {
            json["combined"] = serde_json::to_value(reports.combined())?;
        }
        println!("{}", serde_json::to_string_pretty(&json)?);
    } else {
        print!("{}", summary(&reports));
        if several {
            println!("All devices side by side:");
            print!("{}", reports.combined().to_text());
        }
        for path in written {
            println!("wrote {}", path.display());
        }
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::per_device_path;
    use std::path::Path;

    #[test]
    fn several_devices_get_one_file_each() {
        assert_eq!(per_device_path(Path::new("out/heaps.svg"), 1, false), Path::new("out/heaps.svg"));
        assert_eq!(per_device_path(Path::new("out/heaps.svg"), 1, true), Path::new("out/heaps-d1.svg"));
        assert_eq!(per_device_path(Path::new("dump"), 0, true), Path::new("dump-d0"));
    }
}
