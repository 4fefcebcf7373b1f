//! Residency's buffers and images imported into wgpu, their lifetimes tied together.
//!
//! wgpu-hal wraps the residency `VkBuffer` / `VkImage` as *externally owned*
//! (`Buffer::from_raw_externally_owned`, `Device::texture_from_raw` with `TextureMemory::External`):
//! wgpu never destroys them, and its drop callback, which wgpu-core runs only once every wgpu
//! submission that used the resource has completed (its deferred destruction), releases a
//! reference to the residency resource. Residency's own `Life` then retires it behind residency's
//! submissions and declared uses. So neither side frees under the other, whichever is dropped
//! first.

use crate::open::{Bridge, QueueSharing};
use ash::vk;
use residency_vulkan::format_map::vk_buffer_usage;
use residency_vulkan::{
    Buffer, BufferPlacement, ErrorClass, Image, ImageDimension, ImageUsage, ResidencyError,
};
use std::sync::Arc;
use wgpu::hal::api::Vulkan;

/// Why an import was refused; the resource comes back unchanged.
#[derive(Debug, thiserror::Error)]
#[error("{reason}")]
pub struct ImportError<T: std::fmt::Debug> {
    /// What is wrong.
    pub reason: ImportReason,
    /// The resource, unchanged.
    pub resource: Box<T>,
}

impl<T: std::fmt::Debug> ResidencyError for ImportError<T> {
    fn class(&self) -> ErrorClass {
        match self.reason {
            ImportReason::Residency(_) => ErrorClass::DeviceLost,
            _ => ErrorClass::Refused,
        }
    }
}

/// What is wrong with a resource to import.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ImportReason {
    /// It belongs to another residency device than the bridge's.
    #[error("it belongs to another device than the bridge's")]
    ForeignDevice,
    /// A range of a known-flags pool page has no `VkBuffer` of its own (use a pool of
    /// `BufferPoolUsage::Unknown`, whose buffers are placed, or `Device::create_buffer`).
    #[error("a range of a pool page has no VkBuffer of its own")]
    Range,
    /// Empty buffers cannot be wrapped.
    #[error("a buffer of size 0")]
    Empty,
    /// wgpu would use it in ways its Vulkan usage does not allow (the flags missing).
    #[error("its Vulkan usage lacks {0}")]
    Usage(String),
    /// wgpu cannot map an imported buffer (`MAP_READ` / `MAP_WRITE`), nor use it for ray tracing.
    #[error("wgpu cannot use an imported buffer with {0:?}")]
    Unsupported(wgpu::BufferUsages),
    /// The wgpu format is not the image's Vulkan format.
    #[error("the wgpu format {wgpu:?} is {mapped:?} in Vulkan, the image is {image:?}")]
    Format {
        /// The format asked for.
        wgpu: wgpu::TextureFormat,
        /// Its Vulkan format on this adapter.
        mapped: vk::Format,
        /// The image's.
        image: vk::Format,
    },
    /// The image's shape cannot be a wgpu texture (linear tiling, 1D arrays).
    #[error("the image's shape cannot be a wgpu texture: {0}")]
    Shape(&'static str),
    /// Waiting for residency's submissions with it failed (the device is lost).
    #[error("residency: {0}")]
    Residency(String),
    /// Its subresources are not all in one layout wgpu can start from.
    #[error("its subresources are in layout {0:?}, which wgpu cannot start from (or differ)")]
    Layout(Option<vk::ImageLayout>),
}

/// A residency buffer that is also a `wgpu::Buffer`.
///
/// Each handle can be dropped (or cloned) on its own; the `VkBuffer` and its memory go once the
/// last residency reference is gone *and* wgpu's work with it has completed.
#[derive(Debug, Clone)]
pub struct SharedBuffer {
    wgpu: wgpu::Buffer,
    residency: Arc<Buffer>,
}

impl SharedBuffer {
    /// The wgpu buffer.
    pub fn wgpu(&self) -> &wgpu::Buffer {
        &self.wgpu
    }

    /// The residency buffer (its placement, memory, name and residency-side uses).
    pub fn residency(&self) -> &Arc<Buffer> {
        &self.residency
    }

