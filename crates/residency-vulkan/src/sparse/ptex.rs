//! PRT-Ptex on a sparse texture array: [`PtexTexture`].
//!
//! The core's [`PtexLayout`] packs per-face textures with one-texel borders into one slice per
//! resolution; this module makes the sparse 2D array, commits exactly the tiles under slots,
//! uploads every face's slots with their borders, and keeps the face table the shaders read
//! (`shaders/include/ptex.glsl`). Resolution is managed the PRT way: a face's finest resident
//! level can be dropped (its tiles released, the table naming the next level) and brought back.
//!
//! Every input is checked before anything is created or changed: the description (through
//! [`PtexLayout::new`], against the device's `maxImageDimension2D` and `maxImageArrayLayers`), the
//! format (uncompressed, not depth), the number of faces and each face's bytes. A failure after a
//! change has begun undoes it (released tiles committed again, committed tiles released), except
//! that a drop whose final unbind flush fails (a lost device, memory) has dropped the level with
//! its unbinds still queued (the next flush of the pool issues them).

use crate::device::Device;
use crate::resources::buffer::{Buffer, BufferDesc};
use crate::resources::image::{Filter, Sampler};
use crate::sparse::{SparseError, SparseImage, SparseTilePool};
use crate::sync::upload::{ImageRegion, UploadError, Uploader};
use residency_core::format::Format;
use residency_core::memory::MemoryIntent;
pub use residency_core::tiles::ptex::{
    bordered_slot, diagonal, edge_row, grid_faces, quad_mesh_faces, PtexDesc, PtexEdge, PtexEdges, PtexFace,
    PtexLayout, PtexLayoutError, PtexLimits, PtexNeighbour, PtexResidency, PtexResidencyError, PtexSlot,
    PtexTile, PTEX_MAX_LEVELS, PTEX_MAX_SIDE, PTEX_MIN_SLOT, PTEX_NO_SLOT, PTEX_RECORD_WORDS,
};
use residency_core::tiles::{SparseImageDesc, TexelRegion};
use residency_core::usage::BufferUsage;
use std::sync::Arc;

