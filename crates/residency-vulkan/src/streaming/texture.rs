//! One virtual texture's GPU objects on either residency path, and the texels of its loaded units.

use crate::sparse::software::{SoftwareAtlas, SoftwareTexture};
use crate::sparse::{MinLodMap, SparseImage, TileHeaps};
use crate::{
    device::life::ForeignUse, device::life::GpuUse, resources::image::ImageView, sync::upload::ImageRegion,
    sync::upload::Uploader,
};
use residency_core::format::Format;
use residency_core::streaming::{
    first_pinned_mip, SourceDepth, SourceError, StreamUnit, TileKey, TileSource,
};
use residency_core::tiles::{
    bordered_block_tile, bordered_tile, software_layout, standard_tile_shape, ImageId, MinLodUpdate,
    PageTable, PhysicalTile, ResidencyPath, SparseDimension, SparseImageDesc, SparseImageLayout,
};
use residency_core::vt_file::VtDesc;
use std::sync::Arc;

use super::StreamError;

/// The GPU objects of one texture. Dropping them releases them once the GPU work declared on them
/// (every frame's [`GpuUse`](crate::GpuUse), through `used_until`) has completed.
#[allow(clippy::large_enum_variant, reason = "one per texture, never moved in bulk")]
pub(super) enum TextureGpu {
    /// The image in an `Arc`: the bind worker's jobs hold it until their bind and staging are done.
    Hardware {
        image: Arc<SparseImage>,
        map: MinLodMap,
    },
    Software {
        texture: SoftwareTexture,
    },
}

/// A registered texture.
pub(super) struct Texture {
    pub(super) name: String,
    /// What its loads read: the source (hardware path; an array's layers through [`Layers`], a
    /// volume's slabs through [`Slabs`]), or the source bordered on the workers (software path:
    /// [`Bordered`]). Its "mips" are `layer · mip_count + mip` for arrays and `z · mip_count +
    /// mip` for volumes ([`Texture::load_tiles`]): the mip itself for one 2D layer.
    pub(super) load_source: Arc<dyn TileSource>,
    pub(super) desc: VtDesc,
    /// Its depth: [`SourceDepth::FLAT`], or a volume's.
    pub(super) depth: SourceDepth,
    pub(super) layout: SparseImageLayout,
    pub(super) gpu: TextureGpu,
    /// The pinned units (the coarse chain) the manager loads first.
    pub(super) pinned: Vec<TileKey>,
    /// Its counters ([`Streamer::texture_stats`](super::Streamer::texture_stats)).
    pub(super) stats: super::TextureStats,
    /// A sliced array's slices and LOD-bias buffer (`None`: any other texture).
    pub(super) slices: Option<super::slices::Slices>,
}

