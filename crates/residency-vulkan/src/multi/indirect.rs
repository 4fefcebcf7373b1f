//! Indirect work over multi-device argument buffers: a typed writer that encodes
//! `VkDispatchIndirectCommand`, `VkDrawIndirectCommand` and `VkDrawIndexedIndirectCommand` into a
//! [`BufferView`] with its own values per device ([`IndirectWriter`]), and a compute dispatch
//! whose group counts the GPU reads from such a view, resolved per device at submission
//! ([`IndirectDispatchItem`], submitted as [`WorkItem::DispatchIndirect`](crate::multi::work::WorkItem::DispatchIndirect)).
//!
//! # Group counts the GPU wrote
//!
//! `vkCmdDispatchIndirect` requires the counts it reads to be within the device's
//! `maxComputeWorkGroupCount` (`VUID-VkDispatchIndirectCommand-x-00417` and its `y`, `z`
//! twins); the driver does not check them, and a compute shader, a copy or a mapped write may
//! have put anything there. So the GPU never reads a caller's arguments for a dispatch: the
//! submission first runs residency's own pass ([`INDIRECT_CLAMP`](crate::shaders::INDIRECT_CLAMP),
//! one invocation) that copies the three counts into a buffer of the item's own on that device,
//! replacing the whole command by `(0, 0, 0)` when any count is over the device's limit on its
//! axis (an over-limit dispatch is a bug, and half of it is no better than none), and the
//! dispatch reads that copy. Host writes are checked when written ([`IndirectWriter`] refuses
//! an over-limit count); GPU writes are made sound by the pass.

use crate::device::blocks::MemoryError;
use crate::device::Device;
use crate::error::{ErrorClass, ResidencyError};
use crate::multi::barriers::Access;
use crate::multi::work::{
    binding_accesses, cached_set, BufferView, DeviceBufferView, MultiBinding, SetCache, WorkError,
};
use crate::multi::{MultiDevice, MultiDeviceError, MultiUploader};
use crate::pipelines::compute::{Binding, ComputeProgram, DescriptorSet};
use crate::poison::PoisonFree;
use crate::resources::buffer::{Buffer, BufferDesc};
use crate::sync::recording::Recording;
use crate::sync::upload::UploadError;
use ash::vk;
use residency_core::device_mask::DeviceIndex;
use residency_core::sync::Use;
use residency_core::usage::BufferUsage;
use std::sync::{Arc, Mutex};

use super::work::MultiComputeProgram;

