//! A batch of declared uses on one device and queue, and its flush into the barriers of one
//! `vkCmdPipelineBarrier2`: per-piece rules, range and subresource merging, ownership transfer
//! pairs and the global-barrier rule.

use super::barrier::{
    BarrierBatch, BufferBarrier, Flush, GlobalBarrierRule, ImageBarrier, MemoryBarrier, QueueRelease, Scope,
};
use super::error::SyncError;
use super::flags::{ImageLayout, QueueFamily};
use super::region::{Region, SubresourceRange};
use super::state::{apply, MergedUse, PieceBarrier};
use super::tracker::{BufferEntry, Entry, ImageEntry, StateTracker};
use super::uses::{Use, UseInfo};
use super::ResourceId;
use crate::device_mask::DeviceIndex;
use std::collections::HashMap;
use std::ops::Range;

#[derive(Clone, Debug)]
enum Span {
    Bytes(Range<u64>),
    Image { mips: Range<u32>, layers: Range<u32> },
}

#[derive(Clone, Debug)]
struct Decl {
    target: ResourceId,
    span: Span,
    info: UseInfo,
    discard: bool,
}

/// The uses of resources by the next commands on one device and one queue; [`Batch::flush`]
/// turns them into the barriers to record before those commands.
///
/// Uses declared in one batch happen together: uses of the same bytes or subresources merge
/// (stages and accesses unite; they write if any writes; they discard only if all discard), so a
/// batch never orders its own uses against each other. A batch dropped without a flush changes
/// nothing.
#[derive(Debug)]
pub struct Batch<'t> {
    tracker: &'t mut StateTracker,
    device: DeviceIndex,
    queue: QueueFamily,
    decls: Vec<Decl>,
}

