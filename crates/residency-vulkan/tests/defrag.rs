//! Defragmentation the library carries out (`Defragmenter::pass`): buffers of the device's general
//! heaps move out of the most-empty heaps into the fullest heaps' holes, keep their contents,
//! names, usage and tracking id, are usable by the next submission, and their old objects retire
//! behind the copy and every declared use; buffer pools' buffers move between their pages, and
//! optimal images move with their contents and layouts. Every test runs under `with_gpu`: synchronization
//! validation on, and no object may outlive it.

use residency_core::format::Format;
use residency_core::memory::MemoryIntent;
use residency_core::report::RangeKind;
use residency_core::usage::{BufferPoolUsage, BufferUsage, ImageUsage};
use residency_vulkan::ash::vk;
use residency_vulkan::compute::{Binding, ComputeProgram};
use residency_vulkan::testing::with_gpu;
use residency_vulkan::{
    shaders, Buffer, BufferDesc, BufferInit, BufferPlacement, BufferPool, BufferPoolDesc, CommandContext,
    DefragDesc, DefragError, Defragmenter, Device, FaultSite, Image, ImageDesc, ImageRegion, InjectedFault,
    MemoryError, ReportSources, Unmovable, Uploader, VulkanError,
};
use std::collections::HashMap;
use std::sync::Arc;

const MIB: u64 = 1 << 20;

/// What a buffer looked like: its handle, memory and offset.
type Place = (vk::Buffer, vk::DeviceMemory, u64);

fn place(b: &Buffer) -> Place {
    (b.raw(), b.memory().0, b.memory().1)
}

/// The word at `j` of buffer `i`'s pattern.
fn word(i: usize, j: usize) -> u32 {
    (i as u32).wrapping_mul(0x9e37_79b9) ^ (j as u32).wrapping_mul(0x85eb_ca6b) ^ 0x5bd1_e995
}

fn write_pattern(i: usize, b: &mut Buffer) {
    let words: Vec<u32> = (0..(b.size() / 4) as usize).map(|j| word(i, j)).collect();
    b.write_pod(0, &words).unwrap();
}

fn check_pattern(i: usize, b: &Buffer) {
    let words: Vec<u32> = b.read_pod(0, (b.size() / 4) as usize).unwrap();
    let wrong = words.iter().enumerate().filter(|&(j, &w)| w != word(i, j)).count();
    assert_eq!(wrong, 0, "`{}`: {wrong} words changed", b.name());
}

/// Heaps of the general allocator that hold a live allocation: (how many, their bytes).
fn general_heaps_in_use(device: &Device) -> (usize, u64) {
    let report = device.memory_report();
    report
        .blocks()
        .filter(|(_, pool, b)| pool.is_none() && !b.dedicated)
        .filter(|(_, _, b)| b.ranges.iter().any(|r| matches!(r.kind, RangeKind::Allocation(_))))
        .fold((0, 0), |(n, bytes), (_, _, b)| (n + 1, bytes + b.size))
}

/// Heaps of the general allocator that hold a live allocation.
fn heaps_in_use(device: &Device) -> usize {
    general_heaps_in_use(device).0
}

/// Bytes of the general heaps that hold a live allocation.
fn heap_bytes_in_use(device: &Device) -> u64 {
    general_heaps_in_use(device).1
}

/// Fragmented general heaps: 1 MiB host-visible buffers until a second heap has a few, then the
/// fullest heap thinned to every other buffer (1 MiB holes) and every other heap to `keep`
/// buffers. Returns the buffers with their pattern index, the fullest heap's memory, and the
/// memories that were thinned to `keep`.
fn fragmented(
    device: &Device,
    keep: usize,
) -> (Vec<(usize, Buffer)>, vk::DeviceMemory, Vec<vk::DeviceMemory>) {
    // Every third buffer lacks the copy usages: the pass copies through aliases then.
    fragmented_with(device, keep, |i| {
        if i % 3 == 0 {
            BufferUsage::STORAGE
        } else {
            BufferUsage::STORAGE | BufferUsage::COPY_SRC | BufferUsage::COPY_DST
        }
    })
}

/// [`fragmented`] with buffer `i` of usage `usage(i)`.
fn fragmented_with(
    device: &Device,
    keep: usize,
    usage: impl Fn(usize) -> BufferUsage,
) -> (Vec<(usize, Buffer)>, vk::DeviceMemory, Vec<vk::DeviceMemory>) {
    let mut all: Vec<(usize, Buffer)> = Vec::new();
    for i in 0..400 {
        let usage = usage(i);
        let desc =
            BufferDesc::new(format!("defrag buffer {i}"), MIB, usage).with_intent(MemoryIntent::Upload);
        let mut b = device.create_buffer(&desc).unwrap();
        write_pattern(i, &mut b);
        all.push((i, b));
        let mut per: HashMap<vk::DeviceMemory, usize> = HashMap::new();
        for (_, b) in &all {
            *per.entry(b.memory().0).or_default() += 1;
        }
        if per.len() >= 2 && per[&all.last().unwrap().1.memory().0] > keep {
            break;
        }
    }
    let mut per: HashMap<vk::DeviceMemory, usize> = HashMap::new();
    for (_, b) in &all {
        *per.entry(b.memory().0).or_default() += 1;
    }
    assert!(per.len() >= 2, "the scenario needs two heaps");
    let full = *per.iter().max_by_key(|(m, n)| (**n, format!("{m:?}"))).unwrap().0;
    let mut seen: HashMap<vk::DeviceMemory, usize> = HashMap::new();
    all.retain(|(_, b)| {
        let m = b.memory().0;
        let n = seen.entry(m).or_default();
        *n += 1;
        if m == full {
            *n % 2 == 1
        } else {
            *n <= keep
        }
    });
    let thinned = per.keys().copied().filter(|&m| m != full).collect();
    (all, full, thinned)
}

