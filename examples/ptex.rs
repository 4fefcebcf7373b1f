//! PRT-Ptex (the seed's part 3): per-face textures packed in one sparse texture array, driven
//! through `residency::vulkan::sparse::ptex::PtexTexture`.
//!
//! A 16 × 16 grid of quad faces, each with a resolution of its own (Ptex's per-face resolution
//! control: a sixteenth of the faces at 126² texels, the others at 62², 30² or 14²). The library
//! packs them into one slice per resolution with one-texel borders from each face's neighbours,
//! commits only the tiles under slots and keeps the face table; `shaders/include/ptex.glsl`
//! (through `ptex.comp`) filters manually: the level wanted clamped to the face's finest resident
//! level (the MIP fallback), the two slices around it sampled bilinearly and blended.
//!
//! The example checks every sample against the same filtering on the CPU and against the
//! continuous surface colour (no seams at face edges), and prints the resident bytes, measured
//! from the tile pool, against packing every face at full resolution with all its levels. Then it
//! manages resolution the PRT way: the finest faces drop their finest level (its tiles released,
//! the face table naming the next level) and every sample is checked again.
//!
//! Run: `RESIDENCY_VALIDATION=sync cargo run --example ptex`

use residency::vulkan::ash::vk;
use residency::vulkan::compute::{Binding, ComputeProgram};
use residency::vulkan::shaders;
use residency::vulkan::sparse::ptex::{bordered_slot, grid_faces, PtexDesc, PtexEdges, PtexTexture};
use residency::vulkan::sparse::{SparseTilePool, TilePoolDesc};
use residency::vulkan::{
    BufferDesc, BufferUsage, Device, DeviceSet, DeviceSetDesc, Format, MemoryIntent, Uploader,
};
use std::sync::Arc;

/// Faces per side of the grid.
const GRID: u32 = 16;
/// Slices (levels): slots of 128, 64, 32, 16 and 8 texels.
const LEVELS: u32 = 5;
/// The slot side of slice 0 (interior 126 texels plus the border).
const FINEST_SLOT: u32 = 128;
/// How far the GPU's filtering may be from the CPU's (8-bit filter weights and rounding).
const REFERENCE_TOLERANCE: f32 = 3.0 / 255.0;
/// How far a sample may be from the continuous surface colour (bilinear reconstruction of a
/// smooth colour; a face without borders is off by some 0.05 at its edges at the coarse levels).
const SURFACE_TOLERANCE: f32 = 0.03;

/// The finest level of face (i, j): 1 in 16 faces at level 0, 3 at level 1, 6 at 2 and 6 at 3.
fn finest_level(i: u32, j: u32) -> u32 {
    match (i * 7 + j * 13) % 16 {
        0 => 0,
        1..=3 => 1,
        4..=9 => 2,
        _ => 3,
    }
}

/// The surface's colour at grid position (x, y) (face (i, j) covers [i, i + 1] × [j, j + 1]); the
/// alpha channel tells the level a texel comes from.
fn surface(x: f32, y: f32, level: u32) -> [f32; 4] {
    [
        0.5 + 0.5 * (1.3 * x + 0.4 * y).sin(),
        0.5 + 0.5 * (0.9 * y - 0.5 * x).cos(),
        0.5 + 0.25 * (0.7 * (x + y)).sin() + 0.25 * (1.1 * x).cos(),
        level as f32 * 50.0 / 255.0,
    ]
}

/// Face (i, j)'s texels from `finest` to the last level (`(128 >> L) - 2` a side at level L),
/// sampled from the surface at texel centres: what `PtexTexture::new` takes per face.
fn face_texels(i: u32, j: u32, finest: u32) -> Vec<u8> {
    (finest..LEVELS)
        .flat_map(|level| {
            let n = (FINEST_SLOT >> level) - 2;
            (0..n * n).flat_map(move |k| {
                let (u, v) = ((k % n) as f32 + 0.5, (k / n) as f32 + 0.5);
                surface(i as f32 + u / n as f32, j as f32 + v / n as f32, level)
                    .map(|c| (c.clamp(0.0, 1.0) * 255.0).round() as u8)
            })
        })
        .collect()
}

/// The levels the manual trilinear filter blends for a face whose finest resident level is
/// `finest`: the level wanted clamped to it and to the last (the MIP fallback).
fn levels(finest: u32, wanted: f32) -> (u32, u32, f32) {
    let level = wanted.clamp(finest as f32, (LEVELS - 1) as f32);
    let l0 = level.floor() as u32;
    (l0, (l0 + 1).min(LEVELS - 1), level - l0 as f32)
}

