//! Distance-field volumes ray-marched through a partially resident 3D image (the seed's "volume
//! textures + ray marching: default value is maximum step distance for ray marching distance
//! fields"): which bricks (sparse tiles) must be resident, and the reference march a shader's
//! must equal.
//!
//! A [`DistanceField`] holds one distance per texel (in texels; negative inside a surface) and the
//! maximum step. A brick is *near* when any of its texels is nearer than the maximum step
//! ([`BrickGrid`]): only near bricks need be resident. Every texel of any other brick is at least
//! the maximum step away from every surface, so a march that reads the residency default value —
//! the maximum step — over a non-resident brick steps no further than the true distance there and
//! never crosses a surface.
//!
//! [`march`] is the march, one rule for the CPU and for `shaders/include/raymarch.glsl` in the
//! Vulkan backend: from the ray's origin (texel coordinates of mip 0, inside the volume), sample the
//! texel under the point (`floor`), stop with a hit when the distance is below the hit distance,
//! else advance by it; stop without a hit when the point leaves the volume (a non-finite point
//! leaves it) or after `step_limit` samples, never more than [`MAX_MARCH_STEPS`]. Each step is one
//! multiplication and two additions of `f32`s, each rounded once (the shader marks them `precise`
//! so no compiler fuses them), so a GPU march equals this one bit for bit.

/// The most samples a march takes, whatever step limit it is given: the bound of the shader's loop
/// (`RESIDENCY_MARCH_STEP_CAP` in `raymarch.glsl`), so a march ends on every input.
pub const MAX_MARCH_STEPS: u32 = 1024;

/// A distance field or a march was refused; nothing was made.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum DistanceFieldError {
    /// A side of the volume is zero.
    #[error("a distance field of {} × {} × {} texels holds nothing", .extent[0], .extent[1], .extent[2])]
    EmptyExtent {
        /// The extent given.
        extent: [u32; 3],
    },
    /// The maximum step (the residency default value) is not a finite number above zero.
    #[error("the maximum step must be finite and above 0, not {max_step}")]
    MaxStep {
        /// The maximum step given.
        max_step: f32,
    },
    /// The distances are not one per texel.
    #[error("a distance field of {} × {} × {} texels needs {expected} distances, got {got}", .extent[0], .extent[1], .extent[2])]
    WrongLength {
        /// The extent.
        extent: [u32; 3],
        /// Texels in it.
        expected: u64,
        /// Distances given.
        got: usize,
    },
    /// A distance is NaN (a march through it would neither hit nor step).
    #[error("the distance at texel {texel:?} is NaN")]
    NotANumber {
        /// The texel.
        texel: [u32; 3],
    },
    /// The volume is not a whole number of bricks (a sparse image's base level is whole tiles:
    /// the seed's "dimensions of the base level must be integer multiples of the page size").
    #[error("a volume of {} × {} × {} texels is not a whole number of {} × {} × {} bricks", .extent[0], .extent[1], .extent[2], .brick[0], .brick[1], .brick[2])]
    NotWholeBricks {
        /// The volume's extent.
        extent: [u32; 3],
        /// The brick's.
        brick: [u32; 3],
    },
}

/// A distance per texel of a volume, in texels (negative inside a surface), with the maximum step
/// a march takes over a brick that is not resident.
#[derive(Clone, Debug, PartialEq)]
pub struct DistanceField {
    extent: [u32; 3],
    values: Vec<f32>,
    max_step: f32,
}

impl DistanceField {
    /// A field of `extent` texels from `values` (x fastest, then y, then z). Refused: a zero side
    /// ([`DistanceFieldError::EmptyExtent`]), a maximum step that is not finite and above zero
    /// ([`DistanceFieldError::MaxStep`]), not one value per texel
    /// ([`DistanceFieldError::WrongLength`]), a NaN ([`DistanceFieldError::NotANumber`]).
    /// Infinities are distances like any other (a march over `+∞` leaves the volume).
    pub fn new(
        extent: [u32; 3],
        values: Vec<f32>,
        max_step: f32,
    ) -> Result<DistanceField, DistanceFieldError> {
        if extent.contains(&0) {
            return Err(DistanceFieldError::EmptyExtent { extent });
        }
        if !(max_step.is_finite() && max_step > 0.0) {
            return Err(DistanceFieldError::MaxStep { max_step });
        }
        let expected = extent.iter().map(|&s| u64::from(s)).product::<u64>();
        if values.len() as u64 != expected {
            return Err(DistanceFieldError::WrongLength { extent, expected, got: values.len() });
        }
        if let Some(i) = values.iter().position(|v| v.is_nan()) {
            let (w, h) = (extent[0] as usize, extent[1] as usize);
            let texel = [i % w, (i / w) % h, i / (w * h)].map(|c| c as u32);
            return Err(DistanceFieldError::NotANumber { texel });
        }
        Ok(DistanceField { extent, values, max_step })
    }

