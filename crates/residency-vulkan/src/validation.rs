//! Validation messages: the debug-utils messenger callback, routed to `tracing` and counted.
//!
//! Every message keeps its ID (a `VUID-…` or `SYNC-HAZARD-…` name). Errors, and warnings of the
//! validation type, count as *problems*: tests fail on any problem raised while they ran.

use crate::poison::PoisonFree;
use ash::vk;
use std::ffi::{c_void, CStr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

/// How much of the Khronos validation layer to enable.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ValidationMode {
    /// No validation layer.
    #[default]
    Off,
    /// `VK_LAYER_KHRONOS_validation` with its default checks.
    Standard,
    /// The layer with synchronization validation on as well.
    Synchronization,
    /// The layer with GPU-assisted validation on as well
    /// (`VK_VALIDATION_FEATURE_ENABLE_GPU_ASSISTED_EXT`, with its binding slot reserved): the
    /// layer instruments every shader so that a descriptor access outside its bound range is
    /// reported when the work runs (`VUID-vkCmdDispatch-None-02706` and its draw twins, "descriptor
    /// size … highest byte accessed …"). Far slower than the other modes; it takes one of the
    /// device's descriptor-set slots (programs use only set 0). The layer reports buffer
    /// accesses out of bounds only on devices without `robustBufferAccess` enabled, which
    /// residency never enables (docs/reliability.md).
    GpuAssisted,
}

impl ValidationMode {
    /// The mode a `RESIDENCY_VALIDATION` value names: `0`/`off`, `1`/`on`/`standard`,
    /// `2`/`sync`/`synchronization`, `gpu`/`gpu-assisted`/`gpuav`; `None` for anything else.
    pub fn parse(value: &str) -> Option<ValidationMode> {
        match value.trim() {
            "0" | "off" => Some(ValidationMode::Off),
            "1" | "on" | "standard" => Some(ValidationMode::Standard),
            "2" | "sync" | "synchronization" => Some(ValidationMode::Synchronization),
            "gpu" | "gpu-assisted" | "gpuav" => Some(ValidationMode::GpuAssisted),
            _ => None,
        }
    }

    /// The mode named by `RESIDENCY_VALIDATION` ([`ValidationMode::parse`]), or `Off` when it is
    /// unset or names none.
    pub fn from_env() -> ValidationMode {
        std::env::var("RESIDENCY_VALIDATION").ok().and_then(|v| Self::parse(&v)).unwrap_or_default()
    }
}

/// How serious a message is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Severity {
    /// Diagnostic noise.
    Verbose,
    /// Informational.
    Info,
    /// A likely problem.
    Warning,
    /// A violation of the specification.
    Error,
}

/// One message from the layers or the loader.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ValidationMessage {
    /// Its severity.
    pub severity: Severity,
    /// Whether the validation layer raised it (as opposed to the loader or a performance hint).
    pub is_validation: bool,
    /// The message ID name (`VUID-…`, `SYNC-HAZARD-…`), or empty.
    pub id: String,
    /// The full message text.
    pub text: String,
}

impl ValidationMessage {
    /// Whether this message fails a test: any error, or a validation warning.
    pub fn is_problem(&self) -> bool {
        self.severity == Severity::Error || (self.severity == Severity::Warning && self.is_validation)
    }
}

/// Most messages kept for inspection; older ones are dropped (counts stay exact).
const KEPT_MESSAGES: usize = 256;

