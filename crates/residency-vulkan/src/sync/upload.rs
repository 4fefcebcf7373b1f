//! Uploads to device-local buffers through a staging ring.
//!
//! Data is copied into a persistently mapped host-visible buffer managed by the core's
//! [`RingAllocator`]; [`Uploader::flush`] records every queued copy into one command buffer with a
//! barrier before (earlier GPU work on the destinations finishes first) and after (later work sees
//! the data), and submits it. Ring space comes back when the GPU has finished the frame that used it,
//! so the CPU only waits when the ring is full. A write larger than a chunk
//! ([`Uploader::with_chunk_bytes`], 16 MiB or a quarter of the ring) is streamed: each chunk gets
//! ring space (a ring frame of its own, within the ring's first [`DEFAULT_STREAM_WINDOW`] bytes:
//! [`Uploader::with_stream_window`]) as soon as the ring has room, the copy threads
//! ([`Uploader::with_copy_threads`]) stage pieces of every such chunk without a join per chunk,
//! and the calling thread submits each chunk's copy as soon as its bytes are staged, staging
//! pieces itself in between, so the GPU copies while the host stages. The ring lives in
//! write-combined or cached host memory ([`StagingMemory`]).
//!
//! A frame loop records the queued copies into its own command buffer instead
//! ([`Uploader::record`]), with barriers for the stages that read the data: no submission of the
//! uploader's own, and ring space comes back once that command buffer has run.

use crate::device::blocks::MemoryError;
use crate::device::life::{Garbage, Life};
use crate::device::Device;
use crate::error::VulkanError;
use crate::poison::PoisonFree;
use crate::resources::buffer::{Buffer, BufferDesc};
use crate::resources::host_import::{ImportRefused, ImportedSlice};
use crate::sync::commands::{CommandContext, Submission};
use crate::sync::recording::{MemoryDependency, Recording};
use ash::vk;
use residency_core::allocator::{FrameId, RingAllocator, RingError};
use residency_core::memory::MemoryIntent;
use residency_core::tiles::TexelRegion;
use residency_core::usage::BufferUsage;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

/// An upload could not be done.
#[derive(Debug, thiserror::Error)]
pub enum UploadError {
    /// A copy into an image cannot run in the region's layout: a copy destination is in
    /// `GENERAL` or `TRANSFER_DST_OPTIMAL`, and a sparse image is in `GENERAL` for life.
    #[error("upload to `{name}`: an image copy destination cannot be in {layout:?}")]
    Layout {
        /// The image.
        name: String,
        /// The region's layout.
        layout: vk::ImageLayout,
    },
    /// The destination range is outside the buffer.
    #[error("upload to `{name}`: bytes {offset}..{end} are outside its {size} B")]
    OutOfBounds {
        /// The destination.
        name: String,
        /// Start of the range.
        offset: u64,
        /// End of the range.
        end: u64,
        /// The destination's size.
        size: u64,
    },
    /// The image's format is one the core has no texel size for (made with
    /// `ImageDesc::with_vk_format`): an upload cannot size its rows.
    #[error("upload to `{name}`: its format has no texel size residency knows")]
    UnknownTexelSize {
        /// The destination.
        name: String,
    },
    /// The destination cannot be written by copies.
    #[error("upload to `{name}`: it lacks the copy_dst usage")]
    NotCopyDestination {
        /// The destination.
        name: String,
    },
    /// A broadcast of an image to several devices needs to read the old texels back to undo a
    /// device's copy when another device fails (`MultiImage::broadcast`), and the image cannot be
    /// read by copies.
    #[error(
        "upload to `{name}`: it lacks the copy_src usage a broadcast to several devices needs to undo a copy"
    )]
    NotCopySource {
        /// The destination.
        name: String,
    },
    /// One image region is larger than half the staging ring.
    #[error("an image upload of {bytes} B exceeds the staging limit of {limit} B per region")]
    TooLarge {
        /// Bytes of the region.
        bytes: u64,
        /// Largest region.
        limit: u64,
    },
    /// The destination lives on another device than the uploader.
    #[error("upload to `{name}`: it lives on device {owner}, the uploader on device {uploader}")]
    WrongDevice {
        /// The destination.
        name: String,
        /// Its device.
        owner: residency_core::device_mask::DeviceIndex,
        /// The uploader's device.
        uploader: residency_core::device_mask::DeviceIndex,
    },
    /// The staging ring asked for is too small to hold a copy.
    #[error("a staging ring of {capacity} B is smaller than the minimum of {minimum} B")]
    RingTooSmall {
        /// Bytes asked for.
        capacity: u64,
        /// The smallest ring.
        minimum: u64,
    },
    /// The data is not the region's size in the image's format (tightly packed texel blocks).
    /// Nothing was staged.
    #[error("upload to `{name}`: the region holds {expected} B, {got} B were given")]
    WrongSize {
        /// The destination.
        name: String,
        /// Bytes the region holds.
        expected: u64,
        /// Bytes given.
        got: u64,
    },
    /// The region is not inside the image: no such mip or layer, or texels past the mip's edge.
    #[error(
        "upload to `{name}`: texels {offset:?} + {extent:?} of mip {mip}, layer {layer} are outside \
         the image (that mip is {mip_extent:?}; {mip_levels} mips, {array_layers} layers)"
    )]
    RegionOutsideImage {
        /// The destination.
        name: String,
        /// The mip asked for.
        mip: u32,
        /// The layer asked for.
        layer: u32,
        /// First texel.
        offset: [u32; 3],
        /// Size in texels.
        extent: [u32; 3],
        /// The extent of that mip (zeros: no such mip).
        mip_extent: [u32; 3],
        /// The image's mip levels.
        mip_levels: u32,
        /// The image's array layers.
        array_layers: u32,
    },
    /// A block-compressed image's region does not start on a texel block, or neither ends on one
    /// nor at the mip's edge.
    #[error("upload to `{name}`: texels {offset:?} + {extent:?} do not align to its {block:?} blocks")]
    RegionMisaligned {
        /// The destination.
        name: String,
        /// First texel.
        offset: [u32; 3],
        /// Size in texels.
        extent: [u32; 3],
        /// The format's block extent.
        block: [u32; 2],
    },
    /// The region's aspect is not exactly one aspect of the image's format (`COLOR` for colour
    /// and compressed formats, `DEPTH` or `STENCIL` for depth/stencil ones: a copy moves one
    /// aspect at a time).
    #[error("upload to `{name}`: aspect {aspect:?} is not one aspect of its format (of {allowed:?})")]
    Aspect {
        /// The destination.
        name: String,
        /// The aspect asked for.
        aspect: vk::ImageAspectFlags,
        /// The format's aspects.
        allowed: vk::ImageAspectFlags,
    },
    /// The image is multisampled: copies between buffers and images need one sample.
    #[error("upload to `{name}`: it has {samples} samples; copies need one")]
    Multisampled {
        /// The destination.
        name: String,
        /// Its samples per texel.
        samples: u32,
    },
    /// Creating the staging buffer failed.
    #[error(transparent)]
    Memory(#[from] MemoryError),
    /// The ring is full of copies recorded into a command buffer that has not run yet (submit
    /// the frame that carries them, or stage less per frame).
    #[error("the staging ring is full of copies recorded into a command buffer that has not run")]
    RingBusy,
    /// [`Uploader::record`]'s readers must be shader stages.
    #[error("the readers of recorded uploads must be shader stages, not {stages:?}")]
    Readers {
        /// The stages given.
        stages: vk::PipelineStageFlags2,
    },
    /// A Vulkan call failed.
    #[error(transparent)]
    Vulkan(#[from] VulkanError),
}

impl ResidencyError for UploadError {
    fn class(&self) -> ErrorClass {
        match self {
            UploadError::Memory(e) => e.class(),
            UploadError::Vulkan(e) => e.class(),
            // Submit the recordings that hold the ring's copies (or wait for them), then retry.
            UploadError::RingBusy => ErrorClass::OutOfMemory(Exhausted::Capacity),
            UploadError::Layout { .. }
            | UploadError::OutOfBounds { .. }
            | UploadError::UnknownTexelSize { .. }
            | UploadError::NotCopyDestination { .. }
            | UploadError::NotCopySource { .. }
            | UploadError::TooLarge { .. }
            | UploadError::WrongDevice { .. }
            | UploadError::RingTooSmall { .. }
            | UploadError::WrongSize { .. }
            | UploadError::RegionOutsideImage { .. }
            | UploadError::RegionMisaligned { .. }
            | UploadError::Aspect { .. }
            | UploadError::Multisampled { .. }
            | UploadError::Readers { .. } => ErrorClass::Refused,
        }
    }
}

/// Records `copies` out of `staging` into `cmd`.
fn record_copies(device: &Device, cmd: vk::CommandBuffer, staging: vk::Buffer, copies: &[PendingCopy]) {
    // SAFETY: `cmd` is recording on `device`, outside a render pass; the staging buffer and every
    // destination are live buffers and images of this device (checked when queued; held by the
    // caller's recording until its submission), every region lies inside its destination
    // (checked when queued), and every image is in its region's copy-destination layout when the
    // copies run (noted by the caller as the recording's requirements, checked at submission).
    unsafe {
        let raw = device.raw();
        let barrier = [vk::MemoryBarrier2::default()
            .src_stage_mask(vk::PipelineStageFlags2::COPY)
            .src_access_mask(vk::AccessFlags2::TRANSFER_WRITE)
            .dst_stage_mask(vk::PipelineStageFlags2::COPY)
            .dst_access_mask(vk::AccessFlags2::TRANSFER_WRITE)];
        for copy in copies {
            match copy {
                PendingCopy::Barrier => {
                    raw.cmd_pipeline_barrier2(cmd, &vk::DependencyInfo::default().memory_barriers(&barrier))
                }
                PendingCopy::Buffer { dst, region } => raw.cmd_copy_buffer(cmd, staging, *dst, &[*region]),
                PendingCopy::Image { dst, layout, region, .. } => {
                    raw.cmd_copy_buffer_to_image(cmd, staging, *dst, *layout, &[*region]);
                }
            }
        }
    }
}

#[derive(Clone)]
enum PendingCopy {
    /// Earlier copies before later ones: a later copy writes bytes an earlier one of the batch
    /// wrote.
    Barrier,
    Buffer {
        dst: vk::Buffer,
        region: vk::BufferCopy,
    },
    Image {
        dst: vk::Image,
        layout: vk::ImageLayout,
        region: vk::BufferImageCopy,
        /// The image's layout record (`None`: a sparse image, `GENERAL` for life).
        layouts: Option<Arc<crate::resources::image::Layouts>>,
    },
}

mod target {
    use crate::device::life::Life;
    use ash::vk;
    use residency_core::format::Format;
    use std::sync::Arc;

    /// What a copy into (or out of) an image needs to know about it.
    #[derive(Debug)]
    pub struct TargetInfo<'a> {
        pub(crate) raw: vk::Image,
        pub(crate) name: &'a str,
        pub(crate) format: Format,
        /// Mip 0's extent in texels.
        pub(crate) extent: [u32; 3],
        pub(crate) mip_levels: u32,
        pub(crate) array_layers: u32,
        /// Samples per texel (copies need 1).
        pub(crate) samples: u32,
        /// Whether copies may write it (`TRANSFER_DST` usage).
        pub(crate) copy_dst: bool,
        /// What keeps it (and what it points into) alive; its device.
        pub(crate) life: &'a Arc<Life>,
        /// Its layout record; `None` for a sparse image, which is in `GENERAL` for life.
        pub(crate) layouts: Option<&'a Arc<crate::resources::image::Layouts>>,
    }

    /// Seals [`ImageTarget`](super::ImageTarget): only this crate's images implement it.
    pub trait Sealed {
        /// The image as a copy target.
        fn target(&self) -> TargetInfo<'_>;

        /// The bytes of memory it is bound to when other resources may be bound to them too (a
        /// transient frame's image): memory, offset, size. `None` (the default): its bytes are
        /// its own.
        fn aliased_memory(&self) -> Option<(vk::DeviceMemory, u64, u64)> {
            None
        }
    }
}

