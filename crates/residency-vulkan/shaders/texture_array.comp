#version 450
// Samples a sparse 2D array at probes (u, v, layer, lod) with residency codes and a per-slice LOD
// bias from a uniform buffer (the seed's "arrays of variable sized textures": each slice populates
// the mips from its bias down, and samples at lod + bias[slice]). Results: the texel (the default
// value where not resident), then (resident, the LOD sampled, 0, 0).
#extension GL_ARB_sparse_texture2 : require
#extension GL_GOOGLE_include_directive : require
#include "residency.glsl"

layout(local_size_x = 64) in;

layout(set = 0, binding = 0) uniform sampler2DArray slices;
layout(set = 0, binding = 1) uniform Bias { vec4 bias[256]; } sliceBias; // x: the slice's LOD bias
layout(set = 0, binding = 2) readonly buffer Probes { vec4 probes[]; };
layout(set = 0, binding = 3) writeonly buffer Results { vec4 results[]; };

layout(push_constant) uniform Push { vec4 defaultValue; uint count; } pc;

void main() {
    uint i = gl_GlobalInvocationID.x;
    if (i >= pc.count || i >= uint(probes.length()) || i >= uint(results.length()) / 2u) {
        return;
    }
    vec4 probe = probes[i];
    // The slice's bias entry: clamped to the image's layers and the block's 256 entries (a
    // program refuses a uniform range under the block's 4096 bytes).
    int layers = textureSize(slices, 0).z;
    int slice = clamp(int(probe.z), 0, min(layers, 256) - 1);
    float lod = probe.w + sliceBias.bias[slice].x;
    bool resident;
    vec4 texel = residencySampleLod(slices, probe.xyz, lod, pc.defaultValue, resident);
    results[2 * i] = texel;
    results[2 * i + 1] = vec4(resident ? 1.0 : 0.0, lod, 0.0, 0.0);
}