/// Timeouts the layer reports about its own bookkeeping, in every mode: layer 1.3.239 (Debian 12)
/// reports `UNASSIGNED-VkSemaphore-state-timeout` ("Timeout waiting for timeline semaphore state
/// to update. This is most likely a validation bug") and `UNASSIGNED-VkFence-state-timeout` (its
/// fence twin) when its own record of a completed wait waited 10 s for its record of the signal
/// that completed it. The driver had already reported the wait complete, so the message says
/// nothing about the application's calls. It happens when one thread signals a timeline from the
/// host while another waits for work that waits for that signal: the waiting thread's record
/// (inside `vkWaitForFences` or `vkWaitSemaphores`) waits for the layer's queue thread while it
/// holds a lock of the layer's, and the queue thread waits for the signalling thread's record,
/// which needs that lock (gdb: the signaller blocked in the layer's `pthread_rwlock_wrlock` inside
/// `vkSignalSemaphore`, the waiter in the layer's timed wait inside `vkWaitForFences`). Reproduced
/// with `misuse_session13`'s gated import sharing one core with a busy loop: in 16 of 60 runs
/// under synchronization validation, 15 of 40 under the standard checks, none of 30 with the
/// layer off; newer layers release their lock while they wait. Such a message is counted
/// ([`ValidationLog::layer_noise_count`]) and kept, not a problem, only when its text carries the
/// layer's own "validation bug" verdict.
const LAYER_SELF_TIMEOUTS: &[&str] =
    &["UNASSIGNED-VkSemaphore-state-timeout", "UNASSIGNED-VkFence-state-timeout"];

/// The layer's notes about itself in GPU-assisted mode, not about the application: layer 1.4.x
/// warns that GPU-assisted and core validation together are slow (`VALIDATION-SETTINGS`) and
/// lists the features it turns on for its instrumentation (`WARNING-Setting-Limit-Adjusted`).
/// Under [`ValidationMode::GpuAssisted`] only, such a message is counted
/// ([`ValidationLog::layer_noise_count`]) and kept, but is not a problem; in every other mode it
/// is a problem like any other.
const GPU_ASSISTED_LAYER_NOISE: &[&str] = &["VALIDATION-SETTINGS", "WARNING-Setting-Limit-Adjusted"];

/// Messages seen so far, shared between the callback and the owner of the instance.
#[derive(Debug, Default)]
pub struct ValidationLog {
    problems: AtomicU64,
    messages: Mutex<Vec<ValidationMessage>>,
    /// Performance warnings (not problems) by message ID, counted exactly.
    performance: Mutex<std::collections::BTreeMap<String, u64>>,
    /// Whether GPU-assisted validation is on (then [`GPU_ASSISTED_LAYER_NOISE`] is not a problem).
    gpu_assisted: bool,
    /// The layer's messages about itself seen: [`LAYER_SELF_TIMEOUTS`], and
    /// [`GPU_ASSISTED_LAYER_NOISE`] under GPU-assisted validation.
    layer_noise: AtomicU64,
}

impl ValidationLog {
    /// An empty log for an instance created with `mode`.
    pub(crate) fn new(mode: ValidationMode) -> ValidationLog {
        ValidationLog { gpu_assisted: mode == ValidationMode::GpuAssisted, ..ValidationLog::default() }
    }

    /// How many messages the layer raised about itself: layer 1.3.239's timeouts waiting for its
    /// own semaphore and fence state (`UNASSIGNED-VkSemaphore-state-timeout`,
    /// `UNASSIGNED-VkFence-state-timeout`, "most likely a validation bug") in every mode, and the
    /// notes on its own settings under [`ValidationMode::GpuAssisted`]; they are not problems
    /// (docs/reliability.md, "The layer's own timeouts").
    pub fn layer_noise_count(&self) -> u64 {
        self.layer_noise.load(Ordering::SeqCst)
    }

    /// How many problems ([`ValidationMessage::is_problem`]) have been seen since creation.
    pub fn problem_count(&self) -> u64 {
        self.problems.load(Ordering::SeqCst)
    }

    /// The problems seen after the first `since` problems (up to the most recent kept).
    pub fn problems_since(&self, since: u64) -> Vec<ValidationMessage> {
        let total = self.problem_count();
        let wanted = usize::try_from(total.saturating_sub(since)).unwrap_or(usize::MAX);
        let messages = self.messages.locked();
        let problems: Vec<_> = messages.iter().filter(|m| self.counts(m)).cloned().collect();
        let skip = problems.len().saturating_sub(wanted);
        problems.into_iter().skip(skip).collect()
    }

    /// The performance warnings seen since creation (warnings the layer raises as performance
    /// hints, not as validation: they fail no test), by message ID. docs/reliability.md lists the
    /// kinds residency's own calls raise and why.
    pub fn performance_warnings(&self) -> std::collections::BTreeMap<String, u64> {
        self.performance.locked().clone()
    }

