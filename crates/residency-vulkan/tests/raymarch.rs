//! The distance-field ray march (issue #32, the seed's "volume textures + ray marching: default
//! value is maximum step distance"): a `DistanceFieldVolume` keeps resident only the bricks with a
//! texel nearer than the maximum step, and `shaders/include/raymarch.glsl` (through the shipped
//! `DISTANCE_FIELD` program) marches it with a non-resident brick reading as the maximum step.
//!
//! On lavapipe under the harness (synchronization validation on when asked, nothing may outlive a
//! test): the GPU march equals the CPU reference march (`march_cpu`) bit for bit, on rays from
//! every direction, from inside, from outside, standing still; the sparse volume and a fully
//! resident one find the same surface; a brick released reads as the maximum step and the march
//! still never crosses the surface, and reads its texels again once committed; bad input is
//! refused with a typed error and changes nothing; the software path is refused.

mod common;

use residency_core::tiles::{march, TilePoolDesc};
use residency_core::usage::BufferUsage;
use residency_vulkan::ash::vk;
use residency_vulkan::compute::{Binding, ComputeProgram};
use residency_vulkan::shaders;
use residency_vulkan::sparse::{
    BrickResidency, CommitError, DistanceField, DistanceFieldDesc, DistanceFieldError, DistanceFieldVolume,
    MarchParams, MarchResult, Ray, ResidencyPath, SparseError, SparseTilePool, VolumeError, MAX_MARCH_STEPS,
};
use residency_vulkan::testing::with_gpu;
use residency_vulkan::{BufferDesc, Device, MemoryIntent, ResidencyError, Uploader};
use std::sync::Arc;

/// The volume: 96 × 96 × 64 texels (3 × 3 × 4 bricks of 32 × 32 × 16 for R32F).
const EXTENT: [u32; 3] = [96, 96, 64];
/// The maximum step, in texels.
const MAX_STEP: f32 = 4.0;
/// The spheres: centre and radius, in texels.
const SPHERES: [([f32; 3], f32); 2] = [([30.0, 34.0, 30.0], 14.0), ([66.0, 60.0, 38.0], 16.0)];
const PARAMS: MarchParams = MarchParams { hit_distance: 0.5, step_limit: 256 };
/// How far from a sphere's surface a hit may lie: the hit distance, the half diagonal of a texel
/// (the march reads the texel's centre) and the overshoot of a step from there.
const SURFACE_TOLERANCE: f32 = 2.0;

/// The analytic distance from `p` to the nearest sphere's surface.
fn analytic(p: [f32; 3]) -> f32 {
    SPHERES
        .iter()
        .map(|(c, r)| ((p[0] - c[0]).powi(2) + (p[1] - c[1]).powi(2) + (p[2] - c[2]).powi(2)).sqrt() - r)
        .fold(f32::INFINITY, f32::min)
}

fn field() -> DistanceField {
    DistanceField::from_fn(EXTENT, MAX_STEP, |[x, y, z]| {
        analytic([x as f32 + 0.5, y as f32 + 0.5, z as f32 + 0.5])
    })
    .unwrap()
}

fn normalised(v: [f32; 3]) -> [f32; 3] {
    let n = (v[0] * v[0] + v[1] * v[1] + v[2] * v[2]).sqrt();
    v.map(|c| c / n)
}