#[test]
fn a_pass_empties_the_most_empty_heap_into_the_fullest_and_keeps_contents_names_and_ids() {
    with_gpu(|set| {
        let device = &set.devices()[0];
        let (mut buffers, full, thinned) = fragmented(device, 3);
        let before: Vec<(Place, u64, BufferUsage, String, _)> = buffers
            .iter()
            .map(|(_, b)| (place(b), b.size(), b.usage(), b.name().to_owned(), b.resource_id()))
            .collect();
        let mut defrag = Defragmenter::new(device, DefragDesc::default()).unwrap();
        let mut handed: Vec<&mut Buffer> = buffers.iter_mut().map(|(_, b)| b).collect();
        let stats = defrag.pass(&mut handed).unwrap();
        assert!(stats.unmovable.is_empty(), "{:?}", stats.unmovable);
        assert_eq!(stats.moves as usize, 3 * thinned.len(), "every thinned heap moves: {stats:?}");
        assert_eq!(stats.heaps_emptied as usize, thinned.len());
        assert_eq!(stats.bytes_moved, u64::from(stats.moves) * MIB);
        assert!(stats.submission.is_some());
        assert_eq!(defrag.totals().moves, u64::from(stats.moves));
        for ((_, b), (old, size, usage, name, id)) in buffers.iter().zip(&before) {
            assert_eq!((b.size(), b.usage(), b.name(), b.resource_id()), (*size, *usage, name.as_str(), *id));
            if thinned.contains(&old.1) {
                assert_eq!(b.memory().0, full, "`{name}` moved into the fullest heap");
                assert_ne!(b.raw(), old.0, "`{name}` has a new VkBuffer");
            } else {
                assert_eq!(place(b), *old, "`{name}` in the fullest heap stays");
            }
        }
        // A host write right after the pass waits for the copy that fills the new place, so the
        // copy cannot overwrite it.
        let k = (0..buffers.len()).find(|&k| thinned.contains(&before[k].0 .1)).unwrap();
        buffers[k].0 += 1000;
        let (i, b) = &mut buffers[k];
        write_pattern(*i, b);
        device.wait_submitted().unwrap();
        for (i, b) in &buffers {
            check_pattern(*i, b);
        }
        // The old ranges retired after the copy: the emptied heaps hold nothing (kept or freed
        // by the heap-release policy), and only the fullest heap has allocations.
        assert_eq!(device.pending_destruction(), 0);
        assert_eq!(heaps_in_use(device), 1, "one heap holds every buffer");
        // Names in the VMA-format dump label the moved buffers at their new places.
        let labels: Vec<&Buffer> = buffers.iter().map(|(_, b)| b).collect();
        let report = device.memory_report_with(&ReportSources::new().with_buffers(labels));
        let json = residency_core::report::to_vma_json(&report);
        for (_, b) in &buffers {
            assert!(json.contains(&format!("\"{}\"", b.name())), "`{}` is named in the dump", b.name());
        }
        drop(buffers);
    });
}

#[test]
fn a_moved_buffer_is_used_by_the_next_copy_and_dispatch() {
    with_gpu(|set| {
        let device = &set.devices()[0];
        let (mut buffers, full, thinned) = fragmented(device, 2);
        let moved: Vec<usize> =
            (0..buffers.len()).filter(|&k| thinned.contains(&buffers[k].1.memory().0)).collect();
        let mut defrag = Defragmenter::new(device, DefragDesc::default()).unwrap();
        let mut handed: Vec<&mut Buffer> = buffers.iter_mut().map(|(_, b)| b).collect();
        let stats = defrag.pass(&mut handed).unwrap();
        assert_eq!(stats.moves as usize, moved.len());
        // A copy out of a moved buffer (with COPY_SRC) in the very next submission.
        let (i, source) = moved
            .iter()
            .map(|&k| &buffers[k])
            .find(|(_, b)| b.usage().contains(BufferUsage::COPY_SRC))
            .unwrap();
        assert_eq!(source.memory().0, full);
        let target = device
            .create_buffer(
                &BufferDesc::new("defrag copy target", MIB, BufferUsage::COPY_DST)
                    .with_intent(MemoryIntent::Readback),
            )
            .unwrap();
        let commands = CommandContext::new(device, "defrag test").unwrap();
        let copy = commands.submit(&[], |rec| rec.copy_buffer(source, 0, &target, 0, MIB).unwrap()).unwrap();
        commands.wait(copy).unwrap();
        check_pattern(*i, &target);
        // A dispatch writing a moved storage buffer.
        let (_, written) = &buffers[moved[0]];
        let program = ComputeProgram::new(device, "defrag fill", &shaders::FILL, 1).unwrap();
        let set0 = program.descriptor_set(&[Binding::Buffer(written)]).unwrap();
        let count = 4096u32;
        let push: Vec<u8> = [count, 77].iter().flat_map(|v| v.to_le_bytes()).collect();
        device
            .submit_compute("defrag fill", |rec| {
                program.dispatch(rec, &set0, &push, [count / 64, 1, 1]).unwrap()
            })
            .unwrap();
        let words: Vec<u32> = written.read_pod(0, count as usize).unwrap();
        assert!(
            words.iter().enumerate().all(|(j, &w)| w == 77 + j as u32),
            "the dispatch wrote the new buffer"
        );
        drop((set0, program, target, commands, buffers));
    });
}

/// A full-screen quad for `shaders::QUADS_VERT` (xy, rgba per vertex) of one colour.
fn quad(colour: [f32; 4]) -> Vec<u8> {
    [(-1.0f32, -1.0f32), (1.0, -1.0), (1.0, 1.0), (-1.0, -1.0), (1.0, 1.0), (-1.0, 1.0)]
        .iter()
        .flat_map(|&(x, y)| [x, y, colour[0], colour[1], colour[2], colour[3]])
        .flat_map(f32::to_le_bytes)
        .collect()
}

