//! Acceleration structures and ray queries (issue #35): a bottom- and top-level structure built
//! per device from per-device geometry, compacted per device, traversed by a ray query in a
//! compute work item on each device and compared with a single-device run and the CPU's answer;
//! and the misuse cases (bad counts, ranges, formats, usages, a structure missing on a device, a
//! use before the build, a drop with work in flight), each a typed error that changes nothing; and
//! the same scene traced by a ray-tracing pipeline with a shader table per device in a
//! dispatch-rays work item.

use residency_core::device_mask::{DeviceIndex, DeviceMask};
use residency_core::memory::MemoryIntent;
use residency_core::usage::{BufferPoolUsage, BufferUsage};
use residency_vulkan::acceleration::{
    missing_feature, AccelerationError, AccelerationLevel, AccelerationStructure, BottomLevelDesc, Instance,
    TopLevelDesc, TriangleGeometry,
};
use residency_vulkan::ash::vk;
use residency_vulkan::compute::{Binding, BindingError, ComputeProgram};
use residency_vulkan::multi::accel::{
    MultiAccelerationStructure, MultiInstance, MultiRayTracingProgram, MultiTriangleGeometry, TraceRaysItem,
};
use residency_vulkan::multi::work::{
    BufferView, DispatchItem, MultiBinding, MultiComputeProgram, MultiSubmitter, WorkError, WorkItem,
};
use residency_vulkan::multi::{MultiBuffer, MultiBufferPool, MultiDevice, MultiDeviceError, MultiUploader};
use residency_vulkan::ray_tracing::{RayTracingError, RayTracingProgram};
use residency_vulkan::recording::MemoryDependency;
use residency_vulkan::testing::with_gpu;
use residency_vulkan::{
    shaders, Buffer, BufferDesc, BufferPool, BufferPoolDesc, CommandContext, Device, EnabledFeatures,
    VulkanError,
};
use std::sync::Arc;

const W: u32 = 16;
const H: u32 = 8;
const SCALE: f32 = 0.25;
const Y_BIAS: f32 = 0.3;
/// The instances: (x offset, custom index).
const INSTANCES: [(f32, u32); 2] = [(0.0, 1), (2.0, 2)];

fn d(i: u32) -> DeviceIndex {
    DeviceIndex::new(i).unwrap()
}

/// The unit square in z = 0 as two triangles: (0,0) (1,0) (1,1) below the diagonal, (0,0) (1,1)
/// (0,1) above it.
fn quad() -> Vec<f32> {
    vec![0., 0., 0., 1., 0., 0., 1., 1., 0., 0., 0., 0., 1., 1., 0., 0., 1., 0.]
}

fn quad_bytes() -> Vec<u8> {
    quad().iter().flat_map(|f| f.to_le_bytes()).collect()
}

/// What the shader writes at each pixel, from the CPU.
fn expected() -> Vec<u32> {
    let mut out = Vec::new();
    for y in 0..H {
        for x in 0..W {
            let (px, py) = ((x as f32 + 0.5) * SCALE, (y as f32 + Y_BIAS) * SCALE);
            let mut v = 0;
            for (ox, custom) in INSTANCES {
                let lx = px - ox;
                if lx > 0.0 && lx < 1.0 && py > 0.0 && py < 1.0 {
                    v = custom * 10 + if py < lx { 0 } else { 1 } + 1;
                }
            }
            out.push(v);
        }
    }
    out
}

fn push() -> Vec<u8> {
    [W.to_le_bytes(), H.to_le_bytes(), SCALE.to_le_bytes(), Y_BIAS.to_le_bytes()].concat()
}

fn translate(x: f32) -> [[f32; 4]; 3] {
    [[1.0, 0.0, 0.0, x], [0.0, 1.0, 0.0, 0.0], [0.0, 0.0, 1.0, 0.0]]
}

fn words(bytes: &[u8]) -> Vec<u32> {
    bytes.chunks_exact(4).map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect()
}

fn live(device: &Device) -> usize {
    device.ledger().live_objects().into_iter().filter(|o| o.kind != "memory").count()
}

/// The ray-query program on `device`, or `None` after checking the typed error naming the feature
/// where the device has no ray queries (the H200 has ray-tracing pipelines without `rayQuery`).
/// Lavapipe has them, so CI runs every line.
fn ray_query_program(device: &Arc<Device>, sets: u32) -> Option<ComputeProgram> {
    match ComputeProgram::new(device, "ray_query.comp", &shaders::RAY_QUERY, sets) {
        Ok(program) => {
            assert!(device.features().ray_query);
            Some(program)
        }
        Err(e) => {
            assert!(!device.features().ray_query, "{e}");
            assert!(e.to_string().contains("rayQuery"), "the missing feature is named: {e}");
            None
        }
    }
}

