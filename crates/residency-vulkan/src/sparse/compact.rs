//! Compaction of a sparse tile pool: resident tiles move out of sparsely used heaps into the
//! holes of fuller ones (texels copied, the image's tile rebound on the sparse timeline), so the
//! heaps moved out of go back to the device.

use super::compact_compute::{storage_class, ComputeCopies, ComputeView};
use super::image::{create_carrier, Carrier, CarrierClass};
use super::*;
use crate::poison::PoisonFree;
use crate::resources::buffer::BufferDesc;
use crate::sync::recording::Timestamps;
use residency_core::tiles::{CompactionPlan, TileChange};
use residency_core::usage::BufferUsage;
use std::time::Duration;

/// What one [`SparseTilePool::compact`] pass did.
#[derive(Clone, Copy, Debug, Default, PartialEq, serde::Serialize)]
pub struct CompactStats {
    /// Tiles moved.
    pub moves: u32,
    /// Bytes of the tiles moved (`moves` × tile bytes): copied once heap to heap (`direct`), or
    /// twice through staging.
    pub bytes_moved: u64,
    /// Whether the tiles were copied heap to heap (one copy each, through carrier images that
    /// alias the old and the new memory: needs `sparseResidencyAliased`), not through staging.
    pub direct: bool,
    /// Which way the tiles were copied: by the compute shader, by `vkCmdCopyImage` between
    /// carriers, both (some classes each way), or through staging.
    pub path: CompactPath,
    /// Tiles copied by the compute shader (heap to heap, storage carriers).
    pub compute_tiles: u32,
    /// Compute dispatches recorded: one per storage carrier pair (class of 4-, 8- or 16-byte
    /// texels or blocks), whatever the number of tiles and heaps.
    pub dispatches: u32,
    /// Runs of moves between one pair of heaps whose sources and destinations are each
    /// consecutive tiles, of one image class ([`CompactionPlan::runs`]): what a copy of raw
    /// memory could carry as one region. The direct path's regions do not depend on them (its
    /// carrier pairs any tiles); its bind entries merge runs of each side.
    pub runs: u32,
    /// Copy commands (`vkCmdCopyImage`, or through staging buffer↔image copies) recorded;
    /// compute copies are [`dispatches`](Self::dispatches).
    pub copy_commands: u32,
    /// Copy regions of all of them: on the direct path at most two per class of images (the
    /// carrier's full rows, its last partial row), whatever the number of tiles; through
    /// staging two per tile (out and back).
    pub copy_regions: u32,
    /// Pipeline barrier commands recorded, each one barrier set: on the direct path the
    /// carriers' layout transition (before anything is bound to them), one before the copies
    /// and one after, whatever the number of tiles.
    pub barriers: u32,
    /// Bind entries of the carrier images (the direct path): per side (sources, destinations)
    /// one per stretch of consecutive tiles of one heap within a carrier row.
    pub carrier_bind_entries: u64,
    /// Heaps the pass left empty.
    pub heaps_emptied: u32,
    /// Of those, heaps released: their memory is in the device's retire queue, freed once the GPU
    /// work that may use it has completed.
    pub heaps_released: u32,
    /// The rebind's entries and wall time (one `vkQueueBindSparse`, tiles merged into rows and
    /// boxes where their new memory is consecutive).
    pub bind: BindStats,
    /// GPU time of the copies from timestamps written after the barrier before them and before
    /// the barrier after (direct: the heap-to-heap copy, dispatches and copy commands; staging:
    /// image → staging plus staging → image), in milliseconds; `None` when the queue has no
    /// timestamps.
    pub copy_gpu_ms: Option<f64>,
    /// Wall time of the whole pass (planning, both copies with their host waits, the rebind).
    #[serde(serialize_with = "micros")]
    pub wall_time: Duration,
    /// CPU time of planning and accounting alone (no GPU waits).
    #[serde(serialize_with = "micros")]
    pub plan_time: Duration,
}

/// How a compaction pass copies its tiles.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CompactCopy {
    /// Heap to heap, once per tile, where the device can (`sparseResidencyAliased` and carrier
    /// images that alias the tiles' memory with the data consistent): per carrier class a source
    /// carrier image bound to the tiles' old memory and a destination carrier bound to their new
    /// memory slot for slot, copied between one barrier set before and one after. A class of
    /// 2D tiles of 4-, 8- or 16-byte texels or compressed blocks whose storage carriers the
    /// device can make is copied by a compute shader (one dispatch per class; carriers of the
    /// size's unsigned-integer format, or of a compressed format viewed as blocks); any other
    /// class by `vkCmdCopyImage` in at most two regions. Elsewhere through staging.
    #[default]
    Direct,
    /// Heap to heap as [`Direct`](Self::Direct), every class by `vkCmdCopyImage` (no compute
    /// copy): for comparison, and what `Direct` does where no storage carrier fits.
    ImageCopy,
    /// Through a staging buffer, twice per tile (out, rebind, back), each tile its own region:
    /// what every device can do (for comparison, and the fallback of `Direct`).
    Staging,
}

/// Which way a pass copied its tiles ([`CompactStats::path`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CompactPath {
    /// No tile moved.
    #[default]
    None,
    /// Heap to heap, every tile by the compute shader.
    Compute,
    /// Heap to heap, some classes by the compute shader, the others by `vkCmdCopyImage`.
    Mixed,
    /// Heap to heap, every tile by `vkCmdCopyImage` between carriers.
    ImageCopy,
    /// Out to a staging buffer and back.
    Staging,
}

fn micros<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_u64(d.as_micros() as u64)
}

/// One image's part of a pass: (virtual tile, from, to, layer, mip, texel region, staging offset).
pub(crate) struct ImageMoves {
    index: usize,
    tiles: Vec<(TileIndex, PhysicalTile, PhysicalTile, u32, u32, TexelRegion, u64)>,
}

impl ImageMoves {
    /// The image's index in the pass.
    pub(crate) fn index(&self) -> usize {
        self.index
    }

