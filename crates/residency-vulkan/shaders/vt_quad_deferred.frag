#version 450
// vt_quad.frag with deferred feedback: the writing pixel stores one record into the frame's
// record buffer and the streamer's resolve pass (feedback_resolve.comp) writes the feedback
// (include/vt_quad.glsl, include/feedback_deferred.glsl):
//   binding 0 sampler2D sparse image (trilinear), binding 1 usampler2D min-LOD map (NEAREST),
//   binding 2 record buffer (write-only);
//   push: 0..64 mat4 viewProj, 64..80 uvec4 (slot, frame, stride, interval), 80..96 uvec4 control
//   (x bit 0 = write feedback, bits 8..31 = record cells per row; y = pixel square side).
// Needs fragmentStoresAndAtomics (the record store) and shaderResourceResidency.
#extension GL_ARB_sparse_texture2 : require
#extension GL_GOOGLE_include_directive : require
#define RESIDENCY_FEEDBACK_DEFERRED 1
#include "vt_quad.glsl"
