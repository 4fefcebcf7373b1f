//! Memory for one resource: placed at an offset of a shared heap of the device's general
//! allocator, or committed (dedicated memory of its own). Shared by buffers and images, and by
//! [`Allocation`]s: memory for objects the renderer created itself, or for raw requirements.

use crate::device::blocks::{
    MappedPtr, MemoryBlock, MemoryError, PlacementLog, RawMemoryDesc, ResourceMemory, SubRequest,
};
use crate::device::life::{ForeignUse, Garbage, GpuUse, Life};
use crate::device::Device;
use crate::error::VulkanError;
use crate::error::{ForeignReason, ForeignResource};
use crate::poison::PoisonFree;
use ash::vk;
use residency_core::allocator::{AllocError, ResourceKind};
use residency_core::device_mask::DeviceIndex;
use residency_core::format::Format;
use residency_core::memory::{fallback_chain, MemoryIntent, MemoryTier};
use residency_core::placement::heap::committed_heap_size;
use residency_core::placement::{
    DiscardMessages, Message, MessageSink, ObjectRequirements, Placement, PlacementEngine, ResourceDesc,
    ResourceFlag, TightAlignmentTier,
};
use residency_core::profile::MemoryRequirements;
use residency_core::usage::BufferUsage;
use std::ptr::NonNull;
use std::sync::Arc;

/// The resource a dedicated allocation is for.
#[derive(Clone, Copy, Debug)]
pub(crate) enum DedicatedTarget {
    Buffer(vk::Buffer),
    Image(vk::Image),
    /// Raw requirements: a dedicated allocation names no object.
    Nothing,
}

/// What a resource needs.
#[derive(Debug)]
pub(crate) struct PlaceRequest<'a> {
    pub(crate) name: &'a str,
    pub(crate) requirements: MemoryRequirements,
    pub(crate) alignment_floor: u64,
    pub(crate) kind: ResourceKind,
    pub(crate) intent: MemoryIntent,
    pub(crate) committed: bool,
    pub(crate) allow_over_budget: bool,
    /// Whether a placement that does not fit its preferred tier may go down the fallback chain
    /// (else it is refused there).
    pub(crate) fallback: bool,
    pub(crate) target: DedicatedTarget,
    /// A memory priority asked for (checked): the resource gets memory of its own with it, since
    /// a priority belongs to a whole `VkDeviceMemory`.
    pub(crate) priority: Option<f32>,
    /// An image's own description for the placement engine (dimension, format, extent, mips,
    /// samples, attachment and storage flags), so that the legacy policy gives D3D12's layouts for
    /// it: 4 KiB for a small texture, 64 KiB, 4 MiB for a multisampled one. `None` (raw
    /// requirements, renderer-made images): described as a non-small texture.
    pub(crate) image: Option<ResourceDesc>,
    /// The resource's own alignment rules ([`BufferDesc::policy`](crate::BufferDesc::policy) and
    /// its siblings): `None` follows the pool's or device's policy.
    pub(crate) policy: Option<PlacementPolicy>,
}

/// Where it went.
#[derive(Debug)]
pub(crate) struct Placed {
    pub(crate) owner: ResourceMemory,
    pub(crate) memory: vk::DeviceMemory,
    pub(crate) offset: u64,
    pub(crate) memory_size: u64,
    pub(crate) mapped: Option<MappedPtr>,
    pub(crate) coherent: bool,
    pub(crate) committed: bool,
    /// The tier it went to (a later one than the chain's first: it fell back).
    pub(crate) tier: MemoryTier,
    /// The rules it was placed with (for [`ExistingAllocationInfo`]).
    pub(crate) with: PlacedWith,
}

/// The rules a resource was placed with, kept with it for [`ExistingAllocationInfo`]: the
/// engine's answer (size and alignment) under the policy that applied.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct PlacedWith {
    /// Tight or legacy.
    pub(crate) policy: PlacementPolicy,
    /// The rules' size (D3D12's `SizeInBytes`).
    pub(crate) size: u64,
    /// The offset alignment it was placed at.
    pub(crate) alignment: u64,
}

impl PlacedWith {
    /// What the paths that place at the driver's alignment and the usage's floors (linear pools,
    /// transient heaps, pool ranges) record: tight rules, the driver's size.
    pub(crate) fn driver(size: u64, alignment: u64) -> PlacedWith {
        PlacedWith { policy: PlacementPolicy::Tight, size, alignment }
    }

    /// The public answer for a resource bound at `offset` of `memory`.
    pub(crate) fn existing(
        self,
        committed: bool,
        memory: vk::DeviceMemory,
        offset: u64,
    ) -> ExistingAllocationInfo {
        ExistingAllocationInfo {
            placement: if committed { Placement::Committed } else { Placement::Placed },
            policy: self.policy,
            size: self.size,
            alignment: self.alignment,
            memory,
            offset,
        }
    }
}

