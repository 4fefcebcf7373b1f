//! Compute programs: a SPIR-V compute shader with its descriptor set layout, pipeline layout,
//! pipeline and a descriptor pool, for tests, examples, the tour and the streaming demo.

use crate::buffer::Buffer;
use crate::device::Device;
use crate::error::{Result, VkResultExt, VulkanError};
use ash::vk;

/// What a binding of a compute program holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BindingKind {
    /// A storage buffer (`buffer` in GLSL).
    StorageBuffer,
    /// A uniform buffer (`uniform` block in GLSL).
    UniformBuffer,
    /// A combined image sampler (`sampler2D`).
    SampledImage,
    /// A storage image (`image2D`).
    StorageImage,
}

impl BindingKind {
    fn descriptor_type(self) -> vk::DescriptorType {
        match self {
            BindingKind::StorageBuffer => vk::DescriptorType::STORAGE_BUFFER,
            BindingKind::UniformBuffer => vk::DescriptorType::UNIFORM_BUFFER,
            BindingKind::SampledImage => vk::DescriptorType::COMBINED_IMAGE_SAMPLER,
            BindingKind::StorageImage => vk::DescriptorType::STORAGE_IMAGE,
        }
    }
}

/// A resource bound at one binding.
#[derive(Clone, Copy, Debug)]
pub enum Binding<'a> {
    /// A whole buffer (at its offset, for ranges of a pool page).
    Buffer(&'a Buffer),
    /// An image view with a sampler (for [`BindingKind::SampledImage`]) in a layout.
    Image {
        /// The view.
        view: vk::ImageView,
        /// The sampler (null for storage images).
        sampler: vk::Sampler,
        /// The layout the image is in when the dispatch runs.
        layout: vk::ImageLayout,
    },
}

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
}

/// A compute shader with everything needed to dispatch it.
#[derive(Debug)]
pub struct ComputeProgram {
    name: String,
    kinds: Vec<BindingKind>,
    push_constant_bytes: u32,
    set_layout: vk::DescriptorSetLayout,
    layout: vk::PipelineLayout,
    pipeline: vk::Pipeline,
    pool: vk::DescriptorPool,
}

/// Reads SPIR-V words from bytes (as `include_bytes!` gives them).
pub fn spirv_words(bytes: &[u8]) -> Vec<u32> {
    bytes.chunks_exact(4).map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect()
}

impl ComputeProgram {
    /// Creates the program from SPIR-V with bindings `0..kinds.len()` in set 0, `push_constant_bytes`
    /// of push constants, and room for `max_sets` descriptor sets.
    pub fn new(
        device: &Device,
        name: &str,
        spirv: &[u32],
        kinds: &[BindingKind],
        push_constant_bytes: u32,
        max_sets: u32,
    ) -> Result<ComputeProgram> {
        let raw = device.raw();
        let bindings: Vec<_> = kinds
            .iter()
            .enumerate()
            .map(|(i, k)| {
                vk::DescriptorSetLayoutBinding::default()
                    .binding(i as u32)
                    .descriptor_type(k.descriptor_type())
                    .descriptor_count(1)
                    .stage_flags(vk::ShaderStageFlags::COMPUTE)
            })
            .collect();
        let mut created = Created::default();
        let result = (|| {
            // SAFETY: valid device; the create infos live for each call. Objects are recorded in
            // `created` so that a failure part-way destroys what exists.
            unsafe {
                created.set_layout = raw
                    .create_descriptor_set_layout(
                        &vk::DescriptorSetLayoutCreateInfo::default().bindings(&bindings),
                        None,
                    )
                    .during("vkCreateDescriptorSetLayout")?;
                let ranges = [vk::PushConstantRange::default()
                    .stage_flags(vk::ShaderStageFlags::COMPUTE)
                    .size(push_constant_bytes)];
                let set_layouts = [created.set_layout];
                let mut layout_info = vk::PipelineLayoutCreateInfo::default().set_layouts(&set_layouts);
                if push_constant_bytes > 0 {
                    layout_info = layout_info.push_constant_ranges(&ranges);
                }
                created.layout =
                    raw.create_pipeline_layout(&layout_info, None).during("vkCreatePipelineLayout")?;
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
                let mut sizes: Vec<vk::DescriptorPoolSize> = Vec::new();
                for k in kinds {
                    let ty = k.descriptor_type();
                    match sizes.iter_mut().find(|s| s.ty == ty) {
                        Some(s) => s.descriptor_count += max_sets,
                        None => sizes.push(vk::DescriptorPoolSize { ty, descriptor_count: max_sets }),
                    }
                }
                let pool_info =
                    vk::DescriptorPoolCreateInfo::default().max_sets(max_sets.max(1)).pool_sizes(&sizes);
                created.pool =
                    raw.create_descriptor_pool(&pool_info, None).during("vkCreateDescriptorPool")?;
            }
            Ok(())
        })();
        if let Err(e) = result {
            created.destroy(device);
            return Err(e);
        }
        device.set_name(created.pipeline, name);
        device.set_name(created.layout, &format!("{name} layout"));
        device.set_name(created.set_layout, &format!("{name} set layout"));
        device.set_name(created.pool, &format!("{name} descriptors"));
        Ok(ComputeProgram {
            name: name.to_owned(),
            kinds: kinds.to_vec(),
            push_constant_bytes,
            set_layout: created.set_layout,
            layout: created.layout,
            pipeline: created.pipeline,
            pool: created.pool,
        })
    }

