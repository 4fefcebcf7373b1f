#version 450
// The GPU half of the indirect-argument writer (multi/indirect.rs, GpuIndirectWriter): turns a
// count some earlier pass wrote (word `count_at` of binding 0, e.g. the survivors of a culling
// pass) into the VkDispatchIndirectCommand (ceil(count / per_group), 1, 1) at word `first` of
// binding 1. A group count over `limit_x` (the devices' maxComputeWorkGroupCount[0], pushed by
// residency) writes (0, 1, 1): nothing runs. A count word outside the bound range reads 0;
// command words outside the bound range are not written; `per_group` is at least 1.
layout(local_size_x = 1) in;

layout(std430, set = 0, binding = 0) readonly buffer Counts { uint counts[]; };
layout(std430, set = 0, binding = 1) writeonly buffer Args { uint args[]; };
layout(push_constant) uniform Push { uint count_at; uint first; uint per_group; uint limit_x; } pc;

void main() {
    uint count = pc.count_at < uint(counts.length()) ? counts[pc.count_at] : 0u;
    uint per_group = max(pc.per_group, 1u);
    uint groups = count / per_group + ((count % per_group) != 0u ? 1u : 0u);
    if (groups > pc.limit_x) {
        groups = 0u;
    }
    uvec3 command = uvec3(groups, 1u, 1u);
    uint n = uint(args.length());
    for (uint i = 0u; i < 3u; i++) {
        if (pc.first < n && i < n - pc.first) {
            args[pc.first + i] = command[i];
        }
    }
}
