//! A minimal graphics pipeline for dynamic rendering into one colour attachment: what examples and
//! tests need to draw (indexed) from placed vertex and index buffers.

use crate::device::Device;
use crate::error::{Result, VkResultExt, VulkanError};
use ash::vk;

/// One vertex attribute: location, format and byte offset in the vertex.
#[derive(Clone, Copy, Debug)]
pub struct VertexAttribute {
    /// `layout(location = …)`.
    pub location: u32,
    /// Its format.
    pub format: vk::Format,
    /// Byte offset in the vertex.
    pub offset: u32,
}

/// A vertex + fragment pipeline drawing triangles into one colour attachment (dynamic rendering,
/// dynamic viewport and scissor, no depth, no blending, no descriptors).
#[derive(Debug)]
pub struct GraphicsProgram {
    layout: vk::PipelineLayout,
    pipeline: vk::Pipeline,
}

impl GraphicsProgram {
    /// Creates the pipeline from SPIR-V for a vertex layout of `stride` bytes with `attributes`,
    /// rendering to `color_format`.
    pub fn new(
        device: &Device,
        name: &str,
        vertex: &[u32],
        fragment: &[u32],
        stride: u32,
        attributes: &[VertexAttribute],
        color_format: vk::Format,
    ) -> Result<GraphicsProgram> {
        let raw = device.raw();
        // SAFETY: valid device; the create infos live for each call; modules are destroyed below,
        // after pipeline creation, on every path.
        unsafe {
            let layout = raw
                .create_pipeline_layout(&vk::PipelineLayoutCreateInfo::default(), None)
                .during("vkCreatePipelineLayout")?;
            let vs = match raw.create_shader_module(&vk::ShaderModuleCreateInfo::default().code(vertex), None)
            {
                Ok(m) => m,
                Err(r) => {
                    raw.destroy_pipeline_layout(layout, None);
                    return Err(VulkanError::from_vk("vkCreateShaderModule", r));
                }
            };
            let fs =
                match raw.create_shader_module(&vk::ShaderModuleCreateInfo::default().code(fragment), None) {
                    Ok(m) => m,
                    Err(r) => {
                        raw.destroy_shader_module(vs, None);
                        raw.destroy_pipeline_layout(layout, None);
                        return Err(VulkanError::from_vk("vkCreateShaderModule", r));
                    }
                };
            let stages = [
                vk::PipelineShaderStageCreateInfo::default()
                    .stage(vk::ShaderStageFlags::VERTEX)
                    .module(vs)
                    .name(c"main"),
                vk::PipelineShaderStageCreateInfo::default()
                    .stage(vk::ShaderStageFlags::FRAGMENT)
                    .module(fs)
                    .name(c"main"),
            ];
            let bindings = [vk::VertexInputBindingDescription {
                binding: 0,
                stride,
                input_rate: vk::VertexInputRate::VERTEX,
            }];
            let attrs: Vec<_> = attributes
                .iter()
                .map(|a| vk::VertexInputAttributeDescription {
                    location: a.location,
                    binding: 0,
                    format: a.format,
                    offset: a.offset,
                })
                .collect();
            let vertex_input = vk::PipelineVertexInputStateCreateInfo::default()
                .vertex_binding_descriptions(&bindings)
                .vertex_attribute_descriptions(&attrs);
            let assembly = vk::PipelineInputAssemblyStateCreateInfo::default()
                .topology(vk::PrimitiveTopology::TRIANGLE_LIST);
            let viewport = vk::PipelineViewportStateCreateInfo::default().viewport_count(1).scissor_count(1);
            let raster = vk::PipelineRasterizationStateCreateInfo::default()
                .polygon_mode(vk::PolygonMode::FILL)
                .cull_mode(vk::CullModeFlags::NONE)
                .line_width(1.0);
            let multisample = vk::PipelineMultisampleStateCreateInfo::default()
                .rasterization_samples(vk::SampleCountFlags::TYPE_1);
            let blend_attachments = [vk::PipelineColorBlendAttachmentState::default()
                .color_write_mask(vk::ColorComponentFlags::RGBA)];
            let blend = vk::PipelineColorBlendStateCreateInfo::default().attachments(&blend_attachments);
            let dynamic_states = [vk::DynamicState::VIEWPORT, vk::DynamicState::SCISSOR];
            let dynamic = vk::PipelineDynamicStateCreateInfo::default().dynamic_states(&dynamic_states);
            let formats = [color_format];
            let mut rendering = vk::PipelineRenderingCreateInfo::default().color_attachment_formats(&formats);
            let info = vk::GraphicsPipelineCreateInfo::default()
                .stages(&stages)
                .vertex_input_state(&vertex_input)
                .input_assembly_state(&assembly)
                .viewport_state(&viewport)
                .rasterization_state(&raster)
                .multisample_state(&multisample)
                .color_blend_state(&blend)
                .dynamic_state(&dynamic)
                .layout(layout)
                .push_next(&mut rendering);
            let pipelines = raw.create_graphics_pipelines(vk::PipelineCache::null(), &[info], None);
            raw.destroy_shader_module(vs, None);
            raw.destroy_shader_module(fs, None);
            let pipeline = match pipelines {
                Ok(p) => p[0],
                Err((_, r)) => {
                    raw.destroy_pipeline_layout(layout, None);
                    return Err(VulkanError::from_vk("vkCreateGraphicsPipelines", r));
                }
            };
            device.set_name(pipeline, name);
            Ok(GraphicsProgram { layout, pipeline })
        }
    }

