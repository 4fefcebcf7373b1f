// residency.glsl — sampling partially resident textures with residency codes.
//
// Include after `#extension GL_ARB_sparse_texture2 : require` (and, for the clamp variant,
// `#extension GL_ARB_sparse_texture_clamp : require` with RESIDENCY_MIN_LOD_CLAMP defined).
//
// Every function returns the texel when the data it read was resident, and the caller's default
// value otherwise, with `resident` telling which. The min-LOD map (one texel per mip-0 tile, value =
// the finest LOD whose whole chain down to the coarsest level is resident, 255 = nothing resident)
// lets a sample fall back to the finest resident coarser mip without any device feature.
//
// 2D samples answer for their whole filter footprint (issue #32; residency_footprint.glsl,
// docs/tiles.md "What the sampling helpers guarantee"): every texel the filter reads, across
// tile edges, in the next mip, under every anisotropic tap, by the min-LOD map. Define
// RESIDENCY_CODES before the include to also require the sample's own residency code
// (sparseTexelsResidentARB): exact on devices whose codes are per invocation; lavapipe (Mesa
// 25.0) reports every invocation non-resident when all invocations of a SIMD batch sample a
// trilinear image at whole LODs, so the shipped shaders leave it undefined. Volumes and 2D
// arrays answer from the centre region's map value only.
//
// Bounds: filtered samples (textureLod and its sparse twin) take normalized coordinates, which the
// sampler clamps or wraps, and clamp the LOD and the array layer themselves. The texel fetches
// are the ones that take integer coordinates: residencyFetch checks the LOD against
// textureQueryLevels and the texel against textureSize of that LOD first, and reads nothing
// outside (the default value, resident = false); the min-LOD map fetches clamp to its size.

#ifndef RESIDENCY_GLSL
#define RESIDENCY_GLSL

#include "residency_footprint.glsl"

const uint RESIDENCY_MIN_LOD_NONE = 255u;

// Whether texel `texel` of mip `lod` lies inside the image (negative coordinates do not: as
// unsigned numbers they are past every size).
bool residencyTexelInside(sampler2D tex, ivec2 texel, int lod) {
    return lod >= 0 && lod < textureQueryLevels(tex)
        && all(lessThan(uvec2(texel), uvec2(textureSize(tex, lod))));
}

bool residencyTexelInside(sampler3D tex, ivec3 texel, int lod) {
    return lod >= 0 && lod < textureQueryLevels(tex)
        && all(lessThan(uvec3(texel), uvec3(textureSize(tex, lod))));
}

bool residencyTexelInside(sampler2DArray tex, ivec3 texelLayer, int lod) {
    return lod >= 0 && lod < textureQueryLevels(tex)
        && all(lessThan(uvec3(texelLayer), uvec3(textureSize(tex, lod))));
}

// One texel of mip `lod`, no filtering; a texel or LOD outside the image reads nothing and
// returns the default value, not resident.
vec4 residencyFetch(sampler2D tex, ivec2 texel, int lod, vec4 defaultValue, out bool resident) {
    if (!residencyTexelInside(tex, texel, lod)) {
        resident = false;
        return defaultValue;
    }
    vec4 value;
    int code = sparseTexelFetchARB(tex, texel, lod, value);
    resident = sparseTexelsResidentARB(code);
    return resident ? value : defaultValue;
}

// A filtered sample at an explicit LOD.
vec4 residencySampleLod(sampler2D tex, vec2 uv, float lod, vec4 defaultValue, out bool resident) {
    vec4 value;
    int code = sparseTextureLodARB(tex, uv, lod, value);
    resident = sparseTexelsResidentARB(code);
    return resident ? value : defaultValue;
}

// The finest LOD that is safe to sample at `uv` (RESIDENCY_MIN_LOD_NONE when none is).
uint residencyMinLod(usampler2D minLodMap, vec2 uv) {
    ivec2 size = textureSize(minLodMap, 0);
    ivec2 region = clamp(ivec2(uv * vec2(size)), ivec2(0), size - 1);
    return texelFetch(minLodMap, region, 0).r;
}

// The side of the mip-0 tile one min-LOD map texel stands for: the smallest power of two at least
// size / regions (sparse tile extents are powers of two: for two regions or more this is the
// tile's side exactly; with one region every texel maps to it anyway).
ivec2 residencyRegionSide(ivec2 size0, ivec2 regions) {
    ivec2 q = max((size0 + regions - 1) / max(regions, ivec2(1)), ivec2(1));
    return ivec2(1) << (findMSB(q - 1) + 1);
}

