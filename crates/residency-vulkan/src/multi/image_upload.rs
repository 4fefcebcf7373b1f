//! A broadcast upload for [`MultiImage`]: the same texels into one area of every instance, all or
//! nothing ([`MultiImage::broadcast`]).

use crate::device::Device;
use crate::error::VulkanError;
use crate::multi::copy::{to_general, ImageArea};
use crate::multi::{fan_out, MultiDeviceError, MultiImage};
use crate::resources::buffer::{Buffer, BufferDesc};
use crate::resources::image::Image;
use crate::sync::commands::{CommandContext, Submission};
use crate::sync::recording::Recording;
use crate::sync::upload::{ImageRegion, UploadError};
use ash::vk;
use residency_core::device_mask::DeviceIndex;
use residency_core::memory::MemoryIntent;
use residency_core::usage::{BufferUsage, ImageUsage};
use std::sync::Arc;

/// What a broadcast holds on one device: the instance, a command context, the staging buffer with
/// the texels, and (on a broadcast to several devices) the buffer the old texels are copied to.
struct Target<'i> {
    index: DeviceIndex,
    image: &'i Image,
    context: CommandContext,
    staging: Buffer,
    backup: Option<Buffer>,
}

type UploadResult<T> = Result<T, MultiDeviceError<UploadError>>;

impl MultiImage {
    /// Uploads `data` — the texel blocks of `area`, tightly packed, rows then depth slices then
    /// layers — into `area` of every instance, and waits until it has landed. All or nothing: on
    /// an error no instance's texels have changed, and the error names the device that failed.
    ///
    /// Checked on every device before anything is created or staged on any: the area inside the
    /// instance (mip, layers, box, a compressed format's block alignment:
    /// [`UploadError::RegionOutsideImage`], [`UploadError::RegionMisaligned`]), a format with a
    /// known texel size and one sample, `COPY_DST` usage ([`UploadError::NotCopyDestination`]),
    /// `data` of the area's size ([`UploadError::WrongSize`]) and, for an image on more than one
    /// device, `COPY_SRC` usage ([`UploadError::NotCopySource`]: the old texels are read back to
    /// undo a device's copy).
    ///
    /// Each device gets a staging buffer of its own with the texels (one host write per device)
    /// and one copy into its instance, submitted device by device; with several devices the same
    /// submission first copies the area's old texels into a buffer on that device. If a device
    /// then fails (its buffers, a submission, a wait), the devices whose copies were submitted get
    /// their old texels copied back, and are waited for, before the error returns. (Undoing
    /// itself needs a working device: on a device that is lost, its texels are undefined anyway.
    /// An image on one device keeps no old texels: there a failed wait, after the submission was
    /// made, leaves the copy to land.)
    /// The area's subresources are left in `GENERAL`, moved there from the layout the image's
    /// record says they are in.
    pub fn broadcast(&self, area: ImageArea, data: &[u8]) -> UploadResult<()> {
        let several = self.images.len() > 1;
        let mut bytes = 0;
        for (index, image) in self.images.iter() {
            let failed = |source| MultiDeviceError::Failed { device: index, source };
            bytes = check(image, &area, data.len() as u64, several).map_err(failed)?;
        }
        if bytes == 0 {
            return Ok(());
        }
        let devices: Vec<&Arc<Device>> = self.images.iter().map(|(_, image)| image.device()).collect();
        let targets: Vec<Target<'_>> = fan_out(&devices, |device| {
            let image = self.images.get(device.index()).expect("a device of the image");
            prepare(device, image, bytes, data, several)
        })?
        .into_values()
        .map(|(_, t)| t)
        .collect();
        // Submitted device by device; a failure undoes the devices before it.
        let mut submitted: Vec<(&Target<'_>, Submission)> = Vec::with_capacity(targets.len());
        for target in &targets {
            let recorded = target.context.submit(&[], |rec| record_write(rec, target, &area));
            match recorded {
                Ok(submission) => submitted.push((target, submission)),
                Err(source) => {
                    undo(&submitted, &area);
                    return Err(MultiDeviceError::Failed { device: target.index, source: source.into() });
                }
            }
        }
        let mut failure = None;
        for (target, submission) in &submitted {
            if let Err(source) = target.context.wait_for(submission) {
                failure = Some(MultiDeviceError::Failed { device: target.index, source: source.into() });
                break;
            }
        }
        if let Some(failure) = failure {
            undo(&submitted, &area);
            return Err(failure);
        }
        Ok(())
    }
}

