//! One API over both residency paths: [`ResidencyBackend`], implemented by the hardware path's
//! [`SparseImage`](crate::sparse::SparseImage) and the software path's
//! [`SoftwareImage`](crate::sparse::software::SoftwareImage).
//!
//! The provided methods are the API, and they hold the validation, once for both paths: the pool
//! given must be the one that holds the image's tiles, and the tiles, tails, layers, mips and
//! texel regions must exist in the image — the core's [`SparseResidency`] checks all of it before
//! it changes anything, and [`flush`](ResidencyBackend::flush) checks every image's pool before a
//! path's flush runs. A refused call is a [`CommitError`] (inside the path's error) and changes
//! nothing: page table, pool accounting and queued changes stay as they were.
//!
//! Both paths' images are released on drop (see the crate's ownership rules): their tiles go back
//! to their pool once the GPU work that may use them has completed, and an image keeps its pool's
//! state (and memory) alive, so there is no destroy call to get wrong.
//!
//! A path implements only what follows the checks: the `*_unchecked` methods. They take a
//! `Checked` token that only this module can make, so they are reachable through the provided
//! methods alone, and no type outside this crate can implement the trait (the token cannot be
//! named there): a check cannot exist on one path and be missing on the other.

use crate::device::life::{ForeignUse, GpuUse};
use crate::device::Device;
use residency_core::tiles::{
    CommitError, PoolId, PoolInvariantError, PoolStats, ResidencyChanges, SparseImageLayout, SparseResidency,
    TexelRegion, TileIndex, TilePool,
};
use std::sync::Arc;

mod token {
    /// Proof that [`ResidencyBackend`](super::ResidencyBackend)'s checks ran. Only the provided
    /// methods make one.
    #[derive(Debug)]
    pub struct Checked(pub(super) ());
}

pub(crate) use token::Checked;

/// A partially resident image on one residency path, with the pool it takes tiles from: commits,
/// releases, flushes and residency queries, validated once for both paths (see the
/// documentation of `sparse/backend.rs`, the residency layer's seam).
///
/// ```no_run
/// use residency_core::tiles::TexelRegion;
/// use residency_vulkan::sparse::ResidencyBackend;
///
/// /// Makes the top-left tile of mip 0 resident and visible, on either path.
/// fn show_corner<B: ResidencyBackend>(
///     image: &mut B,
///     pool: &B::Pool,
///     flush: B::FlushContext<'_>,
/// ) -> Result<B::FlushStats, B::Error> {
///     image.commit_region(pool, 0, 0, TexelRegion { offset: [0; 3], extent: [1, 1, 1] })?;
///     B::flush(pool, flush, &mut [image])
/// }
/// ```
pub trait ResidencyBackend: Sized {
    /// The pool whose tiles this path's images take
    /// ([`SparseTilePool`](crate::sparse::SparseTilePool),
    /// [`SoftwareTilePool`](crate::sparse::software::SoftwareTilePool)).
    type Pool;
    /// What a flush needs besides the pool and the images: the bind planner's options on the
    /// hardware path, the uploader that staged the tiles' texels on the software path.
    type FlushContext<'a>;
    /// What a flush did.
    type FlushStats: std::fmt::Debug;
    /// The path's error; a refused check is its `From<CommitError>`.
    type Error: std::error::Error + From<CommitError>;
    /// The GLSL include (in `shaders/include/`) that shaders sample this path's images through;
    /// both define `residencySampleFallback` with the same signature.
    const GLSL_INCLUDE: &'static str;

    /// The image's name (logs, errors, leak reports).
    fn name(&self) -> &str;

    /// The device it lives on (the image keeps it alive).
    fn device(&self) -> &Arc<Device>;

    /// Declares that GPU work the renderer submitted itself uses the image until `until`:
    /// dropping it earlier defers its release (its textures, and its tiles' return to the pool)
    /// until then. A use of another device is refused.
    fn used_until(&self, until: GpuUse) -> Result<(), ForeignUse>;

    /// Its residency: the page table, residency bitmaps, min-LOD map and the pool its tiles come
    /// from.
    fn residency(&self) -> &SparseResidency;

    /// The [`CommitError`] inside `error`, if it is one (a refused check, an exhausted pool, …).
    fn commit_error(error: &Self::Error) -> Option<&CommitError>;

    /// Its layout (tile grid per mip, mip tail).
    fn layout(&self) -> &SparseImageLayout {
        self.residency().layout()
    }

    /// Whether `tile` is resident (in the page table; shaders see it after the next flush).
    fn is_resident(&self, tile: TileIndex) -> bool {
        self.residency().page_table().is_resident(tile)
    }

    /// Whether mip tail `tail` is resident.
    fn is_tail_resident(&self, tail: u32) -> bool {
        self.residency().page_table().is_tail_resident(tail)
    }

    /// Statistics of `pool`'s tiles (used and free per heap, owners).
    fn pool_stats(pool: &Self::Pool) -> PoolStats {
        Self::with_tile_pool_unchecked(pool, |p| p.stats(), Checked(()))
    }

