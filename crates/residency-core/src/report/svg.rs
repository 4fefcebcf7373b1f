//! The report as an SVG heap map: per heap, one row per block, its ranges drawn to scale and
//! coloured as used (by resource kind and usage), alignment padding or free.
//!
//! The picture is self-contained (no scripts, fonts or links), deterministic, and each range carries
//! a `<title>` tooltip with its name, offset and size. By default each row spans the width (its own
//! scale, so a 256 KiB pool page is as readable as a 256 MiB heap); [`SvgScale::Shared`] draws every
//! row to one scale instead (the largest block spans the width) so block sizes compare at a glance,
//! as VMA's `GpuMemDumpVis.py` does.

use std::fmt::Write as _;

use super::model::{AllocationInfo, BlockReport, MemoryReport, RangeKind, ResourceType};
use super::stats::Statistics;

const WIDTH: f64 = 1200.0;
const MARGIN: f64 = 10.0;
const ROW: f64 = 22.0;
const LABEL: f64 = 16.0;
const HEADING: f64 = 22.0;
const GAP: f64 = 8.0;

/// What a colour in the map stands for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Swatch {
    class: &'static str,
    colour: &'static str,
    label: &'static str,
}

const VERTEX_INDEX: Swatch =
    Swatch { class: "vertex", colour: "#ff9494", label: "vertex / index / indirect buffer" };
const STORAGE: Swatch = Swatch { class: "storage", colour: "#ffbb79", label: "storage buffer" };
const UNIFORM: Swatch = Swatch { class: "uniform", colour: "#f2e600", label: "uniform buffer" };
const OTHER_BUFFER: Swatch = Swatch { class: "buffer", colour: "#ffffa5", label: "other buffer" };
const IMAGE: Swatch = Swatch { class: "image", colour: "#b3b3ff", label: "image" };
const UNKNOWN: Swatch = Swatch { class: "unknown", colour: "#afafaf", label: "unknown resource" };
const PADDING: Swatch = Swatch { class: "padding", colour: "#d6246e", label: "alignment padding" };
const FREE: Swatch = Swatch { class: "free", colour: "#ececec", label: "free" };

/// Every swatch, in legend order.
const LEGEND: [Swatch; 8] = [VERTEX_INDEX, STORAGE, UNIFORM, OTHER_BUFFER, IMAGE, UNKNOWN, PADDING, FREE];

fn swatch(info: &AllocationInfo) -> Swatch {
    // Vulkan buffer usage bits: UNIFORM_TEXEL 0x4, STORAGE_TEXEL 0x8, UNIFORM 0x10, STORAGE 0x20,
    // INDEX 0x40, VERTEX 0x80, INDIRECT 0x100.
    match info.resource {
        ResourceType::Buffer if info.usage & 0x1c0 != 0 => VERTEX_INDEX,
        ResourceType::Buffer if info.usage & 0x28 != 0 => STORAGE,
        ResourceType::Buffer if info.usage & 0x14 != 0 => UNIFORM,
        ResourceType::Buffer => OTHER_BUFFER,
        ResourceType::ImageLinear | ResourceType::ImageOptimal => IMAGE,
        ResourceType::Unknown => UNKNOWN,
    }
}

/// `1536` → `1.5 KiB`.
pub fn format_bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut value = n as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{n} B")
    } else {
        format!("{value:.1} {}", UNITS[unit])
    }
}

/// Escapes text for SVG content and attribute values.
fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c if c.is_control() => out.push(' '),
            c => out.push(c),
        }
    }
    out
}

fn percent(part: u64, whole: u64) -> f64 {
    if whole == 0 {
        0.0
    } else {
        part as f64 * 100.0 / whole as f64
    }
}

/// One row of the map: a block with the line of text above it.
struct Row<'a> {
    label: String,
    block: &'a BlockReport,
}

/// How rows of the heap map are scaled.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum SvgScale {
    /// Each block spans the width (the default).
    #[default]
    PerBlock,
    /// One scale for every row: the largest block spans the width.
    Shared,
}

