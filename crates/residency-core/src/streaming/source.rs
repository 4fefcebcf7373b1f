//! Where a virtual texture's tiles come from: a [`TileSource`] gives the texels of one tile of one
//! mip. [`RvtSource`] reads a `.rvt` file (`residency vt build`); a renderer implements the trait
//! for its own asset store or for procedural data ([`FnSource`] wraps a closure,
//! [`FnVolumeSource`] one of a volume's tiles).
//!
//! A volume (a 3D texture) is a source whose [`TileSource::depth`] is more than one texel: its
//! tiles are read with their z by [`TileSource::read_tile_at`]. Both have defaults (depth 1, and
//! `read_tile` for z = 0), so a 2D source implements only `read_tile`.
//!
//! Sources are shared by the [`TileLoader`](super::loader::TileLoader)'s worker threads, so they
//! are `Send + Sync`; a read is expected to block (file or network I/O, decompression) and runs
//! off the frame's thread.

use crate::poison::PoisonFree;
use crate::vt_file::{VtDesc, VtError, VtIndex};
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// Reading a tile failed. The tile stays non-resident; its texture keeps its coarser data.
#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    /// The tile is not in the texture (no such mip, or outside its tile grid).
    #[error("tile ({x}, {y}) of mip {mip} is not in `{source_name}`")]
    NoSuchTile {
        /// The source.
        source_name: String,
        /// The mip asked for.
        mip: u32,
        /// Tile column.
        x: u32,
        /// Tile row.
        y: u32,
    },
    /// The tile is not in the volume (no such mip, or outside its tile grid in x, y or z).
    #[error("tile ({x}, {y}, {z}) of mip {mip} is not in `{source_name}`")]
    NoSuchVolumeTile {
        /// The source.
        source_name: String,
        /// The mip asked for.
        mip: u32,
        /// Tile column.
        x: u32,
        /// Tile row.
        y: u32,
        /// Tile slab (depth).
        z: u32,
    },
    /// The stored tile is damaged or the file cannot be read.
    #[error("`{source_name}`: {reason}")]
    Read {
        /// The source.
        source_name: String,
        /// Why.
        reason: String,
    },
    /// The source panicked while reading the tile (caught on the loader's worker, which goes on
    /// with its next load; [`TileLoader`](super::loader::TileLoader)).
    #[error("`{source_name}` panicked reading tile ({x}, {y}) of mip {mip}: {message}")]
    Panicked {
        /// The source.
        source_name: String,
        /// The mip asked for (as the loader's job names it).
        mip: u32,
        /// Tile column.
        x: u32,
        /// Tile row.
        y: u32,
        /// The panic's message.
        message: String,
    },
}

/// A source's third dimension ([`TileSource::depth`]): the depth of mip 0 and of a tile, in
/// texels. [`SourceDepth::FLAT`] (1 and 1) is a 2D texture; anything deeper is a volume, whose mip
/// `m` is `max(1, depth >> m)` texels deep, cut into slabs of `tile_depth`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SourceDepth {
    /// Depth of mip 0 in texels.
    pub depth: u32,
    /// Depth of a tile in texels.
    pub tile_depth: u32,
}

impl SourceDepth {
    /// A 2D texture: one texel deep, tiles one texel deep.
    pub const FLAT: SourceDepth = SourceDepth { depth: 1, tile_depth: 1 };

    /// A volume of `depth` texels in tiles `tile_depth` deep.
    pub const fn new(depth: u32, tile_depth: u32) -> Self {
        SourceDepth { depth, tile_depth }
    }

    /// Whether this is a volume (more than one texel deep).
    pub const fn is_volume(&self) -> bool {
        self.depth > 1
    }

    /// Depth of mip `mip` in texels (at least 1).
    pub fn mip_depth(&self, mip: u32) -> u32 {
        self.depth.checked_shr(mip).unwrap_or(0).max(1)
    }

    /// Tiles of mip `mip` in z (1 for a 2D texture).
    pub fn slabs(&self, mip: u32) -> u32 {
        self.mip_depth(mip).div_ceil(self.tile_depth.max(1))
    }

    /// Depth in texels of slab `z` of mip `mip` (clipped at the mip's back), `None` past it.
    pub fn slab_depth(&self, mip: u32, z: u32) -> Option<u32> {
        let (d, td) = (self.mip_depth(mip), self.tile_depth.max(1));
        (z < self.slabs(mip)).then(|| (d - z * td).min(td))
    }
}

/// What a source holds: the texture's description, so that the streamer can lay it out.
pub trait TileSource: Send + Sync {
    /// A name for messages.
    fn name(&self) -> &str;