    /// Its moves as (virtual tile, from, to).
    pub(crate) fn remap(&self) -> Vec<(TileIndex, PhysicalTile, PhysicalTile)> {
        self.tiles.iter().map(|&(t, from, to, ..)| (t, from, to)).collect()
    }
}

/// Who keeps a compaction's accounting — the tile pool's and the images' page tables: a
/// [`SparseTilePool`] for its own images, a streaming manager for a streamer's. The pass
/// ([`compact_pass`]) copies and rebinds in between.
pub(crate) trait CompactionOwner {
    /// Image `index` of the pass.
    fn image(&self, index: usize) -> &SparseImage;
    /// Applies `plan` to the pool and `moves` to the page tables; returns each image's changes
    /// (the binds at the new places), in the order of `moves`. On an error nothing changed.
    fn apply(
        &mut self,
        plan: &CompactionPlan,
        moves: &[ImageMoves],
    ) -> Result<Vec<ResidencyChanges>, SparseError>;
    /// Undoes `apply` of `plan` and `moves`.
    fn undo(&mut self, plan: &CompactionPlan, moves: &[ImageMoves]);
    /// Releases those of `heaps` left empty from the pool; returns them.
    fn trim(&mut self, heaps: &[HeapIndex]) -> Vec<HeapIndex>;
}

/// [`SparseTilePool::compact`]'s owner: the pool's accounting and the images' own residency.
struct PoolOwner<'a, 'b> {
    pool: &'a mut TilePool,
    images: &'a mut [&'b mut SparseImage],
}

impl CompactionOwner for PoolOwner<'_, '_> {
    fn image(&self, index: usize) -> &SparseImage {
        self.images[index]
    }

    fn apply(
        &mut self,
        plan: &CompactionPlan,
        moves: &[ImageMoves],
    ) -> Result<Vec<ResidencyChanges>, SparseError> {
        self.pool.apply_compaction(plan).map_err(CommitError::from)?;
        let mut changes = Vec::with_capacity(moves.len());
        for m in moves {
            match self.images[m.index].residency.remap(&m.remap()) {
                Ok(c) => changes.push(c),
                Err(e) => {
                    undo_accounting(self.pool, self.images, plan, &moves[..changes.len()]);
                    return Err(e.into());
                }
            }
        }
        Ok(changes)
    }

    fn undo(&mut self, plan: &CompactionPlan, moves: &[ImageMoves]) {
        undo_accounting(self.pool, self.images, plan, moves);
    }

    fn trim(&mut self, heaps: &[HeapIndex]) -> Vec<HeapIndex> {
        self.pool.trim_heaps(heaps)
    }
}

impl SparseTilePool {
    /// Moves resident tiles of `images` out of the least used heaps into free tiles of fuller
    /// ones, at most `max_tiles` per pass, and releases the heaps that leaves empty (the core's
    /// [`TilePool::plan_compaction`]). Call repeatedly until `moves` is 0.
    ///
    /// Where the device has `sparseResidencyAliased` ([`CompactCopy::Direct`]), the moved tiles
    /// are copied heap to heap, once: per carrier class a source carrier image bound to the
    /// tiles' old memory is copied into a destination carrier bound to their new memory, slot for
    /// slot — by one compute dispatch between storage carriers for 2D tiles of 4-, 8- or 16-byte
    /// texels or compressed blocks (`sparse/compact_compute.rs`; [`CompactStats::path`] says
    /// which way ran), else (per format, type and usage) by one `vkCmdCopyImage` of at most two
    /// regions — between one barrier from every earlier write (every residency submission before, the `waits` and the
    /// renderer's writes they stand for) and one to every later command; the pass waits on the
    /// host for that copy. Then the images' tiles are rebound to their new memory in one
    /// `vkQueueBindSparse` (after the copy, the `waits` and every residency submission; not
    /// waited for on the host). Elsewhere ([`CompactCopy::Staging`]) each moved tile's texels
    /// are copied to a staging buffer, the tiles rebound, and the texels copied back into the
    /// tiles (after the rebind, on the GPU); the pass waits on the host for both copies. Page
    /// tables change only in which physical tile a resident tile names: residency and the
    /// min-LOD map keep their meaning. A released heap's memory is freed through the device's
    /// retire queue after the rebind, and the old physical tiles are reused only by binds after
    /// it. [`CompactStats`] counts the pass's copy commands, regions, barriers and bind entries.
    ///
    /// The staging buffer is device-local memory of the general allocator, the pass's tiles'
    /// texels (at most `max_tiles` × tile bytes), released after the copy back; the carriers
    /// hold no memory of their own and retire once the copy completed.
    ///
    /// `waits` are the renderer's frames in flight that may still write or sample these images
    /// (ends of their submissions, points of its timelines), as for
    /// [`TileHeaps::bind_after`]; a frame count or another device's use is refused. Only tiles
    /// of `images` move: a heap that also holds tiles of an image not given (or a mip tail's) is
    /// never emptied.
    ///
    /// Refused with nothing changed: an image of another pool ([`CommitError::WrongPool`]), an
    /// image with binds queued ([`SparseError::PendingBinds`]: flush first). On an error
    /// (out of memory for the staging buffer or a carrier, a failed creation of the compute
    /// copy's pipeline or views, a failed submit or bind) every tile
    /// stays where it was, page tables and GPU bindings included (heap to heap, the copy wrote
    /// only free tiles); only through staging, a failed undo after a failed copy back (a lost
    /// device) leaves the tiles rebound, with the page tables saying so.
    pub fn compact(
        &self,
        images: &mut [&mut SparseImage],
        max_tiles: u32,
        waits: &[GpuUse],
    ) -> Result<CompactStats, SparseError> {
        self.compact_with(images, max_tiles, waits, CompactCopy::Direct)
    }

