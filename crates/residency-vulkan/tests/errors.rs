//! Every public error has a class (issue #30): one small closed [`ErrorClass`] under the
//! per-operation errors, read through [`ResidencyError`] (`class`, `is_out_of_memory`,
//! `is_device_lost`) whatever shape the error reaches the caller in.
//!
//! - Over the sources of both library crates: every public error type (a `pub` enum or struct
//!   deriving `thiserror::Error` or implementing `std::error::Error`) is listed in
//!   [`all_error_types!`], which names each one's `ResidencyError::class`, so a new public error
//!   without a class fails to build (not listed: this test fails).
//! - The classes of Vulkan results and of nested errors, on values (no GPU).
//! - On lavapipe (`with_gpu`: synchronization validation on, no object may outlive a test):
//!   out of memory provoked in its shapes (a request beyond the heap, over a heap's budget, a
//!   pool that cannot grow, a full linear pool, a sparse and a software tile pool over budget,
//!   `VK_ERROR_OUT_OF_DEVICE_MEMORY` injected through the ledger) is `is_out_of_memory()` in each;
//!   a streamer user gets out of memory in several shapes (injected at every call of every site
//!   while the streamer is made, a texture added and frames run, on both paths), each of them
//!   `is_out_of_memory()`; and a lost device is `is_device_lost()` through the streamer too.

mod common;

#[path = "common/source.rs"]
mod source;
use residency_core::format::Format;
use residency_core::memory::MemoryIntent;
use residency_core::streaming::{FnSource, SourceError, StreamingError, TileKey, TileSource};
use residency_core::tiles::{
    CommitError, ImageId, PoolError, ResidencyPath, SparseImageDesc, TexelRegion, TileCoord, TilePoolDesc,
};
use residency_core::usage::{BufferPoolUsage, BufferUsage};
use residency_core::vt_file::VtDesc;
use residency_vulkan::ash::vk;
use residency_vulkan::multi::MultiDeviceError;
use residency_vulkan::sparse::software::{SoftwareImage, SoftwareTilePool, DEFAULT_BORDER};
use residency_vulkan::sparse::{SparseError, SparseImage, SparseTilePool};
use residency_vulkan::streaming::{StreamError, Streamer, StreamerDesc};
use residency_vulkan::testing::with_gpu;
use residency_vulkan::{
    AllocationDesc, BufferDesc, BufferInit, BufferPool, BufferPoolDesc, CommandContext, Device, ErrorClass,
    Exhausted, FaultSite, InjectedFault, LinearPool, LinearPoolDesc, MemoryError, ResidencyError,
    UploadError, Uploader, VulkanError,
};
use std::collections::BTreeSet;
use std::path::Path;
use std::sync::Arc;

/// Lists every public error type of `residency-vulkan` and `residency-core`: `listed()` is their
/// paths, and naming `<T as ResidencyError>::class` for each makes a type without the trait a
/// build error.
macro_rules! all_error_types {
    ($($ty:ty),+ $(,)?) => {
        fn listed() -> Vec<String> {
            vec![$({
                let _class: fn(&$ty) -> ErrorClass = <$ty as ResidencyError>::class;
                let _oom: fn(&$ty) -> bool = <$ty as ResidencyError>::is_out_of_memory;
                let _lost: fn(&$ty) -> bool = <$ty as ResidencyError>::is_device_lost;
                stringify!($ty).split_whitespace().collect::<String>()
            }),+]
        }
    };
}

