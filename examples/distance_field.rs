//! A sparse distance-field volume ray-marched by a compute shader (the seed's "volume textures +
//! ray marching: default value is maximum step distance for ray marching distance fields"),
//! through the library's `DistanceFieldVolume` and `shaders/include/raymarch.glsl`.
//!
//! The volume is a 128³ `R32_SFLOAT` sparse 3D image holding the distance in texels to the nearest
//! of three spheres. `DistanceFieldVolume` makes resident only the bricks (64 KiB tiles) with a
//! texel nearer the surface than the maximum step; every texel of the others is at least that far
//! away, so a ray that samples one of them and gets the residency default value — the maximum
//! step — steps no further than the true distance and never crosses the surface. The shipped
//! `DISTANCE_FIELD` program marches one ray per pixel; the volume's `march_cpu` marches the same
//! rays through the same bricks, and the GPU must match it bit for bit. The dense field's march
//! (every brick resident) must find the same surface. Prints resident bytes against the dense
//! volume's.
//!
//! Run: `RESIDENCY_VALIDATION=sync cargo run --example distance_field`

use residency::vulkan::ash::vk;
use residency::vulkan::compute::{Binding, ComputeProgram};
use residency::vulkan::shaders;
use residency::vulkan::sparse::{
    DistanceField, DistanceFieldDesc, DistanceFieldVolume, MarchParams, Ray, SparseTilePool, TilePoolDesc,
};
use residency::vulkan::{BufferDesc, BufferUsage, Device, DeviceSet, DeviceSetDesc, MemoryIntent, Uploader};
use std::sync::Arc;

/// The volume's side in texels.
pub const SIDE: u32 = 128;
/// The rendered image's side in pixels.
pub const PIXELS: u32 = 96;
/// The maximum step in texels: the residency default value.
const MAX_STEP: f32 = 8.0;
/// How the rays stop: a hit below half a texel, 96 samples at most.
const PARAMS: MarchParams = MarchParams { hit_distance: 0.5, step_limit: 96 };
/// The rays' direction (normalised in `direction`).
const DIRECTION: [f32; 3] = [0.25, 0.15, 1.0];
/// The spheres: centre (texels) and radius.
const SPHERES: [([f32; 3], f32); 3] =
    [([40.0, 48.0, 40.0], 14.0), ([88.0, 80.0, 72.0], 18.0), ([64.0, 36.0, 100.0], 10.0)];

/// The distance from `p` to the nearest sphere's surface (negative inside).
fn distance(p: [f32; 3]) -> f32 {
    SPHERES
        .iter()
        .map(|(c, r)| ((p[0] - c[0]).powi(2) + (p[1] - c[1]).powi(2) + (p[2] - c[2]).powi(2)).sqrt() - r)
        .fold(f32::INFINITY, f32::min)
}

/// How far from a sphere's surface a hit may lie: the hit threshold (0.5 texel) plus the half
/// diagonal of a texel (the march reads the nearest texel's centre, up to 0.87 texel from the
/// point) and the overshoot of a step from there.
pub const SURFACE_TOLERANCE: f32 = 2.0;

/// The ray of pixel (px, py): orthographic, from the z = 0 face.
fn ray(px: u32, py: u32) -> Ray {
    let scale = SIDE as f32 / PIXELS as f32;
    let [x, y, z] = DIRECTION;
    let n = (x * x + y * y + z * z).sqrt();
    Ray {
        origin: [(px as f32 + 0.5) * scale, (py as f32 + 0.5) * scale, 0.0],
        direction: [x / n, y / n, z / n],
    }
}

