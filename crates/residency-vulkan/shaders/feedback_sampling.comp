#version 450
// Evaluates feedbackPixelWrites over a grid of pixels for one frame: the test compares it with
// the CPU rule (FeedbackSampling::pixel_writes).
#extension GL_GOOGLE_include_directive : require

layout(local_size_x = 8, local_size_y = 8) in;

layout(std430, set = 0, binding = 0) buffer Out { uint writes[]; };
layout(std430, set = 0, binding = 1) buffer Feedback { uint fbWords[]; };       // unused
layout(std430, set = 0, binding = 2) readonly buffer ImageTable { uint table[]; }; // unused
layout(push_constant) uniform Push { uint frame; uint stride; uint interval; uint width; } pc;

#include "feedback.glsl"

void main() {
    uvec2 p = gl_GlobalInvocationID.xy;
    // Pixels past the row width, or whose word is past the bound range, write nothing.
    uint at = p.y * pc.width + p.x;
    if (p.x >= pc.width || at >= uint(writes.length())) {
        return;
    }
    writes[at] = feedbackPixelWrites(p, pc.frame, pc.stride, pc.interval) ? 1u : 0u;
}
