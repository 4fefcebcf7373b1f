//! A minimal graphics pipeline for dynamic rendering into one colour attachment: what examples and
//! tests need to draw (indexed) from placed vertex and index buffers.

use crate::compute::{check_interface, ProgramError};
use crate::device::Device;
use crate::error::{VkResultExt, VulkanError};
use crate::format_map::vk_format;
use crate::image::ImageView;
use crate::recording::Recording;
use crate::retire::{ForeignUse, Garbage, GpuUse, Life};
use crate::shaders::Shader;
use crate::spirv::{Interface, Numeric, Stage};
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
/// is released when dropped, once the GPU work that may use it has completed.
///
/// [`GraphicsProgram::new`] takes two [shipped shaders](crate::shaders); a renderer's own SPIR-V
/// goes through the `unsafe` [`GraphicsProgram::from_spirv`]. Either way the stages, the absence
/// of descriptors and push constants, and the vertex inputs are reflected and checked against the
/// vertex layout before anything is created.
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
    /// An earlier command of the recording left the target in another layout than
    /// `COLOR_ATTACHMENT_OPTIMAL` ([`VulkanError::ImageLayout`]).
    #[error("{0}")]
    ImageLayout(VulkanError),
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

/// The numeric type a vertex format gives the shader.
fn format_numeric(format: vk::Format) -> Numeric {
    let name = format!("{format:?}");
    if name.ends_with("_UINT") {
        Numeric::Uint
    } else if name.ends_with("_SINT") {
        Numeric::Sint
    } else if name.starts_with("R64") {
        Numeric::Other
    } else {
        Numeric::Float
    }
}

/// Checks the vertex input state and the colour format against the vertex shader and the device.
fn check_vertex_input(
    device: &Device,
    program: &str,
    vertex: &Interface,
    stride: u32,
    attributes: &[VertexAttribute],
    color_format: vk::Format,
) -> Result<(), ProgramError> {
    let refuse = |reason: String| Err(ProgramError::Graphics { program: program.to_owned(), reason });
    let limits = device.limits();
    if stride > limits.max_vertex_input_binding_stride {
        return refuse(format!(
            "a stride of {stride} B is over the device's maxVertexInputBindingStride {}",
            limits.max_vertex_input_binding_stride
        ));
    }
    for (i, a) in attributes.iter().enumerate() {
        if attributes[..i].iter().any(|b| b.location == a.location) {
            return refuse(format!("two attributes at location {}", a.location));
        }
        if a.location >= limits.max_vertex_input_attributes {
            return refuse(format!(
                "location {} is over the device's maxVertexInputAttributes {}",
                a.location, limits.max_vertex_input_attributes
            ));
        }
        if a.offset > limits.max_vertex_input_attribute_offset {
            return refuse(format!(
                "offset {} is over the device's maxVertexInputAttributeOffset {}",
                a.offset, limits.max_vertex_input_attribute_offset
            ));
        }
        // SAFETY: a pure query of this device's physical device.
        let props =
            unsafe { device.instance().get_physical_device_format_properties(device.physical(), a.format) };
        if !props.buffer_features.contains(vk::FormatFeatureFlags::VERTEX_BUFFER) {
            return refuse(format!("{:?} cannot be a vertex attribute format on this device", a.format));
        }
    }
    for input in &vertex.inputs {
        match attributes.iter().find(|a| a.location == input.location) {
            None => {
                return refuse(format!(
                    "the vertex shader reads location {} and no attribute feeds it",
                    input.location
                ))
            }
            Some(a) if format_numeric(a.format) != input.numeric || input.numeric == Numeric::Other => {
                return refuse(format!(
                    "location {} is {:?} in the vertex shader, the attribute is {:?}",
                    input.location, input.numeric, a.format
                ))
            }
            Some(_) => {}
        }
    }
    // SAFETY: a pure query of this device's physical device.
    let props =
        unsafe { device.instance().get_physical_device_format_properties(device.physical(), color_format) };
    if !props.optimal_tiling_features.contains(vk::FormatFeatureFlags::COLOR_ATTACHMENT) {
        return refuse(format!("{color_format:?} cannot be a colour attachment on this device"));
    }
    Ok(())
}

impl GraphicsProgram {
    /// Creates the pipeline `name` of the shipped `vertex` and `fragment` shaders for a vertex
    /// layout of `stride` bytes with `attributes`, rendering to `color_format`. A shader of the
    /// wrong stage, a vertex input the attributes do not feed (or feed with another numeric
    /// type), duplicate or out-of-limit attributes, or a colour format the device cannot render
    /// to is refused with nothing created.
    pub fn new(
        device: &Device,
        name: &str,
        vertex: &Shader,
        fragment: &Shader,
        stride: u32,
        attributes: &[VertexAttribute],
        color_format: vk::Format,
    ) -> Result<GraphicsProgram, ProgramError> {
        // SAFETY: a `Shader` is one of the shipped modules (its fields are private to the crate):
        // glslc compiled it from GLSL for Vulkan 1.3 with an entry point `main`, and its declared
        // interface (here: no descriptors, no push constants) is checked against its SPIR-V by a
        // test and again by `from_spirv`.
        unsafe {
            Self::from_spirv(device, name, vertex.words(), fragment.words(), stride, attributes, color_format)
        }
    }

