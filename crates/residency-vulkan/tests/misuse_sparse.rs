//! Misuse of partially resident images, on both residency paths through the one API they share
//! (`ResidencyBackend`): a commit, release or flush through a tile pool that does not hold the
//! image's tiles, tiles and regions outside the image, a mip past it — and, on the hardware path,
//! `TileHeaps::bind` with a pool the heaps do not serve. Each is a typed error that changes
//! nothing: the page table, both pools' accounting and the queued binds are as before, the
//! validation layer stays quiet (`with_gpu` fails the test otherwise) and nothing leaks.

use residency_core::format::Format;
use residency_core::tiles::{
    BindPlanOptions, CommitError, HeapIndex, ImageId, PageTableError, PhysicalTile, PoolId, PoolStats,
    SparseImageDesc, SparseResidency, TexelRegion, TileIndex, TilePool, TilePoolDesc,
};
use residency_vulkan::sparse::software::{SoftwareError, SoftwareImage, SoftwareTilePool, DEFAULT_BORDER};
use residency_vulkan::sparse::ResidencyBackend;
use residency_vulkan::sparse::{SparseError, SparseImage, SparseTilePool, TileHeaps};
use residency_vulkan::testing::with_gpu;
use residency_vulkan::{Device, Uploader};
use std::sync::Arc;

const SIZE: u32 = 512;

fn desc() -> SparseImageDesc {
    SparseImageDesc::new_2d(Format::R8G8B8A8Unorm, SIZE, SIZE)
}

fn pool_desc(name: &str) -> TilePoolDesc {
    TilePoolDesc::default().with_name(name).with_tiles_per_heap(8).with_budget_tiles(32)
}

/// What the tests need of a path beyond the shared API: making pools and images (dropping them
/// releases them).
trait Path: ResidencyBackend {
    fn new_pool(device: &Arc<Device>, name: &str) -> Self::Pool;
    fn new_image(pool: &Self::Pool, name: &str) -> Self;
    fn context(uploader: &Uploader) -> Self::FlushContext<'_>;
    /// Whether binds are queued (the hardware path queues them; the software path has no queue).
    fn queued(&self) -> Option<bool>;
    /// Tiles a flush bound (hardware).
    fn bound(stats: &Self::FlushStats) -> Option<u64>;
}

impl Path for SparseImage {
    fn new_pool(device: &Arc<Device>, name: &str) -> SparseTilePool {
        SparseTilePool::new(Arc::clone(device), pool_desc(name)).unwrap()
    }
    fn new_image(pool: &SparseTilePool, name: &str) -> SparseImage {
        SparseImage::new(pool, name, &desc(), false).unwrap()
    }
    fn context(_: &Uploader) -> BindPlanOptions {
        BindPlanOptions::default()
    }
    fn queued(&self) -> Option<bool> {
        Some(self.has_pending_binds())
    }
    fn bound(stats: &residency_vulkan::sparse::BindStats) -> Option<u64> {
        Some(stats.tiles_bound)
    }
}

impl Path for SoftwareImage {
    fn new_pool(device: &Arc<Device>, name: &str) -> SoftwareTilePool {
        SoftwareTilePool::new(Arc::clone(device), Format::R8G8B8A8Unorm, DEFAULT_BORDER, pool_desc(name))
            .unwrap()
    }
    fn new_image(pool: &SoftwareTilePool, name: &str) -> SoftwareImage {
        SoftwareImage::new(pool, name, &desc()).unwrap()
    }
    fn context(uploader: &Uploader) -> &Uploader {
        uploader
    }
    fn queued(&self) -> Option<bool> {
        None
    }
    fn bound(_: &residency_vulkan::sparse::software::SoftwareFlushStats) -> Option<u64> {
        None
    }
}

/// Everything a refused call must leave as it was.
#[derive(Debug, PartialEq)]
struct State {
    mapped: Vec<(TileIndex, PhysicalTile)>,
    tails: Vec<bool>,
    queued: Option<bool>,
    pools: Vec<PoolStats>,
}

fn state<B: Path>(image: &B, pools: &[&B::Pool]) -> State {
    for pool in pools {
        B::check_pool_invariants(pool).unwrap();
    }
    State {
        mapped: image.residency().page_table().mapped().collect(),
        tails: (0..image.layout().mip_tail_count()).map(|t| image.is_tail_resident(t)).collect(),
        queued: image.queued(),
        pools: pools.iter().map(|p| B::pool_stats(p)).collect(),
    }
}

