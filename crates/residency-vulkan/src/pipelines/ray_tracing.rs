//! Ray-tracing pipelines (VK_KHR_ray_tracing_pipeline) with their shader table: a
//! [`RayTracingProgram`] of one ray generation, one miss and one closest-hit shader (shipped
//! shaders: [`TRACE_RAYGEN`](crate::shaders::TRACE_RAYGEN) and its twins), whose shader binding
//! table residency writes from the pipeline's own group handles into a buffer of the device, and
//! `trace` (`vkCmdTraceRaysKHR`) checked against the device's limits. A device without ray-tracing
//! pipelines is [`RayTracingError::Unsupported`] naming the extension.

use crate::device::blocks::MemoryError;
use crate::device::life::{ForeignUse, GpuUse};
use crate::device::Device;
use crate::error::{ErrorClass, ResidencyError};
use crate::error::{VkResultExt, VulkanError};
use crate::pipelines::compute::{check_interface, BindingKind, ProgramError};
use crate::pipelines::descriptors::{
    shader_needs, Binding, BindingError, Created, DescriptorSet, ProgramLayout,
};
use crate::pipelines::shaders::Shader;
use crate::pipelines::spirv::Stage;
use crate::resources::buffer::{AccessError, Buffer, BufferDesc};
use crate::sync::recording::Recording;
use ash::vk;
use residency_core::memory::MemoryIntent;
use residency_core::usage::BufferUsage;
use std::sync::Arc;