fn rt_pool(device: &Arc<Device>, name: &str) -> BufferPool {
    BufferPool::new(
        Arc::clone(device),
        BufferPoolDesc::new(name, BufferPoolUsage::Unknown).with_page_size(4 << 20),
    )
    .unwrap()
}

fn input_usage() -> BufferUsage {
    BufferUsage::ACCELERATION_STRUCTURE_BUILD_INPUT | BufferUsage::DEVICE_ADDRESS
}

fn vertex_buffer(device: &Device, name: &str) -> Buffer {
    let bytes = quad_bytes();
    let mut b = device
        .create_buffer(
            &BufferDesc::new(name, bytes.len() as u64, input_usage()).with_intent(MemoryIntent::Upload),
        )
        .unwrap();
    b.write(0, &bytes).unwrap();
    b
}

fn geometry(vertices: &Buffer) -> TriangleGeometry<'_> {
    TriangleGeometry {
        vertices,
        offset: 0,
        stride: 12,
        vertex_count: 6,
        format: vk::Format::R32G32B32_SFLOAT,
        triangles: 2,
        opaque: true,
    }
}

fn host_visible(rec: &mut residency_vulkan::recording::Recording<'_>) {
    rec.memory_barrier(MemoryDependency {
        src_stages: vk::PipelineStageFlags2::COMPUTE_SHADER,
        src_access: vk::AccessFlags2::SHADER_WRITE,
        dst_stages: vk::PipelineStageFlags2::HOST,
        dst_access: vk::AccessFlags2::HOST_READ,
    })
    .unwrap();
}

/// The single-device run: BLAS and TLAS built in one recording, compacted, traced.
fn single_device_pixels(device: &Arc<Device>) -> Vec<u32> {
    let pool = rt_pool(device, "single rt");
    let vertices = vertex_buffer(device, "single quad");
    let context = CommandContext::new(device, "single ray query").unwrap();
    let mut built = None;
    let submission = context
        .submit(&[], |rec| {
            let desc = BottomLevelDesc {
                name: "single blas".into(),
                geometries: vec![geometry(&vertices)],
                allow_compaction: true,
            };
            let blas = AccelerationStructure::build_bottom(rec, &pool, &desc).unwrap();
            assert!(!blas.is_built(), "built once the submission is made");
            assert!(matches!(blas.compacted_size(), Err(AccelerationError::NotBuilt { .. })));
            built = Some(blas);
        })
        .unwrap();
    let blas = built.take().unwrap();
    assert!(blas.is_built());
    context.wait(submission).unwrap();
    let compacted_size = blas.compacted_size().unwrap();
    assert!(compacted_size > 0 && compacted_size <= blas.size(), "{compacted_size} of {}", blas.size());
    let mut compacted = None;
    let mut top = None;
    let submission = context
        .submit(&[], |rec| {
            let small = blas.compact(rec, &pool, "single blas compacted").unwrap();
            assert_eq!(small.size(), compacted_size);
            let instances = INSTANCES
                .iter()
                .map(|&(x, custom)| Instance {
                    transform: translate(x),
                    custom_index: custom,
                    ..Instance::new(&small)
                })
                .collect();
            let desc = TopLevelDesc { name: "single tlas".into(), instances, allow_compaction: false };
            top = Some(AccelerationStructure::build_top(rec, &pool, &desc).unwrap());
            compacted = Some(small);
        })
        .unwrap();
    // The original goes while its compacting copy may still run: destroyed after it.
    drop(blas);
    let tlas = top.unwrap();
    assert_eq!(tlas.level(), AccelerationLevel::Top);
    assert_eq!(tlas.primitives(), 2);
    let program = ComputeProgram::new(device, "ray_query.comp", &shaders::RAY_QUERY, 1).unwrap();
    let pixels = device
        .create_buffer(
            &BufferDesc::new("single pixels", u64::from(W * H * 4), BufferUsage::STORAGE)
                .with_intent(MemoryIntent::Readback),
        )
        .unwrap();
    let set =
        program.descriptor_set(&[Binding::AccelerationStructure(&tlas), Binding::Buffer(&pixels)]).unwrap();
    // The structures go before the dispatch is even recorded: the set keeps them.
    drop(compacted);
    drop(tlas);
    let trace = context
        .submit(&[], |rec| {
            program.dispatch(rec, &set, &push(), [W / 8, H / 8, 1]).unwrap();
            host_visible(rec);
        })
        .unwrap();
    context.wait(submission).unwrap();
    context.wait(trace).unwrap();
    let mut out = vec![0u8; (W * H * 4) as usize];
    pixels.read(0, &mut out).unwrap();
    context.destroy();
    words(&out)
}