    /// The identity of `pool`'s core tile pool (what [`CommitError::WrongPool`] names).
    fn pool_id(pool: &Self::Pool) -> PoolId {
        Self::with_tile_pool_unchecked(pool, |p| p.id(), Checked(()))
    }

    /// Checks `pool`'s invariants (runs in bounds, free lists and owners consistent); a failure is
    /// a bug in this library.
    fn check_pool_invariants(pool: &Self::Pool) -> Result<(), PoolInvariantError> {
        Self::with_tile_pool_unchecked(pool, |p| p.check_invariants(), Checked(()))
    }

    /// Makes `tiles` resident (all or nothing), with tiles of `pool`, which must be the image's.
    fn commit_tiles(&mut self, pool: &Self::Pool, tiles: &[TileIndex]) -> Result<(), Self::Error> {
        change(self, pool, |r, p| r.commit(p, tiles))
    }

    /// Makes every tile of (`layer`, `mip`) that `region` touches resident; a mip in the tail
    /// commits the tail. The region must lie inside the mip.
    fn commit_region(
        &mut self,
        pool: &Self::Pool,
        layer: u32,
        mip: u32,
        region: TexelRegion,
    ) -> Result<(), Self::Error> {
        change(self, pool, |r, p| r.commit_region(p, layer, mip, region))
    }

    /// Makes mip tail `tail` resident (one unit, pinned until released explicitly).
    fn commit_tail(&mut self, pool: &Self::Pool, tail: u32) -> Result<(), Self::Error> {
        change(self, pool, |r, p| r.commit_tail(p, tail))
    }

    /// Releases `tiles` (those not resident are skipped). GPU work reading them must have
    /// completed.
    fn release_tiles(&mut self, pool: &Self::Pool, tiles: &[TileIndex]) -> Result<(), Self::Error> {
        change(self, pool, |r, p| r.release(p, tiles))
    }

    /// Releases the tiles of (`layer`, `mip`) that `region` touches (a tail mip: nothing; the tail
    /// is pinned). The region must lie inside the mip.
    fn release_region(
        &mut self,
        pool: &Self::Pool,
        layer: u32,
        mip: u32,
        region: TexelRegion,
    ) -> Result<(), Self::Error> {
        change(self, pool, |r, p| r.release_region(p, layer, mip, region))
    }

    /// Releases mip tail `tail` (a no-op if it is not resident).
    fn release_tail(&mut self, pool: &Self::Pool, tail: u32) -> Result<(), Self::Error> {
        change(self, pool, |r, p| r.release_tail(p, tail))
    }

    /// Releases every tile and tail.
    fn release_all(&mut self, pool: &Self::Pool) -> Result<(), Self::Error> {
        change(self, pool, |r, p| r.release_all(p))
    }

    /// Makes the images' changes since their last flush visible to shaders (binds on the hardware
    /// path; indirection and borders on the software path). Every image must belong to `pool`;
    /// else [`CommitError::WrongPool`] and nothing is flushed.
    fn flush(
        pool: &Self::Pool,
        context: Self::FlushContext<'_>,
        images: &mut [&mut Self],
    ) -> Result<Self::FlushStats, Self::Error> {
        Self::with_tile_pool_unchecked(
            pool,
            |p| images.iter().try_for_each(|image| image.residency().check_pool(p)),
            Checked(()),
        )?;
        Self::flush_unchecked(pool, context, images, Checked(()))
    }

    /// Runs `f` on `pool`'s core tile pool, locked.
    fn with_tile_pool_unchecked<R>(
        pool: &Self::Pool,
        f: impl FnOnce(&mut TilePool) -> R,
        checked: Checked,
    ) -> R;

    /// The residency, for a commit or release the provided methods make (the core checks it).
    fn residency_mut_unchecked(&mut self, checked: Checked) -> &mut SparseResidency;

    /// What the path does with the changes of an accepted commit or release (the hardware path
    /// queues them for its binds; the software path needs nothing: its flush reads the page
    /// table).
    fn queue_unchecked(&mut self, changes: ResidencyChanges, checked: Checked);

    /// The path's flush, once every image was checked to belong to `pool`.
    fn flush_unchecked(
        pool: &Self::Pool,
        context: Self::FlushContext<'_>,
        images: &mut [&mut Self],
        checked: Checked,
    ) -> Result<Self::FlushStats, Self::Error>;
}

/// A commit or release through the core (which checks the pool and the ranges first), then the
/// path's handling of the changes.
fn change<B: ResidencyBackend>(
    image: &mut B,
    pool: &B::Pool,
    op: impl FnOnce(&mut SparseResidency, &mut TilePool) -> Result<ResidencyChanges, CommitError>,
) -> Result<(), B::Error> {
    let changes = B::with_tile_pool_unchecked(
        pool,
        |p| op(image.residency_mut_unchecked(Checked(())), p),
        Checked(()),
    )?;
    image.queue_unchecked(changes, Checked(()));
    Ok(())
}