    /// The texture's format, size (width and height), mip count and tile size (width and height).
    fn desc(&self) -> VtDesc;

    /// The texels of tile (`x`, `y`) of `mip`: tightly packed rows of the format's texel blocks,
    /// the tile's own extent (smaller at the right and bottom edges), without a border. For a
    /// volume: its slab z = 0 ([`read_tile_at`](Self::read_tile_at)).
    fn read_tile(&self, mip: u32, x: u32, y: u32) -> Result<Vec<u8>, SourceError>;

    /// The depth of the texture and of its tiles. The default is [`SourceDepth::FLAT`]: a 2D
    /// texture. A volume's `desc().mip_count` may reach `log2(max(width, height, depth)) + 1`.
    fn depth(&self) -> SourceDepth {
        SourceDepth::FLAT
    }

    /// The texels of tile (`x`, `y`, `z`) of `mip`: its slices front to back, each as
    /// [`read_tile`](Self::read_tile) gives a 2D tile (the tile's own extent, clipped at the mip's
    /// edges in x, y and z: [`SourceDepth::slab_depth`]). The default is `read_tile` for z = 0 and
    /// [`SourceError::NoSuchVolumeTile`] for any other z: what a 2D source holds.
    fn read_tile_at(&self, mip: u32, x: u32, y: u32, z: u32) -> Result<Vec<u8>, SourceError> {
        if z == 0 {
            return self.read_tile(mip, x, y);
        }
        Err(SourceError::NoSuchVolumeTile { source_name: self.name().to_owned(), mip, x, y, z })
    }
}

/// A `.rvt` file: the index is read once; each tile is one positioned read and a decode (LZ4).
/// Reads from several threads share the file handle, one at a time (the decode runs outside the
/// lock).
#[derive(Debug)]
pub struct RvtSource {
    name: String,
    path: PathBuf,
    index: VtIndex,
    file: Mutex<std::fs::File>,
}

impl RvtSource {
    /// Opens `path` and reads its index.
    pub fn open(path: impl AsRef<Path>) -> Result<RvtSource, SourceError> {
        let path = path.as_ref().to_path_buf();
        let name = path.display().to_string();
        let read_error = |reason: String| SourceError::Read { source_name: name.clone(), reason };
        let mut file = std::fs::File::open(&path).map_err(|e| read_error(e.to_string()))?;
        let index = VtIndex::read(&mut file).map_err(|e| read_error(e.to_string()))?;
        Ok(RvtSource { name, path, index, file: Mutex::new(file) })
    }

    /// The file's index (tile records).
    pub fn index(&self) -> &VtIndex {
        &self.index
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl TileSource for RvtSource {
    fn name(&self) -> &str {
        &self.name
    }

    fn desc(&self) -> VtDesc {
        *self.index.desc()
    }

    fn read_tile(&self, mip: u32, x: u32, y: u32) -> Result<Vec<u8>, SourceError> {
        let record = self.index.record(mip, x, y).map_err(|e| match e {
            VtError::NoSuchTile { .. } => {
                SourceError::NoSuchTile { source_name: self.name.clone(), mip, x, y }
            }
            other => SourceError::Read { source_name: self.name.clone(), reason: other.to_string() },
        })?;
        let read_error = |reason: String| SourceError::Read { source_name: self.name.clone(), reason };
        let mut stored = vec![0; record.stored_size as usize];
        {
            let mut file = self.file.locked();
            file.seek(SeekFrom::Start(record.offset)).map_err(|e| read_error(e.to_string()))?;
            file.read_exact(&mut stored).map_err(|e| read_error(e.to_string()))?;
        }
        self.index.decode_tile(mip, x, y, &stored).map_err(|e| read_error(e.to_string()))
    }
}

/// A source made of a closure (procedural data, a renderer's own asset store, tests).
pub struct FnSource<F> {
    name: String,
    desc: VtDesc,
    read: F,
}

impl<F> std::fmt::Debug for FnSource<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FnSource").field("name", &self.name).field("desc", &self.desc).finish_non_exhaustive()
    }
}

impl<F> FnSource<F>
where
    F: Fn(u32, u32, u32) -> Result<Vec<u8>, SourceError> + Send + Sync,
{
    /// A source named `name` of `desc` whose tiles `read(mip, x, y)` makes.
    pub fn new(name: impl Into<String>, desc: VtDesc, read: F) -> Self {
        FnSource { name: name.into(), desc, read }
    }
}

