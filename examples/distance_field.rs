//! A sparse distance-field volume ray-marched by a compute shader (the seed's "volume textures +
//! ray marching: default value is maximum step distance for ray marching distance fields").
//!
//! The volume is a 128³ `R32_SFLOAT` sparse 3D image holding the distance in texels to the nearest
//! of three spheres. Only the bricks (64 KiB tiles) with a texel nearer the surface than the
//! maximum step are resident; every texel of the others is at least that far away, so a ray that
//! samples one of them and gets the residency default value — the maximum step — steps no further
//! than the true distance and never crosses the surface.
//! `crates/residency-vulkan/shaders/distance_field.comp` marches one ray per pixel with `residencyFetch`; the
//! CPU marches the same rays through the same bricks and the same rule, and the image must match it. The CPU
//! also marches the dense field (every brick resident): the sparse march must find the same surface. Prints
//! resident bytes against the dense volume's.
//!
//! Run: `RESIDENCY_VALIDATION=sync cargo run --example distance_field`

use residency::vulkan::ash::vk;
use residency::vulkan::compute::{Binding, ComputeProgram};
use residency::vulkan::shaders;
use residency::vulkan::sparse::{SparseImage, SparseImageDesc, SparseTilePool, TexelRegion, TilePoolDesc};
use residency::vulkan::{
    BufferDesc, BufferUsage, Device, DeviceSet, DeviceSetDesc, Filter, Format, ImageRegion, MemoryIntent,
    Uploader,
};
use std::sync::Arc;

/// The volume's side in texels.
pub const SIDE: u32 = 128;
/// The rendered image's side in pixels.
pub const PIXELS: u32 = 96;
/// The maximum step in texels: the residency default value.
const MAX_STEP: f32 = 8.0;
/// Steps per ray at most.
const STEP_LIMIT: i32 = 96;
/// The rays' direction (normalised in `direction`).
const DIRECTION: [f32; 3] = [0.25, 0.15, 1.0];
/// The spheres: centre (texels) and radius.
const SPHERES: [([f32; 3], f32); 3] =
    [([40.0, 48.0, 40.0], 14.0), ([88.0, 80.0, 72.0], 18.0), ([64.0, 36.0, 100.0], 10.0)];

/// The distance from texel centre (x, y, z) to the nearest sphere's surface (negative inside).
fn distance(x: u32, y: u32, z: u32) -> f32 {
    let p = [x as f32 + 0.5, y as f32 + 0.5, z as f32 + 0.5];
    SPHERES
        .iter()
        .map(|(c, r)| ((p[0] - c[0]).powi(2) + (p[1] - c[1]).powi(2) + (p[2] - c[2]).powi(2)).sqrt() - r)
        .fold(f32::INFINITY, f32::min)
}

/// How far from a sphere's surface a hit may lie: the hit threshold (0.5 texel) plus the half
/// diagonal of a texel (the march reads the nearest texel's centre, up to 0.87 texel from the
/// point) and the overshoot of a step from there.
pub const SURFACE_TOLERANCE: f32 = 2.0;

/// The point at `t` along the ray of pixel (px, py).
fn ray_point(px: u32, py: u32, t: f32) -> [f32; 3] {
    let scale = SIDE as f32 / PIXELS as f32;
    let dir = direction();
    [(px as f32 + 0.5) * scale + t * dir[0], (py as f32 + 0.5) * scale + t * dir[1], t * dir[2]]
}

fn direction() -> [f32; 3] {
    let [x, y, z] = DIRECTION;
    let n = (x * x + y * y + z * z).sqrt();
    [x / n, y / n, z / n]
}

/// One pixel of the march: where it hit (`None`: no surface within the volume or the step limit).
#[derive(Clone, Copy, Debug, PartialEq)]
struct Ray {
    hit: Option<f32>,
    steps: u32,
    missing: u32,
}

/// Marches the ray of pixel (px, py) on the CPU, as the shader does, through `sample` (the
/// distance at a texel, `None` where its brick is not resident).
fn march(px: u32, py: u32, sample: &dyn Fn([u32; 3]) -> Option<f32>) -> Ray {
    let side = SIDE as f32;
    let (mut t, mut steps, mut missing) = (0.0f32, 0, 0);
    while steps < STEP_LIMIT as u32 {
        let p = ray_point(px, py, t);
        if p.iter().any(|&c| !(0.0..side).contains(&c)) {
            break;
        }
        let texel = p.map(|c| c.floor() as u32);
        let d = sample(texel).unwrap_or_else(|| {
            missing += 1;
            MAX_STEP
        });
        if d < 0.5 {
            return Ray { hit: Some(t), steps, missing };
        }
        t += d;
        steps += 1;
    }
    Ray { hit: None, steps, missing }
}

