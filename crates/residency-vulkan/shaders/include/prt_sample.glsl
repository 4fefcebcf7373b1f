// Samples a partially resident volume or 2D array at probes with the residency helpers
// (residencySampleWarn: fallback to the finest resident coarser mip, the residency code with the
// low-water warning) and writes the samples' feedback (misses, prefetch and low-water warnings),
// as a renderer would. Shared by prt_volume.comp (sampler3D) and prt_array.comp (sampler2DArray,
// PRT_ARRAY defined). Probes: (u, v, w or layer, LOD); results: texel, then (code, LOD used,
// min-LOD map value, level that warned).

#include "residency.glsl"

layout(local_size_x = 64) in;

#ifdef PRT_ARRAY
layout(set = 0, binding = 0) uniform sampler2DArray tex;
layout(set = 0, binding = 1) uniform usampler2DArray minLodMap;
#else
layout(set = 0, binding = 0) uniform sampler3D tex;
layout(set = 0, binding = 1) uniform usampler3D minLodMap;
#endif
layout(std430, set = 0, binding = 2) readonly buffer Probes { vec4 probes[]; };
struct Result { vec4 texel; vec4 info; };
layout(std430, set = 0, binding = 3) writeonly buffer Results { Result results[]; };
layout(std430, set = 0, binding = 4) buffer Feedback { uint fbWords[]; };
layout(std430, set = 0, binding = 5) readonly buffer ImageTable { uint table[]; };
layout(push_constant) uniform Push { vec4 defaultValue; uint count; uint lowWater; } pc;

#include "feedback.glsl"

void main() {
    uint i = gl_GlobalInvocationID.x;
    if (i >= pc.count || i >= uint(probes.length()) || i >= uint(results.length())) {
        return;
    }
    vec4 p = probes[i];
    vec4 texel = pc.defaultValue;
    float usedLod;
    int code = residencySampleWarn(tex, minLodMap, p.xyz, p.w, pc.lowWater, texel, usedLod);
    uint minLod = residencyMinLod(minLodMap, p.xyz);
#ifdef PRT_ARRAY
    // The layer the sampler reads (rounded, at least 0; feedback clamps it to the layers).
    feedback(0u, uint(max(p.z + 0.5, 0.0)), p.xy, p.w, minLod);
#else
    feedback(0u, 0u, p.xyz, p.w, minLod);
#endif
    results[i].texel = texel;
    results[i].info = vec4(float(code), usedLod, float(minLod), float(residencyTexelLodWarningFetch(code)));
}
