// software.wgsl — the software residency path from WGSL: a tile-cache atlas (`residency_tex`, a
// normal texture with bordered tile slots, bilinear sampler) and an indirection texture
// (`residency_map`, R32Uint, one level: a header row — sizes, then each mip's first row — then
// each mip's tile entries `slot | data_mip << 24`; crates/residency-core/src/tiles/indirection.rs).
// The WGSL twin of residency-vulkan's shaders/include/residency_software.glsl (2D), with the same
// functions and bounds as hardware.wgsl: residency_min_lod, residency_size, residency_sample.
//
// Declare before it (residency_wgpu::wgsl::declarations does):
//   var residency_tex: texture_2d<f32>;      // the atlas
//   var residency_sampler: sampler;          // bilinear, clamp to edge
//   var residency_map: texture_2d<u32>;      // the indirection texture
//
// Bounds: every indirection word is read through residency_word, which reads 0 outside the
// texture, and the header is made usable (tile side, columns and mips at least 1, at most 32 mips)
// before anything divides or shifts by it.

const RESIDENCY_MIN_LOD_NONE: u32 = 255u;

struct ResidencySoftware {
    size: vec2<u32>,
    tile: u32,
    border: u32,
    mips: u32,
    columns: u32,
}

fn residency_word(texel: vec2<i32>) -> u32 {
    if (any(vec2<u32>(texel) >= textureDimensions(residency_map, 0))) {
        return 0u;
    }
    return textureLoad(residency_map, texel, 0).r;
}

fn residency_tiles(size: vec2<u32>, tile_in: u32, mip: u32) -> vec2<i32> {
    let extent = max(size >> vec2<u32>(min(mip, 31u)), vec2<u32>(1u));
    let tile = max(tile_in, 1u);
    return vec2<i32>((extent + tile - 1u) / tile);
}

fn residency_header() -> ResidencySoftware {
    var h: ResidencySoftware;
    h.size = vec2<u32>(residency_word(vec2<i32>(0, 0)), residency_word(vec2<i32>(1, 0)));
    h.tile = max(residency_word(vec2<i32>(2, 0)), 1u);
    // Bit 31 of the border word marks borders filled from the source (INDIRECTION_SOURCE_BORDERS).
    h.border = residency_word(vec2<i32>(3, 0)) & 0x7fffffffu;
    h.mips = clamp(residency_word(vec2<i32>(4, 0)), 1u, 32u);
    h.columns = max(residency_word(vec2<i32>(5, 0)), 1u);
    return h;
}

// The entry (slot, data mip) covering `uv` at mip `mip`.
fn residency_entry(h: ResidencySoftware, uv: vec2<f32>, mip: u32) -> vec2<u32> {
    let row = residency_word(vec2<i32>(6 + i32(mip), 0));
    let extent = vec2<f32>(max(h.size >> vec2<u32>(mip), vec2<u32>(1u)));
    let tiles = residency_tiles(h.size, h.tile, mip);
    let t = clamp(vec2<i32>(floor(uv * extent / f32(h.tile))), vec2<i32>(0), tiles - 1);
    let e = residency_word(vec2<i32>(t.x, i32(row) + t.y));
    return vec2<u32>(e & 0x00ffffffu, e >> 24u);
}

fn residency_min_lod(uv: vec2<f32>) -> u32 {
    return residency_entry(residency_header(), uv, 0u).y;
}

fn residency_size() -> vec2<f32> {
    return vec2<f32>(residency_header().size);
}

// A bilinear sample of mip `mip` at `uv` from the atlas (the caller knows it is resident).
fn residency_level(h: ResidencySoftware, uv: vec2<f32>, mip: u32) -> vec4<f32> {
    var t = clamp(vec2<i32>(floor(uv * vec2<f32>(max(h.size >> vec2<u32>(mip), vec2<u32>(1u))) / f32(h.tile))),
                  vec2<i32>(0), residency_tiles(h.size, h.tile, mip) - 1);
    let row = residency_word(vec2<i32>(6 + i32(mip), 0));
    let e = residency_word(vec2<i32>(t.x, i32(row) + t.y));
    let slot = e & 0x00ffffffu;
    let data_mip = min(e >> 24u, h.mips - 1u);
    for (var m = mip + 1u; m <= data_mip; m++) {
        t = min(t / 2, residency_tiles(h.size, h.tile, m) - 1);
    }
    let extent = vec2<f32>(max(h.size >> vec2<u32>(data_mip), vec2<u32>(1u)));
    let q = clamp(uv * extent, vec2<f32>(0.5), extent - 0.5);
    let slot_side = f32(h.tile + 2u * h.border);
    let origin = vec2<f32>(f32(slot % h.columns), f32(slot / h.columns)) * slot_side;
    let pos = origin + f32(h.border) + (q - vec2<f32>(t) * f32(h.tile));
    return textureSampleLevel(residency_tex, residency_sampler, pos / vec2<f32>(textureDimensions(residency_tex, 0)), 0.0);
}

// A trilinear sample at `lod` clamped to the finest resident coarser mip (two bilinear samples
// from the atlas, blended); `fallback` where nothing is.
fn residency_sample(uv: vec2<f32>, lod: f32, fallback: vec4<f32>) -> vec4<f32> {
    let h = residency_header();
    let min_lod = residency_entry(h, uv, 0u).y;
    if (min_lod == RESIDENCY_MIN_LOD_NONE) {
        return fallback;
    }
    let used = min(max(lod, f32(min_lod)), f32(h.mips - 1u));
    let lo = u32(floor(used));
    let f = used - f32(lo);
    let a = residency_level(h, uv, lo);
    if (f <= 0.0 || lo + 1u >= h.mips) {
        return a;
    }
    return mix(a, residency_level(h, uv, lo + 1u), f);
}
