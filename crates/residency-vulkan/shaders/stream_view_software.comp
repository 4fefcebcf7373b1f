#version 450
// The streaming demo's renderer on the software residency path (indirection + tile-cache atlas);
// the code is include/stream_view.glsl, the same as the hardware one's.
#extension GL_GOOGLE_include_directive : require
#define RESIDENCY_SOFTWARE 1
#include "stream_view.glsl"