/// Refuses what the streamer does not stream: a depth, stencil or `unknown` format, tiles that
/// are not the format's standard 64 KiB shape (RGBA8: 128 × 128, R8: 256 × 256, RGBA16F:
/// 128 × 64, BC7/BC3: 256 × 256, BC1: 512 × 256, …), a stored border, and on the software path an
/// uncompressed texel that is not 4 bytes (its borders are assembled from 4-byte texels;
/// block-compressed slots are assembled from whole blocks, and a format the device cannot sample
/// is refused when its atlas is made). A volume ([`TileSource::depth`] more than one texel)
/// streams in the format's standard 3D tile (RGBA8: 32 × 32 × 16, R8: 64 × 32 × 32, …), on the
/// hardware path only.
pub(super) fn check_source(source: &dyn TileSource, software: bool) -> Result<VtDesc, StreamError> {
    let d = source.desc();
    let depth = source.depth();
    let refuse = |reason: String| StreamError::UnsupportedSource { name: source.name().to_owned(), reason };
    if d.format.is_depth_stencil() || d.format == Format::Unknown {
        return Err(refuse(format!("format {:?}: only colour formats stream", d.format)));
    }
    if depth.is_volume() && software {
        return Err(refuse(
            "a volume: the software path holds 2D images and arrays (its atlas slots and indirection are 2D)"
                .into(),
        ));
    }
    let dimension = if depth.is_volume() { SparseDimension::D3 } else { SparseDimension::D2 };
    let Some(shape) = standard_tile_shape(d.format, dimension) else {
        return Err(refuse(format!("format {:?} has no standard 64 KiB {dimension:?} tile shape", d.format)));
    };
    if depth.is_volume() && depth.tile_depth != shape.depth {
        return Err(refuse(format!(
            "volume tiles {} texels deep: {:?} streams in {} × {} × {} tiles",
            depth.tile_depth, d.format, shape.width, shape.height, shape.depth
        )));
    }
    if !depth.is_volume() && depth != SourceDepth::FLAT {
        return Err(refuse(format!("a 2D source with tiles {} texels deep", depth.tile_depth)));
    }
    let (tw, th) = (shape.width, shape.height);
    if d.tile_width != tw || d.tile_height != th || d.border != 0 {
        return Err(refuse(format!(
            "tiles of {} × {} with a border of {}: {:?} streams in {tw} × {th} tiles without a stored border",
            d.tile_width, d.tile_height, d.border, d.format
        )));
    }
    if software && !d.format.is_compressed() && d.format.block_bytes() != 4 {
        return Err(refuse(format!(
            "format {:?}: the software path streams 4-byte texels (RGBA8, BGRA8, RGB10A2, RG16F, R32F, …)",
            d.format
        )));
    }
    Ok(d)
}

impl Texture {
    /// The texture's layout and GPU objects, nothing resident yet: a sparse image on `heaps`
    /// (hardware path; a 2D array of `sources.len()` layers when there are several), or without
    /// heaps a software texture in the streamer's shared `atlas` (one atlas for every texture,
    /// sized for the budget; slot `i` is the pool's heap `i / tiles_per_heap`): its own
    /// indirection texture, and the atlas held by it.
    pub(super) fn create(
        heaps: Option<&TileHeaps>,
        atlas: Option<&SoftwareAtlas>,
        tile_bytes: u64,
        pinned_mip_tiles: u32,
        id: ImageId,
        name: &str,
        sources: Vec<Arc<dyn TileSource>>,
    ) -> Result<Texture, StreamError> {
        let path = if heaps.is_some() { ResidencyPath::Hardware } else { ResidencyPath::Software };
        let source = sources
            .first()
            .cloned()
            .ok_or_else(|| StreamError::Internal(format!("{name}: a texture without a source")))?;
        let desc = check_source(&*source, path == ResidencyPath::Software)?;
        let depth = source.depth();
        let layers = sources.len() as u32;
        if layers > 1
            && (path == ResidencyPath::Software
                || sources.iter().any(|s| s.desc() != desc || s.depth() != SourceDepth::FLAT))
        {
            return Err(StreamError::UnsupportedSource {
                name: name.to_owned(),
                reason: "array layers must match, be 2D and stream on the hardware path".into(),
            });
        }
        let image_desc = if depth.is_volume() {
            SparseImageDesc::new_3d(desc.format, desc.width, desc.height, depth.depth)
        } else {
            SparseImageDesc::new_2d(desc.format, desc.width, desc.height).with_array_layers(layers)
        }
        .with_mip_levels(desc.mip_count)
        .with_path(path);
        let (layout, gpu) = match heaps {
            Some(heaps) => {
                let image = SparseImage::new_external(heaps, tile_bytes, id, name, &image_desc, false)?;
                let shape = image.layout().tile_shape();
                if shape.width != desc.tile_width
                    || shape.height != desc.tile_height
                    || (depth.is_volume() && shape.depth != depth.tile_depth)
                {
                    return Err(StreamError::UnsupportedSource {
                        name: name.to_owned(),
                        reason: format!(
                            "the device's {:?} sparse tile is {} × {} × {}, not the source's {} × {} × {}",
                            desc.format,
                            shape.width,
                            shape.height,
                            shape.depth,
                            desc.tile_width,
                            desc.tile_height,
                            depth.tile_depth
                        ),
                    });
                }
                let map = MinLodMap::new(&image)?;
                (image.layout().clone(), TextureGpu::Hardware { image: Arc::new(image), map })
            }
            None => {
                let atlas = atlas
                    .ok_or_else(|| StreamError::Internal("a software texture without an atlas".into()))?;
                let layout = software_layout(&image_desc, atlas.layout().border)?;
                let texture = SoftwareTexture::new_in(atlas, name, &layout)?;
                (layout, TextureGpu::Software { texture })
            }
        };
        let pinned = pinned_units(id, &layout, pinned_mip_tiles);
        let load_source: Arc<dyn TileSource> = match &gpu {
            TextureGpu::Hardware { .. } if layers > 1 => {
                Arc::new(Layers { name: name.to_owned(), sources, mips: desc.mip_count })
            }
            TextureGpu::Hardware { .. } if depth.is_volume() => {
                Arc::new(Slabs { inner: source, mips: desc.mip_count })
            }
            TextureGpu::Hardware { .. } => source,
            TextureGpu::Software { texture } => Arc::new(Bordered {
                inner: source,
                desc,
                extents: layout.mips().iter().map(|m| [m.extent[0], m.extent[1]]).collect(),
                border: texture.atlas_layout().border,
                tile: texture.atlas_layout().tile_side,
            }),
        };
        Ok(Texture {
            name: name.to_owned(),
            load_source,
            desc,
            depth,
            layout,
            gpu,
            pinned,
            stats: Default::default(),
            slices: None,
        })
    }

