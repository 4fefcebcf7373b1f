//! Copy items between multi-device images, and between multi-device buffers and images
//! ([`ImageCopyItem`], submitted as [`WorkItem::ImageCopy`](crate::multi::work::WorkItem::ImageCopy)).
//!
//! An item is described once, against [`MultiImage`]s and [`BufferView`]s, and resolved on the
//! device of the submission like every work item: each region is checked against *that device's*
//! instances (their formats, extents, mips, layers, usages and memory) before anything is
//! recorded, and a refusal is an [`ImageCopyError`] naming the device, the region and the rule
//! ([`CopyRefusal`]).
//!
//! Layouts are the library's: every subresource a copy touches is moved to `GENERAL` from the
//! layout its image's record says it is in (what an earlier command of the same submission left,
//! else the layout in submission order, checked again when the submission is made), with the
//! barrier that makes earlier work on it finish first, and it stays in `GENERAL` (where
//! residency's images live and where sampling work items read them). The copy itself is ordered
//! against the other items of its submission by the submitter's state tracker, as a buffer copy
//! is: it declares the mips and layers it touches per image (transfer reads and writes in
//! `GENERAL`) and its buffer view.

use crate::device::Device;
use crate::error::{ErrorClass, ResidencyError};
use crate::format_map::aspect;
use crate::multi::barriers::{image_use, Access};
use crate::multi::work::{BufferView, DeviceBufferView, WorkError};
use crate::multi::{MultiDevice, MultiImage};
use crate::resources::buffer::Buffer;
use crate::resources::image::Image;
use crate::sync::recording::{buffer_aliases, Recording};
use ash::vk;
use residency_core::device_mask::DeviceIndex;
use residency_core::format::{Format, FormatKind};
use residency_core::sync::Use;
use residency_core::tiles::TexelRegion;
use residency_core::usage::{BufferUsage, ImageUsage};

/// A box of texels of one mip level of an image, over a range of its array layers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ImageArea {
    /// The mip level.
    pub mip: u32,
    /// The first array layer.
    pub base_layer: u32,
    /// How many array layers (at least 1; 1 for a 3D image).
    pub layer_count: u32,
    /// The first texel.
    pub offset: [u32; 3],
    /// Its size in texels (none zero).
    pub extent: [u32; 3],
}

impl ImageArea {
    /// `extent` texels at `offset` of `mip`, layer 0.
    pub fn new(mip: u32, offset: [u32; 3], extent: [u32; 3]) -> Self {
        ImageArea { mip, base_layer: 0, layer_count: 1, offset, extent }
    }

    /// Sets the array layers: `count` from `base`.
    pub fn with_layers(mut self, base: u32, count: u32) -> Self {
        self.base_layer = base;
        self.layer_count = count;
        self
    }

    fn texels(&self) -> TexelRegion {
        TexelRegion { offset: self.offset, extent: self.extent }
    }

    /// Whether the two areas share a texel (same mip, a common layer and overlapping boxes).
    fn overlaps(&self, other: &ImageArea) -> bool {
        let layers =
            |a: &ImageArea| (u64::from(a.base_layer), u64::from(a.base_layer) + u64::from(a.layer_count));
        let ((a0, a1), (b0, b1)) = (layers(self), layers(other));
        self.mip == other.mip
            && a0 < b1
            && b0 < a1
            && (0..3).all(|i| {
                let (s, e) =
                    (u64::from(self.offset[i]), u64::from(self.offset[i]) + u64::from(self.extent[i]));
                let (t, f) =
                    (u64::from(other.offset[i]), u64::from(other.offset[i]) + u64::from(other.extent[i]));
                s < f && t < e
            })
    }

    fn subresource(&self, aspect_mask: vk::ImageAspectFlags) -> vk::ImageSubresourceLayers {
        vk::ImageSubresourceLayers {
            aspect_mask,
            mip_level: self.mip,
            base_array_layer: self.base_layer,
            layer_count: self.layer_count,
        }
    }
}

/// A region of an image-to-image copy: `src` copied to the same extent and layer count at
/// `dst_offset` of mip `dst_mip`, layers from `dst_base_layer`, of the destination.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ImageCopyRegion {
    /// What is copied.
    pub src: ImageArea,
    /// The destination's mip level.
    pub dst_mip: u32,
    /// The destination's first array layer.
    pub dst_base_layer: u32,
    /// The destination's first texel.
    pub dst_offset: [u32; 3],
}

impl ImageCopyRegion {
    /// `src` to the same place of the destination.
    pub fn same_place(src: ImageArea) -> Self {
        ImageCopyRegion { src, dst_mip: src.mip, dst_base_layer: src.base_layer, dst_offset: src.offset }
    }

    /// The destination area.
    pub fn dst(&self) -> ImageArea {
        ImageArea {
            mip: self.dst_mip,
            base_layer: self.dst_base_layer,
            layer_count: self.src.layer_count,
            offset: self.dst_offset,
            extent: self.src.extent,
        }
    }
}

