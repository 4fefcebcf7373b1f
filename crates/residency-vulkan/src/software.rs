//! The software residency path: a partially resident texture as a tile-cache atlas (a normal
//! image of bordered tile slots) and an indirection texture, for devices without sparse residency
//! for a format, or when a caller forces it ([`ResidencyPath::Software`]).
//!
//! It takes the same inputs as the hardware path: a page table and tile pool owned by the core
//! (a [`StreamingManager`](residency_core::streaming::StreamingManager) or a
//! [`SparseResidency`](residency_core::tiles::SparseResidency)), whose [`PhysicalTile`]s are the
//! atlas slots. Binding a tile is writing its bordered texels into its slot; unbinding is nothing
//! but the indirection no longer pointing there. Shaders sample through
//! `shaders/include/residency_software.glsl`, whose `residencySampleFallback` has the signature of
//! the hardware helper's.
//!
//! The atlas is allocated at its full capacity up front (an image cannot grow in place): size it
//! for the tile budget ([`SoftwareTexture::capacity_for_budget`]).

use crate::device::Device;
use crate::error::VulkanError;
use crate::image::{Image, ImageDesc};
use crate::memory::MemoryError;
use crate::upload::{ImageRegion, UploadError, Uploader};
use ash::vk;
use residency_core::format::{Format, FormatKind};
use residency_core::tiles::{
    AtlasLayout, HardwarePathUnsupported, Indirection, IndirectionError, PageTable, PhysicalTile,
    ResidencyPath, SparseDimension, SparseImageLayout,
};
use residency_core::usage::ImageUsage;

/// Border texels on each side of an atlas slot: enough for bilinear and trilinear footprints and
/// anisotropic ones up to 8×.
pub const DEFAULT_BORDER: u32 = 4;

