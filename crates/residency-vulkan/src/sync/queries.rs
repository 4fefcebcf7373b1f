//! Occlusion and pipeline-statistics query pools on one device (beside the timestamps of
//! [`Timestamps`](crate::sync::recording::Timestamps)): what a pool counts, its results read on
//! the host, and the crate-internal recording of resets, begins, ends and copies that the
//! multi-device work items ([`MultiQueryPool`](crate::multi::queries::MultiQueryPool)) check and
//! call.
//!
//! Every query is reset on the GPU when the pool is made (so reading one never meets an
//! uninitialised query) and again right before each begin (so a begin never meets a query that
//! still holds a result); the pool notes which queries have been ended by a submitted command
//! buffer, so reading or copying one that never was is a typed error rather than a wait for a
//! result that never comes.

use crate::device::life::{ForeignUse, Garbage, GpuUse, Life};
use crate::device::Device;
use crate::error::{ErrorClass, ResidencyError, VkResultExt, VulkanError};
use crate::sync::recording::Recording;
use ash::vk;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// What a query pool counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QueryKind {
    /// Samples that pass the depth and stencil tests between a begin and an end. `precise`:
    /// the exact count (needs the device's `occlusionQueryPrecise`); otherwise any non-zero
    /// value when samples passed (most drivers count exactly anyway).
    Occlusion {
        /// Exact counts.
        precise: bool,
    },
    /// The pipeline statistics named by the flags (one 64-bit counter each, in the flags' bit
    /// order), counted between a begin and an end; needs the device's `pipelineStatisticsQuery`,
    /// and only the 11 core statistics are accepted.
    PipelineStatistics(vk::QueryPipelineStatisticFlags),
}

impl QueryKind {
    /// 64-bit values each query of this kind returns.
    pub fn words(self) -> u32 {
        match self {
            QueryKind::Occlusion { .. } => 1,
            QueryKind::PipelineStatistics(flags) => flags.as_raw().count_ones(),
        }
    }

    /// Whether queries of `self` and `other` are of one Vulkan query type (two of one type may
    /// not be active at once in a command buffer).
    pub fn same_type(self, other: QueryKind) -> bool {
        std::mem::discriminant(&self) == std::mem::discriminant(&other)
    }

    fn vk_type(self) -> vk::QueryType {
        match self {
            QueryKind::Occlusion { .. } => vk::QueryType::OCCLUSION,
            QueryKind::PipelineStatistics(_) => vk::QueryType::PIPELINE_STATISTICS,
        }
    }
}

/// The 11 pipeline statistics of core Vulkan (others need extensions residency does not enable).
const CORE_STATISTICS: vk::QueryPipelineStatisticFlags = vk::QueryPipelineStatisticFlags::from_raw(0x7ff);

