//! `residency-bench contention`: buffers created and destroyed from N threads at once, ours
//! against the peers and the bare driver in the same run (issues 4 and 31).
//!
//! Each thread creates and destroys buffers of 16 B–4 KiB in a loop, keeping a window of up to 64
//! live (a create when the window is empty or, at random, not full; else a destroy of a random
//! live one), with its own names (a renderer's per-thread descriptions: no name is shared between
//! threads). The contenders:
//! - `driver`: the driver alone, no allocator: `vkCreateBuffer`, `vkGetBufferMemoryRequirements`,
//!   `vkBindBufferMemory` at offset 0 of one shared memory object, `vkDestroyBuffer`;
//! - `vma`: one VMA allocator shared by every thread (`vmaCreateBuffer` / `vmaDestroyBuffer`,
//!   internally locked);
//! - `gpu-allocator`: one gpu-allocator behind a `Mutex` (as wgpu-hal shares it), taken around
//!   `allocate` and `free` only (the buffer's creation, requirements and bind run outside);
//! - `placed-1`, `placed-n`: our unknown-flags [`BufferPool`] (a placed `VkBuffer` per buffer, with
//!   its name, ledger entry, deferred destruction) with one arena, and with an arena per thread;
//! - `offset-allocator`: `offset-allocator` ranges behind a `Mutex` (no `VkBuffer`);
//! - `ranges-1`, `ranges-n`: our known-flags pool's ranges as full `Buffer`s (name, ledger entry,
//!   state-tracking id, deferred destruction), one arena and an arena per thread.
//!
//! Reported per contender and thread count: total operations per second (median of 3 runs after a
//! warm-up), the scaling against its one-thread rate, and the latency of single operations (p50
//! and p99 over every operation of the 3 runs, each timed alone: the clock reads add ~20 ns).

use residency::core::sync::measure::SplitMix64;
use residency::core::usage::{BufferPoolUsage, BufferUsage};
use residency::vulkan::ash::vk;
use residency::vulkan::format_map::vk_buffer_usage;
use residency::vulkan::{Buffer, BufferInit, BufferPool, BufferPoolDesc, Device, DeviceSet, DeviceSetDesc};
use serde::Serialize;
use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use crate::placed_buffers::{bind_allocation, create_unbound, gpu_allocator_desc, new_vma};
use crate::placed_buffers::{vma_create_buffer, vma_destroy_buffer};
use crate::suballocators::{new_gpu_allocator, OffsetAllocator, SubAllocator};

/// The contenders, in the report's order.
const CONTENDERS: [&str; 8] =
    ["driver", "vma", "gpu-allocator", "placed-1", "placed-n", "offset-allocator", "ranges-1", "ranges-n"];

/// Usage of the placed buffers (every contender that makes a `VkBuffer` per buffer).
const PLACED_USAGE: BufferUsage = BufferUsage::STORAGE.union(BufferUsage::VERTEX);
/// Flags of the known-flags pools (ranges).
const RANGE_USAGE: BufferUsage = BufferUsage::STORAGE.union(BufferUsage::UNIFORM);
/// Live buffers a thread keeps at most.
const WINDOW: usize = 64;
/// Names per thread (each buffer takes one in turn).
const NAMES: usize = 256;
/// Page (and block) size of every allocator.
const PAGE: u64 = 16 << 20;

/// Options of `residency-bench contention`.
#[derive(Clone, Debug)]
pub struct ContentionOptions {
    threads: Vec<usize>,
    ops: usize,
    json: bool,
    only: Option<Vec<String>>,
}

/// Parses the options.
pub fn parse_options(args: &[String]) -> Result<ContentionOptions, String> {
    let mut o = ContentionOptions { threads: vec![1, 2, 4, 8, 16], ops: 20_000, json: false, only: None };
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--json" => o.json = true,
            "--threads" => {
                let list = it.next().ok_or("--threads needs a list such as 1,2,4,8,16")?;
                o.threads = list
                    .split(',')
                    .map(|t| t.trim().parse().map_err(|_| format!("bad thread count `{t}`")))
                    .collect::<Result<_, _>>()?;
                if o.threads.is_empty() || o.threads.contains(&0) {
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
            "--only" => {
                let list = it.next().ok_or("--only needs a list of contenders")?;
                let only: Vec<String> = list.split(',').map(|c| c.trim().to_owned()).collect();
                if let Some(bad) = only.iter().find(|c| !CONTENDERS.contains(&c.as_str())) {
                    return Err(format!("unknown contender `{bad}` (known: {})", CONTENDERS.join(", ")));
                }
                o.only = Some(only);
            }
            other => return Err(format!("unexpected argument `{other}`")),
        }
    }
    Ok(o)
}

