// Samples a partially resident texture at requested LODs, falling back to the finest resident
// coarser mip; reports the texel, whether it was resident and the LOD used. Shared by
// sparse_fallback.comp (hardware: sparse image + min-LOD map) and sparse_fallback_software.comp
// (software: tile-cache atlas + indirection texture): the same code over either helper.

#ifdef RESIDENCY_SOFTWARE
#include "residency_software.glsl"
#else
#include "residency.glsl"
#endif

layout(local_size_x = 64) in;

layout(set = 0, binding = 0) uniform sampler2D tex;
layout(set = 0, binding = 1) uniform usampler2D minLodMap;
layout(std430, set = 0, binding = 2) readonly buffer Probes { vec4 probes[]; }; // u, v, lod, unused
struct Result { vec4 texel; vec4 info; };                                     // resident, used LOD
layout(std430, set = 0, binding = 3) writeonly buffer Results { Result results[]; };
layout(push_constant) uniform Push { vec4 defaultValue; uint count; } pc;

void main() {
    uint i = gl_GlobalInvocationID.x;
    if (i >= pc.count || i >= uint(probes.length()) || i >= uint(results.length())) {
        return;
    }
    vec4 p = probes[i];
    bool resident;
    float usedLod;
    vec4 texel = residencySampleFallback(tex, minLodMap, p.xy, p.z, pc.defaultValue, resident, usedLod);
    results[i].texel = texel;
    results[i].info = vec4(resident ? 1.0 : 0.0, usedLod, 0.0, 0.0);
}
