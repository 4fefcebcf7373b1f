#version 450
// Textured geometry for the virtual-texture fragment shaders (vt_quad.frag, vt_quad_software.frag,
// vt_quad_reference.frag): world-space positions projected by a view-projection matrix, uv passed
// through to the fragment shader (which takes the LOD from its derivatives).
//
// Vertex input, binding 0 (20-byte stride):
//   location 0: vec3 position (R32G32B32_SFLOAT, offset 0), world space
//   location 1: vec2 uv       (R32G32_SFLOAT,    offset 12), 0..1 over the texture
// Push constants (the block the fragment shaders continue, see include/vt_quad.glsl):
//   bytes 0..64: mat4 viewProj, column-major, world -> clip (Vulkan clip space: y down, z 0..1)
// No descriptors.

layout(location = 0) in vec3 position;
layout(location = 1) in vec2 uv;
layout(location = 0) out vec2 outUv;

layout(push_constant) uniform Push {
    mat4 viewProj;
} pc;

void main() {
    gl_Position = pc.viewProj * vec4(position, 1.0);
    outUv = uv;
}