pub(crate) use target::{Sealed, TargetInfo};

/// An image residency made that an [`ImageRegion`] can name: [`Image`](crate::Image) (a software
/// path's atlas and indirection, a min-LOD map are ones too) and
/// [`SparseImage`](crate::sparse::SparseImage). Implemented in this crate only: the uploader trusts
/// what it reports (its `VkImage`, format, extent, device) and holds it alive until the copy is
/// submitted.
pub trait ImageTarget: target::Sealed + std::fmt::Debug + Sync {}

impl TargetInfo<'_> {
    /// The extent of `mip` (`None`: no such mip).
    pub(crate) fn mip_extent(&self, mip: u32) -> Option<[u32; 3]> {
        (mip < self.mip_levels).then(|| self.extent.map(|e| (e >> mip).max(1)))
    }
}

/// One region of an image to upload to (or read from): a box of texels of one mip of one layer.
#[derive(Clone, Copy, Debug)]
pub struct ImageRegion<'a> {
    /// The image (it stays alive until the copy is submitted).
    pub image: &'a dyn ImageTarget,
    /// The layout the image is in when the copy runs (`GENERAL` or `TRANSFER_DST_OPTIMAL`;
    /// `GENERAL` for a sparse image). The submission that carries the copy checks it against the
    /// image's layouts in submission order, and is refused with
    /// [`VulkanError::ImageLayout`] otherwise.
    pub layout: vk::ImageLayout,
    /// The aspect: exactly one of the format's (`COLOR`; `DEPTH` or `STENCIL` for a
    /// depth/stencil format, whose aspects are copied one at a time). Anything else is
    /// [`UploadError::Aspect`].
    pub aspect: vk::ImageAspectFlags,
    /// Mip level.
    pub mip: u32,
    /// Array layer.
    pub layer: u32,
    /// First texel.
    pub offset: [u32; 3],
    /// Size in texels.
    pub extent: [u32; 3],
}

impl<'a> ImageRegion<'a> {
    /// `extent` texels at `offset` of `mip`, layer 0, of an image in `GENERAL` layout (residency's
    /// images live in it), the aspect of its format (`DEPTH` for a depth/stencil format: set
    /// `aspect` to `STENCIL` for the other one).
    pub fn new(image: &'a dyn ImageTarget, mip: u32, offset: [u32; 3], extent: [u32; 3]) -> Self {
        let aspect = crate::format_map::aspect(image.target().format);
        ImageRegion {
            image,
            layout: vk::ImageLayout::GENERAL,
            aspect: if aspect.contains(vk::ImageAspectFlags::DEPTH) {
                vk::ImageAspectFlags::DEPTH
            } else {
                aspect
            },
            mip,
            layer: 0,
            offset,
            extent,
        }
    }

    /// Sets the array layer.
    pub fn with_layer(mut self, layer: u32) -> Self {
        self.layer = layer;
        self
    }

    /// Sets the layout the image is in when the copy runs.
    pub fn with_layout(mut self, layout: vk::ImageLayout) -> Self {
        self.layout = layout;
        self
    }

    /// The bytes of tightly packed texel blocks the region holds in its image's format (of the
    /// stencil aspect, one byte per texel, when that is the region's aspect).
    pub fn bytes(&self) -> u64 {
        let format = self.image.target().format;
        let format = if self.aspect == vk::ImageAspectFlags::STENCIL
            && format.kind() == residency_core::format::FormatKind::DepthStencil
        {
            residency_core::format::Format::R8Uint
        } else {
            format
        };
        format.region_bytes(self.extent[0], self.extent[1], self.extent[2])
    }

    /// The `VkBufferImageCopy` between tightly packed texels at `buffer_offset` and this region.
    pub fn buffer_image_copy(&self, buffer_offset: u64) -> vk::BufferImageCopy {
        vk::BufferImageCopy {
            buffer_offset,
            buffer_row_length: 0,
            buffer_image_height: 0,
            image_subresource: vk::ImageSubresourceLayers {
                aspect_mask: self.aspect,
                mip_level: self.mip,
                base_array_layer: self.layer,
                layer_count: 1,
            },
            image_offset: vk::Offset3D {
                x: self.offset[0] as i32,
                y: self.offset[1] as i32,
                z: self.offset[2] as i32,
            },
            image_extent: vk::Extent3D {
                width: self.extent[0],
                height: self.extent[1],
                depth: self.extent[2],
            },
        }
    }

    /// Checks that the region lies inside its image: the mip and layer exist, the box ends inside
    /// the mip, and a block-compressed format's box starts on a block and ends on one or at the
    /// mip's edge.
    pub(crate) fn check(&self) -> Result<(), UploadError> {
        let t = self.image.target();
        let outside = |mip_extent: [u32; 3]| UploadError::RegionOutsideImage {
            name: t.name.to_owned(),
            mip: self.mip,
            layer: self.layer,
            offset: self.offset,
            extent: self.extent,
            mip_extent,
            mip_levels: t.mip_levels,
            array_layers: t.array_layers,
        };
        if t.format == residency_core::format::Format::Unknown {
            return Err(UploadError::UnknownTexelSize { name: t.name.to_owned() });
        }
        if t.samples != 1 {
            return Err(UploadError::Multisampled { name: t.name.to_owned(), samples: t.samples });
        }
        let allowed = crate::format_map::aspect(t.format);
        if self.aspect.as_raw().count_ones() != 1 || !allowed.contains(self.aspect) {
            return Err(UploadError::Aspect { name: t.name.to_owned(), aspect: self.aspect, allowed });
        }
        let Some(mip_extent) = t.mip_extent(self.mip) else { return Err(outside([0; 3])) };
        let texels = TexelRegion { offset: self.offset, extent: self.extent };
        let end = match texels.end() {
            Some(end) if self.layer < t.array_layers && texels.lies_within(mip_extent) => end,
            _ => return Err(outside(mip_extent)),
        };
        let (bw, bh) = t.format.block_extent();
        let block = [bw, bh, 1];
        let aligned = (0..3).all(|a| {
            self.offset[a].checked_rem(block[a]) == Some(0)
                && (self.extent[a].checked_rem(block[a]) == Some(0) || end[a] == mip_extent[a])
        });
        if !aligned {
            return Err(UploadError::RegionMisaligned {
                name: t.name.to_owned(),
                offset: self.offset,
                extent: self.extent,
                block: [bw, bh],
            });
        }
        Ok(())
    }
}

struct State {
    ring: RingAllocator,
    copies: Vec<PendingCopy>,
    /// The layout the queued copies use for each subresource (by its image's layout record,
    /// mip, layer): copies of one submission agree on it.
    copy_layouts: std::collections::HashMap<(usize, u32, u32), vk::ImageLayout>,
    /// The destinations of the queued copies, kept alive until the copies are submitted (after
    /// that, a destination dropped retires after the upload like after any residency submission).
    keep: Vec<Arc<Life>>,
    in_flight: Vec<(FrameId, Flight)>,
    /// What the queued copies since the last `Barrier` write: destination (handle, mip, layer)
    /// and box (bytes for a buffer).
    written: Vec<Written>,
    /// The copies of the latest [`Uploader::record_requeueable`], until the next recording (or a
    /// submission, or [`Uploader::forget_recorded`]): what [`Uploader::requeue_recorded`] queues
    /// again when that recording's submission failed.
    last_recorded: Option<RecordedBatch>,
    /// Ring frames whose copies were queued again after their recording failed: each frame's
    /// flag in `in_flight` rises once the copies that now carry its data have run (the next
    /// recording or submission keeps a [`Garbage::Signal`] of it).
    carried: Vec<(FrameId, Arc<AtomicBool>)>,
}

/// The copies one [`Uploader::record`] put into a recording, with what they need to be queued
/// again: the ring frames their data lies in and their destinations.
struct RecordedBatch {
    copies: Vec<PendingCopy>,
    keep: Vec<Arc<Life>>,
    frames: Vec<FrameId>,
}

/// A queued copy's destination (handle, mip, layer) and box, `[lo, hi)` per axis: an image's
/// subresource and texels, or a `VkDeviceMemory` ([`MEMORY`] for mip and layer) and bytes.
type Written = ((u64, u32, u32), [u64; 3], [u64; 3]);

/// The mip and layer of a [`Written`] that names bytes of a `VkDeviceMemory`.
const MEMORY: u32 = u32::MAX;

/// A copy's bytes `[start, end)` of `memory`, as a [`Written`]: buffer copies are tracked by the
/// memory they write, not the `VkBuffer`, so two buffers bound to the same bytes (a transient
/// frame's aliasing buffers) are seen to overlap, and so is a transient image over them.
fn memory_written(memory: vk::DeviceMemory, start: u64, end: u64) -> Written {
    ((vk::Handle::as_raw(memory), MEMORY, MEMORY), [start, 0, 0], [end, 1, 1])
}

impl State {
    /// Notes a copy into the boxes `written` (one destination, seen one or more ways): a barrier
    /// first when any overlaps a queued copy's.
    fn note_write(&mut self, written: &[Written]) {
        let overlaps = written.iter().any(|(dst, lo, hi)| {
            self.written.iter().any(|(d, l, h)| d == dst && (0..3).all(|a| lo[a] < h[a] && l[a] < hi[a]))
        });
        if overlaps {
            self.copies.push(PendingCopy::Barrier);
            self.written.clear();
        }
        self.written.extend_from_slice(written);
    }
}

