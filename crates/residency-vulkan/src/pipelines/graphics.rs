//! A minimal graphics pipeline for dynamic rendering into one colour attachment: what examples and
//! tests need to draw (indexed) from placed vertex and index buffers.

use crate::compute::check_spirv;
use crate::device::Device;
use crate::error::{Result, VkResultExt, VulkanError};
use crate::format_map::vk_format;
use crate::image::ImageView;
use crate::recording::Recording;
use crate::retire::{ForeignUse, Garbage, GpuUse, Life};
use ash::vk;
use residency_core::usage::ImageUsage;
use std::sync::Arc;

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
/// dynamic viewport and scissor, no depth, no blending, no descriptors). It holds its device and
/// is released when dropped, once the GPU work that may use it has completed. The SPIR-V is
/// trusted (see [`ComputeProgram`](crate::compute::ComputeProgram)).
#[derive(Debug)]
pub struct GraphicsProgram {
    life: Arc<Life>,
    name: String,
    pipeline: vk::Pipeline,
    color_format: vk::Format,
}

/// A render pass was refused before anything was recorded.
#[derive(Debug, thiserror::Error)]
pub enum RenderError {
    /// The recording or the target lives on another device than the program.
    #[error(transparent)]
    WrongDevice(#[from] VulkanError),
    /// The target cannot be this program's colour attachment.
    #[error("`{program}` cannot render into `{target}`: {reason}")]
    Target {
        /// The program.
        program: String,
        /// The target view.
        target: String,
        /// Why.
        reason: String,
    },
}

/// The commands of one render pass instance of [`GraphicsProgram::render`]: the pipeline,
/// viewport and scissor are bound. Record your draws through [`Drawing::raw`] with your own
/// `unsafe` ash calls; they must stay inside the render pass instance (no `vkCmdEndRendering`)
/// and use only objects that outlive the closure that records them.
#[derive(Debug)]
pub struct Drawing<'r, 'a> {
    recording: &'r mut Recording<'a>,
}

impl<'a> Drawing<'_, 'a> {
    /// The `VkCommandBuffer`, inside the render pass instance.
    pub fn raw(&self) -> vk::CommandBuffer {
        self.recording.raw()
    }

    /// The device.
    pub fn device(&self) -> &'a Device {
        self.recording.device()
    }
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
        check_spirv(device, name, vertex)?;
        check_spirv(device, name, fragment)?;
        let raw = device.raw();
        // SAFETY: valid device; the create infos live for each call; modules are destroyed below,
        // after pipeline creation, on every path. The code has SPIR-V headers (checked above);
        // that it is valid SPIR-V matching the vertex layout is trusted, not checked (documented).
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
            device.set_name(layout, &format!("{name} layout"));
            let ledger = device.ledger();
            let garbage = Garbage::Group(vec![
                Garbage::Pipeline { raw: pipeline, id: ledger.track("graphics pipeline", name) },
                Garbage::PipelineLayout {
                    raw: layout,
                    id: ledger.track("pipeline layout", format!("{name} layout")),
                },
            ]);
            Ok(GraphicsProgram {
                life: Life::new(device.arc(), garbage, None),
                name: name.to_owned(),
                pipeline,
                color_format,
            })
        }
    }

    /// Its name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The device it lives on.
    pub fn device(&self) -> &Arc<Device> {
        self.life.device()
    }

    /// Declares a use of the renderer's own work that ends at `until` (a command buffer it
    /// submits itself); residency's submissions need nothing.
    pub fn used_until(&self, until: GpuUse) -> Result<(), ForeignUse> {
        self.life.used_until(until)
    }

    /// Checks that `target` can be this program's attachment over `extent`.
    fn check_target(&self, target: &ImageView, extent: [u32; 2]) -> Result<(), RenderError> {
        let refuse = |reason: String| RenderError::Target {
            program: self.name.clone(),
            target: target.name().to_owned(),
            reason,
        };
        if vk_format(target.format()) != self.color_format {
            return Err(refuse(format!(
                "its format {:?} is not the program's {:?}",
                vk_format(target.format()),
                self.color_format
            )));
        }
        if !target.usage().contains(ImageUsage::COLOR_ATTACHMENT) {
            return Err(refuse("its image lacks COLOR_ATTACHMENT usage".to_owned()));
        }
        if target.samples() != 1 {
            return Err(refuse("the program renders single-sampled".to_owned()));
        }
        if target.mips().len() != 1 {
            return Err(refuse("an attachment view shows exactly one mip".to_owned()));
        }
        if !matches!(target.view_type(), vk::ImageViewType::TYPE_2D | vk::ImageViewType::TYPE_2D_ARRAY) {
            return Err(refuse(format!("a {:?} view cannot be a colour attachment", target.view_type())));
        }
        let [w, h, _] = target.extent();
        let limits = self.device().limits();
        if extent[0] == 0
            || extent[1] == 0
            || extent[0] > w
            || extent[1] > h
            || extent[0] > limits.max_framebuffer_width
            || extent[1] > limits.max_framebuffer_height
        {
            return Err(refuse(format!("the render area {extent:?} is empty or outside its {w}×{h}")));
        }
        Ok(())
    }

    /// Records a render pass instance into `target` (cleared to `clear`, over `extent` from the
    /// origin) with `draw` recording the draws after the pipeline, viewport and scissor are
    /// bound. The recording and the target must live on the program's device, and the target be
    /// a single-mip, single-sampled 2D view of an image with `COLOR_ATTACHMENT` usage in the
    /// program's colour format covering `extent`; otherwise nothing is recorded. The target is
    /// used in `COLOR_ATTACHMENT_OPTIMAL`: putting it there is the barriers' job (a layout is a
    /// GPU state this helper cannot see). The recording holds the program and the target until
    /// its submission.
    pub fn render(
        &self,
        rec: &mut Recording<'_>,
        target: &ImageView,
        extent: [u32; 2],
        clear: [f32; 4],
        draw: impl FnOnce(&mut Drawing<'_, '_>),
    ) -> Result<(), RenderError> {
        rec.accepts(&self.name, self.device())?;
        rec.accepts(target.name(), target.device())?;
        self.check_target(target, extent)?;
        rec.keep(&self.life);
        rec.keep(target.life());
        let attachments = [vk::RenderingAttachmentInfo::default()
            .image_view(target.raw())
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
        let cmd = rec.raw();
        // SAFETY: `cmd` is recording on the program's device (checked above) outside a render
        // pass (the `Recording` invariant); the target is a live single-mip 2D colour view of this
        // device in the pipeline's format with COLOR_ATTACHMENT usage covering the render area
        // (checked above), held by the recording with the program until its submission.
        unsafe {
            let raw = rec.device().raw();
            raw.cmd_begin_rendering(cmd, &rendering);
            raw.cmd_bind_pipeline(cmd, vk::PipelineBindPoint::GRAPHICS, self.pipeline);
            raw.cmd_set_viewport(cmd, 0, &[viewport]);
            raw.cmd_set_scissor(cmd, 0, &[area]);
        }
        draw(&mut Drawing { recording: rec });
        // SAFETY: rendering began above on this command buffer; `draw` only has a `Drawing`,
        // through which its own commands stay inside the instance.
        unsafe { rec.device().raw().cmd_end_rendering(cmd) };
        rec.recorded();
        Ok(())
    }
}