all_error_types! {
    residency_vulkan::VulkanError,
    residency_vulkan::ForeignResource<residency_vulkan::Buffer>,
    residency_vulkan::MemoryError,
    residency_vulkan::ForeignUse,
    residency_vulkan::TeardownError,
    residency_vulkan::AccessError,
    residency_vulkan::DefragError,
    residency_vulkan::ReadBackError,
    residency_vulkan::UploadError,
    residency_vulkan::recording::BarrierError,
    residency_vulkan::recording::CopyError,
    residency_vulkan::recording::CopyTooSmall,
    residency_vulkan::tracking::RecordError,
    residency_vulkan::sparse::SparseError,
    residency_vulkan::sparse::VolumeError,
    residency_vulkan::sparse::software::SoftwareError,
    residency_vulkan::sparse::ptex::PtexError,
    residency_vulkan::compute::DispatchError,
    residency_vulkan::compute::ProgramError,
    residency_vulkan::compute::BindingError,
    residency_vulkan::graphics::RenderError,
    residency_vulkan::graphics::DrawError,
    residency_vulkan::spirv::SpirvError,
    residency_vulkan::streaming::StreamError,
    residency_vulkan::multi::ImagePoolError,
    residency_vulkan::multi::MultiDeviceError<residency_vulkan::MemoryError>,
    residency_vulkan::multi::work::ViewRangeError,
    residency_vulkan::multi::work::WorkError,
    residency_vulkan::multi::work::ImageCopyError,
    residency_vulkan::multi::work::CopyRefusal,
    residency_vulkan::multi::work::TimelineError,
    residency_core::desc::DescError,
    residency_core::allocator::DescError,
    residency_core::allocator::AllocError,
    residency_core::allocator::InvariantError,
    residency_core::allocator::RingError,
    residency_core::allocator::RingInvariantError,
    residency_core::allocator::LinearError,
    residency_core::allocator::LinearInvariantError,
    residency_core::allocator::DefragError,
    residency_core::format::UnknownFormat,
    residency_core::placement::HeapPlacementError,
    residency_core::placement::RequestError,
    residency_core::placement::requirements::RequirementsError,
    residency_core::placement::PlacementError,
    residency_core::placement::PlacementErrorKind,
    residency_core::profile::ProfileError,
    residency_core::report::ReportError,
    residency_core::streaming::FeedbackError,
    residency_core::streaming::StreamingError,
    residency_core::streaming::SourceError,
    residency_core::streaming::DuplicateLoad,
    residency_core::sync::SyncError,
    residency_core::sync::TransientError,
    residency_core::tiles::BindPlanError,
    residency_core::tiles::IndirectionError,
    residency_core::tiles::HardwarePathUnsupported,
    residency_core::tiles::LayoutError,
    residency_core::tiles::PageTableError,
    residency_core::tiles::PoolError,
    residency_core::tiles::PoolInvariantError,
    residency_core::tiles::CommitError,
    residency_core::tiles::DistanceFieldError,
    residency_core::tiles::ShapeError,
    residency_core::tiles::ptex::PtexLayoutError,
    residency_core::tiles::ptex::PtexResidencyError,
    residency_core::vt_file::VtError,
}

/// The public error types declared in the `.rs` files under `dir`: `pub` (not `pub(crate)`)
/// enums and structs whose attributes derive `thiserror::Error`, or that implement
/// `std::error::Error` by hand. Sorted, a name once per declaration.
fn public_errors(dir: &Path) -> Vec<String> {
    let files = source::rust_files(dir);
    let mut found = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        let mut attributes = String::new();
        let mut declared_pub = Vec::new();
        let mut by_hand = Vec::new();
        for line in text.lines().map(str::trim) {
            if line.starts_with("#[") || line.starts_with("///") || line.starts_with("//") {
                attributes.push_str(line);
                continue;
            }
            let item = line.strip_prefix("pub enum ").or_else(|| line.strip_prefix("pub struct "));
            if let Some(item) = item {
                let name: String = item.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
                if attributes.contains("thiserror::Error") {
                    found.push(name);
                } else {
                    declared_pub.push(name);
                }
            }
            if line.starts_with("impl")
                && (line.contains(" std::error::Error for ") || line.contains(" Error for "))
            {
                let name = line.rsplit(" for ").next().unwrap_or_default();
                by_hand
                    .push(name.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect::<String>());
            }
            // Attributes continued over several lines belong to the item below them.
            if !(line.ends_with(',') || line.ends_with('(')) || line.starts_with("pub ") {
                attributes.clear();
            }
        }
        found.extend(by_hand.into_iter().filter(|n| declared_pub.contains(n)));
    }
    found.sort();
    found
}

