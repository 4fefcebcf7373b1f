//! Pools used from 8 threads at once: allocate, write, read back, free, with the allocator invariant
//! checker after every operation and data checks that catch any overlap between threads' buffers;
//! and a bounded mixed run where the 8 threads also commit and evict tiles of shared sparse images
//! (bound through one shared tile pool), with both pools' invariant checkers on.

use residency_core::format::Format;
use residency_core::memory::MemoryIntent;
use residency_core::sync::measure::SplitMix64;
use residency_core::tiles::{SparseImageDesc, TexelRegion, TilePoolDesc};
use residency_core::usage::{BufferPoolUsage, BufferUsage};
use residency_vulkan::sparse::{SparseImage, SparseTilePool};
use residency_vulkan::testing::with_gpu;
use residency_vulkan::{Buffer, BufferInit, BufferPool, BufferPoolDesc, ImageRegion, Uploader};
use std::sync::{Arc, Mutex};
use std::time::Instant;

const THREADS: usize = 8;
const OPS_PER_THREAD: usize = 400;
/// Operations per thread of the mixed run (a count, not a deadline).
const MIXED_OPS_PER_THREAD: usize = 150;

fn hammer(pool: &BufferPool, thread: usize) -> usize {
    let _device = pool.device();
    let mut rng = SplitMix64::new(0x9e37_79b9_7f4a_7c15 ^ (thread as u64 + 1));
    let mut live = Vec::new();
    let mut ops = 0;
    for op in 0..OPS_PER_THREAD {
        if live.is_empty() || (live.len() < 24 && rng.next_u64() % 3 != 0) {
            let size = 16 + rng.next_u64() % 8192;
            let usage = match rng.next_u64() % 3 {
                0 => BufferUsage::STORAGE,
                1 => BufferUsage::UNIFORM,
                _ => BufferUsage::VERTEX | BufferUsage::INDEX,
            };
            let alignment = [0, 16, 64, 256][(rng.next_u64() % 4) as usize];
            let init = BufferInit::new(format!("t{thread} op{op}"), size)
                .with_usage(usage)
                .with_alignment(alignment);
            let mut buffer = pool.init_buffer(&init).expect("the pool grows as needed");
            let tag = (thread * 31 + op) as u8;
            buffer.write(0, &vec![tag; size as usize]).unwrap();
            live.push((buffer, tag));
        } else {
            let (buffer, tag) = live.swap_remove((rng.next_u64() % live.len() as u64) as usize);
            let mut back = vec![0; buffer.size() as usize];
            buffer.read(0, &mut back).unwrap();
            assert!(back.iter().all(|&b| b == tag), "{}: another thread wrote into it", buffer.name());
            pool.free_buffer(buffer).unwrap();
        }
        pool.check_invariants().expect("allocator invariants hold after every operation");
        ops += 1;
    }
    for (buffer, tag) in live {
        let mut back = vec![0; buffer.size() as usize];
        buffer.read(0, &mut back).unwrap();
        assert!(back.iter().all(|&b| b == tag));
        pool.free_buffer(buffer).unwrap();
        ops += 1;
    }
    ops
}

#[test]
fn eight_threads_allocate_map_and_free_in_one_pool() {
    with_gpu(|set| {
        let device = Arc::clone(&set.devices()[0]);
        let variants = [
            (BufferPoolUsage::Unknown, 1),
            (BufferPoolUsage::Known(BufferUsage::ALL), 1),
            (BufferPoolUsage::Unknown, THREADS as u32),
            (BufferPoolUsage::Known(BufferUsage::ALL), 3),
        ];
        for (usage, arenas) in variants {
            let desc = BufferPoolDesc::new("stress", usage)
                .with_memory(MemoryIntent::Upload)
                .with_page_size(1 << 20)
                .with_arenas(arenas);
            let pool = Arc::new(BufferPool::new(Arc::clone(&device), desc).unwrap());
            let ops: usize = std::thread::scope(|scope| {
                let handles: Vec<_> = (0..THREADS)
                    .map(|t| {
                        let pool = Arc::clone(&pool);
                        scope.spawn(move || hammer(&pool, t))
                    })
                    .collect();
                handles.into_iter().map(|h| h.join().unwrap()).sum()
            });
            assert!(ops >= THREADS * OPS_PER_THREAD);
            let stats = pool.stats();
            assert_eq!((stats.buffers, stats.used_bytes), (0, 0), "{usage:?}: everything freed");
            assert!(
                stats.pages <= arenas as usize,
                "{usage:?}: empty pages are released down to one per arena"
            );
        }
    });
}