/// Bilinear filtering of `texels` (a slot of `slot` texels, RGBA8) at face coordinates (u, v), as
/// the sampler filters (texel centres at half-integers).
fn bilinear(texels: &[u8], slot: u32, u: f32, v: f32) -> [f32; 4] {
    let n = (slot - 2) as f32;
    let (tx, ty) = (1.0 + u * n - 0.5, 1.0 + v * n - 0.5);
    let (x0, y0) = (tx.floor().clamp(0.0, n), ty.floor().clamp(0.0, n));
    let (fx, fy) = (tx - x0, ty - y0);
    let at = |x: f32, y: f32| {
        let k = (y as usize * slot as usize + x as usize) * 4;
        std::array::from_fn::<f32, 4, _>(|c| f32::from(texels[k + c]) / 255.0)
    };
    let (a, b, c, d) = (at(x0, y0), at(x0 + 1.0, y0), at(x0, y0 + 1.0), at(x0 + 1.0, y0 + 1.0));
    std::array::from_fn(|k| {
        let top = a[k] + (b[k] - a[k]) * fx;
        let bottom = c[k] + (d[k] - c[k]) * fx;
        top + (bottom - top) * fy
    })
}

/// What the example checked and measured, for the test that runs it.
#[derive(Debug)]
pub struct Outcome {
    /// Faces.
    pub faces: u32,
    /// Faces per finest level.
    pub faces_per_level: [u32; LEVELS as usize],
    /// Samples taken.
    pub samples: usize,
    /// Samples within [`REFERENCE_TOLERANCE`] of the CPU's filtering, with its levels and blend.
    pub matched_reference: usize,
    /// Samples within [`SURFACE_TOLERANCE`] of the continuous surface colour (but on the mesh's
    /// boundary, where borders clamp) and with the alpha of the blended levels (but on face
    /// edges, where the border holds the neighbour's level).
    pub matched_surface: usize,
    /// The largest difference of a colour channel between the two sides of a face edge (the same
    /// point sampled as u = 1 of a face and u = 0 of its right neighbour, or v likewise).
    pub max_seam: f32,
    /// Edge pairs sampled.
    pub seam_pairs: usize,
    /// Bytes resident, measured from the tile pool (whole 64 KiB tiles).
    pub resident_bytes: u64,
    /// Bytes of every face's slots at its own resolutions (the texels alone, no tile rounding).
    pub per_face_bytes: u64,
    /// Bytes of every face packed at full resolution with all its levels (128² + 64² + … slots).
    pub full_resolution_bytes: u64,
    /// Faces whose finest level was released afterwards (resolution management).
    pub released_faces: u32,
    /// Samples after the release that matched both the CPU's filtering and the surface.
    pub matched_after_release: usize,
    /// Bytes resident after the release, measured from the tile pool.
    pub resident_bytes_after_release: u64,
}

impl Outcome {
    /// Whether the example's own checks passed: every sample as the CPU filters it and as the
    /// surface is, no seam, whole tiles holding at least the slots' texels and less than full
    /// resolution.
    pub fn passed(&self) -> bool {
        self.faces == GRID * GRID
            && self.matched_reference == self.samples
            && self.matched_surface == self.samples
            && self.seam_pairs > 0
            && self.max_seam < SURFACE_TOLERANCE
            && self.per_face_bytes <= self.resident_bytes
            && self.resident_bytes < self.full_resolution_bytes
            && self.released_faces > 0
            && self.matched_after_release == self.samples
            && self.resident_bytes_after_release < self.resident_bytes
    }
}

