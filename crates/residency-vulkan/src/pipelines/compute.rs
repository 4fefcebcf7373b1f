//! Compute programs: a SPIR-V compute shader with its descriptor set layout, pipeline layout,
//! pipeline and a descriptor pool, for tests, examples, the tour and the streaming demo.

use crate::device::life::{ForeignUse, GpuUse};
use crate::device::Device;
use crate::error::{ErrorClass, ResidencyError};
use crate::error::{VkResultExt, VulkanError};
use crate::pipelines::descriptors::{shader_needs, Created, ProgramLayout};
use crate::pipelines::shaders::Shader;
use crate::pipelines::spirv::{self, Interface, SpirvError, Stage};
use crate::sync::recording::Recording;
use ash::vk;
use residency_core::device_mask::DeviceIndex;
use std::sync::Arc;

pub use crate::pipelines::descriptors::{Binding, BindingError, BindingKind, DescriptorSet, ViewRef};

/// A dispatch was refused before anything was recorded: it breaks a rule of `vkCmdDispatch` or
/// `vkCmdPushConstants` that the program can check.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DispatchError {
    /// A workgroup count is above the device's `maxComputeWorkGroupCount` on that axis (0 = x,
    /// 1 = y, 2 = z). Split the work: a 2D grid, or several dispatches with an offset.
    #[error(
        "`{program}`: {requested} workgroups on axis {axis} exceed the device's \
         maxComputeWorkGroupCount[{axis}] = {limit}"
    )]
    GroupCountOverLimit {
        /// The program.
        program: String,
        /// The axis (0 = x, 1 = y, 2 = z).
        axis: usize,
        /// Workgroups asked for on that axis.
        requested: u32,
        /// The device's limit on that axis.
        limit: u32,
    },
    /// The push constants are longer than the program declared, or not a multiple of 4 bytes.
    #[error("`{program}`: {given} bytes of push constants, but it declares {declared} (a multiple of 4)")]
    PushConstantSize {
        /// The program.
        program: String,
        /// Bytes given.
        given: usize,
        /// Bytes the program declared.
        declared: u32,
    },
    /// The recording is on another device than the program.
    #[error("`{program}` lives on {owner}; the recording is on {recording}")]
    WrongDevice {
        /// The program.
        program: String,
        /// Its device.
        owner: DeviceIndex,
        /// The recording's device.
        recording: DeviceIndex,
    },
    /// An earlier command of the recording left an image the set binds in another layout than
    /// its binding's (as [`VulkanError::ImageLayout`]).
    #[error("`{image}` mip {mip} layer {layer} is in {actual:?} where the dispatch needs {expected:?}")]
    ImageLayout {
        /// The image.
        image: String,
        /// The mip level.
        mip: u32,
        /// The array layer.
        layer: u32,
        /// The binding's layout.
        expected: vk::ImageLayout,
        /// The layout an earlier command left it in.
        actual: vk::ImageLayout,
    },
    /// The descriptor set was made by another program.
    #[error("the descriptor set was not made by `{program}`")]
    ForeignSet {
        /// The program.
        program: String,
    },
}

impl ResidencyError for DispatchError {
    fn class(&self) -> ErrorClass {
        match self {
            DispatchError::GroupCountOverLimit { .. }
            | DispatchError::PushConstantSize { .. }
            | DispatchError::WrongDevice { .. }
            | DispatchError::ImageLayout { .. }
            | DispatchError::ForeignSet { .. } => ErrorClass::Refused,
        }
    }
}

