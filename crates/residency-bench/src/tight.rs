//! `residency-bench tight`: issue 3's benchmark. The spec's motivating case — many tiny buffers
//! placed in heaps — with and without `USE_TIGHT_ALIGNMENT`, through the placement engine, for
//! each device profile: heap bytes against requested bytes. A mixed set (buffers, textures,
//! render targets, depth buffers) shows the same for a realistic scene.
//!
//! Each resource gets its placed allocation info from [`PlacementEngine`]; resources are then
//! placed in order into explicit heaps of [`HEAP_SIZE`] with the library's TLSF allocator (offsets
//! multiples of each resource's alignment, `bufferImageGranularity` between buffers and optimal
//! images), a new heap opening when the current one is full, a resource larger than a heap getting
//! a heap of its own. A heap's bytes are its high-water mark rounded up to the 64 KiB heap
//! alignment. Requested bytes are the buffers' widths and the textures' driver sizes.
//!
//! Target (issue 3): with tight alignment, the tiny buffers' heap bytes are within 10 % of their
//! requested bytes. The verdict is printed (PASS / FAIL); nothing panics on a miss.

use std::process::ExitCode;
use std::time::Instant;

use residency::core::allocator::{AllocError, Allocation, ResourceKind, TlsfAllocator, TlsfDesc};
use residency::core::format::Format;
use residency::core::placement::heap::explicit_heap_size;
use residency::core::placement::{
    DiscardMessages, Placement, PlacementEngine, RequirementsSource, ResourceDesc, ResourceFlag,
};
use residency::core::profile::{captured, DeviceProfile};
use residency::vulkan::{DeviceSet, DeviceSetDesc};
use serde::Serialize;

use crate::vma_rng::VmaRng;

/// Size of each explicit heap.
pub const HEAP_SIZE: u64 = 64 << 20;
/// Tiny buffers in the motivating case.
pub const TINY_COUNT: usize = 100_000;
/// Smallest tiny buffer.
pub const TINY_MIN: u32 = 16;
/// Largest tiny buffer.
pub const TINY_MAX: u32 = 4096;
/// Seed of every set (VMA's generator).
pub const SEED: u32 = 20_092_010;
/// Tight heap bytes may exceed requested bytes by this factor.
pub const TARGET: f64 = 1.10;

/// The `tight` command's options.
#[derive(Debug)]
pub struct TightOptions {
    /// Profiles to run, with their labels.
    profiles: Vec<(String, DeviceProfile)>,
    /// Also run on the live device's captured requirements.
    device: bool,
    /// JSON output.
    json: bool,
}

/// Parses `[--profile FILE]... [--device] [--json]`; without `--profile`, the lavapipe and H200
/// profiles `residency-core` ships (`captured::ALL`).
pub fn parse_options(args: &[String]) -> Result<TightOptions, String> {
    let mut options = TightOptions { profiles: Vec::new(), device: false, json: false };
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--json" => options.json = true,
            "--device" => options.device = true,
            "--profile" => {
                let path = it.next().ok_or("--profile needs a file")?;
                let text = std::fs::read_to_string(path).map_err(|e| format!("{path}: {e}"))?;
                let profile = DeviceProfile::from_json(&text).map_err(|e| format!("{path}: {e}"))?;
                options.profiles.push((path.clone(), profile));
            }
            other => return Err(format!("unexpected argument `{other}`")),
        }
    }
    if options.profiles.is_empty() {
        for (label, text) in captured::ALL {
            let profile = DeviceProfile::from_json(text).map_err(|e| format!("{label}: {e}"))?;
            options.profiles.push((label.to_owned(), profile));
        }
    }
    Ok(options)
}

/// One resource set placed on one device, legacy or tight.
#[derive(Clone, Debug, Serialize)]
pub struct TightRecord {
    /// The profile (file) or live device.
    pub source: String,
    /// Its device name.
    pub device: String,
    /// `tiny-buffers` or `mixed`.
    pub set: &'static str,
    /// `legacy` or `tight`.
    pub mode: &'static str,
    /// Resources placed.
    pub resources: usize,
    /// Sum of the buffers' widths and the textures' driver sizes.
    pub requested_bytes: u64,
    /// Sum over heaps of the high-water mark rounded up to 64 KiB.
    pub heap_bytes: u64,
    /// `heap_bytes / requested_bytes`.
    pub heap_over_requested: f64,
    /// Heaps opened.
    pub heaps: usize,
    /// Largest alignment of any resource.
    pub max_alignment: u64,
    /// Resources the engine refused (first error kept in `error`).
    pub errors: usize,
    /// The first error, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Mean time of one allocation-info call, in ns (informative).
    pub engine_ns_per_resource: f64,
    /// `PASS` / `FAIL` against the 10 % target (tight tiny buffers only), else `-`.
    pub verdict: &'static str,
}

