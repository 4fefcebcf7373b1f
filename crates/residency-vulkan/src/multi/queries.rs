//! Multi-device queries: occlusion and pipeline-statistics query pools on every device of a mask
//! (a [`QueryPool`] per device, beside the timestamps of
//! [`MultiTimestamps`](crate::multi::work::MultiTimestamps)), and the work items that use them.
//!
//! A query is begun and ended by work items of one submission: [`WorkItem::BeginQuery`] and
//! [`WorkItem::EndQuery`] around dispatches, copies and whole render passes, or a [`DrawQuery`]
//! around a range of the draws inside a render pass ([`WorkItem::QueriedRender`]). Each begin is
//! preceded by a reset of its query (outside any render pass), so the library handles resets.
//! Results are read on the host per device ([`MultiQueryPool::results`]) or copied into a
//! multi-device buffer view on the device of the submission ([`WorkItem::CopyQueryResults`]).
//!
//! Checked at submission, before anything is recorded: the pool exists on the device, indices
//! and ranges lie inside it, an end has its begin and every begin its end within the
//! submission (and within the render pass for a [`DrawQuery`]), no two queries of one type are
//! active at once, and a copied query was ended earlier in the submission or by earlier
//! submitted work and is not active.

use crate::device::set::DeviceSet;
use crate::device::Device;
use crate::multi::barriers::Access;
use crate::multi::work::{BufferView, WorkError, WorkItem};
use crate::multi::{fan_out_on, multi_device, MultiDeviceError, PerDevice};
use crate::resources::buffer::Buffer;
use crate::sync::queries::{QueryError, QueryKind, QueryPool};
use crate::sync::recording::Recording;
use ash::vk;
use residency_core::device_mask::{DeviceIndex, DeviceMask};
use residency_core::sync::Use;
use residency_core::usage::BufferUsage;
use std::ops::Range;

/// A pool of occlusion or pipeline-statistics queries on every device of a mask. Each device's
/// pool holds its device and is released when dropped, after the GPU work that may use it.
#[derive(Debug)]
pub struct MultiQueryPool {
    name: String,
    kind: QueryKind,
    count: u32,
    pools: PerDevice<QueryPool>,
}

impl MultiQueryPool {
    /// `count` queries of `kind` on every open device of `mask`, reset on each GPU before this
    /// returns; what [`QueryPool::new`] refuses on one device (a device without the feature the
    /// kind needs, say) is refused with that device named and nothing created on any.
    pub fn new(
        set: &DeviceSet,
        mask: DeviceMask,
        name: &str,
        kind: QueryKind,
        count: u32,
    ) -> Result<Self, MultiDeviceError<QueryError>> {
        let pools = fan_out_on(set, mask, |d| QueryPool::new(d, name, kind, count))?;
        Ok(MultiQueryPool { name: name.to_owned(), kind, count, pools })
    }

    /// Its name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// What it counts.
    pub fn kind(&self) -> QueryKind {
        self.kind
    }

    /// How many queries each device's pool holds.
    pub fn count(&self) -> u32 {
        self.count
    }

    /// The results of queries `range` on `device` ([`QueryPool::results`]: [`QueryKind::words`]
    /// values per query), once the work that ended them there has completed.
    pub fn results(&self, device: DeviceIndex, range: Range<u32>) -> Result<Vec<u64>, WorkError> {
        let pool =
            self.pools.get(device).ok_or(WorkError::NotOnDevice { name: self.name.clone(), device })?;
        Ok(pool.results(range)?)
    }

    /// The pool of `device` (which must be `dev`) with `index` checked against it.
    fn resolve(&self, device: DeviceIndex, dev: &Device, index: u32) -> Result<&QueryPool, WorkError> {
        let pool =
            self.pools.get(device).ok_or(WorkError::NotOnDevice { name: self.name.clone(), device })?;
        if !pool.device().is(dev) {
            return Err(WorkError::NotOnDevice { name: self.name.clone(), device });
        }
        pool.check_index(index)?;
        Ok(pool)
    }
}

multi_device!(MultiQueryPool, pools: QueryPool);

/// A copy of the results of queries `queries` of `pool` into `dst` on the device of the
/// submission: 64-bit values ([`QueryKind::words`] per query, query after query) from the start
/// of the view, written once the queries' results are available (the copy waits for them).
/// Checked at submission: the range inside the pool, the view on the device with `COPY_DST`
/// usage, its offset a multiple of 8 and its size at least the results' bytes, and every query
/// ended before (in the submission or earlier submitted work) and not active.
#[derive(Clone, Debug)]
pub struct QueryCopyItem<'a> {
    /// The pool.
    pub pool: &'a MultiQueryPool,
    /// The queries.
    pub queries: Range<u32>,
    /// Where the results go.
    pub dst: BufferView<'a>,
}

