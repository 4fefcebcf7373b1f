#version 450
// sparse_footprint.comp with RESIDENCY_CODES: the hardware helpers also require the sample's own
// residency code.
#extension GL_ARB_sparse_texture2 : require
#extension GL_GOOGLE_include_directive : require
#define RESIDENCY_CODES 1
#include "sparse_footprint.glsl"
