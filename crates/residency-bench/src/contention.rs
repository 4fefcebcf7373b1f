//! `residency-bench contention`: one buffer pool shared by N threads (issue 4: "pools are `Sync`
//! with internal locking; measure contention").
//!
//! Each thread allocates and frees buffers of 16 B–4 KiB in a loop (a window of live buffers per
//! thread), on an unknown-flags pool (placed buffers: `vkCreateBuffer` outside the pool's lock) and
//! a known-flags pool (ranges: the lock is the whole cost), each with one arena (one lock for every
//! thread) and with one arena per thread. Reported: total operations per second for each thread
//! count, and the scaling against one thread (ideal = threads, capped by the machine's cores).

use residency::core::sync::measure::SplitMix64;
use residency::core::usage::{BufferPoolUsage, BufferUsage};
use residency::vulkan::{BufferInit, BufferPool, BufferPoolDesc, Device, DeviceSet, DeviceSetDesc};
use serde::Serialize;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Instant;

/// Options of `residency-bench contention`.
#[derive(Clone, Debug)]
pub struct ContentionOptions {
    threads: Vec<usize>,
    ops: usize,
    json: bool,
}

/// Parses the options.
pub fn parse_options(args: &[String]) -> Result<ContentionOptions, String> {
    let mut o = ContentionOptions { threads: vec![1, 2, 4, 8], ops: 20_000, json: false };
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--json" => o.json = true,
            "--threads" => {
                let list = it.next().ok_or("--threads needs a list such as 1,2,4,8")?;
                o.threads = list
                    .split(',')
                    .map(|t| t.trim().parse().map_err(|_| format!("bad thread count `{t}`")))
                    .collect::<Result<_, _>>()?;
                if o.threads.contains(&0) {
                    return Err("thread counts must be positive".into());
                }
            }
            "--ops" => {
                o.ops = it
                    .next()
                    .and_then(|n| n.parse().ok())
                    .filter(|&n| n > 0)
                    .ok_or("--ops needs a positive number")?
            }
            other => return Err(format!("unexpected argument `{other}`")),
        }
    }
    Ok(o)
}

#[derive(Debug, Serialize)]
struct Row {
    pool: &'static str,
    threads: usize,
    ops: usize,
    ops_per_sec: f64,
    scaling: f64,
}

fn hammer(
    pool: &BufferPool,
    thread: usize,
    ops: usize,
    usage: Option<BufferUsage>,
    names: &[String],
) -> usize {
    let mut rng = SplitMix64::new(0x9e37_79b9 ^ (thread as u64 + 1));
    let mut live = Vec::with_capacity(64);
    let mut done = 0;
    for i in 0..ops {
        if live.len() < 64 && (live.is_empty() || rng.next_u64() % 2 == 0) {
            let mut init = BufferInit::new(names[i % names.len()].clone(), 16 + rng.next_u64() % 4080);
            init.usage = usage;
            if let Ok(b) = pool.init_buffer(&init) {
                live.push(b);
                done += 1;
            }
        } else {
            let b = live.swap_remove((rng.next_u64() % live.len() as u64) as usize);
            if pool.free_buffer(b).is_ok() {
                done += 1;
            }
        }
    }
    for b in live {
        let _ = pool.free_buffer(b);
    }
    done
}

fn measure(device: &Arc<Device>, o: &ContentionOptions) -> Result<Vec<Row>, String> {
    let names: Vec<String> = (0..256).map(|i| format!("contention buffer {i}")).collect();
    let mut rows = Vec::new();
    let placed = (BufferPoolUsage::Unknown, Some(BufferUsage::STORAGE | BufferUsage::VERTEX));
    let ranges = (BufferPoolUsage::Known(BufferUsage::STORAGE | BufferUsage::UNIFORM), None);
    for (label, (pool_usage, usage), per_thread_arenas) in [
        ("placed, 1 arena", placed, false),
        ("placed, arena per thread", placed, true),
        ("ranges, 1 arena", ranges, false),
        ("ranges, arena per thread", ranges, true),
    ] {
        let mut base = 0.0;
        for &threads in &o.threads {
            let arenas = if per_thread_arenas { threads as u32 } else { 1 };
            let desc =
                BufferPoolDesc::new("contention", pool_usage).with_page_size(16 << 20).with_arenas(arenas);
            let pool = BufferPool::new(Arc::clone(device), desc).map_err(|e| e.to_string())?;
            let run = || -> usize {
                std::thread::scope(|scope| {
                    let handles: Vec<_> = (0..threads)
                        .map(|t| {
                            let (pool, names) = (&pool, &names);
                            scope.spawn(move || hammer(pool, t, o.ops, usage, names))
                        })
                        .collect();
                    handles.into_iter().map(|h| h.join().unwrap_or(0)).sum()
                })
            };
            run(); // warm-up: pages created, caches warm
            let mut rates = Vec::new();
            for _ in 0..3 {
                let started = Instant::now();
                let done = run();
                rates.push(done as f64 / started.elapsed().as_secs_f64());
            }
            rates.sort_by(f64::total_cmp);
            let rate = rates[rates.len() / 2];
            if threads == o.threads[0] {
                base = rate / threads as f64;
            }
            rows.push(Row {
                pool: label,
                threads,
                ops: o.ops * threads,
                ops_per_sec: rate,
                scaling: rate / base,
            });
        }
    }
    Ok(rows)
}

/// Runs the benchmark on device 0.
pub fn run(o: &ContentionOptions) -> ExitCode {
    let set = match DeviceSet::new(&DeviceSetDesc::default()) {
        Ok(set) => set,
        Err(e) => {
            eprintln!("residency-bench contention needs a Vulkan device: {e}");
            return ExitCode::FAILURE;
        }
    };
    let device = Arc::clone(&set.devices()[0]);
    let rows = match measure(&device, o) {
        Ok(rows) => rows,
        Err(e) => {
            eprintln!("residency-bench contention: {e}");
            return ExitCode::FAILURE;
        }
    };
    drop(device);
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    if o.json {
        let json = serde_json::json!({"cores": cores, "rows": rows});
        println!("{}", serde_json::to_string_pretty(&json).expect("serialises"));
    } else {
        println!("{cores} cores; median of 3 runs; scaling = rate / (one-thread rate per thread)");
        println!("{:<26} {:>8} {:>14} {:>9}", "pool", "threads", "ops/s", "scaling");
        for r in &rows {
            println!("{:<26} {:>8} {:>14.0} {:>9.2}", r.pool, r.threads, r.ops_per_sec, r.scaling);
        }
    }
    crate::validation_status(Some(&set))
}
