//! The subset of KTX 2.0 that `vt build` reads: 2D, one layer and face, no supercompression, level 0
//! in an 8-bit RGBA, RGB, RG or R format (UNORM or SRGB). Anything else is a clear error.

use anyhow::{bail, ensure, Context};

/// The KTX 2.0 file identifier.
pub const IDENTIFIER: [u8; 12] = [0xAB, b'K', b'T', b'X', b' ', b'2', b'0', 0xBB, b'\r', b'\n', 0x1A, b'\n'];

/// Level 0 of a KTX2 file: width, height, samples per texel (1–4) and tightly packed texels.
#[derive(Debug)]
pub struct Level0 {
    /// Width in texels.
    pub width: u32,
    /// Height in texels.
    pub height: u32,
    /// Samples per texel.
    pub samples: usize,
    /// Rows of texels.
    pub data: Vec<u8>,
}

/// Samples per texel of the 8-bit colour `VkFormat`s read here.
fn samples(vk_format: u32) -> Option<usize> {
    match vk_format {
        9 | 15 => Some(1),  // R8_UNORM, R8_SRGB
        16 | 22 => Some(2), // R8G8_UNORM, R8G8_SRGB
        23 | 29 => Some(3), // R8G8B8_UNORM, R8G8B8_SRGB
        37 | 43 => Some(4), // R8G8B8A8_UNORM, R8G8B8A8_SRGB
        _ => None,
    }
}

/// Parses `bytes` (a whole `.ktx2` file) and returns its level 0.
pub fn read_level0(bytes: &[u8], name: &str) -> anyhow::Result<Level0> {
    ensure!(bytes.len() >= 80 && bytes[..12] == IDENTIFIER, "{name}: not a KTX2 file");
    let u32_at = |o: usize| u32::from_le_bytes(bytes[o..o + 4].try_into().expect("4 bytes"));
    let u64_at = |o: usize| u64::from_le_bytes(bytes[o..o + 8].try_into().expect("8 bytes"));
    let (vk_format, width, height, depth) = (u32_at(12), u32_at(20), u32_at(24), u32_at(28));
    let (layers, faces, levels, scheme) = (u32_at(32), u32_at(36), u32_at(40), u32_at(44));
    let Some(samples) = samples(vk_format) else {
        bail!("{name}: KTX2 VkFormat {vk_format} is not supported (8-bit R, RG, RGB or RGBA only)");
    };
    ensure!(scheme == 0, "{name}: supercompressed KTX2 (scheme {scheme}) is not supported");
    ensure!(depth <= 1 && layers <= 1 && faces == 1, "{name}: only 2D KTX2 images with one layer and face");
    ensure!(width > 0 && height > 0, "{name}: KTX2 image of zero size");
    // levelCount 0 means "generate the mips": level 0 is still the one stored.
    let level_count = levels.max(1) as usize;
    ensure!(bytes.len() >= 80 + 24 * level_count, "{name}: KTX2 level index truncated");
    let (offset, length) = (u64_at(80), u64_at(88));
    let expected = u64::from(width) * u64::from(height) * samples as u64;
    ensure!(
        length == expected,
        "{name}: KTX2 level 0 holds {length} bytes, {width}×{height} needs {expected}"
    );
    let start = usize::try_from(offset).ok().filter(|&o| o <= bytes.len()).context("level 0 offset")?;
    let end = start.checked_add(length as usize).filter(|&e| e <= bytes.len());
    let end = end.with_context(|| format!("{name}: KTX2 level 0 runs past the end of the file"))?;
    Ok(Level0 { width, height, samples, data: bytes[start..end].to_vec() })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A minimal KTX2 file: header, one level, no DFD (readers of this subset do not need it).
    fn file(vk_format: u32, w: u32, h: u32, scheme: u32, data: &[u8]) -> Vec<u8> {
        let mut f = IDENTIFIER.to_vec();
        for v in [vk_format, 1, w, h, 0, 0, 1, 1, scheme] {
            f.extend_from_slice(&v.to_le_bytes());
        }
        f.extend_from_slice(&[0u8; 4 * 4 + 8 * 2]); // dfd, kvd, sgd offsets and lengths
        let offset = (f.len() + 24) as u64;
        for v in [offset, data.len() as u64, data.len() as u64] {
            f.extend_from_slice(&v.to_le_bytes());
        }
        f.extend_from_slice(data);
        f
    }

    #[test]
    fn reads_level_0_of_an_rgba8_file() {
        let texels: Vec<u8> = (0..4 * 3 * 2).map(|i| i as u8).collect();
        let level = read_level0(&file(43, 3, 2, 0, &texels), "t").unwrap();
        assert_eq!((level.width, level.height, level.samples), (3, 2, 4));
        assert_eq!(level.data, texels);
    }

    #[test]
    fn refuses_what_it_does_not_read_and_never_panics_on_truncation() {
        let texels = vec![7u8; 4 * 4 * 4];
        let good = file(37, 4, 4, 0, &texels);
        assert!(read_level0(&file(131, 4, 4, 0, &texels), "t")
            .unwrap_err()
            .to_string()
            .contains("VkFormat 131"));
        assert!(read_level0(&file(37, 4, 4, 2, &texels), "t")
            .unwrap_err()
            .to_string()
            .contains("supercompressed"));
        assert!(read_level0(&file(37, 4, 5, 0, &texels), "t").unwrap_err().to_string().contains("needs"));
        for cut in 0..good.len() {
            assert!(read_level0(&good[..cut], "t").is_err(), "truncated at {cut}");
        }
    }
}
