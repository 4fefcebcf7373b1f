#version 460
// Closest-hit shader of `trace.rgen`: customIndex * 10 + primitiveIndex + 1 of the hit.
#extension GL_EXT_ray_tracing : require

layout(location = 0) rayPayloadInEXT uint payload;

void main() {
    payload = uint(gl_InstanceCustomIndexEXT) * 10u + uint(gl_PrimitiveID) + 1u;
}
