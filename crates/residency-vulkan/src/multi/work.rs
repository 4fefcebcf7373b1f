//! Multi-device work: compute programs on every device, views resolved per device, work items that
//! cache their per-device form, timelines, and submission to one chosen device.
//!
//! As in the seed, work is described once against multi-device resources and the switch to one
//! device happens at submission: [`MultiSubmitter::submit`] takes the device index, resolves each
//! item's per-device form (creating and caching descriptor sets on first use) and records it on that
//! device's queue. Views are *resource + descriptor*: a [`BufferView`] names a range of a
//! [`MultiBuffer`] and resolves to the instance on the device of the submission, so the view follows
//! the buffer's mask (resolution iterates the resource's mask, not the pool's).

use crate::buffer::Buffer;
use crate::commands::{CommandContext, Submission};
use crate::compute::{
    Binding, BindingError, BindingKind, ComputeProgram, DescriptorSet, DispatchError, ProgramError,
};
use crate::device::Device;
use crate::device_set::DeviceSet;
use crate::error::{Result as VkResult, VkResultExt, VulkanError};
use crate::multi::{
    device_count, fan_out_on, multi_device, resolve_mask, MultiBuffer, MultiDevice, MultiDeviceError,
    PerDevice,
};
use crate::recording::{check_buffer_copy, Recording};
use crate::retire::{ForeignUse, Garbage, GpuUse, Life};
use crate::shaders::Shader;
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

/// A range of a multi-device buffer, resolved per device at submission (resource + descriptor).
#[derive(Clone, Copy, Debug)]
pub struct BufferView<'a> {
    /// The buffer.
    pub buffer: &'a MultiBuffer,
}

impl<'a> BufferView<'a> {
    /// The whole buffer.
    pub fn whole(buffer: &'a MultiBuffer) -> Self {
        BufferView { buffer }
    }

    /// The instance on `device`, or an error naming the device when the buffer is not there.
    pub fn resolve(&self, device: DeviceIndex) -> Result<&'a Buffer, WorkError> {
        self.buffer
            .instance(device)
            .ok_or(WorkError::NotOnDevice { name: self.buffer.name().to_owned(), device })
    }
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
    /// A Vulkan call failed.
    #[error(transparent)]
    Vulkan(#[from] VulkanError),
}

/// A compute dispatch over multi-device resources; its descriptor set per device is created on the
/// first submission to that device and reused after.
#[derive(Debug)]
pub struct DispatchItem<'a> {
    program: &'a MultiComputeProgram,
    bindings: Vec<MultiBinding<'a>>,
    push_constants: Vec<u8>,
    groups: [u32; 3],
    /// Per device: the generations of the bound buffers when the set was written, and the set.
    sets: Mutex<Vec<(DeviceIndex, Vec<u64>, DescriptorSet)>>,
}

impl<'a> DispatchItem<'a> {
    /// Describes a dispatch of `program` with `bindings` (one per binding of the program).
    pub fn new(
        program: &'a MultiComputeProgram,
        bindings: Vec<MultiBinding<'a>>,
        push_constants: &[u8],
        groups: [u32; 3],
    ) -> Self {
        assert_eq!(bindings.len(), program.kinds.len(), "one resource per binding");
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
        self.sets.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    fn set_for(&self, index: DeviceIndex) -> Result<(DescriptorSet, &ComputeProgram), WorkError> {
        let program = self
            .program
            .programs
            .get(index)
            .ok_or(WorkError::NotOnDevice { name: "compute program".to_owned(), device: index })?;
        let generations: Vec<u64> = self
            .bindings
            .iter()
            .filter_map(|b| match b {
                MultiBinding::Buffer(view) => Some(view.buffer.generation()),
                MultiBinding::Image(_) => None,
            })
            .collect();
        let mut sets = self.sets.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((_, cached, set)) = sets.iter().find(|(i, ..)| *i == index) {
            if *cached == generations {
                return Ok((set.clone(), program));
            }
        }
        let mut resolved = Vec::with_capacity(self.bindings.len());
        for binding in &self.bindings {
            resolved.push(match binding {
                MultiBinding::Buffer(view) => Binding::Buffer(view.resolve(index)?),
                MultiBinding::Image(images) => {
                    let &(_, binding) = images
                        .views
                        .iter()
                        .find(|(i, _)| *i == index)
                        .ok_or(WorkError::NotOnDevice { name: "image view".to_owned(), device: index })?;
                    binding
                }
            });
        }
        // A new set for a new form (the old one may still be in use by work in flight: what it
        // binds is released after that work, and its memory goes with the program's pool).
        let set = program.descriptor_set(&resolved)?;
        sets.retain(|(i, ..)| *i != index);
        sets.push((index, generations, set.clone()));
        Ok((set, program))
    }
}

/// A copy between multi-device buffers (same offsets on every device).
#[derive(Clone, Copy, Debug)]
pub struct CopyItem<'a> {
    /// Source.
    pub src: BufferView<'a>,
    /// Destination.
    pub dst: BufferView<'a>,
    /// Byte offset in the source.
    pub src_offset: u64,
    /// Byte offset in the destination.
    pub dst_offset: u64,
    /// Bytes to copy.
    pub size: u64,
}

