use super::*;
use crate::profile::MemoryTypeFlags;
use serde_json::Value;

fn info(name: &str, resource: ResourceType, usage: u64, alignment: u64) -> AllocationInfo {
    AllocationInfo { name: Some(name.into()), resource, usage, alignment }
}

fn used(offset: u64, footprint: u64, bytes: u64, info: AllocationInfo) -> UsedRange {
    UsedRange { offset, footprint, bytes, info }
}

fn flags(device_local: bool, host: bool) -> MemoryTypeFlags {
    MemoryTypeFlags { device_local, host_visible: host, host_coherent: host, ..MemoryTypeFlags::default() }
}

/// Two heaps, three memory types; general blocks (one dedicated), and a pool of two pages.
fn sample(index: u32) -> MemoryReport {
    let vertex = info("mesh <vertices> & \"more\"", ResourceType::Buffer, 0x80, 16);
    let uniform = info("camera", ResourceType::Buffer, 0x10, 256);
    let general0 = BlockReport::from_used(
        0,
        "device 0 type 0 heap 1",
        64 << 10,
        [used(0, 1000, 1000, vertex.clone()), used(1024, 256, 200, uniform.clone())],
    );
    let general1 = BlockReport::from_used(
        2,
        "device 0 type 0 heap 3",
        128 << 10,
        [used(4096, 4096, 4096, AllocationInfo { alignment: 4096, ..AllocationInfo::default() })],
    );
    let dedicated = BlockReport::from_used(0, "big", 1 << 20, [used(0, 1 << 20, 1_000_000, vertex.clone())])
        .with_dedicated(true);
    let upload = BlockReport::from_used(1, "upload heap", 64 << 10, []).with_mapped(true);
    let page0 = BlockReport::from_used(
        0,
        "pool page 1",
        256 << 10,
        [
            used(0, 512, 500, info("ib", ResourceType::Buffer, 0x40, 16)),
            used(768, 256, 256, info("ub", ResourceType::Buffer, 0x10, 256)),
            used(4096, 8192, 8000, info("sb", ResourceType::Buffer, 0x20, 64)),
        ],
    );
    let page1 = BlockReport::from_used(1, "pool page 2", 256 << 10, [used(0, 100, 100, vertex)]);
    MemoryReport {
        device: DeviceInfo {
            index,
            name: format!("test gpu {index}"),
            api_version: "1.3.0".into(),
            device_type: 2,
            max_memory_allocation_count: 4096,
            buffer_image_granularity: 1024,
            non_coherent_atom_size: 64,
        },
        heaps: vec![
            HeapReport {
                index: 0,
                size: 8 << 30,
                device_local: true,
                multi_instance: false,
                budget: 6 << 30,
                usage: 2 << 20,
                library_bytes: (64 << 10) + (128 << 10) + (1 << 20) + (512 << 10),
            },
            HeapReport {
                index: 1,
                size: 16 << 30,
                device_local: false,
                multi_instance: false,
                budget: 12 << 30,
                usage: 64 << 10,
                library_bytes: 64 << 10,
            },
        ],
        memory_types: vec![
            MemoryTypeReport {
                index: 0,
                heap_index: 0,
                flags: flags(true, false),
                preferred_block_size: 64 << 20,
                blocks: vec![general0, general1, dedicated],
            },
            MemoryTypeReport {
                index: 1,
                heap_index: 1,
                flags: flags(false, true),
                preferred_block_size: 64 << 20,
                blocks: vec![upload],
            },
            MemoryTypeReport {
                index: 2,
                heap_index: 0,
                flags: flags(true, false),
                preferred_block_size: 64 << 20,
                blocks: vec![],
            },
        ],
        pools: vec![PoolReport {
            name: "placed".into(),
            memory_type: 2,
            page_size: 256 << 10,
            blocks: vec![page0, page1],
        }],
    }
}

fn kinds(block: &BlockReport) -> Vec<(u64, u64, &'static str)> {
    block
        .ranges
        .iter()
        .map(|r| {
            let k = match r.kind {
                RangeKind::Allocation(_) => "alloc",
                RangeKind::Padding => "pad",
                RangeKind::Free => "free",
            };
            (r.offset, r.size, k)
        })
        .collect()
}

