//! Images: placed (their own `VkImage` bound at an offset of a shared heap, kept off the
//! granularity pages of linear resources) or committed (their own memory), and their views.
//! Any `VkFormat`: the core's formats carry their texel sizes; a format the core does not know
//! is created and viewed, and refused by the operations that need texel sizes.

use crate::device::blocks::MemoryError;
use crate::device::blocks::ResourceMemory;
use crate::device::life::{ForeignUse, Garbage, GpuUse, Life, Parent};
use crate::device::Device;
use crate::error::VulkanError;
use crate::error::{ForeignReason, ForeignResource};
use crate::format_map::{aspect, vk_format};
use crate::memory::placement::{
    DedicatedTarget, ExistingAllocationInfo, PlaceRequest, PlacedWith, PlacementPolicy,
};
use crate::poison::PoisonFree;
use crate::resources::Unused;
use ash::vk;
use residency_core::allocator::{AllocError, ResourceKind};
use residency_core::device_mask::DeviceIndex;
use residency_core::format::{Format, FormatKind};
use residency_core::memory::MemoryIntent;
use residency_core::profile::ImageDimension;
use residency_core::usage::ImageUsage;
use std::sync::{Arc, Mutex};

/// The layout of every subresource (mip × layer) of an image *in submission order*: what the
/// universal queue leaves it in once every residency submission made so far has executed. Starts
/// `UNDEFINED` (images are created so); read and advanced only under the universal queue lock, by
/// [`CommandContext::submit`](crate::CommandContext::submit) checking a recording's layout
/// requirements and applying its effects (see `recording.rs`).
#[derive(Debug)]
pub(crate) struct Layouts {
    /// The image's name, for errors.
    pub(crate) name: String,
    pub(crate) mips: u32,
    pub(crate) layers: u32,
    /// Index `mip * layers + layer`.
    pub(crate) current: Mutex<Vec<vk::ImageLayout>>,
}

impl Layouts {
    /// All subresources in `initial`.
    pub(crate) fn new(name: &str, mips: u32, layers: u32, initial: vk::ImageLayout) -> Arc<Layouts> {
        Arc::new(Layouts {
            name: name.to_owned(),
            mips,
            layers,
            current: Mutex::new(vec![initial; (mips * layers) as usize]),
        })
    }

    /// The layouts now (in submission order), index `mip * layers + layer`.
    pub(crate) fn lock(&self) -> std::sync::MutexGuard<'_, Vec<vk::ImageLayout>> {
        self.current.locked()
    }
}

/// How to create an image.
#[derive(Clone, Debug)]
pub struct ImageDesc {
    /// Its name.
    pub name: String,
    /// 1D, 2D or 3D.
    pub dimension: ImageDimension,
    /// Texel format: the core's, or `Unknown` when [`ImageDesc::vk_format`] is a format the core
    /// does not know (then uploads and copies that need texel sizes refuse it).
    pub format: Format,
    /// The `VkFormat` when set with [`ImageDesc::with_vk_format`]; `None`: `format`'s.
    pub vk_format: Option<vk::Format>,
    /// Create flags: `CUBE_COMPATIBLE`, `MUTABLE_FORMAT`, `EXTENDED_USAGE` (others are refused;
    /// sparse images are [`SparseImage`](crate::sparse::SparseImage)s). Default: none.
    pub flags: vk::ImageCreateFlags,
    /// The formats views of a `MUTABLE_FORMAT` image may take (`VkImageFormatListCreateInfo`);
    /// empty: any compatible format.
    pub view_formats: Vec<vk::Format>,
    /// Queue families (by index) that use it concurrently (`VK_SHARING_MODE_CONCURRENT`); empty,
    /// the default: exclusive.
    pub queue_families: Vec<u32>,
    /// Width, height, depth in texels.
    pub extent: [u32; 3],
    /// Mip levels (at least 1, at most the full chain of the largest side: `⌊log2 max⌋ + 1`).
    pub mip_levels: u32,
    /// Array layers (at least 1; 1 for 3D).
    pub array_layers: u32,
    /// Samples per texel (1, 2, 4, 8, 16). A multisampled image has no `STORAGE` usage (residency
    /// does not enable `shaderStorageImageMultisample`) and cannot be a copy's destination or source.
    pub samples: u32,
    /// How it will be used.
    pub usage: ImageUsage,
    /// Linear tiling (row-major) instead of optimal.
    pub linear: bool,
    /// Memory intent (default device-local).
    pub intent: MemoryIntent,
    /// Its own memory instead of a place in a shared heap.
    pub committed: bool,
    /// Allocate even when over budget.
    pub allow_over_budget: bool,
    /// Whether it may go down its memory-type fallback chain when its preferred tier is out of
    /// memory or budget (default true; see [`BufferDesc::fallback`](crate::BufferDesc::fallback)).
    pub fallback: bool,
    /// VK_EXT_memory_priority's priority in `[0, 1]` (`None`: the default, 0.5). A priority
    /// belongs to a whole `VkDeviceMemory`, so a resource that asks for one gets memory of its
    /// own; without the extension it is checked and otherwise ignored.
    pub priority: Option<f32>,
    /// Its own alignment rules, over the device's ([`PlacementPolicy`]: D3D12's per-resource
    /// `USE_TIGHT_ALIGNMENT`; `None`, the default: the device's). Its own `Tight` on a device
    /// without tight support is [`MemoryError::Placement`].
    pub policy: Option<PlacementPolicy>,
}

impl ImageDesc {
    /// A device-local, optimally tiled 2D image with one mip and one layer.
    pub fn new_2d(
        name: impl Into<String>,
        format: Format,
        width: u32,
        height: u32,
        usage: ImageUsage,
    ) -> ImageDesc {
        ImageDesc {
            name: name.into(),
            dimension: ImageDimension::D2,
            format,
            vk_format: None,
            flags: vk::ImageCreateFlags::empty(),
            view_formats: Vec::new(),
            queue_families: Vec::new(),
            extent: [width, height, 1],
            mip_levels: 1,
            array_layers: 1,
            samples: 1,
            usage,
            linear: false,
            intent: MemoryIntent::DeviceLocal,
            committed: false,
            allow_over_budget: false,
            fallback: true,
            priority: None,
            policy: None,
        }
    }

    /// Forbids the fallback chain (see the `fallback` field).
    pub fn without_fallback(mut self) -> Self {
        self.fallback = false;
        self
    }

    /// Sets the memory priority (see the `priority` field).
    pub fn with_priority(mut self, priority: f32) -> Self {
        self.priority = Some(priority);
        self
    }

    /// Sets its own alignment rules (see [`ImageDesc::policy`]).
    pub fn with_policy(mut self, policy: PlacementPolicy) -> Self {
        self.policy = Some(policy);
        self
    }

    /// Sets the mip count.
    pub fn with_mip_levels(mut self, mips: u32) -> Self {
        self.mip_levels = mips;
        self
    }

    /// Makes it committed.
    pub fn committed(mut self) -> Self {
        self.committed = true;
        self
    }