/// What an existing resource was placed with: the seed's `CheckExistingResourceAllocationInfo`
/// ([`Buffer::existing_allocation_info`](crate::Buffer::existing_allocation_info),
/// [`Image::existing_allocation_info`](crate::Image::existing_allocation_info),
/// [`Allocation::existing_allocation_info`]). For a resource the
/// device's general allocator or an unknown-flags pool placed, `size` and `alignment` are
/// [`PlacementEngine`]'s answer for it under `policy` and `placement` (with its usage's floors and
/// the caller's floor), as `residency_core::placement::allocation_info` gives for its description.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ExistingAllocationInfo {
    /// `Placed` in a shared heap (a general heap, a pool's page, a transient heap) or `Committed`
    /// (memory of its own, an implicit heap).
    pub placement: Placement,
    /// The rules it was placed under: `Tight` (also for the paths that always place at the
    /// driver's alignment: linear pools, transient heaps, known-flags pool ranges) or `Legacy`.
    pub policy: PlacementPolicy,
    /// The rules' size in bytes (D3D12's `SizeInBytes`: the driver's size, rounded to the
    /// alignment under legacy rules and to the implicit heap's 4 KiB when committed). The heap
    /// range it holds is the driver's size at `offset`.
    pub size: u64,
    /// Its alignment: `offset` is a multiple of it.
    pub alignment: u64,
    /// The memory (heap) it is bound to.
    pub memory: vk::DeviceMemory,
    /// Its offset in `memory` (0 when committed).
    pub offset: u64,
}

impl Device {
    /// Finds memory for a resource: each step of the intent's fallback chain in order
    /// ([`fallback_chain`]: device-local → device-local host-visible → host), placed in a shared
    /// heap or dedicated, going to the next step only when one runs out of memory or budget (the
    /// device-local limit included); a step of a worse tier than the first is taken only when the
    /// request allows fallback, and is counted in the device's pressure statistics.
    pub(crate) fn place(&self, req: &PlaceRequest<'_>) -> Result<Placed, MemoryError> {
        self.place_for_usage(req, None)
    }

    /// [`Device::place`] for a buffer whose usage is known: the usage's offset-alignment floors
    /// are applied on top of the rules (see [`Device::placed_alignment`]).
    pub(crate) fn place_for_usage(
        &self,
        req: &PlaceRequest<'_>,
        usage: Option<BufferUsage>,
    ) -> Result<Placed, MemoryError> {
        crate::device::blocks::check_priority(req.name, req.priority)?;
        let r = req.requirements;
        let chain = fallback_chain(&self.memory_properties().types, r.memory_type_bits, req.intent);
        if chain.is_empty() {
            return Err(MemoryError::NoSuitableMemoryType {
                name: req.name.to_owned(),
                allowed_bits: r.memory_type_bits,
                intent: req.intent,
            });
        }
        let placed_with = self.placed_alignment(req, usage)?;
        let alignment = placed_with.alignment;
        let mut last_error = None;
        let preferred = chain[0].tier;
        for &step in &chain {
            if step.tier != preferred && !req.fallback {
                self.pressure.count(crate::device::pressure::Counter::FallbackRefused, r.size);
                break;
            }
            let type_index = step.type_index;
            let list_index = self.list_of(step);
            let coherent = self.memory_properties().types[type_index as usize].flags.host_coherent;
            let mut list = self.general[list_index as usize].locked();
            let dedicated = req.committed
                || req.priority.is_some()
                || list.growth.wants_dedicated(r.size, r.prefers_dedicated);
            let result = if dedicated {
                drop(list);
                let info = match req.target {
                    DedicatedTarget::Buffer(b) => Some(vk::MemoryDedicatedAllocateInfo::default().buffer(b)),
                    DedicatedTarget::Image(i) => Some(vk::MemoryDedicatedAllocateInfo::default().image(i)),
                    DedicatedTarget::Nothing => None,
                };
                // A dedicated allocation of an object is exactly its requirement's size
                // (VUID-VkMemoryDedicatedAllocateInfo-buffer-02965, -image-02964); memory for raw
                // requirements is an implicit heap of 4 KiB granularity.
                let size = match req.target {
                    DedicatedTarget::Nothing => committed_heap_size(r.size),
                    DedicatedTarget::Buffer(_) | DedicatedTarget::Image(_) => r.size,
                };
                let desc = RawMemoryDesc {
                    name: req.name,
                    size,
                    type_index,
                    allow_over_budget: req.allow_over_budget,
                    dedicated: info,
                    priority: req.priority.unwrap_or(crate::device::blocks::DEFAULT_PRIORITY),
                };
                MemoryBlock::new_in_tier(self, desc, 1, step.tier).map(|block| Placed {
                    memory: block.memory,
                    offset: 0,
                    memory_size: block.size,
                    mapped: block.mapped,
                    coherent,
                    committed: true,
                    tier: step.tier,
                    with: placed_with,
                    owner: ResourceMemory::Dedicated(Box::new(block)),
                })
            } else {
                let request = SubRequest {
                    name: req.name,
                    size: r.size,
                    alignment,
                    kind: req.kind,
                    allow_over_budget: req.allow_over_budget,
                };
                list.allocate(self, request).map(|allocation| {
                    let block = list.block(allocation.block);
                    Placed {
                        memory: block.memory,
                        offset: allocation.allocation.offset(),
                        memory_size: block.size,
                        mapped: block.mapped,
                        coherent,
                        committed: false,
                        tier: step.tier,
                        with: placed_with,
                        owner: ResourceMemory::General { list: list_index, allocation },
                    }
                })
            };
            match result {
                Ok(mut placed) => {
                    if placed.tier != preferred {
                        self.pressure.count(crate::device::pressure::Counter::Fallback, r.size);
                        tracing::debug!(name = req.name, tier = ?placed.tier, "placed down its fallback chain");
                    }
                    // Memory of its own it was not asked for (large, or the driver prefers it):
                    // the committed table's answer, as the record of what it was placed with.
                    if placed.committed && !req.committed {
                        // The committed table never refuses what the placed one accepted (its
                        // maxima are at least the placed ones); on a source error the placed
                        // answer stays.
                        let policy = self.placement_policy();
                        if let Ok(with) = self.placed_with_rules(req, usage, policy, Placement::Committed) {
                            placed.with = with;
                        }
                    }
                    return Ok(placed);
                }
                Err(e @ (MemoryError::OutOfDeviceMemory { .. } | MemoryError::OutOfBudget { .. })) => {
                    last_error = Some(e);
                }
                Err(e) => return Err(e),
            }
        }
        Err(last_error.expect("the chain's first step was tried"))
    }
}