/// Rays: a perspective grid from the z = 0 face (an eye behind it), rays from inside the volume
/// (outside the spheres) in every direction, and the odd ones (outside, NaN, standing still, along an edge).
fn rays() -> Vec<Ray> {
    let mut rays = Vec::new();
    let eye = [48.0, 48.0, -200.0];
    for j in 0..32 {
        for i in 0..32 {
            let origin = [i as f32 * 3.0 + 1.5, j as f32 * 3.0 + 1.5, 0.0];
            let direction = normalised([origin[0] - eye[0], origin[1] - eye[1], origin[2] - eye[2]]);
            rays.push(Ray { origin, direction });
        }
    }
    for k in 0..64u32 {
        let origin = [(k * 37 % 96) as f32 + 0.25, (k * 53 % 96) as f32 + 0.75, (k * 29 % 64) as f32 + 0.5];
        let a = k as f32 * 0.7;
        let direction = normalised([a.cos(), a.sin(), ((k % 5) as f32 - 2.0) * 0.4]);
        if analytic(origin) > 1.0 {
            rays.push(Ray { origin, direction });
        }
    }
    rays.push(Ray { origin: [-1.0, 10.0, 10.0], direction: [1.0, 0.0, 0.0] });
    rays.push(Ray { origin: [f32::NAN, 10.0, 10.0], direction: [1.0, 0.0, 0.0] });
    rays.push(Ray { origin: [5.0, 5.0, 5.0], direction: [0.0, 0.0, 0.0] });
    rays.push(Ray { origin: [0.0, 0.0, 0.0], direction: [1.0, 0.0, 0.0] });
    rays
}

fn pool(device: &Arc<Device>) -> SparseTilePool {
    SparseTilePool::new(
        Arc::clone(device),
        TilePoolDesc::default().with_name("raymarch bricks").with_tiles_per_heap(16),
    )
    .unwrap()
}

/// Marches `rays` through `volume` on the GPU with the shipped `DISTANCE_FIELD` program.
fn gpu_march(
    device: &Arc<Device>,
    volume: &DistanceFieldVolume,
    rays: &[Ray],
    params: &MarchParams,
) -> Vec<MarchResult> {
    let program = ComputeProgram::new(device, "raymarch", &shaders::DISTANCE_FIELD, 1).unwrap();
    let n = rays.len() as u64;
    let mut input = device
        .create_buffer(
            &BufferDesc::new("rays", n * 32, BufferUsage::STORAGE).with_intent(MemoryIntent::Upload),
        )
        .unwrap();
    input.write(0, &DistanceFieldVolume::encode_rays(rays)).unwrap();
    let output = device
        .create_buffer(
            &BufferDesc::new("marches", n * 16, BufferUsage::STORAGE).with_intent(MemoryIntent::Readback),
        )
        .unwrap();
    let set = program
        .descriptor_set(&[
            Binding::sampled(volume.image(), volume.sampler(), vk::ImageLayout::GENERAL),
            Binding::Buffer(&input),
            Binding::Buffer(&output),
        ])
        .unwrap();
    let push = volume.push_constants(params, n as u32);
    let groups = [(n as u32).div_ceil(64), 1, 1];
    program.check_dispatch(&push, groups).unwrap();
    device
        .submit_compute("raymarch", |rec| program.dispatch(rec, &set, &push, groups).expect("checked"))
        .unwrap();
    let mut bytes = vec![0u8; (n * 16) as usize];
    output.read(0, &mut bytes).unwrap();
    DistanceFieldVolume::decode_results(&bytes)
}

/// Whether two marches are the same, `t` bit for bit.
fn same(a: &MarchResult, b: &MarchResult) -> bool {
    a.t.to_bits() == b.t.to_bits() && a.steps == b.steps && a.missing == b.missing && a.hit == b.hit
}

/// Asserts the GPU's marches equal the CPU's; returns them.
fn gpu_equals_cpu(device: &Arc<Device>, volume: &DistanceFieldVolume, rays: &[Ray]) -> Vec<MarchResult> {
    let gpu = gpu_march(device, volume, rays, &PARAMS);
    let differ: Vec<String> = rays
        .iter()
        .zip(&gpu)
        .enumerate()
        .filter_map(|(i, (ray, g))| {
            let c = volume.march_cpu(ray, &PARAMS);
            (!same(g, &c)).then(|| format!("ray {i} {ray:?}: GPU {g:?}, CPU {c:?}"))
        })
        .collect();
    assert!(differ.is_empty(), "{} of {} rays differ:\n{}", differ.len(), rays.len(), differ.join("\n"));
    gpu
}

