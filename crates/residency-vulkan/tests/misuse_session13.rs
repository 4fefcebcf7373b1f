//! Adversarial review of what session 13 added (deferred feedback, the bind worker, lent range
//! handles, zero-copy uploads, compaction's compute copy): safe calls that try to make the
//! library free or hand back what the GPU still reads. Each finding is closed at its cause; the
//! harness fails a test on any validation message or leaked object, a watchdog on a hang.
//!
//! The only `unsafe` here is test scaffolding whose contract the test keeps: a renderer timeline
//! announced (`Timeline::signal_submitted`) and then signalled from the host, to hold GPU work
//! back until the test lets it run.

#[path = "common/watchdog.rs"]
mod watchdog;

use residency_core::format::Format;
use residency_core::tiles::{ImageId, SparseImageDesc, SparseResidency, TileIndex, TilePool, TilePoolDesc};
use residency_core::usage::BufferUsage;
use residency_vulkan::ash::vk;
use residency_vulkan::sparse::{SparseError, SparseImage, TileHeaps};
use residency_vulkan::testing::with_gpu;
use residency_vulkan::{BufferDesc, Device, FaultSite, InjectedFault, Timeline, UploadPath, Uploader};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

fn gpu(what: &'static str, body: impl FnOnce(&Arc<Device>) + Send + 'static) {
    watchdog::within(what, move || {
        with_gpu(|set| body(&set.devices()[0]));
    });
}

