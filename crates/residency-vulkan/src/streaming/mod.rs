//! The streamer: the frame protocol of feedback-driven texture streaming, for many virtual
//! textures under one tile budget, on either residency path.
//!
//! A [`Streamer`] owns one [`StreamingManager`] (one budget), a [`TileLoader`] (worker threads
//! that overlap frames), the staging [`Uploader`], the tile heaps (hardware path) and a ring of
//! `frames_in_flight` feedback buffers. [`Streamer::add_texture`] takes a [`TileSource`] and
//! returns a [`VirtualTexture`] whose coarse chain is already resident (priming), so a texture's
//! first frame is never blank. The renderer records its own draws; per frame:
//!
//! 1. [`Streamer::begin_frame`] (CPU only; it waits for the GPU only when this frame's
//!    feedback slot still belongs to the frame `frames_in_flight` back):
//!    - reads the feedback of every frame the GPU has finished, without waiting, oldest first;
//!    - takes the loads the workers finished (never waits for one; at most what the staging ring
//!      holds per frame), runs the manager update;
//!    - hardware path: one `vkQueueBindSparse` for the binds and unbinds, on the sparse queue,
//!      waiting *on the GPU* for the frames in flight when it unbinds (they may sample those
//!      tiles) and signalling the device's sparse timeline; no host wait;
//!    - stages the loaded texels (software: bordered, into the atlas slot) and the min-LOD map
//!      (hardware) or indirection (software) updates in the staging ring;
//!    - cancels on the workers the loads the manager cancelled (no longer wanted), and starts
//!      this frame's loads (they complete for a later frame);
//!    - returns the [`FrameBindings`]: per texture the views to bind and its feedback slot, the
//!      feedback buffer and image table, the feedback sampling, the GLSL include for the path.
//! 2. The renderer records its frame through [`FrameBindings::record`] into its own command
//!    buffer on the universal queue: the streamer's part first (the submission waits for the
//!    frame's binds; the feedback reset, header included; the staged copies; barriers from them
//!    to the shader stages that read: [`StreamerDesc::readers`]), then the renderer's draws or
//!    dispatches (its shaders write feedback), then the barrier that makes the feedback visible to
//!    the host. It submits (e.g. [`CommandContext::submit`](crate::CommandContext::submit), which
//!    adds the waits the recording asks for).
//! 3. [`Streamer::end_frame`] with the [`GpuUse`] that ends the frame's GPU work
//!    ([`Submission::gpu_use`](crate::Submission::gpu_use), or a point of a renderer timeline):
//!    the streamer reads that frame's feedback once it has passed, declares it on the tile heaps
//!    and the frame's feedback buffers, keeps it among the frames in flight (a texture removed
//!    while it may still run is given it then, so its objects are destroyed only after it: no
//!    per-texture work per frame), and waits for it on the GPU before unbinding anything it may
//!    sample.
//!
//! A frame that was not recorded (the renderer skipped it) writes no feedback; its staged copies
//! go into the next recorded frame, before that frame's draws.
//!
//! The manager counts its own frames (ticks): one per `begin_frame`, and the few that priming
//! takes; request-to-resident latency is in ticks.
#![deny(missing_docs)]

mod bind_worker;
mod compact;
mod deferred;
mod policy;
mod slices;
mod texture;

pub use slices::SLICE_EMPTY_BIAS;
pub use texture::TextureViews;

use crate::error::{ErrorClass, ResidencyError};
use crate::pipelines::compute::ComputeProgram;
use crate::poison::PoisonFree;
use crate::sparse::software::SoftwareError;
use crate::sparse::{SparseError, TileHeaps};
use crate::sync::recording::{BarrierError, CopyError, MemoryDependency};
use crate::{
    device::life::ForeignUse, device::life::GpuUse, device::Device, error::VulkanError,
    resources::buffer::AccessError, resources::buffer::Buffer, resources::buffer::BufferDesc,
    sync::recording::Recording, sync::upload::UploadError, sync::upload::Uploader,
};
use ash::vk;
use residency_core::desc::DescError;
use residency_core::format::Format;
use residency_core::memory::MemoryIntent;
use residency_core::streaming::{
    FeedbackRing, FrameInput, FrameOutput, LoadJob, StreamingDesc, TileLoader, TileRequest,
};
// The core's streaming types this module's signatures (and multi's streamer) take, the sources
// that implement `TileSource`, and the description of a virtual texture, re-exported here once
// (crate docs: "The core's types").
pub use residency_core::streaming::{
    CacheStats, CachedSource, DecodedTileCache, FeedbackBuffer, FeedbackDesc, FeedbackError, FeedbackLayout,
    FeedbackSampling, FnSource, RequestKind, RvtSource, SourceDepth, SourceError, StreamUnit, StreamingError,
    StreamingManager, StreamingStats, TileKey, TileSource,
};
use residency_core::tiles::{BindPlanOptions, ImageId, LayoutError, ResidencyPath};
use residency_core::usage::BufferUsage;
pub use residency_core::vt_file::VtDesc;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use texture::{Texture, TextureGpu};

/// The software path's tiles per pool heap (atlas slots come in whole heaps).
const SOFTWARE_TILES_PER_HEAP: u32 = 16;

/// Priming gives up after this many manager ticks (or pinned load failures).
const PRIME_TICKS: u32 = 256;

/// A streamer's settings. Defaults: 256 tiles (16 MiB of 64 KiB tiles), 8 MiB of loads started per
/// frame, 2 frames in flight, `Auto` path, 2 workers, the default feedback layout, feedback from one
/// pixel of every 8 × 8 block every frame (a 64th of the pixels), read by fragment and compute
/// shaders, 32 MiB staging; the manager's policy at its defaults ([`StreamingDesc`]): at most 1024
/// loads in flight, eviction delay 8 frames, at most 256 evictions per frame for a budget cut,
/// prefetch on, thrash window 32 frames, loads no longer wanted cancelled after
/// `max(sampling.frame_interval + frames_in_flight, 4)` frames.
#[derive(Clone, Debug)]
pub struct StreamerDesc {
    /// For messages and object names.
    pub name: String,
    /// Tiles resident at most, over all textures (the software path rounds up to whole heaps of
    /// 16 tiles).
    pub budget_tiles: u32,
    /// Bytes of loads started per frame (at least one load starts).
    pub upload_bytes_per_frame: u64,
    /// Frames the CPU may run ahead of the GPU (1 to 8).
    pub frames_in_flight: u32,
    /// The residency path; `Auto` takes hardware where the device has it for RGBA8.
    pub path: ResidencyPath,
    /// Loader threads (at least 1).
    pub workers: usize,
    /// The feedback buffers' record capacity and pixel counting.
    pub feedback: FeedbackDesc,
    /// Bytes of the staging ring (a frame stages at most a `frames_in_flight + 1`-th of it).
    pub staging_bytes: u64,
    /// Which pixels write feedback: one of every `stride × stride` block, every `interval`
    /// frames (give the shader [`FrameBindings::sampling`]).
    pub sampling: FeedbackSampling,
    /// The shader stages that sample the textures and write feedback (the barriers
    /// [`FrameBindings::record`] records name them).
    pub readers: vk::PipelineStageFlags2,
    /// Tiles per heap of the hardware path's tile pool (one `VkDeviceMemory` each; default
    /// 2048: 128 MiB of 64 KiB tiles). Smaller heaps follow the budget more closely and give
    /// [`Streamer::compact`] heaps to hand back sooner. The software path's heaps are 16 slots.
    pub tiles_per_heap: u32,
    /// Software path: the format whose bordered atlas slot one budget tile counts as (the
    /// manager's tile bytes: `resident_bytes`, the upload budget), e.g. `Bc7Unorm` for a BC7
    /// texture's 18 496-byte slots ([`software_slot_bytes`](residency_core::tiles::software_slot_bytes)).
    /// The streamer's first atlas is made in it (in RGBA8 when `None`); textures of other formats get
    /// atlases of their own, with as many slots. `None` (the default): 64 KiB tiles, as the hardware
    /// path counts. Ignored on the hardware path.
    pub software_slot_format: Option<Format>,
    /// Loads in flight at most (the manager's [`StreamingDesc::max_in_flight`]; default 1024; at
    /// least 1, else [`Streamer::new`] refuses it): a load counts from the frame it starts until
    /// the `begin_frame` that takes its data, so this also bounds the loads a frame starts.
    pub max_loads_in_flight: u32,
    /// Frames a resident tile must go unwanted before it is evicted to make room for a load
    /// (`K`, [`StreamingDesc::eviction_delay_frames`]; default 8; at least 1). Keep it at or
    /// above `sampling.frame_interval`: a tile in use is wanted only in frames that write
    /// feedback.
    pub eviction_delay_frames: u32,
    /// Tiles evicted per frame at most while over a cut budget
    /// ([`StreamingDesc::evictions_per_frame`]; default 256; at least 1): a cut is spread over
    /// frames.
    pub evictions_per_frame: u32,
    /// Whether LOD and low-water warnings start loads ahead of need
    /// ([`StreamingDesc::prefetch`]; default on). Off, only misses (and their parents) load.
    pub prefetch: bool,
    /// An eviction followed by a request within this many frames counts as thrash
    /// ([`StreamingStats::thrash`], [`StreamingDesc::thrash_window_frames`]; default 32); a
    /// statistic only.
    pub thrash_window_frames: u32,
    /// Frames a load in flight may go unwanted before it is cancelled
    /// ([`StreamingDesc::cancel_after_frames`]). `None` (the default):
    /// `max(sampling.frame_interval + frames_in_flight, 4)`; `Some(0)`: never; `Some(n)` must be at
    /// least `sampling.frame_interval + frames_in_flight` (the frames between two feedback
    /// reads, at most), else [`Streamer::new`] refuses it.
    pub cancel_after_frames: Option<u32>,
    /// Besides the mip tails, every mip of at most this many tiles per layer is pinned: loaded
    /// by [`Streamer::add_texture`] before it returns and never evicted
    /// ([`StreamingDesc::pinned_mip_tiles`], [`first_pinned_mip`](residency_core::streaming::first_pinned_mip)).
    /// Default 0: the tails only (without a tail, the single-tile mips). 1 or 4 give large
    /// textures a sharper first frame for 64 or 320 KiB each; at most
    /// [`MAX_PINNED_MIP_TILES`](Self::MAX_PINNED_MIP_TILES), else [`Streamer::new`] refuses it.
    pub pinned_mip_tiles: u32,
    /// Where the feedback buffers and image tables live. `true` (the default): device-local
    /// memory the host can map (ReBAR, the `DeviceLocalHostVisible` intent; any host-visible type
    /// where the device has none), so the shaders' reads and feedback atomics stay in the GPU's
    /// memory and the CPU's decode (the words the frame wrote only:
    /// `FrameWork::feedback_words_read`) reads uncached over the bus — on the H200 a 4K frame of
    /// 64 textures rendered in 12.4 ms instead of 16.3 ms (session 12, run 8). `false`: host
    /// memory the CPU reads cached (the `Readback` and `Upload` intents), every access of the
    /// shaders over the bus on a discrete GPU (for a host whose CPU reads of device memory are
    /// very slow).
    pub feedback_device_local: bool,
    /// Deferred feedback for a render of this extent (pixels, `[width, height]`; default `None`:
    /// shaders write feedback themselves, `feedback.glsl`). With it, the pixels that write
    /// feedback store one 16-byte record each into the frame's record buffer
    /// ([`FrameBindings::feedback_records`]; `feedback_deferred.glsl`, the shipped
    /// [`VT_QUAD_DEFERRED_FRAG`](crate::shaders::VT_QUAD_DEFERRED_FRAG) and its software twin) —
    /// no table read, no atomic — and a compute pass the streamer records after the draws
    /// ([`FrameBindings::resolve_feedback`], or [`FrameBindings::record`] after `draw`) folds
    /// them into the feedback buffer, so the CPU decodes the same requests. A writing pixel's
    /// subgroup no longer waits on its table reads and atomics (docs/streaming.md, "Deferred
    /// feedback"). One record per writing pixel: where several fragments of one pixel write
    /// (overdraw), one of them is kept. Pixels outside the extent write nothing. The record
    /// buffers (device-local, `ceil(w / (stride · block)) · ceil(h / (stride · block)) · block²`
    /// records of 16 bytes per frame in flight) may take at most 128 MiB each, else
    /// [`Streamer::new`] refuses the desc.
    pub deferred_feedback: Option<[u32; 2]>,
    /// Hardware path: a bind worker thread makes each frame's `vkQueueBindSparse` and stages its
    /// tiles' texels, between the frame's `end_frame` and the next `begin_frame`, instead of the
    /// frame thread inside `begin_frame` (SamplerFeedbackStreaming's update threads). The frame
    /// thread keeps the manager update, plans the binds (checks, coalesced entries) and publishes
    /// what the worker finished at the next frame: the min-LOD map updates and the bind the frame
    /// waits for. A tile so becomes visible to shaders one frame after the tick that made it
    /// resident ([`ResidentLatency::resident_frame`] says which), after its bind and upload as
    /// without the worker. Counted per frame in [`FrameWork::frame_thread_binds`] and
    /// [`FrameWork::frame_thread_tiles_staged`] (0 with the worker, but for ticks outside frames
    /// and retries of a failed one). Default off; ignored on the software path (no binds).
    /// The worker takes the device's queue locks: on a thread that holds one
    /// ([`Queue::lock`](crate::Queue::lock)), a call that would wait for the worker's job is
    /// refused with [`VulkanError::Reentrant`] (the job stays out), as a call that binds or
    /// submits there is without the worker, and a streamer dropped there leaves the worker to
    /// finish the job on its own.
    pub bind_worker: bool,
}

impl Default for StreamerDesc {
    fn default() -> Self {
        // The manager's policy defaults are the core's.
        let policy = StreamingDesc::default();
        Self {
            name: "streamer".to_owned(),
            budget_tiles: 256,
            upload_bytes_per_frame: 8 << 20,
            frames_in_flight: 2,
            path: ResidencyPath::Auto,
            workers: 2,
            feedback: FeedbackDesc::default(),
            staging_bytes: 32 << 20,
            sampling: FeedbackSampling::new(8, 1),
            readers: vk::PipelineStageFlags2::FRAGMENT_SHADER | vk::PipelineStageFlags2::COMPUTE_SHADER,
            tiles_per_heap: 2048,
            software_slot_format: None,
            max_loads_in_flight: policy.max_in_flight,
            eviction_delay_frames: policy.eviction_delay_frames,
            evictions_per_frame: policy.evictions_per_frame,
            prefetch: policy.prefetch,
            thrash_window_frames: policy.thrash_window_frames,
            cancel_after_frames: None,
            pinned_mip_tiles: policy.pinned_mip_tiles,
            feedback_device_local: true,
            deferred_feedback: None,
            bind_worker: false,
        }
    }
}

impl StreamerDesc {
    /// The most loader threads a streamer starts (more only contend for the same loads; a
    /// thread the system cannot start would otherwise fail inside the constructor).
    pub const MAX_WORKERS: usize = 256;

