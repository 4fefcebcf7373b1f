#version 450
// Samples a partially resident image at requested LODs, falling back to the finest resident
// coarser mip through the min-LOD map; reports the texel, the residency code and the LOD used.
#extension GL_ARB_sparse_texture2 : require
#extension GL_GOOGLE_include_directive : require
#include "sparse_fallback.glsl"
