//! `residency stream FILE.rvt`: a camera flying over a plane textured with a virtual texture,
//! streamed from shader feedback under a memory budget, each frame compared with the same frame
//! rendered from a fully resident copy.
//!
//! Per frame: the manager takes last frame's feedback and the loads that completed, the backend binds
//! its changes, uploads the loaded tiles after the binds and the min-LOD boxes, the frame's loads
//! are read from the file and decompressed on worker threads (they complete for the next frame),
//! then the frame renders twice (streamed, with feedback; reference) and the two are compared.

use anyhow::{bail, Context};
use indicatif::{ProgressBar, ProgressStyle};
use residency::core::format::Format;
use residency::core::streaming::{
    FeedbackDesc, FeedbackRing, FeedbackSampling, FrameInput, RequestKind, StreamUnit, StreamingDesc,
    StreamingManager, TileKey, TileRequest,
};
use residency::core::tiles::{
    bordered_tile, software_layout, BindPlanOptions, ImageId, ResidencyPath, SparseImageDesc,
    SparseImageLayout, TexelRegion,
};
use residency::core::usage::{BufferUsage, ImageUsage};
use residency::core::vt_file::VtIndex;
use residency::vulkan::ash::vk;
use residency::vulkan::compute::{Binding, ComputeProgram, ViewRef};
use residency::vulkan::recording::Timestamps;
use residency::vulkan::shaders;
use residency::vulkan::software::{SoftwareTexture, DEFAULT_BORDER};
use residency::vulkan::sparse::{MinLodMap, SparseImage, TileHeaps};
use residency::vulkan::{
    Buffer, BufferDesc, CommandContext, Device, DeviceSet, DeviceSetDesc, FaultSite, Filter, Image,
    ImageDesc, ImageRegion, ImageView, InjectedFault, Recording, Submission, Uploader,
};
use serde::Serialize;
use std::collections::HashMap;
use std::io::{Read, Seek, SeekFrom};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Instant;

/// A loaded stream unit's texel data: (mip, region, RGBA8 texels) per part.
type Parts = Vec<(u32, TexelRegion, Vec<u8>)>;

/// The streamed texture on either path (one per run: the size difference does not matter). Dropping
/// it releases everything (the image keeps its heaps' memory alive until it goes).
#[allow(clippy::large_enum_variant)]
enum Backend {
    Hardware { image: SparseImage, map: MinLodMap, heaps: TileHeaps },
    Software { texture: SoftwareTexture },
}

#[derive(Clone, Debug, clap::Args)]
pub struct StreamArgs {
    /// The `.rvt` file (`residency vt build`).
    file: PathBuf,
    /// Frames to render.
    #[arg(long, default_value_t = 120)]
    frames: u64,
    /// Render width in pixels.
    #[arg(long, default_value_t = 256)]
    width: u32,
    /// Render height in pixels.
    #[arg(long, default_value_t = 256)]
    height: u32,
    /// Tile budget in MiB (default: a tenth of the fully resident texture).
    #[arg(long)]
    budget_mib: Option<u64>,
    /// Bytes of tile loads started per frame, in MiB.
    #[arg(long, default_value_t = 8)]
    upload_mib: u64,
    /// Feedback from one pixel of every N × N block (taken in turn), to bound its cost.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=16))]
    feedback_stride: u32,
    /// Feedback every N frames.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=16))]
    feedback_interval: u32,
    /// Cut the tile budget at this frame (with `--cut-to-mib`): the manager evicts down to it
    /// while rendering goes on from coarser mips.
    #[arg(long, requires = "cut_to_mib")]
    cut_at_frame: Option<u64>,
    /// The budget after `--cut-at-frame`, in MiB.
    #[arg(long, requires = "cut_at_frame")]
    cut_to_mib: Option<u64>,
    /// Print the summary as JSON.
    #[arg(long)]
    json: bool,
    /// Write every `--every`th frame (streamed and reference) as PNG into DIR.
    #[arg(long, value_name = "DIR")]
    frames_out: Option<PathBuf>,
    /// With `--frames-out`: the interval between written frames.
    #[arg(long, default_value_t = 30, value_parser = clap::value_parser!(u64).range(1..))]
    every: u64,
    /// The residency path: hardware sparse residency, the software path (indirection texture and
    /// tile-cache atlas), or auto (hardware where the device has it).
    #[arg(long, value_enum, default_value_t = PathArg::Auto)]
    path: PathArg,
    /// Open the device without sparse residency, as one that lacks it: `--path auto` then takes
    /// the software path, and `--path hardware` is refused.
    #[arg(long)]
    no_sparse: bool,
    /// Frames the CPU may run ahead of the GPU: each has its own feedback buffer and output
    /// images, and a frame's feedback is read once the GPU has finished it (1: wait every frame).
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..=8))]
    frames_in_flight: u32,
    /// Also fly the path again with budgets of 25, 50 and 100 % of the working set (the first
    /// run's peak resident bytes) and report the thrash rate of each.
    #[arg(long)]
    sweep: bool,
    /// Testing aid: make one Vulkan call fail, as a renderer's fault-injection test would
    /// (`SITE:N[:lost]`: the call after the first N at SITE — allocate_memory, create_resource,
    /// bind_sparse, queue_submit or wait — returns out-of-device-memory, or device-lost). The run
    /// then ends early with that typed error, and tears down without leaks.
    #[arg(long, value_name = "SITE:N[:lost]", value_parser = parse_fault)]
    inject_fault: Option<(FaultSite, u64, InjectedFault)>,
}

fn parse_fault(text: &str) -> Result<(FaultSite, u64, InjectedFault), String> {
    let mut parts = text.split(':');
    let site = match parts.next().unwrap_or_default() {
        "allocate_memory" => FaultSite::AllocateMemory,
        "create_resource" => FaultSite::CreateResource,
        "bind_sparse" => FaultSite::BindSparse,
        "queue_submit" => FaultSite::QueueSubmit,
        "wait" => FaultSite::Wait,
        other => return Err(format!("unknown fault site `{other}`")),
    };
    let skip = parts.next().ok_or("missing N")?.parse::<u64>().map_err(|e| e.to_string())?;
    let fault = match parts.next() {
        None => InjectedFault::OutOfDeviceMemory,
        Some("lost") => InjectedFault::DeviceLost,
        Some(other) => return Err(format!("unknown fault `{other}` (only `lost`)")),
    };
    Ok((site, skip, fault))
}