// Whether every texel a bilinear filter reads at `mip` for taps centred in the uv box [lo, hi]
// is resident by the min-LOD map: for each tile of that mip the texels fall in, a mip-0 region
// whose cover holds that tile (the one under a texel of it) has a map value <= mip, so its chain
// from `mip` down, that tile included, is resident. Conservative: a value above `mip` may come
// from another tile of the region's cover; more than RESIDENCY_FOOTPRINT_TILES tiles along an
// axis is not resident.
bool residencyMipResident(sampler2D tex, usampler2D minLodMap, vec2 lo, vec2 hi, int mip) {
    ivec2 size0 = textureSize(tex, 0);
    ivec2 regions = textureSize(minLodMap, 0);
    ivec2 side = residencyRegionSide(size0, regions);
    // Vulkan's mip size, computed: lavapipe (Mesa 25.0) answers textureSize(tex, lod) with a
    // wrong size when `lod` is not a constant.
    ivec2 extent = max(size0 >> mip, ivec2(1));
    ivec2 t0;
    ivec2 t1;
    residencyBilinearTexels(lo, hi, extent, t0, t1);
    ivec2 a = t0 / side;
    ivec2 b = t1 / side;
    if (any(greaterThanEqual(b - a, ivec2(RESIDENCY_FOOTPRINT_TILES)))) {
        return false;
    }
    for (int ty = a.y; ty <= b.y; ty++) {
        for (int tx = a.x; tx <= b.x; tx++) {
            ivec2 first = ivec2(tx, ty) * side;
            ivec2 inside = (first + min(first + side, extent)) / 2;
            ivec2 x0 = ivec2((uvec2(inside) * uvec2(size0)) / uvec2(max(extent, ivec2(1))));
            ivec2 region = clamp(x0 / side, ivec2(0), regions - 1);
            if (texelFetch(minLodMap, region, 0).r > uint(mip)) {
                return false;
            }
        }
    }
    return true;
}

int residencyLevels(sampler2D tex, usampler2D minLodMap) {
    return textureQueryLevels(tex);
}

vec2 residencySize(sampler2D tex, usampler2D minLodMap) {
    return vec2(textureSize(tex, 0));
}

#include "residency_search.glsl"

// A sample at `lod` (trilinear or bilinear, as the sampler filters) at the finest LOD at or above
// it whose whole footprint is resident: the bilinear neighbours of `uv` at each mip it blends,
// tiles across region edges and the next mip included (tested even at a whole LOD: devices may
// fetch it with weight 0), by the min-LOD map (no device feature); with RESIDENCY_CODES the
// sample's own residency code must agree too (sparseTextureLodARB). `resident` is false, with the
// default value, when no LOD's footprint is resident or the code says a tap was not; `usedLod` is
// the LOD sampled (-1 when no footprint is resident).
// residencySampleFallbackFrom: the same with `minLod` = residencyMinLod(minLodMap, uv) read by the
// caller (vt_quad.glsl reads it once for the sample and its feedback).
vec4 residencySampleFallbackFrom(sampler2D tex, usampler2D minLodMap, vec2 uv, float lod, vec4 defaultValue,
                                 uint minLod, out bool resident, out float usedLod) {
    ResidencyFootprint f = residencyFootprintLodFrom(tex, minLodMap, uv, vec2(0.0), lod,
                                                     RESIDENCY_HARDWARE_LOD_SLACK, RESIDENCY_BY_LOD, minLod);
    usedLod = f.lod;
    if (!f.found) {
        resident = false;
        return defaultValue;
    }
#ifdef RESIDENCY_CODES
    vec4 value;
    int code = sparseTextureLodARB(tex, uv, usedLod, value);
    resident = sparseTexelsResidentARB(code);
    return resident ? value : defaultValue;
#else
    resident = true;
    return textureLod(tex, uv, usedLod);
#endif
}

vec4 residencySampleFallback(sampler2D tex, usampler2D minLodMap, vec2 uv, float lod, vec4 defaultValue,
                             out bool resident, out float usedLod) {
    return residencySampleFallbackFrom(tex, minLodMap, uv, lod, defaultValue, residencyMinLod(minLodMap, uv),
                                       resident, usedLod);
}

