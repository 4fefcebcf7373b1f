#version 450
// Draws a virtual texture on the software residency path (tile-cache atlas + indirection texture)
// and writes shader feedback from the fragment shader; the code, binding layout and push constants
// are in include/vt_quad.glsl (the same as vt_quad.frag's):
//   binding 0 sampler2D atlas (bilinear), binding 1 usampler2D indirection (NEAREST),
//   binding 2 feedback buffer, binding 3 image table (read-only);
//   push: 0..64 mat4 viewProj, 64..80 uvec4 (slot, frame, stride, interval), 80..96 uvec4 control
//   (x bit 0 = write feedback, y = side of the pixel squares that write together).
// Needs fragmentStoresAndAtomics (feedback atomics); no sparse feature.
#extension GL_GOOGLE_include_directive : require
#define RESIDENCY_SOFTWARE 1
#include "vt_quad.glsl"
