//! A sparse image's residency is read-only outside the crate: its page table names physical tiles
//! of the image's pool, and `SparseResidency::remap` (which needs no pool) through it freed
//! another image's tile (issue #29, cause 3). Changes go through the checked commits and releases.

use residency_core::tiles::{PhysicalTile, TileIndex};
use residency_vulkan::sparse::SparseImage;

fn remap_without_the_pool(image: &mut SparseImage, from: PhysicalTile, to: PhysicalTile) {
    let _ = image.residency_mut().remap(&[(TileIndex(0), from, to)]);
}

fn main() {}
