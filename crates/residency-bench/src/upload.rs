//! `residency-bench upload`: a host slice to device-local memory (issue 17).
//!
//! Each repetition (medians of `--reps`, figures in the same run):
//! - **end to end** (`host_to_device_gb_per_s`): `Uploader::write_buffer` of `--mib` MiB from an
//!   ordinary (pageable) `Vec<u8>` into a device-local buffer, then `wait_idle`: the ring's
//!   quarters staged by the host's threads while the GPU copies the ones before;
//! - the same with one staging thread (`single_thread_gb_per_s`, the baseline);
//! - the same with non-temporal stores into the ring (`host_to_device_streaming_gb_per_s`,
//!   `Uploader::with_streaming_stores`);
//! - **the DMA part alone** (`dma_gb_per_s`): a copy of the same bytes from a filled host-visible
//!   buffer to the device-local one, timed by GPU timestamps around the copy;
//! - the CPU part alone (`staging_write_gb_per_s`): `Buffer::write_with_threads` into a mapped
//!   host-visible buffer with the uploader's thread count;
//! - where a memory type is device-local and host-visible (ReBAR), `rebar_gb_per_s`: the same
//!   write straight into device-local memory, no copy at all;
//! - where the device imports host memory (VK_EXT_external_memory_host), **zero copy**
//!   (`imported_gb_per_s`): `Uploader::upload_buffer` with the import forced on (threshold 0),
//!   the slice's own pages imported piece by piece (`--import-chunk-mib`, `--import-threads`)
//!   and copied by the DMA engine, no staging write;
//! - the host part alone into the uploader's own kind of ring (`host_only_gb_per_s`,
//!   `host_only_streaming_gb_per_s`): the slice written chunk by chunk into a ring-sized buffer
//!   of the staging memory, wrapping like the ring, by the same threads, no GPU at all;
//! - with `--grid-*` lists, every combination of staging memory (write-combined or cached),
//!   ring size, chunk size, thread count and store kind: end to end and host only, medians
//!   (`grid`, `best`), to find which part limits on one run;
//! - with `--sweep`, staged (`upload_buffer`, imports off) against imported per size from 64 KiB
//!   to `--mib`, and the smallest size from which importing wins (`import_wins_from_bytes`): the
//!   threshold for `Uploader::with_import_threshold`.

use residency::core::memory::memory_type_candidates;
use residency::core::memory::MemoryIntent;
use residency::core::profile::MemoryTypeFlags;
use residency::core::usage::BufferUsage;
use residency::vulkan::recording::Timestamps;
use residency::vulkan::{BufferDesc, Device, DeviceSet, DeviceSetDesc, StagingMemory, Uploader};
use serde::Serialize;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Instant;

type BenchResult<T> = Result<T, Box<dyn std::error::Error>>;

/// Options of `residency-bench upload`.
#[derive(Clone, Debug)]
pub struct UploadOptions {
    json: bool,
    mib: u64,
    ring_mib: u64,
    threads: Option<usize>,
    reps: usize,
    import_chunk_mib: Option<u64>,
    import_threads: Option<usize>,
    sweep: bool,
    /// Bytes per chunk of the main rows (`None`: the uploader's default, a quarter of the ring).
    chunk_kib: Option<u64>,
    /// `Uploader::with_stream_window` of the main rows (`None`: the uploader's default, 32 MiB).
    window_mib: Option<u64>,
    /// The staging memory of the main rows.
    staging: StagingMemory,
    /// Leave out the zero-copy row.
    no_import: bool,
    grid_staging: Vec<StagingMemory>,
    grid_ring_mib: Vec<u64>,
    grid_chunk_kib: Vec<u64>,
    grid_threads: Vec<usize>,
    grid_streaming: Vec<bool>,
}

/// A comma-separated list of positive numbers.
fn list<T: std::str::FromStr + PartialOrd + Default>(
    it: &mut std::slice::Iter<'_, String>,
    name: &str,
) -> Result<Vec<T>, String> {
    let bad = || format!("{name} needs a comma-separated list of positive numbers");
    let text = it.next().ok_or_else(bad)?;
    text.split(',')
        .map(|n| n.trim().parse::<T>().ok().filter(|n| *n > T::default()).ok_or_else(bad))
        .collect()
}

