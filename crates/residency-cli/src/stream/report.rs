//! What `residency stream` measured, and the arithmetic of it (PSNR, percentiles).

use super::{scene, StreamArgs};
use serde::Serialize;
use std::collections::BTreeMap;
use std::time::Instant;

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
#[derive(Debug, Default, Serialize)]
pub struct StreamReport {
    pub device: String,
    /// `hardware` or `software`.
    pub path: String,
    /// Virtual textures streamed (on a grid of planes), and how many distinct `.rvt` files.
    pub textures: u32,
    pub distinct_files: u32,
    /// Device memory behind the streamed textures at its peak: the tile heaps (hardware), the
    /// atlases and indirection textures (software, allocated whole up front).
    pub backing_bytes_peak: u64,
    /// Mean GPU time of the streamed draw with feedback (timestamps around its pass), ms.
    pub gpu_ms_mean: f64,
    /// The same draw without feedback, same frames: the render's own cost, ms.
    pub render_gpu_ms_mean: f64,
    /// What feedback adds: `gpu_ms_mean - render_gpu_ms_mean`, ms.
    pub feedback_gpu_ms_mean: f64,
    /// Each frame's difference (with feedback − without), its median over the feedback frames
    /// whose feedback pass went first and over those where it went second, averaged (ms; one
    /// order's median when the other has no frames): robust to a stalled frame where the mean
    /// is not, and, like the mean, free of the order's effect (a plain median of the two
    /// orders' frames would land on one of them).
    pub feedback_gpu_ms_p50: f64,
    /// The mean difference over the feedback frames whose feedback pass ran first (even
    /// frames) / second (odd frames): the two streamed passes take turns going first, so the
    /// order's effect (the first pass finds colder caches) cancels in the mean; far apart, the
    /// order and not feedback makes most of each (`None` without such frames).
    pub feedback_gpu_ms_first_mean: Option<f64>,
    pub feedback_gpu_ms_second_mean: Option<f64>,
    /// The mean difference over frames that wrote no feedback (`--feedback-interval` above 1;
    /// `None` when every frame wrote feedback): both passes then draw the same, so this is the
    /// order's effect alone. With an even interval only odd frames are idle, where the pass
    /// labelled "with feedback" runs second: then feedback's own cost is about
    /// `feedback_gpu_ms_first_mean + feedback_gpu_ms_idle_mean`.
    pub feedback_gpu_ms_idle_mean: Option<f64>,
    /// The fully resident reference draw, ms.
    pub gpu_reference_ms_mean: f64,
    /// Everything the streamer does on the CPU per frame (begin_frame: feedback decode, update,
    /// binds, staging; its part of the recording; end_frame), ms.
    pub streamer_cpu_ms_mean: f64,
    pub streamer_cpu_ms_p99: f64,
    /// The median frame's streamer CPU time: the steady state (the first frame of each ring slot
    /// after textures were added lays the feedback out for all of them and makes its buffers).
    pub streamer_cpu_ms_p50: f64,
    /// The PSNR comparison per frame (read-back, MSE), timed apart, ms.
    pub psnr_cpu_ms_mean: f64,
    /// Mean CPU time per frame, waits and the PSNR comparison excluded, ms.
    pub cpu_ms_mean: f64,
    /// PSNR of the whole run against the fully resident render (the mean squared error of all
    /// frames, converged or not): how close streaming comes overall, comparable across paths.
    pub psnr_db_run: f64,
    /// PSNR of frame 0 (only the primed coarse chains resident).
    pub psnr_db_frame0: f64,
    /// The largest difference of any colour channel from the fully resident render over the
    /// converged frames (0: identical; 1: rounding of the last bit).
    pub max_abs_diff_converged: u8,
    pub frames: u64,
    pub width: u32,
    pub height: u32,
    pub fully_resident_bytes: u64,
    /// The streamed files' texel format (`mixed` when they differ), e.g. `r8g8b8a8_unorm`,
    /// `bc7_unorm`.
    pub texel_format: String,
    /// Device memory per texel of a full resident tile: 64 KiB over its texels (RGBA8 4, BC3 and
    /// BC7 1, BC1 0.5), averaged over the planes. Clipped edge tiles and the small mips hold
    /// fewer texels in the same 64 KiB.
    pub bytes_per_resident_texel: f64,
    /// `resident_bytes_peak / bytes_per_resident_texel`: the texels the peak residency holds
    /// (full tiles).
    pub resident_texels_peak: u64,
    pub budget_bytes: u64,
    /// `--pin-mip-tiles`: besides the tails, every mip of at most this many tiles is pinned.
    pub pinned_mip_tiles: u32,
    /// `--feedback-device-local`: the feedback buffers in device-local host-visible memory.
    pub feedback_device_local: bool,
    /// Deferred feedback (default; `--feedback-direct` turns it off): the writing pixels store
    /// records and the streamer's resolve pass, timed with the feedback pass, writes the feedback.
    pub feedback_deferred: bool,
    /// `--feedback-ablate` (a testing aid): which part `feedback_gpu_ms_mean` leaves out —
    /// `store` (it measures the writing pixel's write and the resolve), `branch` (the branch,
    /// the write and the resolve), `resolve` (the draws' part alone); `None`: all of feedback.
    pub feedback_ablate: Option<&'static str>,
    /// `--feedback-pass`: the feedback records come from a pass of their own at 1/stride of the
    /// resolution (inside the feedback pass's timestamps), not from the render's pixels.
    pub feedback_pass: bool,
    /// The pixel stride the run took (`--feedback-stride`, raised by `--feedback-writers`) and
    /// the side of the squares of pixels that write together (`--feedback-block`).
    pub feedback_pixel_stride: u32,
    pub feedback_block: u32,
    /// Pixels of the render that write feedback in a feedback frame, at most (only those a
    /// plane covers write): with deferred feedback, the records the resolve visits.
    pub feedback_writing_pixels: u64,
    /// Distinct tiles a feedback frame asked for (misses and warnings), mean over the frames
    /// whose feedback was read: `feedback_writing_pixels` over it is about how many writing
    /// pixels ask for each requested tile (the resolve's atomics on one word).
    pub feedback_requests_mean: f64,
    /// The streamer's bind worker binds and stages between frames (the default on the hardware
    /// path; `--no-bind-worker` turns it off; the software path makes no binds).
    pub bind_worker: bool,
    pub resident_bytes_peak: u64,
    pub tiles_streamed: u64,
    pub tiles_evicted: u64,
    pub thrash: u64,
    pub latency_frames_p50: u32,
    pub latency_frames_p95: u32,
    pub latency_frames_p99: u32,
    /// Request-to-resident latency from GPU timestamps: the end of the feedback pass of the frame
    /// that asked, to the start of the pass of the first frame that sampled the tile resident.
    pub latency_ms_p50: f64,
    pub latency_ms_p95: f64,
    /// How many latencies the ms figures come from.
    pub latency_ms_samples: u64,
    pub frame_ms_mean: f64,
    /// Frames the CPU ran ahead of the GPU.
    pub frames_in_flight: u32,
    /// Sparse binds that unbound tiles, waiting on the GPU for the frames in flight.
    pub unbinds_after_frames: u64,
    /// Frames whose `begin_frame` waited on the host for its feedback slot.
    pub streamer_host_waits: u64,
    pub converged_frames: u64,
    /// Over the converged frames (0 when none converged; identical renders score 99 dB).
    pub psnr_db_mean: f64,
    pub psnr_db_min: f64,
    /// With `--source`: PSNR of the streamed frames against the frames drawn from the fully
    /// resident uncompressed sources, over the converged frames (mean) and the whole run; and of
    /// the fully resident render against them (what the texel format alone costs, the ceiling of
    /// the streamed figures). `None` without `--source`.
    pub psnr_db_vs_source_mean: Option<f64>,
    pub psnr_db_vs_source_run: Option<f64>,
    pub psnr_db_reference_vs_source_run: Option<f64>,
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
    /// The validation layer's performance warnings of the run, by message ID (docs/reliability.md
    /// says why each kind stays); empty without the layer.
    pub validation_performance_warnings: BTreeMap<String, u64>,
    /// The texture size streamed (`--size`, else the files'), width and height of mip 0.
    pub texture_size: [u32; 2],
    /// Textures drawn fully resident in the reference passes (`--references`; PSNR is measured
    /// on their pixels), and the device memory of those fully resident copies (one per file
    /// they take).
    pub references: u32,
    pub reference_bytes: u64,
    /// The mean share of each frame's pixels the PSNR compared (1 when every texture has a
    /// reference).
    pub psnr_pixels_compared_mean: f64,
    /// Residency's own memory behind the textures at the end of the run, apart from their
    /// texels: page tables (host), min-LOD maps or indirection textures (device), feedback
    /// buffers and image tables (host-visible), staging.
    pub overhead: Overhead,
    /// The streamer's counted work per frame (`StreamerStats::last_frame_work`): it follows
    /// what the frame's feedback asked for, not the textures registered.
    pub work: Work,
    /// The last frame, streamed and fully resident, RGBA8 (`width × height`).
    #[serde(skip)]
    pub last_frame: Option<(Vec<u8>, Vec<u8>)>,
}

