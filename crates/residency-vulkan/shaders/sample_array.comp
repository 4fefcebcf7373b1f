#version 450
#extension GL_EXT_nonuniform_qualifier : require
// Samples a fixed array of four textures by index (multi/bindless.rs): invocation i writes the
// centre texel of texture min(i, 3), packed as RGBA8. The index is clamped below the array's
// length (4, the length `shaders.rs` declares: SampledImageArray(4)), whose every descriptor is
// bound. Writes only below `count` and the bound range (`texels.length()`).
layout(local_size_x = 64) in;

layout(std430, set = 0, binding = 0) writeonly buffer Texels { uint texels[]; };
layout(set = 0, binding = 1) uniform sampler2D textures[4];
layout(push_constant) uniform Push { uint count; } pc;

void main() {
    uint i = gl_GlobalInvocationID.x;
    if (i >= pc.count || i >= uint(texels.length())) {
        return;
    }
    uint index = min(i, 3u);
    vec4 color = textureLod(textures[nonuniformEXT(index)], vec2(0.5), 0.0);
    texels[i] = packUnorm4x8(color);
}