impl StreamArgs {
    /// The tour's short fly-over of `file`: `frames` frames at 256², quiet.
    pub fn tour(file: PathBuf, frames: u64) -> Self {
        Self {
            file,
            frames,
            width: 256,
            height: 256,
            budget_mib: None,
            upload_mib: 8,
            feedback_stride: 1,
            feedback_interval: 1,
            cut_at_frame: None,
            cut_to_mib: None,
            json: true,
            frames_out: None,
            every: 30,
            frames_in_flight: 2,
            path: PathArg::Auto,
            no_sparse: false,
            sweep: false,
            inject_fault: None,
        }
    }
}

/// `--path`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum PathArg {
    /// Hardware where the device has sparse residency for the format, else software.
    Auto,
    /// Vulkan sparse residency (an error on a device without it).
    Hardware,
    /// The software path: an indirection texture over a tile-cache atlas.
    Software,
}

impl PathArg {
    fn residency_path(self) -> ResidencyPath {
        match self {
            PathArg::Auto => ResidencyPath::Auto,
            PathArg::Hardware => ResidencyPath::Hardware,
            PathArg::Software => ResidencyPath::Software,
        }
    }
}

/// One budget of `--sweep`.
#[derive(Debug, Serialize)]
pub struct SweepPoint {
    /// Budget as a percentage of the working set.
    pub percent: u32,
    /// The budget in bytes.
    pub budget_bytes: u64,
    /// Tiles made resident.
    pub tiles_streamed: u64,
    /// Tiles evicted.
    pub tiles_evicted: u64,
    /// Tiles wanted again soon after their eviction.
    pub thrash: u64,
    /// `thrash / tiles_streamed`.
    pub thrash_rate: f64,
    /// Request-to-resident p95 in frames.
    pub latency_frames_p95: u32,
    /// Frames that needed no fallback.
    pub converged_frames: u64,
    /// Mean PSNR of all frames against the fully resident render.
    pub psnr_db_mean_all: f64,
}

/// What the run measured (the `--json` output).
#[derive(Debug, Serialize)]
pub struct StreamReport {
    pub device: String,
    /// `hardware` or `software`.
    pub path: String,
    /// Device memory behind the streamed texture at its peak: the tile heaps (hardware), the
    /// atlas and the indirection texture (software, allocated whole up front).
    pub backing_bytes_peak: u64,
    /// Mean GPU time of the streamed render per frame (timestamps around its dispatch), ms.
    pub gpu_ms_mean: f64,
    /// The same for the fully resident reference render, ms.
    pub gpu_reference_ms_mean: f64,
    /// Mean CPU time per frame, waits excluded, ms.
    pub cpu_ms_mean: f64,
    /// PSNR of the whole run against the fully resident render (the mean squared error of all
    /// frames, converged or not): how close streaming comes overall, comparable across paths.
    pub psnr_db_run: f64,
    /// The largest difference of any colour channel from the fully resident render over the
    /// converged frames (0: identical; 1: rounding of the last bit).
    pub max_abs_diff_converged: u8,
    pub frames: u64,
    pub width: u32,
    pub height: u32,
    pub fully_resident_bytes: u64,
    pub budget_bytes: u64,
    pub resident_bytes_peak: u64,
    pub tiles_streamed: u64,
    pub tiles_evicted: u64,
    pub thrash: u64,
    pub latency_frames_p50: u32,
    pub latency_frames_p95: u32,
    pub latency_frames_p99: u32,
    pub latency_ms_p95: f64,
    pub frame_ms_mean: f64,
    /// Frames the CPU ran ahead of the GPU.
    pub frames_in_flight: u32,
    /// Frames that waited for the frames in flight before unbinding evicted tiles.
    pub unbind_waits: u64,
    pub converged_frames: u64,
    /// Over the converged frames (0 when none converged; identical renders score 99 dB).
    pub psnr_db_mean: f64,
    pub psnr_db_min: f64,
    /// Uncompressed tile bytes made resident per second of the run.
    pub mb_per_s: f64,
    /// Frames from the camera cut (half-way) to the first frame that needed no fallback.
    pub frames_to_converge_after_cut: Option<u64>,
    /// `--sweep`: budgets of 25, 50 and 100 % of the working set.
    pub sweep: Vec<SweepPoint>,
    /// Request-to-resident latencies: `[l]` = tiles that took `l` frames.
    pub latency_histogram_frames: Vec<u64>,
    pub tiles_per_frame: Vec<u64>,
    pub resident_mib_per_frame: Vec<f64>,
    pub psnr_db_per_frame: Vec<f64>,
    /// The last frame, streamed and fully resident, RGBA8 (`width × height`).
    #[serde(skip)]
    pub last_frame: Option<(Vec<u8>, Vec<u8>)>,
}

/// The built-in camera: a glide over the plane looking ahead and down, with a cut at mid-run.
fn camera(frame: u64, frames: u64, side: f32) -> ([f32; 3], [f32; 3]) {
    let half = frames / 2;
    let (t, start) = if frame < half {
        (frame as f32, [0.15f32, 0.2f32])
    } else {
        ((frame - half) as f32, [0.6f32, 0.55f32])
    };
    let pos = [side * (start[0] + 0.0015 * t), side * (start[1] + 0.001 * t), side * 0.02];
    let forward = [0.6f32, 0.45, -0.35];
    (pos, forward)
}

fn normalize(v: [f32; 3]) -> [f32; 3] {
    let l = (v[0] * v[0] + v[1] * v[1] + v[2] * v[2]).sqrt();
    [v[0] / l, v[1] / l, v[2] / l]
}

