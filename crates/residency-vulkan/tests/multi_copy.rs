//! Image copy items and the `MultiImage` broadcast on two logical devices (lavapipe opened twice):
//! image→image, buffer→image and image→buffer copies over mips and array layers in several
//! formats (a block-compressed one among them), each device's results equal to a single-device
//! run and to the texels a CPU model of the copies expects; a broadcast refused or failing on
//! device 1 leaves device 0's image as it was (read back); misuse refused with nothing recorded.
//! Every test runs under `with_gpu` (synchronization validation on; no object may outlive it).

use residency_core::device_mask::{DeviceIndex, DeviceMask};
use residency_core::format::Format;
use residency_core::usage::{BufferUsage, ImageUsage};
use residency_vulkan::ash::vk;
use residency_vulkan::multi::work::{
    BufferImageRegion, BufferView, CopyRefusal, ImageArea, ImageCopyError, ImageCopyItem, ImageCopyRegion,
    MultiSubmitter, WorkError, WorkItem,
};
use residency_vulkan::multi::{MultiBuffer, MultiDevice, MultiDeviceError, MultiImage, MultiUploader};
use residency_vulkan::testing::with_gpu;
use residency_vulkan::{BufferDesc, DeviceSet, FaultSite, ImageDesc, InjectedFault, UploadError};

fn d(i: u32) -> DeviceIndex {
    DeviceIndex::new(i).unwrap()
}

fn both() -> DeviceMask {
    DeviceMask::from_bits(0b11)
}

/// Deterministic bytes (an xorshift stream from `seed`).
fn pattern(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}

/// What the copies should leave: every subresource's texel blocks, tightly packed.
struct Model {
    format: Format,
    extent: [u32; 3],
    layers: u32,
    subresources: Vec<Vec<u8>>,
}

impl Model {
    fn new(format: Format, extent: [u32; 3], mips: u32, layers: u32) -> Model {
        let subresources = (0..mips * layers)
            .map(|i| {
                let e = extent.map(|v| (v >> (i / layers)).max(1));
                vec![0; format.region_bytes(e[0], e[1], e[2]) as usize]
            })
            .collect();
        Model { format, extent, layers, subresources }
    }

    /// (blocks per row, rows of blocks) of `mip`.
    fn blocks(&self, mip: u32) -> (usize, usize) {
        let (bw, bh) = self.format.block_extent();
        let e = self.extent.map(|v| (v >> mip).max(1));
        (e[0].div_ceil(bw) as usize, e[1].div_ceil(bh) as usize)
    }

    /// The byte of block (`bx`, `by`, `z`) of (`mip`, `layer`).
    fn at(&self, mip: u32, layer: u32, [bx, by, z]: [usize; 3]) -> (usize, usize) {
        let (w, h) = self.blocks(mip);
        let bb = self.format.block_bytes() as usize;
        ((mip * self.layers + layer) as usize, ((z * h + by) * w + bx) * bb)
    }

    /// Every block of `area` with its buffer address as `region` lays it out (`start` + offset).
    fn walk(&self, r: &BufferImageRegion, mut each: impl FnMut(u32, [usize; 3], usize)) {
        let (bw, bh) = self.format.block_extent();
        let bb = self.format.block_bytes() as usize;
        let a = &r.image;
        let row_length = if r.row_length == 0 { a.extent[0] } else { r.row_length };
        let image_height = if r.image_height == 0 { a.extent[1] } else { r.image_height };
        let row_pitch = row_length.div_ceil(bw) as usize * bb;
        let slice_pitch = image_height.div_ceil(bh) as usize * row_pitch;
        let depth = a.extent[2] as usize;
        for l in 0..a.layer_count {
            for z in 0..depth {
                for y in 0..a.extent[1].div_ceil(bh) as usize {
                    for x in 0..a.extent[0].div_ceil(bw) as usize {
                        let block = [
                            (a.offset[0] / bw) as usize + x,
                            (a.offset[1] / bh) as usize + y,
                            a.offset[2] as usize + z,
                        ];
                        let slice = l as usize * depth + z;
                        let addr = r.buffer_offset as usize + slice * slice_pitch + y * row_pitch + x * bb;
                        each(a.base_layer + l, block, addr);
                    }
                }
            }
        }
    }

    fn write_from(&mut self, buffer: &[u8], r: &BufferImageRegion) {
        let bb = self.format.block_bytes() as usize;
        let mut writes = Vec::new();
        self.walk(r, |layer, block, addr| writes.push((self.at(r.image.mip, layer, block), addr)));
        for ((s, at), addr) in writes {
            self.subresources[s][at..at + bb].copy_from_slice(&buffer[addr..addr + bb]);
        }
    }

    fn read_into(&self, buffer: &mut [u8], r: &BufferImageRegion) {
        let bb = self.format.block_bytes() as usize;
        self.walk(r, |layer, block, addr| {
            let (s, at) = self.at(r.image.mip, layer, block);
            buffer[addr..addr + bb].copy_from_slice(&self.subresources[s][at..at + bb]);
        });
    }

