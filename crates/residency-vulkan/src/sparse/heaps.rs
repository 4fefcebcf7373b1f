//! Tile heaps: the `VkDeviceMemory` behind sparse tiles, and which of it the submitted binds left
//! bound (memory is freed only when nothing is bound to it and the GPU is done with it).

use super::*;
use crate::poison::PoisonFree;

/// One heap's memory, and the serial its bound tiles are counted under (the pool may reuse a heap
/// index while the memory it named before is still bound).
#[derive(Debug)]
pub(super) struct Heap {
    pub(super) block: MemoryBlock,
    pub(super) serial: u64,
}

/// A tile, or a whole mip tail, of one image as the GPU has it bound.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(super) enum Bound {
    Tile(u32),
    Tail(u32),
}

/// The heaps of a [`TileHeaps`] or a [`SparseTilePool`] and what the GPU has bound in them.
#[derive(Debug, Default)]
pub(super) struct HeapsState {
    pub(super) heaps: Vec<Option<Heap>>,
    pub(super) pool: Option<PoolId>,
    /// Per image (its key): the heap serials of every tile and tail the GPU has bound (one per
    /// physical tile), as the last submitted binds left them (freed memory waits for those binds on the sparse
    /// timeline).
    pub(super) bound: HashMap<u64, HashMap<Bound, Vec<u64>>>,
    /// Per heap serial: how many tiles the GPU has bound in it.
    pub(super) counts: HashMap<u64, u64>,
    /// Heaps the pool released while the GPU still had tiles of an image bound in them (an unbind
    /// not flushed yet, an image not destroyed yet): freed when the last of those goes.
    pub(super) released: Vec<Heap>,
    pub(super) next_serial: u64,
    /// The owners (`ImageId`s) of the live images made for these heaps
    /// ([`SparseImage::new_external`]), with their keys (0 while one is being created): one
    /// image per owner, so that the pool's owner of a tile names one image.
    pub(super) external_owners: HashMap<u32, u64>,
    /// The compaction compute copy's pipelines, made on the first compute pass.
    pub(super) copy_pipelines: Option<super::compact_compute::CopyPipelines>,
}

impl HeapsState {
    pub(super) fn memory(&self, heap: HeapIndex) -> vk::DeviceMemory {
        self.heaps
            .get(heap.0 as usize)
            .and_then(Option::as_ref)
            .map(|h| h.block.memory)
            .expect("heaps exist for every bound tile")
    }

    pub(super) fn serial(&self, tile: PhysicalTile) -> u64 {
        self.heaps
            .get(tile.heap.0 as usize)
            .and_then(Option::as_ref)
            .map(|h| h.serial)
            .expect("heaps exist for every bound tile")
    }

    /// `image`'s `key` is now bound to the heaps `serials` (`None`: unbound).
    pub(super) fn rebind(&mut self, image: u64, key: Bound, serials: Option<Vec<u64>>) {
        let map = self.bound.entry(image).or_default();
        let old = map.remove(&key);
        if let Some(serials) = serials {
            for &s in &serials {
                *self.counts.entry(s).or_default() += 1;
            }
            map.insert(key, serials);
        }
        if map.is_empty() {
            self.bound.remove(&image);
        }
        for s in old.into_iter().flatten() {
            self.unbound(s);
        }
    }

    pub(super) fn unbound(&mut self, serial: u64) {
        if let Some(count) = self.counts.get_mut(&serial) {
            *count -= 1;
            if *count == 0 {
                self.counts.remove(&serial);
            }
        }
    }

    /// Released heaps nothing is bound in any more.
    pub(super) fn unbound_released(&mut self) -> Vec<Heap> {
        let (free, kept) = std::mem::take(&mut self.released)
            .into_iter()
            .partition(|h: &Heap| !self.counts.contains_key(&h.serial));
        self.released = kept;
        free
    }
}

/// The memory of a set of tile heaps, shared by their owner ([`TileHeaps`], [`SparseTilePool`]) and
/// the images bound to them, which keep it alive: memory bound to a live sparse image is never
/// freed.
pub(crate) struct HeapsShared {
    pub(super) device: Arc<Device>,
    pub(super) name: String,
    pub(super) memory_type: u32,
    /// Marks the images made for these heaps ([`SparseImage::new_external`]).
    pub(super) serial: u64,
    pub(super) state: Mutex<HeapsState>,
    /// Uses declared on the heaps (or their pool) and the uses of deferred images bound to them.
    pub(super) pending: PendingUses,
    /// Live images whose parent these heaps are.
    pub(super) images: AtomicU64,
}