/// A program was refused before anything was created: its code is not SPIR-V, or the interface
/// the SPIR-V declares does not match the program's layout, or breaks a device limit.
#[derive(Debug, thiserror::Error)]
pub enum ProgramError {
    /// The words are not a SPIR-V module (no header, wrong magic number, truncated).
    #[error("`{program}`: {source}")]
    NotSpirv {
        /// The program.
        program: String,
        /// What is wrong with the words.
        #[source]
        source: SpirvError,
    },
    /// The module has no entry point `main` of the stage the program needs.
    #[error("`{program}` needs a {stage:?} entry point `main`; the module has {found:?}")]
    Stage {
        /// The program.
        program: String,
        /// The stage it needs.
        stage: Stage,
        /// The module's entry points.
        found: Vec<(Stage, String)>,
    },
    /// A descriptor the shader declares is not a binding of the program's layout, or is not of
    /// the kind the program declares there.
    #[error(
        "`{program}`: the shader declares set {set} binding {binding} as {}, the program {}",
        .found.map_or_else(|| format!("{count} descriptors of a type residency does not create"),
            |k| format!("{count} × {k:?}")),
        .declared.map_or_else(|| "has no such binding".to_owned(), |k| format!("declares {k:?}"))
    )]
    Binding {
        /// The program.
        program: String,
        /// `DescriptorSet` of the shader's variable.
        set: u32,
        /// `Binding` of the shader's variable.
        binding: u32,
        /// What the program declares there (`None`: no such binding).
        declared: Option<BindingKind>,
        /// What the shader declares (`None`: a type residency does not create).
        found: Option<BindingKind>,
        /// Descriptors in the shader's binding (1; an array's length; 0 for a runtime array).
        count: u32,
    },
    /// The push-constant range is not a multiple of 4, over the device's limit, or smaller than
    /// the shader's push-constant block.
    #[error(
        "`{program}`: {declared} B of push constants for a {block} B block \
         (a multiple of 4, at least the block, at most the device's {limit})"
    )]
    PushConstants {
        /// The program.
        program: String,
        /// Bytes the program declares.
        declared: u32,
        /// Bytes of the shader's block.
        block: u32,
        /// The device's `maxPushConstantsSize`.
        limit: u32,
    },
    /// The workgroup size is over the device's `maxComputeWorkGroupSize` or
    /// `maxComputeWorkGroupInvocations`.
    #[error(
        "`{program}`: workgroup {size:?} is over the device's maxComputeWorkGroupSize {limit:?} \
         or maxComputeWorkGroupInvocations {invocations}"
    )]
    WorkgroupSize {
        /// The program.
        program: String,
        /// The shader's `LocalSize`.
        size: [u32; 3],
        /// The device's limit per axis.
        limit: [u32; 3],
        /// The device's limit on invocations.
        invocations: u32,
    },
    /// The module declares a SPIR-V capability whose device feature is not enabled
    /// (`SparseResidency` without `shaderResourceResidency`, `MinLod` without
    /// `shaderResourceMinLod`: e.g. the residency shaders on a device opened without sparse
    /// residency).
    #[error("`{program}`: the {stage:?} shader needs the device feature {feature}; it is not enabled")]
    CapabilityMissing {
        /// The program.
        program: String,
        /// The stage.
        stage: Stage,
        /// The feature, as the specification names it.
        feature: &'static str,
    },
    /// A shader needs a device feature that is not enabled: a fragment shader that writes a
    /// storage buffer or image (`fragmentStoresAndAtomics`), a vertex shader that does
    /// (`vertexPipelineStoresAndAtomics`, which residency never enables).
    #[error(
        "`{program}`: the {stage:?} shader writes set 0 binding {binding}, which needs the device \
         feature {feature}; it is not enabled"
    )]
    FeatureMissing {
        /// The program.
        program: String,
        /// The stage that writes.
        stage: Stage,
        /// The binding it writes (a storage buffer or image without `NonWritable`).
        binding: u32,
        /// The feature, as the specification names it.
        feature: &'static str,
    },
    /// The vertex input state or colour format does not fit the vertex shader or the device.
    #[error("`{program}`: {reason}")]
    Graphics {
        /// The program.
        program: String,
        /// What does not fit.
        reason: String,
    },
    /// A descriptor array is empty, or the layout's combined image samplers are over a limit of
    /// the device (the update-after-bind limits when a binding is bindless).
    #[error("`{program}` binding {binding}: {count} descriptors, over {limit_name} = {limit}")]
    DescriptorCount {
        /// The program.
        program: String,
        /// The binding at which the total went over.
        binding: u32,
        /// Descriptors in the binding.
        count: u32,
        /// The device's limit (0 for an empty array).
        limit: u32,
        /// The limit, as the specification names it.
        limit_name: &'static str,
    },
    /// A Vulkan call failed.
    #[error(transparent)]
    Vulkan(#[from] VulkanError),
}

