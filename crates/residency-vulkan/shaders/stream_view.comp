#version 450
// The streaming demo's renderer on hardware sparse residency; the code is include/stream_view.glsl.
#extension GL_ARB_sparse_texture2 : require
#extension GL_GOOGLE_include_directive : require
#include "stream_view.glsl"
