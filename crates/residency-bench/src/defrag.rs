//! `residency-bench defrag`: defragmentation the library carries out (issue 18), in passes, on
//! two fragmented workloads, every resource's contents verified before and after:
//!
//! - **general heaps**: W2-style churn over the device's general allocator — buffers of 64 KiB to
//!   2 MiB and RGBA8 images of 128² to 512² (one in four), created until `--mib` MiB, then a
//!   random half destroyed (≈ 50 % holes) — defragmented by `Defragmenter::pass_with_images`
//!   until a pass moves nothing. Move rate: bytes moved over the passes' wall time, each pass
//!   timed from its start until its copy submission completed (`Device::wait_submitted`), and
//!   over the GPU time of the copies (`Defragmenter::last_copy_gpu_ms`: timestamps around them).
//! - **a sparse tile pool after streaming with evictions**: `--images` sparse images of 2048²
//!   RGBA8 in a pool of 4 MiB heaps (64 tiles); random tiles streamed in under a budget of
//!   `--tiles` tiles (a random resident tile evicted when over it), then a random half of the
//!   resident tiles evicted (the camera moved on); compacted by `SparseTilePool::compact` until a
//!   pass moves nothing. Move rate: bytes moved over the GPU time of the pass's copies
//!   (timestamps; heap to heap through carrier images where the device has
//!   `sparseResidencyAliased`: RGBA8 tiles by the compute copy, one dispatch per pass, between
//!   R32_UINT storage carriers) and over the wall time. The same workload (same seed) is
//!   compacted twice more for comparison: heap to heap by `vkCmdCopyImage` alone
//!   (`CompactCopy::ImageCopy`: the carriers copied in at most two regions), `tiles_image_copy`,
//!   and through staging (`CompactCopy::Staging`: each tile out to staging and back after the
//!   rebind, one region per tile each way), `tiles_staging`. Each pass reports its path
//!   (`compute`, `image_copy`, `staging`), dispatches, runs, copy regions, barrier sets and bind
//!   entries.
//!
//! Baseline, same run: one `vkCmdCopyBuffer` of the same bytes between two device-local buffers,
//! timed the same two ways (GPU timestamps; submission wall time of `Device::submit_once`): of
//! the bytes of the largest pass of either workload, and of the largest tile pass
//! (`tile_plain_copy_*`, what `tile_moves_over_tile_copy_gpu` compares the tile moves to).
//! Heap figures: heaps (general: non-dedicated blocks that hold an allocation; tiles: pool heaps)
//! and their bytes, before and after, against the live bytes. Heaps freed are counted in the
//! device's ledger once the GPU is past the passes (the real frees), not just emptied. With
//! `--dump PREFIX`, the general heaps' VMA-format JSON dumps are written to `PREFIX-before.json`
//! and `PREFIX-after.json`.

use residency::core::format::Format;
use residency::core::report::{to_vma_json, RangeKind};
use residency::core::tiles::{SparseImageDesc, TexelRegion, TileIndex, TilePoolDesc};
use residency::core::usage::{BufferUsage, ImageUsage};
use residency::vulkan::ash::vk;

use residency::vulkan::compute::{spirv_words, Binding, BindingKind, ComputeProgram};
use residency::vulkan::recording::Timestamps;
use residency::vulkan::sparse::{CompactCopy, CompactPath, CompactStats, SparseImage, SparseTilePool};
use residency::vulkan::{
    Buffer, BufferDesc, DefragDesc, Defragmenter, Device, DeviceSet, DeviceSetDesc, Image, ImageDesc,
    ImageRegion, Uploader,
};
use serde::Serialize;
use std::collections::BTreeSet;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Instant;

use crate::vma_rng::VmaRng;

type BenchResult<T> = Result<T, Box<dyn std::error::Error>>;

const TILE_POOL: &str = "bench tiles";
const SPARSE_SIDE: u32 = 2048;

/// Options of `residency-bench defrag`.
#[derive(Clone, Debug)]
pub struct DefragOptions {
    json: bool,
    mib: u64,
    images: u32,
    tiles: u32,
    seed: u32,
    max_passes: u32,
    dump: Option<String>,
}

/// Parses the options.
pub fn parse_options(args: &[String]) -> Result<DefragOptions, String> {
    let mut o =
        DefragOptions { json: false, mib: 512, images: 8, tiles: 1024, seed: 18, max_passes: 64, dump: None };
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        let mut number = |name: &str| crate::positive::<u64>(&mut it, name);
        match arg.as_str() {
            "--json" => o.json = true,
            "--mib" => o.mib = number("--mib")?,
            "--images" => o.images = number("--images")?.min(64) as u32,
            "--tiles" => o.tiles = number("--tiles")?.min(1 << 20) as u32,
            "--seed" => o.seed = number("--seed")? as u32,
            "--max-passes" => o.max_passes = number("--max-passes")? as u32,
            "--dump" => o.dump = Some(it.next().ok_or("--dump needs a path prefix")?.clone()),
            other => return Err(format!("unexpected argument `{other}`")),
        }
    }
    Ok(o)
}

/// One pass.
#[derive(Debug, Serialize)]
struct PassReport {
    moves: u64,
    bytes_moved: u64,
    heaps_emptied: u64,
    /// General: heaps the pass created to repack into, and their bytes (tiles: 0).
    heaps_created: u64,
    heap_bytes_created: u64,
    /// CPU time of the pass (general: planning, creating, recording, submitting; tiles: planning
    /// and accounting), microseconds.
    cpu_us: u64,
    /// Wall time until the pass's copies completed, microseconds.
    wall_us: u64,
    /// GPU time of the copies (tiles: timestamps around the pass's copies), milliseconds.
    gpu_copy_ms: Option<f64>,
    /// Tiles: how the pass copied, counted (none for the general heaps).
    #[serde(skip_serializing_if = "Option::is_none")]
    tile_copies: Option<TileCopies>,
}

/// A tile pass's copies and binds, counted.
#[derive(Debug, Serialize)]
struct TileCopies {
    /// Heap to heap (one copy per tile), not through staging (two).
    direct: bool,
    /// How the tiles were copied (`compute`, `mixed`, `image_copy`, `staging`).
    path: CompactPath,
    /// Tiles copied by the compute shader, and its dispatches.
    compute_tiles: u32,
    dispatches: u32,
    /// Runs of moves between one heap pair, consecutive in both (what one region can carry).
    runs: u32,
    copy_commands: u32,
    copy_regions: u32,
    /// Pipeline barrier commands (barrier sets).
    barriers: u32,
    /// Bind entries of the images' rebind, and of the carrier images (direct).
    bind_entries: u64,
    carrier_bind_entries: u64,
}

