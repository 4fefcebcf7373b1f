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
// codes with the low-water warning, residency_codes.glsl), which both provide for 2D too; for 2D
// both also provide residencySampleGradFallback / residencySampleGradWarn (derivatives,
// anisotropic up to 16×, filtered here in the shader). The 2D helpers answer for the whole
// filter footprint (residency_footprint.glsl, docs/tiles.md); the 2D array ones still answer
// from the centre's entry only.

#ifndef RESIDENCY_SOFTWARE_GLSL
#define RESIDENCY_SOFTWARE_GLSL

#include "residency_footprint.glsl"

const uint RESIDENCY_MIN_LOD_NONE = 255u;

// Bounds: the indirection texture is data a caller may get wrong (any R32_UINT image can be bound
// there), so every word is read through residencySoftwareWord, which reads 0 outside the texture's
// size (textureSize), and the header is made usable (tile side, columns and mip count at least 1,
// at most 32 mips) before anything divides or shifts by it. The atlas is sampled with normalized
// coordinates, which the sampler clamps. A header and entries that `Indirection` wrote are read
// as they are.

// Word `texel` of the indirection texture; 0 outside it (negative coordinates included).
uint residencySoftwareWord(usampler2D indirection, ivec2 texel) {
    if (any(greaterThanEqual(uvec2(texel), uvec2(textureSize(indirection, 0))))) {
        return 0u;
    }
    return texelFetch(indirection, texel, 0).r;
}

// Word `texelLayer` (x, y, layer) of a 2D array's indirection texture; 0 outside it.
uint residencySoftwareWord(usampler2DArray indirection, ivec3 texelLayer) {
    if (any(greaterThanEqual(uvec3(texelLayer), uvec3(textureSize(indirection, 0))))) {
        return 0u;
    }
    return texelFetch(indirection, texelLayer, 0).r;
}

// The tile grid of mip `mip` of a `size` texture with `tile`-texel tiles.
ivec2 residencySoftwareTiles(uvec2 size, uint tile, uint mip) {
    uvec2 extent = max(size >> min(mip, 31u), uvec2(1u));
    tile = max(tile, 1u);
    return ivec2((extent + tile - 1u) / tile);
}

struct ResidencySoftware {
    uvec2 size;   // texture extent
    uint tile;    // tile side in texels
    uint border;  // border texels per side in the atlas
    bool sourceBorders; // the borders hold the neighbours' texels, resident or not (header bit 31)
    uint mips;    // mip levels
    uint columns; // atlas slots per row
};

// The header with what divides or shifts made usable: tile side and columns at least 1, 1 to 32
// mips (a header `Indirection` wrote has all of these already).
ResidencySoftware residencySoftwareUsable(ResidencySoftware h) {
    h.tile = max(h.tile, 1u);
    h.columns = max(h.columns, 1u);
    h.mips = clamp(h.mips, 1u, 32u);
    return h;
}

ResidencySoftware residencySoftwareHeader(usampler2D indirection) {
    ResidencySoftware h;
    h.size = uvec2(residencySoftwareWord(indirection, ivec2(0, 0)), residencySoftwareWord(indirection, ivec2(1, 0)));
    h.tile = residencySoftwareWord(indirection, ivec2(2, 0));
    uint borderWord = residencySoftwareWord(indirection, ivec2(3, 0));
    h.border = borderWord & 0x7fffffffu;
    h.sourceBorders = (borderWord >> 31) != 0u;
    h.mips = residencySoftwareWord(indirection, ivec2(4, 0));
    h.columns = residencySoftwareWord(indirection, ivec2(5, 0));
    return residencySoftwareUsable(h);
}

