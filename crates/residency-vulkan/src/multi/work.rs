//! Multi-device work: compute and graphics programs on every device, views resolved per device,
//! work items that cache their per-device form, timelines, timestamps, and submission to one
//! chosen device.
//!
//! As in the seed, work is described once against multi-device resources and the switch to one
//! device happens at submission: [`MultiSubmitter::submit`] takes the device index, resolves each
//! item's per-device form (creating and caching descriptor sets, and a [`MultiGraphicsProgram`]'s
//! pipeline, on first use) and records it on that device's queue. Views are *resource +
//! descriptor*: a [`BufferView`] names a range of a [`MultiBuffer`] (checked against it) and
//! resolves to that range of the instance on the device of the submission, so the view follows
//! the buffer's mask (resolution iterates the resource's mask, not the pool's). Items:
//! [`DispatchItem`], [`IndirectDispatchItem`](crate::multi::indirect::IndirectDispatchItem),
//! [`CopyItem`], [`ImageCopyItem`] (image↔image, buffer↔image, checked per device),
//! [`RenderItem`] with [`DrawItem`]s (vertices, indexed, indirect, indexed indirect),
//! timestamps of [`MultiTimestamps`], occlusion and pipeline-statistics queries of
//! [`MultiQueryPool`] ([`crate::multi::queries`]), ray-tracing launches, and full barriers. The
//! barriers between items come from the state tracker of the submission's device
//! ([`BarrierMode::Tracked`], see [`MultiSubmitter::submit`]); storage buffers count as read and
//! written (the reflection does not say which); an item kind that does not declare its accesses
//! gets full barriers around it.

use crate::device::life::{ForeignUse, Garbage, GpuUse, Life};
use crate::device::set::DeviceSet;
use crate::device::Device;
use crate::error::{ErrorClass, ResidencyError};
use crate::error::{Result as VkResult, VkResultExt, VulkanError};
use crate::multi::barriers::{Access, Declared, Plan, Point};
pub use crate::multi::barriers::{BarrierMode, BarrierStats};
use crate::multi::copy::{self, ResolvedImageCopy};
pub use crate::multi::copy::{
    BufferImageRegion, CopyRefusal, ImageArea, ImageCopyError, ImageCopyItem, ImageCopyRegion,
};
use crate::multi::queries::{self as multi_queries, DrawQueries, DrawQuery, MultiQueryPool, QueryCopyItem};
use crate::multi::MultiImage;
use crate::multi::{
    device_count, fan_out_on, multi_device, resolve_mask, MultiBuffer, MultiDevice, MultiDeviceError,
    PerDevice,
};
use crate::pipelines::compute::{
    Binding, BindingError, BindingKind, ComputeProgram, DescriptorSet, DispatchError, ProgramError,
};
use crate::pipelines::graphics::{DrawError, GraphicsProgram, IndexFormat, RenderError, VertexAttribute};
use crate::pipelines::shaders::Shader;
use crate::poison::PoisonFree;
use crate::resources::buffer::Buffer;
use crate::sync::commands::{CommandContext, Submission};
use crate::sync::queries::QueryError;
use crate::sync::recording::{check_buffer_copy, Recording, Timestamps};
use crate::sync::tracking::{AccessFlags, CustomUse, PipelineStages, RecordError, Use};
use ash::vk;
use residency_core::device_mask::{DeviceIndex, DeviceMask};
use std::sync::{Arc, Mutex};

/// A compute program created on every device of a mask; each holds its device and is released
/// when dropped, after the GPU work that may use it.
#[derive(Debug)]
pub struct MultiComputeProgram {
    programs: PerDevice<ComputeProgram>,
    kinds: Vec<BindingKind>,
}

impl MultiComputeProgram {
    /// The kinds of its set-0 bindings (a [`DispatchItem`] takes one resource for each).
    pub fn bindings(&self) -> &[BindingKind] {
        &self.kinds
    }

    /// Creates the program `name` of a shipped compute `shader` on every open device of `mask`
    /// (rolled back if one fails), as [`ComputeProgram::new`] does on one.
    pub fn new(
        set: &DeviceSet,
        mask: DeviceMask,
        name: &str,
        shader: &Shader,
        max_sets: u32,
    ) -> Result<Self, MultiDeviceError<ProgramError>> {
        let programs = fan_out_on(set, mask, |d| ComputeProgram::new(d, name, shader, max_sets))?;
        Ok(MultiComputeProgram { programs, kinds: shader.bindings().to_vec() })
    }

    /// Creates a program from the renderer's own SPIR-V on every open device of `mask` (rolled
    /// back if one fails), as [`ComputeProgram::from_spirv`] does on one; what the reflection
    /// can see is refused with a [`ProgramError`] before any Vulkan call.
    ///
    /// # Safety
    ///
    /// The contract of [`ComputeProgram::from_spirv`], for every device of `mask`.
    pub unsafe fn from_spirv(
        set: &DeviceSet,
        mask: DeviceMask,
        name: &str,
        spirv: &[u32],
        kinds: &[BindingKind],
        push_constant_bytes: u32,
        max_sets: u32,
    ) -> Result<Self, MultiDeviceError<ProgramError>> {
        let programs = fan_out_on(set, mask, |d| {
            // SAFETY: the caller's contract covers every device of `mask`.
            unsafe { ComputeProgram::from_spirv(d, name, spirv, kinds, push_constant_bytes, max_sets) }
        })?;
        Ok(MultiComputeProgram { programs, kinds: kinds.to_vec() })
    }
}

/// A range of a multi-device buffer, resolved per device at submission (resource + descriptor):
/// `size` bytes from `offset`, the same range of the instance on whichever device the work is
/// submitted to. Made by [`BufferView::whole`] or by [`BufferView::range`], which checks the
/// range against the buffer; resolution checks it again against that device's instance.
#[derive(Clone, Copy, Debug)]
pub struct BufferView<'a> {
    buffer: &'a MultiBuffer,
    offset: u64,
    size: u64,
}

/// A [`BufferView`] range that is empty or not inside its buffer.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("a view of {size} B at {offset} of `{name}` is empty or outside its {buffer_size} B")]
pub struct ViewRangeError {
    /// The buffer.
    pub name: String,
    /// The view's offset.
    pub offset: u64,
    /// The view's size.
    pub size: u64,
    /// The buffer's size.
    pub buffer_size: u64,
}

impl ResidencyError for ViewRangeError {
    fn class(&self) -> ErrorClass {
        ErrorClass::Refused
    }
}

/// A [`BufferView`] resolved on one device: the instance there and the view's range in it.
#[derive(Clone, Copy, Debug)]
pub struct DeviceBufferView<'a> {
    /// The instance.
    pub buffer: &'a Buffer,
    /// Bytes into it.
    pub offset: u64,
    /// Bytes of the view.
    pub size: u64,
}

impl<'a> BufferView<'a> {
    /// The whole buffer.
    pub fn whole(buffer: &'a MultiBuffer) -> Self {
        BufferView { buffer, offset: 0, size: buffer.size() }
    }

    /// `size` bytes of `buffer` from `offset`; an empty range or one not inside the buffer is
    /// refused.
    pub fn range(buffer: &'a MultiBuffer, offset: u64, size: u64) -> Result<Self, ViewRangeError> {
        check_range(buffer.name(), offset, size, buffer.size())?;
        Ok(BufferView { buffer, offset, size })
    }

    /// The buffer.
    pub fn buffer(&self) -> &'a MultiBuffer {
        self.buffer
    }

    /// Bytes into the buffer.
    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// Bytes of the view.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// The instance on `device` with the view's range in it: an error naming the device when the
    /// buffer is not there, [`WorkError::Range`] when the range is not inside that instance.
    pub fn resolve(&self, device: DeviceIndex) -> Result<DeviceBufferView<'a>, WorkError> {
        let buffer = self
            .buffer
            .instance(device)
            .ok_or(WorkError::NotOnDevice { name: self.buffer.name().to_owned(), device })?;
        check_range(buffer.name(), self.offset, self.size, buffer.size())?;
        Ok(DeviceBufferView { buffer, offset: self.offset, size: self.size })
    }

    /// The descriptor binding of the view on `device`.
    fn binding(&self, device: DeviceIndex) -> Result<Binding<'a>, WorkError> {
        let v = self.resolve(device)?;
        Ok(if v.offset == 0 && v.size == v.buffer.size() {
            Binding::Buffer(v.buffer)
        } else {
            Binding::BufferRange { buffer: v.buffer, offset: v.offset, size: v.size }
        })
    }
}

fn check_range(name: &str, offset: u64, size: u64, buffer_size: u64) -> Result<(), ViewRangeError> {
    if size == 0 || offset.checked_add(size).is_none_or(|end| end > buffer_size) {
        return Err(ViewRangeError { name: name.to_owned(), offset, size, buffer_size });
    }
    Ok(())
}

/// An image binding per device ([`Binding::Sampled`] or [`Binding::Storage`] of that device's
/// view), bound as one binding.
#[derive(Clone, Debug)]
pub struct PerDeviceImage<'a> {
    /// The binding on each device.
    pub views: Vec<(DeviceIndex, Binding<'a>)>,
}

