#version 450
// Tile compaction's compute copy for carriers of 8-byte texels or compressed blocks (rgba16ui
// views): see include/compact_copy.glsl. Push { uvec2 tile; uint cols; uint count; uint first; }.
#define COPY_FORMAT rgba16ui
#include "compact_copy.glsl"
