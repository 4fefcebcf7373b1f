//! The per-sample rules that turn a texture sample into a miss, a prefetch warning, a low-water
//! warning or nothing: the reference for the GLSL in `docs/streaming.md`, used by CPU renderers
//! and tests.
//!
//! For a sample of image slot `i`, layer `layer`, coordinates `uvw` (a 3D image's depth in `w`;
//! `w` is ignored for 2D images and arrays), unclamped LOD `λ`
//! (`textureQueryLod`), and the min-LOD map value `c` of its mip-0 region (the finest LOD whose
//! whole chain to the tail is resident, [`MIN_LOD_NONE`] when none):
//!
//! 1. `λ' = clamp(λ, 0, mip_levels − 1)`, `m = floor(λ')`: the finest mip the sample filters.
//! 2. `m < first_tail_lod` and `c > m`: **miss** for the tile of mip `m` under `uvw` (the sample
//!    fell back to `c`).
//! 3. `c == m`, `0 < m ≤ first_tail_lod`, `m ≤ min_warning_lod` and `λ' − m < lead / 256`:
//!    **prefetch warning** for the tile of mip `m − 1` under `uvw` — the tile the sample will miss as
//!    soon as `λ` drops below `m`. The request names that finer tile directly, so the manager
//!    prefetches exactly it (and nothing when it is already resident: then `c < m`). `m` may be
//!    the tail's first level: the first tiled mip is prefetched too.
//! 4. Otherwise nothing (coarser than the tail, or resident and not close to the next level).
//!
//! `min_warning_lod` gates the prefetch: only samples at that level or finer prefetch; 255 (the
//! default) lets every level prefetch.
//!
//! Independently of rules 2–4, the seed's **low-water warning** ([`low_water_level`],
//! [`classify_low_water`]): with the texture's mark `w` set (`FeedbackImage::low_water`), a sample
//! with anything resident (`c` is not `MIN_LOD_NONE`) fetched the finest level `f = max(m, c)`
//! (its own mip, or the coarser one it fell back to); when `f <= w` it warns with the level `f`
//! that warned, for the tile of mip `f` under `uvw` (when `f` is below the tail; a tail level
//! warns in the shader helper's code but names no tile to record). Levels above the mark
//! (`f > w`) never warn: that is the gate. The data is valid either way; the warning says it is
//! time to stream the next finer level there.

use super::feedback::FeedbackImage;
use super::request::RequestKind;
use crate::tiles::{TileIndex, MIN_LOD_NONE};

/// What one sample asks for, per the rule in the module docs; `None` when it asks nothing.
pub fn classify_sample(
    image: &FeedbackImage,
    layer: u32,
    uvw: [f32; 3],
    lod: f32,
    min_lod: u8,
) -> Option<(TileIndex, RequestKind)> {
    let (l, m) = sampled_level(image, lod);
    let c = u32::from(min_lod);
    if m < image.first_tail_lod && c > m {
        return image.tile_at(layer, m, uvw).map(|t| (t, RequestKind::Miss));
    }
    let near_finer = (l - m as f32) < f32::from(image.lead) / 256.0;
    if c == m && m > 0 && m <= image.first_tail_lod && m <= u32::from(image.min_warning_lod) && near_finer {
        return image.tile_at(layer, m - 1, uvw).map(|t| (t, RequestKind::LodWarning));
    }
    None
}

/// The clamped LOD and the finest mip a sample at unclamped LOD `lod` filters.
fn sampled_level(image: &FeedbackImage, lod: f32) -> (f32, u32) {
    let top = image.mip_levels.saturating_sub(1) as f32;
    let l = if lod.is_nan() { 0.0 } else { lod.clamp(0.0, top) };
    (l, l.floor() as u32)
}

/// The level at which a sample raises the seed's low-water warning (`sparseTexelMinLodWarning` /
/// `sparseTexelLodWarningFetch`), per the rule in the module docs: `Some(f)`, `f` the finest level
/// the sample fetched (`max(m, min_lod)`), when the image has a mark, something is resident there
/// and `f <= mark`; `None` otherwise. This is the code the shader helpers return
/// (`residencySampleWarn` in `residency.glsl`), whether or not `f` is a tiled mip.
pub fn low_water_level(image: &FeedbackImage, lod: f32, min_lod: u8) -> Option<u32> {
    let mark = u32::from(image.low_water?);
    if min_lod == MIN_LOD_NONE {
        return None;
    }
    let (_, m) = sampled_level(image, lod);
    let f = m.max(u32::from(min_lod));
    (f <= mark).then_some(f)
}

/// The low-water warning a sample records in the feedback: the tile of the level that warned
/// under `uvw` and that level (also the record's mip), `None` when it does not warn or the level
/// is in the mip tail (no tile to name).
pub fn classify_low_water(
    image: &FeedbackImage,
    layer: u32,
    uvw: [f32; 3],
    lod: f32,
    min_lod: u8,
) -> Option<(TileIndex, u32)> {
    let m = low_water_level(image, lod, min_lod)?;
    image.tile_at(layer, m, uvw).map(|t| (t, m))
}
