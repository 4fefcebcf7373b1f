// residency_slices.glsl — sampling a sliced texture array (`Streamer::add_sliced_texture`, the
// seed's "arrays of variable sized textures": slice s holds a texture of its own size, which fills
// the array's levels from its finest level bias[s] down; docs/streaming.md "Sliced texture arrays").
//
// Declare before including: `readonly buffer SliceBias { float residencySliceBias[]; }` (the
// texture's `TextureBinding::slice_bias` buffer, one float per slice: the slice's LOD bias, or
// RESIDENCY_SLICE_EMPTY for a slice that holds no texture) at a binding of your choice. Include
// residency.glsl first for the sampling helpers (hardware path: the streamer streams arrays there
// only), and feedback.glsl first for residencySliceFeedback.
//
// Bounds: the slice is clamped to the image's layers and to the bias buffer's length (a buffer
// without entries reads every slice as empty); the biased LOD is clamped by the sampler.

#ifndef RESIDENCY_SLICES_GLSL
#define RESIDENCY_SLICES_GLSL

// The bias buffer's value of an empty slice (`SLICE_EMPTY_BIAS`).
const float RESIDENCY_SLICE_EMPTY = -1.0;

// The slice an array coordinate's layer picks (rounded, as residencyMinLod rounds it), within the
// image's `layers` and the bias buffer's entries.
int residencySlice(float layer, int layers) {
    int n = min(layers, int(residencySliceBias.length()));
    return clamp(int(layer + 0.5), 0, max(n - 1, 0));
}

// Slice `slice`'s bias (RESIDENCY_SLICE_EMPTY past the buffer's entries).
float residencySliceBiasOf(int slice) {
    if (slice < 0 || slice >= int(residencySliceBias.length())) {
        return RESIDENCY_SLICE_EMPTY;
    }
    return residencySliceBias[slice];
}

// Whether slice `slice` holds no texture.
bool residencySliceEmpty(int slice) {
    return residencySliceBiasOf(slice) < 0.0;
}

// The array LOD of a sample at `lod` of slice `slice`'s own texture: max(lod, 0) + the slice's
// bias, so LOD 0 is the slice's finest level and nothing finer is ever sampled.
float residencySliceLod(int slice, float lod) {
    return max(lod, 0.0) + max(residencySliceBiasOf(slice), 0.0);
}

#ifdef RESIDENCY_GLSL
// residencySampleFallback of slice round(uvSlice.z) at `lod` of the slice's own texture
// (residencySliceLod): the finest resident level at or above it. An empty slice returns
// `defaultValue`, not resident, usedLod -1.
vec4 residencySliceSampleFallback(sampler2DArray tex, usampler2DArray minLodMap, vec3 uvSlice, float lod,
                                  vec4 defaultValue, out bool resident, out float usedLod) {
    int slice = residencySlice(uvSlice.z, textureSize(tex, 0).z);
    if (residencySliceEmpty(slice)) {
        resident = false;
        usedLod = -1.0;
        return defaultValue;
    }
    return residencySampleFallback(tex, minLodMap, vec3(uvSlice.xy, float(slice)), residencySliceLod(slice, lod),
                                   defaultValue, resident, usedLod);
}

// residencySampleWarn (the seed's codes, the low-water mark) of slice round(uvSlice.z) at `lod`
// of the slice's own texture. An empty slice keeps `texel` (the caller's default) with a
// non-resident code, usedLod -1.
int residencySliceSampleWarn(sampler2DArray tex, usampler2DArray minLodMap, vec3 uvSlice, float lod, uint lowWater,
                             inout vec4 texel, out float usedLod) {
    int slice = residencySlice(uvSlice.z, textureSize(tex, 0).z);
    if (residencySliceEmpty(slice)) {
        usedLod = -1.0;
        return residencyWarnCode(false, usedLod, textureQueryLevels(tex), lowWater);
    }
    return residencySampleWarn(tex, minLodMap, vec3(uvSlice.xy, float(slice)), residencySliceLod(slice, lod),
                               lowWater, texel, usedLod);
}
#endif

#ifdef RESIDENCY_FEEDBACK_GLSL
// feedback() for a sample at `lod` of slice `slice`'s own texture: the tile of the array level it
// wants (residencySliceLod); an empty slice asks for nothing. `minLod`: residencyMinLod of the
// sample (slice included).
void residencySliceFeedback(uint slot, int slice, vec2 uv, float lod, uint minLod) {
    if (residencySliceEmpty(slice)) {
        return;
    }
    feedback(slot, uint(slice), uv, residencySliceLod(slice, lod), minLod);
}
#endif

#endif