impl TileCopies {
    fn of(stats: &CompactStats) -> TileCopies {
        TileCopies {
            direct: stats.direct,
            path: stats.path,
            compute_tiles: stats.compute_tiles,
            dispatches: stats.dispatches,
            runs: stats.runs,
            copy_commands: stats.copy_commands,
            copy_regions: stats.copy_regions,
            barriers: stats.barriers,
            bind_entries: stats.bind.bind_entries,
            carrier_bind_entries: stats.carrier_bind_entries,
        }
    }
}

/// One workload before and after.
#[derive(Debug, Serialize)]
struct PartReport {
    resources: u64,
    moved_resources: u64,
    live_bytes: u64,
    heaps_before: u64,
    heaps_after: u64,
    heap_bytes_before: u64,
    heap_bytes_after: u64,
    heap_bytes_over_live_before: f64,
    heap_bytes_over_live_after: f64,
    /// General: bytes of every heap of the general allocator after the passes and
    /// `Device::release_empty_heaps`, empty ones included (tiles: the pool's heaps, as
    /// `heap_bytes_after`).
    all_heap_bytes_after: u64,
    /// General: bytes of empty heaps (the one a memory type keeps for reuse) freed after the
    /// passes by `Device::release_empty_heaps` (tiles: 0).
    empty_heap_bytes_released: u64,
    /// Heap memories freed, as the device's ledger counts them once the GPU is past the passes.
    heaps_freed: u64,
    bytes_moved: u64,
    passes: Vec<PassReport>,
    move_gb_per_s_wall: f64,
    move_gb_per_s_gpu: Option<f64>,
    verified: bool,
}

#[derive(Debug, Serialize)]
struct DefragReport {
    device: String,
    seed: u32,
    heaps_before: u64,
    heaps_after: u64,
    bytes_moved: u64,
    verified: bool,
    validation_problems: u64,
    general: PartReport,
    /// The tile pool compacted the default way (`CompactCopy::Direct`: the compute copy where
    /// the tiles' class has storage carriers).
    tiles: PartReport,
    /// The same workload compacted heap to heap by `vkCmdCopyImage` alone
    /// (`CompactCopy::ImageCopy`: the way before the compute copy).
    tiles_image_copy: PartReport,
    /// The same workload compacted through staging (`CompactCopy::Staging`).
    tiles_staging: PartReport,
    /// The tile baseline: one buffer copy of the bytes the largest tile pass moved, as
    /// `plain_copy_*`.
    tile_plain_copy_bytes: u64,
    tile_plain_copy_gb_per_s_gpu: Option<f64>,
    /// Tile moves (GPU) over the tile baseline (GPU): the target is ≥ 0.5.
    tile_moves_over_tile_copy_gpu: Option<f64>,
    /// Tile moves by `vkCmdCopyImage` between carriers (GPU) over the tile baseline (GPU).
    tile_image_copy_moves_over_tile_copy_gpu: Option<f64>,
    /// Tile moves through staging (GPU) over the tile baseline (GPU).
    tile_staging_moves_over_tile_copy_gpu: Option<f64>,
    /// The baseline: one buffer copy of the bytes the largest pass moved.
    plain_copy_bytes: u64,
    plain_copy_gb_per_s_wall: f64,
    plain_copy_gb_per_s_gpu: Option<f64>,
    /// The first copy, into a destination never written before.
    plain_copy_first_gb_per_s_gpu: Option<f64>,
    /// General moves (wall) over the plain copy (wall).
    general_moves_over_copy_wall: f64,
    /// General moves (GPU) over the plain copy (GPU).
    general_moves_over_copy_gpu: Option<f64>,
    /// General moves (GPU) over the first plain copy, into fresh memory (GPU): the moves'
    /// destinations were never written either.
    general_moves_over_first_copy_gpu: Option<f64>,
    /// Tile moves (GPU) over the plain copy (GPU).
    tile_moves_over_copy_gpu: Option<f64>,
    /// The bytes of the largest tile pass copied image to image in several ways.
    copy_probe: CopyProbe,
    /// Blocks and bytes in the VMA-format dumps of the general heaps.
    vma_dump_before: DumpSummary,
    vma_dump_after: DumpSummary,
    seconds: f64,
}

#[derive(Debug, Default, Serialize)]
struct DumpSummary {
    json_bytes: u64,
    blocks: u64,
    block_bytes: u64,
    allocation_bytes: u64,
}

fn gb_per_s(bytes: u64, seconds: f64) -> f64 {
    bytes as f64 / seconds.max(1e-9) / 1e9
}

/// Bytes of resource `i`: differ per resource and per byte.
fn pattern(i: u64, len: u64) -> Vec<u8> {
    (0..len).map(|j| (j.wrapping_mul(2_654_435_761) >> 11 ^ i.wrapping_mul(0x9e37)) as u8).collect()
}

/// Bytes of every non-dedicated heap of the general allocator, empty ones included.
fn all_general_heap_bytes(device: &Device) -> u64 {
    let report = device.memory_report();
    report.blocks().filter(|(_, pool, b)| pool.is_none() && !b.dedicated).map(|(_, _, b)| b.size).sum()
}

/// The general heaps: (heaps holding an allocation, their bytes).
fn general_heaps(device: &Device) -> (u64, u64) {
    let report = device.memory_report();
    let mut heaps = 0;
    let mut bytes = 0;
    for (_, _, block) in report.blocks().filter(|(_, pool, b)| pool.is_none() && !b.dedicated) {
        if block.ranges.iter().any(|r| matches!(r.kind, RangeKind::Allocation(_))) {
            heaps += 1;
            bytes += block.size;
        }
    }
    (heaps, bytes)
}

fn dump(device: &Device, path: Option<String>) -> BenchResult<DumpSummary> {
    let report = device.memory_report();
    let json = to_vma_json(&report);
    if let Some(path) = path {
        std::fs::write(&path, &json)?;
    }
    let total = report.statistics().total;
    Ok(DumpSummary {
        json_bytes: json.len() as u64,
        blocks: total.block_count,
        block_bytes: total.block_bytes,
        allocation_bytes: total.allocation_bytes,
    })
}

enum Resource {
    Buffer(Buffer),
    Image(Image),
}

impl Resource {
    fn place(&self) -> (vk::DeviceMemory, u64) {
        match self {
            Resource::Buffer(b) => b.memory(),
            Resource::Image(i) => i.memory(),
        }
    }
}

