//! Partially resident volumes (3D) and 2D arrays on the hardware path, with the GLSL helpers for
//! `sampler3D` / `sampler2DArray` (`prt_volume.comp`, `prt_array.comp`): samples at z > 0 read
//! their own tiles and fall back per region through a 3D min-LOD map, the feedback requests tiles
//! at z > 0 exactly as the CPU model says, array layers stream independently (per-layer min-LOD
//! map and feedback), and the seed's low-water LOD warning fires at and below the mark only, with
//! the level that warned in the shader's code and in the feedback record; the `Streamer` streams
//! an array texture whose layers come from their own sources, independently, and a volume from
//! `prt_volume.comp`'s own feedback at z > 0. Validation clean, nothing leaked, every tile back in
//! its pool.

use residency_core::format::Format;
use residency_core::memory::MemoryIntent;
use residency_core::streaming::{
    classify_low_water, classify_sample, low_water_level, DecodedFeedback, FeedbackBuffer, FeedbackDesc,
    FeedbackLayout, RequestKind,
};
use residency_core::tiles::{
    ImageId, SparseDimension, SparseImageDesc, SparseImageLayout, TexelRegion, TileCoord, TilePoolDesc,
    MIN_LOD_NONE,
};
use residency_core::usage::BufferUsage;
use residency_vulkan::ash::vk;
use residency_vulkan::compute::{Binding, ComputeProgram, ViewRef};
use residency_vulkan::shaders::{self, Shader};
use residency_vulkan::sparse::{MinLodMap, SparseImage, SparseTilePool};
use residency_vulkan::testing::with_gpu;
use residency_vulkan::{BufferDesc, Device, Filter, ImageRegion, Uploader};
use std::collections::BTreeSet;
use std::sync::Arc;

mod common;

const DEFAULT: [f32; 4] = [1.0, 0.0, 1.0, 1.0];
const ID: ImageId = ImageId(11);
const NO_MARK: u32 = u32::MAX;

/// The uniform colour of tile (x, y, z) of `mip` of layer `layer` (tail mips: tile 0).
fn colour(layer: u32, mip: u32, x: u32, y: u32, z: u32) -> [u8; 4] {
    [(layer * 90 + 20) as u8, (mip * 50 + 10) as u8, (x * 30 + y * 7 + 5) as u8, (z * 40 + 15) as u8]
}

fn as_f32(c: [u8; 4]) -> [f32; 4] {
    c.map(f32::from)
}

fn close(got: [f32; 4], want: [f32; 4], what: &str) {
    assert!(got.iter().zip(want).all(|(g, w)| (g - w).abs() <= 0.6), "{what}: {got:?} vs {want:?}");
}

/// A sparse image, its pool and min-LOD map, with some tiles resident and written.
struct Prt {
    pool: SparseTilePool,
    image: SparseImage,
    map: MinLodMap,
    uploader: Uploader,
}

impl Prt {
    fn new(device: &Arc<Device>, desc: &SparseImageDesc) -> Prt {
        let pool = SparseTilePool::new(
            Arc::clone(device),
            TilePoolDesc::default().with_name("prt").with_tiles_per_heap(32),
        )
        .unwrap();
        let image = SparseImage::new(&pool, "prt image", desc, false).unwrap();
        let map = MinLodMap::new(&image).unwrap();
        let uploader = Uploader::new(device, "prt uploads", 16 << 20).unwrap();
        Prt { pool, image, map, uploader }
    }

    fn layout(&self) -> &SparseImageLayout {
        self.image.layout()
    }

    /// Commits and writes mip-0..tail tiles `tiles` of `layer` and its mip tail.
    fn commit(&mut self, layer: u32, tiles: &[TileCoord]) {
        for c in tiles {
            let region = self.layout().tile_region(*c).unwrap();
            self.image.commit_region(&self.pool, layer, c.mip, region).unwrap();
        }
        if let Some(tail) = self.layout().tail_of_layer(layer) {
            if !self.image.residency().page_table().is_tail_resident(tail) {
                self.image.commit_tail(&self.pool, tail).unwrap();
            }
        }
        self.pool.flush_binds(&mut [&mut self.image]).unwrap();
        let layout = self.layout().clone();
        for c in tiles {
            self.write(layer, c.mip, layout.tile_region(*c).unwrap(), colour(layer, c.mip, c.x, c.y, c.z));
        }
        for mip in layout.first_tail_lod()..layout.mip_levels() {
            let extent = layout.mip(mip).unwrap().extent;
            self.write(layer, mip, TexelRegion { offset: [0; 3], extent }, colour(layer, mip, 0, 0, 0));
        }
        self.refresh();
    }

    fn write(&self, layer: u32, mip: u32, region: TexelRegion, c: [u8; 4]) {
        let texels = region.extent.iter().product::<u32>() as usize;
        let data: Vec<u8> = c.iter().copied().cycle().take(texels * 4).collect();
        let target = ImageRegion::new(&self.image, mip, region.offset, region.extent).with_layer(layer);
        self.uploader.write_image(&target, &data).unwrap();
    }

    /// Uploads the min-LOD entries that changed and waits for every upload.
    fn refresh(&mut self) {
        self.map.update(&self.uploader, &mut self.image).unwrap();
        self.uploader.wait_idle().unwrap();
    }

    /// The min-LOD map value the shader reads for `coord` (u, v, w or layer), computed on the CPU.
    fn min_lod(&self, coord: [f32; 3], array: bool) -> u8 {
        let table = self.image.residency().page_table();
        let size = table.min_lod_extent();
        let r = |a: usize| ((coord[a] * size[a] as f32) as u32).min(size[a] - 1);
        if array {
            table.min_lod(coord[2].round() as u32, [r(0), r(1), 0])
        } else {
            table.min_lod(0, [r(0), r(1), r(2)])
        }
    }

    /// Drops everything; every tile returns to the pool once the GPU work is done.
    fn destroy(self, device: &Device) {
        let Prt { pool, image, map, uploader } = self;
        uploader.destroy().unwrap();
        drop((map, image));
        device.wait_submitted().unwrap();
        assert_eq!(pool.used_tiles(), 0);
    }
}

/// One sample's result: texel × 255, then (code, LOD used, min-LOD, level that warned).
type Sampled = ([f32; 4], [f32; 4]);

