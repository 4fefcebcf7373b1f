//! The tour's steps. Each runs real work on the devices and returns what it showed.

use super::scene::scene;
use super::Section;
use anyhow::Context;
use residency::core::placement::{allocation_info, DiscardMessages};
use residency::core::report::charts::bar_chart;
use residency::core::report::{format_bytes, to_svg_with, SvgOptions};
use residency::core::tiles::{plan_binds, Coalesce};
use residency::vulkan::ash::vk;
use residency::vulkan::compute::{Binding, ComputeProgram};
use residency::vulkan::multi::work::{BufferView, CopyItem, MultiSubmitter, WorkItem};
use residency::vulkan::multi::{MultiBufferPool, MultiDevice, MultiUploader};
use residency::vulkan::shaders;
use residency::vulkan::sparse::{
    BindPlanOptions, MinLodMap, SparseImage, SparseImageDesc, SparseTilePool, TexelRegion, TilePoolDesc,
};
use residency::vulkan::{
    BufferDesc, BufferInit, BufferPool, BufferPoolDesc, BufferPoolUsage, BufferUsage, Device, DeviceMask,
    DeviceSet, Filter, Format, ImageRegion, MemoryIntent, Placement, PlacementPolicy, ReportSources,
    ResourceDesc, Uploader,
};
use serde_json::json;
use std::sync::Arc;

/// Step 1: what each device is.
pub fn devices(set: &DeviceSet) -> anyhow::Result<Section> {
    let mut lines = Vec::new();
    let mut figures = Vec::new();
    for d in set.devices() {
        let p = d.profile();
        let rgba = p.format(Format::R8G8B8A8Unorm);
        let tile = rgba
            .and_then(|f| f.sparse_2d)
            .map_or("none".to_owned(), |t| format!("{}x{}", t.tile_extent[0], t.tile_extent[1]));
        let tail = rgba.and_then(|f| f.sparse_2d_probe).map_or("-".to_owned(), |t| {
            if t.mip_tail_size == 0 {
                "none".to_owned()
            } else {
                format!("from LOD {}", t.mip_tail_first_lod)
            }
        });
        lines.push(format!(
            "device {}: {} ({}, Vulkan {}), {} device-local, bufferImageGranularity {} B, sparse residency {}, RGBA8 tile {tile}, 16k mip tail {tail}",
            d.index().get(),
            p.identity.name,
            p.identity.driver_info,
            p.identity.api_version,
            format_bytes(p.device_local_bytes()),
            p.limits.buffer_image_granularity,
            if p.sparse.supports_residency_2d() { "yes" } else { "no" },
        ));
        figures.push(json!({"index": d.index().get(), "name": p.identity.name, "driver": p.identity.driver_info,
            "granularity": p.limits.buffer_image_granularity, "sparse": p.sparse.supports_residency_2d(), "rgba8_tile": tile}));
    }
    lines.push("`residency info` prints the whole table; `residency info --json` the device profile.".into());
    Ok(Section { title: "Devices".into(), lines, figures: json!(figures), ok: true, ..Section::default() })
}