fn staging_kind(name: &str) -> Result<StagingMemory, String> {
    match name {
        "wc" | "write-combined" => Ok(StagingMemory::WriteCombined),
        "cached" => Ok(StagingMemory::Cached),
        other => Err(format!("unknown staging memory `{other}` (wc or cached)")),
    }
}

fn staging_name(memory: StagingMemory) -> &'static str {
    match memory {
        StagingMemory::WriteCombined => "wc",
        StagingMemory::Cached => "cached",
    }
}

/// Parses the options.
pub fn parse_options(args: &[String]) -> Result<UploadOptions, String> {
    let mut o = UploadOptions {
        json: false,
        mib: 256,
        ring_mib: 64,
        threads: None,
        reps: 5,
        import_chunk_mib: None,
        import_threads: None,
        sweep: false,
        chunk_kib: None,
        window_mib: None,
        staging: StagingMemory::WriteCombined,
        no_import: false,
        grid_staging: Vec::new(),
        grid_ring_mib: Vec::new(),
        grid_chunk_kib: Vec::new(),
        grid_threads: Vec::new(),
        grid_streaming: Vec::new(),
    };
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        let mut number = |name: &str| crate::positive::<u64>(&mut it, name);
        match arg.as_str() {
            "--json" => o.json = true,
            "--mib" => o.mib = number("--mib")?,
            "--ring-mib" => o.ring_mib = number("--ring-mib")?,
            "--threads" => o.threads = Some(number("--threads")? as usize),
            "--reps" => o.reps = number("--reps")? as usize,
            "--import-chunk-mib" => o.import_chunk_mib = Some(number("--import-chunk-mib")?),
            "--import-threads" => o.import_threads = Some(number("--import-threads")? as usize),
            "--sweep" => o.sweep = true,
            "--chunk-kib" => o.chunk_kib = Some(number("--chunk-kib")?),
            "--window-mib" => o.window_mib = Some(number("--window-mib")?),
            "--staging" => o.staging = staging_kind(it.next().map_or("", |s| s.as_str()))?,
            "--no-import" => o.no_import = true,
            "--grid-staging" => {
                let names = it.next().ok_or("--grid-staging needs a list: wc,cached")?;
                o.grid_staging = names.split(',').map(staging_kind).collect::<Result<_, _>>()?;
            }
            "--grid-ring-mib" => o.grid_ring_mib = list(&mut it, "--grid-ring-mib")?,
            "--grid-chunk-kib" => o.grid_chunk_kib = list(&mut it, "--grid-chunk-kib")?,
            "--grid-threads" => o.grid_threads = list(&mut it, "--grid-threads")?,
            "--grid-streaming" => {
                let names = it.next().ok_or("--grid-streaming needs a list: on,off")?;
                o.grid_streaming = names
                    .split(',')
                    .map(|n| match n {
                        "on" => Ok(true),
                        "off" => Ok(false),
                        other => Err(format!("--grid-streaming: `{other}` is not on or off")),
                    })
                    .collect::<Result<_, _>>()?;
            }
            other => return Err(format!("unexpected argument `{other}`")),
        }
    }
    if o.ring_mib < 4 || o.grid_ring_mib.iter().any(|&r| r < 4) {
        return Err("--ring-mib and --grid-ring-mib must be at least 4".into());
    }
    Ok(o)
}

