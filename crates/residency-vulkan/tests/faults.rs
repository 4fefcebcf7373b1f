//! Fault injection through the device ledger's hook: out of device memory at every allocation and
//! resource creation of a scenario (pools, placed, committed and staging buffers, sparse tile heaps
//! and images, multi-device buffers), failing `vkQueueBindSparse` with the page table and the tile
//! pool rolled back, and a lost device (submit, fence wait, bind) that fails fast with a typed
//! error and tears down without leaks or hangs. Every failure is read through its class
//! ([`ResidencyError`]), whatever shape it comes in. Every test runs under `with_gpu`:
//! synchronization validation on, and no object may outlive it.

mod common;
use common::{accounting, Accounting};
use residency_core::device_mask::DeviceMask;
use residency_core::format::Format;
use residency_core::memory::MemoryIntent;
use residency_core::tiles::{PoolStats, SparseImageDesc, TexelRegion, TileIndex, TilePoolDesc};
use residency_core::usage::{BufferPoolUsage, BufferUsage};
use residency_vulkan::multi::MultiBuffer;
use residency_vulkan::sparse::software::{SoftwareImage, SoftwareTilePool, DEFAULT_BORDER};
use residency_vulkan::sparse::{SparseImage, SparseTilePool};
use residency_vulkan::testing::with_gpu;
use residency_vulkan::{
    BufferDesc, BufferInit, BufferPool, BufferPoolDesc, Device, DeviceSet, FaultSite, ImageRegion,
    InjectedFault, ResidencyError, Uploader,
};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// What a failed step reported: its class ([`ResidencyError`]), whatever shape the error has.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Failure {
    OutOfMemory,
    DeviceLost,
    Other(String),
}

fn failure(e: &impl ResidencyError) -> Failure {
    if e.is_out_of_memory() {
        Failure::OutOfMemory
    } else if e.is_device_lost() {
        Failure::DeviceLost
    } else {
        Failure::Other(e.to_string())
    }
}

const TEXEL_BYTES: u32 = 4;

fn tile_data(seed: u8, width: u32, height: u32) -> Vec<u8> {
    (0..width * height * TEXEL_BYTES).map(|i| (i % 251) as u8 ^ seed).collect()
}

fn tile_region(image: &SparseImage, tile: [u32; 2]) -> TexelRegion {
    let shape = image.layout().tile_shape();
    TexelRegion {
        offset: [tile[0] * shape.width, tile[1] * shape.height, 0],
        extent: [shape.width, shape.height, 1],
    }
}

/// Uploads `seed`'s pattern into one mip-0 tile of `image` and waits for it.
fn upload_tile(uploader: &Uploader, image: &SparseImage, tile: [u32; 2], seed: u8) -> Result<(), Failure> {
    let region = tile_region(image, tile);
    let data = tile_data(seed, region.extent[0], region.extent[1]);
    let copy = ImageRegion::new(image, 0, region.offset, region.extent);
    uploader.write_image(&copy, &data).map_err(|e| failure(&e))?;
    uploader.wait_idle().map_err(|e| failure(&e))
}

/// Reads one mip-0 tile of `image` back and checks `seed`'s pattern.
fn check_tile(image: &SparseImage, tile: [u32; 2], seed: u8) -> Result<(), Failure> {
    let region = tile_region(image, tile);
    let back = image.read_region(0, 0, region, 1 << 20).map_err(|e| failure(&e))?;
    assert_eq!(back, tile_data(seed, region.extent[0], region.extent[1]), "{} tile {tile:?}", image.name());
    Ok(())
}

fn image_desc() -> SparseImageDesc {
    // 2 × 2 tiles of 128 × 128 RGBA8 texels, one mip: no mip tail.
    SparseImageDesc::new_2d(Format::R8G8B8A8Unorm, 256, 256).with_mip_levels(1)
}

/// The pools that outlive every run of the scenario (and must stay usable through every fault).
struct Persistent {
    pool: BufferPool,
    tiles: SparseTilePool,
    image: SparseImage,
}

