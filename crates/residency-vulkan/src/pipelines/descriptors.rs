//! Descriptor sets and the layouts programs share: what a binding holds ([`Binding`], [`ViewRef`]),
//! the checked writing of a set that keeps its resources alive ([`DescriptorSet`]), and the
//! set-0 layout, pipeline layout, push-constant range and descriptor pool that compute and
//! graphics programs both build the same way (`ProgramLayout`).

use crate::device::life::{ForeignUse, Garbage, GpuUse, Life};
use crate::device::Device;
use crate::error::{ErrorClass, ResidencyError};
use crate::error::{VkResultExt, VulkanError};
use crate::format_map::vk_format;
use crate::pipelines::acceleration::{AccelerationLevel, AccelerationStructure, BUILT};
use crate::pipelines::spirv::{ImageShape, Numeric};
use crate::poison::PoisonFree;
use crate::resources::buffer::Buffer;
use crate::resources::image::{Filter, ImageView, Sampler};
use crate::sparse::SparseImage;
use crate::sync::recording::Recording;
use ash::vk;
use residency_core::usage::BufferUsage;
use std::sync::{Arc, Mutex};

/// What a binding of a program holds.
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
    /// A top-level acceleration structure (`accelerationStructureEXT` of `GL_EXT_ray_query`):
    /// [`Binding::AccelerationStructure`].
    AccelerationStructure,
    /// An array of this many combined image samplers (`sampler2D textures[N]`), bound with
    /// exactly that many views ([`Binding::SampledArray`]).
    SampledImageArray(u32),
    /// A bindless array of at most this many combined image samplers: a runtime array in the
    /// shader (`sampler2D textures[]`, indexed with `nonuniformEXT`), bound with 1 to that many
    /// views ([`Binding::SampledArray`]). Needs descriptor indexing
    /// ([`EnabledFeatures::descriptor_indexing`](crate::device::EnabledFeatures::descriptor_indexing));
    /// the binding is `UPDATE_AFTER_BIND`, so the device's update-after-bind limits apply
    /// (`maxPerStageDescriptorUpdateAfterBindSampledImages` and the rest, checked when the program
    /// is made). Every one of its descriptors is written: the views given, then the last of them
    /// repeated, so any index below the count reads a view that is bound; the shaders index
    /// below it (the shipped ones clamp to the count they are given and to the array's).
    BindlessSampledImages(u32),
}

impl BindingKind {
    pub(crate) fn descriptor_type(self) -> vk::DescriptorType {
        match self {
            BindingKind::StorageBuffer => vk::DescriptorType::STORAGE_BUFFER,
            BindingKind::UniformBuffer => vk::DescriptorType::UNIFORM_BUFFER,
            BindingKind::SampledImage
            | BindingKind::SampledImageArray(_)
            | BindingKind::BindlessSampledImages(_) => vk::DescriptorType::COMBINED_IMAGE_SAMPLER,
            BindingKind::StorageImage => vk::DescriptorType::STORAGE_IMAGE,
            BindingKind::AccelerationStructure => vk::DescriptorType::ACCELERATION_STRUCTURE_KHR,
        }
    }

    /// Descriptors in the binding: 1, or the array's length (a bindless array's maximum).
    pub fn descriptor_count(self) -> u32 {
        match self {
            BindingKind::SampledImageArray(n) | BindingKind::BindlessSampledImages(n) => n,
            _ => 1,
        }
    }

    /// The kind of one descriptor of the binding and the count the SPIR-V declares (an array's
    /// length; 0 for a runtime array), as [`DescriptorBinding`](crate::spirv::DescriptorBinding)
    /// reflects them.
    pub fn shader_declaration(self) -> (BindingKind, u32) {
        match self {
            BindingKind::SampledImageArray(n) => (BindingKind::SampledImage, n),
            BindingKind::BindlessSampledImages(_) => (BindingKind::SampledImage, 0),
            kind => (kind, 1),
        }
    }

    fn is_bindless(self) -> bool {
        matches!(self, BindingKind::BindlessSampledImages(_))
    }
}

/// Checks the descriptor counts of a program's `kinds` against `device`: an array holds at least
/// one descriptor, a bindless array needs descriptor indexing, and the combined image samplers
/// of the layout (each counts as a sampled image and a sampler) are within the device's
/// per-stage and per-set limits — the update-after-bind ones when a binding is bindless (the
/// layout is then `UPDATE_AFTER_BIND_POOL`, and all its descriptors together are within
/// `maxPerStageUpdateAfterBindResources`), the plain ones otherwise.
pub(crate) fn check_descriptor_counts(
    device: &Device,
    program: &str,
    stage: crate::pipelines::spirv::Stage,
    kinds: &[BindingKind],
) -> Result<(), crate::pipelines::compute::ProgramError> {
    use crate::pipelines::compute::ProgramError;
    let bindless = kinds.iter().any(|k| k.is_bindless());
    if bindless && !device.features().descriptor_indexing {
        return Err(ProgramError::CapabilityMissing {
            program: program.to_owned(),
            stage,
            feature: "descriptorIndexing (runtimeDescriptorArray, descriptorBindingSampledImageUpdateAfterBind, shaderSampledImageArrayNonUniformIndexing)",
        });
    }
    let limits = device.limits();
    // Every descriptor of an update-after-bind layout counts towards
    // maxPerStageUpdateAfterBindResources.
    let mut resources_limit = u32::MAX;
    let (per_stage, per_set, names) = if bindless {
        let mut indexing = vk::PhysicalDeviceDescriptorIndexingProperties::default();
        let mut props = vk::PhysicalDeviceProperties2::default().push_next(&mut indexing);
        // SAFETY: a pure query of this device's physical device; the output chain is live.
        unsafe { device.instance().get_physical_device_properties2(device.physical(), &mut props) };
        resources_limit = indexing.max_per_stage_update_after_bind_resources;
        (
            indexing
                .max_per_stage_descriptor_update_after_bind_sampled_images
                .min(indexing.max_per_stage_descriptor_update_after_bind_samplers),
            indexing
                .max_descriptor_set_update_after_bind_sampled_images
                .min(indexing.max_descriptor_set_update_after_bind_samplers),
            (
                "maxPerStageDescriptorUpdateAfterBindSampledImages/Samplers",
                "maxDescriptorSetUpdateAfterBindSampledImages/Samplers",
            ),
        )
    } else {
        (
            limits.max_per_stage_descriptor_sampled_images.min(limits.max_per_stage_descriptor_samplers),
            limits.max_descriptor_set_sampled_images.min(limits.max_descriptor_set_samplers),
            ("maxPerStageDescriptorSampledImages/Samplers", "maxDescriptorSetSampledImages/Samplers"),
        )
    };
    let (mut total, mut resources) = (0u64, 0u64);
    for (binding, kind) in kinds.iter().enumerate() {
        let count = kind.descriptor_count();
        let refuse = |limit: u32, limit_name: &'static str| ProgramError::DescriptorCount {
            program: program.to_owned(),
            binding: binding as u32,
            count,
            limit,
            limit_name,
        };
        if count == 0 {
            return Err(refuse(0, "an array of at least one descriptor"));
        }
        resources += u64::from(count);
        if resources > u64::from(resources_limit) {
            return Err(refuse(resources_limit, "maxPerStageUpdateAfterBindResources"));
        }
        if kind.descriptor_type() != vk::DescriptorType::COMBINED_IMAGE_SAMPLER {
            continue;
        }
        total += u64::from(count);
        if total > u64::from(per_stage) {
            return Err(refuse(per_stage, names.0));
        }
        if total > u64::from(per_set) {
            return Err(refuse(per_set, names.1));
        }
    }
    Ok(())
}