    /// The most tiles per layer a pinned mip may have ([`pinned_mip_tiles`](Self::pinned_mip_tiles)):
    /// a 1024 × 1024-texel RGBA8 mip.
    pub const MAX_PINNED_MIP_TILES: u32 = 64;

    /// Checks the fields a struct literal can set beyond what the `with_*` setters allow, against
    /// the device's `limits`; [`Streamer::new`] calls it first and creates nothing when it fails:
    /// the [`sampling`](Self::sampling) ([`FeedbackSampling::validate`]: no zero stride, interval
    /// or block, `stride²` within 32 bits), the [`feedback`](Self::feedback) records
    /// ([`FeedbackDesc::validate`]), at most [`MAX_WORKERS`](Self::MAX_WORKERS) loader threads, and
    /// a hardware heap (`tiles_per_heap` 64 KiB tiles) within `maxMemoryAllocationSize`, and the
    /// manager's policy (no zero `max_loads_in_flight`, `eviction_delay_frames` or
    /// `evictions_per_frame`; a `cancel_after_frames` not below the frames between two feedback
    /// reads; their setters store what they are given, so this refuses a zero from either). Values
    /// documented as clamped (`frames_in_flight` to 1..=8, a zero budget or worker count raised to
    /// 1) are clamped by the constructor, not refused.
    pub fn validate(&self, limits: &residency_core::profile::Limits) -> Result<(), DescError> {
        const DESC: &str = "StreamerDesc";
        self.sampling.validate()?;
        self.feedback.validate()?;
        self.validate_policy()?;
        if let Some(extent) = self.deferred_feedback {
            for (field, v) in
                [("deferred_feedback width", extent[0]), ("deferred_feedback height", extent[1])]
            {
                residency_core::desc::check_range(
                    DESC,
                    &self.name,
                    field,
                    u64::from(v),
                    1,
                    1 << 16,
                    "a render extent",
                )?;
            }
            let (_, records) = deferred::record_grid(self.sampling, extent);
            residency_core::desc::check_range(
                DESC,
                &self.name,
                "deferred feedback record bytes",
                records * deferred::RECORD_BYTES,
                0,
                deferred::MAX_RECORD_BYTES,
                "the guaranteed maxStorageBufferRange",
            )?;
        }
        residency_core::desc::check_range(
            DESC,
            &self.name,
            "workers",
            self.workers as u64,
            0,
            Self::MAX_WORKERS as u64,
            "StreamerDesc::MAX_WORKERS",
        )?;
        let heap = u64::from(self.tiles_per_heap.max(1)) * residency_core::tiles::STANDARD_TILE_BYTES;
        residency_core::desc::check_range(
            DESC,
            &self.name,
            "tiles_per_heap × 64 KiB",
            heap,
            1,
            limits.max_memory_allocation_size,
            "a heap is one allocation: maxMemoryAllocationSize",
        )
    }

    /// Sets the hardware path's tiles per heap (at least 1).
    pub fn with_tiles_per_heap(mut self, tiles: u32) -> Self {
        self.tiles_per_heap = tiles.max(1);
        self
    }

    /// Sets the name.
    pub fn with_name(mut self, name: impl Into<String>) -> Self {
        self.name = name.into();
        self
    }

    /// Sets the tile budget (at least 1).
    pub fn with_budget_tiles(mut self, tiles: u32) -> Self {
        if tiles == 0 {
            tracing::warn!("a tile budget of 0 is raised to 1");
        }
        self.budget_tiles = tiles.max(1);
        self
    }

    /// Sets the bytes of loads started per frame.
    pub fn with_upload_bytes_per_frame(mut self, bytes: u64) -> Self {
        self.upload_bytes_per_frame = bytes;
        self
    }

    /// Sets the frames in flight, clamped to 1..=8.
    pub fn with_frames_in_flight(mut self, frames: u32) -> Self {
        let clamped = frames.clamp(1, 8);
        if clamped != frames {
            tracing::warn!(frames, clamped, "frames in flight clamped to 1..=8");
        }
        self.frames_in_flight = clamped;
        self
    }

    /// Sets the residency path.
    pub fn with_path(mut self, path: ResidencyPath) -> Self {
        self.path = path;
        self
    }

    /// Sets the feedback sampling (stride 1: every pixel).
    pub fn with_sampling(mut self, sampling: FeedbackSampling) -> Self {
        self.sampling = sampling;
        self
    }

    /// Sets the shader stages that sample the textures and write feedback.
    pub fn with_readers(mut self, stages: vk::PipelineStageFlags2) -> Self {
        self.readers = stages;
        self
    }

    /// Sets the bytes of the staging ring.
    pub fn with_staging_bytes(mut self, bytes: u64) -> Self {
        self.staging_bytes = bytes;
        self
    }

    /// Sets the format whose software atlas slot one budget tile counts as
    /// ([`software_slot_format`](Self::software_slot_format)).
    pub fn with_software_slot_format(mut self, format: Option<Format>) -> Self {
        self.software_slot_format = format;
        self
    }

    /// Sets deferred feedback for a render of `extent` pixels, or turns it off
    /// ([`deferred_feedback`](Self::deferred_feedback)).
    pub fn with_deferred_feedback(mut self, extent: Option<[u32; 2]>) -> Self {
        self.deferred_feedback = extent;
        self
    }

    /// Sets whether a bind worker thread binds and stages (see [`bind_worker`](Self::bind_worker)).
    pub fn with_bind_worker(mut self, on: bool) -> Self {
        self.bind_worker = on;
        self
    }

    /// Sets the loader threads (at least 1).
    pub fn with_workers(mut self, workers: usize) -> Self {
        if workers == 0 {
            tracing::warn!("0 loader threads raised to 1");
        }
        self.workers = workers.max(1);
        self
    }
}

