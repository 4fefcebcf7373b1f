//! Alignment floors for buffer use cases: what to pass as `alignment` so that a tight buffer can later
//! be bound the way it is meant to be used.
//!
//! The spec's table (each use case's floor is the largest of its public D3D12 constants), combined on
//! Vulkan with the device's descriptor offset-alignment limits for the matching usages:
//!
//! | use case                                    | spec floor | Vulkan limit also applied              |
//! |---------------------------------------------|-----------:|----------------------------------------|
//! | raw UAV / SRV                               | 16 B       | `minStorageBufferOffsetAlignment`, `minTexelBufferOffsetAlignment` |
//! | ray-tracing acceleration-structure inputs   | 16 B       | —                                      |
//! | DispatchRays shader tables                  | 64 B       | —                                      |
//! | ray-tracing 2 CLAS / opacity micromaps      | 128 B      | —                                      |
//! | constant buffer view target                 | 256 B      | `minUniformBufferOffsetAlignment`      |
//! | video decode bitstream / histogram          | 256 B      | —                                      |
//!
//! A D3D12 UAV/SRV on a buffer becomes a storage buffer or a texel buffer on Vulkan, hence both limits.
//! The ray-tracing and video alignments Vulkan has (`shaderGroupBaseAlignment`,
//! `minAccelerationStructureScratchOffsetAlignment`, per-profile bitstream alignment) are not in
//! [`Limits`]; the spec floors stand for them. A buffer with several uses takes the maximum.

use crate::profile::Limits;
use crate::usage::BufferUsage;
use serde::{Deserialize, Serialize};

/// A buffer use case that carries its own alignment.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BufferUse {
    /// Raw (byte-address), structured or typed UAV / SRV.
    RawUavSrv,
    /// Ray-tracing acceleration-structure build inputs (AABBs, instance descs, 3×4 transforms).
    AccelerationStructureInputs,
    /// `DispatchRays` shader tables and records.
    ShaderTable,
    /// Ray-tracing 2 cluster acceleration structures (CLAS), cluster templates and opacity micromaps.
    ClusterOrMicromap,
    /// Constant buffer view target.
    ConstantBuffer,
    /// Video decode bitstream and histogram buffers.
    VideoDecode,
}

/// One public D3D12 alignment constant behind a floor.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
pub struct AlignmentConstant {
    /// The `d3d12.h` name.
    pub name: &'static str,
    /// Its value in bytes.
    pub bytes: u64,
}

impl BufferUse {
    /// Every use case, in ascending order of floor.
    pub const ALL: [BufferUse; 6] = [
        BufferUse::RawUavSrv,
        BufferUse::AccelerationStructureInputs,
        BufferUse::ShaderTable,
        BufferUse::ClusterOrMicromap,
        BufferUse::ConstantBuffer,
        BufferUse::VideoDecode,
    ];

    /// The `d3d12.h` constants of this use case.
    pub const fn constants(self) -> &'static [AlignmentConstant] {
        match self {
            BufferUse::RawUavSrv => {
                &[AlignmentConstant { name: "D3D12_RAW_UAV_SRV_BYTE_ALIGNMENT", bytes: 16 }]
            }
            BufferUse::AccelerationStructureInputs => &[
                AlignmentConstant { name: "D3D12_RAYTRACING_AABB_BYTE_ALIGNMENT", bytes: 8 },
                AlignmentConstant { name: "D3D12_RAYTRACING_INSTANCE_DESCS_BYTE_ALIGNMENT", bytes: 16 },
                AlignmentConstant { name: "D3D12_RAYTRACING_TRANSFORM3X4_BYTE_ALIGNMENT", bytes: 16 },
            ],
            BufferUse::ShaderTable => &[
                AlignmentConstant { name: "D3D12_RAYTRACING_SHADER_RECORD_BYTE_ALIGNMENT", bytes: 32 },
                AlignmentConstant { name: "D3D12_RAYTRACING_SHADER_TABLE_BYTE_ALIGNMENT", bytes: 64 },
            ],
            BufferUse::ClusterOrMicromap => &[
                AlignmentConstant { name: "D3D12_RAYTRACING_CLUSTER_TEMPLATE_BYTE_ALIGNMENT", bytes: 32 },
                AlignmentConstant { name: "D3D12_RAYTRACING_CLAS_BYTE_ALIGNMENT", bytes: 128 },
                AlignmentConstant {
                    name: "D3D12_RAYTRACING_OPACITY_MICROMAP_ARRAY_BYTE_ALIGNMENT",
                    bytes: 128,
                },
            ],
            BufferUse::ConstantBuffer => &[
                AlignmentConstant {
                    name: "D3D12_COMMONSHADER_CONSTANT_BUFFER_PARTIAL_UPDATE_EXTENTS_BYTE_ALIGNMENT",
                    bytes: 16,
                },
                AlignmentConstant { name: "D3D12_CONSTANT_BUFFER_DATA_PLACEMENT_ALIGNMENT", bytes: 256 },
            ],
            BufferUse::VideoDecode => &[
                AlignmentConstant { name: "D3D12_VIDEO_DECODE_MIN_BITSTREAM_OFFSET_ALIGNMENT", bytes: 256 },
                AlignmentConstant { name: "D3D12_VIDEO_DECODE_MIN_HISTOGRAM_OFFSET_ALIGNMENT", bytes: 256 },
            ],
        }
    }

    /// The spec's floor: the largest of [`constants`](Self::constants).
    pub const fn spec_floor(self) -> u64 {
        let constants = self.constants();
        let mut floor = 0;
        let mut i = 0;
        while i < constants.len() {
            if constants[i].bytes > floor {
                floor = constants[i].bytes;
            }
            i += 1;
        }
        floor
    }

    /// The device's offset-alignment limit for the Vulkan usages this use case maps to, rounded up to a
    /// power of two (Vulkan guarantees they are); 1 where no limit applies.
    pub fn device_limit(self, limits: &Limits) -> u64 {
        let limit = match self {
            BufferUse::RawUavSrv => {
                limits.min_storage_buffer_offset_alignment.max(limits.min_texel_buffer_offset_alignment)
            }
            BufferUse::ConstantBuffer => limits.min_uniform_buffer_offset_alignment,
            BufferUse::AccelerationStructureInputs
            | BufferUse::ShaderTable
            | BufferUse::ClusterOrMicromap
            | BufferUse::VideoDecode => 1,
        };
        limit.max(1).checked_next_power_of_two().unwrap_or(1 << 63)
    }
}