#[derive(Debug, Serialize)]
struct UploadReport {
    device: String,
    bytes: u64,
    ring_bytes: u64,
    threads: usize,
    reps: usize,
    /// Bytes per staged and submitted chunk of the main rows.
    chunk_bytes: u64,
    /// `Uploader::stream_window` of the main rows.
    stream_window_bytes: u64,
    /// The staging memory of the main rows (`wc` or `cached`), and the flags of the type each
    /// kind prefers (the ring's type where the buffer's requirements allow it, as on NVIDIA).
    staging_memory: &'static str,
    wc_type: Option<String>,
    cached_type: Option<String>,
    /// Every host-visible memory type the device offers (`index: flags`).
    host_visible_types: Vec<String>,
    host_to_device_gb_per_s: f64,
    single_thread_gb_per_s: f64,
    threads_over_single: f64,
    host_to_device_streaming_gb_per_s: f64,
    dma_gb_per_s: Option<f64>,
    end_to_end_over_dma: Option<f64>,
    staging_write_gb_per_s: f64,
    /// The host part of the main rows alone: the slice written chunk by chunk into a
    /// ring-sized buffer of the same staging memory by the same threads, no GPU (plain stores,
    /// as `host_to_device_gb_per_s`; streaming stores, as `host_to_device_streaming_gb_per_s`).
    host_only_gb_per_s: f64,
    host_only_streaming_gb_per_s: f64,
    rebar_gb_per_s: Option<f64>,
    /// `minImportedHostPointerAlignment` (`None`: the device does not import host memory).
    import_alignment: Option<u64>,
    import_chunk_bytes: u64,
    import_threads: usize,
    imported_gb_per_s: Option<f64>,
    imported_over_dma: Option<f64>,
    sweep: Vec<SweepPoint>,
    import_wins_from_bytes: Option<u64>,
    /// With `--grid-*` lists: every combination, end to end and host only.
    grid: Vec<GridPoint>,
    /// The grid point with the highest end-to-end rate.
    best: Option<GridPoint>,
    verified: bool,
    validation_problems: u64,
}

/// Staged against imported at one size (`--sweep`).
#[derive(Debug, Serialize)]
struct SweepPoint {
    bytes: u64,
    staged_gb_per_s: f64,
    imported_gb_per_s: f64,
}

/// One combination of the grid (`--grid-*`), medians of `--reps` rounds.
#[derive(Clone, Debug, Serialize)]
struct GridPoint {
    staging: &'static str,
    ring_bytes: u64,
    /// After the uploader's clamping (64 KiB to half the ring).
    chunk_bytes: u64,
    threads: usize,
    streaming: bool,
    /// `write_buffer` + `wait_idle`, every byte.
    end_to_end_gb_per_s: f64,
    /// The same writes into a ring-sized buffer of the same memory, no GPU.
    host_only_gb_per_s: f64,
    end_to_end_over_host_only: f64,
}

fn flags_name(f: MemoryTypeFlags) -> String {
    let names = [
        (f.device_local, "DEVICE_LOCAL"),
        (f.host_visible, "HOST_VISIBLE"),
        (f.host_coherent, "HOST_COHERENT"),
        (f.host_cached, "HOST_CACHED"),
        (f.lazily_allocated, "LAZILY_ALLOCATED"),
        (f.protected, "PROTECTED"),
    ];
    let set: Vec<&str> = names.iter().filter(|(on, _)| *on).map(|(_, n)| *n).collect();
    set.join("|")
}

/// The flags of the memory type `memory` prefers (the uploader's ring's, where the buffer may
/// live in every type).
fn preferred_type(device: &Device, memory: StagingMemory) -> Option<String> {
    let types = &device.memory_properties().types;
    let best = *memory_type_candidates(types, u32::MAX, memory.intent()).first()?;
    Some(format!("{best}: {}", flags_name(types[best as usize].flags)))
}

/// The host part of an upload alone: `data` written chunk by chunk into `ring` (a ring-sized
/// buffer of the staging memory), wrapping like the uploader's ring, by `threads` threads.
fn host_only(
    ring: &mut residency::vulkan::Buffer,
    data: &[u8],
    chunk: u64,
    threads: usize,
    streaming: bool,
) -> BenchResult<f64> {
    let capacity = ring.size();
    let chunk = if data.len() as u64 > chunk { chunk } else { capacity / 2 } as usize;
    let started = Instant::now();
    let mut at = 0u64;
    for piece in data.chunks(chunk) {
        if at + piece.len() as u64 > capacity {
            at = 0;
        }
        if streaming {
            ring.write_streaming(at, piece, threads)?;
        } else {
            ring.write_with_threads(at, piece, threads)?;
        }
        at = (at + piece.len() as u64).next_multiple_of(16);
    }
    Ok(gb_per_s(data.len() as u64, started.elapsed().as_secs_f64()))
}

