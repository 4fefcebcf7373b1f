//! The report as VMA's JSON dump (`vmaBuildStatsString` with the detailed map), so that tools
//! written for VMA dumps — its `GpuMemDumpVis.py` first — read ours.
//!
//! The layout, as VMA writes it:
//! - `General`: `API` (`"Vulkan"`), `apiVersion`, `GPU`, `deviceType`, `maxMemoryAllocationCount`,
//!   `bufferImageGranularity`, `nonCoherentAtomSize`, `memoryHeapCount`, `memoryTypeCount`.
//! - `Total`: detailed statistics (below).
//! - `MemoryInfo`: `"Heap N"` → `Flags` (array of names), `Size`, `Budget` {`BudgetBytes`,
//!   `UsageBytes`}, `Stats`, `MemoryPools`: `"Type N"` → `Flags`, `Stats`.
//! - `DefaultPools`: `"Type N"` → `PreferredBlockSize`, `Blocks`, `DedicatedAllocations`.
//! - `CustomPools`: `"Type N"` → array of {`Name`, `PreferredBlockSize`, `Blocks`,
//!   `DedicatedAllocations`}.
//! - `Blocks` is an object keyed by block id (`"0"`, …); a block has `MapRefCount`, `TotalBytes`,
//!   `UnusedBytes`, `Allocations`, `UnusedRanges` and `Suballocations`: every range of the block in
//!   address order, `{Offset, Type, Size, Usage, Name}` for allocations and `{Offset, Type: "FREE",
//!   Size}` for unused ranges. The sizes tile the block: readers lay ranges end to end.
//! - Detailed statistics: `BlockCount`, `BlockBytes`, `AllocationCount`, `AllocationBytes`,
//!   `UnusedRangeCount`, plus `AllocationSizeMin/Max` when there are two allocations or more and
//!   `UnusedRangeSizeMin/Max` when there are two unused ranges or more.
//!
//! VMA has no notion of padding: our padding and free ranges become `FREE` ranges (adjacent ones
//! merged), so `UnusedBytes` and `UnusedRangeCount` count both.

use super::model::{AllocationInfo, BlockReport, MemoryReport, RangeKind, ResourceType};

/// VMA's name of a resource type (`VMA_SUBALLOCATION_TYPE_NAMES`).
pub fn vma_type_name(resource: ResourceType) -> &'static str {
    match resource {
        ResourceType::Buffer => "BUFFER",
        ResourceType::ImageLinear => "IMAGE_LINEAR",
        ResourceType::ImageOptimal => "IMAGE_OPTIMAL",
        ResourceType::Unknown => "UNKNOWN",
    }
}

/// One entry of a block's `Suballocations`: an allocation, or an unused range (`None`).
struct Suballocation<'a> {
    offset: u64,
    size: u64,
    allocation: Option<&'a AllocationInfo>,
}

/// The block as VMA sees it: padding and free bytes merged into unused ranges.
fn suballocations(block: &BlockReport) -> Vec<Suballocation<'_>> {
    let mut out: Vec<Suballocation<'_>> = Vec::with_capacity(block.ranges.len());
    for range in &block.ranges {
        let allocation = match &range.kind {
            RangeKind::Allocation(info) => Some(info),
            RangeKind::Padding | RangeKind::Free => None,
        };
        match out.last_mut() {
            Some(last) if allocation.is_none() && last.allocation.is_none() => last.size += range.size,
            _ => out.push(Suballocation { offset: range.offset, size: range.size, allocation }),
        }
    }
    out
}

/// VMA's detailed statistics, counted the way VMA counts them.
#[derive(Clone, Copy, Default)]
struct VmaStats {
    block_count: u64,
    block_bytes: u64,
    allocation_count: u64,
    allocation_bytes: u64,
    unused_range_count: u64,
    allocation_size_min: u64,
    allocation_size_max: u64,
    unused_range_size_min: u64,
    unused_range_size_max: u64,
}

impl VmaStats {
    fn add_allocation(&mut self, size: u64) {
        self.allocation_size_min =
            if self.allocation_count == 0 { size } else { self.allocation_size_min.min(size) };
        self.allocation_size_max = self.allocation_size_max.max(size);
        self.allocation_count += 1;
        self.allocation_bytes += size;
    }

