#version 450
// The reference for vt_quad.frag and vt_quad_software.frag (PSNR comparisons): samples an ordinary,
// fully resident texture at the same uv and LOD (include/vt_lod.glsl), with no feedback.
//
//   set 0 binding 0: sampler2D referenceTex  the fully resident texture, all mips (trilinear)
// Push constants: only vt_quad.vert's mat4 viewProj (bytes 0..64).
#extension GL_GOOGLE_include_directive : require
#include "vt_lod.glsl"

layout(location = 0) in vec2 uv;
layout(location = 0) out vec4 fragColor;

layout(set = 0, binding = 0) uniform sampler2D referenceTex;

void main() {
    float lambda = vtLambda(uv, vec2(textureSize(referenceTex, 0)));
    fragColor = textureLod(referenceTex, uv, max(lambda, 0.0));
}