impl std::fmt::Debug for HeapsShared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = self.lock();
        f.debug_struct("TileHeaps")
            .field("name", &self.name)
            .field("memory_type", &self.memory_type)
            .field("heaps", &state.heaps.iter().flatten().count())
            .field("released_but_bound", &state.released.len())
            .finish()
    }
}

pub(super) static NEXT_HEAPS: AtomicU64 = AtomicU64::new(1);

impl HeapsShared {
    pub(super) fn new(device: Arc<Device>, name: &str) -> Result<HeapsShared, SparseError> {
        if device.sparse_queue().is_none() || !device.features().sparse_residency_image_2d {
            return Err(SparseError::NoSparseQueue);
        }
        // Sparse images of every format accept the same memory types on the devices we know; the
        // RGBA8 probe's types stand for all, and each image is checked when it is created.
        let bits = device
            .profile()
            .formats
            .iter()
            .find_map(|f| f.sparse_2d_probe.map(|p| p.requirements.memory_type_bits))
            .ok_or(SparseError::NoSparseQueue)?;
        let memory_type =
            *memory_type_candidates(&device.memory_properties().types, bits, MemoryIntent::DeviceLocal)
                .first()
                .ok_or_else(|| MemoryError::NoSuitableMemoryType {
                    name: name.to_owned(),
                    allowed_bits: bits,
                    intent: MemoryIntent::DeviceLocal,
                })?;
        Ok(HeapsShared {
            device,
            name: name.to_owned(),
            memory_type,
            serial: NEXT_HEAPS.fetch_add(1, Ordering::Relaxed),
            state: Mutex::new(HeapsState::default()),
            pending: PendingUses::default(),
            images: AtomicU64::new(0),
        })
    }

    pub(super) fn lock(&self) -> std::sync::MutexGuard<'_, HeapsState> {
        self.state.locked()
    }

    /// Whether these heaps may serve `pool`: the pool they serve, or any while they serve none.
    pub(super) fn check_serves(state: &HeapsState, pool: &TilePool) -> Result<(), CommitError> {
        match state.pool {
            Some(owner) if owner != pool.id() => {
                Err(CommitError::WrongPool { pool: pool.desc().name.clone(), given: pool.id(), owner })
            }
            _ => Ok(()),
        }
    }

    pub(super) fn ensure(
        &self,
        state: &mut HeapsState,
        pool: &TilePool,
        heaps: &[HeapIndex],
    ) -> Result<u64, SparseError> {
        Self::check_serves(state, pool)?;
        // The pool's description is the caller's plain data: its heaps must be allocations the
        // device can make, sized without wrapping.
        pool.desc().validate(&self.device.profile().limits)?;
        if let Some(missing) = heaps.iter().find(|&&h| pool.heap_tiles(h).is_none()) {
            return Err(CommitError::Pool(PoolError::UnknownHeap(missing.0)).into());
        }
        state.pool = Some(pool.id());
        let mut added = 0;
        for &heap in heaps {
            let index = heap.0 as usize;
            if state.heaps.len() <= index {
                state.heaps.resize_with(index + 1, || None);
            }
            if state.heaps[index].is_some() {
                continue;
            }
            let size = u64::from(pool.heap_tiles(heap).expect("checked live")) * pool.tile_bytes();
            let name = format!("{} heap {}", pool.desc().name, heap.0);
            let desc = RawMemoryDesc {
                name: &name,
                size,
                type_index: self.memory_type,
                allow_over_budget: false,
                dedicated: None,
                priority: crate::device::blocks::DEFAULT_PRIORITY,
            };
            let block = MemoryBlock::new(&self.device, desc, 1)?;
            state.next_serial += 1;
            state.heaps[index] = Some(Heap { block, serial: state.next_serial });
            added += 1;
        }
        Ok(added)
    }

    /// The pool released `heaps`: their memory retires after the work residency submitted so far
    /// and the uses declared, once no image has tiles bound in it.
    pub(super) fn release(&self, state: &mut HeapsState, heaps: &[HeapIndex]) {
        for heap in heaps {
            if let Some(heap) = state.heaps.get_mut(heap.0 as usize).and_then(Option::take) {
                if state.counts.contains_key(&heap.serial) {
                    state.released.push(heap);
                } else {
                    self.retire(heap);
                }
            }
        }
    }

    /// Binds of `image` completed: the GPU has `changes` bound.
    pub(super) fn record(&self, state: &mut HeapsState, image: u64, changes: &ResidencyChanges) {
        for change in &changes.tiles {
            let serials = change.physical.map(|p| vec![state.serial(p)]);
            state.rebind(image, Bound::Tile(change.tile.0), serials);
        }
        for change in &changes.tails {
            let serials = change.physical.as_ref().map(|p| p.iter().map(|&t| state.serial(t)).collect());
            state.rebind(image, Bound::Tail(change.tail), serials);
        }
        for heap in state.unbound_released() {
            self.retire(heap);
        }
    }

    /// `image` was destroyed: nothing of it is bound any more, and its owner id is free again.
    pub(super) fn forget(&self, image: u64) {
        let mut state = self.lock();
        state.external_owners.retain(|_, key| *key != image);
        for serial in state.bound.remove(&image).into_iter().flat_map(HashMap::into_values).flatten() {
            state.unbound(serial);
        }
        for heap in state.unbound_released() {
            self.retire(heap);
        }
    }

    pub(super) fn retire(&self, heap: Heap) {
        self.device.retire(Garbage::Memory(Box::new(heap.block)), self.pending.get());
    }
}

