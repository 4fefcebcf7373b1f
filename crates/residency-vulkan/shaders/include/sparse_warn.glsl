// Samples a partially resident 2D texture at probes with residencySampleWarn (the min-LOD
// fallback and the seed's residency code with the low-water warning) and reports the texel and
// the code. Shared by sparse_warn.comp (hardware: sparse image + min-LOD map) and
// sparse_warn_software.comp (software: atlas + indirection): the same code over either helper.

#ifdef RESIDENCY_SOFTWARE
#include "residency_software.glsl"
#else
#include "residency.glsl"
#endif

layout(local_size_x = 64) in;

layout(set = 0, binding = 0) uniform sampler2D tex;
layout(set = 0, binding = 1) uniform usampler2D minLodMap;
layout(std430, set = 0, binding = 2) readonly buffer Probes { vec4 probes[]; }; // u, v, lod, unused
struct Result { vec4 texel; vec4 info; };                // code, LOD used, level that warned, 0
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
    int code = residencySampleWarn(tex, minLodMap, p.xy, p.z, pc.lowWater, texel, usedLod);
    results[i].texel = texel;
    results[i].info = vec4(float(code), usedLod, float(residencyTexelLodWarningFetch(code)), 0.0);
}
