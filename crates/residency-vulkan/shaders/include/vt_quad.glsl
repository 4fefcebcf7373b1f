// The virtual-texture fragment shaders' code, shared by vt_quad.frag (hardware sparse residency)
// and vt_quad_software.frag (the software path: atlas + indirection), as stream_view.glsl is by the
// compute views. The binding layout is stream_view's without its output image (the colour
// attachment takes its place) and its reference texture (vt_quad_reference.frag samples that):
//
//   set 0 binding 0: sampler2D tex        hardware: the sparse image (all mips, GENERAL), trilinear
//                                         software: the tile-cache atlas, bilinear (or trilinear)
//   set 0 binding 1: usampler2D minLodMap hardware: the min-LOD map; software: the indirection
//                                         texture. NEAREST filtering (an integer texture).
//   set 0 binding 2: buffer Feedback      the frame's feedback buffer (read-write, atomics)
//   set 0 binding 3: buffer ImageTable    the feedback image table (read-only)
//
// With RESIDENCY_FEEDBACK_DEFERRED (vt_quad_deferred.frag, vt_quad_software_deferred.frag) the
// writing pixel only stores a record (feedback_deferred.glsl) and the streamer's resolve pass
// writes the feedback: binding 2 is the frame's record buffer (FrameBindings::feedback_records,
// write-only), there is no binding 3, and control.x bits 8..31 hold the record cells per row.
//
// Push constants (96 bytes, vertex and fragment stages; bytes 0..64 are vt_quad.vert's):
//   bytes  0..64: mat4 viewProj (vt_quad.vert)
//   bytes 64..80: uvec4 feedback: x = feedback image slot, y = frame, z = pixel stride,
//                 w = frame interval (feedbackPixelWrites' sampling)
//   bytes 80..96: uvec4 control: x bit 0 = write feedback (0: the same draw without feedback);
//                 y = side of the pixel squares that write together (FeedbackSampling::block;
//                 0 or 1: pixels on their own); when the stride and the side are powers of two,
//                 z = this frame's phase (x | y << 16) and w = 1 | log2(side) << 8 |
//                 log2(stride) << 16 (a shift-and-mask test), else z = w = 0
//                 (FrameBindings::feedback_words fills them)
//                 Testing aids (`residency stream --feedback-ablate`; FrameBindings::feedback_words
//                 never sets them): x bit 1 = the writing pixel does everything but its write
//                 (the record store, or feedback()'s table reads and atomics), x bit 3 = the pixel
//                 test runs but no pixel writes; x bit 2 must be 0: the aids fold their otherwise
//                 unused results into fragColor.a masked by it (a no-op the compiler cannot see),
//                 so the work they keep is not optimised away.
//
// Feedback from a fragment shader needs the device feature fragmentStoresAndAtomics. The feedback
// buffer must be host-readable (the Readback intent), and a barrier from the fragment shader's
// writes to the host's reads must follow the draws before the CPU decodes it.
//
// The LOD is the derivative-based lambda of the texture's mip 0 (rho = the longer of the uv
// derivatives in texels, lambda = log2(rho)), computed the same way in all three shaders, so the
// streamed and the reference images sample the same LOD.

layout(location = 0) in vec2 uv;
layout(location = 0) out vec4 fragColor;

layout(set = 0, binding = 0) uniform sampler2D tex;
layout(set = 0, binding = 1) uniform usampler2D minLodMap;
#ifdef RESIDENCY_FEEDBACK_DEFERRED
layout(std430, set = 0, binding = 2) writeonly buffer FeedbackRecords { uvec4 fbRecords[]; };
#else
layout(std430, set = 0, binding = 2) buffer Feedback { uint fbWords[]; };
layout(std430, set = 0, binding = 3) readonly buffer ImageTable { uint table[]; };
#endif

layout(push_constant) uniform Push {
    layout(offset = 64) uvec4 feedback; // x: slot, y: frame, z: pixel stride, w: frame interval
    uvec4 control;                      // x bit 0: write feedback; y: pixel square side
} pc;

