//! Compute programs: a SPIR-V compute shader with its descriptor set layout, pipeline layout,
//! pipeline and a descriptor pool, for tests, examples, the tour and the streaming demo.

use crate::buffer::Buffer;
use crate::device::Device;
use crate::error::{Result, VkResultExt, VulkanError};
use crate::format_map::vk_format;
use crate::image::{Filter, ImageView, Sampler};
use crate::recording::Recording;
use crate::retire::{ForeignUse, Garbage, GpuUse, Life};
use crate::shaders::Shader;
use crate::sparse::SparseImage;
use crate::spirv::{self, Interface, SpirvError, Stage};
use ash::vk;
use residency_core::device_mask::DeviceIndex;
use residency_core::usage::BufferUsage;
use std::sync::{Arc, Mutex};

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

/// An image view a descriptor set can point at: one of residency's [`ImageView`]s or the view of
/// a [`SparseImage`]; the set keeps either (and so its image) alive.
#[derive(Clone, Copy, Debug)]
pub enum ViewRef<'a> {
    /// A view made by [`Device::create_image_view`] (or held by a min-LOD map or a software
    /// texture).
    View(&'a ImageView),
    /// The view of all mips and layers of a partially resident image.
    Sparse(&'a SparseImage),
}

impl<'a> From<&'a ImageView> for ViewRef<'a> {
    fn from(view: &'a ImageView) -> Self {
        ViewRef::View(view)
    }
}

impl<'a> From<&'a SparseImage> for ViewRef<'a> {
    fn from(image: &'a SparseImage) -> Self {
        ViewRef::Sparse(image)
    }
}

/// What a descriptor write needs to know about a view.
struct ViewFacts {
    raw: vk::ImageView,
    device: u64,
    name: String,
    format: vk::Format,
    usage: vk::ImageUsageFlags,
    tiling: vk::ImageTiling,
    life: Option<Arc<Life>>,
}

impl ViewRef<'_> {
    fn facts(&self) -> ViewFacts {
        match *self {
            ViewRef::View(view) => ViewFacts {
                raw: view.raw(),
                device: view.device().uid(),
                name: view.name().to_owned(),
                format: vk_format(view.format()),
                usage: vk::ImageUsageFlags::from_raw(view.usage().bits()),
                tiling: if view.is_linear() { vk::ImageTiling::LINEAR } else { vk::ImageTiling::OPTIMAL },
                life: Some(Arc::clone(view.life())),
            },
            ViewRef::Sparse(image) => {
                let (raw, device, usage, life) = image.view_binding();
                ViewFacts {
                    raw,
                    device,
                    name: image.name().to_owned(),
                    format: vk_format(image.desc().format),
                    usage,
                    tiling: vk::ImageTiling::OPTIMAL,
                    life: Some(Arc::clone(life)),
                }
            }
        }
    }
}

/// A resource bound at one binding of a descriptor set.
///
/// The set keeps every buffer, [`ImageView`], [`SparseImage`] and [`Sampler`] bound in it alive
/// (and a view keeps its image): dropping them while the set lives, or while work that used the
/// set is on the GPU, is safe — they are destroyed after the set and that work.
///
/// An image binding names the layout the image is in when a dispatch uses the set; every
/// submission with such a dispatch checks it against the image's layouts in submission order (see
/// [`Image::layout`](crate::Image::layout)) and is refused with
/// [`VulkanError::ImageLayout`](crate::VulkanError::ImageLayout) otherwise. A sparse image is in
/// `GENERAL` for life, so it is bound in `GENERAL`.
#[derive(Clone, Copy, Debug)]
pub enum Binding<'a> {
    /// A whole buffer (at its offset, for ranges of a pool page), for
    /// [`BindingKind::StorageBuffer`] or [`BindingKind::UniformBuffer`].
    Buffer(&'a Buffer),
    /// A view sampled through `sampler` in `layout`, for [`BindingKind::SampledImage`].
    Sampled {
        /// The view.
        view: ViewRef<'a>,
        /// The sampler.
        sampler: &'a Sampler,
        /// The layout the image is in when the set is used.
        layout: vk::ImageLayout,
    },
    /// A view read and written as a storage image in `layout` (`GENERAL`), for
    /// [`BindingKind::StorageImage`].
    Storage {
        /// The view.
        view: ViewRef<'a>,
        /// The layout the image is in when the set is used.
        layout: vk::ImageLayout,
    },
}

