#version 450
// `residency-bench defrag`'s copy probe: copies every texel of one RGBA8 storage image into the
// same texel of another of the same extent (a compute copy between two sparse images, against
// vkCmdCopyImage). Compiled with `glslc --target-env=vulkan1.3 -O -o copy_probe.comp.spv copy_probe.comp`.
layout(local_size_x = 16, local_size_y = 16) in;

layout(set = 0, binding = 0, rgba8) readonly uniform image2D src;
layout(set = 0, binding = 1, rgba8) writeonly uniform image2D dst;

void main() {
    ivec2 p = ivec2(gl_GlobalInvocationID.xy);
    if (all(lessThan(p, imageSize(src)))) {
        imageStore(dst, p, imageLoad(src, p));
    }
}