/// An image view a descriptor set can point at: one of residency's [`ImageView`]s or the view of
/// a [`SparseImage`]; the set keeps either (and so its image) alive.
#[derive(Clone, Copy, Debug)]
pub enum ViewRef<'a> {
    /// A view made by [`Image::create_view`](crate::Image::create_view) (or held by a min-LOD map or a software
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
    aspect: vk::ImageAspectFlags,
    usage: vk::ImageUsageFlags,
    tiling: vk::ImageTiling,
    view_type: vk::ImageViewType,
    samples: u32,
    life: Option<Arc<Life>>,
}

impl ViewRef<'_> {
    fn facts(&self) -> ViewFacts {
        match *self {
            ViewRef::View(view) => ViewFacts {
                raw: view.raw(),
                device: view.device().uid(),
                name: view.name().to_owned(),
                format: view.vk_format(),
                aspect: view.aspect(),
                usage: vk::ImageUsageFlags::from_raw(view.usage().bits()),
                tiling: if view.is_linear() { vk::ImageTiling::LINEAR } else { vk::ImageTiling::OPTIMAL },
                view_type: view.view_type(),
                samples: view.samples(),
                life: Some(Arc::clone(view.life())),
            },
            ViewRef::Sparse(image) => {
                let (raw, device, usage, life) = image.view_binding();
                ViewFacts {
                    raw,
                    device,
                    name: image.name().to_owned(),
                    format: vk_format(image.desc().format),
                    aspect: crate::format_map::aspect(image.desc().format),
                    usage,
                    tiling: vk::ImageTiling::OPTIMAL,
                    view_type: image.view_type(),
                    samples: 1,
                    life: Some(Arc::clone(life)),
                }
            }
        }
    }
}

/// The view type a shader's `OpTypeImage` `Dim` and `Arrayed` operands name.
fn shader_view_type(shape: &ImageShape) -> Option<vk::ImageViewType> {
    Some(match (shape.dim, shape.arrayed) {
        (0, false) => vk::ImageViewType::TYPE_1D,
        (0, true) => vk::ImageViewType::TYPE_1D_ARRAY,
        (1, false) => vk::ImageViewType::TYPE_2D,
        (1, true) => vk::ImageViewType::TYPE_2D_ARRAY,
        (2, false) => vk::ImageViewType::TYPE_3D,
        (3, false) => vk::ImageViewType::CUBE,
        (3, true) => vk::ImageViewType::CUBE_ARRAY,
        _ => return None,
    })
}