/// A query around draws `draws` (indices into the render item's draws) of a render pass:
/// query `index` of `pool` is begun right before the first and ended right after the last,
/// inside the render pass ([`WorkItem::QueriedRender`]). Queries of one type must not overlap.
#[derive(Clone, Debug)]
pub struct DrawQuery<'a> {
    /// The pool.
    pub pool: &'a MultiQueryPool,
    /// The query.
    pub index: u32,
    /// The draws it counts.
    pub draws: Range<usize>,
}

/// A [`WorkItem::BeginQuery`] or [`WorkItem::EndQuery`] resolved on a device.
#[derive(Debug)]
pub(crate) struct ResolvedQuery<'r> {
    pool: &'r QueryPool,
    index: u32,
}

impl ResolvedQuery<'_> {
    /// Whether `other` is the same query (pool and index).
    pub(crate) fn is(&self, other: &ResolvedQuery<'_>) -> bool {
        std::ptr::eq(self.pool, other.pool) && self.index == other.index
    }
}

/// A [`QueryCopyItem`] resolved on a device.
#[derive(Debug)]
pub(crate) struct ResolvedCopy<'r> {
    pool: &'r QueryPool,
    range: Range<u32>,
    dst: &'r Buffer,
    offset: u64,
    /// The results' bytes in the destination (from the view's offset into its buffer).
    written: (u64, u64),
}

impl<'r> ResolvedCopy<'r> {
    /// What the copy writes, for the submitter's barriers: the results' bytes of the destination
    /// view, as a transfer write (`vkCmdCopyQueryPoolResults` is a transfer; the queries
    /// themselves are ordered by the query commands, not by memory barriers).
    pub(crate) fn accesses(&self) -> Vec<Access<'r>> {
        let (offset, size) = self.written;
        vec![Access::Buffer { buffer: self.dst, offset, size, use_: Use::TransferDst }]
    }
}

/// A [`DrawQuery`] resolved on a device.
#[derive(Debug)]
pub(crate) struct ResolvedDrawQuery<'r> {
    pool: &'r QueryPool,
    index: u32,
    draws: Range<usize>,
}

/// Resolves a begin or end of query `index` of `pool` on `dev`.
pub(crate) fn resolve_query<'r>(
    pool: &'r MultiQueryPool,
    index: u32,
    device: DeviceIndex,
    dev: &Device,
) -> Result<ResolvedQuery<'r>, WorkError> {
    Ok(ResolvedQuery { pool: pool.resolve(device, dev, index)?, index })
}

/// Resolves a copy of query results on `dev`: the pool and range, the destination view, its
/// usage, alignment and size.
pub(crate) fn resolve_copy<'r>(
    c: &QueryCopyItem<'r>,
    device: DeviceIndex,
    dev: &Device,
) -> Result<ResolvedCopy<'r>, WorkError> {
    let pool = c.pool.resolve(device, dev, c.queries.start)?;
    pool.check_range(&c.queries)?;
    let dst = c.dst.resolve(device)?;
    if !dst.buffer.device().is(dev) {
        return Err(WorkError::NotOnDevice { name: dst.buffer.name().to_owned(), device });
    }
    let refuse = |reason: String| {
        WorkError::Query(QueryError::Copy {
            name: pool.name().to_owned(),
            dst: dst.buffer.name().to_owned(),
            reason,
        })
    };
    if !dst.buffer.usage().contains(BufferUsage::COPY_DST) {
        return Err(refuse("the destination lacks COPY_DST usage".to_owned()));
    }
    let offset = dst.buffer.offset() + dst.offset;
    if dst.offset % 8 != 0 || offset % 8 != 0 {
        return Err(refuse(format!("offset {} is not a multiple of 8", dst.offset)));
    }
    let bytes = u64::from(c.queries.end - c.queries.start) * u64::from(pool.kind().words()) * 8;
    if bytes > dst.size {
        return Err(refuse(format!("{bytes} B of results into a view of {} B", dst.size)));
    }
    Ok(ResolvedCopy { pool, range: c.queries.clone(), dst: dst.buffer, offset, written: (dst.offset, bytes) })
}

