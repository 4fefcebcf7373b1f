//! Resources placed in memory: buffers (placed, committed, ranges of a pool page), images with their
//! views and samplers, and the staging uploader that fills them.

pub(crate) mod buffer;
pub(crate) mod host_import;
pub(crate) mod image;
pub(crate) mod parallel_copy;

use crate::device::Device;
use ash::vk;

/// A Vulkan object of a resource being created, not yet handed to its `Life`.
pub(crate) trait RawObject: Copy {
    /// Destroys it.
    ///
    /// # Safety
    /// The object was created on `device` and neither bound to work nor handed out.
    unsafe fn destroy(self, device: &Device);
}

impl RawObject for vk::Buffer {
    unsafe fn destroy(self, device: &Device) {
        // SAFETY: the caller's contract (this unsafe fn's `# Safety`).
        unsafe { device.raw().destroy_buffer(self, None) }
    }
}

impl RawObject for vk::Image {
    unsafe fn destroy(self, device: &Device) {
        // SAFETY: the caller's contract (this unsafe fn's `# Safety`).
        unsafe { device.raw().destroy_image(self, None) }
    }
}

/// A just-created `VkBuffer` or `VkImage`: destroyed on drop (every error path of its creation)
/// unless disarmed when it is handed to a resource.
pub(crate) struct Unused<'a, T: RawObject> {
    device: &'a Device,
    raw: T,
}

impl<'a, T: RawObject> Unused<'a, T> {
    /// Guards `raw`, just created on `device`.
    pub(crate) fn new(device: &'a Device, raw: T) -> Self {
        Unused { device, raw }
    }

    /// Keeps the object: the caller owns it again.
    pub(crate) fn disarm(self) -> T {
        let raw = self.raw;
        std::mem::forget(self);
        raw
    }
}

impl<T: RawObject> Drop for Unused<'_, T> {
    fn drop(&mut self) {
        // SAFETY: the guard holds an object created on this device (`new`'s callers pass only
        // those) that was never used by the GPU nor handed out (it would have been disarmed).
        unsafe { self.raw.destroy(self.device) };
    }
}