/// An indirect-argument buffer or its arguments were refused; nothing was written or recorded.
#[derive(Debug, thiserror::Error)]
pub enum IndirectError {
    /// The argument buffer does not exist on the device.
    #[error("`{name}` does not exist on {device}")]
    NotOnDevice {
        /// The buffer.
        name: String,
        /// The device.
        device: DeviceIndex,
    },
    /// The view holds fewer bytes than the command.
    #[error("the view of `{name}` holds {bytes} B, under the {needed} B command")]
    TooSmall {
        /// The buffer.
        name: String,
        /// Bytes of the view.
        bytes: u64,
        /// Bytes of the command.
        needed: u64,
    },
    /// The command would start at a byte offset that is not a multiple of 4
    /// (`VUID-vkCmdDispatchIndirect-offset-02710`).
    #[error("the view of `{name}` starts at byte {offset}, not a multiple of 4")]
    Misaligned {
        /// The buffer.
        name: String,
        /// The offset in the `VkBuffer`.
        offset: u64,
    },
    /// The buffer lacks a usage the indirect command needs (`INDIRECT`; `STORAGE` too for a
    /// dispatch, whose arguments residency's clamp pass reads).
    #[error("`{name}` lacks the {missing:?} usage of an indirect-argument buffer")]
    Usage {
        /// The buffer.
        name: String,
        /// The usages it lacks.
        missing: BufferUsage,
    },
    /// A workgroup count is over the device's `maxComputeWorkGroupCount` on that axis.
    #[error("{requested} workgroups on axis {axis} exceed maxComputeWorkGroupCount[{axis}] = {limit}")]
    GroupCountOverLimit {
        /// The axis (0 = x, 1 = y, 2 = z).
        axis: usize,
        /// The count given.
        requested: u32,
        /// The device's limit.
        limit: u32,
    },
    /// A draw command with a `firstInstance` other than 0: residency does not enable
    /// `drawIndirectFirstInstance` (`VUID-VkDrawIndirectCommand-firstInstance-00501`).
    #[error("firstInstance {first_instance}, but drawIndirectFirstInstance is not enabled")]
    FirstInstance {
        /// The value given.
        first_instance: u32,
    },
    /// The same device is given two values.
    #[error("{device} is given two values")]
    DuplicateDevice {
        /// The device.
        device: DeviceIndex,
    },
    /// The upload of the arguments was refused or failed.
    #[error(transparent)]
    Upload(#[from] UploadError),
    /// The dispatch's clamped copy of its arguments could not be created on the device.
    #[error(transparent)]
    Memory(#[from] MemoryError),
}

impl ResidencyError for IndirectError {
    fn class(&self) -> ErrorClass {
        match self {
            IndirectError::Upload(e) => e.class(),
            IndirectError::Memory(e) => e.class(),
            IndirectError::NotOnDevice { .. }
            | IndirectError::TooSmall { .. }
            | IndirectError::Misaligned { .. }
            | IndirectError::Usage { .. }
            | IndirectError::GroupCountOverLimit { .. }
            | IndirectError::FirstInstance { .. }
            | IndirectError::DuplicateDevice { .. } => ErrorClass::Refused,
        }
    }
}

mod sealed {
    /// Only the three Vulkan commands are indirect commands.
    pub trait Sealed {}
}

/// One indirect command as Vulkan lays it out: its bytes and the device rules its values obey.
pub trait IndirectCommand: sealed::Sealed + Copy + std::fmt::Debug {
    /// Bytes of the command.
    const BYTES: u64;

    /// The command's bytes, little-endian words as Vulkan reads them.
    fn encode(&self) -> Vec<u8>;

    /// Whether the values break a rule of `device` (a count over its limits, a first instance
    /// it does not allow).
    fn check(&self, device: &Device) -> Result<(), IndirectError>;
}

fn words(values: &[u32]) -> Vec<u8> {
    values.iter().flat_map(|v| v.to_le_bytes()).collect()
}

/// `VkDispatchIndirectCommand`: workgroups on x, y and z.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DispatchArgs {
    /// Workgroups per axis.
    pub groups: [u32; 3],
}

impl sealed::Sealed for DispatchArgs {}
impl IndirectCommand for DispatchArgs {
    const BYTES: u64 = 12;

    fn encode(&self) -> Vec<u8> {
        words(&self.groups)
    }

    fn check(&self, device: &Device) -> Result<(), IndirectError> {
        let limit = device.limits().max_compute_work_group_count;
        match (0..3).find(|&axis| self.groups[axis] > limit[axis]) {
            Some(axis) => Err(IndirectError::GroupCountOverLimit {
                axis,
                requested: self.groups[axis],
                limit: limit[axis],
            }),
            None => Ok(()),
        }
    }
}

/// `VkDrawIndirectCommand`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DrawArgs {
    /// Vertices to draw.
    pub vertex_count: u32,
    /// Instances to draw.
    pub instance_count: u32,
    /// The first vertex.
    pub first_vertex: u32,
    /// The first instance (0: `drawIndirectFirstInstance` is not enabled).
    pub first_instance: u32,
}

impl sealed::Sealed for DrawArgs {}
impl IndirectCommand for DrawArgs {
    const BYTES: u64 = 16;

    fn encode(&self) -> Vec<u8> {
        words(&[self.vertex_count, self.instance_count, self.first_vertex, self.first_instance])
    }

    fn check(&self, _device: &Device) -> Result<(), IndirectError> {
        first_instance_zero(self.first_instance)
    }
}

/// `VkDrawIndexedIndirectCommand`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DrawIndexedArgs {
    /// Indices to draw.
    pub index_count: u32,
    /// Instances to draw.
    pub instance_count: u32,
    /// The first index.
    pub first_index: u32,
    /// Added to each index.
    pub vertex_offset: i32,
    /// The first instance (0: `drawIndirectFirstInstance` is not enabled).
    pub first_instance: u32,
}

impl sealed::Sealed for DrawIndexedArgs {}
impl IndirectCommand for DrawIndexedArgs {
    const BYTES: u64 = 20;

    fn encode(&self) -> Vec<u8> {
        words(&[
            self.index_count,
            self.instance_count,
            self.first_index,
            self.vertex_offset as u32,
            self.first_instance,
        ])
    }

