//! A graphics pipeline for dynamic rendering into one colour attachment: reflected descriptor set 0
//! and push constants over both stages (the descriptor and push-constant code compute programs
//! use), and a [`Drawing`] whose binds and draws are checked and keep what they use alive.

use crate::device::life::{ForeignUse, GpuUse};
use crate::device::{Device, EnabledFeatures};
use crate::error::VulkanError;
use crate::error::{ErrorClass, ResidencyError};
use crate::format_map::vk_format;
use crate::pipelines::compute::{
    check_interface, Binding, BindingError, BindingKind, DescriptorSet, ProgramError,
};
use crate::pipelines::descriptors::{shader_needs, Created, ProgramLayout};
use crate::pipelines::shaders::Shader;
use crate::pipelines::spirv::{Interface, Numeric, Stage};
use crate::resources::buffer::Buffer;
use crate::resources::image::ImageView;
use crate::sparse::SparseAttachment;
use crate::sync::recording::Recording;
use ash::vk;
use residency_core::usage::{BufferUsage, ImageUsage};
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

/// The type of the indices of an index buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IndexFormat {
    /// `u16` indices (`VK_INDEX_TYPE_UINT16`).
    U16,
    /// `u32` indices (`VK_INDEX_TYPE_UINT32`).
    U32,
}

impl IndexFormat {
    /// Bytes of one index.
    pub fn bytes(self) -> u64 {
        match self {
            IndexFormat::U16 => 2,
            IndexFormat::U32 => 4,
        }
    }

    fn vk(self) -> vk::IndexType {
        match self {
            IndexFormat::U16 => vk::IndexType::UINT16,
            IndexFormat::U32 => vk::IndexType::UINT32,
        }
    }
}

/// A vertex + fragment pipeline drawing triangle lists into one colour attachment (dynamic
/// rendering, dynamic viewport and scissor, no depth, no blending), with descriptor set 0 and one
/// push-constant range over both stages. It holds its device and is released when dropped, once
/// the GPU work that may use it has completed (and after the last of its [`DescriptorSet`]s).
///
/// [`GraphicsProgram::new`] takes two [shipped shaders](crate::shaders); a renderer's own SPIR-V
/// goes through the `unsafe` [`GraphicsProgram::from_spirv`]. Either way the stages, the
/// descriptors of set 0 (the union of both stages' bindings, each visible to the stages that
/// declare it), the push-constant blocks, storage writes against the enabled features, and the
/// vertex inputs are reflected and checked before anything is created. Descriptor sets come from
/// [`GraphicsProgram::descriptor_set`], with the checks of
/// [`ComputeProgram::descriptor_set`](crate::compute::ComputeProgram::descriptor_set).
#[derive(Debug)]
pub struct GraphicsProgram {
    program: ProgramLayout,
    pipeline: vk::Pipeline,
    color_format: vk::Format,
    /// Bytes between vertices; with `vertex_extent`, what a draw of n vertices reads.
    stride: u32,
    /// Bytes of one vertex the attributes reach (0: no attributes, no vertex buffer needed).
    vertex_extent: u32,
    /// Per attribute: its offset in the vertex and the alignment its address needs
    /// ([`format_alignment`]).
    vertex_alignments: Vec<(u32, u32)>,
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

impl ResidencyError for RenderError {
    fn class(&self) -> ErrorClass {
        match self {
            RenderError::WrongDevice(e) | RenderError::ImageLayout(e) => e.class(),
            RenderError::Target { .. } => ErrorClass::Refused,
        }
    }
}

/// A bind or draw of a [`Drawing`] was refused before anything was recorded.
#[derive(Debug, thiserror::Error)]
pub enum DrawError {
    /// A buffer lives on another device than the program.
    #[error(transparent)]
    WrongDevice(VulkanError),
    /// The descriptor set was made by another program.
    #[error("the descriptor set was not made by `{program}`")]
    ForeignSet {
        /// The program.
        program: String,
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
    /// A buffer cannot be bound as asked (usage, offset, alignment).
    #[error("`{program}` cannot bind `{buffer}`: {reason}")]
    Buffer {
        /// The program.
        program: String,
        /// The buffer.
        buffer: String,
        /// Why.
        reason: String,
    },
    /// The draw would read past the end of the bound vertex or index buffer.
    #[error("`{program}`: the draw reads {needed} B of the {what} buffer, which holds {available} B from its offset")]
    OutOfRange {
        /// The program.
        program: String,
        /// `"vertex"` or `"index"`.
        what: &'static str,
        /// Bytes the draw reads.
        needed: u64,
        /// Bytes bound.
        available: u64,
    },
    /// The draw needs something that was not bound in this render pass: the descriptor set (the
    /// program has bindings), the push constants (it has a range), the vertex buffer (it has
    /// attributes) or the index buffer (an indexed draw).
    #[error("`{program}`: no {what} bound for the draw")]
    NotBound {
        /// The program.
        program: String,
        /// What is missing.
        what: &'static str,
    },
    /// An earlier command of the recording left an image the set binds in another layout than
    /// its binding's ([`VulkanError::ImageLayout`]).
    #[error("{0}")]
    ImageLayout(VulkanError),
}

impl ResidencyError for DrawError {
    fn class(&self) -> ErrorClass {
        match self {
            DrawError::WrongDevice(e) | DrawError::ImageLayout(e) => e.class(),
            DrawError::ForeignSet { .. }
            | DrawError::PushConstantSize { .. }
            | DrawError::Buffer { .. }
            | DrawError::OutOfRange { .. }
            | DrawError::NotBound { .. } => ErrorClass::Refused,
        }
    }
}

/// The commands of one render pass instance of [`GraphicsProgram::render`]: the pipeline,
/// viewport and scissor are bound. Bind the descriptor set, push constants and vertex and index
/// buffers, and draw, through its checked methods: each refuses with a [`DrawError`] and records
/// nothing when the object belongs to another device or program, or the command would break a
/// rule the program can check (usage, offsets, sizes, what the shaders need bound), and the
/// recording holds every object recorded until its submission. Draws note the layouts of the
/// images the bound set samples, as dispatches do, for the check at submission.
///
/// [`Drawing::raw`] is for your own `unsafe` ash calls; they must stay inside the render pass
/// instance (no `vkCmdEndRendering`), use only objects that outlive the submission, and leave
/// the program's pipeline and what the checked methods bound (set 0, push constants, vertex and
/// index buffers) as they were, since the checked draws rely on them (what you bind yourself is
/// not known to the checked methods: draw it with your own calls).
#[derive(Debug)]
pub struct Drawing<'r, 'a> {
    recording: &'r mut Recording<'a>,
    program: &'r GraphicsProgram,
    set: Option<DescriptorSet>,
    pushed: bool,
    /// Bytes of the bound vertex buffer from its binding offset.
    vertex_bytes: Option<u64>,
    /// Bytes of the bound index buffer from its binding offset, and its index type.
    index: Option<(u64, IndexFormat)>,
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

