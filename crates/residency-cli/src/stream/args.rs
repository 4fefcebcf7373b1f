//! `residency stream`'s command line.

use residency::vulkan::{FaultSite, InjectedFault};
use std::path::PathBuf;

#[derive(Clone, Debug, clap::Args)]
pub struct StreamArgs {
    /// The `.rvt` files (`residency vt build`); the planes take them in turn.
    #[arg(required = true)]
    pub(super) files: Vec<PathBuf>,
    /// The uncompressed originals of the files (RGBA8 `.rvt`s of the same sizes, one per file, in
    /// order; e.g. `vt build` without `--format` from the same inputs): each frame is also drawn
    /// from them fully resident, and the JSON gains the PSNR against them
    /// (`psnr_db_vs_source_*`).
    #[arg(long = "source", value_name = "FILE.rvt")]
    pub(super) sources: Vec<PathBuf>,
    /// Virtual textures on a grid of planes (default: one per file; at most 65 536, what one
    /// feedback buffer addresses).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=65536))]
    pub(super) textures: Option<u32>,
    /// Texture width in texels: each file repeated (SIZE / its width)² times, a power of two
    /// (e.g. 16384 from 4096² files: 16 copies, four more mips), for virtual sizes past the
    /// files' (terabytes with thousands of textures). A comma list gives one size per file, in
    /// turn (`8192,8192,4096`: the first two files at 8192², the third at 4096², then again),
    /// to mix sizes up to a device's sparse address space. Default: the files' own size.
    #[arg(long, value_name = "SIZE[,SIZE...]", value_delimiter = ',')]
    pub(super) size: Vec<u32>,
    /// Textures drawn fully resident in the reference passes (PSNR measured on their pixels),
    /// spread over the grid. Default: every texture when the fully resident copies of their
    /// files fit in a quarter of the device's memory, else the planes of as many files as fit.
    #[arg(long, value_name = "K")]
    pub(super) references: Option<u32>,
    /// Frames to render.
    #[arg(long, default_value_t = 120)]
    pub(super) frames: u64,
    #[arg(long, default_value_t = 256)]
    pub(super) width: u32,
    #[arg(long, default_value_t = 256)]
    pub(super) height: u32,
    /// Tile budget in MiB (default: a tenth of the textures fully resident).
    #[arg(long)]
    pub(super) budget_mib: Option<u64>,
    /// Bytes of tile loads started per frame, in MiB.
    #[arg(long, default_value_t = 8)]
    pub(super) upload_mib: u64,
    /// Feedback from one pixel of every N × N block (taken in turn).
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u32).range(1..=16))]
    pub(super) feedback_stride: u32,
    /// Pixels write feedback in squares of B × B (one square of every stride × stride squares).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=16))]
    pub(super) feedback_block: u32,
    /// Aim for at most N writing pixels per frame: the pixel stride is doubled from
    /// `--feedback-stride` (up to 64) until the render's extent has at most N (one pixel of
    /// every stride × stride still writes, taken in turn, so every pixel writes over stride²
    /// feedback frames). E.g. 32768 keeps stride 8 up to 1920 × 1080 and takes 16 at 3840 × 2160.
    /// Default: the stride as given.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub(super) feedback_writers: Option<u32>,
    /// Deferred feedback from a pass of its own at 1/stride of the resolution (the shipped
    /// `vt_feedback.frag`), inside the feedback pass's timestamps, instead of from one pixel of
    /// every stride × stride of the render: the render's shader then runs no feedback code, and
    /// the small pass samples exactly the pixels that would have written (its view-projection puts
    /// them on its pixel centres). The default wherever it applies (deferred feedback, single
    /// pixels, no `--feedback-ablate store|branch`); given explicitly, those are refused.
    #[arg(long, conflicts_with_all = ["feedback_direct", "feedback_in_render"])]
    pub(super) feedback_pass: bool,
    /// The render's own writing pixels store the feedback records (`vt_quad_deferred.frag`), not a
    /// pass of their own (see `--feedback-pass`; the H200 measured 7.8 % of a 4K render for this
    /// against 0.5 % for the pass).
    #[arg(long)]
    pub(super) feedback_in_render: bool,
    /// Testing aid, for localizing feedback's GPU cost: the pass without feedback does part of
    /// the feedback pass's work, or the resolve leaves the feedback pass's timestamps, so that
    /// `feedback_gpu_ms_mean` measures only the rest (the feedback pass itself is unchanged and
    /// streaming proceeds as usual). `store`: the pass without feedback runs the pixel test and
    /// the writing pixel's branch, all but its write (the record store; with
    /// `--feedback-direct`, feedback()'s table reads and atomics), so the difference is the
    /// write and the resolve. `branch`: it runs the pixel test only, so the difference is the
    /// writing pixel's branch (divergence included), its write and the resolve. `resolve`: the
    /// resolve is recorded after the feedback pass's end timestamp, so the difference is the
    /// draws' part alone. The JSON says which (`feedback_ablate`).
    #[arg(long, value_enum, value_name = "PART")]
    pub(super) feedback_ablate: Option<Ablate>,
    /// Feedback without pixel counts (requests are then ranked without them).
    #[arg(long)]
    pub(super) no_pixel_counts: bool,
    /// Feedback every N frames.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=16))]
    pub(super) feedback_interval: u32,
    /// Frames a tile must go unwanted before it is evicted to make room (the streamer's
    /// `eviction_delay_frames`; keep it at or above `--feedback-interval`).
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u32).range(1..))]
    pub(super) eviction_delay: u32,
    /// Tile loads in flight at most (the streamer's `max_loads_in_flight`).
    #[arg(long, default_value_t = 1024, value_parser = clap::value_parser!(u32).range(1..))]
    pub(super) max_loads_in_flight: u32,
    /// LOD warnings start no loads (only misses do).
    #[arg(long)]
    pub(super) no_prefetch: bool,
    /// Besides the mip tails, pin every mip of at most N tiles (the streamer's
    /// `pinned_mip_tiles`: loaded before frame 0, never evicted; 1 or 4 sharpen the first frame of
    /// large textures). 0: the tails only.
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u32).range(0..=64))]
    pub(super) pin_mip_tiles: u32,
    /// Feedback buffers and image tables in host memory (the streamer's `feedback_device_local`
    /// off). Default: device-local memory the host can map (ReBAR), where the shaders' reads and
    /// feedback atomics stay in the GPU's memory and the CPU reads the words the frame wrote
    /// uncached.
    #[arg(long)]
    pub(super) feedback_host_memory: bool,
    /// The shaders write feedback themselves (`vt_quad.frag`: table reads and atomics in the
    /// writing pixel). Default: deferred feedback (the streamer's `deferred_feedback`): the
    /// writing pixel stores one record, and the streamer's resolve pass, inside the feedback
    /// pass's timestamps, writes the feedback.
    #[arg(long)]
    pub(super) feedback_direct: bool,
    /// Cut the tile budget at this frame to `--cut-to-mib`.
    #[arg(long, requires = "cut_to_mib")]
    pub(super) cut_at_frame: Option<u64>,
    #[arg(long, requires = "cut_at_frame")]
    pub(super) cut_to_mib: Option<u64>,
    #[arg(long)]
    pub(super) json: bool,
    /// Write every `--every`th frame (streamed and reference) as PNG into DIR.
    #[arg(long, value_name = "DIR")]
    pub(super) frames_out: Option<PathBuf>,
    #[arg(long, default_value_t = 30, value_parser = clap::value_parser!(u64).range(1..))]
    pub(super) every: u64,
    /// The residency path (auto: hardware where the device has it).
    #[arg(long, value_enum, default_value_t = PathArg::Auto)]
    pub(super) path: PathArg,
    /// Open the device without sparse residency (`--path auto` then takes the software path).
    #[arg(long)]
    pub(super) no_sparse: bool,
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..=8))]
    pub(super) frames_in_flight: u32,
    /// Hardware path: the frame thread makes each frame's sparse bind and stages its tiles'
    /// texels itself, inside `begin_frame`. Default: a bind worker thread does both between
    /// frames (the streamer's `bind_worker`), and the frame thread plans and publishes them a
    /// frame later (the per-frame CPU cost then stays flat with thousands of textures).
    #[arg(long = "no-bind-worker", action = clap::ArgAction::SetFalse)]
    pub(super) bind_worker: bool,
    /// Also fly again with budgets of 25, 50 and 100 % of the working set (thrash rate).
    #[arg(long)]
    pub(super) sweep: bool,
    /// Testing aid: wait for each frame's loads before the next frame, so runs are frame-exact.
    #[arg(long)]
    pub(super) wait_loads: bool,
    /// Testing aid: wait for the previous frame's GPU work before each frame begins, so the
    /// streamer reads every frame's feedback at the next frame whatever the GPU's speed (with
    /// `--wait-loads`, runs are frame-exact with any number of frames in flight).
    #[arg(long)]
    pub(super) wait_frames: bool,
    /// Testing aid: make one Vulkan call fail (`SITE:N[:lost]`: allocate_memory, create_resource,
    /// bind_sparse, queue_submit or wait, after N calls); the run ends with that typed error.
    #[arg(long, value_name = "SITE:N[:lost]", value_parser = parse_fault)]
    pub(super) inject_fault: Option<(FaultSite, u64, InjectedFault)>,
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