/// Queued copies taken out of [`State`] to submit.
struct Batch {
    copies: Vec<PendingCopy>,
    copy_layouts: std::collections::HashMap<(usize, u32, u32), vk::ImageLayout>,
    carried: Vec<(FrameId, Arc<AtomicBool>)>,
}

impl Batch {
    /// Takes every queued copy (with the layouts they use and the carried frames their
    /// submission gives back) out of `state`.
    fn take(state: &mut State) -> Batch {
        state.written.clear();
        Batch {
            copies: std::mem::take(&mut state.copies),
            copy_layouts: std::mem::take(&mut state.copy_layouts),
            carried: std::mem::take(&mut state.carried),
        }
    }
}

/// Ring space in use by the GPU: copies of the uploader's own submission, or copies recorded into
/// a renderer's command buffer (the flag rises once that has run, through the retire queue).
enum Flight {
    Submitted(Submission),
    Recorded(Arc<AtomicBool>),
}

/// A staging ring and the command context that copies out of it. Dropping it waits for its
/// uploads (bounded on a lost device) and releases the ring.
///
/// Its calls share one lock, which a call that submits holds while it waits for the queue's lock.
/// On a thread that holds a queue lock of the device ([`Queue::lock`](crate::Queue::lock), a
/// [`PendingFrame`](crate::PendingFrame), `submit_checked`'s closure), the calls that take it
/// (`write_buffer`, `upload_buffer`, `write_image`, `record`, `flush`, `wait_idle`) are refused
/// with [`VulkanError::Reentrant`] instead of waiting for a thread that waits for this one.
pub struct Uploader {
    device: Arc<Device>,
    staging: Buffer,
    context: CommandContext,
    state: Mutex<State>,
    /// The ring's figures as the state was last released ([`Uploader::staging_in_use`]).
    seen: Seen,
    /// Threads that copy one large chunk of a write into the ring (see [`Uploader::with_copy_threads`]).
    copy_threads: usize,
    /// [`Uploader::upload_buffer`] imports slices of at least this many bytes
    /// ([`Uploader::with_import_threshold`]).
    import_threshold: u64,
    /// Bytes per import and copy of an imported slice ([`Uploader::with_import_chunk`]).
    import_chunk: u64,
    /// Threads that import the pieces of one slice ([`Uploader::with_import_threads`]).
    import_threads: usize,
    /// Whether staging writes use non-temporal stores ([`Uploader::with_streaming_stores`]).
    streaming_stores: bool,
    /// The memory the ring lives in ([`Uploader::with_staging_memory`]).
    staging_memory: StagingMemory,
    /// Bytes per staged and submitted chunk of a large write (`None`: [`DEFAULT_CHUNK_BYTES`], at
    /// most a quarter of the ring;
    /// [`Uploader::with_chunk_bytes`]).
    chunk_bytes: Option<u64>,
    /// The part of the ring a streamed write's chunks cycle through (`None`:
    /// [`DEFAULT_STREAM_WINDOW`]; [`Uploader::with_stream_window`]).
    stream_window: Option<u64>,
}

/// The host memory an [`Uploader`]'s staging ring lives in ([`Uploader::with_staging_memory`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum StagingMemory {
    /// A host-coherent type that is not host-cached where the device has one
    /// ([`MemoryIntent::Upload`]): on a discrete GPU, write-combined system memory. Host stores
    /// bypass the cache (combined into whole lines), and the DMA engine's reads need no snoop.
    #[default]
    WriteCombined,
    /// A host-cached type, host-coherent where the device has one ([`MemoryIntent::Readback`]),
    /// flushed after each staging write where it is not coherent. Host stores go through the
    /// cache: with plain stores (`with_streaming_stores(false)`) and a ring that fits the
    /// host's last-level cache, the DMA engine can read the staged bytes from the cache instead
    /// of memory, so memory only sees the source's reads. Where the device has one host-visible
    /// type (lavapipe, unified memory), both kinds are the same memory.
    Cached,
}

impl StagingMemory {
    /// The intent the ring's buffer is created with.
    pub fn intent(self) -> MemoryIntent {
        match self {
            StagingMemory::WriteCombined => MemoryIntent::Upload,
            StagingMemory::Cached => MemoryIntent::Readback,
        }
    }
}

impl std::fmt::Debug for Uploader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Uploader").field("staging", &self.staging.name()).finish_non_exhaustive()
    }
}

/// What a thread that cannot lock an uploader's state reads of it ([`Uploader::staging_in_use`]):
/// the ring's bytes in use and the batches in flight when the state was last released.
#[derive(Debug, Default)]
struct Seen(std::sync::atomic::AtomicU64, std::sync::atomic::AtomicUsize);

/// An uploader's locked state ([`Uploader::lock`]); notes the ring's figures when released.
struct StateGuard<'a> {
    state: std::sync::MutexGuard<'a, State>,
    seen: &'a Seen,
}

impl std::ops::Deref for StateGuard<'_> {
    type Target = State;
    fn deref(&self) -> &State {
        &self.state
    }
}

impl std::ops::DerefMut for StateGuard<'_> {
    fn deref_mut(&mut self) -> &mut State {
        &mut self.state
    }
}

impl Drop for StateGuard<'_> {
    fn drop(&mut self) {
        self.seen.0.store(self.state.ring.used_bytes(), Ordering::Release);
        self.seen.1.store(self.state.in_flight.len(), Ordering::Release);
    }
}

/// What an uploader's calls answer on a thread that holds a queue lock of its device.
const REENTRANT_UPLOAD: &str =
    "an uploader call on a thread that holds a queue lock of its device (`Queue::lock`, a \
     `PendingFrame`, `submit_checked`'s closure): another thread may hold the uploader while it \
     waits for that lock to submit its copies";

/// Staging allocations are aligned for any copy (`optimalBufferCopyOffsetAlignment` is at most this
/// on the devices we know; 16 also covers texel-block sizes).
const STAGING_ALIGNMENT: u64 = 16;

impl Uploader {
    /// Creates an uploader with a staging ring of `capacity` bytes in
    /// [`StagingMemory::WriteCombined`] memory.
    pub fn new(device: &Device, name: &str, capacity: u64) -> Result<Uploader, UploadError> {
        Uploader::with_staging_memory(device, name, capacity, StagingMemory::default())
    }

    /// Creates an uploader with a staging ring of `capacity` bytes in `memory`.
    pub fn with_staging_memory(
        device: &Device,
        name: &str,
        capacity: u64,
        memory: StagingMemory,
    ) -> Result<Uploader, UploadError> {
        let minimum = 4 * STAGING_ALIGNMENT;
        if capacity < minimum {
            return Err(UploadError::RingTooSmall { capacity, minimum });
        }
        let desc = BufferDesc::new(format!("{name} staging ring"), capacity, BufferUsage::COPY_SRC)
            .with_intent(memory.intent())
            .committed();
        let staging = device.create_buffer(&desc)?;
        let context = CommandContext::new(device, &format!("{name} commands"))?;
        let ring = RingAllocator::new(capacity).expect("capacity is non-zero: the buffer exists");
        Ok(Uploader {
            device: device.arc(),
            staging,
            context,
            state: Mutex::new(State {
                ring,
                copies: Vec::new(),
                copy_layouts: Default::default(),
                written: Vec::new(),
                keep: Vec::new(),
                in_flight: Vec::new(),
                last_recorded: None,
                carried: Vec::new(),
            }),
            seen: Seen::default(),
            copy_threads: default_copy_threads(),
            import_threshold: DEFAULT_IMPORT_THRESHOLD,
            import_chunk: DEFAULT_IMPORT_CHUNK,
            import_threads: default_copy_threads().min(4),
            streaming_stores: true,
            staging_memory: memory,
            chunk_bytes: None,
            stream_window: None,
        })
    }

    /// The memory the staging ring lives in.
    pub fn staging_memory(&self) -> StagingMemory {
        self.staging_memory
    }

    /// Sets the bytes of one chunk of a large write (default [`DEFAULT_CHUNK_BYTES`], at most a
    /// quarter of the ring): a write larger than a chunk is streamed through the ring — each
    /// chunk gets ring space as soon as the ring has room, the copy threads stage pieces of
    /// every such chunk without waiting for each other, and each chunk's copy is submitted as
    /// soon as its bytes are staged, so the DMA engine copies while the host stages and only the
    /// last chunk's copy is left once the host is done. Clamped to between 64 KiB and half the
    /// ring (two chunks in flight at least). Smaller chunks shorten that last copy and let a
    /// small ring stay in the host's cache; each chunk is one submission.
    pub fn with_chunk_bytes(mut self, bytes: u64) -> Uploader {
        self.chunk_bytes = Some(bytes);
        self
    }

    /// Sets how much of the ring a streamed write (one larger than a chunk) cycles through: its
    /// chunks take ring space within the ring's first `bytes` (at least two chunks, at most the
    /// ring; default [`DEFAULT_STREAM_WINDOW`]), so a long write touches that much staging
    /// memory however large the ring is. Other writes use the whole ring.
    pub fn with_stream_window(mut self, bytes: u64) -> Uploader {
        self.stream_window = Some(bytes);
        self
    }

    /// The bytes of the ring a streamed write cycles through (see
    /// [`Uploader::with_stream_window`]).
    pub fn stream_window(&self) -> u64 {
        let capacity = self.staging.size();
        self.stream_window
            .unwrap_or(DEFAULT_STREAM_WINDOW)
            .clamp((2 * self.chunk_bytes()).min(capacity), capacity)
    }

    /// Bytes of one chunk of a large write (see [`Uploader::with_chunk_bytes`]).
    pub fn chunk_bytes(&self) -> u64 {
        let capacity = self.staging.size();
        let chunk = self.chunk_bytes.unwrap_or(DEFAULT_CHUNK_BYTES.min(capacity / 4));
        chunk.clamp(MIN_CHUNK.min(capacity / 2), capacity / 2)
    }

    /// Sets how many threads copy a large write into the staging ring (at least 1; the default is
    /// the host's available parallelism, at most 16). A write is shared among them only when each
    /// gets at least [`PARALLEL_COPY_PIECE`] bytes, so small writes stay on the calling thread;
    /// they take 256 KiB pieces in turn, so one that starts late takes fewer. The helpers are
    /// persistent threads started once per process. Copying
    /// from ordinary (pageable) host memory into the pinned ring is what limits a single thread;
    /// several reach the DMA engine's rate.
    pub fn with_copy_threads(mut self, threads: usize) -> Uploader {
        self.copy_threads = threads.max(1);
        self
    }

    /// How many threads copy a large write into the ring.
    pub fn copy_threads(&self) -> usize {
        self.copy_threads
    }

