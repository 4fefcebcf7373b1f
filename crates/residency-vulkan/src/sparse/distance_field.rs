//! A distance-field volume on the hardware residency path, ray-marched with the residency default
//! value as the maximum step (the seed's "volume textures + ray marching"): a sparse `R32_SFLOAT`
//! 3D image of which only the bricks near a surface are resident, what a shader needs to march it
//! (`shaders/include/raymarch.glsl`, the shipped [`DISTANCE_FIELD`](crate::shaders::DISTANCE_FIELD)
//! program), and the CPU reference march over the same bricks.
//!
//! The rule and the march are the core's ([`residency_core::tiles::distance_field`]); this is the
//! Vulkan half. The software path lays out 2D images and 2D arrays only
//! ([`IndirectionError::NotPlain2d`](residency_core::tiles::IndirectionError::NotPlain2d)), so a
//! volume on it is refused ([`VolumeError::SoftwarePath`]), and so is a device without sparse
//! residency for 3D images ([`VolumeError::NoSparseVolumes`]).

use crate::device::Device;
use crate::error::{ErrorClass, ResidencyError, VulkanError};
use crate::resources::image::{Filter, Sampler};
use crate::sparse::{SparseError, SparseImage, SparseTilePool};
use crate::sync::upload::{ImageRegion, UploadError, Uploader};
use residency_core::format::Format;
use residency_core::tiles::{
    march, BrickGrid, DistanceField, DistanceFieldError, MarchParams, MarchResult, Ray, ResidencyPath,
    SparseImageDesc, SparseImageLayout, TileCoord, TileIndex,
};
use std::sync::Arc;

/// Which bricks of a [`DistanceFieldVolume`] are made resident.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum BrickResidency {
    /// The bricks with a texel nearer than the maximum step ([`BrickGrid::is_near`]); the others
    /// read as the maximum step. The default.
    #[default]
    NearSurface,
    /// Every brick (a dense volume, the reference a sparse one is compared with).
    All,
}

/// How a [`DistanceFieldVolume`] is made. Defaults: [`BrickResidency::NearSurface`],
/// [`ResidencyPath::Auto`] (which must resolve to the hardware path).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DistanceFieldDesc {
    /// The image's name (logs, errors, leak reports).
    pub name: String,
    /// Which bricks are resident.
    pub residency: BrickResidency,
    /// The residency path asked for: `Software` is refused ([`VolumeError::SoftwarePath`]).
    pub path: ResidencyPath,
}

impl DistanceFieldDesc {
    /// A description with the defaults.
    pub fn new(name: impl Into<String>) -> DistanceFieldDesc {
        DistanceFieldDesc {
            name: name.into(),
            residency: BrickResidency::default(),
            path: ResidencyPath::Auto,
        }
    }

    /// Sets which bricks are resident.
    pub fn with_residency(mut self, residency: BrickResidency) -> DistanceFieldDesc {
        self.residency = residency;
        self
    }

    /// Sets the residency path asked for.
    pub fn with_path(mut self, path: ResidencyPath) -> DistanceFieldDesc {
        self.path = path;
        self
    }
}