impl Parent for HeapsShared {
    fn note_pending(&self, uses: &LastUses) {
        self.pending.note(uses);
    }

    fn name(&self) -> String {
        self.name.clone()
    }

    fn child_released(&self) {
        self.images.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Drop for HeapsShared {
    fn drop(&mut self) {
        // No image bound to these heaps is alive (each holds them); images still waiting for the
        // GPU retire before this memory, which waits for their uses too.
        let uses = self.pending.take();
        let state = self.state.value_mut();
        let heaps = state.heaps.drain(..).flatten().chain(state.released.drain(..));
        for heap in heaps.collect::<Vec<_>>() {
            self.device.retire(Garbage::Memory(Box::new(heap.block)), uses.clone());
        }
        if let Some(pipelines) = state.copy_pipelines.take() {
            self.device.retire(Garbage::Custom(Box::new(pipelines)), uses);
        }
    }
}

/// The `VkDeviceMemory` behind the heaps of a [`TilePool`]: one allocation per `HeapIndex`, made when
/// the pool adds the heap and released when it releases it. A [`SparseTilePool`] has one for its own
/// pool; streaming keeps one for the streaming manager's pool.
///
/// The heaps serve one pool: the first one given to [`ensure`](Self::ensure) or
/// [`bind`](Self::bind). Any other pool is refused with [`CommitError::WrongPool`], changing
/// nothing: its heap indices would name this pool's memory.
///
/// **Lifetimes.** The images made for these heaps ([`SparseImage::new_external`]) keep their memory
/// alive: dropping the `TileHeaps` first is safe (the memory goes with the last image). A heap's
/// memory is freed only once no image has tiles of it bound on the GPU (as the submitted binds
/// left them; a destroyed image has none) and, through the device's retire queue, after the work
/// residency submitted before its release and the uses declared with
/// [`used_until`](Self::used_until).
pub struct TileHeaps {
    pub(super) shared: Arc<HeapsShared>,
}

impl std::fmt::Debug for TileHeaps {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.shared.fmt(f)
    }
}

impl TileHeaps {
    /// Heap memory for sparse images on `device` (device-local, of a type sparse images accept).
    pub fn new(device: Arc<Device>, name: &str) -> Result<TileHeaps, SparseError> {
        Ok(TileHeaps { shared: Arc::new(HeapsShared::new(device, name)?) })
    }

    /// The device.
    pub fn device(&self) -> &Arc<Device> {
        &self.shared.device
    }

    /// The pool these heaps serve, once one was given.
    pub fn pool(&self) -> Option<PoolId> {
        self.shared.lock().pool
    }

    /// The memory type of the heaps.
    pub fn memory_type(&self) -> u32 {
        self.shared.memory_type
    }

    /// Declares that GPU work the renderer submitted itself uses the heaps' memory (through their
    /// images) until `until`: a heap released or dropped earlier is freed only then. Work residency
    /// submits needs no declaration. A use of another device is refused.
    pub fn used_until(&self, until: GpuUse) -> Result<(), ForeignUse> {
        self.shared.pending.used_until(&self.shared.device, until)
    }

