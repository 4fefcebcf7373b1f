#version 450
// sparse_footprint.comp on the software residency path (tile-cache atlas + indirection texture).
#extension GL_GOOGLE_include_directive : require
#define RESIDENCY_SOFTWARE 1
#include "sparse_footprint.glsl"