/// Runs `shader` over `probes` (u, v, w or layer, LOD) with `feedback`'s buffer for `frame`;
/// returns the results and the decoded feedback.
fn run(
    device: &Device,
    shader: &Shader,
    prt: &Prt,
    feedback: &FeedbackLayout,
    frame: u64,
    probes: &[[f32; 4]],
    low_water: u32,
) -> (Vec<Sampled>, DecodedFeedback) {
    let program = ComputeProgram::new(device, "prt sample", shader, 1).unwrap();
    let (linear, nearest) =
        (device.create_sampler(Filter::Trilinear).unwrap(), device.create_sampler(Filter::Nearest).unwrap());
    let n = probes.len() as u64;
    let buffer = |name: &str, bytes: u64, intent| {
        device.create_buffer(&BufferDesc::new(name, bytes, BufferUsage::STORAGE).with_intent(intent)).unwrap()
    };
    let mut input = buffer("probes", n * 16, MemoryIntent::Upload);
    input.write(0, &probes.iter().flatten().flat_map(|f| f.to_le_bytes()).collect::<Vec<u8>>()).unwrap();
    let output = buffer("results", n * 32, MemoryIntent::Readback);
    let mut fb = buffer("feedback", feedback.buffer_bytes(), MemoryIntent::Readback);
    let mut initial = vec![0u32; feedback.buffer_words() as usize];
    initial[..4].copy_from_slice(&feedback.header_words(frame));
    fb.write(0, &initial.iter().flat_map(|w| w.to_le_bytes()).collect::<Vec<u8>>()).unwrap();
    let words = feedback.image_table();
    let mut table = buffer("image table", words.len() as u64 * 4, MemoryIntent::Upload);
    table.write(0, &words.iter().flat_map(|w| w.to_le_bytes()).collect::<Vec<u8>>()).unwrap();
    let general = vk::ImageLayout::GENERAL;
    let image: ViewRef<'_> = (&prt.image).into();
    let map: ViewRef<'_> = prt.map.view().into();
    let set = program
        .descriptor_set(&[
            Binding::sampled(image, &linear, general),
            Binding::sampled(map, &nearest, general),
            Binding::Buffer(&input),
            Binding::Buffer(&output),
            Binding::Buffer(&fb),
            Binding::Buffer(&table),
        ])
        .unwrap();
    let mut push: Vec<u8> = DEFAULT.iter().flat_map(|f| f.to_le_bytes()).collect();
    push.extend_from_slice(&(n as u32).to_le_bytes());
    push.extend_from_slice(&low_water.to_le_bytes());
    push.resize(32, 0);
    device
        .submit_compute("prt sample", |rec| {
            program
                .dispatch(rec, &set, &push, [(n as u32).div_ceil(64), 1, 1])
                .expect("a few workgroups within the declared push constants")
        })
        .unwrap();
    let mut out = vec![0u8; (n * 32) as usize];
    output.read(0, &mut out).unwrap();
    let mut gpu = vec![0u8; feedback.buffer_bytes() as usize];
    fb.read(0, &mut gpu).unwrap();
    drop(set);
    drop((input, output, fb, table, linear, nearest, program));
    let results = out
        .chunks_exact(32)
        .map(|r| {
            let f = |i: usize| f32::from_le_bytes([r[i], r[i + 1], r[i + 2], r[i + 3]]);
            ([f(0), f(4), f(8), f(12)].map(|v| v * 255.0), [f(16), f(20), f(24), f(28)])
        })
        .collect();
    (results, feedback.decode(&gpu, frame).unwrap())
}

/// The CPU model of the probes' feedback: the same rules the GLSL follows.
fn cpu_feedback(
    prt: &Prt,
    feedback: &FeedbackLayout,
    frame: u64,
    probes: &[[f32; 4]],
    array: bool,
) -> DecodedFeedback {
    let img = &feedback.images()[0];
    let mut buf = FeedbackBuffer::new(feedback, frame);
    for p in probes {
        let c = prt.min_lod([p[0], p[1], p[2]], array);
        let (layer, uvw) =
            if array { (p[2].round() as u32, [p[0], p[1], 0.0]) } else { (0, [p[0], p[1], p[2]]) };
        if let Some((tile, kind)) = classify_sample(img, layer, uvw, p[3], c) {
            buf.record(feedback, 0, tile, kind);
        }
        if let Some((tile, _)) = classify_low_water(img, layer, uvw, p[3], c) {
            buf.record(feedback, 0, tile, RequestKind::MinLodWarning);
        }
    }
    feedback.decode(&buf.bytes(), frame).unwrap()
}

/// The centre of tile (x, y, z) of `mip` in normalized coordinates.
fn tile_centre(layout: &SparseImageLayout, mip: u32, x: u32, y: u32, z: u32) -> [f32; 3] {
    let r = layout.tile_region(TileCoord { layer: 0, mip, x, y, z }).unwrap();
    let e = layout.mip(mip).unwrap().extent;
    [0, 1, 2].map(|a| (r.offset[a] as f32 + r.extent[a] as f32 / 2.0) / e[a] as f32)
}

/// A volume of 4 × 4 × 4 mip-0 tiles with every coarser mip resident and two mip-0 tiles at the
/// same (x, y), z 0 and z 2.
fn volume(device: &Arc<Device>) -> Prt {
    let profile = device.profile();
    let probe = SparseImageDesc::new_3d(Format::R8G8B8A8Unorm, 64, 64, 64);
    let shape = SparseImageLayout::for_device(&probe, profile).unwrap().tile_shape();
    let desc =
        SparseImageDesc::new_3d(Format::R8G8B8A8Unorm, 4 * shape.width, 4 * shape.height, 4 * shape.depth);
    assert_eq!(desc.dimension, SparseDimension::D3);
    let mut prt = Prt::new(device, &desc);
    let layout = prt.layout().clone();
    assert!(layout.first_tail_lod() >= 2, "mip 0 and 1 are tiled");
    let mut tiles = vec![
        TileCoord { layer: 0, mip: 0, x: 1, y: 1, z: 0 },
        TileCoord { layer: 0, mip: 0, x: 1, y: 1, z: 2 },
    ];
    for mip in 1..layout.first_tail_lod() {
        let range = layout.mip_tile_range(mip).unwrap();
        tiles.extend(range.iter().map(|[x, y, z]| TileCoord { layer: 0, mip, x, y, z }));
    }
    prt.commit(0, &tiles);
    prt
}

fn decode_code(info: [f32; 4]) -> (bool, bool, u32) {
    let code = info[0] as u32;
    (code & 1 != 0, code & 2 != 0, (code >> 8) & 255)
}

