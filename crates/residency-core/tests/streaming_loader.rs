//! Tile sources and the loader: every load submitted and not cancelled is delivered exactly once
//! with its source's texels; a cancelled one never is (queued, running or finished); a failing
//! source is a typed error; `poll` never waits. (That dropping the loader joins its workers after
//! their reads and starts no queued load is a unit test of `loader.rs`: it must see the loader's
//! stop flag to open its gate at the right moment.)

use residency_core::format::Format;
use residency_core::streaming::{
    DuplicateLoad, FnSource, LoadJob, RvtSource, SourceError, TileLoader, TileSource,
};
use residency_core::vt_file::{VtDesc, VtWriter};
use std::collections::HashMap;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

fn desc() -> VtDesc {
    VtDesc::new(Format::R8G8B8A8Unorm, 512, 512, 128, 128)
}

fn texels(mip: u32, x: u32, y: u32) -> Vec<u8> {
    let bytes = desc().tile_bytes(mip, x, y).unwrap() as usize;
    (0..bytes).map(|i| (i as u32 ^ (mip * 31 + x * 7 + y * 3)) as u8).collect()
}

fn procedural() -> Arc<dyn TileSource> {
    Arc::new(FnSource::new("procedural", desc(), |mip, x, y| Ok(texels(mip, x, y))))
}

/// A source whose reads block until the gate opens.
struct Gated {
    open: Mutex<bool>,
    changed: Condvar,
    reads: Mutex<u32>,
}

impl Gated {
    fn new() -> Arc<Gated> {
        Arc::new(Gated { open: Mutex::new(false), changed: Condvar::new(), reads: Mutex::new(0) })
    }

    fn open(&self) {
        *self.open.lock().unwrap() = true;
        self.changed.notify_all();
    }

    fn reads(&self) -> u32 {
        *self.reads.lock().unwrap()
    }
}

impl TileSource for Gated {
    fn name(&self) -> &str {
        "gated"
    }

    fn desc(&self) -> VtDesc {
        desc()
    }

    fn read_tile(&self, mip: u32, x: u32, y: u32) -> Result<Vec<u8>, SourceError> {
        *self.reads.lock().unwrap() += 1;
        let mut open = self.open.lock().unwrap();
        while !*open {
            open = self.changed.wait(open).unwrap();
        }
        Ok(texels(mip, x, y))
    }
}

fn wait_until(what: &str, cond: impl Fn() -> bool) {
    let start = Instant::now();
    while !cond() {
        // A hang guard, not a speed bound.
        assert!(start.elapsed() < Duration::from_secs(60), "timed out waiting until {what}");
        std::thread::sleep(Duration::from_millis(1));
    }
}

#[test]
fn every_load_not_cancelled_is_delivered_once_with_its_texels() {
    let loader = TileLoader::new(4);
    let source = procedural();
    let mut want: HashMap<u32, Vec<(u32, u32, u32)>> = HashMap::new();
    let mut s = 0x2545_f491_4f6c_dd1du64;
    let mut cancelled = 0;
    let mut got: HashMap<u32, Vec<Vec<u8>>> = HashMap::new();
    for token in 0..400u32 {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        let mip = (s % 3) as u32;
        let (gx, gy) = desc().tile_grid(mip);
        let tiles: Vec<_> =
            (0..1 + s % 3).map(|k| (mip, (s as u32 + k as u32) % gx, (s >> 8) as u32 % gy)).collect();
        loader.submit(LoadJob { token, source: Arc::clone(&source), tiles: tiles.clone() }).unwrap();
        want.insert(token, tiles);
        if s % 5 == 0 {
            // Cancel a random earlier load not delivered yet: whatever its stage, it is never
            // delivered (one already taken from `poll` is no longer pending).
            let victim = (s >> 16) as u32 % (token + 1);
            if !got.contains_key(&victim) && want.remove(&victim).is_some() {
                assert!(loader.cancel(&victim));
                cancelled += 1;
            }
        }
        if token % 16 == 0 {
            for done in loader.poll() {
                assert!(got.insert(done.token, done.result.unwrap()).is_none(), "delivered twice");
            }
        }
    }
    loader.wait_idle();
    for done in loader.poll() {
        assert!(got.insert(done.token, done.result.unwrap()).is_none(), "delivered twice");
    }
    assert!(cancelled > 0);
    assert_eq!(loader.pending(), 0);
    assert_eq!(got.len(), want.len(), "exactly the loads not cancelled");
    for (token, tiles) in &want {
        let data = &got[token];
        assert_eq!(data.len(), tiles.len());
        for (bytes, &(mip, x, y)) in data.iter().zip(tiles) {
            assert_eq!(bytes, &texels(mip, x, y));
        }
    }
}

