#version 450
// Writes a pattern into a region of a partially resident storage image. Writes to non-resident
// tiles are dropped on devices with residencyNonResidentStrict and undefined elsewhere: the library
// never relies on either.
layout(local_size_x = 8, local_size_y = 8) in;

layout(set = 0, binding = 0, rgba8) uniform writeonly image2D target;
layout(push_constant) uniform Push { ivec2 origin; ivec2 size; } pc;

void main() {
    ivec2 p = ivec2(gl_GlobalInvocationID.xy);
    if (any(greaterThanEqual(p, pc.size))) {
        return;
    }
    // Texels outside the bound image (imageSize) are not written, whatever origin and size say.
    ivec2 texel = pc.origin + p;
    if (any(greaterThanEqual(uvec2(texel), uvec2(imageSize(target))))) {
        return;
    }
    imageStore(target, texel, vec4(float(texel.x % 256) / 255.0, float(texel.y % 256) / 255.0, 1.0, 1.0));
}