/// `result` is [`CommitError::WrongPool`] naming `given` and the image's `owner` pool.
fn assert_wrong_pool<B: Path, T: std::fmt::Debug>(
    result: Result<T, B::Error>,
    given: &B::Pool,
    owner: &B::Pool,
) {
    let error = result.expect_err("a foreign pool is refused");
    match B::commit_error(&error) {
        Some(CommitError::WrongPool { given: g, owner: o, .. }) => {
            assert_eq!((*g, *o), (B::pool_id(given), B::pool_id(owner)), "{error}")
        }
        _ => panic!("expected WrongPool, got {error:?}"),
    }
}

fn commit_error<B: Path, T: std::fmt::Debug>(result: Result<T, B::Error>) -> CommitError {
    let error = result.expect_err("refused");
    B::commit_error(&error).cloned().unwrap_or_else(|| panic!("expected a CommitError, got {error:?}"))
}

/// Two pools of one path: `image` in `own` with tile 0 flushed and tile 1 queued, `neighbour` in
/// `other` with tiles 0 and 1 of its own (the tiles a foreign commit would alias).
struct Scene<B: Path> {
    uploader: Uploader,
    own: B::Pool,
    other: B::Pool,
    image: B,
    neighbour: B,
}

impl<B: Path> Scene<B> {
    fn new(device: &Arc<Device>) -> Self {
        let uploader = Uploader::new(device, "misuse", 1 << 20).unwrap();
        let own = B::new_pool(device, "own tiles");
        let other = B::new_pool(device, "other tiles");
        assert_ne!(B::pool_id(&own), B::pool_id(&other));
        let mut image = B::new_image(&own, "misused image");
        let mut neighbour = B::new_image(&other, "neighbour");
        neighbour.commit_tiles(&other, &[TileIndex(0), TileIndex(1)]).unwrap();
        B::flush(&other, B::context(&uploader), &mut [&mut neighbour]).unwrap();
        image.commit_tiles(&own, &[TileIndex(0)]).unwrap();
        B::flush(&own, B::context(&uploader), &mut [&mut image]).unwrap();
        image.commit_tiles(&own, &[TileIndex(1)]).unwrap();
        Scene { uploader, own, other, image, neighbour }
    }

    fn state(&self) -> State {
        state(&self.image, &[&self.own, &self.other])
    }

    /// The queued commit of tile 1 is all the next flush binds; then everything is released and
    /// destroyed.
    fn finish(mut self, device: &Device) {
        let stats = B::flush(&self.own, B::context(&self.uploader), &mut [&mut self.image]).unwrap();
        if let Some(bound) = B::bound(&stats) {
            assert_eq!(bound, 1, "only the commit queued before the misuse is bound");
        }
        assert!(self.image.is_resident(TileIndex(0)) && self.image.is_resident(TileIndex(1)));
        for (image, pool) in [(&mut self.image, &self.own), (&mut self.neighbour, &self.other)] {
            image.release_all(pool).unwrap();
            B::flush(pool, B::context(&self.uploader), &mut [image]).unwrap();
        }
        device.wait_idle().unwrap();
        for pool in [&self.own, &self.other] {
            let stats = B::pool_stats(pool);
            assert!(stats.used_tiles == 0 && stats.owners.is_empty(), "{stats:?}");
        }
        drop((self.image, self.neighbour));
        self.uploader.destroy().unwrap();
        drop((self.own, self.other));
    }
}

fn commit_through_a_foreign_pool<B: Path>(device: &Arc<Device>) {
    let mut s = Scene::<B>::new(device);
    let before = s.state();
    let whole = TexelRegion { offset: [0; 3], extent: [SIZE, SIZE, 1] };
    assert_wrong_pool::<B, _>(s.image.commit_tiles(&s.other, &[TileIndex(2)]), &s.other, &s.own);
    assert_wrong_pool::<B, _>(s.image.commit_region(&s.other, 0, 0, whole), &s.other, &s.own);
    assert_wrong_pool::<B, _>(s.image.commit_tail(&s.other, 0), &s.other, &s.own);
    // Already resident tiles too: the pool is checked before anything else.
    assert_wrong_pool::<B, _>(s.image.commit_tiles(&s.other, &[TileIndex(0)]), &s.other, &s.own);
    assert_eq!(s.state(), before);
    s.finish(device);
}

