//! Mapping a multi-device buffer (the seed's `BufferMapRequest` / `BufferMapResponse`): a range
//! of a [`MultiBuffer`] read or written on a chosen subset of its mask, each device's copy made
//! coherent with the host.
//!
//! A map first waits, on every chosen device, for the GPU work that may use the buffer there
//! (residency's submissions and the renderer's uses declared on the instance), then reads each
//! chosen device's bytes: through the mapping where the instance is host-visible (invalidating
//! non-coherent memory), else through a copy into a read-back buffer. A write map
//! ([`MultiBuffer::map_write`]) hands out those bytes per device to change; [`BufferMapping::unmap`]
//! writes each changed device's bytes back: through the mapping (flushing non-coherent memory),
//! else staged through the device's [`Uploader`](crate::sync::upload::Uploader) and waited for.
//!
//! All or nothing: a mask outside the buffer's ([`MultiDeviceError::MaskNotSubset`]), a range
//! outside it ([`MapError::Range`]), or a device where the map cannot be made (no path to its
//! memory, no uploader there) is refused before anything is read or written on any device; a
//! write that fails on one device during `unmap` writes the bytes read at map time back to the
//! devices already written, so no device keeps the new bytes. A mapping dropped without `unmap`
//! writes nothing.

use crate::device::life::GpuUse;
use crate::device::set::DeviceSet;
use crate::error::{ErrorClass, ResidencyError, VulkanError};
use crate::multi::{
    device_count, resolve_mask, MultiBuffer, MultiDevice, MultiDeviceError, MultiUploader, PerDevice,
};
use crate::resources::buffer::{AccessError, Buffer};
use crate::sync::commands::ReadBackError;
use crate::sync::upload::UploadError;
use residency_core::device_mask::{DeviceIndex, DeviceMask};
use residency_core::usage::BufferUsage;

/// What to map: `size` bytes from `offset` of the buffer on the devices of `mask` (within the
/// buffer's; [`DeviceMask::ALL`]: the buffer's; bits of devices the set does not have are
/// ignored, as [`resolve_mask`] reads it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BufferMapRequest {
    /// The devices.
    pub mask: DeviceMask,
    /// Bytes into the buffer.
    pub offset: u64,
    /// Bytes to map.
    pub size: u64,
}

impl BufferMapRequest {
    /// The whole of a buffer of `size` bytes on the devices of `mask`.
    pub fn whole(mask: DeviceMask, size: u64) -> Self {
        BufferMapRequest { mask, offset: 0, size }
    }
}

