//! Multi-device occlusion and pipeline-statistics queries on two logical devices (around draws
//! inside a render pass, a whole pass and a dispatch), compared with a single-device run: counts read on the host per device and copied into a buffer view per
//! device; misuse refused with nothing submitted.

#[path = "common/app.rs"]
mod app;

use residency_core::device_mask::{DeviceIndex, DeviceMask};
use residency_core::format::Format;
use residency_core::usage::{BufferPoolUsage, BufferUsage, ImageUsage};
use residency_vulkan::ash::vk;
use residency_vulkan::multi::queries::{DrawQuery, MultiQueryPool, QueryCopyItem};
use residency_vulkan::multi::work::{
    BufferView, DispatchItem, DrawItem, MultiBinding, MultiComputeProgram, MultiGraphicsProgram,
    MultiSubmitter, RenderItem, WorkError, WorkItem,
};
use residency_vulkan::multi::{
    MultiBuffer, MultiBufferPool, MultiDevice, MultiDeviceError, MultiImage, MultiUploader,
};
use residency_vulkan::queries::{QueryError, QueryKind};
use residency_vulkan::shaders;
use residency_vulkan::testing::with_gpu;
use residency_vulkan::{BufferInit, BufferPoolDesc, DeviceSet, ImageDesc};

fn d(i: u32) -> DeviceIndex {
    DeviceIndex::new(i).unwrap()
}

const SIDE: u32 = 64;
/// `quads.vert`'s vertex: `vec2 position`, `vec4 color`.
const STRIDE: u32 = 24;

/// Two triangles covering the clip-space rectangle `lo`..`hi`.
fn rect(lo: [f32; 2], hi: [f32; 2]) -> Vec<u8> {
    let v = |x: f32, y: f32| [x, y, 1.0, 1.0, 1.0, 1.0];
    let c = [v(lo[0], lo[1]), v(hi[0], lo[1]), v(lo[0], hi[1]), v(hi[0], hi[1])];
    [0, 1, 2, 2, 1, 3].iter().flat_map(|&i| c[i]).flat_map(f32::to_le_bytes).collect()
}

/// A 32 × 32 quad (1024 samples of the 64 × 64 target) and a 16 × 32 one (512 samples) beside it.
const FIRST: u64 = 1024;
const SECOND: u64 = 512;
const QUAD_BYTES: u64 = 6 * STRIDE as u64;

/// What one run counted on one device: the precise counts of each draw, the non-precise count
/// of the whole pass, the compute invocations, and the precise counts as copied into a buffer.
#[derive(Debug, PartialEq)]
struct Counts {
    draws: Vec<u64>,
    pass: u64,
    compute: u64,
    draw_statistics: Vec<u64>,
    copied: Vec<u64>,
}

