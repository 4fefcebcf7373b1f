// residency_software.glsl — the software residency path: the same sampling functions as
// residency.glsl, with the same signatures, over a tile-cache atlas (`tex`, a normal image with
// bordered tile slots, bilinear sampler) and an indirection texture (`minLodMap`, R32_UINT, one
// level: a header row (sizes, then each mip's first row), then each mip's tile entries `slot | dataMip << 24`;
// a 2D array's indirection is a usampler2DArray with one such layer per layer, below; layout in
// crates/residency-core/src/tiles/indirection.rs). Include it instead of
// residency.glsl; no sparse extension is needed. `Indirection::sample_position` is the CPU model of
// `residencySoftwareLevel` and is tested against the texels this code reads.
//
// residencyFetch and residencySampleLod (residency codes of the hardware path) have no software
// twin: use residencySampleFallback, which both paths provide, or residencySampleWarn (the seed's
// codes with the low-water warning, residency_codes.glsl), which both provide for 2D too.

#ifndef RESIDENCY_SOFTWARE_GLSL
#define RESIDENCY_SOFTWARE_GLSL

const uint RESIDENCY_MIN_LOD_NONE = 255u;

// The tile grid of mip `mip` of a `size` texture with `tile`-texel tiles.
ivec2 residencySoftwareTiles(uvec2 size, uint tile, uint mip) {
    uvec2 extent = max(size >> mip, uvec2(1u));
    return ivec2((extent + tile - 1u) / tile);
}

struct ResidencySoftware {
    uvec2 size;   // texture extent
    uint tile;    // tile side in texels
    uint border;  // border texels per side in the atlas
    uint mips;    // mip levels
    uint columns; // atlas slots per row
};

ResidencySoftware residencySoftwareHeader(usampler2D indirection) {
    ResidencySoftware h;
    h.size = uvec2(texelFetch(indirection, ivec2(0, 0), 0).r, texelFetch(indirection, ivec2(1, 0), 0).r);
    h.tile = texelFetch(indirection, ivec2(2, 0), 0).r;
    h.border = texelFetch(indirection, ivec2(3, 0), 0).r;
    h.mips = texelFetch(indirection, ivec2(4, 0), 0).r;
    h.columns = texelFetch(indirection, ivec2(5, 0), 0).r;
    return h;
}

// The entry (slot, data mip) covering `uv` at mip `mip`.
uvec2 residencySoftwareEntry(usampler2D indirection, ResidencySoftware h, vec2 uv, uint mip) {
    uint row = texelFetch(indirection, ivec2(6 + int(mip), 0), 0).r;
    vec2 extent = vec2(max(h.size >> mip, uvec2(1u)));
    ivec2 tiles = residencySoftwareTiles(h.size, h.tile, mip);
    ivec2 t = clamp(ivec2(floor(uv * extent / float(h.tile))), ivec2(0), tiles - 1);
    uint e = texelFetch(indirection, ivec2(t.x, int(row) + t.y), 0).r;
    return uvec2(e & 0x00ffffffu, e >> 24);
}

// The finest LOD that is safe to sample at `uv` (RESIDENCY_MIN_LOD_NONE when none is).
uint residencyMinLod(usampler2D minLodMap, vec2 uv) {
    return residencySoftwareEntry(minLodMap, residencySoftwareHeader(minLodMap), uv, 0u).y;
}