fn host_ring(device: &Device, memory: StagingMemory, bytes: u64) -> BenchResult<residency::vulkan::Buffer> {
    let desc = BufferDesc::new("upload bench host-only ring", bytes, BufferUsage::COPY_SRC)
        .with_intent(memory.intent())
        .committed();
    Ok(device.create_buffer(&desc)?)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn gb_per_s(bytes: u64, seconds: f64) -> f64 {
    bytes as f64 / seconds.max(1e-9) / 1e9
}

fn measure(device: &Arc<Device>, o: &UploadOptions) -> BenchResult<UploadReport> {
    let bytes = o.mib << 20;
    let data: Vec<u8> = (0..bytes).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8).collect();
    let usage = BufferUsage::COPY_DST | BufferUsage::COPY_SRC | BufferUsage::STORAGE;
    let dst = device.create_buffer(&BufferDesc::new("upload destination", bytes, usage).committed())?;
    // The plain-store baseline (streaming stores are the default; their row is `streaming`).
    let ring = o.ring_mib << 20;
    let new_uploader = |name: &str| -> BenchResult<Uploader> {
        let uploader = Uploader::with_staging_memory(device, name, ring, o.staging)?;
        let uploader = match o.chunk_kib {
            Some(kib) => uploader.with_chunk_bytes(kib << 10),
            None => uploader,
        };
        Ok(match o.window_mib {
            Some(mib) => uploader.with_stream_window(mib << 20),
            None => uploader,
        })
    };
    let threaded = new_uploader("upload bench")?.with_streaming_stores(false);
    let threaded = match o.threads {
        Some(n) => threaded.with_copy_threads(n),
        None => threaded,
    };
    let threads = threaded.copy_threads();
    let chunk_bytes = threaded.chunk_bytes();
    let stream_window_bytes = threaded.stream_window();
    let single = new_uploader("upload bench (1 thread)")?.with_copy_threads(1);
    let streaming = new_uploader("upload bench (streaming stores)")?
        .with_copy_threads(threads)
        .with_streaming_stores(true);
    let mut importer =
        Uploader::new(device, "upload bench (import)", o.ring_mib << 20)?.with_copy_threads(threads);
    if let Some(mib) = o.import_chunk_mib {
        importer = importer.with_import_chunk(mib << 20);
    }
    if let Some(n) = o.import_threads {
        importer = importer.with_import_threads(n);
    }
    let (import_chunk, import_threads) = (importer.import_chunk(), importer.import_threads());
    let staged_only = Uploader::new(device, "upload bench (staged)", o.ring_mib << 20)?
        .with_copy_threads(threads)
        .with_import_threshold(u64::MAX);
    let importer = importer.with_import_threshold(0);
    let import_alignment = device.host_import_alignment().filter(|_| !o.no_import);
    let run = |uploader: &Uploader| -> BenchResult<f64> {
        let started = Instant::now();
        uploader.write_buffer(&dst, 0, &data)?;
        uploader.wait_idle()?;
        Ok(gb_per_s(bytes, started.elapsed().as_secs_f64()))
    };
    let upload = |uploader: &Uploader, len: usize| -> BenchResult<f64> {
        let started = Instant::now();
        uploader.upload_buffer(&dst, 0, &data[..len])?;
        Ok(gb_per_s(len as u64, started.elapsed().as_secs_f64()))
    };
    // Warm-up (first touch of the ring and the destination), then alternating rounds.
    run(&threaded)?;
    run(&single)?;
    run(&streaming)?;
    if import_alignment.is_some() {
        upload(&importer, data.len())?;
    }
    let (mut many, mut one, mut imported, mut streamed) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for _ in 0..o.reps {
        many.push(run(&threaded)?);
        one.push(run(&single)?);
        streamed.push(run(&streaming)?);
        if import_alignment.is_some() {
            imported.push(upload(&importer, data.len())?);
        }
    }
    // The last write was the imported one (where the device imports), else the single-threaded
    // one: check every byte arrived.
    let verified = device.read_back(&dst, 0, bytes)? == data;
    let mut sweep = Vec::new();
    if o.sweep && import_alignment.is_some() {
        let mut len = 64usize << 10;
        while len <= data.len() {
            let (mut staged, mut imports) = (Vec::new(), Vec::new());
            for _ in 0..o.reps.max(3) {
                staged.push(upload(&staged_only, len)?);
                imports.push(upload(&importer, len)?);
            }
            sweep.push(SweepPoint {
                bytes: len as u64,
                staged_gb_per_s: median(staged),
                imported_gb_per_s: median(imports),
            });
            len *= 2;
        }
    }
    // The smallest size from which importing is at least as fast at every larger size measured.
    let import_wins_from_bytes = sweep
        .iter()
        .rposition(|p| p.imported_gb_per_s < p.staged_gb_per_s)
        .map_or(sweep.first(), |i| sweep.get(i + 1))
        .map(|p| p.bytes);
    drop((threaded, single, streaming, importer, staged_only));

    // The host part alone, into a ring of the same memory, plain and streaming stores.
    let mut ring_alone = host_ring(device, o.staging, ring)?;
    host_only(&mut ring_alone, &data, chunk_bytes, threads, false)?;
    let (mut alone, mut alone_streaming) = (Vec::new(), Vec::new());
    for _ in 0..o.reps {
        alone.push(host_only(&mut ring_alone, &data, chunk_bytes, threads, false)?);
        alone_streaming.push(host_only(&mut ring_alone, &data, chunk_bytes, threads, true)?);
    }
    drop(ring_alone);

    let grid = measure_grid(device, o, &data, &dst, threads, chunk_bytes)?;
    let best = grid.iter().max_by(|a, b| a.end_to_end_gb_per_s.total_cmp(&b.end_to_end_gb_per_s)).cloned();

    // The CPU part and the DMA part alone.
    let staging_desc = BufferDesc::new("upload bench staging", bytes, BufferUsage::COPY_SRC)
        .with_intent(MemoryIntent::Upload);
    let mut staging = device.create_buffer(&staging_desc.committed())?;
    let mut writes = Vec::new();
    for _ in 0..o.reps {
        let started = Instant::now();
        staging.write_with_threads(0, &data, threads)?;
        writes.push(gb_per_s(bytes, started.elapsed().as_secs_f64()));
    }
    let timestamps = Timestamps::new(device, "upload bench timestamps", 2)?;
    let dma = if timestamps.supported() {
        let mut runs = Vec::new();
        for _ in 0..o.reps {
            device.submit_once("upload bench dma", |rec| {
                let copied = timestamps
                    .cmd_reset(rec, 0..2)
                    .and_then(|()| timestamps.cmd_write(rec, 0))
                    .map_err(|e| e.to_string())
                    .and_then(|()| rec.copy_buffer(&staging, 0, &dst, 0, bytes).map_err(|e| e.to_string()))
                    .and_then(|()| timestamps.cmd_write(rec, 1).map_err(|e| e.to_string()));
                copied.expect("recording the timed copy");
            })?;
            if let Some(ms) = timestamps.elapsed_ms(0, 1) {
                runs.push(gb_per_s(bytes, ms / 1e3));
            }
        }
        (!runs.is_empty()).then(|| median(runs))
    } else {
        None
    };
    drop(staging);
    let rebar_type = device.memory_properties().types.iter().any(|t| {
        t.flags.device_local
            && t.flags.host_visible
            && device.memory_properties().heaps[t.heap_index as usize].device_local
    });
    let rebar = if rebar_type {
        let desc = BufferDesc::new("upload bench rebar", bytes, BufferUsage::COPY_SRC)
            .with_intent(MemoryIntent::DeviceLocalHostVisible)
            .committed();
        match device.create_buffer(&desc) {
            Ok(mut buffer) => {
                let mut runs = Vec::new();
                for _ in 0..o.reps {
                    let started = Instant::now();
                    buffer.write_with_threads(0, &data, threads)?;
                    runs.push(gb_per_s(bytes, started.elapsed().as_secs_f64()));
                }
                Some(median(runs))
            }
            // A heap too small for the whole slice (a 256 MiB BAR): no figure.
            Err(_) => None,
        }
    } else {
        None
    };
    let (host_to_device, single_thread) = (median(many), median(one));
    let imported = (!imported.is_empty()).then(|| median(imported));
    Ok(UploadReport {
        device: device.name().to_owned(),
        bytes,
        ring_bytes: o.ring_mib << 20,
        threads,
        reps: o.reps,
        chunk_bytes,
        stream_window_bytes,
        staging_memory: staging_name(o.staging),
        wc_type: preferred_type(device, StagingMemory::WriteCombined),
        cached_type: preferred_type(device, StagingMemory::Cached),
        host_visible_types: device
            .memory_properties()
            .types
            .iter()
            .enumerate()
            .filter(|(_, t)| t.flags.host_visible)
            .map(|(i, t)| format!("{i}: {}", flags_name(t.flags)))
            .collect(),
        host_to_device_gb_per_s: host_to_device,
        single_thread_gb_per_s: single_thread,
        threads_over_single: host_to_device / single_thread,
        host_to_device_streaming_gb_per_s: median(streamed),
        dma_gb_per_s: dma,
        end_to_end_over_dma: dma.map(|d| host_to_device / d),
        staging_write_gb_per_s: median(writes),
        host_only_gb_per_s: median(alone),
        host_only_streaming_gb_per_s: median(alone_streaming),
        rebar_gb_per_s: rebar,
        import_alignment,
        import_chunk_bytes: import_chunk,
        import_threads,
        imported_gb_per_s: imported,
        imported_over_dma: imported.zip(dma).map(|(i, d)| i / d),
        sweep,
        import_wins_from_bytes,
        grid,
        best,
        verified,
        validation_problems: 0,
    })
}