#[test]
fn the_gpu_march_through_the_include_equals_the_cpu_reference_march() {
    with_gpu(|set| {
        let device = &set.devices()[0];
        let pool = pool(device);
        let uploader = Uploader::new(device, "raymarch", 1 << 20).unwrap();
        let volume =
            DistanceFieldVolume::new(&pool, &uploader, &DistanceFieldDesc::new("raymarch volume"), field())
                .unwrap();
        assert_eq!(volume.bricks().count(), [3, 3, 4]);
        let near = volume.bricks().near_count();
        assert!(near > 0 && near < volume.bricks().len(), "{near} of {} bricks near", volume.bricks().len());
        assert_eq!(volume.resident_bricks() as usize, near);
        assert!(volume.resident_bytes() < volume.dense_bytes());
        let rays = rays();
        let gpu = gpu_equals_cpu(device, &volume, &rays);
        let hits = gpu.iter().filter(|m| m.hit).count();
        let default_steps: u32 = gpu.iter().map(|m| m.missing).sum();
        assert!(hits > 50 && hits < rays.len() - 50, "{hits} hits");
        assert!(default_steps > 100, "{default_steps} samples of non-resident bricks");
        println!(
            "{} rays equal bit for bit; {hits} hit; {default_steps} samples of non-resident bricks; {near} of {} bricks resident",
            rays.len(),
            volume.bricks().len()
        );
        let odd = &gpu[gpu.len() - 4..];
        assert_eq!((odd[0].steps, odd[1].steps), (0, 0), "outside and NaN origins sample nothing");
        assert_eq!(odd[2].steps, PARAMS.step_limit, "a ray standing still stops at the step limit");
        let mut still = PARAMS;
        still.step_limit = u32::MAX;
        assert_eq!(volume.march_cpu(&rays[rays.len() - 2], &still).steps, MAX_MARCH_STEPS, "and at the cap");
        drop(volume);
        uploader.destroy().unwrap();
        device.wait_idle().unwrap();
        device.maintain();
        assert_eq!(pool.used_tiles(), 0, "every brick back in the pool");
    });
}

#[test]
fn the_sparse_and_the_fully_resident_volume_find_the_same_surface() {
    with_gpu(|set| {
        let device = &set.devices()[0];
        let pool = pool(device);
        let uploader = Uploader::new(device, "raymarch", 1 << 20).unwrap();
        let sparse =
            DistanceFieldVolume::new(&pool, &uploader, &DistanceFieldDesc::new("raymarch sparse"), field())
                .unwrap();
        let dense_desc = DistanceFieldDesc::new("raymarch dense").with_residency(BrickResidency::All);
        let dense = DistanceFieldVolume::new(&pool, &uploader, &dense_desc, field()).unwrap();
        assert_eq!(dense.resident_bricks() as usize, dense.bricks().len());
        assert_eq!(dense.resident_bytes(), sparse.dense_bytes());
        let rays = rays();
        let s = gpu_equals_cpu(device, &sparse, &rays);
        let d = gpu_equals_cpu(device, &dense, &rays);
        assert_eq!(
            d.iter().map(|m| m.missing).sum::<u32>(),
            0,
            "nothing reads the default in the dense volume"
        );
        let (mut both, mut differ) = (0, 0);
        for (i, ((ray, s), d)) in rays.iter().zip(&s).zip(&d).enumerate() {
            if s.hit {
                let e = analytic(ray.at(s.t));
                assert!(e.abs() < SURFACE_TOLERANCE, "ray {i}: the sparse hit is {e} texels off a surface");
            }
            match (s.hit, d.hit) {
                (true, true) => {
                    both += 1;
                    assert!((s.t - d.t).abs() < SURFACE_TOLERANCE, "ray {i}: sparse {s:?}, dense {d:?}");
                }
                (false, false) => {}
                _ => differ += 1,
            }
        }
        println!("{both} rays hit in both volumes; {differ} of {} hit in one only", rays.len());
        assert!(both > 50, "{both} rays hit in both");
        assert!(differ * 100 <= rays.len(), "{differ} rays grazing a silhouette hit in one volume only");
        drop((sparse, dense));
        uploader.destroy().unwrap();
    });
}

