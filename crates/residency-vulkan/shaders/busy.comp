#version 450
// Keeps one GPU thread busy for `iterations` dependent steps, then writes what it computed: a
// stand-in for a long frame, which holds the frame in flight on the GPU (the streamer's in-flight
// test, crates/residency-vulkan/tests/streamer_in_flight.rs; a renderer's own frame-protocol tests).
layout(local_size_x = 1) in;

layout(std430, set = 0, binding = 0) writeonly buffer Result { uint result[]; };
layout(push_constant) uniform Push { uint iterations; uint seed; } pc;
// (A range under 4 bytes has no word 0: nothing is written.)

void main() {
    uint x = pc.seed;
    for (uint i = 0u; i < pc.iterations; i++) {
        x = x * 1664525u + 1013904223u;
    }
    if (result.length() > 0) {
        result[0] = x;
    }
}