    /// Sets any `VkFormat`. [`ImageDesc::format`] becomes the core's name for it, or `Unknown` when
    /// the core does not know it (creation then refuses depth/stencil and multi-planar formats
    /// and `COPY_SRC` usage, and uploads refuse the image: they need texel sizes). Creation
    /// refuses a value that is not a Vulkan 1.3 core format token.
    pub fn with_vk_format(mut self, format: vk::Format) -> Self {
        self.format = core_format(format).unwrap_or(Format::Unknown);
        self.vk_format = Some(format);
        self
    }

    /// Sets the array layer count.
    pub fn with_array_layers(mut self, layers: u32) -> Self {
        self.array_layers = layers;
        self
    }

    /// A cube map (or cube array): six layers per cube, `CUBE_COMPATIBLE`. `cubes` of at least 1.
    pub fn cube(mut self, cubes: u32) -> Self {
        self.array_layers = cubes.saturating_mul(6);
        self.flags |= vk::ImageCreateFlags::CUBE_COMPATIBLE;
        self
    }

    /// Views may take another compatible format (`MUTABLE_FORMAT`); `view_formats`, if not
    /// empty, lists the formats they may take (the image's own among them, if it is viewed so).
    pub fn mutable_format(mut self, view_formats: &[vk::Format]) -> Self {
        self.flags |= vk::ImageCreateFlags::MUTABLE_FORMAT;
        self.view_formats = view_formats.to_vec();
        self
    }

    /// Shared concurrently by these queue families (at least two distinct indices).
    pub fn concurrent(mut self, queue_families: &[u32]) -> Self {
        self.queue_families = queue_families.to_vec();
        self
    }

    /// Linear tiling (row-major), usually with a host-visible intent.
    pub fn linear(mut self, intent: MemoryIntent) -> Self {
        self.linear = true;
        self.intent = intent;
        self
    }

    /// The `VkFormat` it is created with.
    pub fn raw_format(&self) -> vk::Format {
        self.vk_format.unwrap_or_else(|| vk_format(self.format))
    }

    /// The image as the placement engine describes resources (D3D12's shape): what the legacy
    /// policy's small-texture (4 KiB), default (64 KiB) and multisample (4 MiB) layouts depend on.
    /// A format the core does not know counts as a 4-byte colour format.
    pub fn placement_desc(&self) -> residency_core::placement::ResourceDesc {
        use residency_core::placement::{ResourceDesc, ResourceFlag};
        let format = if self.format == Format::Unknown { Format::R8G8B8A8Unorm } else { self.format };
        let [w, h, d] = self.extent;
        let mut desc = match self.dimension {
            ImageDimension::D1 => ResourceDesc::texture_1d(format, u64::from(w)),
            ImageDimension::D2 => ResourceDesc::texture_2d(format, u64::from(w), h),
            ImageDimension::D3 => ResourceDesc::texture_3d(format, u64::from(w), h, d),
        };
        if self.dimension != ImageDimension::D3 {
            desc = desc.with_depth_or_array_size(self.array_layers.max(1));
        }
        desc = desc.with_mip_levels(self.mip_levels.max(1)).with_samples(self.samples.max(1));
        if self.usage.contains(ImageUsage::COLOR_ATTACHMENT) {
            desc = desc.with_flag(ResourceFlag::AllowRenderTarget);
        }
        if self.usage.contains(ImageUsage::DEPTH_STENCIL_ATTACHMENT) {
            desc = desc.with_flag(ResourceFlag::AllowDepthStencil);
        }
        if self.usage.contains(ImageUsage::STORAGE) {
            desc = desc.with_flag(ResourceFlag::AllowUnorderedAccess);
        }
        desc
    }

    /// The `VkImageCreateInfo` it stands for (the format list, when there is one, is chained on
    /// by [`Device::create_image`]).
    pub fn create_info(&self) -> vk::ImageCreateInfo<'_> {
        let info = vk::ImageCreateInfo::default()
            .flags(self.flags)
            .image_type(match self.dimension {
                ImageDimension::D1 => vk::ImageType::TYPE_1D,
                ImageDimension::D2 => vk::ImageType::TYPE_2D,
                ImageDimension::D3 => vk::ImageType::TYPE_3D,
            })
            .format(self.raw_format())
            .extent(vk::Extent3D { width: self.extent[0], height: self.extent[1], depth: self.extent[2] })
            .mip_levels(self.mip_levels)
            .array_layers(self.array_layers)
            .samples(vk::SampleCountFlags::from_raw(self.samples))
            .tiling(if self.linear { vk::ImageTiling::LINEAR } else { vk::ImageTiling::OPTIMAL })
            .usage(vk::ImageUsageFlags::from_raw(self.usage.bits()))
            .initial_layout(vk::ImageLayout::UNDEFINED);
        if self.queue_families.is_empty() {
            info.sharing_mode(vk::SharingMode::EXCLUSIVE)
        } else {
            info.sharing_mode(vk::SharingMode::CONCURRENT).queue_family_indices(&self.queue_families)
        }
    }
}

/// The core's name for a `VkFormat`, if it has one.
fn core_format(format: vk::Format) -> Option<Format> {
    Format::ALL.iter().copied().find(|&f| f != Format::Unknown && vk_format(f) == format)
}

/// Depth or stencil formats (the core knows three of them; the others it cannot give aspects).
fn is_depth_stencil(format: vk::Format) -> bool {
    matches!(
        format,
        vk::Format::D16_UNORM
            | vk::Format::X8_D24_UNORM_PACK32
            | vk::Format::D32_SFLOAT
            | vk::Format::S8_UINT
            | vk::Format::D16_UNORM_S8_UINT
            | vk::Format::D24_UNORM_S8_UINT
            | vk::Format::D32_SFLOAT_S8_UINT
    )
}

/// Whether `format` is a `VkFormat` token of the Vulkan 1.3 core (the 1.0 formats and those
/// promoted since: Y′CbCr, 4:4:4 planar, 4-bit ARGB, ASTC HDR). Any other value reaching
/// `vkGetPhysicalDeviceImageFormatProperties` or `vkCreateImage` is a
/// `VUID-*-format-parameter` error (and undefined behaviour in the driver), so descriptions
/// naming one are refused before Vulkan sees them.
fn is_core_vk_format(format: vk::Format) -> bool {
    let raw = format.as_raw();
    (1..=184).contains(&raw)
        || (1_000_156_000..=1_000_156_033).contains(&raw)
        || (1_000_330_000..=1_000_330_003).contains(&raw)
        || (1_000_340_000..=1_000_340_001).contains(&raw)
        || (1_000_066_000..=1_000_066_013).contains(&raw)
}

/// Multi-planar (Y′CbCr) formats, which need plane aspects and conversions residency lacks.
fn is_multi_planar(format: vk::Format) -> bool {
    let raw = format.as_raw();
    (1_000_156_000..=1_000_156_033).contains(&raw) || (1_000_330_000..=1_000_330_003).contains(&raw)
}