#[test]
fn multi_ray_query_through_a_blas_and_tlas_built_per_device_equals_a_single_device_run() {
    with_gpu(|set| {
        let devices = set.devices();
        if !devices.iter().all(|dev| dev.features().ray_query) {
            // Not on lavapipe (CI): a device without `rayQuery` refuses the program by name.
            let f = devices[0].features();
            assert!(missing_feature(&f, true).is_some());
            assert!(ray_query_program(&devices[0], 1).is_none());
            return;
        }
        let reference = single_device_pixels(&devices[0]);
        assert_eq!(reference, expected(), "the single-device run traces what the CPU computes");
        let hits = reference.iter().filter(|&&v| v != 0).count();
        assert!(hits > 0 && hits < reference.len(), "some pixels hit and some miss: {hits}");

        let both = DeviceMask::from_bits(0b11);
        let pool = MultiBufferPool::new(
            set,
            both,
            &BufferPoolDesc::new("multi rt", BufferPoolUsage::Unknown).with_page_size(4 << 20),
        )
        .unwrap();
        let readback = MultiBufferPool::new(
            set,
            both,
            &BufferPoolDesc::new("multi pixels", BufferPoolUsage::Unknown)
                .with_memory(MemoryIntent::Readback)
                .with_page_size(1 << 20),
        )
        .unwrap();
        let uploader = MultiUploader::new(set, both, 1 << 20).unwrap();
        let bytes = quad_bytes();
        let vertices = MultiBuffer::create(
            set,
            both,
            &BufferDesc::new("quad", bytes.len() as u64, input_usage() | BufferUsage::COPY_DST),
        )
        .unwrap();
        uploader.broadcast(&vertices, 0, &bytes).unwrap();
        uploader.wait_idle().unwrap();
        let submitter = MultiSubmitter::new(set, both).unwrap();
        let geometry = MultiTriangleGeometry {
            vertices: &vertices,
            offset: 0,
            stride: 12,
            vertex_count: 6,
            format: vk::Format::R32G32B32_SFLOAT,
            triangles: 2,
            opaque: true,
        };
        let (blas, builds) = MultiAccelerationStructure::build_bottom(
            &submitter,
            &pool,
            DeviceMask::ALL,
            "quad blas",
            &[geometry],
            true,
        )
        .unwrap();
        assert_eq!(blas.mask(), both);
        assert_eq!(builds.mask(), both);
        for (i, s) in builds.into_values() {
            submitter.wait(i, s).unwrap();
        }
        // Compaction per device: each device's compacted size, then a copy of that size there.
        let sizes = blas.compacted_sizes().unwrap();
        for (i, &size) in sizes.iter() {
            let full = blas.instance(i).unwrap().size();
            assert!(size > 0 && size <= full, "{i}: compacted {size} of {full}");
            println!("{i}: BLAS {full} B, compacted {size} B");
        }
        let (small, copies) = blas.compact(&submitter, &pool, "quad blas compacted").unwrap();
        for (i, structure) in small.iter() {
            assert_eq!(structure.size(), *sizes.get(i).unwrap());
            assert_eq!(structure.level(), AccelerationLevel::Bottom);
        }
        drop(blas);
        let instances: Vec<_> = INSTANCES
            .iter()
            .map(|&(x, custom)| MultiInstance {
                transform: translate(x),
                custom_index: custom,
                ..MultiInstance::new(&small)
            })
            .collect();
        let (tlas, tops) = MultiAccelerationStructure::build_top(
            &submitter,
            &pool,
            DeviceMask::ALL,
            "scene",
            &instances,
            false,
        )
        .unwrap();
        let pixels = readback
            .init_buffer(
                &residency_vulkan::BufferInit::new("pixels", u64::from(W * H * 4))
                    .with_usage(BufferUsage::STORAGE),
                both,
            )
            .unwrap();
        let program = MultiComputeProgram::new(set, both, "ray_query.comp", &shaders::RAY_QUERY, 2).unwrap();
        let dispatch = DispatchItem::new(
            &program,
            vec![
                MultiBinding::AccelerationStructure(&tlas),
                MultiBinding::Buffer(BufferView::whole(&pixels)),
            ],
            &push(),
            [W / 8, H / 8, 1],
        );
        for i in [d(0), d(1)] {
            // The builds were submitted before (not waited for): the queue orders them.
            let s = submitter.submit(i, &[WorkItem::Dispatch(&dispatch)]).unwrap();
            submitter.wait(i, s).unwrap();
            let mut out = vec![0u8; (W * H * 4) as usize];
            pixels.instance(i).unwrap().read(0, &mut out).unwrap();
            assert_eq!(words(&out), reference, "{i} traces what the single-device run traced");
        }
        assert_eq!(dispatch.cached_devices(), 2);
        for (i, s) in copies.into_values().chain(tops.into_values()) {
            submitter.wait(i, s).unwrap();
        }
        submitter.destroy();
    });
}

