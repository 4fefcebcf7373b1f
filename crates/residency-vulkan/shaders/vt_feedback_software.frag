#version 450
// vt_feedback.frag on the software path (include/vt_feedback.glsl): binding 0 sampler2D atlas
// (its size, where the indirection's header has none), binding 1 usampler2D indirection
// (NEAREST), binding 2 record buffer (write-only); the same push constants.
// Needs fragmentStoresAndAtomics (the record store); no sparse feature.
#extension GL_GOOGLE_include_directive : require
#define RESIDENCY_SOFTWARE 1
#include "vt_feedback.glsl"