/// Whether an image of `image` may be viewed as `view` (both the core's: Vulkan's compatibility
/// classes for these are "same texel size" for uncompressed colour formats and the sRGB twin for
/// block formats; a depth format only as itself). `None` when the core knows either not.
fn view_compatible(image: vk::Format, view: vk::Format) -> Option<bool> {
    if image == view {
        return Some(true);
    }
    let (a, b) = (core_format(image)?, core_format(view)?);
    Some(match (a.kind(), b.kind()) {
        (FormatKind::Color, FormatKind::Color) => a.block_bytes() == b.block_bytes(),
        (FormatKind::Compressed, FormatKind::Compressed) => {
            let twin = |f| match f {
                Format::Bc1Srgb => Format::Bc1Unorm,
                Format::Bc7Srgb => Format::Bc7Unorm,
                f => f,
            };
            twin(a) == twin(b)
        }
        _ => false,
    })
}

/// The create flags [`ImageDesc::flags`] accepts.
const ACCEPTED_FLAGS: vk::ImageCreateFlags = vk::ImageCreateFlags::from_raw(
    vk::ImageCreateFlags::CUBE_COMPATIBLE.as_raw()
        | vk::ImageCreateFlags::MUTABLE_FORMAT.as_raw()
        | vk::ImageCreateFlags::EXTENDED_USAGE.as_raw(),
);

/// What a view shows and how ([`Image::create_view_as`]).
#[derive(Clone, Debug)]
pub struct ImageViewDesc {
    /// The mips it shows.
    pub mips: std::ops::Range<u32>,
    /// The layers it shows.
    pub layers: std::ops::Range<u32>,
    /// Its type; `None`: the image's (an array type when the image has several layers).
    pub view_type: Option<vk::ImageViewType>,
    /// Its format; `None`: the image's. Another format needs a `MUTABLE_FORMAT` image.
    pub format: Option<vk::Format>,
    /// The aspects it shows; `None`: every aspect of the format. A shader reads one aspect of a
    /// depth/stencil image: a view bound as a sampled or storage image shows `DEPTH` or `STENCIL`,
    /// not both (`VUID-VkDescriptorImageInfo-imageView-01976`, checked at binding).
    pub aspect: Option<vk::ImageAspectFlags>,
}

impl ImageViewDesc {
    /// Every mip and layer of `image`, as the image's type and format.
    pub fn of(image: &Image) -> ImageViewDesc {
        ImageViewDesc {
            mips: 0..image.desc.mip_levels,
            layers: 0..image.desc.array_layers,
            view_type: None,
            format: None,
            aspect: None,
        }
    }

    /// Sets the view type (`CUBE` for a cube map's six layers, …).
    pub fn with_type(mut self, view_type: vk::ImageViewType) -> Self {
        self.view_type = Some(view_type);
        self
    }

    /// Sets the aspects it shows (one of a depth/stencil format's two, to sample it).
    pub fn with_aspect(mut self, aspect: vk::ImageAspectFlags) -> Self {
        self.aspect = Some(aspect);
        self
    }

    /// Sets the view's format.
    pub fn with_format(mut self, format: vk::Format) -> Self {
        self.format = Some(format);
        self
    }
}

/// An image. It is released when dropped, once the GPU work that may use it has completed (see
/// [`Image::used_until`]); it keeps its device (and a transient image its heap) alive.
/// [`Device::destroy_image`] releases it explicitly and refuses an image of another device.
#[derive(Debug)]
pub struct Image {
    life: Arc<Life>,
    raw: vk::Image,
    desc: ImageDesc,
    memory: vk::DeviceMemory,
    memory_offset: u64,
    size: u64,
    committed: bool,
    resource: residency_core::sync::ResourceId,
    layouts: Arc<Layouts>,
    /// The application's own word (VMA's `pUserData`).
    user_data: u64,
    /// The rules it was placed with (kept across defragmentation moves, which keep its alignment).
    placed_with: PlacedWith,
}

/// What an [`Image`] is made of ([`Image::new`]); the rest (its tracking, its life, its layout
/// record, its state-tracking id, no user data) the constructor derives.
pub(crate) struct ImageParts {
    /// The device it lives on.
    pub(crate) device: Arc<Device>,
    /// Its `VkImage`, bound to `memory` at `memory_offset`; released with the image.
    pub(crate) raw: vk::Image,
    /// How it was described (its name, extent, mips and layers among it).
    pub(crate) desc: ImageDesc,
    /// What its release gives back.
    pub(crate) owner: ResourceMemory,
    /// What it keeps alive while it lives (a transient image's heap).
    pub(crate) parent: Option<Arc<dyn Parent>>,
    /// The memory it is bound to.
    pub(crate) memory: vk::DeviceMemory,
    /// Where in `memory`.
    pub(crate) memory_offset: u64,
    /// The bytes it occupies there (the driver's size).
    pub(crate) size: u64,
    /// Whether `memory` is its own.
    pub(crate) committed: bool,
    /// The rules it was placed with.
    pub(crate) placed_with: PlacedWith,
}

/// A defragmentation move of an [`Image`] ([`Image::rebind`]): its new `VkImage` and place.
pub(crate) struct MovedImage {
    /// The new `VkImage`, of the same description, bound at the new place.
    pub(crate) raw: vk::Image,
    /// What the new place's release gives back.
    pub(crate) owner: ResourceMemory,
    /// What the new place keeps alive.
    pub(crate) parent: Option<Arc<dyn Parent>>,
    /// The memory it is bound to now.
    pub(crate) memory: vk::DeviceMemory,
    /// Where in `memory`.
    pub(crate) memory_offset: u64,
    /// The bytes the new image occupies.
    pub(crate) size: u64,
    /// The new image's layout record (the copy's submission leaves it in the old one's layouts).
    pub(crate) layouts: Arc<Layouts>,
}

impl Image {
    /// The one constructor of an image: tracks it in the device's ledger by its name and gives it
    /// its life (which releases `parts.raw` and `parts.owner`, and keeps `parts.parent` alive), a
    /// layout record with every subresource `UNDEFINED`, and a fresh state-tracking id.
    pub(crate) fn new(parts: ImageParts) -> Image {
        let ImageParts {
            device,
            raw,
            desc,
            owner,
            parent,
            memory,
            memory_offset,
            size,
            committed,
            placed_with,
        } = parts;
        let id = device.ledger().track("image", desc.name.as_str());
        let layouts =
            Layouts::new(&desc.name, desc.mip_levels, desc.array_layers, vk::ImageLayout::UNDEFINED);
        Image {
            layouts,
            life: Life::new(device, Garbage::Image { raw, memory: owner, id }, parent),
            raw,
            desc,
            memory,
            memory_offset,
            size,
            committed,
            resource: crate::resources::buffer::next_resource_id(),
            user_data: 0,
            placed_with,
        }
    }

    /// The application's own word attached to the image (VMA's `pUserData`; 0 until set).
    /// Defragmentation keeps it.
    pub fn user_data(&self) -> u64 {
        self.user_data
    }

