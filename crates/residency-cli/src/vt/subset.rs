//! `--subset K/N`: the K-th of N textures that differ from one another, made from one input set.

use super::Rgba;
use std::fmt;
use std::str::FromStr;

/// The K-th of N textures made from one (sorted) input set; written `K/N`, 1 ≤ K ≤ N.
///
/// - **Selection.** With at least N inputs, subset K takes every N-th input starting at the K-th
///   (inputs K, K + N, K + 2N, …): the N subsets are disjoint and together hold every input. With
///   fewer than N inputs, every subset takes all of them, rotated to start at input
///   ((K − 1) mod M) + 1, so the atlas is laid out in another order.
/// - **Orientation.** Every selected image is turned by the element (K − 1) mod 8 of the square's
///   symmetries: bit 0 mirrors left–right, bit 1 top–bottom, bit 2 swaps the axes.
/// - **Tint.** Every texel's linear-light RGB is scaled by per-channel gains of tint K − 1: none for
///   tint 0, else a hue at the golden-ratio step (K − 1) · 0.618… around the colour wheel, the
///   channel opposite it dimmed by up to 40 %. No two tints are alike, so no two subsets share
///   texels even from a single input (short of a black one).
///
/// `1/1` is the identity: all inputs, in order, unchanged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Subset {
    /// K − 1.
    index: u32,
    /// N.
    count: u32,
}

impl Subset {
    /// `1/1`: the inputs as they are.
    pub const WHOLE: Subset = Subset { index: 0, count: 1 };

    /// Subset `index + 1` of `count`; `None` unless `index < count`.
    pub fn new(index: u32, count: u32) -> Option<Self> {
        (index < count).then_some(Self { index, count })
    }

    /// The inputs of this subset, from all `inputs` in their (sorted) order.
    pub fn select<T: Clone>(&self, inputs: &[T]) -> Vec<T> {
        let (k, n) = (self.index as usize, self.count as usize);
        if inputs.len() >= n {
            inputs.iter().skip(k).step_by(n).cloned().collect()
        } else if inputs.is_empty() {
            Vec::new()
        } else {
            let start = k % inputs.len();
            inputs[start..].iter().chain(&inputs[..start]).cloned().collect()
        }
    }

    /// `image` turned and tinted for this subset.
    pub fn vary(&self, image: Rgba) -> Rgba {
        tint(orient(image, self.index % 8), self.index)
    }
}

impl fmt::Display for Subset {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.index + 1, self.count)
    }
}

impl FromStr for Subset {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || format!("`{s}` is not K/N with 1 ≤ K ≤ N (for example 3/8)");
        let (k, n) = s.split_once('/').ok_or_else(bad)?;
        let k: u32 = k.trim().parse().map_err(|_| bad())?;
        let n: u32 = n.trim().parse().map_err(|_| bad())?;
        k.checked_sub(1).and_then(|index| Subset::new(index, n)).ok_or_else(bad)
    }
}

/// `image` under symmetry `o` of the square: bit 0 mirrors x, bit 1 mirrors y, bit 2 swaps the axes
/// (applied first, reading the source).
fn orient(image: Rgba, o: u32) -> Rgba {
    if o == 0 {
        return image;
    }
    let (mirror_x, mirror_y, swap) = (o & 1 != 0, o & 2 != 0, o & 4 != 0);
    let (sw, sh) = (image.width, image.height);
    let (w, h) = if swap { (sh, sw) } else { (sw, sh) };
    let mut pixels = vec![0u8; image.pixels.len()];
    for y in 0..h {
        for x in 0..w {
            let (mut sx, mut sy) = if swap { (y, x) } else { (x, y) };
            if mirror_x {
                sx = sw - 1 - sx;
            }
            if mirror_y {
                sy = sh - 1 - sy;
            }
            let s = ((sy * sw + sx) * 4) as usize;
            let d = ((y * w + x) * 4) as usize;
            pixels[d..d + 4].copy_from_slice(&image.pixels[s..s + 4]);
        }
    }
    Rgba { width: w, height: h, pixels }
}