/// What the example checked, for the test that runs it.
#[derive(Debug)]
pub struct Outcome {
    /// Pixels.
    pub pixels: usize,
    /// Pixels whose GPU ray equals the CPU's sparse march (t bit for bit, the same steps,
    /// non-resident samples and hit).
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
    /// Bytes resident (bricks × 64 KiB).
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
    let uploader = Uploader::new(device, "distance field", 4 << 20)?;
    let field = DistanceField::from_fn([SIDE; 3], MAX_STEP, |[x, y, z]| {
        distance([x as f32 + 0.5, y as f32 + 0.5, z as f32 + 0.5])
    })?;
    let volume =
        DistanceFieldVolume::new(&pool, &uploader, &DistanceFieldDesc::new("distance field"), field)?;
    let (bricks, shape) = (volume.bricks().count(), volume.bricks().brick());
    let (resident_bytes, dense_bytes) = (volume.resident_bytes(), volume.dense_bytes());
    println!(
        "{}: {SIDE}³ R32F distance field, {bricks:?} bricks of {}×{}×{}: {} of {} resident, {} KiB of {} KiB ({:.1} %)",
        device.name(),
        shape[0],
        shape[1],
        shape[2],
        volume.resident_bricks(),
        volume.bricks().len(),
        resident_bytes >> 10,
        dense_bytes >> 10,
        100.0 * resident_bytes as f64 / dense_bytes as f64
    );

    // March on the GPU: one ray per pixel through `raymarch.glsl`.
    let rays: Vec<Ray> = (0..PIXELS * PIXELS).map(|i| ray(i % PIXELS, i / PIXELS)).collect();
    let n = rays.len() as u64;
    let program = ComputeProgram::new(device, "distance_field.comp", &shaders::DISTANCE_FIELD, 1)?;
    let mut input = device.create_buffer(
        &BufferDesc::new("rays", n * 32, BufferUsage::STORAGE).with_intent(MemoryIntent::Upload),
    )?;
    input.write(0, &DistanceFieldVolume::encode_rays(&rays))?;
    let out = device.create_buffer(
        &BufferDesc::new("marches", n * 16, BufferUsage::STORAGE).with_intent(MemoryIntent::Readback),
    )?;
    let set = program.descriptor_set(&[
        Binding::sampled(volume.image(), volume.sampler(), vk::ImageLayout::GENERAL),
        Binding::Buffer(&input),
        Binding::Buffer(&out),
    ])?;
    let push = volume.push_constants(&PARAMS, n as u32);
    let groups = [(n as u32).div_ceil(64), 1, 1];
    program.check_dispatch(&push, groups)?;
    device.submit_compute("ray-march the distance field", |rec| {
        program.dispatch(rec, &set, &push, groups).expect("checked before the submission");
    })?;
    let mut bytes = vec![0u8; (n * 16) as usize];
    out.read(0, &mut bytes)?;
    let gpu = DistanceFieldVolume::decode_results(&bytes);

    // March on the CPU: through the resident bricks with the same rule, and through the dense field.
    let (mut matched, mut hits, mut default_steps) = (0, 0, 0u64);
    let (mut on_surface, mut silhouette_differs) = (0, 0);
    let mut picture = String::new();
    for (i, (ray, got)) in rays.iter().zip(&gpu).enumerate() {
        let (px, py) = (i as u32 % PIXELS, i as u32 / PIXELS);
        let want = volume.march_cpu(ray, &PARAMS);
        let same = got.t.to_bits() == want.t.to_bits()
            && (got.steps, got.missing, got.hit) == (want.steps, want.missing, want.hit);
        matched += usize::from(same);
        hits += usize::from(want.hit);
        default_steps += u64::from(want.missing);
        silhouette_differs += usize::from(want.hit != volume.field().march(ray, &PARAMS).hit);
        on_surface += usize::from(want.hit && distance(ray.at(want.t)).abs() < SURFACE_TOLERANCE);
        if py % 4 == 0 && px % 2 == 0 {
            picture.push(match (got.hit, got.t) {
                (true, t) if t < 40.0 => '#',
                (true, t) if t < 70.0 => '+',
                (true, _) => '.',
                (false, _) => ' ',
            });
            if px + 2 >= PIXELS {
                picture.push('\n');
            }
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
    drop((set, out, input, program, volume));
    uploader.destroy()?;
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
