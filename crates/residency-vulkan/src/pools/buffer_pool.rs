//! Buffer pools (the seed's `BufferPool`): pages of memory from which buffers are sub-allocated.
//!
//! - **Known flags** ([`BufferPoolUsage::Known`]): a page is one `VkBuffer` over the whole page's
//!   memory, and a buffer is a range of it. Cheap (no `VkBuffer` per allocation); every buffer on a
//!   page shares the page's usage and, for barriers, its state (the legacy behaviour).
//! - **Unknown flags** ([`BufferPoolUsage::Unknown`]): a page is raw memory, and each buffer is a
//!   *placed* `VkBuffer` with its own usage, alignment, debug name and state.
//!
//! **Locking.** A pool is `Sync`: one `Mutex` per arena ([`BufferPoolDesc::with_arenas`]; one by
//! default) guards that arena's pages and their TLSF allocators, held only for the O(1)
//! sub-allocation and the bookkeeping; `vkCreateBuffer` and `vkBindResourceMemory` of a placed
//! buffer run outside it. Creating a new page (a `vkAllocateMemory`) happens under the lock,
//! which is rare: pages are large.
//!
//! **Nothing shared between threads on the hot path.** A buffer or range holds its thread's
//! handle of its arena (`PoolArena`: its parent, which keeps the pool and the device alive,
//! counts live buffers and takes deferred uses), not the pool's or the device's `Arc` (and a
//! `PoolRange` released to the pages leaves its handle's reference under the arena's lock for the
//! thread's next range: "lent handles", `PoolShared::release_range`); an arena
//! has up to 16 handles (one per thread shard, `shards_per_arena`), which threads take in turn,
//! each on cache lines of its own, the device's ledger is sharded per thread, and state-tracking
//! ids come from per-thread blocks. Once two thread shards have allocated from an arena, a
//! released range of up to 64 KiB goes into the releasing thread's slot's cache of freed ranges
//! (`range_cache.rs`), from which that slot's next requests of its size class are served without
//! the arena's lock (an arena one thread uses goes straight to its pages); past the cache's bounds its
//! oldest ranges go back to the pages in one batch, and every cache of an arena gives its ranges
//! back before the arena grows a page and before `stats`, reports, defragmentation or
//! `check_invariants` look at the pages. So threads sharing one arena mostly take no lock another
//! thread takes, and with an arena per thread creating and releasing a buffer writes no cache
//! line another thread writes.
//!
//! **Per-buffer work kept per thread.** A placed buffer's memory requirements are those of its
//! size class, asked once per thread (`resources::buffer::class_requirements`, the spec's
//! invariance rules), and the placement engine's answer for the same inputs is kept per thread
//! (`Device::pooled_placed_with`); in front of both, a thread keeps the whole answer (size to
//! reserve, alignment, engine's answer) per 16-byte class of the pool (`PlacedClassKey`): one
//! lookup per buffer. Creating one is `vkCreateBuffer`, its name, a bind, and the bookkeeping.
//! A placed buffer's range returns through its arena, which its life holds as its parent: no
//! `Weak` per buffer (`ResourceMemory::Sub` without an owner; a release queued behind GPU uses
//! takes the arena's `Weak` then).

use crate::device::blocks::{BlockAllocation, BlockList, MemoryError, SubRequest};
use crate::device::blocks::{ResourceMemory, SubAllocation, SubAllocator};
use crate::device::ledger::ObjectId;
use crate::device::life::{DeviceParent, Garbage, GpuUse, Holder, Parent, PendingUses};
use crate::device::lock::{CachePadded, SHARDS};
use crate::device::Device;
use crate::error::{ForeignReason, ForeignResource};
use crate::format_map::vk_buffer_usage;
use crate::memory::placement::{policy_code, PlacedWith, PlacementPolicy};
use crate::poison::PoisonFree;
use crate::pools::range_cache::cacheable;
use crate::resources::buffer::{
    bind_buffer, class_requirements, create_raw_buffer, create_unbound_buffer, Buffer,
};
use crate::resources::buffer::{BufferMemory, BufferObject, BufferParts};
use crate::resources::Unused;
use ash::vk;
use residency_core::allocator::ResourceKind;
use residency_core::memory::{memory_type_candidates, HeapGrowth, MemoryIntent};
use residency_core::placement::heap::{explicit_heap_size, EXPLICIT_HEAP_ALIGNMENT};
use residency_core::sync::LastUses;
use residency_core::usage::{BufferPoolUsage, BufferUsage};
use std::mem::ManuallyDrop;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

static NEXT_POOL_ID: AtomicU64 = AtomicU64::new(1);

/// A slot's cache of freed ranges, with their pages.
type RangeCache = crate::pools::range_cache::RangeCache<PageInfo>;

/// Handles (and range caches) per arena: [`SHARDS`] slots in all when arenas are fewer, one per
/// arena when they are as many or more. Threads take slots in turn, so up to `SHARDS` threads on
/// one arena share no handle.
fn shards_per_arena(arenas: usize) -> usize {
    (SHARDS / arenas.max(1)).max(1)
}

thread_local! {
    /// This thread's arena index (taken modulo a pool's arena count).
    static ARENA: usize = {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        NEXT.fetch_add(1, Ordering::Relaxed) as usize
    };
}

/// How to create a buffer pool.
#[derive(Clone, Debug)]
pub struct BufferPoolDesc {
    /// The pool's name (its pages are named after it).
    pub name: String,
    /// The memory of its pages (the seed's heap memory level): device-local, upload (host) or readback.
    pub memory: MemoryIntent,
    /// Bind flags: known for every buffer, or unknown (each buffer brings its own).
    pub usage: BufferPoolUsage,
    /// Bytes per page (default 64 MiB; clamped to at least 64 KiB, rounded up to 64 KiB: an
    /// explicit heap's alignment, `residency_core::placement::heap`). A buffer or range larger
    /// than a page gets a page of its own, sized by the same rules, freed with it.
    pub page_size: u64,
    /// Whether pages may be allocated over the heap budget.
    pub allow_over_budget: bool,
    /// Independent sets of pages with their own lock (default 1); see the module's locking notes.
    pub arenas: u32,
    /// VK_EXT_memory_priority's priority of its pages, in `[0, 1]` (`None`: the default, 0.5).
    pub priority: Option<f32>,
    /// How an unknown-flags pool aligns its placed buffers: `Tight` or `Legacy` (64 KiB, D3D12's
    /// layout); `None`, the default: the device's policy at each buffer's creation. A buffer's own
    /// ([`BufferInit::policy`]) wins over it. Ranges of a known-flags pool are not resources of
    /// their own: they take their usage's offset floors.
    pub policy: Option<PlacementPolicy>,
    /// Whether an unknown-flags pool names each placed buffer's `VkBuffer` through
    /// `VK_EXT_debug_utils` (debuggers and validation messages then show the buffer's name).
    /// `None` (the default): named when the device's instance runs the validation layer or
    /// `RESIDENCY_DEBUG_NAMES=1` is set ([`Device::names_objects_by_default`](crate::Device::names_objects_by_default)),
    /// else not — `vkSetDebugUtilsObjectNameEXT` is a driver call per buffer that NVIDIA's driver
    /// serialises across threads (`residency-bench contention --only driver,driver-named`: 9.1 M
    /// against 24.9 M buffers/s at 8 threads on the H200); `Some(b)` decides for this pool. The
    /// name stays the buffer's and the ledger's either way (leak reports, [`Buffer::name`]). A
    /// known-flags pool's ranges have no `VkBuffer` of their own and are never named in the driver.
    pub debug_names: Option<bool>,
}

impl BufferPoolDesc {
    /// The most arenas a pool has ([`with_arenas`](Self::with_arenas) clamps to it).
    pub const MAX_ARENAS: u32 = 64;