    fn copy(src: &Model, dst: &mut Model, r: &ImageCopyRegion) {
        let bb = src.format.block_bytes() as usize;
        let (bw, bh) = src.format.block_extent();
        let (s, t) = (r.src, r.dst());
        for l in 0..s.layer_count {
            for z in 0..s.extent[2] as usize {
                for y in 0..s.extent[1].div_ceil(bh) as usize {
                    for x in 0..s.extent[0].div_ceil(bw) as usize {
                        let from = [
                            (s.offset[0] / bw) as usize + x,
                            (s.offset[1] / bh) as usize + y,
                            s.offset[2] as usize + z,
                        ];
                        let to = [
                            (t.offset[0] / bw) as usize + x,
                            (t.offset[1] / bh) as usize + y,
                            t.offset[2] as usize + z,
                        ];
                        let (a, i) = src.at(s.mip, s.base_layer + l, from);
                        let (b, j) = dst.at(t.mip, t.base_layer + l, to);
                        let block = src.subresources[a][i..i + bb].to_vec();
                        dst.subresources[b][j..j + bb].copy_from_slice(&block);
                    }
                }
            }
        }
    }
}

const EXTENT: [u32; 3] = [32, 16, 1];
const MIPS: u32 = 3;
const LAYERS: u32 = 3;

fn whole(model: &Model, mip: u32) -> ImageArea {
    let e = model.extent.map(|v| (v >> mip).max(1));
    ImageArea::new(mip, [0; 3], e).with_layers(0, LAYERS)
}

/// The regions of the scenario, for a source of `src` and a destination of `dst` format.
struct Scenario {
    /// Buffer → source: every mip and layer, mip 1 with padded rows and slices.
    upload: Vec<BufferImageRegion>,
    upload_bytes: usize,
    /// Buffer → destination: every mip and layer, tightly packed.
    background: Vec<BufferImageRegion>,
    background_bytes: usize,
    /// Source → destination.
    copies: Vec<ImageCopyRegion>,
    /// Destination → read-back buffer, every mip and layer, packed.
    read: Vec<BufferImageRegion>,
    read_bytes: usize,
    /// Source mip 0 layer 0 → a second read-back buffer, as its two halves side by side in
    /// rows of the full width (the regions' byte spans overlap, their rows do not).
    halves: Vec<BufferImageRegion>,
    halves_bytes: usize,
}

fn scenario(src: &Model, dst: &Model) -> Scenario {
    let (bw, bh) = src.format.block_extent();
    let bb = src.format.block_bytes() as u64;
    let packed = |model: &Model, offset: &mut u64| -> Vec<BufferImageRegion> {
        (0..MIPS)
            .map(|mip| {
                let r = BufferImageRegion::packed(*offset, whole(model, mip));
                let e = r.image.extent;
                *offset += model.format.region_bytes(e[0], e[1], e[2]) * u64::from(LAYERS);
                r
            })
            .collect()
    };
    // The source: mip 0 and 2 packed, mip 1 in rows of 8 more texels and slices of 4 more rows.
    let mut offset = 0;
    let mut upload = packed(src, &mut offset);
    let m1 = whole(src, 1);
    let padded = BufferImageRegion {
        buffer_offset: offset.next_multiple_of(16),
        row_length: m1.extent[0] + 2 * bw,
        image_height: m1.extent[1] + bh,
        image: m1,
    };
    let padded_bytes = src.format.region_bytes(padded.row_length, padded.image_height, 1) * u64::from(LAYERS);
    upload[1] = padded;
    let upload_bytes = (padded.buffer_offset + padded_bytes) as usize;
    let mut offset = 0;
    let background = packed(dst, &mut offset);
    let background_bytes = offset as usize;
    let mut offset = 0;
    let read = packed(dst, &mut offset);
    let read_bytes = offset as usize;
    let copies = vec![
        // Layers 1..3 of a box of mip 0 to layers 0..2 elsewhere in mip 0.
        ImageCopyRegion {
            src: ImageArea::new(0, [8, 4, 0], [16, 8, 1]).with_layers(1, 2),
            dst_mip: 0,
            dst_base_layer: 0,
            dst_offset: [16, 8, 0],
        },
        // All of mip 1, layer 0, to mip 1 of layer 2.
        ImageCopyRegion {
            src: whole(src, 1).with_layers(0, 1),
            dst_mip: 1,
            dst_base_layer: 2,
            dst_offset: [0; 3],
        },
        // Mip 2 of layer 2 into the corner of mip 0, layer 2.
        ImageCopyRegion {
            src: whole(src, 2).with_layers(2, 1),
            dst_mip: 0,
            dst_base_layer: 2,
            dst_offset: [0; 3],
        },
    ];
    let half = EXTENT[0] / 2;
    let half_bytes = src.format.region_bytes(half, 1, 1);
    let halves = vec![
        BufferImageRegion {
            buffer_offset: 0,
            row_length: EXTENT[0],
            image_height: 0,
            image: ImageArea::new(0, [0; 3], [half, EXTENT[1], 1]),
        },
        BufferImageRegion {
            buffer_offset: half_bytes,
            row_length: EXTENT[0],
            image_height: 0,
            image: ImageArea::new(0, [half, 0, 0], [half, EXTENT[1], 1]),
        },
    ];
    let halves_bytes = src.format.region_bytes(EXTENT[0], EXTENT[1], 1) as usize;
    assert_eq!(bb * u64::from(EXTENT[0] / bw) * u64::from(EXTENT[1] / bh), halves_bytes as u64);
    Scenario {
        upload,
        upload_bytes,
        background,
        background_bytes,
        copies,
        read,
        read_bytes,
        halves,
        halves_bytes,
    }
}

