//! Decoded tiles shared between the streamers of several devices: a tile one device's loader
//! decoded is handed to every other device that asks for it while it is in the cache.
//!
//! A [`DecodedTileCache`] is bounded by bytes (least recently used entries go first) and keyed by
//! (source, mip, x, y). [`DecodedTileCache::source`] registers a [`TileSource`] with the cache and
//! returns a [`CachedSource`]; [`CachedSource::for_requester`] gives each device its own
//! [`TileSource`] over it (counted per requester), which that device's loader reads. A read finds
//! the tile in the cache (a hit), or waits for the read of another requester already decoding it
//! (a hit too, counted as a wait), or decodes it itself (a decode) and inserts it. So while a
//! tile stays in the cache it is decoded once, however many devices ask, also when they ask at the
//! same time. A failed read is not cached: each requester that wanted it sees the failure of its
//! own read (a waiter reads again itself).
//!
//! Pure CPU; no GPU types.

use super::source::{SourceDepth, SourceError, TileSource};
use crate::device_mask::DeviceIndex;
use crate::poison::{PoisonFree, PoisonFreeWait};
use crate::vt_file::VtDesc;
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::ThreadId;

/// One decoded tile's key: the source (as registered with the cache) and the tile.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CacheKey {
    /// The source's id in its cache ([`CachedSource::id`]).
    pub source: u64,
    /// The mip.
    pub mip: u32,
    /// Tile column.
    pub x: u32,
    /// Tile row.
    pub y: u32,
    /// Tile slab (a volume's depth; 0 for 2D textures).
    pub z: u32,
}

/// A cache's counters (all requesters together, or one requester's: then `entries`, `bytes`,
/// `evictions` and `capacity_bytes` are the cache's).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CacheStats {
    /// Reads answered from the cache (waits included).
    pub hits: u64,
    /// Of the hits, reads that waited for another requester's decode of the same tile.
    pub waits: u64,
    /// Reads that decoded the tile (read the source).
    pub decodes: u64,
    /// Decodes that failed (not cached).
    pub failures: u64,
    /// Entries evicted to stay within the capacity.
    pub evictions: u64,
    /// Tiles in the cache now.
    pub entries: u64,
    /// Bytes of them.
    pub bytes: u64,
    /// The capacity in bytes.
    pub capacity_bytes: u64,
}

impl CacheStats {
    /// Hits over all reads (0 before any read).
    pub fn hit_rate(&self) -> f64 {
        let reads = self.hits + self.decodes;
        if reads == 0 {
            0.0
        } else {
            self.hits as f64 / reads as f64
        }
    }
}

#[derive(Clone, Copy, Debug, Default)]
struct Counters {
    hits: u64,
    waits: u64,
    decodes: u64,
    failures: u64,
}

impl Counters {
    fn add(&mut self, other: Counters) {
        self.hits += other.hits;
        self.waits += other.waits;
        self.decodes += other.decodes;
        self.failures += other.failures;
    }
}

struct Entry {
    data: Arc<[u8]>,
    /// Its place in `State::lru`.
    stamp: u64,
}

#[derive(Default)]
struct State {
    entries: HashMap<CacheKey, Entry>,
    /// Least recently used first.
    lru: BTreeMap<u64, CacheKey>,
    /// Tiles a requester is decoding now, with the thread decoding each (others wait for it;
    /// that thread asking again is refused: it would wait for itself).
    decoding: HashMap<CacheKey, ThreadId>,
    bytes: u64,
    next_stamp: u64,
    next_source: u64,
    evictions: u64,
    /// Per requester (`None`: a [`CachedSource`] read directly).
    counters: BTreeMap<Option<DeviceIndex>, Counters>,
}

/// A bounded cache of decoded tiles shared by several readers (see the module docs).
pub struct DecodedTileCache {
    capacity_bytes: u64,
    state: Mutex<State>,
    /// Waiters for a decode in progress.
    decoded: Condvar,
}

impl std::fmt::Debug for DecodedTileCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DecodedTileCache").field("stats", &self.stats()).finish()
    }
}

/// Takes a tile out of `decoding` when its decode ends, also when the source panics, so that
/// waiters never wait for a decode that will not finish.
struct Decoding<'a> {
    cache: &'a DecodedTileCache,
    key: CacheKey,
}

impl Drop for Decoding<'_> {
    fn drop(&mut self) {
        self.cache.lock().decoding.remove(&self.key);
        self.cache.decoded.notify_all();
    }
}