/// What a binding of a work item refers to.
#[derive(Clone, Debug)]
pub enum MultiBinding<'a> {
    /// A buffer view.
    Buffer(BufferView<'a>),
    /// An image, with its view per device.
    Image(PerDeviceImage<'a>),
    /// A top-level acceleration structure, resolved to its structure on the device of the
    /// submission (a ray query's scene).
    AccelerationStructure(&'a crate::multi::accel::MultiAccelerationStructure),
    /// Multi-device images (one, or an array) and a multi-device sampler, resolved per device
    /// ([`crate::multi::bindless`]).
    Sampled(crate::multi::bindless::MultiSampled<'a>),
}

/// Work cannot be resolved or recorded for a device.
#[derive(Debug, thiserror::Error)]
pub enum WorkError {
    /// A resource of the item does not exist on the device the work was submitted to.
    #[error("`{name}` does not exist on {device}")]
    NotOnDevice {
        /// The resource.
        name: String,
        /// The device.
        device: DeviceIndex,
    },
    /// A dispatch breaks a limit of the device it was submitted to (nothing was recorded or
    /// submitted).
    #[error(transparent)]
    Dispatch(#[from] DispatchError),
    /// A resource does not fit its binding on the device (nothing was recorded or submitted).
    #[error(transparent)]
    Binding(#[from] BindingError),
    /// A copy item does not fit its buffers on the device (nothing was recorded or submitted).
    #[error("copy from `{src}` to `{dst}`: {reason}")]
    Copy {
        /// The source.
        src: String,
        /// The destination.
        dst: String,
        /// What is wrong.
        reason: &'static str,
    },
    /// A buffer view's range is not inside the instance on the device (nothing was recorded or
    /// submitted).
    #[error(transparent)]
    Range(#[from] ViewRangeError),
    /// A graphics program could not be created on the device on its first use there (nothing was
    /// recorded or submitted; a later submission tries again).
    #[error(transparent)]
    Program(#[from] ProgramError),
    /// A draw was refused on the device (nothing was submitted).
    #[error(transparent)]
    Draw(#[from] DrawError),
    /// A render pass was refused on the device: its target cannot be the program's attachment
    /// (nothing was submitted).
    #[error(transparent)]
    Render(#[from] RenderError),
    /// A timestamp item names a timestamp outside its pool (nothing was recorded or submitted).
    #[error("timestamp {index} of `{name}`, which holds {count}")]
    Timestamp {
        /// The pool.
        name: String,
        /// The index asked for.
        index: u32,
        /// Timestamps in the pool.
        count: u32,
    },
    /// A draw of a render item is of another program than the item's.
    #[error("a draw of `{draw}` in a render pass of `{pass}`")]
    OtherProgram {
        /// The draw's program.
        draw: String,
        /// The render item's program.
        pass: String,
    },
    /// The barriers between the items could not be planned or recorded (nothing was submitted).
    #[error(transparent)]
    Barrier(#[from] RecordError),
    /// An image copy item does not fit its images or buffers on the device (nothing was
    /// recorded or submitted).
    #[error(transparent)]
    ImageCopy(#[from] ImageCopyError),
    /// A ray-tracing launch was refused on the device (nothing was recorded or submitted).
    #[error(transparent)]
    RayTracing(#[from] crate::pipelines::ray_tracing::RayTracingError),
    /// A query item was refused (nothing was recorded or submitted), or a query's results
    /// cannot be read.
    #[error(transparent)]
    Query(#[from] QueryError),
    /// An indirect dispatch's argument view was refused on the device, or its clamp pass could
    /// not be made there (nothing was recorded or submitted).
    #[error(transparent)]
    Indirect(#[from] crate::multi::indirect::IndirectError),
    /// A Vulkan call failed.
    #[error(transparent)]
    Vulkan(#[from] VulkanError),
}

impl ResidencyError for WorkError {
    fn class(&self) -> ErrorClass {
        match self {
            WorkError::RayTracing(e) => e.class(),
            WorkError::Barrier(e) => e.class(),
            WorkError::Dispatch(e) => e.class(),
            WorkError::Binding(e) => e.class(),
            WorkError::Range(e) => e.class(),
            WorkError::Program(e) => e.class(),
            WorkError::Draw(e) => e.class(),
            WorkError::Render(e) => e.class(),
            WorkError::Vulkan(e) => e.class(),
            WorkError::ImageCopy(e) => e.class(),
            WorkError::Query(e) => e.class(),
            WorkError::Indirect(e) => e.class(),
            WorkError::NotOnDevice { .. }
            | WorkError::Copy { .. }
            | WorkError::Timestamp { .. }
            | WorkError::OtherProgram { .. } => ErrorClass::Refused,
        }
    }
}

/// The per-device descriptor sets of a work item: per device, the generations of the bound
/// buffers when the set was written, and the set.
pub(crate) type SetCache = Mutex<Vec<(DeviceIndex, Vec<u64>, DescriptorSet)>>;

/// The descriptor set of `bindings` on `index`: the cached one while the bound buffers' instances
/// are unchanged, else one made by `make` from the bindings resolved there (and cached).
pub(crate) fn cached_set(
    bindings: &[MultiBinding<'_>],
    sets: &SetCache,
    index: DeviceIndex,
    make: impl FnOnce(&[Binding<'_>]) -> Result<DescriptorSet, BindingError>,
) -> Result<DescriptorSet, WorkError> {
    let generations: Vec<u64> = bindings
        .iter()
        .filter_map(|b| match b {
            MultiBinding::Buffer(view) => Some(view.buffer.generation()),
            MultiBinding::Image(_) | MultiBinding::AccelerationStructure(_) | MultiBinding::Sampled(_) => {
                None
            }
        })
        .collect();
    let mut sets = sets.locked();
    if let Some((_, cached, set)) = sets.iter().find(|(i, ..)| *i == index) {
        if *cached == generations {
            return Ok(set.clone());
        }
    }
    // Multi-device images resolve to views owned here, which the bindings borrow.
    let sampled = bindings
        .iter()
        .map(|b| match b {
            MultiBinding::Sampled(s) => s.resolve(index).map(Some),
            _ => Ok(None),
        })
        .collect::<Result<Vec<_>, WorkError>>()?;
    let refs: Vec<Vec<_>> =
        sampled.iter().map(|s| s.as_ref().map_or_else(Vec::new, |s| s.view_refs())).collect();
    let mut resolved = Vec::with_capacity(bindings.len());
    for (i, binding) in bindings.iter().enumerate() {
        resolved.push(match binding {
            MultiBinding::Buffer(view) => view.binding(index)?,
            MultiBinding::Sampled(_) => sampled[i].as_ref().expect("resolved above").binding(&refs[i]),
            MultiBinding::Image(images) => {
                let &(_, binding) = images
                    .views
                    .iter()
                    .find(|(i, _)| *i == index)
                    .ok_or(WorkError::NotOnDevice { name: "image view".to_owned(), device: index })?;
                binding
            }
            MultiBinding::AccelerationStructure(s) => Binding::AccelerationStructure(
                s.resolve(index)
                    .ok_or(WorkError::NotOnDevice { name: s.name().to_owned(), device: index })?,
            ),
        });
    }
    // A new set for a new form (the old one may still be in use by work in flight: what it
    // binds is released after that work, and its memory goes with the program's pool).
    let set = make(&resolved)?;
    sets.retain(|(i, ..)| *i != index);
    sets.push((index, generations, set.clone()));
    Ok(set)
}

/// A compute dispatch over multi-device resources; its descriptor set per device is created on the
/// first submission to that device and reused after.
#[derive(Debug)]
pub struct DispatchItem<'a> {
    program: &'a MultiComputeProgram,
    bindings: Vec<MultiBinding<'a>>,
    push_constants: Vec<u8>,
    groups: [u32; 3],
    sets: SetCache,
}

impl<'a> DispatchItem<'a> {
    /// Describes a dispatch of `program` with `bindings` (one per binding of the program; another
    /// count is refused at submission with `BindingError::Count`).
    pub fn new(
        program: &'a MultiComputeProgram,
        bindings: Vec<MultiBinding<'a>>,
        push_constants: &[u8],
        groups: [u32; 3],
    ) -> Self {
        // A count that does not match the program's bindings is refused at submission, where the
        // per-device descriptor set is made (`BindingError::Count`), with nothing submitted.
        DispatchItem {
            program,
            bindings,
            push_constants: push_constants.to_vec(),
            groups,
            sets: Mutex::new(Vec::new()),
        }
    }

    /// How many devices have a cached per-device form.
    pub fn cached_devices(&self) -> usize {
        self.sets.locked().len()
    }

    fn set_for(&self, index: DeviceIndex) -> Result<(DescriptorSet, &ComputeProgram), WorkError> {
        let program = self
            .program
            .programs
            .get(index)
            .ok_or(WorkError::NotOnDevice { name: "compute program".to_owned(), device: index })?;
        let set = cached_set(&self.bindings, &self.sets, index, |b| program.descriptor_set(b))?;
        Ok((set, program))
    }
}

/// A copy between multi-device buffer views (same offsets on every device). The offsets are
/// bytes into the views, and the copy must lie inside both views.
#[derive(Clone, Copy, Debug)]
pub struct CopyItem<'a> {
    /// Source.
    pub src: BufferView<'a>,
    /// Destination.
    pub dst: BufferView<'a>,
    /// Byte offset in the source view.
    pub src_offset: u64,
    /// Byte offset in the destination view.
    pub dst_offset: u64,
    /// Bytes to copy.
    pub size: u64,
}

/// One item of work.
#[derive(Debug)]
pub enum WorkItem<'a, 'b> {
    /// A dispatch.
    Dispatch(&'b DispatchItem<'a>),
    /// A dispatch whose workgroup counts the GPU reads from an argument view
    /// ([`crate::multi::indirect`]).
    DispatchIndirect(&'b crate::multi::indirect::IndirectDispatchItem<'a>),
    /// A copy.
    Copy(CopyItem<'a>),
    /// A render pass of draws.
    Render(RenderItem<'a, 'b>),
    /// A copy between images, or between a buffer and an image.
    ImageCopy(&'b ImageCopyItem<'a>),
    /// Writes timestamp `index` of the submission's device's pool once the earlier items have
    /// finished.
    Timestamp(&'a MultiTimestamps, u32),
    /// A full memory barrier between the previous items and the next.
    Barrier,
    /// A ray-tracing launch (`vkCmdTraceRaysKHR`) with its program's shader table on the device.
    TraceRays(&'b crate::multi::accel::TraceRaysItem<'a>),
    /// Resets and begins query `index` of the submission's device's pool, outside a render pass
    /// (around dispatches, copies and whole render passes); ended by a [`WorkItem::EndQuery`] of
    /// the same submission ([`crate::multi::queries`]).
    BeginQuery(&'a MultiQueryPool, u32),
    /// Ends query `index`, begun earlier in the submission.
    EndQuery(&'a MultiQueryPool, u32),
    /// Copies query results into a buffer view on the submission's device.
    CopyQueryResults(QueryCopyItem<'a>),
    /// A render pass with queries around ranges of its draws, inside the pass.
    QueriedRender(RenderItem<'a, 'b>, &'b [DrawQuery<'a>]),
}

/// A command context on each device, for submitting work items to one chosen device.
#[derive(Debug)]
pub struct MultiSubmitter {
    contexts: PerDevice<CommandContext>,
    /// How the items of a submission are ordered.
    barriers: BarrierMode,
    /// The barriers recorded so far, per device.
    stats: Mutex<Vec<(DeviceIndex, BarrierStats)>>,
}

/// Checks a copy item resolved on one device: inside both views, then [`check_buffer_copy`] at
/// the views' offsets.
fn check_copy(
    src: DeviceBufferView<'_>,
    dst: DeviceBufferView<'_>,
    c: &CopyItem<'_>,
) -> Result<vk::BufferCopy, WorkError> {
    let refuse = |reason| WorkError::Copy {
        src: src.buffer.name().to_owned(),
        dst: dst.buffer.name().to_owned(),
        reason,
    };
    let inside = |offset: u64, view: DeviceBufferView<'_>| {
        offset.checked_add(c.size).is_some_and(|end| end <= view.size)
    };
    if !inside(c.src_offset, src) || !inside(c.dst_offset, dst) {
        return Err(refuse("the range is outside a view"));
    }
    check_buffer_copy(src.buffer, src.offset + c.src_offset, dst.buffer, dst.offset + c.dst_offset, c.size)
        .map_err(refuse)
}

impl MultiSubmitter {
    /// A command context on every open device of `mask`.
    pub fn new(set: &DeviceSet, mask: DeviceMask) -> Result<Self, MultiDeviceError<VulkanError>> {
        let contexts = fan_out_on(set, mask, |d| CommandContext::new(d, "multi-device work"))?;
        Ok(MultiSubmitter { contexts, barriers: BarrierMode::default(), stats: Mutex::new(Vec::new()) })
    }

    /// The submitter with its items ordered under `mode` (by default [`BarrierMode::Tracked`]:
    /// the barriers the per-device resource states require; [`BarrierMode::Full`]: the full
    /// barriers of before the tracker, for comparison).
    pub fn with_barriers(mut self, mode: BarrierMode) -> Self {
        self.barriers = mode;
        self
    }

    /// How the items of a submission are ordered.
    pub fn barrier_mode(&self) -> BarrierMode {
        self.barriers
    }

    /// The barriers recorded on `device` by the submissions made so far (zero before the first).
    pub fn barrier_stats(&self, device: DeviceIndex) -> BarrierStats {
        self.stats.locked().iter().find(|(i, _)| *i == device).map_or_else(BarrierStats::default, |(_, s)| *s)
    }

    /// Records `items` for `device` — each resolved to its per-device form — with the barriers
    /// between them (under [`BarrierMode::Tracked`]: the ones the per-device resource states
    /// require, each gap's as one `vkCmdPipelineBarrier2`, and one at the end that makes every
    /// used resource available to later work and the host; an item kind that does not declare
    /// its accesses gets a full barrier before and after it), submits them to that device's
    /// universal queue, and returns the submission. [`MultiSubmitter::barrier_stats`] counts the
    /// barriers.
    ///
    /// A dispatch over that device's limits ([`WorkError::Dispatch`]) fails before any item is
    /// resolved, recorded or submitted; a resource missing on the device, a view range outside its
    /// instance, a copy outside its views, an image copy that its instances there refuse
    /// ([`WorkError::ImageCopy`]), or a draw reading past its vertex, index or indirect
    /// view fails before anything is recorded. A draw or render pass that the checked
    /// [`Drawing`](crate::graphics::Drawing) refuses while recording (e.g. a target without
    /// `COLOR_ATTACHMENT` usage, a sampled image in another layout) is returned as that error and
    /// nothing is submitted. Query items are checked as [`crate::multi::queries`] says (indices,
    /// begins and ends in pairs, copies of ended queries) before anything is recorded
    /// ([`WorkError::Query`]); once submitted, the queries the items end are noted as written.
    pub fn submit(&self, device: DeviceIndex, items: &[WorkItem<'_, '_>]) -> Result<Submission, WorkError> {
        let context = self
            .contexts
            .get(device)
            .ok_or(WorkError::NotOnDevice { name: "submitter".to_owned(), device })?;
        let dev = context.device();
        // Limits first, so that a refused dispatch creates no descriptor set either.
        for item in items {
            if let WorkItem::Dispatch(d) = item {
                let program = d
                    .program
                    .programs
                    .get(device)
                    .ok_or(WorkError::NotOnDevice { name: "compute program".to_owned(), device })?;
                if !program.device().is(dev) {
                    return Err(WorkError::NotOnDevice { name: program.name().to_owned(), device });
                }
                program.check_dispatch(&d.push_constants, d.groups)?;
            }
            if let WorkItem::DispatchIndirect(d) = item {
                d.check(dev)?;
            }
        }
        // Resolve everything first, so that a missing instance fails before anything is recorded.
        enum Resolved<'r> {
            Dispatch(DescriptorSet, &'r ComputeProgram, &'r DispatchItem<'r>),
            DispatchIndirect(crate::multi::indirect::ResolvedIndirect<'r>),
            Copy(&'r Buffer, &'r Buffer, vk::BufferCopy),
            Render(ResolvedRender<'r>),
            ImageCopy(ResolvedImageCopy<'r>),
            Timestamp(&'r Timestamps, u32),
            Barrier,
            Trace(crate::multi::accel::ResolvedTrace<'r>),
            BeginQuery(multi_queries::ResolvedQuery<'r>),
            EndQuery(multi_queries::ResolvedQuery<'r>),
            CopyQuery(multi_queries::ResolvedCopy<'r>),
            QueriedRender(ResolvedRender<'r>, Vec<multi_queries::ResolvedDrawQuery<'r>>),
        }
        let mut resolved = Vec::with_capacity(items.len());
        for item in items {
            resolved.push(match item {
                WorkItem::Dispatch(d) => {
                    let (set, program) = d.set_for(device)?;
                    Resolved::Dispatch(set, program, d)
                }
                WorkItem::DispatchIndirect(d) => Resolved::DispatchIndirect(d.resolve(dev)?),
                WorkItem::Copy(c) => {
                    let (src, dst) = (c.src.resolve(device)?, c.dst.resolve(device)?);
                    if !src.buffer.device().is(dev) || !dst.buffer.device().is(dev) {
                        return Err(WorkError::NotOnDevice { name: src.buffer.name().to_owned(), device });
                    }
                    Resolved::Copy(src.buffer, dst.buffer, check_copy(src, dst, c)?)
                }
                WorkItem::Render(r) => Resolved::Render(resolve_render(r, dev)?),
                WorkItem::ImageCopy(c) => Resolved::ImageCopy(copy::resolve(c, dev)?),
                WorkItem::Timestamp(t, index) => {
                    let pool = t.resolve(device, *index)?;
                    if !pool.device().is(dev) {
                        return Err(WorkError::NotOnDevice { name: pool.name().to_owned(), device });
                    }
                    Resolved::Timestamp(pool, *index)
                }
                WorkItem::Barrier => Resolved::Barrier,
                WorkItem::TraceRays(t) => Resolved::Trace(t.resolve(device, dev)?),
                WorkItem::BeginQuery(p, index) => {
                    Resolved::BeginQuery(multi_queries::resolve_query(p, *index, device, dev)?)
                }
                WorkItem::EndQuery(p, index) => {
                    Resolved::EndQuery(multi_queries::resolve_query(p, *index, device, dev)?)
                }
                WorkItem::CopyQueryResults(c) => {
                    Resolved::CopyQuery(multi_queries::resolve_copy(c, device, dev)?)
                }
                WorkItem::QueriedRender(r, queries) => Resolved::QueriedRender(
                    resolve_render(r, dev)?,
                    multi_queries::resolve_draw_queries(queries, r.draws.len(), device, dev)?,
                ),
            });
        }
        multi_queries::check_sequence(items, device)?;
        // What each item reads and writes on this device, and the barriers between them.
        let mut declared = Vec::with_capacity(resolved.len());
        for (item, r) in items.iter().zip(&resolved) {
            declared.push(match (item, r) {
                (_, Resolved::Dispatch(_, _, d)) => {
                    let kinds = &d.program.kinds;
                    let stages = PipelineStages::COMPUTE_SHADER;
                    binding_accesses(&d.bindings, kinds, stages, device)?
                        .map_or(Declared::Undeclared, Declared::Accesses)
                }
                (_, Resolved::Copy(src, dst, region)) => Declared::Accesses(vec![
                    Access::Buffer {
                        buffer: src,
                        offset: region.src_offset - src.offset(),
                        size: region.size,
                        use_: Use::TransferSrc,
                    },
                    Access::Buffer {
                        buffer: dst,
                        offset: region.dst_offset - dst.offset(),
                        size: region.size,
                        use_: Use::TransferDst,
                    },
                ]),
                (WorkItem::Render(item), Resolved::Render(r)) => {
                    render_accesses(item, r, device)?.map_or(Declared::Undeclared, Declared::Accesses)
                }
                (WorkItem::DispatchIndirect(item), Resolved::DispatchIndirect(r)) => {
                    item.accesses(r, device)?.map_or(Declared::Undeclared, Declared::Accesses)
                }
                (_, Resolved::ImageCopy(c)) => Declared::Accesses(c.accesses()),
                (WorkItem::TraceRays(item), Resolved::Trace(r)) => {
                    item.accesses(r, device)?.map_or(Declared::Undeclared, Declared::Accesses)
                }
                // Queries are ordered by the query commands, not by memory: a begin or end
                // touches no memory; a copy of results writes its destination view.
                (_, Resolved::BeginQuery(_) | Resolved::EndQuery(_)) => Declared::Accesses(Vec::new()),
                (_, Resolved::CopyQuery(c)) => Declared::Accesses(c.accesses()),
                (WorkItem::QueriedRender(item, _), Resolved::QueriedRender(r, _)) => {
                    render_accesses(item, r, device)?.map_or(Declared::Undeclared, Declared::Accesses)
                }
                (_, Resolved::Timestamp(..)) => Declared::Accesses(Vec::new()),
                (_, Resolved::Barrier) => Declared::FullBarrier,
                // Cannot happen (each item resolves to its own kind); full barriers around it.
                _ => Declared::Undeclared,
            });
        }
        let plan = Plan::new(dev, self.barriers, &declared).map_err(RecordError::from)?;
        let mut stats = BarrierStats { submissions: 1, ..BarrierStats::default() };
        // A barrier batch the tracker refused while recording (nothing is submitted).
        let mut barrier_refused: Option<RecordError> = None;
        // The first draw or render pass refused while recording: the submission is refused too.
        let mut refused: Option<WorkError> = None;
        let submission = context.submit(&[], |rec| {
            let mut barrier = |rec: &mut Recording<'_>, point: Point| -> bool {
                let Err(e) = plan.record(rec, point, &mut stats) else { return true };
                rec.refuse_submission(VulkanError::Unsupported {
                    device: dev.name().to_owned(),
                    reason: format!("a refused barrier: {e}"),
                });
                barrier_refused = Some(e);
                false
            };
            if !barrier(rec, Point::Opening) {
                return;
            }
            // Outer queries begun and not yet ended: a recording that stops early (a refused
            // barrier or draw) ends them, so no query is left active at vkEndCommandBuffer.
            let mut open: Vec<&multi_queries::ResolvedQuery<'_>> = Vec::new();
            let mut aborted = false;
            for (n, r) in resolved.iter().enumerate() {
                if !barrier(rec, Point::Before(n)) {
                    aborted = true;
                    break;
                }
                match r {
                    // The program and set are this device's, checked against its limits before
                    // anything was resolved.
                    Resolved::Dispatch(set, program, d) => {
                        program.record_checked(rec, set, &d.push_constants, d.groups)
                    }
                    Resolved::DispatchIndirect(d) => d.record(rec),
                    Resolved::Copy(src, dst, region) => {
                        rec.keep(src.life());
                        rec.keep(dst.life());
                        // SAFETY: `rec` is recording on this device outside a render pass; both
                        // buffers are live instances on it (checked above), held by the recording,
                        // with the usages, a non-empty in-bounds range and no overlap (`check_copy`).
                        unsafe { dev.raw().cmd_copy_buffer(rec.raw(), src.raw(), dst.raw(), &[*region]) };
                        rec.recorded();
                    }
                    Resolved::Render(r) => {
                        if let Err(e) = record_render(rec, r, &[], plan.own_barriers(n)) {
                            rec.refuse_submission(VulkanError::Unsupported {
                                device: dev.name().to_owned(),
                                reason: format!("a refused draw: {e}"),
                            });
                            refused = Some(e);
                            break;
                        }
                    }
                    Resolved::ImageCopy(c) => copy::record(rec, c),
                    Resolved::Timestamp(t, index) => {
                        t.cmd_write(rec, *index).expect("the pool of the recording's device (checked)")
                    }
                    // Its full barrier is the plan's before the next item.
                    Resolved::Barrier => {}
                    Resolved::Trace(t) => t.record(rec),
                    Resolved::BeginQuery(q) => {
                        multi_queries::record_begin(rec, q);
                        open.push(q);
                    }
                    Resolved::EndQuery(q) => {
                        multi_queries::record_end(rec, q);
                        open.retain(|o| !o.is(q));
                    }
                    Resolved::CopyQuery(c) => multi_queries::record_copy(rec, c),
                    Resolved::QueriedRender(r, queries) => {
                        multi_queries::reset_draw_queries(rec, queries);
                        if let Err(e) = record_render(rec, r, queries, plan.own_barriers(n)) {
                            rec.refuse_submission(VulkanError::Unsupported {
                                device: dev.name().to_owned(),
                                reason: format!("a refused draw: {e}"),
                            });
                            refused = Some(e);
                            break;
                        }
                    }
                }
            }
            // Empty unless the loop stopped early (`check_sequence` pairs every begin and end).
            for q in open {
                multi_queries::record_end(rec, q);
            }
            if !aborted {
                barrier(rec, Point::Closing);
            }
        });
        if let Some(e) = refused {
            return Err(e);
        }
        if let Some(e) = barrier_refused {
            return Err(e.into());
        }
        let submission = submission?;
        multi_queries::note_written(items, device);
        // A render item that orders itself records two image barriers around its target.
        let own_renders = resolved
            .iter()
            .enumerate()
            .filter(|(n, r)| {
                matches!(r, Resolved::Render(_) | Resolved::QueriedRender(..)) && plan.own_barriers(*n)
            })
            .count() as u64;
        stats.commands += 2 * own_renders;
        stats.image += 2 * own_renders;
        let mut all = self.stats.locked();
        match all.iter_mut().find(|(i, _)| *i == device) {
            Some((_, s)) => s.add(&stats),
            None => all.push((device, stats)),
        }
        Ok(submission)
    }

    /// Waits for a submission made on `device`.
    pub fn wait(&self, device: DeviceIndex, submission: Submission) -> Result<(), WorkError> {
        let context = self
            .contexts
            .get(device)
            .ok_or(WorkError::NotOnDevice { name: "submitter".to_owned(), device })?;
        context.wait(submission).map_err(WorkError::from)
    }

    /// Waits for everything and destroys the command contexts.
    pub fn destroy(self) {
        for (_, context) in self.contexts.into_values() {
            context.destroy();
        }
    }
}

/// A host signal of a timeline was refused on one device; nothing was signalled on any device.
#[derive(Debug, thiserror::Error)]
pub enum TimelineError {
    /// The value is not greater than the timeline's current value (Vulkan's timeline values only
    /// increase).
    #[error("timeline value {requested} is not greater than the current value {current}")]
    NotIncreasing {
        /// The device's current value.
        current: u64,
        /// The value asked for.
        requested: u64,
    },
    /// The value is further above the current value than the device's
    /// `maxTimelineSemaphoreValueDifference`.
    #[error(
        "timeline value {requested} is more than maxTimelineSemaphoreValueDifference = {limit} \
         past the current value {current}"
    )]
    DifferenceTooLarge {
        /// The device's current value.
        current: u64,
        /// The value asked for.
        requested: u64,
        /// The device's limit.
        limit: u64,
    },
    /// A Vulkan call failed.
    #[error(transparent)]
    Vulkan(#[from] VulkanError),
}

impl ResidencyError for TimelineError {
    fn class(&self) -> ErrorClass {
        match self {
            TimelineError::Vulkan(e) => e.class(),
            TimelineError::NotIncreasing { .. } | TimelineError::DifferenceTooLarge { .. } => {
                ErrorClass::Refused
            }
        }
    }
}

/// One device's instance of a [`MultiTimeline`]: the semaphore, its device and that device's
/// `maxTimelineSemaphoreValueDifference`; the life releases the semaphore.
#[derive(Debug)]
pub struct DeviceTimeline {
    semaphore: vk::Semaphore,
    device: Arc<Device>,
    max_difference: u64,
    life: Arc<Life>,
}

/// A timeline semaphore on each device of a mask (multi-device fences). It holds its devices and
/// is released when dropped, once residency's submissions before the drop (and the renderer's
/// uses declared with [`MultiTimeline::used_until`]) have completed.
#[derive(Debug)]
pub struct MultiTimeline {
    /// How many device indices the set has (mask bits beyond it are ignored).
    device_count: u32,
    semaphores: PerDevice<DeviceTimeline>,
    /// Held from reading the current values to signalling, so two host signals cannot both pass
    /// the check against the same current value.
    signalling: Mutex<()>,
}

impl MultiTimeline {
    /// A timeline starting at `initial` on every open device of `mask`. A device without
    /// timeline semaphores is [`VulkanError::Unsupported`] (nothing is created).
    pub fn new(
        set: &DeviceSet,
        mask: DeviceMask,
        initial: u64,
    ) -> Result<Self, MultiDeviceError<VulkanError>> {
        let semaphores = fan_out_on(set, mask, |d| -> VkResult<DeviceTimeline> {
            if !d.features().timeline_semaphore {
                return Err(VulkanError::Unsupported {
                    device: d.name().to_owned(),
                    reason: "timeline semaphores (Vulkan 1.2) are not enabled".to_owned(),
                });
            }
            let mut timeline_props = vk::PhysicalDeviceTimelineSemaphoreProperties::default();
            let mut props = vk::PhysicalDeviceProperties2::default().push_next(&mut timeline_props);
            // SAFETY: a pure query of this device's physical device; the output chain is live.
            unsafe { d.instance().get_physical_device_properties2(d.physical(), &mut props) };
            let max_difference = timeline_props.max_timeline_semaphore_value_difference;
            let mut ty = vk::SemaphoreTypeCreateInfo::default()
                .semaphore_type(vk::SemaphoreType::TIMELINE)
                .initial_value(initial);
            let info = vk::SemaphoreCreateInfo::default().push_next(&mut ty);
            // SAFETY: valid device with the timeline semaphore feature enabled (checked above).
            let s = unsafe { d.raw().create_semaphore(&info, None) }.during("vkCreateSemaphore")?;
            d.set_name(s, "multi-device timeline");
            let id = d.ledger().track("semaphore", "multi-device timeline");
            let life = Life::new(Arc::clone(d), Garbage::Semaphore { raw: s, id }, None);
            Ok(DeviceTimeline { semaphore: s, device: Arc::clone(d), max_difference, life })
        })?;
        Ok(MultiTimeline { device_count: device_count(set), semaphores, signalling: Mutex::new(()) })
    }

    /// The semaphore on `device`, to wait on (or signal) in a submission of your own there.
    ///
    /// # Safety
    /// A GPU signal of it that you submit carries a value greater than every value
    /// [`MultiTimeline::signal`] set or will set while it is pending (a host signal below a pending
    /// GPU signal is invalid, and residency cannot see your submissions), and the semaphore is not
    /// used after the timeline is dropped and your work on it has completed.
    pub unsafe fn semaphore(&self, device: DeviceIndex) -> Option<vk::Semaphore> {
        self.semaphores.get(device).map(|t| t.semaphore)
    }

    /// The current value on every device.
    pub fn values(&self) -> Result<Vec<(DeviceIndex, u64)>, MultiDeviceError<VulkanError>> {
        self.semaphores.iter().map(|(i, t)| t.value().map(|v| (i, v))).collect()
    }

    /// Signals `value` from the host on every device of `mask` (within the timeline's mask;
    /// [`DeviceMask::ALL`]: the timeline's, see [`resolve_mask`]).
    ///
    /// `value` must be greater than the current value on each of those devices, and at most
    /// `maxTimelineSemaphoreValueDifference` above it; otherwise the error names the first device
    /// that refuses it ([`TimelineError::NotIncreasing`], [`TimelineError::DifferenceTooLarge`])
    /// and nothing is signalled anywhere. (A failure of `vkSignalSemaphore` itself, such as a lost
    /// device, can leave the devices before it signalled: a timeline cannot be moved back.)
    /// Signals the caller submits to the GPU through [`MultiTimeline::semaphore`] are not visible
    /// to this check: a pending GPU signal must have a value greater than `value` (Vulkan's
    /// rule), which stays the caller's to keep.
    pub fn signal(&self, mask: DeviceMask, value: u64) -> Result<(), MultiDeviceError<TimelineError>> {
        let mask = resolve_mask(mask, self.mask(), self.device_count)?;
        let _signalling = self.signalling.locked();
        let targets: Vec<(DeviceIndex, &DeviceTimeline)> =
            self.semaphores.iter().filter(|(i, _)| mask.contains(*i)).collect();
        for &(i, t) in &targets {
            let failed = |source| MultiDeviceError::Failed { device: i, source };
            let current = t.value().map_err(|e| e.map_source(TimelineError::from))?;
            if value <= current {
                return Err(failed(TimelineError::NotIncreasing { current, requested: value }));
            }
            if value - current > t.max_difference {
                return Err(failed(TimelineError::DifferenceTooLarge {
                    current,
                    requested: value,
                    limit: t.max_difference,
                }));
            }
        }
        for (i, t) in targets {
            let info = vk::SemaphoreSignalInfo::default().semaphore(t.semaphore).value(value);
            // SAFETY: the semaphore is a timeline of `t.device`. `value` is greater than its current
            // value and within maxTimelineSemaphoreValueDifference of it (checked above, under the
            // lock every host signal of this timeline takes, so no host signal moved it since).
            // Residency submits no GPU signal of it, and GPU signals submitted through the raw
            // handle stay above every host signal (`semaphore`'s `# Safety`).
            unsafe { t.device.raw().signal_semaphore(&info) }
                .during("vkSignalSemaphore")
                .map_err(|source| MultiDeviceError::Failed { device: i, source: source.into() })?;
        }
        Ok(())
    }

    /// Waits until every device of `mask` (within the timeline's mask; [`DeviceMask::ALL`]: the
    /// timeline's) reached `value` (or the timeout in nanoseconds passed).
    pub fn wait(
        &self,
        mask: DeviceMask,
        value: u64,
        timeout_ns: u64,
    ) -> Result<(), MultiDeviceError<VulkanError>> {
        let mask = resolve_mask(mask, self.mask(), self.device_count)?;
        for (i, t) in self.semaphores.iter().filter(|(i, _)| mask.contains(*i)) {
            let semaphores = [t.semaphore];
            let values = [value];
            let info = vk::SemaphoreWaitInfo::default().semaphores(&semaphores).values(&values);
            // SAFETY: the semaphore is a timeline of `t.device`; the arrays live for the call.
            unsafe { t.device.raw().wait_semaphores(&info, timeout_ns) }
                .during("vkWaitSemaphores")
                .map_err(|source| MultiDeviceError::Failed { device: i, source })?;
        }
        Ok(())
    }

    /// Declares a use of the renderer's own work on the use's device (a submission that waits on
    /// or signals [`MultiTimeline::semaphore`] there) that ends at `until`: dropping the timeline
    /// before then keeps that device's semaphore until then. A use of a device the timeline is
    /// not on is refused.
    pub fn used_until(&self, until: GpuUse) -> Result<(), ForeignUse> {
        self.semaphores
            .iter()
            .find(|(_, t)| t.device.uid() == until.device)
            .map_or(Err(ForeignUse), |(_, t)| t.life.used_until(until))
    }
}

impl DeviceTimeline {
    /// The semaphore, to wait on (or signal) in a submission of your own on its device.
    ///
    /// # Safety
    /// As for [`MultiTimeline::semaphore`].
    pub unsafe fn semaphore(&self) -> vk::Semaphore {
        self.semaphore
    }

    /// Its device.
    pub fn device(&self) -> &Arc<Device> {
        &self.device
    }

    /// The current value.
    fn value(&self) -> Result<u64, MultiDeviceError<VulkanError>> {
        // SAFETY: the semaphore is a timeline of `self.device`.
        unsafe { self.device.raw().get_semaphore_counter_value(self.semaphore) }
            .during("vkGetSemaphoreCounterValue")
            .map_err(|source| MultiDeviceError::Failed { device: self.device.index(), source })
    }
}

/// A graphics program for every device of a mask, each device's
/// [`GraphicsProgram`] created on the first submission that draws with it there and cached (a
/// device that never draws never compiles the pipeline). Each holds its device and is released
/// when dropped, after the GPU work that may use it.
///
/// Its shaders and vertex layout are those of [`GraphicsProgram::new`]; what that refuses is
/// refused at the first use on a device ([`WorkError::Program`]), with nothing created there.
#[derive(Debug)]
pub struct MultiGraphicsProgram {
    name: String,
    vertex: &'static Shader,
    fragment: &'static Shader,
    stride: u32,
    attributes: Vec<VertexAttribute>,
    color_format: vk::Format,
    max_sets: u32,
    /// The bindings of set 0 (the longer of the shaders' lists, which the other's must match).
    kinds: Vec<BindingKind>,
    /// The devices it may be created on, each with its program once created.
    programs: PerDevice<(Arc<Device>, std::sync::OnceLock<GraphicsProgram>)>,
    /// Held while a program is created, so one device never creates two.
    creating: Mutex<()>,
}

impl MultiGraphicsProgram {
    /// Describes the program `name` of the shipped `vertex` and `fragment` shaders (as
    /// [`GraphicsProgram::new`] takes them) for every open device of `mask`; nothing is created
    /// until a device first draws with it.
    #[allow(
        clippy::too_many_arguments,
        reason = "the arguments of GraphicsProgram::new, plus the device set and mask"
    )]
    pub fn new(
        set: &DeviceSet,
        mask: DeviceMask,
        name: &str,
        vertex: &'static Shader,
        fragment: &'static Shader,
        stride: u32,
        attributes: &[VertexAttribute],
        color_format: vk::Format,
        max_sets: u32,
    ) -> Result<Self, MultiDeviceError<ProgramError>> {
        let programs = fan_out_on(set, mask, |d| -> Result<_, ProgramError> {
            Ok((Arc::clone(d), std::sync::OnceLock::new()))
        })?;
        let kinds = if vertex.bindings().len() >= fragment.bindings().len() {
            vertex.bindings().to_vec()
        } else {
            fragment.bindings().to_vec()
        };
        Ok(MultiGraphicsProgram {
            name: name.to_owned(),
            vertex,
            fragment,
            stride,
            attributes: attributes.to_vec(),
            color_format,
            max_sets,
            kinds,
            programs,
            creating: Mutex::new(()),
        })
    }

    /// The kinds of its set-0 bindings (a [`DrawItem`] takes one resource for each).
    pub fn bindings(&self) -> &[BindingKind] {
        &self.kinds
    }

    /// The devices it may be created on.
    pub fn mask(&self) -> DeviceMask {
        self.programs.mask()
    }

    /// The devices it has been created on so far.
    pub fn created(&self) -> DeviceMask {
        self.programs.iter().filter(|(_, (_, p))| p.get().is_some()).map(|(i, _)| i).collect()
    }

    /// Its program on `device`, created on first use there.
    pub fn program(&self, device: DeviceIndex) -> Result<&GraphicsProgram, WorkError> {
        let (dev, cell) =
            self.programs.get(device).ok_or(WorkError::NotOnDevice { name: self.name.clone(), device })?;
        if let Some(program) = cell.get() {
            return Ok(program);
        }
        let _creating = self.creating.locked();
        if let Some(program) = cell.get() {
            return Ok(program);
        }
        let program = GraphicsProgram::new(
            dev,
            &self.name,
            self.vertex,
            self.fragment,
            self.stride,
            &self.attributes,
            self.color_format,
            self.max_sets,
        )?;
        Ok(cell.get_or_init(|| program))
    }
}

/// What a [`DrawItem`] draws.
#[derive(Clone, Copy, Debug)]
enum DrawCall<'a> {
    /// `count` vertices, `instances` times.
    Vertices { count: u32, instances: u32 },
    /// `count` indices of `indices`, `instances` times.
    Indexed { indices: BufferView<'a>, format: IndexFormat, count: u32, instances: u32 },
    /// The one `VkDrawIndirectCommand` at the start of `args`.
    Indirect { args: BufferView<'a> },
    /// The one `VkDrawIndexedIndirectCommand` at the start of `args`, through `indices`.
    IndexedIndirect { indices: BufferView<'a>, format: IndexFormat, args: BufferView<'a> },
}

/// A draw over multi-device resources (the seed's `DrawItem`): a [`MultiGraphicsProgram`], its
/// set-0 bindings, push constants, an optional vertex [`BufferView`] (bound at its offset) and
/// the draw — of vertices ([`DrawItem::new`]), indexed through an index view
/// ([`DrawItem::new_indexed`]) or indirect from an argument view ([`DrawItem::new_indirect`]).
/// Drawn by a [`RenderItem`]; its descriptor set per device is created on the first submission
/// to that device and reused after (rebuilt when a bound buffer's instances change).
#[derive(Debug)]
pub struct DrawItem<'a> {
    program: &'a MultiGraphicsProgram,
    bindings: Vec<MultiBinding<'a>>,
    push_constants: Vec<u8>,
    vertices: Option<BufferView<'a>>,
    call: DrawCall<'a>,
    sets: SetCache,
}

impl<'a> DrawItem<'a> {
    fn with_call(
        program: &'a MultiGraphicsProgram,
        bindings: Vec<MultiBinding<'a>>,
        vertices: Option<BufferView<'a>>,
        call: DrawCall<'a>,
    ) -> Self {
        // A count that does not match the program's bindings is refused at submission, where the
        // per-device descriptor set is made (`BindingError::Count`), with nothing submitted.
        DrawItem {
            program,
            bindings,
            push_constants: Vec::new(),
            vertices,
            call,
            sets: Mutex::new(Vec::new()),
        }
    }

    /// Draws `count` vertices from the start of `vertices` `instances` times with `program` and
    /// `bindings` (one per binding of set 0). Checked at submission: every vertex read lies inside
    /// the vertex view.
    ///
    /// # Panics
    /// When `bindings` is not one resource per binding of the program (as [`DispatchItem::new`];
    /// likewise for the indexed and indirect draws).
    pub fn new(
        program: &'a MultiGraphicsProgram,
        bindings: Vec<MultiBinding<'a>>,
        vertices: Option<BufferView<'a>>,
        count: u32,
        instances: u32,
    ) -> Self {
        Self::with_call(program, bindings, vertices, DrawCall::Vertices { count, instances })
    }

    /// Draws `count` indices of `format` from the start of `indices` `instances` times. Checked at
    /// submission: the indices lie inside the index view, whose offset is a multiple of the index
    /// size.
    ///
    /// # Safety
    /// The contents of the index buffer cannot be checked: on every device the item is submitted
    /// to, every index read when the draw runs must name a vertex inside the vertex view (an
    /// index `i` reads `i × stride` plus the attributes' bytes from the view's offset), when the
    /// program has vertex attributes ([`Drawing::draw_indexed`](crate::graphics::Drawing::draw_indexed)).
    #[allow(clippy::too_many_arguments, reason = "the draw's parts, as DrawItem::new takes them")]
    pub unsafe fn new_indexed(
        program: &'a MultiGraphicsProgram,
        bindings: Vec<MultiBinding<'a>>,
        vertices: Option<BufferView<'a>>,
        indices: BufferView<'a>,
        format: IndexFormat,
        count: u32,
        instances: u32,
    ) -> Self {
        Self::with_call(program, bindings, vertices, DrawCall::Indexed { indices, format, count, instances })
    }

    /// Draws with the one `VkDrawIndirectCommand` (16 bytes) at the start of `args`, read by the
    /// GPU when the draw runs. Checked at submission: the view holds 16 bytes at an offset that
    /// is a multiple of 4, and its buffer has `INDIRECT` usage.
    ///
    /// # Safety
    /// On every device the item is submitted to, the command read when the draw runs names only
    /// vertices inside the vertex view (when the program has vertex attributes) and has
    /// `firstInstance` 0 ([`Drawing::draw_indirect`](crate::graphics::Drawing::draw_indirect)).
    pub unsafe fn new_indirect(
        program: &'a MultiGraphicsProgram,
        bindings: Vec<MultiBinding<'a>>,
        vertices: Option<BufferView<'a>>,
        args: BufferView<'a>,
    ) -> Self {
        Self::with_call(program, bindings, vertices, DrawCall::Indirect { args })
    }

    /// Draws indexed through `indices` (of `format`) with the one `VkDrawIndexedIndirectCommand`
    /// (20 bytes) at the start of `args`, read by the GPU when the draw runs (written per device
    /// by an [`IndirectWriter`](crate::multi::indirect::IndirectWriter), for one). Checked at
    /// submission: the index view's offset is a multiple of the index size, the argument view
    /// holds 20 bytes at an offset that is a multiple of 4, and its buffer has `INDIRECT` usage.
    ///
    /// # Safety
    /// On every device the item is submitted to, the command read when the draw runs names only
    /// indices inside the index view, every vertex they name inside the vertex view (when the
    /// program has vertex attributes), and has `firstInstance` 0
    /// ([`Drawing::draw_indexed_indirect`](crate::graphics::Drawing::draw_indexed_indirect)).
    pub unsafe fn new_indexed_indirect(
        program: &'a MultiGraphicsProgram,
        bindings: Vec<MultiBinding<'a>>,
        vertices: Option<BufferView<'a>>,
        indices: BufferView<'a>,
        format: IndexFormat,
        args: BufferView<'a>,
    ) -> Self {
        Self::with_call(program, bindings, vertices, DrawCall::IndexedIndirect { indices, format, args })
    }

    /// The push constants of the draw (pushed before it; at most the program's size).
    pub fn with_push_constants(mut self, bytes: &[u8]) -> Self {
        self.push_constants = bytes.to_vec();
        self
    }

    /// How many devices have a cached per-device form.
    pub fn cached_devices(&self) -> usize {
        self.sets.locked().len()
    }
}

/// A render pass into a multi-device image with draws of one [`MultiGraphicsProgram`]. On the
/// device of the submission the target is that device's instance through its cached view of mip
/// 0 ([`MultiImage::view`]): its contents are discarded (it moves from `UNDEFINED` to
/// `COLOR_ATTACHMENT_OPTIMAL`), cleared to `clear` over `extent`, drawn, and left in `GENERAL`
/// for whatever reads it next.
#[derive(Clone, Copy, Debug)]
pub struct RenderItem<'a, 'b> {
    /// The program of every draw.
    pub program: &'a MultiGraphicsProgram,
    /// The colour target.
    pub target: &'a MultiImage,
    /// The render area from the origin.
    pub extent: [u32; 2],
    /// The clear colour.
    pub clear: [f32; 4],
    /// The draws, in order.
    pub draws: &'b [&'b DrawItem<'a>],
}

/// One draw of a render item resolved on a device.
struct ResolvedDraw<'r> {
    set: Option<DescriptorSet>,
    push_constants: &'r [u8],
    vertices: Option<DeviceBufferView<'r>>,
    call: ResolvedCall<'r>,
}

enum ResolvedCall<'r> {
    Vertices { count: u32, instances: u32 },
    Indexed { indices: DeviceBufferView<'r>, format: IndexFormat, count: u32, instances: u32 },
    Indirect { args: DeviceBufferView<'r> },
    IndexedIndirect { indices: DeviceBufferView<'r>, format: IndexFormat, args: DeviceBufferView<'r> },
}

/// A render item resolved on a device.
struct ResolvedRender<'r> {
    program: &'r GraphicsProgram,
    image: &'r crate::resources::image::Image,
    view: Arc<crate::resources::image::ImageView>,
    extent: [u32; 2],
    clear: [f32; 4],
    draws: Vec<ResolvedDraw<'r>>,
}

/// Resolves a render item on `dev`: the program (created on first use), the target's instance
/// and view, each draw's set and views, checked against the views' ranges.
fn resolve_render<'r>(r: &RenderItem<'r, 'r>, dev: &Device) -> Result<ResolvedRender<'r>, WorkError> {
    let device = dev.index();
    let program = r.program.program(device)?;
    let not_here = |name: &str| WorkError::NotOnDevice { name: name.to_owned(), device };
    if !program.device().is(dev) {
        return Err(not_here(program.name()));
    }
    let image = r.target.instance(device).ok_or_else(|| not_here("render target"))?;
    let view = r.target.view_on(dev, 0..1).map_err(|e| match e {
        MultiDeviceError::Failed { source, .. } => WorkError::Vulkan(source),
        _ => not_here(&image.desc().name),
    })?;
    // Before anything is recorded: the barriers into the attachment layout need the usage.
    program.check_target(&view, r.extent)?;
    let out_of_range = |what, needed, available| {
        WorkError::Draw(DrawError::OutOfRange { program: program.name().to_owned(), what, needed, available })
    };
    let mut draws = Vec::with_capacity(r.draws.len());
    for d in r.draws {
        if !std::ptr::eq(d.program, r.program) {
            return Err(WorkError::OtherProgram {
                draw: d.program.name.clone(),
                pass: r.program.name.clone(),
            });
        }
        let vertices = d.vertices.map(|v| v.resolve(device)).transpose()?;
        let bound = vertices.map_or(0, |v| v.size);
        let call = match d.call {
            DrawCall::Vertices { count, instances } => {
                let needed = if instances == 0 { 0 } else { program.vertex_bytes_read(count) };
                if needed > bound {
                    return Err(out_of_range("vertex", needed, bound));
                }
                ResolvedCall::Vertices { count, instances }
            }
            DrawCall::Indexed { indices, format, count, instances } => {
                let indices = indices.resolve(device)?;
                let needed = if instances == 0 { 0 } else { u64::from(count) * format.bytes() };
                if needed > indices.size {
                    return Err(out_of_range("index", needed, indices.size));
                }
                ResolvedCall::Indexed { indices, format, count, instances }
            }
            DrawCall::Indirect { args } => {
                let args = args.resolve(device)?;
                let needed = std::mem::size_of::<vk::DrawIndirectCommand>() as u64;
                if needed > args.size {
                    return Err(out_of_range("indirect", needed, args.size));
                }
                ResolvedCall::Indirect { args }
            }
            DrawCall::IndexedIndirect { indices, format, args } => {
                let (indices, args) = (indices.resolve(device)?, args.resolve(device)?);
                let needed = std::mem::size_of::<vk::DrawIndexedIndirectCommand>() as u64;
                if needed > args.size {
                    return Err(out_of_range("indirect", needed, args.size));
                }
                ResolvedCall::IndexedIndirect { indices, format, args }
            }
        };
        let set = if d.bindings.is_empty() {
            None
        } else {
            Some(cached_set(&d.bindings, &d.sets, device, |b| program.descriptor_set(b))?)
        };
        draws.push(ResolvedDraw { set, push_constants: &d.push_constants, vertices, call });
    }
    Ok(ResolvedRender { program, image, view, extent: r.extent, clear: r.clear, draws })
}

/// Records a layout change of mip 0 (the view's layers) of the render target.
fn target_barrier(
    rec: &mut Recording<'_>,
    r: &ResolvedRender<'_>,
    (src_stage, src_access, old): (vk::PipelineStageFlags2, vk::AccessFlags2, vk::ImageLayout),
    (dst_stage, dst_access, new): (vk::PipelineStageFlags2, vk::AccessFlags2, vk::ImageLayout),
) {
    let layers = r.view.layers();
    let barrier = [vk::ImageMemoryBarrier2::default()
        .src_stage_mask(src_stage)
        .src_access_mask(src_access)
        .dst_stage_mask(dst_stage)
        .dst_access_mask(dst_access)
        .old_layout(old)
        .new_layout(new)
        .image(r.image.raw())
        .subresource_range(vk::ImageSubresourceRange {
            aspect_mask: vk::ImageAspectFlags::COLOR,
            base_mip_level: 0,
            level_count: 1,
            base_array_layer: layers.start,
            layer_count: layers.end - layers.start,
        })];
    rec.keep(r.image.life());
    rec.transition(r.view.layouts(), 0..1, layers, old, new);
    // SAFETY: `rec` is recording on the image's device (the instance of the submission's device)
    // outside a render pass; the image is live and held by the recording; the subresources exist
    // (mip 0, the view's layers) and the old layout is UNDEFINED (contents discarded) or the one
    // the previous barrier of this item left them in, noted for the check at submission; the
    // stages and accesses are core ones the universal queue supports; the barrier lives for the
    // call.
    unsafe {
        rec.device()
            .raw()
            .cmd_pipeline_barrier2(rec.raw(), &vk::DependencyInfo::default().image_memory_barriers(&barrier))
    };
    rec.recorded();
}

/// Records a resolved render item: the target to `COLOR_ATTACHMENT_OPTIMAL`, the pass with its
/// draws through the checked [`Drawing`](crate::graphics::Drawing), the target to `GENERAL`.
/// Without `own` barriers the submitter's plan moved the target into `COLOR_ATTACHMENT_OPTIMAL`
/// before it and moves it to `GENERAL` after it (merged with the other items' barriers).
fn record_render(
    rec: &mut Recording<'_>,
    r: &ResolvedRender<'_>,
    queries: &[multi_queries::ResolvedDrawQuery<'_>],
    own: bool,
) -> Result<(), WorkError> {
    use vk::{AccessFlags2 as A, ImageLayout as L, PipelineStageFlags2 as S};
    let attachment = L::COLOR_ATTACHMENT_OPTIMAL;
    if own {
        target_barrier(
            rec,
            r,
            (S::ALL_COMMANDS, A::MEMORY_READ | A::MEMORY_WRITE, L::UNDEFINED),
            (S::COLOR_ATTACHMENT_OUTPUT, A::COLOR_ATTACHMENT_READ | A::COLOR_ATTACHMENT_WRITE, attachment),
        );
    }
    r.program.render(rec, &r.view, r.extent, r.clear, |pass| -> Result<(), DrawError> {
        // SAFETY: `pass` records inside the render pass instance, which ends after this closure
        // returns (and with it `open`, which ends the queries still active).
        let mut open = unsafe { DrawQueries::new(queries, pass.device(), pass.raw()) };
        for (i, d) in r.draws.iter().enumerate() {
            open.before(i);
            if let Some(set) = &d.set {
                pass.bind_descriptor_set(set)?;
            }
            if r.program.push_constant_bytes() > 0 || !d.push_constants.is_empty() {
                pass.push_constants(d.push_constants)?;
            }
            if let Some(v) = d.vertices {
                pass.bind_vertex_buffer(v.buffer, v.offset)?;
            }
            match d.call {
                ResolvedCall::Vertices { count, instances } => pass.draw(count, instances)?,
                ResolvedCall::Indexed { indices, format, count, instances } => {
                    pass.bind_index_buffer(indices.buffer, indices.offset, format)?;
                    // SAFETY: every index names a vertex inside the vertex view, which lies inside
                    // the bound vertex buffer from its offset: `DrawItem::new_indexed`'s contract.
                    unsafe { pass.draw_indexed(count, instances)? }
                }
                ResolvedCall::Indirect { args } => {
                    // SAFETY: the command names vertices inside the vertex view (inside the bound
                    // vertex buffer) and has firstInstance 0: `DrawItem::new_indirect`'s contract.
                    unsafe { pass.draw_indirect(args.buffer, args.offset)? }
                }
                ResolvedCall::IndexedIndirect { indices, format, args } => {
                    pass.bind_index_buffer(indices.buffer, indices.offset, format)?;
                    // SAFETY: the command names indices inside the index view (inside the bound
                    // index buffer from its offset), vertices inside the vertex view, and has
                    // firstInstance 0: `DrawItem::new_indexed_indirect`'s contract.
                    unsafe { pass.draw_indexed_indirect(args.buffer, args.offset)? }
                }
            }
            open.after(i);
        }
        Ok(())
    })??;
    if own {
        target_barrier(
            rec,
            r,
            (S::COLOR_ATTACHMENT_OUTPUT, A::COLOR_ATTACHMENT_WRITE, attachment),
            (S::ALL_COMMANDS | S::HOST, A::MEMORY_READ | A::MEMORY_WRITE | A::HOST_READ, L::GENERAL),
        );
    }
    Ok(())
}

/// The accesses of a program's set-0 `bindings` (of `kinds`) by `stages` on `device`: storage
/// buffers read and written, uniform buffers read, multi-device sampled images read in
/// `GENERAL` ([`MultiSampled`](crate::multi::bindless::MultiSampled)), acceleration structures
/// read from their storage (traversal; builds order themselves with full barriers); `None` when
/// one cannot be declared — an image bound per device by view ([`MultiBinding::Image`]: the
/// view does not name its image), or a sampled image in another layout — and the item falls
/// back to full barriers.
pub(crate) fn binding_accesses<'r>(
    bindings: &[MultiBinding<'r>],
    kinds: &[BindingKind],
    stages: PipelineStages,
    device: DeviceIndex,
) -> Result<Option<Vec<Access<'r>>>, WorkError> {
    let mut accesses = Vec::with_capacity(bindings.len());
    for (binding, kind) in bindings.iter().zip(kinds) {
        let view = match binding {
            MultiBinding::Buffer(view) => view,
            MultiBinding::Image(_) => return Ok(None),
            MultiBinding::Sampled(sampled) => match sampled.accesses(device, stages)? {
                Some(sampled) => {
                    accesses.extend(sampled);
                    continue;
                }
                None => return Ok(None),
            },
            MultiBinding::AccelerationStructure(s) => {
                let structure =
                    s.resolve(device).ok_or(WorkError::NotOnDevice { name: s.name().to_owned(), device })?;
                let storage = structure.storage();
                let use_ = Use::Custom(CustomUse {
                    stages,
                    access: AccessFlags::ACCELERATION_STRUCTURE_READ,
                    layout: None,
                });
                accesses.push(Access::Buffer { buffer: storage, offset: 0, size: storage.size(), use_ });
                continue;
            }
        };
        let use_ = match kind {
            BindingKind::StorageBuffer => Use::Custom(CustomUse {
                stages,
                access: AccessFlags::SHADER_STORAGE_READ | AccessFlags::SHADER_STORAGE_WRITE,
                layout: None,
            }),
            BindingKind::UniformBuffer => Use::UniformRead(stages),
            BindingKind::SampledImage
            | BindingKind::StorageImage
            | BindingKind::SampledImageArray(_)
            | BindingKind::BindlessSampledImages(_)
            | BindingKind::AccelerationStructure => return Ok(None),
        };
        let v = view.resolve(device)?;
        accesses.push(Access::Buffer { buffer: v.buffer, offset: v.offset, size: v.size, use_ });
    }
    Ok(Some(accesses))
}

/// The accesses of a resolved render item: its target (discarded, written as a colour
/// attachment), each draw's vertex, index and indirect views and its bindings; `None` when a
/// draw binds an image.
fn render_accesses<'r>(
    item: &RenderItem<'r, '_>,
    r: &ResolvedRender<'r>,
    device: DeviceIndex,
) -> Result<Option<Vec<Access<'r>>>, WorkError> {
    let mut accesses = vec![Access::RenderTarget { image: r.image, layers: r.view.layers() }];
    let stages = PipelineStages::VERTEX_SHADER | PipelineStages::FRAGMENT_SHADER;
    for (d, resolved) in item.draws.iter().zip(&r.draws) {
        let Some(bound) = binding_accesses(&d.bindings, &item.program.kinds, stages, device)? else {
            return Ok(None);
        };
        accesses.extend(bound);
        let view = |v: DeviceBufferView<'r>, use_| Access::Buffer {
            buffer: v.buffer,
            offset: v.offset,
            size: v.size,
            use_,
        };
        if let Some(v) = resolved.vertices {
            accesses.push(view(v, Use::VertexRead));
        }
        match resolved.call {
            ResolvedCall::Vertices { .. } => {}
            ResolvedCall::Indexed { indices, .. } => accesses.push(view(indices, Use::IndexRead)),
            ResolvedCall::Indirect { args } => accesses.push(view(args, Use::IndirectRead)),
            ResolvedCall::IndexedIndirect { indices, args, .. } => {
                accesses.push(view(indices, Use::IndexRead));
                accesses.push(view(args, Use::IndirectRead));
            }
        }
    }
    Ok(Some(accesses))
}

/// A pool of GPU timestamps on every device of a mask (a [`Timestamps`] query pool per device):
/// written by [`WorkItem::Timestamp`] in the work submitted to a device, read per device once that
/// work has completed. Each device's pool holds its device and is released when dropped, after
/// the GPU work that may write it.
#[derive(Debug)]
pub struct MultiTimestamps {
    pools: PerDevice<Timestamps>,
}

impl MultiTimestamps {
    /// `count` timestamps (at least one) on every open device of `mask`, each pool reset on its
    /// GPU before this returns (rolled back if one device fails).
    pub fn new(
        set: &DeviceSet,
        mask: DeviceMask,
        name: &str,
        count: u32,
    ) -> Result<Self, MultiDeviceError<VulkanError>> {
        let pools = fan_out_on(set, mask, |d| Timestamps::new(d, name, count))?;
        Ok(MultiTimestamps { pools })
    }

    /// The pool of `device` and `index` checked against it.
    fn resolve(&self, device: DeviceIndex, index: u32) -> Result<&Timestamps, WorkError> {
        let pool =
            self.pools.get(device).ok_or(WorkError::NotOnDevice { name: "timestamps".to_owned(), device })?;
        if index >= pool.count() {
            return Err(WorkError::Timestamp { name: pool.name().to_owned(), index, count: pool.count() });
        }
        Ok(pool)
    }

    /// Timestamp `index` of `device` in milliseconds of that device's timestamp clock, once the
    /// work that wrote it has completed (`None` before, or without timestamps on its queue, or
    /// when the device or index is not in the pools). Clocks of different devices are unrelated:
    /// compare timestamps of one device.
    pub fn at_ms(&self, device: DeviceIndex, index: u32) -> Option<f64> {
        self.pools.get(device)?.at_ms(index)
    }

    /// Milliseconds between timestamps `start` and `end` of `device`, once the work that wrote
    /// them has completed (`None` otherwise, as [`MultiTimestamps::at_ms`]).
    pub fn elapsed_ms(&self, device: DeviceIndex, start: u32, end: u32) -> Option<f64> {
        self.pools.get(device)?.elapsed_ms(start, end)
    }
}

multi_device!(MultiTimestamps, pools: Timestamps);
multi_device!(MultiComputeProgram, programs: ComputeProgram);
multi_device!(MultiSubmitter, contexts: CommandContext);
multi_device!(MultiTimeline, semaphores: DeviceTimeline);