fn image_desc(name: &str, format: Format) -> ImageDesc {
    let usage = ImageUsage::COPY_SRC | ImageUsage::COPY_DST | ImageUsage::SAMPLED;
    ImageDesc::new_2d(name, format, EXTENT[0], EXTENT[1], usage)
        .with_mip_levels(MIPS)
        .with_array_layers(LAYERS)
}

fn buffer(set: &DeviceSet, mask: DeviceMask, name: &str, size: usize) -> MultiBuffer {
    let usage = BufferUsage::COPY_SRC | BufferUsage::COPY_DST;
    MultiBuffer::create(set, mask, &BufferDesc::new(name, size as u64, usage)).unwrap()
}

/// Runs the scenario on every device of `mask` (objects of that mask) and returns each device's
/// two read-backs.
fn run(
    set: &DeviceSet,
    mask: DeviceMask,
    src_format: Format,
    dst_format: Format,
) -> Vec<(DeviceIndex, Vec<u8>, Vec<u8>)> {
    let src_model = Model::new(src_format, EXTENT, MIPS, LAYERS);
    let dst_model = Model::new(dst_format, EXTENT, MIPS, LAYERS);
    let s = scenario(&src_model, &dst_model);
    let src = MultiImage::create(set, mask, &image_desc("copy source", src_format)).unwrap();
    let dst = MultiImage::create(set, mask, &image_desc("copy destination", dst_format)).unwrap();
    let texels = buffer(set, mask, "texels", s.upload_bytes);
    let background = buffer(set, mask, "background", s.background_bytes);
    let read = buffer(set, mask, "read back", s.read_bytes);
    let halves = buffer(set, mask, "halves", s.halves_bytes);
    let uploader = MultiUploader::new(set, mask, 1 << 20).unwrap();
    uploader.broadcast(&texels, 0, &pattern(s.upload_bytes, 1)).unwrap();
    uploader.broadcast(&background, 0, &pattern(s.background_bytes, 2)).unwrap();
    uploader.wait_idle().unwrap();

    let upload = ImageCopyItem::buffer_to_image(BufferView::whole(&texels), &src, &s.upload);
    let fill = ImageCopyItem::buffer_to_image(BufferView::whole(&background), &dst, &s.background);
    let copy = ImageCopyItem::images(&src, &dst, &s.copies);
    let read_back = ImageCopyItem::image_to_buffer(&dst, BufferView::whole(&read), &s.read);
    let read_halves = ImageCopyItem::image_to_buffer(&src, BufferView::whole(&halves), &s.halves);
    let items = [
        WorkItem::ImageCopy(&upload),
        WorkItem::ImageCopy(&fill),
        WorkItem::Barrier,
        WorkItem::ImageCopy(&copy),
        WorkItem::Barrier,
        WorkItem::ImageCopy(&read_back),
        WorkItem::ImageCopy(&read_halves),
    ];
    let submitter = MultiSubmitter::new(set, mask).unwrap();
    let mut out = Vec::new();
    for index in mask.iter() {
        let submission = submitter.submit(index, &items).unwrap();
        submitter.wait(index, submission).unwrap();
        let device = set.device(index).unwrap();
        for image in [&src, &dst] {
            for (mip, layer) in (0..MIPS).flat_map(|m| (0..LAYERS).map(move |l| (m, l))) {
                let layout = image.instance(index).unwrap().layout(mip, layer);
                assert_eq!(layout, Some(vk::ImageLayout::GENERAL), "{index}: left in GENERAL");
            }
        }
        out.push((
            index,
            device.read_back(read.instance(index).unwrap(), 0, s.read_bytes as u64).unwrap(),
            device.read_back(halves.instance(index).unwrap(), 0, s.halves_bytes as u64).unwrap(),
        ));
    }
    submitter.destroy();
    uploader.destroy().unwrap();
    out
}

/// What `run` must read back, from the CPU model.
fn expected(src_format: Format, dst_format: Format) -> (Vec<u8>, Vec<u8>) {
    let mut src = Model::new(src_format, EXTENT, MIPS, LAYERS);
    let mut dst = Model::new(dst_format, EXTENT, MIPS, LAYERS);
    let s = scenario(&src, &dst);
    let texels = pattern(s.upload_bytes, 1);
    let background = pattern(s.background_bytes, 2);
    for r in &s.upload {
        src.write_from(&texels, r);
    }
    for r in &s.background {
        dst.write_from(&background, r);
    }
    for r in &s.copies {
        Model::copy(&src, &mut dst, r);
    }
    let mut read = vec![0; s.read_bytes];
    for r in &s.read {
        dst.read_into(&mut read, r);
    }
    let mut halves = vec![0; s.halves_bytes];
    for r in &s.halves {
        src.read_into(&mut halves, r);
    }
    (read, halves)
}