    /// Sets [`Image::user_data`].
    pub fn set_user_data(&mut self, user_data: u64) {
        self.user_data = user_data;
    }

    /// The device it lives on (kept alive by the image).
    pub fn device(&self) -> &Arc<Device> {
        self.life.device()
    }

    /// What it leaves behind and keeps alive (recordings and descriptor sets hold it).
    pub(crate) fn life(&self) -> &Arc<Life> {
        &self.life
    }

    /// Declares that GPU work the renderer submitted itself uses this image until `until`; see
    /// [`Buffer::used_until`](crate::Buffer::used_until).
    pub fn used_until(&self, until: GpuUse) -> Result<(), ForeignUse> {
        self.life.used_until(until)
    }

    /// The id state tracking (`ResourceTracker`) knows this image by.
    pub fn resource_id(&self) -> residency_core::sync::ResourceId {
        self.resource
    }

    /// The `VkImage`.
    ///
    /// Work you record or submit yourself with it (your own `unsafe` code) must leave every
    /// subresource in the layout residency has recorded for it ([`Image::layout`]) by the time a
    /// later residency submission runs: residency checks its submissions against that record.
    pub fn raw(&self) -> vk::Image {
        self.raw
    }

    /// The layout of subresource `mip`, `layer` once every residency submission made so far has
    /// executed (`None` outside the image). Submissions check the layouts their commands need
    /// against this and advance it.
    pub fn layout(&self, mip: u32, layer: u32) -> Option<vk::ImageLayout> {
        let l = &self.layouts;
        (mip < l.mips && layer < l.layers).then(|| l.lock()[(mip * l.layers + layer) as usize])
    }

    /// Its layout record (recordings check and advance it at submission).
    pub(crate) fn layouts(&self) -> &Arc<Layouts> {
        &self.layouts
    }

    /// A defragmentation pass moved it to `moved`: its `VkImage`, memory, offset, size, layout
    /// record and life are the new image's. Its description, whether it is committed,
    /// state-tracking id and user data stay. The old life is dropped here: the old image and
    /// range retire behind the copy (submitted before) and every use declared on them.
    pub(crate) fn rebind(&mut self, moved: MovedImage) {
        let MovedImage { raw, owner, parent, memory, memory_offset, size, layouts } = moved;
        let device = Arc::clone(self.life.device());
        let id = device.ledger().track("image", self.desc.name.as_str());
        let life = Life::new(device, Garbage::Image { raw, memory: owner, id }, parent);
        let old = std::mem::replace(&mut self.life, life);
        self.raw = raw;
        self.memory = memory;
        self.memory_offset = memory_offset;
        self.size = size;
        self.layouts = layouts;
        drop(old);
    }

    /// How it was described.
    pub fn desc(&self) -> &ImageDesc {
        &self.desc
    }

    /// Its name.
    pub fn name(&self) -> &str {
        &self.desc.name
    }

    /// The memory tier it lives in (a later one than its intent's first: it fell back or was
    /// demoted); `None` for a transient image.
    pub fn memory_tier(&self) -> Option<residency_core::memory::MemoryTier> {
        match self.life.garbage() {
            Some(crate::device::life::Garbage::Image { memory, .. }) => self.life.device().tier_of(memory),
            _ => None,
        }
    }

    /// The memory it is bound to and the offset there.
    pub fn memory(&self) -> (vk::DeviceMemory, u64) {
        (self.memory, self.memory_offset)
    }

    /// Bytes of memory it occupies (the driver's size).
    pub fn size(&self) -> u64 {
        self.size
    }

    /// Whether it has memory of its own.
    pub fn is_committed(&self) -> bool {
        self.committed
    }

    /// What it was placed with (the seed's `CheckExistingResourceAllocationInfo`): placed or
    /// committed, tight or legacy, the rules' size and alignment, its memory and offset there.
    pub fn existing_allocation_info(&self) -> ExistingAllocationInfo {
        self.placed_with.existing(self.committed, self.memory, self.memory_offset)
    }

    /// The device it lives on.
    pub fn device_index(&self) -> DeviceIndex {
        self.life.device().index()
    }

    /// The subresource range of all its mips and layers.
    pub fn full_range(&self) -> vk::ImageSubresourceRange {
        vk::ImageSubresourceRange {
            aspect_mask: aspect(self.desc.format),
            base_mip_level: 0,
            level_count: self.desc.mip_levels,
            base_array_layer: 0,
            layer_count: self.desc.array_layers,
        }
    }
}

fn invalid(name: &str, reason: impl Into<String>) -> MemoryError {
    MemoryError::Unsatisfiable { name: name.to_owned(), reason: reason.into() }
}

/// The format feature each view usage needs (`VUID-VkImageViewCreateInfo-usage-02274..02277`):
/// checked for an image's own format at creation and for a view's format at view creation.
const VIEW_USAGE_FEATURES: [(ImageUsage, vk::FormatFeatureFlags); 4] = [
    (ImageUsage::SAMPLED, vk::FormatFeatureFlags::SAMPLED_IMAGE),
    (ImageUsage::STORAGE, vk::FormatFeatureFlags::STORAGE_IMAGE),
    (ImageUsage::COLOR_ATTACHMENT, vk::FormatFeatureFlags::COLOR_ATTACHMENT),
    (ImageUsage::DEPTH_STENCIL_ATTACHMENT, vk::FormatFeatureFlags::DEPTH_STENCIL_ATTACHMENT),
];