/// Resolves the queries of a render item of `draws` draws on `dev`: each pool, index and draw
/// range (not empty, inside the draws).
pub(crate) fn resolve_draw_queries<'r>(
    queries: &[DrawQuery<'r>],
    draws: usize,
    device: DeviceIndex,
    dev: &Device,
) -> Result<Vec<ResolvedDrawQuery<'r>>, WorkError> {
    let mut out = Vec::with_capacity(queries.len());
    for q in queries {
        let pool = q.pool.resolve(device, dev, q.index)?;
        if q.draws.start >= q.draws.end || q.draws.end > draws {
            return Err(WorkError::Query(QueryError::Draws {
                name: pool.name().to_owned(),
                index: q.index,
                start: q.draws.start,
                end: q.draws.end,
                draws,
            }));
        }
        out.push(ResolvedDrawQuery { pool, index: q.index, draws: q.draws.clone() });
    }
    Ok(out)
}

/// One query of a pool, by the multi-device pool's address.
type QueryId = (*const MultiQueryPool, u32);

/// Checks the begins, ends and copies of `items` on `device` in order (every item already
/// resolved there): an end without its begin, a begin without its end, two active queries of
/// one type, a copy of an active query or of one that no work ended. Changes nothing.
pub(crate) fn check_sequence(items: &[WorkItem<'_, '_>], device: DeviceIndex) -> Result<(), WorkError> {
    let mut active: Vec<(QueryId, &MultiQueryPool)> = Vec::new();
    let mut ended: Vec<QueryId> = Vec::new();
    let id = |pool: &MultiQueryPool, index: u32| (pool as *const MultiQueryPool, index);
    let already = |pool: &MultiQueryPool, index: u32, other: &MultiQueryPool| {
        WorkError::Query(QueryError::AlreadyActive {
            name: pool.name.clone(),
            index,
            active: other.name.clone(),
        })
    };
    for item in items {
        match item {
            WorkItem::BeginQuery(pool, index) => {
                if let Some((_, other)) = active.iter().find(|(_, p)| p.kind.same_type(pool.kind)) {
                    return Err(already(pool, *index, other));
                }
                active.push((id(pool, *index), pool));
            }
            WorkItem::EndQuery(pool, index) => {
                let Some(at) = active.iter().position(|(q, _)| *q == id(pool, *index)) else {
                    return Err(WorkError::Query(QueryError::NotBegun {
                        name: pool.name.clone(),
                        index: *index,
                    }));
                };
                active.remove(at);
                ended.push(id(pool, *index));
            }
            WorkItem::CopyQueryResults(c) => {
                let instance = c.pool.pools.get(device).expect("resolved on the device");
                for index in c.queries.clone() {
                    if active.iter().any(|(q, _)| *q == id(c.pool, index)) {
                        return Err(WorkError::Query(QueryError::NotEnded {
                            name: c.pool.name.clone(),
                            index,
                        }));
                    }
                    if !ended.contains(&id(c.pool, index)) && !instance.was_written(index) {
                        return Err(WorkError::Query(QueryError::NeverWritten {
                            name: c.pool.name.clone(),
                            index,
                        }));
                    }
                }
            }
            WorkItem::QueriedRender(_, queries) => {
                for (n, q) in queries.iter().enumerate() {
                    if let Some((_, other)) = active.iter().find(|(_, p)| p.kind.same_type(q.pool.kind)) {
                        return Err(already(q.pool, q.index, other));
                    }
                    // Each query is reset once before the pass: it can be begun once in it.
                    let clash = queries[..n].iter().find(|o| {
                        (o.pool.kind.same_type(q.pool.kind)
                            && o.draws.start < q.draws.end
                            && q.draws.start < o.draws.end)
                            || id(o.pool, o.index) == id(q.pool, q.index)
                    });
                    if let Some(other) = clash {
                        return Err(already(q.pool, q.index, other.pool));
                    }
                }
                ended.extend(queries.iter().map(|q| id(q.pool, q.index)));
            }
            _ => {}
        }
    }
    if let Some(((_, index), pool)) = active.first() {
        return Err(WorkError::Query(QueryError::NotEnded { name: pool.name.clone(), index: *index }));
    }
    Ok(())
}

/// Notes, after `items` were submitted to `device`, every query they ended.
pub(crate) fn note_written(items: &[WorkItem<'_, '_>], device: DeviceIndex) {
    for item in items {
        match item {
            WorkItem::EndQuery(pool, index) => {
                if let Some(p) = pool.pools.get(device) {
                    p.note_written(*index);
                }
            }
            WorkItem::QueriedRender(_, queries) => {
                for q in queries.iter() {
                    if let Some(p) = q.pool.pools.get(device) {
                        p.note_written(q.index);
                    }
                }
            }
            _ => {}
        }
    }
}