    fn check(&self, _device: &Device) -> Result<(), IndirectError> {
        first_instance_zero(self.first_instance)
    }
}

fn first_instance_zero(first_instance: u32) -> Result<(), IndirectError> {
    if first_instance != 0 {
        return Err(IndirectError::FirstInstance { first_instance });
    }
    Ok(())
}

/// `view` resolved on `device` and checked as the arguments of a `bytes`-byte command: it
/// exists there, holds the command, starts at a multiple of 4 bytes of its `VkBuffer`, and the
/// buffer has `usage`.
fn resolve_args<'a>(
    view: &BufferView<'a>,
    device: DeviceIndex,
    bytes: u64,
    usage: BufferUsage,
) -> Result<DeviceBufferView<'a>, IndirectError> {
    let name = || view.buffer().name().to_owned();
    let v = view.resolve(device).map_err(|_| IndirectError::NotOnDevice { name: name(), device })?;
    if v.size < bytes {
        return Err(IndirectError::TooSmall { name: name(), bytes: v.size, needed: bytes });
    }
    let offset = v.buffer.offset() + v.offset;
    if offset % 4 != 0 || v.offset % 4 != 0 {
        return Err(IndirectError::Misaligned { name: name(), offset });
    }
    let missing = BufferUsage::from_bits_truncate(usage.bits() & !v.buffer.usage().bits());
    if !missing.is_empty() {
        return Err(IndirectError::Usage { name: name(), missing });
    }
    Ok(v)
}

/// Writes indirect commands into a multi-device argument view from the host, a value of its own
/// per device, through a [`MultiUploader`] (the seed's `IndirectBufferWriter`).
#[derive(Clone, Copy, Debug)]
pub struct IndirectWriter<'u> {
    uploader: &'u MultiUploader,
}

impl<'u> IndirectWriter<'u> {
    /// A writer that stages through `uploader`.
    pub fn new(uploader: &'u MultiUploader) -> Self {
        IndirectWriter { uploader }
    }

    /// Writes `values` — one command per device — at the start of `args`, each into the view's
    /// instance on its device, and flushes the uploads (wait with
    /// [`MultiUploader::wait_idle`] before submitting work that reads them, as after
    /// [`MultiUploader::broadcast`]).
    ///
    /// Checked on every device before anything is staged on any, so a refused call writes
    /// nothing: the view exists there, holds the command, starts at a multiple of 4 bytes; the
    /// buffer has `INDIRECT` and `COPY_DST` usage; the uploader is on that device; the values
    /// obey the device's rules ([`IndirectCommand::check`]: a dispatch within
    /// `maxComputeWorkGroupCount`, a draw with `firstInstance` 0); no device is given twice.
    /// A Vulkan failure part-way leaves the devices before it written (as a broadcast does).
    pub fn write<C: IndirectCommand>(
        &self,
        args: BufferView<'_>,
        values: &[(DeviceIndex, C)],
    ) -> Result<(), MultiDeviceError<IndirectError>> {
        let mut targets = Vec::with_capacity(values.len());
        for (at, &(device, value)) in values.iter().enumerate() {
            let failed = |source| MultiDeviceError::Failed { device, source };
            if values[..at].iter().any(|&(d, _)| d == device) {
                return Err(failed(IndirectError::DuplicateDevice { device }));
            }
            let view = resolve_args(&args, device, C::BYTES, BufferUsage::INDIRECT).map_err(failed)?;
            value.check(view.buffer.device()).map_err(failed)?;
            let uploader = self.uploader.instance(device).ok_or(MultiDeviceError::MaskNotSubset {
                requested: device.mask(),
                allowed: self.uploader.mask(),
            })?;
            uploader
                .check_buffer_write(view.buffer, view.offset, C::BYTES)
                .map_err(|e| failed(IndirectError::Upload(e)))?;
            targets.push((device, view, uploader, value.encode()));
        }
        for (device, view, uploader, bytes) in targets {
            let failed = |e| MultiDeviceError::Failed { device, source: IndirectError::Upload(e) };
            uploader.write_buffer(view.buffer, view.offset, &bytes).map_err(failed)?;
            uploader.flush().map_err(failed)?;
        }
        Ok(())
    }
}

