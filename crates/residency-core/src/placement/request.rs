//! The JSON request and error forms of `residency alloc-info`.
//!
//! Request (stdin): `{"placement":"placed"|"committed","descs":[ResourceDesc, …]}`; `placement` defaults
//! to `placed`. Answer (stdout): [`AllocationInfo`] serialised,
//! `{"size","alignment","elements":[{"offset","size","alignment"}],"messages":[{"severity","id","message","element"}]}`.
//! Error: [`ErrorReport`], `{"error":{"code","id","message","element"}}`.

use super::desc::{Placement, ResourceDesc};
use super::engine::{AllocationInfo, PlacementEngine};
use super::messages::MessageSink;
use super::requirements::RequirementsSource;
use super::validation::{ErrorCode, PlacementError};
use serde::{Deserialize, Serialize};

/// A parsed request.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AllocInfoRequest {
    /// Placed (default) or committed.
    #[serde(default)]
    pub placement: Placement,
    /// The descriptions, in layout order.
    pub descs: Vec<ResourceDesc>,
}

/// The request text could not be read.
#[derive(Debug, thiserror::Error)]
pub enum RequestError {
    /// Not JSON at all (syntax error or truncated input).
    #[error("malformed JSON at line {line}, column {column}: {message}")]
    Syntax {
        /// 1-based line.
        line: usize,
        /// 1-based column.
        column: usize,
        /// serde_json's explanation.
        message: String,
    },
    /// JSON, but not a request (missing or unknown field, wrong type, unknown name).
    #[error("not an alloc-info request at line {line}, column {column}: {message} (expected {{\"placement\":\"placed\"|\"committed\",\"descs\":[{{\"dimension\":…,\"width\":…}}]}})")]
    Shape {
        /// 1-based line.
        line: usize,
        /// 1-based column.
        column: usize,
        /// serde_json's explanation.
        message: String,
    },
}

impl RequestError {
    /// Always [`ErrorCode::MalformedRequest`].
    pub fn code(&self) -> ErrorCode {
        ErrorCode::MalformedRequest
    }

    /// `MALFORMED_JSON` or `INVALID_REQUEST`.
    pub fn id(&self) -> &'static str {
        match self {
            RequestError::Syntax { .. } => "MALFORMED_JSON",
            RequestError::Shape { .. } => "INVALID_REQUEST",
        }
    }
}

/// Parses a request. Never panics; every failure is a [`RequestError`] with its position.
pub fn parse_request(text: &str) -> Result<AllocInfoRequest, RequestError> {
    serde_json::from_str(text).map_err(|e| {
        let (line, column) = (e.line(), e.column());
        let message = e.to_string();
        match e.classify() {
            serde_json::error::Category::Data => RequestError::Shape { line, column, message },
            _ => RequestError::Syntax { line, column, message },
        }
    })
}

/// The error form: `{"error":{"code":"INVALID_ARG","id":"…","message":"…","element":N}}`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ErrorReport {
    /// The error.
    pub error: ErrorBody,
}

/// The body of an [`ErrorReport`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ErrorBody {
    /// The error class.
    pub code: ErrorCode,
    /// The stable id.
    pub id: &'static str,
    /// The message with the numbers.
    pub message: String,
    /// The offending description's index, when the error is about one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub element: Option<usize>,
}

impl From<&PlacementError> for ErrorReport {
    fn from(e: &PlacementError) -> Self {
        ErrorReport {
            error: ErrorBody { code: e.code(), id: e.id(), message: e.to_string(), element: Some(e.element) },
        }
    }
}

impl From<&RequestError> for ErrorReport {
    fn from(e: &RequestError) -> Self {
        ErrorReport { error: ErrorBody { code: e.code(), id: e.id(), message: e.to_string(), element: None } }
    }
}

/// Parses `text` and answers it: what `residency alloc-info` prints, either way.
pub fn answer_request<S: RequirementsSource>(
    engine: &PlacementEngine<S>,
    text: &str,
    sink: &mut dyn MessageSink,
) -> Result<AllocationInfo, ErrorReport> {
    let request = parse_request(text).map_err(|e| ErrorReport::from(&e))?;
    engine.allocation_info(request.placement, &request.descs, sink).map_err(|e| ErrorReport::from(&e))
}