    /// Initializes the map (min-LOD map or indirection) from `table` before the first frame.
    pub(super) fn upload_map(
        &mut self,
        uploader: &Uploader,
        table: &PageTable,
        updates: &[MinLodUpdate],
    ) -> Result<(), StreamError> {
        match &mut self.gpu {
            TextureGpu::Hardware { map, .. } => {
                map.upload_updates(uploader, table, updates)?;
            }
            TextureGpu::Software { texture } => {
                texture.upload_indirection(uploader, table)?;
            }
        }
        Ok(())
    }

    /// Gives an array texture's layers new sources (a slice's texture changed): later loads of
    /// layer `i` read `sources[i]` (loads in flight keep the old ones; the caller cancels them).
    pub(super) fn set_layer_sources(&mut self, sources: Vec<Arc<dyn TileSource>>) {
        self.load_source = Arc::new(Layers { name: self.name.clone(), sources, mips: self.desc.mip_count });
    }

    /// Declares that the frame ending at `until` samples the texture.
    pub(super) fn used_until(&self, until: GpuUse) -> Result<(), ForeignUse> {
        if let Some(slices) = &self.slices {
            slices.buffer.used_until(until)?;
        }
        match &self.gpu {
            TextureGpu::Hardware { image, map } => {
                image.used_until(until)?;
                map.used_until(until)
            }
            TextureGpu::Software { texture } => texture.used_until(until),
        }
    }

    /// Holds the texture's objects a frame names (its views and so their images, the slices'
    /// bias buffer) in `rec` until its submission completes, or until `rec` is dropped unsubmitted.
    pub(super) fn keep_in(&self, rec: &mut crate::sync::recording::Recording<'_>) {
        if let Some(slices) = &self.slices {
            rec.keep(slices.buffer.life());
        }
        match self.views() {
            TextureViews::Hardware { image, min_lod } => {
                rec.keep(image.view_binding().3);
                rec.keep(min_lod.life());
            }
            TextureViews::Software { atlas, indirection } => {
                rec.keep(atlas.life());
                rec.keep(indirection.life());
            }
        }
    }

    /// Bytes of device memory of the map the shaders read: the min-LOD map (hardware) or the
    /// indirection texture (software; the shared atlas is not counted).
    pub(super) fn map_bytes(&self) -> u64 {
        let bias = self.slices.as_ref().map_or(0, |s| s.buffer.size());
        bias + match &self.gpu {
            TextureGpu::Hardware { map, .. } => map.memory_bytes(),
            TextureGpu::Software { texture } => texture.indirection_bytes(),
        }
    }