    /// How many commands residency's helpers have recorded into the recording so far (see
    /// [`Recording::helper_commands`]): a refused bind or draw adds none.
    pub fn helper_commands(&self) -> u64 {
        self.recording.helper_commands()
    }

    fn name(&self) -> String {
        self.program.program.name.clone()
    }

    /// Binds `set` (made by this program) as set 0. An image it binds that an earlier command
    /// of the recording left in another layout than its binding's is refused
    /// ([`DrawError::ImageLayout`]). The recording holds everything the set binds.
    pub fn bind_descriptor_set(&mut self, set: &DescriptorSet) -> Result<(), DrawError> {
        if !set.made_by(&self.program.program.life) {
            return Err(DrawError::ForeignSet { program: self.name() });
        }
        set.check_layouts(self.recording).map_err(DrawError::ImageLayout)?;
        set.note_use(self.recording);
        self.program.program.record_bind(self.recording, vk::PipelineBindPoint::GRAPHICS, set);
        self.recording.recorded();
        self.set = Some(set.clone());
        Ok(())
    }

    /// Pushes `bytes` (a multiple of 4, at most the program's
    /// [`push_constant_bytes`](GraphicsProgram::push_constant_bytes); zero-filled up to it) to
    /// both stages.
    pub fn push_constants(&mut self, bytes: &[u8]) -> Result<(), DrawError> {
        let program = &self.program.program;
        if !program.push_fits(bytes) {
            return Err(DrawError::PushConstantSize {
                program: self.name(),
                given: bytes.len(),
                declared: program.push_constant_bytes,
            });
        }
        program.record_push(self.recording, bytes);
        if program.push_constant_bytes > 0 {
            self.recording.recorded();
        }
        self.pushed = true;
        Ok(())
    }

    /// Checks a buffer bind: its device, `usage`, and `offset` inside it; returns the bytes from
    /// `offset`.
    fn check_buffer(&self, buffer: &Buffer, offset: u64, usage: BufferUsage) -> Result<u64, DrawError> {
        self.recording.accepts(buffer.name(), buffer.device()).map_err(DrawError::WrongDevice)?;
        let refuse = |reason: String| DrawError::Buffer {
            program: self.name(),
            buffer: buffer.name().to_owned(),
            reason,
        };
        if !buffer.usage().contains(usage) {
            return Err(refuse(format!("it lacks the {usage:?} usage")));
        }
        if offset >= buffer.size() {
            return Err(refuse(format!("offset {offset} is not inside its {} B", buffer.size())));
        }
        Ok(buffer.size() - offset)
    }

    /// Binds `buffer` from `offset` (bytes into it) as the vertex buffer (binding 0). It needs
    /// the `VERTEX` usage, `offset` inside it, and every attribute's address aligned: the bound
    /// offset (in the `VkBuffer`) plus the attribute's offset a multiple of its format's component
    /// size (of the whole format for packed formats), as vertex input fetches need
    /// (`VUID-vkCmdDraw-None-02721`; the stride keeps every later vertex aligned, checked when the
    /// program was made). The recording holds it.
    pub fn bind_vertex_buffer(&mut self, buffer: &Buffer, offset: u64) -> Result<(), DrawError> {
        let bytes = self.check_buffer(buffer, offset, BufferUsage::VERTEX)?;
        let base = buffer.offset() + offset;
        if let Some(&(attribute, align)) = self
            .program
            .vertex_alignments
            .iter()
            .find(|&&(a, align)| (base + u64::from(a)) % u64::from(align) != 0)
        {
            return Err(DrawError::Buffer {
                program: self.name(),
                buffer: buffer.name().to_owned(),
                reason: format!(
                    "offset {offset} (at {base} in its VkBuffer) puts the attribute at byte {attribute} of a \
                     vertex off its {align}-byte alignment"
                ),
            });
        }
        self.recording.keep(buffer.life());
        let cmd = self.recording.raw();
        // SAFETY: `cmd` is recording on the buffer's device (checked) inside the render pass
        // instance; the buffer is live with VERTEX usage, the offset lies inside it and aligns
        // every attribute (checked), and the recording holds it until its submission.
        unsafe {
            self.device().raw().cmd_bind_vertex_buffers(cmd, 0, &[buffer.raw()], &[buffer.offset() + offset]);
        }
        self.recording.recorded();
        self.vertex_bytes = Some(bytes);
        Ok(())
    }