/// A resource bound at one binding of a descriptor set.
///
/// The set keeps every buffer, [`ImageView`], [`SparseImage`] and [`Sampler`] bound in it alive
/// (and a view keeps its image): dropping them while the set lives, or while work that used the
/// set is on the GPU, is safe — they are destroyed after the set and that work.
///
/// An image binding names the layout the image is in when a dispatch or draw uses the set; every
/// submission with such a command checks it against the image's layouts in submission order (see
/// [`Image::layout`](crate::Image::layout)) and is refused with
/// [`VulkanError::ImageLayout`](crate::VulkanError::ImageLayout) otherwise. A sparse image is in
/// `GENERAL` for life, so it is bound in `GENERAL`.
///
/// An image binding that the program's shaders read with a sparse residency instruction
/// (`sparseTexelFetchARB`, `sparseTextureLodARB` and the rest: SPIR-V `OpImageSparse*`; see
/// [`DescriptorBinding::sparse_residency`](crate::spirv::DescriptorBinding::sparse_residency))
/// takes only a [`SparseImage`] ([`ViewRef::Sparse`]), on every device: residency's shaders
/// query residency only to read partially resident images, and drivers may crash running these
/// instructions on an image without sparse residency (lavapipe does). A plain [`ImageView`]
/// there is refused with [`BindingError::NotSparse`]. Of the shipped shaders,
/// [`SPARSE_PROBE`](crate::shaders::SPARSE_PROBE), [`MULTI_DEVICE`](crate::shaders::MULTI_DEVICE),
/// [`DISTANCE_FIELD`](crate::shaders::DISTANCE_FIELD) and
/// [`TEXTURE_ARRAY`](crate::shaders::TEXTURE_ARRAY) do so at binding 0.
#[derive(Clone, Copy, Debug)]
pub enum Binding<'a> {
    /// A whole buffer (at its offset, for ranges of a pool page), for
    /// [`BindingKind::StorageBuffer`] or [`BindingKind::UniformBuffer`]; the range rules of
    /// [`Binding::BufferRange`] apply to the whole buffer.
    Buffer(&'a Buffer),
    /// `size` bytes of a buffer from `offset` (bytes into it), for
    /// [`BindingKind::StorageBuffer`] or [`BindingKind::UniformBuffer`]: the range must be
    /// non-empty and inside the buffer, start at a multiple of the device's offset alignment for
    /// the kind, be at most the device's range limit for it, and hold the fixed part of the
    /// block the program's shaders declare at that binding (a uniform block whole; a storage
    /// block up to its runtime array, whose elements the shipped shaders bound by the range:
    /// [`BindingError::RangeUnderBlock`] otherwise).
    BufferRange {
        /// The buffer.
        buffer: &'a Buffer,
        /// Bytes into it.
        offset: u64,
        /// Bytes of the range.
        size: u64,
    },
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
    /// A top-level acceleration structure, for [`BindingKind::AccelerationStructure`]. The set
    /// keeps it (and through it its bottom-level structures) alive; every submission of a command
    /// that uses the set checks, in submission order, that the structure's build was submitted
    /// before it: the build state is kept as a one-subresource layout record (`GENERAL` once
    /// built), so a use submitted before the build is refused with
    /// [`VulkanError::ImageLayout`] naming the structure, `expected: GENERAL`, `actual: UNDEFINED`.
    AccelerationStructure(&'a AccelerationStructure),
    /// Views sampled through `sampler` in `layout`, for [`BindingKind::SampledImageArray`]
    /// (exactly its length) or [`BindingKind::BindlessSampledImages`] (1 to its maximum; the
    /// descriptors past the views repeat the last one). Each view is checked as
    /// [`Binding::Sampled`] checks one.
    SampledArray {
        /// The views, element `i` at array index `i`.
        views: &'a [ViewRef<'a>],
        /// The sampler of every element.
        sampler: &'a Sampler,
        /// The layout every image is in when the set is used.
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
            Binding::Buffer(_) | Binding::BufferRange { .. } => "a buffer",
            Binding::Sampled { .. } => "a sampled image",
            Binding::Storage { .. } => "a storage image",
            Binding::AccelerationStructure(_) => "an acceleration structure",
            Binding::SampledArray { .. } => "an array of sampled images",
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
    /// A buffer range is smaller than the fixed part of the block the program's shaders declare
    /// at the binding (a shader reads its fixed members wherever the range ends).
    #[error("`{program}` binding {binding}: `{resource}` is bound with {bytes} B, under the {block} B block the shader reads")]
    RangeUnderBlock {
        /// The program.
        program: String,
        /// The binding.
        binding: usize,
        /// The buffer.
        resource: String,
        /// Bytes of the range given.
        bytes: u64,
        /// Bytes of the block's fixed part.
        block: u32,
    },
    /// A plain image view is bound where the program's shaders read with a sparse residency
    /// instruction (`OpImageSparse*`), which needs a [`SparseImage`] ([`ViewRef::Sparse`]).
    #[error("`{program}` binding {binding}: `{resource}` is not a sparse image, but the shader reads it with sparse residency instructions")]
    NotSparse {
        /// The program.
        program: String,
        /// The binding.
        binding: usize,
        /// The view.
        resource: String,
    },
    /// The view bound does not have the shape the shaders declare at the binding (`OpTypeImage`):
    /// its view type is not the one `Dim` and `Arrayed` name, its sample count disagrees with
    /// `MS`, or its format's numeric type is not the `Sampled Type` (`VUID-vkCmdDispatch-viewType-07752`,
    /// `-format-07753` and their draw twins; a stencil-aspect view holds unsigned integers), or it
    /// shows both aspects of a depth/stencil image (`VUID-VkDescriptorImageInfo-imageView-01976`).
    #[error("`{program}` binding {binding}: `{resource}` {reason}")]
    ViewShape {
        /// The program.
        program: String,
        /// The binding.
        binding: usize,
        /// The view.
        resource: String,
        /// What differs.
        reason: String,
    },
    /// An array binding is given another number of views than it holds: not exactly the length
    /// of a [`BindingKind::SampledImageArray`], not 1 to the maximum of a
    /// [`BindingKind::BindlessSampledImages`].
    #[error("`{program}` binding {binding}: {given} views for an array of {length} ({})",
        if *.bindless { "at most" } else { "exactly" })]
    ArrayLength {
        /// The program.
        program: String,
        /// The binding.
        binding: usize,
        /// Views given.
        given: usize,
        /// The array's length (a bindless array's maximum).
        length: u32,
        /// Whether the array is bindless (1 to `length` views) or fixed (exactly `length`).
        bindless: bool,
    },
    /// Allocating the set (or a new descriptor pool when the current one is used up) failed.
    #[error(transparent)]
    Vulkan(#[from] VulkanError),
}

impl ResidencyError for BindingError {
    fn class(&self) -> ErrorClass {
        match self {
            BindingError::Vulkan(e) => e.class(),
            BindingError::Count { .. }
            | BindingError::WrongDevice { .. }
            | BindingError::Invalid { .. }
            | BindingError::RangeUnderBlock { .. }
            | BindingError::NotSparse { .. }
            | BindingError::ArrayLength { .. }
            | BindingError::ViewShape { .. } => ErrorClass::Refused,
        }
    }
}

/// A descriptor set of one [`ComputeProgram`](crate::compute::ComputeProgram) or
/// [`GraphicsProgram`](crate::graphics::GraphicsProgram), written once with one resource per binding. It
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
    pub(crate) layouts: Arc<crate::resources::image::Layouts>,
    pub(crate) mips: std::ops::Range<u32>,
    pub(crate) layers: std::ops::Range<u32>,
    pub(crate) layout: vk::ImageLayout,
}

impl DescriptorSet {
    /// Whether every image it binds may be used in its binding's layout after what `rec`'s
    /// earlier commands left.
    pub(crate) fn check_layouts(&self, rec: &Recording<'_>) -> Result<(), VulkanError> {
        for image in self.images.iter() {
            rec.check_layout(&image.layouts, image.mips.clone(), image.layers.clone(), image.layout)?;
        }
        Ok(())
    }