#[test]
fn a_load_cancelled_while_it_runs_is_dropped_and_a_resubmission_delivered_once() {
    let loader = TileLoader::new(1);
    let gated = Gated::new();
    let source: Arc<dyn TileSource> = gated.clone();
    loader.submit(LoadJob { token: 7u32, source: Arc::clone(&source), tiles: vec![(0, 0, 0)] }).unwrap();
    wait_until("the read has started", || gated.reads() == 1);
    assert_eq!(
        loader.submit(LoadJob { token: 7, source: Arc::clone(&source), tiles: vec![] }),
        Err(DuplicateLoad)
    );
    assert!(loader.poll().is_empty(), "poll does not wait for the running read");
    assert!(loader.cancel(&7));
    assert!(!loader.cancel(&7), "no longer pending");
    // The same token again, while the cancelled read still runs: only the new load is delivered.
    loader.submit(LoadJob { token: 7, source, tiles: vec![(1, 0, 0)] }).unwrap();
    gated.open();
    loader.wait_idle();
    let done = loader.poll();
    assert_eq!(done.len(), 1);
    assert_eq!(done[0].result.as_ref().unwrap(), &vec![texels(1, 0, 0)]);
    assert_eq!(loader.pending(), 0);
}

#[test]
fn a_failing_source_is_a_typed_error_and_the_loader_goes_on() {
    let loader = TileLoader::new(2);
    let failing: Arc<dyn TileSource> = Arc::new(FnSource::new("failing", desc(), |_, _, _| {
        Err(SourceError::Read { source_name: "failing".into(), reason: "disk on fire".into() })
    }));
    loader.submit(LoadJob { token: 1u32, source: failing, tiles: vec![(0, 0, 0)] }).unwrap();
    loader.submit(LoadJob { token: 2, source: procedural(), tiles: vec![(0, 9, 9)] }).unwrap();
    loader.submit(LoadJob { token: 3, source: procedural(), tiles: vec![(0, 1, 1)] }).unwrap();
    loader.wait_idle();
    let mut done = loader.poll();
    done.sort_by_key(|d| d.token);
    assert!(matches!(&done[0].result, Err(SourceError::Read { reason, .. }) if reason == "disk on fire"));
    assert!(matches!(&done[1].result, Err(SourceError::NoSuchTile { mip: 0, x: 9, y: 9, .. })));
    assert_eq!(done[2].result.as_ref().unwrap(), &vec![texels(0, 1, 1)]);
}

#[test]
fn an_rvt_file_is_a_tile_source() {
    let desc = desc();
    let path = std::env::temp_dir().join(format!("residency-source-{}.rvt", std::process::id()));
    let mut writer = VtWriter::new(std::fs::File::create(&path).unwrap(), desc).unwrap();
    for mip in 0..desc.mip_count {
        let (gx, gy) = desc.tile_grid(mip);
        for y in 0..gy {
            for x in 0..gx {
                writer.write_tile(mip, x, y, &texels(mip, x, y)).unwrap();
            }
        }
    }
    writer.finish().unwrap();
    let source: Arc<dyn TileSource> = Arc::new(RvtSource::open(&path).unwrap());
    assert_eq!(source.desc(), desc);
    let loader = TileLoader::new(3);
    let tiles: Vec<_> = (0..4).flat_map(|y| (0..4).map(move |x| (0, x, y))).collect();
    loader.submit(LoadJob { token: "mip 0", source: Arc::clone(&source), tiles: tiles.clone() }).unwrap();
    loader.wait_idle();
    let done = loader.poll();
    for (bytes, &(mip, x, y)) in done[0].result.as_ref().unwrap().iter().zip(&tiles) {
        assert_eq!(bytes, &texels(mip, x, y));
    }
    assert!(matches!(source.read_tile(0, 4, 0), Err(SourceError::NoSuchTile { .. })));
    assert!(matches!(RvtSource::open(path.with_extension("missing")), Err(SourceError::Read { .. })));
    std::fs::remove_file(&path).unwrap();
}

/// Runs `body` on a thread and fails if it has not finished within 60 s (a hang fails the test).
fn within_a_minute(body: impl FnOnce() + Send + 'static) {
    let (tx, rx) = std::sync::mpsc::channel();
    let handle = std::thread::spawn(move || {
        body();
        let _ = tx.send(());
    });
    match rx.recv_timeout(Duration::from_secs(60)) {
        Ok(()) => handle.join().unwrap(),
        Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
            std::panic::resume_unwind(handle.join().unwrap_err())
        }
        Err(std::sync::mpsc::RecvTimeoutError::Timeout) => panic!("hung: not finished within 60 s"),
    }
}

/// A source that panics on mip 1 and drops with a panic: the loader's worker survives both.
struct Panicking;