/// The GPU indirect-argument writer: a compute pass ([`INDIRECT_FROM_COUNT`](crate::shaders::INDIRECT_FROM_COUNT))
/// on every device of a mask that turns a count an earlier pass wrote — the survivors of a
/// culling pass, say — into a `VkDispatchIndirectCommand` `(ceil(count / per_group), 1, 1)`,
/// each device from its own count. A group count over the devices' smallest
/// `maxComputeWorkGroupCount[0]` is written as `(0, 1, 1)`; an [`IndirectDispatchItem`] reading
/// the command checks it again on its own device.
#[derive(Debug)]
pub struct GpuIndirectWriter {
    program: MultiComputeProgram,
    /// The smallest `maxComputeWorkGroupCount[0]` of the program's devices.
    limit_x: u32,
}

impl GpuIndirectWriter {
    /// The writer's program on every open device of `mask` (rolled back if one fails).
    pub fn new(
        set: &crate::device::set::DeviceSet,
        mask: residency_core::device_mask::DeviceMask,
    ) -> Result<Self, MultiDeviceError<crate::pipelines::compute::ProgramError>> {
        let program = MultiComputeProgram::new(
            set,
            mask,
            "indirect from count",
            &crate::pipelines::shaders::INDIRECT_FROM_COUNT,
            4,
        )?;
        let limit_x = program
            .iter()
            .map(|(_, p)| p.device().limits().max_compute_work_group_count[0])
            .min()
            .unwrap_or(0);
        Ok(GpuIndirectWriter { program, limit_x })
    }

    /// A dispatch item (one invocation) that writes the command at the start of `args` from the
    /// count (one `u32`) at the start of `count`, `per_group` items per workgroup (at least 1),
    /// on whichever device it is submitted to. Put a [`WorkItem::Barrier`](crate::multi::work::WorkItem::Barrier)
    /// between it and the work that reads the command. Refused here: a count view under 4 bytes
    /// or an argument view under 12, either not at a multiple of 4 bytes of its buffer (its
    /// first instance's offset); at submission the buffers must have `STORAGE` usage (bound whole).
    pub fn dispatch_from_count<'a>(
        &'a self,
        count: BufferView<'a>,
        args: BufferView<'a>,
        per_group: u32,
    ) -> Result<super::work::DispatchItem<'a>, IndirectError> {
        let word = |view: &BufferView<'a>, needed: u64| -> Result<u32, IndirectError> {
            let name = view.buffer().name().to_owned();
            if view.size() < needed {
                return Err(IndirectError::TooSmall { name, bytes: view.size(), needed });
            }
            if view.offset() % 4 != 0 {
                return Err(IndirectError::Misaligned { name, offset: view.offset() });
            }
            u32::try_from(view.offset() / 4)
                .map_err(|_| IndirectError::Misaligned { name, offset: view.offset() })
        };
        let count_at = word(&count, 4)?;
        let first = word(&args, DispatchArgs::BYTES)?;
        Ok(super::work::DispatchItem::new(
            &self.program,
            vec![
                MultiBinding::Buffer(BufferView::whole(count.buffer())),
                MultiBinding::Buffer(BufferView::whole(args.buffer())),
            ],
            &words(&[count_at, first, per_group.max(1), self.limit_x]),
            [1, 1, 1],
        ))
    }
}

/// Residency's clamp pass on one device: the program, the buffer the clamped counts go to, and
/// the pass's descriptor set with the generation of the argument buffer it binds.
#[derive(Debug)]
struct Clamp {
    program: ComputeProgram,
    clamped: Buffer,
    set: Mutex<Option<(u64, DescriptorSet)>>,
}

/// A compute dispatch over multi-device resources whose workgroup counts the GPU reads, when
/// the dispatch runs, from a `VkDispatchIndirectCommand` at the start of `args` — on each device
/// the instance there, so each device runs the counts written for it. Its descriptor sets and its
/// clamp pass (see the [module](self)) are made per device on the first submission there and
/// reused after.
///
/// # Efficiency
///
/// Per device the item holds one extra compute pipeline (the clamp pass's: items do not share
/// it, so that its descriptor sets go with the item), a 16-byte buffer and a descriptor set; per
/// submission it records one one-invocation dispatch and two global barriers before its own
/// dispatch.
#[derive(Debug)]
pub struct IndirectDispatchItem<'a> {
    program: &'a MultiComputeProgram,
    bindings: Vec<MultiBinding<'a>>,
    push_constants: Vec<u8>,
    args: BufferView<'a>,
    sets: SetCache,
    clamps: Mutex<Vec<(DeviceIndex, Arc<Clamp>)>>,
}

