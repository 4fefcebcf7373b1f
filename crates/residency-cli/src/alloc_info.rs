//! `residency alloc-info`: the tight placed-resource alignment engine on JSON from stdin.
//!
//! Input: `{"placement":"placed"|"committed","descs":[{"dimension":"buffer",...}]}`.
//! Output: `{"size","alignment","elements":[{"offset","size","alignment"}],"messages":[...]}`, or on a
//! validation error `{"error":{"code","id","message"}}` with exit status 2.
//!
//! With `--place` (a live device only) the resources are also created on the device, in order
//! (`Device::create_buffer` / `create_image`, placed in the general allocator's heaps under the
//! tight policy when the description has the tight flag, else legacy; buffers with storage and copy
//! usages), and the answer gains `"placed":[{"memory","offset","size"}]`: where the allocator put
//! each one (`memory` numbers the `VkDeviceMemory` objects in order of first use), then released.

use anyhow::Context;
use residency::core::placement::{answer_request, DiscardMessages, PlacementEngine};
use residency::vulkan::requirements::RequirementsSource;
use residency::vulkan::{DeviceIndex, DeviceProfile, DeviceSet, DeviceSetDesc};
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
    /// Also create the resources on the live device and report where the allocator put them.
    #[arg(long, conflicts_with = "profile")]
    place: bool,
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
    if args.place {
        return place(device, &input);
    }
    Ok(answer(&**device, &input))
}

/// The engine's answer, then the resources created on the device: the real offsets.
fn place(device: &residency::vulkan::Device, input: &str) -> anyhow::Result<ExitCode> {
    use residency::core::placement::parse_request;
    use residency::vulkan::BufferUsage;
    use residency::vulkan::PlacementPolicy;
    let engine = PlacementEngine::new(device);
    let info = match answer_request(&engine, input, &mut DiscardMessages) {
        Ok(info) => info,
        Err(report) => {
            println!("{}", serde_json::to_string(&report).expect("error reports serialise"));
            return Ok(ExitCode::from(2));
        }
    };
    let request = parse_request(input).expect("answered above, so it parses");
    let usage = BufferUsage::STORAGE | BufferUsage::COPY_SRC | BufferUsage::COPY_DST;
    let mut made = Vec::new();
    let mut memories = Vec::new();
    let mut placed = Vec::new();
    for (i, desc) in request.descs.iter().enumerate() {
        let policy = if desc.is_tight() { PlacementPolicy::Tight } else { PlacementPolicy::Legacy };
        let (resource, at) =
            crate::live_place::create(device, format!("alloc-info {i}"), desc, usage, policy)?;
        let memory = match memories.iter().position(|&m| m == at.memory) {
            Some(k) => k,
            None => {
                memories.push(at.memory);
                memories.len() - 1
            }
        };
        placed.push(serde_json::json!({"memory": memory, "offset": at.offset, "size": at.size}));
        made.push(resource);
    }
    drop(made);
    let mut out = serde_json::to_value(&info).expect("allocation info serialises");
    out["placed"] = serde_json::Value::Array(placed);
    println!("{out}");
    Ok(ExitCode::SUCCESS)
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