/// Why a streamer call failed. Out-of-memory and device loss come as [`StreamError::Vulkan`] (or
/// inside the sparse, software and upload errors).
#[derive(Debug, thiserror::Error)]
pub enum StreamError {
    /// A Vulkan call failed.
    #[error(transparent)]
    Vulkan(#[from] VulkanError),
    /// The hardware path: image creation or binding.
    #[error(transparent)]
    Sparse(#[from] SparseError),
    /// The software path (also: the requested path is not available here).
    #[error(transparent)]
    Software(#[from] SoftwareError),
    /// Staging.
    #[error(transparent)]
    Upload(#[from] UploadError),
    /// Allocating a feedback or table buffer.
    #[error(transparent)]
    Memory(#[from] crate::device::blocks::MemoryError),
    /// Mapping a feedback or table buffer.
    #[error(transparent)]
    Access(#[from] AccessError),
    /// The manager refused a frame or a registration.
    #[error(transparent)]
    Streaming(#[from] StreamingError),
    /// The feedback layout or a read-back was refused.
    #[error(transparent)]
    Feedback(#[from] FeedbackError),
    /// The texture's layout.
    #[error(transparent)]
    Layout(#[from] LayoutError),
    /// A use of another device was declared.
    #[error("the frame's GPU use belongs to another device")]
    ForeignUse(#[from] ForeignUse),
    /// Recording the frame's barriers.
    #[error(transparent)]
    Barrier(#[from] BarrierError),
    /// Recording the feedback reset.
    #[error(transparent)]
    Copy(#[from] CopyError),
    /// The device lacks a feature the streamer's configuration needs.
    #[error("`{device}` lacks {feature}, which {why}")]
    MissingFeature {
        /// The device.
        device: String,
        /// The Vulkan feature.
        feature: &'static str,
        /// What needs it.
        why: &'static str,
    },
    /// The readers are not shader stages.
    #[error("the streamer's readers must be shader stages, not {0:?}")]
    Readers(vk::PipelineStageFlags2),
    /// The description has a field the streamer cannot run with ([`StreamerDesc::validate`]);
    /// nothing was created.
    #[error(transparent)]
    Desc(#[from] DescError),
    /// The source is of a kind this streamer does not stream (yet).
    #[error("`{name}` cannot be streamed: {reason}")]
    UnsupportedSource {
        /// The source.
        name: String,
        /// Why.
        reason: String,
    },
    /// A block-compressed source on the software path whose format this device cannot sample
    /// from an atlas of that format (linear filtering, optimal tiling, copies into it); nothing
    /// was added.
    #[error(
        "`{name}` is block-compressed ({format}), which this device cannot sample with linear filtering: \
         no software atlas of it; stream it on the hardware path or as an uncompressed format"
    )]
    SoftwareBlockCompressed {
        /// The source.
        name: String,
        /// Its format.
        format: Format,
    },
    /// The coarse chain of a texture could not be loaded; the texture was not added.
    #[error("priming `{name}`: {source}")]
    Priming {
        /// The texture.
        name: String,
        /// The last failure of a pinned load.
        source: SourceError,
    },
    /// `begin_frame` twice without `end_frame`, or `end_frame` without `begin_frame`.
    #[error("frame protocol: {0}")]
    FrameOrder(&'static str),
    /// A texture handle of another streamer.
    #[error("texture {0:?} belongs to another streamer")]
    ForeignTexture(ImageId),
    /// A slice call on a texture that is not a sliced array ([`Streamer::add_sliced_texture`]).
    #[error("texture {0:?} is not a sliced array")]
    NotSliced(ImageId),
    /// A slice past a sliced array's; nothing changed.
    #[error("slice {slice} of texture {texture:?}, which has {slices} slices")]
    SliceOutOfRange {
        /// The texture.
        texture: ImageId,
        /// The slice asked for.
        slice: u32,
        /// Its slices.
        slices: u32,
    },
    /// A LOD bias for an empty slice (it holds no texture to sample); nothing changed.
    #[error("slice {slice} of texture {texture:?} is empty: it has no bias to set")]
    EmptySlice {
        /// The texture.
        texture: ImageId,
        /// The slice.
        slice: u32,
    },
    /// A LOD bias finer than the slice's texture or past the array's mips; nothing changed.
    #[error(
        "LOD bias {bias} for slice {slice} of texture {texture:?}: it must lie in {finest}..{mips} (the \
         slice's finest level to the array's mip count)"
    )]
    SliceBiasOutOfRange {
        /// The texture.
        texture: ImageId,
        /// The slice.
        slice: u32,
        /// The bias asked for.
        bias: u32,
        /// The slice's finest level.
        finest: u32,
        /// The array's mips.
        mips: u32,
    },
    /// The deferred-feedback resolve program could not be made.
    #[error(transparent)]
    Program(#[from] crate::pipelines::compute::ProgramError),
    /// The resolve's descriptor set could not be made.
    #[error(transparent)]
    Binding(#[from] crate::pipelines::descriptors::BindingError),
    /// The resolve's dispatch was refused.
    #[error(transparent)]
    Dispatch(#[from] crate::pipelines::compute::DispatchError),
    /// A broken internal invariant (a bug).
    #[error("streamer bug: {0}")]
    Internal(String),
}

impl ResidencyError for StreamError {
    fn class(&self) -> ErrorClass {
        match self {
            StreamError::Vulkan(e) => e.class(),
            StreamError::Sparse(e) => e.class(),
            StreamError::Software(e) => e.class(),
            StreamError::Upload(e) => e.class(),
            StreamError::Memory(e) => e.class(),
            StreamError::Access(e) => e.class(),
            StreamError::Streaming(e) => e.class(),
            StreamError::Feedback(e) => e.class(),
            StreamError::Layout(e) => e.class(),
            StreamError::ForeignUse(e) => e.class(),
            StreamError::Barrier(e) => e.class(),
            StreamError::Copy(e) => e.class(),
            StreamError::Desc(e) => e.class(),
            StreamError::Program(e) => e.class(),
            StreamError::Binding(e) => e.class(),
            StreamError::Dispatch(e) => e.class(),
            StreamError::Priming { source, .. } => source.class(),
            StreamError::MissingFeature { .. }
            | StreamError::UnsupportedSource { .. }
            | StreamError::SoftwareBlockCompressed { .. } => ErrorClass::Unsupported,
            StreamError::Readers(_)
            | StreamError::FrameOrder(_)
            | StreamError::ForeignTexture(_)
            | StreamError::NotSliced(_)
            | StreamError::SliceOutOfRange { .. }
            | StreamError::EmptySlice { .. }
            | StreamError::SliceBiasOutOfRange { .. } => ErrorClass::Refused,
            StreamError::Internal(_) => ErrorClass::Unexpected,
        }
    }
}

/// A texture added to a [`Streamer`]. [`Streamer::remove_texture`] removes it at once (with a
/// typed error if that fails); dropping the handle removes it at the streamer's next
/// `begin_frame` (or `add_texture`): its loads are cancelled, its tiles go back to the budget and
/// its objects are destroyed after the frames that sampled it.
#[derive(Debug)]
pub struct VirtualTexture {
    id: ImageId,
    streamer: u64,
    /// Where a dropped handle leaves its id for the streamer (`None` once given back).
    dropped: Option<Arc<std::sync::Mutex<Vec<ImageId>>>>,
}

impl VirtualTexture {
    /// The texture's id in the manager (its page table: [`StreamingManager::residency`]; its
    /// requests' `image`).
    pub fn id(&self) -> ImageId {
        self.id
    }
}

impl PartialEq for VirtualTexture {
    fn eq(&self, other: &Self) -> bool {
        self.id == other.id && self.streamer == other.streamer
    }
}

impl Eq for VirtualTexture {}

impl Drop for VirtualTexture {
    fn drop(&mut self) {
        if let Some(dropped) = self.dropped.take() {
            dropped.locked().push(self.id);
        }
    }
}

/// Serials of streamers, so that a texture handle names one streamer's texture.
static STREAMERS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

/// A load that failed: the tile stays non-resident and its texture keeps its coarser data; wanted
/// again, it loads again.
#[derive(Debug)]
pub struct LoadFailure {
    /// The texture's name.
    pub texture: String,
    /// The unit.
    pub key: TileKey,
    /// Why.
    pub error: SourceError,
}

/// The streamer's counters beyond the manager's.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StreamerStats {
    /// Frames begun.
    pub frames: u64,
    /// Frames that waited for their feedback slot (the frame `frames_in_flight` back).
    pub slot_waits: u64,
    /// Frames whose feedback was read back and decoded.
    pub feedback_frames_read: u64,
    /// Feedback buffers that overflowed (records dropped; their bitsets still de-duplicate).
    pub feedback_overflows: u64,
    /// Loads that failed (see [`Streamer::take_load_failures`]).
    pub loads_failed: u64,
    /// Sparse binds submitted (one `vkQueueBindSparse` each).
    pub binds: u64,
    /// Of them, binds that unbound tiles and so waited on the GPU for the frames in flight.
    pub unbinds_after_frames: u64,
    /// Frames recorded through [`FrameBindings::record`].
    pub frames_recorded: u64,
    /// Finished loads left for a later frame because this frame's staging share was used up.
    pub loads_deferred: u64,
    /// Ticks whose binds or staging failed and were applied again at a later tick (the error
    /// was returned by that frame's `begin_frame`; rendering goes on from coarser data).
    pub ticks_retried: u64,
    /// Frames ended with [`Streamer::abandon_frame`] (their submission failed): their staged
    /// copies were queued again.
    pub frames_abandoned: u64,
    /// The work of the last `begin_frame`, counted (not timed): it follows what the frame's
    /// feedback asked for and what changed, not how many textures are registered.
    pub last_frame_work: FrameWork,
    /// Textures visited by every frame so far ([`FrameWork::textures_visited`] summed).
    pub textures_visited: u64,
    /// Feedback words read by every frame so far ([`FrameWork::feedback_words_read`] summed).
    pub feedback_words_read: u64,
    /// Binds the bind worker submitted ([`StreamerDesc::bind_worker`]; also in [`binds`](Self::binds)).
    pub worker_binds: u64,
    /// Tiles whose texels the bind worker staged.
    pub worker_tiles_staged: u64,
}

/// What one `begin_frame` did, counted: the streamer's per-frame cost in units that do not depend
/// on the machine's speed ([`StreamerStats::last_frame_work`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FrameWork {
    /// Distinct textures the frame did per-texture work for: those its feedback named (their
    /// counters), and those with loads started, finished, failed or cancelled, tiles evicted or
    /// page tables changed. A texture nobody sampled and with nothing pending is not visited.
    pub textures_visited: u32,
    /// Textures whose feedback bitsets were decoded: those the frame's shaders marked touched
    /// (summed over the feedback frames read).
    pub feedback_images_decoded: u32,
    /// Words of feedback read back and decoded (header, touched bitset, records, the touched
    /// textures' bitsets, one pixel counter per request).
    pub feedback_words_read: u64,
    /// Feedback requests given to the manager.
    pub requests: u32,
    /// `vkQueueBindSparse` calls the frame thread made in the frame's `begin_frame` (0 with
    /// [`StreamerDesc::bind_worker`], but for a retried tick).
    pub frame_thread_binds: u32,
    /// Tiles whose texels the frame thread staged in the frame's `begin_frame` (0 with
    /// [`StreamerDesc::bind_worker`], but for a retried tick).
    pub frame_thread_tiles_staged: u32,
}

/// Residency's own memory behind a streamer's textures, apart from their texels (the tile heaps
/// or atlases: [`Streamer::backing_bytes`]): what virtual size and texture count cost
/// ([`Streamer::overhead`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StreamerOverhead {
    /// Textures counted.
    pub textures: u64,
    /// Host memory of the manager's page tables: entries, residency bits, the CPU min-LOD map and
    /// the region covers behind it (`PageTable::memory_bytes`).
    pub page_table_bytes: u64,
    /// Device memory of the maps the shaders read: the min-LOD maps (hardware) or the indirection
    /// textures (software), and the sliced arrays' per-slice LOD-bias buffers.
    pub map_bytes: u64,
    /// Host-visible memory of the feedback buffers and image tables of every ring slot.
    pub feedback_bytes: u64,
    /// The host-visible staging ring.
    pub staging_bytes: u64,
}

impl StreamerOverhead {
    /// Everything together.
    pub fn total_bytes(&self) -> u64 {
        self.page_table_bytes + self.map_bytes + self.feedback_bytes + self.staging_bytes
    }

    /// [`total_bytes`](Self::total_bytes) over the textures (0 without textures).
    pub fn per_texture_bytes(&self) -> f64 {
        if self.textures == 0 {
            0.0
        } else {
            self.total_bytes() as f64 / self.textures as f64
        }
    }
}

/// When a unit became resident, for request-to-resident latency in time: the renderer maps the
/// frames to its GPU timestamps (the end of the requesting frame's feedback writes, the start of
/// the first frame that samples the unit).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ResidentLatency {
    /// The unit.
    pub key: TileKey,
    /// The frame whose feedback first wanted it (`None`: priming wanted it, before any frame).
    pub requested_frame: Option<u64>,
    /// The frame whose `begin_frame` made it resident: its recording copies the texels before
    /// its draws, so it is the first frame that samples them. With
    /// [`StreamerDesc::bind_worker`], the frame after the tick's (the worker binds and stages in
    /// between).
    pub resident_frame: u64,
}

/// What one frame's feedback asked for, once read back ([`Streamer::take_feedback_frames`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FeedbackFrame {
    /// The frame that wrote it.
    pub frame: u64,
    /// Distinct tiles its sampled pixels missed (sampled coarser than they asked): 0 means no
    /// sampled pixel needed a fallback.
    pub misses: u64,
    /// Distinct tiles asked for by LOD warnings (ahead of need).
    pub warnings: u64,
    /// Whether requests were dropped (more distinct tiles than the record capacity).
    pub overflowed: bool,
}

/// Latencies kept for [`Streamer::take_latencies`] at most (the oldest go first).
const KEPT_LATENCIES: usize = 1 << 16;

/// One texture's counters.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TextureStats {
    /// Tiles resident now (its mip tail not counted).
    pub resident_tiles: u32,
    /// Units (tiles and tails) made resident since it was added, priming included.
    pub units_streamed: u64,
    /// Tiles evicted.
    pub tiles_evicted: u64,
    /// Loads that failed.
    pub loads_failed: u64,
    /// Distinct tiles its feedback asked for in the frames read at the last `begin_frame`.
    pub requests: u64,
    /// Pixels that asked (sampled pixels only; 0 without pixel counting).
    pub pixels: u64,
}

/// One texture's part of a frame's bindings.
#[derive(Clone, Copy, Debug)]
pub struct TextureBinding<'a> {
    /// The texture's id.
    pub id: ImageId,
    /// Its name.
    pub name: &'a str,
    /// Its slot in this frame's feedback image table (the shader's `imageSlot`).
    pub feedback_slot: u16,
    /// The views to bind.
    pub views: TextureViews<'a>,
    /// A sliced array's per-slice LOD-bias buffer ([`Streamer::add_sliced_texture`]; a storage
    /// buffer of one `float` per slice, `residency_slices.glsl`), `None` for other textures.
    pub slice_bias: Option<&'a Buffer>,
}

/// What the renderer binds for one frame.
#[derive(Debug)]
pub struct FrameBindings<'a> {
    /// The frame (counted from 0 by `begin_frame`).
    pub frame: u64,
    /// The ring slot (`frame % frames_in_flight`): per-frame resources of the renderer's own
    /// can use the same index.
    pub slot: usize,
    /// The path the textures take.
    pub path: ResidencyPath,
    /// Changes whenever the textures, the feedback buffer or the image table of this slot may
    /// have changed: descriptor sets made for `(slot, generation)` can be reused until it does.
    pub generation: u64,
    /// The GLSL include that samples them (`residency.glsl` or `residency_software.glsl`, in
    /// `shaders/include/`), with `feedback.glsl` for the feedback writes.
    pub include: &'static str,
    /// The feedback buffer this frame writes (reset for it), `None` while no texture is added.
    pub feedback: Option<&'a Buffer>,
    /// The feedback image table (read-only storage buffer), `None` while no texture is added.
    pub image_table: Option<&'a Buffer>,
    /// With [`StreamerDesc::deferred_feedback`]: the record buffer this frame's shaders write
    /// (`feedback_deferred.glsl`, binding 2 of the deferred `vt_quad` shaders) instead of the
    /// feedback buffer and image table; `None` otherwise or while no texture is added.
    pub feedback_records: Option<&'a Buffer>,
    /// The layout of both.
    pub layout: Option<&'a FeedbackLayout>,
    /// The textures, by id ([`FrameBindings::textures`] lists them in feedback-slot order).
    all: AllTextures<'a>,
    /// Which pixels write feedback this frame (push it to the shader: `feedbackPixelWrites`).
    pub sampling: FeedbackSampling,
    /// Whether this frame writes feedback at all (`sampling`'s interval; false while no texture
    /// is added): shaders skip their feedback writes when it is false.
    pub feedback_active: bool,
    ctx: FrameContext<'a>,
}

/// The streamer's textures, for [`FrameBindings`] (which lists them only when asked).
#[derive(Clone, Copy)]
struct AllTextures<'a>(&'a HashMap<ImageId, Texture>);

impl std::fmt::Debug for AllTextures<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} textures", self.0.len())
    }
}

/// The device feature a streamer with these `readers` on `path` needs and `features` lacks, with
/// what needs it.
fn missing_feature(
    features: &crate::device::EnabledFeatures,
    readers: vk::PipelineStageFlags2,
    path: ResidencyPath,
) -> Option<(&'static str, &'static str)> {
    if readers.contains(vk::PipelineStageFlags2::FRAGMENT_SHADER) && !features.fragment_stores_and_atomics {
        return Some((
            "fragmentStoresAndAtomics",
            "feedback written from fragment shaders needs (set `readers` to the compute stage to write it from compute)",
        ));
    }
    if path == ResidencyPath::Hardware && !features.shader_resource_residency {
        return Some(("shaderResourceResidency", "the hardware path's residency codes in shaders need"));
    }
    None
}

/// With a stride and a square side that are powers of two, `vt_quad.glsl`'s shift-and-mask test:
/// the frame's phase (`x | y << 16`) and `1 | log2(block) << 8 | log2(stride) << 16`; else zeros
/// (the shader divides).
fn fast_sampling_words(s: FeedbackSampling, frame: u64) -> (u32, u32) {
    // The phase travels as two 16-bit halves: larger strides take the dividing path.
    if !s.pixel_stride.is_power_of_two() || s.pixel_stride > 1 << 16 || !s.block.is_power_of_two() {
        return (0, 0);
    }
    // The same phase as the CPU rule, without wrapping (`FeedbackSampling::phase`).
    let [x, y] = s.phase(frame);
    (x | y << 16, 1 | s.block.trailing_zeros() << 8 | s.pixel_stride.trailing_zeros() << 16)
}

/// What [`FrameBindings::record`] needs of the streamer.
#[derive(Debug)]
struct FrameContext<'a> {
    /// The streamer's serial (`VirtualTexture::streamer`): a handle of another streamer names
    /// none of this frame's textures, whatever its id.
    streamer: u64,
    device: &'a Arc<Device>,
    uploader: &'a Uploader,
    /// The sparse bind the frame's submission waits for.
    bind_wait: Option<GpuUse>,
    readers: vk::PipelineStageFlags2,
    /// The feedback header for this frame, unless the CPU wrote the whole buffer.
    header: Option<Vec<u8>>,
    /// The byte ranges of the feedback buffer to zero before the frame: what the slot's last
    /// frame wrote (`None`: all of it after the header).
    clear: Option<Vec<(u64, u64)>>,
    recorded: &'a AtomicBool,
    /// Deferred feedback: the resolve program and this slot's records.
    deferred: Option<(&'a ComputeProgram, &'a deferred::Records)>,
    /// Record cells per row (`feedback_words`' control bits 8..31), 0 without deferred feedback.
    record_row_cells: u32,
    /// The render's extent the records are laid out for (`StreamerDesc::deferred_feedback`).
    record_extent: Option<[u32; 2]>,
    /// Whether this frame's feedback was resolved (`resolve_feedback`).
    resolved: &'a AtomicBool,
    /// The device's universal timeline value submitted when the frame was recorded.
    recorded_after: &'a AtomicU64,
    /// The command buffer the frame was recorded into (`resolve_feedback` records there only).
    recorded_into: &'a AtomicU64,
    /// The announced value of each renderer timeline when the frame was recorded.
    recorded_floor: &'a std::sync::Mutex<Vec<(residency_core::sync::ClockId, u64)>>,
}

