//! Property tests of the barrier batcher against an independent model of Vulkan's execution and
//! memory dependencies.
//!
//! The model keeps, per unit (64 bytes of a buffer, or one subresource of an image), every past
//! access with the set of stages ordered after it, whether its writes are available, and the
//! (stages, accesses) they are visible to. Barriers extend those sets as the specification's
//! dependency chains do: a barrier applies to an access when the access's stages are all in its
//! first scope, or when its first scope meets the stages already ordered after the access; it
//! makes a write available only when the write's stage and access are in its first scopes; it
//! makes available writes visible to its second scope. A layout transition is a write between
//! the two halves of its barrier, automatically available. A change of queue between batches is
//! a semaphore: a full dependency. Every new access is checked against every earlier access it
//! conflicts with (either writes): it must be ordered after it, and see its writes.

use proptest::prelude::*;
use residency_core::device_mask::DeviceIndex;
use residency_core::sync::{
    AccessFlags, BarrierBatch, GlobalBarrierRule, PipelineStages, QueueFamily, Region, ResourceId, Sharing,
    StateTracker, SyncError, TrackedBufferDesc, TrackedImageDesc, TrackerOptions, Use,
};

const DEV: DeviceIndex = DeviceIndex::DEFAULT;
const UNIT: u64 = 64;
const BUF_UNITS: u32 = 4;
const MIPS: u32 = 2;
const LAYERS: u32 = 3;
/// Units: buffer A 0..4 (exclusive), buffer B 4..8 (concurrent), image 8..14 (exclusive).
const UNITS: usize = 14;
const TRANS_S: u64 = 1 << 63;
const TRANS_A: u64 = 1 << 63;

const VS_FS: PipelineStages = PipelineStages::VERTEX_SHADER.union(PipelineStages::FRAGMENT_SHADER);
const BUFFER_USES: [Use; 12] = [
    Use::ComputeStorageWrite,
    Use::ComputeStorageRead,
    Use::ComputeStorageReadWrite,
    Use::IndexRead,
    Use::VertexRead,
    Use::IndirectRead,
    Use::UniformRead(VS_FS),
    Use::SampledRead(PipelineStages::COMPUTE_SHADER),
    Use::TransferSrc,
    Use::TransferDst,
    Use::HostRead,
    Use::AccelerationStructureScratch,
];
const IMAGE_USES: [Use; 7] = [
    Use::ComputeStorageWrite,
    Use::ComputeStorageRead,
    Use::SampledRead(PipelineStages::FRAGMENT_SHADER),
    Use::SampledRead(PipelineStages::COMPUTE_SHADER),
    Use::TransferSrc,
    Use::TransferDst,
    Use::ColorAttachmentWrite,
];

fn id(resource: u8) -> ResourceId {
    ResourceId::new(u64::from(resource) + 1)
}

fn exclusive(resource: u8) -> bool {
    resource != 1
}

#[derive(Clone, Debug)]
struct DeclSpec {
    resource: u8,
    range: [u32; 4],
    use_idx: usize,
    discard: bool,
}

#[derive(Clone, Debug)]
struct BatchSpec {
    queue: u32,
    decls: Vec<DeclSpec>,
}

impl DeclSpec {
    fn use_(&self) -> Use {
        if self.resource == 2 {
            IMAGE_USES[self.use_idx % IMAGE_USES.len()]
        } else {
            BUFFER_USES[self.use_idx % BUFFER_USES.len()]
        }
    }

    /// The region and the units it covers, in order.
    fn region(&self) -> (Region, Vec<usize>) {
        let [a, b, c, d] = self.range;
        if self.resource < 2 {
            let start = a % BUF_UNITS;
            let len = 1 + b % (BUF_UNITS - start);
            let base = self.resource as usize * BUF_UNITS as usize;
            let units = (start..start + len).map(|u| base + u as usize).collect();
            (Region::bytes(u64::from(start) * UNIT, u64::from(len) * UNIT), units)
        } else {
            let base_mip = a % MIPS;
            let mips = 1 + b % (MIPS - base_mip);
            let base_layer = c % LAYERS;
            let layers = 1 + d % (LAYERS - base_layer);
            let mut units = Vec::new();
            for m in base_mip..base_mip + mips {
                for l in base_layer..base_layer + layers {
                    units.push(8 + (m * LAYERS + l) as usize);
                }
            }
            (Region::subresources(base_mip, mips, base_layer, layers), units)
        }
    }
}

