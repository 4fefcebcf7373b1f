// feedback.glsl — shader feedback for streaming (layout: docs/streaming.md, `residency_core::streaming`).
//
// Declare before including: `buffer Feedback { uint fbWords[]; }` (the feedback buffer) and
// `readonly buffer ImageTable { uint table[]; }` (the image table), at bindings of your choice.
// Call `feedback(slot, layer, uv, lambda, minLod)` (2D, 2D arrays) or
// `feedback(slot, layer, uvw, lambda, minLod)` (3D: uvw's w is the depth) once per sample (for pixels where
// `feedbackPixelWrites` holds, to sample a fraction of them).
//
// Bounds (docs/reliability.md, "shipped shaders bound every index"): the slot, the layer, the mip
// and every word the table names are data a caller may get wrong, so nothing here trusts them.
// A slot whose 80-word entry does not lie inside the bound table writes nothing; a request for a
// mip past 15 (the entry's last per-mip words) is dropped; the layer is
// clamped to the image's layers (as the sampler clamps it); a tile at or past the entry's tile
// count is dropped; and every feedback-buffer word is compared with `fbWords.length()` right
// before it is touched (an index past it drops that write). With a table and a buffer that
// `FeedbackLayout` made, none of these bounds changes a write.

#ifndef RESIDENCY_FEEDBACK_GLSL
#define RESIDENCY_FEEDBACK_GLSL

// Words of one image's table entry (IMAGE_ENTRY_WORDS) and the mips it has room for.
const uint FEEDBACK_ENTRY_WORDS = 80u;
const uint FEEDBACK_MAX_MIPS = 16u;

// Whether word `w` of the feedback buffer exists.
bool fbInside(uint w) {
    return w < uint(fbWords.length());
}

// Feedback for one sample. fb: the Feedback buffer; img: base of the image's table entry (the
// callers checked that the whole entry is inside the table).

// The tile of (layer, mip) under normalized coordinates uvw (w: a 3D image's depth; 2D images and
// arrays have depth 1, so w picks nothing there and the layer is `layer`): FeedbackImage::tile_at.
// A mip past the entry's 16 is read as mip 15 (the callers drop such requests first).
uint tileAt(uint img, uint layer, uint mip, vec3 uvw) {
    mip = min(mip, FEEDBACK_MAX_MIPS - 1u);
    uint mipBase = img + 16u + 4u * mip;
    uvec3 extent = max(uvec3(table[img + 10u], table[img + 11u], table[img + 14u]) >> mip, uvec3(1u));
    uvec3 texel = min(uvec3(clamp(uvw, 0.0, 1.0) * vec3(extent)), extent - 1u);
    uvec3 tiles = max(uvec3(table[mipBase + 1u], table[mipBase + 2u], table[mipBase + 3u]), uvec3(1u));
    uvec3 shape = max(uvec3(table[img + 8u], table[img + 9u], table[img + 13u]), uvec3(1u));
    uvec3 t = min(texel / shape, tiles - 1u);
    // The layer the sampler read: clamped to the image's layers (tile count / tiles per layer).
    uint perLayer = max(table[img + 4u], 1u);
    uint layers = max(table[img + 3u] / perLayer, 1u);
    return min(layer, layers - 1u) * table[img + 4u] + table[mipBase] + (t.z * tiles.y + t.y) * tiles.x + t.x;
}

uint tileAt(uint img, uint layer, uint mip, vec2 uv) {
    return tileAt(img, layer, mip, vec3(uv, 0.0));
}

// One request for `pixels` pixels (the counter adds them all at once).
void requestPixels(uint slot, uint img, uint tile, uint mip, uint kind, uint pixels) {
    if (tile >= table[img + 3u] || !fbInside(3u)) {
        return;
    }
    uint counts = table[img + 2u];
    if (counts != 0xFFFFFFFFu) {
        uint c = counts + kind * table[img + 3u] + tile;
        if (fbInside(c)) atomicAdd(fbWords[c], pixels);
    }
    uint word = table[img + 0u] + kind * table[img + 1u] + (tile >> 5u);
    if (!fbInside(word)) {
        return;
    }
    uint bit = 1u << (tile & 31u);
    // Read before the atomic: most writing pixels ask for a tile that an earlier pixel of the
    // frame asked for, whose bit a plain load already finds set, and the atomic (a round trip
    // that the whole subgroup waits on) is skipped. A load that misses a bit set meanwhile only
    // costs the atomic, which decides who appends the record.
    if ((fbWords[word] & bit) != 0u) {
        return;
    }
    if ((atomicOr(fbWords[word], bit) & bit) == 0u) {
        // The image's touched bit (after the records: word 4 + 2 * capacity + slot / 32), so the
        // decoder reads the bitsets of touched images only.
        uint capacity = fbWords[3];
        uint touched = 4u + 2u * capacity + (slot >> 5u);
        if (capacity < 0x40000000u && fbInside(touched)) atomicOr(fbWords[touched], 1u << (slot & 31u));
        uint i = atomicAdd(fbWords[2], 1u);
        // Records fit below the capacity word 3 and inside the buffer (i < (length - 4) / 2).
        uint room = (uint(fbWords.length()) - 4u) / 2u;
        if (i < capacity && i < room) {
            fbWords[4u + 2u * i] = tile;
            fbWords[5u + 2u * i] = slot | (mip << 16u) | (kind << 21u);
        }
    }
}

void request(uint slot, uint img, uint tile, uint mip, uint kind) {
    requestPixels(slot, img, tile, mip, kind, 1u);
}

// A request for the tile of (layer, mip) under uvw; nothing for a mip the entry has no words for.
void requestAt(uint slot, uint img, uint layer, uint mip, vec3 uvw, uint kind) {
    if (mip < FEEDBACK_MAX_MIPS) {
        request(slot, img, tileAt(img, layer, mip, uvw), mip, kind);
    }
}

#include "feedback_sampling.glsl"

// lambda: unclamped LOD; minLod: the min-LOD map texel of this sample's mip-0 region; uvw: the
// sample's coordinates (a 3D image's depth in w; for a 2D array, its layer is `layer`).
// Writes a miss or a prefetch warning (lod_warning::classify_sample) and, independently, the
// seed's low-water warning when the image has a mark (lod_warning::classify_low_water: kind 2,
// the record's mip is the level that warned). A slot whose entry is not inside the table writes
// nothing.
void feedback(uint slot, uint layer, vec3 uvw, float lambda, uint minLod) {
    uint entries = uint(table.length()) / FEEDBACK_ENTRY_WORDS;
    if (slot >= entries) {
        return;
    }
    uint img = slot * FEEDBACK_ENTRY_WORDS;
    float l = clamp(lambda, 0.0, float(max(table[img + 12u], 1u) - 1u));
    uint m = uint(floor(l));
    uint firstTail = table[img + 5u];
    if (m < firstTail && minLod > m) {
        requestAt(slot, img, layer, m, uvw, 0u);
    } else if (minLod == m && m > 0u && m <= firstTail && m <= table[img + 6u]
               && l - float(m) < float(table[img + 7u]) / 256.0) {
        requestAt(slot, img, layer, m - 1u, uvw, 1u);
    }
    uint mark = table[img + 15u];
    uint fetched = max(m, minLod);
    if (mark != 0xFFFFFFFFu && minLod != 255u && fetched <= mark && fetched < firstTail) {
        requestAt(slot, img, layer, fetched, uvw, 2u);
    }
}

void feedback(uint slot, uint layer, vec2 uv, float lambda, uint minLod) {
    feedback(slot, layer, vec3(uv, 0.0), lambda, minLod);
}

#endif