    /// The views a shader binds: the texture (sparse image or atlas) and its map (min-LOD map or
    /// indirection).
    pub(super) fn views(&self) -> TextureViews<'_> {
        match &self.gpu {
            TextureGpu::Hardware { image, map } => TextureViews::Hardware { image, min_lod: map.view() },
            TextureGpu::Software { texture } => TextureViews::Software {
                atlas: texture.atlas_view(),
                indirection: texture.indirection_view(),
            },
        }
    }

    /// The tiles `(layer · mip_count + mip, x, y)` a load of `unit` reads (`load_source`'s
    /// numbering; `(mip, x, y)` for one layer, `(z · mip_count + mip, x, y)` for a volume): the
    /// tile itself (the software path's `load_source` reads its neighbours), or every tile of the
    /// mip tail of each layer it holds (one layer, or all of them for a single mip tail; every
    /// slab of a volume's tail mips).
    pub(super) fn load_tiles(&self, unit: StreamUnit) -> Vec<(u32, u32, u32)> {
        unit_tiles(&self.layout, &self.desc, self.depth, unit)
    }

    /// Stages the texels of a loaded unit: into the sparse image's tiles (after this frame's binds)
    /// or, bordered, into the atlas slot the page table gave the tile.
    pub(super) fn upload_unit(
        &self,
        uploader: &Uploader,
        unit: StreamUnit,
        physical: Option<PhysicalTile>,
        tiles: &[(u32, u32, u32)],
        data: &[Vec<u8>],
    ) -> Result<(), StreamError> {
        let short = |what: &str| StreamError::Internal(format!("{}: {what}", self.name));
        match &self.gpu {
            TextureGpu::Hardware { .. } => {
                for (write, texels) in self.tile_writes(tiles, data)?.iter().zip(data) {
                    write.write(uploader, texels)?;
                }
            }
            TextureGpu::Software { texture } => {
                if !matches!(unit, StreamUnit::Tile(_)) {
                    return Err(short("the software layout has no mip tail"));
                }
                // Bordered on the workers (`Bordered`): one slot's texels (or blocks).
                let side = texture.atlas_layout().slot_side();
                let bordered = data.first().ok_or_else(|| short("a loaded tile"))?;
                check_len(&self.name, bordered, side, side, 1, self.desc.format)?;
                let physical = physical.ok_or_else(|| short("a resident tile has a slot"))?;
                texture.write_tile(uploader, physical, bordered)?;
            }
        }
        Ok(())
    }

    /// Hardware path: where each loaded tile `tiles[i]` (texels `data[i]`, their length checked)
    /// goes in the sparse image, for [`TileWrite::write`] here or on the bind worker.
    pub(super) fn tile_writes(
        &self,
        tiles: &[(u32, u32, u32)],
        data: &[Vec<u8>],
    ) -> Result<Vec<TileWrite>, StreamError> {
        let short = |what: &str| StreamError::Internal(format!("{}: {what}", self.name));
        let (tw, th, format) = (self.desc.tile_width, self.desc.tile_height, self.desc.format);
        let TextureGpu::Hardware { image, .. } = &self.gpu else {
            return Err(short("tile writes are the hardware path's"));
        };
        let mut writes = Vec::with_capacity(tiles.len());
        for (&(m, x, y), texels) in tiles.iter().zip(data) {
            let (slab, mip) = (m / self.desc.mip_count, m % self.desc.mip_count);
            // `slab` is the layer of an array, the z of a volume.
            let (layer, z) = if self.depth.is_volume() { (0, slab) } else { (slab, 0) };
            let (w, h) = self.desc.tile_extent(mip, x, y).ok_or_else(|| short("tile extent"))?;
            let d = self.depth.slab_depth(mip, z).ok_or_else(|| short("tile depth"))?;
            let td = self.depth.tile_depth;
            check_len(&self.name, texels, w, h, d, format)?;
            writes.push(TileWrite {
                image: Arc::clone(image),
                mip,
                layer,
                offset: [x * tw, y * th, z * td],
                extent: [w, h, d],
            });
        }
        Ok(writes)
    }
}

