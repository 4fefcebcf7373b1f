//! `vt build --synthetic SEED`: a procedural texture for machines without image data.

use super::Rgba;

/// Side of the coarsest grid lines' spacing, their width and how much they darken, finest last.
const GRID: [(u32, u32, f32); 3] = [(1024, 4, 0.5), (256, 2, 0.65), (64, 1, 0.8)];
/// Regions per side of the texture.
const REGIONS: u32 = 8;
/// The layer of the hash that the region edges' second warp uses (brightness octaves use 0..=31).
const WARP_LAYER: u64 = 64;
/// Width in texels of the dark border between regions.
const BORDER: f32 = 3.0;

/// A `size × size` RGBA8 texture (sRGB-encoded, opaque) made from `seed` alone, with detail at every
/// scale, so each mip holds something its next coarser mip does not:
///
/// - **value noise** in one octave per power of two from 2 texels to the whole side, equally
///   weighted, plus per-texel grain: the brightness;
/// - **regions**: an 8 × 8 grid of jittered cells (nearest-point, edges warped by the noise), each of
///   its own hue and saturation, with a dark border between neighbours;
/// - **grid lines** every 64, 256 and 1024 texels (1, 2, 4 texels wide).
///
/// The same seed and size give the same texels on every machine (integer hashing, no platform
/// functions). Rows are made on all cores.
pub fn synthetic(seed: u64, size: u32) -> Rgba {
    let generator = Generator::new(seed, size);
    let mut pixels = vec![0u8; size as usize * size as usize * 4];
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get()).clamp(1, 64) as u32;
    let rows = size.div_ceil(threads).max(1);
    std::thread::scope(|scope| {
        for (i, chunk) in pixels.chunks_mut(rows as usize * size as usize * 4).enumerate() {
            let generator = &generator;
            scope.spawn(move || generator.rows(i as u32 * rows, chunk));
        }
    });
    Rgba { width: size, height: size, pixels }
}

/// One region's centre (texels) and colour.
#[derive(Clone, Copy)]
struct Region {
    x: f32,
    y: f32,
    hue: f32,
    saturation: f32,
}

struct Generator {
    seed: u64,
    size: u32,
    /// Octaves 1..=log2(size): cell side `1 << j`.
    octaves: u32,
    /// Per octave `j`, the smoothstep weight of each offset inside its cell (index `j`, `1 << j`
    /// entries).
    smooth: Vec<Vec<f32>>,
    /// Side of a region cell in texels.
    region_side: f32,
    /// `(REGIONS + 2)²` regions, with a ring of neighbours outside the texture.
    regions: Vec<Region>,
}

impl Generator {
    fn new(seed: u64, size: u32) -> Self {
        let seed = mix(seed ^ 0x7265_7369_6465_6e63);
        let octaves = size.max(2).ilog2();
        let smooth = (0..=octaves)
            .map(|j| {
                let cell = 1u32 << j;
                (0..cell)
                    .map(|o| {
                        let t = (o as f32 + 0.5) / cell as f32;
                        t * t * (3.0 - 2.0 * t)
                    })
                    .collect()
            })
            .collect();
        let region_side = size as f32 / REGIONS as f32;
        let side = REGIONS as i64 + 2;
        let regions = (0..side * side)
            .map(|i| {
                let (rx, ry) = (i % side - 1, i / side - 1);
                let h = |salt: u64| unit(hash(seed, salt, rx as u64, ry as u64));
                Region {
                    x: (rx as f32 + 0.15 + 0.7 * h(1)) * region_side,
                    y: (ry as f32 + 0.15 + 0.7 * h(2)) * region_side,
                    hue: h(3),
                    saturation: 0.3 + 0.5 * h(4),
                }
            })
            .collect();
        Self { seed, size, octaves, smooth, region_side, regions }
    }

    /// Rows `y0..` into `out` (whole rows of RGBA8).
    fn rows(&self, y0: u32, out: &mut [u8]) {
        let size = self.size as usize;
        let mut noise = vec![0.0f32; size];
        let mut warp = vec![0.0f32; size];
        let mut columns = vec![0.0f32; size / 2 + 2];
        // The region edges' second warp: smooth, cells of an eighth to a half of a region.
        let region = (self.region_side as u32).max(2).ilog2();
        let warp_octaves = region.saturating_sub(3).max(1)..=region.saturating_sub(1).max(1);
        for (row, texels) in out.chunks_exact_mut(size * 4).enumerate() {
            let y = y0 + row as u32;
            self.noise_row(y, &mut noise, &mut columns);
            warp.fill(0.0);
            for j in warp_octaves.clone() {
                self.add_octave(WARP_LAYER, j, y, &mut warp, &mut columns);
            }
            let warp_total = warp_octaves.clone().count() as f32;
            for (x, texel) in texels.chunks_exact_mut(4).enumerate() {
                let rgb = self.colour(x as u32, y, noise[x], warp[x] / warp_total);
                texel[..3].copy_from_slice(&rgb);
                texel[3] = 255;
            }
        }
    }

