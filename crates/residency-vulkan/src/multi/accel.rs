//! Multi-device acceleration structures: a bottom- or top-level structure built on every device of
//! a mask from that device's geometry (the instances of [`MultiBuffer`]s) or instances (of
//! multi-device bottom-level structures, resolved per device), compacted per device, and bound by
//! multi-device object in a work item
//! ([`MultiBinding::AccelerationStructure`]),
//! resolved to the device of the submission; and ray-tracing programs with a shader table per
//! device ([`MultiRayTracingProgram`]) launched by a [`TraceRaysItem`]
//! ([`WorkItem::TraceRays`](crate::multi::work::WorkItem::TraceRays)).
//!
//! A build checks every device's inputs and creates every device's structure (storage, scratch,
//! instance records) before it records anything; a failure on any device drops what was made on
//! the others and returns [`MultiDeviceError::Failed`] with that device. Then each device's build
//! is submitted through the [`MultiSubmitter`]'s context there; a submission that fails drops every
//! device's structure (those already submitted are destroyed after their builds, like any
//! resource dropped with work in flight).

use crate::device::set::DeviceSet;
use crate::device::Device;
use crate::multi::barriers::Access;
use crate::multi::fan_out_on;
use crate::multi::work::MultiSubmitter;
use crate::multi::work::{binding_accesses, cached_set, MultiBinding, SetCache, WorkError};
use crate::multi::{
    fan_out, multi_device, MultiBuffer, MultiBufferPool, MultiDevice, MultiDeviceError, MultiPool, PerDevice,
};
use crate::pipelines::acceleration::{
    AccelerationError, AccelerationLevel, AccelerationStructure, BottomLevelDesc, Instance, Prepared,
    TopLevelDesc, TriangleGeometry,
};
use crate::pipelines::descriptors::DescriptorSet;
use crate::pipelines::ray_tracing::{RayTracingError, RayTracingProgram};
use crate::pipelines::shaders::Shader;
use crate::poison::PoisonFree;
use crate::sync::commands::Submission;
use crate::sync::recording::Recording;
use ash::vk;
use residency_core::device_mask::{DeviceIndex, DeviceMask};
use std::sync::Arc;

/// The devices of `pool` in `mask` ([`DeviceMask::ALL`]: the pool's), lowest first.
fn devices_for<E: std::error::Error + 'static>(
    pool: &MultiBufferPool,
    mask: DeviceMask,
) -> Result<Vec<&Arc<Device>>, MultiDeviceError<E>> {
    let mask = pool.check_mask(mask)?;
    Ok(pool.pools_in(mask).into_iter().map(|(_, p)| p.device()).collect())
}

/// Triangles of a [`MultiBuffer`], the same description on every device
/// ([`TriangleGeometry`] of each device's instance).
#[derive(Clone, Copy, Debug)]
pub struct MultiTriangleGeometry<'a> {
    /// The vertex buffer (its instance on each device).
    pub vertices: &'a MultiBuffer,
    /// As [`TriangleGeometry::offset`].
    pub offset: u64,
    /// As [`TriangleGeometry::stride`].
    pub stride: u64,
    /// As [`TriangleGeometry::vertex_count`].
    pub vertex_count: u32,
    /// As [`TriangleGeometry::format`].
    pub format: vk::Format,
    /// As [`TriangleGeometry::triangles`].
    pub triangles: u32,
    /// As [`TriangleGeometry::opaque`].
    pub opaque: bool,
}

/// One instance of a multi-device bottom-level structure (its structure on each device).
#[derive(Clone, Copy, Debug)]
pub struct MultiInstance<'a> {
    /// The bottom-level structure.
    pub structure: &'a MultiAccelerationStructure,
    /// As [`Instance::transform`].
    pub transform: [[f32; 4]; 3],
    /// As [`Instance::custom_index`].
    pub custom_index: u32,
    /// As [`Instance::mask`].
    pub mask: u8,
    /// As [`Instance::sbt_offset`].
    pub sbt_offset: u32,
    /// As [`Instance::flags`].
    pub flags: vk::GeometryInstanceFlagsKHR,
}

