//! The per-sample rule that turns a texture sample into a miss, an LOD warning or nothing: the
//! reference for the GLSL in `docs/streaming.md`, used by CPU renderers and tests.
//!
//! For a sample of image slot `i`, layer `layer`, coordinates `uv`, unclamped LOD `λ`
//! (`textureQueryLod`), and the min-LOD map value `c` of its mip-0 region (the finest LOD whose
//! whole chain to the tail is resident, [`MIN_LOD_NONE`](crate::tiles::MIN_LOD_NONE) when none):
//!
//! 1. `λ' = clamp(λ, 0, mip_levels − 1)`, `m = floor(λ')`: the finest mip the sample filters.
//! 2. `m < first_tail_lod` and `c > m`: **miss** for the tile of mip `m` under `uv` (the sample
//!    fell back to `c`).
//! 3. `c == m`, `0 < m ≤ first_tail_lod`, `m ≤ min_warning_lod` and `λ' − m < lead / 256`:
//!    **LOD warning** for the tile of mip `m − 1` under `uv` — the tile the sample will miss as
//!    soon as `λ` drops below `m`. The request names that finer tile directly, so the manager
//!    prefetches exactly it (and nothing when it is already resident: then `c < m`). `m` may be
//!    the tail's first level: the first tiled mip is prefetched too.
//! 4. Otherwise nothing (coarser than the tail, or resident and not close to the next level).
//!
//! `min_warning_lod` is the seed's per-texture low-water mark (`GL_MIN_WARNING_LOD_AMD`): only
//! samples at that level or finer warn; 255 (the default) lets every level warn.

use super::feedback::FeedbackImage;
use super::request::RequestKind;
use crate::tiles::TileIndex;

/// What one sample asks for, per the rule in the module docs; `None` when it asks nothing.
pub fn classify_sample(
    image: &FeedbackImage,
    layer: u32,
    uv: [f32; 2],
    lod: f32,
    min_lod: u8,
) -> Option<(TileIndex, RequestKind)> {
    let top = image.mip_levels.saturating_sub(1) as f32;
    let l = if lod.is_nan() { 0.0 } else { lod.clamp(0.0, top) };
    let m = l.floor() as u32;
    let c = u32::from(min_lod);
    if m < image.first_tail_lod && c > m {
        return image.tile_at(layer, m, uv).map(|t| (t, RequestKind::Miss));
    }
    let near_finer = (l - m as f32) < f32::from(image.lead) / 256.0;
    if c == m && m > 0 && m <= image.first_tail_lod && m <= u32::from(image.min_warning_lod) && near_finer {
        return image.tile_at(layer, m - 1, uv).map(|t| (t, RequestKind::LodWarning));
    }
    None
}