/// Records a reset and a begin of a resolved query, outside a render pass.
pub(crate) fn record_begin(rec: &mut Recording<'_>, q: &ResolvedQuery<'_>) {
    // SAFETY: `rec` records on the pool's device (resolved there) outside a render pass (between
    // work items); the index lies in the pool (resolved). The reset makes the query unavailable;
    // `check_sequence` refused a begin while a query of its type is active and a begin without
    // its end in this submission (outside a render pass, as begun).
    unsafe {
        q.pool.record_reset(rec, q.index);
        q.pool.record_begin(rec.device(), rec.raw(), q.index);
    }
}

/// Records the end of a resolved query, outside a render pass.
pub(crate) fn record_end(rec: &mut Recording<'_>, q: &ResolvedQuery<'_>) {
    // SAFETY: `rec` records on the pool's device, which holds the pool (kept at its begin); the
    // query is active: `check_sequence` refused an end without its begin earlier in the
    // submission, both outside render passes.
    unsafe { q.pool.record_end(rec.device(), rec.raw(), q.index) };
    rec.recorded();
}

/// Records a resolved copy of query results.
pub(crate) fn record_copy(rec: &mut Recording<'_>, c: &ResolvedCopy<'_>) {
    rec.keep(c.dst.life());
    // SAFETY: `rec` records on the pool's and the buffer's device (resolved there) outside a
    // render pass; the range lies in the pool, every query of it ended before and none active
    // (`check_sequence`), so the wait ends; the buffer is live, held by the recording, with
    // COPY_DST usage, and the 8-aligned offset plus the results' bytes lie inside its view
    // (`resolve_copy`).
    unsafe { c.pool.record_copy(rec, c.range.clone(), c.dst.raw(), c.offset) };
}

/// Records the resets of a render item's queries, before its render pass.
pub(crate) fn reset_draw_queries(rec: &mut Recording<'_>, queries: &[ResolvedDrawQuery<'_>]) {
    for q in queries {
        // SAFETY: `rec` records on the pool's device (resolved there) outside a render pass
        // (before the item's pass begins); the index lies in the pool (resolved).
        unsafe { q.pool.record_reset(rec, q.index) };
    }
}

/// The queries of a render item while its draws are recorded: each begun before its first
/// draw and ended after its last; dropped (when the draws end, or stop early at a refused draw)
/// it ends every one still active, so none outlives the render pass.
pub(crate) struct DrawQueries<'q, 'r> {
    queries: &'q [ResolvedDrawQuery<'r>],
    device: &'q Device,
    cmd: vk::CommandBuffer,
    active: Vec<usize>,
}

impl<'q, 'r> DrawQueries<'q, 'r> {
    /// The queries of a render item, none active yet, recorded into `cmd` of `device`.
    ///
    /// # Safety
    /// `cmd` is recording inside the item's render pass instance on the queries' device, in a
    /// recording that holds their pools ([`reset_draw_queries`] before the pass), and stays
    /// inside that instance until this value is dropped.
    pub(crate) unsafe fn new(
        queries: &'q [ResolvedDrawQuery<'r>],
        device: &'q Device,
        cmd: vk::CommandBuffer,
    ) -> Self {
        DrawQueries { queries, device, cmd, active: Vec::new() }
    }

    /// Begins the queries whose first draw is `draw`.
    pub(crate) fn before(&mut self, draw: usize) {
        for (n, q) in self.queries.iter().enumerate().filter(|(_, q)| q.draws.start == draw) {
            // SAFETY: `cmd` records inside the item's render pass on the pool's device (resolved
            // there), in a recording that holds the pool (`new`'s contract); the query was reset
            // before the pass and is begun once in it (`check_sequence` refused a query twice in
            // one pass, overlapping queries of one type, and any query of its type active
            // around the pass); it is ended in this pass (`after`, or the drop).
            unsafe { q.pool.record_begin(self.device, self.cmd, q.index) };
            self.active.push(n);
        }
    }

    /// Ends the queries whose last draw is `draw`.
    pub(crate) fn after(&mut self, draw: usize) {
        let (queries, device, cmd) = (self.queries, self.device, self.cmd);
        self.active.retain(|&n| {
            let q = &queries[n];
            if q.draws.end == draw + 1 {
                // SAFETY: begun in this render pass (`before`) and not yet ended.
                unsafe { q.pool.record_end(device, cmd, q.index) };
                false
            } else {
                true
            }
        });
    }
}

impl Drop for DrawQueries<'_, '_> {
    fn drop(&mut self) {
        for n in self.active.drain(..) {
            let q = &self.queries[n];
            // SAFETY: begun in this render pass (`before`) and not yet ended; still inside the
            // pass (`new`'s contract).
            unsafe { q.pool.record_end(self.device, self.cmd, q.index) };
        }
    }
}
