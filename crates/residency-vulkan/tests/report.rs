//! Memory reports of a live device: pools and general heaps, names from the listed buffers, and the
//! dumps built from them.

use residency_core::memory::MemoryIntent;
use residency_core::report::{to_svg, to_vma_json, RangeKind, ResourceType, Statistics};
use residency_core::usage::{BufferPoolUsage, BufferUsage};
use residency_vulkan::testing::with_gpu;
use residency_vulkan::{
    Buffer, BufferDesc, BufferInit, BufferPlacement, BufferPool, BufferPoolDesc, ReportSources,
};
use std::sync::Arc;

fn pool_buffers(pool: &BufferPool) -> Vec<Buffer> {
    let requests = [
        ("vertices", 3000, BufferUsage::VERTEX | BufferUsage::COPY_DST),
        ("indices", 1000, BufferUsage::INDEX | BufferUsage::COPY_DST),
        ("camera", 200, BufferUsage::UNIFORM),
        ("particles", 10_000, BufferUsage::STORAGE),
        ("scratch", 777, BufferUsage::STORAGE | BufferUsage::COPY_SRC),
        ("lights", 96, BufferUsage::UNIFORM),
    ];
    requests
        .iter()
        .map(|&(name, size, usage)| pool.init_buffer(&BufferInit::new(name, size).with_usage(usage)).unwrap())
        .collect()
}

