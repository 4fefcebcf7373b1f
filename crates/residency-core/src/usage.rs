//! Buffer bind flags: how a buffer may be used (the seed's `BufferBindFlags`).
//!
//! A pool created with known flags gives every buffer those flags; a pool created with
//! [`BufferPoolUsage::Unknown`] takes each buffer's own flags at `init_buffer` time.

use crate::profile::BufferProbeUsage;
use serde::{Deserialize, Serialize};
use std::fmt;
use std::ops::{BitOr, BitOrAssign};

macro_rules! usage_flags {
    ($( $(#[$doc:meta])* $name:ident = $bit:literal, $text:literal; )*) => {
        impl BufferUsage {
            $( $(#[$doc])* pub const $name: BufferUsage = BufferUsage(1 << $bit); )*

            /// Every flag with its name, in bit order.
            pub const NAMED: &'static [(BufferUsage, &'static str)] = &[ $( (BufferUsage::$name, $text), )* ];
        }
    };
}

/// A set of buffer usages.
#[derive(Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct BufferUsage(u32);

// The bit positions are those of `VkBufferUsageFlagBits`, so the backend converts with `from_raw`.
usage_flags! {
    /// Source of copies (`TRANSFER_SRC`).
    COPY_SRC = 0, "copy_src";
    /// Destination of copies and uploads (`TRANSFER_DST`).
    COPY_DST = 1, "copy_dst";
    /// Uniform texel buffer.
    UNIFORM_TEXEL = 2, "uniform_texel";
    /// Storage texel buffer.
    STORAGE_TEXEL = 3, "storage_texel";
    /// Uniform (constant) buffer.
    UNIFORM = 4, "uniform";
    /// Storage buffer, read or written by shaders (UAV / raw SRV).
    STORAGE = 5, "storage";
    /// Index buffer.
    INDEX = 6, "index";
    /// Vertex buffer.
    VERTEX = 7, "vertex";
    /// Indirect draw/dispatch arguments.
    INDIRECT = 8, "indirect";
    /// A ray-tracing shader binding table (`SHADER_BINDING_TABLE_KHR`; needs
    /// VK_KHR_ray_tracing_pipeline). Placed at the spec's 64 B shader-table alignment.
    SHADER_BINDING_TABLE = 10, "shader_binding_table";
    /// Its device address may be taken (`SHADER_DEVICE_ADDRESS`).
    DEVICE_ADDRESS = 17, "device_address";
    /// Read-only input of an acceleration-structure build: vertices, indices, transforms, AABBs,
    /// instances (`ACCELERATION_STRUCTURE_BUILD_INPUT_READ_ONLY_KHR`; needs
    /// VK_KHR_acceleration_structure). Placed at 16 B (instances and transforms).
    ACCELERATION_STRUCTURE_BUILD_INPUT = 19, "acceleration_structure_build_input";
    /// Storage of acceleration structures (`ACCELERATION_STRUCTURE_STORAGE_KHR`; needs
    /// VK_KHR_acceleration_structure). Placed at 256 B, the alignment of an acceleration
    /// structure's offset in its buffer.
    ACCELERATION_STRUCTURE_STORAGE = 20, "acceleration_structure_storage";
}

impl BufferUsage {
    /// No usage.
    pub const NONE: BufferUsage = BufferUsage(0);
    /// Both copy directions.
    pub const TRANSFER: BufferUsage = BufferUsage(0b11);
    /// The nine classic usages (bits 0–8): what the `All` probe class is captured with.
    pub const ALL: BufferUsage = BufferUsage(0x1ff);

    /// The empty set.
    pub const fn empty() -> BufferUsage {
        BufferUsage(0)
    }

    /// A set from raw `VkBufferUsageFlags` bits (unknown bits are dropped).
    pub const fn from_bits_truncate(bits: u32) -> BufferUsage {
        BufferUsage(bits & (0x1ff | 1 << 17))
    }

    /// The union of two sets.
    pub const fn union(self, other: BufferUsage) -> BufferUsage {
        BufferUsage(self.0 | other.0)
    }

    /// The usage bits a device profile's probe class was captured with: the class's own bits plus
    /// both transfer bits (the backend's capture uses exactly these).
    pub const fn of_probe_class(class: BufferProbeUsage) -> BufferUsage {
        let own = match class {
            BufferProbeUsage::Transfer => BufferUsage::empty(),
            BufferProbeUsage::Uniform => BufferUsage::UNIFORM,
            BufferProbeUsage::Storage => BufferUsage::STORAGE,
            BufferProbeUsage::VertexIndex => BufferUsage::VERTEX.union(BufferUsage::INDEX),
            BufferProbeUsage::Indirect => BufferUsage::INDIRECT,
            BufferProbeUsage::Texel => BufferUsage::UNIFORM_TEXEL.union(BufferUsage::STORAGE_TEXEL),
            BufferProbeUsage::All => BufferUsage::ALL,
        };
        own.union(BufferUsage::TRANSFER)
    }

    /// The smallest probe class whose usage bits contain `self` (`All` when no single class does).
    pub fn probe_class(self) -> BufferProbeUsage {
        BufferProbeUsage::ALL
            .iter()
            .copied()
            .find(|&class| BufferUsage::of_probe_class(class).contains(self))
            .unwrap_or(BufferProbeUsage::All)
    }

    /// The raw bits.
    pub const fn bits(self) -> u32 {
        self.0
    }

    /// Whether every flag of `other` is set.
    pub const fn contains(self, other: BufferUsage) -> bool {
        self.0 & other.0 == other.0
    }

    /// Whether any flag of `other` is set.
    pub const fn intersects(self, other: BufferUsage) -> bool {
        self.0 & other.0 != 0
    }

    /// Whether no flag is set.
    pub const fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// The names of the flags set.
    pub fn names(self) -> Vec<&'static str> {
        BufferUsage::NAMED.iter().filter(|(f, _)| self.contains(*f)).map(|&(_, n)| n).collect()
    }

    /// Parses one flag name.
    pub fn from_name(name: &str) -> Option<BufferUsage> {
        BufferUsage::NAMED.iter().find(|(_, n)| *n == name).map(|&(f, _)| f)
    }
}

impl BitOr for BufferUsage {
    type Output = BufferUsage;
    fn bitor(self, rhs: BufferUsage) -> BufferUsage {
        BufferUsage(self.0 | rhs.0)
    }
}

impl BitOrAssign for BufferUsage {
    fn bitor_assign(&mut self, rhs: BufferUsage) {
        self.0 |= rhs.0;
    }
}

impl fmt::Debug for BufferUsage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "BufferUsage({})", self.names().join(" | "))
    }
}

