// vt_lod.glsl — the LOD the virtual-texture fragment shaders sample at, from screen-space
// derivatives: the isotropic lambda of the Vulkan specification (rho = the longer of the two uv
// derivatives in texels of mip 0, lambda = log2(rho)), unclamped (feedback wants it so). Call it
// in uniform control flow (it takes derivatives).

#ifndef RESIDENCY_VT_LOD_GLSL
#define RESIDENCY_VT_LOD_GLSL

float vtLambda(vec2 uv, vec2 size) {
    vec2 dx = dFdx(uv * size);
    vec2 dy = dFdy(uv * size);
    float rho2 = max(dot(dx, dx), dot(dy, dy));
    return 0.5 * log2(max(rho2, 1e-12));
}

#endif