    /// Checks the fields a struct literal can set beyond what the setters allow, against the
    /// device's `limits`; [`BufferPool::new`] calls it first and creates nothing when it fails: a
    /// page (rounded up to 64 KiB) within `maxMemoryAllocationSize` (a page is one allocation),
    /// and at most [`MAX_ARENAS`](Self::MAX_ARENAS) arenas (0 counts as 1).
    pub fn validate(
        &self,
        limits: &residency_core::profile::Limits,
    ) -> Result<(), residency_core::desc::DescError> {
        use residency_core::desc::check_range;
        const DESC: &str = "BufferPoolDesc";
        check_range(
            DESC,
            &self.name,
            "page_size",
            self.page_size,
            0,
            limits.max_memory_allocation_size.min(u64::MAX - EXPLICIT_HEAP_ALIGNMENT),
            "a page is one allocation: maxMemoryAllocationSize",
        )?;
        check_range(
            DESC,
            &self.name,
            "arenas",
            self.arenas.into(),
            0,
            Self::MAX_ARENAS.into(),
            "BufferPoolDesc::MAX_ARENAS",
        )
    }

    /// A device-local pool with 64 MiB pages.
    pub fn new(name: impl Into<String>, usage: BufferPoolUsage) -> BufferPoolDesc {
        BufferPoolDesc {
            name: name.into(),
            memory: MemoryIntent::DeviceLocal,
            usage,
            page_size: 64 << 20,
            allow_over_budget: false,
            arenas: 1,
            priority: None,
            policy: None,
            debug_names: None,
        }
    }

    /// Sets whether its placed buffers are named in the driver (see the `debug_names` field).
    pub fn with_debug_names(mut self, debug_names: bool) -> Self {
        self.debug_names = Some(debug_names);
        self
    }

    /// Sets the pool's own placement policy (see the `policy` field).
    pub fn with_policy(mut self, policy: PlacementPolicy) -> Self {
        self.policy = Some(policy);
        self
    }

    /// Sets the memory priority of its pages (see the `priority` field).
    pub fn with_priority(mut self, priority: f32) -> Self {
        self.priority = Some(priority);
        self
    }

    /// Splits the pool into `arenas` sets of pages, each with its own lock (clamped to 1..=64).
    pub fn with_arenas(mut self, arenas: u32) -> Self {
        let clamped = arenas.clamp(1, Self::MAX_ARENAS);
        if clamped != arenas {
            tracing::info!(requested = arenas, used = clamped, pool = %self.name, "arena count clamped");
        }
        self.arenas = clamped;
        self
    }

    /// Sets the page memory.
    pub fn with_memory(mut self, memory: MemoryIntent) -> Self {
        self.memory = memory;
        self
    }

    /// Sets the page size (clamped to ≥ 64 KiB and rounded up to 64 KiB, with a log line when adjusted).
    pub fn with_page_size(mut self, page_size: u64) -> Self {
        // Past the largest multiple of 64 KiB the rounding saturates; `BufferPoolDesc::validate`
        // refuses such a size where the pool is made.
        let adjusted = explicit_heap_size(page_size.max(EXPLICIT_HEAP_ALIGNMENT), false);
        if adjusted != page_size {
            tracing::info!(requested = page_size, used = adjusted, pool = %self.name, "page size adjusted");
        }
        self.page_size = adjusted;
        self
    }
}

/// One buffer to create in a pool (the seed's `InitBuffer` request).
#[derive(Clone, Debug)]
pub struct BufferInit {
    /// Its name, shared (not copied) by every buffer made from this description: a renderer that
    /// keeps its descriptions pays no allocation for names.
    pub name: Arc<str>,
    /// Size in bytes.
    pub size: u64,
    /// An alignment floor (0: none), e.g. 256 for constant buffers.
    pub alignment: u64,
    /// Its own bind flags: required in unknown-flags pools; in known-flags pools, `None` or a subset
    /// of the pool's flags.
    pub usage: Option<BufferUsage>,
    /// Its own alignment rules in an unknown-flags pool, over the pool's and the device's
    /// ([`PlacementPolicy`]; `None`, the default: the pool's). Its own `Tight` on a device without
    /// tight support is [`MemoryError::Placement`]. Ranges of a known-flags pool ignore it.
    pub policy: Option<PlacementPolicy>,
}

impl BufferInit {
    /// A buffer request without a floor or flags of its own.
    pub fn new(name: impl Into<Arc<str>>, size: u64) -> BufferInit {
        BufferInit { name: name.into(), size, alignment: 0, usage: None, policy: None }
    }

    /// Sets its own alignment rules (see [`BufferInit::policy`]).
    pub fn with_policy(mut self, policy: PlacementPolicy) -> Self {
        self.policy = Some(policy);
        self
    }

    /// Sets its own bind flags.
    pub fn with_usage(mut self, usage: BufferUsage) -> Self {
        self.usage = Some(usage);
        self
    }

    /// Sets the alignment floor.
    pub fn with_alignment(mut self, alignment: u64) -> Self {
        self.alignment = alignment;
        self
    }
}

/// Statistics of a pool.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct PoolStats {
    /// Pages (memory blocks).
    pub pages: usize,
    /// Bytes of all pages.
    pub page_bytes: u64,
    /// Bytes sub-allocated (including alignment of sizes).
    pub used_bytes: u64,
    /// Live buffers.
    pub buffers: u64,
}

/// A pool of buffers over pages of device memory. The pages live as long as the pool or any of
/// its buffers: each buffer keeps the pool's shared state alive, so dropping the pool while buffers
/// live is safe (the pages go with the last buffer, and a warning names them).
///
/// # Algorithm
///
/// Pages are `VkDeviceMemory` blocks of one memory type, grouped in arenas (a thread uses arena
/// `thread index mod arenas`); each page has its own core
/// [`TlsfAllocator`](residency_core::allocator::TlsfAllocator) (`# Algorithm` there: segregated
/// free lists, exact alignment, immediate coalescing; no granularity pages, since every block of
/// a buffer pool is linear). A request — a range of a known-flags page's one `VkBuffer`
/// ([`allocate_range`](Self::allocate_range), or a `Buffer` over it), or a placed `VkBuffer` of
/// its own (unknown flags) — is tried on the arena's pages newest first, and a new page is
/// allocated (sized by the pool's growth, at least the request) when none has room. A request
/// larger than a page gets a page of its own (sized by the core's heap rules), which takes nothing
/// else and is freed with it. Dropping a
/// range or buffer frees its TLSF block, and so coalesces it, once the GPU work declared on it
/// has completed (the deferred destruction); a page emptied this way is freed, unless it is the
/// one empty page the pool keeps for reuse.
///
/// # Efficiency
///
/// - Time: a cached range of the request's size class (O(1): a few entries probed), else
///   O(pages of the arena) TLSF attempts, each O(1) (pages are few and large); a placed buffer
///   adds `vkCreateBuffer` and a bind, outside the lock. Measured
///   (`docs/benchmarks.md`, "W3"): a `PoolRange` 49–77 ns, a placed buffer created and bound
///   438–894 ns (this workplace's lavapipe and the H200); VMA's virtual block does a range in
///   30–53 ns, unlocked.
/// - Memory: per page, its TLSF nodes (32 bytes per block and a bit); per [`PoolRange`], one
///   value (its page's handles, offset, size, TLSF handle, mapping and declared uses) holding a
///   strong reference of its thread's arena handle, which it takes over from a range released
///   to the pages before it when there is one and leaves there when it is released to the pages
///   (counted under the arena's lock: no reference count touched on that path; the pool takes
///   them back when dropped); per `Buffer`, its `Arc<Life>`, name and ledger entry (and its
///   `VkBuffer` when placed). Space overhead: TLSF's (alignment padding returned to the free
///   lists, ends rounded to at most 256 B), the free space of part-full pages, a range taken from
///   the cache less than a quarter larger than asked (less than 32 B below 128 B), and per
///   handle slot up to 512 KiB of freed ranges held by its cache (given back before a page is
///   added).
/// - Locking: one `Mutex` per arena, taken by an allocation or a free of more than 64 KiB, by a
///   request its thread's range cache cannot serve, and once per batch of ranges a cache gives
///   back; besides it a buffer touches only its thread's handle of its arena (reference and live
///   counts), range cache and ledger shard, so threads share no cache line (see the module's
///   notes). Throughput under contention: `docs/benchmarks.md`, "`contention`".
pub struct BufferPool {
    pub(super) shared: Arc<PoolShared>,
    /// One handle per arena, which the arena's buffers and ranges hold (see `PoolArena`).
    arenas: Vec<Arc<PoolArena>>,
}