#[test]
fn volume_feedback_samples_and_requests_tiles_at_z_above_zero() {
    with_gpu(|set| {
        let device = &set.devices()[0];
        let prt = volume(device);
        let layout = prt.layout().clone();
        let feedback = FeedbackLayout::new(FeedbackDesc::default(), &[(ID, &layout)]).unwrap();
        let at = |mip, x, y, z, lod: f32| {
            let c = tile_centre(&layout, mip, x, y, z);
            [c[0], c[1], c[2], lod]
        };
        let mut probes = vec![at(0, 1, 1, 2, 0.0), at(0, 1, 1, 0, 0.0), at(0, 2, 1, 3, 0.0)];
        // A grid over the whole volume at several LODs: misses, fallbacks and prefetch warnings.
        for z in 0..4 {
            for y in 0..4 {
                for x in 0..4 {
                    for lod in [0.0, 0.2, 1.0, 1.1] {
                        probes.push(at(0, x, y, z, lod));
                    }
                }
            }
        }
        let (results, gpu) = run(device, &shaders::PRT_VOLUME, &prt, &feedback, 3, &probes, NO_MARK);

        // The two mip-0 tiles at one (x, y) read back their own colours: z picks the tile.
        close(results[0].0, as_f32(colour(0, 0, 1, 1, 2)), "tile (1, 1, 2) at LOD 0");
        close(results[1].0, as_f32(colour(0, 0, 1, 1, 0)), "tile (1, 1, 0) at LOD 0");
        assert_eq!(decode_code(results[0].1), (true, false, 0));
        assert_eq!(results[0].1[1], 0.0, "sampled at LOD 0");
        // Tile (2, 1, 3) is missing at mip 0: it falls back to its mip-1 parent (1, 0, 1).
        close(results[2].0, as_f32(colour(0, 1, 1, 0, 1)), "tile (2, 1, 3) falls back to mip 1");
        assert_eq!((results[2].1[1], results[2].1[2]), (1.0, 1.0), "LOD used, min-LOD map");
        for (p, r) in probes.iter().zip(&results) {
            assert_eq!(
                r.1[2],
                f32::from(prt.min_lod([p[0], p[1], p[2]], false)),
                "the 3D min-LOD map at {p:?}"
            );
        }

        let cpu = cpu_feedback(&prt, &feedback, 3, &probes, false);
        assert_eq!(gpu.requests, cpu.requests, "the GPU requested exactly the CPU model's tiles");
        let img = &feedback.images()[0];
        let missed = layout.tile_index(TileCoord { layer: 0, mip: 0, x: 2, y: 1, z: 3 }).unwrap();
        assert!(gpu.requests.iter().any(|r| r.tile == missed && r.kind == RequestKind::Miss));
        let z_misses: BTreeSet<u32> = gpu
            .requests
            .iter()
            .filter(|r| r.kind == RequestKind::Miss)
            .map(|r| img.tile_coord(r.tile).unwrap().z)
            .collect();
        assert_eq!(z_misses, BTreeSet::from([0, 1, 2, 3]), "misses at every depth");
        assert!(gpu
            .requests
            .iter()
            .any(|r| r.kind == RequestKind::LodWarning && img.tile_coord(r.tile).unwrap().z > 0));
        // Resident tiles are not asked for.
        let resident = layout.tile_index(TileCoord { layer: 0, mip: 0, x: 1, y: 1, z: 2 }).unwrap();
        assert!(!gpu.requests.iter().any(|r| r.tile == resident && r.kind == RequestKind::Miss));
        prt.destroy(device);
    });
}

#[test]
fn array_layers_stream_independently_on_the_gpu() {
    with_gpu(|set| {
        let device = &set.devices()[0];
        let profile = device.profile();
        let probe = SparseImageDesc::new_2d(Format::R8G8B8A8Unorm, 1024, 1024);
        let shape = SparseImageLayout::for_device(&probe, profile).unwrap().tile_shape();
        let desc = SparseImageDesc::new_2d(Format::R8G8B8A8Unorm, 2 * shape.width, 2 * shape.height)
            .with_array_layers(2);
        let mut prt = Prt::new(device, &desc);
        let layout = prt.layout().clone();
        assert!(layout.first_tail_lod() >= 2);
        let whole = |mip| {
            let r = layout.mip_tile_range(mip).unwrap();
            r.iter().map(move |[x, y, z]| TileCoord { layer: 0, mip, x, y, z }).collect::<Vec<_>>()
        };
        let coarse: Vec<TileCoord> = (1..layout.first_tail_lod()).flat_map(whole).collect();
        // Layer 1: everything; layer 0: mip 1 and coarser only.
        let layer1: Vec<TileCoord> =
            whole(0).into_iter().chain(coarse.iter().copied()).map(|c| TileCoord { layer: 1, ..c }).collect();
        prt.commit(1, &layer1);
        prt.commit(0, &coarse.iter().map(|&c| TileCoord { layer: 0, ..c }).collect::<Vec<_>>());
        let feedback = FeedbackLayout::new(FeedbackDesc::default(), &[(ID, &layout)]).unwrap();
        let img = &feedback.images()[0];
        let mut probes = Vec::new();
        for layer in 0..2 {
            for y in 0..2 {
                for x in 0..2 {
                    let c = tile_centre(&layout, 0, x, y, 0);
                    probes.push([c[0], c[1], layer as f32, 0.0]);
                }
            }
        }
        let check = |prt: &Prt, frame: u64, released: Option<[u32; 2]>| {
            let (results, gpu) = run(device, &shaders::PRT_ARRAY, prt, &feedback, frame, &probes, NO_MARK);
            assert_eq!(gpu.requests, cpu_feedback(prt, &feedback, frame, &probes, true).requests);
            for (i, r) in results.iter().enumerate() {
                let (layer, y, x) = ((i / 4) as u32, ((i / 2) % 2) as u32, (i % 2) as u32);
                let own = layer == 1 && released != Some([x, y]);
                let want = if own { colour(1, 0, x, y, 0) } else { colour(layer, 1, 0, 0, 0) };
                close(r.0, as_f32(want), &format!("layer {layer} tile ({x}, {y})"));
                assert_eq!(r.1[1], if own { 0.0 } else { 1.0 }, "LOD used");
            }
            // Exactly the missing mip-0 tiles are requested, each in its own layer.
            let missed: BTreeSet<(u32, u32, u32)> = gpu
                .requests
                .iter()
                .filter(|r| r.kind == RequestKind::Miss)
                .map(|r| img.tile_coord(r.tile).unwrap())
                .map(|c| (c.layer, c.x, c.y))
                .collect();
            let mut want: BTreeSet<(u32, u32, u32)> = (0..4).map(|i| (0, i % 2, i / 2)).collect();
            if let Some([x, y]) = released {
                want.insert((1, x, y));
            }
            assert_eq!(missed, want);
        };
        check(&prt, 1, None);
        // Releasing one tile of layer 1 changes layer 1 there and nothing of layer 0.
        let region = layout.tile_region(TileCoord { layer: 1, mip: 0, x: 1, y: 0, z: 0 }).unwrap();
        prt.image.release_region(&prt.pool, 1, 0, region).unwrap();
        prt.pool.flush_binds(&mut [&mut prt.image]).unwrap();
        prt.refresh();
        check(&prt, 2, Some([1, 0]));
        prt.destroy(device);
    });
}