/// Runs the example on `device`.
pub fn run(device: &Arc<Device>) -> Result<Outcome, Box<dyn std::error::Error>> {
    let faces = grid_faces(GRID, GRID, finest_level);
    let mut faces_per_level = [0u32; LEVELS as usize];
    for face in &faces {
        faces_per_level[face.finest_level as usize] += 1;
    }
    let data: Vec<Vec<u8>> = faces
        .iter()
        .enumerate()
        .map(|(f, face)| face_texels(f as u32 % GRID, f as u32 / GRID, face.finest_level))
        .collect();
    let texels: Vec<&[u8]> = data.iter().map(Vec::as_slice).collect();
    let desc = PtexDesc { finest_slot: FINEST_SLOT, levels: LEVELS, faces };

    let pool = SparseTilePool::new(
        Arc::clone(device),
        TilePoolDesc::default().with_name("ptex tiles").with_tiles_per_heap(128),
    )?;
    let uploader = Uploader::new(device, "ptex", 4 << 20)?;
    let mut texture =
        PtexTexture::new(&pool, &uploader, "ptex slices", Format::R8G8B8A8Unorm, &desc, &texels)?;
    let layout = texture.layout().clone();
    let resident_bytes = pool.used_tiles() * pool.stats().tile_bytes;
    let per_face_bytes: u64 = layout.slots().map(|(_, s)| u64::from(s.side).pow(2) * 4).sum();
    let full_resolution_bytes =
        u64::from(GRID * GRID) * (0..LEVELS).map(|l| u64::from((FINEST_SLOT >> l).pow(2) * 4)).sum::<u64>();
    println!(
        "{}: {} faces on a {GRID}×{GRID} grid, finest levels {faces_per_level:?} (slots of {:?} texels in \
         {}² slices), {} tiles resident",
        device.name(),
        layout.face_count(),
        (0..LEVELS).map(|l| FINEST_SLOT >> l).collect::<Vec<_>>(),
        layout.side(),
        texture.residency().tiles().len(),
    );

    // The CPU's copy of every slot (the same borders the library built), for the reference.
    let edges = PtexEdges::new(&layout, 4, &texels).ok_or("face data")?;
    let slot = |f: u32, level: u32| -> Vec<u8> {
        let finest = layout.finest_level(f).unwrap_or(0);
        let at: usize = (finest..level).map(|l| (layout.interior(l) as usize).pow(2) * 4).sum();
        let n = layout.interior(level) as usize;
        bordered_slot(&layout, &edges, f, level, &data[f as usize][at..at + n * n * 4]).unwrap_or_default()
    };
    let slots: Vec<Vec<Vec<u8>>> = (0..layout.face_count())
        .map(|f| {
            (0..LEVELS)
                .map(|l| if l >= layout.finest_level(f).unwrap_or(0) { slot(f, l) } else { Vec::new() })
                .collect()
        })
        .collect();

    // The samples: inside and on the edges of every face at several wanted levels, and pairs of
    // samples of one point on the two sides of every inner face edge.
    let mut probes: Vec<(u32, f32, f32, f32)> = Vec::new();
    for f in 0..layout.face_count() {
        for (u, v) in [(0.0, 0.5), (1.0, 0.3), (0.37, 0.0), (0.61, 1.0), (0.43, 0.58)] {
            for wanted in [0.0, 1.5, 2.25, 3.0, 3.75, 4.0] {
                probes.push((f, u, v, wanted));
            }
        }
    }
    let pairs_from = probes.len();
    for f in 0..layout.face_count() {
        let (i, j) = (f % GRID, f / GRID);
        if i + 1 < GRID {
            probes.extend([(f, 1.0, 0.45, 3.5), (f + 1, 0.0, 0.45, 3.5)]);
        }
        if j + 1 < GRID {
            probes.extend([(f, 0.7, 1.0, 3.5), (f + GRID, 0.7, 0.0, 3.5)]);
        }
    }

    let program = ComputeProgram::new(device, "ptex.comp", &shaders::PTEX, 2)?;
    let n = probes.len() as u64;
    let mut input = device.create_buffer(
        &BufferDesc::new("ptex probes", n * 16, BufferUsage::STORAGE).with_intent(MemoryIntent::Upload),
    )?;
    let bytes: Vec<u8> =
        probes.iter().flat_map(|&(f, u, v, l)| [f as f32, u, v, l]).flat_map(f32::to_le_bytes).collect();
    input.write(0, &bytes)?;
    let output = device.create_buffer(
        &BufferDesc::new("ptex results", n * 32, BufferUsage::STORAGE).with_intent(MemoryIntent::Readback),
    )?;
    let sample = |texture: &PtexTexture| -> Result<Vec<[f32; 8]>, Box<dyn std::error::Error>> {
        let set = program.descriptor_set(&[
            Binding::sampled(texture.image(), texture.sampler(), vk::ImageLayout::GENERAL),
            Binding::Buffer(texture.table()),
            Binding::Buffer(&input),
            Binding::Buffer(&output),
        ])?;
        let push = (n as u32).to_le_bytes();
        let groups = [(n as u32).div_ceil(64), 1, 1];
        program.check_dispatch(&push, groups)?;
        device.submit_compute("ptex samples", |rec| {
            program.dispatch(rec, &set, &push, groups).expect("checked before the submission");
        })?;
        let mut out = vec![0u8; (n * 32) as usize];
        output.read(0, &mut out)?;
        Ok(out
            .chunks_exact(32)
            .map(|r| {
                std::array::from_fn(|k| {
                    f32::from_le_bytes([r[4 * k], r[4 * k + 1], r[4 * k + 2], r[4 * k + 3]])
                })
            })
            .collect())
    };
    let check = |texture: &PtexTexture, got: &[[f32; 8]]| {
        let (mut matched_reference, mut matched_surface) = (0, 0);
        for (&(f, u, v, wanted), g) in probes.iter().zip(got) {
            let finest = texture.residency().finest_resident(f).unwrap_or(0);
            let (l0, l1, blend) = levels(finest, wanted);
            let (a, b) = (
                bilinear(&slots[f as usize][l0 as usize], FINEST_SLOT >> l0, u, v),
                bilinear(&slots[f as usize][l1 as usize], FINEST_SLOT >> l1, u, v),
            );
            let want: [f32; 4] = std::array::from_fn(|k| a[k] + (b[k] - a[k]) * blend);
            let close = |x: &[f32], y: &[f32], tolerance: f32| {
                x.iter().zip(y).all(|(p, q)| (p - q).abs() <= tolerance)
            };
            if close(&g[..4], &want, REFERENCE_TOLERANCE)
                && g[4] == l0 as f32
                && g[5] == l1 as f32
                && (g[6] - blend).abs() < 1e-6
            {
                matched_reference += 1;
            }
            let (i, j) = (f % GRID, f / GRID);
            let truth = surface(i as f32 + u, j as f32 + v, 0);
            let alpha = (l0 as f32 * (1.0 - blend) + l1 as f32 * blend) * 50.0 / 255.0;
            // On the mesh's boundary the border clamps to the face's own texels, half a texel off
            // the surface continued; on a face edge the border's alpha is the level the neighbour
            // has there (its finest when coarser than this one).
            let boundary = (i == 0 && u == 0.0)
                || (i == GRID - 1 && u == 1.0)
                || (j == 0 && v == 0.0)
                || (j == GRID - 1 && v == 1.0);
            let edge = u == 0.0 || u == 1.0 || v == 0.0 || v == 1.0;
            if (boundary || close(&g[..3], &truth[..3], SURFACE_TOLERANCE))
                && (edge || (g[3] - alpha).abs() <= REFERENCE_TOLERANCE)
            {
                matched_surface += 1;
            }
        }
        (matched_reference, matched_surface)
    };

    let got = sample(&texture)?;
    let (matched_reference, matched_surface) = check(&texture, &got);
    let seams: Vec<f32> = got[pairs_from..]
        .chunks_exact(2)
        .map(|p| (0..3).map(|k| (p[0][k] - p[1][k]).abs()).fold(0.0, f32::max))
        .collect();
    let max_seam = seams.iter().copied().fold(0.0, f32::max);
    let samples = probes.len();
    println!(
        "{matched_reference} of {samples} samples match the CPU's manual trilinear filtering, \
         {matched_surface} the surface colour; largest step across {} face edges: {max_seam:.4}",
        seams.len()
    );
    println!(
        "resident {} KiB (measured, whole tiles; {} KiB of slot texels) against {} KiB with every face \
         at full resolution ({:.1} %)",
        resident_bytes >> 10,
        per_face_bytes >> 10,
        full_resolution_bytes >> 10,
        100.0 * resident_bytes as f64 / full_resolution_bytes as f64
    );

    // Resolution management: the finest faces give up their finest level (its slot's tiles are
    // released, the face table names their next level); samples that wanted it fall back.
    let mut released_faces = 0;
    for f in 0..layout.face_count() {
        if layout.finest_level(f) == Some(0) {
            texture.drop_finest_level(&pool, f)?;
            released_faces += 1;
        }
    }
    let resident_bytes_after_release = pool.used_tiles() * pool.stats().tile_bytes;
    let got = sample(&texture)?;
    let (matched_after_release, surface_after_release) = check(&texture, &got);
    println!(
        "{released_faces} faces dropped to their next level: {matched_after_release} of {samples} samples \
         match the CPU's filtering, {surface_after_release} the surface; resident {} KiB",
        resident_bytes_after_release >> 10
    );

    device.wait_idle()?;
    drop((input, output, program, texture));
    uploader.destroy()?;
    drop(pool);
    Ok(Outcome {
        faces: layout.face_count(),
        faces_per_level,
        samples,
        matched_reference,
        matched_surface,
        max_seam,
        seam_pairs: seams.len(),
        resident_bytes,
        per_face_bytes,
        full_resolution_bytes,
        released_faces,
        matched_after_release: matched_after_release.min(surface_after_release),
        resident_bytes_after_release,
    })
}

#[allow(dead_code, reason = "the test that runs this example calls `run` and not `main`")]
fn main() -> Result<(), Box<dyn std::error::Error>> {
    tracing_subscriber::fmt().with_env_filter("warn").init();
    let set = DeviceSet::new(&DeviceSetDesc::default())?;
    let outcome = run(&set.devices()[0])?;
    let problems = set.validation_log().problem_count();
    drop(set);
    let leaks = residency::vulkan::LEAKS_AT_TEARDOWN.load(std::sync::atomic::Ordering::SeqCst);
    println!("validation problems: {problems}; leaked at teardown: {leaks}");
    if !outcome.passed() || problems != 0 || leaks != 0 {
        return Err("the example failed its checks".into());
    }
    Ok(())
}
