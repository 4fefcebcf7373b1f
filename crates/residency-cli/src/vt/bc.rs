//! `vt build --format`: the texel formats a `.rvt` is written in, and block compression of RGBA8
//! tiles to BC1, BC3 and BC7 with Intel's ISPC texture compressor (`intel_tex_2`).

use residency::core::tiles::standard_tile_shape;
use residency::vulkan::sparse::SparseDimension;
use residency::vulkan::Format;

/// The texel format `vt build` writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default, clap::ValueEnum)]
pub enum TileFormat {
    /// Uncompressed RGBA8 (4 bytes a texel).
    #[default]
    Rgba8,
    /// BC1: 8 bytes per 4 × 4 block (0.5 B a texel); RGB only, alpha is dropped.
    Bc1,
    /// BC3: 16 bytes per 4 × 4 block (1 B a texel); RGB as BC1 plus interpolated alpha.
    Bc3,
    /// BC7: 16 bytes per 4 × 4 block (1 B a texel); the best quality of the three.
    Bc7,
}

impl TileFormat {
    /// The format stored in the `.rvt` header. The texels are sRGB-encoded in every case, stored
    /// as UNORM (as the RGBA8 files always were), so every format samples alike.
    pub fn format(self) -> Format {
        match self {
            TileFormat::Rgba8 => Format::R8G8B8A8Unorm,
            TileFormat::Bc1 => Format::Bc1Unorm,
            TileFormat::Bc3 => Format::Bc3Unorm,
            TileFormat::Bc7 => Format::Bc7Unorm,
        }
    }

    /// The name `--format` takes.
    pub fn name(self) -> &'static str {
        match self {
            TileFormat::Rgba8 => "rgba8",
            TileFormat::Bc1 => "bc1",
            TileFormat::Bc3 => "bc3",
            TileFormat::Bc7 => "bc7",
        }
    }

    /// The format's standard 64 KiB sparse tile in texels (the Vulkan specification's standard
    /// sparse image block shape): RGBA8 128 × 128, BC7 and BC3 256 × 256, BC1 512 × 256.
    pub fn standard_tile(self) -> (u32, u32) {
        let shape = standard_tile_shape(self.format(), SparseDimension::D2)
            .expect("colour formats have a standard 2D shape");
        (shape.width, shape.height)
    }
}

