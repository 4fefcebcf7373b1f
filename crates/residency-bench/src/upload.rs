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
//! - with `--sweep`, staged (`upload_buffer`, imports off) against imported per size from 64 KiB
//!   to `--mib`, and the smallest size from which importing wins (`import_wins_from_bytes`): the
//!   threshold for `Uploader::with_import_threshold`.

use residency::core::memory::MemoryIntent;
use residency::core::usage::BufferUsage;
use residency::vulkan::recording::Timestamps;
use residency::vulkan::{BufferDesc, Device, DeviceSet, DeviceSetDesc, Uploader};
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
            other => return Err(format!("unexpected argument `{other}`")),
        }
    }
    if o.ring_mib < 4 {
        return Err("--ring-mib must be at least 4".into());
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
    host_to_device_gb_per_s: f64,
    single_thread_gb_per_s: f64,
    threads_over_single: f64,
    host_to_device_streaming_gb_per_s: f64,
    dma_gb_per_s: Option<f64>,
    end_to_end_over_dma: Option<f64>,
    staging_write_gb_per_s: f64,
    rebar_gb_per_s: Option<f64>,
    /// `minImportedHostPointerAlignment` (`None`: the device does not import host memory).
    import_alignment: Option<u64>,
    import_chunk_bytes: u64,
    import_threads: usize,
    imported_gb_per_s: Option<f64>,
    imported_over_dma: Option<f64>,
    sweep: Vec<SweepPoint>,
    import_wins_from_bytes: Option<u64>,
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
    let threaded = Uploader::new(device, "upload bench", o.ring_mib << 20)?;
    let threaded = match o.threads {
        Some(n) => threaded.with_copy_threads(n),
        None => threaded,
    };
    let threads = threaded.copy_threads();
    let single = Uploader::new(device, "upload bench (1 thread)", o.ring_mib << 20)?.with_copy_threads(1);
    let streaming = Uploader::new(device, "upload bench (streaming stores)", o.ring_mib << 20)?
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
    let import_alignment = device.host_import_alignment();
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
        host_to_device_gb_per_s: host_to_device,
        single_thread_gb_per_s: single_thread,
        threads_over_single: host_to_device / single_thread,
        host_to_device_streaming_gb_per_s: median(streamed),
        dma_gb_per_s: dma,
        end_to_end_over_dma: dma.map(|d| host_to_device / d),
        staging_write_gb_per_s: median(writes),
        rebar_gb_per_s: rebar,
        import_alignment,
        import_chunk_bytes: import_chunk,
        import_threads,
        imported_gb_per_s: imported,
        imported_over_dma: imported.zip(dma).map(|(i, d)| i / d),
        sweep,
        import_wins_from_bytes,
        verified,
        validation_problems: 0,
    })
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
        println!("verified: {}", r.verified);
    }
    if !report.verified {
        eprintln!("the uploaded bytes differ from the source");
        return ExitCode::FAILURE;
    }
    crate::validation_status(Some(&set))
}