    /// Both handles, to drop them in an order of your choosing.
    pub fn into_parts(self) -> (wgpu::Buffer, Arc<Buffer>) {
        (self.wgpu, self.residency)
    }
}

/// The Vulkan buffer usage wgpu's usage needs.
fn vk_buffer_usage_for(usage: wgpu::BufferUsages) -> vk::BufferUsageFlags {
    let map = [
        (wgpu::BufferUsages::COPY_SRC, vk::BufferUsageFlags::TRANSFER_SRC),
        (wgpu::BufferUsages::COPY_DST, vk::BufferUsageFlags::TRANSFER_DST),
        (wgpu::BufferUsages::QUERY_RESOLVE, vk::BufferUsageFlags::TRANSFER_DST),
        (wgpu::BufferUsages::INDEX, vk::BufferUsageFlags::INDEX_BUFFER),
        (wgpu::BufferUsages::VERTEX, vk::BufferUsageFlags::VERTEX_BUFFER),
        (wgpu::BufferUsages::UNIFORM, vk::BufferUsageFlags::UNIFORM_BUFFER),
        (wgpu::BufferUsages::STORAGE, vk::BufferUsageFlags::STORAGE_BUFFER),
        (wgpu::BufferUsages::INDIRECT, vk::BufferUsageFlags::INDIRECT_BUFFER),
    ];
    map.iter().filter(|(w, _)| usage.contains(*w)).fold(vk::BufferUsageFlags::empty(), |a, (_, v)| a | *v)
}

/// The residency image usage wgpu's texture usage needs.
fn image_usage_for(usage: wgpu::TextureUsages, format: wgpu::TextureFormat) -> ImageUsage {
    let attachment = if format.is_depth_stencil_format() {
        ImageUsage::DEPTH_STENCIL_ATTACHMENT
    } else {
        ImageUsage::COLOR_ATTACHMENT
    };
    let map = [
        (wgpu::TextureUsages::COPY_SRC, ImageUsage::COPY_SRC),
        (wgpu::TextureUsages::COPY_DST, ImageUsage::COPY_DST),
        (wgpu::TextureUsages::TEXTURE_BINDING, ImageUsage::SAMPLED),
        (wgpu::TextureUsages::STORAGE_BINDING, ImageUsage::STORAGE),
        (wgpu::TextureUsages::RENDER_ATTACHMENT, attachment),
    ];
    map.iter().filter(|(w, _)| usage.contains(*w)).fold(ImageUsage::NONE, |a, (_, r)| a | *r)
}

/// The wgpu state an image in `layout` starts from.
fn initial_state(layout: vk::ImageLayout) -> Option<wgpu::TextureUses> {
    Some(match layout {
        vk::ImageLayout::UNDEFINED => wgpu::TextureUses::UNINITIALIZED,
        vk::ImageLayout::SHADER_READ_ONLY_OPTIMAL => wgpu::TextureUses::RESOURCE,
        vk::ImageLayout::TRANSFER_DST_OPTIMAL => wgpu::TextureUses::COPY_DST,
        vk::ImageLayout::TRANSFER_SRC_OPTIMAL => wgpu::TextureUses::COPY_SRC,
        vk::ImageLayout::COLOR_ATTACHMENT_OPTIMAL => wgpu::TextureUses::COLOR_TARGET,
        vk::ImageLayout::GENERAL => wgpu::TextureUses::STORAGE_READ_WRITE,
        _ => return None,
    })
}

impl Bridge {
    fn owns(&self, device: &Arc<residency_vulkan::Device>) -> bool {
        Arc::ptr_eq(device, self.residency())
    }