/// A map was refused on a device, or reading or writing its copy failed.
#[derive(Debug, thiserror::Error)]
pub enum MapError {
    /// The range is empty or not inside the buffer.
    #[error("a map of {size} B at {offset} of `{name}` is empty or outside its {buffer_size} B")]
    Range {
        /// The buffer.
        name: String,
        /// The request's offset.
        offset: u64,
        /// The request's size.
        size: u64,
        /// The buffer's size.
        buffer_size: u64,
    },
    /// The instance's memory cannot be reached from the host on this device: it is not
    /// host-visible and lacks the copy usage a staged read (`COPY_SRC`) or write (`COPY_DST`)
    /// needs, or a staged write has no uploader on the device.
    #[error("`{name}` cannot be mapped here: {reason}")]
    NoPath {
        /// The buffer.
        name: String,
        /// Why.
        reason: &'static str,
    },
    /// Waiting for the GPU work that uses the buffer failed.
    #[error(transparent)]
    Vulkan(#[from] VulkanError),
    /// Reading or writing the mapped bytes failed.
    #[error(transparent)]
    Access(#[from] AccessError),
    /// A staged read failed.
    #[error(transparent)]
    ReadBack(#[from] ReadBackError),
    /// A staged write failed.
    #[error(transparent)]
    Upload(#[from] UploadError),
}

impl ResidencyError for MapError {
    fn class(&self) -> ErrorClass {
        match self {
            MapError::Vulkan(e) => e.class(),
            MapError::Access(e) => e.class(),
            MapError::ReadBack(e) => e.class(),
            MapError::Upload(e) => e.class(),
            MapError::Range { .. } | MapError::NoPath { .. } => ErrorClass::Refused,
        }
    }
}

/// The bytes a read map returned: each chosen device's copy of the requested range.
#[derive(Debug)]
pub struct BufferMapResponse {
    offset: u64,
    data: PerDevice<Vec<u8>>,
}

impl BufferMapResponse {
    /// The bytes of `device` (`None`: not a device of the request).
    pub fn data(&self, device: DeviceIndex) -> Option<&[u8]> {
        self.data.get(device).map(Vec::as_slice)
    }

    /// The devices read.
    pub fn devices(&self) -> DeviceMask {
        self.data.mask()
    }

    /// Bytes into the buffer where the data starts.
    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// Every (device, bytes), lowest device first.
    pub fn into_data(self) -> impl Iterator<Item = (DeviceIndex, Vec<u8>)> {
        self.data.into_values()
    }
}

/// A write map of a [`MultiBuffer`]: each chosen device's bytes of the range, to change in place
/// ([`BufferMapping::data_mut`]) and write back with [`BufferMapping::unmap`]. It holds the
/// buffer exclusively, so no work can be recorded against the buffer while it lives. Dropped
/// without `unmap`, it writes nothing.
#[derive(Debug)]
pub struct BufferMapping<'b> {
    buffer: &'b mut MultiBuffer,
    uploader: Option<&'b MultiUploader>,
    offset: u64,
    /// Per device: the bytes read at map time, the bytes to write, and whether they were handed
    /// out mutably.
    data: PerDevice<(Vec<u8>, Vec<u8>, bool)>,
}

impl BufferMapping<'_> {
    /// The bytes of `device` as they are now in the mapping.
    pub fn data(&self, device: DeviceIndex) -> Option<&[u8]> {
        self.data.get(device).map(|(_, now, _)| now.as_slice())
    }

    /// The bytes of `device`, to change (written back by [`BufferMapping::unmap`]).
    pub fn data_mut(&mut self, device: DeviceIndex) -> Option<&mut [u8]> {
        self.data.get_mut(device).map(|(_, now, touched)| {
            *touched = true;
            now.as_mut_slice()
        })
    }

    /// The devices mapped.
    pub fn devices(&self) -> DeviceMask {
        self.data.mask()
    }

    /// Bytes into the buffer where the mapped range starts.
    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// Writes every device's changed bytes back to its copy (lowest device first). If a write
    /// fails on one device, the bytes read at map time are written back to the devices already
    /// written and the error names the failing device (what a failure of that restoring write
    /// itself, such as a lost device, leaves there cannot be undone).
    pub fn unmap(self) -> Result<(), MultiDeviceError<MapError>> {
        let BufferMapping { buffer, uploader, offset, data } = self;
        let mut written: Vec<DeviceIndex> = Vec::new();
        for (device, (_, now, touched)) in data.iter() {
            if !touched {
                continue;
            }
            let instance = buffer.instances.get_mut(device).expect("mapped devices are the buffer's");
            if let Err(source) = write_instance(instance, uploader, device, offset, now) {
                for &done in &written {
                    let (before, ..) = data.get(done).expect("written devices are mapped");
                    let instance = buffer.instances.get_mut(done).expect("written devices are the buffer's");
                    if let Err(e) = write_instance(instance, uploader, done, offset, before) {
                        tracing::warn!(%done, error = %e, "unmap: restoring the bytes of a device failed");
                    }
                }
                return Err(MultiDeviceError::Failed { device, source });
            }
            written.push(device);
        }
        Ok(())
    }
}

/// Waits for the GPU work that may use `buffer` on its device: every residency submission so
/// far, and the renderer's uses declared on it.
fn wait_for_uses(buffer: &Buffer) -> Result<(), MapError> {
    let device = buffer.device();
    device.wait_submitted()?;
    for &point in buffer.life().declared_uses().points() {
        device.wait_until(&GpuUse { device: device.uid(), point })?;
    }
    Ok(())
}

/// Reads `size` bytes at `offset` of `buffer`: through the mapping, or a staged copy.
fn read_instance(buffer: &Buffer, offset: u64, size: u64) -> Result<Vec<u8>, MapError> {
    if buffer.is_mappable() {
        let mut out = vec![0u8; size as usize];
        buffer.read(offset, &mut out)?;
        Ok(out)
    } else {
        Ok(buffer.device().read_back(buffer, offset, size)?)
    }
}

/// Writes `data` at `offset` of `buffer`: through the mapping, or staged through the device's
/// uploader and waited for.
fn write_instance(
    buffer: &mut Buffer,
    uploader: Option<&MultiUploader>,
    device: DeviceIndex,
    offset: u64,
    data: &[u8],
) -> Result<(), MapError> {
    if buffer.is_mappable() {
        buffer.write(offset, data)?;
        return Ok(());
    }
    let uploader = uploader.and_then(|u| u.uploaders.get(device)).ok_or_else(|| MapError::NoPath {
        name: buffer.name().to_owned(),
        reason: "a staged write needs an uploader on the device",
    })?;
    uploader.write_buffer(buffer, offset, data)?;
    uploader.wait_idle()?;
    Ok(())
}

impl MultiBuffer {
    /// The devices of `request` and the range, checked on each: the mask within the buffer's,
    /// the range inside each instance, and a path from the host to each instance's memory
    /// (host-visible, or the copy usage of a staged read, or of a staged write with an uploader
    /// on the device when `write`). Changes nothing.
    fn check_map(
        &self,
        set: &DeviceSet,
        request: &BufferMapRequest,
        write: Option<Option<&MultiUploader>>,
    ) -> Result<Vec<DeviceIndex>, MultiDeviceError<MapError>> {
        let mask = resolve_mask(request.mask, self.mask(), device_count(set))?;
        let mut devices = Vec::new();
        for (device, buffer) in self.iter().filter(|(i, _)| mask.contains(*i)) {
            let failed = |source| MultiDeviceError::Failed { device, source };
            let size = buffer.size();
            if request.size == 0 || request.offset.checked_add(request.size).is_none_or(|end| end > size) {
                return Err(failed(MapError::Range {
                    name: buffer.name().to_owned(),
                    offset: request.offset,
                    size: request.size,
                    buffer_size: size,
                }));
            }
            if !buffer.is_mappable() {
                let no_path = |reason| failed(MapError::NoPath { name: buffer.name().to_owned(), reason });
                if !buffer.usage().contains(BufferUsage::COPY_SRC) {
                    return Err(no_path("not host-visible, and without COPY_SRC usage for a staged read"));
                }
                if let Some(uploader) = write {
                    if !buffer.usage().contains(BufferUsage::COPY_DST) {
                        return Err(no_path(
                            "not host-visible, and without COPY_DST usage for a staged write",
                        ));
                    }
                    if uploader.and_then(|u| u.uploaders.get(device)).is_none() {
                        return Err(no_path(
                            "not host-visible, and no uploader on the device for a staged write",
                        ));
                    }
                }
            }
            devices.push(device);
        }
        Ok(devices)
    }

    /// Reads the range of each chosen device's copy after waiting for the GPU work that may use
    /// it (see [`crate::multi::map`]): the seed's map for read. Refused before anything is read
    /// on any device: a mask outside the buffer's, a range outside it, a device whose copy the
    /// host cannot reach.
    ///
    /// It takes the buffer exclusively (`&mut`, as [`MultiBuffer::map_write`]): no other thread
    /// can describe or submit work over the buffer between the wait and the read, so the bytes
    /// are the ones all work submitted before the call left. (The instance's
    /// [`Buffer::read`] waits for nothing and may return bytes torn by a GPU write in flight.)
    pub fn map_read(
        &mut self,
        set: &DeviceSet,
        request: &BufferMapRequest,
    ) -> Result<BufferMapResponse, MultiDeviceError<MapError>> {
        let devices = self.check_map(set, request, None)?;
        let mut data = PerDevice::default();
        for device in devices {
            let failed = |source| MultiDeviceError::Failed { device, source };
            let buffer = self.instances.get(device).expect("checked devices are the buffer's");
            wait_for_uses(buffer).map_err(failed)?;
            data.insert(device, read_instance(buffer, request.offset, request.size).map_err(failed)?);
        }
        Ok(BufferMapResponse { offset: request.offset, data })
    }

    /// Maps the range of each chosen device's copy for writing: waits for the GPU work that may
    /// use it, reads its bytes, and returns a [`BufferMapping`] whose [`BufferMapping::unmap`]
    /// writes the changed devices' bytes back. `uploader` stages writes to copies that are not
    /// host-visible (`None`: every chosen copy must be host-visible). Refused before anything is
    /// read or written: a mask outside the buffer's, a range outside it, a device whose copy
    /// the host cannot reach either way.
    pub fn map_write<'b>(
        &'b mut self,
        set: &DeviceSet,
        uploader: Option<&'b MultiUploader>,
        request: &BufferMapRequest,
    ) -> Result<BufferMapping<'b>, MultiDeviceError<MapError>> {
        let devices = self.check_map(set, request, Some(uploader))?;
        let mut data = PerDevice::default();
        for device in devices {
            let failed = |source| MultiDeviceError::Failed { device, source };
            let buffer = self.instances.get(device).expect("checked devices are the buffer's");
            wait_for_uses(buffer).map_err(failed)?;
            let before = read_instance(buffer, request.offset, request.size).map_err(failed)?;
            data.insert(device, (before.clone(), before, false));
        }
        Ok(BufferMapping { buffer: self, uploader, offset: request.offset, data })
    }
}
