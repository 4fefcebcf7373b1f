#version 450
// A sliced texture array (Streamer::add_sliced_texture) sampled at probes (u, v, slice, lod) —
// the LOD of the slice's own texture — through residency_slices.glsl: the slice's LOD bias from
// the streamer's buffer added, the finest resident level at or above it, the seed's codes; and
// the samples' feedback, as a renderer writes it. Results: texel (the default value where not
// resident), then (code, LOD used, the slice's bias, min-LOD map value).
#extension GL_ARB_sparse_texture2 : require
#extension GL_GOOGLE_include_directive : require
#include "residency.glsl"

layout(local_size_x = 64) in;

layout(set = 0, binding = 0) uniform sampler2DArray tex;
layout(set = 0, binding = 1) uniform usampler2DArray minLodMap;
layout(std430, set = 0, binding = 2) readonly buffer SliceBias { float residencySliceBias[]; };
layout(std430, set = 0, binding = 3) readonly buffer Probes { vec4 probes[]; };
struct Result { vec4 texel; vec4 info; };
layout(std430, set = 0, binding = 4) writeonly buffer Results { Result results[]; };
layout(std430, set = 0, binding = 5) buffer Feedback { uint fbWords[]; };
layout(std430, set = 0, binding = 6) readonly buffer ImageTable { uint table[]; };
layout(push_constant) uniform Push { vec4 defaultValue; uint count; uint lowWater; uint slot; uint writeFeedback; } pc;

#include "feedback.glsl"
#include "residency_slices.glsl"

void main() {
    uint i = gl_GlobalInvocationID.x;
    if (i >= pc.count || i >= uint(probes.length()) || i >= uint(results.length())) {
        return;
    }
    vec4 p = probes[i];
    int slice = residencySlice(p.z, textureSize(tex, 0).z);
    vec3 uvSlice = vec3(p.xy, float(slice));
    vec4 texel = pc.defaultValue;
    float usedLod;
    int code = residencySliceSampleWarn(tex, minLodMap, uvSlice, p.w, pc.lowWater, texel, usedLod);
    uint minLod = residencyMinLod(minLodMap, uvSlice);
    if (pc.writeFeedback != 0u) {
        residencySliceFeedback(pc.slot, slice, p.xy, p.w, minLod);
    }
    results[i].texel = texel;
    results[i].info = vec4(float(code), usedLod, residencySliceBiasOf(slice), float(minLod));
}