/// Options of [`to_svg_with`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SvgOptions {
    /// How rows are scaled. Default: [`SvgScale::PerBlock`].
    pub scale: SvgScale,
}

impl SvgOptions {
    /// Sets the scale.
    pub fn with_scale(mut self, scale: SvgScale) -> Self {
        self.scale = scale;
        self
    }
}

/// The report as a self-contained SVG heap map with default options (see the module docs). Each
/// block is drawn as one `<rect class="block">` with its ranges inside as `<rect class="range …">`;
/// the legend lists every colour.
pub fn to_svg(report: &MemoryReport) -> String {
    to_svg_with(report, &SvgOptions::default())
}

/// The report as a self-contained SVG heap map (see [`to_svg`]).
pub fn to_svg_with(report: &MemoryReport, options: &SvgOptions) -> String {
    let stats = report.statistics();
    let max_block = report.blocks().map(|(_, _, b)| b.size).max().unwrap_or(0).max(1);
    let full = WIDTH - 2.0 * MARGIN;
    let scale_of = |block: &BlockReport| match options.scale {
        SvgScale::PerBlock => full / block.size.max(1) as f64,
        SvgScale::Shared => full / max_block as f64,
    };

    // Lay out: per heap a heading, then its memory types' general blocks and pool pages.
    let mut sections: Vec<(String, Vec<Row<'_>>)> = Vec::new();
    for heap in &report.heaps {
        let s = &stats.heaps[heap.index as usize];
        let flags = if heap.device_local { "device-local" } else { "host" };
        let heading = format!(
            "Heap {} ({flags}, {}): budget {}, usage {}, library {} — blocks {}: used {} ({:.1}%), padding {} ({:.1}%), free {} ({:.1}%)",
            heap.index,
            format_bytes(heap.size),
            format_bytes(heap.budget),
            format_bytes(heap.usage),
            format_bytes(heap.library_bytes),
            format_bytes(s.block_bytes),
            format_bytes(s.allocation_bytes),
            percent(s.allocation_bytes, s.block_bytes),
            format_bytes(s.padding_bytes),
            percent(s.padding_bytes, s.block_bytes),
            format_bytes(s.free_bytes),
            percent(s.free_bytes, s.block_bytes),
        );
        let mut rows = Vec::new();
        for t in report.memory_types.iter().filter(|t| t.heap_index == heap.index) {
            for block in &t.blocks {
                let owner = if block.dedicated { "dedicated" } else { "general" };
                rows.push(Row { label: row_label(&format!("type {} {owner}", t.index), block), block });
            }
            for pool in report.pools.iter().filter(|p| p.memory_type == t.index) {
                for block in &pool.blocks {
                    let owner = format!("type {} pool `{}`", t.index, pool.name);
                    rows.push(Row { label: row_label(&owner, block), block });
                }
            }
        }
        sections.push((heading, rows));
    }

    let title = format!(
        "Device {} — {} (Vulkan {}): {} blocks, {}, used {}, padding {}, free {}",
        report.device.index,
        report.device.name,
        report.device.api_version,
        stats.total.block_count,
        format_bytes(stats.total.block_bytes),
        format_bytes(stats.total.allocation_bytes),
        format_bytes(stats.total.padding_bytes),
        format_bytes(stats.total.free_bytes),
    );
    let rows: usize = sections.iter().map(|(_, r)| r.len()).sum();
    let legend_height = 2.0 * LABEL + GAP;
    let height = MARGIN
        + HEADING
        + sections.len() as f64 * (HEADING + GAP)
        + rows as f64 * (LABEL + ROW + GAP)
        + legend_height
        + MARGIN;

    let mut svg = String::new();
    let _ = writeln!(
        svg,
        r##"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH:.0}" height="{height:.0}" viewBox="0 0 {WIDTH:.0} {height:.0}" font-family="sans-serif" font-size="12">"##
    );
    let _ = writeln!(svg, "<title>{}</title>", escape(&title));
    let _ = writeln!(
        svg,
        r##"<rect class="background" x="0" y="0" width="{WIDTH:.0}" height="{height:.0}" fill="white"/>"##
    );
    let mut y = MARGIN;
    let _ = writeln!(
        svg,
        r##"<text x="{MARGIN}" y="{:.1}" font-weight="bold" font-size="14">{}</text>"##,
        y + 14.0,
        escape(&title)
    );
    y += HEADING;

    for (heading, rows) in &sections {
        let _ = writeln!(
            svg,
            r##"<text class="heap" x="{MARGIN}" y="{:.1}" font-weight="bold">{}</text>"##,
            y + 14.0,
            escape(heading)
        );
        y += HEADING + GAP;
        for row in rows {
            let _ = writeln!(
                svg,
                r##"<text x="{MARGIN}" y="{:.1}" fill="#555">{}</text>"##,
                y + 12.0,
                escape(&row.label)
            );
            y += LABEL;
            draw_block(&mut svg, row.block, MARGIN, y, scale_of(row.block));
            y += ROW + GAP;
        }
    }

    // Legend.
    let mut x = MARGIN;
    for s in LEGEND {
        let _ = writeln!(
            svg,
            r##"<rect class="legend {}" x="{x:.1}" y="{:.1}" width="14" height="14" fill="{}" stroke="#777"/><text x="{:.1}" y="{:.1}">{}</text>"##,
            s.class,
            y + 2.0,
            s.colour,
            x + 18.0,
            y + 13.0,
            s.label
        );
        x += 24.0 + 7.0 * s.label.len() as f64;
    }
    let _ = writeln!(
        svg,
        r##"<text x="{MARGIN}" y="{:.1}" fill="#555">{} Hover a range for its name, offset and size.</text>"##,
        y + LABEL + 14.0,
        match options.scale {
            SvgScale::PerBlock => "Scale: each row is one block, full width.".to_owned(),
            SvgScale::Shared =>
                format!("Scale: one for all rows; the widest is {}.", format_bytes(max_block)),
        }
    );
    svg.push_str("</svg>\n");
    svg
}

fn row_label(owner: &str, block: &BlockReport) -> String {
    let s = Statistics::of_block(block);
    format!(
        "{owner} block {} `{}`: {}, {} allocations, used {:.1}%, padding {}, largest free {}",
        block.id,
        block.name,
        format_bytes(block.size),
        s.allocation_count,
        percent(s.allocation_bytes, s.block_bytes),
        format_bytes(s.padding_bytes),
        format_bytes(s.free_range_size_max),
    )
}

fn draw_block(svg: &mut String, block: &BlockReport, x0: f64, y: f64, scale: f64) {
    let width = block.size as f64 * scale;
    let _ = writeln!(
        svg,
        r##"<rect class="block" x="{x0:.2}" y="{y:.1}" width="{width:.2}" height="{ROW:.0}" fill="{}" stroke="#333"><title>{}: {} B</title></rect>"##,
        FREE.colour,
        escape(&block.name),
        block.size
    );
    for range in &block.ranges {
        let (s, what) = match &range.kind {
            RangeKind::Allocation(info) => {
                let name = info.name.as_deref().unwrap_or("(unnamed)");
                (
                    swatch(info),
                    format!(
                        "{name} ({:?}, usage {:#x}, align {})",
                        info.resource, info.usage, info.alignment
                    ),
                )
            }
            RangeKind::Padding => (PADDING, "alignment padding".to_owned()),
            // The block's own rectangle already shows free space.
            RangeKind::Free => continue,
        };
        let x = x0 + range.offset as f64 * scale;
        let w = (range.size as f64 * scale).max(0.5);
        let _ = writeln!(
            svg,
            r##"<rect class="range {}" x="{x:.2}" y="{:.1}" width="{w:.2}" height="{:.0}" fill="{}"><title>{}: offset {}, {} B</title></rect>"##,
            s.class,
            y + 1.0,
            ROW - 2.0,
            s.colour,
            escape(&what),
            range.offset,
            range.size
        );
    }
}