    /// [`compact`](Self::compact), copying the tiles the way `copy` says
    /// ([`CompactCopy::Staging`] forces the staging path the default falls back to).
    pub fn compact_with(
        &self,
        images: &mut [&mut SparseImage],
        max_tiles: u32,
        waits: &[GpuUse],
        copy: CompactCopy,
    ) -> Result<CompactStats, SparseError> {
        let started = Instant::now();
        let shared = &*self.shared;
        let device = &*shared.device;
        for w in waits {
            device.wait_info(w).map(drop)?;
        }
        for image in images.iter() {
            if image.residency.pool() != shared.tile_pool || image.external.is_some() {
                return Err(CommitError::WrongPool {
                    pool: shared.name.clone(),
                    given: shared.tile_pool,
                    owner: image.residency.pool(),
                }
                .into());
            }
            if image.has_pending_binds() {
                return Err(SparseError::PendingBinds { name: image.name.clone() });
            }
        }
        let mut pool = shared.pool.locked();
        let mut heaps = shared.heaps.lock();
        // Every heap that holds tiles has memory (as a flush makes sure): destinations are bound.
        let all: Vec<HeapIndex> = pool.heap_indices().collect();
        shared.heaps.ensure(&mut heaps, &pool, &all)?;
        let mut at: HashMap<PhysicalTile, (usize, TileIndex)> = HashMap::new();
        for (i, image) in images.iter().enumerate() {
            at.extend(image.residency.page_table().mapped().map(|(t, p)| (p, (i, t))));
        }
        let plan = pool.plan_compaction(max_tiles, |p, _| at.contains_key(&p));
        let tile_bytes = pool.tile_bytes();
        let mut owner = PoolOwner { pool: &mut pool, images };
        compact_pass(
            &shared.heaps,
            &mut heaps,
            &shared.name,
            &mut owner,
            &plan,
            &at,
            tile_bytes,
            (waits, copy),
            started,
        )
    }
}

impl TileHeaps {
    /// [`SparseTilePool::compact`] for images made for these heaps ([`SparseImage::new_external`])
    /// whose residency `owner` keeps (a streaming manager's pool and page tables): `plan` and
    /// `at` (every moved tile's image index and virtual tile) come from it, and every heap of its
    /// pool has memory ([`TileHeaps::ensure`] before). Checked first, with nothing changed: the
    /// `owner`'s `images` were made for these heaps, the waits are GPU points of this device.
    pub(crate) fn compact_external(
        &mut self,
        owner: &mut dyn CompactionOwner,
        images: usize,
        (plan, at): (&CompactionPlan, &HashMap<PhysicalTile, (usize, TileIndex)>),
        tile_bytes: u64,
        waits: &[GpuUse],
        started: Instant,
    ) -> Result<CompactStats, SparseError> {
        let shared = &*self.shared;
        for w in waits {
            shared.device.wait_info(w).map(drop)?;
        }
        for i in 0..images {
            let image = owner.image(i);
            if image.external != Some(shared.serial) {
                return Err(SparseError::Incompatible {
                    name: image.name.clone(),
                    reason: "compacted through tile heaps it was not made for (SparseImage::new_external)"
                        .into(),
                });
            }
        }
        let mut state = shared.lock();
        compact_pass(
            shared,
            &mut state,
            &shared.name,
            owner,
            plan,
            at,
            tile_bytes,
            (waits, CompactCopy::Direct),
            started,
        )
    }
}

