//! Large uploads from a host slice: pipelined quarters of the staging ring, staged by several
//! threads, reach a device-local buffer intact (under synchronization validation).

use residency_core::memory::MemoryIntent;
use residency_core::usage::BufferUsage;
use residency_vulkan::testing::with_gpu;
use residency_vulkan::{BufferDesc, Uploader, PARALLEL_COPY_PIECE};

fn pattern(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

#[test]
fn a_large_write_is_pipelined_through_the_ring_and_arrives_intact() {
    with_gpu(|set| {
        let device = &set.devices()[0];
        // 8 MiB of ring, 2 MiB quarters: a 21 MiB + 3 B write takes 11 submissions, each staged
        // by up to 4 threads (2 MiB pieces of 1 MiB), the ring wrapping several times.
        let uploader = Uploader::new(device, "big upload", 8 << 20).unwrap().with_copy_threads(4);
        assert_eq!(uploader.copy_threads(), 4);
        let len = (21 << 20) + 3;
        let usage = BufferUsage::COPY_DST | BufferUsage::COPY_SRC | BufferUsage::STORAGE;
        let dst = device.create_buffer(&BufferDesc::new("big destination", len as u64 + 64, usage)).unwrap();
        let data = pattern(len, 0x9e37_79b9_7f4a_7c15);
        uploader.write_buffer(&dst, 64, &data).unwrap();
        // The last quarter is staged and queued (the ones before were submitted during the call).
        let (used, _) = uploader.staging_in_use();
        assert!(used > 0, "the last quarter waits in the ring for a flush");
        uploader.wait_idle().unwrap();
        let back = device.read_back(&dst, 64, len as u64).unwrap();
        assert!(back == data, "the pipelined upload arrived intact");
        // A second write overlapping the first (same bytes, other data): ordered after it.
        let second = pattern(3 * PARALLEL_COPY_PIECE, 7);
        uploader.write_buffer(&dst, 100, &second).unwrap();
        uploader.wait_idle().unwrap();
        let back = device.read_back(&dst, 100, second.len() as u64).unwrap();
        assert!(back == second, "the later write wins");
        assert_eq!(uploader.staging_in_use(), (0, 0));
    });
}

#[test]
fn a_mapped_buffer_written_by_several_threads_holds_the_data() {
    with_gpu(|set| {
        let device = &set.devices()[0];
        let len = 5 * PARALLEL_COPY_PIECE + 17;
        let desc = BufferDesc::new("mapped", len as u64 + 8, BufferUsage::COPY_SRC)
            .with_intent(MemoryIntent::Upload);
        let mut buffer = device.create_buffer(&desc).unwrap();
        let data = pattern(len, 3);
        buffer.write_with_threads(8, &data, 4).unwrap();
        let mut back = vec![0; len];
        buffer.read(8, &mut back).unwrap();
        assert!(back == data);
        let err = buffer.write_with_threads(16, &data, 4).unwrap_err();
        assert!(err.to_string().contains("outside"), "{err}");
    });
}