/// What a pool's arenas keep alive: the device, the pages and their allocators.
pub(crate) struct PoolShared {
    pub(super) device: Arc<Device>,
    pub(super) desc: BufferPoolDesc,
    pub(super) type_index: u32,
    /// Each arena's pages behind its lock, alone on its cache lines (threads on different arenas
    /// share no line).
    arenas: Vec<CachePadded<Mutex<BlockList>>>,
    /// Each arena's count of removed pages ([`BlockList::removals`]), read without its lock.
    removals: Vec<Arc<AtomicU64>>,
    /// The range caches, one per handle slot (`slot = shard × arenas + arena`), each alone on
    /// its cache lines: recently freed ranges of the slot's arena, reused without its lock.
    caches: Vec<CachePadded<Mutex<RangeCache>>>,
    /// Per arena, the shards (bit `slot / arenas`) that have allocated from it: its caches are
    /// used once two have (an arena one thread uses goes to its pages directly, as its lock is
    /// uncontended). Set once per shard, read on every operation.
    users: Vec<CachePadded<AtomicU64>>,
    pool_id: u64,
    /// Uses of deferred buffers and ranges whose arena handle went before the pool: its pages
    /// retire after them.
    pending: PendingUses,
    id: ObjectId,
    /// A known-flags pool's range alignment (its flags' floors), computed once.
    known_range_alignment: Option<u64>,
}

/// One arena of a pool as its buffers and ranges hold it: their parent (it keeps the pool, and
/// through it the device, alive) and where their ranges return. Creating or releasing a buffer
/// touches only its arena's handle (its reference count, its live count, its lock), never a count
/// every thread shares: with an arena per thread, threads share no cache line on these paths.
/// Aligned to 128 bytes, so that two arenas' handles never share a line either.
#[repr(align(128))]
pub(crate) struct PoolArena {
    pool: Arc<PoolShared>,
    index: u16,
    /// Its slot among the pool's handles (and range caches).
    slot: u16,
    /// Its shard's bit in the arena's users (`PoolShared::users`).
    shard_bit: u64,
    /// Live buffers of this arena (the pool's count is the sum).
    buffers: AtomicU64,
    /// Uses of this arena's deferred buffers and ranges: the pool's pages retire after them.
    pending: PendingUses,
}

impl std::fmt::Debug for BufferPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BufferPool")
            .field("desc", &self.shared.desc)
            .field("type_index", &self.shared.type_index)
            .finish_non_exhaustive()
    }
}

/// The offset alignment of a range or placed buffer of `usage` in a pool: the usage's floors,
/// at least 16 B.
fn range_alignment(device: &Device, usage: BufferUsage) -> u64 {
    16u64.max(device.usage_floor(usage))
}

/// A pool's page list named `name` (an arena's, or a thread's `LocalRanges`): pages of
/// `desc.page_size` in memory type `type_index`, each with one page buffer of the flags when they
/// are known.
pub(crate) fn page_list(device: &Device, desc: &BufferPoolDesc, name: String, type_index: u32) -> BlockList {
    // Every block of a pool's page is a buffer or a range (`ResourceKind::Linear`), and linear
    // resources never conflict with each other: `bufferImageGranularity` cannot apply, so the
    // pages' allocators take none (and skip the neighbour checks it would cost on every
    // allocation; the placements are the same).
    let granularity = 1;
    let atom = device.limits().non_coherent_atom_size;
    let memory_type = &device.memory_properties().types[type_index as usize];
    let mut pages = BlockList::new(name, type_index, HeapGrowth::new(desc.page_size), granularity)
        .with_atom(memory_type, atom);
    pages.fixed_size = true;
    pages.priority = desc.priority.unwrap_or(crate::device::blocks::DEFAULT_PRIORITY);
    if let BufferPoolUsage::Known(usage) = desc.usage {
        let page_name = desc.name.clone();
        pages.page_buffer = Some(Box::new(move |device: &Device, block| {
            let (raw, req) =
                create_raw_buffer(device, &format!("{page_name} page buffer"), block.size, usage)?;
            let guard = Unused::new(device, raw);
            if req.memory_type_bits & (1 << block.type_index) == 0 || req.size > block.size {
                return Err(MemoryError::Unsatisfiable {
                    name: page_name.clone(),
                    reason: "the page buffer does not fit its memory".into(),
                });
            }
            bind_buffer(device, guard.disarm(), block.memory, 0)?;
            Ok(raw)
        }));
    }
    pages
}

/// Memory types every buffer usage accepts: where an unknown-flags pool (or a linear pool) may
/// place any buffer.
pub(crate) fn unknown_flags_type_bits(device: &Device) -> u32 {
    BufferUsage::NAMED
        .iter()
        .filter(|(u, _)| device.unsupported_usage(*u).is_none())
        .fold(!0u32, |bits, &(u, _)| bits & buffer_type_bits(device, u | BufferUsage::COPY_DST))
}

/// Memory types any buffer of `usage` may use (asked without creating a buffer).
fn buffer_type_bits(device: &Device, usage: BufferUsage) -> u32 {
    crate::device::profile_capture::buffer_requirements(device, 1, vk_buffer_usage(usage)).memory_type_bits
}

impl BufferPool {
    /// Creates a pool; no memory is allocated until the first buffer. A description that does not
    /// pass [`BufferPoolDesc::validate`] is refused ([`MemoryError::Desc`]).
    pub fn new(device: Arc<Device>, desc: BufferPoolDesc) -> Result<BufferPool, MemoryError> {
        desc.validate(&device.profile().limits)?;
        let desc = BufferPoolDesc {
            page_size: explicit_heap_size(desc.page_size.max(EXPLICIT_HEAP_ALIGNMENT), false),
            ..desc
        };
        crate::device::blocks::check_priority(&desc.name, desc.priority)?;
        let allowed = match desc.usage {
            BufferPoolUsage::Known(usage) if usage.is_empty() => {
                return Err(MemoryError::Unsatisfiable {
                    name: desc.name,
                    reason: "a known-flags pool needs at least one flag".into(),
                })
            }
            BufferPoolUsage::Known(usage) => buffer_type_bits(&device, usage),
            BufferPoolUsage::Unknown => unknown_flags_type_bits(&device),
        };
        let Some(&type_index) =
            memory_type_candidates(&device.memory_properties().types, allowed, desc.memory).first()
        else {
            return Err(MemoryError::NoSuitableMemoryType {
                name: desc.name,
                allowed_bits: allowed,
                intent: desc.memory,
            });
        };
        let make_arena = |arena: u32| {
            let name = if desc.arenas > 1 {
                format!("{} arena {arena} page", desc.name)
            } else {
                format!("{} page", desc.name)
            };
            CachePadded(Mutex::new(page_list(&device, &desc, name, type_index)))
        };
        let arenas: Vec<CachePadded<Mutex<BlockList>>> = (0..desc.arenas.max(1)).map(make_arena).collect();
        let removals = arenas.iter().map(|arena| arena.locked().removals()).collect();
        let arena_count = arenas.len();
        let slots = arenas.len() * shards_per_arena(arenas.len());
        let caches = (0..slots).map(|_| CachePadded::default()).collect();
        let id = device.ledger().track("buffer pool", desc.name.as_str());
        let shared = Arc::new(PoolShared {
            known_range_alignment: match desc.usage {
                BufferPoolUsage::Known(usage) => Some(range_alignment(&device, usage)),
                BufferPoolUsage::Unknown => None,
            },
            device,
            desc,
            type_index,
            arenas,
            removals,
            caches,
            users: (0..arena_count).map(|_| CachePadded::default()).collect(),
            pool_id: NEXT_POOL_ID.fetch_add(1, Ordering::Relaxed),
            pending: PendingUses::default(),
            id,
        });
        let arenas = (0..shared.caches.len())
            .map(|slot| {
                Arc::new(PoolArena {
                    pool: Arc::clone(&shared),
                    index: (slot % arena_count) as u16,
                    slot: slot as u16,
                    shard_bit: 1 << (slot / arena_count),
                    buffers: AtomicU64::new(0),
                    pending: PendingUses::default(),
                })
            })
            .collect();
        Ok(BufferPool { shared, arenas })
    }

    /// The pool's description.
    pub fn desc(&self) -> &BufferPoolDesc {
        &self.shared.desc
    }

    /// The device it allocates on.
    pub fn device(&self) -> &Arc<Device> {
        &self.shared.device
    }

