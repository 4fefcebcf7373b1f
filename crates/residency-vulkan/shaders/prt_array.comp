#version 450
// A sparse 2D array sampled per layer with residency codes, the per-layer min-LOD fallback, the
// low-water warning and per-layer feedback (include/prt_sample.glsl).
#extension GL_ARB_sparse_texture2 : require
#extension GL_GOOGLE_include_directive : require
#define PRT_ARRAY
#include "prt_sample.glsl"
