// residency.glsl — sampling partially resident textures with residency codes.
//
// Include after `#extension GL_ARB_sparse_texture2 : require` (and, for the clamp variant,
// `#extension GL_ARB_sparse_texture_clamp : require` with RESIDENCY_MIN_LOD_CLAMP defined).
//
// Every function returns the texel when the data it read was resident, and the caller's default
// value otherwise, with `resident` telling which. The min-LOD map (one texel per mip-0 tile, value =
// the finest LOD whose whole chain down to the coarsest level is resident, 255 = nothing resident)
// lets a sample fall back to the finest resident coarser mip without any device feature.

#ifndef RESIDENCY_GLSL
#define RESIDENCY_GLSL

const uint RESIDENCY_MIN_LOD_NONE = 255u;

// One texel of mip `lod`, no filtering.
vec4 residencyFetch(sampler2D tex, ivec2 texel, int lod, vec4 defaultValue, out bool resident) {
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