impl Persistent {
    fn new(device: &Arc<Device>) -> Persistent {
        let pool = BufferPool::new(
            Arc::clone(device),
            BufferPoolDesc::new("faults keep", BufferPoolUsage::Unknown)
                .with_memory(MemoryIntent::Upload)
                .with_page_size(1 << 20),
        )
        .unwrap();
        let tiles = SparseTilePool::new(
            Arc::clone(device),
            TilePoolDesc::default().with_name("faults tiles").with_tiles_per_heap(2),
        )
        .unwrap();
        let image = SparseImage::new(&tiles, "faults keep image", &image_desc(), false).unwrap();
        Persistent { pool, tiles, image }
    }

    /// Allocate, write and read back in the buffer pool; commit, bind, upload, read back and
    /// release a tile of the sparse image. Panics if a pool is broken.
    fn check_usable(&mut self, device: &Device) {
        let mut buffer = self
            .pool
            .init_buffer(
                &BufferInit::new("usable?", 4096).with_usage(BufferUsage::STORAGE | BufferUsage::COPY_SRC),
            )
            .unwrap();
        buffer.write(0, &[0x3c; 4096]).unwrap();
        assert_eq!(device.read_back(&buffer, 0, 4096).unwrap(), vec![0x3c; 4096]);
        self.pool.free_buffer(buffer).unwrap();
        self.pool.check_invariants().unwrap();
        let uploader = Uploader::new(device, "usable?", 256 << 10).unwrap();
        let region = tile_region(&self.image, [1, 1]);
        self.image.commit_region(&self.tiles, 0, 0, region).unwrap();
        self.tiles.flush_binds(&mut [&mut self.image]).unwrap();
        upload_tile(&uploader, &self.image, [1, 1], 0x77).unwrap();
        check_tile(&self.image, [1, 1], 0x77).unwrap();
        self.image.release_region(&self.tiles, 0, 0, region).unwrap();
        self.tiles.flush_binds(&mut [&mut self.image]).unwrap();
        self.tiles.trim();
        uploader.destroy().unwrap();
    }

    fn destroy(self) {
        drop(self.image);
        drop(self.tiles);
        drop(self.pool);
    }
}

/// Everything the scenario makes, destroyed in reverse whether it got to the end or not.
#[derive(Default)]
struct Made {
    known: Option<BufferPool>,
    placed: Option<Buffer>,
    range: Option<Buffer>,
    committed: Option<Buffer>,
    uploader: Option<Uploader>,
    image: Option<SparseImage>,
    committed_keep: bool,
    multi: Option<MultiBuffer>,
    software: Option<(SoftwareTilePool, Option<SoftwareImage>)>,
}

use residency_vulkan::Buffer;

impl Made {
    fn destroy(self, device: &Device, keep: &mut Persistent) {
        drop(self.multi);
        let lost = device.is_lost();
        if self.committed_keep {
            keep.image.release_all(&keep.tiles).unwrap();
            match keep.tiles.flush_binds(&mut [&mut keep.image]) {
                Err(e) if lost => assert_eq!(failure(&e), Failure::DeviceLost),
                flushed => drop(flushed.unwrap()),
            }
        }
        drop(self.image);
        if !keep.image.has_pending_binds() {
            keep.tiles.trim();
        }
        if let Some(uploader) = self.uploader {
            match uploader.destroy() {
                Err(e) if lost => assert_eq!(failure(&e), Failure::DeviceLost),
                destroyed => destroyed.unwrap(),
            }
        }
        if let Some((pool, image)) = self.software {
            drop((image, pool));
        }
        if let Some(b) = self.committed {
            drop(b);
        }
        if let Some(b) = self.placed {
            keep.pool.free_buffer(b).unwrap();
        }
        if let (Some(pool), Some(b)) = (&self.known, self.range) {
            pool.free_buffer(b).unwrap();
        }
        drop(self.known);
    }
}

/// Calls reached at each site of each device.
fn site_calls(set: &DeviceSet) -> Vec<Vec<u64>> {
    set.devices().iter().map(|d| FaultSite::ALL.iter().map(|&s| d.ledger().site_calls(s)).collect()).collect()
}

