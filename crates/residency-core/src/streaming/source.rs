//! Where a virtual texture's tiles come from: a [`TileSource`] gives the texels of one tile of one
//! mip. [`RvtSource`] reads a `.rvt` file (`residency vt build`); a renderer implements the trait
//! for its own asset store or for procedural data ([`FnSource`] wraps a closure).
//!
//! Sources are shared by the [`TileLoader`](super::loader::TileLoader)'s worker threads, so they
//! are `Send + Sync`; a read is expected to block (file or network I/O, decompression) and runs
//! off the frame's thread.

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
    /// The stored tile is damaged or the file cannot be read.
    #[error("`{source_name}`: {reason}")]
    Read {
        /// The source.
        source_name: String,
        /// Why.
        reason: String,
    },
}

/// What a source holds: the texture's description, so that the streamer can lay it out.
pub trait TileSource: Send + Sync {
    /// A name for messages.
    fn name(&self) -> &str;

    /// The texture's format, size, mip count and tile size.
    fn desc(&self) -> VtDesc;

    /// The texels of tile (`x`, `y`) of `mip`: tightly packed rows of the format's texel blocks,
    /// the tile's own extent (smaller at the right and bottom edges), without a border.
    fn read_tile(&self, mip: u32, x: u32, y: u32) -> Result<Vec<u8>, SourceError>;
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
            let mut file = self.file.lock().unwrap_or_else(|e| e.into_inner());
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