fn decl_strategy() -> impl Strategy<Value = DeclSpec> {
    (0u8..3, prop::array::uniform4(0u32..8), 0usize..64, prop::bool::weighted(0.12))
        .prop_map(|(resource, range, use_idx, discard)| DeclSpec { resource, range, use_idx, discard })
}

fn batch_strategy() -> impl Strategy<Value = BatchSpec> {
    (prop::bool::weighted(0.25), prop::collection::vec(decl_strategy(), 1..4))
        .prop_map(|(other_queue, decls)| BatchSpec { queue: u32::from(other_queue), decls })
}

#[derive(Clone, Debug)]
struct Past {
    stages: u64,
    write_access: u64,
    write: bool,
    ordered_after: u64,
    available: bool,
    visible: Vec<(u64, u64)>,
}

#[derive(Clone, Copy, Debug)]
struct Bar {
    src_s: u64,
    src_a: u64,
    dst_s: u64,
    dst_a: u64,
}

impl Bar {
    fn new(src: residency_core::sync::Scope, dst: residency_core::sync::Scope) -> Bar {
        Bar {
            src_s: src.stages.expand().bits(),
            src_a: src.access.expand().bits(),
            dst_s: dst.stages.expand().bits(),
            dst_a: dst.access.expand().bits(),
        }
    }

    const FULL: Bar = Bar { src_s: u64::MAX, src_a: u64::MAX, dst_s: u64::MAX, dst_a: u64::MAX };
}

/// Applies the barriers of one command (all at once) to a unit's past accesses.
fn apply_group(past: &mut [Past], group: &[Bar]) {
    for x in past.iter_mut() {
        let (mut w, mut avail, mut vis) = (0, false, Vec::new());
        for b in group {
            let first = x.stages != 0 && x.stages & !b.src_s == 0;
            let chained = b.src_s & x.ordered_after != 0;
            if !(first || chained) {
                continue;
            }
            w |= b.dst_s;
            let available = x.available || (x.write && first && x.write_access & !b.src_a == 0);
            if available {
                avail = true;
                if x.write {
                    vis.push((b.dst_s, b.dst_a));
                }
            }
        }
        x.ordered_after |= w;
        x.available |= avail;
        x.visible.extend(vis);
    }
}

/// Checks a new access against every earlier one it conflicts with.
fn check(past: &[Past], stages: u64, access: u64, write: bool, what: &str) -> Result<(), String> {
    for (i, x) in past.iter().enumerate() {
        if !(x.write || write) {
            continue;
        }
        if stages & !x.ordered_after != 0 {
            return Err(format!("{what}: not ordered after earlier access #{i} {x:?}"));
        }
        if x.write {
            if !x.available {
                return Err(format!("{what}: earlier write #{i} not available {x:?}"));
            }
            if stages == TRANS_S {
                continue; // available writes are visible to layout transitions
            }
            let mut bits = stages;
            while bits != 0 {
                let s = bits & bits.wrapping_neg();
                bits &= bits - 1;
                let seen = x.visible.iter().filter(|(vs, _)| vs & s != 0).fold(0, |acc, (_, a)| acc | a);
                if access & !seen != 0 {
                    return Err(format!("{what}: earlier write #{i} not visible to stage {s:#x} {x:?}"));
                }
            }
        }
    }
    Ok(())
}

fn units_of_buffer_barrier(resource: ResourceId, offset: u64, size: u64) -> Vec<usize> {
    let r = resource.get() as usize - 1;
    assert!(r < 2, "buffer barrier on a buffer");
    assert!(offset % UNIT == 0 && size % UNIT == 0, "barriers fall on unit boundaries here");
    (offset / UNIT..(offset + size) / UNIT).map(|u| r * BUF_UNITS as usize + u as usize).collect()
}

/// A barrier without a layout transition, with the units it covers.
type Plain = (Vec<usize>, Bar);
/// The two halves of a layout-transition barrier, with the units it covers.
type Transition = (Vec<usize>, Bar, Bar);