    /// The memory type of its pages.
    pub fn memory_type(&self) -> u32 {
        self.shared.type_index
    }

    /// Creates a buffer in the pool (the seed's `InitBuffer`).
    pub fn init_buffer(&self, init: &BufferInit) -> Result<Buffer, MemoryError> {
        self.shared.init_buffer(self.handle(), init)
    }

    /// This thread's handle: its arena (`thread index mod arenas`) and its slot there (whose
    /// reference count, live count and range cache it uses).
    fn handle(&self) -> &Arc<PoolArena> {
        // Slots are `shard × arenas + arena`, a multiple of the arena count in all: a thread's
        // arena is its index mod arenas, as without shards.
        // Slots are usually a power of two (`SHARDS` with 1, 2, 4, 8 or 16 arenas): a mask then,
        // else a 32-bit remainder (slots are at most `SHARDS × MAX_ARENAS`); the same slot.
        let (thread, slots) = (ARENA.with(|a| *a) as u32, self.arenas.len() as u32);
        let slot = if slots & (slots - 1) == 0 { thread & (slots - 1) } else { thread % slots };
        &self.arenas[slot as usize]
    }

    /// Releases a buffer of this pool (as dropping it does: deferred while the GPU may use it). A
    /// buffer of another pool or of the device's general allocator is refused and handed back
    /// unchanged.
    pub fn free_buffer(&self, buffer: Buffer) -> Result<(), ForeignResource<Buffer>> {
        match self.foreign_reason(&buffer) {
            None => {
                drop(buffer);
                Ok(())
            }
            Some(reason) => {
                Err(ForeignResource { name: buffer.name().to_owned(), resource: Box::new(buffer), reason })
            }
        }
    }

    /// Why `buffer` is not this pool's, or `None` when it is.
    pub(crate) fn foreign_reason(&self, buffer: &Buffer) -> Option<ForeignReason> {
        if buffer.pool_id() == Some(self.shared.pool_id) {
            return None;
        }
        Some(if !buffer.device().is(&self.shared.device) {
            ForeignReason::OtherDevice { owner: buffer.device_index(), target: self.shared.device.index() }
        } else {
            ForeignReason::OtherPool {
                owner: buffer.pool_id().map(|_| buffer.life().parent_name().unwrap_or_default()),
                target: Some(self.shared.desc.name.clone()),
            }
        })
    }

    /// Checks every page's allocator invariants (in bounds, no overlap, aligned, granularity, free
    /// lists consistent). For tests and debugging; a failure is a bug in the library.
    pub fn check_invariants(&self) -> Result<(), residency_core::allocator::InvariantError> {
        self.shared.flush_caches();
        self.shared.arenas.iter().try_for_each(|arena| {
            let pages = arena.locked();
            pages.blocks.iter().flatten().try_for_each(|b| b.allocator.check_invariants())
        })
    }

    /// The pool's statistics (the ranges its threads' caches hold are given back to the pages
    /// first, so `used_bytes` counts live and deferred buffers only).
    pub fn stats(&self) -> PoolStats {
        let s = &self.shared;
        s.flush_caches();
        let (page_bytes, used_bytes, pages) = s.arenas.iter().fold((0, 0, 0), |(b, u, n), arena| {
            let (bytes, used, count) = arena.locked().totals();
            (b + bytes, u + used, n + count)
        });
        PoolStats { pages, page_bytes, used_bytes, buffers: self.live_buffers() }
    }

    /// Live buffers of every arena.
    fn live_buffers(&self) -> u64 {
        self.arenas.iter().map(|arena| arena.buffers.load(Ordering::Relaxed)).sum()
    }

    /// The pool's arenas of pages, for memory reports.
    pub(crate) fn arenas(&self) -> &[CachePadded<Mutex<BlockList>>] {
        self.shared.flush_caches();
        &self.shared.arenas
    }
}

impl PoolShared {
    /// The pool's id (what its buffers' `pool` names), its flags and its pages' memory type.
    pub(crate) fn identity(&self) -> (u64, BufferPoolUsage, u32) {
        (self.pool_id, self.desc.usage, self.type_index)
    }

    /// The usage's offset floors (descriptor offsets, acceleration structures, shader tables,
    /// build scratch): what a range or a placed buffer of this usage is aligned to, at least 16.
    fn range_alignment(&self, usage: BufferUsage) -> u64 {
        range_alignment(&self.device, usage)
    }

    /// A known-flags pool's range alignment (its flags' offset floors, at least 16 B, computed
    /// once); refused for an unknown-flags pool, whose pages have no page buffer to take ranges
    /// of ([`BufferPool::allocate_range`], [`BufferPool::local_ranges`]).
    pub(super) fn known_range_alignment(&self) -> Result<u64, MemoryError> {
        self.known_range_alignment.ok_or_else(|| MemoryError::Unsatisfiable {
            name: self.desc.name.clone(),
            reason: "ranges come from a known-flags pool's page buffers; this pool's flags are unknown"
                .into(),
        })
    }

    /// The alignment a range of `size` bytes at a multiple of `alignment` (0: none) takes in this
    /// known-flags pool: the flags' floors, and the caller's on top. Refused: an unknown-flags
    /// pool ([`MemoryError::Unsatisfiable`]), a zero size or an alignment that is not a power of
    /// two ([`MemoryError::InvalidRequest`]).
    pub(super) fn range_request(&self, size: u64, alignment: u64) -> Result<u64, MemoryError> {
        use residency_core::allocator::AllocError;
        let floor = self.known_range_alignment()?;
        let invalid = |source| MemoryError::InvalidRequest { name: self.desc.name.clone(), source };
        if size == 0 {
            return Err(invalid(AllocError::ZeroSize));
        }
        if alignment != 0 && !alignment.is_power_of_two() {
            return Err(invalid(AllocError::AlignmentNotPowerOfTwo { alignment }));
        }
        Ok(floor.max(alignment))
    }

    fn invalid(&self, init: &BufferInit, reason: String) -> MemoryError {
        MemoryError::Unsatisfiable { name: init.name.to_string(), reason }
    }

    fn init_buffer(&self, handle: &Arc<PoolArena>, init: &BufferInit) -> Result<Buffer, MemoryError> {
        if init.alignment != 0 && !init.alignment.is_power_of_two() {
            return Err(MemoryError::InvalidRequest {
                name: init.name.to_string(),
                source: residency_core::allocator::AllocError::AlignmentNotPowerOfTwo {
                    alignment: init.alignment,
                },
            });
        }
        match self.desc.usage {
            BufferPoolUsage::Known(pool_usage) => {
                let usage = init.usage.unwrap_or(pool_usage);
                if !pool_usage.contains(usage) {
                    return Err(self.invalid(
                        init,
                        format!("usage {usage:?} is not within the pool's flags {pool_usage:?}"),
                    ));
                }
                self.init_range(handle, init, pool_usage, usage)
            }
            BufferPoolUsage::Unknown => match init.usage {
                Some(usage) if !usage.is_empty() => self.init_placed(handle, init, usage),
                _ => {
                    Err(self
                        .invalid(init, "a pool with unknown bind flags needs each buffer's own flags".into()))
                }
            },
        }
    }

    /// A range of `size` bytes at a multiple of `alignment` for the thread of `handle`: from its
    /// slot's cache of freed ranges when one fits, else from its arena's pages under their lock
    /// (a new page only after every cache of the arena has given its ranges back).
    fn allocate(
        &self,
        handle: &PoolArena,
        name: &str,
        size: u64,
        alignment: u64,
    ) -> Result<(BlockAllocation, PageInfo), MemoryError> {
        self.allocate_lending(handle, name, size, alignment, false).map(|(a, page, _)| (a, page))
    }

