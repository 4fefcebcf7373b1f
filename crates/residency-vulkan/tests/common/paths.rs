//! One partially resident RGBA8 texture on either residency path, driven through the same calls
//! (commit, write the test pattern, flush, release), for the tests that run one scenario on both.

use super::region_texels;
use residency_core::format::Format;
use residency_core::tiles::{ResidencyPath, SparseImageDesc, SparseImageLayout, TexelRegion, TilePoolDesc};
use residency_vulkan::compute::ViewRef;
use residency_vulkan::sparse::software::{SoftwareError, SoftwareImage, SoftwareTilePool, DEFAULT_BORDER};
use residency_vulkan::sparse::{MinLodMap, SparseError, SparseImage, SparseTilePool};
use residency_vulkan::{Device, ImageRegion, Uploader};
use std::sync::Arc;

/// One partially resident texture on either path (one at a time: the size difference is moot).
#[allow(clippy::large_enum_variant)]
pub enum Texture {
    Hardware { pool: SparseTilePool, image: SparseImage, map: MinLodMap },
    Software { pool: SoftwareTilePool, image: SoftwareImage },
}

impl Texture {
    /// An RGBA8 texture of `desc`'s shape on `path` in a pool of its own (16-tile heaps,
    /// `budget` tiles).
    pub fn new(device: &Arc<Device>, path: ResidencyPath, desc: SparseImageDesc, budget: u32) -> Texture {
        let desc = desc.with_path(path);
        let pool_desc =
            TilePoolDesc::default().with_name("paths").with_tiles_per_heap(16).with_budget_tiles(budget);
        match path {
            ResidencyPath::Software => {
                let pool = SoftwareTilePool::new(
                    Arc::clone(device),
                    Format::R8G8B8A8Unorm,
                    DEFAULT_BORDER,
                    pool_desc,
                )
                .unwrap();
                let image = SoftwareImage::new(&pool, "paths texture", &desc).unwrap();
                Texture::Software { pool, image }
            }
            _ => {
                let pool = SparseTilePool::new(Arc::clone(device), pool_desc).unwrap();
                let image = SparseImage::new(&pool, "paths texture", &desc, false).unwrap();
                let map = MinLodMap::new(&image).unwrap();
                Texture::Hardware { pool, image, map }
            }
        }
    }

    /// The whole of `mip`.
    pub fn whole(&self, mip: u32) -> TexelRegion {
        let e = self.layout().mips()[mip as usize].extent;
        TexelRegion { offset: [0, 0, 0], extent: [e[0], e[1], 1] }
    }

    pub fn layout(&self) -> &SparseImageLayout {
        match self {
            Texture::Hardware { image, .. } => image.layout(),
            Texture::Software { image, .. } => image.layout(),
        }
    }

    /// Commits the tiles `region` of `mip` touches; the error as text (both are typed; the test
    /// checks the variant per path below).
    pub fn commit(&mut self, mip: u32, region: TexelRegion) -> Result<(), String> {
        match self {
            Texture::Hardware { pool, image, .. } => {
                image.commit_region(pool, 0, mip, region).map_err(|e| {
                    assert!(matches!(e, SparseError::Commit(_)), "{e:?}");
                    e.to_string()
                })?;
                pool.flush_binds(&mut [image]).unwrap();
                Ok(())
            }
            Texture::Software { pool, image } => image.commit_region(pool, 0, mip, region).map_err(|e| {
                assert!(matches!(e, SoftwareError::Commit(_)), "{e:?}");
                e.to_string()
            }),
        }
    }

    pub fn release(&mut self, mip: u32, region: TexelRegion) {
        match self {
            Texture::Hardware { pool, image, .. } => {
                image.release_region(pool, 0, mip, region).unwrap();
                pool.flush_binds(&mut [image]).unwrap();
            }
            Texture::Software { pool, image } => image.release_region(pool, 0, mip, region).unwrap(),
        }
    }