// The entry (slot, data mip) covering `uv` at mip `mip`.
uvec2 residencySoftwareEntry(usampler2D indirection, ResidencySoftware h, vec2 uv, uint mip) {
    uint row = residencySoftwareWord(indirection, ivec2(6 + int(mip), 0));
    vec2 extent = vec2(max(h.size >> mip, uvec2(1u)));
    ivec2 tiles = residencySoftwareTiles(h.size, h.tile, mip);
    ivec2 t = clamp(ivec2(floor(uv * extent / float(h.tile))), ivec2(0), tiles - 1);
    uint e = residencySoftwareWord(indirection, ivec2(t.x, int(row) + t.y));
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
    uint row = residencySoftwareWord(indirection, ivec2(6 + int(mip), 0));
    uint e = residencySoftwareWord(indirection, ivec2(t.x, int(row) + t.y));
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

// A trilinear sample of the atlas at `lod` (clamped to the mips): two bilinear samples, blended.
vec4 residencySoftwareTrilinear(sampler2D atlas, usampler2D indirection, ResidencySoftware h, vec2 uv, float lod) {
    float l = clamp(lod, 0.0, float(h.mips - 1u));
    uint lo = uint(floor(l));
    float f = l - float(lo);
    vec4 a = residencySoftwareLevel(atlas, indirection, h, uv, lo);
    if (f <= 0.0 || lo + 1u >= h.mips) {
        return a;
    }
    return mix(a, residencySoftwareLevel(atlas, indirection, h, uv, lo + 1u), f);
}

// Whether every texel a bilinear filter reads at `mip` for taps centred in the uv box [lo, hi]
// comes from a tile of that mip holding its own data: each tile of the mip the texels fall in
// has an entry whose data mip is `mip` (resident with its chain). A SoftwareTilePool's slot
// border holds its neighbours' texels only while they are resident, so a tap across a tile edge
// needs the neighbour too; a streamer's atlas fills borders from the source (the header's
// INDIRECTION_SOURCE_BORDERS bit), so there only the taps' own tiles need to be. More than RESIDENCY_FOOTPRINT_TILES tiles along an axis is not resident.
bool residencyMipResident(sampler2D atlas, usampler2D indirection, vec2 lo, vec2 hi, int mip) {
    ResidencySoftware h = residencySoftwareHeader(indirection);
    if (mip < 0 || uint(mip) >= h.mips) {
        return false;
    }
    ivec2 extent = ivec2(max(h.size >> uint(mip), uvec2(1u)));
    int side = int(min(h.tile, 1u << 30));
    ivec2 a;
    ivec2 b;
    if (h.sourceBorders && h.border >= 1u) {
        // Each tap reads its own tile's slot (residencySoftwareLevel), whose border holds the
        // neighbours' texels from the source: only the taps' own tiles need to be resident.
        ivec2 tiles = residencySoftwareTiles(h.size, h.tile, uint(mip));
        a = clamp(ivec2(floor(lo * vec2(extent) / float(h.tile))), ivec2(0), tiles - 1);
        b = clamp(ivec2(floor(hi * vec2(extent) / float(h.tile))), ivec2(0), tiles - 1);
    } else {
        ivec2 t0;
        ivec2 t1;
        residencyBilinearTexels(lo, hi, extent, t0, t1);
        a = t0 / side;
        b = t1 / side;
    }
    if (any(greaterThanEqual(b - a, ivec2(RESIDENCY_FOOTPRINT_TILES)))) {
        return false;
    }
    uint row = residencySoftwareWord(indirection, ivec2(6 + mip, 0));
    for (int ty = a.y; ty <= b.y; ty++) {
        for (int tx = a.x; tx <= b.x; tx++) {
            if ((residencySoftwareWord(indirection, ivec2(tx, int(row) + ty)) >> 24) != uint(mip)) {
                return false;
            }
        }
    }
    return true;
}

int residencyLevels(sampler2D atlas, usampler2D indirection) {
    return int(residencySoftwareHeader(indirection).mips);
}

vec2 residencySize(sampler2D atlas, usampler2D indirection) {
    return vec2(residencySoftwareHeader(indirection).size);
}

#include "residency_search.glsl"

// A trilinear sample at `lod` at the finest LOD at or above it whose whole footprint (the
// bilinear neighbours of `uv` at each mip blended) comes from resident tiles, as the hardware
// path's residencySampleFallback: two bilinear samples from the atlas, blended. `usedLod` is -1
// and the default value is returned when no LOD's footprint is resident.
// residencySampleFallbackFrom: the same with `minLod` = residencyMinLod(minLodMap, uv) read by the
// caller (vt_quad.glsl reads it once for the sample and its feedback).
vec4 residencySampleFallbackFrom(sampler2D tex, usampler2D minLodMap, vec2 uv, float lod, vec4 defaultValue,
                                 uint minLod, out bool resident, out float usedLod) {
    ResidencyFootprint f = residencyFootprintLodFrom(tex, minLodMap, uv, vec2(0.0), lod, RESIDENCY_NO_SLACK,
                                                     RESIDENCY_BY_LOD, minLod);
    usedLod = f.lod;
    resident = f.found;
    if (!f.found) {
        return defaultValue;
    }
    return residencySoftwareTrilinear(tex, minLodMap, residencySoftwareHeader(minLodMap), uv, usedLod);
}

vec4 residencySampleFallback(sampler2D tex, usampler2D minLodMap, vec2 uv, float lod, vec4 defaultValue,
                             out bool resident, out float usedLod) {
    return residencySampleFallbackFrom(tex, minLodMap, uv, lod, defaultValue, residencyMinLod(minLodMap, uv),
                                       resident, usedLod);
}

// The hardware path's residencySampleGradFallback on the atlas, filtered in the shader as
// Vulkan's anisotropic reference: N = ceil(η) trilinear samples (two bilinear atlas reads each)
// at uv + (i/(N+1) − ½)·(major derivative), i = 1..N, averaged, at λ = log2(ρmax/η); N = 1 is
// the plain trilinear sample. Its cost grows with N (up to 16 taps: 32 atlas reads and their
// indirection reads). No LOD slack: the shader computes the LOD it reads.
vec4 residencySampleGradFallback(sampler2D tex, usampler2D minLodMap, vec2 uv, vec2 dPdx, vec2 dPdy,
                                 float maxAnisotropy, vec4 defaultValue, out bool resident, out float usedLod) {
    ResidencySoftware h = residencySoftwareHeader(minLodMap);
    vec2 size = vec2(h.size);
    ResidencyFootprint f = residencyGradFootprint(tex, minLodMap, uv, dPdx, dPdy, maxAnisotropy, RESIDENCY_NO_SLACK,
                                                  RESIDENCY_BY_SCALE);
    usedLod = f.lod;
    resident = f.found;
    if (!f.found) {
        return defaultValue;
    }
    int n = maxAnisotropy > 1.0 ? residencyAnisoTaps(dPdx, dPdy, size, maxAnisotropy) : 1;
    if (n == 1) {
        return residencySoftwareTrilinear(tex, minLodMap, h, uv, usedLod);
    }
    vec2 major = (length(dPdx * size) >= length(dPdy * size) ? dPdx : dPdy) * f.scale;
    vec4 sum = vec4(0.0);
    for (int i = 1; i <= n; i++) {
        sum += residencySoftwareTrilinear(tex, minLodMap, h, uv + (float(i) / float(n + 1) - 0.5) * major, usedLod);
    }
    return sum / float(n);
}

// ---- 2D arrays: an indirection texture with one layer per layer (a usampler2DArray) over the ---
// one atlas; coordinates vec3(u, v, layer). The same functions, reading the sample's layer.

ResidencySoftware residencySoftwareHeader(usampler2DArray indirection, int layer) {
    ResidencySoftware h;
    h.size = uvec2(residencySoftwareWord(indirection, ivec3(0, 0, layer)), residencySoftwareWord(indirection, ivec3(1, 0, layer)));
    h.tile = residencySoftwareWord(indirection, ivec3(2, 0, layer));
    uint borderWord = residencySoftwareWord(indirection, ivec3(3, 0, layer));
    h.border = borderWord & 0x7fffffffu;
    h.sourceBorders = (borderWord >> 31) != 0u;
    h.mips = residencySoftwareWord(indirection, ivec3(4, 0, layer));
    h.columns = residencySoftwareWord(indirection, ivec3(5, 0, layer));
    return residencySoftwareUsable(h);
}

int residencySoftwareLayer(usampler2DArray indirection, float layer) {
    return clamp(int(layer + 0.5), 0, textureSize(indirection, 0).z - 1);
}

uvec2 residencySoftwareEntry(usampler2DArray indirection, ResidencySoftware h, vec2 uv, int layer, uint mip) {
    uint row = residencySoftwareWord(indirection, ivec3(6 + int(mip), 0, layer));
    vec2 extent = vec2(max(h.size >> mip, uvec2(1u)));
    ivec2 tiles = residencySoftwareTiles(h.size, h.tile, mip);
    ivec2 t = clamp(ivec2(floor(uv * extent / float(h.tile))), ivec2(0), tiles - 1);
    uint e = residencySoftwareWord(indirection, ivec3(t.x, int(row) + t.y, layer));
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
    uint row = residencySoftwareWord(indirection, ivec3(6 + int(mip), 0, layer));
    uint e = residencySoftwareWord(indirection, ivec3(t.x, int(row) + t.y, layer));
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

// residencySampleWarn of a gradient sample (residencySampleGradFallback).
int residencySampleGradWarn(sampler2D tex, usampler2D minLodMap, vec2 uv, vec2 dPdx, vec2 dPdy, float maxAnisotropy,
                            uint lowWater, inout vec4 texel, out float usedLod) {
    bool resident;
    vec4 value = residencySampleGradFallback(tex, minLodMap, uv, dPdx, dPdy, maxAnisotropy, texel, resident, usedLod);
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