    /// [`PoolShared::allocate`]; with `lend`, also one of the strong references of `handle` that
    /// released ranges left in its arena ([`PoolShared::release_range`]), when the range came from
    /// the pages and there is one: the new range takes it over, no reference count touched.
    #[inline(always)]
    fn allocate_lending(
        &self,
        handle: &PoolArena,
        name: &str,
        size: u64,
        alignment: u64,
        lend: bool,
    ) -> Result<(BlockAllocation, PageInfo, Option<Arc<PoolArena>>), MemoryError> {
        // This slot's cache, held through a miss (its lock is taken before the arena's, never
        // while the arena's is held), so that the miss records its page under the same lock.
        let slot = &self.caches[usize::from(handle.slot)];
        let mut cache = None;
        if cacheable(size) && self.note_user(handle) {
            let mut guard = slot.locked();
            if let Some((hit, page)) = guard.take(size, alignment) {
                return Ok((hit, page, None));
            }
            cache = Some(guard);
        }
        let arena = usize::from(handle.index);
        let request = SubRequest {
            name,
            size,
            alignment,
            kind: ResourceKind::Linear,
            allow_over_budget: self.desc.allow_over_budget,
        };
        let mut pages = self.arenas[arena].locked();
        let allocation = match pages.allocate_existing(request) {
            Some(allocation) => allocation,
            None => {
                // Full: the ranges the caches hold (this slot's too) go back before a new page
                // is made.
                drop(pages);
                drop(cache.take());
                self.flush_arena(arena);
                pages = self.arenas[arena].locked();
                pages.allocate(&self.device, request)?
            }
        };
        let page = PageInfo::of(pages.block(allocation.block));
        let lent = if lend { Self::take_lent(&mut pages, handle) } else { None };
        let record = cache.is_some() || (cacheable(size) && self.shared_arena(arena));
        if record {
            // The page in this slot and the removals then, read together under the arena's lock.
            let removals = self.removals[arena].load(Ordering::Acquire);
            drop(pages);
            cache.unwrap_or_else(|| slot.locked()).record(allocation.block, page, removals);
        }
        Ok((allocation, page, lent))
    }

    /// The shard of `handle` among its arena's handles (its index in the arena's lent counts):
    /// `slot / arenas`, read from its bit (no division).
    fn shard(handle: &PoolArena) -> usize {
        handle.shard_bit.trailing_zeros() as usize
    }

    /// Takes over one strong reference of `handle` that a released range left in its arena's lent
    /// counts (`pages` is that arena's list, locked), if there is one.
    fn take_lent(pages: &mut BlockList, handle: &PoolArena) -> Option<Arc<PoolArena>> {
        let (ptr, count) = pages.lent.as_mut()?.get_mut(Self::shard(handle))?;
        if *count == 0 {
            return None;
        }
        debug_assert!(std::ptr::eq(*ptr as *const PoolArena, handle));
        *count -= 1;
        // SAFETY: `ptr` was returned by `Arc::into_raw` of a strong reference of this handle that
        // a released range gave to these counts (`release_range`, under this arena's lock, which
        // is held here); each such reference is counted once and taken back once, so this takes
        // ownership of a reference nobody else owns, and the handle is alive while it is counted.
        Some(unsafe { Arc::from_raw(*ptr as *const PoolArena) })
    }

    /// Releases a `PoolRange`'s allocation (nothing may use it any more) with the range's handle
    /// `arena`: into the handle slot's cache of freed ranges like any release when the arena is
    /// shared, else back to the pages under the arena's lock, where the handle's strong reference
    /// stays ("lent", counted under the same lock) for the thread's next range to take over
    /// (`take_lent`), so that a range allocated and released through the pages touches no
    /// reference count. The pool takes them back when it is dropped (`BufferPool::drop`).
    fn release_range(arena: Arc<PoolArena>, allocation: BlockAllocation) {
        let index = arena.index;
        if cacheable(allocation.allocation.size()) && arena.pool.shared_arena(usize::from(index)) {
            arena.pool.release(&arena, index, allocation);
            return;
        }
        let ptr = Arc::into_raw(arena);
        let lent = {
            // SAFETY: `ptr` holds the strong reference `arena` held, so the handle (and the pool
            // it keeps) lives at least until that reference is given away below: given to the
            // lent counts, under the arena's lock, whose holder keeps using it only until the lock
            // is released (while the lock is held the counts are open, so the `BufferPool`, which
            // holds a reference of its own and closes them under this lock, is alive); or dropped.
            let handle = unsafe { &*ptr };
            let pool = &handle.pool;
            let mut pages = pool.arenas[usize::from(index)].locked();
            pages.free(&pool.device, allocation);
            let shard = Self::shard(handle);
            match pages.lent.as_mut() {
                Some(lent) => {
                    if lent.len() <= shard {
                        lent.resize(shard + 1, (0, 0));
                    }
                    lent[shard] = (ptr as usize, lent[shard].1 + 1);
                    true
                }
                None => false,
            }
        };
        if !lent {
            // SAFETY: `ptr` came from `Arc::into_raw` above and its reference was not given away.
            drop(unsafe { Arc::from_raw(ptr) });
        }
    }

    /// Gives a released range back for the thread of `handle`: into its slot's cache when it is
    /// small and its page is known there, else to the arena's pages.
    fn release(&self, handle: &PoolArena, arena: u16, allocation: BlockAllocation) {
        let cached = arena == handle.index && cacheable(allocation.allocation.size());
        if cached && self.shared_arena(usize::from(arena)) {
            let removals = self.removals[usize::from(arena)].load(Ordering::Acquire);
            let evicted = self.caches[usize::from(handle.slot)].locked().put(allocation, removals);
            match evicted {
                Ok(evicted) if evicted.is_empty() => {}
                Ok(evicted) => self.free_all(arena, evicted),
                Err(allocation) => {
                    // Its page is not known here (yet): freed under the lock, where the page is
                    // read and recorded for this slot's next releases.
                    let mut pages = self.arenas[usize::from(arena)].locked();
                    let block = allocation.block;
                    // A page a defragmentation pass is emptying takes no range again: not recorded.
                    let page = pages
                        .blocks
                        .get(block as usize)
                        .and_then(Option::as_ref)
                        .filter(|b| !b.draining)
                        .map(PageInfo::of);
                    let removals = self.removals[usize::from(arena)].load(Ordering::Acquire);
                    pages.free(&self.device, allocation);
                    drop(pages);
                    if let Some(page) = page {
                        self.caches[usize::from(handle.slot)].locked().record(block, page, removals);
                    }
                }
            }
            return;
        }
        self.free_range(arena, allocation);
    }

    /// Notes that the shard of `handle` allocates from its arena; whether the arena is shared
    /// (two shards or more have allocated from it).
    fn note_user(&self, handle: &PoolArena) -> bool {
        let arena = usize::from(handle.index);
        let bit = handle.shard_bit;
        let users = &self.users[arena];
        let mut seen = users.load(Ordering::Relaxed);
        if seen & bit == 0 {
            seen = users.fetch_or(bit, Ordering::Relaxed) | bit;
        }
        seen.count_ones() > 1
    }

    /// Whether two shards or more have allocated from arena `arena` (its caches are in use).
    fn shared_arena(&self, arena: usize) -> bool {
        self.users[arena].load(Ordering::Relaxed).count_ones() > 1
    }

    /// Frees `ranges` of arena `arena`, under one lock.
    fn free_all(&self, arena: u16, ranges: Vec<BlockAllocation>) {
        let mut pages = self.arenas[usize::from(arena)].locked();
        for allocation in ranges {
            pages.free(&self.device, allocation);
        }
    }

    /// Every cache of arena `arena` gives its ranges back to the pages.
    fn flush_arena(&self, arena: usize) {
        let step = self.arenas.len();
        let ranges: Vec<BlockAllocation> =
            self.caches.iter().skip(arena).step_by(step).flat_map(|cache| cache.locked().drain()).collect();
        if !ranges.is_empty() {
            self.free_all(arena as u16, ranges);
        }
    }

    /// Every cache gives its ranges back (statistics, reports, defragmentation and invariant
    /// checks see the pages as the buffers use them).
    pub(crate) fn flush_caches(&self) {
        (0..self.arenas.len()).for_each(|arena| self.flush_arena(arena));
    }

    fn coherent(&self) -> bool {
        self.device.memory_properties().types[self.type_index as usize].flags.host_coherent
    }