#[test]
fn a_moved_vertex_buffer_is_drawn_in_the_next_frame() {
    use residency_core::sync::{Region, TrackerOptions, Use};
    use residency_vulkan::graphics::{GraphicsProgram, VertexAttribute};
    use residency_vulkan::tracking::ResourceTracker;
    with_gpu(|set| {
        let device = &set.devices()[0];
        let usage =
            BufferUsage::VERTEX | BufferUsage::STORAGE | BufferUsage::COPY_SRC | BufferUsage::COPY_DST;
        let (mut buffers, full, thinned) = fragmented_with(device, 2, |_| usage);
        // Each buffer of the heaps to be emptied holds a quad of its own colour.
        let colour = |i: usize| [(i % 7) as f32 / 8.0, (i % 5) as f32 / 6.0, 0.5, 1.0];
        for (i, b) in buffers.iter_mut() {
            if thinned.contains(&b.memory().0) {
                b.write(0, &quad(colour(*i))).unwrap();
            }
        }
        let before: Vec<Place> = buffers.iter().map(|(_, b)| place(b)).collect();
        // The application's own word on each buffer (VMA's pUserData) survives the move.
        for (i, b) in buffers.iter_mut() {
            b.set_user_data(1000 + *i as u64);
        }
        let mut defrag = Defragmenter::new(device, DefragDesc::default()).unwrap();
        let mut handed: Vec<&mut Buffer> = buffers.iter_mut().map(|(_, b)| b).collect();
        let stats = defrag.pass(&mut handed).unwrap();
        assert!(stats.moves > 0, "the pass moved buffers");
        assert!(buffers.iter().all(|(i, b)| b.user_data() == 1000 + *i as u64), "user data kept");
        // A buffer that moved: a new VkBuffer in the fullest heap.
        let k = (0..buffers.len()).find(|&k| thinned.contains(&before[k].1)).unwrap();
        let (i, vertices) = &buffers[k];
        assert_ne!(vertices.raw(), before[k].0, "a new VkBuffer");
        assert_eq!(vertices.memory().0, full, "in the fullest heap");
        // The next frame draws it.
        let program = GraphicsProgram::new(
            device,
            "defrag quad",
            &shaders::QUADS_VERT,
            &shaders::QUADS_FRAG,
            24,
            &[
                VertexAttribute { location: 0, format: vk::Format::R32G32_SFLOAT, offset: 0 },
                VertexAttribute { location: 1, format: vk::Format::R32G32B32A32_SFLOAT, offset: 8 },
            ],
            vk::Format::R8G8B8A8_UNORM,
            0,
        )
        .unwrap();
        let side = 16u32;
        let target_usage = ImageUsage::COLOR_ATTACHMENT | ImageUsage::COPY_SRC;
        let image = device
            .create_image(&ImageDesc::new_2d(
                "defrag target",
                Format::R8G8B8A8Unorm,
                side,
                side,
                target_usage,
            ))
            .unwrap();
        let view = image.create_view(0..1).unwrap();
        let pixels = device
            .create_buffer(
                &BufferDesc::new("defrag pixels", u64::from(side * side * 4), BufferUsage::COPY_DST)
                    .with_intent(MemoryIntent::Readback),
            )
            .unwrap();
        let mut tracker = ResourceTracker::new(TrackerOptions::default());
        let image_id = tracker.track_image(&image, vk::ImageLayout::UNDEFINED).unwrap();
        let pixels_id = tracker.track_buffer(&pixels).unwrap();
        let (index, family) = (device.index(), device.universal_queue().family());
        let commands = CommandContext::new(device, "defrag draw").unwrap();
        let frame = commands
            .submit(&[], |rec| {
                let mut batch = tracker.batch(index, family);
                batch.declare_discard(image_id, Region::Whole, Use::ColorAttachmentWrite).unwrap();
                let flush = batch.flush();
                tracker.record(rec, &flush.barriers).unwrap();
                program
                    .render(rec, &view, [side; 2], [0.0; 4], |pass| {
                        pass.bind_vertex_buffer(vertices, 0).unwrap();
                        pass.draw(6, 1).unwrap();
                    })
                    .unwrap();
                let mut batch = tracker.batch(index, family);
                batch
                    .declare(image_id, Region::Whole, Use::TransferSrc)
                    .unwrap()
                    .declare(pixels_id, Region::Whole, Use::TransferDst)
                    .unwrap();
                let flush = batch.flush();
                tracker.record(rec, &flush.barriers).unwrap();
                rec.copy_image_to_buffer(&image, vk::ImageLayout::TRANSFER_SRC_OPTIMAL, &pixels).unwrap();
                let mut batch = tracker.batch(index, family);
                batch.declare(pixels_id, Region::Whole, Use::HostRead).unwrap();
                let flush = batch.flush();
                tracker.record(rec, &flush.barriers).unwrap();
            })
            .unwrap();
        commands.wait(frame).unwrap();
        let mut out = vec![0u8; (side * side * 4) as usize];
        pixels.read(0, &mut out).unwrap();
        let want = colour(*i).map(|c| (c * 255.0).round() as i32);
        for px in out.chunks_exact(4) {
            for c in 0..4 {
                assert!(
                    (i32::from(px[c]) - want[c]).abs() <= 1,
                    "the moved buffer's quad: {px:?} vs {want:?}"
                );
            }
        }
        for id in [image_id, pixels_id] {
            tracker.untrack(index, id).unwrap();
        }
        drop((program, view, image, pixels, commands, buffers));
    });
}