/// A query pool was refused, or a query cannot be begun, ended, read or copied.
#[derive(Debug, thiserror::Error)]
pub enum QueryError {
    /// The device does not have (or residency did not enable) the feature the pool needs;
    /// nothing was created.
    #[error("query pool `{name}` on {device}: the device lacks `{feature}`")]
    Unsupported {
        /// The pool.
        name: String,
        /// The device.
        device: String,
        /// The missing feature (`pipelineStatisticsQuery`, `occlusionQueryPrecise`).
        feature: &'static str,
    },
    /// Pipeline statistics outside the 11 core ones, or none at all; nothing was created.
    #[error("query pool `{name}`: statistics {flags:?} are empty or not core Vulkan statistics")]
    Statistics {
        /// The pool.
        name: String,
        /// The flags asked for.
        flags: vk::QueryPipelineStatisticFlags,
    },
    /// No queries, or more than [`QueryPool::MAX_COUNT`]; nothing was created.
    #[error("query pool `{name}`: {count} queries, not within 1..={max}")]
    Count {
        /// The pool.
        name: String,
        /// Queries asked for.
        count: u32,
        /// The most a pool holds.
        max: u32,
    },
    /// A query index (or the end of a range) outside the pool.
    #[error("query {index} of `{name}`, which holds {count}")]
    Index {
        /// The pool.
        name: String,
        /// The index asked for (the end of a range: one past its last query).
        index: u32,
        /// Queries in the pool.
        count: u32,
    },
    /// An end of a query that is not active (never begun, or already ended) at that point of the
    /// work; nothing was recorded or submitted.
    #[error("query {index} of `{name}` is ended but was not begun")]
    NotBegun {
        /// The pool.
        name: String,
        /// The query.
        index: u32,
    },
    /// A query begun and not ended by the end of the work (or of the render pass it was begun
    /// in), or copied while still active; nothing was recorded or submitted.
    #[error("query {index} of `{name}` is begun but not ended")]
    NotEnded {
        /// The pool.
        name: String,
        /// The query.
        index: u32,
    },
    /// A query begun while another query of its type is active (Vulkan allows one active query
    /// per type); nothing was recorded or submitted.
    #[error("query {index} of `{name}` is begun while `{active}` has a query of its type active")]
    AlreadyActive {
        /// The pool.
        name: String,
        /// The query.
        index: u32,
        /// The pool whose query is active.
        active: String,
    },
    /// A query read or copied that no submitted work ever ended: it holds no result and never
    /// will.
    #[error("query {index} of `{name}` was never ended by submitted work")]
    NeverWritten {
        /// The pool.
        name: String,
        /// The query.
        index: u32,
    },
    /// The work that ends the query has not completed yet (wait for its submission).
    #[error("query {index} of `{name}` has no result yet")]
    NotReady {
        /// The pool.
        name: String,
        /// The query.
        index: u32,
    },
    /// A copy of results into a buffer that does not fit: a destination without `COPY_DST`
    /// usage, an offset that is not a multiple of 8, or results larger than the destination
    /// range; nothing was recorded or submitted.
    #[error("copy of queries of `{name}` into `{dst}`: {reason}")]
    Copy {
        /// The pool.
        name: String,
        /// The destination buffer.
        dst: String,
        /// What is wrong.
        reason: String,
    },
    /// A draw range of a render pass's query that is empty or past its draws.
    #[error("query {index} of `{name}` spans draws {start}..{end} of a render pass of {draws}")]
    Draws {
        /// The pool.
        name: String,
        /// The query.
        index: u32,
        /// The first draw.
        start: usize,
        /// One past the last draw.
        end: usize,
        /// Draws in the render pass.
        draws: usize,
    },
    /// A Vulkan call failed.
    #[error(transparent)]
    Vulkan(#[from] VulkanError),
}

impl ResidencyError for QueryError {
    fn class(&self) -> ErrorClass {
        match self {
            QueryError::Vulkan(e) => e.class(),
            QueryError::Unsupported { .. } => ErrorClass::Unsupported,
            _ => ErrorClass::Refused,
        }
    }
}

/// A pool of occlusion or pipeline-statistics queries on one device. It holds its device and is
/// released when dropped, after the GPU work that may use it.
#[derive(Debug)]
pub struct QueryPool {
    life: Arc<Life>,
    pool: vk::QueryPool,
    name: String,
    kind: QueryKind,
    count: u32,
    /// Per query: ended by a submitted command buffer at least once.
    written: Vec<AtomicBool>,
}

impl QueryPool {
    /// The most queries one pool holds (65 536), as for timestamps.
    pub const MAX_COUNT: u32 = 1 << 16;