#[test]
fn ray_query_misuse_bad_counts_ranges_formats_and_usages_are_typed_errors_that_change_nothing() {
    with_gpu(|set| {
        let device = &set.devices()[0];
        let pool = rt_pool(device, "misuse rt");
        let vertices = vertex_buffer(device, "misuse quad");
        let plain = device
            .create_buffer(
                &BufferDesc::new("no build input", 72, BufferUsage::STORAGE)
                    .with_intent(MemoryIntent::Upload),
            )
            .unwrap();
        let context = CommandContext::new(device, "misuse").unwrap();
        let before = (live(device), pool.stats().used_bytes);
        let good = geometry(&vertices);
        let cases: Vec<(&str, TriangleGeometry<'_>)> = vec![
            ("no triangles", TriangleGeometry { triangles: 0, ..good }),
            ("too few vertices", TriangleGeometry { vertex_count: 5, ..good }),
            ("past the buffer", TriangleGeometry { offset: 12, ..good }),
            ("offset overflows", TriangleGeometry { offset: u64::MAX - 4, ..good }),
            ("stride overflows", TriangleGeometry { stride: u64::MAX - 3, ..good }),
            ("stride not a multiple", TriangleGeometry { stride: 13, ..good }),
            ("unaligned vertices", TriangleGeometry { offset: 2, vertex_count: 3, triangles: 1, ..good }),
            ("not a vertex format", TriangleGeometry { format: vk::Format::R8G8B8A8_UNORM, ..good }),
            ("no build-input usage", TriangleGeometry { vertices: &plain, ..good }),
        ];
        let submission = context
            .submit(&[], |rec| {
                for (what, g) in &cases {
                    let desc = BottomLevelDesc {
                        name: (*what).into(),
                        geometries: vec![*g],
                        allow_compaction: false,
                    };
                    let e = AccelerationStructure::build_bottom(rec, &pool, &desc).unwrap_err();
                    assert!(matches!(e, AccelerationError::Invalid { .. }), "{what}: {e}");
                    println!("{what}: {e}");
                }
                let empty =
                    BottomLevelDesc { name: "empty".into(), geometries: vec![], allow_compaction: false };
                let e = AccelerationStructure::build_bottom(rec, &pool, &empty).unwrap_err();
                assert!(matches!(e, AccelerationError::Invalid { .. }), "{e}");
                let none =
                    TopLevelDesc { name: "no instances".into(), instances: vec![], allow_compaction: false };
                let e = AccelerationStructure::build_top(rec, &pool, &none).unwrap_err();
                assert!(matches!(e, AccelerationError::Invalid { .. }), "{e}");
            })
            .unwrap();
        context.wait(submission).unwrap();
        assert_eq!((live(device), pool.stats().used_bytes), before, "nothing was created");

        // A structure of another device, a top level where a bottom one goes, a custom index past
        // 24 bits, a BLAS bound where a TLAS goes, compaction without ALLOW_COMPACTION.
        let other = &set.devices()[1];
        let other_pool = rt_pool(other, "other rt");
        let other_vertices = vertex_buffer(other, "other quad");
        let other_context = CommandContext::new(other, "other").unwrap();
        let mut other_blas = None;
        let s = other_context
            .submit(&[], |rec| {
                let desc = BottomLevelDesc {
                    name: "other blas".into(),
                    geometries: vec![geometry(&other_vertices)],
                    allow_compaction: false,
                };
                other_blas = Some(AccelerationStructure::build_bottom(rec, &other_pool, &desc).unwrap());
            })
            .unwrap();
        other_context.wait(s).unwrap();
        let other_blas = other_blas.unwrap();
        let mut blas = None;
        let mut tlas = None;
        let s = context
            .submit(&[], |rec| {
                let e = AccelerationStructure::build_bottom(
                    rec,
                    &pool,
                    &BottomLevelDesc {
                        name: "foreign vertices".into(),
                        geometries: vec![geometry(&other_vertices)],
                        allow_compaction: false,
                    },
                )
                .unwrap_err();
                assert!(matches!(e, AccelerationError::WrongDevice { .. }), "{e}");
                let b = AccelerationStructure::build_bottom(
                    rec,
                    &pool,
                    &BottomLevelDesc { name: "blas".into(), geometries: vec![good], allow_compaction: false },
                )
                .unwrap();
                let foreign = TopLevelDesc {
                    name: "foreign instance".into(),
                    instances: vec![Instance::new(&other_blas)],
                    allow_compaction: false,
                };
                let e = AccelerationStructure::build_top(rec, &pool, &foreign).unwrap_err();
                assert!(matches!(e, AccelerationError::WrongDevice { .. }), "{e}");
                let wide = TopLevelDesc {
                    name: "wide index".into(),
                    instances: vec![Instance { custom_index: 1 << 24, ..Instance::new(&b) }],
                    allow_compaction: false,
                };
                let e = AccelerationStructure::build_top(rec, &pool, &wide).unwrap_err();
                assert!(matches!(e, AccelerationError::Invalid { .. }), "{e}");
                // A hit-group offset past residency's one hit group (a trace would read past the
                // shader table) and flags of extensions residency does not enable: refused.
                for instance in [
                    Instance { sbt_offset: 1, ..Instance::new(&b) },
                    Instance { flags: vk::GeometryInstanceFlagsKHR::from_raw(0x10), ..Instance::new(&b) },
                ] {
                    let desc = TopLevelDesc {
                        name: "bad instance".into(),
                        instances: vec![instance],
                        allow_compaction: false,
                    };
                    let e = AccelerationStructure::build_top(rec, &pool, &desc).unwrap_err();
                    assert!(matches!(e, AccelerationError::Invalid { .. }), "{e}");
                }
                let t = AccelerationStructure::build_top(
                    rec,
                    &pool,
                    &TopLevelDesc {
                        name: "tlas".into(),
                        instances: vec![Instance::new(&b)],
                        allow_compaction: false,
                    },
                )
                .unwrap();
                let nested = TopLevelDesc {
                    name: "nested".into(),
                    instances: vec![Instance::new(&t)],
                    allow_compaction: false,
                };
                let e = AccelerationStructure::build_top(rec, &pool, &nested).unwrap_err();
                assert!(matches!(e, AccelerationError::Invalid { .. }), "{e}");
                blas = Some(b);
                tlas = Some(t);
            })
            .unwrap();
        context.wait(s).unwrap();
        let (blas, tlas) = (blas.unwrap(), tlas.unwrap());
        assert!(matches!(blas.compacted_size(), Err(AccelerationError::NotCompactable { .. })));
        let Some(program) = ray_query_program(device, 2) else { return };
        let pixels = device
            .create_buffer(&BufferDesc::new("misuse pixels", u64::from(W * H * 4), BufferUsage::STORAGE))
            .unwrap();
        let e = program
            .descriptor_set(&[Binding::AccelerationStructure(&blas), Binding::Buffer(&pixels)])
            .unwrap_err();
        assert!(matches!(e, BindingError::Invalid { .. }), "{e}");
        let e = program
            .descriptor_set(&[Binding::AccelerationStructure(&other_blas), Binding::Buffer(&pixels)])
            .unwrap_err();
        assert!(matches!(e, BindingError::WrongDevice { .. }), "{e}");
        let e = program.descriptor_set(&[Binding::Buffer(&pixels), Binding::Buffer(&pixels)]).unwrap_err();
        assert!(matches!(e, BindingError::Invalid { .. }), "a buffer where the scene goes: {e}");
        let ok = program.descriptor_set(&[Binding::AccelerationStructure(&tlas), Binding::Buffer(&pixels)]);
        assert!(ok.is_ok());
        context.destroy();
        other_context.destroy();
    });
}