/// Every combination of the `--grid-*` lists (a list not given: the main rows' value), end to
/// end and host only, their rounds alternating; the destination is checked after each point.
fn measure_grid(
    device: &Arc<Device>,
    o: &UploadOptions,
    data: &[u8],
    dst: &residency::vulkan::Buffer,
    threads: usize,
    chunk_bytes: u64,
) -> BenchResult<Vec<GridPoint>> {
    let given = !(o.grid_staging.is_empty()
        && o.grid_ring_mib.is_empty()
        && o.grid_chunk_kib.is_empty()
        && o.grid_threads.is_empty()
        && o.grid_streaming.is_empty());
    if !given {
        return Ok(Vec::new());
    }
    let or = |v: &Vec<u64>, d: u64| if v.is_empty() { vec![d] } else { v.clone() };
    let stagings = if o.grid_staging.is_empty() { vec![o.staging] } else { o.grid_staging.clone() };
    let rings = or(&o.grid_ring_mib, o.ring_mib);
    let chunks = or(&o.grid_chunk_kib, chunk_bytes >> 10);
    let thread_counts = if o.grid_threads.is_empty() { vec![threads] } else { o.grid_threads.clone() };
    let stores = if o.grid_streaming.is_empty() { vec![true] } else { o.grid_streaming.clone() };
    let bytes = data.len() as u64;
    let mut points = Vec::new();
    for &staging in &stagings {
        for &ring_mib in &rings {
            let mut alone = host_ring(device, staging, ring_mib << 20)?;
            for &chunk_kib in &chunks {
                for &threads in &thread_counts {
                    for &streaming in &stores {
                        let uploader =
                            Uploader::with_staging_memory(device, "upload grid", ring_mib << 20, staging)?
                                .with_chunk_bytes(chunk_kib << 10)
                                .with_copy_threads(threads)
                                .with_streaming_stores(streaming);
                        let chunk = uploader.chunk_bytes();
                        let round = || -> BenchResult<f64> {
                            let started = Instant::now();
                            uploader.write_buffer(dst, 0, data)?;
                            uploader.wait_idle()?;
                            Ok(gb_per_s(bytes, started.elapsed().as_secs_f64()))
                        };
                        round()?;
                        host_only(&mut alone, data, chunk, threads, streaming)?;
                        let (mut e2e, mut host) = (Vec::new(), Vec::new());
                        for _ in 0..o.reps {
                            e2e.push(round()?);
                            host.push(host_only(&mut alone, data, chunk, threads, streaming)?);
                        }
                        if device.read_back(dst, 0, bytes)? != data {
                            return Err(format!(
                                "grid point {staging:?} ring {ring_mib} MiB chunk {chunk} B: bytes differ"
                            )
                            .into());
                        }
                        let (e2e, host) = (median(e2e), median(host));
                        points.push(GridPoint {
                            staging: staging_name(staging),
                            ring_bytes: ring_mib << 20,
                            chunk_bytes: chunk,
                            threads,
                            streaming,
                            end_to_end_gb_per_s: e2e,
                            host_only_gb_per_s: host,
                            end_to_end_over_host_only: e2e / host,
                        });
                    }
                }
            }
        }
    }
    Ok(points)
}