fn cross(a: [f32; 3], b: [f32; 3]) -> [f32; 3] {
    [a[1] * b[2] - a[2] * b[1], a[2] * b[0] - a[0] * b[2], a[0] * b[1] - a[1] * b[0]]
}

fn push_constants(
    frame: u64,
    frames: u64,
    side: f32,
    texels: u32,
    reference: bool,
    sampling: FeedbackSampling,
) -> Vec<u8> {
    let (pos, forward) = camera(frame, frames, side);
    let f = normalize(forward);
    let r = normalize(cross(f, [0.0, 0.0, 1.0]));
    let u = cross(r, f);
    let tan_half_fov = (30.0f32).to_radians().tan();
    let v = [
        pos[0],
        pos[1],
        pos[2],
        side,
        f[0],
        f[1],
        f[2],
        tan_half_fov,
        r[0],
        r[1],
        r[2],
        texels as f32,
        u[0],
        u[1],
        u[2],
        if reference { 1.0 } else { 0.0 },
    ];
    let mut bytes: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
    for w in [frame as u32, sampling.pixel_stride, sampling.frame_interval, 0] {
        bytes.extend_from_slice(&w.to_le_bytes());
    }
    bytes
}

/// Mean squared error over the colour channels of two RGBA8 images.
fn mse(a: &[u8], b: &[u8]) -> f64 {
    a.iter()
        .zip(b)
        .enumerate()
        .filter(|(i, _)| i % 4 != 3)
        .map(|(_, (&x, &y))| (f64::from(x) - f64::from(y)).powi(2))
        .sum::<f64>()
        / (a.len() as f64 * 0.75)
}

/// PSNR of a mean squared error, 99 dB for identical images.
fn psnr_of(mse: f64) -> f64 {
    if mse == 0.0 {
        99.0
    } else {
        10.0 * (255.0f64 * 255.0 / mse).log10()
    }
}

/// Reads and decodes one tile of the file (a positioned read through `file`).
fn read_tile(file: &mut std::fs::File, index: &VtIndex, mip: u32, x: u32, y: u32) -> anyhow::Result<Vec<u8>> {
    let record = index.record(mip, x, y).map_err(|e| anyhow::anyhow!("{e}"))?;
    let mut stored = vec![0; record.stored_size as usize];
    file.seek(SeekFrom::Start(record.offset))?;
    file.read_exact(&mut stored)?;
    index.decode_tile(mip, x, y, &stored).map_err(|e| anyhow::anyhow!("{e}"))
}

/// Reads and decodes the tiles of `units` from the file, on worker threads.
/// With `border: Some(b)` (the software path) each tile comes with `b` texels of its neighbours
/// on every side (clamped at the texture's edges): one bordered atlas slot.
fn load_units(
    path: &PathBuf,
    index: &VtIndex,
    layout: &SparseImageLayout,
    units: &[TileKey],
    border: Option<u32>,
) -> anyhow::Result<Vec<(TileKey, Parts)>> {
    let read_tile = |file: &mut std::fs::File, mip: u32, x: u32, y: u32| read_tile(file, index, mip, x, y);
    let tile_side = index.desc().tile_width;
    let load = |file: &mut std::fs::File, key: TileKey| -> anyhow::Result<(TileKey, Parts)> {
        let mut parts = Vec::new();
        match key.unit {
            StreamUnit::Tile(t) => {
                let c = layout.tile_coord(t).context("tile in the layout")?;
                let region = layout.tile_region(c).context("tile region")?;
                if let Some(b) = border {
                    let (gx, gy) = index.desc().tile_grid(c.mip);
                    let mut near = HashMap::new();
                    for y in c.y.saturating_sub(1)..(c.y + 2).min(gy) {
                        for x in c.x.saturating_sub(1)..(c.x + 2).min(gx) {
                            let (w, _) = index.desc().tile_extent(c.mip, x, y).context("tile extent")?;
                            near.insert((x, y), (w, read_tile(file, c.mip, x, y)?));
                        }
                    }
                    let extent = layout.mips()[c.mip as usize].extent;
                    let texel = |tx: u32, ty: u32| {
                        let (w, data) = &near[&(tx / tile_side, ty / tile_side)];
                        let i = (((ty % tile_side) * w + tx % tile_side) * 4) as usize;
                        [data[i], data[i + 1], data[i + 2], data[i + 3]]
                    };
                    parts.push((
                        c.mip,
                        region,
                        bordered_tile(texel, [extent[0], extent[1]], tile_side, b, c.x, c.y),
                    ));
                } else {
                    parts.push((c.mip, region, read_tile(file, c.mip, c.x, c.y)?));
                }
            }
            StreamUnit::Tail(_) => {
                for mip in layout.first_tail_lod()..layout.mip_levels() {
                    let (gx, gy) = index.desc().tile_grid(mip);
                    for y in 0..gy {
                        for x in 0..gx {
                            let (w, h) = index.desc().tile_extent(mip, x, y).context("tile extent")?;
                            let region =
                                TexelRegion { offset: [x * tile_side, y * tile_side, 0], extent: [w, h, 1] };
                            parts.push((mip, region, read_tile(file, mip, x, y)?));
                        }
                    }
                }
            }
        }
        Ok((key, parts))
    };
    let workers = 4.min(units.len().max(1));
    let chunks: Vec<&[TileKey]> = units.chunks(units.len().div_ceil(workers).max(1)).collect();
    std::thread::scope(|scope| {
        let handles: Vec<_> = chunks
            .iter()
            .map(|chunk| {
                scope.spawn(|| -> anyhow::Result<Vec<_>> {
                    let mut file = std::fs::File::open(path)?;
                    chunk.iter().map(|&key| load(&mut file, key)).collect()
                })
            })
            .collect();
        let mut out = Vec::new();
        for h in handles {
            out.extend(h.join().map_err(|_| anyhow::anyhow!("a loader thread panicked"))??);
        }
        Ok(out)
    })
}