    fn init_range(
        &self,
        handle: &Arc<PoolArena>,
        init: &BufferInit,
        pool_usage: BufferUsage,
        usage: BufferUsage,
    ) -> Result<Buffer, MemoryError> {
        if init.size == 0 {
            return Err(MemoryError::InvalidRequest {
                name: init.name.to_string(),
                source: residency_core::allocator::AllocError::ZeroSize,
            });
        }
        let alignment = self
            .known_range_alignment
            .unwrap_or_else(|| self.range_alignment(pool_usage))
            .max(init.alignment);
        let (allocation, page) = self.allocate(handle, &init.name, init.size, alignment)?;
        let page_buffer = page.page_buffer.expect("known-flags pages have a page buffer");
        let placed_with = PlacedWith::driver(init.size, alignment);
        Ok(self.pool_buffer(
            handle,
            init,
            usage,
            page,
            allocation,
            PoolBuffer::Range(page_buffer),
            placed_with,
        ))
    }

    fn init_placed(
        &self,
        handle: &Arc<PoolArena>,
        init: &BufferInit,
        usage: BufferUsage,
    ) -> Result<Buffer, MemoryError> {
        let raw = create_unbound_buffer(
            &self.device,
            &init.name,
            init.size,
            usage,
            self.desc.debug_names.unwrap_or_else(|| self.device.names_objects_by_default()),
        )?;
        let guard = Unused::new(&self.device, raw);
        let policy = self.desc.policy.unwrap_or_else(|| self.device.placement_policy());
        // This thread's answer for the buffer's class in this pool, when it has one: one lookup
        // instead of the requirements' and the engine's (below).
        let class = PlacedClassKey::new(self.pool_id, init, usage, policy);
        let (size, alignment, placed_with) = match class.and_then(PlacedClassKey::find) {
            Some(answer) => answer,
            None => self.placed_class(init, usage, policy, raw, class)?,
        };
        let (allocation, page) = self.allocate(handle, &init.name, size, alignment)?;
        let offset = allocation.allocation.offset();
        if let Err(e) = bind_buffer(&self.device, guard.disarm(), page.memory, offset) {
            self.free_range(handle.index, allocation);
            return Err(e);
        }
        Ok(self.pool_buffer(handle, init, usage, page, allocation, PoolBuffer::Placed(raw), placed_with))
    }

    /// What a placed buffer of `usage` and `init`'s size takes in this pool: the size to
    /// reserve (its class's), the offset alignment, and the placement engine's answer; kept for
    /// the buffer's class (`class`) when every buffer of the class gets the same answer.
    fn placed_class(
        &self,
        init: &BufferInit,
        usage: BufferUsage,
        policy: PlacementPolicy,
        raw: vk::Buffer,
        class: Option<PlacedClassKey>,
    ) -> Result<(u64, u64, PlacedWith), MemoryError> {
        // The requirements of its size class, asked once per thread (`class_requirements`): no
        // query per buffer.
        let req = class_requirements(&self.device, init.size, vk_buffer_usage(usage));
        if req.memory_type_bits & (1 << self.type_index) == 0 {
            return Err(self.invalid(
                init,
                format!("usage {usage:?} cannot live in memory type {} of this pool", self.type_index),
            ));
        }
        // The placement engine under the buffer's own policy, else the pool's, else the device's:
        // the driver's alignment, the policy's layout (64 KiB legacy), the usage's floors and the
        // caller's floor on top.
        let request = crate::memory::placement::PlaceRequest {
            name: &init.name,
            requirements: req,
            alignment_floor: init.alignment,
            kind: ResourceKind::Linear,
            intent: self.desc.memory,
            committed: false,
            allow_over_budget: self.desc.allow_over_budget,
            fallback: false,
            target: crate::memory::placement::DedicatedTarget::Buffer(raw),
            priority: None,
            image: None,
            policy: init.policy,
        };
        // The engine's answer for these inputs, kept per thread (`pooled_placed_with`).
        let (mut placed_with, pure) = self.device.pooled_placed_with(&request, usage, policy)?;
        // The engine's alignment holds the usage's floors already: the pool's range alignment
        // (`range_alignment`: those floors, at least 16 B) adds only its 16 B.
        placed_with.alignment = placed_with.alignment.max(16);
        let answer = (req.size, placed_with.alignment, placed_with);
        // Every size of a 16-byte class rounds to the same driver class when the driver's
        // alignment is a multiple of 16, so the whole class gets this answer.
        if let Some(class) = class.filter(|_| pure && req.alignment % CLASS_BYTES == 0) {
            class.keep(answer);
        }
        Ok(answer)
    }

    /// The `Buffer` of an allocation made in page `page` of arena `arena`: tracked by name, counted,
    /// and holding its arena (its parent, which holds the pool and the device) while it lives; a
    /// placed buffer's own `VkBuffer` goes with it, a range's page buffer stays with the page.
    #[allow(clippy::too_many_arguments, reason = "the parts of one allocation, assembled in one place")]
    fn pool_buffer(
        &self,
        arena: &Arc<PoolArena>,
        init: &BufferInit,
        usage: BufferUsage,
        page: PageInfo,
        allocation: BlockAllocation,
        kind: PoolBuffer,
        placed_with: PlacedWith,
    ) -> Buffer {
        let offset = allocation.allocation.offset();
        arena.buffers.fetch_add(1, Ordering::Relaxed);
        let owner = ResourceMemory::Sub {
            // Its arena is its life's parent: no `Weak` of its own (`ResourceMemory::Sub`).
            owner: None,
            allocation: SubAllocation::Block { arena: arena.index, allocation },
        };
        let object = match kind {
            PoolBuffer::Range(page_buffer) => BufferObject::Range { page_buffer, offset },
            PoolBuffer::Placed(raw) => BufferObject::Placed(raw),
        };
        Buffer::new(BufferParts {
            holder: Holder::Parent(Arc::clone(arena) as Arc<dyn DeviceParent>),
            name: Arc::clone(&init.name),
            size: init.size,
            usage,
            object,
            owner,
            memory: BufferMemory {
                memory: page.memory,
                offset,
                memory_size: page.memory_size,
                mapped: page.mapped,
            },
            coherent: self.coherent(),
            pool: Some(self.pool_id),
            movable: true,
            placed_with,
        })
    }

    /// Returns a released buffer's range (its `VkBuffer` is already destroyed).
    pub(crate) fn free_range(&self, arena: u16, allocation: BlockAllocation) {
        self.arenas[usize::from(arena)].locked().free(&self.device, allocation);
    }
}

/// Bytes of a placed buffer's class in [`PlacedClassKey`]: sizes `(16 k, 16 (k + 1)]` share a
/// class.
const CLASS_BYTES: u64 = 16;
/// The largest placed buffer whose class answer a thread keeps (far below any `maxBufferSize`,
/// at least 2^30 with maintenance4, so its driver class is never clamped to it).
const CLASS_MAX_SIZE: u64 = 64 << 10;
/// Entries of a thread's table of placed class answers (two ways per set).
const CLASS_ENTRIES: usize = 2048;

/// A placed pool buffer's class (issue #31): its pool (which fixes the device, memory type,
/// intent and budget rule), usage, size in 16-byte steps, alignment floor and the two policies.
/// Every buffer of a class gets the same requirements class and engine answer (when the
/// driver's alignment is a multiple of 16 and the engine sent no message: `placed_class`), so
/// a thread keeps that answer for the class and looks it up once per buffer.
#[derive(Clone, Copy, PartialEq, Eq)]
struct PlacedClassKey {
    pool: u64,
    class: u32,
    usage: u32,
    floor: u64,
    /// The buffer's own policy (0: none, 1: tight, 2: legacy) × 3 + the pool's default.
    policies: u8,
}

/// What a class gets: the size to reserve, the offset alignment and the engine's answer.
type PlacedClassAnswer = (u64, u64, PlacedWith);

thread_local! {
    /// This thread's class answers, direct-mapped by two ways: no lock, nothing shared.
    static PLACED_CLASSES: std::cell::RefCell<Vec<Option<(PlacedClassKey, PlacedClassAnswer)>>> =
        const { std::cell::RefCell::new(Vec::new()) };
}

impl PlacedClassKey {
    /// The class of a buffer of `init` and `usage` in pool `pool` under the default `policy`;
    /// `None` past [`CLASS_MAX_SIZE`].
    fn new(pool: u64, init: &BufferInit, usage: BufferUsage, policy: PlacementPolicy) -> Option<Self> {
        (init.size <= CLASS_MAX_SIZE).then(|| PlacedClassKey {
            pool,
            class: init.size.div_ceil(CLASS_BYTES) as u32,
            usage: usage.bits(),
            floor: init.alignment,
            policies: policy_code(init.policy) * 3 + policy_code(Some(policy)),
        })
    }

