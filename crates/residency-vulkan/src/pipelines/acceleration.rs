//! Acceleration structures (VK_KHR_acceleration_structure): bottom-level structures built from
//! triangles in buffers, top-level structures built from instances of them, compaction through the
//! compacted-size query, and the binding a ray query (`GL_EXT_ray_query`) traces through
//! ([`Binding::AccelerationStructure`](crate::compute::Binding::AccelerationStructure)).
//!
//! - **Memory.** A structure's storage and its build scratch are buffers of a [`BufferPool`] of the
//!   caller (the seed's unknown-flags pools hold both: each is a placed buffer of its own usage);
//!   the scratch is placed at the device's `minAccelerationStructureScratchOffsetAlignment` and
//!   released after the build's submission. A top-level structure's instance records are written
//!   by residency into an upload buffer of the device's own, from the instances' structures (so no
//!   address in them can be wrong).
//! - **Checks.** Every input is checked before Vulkan sees it, with checked arithmetic, and a
//!   refusal is an [`AccelerationError`] with nothing created or recorded: the device's features
//!   (the error names the missing one), the devices of the pool, buffers and recording, counts
//!   against the device's limits (`maxGeometryCount`, `maxPrimitiveCount`, `maxInstanceCount`),
//!   vertex formats (and the device's `ACCELERATION_STRUCTURE_VERTEX_BUFFER` support of them),
//!   strides and address alignments, each geometry's bytes inside its buffer, and the buffers'
//!   usages (`ACCELERATION_STRUCTURE_BUILD_INPUT | DEVICE_ADDRESS`).
//! - **Recording.** A build is recorded into a [`Recording`] between two barriers: every earlier
//!   write (and read, for the scratch's reused memory) before the build, the build before every
//!   later command. The structure's build state is kept as a one-subresource layout record
//!   (`GENERAL` once built, applied at submission like an image's layouts): a top-level build
//!   requires its bottom-level structures built, a compaction its source, and a dispatch binding
//!   it the structure itself — in submission order, or the submission is refused with
//!   [`VulkanError::ImageLayout`] naming the structure.
//! - **Lifetimes.** A structure holds a `Life` like every resource: dropped with work in flight, it
//!   is destroyed after that work, and its storage after it; a top-level structure keeps the
//!   bottom-level structures it was built from until it is destroyed itself.
//!
//! Only non-indexed triangles are taken: an index buffer's values are data the GPU reads, and an
//! index past the vertices would read outside them.

use crate::device::blocks::MemoryError;
use crate::device::ledger::ObjectId;
use crate::device::life::{Garbage, Life, Parent, Retire};
use crate::device::{Device, EnabledFeatures};
use crate::error::{ErrorClass, ResidencyError};
use crate::error::{VkResultExt, VulkanError};
use crate::pools::buffer_pool::{BufferInit, BufferPool};
use crate::resources::buffer::{AccessError, Buffer, BufferDesc};
use crate::resources::image::Layouts;
use crate::sync::recording::Recording;
use ash::vk;
use residency_core::memory::MemoryIntent;
use residency_core::sync::LastUses;
use residency_core::usage::BufferUsage;
use std::sync::Arc;

/// The layout record of a built structure (an unbuilt one is `UNDEFINED`).
pub(crate) const BUILT: vk::ImageLayout = vk::ImageLayout::GENERAL;

/// Bytes of one `VkAccelerationStructureInstanceKHR`.
pub const INSTANCE_BYTES: u64 = 64;

/// The alignment of an acceleration structure's offset in its storage buffer.
const STORAGE_ALIGNMENT: u64 = 256;

/// Bottom level (triangles) or top level (instances).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AccelerationLevel {
    /// Built from triangles.
    Bottom,
    /// Built from instances of bottom-level structures.
    Top,
}

/// What a device lacks for acceleration structures or ray queries: the extension or feature, as
/// the specification names it. `ray_query` asks for ray queries too.
pub fn missing_feature(features: &EnabledFeatures, ray_query: bool) -> Option<&'static str> {
    if !features.buffer_device_address {
        Some("bufferDeviceAddress")
    } else if !features.acceleration_structure {
        Some("VK_KHR_acceleration_structure")
    } else if ray_query && !features.ray_query {
        Some("VK_KHR_ray_query")
    } else {
        None
    }
}