/// Plain barriers, transition halves, and the units each covers, for the destination queue.
fn model_barriers(batch: &BarrierBatch) -> (Vec<Plain>, Vec<Transition>) {
    let mut plain = Vec::new();
    let mut transitions = Vec::new();
    for m in &batch.memory {
        plain.push(((0..UNITS).collect(), Bar::new(m.src, m.dst)));
    }
    for b in &batch.buffers {
        plain.push((units_of_buffer_barrier(b.resource, b.offset, b.size), Bar::new(b.src, b.dst)));
    }
    for i in &batch.images {
        let mut units = Vec::new();
        for m in i.range.base_mip..i.range.base_mip + i.range.mip_count {
            for l in i.range.base_layer..i.range.base_layer + i.range.layer_count {
                units.push(8 + (m * LAYERS + l) as usize);
            }
        }
        let bar = Bar::new(i.src, i.dst);
        if i.old_layout != i.new_layout {
            let first = Bar { dst_s: TRANS_S, dst_a: TRANS_A, ..bar };
            let second = Bar { src_s: TRANS_S, src_a: 0, ..bar };
            transitions.push((units, first, second));
        } else {
            plain.push((units, bar));
        }
    }
    (plain, transitions)
}

fn run_sequence(rule: GlobalBarrierRule, batches: &[BatchSpec]) -> Result<(), String> {
    let mut t = StateTracker::new(TrackerOptions::default().with_global_barriers(rule));
    let buffer =
        |name: &str, sharing| TrackedBufferDesc::new(name, u64::from(BUF_UNITS) * UNIT).with_sharing(sharing);
    t.register_buffer(DEV, id(0), buffer("a", Sharing::Exclusive)).unwrap();
    t.register_buffer(DEV, id(1), buffer("b", Sharing::Concurrent)).unwrap();
    t.register_image(DEV, id(2), TrackedImageDesc::new("img", MIPS, LAYERS)).unwrap();
    let mut past: Vec<Vec<Past>> = vec![Vec::new(); UNITS];
    let mut owner: Vec<Option<u32>> = vec![None; UNITS];
    let mut last_queue = None;
    for (n, spec) in batches.iter().enumerate() {
        let queue = QueueFamily::new(spec.queue);
        let mut batch = t.batch(DEV, queue);
        let mut accepted = Vec::new();
        for d in &spec.decls {
            let (region, units) = d.region();
            let r = if d.discard {
                batch.declare_discard(id(d.resource), region, d.use_())
            } else {
                batch.declare(id(d.resource), region, d.use_())
            };
            match r {
                Ok(_) => accepted.push((d, units)),
                Err(SyncError::ConflictingLayouts { .. }) => {}
                Err(e) => return Err(format!("unexpected error {e}")),
            }
        }
        // Merged use per unit.
        let mut merged: Vec<Option<(u64, u64, bool, bool)>> = vec![None; UNITS];
        for (d, units) in &accepted {
            let info = d.use_().info();
            for &u in units {
                let (s, a, w, disc) = merged[u].unwrap_or((0, 0, false, true));
                merged[u] = Some((
                    s | info.stages.expand().bits(),
                    a | info.access.expand().bits(),
                    w || info.writes,
                    disc && d.discard,
                ));
            }
        }
        // The naive per-use count: one barrier per use per run of units with the same ownership
        // change (two for a transfer), one per subresource for images.
        let transfer_from = |u: usize, resource: u8| -> Option<u32> {
            let discard = merged[u].map(|m| m.3).unwrap_or(false);
            match owner[u] {
                Some(o) if exclusive(resource) && !discard && o != spec.queue => Some(o),
                _ => None,
            }
        };
        let mut naive = 0;
        for (d, units) in &accepted {
            if d.resource == 2 {
                naive +=
                    units.iter().map(|&u| if transfer_from(u, 2).is_some() { 2 } else { 1 }).sum::<usize>();
            } else {
                let keys: Vec<Option<u32>> = units.iter().map(|&u| transfer_from(u, d.resource)).collect();
                let mut runs: Vec<Option<u32>> = keys.clone();
                runs.dedup();
                naive += runs.iter().map(|k| if k.is_some() { 2 } else { 1 }).sum::<usize>();
            }
        }
        let flush = batch.flush();
        if flush.barrier_count() > naive {
            return Err(format!(
                "batch {n}: {} barriers, naive per-use approach {naive}: {flush:#?}",
                flush.barrier_count()
            ));
        }
        // Queue change: the caller's semaphore is a full dependency.
        if last_queue.is_some_and(|q| q != spec.queue) {
            for p in past.iter_mut() {
                apply_group(p, &[Bar::FULL]);
            }
        }
        last_queue = Some(spec.queue);
        let (plain, transitions) = model_barriers(&flush.barriers);
        for (u, p) in past.iter_mut().enumerate() {
            let mut group: Vec<Bar> =
                plain.iter().filter(|(us, _)| us.contains(&u)).map(|(_, b)| *b).collect();
            let mine: Vec<&Transition> = transitions.iter().filter(|(us, _, _)| us.contains(&u)).collect();
            if mine.len() > 1 {
                return Err(format!(
                    "batch {n}: unit {u} has {} layout transitions in one command",
                    mine.len()
                ));
            }
            group.extend(mine.iter().map(|(_, first, _)| *first));
            apply_group(p, &group);
            if let Some((_, _, second)) = mine.first() {
                check(p, TRANS_S, TRANS_A, true, &format!("batch {n}: layout transition of unit {u}"))?;
                p.push(Past {
                    stages: TRANS_S,
                    write_access: TRANS_A,
                    write: true,
                    ordered_after: 0,
                    available: true,
                    visible: Vec::new(),
                });
                apply_group(p, &[*second]);
            }
        }
        for (u, m) in merged.iter().enumerate() {
            let Some((stages, access, write, _)) = *m else { continue };
            check(&past[u], stages, access, write, &format!("batch {n}: unit {u}"))?;
            let write_access = access & AccessFlags::MEMORY_WRITE.expand().bits();
            past[u].push(Past {
                stages,
                write_access,
                write,
                ordered_after: 0,
                available: false,
                visible: Vec::new(),
            });
            let resource = if u < 4 {
                0
            } else if u < 8 {
                1
            } else {
                2
            };
            if exclusive(resource) {
                owner[u] = Some(spec.queue);
            }
        }
    }
    Ok(())
}

