#version 450
// Reads texel (i % width, i / width) of mip 0 of a sampled image into a storage buffer: a plain
// sampled image bound through a descriptor set (crates/residency-vulkan/tests/misuse_recording.rs).
layout(local_size_x = 64) in;

layout(set = 0, binding = 0) uniform sampler2D tex;
layout(std430, set = 0, binding = 1) writeonly buffer Results { vec4 results[]; };
layout(push_constant) uniform Push { uint count; uint width; } pc;

void main() {
    uint i = gl_GlobalInvocationID.x;
    // Elements past `count` or past the bound range write nothing; a texel outside mip 0 (or any
    // texel with `width` 0) reads nothing and writes vec4(0).
    if (i >= pc.count || i >= uint(results.length())) {
        return;
    }
    vec4 texel = vec4(0.0);
    uint width = pc.width;
    if (width != 0u) {
        uvec2 at = uvec2(i % width, i / width);
        if (all(lessThan(at, uvec2(textureSize(tex, 0))))) {
            texel = texelFetch(tex, ivec2(at), 0);
        }
    }
    results[i] = texel;
}
