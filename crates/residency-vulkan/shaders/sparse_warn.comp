#version 450
// The seed's residency codes with the low-water warning on the hardware path
// (include/sparse_warn.glsl).
#extension GL_ARB_sparse_texture2 : require
#extension GL_GOOGLE_include_directive : require
#include "sparse_warn.glsl"