/// The listed types of one crate (`residency_vulkan` or `residency_core`), by their last path
/// segment without generic arguments. Sorted.
fn listed_of(krate: &str) -> Vec<String> {
    let mut names: Vec<String> = listed()
        .iter()
        .filter(|path| path.starts_with(&format!("{krate}::")))
        .map(|path| {
            let plain = path.split('<').next().unwrap();
            plain.rsplit("::").next().unwrap().to_owned()
        })
        .collect();
    names.sort();
    names
}

#[test]
fn every_public_error_type_is_listed_and_so_has_a_class() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    for (krate, dir) in
        [("residency_vulkan", root.join("src")), ("residency_core", root.join("../residency-core/src"))]
    {
        let declared = public_errors(&dir);
        let listed = listed_of(krate);
        assert!(declared.len() > 10, "{krate}: the scan found the error types ({declared:?})");
        assert_eq!(
            declared, listed,
            "{krate}: the public error types declared (left) are the ones `all_error_types!` lists \
             (right); list a new one there, with its `ResidencyError` impl"
        );
    }
}

#[test]
fn vulkan_results_and_nested_errors_have_the_class_of_the_failure_inside() {
    use vk::Result as R;
    let device = ErrorClass::OutOfMemory(Exhausted::Device);
    for (result, class) in [
        (R::ERROR_OUT_OF_DEVICE_MEMORY, device),
        (R::ERROR_OUT_OF_HOST_MEMORY, ErrorClass::OutOfMemory(Exhausted::Host)),
        (R::ERROR_OUT_OF_POOL_MEMORY, ErrorClass::OutOfMemory(Exhausted::Capacity)),
        (R::ERROR_TOO_MANY_OBJECTS, ErrorClass::OutOfMemory(Exhausted::Capacity)),
        (R::ERROR_DEVICE_LOST, ErrorClass::DeviceLost),
        (R::ERROR_FORMAT_NOT_SUPPORTED, ErrorClass::Unsupported),
        (R::ERROR_EXTENSION_NOT_PRESENT, ErrorClass::Unsupported),
        (R::ERROR_INITIALIZATION_FAILED, ErrorClass::Unexpected),
    ] {
        let e = VulkanError::from_vk("vkTest", result);
        assert_eq!(e.class(), class, "{result:?} through from_vk");
        assert_eq!(VulkanError::Vk { call: "vkTest", result }.class(), class, "{result:?} as Vk");
        assert_eq!(ErrorClass::of_vk(result), class, "{result:?}");
    }
    let lost = VulkanError::DeviceLost { call: "vkQueueSubmit" };
    assert!(lost.is_device_lost() && !lost.is_out_of_memory());
    // Beyond the heap the driver would say out of memory; beyond maxBufferSize the call is invalid.
    let too_large =
        |limit_name| MemoryError::TooLarge { name: "x".into(), requested: 2, limit_name, limit: 1 };
    assert_eq!(too_large("memory heap size").class(), device);
    assert_eq!(too_large("maxMemoryAllocationSize").class(), device);
    assert_eq!(too_large("maxBufferSize").class(), ErrorClass::Refused);
    // Nested: the class of the error inside, however deep.
    let nested = StreamError::Sparse(SparseError::Memory(MemoryError::Vulkan(lost)));
    assert_eq!(nested.class(), ErrorClass::DeviceLost);
    let exhausted = PoolError::PoolExhausted { requested: 4, free: 0, budget: 2 };
    let streaming = StreamError::Streaming(StreamingError::Commit {
        image: ImageId(1),
        source: CommitError::Pool(exhausted),
    });
    assert_eq!(streaming.class(), ErrorClass::OutOfMemory(Exhausted::Budget));
    let over = MemoryError::OutOfBudget { name: "x".into(), heap: 0, requested: 2, available: 1, budget: 1 };
    let multi = MultiDeviceError::Failed {
        device: residency_core::device_mask::DeviceIndex::new(0).unwrap(),
        source: over,
    };
    assert_eq!(multi.class(), ErrorClass::OutOfMemory(Exhausted::Budget));
    assert_eq!(UploadError::RingBusy.class(), ErrorClass::OutOfMemory(Exhausted::Capacity));
    let priming = StreamError::Priming {
        name: "t".into(),
        source: SourceError::Read { source_name: "t".into(), reason: "disk".into() },
    };
    assert_eq!(priming.class(), ErrorClass::Unexpected);
    assert_eq!(StreamError::FrameOrder("end_frame before begin_frame").class(), ErrorClass::Refused);
}

