//! The seed's transient-memory scenario with real ray-tracing objects: one frame builds a bottom-
//! level acceleration structure (its storage and build scratch transient buffers of an
//! unknown-flags heap, its triangles in an `ACCELERATION_STRUCTURE_BUILD_INPUT` buffer), the next
//! places terrain vertex data over the same bytes and draws it — under synchronization validation.
//! The build is checked by its compacted size (a query only a real build answers), the draw by its
//! pixels.

use residency_core::format::Format;
use residency_core::memory::MemoryIntent;
use residency_core::sync::{AccessFlags, CustomUse, PipelineStages, Region, TrackerOptions, Use};
use residency_core::usage::{BufferUsage, ImageUsage};
use residency_vulkan::ash::{self, vk};
use residency_vulkan::graphics::{GraphicsProgram, VertexAttribute};
use residency_vulkan::recording::MemoryDependency;
use residency_vulkan::testing::with_gpu;
use residency_vulkan::tracking::ResourceTracker;
use residency_vulkan::transient::{TransientPool, TransientRequest};
use residency_vulkan::{shaders, Buffer, BufferDesc, CommandContext, Device, ImageDesc, MemoryError};
use std::sync::Arc;

const SIDE: u32 = 64;
const CELLS: u32 = 8;

fn address(device: &Device, buffer: &Buffer) -> u64 {
    let info = vk::BufferDeviceAddressInfo::default().buffer(buffer.raw());
    // SAFETY: a live buffer of this device created with SHADER_DEVICE_ADDRESS usage.
    unsafe { device.raw().get_buffer_device_address(&info) + buffer.offset() }
}

/// A grid of `n × n` quads (two triangles each) in the z = 0 plane, as xyz floats.
fn grid(n: u32) -> Vec<f32> {
    let mut v = Vec::new();
    for j in 0..n {
        for i in 0..n {
            let (x0, y0, x1, y1) = (i as f32, j as f32, i as f32 + 1.0, j as f32 + 1.0);
            for (x, y) in [(x0, y0), (x1, y0), (x1, y1), (x0, y0), (x1, y1), (x0, y1)] {
                v.extend([x, y, 0.0]);
            }
        }
    }
    v
}

/// The colour of terrain cell (i, j).
fn cell_colour(i: u32, j: u32) -> [f32; 4] {
    [(i as f32 + 0.5) / CELLS as f32, (j as f32 + 0.5) / CELLS as f32, 0.25, 1.0]
}

/// The terrain: one flat-coloured quad per cell covering the viewport, as (xy, rgba) floats.
fn terrain() -> Vec<f32> {
    let mut v = Vec::new();
    let step = 2.0 / CELLS as f32;
    for j in 0..CELLS {
        for i in 0..CELLS {
            let (x0, y0) = (-1.0 + i as f32 * step, -1.0 + j as f32 * step);
            let (x1, y1) = (x0 + step, y0 + step);
            let c = cell_colour(i, j);
            for (x, y) in [(x0, y0), (x1, y0), (x1, y1), (x0, y0), (x1, y1), (x0, y1)] {
                v.extend([x, y]);
                v.extend(c);
            }
        }
    }
    v
}

fn as_use(access: AccessFlags) -> Use {
    Use::Custom(CustomUse { stages: PipelineStages::ACCELERATION_STRUCTURE_BUILD, access, layout: None })
}