#[test]
fn report_names_every_listed_buffer_and_its_padding() {
    with_gpu(|set| {
        let device = set.devices()[0].clone();
        let desc = BufferPoolDesc::new("report pool", BufferPoolUsage::Unknown).with_page_size(256 << 10);
        let pool = BufferPool::new(Arc::clone(&device), desc).unwrap();
        let mut buffers = pool_buffers(&pool);
        // Free two, leaving holes.
        for name in ["indices", "scratch"] {
            let i = buffers.iter().position(|b| b.name() == name).unwrap();
            pool.free_buffer(buffers.remove(i)).unwrap();
        }
        let placed = device
            .create_buffer(
                &BufferDesc::new("upload staging", 5000, BufferUsage::COPY_SRC)
                    .with_intent(MemoryIntent::Upload),
            )
            .unwrap();
        let committed = device
            .create_buffer(&BufferDesc::new("committed vb", 70_000, BufferUsage::VERTEX).committed())
            .unwrap();
        assert_eq!(committed.placement(), BufferPlacement::Committed);

        let listed: Vec<&Buffer> = buffers.iter().chain([&placed, &committed]).collect();
        let report = device
            .memory_report_with(&ReportSources::new().with_pool(&pool).with_buffers(listed.iter().copied()));
        report.check().unwrap();
        assert_eq!(report.device.index, device.index().get());
        assert_eq!(report.heaps.len(), device.memory_properties().heaps.len());
        assert_eq!(report.memory_types.len(), device.memory_properties().types.len());

        // Every listed buffer appears once, by name, with its size and usage; freed ones do not.
        let allocations: Vec<_> = report.blocks().flat_map(|(_, _, b)| b.allocations()).collect();
        for buffer in &listed {
            let found: Vec<_> =
                allocations.iter().filter(|(_, info)| info.name.as_deref() == Some(buffer.name())).collect();
            assert_eq!(found.len(), 1, "{} listed once", buffer.name());
            let (range, info) = found[0];
            assert_eq!(range.size, buffer.size(), "{}", buffer.name());
            assert_eq!(info.usage, u64::from(buffer.usage().bits()));
            assert_eq!(info.resource, ResourceType::Buffer);
            assert_eq!(range.offset, buffer.memory().1);
        }
        for gone in ["indices", "scratch"] {
            assert!(
                allocations.iter().all(|(_, info)| info.name.as_deref() != Some(gone)),
                "{gone} was freed"
            );
        }

        // The pool: its pages, its buffers, consistent with its own statistics.
        assert_eq!(report.pools.len(), 1);
        let pool_report = &report.pools[0];
        assert_eq!(pool_report.name, "report pool");
        assert_eq!(pool_report.memory_type, pool.memory_type());
        let stats = report.statistics();
        let pool_stats = stats.pools[0];
        let own = pool.stats();
        assert_eq!(pool_stats.block_count, own.pages as u64);
        assert_eq!(pool_stats.block_bytes, own.page_bytes);
        assert_eq!(pool_stats.allocation_count, own.buffers);
        assert_eq!(pool_stats.allocation_bytes, buffers.iter().map(Buffer::size).sum::<u64>());
        assert!(pool_stats.free_range_count >= 1, "the freed buffers left free space");

        // The committed buffer is a dedicated block of its own, the size of its memory.
        let dedicated: Vec<_> = report.blocks().filter(|(_, _, b)| b.dedicated).collect();
        assert_eq!(dedicated.len(), 1);
        let (_, pool_of, block) = dedicated[0];
        assert!(pool_of.is_none());
        assert!(block.size >= committed.size());
        assert!(
            matches!(&block.ranges[0].kind, RangeKind::Allocation(info) if info.name.as_deref() == Some("committed vb"))
        );

        // Heaps: what the report lists never exceeds what the library holds.
        for heap in &report.heaps {
            assert!(
                stats.heaps[heap.index as usize].block_bytes <= heap.library_bytes,
                "heap {}",
                heap.index
            );
            assert!(heap.budget > 0);
        }
        assert_eq!(stats.total, stats.heaps.iter().copied().sum::<Statistics>());

        // The dumps.
        let vma: serde_json::Value = serde_json::from_str(&to_vma_json(&report)).unwrap();
        assert_eq!(vma["General"]["API"], "Vulkan");
        assert_eq!(vma["General"]["GPU"], device.name());
        let custom = &vma["CustomPools"][format!("Type {}", pool.memory_type())];
        assert_eq!(custom[0]["Name"], "0 - report pool");
        assert_eq!(custom[0]["Blocks"].as_object().unwrap().len(), own.pages);
        assert_eq!(vma["Total"]["BlockCount"].as_u64(), Some(stats.total.block_count));
        let svg = to_svg(&report);
        assert_eq!(svg.matches("class=\"block\"").count(), report.blocks().count());
        assert!(svg.contains("particles"));

        // Without names, the pool's own report still shows every allocation as a buffer.
        let bare = pool.report();
        let bare_allocations: Vec<_> = bare.blocks.iter().flat_map(|b| b.allocations()).collect();
        assert_eq!(bare_allocations.len() as u64, own.buffers);
        assert!(bare_allocations
            .iter()
            .all(|(_, info)| info.name.is_none() && info.resource == ResourceType::Buffer));

        for b in buffers {
            pool.free_buffer(b).unwrap();
        }
        drop(placed);
        drop(committed);
        drop(pool);
    });
}

#[test]
fn known_flags_pool_ranges_carry_the_pool_flags() {
    with_gpu(|set| {
        let device = set.devices()[0].clone();
        let usage = BufferUsage::UNIFORM | BufferUsage::COPY_DST;
        let desc =
            BufferPoolDesc::new("uniform ring", BufferPoolUsage::Known(usage)).with_page_size(64 << 10);
        let pool = BufferPool::new(Arc::clone(&device), desc).unwrap();
        let a = pool.init_buffer(&BufferInit::new("frame constants", 300)).unwrap();
        let b = pool.init_buffer(&BufferInit::new("object constants", 100)).unwrap();
        let report = pool.report_with(&[&a]);
        let allocations: Vec<_> = report.blocks.iter().flat_map(|b| b.allocations()).collect();
        assert_eq!(allocations.len(), 2);
        assert!(allocations.iter().all(|(_, info)| info.usage == u64::from(usage.bits())));
        assert_eq!(
            allocations.iter().filter(|(_, info)| info.name.as_deref() == Some("frame constants")).count(),
            1
        );
        // The named range is the buffer's own 300 B; its footprint's tail is padding.
        let (range, _) = allocations.iter().find(|(_, info)| info.name.is_some()).unwrap();
        assert_eq!(range.size, 300);
        pool.free_buffer(a).unwrap();
        pool.free_buffer(b).unwrap();
        let empty = pool.report();
        assert!(empty.blocks.iter().all(|b| b.allocations().next().is_none()));
    });
}

