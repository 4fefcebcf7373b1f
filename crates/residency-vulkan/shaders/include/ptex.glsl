// ptex.glsl — PRT-Ptex sampling (layout: `residency_core::tiles::ptex`, docs/tiles.md "PRT-Ptex").
//
// Per-face textures live in a sparse 2D array of one slice per level: slice L holds a slot of
// `finestSlot >> L` texels for each face that has level L, the face's texels inside a one-texel
// border copied from its neighbours, so a bilinear sample anywhere in a face (edges included)
// is seamless. The face table says, per face, its finest resident level and each level's slot.
//
// Declare before including: `readonly buffer PtexFaces { uint ptexTable[]; }` (the table
// `PtexTexture::table` holds) at a binding of your choice; pass the array
// (`PtexTexture::image` with `PtexTexture::sampler`, a linear sampler) to the functions.
//
// - `ptexLevels(face, wanted)`: the manual trilinear filter's two levels and blend for the level
//   wanted (slice units, 0 the finest): clamped to the face's finest resident level (the MIP
//   fallback: a face whose finer levels are not resident is sampled at its finest resident one)
//   and to the last level.
// - `ptexSampleLevel(slices, face, uv, level)`: bilinear sample of one level's slot at face
//   coordinates uv in [0, 1]².
// - `ptexSample(slices, face, uv, wanted)`: both, blended (the seed's "manual trilinear filtering").
//   A fragment shader's level wanted is log2 of the texels a pixel spans at level 0:
//   `log2(max(length(dFdx(uv)), length(dFdy(uv))) * float(finestSlot - 2))`.
//
// Bounds (docs/reliability.md, "shipped shaders bound every index"): the face, the level and every
// table word are data a caller may get wrong. Every table read is compared with
// `ptexTable.length()` (a word past it reads 0); a face whose 16-word record is not inside the
// table, or not below the header's face count, samples vec4(0) at level 0; levels are clamped to
// 1..12 (a record's slot words) and every level read is below that; slot sides are at least 2 and
// the slice side at least 1 (no division by 0); the slices are sampled with normalized coordinates
// and a layer below the levels, which the sampler clamps. With a table `PtexLayout` made, none of
// these bounds changes a sample.

#ifndef RESIDENCY_PTEX_GLSL
#define RESIDENCY_PTEX_GLSL

const uint PTEX_RECORD_WORDS = 16u;
const uint PTEX_MAX_LEVELS = 12u;

// Word `w` of the table, 0 past its end.
uint ptexWord(uint w) {
    return w < uint(ptexTable.length()) ? ptexTable[w] : 0u;
}

// Whether `face` has a record: below the header's count and inside the table.
bool ptexHasFace(uint face) {
    uint records = uint(ptexTable.length()) / PTEX_RECORD_WORDS;
    return face < ptexWord(0u) && records > 0u && face < records - 1u;
}

// Levels of the layout, 1..12.
uint ptexLevelCount() {
    return clamp(ptexWord(1u), 1u, PTEX_MAX_LEVELS);
}

// The two levels and the blend of the manual trilinear filter: x = level 0, y = level 1, z = blend.
vec3 ptexLevels(uint face, float wanted) {
    uint levels = ptexLevelCount();
    if (!ptexHasFace(face)) {
        return vec3(0.0);
    }
    uint finest = min(ptexWord((face + 1u) * PTEX_RECORD_WORDS), levels - 1u);
    float level = clamp(wanted, float(finest), float(levels - 1u));
    uint l0 = min(uint(max(floor(level), 0.0)), levels - 1u); // a NaN level is still a level of the record
    uint l1 = min(l0 + 1u, levels - 1u);
    return vec3(float(l0), float(l1), level - float(l0));
}

// Bilinear sample of `face`'s slot at `level` (below 12) at face coordinates `uv`.
vec4 ptexSampleLevel(sampler2DArray slices, uint face, vec2 uv, uint level) {
    if (!ptexHasFace(face)) {
        return vec4(0.0);
    }
    level = min(level, ptexLevelCount() - 1u);
    uint slot = max(ptexWord(2u) >> level, 2u);
    float side = float(max(ptexWord(3u), 1u));
    uint word = ptexWord((face + 1u) * PTEX_RECORD_WORDS + 4u + level);
    vec2 origin = vec2(float(word & 0xFFFFu), float(word >> 16u));
    vec2 texel = origin + 1.0 + clamp(uv, 0.0, 1.0) * float(slot - 2u);
    // The layer as an exact integer from the level's own index: the NVIDIA 580.159.04 compiler
    // sampled the wrong layer when it came from a float a caller also names `level`
    // (docs/devices/README.md, 2026-12-01).
    return textureLod(slices, vec3(texel / side, float(int(level))), 0.0);
}

// Manual trilinear sample of `face` at `uv` and the level wanted, with the MIP fallback.
vec4 ptexSample(sampler2DArray slices, uint face, vec2 uv, float wanted) {
    vec3 l = ptexLevels(face, wanted);
    uint l0 = uint(l.x);
    uint l1 = uint(l.y);
    return mix(ptexSampleLevel(slices, face, uv, l0), ptexSampleLevel(slices, face, uv, l1), l.z);
}

#endif