impl ResidencyError for ProgramError {
    fn class(&self) -> ErrorClass {
        match self {
            ProgramError::NotSpirv { source, .. } => source.class(),
            ProgramError::Vulkan(e) => e.class(),
            ProgramError::Stage { .. }
            | ProgramError::Binding { .. }
            | ProgramError::PushConstants { .. }
            | ProgramError::Graphics { .. } => ErrorClass::Refused,
            // The shader needs more than this device offers.
            ProgramError::WorkgroupSize { .. }
            | ProgramError::DescriptorCount { .. }
            | ProgramError::CapabilityMissing { .. }
            | ProgramError::FeatureMissing { .. } => ErrorClass::Unsupported,
        }
    }
}

/// A compute shader with everything needed to dispatch it: its pipeline, layouts and descriptor
/// pool. It holds its device and is released when dropped, once the GPU work that may use it has
/// completed (and after the last of its [`DescriptorSet`]s).
///
/// [`ComputeProgram::new`] takes one of the [shipped shaders](crate::shaders), whose code glslc
/// produced; a renderer's own SPIR-V goes through the `unsafe` [`ComputeProgram::from_spirv`].
/// Either way the SPIR-V's declared interface (descriptors of set 0, push-constant block,
/// workgroup size) is reflected and checked against the program before anything is created.
#[derive(Debug)]
pub struct ComputeProgram {
    program: ProgramLayout,
    pipeline: vk::Pipeline,
}

/// Reads SPIR-V words from bytes (as `include_bytes!` or a file gives them), little-endian.
pub fn spirv_words(bytes: &[u8]) -> Vec<u32> {
    bytes.chunks_exact(4).map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect()
}

/// Reflects `spirv` and checks that it has an entry point `main` of `stage`, that every
/// descriptor it declares is binding `i` of set 0 with kind `kinds[i]` (one descriptor), and that
/// its push-constant block fits `push_constant_bytes` (a multiple of 4 within the device's
/// limit).
/// The device feature a capability the module declares needs and the device did not enable
/// (a pipeline with it would be invalid): `SparseResidency` → `shaderResourceResidency`,
/// `MinLod` → `shaderResourceMinLod`, `RayQueryKHR` → `rayQuery`.
pub(crate) fn missing_capability_feature(
    interface: &Interface,
    features: &crate::device::EnabledFeatures,
) -> Option<&'static str> {
    let needs = [
        (spirv::CAPABILITY_SPARSE_RESIDENCY, features.shader_resource_residency, "shaderResourceResidency"),
        (spirv::CAPABILITY_MIN_LOD, features.shader_resource_min_lod, "shaderResourceMinLod"),
        (spirv::CAPABILITY_RAY_QUERY, features.ray_query, "rayQuery (VK_KHR_ray_query)"),
        (
            spirv::CAPABILITY_RAY_TRACING,
            features.ray_tracing_pipeline,
            "rayTracingPipeline (VK_KHR_ray_tracing_pipeline)",
        ),
        (spirv::CAPABILITY_RUNTIME_DESCRIPTOR_ARRAY, features.descriptor_indexing, "runtimeDescriptorArray"),
        (
            spirv::CAPABILITY_SAMPLED_IMAGE_ARRAY_NON_UNIFORM_INDEXING,
            features.descriptor_indexing,
            "shaderSampledImageArrayNonUniformIndexing",
        ),
    ];
    needs.iter().find(|(cap, enabled, _)| !enabled && interface.capabilities.contains(cap)).map(|n| n.2)
}