#[test]
fn ray_query_a_use_submitted_before_the_build_is_refused_and_a_drop_in_flight_is_safe() {
    with_gpu(|set| {
        let device = &set.devices()[0];
        let pool = rt_pool(device, "order rt");
        let vertices = vertex_buffer(device, "order quad");
        let builder = CommandContext::new(device, "builds").unwrap();
        let tracer = CommandContext::new(device, "traces").unwrap();
        let Some(program) = ray_query_program(device, 4) else { return };
        let pixels = device
            .create_buffer(&BufferDesc::new("order pixels", u64::from(W * H * 4), BufferUsage::STORAGE))
            .unwrap();
        let mut kept = None;
        let build = builder
            .submit(&[], |rec| {
                let blas = AccelerationStructure::build_bottom(
                    rec,
                    &pool,
                    &BottomLevelDesc {
                        name: "blas".into(),
                        geometries: vec![geometry(&vertices)],
                        allow_compaction: false,
                    },
                )
                .unwrap();
                let tlas = AccelerationStructure::build_top(
                    rec,
                    &pool,
                    &TopLevelDesc {
                        name: "tlas".into(),
                        instances: vec![Instance::new(&blas)],
                        allow_compaction: false,
                    },
                )
                .unwrap();
                // A trace submitted while the build is still being recorded: refused.
                let set = program
                    .descriptor_set(&[Binding::AccelerationStructure(&tlas), Binding::Buffer(&pixels)])
                    .unwrap();
                let refused = tracer.submit(&[], |rec| {
                    let _ = program.dispatch(rec, &set, &push(), [W / 8, H / 8, 1]);
                });
                match refused {
                    Err(VulkanError::ImageLayout { image, expected, actual, .. }) => {
                        assert_eq!(image, "tlas");
                        assert_eq!(
                            (expected, actual),
                            (vk::ImageLayout::GENERAL, vk::ImageLayout::UNDEFINED)
                        );
                    }
                    other => panic!("a trace before the build: {other:?}"),
                }
                kept = Some((blas, tlas, set));
            })
            .unwrap();
        let (blas, tlas, set) = kept.unwrap();
        assert!(tlas.is_built());
        // Now it may be traced; everything is dropped with the trace in flight.
        let trace = tracer
            .submit(&[], |rec| program.dispatch(rec, &set, &push(), [W / 8, H / 8, 1]).unwrap())
            .unwrap();
        drop((blas, tlas, set, pool, vertices));
        builder.wait(build).unwrap();
        tracer.wait(trace).unwrap();
        builder.destroy();
        tracer.destroy();
    });
}