impl DecodedTileCache {
    /// A cache holding at most `capacity_bytes` of decoded tiles (a tile larger than that is
    /// never kept).
    pub fn new(capacity_bytes: u64) -> Arc<DecodedTileCache> {
        Arc::new(DecodedTileCache {
            capacity_bytes,
            state: Mutex::new(State { next_source: 1, ..State::default() }),
            decoded: Condvar::new(),
        })
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.locked()
    }

    /// Registers `inner` with the cache under a new id: its tiles are cached under that id.
    /// Register a source once and share the result (registering it twice caches it twice).
    pub fn source(self: &Arc<Self>, inner: Arc<dyn TileSource>) -> Arc<CachedSource> {
        let id = {
            let mut state = self.lock();
            let id = state.next_source;
            state.next_source += 1;
            id
        };
        Arc::new(CachedSource { id, inner, cache: Arc::clone(self) })
    }

    /// The capacity in bytes.
    pub fn capacity_bytes(&self) -> u64 {
        self.capacity_bytes
    }

    /// The counters of every requester together.
    pub fn stats(&self) -> CacheStats {
        let state = self.lock();
        let mut total = Counters::default();
        for c in state.counters.values() {
            total.add(*c);
        }
        self.stats_of(&state, total)
    }

    /// The counters of the reads of `requester` (`None`: reads through a [`CachedSource`]
    /// directly).
    pub fn requester_stats(&self, requester: Option<DeviceIndex>) -> CacheStats {
        let state = self.lock();
        let counters = state.counters.get(&requester).copied().unwrap_or_default();
        self.stats_of(&state, counters)
    }

    fn stats_of(&self, state: &State, c: Counters) -> CacheStats {
        CacheStats {
            hits: c.hits,
            waits: c.waits,
            decodes: c.decodes,
            failures: c.failures,
            evictions: state.evictions,
            entries: state.entries.len() as u64,
            bytes: state.bytes,
            capacity_bytes: self.capacity_bytes,
        }
    }

    /// Whether `key` is in the cache now.
    pub fn contains(&self, key: CacheKey) -> bool {
        self.lock().entries.contains_key(&key)
    }

    /// Drops every entry (counters are kept).
    pub fn clear(&self) {
        let mut state = self.lock();
        state.entries.clear();
        state.lru.clear();
        state.bytes = 0;
    }

    /// The tile of `key`: from the cache, after another requester's decode of it, or from
    /// `decode` (whose result is cached when it succeeds and fits). A `decode` that asks the cache
    /// for the tile it is decoding (a source that reads itself through the cache) would wait for
    /// itself: that read is refused with [`SourceError::Read`]. A `decode` that panics leaves
    /// nothing behind (waiters decode the tile themselves) and the panic goes on to the caller.
    pub fn get_or_decode(
        &self,
        key: CacheKey,
        requester: Option<DeviceIndex>,
        decode: impl FnOnce() -> Result<Vec<u8>, SourceError>,
    ) -> Result<Vec<u8>, SourceError> {
        let mut state = self.lock();
        let mut waited = false;
        loop {
            if let Some(data) = Self::touch(&mut state, key) {
                let c = state.counters.entry(requester).or_default();
                c.hits += 1;
                c.waits += u64::from(waited);
                return Ok(data.to_vec());
            }
            match state.decoding.get(&key) {
                None => break,
                Some(&thread) if thread == std::thread::current().id() => {
                    return Err(SourceError::Read {
                        source_name: format!("decoded tile cache source {}", key.source),
                        reason: format!(
                            "tile ({}, {}, {}) of mip {} read again by the read decoding it",
                            key.x, key.y, key.z, key.mip
                        ),
                    });
                }
                Some(_) => {}
            }
            waited = true;
            state = self.decoded.wait_locked(state);
        }
        state.decoding.insert(key, std::thread::current().id());
        drop(state);
        let guard = Decoding { cache: self, key };
        let result = decode();
        {
            let mut state = self.lock();
            let c = state.counters.entry(requester).or_default();
            c.decodes += 1;
            match &result {
                Ok(data) => self.insert(&mut state, key, data),
                Err(_) => c.failures += 1,
            }
        }
        drop(guard);
        result
    }

    /// The entry of `key`, now the most recently used.
    fn touch(state: &mut State, key: CacheKey) -> Option<Arc<[u8]>> {
        let stamp = state.next_stamp;
        let entry = state.entries.get_mut(&key)?;
        let old = std::mem::replace(&mut entry.stamp, stamp);
        let data = Arc::clone(&entry.data);
        state.next_stamp += 1;
        state.lru.remove(&old);
        state.lru.insert(stamp, key);
        Some(data)
    }

