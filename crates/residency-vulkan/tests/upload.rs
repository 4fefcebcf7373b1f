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

/// Tiles written side by side into one mip of a block-compressed image in one batch (as a fully
/// resident copy of a BC `.rvt` is made) arrive intact, and synchronization validation sees no
/// hazard: layers before 1.3.280 misplace such copies' x offsets, so the uploader orders copies
/// into the same block rows with a barrier (without it, this raised WRITE_AFTER_WRITE).
#[test]
fn bc_tiles_side_by_side_in_one_batch_arrive_intact_without_a_hazard() {
    use residency_core::format::Format;
    use residency_core::usage::ImageUsage;
    use residency_vulkan::{ash::vk, ImageDesc, ImageRegion};
    with_gpu(|set| {
        let device = &set.devices()[0];
        for format in [Format::Bc7Unorm, Format::Bc1Unorm] {
            let usage = ImageUsage::SAMPLED | ImageUsage::COPY_DST | ImageUsage::COPY_SRC;
            let image = device.create_image(&ImageDesc::new_2d("bc tiles", format, 256, 64, usage)).unwrap();
            device.discard_to_general(&[&image]).unwrap();
            let uploader = Uploader::new(device, "bc tiles", 1 << 20).unwrap();
            // A 4 × 2 grid of 64 × 32 tiles, row by row, then the last column once more (later
            // data wins), all in one flush.
            let tile_bytes = format.region_bytes(64, 32, 1) as usize;
            let mut expected = vec![0u8; format.region_bytes(256, 64, 1) as usize];
            let row_bytes = format.region_bytes(256, 4, 1) as usize;
            let tile_row = format.region_bytes(64, 4, 1) as usize;
            let mut tiles: Vec<(u32, u32)> = (0..2).flat_map(|y| (0..4).map(move |x| (x, y))).collect();
            tiles.extend([(3, 0), (3, 1)]);
            for (i, &(x, y)) in tiles.iter().enumerate() {
                let data = pattern(tile_bytes, i as u64 + 1);
                let region = ImageRegion::new(&image, 0, [x * 64, y * 32, 0], [64, 32, 1]);
                uploader.write_image(&region, &data).unwrap();
                for r in 0..8 {
                    let at = (y as usize * 8 + r) * row_bytes + x as usize * tile_row;
                    expected[at..at + tile_row].copy_from_slice(&data[r * tile_row..(r + 1) * tile_row]);
                }
            }
            uploader.flush().unwrap();
            uploader.wait_idle().unwrap();
            let back = device.read_image(&image, vk::ImageLayout::GENERAL).unwrap();
            assert!(back == expected, "{format:?}: every tile's blocks, the later writes last");
            uploader.destroy().unwrap();
        }
    });
}