/// How to allocate memory for an object the renderer created itself ([`Device::allocate_for_buffer`],
/// [`Device::allocate_for_image`]) or for raw requirements ([`Device::allocate_memory`]).
#[derive(Clone, Debug)]
pub struct AllocationDesc {
    /// Its name (errors, leak reports, the dedicated memory's debug name).
    pub name: String,
    /// What memory it needs. Default: device-local.
    pub intent: MemoryIntent,
    /// What will be bound in it, for `bufferImageGranularity`: linear resources (buffers, linearly
    /// tiled images) and optimal images never share a granularity page of a shared heap; `Unknown`
    /// (the default) shares a page with nothing. Buffers always count as `Linear`.
    pub kind: ResourceKind,
    /// An alignment floor on top of the placement rules' (0: none; else a power of two).
    pub alignment: u64,
    /// The usage the buffer was created with ([`Device::allocate_for_buffer`]): its offset-alignment
    /// floors ([`usage_alignment_floor`](crate::usage_alignment_floor)) are applied on top of the placement rules. `None` (the
    /// default): no usage floors. Ignored for images and raw requirements.
    pub buffer_usage: Option<BufferUsage>,
    /// Memory of its own even when the driver does not prefer it (it always gets its own when the
    /// driver prefers or requires a dedicated allocation, or when it is large).
    pub dedicated: bool,
    /// Allocate even when over the heap budget.
    pub allow_over_budget: bool,
    /// Whether it may go down its memory-type fallback chain when its preferred tier is out of
    /// memory or budget (default true); false refuses it there instead (see
    /// [`BufferDesc::fallback`](crate::BufferDesc::fallback)).
    pub fallback: bool,
    /// VK_EXT_memory_priority's priority in `[0, 1]` (`None`: the default, 0.5). A priority
    /// belongs to a whole `VkDeviceMemory`, so an allocation that asks for one gets memory of its
    /// own; without the extension it is checked and otherwise ignored.
    pub priority: Option<f32>,
    /// Its own alignment rules, over the device's ([`PlacementPolicy`]; `None`, the default:
    /// the device's).
    pub policy: Option<PlacementPolicy>,
}

impl AllocationDesc {
    /// Device-local memory of unknown kind, placed in a shared heap.
    pub fn new(name: impl Into<String>) -> AllocationDesc {
        AllocationDesc {
            name: name.into(),
            intent: MemoryIntent::DeviceLocal,
            kind: ResourceKind::Unknown,
            alignment: 0,
            buffer_usage: None,
            dedicated: false,
            allow_over_budget: false,
            fallback: true,
            priority: None,
            policy: None,
        }
    }

    /// Forbids the fallback chain (see the `fallback` field).
    pub fn without_fallback(mut self) -> Self {
        self.fallback = false;
        self
    }

