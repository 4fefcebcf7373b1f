#version 450
// Writes the shader feedback of a list of samples (uv, LOD, min-LOD map value), as a renderer's
// pixels would: the test compares the read-back with the CPU model of the same samples.
#extension GL_GOOGLE_include_directive : require

layout(local_size_x = 64) in;

layout(std430, set = 0, binding = 0) buffer Feedback { uint fbWords[]; };
layout(std430, set = 0, binding = 1) readonly buffer ImageTable { uint table[]; };
layout(std430, set = 0, binding = 2) readonly buffer Samples { vec4 samples[]; }; // u, v, lod, minLod
layout(push_constant) uniform Push { uint count; } pc;

#include "feedback.glsl"

void main() {
    uint i = gl_GlobalInvocationID.x;
    if (i >= pc.count || i >= uint(samples.length())) {
        return;
    }
    vec4 s = samples[i];
    feedback(0u, 0u, s.xy, s.z, uint(s.w));
}
