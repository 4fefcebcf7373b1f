// raymarch.glsl — ray-marching a partially resident distance-field volume (the seed's "volume
// textures + ray marching: default value is maximum step distance for ray marching distance
// fields").
//
// Include after `#extension GL_ARB_sparse_texture2 : require`. The volume is a sparse 3D image
// of distances in texels (R32_SFLOAT, negative inside a surface) of which only the bricks near a
// surface are resident: those with a texel nearer than the maximum step (residency_vulkan's
// `DistanceFieldVolume` decides and commits them). A fetch of a non-resident brick returns the
// residency default value, the maximum step: every texel there is at least that far from every
// surface, so the march steps no further than the true distance and never crosses a surface.
//
// The rule, the same as residency_core::tiles::distance_field::march (bit for bit: each step is
// `precise`, one multiplication and two additions rounded separately): from `origin` (texel
// coordinates of mip 0, inside the volume) along `dir` (unit length), fetch the texel under the
// point (floor); a distance below `hitDistance` is a hit; else advance by it. The march stops
// without a hit when the point leaves the volume (a non-finite point does) or after `stepLimit`
// samples, never more than RESIDENCY_MARCH_STEP_CAP (define it before the include to change
// it; the Rust side's MAX_MARCH_STEPS is the default, 1024).
//
// Bounds: residencyFetch reads nothing outside the image (residency.glsl), and the loop's bound is
// a constant, whatever the caller passes.
//
// Hardware path only: the software residency path (residency_software.glsl) lays out 2D images
// and 2D arrays, not volumes, so there is no software twin; the Rust API refuses the software
// path for a volume with a typed error.

#ifndef RESIDENCY_RAYMARCH_GLSL
#define RESIDENCY_RAYMARCH_GLSL

#include "residency.glsl"

#ifndef RESIDENCY_MARCH_STEP_CAP
#define RESIDENCY_MARCH_STEP_CAP 1024
#endif

// Where a march stopped.
struct ResidencyMarch {
    float t;      // at the hit, or where the march stopped (the point that left, or the last one)
    int steps;    // samples taken
    int missing;  // samples of non-resident bricks (each read as the maximum step)
    bool hit;
};

ResidencyMarch residencyMarch(sampler3D field, vec3 origin, vec3 dir, float maxStep, float hitDistance,
                              int stepLimit) {
    ResidencyMarch m = ResidencyMarch(0.0, 0, 0, false);
    vec3 side = vec3(textureSize(field, 0));
    int limit = clamp(stepLimit, 0, RESIDENCY_MARCH_STEP_CAP);
    precise float t = 0.0;
    for (int i = 0; i < RESIDENCY_MARCH_STEP_CAP; i++) {
        if (i >= limit) {
            break;
        }
        precise vec3 p = origin + t * dir;
        // NaN compares false: a non-finite point is outside.
        if (!(all(greaterThanEqual(p, vec3(0.0))) && all(lessThan(p, side)))) {
            break;
        }
        bool resident;
        float d = residencyFetch(field, ivec3(floor(p)), 0, vec4(maxStep), resident).r;
        m.steps += 1;
        m.missing += resident ? 0 : 1;
        if (d < hitDistance) {
            m.hit = true;
            break;
        }
        t += d;
    }
    m.t = t;
    return m;
}

#endif