pub fn run(args: &StreamArgs) -> anyhow::Result<ExitCode> {
    let mut file =
        std::fs::File::open(&args.file).with_context(|| format!("opening {}", args.file.display()))?;
    let index = VtIndex::read(&mut file).map_err(|e| anyhow::anyhow!("{}: {e}", args.file.display()))?;
    let vt = *index.desc();
    if vt.format != Format::R8G8B8A8Unorm || vt.tile_width != 128 || vt.tile_height != 128 || vt.border != 0 {
        bail!("residency stream needs an RGBA8 .rvt with 128 × 128 tiles and no border (residency vt build makes one)");
    }
    let set = DeviceSet::new(&DeviceSetDesc::default().with_sparse_residency(!args.no_sparse))?;
    let device = Arc::clone(&set.devices()[0]);
    if let Some((site, skip, fault)) = args.inject_fault {
        device.ledger().inject_fault(site, skip, fault);
    }
    let mut report = fly(args, &device, &mut file, &index, None)?;
    if args.sweep {
        let working_set = report.resident_bytes_peak.max(1);
        for percent in [25u32, 50, 100] {
            let budget = (working_set * u64::from(percent) / 100).max(1);
            let quiet = StreamArgs { frames_out: None, json: true, ..args.clone() };
            let r = fly(&quiet, &device, &mut file, &index, Some(budget))?;
            report.sweep.push(SweepPoint {
                percent,
                budget_bytes: r.budget_bytes,
                tiles_streamed: r.tiles_streamed,
                tiles_evicted: r.tiles_evicted,
                thrash: r.thrash,
                thrash_rate: r.thrash as f64 / r.tiles_streamed.max(1) as f64,
                latency_frames_p95: r.latency_frames_p95,
                converged_frames: r.converged_frames,
                psnr_db_mean_all: r.psnr_db_per_frame.iter().sum::<f64>()
                    / r.psnr_db_per_frame.len().max(1) as f64,
            });
        }
    }

    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        println!(
            "{}: {} frames {}×{}; resident peak {:.1} MiB of {:.1} MiB fully resident ({:.1} %), budget {:.1} MiB",
            report.device,
            report.frames,
            report.width,
            report.height,
            report.resident_bytes_peak as f64 / f64::from(1 << 20),
            report.fully_resident_bytes as f64 / f64::from(1 << 20),
            100.0 * report.resident_bytes_peak as f64 / report.fully_resident_bytes as f64,
            report.budget_bytes as f64 / f64::from(1 << 20)
        );
        println!(
            "tiles streamed {}, evicted {}, thrash {}; request-to-resident latency p50/p95/p99 {}/{}/{} frames (p95 {:.1} ms at {:.1} ms per frame)",
            report.tiles_streamed, report.tiles_evicted, report.thrash, report.latency_frames_p50, report.latency_frames_p95, report.latency_frames_p99, report.latency_ms_p95, report.frame_ms_mean
        );
        println!(
            "PSNR vs fully resident over {} converged frames: mean {:.1} dB, min {:.1} dB",
            report.converged_frames, report.psnr_db_mean, report.psnr_db_min
        );
        let cut = report.frames_to_converge_after_cut.map_or("never".to_owned(), |f| format!("{f} frame(s)"));
        println!("{:.1} MB/s of tiles; converged {cut} after the camera cut", report.mb_per_s);
        for p in &report.sweep {
            println!(
                "budget {:>3} % of the working set ({:.1} MiB): {} streamed, {} evicted, thrash {} ({:.1} %), p95 {} frames, {} converged frames",
                p.percent,
                p.budget_bytes as f64 / f64::from(1 << 20),
                p.tiles_streamed,
                p.tiles_evicted,
                p.thrash,
                100.0 * p.thrash_rate,
                p.latency_frames_p95,
                p.converged_frames
            );
        }
    }
    let problems = set.validation_log().problem_count();
    if problems != 0 {
        eprintln!("{problems} validation problem(s)");
        return Ok(ExitCode::FAILURE);
    }
    Ok(ExitCode::SUCCESS)
}

/// One frame of the frames-in-flight ring: its feedback buffer, its two output images (streamed,
/// reference) and the host-visible buffers they are copied into for the comparison.
struct Slot {
    feedback: Buffer,
    outputs: [Image; 2],
    views: [ImageView; 2],
    readback: [Buffer; 2],
    /// The frame rendering into this slot and its submission, until it has been read back.
    submitted: Option<(u64, Submission)>,
}

impl Slot {
    fn new(device: &Device, n: u32, width: u32, height: u32, feedback_bytes: u64) -> anyhow::Result<Slot> {
        use residency::core::memory::MemoryIntent;
        let feedback = device.create_buffer(
            &BufferDesc::new(format!("feedback {n}"), feedback_bytes, BufferUsage::STORAGE)
                .with_intent(MemoryIntent::Readback),
        )?;
        // Each object is released when dropped, so an error part-way leaves nothing behind.
        let image = |name: &str| {
            device.create_image(&ImageDesc::new_2d(
                format!("{name} frame {n}"),
                Format::R8G8B8A8Unorm,
                width,
                height,
                ImageUsage::STORAGE | ImageUsage::COPY_SRC,
            ))
        };
        let read_back = |name: &str| {
            device.create_buffer(
                &BufferDesc::new(
                    format!("{name} frame {n} read-back"),
                    u64::from(width) * u64::from(height) * 4,
                    BufferUsage::COPY_DST,
                )
                .with_intent(MemoryIntent::Readback),
            )
        };
        let outputs = [image("streamed")?, image("reference")?];
        let readback = [read_back("streamed")?, read_back("reference")?];
        device.discard_to_general(&[&outputs[0], &outputs[1]])?;
        let views =
            [device.create_image_view(&outputs[0], 0..1)?, device.create_image_view(&outputs[1], 0..1)?];
        Ok(Slot { feedback, outputs, views, readback, submitted: None })
    }