/// `width × height` RGBA8 texels (`rgba`, tightly packed rows) as the tile payload of `format`:
/// the texels themselves for RGBA8, rows of 4 × 4 blocks otherwise. A side that is not a multiple
/// of 4 (a mip's edge, the 2 × 2 and 1 × 1 mips) is padded by repeating its last texel, so the
/// padding texels (which no sampler reads) do not pull the edge blocks' endpoints away.
pub fn encode(format: TileFormat, width: u32, height: u32, rgba: &[u8]) -> Vec<u8> {
    assert_eq!(rgba.len(), width as usize * height as usize * 4, "RGBA8 texels of the region");
    if format == TileFormat::Rgba8 {
        return rgba.to_vec();
    }
    let (pw, ph) = (width.div_ceil(4) * 4, height.div_ceil(4) * 4);
    let padded;
    let data = if (pw, ph) == (width, height) {
        rgba
    } else {
        let mut p = vec![0u8; pw as usize * ph as usize * 4];
        for y in 0..ph {
            let sy = y.min(height - 1) as usize;
            for x in 0..pw {
                let sx = x.min(width - 1) as usize;
                let (d, s) = ((y * pw + x) as usize * 4, (sy * width as usize + sx) * 4);
                p[d..d + 4].copy_from_slice(&rgba[s..s + 4]);
            }
        }
        padded = p;
        &padded
    };
    let surface = intel_tex_2::RgbaSurface { data, width: pw, height: ph, stride: pw * 4 };
    let blocks = match format {
        TileFormat::Rgba8 => unreachable!("returned above"),
        TileFormat::Bc1 => intel_tex_2::bc1::compress_blocks(&surface),
        TileFormat::Bc3 => intel_tex_2::bc3::compress_blocks(&surface),
        TileFormat::Bc7 => {
            let opaque = data.chunks_exact(4).all(|t| t[3] == 255);
            let settings = if opaque {
                intel_tex_2::bc7::opaque_very_fast_settings()
            } else {
                intel_tex_2::bc7::alpha_very_fast_settings()
            };
            intel_tex_2::bc7::compress_blocks(&settings, &surface)
        }
    };
    debug_assert_eq!(blocks.len() as u64, format.format().region_bytes(width, height, 1));
    blocks
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::vt::synthetic;

    /// Decodes `blocks` of `format` back to `width × height` RGBA8 (the padding dropped).
    fn decode(format: TileFormat, width: u32, height: u32, blocks: &[u8]) -> Vec<u8> {
        let (bx, by) = (width.div_ceil(4) as usize, height.div_ceil(4) as usize);
        let block_bytes = format.format().block_bytes() as usize;
        assert_eq!(blocks.len(), bx * by * block_bytes);
        let mut out = vec![0u8; width as usize * height as usize * 4];
        let mut texels = [0u8; 64];
        for (i, block) in blocks.chunks_exact(block_bytes).enumerate() {
            match format {
                TileFormat::Bc1 => bcdec_rs::bc1(block, &mut texels, 16),
                TileFormat::Bc3 => bcdec_rs::bc3(block, &mut texels, 16),
                TileFormat::Bc7 => bcdec_rs::bc7(block, &mut texels, 16),
                TileFormat::Rgba8 => unreachable!(),
            }
            let (x0, y0) = ((i % bx) * 4, (i / bx) * 4);
            for y in 0..4 {
                for x in 0..4 {
                    let (tx, ty) = (x0 + x, y0 + y);
                    if tx < width as usize && ty < height as usize {
                        let d = (ty * width as usize + tx) * 4;
                        out[d..d + 4].copy_from_slice(&texels[(y * 4 + x) * 4..(y * 4 + x) * 4 + 4]);
                    }
                }
            }
        }
        out
    }

    /// PSNR in dB over RGB (and alpha when `alpha`) of two RGBA8 images.
    fn psnr(a: &[u8], b: &[u8], alpha: bool) -> f64 {
        let channels = if alpha { 4 } else { 3 };
        let (mut sum, mut n) = (0.0f64, 0u64);
        for (p, q) in a.chunks_exact(4).zip(b.chunks_exact(4)) {
            for c in 0..channels {
                sum += (f64::from(p[c]) - f64::from(q[c])).powi(2);
                n += 1;
            }
        }
        let mse = sum / n as f64;
        if mse == 0.0 {
            return 99.0;
        }
        10.0 * (255.0f64 * 255.0 / mse).log10()
    }

    #[test]
    fn standard_tiles_are_64_kib_of_each_format() {
        assert_eq!(TileFormat::Rgba8.standard_tile(), (128, 128));
        assert_eq!(TileFormat::Bc1.standard_tile(), (512, 256));
        assert_eq!(TileFormat::Bc3.standard_tile(), (256, 256));
        assert_eq!(TileFormat::Bc7.standard_tile(), (256, 256));
        for f in [TileFormat::Rgba8, TileFormat::Bc1, TileFormat::Bc3, TileFormat::Bc7] {
            let (w, h) = f.standard_tile();
            assert_eq!(f.format().region_bytes(w, h, 1), 64 << 10, "{f:?}");
        }
    }

    #[test]
    fn bc_tiles_decode_close_to_their_texels_at_every_size() {
        let image = synthetic(5, 64);
        // Floors under what the encoders give on this noisy texture (BC1/BC3 27–46 dB, BC7 35–99)
        // and far above a broken encoding (swapped blocks or channels score under 15 dB).
        for (format, floor) in [(TileFormat::Bc1, 24.0), (TileFormat::Bc3, 24.0), (TileFormat::Bc7, 32.0)] {
            for (w, h) in [(64, 64), (64, 20), (6, 10), (2, 2), (1, 1)] {
                let mut texels = Vec::new();
                for y in 0..h {
                    let row = (y * 64 * 4) as usize;
                    texels.extend_from_slice(&image.pixels[row..row + w as usize * 4]);
                }
                let blocks = encode(format, w, h, &texels);
                assert_eq!(blocks.len() as u64, format.format().region_bytes(w, h, 1));
                let back = decode(format, w, h, &blocks);
                let db = psnr(&texels, &back, false);
                assert!(db >= floor, "{format:?} {w}×{h}: {db:.1} dB");
            }
        }
    }

    #[test]
    fn bc3_and_bc7_keep_alpha_bc1_drops_it() {
        let mut texels = synthetic(9, 16).pixels;
        // A ramp across the tile: 0 to 255 in x, plus a little in y.
        for (i, t) in texels.chunks_exact_mut(4).enumerate() {
            t[3] = ((i % 16) * 15 + i / 16) as u8;
        }
        for format in [TileFormat::Bc3, TileFormat::Bc7] {
            let back = decode(format, 16, 16, &encode(format, 16, 16, &texels));
            let errors: Vec<u8> =
                texels.chunks_exact(4).zip(back.chunks_exact(4)).map(|(a, b)| a[3].abs_diff(b[3])).collect();
            let (max, mean) = (
                *errors.iter().max().unwrap(),
                errors.iter().map(|&e| f64::from(e)).sum::<f64>() / errors.len() as f64,
            );
            // Measured: BC3 at most 4 off, BC7 (very fast, colour and alpha sharing endpoints on
            // a noisy tile) at most 28; an encoder that dropped alpha is 127 off on average.
            assert!(max <= 40 && mean <= 8.0, "{format:?}: alpha off by {max} at most, {mean:.1} on average");
        }
        let back = decode(TileFormat::Bc1, 16, 16, &encode(TileFormat::Bc1, 16, 16, &texels));
        assert!(back.chunks_exact(4).all(|t| t[3] == 255), "BC1 is opaque");
    }

    #[test]
    fn rgba8_is_stored_as_it_is() {
        let texels = synthetic(1, 8).pixels;
        assert_eq!(encode(TileFormat::Rgba8, 8, 8, &texels), texels);
    }
}
