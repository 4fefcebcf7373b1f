#![doc = include_str!("../README.md")]
//!
//! ## The crate
//!
//! This facade re-exports the two layers:
//! - [`core`]: the rules and algorithms, free of GPU types and `unsafe` (tight placement, allocators,
//!   tile math, residency policy, device masks, device profiles).
//! - [`vulkan`]: the backend that applies them to real Vulkan devices.
//!
//! A program that drives the GPU imports from [`vulkan`] alone: the backend re-exports, once each,
//! every core type its signatures take (see its crate docs, "The core's types"), so
//! `use residency::vulkan::{BufferUsage, Format}` and `use residency::vulkan::sparse::SparseImageDesc`
//! are the paths to write. [`core`] is the whole GPU-free crate, for what needs no device and no
//! backend call takes: the placement engine answering requests from a captured profile, `.rvt`
//! writing, report rendering to JSON, SVG and charts, tile math.
//!
//! The facade therefore reaches a re-exported core type by two paths, `core::format::Format` and
//! `vulkan::Format` (the same type, not a copy). That is kept on purpose: the core stays whole
//! behind one name so that code running without a device finds every rule in the module that
//! defines it, and a core-only program needs no backend; splitting `core` into its device-free
//! remainder would cut its modules in half (`tiles` holds both `SparseImageDesc`, which the
//! backend takes, and the tile math it does not). Inside `vulkan` every item has one path; the
//! repository's tests/imports.rs checks that the examples and the CLI use the backend's path.
//!
//! The repository's `docs/ARCHITECTURE.md` shows how a request flows through the crates.

pub use residency_core as core;
pub use residency_vulkan as vulkan;