/// One loaded tile's place in a texture's sparse image ([`Texture::tile_writes`]); holds the image.
pub(super) struct TileWrite {
    image: Arc<SparseImage>,
    mip: u32,
    layer: u32,
    offset: [u32; 3],
    extent: [u32; 3],
}

impl TileWrite {
    /// Stages `texels` (checked against the region by [`Texture::tile_writes`]) in `uploader`.
    pub(super) fn write(&self, uploader: &Uploader, texels: &[u8]) -> Result<(), StreamError> {
        let target =
            ImageRegion::new(&*self.image, self.mip, self.offset, self.extent).with_layer(self.layer);
        uploader.write_image(&target, texels)?;
        Ok(())
    }
}

/// Checks that `texels` are the bytes of a `w × h × d` region of `format` (whole texel blocks).
fn check_len(name: &str, texels: &[u8], w: u32, h: u32, d: u32, format: Format) -> Result<(), StreamError> {
    let expected = format.region_bytes(w, h, d) as usize;
    if texels.len() != expected {
        return Err(StreamError::UnsupportedSource {
            name: name.to_owned(),
            reason: format!(
                "a tile of {w} × {h} × {d} texels came with {} bytes, not {expected}",
                texels.len()
            ),
        });
    }
    Ok(())
}

/// [`Texture::load_tiles`] for a texture of `layout`, `desc` and `depth`.
fn unit_tiles(
    layout: &SparseImageLayout,
    desc: &VtDesc,
    depth: SourceDepth,
    unit: StreamUnit,
) -> Vec<(u32, u32, u32)> {
    let mips = desc.mip_count;
    match unit {
        StreamUnit::Tile(t) => {
            let Some(c) = layout.tile_coord(t) else { return Vec::new() };
            // An array has z = 0, a volume layer 0.
            vec![((c.layer + c.z) * mips + c.mip, c.x, c.y)]
        }
        StreamUnit::Tail(tail) => {
            let mut tiles = Vec::new();
            for layer in (0..layout.array_layers()).filter(|&l| layout.tail_of_layer(l) == Some(tail)) {
                for mip in layout.first_tail_lod()..layout.mip_levels() {
                    let (gx, gy) = desc.tile_grid(mip);
                    for z in 0..depth.slabs(mip) {
                        for y in 0..gy {
                            for x in 0..gx {
                                tiles.push(((layer + z) * mips + mip, x, y));
                            }
                        }
                    }
                }
            }
            tiles
        }
    }
}

/// The units the manager pins for `layout` (its rule: the mip tails, and every mip from
/// [`first_pinned_mip`] on): the coarse chain that priming makes resident.
fn pinned_units(id: ImageId, layout: &SparseImageLayout, pinned_mip_tiles: u32) -> Vec<TileKey> {
    let mut units: Vec<TileKey> = (0..layout.mip_tail_count()).map(|t| TileKey::tail(id, t)).collect();
    if let Some(first) = first_pinned_mip(layout, pinned_mip_tiles) {
        for layer in 0..layout.array_layers() {
            for mip in first..layout.mip_levels() {
                if let Some((t, n)) = layout.mip_tile_span(layer, mip) {
                    units.extend(
                        (t.0..t.0 + n).map(|i| TileKey::tile(id, residency_core::tiles::TileIndex(i))),
                    );
                }
            }
        }
    }
    units
}