    fn insert(&self, state: &mut State, key: CacheKey, data: &[u8]) {
        let size = data.len() as u64;
        if size > self.capacity_bytes || state.entries.contains_key(&key) {
            return;
        }
        while state.bytes + size > self.capacity_bytes {
            let Some((_, oldest)) = state.lru.pop_first() else { break };
            if let Some(e) = state.entries.remove(&oldest) {
                state.bytes -= e.data.len() as u64;
                state.evictions += 1;
            }
        }
        let stamp = state.next_stamp;
        state.next_stamp += 1;
        state.lru.insert(stamp, key);
        state.entries.insert(key, Entry { data: data.into(), stamp });
        state.bytes += size;
    }
}

/// A [`TileSource`] registered with a [`DecodedTileCache`]: reads go through the cache. Give
/// each device [`CachedSource::for_requester`] to count its reads apart.
pub struct CachedSource {
    id: u64,
    inner: Arc<dyn TileSource>,
    cache: Arc<DecodedTileCache>,
}

impl std::fmt::Debug for CachedSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CachedSource").field("id", &self.id).field("inner", &self.inner.name()).finish()
    }
}

impl CachedSource {
    /// Its id in the cache (the `source` of its [`CacheKey`]s).
    pub fn id(&self) -> u64 {
        self.id
    }

    /// The cache.
    pub fn cache(&self) -> &Arc<DecodedTileCache> {
        &self.cache
    }

    /// The source it reads on a miss.
    pub fn inner(&self) -> &Arc<dyn TileSource> {
        &self.inner
    }

    /// The key of tile (`x`, `y`) of `mip`.
    pub fn key(&self, mip: u32, x: u32, y: u32) -> CacheKey {
        self.key_at(mip, x, y, 0)
    }

    /// The key of tile (`x`, `y`, `z`) of `mip` (a volume's).
    pub fn key_at(&self, mip: u32, x: u32, y: u32, z: u32) -> CacheKey {
        CacheKey { source: self.id, mip, x, y, z }
    }

    /// The source as `requester` reads it: the same tiles through the same cache, counted under
    /// that requester ([`DecodedTileCache::requester_stats`]).
    pub fn for_requester(self: &Arc<Self>, requester: DeviceIndex) -> Arc<dyn TileSource> {
        Arc::new(RequesterSource { source: Arc::clone(self), requester: Some(requester) })
    }

    fn read(&self, requester: Option<DeviceIndex>, [mip, x, y, z]: [u32; 4]) -> Result<Vec<u8>, SourceError> {
        // A 2D source's `read_tile_at` is its `read_tile` for z = 0.
        self.cache
            .get_or_decode(self.key_at(mip, x, y, z), requester, || self.inner.read_tile_at(mip, x, y, z))
    }
}

impl TileSource for CachedSource {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn desc(&self) -> VtDesc {
        self.inner.desc()
    }

    fn read_tile(&self, mip: u32, x: u32, y: u32) -> Result<Vec<u8>, SourceError> {
        self.read(None, [mip, x, y, 0])
    }

    fn depth(&self) -> SourceDepth {
        self.inner.depth()
    }

    fn read_tile_at(&self, mip: u32, x: u32, y: u32, z: u32) -> Result<Vec<u8>, SourceError> {
        self.read(None, [mip, x, y, z])
    }
}

/// One requester's view of a [`CachedSource`].
struct RequesterSource {
    source: Arc<CachedSource>,
    requester: Option<DeviceIndex>,
}

impl TileSource for RequesterSource {
    fn name(&self) -> &str {
        self.source.name()
    }

    fn desc(&self) -> VtDesc {
        self.source.desc()
    }

    fn read_tile(&self, mip: u32, x: u32, y: u32) -> Result<Vec<u8>, SourceError> {
        self.source.read(self.requester, [mip, x, y, 0])
    }

    fn depth(&self) -> SourceDepth {
        self.source.depth()
    }