/// A region of a copy between a buffer and an image (Vulkan's `VkBufferImageCopy`): the texels of
/// `image` laid out in the buffer from `buffer_offset`, in rows of `row_length` texels and slices
/// (depth slices, then layers) of `image_height` rows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BufferImageRegion {
    /// Bytes into the buffer view where the first texel block lies.
    pub buffer_offset: u64,
    /// Texels from the start of one row to the next (0: the area's width, tightly packed); at
    /// least the width and a multiple of a compressed format's block width.
    pub row_length: u32,
    /// Rows from the start of one slice to the next (0: the area's height); at least the height
    /// and a multiple of a compressed format's block height.
    pub image_height: u32,
    /// The image's texels.
    pub image: ImageArea,
}

impl BufferImageRegion {
    /// `image`'s texels tightly packed from `buffer_offset`.
    pub fn packed(buffer_offset: u64, image: ImageArea) -> Self {
        BufferImageRegion { buffer_offset, row_length: 0, image_height: 0, image }
    }
}

#[derive(Clone, Debug)]
enum Kind<'a> {
    Images { src: &'a MultiImage, dst: &'a MultiImage, regions: Vec<ImageCopyRegion> },
    BufferToImage { src: BufferView<'a>, dst: &'a MultiImage, regions: Vec<BufferImageRegion> },
    ImageToBuffer { src: &'a MultiImage, dst: BufferView<'a>, regions: Vec<BufferImageRegion> },
}

/// A copy between multi-device images, from a buffer view into an image, or from an image into a
/// buffer view (the seed's `CopyImageDescriptor`, `CopyBufferToImageDescriptor` and
/// `CopyImageToBufferDescriptor`), the same regions on every device, resolved and checked per
/// device at submission ([`ImageCopyError`]: nothing is recorded or submitted on a refusal).
///
/// Layouts are handled by the library: every subresource the copy touches is moved to `GENERAL`
/// from the layout its image's record says it is in (what an earlier command of the submission
/// left, else its layout in submission order, checked again when the submission is made), with a
/// barrier that makes earlier work on it finish first, and it stays in `GENERAL`. The copy is
/// ordered against the other items of its submission as a [`CopyItem`](crate::multi::work::CopyItem)
/// is: by the barriers the submitter's state tracker requires (it declares the subresources it
/// touches and its buffer view).
#[derive(Clone, Debug)]
pub struct ImageCopyItem<'a> {
    kind: Kind<'a>,
}

impl<'a> ImageCopyItem<'a> {
    /// Copies `regions` of `src` into `dst` (`vkCmdCopyImage`). The images may be one image when
    /// no destination region shares a texel with a source region. Formats must be equal, or both
    /// uncompressed colour formats of one texel size, or both block-compressed with one block
    /// size.
    pub fn images(src: &'a MultiImage, dst: &'a MultiImage, regions: &[ImageCopyRegion]) -> Self {
        ImageCopyItem { kind: Kind::Images { src, dst, regions: regions.to_vec() } }
    }

    /// Copies texels from the buffer view `src` into `regions` of `dst` (`vkCmdCopyBufferToImage`).
    /// `buffer_offset`s are bytes into the view, and every region's bytes must lie inside it.
    pub fn buffer_to_image(src: BufferView<'a>, dst: &'a MultiImage, regions: &[BufferImageRegion]) -> Self {
        ImageCopyItem { kind: Kind::BufferToImage { src, dst, regions: regions.to_vec() } }
    }

    /// Copies `regions` of `src` into the buffer view `dst` (`vkCmdCopyImageToBuffer`). No two
    /// regions may write a common byte of the buffer.
    pub fn image_to_buffer(src: &'a MultiImage, dst: BufferView<'a>, regions: &[BufferImageRegion]) -> Self {
        ImageCopyItem { kind: Kind::ImageToBuffer { src, dst, regions: regions.to_vec() } }
    }

    /// How many regions it copies.
    pub fn regions(&self) -> usize {
        match &self.kind {
            Kind::Images { regions, .. } => regions.len(),
            Kind::BufferToImage { regions, .. } | Kind::ImageToBuffer { regions, .. } => regions.len(),
        }
    }
}

