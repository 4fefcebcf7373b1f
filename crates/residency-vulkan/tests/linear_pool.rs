//! Linear pools (VMA's linear algorithm) on a real device under synchronization validation: a
//! ring of per-frame buffers that wraps while the GPU reads them, a stack, a double stack, and
//! typed errors when a request does not fit.

use residency_core::allocator::{LinearError, LinearMode};
use residency_core::usage::BufferUsage;
use residency_vulkan::ash::vk;
use residency_vulkan::recording::MemoryDependency;
use residency_vulkan::testing::with_gpu;
use residency_vulkan::{BufferDesc, BufferInit, CommandContext, LinearPool, LinearPoolDesc, MemoryError};
use std::sync::Arc;

fn init(name: String, size: u64) -> BufferInit {
    BufferInit::new(name, size).with_usage(BufferUsage::COPY_SRC | BufferUsage::UNIFORM)
}

#[test]
fn a_ring_of_per_frame_buffers_wraps_while_the_gpu_reads_them() {
    with_gpu(|set| {
        let device = &set.devices()[0];
        let objects = device.ledger().live_objects().len();
        let ring = LinearPool::new(Arc::clone(device), LinearPoolDesc::new("frame ring", 256 << 10)).unwrap();
        assert_eq!(ring.desc().mode, LinearMode::Ring);
        let frames = 24u64;
        let per_frame = 3u64;
        let size = 20_000u64;
        let dst_usage = BufferUsage::COPY_DST | BufferUsage::COPY_SRC;
        let results = device
            .create_buffer(
                &BufferDesc::new("per-frame results", frames * per_frame * size, dst_usage).committed(),
            )
            .unwrap();
        let context = CommandContext::new(device, "ring frames").unwrap();
        let mut offsets = Vec::new();
        let mut in_flight = std::collections::VecDeque::new();
        for frame in 0..frames {
            // Two frames in flight: wait for the one before the last before reusing its space.
            if in_flight.len() == 2 {
                context.wait(in_flight.pop_front().unwrap()).unwrap();
            }
            let mut buffers = Vec::new();
            for i in 0..per_frame {
                let mut b = ring.create_buffer(&init(format!("frame {frame} constants {i}"), size)).unwrap();
                assert!(ring.owns(&b));
                let floor = device.limits().min_uniform_buffer_offset_alignment;
                assert_eq!(b.memory().1 % floor, 0, "uniform buffers keep the offset alignment floor");
                let tag = (frame * per_frame + i) as u8;
                b.write(0, &vec![tag; size as usize]).unwrap();
                offsets.push(b.memory().1);
                buffers.push(b);
            }
            let submission = context
                .submit(&[], |rec| {
                    for (i, b) in buffers.iter().enumerate() {
                        let at = (frame * per_frame + i as u64) * size;
                        rec.copy_buffer(b, 0, &results, at, size).unwrap();
                    }
                    rec.memory_barrier(MemoryDependency {
                        src_stages: vk::PipelineStageFlags2::COPY,
                        src_access: vk::AccessFlags2::TRANSFER_WRITE,
                        dst_stages: vk::PipelineStageFlags2::COPY,
                        dst_access: vk::AccessFlags2::TRANSFER_READ,
                    })
                    .unwrap();
                })
                .unwrap();
            // Dropped right after the submission: their ranges return once it has run.
            drop(buffers);
            in_flight.push_back(submission);
            ring.check_invariants().unwrap();
        }
        for s in in_flight {
            context.wait(s).unwrap();
        }
        // The ring wrapped: an offset went back towards the start, several times.
        let wraps = offsets.windows(2).filter(|w| w[1] < w[0]).count();
        assert!(wraps >= 3, "the ring wrapped {wraps} times: {offsets:?}");
        let back = device.read_back(&results, 0, frames * per_frame * size).unwrap();
        for (n, chunk) in back.chunks(size as usize).enumerate() {
            assert!(chunk.iter().all(|&v| v == n as u8), "frame buffer {n} arrived intact");
        }
        device.wait_submitted().unwrap();
        let stats = ring.stats();
        assert_eq!((stats.buffers, stats.used_bytes), (0, 0));
        assert_eq!(stats.largest_free, stats.capacity, "every range came back after the GPU ran");
        drop((ring, results, context));
        device.wait_submitted().unwrap();
        // Nothing of the pool is left (the general allocator keeps one empty heap of its own,
        // from the read-back's staging).
        let live = device.ledger().live_objects();
        let ours: Vec<_> = live.iter().filter(|o| o.name.contains("frame")).collect();
        assert!(ours.is_empty(), "nothing leaked: {ours:?}");
        assert!(live.len() <= objects + 1, "{live:?}");
    });
}

