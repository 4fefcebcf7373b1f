//! `residency tour`: every capability, end to end on this machine's devices, with an HTML report.
//!
//! Steps: the devices; tight vs legacy placement of a realistic scene; a buffer pool whose buffers
//! are placed resources with their own usage, checked by a compute shader; a partially resident
//! 16k texture (coalesced binds, residency codes, fallback to coarser mips); a short fly-over of a
//! virtual texture streamed from shader feedback, compared with a fully resident render; and, with more than one
//! device, one buffer on every device under a mask with a broadcast upload and work on each device,
//! and one texture streamed on every device through one decoded-tile cache, with one statistics
//! panel per device.
//! Each step prints what it shows; `--out DIR` gets `report.html` (self-contained: SVG heap maps and
//! charts inline) and `tour.json`.

mod html;
mod per_device;
mod scene;
mod steps;
mod streaming;

use anyhow::Context;
use residency::vulkan::{DeviceMask, DeviceSet, DeviceSetDesc};
use serde::Serialize;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

#[derive(Debug, clap::Args)]
pub struct TourArgs {
    /// Which devices: `all`, a list such as `0,1`, or a mask such as `0b11`.
    #[arg(long, default_value = "all")]
    devices: DeviceMask,
    /// Where to write `report.html` and `tour.json`.
    #[arg(long, value_name = "DIR", default_value = "residency-tour")]
    out: PathBuf,
    /// Print the summary as JSON instead of the explanations.
    #[arg(long)]
    json: bool,
    /// Open the selected physical devices repeatedly until there are at least N devices (one GPU,
    /// or lavapipe, opened twice runs the multi-device step).
    #[arg(long, value_name = "N", default_value_t = 0)]
    min_devices: u32,
}

/// One step of the tour, as the report shows it.
#[derive(Debug, Default, Serialize)]
pub struct Section {
    /// Its title.
    pub title: String,
    /// Paragraphs explaining what it showed (also printed).
    pub lines: Vec<String>,
    /// Inline SVGs (charts, heap maps).
    #[serde(skip)]
    pub svgs: Vec<String>,
    /// Figures for scripts.
    pub figures: serde_json::Value,
    /// Whether every check of the step passed.
    pub ok: bool,
    /// Seconds the step took.
    pub seconds: f64,
}

/// Everything the tour found.
#[derive(Debug, Serialize)]
pub struct Tour {
    /// The sections in order.
    pub sections: Vec<Section>,
    /// Device profiles, for the report's appendix.
    #[serde(skip)]
    pub profiles: Vec<String>,
    /// Validation problems seen (when the layer is on).
    pub validation_problems: u64,
    /// Whether validation was on.
    pub validation: String,
}

pub fn run(args: &TourArgs) -> anyhow::Result<ExitCode> {
    let set = DeviceSet::new(
        &DeviceSetDesc::default().with_devices(args.devices).with_min_devices(args.min_devices),
    )?;
    let say = |text: &str| {
        if !args.json {
            println!("{text}");
        }
    };
    say(&format!(
        "residency tour: {} device(s), validation {:?} (set RESIDENCY_VALIDATION=sync to run it under the Khronos layer)\n",
        set.devices().len(),
        set.validation()
    ));
    type Step = fn(&DeviceSet) -> anyhow::Result<Section>;
    let steps: [(&str, Step); 6] = [
        ("devices", steps::devices),
        ("placement", steps::placement),
        ("pool", steps::pool),
        ("sparse", steps::sparse),
        ("streaming", streaming::streaming),
        ("multi-device", steps::multi_device),
    ];
    let mut sections = Vec::new();
    for (i, (name, step)) in steps.iter().enumerate() {
        let started = Instant::now();
        say(&format!("[{}/{}] {name} …", i + 1, steps.len()));
        let mut section = step(&set).with_context(|| format!("tour step `{name}`"))?;
        section.seconds = started.elapsed().as_secs_f64();
        say(&format!(
            "== {} ({:.1} s) {}",
            section.title,
            section.seconds,
            if section.ok { "✓" } else { "✗ CHECK FAILED" }
        ));
        for line in &section.lines {
            say(&format!("   {line}"));
        }
        say("");
        sections.push(section);
    }
    let tour = Tour {
        profiles: set.devices().iter().map(|d| d.profile().to_json()).collect(),
        validation_problems: set.validation_log().problem_count(),
        validation: format!("{:?}", set.validation()),
        sections,
    };
    std::fs::create_dir_all(&args.out).with_context(|| format!("creating {}", args.out.display()))?;
    let html_path = args.out.join("report.html");
    std::fs::write(&html_path, html::render(&tour))
        .with_context(|| format!("writing {}", html_path.display()))?;
    let json = serde_json::to_string_pretty(&tour)?;
    std::fs::write(args.out.join("tour.json"), &json)?;
    let ok = tour.sections.iter().all(|s| s.ok) && tour.validation_problems == 0;
    if args.json {
        println!("{json}");
    } else {
        println!("report: {} (open it in a browser; no server needed)", html_path.display());
        println!(
            "{}",
            if ok { "tour complete: every check passed" } else { "tour complete: SOME CHECKS FAILED" }
        );
    }
    Ok(if ok { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}