#[test]
fn blas_scratch_one_frame_and_terrain_vertices_over_the_same_memory_the_next() {
    with_gpu(|set| {
        let device = &set.devices()[0];
        assert!(
            device.features().acceleration_structure,
            "lavapipe and the H200 have VK_KHR_acceleration_structure"
        );
        let instance = device.instance();
        let loader = ash::khr::acceleration_structure::Device::new(instance, device.raw());
        let context = CommandContext::new(device, "blas then terrain").unwrap();

        // The BLAS's triangles: a build input buffer the CPU fills.
        let triangles = grid(16);
        let input_usage = BufferUsage::ACCELERATION_STRUCTURE_BUILD_INPUT | BufferUsage::DEVICE_ADDRESS;
        let mut input = device
            .create_buffer(
                &BufferDesc::new("blas triangles", (triangles.len() * 4) as u64, input_usage)
                    .with_intent(MemoryIntent::Upload),
            )
            .unwrap();
        assert_eq!(input.memory().1 % 16, 0, "build inputs are placed at 16 B");
        input.write_pod(0, &triangles).unwrap();
        let primitives = (triangles.len() / 9) as u32;
        let geometry = [vk::AccelerationStructureGeometryKHR::default()
            .geometry_type(vk::GeometryTypeKHR::TRIANGLES)
            .flags(vk::GeometryFlagsKHR::OPAQUE)
            .geometry(vk::AccelerationStructureGeometryDataKHR {
                triangles: vk::AccelerationStructureGeometryTrianglesDataKHR::default()
                    .vertex_format(vk::Format::R32G32B32_SFLOAT)
                    .vertex_data(vk::DeviceOrHostAddressConstKHR { device_address: address(device, &input) })
                    .vertex_stride(12)
                    .max_vertex(primitives * 3 - 1)
                    .index_type(vk::IndexType::NONE_KHR),
            })];
        let mut build = vk::AccelerationStructureBuildGeometryInfoKHR::default()
            .ty(vk::AccelerationStructureTypeKHR::BOTTOM_LEVEL)
            .flags(vk::BuildAccelerationStructureFlagsKHR::ALLOW_COMPACTION)
            .mode(vk::BuildAccelerationStructureModeKHR::BUILD)
            .geometries(&geometry);
        let mut sizes = vk::AccelerationStructureBuildSizesInfoKHR::default();
        // SAFETY: a valid build description on a device with the extension enabled.
        unsafe {
            loader.get_acceleration_structure_build_sizes(
                vk::AccelerationStructureBuildTypeKHR::DEVICE,
                &build,
                &[primitives],
                &mut sizes,
            )
        };

        // Frame 1: the BLAS and its scratch, transient buffers of one unknown-flags heap.
        let mut pool = TransientPool::new(Arc::clone(device), "ray tracing transients").unwrap();
        let write = as_use(AccessFlags::ACCELERATION_STRUCTURE_WRITE);
        let read_write =
            as_use(AccessFlags::ACCELERATION_STRUCTURE_READ | AccessFlags::ACCELERATION_STRUCTURE_WRITE);
        let frame1 = [
            TransientRequest::Buffer {
                name: "blas storage".into(),
                size: sizes.acceleration_structure_size,
                usage: BufferUsage::ACCELERATION_STRUCTURE_STORAGE | BufferUsage::DEVICE_ADDRESS,
                passes: 0..=0,
                uses: (write, read_write),
            },
            TransientRequest::Buffer {
                name: "blas scratch".into(),
                size: sizes.build_scratch_size,
                usage: BufferUsage::STORAGE | BufferUsage::DEVICE_ADDRESS,
                passes: 0..=0,
                uses: (Use::AccelerationStructureScratch, Use::AccelerationStructureScratch),
            },
        ];
        let frame = pool.begin_frame(&frame1).unwrap();
        let (storage, scratch) = (frame.buffer(0).unwrap(), frame.buffer(1).unwrap());
        assert_eq!(storage.memory().0, scratch.memory().0, "one heap");
        assert_eq!(storage.memory().1 % 256, 0, "acceleration-structure storage is placed at 256 B");
        let scratch_alignment = device.scratch_alignment().max(1);
        assert_eq!(address(device, scratch) % scratch_alignment, 0, "scratch at the device's alignment");
        let frame1_bytes: Vec<(vk::DeviceMemory, u64, u64)> = [storage, scratch]
            .iter()
            .map(|b| (b.memory().0, b.memory().1, b.memory().1 + b.size()))
            .collect();
        let create = vk::AccelerationStructureCreateInfoKHR::default()
            .buffer(storage.raw())
            .offset(0)
            .size(sizes.acceleration_structure_size)
            .ty(vk::AccelerationStructureTypeKHR::BOTTOM_LEVEL);
        // SAFETY: the storage buffer is live, has ACCELERATION_STRUCTURE_STORAGE usage and holds
        // `size` bytes from offset 0; the structure is destroyed below, after the GPU used it.
        let blas = unsafe { loader.create_acceleration_structure(&create, None) }.unwrap();
        let info = vk::QueryPoolCreateInfo::default()
            .query_type(vk::QueryType::ACCELERATION_STRUCTURE_COMPACTED_SIZE_KHR)
            .query_count(1);
        // SAFETY: a valid query pool description; destroyed below after the wait.
        let queries = unsafe { device.raw().create_query_pool(&info, None) }.unwrap();
        build = build
            .dst_acceleration_structure(blas)
            .scratch_data(vk::DeviceOrHostAddressKHR { device_address: address(device, scratch) });
        let ranges = [vk::AccelerationStructureBuildRangeInfoKHR::default().primitive_count(primitives)];
        let submission = context
            .submit(&[], |rec| {
                pool.record_pass_start(rec, &frame, 0).unwrap();
                let cmd = rec.raw();
                // SAFETY: `cmd` is recording outside a render pass on this device; the
                // structure, its storage, the scratch (at the device's alignment) and the input
                // are live until the wait below; the query pool is reset before its write.
                unsafe {
                    device.raw().cmd_reset_query_pool(cmd, queries, 0, 1);
                    loader.cmd_build_acceleration_structures(cmd, &[build], &[&ranges]);
                }
                rec.memory_barrier(MemoryDependency {
                    src_stages: vk::PipelineStageFlags2::ACCELERATION_STRUCTURE_BUILD_KHR,
                    src_access: vk::AccessFlags2::ACCELERATION_STRUCTURE_WRITE_KHR,
                    dst_stages: vk::PipelineStageFlags2::ACCELERATION_STRUCTURE_BUILD_KHR,
                    dst_access: vk::AccessFlags2::ACCELERATION_STRUCTURE_READ_KHR,
                })
                .unwrap();
                // SAFETY: as above; the build is ordered before this read by the barrier.
                unsafe {
                    loader.cmd_write_acceleration_structures_properties(
                        cmd,
                        &[blas],
                        vk::QueryType::ACCELERATION_STRUCTURE_COMPACTED_SIZE_KHR,
                        queries,
                        0,
                    )
                };
            })
            .unwrap();
        context.wait(submission).unwrap();
        let mut compacted = [0u64; 1];
        // SAFETY: the query was written by the submission waited for above.
        unsafe {
            device.raw().get_query_pool_results(
                queries,
                0,
                &mut compacted,
                vk::QueryResultFlags::TYPE_64 | vk::QueryResultFlags::WAIT,
            )
        }
        .unwrap();
        println!(
            "BLAS of {primitives} triangles: {} B, scratch {} B, compacted {} B",
            sizes.acceleration_structure_size, sizes.build_scratch_size, compacted[0]
        );
        assert!(
            compacted[0] > 0 && compacted[0] <= sizes.acceleration_structure_size,
            "a real build reports its compacted size: {} of {}",
            compacted[0],
            sizes.acceleration_structure_size
        );
        // SAFETY: the GPU finished with both (waited above); neither is used again.
        unsafe {
            loader.destroy_acceleration_structure(blas, None);
            device.raw().destroy_query_pool(queries, None);
        }
        pool.end_frame(frame);

        // Frame 2: terrain vertices placed over the same bytes, written and drawn.
        let vertices = terrain();
        let bytes: Vec<u8> = vertices.iter().flat_map(|f| f.to_le_bytes()).collect();
        let frame2 = [TransientRequest::Buffer {
            name: "terrain vertices".into(),
            size: bytes.len() as u64,
            usage: BufferUsage::VERTEX | BufferUsage::COPY_DST,
            passes: 0..=1,
            uses: (Use::TransferDst, Use::VertexRead),
        }];
        let frame = pool.begin_frame(&frame2).unwrap();
        let terrain_buffer = frame.buffer(0).unwrap();
        let (memory, start) = terrain_buffer.memory();
        let end = start + terrain_buffer.size();
        assert!(
            frame1_bytes.iter().any(|&(m, s, e)| m == memory && s < end && start < e),
            "the terrain lies over the BLAS's bytes: {frame1_bytes:?} vs {start}..{end}"
        );
        let program = GraphicsProgram::new(
            device,
            "terrain",
            &shaders::QUADS_VERT,
            &shaders::QUADS_FRAG,
            24,
            &[
                VertexAttribute { location: 0, format: vk::Format::R32G32_SFLOAT, offset: 0 },
                VertexAttribute { location: 1, format: vk::Format::R32G32B32A32_SFLOAT, offset: 8 },
            ],
            vk::Format::R8G8B8A8_UNORM,
            0,
        )
        .unwrap();
        let usage = ImageUsage::COLOR_ATTACHMENT | ImageUsage::COPY_SRC;
        let image = device
            .create_image(&ImageDesc::new_2d("terrain target", Format::R8G8B8A8Unorm, SIDE, SIDE, usage))
            .unwrap();
        let view = image.create_view(0..1).unwrap();
        let pixels = device
            .create_buffer(
                &BufferDesc::new("terrain pixels", u64::from(SIDE * SIDE * 4), BufferUsage::COPY_DST)
                    .with_intent(MemoryIntent::Readback),
            )
            .unwrap();
        let mut tracker = ResourceTracker::new(TrackerOptions::default());
        let image_id = tracker.track_image(&image, vk::ImageLayout::UNDEFINED).unwrap();
        let pixels_id = tracker.track_buffer(&pixels).unwrap();
        let (index, family) = (device.index(), device.universal_queue().family());
        let submission = context
            .submit(&[], |rec| {
                // Pass 0: the upload (after the BLAS's last uses of these bytes).
                pool.record_pass_start(rec, &frame, 0).unwrap();
                for (k, chunk) in bytes.chunks(65536).enumerate() {
                    rec.update_buffer(terrain_buffer, (k * 65536) as u64, chunk).unwrap();
                }
                rec.memory_barrier(MemoryDependency {
                    src_stages: vk::PipelineStageFlags2::ALL_TRANSFER,
                    src_access: vk::AccessFlags2::TRANSFER_WRITE,
                    dst_stages: vk::PipelineStageFlags2::VERTEX_ATTRIBUTE_INPUT,
                    dst_access: vk::AccessFlags2::VERTEX_ATTRIBUTE_READ,
                })
                .unwrap();
                // Pass 1: the draw.
                pool.record_pass_start(rec, &frame, 1).unwrap();
                let mut batch = tracker.batch(index, family);
                batch.declare_discard(image_id, Region::Whole, Use::ColorAttachmentWrite).unwrap();
                let flush = batch.flush();
                tracker.record(rec, &flush.barriers).unwrap();
                program
                    .render(rec, &view, [SIDE; 2], [0.0; 4], |pass| {
                        pass.bind_vertex_buffer(terrain_buffer, 0).unwrap();
                        pass.draw(CELLS * CELLS * 6, 1).unwrap();
                    })
                    .unwrap();
                let mut batch = tracker.batch(index, family);
                batch
                    .declare(image_id, Region::Whole, Use::TransferSrc)
                    .unwrap()
                    .declare(pixels_id, Region::Whole, Use::TransferDst)
                    .unwrap();
                let flush = batch.flush();
                tracker.record(rec, &flush.barriers).unwrap();
                rec.copy_image_to_buffer(&image, vk::ImageLayout::TRANSFER_SRC_OPTIMAL, &pixels).unwrap();
                let mut batch = tracker.batch(index, family);
                batch.declare(pixels_id, Region::Whole, Use::HostRead).unwrap();
                let flush = batch.flush();
                tracker.record(rec, &flush.barriers).unwrap();
            })
            .unwrap();
        context.wait(submission).unwrap();
        pool.end_frame(frame);
        let mut out = vec![0u8; (SIDE * SIDE * 4) as usize];
        pixels.read(0, &mut out).unwrap();
        let px = SIDE / CELLS;
        for j in 0..CELLS {
            for i in 0..CELLS {
                let (x, y) = (i * px + px / 2, j * px + px / 2);
                let at = ((y * SIDE + x) * 4) as usize;
                let want = cell_colour(i, j).map(|c| (c * 255.0).round() as i32);
                let got = &out[at..at + 4];
                for c in 0..4 {
                    assert!(
                        (i32::from(got[c]) - want[c]).abs() <= 2,
                        "terrain cell ({i}, {j}) at ({x}, {y}): {got:?} vs {want:?}"
                    );
                }
            }
        }
        for id in [image_id, pixels_id] {
            tracker.untrack(index, id).unwrap();
        }
    });
}

