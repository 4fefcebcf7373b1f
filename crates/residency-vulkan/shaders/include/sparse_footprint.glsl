// Samples a partially resident 2D texture and a fully resident twin of it at probes with the
// footprint-exact helpers, for the tests of their codes: explicit-LOD samples
// (residencySampleFallback), gradient samples (residencySampleGradFallback, anisotropic up to
// the push constant's maxAnisotropy) and their warn codes (residencySampleGradWarn). The twin
// is sampled where the partial sample was resident, at the LOD it used (derivatives scaled as it
// scaled them), so a resident answer can be checked against the data it claims to have read.
// Shared by sparse_footprint.comp (hardware) and sparse_footprint_software.comp (software: the
// atlas bound twice, two indirections).

#ifdef RESIDENCY_SOFTWARE
#include "residency_software.glsl"
#else
#include "residency.glsl"
#endif

layout(local_size_x = 64) in;

layout(set = 0, binding = 0) uniform sampler2D tex;
layout(set = 0, binding = 1) uniform usampler2D minLodMap;
layout(set = 0, binding = 2) uniform sampler2D twin;
layout(set = 0, binding = 3) uniform usampler2D twinMap;
// a = (u, v, lod, mode: 0 explicit LOD, 1 gradients, 2 gradients with the warn code, 3 gradients
// with the hardware's LOD clamp where compiled with RESIDENCY_MIN_LOD_CLAMP), b = (dPdx, dPdy)
struct Probe { vec4 a; vec4 b; };
layout(std430, set = 0, binding = 4) readonly buffer Probes { Probe probes[]; };
struct Result { vec4 texel; vec4 twinTexel; vec4 info; }; // info: resident, LOD used, code, twin resident
layout(std430, set = 0, binding = 5) writeonly buffer Results { Result results[]; };
layout(push_constant) uniform Push { vec4 defaultValue; uint count; float maxAnisotropy; uint lowWater; } pc;

void main() {
    uint i = gl_GlobalInvocationID.x;
    if (i >= pc.count || i >= uint(probes.length()) || i >= uint(results.length())) {
        return;
    }
    Probe p = probes[i];
    vec2 uv = p.a.xy;
    vec2 dx = p.b.xy;
    vec2 dy = p.b.zw;
    bool resident = false;
    bool twinResident = false;
    float usedLod;
    float twinLod;
    float code = 0.0;
    vec4 texel = pc.defaultValue;
    vec4 twinTexel = pc.defaultValue;
    if (p.a.w == 0.0) {
        texel = residencySampleFallback(tex, minLodMap, uv, p.a.z, pc.defaultValue, resident, usedLod);
        if (resident) {
            twinTexel = residencySampleFallback(twin, twinMap, uv, usedLod, pc.defaultValue, twinResident, twinLod);
        }
#ifdef RESIDENCY_MIN_LOD_CLAMP
    } else if (p.a.w == 3.0) {
        texel = residencySampleGradClamp(tex, minLodMap, uv, dx, dy, pc.maxAnisotropy, pc.defaultValue, resident,
                                         usedLod);
        if (resident) {
            int c = sparseTextureGradClampARB(twin, uv, dx, dy, usedLod, twinTexel);
            twinResident = sparseTexelsResidentARB(c);
        }
#endif
    } else {
        if (p.a.w == 1.0) {
            texel = residencySampleGradFallback(tex, minLodMap, uv, dx, dy, pc.maxAnisotropy, pc.defaultValue,
                                                resident, usedLod);
        } else {
            int c = residencySampleGradWarn(tex, minLodMap, uv, dx, dy, pc.maxAnisotropy, pc.lowWater, texel, usedLod);
            resident = residencyTexelResident(c);
            code = float(c);
        }
        if (resident) {
            float lambda = residencyGradLod(dx, dy, residencySize(tex, minLodMap), pc.maxAnisotropy);
            float s = exp2(max(usedLod - lambda, 0.0));
            twinTexel = residencySampleGradFallback(twin, twinMap, uv, dx * s, dy * s, pc.maxAnisotropy,
                                                    pc.defaultValue, twinResident, twinLod);
        }
    }
    results[i].texel = texel;
    results[i].twinTexel = twinTexel;
    results[i].info = vec4(resident ? 1.0 : 0.0, usedLod, code, twinResident ? 1.0 : 0.0);
}
