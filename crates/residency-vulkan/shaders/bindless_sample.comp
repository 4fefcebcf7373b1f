#version 450
#extension GL_EXT_nonuniform_qualifier : require
// Samples a bindless array of textures by index (multi/bindless.rs): invocation i writes the
// centre texel of texture i, packed as RGBA8. The index is clamped below the number of textures
// bound (`textures_bound`, at least 1) and below the array's length (MAX_TEXTURES, the length
// `shaders.rs` declares: BindlessSampledImages(64)), so no index reaches past the array;
// residency writes every descriptor of the array (the last view repeated), so an index below
// MAX_TEXTURES always reads a bound view. Writes only below `count` and the bound range
// (`texels.length()`).
#define MAX_TEXTURES 64u
layout(local_size_x = 64) in;

layout(std430, set = 0, binding = 0) writeonly buffer Texels { uint texels[]; };
layout(set = 0, binding = 1) uniform sampler2D textures[];
layout(push_constant) uniform Push { uint count; uint textures_bound; } pc;

void main() {
    uint i = gl_GlobalInvocationID.x;
    if (i >= pc.count || i >= uint(texels.length())) {
        return;
    }
    uint bound = clamp(pc.textures_bound, 1u, MAX_TEXTURES);
    uint index = min(i, bound - 1u);
    vec4 color = textureLod(textures[nonuniformEXT(index)], vec2(0.5), 0.0);
    texels[i] = packUnorm4x8(color);
}