/// What a shader binds for one texture.
#[derive(Clone, Copy, Debug)]
pub enum TextureViews<'a> {
    /// Hardware path: the sparse image (a `sampler2D` with residency codes, `residency.glsl`) and
    /// its min-LOD map (a `usampler2D`, nearest).
    Hardware {
        /// The partially resident image (all mips, `GENERAL` layout).
        image: &'a SparseImage,
        /// The min-LOD map.
        min_lod: &'a ImageView,
    },
    /// Software path: the tile-cache atlas (bilinear) and the indirection texture (nearest),
    /// `residency_software.glsl`.
    Software {
        /// The atlas.
        atlas: &'a ImageView,
        /// The indirection texture.
        indirection: &'a ImageView,
    },
}

/// An array texture's loads: "mip" `layer · mips + mip` of this source is `mip` of layer
/// `layer`'s source (the loader's jobs name tiles by `(mip, x, y)`).
struct Layers {
    name: String,
    sources: Vec<Arc<dyn TileSource>>,
    mips: u32,
}

impl TileSource for Layers {
    fn name(&self) -> &str {
        &self.name
    }

    fn desc(&self) -> VtDesc {
        self.sources[0].desc()
    }

    fn read_tile(&self, m: u32, x: u32, y: u32) -> Result<Vec<u8>, SourceError> {
        let source = self.sources.get((m / self.mips.max(1)) as usize).ok_or_else(|| SourceError::Read {
            source_name: self.name.clone(),
            reason: format!("no layer {}", m / self.mips.max(1)),
        })?;
        source.read_tile(m % self.mips.max(1), x, y)
    }
}

/// A volume's loads: "mip" `z · mips + mip` of this source is tile (x, y, z) of `mip` of the
/// volume's source ([`TileSource::read_tile_at`]; the loader's jobs name tiles by `(mip, x, y)`).
struct Slabs {
    inner: Arc<dyn TileSource>,
    mips: u32,
}

impl TileSource for Slabs {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn desc(&self) -> VtDesc {
        self.inner.desc()
    }

    fn depth(&self) -> SourceDepth {
        self.inner.depth()
    }

    fn read_tile(&self, m: u32, x: u32, y: u32) -> Result<Vec<u8>, SourceError> {
        let mips = self.mips.max(1);
        self.inner.read_tile_at(m % mips, x, y, m / mips)
    }
}

/// A software texture's loads: each tile read with its 3 × 3 neighbourhood from the texture's
/// source and assembled into one bordered atlas slot on the loader's worker thread, so the frame's
/// thread only stages it. Square tiles of 4-byte texels (`check_source` refuses others on the
/// software path), or block-compressed tiles of any standard shape assembled block by block into
/// the atlas's square slots ([`Bordered::read_blocks`]).
struct Bordered {
    inner: Arc<dyn TileSource>,
    desc: VtDesc,
    /// Each mip's extent (the border clamps at it).
    extents: Vec<[u32; 2]>,
    border: u32,
    /// The atlas's tile side (the software layout's tiles; the source's are `desc`'s).
    tile: u32,
}