/// An acceleration structure could not be created, built or compacted; nothing was created or
/// recorded.
#[derive(Debug, thiserror::Error)]
pub enum AccelerationError {
    /// The device lacks an extension or feature this needs.
    #[error("{device}: acceleration structures need {feature}, which the device does not have")]
    Unsupported {
        /// The device.
        device: String,
        /// The extension or feature, as the specification names it.
        feature: &'static str,
    },
    /// The caller's description is invalid (a count, range, format, stride, alignment or usage).
    #[error("`{name}`: {reason}")]
    Invalid {
        /// The structure.
        name: String,
        /// What is wrong.
        reason: String,
    },
    /// A buffer, pool, structure or recording is of another device than the others.
    #[error("`{name}`: `{resource}` belongs to another device")]
    WrongDevice {
        /// The structure.
        name: String,
        /// The resource of another device.
        resource: String,
    },
    /// The structure was built without compaction allowed, so it has no compacted size.
    #[error("`{name}` was built without ALLOW_COMPACTION")]
    NotCompactable {
        /// The structure.
        name: String,
    },
    /// The structure's build has not been submitted yet, so its compacted size cannot be read.
    #[error("`{name}`: its build was not submitted yet")]
    NotBuilt {
        /// The structure.
        name: String,
    },
    /// The build was submitted but has not completed: its compacted size is not known yet (wait for
    /// the submission first).
    #[error("`{name}`: its build has not completed yet")]
    NotReady {
        /// The structure.
        name: String,
    },
    /// Its storage, scratch or instance buffer could not be allocated.
    #[error(transparent)]
    Memory(#[from] MemoryError),
    /// Writing the instance records failed.
    #[error(transparent)]
    Access(#[from] AccessError),
    /// A Vulkan call failed.
    #[error(transparent)]
    Vulkan(#[from] VulkanError),
}

impl ResidencyError for AccelerationError {
    fn class(&self) -> ErrorClass {
        match self {
            AccelerationError::Unsupported { .. } => ErrorClass::Unsupported,
            AccelerationError::Memory(e) => e.class(),
            AccelerationError::Access(e) => e.class(),
            AccelerationError::Vulkan(e) => e.class(),
            AccelerationError::Invalid { .. }
            | AccelerationError::WrongDevice { .. }
            | AccelerationError::NotCompactable { .. }
            | AccelerationError::NotBuilt { .. }
            | AccelerationError::NotReady { .. } => ErrorClass::Refused,
        }
    }
}

/// Triangles read from a buffer: `triangles` non-indexed triangles whose vertices are
/// `vertex_count` vertices of `format`, `stride` bytes apart from `offset` in `vertices`
/// (triangle `i` is vertices `3i`, `3i + 1`, `3i + 2`).
#[derive(Clone, Copy, Debug)]
pub struct TriangleGeometry<'a> {
    /// The vertex buffer: `ACCELERATION_STRUCTURE_BUILD_INPUT | DEVICE_ADDRESS` usage.
    pub vertices: &'a Buffer,
    /// Bytes into it of vertex 0 (a multiple of the format's component size, with the buffer's
    /// address).
    pub offset: u64,
    /// Bytes from one vertex to the next (a multiple of the format's component size, below 2³²).
    pub stride: u64,
    /// Vertices readable from `offset` (at least `3 × triangles`), all inside the buffer.
    pub vertex_count: u32,
    /// The position format: `R32G32B32_SFLOAT`, `R32G32_SFLOAT`, `R16G16B16A16_SFLOAT`,
    /// `R16G16_SFLOAT`, `R16G16B16A16_SNORM` or `R16G16_SNORM`, where the device supports it
    /// for builds.
    pub format: vk::Format,
    /// Triangles (at least 1).
    pub triangles: u32,
    /// Whether the triangles are opaque (`GEOMETRY_OPAQUE`).
    pub opaque: bool,
}

/// A bottom-level structure to build.
#[derive(Clone, Debug)]
pub struct BottomLevelDesc<'a> {
    /// Its name (the storage and scratch buffers are named after it).
    pub name: String,
    /// Its geometries (at least one, at most `maxGeometryCount`; triangles in all at most
    /// `maxPrimitiveCount`).
    pub geometries: Vec<TriangleGeometry<'a>>,
    /// Whether it may be compacted ([`AccelerationStructure::compact`]).
    pub allow_compaction: bool,
}

/// One instance of a bottom-level structure in a top-level one.
#[derive(Clone, Copy, Debug)]
pub struct Instance<'a> {
    /// The bottom-level structure (of the same device, built before the top-level build runs).
    pub structure: &'a AccelerationStructure,
    /// Object-to-world, a row-major 3 × 4 matrix.
    pub transform: [[f32; 4]; 3],
    /// `gl_InstanceCustomIndexEXT` / `rayQueryGetIntersectionInstanceCustomIndexEXT` (below 2²⁴).
    pub custom_index: u32,
    /// Visibility mask, and-ed with a ray's cull mask.
    pub mask: u8,
    /// Shader binding table record offset: 0 (residency's ray-tracing programs have one hit
    /// group; any other value is refused, since a trace would read past the table).
    pub sbt_offset: u32,
    /// `VkGeometryInstanceFlagsKHR` (the four core bits only).
    pub flags: vk::GeometryInstanceFlagsKHR,
}

impl<'a> Instance<'a> {
    /// `structure` with the identity transform, custom index 0 and mask 0xFF.
    pub fn new(structure: &'a AccelerationStructure) -> Self {
        Instance {
            structure,
            transform: [[1.0, 0.0, 0.0, 0.0], [0.0, 1.0, 0.0, 0.0], [0.0, 0.0, 1.0, 0.0]],
            custom_index: 0,
            mask: 0xFF,
            sbt_offset: 0,
            flags: vk::GeometryInstanceFlagsKHR::empty(),
        }
    }
}

/// A top-level structure to build.
#[derive(Clone, Debug)]
pub struct TopLevelDesc<'a> {
    /// Its name.
    pub name: String,
    /// Its instances (at least one, at most `maxInstanceCount`).
    pub instances: Vec<Instance<'a>>,
    /// Whether it may be compacted.
    pub allow_compaction: bool,
}

/// An acceleration structure on one device: its `VkAccelerationStructureKHR`, the pool buffer it
/// lives in, and its build state. Released when dropped, once the GPU work that may use it has
/// completed (then its storage); a top-level structure keeps its bottom-level structures until
/// then.
#[derive(Debug)]
pub struct AccelerationStructure {
    raw: vk::AccelerationStructureKHR,
    level: AccelerationLevel,
    name: String,
    size: u64,
    address: u64,
    /// Its storage (held for its name and size; the life's parent keeps its memory).
    storage: Buffer,
    life: Arc<Life>,
    /// `UNDEFINED` until a build of it is submitted, then [`BUILT`].
    state: Arc<Layouts>,
    /// The compacted-size query (with compaction allowed).
    query: Option<vk::QueryPool>,
    /// Bottom-level structures a top-level one references (its instances').
    references: Vec<Arc<Life>>,
    /// Triangles (bottom level) or instances (top level).
    primitives: u64,
}

/// The Vulkan objects of a structure, destroyed by the retire queue.
struct StructureGarbage {
    loader: ash::khr::acceleration_structure::Device,
    raw: vk::AccelerationStructureKHR,
    id: ObjectId,
    query: Option<(vk::QueryPool, ObjectId)>,
}

impl std::fmt::Debug for StructureGarbage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StructureGarbage").field("raw", &self.raw).finish_non_exhaustive()
    }
}