/// Why a copy item was refused on a device.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CopyRefusal {
    /// The item has no regions.
    #[error("no regions")]
    NoRegions,
    /// The source lacks `COPY_SRC` usage.
    #[error("the source lacks COPY_SRC usage")]
    SourceUsage,
    /// The destination lacks `COPY_DST` usage.
    #[error("the destination lacks COPY_DST usage")]
    DestinationUsage,
    /// An image has more than one sample per texel (copies here need one).
    #[error("an image has {samples} samples; copies need one")]
    Multisampled {
        /// Its samples per texel.
        samples: u32,
    },
    /// An image's format is one residency knows no texel size for (`ImageDesc::with_vk_format`).
    #[error("an image's format has no texel size residency knows")]
    UnknownFormat,
    /// The two images' formats cannot be copied between: not equal, and not both uncompressed
    /// colour formats of one texel size or both block-compressed formats of one block size.
    #[error("formats {src} and {dst} are not size-compatible")]
    Formats {
        /// The source's format.
        src: Format,
        /// The destination's format.
        dst: Format,
    },
    /// The two images are of different dimensions (1D, 2D, 3D).
    #[error("the images are of different dimensions")]
    Dimensions,
    /// A depth-and-stencil image is copied to or from buffers one aspect at a time, which these
    /// items do not do.
    #[error("a depth-and-stencil image cannot be copied to or from a buffer by these items")]
    DepthStencil,
    /// The region has a zero extent or no layers.
    #[error("the region is empty")]
    EmptyRegion,
    /// The mip level does not exist.
    #[error("mip {mip} of an image of {mip_levels} mips")]
    NoSuchMip {
        /// The mip asked for.
        mip: u32,
        /// The image's mips.
        mip_levels: u32,
    },
    /// The layers do not exist.
    #[error("layers {base_layer}..+{layer_count} of an image of {array_layers} layers")]
    NoSuchLayers {
        /// The first layer asked for.
        base_layer: u32,
        /// The layers asked for.
        layer_count: u32,
        /// The image's layers.
        array_layers: u32,
    },
    /// The box does not lie inside its mip level.
    #[error("texels {offset:?} + {extent:?} are outside the mip's {mip_extent:?}")]
    OutsideMip {
        /// The first texel.
        offset: [u32; 3],
        /// The extent.
        extent: [u32; 3],
        /// The mip's extent.
        mip_extent: [u32; 3],
    },
    /// A block-compressed image's box does not start on a block, or neither ends on one nor at
    /// the mip's edge.
    #[error("texels {offset:?} + {extent:?} do not align to the {block:?} blocks")]
    Misaligned {
        /// The first texel.
        offset: [u32; 3],
        /// The extent.
        extent: [u32; 3],
        /// The format's block extent.
        block: [u32; 2],
    },
    /// The row length is not 0, or it is less than the width, not a multiple of the block width,
    /// or a row of it is more than 2³¹ − 1 bytes.
    #[error("row length {row_length} for a width of {width}")]
    RowLength {
        /// The row length given.
        row_length: u32,
        /// The area's width.
        width: u32,
    },
    /// The image height is not 0, or it is less than the height or not a multiple of the block
    /// height.
    #[error("image height {image_height} for a height of {height}")]
    ImageHeight {
        /// The image height given.
        image_height: u32,
        /// The area's height.
        height: u32,
    },
    /// The region's bytes do not lie inside the buffer view (`end` is `None` when it overflows).
    #[error("bytes {start}..{end:?} of the region are outside the view's {size} B")]
    BufferOutside {
        /// The first byte, in the view.
        start: u64,
        /// One past the last byte, in the view.
        end: Option<u64>,
        /// The view's size.
        size: u64,
    },
    /// The region's first byte in the `VkBuffer` is not a multiple of the texel block size and of
    /// 4.
    #[error("the buffer offset {offset} is not a multiple of {alignment}")]
    BufferAlignment {
        /// The offset in the `VkBuffer`.
        offset: u64,
        /// The alignment needed.
        alignment: u64,
    },
    /// A destination region shares a texel or byte with another region's destination, or (one
    /// image copied into itself) with a source region.
    #[error("it overlaps region {other}")]
    Overlap {
        /// The other region.
        other: usize,
    },
    /// The buffer's bytes of the region and the image are the same bytes of memory.
    #[error("the buffer and the image share memory")]
    Aliasing,
}

/// A copy item was refused on a device; nothing was recorded or submitted.
#[derive(Debug, thiserror::Error)]
#[error("copy from `{src}` to `{dst}` on {device}, {}: {refusal}", which(region))]
pub struct ImageCopyError {
    /// The device of the submission.
    pub device: DeviceIndex,
    /// The source.
    pub src: String,
    /// The destination.
    pub dst: String,
    /// The region refused (`None`: the item as a whole).
    pub region: Option<usize>,
    /// Why.
    pub refusal: CopyRefusal,
}

impl ResidencyError for ImageCopyError {
    fn class(&self) -> ErrorClass {
        ErrorClass::Refused
    }
}

impl ResidencyError for CopyRefusal {
    fn class(&self) -> ErrorClass {
        ErrorClass::Refused
    }
}

/// The part of an item a refusal names.
fn which(region: &Option<usize>) -> String {
    region.map_or_else(|| "the item".to_owned(), |r| format!("region {r}"))
}

/// What an item's copy is on one device.
#[derive(Debug)]
enum Op<'r> {
    Images { src: &'r Image, dst: &'r Image, regions: Vec<vk::ImageCopy> },
    BufferToImage { src: &'r Buffer, dst: &'r Image, regions: Vec<vk::BufferImageCopy> },
    ImageToBuffer { src: &'r Image, dst: &'r Buffer, regions: Vec<vk::BufferImageCopy> },
}