    /// Sets the memory priority (see the `priority` field).
    pub fn with_priority(mut self, priority: f32) -> Self {
        self.priority = Some(priority);
        self
    }

    /// Sets its own alignment rules (see [`AllocationDesc::policy`]).
    pub fn with_policy(mut self, policy: PlacementPolicy) -> Self {
        self.policy = Some(policy);
        self
    }

    /// Sets the buffer's usage, for its offset-alignment floors (see [`AllocationDesc::buffer_usage`]).
    pub fn with_buffer_usage(mut self, usage: BufferUsage) -> Self {
        self.buffer_usage = Some(usage);
        self
    }

    /// Sets the memory intent.
    pub fn with_intent(mut self, intent: MemoryIntent) -> Self {
        self.intent = intent;
        self
    }

    /// Sets what will be bound in it (see [`AllocationDesc::kind`]).
    pub fn with_kind(mut self, kind: ResourceKind) -> Self {
        self.kind = kind;
        self
    }

    /// Sets the alignment floor.
    pub fn with_alignment(mut self, alignment: u64) -> Self {
        self.alignment = alignment;
        self
    }

    /// Asks for memory of its own.
    pub fn dedicated(mut self) -> Self {
        self.dedicated = true;
        self
    }
}

/// Which of the renderer's objects an [`Allocation`] was bound to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BoundTo {
    /// Nothing: raw requirements, the renderer binds it itself.
    Nothing,
    /// This buffer.
    Buffer(vk::Buffer),
    /// This image.
    Image(vk::Image),
}

/// Memory residency allocated for the renderer: a range `offset()..offset() + size()` of the
/// `VkDeviceMemory` `memory()`, counted in the device's budget and heaps like every placed
/// resource and listed by name among the live objects until it is freed. Dropping it frees the
/// memory once the GPU work that may use it has completed (every residency submission made before
/// the drop, and every use declared with [`Allocation::used_until`]); it keeps its device alive.
/// It never destroys the renderer's object.
#[derive(Debug)]
pub struct Allocation {
    pub(crate) life: Arc<Life>,
    name: Arc<str>,
    memory: vk::DeviceMemory,
    offset: u64,
    size: u64,
    memory_type: u32,
    tier: MemoryTier,
    dedicated: bool,
    coherent: bool,
    mapped: Option<MappedPtr>,
    bound: BoundTo,
    /// The application's own word (VMA's `pUserData`).
    user_data: u64,
    /// The rules it was placed with.
    placed_with: PlacedWith,
}

impl Allocation {
    /// The application's own word attached to the allocation (VMA's `pUserData`; 0 until set).
    pub fn user_data(&self) -> u64 {
        self.user_data
    }

    /// Sets [`Allocation::user_data`].
    pub fn set_user_data(&mut self, user_data: u64) {
        self.user_data = user_data;
    }

    /// The `VkDeviceMemory` it is a range of.
    pub fn memory(&self) -> vk::DeviceMemory {
        self.memory
    }

    /// Its offset in [`Allocation::memory`] (a multiple of the requirement's alignment).
    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// Its size in bytes (the requirement's size).
    pub fn size(&self) -> u64 {
        self.size
    }

    /// The memory type it was allocated from.
    pub fn memory_type(&self) -> u32 {
        self.memory_type
    }

    /// The tier it was placed in: a later one than its intent's first means it fell back
    /// ([`Device::pressure_stats`] counts it).
    pub fn memory_tier(&self) -> MemoryTier {
        self.tier
    }

    /// Whether it is memory of its own (a dedicated allocation), not a range of a shared heap.
    pub fn is_dedicated(&self) -> bool {
        self.dedicated
    }

    /// Whether its memory is host-coherent (else flush after host writes, invalidate before reads).
    pub fn is_coherent(&self) -> bool {
        self.coherent
    }

    /// A host pointer to its first byte when its memory is host-visible (persistently mapped while
    /// it lives). Reading or writing through it is the caller's `unsafe` code: within
    /// [`Allocation::size`] bytes, not racing GPU work on the same bytes.
    pub fn mapped_ptr(&self) -> Option<NonNull<u8>> {
        self.mapped.and_then(|m| m.range(self.offset, self.size))
    }

    /// What it was bound to.
    pub fn bound_to(&self) -> BoundTo {
        self.bound
    }

    /// What it was placed with (the seed's `CheckExistingResourceAllocationInfo`): placed or
    /// committed (memory of its own), tight or legacy, the rules' size and alignment, its memory
    /// and offset.
    pub fn existing_allocation_info(&self) -> ExistingAllocationInfo {
        self.placed_with.existing(self.dedicated, self.memory, self.offset)
    }

    /// Its name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The device it lives on (kept alive by it).
    pub fn device(&self) -> &Arc<Device> {
        self.life.device()
    }

