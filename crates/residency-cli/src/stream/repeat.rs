//! `--size`: virtual textures larger than their files, for runs of terabytes of virtual texture
//! from a few `.rvt` files. A [`RepeatSource`] of size `r·W × r·H` (`r` a power of two) is its
//! `W × H` file repeated `r × r` times: its mip `k` is `r × r` copies of the file's mip `k` (a
//! box filter of a repeated image is the repeated filtered image), and below the file's last mip
//! the file's last mip (one texel: the mean) everywhere. Its tiles are the file's tiles where the
//! file's mip spans whole tiles (no copy: the same read), else the file's one tile repeated
//! across the tile in texel blocks — exact for every uncompressed mip and for block-compressed
//! mips of at least a block; a block-compressed mip smaller than a block (2 × 2, 1 × 1) repeats
//! its padded block, an approximation at distances where a plane covers a few pixels.

use residency::vulkan::streaming::{RvtSource, SourceError, TileSource, VtDesc};
use std::sync::Arc;

/// A file repeated `repeat × repeat` times (see the module docs).
pub struct RepeatSource {
    inner: Arc<RvtSource>,
    desc: VtDesc,
    name: String,
}

impl RepeatSource {
    /// `inner` at `width` texels wide (its height in proportion): `width` must be the file's
    /// width times a power of two, and the file without a stored border.
    pub fn new(inner: Arc<RvtSource>, width: u32) -> anyhow::Result<RepeatSource> {
        let d = inner.desc();
        if width < d.width || width % d.width != 0 || !(width / d.width).is_power_of_two() {
            anyhow::bail!(
                "--size {width}: must be {}'s width ({}) times a power of two",
                inner.name(),
                d.width
            );
        }
        if d.border != 0 {
            anyhow::bail!("--size: {} has a stored border; repeat needs tiles without one", inner.name());
        }
        let repeat = width / d.width;
        let height = d
            .height
            .checked_mul(repeat)
            .ok_or_else(|| anyhow::anyhow!("--size {width}: the height overflows"))?;
        let desc = VtDesc { width, height, mip_count: d.mip_count + repeat.trailing_zeros(), ..d };
        desc.validate().map_err(|e| anyhow::anyhow!("--size {width}: {e}"))?;
        let name = format!("{}×{repeat}", inner.name());
        Ok(RepeatSource { inner, desc, name })
    }
}

impl TileSource for RepeatSource {
    fn name(&self) -> &str {
        &self.name
    }

    fn desc(&self) -> VtDesc {
        self.desc
    }

    fn read_tile(&self, mip: u32, x: u32, y: u32) -> Result<Vec<u8>, SourceError> {
        let no_tile = || SourceError::NoSuchTile { source_name: self.name.clone(), mip, x, y };
        let (vw, vh) = self.desc.tile_extent(mip, x, y).ok_or_else(no_tile)?;
        let f = self.inner.desc();
        // Below the file's last mip: its last mip (one texel) repeated.
        let fm = mip.min(f.mip_count - 1);
        let (gx, gy) = f.tile_grid(fm);
        let (sx, sy) = (x % gx, y % gy);
        let (sw, sh) = f.tile_extent(fm, sx, sy).ok_or_else(no_tile)?;
        let data = self.inner.read_tile(fm, sx, sy)?;
        if (sw, sh) == (vw, vh) && mip < f.mip_count {
            return Ok(data);
        }
        // The file's tile is smaller than the virtual one (its mip is): repeat its texel blocks.
        let (bw, bh) = f.format.block_extent();
        let bytes = f.format.block_bytes() as usize;
        let (src_x, src_y) = (sw.div_ceil(bw) as usize, sh.div_ceil(bh) as usize);
        let (dst_x, dst_y) = (vw.div_ceil(bw) as usize, vh.div_ceil(bh) as usize);
        if data.len() < src_x * src_y * bytes {
            return Err(SourceError::Read {
                source_name: self.name.clone(),
                reason: format!(
                    "tile ({sx}, {sy}) of mip {fm}: {} bytes, expected {}",
                    data.len(),
                    src_x * src_y * bytes
                ),
            });
        }
        let mut out = Vec::with_capacity(dst_x * dst_y * bytes);
        for j in 0..dst_y {
            let row = (j % src_y) * src_x;
            for i in 0..dst_x {
                let at = (row + i % src_x) * bytes;
                out.extend_from_slice(&data[at..at + bytes]);
            }
        }
        Ok(out)
    }
}