    /// Records rendering into `target` (cleared to `clear`) with `draw` recording the draws after
    /// the pipeline, viewport and scissor are bound.
    pub fn render(
        &self,
        device: &Device,
        cmd: vk::CommandBuffer,
        target: vk::ImageView,
        extent: [u32; 2],
        clear: [f32; 4],
        draw: impl FnOnce(vk::CommandBuffer),
    ) {
        let attachments = [vk::RenderingAttachmentInfo::default()
            .image_view(target)
            .image_layout(vk::ImageLayout::COLOR_ATTACHMENT_OPTIMAL)
            .load_op(vk::AttachmentLoadOp::CLEAR)
            .store_op(vk::AttachmentStoreOp::STORE)
            .clear_value(vk::ClearValue { color: vk::ClearColorValue { float32: clear } })];
        let area = vk::Rect2D {
            offset: vk::Offset2D::default(),
            extent: vk::Extent2D { width: extent[0], height: extent[1] },
        };
        let rendering =
            vk::RenderingInfo::default().render_area(area).layer_count(1).color_attachments(&attachments);
        let viewport = vk::Viewport {
            x: 0.0,
            y: 0.0,
            width: extent[0] as f32,
            height: extent[1] as f32,
            min_depth: 0.0,
            max_depth: 1.0,
        };
        // SAFETY: `cmd` is recording on `device`; the view is a colour attachment of the pipeline's
        // format in COLOR_ATTACHMENT_OPTIMAL layout (the caller's barriers put it there).
        unsafe {
            let raw = device.raw();
            raw.cmd_begin_rendering(cmd, &rendering);
            raw.cmd_bind_pipeline(cmd, vk::PipelineBindPoint::GRAPHICS, self.pipeline);
            raw.cmd_set_viewport(cmd, 0, &[viewport]);
            raw.cmd_set_scissor(cmd, 0, &[area]);
        }
        draw(cmd);
        // SAFETY: rendering began above on this command buffer.
        unsafe { device.raw().cmd_end_rendering(cmd) };
    }

    /// Destroys the pipeline.
    pub fn destroy(self, device: &Device) {
        // SAFETY: no pending work uses the pipeline (caller's contract).
        unsafe {
            device.raw().destroy_pipeline(self.pipeline, None);
            device.raw().destroy_pipeline_layout(self.layout, None);
        }
    }
}