    /// Brightness in 0..=1 along row `y`: the octaves of value noise plus grain, contrast-stretched.
    fn noise_row(&self, y: u32, noise: &mut [f32], columns: &mut Vec<f32>) {
        for (x, n) in noise.iter_mut().enumerate() {
            *n = 0.5 * unit(hash(self.seed, 0, x as u64, u64::from(y)));
        }
        for j in 1..=self.octaves {
            self.add_octave(0, j, y, noise, columns);
        }
        // Each octave is 0..1 with mean 0.5; the sum of many spreads little, so stretch it.
        let total = self.octaves as f32 + 0.5;
        for n in noise.iter_mut() {
            *n = (0.5 + (*n / total - 0.5) * 3.5).clamp(0.0, 1.0);
        }
    }

    /// Adds octave `j` (cells of `1 << j` texels) of layer `layer`'s value noise (0..1) along row
    /// `y` to `out`; `columns` is scratch space.
    fn add_octave(&self, layer: u64, j: u32, y: u32, out: &mut [f32], columns: &mut Vec<f32>) {
        let mask = (1u32 << j) - 1;
        let cy = u64::from(y >> j);
        let smooth = &self.smooth[j as usize];
        let sy = smooth[(y & mask) as usize];
        let salt = layer + u64::from(j);
        // The lattice interpolated down to this row, one value per column of cells.
        columns.clear();
        columns.extend((0..(self.size >> j) as u64 + 2).map(|cx| {
            let top = unit(hash(self.seed, salt, cx, cy));
            let bottom = unit(hash(self.seed, salt, cx, cy + 1));
            top + (bottom - top) * sy
        }));
        for (x, n) in out.iter_mut().enumerate() {
            let x = x as u32;
            let cx = (x >> j) as usize;
            let (a, b) = (columns[cx], columns[cx + 1]);
            *n += a + (b - a) * smooth[(x & mask) as usize];
        }
    }

    /// The sRGB colour at `(x, y)` of brightness `v`, region edges displaced by `v` across and by
    /// `warp` (0..1) down.
    fn colour(&self, x: u32, y: u32, v: f32, warp: f32) -> [u8; 3] {
        let reach = 0.6 * self.region_side;
        let (px, py) = (x as f32 + 0.5 + (v - 0.5) * reach, y as f32 + 0.5 + (warp - 0.5) * reach);
        let side = REGIONS as i64 + 2;
        let rx = ((px / self.region_side).floor() as i64).clamp(0, REGIONS as i64 - 1) + 1;
        let ry = ((py / self.region_side).floor() as i64).clamp(0, REGIONS as i64 - 1) + 1;
        let (mut d1, mut d2, mut nearest) = (f32::MAX, f32::MAX, self.regions[0]);
        for ny in ry - 1..=ry + 1 {
            for nx in rx - 1..=rx + 1 {
                let r = self.regions[(ny * side + nx) as usize];
                let d = ((r.x - px).powi(2) + (r.y - py).powi(2)).sqrt();
                if d < d1 {
                    (d2, d1, nearest) = (d1, d, r);
                } else if d < d2 {
                    d2 = d;
                }
            }
        }
        let mut value = 0.15 + 0.8 * v;
        // Nearest-point borders are where the two nearest centres are equally far.
        let border = (d2 - d1) / 2.0;
        if border < BORDER {
            value *= 0.45 + 0.55 * border / BORDER;
        }
        for (spacing, width, dim) in GRID {
            if x % spacing < width || y % spacing < width {
                value *= dim;
            }
        }
        let hue = nearest.hue + 0.1 * (v - 0.5);
        hsv_to_srgb8(hue, nearest.saturation, value)
    }
}

/// HSV (hue in turns, wrapping) to 8-bit RGB.
fn hsv_to_srgb8(hue: f32, saturation: f32, value: f32) -> [u8; 3] {
    let h = (hue - hue.floor()) * 6.0;
    let sector = (h.floor() as u32).min(5);
    let f = h - sector as f32;
    let (p, q, t) =
        (value * (1.0 - saturation), value * (1.0 - saturation * f), value * (1.0 - saturation * (1.0 - f)));
    let (r, g, b) = match sector {
        0 => (value, t, p),
        1 => (q, value, p),
        2 => (p, value, t),
        3 => (p, q, value),
        4 => (t, p, value),
        _ => (value, p, q),
    };
    [r, g, b].map(|c| (c.clamp(0.0, 1.0) * 255.0).round() as u8)
}