impl Serialize for BufferUsage {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.names().serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for BufferUsage {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let names = Vec::<String>::deserialize(deserializer)?;
        names.iter().try_fold(BufferUsage::NONE, |acc, n| {
            BufferUsage::from_name(n)
                .map(|f| acc | f)
                .ok_or_else(|| serde::de::Error::custom(format!("unknown buffer usage `{n}`")))
        })
    }
}

/// A set of image usages, in `VkImageUsageFlagBits` positions.
#[derive(Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct ImageUsage(u32);

impl ImageUsage {
    /// No usage.
    pub const NONE: ImageUsage = ImageUsage(0);
    /// Source of copies.
    pub const COPY_SRC: ImageUsage = ImageUsage(0x1);
    /// Destination of copies and uploads.
    pub const COPY_DST: ImageUsage = ImageUsage(0x2);
    /// Sampled by shaders.
    pub const SAMPLED: ImageUsage = ImageUsage(0x4);
    /// Read and written as a storage image.
    pub const STORAGE: ImageUsage = ImageUsage(0x8);
    /// Colour attachment (render target).
    pub const COLOR_ATTACHMENT: ImageUsage = ImageUsage(0x10);
    /// Depth/stencil attachment.
    pub const DEPTH_STENCIL_ATTACHMENT: ImageUsage = ImageUsage(0x20);

    /// The raw bits.
    pub const fn bits(self) -> u32 {
        self.0
    }

    /// Whether every flag of `other` is set.
    pub const fn contains(self, other: ImageUsage) -> bool {
        self.0 & other.0 == other.0
    }

    /// Whether any flag of `other` is set.
    pub const fn intersects(self, other: ImageUsage) -> bool {
        self.0 & other.0 != 0
    }

    /// Whether no flag is set.
    pub const fn is_empty(self) -> bool {
        self.0 == 0
    }
}

impl BitOr for ImageUsage {
    type Output = ImageUsage;
    fn bitor(self, rhs: ImageUsage) -> ImageUsage {
        ImageUsage(self.0 | rhs.0)
    }
}

impl fmt::Debug for ImageUsage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names = [
            (ImageUsage::COPY_SRC, "copy_src"),
            (ImageUsage::COPY_DST, "copy_dst"),
            (ImageUsage::SAMPLED, "sampled"),
            (ImageUsage::STORAGE, "storage"),
            (ImageUsage::COLOR_ATTACHMENT, "color_attachment"),
            (ImageUsage::DEPTH_STENCIL_ATTACHMENT, "depth_stencil_attachment"),
        ];
        let set: Vec<&str> = names.iter().filter(|(u, _)| self.contains(*u)).map(|&(_, n)| n).collect();
        write!(f, "ImageUsage({})", set.join(" | "))
    }
}

/// The bind flags of a buffer pool.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BufferPoolUsage {
    /// Every buffer of the pool has these flags; a page is one `VkBuffer` and a buffer is a range
    /// of it (cheap: no `VkBuffer` per buffer; state is tracked per page).
    Known(BufferUsage),
    /// Each buffer brings its own flags; a page is raw memory and each buffer is a placed
    /// `VkBuffer` with its own usage, alignment, name and state.
    Unknown,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        let u = BufferUsage::UNIFORM | BufferUsage::STORAGE | BufferUsage::COPY_DST;
        let json = serde_json::to_string(&u).unwrap();
        assert_eq!(json, r#"["copy_dst","uniform","storage"]"#);
        assert_eq!(u.bits(), 0b11_0010, "Vulkan's bit positions");
        assert_eq!(serde_json::from_str::<BufferUsage>(&json).unwrap(), u);
        assert!(serde_json::from_str::<BufferUsage>(r#"["bogus"]"#).is_err());
        assert!(u.contains(BufferUsage::UNIFORM) && !u.contains(BufferUsage::VERTEX));
    }
}
