#version 450
// Reads a mesh-sized buffer and a partially resident texture on one device and combines them:
// results[i] = vertices[i] + texel (i % 256, i / 256 % 256) of mip 0 (resident tiles only;
// texels outside the texture read as not resident, vec4(-1)).
// The dispatch is a 2D grid of workgroups (rows of gl_NumWorkGroups.x), so that more than
// maxComputeWorkGroupCount[0] workgroups' worth of elements fit in one dispatch.
#extension GL_ARB_sparse_texture2 : require
#extension GL_GOOGLE_include_directive : require
#include "residency.glsl"

layout(local_size_x = 64) in;

layout(set = 0, binding = 0) uniform sampler2D tex;
layout(std430, set = 0, binding = 1) readonly buffer Vertices { vec4 vertices[]; };
layout(std430, set = 0, binding = 2) writeonly buffer Results { vec4 results[]; };
layout(push_constant) uniform Push { uint count; } pc;

void main() {
    uint i = gl_GlobalInvocationID.y * gl_NumWorkGroups.x * gl_WorkGroupSize.x + gl_GlobalInvocationID.x;
    // Elements past `count` or past either bound range are skipped.
    if (i >= pc.count || i >= uint(vertices.length()) || i >= uint(results.length())) {
        return;
    }
    bool resident;
    vec4 texel = residencyFetch(tex, ivec2(i % 256u, (i / 256u) % 256u), 0, vec4(-1.0), resident);
    results[i] = vertices[i] + texel;
}