/// One compaction pass over `plan` (its tiles at `at`: image index and virtual tile): the texels
/// to staging, the accounting (`owner`), the rebind, the texels back, the emptied heaps released;
/// on an error everything back where it was (see [`SparseTilePool::compact`]).
#[allow(clippy::too_many_arguments, reason = "the pass's heaps, owner, plan and waits")]
fn compact_pass(
    heaps_shared: &HeapsShared,
    heaps: &mut HeapsState,
    name: &str,
    owner: &mut dyn CompactionOwner,
    plan: &CompactionPlan,
    at: &HashMap<PhysicalTile, (usize, TileIndex)>,
    tile_bytes: u64,
    (waits, copy): (&[GpuUse], CompactCopy),
    started: Instant,
) -> Result<CompactStats, SparseError> {
    let device = &*heaps_shared.device;
    let mut stats = CompactStats::default();
    if plan.moves.is_empty() {
        stats.plan_time = started.elapsed();
        stats.wall_time = stats.plan_time;
        return Ok(stats);
    }
    // Per image, its moves with their texel regions and staging offsets.
    let mut per_image: Vec<ImageMoves> = Vec::new();
    let mut size = 0u64;
    for m in &plan.moves {
        let (index, tile) = at[&m.from];
        let image = owner.image(index);
        let layout = image.layout();
        let coord = layout.tile_coord(tile).expect("mapped tiles are in the layout");
        let region = layout.tile_region(coord).expect("a mapped tile has a region");
        let bytes = image.desc.format.region_bytes(region.extent[0], region.extent[1], region.extent[2]);
        let entry = match per_image.iter_mut().find(|e| e.index == index) {
            Some(e) => e,
            None => {
                per_image.push(ImageMoves { index, tiles: Vec::new() });
                per_image.last_mut().expect("pushed")
            }
        };
        entry.tiles.push((tile, m.from, m.to, coord.layer, coord.mip, region, size));
        size += bytes.next_multiple_of(16);
    }
    stats.moves = plan.moves.len() as u32;
    stats.bytes_moved = u64::from(stats.moves) * tile_bytes;
    let runs = plan.runs(|m| CarrierClass::of(owner.image(at[&m.from].0)));
    stats.runs = runs.len() as u32;
    let mut plan_time = started.elapsed();

    // Heap to heap: with compute copies where the classes allow (`Direct`), then, if a storage
    // carrier could not be made after all, by `vkCmdCopyImage` alone.
    let tries: &[bool] = match copy {
        CompactCopy::Direct => &[true, false],
        CompactCopy::ImageCopy => &[false],
        CompactCopy::Staging => &[],
    };
    for &compute in tries {
        let Some(direct) = DirectCopy::plan(device, &*owner, plan, at, compute) else { break };
        // Carriers that cannot alias the tiles (a driver's choice) leave the next way.
        if let Some(carriers) = direct.create(device, heaps_shared, name, tile_bytes)? {
            return direct_pass(
                heaps_shared,
                heaps,
                name,
                owner,
                plan,
                (&direct, carriers),
                per_image,
                tile_bytes,
                waits,
                (stats, plan_time, started),
            );
        }
        if !direct.carriers.iter().any(|c| c.compute.is_some()) {
            break;
        }
    }

    let staging = device.create_buffer(
        &BufferDesc::new(
            format!("{name} compaction staging"),
            size,
            BufferUsage::COPY_SRC | BufferUsage::COPY_DST,
        )
        .with_intent(residency_core::memory::MemoryIntent::DeviceLocal),
    )?;
    let timestamps = Timestamps::new(device, &format!("{name} compaction timestamps"), 4)?;
    // Each image's copy regions (the same both ways): its moved tiles' texels and their staging
    // offsets.
    let regions: Vec<(usize, Vec<vk::BufferImageCopy>)> = per_image
        .iter()
        .map(|moves| {
            let image = owner.image(moves.index);
            let copies = moves
                .tiles
                .iter()
                .map(|&(_, _, _, layer, mip, region, offset)| {
                    crate::sync::upload::ImageRegion::new(image, mip, region.offset, region.extent)
                        .with_layer(layer)
                        .buffer_image_copy(offset)
                })
                .collect();
            (moves.index, copies)
        })
        .collect();
    // 1. The tiles' texels to staging, after every write before (residency's and the waits').
    let mut recorded = Ok(());
    device.submit_once("tile compaction: copy out", |rec| {
        for w in waits {
            if let Err(e) = rec.wait_for(*w) {
                recorded = Err(e);
            }
        }
        // Timestamps are measurement only: one not written reads as `None`.
        timestamps.cmd_reset(rec, 0..4).ok();
        record_tile_copies(device, rec, &*owner, &regions, staging.raw(), (TileCopy::Out, &timestamps, 0));
    })?;
    // The waits were checked above, so they were all recorded; a refusal would mean the copy
    // ran without them, so it is reported (nothing else changed yet).
    recorded?;

    // 2. The accounting, then the rebind (undone if the rebind fails).
    let accounted = Instant::now();
    let changes: Vec<(usize, ResidencyChanges)> =
        per_image.iter().map(ImageMoves::index).zip(owner.apply(plan, &per_image)?).collect();
    plan_time += accounted.elapsed();
    stats.bind = rebind_or_undo(heaps_shared, heaps, owner, (plan, &per_image), &changes, tile_bytes, waits)?;

    // 3. The texels back into the tiles, now bound to their new memory (the submission waits
    // for the rebind, as every residency submission waits for the binds before it).
    let copied_back = device.submit_once("tile compaction: copy in", |rec| {
        record_tile_copies(device, rec, &*owner, &regions, staging.raw(), (TileCopy::In, &timestamps, 2));
        // Every later command on the queue (the renderer's frames) sees the texels.
        global_barrier(
            rec,
            (vk::PipelineStageFlags2::COPY, vk::AccessFlags2::TRANSFER_WRITE),
            (
                vk::PipelineStageFlags2::ALL_COMMANDS,
                vk::AccessFlags2::MEMORY_READ | vk::AccessFlags2::MEMORY_WRITE,
            ),
        );
    });
    if let Err(e) = copied_back {
        // The old tiles still hold the texels (nothing was freed): bind them again.
        let back: Vec<(usize, ResidencyChanges)> = changes
            .iter()
            .map(|(index, c)| {
                let tiles = per_image
                    .iter()
                    .find(|m| m.index == *index)
                    .map(|m| {
                        m.tiles
                            .iter()
                            .map(|&(tile, from, ..)| TileChange { tile, physical: Some(from) })
                            .collect()
                    })
                    .unwrap_or_default();
                (*index, ResidencyChanges { tiles, tails: Vec::new(), heaps_added: Vec::new(), pool: c.pool })
            })
            .collect();
        let waits = [device.submitted_work()];
        match rebind(device, heaps, &*owner, &back, tile_bytes, &waits) {
            Ok(_) => {
                for (index, c) in &back {
                    heaps_shared.record(heaps, owner.image(*index).key, c);
                }
                owner.undo(plan, &per_image);
            }
            Err(undo) => {
                tracing::error!(pool = %name, error = %undo, "tile compaction: rebinding the old tiles after a failed copy failed; the tiles stay at their new places without their texels");
            }
        }
        return Err(e.into());
    }
    stats.copy_gpu_ms = timestamps.elapsed_ms(0, 1).zip(timestamps.elapsed_ms(2, 3)).map(|(a, b)| a + b);
    stats.copy_commands = 2 * regions.len() as u32;
    stats.copy_regions = 2 * regions.iter().map(|(_, r)| r.len() as u32).sum::<u32>();
    stats.barriers = 3;
    stats.path = CompactPath::Staging;

    stats.plan_time = plan_time;
    Ok(release_emptied(heaps_shared, heaps, name, owner, plan, &per_image, stats, started))
}

/// The end of a pass: the emptied heaps go, their memory retiring after the rebind and after
/// every use declared on the moved images (frames that may sample the old bindings).
#[allow(clippy::too_many_arguments, reason = "the pass's heaps, owner, plan and stats")]
fn release_emptied(
    heaps_shared: &HeapsShared,
    heaps: &mut HeapsState,
    name: &str,
    owner: &mut dyn CompactionOwner,
    plan: &CompactionPlan,
    per_image: &[ImageMoves],
    mut stats: CompactStats,
    started: Instant,
) -> CompactStats {
    for moves in per_image {
        heaps_shared.pending.note(&owner.image(moves.index).life.declared_uses());
    }
    let released = owner.trim(&plan.heaps_emptied);
    heaps_shared.release(heaps, &released);
    stats.heaps_emptied = plan.heaps_emptied.len() as u32;
    stats.heaps_released = released.len() as u32;
    stats.wall_time = started.elapsed();
    tracing::debug!(pool = %name, moves = stats.moves, heaps = stats.heaps_released, direct = stats.direct, "tile pool compacted");
    stats
}

