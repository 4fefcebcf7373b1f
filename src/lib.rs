#![doc = include_str!("../README.md")]
//!
//! ## The crate
//!
//! This facade re-exports the two layers:
//! - [`core`]: the rules and algorithms, free of GPU types and `unsafe` (tight placement, allocators,
//!   tile math, residency policy, device masks, device profiles).
//! - [`vulkan`]: the backend that applies them to real Vulkan devices.
//!
//! The repository's `docs/ARCHITECTURE.md` shows how a request flows through the crates.

pub use residency_core as core;
pub use residency_vulkan as vulkan;