impl Retire for StructureGarbage {
    fn retire(self: Box<Self>, device: &Device) {
        // SAFETY: the structure and its query pool belong to this device; no handle is left (the
        // structure's `Life` is gone) and every submission that built, copied, queried or traced
        // it has completed (the retire queue's contract); its storage buffer retires after it
        // (the life's parent).
        unsafe {
            self.loader.destroy_acceleration_structure(self.raw, None);
            if let Some((pool, _)) = self.query {
                device.raw().destroy_query_pool(pool, None);
            }
        }
        device.ledger().untrack(self.id);
        if let Some((_, id)) = self.query {
            device.ledger().untrack(id);
        }
    }
}

/// What a structure's life keeps until it is destroyed: its storage and the structures it
/// references; each is told the structure's pending uses.
struct Keeps(Vec<Arc<Life>>);

impl Parent for Keeps {
    fn note_pending(&self, uses: &LastUses) {
        for life in &self.0 {
            life.note_pending(uses);
        }
    }

    fn name(&self) -> String {
        "an acceleration structure's storage".to_owned()
    }
}

/// Checks the device's features.
fn require(device: &Device, ray_query: bool) -> Result<(), AccelerationError> {
    match missing_feature(&device.features(), ray_query) {
        Some(feature) => Err(AccelerationError::Unsupported { device: device.name().to_owned(), feature }),
        None => Ok(()),
    }
}

/// The device's acceleration-structure limits.
fn limits(device: &Device) -> vk::PhysicalDeviceAccelerationStructurePropertiesKHR<'static> {
    let mut props = vk::PhysicalDeviceAccelerationStructurePropertiesKHR::default();
    let mut props2 = vk::PhysicalDeviceProperties2::default().push_next(&mut props);
    // SAFETY: a pure query of this device's physical device, whose extension is enabled (checked
    // by the callers); the chain points at a live struct.
    unsafe { device.instance().get_physical_device_properties2(device.physical(), &mut props2) };
    vk::PhysicalDeviceAccelerationStructurePropertiesKHR {
        p_next: std::ptr::null_mut(),
        _marker: std::marker::PhantomData,
        ..props
    }
}

/// (bytes of a vertex, bytes of its smallest component) of a position format builds take.
fn vertex_format(format: vk::Format) -> Option<(u64, u64)> {
    Some(match format {
        vk::Format::R32G32B32_SFLOAT => (12, 4),
        vk::Format::R32G32_SFLOAT => (8, 4),
        vk::Format::R16G16B16A16_SFLOAT | vk::Format::R16G16B16A16_SNORM => (8, 2),
        vk::Format::R16G16_SFLOAT | vk::Format::R16G16_SNORM => (4, 2),
        _ => return None,
    })
}

/// The device address of `buffer`'s first byte.
fn buffer_address(buffer: &Buffer) -> u64 {
    let info = vk::BufferDeviceAddressInfo::default().buffer(buffer.raw());
    // SAFETY: a live buffer of its device; callers pass only buffers with DEVICE_ADDRESS usage on
    // a device with `bufferDeviceAddress` enabled (checked first).
    let base = unsafe { buffer.device().raw().get_buffer_device_address(&info) };
    base.wrapping_add(buffer.offset())
}

fn needs_usage(name: &str, buffer: &Buffer, usage: BufferUsage) -> Result<(), AccelerationError> {
    if !buffer.usage().contains(usage) {
        return Err(AccelerationError::Invalid {
            name: name.to_owned(),
            reason: format!("`{}` lacks the {usage:?} usage", buffer.name()),
        });
    }
    Ok(())
}

/// A structure created (with its storage and scratch) whose build is not recorded yet. Dropped
/// unrecorded, it releases everything at once (nothing used it).
pub(crate) struct Prepared {
    structure: AccelerationStructure,
    /// The build's scratch and its address (a compacting copy has none).
    scratch: Option<(Buffer, u64)>,
    kind: Build,
}

/// The inputs a recorded build reads.
enum Build {
    Triangles {
        geometries: Vec<(vk::AccelerationStructureGeometryKHR<'static>, u32)>,
        inputs: Vec<Arc<Life>>,
    },
    Instances {
        buffer: Buffer,
        address: u64,
        count: u32,
        references: Vec<Arc<Layouts>>,
    },
    Compact {
        source: Arc<Life>,
        source_raw: vk::AccelerationStructureKHR,
        source_state: Arc<Layouts>,
    },
}

impl std::fmt::Debug for Prepared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Prepared").field("structure", &self.structure.name).finish_non_exhaustive()
    }
}

impl AccelerationStructure {
    /// Builds a bottom-level structure from triangles: its storage and scratch from `pool`
    /// (device-local, with the usages `ACCELERATION_STRUCTURE_STORAGE | DEVICE_ADDRESS` and
    /// `STORAGE | DEVICE_ADDRESS`: an unknown-flags pool, or a known-flags pool with both), the
    /// build recorded into `rec`. Everything is checked first (see the module documentation); a
    /// refusal creates and records nothing. The structure may be used once the recording's
    /// submission was made (before it is refused at submission).
    pub fn build_bottom(
        rec: &mut Recording<'_>,
        pool: &BufferPool,
        desc: &BottomLevelDesc<'_>,
    ) -> Result<AccelerationStructure, AccelerationError> {
        check_recording(rec, pool.device(), &desc.name)?;
        let prepared = Self::prepare_bottom(pool, desc)?;
        Ok(prepared.record(rec))
    }

    /// Builds a top-level structure of `desc.instances` (as [`AccelerationStructure::build_bottom`]
    /// does); the instance records are written by residency into an upload buffer of the device's
    /// own, released after the build. Every instance's structure must be a bottom-level one of
    /// the pool's device; the submission requires each built before (in submission order).
    pub fn build_top(
        rec: &mut Recording<'_>,
        pool: &BufferPool,
        desc: &TopLevelDesc<'_>,
    ) -> Result<AccelerationStructure, AccelerationError> {
        check_recording(rec, pool.device(), &desc.name)?;
        let prepared = Self::prepare_top(pool, desc)?;
        Ok(prepared.record(rec))
    }

