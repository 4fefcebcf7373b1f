#version 450
// Reads buffers placed side by side in one heap, each with its own usage: vertices and indices
// (also bound as storage buffers here), a uniform block; writes one result per index.
layout(local_size_x = 64) in;

layout(std430, set = 0, binding = 0) readonly buffer Vertices { vec4 vertices[]; };
layout(std430, set = 0, binding = 1) readonly buffer Indices { uint indices[]; };
layout(std140, set = 0, binding = 2) uniform Params { vec4 scale; vec4 bias; uint count; } params;
layout(std430, set = 0, binding = 3) writeonly buffer Results { vec4 results[]; };

void main() {
    uint i = gl_GlobalInvocationID.x;
    // Elements past `count` or past the indices or results bound are skipped; an index past the
    // vertices bound reads vec4(0). (The uniform block is bound whole: programs refuse a range
    // under its 36 bytes.)
    if (i >= params.count || i >= uint(indices.length()) || i >= uint(results.length())) {
        return;
    }
    uint v = indices[i];
    vec4 vertex = vec4(0.0);
    if (v < uint(vertices.length())) {
        vertex = vertices[v];
    }
    results[i] = vertex * params.scale + params.bias;
}
