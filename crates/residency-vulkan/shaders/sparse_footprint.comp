#version 450
// The footprint-exact residency helpers on the hardware path (include/sparse_footprint.glsl).
#extension GL_ARB_sparse_texture2 : require
#extension GL_GOOGLE_include_directive : require
#include "sparse_footprint.glsl"