/// `StreamReport::overhead`.
#[derive(Debug, Default, Serialize)]
pub struct Overhead {
    pub page_table_bytes: u64,
    pub map_bytes: u64,
    pub feedback_bytes: u64,
    pub staging_bytes: u64,
    pub total_bytes: u64,
    pub per_texture_bytes: f64,
}

/// `StreamReport::work`: means and maxima over the frames.
#[derive(Debug, Default, Serialize)]
pub struct Work {
    /// Textures the streamer did per-texture work for in a frame.
    pub textures_visited_mean: f64,
    pub textures_visited_max: u32,
    /// Textures whose feedback bitsets a frame decoded (touched ones only).
    pub feedback_images_decoded_mean: f64,
    /// Words of feedback a frame read.
    pub feedback_words_read_mean: f64,
    pub feedback_words_read_max: u64,
    /// Sparse binds and tiles staged per frame on the frame thread, inside `begin_frame`.
    pub frame_thread_binds_mean: f64,
    pub frame_thread_tiles_staged_mean: f64,
    /// Over the run: binds the bind worker made and tiles it staged (the bind worker, on by default).
    pub worker_binds: u64,
    pub worker_tiles_staged: u64,
}

/// The frames read back so far, in frame order.
#[derive(Default)]
pub(super) struct Finished {
    pub(super) psnr: Vec<f64>,
    pub(super) mse_sum: f64,
    /// With `--source`: per frame, PSNR of the streamed frame against the source's, and the
    /// summed MSEs of the streamed and the reference frame against it.
    pub(super) psnr_source: Vec<f64>,
    pub(super) mse_source_sum: f64,
    pub(super) mse_reference_source_sum: f64,
    /// Largest channel difference from the reference, per frame.
    pub(super) max_diff: Vec<u8>,
    pub(super) gpu_ms: Vec<[Option<f64>; 3]>,
    pub(super) pass_at_ms: Vec<Option<(f64, f64)>>,
    /// The PSNR comparison's CPU time per frame.
    pub(super) psnr_ms: Vec<f64>,
    /// Per frame, the share of its pixels compared (with `--references` below the textures,
    /// those of the referenced planes; else all).
    pub(super) compared: Vec<f64>,
    pub(super) last_frame: Option<(Vec<u8>, Vec<u8>)>,
}