pub(crate) fn check_interface(
    device: &Device,
    program: &str,
    spirv: &[u32],
    stage: Stage,
    kinds: &[BindingKind],
    push_constant_bytes: u32,
) -> Result<Interface, ProgramError> {
    let interface = spirv::reflect(spirv)
        .map_err(|source| ProgramError::NotSpirv { program: program.to_owned(), source })?;
    if !interface.has_entry_point(stage, "main") {
        return Err(ProgramError::Stage {
            program: program.to_owned(),
            stage,
            found: interface.entry_points.clone(),
        });
    }
    if let Some(feature) = missing_capability_feature(&interface, &device.features()) {
        return Err(ProgramError::CapabilityMissing { program: program.to_owned(), stage, feature });
    }
    crate::pipelines::descriptors::check_descriptor_counts(device, program, stage, kinds)?;
    for b in &interface.bindings {
        let declared = if b.set == 0 { kinds.get(b.binding as usize).copied() } else { None };
        let fits = declared.is_some_and(|k| {
            let (element, count) = k.shader_declaration();
            Some(element) == b.kind && count == b.count
        });
        if !fits {
            return Err(ProgramError::Binding {
                program: program.to_owned(),
                set: b.set,
                binding: b.binding,
                declared,
                found: b.kind,
                count: b.count,
            });
        }
    }
    let limit = device.limits().max_push_constants_size;
    if push_constant_bytes % 4 != 0
        || push_constant_bytes > limit
        || interface.push_constant_bytes > push_constant_bytes
    {
        return Err(ProgramError::PushConstants {
            program: program.to_owned(),
            declared: push_constant_bytes,
            block: interface.push_constant_bytes,
            limit,
        });
    }
    Ok(interface)
}

impl ComputeProgram {
    /// Creates the program `name` of a shipped compute `shader` (its bindings in set 0 and its
    /// push-constant bytes), with descriptor pools of `max_sets` sets (at least 1, at most 4096; another pool of
    /// that size is made whenever one is used up). A shader of another stage, or a workgroup size
    /// over the device's limits, is refused with nothing
    /// created.
    pub fn new(
        device: &Device,
        name: &str,
        shader: &Shader,
        max_sets: u32,
    ) -> Result<ComputeProgram, ProgramError> {
        // SAFETY: a `Shader` is one of the shipped modules (its fields are private to the crate):
        // glslc compiled it from GLSL for Vulkan 1.3 with an entry point `main`, and its declared
        // interface is checked against its SPIR-V by a test and again by `create`.
        unsafe {
            Self::from_spirv(
                device,
                name,
                shader.words(),
                shader.bindings(),
                shader.push_constant_bytes(),
                max_sets,
            )
        }
    }

    /// Creates a program from the renderer's own SPIR-V with bindings `0..kinds.len()` in set 0,
    /// `push_constant_bytes` of push constants (a multiple of 4, at most the device's
    /// `maxPushConstantsSize`), and descriptor pools of `max_sets` sets (at least 1, at most 4096; another is
    /// made whenever one is used up).
    ///
    /// What the reflection can see is refused with a [`ProgramError`] before any Vulkan call:
    /// words that are not SPIR-V, no `GLCompute` entry point `main`, a descriptor that is not
    /// binding `i` of set 0 of kind `kinds[i]`, a push-constant block larger than
    /// `push_constant_bytes`, a workgroup size over the device's limits. Calling with words it
    /// refuses is sound.
    ///
    /// # Safety
    ///
    /// For words the reflection accepts, the caller guarantees:
    /// - `spirv` is a valid SPIR-V module (it passes `spirv-val --target-env vulkan1.3`) that
    ///   the device can run: its SPIR-V version, capabilities and extensions are supported by the
    ///   device's Vulkan version and the features residency enabled ([`Device::features`]).
    /// - Its entry point `main` is a compute shader whose statically used resources are
    ///   described by `kinds` (set 0, one descriptor per binding; the format of a storage image
    ///   compatible with the views that will be bound) and whose push-constant block lies in
    ///   `0..push_constant_bytes`; what else its code relies on (specialisation constants, a
    ///   `WorkgroupSize` built-in) is within the device's limits.
    pub unsafe fn from_spirv(
        device: &Device,
        name: &str,
        spirv: &[u32],
        kinds: &[BindingKind],
        push_constant_bytes: u32,
        max_sets: u32,
    ) -> Result<ComputeProgram, ProgramError> {
        let interface = check_interface(device, name, spirv, Stage::Compute, kinds, push_constant_bytes)?;
        if let Some(size) = interface.local_size {
            let limits = device.limits();
            let invocations = u64::from(size[0]) * u64::from(size[1]) * u64::from(size[2]);
            if (0..3).any(|i| size[i] > limits.max_compute_work_group_size[i])
                || invocations > u64::from(limits.max_compute_work_group_invocations)
            {
                return Err(ProgramError::WorkgroupSize {
                    program: name.to_owned(),
                    size,
                    limit: limits.max_compute_work_group_size,
                    invocations: limits.max_compute_work_group_invocations,
                });
            }
        }
        let stages = vec![vk::ShaderStageFlags::COMPUTE; kinds.len()];
        let mut created = Created::layouts(
            device,
            kinds,
            shader_needs(kinds.len(), &[&interface]),
            &stages,
            push_constant_bytes,
            vk::ShaderStageFlags::COMPUTE,
            max_sets,
        )?;
        let raw = device.raw();
        // SAFETY: valid device; the create infos live for each call; the module is destroyed after
        // pipeline creation on every path, and `created` destroys the layouts and pool if a step
        // fails. The code is valid SPIR-V for this device with a compute entry point `main` whose
        // interface matches the layout: the caller's contract (`# Safety`), of which the
        // reflection above checked the descriptors, push-constant block and workgroup size.
        unsafe {
            let module = raw
                .create_shader_module(&vk::ShaderModuleCreateInfo::default().code(spirv), None)
                .during("vkCreateShaderModule")?;
            let stage = vk::PipelineShaderStageCreateInfo::default()
                .stage(vk::ShaderStageFlags::COMPUTE)
                .module(module)
                .name(c"main");
            let info = vk::ComputePipelineCreateInfo::default().stage(stage).layout(created.layout);
            let pipelines = raw.create_compute_pipelines(vk::PipelineCache::null(), &[info], None);
            raw.destroy_shader_module(module, None);
            created.pipeline =
                pipelines.map_err(|(_, r)| VulkanError::from_vk("vkCreateComputePipelines", r))?[0];
        }
        let (program, pipeline) = created.finish(name, "compute pipeline");
        Ok(ComputeProgram { program, pipeline })
    }

