//! Large uploads from a host slice: streamed through the staging ring in chunks, staged by several
//! threads, reach a device-local buffer intact (under synchronization validation).

use residency_core::memory::MemoryIntent;
use residency_core::usage::BufferUsage;
use residency_vulkan::testing::with_gpu;
use residency_vulkan::{BufferDesc, StagingMemory, UploadPath, Uploader, PARALLEL_COPY_PIECE};

mod common;
use common::pattern;

#[test]
fn a_large_write_is_pipelined_through_the_ring_and_arrives_intact() {
    with_gpu(|set| {
        let device = &set.devices()[0];
        // 8 MiB of ring, 2 MiB chunks (a quarter): a 21 MiB + 3 B write takes 11 submissions, staged
        // by up to 4 threads taking 256 KiB pieces, the ring wrapping several times.
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
fn small_chunks_in_either_staging_memory_arrive_intact_in_order() {
    with_gpu(|set| {
        let device = &set.devices()[0];
        let usage = BufferUsage::COPY_DST | BufferUsage::COPY_SRC | BufferUsage::STORAGE;
        for memory in [StagingMemory::WriteCombined, StagingMemory::Cached] {
            for (chunk, streaming, window) in [
                (1u64 << 20, false, None),
                ((2 << 20) + 4096, true, Some(0)),
                (1, false, Some(1 << 20)),
                (u64::MAX, true, Some(u64::MAX)),
                (1 << 20, true, Some(3 << 20)),
            ] {
                // 6 MiB of ring: 1 MiB chunks (each staged while the last one's copy is
                // submitted), chunks that leave an odd remainder, the smallest chunk (64 KiB)
                // and the largest (half the ring), the ring wrapping many times; streamed writes
                // confined to a window of the ring (at least two chunks, at most the ring).
                let mut uploader = Uploader::with_staging_memory(device, "chunked upload", 6 << 20, memory)
                    .unwrap()
                    .with_copy_threads(3)
                    .with_chunk_bytes(chunk)
                    .with_streaming_stores(streaming);
                if let Some(window) = window {
                    uploader = uploader.with_stream_window(window);
                }
                assert_eq!(uploader.staging_memory(), memory);
                let chunk = chunk.clamp(64 << 10, 3 << 20);
                assert_eq!(uploader.chunk_bytes(), chunk);
                assert_eq!(uploader.stream_window(), window.unwrap_or(6 << 20).clamp(2 * chunk, 6 << 20));
                let len = (13 << 20) + 5;
                let dst = device
                    .create_buffer(&BufferDesc::new("chunked destination", len as u64 + 32, usage))
                    .unwrap();
                let first = pattern(len, chunk ^ 0x5555);
                uploader.write_buffer(&dst, 32, &first).unwrap();
                // Overlapping the first write's last bytes while they may still be queued: the
                // later write wins.
                let second = pattern(3 << 20, chunk ^ 0x7777);
                uploader.write_buffer(&dst, len as u64 + 32 - (2 << 20), &second[..2 << 20]).unwrap();
                uploader.wait_idle().unwrap();
                let back = device.read_back(&dst, 32, len as u64).unwrap();
                let split = len - (2 << 20);
                assert!(back[..split] == first[..split], "{memory:?}, chunk {chunk}: the first write");
                assert!(
                    back[split..] == second[..2 << 20],
                    "{memory:?}, chunk {chunk}: the later write wins"
                );
                assert_eq!(uploader.staging_in_use(), (0, 0));
            }
        }
    });
}

#[test]
fn a_submission_failing_mid_stream_leaves_every_chunk_queued_for_the_retry() {
    use residency_vulkan::{FaultSite, InjectedFault};
    with_gpu(|set| {
        let device = &set.devices()[0];
        let usage = BufferUsage::COPY_DST | BufferUsage::COPY_SRC | BufferUsage::STORAGE;
        let len = (9 << 20) + 11;
        let dst = device.create_buffer(&BufferDesc::new("retried destination", len as u64, usage)).unwrap();
        for skip in [0, 2] {
            // 8 MiB of ring, 1 MiB chunks: the first (or third) chunk's submission fails.
            let uploader = Uploader::new(device, "failing upload", 8 << 20)
                .unwrap()
                .with_copy_threads(2)
                .with_chunk_bytes(1 << 20);
            let data = pattern(len, 41 + skip);
            device.ledger().inject_fault(FaultSite::QueueSubmit, skip, InjectedFault::OutOfDeviceMemory);
            let err = uploader.write_buffer(&dst, 0, &data).unwrap_err();
            device.ledger().clear_faults();
            assert!(err.to_string().to_lowercase().contains("memory"), "{err}");
            // Every staged chunk stays queued: the retry (a flush) lands the whole write.
            uploader.wait_idle().unwrap();
            let back = device.read_back(&dst, 0, len as u64).unwrap();
            let staged = (1 + skip as usize) << 20;
            assert!(back[..staged] == data[..staged], "the chunks staged before the failure arrive");
            assert_eq!(uploader.staging_in_use(), (0, 0), "every chunk's ring space came back");
            // Written again whole: arrives intact.
            uploader.write_buffer(&dst, 0, &data).unwrap();
            uploader.wait_idle().unwrap();
            assert!(device.read_back(&dst, 0, len as u64).unwrap() == data);
        }
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

/// The first index of `data` whose address is `rem` past a multiple of `alignment`.
fn index_at(data: &[u8], alignment: usize, rem: usize) -> usize {
    let address = data.as_ptr() as usize;
    (alignment + rem - address % alignment) % alignment
}

/// A destination filled with a known pattern, so that bytes outside an upload are checked too.
fn filled_destination(device: &residency_vulkan::Device, name: &str, len: usize) -> residency_vulkan::Buffer {
    let usage = BufferUsage::COPY_DST | BufferUsage::COPY_SRC | BufferUsage::STORAGE;
    let dst = device.create_buffer(&BufferDesc::new(name, len as u64, usage)).unwrap();
    let fill = Uploader::new(device, "fill", 1 << 20).unwrap().with_import_threshold(u64::MAX);
    assert_eq!(fill.upload_buffer(&dst, 0, &pattern(len, 99)).unwrap(), UploadPath::Staged);
    dst
}

/// A slice whose start and end are not on the import alignment, imported in several pieces into
/// a destination offset that is not aligned either: every byte arrives, the bytes around the
/// range keep what they held, the ends went through the ring and the middle was imported (on a
/// device with VK_EXT_external_memory_host; elsewhere it is staged).
#[test]
fn an_imported_upload_of_an_unaligned_slice_arrives_bit_exact() {
    with_gpu(|set| {
        let device = &set.devices()[0];
        let alignment = device.host_import_alignment();
        if std::env::var("RESIDENCY_REQUIRE_GPU").is_ok_and(|v| v == "1") {
            // Lavapipe and the NVIDIA driver have the extension.
            assert!(alignment.is_some(), "{} imports host memory", device.name());
        }
        let align = alignment.unwrap_or(4096) as usize;
        let source = pattern(3 * (1 << 20) + 3 * align, 0x51);
        // Start 7 B past an aligned address, end 5 B before the next one after ~3 MiB.
        let start = index_at(&source, align, 7);
        let end = start + (3 << 20) + align - 7 - 5 + align;
        let data = &source[start..end];
        assert_ne!(data.as_ptr() as usize % align, 0);
        assert_ne!((data.as_ptr() as usize + data.len()) % align, 0);
        let total = data.len() + 64;
        let dst = filled_destination(device, "imported destination", total);
        // 1 MiB pieces: several imports, each with its own submission.
        let uploader = Uploader::new(device, "imports", 1 << 20)
            .unwrap()
            .with_import_threshold(0)
            .with_import_chunk(1 << 20);
        let path = uploader.upload_buffer(&dst, 3, data).unwrap();
        if alignment.is_some() {
            let head = align - 7;
            let tail = align - 5;
            assert_eq!(path, UploadPath::Imported { staged: (head + tail) as u64 });
        } else {
            assert_eq!(path, UploadPath::Staged);
        }
        let mut expected = pattern(total, 99);
        expected[3..3 + data.len()].copy_from_slice(data);
        assert!(
            device.read_back(&dst, 0, total as u64).unwrap() == expected,
            "bit-exact, nothing else touched"
        );
        assert_eq!(uploader.staging_in_use(), (0, 0), "nothing left in flight");
        // No import outlives the call.
        let imports = |d: &residency_vulkan::Device| {
            d.ledger().live_objects().iter().filter(|o| o.kind == "imported host memory").count()
        };
        assert_eq!(imports(device), 0);
    });
}

/// An upload queued before an imported one (overlapping bytes) is copied first: the imported
/// data wins, and the one queued after it wins over it.
#[test]
fn an_imported_upload_is_ordered_between_queued_writes() {
    with_gpu(|set| {
        let device = &set.devices()[0];
        let len = 2 << 20;
        let dst = filled_destination(device, "ordered destination", len);
        let uploader = Uploader::new(device, "ordered", 1 << 20).unwrap().with_import_threshold(0);
        let first = pattern(1 << 18, 1);
        uploader.write_buffer(&dst, 4096, &first).unwrap();
        let second = pattern(len - 8192, 2);
        assert_ne!(uploader.upload_buffer(&dst, 100, &second).unwrap(), UploadPath::Staged);
        let third = pattern(1000, 3);
        uploader.write_buffer(&dst, 5000, &third).unwrap();
        uploader.wait_idle().unwrap();
        let mut expected = pattern(len, 99);
        expected[100..100 + second.len()].copy_from_slice(&second);
        expected[5000..6000].copy_from_slice(&third);
        assert!(device.read_back(&dst, 0, len as u64).unwrap() == expected);
    });
}

/// Where importing cannot pay or cannot work, `upload_buffer` stages: a slice under the
/// threshold, a slice with no aligned middle, imports turned off; each arrives bit-exact.
#[test]
fn an_upload_falls_back_to_staging_where_it_must() {
    with_gpu(|set| {
        let device = &set.devices()[0];
        let align = device.host_import_alignment().unwrap_or(4096) as usize;
        let len = 4 << 20;
        let dst = filled_destination(device, "fallback destination", len);
        let source = pattern(len, 5);
        let mut expected = pattern(len, 99);
        // Under the default threshold.
        let uploader = Uploader::new(device, "fallbacks", 1 << 20).unwrap();
        let small = &source[..(residency_vulkan::DEFAULT_IMPORT_THRESHOLD as usize).min(len) - 1];
        assert_eq!(uploader.upload_buffer(&dst, 0, small).unwrap(), UploadPath::Staged);
        expected[..small.len()].copy_from_slice(small);
        // No whole aligned block inside: staged even with no threshold.
        let uploader = uploader.with_import_threshold(0);
        let at = index_at(&source, align, 1);
        let short = &source[at..at + align - 2];
        assert_eq!(uploader.upload_buffer(&dst, 11, short).unwrap(), UploadPath::Staged);
        expected[11..11 + short.len()].copy_from_slice(short);
        // Imports turned off.
        let uploader = uploader.with_import_threshold(u64::MAX);
        assert_eq!(uploader.upload_buffer(&dst, 1 << 20, &source[..1 << 20]).unwrap(), UploadPath::Staged);
        expected[1 << 20..2 << 20].copy_from_slice(&source[..1 << 20]);
        // Refused with nothing staged, as `write_buffer` is.
        let err = uploader.with_import_threshold(0).upload_buffer(&dst, len as u64 - 10, &source[..4096 * 3]);
        assert!(err.unwrap_err().to_string().contains("outside"));
        assert!(device.read_back(&dst, 0, len as u64).unwrap() == expected);
    });
}

/// Staging with non-temporal stores (where the CPU has them) moves the same bytes: an unaligned
/// source into an unaligned destination offset, pipelined through the ring by several threads.
#[test]
fn a_write_staged_with_streaming_stores_arrives_intact() {
    with_gpu(|set| {
        let device = &set.devices()[0];
        let uploader = Uploader::new(device, "streaming", 4 << 20)
            .unwrap()
            .with_copy_threads(3)
            .with_streaming_stores(true);
        let len = (9 << 20) + 13;
        let source = pattern(len + 5, 0x77);
        let data = &source[5..];
        let dst = filled_destination(device, "streaming destination", len + 40);
        uploader.write_buffer(&dst, 17, data).unwrap();
        uploader.wait_idle().unwrap();
        let mut expected = pattern(len + 40, 99);
        expected[17..17 + len].copy_from_slice(data);
        assert!(device.read_back(&dst, 0, expected.len() as u64).unwrap() == expected);
    });
}

/// A piece whose import fails (an injected `vkAllocateMemory` failure, as a driver refusing the
/// pointer would) goes through the ring instead; the other pieces are imported, every byte
/// arrives and no import is left behind — with one import thread and with several.
#[test]
fn a_piece_that_fails_to_import_is_staged_instead() {
    use residency_vulkan::{FaultSite, InjectedFault};
    with_gpu(|set| {
        let device = &set.devices()[0];
        let Some(align) = device.host_import_alignment() else { return };
        let align = align as usize;
        let source = pattern((4 << 20) + 3 * align, 0x3c);
        let start = index_at(&source, align, 100);
        // A 4 MiB aligned middle in four 1 MiB pieces, 100 B and 50 B at the ends.
        let data = &source[start..start + (align - 100) + (4 << 20) + 50];
        let dst = filled_destination(device, "refused destination", data.len());
        for threads in [1, 3] {
            let uploader = Uploader::new(device, "refused imports", 1 << 20)
                .unwrap()
                .with_import_threshold(0)
                .with_import_chunk(1 << 20)
                .with_import_threads(threads);
            device.ledger().inject_fault(FaultSite::AllocateMemory, 1, InjectedFault::OutOfDeviceMemory);
            let path = uploader.upload_buffer(&dst, 0, data).unwrap();
            device.ledger().clear_faults();
            assert_eq!(
                path,
                UploadPath::Imported { staged: (align - 100 + 50 + (1 << 20)) as u64 },
                "{threads} threads"
            );
            assert!(device.read_back(&dst, 0, data.len() as u64).unwrap() == data, "{threads} threads");
            // The next upload (other data) imports every piece again.
            let other: Vec<u8> = data.iter().map(|b| !b).collect();
            let path = uploader.upload_buffer(&dst, 0, &other).unwrap();
            assert!(matches!(path, UploadPath::Imported { .. }));
            assert!(device.read_back(&dst, 0, data.len() as u64).unwrap() == other);
        }
    });
}
