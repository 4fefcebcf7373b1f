//! A 16k × 16k partially resident texture: only a few 64 KiB tiles are backed by memory.
//!
//! Commits two tiles of mip 0 with the mips above them and the coarsest mips (the mip tail where the
//! device has one), uploads their texels, and samples the image from a compute shader with residency
//! codes and the min-LOD fallback of `crates/residency-vulkan/shaders/include/residency.glsl`: resident
//! texels come back exactly, and a sample over a missing tile falls back to the finest resident coarser mip.
//! Then it releases a tile, samples again, and frees everything.
//!
//! Run: `RESIDENCY_VALIDATION=sync cargo run --example sparse_texture`

use residency::vulkan::ash::vk;
use residency::vulkan::compute::{Binding, ComputeProgram};
use residency::vulkan::shaders;
use residency::vulkan::sparse::{
    MinLodMap, SparseImage, SparseImageDesc, SparseTilePool, TexelRegion, TileCoord, TilePoolDesc,
};
use residency::vulkan::{
    BufferDesc, BufferUsage, Device, DeviceSet, DeviceSetDesc, Filter, Format, ImageRegion, MemoryIntent,
    Uploader,
};
use std::sync::Arc;

const SIZE: u32 = 16384;
const DEFAULT: [f32; 4] = [1.0, 0.0, 1.0, 1.0];

/// The colour of texel (x, y) of mip `mip`.
fn texel(x: u32, y: u32, mip: u32) -> [u8; 4] {
    [(x % 251) as u8, (y % 241) as u8, (mip * 17) as u8, 0xff]
}

/// A sample: where (mip-0 texel) and at which LOD.
#[derive(Clone, Copy, Debug)]
struct Sample {
    x: u32,
    y: u32,
    lod: u32,
}

/// The LOD the fallback must sample at, worked out on the CPU from the page table: the finest
/// LOD at or above `s.lod` from which every coarser mip is resident at the sample's position.
fn expected_lod(image: &SparseImage, s: Sample) -> Option<u32> {
    let layout = image.layout();
    let table = image.residency().page_table();
    let shape = layout.tile_shape();
    let resident = |m: u32| {
        if m >= layout.first_tail_lod() {
            return layout.tail_of_layer(0).is_some_and(|t| table.is_tail_resident(t));
        }
        let coord =
            TileCoord { layer: 0, mip: m, x: (s.x >> m) / shape.width, y: (s.y >> m) / shape.height, z: 0 };
        layout.tile_index(coord).is_some_and(|t| table.is_resident(t))
    };
    (s.lod..layout.mip_levels()).find(|&l| (l..layout.mip_levels()).all(resident))
}

/// What the example checked, for the test that runs it.
#[derive(Debug)]
pub struct Outcome {
    /// Samples whose residency code, LOD and texel matched the CPU's expectation.
    pub matched: usize,
    /// Samples taken.
    pub samples: usize,
    /// Tiles resident at the peak, and the tiles a fully resident image would need.
    pub resident_tiles: u64,
    /// Tiles of the fully resident image.
    pub total_tiles: u64,
}

/// What one sample returned: the texel, whether it was resident, and the LOD sampled.
type Sampled = ([u8; 4], bool, f32);

struct Sampler<'a> {
    device: &'a Arc<Device>,
    program: ComputeProgram,
    sampler: residency::vulkan::Sampler,
}

impl Sampler<'_> {
    /// Samples the image at `samples` through the min-LOD fallback: (texel, resident, LOD used).
    fn run(
        &self,
        image: &SparseImage,
        map: &MinLodMap,
        samples: &[Sample],
    ) -> Result<Vec<Sampled>, Box<dyn std::error::Error>> {
        let device = self.device;
        let n = samples.len() as u64;
        let mut probes = device.create_buffer(
            &BufferDesc::new("samples", n * 16, BufferUsage::STORAGE).with_intent(MemoryIntent::Upload),
        )?;
        let results = device.create_buffer(
            &BufferDesc::new("sample results", n * 32, BufferUsage::STORAGE)
                .with_intent(MemoryIntent::Readback),
        )?;
        let uv = |v: u32| (v as f32 + 0.5) / SIZE as f32;
        let bytes: Vec<u8> = samples
            .iter()
            .flat_map(|s| [uv(s.x), uv(s.y), s.lod as f32, 0.0])
            .flat_map(f32::to_le_bytes)
            .collect();
        probes.write(0, &bytes)?;
        let set = self.program.descriptor_set(&[
            Binding::sampled(image, &self.sampler, vk::ImageLayout::GENERAL),
            Binding::sampled(map.view(), &self.sampler, vk::ImageLayout::GENERAL),
            Binding::Buffer(&probes),
            Binding::Buffer(&results),
        ])?;
        let mut push: Vec<u8> = DEFAULT.iter().flat_map(|f| f.to_le_bytes()).collect();
        push.extend_from_slice(&(n as u32).to_le_bytes());
        push.resize(32, 0);
        let groups = [(n as u32).div_ceil(64), 1, 1];
        self.program.check_dispatch(&push, groups)?;
        device.submit_compute("sample sparse texture", |rec| {
            self.program.dispatch(rec, &set, &push, groups).expect("checked before the submission");
        })?;
        let mut out = vec![0u8; (n * 32) as usize];
        results.read(0, &mut out)?;
        drop(probes);
        drop(results);
        Ok(out
            .chunks_exact(32)
            .map(|r| {
                let f = |i: usize| f32::from_le_bytes([r[i], r[i + 1], r[i + 2], r[i + 3]]);
                ([f(0), f(4), f(8), f(12)].map(|v| (v * 255.0).round() as u8), f(16) == 1.0, f(20))
            })
            .collect())
    }
}