#[test]
fn device_set_report_has_one_report_per_device_and_a_total() {
    with_gpu(|set| {
        let device = &set.devices()[0];
        let buffer =
            device.create_buffer(&BufferDesc::new("set report probe", 4096, BufferUsage::STORAGE)).unwrap();
        let report = set.memory_report_with(&ReportSources::new().with_buffer(&buffer));
        assert_eq!(report.devices.len(), set.devices().len());
        for (r, d) in report.devices.iter().zip(set.devices()) {
            assert_eq!(r.device.index, d.index().get());
            r.check().unwrap();
        }
        let sum: Statistics = report.devices.iter().map(|d| d.statistics().total).sum();
        assert_eq!(report.total(), sum);
        assert!(report.devices[0]
            .blocks()
            .flat_map(|(_, _, b)| b.allocations())
            .any(|(_, info)| info.name.as_deref() == Some("set report probe")));
        let unnamed = set.memory_report();
        assert!(unnamed.total().allocation_count >= 1);
        drop(buffer);
    });
}

#[test]
fn images_and_allocations_are_named_in_the_dump_placed_and_dedicated() {
    use residency_core::format::Format;
    use residency_core::usage::ImageUsage;
    use residency_vulkan::ash::vk;
    use residency_vulkan::{AllocationDesc, ImageDesc};
    with_gpu(|set| {
        let device = &set.devices()[0];
        let sampled = ImageUsage::SAMPLED | ImageUsage::COPY_DST;
        let placed = device
            .create_image(&ImageDesc::new_2d("report albedo", Format::R8G8B8A8Unorm, 64, 64, sampled))
            .unwrap();
        let committed = device
            .create_image(
                &ImageDesc::new_2d("report shadow map", Format::R8G8B8A8Unorm, 128, 128, sampled).committed(),
            )
            .unwrap();
        let requirements = vk::MemoryRequirements { size: 8192, alignment: 256, memory_type_bits: u32::MAX };
        let raw = device.allocate_memory(&requirements, &AllocationDesc::new("report raw scratch")).unwrap();
        let own = device
            .allocate_memory(&requirements, &AllocationDesc::new("report own dedicated").dedicated())
            .unwrap();
        let sources = ReportSources::new().with_images([&placed, &committed]).with_allocations([&raw, &own]);
        let report = device.memory_report_with(&sources);
        let ranges: Vec<_> = report
            .memory_types
            .iter()
            .flat_map(|t| t.blocks.iter().map(move |b| (b, t)))
            .flat_map(|(b, _)| b.ranges.iter().map(move |r| (b, r)))
            .collect();
        let info = |r: &residency_core::report::Range| match &r.kind {
            RangeKind::Allocation(info) => Some(info.clone()),
            _ => None,
        };
        let find = |name: &str| {
            ranges
                .iter()
                .find(|(_, r)| info(r).and_then(|i| i.name) == Some(name.to_owned()))
                .unwrap_or_else(|| panic!("`{name}` is named in the report"))
        };
        let (block, range) = find("report albedo");
        assert!(!block.dedicated);
        assert_eq!(info(range).unwrap().resource, ResourceType::ImageOptimal);
        let (block, _) = find("report shadow map");
        assert!(block.dedicated, "a committed image is its own block");
        let (block, range) = find("report raw scratch");
        assert!(!block.dedicated);
        assert_eq!(range.offset, raw.offset());
        let (block, _) = find("report own dedicated");
        assert!(block.dedicated);
        let json = to_vma_json(&report);
        for name in ["report albedo", "report shadow map", "report raw scratch", "report own dedicated"] {
            assert!(json.contains(name), "`{name}` in the VMA dump");
        }
    });
}
