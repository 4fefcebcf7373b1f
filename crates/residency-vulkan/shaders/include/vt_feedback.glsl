// The feedback-only fragment shaders' code (vt_feedback.frag on the hardware path,
// vt_feedback_software.frag on the software path): deferred feedback written from a pass of its
// own at 1/stride of the render's resolution, instead of from one pixel of every stride × stride
// of the render (`residency stream --feedback-pass`). The render's own shader then carries no
// feedback code at all (its control.x bit 0 is 0), and this pass shades one fragment per record
// cell: no texture sample, only the min LOD under uv (hardware: the min-LOD map; software: the
// indirection's header and mip-0 entry) and the record store.
//
// The renderer draws the same geometry into a target of ceil(width / stride) × ceil(height /
// stride) pixels with a view-projection that maps the render's pixel (stride · i + px, stride · j +
// py) — (px, py) the frame's phase, FeedbackSampling::phase — onto this target's pixel centre
// (i, j), so this pass samples exactly the render's writing pixels of the frame; pixel (i, j) is
// record cell (i, j). The derivatives here are stride times the render's, so the LOD is the
// render's plus log2(stride): push word z is -log2(stride), added to it.
//
//   set 0 binding 0: sampler2D tex        hardware: the sparse image (its size only); software:
//                                         the atlas (its size only where the indirection's header
//                                         says 0)
//   set 0 binding 1: usampler2D minLodMap hardware: the min-LOD map; software: the indirection
//                                         (NEAREST)
//   set 0 binding 2: buffer FeedbackRecords  the frame's record buffer (write-only)
//
// Push constants (80 bytes, vertex and fragment stages; bytes 0..64 are vt_quad.vert's):
//   bytes 64..80: uvec4 feedback: x = feedback image slot, y = record cells per row,
//                 z = LOD offset (float bits: -log2(stride)), w = 0

layout(location = 0) in vec2 uv;
layout(location = 0) out vec4 fragColor;

layout(set = 0, binding = 0) uniform sampler2D tex;
layout(set = 0, binding = 1) uniform usampler2D minLodMap;
layout(std430, set = 0, binding = 2) writeonly buffer FeedbackRecords { uvec4 fbRecords[]; };

layout(push_constant) uniform Push {
    layout(offset = 64) uvec4 feedback; // x: slot, y: record cells per row, z: LOD offset bits
} pc;

#ifdef RESIDENCY_SOFTWARE
#include "residency_software.glsl"
#else
#include "residency.glsl"
#endif
#include "feedback_deferred.glsl"
#include "vt_lod.glsl"

void main() {
#ifdef RESIDENCY_SOFTWARE
    ResidencySoftware h = residencySoftwareHeader(minLodMap);
    vec2 size = h.size.x != 0u ? vec2(h.size) : vec2(textureSize(tex, 0));
    uint minLod = residencySoftwareEntry(minLodMap, h, uv, 0u).y;
#else
    vec2 size = vec2(textureSize(tex, 0));
    uint minLod = residencyMinLod(minLodMap, uv);
#endif
    float lambda = vtLambda(uv, size) + uintBitsToFloat(pc.feedback.z);
    uvec2 cell = uvec2(gl_FragCoord.xy);
    uint rowCells = pc.feedback.y;
    uint index = cell.x < rowCells ? cell.y * rowCells + cell.x : FEEDBACK_RECORD_NONE;
    feedbackDefer(index, pc.feedback.x, 0u, uv, lambda, minLod);
    fragColor = vec4(0.0);
}