    /// Allocates a descriptor set from the program's pool and writes `bindings` into it (one per
    /// binding, in order).
    pub fn descriptor_set(&self, device: &Device, bindings: &[Binding<'_>]) -> Result<vk::DescriptorSet> {
        assert_eq!(bindings.len(), self.kinds.len(), "one resource per binding");
        let layouts = [self.set_layout];
        let info = vk::DescriptorSetAllocateInfo::default().descriptor_pool(self.pool).set_layouts(&layouts);
        // SAFETY: pool and layout belong to this device.
        let set =
            unsafe { device.raw().allocate_descriptor_sets(&info) }.during("vkAllocateDescriptorSets")?[0];
        let buffer_infos: Vec<_> = bindings
            .iter()
            .map(|b| match b {
                Binding::Buffer(buffer) => [vk::DescriptorBufferInfo::default()
                    .buffer(buffer.raw())
                    .offset(buffer.offset())
                    .range(buffer.size())],
                Binding::Image { .. } => [vk::DescriptorBufferInfo::default()],
            })
            .collect();
        let image_infos: Vec<_> = bindings
            .iter()
            .map(|b| match *b {
                Binding::Image { view, sampler, layout } => [vk::DescriptorImageInfo::default()
                    .image_view(view)
                    .sampler(sampler)
                    .image_layout(layout)],
                Binding::Buffer(_) => [vk::DescriptorImageInfo::default()],
            })
            .collect();
        let writes: Vec<_> = bindings
            .iter()
            .enumerate()
            .map(|(i, b)| {
                let write = vk::WriteDescriptorSet::default()
                    .dst_set(set)
                    .dst_binding(i as u32)
                    .descriptor_type(self.kinds[i].descriptor_type());
                match b {
                    Binding::Buffer(_) => write.buffer_info(&buffer_infos[i]),
                    Binding::Image { .. } => write.image_info(&image_infos[i]),
                }
            })
            .collect();
        // SAFETY: the set was just allocated; every write matches its binding's type, and the infos
        // live until the call returns.
        unsafe { device.raw().update_descriptor_sets(&writes, &[]) };
        Ok(set)
    }

    /// Its name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Checks a dispatch of `groups` workgroups with `push_constants` against `device`'s limits
    /// and the program's declared push-constant size, without recording anything. A zero count is
    /// allowed (Vulkan defines it as a dispatch that does nothing).
    pub fn check_dispatch(
        &self,
        device: &Device,
        push_constants: &[u8],
        groups: [u32; 3],
    ) -> Result<(), DispatchError> {
        let limits = device.limits().max_compute_work_group_count;
        if let Some(axis) = (0..3).find(|&axis| groups[axis] > limits[axis]) {
            return Err(DispatchError::GroupCountOverLimit {
                program: self.name.clone(),
                axis,
                requested: groups[axis],
                limit: limits[axis],
            });
        }
        let declared = self.push_constant_bytes;
        if push_constants.len() % 4 != 0 || push_constants.len() > declared as usize {
            return Err(DispatchError::PushConstantSize {
                program: self.name.clone(),
                given: push_constants.len(),
                declared,
            });
        }
        Ok(())
    }

    /// Records binding the pipeline and `set`, pushing `push_constants`, and dispatching `groups`,
    /// after [`ComputeProgram::check_dispatch`]: a dispatch over the device's limits is an error
    /// and records nothing. The program must have been created on `device`, `cmd` must be
    /// recording on it and `set` must come from this program's [`ComputeProgram::descriptor_set`]
    /// (raw handles: not checked).
    pub fn dispatch(
        &self,
        device: &Device,
        cmd: vk::CommandBuffer,
        set: vk::DescriptorSet,
        push_constants: &[u8],
        groups: [u32; 3],
    ) -> Result<(), DispatchError> {
        self.check_dispatch(device, push_constants, groups)?;
        self.record_checked(device, cmd, set, push_constants, groups);
        Ok(())
    }

    /// [`ComputeProgram::dispatch`] for a dispatch that already passed
    /// [`ComputeProgram::check_dispatch`] on `device`.
    pub(crate) fn record_checked(
        &self,
        device: &Device,
        cmd: vk::CommandBuffer,
        set: vk::DescriptorSet,
        push_constants: &[u8],
        groups: [u32; 3],
    ) {
        debug_assert!(self.check_dispatch(device, push_constants, groups).is_ok(), "checked by the caller");
        // SAFETY: the group counts are within the device's maxComputeWorkGroupCount and the push
        // constants within the declared range and a multiple of 4 bytes (`check_dispatch`, run by
        // the caller). That the program was created on `device`, `cmd` is recording there and
        // `set` comes from this program are the documented requirements of `dispatch`: raw
        // handles this safe fn cannot check.
        unsafe {
            let raw = device.raw();
            raw.cmd_bind_pipeline(cmd, vk::PipelineBindPoint::COMPUTE, self.pipeline);
            raw.cmd_bind_descriptor_sets(cmd, vk::PipelineBindPoint::COMPUTE, self.layout, 0, &[set], &[]);
            if !push_constants.is_empty() {
                raw.cmd_push_constants(cmd, self.layout, vk::ShaderStageFlags::COMPUTE, 0, push_constants);
            }
            raw.cmd_dispatch(cmd, groups[0], groups[1], groups[2]);
        }
    }

    /// Destroys the program and every descriptor set allocated from it.
    pub fn destroy(self, device: &Device) {
        Created {
            set_layout: self.set_layout,
            layout: self.layout,
            pipeline: self.pipeline,
            pool: self.pool,
        }
        .destroy(device);
    }
}

#[derive(Default)]
struct Created {
    set_layout: vk::DescriptorSetLayout,
    layout: vk::PipelineLayout,
    pipeline: vk::Pipeline,
    pool: vk::DescriptorPool,
}

impl Created {
    fn destroy(self, device: &Device) {
        let raw = device.raw();
        // SAFETY: each handle is null or an object of this device that no pending work uses (callers
        // wait for their dispatches before destroying the program). Destroying null handles is valid.
        unsafe {
            raw.destroy_descriptor_pool(self.pool, None);
            raw.destroy_pipeline(self.pipeline, None);
            raw.destroy_pipeline_layout(self.layout, None);
            raw.destroy_descriptor_set_layout(self.set_layout, None);
        }
    }
}