/// Draws both quads with a query around each (inside the pass), a non-precise query around a
/// whole pass, a statistics query around a compute dispatch of 5 groups of 64, and copies the
/// draw counts into a buffer view, on every device of `mask`; returns each device's counts.
fn run(set: &DeviceSet, mask: DeviceMask) -> Vec<(DeviceIndex, Counts)> {
    let pool = MultiBufferPool::new(
        set,
        mask,
        &BufferPoolDesc::new("queries", BufferPoolUsage::Unknown).with_page_size(1 << 20),
    )
    .unwrap();
    let uploader = MultiUploader::new(set, mask, 1 << 20).unwrap();
    let geometry = pool
        .init_buffer(
            &BufferInit::new("query quads", 2 * QUAD_BYTES)
                .with_usage(BufferUsage::VERTEX | BufferUsage::COPY_DST),
            DeviceMask::ALL,
        )
        .unwrap();
    let mut bytes = rect([-1.0, -1.0], [0.0, 0.0]);
    bytes.extend(rect([0.5, 0.0], [1.0, 1.0]));
    uploader.broadcast(&geometry, 0, &bytes).unwrap();
    uploader.wait_idle().unwrap();
    let results = pool
        .init_buffer(
            &BufferInit::new("query results", 64)
                .with_usage(BufferUsage::STORAGE | BufferUsage::COPY_DST | BufferUsage::COPY_SRC),
            DeviceMask::ALL,
        )
        .unwrap();
    let target = MultiImage::create(
        set,
        mask,
        &ImageDesc::new_2d("query target", Format::R8G8B8A8Unorm, SIDE, SIDE, ImageUsage::COLOR_ATTACHMENT),
    )
    .unwrap();
    let attributes = [
        residency_vulkan::graphics::VertexAttribute {
            location: 0,
            format: vk::Format::R32G32_SFLOAT,
            offset: 0,
        },
        residency_vulkan::graphics::VertexAttribute {
            location: 1,
            format: vk::Format::R32G32B32A32_SFLOAT,
            offset: 8,
        },
    ];
    let program = MultiGraphicsProgram::new(
        set,
        mask,
        "query quads",
        &shaders::QUADS_VERT,
        &shaders::QUADS_FRAG,
        STRIDE,
        &attributes,
        vk::Format::R8G8B8A8_UNORM,
        1,
    )
    .unwrap();
    let first =
        DrawItem::new(&program, vec![], Some(BufferView::range(&geometry, 0, QUAD_BYTES).unwrap()), 6, 1);
    let second = DrawItem::new(
        &program,
        vec![],
        Some(BufferView::range(&geometry, QUAD_BYTES, QUAD_BYTES).unwrap()),
        6,
        1,
    );
    let draws = [&first, &second];
    let render =
        RenderItem { program: &program, target: &target, extent: [SIDE; 2], clear: [0.0; 4], draws: &draws };

    let precise =
        MultiQueryPool::new(set, mask, "precise", QueryKind::Occlusion { precise: true }, 2).unwrap();
    let loose = MultiQueryPool::new(set, mask, "loose", QueryKind::Occlusion { precise: false }, 1).unwrap();
    let stats = MultiQueryPool::new(
        set,
        mask,
        "statistics",
        QueryKind::PipelineStatistics(vk::QueryPipelineStatisticFlags::COMPUTE_SHADER_INVOCATIONS),
        1,
    )
    .unwrap();
    let draw_stats = MultiQueryPool::new(
        set,
        mask,
        "draw statistics",
        QueryKind::PipelineStatistics(
            vk::QueryPipelineStatisticFlags::INPUT_ASSEMBLY_VERTICES
                | vk::QueryPipelineStatisticFlags::INPUT_ASSEMBLY_PRIMITIVES,
        ),
        1,
    )
    .unwrap();
    let compute = MultiComputeProgram::new(set, mask, "query fill", &shaders::FILL, 1).unwrap();
    let push: Vec<u8> = [16u32, 7].iter().flat_map(|w| w.to_le_bytes()).collect();
    let dispatch = DispatchItem::new(
        &compute,
        vec![MultiBinding::Buffer(BufferView::range(&results, 0, 64).unwrap())],
        &push,
        [5, 1, 1],
    );
    let per_draw = [
        DrawQuery { pool: &precise, index: 0, draws: 0..1 },
        DrawQuery { pool: &precise, index: 1, draws: 1..2 },
        DrawQuery { pool: &draw_stats, index: 0, draws: 0..2 },
    ];
    let copy =
        QueryCopyItem { pool: &precise, queries: 0..2, dst: BufferView::range(&results, 0, 16).unwrap() };
    let submitter = MultiSubmitter::new(set, mask).unwrap();
    // Queries of a render pass: overlapping ones of one type, one query twice in a pass, a
    // draw range past the draws or empty, and one inside an active query of its type are
    // refused before anything is recorded.
    let q = |index, draws| DrawQuery { pool: &precise, index, draws };
    let first_device = precise.mask().iter().next().unwrap();
    for queries in
        [vec![q(0, 0..2), q(1, 1..2)], vec![q(0, 0..1), q(0, 1..2)], vec![q(0, 1..3)], vec![q(0, 1..1)]]
    {
        let err = submitter.submit(first_device, &[WorkItem::QueriedRender(render, &queries)]).unwrap_err();
        assert!(
            matches!(err, WorkError::Query(QueryError::AlreadyActive { .. } | QueryError::Draws { .. })),
            "{err}"
        );
    }
    let err = submitter
        .submit(
            first_device,
            &[
                WorkItem::BeginQuery(&loose, 0),
                WorkItem::QueriedRender(render, &[q(0, 0..1)]),
                WorkItem::EndQuery(&loose, 0),
            ],
        )
        .unwrap_err();
    assert!(matches!(err, WorkError::Query(QueryError::AlreadyActive { .. })), "{err}");
    let mut out = Vec::new();
    for (device, _) in precise.iter() {
        let items = [
            WorkItem::QueriedRender(render, &per_draw),
            WorkItem::BeginQuery(&loose, 0),
            WorkItem::Render(render),
            WorkItem::EndQuery(&loose, 0),
            WorkItem::BeginQuery(&stats, 0),
            WorkItem::Dispatch(&dispatch),
            WorkItem::EndQuery(&stats, 0),
            WorkItem::Barrier,
            WorkItem::CopyQueryResults(copy.clone()),
        ];
        let submission = submitter.submit(device, &items).unwrap();
        submitter.wait(device, submission).unwrap();
        let dev = set.device(device).unwrap();
        let copied = dev.read_back(results.instance(device).unwrap(), 0, 16).unwrap();
        out.push((
            device,
            Counts {
                draws: precise.results(device, 0..2).unwrap(),
                pass: loose.results(device, 0..1).unwrap()[0],
                compute: stats.results(device, 0..1).unwrap()[0],
                draw_statistics: draw_stats.results(device, 0..1).unwrap(),
                copied: copied.chunks_exact(8).map(|c| u64::from_le_bytes(c.try_into().unwrap())).collect(),
            },
        ));
    }
    submitter.destroy();
    drop((first, second, dispatch));
    drop((program, compute, target));
    pool.free_buffer(geometry).unwrap();
    pool.free_buffer(results).unwrap();
    uploader.destroy().unwrap();
    out
}