impl TileSource for Panicking {
    fn name(&self) -> &str {
        "panicking"
    }
    fn desc(&self) -> VtDesc {
        desc()
    }
    fn read_tile(&self, mip: u32, x: u32, y: u32) -> Result<Vec<u8>, SourceError> {
        assert!(mip != 1, "a source's bug on mip {mip}");
        Ok(texels(mip, x, y))
    }
}

impl Drop for Panicking {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            panic!("a source whose drop panics");
        }
    }
}

#[test]
fn misuse_a_panicking_source_is_a_failed_load_and_the_worker_survives() {
    within_a_minute(|| {
        // One worker: if the panic killed it, nothing after would load and `wait_idle` would hang.
        let loader = TileLoader::new(1);
        let panicking: Arc<dyn TileSource> = Arc::new(Panicking);
        for round in 0..3u32 {
            loader
                .submit(LoadJob { token: round * 2, source: Arc::clone(&panicking), tiles: vec![(1, 0, 0)] })
                .unwrap();
            loader
                .submit(LoadJob { token: round * 2 + 1, source: procedural(), tiles: vec![(0, 1, 1)] })
                .unwrap();
            loader.wait_idle();
            let mut done = loader.poll();
            done.sort_by_key(|d| d.token);
            assert_eq!(done.len(), 2);
            match &done[0].result {
                Err(SourceError::Panicked { source_name, mip: 1, x: 0, y: 0, message }) => {
                    assert_eq!(source_name, "panicking");
                    assert!(message.contains("a source's bug on mip 1"), "{message}");
                }
                other => panic!("expected a Panicked failure, got {other:?}"),
            }
            assert_eq!(done[1].result.as_ref().unwrap(), &vec![texels(0, 1, 1)]);
            assert_eq!((loader.pending(), loader.workers()), (0, 1));
        }
        // The last reference dropped on the worker: its panicking `Drop` does not kill it.
        loader.submit(LoadJob { token: 100, source: panicking, tiles: vec![(0, 0, 0)] }).unwrap();
        loader.wait_idle();
        loader.submit(LoadJob { token: 101, source: procedural(), tiles: vec![(0, 0, 0)] }).unwrap();
        loader.wait_idle();
        let tokens: Vec<u32> = loader.poll().iter().filter(|d| d.result.is_ok()).map(|d| d.token).collect();
        assert_eq!(tokens.len(), 2, "both loads delivered: {tokens:?}");
        assert_eq!(loader.workers(), 1);
    });
}

#[test]
fn misuse_a_huge_worker_count_is_clamped() {
    within_a_minute(|| {
        let loader = TileLoader::<u32>::new(usize::MAX);
        assert_eq!(loader.workers(), residency_core::streaming::MAX_LOADER_WORKERS);
    });
}

#[test]
fn misuse_a_source_reading_its_own_tile_through_the_cache_is_refused_not_a_deadlock() {
    use residency_core::streaming::{CachedSource, DecodedTileCache};
    use std::sync::OnceLock;
    within_a_minute(|| {
        let cache = DecodedTileCache::new(1 << 20);
        let me: Arc<OnceLock<Arc<CachedSource>>> = Arc::new(OnceLock::new());
        let inner = Arc::clone(&me);
        let recursive: Arc<dyn TileSource> =
            Arc::new(FnSource::new("recursive", desc(), move |mip, x, y| {
                // Reads itself through the cache: it would wait for its own decode.
                inner.get().expect("registered").read_tile(mip, x, y)
            }));
        let source = cache.source(recursive);
        me.set(Arc::clone(&source)).unwrap();
        let err = source.read_tile(0, 0, 0).unwrap_err();
        assert!(matches!(err, SourceError::Read { .. }), "{err}");
        // Nothing stays marked as decoding: another read is refused the same way, not hung.
        assert!(source.read_tile(0, 0, 0).is_err());
        assert_eq!(cache.stats().entries, 0);
        // A panicking decode leaves nothing behind either.
        let panicking =
            cache.source(Arc::new(FnSource::new("p", desc(), |_, _, _| -> Result<Vec<u8>, SourceError> {
                panic!("decoder bug")
            })));
        let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| panicking.read_tile(0, 0, 0)));
        assert!(caught.is_err());
        let loader = TileLoader::new(2);
        let shared: Arc<dyn TileSource> = panicking;
        for token in 0..4u32 {
            loader.submit(LoadJob { token, source: Arc::clone(&shared), tiles: vec![(0, 0, 0)] }).unwrap();
        }
        loader.wait_idle();
        let done = loader.poll();
        assert_eq!(done.len(), 4);
        assert!(done.iter().all(|d| matches!(d.result, Err(SourceError::Panicked { .. }))));
    });
}