#[derive(Debug, Serialize)]
struct Row {
    contender: &'static str,
    threads: usize,
    ops: usize,
    ops_per_sec: f64,
    scaling: f64,
    p50_ns: u32,
    p99_ns: u32,
    failures: usize,
}

/// Something every thread creates and destroys buffers (or ranges) with.
trait Contender: Sync {
    /// A live buffer.
    type Handle: Send;
    /// Creates a buffer of `size` bytes named `name`.
    fn create(&self, name: &Arc<str>, size: u64) -> Option<Self::Handle>;
    /// Destroys it.
    fn destroy(&self, handle: Self::Handle);
}

/// One thread's loop: `ops` operations in a window of live buffers; each operation's latency in
/// `latencies` (ns). Returns the operations done and the failed creations.
fn hammer<C: Contender>(c: &C, thread: usize, ops: usize, latencies: &mut Vec<u32>) -> (usize, usize) {
    let names: Vec<Arc<str>> = (0..NAMES).map(|i| Arc::from(format!("contention t{thread} b{i}"))).collect();
    let mut rng = SplitMix64::new(0x9e37_79b9 ^ (thread as u64 + 1));
    let mut live = Vec::with_capacity(WINDOW);
    let (mut done, mut failures) = (0, 0);
    for i in 0..ops {
        let create = live.len() < WINDOW && (live.is_empty() || rng.next_u64() % 2 == 0);
        if create {
            let size = 16 + rng.next_u64() % 4080;
            let started = Instant::now();
            let made = c.create(&names[i % NAMES], size);
            latencies.push(started.elapsed().as_nanos().min(u128::from(u32::MAX)) as u32);
            match made {
                Some(handle) => {
                    live.push(handle);
                    done += 1;
                }
                None => failures += 1,
            }
        } else {
            let handle = live.swap_remove((rng.next_u64() % live.len() as u64) as usize);
            let started = Instant::now();
            c.destroy(handle);
            latencies.push(started.elapsed().as_nanos().min(u128::from(u32::MAX)) as u32);
            done += 1;
        }
    }
    for handle in live {
        c.destroy(handle);
    }
    (done, failures)
}

/// Runs `threads` threads of [`hammer`] once: operations done, failures, and the latencies.
fn run_once<C: Contender>(c: &C, threads: usize, ops: usize) -> (usize, usize, Vec<u32>) {
    std::thread::scope(|scope| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                scope.spawn(move || {
                    let mut latencies = Vec::with_capacity(ops);
                    let (done, failures) = hammer(c, t, ops, &mut latencies);
                    (done, failures, latencies)
                })
            })
            .collect();
        let mut all = (0, 0, Vec::with_capacity(ops * threads));
        for h in handles {
            let (done, failures, latencies) = h.join().unwrap_or_default();
            all.0 += done;
            all.1 += failures;
            all.2.extend(latencies);
        }
        all
    })
}

/// The `q`-quantile (0..=1) of `values` (reordered).
fn quantile(values: &mut [u32], q: f64) -> u32 {
    if values.is_empty() {
        return 0;
    }
    let index = ((values.len() - 1) as f64 * q).round() as usize;
    *values.select_nth_unstable(index).1
}

/// A warm-up run, then 3 timed runs: the median rate, and the latencies of all 3.
fn measure<C: Contender>(name: &'static str, c: &C, threads: usize, ops: usize) -> Row {
    run_once(c, threads, ops); // warm-up: pages created, caches warm
    let mut rates = Vec::new();
    let mut latencies = Vec::new();
    let mut failures = 0;
    for _ in 0..3 {
        let started = Instant::now();
        let (done, failed, l) = run_once(c, threads, ops);
        rates.push(done as f64 / started.elapsed().as_secs_f64());
        latencies.extend(l);
        failures += failed;
    }
    rates.sort_by(f64::total_cmp);
    Row {
        contender: name,
        threads,
        ops: ops * threads,
        ops_per_sec: rates[1],
        scaling: 0.0,
        p50_ns: quantile(&mut latencies, 0.50),
        p99_ns: quantile(&mut latencies, 0.99),
        failures,
    }
}

/// Ours: a pool's buffers.
struct Pool {
    pool: BufferPool,
    usage: Option<BufferUsage>,
}

impl Contender for Pool {
    type Handle = Buffer;

    fn create(&self, name: &Arc<str>, size: u64) -> Option<Buffer> {
        let init = BufferInit { name: Arc::clone(name), size, alignment: 0, usage: self.usage };
        self.pool.init_buffer(&init).ok()
    }