// A gradient sample (textureGrad: trilinear, or anisotropic with the sampler's `maxAnisotropy`,
// 1 when it has none, up to 16) at the finest LOD at or above the derivatives' whose every tap is
// resident: a coarser LOD scales the derivatives (the taps spread with them). The footprint is
// the taps' box (residency_footprint.glsl) with half a level of LOD slack; with RESIDENCY_CODES
// the sample's residency code (sparseTextureGradARB) must agree too. `usedLod` is the LOD the
// derivatives ask for after the scaling (-1 when no footprint is resident).
vec4 residencySampleGradFallback(sampler2D tex, usampler2D minLodMap, vec2 uv, vec2 dPdx, vec2 dPdy,
                                 float maxAnisotropy, vec4 defaultValue, out bool resident, out float usedLod) {
    ResidencyFootprint f = residencyGradFootprint(tex, minLodMap, uv, dPdx, dPdy, maxAnisotropy,
                                                  RESIDENCY_HARDWARE_GRAD_SLACK, RESIDENCY_BY_SCALE);
    usedLod = f.lod;
    if (!f.found) {
        resident = false;
        return defaultValue;
    }
#ifdef RESIDENCY_CODES
    vec4 value;
    int code = sparseTextureGradARB(tex, uv, dPdx * f.scale, dPdy * f.scale, value);
    resident = sparseTexelsResidentARB(code);
    return resident ? value : defaultValue;
#else
    resident = true;
    return textureGrad(tex, uv, dPdx * f.scale, dPdy * f.scale);
#endif
}

// ---- Volumes (sampler3D) and 2D arrays (sampler2DArray) ----------------------------------------
// The same functions over the other sampler types. A 3D image's min-LOD map is a usampler3D (one
// texel per mip-0 tile, x, y, z); a 2D array's is a usampler2DArray with one layer per layer, so
// layers stream independently. Array coordinates are vec3(u, v, layer), as texture() takes them.

vec4 residencyFetch(sampler3D tex, ivec3 texel, int lod, vec4 defaultValue, out bool resident) {
    if (!residencyTexelInside(tex, texel, lod)) {
        resident = false;
        return defaultValue;
    }
    vec4 value;
    int code = sparseTexelFetchARB(tex, texel, lod, value);
    resident = sparseTexelsResidentARB(code);
    return resident ? value : defaultValue;
}

vec4 residencyFetch(sampler2DArray tex, ivec3 texelLayer, int lod, vec4 defaultValue, out bool resident) {
    if (!residencyTexelInside(tex, texelLayer, lod)) {
        resident = false;
        return defaultValue;
    }
    vec4 value;
    int code = sparseTexelFetchARB(tex, texelLayer, lod, value);
    resident = sparseTexelsResidentARB(code);
    return resident ? value : defaultValue;
}

vec4 residencySampleLod(sampler3D tex, vec3 uvw, float lod, vec4 defaultValue, out bool resident) {
    vec4 value;
    int code = sparseTextureLodARB(tex, uvw, lod, value);
    resident = sparseTexelsResidentARB(code);
    return resident ? value : defaultValue;
}

vec4 residencySampleLod(sampler2DArray tex, vec3 uvLayer, float lod, vec4 defaultValue, out bool resident) {
    vec4 value;
    int code = sparseTextureLodARB(tex, uvLayer, lod, value);
    resident = sparseTexelsResidentARB(code);
    return resident ? value : defaultValue;
}

uint residencyMinLod(usampler3D minLodMap, vec3 uvw) {
    ivec3 size = textureSize(minLodMap, 0);
    ivec3 region = clamp(ivec3(uvw * vec3(size)), ivec3(0), size - 1);
    return texelFetch(minLodMap, region, 0).r;
}

uint residencyMinLod(usampler2DArray minLodMap, vec3 uvLayer) {
    ivec3 size = textureSize(minLodMap, 0);
    ivec2 region = clamp(ivec2(uvLayer.xy * vec2(size.xy)), ivec2(0), size.xy - 1);
    int layer = clamp(int(uvLayer.z + 0.5), 0, size.z - 1);
    return texelFetch(minLodMap, ivec3(region, layer), 0).r;
}

vec4 residencySampleFallback(sampler3D tex, usampler3D minLodMap, vec3 uvw, float lod, vec4 defaultValue,
                             out bool resident, out float usedLod) {
    uint minLod = residencyMinLod(minLodMap, uvw);
    if (minLod == RESIDENCY_MIN_LOD_NONE) {
        resident = false;
        usedLod = -1.0;
        return defaultValue;
    }
    usedLod = max(lod, float(minLod));
    resident = true;
    return textureLod(tex, uvw, usedLod);
}

vec4 residencySampleFallback(sampler2DArray tex, usampler2DArray minLodMap, vec3 uvLayer, float lod,
                             vec4 defaultValue, out bool resident, out float usedLod) {
    uint minLod = residencyMinLod(minLodMap, uvLayer);
    if (minLod == RESIDENCY_MIN_LOD_NONE) {
        resident = false;
        usedLod = -1.0;
        return defaultValue;
    }
    usedLod = max(lod, float(minLod));
    resident = true;
    return textureLod(tex, uvLayer, usedLod);
}

// ---- The seed's residency codes with the low-water LOD warning (residency_codes.glsl) ----------