    /// Binds `buffer` from `offset` (bytes into it, a multiple of the index size) as the index
    /// buffer of `format`. It needs the `INDEX` usage and `offset` inside it. The recording holds
    /// it.
    pub fn bind_index_buffer(
        &mut self,
        buffer: &Buffer,
        offset: u64,
        format: IndexFormat,
    ) -> Result<(), DrawError> {
        let bytes = self.check_buffer(buffer, offset, BufferUsage::INDEX)?;
        if (buffer.offset() + offset) % format.bytes() != 0 {
            return Err(DrawError::Buffer {
                program: self.name(),
                buffer: buffer.name().to_owned(),
                reason: format!("offset {offset} is not a multiple of the {} B index", format.bytes()),
            });
        }
        self.recording.keep(buffer.life());
        let cmd = self.recording.raw();
        // SAFETY: `cmd` is recording on the buffer's device (checked) inside the render pass
        // instance; the buffer is live with INDEX usage, the offset lies inside it and is a
        // multiple of the index size (checked), and the recording holds it until its submission.
        unsafe {
            self.device().raw().cmd_bind_index_buffer(
                cmd,
                buffer.raw(),
                buffer.offset() + offset,
                format.vk(),
            );
        }
        self.recording.recorded();
        self.index = Some((bytes, format));
        Ok(())
    }

    /// Checks that what the program's shaders read is bound, and the bound set's image layouts;
    /// notes the set's use.
    fn ready(&mut self) -> Result<(), DrawError> {
        let program = &self.program.program;
        let missing = |what| Err(DrawError::NotBound { program: program.name.clone(), what });
        if !program.kinds.is_empty() && self.set.is_none() {
            return missing("descriptor set");
        }
        if program.push_constant_bytes > 0 && !self.pushed {
            return missing("push constants");
        }
        if self.program.vertex_extent > 0 && self.vertex_bytes.is_none() {
            return missing("vertex buffer");
        }
        if let Some(set) = &self.set {
            set.check_layouts(self.recording).map_err(DrawError::ImageLayout)?;
        }
        Ok(())
    }

    /// After [`Drawing::ready`]: the set's images are used in their bindings' layouts.
    fn note_set(&mut self) {
        if let Some(set) = &self.set {
            set.note_use(self.recording);
        }
    }

    /// Bytes of the vertex buffer `vertices` vertices read (0 without attributes).
    fn vertex_reach(&self, vertices: u32) -> u64 {
        match (vertices, self.program.vertex_extent) {
            (0, _) | (_, 0) => 0,
            (n, extent) => u64::from(n - 1) * u64::from(self.program.stride) + u64::from(extent),
        }
    }

    /// Draws `vertices` vertices (from the first of the bound vertex buffer) `instances` times.
    /// Refused, recording nothing, when the program's set, push constants or vertex buffer are
    /// not bound ([`DrawError::NotBound`]), when the vertices reach past the bound vertex buffer
    /// ([`DrawError::OutOfRange`]), or when a sampled image of the set is in another layout
    /// after the recording's earlier commands.
    pub fn draw(&mut self, vertices: u32, instances: u32) -> Result<(), DrawError> {
        self.ready()?;
        let needed = if instances == 0 { 0 } else { self.vertex_reach(vertices) };
        let available = self.vertex_bytes.unwrap_or(0);
        if needed > available {
            return Err(DrawError::OutOfRange { program: self.name(), what: "vertex", needed, available });
        }
        self.note_set();
        let cmd = self.recording.raw();
        // SAFETY: `cmd` is recording on the program's device inside the render pass instance
        // with the program's pipeline bound; the set its shaders read (every binding written with
        // a live resource, held by the recording; images in their bindings' layouts, noted for
        // the check at submission), the push constants and the vertex buffer are bound (checked
        // above), and every vertex read lies inside the bound vertex buffer (checked above).
        unsafe { self.device().raw().cmd_draw(cmd, vertices, instances, 0, 0) };
        self.recording.recorded();
        Ok(())
    }

    /// Draws `indices` indices (from the first of the bound index buffer) `instances` times. Refused
    /// as [`Drawing::draw`] is, and when no index buffer is bound or the indices reach past it.
    ///
    /// # Safety
    /// The index buffer's contents cannot be checked: every one of the `indices` indices read
    /// when the draw runs must name a vertex inside the bound vertex buffer (an index `i` reads
    /// `i × stride` plus the attributes' bytes from the bound offset), when the program has
    /// vertex attributes. (Without `robustBufferAccess`, which residency does not enable, a read
    /// past the buffer is undefined behaviour.)
    pub unsafe fn draw_indexed(&mut self, indices: u32, instances: u32) -> Result<(), DrawError> {
        self.ready()?;
        let Some((available, format)) = self.index else {
            return Err(DrawError::NotBound { program: self.name(), what: "index buffer" });
        };
        let needed = if instances == 0 { 0 } else { u64::from(indices) * format.bytes() };
        if needed > available {
            return Err(DrawError::OutOfRange { program: self.name(), what: "index", needed, available });
        }
        self.note_set();
        let cmd = self.recording.raw();
        // SAFETY: as in `draw`, with the index buffer bound and every index read inside it
        // (checked above); every vertex the indices name lies inside the vertex buffer: the
        // caller's contract (`# Safety`).
        unsafe { self.device().raw().cmd_draw_indexed(cmd, indices, instances, 0, 0, 0) };
        self.recording.recorded();
        Ok(())
    }
}

impl Drawing<'_, '_> {
    /// Checks an indirect draw's `args` at `offset`: this device's, with `INDIRECT` usage, a
    /// 4-byte aligned offset and `command` bytes left from it.
    fn check_indirect_args(&self, args: &Buffer, offset: u64, command: u64) -> Result<(), DrawError> {
        let available = self.check_buffer(args, offset, BufferUsage::INDIRECT)?;
        if (args.offset() + offset) % 4 != 0 {
            return Err(DrawError::Buffer {
                program: self.name(),
                buffer: args.name().to_owned(),
                reason: format!("offset {offset} is not a multiple of 4"),
            });
        }
        if available < command {
            return Err(DrawError::OutOfRange {
                program: self.name(),
                what: "indirect",
                needed: command,
                available,
            });
        }
        Ok(())
    }