    /// Every kept message (problems and others), oldest first.
    pub fn messages(&self) -> Vec<ValidationMessage> {
        self.messages.locked().clone()
    }

    /// Whether `message` is the layer's own noise: one of its self-diagnosed timeouts, or a note
    /// on its settings under GPU-assisted validation.
    fn is_layer_noise(&self, message: &ValidationMessage) -> bool {
        let id = message.id.as_str();
        (LAYER_SELF_TIMEOUTS.contains(&id) && message.text.contains("validation bug"))
            || (self.gpu_assisted && GPU_ASSISTED_LAYER_NOISE.contains(&id))
    }

    /// Whether `message` counts as a problem in this log.
    fn counts(&self, message: &ValidationMessage) -> bool {
        message.is_problem() && !self.is_layer_noise(message)
    }

    fn record(&self, message: ValidationMessage, performance: bool) {
        if performance && !message.is_validation && message.severity == Severity::Warning {
            let id = if message.id.is_empty() { "(no id)".to_owned() } else { message.id.clone() };
            *self.performance.locked().entry(id).or_insert(0) += 1;
        }
        match message.severity {
            Severity::Error => tracing::error!(id = %message.id, "{}", message.text),
            Severity::Warning if message.is_validation => {
                tracing::warn!(id = %message.id, "{}", message.text)
            }
            // Performance hints (e.g. GENERAL layout on a copy, which sparse images use on purpose).
            Severity::Warning => tracing::debug!(id = %message.id, "{}", message.text),
            Severity::Info => tracing::debug!(id = %message.id, "{}", message.text),
            Severity::Verbose => tracing::trace!(id = %message.id, "{}", message.text),
        }
        if message.severity < Severity::Warning {
            return;
        }
        if self.is_layer_noise(&message) {
            self.layer_noise.fetch_add(1, Ordering::SeqCst);
        }
        let mut messages = self.messages.locked();
        if self.counts(&message) {
            self.problems.fetch_add(1, Ordering::SeqCst);
        }
        if messages.len() == KEPT_MESSAGES {
            messages.remove(0);
        }
        messages.push(message);
    }
}

/// The messenger's create info, pointing at `log`, which must outlive the messenger.
pub(crate) fn messenger_create_info(log: &ValidationLog) -> vk::DebugUtilsMessengerCreateInfoEXT<'static> {
    vk::DebugUtilsMessengerCreateInfoEXT::default()
        .message_severity(
            vk::DebugUtilsMessageSeverityFlagsEXT::VERBOSE
                | vk::DebugUtilsMessageSeverityFlagsEXT::INFO
                | vk::DebugUtilsMessageSeverityFlagsEXT::WARNING
                | vk::DebugUtilsMessageSeverityFlagsEXT::ERROR,
        )
        .message_type(
            vk::DebugUtilsMessageTypeFlagsEXT::GENERAL
                | vk::DebugUtilsMessageTypeFlagsEXT::VALIDATION
                | vk::DebugUtilsMessageTypeFlagsEXT::PERFORMANCE,
        )
        .pfn_user_callback(Some(debug_callback))
        .user_data(std::ptr::from_ref(log).cast_mut().cast())
}