#[test]
fn pinned_shared_and_unhanded_buffers_never_move_nor_does_their_heap() {
    with_gpu(|set| {
        let device = &set.devices()[0];
        let (mut buffers, _full, thinned) = fragmented(device, 3);
        // One buffer of a thinned heap that cannot move: its heap is then no source at all.
        let k = (0..buffers.len()).find(|&k| buffers[k].1.memory().0 == thinned[0]).unwrap();
        let places: Vec<Place> = buffers.iter().map(|(_, b)| place(b)).collect();
        let unmoved = |buffers: &[(usize, Buffer)]| {
            for j in (0..buffers.len()).filter(|&j| places[j].1 == thinned[0]) {
                assert_eq!(place(&buffers[j].1), places[j], "`{}` stays where it was", buffers[j].1.name());
            }
        };
        let mut defrag = Defragmenter::new(device, DefragDesc::default()).unwrap();
        // Pinned.
        buffers[k].1.set_movable(false);
        assert!(!buffers[k].1.is_movable());
        let mut handed: Vec<&mut Buffer> = buffers.iter_mut().map(|(_, b)| b).collect();
        let stats = defrag.pass(&mut handed).unwrap();
        assert!(stats.unmovable.contains(&(k, Unmovable::Pinned)), "{:?}", stats.unmovable);
        unmoved(&buffers);
        buffers[k].1.set_movable(true);
        // Held by a descriptor set (which names its VkBuffer).
        let program = ComputeProgram::new(device, "defrag shared", &shaders::FILL, 1).unwrap();
        let set0 = program.descriptor_set(&[Binding::Buffer(&buffers[k].1)]).unwrap();
        let mut handed: Vec<&mut Buffer> = buffers.iter_mut().map(|(_, b)| b).collect();
        let stats = defrag.pass(&mut handed).unwrap();
        assert!(stats.unmovable.contains(&(k, Unmovable::Shared)), "{:?}", stats.unmovable);
        unmoved(&buffers);
        drop(set0);
        // Not handed to the pass.
        let mut handed: Vec<&mut Buffer> =
            buffers.iter_mut().enumerate().filter(|(j, _)| *j != k).map(|(_, (_, b))| b).collect();
        let stats = defrag.pass(&mut handed).unwrap();
        assert!(stats.unmovable.is_empty(), "{:?}", stats.unmovable);
        unmoved(&buffers);
        // Handed over and movable: the heap empties.
        let mut handed: Vec<&mut Buffer> = buffers.iter_mut().map(|(_, b)| b).collect();
        let stats = defrag.pass(&mut handed).unwrap();
        assert!(stats.heaps_emptied >= 1 && buffers[k].1.memory().0 != thinned[0], "{stats:?}");
        device.wait_submitted().unwrap();
        for (i, b) in &buffers {
            check_pattern(*i, b);
        }
        drop((program, buffers));
    });
}

#[test]
fn out_of_memory_at_each_creation_of_a_pass_leaves_everything_where_it_was() {
    with_gpu(|set| {
        let device = &set.devices()[0];
        let (mut buffers, _full, _thinned) = fragmented(device, 2);
        let places: Vec<Place> = buffers.iter().map(|(_, b)| place(b)).collect();
        let objects = || device.ledger().live_objects().len();
        let used = || {
            device
                .memory_report()
                .memory_types
                .iter()
                .flat_map(|t| &t.blocks)
                .map(|b| b.ranges.len())
                .sum::<usize>()
        };
        // The defragmenter's own objects (its timestamps' query pool) are not the pass's.
        let mut defrag = Defragmenter::new(device, DefragDesc::default()).unwrap();
        let (objects_before, used_before) = (objects(), used());
        let mut failures = 0;
        for skip in 0u64.. {
            device.ledger().inject_fault(FaultSite::CreateResource, skip, InjectedFault::OutOfDeviceMemory);
            let calls = device.ledger().site_calls(FaultSite::CreateResource);
            let mut handed: Vec<&mut Buffer> = buffers.iter_mut().map(|(_, b)| b).collect();
            let result = defrag.pass(&mut handed);
            let made = device.ledger().site_calls(FaultSite::CreateResource) - calls;
            device.ledger().clear_faults();
            if made <= skip {
                // The pass made fewer objects than `skip`: the fault never fired, so it moved.
                assert!(result.is_ok());
                break;
            }
            failures += 1;
            let err = result.unwrap_err();
            assert!(matches!(err, DefragError::Memory(MemoryError::OutOfDeviceMemory { .. })), "{err}");
            let now: Vec<Place> = buffers.iter().map(|(_, b)| place(b)).collect();
            assert_eq!(now, places, "call {skip} failed: nothing moved");
            assert_eq!(
                (objects(), used()),
                (objects_before, used_before),
                "call {skip}: nothing left behind"
            );
        }
        assert!(failures >= 2, "the pass creates buffers and aliases");
        // The last pass, with no fault left to fire, moved.
        device.wait_submitted().unwrap();
        for (i, b) in &buffers {
            check_pattern(*i, b);
        }
        drop(buffers);
    });
}