    /// Bytes of the compacted structure, read from the compacted-size query its build wrote:
    /// [`AccelerationError::NotCompactable`] without `allow_compaction`,
    /// [`AccelerationError::NotBuilt`] before its build's submission was made,
    /// [`AccelerationError::NotReady`] until that submission completed.
    pub fn compacted_size(&self) -> Result<u64, AccelerationError> {
        let Some(query) = self.query else {
            return Err(AccelerationError::NotCompactable { name: self.name.clone() });
        };
        if self.state.lock()[0] != BUILT {
            return Err(AccelerationError::NotBuilt { name: self.name.clone() });
        }
        let mut size = [0u64; 1];
        // SAFETY: the query pool is this structure's, of its device; its one query was reset by a
        // waited submission when the structure was made (`create`), and again and written by the
        // build, so it is never uninitialized; no WAIT: a query the build has not written yet
        // answers NOT_READY.
        let result = unsafe {
            self.device().raw().get_query_pool_results(query, 0, &mut size, vk::QueryResultFlags::TYPE_64)
        };
        match result {
            Ok(()) => Ok(size[0]),
            Err(vk::Result::NOT_READY) => Err(AccelerationError::NotReady { name: self.name.clone() }),
            Err(r) => Err(VulkanError::from_vk("vkGetQueryPoolResults", r).into()),
        }
    }

    /// Records a compacted copy of this structure into a new one of its compacted size (storage
    /// from `pool`), named `name`; a top-level copy keeps the same bottom-level structures. Needs
    /// the compacted size ([`AccelerationStructure::compacted_size`]: the build completed). The
    /// copy may be used once the recording's submission was made; this one stays valid.
    pub fn compact(
        &self,
        rec: &mut Recording<'_>,
        pool: &BufferPool,
        name: &str,
    ) -> Result<AccelerationStructure, AccelerationError> {
        check_recording(rec, pool.device(), name)?;
        let prepared = self.prepare_compact(pool, name)?;
        Ok(prepared.record(rec))
    }

    /// The `VkAccelerationStructureKHR`, for your own `unsafe` commands (declare their uses with
    /// [`AccelerationStructure::used_until`]).
    pub fn raw(&self) -> vk::AccelerationStructureKHR {
        self.raw
    }

    /// Bottom or top level.
    pub fn level(&self) -> AccelerationLevel {
        self.level
    }

    /// Its name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Bytes of the structure in its storage.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// Its device address (what an instance record references).
    pub fn address(&self) -> u64 {
        self.address
    }

    /// Triangles (bottom level) or instances (top level) it was built from.
    pub fn primitives(&self) -> u64 {
        self.primitives
    }

    /// Its storage buffer (a buffer of the pool it was built with).
    pub fn storage(&self) -> &Buffer {
        &self.storage
    }

    /// Whether a build (or compacting copy) of it has been submitted.
    pub fn is_built(&self) -> bool {
        self.state.lock()[0] == BUILT
    }

    /// Its device.
    pub fn device(&self) -> &Arc<Device> {
        self.life.device()
    }

    /// Declares a use of the renderer's own work that ends at `until`.
    pub fn used_until(
        &self,
        until: crate::device::life::GpuUse,
    ) -> Result<(), crate::device::life::ForeignUse> {
        self.life.used_until(until)
    }

    pub(crate) fn life(&self) -> &Arc<Life> {
        &self.life
    }

    pub(crate) fn build_state(&self) -> &Arc<Layouts> {
        &self.state
    }

    /// Creates a structure of `level` and `size` bytes with its storage from `pool` (and a
    /// compacted-size query when `compactable`), keeping `references`.
    fn create(
        pool: &BufferPool,
        name: &str,
        level: AccelerationLevel,
        size: u64,
        compactable: bool,
        references: Vec<Arc<Life>>,
        primitives: u64,
    ) -> Result<AccelerationStructure, AccelerationError> {
        let device = pool.device();
        let usage = BufferUsage::ACCELERATION_STRUCTURE_STORAGE | BufferUsage::DEVICE_ADDRESS;
        let mut storage = pool.init_buffer(
            &BufferInit::new(format!("{name} storage"), size)
                .with_usage(usage)
                .with_alignment(STORAGE_ALIGNMENT),
        )?;
        // It is the structure's memory: a move would leave the structure behind.
        storage.set_movable(false);
        if storage.offset() % STORAGE_ALIGNMENT != 0 || !storage.usage().contains(usage) {
            return Err(AccelerationError::Invalid {
                name: name.to_owned(),
                reason: format!(
                    "the pool gave storage at offset {} with {:?}; a structure needs {STORAGE_ALIGNMENT} B and {usage:?}",
                    storage.offset(),
                    storage.usage()
                ),
            });
        }
        let ty = match level {
            AccelerationLevel::Bottom => vk::AccelerationStructureTypeKHR::BOTTOM_LEVEL,
            AccelerationLevel::Top => vk::AccelerationStructureTypeKHR::TOP_LEVEL,
        };
        let loader = ash::khr::acceleration_structure::Device::new(device.instance(), device.raw());
        let info = vk::AccelerationStructureCreateInfoKHR::default()
            .buffer(storage.raw())
            .offset(storage.offset())
            .size(size)
            .ty(ty);
        // SAFETY: the extension is enabled (checked by the callers); the storage buffer is live,
        // of this device, has ACCELERATION_STRUCTURE_STORAGE usage and holds `size` bytes from its
        // offset, a multiple of 256 (checked above). The structure is destroyed by its life.
        let raw = unsafe { loader.create_acceleration_structure(&info, None) }
            .during("vkCreateAccelerationStructureKHR")?;
        device.set_name(raw, name);
        let id = device.ledger().track("acceleration structure", name.to_owned());
        let mut garbage = StructureGarbage { loader, raw, id, query: None };
        if compactable {
            let info = vk::QueryPoolCreateInfo::default()
                .query_type(vk::QueryType::ACCELERATION_STRUCTURE_COMPACTED_SIZE_KHR)
                .query_count(1);
            // SAFETY: valid device with the extension enabled; a valid description.
            match unsafe { device.raw().create_query_pool(&info, None) } {
                Ok(query) => {
                    device.set_name(query, &format!("{name} compacted size"));
                    let qid = device.ledger().track("query pool", format!("{name} compacted size"));
                    garbage.query = Some((query, qid));
                }
                Err(r) => {
                    // The structure goes with the garbage (nothing used it).
                    Garbage::Custom(Box::new(garbage)).destroy(device);
                    return Err(VulkanError::from_vk("vkCreateQueryPool", r).into());
                }
            }
        }
        let query = garbage.query.map(|(q, _)| q);
        if let Some(query) = query {
            // A query is uninitialized until reset, and the host may read the compacted size as
            // soon as the build is submitted, before the GPU runs the build's own reset: reset it
            // here, waited for, so every read finds it reset (NOT_READY) or written.
            let reset = device.submit_once(&format!("{name} compacted size reset"), |rec| {
                // SAFETY: `rec` is recording on this device outside a render pass; the pool is
                // this structure's one-query pool, alive (in `garbage`) until the wait returns.
                unsafe { device.raw().cmd_reset_query_pool(rec.raw(), query, 0, 1) };
            });
            if let Err(e) = reset {
                // Nothing used the structure or the pool: both go now.
                Garbage::Custom(Box::new(garbage)).destroy(device);
                return Err(e.into());
            }
        }
        let info = vk::AccelerationStructureDeviceAddressInfoKHR::default().acceleration_structure(raw);
        // SAFETY: a live structure of this device.
        let address = unsafe { garbage.loader.get_acceleration_structure_device_address(&info) };
        let mut keeps = vec![Arc::clone(storage.life())];
        keeps.extend(references.iter().cloned());
        let parent: Arc<dyn Parent> = Arc::new(Keeps(keeps));
        let life = Life::new(Arc::clone(device), Garbage::Custom(Box::new(garbage)), Some(parent));
        Ok(AccelerationStructure {
            raw,
            level,
            name: name.to_owned(),
            size,
            address,
            storage,
            life,
            state: Layouts::new(name, 1, 1, vk::ImageLayout::UNDEFINED),
            query,
            references,
            primitives,
        })
    }