impl<'a> MultiInstance<'a> {
    /// `structure` with the identity transform, custom index 0 and mask 0xFF.
    pub fn new(structure: &'a MultiAccelerationStructure) -> Self {
        MultiInstance {
            structure,
            transform: [[1.0, 0.0, 0.0, 0.0], [0.0, 1.0, 0.0, 0.0], [0.0, 0.0, 1.0, 0.0]],
            custom_index: 0,
            mask: 0xFF,
            sbt_offset: 0,
            flags: vk::GeometryInstanceFlagsKHR::empty(),
        }
    }
}

/// An acceleration structure on every device of a mask: each device's built from that device's
/// inputs. Released when dropped: each instance as an [`AccelerationStructure`] is.
#[derive(Debug)]
pub struct MultiAccelerationStructure {
    name: String,
    level: AccelerationLevel,
    structures: PerDevice<AccelerationStructure>,
}

multi_device!(MultiAccelerationStructure, structures: AccelerationStructure);

/// A resource of a build is missing on a device of the mask.
fn missing(name: &str, resource: &str) -> AccelerationError {
    AccelerationError::Invalid {
        name: name.to_owned(),
        reason: format!("`{resource}` does not exist on the device"),
    }
}

impl MultiAccelerationStructure {
    /// Builds a bottom-level structure named `name` on every device of `mask` within the pool's
    /// ([`DeviceMask::ALL`]: the pool's), each from its device's instances of the geometries'
    /// buffers (storage and scratch from that device's pool), submitted through `submitter`.
    /// Returns the structure and each device's submission. All or nothing (module documentation).
    pub fn build_bottom(
        submitter: &MultiSubmitter,
        pool: &MultiBufferPool,
        mask: DeviceMask,
        name: &str,
        geometries: &[MultiTriangleGeometry<'_>],
        allow_compaction: bool,
    ) -> Result<(Self, PerDevice<Submission>), MultiDeviceError<AccelerationError>> {
        let devices = devices_for(pool, mask)?;
        let prepared = fan_out(&devices, |device| {
            let index = device.index();
            let mut per_device = Vec::with_capacity(geometries.len());
            for g in geometries {
                let vertices = g.vertices.instance(index).ok_or_else(|| missing(name, g.vertices.name()))?;
                per_device.push(TriangleGeometry {
                    vertices,
                    offset: g.offset,
                    stride: g.stride,
                    vertex_count: g.vertex_count,
                    format: g.format,
                    triangles: g.triangles,
                    opaque: g.opaque,
                });
            }
            let desc = BottomLevelDesc { name: name.to_owned(), geometries: per_device, allow_compaction };
            AccelerationStructure::prepare_bottom(pool.pool(index).expect("a device of the pool"), &desc)
        })?;
        Self::submit_all(submitter, name, AccelerationLevel::Bottom, prepared)
    }

    /// Builds a top-level structure named `name` on every device of `mask` within the pool's,
    /// each of its device's structures of the instances (which must exist there and be
    /// bottom-level), submitted through `submitter`; as [`MultiAccelerationStructure::build_bottom`].
    pub fn build_top(
        submitter: &MultiSubmitter,
        pool: &MultiBufferPool,
        mask: DeviceMask,
        name: &str,
        instances: &[MultiInstance<'_>],
        allow_compaction: bool,
    ) -> Result<(Self, PerDevice<Submission>), MultiDeviceError<AccelerationError>> {
        let devices = devices_for(pool, mask)?;
        let prepared = fan_out(&devices, |device| {
            let index = device.index();
            let mut per_device = Vec::with_capacity(instances.len());
            for i in instances {
                let structure =
                    i.structure.instance(index).ok_or_else(|| missing(name, i.structure.name()))?;
                per_device.push(Instance {
                    structure,
                    transform: i.transform,
                    custom_index: i.custom_index,
                    mask: i.mask,
                    sbt_offset: i.sbt_offset,
                    flags: i.flags,
                });
            }
            let desc = TopLevelDesc { name: name.to_owned(), instances: per_device, allow_compaction };
            AccelerationStructure::prepare_top(pool.pool(index).expect("a device of the pool"), &desc)
        })?;
        Self::submit_all(submitter, name, AccelerationLevel::Top, prepared)
    }

    /// Every device's compacted size ([`AccelerationStructure::compacted_size`]); the first
    /// device that cannot answer fails the call.
    pub fn compacted_sizes(&self) -> Result<PerDevice<u64>, MultiDeviceError<AccelerationError>> {
        let mut sizes = PerDevice::default();
        for (index, structure) in self.structures.iter() {
            let size = structure
                .compacted_size()
                .map_err(|source| MultiDeviceError::Failed { device: index, source })?;
            sizes.insert(index, size);
        }
        Ok(sizes)
    }

    /// A compacted copy named `name` on every device (storage from that device's pool),
    /// submitted through `submitter`; every device's compacted size must be known first (its
    /// build completed). All or nothing.
    pub fn compact(
        &self,
        submitter: &MultiSubmitter,
        pool: &MultiBufferPool,
        name: &str,
    ) -> Result<(Self, PerDevice<Submission>), MultiDeviceError<AccelerationError>> {
        // Every device's size first, so that a device not ready changes nothing.
        self.compacted_sizes()?;
        let mut devices = Vec::with_capacity(self.structures.len());
        for (index, structure) in self.structures.iter() {
            let Some(pool) = pool.pool(index) else {
                return Err(MultiDeviceError::MaskNotSubset { requested: self.mask(), allowed: pool.mask() });
            };
            devices.push((index, structure, pool));
        }
        let arcs: Vec<_> = devices.iter().map(|(_, s, _)| s.device()).collect();
        let prepared = fan_out(&arcs, |device| {
            let (_, structure, pool) =
                devices.iter().find(|(i, ..)| *i == device.index()).expect("a device of the structure");
            structure.prepare_compact(pool, name)
        })?;
        Self::submit_all(submitter, name, self.level, prepared)
    }

    /// Records and submits every device's prepared build through that device's context.
    fn submit_all(
        submitter: &MultiSubmitter,
        name: &str,
        level: AccelerationLevel,
        prepared: PerDevice<Prepared>,
    ) -> Result<(Self, PerDevice<Submission>), MultiDeviceError<AccelerationError>> {
        // Every device has a context, before anything is recorded.
        for (index, _) in prepared.iter() {
            if submitter.instance(index).is_none() {
                return Err(MultiDeviceError::MaskNotSubset {
                    requested: prepared.mask(),
                    allowed: submitter.mask(),
                });
            }
        }
        let mut structures = PerDevice::default();
        let mut submissions = PerDevice::default();
        for (index, p) in prepared.into_values() {
            let context = submitter.instance(index).expect("checked above");
            let failed = |source: AccelerationError| MultiDeviceError::Failed { device: index, source };
            // The context is the structure's device's (the submitter's context on that index of
            // the same set): refused, the prepared structure is dropped unrecorded.
            if !context.device().is(p.structure().device()) {
                return Err(failed(AccelerationError::WrongDevice {
                    name: name.to_owned(),
                    resource: "the submitter's context".to_owned(),
                }));
            }
            let mut built = None;
            let submission = context.submit(&[], |rec| built = Some(p.record(rec)));
            // Recorded into a refused submission, the structure is dropped; already submitted
            // devices' are dropped with `structures` (destroyed after their builds).
            let submission = submission.map_err(|e| failed(e.into()))?;
            structures.insert(index, built.expect("recorded by the closure"));
            submissions.insert(index, submission);
        }
        Ok((MultiAccelerationStructure { name: name.to_owned(), level, structures }, submissions))
    }

    /// Its name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Bottom or top level.
    pub fn level(&self) -> AccelerationLevel {
        self.level
    }

    /// Its structure on `device`, as a binding resolves it.
    pub(crate) fn resolve(&self, device: DeviceIndex) -> Option<&AccelerationStructure> {
        self.structures.get(device)
    }
}

/// A ray-tracing program (and its shader table) on every device of a mask, as
/// [`RayTracingProgram::new`] makes on one; rolled back if one device fails (a device without
/// ray-tracing pipelines is [`RayTracingError::Unsupported`] naming the extension).
#[derive(Debug)]
pub struct MultiRayTracingProgram {
    programs: PerDevice<RayTracingProgram>,
}

multi_device!(MultiRayTracingProgram, programs: RayTracingProgram);

impl MultiRayTracingProgram {
    /// Creates the program `name` of the shipped shaders on every open device of `mask`.
    pub fn new(
        set: &DeviceSet,
        mask: DeviceMask,
        name: &str,
        raygen: &Shader,
        miss: &Shader,
        closest_hit: &Shader,
        max_sets: u32,
    ) -> Result<Self, MultiDeviceError<RayTracingError>> {
        let programs =
            fan_out_on(set, mask, |d| RayTracingProgram::new(d, name, raygen, miss, closest_hit, max_sets))?;
        Ok(MultiRayTracingProgram { programs })
    }
}

/// A ray-tracing launch over multi-device resources
/// ([`WorkItem::TraceRays`](crate::multi::work::WorkItem::TraceRays)): its descriptor set per device
/// is made on the first submission to that device and reused after; the launch uses that
/// device's program and shader table.
#[derive(Debug)]
pub struct TraceRaysItem<'a> {
    program: &'a MultiRayTracingProgram,
    bindings: Vec<MultiBinding<'a>>,
    push_constants: Vec<u8>,
    extent: [u32; 3],
    sets: SetCache,
}

impl<'a> TraceRaysItem<'a> {
    /// Describes a launch of `extent` rays of `program` with `bindings` (one per binding of the
    /// program; another count is refused at submission).
    pub fn new(
        program: &'a MultiRayTracingProgram,
        bindings: Vec<MultiBinding<'a>>,
        push_constants: &[u8],
        extent: [u32; 3],
    ) -> Self {
        TraceRaysItem {
            program,
            bindings,
            push_constants: push_constants.to_vec(),
            extent,
            sets: std::sync::Mutex::new(Vec::new()),
        }
    }