/// The spec's floor for a buffer with all of `uses`: the maximum of their floors, 0 (no floor) for none.
pub fn spec_floor(uses: &[BufferUse]) -> u64 {
    uses.iter().map(|u| u.spec_floor()).max().unwrap_or(0)
}

/// The floor to pass as `alignment` for a buffer with all of `uses` on a device with `limits`: the
/// maximum over the uses of the spec floor and the device's matching offset-alignment limit; 0 (no
/// floor) for no uses. Always 0 or a power of two.
pub fn alignment_floor(uses: &[BufferUse], limits: &Limits) -> u64 {
    uses.iter().map(|u| u.spec_floor().max(u.device_limit(limits))).max().unwrap_or(0)
}

/// The offset-alignment floor of a buffer of Vulkan `usage` on a device with `limits`: the largest
/// floor of any of its uses (for every combination of the usage bits, issue #31) —
/// `minUniformBufferOffsetAlignment` for uniform buffers, `minStorageBufferOffsetAlignment` for
/// storage buffers, `minTexelBufferOffsetAlignment` for texel buffers, 256 B for
/// acceleration-structure storage (an acceleration structure's offset in its buffer is a multiple of
/// 256), 16 B for acceleration-structure build inputs (instances, transforms: the spec's
/// [`BufferUse::AccelerationStructureInputs`]), 64 B for a shader binding table (the largest
/// `shaderGroupBaseAlignment` Vulkan allows, the spec's [`BufferUse::ShaderTable`]); 0 for none.
/// Always 0 or a power of two. The one definition: the backend's placement paths apply it (with a
/// build scratch's own alignment, which needs a device feature) on top of the engine's answer.
pub fn usage_alignment_floor(usage: BufferUsage, limits: &Limits) -> u64 {
    let pow2 = |limit: u64| limit.max(1).checked_next_power_of_two().unwrap_or(1 << 63);
    let floors = [
        (BufferUsage::ACCELERATION_STRUCTURE_STORAGE, 256),
        (
            BufferUsage::ACCELERATION_STRUCTURE_BUILD_INPUT,
            BufferUse::AccelerationStructureInputs.spec_floor(),
        ),
        (BufferUsage::SHADER_BINDING_TABLE, BufferUse::ShaderTable.spec_floor()),
        (BufferUsage::UNIFORM, BufferUse::ConstantBuffer.device_limit(limits)),
        (BufferUsage::STORAGE, pow2(limits.min_storage_buffer_offset_alignment)),
        (BufferUsage::UNIFORM_TEXEL, pow2(limits.min_texel_buffer_offset_alignment)),
        (BufferUsage::STORAGE_TEXEL, pow2(limits.min_texel_buffer_offset_alignment)),
    ];
    floors.iter().filter(|(bit, _)| usage.intersects(*bit)).map(|&(_, floor)| floor).max().unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue #31: a buffer with several usages takes the largest floor of any of them, for every
    /// combination of the usage bits, on limits that make each floor distinct.
    #[test]
    fn usage_floor_is_the_maximum_of_every_use_for_every_combination() {
        let limits = Limits {
            min_uniform_buffer_offset_alignment: 128,
            min_storage_buffer_offset_alignment: 32,
            min_texel_buffer_offset_alignment: 4,
            ..crate::placement::FixedRequirements::typical_limits()
        };
        let bits: Vec<BufferUsage> = BufferUsage::NAMED.iter().map(|&(usage, _)| usage).collect();
        for subset in 0u32..(1 << bits.len()) {
            let chosen: Vec<BufferUsage> =
                (0..bits.len()).filter(|i| subset & (1 << i) != 0).map(|i| bits[i]).collect();
            let usage = chosen.iter().fold(BufferUsage::NONE, |all, &u| all.union(u));
            let expected = chosen.iter().map(|&u| usage_alignment_floor(u, &limits)).max().unwrap_or(0);
            let floor = usage_alignment_floor(usage, &limits);
            assert_eq!(floor, expected, "{usage:?}");
            assert!(floor == 0 || floor.is_power_of_two(), "{usage:?}");
        }
        let both = BufferUsage::UNIFORM.union(BufferUsage::ACCELERATION_STRUCTURE_STORAGE);
        assert_eq!(usage_alignment_floor(both, &limits), 256);
        assert_eq!(usage_alignment_floor(BufferUsage::SHADER_BINDING_TABLE, &limits), 64);
        assert_eq!(usage_alignment_floor(BufferUsage::ACCELERATION_STRUCTURE_BUILD_INPUT, &limits), 16);
    }
}
