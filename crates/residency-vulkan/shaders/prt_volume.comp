#version 450
// A sparse 3D image (volume) sampled with residency codes, the min-LOD fallback, the low-water
// warning and feedback at z > 0 (include/prt_sample.glsl).
#extension GL_ARB_sparse_texture2 : require
#extension GL_GOOGLE_include_directive : require
#include "prt_sample.glsl"