    /// Sets whether the copies into the staging ring use non-temporal (streaming) stores, where
    /// the CPU has them (x86-64: AVX or SSE2), for pieces of 4 KiB and more (default: on; the H200 staged 35.9 instead of 34.7 GB/s at
    /// 256 MiB and 39.1 instead of 32.2 at 1 GiB with them, session 13).
    /// Ordinary stores read each destination line into the cache before writing it, so a
    /// staging copy moves three bytes over the memory bus per byte staged; streaming stores write
    /// the line without reading it (two per byte: the source read, the ring write) and leave the
    /// cache to the caller.
    pub fn with_streaming_stores(mut self, on: bool) -> Uploader {
        self.streaming_stores = on;
        self
    }

    /// Sets the smallest slice [`Uploader::upload_buffer`] imports instead of staging (default
    /// [`DEFAULT_IMPORT_THRESHOLD`]; `u64::MAX`: never import). Importing pins the slice's pages,
    /// a cost per page that a small slice's staging copy undercuts.
    pub fn with_import_threshold(mut self, bytes: u64) -> Uploader {
        self.import_threshold = bytes;
        self
    }

    /// Sets the bytes of one import of [`Uploader::upload_buffer`] (default
    /// [`DEFAULT_IMPORT_CHUNK`]; rounded up to the device's import alignment): a large slice is
    /// imported and copied piece by piece, the GPU copying one piece while the host pins the next.
    pub fn with_import_chunk(mut self, bytes: u64) -> Uploader {
        self.import_chunk = bytes.max(1);
        self
    }

    /// The device it uploads on.
    pub fn device(&self) -> &Arc<Device> {
        &self.device
    }

