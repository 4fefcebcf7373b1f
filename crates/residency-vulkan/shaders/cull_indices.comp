#version 450
// A culling pass: writes the index buffer of a grid of quads, keeping the visible ones and writing
// degenerate triangles for the culled ones.
layout(local_size_x = 64) in;

layout(std430, set = 0, binding = 0) writeonly buffer Indices { uint indices[]; };
layout(push_constant) uniform Push { uint quads; uint culled_mask; } pc;

void main() {
    uint q = gl_GlobalInvocationID.x;
    // Quads past `quads` or past the six indices per quad the bound range holds write nothing.
    if (q >= pc.quads || q >= uint(indices.length()) / 6u) {
        return;
    }
    // Quads 32 and on are never culled (the mask has 32 bits).
    bool culled = q < 32u && ((pc.culled_mask >> q) & 1u) != 0u;
    uint v = q * 4u;
    uint quad[6] = uint[6](v, v + 1u, v + 2u, v + 2u, v + 1u, v + 3u);
    for (uint k = 0u; k < 6u; ++k) {
        indices[q * 6u + k] = culled ? 0u : quad[k];
    }
}
