//! The min-LOD map: one texel per mip-0 tile, the finest LOD whose chain to the coarsest level is
//! resident there, uploaded as it changes. 2D images get a 2D map, 2D arrays a 2D array map (one
//! layer per layer: layers stream independently), volumes a 3D map (one texel per mip-0 tile in
//! x, y and z).

use super::*;

/// The per-region min-LOD map of a sparse image as a texture: one `r8_uint` texel per mip-0
/// tile (per layer of a 2D array; per tile of every depth slice of a 3D image, as a 3D texture),
/// the finest LOD whose chain down to the coarsest level is resident there
/// (255 = nothing resident). Shaders clamp to it (`residency.glsl`); [`MinLodMap::update`] uploads
/// the entries that changed, in the same frame as the binds. Released when dropped, once the GPU
/// work that may sample it has completed (declare the renderer's own with
/// [`MinLodMap::used_until`]).
#[derive(Debug)]
pub struct MinLodMap {
    pub(super) image: crate::resources::image::Image,
    pub(super) view: crate::resources::image::ImageView,
    pub(super) uploaded: bool,
    /// The sparse image it was made for (its key): [`MinLodMap::update`] takes no other.
    pub(super) source: u64,
    /// The min-LOD extent and layers of that image's page table: what a table given to
    /// [`MinLodMap::upload_updates`] must have.
    pub(super) regions: [u32; 3],
    pub(super) layers: u32,
}

impl MinLodMap {
    /// Bytes of device memory the map texture occupies.
    pub fn memory_bytes(&self) -> u64 {
        self.image.size()
    }

    /// Creates the map texture for `image` (2D images, 2D arrays and 3D images), on its device:
    /// a `usampler2D`, `usampler2DArray` or `usampler3D` for `residency.glsl`. Its contents are
    /// undefined until the first [`upload_updates`](Self::upload_updates), which writes the whole
    /// map (pass no updates to initialize it before the first frame that samples it).
    pub fn new(image: &SparseImage) -> Result<MinLodMap, SparseError> {
        let device = image.device();
        let [w, h, d] = image.residency().page_table().min_lod_extent();
        if image.desc.dimension == SparseDimension::D2 && d != 1 {
            return Err(SparseError::Incompatible {
                name: image.name.clone(),
                reason: "a 2D image's min-LOD map has depth 1".into(),
            });
        }
        let mut desc = crate::resources::image::ImageDesc::new_2d(
            format!("{} min-LOD map", image.name),
            residency_core::format::Format::R8Uint,
            w,
            h,
            residency_core::usage::ImageUsage::SAMPLED | residency_core::usage::ImageUsage::COPY_DST,
        );
        if image.desc.dimension == SparseDimension::D3 {
            desc.dimension = residency_core::profile::ImageDimension::D3;
            desc.extent[2] = d;
        } else {
            desc.array_layers = image.desc.array_layers;
        }
        // Dropped on error: nothing is left behind.
        let texture = device.create_image(&desc)?;
        let view = texture.create_view(0..1)?;
        device.discard_to_general(&[&texture])?;
        Ok(MinLodMap {
            image: texture,
            view,
            uploaded: false,
            source: image.key,
            regions: [w, h, d],
            layers: image.residency().layout().array_layers(),
        })
    }

    /// The view to bind as a `usampler2D`, `usampler2DArray` (arrays) or `usampler3D` (volumes),
    /// in `GENERAL` layout.
    pub fn view(&self) -> &crate::resources::image::ImageView {
        &self.view
    }

    /// The device it lives on.
    pub fn device(&self) -> &Arc<Device> {
        self.image.device()
    }

    /// Declares that GPU work the renderer submitted itself samples the map until `until` (see
    /// [`Buffer::used_until`](crate::Buffer::used_until)).
    pub fn used_until(&self, until: GpuUse) -> Result<(), ForeignUse> {
        self.view.used_until(until)?;
        self.image.used_until(until)
    }

    /// Refreshes `image`'s min-LOD entries changed since the last update and queues their upload
    /// (the whole map the first time). Returns the number of entries uploaded. `image` must be the
    /// image the map was made for: another is [`SparseError::Incompatible`], with nothing
    /// refreshed or queued.
    pub fn update(
        &mut self,
        uploader: &crate::sync::upload::Uploader,
        image: &mut SparseImage,
    ) -> Result<u64, SparseError> {
        if image.key != self.source {
            return Err(SparseError::Incompatible {
                name: image.name.clone(),
                reason: format!("`{}` was made for another image", self.image.name()),
            });
        }
        let updates = image.refresh_min_lod();
        self.upload_updates(uploader, image.residency().page_table(), &updates)
    }

    /// Queues the upload of the entries of `table`'s min-LOD map that `updates` name (all of them
    /// the first time): for images whose residency another owner keeps (a streaming manager's
    /// changes carry the updates). An uploader of another device is refused
    /// ([`UploadError::WrongDevice`](crate::UploadError::WrongDevice)), as is a table whose map is
    /// not this one's size or layer count ([`SparseError::Incompatible`]), and an update naming a
    /// layer or entries outside the map ([`UploadError::RegionOutsideImage`](crate::UploadError::RegionOutsideImage));
    /// nothing is queued then.
    pub fn upload_updates(
        &mut self,
        uploader: &crate::sync::upload::Uploader,
        table: &residency_core::tiles::PageTable,
        updates: &[residency_core::tiles::MinLodUpdate],
    ) -> Result<u64, SparseError> {
        let [w, h, d] = table.min_lod_extent();
        let layers = table.layout().array_layers();
        if [w, h, d] != self.regions || layers != self.layers {
            return Err(SparseError::Incompatible {
                name: self.image.name().to_owned(),
                reason: format!(
                    "a table of {:?} entries × {layers} layers given to a map of {:?} × {}",
                    [w, h, d],
                    self.regions,
                    self.layers
                ),
            });
        }
        let boxes: Vec<(u32, [u32; 3], [u32; 3])> = if self.uploaded {
            updates.iter().map(|u| (u.layer, u.regions.start, u.regions.end)).collect()
        } else {
            (0..table.layout().array_layers()).map(|layer| (layer, [0, 0, 0], [w, h, d])).collect()
        };
        let region = |&(layer, start, end): &(u32, [u32; 3], [u32; 3])| {
            crate::sync::upload::ImageRegion::new(
                &self.image,
                0,
                start,
                [0, 1, 2].map(|a| end[a].saturating_sub(start[a])),
            )
            .with_layer(layer)
        };
        // Every box is checked against the map (its depth and layers too) before anything is
        // read or queued.
        boxes.iter().try_for_each(|b| region(b).check())?;
        let mut uploaded = 0;
        for b in &boxes {
            let (layer, start, end) = *b;
            let region = region(b);
            let entries = table.min_lod_layer(layer);
            let data: Vec<u8> = (start[2]..end[2])
                .flat_map(|z| (start[1]..end[1]).map(move |y| (z, y)))
                .flat_map(|(z, y)| (start[0]..end[0]).map(move |x| ((z * h + y) * w + x) as usize))
                .map(|i| entries.get(i).copied().unwrap_or(u8::MAX))
                .collect();
            uploader.write_image(&region, &data)?;
            uploaded += data.len() as u64;
        }
        self.uploaded = true;
        Ok(uploaded)
    }
}