/// Why a [`PtexTexture`] call was refused or failed.
#[derive(Debug, thiserror::Error)]
pub enum PtexError {
    /// The description cannot be packed on this device.
    #[error(transparent)]
    Layout(#[from] PtexLayoutError),
    /// A drop or restore the face's residency does not allow.
    #[error(transparent)]
    Residency(#[from] PtexResidencyError),
    /// A block-compressed or depth/stencil format (borders are whole texels of colour).
    #[error("Ptex slots need an uncompressed colour format, not {format:?}")]
    Format {
        /// The format given.
        format: Format,
    },
    /// Face data for a different number of faces than the description has.
    #[error("face data for {given} faces, the description has {expected}")]
    FaceCount {
        /// Faces with data.
        given: usize,
        /// Faces described.
        expected: u32,
    },
    /// A face's data is not its levels' texels.
    #[error("face {face}: {given} bytes, its levels from {level} on hold {expected}")]
    FaceBytes {
        /// The face.
        face: u32,
        /// From this level to the last.
        level: u32,
        /// Bytes given.
        given: u64,
        /// Bytes expected.
        expected: u64,
    },
    /// A restored level whose edge texels are not those its neighbours' borders were built from.
    #[error(
        "face {face}'s level {level} came back with other edge texels than its neighbours' borders hold"
    )]
    EdgesDiffer {
        /// The face.
        face: u32,
        /// The level.
        level: u32,
    },
    /// The sparse image, its tiles or binds.
    #[error(transparent)]
    Sparse(#[from] SparseError),
    /// A staged upload.
    #[error(transparent)]
    Upload(#[from] UploadError),
    /// The face table's memory.
    #[error(transparent)]
    Memory(#[from] crate::device::blocks::MemoryError),
    /// Writing the face table.
    #[error(transparent)]
    Access(#[from] crate::resources::buffer::AccessError),
    /// Vulkan (the sampler, a wait).
    #[error(transparent)]
    Vulkan(#[from] crate::error::VulkanError),
}

impl crate::error::ResidencyError for PtexError {
    fn class(&self) -> crate::error::ErrorClass {
        use crate::error::ErrorClass;
        match self {
            PtexError::Layout(e) => e.class(),
            PtexError::Residency(e) => e.class(),
            PtexError::Sparse(e) => e.class(),
            PtexError::Upload(e) => e.class(),
            PtexError::Memory(e) => e.class(),
            PtexError::Access(e) => e.class(),
            PtexError::Vulkan(e) => e.class(),
            PtexError::Format { .. } => ErrorClass::Unsupported,
            PtexError::FaceCount { .. } | PtexError::FaceBytes { .. } | PtexError::EdgesDiffer { .. } => {
                ErrorClass::Refused
            }
        }
    }
}

/// Per-face textures packed in a sparse 2D array of one slice per resolution, with the face table
/// `shaders/include/ptex.glsl` reads.
///
/// Bind [`PtexTexture::image`] with [`PtexTexture::sampler`] as the include's `sampler2DArray`
/// and [`PtexTexture::table`] as its `PtexFaces` storage buffer. Dropped, it releases its tiles,
/// table and sampler after the GPU work that may use them (the crate's ownership rules).
#[derive(Debug)]
pub struct PtexTexture {
    layout: PtexLayout,
    residency: PtexResidency,
    edges: PtexEdges,
    image: SparseImage,
    table: Buffer,
    sampler: Sampler,
}

/// The device's limits for slices of `format` as the core's: its widest 2D image, most array
/// layers, and its 2D sparse tile side for `format` as the narrowest slice
/// ([`PtexLimits::for_device`]), so every slice is whole tiles and none lies in a mip tail.
pub fn device_limits(device: &Device, format: Format) -> PtexLimits {
    let limits = device.limits();
    PtexLimits {
        max_side: limits.max_image_dimension2_d,
        max_layers: limits.max_image_array_layers,
        ..PtexLimits::for_device(device.profile(), format)
    }
}

impl PtexTexture {
    /// Packs `desc` (in slices of at least the device's sparse tile for `format`, so no slice is in
    /// a mip tail), creates the sparse array (`format`, one mip, one layer per level) from `pool`,
    /// commits the tiles under every slot, uploads each face's slots with their borders through
    /// `uploader` and waits for the uploads, and creates the face table (every level resident) and
    /// a linear sampler.
    ///
    /// `faces[f]` is face `f`'s interior texels from its finest level to the last, level after
    /// level, rows packed: `(finest_slot >> L) - 2` texels a side at level `L`
    /// ([`PtexLayout::face_bytes`]).
    ///
    /// Refused with nothing created: a description the layout refuses or the device cannot hold
    /// ([`PtexError::Layout`]), a compressed or depth format ([`PtexError::Format`]), another number
    /// of faces ([`PtexError::FaceCount`]) or of bytes for a face ([`PtexError::FaceBytes`]). A
    /// failure later (the pool exhausted, an upload, memory) drops what was made; the image's
    /// tiles go back to the pool.
    pub fn new(
        pool: &SparseTilePool,
        uploader: &Uploader,
        name: &str,
        format: Format,
        desc: &PtexDesc,
        faces: &[&[u8]],
    ) -> Result<PtexTexture, PtexError> {
        let device = pool.device();
        if format.is_compressed() || format.is_depth_stencil() {
            return Err(PtexError::Format { format });
        }
        let texel_bytes = format.block_bytes();
        let layout = PtexLayout::new(desc, device_limits(device, format))?;
        if faces.len() != layout.face_count() as usize {
            return Err(PtexError::FaceCount { given: faces.len(), expected: layout.face_count() });
        }
        for (f, data) in faces.iter().enumerate() {
            let f = f as u32;
            let expected = layout.face_bytes(f, texel_bytes).unwrap_or(0);
            if data.len() as u64 != expected {
                return Err(PtexError::FaceBytes {
                    face: f,
                    level: layout.finest_level(f).unwrap_or(0),
                    given: data.len() as u64,
                    expected,
                });
            }
        }
        let edges = PtexEdges::new(&layout, texel_bytes, faces).expect("the faces' lengths were checked");
        let image_desc = SparseImageDesc::new_2d(format, layout.side(), layout.side())
            .with_mip_levels(1)
            .with_array_layers(layout.levels());
        let mut image = SparseImage::new(pool, name, &image_desc, false)?;
        // Slices are whole tiles (the layout's floor), so the driver keeps the mip out of a tail;
        // a driver that still reported one would make levels unreleasable (a tail is one pinned
        // unit per layer), so that is refused rather than managed wrongly.
        if let Some(tail) = image.layout().mip_tail() {
            return Err(PtexError::Sparse(SparseError::Incompatible {
                name: name.to_owned(),
                reason: format!(
                    "the driver puts the {side}² slices in a mip tail from lod {lod}; Ptex levels need tiled slices",
                    side = layout.side(),
                    lod = tail.first_lod
                ),
            }));
        }
        let shape = image.layout().tile_shape();
        let residency = PtexResidency::new(&layout, [shape.width, shape.height]);
        for tile in residency.tiles() {
            image.commit_region(pool, tile.0, 0, tile_region(&layout, [shape.width, shape.height], tile))?;
        }
        pool.flush_binds(&mut [&mut image])?;
        for (f, slot) in layout.slots() {
            let interior = level_texels(&layout, texel_bytes, faces[f as usize], f, slot.level);
            let texels =
                bordered_slot(&layout, &edges, f, slot.level, interior).expect("lengths were checked");
            upload_slot(uploader, &image, slot, texel_bytes, &texels)?;
        }
        uploader.wait_idle()?;
        let words = layout.face_table(residency.resident_levels());
        let mut table = device.create_buffer(
            &BufferDesc::new(format!("{name} faces"), words.len() as u64 * 4, BufferUsage::STORAGE)
                .with_intent(MemoryIntent::Upload),
        )?;
        table.write(0, &words_bytes(&words))?;
        let sampler = device.create_sampler(Filter::Trilinear)?;
        Ok(PtexTexture { layout, residency, edges, image, table, sampler })
    }

    /// The packing.
    pub fn layout(&self) -> &PtexLayout {
        &self.layout
    }

    /// Which levels of each face are resident, and the tiles committed.
    pub fn residency(&self) -> &PtexResidency {
        &self.residency
    }

    /// The sparse array: one layer per level, in `GENERAL` layout.
    pub fn image(&self) -> &SparseImage {
        &self.image
    }

    /// A linear sampler (bilinear within a slice; the include blends slices itself).
    pub fn sampler(&self) -> &Sampler {
        &self.sampler
    }

    /// The face table ([`PTEX_RECORD_WORDS`] words of header, then that many per face): the
    /// include's `PtexFaces` buffer.
    pub fn table(&self) -> &Buffer {
        &self.table
    }

    /// The face table's words as the GPU has them.
    pub fn table_words(&self) -> Vec<u32> {
        self.layout.face_table(self.residency.resident_levels())
    }

    /// The device.
    pub fn device(&self) -> &Arc<Device> {
        self.image.device()
    }

    /// Drops face `face`'s finest resident level: waits for every submission residency has made
    /// (nothing of residency's still reads the table or the level), points the face's record at
    /// its next level, and releases the tiles of the level's slot that no other resident slot
    /// covers (one flush). Returns the level dropped.
    ///
    /// Work of a renderer's own that reads the table or this level must have completed (as for
    /// [`Buffer::write`]). Refused with nothing changed: a face past the layout's or one with
    /// only its last level resident ([`PtexError::Residency`]), another pool
    /// ([`PtexError::Sparse`]).
    pub fn drop_finest_level(&mut self, pool: &SparseTilePool, face: u32) -> Result<u32, PtexError> {
        let (level, freed) = self.residency.plan_drop(&self.layout, face)?;
        let mut next = self.residency.clone();
        next.drop_finest(&self.layout, face).expect("planned above");
        // Nothing of residency's reads the table or the level after this wait.
        self.device().wait_submitted()?;
        let tile = self.tile();
        let mut released: Vec<PtexTile> = Vec::with_capacity(freed.len());
        for &t in &freed {
            if let Err(e) = self.image.release_region(pool, t.0, 0, tile_region(&self.layout, tile, t)) {
                for &back in &released {
                    let _ = self.image.commit_region(pool, back.0, 0, tile_region(&self.layout, tile, back));
                }
                return Err(e.into());
            }
            released.push(t);
        }
        if let Err(e) = write_record(&mut self.table, &self.layout, &next, face) {
            for &back in &released {
                let _ = self.image.commit_region(pool, back.0, 0, tile_region(&self.layout, tile, back));
            }
            return Err(e);
        }
        self.residency = next;
        if self.image.has_pending_binds() {
            pool.flush_binds(&mut [&mut self.image])?;
        }
        Ok(level)
    }

    /// Brings back the level finer than face `face`'s finest resident one from `texels` (that
    /// level's interior, rows packed): commits the tiles its slot needs, uploads the slot with its
    /// border and waits for it, then points the face's record at it. Returns the level.
    ///
    /// Refused with nothing changed: a face past the layout's or one whose finest level is resident
    /// ([`PtexError::Residency`]), another byte count ([`PtexError::FaceBytes`]), edge texels other
    /// than the level had ([`PtexError::EdgesDiffer`]: its neighbours' borders hold those), another
    /// pool or an exhausted one ([`PtexError::Sparse`]). A failed upload releases the tiles it
    /// committed again.
    pub fn restore_finer_level(
        &mut self,
        pool: &SparseTilePool,
        uploader: &Uploader,
        face: u32,
        texels: &[u8],
    ) -> Result<u32, PtexError> {
        let (level, added) = self.residency.plan_restore(&self.layout, face)?;
        let texel_bytes = self.edges.texel_bytes();
        let n = u64::from(self.layout.interior(level));
        let expected = n * n * u64::from(texel_bytes);
        if texels.len() as u64 != expected {
            return Err(PtexError::FaceBytes { face, level, given: texels.len() as u64, expected });
        }
        if !self.edges.matches(&self.layout, face, level, texels) {
            return Err(PtexError::EdgesDiffer { face, level });
        }
        let slot = self.layout.slot(face, level).expect("a level of the face has a slot");
        let bordered = bordered_slot(&self.layout, &self.edges, face, level, texels).expect("length checked");
        let tile = self.tile();
        let mut committed = Vec::with_capacity(added.len());
        let undo = |image: &mut SparseImage, committed: &[PtexTile]| {
            for &t in committed {
                let _ = image.release_region(pool, t.0, 0, tile_region(&self.layout, tile, t));
            }
            if image.has_pending_binds() {
                let _ = pool.flush_binds(&mut [image]);
            }
        };
        for &t in &added {
            if let Err(e) = self.image.commit_region(pool, t.0, 0, tile_region(&self.layout, tile, t)) {
                undo(&mut self.image, &committed);
                return Err(e.into());
            }
            committed.push(t);
        }
        if self.image.has_pending_binds() {
            if let Err(e) = pool.flush_binds(&mut [&mut self.image]) {
                undo(&mut self.image, &committed);
                return Err(e.into());
            }
        }
        let uploaded = upload_slot(uploader, &self.image, slot, texel_bytes, &bordered)
            .and_then(|()| uploader.wait_idle());
        if let Err(e) = uploaded {
            undo(&mut self.image, &committed);
            return Err(e.into());
        }
        let mut next = self.residency.clone();
        next.restore_finer(&self.layout, face).expect("planned above");
        // Nothing of residency's reads the table after this wait.
        let recorded = self
            .device()
            .wait_submitted()
            .map_err(PtexError::from)
            .and_then(|()| write_record(&mut self.table, &self.layout, &next, face));
        if let Err(e) = recorded {
            undo(&mut self.image, &committed);
            return Err(e);
        }
        self.residency = next;
        Ok(level)
    }

    fn tile(&self) -> [u32; 2] {
        let shape = self.image.layout().tile_shape();
        [shape.width, shape.height]
    }
}

/// Writes face `face`'s record of `table` as `residency` has it.
fn write_record(
    table: &mut Buffer,
    layout: &PtexLayout,
    residency: &PtexResidency,
    face: u32,
) -> Result<(), PtexError> {
    let words = layout.face_table(residency.resident_levels());
    let record = PTEX_RECORD_WORDS as usize;
    let at = record * (face as usize + 1);
    table.write(at as u64 * 4, &words_bytes(&words[at..at + record]))?;
    Ok(())
}

/// The texel region of tile `(level, x, y)` in its slice, clipped to the slice.
fn tile_region(layout: &PtexLayout, tile: [u32; 2], t: PtexTile) -> TexelRegion {
    let (x, y) = (t.1 * tile[0], t.2 * tile[1]);
    let side = layout.side();
    TexelRegion { offset: [x, y, 0], extent: [tile[0].min(side - x), tile[1].min(side - y), 1] }
}

/// Face `face`'s interior texels at `level` inside its data (lengths checked by the caller).
fn level_texels<'a>(
    layout: &PtexLayout,
    texel_bytes: u32,
    data: &'a [u8],
    face: u32,
    level: u32,
) -> &'a [u8] {
    let finest = layout.finest_level(face).unwrap_or(0);
    let at: u64 =
        (finest..level).map(|l| u64::from(layout.interior(l)).pow(2) * u64::from(texel_bytes)).sum();
    let n = u64::from(layout.interior(level));
    &data[at as usize..(at + n * n * u64::from(texel_bytes)) as usize]
}

/// Uploads a slot's texels in bands of rows that fit half the uploader's staging ring.
fn upload_slot(
    uploader: &Uploader,
    image: &SparseImage,
    slot: PtexSlot,
    texel_bytes: u32,
    texels: &[u8],
) -> Result<(), UploadError> {
    let row = u64::from(slot.side) * u64::from(texel_bytes);
    let rows = (uploader.staging_capacity() / 2 / row.max(1)).clamp(1, u64::from(slot.side)) as u32;
    let mut y = 0;
    while y < slot.side {
        let count = rows.min(slot.side - y);
        let region =
            ImageRegion::new(image, 0, [slot.origin[0], slot.origin[1] + y, 0], [slot.side, count, 1])
                .with_layer(slot.level);
        let from = (u64::from(y) * row) as usize;
        uploader.write_image(&region, &texels[from..from + (u64::from(count) * row) as usize])?;
        y += count;
    }
    Ok(())
}

fn words_bytes(words: &[u32]) -> Vec<u8> {
    words.iter().flat_map(|w| w.to_le_bytes()).collect()
}
