// feedback_deferred.glsl — deferred shader feedback: the writing pixel stores one record, a
// compute pass (`feedback_resolve.comp`, recorded by the streamer) folds the records into the
// feedback buffer later (docs/streaming.md, "Deferred feedback").
//
// Declare before including: `buffer FeedbackRecords { uvec4 fbRecords[]; }` (the frame's record
// buffer, `FrameBindings::feedback_records`; `writeonly` is enough here). Call
// `feedbackDefer(feedbackRecordIndex(...), slot, layer, uv, lambda, minLod)` where `feedback()`
// would be called: one plain 16-byte store, no table read, no atomic, nothing that depends on a
// load. The resolve then calls `feedback(slot, layer, uv, lambda, minLod)` (feedback.glsl) for the
// record, which bounds every index it takes from it: a record the shader gets wrong (an unknown
// slot, a tile past the image) asks for nothing.
//
// A record: x, y = uv (float bits), z = lambda (float bits), w = slot (bits 0..15) | minLod
// (bits 16..23) | layer (bits 24..30, layers past 127 recorded as 127) | 1 << 31 (written). One
// record per writing pixel of a frame (`feedbackRecordIndex`): where two fragments of one pixel
// write, one of them is kept (deferred feedback reports what a pixel shows, not what was drawn
// under it).

#ifndef RESIDENCY_FEEDBACK_DEFERRED_GLSL
#define RESIDENCY_FEEDBACK_DEFERRED_GLSL

const uint FEEDBACK_RECORD_WRITTEN = 0x80000000u;
const uint FEEDBACK_RECORD_NONE = 0xFFFFFFFFu;

// The record of writing pixel `p` (FeedbackSampling::record_index): one b × b square of writing
// pixels per (stride · b)² cell, `rowCells` cells per row (`FrameBindings::feedback_words` gives
// it); FEEDBACK_RECORD_NONE for a pixel right of the row.
uint feedbackRecordIndex(uvec2 p, uint stride, uint block, uint rowCells) {
    stride = clamp(stride, 1u, 65535u);
    block = max(block, 1u);
    uvec2 cell = p / (stride * block);
    if (cell.x >= rowCells) return FEEDBACK_RECORD_NONE;
    uvec2 inner = p % block;
    return (cell.y * rowCells + cell.x) * (block * block) + inner.y * block + inner.x;
}

// The same with shifts (stride and block powers of two: log2s given).
uint feedbackRecordIndexShift(uvec2 p, uint strideLog2, uint blockLog2, uint rowCells) {
    uvec2 cell = p >> (strideLog2 + blockLog2);
    if (cell.x >= rowCells) return FEEDBACK_RECORD_NONE;
    uvec2 inner = p & ((1u << blockLog2) - 1u);
    return (((cell.y * rowCells + cell.x) << blockLog2 | inner.y) << blockLog2) | inner.x;
}

#include "feedback_sampling.glsl"

// Stores the record of one sample at `index` (dropped past the buffer).
void feedbackDefer(uint index, uint slot, uint layer, vec2 uv, float lambda, uint minLod) {
    if (index >= uint(fbRecords.length())) {
        return;
    }
    fbRecords[index] = uvec4(floatBitsToUint(uv.x), floatBitsToUint(uv.y), floatBitsToUint(lambda),
                             (slot & 0xFFFFu) | (min(minLod, 255u) << 16u) | (min(layer, 127u) << 24u)
                                 | FEEDBACK_RECORD_WRITTEN);
}

#endif
