//! Tokens are bound to their issuer, re-entrant calls are refused, and a wait nothing can end is
//! refused where it would be made (issue #29, causes 1 and 5). On main 88745c0: a context that
//! never submitted panicked on another context's submission (index out of bounds); one that had
//! submitted compared serials every context numbers from 1, took its own signalled fence for the
//! other's, marked the device's work complete, and the next drop destroyed a buffer a gated
//! dispatch still wrote (VUID-vkDestroyBuffer-buffer-00922, then SIGSEGV); a submit from inside
//! its own recording closure, or while holding the queue lock, deadlocked; a submission waiting
//! for a timeline value nothing signals hung its context's drop and the set's teardown.
//!
//! Every test runs under synchronization validation (a message fails it), checks for leaks at
//! the end, and runs its body under a watchdog: a hang fails the test instead of stalling CI.

#[path = "common/watchdog.rs"]
mod watchdog;
use ash::vk;
use residency_core::device_mask::{DeviceIndex, DeviceMask};
use residency_core::memory::MemoryIntent;
use residency_core::usage::BufferUsage;
use residency_vulkan::compute::{Binding, ComputeProgram};
use residency_vulkan::multi::work::{MultiSubmitter, WorkError};
use residency_vulkan::shaders;
use residency_vulkan::testing::with_gpu;
use residency_vulkan::{ash, Buffer, BufferDesc, CommandContext, Device, Timeline, VulkanError};

const N: u32 = 256;

/// Runs `body` under the shared watchdog (`common/watchdog.rs`): a hang fails the test.
fn watched<R: Send + 'static>(body: impl FnOnce() -> R + Send + 'static) -> R {
    watchdog::within("misuse tokens", body)
}

fn push(count: u32, value: u32) -> Vec<u8> {
    [count, value].iter().flat_map(|v| v.to_le_bytes()).collect()
}

fn storage(device: &Device, name: &str) -> Buffer {
    let usage = BufferUsage::STORAGE | BufferUsage::COPY_SRC | BufferUsage::COPY_DST;
    device
        .create_buffer(&BufferDesc::new(name, u64::from(N) * 4, usage).with_intent(MemoryIntent::Readback))
        .unwrap()
}

fn live(device: &Device, name: &str) -> bool {
    device.ledger().live_objects().iter().any(|o| &*o.name == name)
}

fn open(device: &Device, gate: &Timeline) {
    let info = vk::SemaphoreSignalInfo::default().semaphore(gate.raw()).value(1);
    // SAFETY: a timeline semaphore of this device, signalled once, from 0 to 1.
    unsafe { device.raw().signal_semaphore(&info) }.unwrap();
}

fn words(buffer: &Buffer) -> Vec<u32> {
    let mut out = vec![0u8; N as usize * 4];
    buffer.read(0, &mut out).unwrap();
    out.chunks_exact(4).map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect()
}

/// `fill.comp` wrote `value + i` into every word.
fn filled(buffer: &Buffer, value: u32) -> bool {
    words(buffer) == (0..N).map(|i| value + i).collect::<Vec<_>>()
}

fn foreign(e: &VulkanError) -> bool {
    matches!(e, VulkanError::ForeignToken { token: "submission", .. })
}

/// The red team's scenario: a dispatch held on the GPU by a gate writes a buffer; another context
/// of the same device, asked about that submission (before and after it submitted work of its
/// own), refuses it, marks nothing complete, and the buffer dropped meanwhile waits for the
/// dispatch.
#[test]
fn misuse_a_submission_given_to_another_context_is_refused_and_marks_nothing_complete() {
    with_gpu(|set| {
        let device = std::sync::Arc::clone(&set.devices()[0]);
        watched(move || {
            let gate = device.create_timeline("misuse token gate").unwrap();
            // SAFETY: the test opens the gate with a host signal, waiting for nothing that waits for it.
            unsafe { gate.signal_submitted(1) };
            let (a, b, never) = (
                CommandContext::new(&device, "misuse token a").unwrap(),
                CommandContext::new(&device, "misuse token b").unwrap(),
                CommandContext::new(&device, "misuse token never").unwrap(),
            );
            // `b` submits and waits for its own work first (one queue runs its submissions in
            // order: after the gated one, this would wait for the gate): slot 0, serial 1, what
            // `a`'s first submission carries as well.
            let own = b.submit(&[], |_| {}).unwrap();
            b.wait(own).unwrap();
            let target = storage(&device, "misuse token target");
            let program = ComputeProgram::new(&device, "misuse token fill", &shaders::FILL, 4).unwrap();
            let ds = program.descriptor_set(&[Binding::Buffer(&target)]).unwrap();
            let held = a
                .submit(&[gate.at(1)], |rec| program.dispatch(rec, &ds, &push(N, 7), [N / 64, 1, 1]).unwrap())
                .unwrap();
            // A context that never submitted: no panic, a typed error.
            assert!(foreign(&never.is_complete(&held).unwrap_err()));
            assert!(foreign(&never.wait_for(&held).unwrap_err()));
            // One whose own slot 0 / serial 1 has signalled: refused, nothing marked complete.
            assert!(foreign(&b.is_complete(&held).unwrap_err()));
            assert!(foreign(&b.wait_for(&held).unwrap_err()));
            // Nothing was marked complete: the gated dispatch has not run, and the buffer it writes,
            // dropped now, waits for it.
            assert!(!a.is_complete(&held).unwrap());
            assert!(!device.has_completed(&held.gpu_use()));
            let probe = storage(&device, "misuse token probe");
            let probe_ds = program.descriptor_set(&[Binding::Buffer(&probe)]).unwrap();
            drop(ds);
            drop(target);
            assert!(live(&device, "misuse token target"), "the buffer waits for the gated dispatch");
            open(&device, &gate);
            a.wait(held).unwrap();
            // The device goes on: a later dispatch on `b` runs and writes what it should.
            let later = b
                .submit(&[], |rec| program.dispatch(rec, &probe_ds, &push(N, 3), [N / 64, 1, 1]).unwrap())
                .unwrap();
            b.wait(later).unwrap();
            assert!(filled(&probe, 3));
            device.wait_submitted().unwrap();
            assert!(!live(&device, "misuse token target"), "released once the dispatch completed");
        });
    });
}