fn rule_strategy() -> impl Strategy<Value = GlobalBarrierRule> {
    prop_oneof![
        Just(GlobalBarrierRule::Never),
        Just(GlobalBarrierRule::SameScope),
        (1usize..4).prop_map(GlobalBarrierRule::AtLeast),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn no_unsynchronised_hazard_and_never_more_than_per_use(
        rule in rule_strategy(),
        batches in prop::collection::vec(batch_strategy(), 1..14),
    ) {
        if let Err(e) = run_sequence(rule, &batches) {
            return Err(TestCaseError::fail(e));
        }
    }
}

/// The checker is known to work: a missing barrier is caught.
#[test]
fn checker_catches_a_missing_barrier() {
    let mut past = vec![Past {
        stages: PipelineStages::COMPUTE_SHADER.bits(),
        write_access: AccessFlags::SHADER_STORAGE_WRITE.bits(),
        write: true,
        ordered_after: 0,
        available: false,
        visible: Vec::new(),
    }];
    let index = (PipelineStages::INDEX_INPUT.bits(), AccessFlags::INDEX_READ.bits());
    assert!(check(&past, index.0, index.1, false, "read").is_err(), "RAW without a barrier");
    // An execution-only barrier orders but does not make the write visible.
    let exec_only =
        Bar { src_s: PipelineStages::COMPUTE_SHADER.bits(), src_a: 0, dst_s: index.0, dst_a: index.1 };
    apply_group(&mut past, &[exec_only]);
    assert!(check(&past, index.0, index.1, false, "read").is_err(), "RAW without availability");
    let full = Bar { src_a: AccessFlags::SHADER_STORAGE_WRITE.bits(), ..exec_only };
    apply_group(&mut past, &[full]);
    assert!(check(&past, index.0, index.1, false, "read").is_ok());
    // A read in a stage the barrier did not name is still a hazard.
    let uniform = (PipelineStages::FRAGMENT_SHADER.bits(), AccessFlags::UNIFORM_READ.bits());
    assert!(check(&past, uniform.0, uniform.1, false, "read").is_err());
}