impl Finished {
    pub(super) fn frame(
        &mut self,
        scene: &scene::Scene,
        args: &StreamArgs,
        f: u64,
        slot: usize,
    ) -> anyhow::Result<()> {
        debug_assert_eq!(f as usize, self.psnr.len(), "frames finish in order");
        let t = Instant::now();
        let out = scene.finished(slot)?;
        // Only the referenced planes' pixels when not every plane has a reference (the others
        // are left clear, all zero, in the reference passes).
        let mask: Option<Vec<bool>> = scene
            .masked()
            .then(|| out.reference.chunks_exact(4).map(|p| p.iter().any(|&c| c != 0)).collect());
        let keep = |a: &[u8]| match &mask {
            Some(m) => {
                a.chunks_exact(4).zip(m).filter(|(_, &k)| k).flat_map(|(p, _)| p.iter().copied()).collect()
            }
            None => a.to_vec(),
        };
        let (streamed, reference) = (keep(&out.streamed), keep(&out.reference));
        self.compared.push(streamed.len() as f64 / out.streamed.len().max(1) as f64);
        let error = mse(&streamed, &reference);
        self.psnr.push(psnr_of(error));
        self.mse_sum += error;
        if let Some(source) = &out.source {
            let source = keep(source);
            let error = mse(&streamed, &source);
            self.psnr_source.push(psnr_of(error));
            self.mse_source_sum += error;
            self.mse_reference_source_sum += mse(&reference, &source);
        }
        self.max_diff.push(streamed.iter().zip(&reference).map(|(&a, &b)| a.abs_diff(b)).max().unwrap_or(0));
        self.psnr_ms.push(t.elapsed().as_secs_f64() * 1e3);
        self.gpu_ms.push(out.gpu_ms);
        self.pass_at_ms.push(out.pass_at_ms);
        if let Some(dir) = args.frames_out.as_ref().filter(|_| f % args.every == args.every - 1) {
            super::write_png(dir, f, args, &out.streamed, &out.reference)?;
        }
        if f + 1 == args.frames {
            self.last_frame = Some((out.streamed, out.reference));
        }
        Ok(())
    }
}

/// Mean squared error over the colour channels of two RGBA8 images.
pub fn mse(a: &[u8], b: &[u8]) -> f64 {
    a.iter()
        .zip(b)
        .enumerate()
        .filter(|(i, _)| i % 4 != 3)
        .map(|(_, (&x, &y))| (f64::from(x) - f64::from(y)).powi(2))
        .sum::<f64>()
        / (a.len().max(1) as f64 * 0.75)
}

/// PSNR of a mean squared error, 99 dB for identical images.
pub fn psnr_of(mse: f64) -> f64 {
    if mse == 0.0 {
        99.0
    } else {
        10.0 * (255.0f64 * 255.0 / mse).log10()
    }
}

pub fn mean(v: &[f64]) -> f64 {
    v.iter().sum::<f64>() / v.len().max(1) as f64
}

/// The `p`-th percentile (0–100) by nearest rank, 0 for no values.
pub fn percentile(v: &[f64], p: f64) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    let mut sorted = v.to_vec();
    sorted.sort_by(f64::total_cmp);
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_by_nearest_rank() {
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(percentile(&v, 95.0), 95.0);
        assert_eq!(percentile(&v, 99.0), 99.0);
        assert_eq!(percentile(&[3.0], 50.0), 3.0);
        assert_eq!(percentile(&[], 50.0), 0.0);
    }

    #[test]
    fn identical_images_score_99_db() {
        let a = vec![7u8; 64];
        assert_eq!(psnr_of(mse(&a, &a)), 99.0);
        let b: Vec<u8> = a.iter().map(|x| x + 1).collect();
        assert!((psnr_of(mse(&a, &b)) - 48.13).abs() < 0.01);
    }
}
