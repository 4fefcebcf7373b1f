// feedback.wgsl — shader feedback for streaming, the WGSL twin of residency-vulkan's
// shaders/include/feedback.glsl (layout: docs/streaming.md, `residency_core::streaming`): the
// same words, the same bounds, so residency's `Streamer` decodes what this writes.
//
// Declare before it (residency_wgpu::wgsl::declarations does):
//   var<storage, read_write> residency_feedback: array<atomic<u32>>;  // the feedback buffer
//   var<storage, read> residency_table: array<u32>;                   // the image table
// Call `residency_feedback_write(slot, layer, uv, lambda, min_lod)` once per sample (for pixels
// where `residency_feedback_pixel_writes` holds, to sample a fraction of them).
//
// Bounds: the slot, the layer, the mip and every word the table names are data a caller may get
// wrong, so nothing here trusts them: a slot whose 80-word entry is not inside the table writes
// nothing, a mip past 15 is dropped, the layer is clamped to the image's layers, a tile at or past
// the entry's tile count is dropped, and every feedback word is compared with the buffer's length
// right before it is touched.

const RESIDENCY_FEEDBACK_ENTRY_WORDS: u32 = 80u;
const RESIDENCY_FEEDBACK_MAX_MIPS: u32 = 16u;

fn residency_fb_inside(w: u32) -> bool {
    return w < arrayLength(&residency_feedback);
}

// The tile of (layer, mip) under normalized coordinates uv (FeedbackImage::tile_at, 2D).
fn residency_tile_at(img: u32, layer: u32, mip_in: u32, uv: vec2<f32>) -> u32 {
    let t = &residency_table;
    let mip = min(mip_in, RESIDENCY_FEEDBACK_MAX_MIPS - 1u);
    let mip_base = img + 16u + 4u * mip;
    let extent = max(vec3<u32>((*t)[img + 10u], (*t)[img + 11u], (*t)[img + 14u]) >> vec3<u32>(mip), vec3<u32>(1u));
    let uvw = vec3<f32>(uv, 0.0);
    let texel = min(vec3<u32>(clamp(uvw, vec3<f32>(0.0), vec3<f32>(1.0)) * vec3<f32>(extent)), extent - 1u);
    let tiles = max(vec3<u32>((*t)[mip_base + 1u], (*t)[mip_base + 2u], (*t)[mip_base + 3u]), vec3<u32>(1u));
    let shape = max(vec3<u32>((*t)[img + 8u], (*t)[img + 9u], (*t)[img + 13u]), vec3<u32>(1u));
    let c = min(texel / shape, tiles - 1u);
    let per_layer = max((*t)[img + 4u], 1u);
    let layers = max((*t)[img + 3u] / per_layer, 1u);
    return min(layer, layers - 1u) * (*t)[img + 4u] + (*t)[mip_base] + (c.z * tiles.y + c.y) * tiles.x + c.x;
}

// One request for `pixels` pixels.
fn residency_request_pixels(slot: u32, img: u32, tile: u32, mip: u32, kind: u32, pixels: u32) {
    let t = &residency_table;
    if (tile >= (*t)[img + 3u] || !residency_fb_inside(3u)) {
        return;
    }
    let counts = (*t)[img + 2u];
    if (counts != 0xFFFFFFFFu) {
        let c = counts + kind * (*t)[img + 3u] + tile;
        if (residency_fb_inside(c)) {
            atomicAdd(&residency_feedback[c], pixels);
        }
    }
    let word = (*t)[img + 0u] + kind * (*t)[img + 1u] + (tile >> 5u);
    if (!residency_fb_inside(word)) {
        return;
    }
    let bit = 1u << (tile & 31u);
    // Read before the atomic (as feedback.glsl): a bit already set (an earlier pixel asked for
    // the tile) skips the returning atomicOr; a load that misses a bit set meanwhile only costs it.
    if ((atomicLoad(&residency_feedback[word]) & bit) != 0u) {
        return;
    }
    if ((atomicOr(&residency_feedback[word], bit) & bit) == 0u) {
        // The image's touched bit (after the records: word 4 + 2 * capacity + slot / 32), so the
        // decoder reads the bitsets of touched images only.
        let capacity = atomicLoad(&residency_feedback[3]);
        let touched = 4u + 2u * capacity + (slot >> 5u);
        if (capacity < 0x40000000u && residency_fb_inside(touched)) {
            atomicOr(&residency_feedback[touched], 1u << (slot & 31u));
        }
        let i = atomicAdd(&residency_feedback[2], 1u);
        let room = (arrayLength(&residency_feedback) - 4u) / 2u;
        if (i < atomicLoad(&residency_feedback[3]) && i < room) {
            atomicStore(&residency_feedback[4u + 2u * i], tile);
            atomicStore(&residency_feedback[5u + 2u * i], slot | (mip << 16u) | (kind << 21u));
        }
    }
}