    /// The uploader's state, refused on a thread that holds a queue lock of its device
    /// ([`Queue::lock`](crate::Queue::lock), a [`PendingFrame`](crate::PendingFrame),
    /// `submit_checked`'s closure): another thread may hold the state while it waits for that
    /// lock to submit the uploader's copies, and waiting for it here would wait for that thread,
    /// which waits for this one.
    fn lock(&self) -> Result<StateGuard<'_>, UploadError> {
        if self.device.queue_locked_here() {
            return Err(VulkanError::Reentrant { what: REENTRANT_UPLOAD }.into());
        }
        Ok(StateGuard { state: self.state.locked(), seen: &self.seen })
    }

    /// Bytes of the staging ring (host-visible memory it holds for its life).
    pub fn staging_capacity(&self) -> u64 {
        // The ring was made with the staging buffer's size: no lock.
        self.staging.size()
    }

    /// Bytes of the staging ring in use now (staged, or in copies the GPU has not run yet), and
    /// how many batches of copies are in flight. On a thread that holds a queue lock of the
    /// device, where waiting for the uploader's state could wait forever (see
    /// [`Uploader::write_buffer`]), the figures as the uploader's last call left them, without
    /// reclaiming what completed since.
    pub fn staging_in_use(&self) -> (u64, usize) {
        let Ok(mut state) = self.lock() else {
            return (self.seen.0.load(Ordering::Acquire), self.seen.1.load(Ordering::Acquire));
        };
        self.reclaim(&mut state);
        (state.ring.used_bytes(), state.in_flight.len())
    }

    /// The checks of [`Uploader::write_buffer`] for `len` bytes at `offset` of `dst`, staging
    /// nothing: its device, the range, `COPY_DST` usage. Every buffer upload goes through it
    /// (this uploader's, and [`MultiUploader::broadcast`](crate::MultiUploader::broadcast) on
    /// each device before anything is staged on any).
    pub(crate) fn check_buffer_write(&self, dst: &Buffer, offset: u64, len: u64) -> Result<(), UploadError> {
        if !dst.device().is(&self.device) {
            return Err(UploadError::WrongDevice {
                name: dst.name().to_owned(),
                owner: dst.device_index(),
                uploader: self.device.index(),
            });
        }
        let end = offset.saturating_add(len);
        if end > dst.size() {
            return Err(UploadError::OutOfBounds {
                name: dst.name().to_owned(),
                offset,
                end,
                size: dst.size(),
            });
        }
        if !dst.usage().contains(BufferUsage::COPY_DST) {
            return Err(UploadError::NotCopyDestination { name: dst.name().to_owned() });
        }
        Ok(())
    }

    /// The checks of [`Uploader::write_image`] for `len` bytes into `region`, staging nothing
    /// (the queued-layout check aside, which needs the ring's state): its device, `COPY_DST`
    /// usage, the region, the layout, the size, and at most half the ring. Every image upload
    /// goes through it (this uploader's, and `MultiImage::broadcast_region` on each device before
    /// anything is staged on any).
    pub(crate) fn check_image_write(&self, region: &ImageRegion<'_>, len: u64) -> Result<(), UploadError> {
        let target = region.image.target();
        if !target.life.device().is(&self.device) {
            return Err(UploadError::WrongDevice {
                name: target.name.to_owned(),
                owner: target.life.device().index(),
                uploader: self.device.index(),
            });
        }
        if !target.copy_dst {
            return Err(UploadError::NotCopyDestination { name: target.name.to_owned() });
        }
        region.check()?;
        let copy_layouts = [vk::ImageLayout::GENERAL, vk::ImageLayout::TRANSFER_DST_OPTIMAL];
        let sparse_ok = target.layouts.is_some() || region.layout == vk::ImageLayout::GENERAL;
        if !copy_layouts.contains(&region.layout) || !sparse_ok {
            return Err(UploadError::Layout { name: target.name.to_owned(), layout: region.layout });
        }
        let expected = region.bytes();
        if len != expected {
            return Err(UploadError::WrongSize { name: target.name.to_owned(), expected, got: len });
        }
        let capacity = self.staging.size();
        if expected > capacity / 2 {
            return Err(UploadError::TooLarge { bytes: expected, limit: capacity / 2 });
        }
        Ok(())
    }

    /// Queues a copy of `data` into `dst` at `offset`. The data is in the staging ring on return; it
    /// reaches `dst` after the next [`Uploader::flush`]. Waits for the GPU only when the ring is full.
    pub fn write_buffer(&self, dst: &Buffer, offset: u64, data: &[u8]) -> Result<(), UploadError> {
        self.check_buffer_write(dst, offset, data.len() as u64)?;
        let mut state = self.lock()?;
        self.reclaim(&mut state);
        self.stage_buffer(&mut state, dst, offset, data)
    }

    /// [`Uploader::write_buffer`] after its checks, under the state lock.
    fn stage_buffer(
        &self,
        state: &mut State,
        dst: &Buffer,
        offset: u64,
        data: &[u8],
    ) -> Result<(), UploadError> {
        if data.is_empty() {
            // Nothing to stage or copy (a part of a split write can be empty: the head or tail
            // around an imported middle).
            return Ok(());
        }
        let capacity = self.staging.size();
        // Held from the first queued chunk on: an error part-way leaves queued copies into it.
        state.keep.push(Arc::clone(dst.life()));
        let chunk_bytes = self.chunk_bytes();
        if data.len() as u64 > chunk_bytes {
            return self.stream_buffer(state, dst, offset, data, chunk_bytes as usize);
        }
        let allocation = loop {
            match state.ring.allocate(data.len() as u64, STAGING_ALIGNMENT) {
                Ok(a) => break a,
                Err(RingError::Full { .. }) => self.make_room(state)?,
                Err(e) => unreachable!("a chunk is non-empty and at most half the ring ({capacity} B): {e}"),
            }
        };
        write_staging(&self.staging, allocation.offset, data, self.copy_threads, self.streaming_stores);
        Self::queue_buffer_copy(state, dst, offset, allocation.offset, data.len() as u64);
        Ok(())
    }

    /// Queues the copy of `len` staged bytes at `ring_offset` into `dst` at `offset`.
    fn queue_buffer_copy(state: &mut State, dst: &Buffer, offset: u64, ring_offset: u64, len: u64) {
        let start = dst.offset() + offset;
        let (memory, base) = dst.memory();
        state.note_write(&[memory_written(memory, base + offset, base + offset + len)]);
        state.copies.push(PendingCopy::Buffer {
            dst: dst.raw(),
            region: vk::BufferCopy { src_offset: ring_offset, dst_offset: start, size: len },
        });
    }

    /// A write larger than a chunk, streamed through the ring: the calling thread gives each
    /// chunk ring space as soon as the ring has room (each in a ring frame of its own), the copy
    /// threads stage pieces of every chunk that has space without waiting for each other
    /// (`stream_copy`), and the calling thread submits each chunk's copy as soon as its bytes
    /// are staged — the DMA engine copies one chunk while the threads stage the next ones, and
    /// the ring waits only for the oldest chunk. Between those steps the calling thread stages
    /// pieces itself. The last chunk stays queued (submitted by the next flush, like any write).
    fn stream_buffer(
        &self,
        state: &mut State,
        dst: &Buffer,
        offset: u64,
        data: &[u8],
        chunk: usize,
    ) -> Result<(), UploadError> {
        let staging = &self.staging;
        // Ring offset and frame of each chunk given space.
        let mut placed: Vec<(u64, FrameId)> = Vec::new();
        let mut submitted = 0usize;
        let window = self.stream_window();
        let mut failed = None;
        stream_copy(data, chunk, self.copy_threads, self.streaming_stores, |s| {
            let last = s.chunks() - 1;
            loop {
                // Submit the staged chunks in order (the last one excepted).
                while submitted < last && s.is_copied(submitted) {
                    let (ring_offset, frame) = placed[submitted];
                    let len = s.chunk_len(submitted) as u64;
                    if !staging.is_coherent() {
                        staging.flush_range(ring_offset, len);
                    }
                    let at = offset + (submitted * chunk) as u64;
                    Self::queue_buffer_copy(state, dst, at, ring_offset, len);
                    let batch = Batch::take(state);
                    // (A failed submission queues its copies again.)
                    let result = self.submit_batch(state, batch, Some(frame));
                    // A submission let go of the destination; the next chunk's copy holds it.
                    state.keep.push(Arc::clone(dst.life()));
                    submitted += 1;
                    if let Err(e) = result {
                        failed = Some(e);
                        return;
                    }
                }
                if submitted == last && s.published() == s.chunks() {
                    return;
                }
                // Ring space for as many chunks as fit.
                let mut published = false;
                while s.published() < s.chunks() {
                    self.reclaim(state);
                    let len = s.chunk_len(s.published()) as u64;
                    let allocation = match state.ring.allocate_within(len, STAGING_ALIGNMENT, window) {
                        Ok(a) => a,
                        Err(RingError::Full { .. }) => break,
                        Err(e) => unreachable!("chunks are non-empty and at most half the window: {e}"),
                    };
                    // A frame of its own: its space comes back once its own copy has run.
                    let frame = state.ring.finish_frame();
                    placed.push((allocation.offset, frame));
                    let bytes = staging
                        .mapped_range(allocation.offset, len)
                        .expect("ring allocations lie inside the mapped staging buffer");
                    // SAFETY: the ring hands this range to this write alone (under the state
                    // lock, which this call holds until `stream_copy` returns) and the GPU reads
                    // it only after the chunk's copy is submitted, below, once every byte is
                    // staged; the range lies inside the staging buffer's mapping (checked),
                    // which outlives the call.
                    unsafe { s.publish(bytes.as_ptr()) };
                    published = true;
                }
                if published {
                    continue;
                }
                if submitted < s.published() && submitted < last {
                    // Stage a piece here, or wait for the oldest unsubmitted chunk.
                    s.help_or_wait(submitted);
                } else if let Err(e) = self.make_room(state) {
                    // The ring is full of submitted chunks: the oldest's space comes back once
                    // its copy has run.
                    failed = Some(e);
                    return;
                }
            }
        });
        // Chunks staged but not submitted (the last; more after an error): every published
        // byte is staged now; queued for the next flush (a retry after an error).
        for (j, &(ring_offset, _)) in placed.iter().enumerate().skip(submitted) {
            let len = (data.len() - j * chunk).min(chunk) as u64;
            if !staging.is_coherent() {
                staging.flush_range(ring_offset, len);
            }
            Self::queue_buffer_copy(state, dst, offset + (j * chunk) as u64, ring_offset, len);
        }
        failed.map_or(Ok(()), Err)
    }

    /// Sets how many threads import the pieces of one slice for [`Uploader::upload_buffer`] (at
    /// least 1; default: the host's available parallelism, at most 4). Importing pins pages, a
    /// cost per page the driver pays on the importing thread; scoped threads started per call
    /// pin pieces side by side while the calling thread submits their copies.
    pub fn with_import_threads(mut self, threads: usize) -> Uploader {
        self.import_threads = threads.max(1);
        self
    }

    /// Bytes of one import of [`Uploader::upload_buffer`] (before rounding to the device's import
    /// alignment).
    pub fn import_chunk(&self) -> u64 {
        self.import_chunk
    }

    /// Threads that import the pieces of one slice.
    pub fn import_threads(&self) -> usize {
        self.import_threads
    }

    /// Copies `data` into `dst` at `offset` and returns once it is there (with every copy queued
    /// before it): what [`Uploader::write_buffer`] and [`Uploader::wait_idle`] do together, on
    /// the fastest path the device has.
    ///
    /// Where the device imports host memory ([`EnabledFeatures::external_memory_host`]) and the
    /// slice has at least [`Uploader::with_import_threshold`] bytes, the slice is copied from its
    /// own pages, with no staging copy on the host: its aligned middle (whole multiples of
    /// `minImportedHostPointerAlignment`, [`Device::host_import_alignment`]) is imported as host
    /// memory in pieces of [`Uploader::with_import_chunk`] bytes, each copied to `dst` by a
    /// submission of its own as soon as it is imported, so the GPU copies one piece while the
    /// host pins the next; the unaligned bytes at either end go through the staging ring. The
    /// call waits for those copies before it returns, so the slice stays borrowed (nobody
    /// writes or frees it) for as long as the GPU reads it — also when a wait fails (an error,
    /// an injected fault or loss): the call then waits on past the fault hook, bounded only on
    /// a device the driver reported lost, before it returns that error. Elsewhere (a small slice, a device
    /// without the extension, a pointer the driver refuses to import) the bytes are staged.
    /// Returns the path taken.
    ///
    /// Like a write larger than a chunk ([`Uploader::with_chunk_bytes`]), it submits on its own: copies recorded
    /// into a renderer's command buffer ([`Uploader::record`]) and not yet submitted run after
    /// it. Refused with nothing staged as [`Uploader::write_buffer`] is.
    ///
    /// [`EnabledFeatures::external_memory_host`]: crate::device::EnabledFeatures::external_memory_host
    pub fn upload_buffer(&self, dst: &Buffer, offset: u64, data: &[u8]) -> Result<UploadPath, UploadError> {
        self.check_buffer_write(dst, offset, data.len() as u64)?;
        let mut state = self.lock()?;
        self.reclaim(&mut state);
        let plan = match self.device.host_import_alignment() {
            Some(alignment) if data.len() as u64 >= self.import_threshold => import_plan(data, alignment),
            _ => None,
        };
        let Some((head, middle, tail)) = plan else {
            self.stage_buffer(&mut state, dst, offset, data)?;
            if !state.copies.is_empty() {
                self.submit(&mut state)?;
            }
            self.wait_flights(&mut state)?;
            return Ok(UploadPath::Staged);
        };
        // The ends through the ring, submitted with whatever was queued before (one submission).
        let mut staged = (head.len() + tail.len()) as u64;
        self.stage_buffer(&mut state, dst, offset, head)?;
        let tail_at = offset + (head.len() + middle.len()) as u64;
        self.stage_buffer(&mut state, dst, tail_at, tail)?;
        if !state.copies.is_empty() {
            self.submit(&mut state)?;
        }
        // The middle piece by piece: import, submit its copy, import the next while it runs
        // (with several import threads, pieces are pinned side by side and submitted as they
        // come).
        let alignment = self.device.host_import_alignment().unwrap_or(1);
        // A piece is at most the middle (a huge chunk setting cannot overflow the rounding).
        let chunk = self.import_chunk.min(middle.len() as u64).next_multiple_of(alignment) as usize;
        let pieces: Vec<(usize, &[u8])> =
            middle.chunks(chunk).enumerate().map(|(i, piece)| (head.len() + i * chunk, piece)).collect();
        // Every submitted piece is held here until its copy is known complete, also on an
        // unwind (a panic in an import thread): the slice's borrow never ends while one reads it.
        let mut in_flight = ImportsInFlight { context: &self.context, imports: Vec::new() };
        let mut failed = None;
        let mut refused = Vec::new();
        let name = self.staging.name();
        let imports = &mut in_flight.imports;
        let mut take = |i: usize, import| {
            let (at, piece) = pieces[i];
            match import {
                Ok(import) if failed.is_none() => {
                    match self.submit_imported(&import, dst, offset + at as u64, piece.len() as u64) {
                        Ok(submission) => imports.push((import, submission)),
                        Err(e) => {
                            // SAFETY: never submitted: no GPU work uses it.
                            unsafe { import.destroy() };
                            failed = Some(e);
                        }
                    }
                }
                // SAFETY: never submitted (an earlier piece's submission failed): no GPU work uses it.
                Ok(import) => unsafe { import.destroy() },
                Err(ImportRefused { reason }) => {
                    tracing::debug!(%reason, bytes = piece.len(), "host import refused: staging");
                    refused.push(i);
                }
            }
        };
        let threads = self.import_threads.min(pieces.len());
        if threads <= 1 {
            for (i, &(_, piece)) in pieces.iter().enumerate() {
                take(i, ImportedSlice::new(&self.device, piece, name));
            }
        } else {
            let next = std::sync::atomic::AtomicUsize::new(0);
            let device = &*self.device;
            std::thread::scope(|scope| {
                let (tx, rx) = std::sync::mpsc::channel();
                for _ in 0..threads {
                    let (tx, next, pieces) = (tx.clone(), &next, &pieces);
                    scope.spawn(move || loop {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        let Some(&(_, piece)) = pieces.get(i) else { break };
                        // The receiver drains every piece (below), so a send never fails while
                        // an import is in it.
                        let _ = tx.send((i, ImportedSlice::new(device, piece, name)));
                    });
                }
                drop(tx);
                for (i, import) in rx {
                    take(i, import);
                }
            });
        }
        // Pieces the driver refused to import, through the ring.
        let mut done = middle.len();
        for (at, piece) in refused.into_iter().map(|i| pieces[i]) {
            done -= piece.len();
            staged += piece.len() as u64;
            if failed.is_none() {
                if let Err(e) = self.stage_buffer(&mut state, dst, offset + at as u64, piece) {
                    failed = Some(e);
                }
            }
        }
        if failed.is_none() && !state.copies.is_empty() {
            if let Err(e) = self.submit(&mut state) {
                failed = Some(e);
            }
        }
        // Wait for every imported piece before the slice's borrow ends, then free the imports.
        // A failed wait is returned, but only once the copy is known complete (a wait past the
        // fault hook, as teardown's): neither the import nor the caller's slice may go while the
        // GPU may still read them — an injected loss or a failed wait leaves the copy running.
        while let Some((import, submission)) = in_flight.imports.pop() {
            match self.context.wait_for(&submission) {
                // SAFETY: its one copy, the only GPU work that uses it, has completed.
                Ok(()) => unsafe { import.destroy() },
                Err(e) => {
                    failed.get_or_insert(e.into());
                    in_flight.release(import, &submission);
                }
            }
        }
        if let Some(e) = failed {
            return Err(e);
        }
        self.wait_flights(&mut state)?;
        Ok(if done == 0 { UploadPath::Staged } else { UploadPath::Imported { staged } })
    }

    /// Submits one copy of `size` bytes from an imported slice into `dst` at `dst_offset`, between
    /// the barriers of [`Uploader::submit`] (earlier work on the destination first; later work
    /// sees the data).
    fn submit_imported(
        &self,
        import: &ImportedSlice<'_>,
        dst: &Buffer,
        dst_offset: u64,
        size: u64,
    ) -> Result<Submission, UploadError> {
        let device = &*self.device;
        let (before, after) = copy_barriers();
        let region = vk::BufferCopy { src_offset: 0, dst_offset: dst.offset() + dst_offset, size };
        let binds = device.submitted_binds();
        let submission = self.context.submit(binds.as_slice(), |rec| {
            rec.keep(dst.life());
            // SAFETY: `rec` is recording on this device outside a render pass; the imported
            // buffer is a live transfer-source buffer of this device holding at least `size`
            // bytes (the piece's length), which `upload_buffer` destroys only after this
            // submission completed; `dst` is a live buffer of this device with COPY_DST usage
            // (checked by `check_buffer_write`, kept by the recording) and the region lies inside
            // it (checked there too); the barriers live for the calls.
            unsafe {
                let raw = device.raw();
                raw.cmd_pipeline_barrier2(rec.raw(), &vk::DependencyInfo::default().memory_barriers(&before));
                raw.cmd_copy_buffer(rec.raw(), import.buffer(), dst.raw(), &[region]);
                raw.cmd_pipeline_barrier2(rec.raw(), &vk::DependencyInfo::default().memory_barriers(&after));
            }
        })?;
        Ok(submission)
    }

    /// Queues a copy of `data` (tightly packed texel blocks of the region, rows then slices) into an
    /// image region. The image stays alive until the copy is submitted (after that, dropping it
    /// retires it after the upload). The submission that carries the copy checks that the image
    /// is in `region.layout` then (in submission order) and fails with
    /// [`VulkanError::ImageLayout`] otherwise, dropping the queued copies (a retry would fail
    /// the same way).
    ///
    /// Refused with nothing staged: an image of another device ([`UploadError::WrongDevice`]) or
    /// without copy-destination usage ([`UploadError::NotCopyDestination`]), a region outside
    /// the image ([`UploadError::RegionOutsideImage`], [`UploadError::RegionMisaligned`]), a
    /// multisampled image ([`UploadError::Multisampled`]), an aspect that is not exactly one of
    /// the format's ([`UploadError::Aspect`]), `data`
    /// that is not the region's byte count in the image's format ([`UploadError::WrongSize`]),
    /// and data larger than half the ring ([`UploadError::TooLarge`]: split regions, e.g. per
    /// tile), a layout that is not a copy destination's (or not `GENERAL` for a sparse image:
    /// [`UploadError::Layout`]), and a layout other than a queued copy's into the same
    /// subresource ([`VulkanError::ImageLayout`]: flush in between). An empty region copies
    /// nothing.
    pub fn write_image(&self, region: &ImageRegion<'_>, data: &[u8]) -> Result<(), UploadError> {
        self.check_image_write(region, data.len() as u64)?;
        let target = region.image.target();
        let expected = region.bytes();
        if expected == 0 {
            return Ok(());
        }
        let mut state = self.lock()?;
        self.reclaim(&mut state);
        if let Some(layouts) = target.layouts {
            let key = (Arc::as_ptr(layouts) as usize, region.mip, region.layer);
            if let Some(&queued) = state.copy_layouts.get(&key) {
                if queued != region.layout {
                    return Err(VulkanError::ImageLayout {
                        image: target.name.to_owned(),
                        mip: region.mip,
                        layer: region.layer,
                        expected: region.layout,
                        actual: queued,
                    }
                    .into());
                }
            }
        }
        let allocation = loop {
            match state.ring.allocate(expected, STAGING_ALIGNMENT) {
                Ok(a) => break a,
                Err(RingError::Full { .. }) => self.make_room(&mut state)?,
                Err(e) => unreachable!("image chunks are non-empty and at most half the ring: {e}"),
            }
        };
        write_staging(&self.staging, allocation.offset, data, self.copy_threads, self.streaming_stores);
        if let Some(layouts) = target.layouts {
            state
                .copy_layouts
                .insert((Arc::as_ptr(layouts) as usize, region.mip, region.layer), region.layout);
        }
        let copy = region.buffer_image_copy(allocation.offset);
        let mut lo = region.offset.map(u64::from);
        let mut hi = [0, 1, 2].map(|a| u64::from(region.offset[a]) + u64::from(region.extent[a]));
        if target.format.is_compressed() {
            // Synchronization validation before Vulkan-ValidationLayers 1.3.280 (issue #3894,
            // fixed by PR #7713; Debian 12 ships 1.3.239) misplaces the x offset of a copy into a
            // block-compressed image, so copies side by side in the same rows of blocks look
            // overlapping (a false WRITE_AFTER_WRITE). Treat them as overlapping: any two copies
            // into the same rows of one subresource get a copy→copy barrier between them.
            (lo[0], hi[0]) = (0, u64::MAX);
        }
        let subresource = ((vk::Handle::as_raw(target.raw), region.mip, region.layer), lo, hi);
        // An image whose bytes other resources may share (a transient frame's) is noted by its
        // memory too, whole (its texels' place there is the driver's).
        match region.image.aliased_memory() {
            Some((memory, start, size)) => {
                state.note_write(&[subresource, memory_written(memory, start, start.saturating_add(size))])
            }
            None => state.note_write(&[subresource]),
        }
        state.copies.push(PendingCopy::Image {
            dst: target.raw,
            layout: region.layout,
            region: copy,
            layouts: target.layouts.cloned(),
        });
        state.keep.push(Arc::clone(target.life));
        Ok(())
    }

    /// Submits the queued copies (if any), or waits for the oldest frame in flight, so that the ring
    /// has room again.
    fn make_room(&self, state: &mut State) -> Result<(), UploadError> {
        if !state.copies.is_empty() {
            self.submit(state)?;
        }
        if state.in_flight.is_empty() {
            // Only after a lost device dropped the queued copies (they can never run): the ring
            // stays full and nothing more can be staged.
            return Err(VulkanError::DeviceLost { call: "vkQueueSubmit2" }.into());
        }
        // The oldest frame stays in flight until its wait succeeds (a failed wait, on a lost
        // device, leaves the ring as it was).
        match &state.in_flight[0].1 {
            Flight::Submitted(submission) => self.context.wait_for(submission)?,
            Flight::Recorded(done) => {
                if !done.load(Ordering::Acquire) {
                    // Recorded into a command buffer residency submitted: wait for those.
                    self.device.wait_submitted()?;
                }
                if !done.load(Ordering::Acquire) {
                    return Err(UploadError::RingBusy);
                }
            }
        }
        let (frame, _) = state.in_flight.remove(0);
        state.ring.retire(frame).expect("frames retire in order");
        Ok(())
    }

    /// Gives back the ring space of the oldest frames that are done, without waiting (a fence
    /// status for the uploader's own submissions, the flag for recorded copies).
    fn reclaim(&self, state: &mut State) {
        loop {
            let done = match state.in_flight.first() {
                Some((_, Flight::Recorded(done))) => done.load(Ordering::Acquire),
                Some((_, Flight::Submitted(submission))) => {
                    self.context.is_complete(submission).unwrap_or(false)
                }
                None => false,
            };
            if !done {
                break;
            }
            let (frame, _) = state.in_flight.remove(0);
            state.ring.retire(frame).expect("frames retire in order");
        }
    }

    /// Records every queued copy into `rec` (a command buffer the renderer submits on the
    /// universal queue, such as its frame's), instead of submitting them itself, between two
    /// barriers: before, earlier shader work at `readers` and earlier copies (which may read or
    /// write the destinations) before the copies; after, the copies before the shader reads of
    /// `readers` that follow in the queue. `readers` are shader stages (vertex, fragment,
    /// compute, …). The ring space and the destinations are held until the recording's
    /// submission has run (a recording of [`Recording::from_raw`] declares that point with
    /// [`Recording::used_until`]). Returns how many copies were recorded; with none queued,
    /// records nothing.
    ///
    /// Refused with nothing recorded (the copies stay queued): a recording of another device, and
    /// a copy into an image that the recording's earlier commands left in another layout
    /// ([`VulkanError::ImageLayout`]).
    ///
    /// Once recorded, the copies belong to that recording: if its submission fails (or it is
    /// never submitted), they never run — safely (their staging space comes back once residency's
    /// earlier work is done), but their destinations keep what they held before. Stage them again
    /// after such a failure if the destinations must have them.
    pub fn record(
        &self,
        rec: &mut Recording<'_>,
        readers: vk::PipelineStageFlags2,
    ) -> Result<usize, UploadError> {
        self.record_batch(rec, readers, false)
    }

    /// [`Uploader::record`], keeping what [`Uploader::requeue_recorded`] needs to queue the
    /// copies again until [`Uploader::forget_recorded`] (or the next recording or submission).
    pub(crate) fn record_requeueable(
        &self,
        rec: &mut Recording<'_>,
        readers: vk::PipelineStageFlags2,
    ) -> Result<usize, UploadError> {
        self.record_batch(rec, readers, true)
    }

    /// Drops what [`Uploader::record_requeueable`] kept (its recording was submitted).
    pub(crate) fn forget_recorded(&self) {
        self.state.locked().last_recorded = None;
    }

    fn record_batch(
        &self,
        rec: &mut Recording<'_>,
        readers: vk::PipelineStageFlags2,
        requeueable: bool,
    ) -> Result<usize, UploadError> {
        use vk::{AccessFlags2 as A, PipelineStageFlags2 as S};
        rec.accepts(self.staging.name(), &self.device)?;
        let mut state = self.lock()?;
        if state.copies.is_empty() {
            state.last_recorded = None;
            return Ok(0);
        }
        for copy in &state.copies {
            if let PendingCopy::Image { layout, region, layouts: Some(layouts), .. } = copy {
                let (mip, layer) =
                    (region.image_subresource.mip_level, region.image_subresource.base_array_layer);
                rec.check_layout(layouts, mip..mip + 1, layer..layer + 1, *layout)?;
            }
        }
        if readers.is_empty() || !crate::sync::recording::SHADER_STAGES.contains(readers) {
            return Err(UploadError::Readers { stages: readers });
        }
        rec.memory_barrier(MemoryDependency {
            src_stages: readers | S::COPY,
            src_access: A::SHADER_WRITE | A::TRANSFER_WRITE,
            dst_stages: S::COPY,
            dst_access: A::TRANSFER_WRITE,
        })
        .map_err(|e| VulkanError::Unsupported {
            device: self.device.name().to_owned(),
            reason: e.to_string(),
        })?;
        let copies = std::mem::take(&mut state.copies);
        state.copy_layouts.clear();
        state.written.clear();
        for copy in &copies {
            if let PendingCopy::Image { layout, region, layouts: Some(layouts), .. } = copy {
                let (mip, layer) =
                    (region.image_subresource.mip_level, region.image_subresource.base_array_layer);
                rec.use_layout(layouts, mip..mip + 1, layer..layer + 1, *layout);
            }
        }
        record_copies(&self.device, rec.raw(), self.staging.raw(), &copies);
        rec.recorded();
        rec.memory_barrier(MemoryDependency {
            src_stages: S::COPY,
            src_access: A::TRANSFER_WRITE,
            dst_stages: readers,
            dst_access: A::SHADER_READ,
        })
        .map_err(|e| VulkanError::Unsupported {
            device: self.device.name().to_owned(),
            reason: e.to_string(),
        })?;
        let keep = std::mem::take(&mut state.keep);
        for life in &keep {
            rec.keep(life);
        }
        rec.keep(self.staging.life());
        let done = Arc::new(AtomicBool::new(false));
        let batch = Life::new(Arc::clone(&self.device), Garbage::Signal(Arc::clone(&done)), None);
        rec.keep(&batch);
        // Ring frames of copies queued again (their recording failed) are given back once this
        // recording has run too.
        let mut frames: Vec<FrameId> = Vec::new();
        for (frame, flag) in std::mem::take(&mut state.carried) {
            rec.keep(&Life::new(Arc::clone(&self.device), Garbage::Signal(flag), None));
            frames.push(frame);
        }
        let frame = state.ring.finish_frame();
        state.in_flight.push((frame, Flight::Recorded(done)));
        frames.push(frame);
        let count = copies.len();
        state.last_recorded = requeueable.then_some(RecordedBatch { copies, keep, frames });
        Ok(count)
    }

    /// Queues again the copies of the latest [`Uploader::record_requeueable`], for a recording whose
    /// submission failed (or that is dropped without being submitted): they go before any copy
    /// queued since (a barrier between), with their destinations kept alive, and their staging
    /// data stays in the ring until the copies that now carry it have run (a later recording or
    /// submission). Call it before anything else stages into this uploader and before the
    /// failed recording is retired. Returns how many copies were queued again (0: none were
    /// recorded since the last recording, submission or requeue). `None` when the data is gone:
    /// the ring space was given back already (the failed recording was retired and reclaimed
    /// first), so the copies are lost as before.
    pub(crate) fn requeue_recorded(&self) -> Option<usize> {
        let mut state = self.state.locked();
        let Some(batch) = state.last_recorded.take() else { return Some(0) };
        let in_ring = batch.frames.iter().all(|f| state.in_flight.iter().any(|(g, _)| g == f));
        if !in_ring {
            return None;
        }
        Self::carry(&mut state, &batch.frames);
        for copy in &batch.copies {
            if let PendingCopy::Image { layout, region, layouts: Some(layouts), .. } = copy {
                let key = (
                    Arc::as_ptr(layouts) as usize,
                    region.image_subresource.mip_level,
                    region.image_subresource.base_array_layer,
                );
                state.copy_layouts.entry(key).or_insert(*layout);
            }
        }
        let count = batch.copies.iter().filter(|c| !matches!(c, PendingCopy::Barrier)).count();
        // Every copy queued after them (now or later) comes after a barrier: `written` knows only
        // the copies after it.
        let mut copies = batch.copies;
        copies.push(PendingCopy::Barrier);
        copies.append(&mut state.copies);
        state.copies = copies;
        let mut keep = batch.keep;
        keep.append(&mut state.keep);
        state.keep = keep;
        Some(count)
    }

    /// Makes ring frames `frames` wait for a fresh flag each (noted in `carried`, raised by the
    /// copies that carry their data next): a flag kept by a recording that never ran rises when
    /// it is retired, which must not give the data back.
    fn carry(state: &mut State, frames: &[FrameId]) {
        for &frame in frames {
            let flag = Arc::new(AtomicBool::new(false));
            if let Some((_, flight)) = state.in_flight.iter_mut().find(|(f, _)| *f == frame) {
                *flight = Flight::Recorded(Arc::clone(&flag));
            }
            state.carried.retain(|(f, _)| *f != frame);
            state.carried.push((frame, flag));
        }
    }

    fn submit(&self, state: &mut State) -> Result<(), UploadError> {
        let batch = Batch::take(state);
        self.submit_batch(state, batch, None)
    }

    /// Submits `batch` (taken from `state` by [`Batch::take`]), its ring space in `frame` where
    /// that frame was finished when the batch was taken (`None`: the open frame, finished here
    /// once submitted). On failure the copies are queued again ahead of any queued since.
    fn submit_batch(
        &self,
        state: &mut State,
        batch: Batch,
        frame: Option<FrameId>,
    ) -> Result<(), UploadError> {
        let device = &*self.device;
        let Batch { copies, copy_layouts, carried } = batch;
        let staging = self.staging.raw();
        let (before, after) = copy_barriers();
        // After the sparse binds submitted so far: a copy into a tile bound asynchronously
        // (`TileHeaps::bind_after`) waits for its memory.
        let binds = device.submitted_binds();
        let destinations = &state.keep;
        let submitted = self.context.submit(binds.as_slice(), |rec| {
            // Every destination through the recording: a buffer a move under pressure
            // (`Defragmenter::relieve`) is still filling on the moves queue makes the submission
            // wait for that copy, which no barrier of this queue orders (else the move's copy
            // could land over these copies).
            for life in destinations {
                rec.keep(life);
            }
            // Ring frames of copies queued again (see `requeue_recorded`) are given back once this
            // submission has run.
            for (_, flag) in &carried {
                rec.keep(&Life::new(Arc::clone(&self.device), Garbage::Signal(Arc::clone(flag)), None));
            }
            for copy in &copies {
                if let PendingCopy::Image { layout, region, layouts: Some(layouts), .. } = copy {
                    let (mip, layer) =
                        (region.image_subresource.mip_level, region.image_subresource.base_array_layer);
                    rec.use_layout(layouts, mip..mip + 1, layer..layer + 1, *layout);
                }
            }
            let cmd = rec.raw();
            // SAFETY: `cmd` is recording; the staging buffer and every destination are live
            // buffers and images of this device (checked when queued; `state.keep` holds them
            // until this submission is made, and after it their destruction waits for it), and
            // every image region lies inside its image (checked when queued). Every image is in
            // its region's layout, a copy-destination layout (checked when queued), when the
            // copies run: noted above as requirements, which the submission checks against the
            // images' layouts in submission order before submitting (a sparse image is GENERAL
            // for life, and its regions are GENERAL: checked when queued).
            unsafe {
                device
                    .raw()
                    .cmd_pipeline_barrier2(cmd, &vk::DependencyInfo::default().memory_barriers(&before))
            };
            record_copies(device, cmd, staging, &copies);
            // SAFETY: as above.
            unsafe {
                device
                    .raw()
                    .cmd_pipeline_barrier2(cmd, &vk::DependencyInfo::default().memory_barriers(&after))
            };
        });
        let submission = match submitted {
            Ok(submission) => submission,
            Err(e) => {
                // Not submitted: the copies stay queued (their data is in the ring) for a retry,
                // unless the device is lost and they can never run, or an image was not in its
                // region's layout (they are dropped: a retry would fail the same way).
                if !device.is_lost() && !matches!(e, VulkanError::ImageLayout { .. }) {
                    // (With `frame` given, its ring space is retired with the frame of the
                    // submission that carries these copies later: frames retire in order.)
                    let since = std::mem::replace(&mut state.copies, copies);
                    state.copies.push(PendingCopy::Barrier);
                    state.copies.extend(since);
                    let since = std::mem::replace(&mut state.copy_layouts, copy_layouts);
                    state.copy_layouts.extend(since);
                    // The flags kept by the recording that failed rise when it is retired: the
                    // carried frames wait for fresh ones.
                    let frames: Vec<FrameId> = carried.iter().map(|(f, _)| *f).collect();
                    Self::carry(state, &frames);
                } else {
                    // Dropped: the carried data is no longer needed, and the batch's own ring
                    // space (the open frame, or the frame given) comes back in order like a
                    // completed submission's: nothing will ever read it (not submitted). Left in
                    // the open frame, enough drops filled the ring with nothing in flight, and
                    // the next write failed as if the device were lost.
                    for (_, flag) in carried {
                        flag.store(true, Ordering::Release);
                    }
                    let frame = frame.unwrap_or_else(|| state.ring.finish_frame());
                    state.in_flight.push((frame, Flight::Recorded(Arc::new(AtomicBool::new(true)))));
                }
                return Err(e.into());
            }
        };
        let frame = frame.unwrap_or_else(|| state.ring.finish_frame());
        state.in_flight.push((frame, Flight::Submitted(submission)));
        // Submitted: a destination dropped from now on retires after this upload.
        state.keep.clear();
        state.last_recorded = None;
        Ok(())
    }

    /// Submits every queued copy. Work submitted to the universal queue afterwards sees the data.
    pub fn flush(&self) -> Result<(), UploadError> {
        let mut state = self.lock()?;
        if !state.copies.is_empty() {
            self.submit(&mut state)?;
        }
        Ok(())
    }

    /// Flushes and waits until every upload has reached its destination.
    pub fn wait_idle(&self) -> Result<(), UploadError> {
        self.flush()?;
        let mut state = self.lock()?;
        self.wait_flights(&mut state)
    }

    /// Waits for every frame in flight (those recorded into a renderer's command buffer that
    /// has not run yet excepted) and gives their ring space back.
    fn wait_flights(&self, state: &mut State) -> Result<(), UploadError> {
        while let Some((_, flight)) = state.in_flight.first() {
            match flight {
                Flight::Submitted(submission) => self.context.wait_for(submission)?,
                Flight::Recorded(done) => {
                    if !done.load(Ordering::Acquire) {
                        self.device.wait_submitted()?;
                    }
                    if !done.load(Ordering::Acquire) {
                        // Recorded into a command buffer the renderer has not submitted through
                        // residency (or whose declared use has not passed): it runs those copies
                        // itself; the ring space stays in use until then.
                        break;
                    }
                }
            }
            let (frame, _) = state.in_flight.remove(0);
            state.ring.retire(frame).expect("frames retire in order");
        }
        Ok(())
    }

    /// Flushes and waits for all uploads, then releases the uploader, returning the first error.
    /// Dropping it does the same and logs the error.
    pub fn destroy(self) -> Result<(), UploadError> {
        self.wait_idle()
    }
}