    fn add_unused(&mut self, size: u64) {
        self.unused_range_size_min =
            if self.unused_range_count == 0 { size } else { self.unused_range_size_min.min(size) };
        self.unused_range_size_max = self.unused_range_size_max.max(size);
        self.unused_range_count += 1;
    }

    fn of_block(block: &BlockReport) -> VmaStats {
        let mut s = VmaStats { block_count: 1, block_bytes: block.size, ..VmaStats::default() };
        if block.dedicated {
            // VMA counts dedicated memory as one allocation the size of the memory.
            s.add_allocation(block.size);
            return s;
        }
        for sub in suballocations(block) {
            match sub.allocation {
                Some(_) => s.add_allocation(sub.size),
                None => s.add_unused(sub.size),
            }
        }
        s
    }

    fn merge(&mut self, o: VmaStats) {
        if o.allocation_count > 0 {
            self.allocation_size_min = if self.allocation_count == 0 {
                o.allocation_size_min
            } else {
                self.allocation_size_min.min(o.allocation_size_min)
            };
        }
        if o.unused_range_count > 0 {
            self.unused_range_size_min = if self.unused_range_count == 0 {
                o.unused_range_size_min
            } else {
                self.unused_range_size_min.min(o.unused_range_size_min)
            };
        }
        self.allocation_size_max = self.allocation_size_max.max(o.allocation_size_max);
        self.unused_range_size_max = self.unused_range_size_max.max(o.unused_range_size_max);
        self.block_count += o.block_count;
        self.block_bytes += o.block_bytes;
        self.allocation_count += o.allocation_count;
        self.allocation_bytes += o.allocation_bytes;
        self.unused_range_count += o.unused_range_count;
    }

    fn of_blocks<'a>(blocks: impl IntoIterator<Item = &'a BlockReport>) -> VmaStats {
        let mut s = VmaStats::default();
        for b in blocks {
            s.merge(VmaStats::of_block(b));
        }
        s
    }

    fn json(&self) -> Json {
        let mut o = vec![
            ("BlockCount", Json::Num(self.block_count)),
            ("BlockBytes", Json::Num(self.block_bytes)),
            ("AllocationCount", Json::Num(self.allocation_count)),
            ("AllocationBytes", Json::Num(self.allocation_bytes)),
            ("UnusedRangeCount", Json::Num(self.unused_range_count)),
        ];
        if self.allocation_count > 1 {
            o.push(("AllocationSizeMin", Json::Num(self.allocation_size_min)));
            o.push(("AllocationSizeMax", Json::Num(self.allocation_size_max)));
        }
        if self.unused_range_count > 1 {
            o.push(("UnusedRangeSizeMin", Json::Num(self.unused_range_size_min)));
            o.push(("UnusedRangeSizeMax", Json::Num(self.unused_range_size_max)));
        }
        Json::object(o)
    }
}

/// An ordered JSON tree (keys keep the order VMA writes them in).
enum Json {
    Object(Vec<(String, Json)>, bool),
    Array(Vec<Json>),
    Str(String),
    Num(u64),
}

impl Json {
    fn object(entries: Vec<(&str, Json)>) -> Json {
        Json::Object(entries.into_iter().map(|(k, v)| (k.to_owned(), v)).collect(), false)
    }

    /// An object written on one line (VMA writes suballocations so).
    fn inline(entries: Vec<(&str, Json)>) -> Json {
        Json::Object(entries.into_iter().map(|(k, v)| (k.to_owned(), v)).collect(), true)
    }

    fn str(s: impl Into<String>) -> Json {
        Json::Str(s.into())
    }