/// `--feedback-ablate`: what the feedback-cost difference leaves out (see the option).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Ablate {
    /// The pass without feedback runs everything but the writing pixel's write.
    Store,
    /// The pass without feedback runs the pixel test (no pixel writes).
    Branch,
    /// The resolve runs after the feedback pass's end timestamp.
    Resolve,
}

impl Ablate {
    /// The name the JSON reports.
    pub fn name(self) -> &'static str {
        match self {
            Ablate::Store => "store",
            Ablate::Branch => "branch",
            Ablate::Resolve => "resolve",
        }
    }

    /// The testing bits of `vt_quad.glsl`'s `control.x` for the pass without feedback (with bit
    /// 0, feedback on), `None`: that pass draws without feedback.
    pub fn without_pass_bits(self) -> Option<u32> {
        match self {
            Ablate::Store => Some(1 | 2),
            Ablate::Branch => Some(1 | 8),
            Ablate::Resolve => None,
        }
    }
}

/// `--path`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum PathArg {
    Auto,
    Hardware,
    Software,
}

impl StreamArgs {
    /// Whether feedback comes from a pass of its own (`--feedback-pass`, or the default where it
    /// applies: deferred feedback from single pixels, no ablation of the render's feedback code).
    pub(super) fn uses_feedback_pass(&self) -> bool {
        self.feedback_pass
            || (!self.feedback_in_render
                && !self.feedback_direct
                && self.feedback_block == 1
                && !matches!(self.feedback_ablate, Some(Ablate::Store | Ablate::Branch)))
    }