    /// Imports a residency buffer (placed in a pool of unknown flags or the general heaps, or
    /// committed; named, budgeted) as a `wgpu::Buffer` of `usage`, its debug name as the label.
    ///
    /// The buffer becomes unmovable (a defragmentation pass takes `&mut` buffers; this one is
    /// shared from now on). wgpu and residency may both record work with it; ordering that work
    /// is the application's, as between two wgpu passes: submit residency's writes before the
    /// wgpu work that reads them (on a shared queue, submission order; otherwise a timeline
    /// wait).
    pub fn import_buffer(
        &self,
        mut buffer: Buffer,
        usage: wgpu::BufferUsages,
    ) -> Result<SharedBuffer, ImportError<Buffer>> {
        let refuse = |reason, resource| Err(ImportError { reason, resource: Box::new(resource) });
        if !self.owns(buffer.device()) {
            return refuse(ImportReason::ForeignDevice, buffer);
        }
        if buffer.placement() == BufferPlacement::Range {
            return refuse(ImportReason::Range, buffer);
        }
        if buffer.size() == 0 {
            return refuse(ImportReason::Empty, buffer);
        }
        let unsupported = usage
            & (wgpu::BufferUsages::MAP_READ
                | wgpu::BufferUsages::MAP_WRITE
                | wgpu::BufferUsages::BLAS_INPUT
                | wgpu::BufferUsages::TLAS_INPUT);
        if !unsupported.is_empty() {
            return refuse(ImportReason::Unsupported(unsupported), buffer);
        }
        let missing = vk_buffer_usage_for(usage) & !vk_buffer_usage(buffer.usage());
        if !missing.is_empty() {
            return refuse(ImportReason::Usage(format!("{missing:?}")), buffer);
        }
        buffer.set_movable(false);
        let raw = buffer.raw();
        let size = buffer.size();
        let buffer = Arc::new(buffer);
        let held = Arc::clone(&buffer);
        // SAFETY: `raw` is the buffer's own VkBuffer (not a range), of `size` bytes with every
        // Vulkan usage `usage` needs (checked above), on the bridge's device (checked above); it
        // stays valid until the callback runs, since the callback holds a reference to the
        // residency buffer and residency frees it only after the last reference is gone; wgpu
        // never maps it (no map usage) and never destroys it (externally owned).
        let hal = unsafe {
            wgpu::hal::vulkan::Buffer::from_raw_externally_owned(raw, Box::new(move || drop(held)))
        };
        let desc =
            wgpu::BufferDescriptor { label: Some(buffer.name()), size, usage, mapped_at_creation: false };
        // SAFETY: the hal buffer is on this device, respects `desc` (size and usage, above),
        // holds initialized memory (residency's buffers are bound; their contents are the
        // application's) and is not empty.
        let wgpu = unsafe { self.device().create_buffer_from_hal::<Vulkan>(hal, &desc) };
        Ok(SharedBuffer { wgpu, residency: buffer })
    }