/// An [`IndirectDispatchItem`] resolved on one device.
#[derive(Debug)]
pub(crate) struct ResolvedIndirect<'r> {
    program: &'r ComputeProgram,
    set: DescriptorSet,
    push_constants: &'r [u8],
    clamp: Arc<Clamp>,
    clamp_set: DescriptorSet,
    /// The clamp pass's push constants: the first word of the command in the bound buffer, the
    /// device's limits.
    clamp_push: [u8; 16],
    /// The argument view on the device (its whole buffer is bound to the clamp pass).
    args: DeviceBufferView<'r>,
}

impl<'a> IndirectDispatchItem<'a> {
    /// Describes a dispatch of `program` with `bindings` (one per binding of the program) whose
    /// counts are read from `args`. Checked at submission on each device: the view holds 12
    /// bytes at a multiple of 4 and its buffer has `INDIRECT` and `STORAGE` usage
    /// ([`IndirectError`] in [`WorkError::Indirect`]); the push constants fit the program.
    pub fn new(
        program: &'a MultiComputeProgram,
        bindings: Vec<MultiBinding<'a>>,
        push_constants: &[u8],
        args: BufferView<'a>,
    ) -> Self {
        IndirectDispatchItem {
            program,
            bindings,
            push_constants: push_constants.to_vec(),
            args,
            sets: Mutex::new(Vec::new()),
            clamps: Mutex::new(Vec::new()),
        }
    }

    /// How many devices have a cached per-device form.
    pub fn cached_devices(&self) -> usize {
        self.sets.locked().len()
    }

    /// The program on `dev`, checked to be there, with the push constants and arguments checked:
    /// what [`MultiSubmitter::submit`](crate::multi::work::MultiSubmitter::submit) refuses before
    /// anything is resolved.
    pub(crate) fn check(&self, dev: &Device) -> Result<(), WorkError> {
        let device = dev.index();
        let program = self
            .program
            .instance(device)
            .ok_or(WorkError::NotOnDevice { name: "compute program".to_owned(), device })?;
        if !program.device().is(dev) {
            return Err(WorkError::NotOnDevice { name: program.name().to_owned(), device });
        }
        program.check_dispatch(&self.push_constants, [0; 3])?;
        let args = resolve_args(
            &self.args,
            device,
            DispatchArgs::BYTES,
            BufferUsage::INDIRECT | BufferUsage::STORAGE,
        )?;
        if !args.buffer.device().is(dev) {
            return Err(WorkError::NotOnDevice { name: args.buffer.name().to_owned(), device });
        }
        Ok(())
    }

    /// The clamp pass of `dev`, made on first use.
    fn clamp(&self, dev: &Arc<Device>, name: &str) -> Result<Arc<Clamp>, WorkError> {
        let device = dev.index();
        let mut clamps = self.clamps.locked();
        if let Some((_, clamp)) = clamps.iter().find(|(i, _)| *i == device) {
            return Ok(Arc::clone(clamp));
        }
        let program =
            ComputeProgram::new(dev, "indirect clamp", &crate::pipelines::shaders::INDIRECT_CLAMP, 1)?;
        let clamped = dev
            .create_buffer(&BufferDesc::new(
                format!("{name} clamped arguments"),
                16,
                BufferUsage::STORAGE | BufferUsage::INDIRECT,
            ))
            .map_err(IndirectError::from)?;
        let clamp = Arc::new(Clamp { program, clamped, set: Mutex::new(None) });
        clamps.push((device, Arc::clone(&clamp)));
        Ok(clamp)
    }