fn general(device: &Arc<Device>, o: &DefragOptions, dumps: &mut [DumpSummary; 2]) -> BenchResult<PartReport> {
    let mut rng = VmaRng::new(o.seed);
    let usage = BufferUsage::STORAGE | BufferUsage::COPY_SRC | BufferUsage::COPY_DST;
    let image_usage = ImageUsage::SAMPLED | ImageUsage::COPY_SRC | ImageUsage::COPY_DST;
    let mut all: Vec<(u64, Resource, u64)> = Vec::new();
    let mut total = 0u64;
    let mut i = 0u64;
    while total < o.mib << 20 {
        let r = rng.generate();
        let resource = if r % 4 == 0 {
            let side = [128, 256, 512][(r / 4 % 3) as usize];
            let desc = ImageDesc::new_2d(
                format!("defrag bench image {i}"),
                Format::R8G8B8A8Unorm,
                side,
                side,
                image_usage,
            );
            Resource::Image(device.create_image(&desc)?)
        } else {
            let size = (64 << 10) * u64::from(1 + (r / 4) % 32);
            Resource::Buffer(device.create_buffer(&BufferDesc::new(
                format!("defrag bench buffer {i}"),
                size,
                usage,
            ))?)
        };
        let bytes = match &resource {
            Resource::Buffer(b) => b.size(),
            Resource::Image(im) => u64::from(im.desc().extent[0]) * u64::from(im.desc().extent[1]) * 4,
        };
        total += bytes;
        all.push((i, resource, bytes));
        i += 1;
    }
    // The churn: a random half goes.
    all.retain(|_| rng.generate() % 2 == 0);
    let images: Vec<&Image> = all
        .iter()
        .filter_map(|(_, r, _)| match r {
            Resource::Image(im) => Some(im),
            Resource::Buffer(_) => None,
        })
        .collect();
    device.discard_to_general(&images)?;
    let uploader = Uploader::new(device, "defrag bench", 32 << 20)?;
    for (i, r, bytes) in &all {
        match r {
            Resource::Buffer(b) => uploader.write_buffer(b, 0, &pattern(*i, *bytes))?,
            Resource::Image(im) => {
                let e = im.desc().extent;
                uploader
                    .write_image(&ImageRegion::new(im, 0, [0; 3], [e[0], e[1], 1]), &pattern(*i, *bytes))?
            }
        }
    }
    uploader.destroy()?;
    device.wait_submitted()?;
    let live: u64 = all.iter().map(|(_, _, b)| b).sum();
    let (heaps_before, heap_bytes_before) = general_heaps(device);
    let memories_before = heap_memories(device, "type");
    dumps[0] = dump(device, o.dump.as_ref().map(|p| format!("{p}-before.json")))?;
    let places: Vec<_> = all.iter().map(|(_, r, _)| r.place()).collect();

    let mut defrag = Defragmenter::new(device, DefragDesc::default())?;
    let mut passes = Vec::new();
    for _ in 0..o.max_passes {
        let started = Instant::now();
        let mut buffers: Vec<&mut Buffer> = Vec::new();
        let mut images: Vec<&mut Image> = Vec::new();
        for (_, r, _) in all.iter_mut() {
            match r {
                Resource::Buffer(b) => buffers.push(b),
                Resource::Image(im) => images.push(im),
            }
        }
        let stats = defrag.pass_with_images(&mut buffers, &mut images)?;
        device.wait_submitted()?;
        let wall = started.elapsed();
        if stats.moves == 0 {
            break;
        }
        passes.push(PassReport {
            moves: u64::from(stats.moves),
            bytes_moved: stats.bytes_moved,
            heaps_emptied: u64::from(stats.heaps_emptied),
            heaps_created: u64::from(stats.heaps_created),
            heap_bytes_created: stats.heap_bytes_created,
            cpu_us: stats.cpu_time.as_micros() as u64,
            wall_us: wall.as_micros() as u64,
            gpu_copy_ms: defrag.last_copy_gpu_ms(),
            tile_copies: None,
        });
    }
    device.wait_submitted()?;
    // What the allocator kept empty for reuse goes back too (after defragmenting, the point is
    // memory back).
    let empty_heap_bytes_released = device.release_empty_heaps();
    let (heaps_after, heap_bytes_after) = general_heaps(device);
    let all_heap_bytes_after = all_general_heap_bytes(device);
    dumps[1] = dump(device, o.dump.as_ref().map(|p| format!("{p}-after.json")))?;
    let heaps_freed = memories_before.saturating_sub(heap_memories(device, "type"));
    let moved = all.iter().zip(&places).filter(|((_, r, _), p)| r.place() != **p).count() as u64;
    let mut verified = true;
    for (i, r, bytes) in &all {
        let back = match r {
            Resource::Buffer(b) => device.read_back(b, 0, *bytes)?,
            Resource::Image(im) => device.read_image(im, vk::ImageLayout::GENERAL)?,
        };
        verified &= back == pattern(*i, *bytes);
    }
    let bytes_moved: u64 = passes.iter().map(|p| p.bytes_moved).sum();
    let wall: f64 = passes.iter().map(|p| p.wall_us as f64 / 1e6).sum();
    let gpu: Option<f64> = passes.iter().map(|p| p.gpu_copy_ms).sum::<Option<f64>>().map(|ms| ms / 1e3);
    let resources = all.len() as u64;
    drop(all);
    Ok(PartReport {
        resources,
        moved_resources: moved,
        live_bytes: live,
        heaps_before,
        heaps_after,
        heap_bytes_before,
        heap_bytes_after,
        heap_bytes_over_live_before: heap_bytes_before as f64 / live as f64,
        heap_bytes_over_live_after: heap_bytes_after as f64 / live as f64,
        all_heap_bytes_after,
        empty_heap_bytes_released,
        heaps_freed,
        bytes_moved,
        passes,
        move_gb_per_s_wall: gb_per_s(bytes_moved, wall),
        move_gb_per_s_gpu: gpu.map(|s| gb_per_s(bytes_moved, s)),
        verified,
    })
}

/// Memory objects in the ledger whose name contains `part` (a general heap's name holds
/// "type", a tile heap's the pool's name).
fn heap_memories(device: &Device, part: &str) -> u64 {
    device.ledger().live_objects().iter().filter(|o| o.kind == "memory" && o.name.contains(part)).count()
        as u64
}

/// Tile (x, y) of image `image`'s texels.
fn tile_pattern(image: u32, tile: TileIndex, bytes: usize) -> Vec<u8> {
    pattern(u64::from(image) << 32 | u64::from(tile.0), bytes as u64)
}