/// The `tight` report.
#[derive(Clone, Debug, Serialize)]
pub struct TightReport {
    /// The target factor.
    pub target: f64,
    /// Every record.
    pub tight: Vec<TightRecord>,
}

/// The motivating case: 100 000 buffers of 16 B..=4 KiB.
pub fn tiny_buffers() -> Vec<ResourceDesc> {
    let mut rng = VmaRng::new(SEED);
    (0..TINY_COUNT)
        .map(|_| ResourceDesc::buffer(u64::from(TINY_MIN + rng.generate() % (TINY_MAX - TINY_MIN + 1))))
        .collect()
}

/// A realistic mix, interleaved in a fixed seeded order: 20 000 buffers of 16 B..=64 KiB; 400
/// sampled 2D textures (RGBA8, BC1, BC7, RGBA16F; sides 16..=2048, full mip chains); 40 colour
/// render targets (RGBA8, 256..=2048, one mip); 8 depth buffers (D32, 512..=2048).
pub fn mixed() -> Vec<ResourceDesc> {
    let mut rng = VmaRng::new(SEED ^ 0x5eed);
    let mut side = |min_log: u32, max_log: u32| 1u32 << (min_log + rng.generate() % (max_log - min_log + 1));
    let mut descs = Vec::new();
    let formats = [Format::R8G8B8A8Unorm, Format::Bc1Unorm, Format::Bc7Unorm, Format::R16G16B16A16Float];
    for i in 0..400 {
        let (w, h) = (side(4, 11), side(4, 11));
        descs.push(ResourceDesc::texture_2d(formats[i % formats.len()], u64::from(w), h));
    }
    for _ in 0..40 {
        let (w, h) = (side(8, 11), side(8, 11));
        descs.push(
            ResourceDesc::texture_2d(Format::R8G8B8A8Unorm, u64::from(w), h)
                .with_mip_levels(1)
                .with_flag(ResourceFlag::AllowRenderTarget),
        );
    }
    for _ in 0..8 {
        let s = side(9, 11);
        descs.push(
            ResourceDesc::texture_2d(Format::D32Float, u64::from(s), s)
                .with_mip_levels(1)
                .with_flag(ResourceFlag::AllowDepthStencil),
        );
    }
    let mut rng = VmaRng::new(SEED ^ 0xb0f);
    for _ in 0..20_000 {
        descs.push(ResourceDesc::buffer(u64::from(16 + rng.generate() % (65_536 - 16 + 1))));
    }
    // Interleave: a fixed shuffle.
    for i in (1..descs.len()).rev() {
        descs.swap(i, rng.generate() as usize % (i + 1));
    }
    descs
}

/// Heaps filled in order.
struct Heaps {
    granularity: u64,
    heaps: Vec<(TlsfAllocator, u64)>,
    live: Vec<Allocation>,
}

impl Heaps {
    fn new(granularity: u64) -> Heaps {
        Heaps { granularity: granularity.max(1).next_power_of_two(), heaps: Vec::new(), live: Vec::new() }
    }

    fn open(&mut self, capacity: u64) -> Result<(), String> {
        let tlsf = TlsfAllocator::new(TlsfDesc::new(capacity).with_granularity(self.granularity))
            .map_err(|e| e.to_string())?;
        self.heaps.push((tlsf, 0));
        Ok(())
    }

    /// Places `size` bytes at a multiple of `alignment` in the last heap, or a new one.
    fn place(&mut self, size: u64, alignment: u64, kind: ResourceKind) -> Result<(), String> {
        for attempt in 0..2 {
            if let Some((heap, high_water)) = self.heaps.last_mut() {
                match heap.allocate(size, alignment, kind) {
                    Ok(a) => {
                        *high_water = (*high_water).max(a.offset() + size);
                        self.live.push(a);
                        return Ok(());
                    }
                    Err(AllocError::OutOfSpace { .. }) if attempt == 0 => {}
                    Err(e) => return Err(e.to_string()),
                }
            }
            self.open(HEAP_SIZE.max(size.next_multiple_of(alignment.max(1)) + alignment))?;
        }
        Err(format!("{size} B does not fit a fresh heap"))
    }

    fn bytes(&self) -> u64 {
        self.heaps.iter().map(|(_, high_water)| explicit_heap_size(*high_water, false)).sum()
    }
}