/// A distance-field volume was refused or could not be made; nothing was changed (a volume
/// half-made is released as a dropped [`SparseImage`] is: its tiles go back to the pool once the
/// GPU work submitted so far has completed).
#[derive(Debug, thiserror::Error)]
pub enum VolumeError {
    /// The field, its maximum step or its bricks were refused (the numbers inside).
    #[error(transparent)]
    Field(#[from] DistanceFieldError),
    /// The software path was asked for: it lays out 2D images and 2D arrays, not volumes.
    #[error("`{name}`: the software residency path holds 2D images and 2D arrays, not volumes; a distance-field volume takes the hardware path")]
    SoftwarePath {
        /// The volume.
        name: String,
    },
    /// The device has no sparse residency for 3D images (`sparseResidencyImage3D`, shader
    /// residency codes and a sparse queue), and the software path cannot hold a volume.
    #[error(
        "`{name}`: {device} has no sparse residency for 3D images (and the software path holds no volumes)"
    )]
    NoSparseVolumes {
        /// The volume.
        name: String,
        /// The device.
        device: String,
    },
    /// A brick coordinate outside the volume's grid.
    #[error("`{name}`: brick {brick:?} is outside the grid of {count:?} bricks")]
    NoSuchBrick {
        /// The volume.
        name: String,
        /// The brick asked for.
        brick: [u32; 3],
        /// Bricks along each axis.
        count: [u32; 3],
    },
    /// Creating the image, committing, releasing or binding failed (the pool is another image's,
    /// exhausted, …).
    #[error(transparent)]
    Sparse(#[from] SparseError),
    /// Staging a brick's texels failed (an uploader of another device or with a ring under two
    /// bricks, …).
    #[error(transparent)]
    Upload(#[from] UploadError),
    /// Creating the sampler failed.
    #[error(transparent)]
    Vulkan(#[from] VulkanError),
}

impl ResidencyError for VolumeError {
    fn class(&self) -> ErrorClass {
        match self {
            VolumeError::Field(e) => e.class(),
            VolumeError::Sparse(e) => e.class(),
            VolumeError::Upload(e) => e.class(),
            VolumeError::Vulkan(e) => e.class(),
            VolumeError::SoftwarePath { .. } | VolumeError::NoSparseVolumes { .. } => ErrorClass::Unsupported,
            VolumeError::NoSuchBrick { .. } => ErrorClass::Refused,
        }
    }
}

/// A distance field in a partially resident 3D image: the bricks (sparse tiles) its
/// [`BrickResidency`] asks for are committed and their texels uploaded, the others read as the
/// residency default value in a shader that marches it through `raymarch.glsl`. It keeps the field
/// on the CPU (a brick committed again is uploaded from it, and [`march_cpu`](Self::march_cpu)
/// reads it) and asks the image's page table which bricks are resident, so the CPU march follows
/// every commit and release.
///
/// A shader binds [`image`](Self::image) with [`sampler`](Self::sampler) (`GENERAL` layout) as a
/// `sampler3D`; [`DISTANCE_FIELD`](crate::shaders::DISTANCE_FIELD) takes rays in the layout of
/// [`encode_rays`](Self::encode_rays), push constants from [`push_constants`](Self::push_constants)
/// and writes results [`decode_results`](Self::decode_results) reads. The volume is released when
/// dropped, as its image is.
#[derive(Debug)]
pub struct DistanceFieldVolume {
    image: SparseImage,
    sampler: Sampler,
    field: DistanceField,
    grid: BrickGrid,
}

impl DistanceFieldVolume {
    /// Makes the volume: a sparse `R32_SFLOAT` 3D image of `field`'s extent with one mip, in tiles
    /// of `pool` (the pool's device), the bricks `desc.residency` asks for committed and bound, and
    /// their texels staged on `uploader` (a ring of at least two bricks, 128 KiB) and submitted:
    /// work submitted after this returns sees them.
    ///
    /// Checked before anything is made: the path ([`VolumeError::SoftwarePath`],
    /// [`VolumeError::NoSparseVolumes`]), the image's layout on the device
    /// ([`VolumeError::Sparse`]), the volume is whole bricks ([`DistanceFieldError::NotWholeBricks`]
    /// in [`VolumeError::Field`]) and `uploader` is of the pool's device
    /// ([`UploadError::WrongDevice`]). The field itself was checked when it was made
    /// ([`DistanceField::new`]: extent, maximum step finite and above zero, one distance per
    /// texel). An exhausted pool is [`SparseError::Commit`] with nothing committed.
    pub fn new(
        pool: &SparseTilePool,
        uploader: &Uploader,
        desc: &DistanceFieldDesc,
        field: DistanceField,
    ) -> Result<DistanceFieldVolume, VolumeError> {
        let device = pool.device();
        let name = &desc.name;
        if desc.path == ResidencyPath::Software {
            return Err(VolumeError::SoftwarePath { name: name.clone() });
        }
        let f = device.features();
        if !(f.sparse_residency_image_3d && f.shader_resource_residency && device.sparse_queue().is_some()) {
            return Err(VolumeError::NoSparseVolumes {
                name: name.clone(),
                device: device.name().to_owned(),
            });
        }
        if !uploader.device().is(device) {
            return Err(UploadError::WrongDevice {
                name: name.clone(),
                owner: device.index(),
                uploader: uploader.device().index(),
            }
            .into());
        }
        let [w, h, d] = field.extent();
        let image_desc = SparseImageDesc::new_3d(Format::R32Float, w, h, d).with_mip_levels(1);
        let layout =
            SparseImageLayout::for_device(&image_desc, device.profile()).map_err(SparseError::from)?;
        let shape = layout.tile_shape();
        let grid = field.bricks([shape.width, shape.height, shape.depth])?;
        let sampler = device.create_sampler(Filter::Nearest)?;
        let image = SparseImage::new(pool, name, &image_desc, false)?;
        // The driver's layout of the image made must be the bricks the profile gave.
        let made = image.layout();
        if made.tile_shape() != shape || made.first_tail_lod() == 0 {
            return Err(SparseError::Incompatible {
                name: name.clone(),
                reason: format!(
                    "the driver lays the volume out in {:?} tiles with its mip tail from level {}; \
                     the device profile said {shape:?} tiles and whole bricks",
                    made.tile_shape(),
                    made.first_tail_lod()
                ),
            }
            .into());
        }
        let mut volume = DistanceFieldVolume { image, sampler, field, grid };
        let bricks: Vec<[u32; 3]> = match desc.residency {
            BrickResidency::NearSurface => volume.grid.near().collect(),
            BrickResidency::All => volume.all_bricks().collect(),
        };
        let tiles: Vec<TileIndex> = bricks.iter().map(|&b| volume.tile(b)).collect::<Result<_, _>>()?;
        volume.image.commit_tiles(pool, &tiles)?;
        pool.flush_binds(&mut [&mut volume.image])?;
        for &b in &bricks {
            volume.upload(uploader, b)?;
        }
        uploader.flush()?;
        Ok(volume)
    }

    /// Its name.
    pub fn name(&self) -> &str {
        self.image.name()
    }

    /// The device it lives on.
    pub fn device(&self) -> &Arc<Device> {
        self.image.device()
    }

    /// The sparse image (binding 0 of [`DISTANCE_FIELD`](crate::shaders::DISTANCE_FIELD), a
    /// `sampler3D` in `GENERAL` layout; its `used_until` declares a renderer's own uses).
    pub fn image(&self) -> &SparseImage {
        &self.image
    }

    /// A nearest-filtering sampler to bind it with (the march fetches texels; the sampler's
    /// filter is not used).
    pub fn sampler(&self) -> &Sampler {
        &self.sampler
    }

    /// The field.
    pub fn field(&self) -> &DistanceField {
        &self.field
    }

    /// The maximum step: the residency default value a non-resident brick reads as.
    pub fn max_step(&self) -> f32 {
        self.field.max_step()
    }

    /// The volume's extent in texels.
    pub fn extent(&self) -> [u32; 3] {
        self.field.extent()
    }

    /// The bricks and which of them are near a surface.
    pub fn bricks(&self) -> &BrickGrid {
        &self.grid
    }

    /// Bytes of one brick (one sparse tile).
    pub fn brick_bytes(&self) -> u64 {
        self.image.layout().tile_bytes()
    }

    /// Whether brick `brick` is resident (false outside the grid).
    pub fn is_brick_resident(&self, brick: [u32; 3]) -> bool {
        self.tile(brick).is_ok_and(|t| self.image.residency().page_table().is_resident(t))
    }

    /// How many bricks are resident.
    pub fn resident_bricks(&self) -> u32 {
        self.image.residency().page_table().resident_tiles()
    }

    /// Bytes resident (resident bricks × [`brick_bytes`](Self::brick_bytes)).
    pub fn resident_bytes(&self) -> u64 {
        u64::from(self.resident_bricks()) * self.brick_bytes()
    }

    /// Bytes of the volume were every brick resident.
    pub fn dense_bytes(&self) -> u64 {
        self.grid.len() as u64 * self.brick_bytes()
    }

    /// What a march reads at `texel`: its distance where its brick is resident, `None` (the
    /// maximum step) where it is not or outside the volume.
    pub fn sample(&self, texel: [u32; 3]) -> Option<f32> {
        let d = self.field.at(texel)?;
        self.is_brick_resident(self.grid.brick_of(texel)).then_some(d)
    }

    /// Marches `ray` on the CPU through the resident bricks, a non-resident one reading as the
    /// maximum step: the steps `residencyMarch` takes on the GPU, bit for bit
    /// ([`residency_core::tiles::march`]).
    pub fn march_cpu(&self, ray: &Ray, params: &MarchParams) -> MarchResult {
        march(self.extent(), self.max_step(), ray, params, |t| self.sample(t))
    }

    /// Releases brick `brick` and unbinds it (a brick not resident: nothing). GPU work reading the
    /// volume must have completed (as for [`SparseImage::release_tiles`]); afterwards it reads as
    /// the maximum step. Releasing a near brick lets a march step over a surface it holds.
    pub fn release_brick(&mut self, pool: &SparseTilePool, brick: [u32; 3]) -> Result<(), VolumeError> {
        let tile = self.tile(brick)?;
        self.image.release_tiles(pool, &[tile])?;
        pool.flush_binds(&mut [&mut self.image])?;
        Ok(())
    }

    /// Commits brick `brick`, binds it and stages its texels from the field on `uploader`,
    /// submitted (a resident brick is uploaded again). A brick outside the grid
    /// ([`VolumeError::NoSuchBrick`]), an uploader of another device and an exhausted pool
    /// ([`SparseError::Commit`]) change nothing; a failure after the commit (the bind's or the
    /// staging's memory, a lost device) leaves the brick committed, as
    /// [`SparseImage::write_region`] does.
    pub fn commit_brick(
        &mut self,
        pool: &SparseTilePool,
        uploader: &Uploader,
        brick: [u32; 3],
    ) -> Result<(), VolumeError> {
        let tile = self.tile(brick)?;
        if !uploader.device().is(self.image.device()) {
            return Err(UploadError::WrongDevice {
                name: self.image.name().to_owned(),
                owner: self.image.device().index(),
                uploader: uploader.device().index(),
            }
            .into());
        }
        self.image.commit_tiles(pool, &[tile])?;
        if self.image.has_pending_binds() {
            pool.flush_binds(&mut [&mut self.image])?;
        }
        self.upload(uploader, brick)?;
        uploader.flush()?;
        Ok(())
    }

    /// The rays as [`DISTANCE_FIELD`](crate::shaders::DISTANCE_FIELD) reads them (binding 1): per
    /// ray `vec4(origin, 0)`, `vec4(direction, 0)`, little-endian.
    pub fn encode_rays(rays: &[Ray]) -> Vec<u8> {
        rays.iter()
            .flat_map(|r| {
                let [ox, oy, oz] = r.origin;
                let [dx, dy, dz] = r.direction;
                [ox, oy, oz, 0.0, dx, dy, dz, 0.0]
            })
            .flat_map(f32::to_le_bytes)
            .collect()
    }

    /// The push constants of [`DISTANCE_FIELD`](crate::shaders::DISTANCE_FIELD) marching `count`
    /// rays of this volume: `{ float maxStep, hitDistance; uint stepLimit, count; }`.
    pub fn push_constants(&self, params: &MarchParams, count: u32) -> [u8; 16] {
        let mut push = [0u8; 16];
        push[0..4].copy_from_slice(&self.max_step().to_le_bytes());
        push[4..8].copy_from_slice(&params.hit_distance.to_le_bytes());
        push[8..12].copy_from_slice(&params.step_limit.to_le_bytes());
        push[12..16].copy_from_slice(&count.to_le_bytes());
        push
    }

    /// The results [`DISTANCE_FIELD`](crate::shaders::DISTANCE_FIELD) wrote (binding 2): per ray
    /// `vec4(t, steps, missing, hit)`; trailing bytes short of a result are ignored.
    pub fn decode_results(bytes: &[u8]) -> Vec<MarchResult> {
        bytes
            .chunks_exact(16)
            .map(|c| {
                let f = |i: usize| f32::from_le_bytes([c[i], c[i + 1], c[i + 2], c[i + 3]]);
                MarchResult { t: f(0), steps: f(4) as u32, missing: f(8) as u32, hit: f(12) != 0.0 }
            })
            .collect()
    }

    /// Every brick of the grid, x fastest.
    fn all_bricks(&self) -> impl Iterator<Item = [u32; 3]> {
        let [cx, cy, cz] = self.grid.count();
        (0..cz).flat_map(move |z| (0..cy).flat_map(move |y| (0..cx).map(move |x| [x, y, z])))
    }

    /// The tile of brick `brick`.
    fn tile(&self, brick: [u32; 3]) -> Result<TileIndex, VolumeError> {
        let coord = TileCoord { layer: 0, mip: 0, x: brick[0], y: brick[1], z: brick[2] };
        self.image.layout().tile_index(coord).ok_or_else(|| VolumeError::NoSuchBrick {
            name: self.image.name().to_owned(),
            brick,
            count: self.grid.count(),
        })
    }

    /// Stages brick `brick`'s texels from the field.
    fn upload(&self, uploader: &Uploader, brick: [u32; 3]) -> Result<(), VolumeError> {
        let extent = self.grid.brick();
        let offset = [0, 1, 2].map(|a| brick[a] * extent[a]);
        let texels = self.field.region(offset, extent).ok_or_else(|| VolumeError::NoSuchBrick {
            name: self.image.name().to_owned(),
            brick,
            count: self.grid.count(),
        })?;
        let bytes: Vec<u8> = texels.iter().flat_map(|v| v.to_le_bytes()).collect();
        uploader.write_image(&ImageRegion::new(&self.image, 0, offset, extent), &bytes)?;
        Ok(())
    }
}