/// Pools, placed, range and committed buffers, an upload and a readback, a sparse image created,
/// a tile committed, bound, uploaded and read back on the persistent image, a multi-device buffer;
/// with `fault` armed (device, site, calls to let through) until the teardown, which runs clean.
/// Returns the calls the scenario made at each site of each device.
fn scenario(
    set: &DeviceSet,
    keep: &mut Persistent,
    fault: Option<(usize, FaultSite, u64, InjectedFault)>,
) -> (Result<(), Failure>, Vec<Vec<u64>>) {
    let device = &set.devices()[0];
    let mut made = Made::default();
    let before = site_calls(set);
    if let Some((d, site, skip, fault)) = fault {
        set.devices()[d].ledger().inject_fault(site, skip, fault);
    }
    let result = run_scenario(set, device, keep, &mut made);
    let calls = site_calls(set)
        .iter()
        .zip(&before)
        .map(|(a, b)| a.iter().zip(b).map(|(a, b)| a - b).collect())
        .collect();
    // Out of memory is over once reported; a lost device stays lost through the teardown.
    let lost = set.devices().iter().any(|d| d.is_lost());
    if !lost {
        set.devices().iter().for_each(|d| d.ledger().clear_faults());
    }
    made.destroy(device, keep);
    if lost {
        set.devices().iter().for_each(|d| d.ledger().clear_faults());
        // The unbinds the lost flush could not issue.
        keep.tiles.flush_binds(&mut [&mut keep.image]).unwrap();
        keep.tiles.trim();
    }
    (result, calls)
}

fn run_scenario(
    set: &DeviceSet,
    device: &Arc<Device>,
    keep: &mut Persistent,
    made: &mut Made,
) -> Result<(), Failure> {
    let usage = BufferUsage::STORAGE | BufferUsage::COPY_SRC | BufferUsage::COPY_DST;
    let mut placed =
        keep.pool.init_buffer(&BufferInit::new("placed", 4096).with_usage(usage)).map_err(|e| failure(&e))?;
    placed.write(0, &[1; 4096]).unwrap();
    made.placed = Some(placed);

    let known = BufferPool::new(
        Arc::clone(device),
        BufferPoolDesc::new("faults known", BufferPoolUsage::Known(usage))
            .with_memory(MemoryIntent::Upload)
            .with_page_size(256 << 10),
    )
    .map_err(|e| failure(&e))?;
    let known = made.known.insert(known);
    let mut range = known.init_buffer(&BufferInit::new("range", 1000)).map_err(|e| failure(&e))?;
    range.write(0, &[2; 1000]).unwrap();
    made.range = Some(range);

    let committed = device
        .create_buffer(
            &BufferDesc::new("committed", 64 << 10, usage).with_intent(MemoryIntent::DeviceLocal).committed(),
        )
        .map_err(|e| failure(&e))?;
    let committed = made.committed.insert(committed);
    let uploader = Uploader::new(device, "faults", 256 << 10).map_err(|e| failure(&e))?;
    let uploader = made.uploader.insert(uploader);
    let data: Vec<u8> = (0..64u32 << 10).map(|i| (i % 253) as u8).collect();
    uploader.write_buffer(committed, 0, &data).map_err(|e| failure(&e))?;
    uploader.wait_idle().map_err(|e| failure(&e))?;
    assert_eq!(device.read_back(committed, 0, data.len() as u64).map_err(|e| failure(&e))?, data);

    let image =
        SparseImage::new(&keep.tiles, "faults image", &image_desc(), false).map_err(|e| failure(&e))?;
    made.image = Some(image);
    let region = tile_region(&keep.image, [0, 0]);
    keep.image.commit_region(&keep.tiles, 0, 0, region).map_err(|e| failure(&e))?;
    made.committed_keep = true;
    keep.tiles.flush_binds(&mut [&mut keep.image]).map_err(|e| failure(&e))?;
    upload_tile(uploader, &keep.image, [0, 0], 0x5a)?;
    check_tile(&keep.image, [0, 0], 0x5a)?;

    // The software path: an atlas, an indirection texture, a tile written and its borders filled.
    let pool = SoftwareTilePool::new(
        Arc::clone(device),
        Format::R8G8B8A8Unorm,
        DEFAULT_BORDER,
        TilePoolDesc::default().with_name("faults software").with_tiles_per_heap(4).with_budget_tiles(4),
    )
    .map_err(|e| failure(&e))?;
    let (pool, slot) = made.software.insert((pool, None));
    let desc = SparseImageDesc::new_2d(Format::R8G8B8A8Unorm, 256, 256);
    let image = SoftwareImage::new(pool, "faults software image", &desc).map_err(|e| failure(&e))?;
    let image = slot.insert(image);
    let r = TexelRegion { offset: [0, 0, 0], extent: [128, 128, 1] };
    image.commit_region(pool, 0, 0, r).map_err(|e| failure(&e))?;
    image.write_region(pool, uploader, 0, 0, r, &vec![7; 128 * 128 * 4]).map_err(|e| failure(&e))?;
    pool.flush(uploader, &mut [image]).map_err(|e| failure(&e))?;

    let multi = MultiBuffer::create(
        set,
        DeviceMask::from_bits(0b11),
        &BufferDesc::new("multi", 4096, usage).committed(),
    )
    .map_err(|e| failure(&e))?;
    made.multi = Some(multi);
    Ok(())
}

