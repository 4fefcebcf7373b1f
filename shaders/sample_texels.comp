#version 450
// Reads texel (i % width, i / width) of mip 0 of a sampled image into a storage buffer: a plain
// sampled image bound through a descriptor set (crates/residency-vulkan/tests/misuse_recording.rs).
layout(local_size_x = 64) in;

layout(set = 0, binding = 0) uniform sampler2D tex;
layout(std430, set = 0, binding = 1) writeonly buffer Results { vec4 results[]; };
layout(push_constant) uniform Push { uint count; uint width; } pc;

void main() {
    uint i = gl_GlobalInvocationID.x;
    if (i < pc.count) {
        results[i] = texelFetch(tex, ivec2(i % pc.width, i / pc.width), 0);
    }
}