/// An [`ImageCopyItem`] resolved and checked on one device: the copy and the subresources it
/// touches (image, mip, layer), each once.
#[derive(Debug)]
pub(crate) struct ResolvedImageCopy<'r> {
    op: Op<'r>,
    subresources: Vec<(&'r Image, u32, u32)>,
    /// The buffer view of a buffer↔image copy.
    view: Option<DeviceBufferView<'r>>,
}

impl<'r> ResolvedImageCopy<'r> {
    /// What the copy reads and writes, for the submitter's barriers: per image, the mips and
    /// layers its regions touch (their bounding range) read or written by transfers in
    /// `GENERAL` (where [`record`] moves them first); the buffer view read or written whole.
    pub(crate) fn accesses(&self) -> Vec<Access<'r>> {
        use residency_core::sync::{AccessFlags as A, PipelineStages as S};
        let image =
            |image: &'r Image, subresources: &mut dyn Iterator<Item = vk::ImageSubresourceLayers>, access| {
                // (first, end) of the mips and of the layers; `resolve` refused an item without
                // regions and every region outside the image.
                let (mut mips, mut layers) = ((u32::MAX, 0), (u32::MAX, 0));
                for s in subresources {
                    mips = (mips.0.min(s.mip_level), mips.1.max(s.mip_level.saturating_add(1)));
                    let end = s.base_array_layer.saturating_add(s.layer_count);
                    layers = (layers.0.min(s.base_array_layer), layers.1.max(end));
                }
                let use_ = image_use(S::ALL_TRANSFER, access);
                Access::Image { image, mips: mips.0..mips.1, layers: layers.0..layers.1, use_ }
            };
        let view = |use_| {
            self.view.map(|v| Access::Buffer { buffer: v.buffer, offset: v.offset, size: v.size, use_ })
        };
        match &self.op {
            Op::Images { src, dst, regions } => vec![
                image(src, &mut regions.iter().map(|r| r.src_subresource), A::TRANSFER_READ),
                image(dst, &mut regions.iter().map(|r| r.dst_subresource), A::TRANSFER_WRITE),
            ],
            Op::BufferToImage { dst, regions, .. } => view(Use::TransferSrc)
                .into_iter()
                .chain([image(dst, &mut regions.iter().map(|r| r.image_subresource), A::TRANSFER_WRITE)])
                .collect(),
            Op::ImageToBuffer { src, regions, .. } => {
                [image(src, &mut regions.iter().map(|r| r.image_subresource), A::TRANSFER_READ)]
                    .into_iter()
                    .chain(view(Use::TransferDst))
                    .collect()
            }
        }
    }
}

/// The instance of `image` on `dev`.
fn instance<'r>(image: &'r MultiImage, dev: &Device) -> Result<&'r Image, WorkError> {
    let device = dev.index();
    let not_here = || WorkError::NotOnDevice { name: "image".to_owned(), device };
    let instance = image.instance(device).ok_or_else(not_here)?;
    if !instance.device().is(dev) {
        return Err(WorkError::NotOnDevice { name: instance.name().to_owned(), device });
    }
    Ok(instance)
}

/// The instance and range of `view` on `dev`.
fn view_on<'r>(view: &BufferView<'r>, dev: &Device) -> Result<DeviceBufferView<'r>, WorkError> {
    let resolved = view.resolve(dev.index())?;
    if !resolved.buffer.device().is(dev) {
        return Err(WorkError::NotOnDevice { name: resolved.buffer.name().to_owned(), device: dev.index() });
    }
    Ok(resolved)
}

/// The image's format, refused when residency knows no texel size for it or it has several samples.
fn copyable_format(image: &Image) -> Result<Format, CopyRefusal> {
    let d = image.desc();
    if d.samples != 1 {
        return Err(CopyRefusal::Multisampled { samples: d.samples });
    }
    if d.format == Format::Unknown {
        return Err(CopyRefusal::UnknownFormat);
    }
    Ok(d.format)
}

/// Checks that `area` lies inside `image`: a non-empty box of an existing mip, existing layers,
/// inside the mip, aligned to a compressed format's blocks (or ending at the mip's edge).
fn check_area(image: &Image, area: &ImageArea) -> Result<(), CopyRefusal> {
    let d = image.desc();
    if area.layer_count == 0 || area.texels().is_empty() {
        return Err(CopyRefusal::EmptyRegion);
    }
    if area.mip >= d.mip_levels {
        return Err(CopyRefusal::NoSuchMip { mip: area.mip, mip_levels: d.mip_levels });
    }
    if area.base_layer.checked_add(area.layer_count).is_none_or(|end| end > d.array_layers) {
        return Err(CopyRefusal::NoSuchLayers {
            base_layer: area.base_layer,
            layer_count: area.layer_count,
            array_layers: d.array_layers,
        });
    }
    let mip_extent = d.extent.map(|e| (e >> area.mip).max(1));
    let texels = area.texels();
    let Some(end) = texels.end().filter(|_| texels.lies_within(mip_extent)) else {
        return Err(CopyRefusal::OutsideMip { offset: area.offset, extent: area.extent, mip_extent });
    };
    let (bw, bh) = d.format.block_extent();
    let block = [bw, bh, 1];
    let aligned = (0..3).all(|a| {
        area.offset[a] % block[a] == 0 && (area.extent[a] % block[a] == 0 || end[a] == mip_extent[a])
    });
    if !aligned {
        return Err(CopyRefusal::Misaligned { offset: area.offset, extent: area.extent, block: [bw, bh] });
    }
    Ok(())
}