    /// Whether `program` (a program's life) made it.
    pub(crate) fn made_by(&self, program: &Arc<Life>) -> bool {
        Arc::ptr_eq(&self.program, program)
    }

    /// Holds everything the set binds in `rec` and notes the layout each bound image is used in
    /// (after [`DescriptorSet::check_layouts`]): what a command that uses the set records.
    pub(crate) fn note_use(&self, rec: &mut Recording<'_>) {
        for life in self.bound.iter() {
            rec.keep(life);
        }
        for image in self.images.iter() {
            rec.use_layout(&image.layouts, image.mips.clone(), image.layers.clone(), image.layout);
        }
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

/// What compute and graphics programs share: their life (pipeline, layouts and descriptor pool,
/// released as one group), name, the kinds of set 0's bindings, the push-constant range, and the
/// pool their descriptor sets come from.
#[derive(Debug)]
pub(crate) struct ProgramLayout {
    pub(crate) life: Arc<Life>,
    pub(crate) name: String,
    pub(crate) kinds: Vec<BindingKind>,
    /// Per binding, what its shaders need of the resource bound there.
    needs: Vec<ShaderNeeds>,
    pub(crate) push_constant_bytes: u32,
    push_stages: vk::ShaderStageFlags,
    pub(crate) layout: vk::PipelineLayout,
    set_layout: vk::DescriptorSetLayout,
    /// The descriptor pools, locked for each allocation (a pool is externally synchronised).
    pool: Mutex<Pools>,
}

/// The most sets one descriptor pool of a program holds: a program's `max_sets` is clamped to
/// `1..=MAX_POOL_SETS` (another pool is made whenever one is used up, so the clamp never limits
/// how many sets a program makes), which keeps each pool's descriptor counts far from `u32::MAX`
/// and its size within what a driver allocates up front.
pub(crate) const MAX_POOL_SETS: u32 = 4096;

/// `max_sets` as a pool is made with: clamped to `1..=MAX_POOL_SETS`, logged when adjusted.
pub(crate) fn pool_sets(max_sets: u32) -> u32 {
    let sets = max_sets.clamp(1, MAX_POOL_SETS);
    if sets != max_sets {
        tracing::debug!(max_sets, sets, "descriptor pool size clamped to 1..=MAX_POOL_SETS");
    }
    sets
}

/// A program's descriptor pools: the first (released with the program), and more of the same
/// size made when one runs out — drivers differ in whether a pool refuses its `max_sets + 1`-th
/// set (NVIDIA does, lavapipe does not), so residency counts and grows rather than rely on it.
#[derive(Debug)]
struct Pools {
    /// The pool sets come from now.
    current: vk::DescriptorPool,
    /// Its life when it is an extra pool (a child of the program's life), held by every set made
    /// from it; `None` for the program's own first pool.
    current_life: Option<Arc<Life>>,
    /// Sets made from `current`.
    used: u32,
    max_sets: u32,
    sizes: Vec<vk::DescriptorPoolSize>,
    /// The flags the first pool was made with.
    flags: vk::DescriptorPoolCreateFlags,
    /// Extra pools made so far (for their names).
    extra: u32,
}

impl ProgramLayout {
    /// Whether `push_constants` fits the program's range: a multiple of 4 bytes, at most the
    /// declared size.
    pub(crate) fn push_fits(&self, push_constants: &[u8]) -> bool {
        push_constants.len() % 4 == 0 && push_constants.len() <= self.push_constant_bytes as usize
    }

    /// Makes a new pool of the first one's size the current one; the old one stays (its sets
    /// live on) and goes with the program, or with its own life for an extra pool.
    fn grow(&self, device: &Device, pools: &mut Pools) -> Result<(), VulkanError> {
        let info = vk::DescriptorPoolCreateInfo::default()
            .flags(pools.flags)
            .max_sets(pools.max_sets)
            .pool_sizes(&pools.sizes);
        // SAFETY: valid device and create info (the sizes and count the first pool was made with).
        let raw =
            unsafe { device.raw().create_descriptor_pool(&info, None) }.during("vkCreateDescriptorPool")?;
        pools.extra += 1;
        let name = format!("{} descriptors {}", self.name, pools.extra + 1);
        device.set_name(raw, &name);
        let id = device.ledger().track("descriptor pool", name);
        let parent: Arc<dyn crate::device::life::Parent> =
            Arc::clone(&self.life) as Arc<dyn crate::device::life::Parent>;
        let life = Life::new(device.arc(), Garbage::DescriptorPool { raw, id }, Some(parent));
        pools.current = raw;
        pools.current_life = Some(life);
        pools.used = 0;
        Ok(())
    }

    /// Records binding `set` at set 0 of `bind_point`. The callers refuse a recording of another
    /// device and a set of another program with typed errors first; here they are a bug (a panic).
    pub(crate) fn record_bind(
        &self,
        rec: &mut Recording<'_>,
        bind_point: vk::PipelineBindPoint,
        set: &DescriptorSet,
    ) {
        assert!(rec.device().is(self.life.device()) && set.made_by(&self.life), "checked by the callers");
        // SAFETY: `rec` is recording on this program's device (asserted) and the set was
        // allocated from this program's pool with its set layout (asserted), every binding
        // written with a live resource; the recording holds the program (its callers keep its
        // life) and the set's resources (the callers' `DescriptorSet::note_use`) until its
        // submission.
        unsafe {
            rec.device().raw().cmd_bind_descriptor_sets(
                rec.raw(),
                bind_point,
                self.layout,
                0,
                &[set.raw],
                &[],
            );
        }
    }

    /// The start every checked launch of this program's pipeline shares (a compute dispatch,
    /// direct or indirect, and a ray-tracing launch): when an image `set` binds is in another
    /// layout than its binding's, refuses the submission (the multi-device submitter cannot
    /// refuse one command) and records nothing — `false`; else keeps the program and the set's
    /// resources, notes the set's layout requirements, binds `pipeline` at `bind_point`, the set
    /// and `push_constants` — `true`: the caller records its launch command next (and keeps what
    /// else it uses). The callers checked the recording's device, the set's program and the push
    /// constants with typed errors first; here they are a bug (a panic).
    ///
    /// # Safety
    /// `pipeline` is this program's pipeline of `bind_point`, made with its `layout` and released
    /// with its `life`.
    pub(crate) unsafe fn record_launch_start(
        &self,
        rec: &mut Recording<'_>,
        bind_point: vk::PipelineBindPoint,
        pipeline: vk::Pipeline,
        set: &DescriptorSet,
        push_constants: &[u8],
    ) -> bool {
        assert!(rec.device().is(self.life.device()) && set.made_by(&self.life), "checked by the callers");
        if let Err(e) = set.check_layouts(rec) {
            rec.refuse_submission(e);
            return false;
        }
        rec.keep(&self.life);
        set.note_use(rec);
        // SAFETY: `rec` is recording on this program's device (asserted) outside a render pass
        // (the `Recording` invariant: a launch is recorded only outside one); `pipeline` is this
        // program's of `bind_point` (the caller's contract), held by the recording until its
        // submission through the program's life, kept above.
        unsafe { rec.device().raw().cmd_bind_pipeline(rec.raw(), bind_point, pipeline) };
        // The set's program is this one (asserted); every image view it binds is in its
        // binding's layout when the launch runs: noted by `note_use` as requirements, which the
        // submitter checks against the images' layouts in submission order before submitting (a
        // sparse image is GENERAL for life, and its bindings are GENERAL: checked by
        // `descriptor_set`).
        self.record_bind(rec, bind_point, set);
        self.record_push(rec, push_constants);
        true
    }

    /// Records pushing `push_constants`, zero-filled up to the declared size, to every stage of
    /// the range (nothing when the program has no push constants). The callers refuse what
    /// [`ProgramLayout::push_fits`] does not accept, and a recording of another device, with typed
    /// errors first; here they are a bug (a panic).
    pub(crate) fn record_push(&self, rec: &mut Recording<'_>, push_constants: &[u8]) {
        assert!(
            rec.device().is(self.life.device()) && self.push_fits(push_constants),
            "checked by the callers"
        );
        if self.push_constant_bytes == 0 {
            return;
        }
        let mut push = push_constants.to_vec();
        push.resize(self.push_constant_bytes as usize, 0);
        // SAFETY: `rec` is recording on this program's device (asserted); the bytes cover
        // exactly the layout's one push-constant range (offset 0, the declared size, a multiple
        // of 4) with exactly its stages.
        unsafe {
            rec.device().raw().cmd_push_constants(rec.raw(), self.layout, self.push_stages, 0, &push);
        }
    }

    /// Checks one binding against its kind and what the program's shaders need there (a buffer
    /// range that holds the block; a [`SparseImage`] where they use sparse residency
    /// instructions: [`BindingError::NotSparse`]); returns the life it keeps. The one check of
    /// every program kind: compute, graphics and multi-device sets are all written through
    /// [`ProgramLayout::descriptor_set`].
    fn check_binding(&self, i: usize, binding: &Binding<'_>) -> Result<Vec<Arc<Life>>, BindingError> {
        let device = self.life.device();
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
        let sparse_residency = self.needs.get(i).is_some_and(|n| n.sparse_residency);
        let not_sparse = |view: &ViewRef<'_>, resource: &str| {
            (sparse_residency && !matches!(view, ViewRef::Sparse(_))).then(|| BindingError::NotSparse {
                program: self.name.clone(),
                binding: i,
                resource: resource.to_owned(),
            })
        };
        let shape = self.needs.get(i).and_then(|n| n.image);
        let wrong_shape = |v: &ViewFacts| {
            let both = vk::ImageAspectFlags::DEPTH | vk::ImageAspectFlags::STENCIL;
            let reason = if v.aspect.contains(both) {
                // Whatever the shader declares, it reads one aspect.
                "shows both the depth and the stencil aspect, and a shader reads one (a view of \
                 one aspect: `ImageViewDesc::with_aspect`)"
                    .to_owned()
            } else {
                let shape = shape?;
                let wanted = shader_view_type(&shape);
                // A stencil view holds integers whatever its depth/stencil format says.
                let numeric = if v.aspect == vk::ImageAspectFlags::STENCIL {
                    Numeric::Uint
                } else {
                    Numeric::of_format(v.format)
                };
                if wanted.is_some_and(|t| t != v.view_type) {
                    format!("is a {:?} view, but the shader declares {:?}", v.view_type, wanted?)
                } else if shape.multisampled != (v.samples > 1) {
                    format!(
                        "has {} samples, but the shader's image is {}multisampled",
                        v.samples,
                        if shape.multisampled { "" } else { "not " }
                    )
                } else if shape.sampled_type != numeric {
                    format!("holds {numeric:?} texels, but the shader reads {:?}", shape.sampled_type)
                } else {
                    return None;
                }
            };
            Some(BindingError::ViewShape {
                program: self.name.clone(),
                binding: i,
                resource: v.name.clone(),
                reason,
            })
        };
        let sampled = |view: ViewRef<'_>,
                       sampler: &Sampler,
                       layout: vk::ImageLayout|
         -> Result<Vec<Arc<Life>>, BindingError> {
            let v = view.facts();
            if v.device != device.uid() {
                return Err(foreign(&v.name));
            }
            if !sampler.device().is(device) {
                return Err(foreign("sampler"));
            }
            if let Some(e) = not_sparse(&view, &v.name).or_else(|| wrong_shape(&v)) {
                return Err(e);
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
        };
        let limits = device.limits();
        let whole = |buffer: &'_ Buffer| (0, buffer.size());
        match *binding {
            Binding::Buffer(buffer) | Binding::BufferRange { buffer, .. } => {
                let (offset, size) = match *binding {
                    Binding::BufferRange { offset, size, .. } => (offset, size),
                    _ => whole(buffer),
                };
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
                if size == 0 || offset.checked_add(size).is_none_or(|end| end > buffer.size()) {
                    return Err(invalid(
                        name,
                        format!(
                            "bytes {offset}..{} are empty or outside its {} B",
                            offset.saturating_add(size),
                            buffer.size()
                        ),
                    ));
                }
                if (buffer.offset() + offset) % alignment.max(1) != 0 {
                    return Err(invalid(
                        name,
                        format!(
                            "starts at {}, not a multiple of the device's {alignment} B",
                            buffer.offset() + offset
                        ),
                    ));
                }
                if size > max {
                    return Err(invalid(name, format!("is {size} B, over the device's {max} B range")));
                }
                let block = self.needs.get(i).map_or(0, |n| n.block_bytes);
                if size < u64::from(block) {
                    return Err(BindingError::RangeUnderBlock {
                        program: self.name.clone(),
                        binding: i,
                        resource: name.to_owned(),
                        bytes: size,
                        block,
                    });
                }
                Ok(vec![Arc::clone(buffer.life())])
            }
            Binding::Sampled { view, sampler, layout } => {
                if kind != BindingKind::SampledImage {
                    return Err(wrong_kind(&view.facts().name));
                }
                sampled(view, sampler, layout)
            }
            Binding::SampledArray { views, sampler, layout } => {
                let (length, bindless) = match kind {
                    BindingKind::SampledImageArray(n) => (n, false),
                    BindingKind::BindlessSampledImages(n) => (n, true),
                    _ => return Err(wrong_kind(&views.first().map_or_else(String::new, |v| v.facts().name))),
                };
                let fits = if bindless {
                    (1..=length as usize).contains(&views.len())
                } else {
                    views.len() == length as usize
                };
                if !fits {
                    return Err(BindingError::ArrayLength {
                        program: self.name.clone(),
                        binding: i,
                        given: views.len(),
                        length,
                        bindless,
                    });
                }
                let mut lives = Vec::with_capacity(views.len() + 1);
                for &view in views {
                    lives.extend(sampled(view, sampler, layout)?);
                }
                Ok(lives)
            }
            Binding::Storage { view, layout } => {
                let v = view.facts();
                if kind != BindingKind::StorageImage {
                    return Err(wrong_kind(&v.name));
                }
                if v.device != device.uid() {
                    return Err(foreign(&v.name));
                }
                if let Some(e) = not_sparse(&view, &v.name).or_else(|| wrong_shape(&v)) {
                    return Err(e);
                }
                if !v.usage.contains(vk::ImageUsageFlags::STORAGE) {
                    return Err(invalid(&v.name, "lacks STORAGE usage".to_owned()));
                }
                if layout != vk::ImageLayout::GENERAL {
                    return Err(invalid(&v.name, format!("is a storage image in {layout:?}, not GENERAL")));
                }
                Ok(v.life.into_iter().collect())
            }
            Binding::AccelerationStructure(structure) => {
                let name = structure.name();
                if kind != BindingKind::AccelerationStructure {
                    return Err(wrong_kind(name));
                }
                if !structure.device().is(device) {
                    return Err(foreign(name));
                }
                if structure.level() != AccelerationLevel::Top {
                    return Err(invalid(
                        name,
                        "is a bottom-level structure; a shader traces rays through a top-level one"
                            .to_owned(),
                    ));
                }
                Ok(vec![Arc::clone(structure.life())])
            }
        }
    }

    /// Allocates a descriptor set from the program's pool and writes `bindings` into it (one per
    /// binding, in order); see `ComputeProgram::descriptor_set`.
    pub(crate) fn descriptor_set(&self, bindings: &[Binding<'_>]) -> Result<DescriptorSet, BindingError> {
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
            let views: Vec<(&ImageView, vk::ImageLayout)> = match *binding {
                Binding::Sampled { view: ViewRef::View(view), layout, .. }
                | Binding::Storage { view: ViewRef::View(view), layout } => vec![(view, layout)],
                Binding::SampledArray { views, layout, .. } => views
                    .iter()
                    .filter_map(|v| match v {
                        ViewRef::View(view) => Some((*view, layout)),
                        ViewRef::Sparse(_) => None,
                    })
                    .collect(),
                _ => Vec::new(),
            };
            for (view, layout) in views {
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
            if let Binding::AccelerationStructure(structure) = *binding {
                // Its build state is a one-subresource record: built = GENERAL.
                images.push(ImageUse {
                    layouts: Arc::clone(structure.build_state()),
                    mips: 0..1,
                    layers: 0..1,
                    layout: BUILT,
                });
            }
        }
        let device = self.life.device();
        let buffer_infos: Vec<_> = bindings
            .iter()
            .map(|b| match b {
                Binding::Buffer(buffer) => [vk::DescriptorBufferInfo::default()
                    .buffer(buffer.raw())
                    .offset(buffer.offset())
                    .range(buffer.size())],
                Binding::BufferRange { buffer, offset, size } => [vk::DescriptorBufferInfo::default()
                    .buffer(buffer.raw())
                    .offset(buffer.offset() + offset)
                    .range(*size)],
                _ => [vk::DescriptorBufferInfo::default()],
            })
            .collect();
        let image_infos: Vec<Vec<_>> = bindings
            .iter()
            .enumerate()
            .map(|(i, b)| match *b {
                Binding::Sampled { view, sampler, layout } => vec![vk::DescriptorImageInfo::default()
                    .image_view(view.facts().raw)
                    .sampler(sampler.raw())
                    .image_layout(layout)],
                Binding::Storage { view, layout } => {
                    vec![vk::DescriptorImageInfo::default().image_view(view.facts().raw).image_layout(layout)]
                }
                Binding::SampledArray { views, sampler, layout } => {
                    let info = |view: &ViewRef<'_>| {
                        vk::DescriptorImageInfo::default()
                            .image_view(view.facts().raw)
                            .sampler(sampler.raw())
                            .image_layout(layout)
                    };
                    let mut infos: Vec<_> = views.iter().map(info).collect();
                    // Every descriptor of the array is written: the last view repeated after
                    // the views given (at least one: `check_binding`).
                    let last = *infos.last().expect("an array binding holds at least one view");
                    infos.resize(self.kinds[i].descriptor_count() as usize, last);
                    infos
                }
                Binding::Buffer(_) | Binding::BufferRange { .. } | Binding::AccelerationStructure(_) => {
                    Vec::new()
                }
            })
            .collect();
        let structures: Vec<[vk::AccelerationStructureKHR; 1]> = bindings
            .iter()
            .map(|b| match b {
                Binding::AccelerationStructure(s) => [s.raw()],
                _ => [vk::AccelerationStructureKHR::null()],
            })
            .collect();
        let mut structure_writes: Vec<_> = structures
            .iter()
            .map(|s| vk::WriteDescriptorSetAccelerationStructureKHR::default().acceleration_structures(s))
            .collect();
        let layouts = [self.set_layout];
        let (set, pool_life) = {
            let mut pools = self.pool.locked();
            let mut grown = false;
            loop {
                if pools.used >= pools.max_sets {
                    self.grow(device, &mut pools)?;
                    grown = true;
                }
                let info = vk::DescriptorSetAllocateInfo::default()
                    .descriptor_pool(pools.current)
                    .set_layouts(&layouts);
                // SAFETY: pool and layout belong to this device; the pool is externally
                // synchronised by its lock.
                match unsafe { device.raw().allocate_descriptor_sets(&info) } {
                    Ok(sets) => {
                        pools.used += 1;
                        break (sets[0], pools.current_life.clone());
                    }
                    // The driver's own accounting ran out first: once more from a fresh pool.
                    Err(vk::Result::ERROR_OUT_OF_POOL_MEMORY | vk::Result::ERROR_FRAGMENTED_POOL)
                        if !grown =>
                    {
                        pools.used = pools.max_sets;
                    }
                    Err(r) => return Err(VulkanError::from_vk("vkAllocateDescriptorSets", r).into()),
                }
            }
        };
        if let Some(pool_life) = pool_life {
            // Held by every command that uses the set (as the bound resources are).
            bound.push(pool_life);
        }
        let writes: Vec<_> = bindings
            .iter()
            .zip(structure_writes.iter_mut())
            .enumerate()
            .map(|(i, (b, structure))| {
                let write = vk::WriteDescriptorSet::default()
                    .dst_set(set)
                    .dst_binding(i as u32)
                    .descriptor_type(self.kinds[i].descriptor_type());
                match b {
                    Binding::Buffer(_) | Binding::BufferRange { .. } => write.buffer_info(&buffer_infos[i]),
                    Binding::AccelerationStructure(_) => write.descriptor_count(1).push_next(structure),
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
}

/// What a program's shaders need of the resource at one binding of set 0 (from their SPIR-V).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct ShaderNeeds {
    /// The least buffer range: the largest fixed block part any stage declares (0 for images).
    block_bytes: u32,
    /// Whether any stage reads it with a sparse residency instruction: only a [`SparseImage`]
    /// may be bound there.
    sparse_residency: bool,
    /// For an image binding, the shape its shaders declare (the view must match it).
    image: Option<ImageShape>,
}

/// Per binding `0..bindings` of set 0, what the stages' shaders (`interfaces`) need there.
pub(crate) fn shader_needs(
    bindings: usize,
    interfaces: &[&crate::pipelines::spirv::Interface],
) -> Vec<ShaderNeeds> {
    let mut needs = vec![ShaderNeeds::default(); bindings];
    for b in interfaces.iter().flat_map(|i| i.bindings.iter()).filter(|b| b.set == 0) {
        if let Some(at) = needs.get_mut(b.binding as usize) {
            at.block_bytes = at.block_bytes.max(b.block_bytes);
            at.sparse_residency |= b.sparse_residency;
            at.image = at.image.or(b.image);
        }
    }
    needs
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

/// A program's objects while it is created: destroyed on drop unless finished (error paths).
pub(crate) struct Created<'a> {
    device: &'a Device,
    kinds: Vec<BindingKind>,
    needs: Vec<ShaderNeeds>,
    push_constant_bytes: u32,
    push_stages: vk::ShaderStageFlags,
    set_layout: vk::DescriptorSetLayout,
    /// The pipeline layout, for the pipeline's create info.
    pub(crate) layout: vk::PipelineLayout,
    pool: vk::DescriptorPool,
    /// The pool's set count and sizes (extra pools are made alike).
    max_sets: u32,
    sizes: Vec<vk::DescriptorPoolSize>,
    /// The pool's flags (`UPDATE_AFTER_BIND` for a layout with a bindless binding).
    pool_flags: vk::DescriptorPoolCreateFlags,
    /// The pipeline, once the caller created it.
    pub(crate) pipeline: vk::Pipeline,
}

impl<'a> Created<'a> {
    /// Creates set 0's layout (binding `i` of `kinds[i]`, visible to `stages[i]`, whose resources
    /// must meet `needs[i]`: [`shader_needs`]), a pipeline
    /// layout with that set and one push-constant range of `push_constant_bytes` (a multiple of 4
    /// within the device's limit: the caller checked) for `push_stages`, and a pool for
    /// `max_sets` sets (clamped to `1..=MAX_POOL_SETS`). What exists is destroyed if a step fails.
    #[allow(clippy::too_many_arguments, reason = "the parts of one layout, each checked by the callers")]
    pub(crate) fn layouts(
        device: &'a Device,
        kinds: &[BindingKind],
        needs: Vec<ShaderNeeds>,
        stages: &[vk::ShaderStageFlags],
        push_constant_bytes: u32,
        push_stages: vk::ShaderStageFlags,
        max_sets: u32,
    ) -> Result<Created<'a>, VulkanError> {
        debug_assert_eq!(kinds.len(), stages.len());
        let max_sets = pool_sets(max_sets);
        let mut created = Created {
            device,
            kinds: kinds.to_vec(),
            needs,
            push_constant_bytes,
            push_stages: if push_constant_bytes > 0 { push_stages } else { vk::ShaderStageFlags::empty() },
            set_layout: vk::DescriptorSetLayout::null(),
            layout: vk::PipelineLayout::null(),
            pool: vk::DescriptorPool::null(),
            max_sets,
            sizes: Vec::new(),
            pool_flags: vk::DescriptorPoolCreateFlags::empty(),
            pipeline: vk::Pipeline::null(),
        };
        let bindings: Vec<_> = kinds
            .iter()
            .zip(stages)
            .enumerate()
            .map(|(i, (k, &stages))| {
                vk::DescriptorSetLayoutBinding::default()
                    .binding(i as u32)
                    .descriptor_type(k.descriptor_type())
                    .descriptor_count(k.descriptor_count())
                    .stage_flags(stages)
            })
            .collect();
        // A bindless binding is UPDATE_AFTER_BIND (its larger limits), which takes a layout and
        // pools made for it.
        let update_after_bind = kinds.iter().any(|k| k.is_bindless());
        let binding_flags: Vec<vk::DescriptorBindingFlags> = kinds
            .iter()
            .map(|k| {
                if k.is_bindless() {
                    vk::DescriptorBindingFlags::UPDATE_AFTER_BIND
                } else {
                    vk::DescriptorBindingFlags::empty()
                }
            })
            .collect();
        let mut flags_info =
            vk::DescriptorSetLayoutBindingFlagsCreateInfo::default().binding_flags(&binding_flags);
        let mut set_layout_info = vk::DescriptorSetLayoutCreateInfo::default().bindings(&bindings);
        let pool_flags = if update_after_bind {
            set_layout_info = set_layout_info
                .flags(vk::DescriptorSetLayoutCreateFlags::UPDATE_AFTER_BIND_POOL)
                .push_next(&mut flags_info);
            vk::DescriptorPoolCreateFlags::UPDATE_AFTER_BIND
        } else {
            vk::DescriptorPoolCreateFlags::empty()
        };
        // Each type's count is (bindings of it) × sets, saturated: a layout with more bindings of
        // a type than `u32::MAX / MAX_POOL_SETS` is refused by the limits long before.
        let mut sizes: Vec<vk::DescriptorPoolSize> = Vec::new();
        for k in kinds {
            let ty = k.descriptor_type();
            let count = k.descriptor_count().saturating_mul(max_sets);
            match sizes.iter_mut().find(|s| s.ty == ty) {
                Some(s) => s.descriptor_count = s.descriptor_count.saturating_add(count),
                None => sizes.push(vk::DescriptorPoolSize { ty, descriptor_count: count }),
            }
        }
        let raw = device.raw();
        // SAFETY: valid device; the create infos live for each call; the push-constant range is a
        // multiple of 4 within the device's limit (the callers checked); descriptor counts are
        // within the device's limits and a bindless (update-after-bind) binding exists only with
        // descriptor indexing enabled (`check_descriptor_counts`, through `check_interface`, before
        // every call of this function). Objects are recorded in
        // `created`, which destroys what exists if a later step fails (none was used).
        unsafe {
            created.set_layout = raw
                .create_descriptor_set_layout(&set_layout_info, None)
                .during("vkCreateDescriptorSetLayout")?;
            let ranges =
                [vk::PushConstantRange::default().stage_flags(created.push_stages).size(push_constant_bytes)];
            let set_layouts = [created.set_layout];
            let mut layout_info = vk::PipelineLayoutCreateInfo::default().set_layouts(&set_layouts);
            if push_constant_bytes > 0 {
                layout_info = layout_info.push_constant_ranges(&ranges);
            }
            created.layout =
                raw.create_pipeline_layout(&layout_info, None).during("vkCreatePipelineLayout")?;
            let pool_info = vk::DescriptorPoolCreateInfo::default()
                .flags(pool_flags)
                .max_sets(max_sets)
                .pool_sizes(&sizes);
            created.pool = raw.create_descriptor_pool(&pool_info, None).during("vkCreateDescriptorPool")?;
        }
        created.sizes = sizes;
        created.pool_flags = pool_flags;
        Ok(created)
    }

    /// Names the objects `name`, tracks them in the ledger (the pipeline as `pipeline_kind`) and
    /// hands them to one life, released as a group.
    pub(crate) fn finish(mut self, name: &str, pipeline_kind: &'static str) -> (ProgramLayout, vk::Pipeline) {
        let device = self.device;
        // Taken out, so the guard's drop destroys only null handles.
        let set_layout = std::mem::take(&mut self.set_layout);
        let layout = std::mem::take(&mut self.layout);
        let pool = std::mem::take(&mut self.pool);
        let pipeline = std::mem::take(&mut self.pipeline);
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
            Garbage::Pipeline { raw: pipeline, id: ledger.track(pipeline_kind, name) },
            Garbage::PipelineLayout {
                raw: layout,
                id: ledger.track("pipeline layout", format!("{name} layout")),
            },
            Garbage::DescriptorSetLayout {
                raw: set_layout,
                id: ledger.track("descriptor set layout", format!("{name} set layout")),
            },
        ]);
        let program = ProgramLayout {
            life: Life::new(device.arc(), garbage, None),
            name: name.to_owned(),
            kinds: std::mem::take(&mut self.kinds),
            needs: std::mem::take(&mut self.needs),
            push_constant_bytes: self.push_constant_bytes,
            push_stages: self.push_stages,
            layout,
            set_layout,
            pool: Mutex::new(Pools {
                current: pool,
                current_life: None,
                used: 0,
                max_sets: self.max_sets,
                sizes: std::mem::take(&mut self.sizes),
                flags: self.pool_flags,
                extra: 0,
            }),
        };
        (program, pipeline)
    }
}

impl Drop for Created<'_> {
    fn drop(&mut self) {
        let raw = self.device.raw();
        // SAFETY: each handle is null or an object of this device created by `Created::layouts`
        // or its caller that nothing used yet. Destroying null handles is valid.
        unsafe {
            raw.destroy_descriptor_pool(self.pool, None);
            raw.destroy_pipeline(self.pipeline, None);
            raw.destroy_pipeline_layout(self.layout, None);
            raw.destroy_descriptor_set_layout(self.set_layout, None);
        }
    }
}