    /// Draws with the one `VkDrawIndirectCommand` (16 bytes: vertex count, instance count, first
    /// vertex, first instance) the GPU reads from `args` at `offset` when the draw runs. Refused,
    /// recording nothing, as [`Drawing::draw`] is (what the program needs must be bound), and when
    /// `args` lives on another device, lacks the `INDIRECT` usage, or `offset` is not a multiple of
    /// 4 or leaves fewer than 16 bytes ([`DrawError::Buffer`], [`DrawError::OutOfRange`]). The
    /// recording holds `args`.
    ///
    /// # Safety
    /// The command's contents cannot be checked: when the draw runs, the vertices it reads
    /// (`firstVertex .. firstVertex + vertexCount`, each `stride` bytes apart plus the
    /// attributes' bytes from the bound offset) must lie inside the bound vertex buffer when the
    /// program has vertex attributes, and `firstInstance` must be 0 (residency does not enable
    /// `drawIndirectFirstInstance`).
    pub unsafe fn draw_indirect(&mut self, args: &Buffer, offset: u64) -> Result<(), DrawError> {
        self.ready()?;
        self.check_indirect_args(args, offset, std::mem::size_of::<vk::DrawIndirectCommand>() as u64)?;
        self.note_set();
        self.recording.keep(args.life());
        let cmd = self.recording.raw();
        // SAFETY: as in `draw`, with `args` a live buffer of this device with INDIRECT usage,
        // held by the recording, and one 16-byte command at a 4-byte aligned offset inside it
        // (checked above; drawCount 1 needs no multiDrawIndirect). The vertices the command
        // names lie inside the vertex buffer and its firstInstance is 0: the caller's contract.
        unsafe { self.device().raw().cmd_draw_indirect(cmd, args.raw(), args.offset() + offset, 1, 0) };
        self.recording.recorded();
        Ok(())
    }

