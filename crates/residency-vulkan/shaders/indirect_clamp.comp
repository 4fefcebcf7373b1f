#version 450
// Residency's clamp pass before an indirect dispatch (multi/indirect.rs): copies the
// VkDispatchIndirectCommand at word `first` of the caller's argument buffer into residency's own
// buffer, which the dispatch reads. A count over the device's maxComputeWorkGroupCount on any
// axis (the limits come as push constants) makes the whole command (0, 0, 0); a command not
// wholly inside the bound argument range (`args.length()`) reads as (0, 0, 0); the output is
// written only within its bound range (`clamped.length()`).
layout(local_size_x = 1) in;

layout(std430, set = 0, binding = 0) readonly buffer Args { uint words[]; } args;
layout(std430, set = 0, binding = 1) writeonly buffer Clamped { uint groups[]; } clamped;
layout(push_constant) uniform Push { uint first; uint limit_x; uint limit_y; uint limit_z; } pc;

void main() {
    uint n = uint(args.words.length());
    uvec3 g = uvec3(0u);
    if (pc.first < n && n - pc.first >= 3u) {
        g = uvec3(args.words[pc.first], args.words[pc.first + 1u], args.words[pc.first + 2u]);
    }
    if (any(greaterThan(g, uvec3(pc.limit_x, pc.limit_y, pc.limit_z)))) {
        g = uvec3(0u);
    }
    uint m = uint(clamped.groups.length());
    for (uint i = 0u; i < 3u; i++) {
        if (i < m) {
            clamped.groups[i] = g[i];
        }
    }
}
