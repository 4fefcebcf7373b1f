//! Sampled images in work items by multi-device object: one [`MultiImage`] or an array of them
//! (a fixed descriptor array or a bindless one, [`BindingKind::BindlessSampledImages`]) sampled
//! through a [`MultiSampler`], each resolved at submission to that device's instance and view.
//!
//! A [`MultiSampled`] is bound as [`MultiBinding::Sampled`](crate::multi::work::MultiBinding::Sampled):
//! on the device of a submission every image's cached view of `mips`
//! ([`MultiImage::view`]) and that device's sampler make the binding — [`Binding::Sampled`] for
//! one image, [`Binding::SampledArray`] for an array — checked as any binding is (kind, usage,
//! layout, shape, the array's length: [`BindingError::ArrayLength`](crate::compute::BindingError::ArrayLength)).
//!
//! [`BindingKind::BindlessSampledImages`]: crate::compute::BindingKind::BindlessSampledImages

use crate::device::set::DeviceSet;
use crate::error::VulkanError;
use crate::multi::barriers::{image_use, Access};
use crate::multi::work::WorkError;
use crate::multi::{fan_out_on, multi_device, MultiDevice, MultiDeviceError, MultiImage, PerDevice};
use crate::pipelines::compute::{Binding, ViewRef};
use crate::resources::image::{Filter, ImageView, Sampler};
use ash::vk;
use residency_core::device_mask::{DeviceIndex, DeviceMask};
use std::sync::Arc;

/// A sampler on every device of a mask. Each holds its device and is released when dropped,
/// after the GPU work (and the descriptor sets) that use it.
#[derive(Debug)]
pub struct MultiSampler {
    samplers: PerDevice<Sampler>,
}

impl MultiSampler {
    /// A sampler filtering with `filter` on every open device of `mask` (rolled back if one
    /// fails).
    pub fn new(
        set: &DeviceSet,
        mask: DeviceMask,
        filter: Filter,
    ) -> Result<Self, MultiDeviceError<VulkanError>> {
        let samplers = fan_out_on(set, mask, |d| d.create_sampler(filter))?;
        Ok(MultiSampler { samplers })
    }
}

multi_device!(MultiSampler, samplers: Sampler);

/// Multi-device images sampled through a [`MultiSampler`] in `layout`, bound as one binding of a
/// work item: one image ([`MultiSampled::image`]) or an array ([`MultiSampled::array`]), each
/// resolved per device at submission (resource + descriptor: the same description names each
/// device's own instance and view).
#[derive(Clone, Debug)]
pub struct MultiSampled<'a> {
    images: Vec<&'a MultiImage>,
    array: bool,
    mips: std::ops::Range<u32>,
    sampler: &'a MultiSampler,
    layout: vk::ImageLayout,
}

/// A [`MultiSampled`] resolved on one device: the views, the sampler and the layout.
pub(crate) struct ResolvedSampled<'a> {
    views: Vec<Arc<ImageView>>,
    array: bool,
    sampler: &'a Sampler,
    layout: vk::ImageLayout,
}

impl<'a> MultiSampled<'a> {
    /// One image's mips `mips`, for a [`BindingKind::SampledImage`](crate::compute::BindingKind::SampledImage)
    /// binding.
    pub fn image(
        image: &'a MultiImage,
        mips: std::ops::Range<u32>,
        sampler: &'a MultiSampler,
        layout: vk::ImageLayout,
    ) -> Self {
        MultiSampled { images: vec![image], array: false, mips, sampler, layout }
    }

    /// Images at array indices `0..images.len()` (each its mips `mips`), for a
    /// [`BindingKind::SampledImageArray`](crate::compute::BindingKind::SampledImageArray) (exactly
    /// its length) or [`BindingKind::BindlessSampledImages`](crate::compute::BindingKind::BindlessSampledImages)
    /// (1 to its maximum) binding; an image may appear more than once.
    pub fn array(
        images: Vec<&'a MultiImage>,
        mips: std::ops::Range<u32>,
        sampler: &'a MultiSampler,
        layout: vk::ImageLayout,
    ) -> Self {
        MultiSampled { images, array: true, mips, sampler, layout }
    }

    /// How many images it binds.
    pub fn len(&self) -> usize {
        self.images.len()
    }

    /// Whether it binds no image (an array binding refuses it at submission).
    pub fn is_empty(&self) -> bool {
        self.images.is_empty()
    }

    /// The views and sampler of `device`: an image or the sampler not there is
    /// [`WorkError::NotOnDevice`]; a view that cannot be made is [`WorkError::Vulkan`].
    pub(crate) fn resolve(&self, device: DeviceIndex) -> Result<ResolvedSampled<'a>, WorkError> {
        let sampler = self
            .sampler
            .instance(device)
            .ok_or(WorkError::NotOnDevice { name: "sampler".to_owned(), device })?;
        let mut views = Vec::with_capacity(self.images.len());
        for image in &self.images {
            let instance = image
                .instance(device)
                .ok_or_else(|| WorkError::NotOnDevice { name: "sampled image".to_owned(), device })?;
            let view = image.view_on(instance.device(), self.mips.clone()).map_err(|e| match e {
                MultiDeviceError::Failed { source, .. } => WorkError::Vulkan(source),
                _ => WorkError::NotOnDevice { name: instance.desc().name.to_string(), device },
            })?;
            views.push(view);
        }
        Ok(ResolvedSampled { views, array: self.array, sampler, layout: self.layout })
    }
}

impl<'a> MultiSampled<'a> {
    /// What sampling reads on `device` by `stages`, for the submitter's barriers: per image its
    /// instance there, mips `mips` of every layer (the cached view's subresources), sampled in
    /// `GENERAL`; `None` when the layout is another (not declared: the item gets full barriers,
    /// since the plan never moves an image out of `GENERAL`).
    pub(crate) fn accesses(
        &self,
        device: DeviceIndex,
        stages: residency_core::sync::PipelineStages,
    ) -> Result<Option<Vec<Access<'a>>>, WorkError> {
        if self.layout != vk::ImageLayout::GENERAL {
            return Ok(None);
        }
        let mut accesses = Vec::with_capacity(self.images.len());
        for image in &self.images {
            let instance = image
                .instance(device)
                .ok_or_else(|| WorkError::NotOnDevice { name: "sampled image".to_owned(), device })?;
            accesses.push(Access::Image {
                image: instance,
                mips: self.mips.clone(),
                layers: 0..instance.desc().array_layers,
                use_: image_use(stages, residency_core::sync::AccessFlags::SHADER_SAMPLED_READ),
            });
        }
        Ok(Some(accesses))
    }
}

impl ResolvedSampled<'_> {
    /// The view references for [`ResolvedSampled::binding`].
    pub(crate) fn view_refs(&self) -> Vec<ViewRef<'_>> {
        self.views.iter().map(|v| ViewRef::View(v)).collect()
    }

    /// The binding over `refs` (this resolution's [`ResolvedSampled::view_refs`]).
    pub(crate) fn binding<'s>(&'s self, refs: &'s [ViewRef<'s>]) -> Binding<'s> {
        match (self.array, refs) {
            (false, [view]) => Binding::Sampled { view: *view, sampler: self.sampler, layout: self.layout },
            _ => Binding::SampledArray { views: refs, sampler: self.sampler, layout: self.layout },
        }
    }
}
