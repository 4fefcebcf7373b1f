// Tile compaction's compute copy (`sparse/compact_compute.rs`), included by
// `compact_copy_{r32,rgba16,rgba32}.comp` with COPY_FORMAT defined as the storage format of the
// carriers' views (one texel or one compressed block of 4, 8 or 16 bytes).
//
// Two carrier images of the same extent, each a row-major grid of `cols` tiles a row: the source
// carrier bound to the moved tiles' old memory, the destination carrier to their new memory,
// slot for slot. Workgroup z is a slot (`first` + z), x and y a 16 x 16 part of its tile: every
// texel of slots `first .. count` is copied to the same texel of the destination. A slot at or
// past `count`, a texel past the tile's extent and a texel outside either image (`imageSize`)
// are skipped, whatever the push constants say.
layout(local_size_x = 16, local_size_y = 16) in;

layout(set = 0, binding = 0, COPY_FORMAT) uniform readonly uimage2D src;
layout(set = 0, binding = 1, COPY_FORMAT) uniform writeonly uimage2D dst;
layout(push_constant) uniform Push {
    uvec2 tile;  // a tile's extent in the views' texels
    uint cols;   // tiles a row
    uint count;  // slots to copy
    uint first;  // the slot of workgroup z = 0
} pc;

void main() {
    uint slot = pc.first + gl_WorkGroupID.z;
    uvec2 within = gl_GlobalInvocationID.xy;
    if (slot >= pc.count || any(greaterThanEqual(within, pc.tile))) {
        return;
    }
    uint cols = max(pc.cols, 1u);
    uvec2 texel = uvec2(slot % cols, slot / cols) * pc.tile + within;
    if (any(greaterThanEqual(texel, uvec2(imageSize(src)))) || any(greaterThanEqual(texel, uvec2(imageSize(dst))))) {
        return;
    }
    imageStore(dst, ivec2(texel), imageLoad(src, ivec2(texel)));
}