#[test]
fn lod_warning_gate_blocks_levels_above_the_mark_on_the_gpu() {
    with_gpu(|set| {
        let device = &set.devices()[0];
        let prt = volume(device);
        let layout = prt.layout().clone();
        let mut feedback = FeedbackLayout::new(FeedbackDesc::default(), &[(ID, &layout)]).unwrap();
        let mark = 1u8;
        assert!(feedback.set_low_water(ID, Some(mark)));
        let img = feedback.images()[0].clone();
        let levels = layout.mip_levels();
        // Over resident tile (1, 1, 2) (min-LOD 0) at every level, and over tile (2, 1, 3)
        // (min-LOD 1: LOD 0 falls back to 1) at LODs 0 and 2.
        let a = tile_centre(&layout, 0, 1, 1, 2);
        let b = tile_centre(&layout, 0, 2, 1, 3);
        let mut probes: Vec<[f32; 4]> = (0..levels).map(|l| [a[0], a[1], a[2], l as f32 + 0.25]).collect();
        probes.push([b[0], b[1], b[2], 0.0]);
        probes.push([b[0], b[1], b[2], 2.0]);
        let (results, gpu) = run(device, &shaders::PRT_VOLUME, &prt, &feedback, 9, &probes, u32::from(mark));
        let mut warned_levels = BTreeSet::new();
        for (p, r) in probes.iter().zip(&results) {
            let (resident, warned, level) = decode_code(r.1);
            assert!(resident, "{p:?}");
            let fetched = (r.1[1].floor() as u32).min(levels - 1);
            let want = low_water_level(&img, p[3], prt.min_lod([p[0], p[1], p[2]], false));
            assert_eq!(warned.then_some(level), want, "the shader's code matches the CPU rule at {p:?}");
            assert_eq!(warned, fetched <= u32::from(mark), "warns at or below the mark only ({p:?})");
            assert_eq!(r.1[3], if warned { fetched as f32 } else { 0.0 }, "the level that warned");
            if warned {
                warned_levels.insert(level);
            }
        }
        assert_eq!(warned_levels, BTreeSet::from([0, 1]), "levels 0 and 1 warned; 2 and coarser did not");

        assert_eq!(gpu.requests, cpu_feedback(&prt, &feedback, 9, &probes, false).requests);
        let warnings: Vec<_> = gpu.requests.iter().filter(|r| r.kind == RequestKind::MinLodWarning).collect();
        let recorded: BTreeSet<(u32, u32)> =
            warnings.iter().map(|r| (r.mip, img.tile_coord(r.tile).unwrap().z)).collect();
        // Tile (1, 1, 2) warned at mip 0 (z 2); tile (2, 1, 3) fell back to mip 1 and warned
        // there, as did tile (1, 1, 2)'s probe at LOD 1: both under mip-1 tile (x, y, 1).
        assert_eq!(recorded, BTreeSet::from([(0, 2), (1, 1)]));
        assert!(warnings.iter().all(|r| r.mip <= u32::from(mark)), "nothing above the mark is recorded");
        prt.destroy(device);
    });
}

/// An RGBA8 source of one layer of an array: its texels say which layer they are.
fn layer_source(layer: u32, side: u32) -> Arc<dyn residency_core::streaming::TileSource> {
    let desc = residency_core::vt_file::VtDesc::new(Format::R8G8B8A8Unorm, side, side, 128, 128);
    Arc::new(residency_core::streaming::FnSource::new(format!("layer {layer}"), desc, move |mip, x, y| {
        let (w, h) = desc.tile_extent(mip, x, y).expect("in the grid");
        Ok((0..h)
            .flat_map(|ty| (0..w).flat_map(move |tx| array_texel(layer, mip, x * 128 + tx, y * 128 + ty)))
            .collect())
    }))
}

fn array_texel(layer: u32, mip: u32, x: u32, y: u32) -> [u8; 4] {
    [(x % 251) as u8, (y % 241) as u8, (mip * 29) as u8, 0x40 + layer as u8]
}

