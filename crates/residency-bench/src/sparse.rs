//! `residency-bench sparse`: binding and uploading tiles of a partially resident 16k × 16k RGBA8
//! image (issue 5's benchmark).
//!
//! Bind modes, each over the same tiles of mip 0 (a square region, or all of mip 0 with `--full`):
//! - `per_tile_calls`: one `vkQueueBindSparse` per tile (at most `--per-tile-max` tiles; the rate is
//!   what those tiles took);
//! - `one_call_per_tile_entries`: one call, one bind entry per tile (no coalescing);
//! - `coalesced`: one call, tiles merged into rows, rectangles and whole mips over contiguous memory.
//!
//! Heaps are created by a warm-up commit and kept, so every mode measures binding alone. Each mode
//! runs `--reps` times (median reported); tiles are released (unbound) between runs.
//!
//! Upload: the same bytes written tile by tile through the staging ring into the committed sparse
//! tiles and into an ordinary (dense) image of the same extent, in the same run; the ratio is the
//! sparse throughput over the dense one.

use residency::core::format::Format;
use residency::core::tiles::{BindPlanOptions, Coalesce, SparseImageDesc, TexelRegion, TilePoolDesc};
use residency::core::usage::ImageUsage;
use residency::vulkan::sparse::{SparseImage, SparseTilePool};
use residency::vulkan::{Device, DeviceSet, DeviceSetDesc, ImageDesc, ImageRegion, ImageTarget, Uploader};
use serde::Serialize;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Instant;

/// Options of `residency-bench sparse`.
#[derive(Clone, Debug)]
pub struct SparseOptions {
    json: bool,
    full: bool,
    side_tiles: u32,
    per_tile_max: u32,
    reps: usize,
}

/// Parses the options.
pub fn parse_options(args: &[String]) -> Result<SparseOptions, String> {
    let mut o = SparseOptions { json: false, full: false, side_tiles: 32, per_tile_max: 512, reps: 3 };
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        let mut number = |name: &str| crate::positive::<u32>(&mut it, name);
        match arg.as_str() {
            "--json" => o.json = true,
            "--full" => o.full = true,
            "--side-tiles" => o.side_tiles = number("--side-tiles")?,
            "--per-tile-max" => o.per_tile_max = number("--per-tile-max")?,
            "--reps" => o.reps = number("--reps")? as usize,
            other => return Err(format!("unexpected argument `{other}`")),
        }
    }
    Ok(o)
}

#[derive(Debug, Serialize)]
struct ModeResult {
    mode: &'static str,
    tiles: u64,
    bind_entries: u64,
    micros_median: u64,
    tiles_per_sec: f64,
}

#[derive(Debug, Serialize)]
struct UploadResult {
    tiles: u64,
    bytes: u64,
    sparse_mb_per_sec: f64,
    dense_mb_per_sec: f64,
    sparse_over_dense: f64,
}

#[derive(Debug, Serialize)]
struct SparseReport {
    device: String,
    image: String,
    tiles: u64,
    heaps: u64,
    modes: Vec<ModeResult>,
    coalesced_over_per_tile_entries: f64,
    upload: UploadResult,
    validation_problems: u64,
}

fn median(mut v: Vec<u64>) -> u64 {
    v.sort_unstable();
    v[v.len() / 2]
}

type BenchResult<T> = Result<T, Box<dyn std::error::Error>>;

fn bind_once(
    pool: &SparseTilePool,
    image: &mut SparseImage,
    region: TexelRegion,
    coalesce: Coalesce,
) -> BenchResult<(u64, u64)> {
    image.commit_region(pool, 0, 0, region)?;
    let stats = pool.flush_binds_with(&mut [&mut *image], BindPlanOptions { coalesce })?;
    Ok((stats.micros, stats.bind_entries))
}

fn release(pool: &SparseTilePool, image: &mut SparseImage) -> BenchResult<()> {
    image.release_all(pool)?;
    pool.flush_binds(&mut [&mut *image])?;
    Ok(())
}

fn run_modes(device: &Arc<Device>, o: &SparseOptions) -> BenchResult<SparseReport> {
    let desc = SparseImageDesc::new_2d(Format::R8G8B8A8Unorm, 16384, 16384);
    let pool = SparseTilePool::new(
        Arc::clone(device),
        TilePoolDesc::default().with_name("bench tiles").with_budget_tiles(20_000),
    )?;
    let mut image = SparseImage::new(&pool, "bench 16k", &desc, false)?;
    let shape = image.layout().tile_shape();
    let grid = image.layout().mip(0).ok_or("no mip 0")?.tiles;
    let side = if o.full { grid[0].max(grid[1]) } else { o.side_tiles.min(grid[0]) };
    let region = TexelRegion { offset: [0; 3], extent: [side * shape.width, side * shape.height, 1] };
    let tiles = u64::from(side) * u64::from(side);

    // Warm-up: creates the heaps, which stay for the measured runs.
    bind_once(&pool, &mut image, region, Coalesce::Boxes)?;
    release(&pool, &mut image)?;
    let heaps = pool.stats().heaps.len() as u64;

    let mut modes = Vec::new();
    // One call per tile, over the first `per_tile_max` tiles (row-major).
    let per_tile = tiles.min(u64::from(o.per_tile_max));
    let mut runs = Vec::new();
    for _ in 0..o.reps {
        let mut total = 0;
        for t in 0..per_tile as u32 {
            let (x, y) = (t % side, t / side);
            let one = TexelRegion { offset: [x * shape.width, y * shape.height, 0], extent: [1, 1, 1] };
            total += bind_once(&pool, &mut image, one, Coalesce::None)?.0;
        }
        runs.push(total);
        release(&pool, &mut image)?;
    }
    let micros = median(runs).max(1);
    modes.push(ModeResult {
        mode: "per_tile_calls",
        tiles: per_tile,
        bind_entries: per_tile,
        micros_median: micros,
        tiles_per_sec: per_tile as f64 * 1e6 / micros as f64,
    });
    for (mode, coalesce) in [("one_call_per_tile_entries", Coalesce::None), ("coalesced", Coalesce::Boxes)] {
        let mut runs = Vec::new();
        let mut entries = 0;
        for _ in 0..o.reps {
            let (micros, e) = bind_once(&pool, &mut image, region, coalesce)?;
            runs.push(micros);
            entries = e;
            release(&pool, &mut image)?;
        }
        let micros = median(runs).max(1);
        modes.push(ModeResult {
            mode,
            tiles,
            bind_entries: entries,
            micros_median: micros,
            tiles_per_sec: tiles as f64 * 1e6 / micros as f64,
        });
    }
    let upload = upload_throughput(device, &pool, &mut image, side.min(16))?;
    release(&pool, &mut image)?;
    drop((image, pool));
    let ratio = modes[2].tiles_per_sec / modes[1].tiles_per_sec;
    Ok(SparseReport {
        device: device.name().to_owned(),
        image: "16384x16384 r8g8b8a8_unorm, full mip chain".into(),
        tiles,
        heaps,
        modes,
        coalesced_over_per_tile_entries: ratio,
        upload,
        validation_problems: 0,
    })
}