/// SplitMix64's finaliser.
fn mix(mut h: u64) -> u64 {
    h ^= h >> 30;
    h = h.wrapping_mul(0xBF58_476D_1CE4_E5B9);
    h ^= h >> 27;
    h = h.wrapping_mul(0x94D0_49BB_1331_11EB);
    h ^ (h >> 31)
}

/// A hash of a lattice point `(x, y)` of layer `layer` under `seed`.
fn hash(seed: u64, layer: u64, x: u64, y: u64) -> u64 {
    mix(seed
        ^ layer.wrapping_mul(0x1656_67B1_9E37_79F9)
        ^ mix(x.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ y.wrapping_mul(0xC2B2_AE3D_27D4_EB4F)))
}

/// The top 24 bits of `h` as a number in 0..1.
fn unit(h: u64) -> f32 {
    (h >> 40) as f32 / (1u32 << 24) as f32
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Mean and standard deviation of the Rec. 709 luma of `image`, in 8-bit steps.
    fn luma_stats(image: &Rgba) -> (f64, f64) {
        let luma: Vec<f64> = image
            .pixels
            .chunks_exact(4)
            .map(|p| 0.2126 * f64::from(p[0]) + 0.7152 * f64::from(p[1]) + 0.0722 * f64::from(p[2]))
            .collect();
        let mean = luma.iter().sum::<f64>() / luma.len() as f64;
        let var = luma.iter().map(|l| (l - mean).powi(2)).sum::<f64>() / luma.len() as f64;
        (mean, var.sqrt())
    }

    /// Root-mean-square difference (8-bit steps, all of RGB) between `fine` and `coarse` magnified
    /// 2× by nearest texel: what `fine` holds that the next mip lost.
    fn detail_lost(fine: &Rgba, coarse: &Rgba) -> f64 {
        let mut sum = 0.0;
        for y in 0..fine.height {
            for x in 0..fine.width {
                let f = ((y * fine.width + x) * 4) as usize;
                let c = (((y / 2).min(coarse.height - 1) * coarse.width + (x / 2).min(coarse.width - 1)) * 4)
                    as usize;
                for k in 0..3 {
                    sum += (f64::from(fine.pixels[f + k]) - f64::from(coarse.pixels[c + k])).powi(2);
                }
            }
        }
        (sum / f64::from(fine.width * fine.height * 3)).sqrt()
    }

    #[test]
    fn every_mip_of_a_synthetic_texture_has_detail_its_next_mip_lacks() {
        let table = super::super::srgb_to_linear_table();
        let mut mips = vec![synthetic(7, 512)];
        while mips.last().unwrap().width > 1 {
            let next = super::super::downsample(mips.last().unwrap(), &table);
            mips.push(next);
        }
        assert_eq!(mips.len(), 10);
        for (m, mip) in mips.iter().enumerate().take(mips.len() - 1) {
            let (mean, std) = luma_stats(mip);
            assert!((40.0..=215.0).contains(&mean), "mip {m}: mean luma {mean:.1}");
            assert!(std >= 4.0, "mip {m} ({}²): luma standard deviation {std:.2}", mip.width);
            let lost = detail_lost(mip, &mips[m + 1]);
            assert!(lost >= 4.0, "mip {m}: only {lost:.2} RMS lost to mip {}", m + 1);
        }
    }

    #[test]
    fn a_seed_always_gives_the_same_texels_and_another_seed_others() {
        let a = synthetic(3, 256);
        assert_eq!(a.pixels, synthetic(3, 256).pixels);
        assert!(a.pixels.chunks_exact(4).all(|p| p[3] == 255));
        let b = synthetic(4, 256);
        let same = a.pixels.chunks_exact(4).zip(b.pixels.chunks_exact(4)).filter(|(p, q)| p == q).count();
        assert!(same < 256 * 256 / 20, "{same} of {} texels alike", 256 * 256);
        // Rows are made on several threads: the split must not show.
        let mut one_thread = vec![0u8; 256 * 256 * 4];
        Generator::new(3, 256).rows(0, &mut one_thread);
        assert_eq!(a.pixels, one_thread);
    }

    #[test]
    fn hsv_primaries() {
        assert_eq!(hsv_to_srgb8(0.0, 1.0, 1.0), [255, 0, 0]);
        assert_eq!(hsv_to_srgb8(1.0 / 3.0, 1.0, 1.0), [0, 255, 0]);
        assert_eq!(hsv_to_srgb8(2.0 / 3.0, 1.0, 1.0), [0, 0, 255]);
        assert_eq!(hsv_to_srgb8(0.25, 0.0, 0.5), [128, 128, 128]);
    }
}