impl<F> TileSource for FnSource<F>
where
    F: Fn(u32, u32, u32) -> Result<Vec<u8>, SourceError> + Send + Sync,
{
    fn name(&self) -> &str {
        &self.name
    }

    fn desc(&self) -> VtDesc {
        self.desc
    }

    fn read_tile(&self, mip: u32, x: u32, y: u32) -> Result<Vec<u8>, SourceError> {
        if mip >= self.desc.mip_count {
            return Err(SourceError::NoSuchTile { source_name: self.name.clone(), mip, x, y });
        }
        let (gx, gy) = self.desc.tile_grid(mip);
        if x >= gx || y >= gy {
            return Err(SourceError::NoSuchTile { source_name: self.name.clone(), mip, x, y });
        }
        (self.read)(mip, x, y)
    }
}

/// A volume made of a closure: `read(mip, x, y, z)` gives tile (x, y, z) of `mip`, its slices
/// front to back ([`TileSource::read_tile_at`]). Tiles outside the grid are refused before the
/// closure runs.
pub struct FnVolumeSource<F> {
    name: String,
    desc: VtDesc,
    depth: SourceDepth,
    read: F,
}

impl<F> std::fmt::Debug for FnVolumeSource<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FnVolumeSource")
            .field("name", &self.name)
            .field("desc", &self.desc)
            .field("depth", &self.depth)
            .finish_non_exhaustive()
    }
}

impl<F> FnVolumeSource<F>
where
    F: Fn(u32, u32, u32, u32) -> Result<Vec<u8>, SourceError> + Send + Sync,
{
    /// A volume named `name`: `desc` for its format, width, height, mips and tile width and
    /// height, `depth` for its depth and tile depth; `read(mip, x, y, z)` makes its tiles.
    pub fn new(name: impl Into<String>, desc: VtDesc, depth: SourceDepth, read: F) -> Self {
        FnVolumeSource { name: name.into(), desc, depth, read }
    }
}

impl<F> TileSource for FnVolumeSource<F>
where
    F: Fn(u32, u32, u32, u32) -> Result<Vec<u8>, SourceError> + Send + Sync,
{
    fn name(&self) -> &str {
        &self.name
    }

    fn desc(&self) -> VtDesc {
        self.desc
    }

    fn depth(&self) -> SourceDepth {
        self.depth
    }

    fn read_tile(&self, mip: u32, x: u32, y: u32) -> Result<Vec<u8>, SourceError> {
        self.read_tile_at(mip, x, y, 0)
    }

    fn read_tile_at(&self, mip: u32, x: u32, y: u32, z: u32) -> Result<Vec<u8>, SourceError> {
        let (gx, gy) = self.desc.tile_grid(mip);
        if mip >= self.desc.mip_count || x >= gx || y >= gy || z >= self.depth.slabs(mip) {
            return Err(SourceError::NoSuchVolumeTile { source_name: self.name.clone(), mip, x, y, z });
        }
        (self.read)(mip, x, y, z)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::Format;

    #[test]
    fn a_volume_source_reads_slabs_and_a_2d_source_only_z_0() {
        let desc = VtDesc::new(Format::R8G8B8A8Unorm, 64, 64, 32, 32);
        let depth = SourceDepth::new(40, 16);
        assert_eq!((depth.slabs(0), depth.slab_depth(0, 2), depth.slab_depth(0, 3)), (3, Some(8), None));
        assert_eq!((depth.mip_depth(1), depth.slabs(1), depth.mip_depth(9)), (20, 2, 1));
        assert!(!SourceDepth::FLAT.is_volume() && depth.is_volume());
        let volume = FnVolumeSource::new("v", desc, depth, |mip, x, y, z| {
            Ok(vec![mip as u8, x as u8, y as u8, z as u8])
        });
        assert_eq!(volume.read_tile_at(0, 1, 0, 2).unwrap(), [0, 1, 0, 2]);
        assert_eq!(volume.read_tile(1, 0, 0).unwrap(), [1, 0, 0, 0], "read_tile is slab 0");
        assert!(matches!(volume.read_tile_at(0, 0, 0, 3), Err(SourceError::NoSuchVolumeTile { z: 3, .. })));
        assert!(matches!(volume.read_tile_at(0, 2, 0, 0), Err(SourceError::NoSuchVolumeTile { x: 2, .. })));
        let flat = FnSource::new("f", desc, |mip, x, y| Ok(vec![mip as u8, x as u8, y as u8]));
        assert_eq!(flat.depth(), SourceDepth::FLAT);
        assert_eq!(flat.read_tile_at(0, 1, 1, 0).unwrap(), [0, 1, 1]);
        assert!(matches!(flat.read_tile_at(0, 1, 1, 1), Err(SourceError::NoSuchVolumeTile { z: 1, .. })));
    }
}