#[test]
fn streamer_array_layers_stream_independently() {
    use residency_core::streaming::TileKey;
    use residency_core::tiles::ResidencyPath;
    use residency_vulkan::streaming::{StreamError, Streamer, StreamerDesc};
    with_gpu(|set| {
        let device = Arc::clone(&set.devices()[0]);
        let side = 512;
        let desc = |path| {
            StreamerDesc::default()
                .with_name("array streamer")
                .with_path(path)
                .with_frames_in_flight(2)
                .with_budget_tiles(64)
                .with_workers(2)
        };
        let mut streamer = Streamer::new(&device, desc(ResidencyPath::Hardware)).unwrap();
        let layers: Vec<_> = (0..3).map(|l| layer_source(l, side)).collect();
        // Refusals change nothing.
        let refused =
            |r: Result<_, StreamError>| assert!(matches!(r, Err(StreamError::UnsupportedSource { .. })));
        refused(streamer.add_array_texture("none", &[]));
        refused(streamer.add_array_texture("mismatched", &[Arc::clone(&layers[0]), layer_source(1, 256)]));
        assert!(streamer.manager().images().next().is_none(), "nothing was added");

        let texture = streamer.add_array_texture("vt array", &layers).unwrap();
        let id = texture.id();
        let layout = streamer.manager().residency(id).unwrap().layout().clone();
        assert_eq!(layout.array_layers(), 3);
        // Priming: every layer's coarse chain, each with its own layer's texels.
        assert!(streamer.coarse_chain(&texture).iter().all(|&k| streamer.manager().is_resident(k)));
        let image = streamer.sparse_image(&texture).unwrap();
        let coarse = layout.mip_levels() - 1;
        for layer in 0..3 {
            let got = image
                .read_region(layer, coarse, TexelRegion { offset: [0; 3], extent: [1, 1, 1] }, 1 << 20)
                .unwrap();
            assert_eq!(got, array_texel(layer, coarse, 0, 0), "layer {layer}'s coarsest mip after priming");
        }

        let key = |layer, x, y| {
            TileKey::tile(id, layout.tile_index(TileCoord { layer, mip: 0, x, y, z: 0 }).unwrap())
        };
        let commands = residency_vulkan::CommandContext::new(&device, "array frames").unwrap();
        let run = |streamer: &mut Streamer, wanted: &[TileKey]| {
            for _ in 0..8 {
                common::cpu_feedback_frame(streamer, &commands, wanted);
                streamer.wait_for_loads();
            }
        };
        run(&mut streamer, &[key(2, 3, 1)]);
        assert!(streamer.manager().is_resident(key(2, 3, 1)), "{:?}", streamer.manager_stats());
        assert!(
            !streamer.manager().is_resident(key(0, 3, 1)) && !streamer.manager().is_resident(key(1, 3, 1))
        );
        let tile = TexelRegion { offset: [384, 128, 0], extent: [128, 128, 1] };
        let want = |layer: u32| -> Vec<u8> {
            (0..128)
                .flat_map(|y| (0..128).flat_map(move |x| array_texel(layer, 0, 384 + x, 128 + y)))
                .collect()
        };
        let image = streamer.sparse_image(&texture).unwrap();
        assert_eq!(
            image.read_region(2, 0, tile, 1 << 20).unwrap(),
            want(2),
            "layer 2's tile from layer 2's source"
        );
        // Another layer's tile at the same place streams on its own; the first stays.
        run(&mut streamer, &[key(2, 3, 1), key(0, 3, 1)]);
        assert!(streamer.manager().is_resident(key(0, 3, 1)) && streamer.manager().is_resident(key(2, 3, 1)));
        assert!(!streamer.manager().is_resident(key(1, 3, 1)));
        let image = streamer.sparse_image(&texture).unwrap();
        assert_eq!(image.read_region(0, 0, tile, 1 << 20).unwrap(), want(0));
        assert_eq!(image.read_region(2, 0, tile, 1 << 20).unwrap(), want(2));

        // The seed's low-water mark through the streamer: the image table carries it, and a
        // low-water warning on a mip-1 tile of layer 1 streams its children in layer 1 only.
        streamer.set_low_water(&texture, Some(1)).unwrap();
        let warned = layout.tile_index(TileCoord { layer: 1, mip: 1, x: 0, y: 1, z: 0 }).unwrap();
        let children: Vec<TileKey> = residency_core::streaming::child_tiles(&layout, warned)
            .into_iter()
            .map(|t| TileKey::tile(id, t))
            .collect();
        assert_eq!(children.len(), 4);
        for _ in 0..8 {
            let bindings = streamer.begin_frame().unwrap();
            let frame = bindings.frame;
            let records = bindings.layout.map(|l| {
                assert_eq!(l.image_table()[15], 1, "the mark is in the image table");
                let mut records = FeedbackBuffer::new(l, frame);
                records.record(l, l.slot_of(id).unwrap(), warned, RequestKind::MinLodWarning);
                records
            });
            drop(bindings);
            if let Some(records) = records {
                streamer.write_cpu_feedback(&records).unwrap();
            }
            let bindings = streamer.frame_bindings().unwrap();
            let submission = commands.submit(&[], |rec| bindings.record(rec, |_| ()).unwrap()).unwrap();
            drop(bindings);
            streamer.end_frame(submission.gpu_use()).unwrap();
            streamer.wait_for_loads();
        }
        assert!(children.iter().all(|&k| streamer.manager().is_resident(k)), "the warned tile's children");
        let in_layer_0 = layout.tile_index(TileCoord { layer: 0, mip: 0, x: 0, y: 2, z: 0 }).unwrap();
        assert!(!streamer.manager().is_resident(TileKey::tile(id, in_layer_0)));
        streamer.remove_texture(texture).unwrap();
        drop(streamer);
        drop(commands);

        // The software path holds one layer per texture: arrays are refused.
        let mut software = Streamer::new(&device, desc(ResidencyPath::Software)).unwrap();
        refused(software.add_array_texture("software array", &layers));
        drop(software);
    });
}

/// `sparse_warn{,_software}.comp` (probes (u, v, LOD, 0); info (code, LOD used, level that
/// warned, 0)) or `prt_array_software.comp` (probes (u, v, layer, LOD); info (code, LOD used,
/// min-LOD, level that warned)) over `views` (texture or atlas, min-LOD map or indirection): per
/// probe, the texel × 255 and the info.
fn run_warn(
    device: &Device,
    shader: &Shader,
    views: (ViewRef<'_>, ViewRef<'_>),
    probes: &[[f32; 4]],
    low_water: u32,
) -> Vec<Sampled> {
    let program = ComputeProgram::new(device, "sparse warn", shader, 1).unwrap();
    let (linear, nearest) =
        (device.create_sampler(Filter::Trilinear).unwrap(), device.create_sampler(Filter::Nearest).unwrap());
    let n = probes.len() as u64;
    let mut input = device
        .create_buffer(
            &BufferDesc::new("probes", n * 16, BufferUsage::STORAGE).with_intent(MemoryIntent::Upload),
        )
        .unwrap();
    input.write(0, &probes.iter().flatten().flat_map(|f| f.to_le_bytes()).collect::<Vec<u8>>()).unwrap();
    let output = device
        .create_buffer(
            &BufferDesc::new("results", n * 32, BufferUsage::STORAGE).with_intent(MemoryIntent::Readback),
        )
        .unwrap();
    let general = vk::ImageLayout::GENERAL;
    let set = program
        .descriptor_set(&[
            Binding::sampled(views.0, &linear, general),
            Binding::sampled(views.1, &nearest, general),
            Binding::Buffer(&input),
            Binding::Buffer(&output),
        ])
        .unwrap();
    let mut push: Vec<u8> = DEFAULT.iter().flat_map(|f| f.to_le_bytes()).collect();
    push.extend_from_slice(&(n as u32).to_le_bytes());
    push.extend_from_slice(&low_water.to_le_bytes());
    push.resize(32, 0);
    device
        .submit_compute("sparse warn", |rec| {
            program
                .dispatch(rec, &set, &push, [(n as u32).div_ceil(64), 1, 1])
                .expect("within the declared push constants")
        })
        .unwrap();
    let mut out = vec![0u8; (n * 32) as usize];
    output.read(0, &mut out).unwrap();
    drop(set);
    drop((input, output, linear, nearest, program));
    out.chunks_exact(32)
        .map(|r| {
            let f = |i: usize| f32::from_le_bytes([r[i], r[i + 1], r[i + 2], r[i + 3]]);
            ([f(0), f(4), f(8), f(12)].map(|v| v * 255.0), [f(16), f(20), f(24), f(28)])
        })
        .collect()
}