#[test]
fn image_and_buffer_image_copy_items_match_a_single_device_run_and_the_model() {
    with_gpu(|set| {
        // Equal formats, a copy between two 4-byte colour formats, 8-byte texels, and BC1 → BC4
        // (8-byte 4 × 4 blocks).
        let pairs = [
            (Format::R8G8B8A8Unorm, Format::R8G8B8A8Unorm),
            (Format::R8G8B8A8Unorm, Format::R32Uint),
            (Format::R16G16B16A16Float, Format::R16G16B16A16Float),
            (Format::Bc1Unorm, Format::Bc4Unorm),
        ];
        for (src, dst) in pairs {
            let (read, halves) = expected(src, dst);
            let single = run(set, d(0).mask(), src, dst);
            let multi = run(set, both(), src, dst);
            assert_eq!(single.len(), 1);
            assert_eq!(multi.len(), 2);
            for (index, r, h) in single.iter().chain(&multi) {
                assert!(*r == read, "{src} → {dst} on {index}: the destination's texels are the model's");
                assert!(*h == halves, "{src} on {index}: the halves side by side are the model's");
            }
            assert!(multi[0].1 == single[0].1 && multi[1].1 == single[0].1, "both devices equal one");
        }
    });
}

/// Reads all of `area` of `image`'s instance on `index` through an image→buffer copy item.
fn read_area(
    set: &DeviceSet,
    image: &MultiImage,
    index: DeviceIndex,
    area: ImageArea,
    bytes: u64,
) -> Vec<u8> {
    let out = buffer(set, index.mask(), "area read back", bytes as usize);
    let submitter = MultiSubmitter::new(set, index.mask()).unwrap();
    let item =
        ImageCopyItem::image_to_buffer(image, BufferView::whole(&out), &[BufferImageRegion::packed(0, area)]);
    let submission = submitter.submit(index, &[WorkItem::ImageCopy(&item)]).unwrap();
    submitter.wait(index, submission).unwrap();
    let back = set.device(index).unwrap().read_back(out.instance(index).unwrap(), 0, bytes).unwrap();
    submitter.destroy();
    back
}

#[test]
fn a_multi_image_broadcast_refused_or_failing_on_device_1_leaves_every_device_as_it_was() {
    with_gpu(|set| {
        let format = Format::R8G8B8A8Unorm;
        let image = MultiImage::create(set, both(), &image_desc("broadcast", format)).unwrap();
        let area = ImageArea::new(1, [4, 0, 0], [8, 8, 1]).with_layers(1, 2);
        let bytes = format.region_bytes(8, 8, 1) * 2;
        let old = pattern(bytes as usize, 10);
        let new = pattern(bytes as usize, 11);
        image.broadcast(area, &old).unwrap();
        let contents = || [d(0), d(1)].map(|i| read_area(set, &image, i, area, bytes));
        assert_eq!(contents(), [old.clone(), old.clone()], "one broadcast lands on both devices");
        for layer in 1..3 {
            assert_eq!(image.instance(d(0)).unwrap().layout(1, layer), Some(vk::ImageLayout::GENERAL));
        }

        // A submission failing on device 1: device 0's copy, submitted before, is undone.
        let d1 = set.device(d(1)).unwrap();
        d1.ledger().inject_fault(FaultSite::QueueSubmit, 0, InjectedFault::OutOfDeviceMemory);
        let err = image.broadcast(area, &new).unwrap_err();
        assert!(matches!(err, MultiDeviceError::Failed { device, .. } if device == d(1)), "{err}");
        d1.ledger().clear_faults();
        assert_eq!(contents(), [old.clone(), old.clone()], "device 0 was rolled back");

        // A wait failing on device 1 after both copies were submitted: both are undone.
        d1.ledger().inject_fault(FaultSite::Wait, 0, InjectedFault::OutOfDeviceMemory);
        let err = image.broadcast(area, &new).unwrap_err();
        assert!(matches!(err, MultiDeviceError::Failed { device, .. } if device == d(1)), "{err}");
        d1.ledger().clear_faults();
        assert_eq!(contents(), [old.clone(), old.clone()], "both devices were rolled back");

        // Device 1 cannot create its staging buffer: nothing was submitted anywhere.
        d1.ledger().inject_fault(FaultSite::CreateResource, 0, InjectedFault::OutOfDeviceMemory);
        let err = image.broadcast(area, &new).unwrap_err();
        assert!(
            matches!(err, MultiDeviceError::Failed { device, source: UploadError::Memory(_) } if device == d(1)),
            "{err}"
        );
        d1.ledger().clear_faults();
        assert_eq!(contents(), [old.clone(), old.clone()]);

        // Refused before anything is made: a region outside the image, the wrong size.
        let outside = ImageArea::new(1, [12, 0, 0], [8, 8, 1]);
        let err = image.broadcast(outside, &new[..bytes as usize / 2]).unwrap_err();
        assert!(
            matches!(err, MultiDeviceError::Failed { device, source: UploadError::RegionOutsideImage { .. } } if device == d(0)),
            "{err}"
        );
        let no_layer = ImageArea::new(0, [0; 3], [8, 8, 1]).with_layers(3, 1);
        let err = image.broadcast(no_layer, &new[..bytes as usize / 2]).unwrap_err();
        assert!(
            matches!(err, MultiDeviceError::Failed { source: UploadError::RegionOutsideImage { .. }, .. }),
            "{err}"
        );
        let err = image.broadcast(area, &new[1..]).unwrap_err();
        assert!(
            matches!(err, MultiDeviceError::Failed { source: UploadError::WrongSize { .. }, .. }),
            "{err}"
        );
        assert_eq!(contents(), [old.clone(), old.clone()]);

        // Two devices need COPY_SRC to undo; one device does not.
        let usage = ImageUsage::COPY_DST | ImageUsage::SAMPLED;
        let write_only = ImageDesc::new_2d("write only", format, 16, 16, usage);
        let two = MultiImage::create(set, both(), &write_only).unwrap();
        let texels = pattern(16 * 16 * 4, 12);
        let err = two.broadcast(ImageArea::new(0, [0; 3], [16, 16, 1]), &texels).unwrap_err();
        assert!(
            matches!(err, MultiDeviceError::Failed { source: UploadError::NotCopySource { .. }, .. }),
            "{err}"
        );
        let one = MultiImage::create(set, d(1).mask(), &write_only).unwrap();
        one.broadcast(ImageArea::new(0, [0; 3], [16, 16, 1]), &texels).unwrap();

        // And a broadcast with nothing failing lands everywhere.
        image.broadcast(area, &new).unwrap();
        assert_eq!(contents(), [new.clone(), new.clone()]);
    });
}

