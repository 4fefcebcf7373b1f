#version 450
// A 2D array on the software path: the one atlas (sampler2D) and an indirection texture with one
// layer per layer (usampler2DArray); samples probes (u, v, layer, LOD) with residencySampleWarn.
// Results: texel, then (code, LOD used, min-LOD, level that warned).
#extension GL_GOOGLE_include_directive : require
#include "residency_software.glsl"

layout(local_size_x = 64) in;

layout(set = 0, binding = 0) uniform sampler2D atlas;
layout(set = 0, binding = 1) uniform usampler2DArray indirection;
layout(std430, set = 0, binding = 2) readonly buffer Probes { vec4 probes[]; };
struct Result { vec4 texel; vec4 info; };
layout(std430, set = 0, binding = 3) writeonly buffer Results { Result results[]; };
layout(push_constant) uniform Push { vec4 defaultValue; uint count; uint lowWater; } pc;

void main() {
    uint i = gl_GlobalInvocationID.x;
    if (i >= pc.count || i >= uint(probes.length()) || i >= uint(results.length())) {
        return;
    }
    vec4 p = probes[i];
    vec4 texel = pc.defaultValue;
    float usedLod;
    int code = residencySampleWarn(atlas, indirection, p.xyz, p.w, pc.lowWater, texel, usedLod);
    results[i].texel = texel;
    results[i].info = vec4(float(code), usedLod, float(residencyMinLod(indirection, p.xyz)),
                           float(residencyTexelLodWarningFetch(code)));
}