    /// The first way of its set in the table.
    fn set(&self) -> usize {
        let hash = self.pool.rotate_left(32)
            ^ u64::from(self.usage).rotate_left(16)
            ^ u64::from(self.class)
            ^ self.floor.rotate_left(40)
            ^ u64::from(self.policies).rotate_left(56);
        ((hash.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 53) as usize % CLASS_ENTRIES) & !1
    }

    /// This thread's answer for the class, if it keeps one.
    fn find(self) -> Option<PlacedClassAnswer> {
        let set = self.set();
        PLACED_CLASSES.with(|table| {
            let table = table.borrow();
            let ways = table.get(set..set + 2)?;
            ways.iter().flatten().find(|(key, _)| *key == self).map(|&(_, answer)| answer)
        })
    }

    /// Keeps `answer` for the class (the set's first way; its previous entry moves to the
    /// second).
    fn keep(self, answer: PlacedClassAnswer) {
        let set = self.set();
        PLACED_CLASSES.with(|table| {
            let mut table = table.borrow_mut();
            if table.is_empty() {
                table.resize(CLASS_ENTRIES, None);
            }
            table[set + 1] = table[set].take();
            table[set] = Some((self, answer));
        });
    }
}

impl PoolArena {
    /// The pool it is an arena of.
    pub(crate) fn pool(&self) -> &Arc<PoolShared> {
        &self.pool
    }

    /// Its index in the pool.
    pub(crate) fn index(&self) -> u16 {
        self.index
    }

    /// Its pages (for defragmentation, which plans and takes destinations under its lock, and
    /// marks the pages it empties), after the arena's range caches gave their ranges back (a
    /// cached range is free space to it) and with the caches' page records made stale (counted
    /// as a removal): a page it marks as emptying is not recorded again, so the caches keep no
    /// range of it (a record made while the pass runs, before its mark, may keep one until the
    /// cache is flushed: the page then goes later, never early).
    pub(crate) fn pages(&self) -> &Mutex<BlockList> {
        let index = usize::from(self.index);
        self.pool.flush_arena(index);
        self.pool.removals[index].fetch_add(1, Ordering::Release);
        &self.pool.arenas[index]
    }

    /// A buffer moved by defragmentation gets a new life in this arena before its old one is
    /// dropped (whose release counts one buffer fewer): count it.
    pub(crate) fn count_moved(&self) {
        self.buffers.fetch_add(1, Ordering::Relaxed);
    }
}

impl SubAllocator for PoolArena {
    fn give_back(&self, allocation: SubAllocation) {
        match allocation {
            SubAllocation::Block { arena, allocation } => self.pool.release(self, arena, allocation),
            SubAllocation::Linear(_) => debug_assert!(false, "a buffer pool hands out page ranges only"),
        }
    }

    fn as_any(self: Arc<Self>) -> Arc<dyn std::any::Any + Send + Sync> {
        self
    }
}

impl Parent for PoolArena {
    fn note_pending(&self, uses: &LastUses) {
        self.pending.note(uses);
    }

    fn name(&self) -> String {
        self.pool.desc.name.clone()
    }

    fn child_released(&self) {
        self.buffers.fetch_sub(1, Ordering::Relaxed);
    }
}

impl DeviceParent for PoolArena {
    fn device(&self) -> &Arc<Device> {
        &self.pool.device
    }

    fn as_parent(&self) -> &dyn Parent {
        self
    }

    fn as_sub_allocator(&self) -> Option<&dyn SubAllocator> {
        Some(self)
    }

    fn weak_sub_allocator(self: Arc<Self>) -> Option<std::sync::Weak<dyn SubAllocator>> {
        Some(Arc::downgrade(&self) as _)
    }
}

impl Drop for PoolArena {
    fn drop(&mut self) {
        // The pool's pages retire after the uses of this arena's deferred buffers and ranges too.
        let uses = self.pending.take();
        if !uses.is_empty() {
            self.pool.pending.note(&uses);
        }
    }
}

/// What a pool buffer is on its page.
enum PoolBuffer {
    /// A range of the page's one `VkBuffer` (known flags).
    Range(vk::Buffer),
    /// Its own `VkBuffer`, bound at its offset (unknown flags).
    Placed(vk::Buffer),
}

/// A page's handles, as a buffer placed in it needs them.
#[derive(Clone, Copy, Debug)]
struct PageInfo {
    memory: vk::DeviceMemory,
    memory_size: u64,
    mapped: Option<crate::device::blocks::MappedPtr>,
    page_buffer: Option<vk::Buffer>,
}

impl PageInfo {
    fn of(block: &crate::device::blocks::MemoryBlock) -> PageInfo {
        PageInfo {
            memory: block.memory,
            memory_size: block.size,
            mapped: block.mapped,
            page_buffer: block.page_buffer,
        }
    }
}

impl Drop for BufferPool {
    fn drop(&mut self) {
        // The handles' references the released ranges left in the arenas go back: the arenas keep
        // none once the pool is gone (they would keep it alive), and ranges released from now on
        // drop theirs.
        for arena in &self.shared.arenas {
            let lent = arena.locked().lent.take();
            for (ptr, count) in lent.into_iter().flatten() {
                for _ in 0..count {
                    // SAFETY: each counted reference came from `Arc::into_raw` of that pointer's
                    // handle (`release_range`) and is taken back once here, the counts now closed;
                    // `self.arenas` still holds a reference of each handle, so none is freed here.
                    drop(unsafe { Arc::from_raw(ptr as *const PoolArena) });
                }
            }
        }
        let live = self.live_buffers();
        if live != 0 {
            tracing::warn!(
                pool = %self.shared.desc.name,
                buffers = live,
                "buffer pool dropped with live buffers: its pages stay until the last of them is released"
            );
        }
    }
}

impl Drop for PoolShared {
    fn drop(&mut self) {
        // No buffer of the pool is alive (each holds this state); ranges of buffers still waiting
        // for the GPU retire before these pages, which wait for the same uses.
        let uses = self.pending.take();
        for arena in &mut self.arenas {
            let pages = arena.0.value_mut();
            for block in pages.blocks.drain(..).flatten() {
                self.device.retire(Garbage::Memory(Box::new(block)), uses.clone());
            }
        }
        self.device.ledger().untrack(self.id);
    }
}

/// A range of a known-flags pool's page buffer with no `Buffer` of its own: an offset, a size and
/// the page's `VkBuffer`, for data that lives a frame or less and is bound by offset (per-draw
/// constants, dynamic vertices) — the counterpart of VMA's virtual allocations, at the cost of a
/// sub-allocation (no name, no ledger entry, no state-tracking id). It keeps its pool alive, and
/// is released when dropped: at once when no GPU work may use it, else after the residency
/// submissions made before the drop and the uses declared with [`PoolRange::used_until`]
/// (deferred destruction, as for every resource). Made by [`BufferPool::allocate_range`].
pub struct PoolRange {
    /// Its arena handle (which keeps the pool alive). Dropped by `drop` (given to the arena's lent
    /// counts or dropped there), not by the field's own drop.
    arena: ManuallyDrop<Arc<PoolArena>>,
    buffer: vk::Buffer,
    memory: vk::DeviceMemory,
    offset: u64,
    size: u64,
    /// `None` only while it is released (in `drop`).
    allocation: Option<BlockAllocation>,
    mapped: Option<crate::device::blocks::MappedPtr>,
    uses: LastUses,
}

impl std::fmt::Debug for PoolRange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PoolRange")
            .field("pool", &self.arena.pool.desc.name)
            .field("offset", &self.offset)
            .field("size", &self.size)
            .finish_non_exhaustive()
    }
}