/// The checks of [`MultiImage::broadcast`] on one instance; returns the area's bytes.
fn check(image: &Image, area: &ImageArea, len: u64, several: bool) -> Result<u64, UploadError> {
    let name = || image.name().to_owned();
    let usage = image.desc().usage;
    if !usage.contains(ImageUsage::COPY_DST) {
        return Err(UploadError::NotCopyDestination { name: name() });
    }
    if several && !usage.contains(ImageUsage::COPY_SRC) {
        return Err(UploadError::NotCopySource { name: name() });
    }
    let region = |layer| ImageRegion::new(image, area.mip, area.offset, area.extent).with_layer(layer);
    let end = area.base_layer.checked_add(area.layer_count).filter(|_| area.layer_count > 0);
    let Some(end) = end else {
        let d = image.desc();
        return Err(UploadError::RegionOutsideImage {
            name: name(),
            mip: area.mip,
            layer: area.base_layer,
            offset: area.offset,
            extent: area.extent,
            mip_extent: [0; 3],
            mip_levels: d.mip_levels,
            array_layers: d.array_layers,
        });
    };
    // The checks of an upload into each layer (the mip, the layer, the box, block alignment, a
    // known texel size, one sample, one aspect).
    region(area.base_layer).check()?;
    region(end - 1).check()?;
    let per_layer = region(area.base_layer).bytes();
    let expected = per_layer.saturating_mul(u64::from(area.layer_count));
    if len != expected {
        return Err(UploadError::WrongSize { name: name(), expected, got: len });
    }
    Ok(expected)
}

/// The buffers and command context of one device, the texels written into its staging buffer.
fn prepare<'i>(
    device: &Arc<Device>,
    image: &'i Image,
    bytes: u64,
    data: &[u8],
    several: bool,
) -> Result<Target<'i>, UploadError> {
    let name = image.name();
    let context = CommandContext::new(device, &format!("{name} broadcast"))?;
    let desc = BufferDesc::new(format!("{name} broadcast staging"), bytes, BufferUsage::COPY_SRC)
        .with_intent(MemoryIntent::Upload);
    let mut staging = device.create_buffer(&desc)?;
    staging.write(0, data).map_err(|e| match e {
        crate::resources::buffer::AccessError::Vulkan(e) => UploadError::Vulkan(e),
        other => UploadError::Vulkan(VulkanError::Unsupported {
            device: device.name().to_owned(),
            reason: other.to_string(),
        }),
    })?;
    let backup = if several {
        let usage = BufferUsage::COPY_SRC | BufferUsage::COPY_DST;
        Some(device.create_buffer(&BufferDesc::new(format!("{name} broadcast undo"), bytes, usage))?)
    } else {
        None
    };
    Ok(Target { index: device.index(), image, context, staging, backup })
}

/// The area's copy between `buffer` (tightly packed from its start) and the image.
fn region(image: &Image, buffer: &Buffer, area: &ImageArea) -> vk::BufferImageCopy {
    let mut copy = ImageRegion::new(image, area.mip, area.offset, area.extent)
        .with_layer(area.base_layer)
        .buffer_image_copy(buffer.offset());
    copy.image_subresource.layer_count = area.layer_count;
    copy
}

/// Records a memory barrier from `src` to `dst`.
fn barrier(
    rec: &mut Recording<'_>,
    (src_stage, src_access): (vk::PipelineStageFlags2, vk::AccessFlags2),
    (dst_stage, dst_access): (vk::PipelineStageFlags2, vk::AccessFlags2),
) {
    let barrier = [vk::MemoryBarrier2::default()
        .src_stage_mask(src_stage)
        .src_access_mask(src_access)
        .dst_stage_mask(dst_stage)
        .dst_access_mask(dst_access)];
    // SAFETY: `rec` is recording on its device outside a render pass; core stages of the
    // universal queue, each access one its side's stages perform; the barrier lives for the call.
    unsafe {
        rec.device()
            .raw()
            .cmd_pipeline_barrier2(rec.raw(), &vk::DependencyInfo::default().memory_barriers(&barrier))
    };
    rec.recorded();
}