impl Device {
    /// Whether the device accepts an image of this description.
    pub(crate) fn check_image(&self, desc: &ImageDesc) -> Result<(), MemoryError> {
        let name = desc.name.as_str();
        let raw_format = desc.raw_format();
        if raw_format == vk::Format::UNDEFINED {
            return Err(invalid(name, "an image needs a texel format"));
        }
        if !is_core_vk_format(raw_format) {
            return Err(invalid(name, format!("{raw_format:?} is not a Vulkan 1.3 core format")));
        }
        if core_format(raw_format).unwrap_or(Format::Unknown) != desc.format {
            return Err(invalid(
                name,
                format!(
                    "format {} and vk_format {raw_format:?} disagree (set both with with_vk_format)",
                    desc.format
                ),
            ));
        }
        if desc.format == Format::Unknown {
            if is_depth_stencil(raw_format) || is_multi_planar(raw_format) {
                return Err(invalid(
                    name,
                    format!(
                        "{raw_format:?}: depth/stencil and multi-planar formats must be ones the core knows"
                    ),
                ));
            }
            if desc.usage.contains(ImageUsage::COPY_SRC) {
                return Err(invalid(
                    name,
                    format!("{raw_format:?} has no texel size in the core, which residency's copies out of an image need: COPY_SRC is refused"),
                ));
            }
        }
        if !ACCEPTED_FLAGS.contains(desc.flags) {
            return Err(invalid(
                name,
                format!(
                    "create flags {:?} (only CUBE_COMPATIBLE, MUTABLE_FORMAT, EXTENDED_USAGE)",
                    desc.flags
                ),
            ));
        }
        if desc.flags.contains(vk::ImageCreateFlags::CUBE_COMPATIBLE)
            && (desc.dimension != ImageDimension::D2
                || desc.extent[0] != desc.extent[1]
                || desc.array_layers < 6
                || desc.samples != 1)
        {
            return Err(invalid(
                name,
                "a cube-compatible image is 2D, square, single-sampled, with at least 6 layers",
            ));
        }
        if !desc.view_formats.is_empty() {
            if !desc.flags.contains(vk::ImageCreateFlags::MUTABLE_FORMAT) {
                return Err(invalid(name, "a view format list needs MUTABLE_FORMAT"));
            }
            if let Some(&f) =
                desc.view_formats.iter().find(|&&f| view_compatible(raw_format, f) != Some(true))
            {
                return Err(invalid(
                    name,
                    format!("{f:?} is not a format {raw_format:?} is known to be viewable as"),
                ));
            }
        }
        if !desc.queue_families.is_empty() {
            // SAFETY: valid physical device; a pure query.
            let families =
                unsafe { self.instance().get_physical_device_queue_family_properties(self.physical()) }.len();
            let mut distinct = desc.queue_families.clone();
            distinct.sort_unstable();
            distinct.dedup();
            if distinct.len() < 2 || distinct.len() != desc.queue_families.len() {
                return Err(invalid(name, "concurrent sharing needs at least two distinct queue families"));
            }
            if let Some(f) = distinct.iter().find(|&&f| f as usize >= families) {
                return Err(invalid(
                    name,
                    format!("queue family {f} does not exist (the device has {families})"),
                ));
            }
        }
        if desc.extent.contains(&0) || desc.mip_levels == 0 || desc.array_layers == 0 || desc.usage.is_empty()
        {
            return Err(MemoryError::InvalidRequest { name: name.to_owned(), source: AllocError::ZeroSize });
        }
        if !desc.samples.is_power_of_two() || desc.samples > 64 {
            return Err(invalid(name, format!("{} samples is not a sample count", desc.samples)));
        }
        if desc.samples > 1 && (desc.dimension != ImageDimension::D2 || desc.linear || desc.mip_levels != 1) {
            return Err(invalid(name, "a multisampled image is 2D, optimally tiled and has one mip"));
        }
        if desc.samples > 1 && desc.usage.contains(ImageUsage::STORAGE) {
            // `VUID-VkImageCreateInfo-usage-00968`: residency does not enable
            // `shaderStorageImageMultisample` on its devices.
            return Err(invalid(
                name,
                "a multisampled storage image needs shaderStorageImageMultisample, which is not enabled",
            ));
        }
        if desc.dimension == ImageDimension::D3 && desc.array_layers != 1 {
            return Err(invalid(name, "a 3D image has one array layer"));
        }
        if desc.dimension == ImageDimension::D1 && (desc.extent[1] != 1 || desc.extent[2] != 1) {
            return Err(invalid(name, "a 1D image has height and depth 1"));
        }
        if desc.dimension == ImageDimension::D2 && desc.extent[2] != 1 {
            return Err(invalid(name, "a 2D image has depth 1"));
        }
        // A full mip chain ends at 1 × 1 × 1: floor(log2(largest extent)) + 1 levels.
        let full_chain = 32 - desc.extent.iter().copied().max().unwrap_or(1).leading_zeros();
        if desc.mip_levels > full_chain {
            return Err(invalid(
                name,
                format!(
                    "{} mips, but an extent of {:?} has at most {full_chain}",
                    desc.mip_levels, desc.extent
                ),
            ));
        }
        // The usages a view of the image's own format will carry need the format's features for
        // this tiling (`VUID-VkImageViewCreateInfo-usage-02274..02277`): some drivers report the
        // image itself as supported where its views are not (NVIDIA: linear colour attachments).
        if !desc.flags.contains(vk::ImageCreateFlags::EXTENDED_USAGE) {
            // SAFETY: valid physical device; a pure query.
            let props =
                unsafe { self.instance().get_physical_device_format_properties(self.physical(), raw_format) };
            let features =
                if desc.linear { props.linear_tiling_features } else { props.optimal_tiling_features };
            let needs = VIEW_USAGE_FEATURES;
            if let Some((missing, _)) =
                needs.iter().find(|(u, f)| desc.usage.contains(*u) && !features.contains(*f))
            {
                return Err(invalid(
                    name,
                    format!(
                        "{raw_format:?} with {} tiling does not support the {missing:?} usage",
                        if desc.linear { "linear" } else { "optimal" }
                    ),
                ));
            }
        }
        let info = desc.create_info();
        // SAFETY: valid physical device; a pure query.
        let props = unsafe {
            self.instance().get_physical_device_image_format_properties(
                self.physical(),
                info.format,
                info.image_type,
                info.tiling,
                info.usage,
                info.flags,
            )
        };
        let props = props.map_err(|_| invalid(name, format!("the device does not support {desc:?}")))?;
        let e = props.max_extent;
        if desc.extent[0] > e.width
            || desc.extent[1] > e.height
            || desc.extent[2] > e.depth
            || desc.mip_levels > props.max_mip_levels
            || desc.array_layers > props.max_array_layers
            || !props.sample_counts.contains(vk::SampleCountFlags::from_raw(desc.samples))
        {
            return Err(invalid(name, format!("beyond the device's limits for this format: {props:?}")));
        }
        // The first mip's bytes of every layer and sample, rounded up to the buffer-image
        // granularity (the validation layer's estimate of the resource's size), within the
        // format's maxResourceSize. Depth/stencil sizes cannot be estimated so and are left to
        // the driver, as the layer does.
        if desc.format != Format::Unknown && !desc.format.is_depth_stencil() {
            let (bw, bh) = desc.format.block_extent();
            let blocks = u128::from(desc.extent[0].div_ceil(bw.max(1)))
                * u128::from(desc.extent[1].div_ceil(bh.max(1)))
                * u128::from(desc.extent[2]);
            let bytes = blocks
                * u128::from(desc.format.block_bytes())
                * u128::from(desc.array_layers)
                * u128::from(desc.samples);
            let granularity = u128::from(self.profile().limits.buffer_image_granularity.max(1));
            let rounded = bytes.div_ceil(granularity) * granularity;
            if rounded > u128::from(props.max_resource_size) {
                return Err(invalid(
                    name,
                    format!(
                        "{rounded} B (its first mip, every layer and sample) is more than this format's \
                         maxResourceSize of {} B",
                        props.max_resource_size
                    ),
                ));
            }
        }
        Ok(())
    }

    /// Creates an image: placed in a shared heap (on granularity pages of its own kind) or committed.
    pub fn create_image(&self, desc: &ImageDesc) -> Result<Image, MemoryError> {
        // SAFETY: no chain of the caller's.
        unsafe { self.create_image_with_next(desc, std::ptr::null()) }
    }