#[test]
fn lod_warning_gate_gives_the_same_codes_on_both_paths() {
    use residency_core::tiles::ResidencyPath;
    use residency_vulkan::sparse::software::{SoftwareImage, SoftwareTilePool, DEFAULT_BORDER};
    with_gpu(|set| {
        let device = &set.devices()[0];
        let side = 512;
        let desc = SparseImageDesc::new_2d(Format::R8G8B8A8Unorm, side, side);
        let mark = 1u8;
        // Mip-0 tile (1, 1) and every coarser mip whole, on both paths.
        let tiles = |layout: &SparseImageLayout| {
            let mut t = vec![TileCoord { layer: 0, mip: 0, x: 1, y: 1, z: 0 }];
            for mip in 1..layout.first_tail_lod() {
                let r = layout.mip_tile_range(mip).unwrap();
                t.extend(r.iter().map(|[x, y, z]| TileCoord { layer: 0, mip, x, y, z }));
            }
            t
        };
        let uv = |x: u32, y: u32| {
            [(x as f32 * 128.0 + 64.0) / side as f32, (y as f32 * 128.0 + 64.0) / side as f32]
        };
        let mut probes = Vec::new();
        for (x, y) in [(1, 1), (3, 2)] {
            for lod in [0.0, 0.5, 1.0, 1.7, 2.0, 3.3, 9.0] {
                let p = uv(x, y);
                probes.push([p[0], p[1], lod, 0.0]);
            }
        }
        let expected =
            |layout: &SparseImageLayout, table: &residency_core::tiles::PageTable| -> Vec<Option<u32>> {
                let mut fl = FeedbackLayout::new(FeedbackDesc::default(), &[(ID, layout)]).unwrap();
                fl.set_low_water(ID, Some(mark));
                let size = table.min_lod_extent();
                probes
                    .iter()
                    .map(|p| {
                        let r = [0, 1].map(|a| ((p[a] * size[a] as f32) as u32).min(size[a] - 1));
                        // From the residency bitmaps (the software path keeps no cached min-LOD map).
                        let regions = residency_core::tiles::TileRange {
                            start: [r[0], r[1], 0],
                            end: [r[0] + 1, r[1] + 1, 1],
                        };
                        let c = table.finest_resident_lod(0, regions).map_or(MIN_LOD_NONE, |l| l as u8);
                        low_water_level(&fl.images()[0], p[2], c)
                    })
                    .collect()
            };
        let codes = |results: &[Sampled]| -> Vec<Option<u32>> {
            results
                .iter()
                .map(|r| {
                    let (resident, warned, level) = decode_code(r.1);
                    assert!(resident);
                    assert_eq!(r.1[2], if warned { level as f32 } else { 0.0 }, "the level that warned");
                    warned.then_some(level)
                })
                .collect()
        };

        // Hardware.
        let mut hw = Prt::new(device, &desc);
        let layout = hw.layout().clone();
        hw.commit(0, &tiles(&layout));
        let views: (ViewRef<'_>, ViewRef<'_>) = ((&hw.image).into(), hw.map.view().into());
        let hardware = codes(&run_warn(device, &shaders::SPARSE_WARN, views, &probes, u32::from(mark)));
        assert_eq!(hardware, expected(&layout, hw.image.residency().page_table()));

        // Software.
        let pool = SoftwareTilePool::new(
            Arc::clone(device),
            Format::R8G8B8A8Unorm,
            DEFAULT_BORDER,
            TilePoolDesc::default().with_name("warn software").with_tiles_per_heap(16).with_budget_tiles(64),
        )
        .unwrap();
        let mut image =
            SoftwareImage::new(&pool, "warn software", &desc.with_path(ResidencyPath::Software)).unwrap();
        let sw_layout = image.layout().clone();
        for c in tiles(&sw_layout) {
            let region = sw_layout.tile_region(c).unwrap();
            image.commit_region(&pool, 0, c.mip, region).unwrap();
            let texels = region.extent.iter().product::<u32>() as usize;
            let data: Vec<u8> =
                colour(0, c.mip, c.x, c.y, 0).iter().copied().cycle().take(texels * 4).collect();
            image.write_region(&pool, &hw.uploader, 0, c.mip, region, &data).unwrap();
        }
        pool.flush(&hw.uploader, &mut [&mut image]).unwrap();
        hw.uploader.wait_idle().unwrap();
        let views: (ViewRef<'_>, ViewRef<'_>) = (pool.atlas_view().into(), image.indirection_view().into());
        let results = run_warn(device, &shaders::SPARSE_WARN_SOFTWARE, views, &probes, u32::from(mark));
        let software = codes(&results);
        assert_eq!(software, expected(&sw_layout, image.residency().page_table()));
        // Texels: tile (1, 1) at LOD 0 is its own colour on the software path too.
        close(results[0].0, as_f32(colour(0, 0, 1, 1, 0)), "software tile (1, 1) at LOD 0");

        assert_eq!(hardware, software, "both paths give the same codes");
        assert!(hardware.iter().any(|c| c == &Some(0)) && hardware.iter().any(|c| c == &Some(1)));
        assert!(hardware.iter().filter(|c| c.is_none()).count() >= 6, "levels 2 and coarser are gated");

        image.release_all(&pool).unwrap();
        drop(image);
        device.wait_submitted().unwrap();
        assert_eq!(pool.used_tiles(), 0);
        drop(pool);
        hw.destroy(device);
    });
}

#[test]
fn array_layers_stream_independently_on_the_software_path() {
    use residency_core::tiles::ResidencyPath;
    use residency_vulkan::sparse::software::{SoftwareImage, SoftwareTilePool, DEFAULT_BORDER};
    with_gpu(|set| {
        let device = &set.devices()[0];
        let side = 256;
        let desc = SparseImageDesc::new_2d(Format::R8G8B8A8Unorm, side, side)
            .with_array_layers(2)
            .with_path(ResidencyPath::Software);
        let pool = SoftwareTilePool::new(
            Arc::clone(device),
            Format::R8G8B8A8Unorm,
            DEFAULT_BORDER,
            TilePoolDesc::default().with_name("array software").with_tiles_per_heap(16).with_budget_tiles(64),
        )
        .unwrap();
        let mut image = SoftwareImage::new(&pool, "array software", &desc).unwrap();
        assert_eq!(image.indirection().layers(), 2);
        let layout = image.layout().clone();
        let uploader = Uploader::new(device, "array software uploads", 16 << 20).unwrap();
        // Layer 1: every mip; layer 0: mip 1 and coarser.
        for layer in 0..2 {
            for mip in (if layer == 1 { 0 } else { 1 })..layout.mip_levels() {
                for [x, y, _] in layout.mip_tile_range(mip).unwrap().iter() {
                    let region = layout.tile_region(TileCoord { layer, mip, x, y, z: 0 }).unwrap();
                    image.commit_region(&pool, layer, mip, region).unwrap();
                    let texels = region.extent.iter().product::<u32>() as usize;
                    let data: Vec<u8> =
                        colour(layer, mip, x, y, 0).iter().copied().cycle().take(texels * 4).collect();
                    image.write_region(&pool, &uploader, layer, mip, region, &data).unwrap();
                }
            }
        }
        pool.flush(&uploader, &mut [&mut image]).unwrap();
        uploader.wait_idle().unwrap();
        let mut probes = Vec::new();
        for layer in 0..2 {
            for y in 0..2 {
                for x in 0..2 {
                    let c = tile_centre(&layout, 0, x, y, 0);
                    probes.push([c[0], c[1], layer as f32, 0.0]);
                }
            }
        }
        let check = |image: &SoftwareImage, released: Option<[u32; 2]>| {
            let views: (ViewRef<'_>, ViewRef<'_>) =
                (pool.atlas_view().into(), image.indirection_view().into());
            let results = run_warn(device, &shaders::PRT_ARRAY_SOFTWARE, views, &probes, NO_MARK);
            for (i, (p, r)) in probes.iter().zip(&results).enumerate() {
                let (layer, y, x) = ((i / 4) as u32, ((i / 2) % 2) as u32, (i % 2) as u32);
                let own = layer == 1 && released != Some([x, y]);
                let want = if own { colour(1, 0, x, y, 0) } else { colour(layer, 1, 0, 0, 0) };
                close(r.0, as_f32(want), &format!("software layer {layer} tile ({x}, {y})"));
                assert_eq!(decode_code(r.1), (true, false, 0));
                assert_eq!(r.1[1], if own { 0.0 } else { 1.0 }, "LOD used");
                assert_eq!(
                    r.1[2],
                    image.indirection().layer_min_lod(layer, [p[0], p[1]]) as f32,
                    "the layer's min-LOD"
                );
            }
        };
        check(&image, None);
        // Releasing a tile of layer 1 changes layer 1 there and nothing of layer 0.
        let region = layout.tile_region(TileCoord { layer: 1, mip: 0, x: 1, y: 0, z: 0 }).unwrap();
        image.release_region(&pool, 1, 0, region).unwrap();
        pool.flush(&uploader, &mut [&mut image]).unwrap();
        uploader.wait_idle().unwrap();
        check(&image, Some([1, 0]));

        uploader.destroy().unwrap();
        image.release_all(&pool).unwrap();
        drop(image);
        device.wait_submitted().unwrap();
        assert_eq!(pool.used_tiles(), 0);
    });
}

