//! Every device of a set side by side: each device's totals, and each named resource with its
//! bytes on every device it lives on (a multi-device resource has an instance of one name on each
//! device of its mask), so a set's reports read as one.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

use super::model::{DeviceSetReport, RangeKind, ResourceType};
use super::stats::Statistics;
use super::svg::format_bytes;

/// One device's column of a [`CombinedView`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeviceColumn {
    /// The device's index in its set.
    pub index: u32,
    /// Its name.
    pub name: String,
    /// Its totals (every heap).
    pub statistics: Statistics,
    /// The budget of its device-local heaps.
    pub device_local_budget: u64,
}

/// One named resource of a [`CombinedView`]: its bytes on each device (in the view's column order;
/// `None` where it has no instance).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResourceRow {
    /// The resource's name.
    pub name: String,
    /// What it is (of its first instance).
    pub resource: ResourceType,
    /// Bytes per device column; several allocations of one name on a device are summed.
    pub bytes: Vec<Option<u64>>,
}

impl ResourceRow {
    /// How many devices it lives on.
    pub fn device_count(&self) -> usize {
        self.bytes.iter().flatten().count()
    }

    /// Its bytes on every device together.
    pub fn total_bytes(&self) -> u64 {
        self.bytes.iter().flatten().sum()
    }
}

/// A device set's reports as one: [`DeviceSetReport::combined`].
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CombinedView {
    /// One column per device, in the set's order.
    pub devices: Vec<DeviceColumn>,
    /// Every named resource: those on more devices first, then by name.
    pub resources: Vec<ResourceRow>,
    /// The sum over every device (as [`DeviceSetReport::total`]).
    pub total: Statistics,
}

impl DeviceSetReport {
    /// Every device side by side (see [`CombinedView`]). Unnamed allocations count in the
    /// devices' statistics but have no row.
    pub fn combined(&self) -> CombinedView {
        let columns = self.devices.len();
        let devices: Vec<DeviceColumn> = self
            .devices
            .iter()
            .map(|r| DeviceColumn {
                index: r.device.index,
                name: r.device.name.clone(),
                statistics: r.statistics().total,
                device_local_budget: r.heaps.iter().filter(|h| h.device_local).map(|h| h.budget).sum(),
            })
            .collect();
        let mut rows: BTreeMap<String, ResourceRow> = BTreeMap::new();
        for (column, report) in self.devices.iter().enumerate() {
            for (_, _, block) in report.blocks() {
                for range in &block.ranges {
                    let RangeKind::Allocation(info) = &range.kind else { continue };
                    let Some(name) = &info.name else { continue };
                    let row = rows.entry(name.clone()).or_insert_with(|| ResourceRow {
                        name: name.clone(),
                        resource: info.resource,
                        bytes: vec![None; columns],
                    });
                    *row.bytes[column].get_or_insert(0) += range.size;
                }
            }
        }
        let mut resources: Vec<ResourceRow> = rows.into_values().collect();
        resources.sort_by(|a, b| b.device_count().cmp(&a.device_count()).then_with(|| a.name.cmp(&b.name)));
        CombinedView { devices, resources, total: self.total() }
    }
}

impl CombinedView {
    /// A text table: per device its blocks, used, padding, free and largest free range, then a
    /// total column; then each resource's bytes per device (`-` where it has no instance).
    pub fn to_text(&self) -> String {
        let mut header = format!("{:<28}", "");
        for d in &self.devices {
            header.push_str(&format!(" {:>12}", format!("device {}", d.index)));
        }
        header.push_str(&format!(" {:>12}", "total"));
        let mut out = vec![header];
        let row = |label: &str, f: &dyn Fn(&Statistics) -> u64, bytes: bool| {
            let cell = |v: u64| if bytes { format_bytes(v) } else { v.to_string() };
            let mut line = format!("{label:<28}");
            for d in &self.devices {
                line.push_str(&format!(" {:>12}", cell(f(&d.statistics))));
            }
            line.push_str(&format!(" {:>12}", cell(f(&self.total))));
            line
        };
        out.push(row("blocks", &|s| s.block_count, false));
        out.push(row("block bytes", &|s| s.block_bytes, true));
        out.push(row("allocations", &|s| s.allocation_count, false));
        out.push(row("used", &|s| s.allocation_bytes, true));
        out.push(row("padding", &|s| s.padding_bytes, true));
        out.push(row("free", &|s| s.free_bytes, true));
        out.push(row("largest free range", &|s| s.free_range_size_max, true));
        let mut budget = format!("{:<28}", "device-local budget");
        for d in &self.devices {
            budget.push_str(&format!(" {:>12}", format_bytes(d.device_local_budget)));
        }
        out.push(budget);
        out.push(format!("resources ({}, on most devices first):", self.resources.len()));
        for r in &self.resources {
            let mut name = r.name.clone();
            if name.chars().count() > 26 {
                name = name.chars().take(25).collect::<String>() + "…";
            }
            let mut line = format!("  {name:<26}");
            for b in &r.bytes {
                line.push_str(&format!(" {:>12}", b.map_or("-".to_owned(), format_bytes)));
            }
            line.push_str(&format!(" {:>12}", format_bytes(r.total_bytes())));
            out.push(line);
        }
        out.join("\n") + "\n"
    }
}