impl Drop for Uploader {
    fn drop(&mut self) {
        // Queued copies are submitted (their data is in the ring, their destinations alive), then
        // everything in flight is waited for; the command context settles its fences on drop too.
        if !self.device.is_lost() {
            if let Err(e) = self.wait_idle() {
                tracing::warn!(staging = %self.staging.name(), error = %e, "uploader dropped: waiting for its uploads failed");
            }
        }
        let state = self.state.value_mut();
        state.copies.clear();
        state.keep.clear();
        state.last_recorded = None;
        state.carried.clear();
    }
}

/// The barriers around an uploader's copies: earlier work on the destination before the copy
/// writes, and the written data visible to later work.
fn copy_barriers() -> ([vk::MemoryBarrier2<'static>; 1], [vk::MemoryBarrier2<'static>; 1]) {
    let before = [vk::MemoryBarrier2::default()
        .src_stage_mask(vk::PipelineStageFlags2::ALL_COMMANDS)
        .src_access_mask(vk::AccessFlags2::MEMORY_READ | vk::AccessFlags2::MEMORY_WRITE)
        .dst_stage_mask(vk::PipelineStageFlags2::COPY)
        .dst_access_mask(vk::AccessFlags2::TRANSFER_WRITE)];
    let after = [vk::MemoryBarrier2::default()
        .src_stage_mask(vk::PipelineStageFlags2::COPY)
        .src_access_mask(vk::AccessFlags2::TRANSFER_WRITE)
        .dst_stage_mask(vk::PipelineStageFlags2::ALL_COMMANDS)
        .dst_access_mask(vk::AccessFlags2::MEMORY_READ | vk::AccessFlags2::MEMORY_WRITE)];
    (before, after)
}