impl<'a> Binding<'a> {
    /// A sampled image binding.
    pub fn sampled(view: impl Into<ViewRef<'a>>, sampler: &'a Sampler, layout: vk::ImageLayout) -> Self {
        Binding::Sampled { view: view.into(), sampler, layout }
    }

    /// A storage image binding.
    pub fn storage(view: impl Into<ViewRef<'a>>, layout: vk::ImageLayout) -> Self {
        Binding::Storage { view: view.into(), layout }
    }

    fn what(&self) -> &'static str {
        match self {
            Binding::Buffer(_) => "a buffer",
            Binding::Sampled { .. } => "a sampled image",
            Binding::Storage { .. } => "a storage image",
        }
    }
}

/// A descriptor set was refused before anything was allocated or written.
#[derive(Debug, thiserror::Error)]
pub enum BindingError {
    /// Not one resource per binding of the program.
    #[error("`{program}` has {expected} bindings, {given} resources were given")]
    Count {
        /// The program.
        program: String,
        /// Its bindings.
        expected: usize,
        /// Resources given.
        given: usize,
    },
    /// A resource lives on another device than the program.
    #[error("`{program}` binding {binding}: `{resource}` lives on another device")]
    WrongDevice {
        /// The program.
        program: String,
        /// The binding.
        binding: usize,
        /// The resource.
        resource: String,
    },
    /// A resource does not fit its binding (kind, usage, layout, alignment, range, filtering).
    #[error("`{program}` binding {binding}: `{resource}` {reason}")]
    Invalid {
        /// The program.
        program: String,
        /// The binding.
        binding: usize,
        /// The resource.
        resource: String,
        /// What is wrong.
        reason: String,
    },
    /// Allocating the set failed (its pool is exhausted: `max_sets` of the program).
    #[error(transparent)]
    Vulkan(#[from] VulkanError),
}

/// A descriptor set of one [`ComputeProgram`], written once with one resource per binding. It
/// keeps its program's descriptor pool and every resource bound in it (but a [`SparseImage`]:
/// see [`Binding`]) alive; cloning it is cheap. Its memory goes back to the program's pool when
/// the program is released, not when the set is dropped.
#[derive(Clone, Debug)]
pub struct DescriptorSet {
    raw: vk::DescriptorSet,
    program: Arc<Life>,
    bound: Arc<[Arc<Life>]>,
    /// The layout each bound [`ImageView`] must be in when the set is used: its image's record,
    /// the view's mips and layers, the binding's layout.
    images: Arc<[ImageUse]>,
}

/// A subresource range of an image that a command needs in one layout.
#[derive(Debug)]
pub(crate) struct ImageUse {
    pub(crate) layouts: Arc<crate::image::Layouts>,
    pub(crate) mips: std::ops::Range<u32>,
    pub(crate) layers: std::ops::Range<u32>,
    pub(crate) layout: vk::ImageLayout,
}

impl DescriptorSet {
    /// Whether every image it binds may be used in its binding's layout after what `rec`'s
    /// earlier commands left.
    fn check_layouts(&self, rec: &Recording<'_>) -> Result<(), VulkanError> {
        for image in self.images.iter() {
            rec.check_layout(&image.layouts, image.mips.clone(), image.layers.clone(), image.layout)?;
        }
        Ok(())
    }

    /// The `VkDescriptorSet`, for your own `unsafe` binds (a command buffer you submit yourself
    /// must find every image bound here in the binding's layout when it runs).
    pub fn raw(&self) -> vk::DescriptorSet {
        self.raw
    }