/// The refusal of `items` submitted to `index`, which must be an image copy's.
fn refusal(
    submitter: &MultiSubmitter,
    index: DeviceIndex,
    items: &[WorkItem<'_, '_>],
) -> (Option<usize>, CopyRefusal) {
    match submitter.submit(index, items) {
        Err(WorkError::ImageCopy(ImageCopyError { device, region, refusal, .. })) => {
            assert_eq!(device, index);
            (region, refusal)
        }
        other => panic!("expected an image copy refusal, got {other:?}"),
    }
}

#[test]
fn misused_image_copy_items_are_refused_per_device_with_nothing_recorded() {
    with_gpu(|set| {
        let format = Format::R8G8B8A8Unorm;
        let image = MultiImage::create(set, both(), &image_desc("misuse", format)).unwrap();
        let other = MultiImage::create(set, both(), &image_desc("misuse other", format)).unwrap();
        let bc = MultiImage::create(set, both(), &image_desc("misuse bc", Format::Bc1Unorm)).unwrap();
        let wide =
            MultiImage::create(set, both(), &image_desc("misuse wide", Format::R16G16B16A16Float)).unwrap();
        let sampled_only = ImageDesc::new_2d("sampled only", format, 16, 16, ImageUsage::SAMPLED);
        let sampled_only = MultiImage::create(set, both(), &sampled_only).unwrap();
        let on_0 = MultiImage::create(set, d(0).mask(), &image_desc("only on 0", format)).unwrap();
        let bytes = 32 * 16 * 4 * 3;
        let staging = buffer(set, both(), "misuse staging", bytes);
        let src_only = MultiBuffer::create(
            set,
            both(),
            &BufferDesc::new("source only", bytes as u64, BufferUsage::COPY_SRC),
        )
        .unwrap();
        let dst_only = MultiBuffer::create(
            set,
            both(),
            &BufferDesc::new("destination only", bytes as u64, BufferUsage::COPY_DST),
        )
        .unwrap();
        let submitter = MultiSubmitter::new(set, both()).unwrap();
        let view = BufferView::whole(&staging);
        let full = ImageArea::new(0, [0; 3], [32, 16, 1]);
        let packed = |area| BufferImageRegion::packed(0, area);

        // A valid upload first in every submission: its image stays UNDEFINED when the
        // submission is refused (nothing was recorded or submitted).
        let valid = ImageCopyItem::buffer_to_image(view, &other, &[packed(full)]);
        let cases: Vec<(ImageCopyItem<'_>, Option<usize>, CopyRefusal)> = vec![
            (ImageCopyItem::buffer_to_image(view, &image, &[]), None, CopyRefusal::NoRegions),
            (
                ImageCopyItem::buffer_to_image(
                    view,
                    &image,
                    &[packed(full), packed(ImageArea::new(0, [1, 0, 0], [32, 16, 1]))],
                ),
                Some(1),
                CopyRefusal::OutsideMip { offset: [1, 0, 0], extent: [32, 16, 1], mip_extent: [32, 16, 1] },
            ),
            (
                ImageCopyItem::buffer_to_image(view, &image, &[packed(ImageArea::new(3, [0; 3], [1, 1, 1]))]),
                Some(0),
                CopyRefusal::NoSuchMip { mip: 3, mip_levels: 3 },
            ),
            (
                ImageCopyItem::buffer_to_image(view, &image, &[packed(full.with_layers(2, 2))]),
                Some(0),
                CopyRefusal::NoSuchLayers { base_layer: 2, layer_count: 2, array_layers: 3 },
            ),
            (
                ImageCopyItem::buffer_to_image(
                    view,
                    &image,
                    &[packed(ImageArea::new(0, [0; 3], [0, 16, 1]))],
                ),
                Some(0),
                CopyRefusal::EmptyRegion,
            ),
            (
                ImageCopyItem::buffer_to_image(view, &bc, &[packed(ImageArea::new(0, [2, 0, 0], [4, 4, 1]))]),
                Some(0),
                CopyRefusal::Misaligned { offset: [2, 0, 0], extent: [4, 4, 1], block: [4, 4] },
            ),
            (
                ImageCopyItem::buffer_to_image(
                    view,
                    &image,
                    &[BufferImageRegion { row_length: 31, ..packed(full) }],
                ),
                Some(0),
                CopyRefusal::RowLength { row_length: 31, width: 32 },
            ),
            (
                ImageCopyItem::buffer_to_image(
                    view,
                    &bc,
                    &[BufferImageRegion { row_length: 34, ..packed(full) }],
                ),
                Some(0),
                CopyRefusal::RowLength { row_length: 34, width: 32 },
            ),
            (
                ImageCopyItem::buffer_to_image(
                    view,
                    &image,
                    &[BufferImageRegion { image_height: 8, ..packed(full) }],
                ),
                Some(0),
                CopyRefusal::ImageHeight { image_height: 8, height: 16 },
            ),
            (
                ImageCopyItem::buffer_to_image(
                    view,
                    &image,
                    &[packed(full), BufferImageRegion::packed(4, full.with_layers(0, 3))],
                ),
                Some(1),
                CopyRefusal::BufferOutside { start: 4, end: Some(bytes as u64 + 4), size: bytes as u64 },
            ),
            (
                // Slices 2³² − 1 rows apart: the footprint is computed without overflow.
                ImageCopyItem::buffer_to_image(
                    view,
                    &image,
                    &[BufferImageRegion {
                        row_length: 536_870_911,
                        image_height: u32::MAX,
                        ..packed(full.with_layers(0, 2))
                    }],
                ),
                Some(0),
                CopyRefusal::BufferOutside {
                    start: 0,
                    end: Some(9_223_372_049_739_677_768),
                    size: bytes as u64,
                },
            ),
            (
                ImageCopyItem::buffer_to_image(
                    view,
                    &image,
                    &[BufferImageRegion::packed(6, ImageArea::new(0, [0; 3], [4, 4, 1]))],
                ),
                Some(0),
                CopyRefusal::BufferAlignment { offset: 6, alignment: 4 },
            ),
            (
                ImageCopyItem::buffer_to_image(
                    view,
                    &image,
                    &[BufferImageRegion {
                        row_length: u32::MAX,
                        image_height: u32::MAX,
                        ..packed(full.with_layers(0, 2))
                    }],
                ),
                Some(0),
                CopyRefusal::RowLength { row_length: u32::MAX, width: 32 },
            ),
            (
                ImageCopyItem::buffer_to_image(
                    view,
                    &image,
                    &[
                        packed(ImageArea::new(0, [0; 3], [8, 8, 1])),
                        packed(ImageArea::new(0, [4, 4, 0], [8, 8, 1])),
                    ],
                ),
                Some(1),
                CopyRefusal::Overlap { other: 0 },
            ),
            (
                ImageCopyItem::buffer_to_image(
                    view,
                    &sampled_only,
                    &[packed(ImageArea::new(0, [0; 3], [4, 4, 1]))],
                ),
                None,
                CopyRefusal::DestinationUsage,
            ),
            (
                ImageCopyItem::buffer_to_image(BufferView::whole(&dst_only), &image, &[packed(full)]),
                None,
                CopyRefusal::SourceUsage,
            ),
            (
                ImageCopyItem::image_to_buffer(&image, BufferView::whole(&src_only), &[packed(full)]),
                None,
                CopyRefusal::DestinationUsage,
            ),
            (
                ImageCopyItem::image_to_buffer(
                    &sampled_only,
                    view,
                    &[packed(ImageArea::new(0, [0; 3], [4, 4, 1]))],
                ),
                None,
                CopyRefusal::SourceUsage,
            ),
            (
                // Two regions writing the same bytes of the buffer.
                ImageCopyItem::image_to_buffer(
                    &image,
                    view,
                    &[packed(full), BufferImageRegion::packed(64, ImageArea::new(0, [0; 3], [4, 4, 1]))],
                ),
                Some(1),
                CopyRefusal::Overlap { other: 0 },
            ),
            (
                ImageCopyItem::images(&image, &wide, &[ImageCopyRegion::same_place(full)]),
                None,
                CopyRefusal::Formats { src: format, dst: Format::R16G16B16A16Float },
            ),
            (
                ImageCopyItem::images(&image, &bc, &[ImageCopyRegion::same_place(full)]),
                None,
                CopyRefusal::Formats { src: format, dst: Format::Bc1Unorm },
            ),
            (
                ImageCopyItem::images(
                    &sampled_only,
                    &image,
                    &[ImageCopyRegion::same_place(ImageArea::new(0, [0; 3], [4, 4, 1]))],
                ),
                None,
                CopyRefusal::SourceUsage,
            ),
            (
                // One image into itself: the destination overlaps the source.
                ImageCopyItem::images(
                    &image,
                    &image,
                    &[ImageCopyRegion {
                        src: ImageArea::new(0, [0; 3], [8, 8, 1]),
                        dst_mip: 0,
                        dst_base_layer: 0,
                        dst_offset: [4, 4, 0],
                    }],
                ),
                Some(0),
                CopyRefusal::Overlap { other: 0 },
            ),
            (
                ImageCopyItem::images(
                    &image,
                    &other,
                    &[ImageCopyRegion {
                        src: ImageArea::new(1, [0; 3], [16, 8, 1]),
                        dst_mip: 0,
                        dst_base_layer: 0,
                        dst_offset: [17, 0, 0],
                    }],
                ),
                Some(0),
                CopyRefusal::OutsideMip { offset: [17, 0, 0], extent: [16, 8, 1], mip_extent: [32, 16, 1] },
            ),
        ];
        for device in [d(0), d(1)] {
            for (item, region, why) in &cases {
                let items = [WorkItem::ImageCopy(&valid), WorkItem::Barrier, WorkItem::ImageCopy(item)];
                assert_eq!(refusal(&submitter, device, &items), (*region, why.clone()), "{device}: {why}");
                let layout = other.instance(device).unwrap().layout(0, 0);
                assert_eq!(layout, Some(vk::ImageLayout::UNDEFINED), "{device}: nothing was submitted");
            }
        }
        // An image not on device 1.
        let item = ImageCopyItem::images(&on_0, &image, &[ImageCopyRegion::same_place(full)]);
        let err = submitter.submit(d(1), &[WorkItem::ImageCopy(&item)]).unwrap_err();
        assert!(matches!(err, WorkError::NotOnDevice { device, .. } if device == d(1)), "{err}");
        // A same-image copy between places that do not overlap is accepted.
        let apart = ImageCopyItem::images(
            &image,
            &image,
            &[ImageCopyRegion {
                src: ImageArea::new(0, [0; 3], [8, 8, 1]),
                dst_mip: 0,
                dst_base_layer: 0,
                dst_offset: [8, 8, 0],
            }],
        );
        for device in [d(0), d(1)] {
            let s = submitter
                .submit(device, &[WorkItem::ImageCopy(&valid), WorkItem::ImageCopy(&apart)])
                .unwrap();
            submitter.wait(device, s).unwrap();
            assert_eq!(other.instance(device).unwrap().layout(0, 0), Some(vk::ImageLayout::GENERAL));
        }
        submitter.destroy();
    });
}