#[test]
fn a_brick_made_non_resident_reads_as_the_maximum_step_and_the_march_never_crosses_the_surface() {
    with_gpu(|set| {
        let device = &set.devices()[0];
        let pool = pool(device);
        let uploader = Uploader::new(device, "raymarch", 1 << 20).unwrap();
        let desc = DistanceFieldDesc::new("raymarch released").with_residency(BrickResidency::All);
        let mut volume = DistanceFieldVolume::new(&pool, &uploader, &desc, field()).unwrap();
        let rays = rays();
        let before = gpu_equals_cpu(device, &volume, &rays);
        // The far brick the most rays sample.
        let mut sampled = std::collections::BTreeMap::<[u32; 3], usize>::new();
        for ray in &rays {
            let bricks = std::cell::RefCell::new(std::collections::BTreeSet::new());
            march(EXTENT, MAX_STEP, ray, &PARAMS, |t| {
                bricks.borrow_mut().insert(volume.bricks().brick_of(t));
                volume.sample(t)
            });
            for b in bricks.into_inner() {
                *sampled.entry(b).or_default() += 1;
            }
        }
        let (&brick, _) = sampled
            .iter()
            .filter(|(&b, _)| !volume.bricks().is_near(b))
            .max_by_key(|(_, &n)| n)
            .expect("the rays sample far bricks");
        // A ray of one sample from the brick's centre reads the field, then the maximum step.
        let size = volume.bricks().brick();
        let centre = [0, 1, 2].map(|a| (brick[a] * size[a] + size[a] / 2) as f32 + 0.5);
        let probe = [Ray { origin: centre, direction: [1.0, 0.0, 0.0] }];
        let one = MarchParams { hit_distance: 0.5, step_limit: 1 };
        let texel = centre.map(|c| c as u32);
        let read = gpu_march(device, &volume, &probe, &one)[0];
        assert_eq!((read.t, read.missing), (volume.field().at(texel).unwrap(), 0));
        assert!(read.t > MAX_STEP, "a far brick's texel is farther than the maximum step");

        volume.release_brick(&pool, brick).unwrap();
        assert!(!volume.is_brick_resident(brick));
        assert_eq!(volume.resident_bricks(), 35);
        let read = gpu_march(device, &volume, &probe, &one)[0];
        assert_eq!(
            (read.t, read.steps, read.missing, read.hit),
            (MAX_STEP, 1, 1, false),
            "the default value"
        );
        let after = gpu_equals_cpu(device, &volume, &rays);
        let stepped: Vec<usize> = (0..rays.len()).filter(|&i| after[i].missing > 0).collect();
        println!("brick {brick:?} released: {} rays read it as the maximum step", stepped.len());
        assert!(stepped.len() > 10, "{} rays read the released brick", stepped.len());
        for &i in &stepped {
            let (a, b) = (after[i], before[i]);
            assert_eq!(a.hit, b.hit, "ray {i}: {a:?} before {b:?}");
            if a.hit {
                let e = analytic(rays[i].at(a.t));
                assert!(e.abs() < SURFACE_TOLERANCE, "ray {i}: {e} texels off the surface");
                assert!((a.t - b.t).abs() < SURFACE_TOLERANCE, "ray {i}: {a:?} before {b:?}");
            }
        }

        volume.commit_brick(&pool, &uploader, brick).unwrap();
        assert_eq!(volume.resident_bricks(), 36);
        let read = gpu_march(device, &volume, &probe, &one)[0];
        assert_eq!((read.t, read.missing), (volume.field().at(texel).unwrap(), 0), "its texels again");
        let again = gpu_equals_cpu(device, &volume, &rays);
        assert!(again.iter().zip(&before).all(|(a, b)| same(a, b)), "the march before the release");
        drop(volume);
        uploader.destroy().unwrap();
    });
}