fn check(image: &SparseImage, samples: &[Sample], got: &[Sampled]) -> usize {
    println!(
        "{:>6} {:>6} {:>4}  {:>8} {:>9} {:>9}  texel",
        "x", "y", "lod", "resident", "used lod", "expected"
    );
    samples
        .iter()
        .zip(got)
        .filter(|(s, (rgba, resident, used))| {
            let expected = expected_lod(image, **s);
            println!(
                "{:>6} {:>6} {:>4}  {:>8} {:>9} {:>9?}  {rgba:?}",
                s.x, s.y, s.lod, resident, used, expected
            );
            match expected {
                Some(l) => *resident && *used == l as f32 && *rgba == texel(s.x >> l, s.y >> l, l),
                None => !*resident && *rgba == DEFAULT.map(|v| (v * 255.0).round() as u8),
            }
        })
        .count()
}

/// Uploads every texel of the tiles of `mip` that `region` touches.
fn upload(
    uploader: &Uploader,
    image: &SparseImage,
    mip: u32,
    region: TexelRegion,
) -> Result<(), Box<dyn std::error::Error>> {
    let layout = image.layout();
    let shape = layout.tile_shape();
    let extent = layout.mip(mip).ok_or("no such mip")?.extent;
    let (tx0, ty0) = (region.offset[0] / shape.width, region.offset[1] / shape.height);
    let tx1 = (region.offset[0] + region.extent[0]).div_ceil(shape.width);
    let ty1 = (region.offset[1] + region.extent[1]).div_ceil(shape.height);
    for ty in ty0..ty1 {
        for tx in tx0..tx1 {
            let (x0, y0) = (tx * shape.width, ty * shape.height);
            let (w, h) = (shape.width.min(extent[0] - x0), shape.height.min(extent[1] - y0));
            let data: Vec<u8> =
                (0..h).flat_map(|y| (0..w).flat_map(move |x| texel(x0 + x, y0 + y, mip))).collect();
            let target = ImageRegion::new(image, mip, [x0, y0, 0], [w, h, 1]);
            uploader.write_image(&target, &data)?;
        }
    }
    Ok(())
}

