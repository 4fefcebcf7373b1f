//! Buffers: placed (their own `VkBuffer` at an offset in a shared heap), committed (their own
//! memory), or ranges of a known-flags pool page.

use crate::device::Device;
use crate::error::VulkanError;
use crate::ledger::{FaultSite, ObjectId};
use crate::memory::{MappedPtr, MemoryError};
use crate::resource_memory::{DedicatedTarget, PlaceRequest, ResourceMemory};
use ash::vk;
use residency_core::allocator::ResourceKind;
use residency_core::device_mask::DeviceIndex;
use residency_core::memory::MemoryIntent;
use residency_core::profile::MemoryRequirements;
use residency_core::usage::BufferUsage;
use std::sync::Arc;

/// The Vulkan usage bits of a set of bind flags (the core uses Vulkan's bit positions).
pub fn vk_buffer_usage(usage: BufferUsage) -> vk::BufferUsageFlags {
    vk::BufferUsageFlags::from_raw(usage.bits())
}

/// How a buffer's memory was obtained.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum BufferPlacement {
    /// Its own `VkBuffer`, bound at an offset of a shared heap.
    Placed,
    /// Its own `VkBuffer` and its own memory.
    Committed,
    /// A range of a known-flags pool page's `VkBuffer` (no `VkBuffer` of its own).
    Range,
}

/// How to create a buffer outside a pool.
#[derive(Clone, Debug)]
pub struct BufferDesc {
    /// Its name (debug utils, errors, leak reports).
    pub name: String,
    /// Size in bytes.
    pub size: u64,
    /// How it will be used.
    pub usage: BufferUsage,
    /// What memory it needs. Default: device-local.
    pub intent: MemoryIntent,
    /// An alignment floor (0: none): the offset in its heap is a multiple of this.
    pub alignment: u64,
    /// Give it memory of its own (a committed resource) instead of a place in a shared heap.
    pub committed: bool,
    /// Allocate even when over the heap budget.
    pub allow_over_budget: bool,
}

impl BufferDesc {
    /// A device-local placed buffer.
    pub fn new(name: impl Into<String>, size: u64, usage: BufferUsage) -> BufferDesc {
        BufferDesc {
            name: name.into(),
            size,
            usage,
            intent: MemoryIntent::DeviceLocal,
            alignment: 0,
            committed: false,
            allow_over_budget: false,
        }
    }

    /// Sets the memory intent.
    pub fn with_intent(mut self, intent: MemoryIntent) -> Self {
        self.intent = intent;
        self
    }

    /// Sets the alignment floor.
    pub fn with_alignment(mut self, alignment: u64) -> Self {
        self.alignment = alignment;
        self
    }

    /// Makes it committed (own memory).
    pub fn committed(mut self) -> Self {
        self.committed = true;
        self
    }

    /// Allows allocation over budget.
    pub fn allowing_over_budget(mut self) -> Self {
        self.allow_over_budget = true;
        self
    }
}

/// A buffer. Free it explicitly, by value: [`Device::destroy_buffer`] or the pool's
/// `free_buffer`; a buffer never frees itself on drop (a dropped buffer is reported as leaked).
#[derive(Debug)]
#[must_use = "a buffer is released only by destroying it explicitly"]
pub struct Buffer {
    pub(crate) raw: vk::Buffer,
    pub(crate) range_offset: u64,
    pub(crate) size: u64,
    pub(crate) usage: BufferUsage,
    pub(crate) name: Arc<str>,
    pub(crate) memory: vk::DeviceMemory,
    pub(crate) memory_offset: u64,
    pub(crate) memory_size: u64,
    pub(crate) mapped: Option<MappedPtr>,
    pub(crate) coherent: bool,
    pub(crate) placement: BufferPlacement,
    pub(crate) device: DeviceIndex,
    pub(crate) owner: ResourceMemory,
    pub(crate) id: ObjectId,
    /// The id state tracking knows it by.
    pub(crate) resource: residency_core::sync::ResourceId,
}

static NEXT_RESOURCE: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

/// A fresh id for state tracking (buffers and images; pages use `1 << 63 | handle`).
pub(crate) fn next_resource_id() -> residency_core::sync::ResourceId {
    residency_core::sync::ResourceId::new(NEXT_RESOURCE.fetch_add(1, std::sync::atomic::Ordering::Relaxed))
}

/// Reading or writing a buffer's mapped memory failed.
#[derive(Debug, thiserror::Error)]
pub enum AccessError {
    /// The buffer's memory is not host-visible.
    #[error("buffer `{name}` is not host-visible and cannot be mapped")]
    NotMappable {
        /// The buffer.
        name: String,
    },
    /// The range is outside the buffer.
    #[error("buffer `{name}`: bytes {offset}..{end} are outside its {size} B")]
    OutOfBounds {
        /// The buffer.
        name: String,
        /// Start of the access.
        offset: u64,
        /// End of the access.
        end: u64,
        /// The buffer's size.
        size: u64,
    },
    /// Flushing or invalidating failed.
    #[error(transparent)]
    Vulkan(#[from] VulkanError),
}

impl Buffer {
    /// The `VkBuffer` to bind. For [`BufferPlacement::Range`] it is the page's buffer: bind it at
    /// [`Buffer::offset`].
    pub fn raw(&self) -> vk::Buffer {
        self.raw
    }

