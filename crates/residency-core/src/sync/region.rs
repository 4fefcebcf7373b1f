//! Which part of a resource a use or a barrier covers: a byte range of a buffer or a range of an
//! image's mip levels and array layers.

use serde::{Deserialize, Serialize};

/// The part of a resource a declared use covers.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Region {
    /// The whole resource.
    #[default]
    Whole,
    /// Bytes `[offset, offset + size)` of a buffer.
    Bytes {
        /// First byte.
        offset: u64,
        /// Number of bytes (greater than zero).
        size: u64,
    },
    /// A range of an image's mip levels and array layers (every aspect of the image).
    Subresources(SubresourceRange),
}

impl Region {
    /// Bytes `[offset, offset + size)` of a buffer.
    pub const fn bytes(offset: u64, size: u64) -> Region {
        Region::Bytes { offset, size }
    }

    /// Mip levels `[base_mip, base_mip + mip_count)` of array layers
    /// `[base_layer, base_layer + layer_count)`.
    pub const fn subresources(base_mip: u32, mip_count: u32, base_layer: u32, layer_count: u32) -> Region {
        Region::Subresources(SubresourceRange { base_mip, mip_count, base_layer, layer_count })
    }
}

/// A range of mip levels and array layers of an image (`VkImageSubresourceRange` without the
/// aspect mask, which is the image's own).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct SubresourceRange {
    /// First mip level.
    pub base_mip: u32,
    /// Number of mip levels.
    pub mip_count: u32,
    /// First array layer.
    pub base_layer: u32,
    /// Number of array layers.
    pub layer_count: u32,
}

impl SubresourceRange {
    /// Every subresource of an image of `mip_levels` levels and `array_layers` layers.
    pub const fn all(mip_levels: u32, array_layers: u32) -> SubresourceRange {
        SubresourceRange { base_mip: 0, mip_count: mip_levels, base_layer: 0, layer_count: array_layers }
    }

    /// One mip level of one layer.
    pub const fn single(mip: u32, layer: u32) -> SubresourceRange {
        SubresourceRange { base_mip: mip, mip_count: 1, base_layer: layer, layer_count: 1 }
    }

    /// The number of subresources in the range.
    pub const fn count(&self) -> u64 {
        self.mip_count as u64 * self.layer_count as u64
    }

    /// Whether `(mip, layer)` is in the range.
    pub const fn contains(&self, mip: u32, layer: u32) -> bool {
        mip >= self.base_mip
            && mip - self.base_mip < self.mip_count
            && layer >= self.base_layer
            && layer - self.base_layer < self.layer_count
    }

    /// Whether the two ranges share a subresource.
    pub const fn overlaps(&self, other: &SubresourceRange) -> bool {
        (self.base_mip as u64) < other.base_mip as u64 + other.mip_count as u64
            && (other.base_mip as u64) < self.base_mip as u64 + self.mip_count as u64
            && (self.base_layer as u64) < other.base_layer as u64 + other.layer_count as u64
            && (other.base_layer as u64) < self.base_layer as u64 + self.layer_count as u64
    }
}