    /// The build sizes of `geometries` with `primitive_counts`.
    fn sizes(
        device: &Device,
        ty: vk::AccelerationStructureTypeKHR,
        flags: vk::BuildAccelerationStructureFlagsKHR,
        geometries: &[vk::AccelerationStructureGeometryKHR<'_>],
        primitive_counts: &[u32],
    ) -> vk::AccelerationStructureBuildSizesInfoKHR<'static> {
        let loader = ash::khr::acceleration_structure::Device::new(device.instance(), device.raw());
        let build = vk::AccelerationStructureBuildGeometryInfoKHR::default()
            .ty(ty)
            .flags(flags)
            .mode(vk::BuildAccelerationStructureModeKHR::BUILD)
            .geometries(geometries);
        let mut sizes = vk::AccelerationStructureBuildSizesInfoKHR::default();
        // SAFETY: the extension is enabled; a valid build description (one primitive count per
        // geometry, each within the device's limits: checked by the callers).
        unsafe {
            loader.get_acceleration_structure_build_sizes(
                vk::AccelerationStructureBuildTypeKHR::DEVICE,
                &build,
                primitive_counts,
                &mut sizes,
            )
        };
        vk::AccelerationStructureBuildSizesInfoKHR {
            p_next: std::ptr::null_mut(),
            _marker: std::marker::PhantomData,
            ..sizes
        }
    }

    /// A scratch buffer of `size` bytes from `pool` at the device's scratch alignment.
    fn scratch(pool: &BufferPool, name: &str, size: u64) -> Result<(Buffer, u64), AccelerationError> {
        let device = pool.device();
        let alignment = device.scratch_alignment().max(1).next_power_of_two();
        let mut scratch = pool.init_buffer(
            &BufferInit::new(format!("{name} scratch"), size.max(1))
                .with_usage(BufferUsage::STORAGE | BufferUsage::DEVICE_ADDRESS)
                .with_alignment(alignment),
        )?;
        scratch.set_movable(false);
        if !scratch.usage().contains(BufferUsage::STORAGE | BufferUsage::DEVICE_ADDRESS) {
            return Err(AccelerationError::Invalid {
                name: name.to_owned(),
                reason: format!("the pool's scratch has {:?}, not STORAGE | DEVICE_ADDRESS", scratch.usage()),
            });
        }
        let address = buffer_address(&scratch);
        if address % alignment != 0 {
            return Err(AccelerationError::Invalid {
                name: name.to_owned(),
                reason: format!(
                    "the pool's scratch is at address {address:#x}, not a multiple of \
                     minAccelerationStructureScratchOffsetAlignment {alignment}"
                ),
            });
        }
        Ok((scratch, address))
    }