    fn destroy(&self, buffer: Buffer) {
        let _ = self.pool.free_buffer(buffer);
    }
}

/// The driver alone: a `VkBuffer` per buffer, bound at offset 0 of one memory object (aliasing
/// is allowed; nothing reads the buffers).
struct Driver {
    device: Arc<Device>,
    memory: vk::DeviceMemory,
    memory_size: u64,
}

impl Driver {
    fn new(device: &Arc<Device>) -> Result<Driver, String> {
        let (probe, requirements) = create_unbound(device, 4096, PLACED_USAGE)?;
        // SAFETY: created above, unbound, unused.
        unsafe { device.raw().destroy_buffer(probe, None) };
        let types = &device.memory_properties().types;
        let type_index = (0..types.len() as u32)
            .filter(|&t| requirements.memory_type_bits & (1 << t) != 0)
            .min_by_key(|&t| !types[t as usize].flags.device_local)
            .ok_or("no memory type for the driver's buffers")?;
        let memory_size = 1 << 20;
        let info =
            vk::MemoryAllocateInfo::default().allocation_size(memory_size).memory_type_index(type_index);
        // SAFETY: valid device; a type its buffers accept; freed in `drop`.
        let memory = unsafe { device.raw().allocate_memory(&info, None) }
            .map_err(|e| format!("vkAllocateMemory: {e}"))?;
        Ok(Driver { device: Arc::clone(device), memory, memory_size })
    }
}

impl Contender for Driver {
    type Handle = vk::Buffer;

    fn create(&self, _name: &Arc<str>, size: u64) -> Option<vk::Buffer> {
        let (buffer, requirements) = create_unbound(&self.device, size, PLACED_USAGE).ok()?;
        let fits = requirements.size <= self.memory_size;
        // SAFETY: unbound; offset 0 satisfies every alignment; the range fits the memory (checked).
        if !fits || unsafe { self.device.raw().bind_buffer_memory(buffer, self.memory, 0) }.is_err() {
            // SAFETY: created above, unused.
            unsafe { self.device.raw().destroy_buffer(buffer, None) };
            return None;
        }
        Some(buffer)
    }

    fn destroy(&self, buffer: vk::Buffer) {
        // SAFETY: made by `create` on this device; no GPU work uses it; destroyed once.
        unsafe { self.device.raw().destroy_buffer(buffer, None) };
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        // SAFETY: every buffer bound to it was destroyed (each run destroys what it made).
        unsafe { self.device.raw().free_memory(self.memory, None) };
    }
}

/// VMA, shared (it locks inside).
struct Vma {
    allocator: vk_mem::Allocator,
    /// Keeps the device alive until the allocator (declared first, dropped first) is destroyed.
    _device: Arc<Device>,
}

impl Contender for Vma {
    type Handle = (vk::Buffer, vk_mem::Allocation);

    fn create(&self, _name: &Arc<str>, size: u64) -> Option<Self::Handle> {
        vma_create_buffer(&self.allocator, size, PLACED_USAGE).ok()
    }

    fn destroy(&self, handle: Self::Handle) {
        vma_destroy_buffer(&self.allocator, handle);
    }
}

/// gpu-allocator behind a mutex.
struct GpuAllocator {
    allocator: Mutex<gpu_allocator::vulkan::Allocator>,
    device: Arc<Device>,
}

impl Contender for GpuAllocator {
    type Handle = (vk::Buffer, gpu_allocator::vulkan::Allocation);

    fn create(&self, name: &Arc<str>, size: u64) -> Option<Self::Handle> {
        let (buffer, requirements) = create_unbound(&self.device, size, PLACED_USAGE).ok()?;
        let allocated = self.allocator.lock().ok()?.allocate(&gpu_allocator_desc(name, requirements));
        let Ok(allocation) = allocated else {
            // SAFETY: created above, unbound, unused.
            unsafe { self.device.raw().destroy_buffer(buffer, None) };
            return None;
        };
        match bind_allocation(&self.device, buffer, allocation) {
            Ok(handle) => Some(handle),
            Err((_, allocation)) => {
                if let Ok(mut allocator) = self.allocator.lock() {
                    let _ = allocator.free(allocation);
                }
                None
            }
        }
    }

    fn destroy(&self, (buffer, allocation): Self::Handle) {
        // SAFETY: made by `create` on this device; no GPU work uses it; destroyed once, before
        // its memory is freed.
        unsafe { self.device.raw().destroy_buffer(buffer, None) };
        if let Ok(mut allocator) = self.allocator.lock() {
            let _ = allocator.free(allocation);
        }
    }
}

