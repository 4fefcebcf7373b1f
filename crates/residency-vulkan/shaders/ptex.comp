#version 450
// PRT-Ptex (the seed's part 3): per-face textures packed in a sparse 2D array, one slice per
// resolution ("multires slices"): slice L holds faces at a slot of finestSlot >> L texels, a
// one-texel border of the neighbouring faces around an interior of slot - 2, so bilinear
// filtering inside a slot is seamless. A face of finest level F has a slot in slices F..levels-1;
// only the tiles under slots are resident. Manual trilinear filtering: the level wanted is clamped
// to the face's finest level (the MIP fallback), and the two slices around it are sampled
// bilinearly and blended. Probes are (face, u, v, level wanted); results are the colour, then
// (level 0, level 1, blend, 0).
//
// Bounds: a probe whose face has no 8 words inside the bound faces buffer writes
// vec4(0) and (0, 0, 0, 0); `levels` is clamped to 1..7 (a face record has 7 slot words) and every
// slice read is below it; a slot side is at least 2 and a row at least 1 (no division by 0). The slices are sampled with
// normalized coordinates and a layer that the sampler clamps.
layout(local_size_x = 64) in;

layout(set = 0, binding = 0) uniform sampler2DArray slices;
// Per face, 8 words: its finest level, then its slot index in each level's slice.
layout(set = 0, binding = 1) readonly buffer Faces { uint faces[]; };
layout(set = 0, binding = 2) readonly buffer Probes { vec4 probes[]; };
layout(set = 0, binding = 3) writeonly buffer Results { vec4 results[]; };

layout(push_constant) uniform Push {
    uint count;       // probes
    uint side;        // the array's width and height in texels
    uint levels;      // slices
    uint finestSlot;  // the slot side of slice 0
} pc;

// Bilinear sample of `face` at face coordinates `uv` in the slice of `level`.
// `face` has a record inside the faces buffer and `slice` < 7 (the caller checked).
vec4 faceLevel(uint face, vec2 uv, uint slice) {
    uint slot = max(pc.finestSlot >> slice, 2u);
    uint perRow = max(pc.side / slot, 1u);
    uint index = faces[face * 8u + 1u + slice];
    vec2 origin = vec2(float(index % perRow), float(index / perRow)) * float(slot);
    vec2 texel = origin + 1.0 + uv * float(slot - 2u);
    // The layer as an exact integer from the slice's own index. Written as `float(level)` with a
    // parameter named `level` (the caller's blended float level has that name too), the NVIDIA
    // 580.159.04 driver sampled layer round(caller's level) for the first call: 6080 of 8640
    // samples wrong on the H200, 0 on lavapipe (2026-12-01). This form samples the right layer
    // on both.
    return textureLod(slices, vec3(texel / float(pc.side), float(int(slice))), 0.0);
}

void main() {
    uint i = gl_GlobalInvocationID.x;
    if (i >= pc.count || i >= uint(probes.length()) || i >= uint(results.length()) / 2u) {
        return;
    }
    vec4 probe = probes[i];
    uint face = uint(max(probe.x, 0.0));
    if (face >= uint(faces.length()) / 8u) {
        results[2u * i] = vec4(0.0);
        results[2u * i + 1u] = vec4(0.0);
        return;
    }
    vec2 uv = clamp(probe.yz, 0.0, 1.0);
    uint levels = clamp(pc.levels, 1u, 7u);
    float level = clamp(probe.w, float(min(faces[face * 8u], levels - 1u)), float(levels - 1u));
    uint l0 = min(uint(floor(level)), levels - 1u); // a NaN level is still a slice of the record
    uint l1 = min(l0 + 1u, levels - 1u);
    float blend = level - float(l0);
    vec4 colour = mix(faceLevel(face, uv, l0), faceLevel(face, uv, l1), blend);
    results[2u * i] = colour;
    results[2u * i + 1u] = vec4(float(l0), float(l1), blend, 0.0);
}