/// The texel (x, y, z) of `mip` of the streamed volume (coordinates within the mip).
fn volume_texel(mip: u32, x: u32, y: u32, z: u32) -> [u8; 4] {
    [(x % 251) as u8, (y % 241) as u8, (z * 3 + 1) as u8, (mip * 20 + 30) as u8]
}

/// A procedural RGBA8 volume of `side`² × `depth` texels in tiles of `tile` (x, y, z) texels.
fn volume_source(side: u32, depth: u32, tile: [u32; 3]) -> Arc<dyn residency_core::streaming::TileSource> {
    use residency_core::streaming::{FnVolumeSource, SourceDepth};
    let mut desc = residency_core::vt_file::VtDesc::new(Format::R8G8B8A8Unorm, side, side, tile[0], tile[1]);
    desc.mip_count = 32 - side.max(depth).leading_zeros();
    let depths = SourceDepth::new(depth, tile[2]);
    Arc::new(FnVolumeSource::new("procedural volume", desc, depths, move |mip, x, y, z| {
        let (w, h) = desc.tile_extent(mip, x, y).expect("in the grid");
        let d = depths.slab_depth(mip, z).expect("in the grid");
        let (x0, y0, z0) = (x * tile[0], y * tile[1], z * tile[2]);
        Ok((0..d)
            .flat_map(|tz| {
                (0..h).flat_map(move |ty| {
                    (0..w).flat_map(move |tx| volume_texel(mip, x0 + tx, y0 + ty, z0 + tz))
                })
            })
            .collect())
    }))
}

