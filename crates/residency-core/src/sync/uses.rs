//! Named uses of a resource, each mapping to pipeline stages, access types, an image layout and
//! whether it writes.

use super::flags::{AccessFlags, ImageLayout, PipelineStages};
use serde::{Deserialize, Serialize};

/// How the next commands use a resource: what a caller declares to the batcher.
///
/// A use names *where* (stages), *how* (accesses) and, for images, *in which layout*. Uses that
/// only make sense for buffers (index, vertex, indirect, uniform reads) have no layout and are
/// refused on images; the others apply to both (on a buffer the layout is ignored).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Use {
    /// Storage buffer / storage image reads in compute shaders (`GENERAL` on images).
    ComputeStorageRead,
    /// Storage buffer / storage image writes in compute shaders (`GENERAL` on images).
    ComputeStorageWrite,
    /// Storage reads and writes in the same compute dispatch (`GENERAL` on images).
    ComputeStorageReadWrite,
    /// Index fetch of an indexed draw (buffers only).
    IndexRead,
    /// Vertex-attribute fetch (buffers only).
    VertexRead,
    /// Indirect draw or dispatch arguments (buffers only).
    IndirectRead,
    /// Uniform buffer reads in the given shader stages (buffers only).
    UniformRead(PipelineStages),
    /// Sampled reads in the given shader stages: sampled images in `SHADER_READ_ONLY_OPTIMAL`, or
    /// uniform texel buffers.
    SampledRead(PipelineStages),
    /// Source of a copy, blit or resolve (`TRANSFER_SRC_OPTIMAL` on images).
    TransferSrc,
    /// Destination of a copy, blit, clear or upload (`TRANSFER_DST_OPTIMAL` on images).
    TransferDst,
    /// Colour attachment written (and blended) by a render pass (`COLOR_ATTACHMENT_OPTIMAL`).
    ColorAttachmentWrite,
    /// Depth/stencil attachment tested and written (`DEPTH_STENCIL_ATTACHMENT_OPTIMAL`).
    DepthAttachment,
    /// Depth/stencil attachment tested without writes (`DEPTH_STENCIL_READ_ONLY_OPTIMAL`).
    DepthRead,
    /// Scratch memory of an acceleration-structure build (buffers only).
    AccelerationStructureScratch,
    /// Read by the host through a mapping, after the device wrote it (`GENERAL` on images).
    HostRead,
    /// Written by the host through a mapping, before the device reads it (`GENERAL` on images).
    HostWrite,
    /// Any other use, spelled out.
    Custom(CustomUse),
}

/// A use spelled out: stages, accesses and, for images, the layout. It writes when `access`
/// holds any write access.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct CustomUse {
    /// The stages that access the resource.
    pub stages: PipelineStages,
    /// The accesses those stages perform.
    pub access: AccessFlags,
    /// The layout images must be in; `None` makes the use buffer-only.
    pub layout: Option<ImageLayout>,
}

/// What a [`Use`] means on synchronization2.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct UseInfo {
    /// The stages that access the resource.
    pub stages: PipelineStages,
    /// The accesses those stages perform.
    pub access: AccessFlags,
    /// The layout an image must be in; `None` for buffer-only uses.
    pub layout: Option<ImageLayout>,
    /// Whether the use writes (any write access).
    pub writes: bool,
}