    /// [`Device::create_image`] with the caller's `pNext` chain appended to the
    /// `VkImageCreateInfo` (after the format list residency chains for
    /// [`ImageDesc::view_formats`]): external memory, stencil usage, a format list of its own, a
    /// DRM modifier list, …. The image's memory is placed by the created object's own
    /// requirements, so whatever the chain changes about its size or alignment is honoured.
    ///
    /// # Safety
    /// `next` is null or points at a valid chain of structures that extend `VkImageCreateInfo`,
    /// live for the duration of the call, and describe, together with `desc`, an image the
    /// device supports (residency checks `desc` alone); it holds no `VkImageFormatListCreateInfo`
    /// when `desc.view_formats` is non-empty, and nothing that makes the image need memory
    /// residency does not give it (an import of external memory, say).
    pub unsafe fn create_image_with_next(
        &self,
        desc: &ImageDesc,
        next: *const std::ffi::c_void,
    ) -> Result<Image, MemoryError> {
        self.check_image(desc)?;
        let name = desc.name.as_str();
        let mut list = vk::ImageFormatListCreateInfo::default().view_formats(&desc.view_formats);
        let mut info = desc.create_info();
        if !desc.view_formats.is_empty() {
            list.p_next = next;
            info = info.push_next(&mut list);
        } else {
            info.p_next = next;
        }
        let raw = self.ledger().guard(crate::device::ledger::FaultSite::CreateResource, || {
            // SAFETY: the description was checked against the device's format properties above
            // (flags, sharing and the format list included); the chained list outlives the call;
            // the caller's chain after it is valid for this description (this fn's contract).
            unsafe { self.raw().create_image(&info, None) }
        });
        let raw = raw.map_err(|r| match r {
            vk::Result::ERROR_OUT_OF_DEVICE_MEMORY | vk::Result::ERROR_OUT_OF_HOST_MEMORY => {
                MemoryError::OutOfDeviceMemory { name: name.to_owned(), requested: 0 }
            }
            r => MemoryError::Vulkan(VulkanError::from_vk("vkCreateImage", r)),
        })?;
        self.set_name(raw, name);
        let guard = Unused::new(self, raw);
        // SAFETY: raw was just created on this device (never disjoint: residency sets no such flag).
        let requirements = unsafe { crate::device::profile_capture::requirements_of_image_object(self, raw) };
        let request = PlaceRequest {
            name,
            requirements,
            alignment_floor: 0,
            kind: if desc.linear { ResourceKind::Linear } else { ResourceKind::Optimal },
            intent: desc.intent,
            committed: desc.committed,
            allow_over_budget: desc.allow_over_budget,
            fallback: desc.fallback,
            priority: desc.priority,
            target: DedicatedTarget::Image(raw),
            image: Some(desc.placement_desc()),
            policy: desc.policy,
        };
        let placed = self.place(&request)?;
        // SAFETY: raw is unbound; the offset satisfies its alignment inside `memory`.
        if let Err(r) = unsafe { self.raw().bind_image_memory(raw, placed.memory, placed.offset) } {
            self.release(placed.owner);
            return Err(VulkanError::from_vk("vkBindImageMemory", r).into());
        }
        Ok(Image::new(ImageParts {
            device: self.arc(),
            raw: guard.disarm(),
            desc: desc.clone(),
            owner: placed.owner,
            parent: None,
            memory: placed.memory,
            memory_offset: placed.offset,
            size: requirements.size,
            committed: placed.committed,
            placed_with: placed.with,
        }))
    }

    /// Releases an image made on this device (as dropping it does: deferred while the GPU may use
    /// it, and after its views). An image of another device is refused and handed back unchanged.
    pub fn destroy_image(&self, image: Image) -> Result<(), ForeignResource<Image>> {
        if image.device().is(self) {
            drop(image);
            return Ok(());
        }
        let reason = ForeignReason::OtherDevice { owner: image.device_index(), target: self.index() };
        Err(ForeignResource { name: image.name().to_owned(), resource: Box::new(image), reason })
    }