    fn write(&self, out: &mut String, depth: usize) {
        const INDENT: &str = "  ";
        let newline = |out: &mut String, depth: usize| {
            out.push('\n');
            for _ in 0..depth {
                out.push_str(INDENT);
            }
        };
        match self {
            Json::Num(n) => out.push_str(&n.to_string()),
            Json::Str(s) => out.push_str(&serde_json::to_string(s).expect("strings serialise")),
            Json::Array(items) if items.is_empty() => out.push_str("[]"),
            Json::Array(items) => {
                out.push('[');
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    newline(out, depth + 1);
                    item.write(out, depth + 1);
                }
                newline(out, depth);
                out.push(']');
            }
            Json::Object(entries, _) if entries.is_empty() => out.push_str("{}"),
            Json::Object(entries, inline) => {
                out.push('{');
                for (i, (key, value)) in entries.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    if *inline {
                        if i > 0 {
                            out.push(' ');
                        }
                    } else {
                        newline(out, depth + 1);
                    }
                    out.push_str(&serde_json::to_string(key).expect("strings serialise"));
                    out.push_str(": ");
                    value.write(out, depth + 1);
                }
                if !*inline {
                    newline(out, depth);
                }
                out.push('}');
            }
        }
    }
}

fn allocation_params(info: &AllocationInfo, size: u64, offset: Option<u64>) -> Json {
    let mut o = Vec::new();
    if let Some(offset) = offset {
        o.push(("Offset", Json::Num(offset)));
    }
    o.push(("Type", Json::str(vma_type_name(info.resource))));
    o.push(("Size", Json::Num(size)));
    o.push(("Usage", Json::Num(info.usage)));
    if let Some(name) = &info.name {
        o.push(("Name", Json::str(name.clone())));
    }
    Json::inline(o)
}

fn block_json(block: &BlockReport) -> Json {
    let subs = suballocations(block);
    let unused: u64 = subs.iter().filter(|s| s.allocation.is_none()).map(|s| s.size).sum();
    let allocations = subs.iter().filter(|s| s.allocation.is_some()).count() as u64;
    let entries = subs
        .iter()
        .map(|s| match s.allocation {
            Some(info) => allocation_params(info, s.size, Some(s.offset)),
            None => Json::inline(vec![
                ("Offset", Json::Num(s.offset)),
                ("Type", Json::str("FREE")),
                ("Size", Json::Num(s.size)),
            ]),
        })
        .collect();
    Json::object(vec![
        ("MapRefCount", Json::Num(u64::from(block.mapped))),
        ("TotalBytes", Json::Num(block.size)),
        ("UnusedBytes", Json::Num(unused)),
        ("Allocations", Json::Num(allocations)),
        ("UnusedRanges", Json::Num(subs.len() as u64 - allocations)),
        ("Suballocations", Json::Array(entries)),
    ])
}

/// `Blocks` and `DedicatedAllocations` of a block vector (the general allocator's memory type or
/// a pool).
fn block_vector(blocks: &[BlockReport]) -> (Json, Json) {
    let shared =
        blocks.iter().filter(|b| !b.dedicated).map(|b| (b.id.to_string(), block_json(b))).collect::<Vec<_>>();
    let dedicated = blocks
        .iter()
        .filter(|b| b.dedicated)
        .map(|b| {
            let info = b.allocations().next().map(|(_, info)| info.clone()).unwrap_or_default();
            let info = AllocationInfo { name: info.name.or_else(|| Some(b.name.clone())), ..info };
            allocation_params(&info, b.size, None)
        })
        .collect();
    (Json::Object(shared, false), Json::Array(dedicated))
}

fn heap_flags(device_local: bool, multi_instance: bool) -> Json {
    let mut flags = Vec::new();
    if device_local {
        flags.push(Json::str("DEVICE_LOCAL"));
    }
    if multi_instance {
        flags.push(Json::str("MULTI_INSTANCE"));
    }
    Json::Array(flags)
}

fn type_flags(f: &crate::profile::MemoryTypeFlags) -> Json {
    let names = [
        (f.device_local, "DEVICE_LOCAL"),
        (f.host_visible, "HOST_VISIBLE"),
        (f.host_coherent, "HOST_COHERENT"),
        (f.host_cached, "HOST_CACHED"),
        (f.lazily_allocated, "LAZILY_ALLOCATED"),
        (f.protected, "PROTECTED"),
    ];
    Json::Array(names.iter().filter(|(on, _)| *on).map(|(_, n)| Json::str(*n)).collect())
}

