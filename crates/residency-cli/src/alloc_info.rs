//! `residency alloc-info`: the tight placed-resource alignment engine on JSON from stdin.
//!
//! Input: `{"placement":"placed"|"committed","descs":[{"dimension":"buffer",...}]}`.
//! Output: `{"size","alignment","elements":[{"offset","size","alignment"}],"messages":[...]}`, or on a
//! validation error `{"error":{"code","id","message"}}` with exit status 2.

use anyhow::Context;
use residency::core::device_mask::DeviceIndex;
use residency::core::placement::{answer_request, DiscardMessages, PlacementEngine, RequirementsSource};
use residency::core::profile::DeviceProfile;
use residency::vulkan::{DeviceSet, DeviceSetDesc};
use std::io::Read;
use std::process::ExitCode;

#[derive(Debug, clap::Args)]
pub struct AllocInfoArgs {
    /// Ask the live device of this index (default 0).
    #[arg(long, conflicts_with = "profile")]
    device: Option<u32>,
    /// Answer for the device captured in this profile instead of a live device (offline planning).
    #[arg(long, value_name = "FILE")]
    profile: Option<std::path::PathBuf>,
}

pub fn run(args: &AllocInfoArgs) -> anyhow::Result<ExitCode> {
    let mut input = String::new();
    std::io::stdin().read_to_string(&mut input).context("reading the request from stdin")?;
    if let Some(path) = &args.profile {
        let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        let profile = DeviceProfile::from_json(&text).with_context(|| path.display().to_string())?;
        return Ok(answer(&profile, &input));
    }
    let index = args.device.unwrap_or(0);
    let device_index = DeviceIndex::new(index)
        .with_context(|| format!("device index {index} is beyond the 32 a mask can name"))?;
    let set = DeviceSet::new(&DeviceSetDesc::default().with_devices(device_index.mask()))?;
    let device = set.device(device_index).context("the device was not opened")?;
    Ok(answer(&**device, &input))
}

fn answer<S: RequirementsSource>(source: S, input: &str) -> ExitCode {
    let engine = PlacementEngine::new(source);
    match answer_request(&engine, input, &mut DiscardMessages) {
        Ok(info) => {
            println!("{}", serde_json::to_string(&info).expect("allocation info serialises"));
            ExitCode::SUCCESS
        }
        Err(report) => {
            println!("{}", serde_json::to_string(&report).expect("error reports serialise"));
            ExitCode::from(2)
        }
    }
}