    /// How many devices have a cached per-device form.
    pub fn cached_devices(&self) -> usize {
        self.sets.locked().len()
    }

    /// The launch on `index` (of device `dev`): its program there, checked against the device's
    /// limits before its descriptor set is made or taken from the cache.
    pub(crate) fn resolve(&self, index: DeviceIndex, dev: &Device) -> Result<ResolvedTrace<'_>, WorkError> {
        let program = self
            .program
            .programs
            .get(index)
            .ok_or(WorkError::NotOnDevice { name: "ray tracing program".to_owned(), device: index })?;
        if !program.device().is(dev) {
            return Err(WorkError::NotOnDevice { name: program.name().to_owned(), device: index });
        }
        program.check_trace(&self.push_constants, self.extent)?;
        let set = cached_set(&self.bindings, &self.sets, index, |b| program.descriptor_set(b))?;
        debug_assert!(program.made(&set));
        Ok(ResolvedTrace { program, set, push_constants: &self.push_constants, extent: self.extent })
    }
}

/// A [`TraceRaysItem`] resolved on one device.
#[derive(Debug)]
pub(crate) struct ResolvedTrace<'r> {
    program: &'r RayTracingProgram,
    set: DescriptorSet,
    push_constants: &'r [u8],
    extent: [u32; 3],
}

impl<'a> TraceRaysItem<'a> {
    /// What the launch reads and writes on `device` (the program resolved there as `resolved`),
    /// for the submitter's barriers: its bindings, used by `ALL_COMMANDS` (the ray-tracing
    /// shader stage is not one residency's barrier checks know, so the launch is declared as
    /// every stage: per resource, but over the whole pipeline); `None` when a binding is not
    /// declared (the item then gets full barriers). The shader table is written once, when the
    /// program is made, and only read after.
    pub(crate) fn accesses<'r>(
        &'r self,
        resolved: &ResolvedTrace<'r>,
        device: DeviceIndex,
    ) -> Result<Option<Vec<Access<'r>>>, WorkError> {
        let stages = residency_core::sync::PipelineStages::ALL_COMMANDS;
        binding_accesses(&self.bindings, resolved.program.bindings(), stages, device)
    }
}

impl ResolvedTrace<'_> {
    /// Records the launch (checked by `resolve`; a set whose bindings' layouts or builds do not
    /// hold refuses the submission).
    pub(crate) fn record(&self, rec: &mut Recording<'_>) {
        self.program.record_checked(rec, &self.set, self.push_constants, self.extent);
    }
}