/// Runs the benchmark on device 0.
pub fn run(o: &UploadOptions) -> ExitCode {
    let set = match DeviceSet::new(&DeviceSetDesc::default()) {
        Ok(set) => set,
        Err(e) => {
            eprintln!("residency-bench upload needs a Vulkan device: {e}");
            return ExitCode::FAILURE;
        }
    };
    let device = Arc::clone(&set.devices()[0]);
    let report = measure(&device, o);
    drop(device);
    let mut report = match report {
        Ok(r) => r,
        Err(e) => {
            eprintln!("residency-bench upload: {e}");
            return ExitCode::FAILURE;
        }
    };
    report.validation_problems = set.validation_log().problem_count();
    if o.json {
        println!("{}", serde_json::to_string_pretty(&report).expect("report serialises"));
    } else {
        let r = &report;
        let opt = |v: Option<f64>| v.map_or("-".to_owned(), |v| format!("{v:.2}"));
        println!(
            "{}: {} MiB from a host slice, ring {} MiB, {} threads",
            r.device,
            r.bytes >> 20,
            r.ring_bytes >> 20,
            r.threads
        );
        println!("end to end          {:>8.2} GB/s", r.host_to_device_gb_per_s);
        println!(
            "one staging thread  {:>8.2} GB/s  (threads / one: {:.2}x)",
            r.single_thread_gb_per_s, r.threads_over_single
        );
        println!("streaming stores    {:>8.2} GB/s", r.host_to_device_streaming_gb_per_s);
        println!("DMA copy alone      {:>8} GB/s  (GPU timestamps)", opt(r.dma_gb_per_s));
        println!("staging write alone {:>8.2} GB/s", r.staging_write_gb_per_s);
        println!(
            "host only (ring)    {:>8.2} GB/s  (streaming {:.2}; {} staging, {} KiB chunks)",
            r.host_only_gb_per_s,
            r.host_only_streaming_gb_per_s,
            r.staging_memory,
            r.chunk_bytes >> 10
        );
        println!("memory types        wc {:?}, cached {:?}", r.wc_type, r.cached_type);
        println!("ReBAR write         {:>8} GB/s", opt(r.rebar_gb_per_s));
        println!(
            "zero copy (import)  {:>8} GB/s  ({} MiB pieces, {} import threads)",
            opt(r.imported_gb_per_s),
            r.import_chunk_bytes >> 20,
            r.import_threads
        );
        for p in &r.sweep {
            println!(
                "  {:>10} B: staged {:>7.2} GB/s, imported {:>7.2} GB/s",
                p.bytes, p.staged_gb_per_s, p.imported_gb_per_s
            );
        }
        if let Some(from) = r.import_wins_from_bytes {
            println!("importing wins from {from} B");
        }
        for p in &r.grid {
            println!(
                "  {:>6} ring {:>4} MiB chunk {:>6} KiB {:>2} threads streaming {:>5}: end to end {:>7.2} GB/s, host only {:>7.2} GB/s",
                p.staging,
                p.ring_bytes >> 20,
                p.chunk_bytes >> 10,
                p.threads,
                p.streaming,
                p.end_to_end_gb_per_s,
                p.host_only_gb_per_s
            );
        }
        println!("verified: {}", r.verified);
    }
    if !report.verified {
        eprintln!("the uploaded bytes differ from the source");
        return ExitCode::FAILURE;
    }
    crate::validation_status(Some(&set))
}
