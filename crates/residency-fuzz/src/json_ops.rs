//! The `profile_json` target: arbitrary text as the CLI's JSON inputs — a device profile
//! (`residency info --profile`, `residency alloc-info --profile`), a list of profiles (`info`),
//! and an `alloc-info` request (stdin). Each is a typed error or a value that the CLI's next
//! steps (printing, planning, laying out sparse images for the device) handle without panicking.

use crate::input::Input;
use crate::placement_ops::check_answer;
use crate::profiles;
use crate::tile_ops::check_layout;
use residency_core::format::Format;
use residency_core::placement::{
    answer_request, parse_request, DiscardMessages, FixedRequirements, Placement, PlacementEngine,
    RequirementsSource, ResourceDesc,
};
use residency_core::profile::DeviceProfile;
use residency_core::report::format_bytes;
use residency_core::tiles::{SparseDimension, SparseImageDesc, SparseImageLayout};

pub(crate) fn run(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    profile(&text);
    profile_list(&text);
    request(&text);
}

fn profile(text: &str) {
    match DeviceProfile::from_json(text) {
        Ok(p) => use_profile(&p),
        Err(e) => {
            let _ = e.to_string();
        }
    }
}

/// `residency info --profile` also reads a JSON array of profiles.
fn profile_list(text: &str) {
    if let Ok(values) = serde_json::from_str::<Vec<serde_json::Value>>(text.trim_start()) {
        for v in values.iter().take(4) {
            if let Ok(p) = DeviceProfile::from_json(&v.to_string()) {
                use_profile(&p);
            }
        }
    }
}

/// What the CLI and the library do with a profile once it is read.
fn use_profile(p: &DeviceProfile) {
    // Printed (`info`) and written back (`info --json`); written back, it reads the same.
    let json = p.to_json();
    let again = DeviceProfile::from_json(&json).expect("a written profile reads back");
    assert_eq!(&again, p, "profile changed in a JSON round trip");
    let _ = format_bytes(p.device_local_bytes());
    for h in &p.memory.heaps {
        let _ = (format_bytes(h.size), h.budget.map(format_bytes));
    }
    let _ = format_bytes(p.limits.sparse_address_space_size);

    // Offline planning (`alloc-info --profile`).
    let engine = PlacementEngine::new(p);
    let _ = engine.tier();
    let descs = [
        ResourceDesc::buffer(1000),
        ResourceDesc::buffer(65_537).tight(),
        ResourceDesc::texture_2d(Format::R8G8B8A8Unorm, 256, 256),
        ResourceDesc::texture_2d(Format::Bc7Unorm, 1024, 1024).tight(),
        ResourceDesc::texture_2d(Format::R8G8B8A8Unorm, 1024, 1024).with_mip_levels(1).with_samples(4),
    ];
    for placement in [Placement::Placed, Placement::Committed] {
        if let Ok(info) = engine.allocation_info(placement, &descs, &mut DiscardMessages) {
            check_answer(&info, descs.len());
        }
    }

    // Sparse layouts for the device (the streaming and `vt` commands).
    for caps in p.formats.iter().take(8) {
        for dimension in [SparseDimension::D2, SparseDimension::D3] {
            let mut descs = vec![match dimension {
                SparseDimension::D2 => SparseImageDesc::new_2d(caps.format, 4096, 4096),
                SparseDimension::D3 => SparseImageDesc::new_3d(caps.format, 256, 256, 64),
            }];
            let probe = match dimension {
                SparseDimension::D2 => caps.sparse_2d_probe,
                SparseDimension::D3 => caps.sparse_3d_probe,
            };
            if let Some(probe) = probe {
                // The probed image itself, so that the probe's mip tail is used.
                let d = probe.desc;
                let mut desc = SparseImageDesc::new_2d(caps.format, d.width, d.height);
                desc.dimension = dimension;
                desc.depth = d.depth;
                desc.array_layers = d.array_layers;
                desc.mip_levels = d.mip_levels;
                descs.push(desc);
            }
            for desc in descs {
                if let Ok(layout) = SparseImageLayout::for_device(&desc, p) {
                    check_layout(&layout, &mut Input::new(&[]));
                }
            }
        }
    }
}

fn request(text: &str) {
    if parse_request(text).is_err() {
        return;
    }
    let fixed = FixedRequirements::discrete();
    answer(&fixed, text);
    for p in profiles::all() {
        answer(p, text);
    }
}

/// `residency alloc-info`: the answer or the error report, printed as JSON.
fn answer<S: RequirementsSource>(source: &S, text: &str) {
    let engine = PlacementEngine::new(source);
    match answer_request(&engine, text, &mut DiscardMessages) {
        Ok(info) => {
            let count = parse_request(text).map(|r| r.descs.len()).unwrap_or_default();
            check_answer(&info, count);
            serde_json::to_string(&info).expect("allocation info serialises");
        }
        Err(report) => {
            serde_json::to_string(&report).expect("error reports serialise");
        }
    }
}