impl<'a> FrameBindings<'a> {
    /// The textures, in feedback-slot order (the slot is the shader's `imageSlot`). Built on each
    /// call, for every texture: call it when [`generation`](Self::generation) changed (descriptor
    /// sets made for a generation stay valid until it does), not every frame.
    pub fn textures(&self) -> Vec<TextureBinding<'a>> {
        let Some(layout) = self.layout else { return Vec::new() };
        layout
            .images()
            .iter()
            .enumerate()
            .filter_map(|(slot, i)| Some(self.binding(i.image, slot as u16, self.all.0.get(&i.image)?)))
            .collect()
    }

    /// The binding of `texture` (`None`: not one of the streamer's textures now, or a texture of
    /// another streamer, whose id may equal one of this streamer's); a lookup, not a walk of the
    /// textures.
    pub fn texture(&self, texture: &VirtualTexture) -> Option<TextureBinding<'a>> {
        if texture.streamer != self.ctx.streamer {
            return None;
        }
        let slot = self.layout?.slot_of(texture.id)?;
        Some(self.binding(texture.id, slot, self.all.0.get(&texture.id)?))
    }

    /// Holds every texture's GPU objects (the views this frame's [`textures`](Self::textures)
    /// show, and so their images; a sliced array's bias buffer) in `rec` until its submission
    /// completes (or until `rec` is dropped unsubmitted), for commands on them that `rec`'s helpers
    /// did not record — layout transitions recorded with raw Vulkan into `rec`'s command buffer
    /// or into other command buffers of the same submission (as `residency-wgpu`'s streamer part
    /// does). Without it, a texture removed (or the streamer dropped) between recording and
    /// submission is destroyed after the frames already in flight, before such a submission runs.
    /// Walks every texture, as [`textures`](Self::textures) does. A recording of another device
    /// is refused ([`StreamError::Vulkan`]) and keeps nothing.
    pub fn keep_textures(&self, rec: &mut Recording<'_>) -> Result<(), StreamError> {
        rec.accepts("the streamer's textures", self.ctx.device)?;
        for texture in self.all.0.values() {
            texture.keep_in(rec);
        }
        Ok(())
    }

    fn binding(&self, id: ImageId, slot: u16, t: &'a Texture) -> TextureBinding<'a> {
        TextureBinding {
            id,
            name: &t.name,
            feedback_slot: slot,
            views: t.views(),
            slice_bias: t.slices.as_ref().map(|s| &s.buffer),
        }
    }

    /// The feedback words of the shipped `vt_quad` fragment shaders' push constants for drawing
    /// `texture` (bytes 64..96, after the view-projection): its feedback slot, the frame, the
    /// pixel stride and frame interval, whether to write feedback (`feedback` and this frame's
    /// [`feedback_active`](Self::feedback_active)), and the pixel square side. A shader of your
    /// own can take the same words (`shaders/include/vt_quad.glsl`).
    pub fn feedback_words(&self, texture: &TextureBinding<'_>, feedback: bool) -> [u32; 8] {
        let s = self.sampling;
        let (phase, fast) = fast_sampling_words(s, self.frame);
        [
            u32::from(texture.feedback_slot),
            self.frame as u32,
            s.pixel_stride,
            s.frame_interval,
            u32::from(feedback && self.feedback_active) | self.ctx.record_row_cells << 8,
            s.block,
            phase,
            fast,
        ]
    }

    /// For a feedback pass of its own (the shipped `vt_feedback.frag`, `shaders::VT_FEEDBACK_FRAG`)
    /// with [`StreamerDesc::deferred_feedback`] and single pixels (`sampling.block` 1): the extent
    /// of its target (the record grid, `ceil(extent / pixel_stride)`) and the render's
    /// `view_proj` (column-major, Vulkan clip space) moved so that each writing pixel of this
    /// frame, `(stride · i + px, stride · j + py)`, lands on the target's pixel centre `(i, j)`,
    /// its record cell; the clip `w` is unchanged. Draw the same geometry with it, and
    /// [`feedback_pass_words`](Self::feedback_pass_words), in frames that are
    /// [`feedback_active`](Self::feedback_active), before [`resolve_feedback`](Self::resolve_feedback).
    /// `None` without deferred feedback or with squares of pixels.
    pub fn feedback_pass_view(&self, view_proj: &[f32; 16]) -> Option<([u32; 2], [f32; 16])> {
        let extent = self.ctx.record_extent.filter(|_| self.sampling.block.max(1) == 1)?;
        Some(deferred::pass_view(self.sampling, self.frame, extent, view_proj))
    }

    /// The words of `vt_feedback.frag`'s push constants for drawing `texture` in a feedback pass
    /// of its own (bytes 64..80, after the view-projection of
    /// [`feedback_pass_view`](Self::feedback_pass_view)): its feedback slot, the record cells per
    /// row, the pixel stride and this frame's phase (`x | y << 16`).
    pub fn feedback_pass_words(&self, texture: &TextureBinding<'_>) -> [u32; 4] {
        let [x, y] = self.sampling.phase(self.frame);
        [
            u32::from(texture.feedback_slot),
            self.ctx.record_row_cells,
            self.sampling.pixel_stride,
            (x & 0xFFFF) | (y & 0xFFFF) << 16,
        ]
    }

    /// Records the frame into `rec` (a command buffer submitted on the device's universal queue):
    /// the streamer's part, then `draw` (the renderer's draws or dispatches, which sample the
    /// textures and write feedback), then the barrier that makes the feedback visible to the
    /// host. The streamer's part: the submission waits for the frame's sparse binds
    /// ([`Recording::wait_for`]), the feedback buffer is reset (its header included), the staged
    /// texels and map updates are copied, and barriers order all of it before `draw`'s shader
    /// reads and writes at [`StreamerDesc::readers`] (and after the frames before it on the
    /// queue, which may sample what the copies overwrite). Returns what `draw` returns.
    ///
    /// Record each frame once (a second `record`, also one from inside `draw`, is
    /// [`StreamError::FrameOrder`]); a frame never recorded writes no feedback, and its copies go
    /// into the next recorded frame. When the submission of a recorded frame fails, end the frame
    /// with [`Streamer::abandon_frame`] instead of [`Streamer::end_frame`]: it queues the
    /// frame's copies again and submits them, so the tiles the frame made resident receive their
    /// texels before any later frame samples them.
    pub fn record<R>(
        &self,
        rec: &mut Recording<'_>,
        draw: impl FnOnce(&mut Recording<'_>) -> R,
    ) -> Result<R, StreamError> {
        use vk::{AccessFlags2 as A, PipelineStageFlags2 as S};
        let ctx = &self.ctx;
        rec.accepts("the streamer's frame", ctx.device)?;
        // Raised before anything is recorded, so that a `record` from inside `draw` (the same
        // frame again, into this recording or another) is refused too: it would take the
        // uploader's copies a second time and lose what `abandon_frame` queues again.
        if ctx.recorded.swap(true, Ordering::AcqRel) {
            return Err(StreamError::FrameOrder("a frame recorded twice (or from inside its own draw)"));
        }
        ctx.recorded_into.store(vk::Handle::as_raw(rec.raw()), Ordering::Release);
        if let Err(e) = self.record_streamer_part(rec) {
            // Refused before the uploader took the frame's copies (what can fail comes before:
            // the device check, the waits, the feedback reset, the copies' layout checks; the
            // barriers after them use the readers `Streamer::new` checked): it may be recorded
            // again.
            ctx.recorded.store(false, Ordering::Release);
            return Err(e);
        }
        // A submission of this recording through residency signals a later universal value.
        ctx.recorded_after.store(ctx.device.submitted_work().point.value, Ordering::Release);
        // A frame signalling a renderer timeline signals above what it announced by now.
        *ctx.recorded_floor.locked() = ctx.device.announced_values();
        let out = draw(rec);
        if !ctx.resolved.load(Ordering::Acquire) {
            self.resolve_feedback(rec)?;
        }
        if self.feedback_active && self.feedback.is_some() {
            rec.memory_barrier(MemoryDependency {
                src_stages: self.shader_stages(),
                src_access: A::SHADER_WRITE,
                dst_stages: S::HOST,
                dst_access: A::HOST_READ,
            })?;
        }
        Ok(out)
    }

    /// With [`StreamerDesc::deferred_feedback`]: records the pass that folds this frame's
    /// feedback records into its feedback buffer (a barrier from the draws' stores at
    /// [`StreamerDesc::readers`], one compute dispatch over the records), into `rec`. Call it
    /// inside [`FrameBindings::record`]'s `draw`, after the draws that write feedback, to place
    /// it yourself (e.g. inside your own timestamps); otherwise `record` records it right after
    /// `draw`. Nothing is recorded without deferred feedback or in a frame that writes none.
    /// Refused outside `record`, into another recording than the one `draw` was given, and a
    /// second time in a frame ([`StreamError::FrameOrder`]).
    pub fn resolve_feedback(&self, rec: &mut Recording<'_>) -> Result<(), StreamError> {
        let ctx = &self.ctx;
        if !ctx.recorded.load(Ordering::Acquire) {
            return Err(StreamError::FrameOrder("resolve_feedback outside the frame's record"));
        }
        // The recording `draw` was given, not another one (whose command buffer would resolve
        // the records apart from the frame's draws and barriers).
        if ctx.recorded_into.load(Ordering::Acquire) != vk::Handle::as_raw(rec.raw()) {
            return Err(StreamError::FrameOrder("resolve_feedback into another recording than the frame's"));
        }
        if ctx.resolved.swap(true, Ordering::AcqRel) {
            return Err(StreamError::FrameOrder("the frame's feedback resolved twice"));
        }
        let (Some((program, records)), true) = (ctx.deferred, self.feedback_active) else { return Ok(()) };
        rec.accepts("the streamer's feedback resolve", ctx.device)?;
        records.record_resolve(rec, program, ctx.readers)
    }

    /// The stages that touch the feedback: the readers, and the resolve's compute stage with
    /// deferred feedback.
    fn shader_stages(&self) -> vk::PipelineStageFlags2 {
        match self.ctx.deferred {
            Some(_) => self.ctx.readers | vk::PipelineStageFlags2::COMPUTE_SHADER,
            None => self.ctx.readers,
        }
    }

    /// The streamer's part of [`FrameBindings::record`]: the bind wait, the feedback reset, the
    /// staged copies and the barriers around them.
    fn record_streamer_part(&self, rec: &mut Recording<'_>) -> Result<(), StreamError> {
        use vk::{AccessFlags2 as A, PipelineStageFlags2 as S};
        let ctx = &self.ctx;
        let readers = self.shader_stages();
        if let Some(bind) = ctx.bind_wait {
            rec.wait_for(bind)?;
        }
        // Earlier shader work and copies (which may read or write what this frame's transfers
        // write) before them.
        rec.memory_barrier(MemoryDependency {
            src_stages: readers | S::ALL_TRANSFER,
            src_access: A::SHADER_WRITE | A::TRANSFER_WRITE,
            dst_stages: S::ALL_TRANSFER,
            dst_access: A::TRANSFER_WRITE,
        })?;
        if let (true, Some(feedback), Some(header)) = (self.feedback_active, self.feedback, &ctx.header) {
            let size = self.layout.map_or(0, |l| l.buffer_bytes());
            let header_bytes = header.len() as u64;
            match &ctx.clear {
                // Only what the slot's last frame wrote: the reset follows the frame's feedback,
                // not the buffer's size (every texture's bitsets and counters).
                Some(ranges) => {
                    for &(offset, bytes) in ranges {
                        rec.fill_buffer(feedback, offset, bytes, 0)?;
                    }
                }
                None if size > header_bytes => {
                    rec.fill_buffer(feedback, header_bytes, size - header_bytes, 0)?
                }
                None => {}
            }
            rec.update_buffer(feedback, 0, header)?;
        }
        // A record buffer's first frame (or one after an abandoned frame): zeroed once, then each
        // resolve zeroes the records it folds.
        if let (true, Some((_, records))) = (self.feedback_active, ctx.deferred) {
            if !records.clean {
                rec.fill_buffer(&records.buffer, 0, records.buffer.size(), 0)?;
            }
        }
        ctx.uploader.record_requeueable(rec, readers)?;
        rec.memory_barrier(MemoryDependency {
            src_stages: S::ALL_TRANSFER,
            src_access: A::TRANSFER_WRITE,
            dst_stages: readers,
            dst_access: A::SHADER_READ | A::SHADER_WRITE,
        })?;
        Ok(())
    }
}

/// One feedback ring slot: its buffers, sized for the layout of `generation`, and the frame in
/// it until its feedback was read.
struct Slot {
    feedback: Buffer,
    table: Buffer,
    /// Deferred feedback's record buffer and resolve set.
    records: Option<deferred::Records>,
    layout: Arc<FeedbackLayout>,
    generation: u64,
    /// The frame written here, its manager tick and the end of its GPU work.
    submitted: Option<(u64, u64, GpuUse)>,
    /// The byte ranges (past the header) the last frame written here may have written, known
    /// once its feedback was decoded: the next reset zeroes only these. `None`: unknown (a new
    /// buffer, an abandoned frame, a read that failed): the whole buffer is reset.
    written: Option<Vec<(u64, u64)>>,
}

/// The byte ranges past the header that the feedback `decoded` (written in a buffer of
/// `layout`) occupies: the records, the touched bitset, and the bitsets and counters of each
/// image it names (every touched image has a request).
fn written_ranges(
    layout: &FeedbackLayout,
    decoded: &residency_core::streaming::DecodedFeedback,
) -> Vec<(u64, u64)> {
    use residency_core::streaming::{FEEDBACK_KINDS, HEADER_WORDS, NO_COUNTS};
    let words = |start: u32, len: u64| (u64::from(start) * 4, len * 4);
    let records = u64::from(decoded.records.min(layout.desc().record_capacity));
    let mut ranges = vec![words(layout.touched_offset(), u64::from(layout.touched_words()))];
    if records > 0 {
        ranges.push(words(HEADER_WORDS, 2 * records));
    }
    let mut last = None;
    for r in &decoded.requests {
        // Sorted by image: each image once.
        if last == Some(r.image) {
            continue;
        }
        last = Some(r.image);
        let Some(img) = layout.slot_of(r.image).and_then(|s| layout.images().get(usize::from(s))) else {
            continue;
        };
        ranges.push(words(img.bits_offset, u64::from(FEEDBACK_KINDS * img.bit_words)));
        if img.counts_offset != NO_COUNTS {
            ranges.push(words(img.counts_offset, u64::from(FEEDBACK_KINDS) * u64::from(img.tile_count)));
        }
    }
    ranges.retain(|&(_, bytes)| bytes > 0);
    ranges
}

/// A finished load's tiles `(mip, x, y)` and their texels.
type Loaded = (Vec<(u32, u32, u32)>, Vec<Vec<u8>>);

/// A manager tick whose changes the GPU has not all received: its bind failed (nothing bound), or
/// staging failed part-way (the texels left are here). Applied again at the next tick, first.
struct Unapplied {
    out: FrameOutput,
    staged: HashMap<TileKey, Loaded>,
    /// Whether its binds were submitted.
    bound: bool,
    /// Whether its changes unbind tiles that no eviction names (a slice emptied or given another
    /// texture): the bind waits for the frames in flight as an eviction's does.
    unbinds: bool,
}

/// A frame tick handed to the bind worker, until published.
struct Deferred {
    out: FrameOutput,
    /// Not handed out yet (until the frame's `end_frame`).
    job: Option<bind_worker::Job>,
    /// Its outcome, where it ran on the frame thread (the worker was gone).
    done: Option<bind_worker::Done>,
    /// Whether its bind waits for the frames in flight (it unbinds).
    waited: bool,
}

/// A load given to the workers, until the manager was told of it.
struct Pending {
    tiles: Vec<(u32, u32, u32)>,
    /// Its texels once finished (`None` while the workers have it).
    done: Option<Result<Vec<Vec<u8>>, SourceError>>,
}

/// The streamer; see the module docs for the frame protocol.
pub struct Streamer {
    device: Arc<Device>,
    desc: StreamerDesc,
    path: ResidencyPath,
    manager: StreamingManager,
    loader: TileLoader<TileKey>,
    /// Shared with the bind worker, which stages its jobs' texels here.
    uploader: Arc<Uploader>,
    /// The bind worker ([`StreamerDesc::bind_worker`], hardware path).
    worker: Option<bind_worker::BindWorker>,
    /// The frame tick whose binds and staging the worker has (or will be given at `end_frame`),
    /// until joined and published.
    deferred: Option<Deferred>,
    textures: HashMap<ImageId, Texture>,
    /// Software path: the atlas of each texel format in use, which every texture of that format
    /// samples (each sized for the first budget: any tile of the pool may go to any texture; a
    /// texture holds its atlas too, so it outlives the texture on the GPU). The one of
    /// [`StreamerDesc::software_slot_format`] (RGBA8 by default) is made with the streamer, the
    /// others with their first texture.
    atlases: HashMap<Format, crate::sparse::software::SoftwareAtlas>,
    /// The budget the atlases were sized for.
    atlas_budget: u32,
    /// After the textures: fields drop in order, and the heaps go after the images bound to them.
    heaps: Option<TileHeaps>,
    next_id: u32,
    pending: HashMap<TileKey, Pending>,
    /// Loads of removed textures, and loads the manager cancelled, cancelled in the loader:
    /// reported to the manager as failed at the next tick, which ignores them.
    cancelled: Vec<TileKey>,
    layout: Option<Arc<FeedbackLayout>>,
    /// The textures or their settings changed since `layout` was made (`current_layout`).
    layout_stale: bool,
    generation: u64,
    ring: FeedbackRing,
    slots: Vec<Option<Slot>>,
    /// Deferred feedback's resolve program (after `slots`: their sets go first).
    resolve: Option<ComputeProgram>,
    /// Whether the current frame's feedback was resolved.
    resolved: AtomicBool,
    frame: u64,
    tick: u64,
    in_frame: bool,
    /// Decoded requests not yet given to the manager, and the tick of the oldest frame they come
    /// from.
    requests: Vec<TileRequest>,
    requested_in: u64,
    failures: Vec<LoadFailure>,
    stats: StreamerStats,
    /// The latest sparse bind, until a recorded frame waits for it.
    bind_wait: Option<GpuUse>,
    /// The ends of the frames that may still run (declared at `end_frame`).
    frame_uses: Vec<GpuUse>,
    /// Whether the current frame was recorded, and whether the CPU wrote its feedback.
    recorded: AtomicBool,
    /// The universal value submitted when the current frame was recorded: `end_frame` refuses a
    /// use of residency's submissions that ends before the frame's own submission.
    recorded_after: AtomicU64,
    /// The raw command buffer the current frame was recorded into: its feedback is resolved into
    /// that recording only.
    recorded_into: AtomicU64,
    /// The announced value of each renderer timeline when the current frame was recorded:
    /// `end_frame` refuses a point of one at or below it.
    recorded_floor: std::sync::Mutex<Vec<(residency_core::sync::ClockId, u64)>>,
    cpu_feedback: bool,
    /// The tick not applied to the GPU yet (its bind or staging failed).
    unapplied: Option<Unapplied>,
    serial: u64,
    /// The frame of each recent manager tick (priming's ticks have none).
    tick_frames: std::collections::VecDeque<(u64, u64)>,
    latencies: std::collections::VecDeque<ResidentLatency>,
    feedback_frames: std::collections::VecDeque<FeedbackFrame>,
    /// Ids of texture handles dropped without `remove_texture`.
    dropped: Arc<std::sync::Mutex<Vec<ImageId>>>,
    /// Textures whose [`TextureStats::requests`] and `pixels` the last feedback read set: reset
    /// at the next read (not every texture's).
    requested: Vec<ImageId>,
    /// The textures the current `begin_frame` visited ([`FrameWork::textures_visited`]).
    visited: std::collections::HashSet<ImageId>,
    /// Binds and tiles staged on the frame thread so far ([`FrameWork::frame_thread_binds`],
    /// [`FrameWork::frame_thread_tiles_staged`]).
    inline_binds: u64,
    inline_tiles: u64,
}

impl Drop for Streamer {
    fn drop(&mut self) {
        // The worker's job finishes first (its bind and copies retire through the device); what
        // it did is not published (nothing samples it any more).
        if let Some(worker) = self.worker.as_mut().filter(|w| !w.blocked_here()) {
            let _ = worker.join();
        }
        // The frames that may still sample the textures: their objects outlive them (a frame
        // declares nothing per texture; a removed texture is given the running frames at its
        // removal, and these are the last ones).
        let running = self.running_frames();
        for texture in self.textures.values() {
            for &until in &running {
                // Another device's use cannot be among the frames (`end_frame` checked it).
                let _ = texture.used_until(until);
            }
        }
    }
}

impl std::fmt::Debug for Streamer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Streamer")
            .field("name", &self.desc.name)
            .field("path", &self.path)
            .field("textures", &self.textures.len())
            .field("frame", &self.frame)
            .finish_non_exhaustive()
    }
}