/// Whether texels of `a` can be copied to `b` (Vulkan's size-compatible formats, as residency
/// reads them: equal, or one texel size among uncompressed colour formats, or one block size
/// among block-compressed ones).
fn compatible(a: Format, b: Format) -> bool {
    a == b
        || match (a.kind(), b.kind()) {
            (FormatKind::Color, FormatKind::Color) | (FormatKind::Compressed, FormatKind::Compressed) => {
                a.block_bytes() == b.block_bytes() && a.block_extent() == b.block_extent()
            }
            _ => false,
        }
}

/// Where a buffer↔image region's texel blocks lie in the buffer: rows of `row_bytes` every
/// `row_pitch` bytes, `rows` per slice, slices every `slice_pitch` bytes, from `start` (bytes into
/// the view) to `end` (one past the last byte).
#[derive(Clone, Copy, Debug)]
struct Footprint {
    start: u64,
    end: u64,
    row_bytes: u64,
    row_pitch: u64,
    rows: u64,
    slice_pitch: u64,
    slices: u64,
}

impl Footprint {
    /// Every row's bytes `[start, end)`, in the view.
    fn rows(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        (0..self.slices).flat_map(move |s| {
            (0..self.rows).map(move |y| {
                let at = self.start + s * self.slice_pitch + y * self.row_pitch;
                (at, at + self.row_bytes)
            })
        })
    }
}

/// Checks a buffer↔image region's row length and image height against its area and format and
/// returns where its bytes lie in the buffer view of `view_size` bytes (all arithmetic checked).
fn footprint(format: Format, r: &BufferImageRegion, view_size: u64) -> Result<Footprint, CopyRefusal> {
    let (bw, bh) = format.block_extent();
    let bb = u64::from(format.block_bytes());
    let [width, height, depth] = r.image.extent;
    if r.row_length != 0
        && (r.row_length < width
            || r.row_length % bw != 0
            || u64::from(r.row_length / bw) * bb > i32::MAX as u64)
    {
        return Err(CopyRefusal::RowLength { row_length: r.row_length, width });
    }
    if r.image_height != 0 && (r.image_height < height || r.image_height % bh != 0) {
        return Err(CopyRefusal::ImageHeight { image_height: r.image_height, height });
    }
    let row_length = if r.row_length == 0 { width } else { r.row_length };
    let image_height = if r.image_height == 0 { height } else { r.image_height };
    let row_pitch = u64::from(row_length.div_ceil(bw)) * bb;
    let rows_per_slice = u64::from(image_height.div_ceil(bh));
    let row_bytes = u64::from(width.div_ceil(bw)) * bb;
    let rows = u64::from(height.div_ceil(bh));
    let slices = u64::from(depth) * u64::from(r.image.layer_count);
    let outside = |end| CopyRefusal::BufferOutside { start: r.buffer_offset, end, size: view_size };
    let slice_pitch = rows_per_slice.checked_mul(row_pitch).ok_or(outside(None))?;
    // One past the last byte: the last slice's last row's end.
    let bytes = (slices - 1)
        .checked_mul(slice_pitch)
        .and_then(|b| (rows - 1).checked_mul(row_pitch).and_then(|r| b.checked_add(r)))
        .and_then(|b| b.checked_add(row_bytes))
        .ok_or(outside(None))?;
    let end = r.buffer_offset.checked_add(bytes).ok_or(outside(None))?;
    if end > view_size {
        return Err(outside(Some(end)));
    }
    Ok(Footprint { start: r.buffer_offset, end, row_bytes, row_pitch, rows, slice_pitch, slices })
}

/// The first pair of footprints that share a byte, as (later, earlier) region indices.
fn overlapping_footprints(footprints: &[Footprint]) -> Option<(usize, usize)> {
    // Only regions whose spans meet another's can share a byte; only their rows are compared.
    let n = footprints.len();
    let meets = |i: usize| {
        (0..n).any(|j| {
            j != i && footprints[i].start < footprints[j].end && footprints[j].start < footprints[i].end
        })
    };
    let involved: Vec<usize> = (0..n).filter(|&i| meets(i)).collect();
    if involved.is_empty() {
        return None;
    }
    // Each region's rows come in increasing order: merge them (memory for one row per region,
    // however many rows there are).
    let mut streams: Vec<(usize, _)> = involved.iter().map(|&i| (i, footprints[i].rows())).collect();
    let mut next = std::collections::BinaryHeap::new();
    for (k, (_, rows)) in streams.iter_mut().enumerate() {
        if let Some((start, end)) = rows.next() {
            next.push(std::cmp::Reverse((start, end, k)));
        }
    }
    // Rows of one region never share a byte (pitches are at least the row and slice sizes), so a
    // row starting before the furthest end seen so far meets a row of another region.
    let mut furthest: Option<(u64, usize)> = None;
    while let Some(std::cmp::Reverse((start, end, k))) = next.pop() {
        let i = streams[k].0;
        if let Some((far, j)) = furthest {
            if start < far {
                return Some((i.max(j), i.min(j)));
            }
        }
        if furthest.is_none_or(|(far, _)| end > far) {
            furthest = Some((end, i));
        }
        if let Some((start, end)) = streams[k].1.next() {
            next.push(std::cmp::Reverse((start, end, k)));
        }
    }
    None
}

