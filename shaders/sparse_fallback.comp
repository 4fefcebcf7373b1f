#version 450
// Samples a partially resident image at requested LODs, falling back to the finest resident
// coarser mip through the min-LOD map; reports the texel, the residency code and the LOD used.
#extension GL_ARB_sparse_texture2 : require
#extension GL_GOOGLE_include_directive : require
#include "residency.glsl"

layout(local_size_x = 64) in;

layout(set = 0, binding = 0) uniform sampler2D tex;
layout(set = 0, binding = 1) uniform usampler2D minLodMap;
layout(std430, set = 0, binding = 2) readonly buffer Probes { vec4 probes[]; }; // u, v, lod, unused
struct Result { vec4 texel; vec4 info; };                                     // resident, used LOD
layout(std430, set = 0, binding = 3) writeonly buffer Results { Result results[]; };
layout(push_constant) uniform Push { vec4 defaultValue; uint count; } pc;

void main() {
    uint i = gl_GlobalInvocationID.x;
    if (i >= pc.count) {
        return;
    }
    vec4 p = probes[i];
    bool resident;
    float usedLod;
    vec4 texel = residencySampleFallback(tex, minLodMap, p.xy, p.z, pc.defaultValue, resident, usedLod);
    results[i].texel = texel;
    results[i].info = vec4(resident ? 1.0 : 0.0, usedLod, 0.0, 0.0);
}
