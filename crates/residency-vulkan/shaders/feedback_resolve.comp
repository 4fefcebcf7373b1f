#version 450
// Folds a frame's deferred feedback records (feedback_deferred.glsl) into its feedback buffer:
// per written record, `feedback(slot, layer, uv, lambda, minLod)` of feedback.glsl (its table
// reads, bounds and atomics), then the record is zeroed for the next frame that writes into the
// buffer. A record's fields are not trusted: feedback() drops an unknown slot, a mip past the
// entry and a tile past the image; a record without the written bit is skipped.
//   binding 0: buffer FeedbackRecords { uvec4 fbRecords[]; } (read, then zeroed)
//   binding 1: buffer Feedback { uint fbWords[]; } (the frame's feedback buffer, atomics)
//   binding 2: readonly buffer ImageTable { uint table[]; }
//   push: uint count (records to visit from 0; the rest of the buffer is not read)
#extension GL_GOOGLE_include_directive : require

layout(local_size_x = 64) in;

layout(std430, set = 0, binding = 0) buffer FeedbackRecords { uvec4 fbRecords[]; };
layout(std430, set = 0, binding = 1) buffer Feedback { uint fbWords[]; };
layout(std430, set = 0, binding = 2) readonly buffer ImageTable { uint table[]; };

layout(push_constant) uniform Push {
    uint count;
} pc;

#include "feedback.glsl"
#include "feedback_deferred.glsl"

void main() {
    // A 2D grid of workgroups (rows of at most 65535), 64 records each.
    uint i = (gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x) * 64u + gl_LocalInvocationID.x;
    if (i >= pc.count || i >= uint(fbRecords.length())) {
        return;
    }
    uvec4 r = fbRecords[i];
    if ((r.w & FEEDBACK_RECORD_WRITTEN) == 0u) {
        return;
    }
    fbRecords[i] = uvec4(0u);
    feedback(r.w & 0xFFFFu, (r.w >> 24u) & 127u, vec2(uintBitsToFloat(r.x), uintBitsToFloat(r.y)),
             uintBitsToFloat(r.z), (r.w >> 16u) & 255u);
}