    /// A pool of `count` queries of `kind` on `device`, every query reset on the GPU before this
    /// returns. Refused with nothing created: a count of 0 or above [`QueryPool::MAX_COUNT`]
    /// ([`QueryError::Count`]), statistics that are none or not core
    /// ([`QueryError::Statistics`]), a device without `pipelineStatisticsQuery` for statistics
    /// or `occlusionQueryPrecise` for precise occlusion ([`QueryError::Unsupported`]).
    pub fn new(device: &Device, name: &str, kind: QueryKind, count: u32) -> Result<QueryPool, QueryError> {
        if count == 0 || count > Self::MAX_COUNT {
            return Err(QueryError::Count { name: name.to_owned(), count, max: Self::MAX_COUNT });
        }
        let unsupported = |feature| QueryError::Unsupported {
            name: name.to_owned(),
            device: device.name().to_owned(),
            feature,
        };
        let mut info = vk::QueryPoolCreateInfo::default().query_type(kind.vk_type()).query_count(count);
        match kind {
            QueryKind::Occlusion { precise } => {
                if precise && !device.features().occlusion_query_precise {
                    return Err(unsupported("occlusionQueryPrecise"));
                }
            }
            QueryKind::PipelineStatistics(flags) => {
                if flags.is_empty() || !CORE_STATISTICS.contains(flags) {
                    return Err(QueryError::Statistics { name: name.to_owned(), flags });
                }
                if !device.features().pipeline_statistics_query {
                    return Err(unsupported("pipelineStatisticsQuery"));
                }
                info = info.pipeline_statistics(flags);
            }
        }
        // SAFETY: valid device and create info; a statistics pool only with the
        // pipelineStatisticsQuery feature enabled and core statistics (checked above).
        let pool = unsafe { device.raw().create_query_pool(&info, None) }.during("vkCreateQueryPool")?;
        device.set_name(pool, name);
        let id = device.ledger().track("query pool", name);
        let life = Life::new(device.arc(), Garbage::QueryPool { raw: pool, id }, None);
        device.submit_once(name, |rec| {
            // SAFETY: `rec` is recording on this device outside a render pass; the range is the
            // whole pool, which lives (its life is held by this function) until the wait returns.
            unsafe { device.raw().cmd_reset_query_pool(rec.raw(), pool, 0, count) };
        })?;
        let written = (0..count).map(|_| AtomicBool::new(false)).collect();
        Ok(QueryPool { life, pool, name: name.to_owned(), kind, count, written })
    }

    /// Its name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// What it counts.
    pub fn kind(&self) -> QueryKind {
        self.kind
    }

    /// How many queries it holds.
    pub fn count(&self) -> u32 {
        self.count
    }

    /// The device it lives on.
    pub fn device(&self) -> &Arc<Device> {
        self.life.device()
    }

    /// Declares a use of the renderer's own work that ends at `until`.
    pub fn used_until(&self, until: GpuUse) -> Result<(), ForeignUse> {
        self.life.used_until(until)
    }

    /// Checks `index` against the pool.
    pub fn check_index(&self, index: u32) -> Result<(), QueryError> {
        if index >= self.count {
            return Err(QueryError::Index { name: self.name.clone(), index, count: self.count });
        }
        Ok(())
    }

    /// Checks `range` against the pool: not empty, inside it.
    pub fn check_range(&self, range: &std::ops::Range<u32>) -> Result<(), QueryError> {
        if range.start >= range.end {
            return Err(QueryError::Index { name: self.name.clone(), index: range.start, count: self.count });
        }
        if range.end > self.count {
            return Err(QueryError::Index { name: self.name.clone(), index: range.end, count: self.count });
        }
        Ok(())
    }

    /// Whether query `index` was ended by submitted work at least once.
    pub fn was_written(&self, index: u32) -> bool {
        self.written.get(index as usize).is_some_and(|w| w.load(Ordering::Acquire))
    }

    /// Notes that submitted work ends query `index` (a command buffer that ends it was
    /// submitted).
    pub(crate) fn note_written(&self, index: u32) {
        if let Some(w) = self.written.get(index as usize) {
            w.store(true, Ordering::Release);
        }
    }

    /// The results of queries `range` without waiting: [`QueryKind::words`] 64-bit values per
    /// query, query after query. A range outside the pool is [`QueryError::Index`], a query no
    /// submitted work ended [`QueryError::NeverWritten`], one whose work has not completed
    /// [`QueryError::NotReady`] (wait for the submission that ends it).
    pub fn results(&self, range: std::ops::Range<u32>) -> Result<Vec<u64>, QueryError> {
        self.check_range(&range)?;
        if let Some(index) = range.clone().find(|&i| !self.was_written(i)) {
            return Err(QueryError::NeverWritten { name: self.name.clone(), index });
        }
        let words = self.kind.words() as usize;
        let mut out = vec![0u64; (range.end - range.start) as usize * words];
        let mut available = vec![0u64; words + 1];
        for (n, index) in range.enumerate() {
            let bytes = std::mem::size_of_val(available.as_slice());
            let raw = self.device().raw();
            // SAFETY: a live pool of this device; one query inside it (checked above), reset at
            // least once (at creation); its values and its availability word as 64-bit values
            // (TYPE_64 | WITH_AVAILABILITY: `words + 1` of them) into a buffer of exactly that
            // many bytes, the stride a multiple of 8; without waiting.
            let got = unsafe {
                (raw.fp_v1_0().get_query_pool_results)(
                    raw.handle(),
                    self.pool,
                    index,
                    1,
                    bytes,
                    available.as_mut_ptr().cast(),
                    bytes as u64,
                    vk::QueryResultFlags::TYPE_64 | vk::QueryResultFlags::WITH_AVAILABILITY,
                )
            };
            match got {
                vk::Result::SUCCESS | vk::Result::NOT_READY => {}
                e => return Err(VulkanError::from_vk("vkGetQueryPoolResults", e).into()),
            }
            if available[words] == 0 {
                return Err(QueryError::NotReady { name: self.name.clone(), index });
            }
            out[n * words..(n + 1) * words].copy_from_slice(&available[..words]);
        }
        Ok(out)
    }

