//! Table-driven tests of the barrier each hazard kind needs: RAW, WAR, WAW, RAR (none), layout
//! transitions, queue-family ownership transfer pairs and discards. Each case runs a sequence of
//! batches and checks the barriers of the last flush, written out the way a reviewer reads them.

use residency_core::device_mask::DeviceIndex;
use residency_core::sync::{
    AccessFlags, Flush, GlobalBarrierRule, PipelineStages, QueueFamily, Region, ResourceId, Scope, Sharing,
    StateTracker, SyncError, TrackedBufferDesc, TrackedImageDesc, TrackerOptions, Use,
};

const DEV: DeviceIndex = DeviceIndex::DEFAULT;
const BUF: ResourceId = ResourceId::new(1);
const IMG: ResourceId = ResourceId::new(2);
const GFX: u32 = 0;
const XFER: u32 = 1;

fn scope(s: Scope) -> String {
    let stages = if s.stages.is_empty() { vec!["none"] } else { s.stages.names() };
    let access = if s.access.is_empty() { vec!["none"] } else { s.access.names() };
    format!("{}/{}", stages.join("|"), access.join("|"))
}

fn queues(src: QueueFamily, dst: QueueFamily) -> String {
    if src.is_ignored() && dst.is_ignored() {
        String::new()
    } else {
        format!(" q{}->q{}", src.index(), dst.index())
    }
}

/// One line per barrier: `buffer 0+256 src -> dst`, `image m0+1 l0+1 OLD->NEW src -> dst`,
/// `memory src -> dst`; release barriers are prefixed with `release qN:`.
fn lines(flush: &Flush) -> Vec<String> {
    let mut out = Vec::new();
    let mut push = |prefix: String, batch: &residency_core::sync::BarrierBatch| {
        for m in &batch.memory {
            out.push(format!("{prefix}memory {} -> {}", scope(m.src), scope(m.dst)));
        }
        for b in &batch.buffers {
            out.push(format!(
                "{prefix}buffer {}+{} {} -> {}{}",
                b.offset,
                b.size,
                scope(b.src),
                scope(b.dst),
                queues(b.src_queue_family, b.dst_queue_family)
            ));
        }
        for i in &batch.images {
            out.push(format!(
                "{prefix}image m{}+{} l{}+{} {}->{} {} -> {}{}",
                i.range.base_mip,
                i.range.mip_count,
                i.range.base_layer,
                i.range.layer_count,
                i.old_layout,
                i.new_layout,
                scope(i.src),
                scope(i.dst),
                queues(i.src_queue_family, i.dst_queue_family)
            ));
        }
    };
    push(String::new(), &flush.barriers);
    for r in &flush.releases {
        push(format!("release q{}: ", r.queue_family.index()), &r.barriers);
    }
    out
}

#[derive(Clone, Copy)]
struct Step {
    queue: u32,
    use_: Use,
    discard: bool,
}

const fn on(queue: u32, use_: Use) -> Step {
    Step { queue, use_, discard: false }
}

const fn discard(queue: u32, use_: Use) -> Step {
    Step { queue, use_, discard: true }
}

struct Case {
    name: &'static str,
    image: bool,
    sharing: Sharing,
    steps: &'static [Step],
    last_flush: &'static [&'static str],
}

fn tracker(sharing: Sharing) -> StateTracker {
    let mut t = StateTracker::new(TrackerOptions::default().with_global_barriers(GlobalBarrierRule::Never));
    t.register_buffer(DEV, BUF, TrackedBufferDesc::new("buf", 256).with_sharing(sharing)).unwrap();
    t.register_image(DEV, IMG, TrackedImageDesc::new("img", 1, 1).with_sharing(sharing)).unwrap();
    t
}

fn run(t: &mut StateTracker, image: bool, steps: &[Step]) -> Flush {
    let mut last = None;
    for step in steps {
        let mut batch = t.batch(DEV, QueueFamily::new(step.queue));
        let id = if image { IMG } else { BUF };
        if step.discard {
            batch.declare_discard(id, Region::Whole, step.use_).unwrap();
        } else {
            batch.declare(id, Region::Whole, step.use_).unwrap();
        }
        last = Some(batch.flush());
    }
    last.expect("at least one step")
}

const FS: PipelineStages = PipelineStages::FRAGMENT_SHADER;