    /// The offset of this buffer's first byte in [`Buffer::raw`] (0 unless a range).
    pub fn offset(&self) -> u64 {
        self.range_offset
    }

    /// Size in bytes.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// Its bind flags.
    pub fn usage(&self) -> BufferUsage {
        self.usage
    }

    /// Its name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// How its memory was obtained.
    pub fn placement(&self) -> BufferPlacement {
        self.placement
    }

    /// The device it lives on.
    pub fn device_index(&self) -> DeviceIndex {
        self.device
    }

    /// The memory it is bound to and the offset there.
    pub fn memory(&self) -> (vk::DeviceMemory, u64) {
        (self.memory, self.memory_offset)
    }

    /// The id state tracking (`ResourceTracker`) knows this buffer by.
    pub fn resource_id(&self) -> residency_core::sync::ResourceId {
        self.resource
    }

    /// Whether the CPU can read and write it.
    pub fn is_mappable(&self) -> bool {
        self.mapped.is_some()
    }

    fn check(&self, offset: u64, len: usize) -> Result<MappedPtr, AccessError> {
        let mapped = self.mapped.ok_or_else(|| AccessError::NotMappable { name: self.name.to_string() })?;
        let end = offset.saturating_add(len as u64);
        if end > self.size {
            return Err(AccessError::OutOfBounds {
                name: self.name.to_string(),
                offset,
                end,
                size: self.size,
            });
        }
        Ok(mapped)
    }

    /// The memory range to flush or invalidate for bytes `offset..offset+len`, widened to
    /// `nonCoherentAtomSize` and clamped to the memory object.
    fn atom_range(&self, device: &Device, offset: u64, len: u64) -> vk::MappedMemoryRange<'static> {
        let atom = device.limits().non_coherent_atom_size.max(1);
        let start = (self.memory_offset + offset) / atom * atom;
        let end = (self.memory_offset + offset + len).next_multiple_of(atom).min(self.memory_size);
        vk::MappedMemoryRange::default().memory(self.memory).offset(start).size(end - start)
    }

    /// Copies `data` into the buffer at `offset` (flushing non-coherent memory).
    pub fn write(&self, device: &Device, offset: u64, data: &[u8]) -> Result<(), AccessError> {
        let mapped = self.check(offset, data.len())?;
        // SAFETY: the range is inside this buffer (checked), which is inside its mapped memory; the
        // buffer exclusively owns these bytes in the heap, and `data` cannot overlap mapped memory
        // that only this call writes.
        unsafe {
            std::ptr::copy_nonoverlapping(data.as_ptr(), mapped.at(self.memory_offset + offset), data.len());
        }
        if !self.coherent && !data.is_empty() {
            let range = self.atom_range(device, offset, data.len() as u64);
            // SAFETY: the range lies in mapped memory of this device, aligned as required.
            unsafe { device.raw().flush_mapped_memory_ranges(&[range]) }
                .map_err(|r| VulkanError::from_vk("vkFlushMappedMemoryRanges", r))?;
        }
        Ok(())
    }

    /// Copies bytes of the buffer at `offset` into `out` (invalidating non-coherent memory first).
    pub fn read(&self, device: &Device, offset: u64, out: &mut [u8]) -> Result<(), AccessError> {
        let mapped = self.check(offset, out.len())?;
        if !self.coherent && !out.is_empty() {
            let range = self.atom_range(device, offset, out.len() as u64);
            // SAFETY: the range lies in mapped memory of this device, aligned as required.
            unsafe { device.raw().invalidate_mapped_memory_ranges(&[range]) }
                .map_err(|r| VulkanError::from_vk("vkInvalidateMappedMemoryRanges", r))?;
        }
        // SAFETY: the range is inside this buffer's mapped bytes (checked); `out` is ordinary host
        // memory that cannot overlap the mapping.
        unsafe {
            std::ptr::copy_nonoverlapping(
                mapped.at(self.memory_offset + offset),
                out.as_mut_ptr(),
                out.len(),
            );
        }
        Ok(())
    }
}