    /// The device it lives on.
    pub fn device_index(&self) -> DeviceIndex {
        self.life.device().index()
    }

    /// Declares that GPU work the renderer submitted itself uses this memory (through the object
    /// bound to it) until `until`; the memory is freed only after it. A point of another device is
    /// refused.
    pub fn used_until(&self, until: GpuUse) -> Result<(), ForeignUse> {
        self.life.used_until(until)
    }
}

fn invalid_request(name: &str, source: AllocError) -> MemoryError {
    MemoryError::InvalidRequest { name: name.to_owned(), source }
}

impl Device {
    /// Allocates memory for raw requirements (the renderer binds its object there itself, at
    /// [`Allocation::offset`] of [`Allocation::memory`]). A zero size, an alignment or floor that
    /// is not a power of two is [`MemoryError::InvalidRequest`]; no memory type in
    /// `memory_type_bits` serving the intent is [`MemoryError::NoSuitableMemoryType`].
    pub fn allocate_memory(
        &self,
        requirements: &vk::MemoryRequirements,
        desc: &AllocationDesc,
    ) -> Result<Allocation, MemoryError> {
        let requirements = MemoryRequirements {
            size: requirements.size,
            alignment: requirements.alignment,
            memory_type_bits: requirements.memory_type_bits,
            prefers_dedicated: false,
        };
        self.allocate_own(desc, requirements, desc.kind, DedicatedTarget::Nothing)
    }

    /// Allocates memory for `buffer` (dedicated when the driver prefers or requires it) and binds
    /// the buffer at the allocation's offset. On error nothing is bound and nothing is left
    /// allocated; the buffer stays the caller's.
    ///
    /// # Safety
    /// - `buffer` is a valid `VkBuffer` created on this device ([`Device::raw`]), without sparse
    ///   flags, and not bound to memory;
    /// - no other thread uses `buffer` during the call (Vulkan's external synchronisation);
    /// - the GPU does not use `buffer` after the allocation retires: every use the renderer
    ///   submits itself is declared with [`Allocation::used_until`] (residency's own submissions
    ///   are waited for anyway) or has completed before the allocation is dropped, and the buffer
    ///   is not used again after (destroy it; destroying it before or after is both fine).
    pub unsafe fn allocate_for_buffer(
        &self,
        buffer: vk::Buffer,
        desc: &AllocationDesc,
    ) -> Result<Allocation, MemoryError> {
        // SAFETY: the caller's contract: a live buffer of this device.
        let requirements =
            unsafe { crate::device::profile_capture::requirements_of_buffer_object(self, buffer) };
        let mut allocation =
            self.allocate_own(desc, requirements, ResourceKind::Linear, DedicatedTarget::Buffer(buffer))?;
        // SAFETY: the caller's contract (live, unbound, not in use elsewhere); the range was
        // allocated for this buffer's requirements, so offset and size fit.
        let bound = unsafe { self.raw().bind_buffer_memory(buffer, allocation.memory, allocation.offset) };
        // A failed bind drops the allocation: nothing is bound to it, so it is freed at once.
        bound.map_err(|r| MemoryError::Vulkan(VulkanError::from_vk("vkBindBufferMemory", r)))?;
        allocation.bound = BoundTo::Buffer(buffer);
        Ok(allocation)
    }

    /// Allocates memory for `image` (dedicated when the driver prefers or requires it) and binds
    /// the image at the allocation's offset. On error nothing is bound and nothing is left
    /// allocated; the image stays the caller's.
    ///
    /// # Safety
    /// - `image` is a valid `VkImage` created on this device ([`Device::raw`]), without sparse or
    ///   disjoint flags, and not bound to memory;
    /// - `desc.kind` is `Unknown`, or the image's kind: `Linear` exactly when it was created with
    ///   `VK_IMAGE_TILING_LINEAR`, `Optimal` otherwise (residency keeps the two kinds off each
    ///   other's `bufferImageGranularity` pages on the strength of it);
    /// - no other thread uses `image` during the call (Vulkan's external synchronisation);
    /// - the GPU does not use `image` after the allocation retires, as for
    ///   [`Device::allocate_for_buffer`].
    pub unsafe fn allocate_for_image(
        &self,
        image: vk::Image,
        desc: &AllocationDesc,
    ) -> Result<Allocation, MemoryError> {
        // SAFETY: the caller's contract: a live, non-disjoint image of this device.
        let requirements =
            unsafe { crate::device::profile_capture::requirements_of_image_object(self, image) };
        let mut allocation =
            self.allocate_own(desc, requirements, desc.kind, DedicatedTarget::Image(image))?;
        // SAFETY: the caller's contract (live, unbound, not in use elsewhere); the range was
        // allocated for this image's requirements, so offset and size fit.
        let bound = unsafe { self.raw().bind_image_memory(image, allocation.memory, allocation.offset) };
        // A failed bind drops the allocation: nothing is bound to it, so it is freed at once.
        bound.map_err(|r| MemoryError::Vulkan(VulkanError::from_vk("vkBindImageMemory", r)))?;
        allocation.bound = BoundTo::Image(image);
        Ok(allocation)
    }