    /// Declares a use of the renderer's own work that ends at `until` (a command buffer it
    /// submits itself): the program and every resource bound here wait for it too.
    pub fn used_until(&self, until: GpuUse) -> Result<(), ForeignUse> {
        self.program.used_until(until)?;
        for life in self.bound.iter() {
            life.used_until(until)?;
        }
        Ok(())
    }
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
    /// The vertex input state or colour format does not fit the vertex shader or the device.
    #[error("`{program}`: {reason}")]
    Graphics {
        /// The program.
        program: String,
        /// What does not fit.
        reason: String,
    },
    /// A Vulkan call failed.
    #[error(transparent)]
    Vulkan(#[from] VulkanError),
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
    life: Arc<Life>,
    name: String,
    kinds: Vec<BindingKind>,
    push_constant_bytes: u32,
    layout: vk::PipelineLayout,
    pipeline: vk::Pipeline,
    set_layout: vk::DescriptorSetLayout,
    /// The descriptor pool, locked for each allocation (a pool is externally synchronised).
    pool: Mutex<vk::DescriptorPool>,
}

/// Reads SPIR-V words from bytes (as `include_bytes!` or a file gives them), little-endian.
pub fn spirv_words(bytes: &[u8]) -> Vec<u32> {
    bytes.chunks_exact(4).map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect()
}

/// Reflects `spirv` and checks that it has an entry point `main` of `stage`, that every
/// descriptor it declares is binding `i` of set 0 with kind `kinds[i]` (one descriptor), and that
/// its push-constant block fits `push_constant_bytes` (a multiple of 4 within the device's
/// limit).
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
    for b in &interface.bindings {
        let declared = if b.set == 0 { kinds.get(b.binding as usize).copied() } else { None };
        if b.count != 1 || declared.is_none() || declared != b.kind {
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
    /// push-constant bytes), with room for `max_sets` descriptor sets (at least 1). A shader of
    /// another stage, or a workgroup size over the device's limits, is refused with nothing
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
    /// `maxPushConstantsSize`), and room for `max_sets` descriptor sets (at least 1).
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
        let mut created = Created::default_for(device);
        // SAFETY: valid device; the create infos live for each call; the push-constant range is a
        // multiple of 4 within the device's limit (checked above). Objects are recorded in
        // `created`, which destroys what exists if a later step fails (none was used). The code is
        // valid SPIR-V for this device with a compute entry point `main` whose interface matches
        // the layout: the caller's contract (`# Safety`), of which the reflection above checked
        // the descriptors, push-constant block and workgroup size.
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
                    Some(s) => s.descriptor_count += max_sets.max(1),
                    None => sizes.push(vk::DescriptorPoolSize { ty, descriptor_count: max_sets.max(1) }),
                }
            }
            let pool_info =
                vk::DescriptorPoolCreateInfo::default().max_sets(max_sets.max(1)).pool_sizes(&sizes);
            created.pool = raw.create_descriptor_pool(&pool_info, None).during("vkCreateDescriptorPool")?;
        }
        let (set_layout, layout, pipeline, pool) = created.disarm();
        device.set_name(pipeline, name);
        device.set_name(layout, &format!("{name} layout"));
        device.set_name(set_layout, &format!("{name} set layout"));
        device.set_name(pool, &format!("{name} descriptors"));
        let ledger = device.ledger();
        let garbage = Garbage::Group(vec![
            Garbage::DescriptorPool {
                raw: pool,
                id: ledger.track("descriptor pool", format!("{name} descriptors")),
            },
            Garbage::Pipeline { raw: pipeline, id: ledger.track("compute pipeline", name) },
            Garbage::PipelineLayout {
                raw: layout,
                id: ledger.track("pipeline layout", format!("{name} layout")),
            },
            Garbage::DescriptorSetLayout {
                raw: set_layout,
                id: ledger.track("descriptor set layout", format!("{name} set layout")),
            },
        ]);
        Ok(ComputeProgram {
            life: Life::new(device.arc(), garbage, None),
            name: name.to_owned(),
            kinds: kinds.to_vec(),
            push_constant_bytes,
            layout,
            pipeline,
            set_layout,
            pool: Mutex::new(pool),
        })
    }

    /// The device it lives on.
    pub fn device(&self) -> &Arc<Device> {
        self.life.device()
    }

    /// Declares a use of the renderer's own work that ends at `until` (a command buffer it
    /// submits itself, through [`Recording::from_raw`]); residency's submissions need nothing.
    pub fn used_until(&self, until: GpuUse) -> Result<(), ForeignUse> {
        self.life.used_until(until)
    }

    /// Checks one binding against its kind; returns the life it keeps.
    fn check_binding(&self, i: usize, binding: &Binding<'_>) -> Result<Vec<Arc<Life>>, BindingError> {
        let device = self.device();
        let kind = self.kinds[i];
        let invalid = |resource: &str, reason: String| BindingError::Invalid {
            program: self.name.clone(),
            binding: i,
            resource: resource.to_owned(),
            reason,
        };
        let foreign = |resource: &str| BindingError::WrongDevice {
            program: self.name.clone(),
            binding: i,
            resource: resource.to_owned(),
        };
        let wrong_kind = |resource: &str| {
            invalid(resource, format!("is bound as {}, but the binding is {kind:?}", binding.what()))
        };
        let limits = device.limits();
        match *binding {
            Binding::Buffer(buffer) => {
                let name = buffer.name();
                if !buffer.device().is(device) {
                    return Err(foreign(name));
                }
                let (usage, alignment, max) = match kind {
                    BindingKind::StorageBuffer => (
                        BufferUsage::STORAGE,
                        limits.min_storage_buffer_offset_alignment,
                        u64::from(limits.max_storage_buffer_range),
                    ),
                    BindingKind::UniformBuffer => (
                        BufferUsage::UNIFORM,
                        limits.min_uniform_buffer_offset_alignment,
                        u64::from(limits.max_uniform_buffer_range),
                    ),
                    _ => return Err(wrong_kind(name)),
                };
                if !buffer.usage().contains(usage) {
                    return Err(invalid(name, format!("lacks the {usage:?} usage its binding needs")));
                }
                if buffer.offset() % alignment.max(1) != 0 {
                    return Err(invalid(
                        name,
                        format!(
                            "starts at {}, not a multiple of the device's {alignment} B",
                            buffer.offset()
                        ),
                    ));
                }
                if buffer.size() > max {
                    return Err(invalid(
                        name,
                        format!("is {} B, over the device's {max} B range", buffer.size()),
                    ));
                }
                Ok(vec![Arc::clone(buffer.life())])
            }
            Binding::Sampled { view, sampler, layout } => {
                let v = view.facts();
                if kind != BindingKind::SampledImage {
                    return Err(wrong_kind(&v.name));
                }
                if v.device != device.uid() {
                    return Err(foreign(&v.name));
                }
                if !sampler.device().is(device) {
                    return Err(foreign("sampler"));
                }
                if !v.usage.contains(vk::ImageUsageFlags::SAMPLED) {
                    return Err(invalid(&v.name, "lacks SAMPLED usage".to_owned()));
                }
                if !SAMPLED_LAYOUTS.contains(&layout) {
                    return Err(invalid(&v.name, format!("cannot be sampled in {layout:?}")));
                }
                if matches!(view, ViewRef::Sparse(_)) && layout != vk::ImageLayout::GENERAL {
                    return Err(invalid(
                        &v.name,
                        format!("is a sparse image, in GENERAL for life, not {layout:?}"),
                    ));
                }
                if sampler.filter() != Filter::Nearest {
                    // SAFETY: a pure query of this device's physical device.
                    let props = unsafe {
                        device.instance().get_physical_device_format_properties(device.physical(), v.format)
                    };
                    let features = match v.tiling {
                        vk::ImageTiling::LINEAR => props.linear_tiling_features,
                        _ => props.optimal_tiling_features,
                    };
                    if !features.contains(vk::FormatFeatureFlags::SAMPLED_IMAGE_FILTER_LINEAR) {
                        return Err(invalid(&v.name, format!("{:?} cannot be filtered linearly", v.format)));
                    }
                }
                Ok(v.life.into_iter().chain([Arc::clone(sampler.life())]).collect())
            }
            Binding::Storage { view, layout } => {
                let v = view.facts();
                if kind != BindingKind::StorageImage {
                    return Err(wrong_kind(&v.name));
                }
                if v.device != device.uid() {
                    return Err(foreign(&v.name));
                }
                if !v.usage.contains(vk::ImageUsageFlags::STORAGE) {
                    return Err(invalid(&v.name, "lacks STORAGE usage".to_owned()));
                }
                if layout != vk::ImageLayout::GENERAL {
                    return Err(invalid(&v.name, format!("is a storage image in {layout:?}, not GENERAL")));
                }
                Ok(v.life.into_iter().collect())
            }
        }
    }

    /// Allocates a descriptor set from the program's pool and writes `bindings` into it (one per
    /// binding, in order). Each resource must live on the program's device and fit its binding
    /// (kind, usage, layout, offset alignment and range, linear filtering of the format), and
    /// no two bindings may show the same subresources of an image in different layouts;
    /// otherwise the error names it and nothing is allocated. The set keeps what it binds alive
    /// (see [`Binding`]).
    pub fn descriptor_set(&self, bindings: &[Binding<'_>]) -> Result<DescriptorSet, BindingError> {
        if bindings.len() != self.kinds.len() {
            return Err(BindingError::Count {
                program: self.name.clone(),
                expected: self.kinds.len(),
                given: bindings.len(),
            });
        }
        let mut bound = Vec::with_capacity(bindings.len());
        let mut images = Vec::new();
        for (i, binding) in bindings.iter().enumerate() {
            bound.extend(self.check_binding(i, binding)?);
            if let Binding::Sampled { view: ViewRef::View(view), layout, .. }
            | Binding::Storage { view: ViewRef::View(view), layout } = *binding
            {
                let overlaps =
                    |a: &std::ops::Range<u32>, b: &std::ops::Range<u32>| a.start < b.end && b.start < a.end;
                let clash = images.iter().find(|u: &&ImageUse| {
                    Arc::ptr_eq(&u.layouts, view.layouts())
                        && u.layout != layout
                        && overlaps(&u.mips, &view.mips())
                        && overlaps(&u.layers, &view.layers())
                });
                if let Some(clash) = clash {
                    return Err(BindingError::Invalid {
                        program: self.name.clone(),
                        binding: i,
                        resource: view.name().to_owned(),
                        reason: format!(
                            "is bound in {layout:?}, but an earlier binding shows the same subresources in {:?}",
                            clash.layout
                        ),
                    });
                }
                images.push(ImageUse {
                    layouts: Arc::clone(view.layouts()),
                    mips: view.mips(),
                    layers: view.layers(),
                    layout,
                });
            }
        }
        let device = self.device();
        let buffer_infos: Vec<_> = bindings
            .iter()
            .map(|b| match b {
                Binding::Buffer(buffer) => [vk::DescriptorBufferInfo::default()
                    .buffer(buffer.raw())
                    .offset(buffer.offset())
                    .range(buffer.size())],
                _ => [vk::DescriptorBufferInfo::default()],
            })
            .collect();
        let image_infos: Vec<_> = bindings
            .iter()
            .map(|b| match *b {
                Binding::Sampled { view, sampler, layout } => [vk::DescriptorImageInfo::default()
                    .image_view(view.facts().raw)
                    .sampler(sampler.raw())
                    .image_layout(layout)],
                Binding::Storage { view, layout } => {
                    [vk::DescriptorImageInfo::default().image_view(view.facts().raw).image_layout(layout)]
                }
                Binding::Buffer(_) => [vk::DescriptorImageInfo::default()],
            })
            .collect();
        let layouts = [self.set_layout];
        let set = {
            let pool = self.pool.lock().unwrap_or_else(|e| e.into_inner());
            let info = vk::DescriptorSetAllocateInfo::default().descriptor_pool(*pool).set_layouts(&layouts);
            // SAFETY: pool and layout belong to this device; the pool is externally synchronised
            // by its lock.
            unsafe { device.raw().allocate_descriptor_sets(&info) }.during("vkAllocateDescriptorSets")?[0]
        };
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
                    _ => write.image_info(&image_infos[i]),
                }
            })
            .collect();
        // SAFETY: the set was just allocated and no other thread knows it; every write matches its
        // binding's type and points at a live object of this device with the usage, layout,
        // alignment and range it needs (checked above); the infos live until the call returns.
        unsafe { device.raw().update_descriptor_sets(&writes, &[]) };
        Ok(DescriptorSet {
            raw: set,
            program: Arc::clone(&self.life),
            bound: bound.into(),
            images: images.into(),
        })
    }

    /// Its name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Checks a dispatch of `groups` workgroups with `push_constants` against the device's limits
    /// and the program's declared push-constant size, without recording anything. A zero count is
    /// allowed (Vulkan defines it as a dispatch that does nothing).
    pub fn check_dispatch(&self, push_constants: &[u8], groups: [u32; 3]) -> Result<(), DispatchError> {
        let limits = self.device().limits().max_compute_work_group_count;
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
                program: self.name.clone(),
                owner: self.device().index(),
                recording: rec.device().index(),
            });
        }
        if !Arc::ptr_eq(&set.program, &self.life) {
            return Err(DispatchError::ForeignSet { program: self.name.clone() });
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
        debug_assert!(rec.device().is(self.device()) && Arc::ptr_eq(&set.program, &self.life));
        debug_assert!(self.check_dispatch(push_constants, groups).is_ok(), "checked by the caller");
        if let Err(e) = set.check_layouts(rec) {
            // The multi-device submitter cannot refuse one command: its submission fails.
            rec.refuse_submission(e);
            return;
        }
        rec.keep(&self.life);
        for life in set.bound.iter() {
            rec.keep(life);
        }
        for image in set.images.iter() {
            rec.use_layout(&image.layouts, image.mips.clone(), image.layers.clone(), image.layout);
        }
        let mut push = push_constants.to_vec();
        push.resize(self.push_constant_bytes as usize, 0);
        let cmd = rec.raw();
        // SAFETY: `cmd` is recording on the program's device (checked by `dispatch` and the
        // multi-device submitter, this function's only callers, and asserted above) outside a
        // render pass (the `Recording` invariant). The pipeline, layout and set are this program's
        // (the set's program is this one: checked by those callers), every binding of the set was
        // written with a live resource, and the recording holds the program and those resources
        // until its submission. Every image view is in its binding's layout when the dispatch
        // runs: noted above as requirements, which the submitter checks against the images'
        // layouts in submission order before submitting (a sparse image is GENERAL for life, and
        // its bindings are GENERAL: checked by `descriptor_set`). The push constants cover exactly the declared range, a multiple
        // of 4 bytes; the group counts are within maxComputeWorkGroupCount (`check_dispatch`).
        unsafe {
            let raw = rec.device().raw();
            raw.cmd_bind_pipeline(cmd, vk::PipelineBindPoint::COMPUTE, self.pipeline);
            raw.cmd_bind_descriptor_sets(
                cmd,
                vk::PipelineBindPoint::COMPUTE,
                self.layout,
                0,
                &[set.raw],
                &[],
            );
            if !push.is_empty() {
                raw.cmd_push_constants(cmd, self.layout, vk::ShaderStageFlags::COMPUTE, 0, &push);
            }
            raw.cmd_dispatch(cmd, groups[0], groups[1], groups[2]);
        }
        rec.recorded();
    }
}