    pub fn release_all(&mut self) {
        match self {
            Texture::Hardware { pool, image, .. } => {
                image.release_all(pool).unwrap();
                pool.flush_binds(&mut [image]).unwrap();
            }
            Texture::Software { pool, image } => image.release_all(pool).unwrap(),
        }
    }

    /// Writes the texels of `region` of `mip` (its tiles resident).
    pub fn write(&mut self, _device: &Device, uploader: &Uploader, mip: u32, region: TexelRegion) {
        let data =
            region_texels(mip, [region.offset[0], region.offset[1]], [region.extent[0], region.extent[1]]);
        match self {
            Texture::Hardware { image, .. } => {
                let target = ImageRegion::new(&*image, mip, region.offset, region.extent);
                uploader.write_image(&target, &data).unwrap();
            }
            Texture::Software { pool, image } => {
                image.write_region(pool, uploader, 0, mip, region, &data).unwrap()
            }
        }
    }

    /// Writes the test pattern into `region` of `mip` through the path's `write_region`, which
    /// commits the tiles it touches on demand; the error as text, its variant checked per path
    /// (a refused commit).
    pub fn write_on_demand(
        &mut self,
        uploader: &Uploader,
        mip: u32,
        region: TexelRegion,
    ) -> Result<(), String> {
        let data =
            region_texels(mip, [region.offset[0], region.offset[1]], [region.extent[0], region.extent[1]]);
        match self {
            Texture::Hardware { pool, image, .. } => {
                image.write_region(pool, uploader, 0, mip, region, &data).map_err(|e| {
                    assert!(matches!(e, SparseError::Commit(_)), "{e:?}");
                    e.to_string()
                })
            }
            Texture::Software { pool, image } => {
                image.write_region(pool, uploader, 0, mip, region, &data).map_err(|e| {
                    assert!(matches!(e, SoftwareError::Commit(_)), "{e:?}");
                    e.to_string()
                })
            }
        }
    }

    /// Makes everything visible to the next dispatch.
    pub fn flush(&mut self, uploader: &Uploader) {
        match self {
            Texture::Hardware { image, map, .. } => {
                map.update(uploader, image).unwrap();
            }
            Texture::Software { pool, image } => {
                pool.flush(uploader, &mut [image]).unwrap();
            }
        }
        uploader.wait_idle().unwrap();
    }

    pub fn used_tiles(&self) -> u64 {
        match self {
            Texture::Hardware { pool, .. } => pool.used_tiles(),
            Texture::Software { pool, .. } => pool.used_tiles(),
        }
    }

    pub fn resident_tiles(&self) -> u64 {
        let (table, layout) = match self {
            Texture::Hardware { image, .. } => (image.residency().page_table(), image.layout()),
            Texture::Software { image, .. } => (image.residency().page_table(), image.layout()),
        };
        let tails = (0..layout.mip_tail_count()).filter(|&t| table.is_tail_resident(t));
        u64::from(table.resident_tiles())
            + tails.map(|_| layout.mip_tail().map_or(0, |t| u64::from(t.tiles))).sum::<u64>()
    }

    pub fn views(&self) -> (ViewRef<'_>, ViewRef<'_>) {
        match self {
            Texture::Hardware { image, map, .. } => (image.into(), map.view().into()),
            Texture::Software { pool, image } => (pool.atlas_view().into(), image.indirection_view().into()),
        }
    }

    /// Drops the texture; once the work that sampled it is done, its pool has every tile back.
    pub fn destroy(self, device: &Device) {
        let used = match self {
            Texture::Hardware { pool, image, map } => {
                drop((map, image));
                device.wait_submitted().unwrap();
                pool.used_tiles()
            }
            Texture::Software { pool, image } => {
                drop(image);
                device.wait_submitted().unwrap();
                pool.used_tiles()
            }
        };
        assert_eq!(used, 0);
    }
}