#[test]
fn ray_tracing_usages_get_their_floors_and_a_missing_extension_is_a_typed_error() {
    with_gpu(|set| {
        let device = &set.devices()[0];
        let storage = BufferUsage::ACCELERATION_STRUCTURE_STORAGE | BufferUsage::DEVICE_ADDRESS;
        for i in 0..4u64 {
            // Odd sizes so that a plain 16 B placement would leave unaligned neighbours.
            let b = device.create_buffer(&BufferDesc::new(format!("as {i}"), 100 + i * 3, storage)).unwrap();
            assert_eq!(b.memory().1 % 256, 0);
            let s = device
                .create_buffer(&BufferDesc::new(
                    format!("scratch {i}"),
                    100 + i * 5,
                    BufferUsage::STORAGE | BufferUsage::DEVICE_ADDRESS,
                ))
                .unwrap();
            assert_eq!(address(device, &s) % device.scratch_alignment().max(1), 0);
        }
        let sbt =
            BufferDesc::new("sbt", 256, BufferUsage::SHADER_BINDING_TABLE | BufferUsage::DEVICE_ADDRESS);
        match device.create_buffer(&sbt) {
            Ok(b) => {
                assert!(device.features().ray_tracing_pipeline);
                assert_eq!(b.memory().1 % 64, 0, "shader binding tables at 64 B");
            }
            Err(e) => {
                assert!(!device.features().ray_tracing_pipeline);
                assert!(matches!(e, MemoryError::Unsatisfiable { .. }), "{e}");
                assert!(e.to_string().contains("VK_KHR_ray_tracing_pipeline"), "{e}");
            }
        }
    });
}