/// The linear-light gains of tint `t` (all 1 for tint 0).
fn tint_gains(t: u32) -> [f32; 3] {
    if t == 0 {
        return [1.0; 3];
    }
    let hue = (f64::from(t) * 0.618_033_988_749_895).fract();
    std::array::from_fn(|c| {
        let phase = std::f64::consts::TAU * (hue - c as f64 / 3.0);
        (1.0 - 0.4 * (0.5 - 0.5 * phase.cos())) as f32
    })
}

/// `image` with tint `t` applied in linear light (alpha unchanged).
fn tint(mut image: Rgba, t: u32) -> Rgba {
    if t == 0 {
        return image;
    }
    let to_linear = super::srgb_to_linear_table();
    let gains = tint_gains(t);
    let lut: [[u8; 256]; 3] =
        std::array::from_fn(|c| std::array::from_fn(|v| super::linear_to_srgb(to_linear[v] * gains[c])));
    for texel in image.pixels.chunks_exact_mut(4) {
        for c in 0..3 {
            texel[c] = lut[c][texel[c] as usize];
        }
    }
    image
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ramp(width: u32, height: u32) -> Rgba {
        let pixels =
            (0..width * height).flat_map(|i| [(i % 251) as u8, (i / 7 % 256) as u8, 200, 255]).collect();
        Rgba { width, height, pixels }
    }

    #[test]
    fn k_over_n_parses_one_based_and_refuses_k_outside_1_to_n() {
        assert_eq!("3/8".parse::<Subset>().unwrap(), Subset::new(2, 8).unwrap());
        assert_eq!("1/1".parse::<Subset>().unwrap(), Subset::WHOLE);
        assert_eq!(Subset::new(2, 8).unwrap().to_string(), "3/8");
        for bad in ["0/8", "9/8", "1/0", "3", "a/8", "3/b", ""] {
            assert!(bad.parse::<Subset>().is_err(), "{bad}");
        }
    }

    #[test]
    fn at_least_n_inputs_split_into_disjoint_subsets_that_cover_them() {
        let inputs: Vec<u32> = (0..10).collect();
        let subsets: Vec<Vec<u32>> = (0..4).map(|k| Subset::new(k, 4).unwrap().select(&inputs)).collect();
        assert_eq!(subsets[0], [0, 4, 8]);
        assert_eq!(subsets[3], [3, 7]);
        let mut all: Vec<u32> = subsets.concat();
        all.sort_unstable();
        assert_eq!(all, inputs);
    }

    #[test]
    fn fewer_than_n_inputs_are_all_taken_rotated() {
        let inputs = ["a", "b", "c"];
        assert_eq!(Subset::new(0, 8).unwrap().select(&inputs), ["a", "b", "c"]);
        assert_eq!(Subset::new(1, 8).unwrap().select(&inputs), ["b", "c", "a"]);
        assert_eq!(Subset::new(5, 8).unwrap().select(&inputs), ["c", "a", "b"]);
        assert_eq!(Subset::WHOLE.select(&inputs), inputs);
    }

    #[test]
    fn the_whole_set_is_unchanged_and_every_other_subset_changes_texels() {
        let image = ramp(6, 4);
        assert_eq!(Subset::WHOLE.vary(image.clone()).pixels, image.pixels);
        let varied: Vec<Vec<u8>> =
            (0..16).map(|k| Subset::new(k, 16).unwrap().vary(image.clone()).pixels).collect();
        for a in 0..varied.len() {
            for b in a + 1..varied.len() {
                assert_ne!(varied[a], varied[b], "subsets {} and {} of 16", a + 1, b + 1);
            }
        }
    }

    #[test]
    fn the_eight_orientations_are_the_symmetries_of_the_square() {
        let image = ramp(3, 2);
        let at = |img: &Rgba, x: u32, y: u32| img.pixels[((y * img.width + x) * 4) as usize];
        // Mirror x: the last column comes first.
        let m = orient(image.clone(), 1);
        assert_eq!((m.width, m.height, at(&m, 0, 0)), (3, 2, at(&image, 2, 0)));
        // Swap: a transpose, 2×3.
        let t = orient(image.clone(), 4);
        assert_eq!((t.width, t.height, at(&t, 1, 2)), (2, 3, at(&image, 2, 1)));
        let mut seen: Vec<Vec<u8>> = (0..8).map(|o| orient(image.clone(), o).pixels).collect();
        seen.sort();
        seen.dedup();
        assert_eq!(seen.len(), 8);
    }
}
