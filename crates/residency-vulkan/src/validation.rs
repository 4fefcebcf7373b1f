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

/// Message IDs the layer raises about itself in GPU-assisted mode, not about the application:
/// layer 1.3.239's GPU-assisted instrumentation waits on the application's semaphores with its
/// own timeout and reports `UNASSIGNED-VkSemaphore-state-timeout` ("most likely a validation
/// bug") when lavapipe runs the instrumented shaders slower than that timeout; layer 1.4.x
/// warns that GPU-assisted and core validation together are slow (`VALIDATION-SETTINGS`) and
/// lists the features it turns on for its instrumentation (`WARNING-Setting-Limit-Adjusted`). Under
/// [`ValidationMode::GpuAssisted`] only, such a message is counted
/// ([`ValidationLog::layer_noise_count`]) and kept, but is not a problem; every other message
/// still is. In every other mode it is a problem like any other.
const GPU_ASSISTED_LAYER_NOISE: &[&str] =
    &["UNASSIGNED-VkSemaphore-state-timeout", "VALIDATION-SETTINGS", "WARNING-Setting-Limit-Adjusted"];

/// Messages seen so far, shared between the callback and the owner of the instance.
#[derive(Debug, Default)]
pub struct ValidationLog {
    problems: AtomicU64,
    messages: Mutex<Vec<ValidationMessage>>,
    /// Performance warnings (not problems) by message ID, counted exactly.
    performance: Mutex<std::collections::BTreeMap<String, u64>>,
    /// Whether GPU-assisted validation is on (then [`GPU_ASSISTED_LAYER_NOISE`] is not a problem).
    gpu_assisted: bool,
    /// Messages of [`GPU_ASSISTED_LAYER_NOISE`] seen under GPU-assisted validation.
    layer_noise: AtomicU64,
}

impl ValidationLog {
    /// An empty log for an instance created with `mode`.
    pub(crate) fn new(mode: ValidationMode) -> ValidationLog {
        ValidationLog { gpu_assisted: mode == ValidationMode::GpuAssisted, ..ValidationLog::default() }
    }

    /// How many messages the layer raised about itself under GPU-assisted validation (its own
    /// semaphore-wait timeouts; see [`ValidationMode::GpuAssisted`]); they are not problems. Always
    /// 0 in the other modes.
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

    /// Whether `message` is the layer's own noise under GPU-assisted validation.
    fn is_layer_noise(&self, message: &ValidationMessage) -> bool {
        self.gpu_assisted && GPU_ASSISTED_LAYER_NOISE.contains(&message.id.as_str())
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

    fn message(id: &str) -> ValidationMessage {
        ValidationMessage {
            severity: Severity::Error,
            is_validation: true,
            id: id.to_owned(),
            text: String::new(),
        }
    }

    #[test]
    fn the_layers_own_timeouts_are_noise_only_under_gpu_assisted_validation() {
        let noise = GPU_ASSISTED_LAYER_NOISE.len() as u64;
        let gpu = ValidationLog::new(ValidationMode::GpuAssisted);
        for id in GPU_ASSISTED_LAYER_NOISE {
            gpu.record(message(id), false);
        }
        assert_eq!((gpu.problem_count(), gpu.layer_noise_count()), (0, noise));
        assert!(gpu.problems_since(0).is_empty());
        gpu.record(message("VUID-vkCmdDispatch-None-02706"), false);
        assert_eq!(gpu.problem_count(), 1);
        assert_eq!(gpu.problems_since(0)[0].id, "VUID-vkCmdDispatch-None-02706");

        let sync = ValidationLog::new(ValidationMode::Synchronization);
        for id in GPU_ASSISTED_LAYER_NOISE {
            sync.record(message(id), false);
        }
        assert_eq!((sync.problem_count(), sync.layer_noise_count()), (noise, 0));
    }
}