    /// The pixel stride the run takes: `--feedback-stride`, doubled (up to 64) while the
    /// render's extent has more than `--feedback-writers` writing pixels per frame.
    pub(super) fn pixel_stride(&self) -> u32 {
        let mut stride = self.feedback_stride;
        if let Some(most) = self.feedback_writers {
            while stride < 64
                && writing_pixels([self.width, self.height], stride, self.feedback_block) > u64::from(most)
            {
                stride *= 2;
            }
        }
        stride
    }

    /// The tour's short fly-over of `files`: `frames` frames at 256², quiet.
    pub fn tour(files: Vec<PathBuf>, frames: u64) -> Self {
        use clap::Parser;
        #[derive(clap::Parser)]
        struct P {
            #[command(flatten)]
            a: StreamArgs,
        }
        let mut args = P::parse_from(["stream", "x.rvt"]).a;
        (args.files, args.frames, args.json) = (files, frames, true);
        // Frame-exact, so the tour's check (p95 latency ≤ 3 frames, PSNR) holds whatever the
        // machine's speed: what it shows is the streamer's decisions; `residency stream` times them.
        (args.wait_loads, args.wait_frames) = (true, true);
        args
    }
}

/// Pixels of an `extent` render that write feedback in a feedback frame with this stride and
/// square side (at most; only those a plane covers write): one `block²` square per
/// `(stride · block)²` cell, cells clipped at the edges counted whole (the record grid).
pub(super) fn writing_pixels([w, h]: [u32; 2], stride: u32, block: u32) -> u64 {
    let side = u64::from(stride.max(1)) * u64::from(block.max(1));
    u64::from(w).div_ceil(side) * u64::from(h).div_ceil(side) * u64::from(block.max(1)).pow(2)
}
