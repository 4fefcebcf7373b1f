#version 450
// Deferred feedback from a pass of its own at 1/stride of the render's resolution, hardware path
// (include/vt_feedback.glsl): binding 0 sampler2D sparse image (its size), binding 1 usampler2D
// min-LOD map (NEAREST), binding 2 record buffer (write-only); push: 0..64 mat4 viewProj
// (vt_quad.vert), 64..80 uvec4 (slot, record cells per row, LOD offset bits, 0).
// Needs fragmentStoresAndAtomics (the record store).
#extension GL_ARB_sparse_texture2 : require
#extension GL_GOOGLE_include_directive : require
#include "vt_feedback.glsl"