/// The `Streamer` streams a volume: a 3D sparse image with a 3D min-LOD map, primed with its
/// coarse chain; `prt_volume.comp` samples it through the frame's bindings and writes the feedback
/// itself at tiles with z > 0, which become resident (with their parents) from that feedback
/// alone; the samples then read the source's texels at mip 0, the tiles read back as the source
/// has them, and the tiles at the same (x, y) at other depths, never asked for, stay
/// non-resident. The software path, volumes as array layers and a tile depth that is not the
/// format's standard one are refused.
#[test]
fn streamer_streams_a_volume_from_gpu_feedback_at_z_above_zero() {
    use residency_core::streaming::TileKey;
    use residency_core::tiles::ResidencyPath;
    use residency_vulkan::recording::MemoryDependency;
    use residency_vulkan::streaming::{StreamError, Streamer, StreamerDesc, TextureViews};
    use vk::{AccessFlags2 as A, PipelineStageFlags2 as S};
    with_gpu(|set| {
        let device = Arc::clone(&set.devices()[0]);
        let probe = SparseImageDesc::new_3d(Format::R8G8B8A8Unorm, 64, 64, 64);
        let shape = SparseImageLayout::for_device(&probe, device.profile()).unwrap().tile_shape();
        let tile = [shape.width, shape.height, shape.depth];
        let (side, depth) = (4 * shape.width, 4 * shape.depth);
        assert_eq!(shape.width, shape.height);
        let desc = |path| {
            StreamerDesc::default()
                .with_name("volume streamer")
                .with_path(path)
                .with_frames_in_flight(2)
                .with_budget_tiles(48)
                .with_workers(2)
        };
        let refused =
            |r: Result<_, StreamError>| assert!(matches!(r, Err(StreamError::UnsupportedSource { .. })));
        let mut software = Streamer::new(&device, desc(ResidencyPath::Software)).unwrap();
        refused(software.add_texture("software volume", volume_source(side, depth, tile)));
        assert_eq!(software.texture_count(), 0);
        drop(software);

        let mut streamer = Streamer::new(&device, desc(ResidencyPath::Hardware)).unwrap();
        refused(
            streamer.add_texture("thin tiles", volume_source(side, depth, [tile[0], tile[1], tile[2] / 2])),
        );
        let source = volume_source(side, depth, tile);
        refused(streamer.add_array_texture("volume layers", &[Arc::clone(&source), Arc::clone(&source)]));
        assert!(streamer.manager().images().next().is_none(), "nothing was added");

        let texture = streamer.add_texture("vt volume", source).unwrap();
        let id = texture.id();
        let layout = streamer.manager().residency(id).unwrap().layout().clone();
        assert_eq!(layout.desc().dimension, SparseDimension::D3);
        assert_eq!(layout.mip(0).unwrap().tiles, [4, 4, 4]);
        assert!(streamer.coarse_chain(&texture).iter().all(|&k| streamer.manager().is_resident(k)));
        let coarse = layout.mip_levels() - 1;
        let image = streamer.sparse_image(&texture).unwrap();
        let got =
            image.read_region(0, coarse, TexelRegion { offset: [0; 3], extent: [1, 1, 1] }, 64).unwrap();
        assert_eq!(got, volume_texel(coarse, 0, 0, 0), "the coarsest mip after priming");

        // Probes at the centres of mip-0 texels inside tiles with z > 0, at LOD 0.
        let wanted = [[1u32, 2, 3], [3, 0, 1], [0, 3, 2]];
        let texel_at = |t: [u32; 3]| [0, 1, 2].map(|a| t[a] * tile[a] + tile[a] / 2 + 1);
        let extent = [side, side, depth];
        let probes: Vec<[f32; 4]> = wanted
            .iter()
            .map(|&t| {
                let p = texel_at(t);
                [0, 1, 2, 3].map(|a| if a == 3 { 0.0 } else { (p[a] as f32 + 0.5) / extent[a] as f32 })
            })
            .collect();
        let n = probes.len() as u64;
        let program = ComputeProgram::new(&device, "volume frame", &shaders::PRT_VOLUME, 2).unwrap();
        let nearest = device.create_sampler(Filter::Nearest).unwrap();
        let mut input = device
            .create_buffer(
                &BufferDesc::new("probes", n * 16, BufferUsage::STORAGE).with_intent(MemoryIntent::Upload),
            )
            .unwrap();
        input.write(0, &probes.iter().flatten().flat_map(|f| f.to_le_bytes()).collect::<Vec<u8>>()).unwrap();
        let outputs: Vec<_> = (0..2)
            .map(|i| {
                device
                    .create_buffer(
                        &BufferDesc::new(format!("results {i}"), n * 32, BufferUsage::STORAGE)
                            .with_intent(MemoryIntent::Readback),
                    )
                    .unwrap()
            })
            .collect();
        let mut push: Vec<u8> = DEFAULT.iter().flat_map(|f| f.to_le_bytes()).collect();
        push.extend_from_slice(&(n as u32).to_le_bytes());
        push.extend_from_slice(&NO_MARK.to_le_bytes());
        push.resize(32, 0);
        let commands = residency_vulkan::CommandContext::new(&device, "volume frames").unwrap();
        let general = vk::ImageLayout::GENERAL;
        let mut sets: Vec<Option<_>> = vec![None, None];
        let mut last = Vec::new();
        let mut misses_seen = 0;
        for _ in 0..12 {
            let bindings = streamer.begin_frame().unwrap();
            let slot = bindings.slot;
            if sets[slot].is_none() {
                let TextureViews::Hardware { image, min_lod } = bindings.textures()[0].views else {
                    panic!("the hardware path")
                };
                let (image, min_lod): (ViewRef<'_>, ViewRef<'_>) = (image.into(), min_lod.into());
                sets[slot] = Some(
                    program
                        .descriptor_set(&[
                            Binding::sampled(image, &nearest, general),
                            Binding::sampled(min_lod, &nearest, general),
                            Binding::Buffer(&input),
                            Binding::Buffer(&outputs[slot]),
                            Binding::Buffer(bindings.feedback.unwrap()),
                            Binding::Buffer(bindings.image_table.unwrap()),
                        ])
                        .unwrap(),
                );
            }
            let submission = commands
                .submit(&[], |rec| {
                    bindings
                        .record(rec, |rec| {
                            program.dispatch(rec, sets[slot].as_ref().unwrap(), &push, [1, 1, 1]).unwrap()
                        })
                        .unwrap();
                    rec.memory_barrier(MemoryDependency {
                        src_stages: S::COMPUTE_SHADER,
                        src_access: A::SHADER_WRITE,
                        dst_stages: S::HOST,
                        dst_access: A::HOST_READ,
                    })
                    .unwrap();
                })
                .unwrap();
            drop(bindings);
            let until = submission.gpu_use();
            streamer.end_frame(until).unwrap();
            device.wait_until(&until).unwrap();
            let mut out = vec![0u8; (n * 32) as usize];
            outputs[slot].read(0, &mut out).unwrap();
            last = out
                .chunks_exact(32)
                .map(|r| {
                    let f = |i: usize| f32::from_le_bytes([r[i], r[i + 1], r[i + 2], r[i + 3]]);
                    ([f(0), f(4), f(8), f(12)].map(|v| v * 255.0), [f(16), f(20), f(24), f(28)])
                })
                .collect::<Vec<Sampled>>();
            misses_seen += streamer.take_feedback_frames().iter().map(|f| f.misses).sum::<u64>();
            streamer.wait_for_loads();
        }
        assert!(misses_seen > 0, "the GPU's feedback asked for the tiles");

        let key = |mip, [x, y, z]: [u32; 3]| {
            TileKey::tile(id, layout.tile_index(TileCoord { layer: 0, mip, x, y, z }).unwrap())
        };
        for &t in &wanted {
            assert!(streamer.manager().is_resident(key(0, t)), "tile {t:?} streamed from feedback");
            assert!(streamer.manager().is_resident(key(1, t.map(|c| c / 2))), "its parent too");
        }
        // The samples read the source's mip-0 texels, resident, at LOD 0.
        for (&t, r) in wanted.iter().zip(&last) {
            let p = texel_at(t);
            assert_eq!(
                r.0.map(f32::round),
                as_f32(volume_texel(0, p[0], p[1], p[2])),
                "the sample in tile {t:?}"
            );
            assert_eq!(decode_code(r.1), (true, false, 0));
            assert_eq!((r.1[1], r.1[2]), (0.0, 0.0), "LOD used, min-LOD map");
        }
        // Exactly the requested mip-0 tiles are resident: the others at the same (x, y) are not.
        let residency = streamer.manager().residency(id).unwrap();
        let resident_mip0: BTreeSet<[u32; 3]> = residency
            .page_table()
            .mapped()
            .filter_map(|(t, _)| layout.tile_coord(t))
            .filter(|c| c.mip == 0)
            .map(|c| [c.x, c.y, c.z])
            .collect();
        assert_eq!(resident_mip0, wanted.iter().copied().collect::<BTreeSet<_>>());
        for z in 0..4 {
            if z != 3 {
                assert!(!streamer.manager().is_resident(key(0, [1, 2, z])));
            }
        }
        // A whole tile at z > 0 reads back exactly as the source has it.
        let image = streamer.sparse_image(&texture).unwrap();
        let region = TexelRegion { offset: [tile[0], 2 * tile[1], 3 * tile[2]], extent: tile };
        let want: Vec<u8> = (0..tile[2])
            .flat_map(|z| {
                (0..tile[1]).flat_map(move |y| {
                    (0..tile[0])
                        .flat_map(move |x| volume_texel(0, tile[0] + x, 2 * tile[1] + y, 3 * tile[2] + z))
                })
            })
            .collect();
        assert_eq!(image.read_region(0, 0, region, 1 << 20).unwrap(), want);

        drop(sets);
        drop((input, outputs, nearest, program));
        streamer.remove_texture(texture).unwrap();
        drop(streamer);
        drop(commands);
    });
}