/// Runs the example on `device`.
pub fn run(device: &Arc<Device>) -> Result<Outcome, Box<dyn std::error::Error>> {
    let pool = SparseTilePool::new(
        Arc::clone(device),
        TilePoolDesc::default().with_name("example tiles").with_tiles_per_heap(256),
    )?;
    let desc = SparseImageDesc::new_2d(Format::R8G8B8A8Unorm, SIZE, SIZE);
    let mut image = SparseImage::new(&pool, "16k virtual texture", &desc, false)?;
    let layout = image.layout().clone();
    let shape = layout.tile_shape();
    let coarse = layout.first_tail_lod().min(8);
    println!(
        "{}: {} mips, {}x{} tiles, mip tail from LOD {} ({} B), {} tiles if fully resident",
        device.name(),
        layout.mip_levels(),
        shape.width,
        shape.height,
        layout.first_tail_lod(),
        layout.mip_tail().map_or(0, |t| t.size),
        layout.tile_count() + layout.mip_tail().map_or(0, |t| t.tiles * t.count),
    );

    // Tiles (0,0) and (1,0) of mip 0 with every mip above them, and all of the coarse mips.
    let mut regions = Vec::new();
    for mip in 0..coarse {
        let tile_region =
            TexelRegion { offset: [0, 0, 0], extent: [(2 * shape.width) >> mip, shape.height >> mip, 1] };
        regions.push((mip, TexelRegion { extent: tile_region.extent.map(|e| e.max(1)), ..tile_region }));
    }
    for mip in coarse..layout.mip_levels() {
        let e = layout.mip(mip).ok_or("no such mip")?.extent;
        regions.push((mip, TexelRegion { offset: [0; 3], extent: [e[0], e[1], 1] }));
    }
    for &(mip, region) in &regions {
        image.commit_region(&pool, 0, mip, region)?;
    }
    let resident_tiles = pool.used_tiles();
    let stats = pool.flush_binds(&mut [&mut image])?;
    println!(
        "bound {} tiles with {} bind entries in {} µs",
        stats.tiles_bound, stats.bind_entries, stats.micros
    );

    let uploader = Uploader::new(device, "example", 8 << 20)?;
    for &(mip, region) in &regions {
        upload(&uploader, &image, mip, region)?;
    }
    let mut map = MinLodMap::new(&image)?;
    map.update(&uploader, &mut image)?;
    uploader.wait_idle()?;

    let program = ComputeProgram::new(device, "sparse_fallback.comp", &shaders::SPARSE_FALLBACK, 4)?;
    let sampler = Sampler { device, program, sampler: device.create_sampler(Filter::Nearest)? };
    let (w, h) = (shape.width, shape.height);
    // Texel centres away from tile edges: the fallback answers for the whole bilinear footprint
    // (and, on this path, the next mip's), which at a tile's last texel also reaches the next
    // tile, so such a sample falls back where that tile is missing (docs/tiles.md). The CPU's
    // `expected_lod` models the sample's own tile and mip chain.
    let samples = [
        Sample { x: 10, y: 20, lod: 0 },
        Sample { x: w + 100, y: h - 2, lod: 0 },
        Sample { x: w + 5, y: 7, lod: 2 },
        Sample { x: 5 * w + 3, y: 5 * h + 9, lod: 0 },
        Sample { x: SIZE - 1, y: SIZE - 1, lod: 0 },
        Sample { x: SIZE / 2, y: 3, lod: 1 },
    ];
    // Resident at full resolution where mip 0 is; elsewhere a coarser mip, never nothing.
    assert_eq!(expected_lod(&image, samples[0]), Some(0));
    assert!(expected_lod(&image, samples[4]).is_some_and(|l| l > 0 && l <= coarse));
    let mut matched = check(&image, &samples, &sampler.run(&image, &map, &samples)?);

    // Release tile (1,0) of mip 0: samples there fall back to mip 1, whose tile is still resident.
    device.wait_idle()?;
    image.release_region(&pool, 0, 0, TexelRegion { offset: [w, 0, 0], extent: [1, 1, 1] })?;
    pool.flush_binds(&mut [&mut image])?;
    map.update(&uploader, &mut image)?;
    uploader.wait_idle()?;
    let after = [Sample { x: w + 100, y: h - 2, lod: 0 }, Sample { x: 10, y: 20, lod: 0 }];
    assert_eq!(expected_lod(&image, after[0]), Some(1), "the released tile falls back to mip 1");
    matched += check(&image, &after, &sampler.run(&image, &map, &after)?);

    // Nothing resident at all: the default value and a non-resident code.
    device.wait_idle()?;
    image.release_all(&pool)?;
    pool.flush_binds(&mut [&mut image])?;
    map.update(&uploader, &mut image)?;
    uploader.wait_idle()?;
    let none = [Sample { x: 10, y: 20, lod: 0 }];
    assert_eq!(expected_lod(&image, none[0]), None);
    matched += check(&image, &none, &sampler.run(&image, &map, &none)?);
    println!("{matched} of {} samples as expected", samples.len() + after.len() + none.len());

    device.wait_idle()?;
    drop(sampler.program);
    drop(sampler.sampler);
    uploader.destroy()?;
    let total_tiles = u64::from(layout.tile_count() + layout.mip_tail().map_or(0, |t| t.tiles * t.count));
    // The map, the image (its tiles back to the pool) and the pool are released on drop.
    drop((map, image, pool));
    Ok(Outcome { matched, samples: samples.len() + after.len() + none.len(), resident_tiles, total_tiles })
}

#[allow(dead_code, reason = "the test that runs this example calls `run` and not `main`")]
fn main() -> Result<(), Box<dyn std::error::Error>> {
    tracing_subscriber::fmt().with_env_filter("warn").init();
    let set = DeviceSet::new(&DeviceSetDesc::default())?;
    let outcome = run(&set.devices()[0])?;
    let problems = set.validation_log().problem_count();
    drop(set);
    let leaks = residency::vulkan::LEAKS_AT_TEARDOWN.load(std::sync::atomic::Ordering::SeqCst);
    println!(
        "resident at peak: {} of {} tiles; validation problems: {problems}; leaked at teardown: {leaks}",
        outcome.resident_tiles, outcome.total_tiles
    );
    if outcome.matched != outcome.samples || problems != 0 || leaks != 0 {
        return Err("the example failed its checks".into());
    }
    Ok(())
}
