//! Deferred feedback ([`StreamerDesc::deferred_feedback`](super::StreamerDesc::deferred_feedback)):
//! the pixels that write feedback store one 16-byte record each (`feedback_deferred.glsl`: uv,
//! LOD, slot, min LOD; no table read, no atomic) into a per-slot record buffer, one record per
//! writing pixel of the frame, and a compute pass after the draws (`feedback_resolve.comp`)
//! folds the written records into the slot's feedback buffer with `feedback.glsl`'s own code,
//! zeroing them for the slot's next frame. The CPU decodes the feedback buffer as before.

use super::StreamError;
use crate::pipelines::compute::ComputeProgram;
use crate::pipelines::descriptors::{Binding, DescriptorSet};
use crate::resources::buffer::{Buffer, BufferDesc};
use crate::sync::recording::{MemoryDependency, Recording};
use crate::{device::life::ForeignUse, device::life::GpuUse, device::Device};
use ash::vk;
use residency_core::memory::MemoryIntent;
use residency_core::streaming::FeedbackSampling;
use residency_core::usage::BufferUsage;
use std::sync::Arc;

/// Bytes of one record (`uvec4`).
pub(super) const RECORD_BYTES: u64 = 16;
/// The resolve shader's workgroup size.
const GROUP: u32 = 64;
/// Workgroups per row of the resolve's 2D dispatch (the guaranteed `maxComputeWorkGroupCount`).
const GROUPS_PER_ROW: u32 = 65_535;
/// The most record bytes a streamer takes: the guaranteed `maxStorageBufferRange` (128 MiB).
pub(super) const MAX_RECORD_BYTES: u64 = 1 << 27;

/// The record grid of `extent` pixels under `sampling`: record cells per row (one cell per
/// `(stride · block)²` pixels) and records (a cell has `block²` writing pixels).
pub(super) fn record_grid(sampling: FeedbackSampling, [w, h]: [u32; 2]) -> (u64, u64) {
    let block = u64::from(sampling.block.max(1));
    let side = u64::from(sampling.pixel_stride.clamp(1, 65_535)) * block;
    let row = u64::from(w).div_ceil(side);
    (row, row * u64::from(h).div_ceil(side) * block * block)
}

/// `feedback_deferred.glsl`'s `feedbackRecordIndex`: the record of pixel `(x, y)` in a grid of
/// `row_cells` cells per row (`None`: right of the row).
#[cfg(test)]
fn record_index(sampling: FeedbackSampling, row_cells: u64, x: u32, y: u32) -> Option<u64> {
    let block = u64::from(sampling.block.max(1));
    let side = u64::from(sampling.pixel_stride.clamp(1, 65_535)) * block;
    let (cx, cy) = (u64::from(x) / side, u64::from(y) / side);
    if cx >= row_cells {
        return None;
    }
    Some((cy * row_cells + cx) * block * block + (u64::from(y) % block) * block + u64::from(x) % block)
}

/// The streamer's resolve program, made once.
pub(super) fn resolve_program(device: &Device, name: &str) -> Result<ComputeProgram, StreamError> {
    Ok(ComputeProgram::new(
        device,
        &format!("{name} feedback resolve"),
        &crate::pipelines::shaders::FEEDBACK_RESOLVE,
        8,
    )?)
}

/// One ring slot's record buffer and the resolve's descriptor set over it and the slot's
/// feedback buffer and image table.
#[derive(Debug)]
pub(super) struct Records {
    pub(super) buffer: Buffer,
    set: DescriptorSet,
    /// Records the resolve visits.
    count: u32,
    /// Whether every record is zero (the buffer's first frame fills it; each resolve zeroes what
    /// it folds). False after an abandoned frame.
    pub(super) clean: bool,
}

impl Records {
    /// A record buffer of `count` records for the slot `index` with `feedback` and `table`.
    pub(super) fn new(
        device: &Arc<Device>,
        program: &ComputeProgram,
        name: &str,
        index: usize,
        count: u64,
        (feedback, table): (&Buffer, &Buffer),
    ) -> Result<Records, StreamError> {
        let bytes = count.max(1) * RECORD_BYTES;
        let buffer = device.create_buffer(
            &BufferDesc::new(
                format!("{name} feedback records {index}"),
                bytes,
                BufferUsage::STORAGE | BufferUsage::COPY_DST,
            )
            .with_intent(MemoryIntent::DeviceLocal),
        )?;
        let set = program.descriptor_set(&[
            Binding::Buffer(&buffer),
            Binding::Buffer(feedback),
            Binding::Buffer(table),
        ])?;
        Ok(Records { buffer, set, count: count.min(u64::from(u32::MAX)) as u32, clean: false })
    }

    /// Declares a use of the renderer's own work ending at `until` on the buffer, the set and
    /// what it binds.
    pub(super) fn used_until(&self, until: GpuUse) -> Result<(), ForeignUse> {
        self.buffer.used_until(until)?;
        self.set.used_until(until)
    }

    /// Records the resolve into `rec`: a barrier from the draws' record stores (at `readers`) to
    /// the resolve, the dispatch over every record, and a barrier from it to later draws. The caller orders the feedback buffer's
    /// reset before it and the host's read after it.
    pub(super) fn record_resolve(
        &self,
        rec: &mut Recording<'_>,
        program: &ComputeProgram,
        readers: vk::PipelineStageFlags2,
    ) -> Result<(), StreamError> {
        use vk::{AccessFlags2 as A, PipelineStageFlags2 as S};
        rec.memory_barrier(MemoryDependency {
            src_stages: readers,
            src_access: A::SHADER_WRITE,
            dst_stages: S::COMPUTE_SHADER,
            dst_access: A::SHADER_READ | A::SHADER_WRITE,
        })?;
        let groups = self.count.div_ceil(GROUP);
        let grid = [groups.min(GROUPS_PER_ROW), groups.div_ceil(GROUPS_PER_ROW), 1];
        program.dispatch(rec, &self.set, &self.count.to_le_bytes(), grid)?;
        // Draws recorded after it may bind the record buffer too (a pass without feedback, the
        // same descriptor set): their stores come after the resolve's.
        rec.memory_barrier(MemoryDependency {
            src_stages: S::COMPUTE_SHADER,
            src_access: A::SHADER_WRITE,
            dst_stages: readers,
            dst_access: A::SHADER_READ | A::SHADER_WRITE,
        })?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_writing_pixel_has_its_own_record_inside_the_grid() {
        let extent = [70u32, 45];
        for (stride, block) in [(1, 1), (8, 1), (8, 2), (4, 4), (3, 1), (5, 2)] {
            let s = FeedbackSampling::new(stride, 1).with_block(block);
            let (row, records) = record_grid(s, extent);
            for frame in 0..u64::from(stride * stride) {
                let mut seen = std::collections::HashSet::new();
                for y in 0..extent[1] {
                    for x in 0..extent[0] {
                        if !s.pixel_writes(x, y, frame) {
                            continue;
                        }
                        let i = record_index(s, row, x, y).expect("inside the row");
                        assert!(i < records, "{s:?} {x} {y}: {i} of {records}");
                        assert!(seen.insert(i), "{s:?} frame {frame}: record {i} twice");
                    }
                }
            }
        }
    }
}