#[test]
fn occlusion_and_statistics_queries_count_on_both_devices_as_on_one() {
    with_gpu(|set| {
        let features = set.devices()[0].features();
        assert!(
            features.occlusion_query_precise && features.pipeline_statistics_query,
            "lavapipe and the H200 have precise occlusion and pipeline statistics queries"
        );
        let single = run(set, d(0).mask());
        let both = run(set, DeviceMask::from_bits(0b11));
        assert_eq!(both.len(), 2);
        eprintln!("one device: {single:?}\ntwo devices: {both:?}");
        let expected = Counts {
            draws: vec![FIRST, SECOND],
            pass: FIRST + SECOND,
            compute: 5 * 64,
            draw_statistics: vec![12, 4],
            copied: vec![FIRST, SECOND],
        };
        assert_eq!(single[0].1.draws, expected.draws, "the exact covered samples, one device");
        assert_eq!(single[0].1.compute, expected.compute, "groups × local size");
        assert!(single[0].1.pass > 0, "a non-precise query is non-zero when samples passed");
        for (device, counts) in &both {
            assert_eq!(counts, &single[0].1, "{device} counts as the single-device run");
            assert_eq!(counts.draws, expected.draws, "{device}");
            assert_eq!(counts.copied, expected.copied, "{device}: the copied results");
            assert_eq!(counts.compute, expected.compute, "{device}");
            assert_eq!(counts.draw_statistics, expected.draw_statistics, "{device}: 2 quads of 6 vertices");
        }
    });
}

fn assert_query<T: std::fmt::Debug>(result: Result<T, WorkError>, check: impl Fn(&QueryError) -> bool) {
    match result {
        Err(WorkError::Query(e)) if check(&e) => {}
        other => panic!("expected a query error, got {other:?}"),
    }
}