/// Creates an unbound `VkBuffer` and returns it with its memory requirements.
pub(crate) fn create_raw_buffer(
    device: &Device,
    name: &str,
    size: u64,
    usage: BufferUsage,
) -> Result<(vk::Buffer, MemoryRequirements), MemoryError> {
    if size == 0 {
        return Err(MemoryError::InvalidRequest {
            name: name.to_owned(),
            source: residency_core::allocator::AllocError::ZeroSize,
        });
    }
    if usage.is_empty() {
        return Err(MemoryError::Unsatisfiable {
            name: name.to_owned(),
            reason: "a buffer needs a usage".into(),
        });
    }
    let info = vk::BufferCreateInfo::default()
        .size(size)
        .usage(vk_buffer_usage(usage))
        .sharing_mode(vk::SharingMode::EXCLUSIVE);
    let raw = device.ledger().guard(FaultSite::CreateResource, || {
        // SAFETY: valid device; non-zero size and non-empty usage (checked above).
        unsafe { device.raw().create_buffer(&info, None) }
    });
    let raw = raw.map_err(|r| match r {
        vk::Result::ERROR_OUT_OF_DEVICE_MEMORY | vk::Result::ERROR_OUT_OF_HOST_MEMORY => {
            MemoryError::OutOfDeviceMemory { name: name.to_owned(), requested: size }
        }
        r => VulkanError::from_vk("vkCreateBuffer", r).into(),
    })?;
    device.set_name(raw, name);
    let mut dedicated = vk::MemoryDedicatedRequirements::default();
    let mut out = vk::MemoryRequirements2::default().push_next(&mut dedicated);
    let info = vk::BufferMemoryRequirementsInfo2::default().buffer(raw);
    // SAFETY: raw was just created on this device; the output chain is live.
    unsafe { device.raw().get_buffer_memory_requirements2(&info, &mut out) };
    let r = out.memory_requirements;
    let requirements = MemoryRequirements {
        size: r.size,
        alignment: r.alignment,
        memory_type_bits: r.memory_type_bits,
        prefers_dedicated: dedicated.prefers_dedicated_allocation == vk::TRUE
            || dedicated.requires_dedicated_allocation == vk::TRUE,
    };
    Ok((raw, requirements))
}

/// Binds `raw` to `memory` at `offset`, destroying `raw` on failure.
pub(crate) fn bind_buffer(
    device: &Device,
    raw: vk::Buffer,
    memory: vk::DeviceMemory,
    offset: u64,
) -> Result<(), MemoryError> {
    // SAFETY: raw is unbound; offset satisfies its alignment and the range lies in memory (the
    // allocator placed it so).
    if let Err(r) = unsafe { device.raw().bind_buffer_memory(raw, memory, offset) } {
        // SAFETY: raw was created by the caller on this device and is unused.
        unsafe { device.raw().destroy_buffer(raw, None) };
        return Err(VulkanError::from_vk("vkBindResourceMemory", r).into());
    }
    Ok(())
}

impl Device {
    /// Creates a buffer: placed in a shared heap of the device's general allocator, or committed
    /// (its own memory) when `desc.committed`, when the driver prefers it, or when it is too large
    /// for a heap.
    pub fn create_buffer(&self, desc: &BufferDesc) -> Result<Buffer, MemoryError> {
        let name = desc.name.as_str();
        if desc.alignment != 0 && !desc.alignment.is_power_of_two() {
            return Err(MemoryError::InvalidRequest {
                name: name.to_owned(),
                source: residency_core::allocator::AllocError::AlignmentNotPowerOfTwo {
                    alignment: desc.alignment,
                },
            });
        }
        let (raw, requirements) = create_raw_buffer(self, name, desc.size, desc.usage)?;
        let request = PlaceRequest {
            name,
            requirements,
            alignment_floor: desc.alignment,
            kind: ResourceKind::Linear,
            intent: desc.intent,
            committed: desc.committed,
            allow_over_budget: desc.allow_over_budget,
            target: DedicatedTarget::Buffer(raw),
        };
        let placed = match self.place(&request) {
            Ok(placed) => placed,
            Err(e) => {
                // SAFETY: raw was created above and is not bound or used.
                unsafe { self.raw().destroy_buffer(raw, None) };
                return Err(e);
            }
        };
        if let Err(e) = bind_buffer(self, raw, placed.memory, placed.offset) {
            self.release(placed.owner);
            return Err(e);
        }
        let name: Arc<str> = Arc::from(name);
        let id = self.ledger().track("buffer", Arc::clone(&name));
        Ok(Buffer {
            raw,
            range_offset: 0,
            size: desc.size,
            usage: desc.usage,
            name,
            memory: placed.memory,
            memory_offset: placed.offset,
            memory_size: placed.memory_size,
            mapped: placed.mapped,
            coherent: placed.coherent,
            placement: if placed.committed { BufferPlacement::Committed } else { BufferPlacement::Placed },
            device: self.index(),
            owner: placed.owner,
            id,
            resource: next_resource_id(),
        })
    }

    /// Destroys a buffer made by [`Device::create_buffer`] and returns its memory.
    pub fn destroy_buffer(&self, buffer: Buffer) {
        if let ResourceMemory::Pool { .. } = buffer.owner {
            tracing::error!(buffer = %buffer.name, "Device::destroy_buffer on a pool buffer: use its pool's free_buffer");
            return;
        }
        // SAFETY: the buffer was created on this device by create_buffer; the caller gives up the
        // handle (taken by value) and must not have GPU work using it in flight.
        unsafe { self.raw().destroy_buffer(buffer.raw, None) };
        self.ledger().untrack(buffer.id);
        self.release(buffer.owner);
    }
}