/// Every injection site, with its calls in one run of the scenario, per device.
fn count_calls(set: &DeviceSet, keep: &mut Persistent) -> Vec<(usize, FaultSite, u64)> {
    let (result, calls) = scenario(set, keep, None);
    result.expect("the scenario runs clean without faults");
    let mut out = Vec::new();
    for (d, calls) in calls.iter().enumerate().take(2) {
        for (i, &site) in FaultSite::ALL.iter().enumerate() {
            out.push((d, site, calls[i]));
        }
    }
    out
}

#[test]
fn out_of_device_memory_at_every_allocation_creation_submit_and_wait_of_a_scenario() {
    with_gpu(|set| {
        let device = Arc::clone(&set.devices()[0]);
        let _clear = [ClearFaults(&set.devices()[0]), ClearFaults(&set.devices()[1])];
        let mut keep = Persistent::new(&device);
        // A first run settles the heaps the general allocator keeps for reuse.
        scenario(set, &mut keep, None).0.unwrap();
        let baseline: Vec<Accounting> = set.devices().iter().map(|d| accounting(d)).collect();
        let calls = count_calls(set, &mut keep);
        assert_eq!(baseline, set.devices().iter().map(|d| accounting(d)).collect::<Vec<_>>());
        let started = Instant::now();
        let (mut injected, mut failed, mut absorbed) = (0u64, 0u64, 0u64);
        let mut per_site = std::collections::BTreeMap::new();
        for &(d, site, n) in &calls {
            let target = &set.devices()[d];
            for k in 0..n {
                let fired = target.ledger().faults_fired(site);
                let (result, _) =
                    scenario(set, &mut keep, Some((d, site, k, InjectedFault::OutOfDeviceMemory)));
                assert_eq!(
                    target.ledger().faults_fired(site),
                    fired + 1,
                    "device {d} {site:?} call {k} was reached"
                );
                match result {
                    Ok(()) => absorbed += 1,
                    Err(Failure::OutOfMemory) => failed += 1,
                    Err(other) => {
                        panic!("device {d} {site:?} call {k}: {other:?}, not a typed out-of-memory")
                    }
                }
                injected += 1;
                *per_site.entry(format!("{site:?}")).or_insert(0u64) += 1;
                assert!(!target.is_lost());
                for (device, before) in set.devices().iter().zip(&baseline) {
                    assert_eq!(
                        &accounting(device),
                        before,
                        "device {d} {site:?} call {k}: accounting restored"
                    );
                }
                keep.check_usable(&device);
            }
        }
        // A lost device at every submit, wait and bind of the scenario: a typed error, a teardown
        // on the lost device that leaves nothing behind, and the pools usable once it is back.
        let mut lost = 0u64;
        for &(d, site, n) in &calls {
            if !matches!(site, FaultSite::QueueSubmit | FaultSite::Wait | FaultSite::BindSparse) {
                continue;
            }
            for k in 0..n {
                let started = Instant::now();
                let (result, _) = scenario(set, &mut keep, Some((d, site, k, InjectedFault::DeviceLost)));
                // A hang guard, not a speed bound (a busy 2-core machine may take seconds).
                assert!(started.elapsed() < Duration::from_secs(60), "no hang on a lost device");
                assert_eq!(result, Err(Failure::DeviceLost), "device {d} {site:?} call {k}");
                lost += 1;
                for (device, before) in set.devices().iter().zip(&baseline) {
                    assert_eq!(
                        &accounting(device),
                        before,
                        "lost at device {d} {site:?} call {k}: nothing leaked"
                    );
                }
                keep.check_usable(&device);
            }
        }
        // Recovered: the whole scenario runs again.
        scenario(set, &mut keep, None).0.unwrap();
        println!(
            "fault injection: {injected} out-of-memory faults injected ({per_site:?}); {failed} surfaced as typed \
             errors, {absorbed} absorbed by a fallback (smaller heap, other memory type); {lost} device-lost faults \
             injected, all typed; 0 leaks; {:.1} s",
            started.elapsed().as_secs_f64()
        );
        assert!(per_site.get("AllocateMemory").copied().unwrap_or(0) >= 5, "{per_site:?}");
        assert!(per_site.get("BindSparse").copied().unwrap_or(0) >= 1, "{per_site:?}");
        keep.destroy();
    });
}