/// A direct pass's copies: per class of images, two carrier images of `cols` × `rows` blocks, the
/// source carrier bound to the moves' sources and the destination carrier to their destinations,
/// slot for slot (move `j` of the class at slot `j`, x first): one `vkCmdCopyImage` region
/// copies every full row of the source carrier to the destination's, a second the last, partial
/// row, whatever the moves' heaps. The binds merge slots whose memory is consecutive (runs of tiles
/// in one heap) into one entry per row.
struct DirectCopy {
    carriers: Vec<CarrierLayout>,
}

/// A class's two carriers: the source carrier (bound to the moves' old memory) and the
/// destination carrier (to their new memory); copying between two images, not within one.
struct CarrierPair<'a> {
    src: Carrier<'a>,
    dst: Carrier<'a>,
}

/// One class's carriers' layout: its class, `cols` blocks a row, `rows` rows (each carrier), and
/// its moves (source, destination) in slot order.
struct CarrierLayout {
    class: CarrierClass,
    /// The storage view a compute copy uses; `None`: `vkCmdCopyImage`.
    compute: Option<ComputeView>,
    cols: u32,
    rows: u32,
    moves: Vec<(PhysicalTile, PhysicalTile)>,
}

impl DirectCopy {
    /// Lays the plan's moves out on carriers, a pair per class, in the plan's order (with
    /// `compute`, a storage class for the images that have one: [`storage_class`]); `None`
    /// without `sparseResidencyAliased` or when a class's tiles do not fit one image of the
    /// device's largest extent.
    fn plan(
        device: &Device,
        owner: &dyn CompactionOwner,
        plan: &CompactionPlan,
        at: &HashMap<PhysicalTile, (usize, TileIndex)>,
        compute: bool,
    ) -> Option<DirectCopy> {
        if !device.features().sparse_residency_aliased {
            return None;
        }
        let mut carriers: Vec<CarrierLayout> = Vec::new();
        // Per image of the pass, its carrier class (looked up once: the storage class queries
        // the device).
        let mut classes: HashMap<usize, (CarrierClass, Option<ComputeView>)> = HashMap::new();
        for m in &plan.moves {
            let index = at[&m.from].0;
            let (class, view) = *classes.entry(index).or_insert_with(|| {
                let image = owner.image(index);
                match storage_class(device, image).filter(|_| compute) {
                    Some((class, view)) => (class, Some(view)),
                    None => (CarrierClass::of(image), None),
                }
            });
            match carriers.iter_mut().find(|c| c.class == class && c.compute == view) {
                Some(c) => c.moves.push((m.from, m.to)),
                None => carriers.push(CarrierLayout {
                    class,
                    compute: view,
                    cols: 0,
                    rows: 0,
                    moves: vec![(m.from, m.to)],
                }),
            }
        }
        let limits = device.limits();
        for carrier in &mut carriers {
            let class = carrier.class;
            let max = if class.image_type == vk::ImageType::TYPE_3D {
                limits.max_image_dimension3_d
            } else {
                limits.max_image_dimension2_d
            };
            let n = carrier.moves.len() as u32;
            let cols = (max / class.tile[0]).min(n);
            if cols == 0 || class.tile[2] > max {
                return None;
            }
            let rows = n.div_ceil(cols);
            if u64::from(rows) * u64::from(class.tile[1]) > u64::from(max) {
                return None;
            }
            (carrier.cols, carrier.rows) = (cols, rows);
        }
        Some(DirectCopy { carriers })
    }

    /// Creates the carriers; `Ok(None)` when the device cannot make one that aliases its
    /// class's tiles (those made so far retire).
    fn create<'d>(
        &self,
        device: &'d Device,
        heaps_shared: &HeapsShared,
        name: &str,
        tile_bytes: u64,
    ) -> Result<Option<Vec<CarrierPair<'d>>>, SparseError> {
        let mut carriers = Vec::with_capacity(self.carriers.len());
        for (i, layout) in self.carriers.iter().enumerate() {
            let mut pair = Vec::with_capacity(2);
            for side in ["source", "destination"] {
                match create_carrier(
                    device,
                    &format!("{name} compaction {side} carrier {i}"),
                    layout.class,
                    [layout.cols, layout.rows],
                    heaps_shared.memory_type,
                    tile_bytes,
                )? {
                    Some(c) => pair.push(c),
                    None => return Ok(None),
                }
            }
            let dst = pair.pop().expect("two carriers");
            let src = pair.pop().expect("two carriers");
            carriers.push(CarrierPair { src, dst });
        }
        Ok(Some(carriers))
    }
}

impl CarrierLayout {
    /// Block coordinates of slot `slot` (in either carrier).
    fn block(&self, slot: u32) -> [u32; 2] {
        [slot % self.cols, slot / self.cols]
    }

    /// Texel offset of block `b`.
    fn offset(&self, b: [u32; 2]) -> vk::Offset3D {
        vk::Offset3D { x: (b[0] * self.class.tile[0]) as i32, y: (b[1] * self.class.tile[1]) as i32, z: 0 }
    }

    /// Texel extent of `w × h` blocks.
    fn extent(&self, w: u32, h: u32) -> vk::Extent3D {
        vk::Extent3D {
            width: w * self.class.tile[0],
            height: h * self.class.tile[1],
            depth: self.class.tile[2],
        }
    }

