//! Rendering into a partially resident image: a colour-attachment view of one mip and layer of a
//! sparse image with colour-attachment usage (the seed's PRT attached to an FBO).

use super::*;

/// A view of one mip and one layer of a [`SparseImage`] with colour-attachment usage, to render
/// into with [`GraphicsProgram::render_sparse`](crate::graphics::GraphicsProgram::render_sparse).
/// It keeps the image alive and is released when dropped, once the GPU work that used it has
/// completed. The image stays in `GENERAL` layout (as every sparse image does), so a render pass
/// uses the attachment in `GENERAL`: no transition discards the resident tiles' texels.
///
/// What lands where: fragments over resident tiles write their texels; fragments over
/// non-resident tiles are dropped on a device with `residencyNonResidentStrict`
/// ([`SparseImage::unbound_texels_read_zero`]) and go nowhere defined elsewhere (never into
/// another resource or a resident tile).
#[derive(Debug)]
pub struct SparseAttachment {
    life: Arc<Life>,
    raw: vk::ImageView,
    name: Arc<str>,
    mip: u32,
    layer: u32,
    extent: [u32; 2],
    format: vk::Format,
}

impl SparseImage {
    /// A colour-attachment view of (`layer`, `mip`). An image without colour-attachment usage
    /// ([`SparseUsage::color_attachment`]) is [`SparseError::MissingUsage`], a mip or layer it
    /// does not have [`CommitError::NoSuchSubresource`]; nothing is created then.
    pub fn attachment(&self, layer: u32, mip: u32) -> Result<SparseAttachment, SparseError> {
        if !self.is_color_attachment() {
            return Err(SparseError::MissingUsage { name: self.name.clone(), usage: "COLOR_ATTACHMENT" });
        }
        let Some(info) = self.layout().mip(mip).copied() else {
            return Err(CommitError::NoSuchSubresource { layer, mip }.into());
        };
        if layer >= self.desc.array_layers {
            return Err(CommitError::NoSuchSubresource { layer, mip }.into());
        }
        let device = self.device();
        let format = vk_format(self.desc.format);
        let info_vk = vk::ImageViewCreateInfo::default()
            .image(self.raw)
            .view_type(vk::ImageViewType::TYPE_2D)
            .format(format)
            .subresource_range(vk::ImageSubresourceRange {
                aspect_mask: aspect(self.desc.format),
                base_mip_level: mip,
                level_count: 1,
                base_array_layer: layer,
                layer_count: 1,
            });
        // SAFETY: the image is live (borrowed) on this device; it is 2D (colour-attachment usage
        // is refused for 3D images at creation), and the mip and layer exist (checked above).
        let raw = unsafe { device.raw().create_image_view(&info_vk, None) }
            .map_err(|r| SparseError::from(VulkanError::from_vk("vkCreateImageView", r)))?;
        let name: Arc<str> = Arc::from(format!("{} mip {mip} layer {layer} attachment", self.name));
        device.set_name(raw, &name);
        let id = device.ledger().track("image view", &*name);
        let parent: Arc<dyn Parent> = Arc::clone(&self.life) as Arc<dyn Parent>;
        Ok(SparseAttachment {
            life: Life::new(Arc::clone(device), Garbage::ImageView { raw, id }, Some(parent)),
            raw,
            name,
            mip,
            layer,
            extent: [info.extent[0], info.extent[1]],
            format,
        })
    }
}

impl SparseAttachment {
    /// The `VkImageView`.
    pub fn raw(&self) -> vk::ImageView {
        self.raw
    }

    /// Its name (the image's, with the mip and layer).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The mip it shows.
    pub fn mip(&self) -> u32 {
        self.mip
    }

    /// The layer it shows.
    pub fn layer(&self) -> u32 {
        self.layer
    }

    /// The extent of its mip.
    pub fn extent(&self) -> [u32; 2] {
        self.extent
    }

    /// Its `VkFormat`.
    pub fn vk_format(&self) -> vk::Format {
        self.format
    }

    /// The device it lives on.
    pub fn device(&self) -> &Arc<Device> {
        self.life.device()
    }

    /// What it leaves behind and keeps alive (recordings hold it).
    pub(crate) fn life(&self) -> &Arc<Life> {
        &self.life
    }

    /// Declares a use of the renderer's own work (see [`Buffer::used_until`](crate::Buffer::used_until));
    /// the image waits for it too.
    pub fn used_until(&self, until: GpuUse) -> Result<(), ForeignUse> {
        self.life.used_until(until)
    }
}