fn release_through_a_foreign_pool<B: Path>(device: &Arc<Device>) {
    let mut s = Scene::<B>::new(device);
    let before = s.state();
    let first = TexelRegion { offset: [0; 3], extent: [1, 1, 1] };
    // Tiles 0 and 1 are resident in both images: a release through `other` would free the
    // neighbour's tiles and keep the image's own memory bound.
    assert_wrong_pool::<B, _>(
        s.image.release_tiles(&s.other, &[TileIndex(0), TileIndex(1)]),
        &s.other,
        &s.own,
    );
    assert_wrong_pool::<B, _>(s.image.release_region(&s.other, 0, 0, first), &s.other, &s.own);
    assert_wrong_pool::<B, _>(s.image.release_tail(&s.other, 0), &s.other, &s.own);
    assert_wrong_pool::<B, _>(s.image.release_all(&s.other), &s.other, &s.own);
    assert_eq!(s.state(), before);
    assert!(s.neighbour.is_resident(TileIndex(0)) && s.neighbour.is_resident(TileIndex(1)));
    s.finish(device);
}

fn flush_through_a_foreign_pool<B: Path>(device: &Arc<Device>) {
    let mut s = Scene::<B>::new(device);
    s.neighbour.commit_tiles(&s.other, &[TileIndex(2)]).unwrap();
    let before = s.state();
    let neighbour_before = state(&s.neighbour, &[&s.own, &s.other]);
    assert_wrong_pool::<B, _>(
        B::flush(&s.other, B::context(&s.uploader), &mut [&mut s.image]),
        &s.other,
        &s.own,
    );
    // One foreign image in the list refuses the whole flush: the pool's own image is not flushed.
    assert_wrong_pool::<B, _>(
        B::flush(&s.other, B::context(&s.uploader), &mut [&mut s.neighbour, &mut s.image]),
        &s.other,
        &s.own,
    );
    assert_eq!(s.state(), before);
    assert_eq!(state(&s.neighbour, &[&s.own, &s.other]), neighbour_before);
    let stats = B::flush(&s.other, B::context(&s.uploader), &mut [&mut s.neighbour]).unwrap();
    if let Some(bound) = B::bound(&stats) {
        assert_eq!(bound, 1, "the neighbour's queued tile, once");
    }
    s.finish(device);
}

fn tiles_outside_the_image<B: Path>(device: &Arc<Device>) {
    let mut s = Scene::<B>::new(device);
    let before = s.state();
    let count = s.image.layout().tile_count();
    let (own, image) = (&s.own, &mut s.image);
    assert_eq!(
        commit_error::<B, _>(image.commit_tiles(own, &[TileIndex(2), TileIndex(count)])),
        CommitError::PageTable(PageTableError::TileOutOfRange { tile: count, count })
    );
    assert_eq!(
        commit_error::<B, _>(image.release_tiles(own, &[TileIndex(0), TileIndex(count + 3)])),
        CommitError::PageTable(PageTableError::TileOutOfRange { tile: count + 3, count })
    );
    let tails = image.layout().mip_tail_count();
    assert_eq!(
        commit_error::<B, _>(image.commit_tail(own, tails)),
        CommitError::PageTable(PageTableError::TailOutOfRange { tail: tails, count: tails })
    );
    // Texel regions past the mip's edge (mip 1 is 256²), also by an overflowing offset, and a layer
    // the image does not have.
    for region in [
        TexelRegion { offset: [SIZE / 2, 0, 0], extent: [1, 1, 1] },
        TexelRegion { offset: [0, 0, 0], extent: [1, SIZE / 2 + 1, 1] },
        TexelRegion { offset: [u32::MAX, 0, 0], extent: [2, 1, 1] },
    ] {
        let refused =
            CommitError::RegionOutOfRange { layer: 0, mip: 1, region, extent: [SIZE / 2, SIZE / 2, 1] };
        assert_eq!(commit_error::<B, _>(image.commit_region(own, 0, 1, region)), refused);
        assert_eq!(commit_error::<B, _>(image.release_region(own, 0, 1, region)), refused);
    }
    let texel = TexelRegion { offset: [0; 3], extent: [1, 1, 1] };
    assert_eq!(
        commit_error::<B, _>(image.commit_region(own, 1, 0, texel)),
        CommitError::NoSuchSubresource { layer: 1, mip: 0 }
    );
    assert_eq!(s.state(), before);
    s.finish(device);
}