const CASES: &[Case] = &[
    Case {
        name: "first use of a buffer needs no barrier",
        image: false,
        sharing: Sharing::Exclusive,
        steps: &[on(GFX, Use::ComputeStorageWrite)],
        last_flush: &[],
    },
    Case {
        name: "RAW: compute write then index read waits and makes the write visible",
        image: false,
        sharing: Sharing::Exclusive,
        steps: &[on(GFX, Use::ComputeStorageWrite), on(GFX, Use::IndexRead)],
        last_flush: &["buffer 0+256 compute_shader/shader_storage_write -> index_input/index_read"],
    },
    Case {
        name: "WAR: a write after a read waits for the read stage only (no access to make available)",
        image: false,
        sharing: Sharing::Exclusive,
        steps: &[on(GFX, Use::VertexRead), on(GFX, Use::TransferDst)],
        last_flush: &["buffer 0+256 vertex_attribute_input/none -> all_transfer/transfer_write"],
    },
    Case {
        name: "WAR: a write waits for every read since the last write, not only the latest",
        image: false,
        sharing: Sharing::Exclusive,
        steps: &[
            on(GFX, Use::ComputeStorageWrite),
            on(GFX, Use::IndexRead),
            on(GFX, Use::VertexRead),
            on(GFX, Use::ComputeStorageWrite),
        ],
        last_flush: &[
            "buffer 0+256 compute_shader|index_input|vertex_attribute_input/shader_storage_write -> compute_shader/shader_storage_write",
        ],
    },
    Case {
        name: "WAW: a write after a write is an execution and memory dependency",
        image: false,
        sharing: Sharing::Exclusive,
        steps: &[on(GFX, Use::TransferDst), on(GFX, Use::ComputeStorageWrite)],
        last_flush: &["buffer 0+256 all_transfer/transfer_write -> compute_shader/shader_storage_write"],
    },
    Case {
        name: "RAR: a second read by the same stage sees the write already",
        image: false,
        sharing: Sharing::Exclusive,
        steps: &[on(GFX, Use::ComputeStorageWrite), on(GFX, Use::IndexRead), on(GFX, Use::IndexRead)],
        last_flush: &[],
    },
    Case {
        name: "RAR: reads with no write before them need nothing",
        image: false,
        sharing: Sharing::Exclusive,
        steps: &[on(GFX, Use::IndexRead), on(GFX, Use::UniformRead(FS))],
        last_flush: &[],
    },
    Case {
        name: "RAW to a new stage: a read in a stage that has not seen the write still waits",
        image: false,
        sharing: Sharing::Exclusive,
        steps: &[on(GFX, Use::ComputeStorageWrite), on(GFX, Use::IndexRead), on(GFX, Use::UniformRead(FS))],
        last_flush: &["buffer 0+256 compute_shader/shader_storage_write -> fragment_shader/uniform_read"],
    },
    Case {
        name: "layout transition: the first use of an image transitions from UNDEFINED",
        image: true,
        sharing: Sharing::Exclusive,
        steps: &[on(GFX, Use::TransferDst)],
        last_flush: &["image m0+1 l0+1 UNDEFINED->TRANSFER_DST_OPTIMAL none/none -> all_transfer/transfer_write"],
    },
    Case {
        name: "layout transition: upload then sample",
        image: true,
        sharing: Sharing::Exclusive,
        steps: &[on(GFX, Use::TransferDst), on(GFX, Use::SampledRead(FS))],
        last_flush: &[
            "image m0+1 l0+1 TRANSFER_DST_OPTIMAL->SHADER_READ_ONLY_OPTIMAL all_transfer/transfer_write -> fragment_shader/shader_sampled_read",
        ],
    },
    Case {
        name: "layout transition: always emitted, even between two reads",
        image: true,
        sharing: Sharing::Exclusive,
        steps: &[on(GFX, Use::TransferDst), on(GFX, Use::SampledRead(FS)), on(GFX, Use::TransferSrc)],
        last_flush: &[
            "image m0+1 l0+1 SHADER_READ_ONLY_OPTIMAL->TRANSFER_SRC_OPTIMAL fragment_shader/none -> all_transfer/transfer_read",
        ],
    },
    Case {
        name: "RAR on an image in the same layout emits nothing",
        image: true,
        sharing: Sharing::Exclusive,
        steps: &[on(GFX, Use::TransferDst), on(GFX, Use::SampledRead(FS)), on(GFX, Use::SampledRead(FS))],
        last_flush: &[],
    },
    Case {
        name: "queue transfer: transfer-queue upload read on graphics is a release/acquire pair",
        image: false,
        sharing: Sharing::Exclusive,
        steps: &[on(XFER, Use::TransferDst), on(GFX, Use::VertexRead)],
        last_flush: &[
            "buffer 0+256 none/none -> vertex_attribute_input/vertex_attribute_read q1->q0",
            "release q1: buffer 0+256 all_transfer/transfer_write -> none/none q1->q0",
        ],
    },
    Case {
        name: "queue transfer of an image carries the layout transition in both halves",
        image: true,
        sharing: Sharing::Exclusive,
        steps: &[on(XFER, Use::TransferDst), on(GFX, Use::SampledRead(FS))],
        last_flush: &[
            "image m0+1 l0+1 TRANSFER_DST_OPTIMAL->SHADER_READ_ONLY_OPTIMAL none/none -> fragment_shader/shader_sampled_read q1->q0",
            "release q1: image m0+1 l0+1 TRANSFER_DST_OPTIMAL->SHADER_READ_ONLY_OPTIMAL all_transfer/transfer_write -> none/none q1->q0",
        ],
    },
    Case {
        name: "concurrent sharing never transfers ownership",
        image: false,
        sharing: Sharing::Concurrent,
        steps: &[on(XFER, Use::TransferDst), on(GFX, Use::VertexRead)],
        last_flush: &["buffer 0+256 all_transfer/transfer_write -> vertex_attribute_input/vertex_attribute_read"],
    },
    Case {
        name: "discard: an image whose contents do not matter transitions from UNDEFINED",
        image: true,
        sharing: Sharing::Exclusive,
        steps: &[on(GFX, Use::TransferDst), on(GFX, Use::SampledRead(FS)), discard(GFX, Use::ColorAttachmentWrite)],
        last_flush: &[
            "image m0+1 l0+1 UNDEFINED->COLOR_ATTACHMENT_OPTIMAL fragment_shader/none -> color_attachment_output/color_attachment_read|color_attachment_write",
        ],
    },
    Case {
        name: "discard: even in the layout the image is already in",
        image: true,
        sharing: Sharing::Exclusive,
        steps: &[on(GFX, Use::ColorAttachmentWrite), discard(GFX, Use::ColorAttachmentWrite)],
        last_flush: &[
            "image m0+1 l0+1 UNDEFINED->COLOR_ATTACHMENT_OPTIMAL color_attachment_output/color_attachment_write -> color_attachment_output/color_attachment_read|color_attachment_write",
        ],
    },
    Case {
        name: "discard on another queue needs no ownership transfer",
        image: true,
        sharing: Sharing::Exclusive,
        steps: &[on(XFER, Use::TransferDst), discard(GFX, Use::ComputeStorageWrite)],
        last_flush: &[
            "image m0+1 l0+1 UNDEFINED->GENERAL all_transfer/transfer_write -> compute_shader/shader_storage_write",
        ],
    },
];