    /// Resolves the item on `dev` (after [`IndirectDispatchItem::check`]): its set, its clamp
    /// pass and the pass's set over the argument buffer's instance.
    pub(crate) fn resolve(&self, dev: &Arc<Device>) -> Result<ResolvedIndirect<'_>, WorkError> {
        let device = dev.index();
        let program = self
            .program
            .instance(device)
            .ok_or(WorkError::NotOnDevice { name: "compute program".to_owned(), device })?;
        let set = cached_set(&self.bindings, &self.sets, device, |b| program.descriptor_set(b))?;
        let args = resolve_args(
            &self.args,
            device,
            DispatchArgs::BYTES,
            BufferUsage::INDIRECT | BufferUsage::STORAGE,
        )?;
        let clamp = self.clamp(dev, args.buffer.name())?;
        let generation = self.args.buffer().generation();
        let clamp_set = {
            let mut cached = clamp.set.locked();
            match &*cached {
                Some((g, set)) if *g == generation => set.clone(),
                _ => {
                    let set = clamp
                        .program
                        .descriptor_set(&[Binding::Buffer(args.buffer), Binding::Buffer(&clamp.clamped)])?;
                    *cached = Some((generation, set.clone()));
                    set
                }
            }
        };
        let first = u32::try_from(args.offset / 4).map_err(|_| IndirectError::Misaligned {
            name: args.buffer.name().to_owned(),
            offset: args.offset,
        })?;
        let limit = dev.limits().max_compute_work_group_count;
        let mut clamp_push = [0u8; 16];
        for (i, word) in [first, limit[0], limit[1], limit[2]].into_iter().enumerate() {
            clamp_push[4 * i..4 * i + 4].copy_from_slice(&word.to_le_bytes());
        }
        Ok(ResolvedIndirect {
            program,
            set,
            push_constants: &self.push_constants,
            clamp,
            clamp_set,
            clamp_push,
            args,
        })
    }

    /// What the item reads and writes on `device` (resolved there as `resolved`), for the
    /// submitter's barriers: the argument view's buffer, read whole by the clamp pass in compute
    /// (it is bound whole), and the dispatch's bindings; `None` when a binding is not declared
    /// (the item then gets full barriers). The indirect read is of the item's own copy of the
    /// counts, which the item orders itself (a barrier before its pass and one before the
    /// dispatch).
    pub(crate) fn accesses<'r>(
        &'r self,
        resolved: &ResolvedIndirect<'r>,
        device: DeviceIndex,
    ) -> Result<Option<Vec<Access<'r>>>, WorkError> {
        let stages = residency_core::sync::PipelineStages::COMPUTE_SHADER;
        let Some(mut accesses) = binding_accesses(&self.bindings, self.program.bindings(), stages, device)?
        else {
            return Ok(None);
        };
        let args = resolved.args.buffer;
        accesses.push(Access::Buffer {
            buffer: args,
            offset: 0,
            size: args.size(),
            use_: Use::ComputeStorageRead,
        });
        Ok(Some(accesses))
    }
}

/// Records a global memory barrier from `src` to `dst`.
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
    // SAFETY: `rec` is recording on its device outside a render pass; the stages are core ones
    // the universal queue supports, each access one its stage performs; the barrier lives for the
    // call.
    unsafe {
        rec.device()
            .raw()
            .cmd_pipeline_barrier2(rec.raw(), &vk::DependencyInfo::default().memory_barriers(&barrier))
    };
    rec.recorded();
}

impl ResolvedIndirect<'_> {
    /// Records the clamp pass and the dispatch from its output.
    pub(crate) fn record(&self, rec: &mut Recording<'_>) {
        use vk::{AccessFlags2 as A, PipelineStageFlags2 as S};
        // An earlier dispatch of this item read the clamped counts, an earlier pass wrote them.
        barrier(
            rec,
            (S::DRAW_INDIRECT | S::COMPUTE_SHADER, A::SHADER_STORAGE_WRITE),
            (S::COMPUTE_SHADER, A::SHADER_STORAGE_READ | A::SHADER_STORAGE_WRITE),
        );
        // The pass's program and set are this device's (made from its program), one workgroup,
        // its 16 B of push constants: within every limit.
        self.clamp.program.record_checked(rec, &self.clamp_set, &self.clamp_push, [1, 1, 1]);
        barrier(
            rec,
            (S::COMPUTE_SHADER, A::SHADER_STORAGE_WRITE),
            (S::DRAW_INDIRECT, A::INDIRECT_COMMAND_READ),
        );
        // SAFETY: the clamped buffer is this device's, made with INDIRECT usage and 16 B; the
        // command is at offset 0; the pass just wrote counts each within maxComputeWorkGroupCount
        // (or all three 0), made visible to the indirect read by the barrier above. The program
        // and set are this device's, the push constants checked (`IndirectDispatchItem::check`).
        unsafe {
            self.program.record_indirect_checked(rec, &self.set, self.push_constants, &self.clamp.clamped, 0)
        };
    }
}
