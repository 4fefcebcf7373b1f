//! A borrowed host slice imported as device memory (VK_EXT_external_memory_host) with a
//! transfer-source buffer over it, for the length of the copies that read it: the zero-copy
//! source of [`Uploader::upload_buffer`](crate::Uploader::upload_buffer). Importing pins the
//! slice's pages; the DMA engine then reads them directly, with no staging copy on the host.
//!
//! The import borrows the slice for `'a` and is destroyed only by
//! [`ImportedSlice::destroy`], whose caller promises that no GPU work still reads it; an import
//! dropped without it leaks its buffer and memory (reported by name at teardown) rather than
//! free what the GPU may still read.

use crate::device::ledger::{FaultSite, ObjectId};
use crate::device::Device;
use ash::vk;
use std::marker::PhantomData;

/// Why a slice was not imported (the caller stages it instead).
#[derive(Debug)]
pub(crate) struct ImportRefused {
    /// What refused it, for the log.
    pub(crate) reason: String,
}

fn refused(reason: impl Into<String>) -> ImportRefused {
    ImportRefused { reason: reason.into() }
}

/// A host slice imported as device memory, bound to a transfer-source buffer of its length.
pub(crate) struct ImportedSlice<'a> {
    device: &'a Device,
    buffer: vk::Buffer,
    memory: vk::DeviceMemory,
    heap: u32,
    size: u64,
    id: ObjectId,
    /// The imported bytes stay borrowed (no writer, no free) while the import lives.
    _slice: PhantomData<&'a [u8]>,
}