    /// Draws indexed with the one `VkDrawIndexedIndirectCommand` (20 bytes: index count, instance
    /// count, first index, vertex offset, first instance) the GPU reads from `args` at `offset`
    /// when the draw runs, through the bound index buffer. Refused, recording nothing, as
    /// [`Drawing::draw_indexed`] is without an index buffer, and as [`Drawing::draw_indirect`] is
    /// for `args` (its device, `INDIRECT` usage, a 4-byte aligned offset leaving 20 bytes).
    ///
    /// # Safety
    /// The command's contents cannot be checked: when the draw runs, the indices it reads
    /// (`firstIndex .. firstIndex + indexCount`) must lie inside the bound index buffer, every
    /// vertex they name (plus `vertexOffset`) inside the bound vertex buffer when the program has
    /// vertex attributes, and `firstInstance` must be 0.
    pub unsafe fn draw_indexed_indirect(&mut self, args: &Buffer, offset: u64) -> Result<(), DrawError> {
        self.ready()?;
        if self.index.is_none() {
            return Err(DrawError::NotBound { program: self.name(), what: "index buffer" });
        }
        self.check_indirect_args(args, offset, std::mem::size_of::<vk::DrawIndexedIndirectCommand>() as u64)?;
        self.note_set();
        self.recording.keep(args.life());
        let cmd = self.recording.raw();
        // SAFETY: as in `draw_indirect`, with the index buffer bound (checked above) and one
        // 20-byte command at a 4-byte aligned offset inside `args`. The indices and vertices the
        // command names lie inside the bound buffers and its firstInstance is 0: the caller's
        // contract.
        unsafe {
            self.device().raw().cmd_draw_indexed_indirect(cmd, args.raw(), args.offset() + offset, 1, 0)
        };
        self.recording.recorded();
        Ok(())
    }
}

impl GraphicsProgram {
    /// Bytes of the vertex buffer a draw of `vertices` vertices reads from its bound offset (0
    /// without vertex attributes), for callers that bind a range of a buffer.
    pub(crate) fn vertex_bytes_read(&self, vertices: u32) -> u64 {
        match (vertices, self.vertex_extent) {
            (0, _) | (_, 0) => 0,
            (n, extent) => u64::from(n - 1) * u64::from(self.stride) + u64::from(extent),
        }
    }
}

/// Bytes of a vertex format (its components' bits, from the format's name; 16 when the name
/// shows none, which overestimates every vertex format).
fn format_bytes(format: vk::Format) -> u32 {
    let name = format!("{format:?}");
    let components = name.split('_').next().unwrap_or_default();
    let mut bits = 0;
    let mut run = 0;
    for c in components.chars().chain(std::iter::once(' ')) {
        match c.to_digit(10) {
            Some(d) => run = run * 10 + d,
            None => {
                bits += run;
                run = 0;
            }
        }
    }
    if bits == 0 {
        16
    } else {
        bits.div_ceil(8)
    }
}

/// The alignment a vertex attribute's address needs: the whole format's size for a packed format
/// (`…_PACK16`, `…_PACK32`), else the size of one component (its first, from the name; the
/// format's size when the name shows none).
fn format_alignment(format: vk::Format) -> u32 {
    let name = format!("{format:?}");
    if name.contains("_PACK") {
        return format_bytes(format);
    }
    let components = name.split('_').next().unwrap_or_default();
    let bits: u32 = components
        .chars()
        .skip_while(|c| !c.is_ascii_digit())
        .take_while(char::is_ascii_digit)
        .fold(0, |n, c| n * 10 + c.to_digit(10).unwrap_or(0));
    if bits == 0 {
        format_bytes(format)
    } else {
        bits.div_ceil(8).max(1)
    }
}

/// Refuses a stage whose shader writes a storage buffer or image when the device cannot write
/// from that stage: a fragment shader needs `fragmentStoresAndAtomics`, a vertex shader
/// `vertexPipelineStoresAndAtomics` (which residency never enables). Other stages pass.
pub(crate) fn check_stage_stores(
    program: &str,
    stage: Stage,
    interface: &Interface,
    features: &EnabledFeatures,
) -> Result<(), ProgramError> {
    let (feature, enabled) = match stage {
        Stage::Fragment => ("fragmentStoresAndAtomics", features.fragment_stores_and_atomics),
        Stage::Vertex => ("vertexPipelineStoresAndAtomics", false),
        _ => return Ok(()),
    };
    match interface.bindings.iter().find(|b| b.writable) {
        Some(b) if !enabled => Err(ProgramError::FeatureMissing {
            program: program.to_owned(),
            stage,
            binding: b.binding,
            feature,
        }),
        _ => Ok(()),
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
        let align = format_alignment(a.format);
        if stride % align != 0 {
            // Vertex n is fetched at n × stride past the first: every one must stay aligned.
            return refuse(format!(
                "a stride of {stride} B misaligns the {:?} attribute at location {} (its address must be a \
                 multiple of {align} B)",
                a.format, a.location
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
            Some(a) if Numeric::of_format(a.format) != input.numeric || input.numeric == Numeric::Other => {
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
    /// layout of `stride` bytes with `attributes`, rendering to `color_format`, with descriptor
    /// pools of `max_sets` sets (at least 1, at most 4096; another is made whenever one is used up). Set 0 has the union of both shaders' bindings and
    /// the push-constant range the larger of their push-constant sizes, for both stages.
    ///
    /// A shader of the wrong stage, shaders that declare different kinds at one binding, a
    /// fragment shader that writes storage on a device without `fragmentStoresAndAtomics`
    /// ([`ProgramError::FeatureMissing`]), a vertex input the attributes do not feed (or feed with
    /// another numeric type), duplicate or out-of-limit attributes, or a colour format the device
    /// cannot render to is refused with nothing created.
    #[allow(
        clippy::too_many_arguments,
        reason = "one argument per part of the pipeline, as the unsafe from_spirv takes them"
    )]
    pub fn new(
        device: &Device,
        name: &str,
        vertex: &Shader,
        fragment: &Shader,
        stride: u32,
        attributes: &[VertexAttribute],
        color_format: vk::Format,
        max_sets: u32,
    ) -> Result<GraphicsProgram, ProgramError> {
        let (longer, shorter) = if vertex.bindings().len() >= fragment.bindings().len() {
            (vertex.bindings(), fragment.bindings())
        } else {
            (fragment.bindings(), vertex.bindings())
        };
        // The longer list, which the other's reflection checks its own bindings against.
        debug_assert!(longer.len() >= shorter.len());
        let push = vertex.push_constant_bytes().max(fragment.push_constant_bytes());
        // SAFETY: a `Shader` is one of the shipped modules (its fields are private to the crate):
        // glslc compiled it from GLSL for Vulkan 1.3 with an entry point `main`, its declared
        // interface is checked against its SPIR-V by a test, and `from_spirv` reflects both again
        // against the union of their bindings and the larger push-constant size (so a shader that
        // declares another kind at a binding of the other is refused there).
        unsafe {
            Self::from_spirv(
                device,
                name,
                vertex.words(),
                fragment.words(),
                longer,
                push,
                stride,
                attributes,
                color_format,
                max_sets,
            )
        }
    }

    /// Creates the pipeline from the renderer's own SPIR-V with bindings `0..kinds.len()` in set 0
    /// (each visible to the stages whose shader declares it; both when neither does),
    /// `push_constant_bytes` of push constants for both stages (a multiple of 4, at most the
    /// device's `maxPushConstantsSize`), a vertex layout of `stride` bytes with `attributes`,
    /// rendering to `color_format`, and descriptor pools of `max_sets` sets (at least 1, at most 4096; another is
    /// made whenever one is used up).
    ///
    /// What the reflection can see is refused with a [`ProgramError`] before any Vulkan call:
    /// words that are not SPIR-V, no `Vertex` (`Fragment`) entry point `main`, a descriptor that
    /// is not binding `i` of set 0 of kind `kinds[i]`, a push-constant block larger than
    /// `push_constant_bytes`, storage writes the enabled features do not allow, a vertex input
    /// the attributes do not feed with its numeric type, and the checks of
    /// [`GraphicsProgram::new`]. Calling with words it refuses is sound.
    ///
    /// # Safety
    ///
    /// For words the reflection accepts, the caller guarantees:
    /// - `vertex` and `fragment` are valid SPIR-V modules (they pass `spirv-val --target-env
    ///   vulkan1.3`) that the device can run: SPIR-V version, capabilities and extensions
    ///   supported by the device's Vulkan version and the features residency enabled
    ///   ([`Device::features`]).
    /// - Their entry points `main` are a vertex and a fragment shader whose statically used
    ///   resources are described by `kinds` (set 0, one descriptor per binding; the format of a
    ///   storage image compatible with the views that will be bound) and whose push-constant
    ///   blocks lie in `0..push_constant_bytes`; whose interfaces match each other (every
    ///   fragment input has a vertex output of a matching type at its location); and whose
    ///   vertex inputs match `attributes` as the specification requires (component counts and
    ///   widths).
    #[allow(
        clippy::too_many_arguments,
        reason = "one argument per part of the pipeline: the two stages, set 0, the push range, the \
                  vertex layout, the attachment and the pool"
    )]
    pub unsafe fn from_spirv(
        device: &Device,
        name: &str,
        vertex: &[u32],
        fragment: &[u32],
        kinds: &[BindingKind],
        push_constant_bytes: u32,
        stride: u32,
        attributes: &[VertexAttribute],
        color_format: vk::Format,
        max_sets: u32,
    ) -> Result<GraphicsProgram, ProgramError> {
        let vs = check_interface(device, name, vertex, Stage::Vertex, kinds, push_constant_bytes)?;
        let fs = check_interface(device, name, fragment, Stage::Fragment, kinds, push_constant_bytes)?;
        check_stage_stores(name, Stage::Vertex, &vs, &device.features())?;
        check_stage_stores(name, Stage::Fragment, &fs, &device.features())?;
        check_vertex_input(device, name, &vs, stride, attributes, color_format)?;
        let declares = |interface: &Interface, i: usize| {
            interface.bindings.iter().any(|b| b.set == 0 && b.binding as usize == i)
        };
        let stages: Vec<_> = (0..kinds.len())
            .map(|i| match (declares(&vs, i), declares(&fs, i)) {
                (true, false) => vk::ShaderStageFlags::VERTEX,
                (false, true) => vk::ShaderStageFlags::FRAGMENT,
                _ => vk::ShaderStageFlags::VERTEX | vk::ShaderStageFlags::FRAGMENT,
            })
            .collect();
        let mut created = Created::layouts(
            device,
            kinds,
            shader_needs(kinds.len(), &[&vs, &fs]),
            &stages,
            push_constant_bytes,
            vk::ShaderStageFlags::VERTEX | vk::ShaderStageFlags::FRAGMENT,
            max_sets,
        )?;
        let raw = device.raw();
        // SAFETY: valid device; the create infos live for each call; modules are destroyed after
        // pipeline creation on every path, and `created` destroys the layouts and pool if a step
        // fails. The code is valid SPIR-V for this device with vertex and fragment entry points
        // `main` whose interfaces match each other, the layout and the vertex layout: the caller's
        // contract (`# Safety`), of which the reflection above checked the stages, descriptors,
        // push constants, storage writes against the enabled features, and vertex inputs; the
        // attributes are unique, within the device's limits, of vertex-buffer formats, and the
        // colour format can be an attachment (checked above).
        unsafe {
            let vs = raw
                .create_shader_module(&vk::ShaderModuleCreateInfo::default().code(vertex), None)
                .map_err(|r| VulkanError::from_vk("vkCreateShaderModule", r))?;
            let fs =
                match raw.create_shader_module(&vk::ShaderModuleCreateInfo::default().code(fragment), None) {
                    Ok(m) => m,
                    Err(r) => {
                        raw.destroy_shader_module(vs, None);
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
            let mut vertex_input = vk::PipelineVertexInputStateCreateInfo::default();
            if !attributes.is_empty() {
                vertex_input =
                    vertex_input.vertex_binding_descriptions(&bindings).vertex_attribute_descriptions(&attrs);
            }
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
                .layout(created.layout)
                .push_next(&mut rendering);
            let pipelines = raw.create_graphics_pipelines(vk::PipelineCache::null(), &[info], None);
            raw.destroy_shader_module(vs, None);
            raw.destroy_shader_module(fs, None);
            created.pipeline =
                pipelines.map_err(|(_, r)| VulkanError::from_vk("vkCreateGraphicsPipelines", r))?[0];
        }
        let (program, pipeline) = created.finish(name, "graphics pipeline");
        let vertex_extent = attributes.iter().map(|a| a.offset + format_bytes(a.format)).max().unwrap_or(0);
        let vertex_alignments = attributes.iter().map(|a| (a.offset, format_alignment(a.format))).collect();
        Ok(GraphicsProgram { program, pipeline, color_format, stride, vertex_extent, vertex_alignments })
    }

    /// Allocates a descriptor set from the program's pool and writes `bindings` into it (one per
    /// binding of set 0, in order), with the checks of
    /// [`ComputeProgram::descriptor_set`](crate::compute::ComputeProgram::descriptor_set); the
    /// set keeps what it binds alive.
    pub fn descriptor_set(&self, bindings: &[Binding<'_>]) -> Result<DescriptorSet, BindingError> {
        self.program.descriptor_set(bindings)
    }

    /// The kind of each binding of set 0, in binding order.
    pub fn bindings(&self) -> &[BindingKind] {
        &self.program.kinds
    }

    /// Bytes of push constants the program declares (both stages).
    pub fn push_constant_bytes(&self) -> u32 {
        self.program.push_constant_bytes
    }

    /// Its name.
    pub fn name(&self) -> &str {
        &self.program.name
    }

    /// The device it lives on.
    pub fn device(&self) -> &Arc<Device> {
        self.program.life.device()
    }

    /// Declares a use of the renderer's own work that ends at `until` (a command buffer it
    /// submits itself); residency's submissions need nothing.
    pub fn used_until(&self, until: GpuUse) -> Result<(), ForeignUse> {
        self.program.life.used_until(until)
    }

    /// Checks that `target` can be this program's attachment over `extent`.
    pub(crate) fn check_target(&self, target: &ImageView, extent: [u32; 2]) -> Result<(), RenderError> {
        let refuse = |reason: String| RenderError::Target {
            program: self.program.name.clone(),
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
    ///
    /// `draw` gets a [`Drawing`] for the pass's binds and draws; what it returns (e.g. the
    /// `Result` of its draws) is returned in `Ok`. A refused bind or draw records nothing, and
    /// the pass still ends.
    pub fn render<R>(
        &self,
        rec: &mut Recording<'_>,
        target: &ImageView,
        extent: [u32; 2],
        clear: [f32; 4],
        draw: impl FnOnce(&mut Drawing<'_, '_>) -> R,
    ) -> Result<R, RenderError> {
        self.render_pass(rec, target, extent, Some(clear), draw)
    }

    /// [`GraphicsProgram::render`] over the target's contents (loaded, not cleared): draws of a
    /// second program over a pass of another, say. The target is used as `render` uses it (in
    /// `COLOR_ATTACHMENT_OPTIMAL`); ordering this pass's attachment reads and writes after an
    /// earlier pass's writes is the barriers' job, as is the layout (a colour-attachment memory
    /// barrier between two passes of one recording).
    pub fn render_over<R>(
        &self,
        rec: &mut Recording<'_>,
        target: &ImageView,
        extent: [u32; 2],
        draw: impl FnOnce(&mut Drawing<'_, '_>) -> R,
    ) -> Result<R, RenderError> {
        self.render_pass(rec, target, extent, None, draw)
    }

    /// A render pass instance that clears to `clear`, or loads the contents when `None`.
    fn render_pass<R>(
        &self,
        rec: &mut Recording<'_>,
        target: &ImageView,
        extent: [u32; 2],
        clear: Option<[f32; 4]>,
        draw: impl FnOnce(&mut Drawing<'_, '_>) -> R,
    ) -> Result<R, RenderError> {
        rec.accepts(&self.program.name, self.device())?;
        rec.accepts(target.name(), target.device())?;
        self.check_target(target, extent)?;
        rec.keep(&self.program.life);
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
        // SAFETY: the target was checked above to be a live single-mip 2D colour view of this
        // device in the pipeline's format with COLOR_ATTACHMENT usage covering `extent`; it is in
        // COLOR_ATTACHMENT_OPTIMAL when the pass runs (noted as a requirement, which the submitter
        // checks before submitting), and the recording holds it.
        Ok(unsafe {
            self.record_pass(
                rec,
                target.raw(),
                vk::ImageLayout::COLOR_ATTACHMENT_OPTIMAL,
                extent,
                clear,
                draw,
            )
        })
    }

    /// Records a render pass instance into one mip and layer of a partially resident image
    /// (cleared to `clear` over `extent` from the origin), as [`GraphicsProgram::render`] does
    /// for an [`ImageView`]. A sparse image stays in `GENERAL` for life, so the attachment is
    /// used in `GENERAL` and no layout is required of it. Fragments over resident tiles land in
    /// them; fragments over non-resident tiles are dropped on a device with
    /// `residencyNonResidentStrict` and go nowhere defined elsewhere
    /// ([`SparseImage::unbound_texels_read_zero`](crate::sparse::SparseImage::unbound_texels_read_zero)).
    /// An attachment of another format than the program's, of another device, or an `extent`
    /// outside its mip (or the device's framebuffer limits) records nothing. The recording holds
    /// the program and the attachment (and so the image) until its submission.
    pub fn render_sparse<R>(
        &self,
        rec: &mut Recording<'_>,
        target: &SparseAttachment,
        extent: [u32; 2],
        clear: [f32; 4],
        draw: impl FnOnce(&mut Drawing<'_, '_>) -> R,
    ) -> Result<R, RenderError> {
        rec.accepts(&self.program.name, self.device())?;
        rec.accepts(target.name(), target.device())?;
        let refuse = |reason: String| RenderError::Target {
            program: self.program.name.clone(),
            target: target.name().to_owned(),
            reason,
        };
        if target.vk_format() != self.color_format {
            return Err(refuse(format!(
                "its format {:?} is not the program's {:?}",
                target.vk_format(),
                self.color_format
            )));
        }
        let [w, h] = target.extent();
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
        rec.keep(&self.program.life);
        rec.keep(target.life());
        // SAFETY: the attachment is a live single-mip, single-layer 2D view (made so by
        // `SparseImage::attachment`, which requires COLOR_ATTACHMENT usage, given only where the
        // device reports sparse residency for the format with it) of this device in the
        // pipeline's format covering `extent` (checked above); its image is in GENERAL for life
        // (transitioned at creation, never changed), and the recording holds it.
        Ok(unsafe {
            self.record_pass(rec, target.raw(), vk::ImageLayout::GENERAL, extent, Some(clear), draw)
        })
    }

    /// Records the render pass instance of [`GraphicsProgram::render`] into `view` in `layout`,
    /// cleared to `clear` (or its contents loaded when `None`).
    ///
    /// # Safety
    ///
    /// `rec` records on the program's device; `view` is a live single-mip 2D colour view of that
    /// device in the program's colour format covering `extent` (within the framebuffer limits),
    /// held by the recording until its submission, whose subresource is in `layout` when the
    /// pass runs.
    unsafe fn record_pass<R>(
        &self,
        rec: &mut Recording<'_>,
        view: vk::ImageView,
        layout: vk::ImageLayout,
        extent: [u32; 2],
        clear: Option<[f32; 4]>,
        draw: impl FnOnce(&mut Drawing<'_, '_>) -> R,
    ) -> R {
        let attachments = [vk::RenderingAttachmentInfo::default()
            .image_view(view)
            .image_layout(layout)
            .load_op(if clear.is_some() { vk::AttachmentLoadOp::CLEAR } else { vk::AttachmentLoadOp::LOAD })
            .store_op(vk::AttachmentStoreOp::STORE)
            .clear_value(vk::ClearValue {
                color: vk::ClearColorValue { float32: clear.unwrap_or_default() },
            })];
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
        // SAFETY: `cmd` is recording on the program's device outside a render pass (the
        // `Recording` invariant); `view` is a live single-mip 2D colour view of this device in
        // the pipeline's format covering the render area, in `layout` when the pass runs and held
        // by the recording with the program until its submission (this function's contract).
        unsafe {
            let raw = rec.device().raw();
            raw.cmd_begin_rendering(cmd, &rendering);
            raw.cmd_bind_pipeline(cmd, vk::PipelineBindPoint::GRAPHICS, self.pipeline);
            raw.cmd_set_viewport(cmd, 0, &[viewport]);
            raw.cmd_set_scissor(cmd, 0, &[area]);
        }
        let drawn = draw(&mut Drawing {
            recording: rec,
            program: self,
            set: None,
            pushed: false,
            vertex_bytes: None,
            index: None,
        });
        // SAFETY: rendering began above on this command buffer; `draw` only has a `Drawing`,
        // through which its own commands stay inside the instance.
        unsafe { rec.device().raw().cmd_end_rendering(cmd) };
        rec.recorded();
        drawn
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pipelines::shaders;
    use crate::pipelines::spirv::reflect;

    #[test]
    fn shaders_with_residency_codes_need_shader_resource_residency() {
        use crate::pipelines::compute::missing_capability_feature;
        let sparse = EnabledFeatures { shader_resource_residency: true, ..EnabledFeatures::default() };
        // `sparse_probe.comp` reads residency codes (`OpImageSparse*`: the SparseResidency capability).
        let probe = reflect(shaders::SPARSE_PROBE.words()).unwrap();
        assert_eq!(
            missing_capability_feature(&probe, &EnabledFeatures::default()),
            Some("shaderResourceResidency")
        );
        assert_eq!(missing_capability_feature(&probe, &sparse), None);
        // The vt_quad shaders sample through the min-LOD map or the indirection: no residency codes.
        for shader in [&shaders::VT_QUAD_FRAG, &shaders::VT_QUAD_SOFTWARE_FRAG] {
            let interface = reflect(shader.words()).unwrap();
            assert_eq!(
                missing_capability_feature(&interface, &EnabledFeatures::default()),
                None,
                "{}",
                shader.name()
            );
        }
    }

    #[test]
    fn a_fragment_shader_writing_storage_needs_fragment_stores_and_atomics() {
        let none = EnabledFeatures::default();
        let stores = EnabledFeatures { fragment_stores_and_atomics: true, ..EnabledFeatures::default() };
        for shader in [&shaders::VT_QUAD_FRAG, &shaders::VT_QUAD_SOFTWARE_FRAG] {
            let interface = reflect(shader.words()).unwrap();
            // The feedback buffer (binding 2) is written; the image table (binding 3) is
            // `readonly`, and the sampled images are not storage.
            let writable: Vec<_> =
                interface.bindings.iter().filter(|b| b.writable).map(|b| b.binding).collect();
            assert_eq!(writable, [2], "{}", shader.name());
            match check_stage_stores("vt", Stage::Fragment, &interface, &none) {
                Err(ProgramError::FeatureMissing {
                    stage: Stage::Fragment,
                    binding: 2,
                    feature: "fragmentStoresAndAtomics",
                    ..
                }) => {}
                other => panic!("{}: {other:?}", shader.name()),
            }
            assert!(check_stage_stores("vt", Stage::Fragment, &interface, &stores).is_ok());
            // The same code in a vertex shader needs vertexPipelineStoresAndAtomics, never enabled.
            assert!(matches!(
                check_stage_stores("vt", Stage::Vertex, &interface, &stores),
                Err(ProgramError::FeatureMissing { feature: "vertexPipelineStoresAndAtomics", .. })
            ));
            assert!(check_stage_stores("vt", Stage::Compute, &interface, &none).is_ok());
        }
        // Shaders that only read need nothing.
        for shader in [&shaders::VT_QUAD_REFERENCE_FRAG, &shaders::QUADS_FRAG, &shaders::VT_QUAD_VERT] {
            let interface = reflect(shader.words()).unwrap();
            assert!(
                check_stage_stores("read", shader.stage(), &interface, &none).is_ok(),
                "{}",
                shader.name()
            );
        }
        // A read-only storage buffer of a compute shader (sparse_fallback's probes) is not
        // writable, its results buffer is.
        let fallback = reflect(shaders::SPARSE_FALLBACK.words()).unwrap();
        let mut writable: Vec<_> = fallback.bindings.iter().map(|b| (b.binding, b.writable)).collect();
        writable.sort();
        assert_eq!(writable, [(0, false), (1, false), (2, false), (3, true)]);
    }

    #[test]
    fn vertex_format_sizes_come_from_their_components() {
        assert_eq!(format_bytes(vk::Format::R32G32B32_SFLOAT), 12);
        assert_eq!(format_bytes(vk::Format::R32G32_SFLOAT), 8);
        assert_eq!(format_bytes(vk::Format::R8G8B8A8_UNORM), 4);
        assert_eq!(format_bytes(vk::Format::A2B10G10R10_UNORM_PACK32), 4);
        assert_eq!(format_bytes(vk::Format::R16_SINT), 2);
        assert_eq!(format_bytes(vk::Format::R64G64B64A64_SFLOAT), 32);
    }

    #[test]
    fn vertex_alignments_are_component_sizes_or_packed_sizes() {
        assert_eq!(format_alignment(vk::Format::R32G32B32_SFLOAT), 4);
        assert_eq!(format_alignment(vk::Format::R8G8B8A8_UNORM), 1);
        assert_eq!(format_alignment(vk::Format::R16G16_SFLOAT), 2);
        assert_eq!(format_alignment(vk::Format::A2B10G10R10_UNORM_PACK32), 4);
        assert_eq!(format_alignment(vk::Format::R64_UINT), 8);
    }
}
