//! Tile compaction's compute copy: a class of tiles whose texels (or compressed blocks) are 4, 8
//! or 16 bytes is moved heap to heap by a compute shader (`shaders/compact_copy_*.comp`) between
//! two *storage* carrier images, one dispatch per carrier pair, where `vkCmdCopyImage` would
//! otherwise copy it (on the H200 every `vkCmdCopyImage` runs about 55 GB/s, a compute copy
//! between the same sparse images about 910 GB/s: `docs/benchmarks.md`).
//!
//! **Why the carriers may alias the tiles.** The specification's *Sparse Memory Aliasing* makes
//! aliased memory data consistent between sparse images that are all `SPARSE_ALIASED`, have
//! *compatible formats* (one format compatibility class) and the same sparse image block shape,
//! outside mip tails. So:
//!
//! - an uncompressed colour class of 4, 8 or 16 bytes a texel (the 32-, 64- and 128-bit classes:
//!   `R8G8B8A8_*`, `R16G16_SFLOAT`, `R32_*`, `R16G16B16A16_SFLOAT`, `R32G32_SFLOAT`,
//!   `R32G32B32A32_*`, …) is carried by carriers of the class's unsigned-integer format
//!   (`R32_UINT`, `R16G16B16A16_UINT`, `R32G32B32A32_UINT`: storage formats every device has),
//!   with no extra creation flags; every image class of one size and block shape shares one
//!   carrier pair;
//! - a block-compressed class (8- or 16-byte blocks: BC1, BC3, …) is carried by carriers of the
//!   image's own format, made `MUTABLE_FORMAT | BLOCK_TEXEL_VIEW_COMPATIBLE | EXTENDED_USAGE` with
//!   storage usage, viewed as `R16G16B16A16_UINT` / `R32G32B32A32_UINT` (a view texel is a block);
//! - the block shape is checked, not assumed: the carrier format's sparse properties
//!   (`vkGetPhysicalDeviceSparseImageFormatProperties`, then the carrier's own requirements in
//!   `create_carrier`) must give the images' tile extent, and the view format must have
//!   `STORAGE_IMAGE`; otherwise (and for 1- and 2-byte texels, depth formats, 3D images) the class
//!   keeps `vkCmdCopyImage` between carriers of its own format.
//!
//! The shader copies texel for texel, so the bits move unchanged whatever the format means.
//! Nothing here names the `pipelines` layer (above `sparse`): the pass makes its own pipeline,
//! layouts, descriptor sets and views, and retires them with its carriers.

use super::image::{granularity_is, CarrierClass};
use super::*;
use residency_core::format::{Format, FormatKind};

/// The compute copy of one carrier class: the view format and the shader for it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct ComputeView {
    /// The format of the carriers' storage views.
    pub(super) format: vk::Format,
    /// A tile's extent in view texels (compressed blocks for a compressed class).
    pub(super) tile: [u32; 2],
    shader: CopyShader,
}

/// The shipped copy shaders, by view texel size.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum CopyShader {
    R32,
    Rgba16,
    Rgba32,
}

/// A shipped shader's words: `$name.spv` of `shaders/`, little-endian bytes to words at compile
/// time (aligned, the host's byte order, no `unsafe`).
macro_rules! spirv {
    ($name:literal) => {{
        const BYTES: &[u8] = include_bytes!(concat!(env!("CARGO_MANIFEST_DIR"), "/shaders/", $name, ".spv"));
        const WORDS: [u32; BYTES.len() / 4] = le_words(BYTES);
        &WORDS
    }};
}

const fn le_words<const N: usize>(bytes: &[u8]) -> [u32; N] {
    assert!(bytes.len() == 4 * N, "a SPIR-V file is a whole number of words");
    let mut words = [0u32; N];
    let mut i = 0;
    while i < N {
        words[i] = u32::from_le_bytes([bytes[4 * i], bytes[4 * i + 1], bytes[4 * i + 2], bytes[4 * i + 3]]);
        i += 1;
    }
    words
}

impl CopyShader {
    /// Its SPIR-V (the same files as `pipelines::shaders::COMPACT_COPY_*`).
    fn spirv(self) -> &'static [u32] {
        match self {
            CopyShader::R32 => spirv!("compact_copy_r32.comp"),
            CopyShader::Rgba16 => spirv!("compact_copy_rgba16.comp"),
            CopyShader::Rgba32 => spirv!("compact_copy_rgba32.comp"),
        }
    }
}

/// The workgroup extent of the copy shaders (`local_size_x`, `local_size_y`).
const GROUP: u32 = 16;
/// Bytes of the shaders' push constants: `{ uvec2 tile; uint cols; uint count; uint first; }`.
const PUSH_BYTES: u32 = 20;

