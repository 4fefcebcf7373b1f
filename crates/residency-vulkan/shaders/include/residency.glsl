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
// Bounds: filtered samples (textureLod and its sparse twin) take normalized coordinates, which the
// sampler clamps or wraps, and clamp the LOD and the array layer themselves. The texel fetches
// are the ones that take integer coordinates: residencyFetch checks the LOD against
// textureQueryLevels and the texel against textureSize of that LOD first, and reads nothing
// outside (the default value, resident = false); the min-LOD map fetches clamp to its size.

#ifndef RESIDENCY_GLSL
#define RESIDENCY_GLSL

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

// A sample at `lod`, clamped to the finest resident coarser mip: works on every device (no
// shaderResourceMinLod needed, no residency code). `usedLod` is the LOD sampled (-1 when nothing is resident).
vec4 residencySampleFallback(sampler2D tex, usampler2D minLodMap, vec2 uv, float lod, vec4 defaultValue,
                             out bool resident, out float usedLod) {
    uint minLod = residencyMinLod(minLodMap, uv);
    if (minLod == RESIDENCY_MIN_LOD_NONE) {
        resident = false;
        usedLod = -1.0;
        return defaultValue;
    }
    // The map guarantees the whole chain from minLod down to the coarsest level is resident for
    // this region, so a plain sample is safe. (The sparse variant's residency code is not used
    // here: llvmpipe reports trilinear sparseTextureLodARB samples as non-resident even when
    // texel fetches of both mips they read are resident.)
    usedLod = max(lod, float(minLod));
    resident = true;
    return textureLod(tex, uv, usedLod);
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
// Fragment shaders on devices with shaderResourceMinLod: implicit LOD, clamped by the hardware.
vec4 residencySampleClamp(sampler2D tex, usampler2D minLodMap, vec2 uv, vec4 defaultValue, out bool resident) {
    uint minLod = residencyMinLod(minLodMap, uv);
    if (minLod == RESIDENCY_MIN_LOD_NONE) {
        resident = false;
        return defaultValue;
    }
    vec4 value;
    int code = sparseTextureClampARB(tex, uv, float(minLod), value);
    resident = sparseTexelsResidentARB(code);
    return resident ? value : defaultValue;
}
#endif

#endif