#[test]
fn ray_query_multi_device_build_missing_on_one_device_is_rolled_back() {
    with_gpu(|set| {
        let both = DeviceMask::from_bits(0b11);
        let pool = MultiBufferPool::new(
            set,
            both,
            &BufferPoolDesc::new("rollback rt", BufferPoolUsage::Unknown).with_page_size(4 << 20),
        )
        .unwrap();
        let bytes = quad_bytes();
        // Vertices on device 0 only.
        let vertices = MultiBuffer::create(
            set,
            DeviceMask::from_bits(0b01),
            &BufferDesc::new("quad on 0", bytes.len() as u64, input_usage())
                .with_intent(MemoryIntent::Upload),
        )
        .unwrap();
        let submitter = MultiSubmitter::new(set, both).unwrap();
        for dev in set.devices() {
            dev.maintain();
        }
        let before: Vec<usize> = set.devices().iter().map(|dev| live(dev)).collect();
        let used: Vec<u64> = pool.iter().map(|(_, p)| p.stats().used_bytes).collect();
        let geometry = MultiTriangleGeometry {
            vertices: &vertices,
            offset: 0,
            stride: 12,
            vertex_count: 6,
            format: vk::Format::R32G32B32_SFLOAT,
            triangles: 2,
            opaque: true,
        };
        let e = MultiAccelerationStructure::build_bottom(
            &submitter,
            &pool,
            DeviceMask::ALL,
            "half",
            &[geometry],
            false,
        )
        .unwrap_err();
        match &e {
            MultiDeviceError::Failed { device, source: AccelerationError::Invalid { .. } } => {
                assert_eq!(*device, d(1))
            }
            other => panic!("{other}"),
        }
        // Device 0's structure, made before device 1 failed, was dropped: nothing changed.
        for dev in set.devices() {
            dev.maintain();
        }
        let after: Vec<usize> = set.devices().iter().map(|dev| live(dev)).collect();
        assert!(
            after.iter().zip(&before).all(|(a, b)| a <= b),
            "nothing is left on any device: {after:?} {before:?}"
        );
        assert_eq!(pool.iter().map(|(_, p)| p.stats().used_bytes).collect::<Vec<_>>(), used);
        // A mask outside the pool's is refused before anything.
        let e = MultiAccelerationStructure::build_bottom(
            &submitter,
            &pool,
            DeviceMask::from_bits(0b100),
            "outside",
            &[geometry],
            false,
        )
        .unwrap_err();
        assert!(matches!(e, MultiDeviceError::MaskNotSubset { .. } | MultiDeviceError::EmptyMask(_)), "{e}");
        // The work item resolves the structure per device: one missing on device 1 is refused there.
        let (on0, builds) = MultiAccelerationStructure::build_bottom(
            &submitter,
            &pool,
            DeviceMask::from_bits(0b01),
            "on 0",
            &[geometry],
            false,
        )
        .unwrap();
        let instances = [MultiInstance::new(&on0)];
        let (tlas0, tops) = MultiAccelerationStructure::build_top(
            &submitter,
            &pool,
            DeviceMask::from_bits(0b01),
            "scene on 0",
            &instances,
            false,
        )
        .unwrap();
        let e = MultiAccelerationStructure::build_top(
            &submitter,
            &pool,
            both,
            "scene on both",
            &instances,
            false,
        )
        .unwrap_err();
        assert!(matches!(e, MultiDeviceError::Failed { device, .. } if device == d(1)), "{e}");
        let pixels = pool
            .init_buffer(
                &residency_vulkan::BufferInit::new("pixels", u64::from(W * H * 4))
                    .with_usage(BufferUsage::STORAGE),
                both,
            )
            .unwrap();
        if ray_query_program(&set.devices()[0], 2).is_none() {
            return;
        }
        let program = MultiComputeProgram::new(set, both, "ray_query.comp", &shaders::RAY_QUERY, 2).unwrap();
        let dispatch = DispatchItem::new(
            &program,
            vec![
                MultiBinding::AccelerationStructure(&tlas0),
                MultiBinding::Buffer(BufferView::whole(&pixels)),
            ],
            &push(),
            [W / 8, H / 8, 1],
        );
        let e = submitter.submit(d(1), &[WorkItem::Dispatch(&dispatch)]).unwrap_err();
        assert!(matches!(e, WorkError::NotOnDevice { .. }), "{e}");
        let s = submitter.submit(d(0), &[WorkItem::Dispatch(&dispatch)]).unwrap();
        submitter.wait(d(0), s).unwrap();
        for (i, s) in builds.into_values().chain(tops.into_values()) {
            submitter.wait(i, s).unwrap();
        }
        submitter.destroy();
    });
}