#[test]
fn repacking_drains_a_half_empty_heap_into_a_right_sized_heap_and_falls_back_when_out_of_memory() {
    with_gpu(|set| {
        let device = &set.devices()[0];
        // 1 MiB buffers until a second heap appears; that one goes (its heap is the kept empty
        // one) and the first heap is thinned to every other buffer: one heap, half full, holes of
        // 1 MiB, no other heap to empty it into.
        let mut all: Vec<(usize, Buffer)> = Vec::new();
        for i in 0..400 {
            let usage = BufferUsage::STORAGE | BufferUsage::COPY_SRC | BufferUsage::COPY_DST;
            let desc =
                BufferDesc::new(format!("repack buffer {i}"), MIB, usage).with_intent(MemoryIntent::Upload);
            let mut b = device.create_buffer(&desc).unwrap();
            write_pattern(i, &mut b);
            let second = all.first().is_some_and(|(_, f)| f.memory().0 != b.memory().0);
            all.push((i, b));
            if second {
                all.pop();
                break;
            }
        }
        let first = all[0].1.memory().0;
        let heap_size = heap_bytes_in_use(device);
        let general_blocks =
            || device.memory_report().blocks().filter(|(_, pool, b)| pool.is_none() && !b.dedicated).count();
        let blocks_before = general_blocks();
        all.retain(|(i, _)| i % 2 == 0);
        let live = all.len() as u64 * MIB;
        assert!(heap_size >= 2 * live - MIB, "the heap is about half full: {heap_size} B for {live} B");
        let places: Vec<Place> = all.iter().map(|(_, b)| place(b)).collect();
        let mut defrag = Defragmenter::new(device, DefragDesc::default()).unwrap();
        let objects = || device.ledger().live_objects().len();
        let objects_before = objects();

        // Out of memory for the new heap: the pass moves only into existing holes (here there
        // are none: nothing moves) and says so; no heap is left behind.
        device.ledger().inject_fault(FaultSite::AllocateMemory, 0, InjectedFault::OutOfDeviceMemory);
        let mut handed: Vec<&mut Buffer> = all.iter_mut().map(|(_, b)| b).collect();
        let stats = defrag.pass(&mut handed).unwrap();
        device.ledger().clear_faults();
        assert!(stats.repack_out_of_memory && stats.moves == 0 && stats.heaps_created == 0, "{stats:?}");
        assert_eq!(all.iter().map(|(_, b)| place(b)).collect::<Vec<_>>(), places, "nothing moved");
        assert_eq!(objects(), objects_before, "no heap made");

        // Without repacking nothing can move (no other heap holds anything).
        let mut plain = Defragmenter::new(device, DefragDesc::default().with_repack(None)).unwrap();
        let mut handed: Vec<&mut Buffer> = all.iter_mut().map(|(_, b)| b).collect();
        assert_eq!(plain.pass(&mut handed).unwrap().moves, 0);

        let mut handed: Vec<&mut Buffer> = all.iter_mut().map(|(_, b)| b).collect();
        let stats = defrag.pass(&mut handed).unwrap();
        assert_eq!(stats.moves as usize, all.len(), "{stats:?}");
        assert_eq!((stats.heaps_emptied, stats.heaps_created), (1, 1), "{stats:?}");
        assert_eq!(stats.heap_bytes_created, live.next_multiple_of(2 * MIB), "right-sized, in whole 2 MiB");
        device.wait_submitted().unwrap();
        assert_eq!(device.pending_destruction(), 0);
        for (i, b) in &all {
            assert_ne!(b.memory().0, first, "`{}` left the drained heap", b.name());
            check_pattern(*i, b);
        }
        // The drained heap was freed (not kept as a second empty heap): as many heaps as before.
        assert_eq!(general_blocks(), blocks_before, "the drained heap is freed, the new one holds all");
        assert_eq!(heaps_in_use(device), 1);
        let bytes = heap_bytes_in_use(device);
        assert!(bytes as f64 <= 1.10 * live as f64, "{bytes} B of heaps for {live} B live");
        // A pass over the repacked heap moves nothing (it is full).
        let mut handed: Vec<&mut Buffer> = all.iter_mut().map(|(_, b)| b).collect();
        assert_eq!(defrag.pass(&mut handed).unwrap().moves, 0);
        // The empty heap the allocator keeps for reuse goes on request; the buffers stay.
        assert!(device.release_empty_heaps() > 0);
        assert_eq!(general_blocks(), 1);
        for (i, b) in &all {
            check_pattern(*i, b);
        }
        drop(all);
    });
}

#[test]
fn a_failed_submission_during_a_pass_leaves_everything_where_it_was() {
    with_gpu(|set| {
        let device = &set.devices()[0];
        let (mut buffers, _full, _thinned) = fragmented(device, 2);
        let places: Vec<Place> = buffers.iter().map(|(_, b)| place(b)).collect();
        let mut defrag = Defragmenter::new(device, DefragDesc::default()).unwrap();
        let objects_before = device.ledger().live_objects().len();
        // Out of memory at the copy's submission, and the device lost there (sticky until the
        // faults are cleared: the fault injection's model of a lost device).
        for fault in [InjectedFault::OutOfDeviceMemory, InjectedFault::DeviceLost] {
            device.ledger().inject_fault(FaultSite::QueueSubmit, 0, fault);
            let mut handed: Vec<&mut Buffer> = buffers.iter_mut().map(|(_, b)| b).collect();
            let err = defrag.pass(&mut handed).unwrap_err();
            if fault == InjectedFault::DeviceLost {
                // Lost stays lost: the next pass fails too, fast, with the same typed error.
                let mut handed: Vec<&mut Buffer> = buffers.iter_mut().map(|(_, b)| b).collect();
                let again = defrag.pass(&mut handed).unwrap_err();
                assert!(matches!(again, DefragError::Vulkan(VulkanError::DeviceLost { .. })), "{again}");
            }
            device.ledger().clear_faults();
            match fault {
                InjectedFault::DeviceLost => {
                    assert!(matches!(err, DefragError::Vulkan(VulkanError::DeviceLost { .. })), "{err}")
                }
                _ => assert!(matches!(err, DefragError::Vulkan(_)), "{err}"),
            }
            let now: Vec<Place> = buffers.iter().map(|(_, b)| place(b)).collect();
            assert_eq!(now, places, "{fault:?}: nothing moved");
            assert_eq!(device.ledger().live_objects().len(), objects_before, "{fault:?}: nothing left");
        }
        let mut handed: Vec<&mut Buffer> = buffers.iter_mut().map(|(_, b)| b).collect();
        assert!(defrag.pass(&mut handed).unwrap().moves > 0, "the same pass succeeds once the fault is gone");
        device.wait_submitted().unwrap();
        for (i, b) in &buffers {
            check_pattern(*i, b);
        }
        drop(buffers);
    });
}