    /// [`Image::create_view_as`]: the one constructor of an [`ImageView`].
    fn create_view_of(&self, image: &Image, desc: &ImageViewDesc) -> Result<ImageView, VulkanError> {
        let (mips, layers) = (desc.mips.clone(), desc.layers.clone());
        let d = &image.desc;
        if !image.device().is(self) {
            return Err(VulkanError::WrongDevice {
                name: d.name.clone(),
                owner: image.device_index(),
                device: self.index(),
            });
        }
        let viewable = ImageUsage::SAMPLED
            | ImageUsage::STORAGE
            | ImageUsage::COLOR_ATTACHMENT
            | ImageUsage::DEPTH_STENCIL_ATTACHMENT;
        if !d.usage.intersects(viewable) {
            return Err(VulkanError::Unsupported {
                device: self.name().to_owned(),
                reason: format!("image `{}` has no usage a view can serve ({:?})", d.name, d.usage),
            });
        }
        let within = |r: &std::ops::Range<u32>, count: u32| r.start < r.end && r.end <= count;
        if !within(&mips, d.mip_levels) || !within(&layers, d.array_layers) {
            return Err(VulkanError::SubresourceRange {
                image: d.name.clone(),
                mips,
                layers,
                mip_levels: d.mip_levels,
                array_layers: d.array_layers,
            });
        }
        let refuse = |reason: String| VulkanError::Unsupported {
            device: self.name().to_owned(),
            reason: format!("a view of image `{}`: {reason}", d.name),
        };
        let view_type = desc.view_type.unwrap_or(match (d.dimension, d.array_layers) {
            (ImageDimension::D1, 1) => vk::ImageViewType::TYPE_1D,
            (ImageDimension::D1, _) => vk::ImageViewType::TYPE_1D_ARRAY,
            (ImageDimension::D2, 1) => vk::ImageViewType::TYPE_2D,
            (ImageDimension::D2, _) => vk::ImageViewType::TYPE_2D_ARRAY,
            (ImageDimension::D3, _) => vk::ImageViewType::TYPE_3D,
        });
        let count = layers.end - layers.start;
        let cube = d.flags.contains(vk::ImageCreateFlags::CUBE_COMPATIBLE);
        let fits = match view_type {
            vk::ImageViewType::TYPE_1D => d.dimension == ImageDimension::D1 && count == 1,
            vk::ImageViewType::TYPE_1D_ARRAY => d.dimension == ImageDimension::D1,
            vk::ImageViewType::TYPE_2D => d.dimension == ImageDimension::D2 && count == 1,
            vk::ImageViewType::TYPE_2D_ARRAY => d.dimension == ImageDimension::D2,
            vk::ImageViewType::TYPE_3D => d.dimension == ImageDimension::D3,
            vk::ImageViewType::CUBE => cube && count == 6,
            vk::ImageViewType::CUBE_ARRAY => cube && count % 6 == 0,
            _ => false,
        };
        if !fits {
            return Err(refuse(format!(
                "{view_type:?} cannot show layers {layers:?} of a {:?} image with flags {:?}",
                d.dimension, d.flags
            )));
        }
        if view_type == vk::ImageViewType::CUBE_ARRAY {
            // `imageCubeArray` is a feature residency does not enable on its devices.
            return Err(refuse(
                "a CUBE_ARRAY view needs the imageCubeArray feature, which is not enabled \
                               (view each cube as CUBE, or the layers as TYPE_2D_ARRAY)"
                    .to_owned(),
            ));
        }
        let image_format = d.raw_format();
        let format = desc.format.unwrap_or(image_format);
        // The view's usage: the image's, less (on an EXTENDED_USAGE image) what its format cannot
        // serve, which `VkImageViewUsageCreateInfo` then says.
        let mut usage = d.usage;
        if format != image_format {
            if !d.flags.contains(vk::ImageCreateFlags::MUTABLE_FORMAT) {
                return Err(refuse(format!(
                    "{format:?} differs from {image_format:?} and the image is not MUTABLE_FORMAT"
                )));
            }
            if !d.view_formats.is_empty() && !d.view_formats.contains(&format) {
                return Err(refuse(format!(
                    "{format:?} is not in the image's format list {:?}",
                    d.view_formats
                )));
            }
            if view_compatible(image_format, format) != Some(true) {
                return Err(refuse(format!(
                    "{format:?} is not known to be compatible with {image_format:?}"
                )));
            }
            // SAFETY: valid physical device; a pure query.
            let props =
                unsafe { self.instance().get_physical_device_format_properties(self.physical(), format) };
            let features =
                if d.linear { props.linear_tiling_features } else { props.optimal_tiling_features };
            let needs = VIEW_USAGE_FEATURES;
            let extended = d.flags.contains(vk::ImageCreateFlags::EXTENDED_USAGE);
            if let Some((missing, _)) =
                needs.iter().find(|(u, f)| d.usage.contains(*u) && !features.contains(*f))
            {
                if !extended {
                    return Err(refuse(format!("{format:?} does not support the image's {missing:?} usage")));
                }
                usage = [ImageUsage::COPY_SRC, ImageUsage::COPY_DST]
                    .into_iter()
                    .chain(needs.iter().filter(|(_, f)| features.contains(*f)).map(|(u, _)| *u))
                    .filter(|u| d.usage.contains(*u))
                    .fold(ImageUsage::NONE, |all, u| all | u);
                if !usage.intersects(viewable) {
                    return Err(refuse(format!(
                        "{format:?} supports none of the image's view usages {:?}",
                        d.usage
                    )));
                }
            }
        }
        let all_aspects = image.full_range().aspect_mask;
        let aspect_mask = desc.aspect.unwrap_or(all_aspects);
        if aspect_mask.is_empty() || !all_aspects.contains(aspect_mask) {
            return Err(refuse(format!(
                "aspects {aspect_mask:?} are not a part of its format's {all_aspects:?}"
            )));
        }
        let range = vk::ImageSubresourceRange {
            aspect_mask,
            base_mip_level: mips.start,
            level_count: mips.end - mips.start,
            base_array_layer: layers.start,
            layer_count: layers.end - layers.start,
        };
        let mut view_usage =
            vk::ImageViewUsageCreateInfo::default().usage(vk::ImageUsageFlags::from_raw(usage.bits()));
        let mut info = vk::ImageViewCreateInfo::default()
            .image(image.raw)
            .view_type(view_type)
            .format(format)
            .subresource_range(range);
        if usage != d.usage {
            info = info.push_next(&mut view_usage);
        }
        // SAFETY: the image is live (borrowed) on this device (checked above); the mip and layer
        // ranges are non-empty and within it, the aspects a non-empty part of its format's, the type fits its dimension, flags and layer count
        // and needs no feature residency did not enable (no CUBE_ARRAY), and another format than
        // the image's is one its MUTABLE_FORMAT flag, format list and compatibility class allow,
        // whose features serve every usage of the view (the image's, or the subset chained in
        // `VkImageViewUsageCreateInfo` on an EXTENDED_USAGE image) (all checked above).
        let view = unsafe { self.raw().create_image_view(&info, None) }
            .map_err(|r| VulkanError::from_vk("vkCreateImageView", r))?;
        let name = format!("{} view", d.name);
        self.set_name(view, &name);
        let id = self.ledger().track("image view", name.as_str());
        let parent: Arc<dyn Parent> = Arc::clone(&image.life) as Arc<dyn Parent>;
        Ok(ImageView {
            life: Life::new(self.arc(), Garbage::ImageView { raw: view, id }, Some(parent)),
            raw: view,
            name: Arc::from(name),
            view_type,
            layers,
            extent: d.extent.map(|e| (e >> mips.start).max(1)),
            mips,
            format: core_format(format).unwrap_or(Format::Unknown),
            vk_format: format,
            aspect: aspect_mask,
            usage,
            samples: d.samples,
            linear: d.linear,
            layouts: Arc::clone(&image.layouts),
            image: image.raw,
        })
    }
}

/// A view of an [`Image`]: keeps the image alive; released when dropped, once the GPU work that may
/// use it has completed (declare the renderer's own uses with [`ImageView::used_until`]).
#[derive(Debug)]
pub struct ImageView {
    life: Arc<Life>,
    raw: vk::ImageView,
    name: Arc<str>,
    view_type: vk::ImageViewType,
    mips: std::ops::Range<u32>,
    layers: std::ops::Range<u32>,
    /// Its first mip's extent.
    extent: [u32; 3],
    format: Format,
    vk_format: vk::Format,
    aspect: vk::ImageAspectFlags,
    usage: ImageUsage,
    samples: u32,
    linear: bool,
    /// Its image's layout record.
    layouts: Arc<Layouts>,
    /// Its image's `VkImage`.
    image: vk::Image,
}

impl ImageView {
    /// Its image's `VkImage` (for barriers of your own, under the same rules as
    /// [`Image::raw`]).
    pub fn raw_image(&self) -> vk::Image {
        self.image
    }

    /// Its image's layout record.
    pub(crate) fn layouts(&self) -> &Arc<Layouts> {
        &self.layouts
    }

    /// The `VkImageView`.
    pub fn raw(&self) -> vk::ImageView {
        self.raw
    }

    /// Its name (the image's, with ` view`).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The mips it shows.
    pub fn mips(&self) -> std::ops::Range<u32> {
        self.mips.clone()
    }

    /// The array layers it shows.
    pub fn layers(&self) -> std::ops::Range<u32> {
        self.layers.clone()
    }

    /// The extent of its first mip.
    pub fn extent(&self) -> [u32; 3] {
        self.extent
    }

    /// Its format (the image's unless it was made as another): the core's name for it, or
    /// `Unknown` for a format the core does not know (see [`ImageView::vk_format`]).
    pub fn format(&self) -> Format {
        self.format
    }

    /// Its `VkFormat`.
    pub fn vk_format(&self) -> vk::Format {
        self.vk_format
    }