/// The storage carrier class for `image`'s tiles and its view, or `None` where the compute copy
/// cannot carry them on this device (see the module's documentation).
pub(super) fn storage_class(device: &Device, image: &SparseImage) -> Option<(CarrierClass, ComputeView)> {
    if image.desc.dimension != SparseDimension::D2 {
        return None;
    }
    let format: Format = image.desc.format;
    let (view, shader) = match format.block_bytes() {
        4 => (vk::Format::R32_UINT, CopyShader::R32),
        8 => (vk::Format::R16G16B16A16_UINT, CopyShader::Rgba16),
        16 => (vk::Format::R32G32B32A32_UINT, CopyShader::Rgba32),
        _ => return None,
    };
    let (carrier, flags) = match format.kind() {
        FormatKind::Color => (view, vk::ImageCreateFlags::empty()),
        FormatKind::Compressed => (
            vk_format(format),
            vk::ImageCreateFlags::MUTABLE_FORMAT
                | vk::ImageCreateFlags::BLOCK_TEXEL_VIEW_COMPATIBLE
                | vk::ImageCreateFlags::EXTENDED_USAGE,
        ),
        FormatKind::Depth | FormatKind::DepthStencil => return None,
    };
    let shape = image.layout().tile_shape();
    let (bw, bh) = format.block_extent();
    if shape.depth != 1 || shape.width % bw != 0 || shape.height % bh != 0 {
        return None;
    }
    let class = CarrierClass {
        format: carrier,
        image_type: vk::ImageType::TYPE_2D,
        usage: vk::ImageUsageFlags::STORAGE,
        aspect: vk::ImageAspectFlags::COLOR,
        tile: [shape.width, shape.height, 1],
        texel_block: [bw, bh],
        flags,
    };
    let instance = device.instance();
    // SAFETY: pure queries on this device's physical device.
    let (features, sparse) = unsafe {
        (
            instance.get_physical_device_format_properties(device.physical(), view),
            instance.get_physical_device_sparse_image_format_properties(
                device.physical(),
                carrier,
                vk::ImageType::TYPE_2D,
                vk::SampleCountFlags::TYPE_1,
                // The block shape is the format's: a compressed format has no storage usage of
                // its own (its carrier gets it through EXTENDED_USAGE, which this query cannot
                // say), so it is asked with the copies' usage alone.
                if flags.is_empty() { class.usage } else { vk::ImageUsageFlags::empty() }
                    | vk::ImageUsageFlags::TRANSFER_SRC
                    | vk::ImageUsageFlags::TRANSFER_DST,
                vk::ImageTiling::OPTIMAL,
            ),
        )
    };
    let storage = features.optimal_tiling_features.contains(vk::FormatFeatureFlags::STORAGE_IMAGE);
    let same_shape = sparse.iter().any(|p| {
        p.aspect_mask.contains(vk::ImageAspectFlags::COLOR)
            && granularity_is(p.image_granularity, class.tile, class.texel_block)
            && !p.flags.contains(vk::SparseImageFormatFlags::NONSTANDARD_BLOCK_SIZE)
    });
    (storage && same_shape)
        .then_some((class, ComputeView { format: view, tile: [shape.width / bw, shape.height / bh], shader }))
}

/// The objects of one pass's compute copies: a pipeline per shader used, their layout, a
/// descriptor set per carrier pair and the pairs' storage views. Retired (destroyed once the
/// work submitted so far completed) when dropped.
pub(super) struct ComputeCopies<'a> {
    device: &'a Device,
    garbage: Option<ComputeGarbage>,
    /// Per carrier pair given to [`ComputeCopies::new`] (in order), its descriptor set and shader;
    /// `None` for a pair copied by `vkCmdCopyImage`.
    sets: Vec<Option<(vk::DescriptorSet, CopyShader)>>,
}

#[derive(Debug)]
struct ComputeGarbage {
    id: crate::device::ledger::ObjectId,
    views: Vec<vk::ImageView>,
    set_layout: vk::DescriptorSetLayout,
    layout: vk::PipelineLayout,
    pool: vk::DescriptorPool,
    pipelines: Vec<(CopyShader, vk::Pipeline)>,
}

impl crate::device::life::Retire for ComputeGarbage {
    fn retire(self: Box<Self>, device: &Device) {
        // SAFETY: every object belongs to this device, no handle to them is left (the pass kept
        // them in its `ComputeCopies` alone) and the GPU work that used them has completed (the
        // retire queue's contract); null handles (a creation that failed) are ignored by the
        // destroy calls.
        unsafe {
            let raw = device.raw();
            for &(_, pipeline) in &self.pipelines {
                raw.destroy_pipeline(pipeline, None);
            }
            raw.destroy_descriptor_pool(self.pool, None);
            raw.destroy_pipeline_layout(self.layout, None);
            raw.destroy_descriptor_set_layout(self.set_layout, None);
            for &view in &self.views {
                raw.destroy_image_view(view, None);
            }
        }
        device.ledger().untrack(self.id);
    }
}