#[test]
fn bad_input_is_refused_with_a_typed_error_and_changes_nothing() {
    // The field (no GPU needed).
    for max_step in [0.0, -2.0, f32::NAN, f32::INFINITY] {
        let err = DistanceField::new([2, 2, 2], vec![1.0; 8], max_step).unwrap_err();
        assert!(matches!(err, DistanceFieldError::MaxStep { .. }), "{err}");
    }
    assert_eq!(
        DistanceField::new([2, 2, 2], vec![1.0; 9], 1.0),
        Err(DistanceFieldError::WrongLength { extent: [2, 2, 2], expected: 8, got: 9 })
    );
    assert_eq!(
        DistanceField::new([2, 0, 2], vec![], 1.0),
        Err(DistanceFieldError::EmptyExtent { extent: [2, 0, 2] })
    );
    let mut values = vec![1.0; 8];
    values[3] = f32::NAN;
    assert_eq!(
        DistanceField::new([2, 2, 2], values, 1.0),
        Err(DistanceFieldError::NotANumber { texel: [1, 1, 0] })
    );

    with_gpu(|set| {
        let device = &set.devices()[0];
        let pool = pool(device);
        let uploader = Uploader::new(device, "raymarch", 1 << 20).unwrap();
        let before = common::accounting(device);
        let unchanged = |what: &str| {
            assert_eq!(common::accounting(device), before, "{what}: nothing made, nothing left");
            assert_eq!(pool.used_tiles(), 0, "{what}: no tile taken");
        };
        let desc = DistanceFieldDesc::new("raymarch refused");

        // Not whole bricks: 96 × 96 × 40 is not whole 32 × 32 × 16 bricks.
        let ragged = DistanceField::new([96, 96, 40], vec![10.0; 96 * 96 * 40], MAX_STEP).unwrap();
        let err = DistanceFieldVolume::new(&pool, &uploader, &desc, ragged).unwrap_err();
        assert!(
            matches!(
                err,
                VolumeError::Field(DistanceFieldError::NotWholeBricks {
                    extent: [96, 96, 40],
                    brick: [32, 32, 16]
                })
            ),
            "{err}"
        );
        assert!(err.class() == residency_vulkan::ErrorClass::Refused);
        unchanged("not whole bricks");

        // The software path holds no volumes.
        let err = DistanceFieldVolume::new(
            &pool,
            &uploader,
            &desc.clone().with_path(ResidencyPath::Software),
            field(),
        )
        .unwrap_err();
        assert!(matches!(err, VolumeError::SoftwarePath { .. }), "{err}");
        assert!(err.class() == residency_vulkan::ErrorClass::Unsupported);
        unchanged("software path");

        // A pool whose budget holds fewer bricks than the field's near ones: nothing committed.
        pool.set_budget_tiles(2);
        let err = DistanceFieldVolume::new(&pool, &uploader, &desc, field()).unwrap_err();
        assert!(matches!(err, VolumeError::Sparse(SparseError::Commit(_))), "{err}");
        assert!(err.is_out_of_memory(), "an exhausted pool is out of memory: {err}");
        unchanged("exhausted pool");
        pool.set_budget_tiles(TilePoolDesc::default().budget_tiles);

        // Bricks outside the grid; a commit through another pool.
        let mut volume = DistanceFieldVolume::new(&pool, &uploader, &desc, field()).unwrap();
        let resident = volume.resident_bricks();
        for brick in [[3, 0, 0], [0, 3, 0], [0, 0, 4], [u32::MAX; 3]] {
            let err = volume.release_brick(&pool, brick).unwrap_err();
            assert!(matches!(err, VolumeError::NoSuchBrick { count: [3, 3, 4], .. }), "{err}");
            let err = volume.commit_brick(&pool, &uploader, brick).unwrap_err();
            assert!(matches!(err, VolumeError::NoSuchBrick { .. }), "{err}");
        }
        let other =
            SparseTilePool::new(Arc::clone(device), TilePoolDesc::default().with_name("other")).unwrap();
        let far =
            (0..36u32).map(|i| [i % 3, (i / 3) % 3, i / 9]).find(|&b| !volume.bricks().is_near(b)).unwrap();
        let err = volume.commit_brick(&other, &uploader, far).unwrap_err();
        assert!(
            matches!(err, VolumeError::Sparse(SparseError::Commit(CommitError::WrongPool { .. }))),
            "{err}"
        );
        assert_eq!((volume.resident_bricks(), other.used_tiles()), (resident, 0), "nothing committed");
        drop((volume, other));
        uploader.destroy().unwrap();
    });
}
