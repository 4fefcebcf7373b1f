//! Merging: buffer ranges and image subresource ranges split where their uses differ, merge back
//! when they agree, and barriers cover adjacent pieces with one structure; the global-barrier
//! rule replaces buffer barriers by memory barriers as documented.

use residency_core::device_mask::DeviceIndex;
use residency_core::sync::{
    Flush, GlobalBarrierRule, ImageLayout, MemoryBarrier, PipelineStages, QueueFamily, Region, ResourceId,
    Scope, StateTracker, SubresourceRange, TrackedBufferDesc, TrackedImageDesc, TrackerOptions, Use,
};

const DEV: DeviceIndex = DeviceIndex::DEFAULT;
const Q: QueueFamily = QueueFamily::new(0);
const FS: PipelineStages = PipelineStages::FRAGMENT_SHADER;

fn tracker(rule: GlobalBarrierRule) -> StateTracker {
    StateTracker::new(TrackerOptions::default().with_global_barriers(rule))
}

fn flush(t: &mut StateTracker, uses: &[(ResourceId, Region, Use)]) -> Flush {
    let mut batch = t.batch(DEV, Q);
    for &(id, region, use_) in uses {
        batch.declare(id, region, use_).unwrap();
    }
    batch.flush()
}

#[test]
fn adjacent_byte_ranges_with_the_same_transition_become_one_barrier() {
    let mut t = tracker(GlobalBarrierRule::Never);
    let b = ResourceId::new(1);
    t.register_buffer(DEV, b, TrackedBufferDesc::new("b", 1024)).unwrap();
    flush(&mut t, &[(b, Region::Whole, Use::ComputeStorageWrite)]);
    let f = flush(
        &mut t,
        &[(b, Region::bytes(0, 256), Use::IndexRead), (b, Region::bytes(256, 256), Use::IndexRead)],
    );
    assert_eq!(f.barriers.buffers.len(), 1);
    assert_eq!((f.barriers.buffers[0].offset, f.barriers.buffers[0].size), (0, 512));
}

#[test]
fn byte_ranges_with_a_gap_stay_apart() {
    let mut t = tracker(GlobalBarrierRule::Never);
    let b = ResourceId::new(1);
    t.register_buffer(DEV, b, TrackedBufferDesc::new("b", 1024)).unwrap();
    flush(&mut t, &[(b, Region::Whole, Use::ComputeStorageWrite)]);
    let f = flush(
        &mut t,
        &[(b, Region::bytes(0, 256), Use::IndexRead), (b, Region::bytes(512, 256), Use::IndexRead)],
    );
    let ranges: Vec<(u64, u64)> = f.barriers.buffers.iter().map(|b| (b.offset, b.size)).collect();
    assert_eq!(ranges, [(0, 256), (512, 256)]);
}

#[test]
fn buffer_ranges_split_as_uses_differ_and_merge_when_they_agree() {
    let mut t = tracker(GlobalBarrierRule::Never);
    let b = ResourceId::new(1);
    t.register_buffer(DEV, b, TrackedBufferDesc::new("b", 1024)).unwrap();
    flush(&mut t, &[(b, Region::bytes(0, 512), Use::ComputeStorageWrite)]);
    assert_eq!(t.states(DEV, b).unwrap().len(), 2, "written half and untouched half");
    flush(&mut t, &[(b, Region::bytes(512, 512), Use::ComputeStorageWrite)]);
    assert_eq!(t.states(DEV, b).unwrap().len(), 1, "both halves written the same way: one piece again");
    // One declaration over pieces with different histories is still one barrier.
    flush(&mut t, &[(b, Region::bytes(256, 256), Use::IndexRead)]);
    let f = flush(&mut t, &[(b, Region::Whole, Use::TransferDst)]);
    assert_eq!(f.barriers.buffers.len(), 1);
    let barrier = f.barriers.buffers[0];
    assert_eq!((barrier.offset, barrier.size), (0, 1024));
    assert_eq!(barrier.src.stages, PipelineStages::COMPUTE_SHADER | PipelineStages::INDEX_INPUT);
}

#[test]
fn whole_buffer_tracking_widens_every_use() {
    let mut t = tracker(GlobalBarrierRule::Never);
    let b = ResourceId::new(1);
    let desc = TrackedBufferDesc::new("b", 1024).with_tracking(residency_core::sync::BufferTracking::Whole);
    t.register_buffer(DEV, b, desc).unwrap();
    flush(&mut t, &[(b, Region::bytes(0, 16), Use::ComputeStorageWrite)]);
    let f = flush(&mut t, &[(b, Region::bytes(512, 16), Use::IndexRead)]);
    assert_eq!((f.barriers.buffers[0].offset, f.barriers.buffers[0].size), (0, 1024));
}

#[test]
fn subresource_ranges_merge_across_mips_and_layers() {
    let mut t = tracker(GlobalBarrierRule::Never);
    let img = ResourceId::new(1);
    t.register_image(DEV, img, TrackedImageDesc::new("img", 4, 6)).unwrap();
    flush(&mut t, &[(img, Region::Whole, Use::TransferDst)]);
    // Two declarations, mips 0-1 and 2-3: one barrier over all of it.
    let f = flush(
        &mut t,
        &[
            (img, Region::subresources(0, 2, 0, 6), Use::SampledRead(FS)),
            (img, Region::subresources(2, 2, 0, 6), Use::SampledRead(FS)),
        ],
    );
    assert_eq!(f.barriers.images.len(), 1);
    assert_eq!(f.barriers.images[0].range, SubresourceRange::all(4, 6));
}

