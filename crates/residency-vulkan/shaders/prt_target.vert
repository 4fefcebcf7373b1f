#version 450
// One triangle covering the whole render area (no vertex buffer): rendering into every texel of
// a partially resident colour attachment.

void main() {
    vec2 corner = vec2(float((gl_VertexIndex << 1) & 2), float(gl_VertexIndex & 2));
    gl_Position = vec4(corner * 2.0 - 1.0, 0.0, 1.0);
}
