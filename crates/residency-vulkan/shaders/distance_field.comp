#version 450
// Ray-marches a partially resident distance-field volume (the seed's "volume textures + ray
// marching") with raymarch.glsl's residencyMarch: one ray per invocation from a buffer of rays
// (texel coordinates of mip 0), each stopping at a hit, where it leaves the volume, or at the
// step limit; a sample of a non-resident brick reads as the maximum step (the residency default
// value). residency_vulkan's `DistanceFieldVolume` makes the volume and marches the same rays on
// the CPU (`march_cpu`), bit for bit.
#extension GL_ARB_sparse_texture2 : require
#extension GL_GOOGLE_include_directive : require
#include "raymarch.glsl"

layout(local_size_x = 64) in;

layout(set = 0, binding = 0) uniform sampler3D field;
// Per ray two vec4s: (origin.xyz, 0), (direction.xyz, 0).
layout(set = 0, binding = 1) readonly buffer Rays { vec4 rays[]; };
// Per ray: (t, steps, samples of non-resident bricks, 1 at a hit else 0).
layout(set = 0, binding = 2) writeonly buffer Results { vec4 results[]; };

layout(push_constant) uniform Push {
    float maxStep;      // the residency default value
    float hitDistance;  // a sample below it is a hit
    uint stepLimit;     // samples per ray at most (and never more than RESIDENCY_MARCH_STEP_CAP)
    uint count;         // rays
} pc;

void main() {
    uint i = gl_GlobalInvocationID.x;
    // The ray's two words and its result, when the count and the bound ranges hold them.
    if (i >= pc.count || i >= uint(results.length()) || i >= uint(rays.length()) / 2u) {
        return;
    }
    vec3 origin = rays[2u * i].xyz;
    vec3 dir = rays[2u * i + 1u].xyz;
    int limit = int(min(pc.stepLimit, uint(RESIDENCY_MARCH_STEP_CAP)));
    ResidencyMarch m = residencyMarch(field, origin, dir, pc.maxStep, pc.hitDistance, limit);
    results[i] = vec4(m.t, float(m.steps), float(m.missing), m.hit ? 1.0 : 0.0);
}