/// The subresources `areas` touch on `image`, each once, appended to `out`.
fn touch<'r>(out: &mut Vec<(&'r Image, u32, u32)>, image: &'r Image, areas: impl Iterator<Item = ImageArea>) {
    for area in areas {
        for layer in area.base_layer..area.base_layer + area.layer_count {
            if !out.iter().any(|&(i, m, l)| std::ptr::eq(i, image) && m == area.mip && l == layer) {
                out.push((image, area.mip, layer));
            }
        }
    }
}

/// The first pair of `areas` that share a texel, as (later, earlier) indices.
fn overlapping_areas(areas: &[ImageArea]) -> Option<(usize, usize)> {
    (0..areas.len()).find_map(|i| (0..i).find(|&j| areas[i].overlaps(&areas[j])).map(|j| (i, j)))
}

/// A buffer↔image region as Vulkan takes it: `offset` is its first byte in the `VkBuffer`.
fn buffer_image_copy(
    r: &BufferImageRegion,
    offset: u64,
    aspect_mask: vk::ImageAspectFlags,
) -> vk::BufferImageCopy {
    vk::BufferImageCopy {
        buffer_offset: offset,
        buffer_row_length: r.row_length,
        buffer_image_height: r.image_height,
        image_subresource: r.image.subresource(aspect_mask),
        image_offset: offset_3d(r.image.offset),
        image_extent: extent_3d(r.image.extent),
    }
}

fn offset_3d(o: [u32; 3]) -> vk::Offset3D {
    // Inside an image (checked), so below i32::MAX (Vulkan's image dimension limits).
    vk::Offset3D { x: o[0] as i32, y: o[1] as i32, z: o[2] as i32 }
}

fn extent_3d(e: [u32; 3]) -> vk::Extent3D {
    vk::Extent3D { width: e[0], height: e[1], depth: e[2] }
}

/// Checks the buffer side of buffer↔image `regions` of `image` in `view` and returns their
/// `VkBufferImageCopy`s (`writes_buffer`: the image is the source, and no two regions may write a
/// common byte of the buffer).
fn buffer_regions(
    image: &Image,
    view: DeviceBufferView<'_>,
    regions: &[BufferImageRegion],
    writes_buffer: bool,
    refuse: &impl Fn(Option<usize>, CopyRefusal) -> WorkError,
) -> Result<Vec<vk::BufferImageCopy>, WorkError> {
    let format = copyable_format(image).map_err(|e| refuse(None, e))?;
    if format.kind() == FormatKind::DepthStencil {
        return Err(refuse(None, CopyRefusal::DepthStencil));
    }
    let aspect_mask = aspect(format);
    let block_bytes = u64::from(format.block_bytes()).max(1);
    let alignment = block_bytes * 4 / gcd(block_bytes, 4);
    let (memory, base) = image.memory();
    let mut footprints = Vec::with_capacity(regions.len());
    let mut copies = Vec::with_capacity(regions.len());
    for (i, r) in regions.iter().enumerate() {
        check_area(image, &r.image).map_err(|e| refuse(Some(i), e))?;
        let f = footprint(format, r, view.size).map_err(|e| refuse(Some(i), e))?;
        // Inside the view, which lies inside the buffer: no overflow.
        let offset = view.buffer.offset() + view.offset + f.start;
        if offset % alignment != 0 {
            return Err(refuse(Some(i), CopyRefusal::BufferAlignment { offset, alignment }));
        }
        if buffer_aliases(view.buffer, view.offset + f.start, f.end - f.start, memory, base, image.size()) {
            return Err(refuse(Some(i), CopyRefusal::Aliasing));
        }
        footprints.push(f);
        copies.push(buffer_image_copy(r, offset, aspect_mask));
    }
    if writes_buffer {
        if let Some((i, other)) = overlapping_footprints(&footprints) {
            return Err(refuse(Some(i), CopyRefusal::Overlap { other }));
        }
    } else {
        let areas: Vec<ImageArea> = regions.iter().map(|r| r.image).collect();
        if let Some((i, other)) = overlapping_areas(&areas) {
            return Err(refuse(Some(i), CopyRefusal::Overlap { other }));
        }
    }
    Ok(copies)
}

