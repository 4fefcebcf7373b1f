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
// record cell (i, j). The LOD is the render's at that pixel too, not this pass's (whose
// derivatives span stride pixels): uv·(1/w) and 1/w (gl_FragCoord.w) are affine in screen space,
// so their derivatives here divided by the stride are the render's exactly, and from them the
// shader evaluates uv at the render pixel's quad neighbours and takes the differences the
// render's dFdx/dFdy take (fine derivatives: the pixel's own row and column of its 2 × 2 quad).
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
//                 z = pixel stride, w = the frame's phase (px | py << 16)

layout(location = 0) in vec2 uv;
layout(location = 0) out vec4 fragColor;

layout(set = 0, binding = 0) uniform sampler2D tex;
layout(set = 0, binding = 1) uniform usampler2D minLodMap;
layout(std430, set = 0, binding = 2) writeonly buffer FeedbackRecords { uvec4 fbRecords[]; };

layout(push_constant) uniform Push {
    layout(offset = 64) uvec4 feedback; // x: slot, y: record cells per row, z: stride, w: phase
} pc;

#ifdef RESIDENCY_SOFTWARE
#include "residency_software.glsl"
#else
#include "residency.glsl"
#endif
#include "feedback_deferred.glsl"

void main() {
#ifdef RESIDENCY_SOFTWARE
    ResidencySoftware h = residencySoftwareHeader(minLodMap);
    vec2 size = h.size.x != 0u ? vec2(h.size) : vec2(textureSize(tex, 0));
    uint minLod = residencySoftwareEntry(minLodMap, h, uv, 0u).y;
#else
    vec2 size = vec2(textureSize(tex, 0));
    uint minLod = residencyMinLod(minLodMap, uv);
#endif
    // The render's derivatives at its pixel (vt_lod.glsl's vtLambda on them): q = uv / w and
    // r = 1 / w per render pixel from this pass's, uv at an offset d (in render pixels) is
    // (q + d · dq) / (r + d · dr).
    float stride = float(max(pc.feedback.z, 1u));
    vec2 q = uv * gl_FragCoord.w;
    float r = gl_FragCoord.w;
    vec2 qx = dFdx(q) / stride, qy = dFdy(q) / stride;
    float rx = dFdx(r) / stride, ry = dFdy(r) / stride;
    uvec2 cell = uvec2(gl_FragCoord.xy);
    uvec2 phase = uvec2(pc.feedback.w & 0xFFFFu, pc.feedback.w >> 16u);
    // The render pixel's offset from the even corner of its quad: 0 or 1 per axis.
    vec2 odd = vec2((cell * max(pc.feedback.z, 1u) + phase) & 1u);
    float x0 = -odd.x, y0 = -odd.y;
    vec2 dx = ((q + (x0 + 1.0) * qx) / (r + (x0 + 1.0) * rx) - (q + x0 * qx) / (r + x0 * rx)) * size;
    vec2 dy = ((q + (y0 + 1.0) * qy) / (r + (y0 + 1.0) * ry) - (q + y0 * qy) / (r + y0 * ry)) * size;
    float lambda = 0.5 * log2(max(max(dot(dx, dx), dot(dy, dy)), 1e-12));
    uint rowCells = pc.feedback.y;
    uint index = cell.x < rowCells ? cell.y * rowCells + cell.x : FEEDBACK_RECORD_NONE;
    feedbackDefer(index, pc.feedback.x, 0u, uv, lambda, minLod);
    fragColor = vec4(0.0);
}