#[test]
fn ranges_tile_the_block_with_alignment_gaps_and_tails_as_padding() {
    let report = sample(0);
    report.check().unwrap();
    let block = &report.memory_types[0].blocks[0];
    // 1000 B of vertices; a 24 B gap before the 256-aligned uniform (padding); 200 B of uniform in
    // a 256 B footprint (a padding tail); then free.
    assert_eq!(
        kinds(block),
        vec![
            (0, 1000, "alloc"),
            (1000, 24, "pad"),
            (1024, 200, "alloc"),
            (1224, 56, "pad"),
            (1280, 64_256, "free")
        ]
    );
    // A gap as large as the next allocation's alignment is free space, not padding.
    let block = &report.memory_types[0].blocks[1];
    assert_eq!(kinds(block), vec![(0, 4096, "free"), (4096, 4096, "alloc"), (8192, 122_880, "free")]);
}

#[test]
fn check_reports_a_block_whose_ranges_do_not_tile_it() {
    let mut report = sample(0);
    report.memory_types[0].blocks[0].ranges.remove(1);
    let err = report.check().unwrap_err();
    assert!(matches!(err, ReportError::BadTiling { offset: 1024, expected: 1000, .. }), "{err}");
    let mut report = sample(0);
    report.memory_types[1].blocks[0].size += 1;
    assert!(matches!(report.check(), Err(ReportError::BadTiling { .. })));
    let mut report = sample(0);
    report.pools[0].memory_type = 9;
    assert!(matches!(report.check(), Err(ReportError::NoSuchMemoryType { memory_type: 9, .. })));
}

#[test]
fn statistics_add_up_exactly_at_every_level() {
    let report = sample(0);
    let s = report.statistics();
    let sum = |v: &[Statistics]| v.iter().copied().sum::<Statistics>();
    for level in [&s.total, &s.heaps[0], &s.heaps[1], &s.memory_types[0], &s.pools[0]] {
        assert_eq!(level.block_bytes, level.allocation_bytes + level.padding_bytes + level.free_bytes);
    }
    assert_eq!(s.total, sum(&s.heaps));
    assert_eq!(s.total, sum(&s.memory_types));
    assert_eq!(s.heaps[0], s.memory_types[0] + s.memory_types[2]);
    assert_eq!(s.memory_types[2], s.general[2] + s.pools[0]);
    assert_eq!(s.general[2], Statistics::default());
    let every_block: Statistics = report.blocks().map(|(_, _, b)| Statistics::of_block(b)).sum();
    assert_eq!(s.total, every_block);
    assert_eq!(s.total.block_count, 6);
    assert_eq!(s.total.allocation_count, 8);
    assert_eq!(s.total.allocation_size_min, 100);
    assert_eq!(s.total.allocation_size_max, 1_000_000);
    assert_eq!(s.pools[0].allocation_bytes, 500 + 256 + 8000 + 100);
    assert_eq!(s.heaps[1].free_bytes, 64 << 10);
    assert_eq!(s.heaps[1].fragmentation(), 0.0);
    assert!(s.total.fragmentation() > 0.0);

    let set = DeviceSetReport { devices: vec![sample(0), sample(1)] };
    let total = set.total();
    assert_eq!(total, s.total + s.total);
    assert_eq!(total.allocation_size_min, 100, "min over devices, not a sum");
}

#[test]
fn empty_report_has_zero_statistics() {
    let report = MemoryReport::default();
    assert_eq!(report.statistics().total, Statistics::default());
    assert_eq!(DeviceSetReport::default().total(), Statistics::default());
}

fn keys(v: &Value) -> Vec<&str> {
    v.as_object().expect("an object").keys().map(String::as_str).collect()
}

fn sorted(mut v: Vec<&str>) -> Vec<&str> {
    v.sort_unstable();
    v
}

const SUBALLOCATION_TYPES: [&str; 6] =
    ["FREE", "UNKNOWN", "BUFFER", "IMAGE_UNKNOWN", "IMAGE_LINEAR", "IMAGE_OPTIMAL"];

/// What `GpuMemDumpVis.py` does with a block: `TotalBytes` as an int, and each suballocation's
/// `Type`, `Size` and optional `Usage`, laid end to end.
fn check_vis_block(id: &str, block: &Value) -> (u64, usize) {
    id.parse::<u64>().expect("block ids are numbers");
    let total = block["TotalBytes"].as_u64().expect("TotalBytes");
    let subs = block["Suballocations"].as_array().expect("Suballocations");
    let mut end = 0;
    let mut allocations = 0;
    for s in subs {
        let ty = s["Type"].as_str().expect("Type");
        assert!(SUBALLOCATION_TYPES.contains(&ty), "{ty}");
        assert_eq!(s["Offset"].as_u64(), Some(end), "suballocations are contiguous");
        end += s["Size"].as_u64().expect("Size");
        if ty == "FREE" {
            assert_eq!(sorted(keys(s)), ["Offset", "Size", "Type"]);
        } else {
            allocations += 1;
            s["Usage"].as_u64().expect("allocations have a numeric Usage");
        }
    }
    assert_eq!(end, total, "suballocations tile the block");
    assert_eq!(block["Allocations"].as_u64(), Some(allocations as u64));
    assert_eq!(block["UnusedRanges"].as_u64(), Some((subs.len() - allocations) as u64));
    let unused: u64 = subs.iter().filter(|s| s["Type"] == "FREE").map(|s| s["Size"].as_u64().unwrap()).sum();
    assert_eq!(block["UnusedBytes"].as_u64(), Some(unused));
    (total, subs.len())
}