    /// The device it lives on.
    pub fn device(&self) -> &Arc<Device> {
        self.program.life.device()
    }

    /// Declares a use of the renderer's own work that ends at `until` (a command buffer it
    /// submits itself, through [`Recording::from_raw`]); residency's submissions need nothing.
    pub fn used_until(&self, until: GpuUse) -> Result<(), ForeignUse> {
        self.program.life.used_until(until)
    }

    /// Allocates a descriptor set from the program's pool and writes `bindings` into it (one per
    /// binding, in order). Each resource must live on the program's device and fit its binding
    /// (kind, usage, layout, offset alignment and range, linear filtering of the format), and
    /// no two bindings may show the same subresources of an image in different layouts;
    /// otherwise the error names it and nothing is allocated. The set keeps what it binds alive
    /// (see [`Binding`]).
    pub fn descriptor_set(&self, bindings: &[Binding<'_>]) -> Result<DescriptorSet, BindingError> {
        self.program.descriptor_set(bindings)
    }

    /// Its name.
    pub fn name(&self) -> &str {
        &self.program.name
    }

    /// Checks a dispatch of `groups` workgroups with `push_constants` against the device's limits
    /// and the program's declared push-constant size, without recording anything. A zero count is
    /// allowed (Vulkan defines it as a dispatch that does nothing).
    pub fn check_dispatch(&self, push_constants: &[u8], groups: [u32; 3]) -> Result<(), DispatchError> {
        let limits = self.device().limits().max_compute_work_group_count;
        if let Some(axis) = (0..3).find(|&axis| groups[axis] > limits[axis]) {
            return Err(DispatchError::GroupCountOverLimit {
                program: self.program.name.clone(),
                axis,
                requested: groups[axis],
                limit: limits[axis],
            });
        }
        if !self.program.push_fits(push_constants) {
            return Err(DispatchError::PushConstantSize {
                program: self.program.name.clone(),
                given: push_constants.len(),
                declared: self.program.push_constant_bytes,
            });
        }
        Ok(())
    }

    /// Records binding the pipeline and `set`, pushing `push_constants` (zero-filled up to the
    /// declared size), and dispatching `groups`, after [`ComputeProgram::check_dispatch`]. A
    /// recording of another device ([`DispatchError::WrongDevice`]), a set of another program
    /// ([`DispatchError::ForeignSet`]) or a dispatch over the device's limits is an error and
    /// records nothing. The recording holds the program and everything the set binds until its
    /// submission.
    pub fn dispatch(
        &self,
        rec: &mut Recording<'_>,
        set: &DescriptorSet,
        push_constants: &[u8],
        groups: [u32; 3],
    ) -> Result<(), DispatchError> {
        if !rec.device().is(self.device()) {
            return Err(DispatchError::WrongDevice {
                program: self.program.name.clone(),
                owner: self.device().index(),
                recording: rec.device().index(),
            });
        }
        if !set.made_by(&self.program.life) {
            return Err(DispatchError::ForeignSet { program: self.program.name.clone() });
        }
        self.check_dispatch(push_constants, groups)?;
        set.check_layouts(rec).map_err(|e| match e {
            VulkanError::ImageLayout { image, mip, layer, expected, actual } => {
                DispatchError::ImageLayout { image, mip, layer, expected, actual }
            }
            e => unreachable!("layout checks fail with layout errors only: {e}"),
        })?;
        self.record_checked(rec, set, push_constants, groups);
        Ok(())
    }

    /// [`ComputeProgram::dispatch`] for a dispatch whose recording, set and limits were checked.
    pub(crate) fn record_checked(
        &self,
        rec: &mut Recording<'_>,
        set: &DescriptorSet,
        push_constants: &[u8],
        groups: [u32; 3],
    ) {
        debug_assert!(self.check_dispatch(push_constants, groups).is_ok(), "checked by the caller");
        let bound = self.launch_start(rec, set, push_constants);
        if !bound {
            return;
        }
        // SAFETY: `rec` records on the program's device outside a render pass, with the
        // pipeline, its set and push constants bound (`record_launch_start`), and the group
        // counts are within maxComputeWorkGroupCount (`check_dispatch`).
        unsafe { rec.device().raw().cmd_dispatch(rec.raw(), groups[0], groups[1], groups[2]) };
        rec.recorded();
    }

    /// [`ProgramLayout::record_launch_start`] for this program's compute pipeline: `false` when
    /// the set's layouts refused the submission.
    fn launch_start(&self, rec: &mut Recording<'_>, set: &DescriptorSet, push_constants: &[u8]) -> bool {
        // SAFETY: `self.pipeline` is this program's compute pipeline, made with its layout and
        // released with its life.
        unsafe {
            self.program.record_launch_start(
                rec,
                vk::PipelineBindPoint::COMPUTE,
                self.pipeline,
                set,
                push_constants,
            )
        }
    }

    /// [`ComputeProgram::record_checked`] with the group counts read by the GPU from the
    /// `VkDispatchIndirectCommand` at `offset` bytes into `args` (residency's own clamped copy:
    /// `multi::indirect`), which the recording keeps alive.
    ///
    /// # Safety
    /// When the dispatch runs, the three counts at `offset` of `args` are within the device's
    /// `maxComputeWorkGroupCount`; `args` lives on the program's device with `INDIRECT` usage,
    /// `offset` is a multiple of 4 and 12 bytes from it lie inside `args`; a write of those bytes
    /// before this command is made visible to `DRAW_INDIRECT` reads by a barrier.
    pub(crate) unsafe fn record_indirect_checked(
        &self,
        rec: &mut Recording<'_>,
        set: &DescriptorSet,
        push_constants: &[u8],
        args: &crate::resources::buffer::Buffer,
        offset: u64,
    ) {
        let bound = self.launch_start(rec, set, push_constants);
        if !bound {
            return;
        }
        rec.keep(args.life());
        // SAFETY: `rec` records on the program's device outside a render pass, with the
        // pipeline, its set and push constants bound (`record_launch_start`); `args` is a live
        // buffer of this device with INDIRECT usage, held by the recording, whose 12 bytes at the
        // 4-aligned `offset` hold counts within maxComputeWorkGroupCount, visible to the indirect
        // read: the caller's contract.
        unsafe { rec.device().raw().cmd_dispatch_indirect(rec.raw(), args.raw(), args.offset() + offset) };
        rec.recorded();
    }
}