impl Streamer {
    /// A streamer on `device` with no textures. The path is resolved for RGBA8 on this device
    /// (`Hardware` where it has no sparse residency: [`SoftwareError`]).
    pub fn new(device: &Arc<Device>, desc: StreamerDesc) -> Result<Streamer, StreamError> {
        desc.validate(&device.profile().limits)?;
        if desc.readers.is_empty() || !crate::sync::recording::SHADER_STAGES.contains(desc.readers) {
            return Err(StreamError::Readers(desc.readers));
        }
        let path = device.residency_path(Format::R8G8B8A8Unorm, desc.path)?;
        if let Some((feature, why)) = missing_feature(&device.features(), desc.readers, path) {
            return Err(StreamError::MissingFeature { device: device.name().to_owned(), feature, why });
        }
        let frames_in_flight = desc.frames_in_flight.clamp(1, 8);
        let mut streaming = desc
            .manager_policy(frames_in_flight)
            .with_name(desc.name.clone())
            .with_upload_budget_bytes(desc.upload_bytes_per_frame);
        let mut atlas = None;
        let mut atlas_budget = 0;
        // The software path's first atlas: of the format its slots are counted at (RGBA8 by default).
        let first_atlas = desc.software_slot_format.unwrap_or(Format::R8G8B8A8Unorm);
        let heaps = if path == ResidencyPath::Software {
            let budget = desc
                .budget_tiles
                .max(1)
                .div_ceil(SOFTWARE_TILES_PER_HEAP)
                .saturating_mul(SOFTWARE_TILES_PER_HEAP);
            streaming = streaming.with_tiles_per_heap(SOFTWARE_TILES_PER_HEAP).with_budget_tiles(budget);
            if let Some(format) = desc.software_slot_format {
                streaming = streaming.with_tile_bytes(residency_core::tiles::software_slot_bytes(
                    format,
                    crate::sparse::software::DEFAULT_BORDER,
                ));
            }
            let atlas_desc = crate::sparse::software::SoftwareAtlasDesc::new(
                format!("{} atlas", desc.name),
                first_atlas,
                1,
            )
            .with_tiles_per_heap(SOFTWARE_TILES_PER_HEAP)
            .with_capacity_for_budget(budget);
            let made = crate::sparse::software::SoftwareAtlas::new(device, &atlas_desc)?;
            // The atlas cannot grow: pinned loads (which start whatever the budget) stay within
            // its whole heaps, and a texture whose pinned tiles would not fit is refused.
            let slots = made.layout().capacity() / SOFTWARE_TILES_PER_HEAP * SOFTWARE_TILES_PER_HEAP;
            streaming = streaming.with_capacity_tiles(Some(slots));
            atlas = Some(made);
            atlas_budget = budget;
            None
        } else {
            streaming = streaming
                .with_budget_tiles(desc.budget_tiles.max(1))
                .with_tiles_per_heap(desc.tiles_per_heap);
            Some(TileHeaps::new(Arc::clone(device), &format!("{} tiles", desc.name))?)
        };
        let resolve =
            desc.deferred_feedback.map(|_| deferred::resolve_program(device, &desc.name)).transpose()?;
        let uploader = Arc::new(Uploader::new(device, &desc.name, desc.staging_bytes)?);
        let worker = match (desc.bind_worker, &heaps) {
            (true, Some(_)) => Some(bind_worker::BindWorker::new(&desc.name, Arc::clone(&uploader))?),
            _ => None,
        };
        Ok(Streamer {
            device: Arc::clone(device),
            path,
            manager: StreamingManager::new(streaming),
            loader: TileLoader::new(desc.workers.max(1)),
            uploader,
            worker,
            deferred: None,
            heaps,
            textures: HashMap::new(),
            atlases: atlas.into_iter().map(|a| (first_atlas, a)).collect(),
            atlas_budget,
            next_id: 1,
            pending: HashMap::new(),
            cancelled: Vec::new(),
            layout: None,
            layout_stale: false,
            generation: 0,
            ring: FeedbackRing::new(frames_in_flight),
            slots: (0..frames_in_flight).map(|_| None).collect(),
            resolve,
            resolved: AtomicBool::new(false),
            frame: 0,
            tick: 0,
            in_frame: false,
            requests: Vec::new(),
            requested_in: 0,
            failures: Vec::new(),
            stats: StreamerStats::default(),
            bind_wait: None,
            frame_uses: Vec::new(),
            recorded: AtomicBool::new(false),
            recorded_after: AtomicU64::new(0),
            recorded_into: AtomicU64::new(0),
            recorded_floor: std::sync::Mutex::new(Vec::new()),
            cpu_feedback: false,
            unapplied: None,
            serial: STREAMERS.fetch_add(1, Ordering::Relaxed),
            tick_frames: Default::default(),
            latencies: Default::default(),
            feedback_frames: Default::default(),
            dropped: Arc::default(),
            requested: Vec::new(),
            visited: Default::default(),
            inline_binds: 0,
            inline_tiles: 0,
            desc: StreamerDesc { frames_in_flight, ..desc },
        })
    }

    /// The path the textures take.
    pub fn path(&self) -> ResidencyPath {
        self.path
    }

    /// The device.
    pub fn device(&self) -> &Arc<Device> {
        &self.device
    }

    /// The manager (page tables, pool, statistics).
    pub fn manager(&self) -> &StreamingManager {
        &self.manager
    }

    /// The manager's statistics.
    pub fn manager_stats(&self) -> &StreamingStats {
        self.manager.stats()
    }

    /// The streamer's own counters.
    pub fn stats(&self) -> &StreamerStats {
        &self.stats
    }

    /// `texture`'s counters (`None`: not one of this streamer's).
    pub fn texture_stats(&self, texture: &VirtualTexture) -> Option<TextureStats> {
        if texture.streamer != self.serial {
            return None;
        }
        let mut stats = self.textures.get(&texture.id)?.stats.clone();
        stats.resident_tiles =
            self.manager.residency(texture.id).map_or(0, |r| r.page_table().resident_tiles());
        Some(stats)
    }

    /// Tiles resident at most from the next frame on (at least 1): a cut evicts down to it over
    /// the next frames while the textures fall back to coarser mips. The software path's atlas
    /// was allocated for the first budget: it is never raised above that, and rounds up to whole
    /// heaps of 16 tiles. Returns the budget in effect.
    pub fn set_budget_tiles(&mut self, tiles: u32) -> u32 {
        let mut tiles = tiles.max(1);
        if self.path == ResidencyPath::Software {
            tiles = tiles
                .min(self.desc.budget_tiles)
                .div_ceil(SOFTWARE_TILES_PER_HEAP)
                .saturating_mul(SOFTWARE_TILES_PER_HEAP);
            let capacity = self.atlases.values().map(|a| a.layout().capacity()).min().unwrap_or(0);
            tiles = tiles.min(capacity.max(SOFTWARE_TILES_PER_HEAP));
        }
        self.manager.set_budget_tiles(tiles);
        tiles
    }

    /// Follows the device's memory pressure (issue #34): sets the tile budget to the tiles the
    /// streamer's memory holds now ([`Streamer::backing_bytes`]) plus those the device tiers may
    /// still take ([`Device::device_tier_room`]), less those they hold beyond their limit or
    /// budget ([`Device::device_tier_excess`]), within 1 and the description's budget: it shrinks
    /// while the device is over its device-local limit and grows back when room returns. Call it
    /// once a frame (before [`Streamer::begin_frame`]); returns the budget in effect (as
    /// [`Streamer::set_budget_tiles`]).
    pub fn follow_pressure(&mut self) -> u32 {
        let tile = self.manager.pool().tile_bytes().max(1);
        let held = self.backing_bytes() / tile;
        let room = self.device.device_tier_room() / tile;
        let over = self.device.device_tier_excess().div_ceil(tile);
        let target = held.saturating_add(room).saturating_sub(over).min(u64::from(self.desc.budget_tiles));
        self.set_budget_tiles(target as u32)
    }

    /// Device memory behind the textures now: the tile heaps' memory (hardware; allocated as the
    /// pool grows), or the one shared atlas plus every texture's indirection texture (software,
    /// allocated whole).
    pub fn backing_bytes(&self) -> u64 {
        match &self.heaps {
            Some(_) => self.manager.pool().stats().capacity_tiles * self.manager.pool().tile_bytes(),
            None => {
                let indirections: u64 = self
                    .textures
                    .values()
                    .map(|t| match &t.gpu {
                        TextureGpu::Software { texture } => texture.indirection_bytes(),
                        TextureGpu::Hardware { .. } => 0,
                    })
                    .sum();
                self.atlases.values().map(|a| a.memory_bytes()).sum::<u64>() + indirections
            }
        }
    }

    /// Residency's own memory behind the textures now, apart from their texels: page tables,
    /// min-LOD maps or indirection textures, feedback buffers and image tables, staging. A walk
    /// of the textures (a report, not a per-frame call).
    pub fn overhead(&self) -> StreamerOverhead {
        let mut o = StreamerOverhead {
            textures: self.textures.len() as u64,
            staging_bytes: self.uploader.staging_capacity(),
            ..StreamerOverhead::default()
        };
        for (id, texture) in &self.textures {
            o.map_bytes += texture.map_bytes();
            o.page_table_bytes += self.manager.residency(*id).map_or(0, |r| r.page_table().memory_bytes());
        }
        for slot in self.slots.iter().flatten() {
            o.feedback_bytes += slot.feedback.size() + slot.table.size();
            o.feedback_bytes += slot.records.as_ref().map_or(0, |r| r.buffer.size());
        }
        o
    }

    /// The staging ring's bytes in use and batches in flight ([`Uploader::staging_in_use`]).
    pub fn staging_in_use(&self) -> (u64, usize) {
        self.uploader.staging_in_use()
    }

    /// The tile budget in effect.
    pub fn budget_tiles(&self) -> u32 {
        self.manager.budget_tiles()
    }

    /// Sets `texture`'s prefetch warning: from mip `min_warning_lod` on, a sample within
    /// `lead`/256 of a level of the finest resident mip asks for the next finer mip ahead of need.
    /// Takes effect from the next frame.
    pub fn set_lod_warning(
        &mut self,
        texture: &VirtualTexture,
        min_warning_lod: u8,
        lead: u8,
    ) -> Result<(), StreamError> {
        if self.in_frame {
            return Err(StreamError::FrameOrder("set_lod_warning between begin_frame and end_frame"));
        }
        self.check_owner(texture)?;
        self.manager.set_lod_warning(texture.id, min_warning_lod, lead)?;
        self.refresh_layout()
    }

    /// Sets `texture`'s low-water mark (the seed's `GL_MIN_WARNING_LOD_AMD`; `None`: none, the
    /// default): samples that fetch a level at or below it write low-water warnings
    /// (`RequestKind::MinLodWarning`, `feedback.glsl`), and the manager prefetches the next finer
    /// level under the warned tile. Takes effect from the next frame (the image table's word 15).
    pub fn set_low_water(
        &mut self,
        texture: &VirtualTexture,
        low_water: Option<u8>,
    ) -> Result<(), StreamError> {
        if self.in_frame {
            return Err(StreamError::FrameOrder("set_low_water between begin_frame and end_frame"));
        }
        self.check_owner(texture)?;
        self.manager.set_low_water(texture.id, low_water)?;
        self.refresh_layout()
    }