impl Bordered {
    /// The slot of software tile `(cx, cy)` of `mip` of a block-compressed source, rows of blocks:
    /// the blocks of its window (the tile and `border` texels around, whole blocks, clamped to
    /// the mip's block grid) copied out of every source tile they lie in (a 128² slot of a 256²
    /// BC7 tile is a quarter of one tile plus border blocks of up to three more), then laid out
    /// by [`bordered_block_tile`] (the edge block repeated at the mip's edges).
    fn read_blocks(&self, mip: u32, cx: u32, cy: u32, extent: [u32; 2]) -> Result<Vec<u8>, SourceError> {
        let bad = |reason: String| SourceError::Read { source_name: self.inner.name().to_owned(), reason };
        let format = self.desc.format;
        let (bw, bh) = format.block_extent();
        let bytes = format.block_bytes() as usize;
        let (t, b) = (self.tile, self.border);
        let (stw, sth) = (self.desc.tile_width, self.desc.tile_height);
        if t % bw != 0 || t % bh != 0 || b % bw != 0 || b % bh != 0 || stw % bw != 0 || sth % bh != 0 {
            return Err(bad(format!(
                "{format:?}: tiles of {t}, {stw} × {sth} or a border of {b} are not whole blocks"
            )));
        }
        // The window in blocks of the mip, clamped to its block grid.
        let grid = [extent[0].max(1).div_ceil(bw), extent[1].max(1).div_ceil(bh)];
        let lo = |c: u32, side: u32, block: u32, n: u32| ((c * side).saturating_sub(b) / block).min(n - 1);
        let hi = |c: u32, side: u32, block: u32, n: u32| ((c + 1) * side + b).div_ceil(block).min(n);
        let (x0, x1) = (lo(cx, t, bw, grid[0]), hi(cx, t, bw, grid[0]));
        let (y0, y1) = (lo(cy, t, bh, grid[1]), hi(cy, t, bh, grid[1]));
        if x0 >= x1 || y0 >= y1 {
            return Err(bad(format!("software tile ({cx}, {cy}) lies outside mip {mip}")));
        }
        let ww = (x1 - x0) as usize;
        let mut window = vec![0u8; ww * (y1 - y0) as usize * bytes];
        // Source tiles (in blocks: `stw / bw` × `sth / bh` each) the window overlaps.
        let (sbw, sbh) = (stw / bw, sth / bh);
        for sy in y0 / sbh..=(y1 - 1) / sbh {
            for sx in x0 / sbw..=(x1 - 1) / sbw {
                let (w, h) =
                    self.desc.tile_extent(mip, sx, sy).ok_or_else(|| bad(format!("no tile {sx}, {sy}")))?;
                let blocks = self.inner.read_tile(mip, sx, sy)?;
                let (tbw, tbh) = (w.div_ceil(bw), h.div_ceil(bh));
                if blocks.len() != tbw as usize * tbh as usize * bytes {
                    return Err(bad(format!(
                        "tile ({sx}, {sy}) of mip {mip}: {w} × {h} texels came with {} bytes",
                        blocks.len()
                    )));
                }
                let (tx0, ty0) = (sx * sbw, sy * sbh);
                let (px0, px1) = (tx0.max(x0), (tx0 + tbw).min(x1));
                let (py0, py1) = (ty0.max(y0), (ty0 + tbh).min(y1));
                if px0 >= px1 || py0 >= py1 {
                    continue;
                }
                let len = (px1 - px0) as usize * bytes;
                for by in py0..py1 {
                    let src = ((by - ty0) as usize * tbw as usize + (px0 - tx0) as usize) * bytes;
                    let dst = ((by - y0) as usize * ww + (px0 - x0) as usize) * bytes;
                    window[dst..dst + len].copy_from_slice(&blocks[src..src + len]);
                }
            }
        }
        // `bordered_block_tile` clamps every block it asks for to the grid, so it lies in the window.
        bordered_block_tile(
            |bx, by, out| {
                let i = ((by - y0) as usize * ww + (bx - x0) as usize) * bytes;
                out.extend_from_slice(&window[i..i + bytes]);
            },
            format,
            extent,
            t,
            b,
            cx,
            cy,
        )
        .ok_or_else(|| {
            bad(format!("{format:?}: a slot of {t} texels and a border of {b} is not whole blocks"))
        })
    }
}

impl TileSource for Bordered {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn desc(&self) -> VtDesc {
        self.desc
    }

