//! PRT-Ptex (the seed's part 3): per-face textures packed in one sparse texture array.
//!
//! A 16 × 16 grid of quad faces, each with a resolution of its own (Ptex's per-face resolution
//! control: a sixteenth of the faces at 126² texels, the others at 62², 30² or 14²). The array has
//! one slice per resolution ("multires slices"): slice L holds a slot of `128 >> L` texels for
//! every face whose finest level is L or finer — the face's texels at that resolution inside a
//! one-texel border taken from its neighbours ("borders for filtering"), so a bilinear sample
//! anywhere in the face is seamless. Only the tiles under slots are resident.
//! `crates/residency-vulkan/shaders/ptex.comp` filters manually: the level wanted is clamped to the face's
//! finest level (the MIP fallback), the two slices around it are sampled bilinearly and blended ("manual
//! trilinear filtering").
//!
//! Checks every sample against the same filtering on the CPU and against the continuous surface
//! colour (no seams at face edges), and prints the resident bytes, measured from the tile pool,
//! against packing every face at full resolution with all its levels. Then it manages resolution
//! the PRT way: the finest faces release their finest level's tiles and the face table names the
//! next level as their finest, and every sample is checked again.
//!
//! Run: `RESIDENCY_VALIDATION=sync cargo run --example ptex`

use residency::vulkan::ash::vk;
use residency::vulkan::compute::{Binding, ComputeProgram};
use residency::vulkan::shaders;
use residency::vulkan::sparse::{SparseImage, SparseImageDesc, SparseTilePool, TexelRegion, TilePoolDesc};
use residency::vulkan::{
    BufferDesc, BufferUsage, Device, DeviceSet, DeviceSetDesc, Filter, Format, ImageRegion, MemoryIntent,
    Uploader,
};
use std::collections::BTreeSet;
use std::sync::Arc;

/// Faces per side of the grid.
const GRID: u32 = 16;
/// The array's side in texels.
const SIDE: u32 = 1024;
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

/// The slot of slice `level` of the face whose index among that slice's faces is `index`: its
/// origin in the slice and its side.
fn slot_rect(level: u32, index: u32) -> ([u32; 2], u32) {
    let slot = FINEST_SLOT >> level;
    let per_row = SIDE / slot;
    ([index % per_row * slot, index / per_row * slot], slot)
}

/// The texels of face (i, j)'s slot at `level`: the interior at `slot - 2` texels per side and a
/// border of one texel sampled from the surface beyond the face's edges (its neighbours' texels;
/// outside the grid, the surface continued).
fn slot_texels(i: u32, j: u32, level: u32) -> Vec<[u8; 4]> {
    let slot = FINEST_SLOT >> level;
    let n = (slot - 2) as f32;
    (0..slot)
        .flat_map(|y| (0..slot).map(move |x| (x, y)))
        .map(|(x, y)| {
            let u = (x as f32 - 1.0 + 0.5) / n;
            let v = (y as f32 - 1.0 + 0.5) / n;
            surface(i as f32 + u, j as f32 + v, level).map(|c| (c.clamp(0.0, 1.0) * 255.0).round() as u8)
        })
        .collect()
}

/// A face's slot index in each level's slice (`u32::MAX` where it has none) and its finest level.
#[derive(Clone, Debug)]
struct Face {
    i: u32,
    j: u32,
    finest: u32,
    slots: [u32; LEVELS as usize],
}

/// The level wanted clamped to the face's finest (the MIP fallback) and the coarsest, and the two
/// levels and blend of the manual trilinear filter.
fn levels(face: &Face, wanted: f32) -> (u32, u32, f32) {
    let level = wanted.clamp(face.finest as f32, (LEVELS - 1) as f32);
    let l0 = level.floor() as u32;
    (l0, (l0 + 1).min(LEVELS - 1), level - l0 as f32)
}