fn place_set<S: RequirementsSource>(
    engine: &PlacementEngine<S>,
    descs: &[ResourceDesc],
    tight: bool,
) -> (u64, u64, usize, u64, usize, Option<String>, f64) {
    let granularity = engine.source().limits().buffer_image_granularity;
    let mut heaps = Heaps::new(granularity);
    let (mut requested, mut max_alignment, mut errors, mut first_error) = (0u64, 0u64, 0usize, None);
    let mut engine_nanos = 0u128;
    for desc in descs {
        let desc = if tight { desc.tight() } else { *desc };
        let start = Instant::now();
        let info = engine.resource_allocation_info(Placement::Placed, &desc, &mut DiscardMessages);
        engine_nanos += start.elapsed().as_nanos();
        let placed = info.map_err(|e| e.to_string()).and_then(|info| {
            let kind = if info.details.optimal_image { ResourceKind::Optimal } else { ResourceKind::Linear };
            heaps.place(info.size, info.alignment, kind)?;
            let asked = if desc.dimension == residency::core::placement::ResourceDimension::Buffer {
                desc.width
            } else {
                info.details.driver.size
            };
            Ok((asked, info.alignment))
        });
        match placed {
            Ok((asked, alignment)) => {
                requested += asked;
                max_alignment = max_alignment.max(alignment);
            }
            Err(e) => {
                errors += 1;
                first_error.get_or_insert(e);
            }
        }
    }
    let ns = engine_nanos as f64 / descs.len().max(1) as f64;
    (requested, heaps.bytes(), heaps.heaps.len(), max_alignment, errors, first_error, ns)
}

fn records_for(source: &str, profile: &DeviceProfile) -> Vec<TightRecord> {
    let engine = PlacementEngine::new(profile);
    let mut records = Vec::new();
    for (set, descs) in [("tiny-buffers", tiny_buffers()), ("mixed", mixed())] {
        for (mode, tight) in [("legacy", false), ("tight", true)] {
            let (requested, heap_bytes, heaps, max_alignment, errors, error, ns) =
                place_set(&engine, &descs, tight);
            let ratio = heap_bytes as f64 / requested.max(1) as f64;
            let verdict = match (set, tight) {
                ("tiny-buffers", true) if errors == 0 && ratio <= TARGET => "PASS",
                ("tiny-buffers", true) => "FAIL",
                _ => "-",
            };
            records.push(TightRecord {
                source: source.to_owned(),
                device: profile.identity.name.clone(),
                set,
                mode,
                resources: descs.len(),
                requested_bytes: requested,
                heap_bytes,
                heap_over_requested: ratio,
                heaps,
                max_alignment,
                errors,
                error,
                engine_ns_per_resource: ns,
                verdict,
            });
        }
    }
    records
}

/// Runs the benchmark and prints the table (or JSON).
pub fn run(options: &TightOptions) -> ExitCode {
    let mut records = Vec::new();
    for (label, profile) in &options.profiles {
        records.extend(records_for(label, profile));
    }
    let mut set = None;
    if options.device {
        match DeviceSet::new(&DeviceSetDesc::default()) {
            Ok(opened) => {
                for device in opened.devices() {
                    let label = format!("live {} (captured)", device.index());
                    records.extend(records_for(&label, device.profile()));
                }
                set = Some(opened);
            }
            Err(e) => {
                eprintln!("--device: no Vulkan device ({e})");
                return ExitCode::FAILURE;
            }
        }
    }
    let report = TightReport { target: TARGET, tight: records };
    if options.json {
        println!("{}", serde_json::to_string_pretty(&report).expect("report serialises"));
    } else {
        print_table(&report);
    }
    crate::validation_status(set.as_ref())
}

fn print_table(report: &TightReport) {
    println!(
        "{:<28} {:<13} {:<7} {:>7} {:>13} {:>13} {:>8} {:>6} {:>9} {:>6} {:>8}  verdict",
        "source",
        "set",
        "mode",
        "count",
        "requested B",
        "heap B",
        "heap/rq",
        "heaps",
        "max align",
        "errors",
        "ns/info"
    );
    for r in &report.tight {
        println!(
            "{:<28} {:<13} {:<7} {:>7} {:>13} {:>13} {:>8.3} {:>6} {:>9} {:>6} {:>8.0}  {}",
            r.source,
            r.set,
            r.mode,
            r.resources,
            r.requested_bytes,
            r.heap_bytes,
            r.heap_over_requested,
            r.heaps,
            r.max_alignment,
            r.errors,
            r.engine_ns_per_resource,
            r.verdict
        );
        if let Some(e) = &r.error {
            println!("    first error: {e}");
        }
    }
    println!(
        "target: tight tiny buffers' heap bytes <= {:.2} x requested (PASS/FAIL above; devices: {})",
        report.target,
        report
            .tight
            .iter()
            .map(|r| r.device.as_str())
            .collect::<std::collections::BTreeSet<_>>()
            .into_iter()
            .collect::<Vec<_>>()
            .join(", ")
    );
}