    /// Checks a bottom-level description and creates the structure and its scratch.
    pub(crate) fn prepare_bottom(
        pool: &BufferPool,
        desc: &BottomLevelDesc<'_>,
    ) -> Result<Prepared, AccelerationError> {
        let device = pool.device();
        let name = desc.name.as_str();
        let invalid = |reason: String| AccelerationError::Invalid { name: name.to_owned(), reason };
        require(device, false)?;
        let limits = limits(device);
        if desc.geometries.is_empty() || desc.geometries.len() as u64 > limits.max_geometry_count {
            return Err(invalid(format!(
                "{} geometries; a bottom-level structure takes 1 to maxGeometryCount = {}",
                desc.geometries.len(),
                limits.max_geometry_count
            )));
        }
        let mut total: u64 = 0;
        let mut geometries = Vec::with_capacity(desc.geometries.len());
        let mut counts = Vec::with_capacity(desc.geometries.len());
        let mut inputs = Vec::with_capacity(desc.geometries.len());
        for (i, g) in desc.geometries.iter().enumerate() {
            let buffer = g.vertices;
            if !buffer.device().is(device) {
                return Err(AccelerationError::WrongDevice {
                    name: name.to_owned(),
                    resource: buffer.name().to_owned(),
                });
            }
            needs_usage(
                name,
                buffer,
                BufferUsage::ACCELERATION_STRUCTURE_BUILD_INPUT | BufferUsage::DEVICE_ADDRESS,
            )?;
            let Some((vertex_bytes, component)) = vertex_format(g.format) else {
                return Err(invalid(format!(
                    "geometry {i}: {:?} is not a vertex format builds take",
                    g.format
                )));
            };
            // SAFETY: a pure query of this device's physical device.
            let props = unsafe {
                device.instance().get_physical_device_format_properties(device.physical(), g.format)
            };
            if !props
                .buffer_features
                .contains(vk::FormatFeatureFlags::ACCELERATION_STRUCTURE_VERTEX_BUFFER_KHR)
            {
                return Err(invalid(format!(
                    "geometry {i}: the device cannot build from {:?} vertices",
                    g.format
                )));
            }
            if g.triangles == 0 {
                return Err(invalid(format!("geometry {i} has no triangles")));
            }
            let needed = u64::from(g.triangles) * 3;
            if needed > u64::from(g.vertex_count) {
                return Err(invalid(format!(
                    "geometry {i}: {} triangles read {needed} vertices, {} were given",
                    g.triangles, g.vertex_count
                )));
            }
            if g.stride % component != 0 || g.stride > u64::from(u32::MAX) {
                return Err(invalid(format!(
                    "geometry {i}: stride {} is not a multiple of {component} B below 2^32",
                    g.stride
                )));
            }
            let end = (u64::from(g.vertex_count) - 1)
                .checked_mul(g.stride)
                .and_then(|last| last.checked_add(g.offset))
                .and_then(|last| last.checked_add(vertex_bytes));
            if end.is_none_or(|end| end > buffer.size()) {
                return Err(invalid(format!(
                    "geometry {i}: {} vertices of {vertex_bytes} B, {} B apart from {} are outside `{}`'s {} B",
                    g.vertex_count,
                    g.stride,
                    g.offset,
                    buffer.name(),
                    buffer.size()
                )));
            }
            let address = buffer_address(buffer).wrapping_add(g.offset);
            if address % component != 0 {
                return Err(invalid(format!(
                    "geometry {i}: the vertices' address {address:#x} is not a multiple of {component} B"
                )));
            }
            total = total.saturating_add(u64::from(g.triangles));
            let triangles = vk::AccelerationStructureGeometryTrianglesDataKHR::default()
                .vertex_format(g.format)
                .vertex_data(vk::DeviceOrHostAddressConstKHR { device_address: address })
                .vertex_stride(g.stride)
                .max_vertex(g.vertex_count - 1)
                .index_type(vk::IndexType::NONE_KHR);
            let flags = if g.opaque { vk::GeometryFlagsKHR::OPAQUE } else { vk::GeometryFlagsKHR::empty() };
            geometries.push(
                vk::AccelerationStructureGeometryKHR::default()
                    .geometry_type(vk::GeometryTypeKHR::TRIANGLES)
                    .flags(flags)
                    .geometry(vk::AccelerationStructureGeometryDataKHR { triangles }),
            );
            counts.push(g.triangles);
            inputs.push(Arc::clone(buffer.life()));
        }
        if total > limits.max_primitive_count {
            return Err(invalid(format!(
                "{total} triangles in all, over maxPrimitiveCount = {}",
                limits.max_primitive_count
            )));
        }
        let flags = build_flags(desc.allow_compaction);
        let sizes =
            Self::sizes(device, vk::AccelerationStructureTypeKHR::BOTTOM_LEVEL, flags, &geometries, &counts);
        let structure = Self::create(
            pool,
            name,
            AccelerationLevel::Bottom,
            sizes.acceleration_structure_size,
            desc.allow_compaction,
            Vec::new(),
            total,
        )?;
        let scratch = Some(Self::scratch(pool, name, sizes.build_scratch_size)?);
        let geometries = geometries.into_iter().zip(counts).collect();
        Ok(Prepared { structure, scratch, kind: Build::Triangles { geometries, inputs } })
    }