    fn read_tile_at(&self, mip: u32, x: u32, y: u32, z: u32) -> Result<Vec<u8>, SourceError> {
        self.source.read(self.requester, [mip, x, y, z])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::Format;
    use crate::streaming::FnSource;
    use std::sync::atomic::{AtomicU64, Ordering};

    fn counting(reads: Arc<AtomicU64>, fail_mip: Option<u32>) -> Arc<dyn TileSource> {
        let desc = VtDesc::new(Format::R8G8B8A8Unorm, 512, 512, 128, 128);
        Arc::new(FnSource::new("counted", desc, move |mip, x, y| {
            reads.fetch_add(1, Ordering::SeqCst);
            if Some(mip) == fail_mip {
                return Err(SourceError::Read { source_name: "counted".into(), reason: "damaged".into() });
            }
            Ok(vec![(mip * 16 + y * 4 + x) as u8; 1024])
        }))
    }

    fn d(i: u32) -> DeviceIndex {
        DeviceIndex::new(i).unwrap()
    }

    #[test]
    fn a_tile_read_by_two_requesters_is_decoded_once() {
        let reads = Arc::new(AtomicU64::new(0));
        let cache = DecodedTileCache::new(1 << 20);
        let source = cache.source(counting(Arc::clone(&reads), None));
        let (a, b) = (source.for_requester(d(0)), source.for_requester(d(1)));
        let first = a.read_tile(0, 1, 2).unwrap();
        assert_eq!(b.read_tile(0, 1, 2).unwrap(), first);
        assert_eq!(reads.load(Ordering::SeqCst), 1);
        assert_eq!(cache.requester_stats(Some(d(0))).decodes, 1);
        assert_eq!(cache.requester_stats(Some(d(1))).hits, 1);
        assert_eq!(cache.requester_stats(Some(d(1))).decodes, 0);
        let total = cache.stats();
        assert_eq!((total.hits, total.decodes, total.entries, total.bytes), (1, 1, 1, 1024));
        assert!((total.hit_rate() - 0.5).abs() < 1e-9);
    }

    #[test]
    fn a_volume_s_slabs_are_cached_apart_and_keep_their_depth() {
        use crate::streaming::FnVolumeSource;
        let reads = Arc::new(AtomicU64::new(0));
        let counted = Arc::clone(&reads);
        let desc = VtDesc::new(Format::R8G8B8A8Unorm, 64, 64, 32, 32);
        let volume: Arc<dyn TileSource> =
            Arc::new(FnVolumeSource::new("volume", desc, SourceDepth::new(64, 16), move |mip, x, y, z| {
                counted.fetch_add(1, Ordering::SeqCst);
                Ok(vec![mip as u8, x as u8, y as u8, z as u8])
            }));
        let cache = DecodedTileCache::new(1 << 20);
        let source = cache.source(volume);
        let view = source.for_requester(d(0));
        assert_eq!(view.depth(), SourceDepth::new(64, 16));
        assert_eq!(view.read_tile_at(0, 1, 0, 3).unwrap(), [0, 1, 0, 3]);
        assert_eq!(view.read_tile_at(0, 1, 0, 2).unwrap(), [0, 1, 0, 2]);
        assert_eq!(source.read_tile_at(0, 1, 0, 3).unwrap(), [0, 1, 0, 3]);
        assert_eq!(reads.load(Ordering::SeqCst), 2, "two slabs decoded, one read from the cache");
        assert!(cache.contains(source.key_at(0, 1, 0, 3)) && !cache.contains(source.key(0, 1, 0)));
    }

    #[test]
    fn concurrent_readers_of_one_tile_wait_for_one_decode() {
        let reads = Arc::new(AtomicU64::new(0));
        let cache = DecodedTileCache::new(1 << 20);
        let inner = counting(Arc::clone(&reads), None);
        let slow: Arc<dyn TileSource> = Arc::new(FnSource::new("slow", inner.desc(), move |mip, x, y| {
            std::thread::sleep(std::time::Duration::from_millis(20));
            inner.read_tile(mip, x, y)
        }));
        let source = cache.source(slow);
        std::thread::scope(|s| {
            for i in 0..8 {
                let view = source.for_requester(d(i % 2));
                s.spawn(move || view.read_tile(1, 0, 1).unwrap());
            }
        });
        assert_eq!(reads.load(Ordering::SeqCst), 1, "one decode for eight readers");
        let stats = cache.stats();
        assert_eq!((stats.decodes, stats.hits), (1, 7));
    }

    #[test]
    fn the_capacity_evicts_the_least_recently_used_tile() {
        let reads = Arc::new(AtomicU64::new(0));
        let cache = DecodedTileCache::new(2048);
        let source = cache.source(counting(Arc::clone(&reads), None));
        source.read_tile(0, 0, 0).unwrap();
        source.read_tile(0, 1, 0).unwrap();
        source.read_tile(0, 0, 0).unwrap(); // (0, 0) is now the most recent
        source.read_tile(0, 2, 0).unwrap(); // evicts (1, 0)
        assert!(cache.contains(source.key(0, 0, 0)));
        assert!(!cache.contains(source.key(0, 1, 0)));
        assert!(cache.contains(source.key(0, 2, 0)));
        let stats = cache.stats();
        assert_eq!((stats.entries, stats.bytes, stats.evictions), (2, 2048, 1));
        source.read_tile(0, 1, 0).unwrap();
        assert_eq!(reads.load(Ordering::SeqCst), 4, "an evicted tile is decoded again");
        // A tile larger than the cache is never kept.
        let tiny = DecodedTileCache::new(100);
        let s = tiny.source(counting(Arc::new(AtomicU64::new(0)), None));
        s.read_tile(0, 0, 0).unwrap();
        assert_eq!(tiny.stats().entries, 0);
    }

    /// Tiles of varied sizes: tile (`mip`, x, y) of the counting source below is
    /// `256 * (1 + (x + y) % 4)` bytes of one value.
    fn sized(reads: Arc<AtomicU64>) -> Arc<dyn TileSource> {
        let desc = VtDesc::new(Format::R8G8B8A8Unorm, 1024, 1024, 128, 128);
        Arc::new(FnSource::new("sized", desc, move |mip, x, y| {
            reads.fetch_add(1, Ordering::SeqCst);
            Ok(vec![(mip * 64 + y * 8 + x) as u8; 256 * (1 + (x + y) as usize % 4)])
        }))
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig { cases: 96, ..Default::default() })]