    /// Imports a residency image as a `wgpu::Texture` of `usage` viewed as `format`, its debug
    /// name as the label. The image is wgpu's to use from now on (wgpu tracks its layouts, so
    /// residency records nothing more with it); its memory returns to residency once the texture
    /// and wgpu's work with it are gone. Its subresources must all be in one layout (a fresh
    /// image is `UNDEFINED`: wgpu starts from uninitialized contents).
    pub fn import_texture(
        &self,
        image: Image,
        format: wgpu::TextureFormat,
        usage: wgpu::TextureUsages,
    ) -> Result<wgpu::Texture, ImportError<Image>> {
        let refuse = |reason, resource| Err(ImportError { reason, resource: Box::new(resource) });
        if !self.owns(image.device()) {
            return refuse(ImportReason::ForeignDevice, image);
        }
        // SAFETY: the hal adapter is only read here and dropped at the end of the statement.
        let mapped = unsafe { self.adapter().as_hal::<Vulkan>() }
            .map(|hal| hal.texture_format_as_raw(format))
            .unwrap_or(vk::Format::UNDEFINED);
        if mapped != image.desc().raw_format() {
            return refuse(
                ImportReason::Format { wgpu: format, mapped, image: image.desc().raw_format() },
                image,
            );
        }
        let desc = image.desc();
        if desc.linear {
            return refuse(ImportReason::Shape("linear tiling"), image);
        }
        let (dimension, depth_or_layers) = match desc.dimension {
            ImageDimension::D1 if desc.array_layers == 1 => (wgpu::TextureDimension::D1, 1),
            ImageDimension::D1 => return refuse(ImportReason::Shape("a 1D array"), image),
            ImageDimension::D2 => (wgpu::TextureDimension::D2, desc.array_layers),
            ImageDimension::D3 => (wgpu::TextureDimension::D3, desc.extent[2]),
        };
        if !desc.view_formats.is_empty() || !desc.flags.is_empty() {
            return refuse(ImportReason::Shape("view formats or create flags"), image);
        }
        let missing = image_usage_for(usage, format);
        if !desc.usage.contains(missing) {
            return refuse(ImportReason::Usage(format!("{missing:?} (it has {:?})", desc.usage)), image);
        }
        let first = image.layout(0, 0);
        let uniform =
            (0..desc.mip_levels).all(|m| (0..desc.array_layers).all(|l| image.layout(m, l) == first));
        let state = match first.filter(|_| uniform).and_then(initial_state) {
            Some(state) => state,
            None => return refuse(ImportReason::Layout(first), image),
        };
        if self.queue_sharing() == QueueSharing::Separate && state != wgpu::TextureUses::UNINITIALIZED {
            // wgpu's first barrier starts from the layout residency's submissions leave; on a
            // queue of its own, wgpu's submission is not ordered after them: wait for them.
            if let Err(e) = image.device().wait_submitted() {
                return refuse(ImportReason::Residency(e.to_string()), image);
            }
        }
        let size = wgpu::Extent3d {
            width: desc.extent[0],
            height: desc.extent[1],
            depth_or_array_layers: depth_or_layers,
        };
        let label = desc.name.clone();
        let (mip_level_count, sample_count) = (desc.mip_levels, desc.samples);
        let raw = image.raw();
        let wgpu_desc = wgpu::TextureDescriptor {
            label: Some(&label),
            size,
            mip_level_count,
            sample_count,
            dimension,
            format,
            usage,
            view_formats: &[],
        };
        // SAFETY: `raw` is the image's VkImage, created as `wgpu_desc` says (format, shape and
        // usage checked above, no mutable format so no view formats); it stays valid until the
        // callback runs, which drops the residency image (residency then retires it behind its
        // own work); `state` is the state of the layout residency recorded for every
        // subresource, which is the driver's once residency's submissions so far have run (they
        // precede wgpu's on the queue), or `UNINITIALIZED`.
        Ok(unsafe { self.texture_over(raw, &wgpu_desc, Box::new(move || drop(image)), state) })
    }

    /// A `wgpu::Texture` over `raw`, whose memory wgpu does not own, starting in `state`; wgpu
    /// runs `on_drop` once its work with the texture is done, and never destroys the image.
    ///
    /// # Safety
    /// `raw` is a `VkImage` of this device created as `desc` says (format, shape, usage; no view
    /// formats), valid until `on_drop` runs or for as long as wgpu uses it, and in the layout of
    /// `state` when a wgpu submission using it starts.
    pub(crate) unsafe fn texture_over(
        &self,
        raw: vk::Image,
        desc: &wgpu::TextureDescriptor<'_>,
        on_drop: wgpu::hal::DropCallback,
        state: wgpu::TextureUses,
    ) -> wgpu::Texture {
        let hal_desc = wgpu::hal::TextureDescriptor {
            label: desc.label,
            size: desc.size,
            mip_level_count: desc.mip_level_count,
            sample_count: desc.sample_count,
            dimension: desc.dimension,
            format: desc.format,
            usage: wgpu::TextureUses::empty(),
            memory_flags: wgpu::hal::MemoryFlags::empty(),
            view_formats: Vec::new(),
        };
        // SAFETY: read-only access to the hal device, dropped at the end of the statement.
        let hal_device =
            unsafe { self.device().as_hal::<Vulkan>() }.expect("the bridge's device is a Vulkan device");
        // SAFETY: the caller's contract: `raw` is made as `hal_desc` says and valid while wgpu
        // uses it; its memory is not wgpu's (`External`).
        let hal = unsafe {
            hal_device.texture_from_raw(
                raw,
                &hal_desc,
                Some(on_drop),
                wgpu::hal::vulkan::TextureMemory::External,
            )
        };
        drop(hal_device);
        // SAFETY: the hal texture is this device's and respects `desc`; `state` is its layout's
        // (the caller's contract).
        unsafe { self.device().create_texture_from_hal::<Vulkan>(hal, desc, state) }
    }
}