/// Step 2: the scene placed with and without tight alignment, per class, on device 0.
pub fn placement(set: &DeviceSet) -> anyhow::Result<Section> {
    let device: &Device = &set.devices()[0];
    let classes = scene();
    let mut rows = Vec::new();
    let (mut legacy_total, mut tight_total) = (0u64, 0u64);
    for class in &classes {
        // Pack each class in one heap, largest alignment first (the least padding the array rule allows).
        let layout = |tight: bool| -> anyhow::Result<(u64, u64)> {
            let mut descs: Vec<ResourceDesc> =
                class.descs.iter().map(|d| if tight { d.tight() } else { *d }).collect();
            let info = allocation_info(device, Placement::Placed, &descs, &mut DiscardMessages)?;
            let requested: u64 = info.elements.iter().map(|e| e.size).sum();
            let mut order: Vec<usize> = (0..descs.len()).collect();
            order.sort_by_key(|&i| std::cmp::Reverse(info.elements[i].alignment));
            descs = order.iter().map(|&i| descs[i]).collect();
            let packed = allocation_info(device, Placement::Placed, &descs, &mut DiscardMessages)?;
            Ok((requested, packed.size))
        };
        let (requested, legacy) = layout(false).with_context(|| class.name)?;
        let (_, tight) = layout(true).with_context(|| class.name)?;
        legacy_total += legacy;
        tight_total += tight;
        rows.push((class.name, class.descs.len(), requested, legacy, tight));
    }
    let mut lines = vec![format!(
        "{} resources of a game level placed in heaps on {} (the driver's own requirements):",
        rows.iter().map(|r| r.1).sum::<usize>(),
        device.name()
    )];
    for (name, count, requested, legacy, tight) in &rows {
        lines.push(format!(
            "{name:<20} {count:>5} resources  requested {:>10}  legacy {:>10}  tight {:>10}  saved {:>10}",
            format_bytes(*requested),
            format_bytes(*legacy),
            format_bytes(*tight),
            format_bytes(legacy.saturating_sub(*tight))
        ));
    }
    lines.push(format!(
        "total: legacy {} → tight {}: {} saved ({:.1} %). Tight placement aligns buffers to at most 256 B and small textures to 4 KiB instead of 64 KiB, as D3D12's tight-alignment rules specify.",
        format_bytes(legacy_total),
        format_bytes(tight_total),
        format_bytes(legacy_total - tight_total),
        100.0 * (legacy_total - tight_total) as f64 / legacy_total as f64
    ));
    // What the allocator really did: the small classes created on the device under each policy,
    // their real offsets in the general allocator's heaps.
    let mut live = Vec::new();
    for class in classes.iter().filter(|c| LIVE_CLASSES.contains(&c.name)) {
        let legacy = place_for_real(device, class, PlacementPolicy::Legacy).with_context(|| class.name)?;
        let tight = place_for_real(device, class, PlacementPolicy::Tight).with_context(|| class.name)?;
        let engine = rows.iter().find(|r| r.0 == class.name).map(|r| (r.3, r.4)).unwrap_or_default();
        lines.push(format!(
            "{:<20} placed on the device: legacy spans {:>10} (engine {:>10}), tight {:>10} (engine {:>10}); every offset a multiple of {} B legacy, {} B tight",
            class.name,
            format_bytes(legacy.span),
            format_bytes(engine.0),
            format_bytes(tight.span),
            format_bytes(engine.1),
            legacy.max_alignment,
            tight.max_alignment
        ));
        live.push(json!({"class": class.name, "count": class.descs.len(),
            "legacy_span": legacy.span, "tight_span": tight.span,
            "legacy_max_alignment": legacy.max_alignment, "tight_max_alignment": tight.max_alignment,
            "engine_legacy": engine.0, "engine_tight": engine.1}));
    }
    let live_ok = live.iter().all(|l| l["tight_span"].as_u64() < l["legacy_span"].as_u64());
    let mib = |b: u64| b as f64 / (1 << 20) as f64;
    let names: Vec<&str> = rows.iter().map(|r| r.0).collect();
    let chart = bar_chart(
        "chart-placement",
        "Heap bytes per class: legacy vs tight placement",
        " MiB",
        &names,
        &["requested", "legacy", "tight"],
        &[
            rows.iter().map(|r| mib(r.2)).collect(),
            rows.iter().map(|r| mib(r.3)).collect(),
            rows.iter().map(|r| mib(r.4)).collect(),
        ],
    );
    let figures = json!({"legacy_bytes": legacy_total, "tight_bytes": tight_total,
        "classes": rows.iter().map(|r| json!({"class": r.0, "count": r.1, "requested": r.2, "legacy": r.3, "tight": r.4})).collect::<Vec<_>>(),
        "placed": live});
    Ok(Section {
        title: "Tight vs legacy placement".into(),
        lines,
        svgs: vec![chart],
        figures,
        ok: tight_total < legacy_total && live_ok,
        ..Section::default()
    })
}

/// The scene's classes small enough to create for real in the tour (thousands of small buffers
/// and textures: where the policy matters most).
const LIVE_CLASSES: [&str; 3] = ["small textures", "constant buffers", "structured buffers"];