/// What the mixed stress run did, per kind of operation.
#[derive(Debug, Default)]
struct Counts {
    allocate: u64,
    free: u64,
    map_write_read: u64,
    commit: u64,
    evict: u64,
    flush: u64,
    upload_read_back: u64,
}

impl Counts {
    fn add(&mut self, o: &Counts) {
        self.allocate += o.allocate;
        self.free += o.free;
        self.map_write_read += o.map_write_read;
        self.commit += o.commit;
        self.evict += o.evict;
        self.flush += o.flush;
        self.upload_read_back += o.upload_read_back;
    }

    fn total(&self) -> u64 {
        self.allocate + self.free + self.map_write_read + self.commit + self.evict + self.upload_read_back
    }
}

/// One thread of the mixed run: buffers of the shared pool (allocate, write and read through the
/// mapping, free) and tiles of the shared sparse images (commit, evict, bind, upload and read
/// back), with both pools' invariant checkers after every operation: `ops` operations (a count,
/// not a deadline, so every machine runs the same operations; the interleaving still varies).
fn mixed(
    pool: &BufferPool,
    tiles: &SparseTilePool,
    images: &[Mutex<SparseImage>],
    thread: usize,
    ops: usize,
) -> Counts {
    let device = pool.device();
    let uploader = Uploader::new(device, &format!("stress t{thread}"), 256 << 10).unwrap();
    let mut rng = SplitMix64::new(0x5eed ^ (thread as u64 + 1) << 8);
    let mut live: Vec<(Buffer, u8)> = Vec::new();
    let mut counts = Counts::default();
    let mut op = 0usize;
    while op < ops {
        op += 1;
        match rng.next_u64() % 8 {
            0..=2 if live.len() < 16 => {
                let size = 64 + rng.next_u64() % 4096;
                let init = BufferInit::new(format!("t{thread} b{op}"), size).with_usage(BufferUsage::STORAGE);
                let mut buffer = pool.init_buffer(&init).expect("the pool grows as needed");
                let tag = (thread * 37 + op) as u8;
                buffer.write(0, &vec![tag; size as usize]).unwrap();
                live.push((buffer, tag));
                counts.allocate += 1;
            }
            0..=3 if !live.is_empty() => {
                let (buffer, tag) = live.swap_remove((rng.next_u64() % live.len() as u64) as usize);
                let mut back = vec![0; buffer.size() as usize];
                buffer.read(0, &mut back).unwrap();
                assert!(back.iter().all(|&b| b == tag), "{}: another thread wrote into it", buffer.name());
                pool.free_buffer(buffer).unwrap();
                counts.map_write_read += 1;
                counts.free += 1;
            }
            _ => {
                // A tile of one of the shared images: commit it (and check its texels round-trip)
                // or evict it, then bind.
                let mut image = images[(rng.next_u64() % images.len() as u64) as usize].lock().unwrap();
                let [gx, gy, _] = image.layout().mip(0).unwrap().tiles;
                let tile = [(rng.next_u64() % u64::from(gx)) as u32, (rng.next_u64() % u64::from(gy)) as u32];
                let shape = image.layout().tile_shape();
                let region = TexelRegion {
                    offset: [tile[0] * shape.width, tile[1] * shape.height, 0],
                    extent: [shape.width, shape.height, 1],
                };
                let index = image
                    .layout()
                    .tiles_in(0, 0, image.layout().tiles_covering(0, region).unwrap())
                    .next()
                    .unwrap();
                if image.residency().page_table().is_resident(index) {
                    image.release_region(tiles, 0, 0, region).unwrap();
                    tiles.flush_binds(&mut [&mut *image]).unwrap();
                    counts.evict += 1;
                } else {
                    image.commit_region(tiles, 0, 0, region).unwrap();
                    tiles.flush_binds(&mut [&mut *image]).unwrap();
                    counts.commit += 1;
                    if rng.next_u64() % 4 == 0 {
                        let seed = (thread * 13 + op) as u8;
                        let data: Vec<u8> =
                            (0..shape.width * shape.height * 4).map(|i| (i % 249) as u8 ^ seed).collect();
                        let copy = ImageRegion::new(&*image, 0, region.offset, region.extent);
                        uploader.write_image(&copy, &data).unwrap();
                        uploader.wait_idle().unwrap();
                        assert_eq!(image.read_region(0, 0, region, 1 << 20).unwrap(), data);
                        counts.upload_read_back += 1;
                    }
                }
                counts.flush += 1;
            }
        }
        pool.check_invariants().expect("buffer pool invariants hold after every operation");
        tiles.check_invariants().expect("tile pool invariants hold after every operation");
    }
    for (buffer, tag) in live {
        let mut back = vec![0; buffer.size() as usize];
        buffer.read(0, &mut back).unwrap();
        assert!(back.iter().all(|&b| b == tag));
        pool.free_buffer(buffer).unwrap();
        counts.free += 1;
    }
    uploader.destroy().unwrap();
    counts
}

