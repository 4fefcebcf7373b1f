//! Debug-layer style messages (D3D12 `D3D12_MESSAGE_ID_*`) with stable ids and severities, and the
//! sinks that receive them.

use serde::{Deserialize, Serialize};
use std::fmt;

/// How serious a message is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Severity {
    /// Something was adjusted as the rules say; nothing is wrong.
    Info,
    /// The request is legal but probably not what was meant.
    Warning,
}

/// The stable id of a message. Serialises as its `SCREAMING_SNAKE_CASE` name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum MessageId {
    /// Info: a non-zero alignment floor was below what the rules require and was clamped up
    /// (`D3D12_MESSAGE_ID_CREATERESOURCE_ALIGNMENT_OVERRIDDEN`).
    AlignmentOverridden,
    /// Warning: `USE_TIGHT_ALIGNMENT` with `ALLOW_CROSS_ADAPTER`; the alignment must be 64 KiB
    /// (4 MiB for MSAA), so the tight flag has no effect.
    TightAlignmentWithCrossAdapter,
    /// Info: the driver requires more alignment than the spec's maximum for the resource; the driver's
    /// requirement wins (it is what makes the placement valid on Vulkan).
    DriverAlignmentAboveSpecMaximum,
    /// Info: the requirements source had no exact answer for this description and estimated it
    /// (a device profile without a matching probe).
    RequirementsEstimated,
}

impl MessageId {
    /// The stable name, as serialised.
    pub const fn name(self) -> &'static str {
        match self {
            MessageId::AlignmentOverridden => "ALIGNMENT_OVERRIDDEN",
            MessageId::TightAlignmentWithCrossAdapter => "TIGHT_ALIGNMENT_WITH_CROSS_ADAPTER",
            MessageId::DriverAlignmentAboveSpecMaximum => "DRIVER_ALIGNMENT_ABOVE_SPEC_MAXIMUM",
            MessageId::RequirementsEstimated => "REQUIREMENTS_ESTIMATED",
        }
    }

    /// The severity every message with this id has.
    pub const fn severity(self) -> Severity {
        match self {
            MessageId::TightAlignmentWithCrossAdapter => Severity::Warning,
            MessageId::AlignmentOverridden
            | MessageId::DriverAlignmentAboveSpecMaximum
            | MessageId::RequirementsEstimated => Severity::Info,
        }
    }
}

impl fmt::Display for MessageId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One message about one element of a request.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Message {
    /// Its severity (always `id.severity()`).
    pub severity: Severity,
    /// Its stable id.
    pub id: MessageId,
    /// Human-readable text with the numbers.
    pub message: String,
    /// Index of the description it is about in the request's array.
    pub element: usize,
}

impl Message {
    /// A message with the severity of `id`.
    pub fn new(id: MessageId, element: usize, message: impl Into<String>) -> Self {
        Message { severity: id.severity(), id, message: message.into(), element }
    }
}

impl fmt::Display for Message {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?} {} (descs[{}]): {}", self.severity, self.id, self.element, self.message)
    }
}

/// Where messages go. The engine also logs each one to `tracing` (target `residency::placement`).
pub trait MessageSink {
    /// Receives one message.
    fn push(&mut self, message: Message);
}

impl MessageSink for Vec<Message> {
    fn push(&mut self, message: Message) {
        Vec::push(self, message);
    }
}

/// A sink that drops every message (they still go to `tracing`).
#[derive(Clone, Copy, Debug, Default)]
pub struct DiscardMessages;

impl MessageSink for DiscardMessages {
    fn push(&mut self, _message: Message) {}
}

/// Sends `message` to `tracing` and to `sink`.
pub(crate) fn emit(sink: &mut dyn MessageSink, message: Message) {
    match message.severity {
        Severity::Info => {
            tracing::info!(target: "residency::placement", id = message.id.name(), element = message.element, "{}", message.message)
        }
        Severity::Warning => {
            tracing::warn!(target: "residency::placement", id = message.id.name(), element = message.element, "{}", message.message)
        }
    }
    sink.push(message);
}