#[test]
fn copies_of_3d_images_move_depth_slices_on_both_devices_as_the_model_does() {
    use residency_vulkan::ImageDimension;
    with_gpu(|set| {
        let format = Format::R8G8B8A8Unorm;
        let extent = [8, 8, 4];
        let volume = |name: &str| {
            let usage = ImageUsage::COPY_SRC | ImageUsage::COPY_DST;
            let mut desc = ImageDesc::new_2d(name, format, extent[0], extent[1], usage).with_mip_levels(2);
            desc.dimension = ImageDimension::D3;
            desc.extent = extent;
            MultiImage::create(set, both(), &desc).unwrap()
        };
        let (src, dst) = (volume("volume source"), volume("volume destination"));
        // Mip 0 in rows of 10 texels and slices of 9 rows; mip 1 packed after it; the destination
        // packed from one background buffer.
        let mip0 = ImageArea::new(0, [0; 3], extent);
        let mip1 = ImageArea::new(1, [0; 3], [4, 4, 2]);
        let padded = BufferImageRegion { buffer_offset: 0, row_length: 10, image_height: 9, image: mip0 };
        let upload = [padded, BufferImageRegion::packed(10 * 9 * 4 * 4, mip1)];
        let upload_bytes = 10 * 9 * 4 * 4 + 4 * 4 * 2 * 4;
        let background = [BufferImageRegion::packed(0, mip0), BufferImageRegion::packed(8 * 8 * 4 * 4, mip1)];
        let volume_bytes = 8 * 8 * 4 * 4 + 4 * 4 * 2 * 4;
        let copies = [
            ImageCopyRegion {
                src: ImageArea::new(0, [2, 2, 1], [4, 4, 2]),
                dst_mip: 0,
                dst_base_layer: 0,
                dst_offset: [4, 0, 2],
            },
            ImageCopyRegion { src: mip1, dst_mip: 0, dst_base_layer: 0, dst_offset: [0, 4, 0] },
        ];

        let mut src_model = Model::new(format, extent, 2, 1);
        let mut dst_model = Model::new(format, extent, 2, 1);
        let texels = pattern(upload_bytes, 20);
        let fill = pattern(volume_bytes, 21);
        upload.iter().for_each(|r| src_model.write_from(&texels, r));
        background.iter().for_each(|r| dst_model.write_from(&fill, r));
        copies.iter().for_each(|r| Model::copy(&src_model, &mut dst_model, r));
        let mut expected = vec![0; volume_bytes];
        background.iter().for_each(|r| dst_model.read_into(&mut expected, r));

        let texel_buffer = buffer(set, both(), "volume texels", upload_bytes);
        let fill_buffer = buffer(set, both(), "volume background", volume_bytes);
        let read = buffer(set, both(), "volume read back", volume_bytes);
        let uploader = MultiUploader::new(set, both(), 1 << 20).unwrap();
        uploader.broadcast(&texel_buffer, 0, &texels).unwrap();
        uploader.broadcast(&fill_buffer, 0, &fill).unwrap();
        uploader.wait_idle().unwrap();
        let up = ImageCopyItem::buffer_to_image(BufferView::whole(&texel_buffer), &src, &upload);
        let bg = ImageCopyItem::buffer_to_image(BufferView::whole(&fill_buffer), &dst, &background);
        let copy = ImageCopyItem::images(&src, &dst, &copies);
        let back = ImageCopyItem::image_to_buffer(&dst, BufferView::whole(&read), &background);
        let items = [
            WorkItem::ImageCopy(&up),
            WorkItem::ImageCopy(&bg),
            WorkItem::Barrier,
            WorkItem::ImageCopy(&copy),
            WorkItem::Barrier,
            WorkItem::ImageCopy(&back),
        ];
        let submitter = MultiSubmitter::new(set, both()).unwrap();
        for index in [d(0), d(1)] {
            let submission = submitter.submit(index, &items).unwrap();
            submitter.wait(index, submission).unwrap();
            let got =
                set.device(index).unwrap().read_back(read.instance(index).unwrap(), 0, volume_bytes as u64);
            assert!(got.unwrap() == expected, "{index}: the volume's texels are the model's");
        }
        // A 3D image has one layer, and a box ends inside the mip's depth.
        let layers =
            ImageCopyItem::images(&src, &dst, &[ImageCopyRegion::same_place(mip1.with_layers(0, 2))]);
        let (region, why) = refusal(&submitter, d(1), &[WorkItem::ImageCopy(&layers)]);
        assert_eq!(
            (region, why),
            (Some(0), CopyRefusal::NoSuchLayers { base_layer: 0, layer_count: 2, array_layers: 1 })
        );
        let deep = ImageCopyItem::images(
            &src,
            &dst,
            &[ImageCopyRegion::same_place(ImageArea::new(1, [0, 0, 1], [4, 4, 2]))],
        );
        let (region, why) = refusal(&submitter, d(0), &[WorkItem::ImageCopy(&deep)]);
        assert_eq!(
            (region, why),
            (
                Some(0),
                CopyRefusal::OutsideMip { offset: [0, 0, 1], extent: [4, 4, 2], mip_extent: [4, 4, 2] }
            )
        );
        // A volume and a 2D image are not copied between.
        let flat = MultiImage::create(set, both(), &image_desc("flat", format)).unwrap();
        let across = ImageCopyItem::images(
            &src,
            &flat,
            &[ImageCopyRegion::same_place(ImageArea::new(0, [0; 3], [4, 4, 1]))],
        );
        assert_eq!(
            refusal(&submitter, d(1), &[WorkItem::ImageCopy(&across)]),
            (None, CopyRefusal::Dimensions)
        );
        submitter.destroy();
        uploader.destroy().unwrap();
    });
}