#[test]
fn occlusion_query_misuse_is_refused_with_nothing_submitted() {
    with_gpu(|set| {
        let both = DeviceMask::from_bits(0b11);
        let pool =
            MultiQueryPool::new(set, both, "misuse occlusion", QueryKind::Occlusion { precise: false }, 2)
                .unwrap();
        let other =
            MultiQueryPool::new(set, both, "misuse other", QueryKind::Occlusion { precise: false }, 1)
                .unwrap();
        let submitter = MultiSubmitter::new(set, both).unwrap();
        let before = set.device(d(0)).unwrap().submitted_work();
        let submit = |items: &[WorkItem<'_, '_>]| submitter.submit(d(0), items);

        // An index outside the pool.
        assert_query(submit(&[WorkItem::BeginQuery(&pool, 2), WorkItem::EndQuery(&pool, 2)]), |e| {
            matches!(e, QueryError::Index { index: 2, count: 2, .. })
        });
        // An end without its begin; a begin without its end.
        assert_query(submit(&[WorkItem::EndQuery(&pool, 0)]), |e| {
            matches!(e, QueryError::NotBegun { index: 0, .. })
        });
        assert_query(submit(&[WorkItem::BeginQuery(&pool, 1)]), |e| {
            matches!(e, QueryError::NotEnded { index: 1, .. })
        });
        // Two occlusion queries active at once.
        assert_query(
            submit(&[
                WorkItem::BeginQuery(&pool, 0),
                WorkItem::BeginQuery(&other, 0),
                WorkItem::EndQuery(&other, 0),
                WorkItem::EndQuery(&pool, 0),
            ]),
            |e| matches!(e, QueryError::AlreadyActive { .. }),
        );
        // Results of a query never ended: read or copied.
        assert_query(pool.results(d(0), 0..1), |e| matches!(e, QueryError::NeverWritten { index: 0, .. }));
        let buffers = MultiBufferPool::new(
            set,
            both,
            &BufferPoolDesc::new("misuse query results", BufferPoolUsage::Unknown).with_page_size(1 << 16),
        )
        .unwrap();
        let dst: MultiBuffer = buffers
            .init_buffer(
                &BufferInit::new("misuse dst", 64).with_usage(BufferUsage::COPY_DST),
                DeviceMask::ALL,
            )
            .unwrap();
        let no_dst: MultiBuffer = buffers
            .init_buffer(
                &BufferInit::new("misuse no dst", 64).with_usage(BufferUsage::STORAGE),
                DeviceMask::ALL,
            )
            .unwrap();
        let copy = |queries, dst| WorkItem::CopyQueryResults(QueryCopyItem { pool: &pool, queries, dst });
        assert_query(submit(&[copy(0..1, BufferView::whole(&dst))]), |e| {
            matches!(e, QueryError::NeverWritten { .. })
        });
        // Copied while active; misaligned; too small; without COPY_DST.
        assert_query(
            submit(&[
                WorkItem::BeginQuery(&pool, 0),
                copy(0..1, BufferView::whole(&dst)),
                WorkItem::EndQuery(&pool, 0),
            ]),
            |e| matches!(e, QueryError::NotEnded { .. }),
        );
        let with = |c| {
            vec![
                WorkItem::BeginQuery(&pool, 0),
                WorkItem::EndQuery(&pool, 0),
                WorkItem::BeginQuery(&pool, 1),
                WorkItem::EndQuery(&pool, 1),
                c,
            ]
        };
        assert_query(submit(&with(copy(0..2, BufferView::range(&dst, 4, 16).unwrap()))), |e| {
            matches!(e, QueryError::Copy { .. })
        });
        assert_query(submit(&with(copy(0..2, BufferView::range(&dst, 0, 8).unwrap()))), |e| {
            matches!(e, QueryError::Copy { .. })
        });
        assert_query(submit(&with(copy(0..2, BufferView::whole(&no_dst)))), |e| {
            matches!(e, QueryError::Copy { .. })
        });
        assert_query(submit(&with(copy(1..3, BufferView::whole(&dst)))), |e| {
            matches!(e, QueryError::Index { .. })
        });
        assert_eq!(set.device(d(0)).unwrap().submitted_work(), before, "nothing was submitted");

        // A statistics pool with no statistics, or non-core ones.
        let none = MultiQueryPool::new(
            set,
            both,
            "no statistics",
            QueryKind::PipelineStatistics(vk::QueryPipelineStatisticFlags::empty()),
            1,
        );
        assert!(matches!(none, Err(MultiDeviceError::Failed { source: QueryError::Statistics { .. }, .. })));
        let empty = MultiQueryPool::new(set, both, "no queries", QueryKind::Occlusion { precise: false }, 0);
        assert!(matches!(empty, Err(MultiDeviceError::Failed { source: QueryError::Count { .. }, .. })));

        // The same work, well formed, runs; and a copy in a later submission of the queries it
        // ended is accepted.
        let s = submit(&with(copy(0..2, BufferView::whole(&dst)))).unwrap();
        submitter.wait(d(0), s).unwrap();
        assert_eq!(pool.results(d(0), 0..2).unwrap(), vec![0, 0], "no draws: no samples");
        let s = submit(&[copy(0..2, BufferView::whole(&dst))]).unwrap();
        submitter.wait(d(0), s).unwrap();
        // Device 1 never ran them.
        assert_query(pool.results(d(1), 0..2), |e| matches!(e, QueryError::NeverWritten { .. }));
        submitter.destroy();
        buffers.free_buffer(dst).unwrap();
        buffers.free_buffer(no_dst).unwrap();
    });
}

