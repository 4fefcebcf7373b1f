//! The GPU test harness.
//!
//! One [`DeviceSet`] is opened per test binary, with the Khronos validation layer and synchronization
//! validation on. GPU tests run one at a time through [`with_gpu`], and any validation problem raised
//! while a test runs fails that test. When `RESIDENCY_REQUIRE_GPU=1` (CI sets it) and no device can be
//! opened, the test fails; otherwise it prints a loud skip line and returns.

use crate::device::set::{DeviceSet, DeviceSetDesc};
use crate::instance::InstanceDesc;
use crate::poison::PoisonFree;
use crate::validation::{ValidationMessage, ValidationMode};
use std::sync::{Mutex, OnceLock};

static DEVICES: OnceLock<Result<DeviceSet, String>> = OnceLock::new();
static SERIAL: Mutex<()> = Mutex::new(());

/// Whether the environment requires a GPU (`RESIDENCY_REQUIRE_GPU=1`).
pub fn gpu_required() -> bool {
    std::env::var("RESIDENCY_REQUIRE_GPU").is_ok_and(|v| v == "1")
}

/// The description the harness opens devices with: synchronization validation, but none with
/// `RESIDENCY_VALIDATION=0` and GPU-assisted validation with `RESIDENCY_VALIDATION=gpu`
/// ([`ValidationMode::GpuAssisted`]); a missing layer is an error when a GPU is required, and at
/// least two devices (one GPU, or lavapipe, is opened twice) so that every multi-device path runs
/// everywhere; VK_EXT_memory_priority enabled where present (off by default in
/// [`DeviceSetDesc`]), so that its path runs too.
pub fn test_desc() -> DeviceSetDesc {
    let validation = match std::env::var("RESIDENCY_VALIDATION").ok().and_then(|v| ValidationMode::parse(&v))
    {
        Some(ValidationMode::Off) => ValidationMode::Off,
        Some(ValidationMode::GpuAssisted) => ValidationMode::GpuAssisted,
        _ => ValidationMode::Synchronization,
    };
    DeviceSetDesc {
        instance: InstanceDesc::default().with_validation(validation).with_require_validation(gpu_required()),
        ..DeviceSetDesc::default()
    }
    .with_min_devices(2)
    .with_memory_priority(true)
}

fn devices() -> Option<&'static DeviceSet> {
    let opened = DEVICES.get_or_init(|| DeviceSet::new(&test_desc()).map_err(|e| e.to_string()));
    match opened {
        Ok(set) => Some(set),
        Err(e) if gpu_required() => {
            panic!("RESIDENCY_REQUIRE_GPU=1 but no Vulkan device could be opened: {e}")
        }
        Err(e) => {
            eprintln!("\n**** SKIPPED: no Vulkan device ({e}); set RESIDENCY_REQUIRE_GPU=1 to make this a failure ****\n");
            None
        }
    }
}

/// Runs `test` with the shared device set, alone. Panics (failing the test) if the validation layer
/// reported a problem while it ran. Returns `None` when skipped for lack of a device.
pub fn with_gpu<R>(test: impl FnOnce(&DeviceSet) -> R) -> Option<R> {
    let set = devices()?;
    let _serial = SERIAL.locked();
    let before = set.validation_log().problem_count();
    // Heaps kept for reuse (memory blocks of the general allocator) may outlive a test; any other
    // object left alive by the test is a leak.
    let objects = |d: &crate::device::Device| {
        d.ledger().live_objects().into_iter().filter(|o| o.kind != "memory").count()
    };
    let live_before: Vec<usize> = set.devices().iter().map(|d| objects(d)).collect();
    let result = test(set);
    // What the test released while its work was still on the GPU is destroyed once that work is
    // done: wait for it, so that a leak is told apart from deferred destruction.
    for device in set.devices() {
        if !device.is_lost() {
            let _ = device.wait_idle();
        }
        device.maintain();
    }
    let problems = set.validation_log().problems_since(before);
    assert!(problems.is_empty(), "validation problems during the test:\n{}", describe(&problems));
    for (device, before) in set.devices().iter().zip(live_before) {
        let after = objects(device);
        assert!(
            after <= before,
            "{} has {} more live objects after the test: {:?}",
            device.index(),
            after - before,
            device.ledger().live_objects()
        );
    }
    Some(result)
}

/// Runs `bad`, which must make the validation layer report a problem whose ID contains `id`; the
/// expected problems do not fail the test. Used by the validation canary. Returns `None` when skipped:
/// without a device, or for a synchronization hazard (`SYNC-…`) when the harness runs another
/// validation mode (GPU-assisted validation does not run synchronization validation).
pub fn expect_validation_problem(id: &str, bad: impl FnOnce(&DeviceSet)) -> Option<Vec<ValidationMessage>> {
    let set = devices()?;
    let _serial = SERIAL.locked();
    assert_ne!(set.validation(), ValidationMode::Off, "the validation layer is not enabled");
    if id.starts_with("SYNC-") && set.validation() != ValidationMode::Synchronization {
        return None;
    }
    let before = set.validation_log().problem_count();
    bad(set);
    let problems = set.validation_log().problems_since(before);
    assert!(
        problems.iter().any(|p| p.id.contains(id)),
        "expected a validation problem `{id}`, got:\n{}",
        describe(&problems)
    );
    Some(problems)
}

fn describe(messages: &[ValidationMessage]) -> String {
    messages.iter().map(|m| format!("  [{:?}] {}: {}\n", m.severity, m.id, m.text)).collect()
}

/// The camera view the feedback tests sample (`tests/feedback.rs` and residency-wgpu's WGSL
/// mirror of it): 32 × 32 samples `[u, v, lod, min_lod]` over a 16384² texture at mip-0 texel
/// centres, LODs 0.1–3.1; a third see their own mip resident (min-LOD = that mip: LOD warnings),
/// the rest nothing resident (255: misses).
pub fn known_feedback_view() -> Vec<[f32; 4]> {
    let mut samples = Vec::with_capacity(32 * 32);
    for y in 0..32u32 {
        for x in 0..32u32 {
            let u = (f64::from(x * 97) + 13.5) / 16384.0;
            let v = (f64::from(y * 89) + 21.5) / 16384.0;
            let lod = (y % 4) as f32 + 0.1;
            let min_lod = if x % 3 == 0 { (y % 4) as f32 } else { 255.0 };
            samples.push([u as f32, v as f32, lod, min_lod]);
        }
    }
    samples
}