/// Writes `side × side` tiles of texels into the sparse image and into a dense image of the same
/// extent, tile by tile through the staging ring, in alternating rounds; medians of each.
fn upload_throughput(
    device: &Arc<Device>,
    pool: &SparseTilePool,
    image: &mut SparseImage,
    side: u32,
) -> BenchResult<UploadResult> {
    let shape = image.layout().tile_shape();
    let (w, h) = (side * shape.width, side * shape.height);
    image.commit_region(pool, 0, 0, TexelRegion { offset: [0; 3], extent: [w, h, 1] })?;
    pool.flush_binds(&mut [&mut *image])?;
    let dense = device.create_image(&ImageDesc::new_2d(
        "dense",
        Format::R8G8B8A8Unorm,
        w,
        h,
        ImageUsage::COPY_DST | ImageUsage::SAMPLED,
    ))?;
    device.discard_to_general(&[&dense])?;
    let uploader = Uploader::new(device, "bench upload", 32 << 20)?;
    let tile: Vec<u8> = (0..shape.width * shape.height * 4).map(|i| (i * 7 % 251) as u8).collect();
    let write_all = |target: &dyn ImageTarget| -> BenchResult<u64> {
        let started = Instant::now();
        for ty in 0..side {
            for tx in 0..side {
                let offset = [tx * shape.width, ty * shape.height, 0];
                let region = ImageRegion::new(target, 0, offset, [shape.width, shape.height, 1]);
                uploader.write_image(&region, &tile)?;
            }
        }
        uploader.wait_idle()?;
        Ok(started.elapsed().as_micros().max(1) as u64)
    };
    let (mut sparse_runs, mut dense_runs) = (Vec::new(), Vec::new());
    for _ in 0..5 {
        sparse_runs.push(write_all(&*image)?);
        dense_runs.push(write_all(&dense)?);
    }
    uploader.destroy()?;
    drop(dense);
    let bytes = u64::from(side * side) * tile.len() as u64;
    let mb = |micros: u64| bytes as f64 / micros as f64; // bytes per µs = MB/s
    let (s, d) = (mb(median(sparse_runs)), mb(median(dense_runs)));
    Ok(UploadResult {
        tiles: u64::from(side * side),
        bytes,
        sparse_mb_per_sec: s,
        dense_mb_per_sec: d,
        sparse_over_dense: s / d,
    })
}

/// Runs the benchmark on device 0.
pub fn run(o: &SparseOptions) -> ExitCode {
    let set = match DeviceSet::new(&DeviceSetDesc::default()) {
        Ok(set) => set,
        Err(e) => {
            eprintln!("residency-bench sparse needs a Vulkan device: {e}");
            return ExitCode::FAILURE;
        }
    };
    let device = Arc::clone(&set.devices()[0]);
    let report = run_modes(&device, o);
    drop(device);
    let mut report = match report {
        Ok(r) => r,
        Err(e) => {
            eprintln!("residency-bench sparse: {e}");
            return ExitCode::FAILURE;
        }
    };
    report.validation_problems = set.validation_log().problem_count();
    if o.json {
        println!("{}", serde_json::to_string_pretty(&report).expect("report serialises"));
    } else {
        println!(
            "{}: {} — {} tiles of mip 0, {} heaps",
            report.device, report.image, report.tiles, report.heaps
        );
        println!(
            "{:<28} {:>8} {:>12} {:>12} {:>14}",
            "mode", "tiles", "bind entries", "µs (median)", "tiles/s"
        );
        for m in &report.modes {
            println!(
                "{:<28} {:>8} {:>12} {:>12} {:>14.0}",
                m.mode, m.tiles, m.bind_entries, m.micros_median, m.tiles_per_sec
            );
        }
        println!("coalesced / one entry per tile: {:.1}x", report.coalesced_over_per_tile_entries);
        let u = &report.upload;
        println!(
            "upload {} tiles ({} B): sparse {:.0} MB/s, dense image {:.0} MB/s, ratio {:.2}",
            u.tiles, u.bytes, u.sparse_mb_per_sec, u.dense_mb_per_sec, u.sparse_over_dense
        );
    }
    crate::validation_status(Some(&set))
}