fn gcd(a: u64, b: u64) -> u64 {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

/// Resolves `item` on `dev` and checks every region against that device's instances. Changes
/// nothing; a refusal is [`WorkError::ImageCopy`] (or the view's or instance's error).
pub(crate) fn resolve<'r>(
    item: &'r ImageCopyItem<'_>,
    dev: &Device,
) -> Result<ResolvedImageCopy<'r>, WorkError> {
    let device = dev.index();
    let no_regions = item.regions() == 0;
    let mut subresources = Vec::new();
    match &item.kind {
        Kind::Images { src, dst, regions } => {
            let (src, dst) = (instance(src, dev)?, instance(dst, dev)?);
            let refuse = |region, refusal| {
                WorkError::ImageCopy(ImageCopyError {
                    device,
                    src: src.name().to_owned(),
                    dst: dst.name().to_owned(),
                    region,
                    refusal,
                })
            };
            if no_regions {
                return Err(refuse(None, CopyRefusal::NoRegions));
            }
            check_usages(src.desc().usage, dst.desc().usage).map_err(|e| refuse(None, e))?;
            let (sf, df) = (copyable_format(src), copyable_format(dst));
            let (sf, df) = (sf.map_err(|e| refuse(None, e))?, df.map_err(|e| refuse(None, e))?);
            if !compatible(sf, df) {
                return Err(refuse(None, CopyRefusal::Formats { src: sf, dst: df }));
            }
            if src.desc().dimension != dst.desc().dimension {
                return Err(refuse(None, CopyRefusal::Dimensions));
            }
            let same = src.raw() == dst.raw();
            let dsts: Vec<ImageArea> = regions.iter().map(ImageCopyRegion::dst).collect();
            for (i, r) in regions.iter().enumerate() {
                check_area(src, &r.src).map_err(|e| refuse(Some(i), e))?;
                check_area(dst, &dsts[i]).map_err(|e| refuse(Some(i), e))?;
                if same {
                    if let Some(other) = regions.iter().position(|s| s.src.overlaps(&dsts[i])) {
                        return Err(refuse(Some(i), CopyRefusal::Overlap { other }));
                    }
                }
            }
            if let Some((i, other)) = overlapping_areas(&dsts) {
                return Err(refuse(Some(i), CopyRefusal::Overlap { other }));
            }
            let (sa, da) = (aspect(sf), aspect(df));
            let copies = regions
                .iter()
                .zip(&dsts)
                .map(|(r, d)| vk::ImageCopy {
                    src_subresource: r.src.subresource(sa),
                    src_offset: offset_3d(r.src.offset),
                    dst_subresource: d.subresource(da),
                    dst_offset: offset_3d(d.offset),
                    extent: extent_3d(r.src.extent),
                })
                .collect();
            touch(&mut subresources, src, regions.iter().map(|r| r.src));
            touch(&mut subresources, dst, dsts.into_iter());
            Ok(ResolvedImageCopy { op: Op::Images { src, dst, regions: copies }, subresources, view: None })
        }
        Kind::BufferToImage { src, dst, regions } => {
            let (view, image) = (view_on(src, dev)?, instance(dst, dev)?);
            let refuse = |region, refusal| {
                WorkError::ImageCopy(ImageCopyError {
                    device,
                    src: view.buffer.name().to_owned(),
                    dst: image.name().to_owned(),
                    region,
                    refusal,
                })
            };
            if no_regions {
                return Err(refuse(None, CopyRefusal::NoRegions));
            }
            if !view.buffer.usage().contains(BufferUsage::COPY_SRC) {
                return Err(refuse(None, CopyRefusal::SourceUsage));
            }
            if !image.desc().usage.contains(ImageUsage::COPY_DST) {
                return Err(refuse(None, CopyRefusal::DestinationUsage));
            }
            let copies = buffer_regions(image, view, regions, false, &refuse)?;
            touch(&mut subresources, image, regions.iter().map(|r| r.image));
            Ok(ResolvedImageCopy {
                op: Op::BufferToImage { src: view.buffer, dst: image, regions: copies },
                subresources,
                view: Some(view),
            })
        }
        Kind::ImageToBuffer { src, dst, regions } => {
            let (image, view) = (instance(src, dev)?, view_on(dst, dev)?);
            let refuse = |region, refusal| {
                WorkError::ImageCopy(ImageCopyError {
                    device,
                    src: image.name().to_owned(),
                    dst: view.buffer.name().to_owned(),
                    region,
                    refusal,
                })
            };
            if no_regions {
                return Err(refuse(None, CopyRefusal::NoRegions));
            }
            if !image.desc().usage.contains(ImageUsage::COPY_SRC) {
                return Err(refuse(None, CopyRefusal::SourceUsage));
            }
            if !view.buffer.usage().contains(BufferUsage::COPY_DST) {
                return Err(refuse(None, CopyRefusal::DestinationUsage));
            }
            let copies = buffer_regions(image, view, regions, true, &refuse)?;
            touch(&mut subresources, image, regions.iter().map(|r| r.image));
            Ok(ResolvedImageCopy {
                op: Op::ImageToBuffer { src: image, dst: view.buffer, regions: copies },
                subresources,
                view: Some(view),
            })
        }
    }
}