impl<'t> Batch<'t> {
    pub(crate) fn new(tracker: &'t mut StateTracker, device: DeviceIndex, queue: QueueFamily) -> Batch<'t> {
        Batch { tracker, device, queue, decls: Vec::new() }
    }

    /// Declares that the next commands use `region` of `resource` as `use_`, keeping its
    /// contents.
    pub fn declare(
        &mut self,
        resource: ResourceId,
        region: Region,
        use_: Use,
    ) -> Result<&mut Self, SyncError> {
        self.push(resource, region, use_, false)
    }

    /// Like [`Batch::declare`], but the previous contents do not matter: an image transitions
    /// from `UNDEFINED`, and no ownership transfer is made for it.
    pub fn declare_discard(
        &mut self,
        resource: ResourceId,
        region: Region,
        use_: Use,
    ) -> Result<&mut Self, SyncError> {
        self.push(resource, region, use_, true)
    }

    /// The number of declarations so far.
    pub fn len(&self) -> usize {
        self.decls.len()
    }

    /// Whether nothing is declared.
    pub fn is_empty(&self) -> bool {
        self.decls.is_empty()
    }

    fn push(
        &mut self,
        resource: ResourceId,
        region: Region,
        use_: Use,
        discard: bool,
    ) -> Result<&mut Self, SyncError> {
        let device = self.device;
        let tracker = &*self.tracker;
        let entry = tracker
            .entries
            .get(&(device, resource))
            .ok_or(SyncError::UnknownResource { device, resource })?;
        let info = use_.info();
        let name = || entry.name().to_owned();
        let bytes_in = |size: u64| -> Result<Range<u64>, SyncError> {
            match region {
                Region::Whole => Ok(0..size),
                Region::Bytes { offset, size: len } => match offset.checked_add(len) {
                    Some(end) if len > 0 && end <= size => Ok(offset..end),
                    _ => Err(SyncError::BytesOutOfBounds {
                        resource,
                        name: name(),
                        offset,
                        size: len,
                        buffer_size: size,
                    }),
                },
                Region::Subresources(_) => {
                    Err(SyncError::RegionKind { resource, name: name(), kind: "a buffer" })
                }
            }
        };
        let (target, span) = match entry {
            Entry::Buffer(b) => {
                let bytes = bytes_in(b.size)?;
                (resource, Span::Bytes(if b.whole { 0..b.size } else { bytes }))
            }
            Entry::Paged { size, .. } => {
                bytes_in(*size)?;
                let page = tracker.resolve(device, resource)?;
                let page_size = match tracker.entries.get(&(device, page)) {
                    Some(Entry::Buffer(p)) => p.size,
                    _ => return Err(SyncError::UnknownResource { device, resource: page }),
                };
                (page, Span::Bytes(0..page_size))
            }
            Entry::Image(img) => {
                let layout =
                    info.layout.ok_or_else(|| SyncError::NotAnImageUse { resource, name: name(), use_ })?;
                if layout == ImageLayout::UNDEFINED || layout == ImageLayout::PREINITIALIZED {
                    return Err(SyncError::InvalidLayout { use_, layout });
                }
                let range = match region {
                    Region::Whole => SubresourceRange::all(img.mips, img.layers),
                    Region::Subresources(r) => r,
                    Region::Bytes { .. } => {
                        return Err(SyncError::RegionKind { resource, name: name(), kind: "an image" })
                    }
                };
                let fits = |base: u32, count: u32, max: u32| {
                    count > 0 && base.checked_add(count).is_some_and(|e| e <= max)
                };
                if !fits(range.base_mip, range.mip_count, img.mips)
                    || !fits(range.base_layer, range.layer_count, img.layers)
                {
                    return Err(SyncError::SubresourcesOutOfBounds {
                        resource,
                        name: name(),
                        range,
                        mip_levels: img.mips,
                        array_layers: img.layers,
                    });
                }
                for other in self.decls.iter().filter(|d| d.target == resource) {
                    if let Span::Image { mips, layers } = &other.span {
                        let other_range = SubresourceRange {
                            base_mip: mips.start,
                            mip_count: mips.end - mips.start,
                            base_layer: layers.start,
                            layer_count: layers.end - layers.start,
                        };
                        if other_range.overlaps(&range) && other.info.layout != Some(layout) {
                            return Err(SyncError::ConflictingLayouts {
                                resource,
                                name: name(),
                                first: other.info.layout.unwrap_or_default(),
                                second: layout,
                            });
                        }
                    }
                }
                let mips = range.base_mip..range.base_mip + range.mip_count;
                let layers = range.base_layer..range.base_layer + range.layer_count;
                (resource, Span::Image { mips, layers })
            }
        };
        self.decls.push(Decl { target, span, info, discard });
        Ok(self)
    }

    /// Applies the declared uses to the tracked states and returns the barriers they need: one
    /// [`BarrierBatch`] for this queue, plus release barriers for queues giving up ownership.
    pub fn flush(self) -> Flush {
        let Batch { tracker, device, queue, decls } = self;
        let mut order: Vec<ResourceId> = Vec::new();
        let mut groups: HashMap<ResourceId, Vec<usize>> = HashMap::new();
        for (i, d) in decls.iter().enumerate() {
            groups
                .entry(d.target)
                .or_insert_with(|| {
                    order.push(d.target);
                    Vec::new()
                })
                .push(i);
        }
        let mut out = Output::default();
        for target in order {
            let idx = &groups[&target];
            match tracker.entries.get_mut(&(device, target)) {
                Some(Entry::Buffer(b)) => flush_buffer(b, target, idx, &decls, queue, &mut out),
                Some(Entry::Image(img)) => flush_image(img, target, idx, &decls, queue, &mut out),
                _ => unreachable!("declarations resolve to registered buffers and images"),
            }
        }
        let mut barriers = out.main;
        collapse_buffer_barriers(&mut barriers, tracker.options.global_barriers);
        Flush { device, queue_family: queue, barriers, releases: out.releases }
    }
}

#[derive(Default)]
struct Output {
    main: BarrierBatch,
    releases: Vec<QueueRelease>,
}

impl Output {
    fn release(&mut self, family: QueueFamily) -> &mut BarrierBatch {
        let i = match self.releases.iter().position(|r| r.queue_family == family) {
            Some(i) => i,
            None => {
                self.releases.push(QueueRelease { queue_family: family, barriers: BarrierBatch::default() });
                self.releases.len() - 1
            }
        };
        &mut self.releases[i].barriers
    }
}

/// The merged use of the declarations `covering` (indices into `decls`).
fn merge_uses(decls: &[Decl], covering: impl Iterator<Item = usize>) -> Option<MergedUse> {
    covering.fold(None, |acc: Option<MergedUse>, i| {
        let d = &decls[i];
        let layout = d.info.layout.unwrap_or(ImageLayout::UNDEFINED);
        Some(match acc {
            None => MergedUse {
                stages: d.info.stages,
                access: d.info.access,
                layout,
                writes: d.info.writes,
                discard: d.discard,
            },
            Some(m) => MergedUse {
                stages: m.stages | d.info.stages,
                access: m.access | d.info.access,
                layout: m.layout,
                writes: m.writes || d.info.writes,
                discard: m.discard && d.discard,
            },
        })
    })
}

/// Elementary segments between all start/end points of `spans`, each with the declarations
/// covering it, and the index of the contiguous run it belongs to.
fn segments(spans: &[(usize, Range<u64>)]) -> Vec<(Range<u64>, Vec<usize>, usize)> {
    let mut bounds: Vec<u64> = spans.iter().flat_map(|(_, r)| [r.start, r.end]).collect();
    bounds.sort_unstable();
    bounds.dedup();
    let mut out = Vec::new();
    let mut run = 0;
    for w in bounds.windows(2) {
        let seg = w[0]..w[1];
        let covering: Vec<usize> =
            spans.iter().filter(|(_, r)| r.start <= seg.start && seg.end <= r.end).map(|&(i, _)| i).collect();
        if covering.is_empty() {
            run += 1;
            continue;
        }
        out.push((seg, covering, run));
    }
    out
}

fn flush_buffer(
    b: &mut BufferEntry,
    target: ResourceId,
    idx: &[usize],
    decls: &[Decl],
    queue: QueueFamily,
    out: &mut Output,
) {
    let spans: Vec<(usize, Range<u64>)> = idx
        .iter()
        .map(|&i| match &decls[i].span {
            Span::Bytes(r) => (i, r.clone()),
            Span::Image { .. } => unreachable!("buffer declarations have byte spans"),
        })
        .collect();
    // (run, start, end, barrier), in offset order.
    let mut pieces: Vec<(usize, u64, u64, PieceBarrier)> = Vec::new();
    for (seg, covering, run) in segments(&spans) {
        let Some(merged) = merge_uses(decls, covering.into_iter()) else { continue };
        b.map.update(seg, |s, e, st| {
            if let Some(pb) = apply(st, &merged, false, queue, b.exclusive) {
                pieces.push((run, s, e, pb));
            }
        });
    }
    // Consecutive pieces of one run with the same ownership change merge into one barrier
    // spanning them, with united scopes. A plain barrier may span pieces that need none (it only
    // waits a little more for them); an ownership transfer only spans pieces it transfers.
    let mut merged: Vec<(usize, u64, u64, PieceBarrier)> = Vec::new();
    for p in pieces {
        match merged.last_mut() {
            Some(m)
                if m.0 == p.0
                    && m.3.transfer_from == p.3.transfer_from
                    && (m.3.transfer_from.is_none() || m.2 == p.1) =>
            {
                m.2 = p.2;
                m.3.src = m.3.src.union(p.3.src);
                m.3.dst = m.3.dst.union(p.3.dst);
            }
            _ => merged.push(p),
        }
    }
    for (_, start, end, pb) in merged {
        let barrier = BufferBarrier {
            resource: target,
            offset: start,
            size: end - start,
            src: pb.src,
            dst: pb.dst,
            src_queue_family: QueueFamily::IGNORED,
            dst_queue_family: QueueFamily::IGNORED,
        };
        match pb.transfer_from {
            None => out.main.buffers.push(barrier),
            Some(from) => {
                let pair = BufferBarrier { src_queue_family: from, dst_queue_family: queue, ..barrier };
                out.release(from).buffers.push(BufferBarrier { dst: Scope::NONE, ..pair });
                out.main.buffers.push(BufferBarrier { src: Scope::NONE, ..pair });
            }
        }
    }
}

/// The image pieces of one batch that need the same transition (old layout, new layout,
/// ownership source), with their united scopes.
struct ImageGroup {
    key: (ImageLayout, ImageLayout, Option<QueueFamily>),
    src: Scope,
    dst: Scope,
    pieces: Vec<(u32, Range<u32>)>,
}

fn flush_image(
    img: &mut ImageEntry,
    target: ResourceId,
    idx: &[usize],
    decls: &[Decl],
    queue: QueueFamily,
    out: &mut Output,
) {
    // Per transition (in first-seen order): united scopes and the (mip, layers) pieces.
    let mut groups: Vec<ImageGroup> = Vec::new();
    for mip in 0..img.mips {
        let spans: Vec<(usize, Range<u64>)> = idx
            .iter()
            .filter_map(|&i| match &decls[i].span {
                Span::Image { mips, layers } if mips.contains(&mip) => {
                    Some((i, u64::from(layers.start)..u64::from(layers.end)))
                }
                _ => None,
            })
            .collect();
        if spans.is_empty() {
            continue;
        }
        let map = &mut img.per_mip[mip as usize];
        for (seg, covering, _) in segments(&spans) {
            let Some(merged) = merge_uses(decls, covering.into_iter()) else { continue };
            map.update(seg, |s, e, st| {
                let Some(pb) = apply(st, &merged, true, queue, img.exclusive) else { return };
                let key = (pb.old_layout, pb.new_layout, pb.transfer_from);
                let layers = s as u32..e as u32;
                match groups.iter_mut().find(|g| g.key == key) {
                    Some(g) => {
                        g.src = g.src.union(pb.src);
                        g.dst = g.dst.union(pb.dst);
                        match g.pieces.last_mut() {
                            Some((m, l)) if *m == mip && l.end == layers.start => l.end = layers.end,
                            _ => g.pieces.push((mip, layers)),
                        }
                    }
                    None => {
                        groups.push(ImageGroup { key, src: pb.src, dst: pb.dst, pieces: vec![(mip, layers)] })
                    }
                }
            });
        }
    }
    for ImageGroup { key: (old_layout, new_layout, transfer_from), src, dst, pieces } in groups {
        for range in rectangles(pieces) {
            let barrier = ImageBarrier {
                resource: target,
                aspects: img.aspects,
                range,
                old_layout,
                new_layout,
                src,
                dst,
                src_queue_family: QueueFamily::IGNORED,
                dst_queue_family: QueueFamily::IGNORED,
            };
            match transfer_from {
                None => out.main.images.push(barrier),
                Some(from) => {
                    let pair = ImageBarrier { src_queue_family: from, dst_queue_family: queue, ..barrier };
                    out.release(from).images.push(ImageBarrier { dst: Scope::NONE, ..pair });
                    out.main.images.push(ImageBarrier { src: Scope::NONE, ..pair });
                }
            }
        }
    }
}

/// Merges (mip, layer range) pieces into subresource rectangles: consecutive mips with the same
/// layer range become one range.
fn rectangles(mut pieces: Vec<(u32, Range<u32>)>) -> Vec<SubresourceRange> {
    pieces.sort_by_key(|(mip, l)| (l.start, l.end, *mip));
    let mut out: Vec<SubresourceRange> = Vec::new();
    for (mip, layers) in pieces {
        match out.last_mut() {
            Some(r)
                if r.base_layer == layers.start
                    && r.base_layer + r.layer_count == layers.end
                    && r.base_mip + r.mip_count == mip =>
            {
                r.mip_count += 1;
            }
            _ => out.push(SubresourceRange {
                base_mip: mip,
                mip_count: 1,
                base_layer: layers.start,
                layer_count: layers.end - layers.start,
            }),
        }
    }
    out.sort();
    out
}

/// Applies the global-barrier rule to the buffer barriers that transfer no ownership.
fn collapse_buffer_barriers(batch: &mut BarrierBatch, rule: GlobalBarrierRule) {
    let plain = |b: &BufferBarrier| b.src_queue_family.is_ignored() && b.dst_queue_family.is_ignored();
    match rule {
        GlobalBarrierRule::Never => {}
        GlobalBarrierRule::AtLeast(n) => {
            let count = batch.buffers.iter().filter(|b| plain(b)).count();
            if count >= n.max(1) {
                let mut global = MemoryBarrier { src: Scope::NONE, dst: Scope::NONE };
                batch.buffers.retain(|b| {
                    if plain(b) {
                        global.src = global.src.union(b.src);
                        global.dst = global.dst.union(b.dst);
                    }
                    !plain(b)
                });
                batch.memory.push(global);
            }
        }
        GlobalBarrierRule::SameScope => {
            let mut scopes: Vec<((Scope, Scope), usize)> = Vec::new();
            for b in batch.buffers.iter().filter(|b| plain(b)) {
                match scopes.iter_mut().find(|(s, _)| *s == (b.src, b.dst)) {
                    Some((_, n)) => *n += 1,
                    None => scopes.push(((b.src, b.dst), 1)),
                }
            }
            for ((src, dst), n) in scopes {
                if n >= 2 {
                    batch.buffers.retain(|b| !(plain(b) && b.src == src && b.dst == dst));
                    batch.memory.push(MemoryBarrier { src, dst });
                }
            }
        }
    }
}