/// The area's subresources as (image, mip, layer).
fn subresources<'i>(image: &'i Image, area: &ImageArea) -> Vec<(&'i Image, u32, u32)> {
    (area.base_layer..area.base_layer + area.layer_count).map(|layer| (image, area.mip, layer)).collect()
}

/// Records one device's broadcast: the area to `GENERAL`, its old texels into the backup buffer
/// (when there is one), the staged texels into the image, and a barrier making them visible to
/// later work.
fn record_write(rec: &mut Recording<'_>, t: &Target<'_>, area: &ImageArea) {
    use vk::{AccessFlags2 as A, ImageLayout as L, PipelineStageFlags2 as S};
    let any = (S::ALL_COMMANDS, A::MEMORY_READ | A::MEMORY_WRITE);
    let copy = (S::COPY, A::TRANSFER_READ | A::TRANSFER_WRITE);
    to_general(rec, &subresources(t.image, area), copy);
    barrier(rec, any, copy);
    rec.keep(t.staging.life());
    let raw = rec.device().raw();
    if let Some(backup) = &t.backup {
        rec.keep(backup.life());
        // SAFETY: `rec` is recording on the device of the image and the backup buffer (both made
        // on it), outside a render pass; the image has COPY_SRC usage and the buffer COPY_DST, the
        // area lies inside the image (checked before anything was made) and the buffer holds
        // exactly its bytes; the subresources are in GENERAL when the copy runs (`to_general`).
        unsafe {
            raw.cmd_copy_image_to_buffer(
                rec.raw(),
                t.image.raw(),
                L::GENERAL,
                backup.raw(),
                &[region(t.image, backup, area)],
            )
        };
        rec.recorded();
        barrier(rec, (S::COPY, A::TRANSFER_READ), (S::COPY, A::TRANSFER_WRITE));
    }
    // SAFETY: as above, with the staging buffer (COPY_SRC, holding exactly the area's bytes) as
    // the source and the image (COPY_DST) as the destination.
    unsafe {
        raw.cmd_copy_buffer_to_image(
            rec.raw(),
            t.staging.raw(),
            t.image.raw(),
            L::GENERAL,
            &[region(t.image, &t.staging, area)],
        )
    };
    rec.recorded();
    barrier(rec, (S::COPY, A::TRANSFER_WRITE), any);
}

/// Copies the old texels back on every device of `submitted` (after its broadcast copy, in queue
/// order) and waits. What fails here is logged: the device's texels are then the broadcast's.
fn undo(submitted: &[(&Target<'_>, Submission)], area: &ImageArea) {
    use vk::{AccessFlags2 as A, PipelineStageFlags2 as S};
    let mut restores = Vec::with_capacity(submitted.len());
    for (t, _) in submitted {
        let Some(backup) = &t.backup else { continue };
        let restored = t.context.submit(&[], |rec| {
            let any = (S::ALL_COMMANDS, A::MEMORY_READ | A::MEMORY_WRITE);
            let copy = (S::COPY, A::TRANSFER_READ | A::TRANSFER_WRITE);
            to_general(rec, &subresources(t.image, area), copy);
            barrier(rec, any, copy);
            rec.keep(backup.life());
            // SAFETY: as in `record_write`, from the backup buffer (COPY_SRC, holding the area's
            // old texels) into the image (COPY_DST), whose subresources are in GENERAL.
            unsafe {
                rec.device().raw().cmd_copy_buffer_to_image(
                    rec.raw(),
                    backup.raw(),
                    t.image.raw(),
                    vk::ImageLayout::GENERAL,
                    &[region(t.image, backup, area)],
                )
            };
            rec.recorded();
            barrier(rec, (S::COPY, A::TRANSFER_WRITE), any);
        });
        match restored {
            Ok(submission) => restores.push((t, submission)),
            Err(e) => tracing::warn!(image = %t.image.name(), device = %t.index, error = %e,
                "a broadcast could not undo its copy on a device"),
        }
    }
    for (t, submission) in restores {
        if let Err(e) = t.context.wait(submission) {
            tracing::warn!(image = %t.image.name(), device = %t.index, error = %e,
                "waiting for a broadcast's undo failed");
        }
    }
}