/// A submission of device 0 given to a context (or a multi-device submitter) of device 1 is
/// refused by every query and wait.
#[test]
fn misuse_a_submission_given_to_another_devices_context_or_submitter_is_refused() {
    with_gpu(|set| {
        let (d0, d1) = (std::sync::Arc::clone(&set.devices()[0]), std::sync::Arc::clone(&set.devices()[1]));
        let (c0, c1) =
            (CommandContext::new(&d0, "misuse d0").unwrap(), CommandContext::new(&d1, "misuse d1").unwrap());
        let s0 = c0.submit(&[], |_| {}).unwrap();
        let s1 = c1.submit(&[], |_| {}).unwrap();
        assert!(foreign(&c1.is_complete(&s0).unwrap_err()));
        assert!(foreign(&c1.wait_for(&s0).unwrap_err()));
        let message = c1.wait(s0).unwrap_err().to_string();
        assert!(message.contains("another device") && message.contains("misuse d1"), "{message}");
        c1.wait(s1).unwrap();

        let submitter = MultiSubmitter::new(set, DeviceMask::from_bits(0b11)).unwrap();
        let on0 = submitter.submit(DeviceIndex::new(0).unwrap(), &[]).unwrap();
        let refused = submitter.wait(DeviceIndex::new(1).unwrap(), on0).unwrap_err();
        assert!(matches!(&refused, WorkError::Vulkan(e) if foreign(e)), "{refused}");
        // A submission of another context of the right device is refused as well.
        let other = c0.submit(&[], |_| {}).unwrap();
        let refused = submitter.wait(DeviceIndex::new(0).unwrap(), other).unwrap_err();
        assert!(matches!(&refused, WorkError::Vulkan(e) if foreign(e)), "{refused}");
        d0.wait_submitted().unwrap();
    });
}

/// A submit of a context from inside its own recording closure (which runs under the context's
/// lock) is refused, and the outer submission goes ahead.
#[test]
fn misuse_a_submit_from_inside_its_own_recording_closure_is_refused_not_a_deadlock() {
    with_gpu(|set| {
        let device = std::sync::Arc::clone(&set.devices()[0]);
        watched(move || {
            let context = CommandContext::new(&device, "misuse reentrant").unwrap();
            let mut inner = None;
            let outer = context
                .submit(&[], |_| {
                    inner = Some(context.submit(&[], |_| {}));
                })
                .unwrap();
            let inner = inner.unwrap().unwrap_err();
            assert!(matches!(inner, VulkanError::Reentrant { .. }), "{inner}");
            context.wait(outer).unwrap();
            // Other contexts and the device's own helpers work inside the closure.
            let target = storage(&device, "misuse reentrant target");
            let ok = context
                .submit(&[], |_| {
                    device.read_back(&target, 0, 4).unwrap();
                })
                .unwrap();
            context.wait(ok).unwrap();
        });
    });
}