/// One item of work.
#[derive(Debug)]
pub enum WorkItem<'a, 'b> {
    /// A dispatch.
    Dispatch(&'b DispatchItem<'a>),
    /// A copy.
    Copy(CopyItem<'a>),
    /// A full memory barrier between the previous items and the next.
    Barrier,
}

/// A command context on each device, for submitting work items to one chosen device.
#[derive(Debug)]
pub struct MultiSubmitter {
    contexts: PerDevice<CommandContext>,
}

fn full_barrier(rec: &mut Recording<'_>) {
    let barrier = [vk::MemoryBarrier2::default()
        .src_stage_mask(vk::PipelineStageFlags2::ALL_COMMANDS)
        .src_access_mask(vk::AccessFlags2::MEMORY_READ | vk::AccessFlags2::MEMORY_WRITE)
        .dst_stage_mask(vk::PipelineStageFlags2::ALL_COMMANDS | vk::PipelineStageFlags2::HOST)
        .dst_access_mask(
            vk::AccessFlags2::MEMORY_READ | vk::AccessFlags2::MEMORY_WRITE | vk::AccessFlags2::HOST_READ,
        )];
    // SAFETY: `rec` is recording on its device outside a render pass; core stages with accesses
    // ALL_COMMANDS performs; the barrier lives for the call.
    unsafe {
        rec.device()
            .raw()
            .cmd_pipeline_barrier2(rec.raw(), &vk::DependencyInfo::default().memory_barriers(&barrier))
    };
    rec.recorded();
}

/// Checks a copy item resolved on one device ([`check_buffer_copy`]).
fn check_copy(src: &Buffer, dst: &Buffer, c: &CopyItem<'_>) -> Result<vk::BufferCopy, WorkError> {
    check_buffer_copy(src, c.src_offset, dst, c.dst_offset, c.size).map_err(|reason| WorkError::Copy {
        src: src.name().to_owned(),
        dst: dst.name().to_owned(),
        reason,
    })
}

impl MultiSubmitter {
    /// A command context on every open device of `mask`.
    pub fn new(set: &DeviceSet, mask: DeviceMask) -> Result<Self, MultiDeviceError<VulkanError>> {
        let contexts = fan_out_on(set, mask, |d| CommandContext::new(d, "multi-device work"))?;
        Ok(MultiSubmitter { contexts })
    }

    /// Records `items` for `device` — each resolved to its per-device form — with a full barrier
    /// before and after, submits them to that device's universal queue, and returns the submission.
    ///
    /// A dispatch over that device's limits ([`WorkError::Dispatch`]) fails before any item is
    /// resolved, recorded or submitted.
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
        }
        // Resolve everything first, so that a missing instance fails before anything is recorded.
        enum Resolved<'r> {
            Dispatch(DescriptorSet, &'r ComputeProgram, &'r DispatchItem<'r>),
            Copy(&'r Buffer, &'r Buffer, vk::BufferCopy),
            Barrier,
        }
        let mut resolved = Vec::with_capacity(items.len());
        for item in items {
            resolved.push(match item {
                WorkItem::Dispatch(d) => {
                    let (set, program) = d.set_for(device)?;
                    Resolved::Dispatch(set, program, d)
                }
                WorkItem::Copy(c) => {
                    let (src, dst) = (c.src.resolve(device)?, c.dst.resolve(device)?);
                    if !src.device().is(dev) || !dst.device().is(dev) {
                        return Err(WorkError::NotOnDevice { name: src.name().to_owned(), device });
                    }
                    Resolved::Copy(src, dst, check_copy(src, dst, c)?)
                }
                WorkItem::Barrier => Resolved::Barrier,
            });
        }
        let submission = context.submit(&[], |rec| {
            full_barrier(rec);
            for r in &resolved {
                match r {
                    // The program and set are this device's, checked against its limits before
                    // anything was resolved.
                    Resolved::Dispatch(set, program, d) => {
                        program.record_checked(rec, set, &d.push_constants, d.groups)
                    }
                    Resolved::Copy(src, dst, region) => {
                        rec.keep(src.life());
                        rec.keep(dst.life());
                        // SAFETY: `rec` is recording on this device outside a render pass; both
                        // buffers are live instances on it (checked above), held by the recording,
                        // with the usages, a non-empty in-bounds range and no overlap (`check_copy`).
                        unsafe { dev.raw().cmd_copy_buffer(rec.raw(), src.raw(), dst.raw(), &[*region]) };
                        rec.recorded();
                    }
                    Resolved::Barrier => full_barrier(rec),
                }
            }
            full_barrier(rec);
        })?;
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
        let _signalling = self.signalling.lock().unwrap_or_else(|e| e.into_inner());
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

multi_device!(MultiComputeProgram, programs: ComputeProgram);
multi_device!(MultiSubmitter, contexts: CommandContext);
multi_device!(MultiTimeline, semaphores: DeviceTimeline);