fn check_usages(src: ImageUsage, dst: ImageUsage) -> Result<(), CopyRefusal> {
    if !src.contains(ImageUsage::COPY_SRC) {
        return Err(CopyRefusal::SourceUsage);
    }
    if !dst.contains(ImageUsage::COPY_DST) {
        return Err(CopyRefusal::DestinationUsage);
    }
    Ok(())
}

/// Moves `subresources` (image, mip, layer) to `GENERAL` from the layout each is in as far as
/// `rec` knows (earlier commands of it, else the image's record, noted as the submission's
/// requirement), with one barrier that makes earlier work on them finish before `dst` stages
/// access them with `dst_access`; holds the images. Subresources already in `GENERAL` get no
/// barrier (the submission's barriers order them) but the requirement is noted.
pub(crate) fn to_general(
    rec: &mut Recording<'_>,
    subresources: &[(&Image, u32, u32)],
    (dst_stage, dst_access): (vk::PipelineStageFlags2, vk::AccessFlags2),
) {
    use vk::ImageLayout as L;
    let mut barriers = Vec::new();
    for &(image, mip, layer) in subresources {
        rec.keep(image.life());
        let layouts = image.layouts();
        let old = rec.layout_now(layouts, mip, layer);
        rec.transition(layouts, mip..mip + 1, layer..layer + 1, old, L::GENERAL);
        if old != L::GENERAL {
            barriers.push(
                vk::ImageMemoryBarrier2::default()
                    .src_stage_mask(vk::PipelineStageFlags2::ALL_COMMANDS)
                    .src_access_mask(vk::AccessFlags2::MEMORY_READ | vk::AccessFlags2::MEMORY_WRITE)
                    .dst_stage_mask(dst_stage)
                    .dst_access_mask(dst_access)
                    .old_layout(old)
                    .new_layout(L::GENERAL)
                    .image(image.raw())
                    .subresource_range(vk::ImageSubresourceRange {
                        aspect_mask: aspect(image.desc().format),
                        base_mip_level: mip,
                        level_count: 1,
                        base_array_layer: layer,
                        layer_count: 1,
                    }),
            );
        }
    }
    if barriers.is_empty() {
        return;
    }
    // SAFETY: `rec` is recording on its device outside a render pass; every image is a live
    // instance on that device (checked when resolved), held by the recording; each subresource
    // exists (checked when resolved) and `old` is the layout it is in when the barrier runs: what
    // an earlier command of this recording left it in, or its layout in submission order, noted
    // above as a requirement that the submission checks under the queue lock before submitting.
    // The aspect is the format's whole aspect; the stages and accesses are core ones the universal
    // queue supports; the barriers live for the call.
    unsafe {
        rec.device()
            .raw()
            .cmd_pipeline_barrier2(rec.raw(), &vk::DependencyInfo::default().image_memory_barriers(&barriers))
    };
    rec.recorded();
}

/// Records a resolved copy: its subresources to `GENERAL`, then the copy.
pub(crate) fn record(rec: &mut Recording<'_>, r: &ResolvedImageCopy<'_>) {
    use vk::{AccessFlags2 as A, ImageLayout as L, PipelineStageFlags2 as S};
    to_general(rec, &r.subresources, (S::COPY, A::TRANSFER_READ | A::TRANSFER_WRITE));
    let raw = rec.device().raw();
    let cmd = rec.raw();
    match &r.op {
        Op::Images { src, dst, regions } => {
            // SAFETY: `cmd` is recording on this device outside a render pass; both images are
            // live single-sampled instances on it with COPY_SRC / COPY_DST usage and compatible
            // formats, every region lies inside both (mips, layers, boxes, block alignment) and no
            // destination texel is a source texel or another region's destination (`resolve`);
            // every subresource is in GENERAL when the copy runs (`to_general` above).
            unsafe { raw.cmd_copy_image(cmd, src.raw(), L::GENERAL, dst.raw(), L::GENERAL, regions) };
        }
        Op::BufferToImage { src, dst, regions } => {
            rec.keep(src.life());
            // SAFETY: as above, and the buffer is a live buffer of this device with COPY_SRC
            // usage, each region's bytes lie inside it at an offset aligned to the block size and
            // 4, with row lengths and image heights checked, sharing no byte with the image.
            unsafe { raw.cmd_copy_buffer_to_image(cmd, src.raw(), dst.raw(), L::GENERAL, regions) };
        }
        Op::ImageToBuffer { src, dst, regions } => {
            rec.keep(dst.life());
            // SAFETY: as above (COPY_DST usage on the buffer), and no two regions write a common
            // byte of the buffer (`resolve`).
            unsafe { raw.cmd_copy_image_to_buffer(cmd, src.raw(), L::GENERAL, dst.raw(), regions) };
        }
    }
    rec.recorded();
}
