//! Ordering and lifetimes on the GPU: submissions and their timeline (`commands`), recording into
//! command buffers (`recording`), deferred destruction keyed on GPU progress (`retire`), per-resource
//! state and barriers (`tracking`), and transient memory aliased across passes (`transient`).

pub(crate) mod commands;
pub(crate) mod frame;
pub mod queries;
pub mod recording;
pub mod tracking;
pub(crate) mod upload;