/// The image's page table: which virtual tile is bound to which physical tile.
fn table(image: &SparseImage) -> Vec<(TileIndex, String)> {
    image.residency().page_table().mapped().map(|(t, p)| (t, format!("{p:?}"))).collect()
}

fn tile_index(image: &SparseImage, tile: [u32; 2]) -> TileIndex {
    let region = tile_region(image, tile);
    let range = image.layout().tiles_covering(0, region).unwrap();
    image.layout().tiles_in(0, 0, range).next().unwrap()
}

#[test]
fn a_failed_bind_sparse_rolls_back_the_page_table_and_the_pool_and_a_retry_binds() {
    with_gpu(|set| {
        let device = Arc::clone(&set.devices()[0]);
        let tiles = SparseTilePool::new(
            Arc::clone(&device),
            TilePoolDesc::default().with_name("rollback tiles").with_tiles_per_heap(2),
        )
        .unwrap();
        let mut image = SparseImage::new(&tiles, "rollback image", &image_desc(), false).unwrap();
        let uploader = Uploader::new(&device, "rollback", 256 << 10).unwrap();
        let _clear = ClearFaults(&device);
        // Two tiles resident with data (heap 0 full).
        for tile in [[0, 0], [1, 0]] {
            image.commit_region(&tiles, 0, 0, tile_region(&image, tile)).unwrap();
        }
        tiles.flush_binds(&mut [&mut image]).unwrap();
        upload_tile(&uploader, &image, [0, 0], 1).unwrap();
        upload_tile(&uploader, &image, [1, 0], 2).unwrap();

        for fault in [InjectedFault::OutOfDeviceMemory, InjectedFault::DeviceLost] {
            let (stats, page_table, ledger): (PoolStats, _, _) =
                (tiles.stats(), table(&image), accounting(&device));
            // Two more tiles (a new heap), and tile (1, 0) released: all in one failing flush.
            for tile in [[0, 1], [1, 1]] {
                image.commit_region(&tiles, 0, 0, tile_region(&image, tile)).unwrap();
            }
            image.release_region(&tiles, 0, 0, tile_region(&image, [1, 0])).unwrap();
            image.commit_region(&tiles, 0, 0, tile_region(&image, [1, 0])).unwrap();
            device.ledger().inject_fault(FaultSite::BindSparse, 0, fault);
            let err = tiles.flush_binds(&mut [&mut image]).unwrap_err();
            let expected = match fault {
                InjectedFault::OutOfDeviceMemory => Failure::OutOfMemory,
                InjectedFault::DeviceLost => Failure::DeviceLost,
            };
            assert_eq!(failure(&err), expected, "{err}");
            assert!(err.to_string().contains("vkQueueBindSparse"), "{err}");
            if fault == InjectedFault::DeviceLost {
                assert!(device.is_lost());
                // Sticky: the next flush fails the same way at once, and rolls back too.
                image.commit_region(&tiles, 0, 0, tile_region(&image, [1, 1])).unwrap();
                let again = tiles.flush_binds(&mut [&mut image]).unwrap_err();
                assert_eq!(failure(&again), Failure::DeviceLost);
                device.ledger().clear_faults();
            }
            // The commits are undone: tile (1, 0) was released and re-committed, so it is now
            // released, its unbind queued; the new heap is gone again.
            let mut expected_table = page_table.clone();
            expected_table.retain(|(t, _)| *t != tile_index(&image, [1, 0]));
            assert_eq!(table(&image), expected_table);
            let mut expected_stats = stats.clone();
            assert_eq!(tiles.stats().used_tiles, expected_stats.used_tiles - 1);
            expected_stats = tiles.stats();
            assert_eq!(expected_stats.heaps.len(), stats.heaps.len(), "the heap made for the commits went");
            assert!(image.has_pending_binds(), "the unbind of the released tile is still queued");
            assert_eq!(accounting(&device), ledger, "tile heap memory back to before");
            assert!(device.ledger().faults_fired(FaultSite::BindSparse) > 0);

            // Retry: the same commits bind, the data reads back.
            for tile in [[0, 1], [1, 1], [1, 0]] {
                image.commit_region(&tiles, 0, 0, tile_region(&image, tile)).unwrap();
            }
            tiles.flush_binds(&mut [&mut image]).unwrap();
            assert!(!image.has_pending_binds());
            for (tile, seed) in [([0, 1], 3u8), ([1, 1], 4), ([1, 0], 2)] {
                upload_tile(&uploader, &image, tile, seed).unwrap();
            }
            for (tile, seed) in [([0, 0], 1u8), ([1, 0], 2), ([0, 1], 3), ([1, 1], 4)] {
                check_tile(&image, tile, seed).unwrap();
            }
            // Back to two resident tiles for the next round.
            for tile in [[0, 1], [1, 1]] {
                image.release_region(&tiles, 0, 0, tile_region(&image, tile)).unwrap();
            }
            tiles.flush_binds(&mut [&mut image]).unwrap();
            tiles.trim();
            assert_eq!(
                (tiles.stats().used_tiles, tiles.stats().owners),
                (stats.used_tiles, stats.owners.clone())
            );
        }
        uploader.destroy().unwrap();
        drop(image);
    });
}

