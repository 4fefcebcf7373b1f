#version 450
// Tile compaction's compute copy for carriers of 4-byte texels or compressed blocks (r32ui views):
// see include/compact_copy.glsl. Push { uvec2 tile; uint cols; uint count; uint first; }.
#define COPY_FORMAT r32ui
#include "compact_copy.glsl"