        /// Against a model of an LRU cache of bytes: every read returns the tile's texels, the
        /// cache holds what the model holds (never more than the capacity), and the source is
        /// read exactly when the model misses.
        #[test]
        fn reads_match_a_least_recently_used_model(
            capacity in 0u64..4096,
            reads in proptest::collection::vec((0u32..2, 0u32..3, 0u32..3, 0u32..2), 1..120),
        ) {
            let counter = Arc::new(AtomicU64::new(0));
            let cache = DecodedTileCache::new(capacity);
            let source = cache.source(sized(Arc::clone(&counter)));
            let views = [source.for_requester(d(0)), source.for_requester(d(1))];
            // The model: (key, bytes), least recently used first.
            let mut model: Vec<((u32, u32, u32), u64)> = Vec::new();
            let mut misses = 0u64;
            for (mip, x, y, requester) in reads {
                let size = 256 * (1 + u64::from(x + y) % 4);
                let got = views[requester as usize].read_tile(mip, x, y).unwrap();
                proptest::prop_assert_eq!(got, vec![(mip * 64 + y * 8 + x) as u8; size as usize]);
                match model.iter().position(|(k, _)| *k == (mip, x, y)) {
                    Some(i) => {
                        let entry = model.remove(i);
                        model.push(entry);
                    }
                    None => {
                        misses += 1;
                        if size <= capacity {
                            while model.iter().map(|(_, b)| b).sum::<u64>() + size > capacity {
                                model.remove(0);
                            }
                            model.push(((mip, x, y), size));
                        }
                    }
                }
                let stats = cache.stats();
                proptest::prop_assert_eq!(counter.load(Ordering::SeqCst), misses);
                proptest::prop_assert_eq!(stats.decodes, misses);
                proptest::prop_assert_eq!(stats.entries, model.len() as u64);
                proptest::prop_assert_eq!(stats.bytes, model.iter().map(|(_, b)| b).sum::<u64>());
                proptest::prop_assert!(stats.bytes <= capacity);
                for ((m, kx, ky), _) in &model {
                    proptest::prop_assert!(cache.contains(source.key(*m, *kx, *ky)));
                }
            }
            let (a, b) = (cache.requester_stats(Some(d(0))), cache.requester_stats(Some(d(1))));
            proptest::prop_assert_eq!(a.hits + b.hits, cache.stats().hits);
            proptest::prop_assert_eq!(a.decodes + b.decodes, misses);
        }
    }

    #[test]
    fn failures_are_not_cached_and_sources_are_kept_apart() {
        let reads = Arc::new(AtomicU64::new(0));
        let cache = DecodedTileCache::new(1 << 20);
        let source = cache.source(counting(Arc::clone(&reads), Some(2)));
        assert!(source.read_tile(2, 0, 0).is_err());
        assert!(source.read_tile(2, 0, 0).is_err());
        assert_eq!(reads.load(Ordering::SeqCst), 2, "a failure is read again");
        assert_eq!(cache.stats().failures, 2);
        assert_eq!(cache.stats().entries, 0);
        // The same tile of another source is another entry.
        let other = cache.source(counting(Arc::clone(&reads), None));
        source.read_tile(0, 0, 0).unwrap();
        other.read_tile(0, 0, 0).unwrap();
        assert_ne!(source.id(), other.id());
        assert_eq!(cache.stats().entries, 2);
        // A requester's counters start at zero.
        assert_eq!(
            cache.requester_stats(Some(d(3))),
            CacheStats { hits: 0, waits: 0, decodes: 0, failures: 0, ..cache.stats() }
        );
    }
}