    /// Checks a top-level description, writes its instance records and creates the structure and
    /// its scratch.
    pub(crate) fn prepare_top(
        pool: &BufferPool,
        desc: &TopLevelDesc<'_>,
    ) -> Result<Prepared, AccelerationError> {
        let device = pool.device();
        let name = desc.name.as_str();
        let invalid = |reason: String| AccelerationError::Invalid { name: name.to_owned(), reason };
        require(device, false)?;
        let limits = limits(device);
        let count = desc.instances.len() as u64;
        if count == 0 || count > limits.max_instance_count || count > u64::from(u32::MAX) {
            return Err(invalid(format!(
                "{count} instances; a top-level structure takes 1 to maxInstanceCount = {}",
                limits.max_instance_count
            )));
        }
        let mut bytes = Vec::with_capacity((count * INSTANCE_BYTES) as usize);
        let mut references: Vec<Arc<Life>> = Vec::new();
        let mut states: Vec<Arc<Layouts>> = Vec::new();
        for (i, instance) in desc.instances.iter().enumerate() {
            let s = instance.structure;
            if !s.device().is(device) {
                return Err(AccelerationError::WrongDevice {
                    name: name.to_owned(),
                    resource: s.name().to_owned(),
                });
            }
            if s.level != AccelerationLevel::Bottom {
                return Err(invalid(format!("instance {i}: `{}` is not a bottom-level structure", s.name())));
            }
            if instance.custom_index >= 1 << 24 {
                return Err(invalid(format!(
                    "instance {i}: custom index {} is not below 2^24",
                    instance.custom_index
                )));
            }
            // The GPU reads hit group `sbt_offset` of the shader table a trace binds, and
            // residency's ray-tracing programs have exactly one: any other offset would read past
            // the table.
            if instance.sbt_offset != 0 {
                return Err(invalid(format!(
                    "instance {i}: shader binding table offset {} (residency's ray-tracing programs have one hit group: 0)",
                    instance.sbt_offset
                )));
            }
            // The core instance flags only: the others belong to extensions residency does not
            // enable (opacity micromaps).
            if instance.flags.as_raw() > 0x0F {
                return Err(invalid(format!(
                    "instance {i}: flags {:?} are not core instance flags",
                    instance.flags
                )));
            }
            for row in &instance.transform {
                for v in row {
                    bytes.extend_from_slice(&v.to_le_bytes());
                }
            }
            bytes
                .extend_from_slice(&(instance.custom_index | (u32::from(instance.mask) << 24)).to_le_bytes());
            bytes.extend_from_slice(&(instance.sbt_offset | (instance.flags.as_raw() << 24)).to_le_bytes());
            bytes.extend_from_slice(&s.address().to_le_bytes());
            if !references.iter().any(|l| Arc::ptr_eq(l, s.life())) {
                references.push(Arc::clone(s.life()));
                states.push(Arc::clone(&s.state));
            }
        }
        let usage = BufferUsage::ACCELERATION_STRUCTURE_BUILD_INPUT | BufferUsage::DEVICE_ADDRESS;
        let mut buffer = device.create_buffer(
            &BufferDesc::new(format!("{name} instances"), count * INSTANCE_BYTES, usage)
                .with_intent(MemoryIntent::Upload)
                .with_alignment(16),
        )?;
        buffer.write(0, &bytes)?;
        let address = buffer_address(&buffer);
        if address % 16 != 0 {
            return Err(invalid(format!(
                "the instance records' address {address:#x} is not a multiple of 16 B"
            )));
        }
        let flags = build_flags(desc.allow_compaction);
        let geometry = [instances_geometry(address)];
        let sizes = Self::sizes(
            device,
            vk::AccelerationStructureTypeKHR::TOP_LEVEL,
            flags,
            &geometry,
            &[count as u32],
        );
        let structure = Self::create(
            pool,
            name,
            AccelerationLevel::Top,
            sizes.acceleration_structure_size,
            desc.allow_compaction,
            references,
            count,
        )?;
        let scratch = Some(Self::scratch(pool, name, sizes.build_scratch_size)?);
        Ok(Prepared {
            structure,
            scratch,
            kind: Build::Instances { buffer, address, count: count as u32, references: states },
        })
    }

    /// Checks a compaction and creates the compacted structure.
    pub(crate) fn prepare_compact(
        &self,
        pool: &BufferPool,
        name: &str,
    ) -> Result<Prepared, AccelerationError> {
        if !pool.device().is(self.device()) {
            return Err(AccelerationError::WrongDevice {
                name: self.name.clone(),
                resource: pool.desc().name.clone(),
            });
        }
        let size = self.compacted_size()?;
        if size == 0 {
            return Err(AccelerationError::Invalid {
                name: self.name.clone(),
                reason: "the compacted-size query answered 0 B".to_owned(),
            });
        }
        let structure =
            Self::create(pool, name, self.level, size, false, self.references.clone(), self.primitives)?;
        Ok(Prepared {
            structure,
            scratch: None,
            kind: Build::Compact {
                source: Arc::clone(&self.life),
                source_raw: self.raw,
                source_state: Arc::clone(&self.state),
            },
        })
    }
}

/// One build of `dst` from `geometries` with the scratch at `scratch_address` (compactable when
/// its size is to be queried).
fn build_info<'a>(
    ty: vk::AccelerationStructureTypeKHR,
    compactable: bool,
    geometries: &'a [vk::AccelerationStructureGeometryKHR<'a>],
    dst: vk::AccelerationStructureKHR,
    scratch_address: vk::DeviceAddress,
) -> vk::AccelerationStructureBuildGeometryInfoKHR<'a> {
    vk::AccelerationStructureBuildGeometryInfoKHR::default()
        .ty(ty)
        .flags(build_flags(compactable))
        .mode(vk::BuildAccelerationStructureModeKHR::BUILD)
        .geometries(geometries)
        .dst_acceleration_structure(dst)
        .scratch_data(vk::DeviceOrHostAddressKHR { device_address: scratch_address })
}

fn build_flags(allow_compaction: bool) -> vk::BuildAccelerationStructureFlagsKHR {
    let mut flags = vk::BuildAccelerationStructureFlagsKHR::PREFER_FAST_TRACE;
    if allow_compaction {
        flags |= vk::BuildAccelerationStructureFlagsKHR::ALLOW_COMPACTION;
    }
    flags
}

fn instances_geometry(address: u64) -> vk::AccelerationStructureGeometryKHR<'static> {
    vk::AccelerationStructureGeometryKHR::default().geometry_type(vk::GeometryTypeKHR::INSTANCES).geometry(
        vk::AccelerationStructureGeometryDataKHR {
            instances: vk::AccelerationStructureGeometryInstancesDataKHR::default()
                .array_of_pointers(false)
                .data(vk::DeviceOrHostAddressConstKHR { device_address: address }),
        },
    )
}

/// One global barrier in `rec`.
fn barrier(
    rec: &mut Recording<'_>,
    src: (vk::PipelineStageFlags2, vk::AccessFlags2),
    dst: (vk::PipelineStageFlags2, vk::AccessFlags2),
) {
    let barrier = [vk::MemoryBarrier2::default()
        .src_stage_mask(src.0)
        .src_access_mask(src.1)
        .dst_stage_mask(dst.0)
        .dst_access_mask(dst.1)];
    // SAFETY: `rec` is recording outside a render pass on a device with
    // VK_KHR_acceleration_structure (so its build stage and accesses are valid); each access is
    // performed by its stages; the barrier lives for the call.
    unsafe {
        rec.device()
            .raw()
            .cmd_pipeline_barrier2(rec.raw(), &vk::DependencyInfo::default().memory_barriers(&barrier))
    };
    rec.recorded();
}