#[test]
fn a_buffer_used_by_a_pending_frame_moves_and_its_old_memory_waits_for_the_signal() {
    with_gpu(|set| {
        let device = &set.devices()[0];
        let (mut buffers, _full, thinned) = fragmented(device, 2);
        let frame = device.create_timeline("defrag frame").unwrap();
        let value = {
            // SAFETY: a timeline semaphore of this device.
            unsafe { device.raw().get_semaphore_counter_value(frame.raw()) }.unwrap() + 1
        };
        let moving: Vec<usize> =
            (0..buffers.len()).filter(|&k| thinned.contains(&buffers[k].1.memory().0)).collect();
        for &k in &moving {
            buffers[k].1.used_until(frame.at(value)).unwrap();
        }
        // SAFETY: the test signals the frame from the host below (nothing it waits for first
        // waits for the frame).
        unsafe { frame.signal_submitted(value) };
        let names: Vec<String> = moving.iter().map(|&k| buffers[k].1.name().to_owned()).collect();
        let count =
            |name: &str| device.ledger().live_objects().iter().filter(|o| o.name.as_ref() == name).count();
        let mut defrag = Defragmenter::new(device, DefragDesc::default()).unwrap();
        let mut handed: Vec<&mut Buffer> = buffers.iter_mut().map(|(_, b)| b).collect();
        let stats = defrag.pass(&mut handed).unwrap();
        assert_eq!(stats.moves as usize, moving.len(), "{stats:?}");
        // The frame has not signalled: the copy waits for it on the GPU, and the old buffers and
        // ranges wait in the retire queue.
        device.maintain();
        assert!(device.pending_destruction() >= moving.len());
        for name in &names {
            assert_eq!(count(name), 2, "`{name}`: the old buffer is alive beside the new one");
        }
        assert_eq!(heaps_in_use(device), 1 + thinned.len(), "the old ranges still hold their heaps");
        let signal = vk::SemaphoreSignalInfo::default().semaphore(frame.raw()).value(value);
        // SAFETY: the renderer's timeline, signalled once to a greater value; nothing else signals it.
        unsafe { device.raw().signal_semaphore(&signal) }.unwrap();
        device.wait_submitted().unwrap();
        device.maintain();
        assert_eq!(device.pending_destruction(), 0);
        assert_eq!(heaps_in_use(device), 1, "the emptied heaps hold nothing now");
        for name in &names {
            assert_eq!(count(name), 1, "`{name}`: the old buffer is gone after the signal");
        }
        for (i, b) in &buffers {
            check_pattern(*i, b);
        }
        drop(buffers);
    });
}

/// A pool's buffers of 64 KiB over 1 MiB pages: pages filled, the first page thinned to every
/// other buffer, the others to two buffers each. Returns the buffers with their pattern index and
/// the first page's memory.
fn fragmented_pool(
    pool: &BufferPool,
    usage: Option<BufferUsage>,
) -> (Vec<(usize, Buffer)>, vk::DeviceMemory) {
    let mut all = Vec::new();
    for i in 0..40 {
        let mut init = BufferInit::new(format!("{} buffer {i}", pool.desc().name), 64 << 10);
        if let Some(usage) = usage {
            // Every third buffer lacks the copy usages: the pass copies through aliases then.
            init = init.with_usage(if i % 3 == 0 {
                usage
            } else {
                usage | BufferUsage::COPY_SRC | BufferUsage::COPY_DST
            });
        }
        let mut b = pool.init_buffer(&init).unwrap();
        write_pattern(500 + i, &mut b);
        all.push((500 + i, b));
    }
    let first = all[0].1.memory().0;
    assert!(all.iter().any(|(_, b)| b.memory().0 != first), "the scenario needs two pages");
    let mut seen: HashMap<vk::DeviceMemory, usize> = HashMap::new();
    all.retain(|(_, b)| {
        let n = seen.entry(b.memory().0).or_default();
        *n += 1;
        if b.memory().0 == first {
            *n % 2 == 1
        } else {
            *n <= 2
        }
    });
    (all, first)
}

fn pool_pass_moves_within_the_pool(pool: &BufferPool, usage: Option<BufferUsage>) {
    let device = pool.device();
    let (mut buffers, first) = fragmented_pool(pool, usage);
    let pages_before = pool.stats().pages;
    let live = pool.stats().buffers;
    let before: Vec<Place> = buffers.iter().map(|(_, b)| place(b)).collect();
    for (i, b) in &mut buffers {
        b.set_user_data(7000 + *i as u64);
    }
    let kept = |b: &Buffer| {
        (b.name().to_owned(), b.size(), b.usage(), b.resource_id(), b.user_data(), b.is_movable())
    };
    let kept_before: Vec<_> = buffers.iter().map(|(_, b)| kept(b)).collect();
    let mut defrag = Defragmenter::new(device, DefragDesc::default()).unwrap();
    let mut handed: Vec<&mut Buffer> = buffers.iter_mut().map(|(_, b)| b).collect();
    let stats = defrag.pass(&mut handed).unwrap();
    assert!(stats.unmovable.is_empty(), "{:?}", stats.unmovable);
    // A move keeps the name, size, usage, state-tracking id, user data and pin of each buffer.
    assert_eq!(buffers.iter().map(|(_, b)| kept(b)).collect::<Vec<_>>(), kept_before);
    let thinned = before.iter().filter(|p| p.1 != first).count();
    assert_eq!(stats.moves as usize, thinned, "{stats:?}");
    assert_eq!(stats.heaps_emptied as usize, pages_before - 1);
    for ((_, b), old) in buffers.iter().zip(&before) {
        assert_eq!(b.memory().0, first, "`{}` is on the first page", b.name());
        if old.1 != first {
            assert_eq!(
                b.placement(),
                if usage.is_some() { BufferPlacement::Placed } else { BufferPlacement::Range }
            );
            if usage.is_none() {
                // A range of the first page's buffer, at its new offset.
                assert_eq!((b.raw(), b.offset()), (buffers[0].1.raw(), b.memory().1));
            }
        } else {
            assert_eq!(place(b), *old);
        }
    }
    assert_eq!(pool.stats().buffers, live, "the pool counts each moved buffer once");
    device.wait_submitted().unwrap();
    pool.check_invariants().unwrap();
    // Emptied pages take no new buffer and are released once their old ranges retire, whatever
    // the pool's keep-one-empty policy says: only the first page is left.
    assert_eq!(pool.stats().pages, 1, "emptied pages are released");
    for (i, b) in &buffers {
        check_pattern(*i, b);
    }
    // A moved buffer is still the pool's: the pool takes each back.
    for (_, b) in buffers {
        assert!(pool.free_buffer(b).is_ok(), "a moved buffer stays its pool's");
    }
}