impl Use {
    /// The stages, accesses, layout and write flag of the use.
    pub fn info(self) -> UseInfo {
        use AccessFlags as A;
        use ImageLayout as L;
        use PipelineStages as S;
        let (stages, access, layout) = match self {
            Use::ComputeStorageRead => (S::COMPUTE_SHADER, A::SHADER_STORAGE_READ, Some(L::GENERAL)),
            Use::ComputeStorageWrite => (S::COMPUTE_SHADER, A::SHADER_STORAGE_WRITE, Some(L::GENERAL)),
            Use::ComputeStorageReadWrite => {
                (S::COMPUTE_SHADER, A::SHADER_STORAGE_READ | A::SHADER_STORAGE_WRITE, Some(L::GENERAL))
            }
            Use::IndexRead => (S::INDEX_INPUT, A::INDEX_READ, None),
            Use::VertexRead => (S::VERTEX_ATTRIBUTE_INPUT, A::VERTEX_ATTRIBUTE_READ, None),
            Use::IndirectRead => (S::DRAW_INDIRECT, A::INDIRECT_COMMAND_READ, None),
            Use::UniformRead(stages) => (stages, A::UNIFORM_READ, None),
            Use::SampledRead(stages) => (stages, A::SHADER_SAMPLED_READ, Some(L::SHADER_READ_ONLY_OPTIMAL)),
            Use::TransferSrc => (S::ALL_TRANSFER, A::TRANSFER_READ, Some(L::TRANSFER_SRC_OPTIMAL)),
            Use::TransferDst => (S::ALL_TRANSFER, A::TRANSFER_WRITE, Some(L::TRANSFER_DST_OPTIMAL)),
            Use::ColorAttachmentWrite => (
                S::COLOR_ATTACHMENT_OUTPUT,
                A::COLOR_ATTACHMENT_READ | A::COLOR_ATTACHMENT_WRITE,
                Some(L::COLOR_ATTACHMENT_OPTIMAL),
            ),
            Use::DepthAttachment => (
                S::EARLY_FRAGMENT_TESTS | S::LATE_FRAGMENT_TESTS,
                A::DEPTH_STENCIL_ATTACHMENT_READ | A::DEPTH_STENCIL_ATTACHMENT_WRITE,
                Some(L::DEPTH_STENCIL_ATTACHMENT_OPTIMAL),
            ),
            Use::DepthRead => (
                S::EARLY_FRAGMENT_TESTS | S::LATE_FRAGMENT_TESTS,
                A::DEPTH_STENCIL_ATTACHMENT_READ,
                Some(L::DEPTH_STENCIL_READ_ONLY_OPTIMAL),
            ),
            Use::AccelerationStructureScratch => (
                S::ACCELERATION_STRUCTURE_BUILD,
                A::ACCELERATION_STRUCTURE_READ | A::ACCELERATION_STRUCTURE_WRITE,
                None,
            ),
            Use::HostRead => (S::HOST, A::HOST_READ, Some(L::GENERAL)),
            Use::HostWrite => (S::HOST, A::HOST_WRITE, Some(L::GENERAL)),
            Use::Custom(c) => (c.stages, c.access, c.layout),
        };
        UseInfo { stages, access, layout, writes: access.has_write() }
    }

    /// Whether the use writes.
    pub fn writes(self) -> bool {
        self.info().writes
    }

    /// Whether the use applies to images (it has a layout).
    pub fn applies_to_images(self) -> bool {
        self.info().layout.is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_named_use_has_matching_stage_and_access() {
        let uses = [
            Use::ComputeStorageRead,
            Use::ComputeStorageWrite,
            Use::ComputeStorageReadWrite,
            Use::IndexRead,
            Use::VertexRead,
            Use::IndirectRead,
            Use::UniformRead(PipelineStages::VERTEX_SHADER),
            Use::SampledRead(PipelineStages::FRAGMENT_SHADER),
            Use::TransferSrc,
            Use::TransferDst,
            Use::ColorAttachmentWrite,
            Use::DepthAttachment,
            Use::DepthRead,
            Use::AccelerationStructureScratch,
            Use::HostRead,
            Use::HostWrite,
        ];
        for u in uses {
            let info = u.info();
            assert!(!info.stages.is_empty() && !info.access.is_empty(), "{u:?}");
            assert_eq!(info.writes, info.access.has_write(), "{u:?}");
            assert_ne!(info.layout, Some(ImageLayout::UNDEFINED), "{u:?}");
        }
        assert!(Use::ComputeStorageWrite.writes() && !Use::IndexRead.writes());
        assert!(
            !Use::IndexRead.applies_to_images()
                && Use::SampledRead(PipelineStages::COMPUTE_SHADER).applies_to_images()
        );
    }
}
