//! The seed's scenario, per placed buffer against per page: a culling compute pass writes an
//! index buffer that shares a page with a neighbour; a graphics pass draws from it while another
//! compute pass writes the neighbour, which a later compute pass reads.
//!
//! Per-buffer tracking emits exactly two barriers, each naming one buffer: the index buffer's
//! RAW before the draw and the neighbour's RAW before its reader. Per-page tracking (the legacy
//! behaviour of known-flags pools) emits a third barrier that only exists because the two
//! buffers share a page: the neighbour's first write has to wait for the draw's index fetch,
//! which serialises the compute pass after the draw; and every barrier names the whole page.

use residency_core::device_mask::DeviceIndex;
use residency_core::sync::measure::{compare_tracking, TrackingBenchDesc};
use residency_core::sync::{
    AccessFlags, BufferBarrier, GlobalBarrierRule, PagedBufferDesc, PipelineStages, QueueFamily, Region,
    ResourceId, Scope, StateTracker, TrackedBufferDesc, TrackerOptions, Use,
};

const DEV: DeviceIndex = DeviceIndex::DEFAULT;
const Q: QueueFamily = QueueFamily::new(0);
const INDICES: ResourceId = ResourceId::new(1);
const NEIGHBOUR: ResourceId = ResourceId::new(2);
const PAGE: ResourceId = ResourceId::new(100);
const SIZE: u64 = 64 << 10;

/// The frame: (pass name, buffer, use).
const FRAME: [(&str, ResourceId, Use); 4] = [
    ("cull (compute)", INDICES, Use::ComputeStorageWrite),
    ("draw (graphics)", INDICES, Use::IndexRead),
    ("simulate (compute)", NEIGHBOUR, Use::ComputeStorageWrite),
    ("consume (compute)", NEIGHBOUR, Use::ComputeStorageRead),
];

fn run(mut t: StateTracker) -> Vec<(&'static str, Vec<BufferBarrier>)> {
    FRAME
        .iter()
        .map(|&(pass, id, use_)| {
            let mut batch = t.batch(DEV, Q);
            batch.declare(id, Region::Whole, use_).unwrap();
            let flush = batch.flush();
            assert!(flush.barriers.memory.is_empty() && flush.releases.is_empty());
            (pass, flush.barriers.buffers)
        })
        .collect()
}

fn options() -> TrackerOptions {
    TrackerOptions::default().with_global_barriers(GlobalBarrierRule::Never)
}

fn per_buffer() -> StateTracker {
    let mut t = StateTracker::new(options());
    t.register_buffer(DEV, INDICES, TrackedBufferDesc::new("indices", SIZE)).unwrap();
    t.register_buffer(DEV, NEIGHBOUR, TrackedBufferDesc::new("neighbour", SIZE)).unwrap();
    t
}

fn per_page() -> StateTracker {
    let mut t = StateTracker::new(options());
    t.register_page(DEV, PAGE, TrackedBufferDesc::new("BufferPage00", 2 * SIZE)).unwrap();
    let paged = |name: &str, offset| PagedBufferDesc { name: name.into(), page: PAGE, offset, size: SIZE };
    t.register_paged_buffer(DEV, INDICES, paged("indices", 0)).unwrap();
    t.register_paged_buffer(DEV, NEIGHBOUR, paged("neighbour", SIZE)).unwrap();
    t
}

const COMPUTE_WRITE: Scope = Scope::new(PipelineStages::COMPUTE_SHADER, AccessFlags::SHADER_STORAGE_WRITE);

#[test]
fn per_buffer_tracking_emits_two_precise_barriers() {
    let passes = run(per_buffer());
    let all: Vec<(&str, BufferBarrier)> =
        passes.iter().flat_map(|(p, bs)| bs.iter().map(move |b| (*p, *b))).collect();
    assert_eq!(all.len(), 2, "{all:#?}");
    let (pass, draw) = all[0];
    assert_eq!(pass, "draw (graphics)");
    assert_eq!((draw.resource, draw.offset, draw.size), (INDICES, 0, SIZE));
    assert_eq!(draw.src, COMPUTE_WRITE);
    assert_eq!(draw.dst, Scope::new(PipelineStages::INDEX_INPUT, AccessFlags::INDEX_READ));
    let (pass, consume) = all[1];
    assert_eq!(pass, "consume (compute)");
    assert_eq!((consume.resource, consume.offset, consume.size), (NEIGHBOUR, 0, SIZE));
    assert_eq!(consume.src, COMPUTE_WRITE);
    // The neighbour's first write waits for nothing: it may overlap the draw.
    assert!(passes[2].1.is_empty());
}

#[test]
fn per_page_tracking_over_synchronises() {
    let passes = run(per_page());
    let counts: Vec<usize> = passes.iter().map(|(_, bs)| bs.len()).collect();
    assert_eq!(counts, [0, 1, 1, 1], "{passes:#?}");
    for (_, bs) in &passes {
        for b in bs {
            assert_eq!(
                (b.resource, b.offset, b.size),
                (PAGE, 0, 2 * SIZE),
                "page barriers name the whole page"
            );
        }
    }
    // The false dependency: the neighbour's write waits for the draw's index fetch (and the cull).
    let simulate = passes[2].1[0];
    assert!(simulate.src.stages.contains(PipelineStages::INDEX_INPUT));
    assert_eq!(simulate.dst, COMPUTE_WRITE);
    let per_buffer_total: usize = run(per_buffer()).iter().map(|(_, bs)| bs.len()).sum();
    let per_page_total: usize = passes.iter().map(|(_, bs)| bs.len()).sum();
    assert_eq!((per_buffer_total, per_page_total), (2, 3));
}

#[test]
fn random_uses_show_the_over_synchronisation_of_pages() {
    let report = compare_tracking(TrackingBenchDesc {
        buffers: 512,
        buffers_per_page: 16,
        frames: 2,
        passes_per_frame: 10,
        uses_per_pass: 32,
        ..TrackingBenchDesc::default()
    });
    println!("{report:#?}");
    assert_eq!(report.per_buffer.false_dependencies_per_frame, 0.0);
    assert!(report.per_page.false_dependencies_per_frame > 0.0);
    assert!(report.per_page.bytes_covered_per_frame > report.per_buffer.bytes_covered_per_frame);
}