#[test]
fn buffers_of_a_pool_with_unknown_flags_move_between_its_pages() {
    with_gpu(|set| {
        let device = &set.devices()[0];
        let pool = BufferPool::new(
            Arc::clone(device),
            BufferPoolDesc::new("defrag placed pool", BufferPoolUsage::Unknown)
                .with_memory(MemoryIntent::Upload)
                .with_page_size(MIB),
        )
        .unwrap();
        pool_pass_moves_within_the_pool(&pool, Some(BufferUsage::STORAGE));
    });
}

#[test]
fn ranges_of_a_known_flags_pool_move_between_its_page_buffers() {
    with_gpu(|set| {
        let device = &set.devices()[0];
        // Without copy usages on the pages: the pass copies through aliases over the ranges.
        let pool = BufferPool::new(
            Arc::clone(device),
            BufferPoolDesc::new("defrag range pool", BufferPoolUsage::Known(BufferUsage::STORAGE))
                .with_memory(MemoryIntent::Upload)
                .with_page_size(MIB),
        )
        .unwrap();
        pool_pass_moves_within_the_pool(&pool, None);
    });
}

const SIDE: u32 = 512;

fn texels(i: usize) -> Vec<u8> {
    (0..(SIDE * SIDE) as usize).flat_map(|j| word(i, j).to_le_bytes()).collect()
}

#[test]
fn optimal_images_move_with_their_contents_and_layouts() {
    with_gpu(|set| {
        let device = &set.devices()[0];
        let usage = ImageUsage::COPY_SRC | ImageUsage::COPY_DST | ImageUsage::SAMPLED;
        // 1.25 MiB images (two mips) until a second heap holds three (the heap kept empty by an
        // earlier test may be large: up to a 256 MiB page).
        let mut all: Vec<(usize, Image)> = Vec::new();
        for i in 0..600 {
            let desc =
                ImageDesc::new_2d(format!("defrag image {i}"), Format::R8G8B8A8Unorm, SIDE, SIDE, usage)
                    .with_mip_levels(2);
            all.push((i, device.create_image(&desc).unwrap()));
            let mut per: HashMap<vk::DeviceMemory, usize> = HashMap::new();
            for (_, image) in &all {
                *per.entry(image.memory().0).or_default() += 1;
            }
            if per.len() >= 2 && per[&all.last().unwrap().1.memory().0] >= 3 {
                break;
            }
        }
        let mut per: HashMap<vk::DeviceMemory, usize> = HashMap::new();
        for (_, image) in &all {
            *per.entry(image.memory().0).or_default() += 1;
        }
        let full = *per.iter().max_by_key(|(m, n)| (**n, format!("{m:?}"))).unwrap().0;
        let mut seen: HashMap<vk::DeviceMemory, usize> = HashMap::new();
        all.retain(|(_, image)| {
            let n = seen.entry(image.memory().0).or_default();
            *n += 1;
            if image.memory().0 == full {
                *n % 2 == 1
            } else {
                *n <= 3
            }
        });
        assert!(all.iter().any(|(_, image)| image.memory().0 != full), "the scenario needs two heaps");
        // Every image in GENERAL, but the last one, left UNDEFINED; mip 0 uploaded into those that
        // will move and the first three of the fullest heap (the others' texels are undefined).
        let (last, rest) = all.split_last().unwrap();
        let defined: Vec<&Image> = rest.iter().map(|(_, image)| image).collect();
        device.discard_to_general(&defined).unwrap();
        let uploader = Uploader::new(device, "defrag images", 4 * MIB).unwrap();
        let mut uploaded = Vec::new();
        for (k, (i, image)) in rest.iter().enumerate() {
            if image.memory().0 == full && uploaded.len() >= 3 {
                continue;
            }
            uploader.write_image(&ImageRegion::new(image, 0, [0; 3], [SIDE, SIDE, 1]), &texels(*i)).unwrap();
            uploader.flush().unwrap();
            uploaded.push(k);
        }
        drop(defined);
        assert_eq!(last.1.layout(0, 0), Some(vk::ImageLayout::UNDEFINED));
        let places: Vec<(vk::Image, vk::DeviceMemory, u64)> =
            all.iter().map(|(_, image)| (image.raw(), image.memory().0, image.memory().1)).collect();
        let thinned = places.iter().filter(|p| p.1 != full).count();
        for (i, image) in &mut all {
            image.set_user_data(9000 + *i as u64);
        }
        let ids: Vec<_> = all.iter().map(|(_, image)| image.resource_id()).collect();
        // A view holds one of the fullest heap's images: it stays, and so its heap is no source
        // (else the fullest heap, all movable, could empty into the larger, emptier one).
        let k = places.iter().position(|p| p.1 == full).unwrap();
        let view = all[k].1.create_view(0..1).unwrap();
        let mut defrag = Defragmenter::new(device, DefragDesc::default()).unwrap();
        // Out of memory creating the second new image, then a failed submission: nothing moves,
        // no layout changes, nothing is left behind.
        let objects = device.ledger().live_objects().len();
        for (site, skip) in [(FaultSite::CreateResource, 1), (FaultSite::QueueSubmit, 0)] {
            device.ledger().inject_fault(site, skip, InjectedFault::OutOfDeviceMemory);
            let mut handed: Vec<&mut Image> = all.iter_mut().map(|(_, image)| image).collect();
            let failed = defrag.pass_with_images(&mut [], &mut handed);
            device.ledger().clear_faults();
            assert!(failed.is_err(), "{site:?}");
            let now: Vec<_> =
                all.iter().map(|(_, image)| (image.raw(), image.memory().0, image.memory().1)).collect();
            assert_eq!(now, places, "{site:?}: nothing moved");
            assert_eq!(device.ledger().live_objects().len(), objects, "{site:?}: nothing left behind");
            assert_eq!(all[0].1.layout(0, 0), Some(vk::ImageLayout::GENERAL), "{site:?}: layouts unchanged");
        }
        let mut handed: Vec<&mut Image> = all.iter_mut().map(|(_, image)| image).collect();
        let stats = defrag.pass_with_images(&mut [], &mut handed).unwrap();
        assert_eq!(stats.unmovable_images, vec![(k, Unmovable::Shared)]);
        assert_eq!(stats.moves as usize, thinned, "{stats:?}");
        assert!(stats.heaps_emptied >= 1, "{stats:?}");
        assert_eq!(
            (all[k].1.raw(), all[k].1.memory().0, all[k].1.memory().1),
            places[k],
            "the viewed image stays"
        );
        drop(view);
        for (((i, image), old), id) in all.iter().zip(&places).zip(&ids) {
            assert_eq!(image.memory().0, full, "`{}` is in the fullest heap", image.name());
            assert_eq!(image.resource_id(), *id, "`{}` keeps its state-tracking id", image.name());
            assert_eq!(image.user_data(), 9000 + *i as u64, "`{}` keeps its user data", image.name());
            if old.1 != full {
                assert_ne!(image.raw(), old.0, "`{}` has a new VkImage", image.name());
            }
        }
        device.wait_submitted().unwrap();
        let (last, rest) = all.split_last().unwrap();
        assert_eq!(last.1.layout(0, 0), Some(vk::ImageLayout::UNDEFINED), "UNDEFINED stays UNDEFINED");
        for (k, (i, image)) in rest.iter().enumerate() {
            assert_eq!(image.layout(0, 0), Some(vk::ImageLayout::GENERAL), "`{}` mip 0", image.name());
            assert_eq!(image.layout(1, 0), Some(vk::ImageLayout::GENERAL), "`{}` mip 1", image.name());
            if uploaded.contains(&k) {
                let back = device.read_image(image, vk::ImageLayout::GENERAL).unwrap();
                assert!(back == texels(*i), "`{}`: contents changed", image.name());
            }
        }
        drop((uploader, all));
    });
}