impl Drop for ComputeCopies<'_> {
    fn drop(&mut self) {
        if let Some(garbage) = self.garbage.take() {
            self.device.retire(Garbage::Custom(Box::new(garbage)), LastUses::none());
        }
    }
}

impl<'a> ComputeCopies<'a> {
    /// The objects for `pairs`: per carrier pair (source, destination image) its compute view,
    /// or `None` for a pair `vkCmdCopyImage` copies. An error: a creation failed; what was made
    /// retires.
    pub(super) fn new(
        device: &'a Device,
        name: &str,
        pairs: &[(vk::Image, vk::Image, Option<ComputeView>)],
    ) -> Result<ComputeCopies<'a>, SparseError> {
        let computed = pairs.iter().filter(|p| p.2.is_some()).count() as u32;
        let mut copies = ComputeCopies {
            device,
            garbage: Some(ComputeGarbage {
                id: device.ledger().track("compaction compute copy", format!("{name} compute copy")),
                views: Vec::new(),
                set_layout: vk::DescriptorSetLayout::null(),
                layout: vk::PipelineLayout::null(),
                pool: vk::DescriptorPool::null(),
                pipelines: Vec::new(),
            }),
            sets: Vec::with_capacity(pairs.len()),
        };
        if computed == 0 {
            copies.sets.resize(pairs.len(), None);
            return Ok(copies);
        }
        let raw = device.raw();
        let g = copies.garbage.as_mut().expect("made above");
        let bindings = [0, 1].map(|b| {
            vk::DescriptorSetLayoutBinding::default()
                .binding(b)
                .descriptor_type(vk::DescriptorType::STORAGE_IMAGE)
                .descriptor_count(1)
                .stage_flags(vk::ShaderStageFlags::COMPUTE)
        });
        let push = [vk::PushConstantRange::default()
            .stage_flags(vk::ShaderStageFlags::COMPUTE)
            .offset(0)
            .size(PUSH_BYTES)];
        let sizes = [vk::DescriptorPoolSize {
            ty: vk::DescriptorType::STORAGE_IMAGE,
            descriptor_count: 2 * computed,
        }];
        // SAFETY: valid device; the create infos live for each call; what is created is put in
        // `g` at once, so it retires on every path.
        unsafe {
            g.set_layout = raw
                .create_descriptor_set_layout(
                    &vk::DescriptorSetLayoutCreateInfo::default().bindings(&bindings),
                    None,
                )
                .during("vkCreateDescriptorSetLayout")?;
            let set_layouts = [g.set_layout];
            g.layout = raw
                .create_pipeline_layout(
                    &vk::PipelineLayoutCreateInfo::default()
                        .set_layouts(&set_layouts)
                        .push_constant_ranges(&push),
                    None,
                )
                .during("vkCreatePipelineLayout")?;
            g.pool = raw
                .create_descriptor_pool(
                    &vk::DescriptorPoolCreateInfo::default().max_sets(computed).pool_sizes(&sizes),
                    None,
                )
                .during("vkCreateDescriptorPool")?;
        }
        for (i, &(src, dst, view)) in pairs.iter().enumerate() {
            let Some(view) = view else {
                copies.sets.push(None);
                continue;
            };
            let g = copies.garbage.as_mut().expect("made above");
            if !g.pipelines.iter().any(|p| p.0 == view.shader) {
                // SAFETY: valid device; the code is a shipped compute shader (glslc-compiled,
                // checked by `misuse_every_shipped_shader_declares_its_spirv_interface`) whose
                // interface is this layout's: two storage images at bindings 0 and 1 of set 0,
                // 20 bytes of push constants, no features beyond the core; the module is
                // destroyed on every path and the pipeline put in `g` at once.
                unsafe {
                    let module = raw
                        .create_shader_module(
                            &vk::ShaderModuleCreateInfo::default().code(view.shader.spirv()),
                            None,
                        )
                        .during("vkCreateShaderModule")?;
                    let stage = vk::PipelineShaderStageCreateInfo::default()
                        .stage(vk::ShaderStageFlags::COMPUTE)
                        .module(module)
                        .name(c"main");
                    let info = vk::ComputePipelineCreateInfo::default().stage(stage).layout(g.layout);
                    let made = raw.create_compute_pipelines(vk::PipelineCache::null(), &[info], None);
                    raw.destroy_shader_module(module, None);
                    let pipeline =
                        made.map_err(|(_, r)| VulkanError::from_vk("vkCreateComputePipelines", r))?[0];
                    g.pipelines.push((view.shader, pipeline));
                }
            }
            let mut image_views = [vk::ImageView::null(); 2];
            for (k, image) in [src, dst].into_iter().enumerate() {
                let mut usage = vk::ImageViewUsageCreateInfo::default().usage(vk::ImageUsageFlags::STORAGE);
                let info = vk::ImageViewCreateInfo::default()
                    .image(image)
                    .view_type(vk::ImageViewType::TYPE_2D)
                    .format(view.format)
                    .subresource_range(vk::ImageSubresourceRange {
                        aspect_mask: vk::ImageAspectFlags::COLOR,
                        base_mip_level: 0,
                        level_count: 1,
                        base_array_layer: 0,
                        layer_count: 1,
                    })
                    .push_next(&mut usage);
                // SAFETY: `image` is a live carrier of this device made with storage usage, in
                // the view's format or (`MUTABLE_FORMAT | BLOCK_TEXEL_VIEW_COMPATIBLE`) one whose
                // blocks are the view format's size, with one mip and layer; the view is put in
                // `g` at once.
                let v = unsafe { raw.create_image_view(&info, None) }.during("vkCreateImageView")?;
                g.views.push(v);
                device.set_name(v, &format!("{name} compute copy view {i}.{k}"));
                image_views[k] = v;
            }
            let set_layouts = [g.set_layout];
            // SAFETY: the pool was made for one set per computed pair, of this layout.
            let set = unsafe {
                raw.allocate_descriptor_sets(
                    &vk::DescriptorSetAllocateInfo::default()
                        .descriptor_pool(g.pool)
                        .set_layouts(&set_layouts),
                )
            }
            .during("vkAllocateDescriptorSets")?[0];
            let infos = image_views.map(|v| {
                [vk::DescriptorImageInfo::default().image_view(v).image_layout(vk::ImageLayout::GENERAL)]
            });
            let writes = [0usize, 1].map(|b| {
                vk::WriteDescriptorSet::default()
                    .dst_set(set)
                    .dst_binding(b as u32)
                    .descriptor_type(vk::DescriptorType::STORAGE_IMAGE)
                    .image_info(&infos[b])
            });
            // SAFETY: the set and views are live objects of this device, the set is used by no
            // command yet, and each write matches its binding (one storage image, GENERAL).
            unsafe { raw.update_descriptor_sets(&writes, &[]) };
            copies.sets.push(Some((set, view.shader)));
        }
        Ok(copies)
    }

    /// Records pair `i`'s copy of slots `0..count`, `cols` tiles a row, each `tile` view texels:
    /// one dispatch per `maxComputeWorkGroupCount[2]` slots; returns the dispatches recorded.
    /// The carriers must be in `GENERAL` and the copy ordered after their binds and before their
    /// reads by the caller's barriers.
    pub(super) fn record(
        &self,
        rec: &mut crate::sync::recording::Recording<'_>,
        i: usize,
        (tile, cols, count): ([u32; 2], u32, u32),
    ) -> u32 {
        let Some((set, shader)) = self.sets[i] else { return 0 };
        let g = self.garbage.as_ref().expect("alive until dropped");
        let pipeline = g.pipelines.iter().find(|p| p.0 == shader).expect("made with its set").1;
        let limit = self.device.limits().max_compute_work_group_count[2].max(1);
        let groups = [tile[0].div_ceil(GROUP), tile[1].div_ceil(GROUP)];
        let raw = self.device.raw();
        // SAFETY: `rec` is recording on this device outside a render pass; the pipeline, layout
        // and set are live (retired after the work submitted when this is dropped), the set's
        // views show carriers in GENERAL (the caller's contract), and the push constants are
        // the layout's 20 bytes.
        unsafe {
            raw.cmd_bind_pipeline(rec.raw(), vk::PipelineBindPoint::COMPUTE, pipeline);
            raw.cmd_bind_descriptor_sets(rec.raw(), vk::PipelineBindPoint::COMPUTE, g.layout, 0, &[set], &[]);
        }
        let mut dispatches = 0;
        let mut first = 0u32;
        while first < count {
            let z = (count - first).min(limit);
            let push: Vec<u8> =
                [tile[0], tile[1], cols, count, first].iter().flat_map(|w| w.to_ne_bytes()).collect();
            // SAFETY: as above; the workgroup counts are within the device's limits (x and y a
            // 64 KiB tile's extent over 16, z at most maxComputeWorkGroupCount[2]).
            unsafe {
                raw.cmd_push_constants(rec.raw(), g.layout, vk::ShaderStageFlags::COMPUTE, 0, &push);
                raw.cmd_dispatch(rec.raw(), groups[0], groups[1], z);
            }
            dispatches += 1;
            first += z;
        }
        dispatches
    }
}