/// Every resident tile of every image read back and compared; the resident tiles.
fn check_tiles(images: &[SparseImage]) -> BenchResult<(bool, Vec<BTreeSet<TileIndex>>)> {
    let mut ok = true;
    let mut resident = Vec::new();
    for (k, image) in images.iter().enumerate() {
        let shape = image.layout().tile_shape();
        let all = image.read_region(
            0,
            0,
            TexelRegion { offset: [0; 3], extent: [SPARSE_SIDE, SPARSE_SIDE, 1] },
            u64::MAX,
        )?;
        let row = (SPARSE_SIDE * 4) as usize;
        let mut set = BTreeSet::new();
        for (tile, _) in image.residency().page_table().mapped() {
            let c = image.layout().tile_coord(tile).expect("mapped tiles are in the layout");
            let want = tile_pattern(k as u32, tile, (shape.width * shape.height * 4) as usize);
            for y in 0..shape.height as usize {
                let start = (c.y * shape.height) as usize * row + y * row + (c.x * shape.width * 4) as usize;
                let w = (shape.width * 4) as usize;
                ok &= all[start..start + w] == want[y * w..(y + 1) * w];
            }
            set.insert(tile);
        }
        resident.push(set);
    }
    Ok((ok, resident))
}

fn tiles(device: &Arc<Device>, o: &DefragOptions, copy: CompactCopy) -> BenchResult<PartReport> {
    let mut rng = VmaRng::new(o.seed ^ 0x7111);
    let pool = SparseTilePool::new(
        Arc::clone(device),
        TilePoolDesc::default().with_name(TILE_POOL).with_tiles_per_heap(64),
    )?;
    let desc = SparseImageDesc::new_2d(Format::R8G8B8A8Unorm, SPARSE_SIDE, SPARSE_SIDE).with_mip_levels(1);
    let mut images = (0..o.images)
        .map(|k| SparseImage::new(&pool, &format!("defrag bench sparse {k}"), &desc, false))
        .collect::<Result<Vec<_>, _>>()?;
    let per_image = images[0].layout().tile_count();
    let budget = o.tiles.min(per_image * o.images);
    // Streaming with evictions: random tiles in, a random resident one out when over budget.
    let mut resident: Vec<(usize, TileIndex)> = Vec::new();
    for step in 0..3 * budget {
        let k = (rng.generate() % o.images) as usize;
        let tile = TileIndex(rng.generate() % per_image);
        if !images[k].residency().page_table().is_resident(tile) {
            images[k].commit_tiles(&pool, &[tile])?;
            resident.push((k, tile));
        }
        if resident.len() > budget as usize {
            let (k, tile) = resident.swap_remove((rng.generate() as usize) % resident.len());
            images[k].release_tiles(&pool, &[tile])?;
        }
        if step % 256 == 255 {
            pool.flush_binds(&mut images.iter_mut().collect::<Vec<_>>())?;
        }
    }
    // The camera moved on: a random half of what is resident is evicted.
    let evict = resident.len() / 2;
    for _ in 0..evict {
        let (k, tile) = resident.swap_remove((rng.generate() as usize) % resident.len());
        images[k].release_tiles(&pool, &[tile])?;
    }
    pool.flush_binds(&mut images.iter_mut().collect::<Vec<_>>())?;
    let shape = images[0].layout().tile_shape();
    let uploader = Uploader::new(device, "defrag bench tiles", 32 << 20)?;
    for (k, image) in images.iter().enumerate() {
        for (tile, _) in image.residency().page_table().mapped() {
            let c = image.layout().tile_coord(tile).expect("mapped");
            let region = ImageRegion::new(
                image,
                0,
                [c.x * shape.width, c.y * shape.height, 0],
                [shape.width, shape.height, 1],
            );
            uploader.write_image(&region, &tile_pattern(k as u32, tile, region.bytes() as usize))?;
        }
    }
    uploader.destroy()?;
    device.wait_submitted()?;
    let tile_bytes = pool.stats().tile_bytes;
    let live = pool.used_tiles() * tile_bytes;
    let before = pool.stats();
    let memories_before = heap_memories(device, TILE_POOL);
    let (ok_before, resident_before) = check_tiles(&images)?;
    let physical_before: Vec<Vec<_>> =
        images.iter().map(|i| i.residency().page_table().mapped().collect()).collect();

    let mut passes = Vec::new();
    for _ in 0..o.max_passes {
        let stats = pool.compact_with(&mut images.iter_mut().collect::<Vec<_>>(), 1024, &[], copy)?;
        if stats.moves == 0 {
            break;
        }
        passes.push(PassReport {
            moves: u64::from(stats.moves),
            bytes_moved: stats.bytes_moved,
            heaps_emptied: u64::from(stats.heaps_emptied),
            heaps_created: 0,
            heap_bytes_created: 0,
            cpu_us: stats.plan_time.as_micros() as u64,
            wall_us: stats.wall_time.as_micros() as u64,
            gpu_copy_ms: stats.copy_gpu_ms,
            tile_copies: Some(TileCopies::of(&stats)),
        });
    }
    device.wait_submitted()?;
    // Heaps the evictions had left empty before the passes (compaction releases only the heaps
    // it empties) go too, as the general part's empty heaps do.
    pool.trim();
    device.wait_submitted()?;
    let after = pool.stats();
    let heaps_freed = memories_before.saturating_sub(heap_memories(device, TILE_POOL));
    let (ok_after, resident_after) = check_tiles(&images)?;
    let moved: u64 = images
        .iter()
        .zip(&physical_before)
        .map(|(i, b)| i.residency().page_table().mapped().zip(b).filter(|(a, b)| a.1 != b.1).count() as u64)
        .sum();
    let verified =
        ok_before && ok_after && resident_before == resident_after && pool.check_invariants().is_ok();
    let bytes_moved: u64 = passes.iter().map(|p| p.bytes_moved).sum();
    let wall: f64 = passes.iter().map(|p| p.wall_us as f64 / 1e6).sum();
    let gpu: Option<f64> = passes.iter().map(|p| p.gpu_copy_ms).sum::<Option<f64>>().map(|ms| ms / 1e3);
    let heaps_before = before.heaps.len() as u64;
    let heaps_after = after.heaps.len() as u64;
    let report = PartReport {
        resources: u64::from(o.images),
        moved_resources: moved,
        live_bytes: live,
        heaps_before,
        heaps_after,
        heap_bytes_before: before.capacity_tiles * tile_bytes,
        heap_bytes_after: after.capacity_tiles * tile_bytes,
        heap_bytes_over_live_before: (before.capacity_tiles * tile_bytes) as f64 / live.max(1) as f64,
        heap_bytes_over_live_after: (after.capacity_tiles * tile_bytes) as f64 / live.max(1) as f64,
        all_heap_bytes_after: after.capacity_tiles * tile_bytes,
        empty_heap_bytes_released: 0,
        heaps_freed,
        bytes_moved,
        passes,
        move_gb_per_s_wall: gb_per_s(bytes_moved, wall),
        move_gb_per_s_gpu: gpu.map(|s| gb_per_s(bytes_moved, s)),
        verified,
    };
    device.wait_submitted()?;
    for image in images.iter_mut() {
        image.release_all(&pool)?;
    }
    pool.flush_binds(&mut images.iter_mut().collect::<Vec<_>>())?;
    drop(images);
    pool.trim();
    Ok(report)
}