fn check_dedicated(list: &Value) -> usize {
    let list = list.as_array().expect("DedicatedAllocations is an array");
    for d in list {
        assert!(SUBALLOCATION_TYPES.contains(&d["Type"].as_str().unwrap()));
        d["Size"].as_u64().expect("Size");
        d["Usage"].as_u64().expect("Usage");
    }
    list.len()
}

fn check_stats(stats: &Value) {
    let k = keys(stats);
    for key in ["BlockCount", "BlockBytes", "AllocationCount", "AllocationBytes", "UnusedRangeCount"] {
        assert!(stats[key].is_u64(), "{key} in {stats}");
    }
    let allocations = stats["AllocationCount"].as_u64().unwrap();
    let unused = stats["UnusedRangeCount"].as_u64().unwrap();
    assert_eq!(k.contains(&"AllocationSizeMin"), allocations > 1);
    assert_eq!(k.contains(&"AllocationSizeMax"), allocations > 1);
    assert_eq!(k.contains(&"UnusedRangeSizeMin"), unused > 1);
    assert_eq!(k.contains(&"UnusedRangeSizeMax"), unused > 1);
}

#[test]
fn vma_json_has_the_structure_gpu_mem_dump_vis_reads() {
    let report = sample(0);
    let text = to_vma_json(&report);
    let root: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(sorted(keys(&root)), ["CustomPools", "DefaultPools", "General", "MemoryInfo", "Total"]);
    assert_eq!(root["General"]["API"], "Vulkan");
    assert_eq!(
        sorted(keys(&root["General"])),
        [
            "API",
            "GPU",
            "apiVersion",
            "bufferImageGranularity",
            "deviceType",
            "maxMemoryAllocationCount",
            "memoryHeapCount",
            "memoryTypeCount",
            "nonCoherentAtomSize"
        ]
    );
    assert_eq!(root["General"]["memoryTypeCount"], 3);

    let mut blocks = 0;
    let mut dedicated = 0;
    for (name, pool) in root["DefaultPools"].as_object().unwrap() {
        assert!(name.starts_with("Type "), "{name}");
        assert_eq!(sorted(keys(pool)), ["Blocks", "DedicatedAllocations", "PreferredBlockSize"]);
        for (id, block) in pool["Blocks"].as_object().expect("Blocks is an object keyed by id") {
            check_vis_block(id, block);
            blocks += 1;
        }
        dedicated += check_dedicated(&pool["DedicatedAllocations"]);
    }
    assert_eq!((blocks, dedicated), (3, 1));
    let big = &root["DefaultPools"]["Type 0"]["DedicatedAllocations"][0];
    assert_eq!(
        (big["Type"].as_str(), big["Size"].as_u64(), big["Usage"].as_u64()),
        (Some("BUFFER"), Some(1 << 20), Some(0x80))
    );

    let custom = root["CustomPools"].as_object().unwrap();
    assert_eq!(custom.keys().collect::<Vec<_>>(), ["Type 2"]);
    let pools = custom["Type 2"].as_array().expect("custom pools of a type are an array");
    assert_eq!(pools.len(), 1);
    assert_eq!(pools[0]["Name"], "0 - placed");
    assert_eq!(sorted(keys(&pools[0])), ["Blocks", "DedicatedAllocations", "Name", "PreferredBlockSize"]);
    assert_eq!(pools[0]["Blocks"].as_object().unwrap().len(), 2);
    for (id, block) in pools[0]["Blocks"].as_object().unwrap() {
        check_vis_block(id, block);
    }
    let first = &pools[0]["Blocks"]["0"]["Suballocations"][0];
    assert_eq!(
        (first["Name"].as_str(), first["Usage"].as_u64(), first["Size"].as_u64()),
        (Some("ib"), Some(0x40), Some(500))
    );

    check_stats(&root["Total"]);
    for (name, heap) in root["MemoryInfo"].as_object().unwrap() {
        assert!(name.starts_with("Heap "), "{name}");
        assert_eq!(sorted(keys(heap)), ["Budget", "Flags", "MemoryPools", "Size", "Stats"]);
        assert_eq!(sorted(keys(&heap["Budget"])), ["BudgetBytes", "UsageBytes"]);
        check_stats(&heap["Stats"]);
        for (t, ty) in heap["MemoryPools"].as_object().unwrap() {
            assert!(t.starts_with("Type "), "{t}");
            assert!(ty["Flags"].is_array());
            check_stats(&ty["Stats"]);
        }
    }
    assert_eq!(root["MemoryInfo"]["Heap 0"]["Flags"], serde_json::json!(["DEVICE_LOCAL"]));
    assert_eq!(
        root["MemoryInfo"]["Heap 1"]["MemoryPools"]["Type 1"]["Flags"],
        serde_json::json!(["HOST_VISIBLE", "HOST_COHERENT"])
    );
}