    /// The current frame's bindings again (between `begin_frame` and `end_frame`).
    pub fn frame_bindings(&self) -> Result<FrameBindings<'_>, StreamError> {
        if !self.in_frame {
            return Err(StreamError::FrameOrder("frame_bindings outside a frame"));
        }
        Ok(self.bindings((self.frame % self.slots.len() as u64) as usize))
    }

    /// The units made resident in frames since the last call, with the frames that wanted them
    /// (at most the latest 65 536; priming's units are not included).
    pub fn take_latencies(&mut self) -> Vec<ResidentLatency> {
        self.latencies.drain(..).collect()
    }

    /// The frames whose feedback was read since the last call, oldest first (at most the latest
    /// 65 536).
    pub fn take_feedback_frames(&mut self) -> Vec<FeedbackFrame> {
        self.feedback_frames.drain(..).collect()
    }

    /// The load failures since the last call.
    pub fn take_load_failures(&mut self) -> Vec<LoadFailure> {
        std::mem::take(&mut self.failures)
    }

    /// Blocks until the workers have finished every load started so far (tests, and a renderer
    /// that wants frame-exact behaviour; a frame never calls it). They are taken at the next
    /// `begin_frame`.
    pub fn wait_for_loads(&self) {
        self.loader.wait_idle();
    }

    /// The textures streaming now.
    pub fn texture_count(&self) -> usize {
        self.textures.len()
    }

    /// The units of `texture`'s coarse chain (pinned: mip tails, or the single-tile mips), which
    /// `add_texture` made resident.
    pub fn coarse_chain(&self, texture: &VirtualTexture) -> &[TileKey] {
        if texture.streamer != self.serial {
            return &[];
        }
        self.textures.get(&texture.id).map_or(&[], |t| &t.pinned)
    }

    /// The sparse image of `texture` (hardware path).
    pub fn sparse_image(&self, texture: &VirtualTexture) -> Option<&crate::sparse::SparseImage> {
        if texture.streamer != self.serial {
            return None;
        }
        match &self.textures.get(&texture.id)?.gpu {
            TextureGpu::Hardware { image, .. } => Some(&**image),
            TextureGpu::Software { .. } => None,
        }
    }

    /// Adds a texture streamed from `source` and primes it: its coarse chain is loaded (through
    /// the workers, waited for here) and bound or uploaded before this returns, so its first frame
    /// samples real data. Colour formats stream, in their standard 64 KiB tiles (RGBA8: 128 × 128,
    /// R8: 256 × 256, RGBA16F: 128 × 64, BC7/BC3: 256 × 256, BC1: 512 × 256, …) without a stored
    /// border: on the hardware path where the device has sparse residency for the format
    /// (block-compressed ones included), on the software path with 4-byte texels or
    /// block-compressed (each format in use gets its own atlas, sized for the budget, in that
    /// format: a BC atlas's slots are whole blocks, assembled on the workers from the source's
    /// blocks). Others are refused with [`StreamError::UnsupportedSource`] (a BC format the
    /// device cannot sample, on the software path, with [`StreamError::SoftwareBlockCompressed`]),
    /// adding nothing. Must be called between frames.
    ///
    /// A volume source ([`TileSource::depth`] more than one texel) makes a 3D texture (hardware
    /// path only; the software path refuses it with [`StreamError::UnsupportedSource`]): a 3D
    /// sparse image in the format's standard 3D tile (RGBA8: 32 × 32 × 16) with a 3D min-LOD map
    /// (bind them as a `sampler3D` and a `usampler3D`: `residency.glsl`); feedback names tiles
    /// with their z (`feedback(slot, 0, uvw, …)` in `feedback.glsl`), and loads read them with
    /// [`TileSource::read_tile_at`].
    pub fn add_texture(
        &mut self,
        name: &str,
        source: Arc<dyn TileSource>,
    ) -> Result<VirtualTexture, StreamError> {
        self.add_layers(name, vec![source])
    }

    /// Adds a 2D array texture, layer `i` streamed from `layers[i]`, and primes it (every layer's
    /// coarse chain) as [`add_texture`](Self::add_texture) does. The layers stream independently:
    /// feedback names a tile of one layer (`feedback(slot, layer, uv, …)` in `feedback.glsl`), the
    /// manager loads it from that layer's source, the texture's min-LOD map has one layer per
    /// layer (bind it as a `usampler2DArray`, the image as a `sampler2DArray`: `residency.glsl`).
    /// Every layer's source must describe the same texture (format, size, mips, tiles). Hardware
    /// path only: the software path, no layers, or layers that differ are refused with
    /// [`StreamError::UnsupportedSource`], adding nothing. Must be called between frames.
    pub fn add_array_texture(
        &mut self,
        name: &str,
        layers: &[Arc<dyn TileSource>],
    ) -> Result<VirtualTexture, StreamError> {
        let refuse =
            |reason: &str| StreamError::UnsupportedSource { name: name.to_owned(), reason: reason.into() };
        let Some(first) = layers.first() else {
            return Err(refuse("an array texture needs at least one layer"));
        };
        if self.heaps.is_none() {
            return Err(refuse("array textures stream on the hardware path only"));
        }
        if layers.iter().any(|l| l.desc() != first.desc()) {
            return Err(refuse("every layer's source must have the same format, size, mips and tiles"));
        }
        self.add_layers(name, layers.to_vec())
    }

    fn add_layers(
        &mut self,
        name: &str,
        sources: Vec<Arc<dyn TileSource>>,
    ) -> Result<VirtualTexture, StreamError> {
        if self.in_frame {
            return Err(StreamError::FrameOrder("add_texture between begin_frame and end_frame"));
        }
        // The bind worker's job done first: priming binds and stages on this thread.
        self.apply_unapplied()?;
        self.remove_dropped()?;
        let id = ImageId(self.next_id);
        let source = Arc::clone(&sources[0]);
        let format = source.desc().format;
        if self.heaps.is_some() {
            // The hardware path takes the format only where the device has sparse residency for it.
            self.device.residency_path(format, ResidencyPath::Hardware).map_err(|e| {
                StreamError::UnsupportedSource { name: name.to_owned(), reason: e.to_string() }
            })?;
        } else if !self.atlases.contains_key(&format) {
            texture::check_source(&*source, true)?;
            let atlas_desc = crate::sparse::software::SoftwareAtlasDesc::new(
                format!("{} atlas {}", self.desc.name, format.name()),
                format,
                1,
            )
            .with_tiles_per_heap(SOFTWARE_TILES_PER_HEAP)
            .with_capacity_for_budget(self.atlas_budget);
            let atlas = crate::sparse::software::SoftwareAtlas::new(&self.device, &atlas_desc).map_err(
                |e| match e {
                    SoftwareError::FormatNotSampleable { format, .. } => {
                        StreamError::SoftwareBlockCompressed { name: name.to_owned(), format }
                    }
                    e => e.into(),
                },
            )?;
            self.atlases.insert(format, atlas);
        }
        let texture = Texture::create(
            self.heaps.as_ref(),
            self.atlases.get(&format),
            self.manager.pool().tile_bytes(),
            self.manager.desc().pinned_mip_tiles,
            id,
            name,
            sources,
        )?;
        // What the feedback layout (built at the next frame) would refuse, refused now.
        let mips = texture.layout.first_tail_lod();
        if mips > residency_core::streaming::MAX_FEEDBACK_MIPS {
            return Err(FeedbackError::TooManyMips { image: id, mips }.into());
        }
        if self.textures.len() >= residency_core::streaming::MAX_FEEDBACK_IMAGES {
            return Err(FeedbackError::TooManyImages { images: self.textures.len() + 1 }.into());
        }
        self.next_id += 1;
        self.manager.register_image(id, &texture.layout)?;
        self.textures.insert(id, texture);
        let handle = VirtualTexture { id, streamer: self.serial, dropped: Some(Arc::clone(&self.dropped)) };
        if let Err(e) = self.prime(id) {
            // Nothing of it stays: its loads are cancelled and its objects released.
            let _ = self.remove_texture(handle);
            return Err(e);
        }
        self.refresh_layout()?;
        Ok(handle)
    }

    fn prime(&mut self, id: ImageId) -> Result<(), StreamError> {
        let table = self.manager.residency(id).ok_or(StreamingError::UnknownImage(id))?.page_table().clone();
        let texture = self.textures.get_mut(&id).ok_or(StreamingError::UnknownImage(id))?;
        // The map starts as "nothing resident" everywhere (its memory is undefined until written).
        texture.upload_map(&self.uploader, &table, &[])?;
        let mut last_failure = None;
        let mut failures = 0;
        for _ in 0..PRIME_TICKS {
            let pinned = self.textures[&id].pinned.clone();
            if pinned.iter().all(|&k| self.manager.is_resident(k)) {
                // Loaded and bound: the texels reach the texture before this returns (a
                // submission of the uploader's, after the binds), so frame 0 samples them.
                self.uploader.flush()?;
                return Ok(());
            }
            if pinned.iter().any(|k| self.pending.contains_key(k)) {
                self.loader.wait_idle();
            }
            let before = self.failures.len();
            self.tick(&[], self.tick + 1, None)?;
            for f in &self.failures[before..] {
                if f.key.image == id {
                    failures += 1;
                    last_failure = Some(f.key);
                }
            }
            if failures >= 3 {
                break;
            }
        }
        let name = self.textures[&id].name.clone();
        let source = match last_failure {
            Some(key) => {
                let i = self.failures.iter().rposition(|f| f.key == key).expect("recorded above");
                self.failures.remove(i).error
            }
            None => SourceError::Read {
                source_name: name.clone(),
                reason: "the coarse chain never became resident".into(),
            },
        };
        Err(StreamError::Priming { name, source })
    }

    /// Removes `texture`: unregisters it (its tiles go back to the budget, its loads are
    /// cancelled) and releases its GPU objects once the frames that sample it have completed.
    /// Must be called between frames.
    pub fn remove_texture(&mut self, mut texture: VirtualTexture) -> Result<(), StreamError> {
        if self.in_frame {
            return Err(StreamError::FrameOrder("remove_texture between begin_frame and end_frame"));
        }
        self.check_owner(&texture)?;
        texture.dropped = None;
        self.remove_id(texture.id)
    }

    /// Removes now the textures whose handles were dropped (which `begin_frame` and
    /// `add_texture` also do). A removal that fails stays queued and is tried again at the next
    /// call. Must be called between frames.
    pub fn remove_dropped_textures(&mut self) -> Result<(), StreamError> {
        if self.in_frame {
            return Err(StreamError::FrameOrder("remove_dropped_textures between begin_frame and end_frame"));
        }
        self.remove_dropped()
    }

    /// Whether a frame is open (`begin_frame` without its `end_frame` yet).
    pub fn in_frame(&self) -> bool {
        self.in_frame
    }

    fn check_owner(&self, texture: &VirtualTexture) -> Result<(), StreamError> {
        if texture.streamer != self.serial {
            return Err(StreamError::ForeignTexture(texture.id));
        }
        Ok(())
    }

    /// Removes the textures whose handles were dropped.
    fn remove_dropped(&mut self) -> Result<(), StreamError> {
        let dropped = std::mem::take(&mut *self.dropped.locked());
        for (i, &id) in dropped.iter().enumerate() {
            if self.textures.contains_key(&id) {
                if let Err(e) = self.remove_id(id) {
                    // The ones not removed yet are tried again next time.
                    self.dropped.locked().extend_from_slice(&dropped[i..]);
                    return Err(e);
                }
            }
        }
        Ok(())
    }

    fn remove_id(&mut self, id: ImageId) -> Result<(), StreamError> {
        // The GPU first catches up with the manager: the texture's tiles go back to the pool
        // below, and must be unbound from it as the manager has them.
        self.apply_unapplied()?;
        let removed = self.textures.remove(&id);
        let changes = self.manager.unregister_image(id)?;
        // Hardware path: its tiles go back to the pool now, and the next frame may bind them to
        // another image; unbind them from this one first (after the frames in flight that may
        // sample it), so that no memory is bound to two images at once (that needs
        // sparseResidencyAliased). If this unbind fails (the error is returned), the removed
        // image keeps those tiles bound while the pool may hand them on: aliasing an image that
        // no new frame samples, which the frames in flight (waited for by the next bind) see as
        // wrong texels at worst; its memory stays alive until the image is destroyed.
        if let (Some(Texture { gpu: TextureGpu::Hardware { image, .. }, .. }), Some(_)) =
            (&removed, &self.heaps)
        {
            if !changes.changes.is_empty() {
                let waits = self.running_frames();
                let heaps = self.heaps.as_mut().expect("checked above");
                let (_, done) = heaps.bind_after(
                    self.manager.pool(),
                    &[(&**image, &changes.changes)],
                    BindPlanOptions::default(),
                    &waits,
                )?;
                self.note_bind(done, !waits.is_empty());
            }
        }
        let keys: Vec<TileKey> = self.pending.keys().filter(|k| k.image == id).copied().collect();
        for key in keys {
            self.loader.cancel(&key);
            self.pending.remove(&key);
            self.cancelled.push(key);
        }
        // The frames that may still sample it (frames declare nothing per texture, so that a
        // frame's cost does not grow with the textures registered): its objects outlive them.
        if let Some(texture) = &removed {
            for until in self.running_frames() {
                texture.used_until(until)?;
            }
        }
        // Dropped here: destroyed once the declared frame uses and residency's own work (the
        // unbind above included) are done.
        drop(removed);
        self.refresh_layout()
    }

    /// The textures or their feedback settings changed: the next frame lays the feedback out
    /// again (once, however many textures were added or removed since: a registration does not
    /// walk the others).
    fn refresh_layout(&mut self) -> Result<(), StreamError> {
        self.generation += 1;
        self.layout_stale = true;
        Ok(())
    }

    /// Lays the feedback out for the textures now, when they changed since the last time.
    fn current_layout(&mut self) -> Result<Option<Arc<FeedbackLayout>>, StreamError> {
        if self.layout_stale {
            self.layout = if self.textures.is_empty() {
                None
            } else {
                Some(Arc::new(self.manager.feedback_layout(self.desc.feedback)?))
            };
            self.layout_stale = false;
        }
        Ok(self.layout.clone())
    }

    /// The ends of the frames that may still run (what an unbind waits for on the GPU).
    fn running_frames(&self) -> Vec<GpuUse> {
        self.frame_uses.iter().filter(|u| !self.device.has_completed(u)).copied().collect()
    }

    fn note_bind(&mut self, done: Option<GpuUse>, after_frames: bool) {
        if let Some(done) = done {
            self.bind_wait = Some(done);
            self.stats.binds += 1;
            self.stats.unbinds_after_frames += u64::from(after_frames);
        }
    }

    /// One manager tick: finished loads in, update, binds and unbinds, uploads, map updates,
    /// flush, this tick's loads out.
    fn tick(
        &mut self,
        requests: &[TileRequest],
        requested_in: u64,
        frame: Option<u64>,
    ) -> Result<FrameOutput, StreamError> {
        self.apply_unapplied()?;
        for done in self.loader.poll() {
            if let Some(p) = self.pending.get_mut(&done.token) {
                p.done = Some(done.result);
            }
        }
        let mut loaded = Vec::new();
        let mut failed = std::mem::take(&mut self.cancelled);
        let mut finished: Vec<TileKey> =
            self.pending.iter().filter(|(_, p)| p.done.is_some()).map(|(k, _)| *k).collect();
        finished.sort_unstable();
        let mut staged = HashMap::new();
        // A frame stages at most its share of the ring (the frames in flight hold the rest); the
        // loads past it wait for a later frame (at least one is always taken).
        let share = self.desc.staging_bytes / (u64::from(self.desc.frames_in_flight) + 1);
        let mut staged_bytes = 0u64;
        for key in finished {
            let bytes: u64 = match &self.pending[&key].done {
                Some(Ok(data)) => data.iter().map(|d| d.len() as u64).sum(),
                _ => 0,
            };
            if staged_bytes > 0 && staged_bytes + bytes > share {
                self.stats.loads_deferred += 1;
                continue;
            }
            staged_bytes += bytes;
            let p = self.pending.remove(&key).expect("listed");
            match p.done.expect("finished") {
                Ok(data) => {
                    loaded.push(key);
                    staged.insert(key, (p.tiles, data));
                }
                Err(error) => {
                    failed.push(key);
                    self.stats.loads_failed += 1;
                    if let Some(t) = self.textures.get_mut(&key.image).map(|t| &mut t.stats) {
                        t.loads_failed += 1;
                    }
                    let texture = self.textures.get(&key.image).map_or_else(String::new, |t| t.name.clone());
                    self.failures.push(LoadFailure { texture, key, error });
                }
            }
        }
        loaded.sort_unstable();
        failed.sort_unstable();
        self.tick += 1;
        let out = self.manager.update_with_feedback_from(
            &FrameInput { frame: self.tick, requests, loaded: &loaded, failed: &failed },
            requested_in,
        )?;
        let keys =
            loaded.iter().chain(&failed).chain(&out.cancelled).chain(&out.resident).chain(&out.evicted);
        let images = keys.chain(out.loads.iter().map(|l| &l.key)).map(|k| k.image);
        for image in images.chain(out.changes.iter().map(|c| c.image)) {
            if self.textures.contains_key(&image) {
                self.visited.insert(image);
            }
        }
        for &key in &out.cancelled {
            self.loader.cancel(&key);
            self.pending.remove(&key);
            self.cancelled.push(key);
        }
        for key in &out.resident {
            if let Some(t) = self.textures.get_mut(&key.image).map(|t| &mut t.stats) {
                t.units_streamed += 1;
            }
        }
        if let Some(frame) = frame {
            self.tick_frames.push_back((self.tick, frame));
            if self.tick_frames.len() > 4096 {
                self.tick_frames.pop_front();
            }
            for (&key, &since) in out.resident.iter().zip(&out.resident_wanted_since) {
                // Ticks only grow, so the list is sorted: a binary search, not a scan per unit.
                let requested_frame = self
                    .tick_frames
                    .binary_search_by_key(&since, |&(t, _)| t)
                    .ok()
                    .map(|i| self.tick_frames[i].1);
                // With the bind worker, the next frame publishes it.
                let resident_frame = frame + u64::from(self.worker.is_some());
                self.latencies.push_back(ResidentLatency { key, requested_frame, resident_frame });
                if self.latencies.len() > KEPT_LATENCIES {
                    self.latencies.pop_front();
                }
            }
        }
        for key in &out.evicted {
            if let Some(t) = self.textures.get_mut(&key.image).map(|t| &mut t.stats) {
                t.tiles_evicted += 1;
            }
        }
        // The loads first: they do not depend on what this tick binds, and the manager counts
        // them in flight whatever happens below.
        for load in &out.loads {
            let Some(texture) = self.textures.get(&load.key.image) else { continue };
            let tiles = texture.load_tiles(load.key.unit);
            let job =
                LoadJob { token: load.key, source: Arc::clone(&texture.load_source), tiles: tiles.clone() };
            self.loader.submit(job).map_err(|e| StreamError::Internal(format!("{e}: {:?}", load.key)))?;
            self.pending.insert(load.key, Pending { tiles, done: None });
        }
        // A failed bind bound nothing: the tick waits, and is applied first next time.
        let mut tick = Unapplied { out: out.clone(), staged, bound: false, unbinds: false };
        if frame.is_some() && self.worker.is_some() {
            // A frame's tick: its binds and staging go to the worker at `end_frame` (what cannot be
            // prepared is applied here, with the errors `apply` gives).
            if let Some(job) = self.prepare_job(&mut tick) {
                self.deferred = Some(Deferred { out: tick.out, job: Some(job), done: None, waited: false });
                return Ok(out);
            }
        }
        if let Err(e) = self.apply(&mut tick) {
            self.unapplied = Some(tick);
            return Err(e);
        }
        Ok(out)
    }

    /// A frame tick's job for the bind worker: its bind planned, its loaded units' texels with
    /// their places (moved out of `tick.staged`). `None` (`tick` untouched): something would not
    /// prepare; `apply` then runs the tick on the frame thread and returns that error.
    fn prepare_job(&mut self, tick: &mut Unapplied) -> Option<bind_worker::Job> {
        let out = &tick.out;
        let mut writes = Vec::new();
        for key in &out.resident {
            let (Some((tiles, data)), Some(texture)) = (tick.staged.get(key), self.textures.get(&key.image))
            else {
                continue;
            };
            if self.manager.is_resident(*key) {
                writes.push((*key, texture.tile_writes(tiles, data).ok()?));
            }
        }
        let items: Vec<_> = out
            .changes
            .iter()
            .filter_map(|c| match &self.textures.get(&c.image)?.gpu {
                TextureGpu::Hardware { image, .. } => Some((image, &c.changes)),
                TextureGpu::Software { .. } => None,
            })
            .collect();
        let bind = match (items.is_empty(), self.heaps.as_mut()) {
            (false, Some(heaps)) => {
                heaps.prepare_bind(self.manager.pool(), &items, BindPlanOptions::default()).ok()?
            }
            _ => None,
        };
        let units = writes
            .into_iter()
            .map(|(key, writes)| {
                let (tiles, data) = tick.staged.remove(&key).expect("listed above");
                bind_worker::UnitUpload { key, tiles, data, writes }
            })
            .collect();
        Some(bind_worker::Job { bind, waits: Vec::new(), units })
    }

    /// Hands the frame tick's job to the bind worker (at `end_frame` or `abandon_frame`: the
    /// frame's recording has taken the uploader's copies, and the frame is among those an unbind
    /// waits for).
    fn hand_out(&mut self) {
        let Some(mut job) = self.deferred.as_mut().and_then(|d| d.job.take()) else { return };
        let unbinds = self.deferred.as_ref().is_some_and(|d| !d.out.evicted.is_empty()) || job.unbinds();
        if unbinds {
            job.waits = self.running_frames();
        }
        let d = self.deferred.as_mut().expect("taken from it");
        d.waited = !job.waits.is_empty();
        let worker = self.worker.as_mut().expect("jobs are made for the worker");
        if let Err(done) = worker.send(job) {
            d.done = Some(done);
        }
    }

    /// Joins the bind worker's job and publishes it: the bind is what the next recorded frame
    /// waits for, the min-LOD map updates are staged, the released heaps go. A job never handed
    /// out (its frame was not ended) runs here first. A failed bind or staging is returned, the
    /// tick kept as the unapplied one.
    fn settle(&mut self) -> Result<(), StreamError> {
        self.refuse_blocked_join()?;
        let Some(mut d) = self.deferred.take() else { return Ok(()) };
        // Whether it ran on this thread (the worker's counters count the worker's work only).
        let mut here = true;
        let done = if let Some(mut job) = d.job.take() {
            if !d.out.evicted.is_empty() || job.unbinds() {
                job.waits = self.running_frames();
            }
            d.waited = !job.waits.is_empty();
            job.run(&self.uploader)
        } else if let Some(done) = d.done.take() {
            done
        } else {
            here = false;
            match self.worker.as_mut().and_then(bind_worker::BindWorker::join) {
                Some(Ok(done)) => done,
                Some(Err(e)) => {
                    // Whether it bound is unknown: bound again (the same binds again are
                    // harmless); its texels are lost with it.
                    self.unapplied =
                        Some(Unapplied { out: d.out, staged: HashMap::new(), bound: false, unbinds: false });
                    return Err(e);
                }
                None => return Err(StreamError::Internal("a bind job neither out nor run".into())),
            }
        };
        if here {
            self.inline_tiles += done.tiles_staged;
        } else {
            self.stats.worker_tiles_staged += done.tiles_staged;
        }
        let staged = done.left.into_iter().map(|u| (u.key, (u.tiles, u.data))).collect();
        let mut tick = Unapplied { out: d.out, staged, bound: true, unbinds: false };
        match done.bound {
            Some(Ok((_, bind))) => {
                if here {
                    self.inline_binds += u64::from(bind.is_some());
                } else {
                    self.stats.worker_binds += u64::from(bind.is_some());
                }
                self.note_bind(bind, d.waited);
            }
            Some(Err(e)) => {
                tick.bound = false;
                self.unapplied = Some(tick);
                return Err(e.into());
            }
            None => {}
        }
        if let Some(e) = done.staging {
            self.unapplied = Some(tick);
            return Err(e);
        }
        // Bound and staged: the map updates and the heaps released, here.
        if let Err(e) = self.apply(&mut tick) {
            self.unapplied = Some(tick);
            return Err(e);
        }
        Ok(())
    }

    /// Refuses, changing nothing, to wait for the bind worker's job out on a thread that holds a
    /// queue's lock the worker needs (the job stays out, joined by a later call).
    fn refuse_blocked_join(&self) -> Result<(), StreamError> {
        if self.worker.as_ref().is_some_and(bind_worker::BindWorker::blocked_here) {
            return Err(VulkanError::Reentrant { what: bind_worker::JOIN_REENTRANT }.into());
        }
        Ok(())
    }

    /// Applies the tick whose bind or staging failed before, so the GPU catches up with the
    /// manager's page tables before anything new happens (nothing else runs while it fails).
    /// The bind worker's job is joined and published first.
    fn apply_unapplied(&mut self) -> Result<(), StreamError> {
        self.settle()?;
        if let Some(mut tick) = self.unapplied.take() {
            self.stats.ticks_retried += 1;
            if let Err(e) = self.apply(&mut tick) {
                self.unapplied = Some(tick);
                return Err(e);
            }
        }
        Ok(())
    }

    /// Binds, stages and releases what `tick.out` changed. On an error `tick` says what is left
    /// (a failed bind bound nothing; texels not staged yet stay in `tick.staged`), so applying it
    /// again later finishes it; a step already done is not repeated.
    fn apply(&mut self, tick: &mut Unapplied) -> Result<(), StreamError> {
        let out = &tick.out;
        if self.heaps.is_some() && !tick.bound {
            // Unbinding a tile a frame in flight may sample waits for those frames, on the GPU.
            let waits =
                if out.evicted.is_empty() && !tick.unbinds { Vec::new() } else { self.running_frames() };
            let items: Vec<_> = out
                .changes
                .iter()
                .filter_map(|c| match &self.textures.get(&c.image)?.gpu {
                    TextureGpu::Hardware { image, .. } => Some((&**image, &c.changes)),
                    TextureGpu::Software { .. } => None,
                })
                .collect();
            if !items.is_empty() {
                let heaps = self.heaps.as_mut().expect("hardware path");
                let (_, done) =
                    heaps.bind_after(self.manager.pool(), &items, BindPlanOptions::default(), &waits)?;
                self.inline_binds += u64::from(done.is_some());
                self.note_bind(done, !waits.is_empty());
            }
        }
        tick.bound = true;
        for key in &out.resident {
            // A unit evicted (or whose texture went) since this tick has nothing to receive.
            if !self.manager.is_resident(*key) {
                tick.staged.remove(key);
                continue;
            }
            let Some((tiles, data)) = tick.staged.remove(key) else { continue };
            let Some(texture) = self.textures.get(&key.image) else { continue };
            let physical = match key.unit {
                StreamUnit::Tile(t) => self.manager.residency(key.image).and_then(|r| r.page_table().get(t)),
                StreamUnit::Tail(_) => None,
            };
            if let Err(e) = texture.upload_unit(&self.uploader, key.unit, physical, &tiles, &data) {
                tick.staged.insert(*key, (tiles, data));
                return Err(e);
            }
            self.inline_tiles += tiles.len() as u64;
        }
        for change in &out.changes {
            let Some(residency) = self.manager.residency(change.image) else { continue };
            if let Some(texture) = self.textures.get_mut(&change.image) {
                texture.upload_map(&self.uploader, residency.page_table(), &change.min_lod)?;
            }
        }
        if let Some(heaps) = self.heaps.as_mut() {
            // Freed once the unbinds above and the frames declared on the heaps have run.
            heaps.release(&out.heaps_released);
        }
        Ok(())
    }

    /// Starts a frame (see the module docs): feedback of finished frames, the manager update,
    /// binds, uploads and map updates, this frame's loads; returns what the renderer binds.
    pub fn begin_frame(&mut self) -> Result<FrameBindings<'_>, StreamError> {
        if self.in_frame {
            return Err(StreamError::FrameOrder("begin_frame twice without end_frame"));
        }
        // Before anything changes: the tick below joins the worker's job.
        self.refuse_blocked_join()?;
        self.remove_dropped()?;
        let frame = self.frame;
        let n = self.slots.len() as u64;
        let index = (frame % n) as usize;
        self.frame_uses.retain(|u| !self.device.has_completed(u));
        // Frames not recorded hold no slot: the CPU still runs at most `n` frames ahead.
        while self.frame_uses.len() as u64 > n {
            let oldest = self.frame_uses.remove(0);
            self.device.wait_until(&oldest)?;
            self.stats.slot_waits += 1;
        }
        // This frame's slot holds the frame `n` back: the only wait of a frame without eviction.
        if let Some((_, _, until)) = self.slots[index].as_ref().and_then(|s| s.submitted) {
            if !self.device.has_completed(&until) {
                self.device.wait_until(&until)?;
                self.stats.slot_waits += 1;
            }
        }
        let mut gpu_completed = None;
        for f in frame.saturating_sub(n)..frame {
            let slot = self.slots[(f % n) as usize].as_ref();
            if let Some((sf, _, until)) = slot.and_then(|s| s.submitted) {
                if sf == f && !self.device.has_completed(&until) {
                    break;
                }
            }
            gpu_completed = Some(f);
        }
        let active = self.desc.sampling.frame_active(frame);
        let step = self.ring.begin_frame(frame, gpu_completed, active);
        let mut work = FrameWork::default();
        self.visited.clear();
        let mut requested = std::mem::take(&mut self.requested);
        for id in requested.drain(..) {
            if let Some(t) = self.textures.get_mut(&id).map(|t| &mut t.stats) {
                t.requests = 0;
                t.pixels = 0;
            }
        }
        self.requested = requested;
        let mut oldest = None;
        for &(slot_index, f) in &step.read {
            let Some(slot) = self.slots[slot_index].as_mut() else { continue };
            let Some((sf, tick, _)) = slot.submitted.take() else { continue };
            if sf != f {
                slot.written = None;
                continue;
            }
            // Only what the frame wrote: the header, the touched bitset, the records, the touched
            // textures' bitsets and the requested tiles' pixel counters.
            // Until decoded, what the frame wrote is unknown: a failed read resets the whole slot.
            slot.written = None;
            let (feedback, mut failed) = (&slot.feedback, None);
            let mut bytes = Vec::new();
            let decoded = slot.layout.decode_with(f, |start, out| {
                bytes.resize(out.len() * 4, 0);
                if let Err(e) = feedback.read(u64::from(start) * 4, &mut bytes) {
                    failed.get_or_insert(e);
                }
                for (w, b) in out.iter_mut().zip(bytes.chunks_exact(4)) {
                    *w = u32::from_le_bytes([b[0], b[1], b[2], b[3]]);
                }
            })?;
            if let Some(e) = failed {
                return Err(e.into());
            }
            slot.written = Some(written_ranges(&slot.layout, &decoded));
            work.feedback_images_decoded += decoded.images_visited;
            work.feedback_words_read += decoded.words_read;
            self.stats.feedback_frames_read += 1;
            self.stats.feedback_overflows += u64::from(decoded.overflowed);
            let mut summary =
                FeedbackFrame { frame: f, misses: 0, warnings: 0, overflowed: decoded.overflowed };
            for r in &decoded.requests {
                if let Some(t) = self.textures.get_mut(&r.image).map(|t| &mut t.stats) {
                    if t.requests == 0 {
                        self.requested.push(r.image);
                    }
                    t.requests += 1;
                    t.pixels += u64::from(r.pixels);
                    self.visited.insert(r.image);
                }
                match r.kind {
                    RequestKind::Miss => summary.misses += 1,
                    _ => summary.warnings += 1,
                }
            }
            self.feedback_frames.push_back(summary);
            if self.feedback_frames.len() > KEPT_LATENCIES {
                self.feedback_frames.pop_front();
            }
            self.requests.extend(decoded.requests);
            oldest.get_or_insert(tick);
        }
        // Requests of several frames read together count from the oldest of them: latency is then
        // over- rather than under-stated.
        if let Some(tick) = oldest {
            self.requested_in = tick;
        }
        let mut requests = std::mem::take(&mut self.requests);
        self.filter_slice_requests(&mut requests);
        work.requests = requests.len() as u32;
        let (binds, tiles) = (self.inline_binds, self.inline_tiles);
        let ticked = self.tick(&requests, self.requested_in.max(1), Some(frame));
        work.frame_thread_binds = (self.inline_binds - binds) as u32;
        work.frame_thread_tiles_staged = (self.inline_tiles - tiles) as u32;
        work.textures_visited = self.visited.len() as u32;
        self.stats.textures_visited += u64::from(work.textures_visited);
        self.stats.feedback_words_read += work.feedback_words_read;
        self.stats.last_frame_work = work;
        ticked?;

        // This frame's slot: buffers for the current layout (reset by the frame's recording).
        if let Some(layout) = self.current_layout()? {
            let fresh = self.slots[index].as_ref().is_none_or(|s| s.generation != self.generation);
            if fresh {
                self.slots[index] = Some(self.make_slot(index, layout)?);
            }
        }
        self.recorded.store(false, Ordering::Release);
        self.resolved.store(false, Ordering::Release);
        self.cpu_feedback = false;
        self.in_frame = true;
        self.stats.frames += 1;
        Ok(self.bindings(index))
    }

    fn make_slot(&self, index: usize, layout: Arc<FeedbackLayout>) -> Result<Slot, StreamError> {
        let name = &self.desc.name;
        let (feedback_intent, table_intent) = if self.desc.feedback_device_local {
            (MemoryIntent::DeviceLocalHostVisible, MemoryIntent::DeviceLocalHostVisible)
        } else {
            (MemoryIntent::Readback, MemoryIntent::Upload)
        };
        let feedback = self.device.create_buffer(
            &BufferDesc::new(
                format!("{name} feedback {index}"),
                layout.buffer_bytes(),
                BufferUsage::STORAGE | BufferUsage::COPY_DST,
            )
            .with_intent(feedback_intent),
        )?;
        let words = layout.image_table();
        let mut table = self.device.create_buffer(
            &BufferDesc::new(
                format!("{name} image table {index}"),
                words.len() as u64 * 4,
                BufferUsage::STORAGE,
            )
            .with_intent(table_intent),
        )?;
        table.write(0, &words.iter().flat_map(|w| w.to_le_bytes()).collect::<Vec<_>>())?;
        let records = match (&self.resolve, self.desc.deferred_feedback) {
            (Some(program), Some(extent)) => {
                let (_, count) = deferred::record_grid(self.desc.sampling, extent);
                Some(deferred::Records::new(&self.device, program, name, index, count, (&feedback, &table))?)
            }
            _ => None,
        };
        Ok(Slot {
            feedback,
            table,
            records,
            layout,
            generation: self.generation,
            submitted: None,
            written: None,
        })
    }

    fn bindings(&self, index: usize) -> FrameBindings<'_> {
        let slot = self.slots[index].as_ref().filter(|s| s.generation == self.generation);
        let header = match (slot, self.cpu_feedback) {
            (Some(s), false) => {
                Some(s.layout.header_words(self.frame).iter().flat_map(|w| w.to_le_bytes()).collect())
            }
            _ => None,
        };
        FrameBindings {
            frame: self.frame,
            slot: index,
            path: self.path,
            generation: self.generation,
            include: match self.path {
                ResidencyPath::Software => "residency_software.glsl",
                _ => "residency.glsl",
            },
            feedback: slot.map(|s| &s.feedback),
            image_table: slot.map(|s| &s.table),
            feedback_records: slot.and_then(|s| Some(&s.records.as_ref()?.buffer)),
            layout: slot.map(|s| &*s.layout),
            all: AllTextures(&self.textures),
            sampling: self.desc.sampling,
            feedback_active: slot.is_some() && self.desc.sampling.frame_active(self.frame),
            ctx: FrameContext {
                streamer: self.serial,
                device: &self.device,
                uploader: &self.uploader,
                bind_wait: self.bind_wait,
                readers: self.desc.readers,
                header,
                clear: slot.and_then(|s| s.written.clone()),
                recorded: &self.recorded,
                deferred: self.resolve.as_ref().zip(slot.and_then(|s| s.records.as_ref())),
                record_row_cells: self
                    .desc
                    .deferred_feedback
                    .map_or(0, |e| deferred::record_grid(self.desc.sampling, e).0 as u32),
                record_extent: self.desc.deferred_feedback,
                resolved: &self.resolved,
                recorded_after: &self.recorded_after,
                recorded_into: &self.recorded_into,
                recorded_floor: &self.recorded_floor,
            },
        }
    }

    /// Writes feedback made on the CPU into this frame's feedback buffer (a CPU renderer, a
    /// test), between `begin_frame` and the frame's recording (take the bindings again with
    /// [`Streamer::frame_bindings`]), which then leaves the buffer as written; `records` must be
    /// of this frame's layout.
    pub fn write_cpu_feedback(&mut self, records: &FeedbackBuffer) -> Result<(), StreamError> {
        if !self.in_frame {
            return Err(StreamError::FrameOrder("write_cpu_feedback outside a frame"));
        }
        if self.recorded.load(Ordering::Acquire) {
            return Err(StreamError::FrameOrder("write_cpu_feedback after the frame was recorded"));
        }
        let index = (self.frame % self.slots.len() as u64) as usize;
        let Some(slot) = self.slots[index].as_mut() else { return Ok(()) };
        let bytes = records.bytes();
        if bytes.len() as u64 != slot.layout.buffer_bytes() {
            return Err(FeedbackError::BufferSize {
                expected: slot.layout.buffer_bytes(),
                got: bytes.len() as u64,
            }
            .into());
        }
        slot.feedback.write(0, &bytes)?;
        self.cpu_feedback = true;
        Ok(())
    }

    /// Ends a frame whose submission failed (or that the renderer will not submit): nothing of
    /// it runs on the GPU, so no use is declared and its feedback is never read; the staged
    /// copies [`FrameBindings::record`] put into it (texels of the tiles it made resident, map
    /// updates) are queued again and submitted now by the streamer's uploader, after the binds
    /// (a later frame's recording takes them if that submission fails too). A frame not recorded
    /// (a submission that failed before its recording ran) still has its copies queued: they are
    /// submitted the same way. Returns that submission's error, if any; the frame is ended
    /// either way. Refused outside a frame.
    ///
    /// Every object the frame binds is kept, and later unbinds wait, until everything residency
    /// has submitted so far has run (so a frame that did run after all, through a residency
    /// submission, is covered). Call it right after the failed submission, before anything else
    /// happens to the streamer.
    /// If the copies cannot be queued again (their staging space was given back first, which the
    /// streamer's own calls do not do), [`StreamError::Internal`] says so and those tiles show
    /// undefined texels until evicted (no memory they do not own is touched).
    pub fn abandon_frame(&mut self) -> Result<(), StreamError> {
        if !self.in_frame {
            return Err(StreamError::FrameOrder("abandon_frame without begin_frame"));
        }
        let recorded = self.recorded.swap(false, Ordering::AcqRel);
        let index = (self.frame % self.slots.len() as u64) as usize;
        self.in_frame = false;
        self.frame += 1;
        self.stats.frames_abandoned += 1;
        // The bind stays the one the next recorded frame waits for (`bind_wait` kept).
        let requeued = !recorded || self.uploader.requeue_recorded().is_some();
        let flushed = if requeued { self.uploader.flush() } else { Ok(()) };
        // Had the frame run after all (a submission through residency that succeeded), everything
        // residency submitted until now covers it: its objects are kept and later unbinds wait
        // for that, as for a frame in flight. (Nothing is read back from it.)
        let until = self.device.submitted_work();
        if let Some(heaps) = &self.heaps {
            heaps.used_until(until)?;
        }
        if let Some(slot) = self.slots[index].as_mut() {
            slot.feedback.used_until(until)?;
            slot.table.used_until(until)?;
            if let Some(records) = &mut slot.records {
                records.used_until(until)?;
                // It may have run after all, up to anywhere: the next frame zeroes the records.
                records.clean = false;
            }
            slot.submitted = None;
            // It may have run after all and written anything: the next reset clears it all.
            slot.written = None;
        }
        self.frame_uses.push(until);
        self.hand_out();
        if !requeued {
            return Err(StreamError::Internal(
                "an abandoned frame's copies were given back before they could be queued again".into(),
            ));
        }
        Ok(flushed?)
    }

    /// Ends the frame: `until` is the end of its GPU work (the renderer's
    /// [`Submission::gpu_use`](crate::Submission::gpu_use), or a point of its timeline). Its
    /// feedback is read once that has passed; every object the frame binds is kept until then.
    pub fn end_frame(&mut self, until: GpuUse) -> Result<(), StreamError> {
        if !self.in_frame {
            return Err(StreamError::FrameOrder("end_frame without begin_frame"));
        }
        // A point the GPU can wait for (an unbind waits for it): not a frame count.
        self.device.wait_info(&until).map(drop)?;
        // A recorded frame ends with its own submission or later: an earlier residency submission
        // would let its feedback be read and its unbinds go ahead while it still runs.
        if self.recorded.load(Ordering::Acquire)
            && until.point.clock == crate::device::life::UNIVERSAL
            && until.point.value <= self.recorded_after.load(Ordering::Acquire)
        {
            return Err(StreamError::FrameOrder(
                "end_frame with a use that ends before the frame's own submission",
            ));
        }
        // The same for a renderer timeline: its frame signals above what was announced when the
        // frame was recorded (`Recording::submit` refuses anything else).
        if self.recorded.load(Ordering::Acquire) {
            let floor = self.recorded_floor.locked();
            if floor.iter().any(|&(clock, value)| clock == until.point.clock && until.point.value <= value) {
                return Err(StreamError::FrameOrder(
                    "end_frame with a timeline point the GPU may reach before the frame's own submission",
                ));
            }
        }
        let index = (self.frame % self.slots.len() as u64) as usize;
        // Per texture nothing: the frame is one of `frame_uses`, which a removed texture is given
        // (`remove_id`), as are the textures left when the streamer is dropped.
        if let Some(heaps) = &self.heaps {
            heaps.used_until(until)?;
        }
        let recorded = self.recorded.swap(false, Ordering::AcqRel);
        let active = self.desc.sampling.frame_active(self.frame);
        if let Some(slot) = self.slots[index].as_mut() {
            slot.feedback.used_until(until)?;
            slot.table.used_until(until)?;
            if let Some(records) = &mut slot.records {
                records.used_until(until)?;
                // Zeroed by this frame's fill (if any) and its resolve.
                if recorded && active && slot.generation == self.generation {
                    records.clean = true;
                }
            }
            // A slot of an older layout (no texture left) was not reset: nothing to read.
            let current = slot.generation == self.generation;
            slot.submitted = (recorded && active && current).then_some((self.frame, self.tick, until));
        }
        if recorded {
            self.stats.frames_recorded += 1;
            self.bind_wait = None;
            // Submitted: its copies will run (`abandon_frame` is for a frame that was not).
            self.uploader.forget_recorded();
        }
        self.frame_uses.push(until);
        self.hand_out();
        self.in_frame = false;
        self.frame += 1;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `vt_quad.glsl`'s shift-and-mask test, as the shader runs it.
    fn shader_writes(phase: u32, fast: u32, x: u32, y: u32) -> bool {
        let shift = (fast >> 8) & 31;
        let mask = (1u32 << ((fast >> 16) & 31)) - 1;
        ((x >> shift) & mask) == (phase & 0xFFFF) && ((y >> shift) & mask) == (phase >> 16)
    }

    #[test]
    fn a_missing_feature_is_named() {
        use vk::PipelineStageFlags2 as S;
        let all = crate::device::EnabledFeatures {
            fragment_stores_and_atomics: true,
            shader_resource_residency: true,
            ..Default::default()
        };
        let fragment = S::FRAGMENT_SHADER | S::COMPUTE_SHADER;
        assert_eq!(missing_feature(&all, fragment, ResidencyPath::Hardware), None);
        let no_stores = crate::device::EnabledFeatures { fragment_stores_and_atomics: false, ..all };
        assert_eq!(
            missing_feature(&no_stores, fragment, ResidencyPath::Software).map(|m| m.0),
            Some("fragmentStoresAndAtomics")
        );
        assert_eq!(
            missing_feature(&no_stores, S::COMPUTE_SHADER, ResidencyPath::Software),
            None,
            "compute feedback needs no fragment stores"
        );
        let no_residency = crate::device::EnabledFeatures { shader_resource_residency: false, ..all };
        assert_eq!(
            missing_feature(&no_residency, fragment, ResidencyPath::Hardware).map(|m| m.0),
            Some("shaderResourceResidency")
        );
        assert_eq!(missing_feature(&no_residency, fragment, ResidencyPath::Software), None);
    }

    #[test]
    fn the_shaders_fast_sampling_test_picks_the_pixels_of_pixel_writes() {
        for (stride, block, interval) in [(1, 1, 1), (8, 1, 1), (8, 4, 1), (4, 2, 3), (16, 8, 2), (2, 16, 1)]
        {
            let s = FeedbackSampling::new(stride, interval).with_block(block);
            for frame in (0..300).filter(|&f| s.frame_active(f)) {
                let (phase, fast) = fast_sampling_words(s, frame);
                assert_eq!(fast & 1, 1);
                for y in 0..70 {
                    for x in 0..70 {
                        assert_eq!(
                            shader_writes(phase, fast, x, y),
                            s.pixel_writes(x, y, frame),
                            "{s:?} {frame} {x} {y}"
                        );
                    }
                }
            }
        }
        assert_eq!(
            fast_sampling_words(FeedbackSampling::new(3, 1), 5),
            (0, 0),
            "not a power of two: the shader divides"
        );
    }
}