/// Holding the universal queue's lock and calling residency is refused (every path that locks the
/// queue: a submission, a submission of the device's own helpers, a wait for idle), as is locking
/// it twice; once released, all of them work.
#[test]
fn misuse_a_residency_call_while_holding_the_queue_lock_is_refused_not_a_deadlock() {
    with_gpu(|set| {
        let device = std::sync::Arc::clone(&set.devices()[0]);
        watched(move || {
            let context = CommandContext::new(&device, "misuse queue lock").unwrap();
            let target = storage(&device, "misuse queue lock target");
            {
                let queue = device.universal_queue().lock().unwrap();
                assert_ne!(*queue, vk::Queue::null());
                let reentrant = |e: VulkanError| assert!(matches!(e, VulkanError::Reentrant { .. }), "{e}");
                reentrant(context.submit(&[], |_| {}).unwrap_err());
                reentrant(device.universal_queue().lock().unwrap_err());
                reentrant(device.wait_idle().unwrap_err());
                let read = device.read_back(&target, 0, 4).unwrap_err();
                assert!(read.to_string().contains("re-entrant"), "{read}");
            }
            let s = context.submit(&[], |_| {}).unwrap();
            context.wait(s).unwrap();
            device.wait_idle().unwrap();
        });
    });
}

/// `submit_checked`'s closure runs under the queue lock: a residency submission from inside it
/// is refused (the closure's own error) instead of waiting for itself.
#[test]
fn misuse_a_residency_submit_inside_submit_checked_is_refused_not_a_deadlock() {
    with_gpu(|set| {
        let device = std::sync::Arc::clone(&set.devices()[0]);
        watched(move || {
            let context = CommandContext::new(&device, "misuse checked").unwrap();
            let info =
                vk::CommandPoolCreateInfo::default().queue_family_index(device.universal_queue().family());
            // SAFETY: a valid device and queue family; destroyed below.
            let pool = unsafe { device.raw().create_command_pool(&info, None) }.unwrap();
            let allocate = vk::CommandBufferAllocateInfo::default()
                .command_pool(pool)
                .level(vk::CommandBufferLevel::PRIMARY)
                .command_buffer_count(1);
            // SAFETY: the pool is this test's.
            let cmd = unsafe { device.raw().allocate_command_buffers(&allocate) }.unwrap()[0];
            // SAFETY: a fresh primary command buffer of the universal family.
            unsafe { device.raw().begin_command_buffer(cmd, &vk::CommandBufferBeginInfo::default()) }
                .unwrap();
            // SAFETY: `cmd` is a primary command buffer of the universal family, recording, used
            // by nothing else; it records nothing through the helpers and is never submitted
            // (the closure refuses), then freed with its pool after the device is idle.
            let rec = unsafe { residency_vulkan::recording::Recording::from_raw(&device, cmd) };
            let mut inner = None;
            let result = rec.submit_checked(|_, _| {
                inner = Some(context.submit(&[], |_| {}));
                Err(vk::Result::ERROR_UNKNOWN)
            });
            assert!(result.is_err());
            let inner = inner.unwrap().unwrap_err();
            assert!(matches!(inner, VulkanError::Reentrant { .. }), "{inner}");
            device.wait_idle().unwrap();
            // SAFETY: the command buffer was never submitted; the device is idle.
            unsafe { device.raw().destroy_command_pool(pool, None) };
        });
    });
}

/// A wait for a timeline value that no signal announced reaches is refused where it would be
/// made (a submission's wait, a host wait), nothing is submitted, and the context and a buffer
/// declared used until that value are released at teardown without waiting forever.
#[test]
fn misuse_a_wait_for_a_timeline_value_nothing_signals_is_refused_and_nothing_hangs() {
    with_gpu(|set| {
        let device = std::sync::Arc::clone(&set.devices()[0]);
        watched(move || {
            let never = device.create_timeline("misuse never signalled").unwrap();
            let context = CommandContext::new(&device, "misuse unreachable").unwrap();
            let mut ran = false;
            let refused = context.submit(&[never.at(5)], |_| ran = true).unwrap_err();
            assert!(
                matches!(refused, VulkanError::UnreachableWait { value: 5, current: 0, announced: 0, .. }),
                "{refused}"
            );
            assert!(!ran, "nothing was recorded");
            let refused = device.wait_until(&never.at(5)).unwrap_err();
            assert!(matches!(refused, VulkanError::UnreachableWait { .. }), "{refused}");
            // A use may be declared before its frame is submitted; the buffer then waits for it.
            let target = storage(&device, "misuse unreachable target");
            target.used_until(never.at(5)).unwrap();
            drop(target);
            assert!(live(&device, "misuse unreachable target"));
            // Once the value is announced and reached (here from the host), waits are fine.
            // SAFETY: signalled from the host right below.
            unsafe { never.signal_submitted(5) };
            let signal = vk::SemaphoreSignalInfo::default().semaphore(never.raw()).value(5);
            // SAFETY: a timeline of this device, from 0 to 5, nothing pending on it.
            unsafe { device.raw().signal_semaphore(&signal) }.unwrap();
            let s = context.submit(&[never.at(5)], |_| {}).unwrap();
            context.wait(s).unwrap();
            device.wait_until(&never.at(5)).unwrap();
            device.maintain();
            assert!(!live(&device, "misuse unreachable target"));
            drop(context);
        });
    });
}