/// One device-local buffer copy of `bytes`, four times into the same destination: (wall GB/s,
/// GPU GB/s) of the last three (median), and GPU GB/s of the first, into memory never written
/// before (what a move's destination is, and on lavapipe host memory its first touch).
pub(crate) fn plain_copy(device: &Arc<Device>, bytes: u64) -> BenchResult<(f64, Option<f64>, Option<f64>)> {
    let usage = BufferUsage::COPY_SRC | BufferUsage::COPY_DST;
    let src = device.create_buffer(&BufferDesc::new("defrag bench copy source", bytes, usage).committed())?;
    let dst = device.create_buffer(&BufferDesc::new("defrag bench copy target", bytes, usage).committed())?;
    let timestamps = Timestamps::new(device, "defrag bench copy", 2)?;
    let mut walls = Vec::new();
    let mut gpus = Vec::new();
    let mut first = None;
    for rep in 0..4 {
        let started = Instant::now();
        let mut recorded = Ok(());
        device.submit_once("defrag bench copy", |rec| {
            recorded = timestamps
                .cmd_reset(rec, 0..2)
                .and_then(|()| timestamps.cmd_write(rec, 0))
                .map_err(|e| e.to_string())
                .and_then(|()| rec.copy_buffer(&src, 0, &dst, 0, bytes).map_err(|e| e.to_string()))
                .and_then(|()| timestamps.cmd_write(rec, 1).map_err(|e| e.to_string()));
        })?;
        recorded?;
        let wall = gb_per_s(bytes, started.elapsed().as_secs_f64());
        let gpu = timestamps.elapsed_ms(0, 1).map(|ms| gb_per_s(bytes, ms / 1e3));
        if rep == 0 {
            first = gpu;
            continue;
        }
        walls.push(wall);
        gpus.extend(gpu);
    }
    let median = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    Ok((median(walls), (!gpus.is_empty()).then(|| median(gpus)), first))
}

/// One copy of the copy probe: what it copies and its GPU rate (timestamps around the copy
/// alone, after a barrier from every earlier write), the first time (memory just bound or made)
/// and the median of the next three.
#[derive(Debug, Serialize)]
struct ProbeCopy {
    name: &'static str,
    /// Whether the source or the destination (both unless the name says) is a sparse image (bound tile by tile, `SPARSE_ALIASED`
    /// where the device has `sparseResidencyAliased`), one image (upper half to lower half), and
    /// the region's extent in tiles (x, y).
    sparse: bool,
    same_image: bool,
    tiles_extent: [u32; 2],
    regions: u32,
    first_gb_per_s_gpu: Option<f64>,
    gb_per_s_gpu: Option<f64>,
    /// `gb_per_s_gpu` over the buffer copy's.
    over_buffer_copy: Option<f64>,
}

/// `residency-bench defrag`'s copy probe: the bytes of the largest tile pass (whole rows of
/// 2048-texel-wide RGBA8 images) copied one way after another, to tell what makes a tile
/// pass's image copy slower than a buffer copy of the same bytes on a device: sparse against
/// plain images (and which side: sparse into plain, plain into sparse), one image against two,
/// scattered against consecutive memory, a square region against a strip as wide as the device
/// allows (the carriers' shape).
#[derive(Debug, Serialize)]
struct CopyProbe {
    tiles: u32,
    bytes: u64,
    buffer_gb_per_s_gpu: Option<f64>,
    copies: Vec<ProbeCopy>,
}

const PROBE_POOL: &str = "bench copy probe";

/// `shaders/copy_probe.comp`, compiled.
const COPY_PROBE_SPV: &[u8] = include_bytes!("../shaders/copy_probe.comp.spv");

/// A sparse RGBA8 image of `tiles` (x, y) tiles of `shape` texels, one mip, nothing resident.
fn probe_image(
    pool: &SparseTilePool,
    name: &str,
    tiles: [u32; 2],
    shape: [u32; 2],
) -> BenchResult<SparseImage> {
    let desc = SparseImageDesc::new_2d(Format::R8G8B8A8Unorm, tiles[0] * shape[0], tiles[1] * shape[1])
        .with_mip_levels(1);
    Ok(SparseImage::new(pool, name, &desc, false)?)
}

/// Commits every tile of `images`, interleaved and in a random order when `scatter` (so the
/// tiles of one image lie scattered over the heaps), image after image in order otherwise.
fn probe_commit(
    pool: &SparseTilePool,
    images: &mut [&mut SparseImage],
    scatter: bool,
    rng: &mut VmaRng,
) -> BenchResult<()> {
    let mut all: Vec<(usize, TileIndex)> = Vec::new();
    for (k, image) in images.iter().enumerate() {
        all.extend((0..image.layout().tile_count()).map(|t| (k, TileIndex(t))));
    }
    if scatter {
        for i in (1..all.len()).rev() {
            all.swap(i, rng.generate() as usize % (i + 1));
        }
    }
    for (k, tile) in all {
        images[k].commit_tiles(pool, &[tile])?;
    }
    pool.flush_binds(images)?;
    Ok(())
}

/// A memory barrier from every earlier write to every later command.
fn probe_barrier(device: &Device, rec: &residency::vulkan::recording::Recording<'_>) {
    let barrier = [vk::MemoryBarrier2::default()
        .src_stage_mask(vk::PipelineStageFlags2::ALL_COMMANDS)
        .src_access_mask(vk::AccessFlags2::MEMORY_WRITE)
        .dst_stage_mask(vk::PipelineStageFlags2::ALL_COMMANDS)
        .dst_access_mask(vk::AccessFlags2::MEMORY_READ | vk::AccessFlags2::MEMORY_WRITE)];
    // SAFETY: `rec` is recording on `device` outside a render pass; core stages and accesses.
    unsafe {
        device
            .raw()
            .cmd_pipeline_barrier2(rec.raw(), &vk::DependencyInfo::default().memory_barriers(&barrier))
    };
}

/// Copies `regions` from `src` to `dst` (both in GENERAL) four times, one submission each:
/// GPU milliseconds of the first and the median of the other three.
fn probe_time(
    device: &Arc<Device>,
    (src, dst): (vk::Image, vk::Image),
    regions: &[vk::ImageCopy],
) -> BenchResult<(Option<f64>, Option<f64>)> {
    probe_time_with(device, |rec| {
        // SAFETY: `rec` records on `device` outside a render pass; both images are live
        // images of this device (the caller keeps them until this submission completed: it
        // is waited for) in GENERAL with transfer usage, every region lies in both and is
        // bound (fully committed sparse images, or plain images), and the source and
        // destination regions do not overlap.
        unsafe {
            device.raw().cmd_copy_image(
                rec.raw(),
                src,
                vk::ImageLayout::GENERAL,
                dst,
                vk::ImageLayout::GENERAL,
                regions,
            )
        };
        Ok(())
    })
}