/// Bilinear filtering of `texels` (a slot of `slot` texels) at face coordinates (u, v), as the
/// sampler filters (texel centres at half-integers).
fn bilinear(texels: &[[u8; 4]], slot: u32, u: f32, v: f32) -> [f32; 4] {
    let n = (slot - 2) as f32;
    let (tx, ty) = (1.0 + u * n - 0.5, 1.0 + v * n - 0.5);
    let (x0, y0) = (tx.floor().clamp(0.0, (slot - 2) as f32), ty.floor().clamp(0.0, (slot - 2) as f32));
    let (fx, fy) = (tx - x0, ty - y0);
    let at = |x: f32, y: f32| texels[(y as u32 * slot + x as u32) as usize].map(|c| c as f32 / 255.0);
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
    /// Samples within [`SURFACE_TOLERANCE`] of the continuous surface colour (and the alpha of the
    /// blended levels).
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
    // The faces, their levels and their slots in each level's slice (in face order).
    let mut counts = [0u32; LEVELS as usize];
    let mut faces_per_level = [0u32; LEVELS as usize];
    let faces: Vec<Face> = (0..GRID * GRID)
        .map(|f| {
            let (i, j) = (f % GRID, f / GRID);
            let finest = finest_level(i, j);
            faces_per_level[finest as usize] += 1;
            let slots = std::array::from_fn(|l| {
                if l as u32 >= finest {
                    counts[l] += 1;
                    counts[l] - 1
                } else {
                    u32::MAX
                }
            });
            Face { i, j, finest, slots }
        })
        .collect();

    let pool = SparseTilePool::new(
        Arc::clone(device),
        TilePoolDesc::default().with_name("ptex tiles").with_tiles_per_heap(128),
    )?;
    let desc = SparseImageDesc::new_2d(Format::R8G8B8A8Unorm, SIDE, SIDE)
        .with_mip_levels(1)
        .with_array_layers(LEVELS);
    let mut image = SparseImage::new(&pool, "ptex slices", &desc, false)?;
    let shape = image.layout().tile_shape();

    // Each slice's texels on the CPU (zero outside slots), the tiles under slots committed.
    let mut slices = vec![vec![[0u8; 4]; (SIDE * SIDE) as usize]; LEVELS as usize];
    let mut slot_data = vec![Vec::new(); faces.len() * LEVELS as usize];
    let mut tiles = BTreeSet::new();
    let mut per_face_bytes = 0u64;
    for (f, face) in faces.iter().enumerate() {
        for level in face.finest..LEVELS {
            let (origin, slot) = slot_rect(level, face.slots[level as usize]);
            let texels = slot_texels(face.i, face.j, level);
            for y in 0..slot {
                for x in 0..slot {
                    slices[level as usize][((origin[1] + y) * SIDE + origin[0] + x) as usize] =
                        texels[(y * slot + x) as usize];
                }
            }
            per_face_bytes += u64::from(slot * slot * 4);
            image.commit_region(
                &pool,
                level,
                0,
                TexelRegion { offset: [origin[0], origin[1], 0], extent: [slot, slot, 1] },
            )?;
            for ty in origin[1] / shape.height..(origin[1] + slot).div_ceil(shape.height) {
                for tx in origin[0] / shape.width..(origin[0] + slot).div_ceil(shape.width) {
                    tiles.insert((level, tx, ty));
                }
            }
            slot_data[f * LEVELS as usize + level as usize] = texels;
        }
    }
    let stats = pool.flush_binds(&mut [&mut image])?;
    let uploader = Uploader::new(device, "ptex", 4 << 20)?;
    for &(level, tx, ty) in &tiles {
        let (x0, y0) = (tx * shape.width, ty * shape.height);
        let data: Vec<u8> = (0..shape.height)
            .flat_map(|y| (0..shape.width).map(move |x| (x, y)))
            .flat_map(|(x, y)| slices[level as usize][((y0 + y) * SIDE + x0 + x) as usize])
            .collect();
        let region =
            ImageRegion::new(&image, 0, [x0, y0, 0], [shape.width, shape.height, 1]).with_layer(level);
        uploader.write_image(&region, &data)?;
    }
    uploader.wait_idle()?;
    let resident_bytes = pool.used_tiles() * pool.stats().tile_bytes;
    let full_resolution_bytes =
        u64::from(GRID * GRID) * (0..LEVELS).map(|l| u64::from((FINEST_SLOT >> l).pow(2) * 4)).sum::<u64>();
    println!(
        "{}: {} faces on a {GRID}×{GRID} grid, finest levels {faces_per_level:?} (slots of {:?} texels), \
         {} tiles resident ({} bind entries)",
        device.name(),
        faces.len(),
        (0..LEVELS).map(|l| FINEST_SLOT >> l).collect::<Vec<_>>(),
        tiles.len(),
        stats.bind_entries,
    );

    // The samples: inside and on the edges of every face at several wanted levels, and pairs of
    // samples of one point on the two sides of every inner face edge.
    let mut probes: Vec<(u32, f32, f32, f32)> = Vec::new();
    for f in 0..faces.len() as u32 {
        for (u, v) in [(0.0, 0.5), (1.0, 0.3), (0.37, 0.0), (0.61, 1.0), (0.43, 0.58)] {
            for wanted in [0.0, 1.5, 2.25, 3.0, 3.75, 4.0] {
                probes.push((f, u, v, wanted));
            }
        }
    }
    let pairs_from = probes.len();
    for face in &faces {
        let f = face.j * GRID + face.i;
        if face.i + 1 < GRID {
            probes.extend([(f, 1.0, 0.45, 3.5), (f + 1, 0.0, 0.45, 3.5)]);
        }
        if face.j + 1 < GRID {
            probes.extend([(f, 0.7, 1.0, 3.5), (f + GRID, 0.7, 0.0, 3.5)]);
        }
    }

    let program = ComputeProgram::new(device, "ptex.comp", &shaders::PTEX, 2)?;
    let sampler = device.create_sampler(Filter::Trilinear)?;
    let mut table = device.create_buffer(
        &BufferDesc::new("ptex faces", faces.len() as u64 * 32, BufferUsage::STORAGE)
            .with_intent(MemoryIntent::Upload),
    )?;
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
    let mut sample = |image: &SparseImage,
                      faces: &[Face]|
     -> Result<Vec<[f32; 8]>, Box<dyn std::error::Error>> {
        // The previous dispatch has completed (`submit_compute` waits), so the table can change.
        let words: Vec<u8> = faces
            .iter()
            .flat_map(|face| {
                let mut w = [0u32; 8];
                w[0] = face.finest;
                w[1..1 + LEVELS as usize]
                    .copy_from_slice(&face.slots.map(|s| if s == u32::MAX { 0 } else { s }));
                w
            })
            .flat_map(u32::to_le_bytes)
            .collect();
        table.write(0, &words)?;
        let set = program.descriptor_set(&[
            Binding::sampled(image, &sampler, vk::ImageLayout::GENERAL),
            Binding::Buffer(&table),
            Binding::Buffer(&input),
            Binding::Buffer(&output),
        ])?;
        let push: Vec<u8> =
            [n as u32, SIDE, LEVELS, FINEST_SLOT].iter().flat_map(|v| v.to_le_bytes()).collect();
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
    let check = |faces: &[Face], got: &[[f32; 8]]| {
        let (mut matched_reference, mut matched_surface) = (0, 0);
        for (&(f, u, v, wanted), g) in probes.iter().zip(got) {
            let face = &faces[f as usize];
            let (l0, l1, blend) = levels(face, wanted);
            let sample = |l: u32| {
                bilinear(&slot_data[f as usize * LEVELS as usize + l as usize], FINEST_SLOT >> l, u, v)
            };
            let (a, b) = (sample(l0), sample(l1));
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
            let truth = surface(face.i as f32 + u, face.j as f32 + v, 0);
            let alpha = (l0 as f32 * (1.0 - blend) + l1 as f32 * blend) * 50.0 / 255.0;
            if close(&g[..3], &truth[..3], SURFACE_TOLERANCE) && (g[3] - alpha).abs() <= REFERENCE_TOLERANCE {
                matched_surface += 1;
            }
        }
        (matched_reference, matched_surface)
    };

    let got = sample(&image, &faces)?;
    let (matched_reference, matched_surface) = check(&faces, &got);
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

    // Resolution management: the finest faces give up their finest level (its slots, one tile
    // each, are released) and the table names their next level as finest; samples that wanted the
    // finest level fall back to it.
    let mut coarser = faces.clone();
    let mut released_faces = 0;
    for face in coarser.iter_mut().filter(|f| f.finest == 0) {
        let (origin, slot) = slot_rect(0, face.slots[0]);
        if slot % shape.width != 0 || slot % shape.height != 0 || origin[0] % shape.width != 0 {
            return Err(format!("a level-0 slot of {slot} texels does not hold whole {shape:?} tiles").into());
        }
        image.release_region(
            &pool,
            0,
            0,
            TexelRegion { offset: [origin[0], origin[1], 0], extent: [slot, slot, 1] },
        )?;
        face.finest = 1;
        face.slots[0] = u32::MAX;
        released_faces += 1;
    }
    // The unbinds wait for the samples above (every residency submission so far).
    pool.flush_binds(&mut [&mut image])?;
    let resident_bytes_after_release = pool.used_tiles() * pool.stats().tile_bytes;
    let got = sample(&image, &coarser)?;
    let (matched_after_release, surface_after_release) = check(&coarser, &got);
    println!(
        "{released_faces} faces dropped to their next level: {matched_after_release} of {samples} samples \
         match the CPU's filtering, {surface_after_release} the surface; resident {} KiB",
        resident_bytes_after_release >> 10
    );

    device.wait_idle()?;
    drop((table, input, output, program, sampler));
    uploader.destroy()?;
    image.release_all(&pool)?;
    pool.flush_binds(&mut [&mut image])?;
    drop((image, pool));
    Ok(Outcome {
        faces: faces.len() as u32,
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