/// What the general allocator did with a class.
struct Placed {
    /// Bytes from the first resource's offset to the last one's end, summed over the heaps used.
    span: u64,
    /// The largest power of two dividing every offset (the coarsest alignment seen).
    max_alignment: u64,
}

/// Creates a class's resources with `policy` on `device` (placed in the general allocator's
/// heaps, as `create_buffer` / `create_image` place them), reads their real offsets, releases
/// them.
fn place_for_real(
    device: &Device,
    class: &super::scene::Class,
    policy: PlacementPolicy,
) -> anyhow::Result<Placed> {
    let usage = if class.name == "constant buffers" { BufferUsage::UNIFORM } else { BufferUsage::STORAGE };
    let mut made = Vec::new();
    let mut places = Vec::new();
    for (i, d) in class.descs.iter().enumerate() {
        let (resource, at) =
            crate::live_place::create(device, format!("tour {} {i}", class.name), d, usage, policy)?;
        made.push(resource);
        places.push(at);
    }
    drop(made);
    device.wait_submitted()?;
    Ok(Placed {
        span: crate::live_place::span(&places),
        max_alignment: crate::live_place::common_alignment(&places),
    })
}

/// Step 3: buffers of different usages placed side by side on one pool page, each its own VkBuffer.
pub fn pool(set: &DeviceSet) -> anyhow::Result<Section> {
    let device = Arc::clone(&set.devices()[0]);
    let pool = BufferPool::new(
        Arc::clone(&device),
        BufferPoolDesc::new("tour pool", BufferPoolUsage::Unknown).with_page_size(1 << 20),
    )?;
    let n = 4096u32;
    let dst = BufferUsage::COPY_DST;
    let vertices = pool.init_buffer(
        &BufferInit::new("vertices", u64::from(n) * 16)
            .with_usage(BufferUsage::VERTEX | BufferUsage::STORAGE | dst),
    )?;
    let indices = pool.init_buffer(
        &BufferInit::new("indices", u64::from(n) * 4)
            .with_usage(BufferUsage::INDEX | BufferUsage::STORAGE | dst),
    )?;
    let params = pool.init_buffer(
        &BufferInit::new("constants", 48).with_usage(BufferUsage::UNIFORM | dst).with_alignment(256),
    )?;
    let results = pool.init_buffer(
        &BufferInit::new("culling output", u64::from(n) * 16)
            .with_usage(BufferUsage::STORAGE | BufferUsage::COPY_SRC),
    )?;
    let mut extra = Vec::new();
    for (i, (usage, size)) in [
        (BufferUsage::INDIRECT | BufferUsage::STORAGE, 4096u64),
        (BufferUsage::UNIFORM, 200),
        (BufferUsage::STORAGE, 33_000),
        (BufferUsage::VERTEX, 120_000),
        (BufferUsage::UNIFORM_TEXEL, 8192),
        (BufferUsage::INDEX, 30_000),
    ]
    .into_iter()
    .enumerate()
    {
        extra.push(pool.init_buffer(&BufferInit::new(format!("scene buffer {i}"), size).with_usage(usage))?);
    }
    let uploader = Uploader::new(&device, "tour", 4 << 20)?;
    let verts: Vec<u8> = (0..n * 4).flat_map(|i| (i as f32).to_le_bytes()).collect();
    let idx: Vec<u8> = (0..n).flat_map(|i| ((i * 7919) % n).to_le_bytes()).collect();
    let mut consts: Vec<u8> =
        [2.0f32, 2.0, 2.0, 2.0, 1.0, 1.0, 1.0, 1.0].iter().flat_map(|f| f.to_le_bytes()).collect();
    consts.extend_from_slice(&n.to_le_bytes());
    consts.resize(48, 0);
    uploader.write_buffer(&vertices, 0, &verts)?;
    uploader.write_buffer(&indices, 0, &idx)?;
    uploader.write_buffer(&params, 0, &consts)?;
    uploader.flush()?;
    let program = ComputeProgram::new(&device, "placed_buffers.comp", &shaders::PLACED_BUFFERS, 1)?;
    let set_ = program.descriptor_set(&[
        Binding::Buffer(&vertices),
        Binding::Buffer(&indices),
        Binding::Buffer(&params),
        Binding::Buffer(&results),
    ])?;
    let groups = [n.div_ceil(64), 1, 1];
    let mut dispatched = Ok(());
    device.submit_compute("tour compute", |rec| dispatched = program.dispatch(rec, &set_, &[], groups))?;
    dispatched?;
    let out = device.read_back(&results, 0, u64::from(n) * 16)?;
    let correct = (0..n as usize)
        .filter(|&i| {
            let src = ((i as u32 * 7919) % n) as usize;
            (0..4).all(|c| {
                let v = f32::from_le_bytes(
                    out[i * 16 + c * 4..i * 16 + c * 4 + 4].try_into().unwrap_or_default(),
                );
                v == (src * 4 + c) as f32 * 2.0 + 1.0
            })
        })
        .count();
    let all: Vec<&residency::vulkan::Buffer> =
        [&vertices, &indices, &params, &results].into_iter().chain(extra.iter()).collect();
    let page = vertices.memory().0;
    let same_page = all.iter().all(|b| b.memory().0 == page);
    let report =
        device.memory_report_with(&ReportSources::new().with_pool(&pool).with_buffers(all.iter().copied()));
    let heap_map =
        to_svg_with(&report, &SvgOptions::default()).replacen("<svg ", r#"<svg id="heap-map" "#, 1);
    let stats = pool.stats();
    let mut lines = vec![format!(
        "A pool with unknown bind flags: its page is raw memory and each of these {} buffers is its own VkBuffer, placed at its own offset with its own usage and debug name:",
        all.len()
    )];
    for b in &all {
        lines.push(format!(
            "  {:<16} offset {:>7}  {:>8}  {:?}",
            b.name(),
            b.memory().1,
            format_bytes(b.size()),
            b.usage()
        ));
    }
    lines.push(format!(
        "all on one page: {same_page}; page {} with {} used. A compute shader read vertices, indices and constants (uploaded through the staging ring) and wrote the culling output: {correct} of {n} results correct.",
        format_bytes(stats.page_bytes),
        format_bytes(stats.used_bytes)
    ));
    lines.push("Each buffer can be transitioned on its own (an index buffer written by compute, then read by a draw) while its neighbours on the page are used differently; `residency dump` writes VMA's JSON dump and this heap map.".into());
    drop(set_);
    drop(program);
    uploader.destroy()?;
    for b in [vertices, indices, params, results].into_iter().chain(extra) {
        pool.free_buffer(b).map_err(|refused| anyhow::anyhow!("{refused}"))?;
    }
    drop(pool);
    let figures = json!({"buffers": all_len(&stats), "same_page": same_page, "correct": correct, "count": n, "page_bytes": stats.page_bytes, "used_bytes": stats.used_bytes});
    Ok(Section {
        title: "Placed buffers in a pool".into(),
        lines,
        svgs: vec![heap_map],
        figures,
        ok: same_page && correct == n as usize,
        ..Section::default()
    })
}

fn all_len(stats: &residency::vulkan::PoolStats) -> u64 {
    stats.buffers
}

/// Step 4: a 16k partially resident texture.
pub fn sparse(set: &DeviceSet) -> anyhow::Result<Section> {
    let device = Arc::clone(&set.devices()[0]);
    if !device.features().sparse_residency_image_2d || device.sparse_queue().is_none() {
        return Ok(Section {
            title: "Partially resident texture".into(),
            lines: vec![format!(
                "{} has no sparse residency; the software residency path will serve it.",
                device.name()
            )],
            ok: true,
            ..Section::default()
        });
    }
    let pool = SparseTilePool::new(
        Arc::clone(&device),
        TilePoolDesc::default().with_name("tour tiles").with_tiles_per_heap(512),
    )?;
    let desc = SparseImageDesc::new_2d(Format::R8G8B8A8Unorm, 16384, 16384);
    let mut image = SparseImage::new(&pool, "tour 16k texture", &desc, false)?;
    let layout = image.layout().clone();
    let shape = layout.tile_shape();
    let coarse = layout.first_tail_lod().min(8);
    // What a camera near the corner needs: a 16 × 8 tile view of mip 0, the mips above it, all coarse mips.
    let view = TexelRegion { offset: [0; 3], extent: [16 * shape.width, 8 * shape.height, 1] };
    let mut regions = Vec::new();
    for mip in 0..layout.mip_levels() {
        let e = layout.mip(mip).map(|m| m.extent).unwrap_or([1, 1, 1]);
        let region = if mip < coarse {
            TexelRegion {
                offset: [0; 3],
                extent: [(view.extent[0] >> mip).max(1), (view.extent[1] >> mip).max(1), 1],
            }
        } else {
            TexelRegion { offset: [0; 3], extent: [e[0], e[1], 1] }
        };
        regions.push((mip, region));
        image.commit_region(&pool, 0, mip, region)?;
    }
    let tiles = pool.used_tiles();
    // What the binds would cost without coalescing: one entry per tile.
    let changes: Vec<_> = image
        .residency()
        .page_table()
        .mapped()
        .map(|(tile, p)| residency::core::tiles::TileChange { tile, physical: Some(p) })
        .collect();
    let naive =
        plan_binds(&layout, &changes, &[], BindPlanOptions { coalesce: Coalesce::None })?.bind_count();
    let stats = pool.flush_binds(&mut [&mut image])?;
    let uploader = Uploader::new(&device, "tour sparse", 8 << 20)?;
    let texel = |x: u32, y: u32, mip: u32| [(x % 251) as u8, (y % 241) as u8, (mip * 17) as u8, 255u8];
    for &(mip, region) in &regions {
        let e = layout.mip(mip).map(|m| m.extent).unwrap_or([1, 1, 1]);
        let (tx1, ty1) = ((region.extent[0]).div_ceil(shape.width), region.extent[1].div_ceil(shape.height));
        for ty in 0..ty1 {
            for tx in 0..tx1 {
                let (x0, y0) = (tx * shape.width, ty * shape.height);
                let (w, h) = (shape.width.min(e[0] - x0), shape.height.min(e[1] - y0));
                let data: Vec<u8> =
                    (0..h).flat_map(|y| (0..w).flat_map(move |x| texel(x0 + x, y0 + y, mip))).collect();
                let target = ImageRegion::new(&image, mip, [x0, y0, 0], [w, h, 1]);
                uploader.write_image(&target, &data)?;
            }
        }
    }
    let mut map = MinLodMap::new(&image)?;
    map.update(&uploader, &mut image)?;
    uploader.wait_idle()?;
    // Sample a grid over the whole texture at LOD 0: inside the view at full resolution, elsewhere
    // from the finest resident coarser mip.
    let grid: Vec<(u32, u32)> =
        (0..8).flat_map(|j| (0..8).map(move |i| (i * 2048 + 37, j * 2048 + 91))).collect();
    let program = ComputeProgram::new(&device, "sparse_fallback.comp", &shaders::SPARSE_FALLBACK, 1)?;
    let sampler = device.create_sampler(Filter::Nearest)?;
    let mut probes = device.create_buffer(
        &BufferDesc::new("tour samples", grid.len() as u64 * 16, BufferUsage::STORAGE)
            .with_intent(MemoryIntent::Upload),
    )?;
    let results = device.create_buffer(
        &BufferDesc::new("tour sample results", grid.len() as u64 * 32, BufferUsage::STORAGE)
            .with_intent(MemoryIntent::Readback),
    )?;
    let uv = |v: u32| (v as f32 + 0.5) / 16384.0;
    probes.write(
        0,
        &grid
            .iter()
            .flat_map(|&(x, y)| [uv(x), uv(y), 0.0, 0.0])
            .flat_map(f32::to_le_bytes)
            .collect::<Vec<_>>(),
    )?;
    let ds = program.descriptor_set(&[
        Binding::sampled(&image, &sampler, vk::ImageLayout::GENERAL),
        Binding::sampled(map.view(), &sampler, vk::ImageLayout::GENERAL),
        Binding::Buffer(&probes),
        Binding::Buffer(&results),
    ])?;
    let mut push: Vec<u8> = [1.0f32, 0.0, 1.0, 1.0].iter().flat_map(|f| f.to_le_bytes()).collect();
    push.extend_from_slice(&(grid.len() as u32).to_le_bytes());
    push.resize(32, 0);
    let mut dispatched = Ok(());
    device
        .submit_compute("tour sampling", |rec| dispatched = program.dispatch(rec, &ds, &push, [1, 1, 1]))?;
    dispatched?;
    let mut out = vec![0u8; grid.len() * 32];
    results.read(0, &mut out)?;
    let table = image.residency().page_table();
    let mut correct = 0;
    let mut lods = Vec::new();
    for (k, &(x, y)) in grid.iter().enumerate() {
        let r = &out[k * 32..k * 32 + 32];
        let f = |i: usize| f32::from_le_bytes(r[i..i + 4].try_into().unwrap_or_default());
        let (resident, used) = (f(16) == 1.0, f(20));
        let expected = (0..layout.mip_levels()).find(|&l| {
            (l..layout.mip_levels()).all(|m| {
                if m >= layout.first_tail_lod() {
                    return layout.tail_of_layer(0).is_some_and(|t| table.is_tail_resident(t));
                }
                let c = residency::vulkan::sparse::TileCoord {
                    layer: 0,
                    mip: m,
                    x: (x >> m) / shape.width,
                    y: (y >> m) / shape.height,
                    z: 0,
                };
                layout.tile_index(c).is_some_and(|t| table.is_resident(t))
            })
        });
        let rgba = [f(0), f(4), f(8), f(12)].map(|v| (v * 255.0).round() as u8);
        if let Some(l) = expected {
            if resident && used == l as f32 && rgba == texel(x >> l, y >> l, l) {
                correct += 1;
            }
        }
        lods.push(used);
    }
    let full_bytes = u64::from(layout.tile_count() + layout.mip_tail().map_or(0, |t| t.tiles * t.count))
        * layout.tile_bytes();
    let resident_bytes = tiles * layout.tile_bytes();
    let chart = bar_chart(
        "chart-binds",
        "Bind entries for the committed tiles",
        "",
        &["bind entries"],
        &["one per tile", "coalesced"],
        &[vec![naive as f64], vec![stats.bind_entries as f64]],
    );
    let lines = vec![
        format!("A 16384 × 16384 RGBA8 texture ({} virtual, {} mips, {}×{} tiles, {}).", format_bytes(full_bytes), layout.mip_levels(), shape.width, shape.height, if layout.first_tail_lod() >= layout.mip_levels() { "no mip tail: every mip is bound by tiles".to_owned() } else { format!("mip tail from LOD {}", layout.first_tail_lod()) }),
        format!("A camera's view committed {tiles} tiles ({} resident, {:.2} % of the full texture); {} bind entries instead of {naive} (coalesced over contiguous pool memory), bound in {} µs.", format_bytes(resident_bytes), 100.0 * resident_bytes as f64 / full_bytes as f64, stats.bind_entries, stats.micros),
        format!("A compute shader sampled a grid of 64 points at LOD 0 with residency codes; where mip 0 is missing it fell back to the finest resident coarser mip through the min-LOD map: {correct} of 64 samples as the CPU expected (LODs used: {}).", summarize(&lods)),
    ];
    device.wait_idle()?;
    // The set does not keep the sparse image (it is released through its pool): it goes first.
    drop(ds);
    drop(program);
    drop(sampler);
    drop(probes);
    drop(results);
    drop(map);
    uploader.destroy()?;
    image.release_all(&pool)?;
    pool.flush_binds(&mut [&mut image])?;
    drop((image, pool));
    let figures = json!({"tiles": tiles, "resident_bytes": resident_bytes, "full_bytes": full_bytes, "bind_entries": stats.bind_entries, "naive_bind_entries": naive, "bind_micros": stats.micros, "samples_correct": correct});
    Ok(Section {
        title: "Partially resident texture".into(),
        lines,
        svgs: vec![chart],
        figures,
        ok: correct == 64,
        ..Section::default()
    })
}

fn summarize(lods: &[f32]) -> String {
    let mut counts: Vec<(i32, usize)> = Vec::new();
    for &l in lods {
        let l = l as i32;
        match counts.iter_mut().find(|(v, _)| *v == l) {
            Some((_, c)) => *c += 1,
            None => counts.push((l, 1)),
        }
    }
    counts.sort_unstable();
    counts.iter().map(|(l, c)| format!("LOD {l} ×{c}")).collect::<Vec<_>>().join(", ")
}

/// Step 6: one buffer on every device under a mask, then one texture streamed on every device
/// through one decoded-tile cache, with a statistics panel per device.
pub fn multi_device(set: &DeviceSet) -> anyhow::Result<Section> {
    if set.devices().len() < 2 {
        return Ok(Section {
            title: "Multi-device resources".into(),
            lines: vec!["One device here: the multi-device part runs when a second GPU is present (the tests open one device twice to cover it).".into()],
            ok: true,
            ..Section::default()
        });
    }
    let mask = set.mask();
    let pool = MultiBufferPool::new(
        set,
        mask,
        &BufferPoolDesc::new("tour multi", BufferPoolUsage::Unknown).with_page_size(8 << 20),
    )?;
    let uploader = MultiUploader::new(set, mask, 8 << 20)?;
    let usage = BufferUsage::STORAGE | BufferUsage::COPY_DST | BufferUsage::COPY_SRC;
    let mesh = pool.init_buffer(&BufferInit::new("mesh", 4 << 20).with_usage(usage), DeviceMask::ALL)?;
    let copy = pool.init_buffer(&BufferInit::new("copy", 4 << 20).with_usage(usage), DeviceMask::ALL)?;
    let data: Vec<u8> = (0..4u32 << 20).map(|i| (i % 253) as u8).collect();
    let started = std::time::Instant::now();
    uploader.broadcast(&mesh, 0, &data)?;
    uploader.wait_idle()?;
    let upload_ms = started.elapsed().as_secs_f64() * 1e3;
    let submitter = MultiSubmitter::new(set, mask)?;
    let item = CopyItem {
        src: BufferView::whole(&mesh),
        dst: BufferView::whole(&copy),
        src_offset: 0,
        dst_offset: 0,
        size: 4 << 20,
    };
    let mut ok = true;
    let mut lines = vec![format!("A 4 MiB buffer under device mask {:#b}: one object, an instance on each device; one broadcast upload from one source reached all in {upload_ms:.1} ms.", mask.bits())];
    for d in set.devices() {
        let s = submitter.submit(d.index(), &[WorkItem::Copy(item)])?;
        submitter.wait(d.index(), s)?;
        let instance = copy.instance(d.index()).context("instance")?;
        let same = d.read_back(instance, 0, 4 << 20)? == data;
        ok &= same;
        lines.push(format!(
            "device {}: a copy work item, described once, submitted to this device: data correct = {same}",
            d.index().get()
        ));
    }
    let stats = pool.stats();
    lines.push(format!(
        "per-device pool statistics: {}",
        stats
            .iter()
            .map(|(i, s)| format!(
                "device {}: {} buffers, {}",
                i.get(),
                s.buffers,
                format_bytes(s.used_bytes)
            ))
            .collect::<Vec<_>>()
            .join("; ")
    ));
    let per_device = super::per_device::run(set, &pool, &submitter)?;
    lines.extend(per_device.lines);
    ok &= per_device.ok;
    submitter.destroy();
    for b in [mesh, copy] {
        pool.free_buffer(b).map_err(|refused| anyhow::anyhow!("{refused}"))?;
    }
    uploader.destroy()?;
    Ok(Section {
        title: "Multi-device resources".into(),
        lines,
        svgs: per_device.panels,
        figures: json!({"devices": set.devices().len(), "upload_ms": upload_ms, "streaming": per_device.figures}),
        ok,
        ..Section::default()
    })
}
