#version 450
// Draws a virtual texture on the hardware sparse-residency path (sparse image + min-LOD map) and
// writes shader feedback from the fragment shader; the code, binding layout and push constants
// are in include/vt_quad.glsl:
//   binding 0 sampler2D sparse image (trilinear), binding 1 usampler2D min-LOD map (NEAREST),
//   binding 2 feedback buffer, binding 3 image table (read-only);
//   push: 0..64 mat4 viewProj, 64..80 uvec4 (slot, frame, stride, interval), 80..96 uvec4 control
//   (x bit 0 = write feedback, y = side of the pixel squares that write together).
// Needs fragmentStoresAndAtomics (feedback atomics) and shaderResourceResidency.
#extension GL_ARB_sparse_texture2 : require
#extension GL_GOOGLE_include_directive : require
#include "vt_quad.glsl"
