#version 450
// sparse_footprint.comp with the hardware's minimum-LOD clamp (residencySampleGradClamp,
// sparseTextureGradClampARB: mode 3) and residency codes (RESIDENCY_CODES); needs shaderResourceMinLod.
#extension GL_ARB_sparse_texture2 : require
#extension GL_ARB_sparse_texture_clamp : require
#extension GL_GOOGLE_include_directive : require
#define RESIDENCY_MIN_LOD_CLAMP 1
#define RESIDENCY_CODES 1
#define RESIDENCY_NO_DERIVATIVES 1
#include "sparse_footprint.glsl"
