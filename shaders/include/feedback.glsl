// feedback.glsl — shader feedback for streaming (layout: docs/streaming.md, `residency_core::streaming`).
//
// Declare before including: `buffer Feedback { uint fbWords[]; }` (the feedback buffer) and
// `readonly buffer ImageTable { uint table[]; }` (the image table), at bindings of your choice.
// Call `feedback(slot, layer, uv, lambda, minLod)` once per sample (for pixels where
// `feedbackPixelWrites` holds, to sample a fraction of them).

#ifndef RESIDENCY_FEEDBACK_GLSL
#define RESIDENCY_FEEDBACK_GLSL

// Feedback for one sample. fb: the Feedback buffer; img: base of the image's table entry.

uint tileAt(uint img, uint layer, uint mip, vec2 uv) {
    uint mipBase = img + 16u + 4u * mip;
    uvec2 extent = max(uvec2(table[img + 10u], table[img + 11u]) >> mip, uvec2(1u));
    uvec2 texel = min(uvec2(clamp(uv, 0.0, 1.0) * vec2(extent)), extent - 1u);
    uvec2 tiles = uvec2(table[mipBase + 1u], table[mipBase + 2u]);
    uvec2 t = min(texel / uvec2(table[img + 8u], table[img + 9u]), tiles - 1u);
    return layer * table[img + 4u] + table[mipBase] + t.y * tiles.x + t.x;
}

// One request for `pixels` pixels (the counter adds them all at once).
void requestPixels(uint slot, uint img, uint tile, uint mip, uint kind, uint pixels) {
    uint counts = table[img + 2u];
    if (counts != 0xFFFFFFFFu) atomicAdd(fbWords[counts + kind * table[img + 3u] + tile], pixels);
    uint word = table[img + 0u] + kind * table[img + 1u] + (tile >> 5u);
    uint bit = 1u << (tile & 31u);
    if ((atomicOr(fbWords[word], bit) & bit) == 0u) {
        uint i = atomicAdd(fbWords[2], 1u);
        if (i < fbWords[3]) {
            fbWords[4u + 2u * i] = tile;
            fbWords[5u + 2u * i] = slot | (mip << 16u) | (kind << 21u);
        }
    }
}

void request(uint slot, uint img, uint tile, uint mip, uint kind) {
    requestPixels(slot, img, tile, mip, kind, 1u);
}

// The sampling rule of `FeedbackSampling::pixel_writes`: whether pixel `p` writes feedback in
// `frame` when one pixel of every `stride × stride` block writes, every `interval` frames, the
// block's pixels taken in turn.
bool feedbackPixelWrites(uvec2 p, uint frame, uint stride, uint interval) {
    stride = max(stride, 1u);
    interval = max(interval, 1u);
    if (frame % interval != 0u) return false;
    uint j = (frame / interval) % (stride * stride);
    return p.x % stride == j % stride && p.y % stride == j / stride;
}

// lambda: unclamped LOD; minLod: the min-LOD map texel of this sample's mip-0 region.
void feedback(uint slot, uint layer, vec2 uv, float lambda, uint minLod) {
    uint img = slot * 80u;
    float l = clamp(lambda, 0.0, float(table[img + 12u] - 1u));
    uint m = uint(floor(l));
    uint firstTail = table[img + 5u];
    if (m < firstTail && minLod > m) {
        request(slot, img, tileAt(img, layer, m, uv), m, 0u);
    } else if (minLod == m && m > 0u && m <= firstTail && m <= table[img + 6u]
               && l - float(m) < float(table[img + 7u]) / 256.0) {
        request(slot, img, tileAt(img, layer, m - 1u, uv), m - 1u, 1u);
    }
}

#endif
