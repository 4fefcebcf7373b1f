//! Memory reports: where a device's memory went, as data, statistics, a VMA-format JSON dump and an
//! SVG heap map.
//!
//! - [`MemoryReport`]: one device → its heaps (size, budget, usage) → memory types → blocks
//!   (`VkDeviceMemory`) and their [`Range`]s (allocations with name, kind and usage; alignment
//!   padding; free space), plus buffer pools with their pages. [`DeviceSetReport`] holds one per
//!   device. The Vulkan backend builds them (`Device::memory_report`); here they are plain data.
//! - [`Statistics`]: per block, memory type, heap, pool, device and set, as exact sums
//!   ([`MemoryReport::statistics`], [`DeviceSetReport::total`]).
//! - [`to_vma_json`]: the format of VMA's `vmaBuildStatsString` with the detailed map, which VMA's
//!   `GpuMemDumpVis.py` draws. [`to_json`]: our own JSON (the model with its statistics).
//! - [`to_svg`]: our heap map, one row per block, used / padding / free to scale.
//! - [`CombinedView`] ([`DeviceSetReport::combined`]): every device side by side, and each named
//!   resource with its bytes on each device it lives on.
//!
//! ```
//! use residency_core::report::*;
//!
//! let info = AllocationInfo { name: Some("vertices".into()), resource: ResourceType::Buffer, usage: 0x80, alignment: 256 };
//! let used = UsedRange { offset: 256, footprint: 1024, bytes: 1000, info };
//! let block = BlockReport::from_used(0, "heap 0", 4096, [used]);
//! let stats = Statistics::of_block(&block);
//! assert_eq!((stats.allocation_bytes, stats.padding_bytes, stats.free_bytes), (1000, 24, 3072));
//! assert_eq!(stats.block_bytes, stats.allocation_bytes + stats.padding_bytes + stats.free_bytes);
//! ```

#![warn(missing_docs)]

pub mod charts;
mod combined;
mod model;
mod stats;
mod svg;
mod vma_json;

#[cfg(test)]
mod tests;

pub use combined::{CombinedView, DeviceColumn, ResourceRow};
pub use model::{
    AllocationInfo, BlockReport, DeviceInfo, DeviceSetReport, HeapReport, MemoryReport, MemoryTypeReport,
    PoolReport, Range, RangeKind, ReportError, ResourceType, UsedRange,
};
pub use stats::{ReportStatistics, Statistics};
pub use svg::{format_bytes, to_svg, to_svg_with, SvgOptions, SvgScale};
pub use vma_json::{to_vma_json, vma_type_name};

use serde::Serialize;

/// One device in [`to_json`]'s output: the report and its statistics.
#[derive(Serialize)]
struct DeviceJson<'a> {
    report: &'a MemoryReport,
    statistics: ReportStatistics,
}

/// [`to_json`]'s output.
#[derive(Serialize)]
struct SetJson<'a> {
    devices: Vec<DeviceJson<'a>>,
    total: Statistics,
}

/// Our own JSON: `{"devices": [{"report": …, "statistics": …}], "total": …}`, pretty-printed and
/// deterministic. The `report` objects deserialise back into [`MemoryReport`].
pub fn to_json(set: &DeviceSetReport) -> String {
    let value = SetJson {
        devices: set
            .devices
            .iter()
            .map(|report| DeviceJson { report, statistics: report.statistics() })
            .collect(),
        total: set.total(),
    };
    serde_json::to_string_pretty(&value).expect("reports serialise")
}