fn a_mip_past_the_image<B: Path>(device: &Arc<Device>) {
    let mut s = Scene::<B>::new(device);
    let before = s.state();
    let mips = s.image.layout().mip_levels();
    let texel = TexelRegion { offset: [0; 3], extent: [1, 1, 1] };
    for mip in [mips, mips + 1, u32::MAX] {
        let refused = CommitError::NoSuchSubresource { layer: 0, mip };
        assert_eq!(commit_error::<B, _>(s.image.commit_region(&s.own, 0, mip, texel)), refused);
        assert_eq!(commit_error::<B, _>(s.image.release_region(&s.own, 0, mip, texel)), refused);
    }
    assert_eq!(s.state(), before);
    s.finish(device);
}

#[test]
fn misuse_commit_through_a_foreign_pool_hardware() {
    with_gpu(|set| commit_through_a_foreign_pool::<SparseImage>(&set.devices()[0]));
}

#[test]
fn misuse_commit_through_a_foreign_pool_software() {
    with_gpu(|set| commit_through_a_foreign_pool::<SoftwareImage>(&set.devices()[0]));
}

#[test]
fn misuse_release_through_a_foreign_pool_hardware() {
    with_gpu(|set| release_through_a_foreign_pool::<SparseImage>(&set.devices()[0]));
}

#[test]
fn misuse_release_through_a_foreign_pool_software() {
    with_gpu(|set| release_through_a_foreign_pool::<SoftwareImage>(&set.devices()[0]));
}

#[test]
fn misuse_flush_through_a_foreign_pool_hardware() {
    with_gpu(|set| flush_through_a_foreign_pool::<SparseImage>(&set.devices()[0]));
}

#[test]
fn misuse_flush_through_a_foreign_pool_software() {
    with_gpu(|set| flush_through_a_foreign_pool::<SoftwareImage>(&set.devices()[0]));
}

#[test]
fn misuse_tiles_outside_the_image_hardware() {
    with_gpu(|set| tiles_outside_the_image::<SparseImage>(&set.devices()[0]));
}

#[test]
fn misuse_tiles_outside_the_image_software() {
    with_gpu(|set| tiles_outside_the_image::<SoftwareImage>(&set.devices()[0]));
}

#[test]
fn misuse_a_mip_past_the_image_hardware() {
    with_gpu(|set| a_mip_past_the_image::<SparseImage>(&set.devices()[0]));
}

#[test]
fn misuse_a_mip_past_the_image_software() {
    with_gpu(|set| a_mip_past_the_image::<SoftwareImage>(&set.devices()[0]));
}

/// The concrete errors behind `ResidencyBackend::commit_error`: one variant on each path.
#[test]
fn misuse_errors_are_the_same_typed_variant_on_both_paths() {
    with_gpu(|set| {
        let device = &set.devices()[0];
        let hardware = Scene::<SparseImage>::new(device);
        let mut image = hardware.image;
        assert!(matches!(
            image.commit_tiles(&hardware.other, &[TileIndex(2)]),
            Err(SparseError::Commit(CommitError::WrongPool { .. }))
        ));
        Scene { image, ..hardware }.finish(device);
        let software = Scene::<SoftwareImage>::new(device);
        let mut image = software.image;
        assert!(matches!(
            image.commit_tiles(&software.other, &[TileIndex(2)]),
            Err(SoftwareError::Commit(CommitError::WrongPool { .. }))
        ));
        // Writing texels through a foreign pool, or past the image, is refused the same way.
        let texel = TexelRegion { offset: [0; 3], extent: [1, 1, 1] };
        assert!(matches!(
            image.write_region(&software.other, &software.uploader, 0, 0, texel, &[0; 4]),
            Err(SoftwareError::Commit(CommitError::WrongPool { .. }))
        ));
        let mips = image.layout().mip_levels();
        assert!(matches!(
            image.write_region(&software.own, &software.uploader, 0, mips, texel, &[0; 4]),
            Err(SoftwareError::Commit(CommitError::NoSuchSubresource { .. }))
        ));
        assert_eq!(SparseImage::GLSL_INCLUDE, "residency.glsl");
        assert_eq!(SoftwareImage::GLSL_INCLUDE, "residency_software.glsl");
        Scene { image, ..software }.finish(device);
    });
}

fn wrong<T: std::fmt::Debug>(result: Result<T, SparseError>, given: PoolId, owner: PoolId) {
    match result {
        Err(SparseError::Commit(CommitError::WrongPool { given: g, owner: o, .. })) => {
            assert_eq!((g, o), (given, owner))
        }
        other => panic!("expected WrongPool, got {other:?}"),
    }
}