    /// A carrier's binds: the source carrier's to the moves' sources (`destination` false), the
    /// destination carrier's to their destinations, slots whose memory is consecutive in one
    /// heap merged into one entry per row (a row of blocks takes consecutive memory, x first).
    fn binds(&self, tile_bytes: u64, destination: bool) -> residency_core::tiles::BindPlan {
        let mut plan = residency_core::tiles::BindPlan::default();
        {
            // (first slot, tiles, first physical tile)
            let mut entries: Vec<(u32, u32, PhysicalTile)> = Vec::new();
            for (j, &(from, to)) in self.moves.iter().enumerate() {
                let (slot, p) = (j as u32, if destination { to } else { from });
                if let Some(last) = entries.last_mut() {
                    let follows = last.2.heap == p.heap
                        && u64::from(last.2.tile) + u64::from(last.1) == u64::from(p.tile);
                    if follows && slot % self.cols != 0 {
                        last.1 += 1;
                        continue;
                    }
                }
                entries.push((slot, 1, p));
            }
            for (slot, len, p) in entries {
                let b = self.block(slot);
                let (o, e) = (self.offset(b), self.extent(len, 1));
                plan.image_binds.push(residency_core::tiles::ImageBind {
                    layer: 0,
                    mip: 0,
                    offset: [o.x as u32, o.y as u32, 0],
                    extent: [e.width, e.height, e.depth],
                    tiles: residency_core::tiles::TileRange {
                        start: [b[0], b[1], 0],
                        end: [b[0] + len, b[1] + 1, 1],
                    },
                    memory: Some(residency_core::tiles::BindMemory {
                        heap: p.heap,
                        offset: u64::from(p.tile) * tile_bytes,
                    }),
                });
            }
        }
        plan
    }

    /// The copy regions from the source carrier to the destination carrier (the same blocks):
    /// its full rows in one, the last, partial row in another.
    fn regions(&self) -> Vec<vk::ImageCopy> {
        let layers = vk::ImageSubresourceLayers {
            aspect_mask: self.class.aspect,
            mip_level: 0,
            base_array_layer: 0,
            layer_count: 1,
        };
        let n = self.moves.len() as u32;
        let (full, rest) = (n / self.cols, n % self.cols);
        let region = |row: u32, w: u32, h: u32| vk::ImageCopy {
            src_subresource: layers,
            src_offset: self.offset([0, row]),
            dst_subresource: layers,
            dst_offset: self.offset([0, row]),
            extent: self.extent(w, h),
        };
        let mut regions = Vec::with_capacity(2);
        if full > 0 {
            regions.push(region(0, self.cols, full));
        }
        if rest > 0 {
            regions.push(region(full, rest, 1));
        }
        regions
    }
}