#[test]
fn ray_query_a_missing_feature_is_named() {
    let none = EnabledFeatures::default();
    assert_eq!(missing_feature(&none, false), Some("bufferDeviceAddress"));
    let bda = EnabledFeatures { buffer_device_address: true, ..none };
    assert_eq!(missing_feature(&bda, false), Some("VK_KHR_acceleration_structure"));
    let with_as = EnabledFeatures { acceleration_structure: true, ..bda };
    assert_eq!(missing_feature(&with_as, false), None);
    assert_eq!(missing_feature(&with_as, true), Some("VK_KHR_ray_query"));
    assert_eq!(missing_feature(&EnabledFeatures { ray_query: true, ..with_as }, true), None);
    let e = AccelerationError::Unsupported { device: "x".into(), feature: "VK_KHR_ray_query" };
    assert!(e.to_string().contains("VK_KHR_ray_query"));
    assert_eq!(residency_vulkan::ResidencyError::class(&e), residency_vulkan::ErrorClass::Unsupported);
}

/// The single-device ray-tracing run: the same scene traced by a ray-tracing pipeline.
fn single_device_traced_pixels(device: &Arc<Device>) -> Vec<u32> {
    let pool = rt_pool(device, "single rt pipeline");
    let vertices = vertex_buffer(device, "single rt quad");
    let context = CommandContext::new(device, "single trace rays").unwrap();
    let program = RayTracingProgram::new(
        device,
        "trace",
        &shaders::TRACE_RAYGEN,
        &shaders::TRACE_MISS,
        &shaders::TRACE_CLOSEST_HIT,
        1,
    )
    .unwrap();
    let pixels = device
        .create_buffer(
            &BufferDesc::new("traced pixels", u64::from(W * H * 4), BufferUsage::STORAGE)
                .with_intent(MemoryIntent::Readback),
        )
        .unwrap();
    let mut sets = None;
    let submission = context
        .submit(&[], |rec| {
            let blas = AccelerationStructure::build_bottom(
                rec,
                &pool,
                &BottomLevelDesc {
                    name: "rt blas".into(),
                    geometries: vec![geometry(&vertices)],
                    allow_compaction: false,
                },
            )
            .unwrap();
            let instances = INSTANCES
                .iter()
                .map(|&(x, custom)| Instance {
                    transform: translate(x),
                    custom_index: custom,
                    ..Instance::new(&blas)
                })
                .collect();
            let tlas = AccelerationStructure::build_top(
                rec,
                &pool,
                &TopLevelDesc { name: "rt tlas".into(), instances, allow_compaction: false },
            )
            .unwrap();
            let set = program
                .descriptor_set(&[Binding::AccelerationStructure(&tlas), Binding::Buffer(&pixels)])
                .unwrap();
            // Over the device's launch limits: refused, nothing recorded.
            let e = program.trace(rec, &set, &push(), [u32::MAX, u32::MAX, 1]).unwrap_err();
            assert!(matches!(e, RayTracingError::LaunchOverLimit { .. }), "{e}");
            // Every axis within its limit, the product past 64 bits: refused, not wrapped.
            let limits = device.limits();
            let axis = |a: usize| {
                (u64::from(limits.max_compute_work_group_count[a])
                    * u64::from(limits.max_compute_work_group_size[a]))
                .min(u64::from(u32::MAX)) as u32
            };
            let extent = [axis(0), axis(1), axis(2)];
            if extent.iter().map(|&e| f64::from(e)).product::<f64>() > u64::MAX as f64 {
                let e = program.trace(rec, &set, &push(), extent).unwrap_err();
                assert!(matches!(e, RayTracingError::LaunchOverLimit { .. }), "{e}");
            }
            program.trace(rec, &set, &push(), [W, H, 1]).unwrap();
            rec.memory_barrier(MemoryDependency {
                src_stages: vk::PipelineStageFlags2::ALL_COMMANDS,
                src_access: vk::AccessFlags2::SHADER_WRITE,
                dst_stages: vk::PipelineStageFlags2::HOST,
                dst_access: vk::AccessFlags2::HOST_READ,
            })
            .unwrap();
            sets = Some(set);
        })
        .unwrap();
    drop(sets);
    context.wait(submission).unwrap();
    let mut out = vec![0u8; (W * H * 4) as usize];
    pixels.read(0, &mut out).unwrap();
    context.destroy();
    words(&out)
}