/// Sparse images need `&mut` to commit and evict (their page table and queued binds are theirs),
/// so a renderer shares each behind a lock; the tile pool and the buffer pool are `&self`.
#[test]
fn eight_threads_allocate_map_commit_and_evict_on_shared_pools_and_sparse_images() {
    with_gpu(|set| {
        let device = Arc::clone(&set.devices()[0]);
        let pool = BufferPool::new(
            Arc::clone(&device),
            BufferPoolDesc::new("mixed stress", BufferPoolUsage::Unknown)
                .with_memory(MemoryIntent::Upload)
                .with_page_size(1 << 20)
                .with_arenas(2),
        )
        .unwrap();
        let tiles = SparseTilePool::new(
            Arc::clone(&device),
            TilePoolDesc::default().with_name("stress tiles").with_tiles_per_heap(8),
        )
        .unwrap();
        let desc = SparseImageDesc::new_2d(Format::R8G8B8A8Unorm, 1024, 1024).with_mip_levels(1);
        let images: Vec<Mutex<SparseImage>> = (0..3)
            .map(|i| {
                Mutex::new(SparseImage::new(&tiles, &format!("stress image {i}"), &desc, false).unwrap())
            })
            .collect();
        let started = Instant::now();

        let per_thread: Vec<Counts> = std::thread::scope(|scope| {
            let handles: Vec<_> = (0..THREADS)
                .map(|t| {
                    let (pool, tiles, images) = (&pool, &tiles, &images);
                    scope.spawn(move || mixed(pool, tiles, images, t, MIXED_OPS_PER_THREAD))
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let elapsed = started.elapsed();
        let mut total = Counts::default();
        per_thread.iter().for_each(|c| total.add(c));
        println!(
            "mixed stress: {THREADS} threads, {} operations in all ({} per thread minimum) in {:.2} s: {total:?}",
            total.total(),
            per_thread.iter().map(Counts::total).min().unwrap_or(0),
            elapsed.as_secs_f64()
        );
        assert!(per_thread.iter().all(|c| c.total() > 0), "every thread ran");
        assert_eq!(pool.stats().buffers, 0);
        // Every image evicts what is left; the pool is empty again.
        let mut images: Vec<SparseImage> = images.into_iter().map(|m| m.into_inner().unwrap()).collect();
        for image in &mut images {
            image.release_all(&tiles).unwrap();
        }
        tiles.flush_binds(&mut images.iter_mut().collect::<Vec<_>>()).unwrap();
        assert_eq!(tiles.used_tiles(), 0);
        tiles.check_invariants().unwrap();
        drop(images);
        drop(tiles);
        drop(pool);
        // What the threads dropped while others' work ran is destroyed once that work is done.
        device.wait_submitted().unwrap();
        // The general allocator may keep a heap for reuse (readback buffers); nothing of the run's
        // own pools may stay.
        let left: Vec<_> =
            device.ledger().live_objects().into_iter().filter(|o| o.name.contains("stress")).collect();
        assert!(left.is_empty(), "left behind: {left:?}");
    });
}
