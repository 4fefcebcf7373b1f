#version 450
// Ray-marches a sparse distance-field volume (the seed's "volume textures + ray marching"): only
// the bricks near a surface are resident, and a sample of a non-resident brick returns the
// residency default value, the maximum step distance (every texel of such a brick is at least that
// far from the surface, so the step cannot cross it). Distances are in texels; one ray per pixel,
// orthographic, origin on the z = 0 face at the pixel's centre, direction pc.dir.xyz.
#extension GL_ARB_sparse_texture2 : require
#extension GL_GOOGLE_include_directive : require
#include "residency.glsl"

layout(local_size_x = 8, local_size_y = 8) in;

layout(set = 0, binding = 0) uniform sampler3D field;
// Per pixel: (t at the hit or -1, steps, samples of non-resident bricks, 0).
layout(set = 0, binding = 1) writeonly buffer Pixels { vec4 pixels[]; };

layout(push_constant) uniform Push {
    vec4 dir;      // xyz: the ray direction; w: the maximum step (the residency default value)
    ivec4 sizes;   // x, y: the image; z: the volume's side in texels; w: the step limit
} pc;

void main() {
    ivec2 px = ivec2(gl_GlobalInvocationID.xy);
    if (any(greaterThanEqual(px, pc.sizes.xy))) {
        return;
    }
    float side = float(pc.sizes.z);
    vec3 origin = vec3((vec2(px) + 0.5) * side / vec2(pc.sizes.xy), 0.0);
    float t = 0.0;
    float hit = -1.0;
    int steps = 0;
    int missing = 0;
    for (; steps < pc.sizes.w; steps++) {
        vec3 p = origin + t * pc.dir.xyz;
        if (any(lessThan(p, vec3(0.0))) || any(greaterThanEqual(p, vec3(side)))) {
            break;
        }
        bool resident;
        float d = residencyFetch(field, ivec3(floor(p)), 0, vec4(pc.dir.w), resident).r;
        missing += resident ? 0 : 1;
        if (d < 0.5) {
            hit = t;
            break;
        }
        t += d;
    }
    // The pixel's word, when the bound range holds it (residencyFetch above reads nothing outside
    // the volume, whatever `sizes.z` says).
    uint at = uint(px.y) * uint(pc.sizes.x) + uint(px.x);
    if (at < uint(pixels.length())) {
        pixels[at] = vec4(hit, float(steps), float(missing), 0.0);
    }
}