    /// A field of `extent` texels whose texel (x, y, z) holds `distance([x, y, z])`; checked as
    /// [`DistanceField::new`] checks (the extent and maximum step before `distance` runs).
    pub fn from_fn(
        extent: [u32; 3],
        max_step: f32,
        mut distance: impl FnMut([u32; 3]) -> f32,
    ) -> Result<DistanceField, DistanceFieldError> {
        if extent.contains(&0) {
            return Err(DistanceFieldError::EmptyExtent { extent });
        }
        if !(max_step.is_finite() && max_step > 0.0) {
            return Err(DistanceFieldError::MaxStep { max_step });
        }
        let count = extent.iter().map(|&s| s as usize).product::<usize>();
        let mut values = Vec::with_capacity(count);
        for z in 0..extent[2] {
            for y in 0..extent[1] {
                for x in 0..extent[0] {
                    values.push(distance([x, y, z]));
                }
            }
        }
        DistanceField::new(extent, values, max_step)
    }

    /// The volume's extent in texels.
    pub fn extent(&self) -> [u32; 3] {
        self.extent
    }

    /// The maximum step: what a non-resident sample reads as.
    pub fn max_step(&self) -> f32 {
        self.max_step
    }

    /// The distances, x fastest, then y, then z.
    pub fn values(&self) -> &[f32] {
        &self.values
    }

    /// The distance at `texel` (`None` outside the volume).
    pub fn at(&self, texel: [u32; 3]) -> Option<f32> {
        let [x, y, z] = texel;
        let [w, h, d] = self.extent;
        (x < w && y < h && z < d)
            .then(|| self.values[((z as usize * h as usize) + y as usize) * w as usize + x as usize])
    }

    /// The distances of the box at `offset` of `extent` texels, x fastest (what an upload of that
    /// box takes, as `f32` texels); `None` when the box does not lie inside the volume.
    pub fn region(&self, offset: [u32; 3], extent: [u32; 3]) -> Option<Vec<f32>> {
        let inside =
            (0..3).all(|a| offset[a].checked_add(extent[a]).is_some_and(|end| end <= self.extent[a]));
        if !inside {
            return None;
        }
        let mut out = Vec::with_capacity(extent.iter().map(|&s| s as usize).product());
        for z in offset[2]..offset[2] + extent[2] {
            for y in offset[1]..offset[1] + extent[1] {
                let row = ((z as usize * self.extent[1] as usize) + y as usize) * self.extent[0] as usize;
                out.extend_from_slice(
                    &self.values[row + offset[0] as usize..row + (offset[0] + extent[0]) as usize],
                );
            }
        }
        Some(out)
    }

    /// Marches `ray` through the whole field, every brick resident (the dense reference a sparse
    /// march is compared with).
    pub fn march(&self, ray: &Ray, params: &MarchParams) -> MarchResult {
        march(self.extent, self.max_step, ray, params, |t| self.at(t))
    }

    /// The field's bricks of `brick` texels and which of them are near a surface (a texel nearer
    /// than the maximum step). The volume must be a whole number of bricks
    /// ([`DistanceFieldError::NotWholeBricks`]; a zero side of `brick` is never whole).
    pub fn bricks(&self, brick: [u32; 3]) -> Result<BrickGrid, DistanceFieldError> {
        if (0..3).any(|a| brick[a] == 0 || self.extent[a] % brick[a] != 0) {
            return Err(DistanceFieldError::NotWholeBricks { extent: self.extent, brick });
        }
        let count = [0, 1, 2].map(|a| self.extent[a] / brick[a]);
        let mut near = vec![false; count.iter().map(|&c| c as usize).product()];
        let [w, h, _] = self.extent.map(|s| s as usize);
        let (cx, cy) = (count[0] as usize, count[1] as usize);
        let brick = brick.map(|s| s as usize);
        for (i, &v) in self.values.iter().enumerate() {
            if v < self.max_step {
                let (x, y, z) = (i % w, (i / w) % h, i / (w * h));
                near[(z / brick[2] * cy + y / brick[1]) * cx + x / brick[0]] = true;
            }
        }
        Ok(BrickGrid { brick: brick.map(|s| s as u32), count, near })
    }
}

/// A volume's bricks and which of them are near a surface ([`DistanceField::bricks`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BrickGrid {
    brick: [u32; 3],
    count: [u32; 3],
    near: Vec<bool>,
}