#[test]
fn a_ring_refuses_what_does_not_fit_while_the_gpu_holds_it_and_changes_nothing() {
    with_gpu(|set| {
        let device = &set.devices()[0];
        let ring = LinearPool::new(Arc::clone(device), LinearPoolDesc::new("small ring", 64 << 10)).unwrap();
        let a = ring.create_buffer(&init("a".into(), 40 << 10)).unwrap();
        let before = ring.stats();
        let err = ring.create_buffer(&init("b".into(), 40 << 10)).unwrap_err();
        assert!(matches!(err, MemoryError::Linear { source: LinearError::OutOfSpace { .. }, .. }), "{err}");
        assert_eq!(ring.stats(), before, "a refused request allocated nothing");
        let err = ring.create_buffer_upper(&init("upper".into(), 256)).unwrap_err();
        assert!(matches!(err, MemoryError::Linear { source: LinearError::UpperNeedsDoubleStack { .. }, .. }));
        let err = ring.create_buffer(&BufferInit::new("no usage", 256)).unwrap_err();
        assert!(matches!(err, MemoryError::Unsatisfiable { .. }), "{err}");
        // A use declared on the first buffer holds its range after the drop.
        let timeline = device.create_timeline("frame fence").unwrap();
        a.used_until(timeline.at(1)).unwrap();
        drop(a);
        assert!(ring.create_buffer(&init("still held".into(), 40 << 10)).is_err(), "the GPU still holds it");
        let info = vk::SemaphoreSignalInfo::default().semaphore(timeline.raw()).value(1);
        // SAFETY: a timeline semaphore of this device, signalled once, upwards.
        unsafe { device.raw().signal_semaphore(&info) }.unwrap();
        device.maintain();
        let b = ring.create_buffer(&init("after the signal".into(), 40 << 10)).unwrap();
        drop(b);
    });
}

#[test]
fn stacks_and_double_stacks_return_space_in_order() {
    with_gpu(|set| {
        let device = &set.devices()[0];
        let stack = LinearPool::new(
            Arc::clone(device),
            LinearPoolDesc::new("stack", 64 << 10).with_mode(LinearMode::Stack),
        )
        .unwrap();
        let low = stack.create_buffer(&init("low".into(), 1000)).unwrap();
        let high = stack.create_buffer(&init("high".into(), 1000)).unwrap();
        assert!(high.memory().1 > low.memory().1);
        // An interior free returns its space only once everything above it is gone.
        let used = stack.stats().used_bytes;
        drop(low);
        device.wait_submitted().unwrap();
        assert!(stack.stats().pending_bytes > 0 && stack.stats().used_bytes < used);
        drop(high);
        device.wait_submitted().unwrap();
        assert_eq!(stack.stats().largest_free, stack.stats().capacity);

        let double = LinearPool::new(
            Arc::clone(device),
            LinearPoolDesc::new("double stack", 64 << 10).with_mode(LinearMode::DoubleStack),
        )
        .unwrap();
        let mut down = double.create_buffer(&init("lower".into(), 30 << 10)).unwrap();
        let mut up = double.create_buffer_upper(&init("upper".into(), 30 << 10)).unwrap();
        assert!(up.memory().1 >= down.memory().1 + (30 << 10), "the stacks do not overlap");
        down.write(0, &[1; 64]).unwrap();
        up.write(0, &[2; 64]).unwrap();
        let mut back = [0; 64];
        down.read(0, &mut back).unwrap();
        assert_eq!(back, [1; 64]);
        let err = double.create_buffer(&init("in the way".into(), 8 << 10)).unwrap_err();
        assert!(matches!(err, MemoryError::Linear { .. }), "{err}");
        double.check_invariants().unwrap();
    });
}
