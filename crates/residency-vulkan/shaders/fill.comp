#version 450
// Writes value + i into a storage buffer: another compute pass on a neighbouring buffer. Writes
// words below both `count` and the bound range (`values.length()`): a count past the range
// writes the range and nothing after it.
layout(local_size_x = 64) in;

layout(std430, set = 0, binding = 0) writeonly buffer Target { uint values[]; };
layout(push_constant) uniform Push { uint count; uint value; } pc;

void main() {
    uint i = gl_GlobalInvocationID.x;
    if (i < pc.count && i < uint(values.length())) {
        values[i] = pc.value + i;
    }
}
