//! Pipeline stages, access types, image layouts, image aspects and queue families, with the bit
//! values of Vulkan's `VkPipelineStageFlagBits2`, `VkAccessFlagBits2`, `VkImageLayout` and
//! `VkImageAspectFlagBits`, so the backend converts each with `from_raw(value.bits())`.

use serde::{Deserialize, Serialize};
use std::fmt;
use std::ops::{BitAnd, BitOr, BitOrAssign};

macro_rules! flag_set {
    (
        $(#[$tdoc:meta])* $name:ident($repr:ty), $what:literal;
        $( $(#[$doc:meta])* $flag:ident = $value:expr, $text:literal; )*
    ) => {
        $(#[$tdoc])*
        #[derive(Clone, Copy, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub struct $name($repr);

        impl $name {
            /// The empty set.
            pub const NONE: $name = $name(0);
            $( $(#[$doc])* pub const $flag: $name = $name($value); )*

            /// Every named flag with its name, in bit order.
            pub const NAMED: &'static [($name, &'static str)] = &[ $( ($name::$flag, $text), )* ];

            /// A set from raw Vulkan bits (kept as they are, unknown bits included).
            pub const fn from_raw(bits: $repr) -> $name {
                $name(bits)
            }

            /// The raw Vulkan bits.
            pub const fn bits(self) -> $repr {
                self.0
            }

            /// Whether no flag is set.
            pub const fn is_empty(self) -> bool {
                self.0 == 0
            }

            /// Whether every flag of `other` is set.
            pub const fn contains(self, other: $name) -> bool {
                self.0 & other.0 == other.0
            }

            /// Whether any flag of `other` is set.
            pub const fn intersects(self, other: $name) -> bool {
                self.0 & other.0 != 0
            }

            /// The flags of either set.
            pub const fn union(self, other: $name) -> $name {
                $name(self.0 | other.0)
            }

            /// The flags of both sets.
            pub const fn intersection(self, other: $name) -> $name {
                $name(self.0 & other.0)
            }

            /// The flags of `self` that are not in `other`.
            pub const fn difference(self, other: $name) -> $name {
                $name(self.0 & !other.0)
            }

            /// The names of the named flags set (unknown bits are not listed).
            pub fn names(self) -> Vec<&'static str> {
                $name::NAMED.iter().filter(|(f, _)| self.contains(*f)).map(|&(_, n)| n).collect()
            }

            /// Parses one flag name.
            pub fn from_name(name: &str) -> Option<$name> {
                $name::NAMED.iter().find(|(_, n)| *n == name).map(|&(f, _)| f)
            }
        }

        impl BitOr for $name {
            type Output = $name;
            fn bitor(self, rhs: $name) -> $name {
                $name(self.0 | rhs.0)
            }
        }

        impl BitOrAssign for $name {
            fn bitor_assign(&mut self, rhs: $name) {
                self.0 |= rhs.0;
            }
        }

        impl BitAnd for $name {
            type Output = $name;
            fn bitand(self, rhs: $name) -> $name {
                $name(self.0 & rhs.0)
            }
        }

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                if self.is_empty() {
                    return write!(f, "{}(NONE)", stringify!($name));
                }
                write!(f, "{}({})", stringify!($name), self.names().join(" | "))
            }
        }

        impl Serialize for $name {
            fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                self.names().serialize(serializer)
            }
        }

        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
                let names = Vec::<String>::deserialize(deserializer)?;
                names.iter().try_fold($name::NONE, |acc, n| {
                    $name::from_name(n)
                        .map(|f| acc | f)
                        .ok_or_else(|| serde::de::Error::custom(format!(concat!("unknown ", $what, " `{}`"), n)))
                })
            }
        }
    };
}