/// An error's shape: its type and the variant path of its `Debug` form
/// (`SparseError::Memory(OutOfBudget`).
fn shape<E: std::fmt::Debug>(e: &E) -> String {
    let ty = std::any::type_name::<E>().rsplit("::").next().unwrap_or_default();
    let variants: String =
        format!("{e:?}").chars().take_while(|c| !matches!(c, ' ' | '{' | ')' | '"')).collect();
    format!("{ty}::{variants}")
}

/// Checks that `result` failed out of memory of `class`; returns its shape.
fn out_of_memory<T, E: ResidencyError + std::fmt::Debug>(
    what: &str,
    result: Result<T, E>,
    class: Exhausted,
) -> String {
    let Err(e) = result else { panic!("{what}: succeeded") };
    assert!(e.is_out_of_memory(), "{what}: {e} ({e:?}) is out of memory");
    assert_eq!(e.class(), ErrorClass::OutOfMemory(class), "{what}: {e}");
    assert!(!e.is_device_lost(), "{what}");
    shape(&e)
}

/// The device-local heap's index and size.
fn device_local_heap(device: &Device) -> (u32, u64) {
    let memory = device.memory_properties();
    let ty = memory.types.iter().find(|t| t.flags.device_local).expect("a device-local type");
    (ty.heap_index, memory.heaps[ty.heap_index as usize].size)
}