/// What went wrong on the software path.
#[derive(Debug, thiserror::Error)]
pub enum SoftwareError {
    /// The layout cannot be held (3D, layers, a mip tail) or a slot is out of range.
    #[error(transparent)]
    Indirection(#[from] IndirectionError),
    /// Creating the atlas or the indirection texture failed (out of memory is a value here).
    #[error(transparent)]
    Memory(#[from] MemoryError),
    /// A Vulkan call failed.
    #[error(transparent)]
    Vulkan(#[from] VulkanError),
    /// Staging a tile or the indirection failed.
    #[error(transparent)]
    Upload(#[from] UploadError),
    /// The software path holds uncompressed colour formats.
    #[error("the software residency path holds uncompressed colour formats, not {format:?}")]
    UnsupportedFormat {
        /// The format asked for.
        format: Format,
    },
    /// A tile's data is not one bordered slot of texels.
    #[error("a bordered tile of {side} × {side} texels is {expected} bytes, got {got}")]
    WrongTileSize {
        /// Texels per slot side.
        side: u32,
        /// Bytes expected.
        expected: usize,
        /// Bytes given.
        got: usize,
    },
    /// The hardware path was forced where there is none.
    #[error(transparent)]
    HardwareUnsupported(#[from] HardwarePathUnsupported),
}

impl Device {
    /// Whether the device can keep a 2D image of `format` partially resident in hardware: sparse
    /// residency for 2D images, shader residency codes, a sparse queue and a sparse tile shape for
    /// the format.
    pub fn supports_hardware_residency(&self, format: Format) -> bool {
        let f = self.features();
        f.sparse_residency_image_2d
            && f.shader_resource_residency
            && self.sparse_queue().is_some()
            && self.profile().formats.iter().any(|p| p.format == format && p.sparse_2d.is_some())
    }

    /// The residency path an image of `format` takes here: `requested` resolved against
    /// [`supports_hardware_residency`](Self::supports_hardware_residency) (`Auto` → hardware when
    /// supported, else software; `Hardware` on a device without it → a typed error).
    pub fn residency_path(
        &self,
        format: Format,
        requested: ResidencyPath,
    ) -> Result<ResidencyPath, SoftwareError> {
        Ok(requested.resolve(self.supports_hardware_residency(format))?)
    }
}

/// A partially resident 2D texture on the software path; see the module docs.
#[derive(Debug)]
pub struct SoftwareTexture {
    name: String,
    atlas: Image,
    atlas_view: vk::ImageView,
    indirection_image: Image,
    indirection_view: vk::ImageView,
    indirection: Indirection,
    uploaded_once: bool,
}

impl SoftwareTexture {
    /// Atlas slots for a pool of `budget_tiles` tiles in heaps of `tiles_per_heap`: whole heaps,
    /// plus one for the fragmentation the pool may need.
    pub fn capacity_for_budget(budget_tiles: u32, tiles_per_heap: u32) -> u32 {
        let per_heap = tiles_per_heap.max(1);
        (budget_tiles.div_ceil(per_heap) + 1).saturating_mul(per_heap)
    }

    /// Creates the atlas (`capacity` slots of `layout`'s tile plus `border` texels per side) and
    /// the indirection texture, nothing resident. `layout` is a software layout
    /// ([`software_layout`](residency_core::tiles::software_layout)); slot `i` is the pool's heap
    /// `i / tiles_per_heap`, tile `i % tiles_per_heap`.
    pub fn new(
        device: &Device,
        name: &str,
        layout: &SparseImageLayout,
        border: u32,
        capacity: u32,
        tiles_per_heap: u32,
    ) -> Result<SoftwareTexture, SoftwareError> {
        let format = layout.desc().format;
        if format.kind() != FormatKind::Color || format.block_extent() != (1, 1) || format == Format::Unknown
        {
            return Err(SoftwareError::UnsupportedFormat { format });
        }
        if layout.desc().dimension != SparseDimension::D2 {
            return Err(IndirectionError::NotPlain2d {
                layers: layout.array_layers(),
                depth: layout.desc().depth,
            }
            .into());
        }
        let tile = layout.tile_shape();
        let atlas_layout = AtlasLayout::new(tile.width.max(tile.height), border, capacity, tiles_per_heap)?;
        let indirection = Indirection::new(layout, atlas_layout)?;
        let [aw, ah] = atlas_layout.extent();
        let atlas = device.create_image(&ImageDesc::new_2d(
            format!("{name} atlas"),
            format,
            aw,
            ah,
            ImageUsage::SAMPLED | ImageUsage::COPY_DST,
        ))?;
        let [iw, ih] = indirection.extent();
        let indirection_image = match device.create_image(&ImageDesc::new_2d(
            format!("{name} indirection"),
            Format::R32Uint,
            iw,
            ih,
            ImageUsage::SAMPLED | ImageUsage::COPY_DST,
        )) {
            Ok(image) => image,
            Err(e) => {
                device.destroy_image(atlas);
                return Err(e.into());
            }
        };
        let made = (|| -> Result<(vk::ImageView, vk::ImageView), SoftwareError> {
            device.discard_to_general(&[&atlas, &indirection_image])?;
            let atlas_view = device.create_image_view(&atlas, 0..1)?;
            match device.create_image_view(&indirection_image, 0..1) {
                Ok(view) => Ok((atlas_view, view)),
                Err(e) => {
                    device.destroy_image_view(atlas_view);
                    Err(e.into())
                }
            }
        })();
        match made {
            Ok((atlas_view, indirection_view)) => Ok(SoftwareTexture {
                name: name.to_owned(),
                atlas,
                atlas_view,
                indirection_image,
                indirection_view,
                indirection,
                uploaded_once: false,
            }),
            Err(e) => {
                device.destroy_image(atlas);
                device.destroy_image(indirection_image);
                Err(e)
            }
        }
    }

    /// Its name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Where the slots are.
    pub fn atlas_layout(&self) -> &AtlasLayout {
        self.indirection.atlas()
    }

    /// The CPU copy of the indirection texture.
    pub fn indirection(&self) -> &Indirection {
        &self.indirection
    }

    /// The atlas view (binding `tex` of the GLSL helper; sample it with a bilinear sampler).
    pub fn atlas_view(&self) -> vk::ImageView {
        self.atlas_view
    }

    /// The indirection view (binding `minLodMap` of the GLSL helper; a nearest sampler).
    pub fn indirection_view(&self) -> vk::ImageView {
        self.indirection_view
    }

    /// Bytes of device memory the atlas and the indirection hold.
    pub fn memory_bytes(&self) -> u64 {
        let [aw, ah] = self.atlas_layout().extent();
        let [iw, ih] = self.indirection.extent();
        u64::from(aw) * u64::from(ah) * u64::from(self.atlas.desc().format.block_bytes())
            + u64::from(iw) * u64::from(ih) * 4
    }

    /// Stages `bordered` (the tile's `(tile + 2·border)²` texels, rows packed; see
    /// [`bordered_tile`](residency_core::tiles::bordered_tile)) into `physical`'s slot. It reaches
    /// the atlas at the uploader's next flush; the indirection must point there only from then on
    /// (upload it after the tiles, as [`upload_indirection`](Self::upload_indirection) does when
    /// called after the writes of the same frame).
    pub fn write_tile(
        &self,
        device: &Device,
        uploader: &Uploader,
        physical: PhysicalTile,
        bordered: &[u8],
    ) -> Result<(), SoftwareError> {
        let atlas = self.atlas_layout();
        let side = atlas.slot_side();
        let expected = (side * side * self.atlas.desc().format.block_bytes()) as usize;
        if bordered.len() != expected {
            return Err(SoftwareError::WrongTileSize { side, expected, got: bordered.len() });
        }
        let [x, y] = atlas.slot_origin(physical)?;
        let region = ImageRegion {
            image: self.atlas.raw(),
            layout: vk::ImageLayout::GENERAL,
            aspect: vk::ImageAspectFlags::COLOR,
            mip: 0,
            layer: 0,
            offset: [x, y, 0],
            extent: [side, side, 1],
        };
        uploader.write_image(device, &region, bordered)?;
        Ok(())
    }

    /// Recomputes the indirection from `table` and stages the rows that changed (everything the
    /// first time: the texture's memory starts undefined). Returns the rows staged.
    pub fn upload_indirection(
        &mut self,
        device: &Device,
        uploader: &Uploader,
        table: &PageTable,
    ) -> Result<Option<std::ops::Range<u32>>, SoftwareError> {
        let changed = self.indirection.update(table)?;
        let [width, height] = self.indirection.extent();
        let rows = if self.uploaded_once { changed } else { Some(0..height) };
        if let Some(rows) = &rows {
            let region = ImageRegion {
                image: self.indirection_image.raw(),
                layout: vk::ImageLayout::GENERAL,
                aspect: vk::ImageAspectFlags::COLOR,
                mip: 0,
                layer: 0,
                offset: [0, rows.start, 0],
                extent: [width, rows.end - rows.start, 1],
            };
            uploader.write_image(device, &region, &self.indirection.row_bytes(rows.clone()))?;
            self.uploaded_once = true;
        }
        Ok(rows)
    }

    /// Destroys the views and images; the caller has waited for every use.
    pub fn destroy(self, device: &Device) {
        device.destroy_image_view(self.atlas_view);
        device.destroy_image_view(self.indirection_view);
        device.destroy_image(self.atlas);
        device.destroy_image(self.indirection_image);
    }
}
