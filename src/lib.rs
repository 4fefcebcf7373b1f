//! `residency` manages where GPU resources live in memory, on Vulkan through `ash`.
//!
//! This facade re-exports the two layers:
//! - [`core`]: the rules and algorithms, free of GPU types and `unsafe` (tight placement, allocators,
//!   tile math, residency policy, device masks, device profiles).
//! - [`vulkan`]: the backend that applies them to real Vulkan devices.
//!
//! See `docs/ARCHITECTURE.md` for how a request flows through the crates.

pub use residency_core as core;
pub use residency_vulkan as vulkan;