    /// Allocates the memory of `heaps` of `pool` that has none yet; returns how many were made.
    /// `pool` must be the pool these heaps serve (the first call makes it so) and `heaps` live heaps
    /// of it; else a typed error and nothing allocated.
    pub fn ensure(&mut self, pool: &TilePool, heaps: &[HeapIndex]) -> Result<u64, SparseError> {
        let mut state = self.shared.lock();
        self.shared.ensure(&mut state, pool, heaps)
    }

    /// Releases the memory of heaps the pool released. It is freed once no image has tiles of it
    /// bound on the GPU (bind the pool's unbinds first, or drop the images) and the GPU work that
    /// may use it has completed (see the type's lifetimes).
    pub fn release(&mut self, heaps: &[HeapIndex]) {
        let mut state = self.shared.lock();
        self.shared.release(&mut state, heaps);
    }

    /// Applies residency changes made against `pool` (by a streaming manager, say) to images that
    /// have no residency of their own ([`SparseImage::new_external`]): heaps first (every heap of
    /// `pool` without memory), then one `vkQueueBindSparse` for all of them; waits for it. On an
    /// error nothing was bound (heaps allocated stay, as the pool has them); undoing the changes
    /// in the pool and the page tables is the caller's, who made them.
    ///
    /// Checked first, refused with nothing allocated or bound: `pool` is the pool these heaps
    /// serve ([`CommitError::WrongPool`]) and its description passes
    /// [`TilePoolDesc::validate`](residency_core::tiles::TilePoolDesc::validate)
    /// ([`SparseError::Desc`]); every image was made for these heaps by
    /// [`SparseImage::new_external`], with tiles of the pool's tile size
    /// ([`SparseError::Incompatible`]); every non-empty change was
    /// made against `pool` ([`ResidencyChanges::pool`]; [`CommitError::WrongPool`]) and binds
    /// tiles of its live heaps ([`CommitError::Pool`]); and every tile an image is left bound to
    /// (the last change of each of its tiles and tails, over all the items) is one `pool` has
    /// allocated to that image's owner ([`SparseError::NotOwner`]): a change made by hand cannot
    /// bind a tile the pool gave another image, or none (which it could hand out later), so no
    /// memory is bound to two images at once.
    pub fn bind(
        &mut self,
        pool: &TilePool,
        items: &[(&SparseImage, &ResidencyChanges)],
        options: BindPlanOptions,
    ) -> Result<BindStats, SparseError> {
        Ok(self.bind_inner(pool, items, options, &[], true)?.0)
    }

    /// [`TileHeaps::bind`] without a host wait, for a frame loop: the `vkQueueBindSparse` waits
    /// on the GPU for `waits` (the frames in flight that may still sample tiles it unbinds: the
    /// ends of their submissions, or points of the renderer's timelines) and signals the device's
    /// sparse timeline; the returned use (`None`: nothing to bind) is what work that samples or
    /// writes the newly bound tiles waits for (pass it to
    /// [`CommandContext::submit`](crate::CommandContext::submit)). Memory and images released
    /// afterwards retire after it. Checked and refused like `bind`; a wait on a frame count
    /// ([`Device::frames_from_now`](crate::Device::frames_from_now)) or on another device's work is
    /// refused with nothing bound.
    ///
    /// A wait on a renderer timeline is a promise that the renderer signals that value (or has):
    /// until it does, the binds, and the work that waits for them, do not run.
    pub fn bind_after(
        &mut self,
        pool: &TilePool,
        items: &[(&SparseImage, &ResidencyChanges)],
        options: BindPlanOptions,
        waits: &[GpuUse],
    ) -> Result<(BindStats, Option<GpuUse>), SparseError> {
        self.bind_inner(pool, items, options, waits, false)
    }

    fn bind_inner(
        &mut self,
        pool: &TilePool,
        items: &[(&SparseImage, &ResidencyChanges)],
        options: BindPlanOptions,
        waits: &[GpuUse],
        wait: bool,
    ) -> Result<(BindStats, Option<GpuUse>), SparseError> {
        let waits = with_submitted(&self.shared.device, waits)?;
        let shared = &*self.shared;
        let mut state = shared.lock();
        let (plans, heaps_added) = shared.check_and_plan(&mut state, pool, items, options)?;
        let (mut stats, done) =
            submit_plans(&shared.device, &plans, &state, pool.tile_bytes(), &waits, false)?;
        // Submitted: what is bound is recorded before any wait, so a failed wait (a lost device)
        // cannot leave the counts behind the binds that run.
        for (image, changes) in items {
            shared.record(&mut state, image.key, changes);
        }
        drop(state);
        stats.heaps_added = heaps_added;
        if let (true, Some(done)) = (wait, done) {
            wait_for_bind(&shared.device, &done)?;
        }
        Ok((stats, done))
    }

