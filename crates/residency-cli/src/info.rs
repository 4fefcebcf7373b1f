//! `residency info`: device capabilities as a table or as device-profile JSON.

use anyhow::Context;
use residency::vulkan::{DeviceMask, DeviceProfile, DeviceSet, DeviceSetDesc};
use std::fmt::Write as _;
use std::process::ExitCode;

#[derive(Debug, clap::Args)]
pub struct InfoArgs {
    /// Print the device profile(s) as JSON (a list; one object with a single `--devices` index).
    #[arg(long)]
    json: bool,
    /// Read a device profile (one object or a list) from FILE instead of opening devices.
    #[arg(long, value_name = "FILE")]
    profile: Option<std::path::PathBuf>,
    /// Which devices: `all`, a list such as `0,1`, or a mask such as `0b11`.
    #[arg(long, default_value = "all")]
    devices: DeviceMask,
}

pub fn run(args: &InfoArgs) -> anyhow::Result<ExitCode> {
    let profiles = match &args.profile {
        Some(path) => read_profiles(path)?,
        None => {
            let set = DeviceSet::new(&DeviceSetDesc::default().with_devices(args.devices))?;
            set.devices().iter().map(|d| d.profile().clone()).collect()
        }
    };
    if args.json {
        let text = if profiles.len() == 1 && args.devices.count() == 1 {
            serde_json::to_string_pretty(&profiles[0])?
        } else {
            serde_json::to_string_pretty(&profiles)?
        };
        println!("{text}");
    } else {
        for (i, profile) in profiles.iter().enumerate() {
            print!("{}", table(i, profile));
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn read_profiles(path: &std::path::Path) -> anyhow::Result<Vec<DeviceProfile>> {
    let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let trimmed = text.trim_start();
    if trimmed.starts_with('[') {
        let values: Vec<serde_json::Value> =
            serde_json::from_str(trimmed).with_context(|| format!("{} is not JSON", path.display()))?;
        values
            .iter()
            .map(|v| DeviceProfile::from_json(&v.to_string()).with_context(|| path.display().to_string()))
            .collect()
    } else {
        Ok(vec![DeviceProfile::from_json(&text).with_context(|| path.display().to_string())?])
    }
}

fn bytes(n: u64) -> String {
    residency::core::report::format_bytes(n)
}

fn yes(b: bool) -> &'static str {
    if b {
        "yes"
    } else {
        "no"
    }
}

/// The readable table of one profile.
pub fn table(index: usize, p: &DeviceProfile) -> String {
    let mut s = String::new();
    let id = &p.identity;
    let _ = writeln!(s, "Device {index}: {} ({:?})", id.name, id.device_type);
    let _ = writeln!(s, "  Vulkan {}, driver {} {}", id.api_version, id.driver_name, id.driver_info);
    let _ =
        writeln!(s, "  vendor {:#06x} device {:#06x}  uuid {}", id.vendor_id, id.device_id, id.device_uuid);
    let _ = writeln!(s, "  Memory heaps:");
    for (i, h) in p.memory.heaps.iter().enumerate() {
        let budget = h.budget.map_or_else(|| "-".to_owned(), bytes);
        let _ = writeln!(
            s,
            "    heap {i}: {:>10}  device-local {:3}  budget {budget}",
            bytes(h.size),
            yes(h.device_local)
        );
    }
    let _ = writeln!(s, "  Memory types:");
    for (i, t) in p.memory.types.iter().enumerate() {
        let f = t.flags;
        let flags: Vec<&str> = [
            (f.device_local, "device-local"),
            (f.host_visible, "host-visible"),
            (f.host_coherent, "host-coherent"),
            (f.host_cached, "host-cached"),
            (f.lazily_allocated, "lazy"),
            (f.protected, "protected"),
        ]
        .iter()
        .filter_map(|&(on, name)| on.then_some(name))
        .collect();
        let _ = writeln!(s, "    type {i:2}: heap {}  {}", t.heap_index, flags.join(", "));
    }
    let l = &p.limits;
    let _ = writeln!(s, "  Limits:");
    let _ = writeln!(s, "    bufferImageGranularity       {}", bytes(l.buffer_image_granularity));
    let _ = writeln!(
        s,
        "    min offset alignment         uniform {} / storage {} / texel {}",
        l.min_uniform_buffer_offset_alignment,
        l.min_storage_buffer_offset_alignment,
        l.min_texel_buffer_offset_alignment
    );
    let _ = writeln!(s, "    nonCoherentAtomSize          {}", l.non_coherent_atom_size);
    let _ = writeln!(s, "    maxMemoryAllocationCount     {}", l.max_memory_allocation_count);
    let _ = writeln!(s, "    maxMemoryAllocationSize      {}", bytes(l.max_memory_allocation_size));
    let _ = writeln!(s, "    sparseAddressSpaceSize       {}", bytes(l.sparse_address_space_size));
    let sp = &p.sparse;
    let _ = writeln!(s, "  Sparse:");
    let _ = writeln!(
        s,
        "    binding {}  residency buffer {} / image2D {} / image3D {} / aliased {}",
        yes(sp.binding),
        yes(sp.residency_buffer),
        yes(sp.residency_image_2d),
        yes(sp.residency_image_3d),
        yes(sp.residency_aliased)
    );
    let _ = writeln!(
        s,
        "    shaderResourceResidency {}  shaderResourceMinLod {}  nonResidentStrict {}  standard 2D/3D shapes {}/{}",
        yes(sp.shader_resource_residency),
        yes(sp.shader_resource_min_lod),
        yes(sp.non_resident_strict),
        yes(sp.standard_2d_block_shape),
        yes(sp.standard_3d_block_shape)
    );
    let queue = sp.queue_family.map_or_else(|| "none".to_owned(), |f| format!("family {f}"));
    let _ = writeln!(s, "    sparse queue {queue} (separate family: {})", yes(sp.separate_queue_family));
    let _ = writeln!(s, "    memory budget extension {}", yes(p.extensions.memory_budget));
    let _ = writeln!(s, "  Formats (sparse tile shape 2D | 3D, mip tail of the probed image):");
    for f in &p.formats {
        let shape = |t: Option<residency::core::profile::SparseTileShape>| {
            t.map_or_else(
                || "-".to_owned(),
                |t| format!("{}x{}x{}", t.tile_extent[0], t.tile_extent[1], t.tile_extent[2]),
            )
        };
        let tail = f.sparse_2d_probe.map_or_else(
            || "-".to_owned(),
            |t| {
                format!(
                    "{}x{} from lod {} ({})",
                    t.desc.width,
                    t.desc.height,
                    t.mip_tail_first_lod,
                    bytes(t.mip_tail_size)
                )
            },
        );
        let _ = writeln!(
            s,
            "    {:20} {:>12} | {:>12}  {tail}",
            f.format.name(),
            shape(f.sparse_2d),
            shape(f.sparse_3d)
        );
    }
    s
}