// A bilinear sample of mip `mip` at `uv` from the atlas (the caller knows it is resident). The
// data mip's tile is the requested one's halved mip by mip, as the indirection was built (for
// sizes that are not powers of two, `uv` at the data mip may lie a texel across that tile's edge:
// the slot's border holds it).
vec4 residencySoftwareLevel(sampler2D atlas, usampler2D indirection, ResidencySoftware h, vec2 uv, uint mip) {
    ivec2 t = clamp(ivec2(floor(uv * vec2(max(h.size >> mip, uvec2(1u))) / float(h.tile))), ivec2(0),
                    residencySoftwareTiles(h.size, h.tile, mip) - 1);
    uint row = texelFetch(indirection, ivec2(6 + int(mip), 0), 0).r;
    uint e = texelFetch(indirection, ivec2(t.x, int(row) + t.y), 0).r;
    uint slot = e & 0x00ffffffu;
    uint dataMip = min(e >> 24, h.mips - 1u);
    for (uint m = mip + 1u; m <= dataMip; m++) {
        t = min(t / 2, residencySoftwareTiles(h.size, h.tile, m) - 1);
    }
    // Clamped to the edge texels' centres: the sampler's CLAMP_TO_EDGE at the texture's edges,
    // which a block-compressed slot's border (the edge block repeated) cannot give; an
    // uncompressed slot's border (edge texels repeated) reads the same either way.
    vec2 extent = vec2(max(h.size >> dataMip, uvec2(1u)));
    vec2 q = clamp(uv * extent, vec2(0.5), extent - 0.5);
    float slotSide = float(h.tile + 2u * h.border);
    vec2 origin = vec2(float(slot % h.columns), float(slot / h.columns)) * slotSide;
    vec2 pos = origin + float(h.border) + (q - vec2(t) * float(h.tile));
    return textureLod(atlas, pos / vec2(textureSize(atlas, 0)), 0.0);
}

// A trilinear sample at `lod`, clamped to the finest resident coarser mip, as the hardware path's
// residencySampleFallback: two bilinear samples from the atlas, blended.
vec4 residencySampleFallback(sampler2D tex, usampler2D minLodMap, vec2 uv, float lod, vec4 defaultValue,
                             out bool resident, out float usedLod) {
    ResidencySoftware h = residencySoftwareHeader(minLodMap);
    uint minLod = residencySoftwareEntry(minLodMap, h, uv, 0u).y;
    if (minLod == RESIDENCY_MIN_LOD_NONE) {
        resident = false;
        usedLod = -1.0;
        return defaultValue;
    }
    usedLod = min(max(lod, float(minLod)), float(h.mips - 1u));
    uint lo = uint(floor(usedLod));
    float f = usedLod - float(lo);
    vec4 a = residencySoftwareLevel(tex, minLodMap, h, uv, lo);
    resident = true;
    if (f <= 0.0 || lo + 1u >= h.mips) {
        return a;
    }
    return mix(a, residencySoftwareLevel(tex, minLodMap, h, uv, lo + 1u), f);
}

// ---- 2D arrays: an indirection texture with one layer per layer (a usampler2DArray) over the ---
// one atlas; coordinates vec3(u, v, layer). The same functions, reading the sample's layer.

ResidencySoftware residencySoftwareHeader(usampler2DArray indirection, int layer) {
    ResidencySoftware h;
    h.size = uvec2(texelFetch(indirection, ivec3(0, 0, layer), 0).r, texelFetch(indirection, ivec3(1, 0, layer), 0).r);
    h.tile = texelFetch(indirection, ivec3(2, 0, layer), 0).r;
    h.border = texelFetch(indirection, ivec3(3, 0, layer), 0).r;
    h.mips = texelFetch(indirection, ivec3(4, 0, layer), 0).r;
    h.columns = texelFetch(indirection, ivec3(5, 0, layer), 0).r;
    return h;
}

int residencySoftwareLayer(usampler2DArray indirection, float layer) {
    return clamp(int(layer + 0.5), 0, textureSize(indirection, 0).z - 1);
}

uvec2 residencySoftwareEntry(usampler2DArray indirection, ResidencySoftware h, vec2 uv, int layer, uint mip) {
    uint row = texelFetch(indirection, ivec3(6 + int(mip), 0, layer), 0).r;
    vec2 extent = vec2(max(h.size >> mip, uvec2(1u)));
    ivec2 tiles = residencySoftwareTiles(h.size, h.tile, mip);
    ivec2 t = clamp(ivec2(floor(uv * extent / float(h.tile))), ivec2(0), tiles - 1);
    uint e = texelFetch(indirection, ivec3(t.x, int(row) + t.y, layer), 0).r;
    return uvec2(e & 0x00ffffffu, e >> 24);
}

