// residency_search.glsl — the search for the finest LOD whose whole footprint is resident, over
// the path functions its includer defines first (residency_footprint.glsl lists them).

#ifndef RESIDENCY_SEARCH_GLSL
#define RESIDENCY_SEARCH_GLSL

// How a sample reaches a coarser mip than it asks for.
const int RESIDENCY_BY_LOD = 0;      // an explicit LOD: L = max(lod, c)
const int RESIDENCY_BY_SCALE = 1;    // derivatives scaled by 2^(L − λ): the tap box grows with them
const int RESIDENCY_BY_CLAMP = 2;    // a minimum-LOD clamp c (sparseTextureClampARB): the box stays

// The answer of residencyFootprintLod: `found`, the LOD sampled `lod` (RESIDENCY_BY_LOD and
// _SCALE), the clamp `clampLod` (RESIDENCY_BY_CLAMP) and the derivatives' `scale`.
struct ResidencyFootprint {
    bool found;
    float lod;
    float clampLod;
    float scale;
};

// The finest sample at or above `lod` (λ for gradient samples) whose every tap is resident: taps
// centred in uv ± `spread` (at the LOD asked for), the mips tested reaching `slack.x` levels below
// and `slack.y` above the LOD sampled, coarser mips reached `how`. Starts at the centre region's chain (nothing finer can be whole) and steps
// one mip coarser while some mip read is not resident; at most one step per mip.
// `start`: residencyMinLod(map, uv), which a caller that needs it too (feedback) reads once and
// passes to residencyFootprintLodFrom.
ResidencyFootprint residencyFootprintLodFrom(sampler2D tex, usampler2D map, vec2 uv, vec2 spread, float lod,
                                             vec2 slack, int how, uint start) {
    ResidencyFootprint f;
    f.found = false;
    f.lod = -1.0;
    f.clampLod = 0.0;
    f.scale = 1.0;
    int levels = residencyLevels(tex, map);
    if (start >= uint(levels)) {
        return f;
    }
    float top = float(levels - 1);
    float base = clamp(lod, 0.0, top);
    for (int c = max(int(start), int(floor(max(base - slack.x, 0.0)))); c < levels; c++) {
        float l = base;
        float a = base - slack.x;
        float b = base + slack.y;
        float scale = 1.0;
        if (how == RESIDENCY_BY_CLAMP) {
            a = max(a, float(c));
            b = max(b, float(c) + slack.y);
        } else {
            // The finest l whose slack reaches no mip finer than c (mip 0 has none finer).
            l = c <= 0 ? base : min(max(base, float(c) + slack.x), top);
            a = l - slack.x;
            b = l + slack.y;
            if (how == RESIDENCY_BY_SCALE) {
                scale = exp2(max(l - lod, 0.0));
            }
        }
        vec2 lo = uv - spread * scale;
        vec2 hi = uv + spread * scale;
        int m0 = int(floor(max(a, 0.0)));
        int m1 = min(int(ceil(b)), levels - 1);
        bool whole = true;
        for (int m = m0; m <= m1; m++) {
            if (!residencyMipResident(tex, map, lo, hi, m)) {
                whole = false;
                break;
            }
        }
        if (whole) {
            f.found = true;
            f.lod = l;
            f.clampLod = float(c);
            f.scale = scale;
            return f;
        }
    }
    return f;
}

ResidencyFootprint residencyFootprintLod(sampler2D tex, usampler2D map, vec2 uv, vec2 spread, float lod,
                                         vec2 slack, int how) {
    return residencyFootprintLodFrom(tex, map, uv, spread, lod, slack, how, residencyMinLod(map, uv));
}

// residencyFootprintLod of a gradient sample: its LOD and tap box from the derivatives and the
// sampler's `maxAnisotropy` (1 without anisotropy).
ResidencyFootprint residencyGradFootprint(sampler2D tex, usampler2D map, vec2 uv, vec2 dPdx, vec2 dPdy,
                                          float maxAnisotropy, vec2 slack, int how) {
    float lambda = residencyGradLod(dPdx, dPdy, residencySize(tex, map), maxAnisotropy);
    vec2 spread = residencyTapSpread(dPdx, dPdy, maxAnisotropy);
    return residencyFootprintLod(tex, map, uv, spread, lambda, slack, how);
}

#endif