#[test]
fn hazard_table() {
    let mut failures = Vec::new();
    for case in CASES {
        let mut t = tracker(case.sharing);
        let got = lines(&run(&mut t, case.image, case.steps));
        if got != case.last_flush {
            failures
                .push(format!("{}:\n  expected {:#?}\n  got      {:#?}", case.name, case.last_flush, got));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn uses_in_one_batch_merge_into_one_barrier() {
    let mut t = tracker(Sharing::Exclusive);
    run(&mut t, false, &[on(GFX, Use::ComputeStorageWrite)]);
    let mut batch = t.batch(DEV, QueueFamily::new(GFX));
    batch.declare(BUF, Region::Whole, Use::IndexRead).unwrap();
    batch.declare(BUF, Region::Whole, Use::VertexRead).unwrap();
    assert_eq!(
        lines(&batch.flush()),
        [
            "buffer 0+256 compute_shader/shader_storage_write -> index_input|vertex_attribute_input/index_read|vertex_attribute_read"
        ]
    );
}

#[test]
fn state_reports_the_union_of_reads_since_the_last_write() {
    let mut t = tracker(Sharing::Exclusive);
    run(
        &mut t,
        false,
        &[on(GFX, Use::ComputeStorageWrite), on(GFX, Use::IndexRead), on(GFX, Use::VertexRead)],
    );
    let states = t.states(DEV, BUF).unwrap();
    assert_eq!(states.len(), 1);
    let (region, state) = states[0];
    assert_eq!(region, Region::bytes(0, 256));
    assert_eq!(
        state.stages,
        PipelineStages::COMPUTE_SHADER | PipelineStages::INDEX_INPUT | PipelineStages::VERTEX_ATTRIBUTE_INPUT
    );
    assert_eq!(
        state.last_write,
        Scope::new(PipelineStages::COMPUTE_SHADER, AccessFlags::SHADER_STORAGE_WRITE)
    );
    assert_eq!(state.queue_family, QueueFamily::new(GFX));
    assert_eq!(state.layout, None);
}

#[test]
fn states_are_per_device() {
    let mut t = tracker(Sharing::Exclusive);
    let dev1 = DeviceIndex::new(1).unwrap();
    t.register_buffer(dev1, BUF, TrackedBufferDesc::new("buf on device 1", 256)).unwrap();
    run(&mut t, false, &[on(GFX, Use::ComputeStorageWrite)]);
    // Device 1's instance was never written: reading it needs nothing.
    let mut batch = t.batch(dev1, QueueFamily::new(GFX));
    batch.declare(BUF, Region::Whole, Use::IndexRead).unwrap();
    let flush = batch.flush();
    assert_eq!(flush.device, dev1);
    assert!(flush.barriers.is_empty());
    // Device 0's instance was: the same read there waits.
    let mut batch = t.batch(DEV, QueueFamily::new(GFX));
    batch.declare(BUF, Region::Whole, Use::IndexRead).unwrap();
    assert_eq!(batch.flush().barrier_count(), 1);
    let dev2 = DeviceIndex::new(2).unwrap();
    let mut batch = t.batch(dev2, QueueFamily::new(GFX));
    assert_eq!(
        batch.declare(BUF, Region::Whole, Use::IndexRead).unwrap_err(),
        SyncError::UnknownResource { device: dev2, resource: BUF }
    );
}

#[test]
fn aliasing_a_resource_after_another_waits_for_the_previous_occupant() {
    let mut t = tracker(Sharing::Exclusive);
    run(&mut t, false, &[on(GFX, Use::ComputeStorageWrite), on(GFX, Use::IndexRead)]);
    // The image now occupies the buffer's memory.
    t.alias_after(DEV, IMG, &[BUF]).unwrap();
    let mut batch = t.batch(DEV, QueueFamily::new(GFX));
    batch.declare_discard(IMG, Region::Whole, Use::ColorAttachmentWrite).unwrap();
    assert_eq!(
        lines(&batch.flush()),
        [
            "image m0+1 l0+1 UNDEFINED->COLOR_ATTACHMENT_OPTIMAL compute_shader|index_input/shader_storage_write -> color_attachment_output/color_attachment_read|color_attachment_write"
        ]
    );
    assert!(matches!(t.alias_after(DEV, IMG, &[]), Err(SyncError::NoPredecessor { .. })));
}

#[test]
fn misuse_is_a_typed_error_and_changes_nothing() {
    let mut t = tracker(Sharing::Exclusive);
    let q = QueueFamily::new(GFX);
    let mut batch = t.batch(DEV, q);
    assert!(matches!(
        batch.declare(BUF, Region::bytes(200, 100), Use::IndexRead),
        Err(SyncError::BytesOutOfBounds { offset: 200, size: 100, buffer_size: 256, .. })
    ));
    assert!(matches!(
        batch.declare(BUF, Region::bytes(0, 0), Use::IndexRead),
        Err(SyncError::BytesOutOfBounds { .. })
    ));
    assert!(matches!(
        batch.declare(BUF, Region::subresources(0, 1, 0, 1), Use::IndexRead),
        Err(SyncError::RegionKind { .. })
    ));
    assert!(matches!(
        batch.declare(IMG, Region::Whole, Use::IndexRead),
        Err(SyncError::NotAnImageUse { .. })
    ));
    assert!(matches!(
        batch.declare(IMG, Region::subresources(0, 2, 0, 1), Use::TransferDst),
        Err(SyncError::SubresourcesOutOfBounds { mip_levels: 1, array_layers: 1, .. })
    ));
    batch.declare(IMG, Region::Whole, Use::TransferDst).unwrap();
    let err = batch.declare(IMG, Region::Whole, Use::SampledRead(FS)).unwrap_err();
    assert!(matches!(err, SyncError::ConflictingLayouts { .. }), "{err}");
    assert!(err.to_string().contains("TRANSFER_DST_OPTIMAL"), "{err}");
    drop(batch);
    assert_eq!(
        t.register_buffer(DEV, BUF, TrackedBufferDesc::new("again", 16)).unwrap_err(),
        SyncError::AlreadyRegistered { device: DEV, resource: BUF, name: "buf".into() }
    );
    assert!(matches!(
        t.register_buffer(DEV, ResourceId::new(9), TrackedBufferDesc::new("empty", 0)),
        Err(SyncError::ZeroSize { .. })
    ));
    t.unregister(DEV, BUF).unwrap();
    assert!(!t.contains(DEV, BUF));
}