#[test]
fn resources_a_pass_cannot_move_are_listed_with_the_reason_and_stay() {
    with_gpu(|set| {
        let (device, other) = (&set.devices()[0], &set.devices()[1]);
        let desc = |name: &str| BufferDesc::new(name, 4096, BufferUsage::STORAGE);
        let mut committed = device.create_buffer(&desc("defrag committed").committed()).unwrap();
        let mut framed = device.create_buffer(&desc("defrag frame-counted")).unwrap();
        framed.used_until(device.frames_from_now(2)).unwrap();
        let mut foreign = other.create_buffer(&desc("defrag other device")).unwrap();
        let mut pinned = device.create_buffer(&desc("defrag pinned")).unwrap();
        pinned.set_movable(false);
        let usage = ImageUsage::SAMPLED | ImageUsage::COPY_DST;
        let mut no_copy = device
            .create_image(&ImageDesc::new_2d("defrag no copy usage", Format::R8G8B8A8Unorm, 16, 16, usage))
            .unwrap();
        let usage = ImageUsage::SAMPLED | ImageUsage::COPY_SRC | ImageUsage::COPY_DST;
        let mut own_image = device
            .create_image(
                &ImageDesc::new_2d("defrag committed image", Format::R8G8B8A8Unorm, 16, 16, usage)
                    .committed(),
            )
            .unwrap();
        let places: Vec<Place> = [&committed, &framed, &foreign, &pinned].iter().map(|b| place(b)).collect();
        let mut defrag = Defragmenter::new(device, DefragDesc::default()).unwrap();
        let stats = defrag
            .pass_with_images(
                &mut [&mut committed, &mut framed, &mut foreign, &mut pinned],
                &mut [&mut no_copy, &mut own_image],
            )
            .unwrap();
        assert_eq!(
            stats.unmovable,
            vec![
                (0, Unmovable::NotPlaced),
                (1, Unmovable::FrameCountedUse),
                (2, Unmovable::OtherDevice),
                (3, Unmovable::Pinned)
            ]
        );
        assert_eq!(stats.unmovable_images, vec![(0, Unmovable::NoCopyUsage), (1, Unmovable::NotPlaced)]);
        assert_eq!((stats.moves, stats.bytes_moved, stats.heaps_emptied), (0, 0, 0));
        assert!(stats.submission.is_none(), "nothing to copy, nothing submitted");
        let now: Vec<Place> = [&committed, &framed, &foreign, &pinned].iter().map(|b| place(b)).collect();
        assert_eq!(now, places);
        drop((committed, framed, foreign, pinned, no_copy, own_image));
        // The frame-counted use ends two frames from now.
        device.advance_frame();
        device.advance_frame();
    });
}
