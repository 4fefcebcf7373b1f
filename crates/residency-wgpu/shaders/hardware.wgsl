// hardware.wgsl — the hardware residency path from WGSL: the sparse image sampled at a LOD clamped
// by the min-LOD map (residency.glsl's residencySampleFallback). WGSL has no residency query, so
// the clamp is what makes every read resident: the map guarantees the chain from its value down
// to the coarsest level is bound for the region.
//
// Declare before it (residency_wgpu::wgsl::declarations does):
//   var residency_tex: texture_2d<f32>;      // the sparse image, all mips
//   var residency_sampler: sampler;          // trilinear
//   var residency_map: texture_2d<u32>;      // the min-LOD map (one texel per mip-0 tile)

const RESIDENCY_MIN_LOD_NONE: u32 = 255u;

// The finest LOD that is safe to sample at `uv` (RESIDENCY_MIN_LOD_NONE when none is).
fn residency_min_lod(uv: vec2<f32>) -> u32 {
    let size = vec2<i32>(textureDimensions(residency_map, 0));
    let region = clamp(vec2<i32>(uv * vec2<f32>(size)), vec2<i32>(0), size - 1);
    return textureLoad(residency_map, region, 0).r;
}

// The texture's extent (mip 0), for residency_lambda.
fn residency_size() -> vec2<f32> {
    return vec2<f32>(textureDimensions(residency_tex, 0));
}

// A sample at `lod` clamped to the finest resident coarser mip; `fallback` where nothing is.
// Returns the colour; the LOD used is (lod clamped) or -1.
fn residency_sample(uv: vec2<f32>, lod: f32, fallback: vec4<f32>) -> vec4<f32> {
    let min_lod = residency_min_lod(uv);
    if (min_lod == RESIDENCY_MIN_LOD_NONE) {
        return fallback;
    }
    return textureSampleLevel(residency_tex, residency_sampler, uv, max(lod, f32(min_lod)));
}