/// The report as VMA's JSON dump with the detailed map (`vmaBuildStatsString(…, VK_TRUE)`).
/// Deterministic: the same report gives the same text.
pub fn to_vma_json(report: &MemoryReport) -> String {
    let d = &report.device;
    let general = Json::object(vec![
        ("API", Json::str("Vulkan")),
        ("apiVersion", Json::str(d.api_version.clone())),
        ("GPU", Json::str(d.name.clone())),
        ("deviceType", Json::Num(u64::from(d.device_type))),
        ("maxMemoryAllocationCount", Json::Num(d.max_memory_allocation_count)),
        ("bufferImageGranularity", Json::Num(d.buffer_image_granularity)),
        ("nonCoherentAtomSize", Json::Num(d.non_coherent_atom_size)),
        ("memoryHeapCount", Json::Num(report.heaps.len() as u64)),
        ("memoryTypeCount", Json::Num(report.memory_types.len() as u64)),
    ]);

    // Statistics per memory type (general blocks and pool pages), summed to heaps and the total.
    let mut type_stats: Vec<VmaStats> =
        report.memory_types.iter().map(|t| VmaStats::of_blocks(&t.blocks)).collect();
    for pool in &report.pools {
        if let Some(slot) = type_stats.get_mut(pool.memory_type as usize) {
            slot.merge(VmaStats::of_blocks(&pool.blocks));
        }
    }
    let mut total = VmaStats::default();
    let mut memory_info = Vec::new();
    for heap in &report.heaps {
        let mut heap_stats = VmaStats::default();
        let mut pools = Vec::new();
        for (t, stats) in
            report.memory_types.iter().zip(&type_stats).filter(|(t, _)| t.heap_index == heap.index)
        {
            heap_stats.merge(*stats);
            pools.push((
                format!("Type {}", t.index),
                Json::object(vec![("Flags", type_flags(&t.flags)), ("Stats", stats.json())]),
            ));
        }
        total.merge(heap_stats);
        memory_info.push((
            format!("Heap {}", heap.index),
            Json::object(vec![
                ("Flags", heap_flags(heap.device_local, heap.multi_instance)),
                ("Size", Json::Num(heap.size)),
                (
                    "Budget",
                    Json::object(vec![
                        ("BudgetBytes", Json::Num(heap.budget)),
                        ("UsageBytes", Json::Num(heap.usage)),
                    ]),
                ),
                ("Stats", heap_stats.json()),
                ("MemoryPools", Json::Object(pools, false)),
            ]),
        ));
    }

    let default_pools = report
        .memory_types
        .iter()
        .map(|t| {
            let (blocks, dedicated) = block_vector(&t.blocks);
            (
                format!("Type {}", t.index),
                Json::object(vec![
                    ("PreferredBlockSize", Json::Num(t.preferred_block_size)),
                    ("Blocks", blocks),
                    ("DedicatedAllocations", dedicated),
                ]),
            )
        })
        .collect();

    let mut custom_pools = Vec::new();
    for t in &report.memory_types {
        let pools: Vec<Json> = report
            .pools
            .iter()
            .filter(|p| p.memory_type == t.index)
            .enumerate()
            .map(|(i, p)| {
                let (blocks, dedicated) = block_vector(&p.blocks);
                Json::object(vec![
                    ("Name", Json::str(format!("{i} - {}", p.name))),
                    ("PreferredBlockSize", Json::Num(p.page_size)),
                    ("Blocks", blocks),
                    ("DedicatedAllocations", dedicated),
                ])
            })
            .collect();
        if !pools.is_empty() {
            custom_pools.push((format!("Type {}", t.index), Json::Array(pools)));
        }
    }

    let root = Json::object(vec![
        ("General", general),
        ("Total", total.json()),
        ("MemoryInfo", Json::Object(memory_info, false)),
        ("DefaultPools", Json::Object(default_pools, false)),
        ("CustomPools", Json::Object(custom_pools, false)),
    ]);
    let mut out = String::new();
    root.write(&mut out, 0);
    out.push('\n');
    out
}
