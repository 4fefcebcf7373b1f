#version 450
// Reads texels of a partially resident image with residency codes: resident texels come back
// exactly, non-resident ones as the default value with resident = 0; a probe outside the image (its
// LOD or texel) reads nothing and reports the default value, not resident.
#extension GL_ARB_sparse_texture2 : require
#extension GL_GOOGLE_include_directive : require
#include "residency.glsl"

layout(local_size_x = 64) in;

layout(set = 0, binding = 0) uniform sampler2D tex;
layout(std430, set = 0, binding = 1) readonly buffer Probes { ivec4 probes[]; }; // x, y, lod, unused
struct Result { vec4 texel; uvec4 info; };                                        // info.x = resident
layout(std430, set = 0, binding = 2) writeonly buffer Results { Result results[]; };
layout(push_constant) uniform Push { vec4 defaultValue; uint count; } pc;

void main() {
    uint i = gl_GlobalInvocationID.x;
    if (i >= pc.count || i >= uint(probes.length()) || i >= uint(results.length())) {
        return;
    }
    ivec4 p = probes[i];
    bool resident;
    vec4 texel = residencyFetch(tex, p.xy, p.z, pc.defaultValue, resident);
    results[i].texel = texel;
    results[i].info = uvec4(resident ? 1u : 0u, 0u, 0u, 0u);
}