/// Clears the device's faults when dropped (also when a test fails).
struct ClearFaults<'a>(&'a Device);

impl Drop for ClearFaults<'_> {
    fn drop(&mut self) {
        self.0.ledger().clear_faults();
    }
}

/// A lost device answers without waiting for the GPU: a hang guard, not a speed bound (a busy
/// 2-core machine may take seconds for what takes microseconds on an idle one).
fn quick<T>(what: &str, f: impl FnOnce() -> T) -> T {
    let started = Instant::now();
    let out = f();
    assert!(
        started.elapsed() < Duration::from_secs(60),
        "{what} took {:?} on a lost device",
        started.elapsed()
    );
    out
}

#[test]
fn a_lost_device_fails_fast_with_a_typed_error_and_tears_down_without_leaks_or_hangs() {
    with_gpu(|set| {
        let device = Arc::clone(&set.devices()[0]);
        let usage = BufferUsage::STORAGE | BufferUsage::COPY_SRC | BufferUsage::COPY_DST;
        let mut per_site = Vec::new();
        // A failed assertion must not leave the shared device "lost" for the other tests.
        let _clear = ClearFaults(&device);
        // Settle the heaps the general allocator keeps for reuse (readbacks) before the baseline.
        let mut keep = Persistent::new(&device);
        keep.check_usable(&device);
        keep.destroy();
        for site in [FaultSite::QueueSubmit, FaultSite::Wait, FaultSite::BindSparse] {
            let baseline = accounting(&device);
            let started = Instant::now();
            let pool = BufferPool::new(
                Arc::clone(&device),
                BufferPoolDesc::new("lost", BufferPoolUsage::Unknown).with_memory(MemoryIntent::Upload),
            )
            .unwrap();
            let target = pool.init_buffer(&BufferInit::new("target", 4096).with_usage(usage)).unwrap();
            let uploader = Uploader::new(&device, "lost", 256 << 10).unwrap();
            let tiles =
                SparseTilePool::new(Arc::clone(&device), TilePoolDesc::default().with_name("lost tiles"))
                    .unwrap();
            let mut image = SparseImage::new(&tiles, "lost image", &image_desc(), false).unwrap();
            image.commit_region(&tiles, 0, 0, tile_region(&image, [0, 0])).unwrap();
            let resident = tiles.used_tiles();

            device.ledger().inject_fault(site, 0, InjectedFault::DeviceLost);
            let first = match site {
                FaultSite::BindSparse => failure(&tiles.flush_binds(&mut [&mut image]).unwrap_err()),
                _ => {
                    uploader.write_buffer(&target, 0, &[9; 4096]).unwrap();
                    let flushed = uploader.flush().map_err(|e| failure(&e));
                    match flushed {
                        Err(e) => e,
                        Ok(()) => failure(&uploader.wait_idle().unwrap_err()),
                    }
                }
            };
            assert_eq!(first, Failure::DeviceLost, "{site:?}");
            assert!(device.is_lost());
            // Later calls: the same typed error, at once, no panic.
            let again = quick("read back", || device.read_back(&target, 0, 16).unwrap_err());
            assert_eq!(failure(&again), Failure::DeviceLost);
            assert_eq!(failure(&quick("wait idle", || device.wait_idle().unwrap_err())), Failure::DeviceLost);
            assert_eq!(
                failure(&quick("submit", || device.submit_once("lost", |_| {}).unwrap_err())),
                Failure::DeviceLost
            );
            let flush = quick("flush binds", || tiles.flush_binds(&mut [&mut image]));
            if site != FaultSite::BindSparse {
                assert_eq!(failure(&flush.unwrap_err()), Failure::DeviceLost);
            }
            assert_eq!(tiles.used_tiles(), resident - 1, "the failed flush rolled the commit back");
            uploader.write_buffer(&target, 0, &[7; 4096]).unwrap();
            assert_eq!(
                failure(&quick("upload wait", || uploader.wait_idle()).unwrap_err()),
                Failure::DeviceLost
            );
            // Mapped memory still works; so does allocating (the driver is not asked to submit).
            let mut mapped = pool.init_buffer(&BufferInit::new("mapped", 256).with_usage(usage)).unwrap();
            mapped.write(0, &[5; 256]).unwrap();
            let mut back = [0; 256];
            mapped.read(0, &mut back).unwrap();
            assert_eq!(back, [5; 256]);

            // Teardown on the lost device: bounded, nothing left behind. The uploader goes first:
            // destroying it settles its submitted copies (an injected loss leaves the GPU running,
            // and those copies write into `target`), as the contract asks of any teardown.
            quick("teardown", || {
                if let Err(e) = uploader.destroy() {
                    assert_eq!(failure(&e), Failure::DeviceLost);
                }
                pool.free_buffer(mapped).unwrap();
                pool.free_buffer(target).unwrap();
                drop(image);
                drop(tiles);
                drop(pool);
            });
            assert_eq!(accounting(&device), baseline, "{site:?}: nothing leaked");
            device.ledger().clear_faults();
            assert!(!device.is_lost());
            per_site.push((site, started.elapsed()));
        }
        // The device works again once the injected loss is cleared.
        let mut keep = Persistent::new(&device);
        keep.check_usable(&device);
        keep.destroy();
        println!("device lost: 3 sites (submit, fence wait, bind sparse) survived: {per_site:?}");
    });
}