/// Records `record` four times, one submission each, after a barrier from every earlier write,
/// between two timestamps: GPU milliseconds of the first and the median of the other three.
fn probe_time_with(
    device: &Arc<Device>,
    mut record: impl FnMut(&mut residency::vulkan::recording::Recording<'_>) -> BenchResult<()>,
) -> BenchResult<(Option<f64>, Option<f64>)> {
    let timestamps = Timestamps::new(device, "defrag bench copy probe", 2)?;
    let mut times = Vec::new();
    for _ in 0..4 {
        let mut recorded: BenchResult<()> = Ok(());
        device.submit_once("defrag bench copy probe", |rec| {
            probe_barrier(device, rec);
            recorded = timestamps
                .cmd_reset(rec, 0..2)
                .and_then(|()| timestamps.cmd_write(rec, 0))
                .map_err(Into::into)
                .and_then(|()| record(rec))
                .and_then(|()| timestamps.cmd_write(rec, 1).map_err(Into::into));
        })?;
        recorded?;
        times.push(timestamps.elapsed_ms(0, 1));
    }
    let first = times[0];
    let mut rest: Vec<f64> = times[1..].iter().flatten().copied().collect();
    rest.sort_by(f64::total_cmp);
    Ok((first, rest.get(rest.len() / 2).copied()))
}

/// The region(s) copying `n` tiles laid out `cols` a row from rows `0..` to rows `dst_row..`
/// (the full rows in one region, the last partial row in another).
fn probe_regions(n: u32, cols: u32, dst_row: u32, shape: [u32; 2]) -> Vec<vk::ImageCopy> {
    let layers = vk::ImageSubresourceLayers {
        aspect_mask: vk::ImageAspectFlags::COLOR,
        mip_level: 0,
        base_array_layer: 0,
        layer_count: 1,
    };
    let region = |row: u32, w: u32, h: u32| vk::ImageCopy {
        src_subresource: layers,
        src_offset: vk::Offset3D { x: 0, y: (row * shape[1]) as i32, z: 0 },
        dst_subresource: layers,
        dst_offset: vk::Offset3D { x: 0, y: ((row + dst_row) * shape[1]) as i32, z: 0 },
        extent: vk::Extent3D { width: w * shape[0], height: h * shape[1], depth: 1 },
    };
    let (full, rest) = (n / cols, n % cols);
    let mut regions = Vec::new();
    if full > 0 {
        regions.push(region(0, cols, full));
    }
    if rest > 0 {
        regions.push(region(full, rest, 1));
    }
    regions
}

fn copy_probe(device: &Arc<Device>, bytes: u64, seed: u32) -> BenchResult<CopyProbe> {
    let mut rng = VmaRng::new(seed ^ 0x9e0b);
    let pool = SparseTilePool::new(
        Arc::clone(device),
        TilePoolDesc::default().with_name(PROBE_POOL).with_tiles_per_heap(64),
    )?;
    let tile_bytes = pool.stats().tile_bytes;
    // The RGBA8 tile shape (128 × 128 on standard block shapes).
    let shape = {
        let desc =
            SparseImageDesc::new_2d(Format::R8G8B8A8Unorm, SPARSE_SIDE, SPARSE_SIDE).with_mip_levels(1);
        let image = SparseImage::new(&pool, "defrag bench copy probe shape", &desc, false)?;
        let s = image.layout().tile_shape();
        [s.width, s.height]
    };
    let square = SPARSE_SIDE / shape[0];
    let n = bytes.div_ceil(tile_bytes).div_ceil(u64::from(square)) as u32 * square;
    let rows = n / square;
    let bytes = u64::from(n) * tile_bytes;
    let (_, buffer, _) = plain_copy(device, bytes)?;
    let max = device.limits().max_image_dimension2_d;
    let strip = (max / shape[0]).min(n);
    let mut copies = Vec::new();
    let mut note = |name,
                    sparse,
                    same_image,
                    tiles_extent,
                    regions: &[vk::ImageCopy],
                    (first, median): (Option<f64>, Option<f64>)| {
        let rate = |ms: Option<f64>| ms.map(|ms| gb_per_s(bytes, ms / 1e3));
        copies.push(ProbeCopy {
            name,
            sparse,
            same_image,
            tiles_extent,
            regions: regions.len() as u32,
            first_gb_per_s_gpu: rate(first),
            gb_per_s_gpu: rate(median),
            over_buffer_copy: rate(median).zip(buffer).map(|(m, b)| m / b),
        });
    };

    // Plain images, two of them, in GENERAL (kept for the copies between plain and sparse).
    let plain = {
        let usage = ImageUsage::COPY_SRC | ImageUsage::COPY_DST;
        let desc =
            |name: &str| ImageDesc::new_2d(name, Format::R8G8B8A8Unorm, SPARSE_SIDE, rows * shape[1], usage);
        let a = device.create_image(&desc("defrag bench copy probe a"))?;
        let b = device.create_image(&desc("defrag bench copy probe b"))?;
        let to_general: Vec<vk::ImageMemoryBarrier2<'_>> = [a.raw(), b.raw()]
            .into_iter()
            .map(|image| {
                vk::ImageMemoryBarrier2::default()
                    .dst_stage_mask(vk::PipelineStageFlags2::COPY)
                    .dst_access_mask(vk::AccessFlags2::TRANSFER_READ | vk::AccessFlags2::TRANSFER_WRITE)
                    .old_layout(vk::ImageLayout::UNDEFINED)
                    .new_layout(vk::ImageLayout::GENERAL)
                    .image(image)
                    .subresource_range(vk::ImageSubresourceRange {
                        aspect_mask: vk::ImageAspectFlags::COLOR,
                        base_mip_level: 0,
                        level_count: 1,
                        base_array_layer: 0,
                        layer_count: 1,
                    })
            })
            .collect();
        device.submit_once("defrag bench copy probe: to GENERAL", |rec| {
            // SAFETY: `rec` records on `device` outside a render pass; both images are live,
            // bound, of one mip and layer, and used by nothing else.
            unsafe {
                device.raw().cmd_pipeline_barrier2(
                    rec.raw(),
                    &vk::DependencyInfo::default().image_memory_barriers(&to_general),
                )
            };
        })?;
        let regions = probe_regions(n, square, 0, shape);
        note(
            "image",
            false,
            false,
            [square, rows],
            &regions,
            probe_time(device, (a.raw(), b.raw()), &regions)?,
        );
        device.wait_submitted()?;
        [a, b]
    };
    // Sparse images: two of them (scattered, then consecutive memory), one (upper half to lower
    // half), and strips as wide as the device allows (one image, then two).
    for (name, same, cols, scatter) in [
        ("sparse", false, square, true),
        ("sparse_consecutive", false, square, false),
        ("sparse_one_image", true, square, true),
        ("sparse_strip_one_image", true, strip, true),
        ("sparse_strip", false, strip, true),
    ] {
        let r = n.div_ceil(cols);
        let mut images = if same {
            vec![probe_image(&pool, "defrag bench copy probe one", [cols, 2 * r], shape)?]
        } else {
            vec![
                probe_image(&pool, "defrag bench copy probe src", [cols, r], shape)?,
                probe_image(&pool, "defrag bench copy probe dst", [cols, r], shape)?,
            ]
        };
        probe_commit(&pool, &mut images.iter_mut().collect::<Vec<_>>(), scatter, &mut rng)?;
        let regions = probe_regions(n, cols, if same { r } else { 0 }, shape);
        let pair = (images[0].raw(), images[images.len() - 1].raw());
        let extent = [cols.min(n), r];
        note(name, true, same, extent, &regions, probe_time(device, pair, &regions)?);
        if name == "sparse" {
            // Which side is slow: a sparse source into a plain image, a plain source into a sparse one.
            let (src, dst) = (plain[0].raw(), plain[1].raw());
            note(
                "sparse_to_image",
                true,
                false,
                extent,
                &regions,
                probe_time(device, (pair.0, dst), &regions)?,
            );
            note(
                "image_to_sparse",
                true,
                false,
                extent,
                &regions,
                probe_time(device, (src, pair.1), &regions)?,
            );
        }
        device.wait_submitted()?;
        for image in images.iter_mut() {
            image.release_all(&pool)?;
        }
        pool.flush_binds(&mut images.iter_mut().collect::<Vec<_>>())?;
        drop(images);
        pool.trim();
    }
    // A compute copy between two sparse storage images (tiles scattered), texel for texel.
    {
        let desc = SparseImageDesc::new_2d(Format::R8G8B8A8Unorm, square * shape[0], rows * shape[1])
            .with_mip_levels(1);
        let mut images = vec![
            SparseImage::new(&pool, "defrag bench copy probe compute src", &desc, true)?,
            SparseImage::new(&pool, "defrag bench copy probe compute dst", &desc, true)?,
        ];
        probe_commit(&pool, &mut images.iter_mut().collect::<Vec<_>>(), true, &mut rng)?;
        // SAFETY: the words are `shaders/copy_probe.comp` compiled by glslc for Vulkan 1.3 (a
        // valid module of core capabilities only: Shader, no storage-image format extensions,
        // rgba8 being a required storage format): a compute
        // `main` of 16 × 16 invocations that uses two rgba8 storage images, bindings 0 and 1 of
        // set 0 (the views bound are R8G8B8A8_UNORM storage images), and no push constants.
        let program = unsafe {
            ComputeProgram::from_spirv(
                device,
                "copy_probe.comp",
                &spirv_words(COPY_PROBE_SPV),
                &[BindingKind::StorageImage; 2],
                0,
                1,
            )?
        };
        let set = program.descriptor_set(&[
            Binding::storage(&images[0], vk::ImageLayout::GENERAL),
            Binding::storage(&images[1], vk::ImageLayout::GENERAL),
        ])?;
        let groups = [(square * shape[0]).div_ceil(16), (rows * shape[1]).div_ceil(16), 1];
        let time = probe_time_with(device, |rec| Ok(program.dispatch(rec, &set, &[], groups)?))?;
        note("sparse_compute", true, false, [square, rows], &[], time);
        device.wait_submitted()?;
        drop(set);
        drop(program);
        for image in images.iter_mut() {
            image.release_all(&pool)?;
        }
        pool.flush_binds(&mut images.iter_mut().collect::<Vec<_>>())?;
        drop(images);
        pool.trim();
    }
    drop(plain);
    Ok(CopyProbe { tiles: n, bytes, buffer_gb_per_s_gpu: buffer, copies })
}

fn measure(device: &Arc<Device>, o: &DefragOptions) -> BenchResult<DefragReport> {
    let started = Instant::now();
    let mut dumps = [DumpSummary::default(), DumpSummary::default()];
    let general = general(device, o, &mut dumps)?;
    let tiles_staging = tiles(device, o, CompactCopy::Staging)?;
    let tiles_image_copy = tiles(device, o, CompactCopy::ImageCopy)?;
    let tiles = tiles(device, o, CompactCopy::Direct)?;
    // The baseline copies what the largest pass copied (a pass's copies are one submission).
    let largest_pass = general.passes.iter().chain(&tiles.passes).map(|p| p.bytes_moved).max().unwrap_or(0);
    let copy_bytes = largest_pass.max(1 << 20);
    let (copy_wall, copy_gpu, copy_gpu_first) = plain_copy(device, copy_bytes)?;
    let tile_copy_bytes = tiles.passes.iter().map(|p| p.bytes_moved).max().unwrap_or(0).max(1 << 16);
    let (_, tile_copy_gpu, _) = plain_copy(device, tile_copy_bytes)?;
    let copy_probe = copy_probe(device, tile_copy_bytes, o.seed)?;
    let [before, after] = dumps;
    Ok(DefragReport {
        device: device.name().to_owned(),
        seed: o.seed,
        heaps_before: general.heaps_before + tiles.heaps_before,
        heaps_after: general.heaps_after + tiles.heaps_after,
        bytes_moved: general.bytes_moved + tiles.bytes_moved,
        verified: general.verified && tiles.verified && tiles_image_copy.verified && tiles_staging.verified,
        validation_problems: 0,
        general_moves_over_copy_wall: general.move_gb_per_s_wall / copy_wall,
        general_moves_over_copy_gpu: general.move_gb_per_s_gpu.zip(copy_gpu).map(|(m, c)| m / c),
        general_moves_over_first_copy_gpu: general.move_gb_per_s_gpu.zip(copy_gpu_first).map(|(m, c)| m / c),
        tile_moves_over_copy_gpu: tiles.move_gb_per_s_gpu.zip(copy_gpu).map(|(m, c)| m / c),
        tile_plain_copy_bytes: tile_copy_bytes,
        tile_plain_copy_gb_per_s_gpu: tile_copy_gpu,
        tile_moves_over_tile_copy_gpu: tiles.move_gb_per_s_gpu.zip(tile_copy_gpu).map(|(m, c)| m / c),
        tile_image_copy_moves_over_tile_copy_gpu: tiles_image_copy
            .move_gb_per_s_gpu
            .zip(tile_copy_gpu)
            .map(|(m, c)| m / c),
        tile_staging_moves_over_tile_copy_gpu: tiles_staging
            .move_gb_per_s_gpu
            .zip(tile_copy_gpu)
            .map(|(m, c)| m / c),
        general,
        tiles,
        tiles_image_copy,
        tiles_staging,
        copy_probe,
        plain_copy_bytes: copy_bytes,
        plain_copy_gb_per_s_wall: copy_wall,
        plain_copy_gb_per_s_gpu: copy_gpu,
        plain_copy_first_gb_per_s_gpu: copy_gpu_first,
        vma_dump_before: before,
        vma_dump_after: after,
        seconds: started.elapsed().as_secs_f64(),
    })
}

fn print_part(name: &str, p: &PartReport) {
    let mib = |b: u64| b as f64 / f64::from(1 << 20);
    println!(
        "{name}: {} resources, {:.1} MiB live; heaps {} -> {} ({:.1} -> {:.1} MiB, {:.2}x -> {:.2}x live; all heaps after, empty ones included: {:.1} MiB), {} heap memories freed",
        p.resources,
        mib(p.live_bytes),
        p.heaps_before,
        p.heaps_after,
        mib(p.heap_bytes_before),
        mib(p.heap_bytes_after),
        p.heap_bytes_over_live_before,
        p.heap_bytes_over_live_after,
        mib(p.all_heap_bytes_after),
        p.heaps_freed
    );
    let opt = |v: Option<f64>| v.map_or("-".to_owned(), |v| format!("{v:.2}"));
    println!(
        "  {} passes, {} resources moved, {:.1} MiB moved, {:.2} GB/s (wall), {} GB/s (GPU), verified: {}",
        p.passes.len(),
        p.moved_resources,
        mib(p.bytes_moved),
        p.move_gb_per_s_wall,
        opt(p.move_gb_per_s_gpu),
        p.verified
    );
    for (i, pass) in p.passes.iter().enumerate() {
        println!(
            "  pass {i}: {} moves, {:.1} MiB, {} heaps emptied, {} created ({:.1} MiB), CPU {:.2} ms, wall {:.2} ms, GPU copies {} ms",
            pass.moves,
            mib(pass.bytes_moved),
            pass.heaps_emptied,
            pass.heaps_created,
            mib(pass.heap_bytes_created),
            pass.cpu_us as f64 / 1e3,
            pass.wall_us as f64 / 1e3,
            opt(pass.gpu_copy_ms)
        );
        if let Some(c) = &pass.tile_copies {
            println!(
                "    {} ({:?}, {} tiles by {} dispatches): {} runs, {} copies with {} regions, {} barrier sets, {} bind entries (+ {} carrier)",
                if c.direct { "heap to heap" } else { "through staging" },
                c.path,
                c.compute_tiles,
                c.dispatches,
                c.runs,
                c.copy_commands,
                c.copy_regions,
                c.barriers,
                c.bind_entries,
                c.carrier_bind_entries
            );
        }
    }
}

/// Runs the benchmark on device 0.
pub fn run(o: &DefragOptions) -> ExitCode {
    let set = match DeviceSet::new(&DeviceSetDesc::default()) {
        Ok(set) => set,
        Err(e) => {
            eprintln!("residency-bench defrag needs a Vulkan device: {e}");
            return ExitCode::FAILURE;
        }
    };
    let device = Arc::clone(&set.devices()[0]);
    let report = measure(&device, o);
    drop(device);
    let mut report = match report {
        Ok(r) => r,
        Err(e) => {
            eprintln!("residency-bench defrag: {e}");
            return ExitCode::FAILURE;
        }
    };
    report.validation_problems = set.validation_log().problem_count();
    if o.json {
        println!("{}", serde_json::to_string_pretty(&report).expect("report serialises"));
    } else {
        let r = &report;
        let opt = |v: Option<f64>| v.map_or("-".to_owned(), |v| format!("{v:.2}"));
        println!("{}: seed {}, {:.1} s", r.device, r.seed, r.seconds);
        print_part("general heaps (buffers + images)", &r.general);
        print_part("sparse tile pool", &r.tiles);
        print_part("sparse tile pool, vkCmdCopyImage heap to heap", &r.tiles_image_copy);
        print_part("sparse tile pool, through staging", &r.tiles_staging);
        println!(
            "plain copy of {:.1} MiB (the largest tile pass): {} GB/s (GPU); tile moves / copy {} (GPU), by vkCmdCopyImage {} (GPU), through staging {} (GPU)",
            r.tile_plain_copy_bytes as f64 / f64::from(1 << 20),
            opt(r.tile_plain_copy_gb_per_s_gpu),
            opt(r.tile_moves_over_tile_copy_gpu),
            opt(r.tile_image_copy_moves_over_tile_copy_gpu),
            opt(r.tile_staging_moves_over_tile_copy_gpu)
        );
        println!(
            "plain copy of {:.1} MiB: {:.2} GB/s (wall), {} GB/s (GPU), {} GB/s (GPU, first into fresh memory); general moves / copy {:.2} (wall), {} (GPU), {} (GPU, over the first copy); tile moves / copy {} (GPU)",
            r.plain_copy_bytes as f64 / f64::from(1 << 20),
            r.plain_copy_gb_per_s_wall,
            opt(r.plain_copy_gb_per_s_gpu),
            opt(r.plain_copy_first_gb_per_s_gpu),
            r.general_moves_over_copy_wall,
            opt(r.general_moves_over_copy_gpu),
            opt(r.general_moves_over_first_copy_gpu),
            opt(r.tile_moves_over_copy_gpu)
        );
        let p = &r.copy_probe;
        println!(
            "copy probe, {} tiles ({:.1} MiB), buffer copy {} GB/s (GPU):",
            p.tiles,
            p.bytes as f64 / f64::from(1 << 20),
            opt(p.buffer_gb_per_s_gpu)
        );
        for c in &p.copies {
            println!(
                "  {:<24} {:>3} x {:<3} tiles, {} region(s): {} GB/s (first {}), {} of the buffer copy",
                c.name,
                c.tiles_extent[0],
                c.tiles_extent[1],
                c.regions,
                opt(c.gb_per_s_gpu),
                opt(c.first_gb_per_s_gpu),
                opt(c.over_buffer_copy)
            );
        }
        println!(
            "VMA dump: {} -> {} blocks, {:.1} -> {:.1} MiB; heaps {} -> {}, verified: {}",
            r.vma_dump_before.blocks,
            r.vma_dump_after.blocks,
            r.vma_dump_before.block_bytes as f64 / f64::from(1 << 20),
            r.vma_dump_after.block_bytes as f64 / f64::from(1 << 20),
            r.heaps_before,
            r.heaps_after,
            r.verified
        );
    }
    if !report.verified {
        eprintln!("a moved resource's contents or residency changed");
        return ExitCode::FAILURE;
    }
    crate::validation_status(Some(&set))
}