    /// Holds the pool in `rec` and records resetting query `index`, outside a render pass.
    ///
    /// # Safety
    /// `rec` records on the pool's device, outside a render pass; `index` lies in the pool.
    pub(crate) unsafe fn record_reset(&self, rec: &mut Recording<'_>, index: u32) {
        rec.keep(&self.life);
        // SAFETY: the caller's contract: this device, outside a render pass, inside the pool,
        // which the recording holds.
        unsafe { rec.device().raw().cmd_reset_query_pool(rec.raw(), self.pool, index, 1) };
        rec.recorded();
    }

    /// Records beginning query `index` into `cmd`, with the precise flag of an occlusion pool.
    ///
    /// # Safety
    /// `cmd` records on the pool's device, in a recording that holds the pool (a
    /// [`QueryPool::record_reset`] of it); the query was reset since it was last begun and no
    /// query of its type is active in `cmd`; it is ended in `cmd`, inside the same render pass
    /// instance when begun inside one.
    pub(crate) unsafe fn record_begin(&self, device: &Device, cmd: vk::CommandBuffer, index: u32) {
        let flags = match self.kind {
            QueryKind::Occlusion { precise: true } => vk::QueryControlFlags::PRECISE,
            _ => vk::QueryControlFlags::empty(),
        };
        // SAFETY: the caller's contract; PRECISE only on a pool whose creation checked the
        // occlusionQueryPrecise feature.
        unsafe { device.raw().cmd_begin_query(cmd, self.pool, index, flags) };
    }

    /// Records ending query `index` into `cmd`.
    ///
    /// # Safety
    /// `cmd` records on the pool's device, in a recording that holds the pool; the query is
    /// active in `cmd` (begun there, inside the same render pass instance when inside one).
    pub(crate) unsafe fn record_end(&self, device: &Device, cmd: vk::CommandBuffer, index: u32) {
        // SAFETY: the caller's contract.
        unsafe { device.raw().cmd_end_query(cmd, self.pool, index) };
    }

    /// Records copying the results of queries `range` (64-bit values, waiting for them) into
    /// `dst` at `offset`, [`QueryKind::words`] × 8 bytes per query.
    ///
    /// # Safety
    /// `rec` records on the pool's device outside a render pass; `range` lies in the pool and
    /// every query of it is ended earlier in `rec` or by work submitted before `rec` (so the
    /// wait ends), none active; `dst` is a live buffer of this device with `COPY_DST` usage,
    /// held by `rec`, and `offset` (a multiple of 8) plus the results' bytes lie inside it.
    pub(crate) unsafe fn record_copy(
        &self,
        rec: &mut Recording<'_>,
        range: std::ops::Range<u32>,
        dst: vk::Buffer,
        offset: u64,
    ) {
        rec.keep(&self.life);
        let stride = u64::from(self.kind.words()) * 8;
        // SAFETY: the caller's contract; a stride that is a multiple of 8 and large enough for one
        // query's values; TYPE_64 | WAIT.
        unsafe {
            rec.device().raw().cmd_copy_query_pool_results(
                rec.raw(),
                self.pool,
                range.start,
                range.end - range.start,
                dst,
                offset,
                stride,
                vk::QueryResultFlags::TYPE_64 | vk::QueryResultFlags::WAIT,
            )
        };
        rec.recorded();
    }
}