#[test]
fn subresources_in_different_layouts_split_and_merge_back() {
    let mut t = tracker(GlobalBarrierRule::Never);
    let img = ResourceId::new(1);
    t.register_image(DEV, img, TrackedImageDesc::new("img", 4, 6)).unwrap();
    flush(&mut t, &[(img, Region::Whole, Use::TransferDst)]);
    // Mip 0 goes to sampling; a mip chain generation would blit from it.
    flush(&mut t, &[(img, Region::subresources(0, 1, 0, 6), Use::SampledRead(FS))]);
    let layouts: Vec<_> = t.states(DEV, img).unwrap().into_iter().map(|(_, s)| s.layout.unwrap()).collect();
    assert_eq!(layouts[0], ImageLayout::SHADER_READ_ONLY_OPTIMAL);
    assert!(layouts[1..].iter().all(|&l| l == ImageLayout::TRANSFER_DST_OPTIMAL));
    // The whole image as a colour attachment: two old layouts, so two barriers, each one range.
    let f = flush(&mut t, &[(img, Region::Whole, Use::ColorAttachmentWrite)]);
    let mut got: Vec<(ImageLayout, SubresourceRange)> =
        f.barriers.images.iter().map(|b| (b.old_layout, b.range)).collect();
    got.sort();
    assert_eq!(
        got,
        [
            (
                ImageLayout::SHADER_READ_ONLY_OPTIMAL,
                SubresourceRange { base_mip: 0, mip_count: 1, base_layer: 0, layer_count: 6 }
            ),
            (
                ImageLayout::TRANSFER_DST_OPTIMAL,
                SubresourceRange { base_mip: 1, mip_count: 3, base_layer: 0, layer_count: 6 }
            ),
        ]
    );
    assert!(f.barriers.images.iter().all(|b| b.new_layout == ImageLayout::COLOR_ATTACHMENT_OPTIMAL));
}

#[test]
fn an_irregular_subresource_set_becomes_few_rectangles() {
    let mut t = tracker(GlobalBarrierRule::Never);
    let img = ResourceId::new(1);
    t.register_image(DEV, img, TrackedImageDesc::new("img", 3, 4)).unwrap();
    flush(&mut t, &[(img, Region::Whole, Use::TransferDst)]);
    // An L shape: layers 0-3 of mip 0, layers 0-1 of mips 1 and 2.
    let f = flush(
        &mut t,
        &[
            (img, Region::subresources(0, 1, 0, 4), Use::SampledRead(FS)),
            (img, Region::subresources(1, 2, 0, 2), Use::SampledRead(FS)),
        ],
    );
    let ranges: Vec<SubresourceRange> = f.barriers.images.iter().map(|b| b.range).collect();
    assert_eq!(
        ranges,
        [
            SubresourceRange { base_mip: 0, mip_count: 1, base_layer: 0, layer_count: 4 },
            SubresourceRange { base_mip: 1, mip_count: 2, base_layer: 0, layer_count: 2 },
        ]
    );
}

fn two_buffers_written(rule: GlobalBarrierRule, second_use: Use) -> Flush {
    let mut t = tracker(rule);
    let (a, b) = (ResourceId::new(1), ResourceId::new(2));
    t.register_buffer(DEV, a, TrackedBufferDesc::new("a", 256)).unwrap();
    t.register_buffer(DEV, b, TrackedBufferDesc::new("b", 256)).unwrap();
    flush(
        &mut t,
        &[(a, Region::Whole, Use::ComputeStorageWrite), (b, Region::Whole, Use::ComputeStorageWrite)],
    );
    flush(&mut t, &[(a, Region::Whole, Use::IndexRead), (b, Region::Whole, second_use)])
}

#[test]
fn global_rule_never_keeps_buffer_barriers() {
    let f = two_buffers_written(GlobalBarrierRule::Never, Use::IndexRead);
    assert_eq!((f.barriers.buffers.len(), f.barriers.memory.len()), (2, 0));
}

#[test]
fn global_rule_same_scope_collapses_identical_transitions_only() {
    let f = two_buffers_written(GlobalBarrierRule::SameScope, Use::IndexRead);
    assert_eq!((f.barriers.buffers.len(), f.barriers.memory.len()), (0, 1));
    assert_eq!(f.barriers.memory[0].dst.stages, PipelineStages::INDEX_INPUT);
    let f = two_buffers_written(GlobalBarrierRule::SameScope, Use::VertexRead);
    assert_eq!((f.barriers.buffers.len(), f.barriers.memory.len()), (2, 0), "different scopes stay precise");
}

#[test]
fn global_rule_at_least_unites_scopes() {
    let f = two_buffers_written(GlobalBarrierRule::AtLeast(2), Use::VertexRead);
    assert_eq!(f.barriers.buffers.len(), 0);
    let MemoryBarrier { src, dst } = f.barriers.memory[0];
    assert_eq!(src.stages, PipelineStages::COMPUTE_SHADER);
    assert_eq!(dst.stages, PipelineStages::INDEX_INPUT | PipelineStages::VERTEX_ATTRIBUTE_INPUT);
    let f = two_buffers_written(GlobalBarrierRule::AtLeast(3), Use::VertexRead);
    assert_eq!((f.barriers.buffers.len(), f.barriers.memory.len()), (2, 0), "below the threshold");
    assert_ne!(dst, Scope::NONE);
}