    fn read_tile(&self, mip: u32, cx: u32, cy: u32) -> Result<Vec<u8>, SourceError> {
        let bad = |reason: String| SourceError::Read { source_name: self.inner.name().to_owned(), reason };
        let tw = self.desc.tile_width;
        let (gx, gy) = self.desc.tile_grid(mip);
        let extent = *self.extents.get(mip as usize).ok_or_else(|| bad(format!("no mip {mip}")))?;
        if self.desc.format.is_compressed() {
            return self.read_blocks(mip, cx, cy, extent);
        }
        // The texels the bordered slot reads (its tile and `border` texels around, clamped to the
        // mip), copied row by row out of the neighbouring tiles into one window.
        let b = self.border;
        let (x0, x1) = ((cx * tw).saturating_sub(b), ((cx + 1) * tw + b).min(extent[0]));
        let (y0, y1) = ((cy * tw).saturating_sub(b), ((cy + 1) * tw + b).min(extent[1]));
        let ww = (x1 - x0) as usize;
        let mut window = vec![0u8; ww * (y1 - y0) as usize * 4];
        for y in cy.saturating_sub(1)..(cy + 2).min(gy) {
            for x in cx.saturating_sub(1)..(cx + 2).min(gx) {
                let (w, h) =
                    self.desc.tile_extent(mip, x, y).ok_or_else(|| bad(format!("no tile {x}, {y}")))?;
                let texels = self.inner.read_tile(mip, x, y)?;
                if texels.len() != (w * h * 4) as usize {
                    return Err(bad(format!(
                        "tile ({x}, {y}) of mip {mip}: {w} × {h} texels came with {} bytes",
                        texels.len()
                    )));
                }
                // The part of this tile inside the window.
                let (tx0, ty0) = (x * tw, y * tw);
                let (sx0, sx1) = (tx0.max(x0), (tx0 + w).min(x1));
                let (sy0, sy1) = (ty0.max(y0), (ty0 + h).min(y1));
                if sx0 >= sx1 || sy0 >= sy1 {
                    continue;
                }
                let len = (sx1 - sx0) as usize * 4;
                for ty in sy0..sy1 {
                    let src = (((ty - ty0) * w + (sx0 - tx0)) * 4) as usize;
                    let dst = ((ty - y0) as usize * ww + (sx0 - x0) as usize) * 4;
                    window[dst..dst + len].copy_from_slice(&texels[src..src + len]);
                }
            }
        }
        // `bordered_tile` clamps every texel it asks for to the mip, so it lies in the window.
        let texel = |tx: u32, ty: u32| {
            let i = ((ty - y0) as usize * ww + (tx - x0) as usize) * 4;
            [window[i], window[i + 1], window[i + 2], window[i + 3]]
        };
        Ok(bordered_tile(texel, extent, tw, self.border, cx, cy))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use residency_core::tiles::{LayoutLimits, SparseFormatInfo, TileCoord};

    /// A volume deeper than wide, in the standard 3D tile and mip tail: a tiled mip's tile loads
    /// with its z, and its tail's load reads every slab of every tail mip (here several per
    /// mip, which lavapipe, without a mip tail, never shows).
    #[test]
    fn a_volume_s_units_load_their_tiles_with_z_and_the_tail_every_slab() {
        let format = Format::R8G8B8A8Unorm;
        let mips = 9;
        let image = SparseImageDesc::new_3d(format, 64, 64, 256).with_mip_levels(mips);
        let info = SparseFormatInfo::standard(format, SparseDimension::D3).unwrap();
        let layout = SparseImageLayout::new(&image, &info, &LayoutLimits::unbounded()).unwrap();
        let mut desc = VtDesc::new(format, 64, 64, 32, 32);
        desc.mip_count = mips;
        let depth = SourceDepth::new(256, 16);
        let first_tail = layout.first_tail_lod();
        assert!(first_tail >= 1 && first_tail < mips, "a tail after tiled mips");
        let tile = layout.tile_index(TileCoord { layer: 0, mip: 0, x: 1, y: 0, z: 13 }).unwrap();
        assert_eq!(unit_tiles(&layout, &desc, depth, StreamUnit::Tile(tile)), vec![(13 * mips, 1, 0)]);
        let mut want = Vec::new();
        for mip in first_tail..mips {
            let (gx, gy) = desc.tile_grid(mip);
            for z in 0..depth.slabs(mip) {
                for y in 0..gy {
                    for x in 0..gx {
                        want.push((z * mips + mip, x, y));
                    }
                }
            }
        }
        assert!(want.iter().any(|&(m, ..)| m >= mips), "some tail mip has several slabs");
        assert_eq!(unit_tiles(&layout, &desc, depth, StreamUnit::Tail(0)), want);
    }
}