flag_set! {
    /// A set of pipeline stages (`VkPipelineStageFlags2`).
    PipelineStages(u64), "pipeline stage";
    /// `TOP_OF_PIPE` (`NONE` in a first scope; `ALL_COMMANDS` with no access in a second one).
    TOP_OF_PIPE = 0x1, "top_of_pipe";
    /// Reading indirect draw/dispatch arguments.
    DRAW_INDIRECT = 0x2, "draw_indirect";
    /// Index and vertex-attribute fetch (`INDEX_INPUT | VERTEX_ATTRIBUTE_INPUT`).
    VERTEX_INPUT = 0x4, "vertex_input";
    /// Vertex shaders.
    VERTEX_SHADER = 0x8, "vertex_shader";
    /// Tessellation control shaders.
    TESSELLATION_CONTROL_SHADER = 0x10, "tessellation_control_shader";
    /// Tessellation evaluation shaders.
    TESSELLATION_EVALUATION_SHADER = 0x20, "tessellation_evaluation_shader";
    /// Geometry shaders.
    GEOMETRY_SHADER = 0x40, "geometry_shader";
    /// Fragment shaders.
    FRAGMENT_SHADER = 0x80, "fragment_shader";
    /// Depth/stencil tests before fragment shading.
    EARLY_FRAGMENT_TESTS = 0x100, "early_fragment_tests";
    /// Depth/stencil tests after fragment shading.
    LATE_FRAGMENT_TESTS = 0x200, "late_fragment_tests";
    /// Colour attachment writes, blending and resolves in a render pass.
    COLOR_ATTACHMENT_OUTPUT = 0x400, "color_attachment_output";
    /// Compute shaders.
    COMPUTE_SHADER = 0x800, "compute_shader";
    /// Every transfer command (`COPY | RESOLVE | BLIT | CLEAR`).
    ALL_TRANSFER = 0x1000, "all_transfer";
    /// `BOTTOM_OF_PIPE` (`ALL_COMMANDS` with no access in a first scope; `NONE` in a second one).
    BOTTOM_OF_PIPE = 0x2000, "bottom_of_pipe";
    /// Host reads and writes of mapped memory.
    HOST = 0x4000, "host";
    /// Every graphics stage.
    ALL_GRAPHICS = 0x8000, "all_graphics";
    /// Every command.
    ALL_COMMANDS = 0x1_0000, "all_commands";
    /// Task shaders (`VK_EXT_mesh_shader`).
    TASK_SHADER = 0x8_0000, "task_shader";
    /// Mesh shaders (`VK_EXT_mesh_shader`).
    MESH_SHADER = 0x10_0000, "mesh_shader";
    /// Ray-tracing shaders (`VK_KHR_ray_tracing_pipeline`).
    RAY_TRACING_SHADER = 0x20_0000, "ray_tracing_shader";
    /// Acceleration-structure builds (`VK_KHR_acceleration_structure`).
    ACCELERATION_STRUCTURE_BUILD = 0x200_0000, "acceleration_structure_build";
    /// Copy commands.
    COPY = 0x1_0000_0000, "copy";
    /// Resolve commands.
    RESOLVE = 0x2_0000_0000, "resolve";
    /// Blit commands.
    BLIT = 0x4_0000_0000, "blit";
    /// Clear commands.
    CLEAR = 0x8_0000_0000, "clear";
    /// Index fetch.
    INDEX_INPUT = 0x10_0000_0000, "index_input";
    /// Vertex-attribute fetch.
    VERTEX_ATTRIBUTE_INPUT = 0x20_0000_0000, "vertex_attribute_input";
    /// Every pre-rasterisation shader stage.
    PRE_RASTERIZATION_SHADERS = 0x40_0000_0000, "pre_rasterization_shaders";
}