use crate::resources::parallel_copy::{copy_in_parallel, stream_copy};

/// The default [`Uploader::with_chunk_bytes`]: 16 MiB (a quarter of the ring where that is
/// less). Each chunk costs a submission and a hand-off between the staging threads and the
/// submitting thread that the DMA does not hide: on the H200 (session 15's grid, 256 MiB and
/// 1 GiB, `docs/benchmarks.md`) 8–16 MiB chunks ran 38–43 GB/s end to end where 4 MiB ran
/// 29–40 and 1 MiB 17–27; the last chunk's copy, left after the host's last store, is 330 µs at
/// 51 GB/s, a few percent of a write that size.
pub const DEFAULT_CHUNK_BYTES: u64 = 16 << 20;

/// The default [`Uploader::with_stream_window`]: 32 MiB (the whole ring where that is less, two
/// chunks where that is more). A long write that cycles through a small part of the ring runs
/// faster than one that sweeps a large ring: on the H200 (session 15, 16 MiB chunks, 16 threads)
/// a 1 GiB write through a 128 MiB ring ran 41.3 GB/s sweeping it and 46.4 GB/s within its first
/// 32 MiB (43.7 within 64 MiB), 256 MiB through a 64 MiB ring 37.2 and 39.5; the DMA alone runs
/// 51.3. The staging pages the host writes and the GPU reads stay fewer (their translations
/// cached on both sides, presumably: the machine has no profiler to say).
pub const DEFAULT_STREAM_WINDOW: u64 = 32 << 20;