impl BrickGrid {
    /// A brick's extent in texels.
    pub fn brick(&self) -> [u32; 3] {
        self.brick
    }

    /// Bricks along each axis.
    pub fn count(&self) -> [u32; 3] {
        self.count
    }

    /// Bricks in all.
    pub fn len(&self) -> usize {
        self.near.len()
    }

    /// Whether there are no bricks (never: a field has at least one texel).
    pub fn is_empty(&self) -> bool {
        self.near.is_empty()
    }

    /// Whether brick `b` (brick coordinates) holds a texel nearer than the maximum step; `false`
    /// for a brick outside the grid.
    pub fn is_near(&self, b: [u32; 3]) -> bool {
        self.index(b).is_some_and(|i| self.near[i])
    }

    /// The near bricks, x fastest, then y, then z.
    pub fn near(&self) -> impl Iterator<Item = [u32; 3]> + '_ {
        let [cx, cy, _] = self.count.map(|c| c as usize);
        self.near
            .iter()
            .enumerate()
            .filter(|(_, &n)| n)
            .map(move |(i, _)| [i % cx, (i / cx) % cy, i / (cx * cy)].map(|c| c as u32))
    }

    /// How many bricks are near.
    pub fn near_count(&self) -> usize {
        self.near.iter().filter(|&&n| n).count()
    }

    /// The brick holding `texel`.
    pub fn brick_of(&self, texel: [u32; 3]) -> [u32; 3] {
        [0, 1, 2].map(|a| texel[a] / self.brick[a])
    }

    fn index(&self, b: [u32; 3]) -> Option<usize> {
        let [cx, cy, cz] = self.count;
        let u = |v: u32| v as usize;
        (b[0] < cx && b[1] < cy && b[2] < cz).then(|| (u(b[2]) * u(cy) + u(b[1])) * u(cx) + u(b[0]))
    }
}

/// A ray in the volume's texel coordinates (mip 0; texel (x, y, z) covers `[x, x + 1)` on each
/// axis). `t` counts along `direction` as given: a unit direction makes `t` texels, and only a
/// unit direction makes a step of the sampled distance a step of that many texels.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Ray {
    /// Where it starts (a march from outside the volume stops at once).
    pub origin: [f32; 3],
    /// Its direction (unit length).
    pub direction: [f32; 3],
}

impl Ray {
    /// The point at `t`: `origin + t × direction`, each component one multiplication and one
    /// addition, rounded separately.
    pub fn at(&self, t: f32) -> [f32; 3] {
        [0, 1, 2].map(|a| self.origin[a] + t * self.direction[a])
    }
}

/// How a march stops.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct MarchParams {
    /// A sample below this distance is a hit.
    pub hit_distance: f32,
    /// Samples at most (clamped to [`MAX_MARCH_STEPS`]).
    pub step_limit: u32,
}

/// Where a march stopped.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct MarchResult {
    /// `t` at the hit, or where the march stopped without one (the point that left the volume,
    /// or the last point after the step limit).
    pub t: f32,
    /// Samples taken.
    pub steps: u32,
    /// Samples of non-resident bricks (each read as the maximum step).
    pub missing: u32,
    /// Whether a sample was below the hit distance.
    pub hit: bool,
}