/// A device without `pipelineStatisticsQuery` and `occlusionQueryPrecise` (an application's own
/// device that did not enable them): the pools that need them are refused with the feature
/// named, nothing created.
#[test]
fn query_pools_a_device_lacks_the_feature_for_are_refused_with_the_feature_named() {
    let Some(app) = app::app() else { return };
    assert!(!app.features.pipeline_statistics_query && !app.features.occlusion_query_precise);
    let external = residency_vulkan::ExternalDevice {
        physical: app.physical,
        device: app.device.clone(),
        universal_queue: (app.family, 0),
        sparse_queue: app.features.sparse_binding.then_some((app.family, 0)),
        features: app.features,
    };
    // SAFETY: the instance and device were made as `adopt` requires and outlive the set; this
    // test submits nothing itself while the set lives.
    let set =
        unsafe { DeviceSet::adopt(app.entry.clone(), app.instance.clone(), true, &[external]) }.unwrap();
    let statistics =
        QueryKind::PipelineStatistics(vk::QueryPipelineStatisticFlags::COMPUTE_SHADER_INVOCATIONS);
    for (kind, feature) in [
        (statistics, "pipelineStatisticsQuery"),
        (QueryKind::Occlusion { precise: true }, "occlusionQueryPrecise"),
    ] {
        let err = MultiQueryPool::new(&set, DeviceMask::ALL, "unsupported", kind, 1).unwrap_err();
        assert!(
            matches!(&err, MultiDeviceError::Failed { source: QueryError::Unsupported { feature: f, .. }, .. } if *f == feature),
            "{err}"
        );
    }
    // A non-precise occlusion pool needs no feature.
    let loose =
        MultiQueryPool::new(&set, DeviceMask::ALL, "loose", QueryKind::Occlusion { precise: false }, 1)
            .unwrap();
    drop(loose);
    assert_eq!(set.validation_log().problem_count(), 0, "{:?}", set.validation_log().messages());
    let leaks = residency_vulkan::LEAKS_AT_TEARDOWN.load(std::sync::atomic::Ordering::SeqCst);
    drop(set);
    assert_eq!(residency_vulkan::LEAKS_AT_TEARDOWN.load(std::sync::atomic::Ordering::SeqCst), leaks);
    // SAFETY: the device is valid (residency did not destroy it) and idle; nothing else uses it.
    unsafe {
        app.device.device_wait_idle().unwrap();
        app.device.destroy_device(None);
        app.instance.destroy_instance(None);
    }
}