fn residency_request_at(slot: u32, img: u32, layer: u32, mip: u32, uv: vec2<f32>, kind: u32) {
    if (mip < RESIDENCY_FEEDBACK_MAX_MIPS) {
        residency_request_pixels(slot, img, residency_tile_at(img, layer, mip, uv), mip, kind, 1u);
    }
}

// FeedbackSampling::pixel_writes: whether pixel `p` writes feedback in `frame` when one pixel of
// every `stride × stride` block writes, every `interval` frames, the block's pixels in turn.
fn residency_feedback_pixel_writes(p: vec2<u32>, frame: u32, stride_in: u32, interval_in: u32) -> bool {
    let stride = clamp(stride_in, 1u, 65535u);
    let interval = max(interval_in, 1u);
    if (frame % interval != 0u) {
        return false;
    }
    let j = (frame / interval) % (stride * stride);
    return p.x % stride == j % stride && p.y % stride == j / stride;
}

// lambda: the unclamped LOD; min_lod: the min-LOD map (or indirection) value of this sample's
// mip-0 region. A miss or a prefetch warning, and the low-water warning when the image has a mark
// (lod_warning::classify_sample, classify_low_water).
fn residency_feedback_write(slot: u32, layer: u32, uv: vec2<f32>, lambda: f32, min_lod: u32) {
    let t = &residency_table;
    let entries = arrayLength(&residency_table) / RESIDENCY_FEEDBACK_ENTRY_WORDS;
    if (slot >= entries) {
        return;
    }
    let img = slot * RESIDENCY_FEEDBACK_ENTRY_WORDS;
    let l = clamp(lambda, 0.0, f32(max((*t)[img + 12u], 1u) - 1u));
    let m = u32(floor(l));
    let first_tail = (*t)[img + 5u];
    if (m < first_tail && min_lod > m) {
        residency_request_at(slot, img, layer, m, uv, 0u);
    } else if (min_lod == m && m > 0u && m <= first_tail && m <= (*t)[img + 6u]
               && l - f32(m) < f32((*t)[img + 7u]) / 256.0) {
        residency_request_at(slot, img, layer, m - 1u, uv, 1u);
    }
    let mark = (*t)[img + 15u];
    let fetched = max(m, min_lod);
    if (mark != 0xFFFFFFFFu && min_lod != 255u && fetched <= mark && fetched < first_tail) {
        residency_request_at(slot, img, layer, fetched, uv, 2u);
    }
}

// The LOD a fragment samples at from screen-space derivatives (vt_lod.glsl): rho = the longer of
// the uv derivatives in texels of mip 0, lambda = log2(rho), unclamped. Uniform control flow.
fn residency_lambda(uv: vec2<f32>, size: vec2<f32>) -> f32 {
    let dx = dpdx(uv * size);
    let dy = dpdy(uv * size);
    let rho2 = max(dot(dx, dx), dot(dy, dy));
    return 0.5 * log2(max(rho2, 1e-12));
}