/// The direct pass: the accounting first (a plan it refuses changes nothing and writes nothing),
/// then the copy heap to heap ([`copy_direct`]; undone on an error: it wrote only the plan's
/// destinations, free tiles until the accounting), then the rebind of the images at their new
/// places, as through staging but with no copy back.
#[allow(clippy::too_many_arguments, reason = "the pass's heaps, owner, plan, carriers and stats")]
fn direct_pass(
    heaps_shared: &HeapsShared,
    heaps: &mut HeapsState,
    name: &str,
    owner: &mut dyn CompactionOwner,
    plan: &CompactionPlan,
    (direct, carriers): (&DirectCopy, Vec<CarrierPair<'_>>),
    per_image: Vec<ImageMoves>,
    tile_bytes: u64,
    waits: &[GpuUse],
    (mut stats, mut plan_time, started): (CompactStats, Duration, Instant),
) -> Result<CompactStats, SparseError> {
    // 1. The accounting: checked (every source allocated to its owner, every destination free
    // and named once) before the GPU writes anything.
    let accounted = Instant::now();
    let changes: Vec<(usize, ResidencyChanges)> =
        per_image.iter().map(ImageMoves::index).zip(owner.apply(plan, &per_image)?).collect();
    plan_time += accounted.elapsed();
    // 2. The copy.
    if let Err(e) = copy_direct(heaps_shared, heaps, name, (direct, carriers), tile_bytes, waits, &mut stats)
    {
        owner.undo(plan, &per_image);
        return Err(e);
    }
    // 3. The rebind (undone if it fails: the copy wrote only free tiles, so nothing else changed).
    stats.bind = rebind_or_undo(heaps_shared, heaps, owner, (plan, &per_image), &changes, tile_bytes, waits)?;
    stats.plan_time = plan_time;
    Ok(release_emptied(heaps_shared, heaps, name, owner, plan, &per_image, stats, started))
}

/// A direct pass's copy: the carriers to `GENERAL` (nothing bound yet, so nothing discarded),
/// bound to the moves' old and new memory in one `vkQueueBindSparse`, one dispatch (storage
/// carriers: [`ComputeCopies`]) or one copy per carrier pair after the waits (one barrier before,
/// one after), waited for on the host; the carriers then retire. Counts go into `stats`.
fn copy_direct(
    heaps_shared: &HeapsShared,
    heaps: &HeapsState,
    name: &str,
    (direct, carriers): (&DirectCopy, Vec<CarrierPair<'_>>),
    tile_bytes: u64,
    waits: &[GpuUse],
    stats: &mut CompactStats,
) -> Result<(), SparseError> {
    let device = &*heaps_shared.device;
    stats.direct = true;
    // What the copies do, as stages and accesses: a dispatch's storage reads and writes, a copy
    // command's transfers.
    let access = |layout: &CarrierLayout| match layout.compute {
        Some(_) => (
            vk::PipelineStageFlags2::COMPUTE_SHADER,
            vk::AccessFlags2::SHADER_STORAGE_READ | vk::AccessFlags2::SHADER_STORAGE_WRITE,
            vk::AccessFlags2::SHADER_STORAGE_WRITE,
        ),
        None => (
            vk::PipelineStageFlags2::COPY,
            vk::AccessFlags2::TRANSFER_READ | vk::AccessFlags2::TRANSFER_WRITE,
            vk::AccessFlags2::TRANSFER_WRITE,
        ),
    };
    let (stages, accesses, writes) = direct.carriers.iter().map(access).fold(
        (vk::PipelineStageFlags2::NONE, vk::AccessFlags2::NONE, vk::AccessFlags2::NONE),
        |(s, a, w), (s2, a2, w2)| (s | s2, a | a2, w | w2),
    );
    let timestamps = Timestamps::new(device, &format!("{name} compaction timestamps"), 2)?;
    // The carriers to GENERAL while nothing is bound to them (a transition touches no memory).
    let to_general: Vec<vk::ImageMemoryBarrier2<'_>> = carriers
        .iter()
        .zip(&direct.carriers)
        .flat_map(|(pair, layout)| [(&pair.src, layout), (&pair.dst, layout)])
        .map(|(c, layout)| {
            let (stage, access, _) = access(layout);
            vk::ImageMemoryBarrier2::default()
                .src_stage_mask(vk::PipelineStageFlags2::NONE)
                .dst_stage_mask(stage)
                .dst_access_mask(access)
                .old_layout(vk::ImageLayout::UNDEFINED)
                .new_layout(vk::ImageLayout::GENERAL)
                .image(c.raw)
                .subresource_range(vk::ImageSubresourceRange {
                    aspect_mask: layout.class.aspect,
                    base_mip_level: 0,
                    level_count: 1,
                    base_array_layer: 0,
                    layer_count: 1,
                })
        })
        .collect();
    // The compute copies' pipelines, sets and views (before anything is submitted: a failure
    // here leaves nothing to undo on the GPU).
    let pairs: Vec<(vk::Image, vk::Image, Option<ComputeView>)> = carriers
        .iter()
        .zip(&direct.carriers)
        .map(|(pair, layout)| (pair.src.raw, pair.dst.raw, layout.compute))
        .collect();
    let compute = ComputeCopies::new(device, name, &pairs)?;
    device.submit_once("tile compaction: carriers to GENERAL", |rec| {
        // SAFETY: `rec` is recording on this device outside a render pass; the carriers are live
        // (retired only after the work submitted when they are dropped) and the ranges cover
        // their one mip and layer.
        unsafe {
            device.raw().cmd_pipeline_barrier2(
                rec.raw(),
                &vk::DependencyInfo::default().image_memory_barriers(&to_general),
            )
        };
    })?;
    // Their binds, in one submission: the sources (still bound to their images too: aliased
    // reads of a compatible format and one block extent read the same) and the destinations
    // (free tiles).
    let plans: Vec<_> = carriers
        .iter()
        .zip(&direct.carriers)
        .flat_map(|(pair, layout)| {
            [
                (pair.src.raw, layout.class.aspect, layout.binds(tile_bytes, false)),
                (pair.dst.raw, layout.class.aspect, layout.binds(tile_bytes, true)),
            ]
        })
        .collect();
    let (carrier_binds, _) = submit_plans(device, &plans, heaps, tile_bytes, &[], false)?;
    stats.carrier_bind_entries = carrier_binds.bind_entries;
    // One dispatch or copy per class, source carrier to destination carrier, after every write
    // before (residency's, the binds', the waits'): one barrier before all of them, one after.
    let regions: Vec<Vec<vk::ImageCopy>> = direct
        .carriers
        .iter()
        .map(|layout| if layout.compute.is_some() { Vec::new() } else { layout.regions() })
        .collect();
    let mut recorded = Ok(());
    let mut dispatches = 0;
    device.submit_once("tile compaction: copy", |rec| {
        for w in waits {
            if let Err(e) = rec.wait_for(*w) {
                recorded = Err(e);
            }
        }
        // Timestamps are measurement only: one not written reads as `None`. They bracket the
        // copies alone (after the barrier before them, before the barrier after), as the bench's
        // plain copy is bracketed.
        timestamps.cmd_reset(rec, 0..2).ok();
        global_barrier(
            rec,
            (vk::PipelineStageFlags2::ALL_COMMANDS, vk::AccessFlags2::MEMORY_WRITE),
            (stages, accesses),
        );
        timestamps.cmd_write(rec, 0).ok();
        for (i, ((pair, layout), regions)) in carriers.iter().zip(&direct.carriers).zip(&regions).enumerate()
        {
            if let Some(view) = layout.compute {
                // Every texel of the first `moves` slots, read through the source carrier's
                // storage view and written through the destination's (both in GENERAL, the
                // barrier above after their transition and binds); sources and destinations do
                // not overlap in memory (see below).
                dispatches += compute.record(rec, i, (view.tile, layout.cols, layout.moves.len() as u32));
                continue;
            }
            // SAFETY: `rec` is recording on this device outside a render pass; both carriers are
            // live and in GENERAL (the transition above completed: the host waited for it), the
            // regions lie in both and cover only bound blocks (the first `moves` slots of each),
            // and the sources (the source carrier's memory) and destinations (the destination
            // carrier's) do not overlap in memory: the accounting checked that every destination
            // was free and every source allocated, so no tile is both.
            unsafe {
                device.raw().cmd_copy_image(
                    rec.raw(),
                    pair.src.raw,
                    vk::ImageLayout::GENERAL,
                    pair.dst.raw,
                    vk::ImageLayout::GENERAL,
                    regions,
                )
            };
        }
        timestamps.cmd_write(rec, 1).ok();
        // Every later command on the queue (the renderer's frames, through the images rebound
        // to these tiles) sees the texels.
        global_barrier(
            rec,
            (stages, writes),
            (
                vk::PipelineStageFlags2::ALL_COMMANDS,
                vk::AccessFlags2::MEMORY_READ | vk::AccessFlags2::MEMORY_WRITE,
            ),
        );
    })?;
    recorded?;
    stats.dispatches = dispatches;
    stats.copy_commands = regions.iter().filter(|r| !r.is_empty()).count() as u32;
    stats.compute_tiles =
        direct.carriers.iter().filter(|c| c.compute.is_some()).map(|c| c.moves.len() as u32).sum();
    stats.path = match (stats.compute_tiles, stats.copy_commands) {
        (0, _) => CompactPath::ImageCopy,
        (_, 0) => CompactPath::Compute,
        _ => CompactPath::Mixed,
    };
    // The host waited for the copy, and the copy for the carriers' binds: the views, then the
    // carriers retire now, before any heap they alias is released.
    drop(compute);
    drop(carriers);
    stats.copy_regions = regions.iter().map(|r| r.len() as u32).sum();
    stats.barriers = 3;
    stats.copy_gpu_ms = timestamps.elapsed_ms(0, 1);
    Ok(())
}

/// One global memory barrier from `src` to `dst`.
/// Which way [`record_tile_copies`] copies.
#[derive(Clone, Copy)]
enum TileCopy {
    /// The tiles' texels into the staging buffer.
    Out,
    /// The staging buffer back into the tiles.
    In,
}

/// Records a barrier from every earlier write, then each image's copy `regions` between its tiles
/// and `staging`, the way `direction` says, bracketed by timestamps `at` and `at + 1` (the copies
/// alone, not the barrier).
fn record_tile_copies(
    device: &Device,
    rec: &mut crate::sync::recording::Recording<'_>,
    owner: &dyn CompactionOwner,
    regions: &[(usize, Vec<vk::BufferImageCopy>)],
    staging: vk::Buffer,
    (direction, timestamps, at): (TileCopy, &Timestamps, u32),
) {
    global_barrier(
        rec,
        (vk::PipelineStageFlags2::ALL_COMMANDS, vk::AccessFlags2::MEMORY_WRITE),
        (vk::PipelineStageFlags2::COPY, vk::AccessFlags2::TRANSFER_READ | vk::AccessFlags2::TRANSFER_WRITE),
    );
    // Measurement only: a timestamp not written reads as `None`.
    timestamps.cmd_write(rec, at).ok();
    for (index, copies) in regions {
        let image = owner.image(*index);
        // SAFETY: `rec` is recording on this device outside a render pass; the image (a sparse
        // image in GENERAL for life, owned by the pass's owner for the whole pass) and the
        // staging buffer (alive until the pass waited for both copies) are live, and every region
        // lies in both (a resident tile's texels; staging offsets laid out by the pass).
        unsafe {
            match direction {
                TileCopy::Out => device.raw().cmd_copy_image_to_buffer(
                    rec.raw(),
                    image.raw,
                    vk::ImageLayout::GENERAL,
                    staging,
                    copies,
                ),
                TileCopy::In => device.raw().cmd_copy_buffer_to_image(
                    rec.raw(),
                    staging,
                    image.raw,
                    vk::ImageLayout::GENERAL,
                    copies,
                ),
            }
        };
    }
    timestamps.cmd_write(rec, at + 1).ok();
}

fn global_barrier(
    rec: &mut crate::sync::recording::Recording<'_>,
    src: (vk::PipelineStageFlags2, vk::AccessFlags2),
    dst: (vk::PipelineStageFlags2, vk::AccessFlags2),
) {
    let barrier = [vk::MemoryBarrier2::default()
        .src_stage_mask(src.0)
        .src_access_mask(src.1)
        .dst_stage_mask(dst.0)
        .dst_access_mask(dst.1)];
    // SAFETY: `rec` is recording on its device outside a render pass; the stages and accesses are
    // core ones the universal queue supports and the barrier lives for the call.
    unsafe {
        rec.device()
            .raw()
            .cmd_pipeline_barrier2(rec.raw(), &vk::DependencyInfo::default().memory_barriers(&barrier))
    };
}

/// The pass's rebind ([`rebind`] after `waits` and the work submitted so far), its changes
/// recorded on the heaps; on an error the accounting of `plan` is undone and nothing was submitted.
fn rebind_or_undo(
    heaps_shared: &HeapsShared,
    heaps: &mut HeapsState,
    owner: &mut dyn CompactionOwner,
    (plan, per_image): (&CompactionPlan, &[ImageMoves]),
    changes: &[(usize, ResidencyChanges)],
    tile_bytes: u64,
    waits: &[GpuUse],
) -> Result<BindStats, SparseError> {
    let device = &*heaps_shared.device;
    let mut bind_waits = waits.to_vec();
    bind_waits.push(device.submitted_work());
    let bind = match rebind(device, heaps, &*owner, changes, tile_bytes, &bind_waits) {
        Ok(bind) => bind,
        Err(e) => {
            owner.undo(plan, per_image);
            return Err(e);
        }
    };
    for (index, c) in changes {
        heaps_shared.record(heaps, owner.image(*index).key, c);
    }
    Ok(bind)
}

/// Binds `changes` (per image index) in one `vkQueueBindSparse` after `waits`, on the sparse
/// timeline; an error means nothing was submitted.
fn rebind(
    device: &Device,
    heaps: &HeapsState,
    owner: &dyn CompactionOwner,
    changes: &[(usize, ResidencyChanges)],
    tile_bytes: u64,
    waits: &[GpuUse],
) -> Result<BindStats, SparseError> {
    let mut plans = Vec::with_capacity(changes.len());
    for (index, c) in changes {
        let image = owner.image(*index);
        plans.push((
            image.raw,
            aspect(image.desc.format),
            plan_binds(image.layout(), &c.tiles, &[], BindPlanOptions::default())?,
        ));
    }
    // No host wait: the copy back waits for the bind on the GPU (every residency submission
    // waits for the binds before it), and an error here means nothing was submitted.
    let (stats, _) = submit_plans(device, &plans, heaps, tile_bytes, waits, false)?;
    Ok(stats)
}

/// Puts the page tables of `done` and the pool back as they were before `plan`.
fn undo_accounting(
    pool: &mut TilePool,
    images: &mut [&mut SparseImage],
    plan: &CompactionPlan,
    done: &[ImageMoves],
) {
    for moves in done {
        let back: Vec<_> = moves.tiles.iter().map(|&(t, from, to, ..)| (t, to, from)).collect();
        if let Err(e) = images[moves.index].residency.remap(&back) {
            tracing::error!(image = %images[moves.index].name, error = %e, "undoing a compaction's page-table change");
        }
    }
    if let Err(e) = pool.revert_compaction(plan) {
        tracing::error!(error = %e, "undoing a compaction's pool change");
    }
}