    /// The aspects it shows ([`ImageViewDesc::aspect`]).
    pub fn aspect(&self) -> vk::ImageAspectFlags {
        self.aspect
    }

    /// Its image's usage.
    pub fn usage(&self) -> ImageUsage {
        self.usage
    }

    /// Its image's samples per texel.
    pub fn samples(&self) -> u32 {
        self.samples
    }

    /// Whether its image has linear tiling.
    pub fn is_linear(&self) -> bool {
        self.linear
    }

    /// The view type (2D, 2D array, 3D, …).
    pub fn view_type(&self) -> vk::ImageViewType {
        self.view_type
    }

    /// What it leaves behind and keeps alive (recordings and descriptor sets hold it).
    pub(crate) fn life(&self) -> &Arc<Life> {
        &self.life
    }

    /// The device it lives on.
    pub fn device(&self) -> &Arc<Device> {
        self.life.device()
    }

    /// Declares a use of the renderer's own work (see [`Buffer::used_until`](crate::Buffer::used_until)); the
    /// image waits for it too.
    pub fn used_until(&self, until: GpuUse) -> Result<(), ForeignUse> {
        self.life.used_until(until)
    }
}

/// How a sampler filters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Filter {
    /// Nearest texel, nearest mip (exact reads).
    Nearest,
    /// Bilinear within a mip, linear between mips (trilinear).
    Trilinear,
    /// Trilinear with anisotropic filtering of at most this many taps (`maxAnisotropy`, 1 to the
    /// device's `maxSamplerAnisotropy`, at most 16 on every device); needs the device feature
    /// `samplerAnisotropy` ([`VulkanError::Anisotropy`] otherwise). Shaders that sample partially
    /// resident textures with it pass the same number to `residencySampleGradFallback`.
    Anisotropic(u32),
}

impl Device {
    /// Creates a sampler with clamp-to-edge addressing and the full LOD range; released when
    /// dropped, once the GPU work that may use it has completed. An anisotropic filter without
    /// the device feature `samplerAnisotropy`, of 0 taps or of more than the device's
    /// `maxSamplerAnisotropy` is [`VulkanError::Anisotropy`]; nothing is created then.
    pub fn create_sampler(&self, filter: Filter) -> Result<Sampler, VulkanError> {
        let (f, m) = match filter {
            Filter::Nearest => (vk::Filter::NEAREST, vk::SamplerMipmapMode::NEAREST),
            Filter::Trilinear | Filter::Anisotropic(_) => (vk::Filter::LINEAR, vk::SamplerMipmapMode::LINEAR),
        };
        let anisotropy = match filter {
            Filter::Anisotropic(asked) => {
                // The limit is a float; every device's is a whole number (at most 16).
                let maximum = if self.features().sampler_anisotropy {
                    self.limits().max_sampler_anisotropy as u32
                } else {
                    0
                };
                if asked == 0 || asked > maximum {
                    return Err(VulkanError::Anisotropy { asked, maximum });
                }
                Some(asked as f32)
            }
            _ => None,
        };
        let info = vk::SamplerCreateInfo::default()
            .anisotropy_enable(anisotropy.is_some())
            .max_anisotropy(anisotropy.unwrap_or(1.0))
            .mag_filter(f)
            .min_filter(f)
            .mipmap_mode(m)
            .address_mode_u(vk::SamplerAddressMode::CLAMP_TO_EDGE)
            .address_mode_v(vk::SamplerAddressMode::CLAMP_TO_EDGE)
            .address_mode_w(vk::SamplerAddressMode::CLAMP_TO_EDGE)
            .max_lod(vk::LOD_CLAMP_NONE);
        // SAFETY: valid device; a plain sampler description.
        let sampler = unsafe { self.raw().create_sampler(&info, None) }
            .map_err(|r| VulkanError::from_vk("vkCreateSampler", r))?;
        let name = format!("{filter:?} sampler");
        self.set_name(sampler, &name);
        let id = self.ledger().track("sampler", name.as_str());
        Ok(Sampler {
            life: Life::new(self.arc(), Garbage::Sampler { raw: sampler, id }, None),
            raw: sampler,
            filter,
        })
    }
}

/// A sampler; released when dropped, once the GPU work that may use it has completed.
#[derive(Debug)]
pub struct Sampler {
    life: Arc<Life>,
    raw: vk::Sampler,
    filter: Filter,
}

impl Sampler {
    /// The `VkSampler`.
    pub fn raw(&self) -> vk::Sampler {
        self.raw
    }

    /// How it filters.
    pub fn filter(&self) -> Filter {
        self.filter
    }

    /// The device it lives on.
    pub fn device(&self) -> &Arc<Device> {
        self.life.device()
    }

    /// What it leaves behind (descriptor sets hold it).
    pub(crate) fn life(&self) -> &Arc<Life> {
        &self.life
    }

    /// Declares a use of the renderer's own work (see [`Buffer::used_until`](crate::Buffer::used_until)).
    pub fn used_until(&self, until: GpuUse) -> Result<(), ForeignUse> {
        self.life.used_until(until)
    }
}

impl Image {
    /// Creates a view of mips `mips` and all layers of this image (2D array view for 2D images
    /// with layers). The view keeps the image alive and is released when dropped. An empty,
    /// reversed or out-of-range `mips` is [`VulkanError::SubresourceRange`]; nothing is created
    /// then.
    pub fn create_view(&self, mips: std::ops::Range<u32>) -> Result<ImageView, VulkanError> {
        self.create_view_range(mips, 0..self.desc.array_layers)
    }

    /// Creates a view of mips `mips` and layers `layers` of this image (an array view when the
    /// image has several layers, whatever `layers` covers). The ranges must be non-empty and
    /// within the image's mip levels and array layers, or the call is
    /// [`VulkanError::SubresourceRange`]. Nothing is created on error.
    pub fn create_view_range(
        &self,
        mips: std::ops::Range<u32>,
        layers: std::ops::Range<u32>,
    ) -> Result<ImageView, VulkanError> {
        self.create_view_as(&ImageViewDesc { mips, layers, view_type: None, format: None, aspect: None })
    }

    /// Creates a view of this image as `desc` says: as [`Image::create_view_range`], and a type of
    /// its own (`CUBE`: six layers of a `CUBE_COMPATIBLE` image; a non-array type: one layer;
    /// `CUBE_ARRAY` is refused: it needs `imageCubeArray`, which residency does not enable) and a
    /// format of its own (a `MUTABLE_FORMAT` image, a format in its format list if it has one,
    /// compatible with the image's, and supporting the image's view usages with its tiling; on an
    /// `EXTENDED_USAGE` image, the view takes the usages its format supports, at least one that a
    /// view serves, and [`ImageView::usage`] says which). Anything else is
    /// [`VulkanError::Unsupported`] naming the image; nothing is created on error.
    pub fn create_view_as(&self, desc: &ImageViewDesc) -> Result<ImageView, VulkanError> {
        self.device().create_view_of(self, desc)
    }
}
