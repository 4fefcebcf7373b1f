// residency_codes.glsl — the seed's residency codes with the low-water LOD warning, shared by
// residency.glsl (hardware path) and residency_software.glsl (software path), which include it.
//
// `residencySampleWarn` returns a code and leaves `texel` untouched on a miss (the seed's CMOV:
// initialise it with the default value). The code packs: bit 0 resident, bit 1 the low-water
// warning (a fetch from a level at or below the texture's mark `lowWater`;
// RESIDENCY_NO_LOW_WATER: no mark), bits 8..16 the level that warned. Decode it with the three
// functions of the seed (sparseTexelResident, sparseTexelMinLodWarning,
// sparseTexelLodWarningFetch). The CPU rule is residency_core::streaming::low_water_level.

#ifndef RESIDENCY_CODES_GLSL
#define RESIDENCY_CODES_GLSL

const uint RESIDENCY_NO_LOW_WATER = 0xFFFFFFFFu;
const int RESIDENCY_CODE_RESIDENT = 1;
const int RESIDENCY_CODE_MIN_LOD_WARNING = 2;

bool residencyTexelResident(int code) { return (code & RESIDENCY_CODE_RESIDENT) != 0; }
bool residencyTexelMinLodWarning(int code) { return (code & RESIDENCY_CODE_MIN_LOD_WARNING) != 0; }
// The level that raised the warning; 0 when it was not raised (as the seed's).
int residencyTexelLodWarningFetch(int code) { return (code >> 8) & 255; }

// The code of a sample that fetched (from `usedLod` up) when `resident`, of an image of `levels` mips.
int residencyWarnCode(bool resident, float usedLod, int levels, uint lowWater) {
    if (!resident) return 0;
    int fetched = clamp(int(floor(usedLod)), 0, max(levels - 1, 0));
    if (lowWater != RESIDENCY_NO_LOW_WATER && uint(fetched) <= lowWater) {
        return RESIDENCY_CODE_RESIDENT | RESIDENCY_CODE_MIN_LOD_WARNING | (fetched << 8);
    }
    return RESIDENCY_CODE_RESIDENT;
}

#endif