flag_set! {
    /// A set of memory access types (`VkAccessFlags2`).
    AccessFlags(u64), "access";
    /// Indirect command arguments.
    INDIRECT_COMMAND_READ = 0x1, "indirect_command_read";
    /// Index fetch.
    INDEX_READ = 0x2, "index_read";
    /// Vertex-attribute fetch.
    VERTEX_ATTRIBUTE_READ = 0x4, "vertex_attribute_read";
    /// Uniform buffer reads.
    UNIFORM_READ = 0x8, "uniform_read";
    /// Input attachment reads.
    INPUT_ATTACHMENT_READ = 0x10, "input_attachment_read";
    /// Any shader read (`SHADER_SAMPLED_READ | SHADER_STORAGE_READ`, and more with extensions).
    SHADER_READ = 0x20, "shader_read";
    /// Any shader write (`SHADER_STORAGE_WRITE`).
    SHADER_WRITE = 0x40, "shader_write";
    /// Colour attachment reads (blending, load ops).
    COLOR_ATTACHMENT_READ = 0x80, "color_attachment_read";
    /// Colour attachment writes.
    COLOR_ATTACHMENT_WRITE = 0x100, "color_attachment_write";
    /// Depth/stencil attachment reads.
    DEPTH_STENCIL_ATTACHMENT_READ = 0x200, "depth_stencil_attachment_read";
    /// Depth/stencil attachment writes.
    DEPTH_STENCIL_ATTACHMENT_WRITE = 0x400, "depth_stencil_attachment_write";
    /// Transfer reads.
    TRANSFER_READ = 0x800, "transfer_read";
    /// Transfer writes.
    TRANSFER_WRITE = 0x1000, "transfer_write";
    /// Host reads.
    HOST_READ = 0x2000, "host_read";
    /// Host writes.
    HOST_WRITE = 0x4000, "host_write";
    /// Every read.
    MEMORY_READ = 0x8000, "memory_read";
    /// Every write.
    MEMORY_WRITE = 0x1_0000, "memory_write";
    /// Acceleration-structure reads.
    ACCELERATION_STRUCTURE_READ = 0x20_0000, "acceleration_structure_read";
    /// Acceleration-structure writes.
    ACCELERATION_STRUCTURE_WRITE = 0x40_0000, "acceleration_structure_write";
    /// Sampled image and uniform texel buffer reads.
    SHADER_SAMPLED_READ = 0x1_0000_0000, "shader_sampled_read";
    /// Storage buffer, storage image and storage texel buffer reads.
    SHADER_STORAGE_READ = 0x2_0000_0000, "shader_storage_read";
    /// Storage buffer, storage image and storage texel buffer writes.
    SHADER_STORAGE_WRITE = 0x4_0000_0000, "shader_storage_write";
}

flag_set! {
    /// The aspects of an image a barrier covers (`VkImageAspectFlags`).
    ImageAspects(u32), "image aspect";
    /// Colour.
    COLOR = 0x1, "color";
    /// Depth.
    DEPTH = 0x2, "depth";
    /// Stencil.
    STENCIL = 0x4, "stencil";
}

/// Every stage bit that names a single stage (no meta-stages), for [`PipelineStages::expand`].
const SINGLE_STAGES: u64 = 0x2
    | 0x8
    | 0x10
    | 0x20
    | 0x40
    | 0x80
    | 0x100
    | 0x200
    | 0x400
    | 0x800
    | 0x4000
    | 0x8_0000
    | 0x10_0000
    | 0x20_0000
    | 0x200_0000
    | 0xf_0000_0000
    | 0x30_0000_0000;
/// The single stages of `ALL_GRAPHICS`.
const GRAPHICS_STAGES: u64 =
    0x2 | 0x8 | 0x10 | 0x20 | 0x40 | 0x80 | 0x100 | 0x200 | 0x400 | 0x8_0000 | 0x10_0000 | 0x30_0000_0000;
/// The single stages of `PRE_RASTERIZATION_SHADERS`.
const PRE_RASTER_STAGES: u64 = 0x8 | 0x10 | 0x20 | 0x40 | 0x8_0000 | 0x10_0000;

impl PipelineStages {
    /// The stages of a use by the host.
    pub const fn host() -> PipelineStages {
        PipelineStages::HOST
    }

    /// The set with every meta-stage replaced by the single stages it stands for
    /// (`ALL_COMMANDS`, `ALL_GRAPHICS`, `ALL_TRANSFER`, `VERTEX_INPUT`, `PRE_RASTERIZATION_SHADERS`;
    /// `TOP_OF_PIPE` and `BOTTOM_OF_PIPE` are dropped, as they name no work). Used to compare
    /// scopes; barriers keep the flags as given, so no extension stage is ever emitted that the
    /// caller did not name.
    pub const fn expand(self) -> PipelineStages {
        let b = self.0;
        let mut out = b & SINGLE_STAGES;
        if b & PipelineStages::ALL_COMMANDS.0 != 0 {
            out |= SINGLE_STAGES;
        }
        if b & PipelineStages::ALL_GRAPHICS.0 != 0 {
            out |= GRAPHICS_STAGES;
        }
        if b & PipelineStages::ALL_TRANSFER.0 != 0 {
            out |= 0xf_0000_0000;
        }
        if b & PipelineStages::VERTEX_INPUT.0 != 0 {
            out |= 0x30_0000_0000;
        }
        if b & PipelineStages::PRE_RASTERIZATION_SHADERS.0 != 0 {
            out |= PRE_RASTER_STAGES;
        }
        PipelineStages(out)
    }
}