#[test]
fn vma_totals_match_our_statistics_and_sum_over_heaps() {
    let report = sample(0);
    let root: Value = serde_json::from_str(&to_vma_json(&report)).unwrap();
    let ours = report.statistics().total;
    let total = &root["Total"];
    assert_eq!(total["BlockCount"].as_u64(), Some(ours.block_count));
    assert_eq!(total["BlockBytes"].as_u64(), Some(ours.block_bytes));
    assert_eq!(total["AllocationCount"].as_u64(), Some(ours.allocation_count));
    // VMA counts a dedicated allocation as the whole memory.
    let dedicated_padding = (1 << 20) - 1_000_000;
    assert_eq!(total["AllocationBytes"].as_u64(), Some(ours.allocation_bytes + dedicated_padding));
    let heaps = root["MemoryInfo"].as_object().unwrap();
    for key in ["BlockCount", "BlockBytes", "AllocationCount", "AllocationBytes", "UnusedRangeCount"] {
        let sum: u64 = heaps.values().map(|h| h["Stats"][key].as_u64().unwrap()).sum();
        assert_eq!(total[key].as_u64(), Some(sum), "{key}");
    }
}

#[test]
fn vma_json_is_deterministic_and_keeps_vma_key_order() {
    let report = sample(0);
    let a = to_vma_json(&report);
    assert_eq!(a, to_vma_json(&report.clone()));
    let order = ["\"General\"", "\"Total\"", "\"MemoryInfo\"", "\"DefaultPools\"", "\"CustomPools\""];
    let positions: Vec<usize> = order.iter().map(|k| a.find(k).unwrap()).collect();
    assert!(positions.windows(2).all(|w| w[0] < w[1]), "{positions:?}");
    // Names with quotes and angle brackets survive as JSON strings.
    assert!(a.contains(r#""Name": "mesh <vertices> & \"more\"""#), "{a}");
}

#[test]
fn vma_json_of_an_empty_report_is_valid() {
    let root: Value = serde_json::from_str(&to_vma_json(&MemoryReport::default())).unwrap();
    assert_eq!(root["DefaultPools"], serde_json::json!({}));
    assert_eq!(root["CustomPools"], serde_json::json!({}));
    assert_eq!(root["Total"]["BlockCount"], 0);
}

#[test]
fn svg_has_one_rect_per_block_a_legend_and_escaped_names() {
    let report = sample(0);
    let svg = to_svg(&report);
    assert!(svg.starts_with("<svg xmlns=\"http://www.w3.org/2000/svg\""));
    assert!(svg.trim_end().ends_with("</svg>"));
    assert_eq!(svg.matches("class=\"block\"").count(), report.blocks().count());
    let ranges =
        report.blocks().flat_map(|(_, _, b)| &b.ranges).filter(|r| r.kind != RangeKind::Free).count();
    assert_eq!(svg.matches("class=\"range ").count(), ranges);
    for label in
        ["alignment padding", "free", "vertex / index / indirect buffer", "uniform buffer", "storage buffer"]
    {
        assert!(svg.contains(&format!(">{label}</text>")), "legend has {label}");
    }
    assert_eq!(svg.matches("class=\"legend ").count(), 8);
    assert!(svg.contains("mesh &lt;vertices&gt; &amp; &quot;more&quot;"));
    assert!(!svg.contains("<vertices>"));
    assert!(svg.contains("Heap 0 (device-local"));
    assert!(svg.contains("pool `placed`"));
    assert!(!svg.contains("<script"), "self-contained");
    assert_eq!(svg, to_svg(&report), "deterministic");
}

#[test]
fn svg_scales_rows_per_block_or_to_the_largest_block() {
    let report = sample(0);
    let per_block = to_svg(&report);
    assert_eq!(per_block.matches(r#"width="1180.00" height="22""#).count(), report.blocks().count());
    let svg = to_svg_with(&report, &SvgOptions::default().with_scale(SvgScale::Shared));
    // The 1 MiB dedicated block is the widest: 1180 px; a 64 KiB block is 1/16 of it.
    assert!(svg.contains(r#"class="block" x="10.00" y=""#));
    assert!(svg.contains(r#"width="1180.00" height="22""#), "{svg}");
    assert!(svg.contains(r#"width="73.75" height="22""#), "{svg}");
    let empty = to_svg(&MemoryReport::default());
    assert_eq!(empty.matches("class=\"block\"").count(), 0);
    assert!(empty.contains("class=\"legend "));
}

#[test]
fn our_json_round_trips_the_report_and_carries_statistics() {
    let set = DeviceSetReport { devices: vec![sample(0), sample(1)] };
    let text = to_json(&set);
    let value: Value = serde_json::from_str(&text).unwrap();
    let back: MemoryReport = serde_json::from_value(value["devices"][1]["report"].clone()).unwrap();
    assert_eq!(back, set.devices[1]);
    let total: Statistics = serde_json::from_value(value["total"].clone()).unwrap();
    assert_eq!(total, set.total());
    assert_eq!(value["devices"][0]["statistics"]["heaps"].as_array().unwrap().len(), 2);
    assert_eq!(
        value["devices"][0]["report"]["memory_types"][0]["blocks"][0]["ranges"][0]["state"],
        "allocation"
    );
    assert_eq!(text, to_json(&set), "deterministic");
}

#[test]
fn bytes_are_formatted_in_binary_units() {
    assert_eq!(format_bytes(0), "0 B");
    assert_eq!(format_bytes(1023), "1023 B");
    assert_eq!(format_bytes(1536), "1.5 KiB");
    assert_eq!(format_bytes(64 << 20), "64.0 MiB");
}

#[test]
fn the_combined_view_lines_devices_up_and_lists_each_resource_per_device() {
    let mut second = sample(1);
    // Device 1 has one more resource of its own, in its pool's first page's free space.
    let extra = used(64 << 10, 4096, 4096, info("right eye only", ResourceType::Buffer, 0x20, 16));
    let page = &mut second.pools[0].blocks[0];
    let mut used_ranges: Vec<UsedRange> = page
        .ranges
        .iter()
        .filter_map(|r| match &r.kind {
            RangeKind::Allocation(i) => Some(used(r.offset, r.size, r.size, i.clone())),
            _ => None,
        })
        .collect();
    used_ranges.push(extra);
    *page = BlockReport::from_used(page.id, page.name.clone(), page.size, used_ranges);
    let set = DeviceSetReport { devices: vec![sample(0), second] };
    let view = set.combined();
    assert_eq!(view.devices.len(), 2);
    assert_eq!(view.devices[1].index, 1);
    assert_eq!(view.total, set.total());
    assert_eq!(view.devices[0].statistics + view.devices[1].statistics, view.total);
    // Named resources only; the ones on both devices first, then by name.
    let names: Vec<&str> = view.resources.iter().map(|r| r.name.as_str()).collect();
    assert_eq!(names.last(), Some(&"right eye only"));
    let eye = view.resources.last().unwrap();
    assert_eq!(eye.bytes, vec![None, Some(4096)]);
    assert_eq!((eye.device_count(), eye.total_bytes()), (1, 4096));
    let mesh = view.resources.iter().find(|r| r.name.starts_with("mesh")).unwrap();
    // Three allocations of the mesh on each device: 1000 + 1 000 000 + 100 bytes.
    assert_eq!(mesh.bytes, vec![Some(1_001_100), Some(1_001_100)]);
    assert!(view.resources.iter().all(|r| !r.name.is_empty()));
    let text = view.to_text();
    assert!(text.contains("device 0") && text.contains("device 1") && text.contains("total"), "{text}");
    assert!(text.lines().any(|l| l.contains("right eye only") && l.contains(" - ")), "{text}");
    // It serialises for `residency dump --json`.
    let json: Value = serde_json::to_value(&view).unwrap();
    assert_eq!(json["resources"].as_array().unwrap().len(), view.resources.len());
}