/// The smallest [`Uploader::with_chunk_bytes`].
const MIN_CHUNK: u64 = 64 << 10;
pub use crate::resources::parallel_copy::PARALLEL_COPY_PIECE;

/// The default [`Uploader::with_import_threshold`]: `u64::MAX`, never import. On the H200
/// (session 13) importing a slice's pages ran 9 GB/s at 256 MiB and 1 GiB, where staging ran 35–39:
/// pinning costs more than the copy it saves, so imports are opt-in.
pub const DEFAULT_IMPORT_THRESHOLD: u64 = u64::MAX;

/// The default [`Uploader::with_import_chunk`]: 16 MiB per import.
pub const DEFAULT_IMPORT_CHUNK: u64 = 16 << 20;

/// The way [`Uploader::upload_buffer`] moved a slice.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UploadPath {
    /// Through the staging ring: a slice under the import threshold, a device without
    /// VK_EXT_external_memory_host, or a pointer the driver would not import.
    Staged,
    /// Copied from the slice's own pages, imported as host memory; `staged` bytes (the unaligned
    /// ends, and any piece the driver refused to import) went through the ring.
    Imported {
        /// Bytes that went through the staging ring.
        staged: u64,
    },
}

/// The imported pieces of one [`Uploader::upload_buffer`] whose copies were submitted, with
/// their submissions. Each is released only once its copy is known complete: released by
/// `upload_buffer` after its wait, or by `drop` on an unwind.
struct ImportsInFlight<'u, 'a> {
    context: &'u CommandContext,
    imports: Vec<(ImportedSlice<'a>, Submission)>,
}

impl ImportsInFlight<'_, '_> {
    /// Waits for `submission` (past the fault hook; bounded only on a device the driver reported
    /// lost), then destroys `import`; leaks it (reported at teardown) if the wait failed even so.
    fn release(&self, import: ImportedSlice<'_>, submission: &Submission) {
        if self.context.settle(submission) {
            // SAFETY: `submission` is the only GPU work that uses the import (its one copy),
            // and it has completed (`settle` returned true).
            unsafe { import.destroy() };
        } else {
            // Not known complete (a device the driver reported lost, past the bound): leaked
            // rather than freed under a copy that may still read it.
            drop(import);
        }
    }
}

impl Drop for ImportsInFlight<'_, '_> {
    fn drop(&mut self) {
        while let Some((import, submission)) = self.imports.pop() {
            self.release(import, &submission);
        }
    }
}

/// Splits `data` into an unaligned head, a middle whose start and length are multiples of
/// `alignment` (to import), and an unaligned tail; `None` when the middle is empty.
fn import_plan(data: &[u8], alignment: u64) -> Option<(&[u8], &[u8], &[u8])> {
    let alignment = usize::try_from(alignment).ok()?;
    let address = data.as_ptr() as usize;
    let head = address.next_multiple_of(alignment) - address;
    if head >= data.len() {
        return None;
    }
    let middle = (data.len() - head) / alignment * alignment;
    if middle == 0 {
        return None;
    }
    let (head, rest) = data.split_at(head);
    let (middle, tail) = rest.split_at(middle);
    Some((head, middle, tail))
}

fn default_copy_threads() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get()).min(16)
}

/// Copies `data` into the staging ring at a ring allocation, split among up to `threads` threads
/// (with non-temporal stores when `streaming`).
fn write_staging(staging: &Buffer, offset: u64, data: &[u8], threads: usize, streaming: bool) {
    let dst = staging
        .mapped_range(offset, data.len() as u64)
        .expect("ring allocations lie inside the mapped staging buffer");
    // SAFETY: the ring hands out each range to one writer at a time (under the state lock) and the
    // GPU reads it only after this copy (the submission comes later), so nothing else reads or
    // writes these bytes while the slice lives; the range lies inside the staging buffer's
    // mapping (checked), which lives as long as the buffer, and cannot overlap `data` (ordinary
    // host memory).
    let dst = unsafe { std::slice::from_raw_parts_mut(dst.as_ptr(), data.len()) };
    copy_in_parallel(dst, data, threads, streaming);
    if !staging.is_coherent() && !data.is_empty() {
        staging.flush_range(offset, data.len() as u64);
    }
}

// A plain image is an upload target.
impl Sealed for Image {
    fn target(&self) -> TargetInfo<'_> {
        TargetInfo {
            raw: self.raw(),
            name: &self.desc().name,
            format: self.desc().format,
            extent: self.desc().extent,
            mip_levels: self.desc().mip_levels,
            array_layers: self.desc().array_layers,
            samples: self.desc().samples,
            copy_dst: self.desc().usage.contains(residency_core::usage::ImageUsage::COPY_DST),
            life: self.life(),
            layouts: Some(self.layouts()),
        }
    }

    fn aliased_memory(&self) -> Option<(vk::DeviceMemory, u64, u64)> {
        let transient = matches!(
            self.life().garbage(),
            Some(Garbage::Image { memory: crate::device::blocks::ResourceMemory::Transient, .. })
        );
        transient.then(|| (self.memory().0, self.memory().1, self.size()))
    }
}

impl ImageTarget for Image {}

// Whole-image conveniences that submit on the universal queue (sync-level: they record and
// submit), beside the uploads.
use crate::error::{ErrorClass, Exhausted, ResidencyError};
use crate::format_map::aspect;
use crate::resources::image::Image;

impl Device {
    /// Moves every subresource of `images` from `UNDEFINED` (contents discarded) to `GENERAL`,
    /// visible to all later commands, and waits: for storage and sampled images used in `GENERAL`
    /// from then on.
    pub fn discard_to_general(&self, images: &[&Image]) -> Result<(), VulkanError> {
        if let Some(foreign) = images.iter().find(|i| !i.device().is(self)) {
            return Err(VulkanError::WrongDevice {
                name: foreign.name().to_owned(),
                owner: foreign.device_index(),
                device: self.index(),
            });
        }
        let barriers: Vec<_> = images
            .iter()
            .map(|i| {
                vk::ImageMemoryBarrier2::default()
                    .dst_stage_mask(vk::PipelineStageFlags2::ALL_COMMANDS)
                    .dst_access_mask(vk::AccessFlags2::MEMORY_READ | vk::AccessFlags2::MEMORY_WRITE)
                    .old_layout(vk::ImageLayout::UNDEFINED)
                    .new_layout(vk::ImageLayout::GENERAL)
                    .image(i.raw())
                    .subresource_range(i.full_range())
            })
            .collect();
        self.submit_once("images to GENERAL", |rec| {
            for image in images {
                let range = image.full_range();
                rec.transition(
                    image.layouts(),
                    0..range.level_count,
                    0..range.layer_count,
                    vk::ImageLayout::UNDEFINED,
                    vk::ImageLayout::GENERAL,
                );
            }
            // SAFETY: `rec` is recording on this device outside a render pass; the images are live
            // (borrowed until the wait returns) and belong to this device (checked above); the
            // barriers start from UNDEFINED, which any layout satisfies (the submission records
            // GENERAL as the images' layout, noted above).
            unsafe {
                self.raw().cmd_pipeline_barrier2(
                    rec.raw(),
                    &vk::DependencyInfo::default().image_memory_barriers(&barriers),
                )
            };
        })
    }

    /// Reads back mip 0, layer 0 of `image` (which is in `layout`), tightly packed. An image not
    /// in `layout` when the copy would run is [`VulkanError::ImageLayout`], nothing submitted.
    pub fn read_image(
        &self,
        image: &Image,
        layout: vk::ImageLayout,
    ) -> Result<Vec<u8>, crate::sync::commands::ReadBackError> {
        let d = image.desc();
        if !image.device().is(self) {
            return Err(VulkanError::WrongDevice {
                name: d.name.clone(),
                owner: image.device_index(),
                device: self.index(),
            }
            .into());
        }
        // The checks of `Recording::copy_image_to_buffer`, without a caller's buffer.
        let (_, bytes) =
            crate::sync::recording::check_image_to_buffer(image, layout, None).map_err(|e| match e {
                crate::sync::recording::CopyError::Invalid { reason, .. } => {
                    crate::sync::commands::ReadBackError::Invalid { name: d.name.clone(), reason }
                }
                other => crate::sync::commands::ReadBackError::Vulkan(VulkanError::Unsupported {
                    device: self.name().to_owned(),
                    reason: other.to_string(),
                }),
            })?;
        let copy = crate::sync::upload::ImageRegion {
            image,
            layout,
            aspect: aspect(d.format),
            mip: 0,
            layer: 0,
            offset: [0; 3],
            extent: d.extent,
        }
        .buffer_image_copy(0);
        self.copy_to_host(&d.name, bytes, |rec, staging| {
            rec.use_layout(image.layouts(), 0..1, 0..1, layout);
            // SAFETY: `rec` is recording on this device; the image is a live image of it (checked
            // above, borrowed until the wait returns) with COPY_SRC usage, one sample and one
            // aspect, `layout` is a copy-source layout (checked above) that the submission checks
            // the image is in (the requirement noted above), and the staging buffer holds exactly
            // its mip 0.
            unsafe { self.raw().cmd_copy_image_to_buffer(rec.raw(), image.raw(), layout, staging, &[copy]) };
        })
    }
}