/// Every write access bit.
const WRITE_ACCESS: u64 = 0x40 | 0x100 | 0x400 | 0x1000 | 0x4000 | 0x1_0000 | 0x40_0000 | 0x4_0000_0000;
/// Every read access bit that names a single kind of read.
const SINGLE_READS: u64 =
    0x1 | 0x2 | 0x4 | 0x8 | 0x10 | 0x80 | 0x200 | 0x800 | 0x2000 | 0x20_0000 | 0x3_0000_0000;
/// The single write bits.
const SINGLE_WRITES: u64 = 0x100 | 0x400 | 0x1000 | 0x4000 | 0x40_0000 | 0x4_0000_0000;

impl AccessFlags {
    /// The write accesses of the set.
    pub const fn writes(self) -> AccessFlags {
        AccessFlags(self.0 & WRITE_ACCESS)
    }

    /// Whether the set holds any write access.
    pub const fn has_write(self) -> bool {
        self.0 & WRITE_ACCESS != 0
    }

    /// The set with every umbrella access replaced by the single accesses it stands for
    /// (`MEMORY_READ`, `MEMORY_WRITE`, `SHADER_READ`, `SHADER_WRITE`). Used to compare scopes.
    pub const fn expand(self) -> AccessFlags {
        let b = self.0;
        let mut out = b & (SINGLE_READS | SINGLE_WRITES);
        if b & AccessFlags::MEMORY_READ.0 != 0 {
            out |= SINGLE_READS;
        }
        if b & AccessFlags::MEMORY_WRITE.0 != 0 {
            out |= SINGLE_WRITES;
        }
        if b & AccessFlags::SHADER_READ.0 != 0 {
            out |= 0x3_0000_0000;
        }
        if b & AccessFlags::SHADER_WRITE.0 != 0 {
            out |= 0x4_0000_0000;
        }
        AccessFlags(out)
    }
}

/// An image layout (`VkImageLayout`), as its Vulkan value.
#[derive(Clone, Copy, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct ImageLayout(i32);

impl ImageLayout {
    /// Contents undefined; the old layout of a transition that discards.
    pub const UNDEFINED: ImageLayout = ImageLayout(0);
    /// Every access (storage images, host access to linear images).
    pub const GENERAL: ImageLayout = ImageLayout(1);
    /// Colour attachment.
    pub const COLOR_ATTACHMENT_OPTIMAL: ImageLayout = ImageLayout(2);
    /// Depth/stencil attachment, read and written.
    pub const DEPTH_STENCIL_ATTACHMENT_OPTIMAL: ImageLayout = ImageLayout(3);
    /// Depth/stencil attachment, read only (depth test without writes, or sampled depth).
    pub const DEPTH_STENCIL_READ_ONLY_OPTIMAL: ImageLayout = ImageLayout(4);
    /// Sampled or input-attachment reads.
    pub const SHADER_READ_ONLY_OPTIMAL: ImageLayout = ImageLayout(5);
    /// Source of transfers.
    pub const TRANSFER_SRC_OPTIMAL: ImageLayout = ImageLayout(6);
    /// Destination of transfers.
    pub const TRANSFER_DST_OPTIMAL: ImageLayout = ImageLayout(7);
    /// Host-written linear image, before its first device use.
    pub const PREINITIALIZED: ImageLayout = ImageLayout(8);
    /// Read only, any read (Vulkan 1.3).
    pub const READ_ONLY_OPTIMAL: ImageLayout = ImageLayout(1_000_314_000);
    /// Attachment, by the image's aspects (Vulkan 1.3).
    pub const ATTACHMENT_OPTIMAL: ImageLayout = ImageLayout(1_000_314_001);

    /// A layout from its raw Vulkan value.
    pub const fn from_raw(value: i32) -> ImageLayout {
        ImageLayout(value)
    }

    /// The raw Vulkan value.
    pub const fn as_raw(self) -> i32 {
        self.0
    }