    /// Frees an allocation made on this device (as dropping it does: deferred while the GPU may
    /// use it). One of another device is refused and handed back unchanged.
    pub fn free_allocation(&self, allocation: Allocation) -> Result<(), ForeignResource<Allocation>> {
        if allocation.device().is(self) {
            drop(allocation);
            return Ok(());
        }
        let reason = ForeignReason::OtherDevice { owner: allocation.device_index(), target: self.index() };
        Err(ForeignResource { name: allocation.name.to_string(), resource: Box::new(allocation), reason })
    }

    /// The shared path of the three entry points: checks, places through [`Device::place`]
    /// (the same path as `create_buffer` / `create_image`), tracks it in the ledger.
    fn allocate_own(
        &self,
        desc: &AllocationDesc,
        requirements: MemoryRequirements,
        kind: ResourceKind,
        target: DedicatedTarget,
    ) -> Result<Allocation, MemoryError> {
        let name = desc.name.as_str();
        if requirements.size == 0 {
            return Err(invalid_request(name, AllocError::ZeroSize));
        }
        for alignment in [requirements.alignment, desc.alignment] {
            if alignment != 0 && !alignment.is_power_of_two() {
                return Err(invalid_request(name, AllocError::AlignmentNotPowerOfTwo { alignment }));
            }
        }
        let request = PlaceRequest {
            name,
            requirements,
            alignment_floor: desc.alignment,
            kind,
            intent: desc.intent,
            committed: desc.dedicated,
            allow_over_budget: desc.allow_over_budget,
            fallback: desc.fallback,
            target,
            priority: desc.priority,
            image: None,
            policy: desc.policy,
        };
        let usage = if matches!(target, DedicatedTarget::Buffer(_)) { desc.buffer_usage } else { None };
        let placed = self.place_for_usage(&request, usage)?;
        let memory_type = match &placed.owner {
            ResourceMemory::General { list, .. } => self.list_type(*list),
            ResourceMemory::Dedicated(block) => block.type_index,
            ResourceMemory::Sub { .. } | ResourceMemory::Transient => {
                unreachable!("Device::place returns general or dedicated memory")
            }
        };
        let name: Arc<str> = Arc::from(name);
        let id = self.ledger().track("allocation", Arc::clone(&name));
        // A memory-only garbage: a buffer garbage with no buffer frees just the memory.
        let garbage = Garbage::Buffer { raw: vk::Buffer::null(), memory: placed.owner, id };
        Ok(Allocation {
            life: Life::new(self.arc(), garbage, None),
            name,
            memory: placed.memory,
            offset: placed.offset,
            size: requirements.size,
            memory_type,
            tier: placed.tier,
            dedicated: placed.committed,
            coherent: placed.coherent,
            mapped: placed.mapped,
            bound: BoundTo::Nothing,
            user_data: 0,
            placed_with: placed.with,
        })
    }
}

/// How placed resources are aligned in their heaps: the device's default
/// ([`Device::set_placement_policy`]), a pool's ([`BufferPoolDesc::with_policy`](crate::BufferPoolDesc::with_policy)),
/// or one resource's own ([`BufferDesc::with_policy`](crate::BufferDesc::with_policy),
/// [`ImageDesc::with_policy`](crate::ImageDesc::with_policy),
/// [`BufferInit::with_policy`](crate::BufferInit::with_policy),
/// [`AllocationDesc::with_policy`]), the most specific one applying. Either way the offset comes from
/// [`PlacementEngine`]: the driver's requirement (the object's own `vkGet*MemoryRequirements`),
/// the tight placed-resource alignment rules, the buffer usage's offset-alignment floors and the
/// caller's floor, the largest of them. A resource's own `Tight` on a device without tight
/// support ([`Device::tight_alignment_tier`] `NotSupported`) is refused
/// ([`MemoryError::Placement`], `TIGHT_ALIGNMENT_NOT_SUPPORTED`), as D3D12 refuses the flag; a
/// device's or pool's `Tight` is the preference "tight where the device supports it" and places
/// such a device's resources by the legacy rules.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum PlacementPolicy {
    /// D3D12's `USE_TIGHT_ALIGNMENT` rules: buffers at the driver's alignment (at least 8 B),
    /// images at the driver's alignment and on their own `bufferImageGranularity` pages. The default.
    #[default]
    Tight,
    /// D3D12's legacy placed layouts, for engines that want the same heap layout on every
    /// backend: buffers at 64 KiB; images made by `create_image` by their description — 4 KiB
    /// for a small texture (mip 0 within 64 KiB, no attachment usage), 64 KiB, 4 MiB when
    /// multisampled — or the driver's alignment when larger. Memory for the renderer's own images
    /// and raw requirements (no description) is placed at 64 KiB.
    Legacy,
}