    /// Records a frame: `dispatch` renders into this slot's outputs and feedback; then the
    /// outputs are copied into the read-back buffers, all visible to the host at the fence.
    fn record(
        &self,
        rec: &mut Recording<'_>,
        dispatch: impl FnOnce(&mut Recording<'_>) -> anyhow::Result<()>,
    ) -> anyhow::Result<()> {
        use residency::vulkan::recording::MemoryDependency;
        use vk::{AccessFlags2 as A, PipelineStageFlags2 as S};
        // Everything earlier (uploads, this slot's last copies, the host's header write) before
        // this frame's shader reads and writes and its copies.
        rec.memory_barrier(MemoryDependency {
            src_stages: S::ALL_COMMANDS | S::HOST,
            src_access: A::MEMORY_WRITE | A::HOST_WRITE,
            dst_stages: S::COMPUTE_SHADER | S::COPY,
            dst_access: A::SHADER_READ | A::SHADER_WRITE | A::TRANSFER_READ | A::TRANSFER_WRITE,
        })?;
        dispatch(rec)?;
        rec.memory_barrier(MemoryDependency {
            src_stages: S::COMPUTE_SHADER,
            src_access: A::SHADER_WRITE,
            dst_stages: S::COPY | S::HOST,
            dst_access: A::TRANSFER_READ | A::HOST_READ,
        })?;
        for (image, buffer) in self.outputs.iter().zip(&self.readback) {
            rec.copy_image_to_buffer(image, vk::ImageLayout::GENERAL, buffer)?;
        }
        rec.memory_barrier(MemoryDependency {
            src_stages: S::COPY,
            src_access: A::TRANSFER_WRITE,
            dst_stages: S::HOST,
            dst_access: A::HOST_READ,
        })?;
        Ok(())
    }

    /// The streamed and the reference frame, once the frame's submission has completed.
    fn read(&self, _device: &Device) -> anyhow::Result<(Vec<u8>, Vec<u8>)> {
        let mut out = [Vec::new(), Vec::new()];
        for (px, buffer) in out.iter_mut().zip(&self.readback) {
            *px = vec![0; buffer.size() as usize];
            buffer.read(0, px)?;
        }
        let [streamed, reference] = out;
        Ok((streamed, reference))
    }
}

/// Per-frame results, filled in frame order as the ring reads frames back.
#[derive(Default)]
struct Finished {
    psnrs: Vec<f64>,
    /// GPU ms of the streamed and the reference render, per frame.
    gpu_ms: Vec<[Option<f64>; 2]>,
    /// Sum of every frame's mean squared error.
    mse_sum: f64,
    /// Largest difference of any channel from the reference over the converged frames.
    max_abs_diff_converged: u8,
    converged: Vec<bool>,
    last_frame: Option<(Vec<u8>, Vec<u8>)>,
}

impl Finished {
    /// Frame `frame` has completed in `slot`; `misses` is the miss count of its feedback (`None`:
    /// it wrote none, so it never counts as converged: misses are seen through feedback only).
    fn frame(
        &mut self,
        args: &StreamArgs,
        device: &Device,
        slot: &Slot,
        frame: u64,
        misses: Option<usize>,
        gpu_ms: [Option<f64>; 2],
    ) -> anyhow::Result<()> {
        debug_assert_eq!(frame as usize, self.psnrs.len(), "frames finish in order");
        self.gpu_ms.push(gpu_ms);
        let (streamed, reference) = slot.read(device)?;
        let error = mse(&streamed, &reference);
        self.psnrs.push(psnr_of(error));
        self.mse_sum += error;
        self.converged.push(misses == Some(0));
        if misses == Some(0) {
            let diff = streamed.iter().zip(&reference).map(|(&a, &b)| a.abs_diff(b)).max().unwrap_or(0);
            self.max_abs_diff_converged = self.max_abs_diff_converged.max(diff);
        }
        if let Some(dir) = &args.frames_out {
            if frame % args.every == args.every - 1 {
                std::fs::create_dir_all(dir)?;
                for (name, px) in [("streamed", &streamed), ("reference", &reference)] {
                    let file = std::fs::File::create(dir.join(format!("frame{frame:04}-{name}.png")))?;
                    let mut encoder =
                        png::Encoder::new(std::io::BufWriter::new(file), args.width, args.height);
                    encoder.set_color(png::ColorType::Rgba);
                    encoder.set_depth(png::BitDepth::Eight);
                    encoder.write_header()?.write_image_data(px)?;
                }
            }
        }
        if frame + 1 == args.frames {
            self.last_frame = Some((streamed, reference));
        }
        Ok(())
    }
}

/// One fly-over with a fresh streamed image, manager and reference copy; `budget` overrides the
/// tile budget in bytes.
pub fn fly(
    args: &StreamArgs,
    device: &Arc<Device>,
    file: &mut std::fs::File,
    index: &VtIndex,
    budget: Option<u64>,
) -> anyhow::Result<StreamReport> {
    let device = Arc::clone(device);
    let vt = *index.desc();
    let id = ImageId(1);
    let path = device.residency_path(vt.format, args.path.residency_path())?;
    let desc =
        SparseImageDesc::new_2d(vt.format, vt.width, vt.height).with_mip_levels(vt.mip_count).with_path(path);
    // The software path's atlas slots are small heaps of the same pool, so the atlas (allocated
    // whole) is sized close to the budget.
    const SOFTWARE_TILES_PER_HEAP: u32 = 16;
    let (layout, hardware) = match path {
        ResidencyPath::Software => (software_layout(&desc, DEFAULT_BORDER)?, None),
        _ => {
            let heaps = TileHeaps::new(Arc::clone(&device), "stream tiles")?;
            let image = SparseImage::new_external(&heaps, 65536, id, "streamed texture", &desc, false)?;
            let shape = image.layout().tile_shape();
            if shape.width != 128 || shape.height != 128 {
                bail!("the device's RGBA8 sparse tile is {} × {}, not 128 × 128", shape.width, shape.height);
            }
            (image.layout().clone(), Some((heaps, image)))
        }
    };
    let tile_bytes = layout.tile_bytes();
    let full_tiles = u64::from(layout.tile_count() + layout.mip_tail().map_or(0, |t| t.tiles * t.count));
    let fully_resident_bytes = full_tiles * tile_bytes;
    let budget_bytes =
        budget.unwrap_or_else(|| args.budget_mib.map_or(fully_resident_bytes / 10, |m| m << 20));
    let mut budget_tiles = (budget_bytes / tile_bytes).max(1) as u32;
    if path == ResidencyPath::Software {
        // Whole heaps of slots, so that every heap the pool makes lies inside the atlas.
        budget_tiles = budget_tiles.div_ceil(SOFTWARE_TILES_PER_HEAP) * SOFTWARE_TILES_PER_HEAP;
    }
    let mut streaming = StreamingDesc::default()
        .with_name("stream")
        .with_budget_tiles(budget_tiles)
        .with_upload_budget_bytes(args.upload_mib << 20);
    if path == ResidencyPath::Software {
        streaming = streaming.with_tiles_per_heap(SOFTWARE_TILES_PER_HEAP);
    }
    let mut manager = StreamingManager::new(streaming);
    manager.register_image(id, &layout)?;
    let border = (path == ResidencyPath::Software).then_some(DEFAULT_BORDER);
    let feedback = manager.feedback_layout(FeedbackDesc::default())?;
    let fb_bytes = feedback.buffer_bytes();
    let table_words = feedback.image_table();
    let mut table = device.create_buffer(
        &BufferDesc::new("image table", table_words.len() as u64 * 4, BufferUsage::STORAGE)
            .with_intent(residency::core::memory::MemoryIntent::Upload),
    )?;
    table.write(0, &table_words.iter().flat_map(|w| w.to_le_bytes()).collect::<Vec<_>>())?;
    let uploader = Uploader::new(&device, "stream", 32 << 20)?;
    let table_now = manager.residency(id).context("registered image")?.page_table();
    let mut backend = match hardware {
        Some((heaps, image)) => {
            let mut map = MinLodMap::new(&image)?;
            // The map starts as "nothing resident" everywhere (its memory is undefined until written).
            map.upload_updates(&uploader, table_now, &[])?;
            Backend::Hardware { image, map, heaps }
        }
        None => {
            let capacity = SoftwareTexture::capacity_for_budget(budget_tiles, SOFTWARE_TILES_PER_HEAP);
            let mut texture = SoftwareTexture::new(
                &device,
                "streamed texture",
                &layout,
                DEFAULT_BORDER,
                capacity,
                SOFTWARE_TILES_PER_HEAP,
            )?;
            texture.upload_indirection(&uploader, table_now)?;
            Backend::Software { texture }
        }
    };
    uploader.flush()?;

    // The fully resident reference copy.
    let reference = device.create_image(
        &ImageDesc::new_2d(
            "reference texture",
            vt.format,
            vt.width,
            vt.height,
            ImageUsage::SAMPLED | ImageUsage::COPY_DST,
        )
        .with_mip_levels(vt.mip_count),
    )?;
    device.discard_to_general(&[&reference])?;
    let progress = ProgressBar::new(vt.tile_count() + args.frames);
    progress.set_style(
        ProgressStyle::with_template("{msg:>14} [{bar:40}] {pos}/{len} {eta}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    if args.json {
        progress.set_draw_target(indicatif::ProgressDrawTarget::hidden());
    }
    progress.set_message("reference");
    for mip in 0..vt.mip_count {
        let (gx, gy) = vt.tile_grid(mip);
        for y in 0..gy {
            for x in 0..gx {
                let (w, h) = vt.tile_extent(mip, x, y).context("tile extent")?;
                let data = read_tile(file, index, mip, x, y)?;
                let region = ImageRegion::new(&reference, mip, [x * 128, y * 128, 0], [w, h, 1]);
                uploader.write_image(&region, &data)?;
                progress.inc(1);
            }
        }
    }
    uploader.wait_idle()?;

    let in_flight = args.frames_in_flight.max(1);
    let shader = match path {
        ResidencyPath::Software => &shaders::STREAM_VIEW_SOFTWARE,
        _ => &shaders::STREAM_VIEW,
    };
    let program = ComputeProgram::new(&device, shader.name(), shader, 2 * in_flight)?;
    let (texture_view, map_view): (ViewRef<'_>, ViewRef<'_>) = match &backend {
        Backend::Hardware { image, map, .. } => (image.into(), map.view().into()),
        Backend::Software { texture } => (texture.atlas_view().into(), texture.indirection_view().into()),
    };
    let timestamps = Timestamps::new(&device, "stream frame timestamps", 4 * in_flight)?;
    let trilinear = device.create_sampler(Filter::Trilinear)?;
    let nearest = device.create_sampler(Filter::Nearest)?;
    let ref_view = device.create_image_view(&reference, 0..vt.mip_count)?;
    let general = vk::ImageLayout::GENERAL;
    let mut slots = Vec::new();
    for n in 0..in_flight {
        let slot = Slot::new(&device, n, args.width, args.height, fb_bytes)?;
        let mut sets = Vec::with_capacity(2);
        for out in &slot.views {
            sets.push(program.descriptor_set(&[
                Binding::sampled(texture_view, &trilinear, general),
                Binding::sampled(map_view, &nearest, general),
                Binding::storage(out, general),
                Binding::Buffer(&slot.feedback),
                Binding::Buffer(&table),
                Binding::sampled(&ref_view, &trilinear, general),
            ])?);
        }
        slots.push((slot, sets));
    }
    let commands = CommandContext::new(&device, "stream frames")?;

    let side = 1000.0f32;
    let sampling = FeedbackSampling::new(args.feedback_stride, args.feedback_interval);
    let mut ring = FeedbackRing::new(in_flight);
    let mut step = ring.begin_frame(0, None, sampling.frame_active(0));
    let mut requests: Vec<TileRequest> = Vec::new();
    let mut requested_in = 0u64;
    let mut loaded_keys: Vec<TileKey> = Vec::new();
    let mut staged: HashMap<TileKey, Parts> = HashMap::new();
    let (mut tiles_per_frame, mut resident_mib) = (Vec::new(), Vec::new());
    let mut finished = Finished::default();
    // A finished frame read back: its feedback when it wrote some (the decoded requests are
    // returned), its two images and its GPU times into `finished`.
    let read_frame = |finished: &mut Finished,
                      slot: &Slot,
                      f: u64,
                      with_feedback: bool|
     -> anyhow::Result<Option<Vec<TileRequest>>> {
        let requests = if with_feedback {
            let mut bytes = vec![0u8; fb_bytes as usize];
            slot.feedback.read(0, &mut bytes)?;
            Some(feedback.decode(&bytes, f)?.requests)
        } else {
            None
        };
        let misses = requests.as_ref().map(|r| r.iter().filter(|r| r.kind == RequestKind::Miss).count());
        let q = 4 * (f % u64::from(in_flight)) as u32;
        let gpu = [timestamps.elapsed_ms(q, q + 1), timestamps.elapsed_ms(q + 2, q + 3)];
        finished.frame(args, &device, slot, f, misses, gpu)?;
        Ok(requests)
    };
    let mut frame_ms = Vec::new();
    let mut unbind_waits = 0u64;
    let mut backing_peak = match &backend {
        Backend::Software { texture } => texture.memory_bytes(),
        Backend::Hardware { .. } => 0,
    };
    let mut cpu_ms = Vec::new();
    progress.set_message("streaming");
    for frame in 0..args.frames {
        let started = Instant::now();
        let mut waited = std::time::Duration::ZERO;
        let slot_index = (frame % u64::from(in_flight)) as usize;

        if let (Some(at), Some(mib)) = (args.cut_at_frame, args.cut_to_mib) {
            if frame == at {
                let mut cut = ((mib << 20) / tile_bytes).max(1) as u32;
                if path == ResidencyPath::Software {
                    // The atlas was sized for the first budget: a cut may only lower it, to whole heaps.
                    cut = cut.min(budget_tiles).div_ceil(SOFTWARE_TILES_PER_HEAP) * SOFTWARE_TILES_PER_HEAP;
                }
                manager.set_budget_tiles(cut);
            }
        }
        let out = manager.update_with_feedback_from(
            &FrameInput { frame, requests: &requests, loaded: &loaded_keys, failed: &[] },
            requested_in,
        )?;
        requests.clear();
        let hardware_path = matches!(backend, Backend::Hardware { .. });
        if hardware_path && (!out.evicted.is_empty() || !out.heaps_released.is_empty()) {
            // Unbinding a tile (or freeing its heap) while a frame in flight may still read it
            // is not allowed: wait for the frames in flight first (only under eviction pressure).
            let mut any = false;
            for (slot, _) in &slots {
                if let Some((_, submission)) = &slot.submitted {
                    let t = Instant::now();
                    commands.wait_for(submission)?;
                    waited += t.elapsed();
                    any = true;
                }
            }
            unbind_waits += u64::from(any);
        }
        let table_now = manager.residency(id).context("registered image")?.page_table();
        match &mut backend {
            Backend::Hardware { image, map, heaps } => {
                for change in &out.changes {
                    heaps.bind(manager.pool(), &[(&*image, &change.changes)], BindPlanOptions::default())?;
                }
                for key in &out.resident {
                    for (mip, region, data) in staged.remove(key).unwrap_or_default() {
                        let target = ImageRegion::new(&*image, mip, region.offset, region.extent);
                        uploader.write_image(&target, &data)?;
                    }
                }
                for change in &out.changes {
                    map.upload_updates(&uploader, table_now, &change.min_lod)?;
                }
            }
            Backend::Software { texture } => {
                // Binding is writing the bordered tile into its slot; an evicted slot's new tile is
                // written after the frames in flight on the queue, so no wait is needed.
                for key in &out.resident {
                    let StreamUnit::Tile(tile) = key.unit else {
                        bail!("the software layout has no mip tail")
                    };
                    let physical = table_now.get(tile).context("a resident tile has a slot")?;
                    for (_, _, data) in staged.remove(key).unwrap_or_default() {
                        texture.write_tile(&uploader, physical, &data)?;
                    }
                }
                texture.upload_indirection(&uploader, table_now)?;
            }
        }
        // Uploads are ordered after the frames in flight on the queue (the uploader's barrier), so
        // no frame reads a tile or the map while it is written.
        uploader.flush()?;
        if let Backend::Hardware { heaps, .. } = &mut backend {
            heaps.release(&out.heaps_released);
        }
        backing_peak = backing_peak.max(manager.pool().stats().capacity_tiles * tile_bytes);
        let (slot, sets) = &mut slots[slot_index];
        if step.write.is_some() {
            let mut header = vec![0u8; fb_bytes as usize];
            header[..16].copy_from_slice(
                &feedback.header_words(frame).iter().flat_map(|w| w.to_le_bytes()).collect::<Vec<_>>(),
            );
            slot.feedback.write(0, &header)?;
        }
        let streamed_push = push_constants(frame, args.frames, side, vt.width, false, sampling);
        let reference_push = push_constants(frame, args.frames, side, vt.width, true, sampling);
        let groups = [args.width.div_ceil(8), args.height.div_ceil(8), 1];
        program.check_dispatch(&streamed_push, groups)?;
        program.check_dispatch(&reference_push, groups)?;
        let mut recorded = Ok(());
        let submission = commands.submit(&[], |rec| {
            recorded = slot.record(rec, |rec| {
                let q = 4 * slot_index as u32;
                timestamps.cmd_reset(rec, q..q + 4)?;
                timestamps.cmd_write(rec, q)?;
                program.dispatch(rec, &sets[0], &streamed_push, groups)?;
                timestamps.cmd_write(rec, q + 1)?;
                timestamps.cmd_write(rec, q + 2)?;
                program.dispatch(rec, &sets[1], &reference_push, groups)?;
                timestamps.cmd_write(rec, q + 3)?;
                Ok(())
            });
        })?;
        slot.submitted = Some((frame, submission));
        recorded?;
        // This frame's loads: read and decoded on workers while the GPU renders the frame; they
        // complete for the next frame.
        let keys: Vec<TileKey> = out.loads.iter().map(|l| l.key).collect();
        for (key, parts) in load_units(&args.file, index, &layout, &keys, border)? {
            staged.insert(key, parts);
        }
        loaded_keys = keys;
        tiles_per_frame.push(u64::from(out.stats.became_resident));

        // The ring, for the next frame: its slot must be free (the CPU runs at most `in_flight`
        // frames ahead), then every frame the GPU has finished — this one too, usually, since the
        // loads above took longer than its GPU work — is read back, oldest first, and its
        // feedback feeds the next update.
        if frame + 1 < args.frames {
            let next = frame + 1;
            let next_slot = (next % u64::from(in_flight)) as usize;
            if let Some((_, submission)) = &slots[next_slot].0.submitted {
                let t = Instant::now();
                commands.wait_for(submission)?;
                waited += t.elapsed();
            }
            let mut gpu_completed = None;
            for f in next.saturating_sub(u64::from(in_flight))..next {
                let (slot, _) = &slots[(f % u64::from(in_flight)) as usize];
                if let Some((sf, submission)) = &slot.submitted {
                    if *sf == f && !commands.is_complete(submission)? {
                        break;
                    }
                }
                gpu_completed = Some(f);
            }
            step = ring.begin_frame(next, gpu_completed, sampling.frame_active(next));
            let mut fresh: Vec<TileRequest> = Vec::new();
            let mut oldest = None;
            for f in next.saturating_sub(u64::from(in_flight))..next {
                let slot = &mut slots[(f % u64::from(in_flight)) as usize].0;
                if !matches!(slot.submitted, Some((sf, _)) if sf == f)
                    || gpu_completed.is_none_or(|done| f > done)
                {
                    continue;
                }
                slot.submitted = None;
                let with_feedback = step.read.iter().any(|&(_, rf)| rf == f);
                if let Some(requests) = read_frame(&mut finished, slot, f, with_feedback)? {
                    oldest.get_or_insert(f);
                    fresh.extend(requests);
                }
            }
            // Requests of several frames read together count from the oldest of them: latency is
            // then over- rather than under-stated.
            if let Some(f) = oldest {
                requests = fresh;
                requested_in = f;
            }
        }
        resident_mib.push(manager.stats().resident_bytes as f64 / f64::from(1 << 20));
        frame_ms.push(started.elapsed().as_secs_f64() * 1e3);
        cpu_ms.push((started.elapsed() - waited).as_secs_f64() * 1e3);
        progress.inc(1);
    }
    // Drain the ring: the last frames' images and PSNR (their feedback is not needed any more).
    for f in args.frames.saturating_sub(u64::from(in_flight))..args.frames {
        let slot = &mut slots[(f % u64::from(in_flight)) as usize].0;
        if let Some((sf, submission)) = slot.submitted.take() {
            commands.wait_for(&submission)?;
            read_frame(&mut finished, slot, sf, sampling.frame_active(sf))?;
        }
    }
    progress.finish_and_clear();
    device.wait_idle()?;
    let Finished { psnrs, converged, last_frame, gpu_ms, mse_sum, max_abs_diff_converged } = finished;
    let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len().max(1) as f64;

    let stats = manager.stats().clone();
    let latency = stats.latency.summary();
    let frame_ms_mean = frame_ms.iter().sum::<f64>() / frame_ms.len().max(1) as f64;
    let conv: Vec<f64> = psnrs.iter().zip(&converged).filter(|(_, c)| **c).map(|(p, _)| *p).collect();
    let report = StreamReport {
        device: device.name().to_owned(),
        path: path.name().to_owned(),
        backing_bytes_peak: backing_peak,
        gpu_ms_mean: mean(&gpu_ms.iter().filter_map(|g| g[0]).collect::<Vec<_>>()),
        gpu_reference_ms_mean: mean(&gpu_ms.iter().filter_map(|g| g[1]).collect::<Vec<_>>()),
        cpu_ms_mean: mean(&cpu_ms),
        psnr_db_run: psnr_of(mse_sum / psnrs.len().max(1) as f64),
        max_abs_diff_converged,
        frames: args.frames,
        width: args.width,
        height: args.height,
        fully_resident_bytes,
        budget_bytes,
        resident_bytes_peak: stats.resident_bytes_peak,
        tiles_streamed: stats.tiles_streamed,
        tiles_evicted: stats.tiles_evicted,
        thrash: stats.thrash,
        latency_frames_p50: latency.p50,
        latency_frames_p95: latency.p95,
        latency_frames_p99: latency.p99,
        latency_ms_p95: f64::from(latency.p95) * frame_ms_mean,
        frame_ms_mean,
        frames_in_flight: in_flight,
        unbind_waits,
        converged_frames: conv.len() as u64,
        psnr_db_mean: if conv.is_empty() { 0.0 } else { conv.iter().sum::<f64>() / conv.len() as f64 },
        psnr_db_min: if conv.is_empty() { 0.0 } else { conv.iter().copied().fold(f64::INFINITY, f64::min) },
        mb_per_s: stats.bytes_streamed as f64 / 1e6 / (frame_ms.iter().sum::<f64>() / 1e3).max(1e-9),
        frames_to_converge_after_cut: converged
            .iter()
            .skip((args.frames / 2) as usize)
            .position(|&c| c)
            .map(|p| p as u64),
        sweep: Vec::new(),
        latency_histogram_frames: stats.latency.counts().to_vec(),
        tiles_per_frame,
        resident_mib_per_frame: resident_mib,
        psnr_db_per_frame: psnrs,
        last_frame,
    };

    // Everything else is released on drop, here as on every error path: the uploader waits for
    // its copies, and what the GPU may still use is destroyed once its work has completed.
    uploader.destroy()?;
    Ok(report)
}