#[test]
fn a_broadcast_image_copied_then_sampled_in_one_submission_reads_the_broadcast_texels_on_each_device() {
    use residency_vulkan::compute::Binding;
    use residency_vulkan::multi::work::{DispatchItem, MultiBinding, MultiComputeProgram, PerDeviceImage};
    use residency_vulkan::{shaders, Filter};
    with_gpu(|set| {
        const COUNT: u32 = 64 * 64;
        let format = Format::R8G8B8A8Unorm;
        let usage = ImageUsage::COPY_SRC | ImageUsage::COPY_DST | ImageUsage::SAMPLED;
        let source =
            MultiImage::create(set, both(), &ImageDesc::new_2d("sampled source", format, 64, 64, usage))
                .unwrap();
        let target =
            MultiImage::create(set, both(), &ImageDesc::new_2d("sampled copy", format, 64, 64, usage))
                .unwrap();
        let texels = pattern(COUNT as usize * 4, 30);
        source.broadcast(ImageArea::new(0, [0; 3], [64, 64, 1]), &texels).unwrap();

        let program =
            MultiComputeProgram::new(set, both(), "sampled copy", &shaders::SAMPLE_TEXELS, 2).unwrap();
        let views: Vec<_> = [d(0), d(1)].map(|i| (i, target.view(set, i, 0..1).unwrap())).to_vec();
        let samplers: Vec<_> = views
            .iter()
            .map(|(i, _)| set.device(*i).unwrap().create_sampler(Filter::Nearest).unwrap())
            .collect();
        let bound = views
            .iter()
            .zip(&samplers)
            .map(|((i, v), s)| (*i, Binding::sampled(&**v, s, vk::ImageLayout::GENERAL)))
            .collect();
        let usage = BufferUsage::STORAGE | BufferUsage::COPY_SRC;
        let out = MultiBuffer::create(set, both(), &BufferDesc::new("samples", u64::from(COUNT) * 16, usage))
            .unwrap();
        let push: Vec<u8> = [COUNT, 64].iter().flat_map(|v| v.to_le_bytes()).collect();
        let dispatch = DispatchItem::new(
            &program,
            vec![
                MultiBinding::Image(PerDeviceImage { views: bound }),
                MultiBinding::Buffer(BufferView::whole(&out)),
            ],
            &push,
            [COUNT / 64, 1, 1],
        );
        // The copy moves the target from UNDEFINED to GENERAL, where the dispatch samples it.
        let copy = ImageCopyItem::images(
            &source,
            &target,
            &[ImageCopyRegion::same_place(ImageArea::new(0, [0; 3], [64, 64, 1]))],
        );
        let submitter = MultiSubmitter::new(set, both()).unwrap();
        for index in [d(0), d(1)] {
            let items = [WorkItem::ImageCopy(&copy), WorkItem::Barrier, WorkItem::Dispatch(&dispatch)];
            let submission = submitter.submit(index, &items).unwrap();
            submitter.wait(index, submission).unwrap();
            let bytes =
                set.device(index).unwrap().read_back(out.instance(index).unwrap(), 0, u64::from(COUNT) * 16);
            let samples: Vec<u8> = bytes
                .unwrap()
                .chunks_exact(4)
                .map(|f| (f32::from_le_bytes([f[0], f[1], f[2], f[3]]) * 255.0).round() as u8)
                .collect();
            assert!(samples == texels, "{index}: the sampled copy holds the broadcast texels");
        }
        submitter.destroy();
    });
}