/// A ray-tracing program could not be made or a trace was refused; nothing was created or
/// recorded.
#[derive(Debug, thiserror::Error)]
pub enum RayTracingError {
    /// The device lacks what ray-tracing pipelines need.
    #[error("{device}: ray-tracing pipelines need {feature}, which the device does not have")]
    Unsupported {
        /// The device.
        device: String,
        /// The extension or feature, as the specification names it.
        feature: &'static str,
    },
    /// A shader does not fit the program (stage, bindings, push constants, capabilities).
    #[error(transparent)]
    Program(#[from] ProgramError),
    /// A resource does not fit its binding.
    #[error(transparent)]
    Binding(#[from] BindingError),
    /// The launch is over the device's limits (`maxComputeWorkGroupCount × maxComputeWorkGroupSize`
    /// per axis, `maxRayDispatchInvocationCount` in all).
    #[error("`{program}`: a launch of {extent:?} rays is over the device's limits ({reason})")]
    LaunchOverLimit {
        /// The program.
        program: String,
        /// The launch asked for.
        extent: [u32; 3],
        /// Which limit.
        reason: String,
    },
    /// The push constants are longer than the program declared, or not a multiple of 4 bytes.
    #[error("`{program}`: {given} bytes of push constants, but it declares {declared} (a multiple of 4)")]
    PushConstantSize {
        /// The program.
        program: String,
        /// Bytes given.
        given: usize,
        /// Bytes declared.
        declared: u32,
    },
    /// The recording is of another device, or the set of another program.
    #[error("`{program}`: {what}")]
    Foreign {
        /// The program.
        program: String,
        /// What is foreign.
        what: &'static str,
    },
    /// The shader table could not be allocated.
    #[error(transparent)]
    Memory(#[from] MemoryError),
    /// The shader table could not be written.
    #[error(transparent)]
    Access(#[from] AccessError),
    /// A Vulkan call failed.
    #[error(transparent)]
    Vulkan(#[from] VulkanError),
}

impl ResidencyError for RayTracingError {
    fn class(&self) -> ErrorClass {
        match self {
            RayTracingError::Unsupported { .. } => ErrorClass::Unsupported,
            RayTracingError::Program(e) => e.class(),
            RayTracingError::Binding(e) => e.class(),
            RayTracingError::Memory(e) => e.class(),
            RayTracingError::Access(e) => e.class(),
            RayTracingError::Vulkan(e) => e.class(),
            RayTracingError::LaunchOverLimit { .. } => ErrorClass::Unsupported,
            RayTracingError::PushConstantSize { .. } | RayTracingError::Foreign { .. } => ErrorClass::Refused,
        }
    }
}

/// What a device lacks for ray-tracing pipelines, as the specification names it.
pub fn missing_feature(features: &crate::device::EnabledFeatures) -> Option<&'static str> {
    crate::pipelines::acceleration::missing_feature(features, false)
        .or((!features.ray_tracing_pipeline).then_some("VK_KHR_ray_tracing_pipeline"))
}

/// A ray-tracing pipeline (ray generation, miss, closest hit) with its layouts, descriptor pool
/// and shader table (a buffer of the device holding the three groups' handles at the device's
/// alignments). Released when dropped, once the GPU work that may use it has completed.
#[derive(Debug)]
pub struct RayTracingProgram {
    program: ProgramLayout,
    pipeline: vk::Pipeline,
    /// The shader binding table (held by every trace's recording).
    table: Buffer,
    /// Ray generation, miss, hit and (empty) callable regions of the table.
    regions: [vk::StridedDeviceAddressRegionKHR; 4],
}

fn align_up(value: u64, alignment: u64) -> Option<u64> {
    let alignment = alignment.max(1);
    value.checked_add(alignment - 1).map(|v| v / alignment * alignment)
}

impl RayTracingProgram {
    /// Creates the program `name` of three shipped shaders: `raygen` (a `RayGeneration` shader,
    /// whose bindings are the program's), `miss` and `closest_hit` (whose bindings, if any, must be
    /// the same kinds at the same indices), with descriptor pools of `max_sets` sets, and writes
    /// its shader table. A device without ray-tracing pipelines is
    /// [`RayTracingError::Unsupported`]; a shader of the wrong stage a [`ProgramError`].
    pub fn new(
        device: &Device,
        name: &str,
        raygen: &Shader,
        miss: &Shader,
        closest_hit: &Shader,
        max_sets: u32,
    ) -> Result<RayTracingProgram, RayTracingError> {
        if let Some(feature) = missing_feature(&device.features()) {
            return Err(RayTracingError::Unsupported { device: device.name().to_owned(), feature });
        }
        let kinds: &[BindingKind] = raygen.bindings();
        let push = [raygen, miss, closest_hit].iter().map(|s| s.push_constant_bytes()).max().unwrap_or(0);
        let stages = [
            (raygen, Stage::RayGeneration, vk::ShaderStageFlags::RAYGEN_KHR),
            (miss, Stage::Miss, vk::ShaderStageFlags::MISS_KHR),
            (closest_hit, Stage::ClosestHit, vk::ShaderStageFlags::CLOSEST_HIT_KHR),
        ];
        let mut interfaces = Vec::with_capacity(3);
        for (shader, stage, _) in &stages {
            // The stage of the shipped shader and every binding it declares against the program's.
            interfaces.push(check_interface(device, name, shader.words(), *stage, kinds, push)?);
        }
        let all = vk::ShaderStageFlags::RAYGEN_KHR
            | vk::ShaderStageFlags::MISS_KHR
            | vk::ShaderStageFlags::CLOSEST_HIT_KHR;
        let refs: Vec<_> = interfaces.iter().collect();
        let mut created = Created::layouts(
            device,
            kinds,
            shader_needs(kinds.len(), &refs),
            &vec![all; kinds.len()],
            push,
            all,
            max_sets,
        )?;
        let mut props = vk::PhysicalDeviceRayTracingPipelinePropertiesKHR::default();
        let mut props2 = vk::PhysicalDeviceProperties2::default().push_next(&mut props);
        // SAFETY: a pure query of this device's physical device, whose extension is enabled
        // (checked above); the chain points at a live struct.
        unsafe { device.instance().get_physical_device_properties2(device.physical(), &mut props2) };
        let loader = ash::khr::ray_tracing_pipeline::Device::new(device.instance(), device.raw());
        let raw = device.raw();
        // SAFETY: valid device with VK_KHR_ray_tracing_pipeline enabled; the create infos live for
        // each call; the modules are destroyed after pipeline creation on every path, and
        // `created` destroys the layouts, pool and pipeline if a step fails. The code is a shipped
        // shader of each stage (glslc's SPIR-V, its interface checked above against the layout);
        // the recursion depth 1 is within maxRayRecursionDepth (at least 1).
        unsafe {
            let mut modules = Vec::with_capacity(3);
            for (shader, _, _) in &stages {
                match raw
                    .create_shader_module(&vk::ShaderModuleCreateInfo::default().code(shader.words()), None)
                {
                    Ok(m) => modules.push(m),
                    Err(r) => {
                        for m in modules {
                            raw.destroy_shader_module(m, None);
                        }
                        return Err(VulkanError::from_vk("vkCreateShaderModule", r).into());
                    }
                }
            }
            let infos: Vec<_> = stages
                .iter()
                .zip(&modules)
                .map(|((_, _, flag), &module)| {
                    vk::PipelineShaderStageCreateInfo::default().stage(*flag).module(module).name(c"main")
                })
                .collect();
            let groups = [
                vk::RayTracingShaderGroupCreateInfoKHR::default()
                    .ty(vk::RayTracingShaderGroupTypeKHR::GENERAL)
                    .general_shader(0)
                    .closest_hit_shader(vk::SHADER_UNUSED_KHR)
                    .any_hit_shader(vk::SHADER_UNUSED_KHR)
                    .intersection_shader(vk::SHADER_UNUSED_KHR),
                vk::RayTracingShaderGroupCreateInfoKHR::default()
                    .ty(vk::RayTracingShaderGroupTypeKHR::GENERAL)
                    .general_shader(1)
                    .closest_hit_shader(vk::SHADER_UNUSED_KHR)
                    .any_hit_shader(vk::SHADER_UNUSED_KHR)
                    .intersection_shader(vk::SHADER_UNUSED_KHR),
                vk::RayTracingShaderGroupCreateInfoKHR::default()
                    .ty(vk::RayTracingShaderGroupTypeKHR::TRIANGLES_HIT_GROUP)
                    .general_shader(vk::SHADER_UNUSED_KHR)
                    .closest_hit_shader(2)
                    .any_hit_shader(vk::SHADER_UNUSED_KHR)
                    .intersection_shader(vk::SHADER_UNUSED_KHR),
            ];
            let info = vk::RayTracingPipelineCreateInfoKHR::default()
                .stages(&infos)
                .groups(&groups)
                .max_pipeline_ray_recursion_depth(1)
                .layout(created.layout);
            let pipelines = loader.create_ray_tracing_pipelines(
                vk::DeferredOperationKHR::null(),
                vk::PipelineCache::null(),
                &[info],
                None,
            );
            for m in modules {
                raw.destroy_shader_module(m, None);
            }
            created.pipeline =
                pipelines.map_err(|(_, r)| VulkanError::from_vk("vkCreateRayTracingPipelinesKHR", r))?[0];
        }
        // The shader table: the three handles, each region at the base alignment.
        let handle = u64::from(props.shader_group_handle_size);
        let base = u64::from(props.shader_group_base_alignment).max(1);
        let too_large = || VulkanError::Unsupported {
            device: device.name().to_owned(),
            reason: "the shader group handle sizes overflow".to_owned(),
        };
        let stride =
            align_up(handle, u64::from(props.shader_group_handle_alignment)).ok_or_else(too_large)?;
        let region = align_up(stride, base).ok_or_else(too_large)?;
        // SAFETY: the pipeline is live, of this device, with 3 groups; the data size is 3 handles.
        let handles = unsafe {
            loader.get_ray_tracing_shader_group_handles(created.pipeline, 0, 3, 3 * handle as usize)
        }
        .during("vkGetRayTracingShaderGroupHandlesKHR")?;
        let mut bytes = vec![0u8; (3 * region) as usize];
        for g in 0..3usize {
            let at = g * region as usize;
            bytes[at..at + handle as usize]
                .copy_from_slice(&handles[g * handle as usize..(g + 1) * handle as usize]);
        }
        let usage = BufferUsage::SHADER_BINDING_TABLE | BufferUsage::DEVICE_ADDRESS;
        let mut table = device.create_buffer(
            &BufferDesc::new(format!("{name} shader table"), 3 * region, usage)
                .with_intent(MemoryIntent::Upload)
                .with_alignment(base),
        )?;
        table.write(0, &bytes)?;
        let info = vk::BufferDeviceAddressInfo::default().buffer(table.raw());
        // SAFETY: a live buffer of this device with DEVICE_ADDRESS usage (`bufferDeviceAddress`
        // enabled: checked above).
        let address = unsafe { device.raw().get_buffer_device_address(&info) } + table.offset();
        if address % base != 0 {
            return Err(VulkanError::Unsupported {
                device: device.name().to_owned(),
                reason: format!("the shader table landed at {address:#x}, not at {base} B"),
            }
            .into());
        }
        let region_at = |g: u64, size: u64| vk::StridedDeviceAddressRegionKHR {
            device_address: address + g * region,
            stride: size,
            size,
        };
        let regions = [region_at(0, stride), region_at(1, stride), region_at(2, stride), Default::default()];
        let (program, pipeline) = created.finish(name, "ray tracing pipeline");
        Ok(RayTracingProgram { program, pipeline, table, regions })
    }

    /// Its name.
    pub fn name(&self) -> &str {
        &self.program.name
    }

    /// The kinds of its set-0 bindings.
    pub fn bindings(&self) -> &[BindingKind] {
        &self.program.kinds
    }

    /// The device it lives on.
    pub fn device(&self) -> &Arc<Device> {
        self.program.life.device()
    }

    /// Its shader table.
    pub fn shader_table(&self) -> &Buffer {
        &self.table
    }

    /// Declares a use of the renderer's own work that ends at `until`.
    pub fn used_until(&self, until: GpuUse) -> Result<(), ForeignUse> {
        self.program.life.used_until(until)?;
        self.table.used_until(until)
    }

    /// A descriptor set of the program (as `ComputeProgram::descriptor_set`).
    pub fn descriptor_set(&self, bindings: &[Binding<'_>]) -> Result<DescriptorSet, BindingError> {
        self.program.descriptor_set(bindings)
    }

    /// Checks a launch of `extent` rays with `push_constants` against the device's limits and
    /// the program's push constants, without recording anything.
    pub fn check_trace(&self, push_constants: &[u8], extent: [u32; 3]) -> Result<(), RayTracingError> {
        let device = self.device();
        let limits = device.limits();
        let mut props = vk::PhysicalDeviceRayTracingPipelinePropertiesKHR::default();
        let mut props2 = vk::PhysicalDeviceProperties2::default().push_next(&mut props);
        // SAFETY: a pure query of this device's physical device (the extension is enabled: the
        // program exists).
        unsafe { device.instance().get_physical_device_properties2(device.physical(), &mut props2) };
        let over = |reason: String| RayTracingError::LaunchOverLimit {
            program: self.program.name.clone(),
            extent,
            reason,
        };
        for (axis, &rays) in extent.iter().enumerate() {
            let limit = u64::from(limits.max_compute_work_group_count[axis])
                * u64::from(limits.max_compute_work_group_size[axis]);
            if u64::from(rays) > limit {
                return Err(over(format!("axis {axis} over {limit}")));
            }
        }
        let total = extent.iter().try_fold(1u64, |product, &e| product.checked_mul(u64::from(e)));
        let Some(total) = total else {
            return Err(over("the launch's ray count overflows 64 bits".to_owned()));
        };
        if total > u64::from(props.max_ray_dispatch_invocation_count) {
            return Err(over(format!(
                "{total} rays over maxRayDispatchInvocationCount = {}",
                props.max_ray_dispatch_invocation_count
            )));
        }
        if !self.program.push_fits(push_constants) {
            return Err(RayTracingError::PushConstantSize {
                program: self.program.name.clone(),
                given: push_constants.len(),
                declared: self.program.push_constant_bytes,
            });
        }
        Ok(())
    }

    /// Records a launch of `extent` rays with `set` and `push_constants` (zero-filled up to the
    /// declared size), after [`RayTracingProgram::check_trace`]. A recording of another device or
    /// a set of another program is refused and records nothing; an image or acceleration
    /// structure the set binds is checked at submission (layouts, builds).
    pub fn trace(
        &self,
        rec: &mut Recording<'_>,
        set: &DescriptorSet,
        push_constants: &[u8],
        extent: [u32; 3],
    ) -> Result<(), RayTracingError> {
        if !rec.device().is(self.device()) {
            return Err(RayTracingError::Foreign {
                program: self.program.name.clone(),
                what: "the recording is of another device",
            });
        }
        if !set.made_by(&self.program.life) {
            return Err(RayTracingError::Foreign {
                program: self.program.name.clone(),
                what: "the descriptor set is of another program",
            });
        }
        self.check_trace(push_constants, extent)?;
        if let Err(e) = set.check_layouts(rec) {
            return Err(e.into());
        }
        self.record_checked(rec, set, push_constants, extent);
        Ok(())
    }

    /// Records a checked launch (the callers checked device, set and limits).
    pub(crate) fn record_checked(
        &self,
        rec: &mut Recording<'_>,
        set: &DescriptorSet,
        push_constants: &[u8],
        extent: [u32; 3],
    ) {
        // SAFETY: `self.pipeline` is this program's ray-tracing pipeline, made with its layout
        // and released with its life.
        let bound = unsafe {
            self.program.record_launch_start(
                rec,
                vk::PipelineBindPoint::RAY_TRACING_KHR,
                self.pipeline,
                set,
                push_constants,
            )
        };
        if !bound {
            return;
        }
        rec.keep(self.table.life());
        let device = Arc::clone(self.device());
        let cmd = rec.raw();
        let loader = ash::khr::ray_tracing_pipeline::Device::new(device.instance(), device.raw());
        let [raygen, miss, hit, callable] = &self.regions;
        // SAFETY: `cmd` records on the program's device outside a render pass, with the
        // pipeline, its set and push constants bound (`record_launch_start`); the shader table
        // (held by the recording) holds this pipeline's group handles at the device's base and
        // handle alignments, the raygen region's size equal to its stride; the extent is within the
        // device's limits (`check_trace`); every resource the set binds is held and checked at
        // submission.
        unsafe {
            loader.cmd_trace_rays(cmd, raygen, miss, hit, callable, extent[0], extent[1], extent[2]);
        }
        rec.recorded();
    }

    pub(crate) fn made(&self, set: &DescriptorSet) -> bool {
        set.made_by(&self.program.life)
    }
}