    /// The layout's Vulkan name without the `VK_IMAGE_LAYOUT_` prefix, when it is one named here.
    pub const fn name(self) -> Option<&'static str> {
        Some(match self.0 {
            0 => "UNDEFINED",
            1 => "GENERAL",
            2 => "COLOR_ATTACHMENT_OPTIMAL",
            3 => "DEPTH_STENCIL_ATTACHMENT_OPTIMAL",
            4 => "DEPTH_STENCIL_READ_ONLY_OPTIMAL",
            5 => "SHADER_READ_ONLY_OPTIMAL",
            6 => "TRANSFER_SRC_OPTIMAL",
            7 => "TRANSFER_DST_OPTIMAL",
            8 => "PREINITIALIZED",
            1_000_314_000 => "READ_ONLY_OPTIMAL",
            1_000_314_001 => "ATTACHMENT_OPTIMAL",
            _ => return None,
        })
    }
}

impl fmt::Debug for ImageLayout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.name() {
            Some(name) => f.write_str(name),
            None => write!(f, "ImageLayout({})", self.0),
        }
    }
}

impl fmt::Display for ImageLayout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

/// A queue family index, or [`QueueFamily::IGNORED`] (`VK_QUEUE_FAMILY_IGNORED`).
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct QueueFamily(u32);

impl QueueFamily {
    /// `VK_QUEUE_FAMILY_IGNORED`: no ownership (a barrier that transfers nothing; a resource not
    /// yet used, or shared concurrently).
    pub const IGNORED: QueueFamily = QueueFamily(u32::MAX);

    /// The family of index `index`.
    pub const fn new(index: u32) -> QueueFamily {
        QueueFamily(index)
    }

    /// The raw index (`u32::MAX` for [`QueueFamily::IGNORED`]).
    pub const fn index(self) -> u32 {
        self.0
    }

    /// Whether this is [`QueueFamily::IGNORED`].
    pub const fn is_ignored(self) -> bool {
        self.0 == u32::MAX
    }
}

impl Default for QueueFamily {
    fn default() -> QueueFamily {
        QueueFamily::IGNORED
    }
}

impl fmt::Debug for QueueFamily {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_ignored() {
            f.write_str("QueueFamily(IGNORED)")
        } else {
            write!(f, "QueueFamily({})", self.0)
        }
    }
}

impl fmt::Display for QueueFamily {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_ignored() {
            f.write_str("ignored queue family")
        } else {
            write!(f, "queue family {}", self.0)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn meta_stages_expand_to_their_members() {
        let all = PipelineStages::ALL_COMMANDS.expand();
        assert!(all.contains(PipelineStages::COMPUTE_SHADER | PipelineStages::COPY | PipelineStages::HOST));
        let gfx = PipelineStages::ALL_GRAPHICS.expand();
        assert!(gfx.contains(PipelineStages::INDEX_INPUT | PipelineStages::FRAGMENT_SHADER));
        assert!(!gfx.intersects(PipelineStages::COMPUTE_SHADER.expand()));
        assert_eq!(
            PipelineStages::VERTEX_INPUT.expand(),
            PipelineStages::INDEX_INPUT | PipelineStages::VERTEX_ATTRIBUTE_INPUT
        );
        assert!(PipelineStages::TOP_OF_PIPE.expand().is_empty());
    }

    #[test]
    fn umbrella_accesses_expand() {
        assert!(AccessFlags::MEMORY_READ
            .expand()
            .contains(AccessFlags::INDEX_READ | AccessFlags::SHADER_STORAGE_READ));
        assert!(!AccessFlags::MEMORY_READ.expand().has_write());
        assert_eq!(AccessFlags::SHADER_WRITE.expand(), AccessFlags::SHADER_STORAGE_WRITE);
        assert_eq!(
            (AccessFlags::SHADER_STORAGE_READ | AccessFlags::SHADER_STORAGE_WRITE).writes(),
            AccessFlags::SHADER_STORAGE_WRITE
        );
    }

    #[test]
    fn names_round_trip_through_json() {
        let s = PipelineStages::COMPUTE_SHADER | PipelineStages::INDEX_INPUT;
        let json = serde_json::to_string(&s).unwrap();
        assert_eq!(json, r#"["compute_shader","index_input"]"#);
        assert_eq!(serde_json::from_str::<PipelineStages>(&json).unwrap(), s);
        assert!(serde_json::from_str::<AccessFlags>(r#"["bogus"]"#).is_err());
        assert_eq!(format!("{:?}", ImageLayout::TRANSFER_DST_OPTIMAL), "TRANSFER_DST_OPTIMAL");
    }
}
