//! Pools used from 8 threads at once: allocate, write, read back, free, with the allocator invariant
//! checker after every operation and data checks that catch any overlap between threads' buffers.

use residency_core::memory::MemoryIntent;
use residency_core::sync::measure::SplitMix64;
use residency_core::usage::{BufferPoolUsage, BufferUsage};
use residency_vulkan::testing::with_gpu;
use residency_vulkan::{BufferInit, BufferPool, BufferPoolDesc};
use std::sync::Arc;

const THREADS: usize = 8;
const OPS_PER_THREAD: usize = 400;

fn hammer(pool: &BufferPool, thread: usize) -> usize {
    let device = pool.device();
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
            let buffer = pool.init_buffer(&init).expect("the pool grows as needed");
            let tag = (thread * 31 + op) as u8;
            buffer.write(device, 0, &vec![tag; size as usize]).unwrap();
            live.push((buffer, tag));
        } else {
            let (buffer, tag) = live.swap_remove((rng.next_u64() % live.len() as u64) as usize);
            let mut back = vec![0; buffer.size() as usize];
            buffer.read(device, 0, &mut back).unwrap();
            assert!(back.iter().all(|&b| b == tag), "{}: another thread wrote into it", buffer.name());
            pool.free_buffer(buffer).unwrap();
        }
        pool.check_invariants().expect("allocator invariants hold after every operation");
        ops += 1;
    }
    for (buffer, tag) in live {
        let mut back = vec![0; buffer.size() as usize];
        buffer.read(device, 0, &mut back).unwrap();
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