/// # Safety
/// Called by the Vulkan loader with valid callback data, and `user_data` pointing at the
/// [`ValidationLog`] that the instance keeps alive for as long as the messenger exists.
unsafe extern "system" fn debug_callback(
    severity: vk::DebugUtilsMessageSeverityFlagsEXT,
    types: vk::DebugUtilsMessageTypeFlagsEXT,
    data: *const vk::DebugUtilsMessengerCallbackDataEXT<'_>,
    user_data: *mut c_void,
) -> vk::Bool32 {
    if data.is_null() || user_data.is_null() {
        return vk::FALSE;
    }
    // SAFETY: the loader passes a valid callback-data struct for the duration of the call.
    let data = unsafe { &*data };
    // SAFETY: user_data is the ValidationLog set in `messenger_create_info`, kept alive by the
    // instance's shared state until after the messenger is destroyed.
    let log = unsafe { &*user_data.cast::<ValidationLog>() };
    let text = |ptr: *const std::ffi::c_char| {
        if ptr.is_null() {
            String::new()
        } else {
            // SAFETY: non-null strings in the callback data are NUL-terminated and live for the call.
            unsafe { CStr::from_ptr(ptr) }.to_string_lossy().into_owned()
        }
    };
    let severity = if severity.contains(vk::DebugUtilsMessageSeverityFlagsEXT::ERROR) {
        Severity::Error
    } else if severity.contains(vk::DebugUtilsMessageSeverityFlagsEXT::WARNING) {
        Severity::Warning
    } else if severity.contains(vk::DebugUtilsMessageSeverityFlagsEXT::INFO) {
        Severity::Info
    } else {
        Severity::Verbose
    };
    log.record(
        ValidationMessage {
            severity,
            is_validation: types.contains(vk::DebugUtilsMessageTypeFlagsEXT::VALIDATION),
            id: text(data.p_message_id_name),
            text: text(data.p_message),
        },
        types.contains(vk::DebugUtilsMessageTypeFlagsEXT::PERFORMANCE),
    );
    vk::FALSE
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(id: &str, text: &str) -> ValidationMessage {
        ValidationMessage {
            severity: Severity::Error,
            is_validation: true,
            id: id.to_owned(),
            text: text.to_owned(),
        }
    }

    /// The layer's texts for its two timeouts (1.3.239, as CI's run printed them).
    const SEMAPHORE_TIMEOUT: &str = "Validation Error: [ UNASSIGNED-VkSemaphore-state-timeout ] Object 0: handle = \
        0x460000000046, name = import gate, type = VK_OBJECT_TYPE_SEMAPHORE; | MessageID = 0x57e65a33 | Timeout \
        waiting for timeline semaphore state to update. This is most likely a validation bug. completed_.payload=0 \
        wait_payload=1";
    const FENCE_TIMEOUT: &str = "Validation Error: [ UNASSIGNED-VkFence-state-timeout ] Object 0: handle = \
        0x150000000015, name = import commands fence 0, type = VK_OBJECT_TYPE_FENCE; | MessageID = 0xcf5eead0 | \
        Timeout waiting for fence state to update. This is most likley a validation bug.";

    #[test]
    fn the_layers_own_timeouts_are_noise_in_every_mode_and_its_settings_notes_only_under_gpu_assisted() {
        let modes = [ValidationMode::Standard, ValidationMode::Synchronization, ValidationMode::GpuAssisted];
        for mode in modes {
            let log = ValidationLog::new(mode);
            log.record(message("UNASSIGNED-VkSemaphore-state-timeout", SEMAPHORE_TIMEOUT), false);
            log.record(message("UNASSIGNED-VkFence-state-timeout", FENCE_TIMEOUT), false);
            assert_eq!((log.problem_count(), log.layer_noise_count()), (0, 2), "{mode:?}");
            assert_eq!(log.messages().len(), 2, "{mode:?}: kept");
            // The same ID without the layer's own verdict is a problem.
            log.record(message("UNASSIGNED-VkFence-state-timeout", "a fence wait timed out"), false);
            assert_eq!(log.problem_count(), 1, "{mode:?}");
            for id in GPU_ASSISTED_LAYER_NOISE {
                log.record(message(id, "a note on the layer's settings"), false);
            }
            let settings = GPU_ASSISTED_LAYER_NOISE.len() as u64;
            if mode == ValidationMode::GpuAssisted {
                assert_eq!((log.problem_count(), log.layer_noise_count()), (1, 2 + settings));
            } else {
                assert_eq!((log.problem_count(), log.layer_noise_count()), (1 + settings, 2), "{mode:?}");
            }
            log.record(message("VUID-vkCmdDispatch-None-02706", "out of bounds"), false);
            let problems = log.problems_since(0);
            assert_eq!(problems.last().unwrap().id, "VUID-vkCmdDispatch-None-02706", "{mode:?}");
        }
    }
}
