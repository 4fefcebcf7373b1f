#version 460
// Traces one ray per pixel through a top-level acceleration structure with a ray query
// (GL_EXT_ray_query) and writes what it hit: pixel (x, y) casts a ray along +z from
// ((x + 0.5) * scale, (y + yBias) * scale, -1) up to t = 16; the result is
// customIndex * 10 + primitiveIndex + 1 of the closest opaque triangle, or 0 on a miss.
// Pixels past width x height, or past the bound range, are skipped.
#extension GL_EXT_ray_query : require

layout(local_size_x = 8, local_size_y = 8) in;

layout(set = 0, binding = 0) uniform accelerationStructureEXT scene;
layout(std430, set = 0, binding = 1) writeonly buffer Pixels { uint pixels[]; };
layout(push_constant) uniform Push { uint width; uint height; float scale; float yBias; } pc;

void main() {
    uvec2 p = gl_GlobalInvocationID.xy;
    if (p.x >= pc.width || p.y >= pc.height) {
        return;
    }
    uint i = p.y * pc.width + p.x;
    if (i >= uint(pixels.length())) {
        return;
    }
    vec3 origin = vec3((float(p.x) + 0.5) * pc.scale, (float(p.y) + pc.yBias) * pc.scale, -1.0);
    // A ray's origin must be finite (the caller's scale and bias are any floats): a miss instead.
    if (any(isnan(origin)) || any(isinf(origin))) {
        pixels[i] = 0u;
        return;
    }
    rayQueryEXT q;
    rayQueryInitializeEXT(q, scene, gl_RayFlagsOpaqueEXT, 0xFF, origin, 0.0, vec3(0.0, 0.0, 1.0), 16.0);
    while (rayQueryProceedEXT(q)) {
    }
    uint value = 0u;
    if (rayQueryGetIntersectionTypeEXT(q, true) == gl_RayQueryCommittedIntersectionTriangleEXT) {
        value = uint(rayQueryGetIntersectionInstanceCustomIndexEXT(q, true)) * 10u
            + uint(rayQueryGetIntersectionPrimitiveIndexEXT(q, true)) + 1u;
    }
    pixels[i] = value;
}
