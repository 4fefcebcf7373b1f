#version 450
// residencySampleClamp in a fragment shader: the implicit LOD of the fragment's uv derivatives,
// clamped by the hardware to the finest mip whose whole footprint is resident
// (sparseTextureClampARB), with residency codes. Needs shaderResourceMinLod. With vt_quad.vert:
//   binding 0 sampler2D sparse image, binding 1 usampler2D min-LOD map (NEAREST);
//   push: 0..64 vt_quad.vert's mat4, 64..80 vec4 default value, 80..84 float maxAnisotropy.
#extension GL_ARB_sparse_texture2 : require
#extension GL_ARB_sparse_texture_clamp : require
#extension GL_GOOGLE_include_directive : require
#define RESIDENCY_MIN_LOD_CLAMP 1
#define RESIDENCY_CODES 1
#include "residency.glsl"

layout(location = 0) in vec2 uv;
layout(location = 0) out vec4 fragColor;

layout(set = 0, binding = 0) uniform sampler2D tex;
layout(set = 0, binding = 1) uniform usampler2D minLodMap;

layout(push_constant) uniform Push {
    layout(offset = 64) vec4 defaultValue;
    float maxAnisotropy;
} pc;

void main() {
    bool resident;
    fragColor = residencySampleClamp(tex, minLodMap, uv, pc.maxAnisotropy, pc.defaultValue, resident);
}
