#version 450
// The pattern of sparse_store.comp, by fragment position: (x % 256, y % 256, 255, 255) as unorm.
// Fragments over non-resident tiles of a sparse attachment are dropped on devices with
// residencyNonResidentStrict and go nowhere defined elsewhere.
layout(location = 0) out vec4 fragColor;

void main() {
    ivec2 texel = ivec2(gl_FragCoord.xy);
    fragColor = vec4(float(texel.x % 256) / 255.0, float(texel.y % 256) / 255.0, 1.0, 1.0);
}