fn live_objects(device: &Device) -> usize {
    device.ledger().live_objects().len()
}

/// `TileHeaps` serve one pool (a streaming manager's, here a bare core pool): another pool, changes
/// made against another pool, and images not made for these heaps are refused before any memory is
/// allocated or any bind issued. External images refuse `SparseTilePool` commits and flushes.
#[test]
fn misuse_tile_heaps_bind_with_a_foreign_pool_hardware() {
    with_gpu(|set| {
        let device = &set.devices()[0];
        let options = BindPlanOptions::default();
        let mut heaps = TileHeaps::new(Arc::clone(device), "misuse heaps").unwrap();
        let owner = ImageId(1);
        let mut image = SparseImage::new_external(&heaps, 65536, owner, "external", &desc(), false).unwrap();
        let layout = image.layout().clone();
        let mut served = TilePool::new(pool_desc("served"));
        let mut foreign = TilePool::new(pool_desc("foreign"));
        let mut residency = SparseResidency::new(served.id(), owner, &layout);
        let mut stranger_residency = SparseResidency::new(foreign.id(), owner, &layout);
        let bound = residency.commit(&mut served, &[TileIndex(0), TileIndex(1)]).unwrap();
        assert_eq!(heaps.pool(), None);
        heaps.bind(&served, &[(&image, &bound)], options).unwrap();
        assert_eq!(heaps.pool(), Some(served.id()), "the first pool bound is the one served");

        let foreign_changes = stranger_residency.commit(&mut foreign, &[TileIndex(2), TileIndex(3)]).unwrap();
        let more = residency.commit(&mut served, &[TileIndex(4)]).unwrap();
        let (served_before, foreign_before, objects_before) =
            (served.stats(), foreign.stats(), live_objects(device));
        // Another pool's heap indices would name the served pool's memory.
        wrong(heaps.bind(&foreign, &[(&image, &foreign_changes)], options), foreign.id(), served.id());
        wrong(heaps.bind(&foreign, &[(&image, &more)], options), foreign.id(), served.id());
        wrong(heaps.ensure(&foreign, &[HeapIndex(0)]), foreign.id(), served.id());
        // The served pool, with changes made against the foreign one (and one good item: nothing of
        // it is bound either).
        wrong(
            heaps.bind(&served, &[(&image, &more), (&image, &foreign_changes)], options),
            served.id(),
            foreign.id(),
        );
        // Images not made for these heaps: another heaps' external image, a pool's own image.
        let other_heaps = TileHeaps::new(Arc::clone(device), "other heaps").unwrap();
        let stranger =
            SparseImage::new_external(&other_heaps, 65536, owner, "stranger", &desc(), false).unwrap();
        let pool = SparseTilePool::new(Arc::clone(device), pool_desc("sparse pool")).unwrap();
        let mut own = SparseImage::new(&pool, "pool image", &desc(), false).unwrap();
        let objects_now = live_objects(device);
        for misfit in [&stranger, &own] {
            assert!(matches!(
                heaps.bind(&served, &[(misfit, &more)], options),
                Err(SparseError::Incompatible { .. })
            ));
        }
        assert_eq!(live_objects(device), objects_now, "nothing allocated by the refused binds");
        // An external image keeps no residency: pools refuse its commits and flushes.
        assert!(matches!(
            image.commit_tiles(&pool, &[TileIndex(0)]),
            Err(SparseError::Commit(CommitError::WrongPool { owner: PoolId::NONE, .. }))
        ));
        assert!(matches!(
            pool.flush_binds(&mut [&mut own, &mut image]),
            Err(SparseError::Commit(CommitError::WrongPool { .. }))
        ));
        assert_eq!((served.stats(), foreign.stats()), (served_before, foreign_before));
        assert_eq!(heaps.pool(), Some(served.id()));
        assert_eq!(pool.used_tiles(), 0);
        assert!(objects_now >= objects_before);

        // The good changes still bind, then everything goes.
        heaps.bind(&served, &[(&image, &more)], options).unwrap();
        let released = residency.release_all(&mut served).unwrap();
        heaps.bind(&served, &[(&image, &released)], options).unwrap();
        heaps.release(&served.trim());
        device.wait_idle().unwrap();
        drop((own, pool, image, stranger, heaps, other_heaps));
    });
}
