// residency_footprint.glsl — the footprint of a filtered 2D sample; residency_search.glsl — the
// search for the finest LOD whose whole footprint is resident. Shared by residency.glsl (hardware
// path) and residency_software.glsl (software path), which include this file first and
// residency_search.glsl after defining, each for its own data:
//   bool residencyMipResident(sampler2D tex, usampler2D map, vec2 lo, vec2 hi, int mip)
//       every texel a bilinear filter reads at `mip` for taps whose centres lie in the uv box
//       [lo, hi] is resident (conservative: false when unsure);
//   int residencyLevels(sampler2D tex, usampler2D map)   the mip count;
//   vec2 residencySize(sampler2D tex, usampler2D map)    mip 0's size in texels;
//   uint residencyMinLod(usampler2D map, vec2 uv)        the centre region's chain (255: none).
//
// What a sample reads (Vulkan's filtering rules, CLAMP_TO_EDGE addressing):
// - an explicit-LOD sample (textureLod) at LOD L reads mip floor(L), and mip floor(L) + 1 when L
//   has a fraction (trilinear), each with the bilinear neighbours of `uv`;
// - a gradient sample (textureGrad, or implicit derivatives) takes its LOD from the derivatives
//   (ρ = |∂uv/∂x|·size, |∂uv/∂y|·size; η = min(ρmax/ρmin, maxAnisotropy); λ = log2(ρmax/η)) and,
//   with anisotropy, blends N = ceil(η) taps along the major axis at uv + (i/(N+1) − ½)·∂uv,
//   each trilinear at λ: every tap centre lies in the box uv ± ½(|∂uv/∂x| + |∂uv/∂y|).
// Slack (the mips tested reach below and above the LOD sampled): implementations may compute ρ
// with a norm other than the length (Vulkan allows max(|a|, |b|) to |a| + |b|): up to half a level
// either way; and a trilinear sample at a whole LOD may still fetch the next mip with weight 0,
// which lavapipe's residency code counts. The hardware path takes both (RESIDENCY_HARDWARE_LOD_SLACK
// for explicit LODs, RESIDENCY_HARDWARE_GRAD_SLACK for derivatives); the software path filters
// in the shader and takes none.

#ifndef RESIDENCY_FOOTPRINT_GLSL
#define RESIDENCY_FOOTPRINT_GLSL

// The most tiles along an axis one mip of a footprint may touch; a wider one is not resident
// (conservative). A gradient sample's taps lie within 16 texels of the mip it reads (η ≤ 16)
// and a bilinear filter adds one: at most 2 tiles of 16 texels or more.
const int RESIDENCY_FOOTPRINT_TILES = 4;
// The LOD slack (below, above) of samples the hardware filters (above): an explicit LOD tests the
// next mip even at a whole LOD; derivatives half a level either way as well.
const vec2 RESIDENCY_HARDWARE_LOD_SLACK = vec2(0.0, 1.0 / 1024.0);
const vec2 RESIDENCY_HARDWARE_GRAD_SLACK = vec2(0.5, 0.5 + 1.0 / 1024.0);
const vec2 RESIDENCY_NO_SLACK = vec2(0.0);
// Sub-texel slack of the bilinear texel range: a position within 1/256 texel of the boundary
// where the filter's texel pair changes takes both pairs (hardware rounds positions to 8 bits).
const float RESIDENCY_SUBTEXEL_SLACK = 1.0 / 256.0;

// The texels (inclusive range t0..t1) of a mip `extent` texels wide that a bilinear (or nearest)
// filter reads for taps whose centres lie in the uv box [lo, hi], clamped to the mip.
void residencyBilinearTexels(vec2 lo, vec2 hi, ivec2 extent, out ivec2 t0, out ivec2 t1) {
    vec2 e = vec2(extent);
    t0 = clamp(ivec2(floor(lo * e - 0.5 - RESIDENCY_SUBTEXEL_SLACK)), ivec2(0), extent - 1);
    t1 = clamp(ivec2(floor(hi * e - 0.5 + RESIDENCY_SUBTEXEL_SLACK)) + 1, ivec2(0), extent - 1);
}

// The LOD λ of a gradient sample (above) of a texture `size` texels at mip 0, before any clamp;
// `maxAnisotropy` is the sampler's (1 without anisotropy).
float residencyGradLod(vec2 dPdx, vec2 dPdy, vec2 size, float maxAnisotropy) {
    float rx = length(dPdx * size);
    float ry = length(dPdy * size);
    float rmax = max(rx, ry);
    float eta = min(rmax / max(min(rx, ry), 1e-30), max(maxAnisotropy, 1.0));
    return log2(max(rmax / max(eta, 1.0), 1e-30));
}

// The anisotropic taps' count N = ceil(η), 1 to 16.
int residencyAnisoTaps(vec2 dPdx, vec2 dPdy, vec2 size, float maxAnisotropy) {
    float rx = length(dPdx * size);
    float ry = length(dPdy * size);
    float eta = min(max(rx, ry) / max(min(rx, ry), 1e-30), clamp(maxAnisotropy, 1.0, 16.0));
    return clamp(int(ceil(eta - 1e-4)), 1, 16);
}

// Half the uv box the tap centres of a gradient sample lie in (0 without anisotropy: one tap).
vec2 residencyTapSpread(vec2 dPdx, vec2 dPdy, float maxAnisotropy) {
    return maxAnisotropy > 1.0 ? 0.5 * (abs(dPdx) + abs(dPdy)) : vec2(0.0);
}

#endif