#ifdef RESIDENCY_SOFTWARE
#include "residency_software.glsl"
#else
#include "residency.glsl"
#endif
#ifdef RESIDENCY_FEEDBACK_DEFERRED
#include "feedback_deferred.glsl"
#else
#include "feedback.glsl"
#endif
#include "vt_lod.glsl"

// Whether this pixel writes feedback this frame (FeedbackSampling::pixel_writes). With a stride
// and a square side that are powers of two, the CPU gives the frame's phase and the shifts
// (control.z, control.w): two shifts, two masks and two compares per pixel instead of integer
// divisions, which cost as much as the rest of the shader on some GPUs.
bool vtFeedbackPixelWrites(uvec2 p) {
    uint fast = pc.control.w;
    if ((fast & 1u) != 0u) {
        uvec2 q = p >> ((fast >> 8u) & 31u);
        uint mask = (1u << ((fast >> 16u) & 31u)) - 1u;
        return (q.x & mask) == (pc.control.z & 0xFFFFu) && (q.y & mask) == (pc.control.z >> 16u);
    }
    return feedbackPixelWrites(p / max(pc.control.y, 1u), pc.feedback.y, pc.feedback.z, pc.feedback.w);
}

void main() {
    // The min LOD under uv (residencyMinLod) is read once: the sample's footprint search starts
    // from it and the feedback reports it. On the software path that is the indirection's header
    // and the mip-0 entry (8 texel fetches), read once instead of twice.
#ifdef RESIDENCY_SOFTWARE
    ResidencySoftware h = residencySoftwareHeader(minLodMap);
    vec2 size = vec2(h.size);
    uint minLod = residencySoftwareEntry(minLodMap, h, uv, 0u).y;
#else
    vec2 size = vec2(textureSize(tex, 0));
    uint minLod = residencyMinLod(minLodMap, uv);
#endif
    // Derivatives first, in uniform control flow.
    float lambda = vtLambda(uv, size);
    bool resident;
    float usedLod;
    fragColor = residencySampleFallbackFrom(tex, minLodMap, uv, max(lambda, 0.0), vec4(1.0, 0.0, 1.0, 1.0), minLod,
                                            resident, usedLod);
    uint ctl = pc.control.x;
    if ((ctl & 1u) != 0u) {
        bool writes = vtFeedbackPixelWrites(uvec2(gl_FragCoord.xy));
        if ((ctl & 8u) != 0u) {
            // Testing aid (bit 3): the test alone; its result kept alive under bit 2 (always 0).
            fragColor.a = uintBitsToFloat(floatBitsToUint(fragColor.a) | ((uint(writes) << 2u) & ctl));
        } else if (writes) {
#ifdef RESIDENCY_FEEDBACK_DEFERRED
            // One plain store into this pixel's record (control.x >> 8: record cells per row); the
            // streamer's resolve pass does the table reads and atomics after the draws.
            uvec2 p = uvec2(gl_FragCoord.xy);
            uint fast = pc.control.w;
            uint rowCells = ctl >> 8u;
            uint index = (fast & 1u) != 0u
                ? feedbackRecordIndexShift(p, (fast >> 16u) & 31u, (fast >> 8u) & 31u, rowCells)
                : feedbackRecordIndex(p, pc.feedback.z, pc.control.y, rowCells);
            if ((ctl & 2u) != 0u) {
                // Testing aid (bit 1): everything but the store, kept alive under bit 2.
                uint kept = index ^ floatBitsToUint(uv.x) ^ floatBitsToUint(uv.y) ^ floatBitsToUint(lambda) ^ minLod;
                fragColor.a = uintBitsToFloat(floatBitsToUint(fragColor.a) | (kept & ctl & 4u));
            } else {
                feedbackDefer(index, pc.feedback.x, 0u, uv, lambda, minLod);
            }
#else
            if ((ctl & 2u) != 0u) {
                // Testing aid (bit 1): the branch without feedback()'s reads and atomics.
                uint kept = floatBitsToUint(uv.x) ^ floatBitsToUint(uv.y) ^ floatBitsToUint(lambda) ^ minLod;
                fragColor.a = uintBitsToFloat(floatBitsToUint(fragColor.a) | (kept & ctl & 4u));
            } else {
                feedback(pc.feedback.x, 0u, uv, lambda, minLod);
            }
#endif
        }
    }
}