    /// Creates the pipeline from the renderer's own SPIR-V for a vertex layout of `stride` bytes
    /// with `attributes`, rendering to `color_format`.
    ///
    /// What the reflection can see is refused with a [`ProgramError`] before any Vulkan call:
    /// words that are not SPIR-V, no `Vertex` (`Fragment`) entry point `main`, any descriptor or
    /// push-constant block (the pipeline layout is empty), a vertex input the attributes do not
    /// feed with its numeric type, and the checks of [`GraphicsProgram::new`]. Calling with words
    /// it refuses is sound.
    ///
    /// # Safety
    ///
    /// For words the reflection accepts, the caller guarantees:
    /// - `vertex` and `fragment` are valid SPIR-V modules (they pass `spirv-val --target-env
    ///   vulkan1.3`) that the device can run: SPIR-V version, capabilities and extensions
    ///   supported by the device's Vulkan version and the features residency enabled.
    /// - Their entry points `main` are a vertex and a fragment shader that use no descriptors and
    ///   no push constants, whose interfaces match each other (every fragment input has a vertex
    ///   output of a matching type at its location), and whose vertex inputs match `attributes`
    ///   as the specification requires (component counts and widths).
    pub unsafe fn from_spirv(
        device: &Device,
        name: &str,
        vertex: &[u32],
        fragment: &[u32],
        stride: u32,
        attributes: &[VertexAttribute],
        color_format: vk::Format,
    ) -> Result<GraphicsProgram, ProgramError> {
        let vs = check_interface(device, name, vertex, Stage::Vertex, &[], 0)?;
        check_interface(device, name, fragment, Stage::Fragment, &[], 0)?;
        check_vertex_input(device, name, &vs, stride, attributes, color_format)?;
        let raw = device.raw();
        // SAFETY: valid device; the create infos live for each call; modules are destroyed below,
        // after pipeline creation, on every path. The code is valid SPIR-V for this device with
        // vertex and fragment entry points `main` that use no descriptors or push constants and
        // match each other and the vertex layout: the caller's contract (`# Safety`), of which the
        // reflection above checked the stages, descriptors, push constants and vertex inputs; the
        // attributes are unique, within the device's limits, of vertex-buffer formats, and the
        // colour format can be an attachment (checked above).
        unsafe {
            let layout = raw
                .create_pipeline_layout(&vk::PipelineLayoutCreateInfo::default(), None)
                .during("vkCreatePipelineLayout")?;
            let vs = match raw.create_shader_module(&vk::ShaderModuleCreateInfo::default().code(vertex), None)
            {
                Ok(m) => m,
                Err(r) => {
                    raw.destroy_pipeline_layout(layout, None);
                    return Err(VulkanError::from_vk("vkCreateShaderModule", r).into());
                }
            };
            let fs =
                match raw.create_shader_module(&vk::ShaderModuleCreateInfo::default().code(fragment), None) {
                    Ok(m) => m,
                    Err(r) => {
                        raw.destroy_shader_module(vs, None);
                        raw.destroy_pipeline_layout(layout, None);
                        return Err(VulkanError::from_vk("vkCreateShaderModule", r).into());
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
                    return Err(VulkanError::from_vk("vkCreateGraphicsPipelines", r).into());
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
    /// used in `COLOR_ATTACHMENT_OPTIMAL` (its first layer): putting it there is the barriers' job
    /// (e.g. a [`ResourceTracker`](crate::tracking::ResourceTracker) transition earlier in the recording or
    /// in an earlier submission); a submission that would render into it in another layout is
    /// refused with [`VulkanError::ImageLayout`](crate::VulkanError::ImageLayout). The recording
    /// holds the program and the target until its submission.
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
        let first_layer = target.layers().start;
        let attachment = vk::ImageLayout::COLOR_ATTACHMENT_OPTIMAL;
        rec.check_layout(target.layouts(), target.mips(), first_layer..first_layer + 1, attachment)
            .map_err(RenderError::ImageLayout)?;
        rec.keep(target.life());
        rec.use_layout(
            target.layouts(),
            target.mips(),
            first_layer..first_layer + 1,
            vk::ImageLayout::COLOR_ATTACHMENT_OPTIMAL,
        );
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
        // (checked above), held by the recording with the program until its submission. The
        // rendered subresource is in COLOR_ATTACHMENT_OPTIMAL when the pass runs: noted above as
        // a requirement, which the submitter checks against the image's layouts in submission
        // order before submitting.
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
