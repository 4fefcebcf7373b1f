//! Real concurrency, no lock around the test: eight threads share one buffer pool, one uploader,
//! one known-flags pool's ranges and one program's descriptor pools, create and drop resources
//! while their copies are in flight (deferred destruction from any thread), and every byte that
//! was kept arrives. Under synchronization validation.

use residency_core::memory::MemoryIntent;
use residency_core::usage::{BufferPoolUsage, BufferUsage};
use residency_vulkan::compute::{Binding, ComputeProgram};
use residency_vulkan::testing::with_gpu;
use residency_vulkan::{shaders, Buffer, BufferInit, BufferPool, BufferPoolDesc, Uploader};
use std::sync::Arc;

const THREADS: usize = 8;
const ROUNDS: usize = 40;

fn bytes(thread: usize, round: usize, len: usize) -> Vec<u8> {
    (0..len).map(|i| (i * 31 + thread * 7 + round * 13) as u8).collect()
}

#[test]
fn eight_threads_share_a_pool_an_uploader_ranges_and_descriptor_pools() {
    with_gpu(|set| {
        let device = &set.devices()[0];
        let objects = device.ledger().live_objects().len();
        let usage = BufferUsage::STORAGE | BufferUsage::COPY_DST | BufferUsage::COPY_SRC;
        let pool = BufferPool::new(
            Arc::clone(device),
            BufferPoolDesc::new("shared pool", BufferPoolUsage::Unknown)
                .with_page_size(4 << 20)
                .with_arenas(4),
        )
        .unwrap();
        let ranges = BufferPool::new(
            Arc::clone(device),
            BufferPoolDesc::new("shared ranges", BufferPoolUsage::Known(BufferUsage::UNIFORM))
                .with_memory(MemoryIntent::Upload)
                .with_page_size(1 << 20),
        )
        .unwrap();
        let uploader = Uploader::new(device, "shared uploader", 1 << 20).unwrap().with_copy_threads(2);
        let program = ComputeProgram::new(device, "shared program", &shaders::FILL, 2).unwrap();
        let kept: Vec<Vec<(Buffer, Vec<u8>)>> = std::thread::scope(|scope| {
            let workers: Vec<_> = (0..THREADS)
                .map(|t| {
                    let (pool, ranges, uploader, program) = (&pool, &ranges, &uploader, &program);
                    scope.spawn(move || {
                        let mut kept = Vec::new();
                        let mut live_ranges = Vec::new();
                        for round in 0..ROUNDS {
                            let len = 256 + (t * 97 + round * 61) % 3000;
                            let init =
                                BufferInit::new(format!("t{t} r{round}"), len as u64).with_usage(usage);
                            let buffer = pool.init_buffer(&init).unwrap();
                            let data = bytes(t, round, len);
                            uploader.write_buffer(&buffer, 0, &data).unwrap();
                            if round % 5 == 0 {
                                uploader.flush().unwrap();
                            }
                            // Every other buffer is dropped with its copy queued or in flight: it
                            // retires after the copy, whichever thread submits it.
                            if round % 2 == 0 {
                                kept.push((buffer, data));
                            }
                            let mut r = ranges.allocate_range(64 + (round as u64 % 7) * 16, 0).unwrap();
                            r.write(0, &[t as u8; 64]).unwrap();
                            live_ranges.push(r);
                            if live_ranges.len() > 4 {
                                let r = live_ranges.remove(0);
                                let mut back = [0u8; 64];
                                r.read(0, &mut back).unwrap();
                                assert_eq!(back, [t as u8; 64], "another thread wrote into this range");
                            }
                            // Descriptor sets from one program on every thread: its pools grow.
                            let (kept_buffer, _) = kept.last().unwrap();
                            program.descriptor_set(&[Binding::Buffer(kept_buffer)]).unwrap();
                        }
                        kept
                    })
                })
                .collect();
            workers.into_iter().map(|w| w.join().unwrap()).collect()
        });
        uploader.wait_idle().unwrap();
        let mut checked = 0;
        for per_thread in &kept {
            for (buffer, data) in per_thread {
                let back = device.read_back(buffer, 0, data.len() as u64).unwrap();
                assert!(&back == data, "`{}` holds what its thread uploaded", buffer.name());
                checked += 1;
            }
        }
        assert_eq!(checked, THREADS * ROUNDS / 2);
        pool.check_invariants().unwrap();
        ranges.check_invariants().unwrap();
        drop((kept, uploader, program, pool, ranges));
        device.wait_submitted().unwrap();
        let live = device.ledger().live_objects();
        assert!(
            !live.iter().any(|o| o.name.starts_with("shared") || o.name.starts_with('t')),
            "nothing of the threads is left: {live:?}"
        );
        assert!(live.len() <= objects + 1, "{live:?}");
    });
}