#[test]
fn ray_query_twin_a_dispatch_rays_work_item_with_a_shader_table_per_device_traces_the_same_pixels() {
    with_gpu(|set| {
        let devices = set.devices();
        assert!(
            devices.iter().all(|dev| dev.features().ray_tracing_pipeline),
            "lavapipe (Mesa 25.0.7) and the H200 have VK_KHR_ray_tracing_pipeline: {:?}",
            residency_vulkan::ray_tracing::missing_feature(&devices[0].features())
        );
        let reference = single_device_traced_pixels(&devices[0]);
        assert_eq!(reference, expected(), "the pipeline traces what the ray query and the CPU do");

        let both = DeviceMask::from_bits(0b11);
        let pool = MultiBufferPool::new(
            set,
            both,
            &BufferPoolDesc::new("multi rt pipeline", BufferPoolUsage::Unknown).with_page_size(4 << 20),
        )
        .unwrap();
        let uploader = MultiUploader::new(set, both, 1 << 20).unwrap();
        let bytes = quad_bytes();
        let vertices = MultiBuffer::create(
            set,
            both,
            &BufferDesc::new("rt quad", bytes.len() as u64, input_usage() | BufferUsage::COPY_DST),
        )
        .unwrap();
        uploader.broadcast(&vertices, 0, &bytes).unwrap();
        uploader.wait_idle().unwrap();
        let submitter = MultiSubmitter::new(set, both).unwrap();
        let geometry = MultiTriangleGeometry {
            vertices: &vertices,
            offset: 0,
            stride: 12,
            vertex_count: 6,
            format: vk::Format::R32G32B32_SFLOAT,
            triangles: 2,
            opaque: true,
        };
        let (blas, _) = MultiAccelerationStructure::build_bottom(
            &submitter,
            &pool,
            DeviceMask::ALL,
            "rt blas",
            &[geometry],
            false,
        )
        .unwrap();
        let instances: Vec<_> = INSTANCES
            .iter()
            .map(|&(x, custom)| MultiInstance {
                transform: translate(x),
                custom_index: custom,
                ..MultiInstance::new(&blas)
            })
            .collect();
        let (tlas, _) = MultiAccelerationStructure::build_top(
            &submitter,
            &pool,
            DeviceMask::ALL,
            "rt scene",
            &instances,
            false,
        )
        .unwrap();
        let readback = MultiBufferPool::new(
            set,
            both,
            &BufferPoolDesc::new("rt pixels", BufferPoolUsage::Unknown)
                .with_memory(MemoryIntent::Readback)
                .with_page_size(1 << 20),
        )
        .unwrap();
        let pixels = readback
            .init_buffer(
                &residency_vulkan::BufferInit::new("pixels", u64::from(W * H * 4))
                    .with_usage(BufferUsage::STORAGE),
                both,
            )
            .unwrap();
        // A miss shader where the ray generation goes: refused before anything is created.
        let e = MultiRayTracingProgram::new(
            set,
            both,
            "backwards",
            &shaders::TRACE_MISS,
            &shaders::TRACE_MISS,
            &shaders::TRACE_CLOSEST_HIT,
            1,
        )
        .unwrap_err();
        assert!(matches!(e, MultiDeviceError::Failed { source: RayTracingError::Program(_), .. }), "{e}");
        let program = MultiRayTracingProgram::new(
            set,
            both,
            "trace",
            &shaders::TRACE_RAYGEN,
            &shaders::TRACE_MISS,
            &shaders::TRACE_CLOSEST_HIT,
            2,
        )
        .unwrap();
        for (i, p) in program.iter() {
            println!("{i}: shader table {} B", p.shader_table().size());
        }
        let bindings = || {
            vec![MultiBinding::AccelerationStructure(&tlas), MultiBinding::Buffer(BufferView::whole(&pixels))]
        };
        let too_wide = TraceRaysItem::new(&program, bindings(), &push(), [u32::MAX, u32::MAX, 1]);
        let e = submitter.submit(d(0), &[WorkItem::TraceRays(&too_wide)]).unwrap_err();
        assert!(matches!(e, WorkError::RayTracing(RayTracingError::LaunchOverLimit { .. })), "{e}");
        assert_eq!(too_wide.cached_devices(), 0, "refused before its set was made");
        let trace = TraceRaysItem::new(&program, bindings(), &push(), [W, H, 1]);
        for i in [d(0), d(1)] {
            let s = submitter.submit(i, &[WorkItem::TraceRays(&trace)]).unwrap();
            submitter.wait(i, s).unwrap();
            let mut out = vec![0u8; (W * H * 4) as usize];
            pixels.instance(i).unwrap().read(0, &mut out).unwrap();
            assert_eq!(words(&out), reference, "{i} traces what the single-device run traced");
        }
        assert_eq!(trace.cached_devices(), 2);
        submitter.destroy();
    });
}