#[test]
fn out_of_memory_is_out_of_memory_in_each_shape() {
    with_gpu(|set| {
        let device = Arc::clone(&set.devices()[0]);
        let mut shapes = BTreeSet::new();
        let (heap, heap_size) = device_local_heap(&device);
        let all_types = (1u32 << device.memory_properties().types.len()) - 1;

        // A request beyond its heap: refused before the driver sees it, as the driver would.
        let beyond = vk::MemoryRequirements {
            size: heap_size + (64 << 20),
            alignment: 256,
            memory_type_bits: all_types,
        };
        for desc in
            [AllocationDesc::new("beyond the heap"), AllocationDesc::new("beyond the heap").dedicated()]
        {
            shapes.insert(out_of_memory(
                "beyond the heap",
                device.allocate_memory(&beyond, &desc),
                Exhausted::Device,
            ));
        }

        // Over the heap's budget: a placed buffer, a committed one, a pool that cannot grow.
        let pool = BufferPool::new(
            Arc::clone(&device),
            BufferPoolDesc::new("oom pool", BufferPoolUsage::Unknown)
                .with_memory(MemoryIntent::DeviceLocal)
                .with_page_size(1 << 20),
        )
        .unwrap();
        let filler =
            pool.init_buffer(&BufferInit::new("filler", 512 << 10).with_usage(BufferUsage::STORAGE)).unwrap();
        device.ledger().set_heap_limit(heap, Some(device.ledger().heap_bytes(heap) + (256 << 10)));
        // Larger than any free range of the heaps the device keeps for reuse (placed buffers go
        // there first, with no new memory to count against the budget).
        let big = BufferDesc::new("over budget", 512 << 20, BufferUsage::STORAGE);
        shapes.insert(out_of_memory("placed over budget", device.create_buffer(&big), Exhausted::Budget));
        shapes.insert(out_of_memory(
            "committed over budget",
            device.create_buffer(&big.clone().committed()),
            Exhausted::Budget,
        ));
        let grow = BufferInit::new("pool cannot grow", 768 << 10).with_usage(BufferUsage::STORAGE);
        shapes.insert(out_of_memory("a pool that cannot grow", pool.init_buffer(&grow), Exhausted::Budget));
        device.ledger().set_heap_limit(heap, None);
        pool.free_buffer(filler).unwrap();
        drop(pool);

        // A full linear pool.
        let linear = LinearPool::new(Arc::clone(&device), LinearPoolDesc::new("oom ring", 64 << 10)).unwrap();
        let usage = BufferUsage::STORAGE;
        let first = linear.create_buffer(&BufferInit::new("first", 40 << 10).with_usage(usage)).unwrap();
        let second = linear.create_buffer(&BufferInit::new("second", 40 << 10).with_usage(usage));
        shapes.insert(out_of_memory("a full linear pool", second, Exhausted::Capacity));
        drop(first);
        drop(linear);

        // A sparse tile pool over its budget (2 tiles for a 4-tile mip).
        let tiles = SparseTilePool::new(
            Arc::clone(&device),
            TilePoolDesc::default().with_name("oom tiles").with_tiles_per_heap(2).with_budget_tiles(2),
        )
        .unwrap();
        let desc = SparseImageDesc::new_2d(Format::R8G8B8A8Unorm, 256, 256).with_mip_levels(1);
        let mut image = SparseImage::new(&tiles, "oom sparse", &desc, false).unwrap();
        let whole = TexelRegion { offset: [0, 0, 0], extent: [256, 256, 1] };
        shapes.insert(out_of_memory(
            "sparse tile budget",
            image.commit_region(&tiles, 0, 0, whole),
            Exhausted::Budget,
        ));
        drop(image);
        drop(tiles);

        // A software tile pool over its budget.
        let software = SoftwareTilePool::new(
            Arc::clone(&device),
            Format::R8G8B8A8Unorm,
            DEFAULT_BORDER,
            TilePoolDesc::default().with_name("oom software").with_tiles_per_heap(2).with_budget_tiles(2),
        )
        .unwrap();
        let mut soft = SoftwareImage::new(&software, "oom software image", &desc).unwrap();
        shapes.insert(out_of_memory(
            "software tile budget",
            soft.commit_region(&software, 0, 0, whole),
            Exhausted::Budget,
        ));
        drop(soft);
        drop(software);

        // VK_ERROR_OUT_OF_DEVICE_MEMORY from the driver (injected through the ledger): an
        // allocation, a resource creation, a staging ring, a sparse image, a read-back.
        let injected =
            |site: FaultSite| device.ledger().inject_fault(site, 0, InjectedFault::OutOfDeviceMemory);
        injected(FaultSite::AllocateMemory);
        // Without its fallback chain (which would take the next memory type or tier).
        shapes.insert(out_of_memory(
            "vkAllocateMemory",
            device.create_buffer(&BufferDesc::new("injected", 4096, usage).committed().without_fallback()),
            Exhausted::Device,
        ));
        injected(FaultSite::CreateResource);
        shapes.insert(out_of_memory(
            "vkCreateBuffer",
            device.create_buffer(&BufferDesc::new("injected", 4096, usage)),
            Exhausted::Device,
        ));
        injected(FaultSite::AllocateMemory);
        shapes.insert(out_of_memory(
            "staging ring",
            Uploader::new(&device, "injected", 256 << 10),
            Exhausted::Device,
        ));
        let tiles = SparseTilePool::new(
            Arc::clone(&device),
            TilePoolDesc::default().with_name("oom injected").with_tiles_per_heap(2),
        )
        .unwrap();
        injected(FaultSite::CreateResource);
        shapes.insert(out_of_memory(
            "vkCreateImage (sparse)",
            SparseImage::new(&tiles, "injected", &desc, false),
            Exhausted::Device,
        ));
        let mut image = SparseImage::new(&tiles, "oom bind", &desc, false).unwrap();
        image.commit_region(&tiles, 0, 0, whole).unwrap();
        injected(FaultSite::AllocateMemory);
        shapes.insert(out_of_memory("a tile heap", tiles.flush_binds(&mut [&mut image]), Exhausted::Device));
        // A failed flush rolls the commits back: commit again.
        image.commit_region(&tiles, 0, 0, whole).unwrap();
        injected(FaultSite::BindSparse);
        shapes.insert(out_of_memory(
            "vkQueueBindSparse",
            tiles.flush_binds(&mut [&mut image]),
            Exhausted::Device,
        ));
        image.commit_region(&tiles, 0, 0, whole).unwrap();
        tiles.flush_binds(&mut [&mut image]).unwrap();
        let buffer =
            device.create_buffer(&BufferDesc::new("read me", 4096, usage | BufferUsage::COPY_SRC)).unwrap();
        injected(FaultSite::CreateResource);
        shapes.insert(out_of_memory("a read-back", device.read_back(&buffer, 0, 4096), Exhausted::Device));
        device.ledger().clear_faults();
        drop(buffer);
        drop(image);
        drop(tiles);
        println!("out of memory, {} shapes, each is_out_of_memory(): {shapes:?}", shapes.len());
        assert!(shapes.len() >= 8, "{shapes:?}");
    });
}

