//! The `residency` command-line tool.

#![forbid(unsafe_code)]

mod alloc_info;
mod dump;
mod info;
mod ktx2;
mod live_place;
mod stream;
mod tour;
mod vt;

use clap::{Parser, Subcommand};
use std::process::ExitCode;

/// Where GPU resources live in memory: device capabilities, placement and residency on Vulkan.
#[derive(Debug, Parser)]
#[command(name = "residency", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Show each device's capabilities (memory, limits, sparse support, tile shapes), or a profile.
    Info(info::InfoArgs),
    /// Allocation info (size, alignment, per-element offsets) for resource descriptions read as JSON
    /// from stdin, by the tight placed-resource alignment rules.
    AllocInfo(alloc_info::AllocInfoArgs),
    /// Run a small workload on each device and dump its memory: VMA-format JSON, our JSON, an SVG heap map.
    Dump(dump::DumpArgs),
    /// Run every capability end to end on this machine's devices and write an HTML report.
    Tour(tour::TourArgs),
    /// Fly over a virtual texture streamed from shader feedback, compared with a fully resident render.
    Stream(stream::StreamArgs),
    /// Tiled virtual-texture files (`.rvt`): `residency vt build INPUT... -o FILE.rvt`.
    #[command(subcommand)]
    Vt(vt::VtCommand),
}

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("RESIDENCY_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Info(args) => info::run(&args),
        Command::AllocInfo(args) => alloc_info::run(&args),
        Command::Dump(args) => dump::run(&args),
        Command::Tour(args) => tour::run(&args),
        Command::Stream(args) => stream::run(&args),
        Command::Vt(command) => vt::run(&command),
    };
    match result {
        Ok(code) => code,
        Err(error) => {
            eprintln!("error: {error:#}");
            ExitCode::FAILURE
        }
    }
}