/// What the example checked, for the test that runs it.
#[derive(Debug)]
pub struct Outcome {
    /// Pixels.
    pub pixels: usize,
    /// Pixels whose GPU ray matched the CPU's sparse march (hit or miss alike, t within 0.01
    /// texel, the same steps and non-resident samples).
    pub matched: usize,
    /// Pixels that hit a surface.
    pub hits: usize,
    /// Hits whose point lies on a sphere's surface (the analytic distance within
    /// [`SURFACE_TOLERANCE`]): the default value never stepped through a surface.
    pub on_surface: usize,
    /// Pixels whose sparse march hit where the dense march (every brick resident) missed or the
    /// reverse: rays grazing a silhouette, where a step of another length clips or skips the
    /// edge.
    pub silhouette_differs: usize,
    /// Samples of non-resident bricks over all rays (each a step of the default value).
    pub default_steps: u64,
    /// Bytes resident (bricks × 64 KiB) and bytes of the dense volume.
    pub resident_bytes: u64,
    /// Bytes of the volume if every brick were resident.
    pub dense_bytes: u64,
}

/// Runs the example on `device`.
pub fn run(device: &Arc<Device>) -> Result<Outcome, Box<dyn std::error::Error>> {
    let pool = SparseTilePool::new(
        Arc::clone(device),
        TilePoolDesc::default().with_name("distance field bricks").with_tiles_per_heap(64),
    )?;
    let desc = SparseImageDesc::new_3d(Format::R32Float, SIDE, SIDE, SIDE).with_mip_levels(1);
    let mut image = SparseImage::new(&pool, "distance field", &desc, false)?;
    let shape = image.layout().tile_shape();
    let bricks = [SIDE / shape.width, SIDE / shape.height, SIDE / shape.depth];
    if bricks.iter().zip([shape.width, shape.height, shape.depth]).any(|(&b, s)| b * s != SIDE) {
        return Err(format!("{}³ is not a whole number of {shape:?} bricks", SIDE).into());
    }

    // The field, and which bricks hold a texel nearer the surface than the maximum step.
    let field: Vec<f32> = (0..SIDE)
        .flat_map(|z| (0..SIDE).flat_map(move |y| (0..SIDE).map(move |x| distance(x, y, z))))
        .collect();
    let at = |[x, y, z]: [u32; 3]| field[((z * SIDE + y) * SIDE + x) as usize];
    let brick_of = |[x, y, z]: [u32; 3]| {
        ((z / shape.depth * bricks[1] + y / shape.height) * bricks[0] + x / shape.width) as usize
    };
    let mut occupied = vec![false; (bricks[0] * bricks[1] * bricks[2]) as usize];
    for z in 0..SIDE {
        for y in 0..SIDE {
            for x in 0..SIDE {
                if at([x, y, z]) < MAX_STEP {
                    occupied[brick_of([x, y, z])] = true;
                }
            }
        }
    }

    // Commit and upload the occupied bricks only.
    let uploader = Uploader::new(device, "distance field", 4 << 20)?;
    let mut resident_bricks = 0u64;
    for bz in 0..bricks[2] {
        for by in 0..bricks[1] {
            for bx in 0..bricks[0] {
                let offset = [bx * shape.width, by * shape.height, bz * shape.depth];
                if !occupied[brick_of(offset)] {
                    continue;
                }
                let extent = [shape.width, shape.height, shape.depth];
                image.commit_region(&pool, 0, 0, TexelRegion { offset, extent })?;
                resident_bricks += 1;
            }
        }
    }
    let stats = pool.flush_binds(&mut [&mut image])?;
    for bz in 0..bricks[2] {
        for by in 0..bricks[1] {
            for bx in 0..bricks[0] {
                let offset = [bx * shape.width, by * shape.height, bz * shape.depth];
                if !occupied[brick_of(offset)] {
                    continue;
                }
                let bytes: Vec<u8> = (0..shape.depth)
                    .flat_map(|z| {
                        (0..shape.height).flat_map(move |y| (0..shape.width).map(move |x| (x, y, z)))
                    })
                    .flat_map(|(x, y, z)| at([offset[0] + x, offset[1] + y, offset[2] + z]).to_le_bytes())
                    .collect();
                let extent = [shape.width, shape.height, shape.depth];
                uploader.write_image(&ImageRegion::new(&image, 0, offset, extent), &bytes)?;
            }
        }
    }
    uploader.wait_idle()?;
    let brick_bytes = desc.format.region_bytes(shape.width, shape.height, shape.depth);
    let (resident_bytes, dense_bytes) = (resident_bricks * brick_bytes, occupied.len() as u64 * brick_bytes);
    println!(
        "{}: {SIDE}³ R32F distance field, {:?} bricks of {}×{}×{}: {resident_bricks} of {} resident \
         ({} bind entries), {} KiB of {} KiB ({:.1} %)",
        device.name(),
        bricks,
        shape.width,
        shape.height,
        shape.depth,
        occupied.len(),
        stats.bind_entries,
        resident_bytes >> 10,
        dense_bytes >> 10,
        100.0 * resident_bytes as f64 / dense_bytes as f64
    );

    // March on the GPU.
    let program = ComputeProgram::new(device, "distance_field.comp", &shaders::DISTANCE_FIELD, 1)?;
    let sampler = device.create_sampler(Filter::Nearest)?;
    let n = u64::from(PIXELS * PIXELS);
    let out = device.create_buffer(
        &BufferDesc::new("rays", n * 16, BufferUsage::STORAGE).with_intent(MemoryIntent::Readback),
    )?;
    let set = program.descriptor_set(&[
        Binding::sampled(&image, &sampler, vk::ImageLayout::GENERAL),
        Binding::Buffer(&out),
    ])?;
    let dir = direction();
    let mut push: Vec<u8> = [dir[0], dir[1], dir[2], MAX_STEP].iter().flat_map(|f| f.to_le_bytes()).collect();
    push.extend([PIXELS as i32, PIXELS as i32, SIDE as i32, STEP_LIMIT].iter().flat_map(|v| v.to_le_bytes()));
    let groups = [PIXELS.div_ceil(8), PIXELS.div_ceil(8), 1];
    program.check_dispatch(&push, groups)?;
    device.submit_compute("ray-march the distance field", |rec| {
        program.dispatch(rec, &set, &push, groups).expect("checked before the submission");
    })?;
    let mut bytes = vec![0u8; (n * 16) as usize];
    out.read(0, &mut bytes)?;
    let gpu: Vec<[f32; 4]> = bytes
        .chunks_exact(16)
        .map(|c| [0, 4, 8, 12].map(|i| f32::from_le_bytes([c[i], c[i + 1], c[i + 2], c[i + 3]])))
        .collect();

    // March on the CPU: through the resident bricks with the same rule, and through the dense field.
    let sparse = |t: [u32; 3]| occupied[brick_of(t)].then(|| at(t));
    let dense = |t: [u32; 3]| Some(at(t));
    let (mut matched, mut hits, mut default_steps) = (0, 0, 0u64);
    let (mut on_surface, mut silhouette_differs) = (0, 0);
    let mut picture = String::new();
    for py in 0..PIXELS {
        for px in 0..PIXELS {
            let g = gpu[(py * PIXELS + px) as usize];
            let want = march(px, py, &sparse);
            let got_hit = (g[0] >= 0.0).then_some(g[0]);
            let same = match (got_hit, want.hit) {
                (Some(a), Some(b)) => (a - b).abs() < 0.01,
                (None, None) => true,
                _ => false,
            };
            if same && g[1] as u32 == want.steps && g[2] as u32 == want.missing {
                matched += 1;
            }
            hits += usize::from(want.hit.is_some());
            default_steps += u64::from(want.missing);
            let full = march(px, py, &dense);
            silhouette_differs += usize::from(want.hit.is_some() != full.hit.is_some());
            if let Some(t) = want.hit {
                let p = ray_point(px, py, t);
                let d = SPHERES
                    .iter()
                    .map(|(c, r)| {
                        ((p[0] - c[0]).powi(2) + (p[1] - c[1]).powi(2) + (p[2] - c[2]).powi(2)).sqrt() - r
                    })
                    .fold(f32::INFINITY, f32::min);
                on_surface += usize::from(d.abs() < SURFACE_TOLERANCE);
            }
            if py % 4 == 0 && px % 2 == 0 {
                picture.push(match got_hit {
                    Some(t) if t < 40.0 => '#',
                    Some(t) if t < 70.0 => '+',
                    Some(_) => '.',
                    None => ' ',
                });
            }
        }
        if py % 4 == 0 {
            picture.push('\n');
        }
    }
    println!("{picture}");
    let pixels = gpu.len();
    println!(
        "{matched} of {pixels} rays match the CPU's sparse march; {hits} hit, {on_surface} of them on a \
         sphere's surface; {silhouette_differs} differ from the dense march in hit or miss; \
         {default_steps} steps took the default value ({MAX_STEP} texels) over non-resident bricks"
    );

    device.wait_idle()?;
    drop((set, out, program, sampler));
    uploader.destroy()?;
    image.release_all(&pool)?;
    pool.flush_binds(&mut [&mut image])?;
    drop((image, pool));
    Ok(Outcome {
        pixels,
        matched,
        hits,
        on_surface,
        silhouette_differs,
        default_steps,
        resident_bytes,
        dense_bytes,
    })
}

impl Outcome {
    /// Whether the example's own checks passed: every ray as the CPU marched it, every hit on a
    /// surface, the dense march's silhouettes within 0.5 % of the pixels, some rays hit and some
    /// miss, fewer bytes resident than dense.
    pub fn passed(&self) -> bool {
        self.matched == self.pixels
            && self.on_surface == self.hits
            && self.silhouette_differs * 200 <= self.pixels
            && self.hits > 0
            && self.hits < self.pixels
            && self.default_steps > 0
            && self.resident_bytes < self.dense_bytes
    }
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
        "resident {} KiB of {} KiB dense; validation problems: {problems}; leaked at teardown: {leaks}",
        outcome.resident_bytes >> 10,
        outcome.dense_bytes >> 10
    );
    if !outcome.passed() || problems != 0 || leaks != 0 {
        return Err("the example failed its checks".into());
    }
    Ok(())
}