impl<'a> ImportedSlice<'a> {
    /// Imports `bytes` (start and length multiples of the device's
    /// `minImportedHostPointerAlignment`, non-empty; panics otherwise) as host memory of a type
    /// the driver reports for the pointer, with a `TRANSFER_SRC` buffer over all of it. Refused
    /// (nothing left behind) where the device lacks the extension, the driver cannot import the
    /// pointer, no memory type suits both, the ledger's memory-object count is full, or an
    /// allocation fails.
    pub(crate) fn new(device: &'a Device, bytes: &'a [u8], name: &str) -> Result<Self, ImportRefused> {
        let Some(import) = device.host_import() else {
            return Err(refused("VK_EXT_external_memory_host is not enabled"));
        };
        let size = bytes.len() as u64;
        let address = bytes.as_ptr() as u64;
        assert!(
            size > 0 && size % import.alignment == 0 && address % import.alignment == 0,
            "an imported slice starts and ends on the import alignment"
        );
        let handle_type = vk::ExternalMemoryHandleTypeFlags::HOST_ALLOCATION_EXT;
        let pointer = bytes.as_ptr().cast::<std::ffi::c_void>();
        let mut pointer_props = vk::MemoryHostPointerPropertiesEXT::default();
        // SAFETY: the extension is enabled on this device (`host_import` is set only then);
        // `pointer` is aligned to `minImportedHostPointerAlignment` (checked above) and points
        // at `size` bytes of host memory borrowed for `'a`; the output struct lives for the call.
        let result = unsafe {
            (import.loader.fp().get_memory_host_pointer_properties_ext)(
                import.loader.device(),
                handle_type,
                pointer,
                &mut pointer_props,
            )
        };
        if result != vk::Result::SUCCESS {
            return Err(refused(format!("vkGetMemoryHostPointerPropertiesEXT: {result:?}")));
        }
        let mut external = vk::ExternalMemoryBufferCreateInfo::default().handle_types(handle_type);
        let info = vk::BufferCreateInfo::default()
            .size(size)
            .usage(vk::BufferUsageFlags::TRANSFER_SRC)
            .sharing_mode(vk::SharingMode::EXCLUSIVE)
            .push_next(&mut external);
        // SAFETY: valid device; the info chain lives for the call; the handle type was reported
        // importable for transfer-source buffers when the extension was enabled.
        let buffer = match unsafe { device.raw().create_buffer(&info, None) } {
            Ok(buffer) => buffer,
            Err(result) => return Err(refused(format!("vkCreateBuffer: {result:?}"))),
        };
        let destroy_buffer = |reason: String| {
            // SAFETY: created above, never bound to memory or used by any command.
            unsafe { device.raw().destroy_buffer(buffer, None) };
            refused(reason)
        };
        // SAFETY: a live buffer of this device.
        let requirements = unsafe { device.raw().get_buffer_memory_requirements(buffer) };
        let bits = requirements.memory_type_bits & pointer_props.memory_type_bits;
        if bits == 0 || requirements.size > size {
            return Err(destroy_buffer(format!(
                "no memory type for the import (buffer types {:#b}, pointer types {:#b}, {} B needed of {size})",
                requirements.memory_type_bits, pointer_props.memory_type_bits, requirements.size
            )));
        }
        let type_index = bits.trailing_zeros();
        let Some(memory_type) = device.memory_properties().types.get(type_index as usize) else {
            return Err(destroy_buffer(format!("memory type {type_index} is not reported")));
        };
        let heap = memory_type.heap_index;
        if !device.ledger().reserve_memory(heap, size) {
            return Err(destroy_buffer("the device's memory-object count is full".into()));
        }
        let mut import_info = vk::ImportMemoryHostPointerInfoEXT::default()
            .handle_type(handle_type)
            .host_pointer(pointer.cast_mut());
        let allocate = vk::MemoryAllocateInfo::default()
            .allocation_size(size)
            .memory_type_index(type_index)
            .push_next(&mut import_info);
        let allocated = device.ledger().guard(FaultSite::AllocateMemory, || {
            // SAFETY: valid device; the info chain lives for the call; the pointer and size are
            // multiples of the import alignment and name host memory that stays borrowed (no
            // writer, not freed) for `'a`, which the memory object does not outlive (it is
            // freed by `destroy`, or leaked); the type is one the driver reported for the
            // pointer. The memory is only ever read, by copies out of the buffer bound to it.
            unsafe { device.raw().allocate_memory(&allocate, None) }
        });
        let memory = match allocated {
            Ok(memory) => memory,
            Err(result) => {
                device.ledger().release_memory(heap, size);
                return Err(destroy_buffer(format!("vkAllocateMemory (import): {result:?}")));
            }
        };
        // SAFETY: the buffer and the memory are this device's, unbound and unused; the memory
        // type is allowed by the buffer's requirements and the memory holds `requirements.size`
        // bytes at offset 0 (checked above).
        if let Err(result) = unsafe { device.raw().bind_buffer_memory(buffer, memory, 0) } {
            // SAFETY: allocated above, unbound, unused.
            unsafe { device.raw().free_memory(memory, None) };
            device.ledger().release_memory(heap, size);
            return Err(destroy_buffer(format!("vkBindBufferMemory (import): {result:?}")));
        }
        device.set_name(buffer, name);
        device.set_name(memory, name);
        let id = device.ledger().track("imported host memory", name);
        Ok(ImportedSlice { device, buffer, memory, heap, size, id, _slice: PhantomData })
    }

    /// The transfer-source buffer over the imported bytes (offset 0 is the slice's first byte).
    pub(crate) fn buffer(&self) -> vk::Buffer {
        self.buffer
    }

    /// Destroys the buffer and frees the memory, ending the import.
    ///
    /// # Safety
    /// No GPU work that uses the buffer is pending: every submission that copies out of it has
    /// completed (or the device is lost).
    pub(crate) unsafe fn destroy(self) {
        let this = std::mem::ManuallyDrop::new(self);
        // SAFETY: both objects are this device's; by the contract above no pending work uses them;
        // the buffer goes before the memory bound to it.
        unsafe {
            this.device.raw().destroy_buffer(this.buffer, None);
            this.device.raw().free_memory(this.memory, None);
        }
        this.device.ledger().release_memory(this.heap, this.size);
        this.device.ledger().untrack(this.id);
    }
}

impl Drop for ImportedSlice<'_> {
    fn drop(&mut self) {
        // Dropped without `destroy`: the GPU may still read it, so its objects are leaked (and
        // stay in the ledger, which reports them at teardown).
        tracing::error!(
            bytes = self.size,
            "an imported host slice was dropped without being destroyed: leaked"
        );
    }
}