const SIDE: u32 = 512;
const FRAMES: usize = 3;

/// A procedural RGBA8 source of 128² tiles.
fn source(name: &str) -> Arc<dyn TileSource> {
    let desc = VtDesc::new(Format::R8G8B8A8Unorm, SIDE, SIDE, 128, 128);
    Arc::new(FnSource::new(name, desc, move |mip, x, y| {
        let (w, h) = desc.tile_extent(mip, x, y).expect("in the grid");
        Ok(vec![(mip * 7 + x * 3 + y) as u8; (w * h * 4) as usize])
    }))
}

fn streamer_desc(path: ResidencyPath) -> StreamerDesc {
    StreamerDesc::default()
        .with_name("oom streamer")
        .with_path(path)
        .with_frames_in_flight(2)
        .with_budget_tiles(16)
        .with_workers(1)
}

/// Every error a streamer user got in one run: where, its class, its shape.
type Seen = Vec<(&'static str, ErrorClass, String)>;

fn note(seen: &mut Seen, at: &'static str, e: &(impl ResidencyError + std::fmt::Debug)) {
    seen.push((at, e.class(), shape(e)));
}

/// A streamer made, a texture added and primed, [`FRAMES`] frames that want four mip-0 tiles
/// (a renderer's empty submission each), the texture removed. Stops at the first error, which
/// it notes (a failed submission is abandoned, `abandon_frame`'s error noted too).
fn streamer_run(device: &Arc<Device>, path: ResidencyPath, seen: &mut Seen) {
    let mut streamer = match Streamer::new(device, streamer_desc(path)) {
        Ok(s) => s,
        Err(e) => return note(seen, "Streamer::new", &e),
    };
    let texture = match streamer.add_texture("oom vt", source("oom vt")) {
        Ok(t) => t,
        Err(e) => return note(seen, "add_texture", &e),
    };
    let commands = match CommandContext::new(device, "oom frames") {
        Ok(c) => c,
        Err(e) => return note(seen, "CommandContext::new", &e),
    };
    let layout = streamer.manager().residency(texture.id()).unwrap().layout().clone();
    let wanted: Vec<TileKey> = (0..4)
        .map(|x| {
            TileKey::tile(
                texture.id(),
                layout.tile_index(TileCoord { layer: 0, mip: 0, x, y: 1, z: 0 }).unwrap(),
            )
        })
        .collect();
    for _ in 0..FRAMES {
        let bindings = match streamer.begin_frame() {
            Ok(b) => b,
            Err(e) => return note(seen, "begin_frame", &e),
        };
        let records = common::miss_records(&bindings, &wanted);
        drop(bindings);
        if let Some(records) = records {
            streamer.write_cpu_feedback(&records).unwrap();
        }
        let bindings = streamer.frame_bindings().unwrap();
        let submitted = commands.submit(&[], |rec| bindings.record(rec, |_| ()).unwrap());
        drop(bindings);
        match submitted {
            Ok(submission) => {
                if let Err(e) = streamer.end_frame(submission.gpu_use()) {
                    return note(seen, "end_frame", &e);
                }
            }
            Err(e) => {
                note(seen, "the renderer's submission", &e);
                if let Err(e) = streamer.abandon_frame() {
                    note(seen, "abandon_frame", &e);
                }
                return;
            }
        }
        streamer.wait_for_loads();
    }
    if let Err(e) = streamer.remove_texture(texture) {
        note(seen, "remove_texture", &e);
    }
}

const SITES: [FaultSite; 5] = [
    FaultSite::AllocateMemory,
    FaultSite::CreateResource,
    FaultSite::BindSparse,
    FaultSite::QueueSubmit,
    FaultSite::Wait,
];

fn site_calls(device: &Device) -> Vec<u64> {
    SITES.iter().map(|&s| device.ledger().site_calls(s)).collect()
}

#[test]
fn a_streamer_user_gets_out_of_memory_in_several_shapes_each_is_out_of_memory() {
    with_gpu(|set| {
        let device = Arc::clone(&set.devices()[0]);
        let mut shapes = BTreeSet::new();
        for path in [ResidencyPath::Hardware, ResidencyPath::Software] {
            let mut seen = Seen::new();
            let before = site_calls(&device);
            streamer_run(&device, path, &mut seen);
            assert!(seen.is_empty(), "{path:?}: a clean run: {seen:?}");
            let calls: Vec<u64> = site_calls(&device).iter().zip(&before).map(|(a, b)| a - b).collect();
            let (mut runs, mut fired) = (0, 0);
            for (&site, &n) in SITES.iter().zip(&calls) {
                for k in 0..n {
                    let was = device.ledger().faults_fired(site);
                    device.ledger().inject_fault(site, k, InjectedFault::OutOfDeviceMemory);
                    streamer_run(&device, path, &mut seen);
                    device.ledger().clear_faults();
                    runs += 1;
                    fired += device.ledger().faults_fired(site) - was;
                }
            }
            // A heap's budget too small for the streamer's memory.
            let (heap, _) = device_local_heap(&device);
            let errors = seen.len();
            device.ledger().set_heap_limit(heap, Some(device.ledger().heap_bytes(heap) + (64 << 10)));
            streamer_run(&device, path, &mut seen);
            device.ledger().set_heap_limit(heap, None);
            assert!(seen.len() > errors, "{path:?}: the streamer failed over budget");
            for (at, class, shape) in &seen {
                assert!(class.is_out_of_memory(), "{path:?}: {at} failed with {shape} of class {class:?}");
                shapes.insert(format!("{at}: {shape}"));
            }
            println!(
                "{path:?}: {runs} runs ({calls:?} calls per site), {fired} faults fired, {} errors",
                seen.len()
            );
        }
        println!(
            "a streamer user's out of memory, {} shapes, each is_out_of_memory(): {shapes:#?}",
            shapes.len()
        );
        assert!(shapes.len() >= 5, "{shapes:?}");
    });
}

#[test]
fn a_lost_device_is_device_lost_through_the_streamer() {
    with_gpu(|set| {
        let device = Arc::clone(&set.devices()[0]);
        for site in [FaultSite::BindSparse, FaultSite::QueueSubmit, FaultSite::Wait] {
            let mut seen = Seen::new();
            device.ledger().inject_fault(site, 0, InjectedFault::DeviceLost);
            streamer_run(&device, ResidencyPath::Hardware, &mut seen);
            device.ledger().clear_faults();
            assert!(!seen.is_empty(), "{site:?}: the loss reached the streamer's user");
            for (at, class, shape) in &seen {
                assert_eq!(*class, ErrorClass::DeviceLost, "{site:?}: {at} failed with {shape}");
            }
        }
    });
}