/// The device's log as the engine's sink, for one named resource.
struct LogSink<'a> {
    log: &'a PlacementLog,
    name: &'a str,
    /// Whether a message was sent.
    sent: bool,
}

impl MessageSink for LogSink<'_> {
    fn push(&mut self, message: Message) {
        self.sent = true;
        self.log.push(self.name, message);
    }
}

/// Entries of a thread's cache of placed pool buffers' rules (direct-mapped).
const PLACED_WITH_ENTRIES: usize = 512;

/// What the engine answered for one placed pool buffer's inputs (everything its answer depends
/// on besides the device's limits and tight tier, which do not change).
#[derive(Clone, Copy, PartialEq, Eq)]
struct PlacedWithKey {
    device: u64,
    usage: u32,
    requirements: MemoryRequirements,
    alignment_floor: u64,
    /// The resource's own policy (0: none, 1: tight, 2: legacy) and the default (1, 2).
    policies: (u8, u8),
}

thread_local! {
    /// This thread's answers of the placement engine for placed pool buffers (issue #31): the
    /// engine is a pure function of its inputs, so a buffer of the same inputs as one placed
    /// before gets the same rules without running it again.
    static PLACED_WITH: std::cell::RefCell<Vec<Option<(PlacedWithKey, PlacedWith)>>> =
        const { std::cell::RefCell::new(Vec::new()) };
}

pub(crate) fn policy_code(policy: Option<PlacementPolicy>) -> u8 {
    match policy {
        None => 0,
        Some(PlacementPolicy::Tight) => 1,
        Some(PlacementPolicy::Legacy) => 2,
    }
}

impl Device {
    /// How this device aligns placed resources (default [`PlacementPolicy::Tight`]).
    pub fn placement_policy(&self) -> PlacementPolicy {
        match self.placement_policy.load(std::sync::atomic::Ordering::Relaxed) {
            0 => PlacementPolicy::Tight,
            _ => PlacementPolicy::Legacy,
        }
    }

    /// Sets how resources placed from now on are aligned (those already placed stay where they are).
    pub fn set_placement_policy(&self, policy: PlacementPolicy) {
        let raw = match policy {
            PlacementPolicy::Tight => 0,
            PlacementPolicy::Legacy => 1,
        };
        self.placement_policy.store(raw, std::sync::atomic::Ordering::Relaxed);
    }

    /// Every offset floor of a buffer of `usage` on this device: [`crate::usage_alignment_floor`]
    /// of its limits and, for a possible build scratch, the scratch alignment (0: none). What
    /// every placement path (general heaps, pools, linear pools, transient heaps) applies.
    pub(crate) fn usage_floor(&self, usage: BufferUsage) -> u64 {
        residency_core::placement::usage_alignment_floor(usage, &self.profile().limits)
            .max(self.scratch_floor(usage))
    }

    /// The placement engine's messages about this device's resources (e.g. `ALIGNMENT_OVERRIDDEN`
    /// when a floor below the rules was clamped up), with the resource's name, oldest first; the
    /// last [`PLACEMENT_MESSAGES_KEPT`](crate::PLACEMENT_MESSAGES_KEPT).
    pub fn placement_messages(&self) -> Vec<(String, Message)> {
        self.placement_log.messages()
    }

    /// The rules a placed resource gets: what [`PlacementEngine`] answers under the resource's own
    /// policy or else the device's, for the object's own requirements, the usage's floors
    /// (buffers) and the caller's floor, for its placement (committed when asked for). A floor
    /// above the rules' maximum, or a resource's own `Tight` on a device without tight support, is
    /// [`MemoryError::Placement`].
    pub(crate) fn placed_alignment(
        &self,
        req: &PlaceRequest<'_>,
        usage: Option<BufferUsage>,
    ) -> Result<PlacedWith, MemoryError> {
        let placement = if req.committed { Placement::Committed } else { Placement::Placed };
        self.placed_with_rules(req, usage, self.placement_policy(), placement)
    }

    /// [`Device::placed_alignment`] with `default` (a pool's own, say) instead of the device's
    /// policy where the resource has none of its own, for `placement`.
    pub(crate) fn placed_with_rules(
        &self,
        req: &PlaceRequest<'_>,
        usage: Option<BufferUsage>,
        default: PlacementPolicy,
        placement: Placement,
    ) -> Result<PlacedWith, MemoryError> {
        self.placed_with_rules_reporting(req, usage, default, placement, &mut false)
    }