fn pattern(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// A renderer timeline the test signals once from the host, to 1: GPU work that waits for it
/// does not run before [`Gate::open`] (called at the latest when the gate drops).
#[derive(Clone)]
struct Gate {
    device: Arc<Device>,
    timeline: Timeline,
    opened: Arc<AtomicBool>,
}

impl Gate {
    fn new(device: &Arc<Device>, name: &str) -> Gate {
        let timeline = device.create_timeline(name).unwrap();
        // SAFETY: the test signals the timeline to 1 from the host (`open`, at the latest when
        // the last clone drops), and that signal waits for nothing that waits for the timeline.
        unsafe { timeline.signal_submitted(1) };
        Gate { device: Arc::clone(device), timeline, opened: Arc::default() }
    }

    /// Whether it was opened (set before the signal: work gated by it may have run only then).
    fn is_open(&self) -> bool {
        self.opened.load(Ordering::SeqCst)
    }

    /// Signals the timeline to 1 (once, whoever calls first).
    fn open(&self) {
        if self.opened.swap(true, Ordering::SeqCst) {
            return;
        }
        let info = vk::SemaphoreSignalInfo::default().semaphore(self.timeline.raw()).value(1);
        // SAFETY: a timeline semaphore of this device, signalled once from 0 to 1.
        unsafe { self.device.raw().signal_semaphore(&info) }.unwrap();
    }
}

impl Drop for Gate {
    fn drop(&mut self) {
        if Arc::strong_count(&self.opened) == 1 {
            self.open();
        }
    }
}

/// A sparse bind on `device`'s sparse queue that waits for `gate`: every residency submission
/// made after it (the uploader's copies wait for the binds submitted before them) runs only once
/// the gate opens. Returns what must outlive the bind.
fn gated_bind(device: &Arc<Device>, gate: &Gate) -> Option<(TileHeaps, SparseImage)> {
    let mut heaps = match TileHeaps::new(Arc::clone(device), "gate heaps") {
        Err(SparseError::NoSparseQueue) => return None,
        heaps => heaps.unwrap(),
    };
    let mut pool = TilePool::new(TilePoolDesc::default().with_name("gate pool").with_tiles_per_heap(8));
    let desc = SparseImageDesc::new_2d(Format::R8G8B8A8Unorm, 512, 512);
    let image = SparseImage::new_external(&heaps, 65536, ImageId(1), "gated", &desc, false).unwrap();
    let mut residency = SparseResidency::new(pool.id(), ImageId(1), image.layout());
    let bound = residency.commit(&mut pool, &[TileIndex(0)]).unwrap();
    let (_, done) =
        heaps.bind_after(&pool, &[(&image, &bound)], Default::default(), &[gate.timeline.at(1)]).unwrap();
    assert!(done.is_some(), "the bind was submitted");
    Some((heaps, image))
}

/// `Uploader::upload_buffer` imports the caller's slice and promised to return only after the
/// copies that read it completed. When waiting for a copy failed (an injected `vkWaitForFences`
/// failure, or an injected device loss, both safe calls: `Ledger::inject_fault`), it tried
/// `Device::wait_idle`, and when that failed too it leaked the import and returned — or, the
/// device counting as lost (an injected loss, under which the GPU still runs what was
/// submitted), freed the imported memory and returned — while the copy still ran: the caller's
/// slice could then be mutated or freed under the GPU's read (undefined behaviour; lavapipe
/// reads it from a driver thread). Now the wait goes on past the fault hook (bounded only on a
/// device the driver reported lost) before anything is freed or the call returns, also on an
/// unwind.
#[test]
fn misuse_an_imported_upload_whose_wait_fails_returns_only_after_its_copy_read_the_slice() {
    for fault in [InjectedFault::OutOfDeviceMemory, InjectedFault::DeviceLost] {
        gpu("import wait fails", move |device| {
            let Some(align) = device.host_import_alignment() else { return };
            let align = align as usize;
            let gate = Gate::new(device, "import gate");
            let Some(gated) = gated_bind(device, &gate) else { return };
            let len = 1 << 20;
            let mut source = pattern(len + align, 0x51);
            let start = (align - source.as_ptr() as usize % align) % align;
            let original = source[start..start + len].to_vec();
            let dst = device
                .create_buffer(&BufferDesc::new(
                    "imported destination",
                    len as u64,
                    BufferUsage::COPY_DST | BufferUsage::COPY_SRC,
                ))
                .unwrap();
            let uploader = Uploader::new(device, "import", 1 << 20)
                .unwrap()
                .with_import_threshold(0)
                .with_import_chunk(len as u64);
            let fired = device.ledger().faults_fired(FaultSite::Wait);
            // The first wait fails; so does the one after it (the old fallback, `wait_idle`).
            device.ledger().inject_fault(FaultSite::Wait, 0, fault);
            device.ledger().inject_fault(FaultSite::Wait, 0, fault);
            // The gate opens once the upload's wait for its copy failed: the copy can run from
            // then on, and not before.
            let opener = {
                let (gate, device) = (gate.clone(), Arc::clone(device));
                std::thread::spawn(move || {
                    while device.ledger().faults_fired(FaultSite::Wait) == fired && !gate.is_open() {
                        std::thread::yield_now();
                    }
                    gate.open();
                })
            };
            let result = uploader.upload_buffer(&dst, 0, &source[start..start + len]);
            // Returned: the copy that read the slice has completed, so it ran after the gate
            // opened.
            let open_at_return = gate.is_open();
            // The caller's slice is its own again: change it (as freeing and reusing it would).
            source[start..start + len].fill(0xEE);
            gate.open();
            opener.join().unwrap();
            device.ledger().clear_faults();
            assert!(result.is_err(), "{fault:?}: the failed wait is returned: {result:?}");
            assert!(open_at_return, "{fault:?}: upload_buffer returned before its copy could run");
            device.wait_submitted().unwrap();
            let back = device.read_back(&dst, 0, len as u64).unwrap();
            assert!(back == original, "{fault:?}: the copy read the slice after the call returned");
            // No import outlives the call.
            let imports =
                device.ledger().live_objects().iter().filter(|o| o.kind == "imported host memory").count();
            assert_eq!(imports, 0, "{fault:?}");
            // And the uploader works on.
            let again = uploader.upload_buffer(&dst, 0, &original).unwrap();
            assert!(matches!(again, UploadPath::Imported { .. }), "{again:?}");
            drop(gated);
        });
    }
}