    /// The checks and plans of [`TileHeaps::bind_after`] now (heaps allocated as there), the
    /// `vkQueueBindSparse` later, from any thread: [`PreparedBind::submit`] (the streamer's bind
    /// worker). `None`: nothing to bind. The prepared bind holds its images; the heaps it binds
    /// must not be released ([`TileHeaps::release`]) and no other bind of these images made
    /// before it is submitted (the streamer joins its worker first), else its submission panics
    /// or binds what the pool has since given elsewhere. Dropped unsubmitted, it bound nothing
    /// (the caller's page tables then say more than the GPU has, as after a failed bind).
    pub(crate) fn prepare_bind(
        &mut self,
        pool: &TilePool,
        items: &[(&Arc<SparseImage>, &ResidencyChanges)],
        options: BindPlanOptions,
    ) -> Result<Option<PreparedBind>, SparseError> {
        let shared = &*self.shared;
        let mut state = shared.lock();
        let borrowed: Vec<(&SparseImage, &ResidencyChanges)> =
            items.iter().map(|(i, c)| (&***i, *c)).collect();
        let (plans, heaps_added) = shared.check_and_plan(&mut state, pool, &borrowed, options)?;
        drop(state);
        if plans.iter().all(|(_, _, p)| p.image_binds.is_empty() && p.opaque_binds.is_empty()) {
            return Ok(None);
        }
        Ok(Some(PreparedBind {
            shared: Arc::clone(&self.shared),
            images: items.iter().map(|(i, _)| Arc::clone(i)).collect(),
            changes: items.iter().map(|(i, c)| (i.key, (*c).clone())).collect(),
            plans,
            tile_bytes: pool.tile_bytes(),
            heaps_added,
        }))
    }
}

/// `waits` checked (a frame count or another device's work refused), and every residency
/// submission so far added: a bind or unbind never races GPU work that touches those tiles (the
/// uploader's copies, frames submitted through residency).
fn with_submitted(device: &Device, waits: &[GpuUse]) -> Result<Vec<GpuUse>, SparseError> {
    for w in waits {
        device.wait_info(w).map(drop)?;
    }
    let mut waits = waits.to_vec();
    waits.push(device.submitted_work());
    Ok(waits)
}

/// The planned binds of [`TileHeaps::prepare_bind`], submitted by [`PreparedBind::submit`]
/// (`Send`: the streamer's bind worker submits them). Holds its images until then.
pub(crate) struct PreparedBind {
    shared: Arc<HeapsShared>,
    /// Kept alive until the bind was submitted (the plans name their raw handles).
    images: Vec<Arc<SparseImage>>,
    changes: Vec<(u64, ResidencyChanges)>,
    plans: Vec<(vk::Image, vk::ImageAspectFlags, residency_core::tiles::BindPlan)>,
    tile_bytes: u64,
    heaps_added: u64,
}

impl std::fmt::Debug for PreparedBind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PreparedBind")
            .field("heaps", &self.shared.name)
            .field("images", &self.images.len())
            .finish_non_exhaustive()
    }
}

impl PreparedBind {
    /// Whether its changes unbind anything (a tile or tail left without memory).
    pub(crate) fn unbinds(&self) -> bool {
        self.changes.iter().any(|(_, c)| {
            c.tiles.iter().any(|t| t.physical.is_none()) || c.tails.iter().any(|t| t.physical.is_none())
        })
    }

    /// The one `vkQueueBindSparse` of [`TileHeaps::bind_after`] (under the sparse queue's lock and
    /// the heaps' state lock, as there), waiting on the GPU for `waits`, and what it bound
    /// recorded in the heaps. On an error nothing was bound (or the device is lost).
    pub(crate) fn submit(self, waits: &[GpuUse]) -> Result<(BindStats, Option<GpuUse>), SparseError> {
        let shared = &*self.shared;
        let waits = with_submitted(&shared.device, waits)?;
        let mut state = shared.lock();
        let (mut stats, done) =
            submit_plans(&shared.device, &self.plans, &state, self.tile_bytes, &waits, false)?;
        for (key, changes) in &self.changes {
            shared.record(&mut state, *key, changes);
        }
        drop(state);
        stats.heaps_added = self.heaps_added;
        // The images may go now: their garbage waits for the bind on the sparse timeline.
        drop(self.images);
        Ok((stats, done))
    }
}

