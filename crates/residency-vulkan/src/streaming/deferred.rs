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

/// A feedback pass of its own at 1/stride of the render's `extent` (`vt_feedback.frag`): its
/// target's extent (the record grid, `ceil(extent / stride)`) and the render's `view_proj`
/// (column-major, Vulkan clip space) with the render's pixel `(s·i + px, s·j + py)` of `frame`'s
/// phase moved onto the target's pixel centre `(i, j)`: per axis, NDC
/// `x' = k·x + k − 1 + 2·shift / small` with `k = (render / s) / small` (the target's extent
/// rounds up) and `shift = 0.5 − (p + 0.5) / s` target pixels, applied in clip space (times `w`,
/// row 3, which is unchanged, so `gl_FragCoord.w` is the render's).
pub(super) fn pass_view(
    sampling: FeedbackSampling,
    frame: u64,
    extent: [u32; 2],
    view_proj: &[f32; 16],
) -> ([u32; 2], [f32; 16]) {
    let stride = sampling.pixel_stride.clamp(1, 65_535);
    let small = extent.map(|e| e.div_ceil(stride).max(1));
    let phase = sampling.phase(frame);
    let s = stride as f32;
    let mut m = *view_proj;
    for axis in 0..2 {
        let n = small[axis] as f32;
        let k = extent[axis] as f32 / s / n;
        let shift = 0.5 - (phase[axis] as f32 + 0.5) / s;
        let a = k - 1.0 + 2.0 * shift / n;
        for col in 0..4 {
            m[col * 4 + axis] = k * m[col * 4 + axis] + a * m[col * 4 + 3];
        }
    }
    (small, m)
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
    fn the_feedback_pass_puts_each_writing_pixel_on_its_cells_centre() {
        // A view-projection with w ≠ 1 (a perspective row 3), pixels through NDC and back.
        let vp = [0.5, 0.1, 0.0, 0.2, -0.3, 0.7, 0.0, 0.1, 0.0, 0.0, 1.0, 0.0, 0.2, -0.1, 0.0, 1.3];
        for (extent, stride) in [([3840u32, 2160u32], 8u32), ([250, 97], 8), ([70, 45], 3), ([64, 64], 1)] {
            let s = FeedbackSampling::new(stride, 1);
            for frame in [0u64, 1, 5, 11, 63] {
                let (small, m) = pass_view(s, frame, extent, &vp);
                assert_eq!(small, [extent[0].div_ceil(stride), extent[1].div_ceil(stride)]);
                let [px, py] = s.phase(frame);
                for (i, j) in [(0u32, 0u32), (small[0] / 2, small[1] / 3), (small[0] - 1, small[1] - 1)] {
                    // The render's pixel centre in NDC, as a clip-space point of w = 2.
                    let pixel = [(stride * i + px) as f64 + 0.5, (stride * j + py) as f64 + 0.5];
                    let ndc = [0, 1].map(|a| 2.0 * pixel[a] / f64::from(extent[a]) - 1.0);
                    // A world point that projects there: solve vp · (x, y, 0, 1) = (2·ndc, w).
                    let (w, clip) = (2.0f64, [2.0 * ndc[0], 2.0 * ndc[1]]);
                    let v = |m: &[f32; 16], r: usize, p: [f64; 2]| {
                        f64::from(m[r]) * p[0] + f64::from(m[4 + r]) * p[1] + f64::from(m[12 + r])
                    };
                    // Linear in (x, y): rows 0, 1 and 3 of vp against the target clip.
                    let rows = |r: usize| [f64::from(vp[r]), f64::from(vp[4 + r]), f64::from(vp[12 + r])];
                    let (a, b, c) = (rows(0), rows(1), rows(3));
                    let eq =
                        |row: [f64; 3], t: f64| [row[0] - t * c[0], row[1] - t * c[1], t * c[2] - row[2]];
                    let (e0, e1) = (eq(a, clip[0] / w), eq(b, clip[1] / w));
                    let det = e0[0] * e1[1] - e0[1] * e1[0];
                    let p = [(e0[2] * e1[1] - e0[1] * e1[2]) / det, (e0[0] * e1[2] - e0[2] * e1[0]) / det];
                    let wp = v(&m, 3, p);
                    let at = [0, 1].map(|a| (v(&m, a, p) / wp + 1.0) / 2.0 * f64::from(small[a]));
                    let want = [f64::from(i) + 0.5, f64::from(j) + 0.5];
                    for a in 0..2 {
                        assert!(
                            (at[a] - want[a]).abs() < 1e-2,
                            "{extent:?} /{stride} frame {frame}: {at:?} {want:?}"
                        );
                    }
                    assert!((wp - v(&vp, 3, p)).abs() < 1e-9, "w unchanged");
                }
            }
        }
    }

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
