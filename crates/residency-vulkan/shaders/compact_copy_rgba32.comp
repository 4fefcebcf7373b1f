#version 450
// Tile compaction's compute copy for carriers of 16-byte texels or compressed blocks (rgba32ui views):
// see include/compact_copy.glsl. Push { uvec2 tile; uint cols; uint count; uint first; }.
#define COPY_FORMAT rgba32ui
#include "compact_copy.glsl"