impl HeapsShared {
    /// [`TileHeaps::bind_after`]'s checks, every heap of `pool` allocated, and the plans; nothing
    /// submitted.
    #[allow(clippy::type_complexity)]
    fn check_and_plan(
        &self,
        state: &mut HeapsState,
        pool: &TilePool,
        items: &[(&SparseImage, &ResidencyChanges)],
        options: BindPlanOptions,
    ) -> Result<(Vec<(vk::Image, vk::ImageAspectFlags, residency_core::tiles::BindPlan)>, u64), SparseError>
    {
        let shared = self;
        HeapsShared::check_serves(state, pool)?;
        for (image, changes) in items {
            if image.external != Some(shared.serial) {
                return Err(SparseError::Incompatible {
                    name: image.name.clone(),
                    reason: "bound through tile heaps it was not made for (SparseImage::new_external)".into(),
                });
            }
            if pool.tile_bytes() != image.layout().tile_bytes() {
                // Binds place tile `t` of a heap at `t × pool.tile_bytes()`: smaller pool tiles
                // would overlap or run past the heap, other sizes break the binding alignment.
                return Err(SparseError::Incompatible {
                    name: image.name.clone(),
                    reason: format!(
                        "the pool `{}` has {}-byte tiles; the image's are {} bytes",
                        pool.desc().name,
                        pool.tile_bytes(),
                        image.layout().tile_bytes()
                    ),
                });
            }
            if changes.tiles.is_empty() && changes.tails.is_empty() {
                continue;
            }
            if changes.pool != pool.id() {
                return Err(CommitError::WrongPool {
                    pool: pool.desc().name.clone(),
                    given: pool.id(),
                    owner: changes.pool,
                }
                .into());
            }
            let bound = changes
                .tiles
                .iter()
                .filter_map(|c| c.physical)
                .chain(changes.tails.iter().filter_map(|c| c.physical.as_deref()).flatten().copied());
            for p in bound {
                match pool.heap_tiles(p.heap) {
                    None => return Err(CommitError::Pool(PoolError::UnknownHeap(p.heap.0)).into()),
                    Some(tiles) if p.tile >= tiles => {
                        return Err(CommitError::Pool(PoolError::OutOfBounds {
                            heap: p.heap.0,
                            first: p.tile,
                            end: u64::from(p.tile) + 1,
                            tiles,
                        })
                        .into())
                    }
                    Some(_) => {}
                }
            }
        }
        check_owners(pool, items)?;
        let all: Vec<HeapIndex> = pool.heap_indices().collect();
        let heaps_added = shared.ensure(state, pool, &all)?;
        let mut plans = Vec::with_capacity(items.len());
        for (image, changes) in items {
            plans.push((
                image.raw,
                aspect(image.desc.format),
                plan_binds(image.layout(), &changes.tiles, &changes.tails, options)?,
            ));
        }
        Ok((plans, heaps_added))
    }
}

/// Checks that every tile `items` leave bound (the last change of each tile and tail of each
/// image, in item order) is one `pool` allocated to that image's owner.
fn check_owners(pool: &TilePool, items: &[(&SparseImage, &ResidencyChanges)]) -> Result<(), SparseError> {
    // Per image key: the physical tiles its tiles and tails end up bound to.
    let mut last: HashMap<(u64, Bound), Option<Vec<PhysicalTile>>> = HashMap::new();
    for (image, changes) in items {
        for c in &changes.tiles {
            last.insert((image.key, Bound::Tile(c.tile.0)), c.physical.map(|p| vec![p]));
        }
        for c in &changes.tails {
            last.insert((image.key, Bound::Tail(c.tail)), c.physical.clone());
        }
    }
    for (image, _) in items {
        let owner = image.residency.owner();
        let bound = last
            .iter()
            .filter(|((key, _), _)| *key == image.key)
            .flat_map(|(_, physical)| physical.iter().flatten());
        for &tile in bound {
            let held = pool.owner_of(tile);
            if held != Some(owner) {
                return Err(SparseError::NotOwner { name: image.name.clone(), tile, owner, held });
            }
        }
    }
    Ok(())
}

impl Drop for TileHeaps {
    fn drop(&mut self) {
        let live = self.shared.images.load(Ordering::Relaxed);
        if live != 0 {
            tracing::warn!(
                heaps = %self.shared.name,
                images = live,
                "tile heaps dropped with live images: their memory stays until the last of them is released"
            );
        }
    }
}