uint residencyMinLod(usampler2DArray minLodMap, vec3 uvLayer) {
    int layer = residencySoftwareLayer(minLodMap, uvLayer.z);
    return residencySoftwareEntry(minLodMap, residencySoftwareHeader(minLodMap, layer), uvLayer.xy, layer, 0u).y;
}

vec4 residencySoftwareLevel(sampler2D atlas, usampler2DArray indirection, ResidencySoftware h, vec2 uv, int layer,
                            uint mip) {
    ivec2 t = clamp(ivec2(floor(uv * vec2(max(h.size >> mip, uvec2(1u))) / float(h.tile))), ivec2(0),
                    residencySoftwareTiles(h.size, h.tile, mip) - 1);
    uint row = texelFetch(indirection, ivec3(6 + int(mip), 0, layer), 0).r;
    uint e = texelFetch(indirection, ivec3(t.x, int(row) + t.y, layer), 0).r;
    uint slot = e & 0x00ffffffu;
    uint dataMip = min(e >> 24, h.mips - 1u);
    for (uint m = mip + 1u; m <= dataMip; m++) {
        t = min(t / 2, residencySoftwareTiles(h.size, h.tile, m) - 1);
    }
    // Clamped to the edge texels' centres: the sampler's CLAMP_TO_EDGE at the texture's edges,
    // which a block-compressed slot's border (the edge block repeated) cannot give; an
    // uncompressed slot's border (edge texels repeated) reads the same either way.
    vec2 extent = vec2(max(h.size >> dataMip, uvec2(1u)));
    vec2 q = clamp(uv * extent, vec2(0.5), extent - 0.5);
    float slotSide = float(h.tile + 2u * h.border);
    vec2 origin = vec2(float(slot % h.columns), float(slot / h.columns)) * slotSide;
    vec2 pos = origin + float(h.border) + (q - vec2(t) * float(h.tile));
    return textureLod(atlas, pos / vec2(textureSize(atlas, 0)), 0.0);
}

vec4 residencySampleFallback(sampler2D tex, usampler2DArray minLodMap, vec3 uvLayer, float lod, vec4 defaultValue,
                             out bool resident, out float usedLod) {
    int layer = residencySoftwareLayer(minLodMap, uvLayer.z);
    ResidencySoftware h = residencySoftwareHeader(minLodMap, layer);
    uint minLod = residencySoftwareEntry(minLodMap, h, uvLayer.xy, layer, 0u).y;
    if (minLod == RESIDENCY_MIN_LOD_NONE) {
        resident = false;
        usedLod = -1.0;
        return defaultValue;
    }
    usedLod = min(max(lod, float(minLod)), float(h.mips - 1u));
    uint lo = uint(floor(usedLod));
    float f = usedLod - float(lo);
    vec4 a = residencySoftwareLevel(tex, minLodMap, h, uvLayer.xy, layer, lo);
    resident = true;
    if (f <= 0.0 || lo + 1u >= h.mips) {
        return a;
    }
    return mix(a, residencySoftwareLevel(tex, minLodMap, h, uvLayer.xy, layer, lo + 1u), f);
}

#include "residency_codes.glsl"

// The seed's sparseTexture with the low-water warning, as residency.glsl's (same signature).
int residencySampleWarn(sampler2D tex, usampler2D minLodMap, vec2 uv, float lod, uint lowWater,
                        inout vec4 texel, out float usedLod) {
    bool resident;
    vec4 value = residencySampleFallback(tex, minLodMap, uv, lod, texel, resident, usedLod);
    texel = value;
    return residencyWarnCode(resident, usedLod, int(residencySoftwareHeader(minLodMap).mips), lowWater);
}

int residencySampleWarn(sampler2D tex, usampler2DArray minLodMap, vec3 uvLayer, float lod, uint lowWater,
                        inout vec4 texel, out float usedLod) {
    bool resident;
    vec4 value = residencySampleFallback(tex, minLodMap, uvLayer, lod, texel, resident, usedLod);
    texel = value;
    int layer = residencySoftwareLayer(minLodMap, uvLayer.z);
    return residencyWarnCode(resident, usedLod, int(residencySoftwareHeader(minLodMap, layer).mips), lowWater);
}

#endif