impl BufferPool {
    /// A range of `size` bytes of a page buffer of this known-flags pool, at a multiple of
    /// `alignment` (0: none) on top of the pool flags' offset floors (uniform, storage, texel, …,
    /// at least 16 B). Refused: an unknown-flags pool (its buffers are placed resources:
    /// [`BufferPool::init_buffer`]), a zero size or an alignment that is not a power of two
    /// ([`MemoryError::InvalidRequest`]), and a new page over budget or out of memory. A range
    /// larger than a page gets a page of its own.
    pub fn allocate_range(&self, size: u64, alignment: u64) -> Result<PoolRange, MemoryError> {
        let s = &self.shared;
        let alignment = s.range_request(size, alignment)?;
        let arena = self.handle();
        let (allocation, page, lent) = s.allocate_lending(arena, &s.desc.name, size, alignment, true)?;
        let (memory, mapped) = (page.memory, page.mapped);
        let buffer = page.page_buffer.expect("known-flags pages have a page buffer");
        Ok(PoolRange {
            arena: ManuallyDrop::new(lent.unwrap_or_else(|| Arc::clone(arena))),
            buffer,
            memory,
            offset: allocation.allocation.offset(),
            size,
            allocation: Some(allocation),
            mapped,
            uses: LastUses::default(),
        })
    }
}

impl PoolRange {
    /// The page's `VkBuffer` the range is part of.
    pub fn buffer(&self) -> vk::Buffer {
        self.buffer
    }

    /// Its offset in [`PoolRange::buffer`] (the page buffer is bound at offset 0 of its memory, so
    /// also its offset in [`PoolRange::memory`]).
    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// Its size in bytes.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// The page's memory and the range's offset in it.
    pub fn memory(&self) -> (vk::DeviceMemory, u64) {
        (self.memory, self.offset)
    }

    /// Whether the CPU can write and read it (a host-visible pool).
    pub fn is_mappable(&self) -> bool {
        self.mapped.is_some()
    }

    /// Declares that GPU work the renderer submitted itself uses the range until `until`:
    /// dropping it earlier defers its release until then. A use of another device is refused.
    pub fn used_until(&mut self, until: GpuUse) -> Result<(), crate::device::life::ForeignUse> {
        if until.device != self.arena.pool.device.uid() {
            return Err(crate::device::life::ForeignUse);
        }
        self.uses.note(until.point);
        Ok(())
    }

    /// Copies `data` into the range at `offset` (flushing non-coherent memory). Needs `&mut`: one
    /// writer. The GPU must not be using these bytes (order your submissions after the write).
    pub fn write(&mut self, offset: u64, data: &[u8]) -> Result<(), crate::resources::buffer::AccessError> {
        // SAFETY: `&mut self` makes this the only CPU access to the range's bytes.
        unsafe { self.span().write(offset, data) }
    }

    /// Copies bytes of the range at `offset` into `out` (invalidating non-coherent memory first).
    pub fn read(&self, offset: u64, out: &mut [u8]) -> Result<(), crate::resources::buffer::AccessError> {
        // SAFETY: `&self` excludes a `write` of this handle, the only writer of these bytes.
        unsafe { self.span().read(offset, out) }
    }

    fn span(&self) -> RangeSpan<'_> {
        let pool = &self.arena.pool;
        RangeSpan {
            device: &pool.device,
            type_index: pool.type_index,
            name: &pool.desc.name,
            memory: self.memory,
            start: self.offset,
            size: self.size,
            mapped: self.mapped,
        }
    }
}

/// A range's place in its page as its reads and writes need it ([`PoolRange`] and
/// `LocalRange`): the page's memory, its first byte there, its size and the page's mapping.
pub(crate) struct RangeSpan<'a> {
    pub(crate) device: &'a Device,
    pub(crate) type_index: u32,
    /// Its pool's name (for errors).
    pub(crate) name: &'a str,
    pub(crate) memory: vk::DeviceMemory,
    /// Its first byte in the page's memory (and page buffer).
    pub(crate) start: u64,
    pub(crate) size: u64,
    /// The page's persistent mapping, which lives as long as the page.
    pub(crate) mapped: Option<crate::device::blocks::MappedPtr>,
}

impl RangeSpan<'_> {
    /// Copies `data` into the range at `offset` (flushing non-coherent memory).
    ///
    /// # Safety
    /// The range is allocated (the allocator handed it out once, to the caller's handle) and
    /// nothing else reads or writes its bytes on the CPU during the call: the caller holds its
    /// handle by `&mut`.
    pub(crate) unsafe fn write(
        &self,
        offset: u64,
        data: &[u8],
    ) -> Result<(), crate::resources::buffer::AccessError> {
        let dst = self.bytes(offset, data.len())?;
        // SAFETY: `dst..dst + len` lies inside this range of the page's persistent mapping
        // (checked), which lives as long as the page, which the range's handle keeps alive; the
        // caller's exclusive hold of the handle makes this the only CPU access to those bytes
        // (this function's contract); `data` is ordinary host memory that cannot overlap the
        // mapping.
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), dst.as_ptr(), data.len()) };
        self.flush_or_invalidate(offset, data.len() as u64, true)
    }

    /// Copies bytes of the range at `offset` into `out` (invalidating non-coherent memory first).
    ///
    /// # Safety
    /// As for [`RangeSpan::write`], with a shared hold: no write of the range runs during the call.
    pub(crate) unsafe fn read(
        &self,
        offset: u64,
        out: &mut [u8],
    ) -> Result<(), crate::resources::buffer::AccessError> {
        let src = self.bytes(offset, out.len())?;
        self.flush_or_invalidate(offset, out.len() as u64, false)?;
        // SAFETY: as in `write`; the caller's contract excludes a concurrent write.
        unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), out.as_mut_ptr(), out.len()) };
        Ok(())
    }

    fn bytes(
        &self,
        offset: u64,
        len: usize,
    ) -> Result<std::ptr::NonNull<u8>, crate::resources::buffer::AccessError> {
        let name = || self.name.to_owned();
        let mapped =
            self.mapped.ok_or_else(|| crate::resources::buffer::AccessError::NotMappable { name: name() })?;
        let end = offset.checked_add(len as u64).filter(|&end| end <= self.size);
        let out = || crate::resources::buffer::AccessError::OutOfBounds {
            name: name(),
            offset,
            end: offset.saturating_add(len as u64),
            size: self.size,
        };
        end.ok_or_else(out)?;
        mapped.range(self.start + offset, len as u64).ok_or_else(out)
    }

    fn flush_or_invalidate(
        &self,
        offset: u64,
        len: u64,
        flush: bool,
    ) -> Result<(), crate::resources::buffer::AccessError> {
        let device = self.device;
        let coherent = device.memory_properties().types[self.type_index as usize].flags.host_coherent;
        if coherent || len == 0 {
            return Ok(());
        }
        // Ranges of a non-coherent pool are atom-aligned in offset and size (the page list's
        // atom), so the widened range never reaches a neighbour's bytes.
        let atom = device.limits().non_coherent_atom_size.max(1);
        let start = (self.start + offset) / atom * atom;
        let end = (self.start + offset + len).next_multiple_of(atom);
        let range = vk::MappedMemoryRange::default().memory(self.memory).offset(start).size(end - start);
        // SAFETY: the range lies in mapped memory of this device, atom-aligned, inside this
        // range's own allocation.
        let result = unsafe {
            if flush {
                device.raw().flush_mapped_memory_ranges(&[range])
            } else {
                device.raw().invalidate_mapped_memory_ranges(&[range])
            }
        };
        result.map_err(|r| crate::error::VulkanError::from_vk("vkFlushMappedMemoryRanges", r).into())
    }
}

impl Drop for PoolRange {
    fn drop(&mut self) {
        // SAFETY: `drop` runs once, and nothing reads `self.arena` after this (its own drop does
        // nothing: it is a `ManuallyDrop`).
        let handle = unsafe { ManuallyDrop::take(&mut self.arena) };
        let Some(allocation) = self.allocation.take() else { return };
        let uses = std::mem::take(&mut self.uses);
        let (pool, arena) = (&handle.pool, handle.index);
        if uses.is_empty() && pool.device.idle_so_far() {
            // Nothing may use it: straight back to the allocator (through this thread's cache, or
            // to the pages, which keep the handle's reference for the next range).
            PoolShared::release_range(handle, allocation);
            return;
        }
        let memory = ResourceMemory::Sub {
            owner: Some(Arc::downgrade(&handle) as _),
            allocation: SubAllocation::Block { arena, allocation },
        };
        // Released at once (the retire path's fast case) or after the uses; the arena, still
        // held here, notes them so the pool's pages retire after them too.
        if let Some(pending) = pool.device.retire(Garbage::Range(memory), uses) {
            handle.pending.note(&pending);
        }
    }
}