/// offset-allocator behind a mutex: ranges, no `VkBuffer`, at our ranges' alignment.
struct Offsets(Mutex<OffsetAllocator>, u64);

impl Contender for Offsets {
    type Handle = <OffsetAllocator as SubAllocator>::Handle;

    fn create(&self, _name: &Arc<str>, size: u64) -> Option<Self::Handle> {
        self.0.lock().ok()?.allocate(size, self.1)
    }

    fn destroy(&self, handle: Self::Handle) {
        if let Ok(mut allocator) = self.0.lock() {
            allocator.free(handle);
        }
    }
}

/// Measures contender `name` at `threads` threads.
fn measure_contender(
    device: &Arc<Device>,
    name: &'static str,
    threads: usize,
    ops: usize,
) -> Result<Row, String> {
    let pool = |usage: BufferPoolUsage, own: Option<BufferUsage>, arenas: usize| {
        let desc = BufferPoolDesc::new(format!("contention {name}"), usage)
            .with_page_size(PAGE)
            .with_arenas(arenas as u32);
        let pool = BufferPool::new(Arc::clone(device), desc).map_err(|e| e.to_string())?;
        Ok::<_, String>(Pool { pool, usage: own })
    };
    let placed = BufferPoolUsage::Unknown;
    let ranges = BufferPoolUsage::Known(RANGE_USAGE);
    Ok(match name {
        "driver" => measure(name, &Driver::new(device)?, threads, ops),
        "vma" => {
            let vma = Vma { allocator: new_vma(device)?, _device: Arc::clone(device) };
            measure(name, &vma, threads, ops)
        }
        "gpu-allocator" => {
            let allocator = Mutex::new(new_gpu_allocator(device, PAGE));
            measure(name, &GpuAllocator { allocator, device: Arc::clone(device) }, threads, ops)
        }
        "placed-1" => measure(name, &pool(placed, Some(PLACED_USAGE), 1)?, threads, ops),
        "placed-n" => measure(name, &pool(placed, Some(PLACED_USAGE), threads)?, threads, ops),
        "offset-allocator" => {
            // Our ranges' alignment: the pool flags' offset floors, at least 16 B.
            let limits = device.limits();
            let alignment = limits
                .min_uniform_buffer_offset_alignment
                .max(limits.min_storage_buffer_offset_alignment)
                .max(16)
                .next_power_of_two();
            let offsets = Offsets(Mutex::new(OffsetAllocator::with_capacity(&(), PAGE)), alignment);
            measure(name, &offsets, threads, ops)
        }
        "ranges-1" => measure(name, &pool(ranges, None, 1)?, threads, ops),
        "ranges-n" => measure(name, &pool(ranges, None, threads)?, threads, ops),
        other => return Err(format!("unknown contender `{other}`")),
    })
}

fn measure_all(device: &Arc<Device>, o: &ContentionOptions) -> Result<Vec<Row>, String> {
    let mut rows = Vec::new();
    for name in CONTENDERS {
        if o.only.as_ref().is_some_and(|only| !only.iter().any(|c| c == name)) {
            continue;
        }
        let mut base = 0.0;
        for &threads in &o.threads {
            let mut row = measure_contender(device, name, threads, o.ops)?;
            if base == 0.0 {
                base = row.ops_per_sec / threads as f64;
            }
            row.scaling = row.ops_per_sec / base;
            rows.push(row);
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
    let rows = match measure_all(&device, o) {
        Ok(rows) => rows,
        Err(e) => {
            eprintln!("residency-bench contention: {e}");
            return ExitCode::FAILURE;
        }
    };
    let name = device.name().to_owned();
    drop(device);
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    if o.json {
        let json = serde_json::json!({"device": name, "cores": cores, "ops_per_thread": o.ops, "rows": rows});
        println!("{}", serde_json::to_string_pretty(&json).expect("serialises"));
    } else {
        println!("{name}, {cores} cores; median of 3 runs; scaling = rate / (one-thread rate per thread)");
        println!(
            "{:<18} {:>7} {:>12} {:>8} {:>8} {:>8} {:>8}",
            "contender", "threads", "ops/s", "scaling", "p50 ns", "p99 ns", "failed"
        );
        for r in &rows {
            println!(
                "{:<18} {:>7} {:>12.0} {:>8.2} {:>8} {:>8} {:>8}",
                r.contender, r.threads, r.ops_per_sec, r.scaling, r.p50_ns, r.p99_ns, r.failures
            );
        }
    }
    crate::validation_status(Some(&set))
}