    /// [`Device::placed_with_rules`], saying in `reported` whether the engine sent a message.
    fn placed_with_rules_reporting(
        &self,
        req: &PlaceRequest<'_>,
        usage: Option<BufferUsage>,
        default: PlacementPolicy,
        placement: Placement,
        reported: &mut bool,
    ) -> Result<PlacedWith, MemoryError> {
        let limits = &self.profile().limits;
        let tier = self.tight_alignment_tier();
        // The usage's floors are the device's own rules for binding offsets (at most 256 B, a power of
        // two), not a request of the caller's: they go on top of the engine's answer, so that only
        // a floor the caller passed below the rules is reported as ALIGNMENT_OVERRIDDEN.
        let usage_floor = usage.map_or(0, |u| self.usage_floor(u));
        // The resource's own Tight goes to the engine as the tight flag whatever the tier (the
        // engine refuses it without support); a default Tight only where the device supports it.
        let tight = match req.policy {
            Some(policy) => policy == PlacementPolicy::Tight,
            None => default == PlacementPolicy::Tight && tier != TightAlignmentTier::NotSupported,
        };
        let buffer = matches!(req.target, DedicatedTarget::Buffer(_));
        // Images and raw requirements are described as a non-small texture: the engine then
        // keeps the driver's alignment (tight) or 64 KiB (legacy), on granularity pages for
        // optimal images. Buffers are buffers: at most 256 B tight, 64 KiB legacy.
        let mut desc = if buffer {
            ResourceDesc::buffer(req.requirements.size.max(1))
        } else if let Some(image) = req.image {
            image
        } else {
            ResourceDesc::texture_2d(Format::R8Unorm, 1, 1)
                .with_mip_levels(1)
                .with_flag(ResourceFlag::AllowRenderTarget)
        };
        if tight {
            desc = desc.tight();
        }
        desc = desc.with_alignment(req.alignment_floor);
        let source = ObjectRequirements { limits, requirements: req.requirements, tier };
        let engine = PlacementEngine::new(source);
        let mut log = LogSink { log: &self.placement_log, name: req.name, sent: false };
        // A second answer for the same resource (committed after all) reports nothing twice.
        let sink: &mut dyn MessageSink =
            if placement == Placement::Committed && !req.committed { &mut DiscardMessages } else { &mut log };
        let element = engine
            .resource_allocation_info(placement, &desc, sink)
            .map_err(|source| MemoryError::Placement { name: req.name.to_owned(), source })?;
        let policy = if tight { PlacementPolicy::Tight } else { PlacementPolicy::Legacy };
        *reported = log.sent;
        Ok(PlacedWith { policy, size: element.size, alignment: element.alignment.max(usage_floor) })
    }

    /// [`Device::placed_with_rules`] for a placed buffer of a pool (`req.target` a buffer, no
    /// image), from this thread's cache of the engine's answers: the engine runs once per set of
    /// inputs (requirements, usage, floor, policies) and device. An answer that sent a message
    /// (an overridden floor, …) is not kept, so every such buffer reports it as before: the
    /// second value says whether it was kept (a pure function of the inputs, which callers may
    /// keep too).
    pub(crate) fn pooled_placed_with(
        &self,
        req: &PlaceRequest<'_>,
        usage: BufferUsage,
        default: PlacementPolicy,
    ) -> Result<(PlacedWith, bool), MemoryError> {
        debug_assert!(matches!(req.target, DedicatedTarget::Buffer(_)) && req.image.is_none());
        let key = PlacedWithKey {
            device: self.uid(),
            usage: usage.bits(),
            requirements: req.requirements,
            alignment_floor: req.alignment_floor,
            policies: (policy_code(req.policy), policy_code(Some(default))),
        };
        let hash = key.device
            ^ u64::from(key.usage).rotate_left(24)
            ^ key.requirements.size
            ^ key.alignment_floor.rotate_left(48)
            ^ u64::from(key.policies.0 * 3 + key.policies.1).rotate_left(56);
        let at = (hash.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 55) as usize % PLACED_WITH_ENTRIES;
        let hit = PLACED_WITH.with(|table| match table.borrow().get(at) {
            Some(Some((k, placed_with))) if *k == key => Some(*placed_with),
            _ => None,
        });
        if let Some(placed_with) = hit {
            return Ok((placed_with, true));
        }
        let mut reported = false;
        let placed_with =
            self.placed_with_rules_reporting(req, Some(usage), default, Placement::Placed, &mut reported)?;
        if !reported {
            PLACED_WITH.with(|table| {
                let mut table = table.borrow_mut();
                if table.is_empty() {
                    table.resize(PLACED_WITH_ENTRIES, None);
                }
                table[at] = Some((key, placed_with));
            });
        }
        Ok((placed_with, !reported))
    }
}