#include "residency_codes.glsl"

int residencySampleWarn(sampler2D tex, usampler2D minLodMap, vec2 uv, float lod, uint lowWater,
                        inout vec4 texel, out float usedLod) {
    bool resident;
    vec4 value = residencySampleFallback(tex, minLodMap, uv, lod, texel, resident, usedLod);
    texel = value;
    return residencyWarnCode(resident, usedLod, textureQueryLevels(tex), lowWater);
}

// residencySampleWarn of a gradient sample (residencySampleGradFallback).
int residencySampleGradWarn(sampler2D tex, usampler2D minLodMap, vec2 uv, vec2 dPdx, vec2 dPdy, float maxAnisotropy,
                            uint lowWater, inout vec4 texel, out float usedLod) {
    bool resident;
    vec4 value = residencySampleGradFallback(tex, minLodMap, uv, dPdx, dPdy, maxAnisotropy, texel, resident, usedLod);
    texel = value;
    return residencyWarnCode(resident, usedLod, textureQueryLevels(tex), lowWater);
}

int residencySampleWarn(sampler3D tex, usampler3D minLodMap, vec3 uvw, float lod, uint lowWater,
                        inout vec4 texel, out float usedLod) {
    bool resident;
    vec4 value = residencySampleFallback(tex, minLodMap, uvw, lod, texel, resident, usedLod);
    texel = value;
    return residencyWarnCode(resident, usedLod, textureQueryLevels(tex), lowWater);
}

int residencySampleWarn(sampler2DArray tex, usampler2DArray minLodMap, vec3 uvLayer, float lod, uint lowWater,
                        inout vec4 texel, out float usedLod) {
    bool resident;
    vec4 value = residencySampleFallback(tex, minLodMap, uvLayer, lod, texel, resident, usedLod);
    texel = value;
    return residencyWarnCode(resident, usedLod, textureQueryLevels(tex), lowWater);
}

#ifdef RESIDENCY_MIN_LOD_CLAMP
// Devices with shaderResourceMinLod: the derivatives' own LOD (and anisotropy: `maxAnisotropy` is
// the sampler's, 1 when it has none), clamped by the hardware to the finest mip `clampLod` at
// which every tap is resident (the taps keep their places; half a level of slack) and, with
// RESIDENCY_CODES, checked by the sample's residency code (sparseTextureGradClampARB). `clampLod` is -1 when no footprint is
// resident.
vec4 residencySampleGradClamp(sampler2D tex, usampler2D minLodMap, vec2 uv, vec2 dPdx, vec2 dPdy,
                              float maxAnisotropy, vec4 defaultValue, out bool resident, out float clampLod) {
    ResidencyFootprint f = residencyGradFootprint(tex, minLodMap, uv, dPdx, dPdy, maxAnisotropy,
                                                  RESIDENCY_HARDWARE_GRAD_SLACK, RESIDENCY_BY_CLAMP);
    clampLod = f.found ? f.clampLod : -1.0;
    if (!f.found) {
        resident = false;
        return defaultValue;
    }
#ifdef RESIDENCY_CODES
    vec4 value;
    int code = sparseTextureGradClampARB(tex, uv, dPdx, dPdy, f.clampLod, value);
    resident = sparseTexelsResidentARB(code);
    return resident ? value : defaultValue;
#else
    resident = true;
    return textureGradClampARB(tex, uv, dPdx, dPdy, f.clampLod);
#endif
}

#ifndef RESIDENCY_NO_DERIVATIVES
// Fragment shaders: implicit LOD (the fragment's derivatives of `uv`), clamped as above
// (sparseTextureClampARB). Compute shaders define RESIDENCY_NO_DERIVATIVES and use
// residencySampleGradClamp.
vec4 residencySampleClamp(sampler2D tex, usampler2D minLodMap, vec2 uv, float maxAnisotropy, vec4 defaultValue,
                          out bool resident) {
    vec2 dPdx = dFdx(uv);
    vec2 dPdy = dFdy(uv);
    ResidencyFootprint f = residencyGradFootprint(tex, minLodMap, uv, dPdx, dPdy, maxAnisotropy,
                                                  RESIDENCY_HARDWARE_GRAD_SLACK, RESIDENCY_BY_CLAMP);
    if (!f.found) {
        resident = false;
        return defaultValue;
    }
#ifdef RESIDENCY_CODES
    vec4 value;
    int code = sparseTextureClampARB(tex, uv, f.clampLod, value);
    resident = sparseTexelsResidentARB(code);
    return resident ? value : defaultValue;
#else
    resident = true;
    return textureClampARB(tex, uv, f.clampLod);
#endif
}
#endif
#endif

#endif