/// Marches `ray` through a volume of `extent` texels, reading the distance at a texel through
/// `sample` (`None`: not resident, read as `max_step`). The rule of the module documentation; the
/// shader's `residencyMarch` takes the same steps.
pub fn march(
    extent: [u32; 3],
    max_step: f32,
    ray: &Ray,
    params: &MarchParams,
    sample: impl Fn([u32; 3]) -> Option<f32>,
) -> MarchResult {
    let limit = params.step_limit.min(MAX_MARCH_STEPS);
    let side = extent.map(|s| s as f32);
    let mut m = MarchResult { t: 0.0, steps: 0, missing: 0, hit: false };
    while m.steps < limit {
        let p = ray.at(m.t);
        // NaN compares false: a non-finite point is outside.
        if !(0..3).all(|a| p[a] >= 0.0 && p[a] < side[a]) {
            break;
        }
        let texel = p.map(|c| c.floor() as u32);
        m.steps += 1;
        let d = sample(texel).unwrap_or_else(|| {
            m.missing += 1;
            max_step
        });
        if d < params.hit_distance {
            m.hit = true;
            break;
        }
        m.t += d;
    }
    m
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sphere(extent: [u32; 3], max_step: f32) -> DistanceField {
        DistanceField::from_fn(extent, max_step, |[x, y, z]| {
            let p = [x as f32 + 0.5 - 16.0, y as f32 + 0.5 - 16.0, z as f32 + 0.5 - 16.0];
            (p[0] * p[0] + p[1] * p[1] + p[2] * p[2]).sqrt() - 6.0
        })
        .unwrap()
    }

    #[test]
    fn bad_fields_are_refused_with_their_numbers() {
        assert_eq!(
            DistanceField::new([4, 0, 4], vec![], 1.0),
            Err(DistanceFieldError::EmptyExtent { extent: [4, 0, 4] })
        );
        for max_step in [0.0, -1.0, f32::NAN, f32::INFINITY] {
            assert!(matches!(
                DistanceField::new([1, 1, 1], vec![1.0], max_step),
                Err(DistanceFieldError::MaxStep { .. })
            ));
        }
        assert_eq!(
            DistanceField::new([2, 2, 2], vec![1.0; 7], 1.0),
            Err(DistanceFieldError::WrongLength { extent: [2, 2, 2], expected: 8, got: 7 })
        );
        let mut values = vec![1.0; 8];
        values[6] = f32::NAN;
        assert_eq!(
            DistanceField::new([2, 2, 2], values, 1.0),
            Err(DistanceFieldError::NotANumber { texel: [0, 1, 1] })
        );
        let field = sphere([32, 32, 32], 4.0);
        assert_eq!(
            field.bricks([16, 16, 12]),
            Err(DistanceFieldError::NotWholeBricks { extent: [32; 3], brick: [16, 16, 12] })
        );
        assert!(field.bricks([0, 16, 16]).is_err());
    }

    #[test]
    fn a_brick_is_near_when_any_texel_is_nearer_than_the_maximum_step() {
        let field = sphere([32, 32, 32], 4.0);
        let grid = field.bricks([8, 8, 8]).unwrap();
        assert_eq!(grid.count(), [4, 4, 4]);
        for b in (0..64u32).map(|i| [i % 4, (i / 4) % 4, i / 16]) {
            let nearest = (0..512u32)
                .map(|i| [b[0] * 8 + i % 8, b[1] * 8 + (i / 8) % 8, b[2] * 8 + i / 64])
                .map(|t| field.at(t).unwrap())
                .fold(f32::INFINITY, f32::min);
            assert_eq!(grid.is_near(b), nearest < 4.0, "brick {b:?}");
        }
        assert_eq!(grid.near().count(), grid.near_count());
        assert!(grid.near_count() > 0 && grid.near_count() < grid.len());
        assert!(!grid.is_near([4, 0, 0]));
    }

    #[test]
    fn the_maximum_step_over_far_bricks_finds_the_surface_the_dense_march_finds() {
        let field = sphere([32, 32, 32], 4.0);
        let grid = field.bricks([8, 8, 8]).unwrap();
        let params = MarchParams { hit_distance: 0.5, step_limit: 64 };
        let mut missing = 0;
        for i in 0..64 {
            let ray = Ray {
                origin: [(i % 8) as f32 * 4.0 + 2.0, (i / 8) as f32 * 4.0 + 2.0, 0.0],
                direction: [0.0, 0.0, 1.0],
            };
            let dense = march(field.extent(), 4.0, &ray, &params, |t| field.at(t));
            let sparse = march(field.extent(), 4.0, &ray, &params, |t| {
                grid.is_near(grid.brick_of(t)).then(|| field.at(t)).flatten()
            });
            assert_eq!(dense.hit, sparse.hit, "ray {i}");
            if dense.hit {
                assert!((dense.t - sparse.t).abs() < 1.5, "ray {i}: {dense:?} {sparse:?}");
            }
            missing += sparse.missing;
        }
        assert!(missing > 0);
    }

    #[test]
    fn a_march_ends_within_the_cap_and_outside_the_volume() {
        let field = DistanceField::new([2, 2, 2], vec![1.0; 8], 1.0).unwrap();
        let params = MarchParams { hit_distance: 0.5, step_limit: u32::MAX };
        let still = Ray { origin: [1.0; 3], direction: [0.0; 3] };
        let m = march(field.extent(), 1.0, &still, &params, |t| field.at(t));
        assert_eq!((m.steps, m.hit), (MAX_MARCH_STEPS, false));
        for origin in [[-0.5, 1.0, 1.0], [2.0, 1.0, 1.0], [f32::NAN, 1.0, 1.0]] {
            let m = march(field.extent(), 1.0, &Ray { origin, direction: [1.0, 0.0, 0.0] }, &params, |t| {
                field.at(t)
            });
            assert_eq!(m.steps, 0);
        }
    }
}