/// A draw refused while recording (its vertex view's buffer lacks `VERTEX` usage, which only the
/// checked `Drawing` sees) inside an outer query — an occlusion query around the whole pass, and
/// a statistics query around a pass with its own draw query: the submission returns the draw's
/// typed error, submits nothing and writes no query, and the recording ends the queries it had
/// begun before `vkEndCommandBuffer` (a query left active there is
/// VUID-vkEndCommandBuffer-commandBuffer-00061, which `with_gpu` fails on), on both devices.
#[test]
fn a_draw_refused_inside_an_outer_query_ends_the_query_and_submits_nothing() {
    with_gpu(|set| {
        let both = DeviceMask::from_bits(0b11);
        let buffers = MultiBufferPool::new(
            set,
            both,
            &BufferPoolDesc::new("refused draw buffers", BufferPoolUsage::Unknown).with_page_size(1 << 16),
        )
        .unwrap();
        // Big enough for the draw's vertices (checked before recording), but no VERTEX usage.
        let not_vertices: MultiBuffer = buffers
            .init_buffer(
                &BufferInit::new("not vertices", QUAD_BYTES).with_usage(BufferUsage::STORAGE),
                DeviceMask::ALL,
            )
            .unwrap();
        let target = MultiImage::create(
            set,
            both,
            &ImageDesc::new_2d(
                "refused target",
                Format::R8G8B8A8Unorm,
                SIDE,
                SIDE,
                ImageUsage::COLOR_ATTACHMENT,
            ),
        )
        .unwrap();
        let attributes = [
            residency_vulkan::graphics::VertexAttribute {
                location: 0,
                format: vk::Format::R32G32_SFLOAT,
                offset: 0,
            },
            residency_vulkan::graphics::VertexAttribute {
                location: 1,
                format: vk::Format::R32G32B32A32_SFLOAT,
                offset: 8,
            },
        ];
        let program = MultiGraphicsProgram::new(
            set,
            both,
            "refused quads",
            &shaders::QUADS_VERT,
            &shaders::QUADS_FRAG,
            STRIDE,
            &attributes,
            vk::Format::R8G8B8A8_UNORM,
            1,
        )
        .unwrap();
        let draw = DrawItem::new(
            &program,
            vec![],
            Some(BufferView::range(&not_vertices, 0, QUAD_BYTES).unwrap()),
            6,
            1,
        );
        let draws = [&draw];
        let render = RenderItem {
            program: &program,
            target: &target,
            extent: [SIDE; 2],
            clear: [0.0; 4],
            draws: &draws,
        };
        let loose =
            MultiQueryPool::new(set, both, "refused loose", QueryKind::Occlusion { precise: false }, 1)
                .unwrap();
        let precise =
            MultiQueryPool::new(set, both, "refused precise", QueryKind::Occlusion { precise: true }, 1)
                .unwrap();
        let stats = MultiQueryPool::new(
            set,
            both,
            "refused statistics",
            QueryKind::PipelineStatistics(vk::QueryPipelineStatisticFlags::INPUT_ASSEMBLY_VERTICES),
            1,
        )
        .unwrap();
        let inner = [DrawQuery { pool: &precise, index: 0, draws: 0..1 }];
        let submitter = MultiSubmitter::new(set, both).unwrap();
        for device in [d(0), d(1)] {
            let before = set.device(device).unwrap().submitted_work();
            for items in [
                vec![
                    WorkItem::BeginQuery(&loose, 0),
                    WorkItem::Render(render),
                    WorkItem::EndQuery(&loose, 0),
                ],
                vec![
                    WorkItem::BeginQuery(&stats, 0),
                    WorkItem::QueriedRender(render, &inner),
                    WorkItem::EndQuery(&stats, 0),
                ],
            ] {
                let err = submitter.submit(device, &items).unwrap_err();
                assert!(
                    matches!(
                        &err,
                        WorkError::Draw(residency_vulkan::graphics::DrawError::Buffer { buffer, .. })
                            if buffer == "not vertices"
                    ),
                    "{device}: {err}"
                );
            }
            assert_eq!(
                set.device(device).unwrap().submitted_work(),
                before,
                "{device}: nothing was submitted"
            );
            for pool in [&loose, &precise, &stats] {
                assert_query(pool.results(device, 0..1), |e| matches!(e, QueryError::NeverWritten { .. }));
            }
        }
        submitter.destroy();
        drop(draw);
        drop((program, target));
        buffers.free_buffer(not_vertices).unwrap();
    });
}