/// Layouts a sampled image may be in (`VkWriteDescriptorSet` for combined image samplers).
const SAMPLED_LAYOUTS: [vk::ImageLayout; 8] = [
    vk::ImageLayout::GENERAL,
    vk::ImageLayout::SHADER_READ_ONLY_OPTIMAL,
    vk::ImageLayout::READ_ONLY_OPTIMAL,
    vk::ImageLayout::DEPTH_STENCIL_READ_ONLY_OPTIMAL,
    vk::ImageLayout::DEPTH_READ_ONLY_OPTIMAL,
    vk::ImageLayout::STENCIL_READ_ONLY_OPTIMAL,
    vk::ImageLayout::DEPTH_READ_ONLY_STENCIL_ATTACHMENT_OPTIMAL,
    vk::ImageLayout::DEPTH_ATTACHMENT_STENCIL_READ_ONLY_OPTIMAL,
];

/// A program's objects while it is created: destroyed on drop unless disarmed (error paths).
struct Created<'a> {
    device: &'a Device,
    set_layout: vk::DescriptorSetLayout,
    layout: vk::PipelineLayout,
    pipeline: vk::Pipeline,
    pool: vk::DescriptorPool,
}

impl<'a> Created<'a> {
    fn default_for(device: &'a Device) -> Created<'a> {
        Created {
            device,
            set_layout: vk::DescriptorSetLayout::null(),
            layout: vk::PipelineLayout::null(),
            pipeline: vk::Pipeline::null(),
            pool: vk::DescriptorPool::null(),
        }
    }

    fn disarm(self) -> (vk::DescriptorSetLayout, vk::PipelineLayout, vk::Pipeline, vk::DescriptorPool) {
        let parts = (self.set_layout, self.layout, self.pipeline, self.pool);
        std::mem::forget(self);
        parts
    }
}

impl Drop for Created<'_> {
    fn drop(&mut self) {
        let raw = self.device.raw();
        // SAFETY: each handle is null or an object of this device created by `ComputeProgram::new`
        // that nothing used yet. Destroying null handles is valid.
        unsafe {
            raw.destroy_descriptor_pool(self.pool, None);
            raw.destroy_pipeline(self.pipeline, None);
            raw.destroy_pipeline_layout(self.layout, None);
            raw.destroy_descriptor_set_layout(self.set_layout, None);
        }
    }
}
