// The streaming demo's renderer, shared by stream_view.comp (hardware sparse residency) and
// stream_view_software.comp (the software path): a camera over a plane textured with a virtual
// texture, one ray per pixel. Streamed mode samples the partially resident texture with the
// min-LOD fallback and writes shader feedback; reference mode samples the fully resident copy at
// the same LOD.

layout(local_size_x = 8, local_size_y = 8) in;

// Hardware: the sparse image and its min-LOD map. Software: the tile-cache atlas and the
// indirection texture. The sampling code below is the same for both.
layout(set = 0, binding = 0) uniform sampler2D tex;
layout(set = 0, binding = 1) uniform usampler2D minLodMap;
layout(set = 0, binding = 2, rgba8) uniform writeonly image2D outImage;
layout(std430, set = 0, binding = 3) buffer Feedback { uint fbWords[]; };
layout(std430, set = 0, binding = 4) readonly buffer ImageTable { uint table[]; };
layout(set = 0, binding = 5) uniform sampler2D referenceTex;

layout(push_constant) uniform Push {
    vec4 origin;      // xyz camera position; w: plane side in world units
    vec4 forward;     // xyz; w: tan(fov / 2)
    vec4 right;       // xyz; w: texture side in texels
    vec4 up;          // xyz; w: 1 = reference mode
    uvec4 sampling;   // x: frame, y: feedback pixel stride, z: feedback frame interval
} pc;

#ifdef RESIDENCY_SOFTWARE
#include "residency_software.glsl"
#else
#include "residency.glsl"
#endif
#include "feedback.glsl"

void main() {
    ivec2 size = imageSize(outImage);
    ivec2 p = ivec2(gl_GlobalInvocationID.xy);
    if (any(greaterThanEqual(p, size))) {
        return;
    }
    vec2 ndc = (vec2(p) + 0.5) / vec2(size) * 2.0 - 1.0;
    float aspect = float(size.x) / float(size.y);
    vec3 dir = normalize(pc.forward.xyz + ndc.x * aspect * pc.forward.w * pc.right.xyz - ndc.y * pc.forward.w * pc.up.xyz);
    vec4 color = vec4(0.55, 0.7, 0.9, 1.0); // sky
    if (dir.z < -1e-4) {
        float t = -pc.origin.z / dir.z;
        vec3 hit = pc.origin.xyz + t * dir;
        vec2 uv = hit.xy / pc.origin.w;
        if (all(greaterThanEqual(uv, vec2(0.0))) && all(lessThan(uv, vec2(1.0)))) {
            // Footprint of one pixel on the plane, in texels of mip 0.
            float pixelWorld = t * 2.0 * pc.forward.w / float(size.y) / max(-dir.z, 0.05);
            float lambda = log2(max(pixelWorld * pc.right.w / pc.origin.w, 1e-6));
            float lod = max(lambda, 0.0);
            if (pc.up.w > 0.5) {
                color = textureLod(referenceTex, uv, lod);
            } else {
                bool resident;
                float usedLod;
                // The min LOD read once, for the sample's footprint search and the feedback.
                uint minLod = residencyMinLod(minLodMap, uv);
                color = residencySampleFallbackFrom(tex, minLodMap, uv, lod, vec4(1.0, 0.0, 1.0, 1.0), minLod, resident,
                                                    usedLod);
                if (feedbackPixelWrites(uvec2(p), pc.sampling.x, pc.sampling.y, pc.sampling.z)) {
                    feedback(0u, 0u, uv, lambda, minLod);
                }
            }
        }
    }
    imageStore(outImage, p, color);
}