/// Whether `rec` can take a build of a structure of `pool_device`, before anything is made.
fn check_recording(rec: &Recording<'_>, pool_device: &Device, name: &str) -> Result<(), AccelerationError> {
    if !rec.device().is(pool_device) {
        return Err(AccelerationError::WrongDevice {
            name: name.to_owned(),
            resource: "the recording".to_owned(),
        });
    }
    Ok(())
}

impl Prepared {
    /// The structure it will build.
    pub(crate) fn structure(&self) -> &AccelerationStructure {
        &self.structure
    }

    /// Records the build (or compacting copy) between its barriers; `rec` is of the structure's
    /// device (checked by the callers).
    pub(crate) fn record(self, rec: &mut Recording<'_>) -> AccelerationStructure {
        assert!(rec.device().is(self.structure.device()), "checked by the callers");
        let Prepared { structure, scratch, kind } = self;
        let scratch_address = scratch.as_ref().map_or(0, |(_, address)| *address);
        let device = Arc::clone(structure.device());
        let loader = ash::khr::acceleration_structure::Device::new(device.instance(), device.raw());
        use vk::AccessFlags2 as A;
        use vk::PipelineStageFlags2 as S;
        let build_stage = S::ACCELERATION_STRUCTURE_BUILD_KHR;
        // Earlier writes of the inputs (and earlier uses of the scratch's and storage's memory)
        // before the build.
        barrier(
            rec,
            (S::ALL_COMMANDS, A::MEMORY_READ | A::MEMORY_WRITE),
            (
                build_stage,
                A::ACCELERATION_STRUCTURE_READ_KHR | A::ACCELERATION_STRUCTURE_WRITE_KHR | A::SHADER_READ,
            ),
        );
        rec.keep(&structure.life);
        if let Some((scratch, _)) = &scratch {
            rec.keep(scratch.life());
        }
        let cmd = rec.raw();
        if let Some(query) = structure.query {
            // SAFETY: the query pool is the structure's, of this device; reset outside a render
            // pass before the build writes it.
            unsafe { device.raw().cmd_reset_query_pool(cmd, query, 0, 1) };
        }
        match &kind {
            Build::Triangles { geometries, inputs } => {
                for life in inputs {
                    rec.keep(life);
                }
                let (geometry, counts): (Vec<_>, Vec<_>) = geometries.iter().copied().unzip();
                let ranges: Vec<_> = counts
                    .iter()
                    .map(|&n| vk::AccelerationStructureBuildRangeInfoKHR::default().primitive_count(n))
                    .collect();
                let info = build_info(
                    vk::AccelerationStructureTypeKHR::BOTTOM_LEVEL,
                    structure.query.is_some(),
                    &geometry,
                    structure.raw,
                    scratch_address,
                );
                // SAFETY: `cmd` is recording on this device outside a render pass; the structure
                // was created for these geometries' sizes, its storage and the scratch (at the
                // device's scratch alignment, of the build's scratch size) are live and held by
                // the recording, as are the vertex buffers, each read inside its bytes at an
                // aligned address with a format and stride the device builds from (all checked by
                // `prepare_bottom`); one range per geometry, within the device's limits.
                unsafe { loader.cmd_build_acceleration_structures(cmd, &[info], &[&ranges]) };
            }
            Build::Instances { buffer, address, count, references } => {
                rec.keep(buffer.life());
                for (state, life) in references.iter().zip(&structure.references) {
                    rec.keep(life);
                    rec.use_layout(state, 0..1, 0..1, BUILT);
                }
                let geometry = [instances_geometry(*address)];
                let ranges = [vk::AccelerationStructureBuildRangeInfoKHR::default().primitive_count(*count)];
                let info = build_info(
                    vk::AccelerationStructureTypeKHR::TOP_LEVEL,
                    structure.query.is_some(),
                    &geometry,
                    structure.raw,
                    scratch_address,
                );
                // SAFETY: as for triangles; the instance records were written by residency from
                // live bottom-level structures of this device, which the recording holds and
                // whose builds the submission requires before it (`use_layout`), at a 16 B
                // aligned address of a buffer with the build-input usage.
                unsafe { loader.cmd_build_acceleration_structures(cmd, &[info], &[&ranges]) };
            }
            Build::Compact { source, source_raw, source_state } => {
                rec.keep(source);
                rec.use_layout(source_state, 0..1, 0..1, BUILT);
                let info = vk::CopyAccelerationStructureInfoKHR::default()
                    .src(*source_raw)
                    .dst(structure.raw)
                    .mode(vk::CopyAccelerationStructureModeKHR::COMPACT);
                // SAFETY: `cmd` is recording on this device outside a render pass; the source was
                // built with ALLOW_COMPACTION (it has the query) and is held by the recording,
                // whose submission requires its build before it; the destination is of its
                // compacted size, of the same type.
                unsafe { loader.cmd_copy_acceleration_structure(cmd, &info) };
            }
        }
        rec.recorded();
        // The build before everything later (tracing, copies, the property query, other builds).
        barrier(
            rec,
            (build_stage, A::ACCELERATION_STRUCTURE_WRITE_KHR | A::ACCELERATION_STRUCTURE_READ_KHR),
            (S::ALL_COMMANDS, A::MEMORY_READ | A::MEMORY_WRITE),
        );
        if let (Some(query), false) = (structure.query, matches!(kind, Build::Compact { .. })) {
            // SAFETY: the build above is complete before this (the barrier); the query was reset
            // above in this command buffer; the structure is held by the recording.
            unsafe {
                loader.cmd_write_acceleration_structures_properties(
                    cmd,
                    &[structure.raw],
                    vk::QueryType::ACCELERATION_STRUCTURE_COMPACTED_SIZE_KHR,
                    query,
                    0,
                )
            };
            rec.recorded();
        }
        rec.transition(&structure.state, 0..1, 0..1, vk::ImageLayout::UNDEFINED, BUILT);
        // The scratch and instance buffers are held by the recording until its submission, and
        // released after it.
        drop(scratch);
        drop(kind);
        structure
    }
}
