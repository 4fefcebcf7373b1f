#version 450
// PRT-Ptex probes through include/ptex.glsl: per-face textures with borders in a sparse 2D array
// of one slice per level, manual trilinear filtering between slices with the face's finest
// resident level as fallback. Probes are (face, u, v, level wanted); results are the colour, then
// (level 0, level 1, blend, 1 where the face has a record or 0).
//
// Bounds: a probe index past the probes or the results writes nothing; the include bounds the
// face, the levels and every table word (see its header).
layout(local_size_x = 64) in;

layout(set = 0, binding = 0) uniform sampler2DArray slices;
layout(std430, set = 0, binding = 1) readonly buffer PtexFaces { uint ptexTable[]; };
layout(std430, set = 0, binding = 2) readonly buffer Probes { vec4 probes[]; };
layout(std430, set = 0, binding = 3) writeonly buffer Results { vec4 results[]; };

layout(push_constant) uniform Push {
    uint count;  // probes
} pc;

#include "ptex.glsl"

void main() {
    uint i = gl_GlobalInvocationID.x;
    if (i >= pc.count || i >= uint(probes.length()) || i >= uint(results.length()) / 2u) {
        return;
    }
    vec4 probe = probes[i];
    uint face = uint(max(probe.x, 0.0));
    vec3 levels = ptexLevels(face, probe.w);
    results[2u * i] = ptexSample(slices, face, probe.yz, probe.w);
    results[2u * i + 1u] = vec4(levels, ptexHasFace(face) ? 1.0 : 0.0);
}
