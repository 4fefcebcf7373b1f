//! The bridge on lavapipe (or any Vulkan adapter) through wgpu's Vulkan backend, with the
//! validation layer and synchronization validation on both wgpu's and residency's calls: opening,
//! the software path when sparse residency is not there, and residency's buffers and images used
//! by a wgpu compute pipeline and dropped in either order with work in flight.

mod common;

use residency_vulkan::{
    BufferInit, BufferPool, BufferPoolDesc, BufferPoolUsage, BufferUsage, Format, ImageDesc, ImageUsage,
    MemoryIntent, Uploader, ValidationMode,
};
use residency_wgpu::{Bridge, BridgeDesc, ImportReason, PathSupport, QueueSharing, SparseLack};
use std::sync::{Arc, Mutex};

/// One test at a time: the leak counters are process-wide.
static SERIAL: Mutex<()> = Mutex::new(());

fn desc() -> BridgeDesc {
    let validation = match std::env::var("RESIDENCY_VALIDATION").ok().and_then(|v| ValidationMode::parse(&v))
    {
        Some(ValidationMode::Off) => ValidationMode::Off,
        _ => ValidationMode::Synchronization,
    };
    BridgeDesc {
        validation,
        require_validation: residency_vulkan::testing::gpu_required(),
        ..BridgeDesc::default()
    }
}

/// Opens the bridge (sharing the queue where there is one), runs `test`, then checks that the
/// layer reported nothing, that nothing leaked and that the device was destroyed.
fn with_bridge(desc: BridgeDesc, test: impl FnOnce(&Bridge)) {
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    // SAFETY: the tests submit wgpu work only through `Bridge::submit` or on this one thread,
    // between residency calls.
    let bridge = match unsafe { residency_wgpu::open_sharing_queue(&desc) } {
        Ok(bridge) => bridge,
        Err(e) => {
            assert!(!residency_vulkan::testing::gpu_required(), "RESIDENCY_REQUIRE_GPU=1 but: {e}");
            eprintln!("\n**** SKIPPED: {e} ****\n");
            return;
        }
    };
    common::run_checked(bridge, test);
}

#[test]
fn the_bridge_opens_one_device_for_wgpu_and_residency() {
    with_bridge(desc(), |bridge| {
        // The same VkDevice on both sides.
        // SAFETY: read-only look at the hal device.
        let hal = unsafe { bridge.device().as_hal::<wgpu::hal::api::Vulkan>() }.unwrap();
        assert_eq!(hal.raw_device().handle(), bridge.residency().raw().handle());
        drop(hal);
        let features = bridge.residency().features();
        assert!(features.timeline_semaphore);
        match bridge.path() {
            PathSupport::Hardware => assert!(features.sparse_binding && features.sparse_residency_image_2d),
            PathSupport::SoftwareOnly(why) => {
                assert!(!features.sparse_binding);
                eprintln!("software path only: {why}");
            }
        }
        if bridge.queue_sharing() == QueueSharing::Shared {
            // SAFETY: no other thread makes residency calls.
            assert!(matches!(residency_wgpu::open(&desc()), Err(residency_wgpu::OpenError::OneQueue)));
        }
    });
}

#[test]
fn the_validation_layer_hears_calls_on_the_shared_device() {
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    // SAFETY: single-threaded use (see `with_bridge`).
    let Ok(bridge) = (unsafe { residency_wgpu::open_sharing_queue(&desc()) }) else {
        assert!(!residency_vulkan::testing::gpu_required());
        return;
    };
    let info = ash::vk::BufferCreateInfo::default()
        .size(0)
        .usage(ash::vk::BufferUsageFlags::TRANSFER_DST)
        .sharing_mode(ash::vk::SharingMode::EXCLUSIVE);
    let raw = bridge.residency().raw();
    // SAFETY: deliberately invalid (size 0) to trigger validation; lavapipe and NVIDIA accept the
    // call, and any buffer created is destroyed at once.
    if let Ok(buffer) = unsafe { raw.create_buffer(&info, None) } {
        // SAFETY: the buffer was just created on this device and is unused.
        unsafe { raw.destroy_buffer(buffer, None) };
    }
    if residency_vulkan::testing::gpu_required() && desc().validation != ValidationMode::Off {
        let messages = bridge.validation_log().messages();
        assert!(messages.iter().any(|m| m.id.contains("VUID-VkBufferCreateInfo-size-00912")), "{messages:?}");
    }
}

#[test]
fn an_adapter_without_sparse_residency_takes_the_software_path() {
    with_bridge(desc().with_sparse(false), |bridge| {
        assert_eq!(bridge.path(), &PathSupport::SoftwareOnly(SparseLack::NotRequested));
        let features = bridge.residency().features();
        assert!(!features.sparse_binding && !features.shader_resource_residency);
        assert!(bridge.residency().sparse_queue().is_none());
    });
}

const SHADER: &str = r#"
@group(0) @binding(0) var<storage, read> src: array<u32>;
@group(0) @binding(1) var<storage, read_write> dst: array<u32>;
@group(0) @binding(2) var tex: texture_2d<f32>;

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) id: vec3<u32>) {
    let i = id.x;
    if (i >= arrayLength(&dst)) { return; }
    let t = textureLoad(tex, vec2<i32>(i32(i % 16u), i32((i / 16u) % 16u)), 0);
    dst[i] = src[i] * 2u + u32(round(t.x * 255.0));
}
"#;

const N: u64 = 1024;

/// The compute pipeline of WGSL `source` (entry point `main`, layout from the shader).
fn compute_pipeline(bridge: &Bridge, label: &str, source: String) -> wgpu::ComputePipeline {
    let module = bridge.device().create_shader_module(wgpu::ShaderModuleDescriptor {
        label: Some(label),
        source: wgpu::ShaderSource::Wgsl(source.into()),
    });
    bridge.device().create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
        label: Some(label),
        layout: None,
        module: &module,
        entry_point: Some("main"),
        compilation_options: Default::default(),
        cache: None,
    })
}

/// The compute pipeline of `SHADER`.
fn pipeline(bridge: &Bridge) -> wgpu::ComputePipeline {
    compute_pipeline(bridge, "double", SHADER.into())
}

/// A compute pass of `pipeline` with `groups` (group `i` at index `i`) over `invocations`
/// invocations in workgroups of 64, recorded in a new encoder.
fn record(
    bridge: &Bridge,
    pipeline: &wgpu::ComputePipeline,
    groups: &[&wgpu::BindGroup],
    invocations: u32,
) -> wgpu::CommandEncoder {
    let mut encoder = bridge.device().create_command_encoder(&Default::default());
    {
        let mut pass = encoder.begin_compute_pass(&Default::default());
        pass.set_pipeline(pipeline);
        for (i, group) in groups.iter().enumerate() {
            pass.set_bind_group(i as u32, *group, &[]);
        }
        pass.dispatch_workgroups(invocations.div_ceil(64), 1, 1);
    }
    encoder
}

/// One dispatch of `pipeline` over `src`, `dst` and `view`, recorded.
fn encode(
    bridge: &Bridge,
    pipeline: &wgpu::ComputePipeline,
    src: &residency_wgpu::SharedBuffer,
    dst: &residency_wgpu::SharedBuffer,
    view: &wgpu::TextureView,
) -> wgpu::CommandBuffer {
    let group = bridge.device().create_bind_group(&wgpu::BindGroupDescriptor {
        label: None,
        layout: &pipeline.get_bind_group_layout(0),
        entries: &[
            wgpu::BindGroupEntry { binding: 0, resource: src.wgpu().as_entire_binding() },
            wgpu::BindGroupEntry { binding: 1, resource: dst.wgpu().as_entire_binding() },
            wgpu::BindGroupEntry { binding: 2, resource: wgpu::BindingResource::TextureView(view) },
        ],
    });
    let encoder = record(bridge, pipeline, &[&group], N as u32);
    encoder.finish()
}

/// Residency's resources imported into wgpu: a source buffer placed in a pool of unknown flags
/// (written by residency's uploader), a destination buffer from the general heaps, a texture;
/// a compute pass reads and writes them; returns them with the work still in flight.
fn dispatch(
    bridge: &Bridge,
    pool: &BufferPool,
) -> (residency_wgpu::SharedBuffer, residency_wgpu::SharedBuffer, wgpu::Texture) {
    let device = bridge.residency();
    let usage = BufferUsage::STORAGE | BufferUsage::COPY_SRC | BufferUsage::COPY_DST;
    let src = pool.init_buffer(&BufferInit::new("wgpu src", N * 4).with_usage(usage)).unwrap();
    let uploader = Uploader::new(device, "wgpu uploads", 1 << 16).unwrap();
    let values: Vec<u32> = (0..N as u32).collect();
    uploader.write_buffer(&src, 0, bytemuck_bytes(&values)).unwrap();
    uploader.wait_idle().unwrap();
    uploader.destroy().unwrap();
    let src = bridge.import_buffer(src, wgpu::BufferUsages::STORAGE).unwrap();
    assert_eq!(src.wgpu().size(), N * 4);
    let dst = device.create_buffer(&residency_vulkan::BufferDesc::new("wgpu dst", N * 4, usage)).unwrap();
    let dst = bridge.import_buffer(dst, wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_SRC).unwrap();
    let image = device
        .create_image(&ImageDesc::new_2d(
            "wgpu tex",
            Format::R8G8B8A8Unorm,
            16,
            16,
            ImageUsage::SAMPLED | ImageUsage::COPY_DST,
        ))
        .unwrap();
    let tex = bridge
        .import_texture(
            image,
            wgpu::TextureFormat::Rgba8Unorm,
            wgpu::TextureUsages::TEXTURE_BINDING | wgpu::TextureUsages::COPY_DST,
        )
        .unwrap();
    let texels: Vec<u8> = (0..256u32).flat_map(|i| [(i % 7) as u8, 0, 0, 255]).collect();
    bridge.write_texture(
        wgpu::TexelCopyTextureInfo {
            texture: &tex,
            mip_level: 0,
            origin: wgpu::Origin3d::ZERO,
            aspect: wgpu::TextureAspect::All,
        },
        &texels,
        wgpu::TexelCopyBufferLayout { offset: 0, bytes_per_row: Some(64), rows_per_image: None },
        wgpu::Extent3d { width: 16, height: 16, depth_or_array_layers: 1 },
    );

    let view = tex.create_view(&Default::default());
    let commands = encode(bridge, &pipeline(bridge), &src, &dst, &view);
    bridge.submit([commands]).unwrap();
    (src, dst, tex)
}

fn bytemuck_bytes(values: &[u32]) -> &[u8] {
    // SAFETY: u32 has no padding and any byte is a valid u8; the length is the same memory.
    unsafe { std::slice::from_raw_parts(values.as_ptr().cast(), std::mem::size_of_val(values)) }
}

fn expected(i: u32) -> u32 {
    i * 2 + (i % 256) % 7
}

#[test]
fn residency_buffers_and_textures_serve_a_wgpu_pipeline_and_drop_in_either_order() {
    with_bridge(desc(), |bridge| {
        let pool = Arc::new(
            BufferPool::new(
                Arc::clone(bridge.residency()),
                BufferPoolDesc::new("wgpu pool", BufferPoolUsage::Unknown)
                    .with_memory(MemoryIntent::DeviceLocal),
            )
            .unwrap(),
        );

        // wgpu's handles first, with the dispatch still in flight; then residency reads the
        // result back and drops its handles.
        let (src, dst, tex) = dispatch(bridge, &pool);
        let (src_wgpu, src_res) = src.into_parts();
        let (dst_wgpu, dst_res) = dst.into_parts();
        drop((src_wgpu, dst_wgpu, tex));
        bridge.device().poll(wgpu::PollType::wait_indefinitely()).unwrap();
        let out = bridge.residency().read_back(&dst_res, 0, N * 4).unwrap();
        let out: Vec<u32> = out.chunks(4).map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect();
        for (i, v) in out.iter().enumerate() {
            assert_eq!(*v, expected(i as u32), "element {i}");
        }
        drop((src_res, dst_res));

        // Residency's handles first, with the dispatch in flight: wgpu keeps the buffers alive
        // until its work completes and its handles are gone.
        let (src, dst, tex) = dispatch(bridge, &pool);
        let (src_wgpu, src_res) = src.into_parts();
        let (dst_wgpu, dst_res) = dst.into_parts();
        drop((src_res, dst_res));
        drop((src_wgpu, dst_wgpu, tex));

        // Everything dropped at once, still in flight.
        drop(dispatch(bridge, &pool));
        bridge.device().poll(wgpu::PollType::wait_indefinitely()).unwrap();
        drop(pool);
    });
}

#[test]
fn imports_that_cannot_be_wgpu_resources_are_refused_and_change_nothing() {
    with_bridge(desc(), |bridge| {
        let device = bridge.residency();
        // A range of a known-flags pool page.
        let known = BufferPool::new(
            Arc::clone(device),
            BufferPoolDesc::new("known", BufferPoolUsage::Known(BufferUsage::STORAGE))
                .with_memory(MemoryIntent::DeviceLocal),
        )
        .unwrap();
        let range = known.init_buffer(&BufferInit::new("range", 256)).unwrap();
        let err = bridge.import_buffer(range, wgpu::BufferUsages::STORAGE).unwrap_err();
        assert_eq!(err.reason, ImportReason::Range);
        known.free_buffer(*err.resource).unwrap();

        let usage = BufferUsage::STORAGE;
        let make = || device.create_buffer(&residency_vulkan::BufferDesc::new("plain", 256, usage)).unwrap();
        let err = bridge.import_buffer(make(), wgpu::BufferUsages::VERTEX).unwrap_err();
        assert!(matches!(err.reason, ImportReason::Usage(_)), "{:?}", err.reason);
        let err = bridge.import_buffer(*err.resource, wgpu::BufferUsages::MAP_READ).unwrap_err();
        assert!(matches!(err.reason, ImportReason::Unsupported(_)), "{:?}", err.reason);
        drop(err.resource);

        let image = device
            .create_image(&ImageDesc::new_2d("img", Format::R8G8B8A8Unorm, 16, 16, ImageUsage::SAMPLED))
            .unwrap();
        let err = bridge
            .import_texture(image, wgpu::TextureFormat::Bgra8Unorm, wgpu::TextureUsages::TEXTURE_BINDING)
            .unwrap_err();
        assert!(matches!(err.reason, ImportReason::Format { .. }), "{:?}", err.reason);
        let err = bridge
            .import_texture(
                *err.resource,
                wgpu::TextureFormat::Rgba8Unorm,
                wgpu::TextureUsages::STORAGE_BINDING,
            )
            .unwrap_err();
        assert!(matches!(err.reason, ImportReason::Usage(_)), "{:?}", err.reason);
        drop(err.resource);
    });
}

#[test]
fn wgpu_and_residency_submissions_are_ordered_by_timelines_without_host_waits() {
    with_bridge(desc(), |bridge| {
        let device = bridge.residency();
        let usage = BufferUsage::STORAGE | BufferUsage::COPY_SRC | BufferUsage::COPY_DST;
        let timeline = bridge.create_timeline("wgpu frames").unwrap();
        let uploader = Uploader::new(device, "ordered uploads", 1 << 16).unwrap();
        // The texture of a first dispatch (written by wgpu), then the pipeline again.
        let warm_up = BufferPool::new(
            Arc::clone(device),
            BufferPoolDesc::new("warm-up", BufferPoolUsage::Unknown).with_memory(MemoryIntent::DeviceLocal),
        )
        .unwrap();
        let (_, _, tex) = dispatch(bridge, &warm_up);
        let pipeline = pipeline(bridge);
        let view = tex.create_view(&Default::default());
        for frame in 1..=3u32 {
            // Residency uploads (submitted, not waited for); wgpu's frame waits for them on the GPU.
            let src = device
                .create_buffer(&residency_vulkan::BufferDesc::new("ordered src", N * 4, usage))
                .unwrap();
            let values: Vec<u32> = (0..N as u32).map(|i| i + frame).collect();
            uploader.write_buffer(&src, 0, bytemuck_bytes(&values)).unwrap();
            uploader.flush().unwrap();
            let src = bridge.import_buffer(src, wgpu::BufferUsages::STORAGE).unwrap();
            let dst = device
                .create_buffer(&residency_vulkan::BufferDesc::new("ordered dst", N * 4, usage))
                .unwrap();
            let dst = bridge.import_buffer(dst, wgpu::BufferUsages::STORAGE).unwrap();
            bridge.wait_for(&device.submitted_work()).unwrap();
            let commands = encode(bridge, &pipeline, &src, &dst, &view);
            // wgpu's frame signals the timeline; residency's uses of the buffers end there.
            let (_, point) = bridge.submit_signalling([commands], &timeline).unwrap();
            assert_eq!(timeline.last(), u64::from(frame));
            src.residency().used_until(point).unwrap();
            dst.residency().used_until(point).unwrap();
            // Only to check the result: wait for the point, then residency reads dst back.
            device.wait_until(&point).unwrap();
            let out = device.read_back(dst.residency(), 0, N * 4).unwrap();
            for (i, c) in out.chunks(4).enumerate() {
                let v = u32::from_le_bytes([c[0], c[1], c[2], c[3]]);
                assert_eq!(v, (i as u32 + frame) * 2 + (i as u32 % 256) % 7, "frame {frame}, element {i}");
            }
        }
        uploader.destroy().unwrap();
    });
}

/// A compute shader that writes the feedback of one sample per invocation (u, v, lod, min-LOD).
const FEEDBACK_VIEW: &str = r#"
@group(0) @binding(0) var<storage, read_write> residency_feedback: array<atomic<u32>>;
@group(0) @binding(1) var<storage, read> residency_table: array<u32>;
@group(0) @binding(2) var<storage, read> samples: array<vec4<f32>>;

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) id: vec3<u32>) {
    if (id.x >= arrayLength(&samples)) { return; }
    let s = samples[id.x];
    residency_feedback_write(0u, 0u, s.xy, s.z, u32(s.w));
}
"#;

#[test]
fn wgsl_feedback_requests_exactly_the_tiles_of_residencys_cpu_model() {
    use residency_core::streaming::classify_sample;
    use residency_vulkan::sparse::{ImageId, SparseImageDesc, SparseImageLayout};
    use residency_vulkan::streaming::{FeedbackBuffer, FeedbackDesc, FeedbackLayout, RequestKind};
    with_bridge(desc(), |bridge| {
        let device = bridge.residency();
        let desc = SparseImageDesc::new_2d(Format::R8G8B8A8Unorm, 16384, 16384);
        let layout = SparseImageLayout::for_device(&desc, device.profile()).unwrap();
        let id = ImageId(7);
        let mut feedback = FeedbackLayout::new(FeedbackDesc::default(), &[(id, &layout)]).unwrap();
        assert!(feedback.set_lod_warning(id, 8, 64));
        // residency-vulkan's tests/feedback.rs view: 32 × 32 samples, LODs 0.1–3.1, a third seeing
        // their own mip resident (LOD warnings), the rest nothing (misses).
        let samples = residency_vulkan::testing::known_feedback_view();
        let frame = 42;
        let mut expected = FeedbackBuffer::new(&feedback, frame);
        for s in &samples {
            if let Some((tile, kind)) =
                classify_sample(&feedback.images()[0], 0, [s[0], s[1], 0.0], s[2], s[3] as u8)
            {
                expected.record(&feedback, 0, tile, kind);
            }
        }

        // Residency's buffers: the feedback buffer (reset by an upload), the table and the
        // samples (written by the host), all imported into wgpu.
        let bytes = feedback.buffer_bytes();
        let usage = BufferUsage::STORAGE | BufferUsage::COPY_SRC | BufferUsage::COPY_DST;
        let fb = device.create_buffer(&residency_vulkan::BufferDesc::new("feedback", bytes, usage)).unwrap();
        let mut initial = vec![0u32; (bytes / 4) as usize];
        initial[..4].copy_from_slice(&feedback.header_words(frame));
        let uploader = Uploader::new(device, "feedback reset", bytes * 2).unwrap();
        uploader.write_buffer(&fb, 0, bytemuck_bytes(&initial)).unwrap();
        uploader.flush().unwrap();
        let host = |name: &str, words: &[u32]| {
            let mut b = device
                .create_buffer(
                    &residency_vulkan::BufferDesc::new(name, words.len() as u64 * 4, BufferUsage::STORAGE)
                        .with_intent(MemoryIntent::Upload),
                )
                .unwrap();
            b.write(0, bytemuck_bytes(words)).unwrap();
            bridge.import_buffer(b, wgpu::BufferUsages::STORAGE).unwrap()
        };
        let table = host("image table", &feedback.image_table());
        let sample_words: Vec<u32> = samples.iter().flatten().map(|f| f.to_bits()).collect();
        let input = host("samples", &sample_words);
        let fb = bridge.import_buffer(fb, wgpu::BufferUsages::STORAGE).unwrap();

        let source = format!("{FEEDBACK_VIEW}\n{}", residency_wgpu::wgsl::FEEDBACK);
        let pipeline = compute_pipeline(bridge, "feedback view", source);
        let group = bridge.device().create_bind_group(&wgpu::BindGroupDescriptor {
            label: None,
            layout: &pipeline.get_bind_group_layout(0),
            entries: &[
                wgpu::BindGroupEntry { binding: 0, resource: fb.wgpu().as_entire_binding() },
                wgpu::BindGroupEntry { binding: 1, resource: table.wgpu().as_entire_binding() },
                wgpu::BindGroupEntry { binding: 2, resource: input.wgpu().as_entire_binding() },
            ],
        });
        let encoder = record(bridge, &pipeline, &[&group], samples.len() as u32);
        // wgpu waits for the reset upload on the GPU and signals the timeline.
        bridge.wait_for(&device.submitted_work()).unwrap();
        let timeline = bridge.create_timeline("feedback frame").unwrap();
        let (_, point) = bridge.submit_signalling([encoder.finish()], &timeline).unwrap();
        for b in [&fb, &table, &input] {
            b.residency().used_until(point).unwrap();
        }
        device.wait_until(&point).unwrap();
        let gpu = device.read_back(fb.residency(), 0, bytes).unwrap();

        let from_gpu = feedback.decode(&gpu, frame).unwrap();
        let from_cpu = feedback.decode(&expected.bytes(), frame).unwrap();
        assert!(from_cpu.requests.iter().any(|r| r.kind == RequestKind::Miss));
        assert!(from_cpu.requests.iter().any(|r| r.kind == RequestKind::LodWarning));
        assert_eq!(from_gpu.requests, from_cpu.requests, "the WGSL requested exactly the CPU model's tiles");
        assert_eq!(from_gpu.records, from_cpu.records);
        assert!(!from_gpu.overflowed);
        uploader.destroy().unwrap();
    });
}

/// A compute shader that samples either path at (u, v, lod) per invocation.
const SAMPLE_VIEW: &str = r#"
@group(1) @binding(0) var<storage, read> points: array<vec4<f32>>;
@group(1) @binding(1) var<storage, read_write> colours: array<vec4<f32>>;

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) id: vec3<u32>) {
    if (id.x >= arrayLength(&points)) { return; }
    let p = points[id.x];
    colours[id.x] = residency_sample(p.xy, p.z, vec4<f32>(-1.0));
}
"#;

#[test]
fn wgsl_software_sampling_reads_where_residencys_cpu_model_says() {
    use residency_core::tiles::{
        AtlasLayout, HeapIndex, Indirection, LayoutLimits, MipTailModel, PageTable, PhysicalTile,
        SparseDimension, SparseFormatInfo, SparseImageDesc, SparseImageLayout, TileCoord,
    };
    use residency_wgpu::wgsl::{self, ShaderPath};
    with_bridge(desc(), |bridge| {
        // residency-core's tests/tiles_indirection.rs case: 512², 128-texel tiles, 10 mips; the
        // chain from the coarsest mip to mip 1 (tile 0,0) and mip 0's tile (1,1) resident.
        let mut info = SparseFormatInfo::standard(Format::R8G8B8A8Unorm, SparseDimension::D2).unwrap();
        info.mip_tail_model = MipTailModel::NoTail;
        let image_desc = SparseImageDesc::new_2d(Format::R8G8B8A8Unorm, 512, 512);
        let image_desc = image_desc.with_mip_levels(image_desc.full_mip_chain());
        let layout = SparseImageLayout::new(&image_desc, &info, &LayoutLimits::unbounded()).unwrap();
        let atlas_layout = AtlasLayout::new(128, 4, 64, 16).unwrap();
        let mut indirection = Indirection::new(&layout, atlas_layout).unwrap();
        let mut table = PageTable::new(&layout);
        let tile = |mip, x, y| layout.tile_index(TileCoord { layer: 0, mip, x, y, z: 0 }).unwrap();
        let physical = |i: u32| PhysicalTile { heap: HeapIndex(i / 16), tile: i % 16 };
        table.map(tile(0, 1, 1), physical(0)).unwrap();
        for (n, mip) in (1..).zip((1..10).rev()) {
            table.map(tile(mip, 0, 0), physical(n)).unwrap();
        }
        indirection.update(&table).unwrap();

        // The indirection and an atlas whose every texel holds its own coordinates (x in R, G;
        // y in B, A), as residency images imported into wgpu; a nearest sampler.
        let device = bridge.residency();
        let [iw, ih] = indirection.extent();
        let image = |name: &str, format, w, h| {
            device
                .create_image(&ImageDesc::new_2d(
                    name,
                    format,
                    w,
                    h,
                    ImageUsage::SAMPLED | ImageUsage::COPY_DST,
                ))
                .unwrap()
        };
        let usage = wgpu::TextureUsages::TEXTURE_BINDING | wgpu::TextureUsages::COPY_DST;
        let ind_tex = bridge
            .import_texture(
                image("indirection", Format::R32Uint, iw, ih),
                wgpu::TextureFormat::R32Uint,
                usage,
            )
            .unwrap();
        let [aw, ah] = atlas_layout.extent();
        let atlas_tex = bridge
            .import_texture(
                image("atlas", Format::R8G8B8A8Unorm, aw, ah),
                wgpu::TextureFormat::Rgba8Unorm,
                usage,
            )
            .unwrap();
        let write = |texture: &wgpu::Texture, bytes: &[u8], w: u32, h: u32| {
            bridge.write_texture(
                wgpu::TexelCopyTextureInfo {
                    texture,
                    mip_level: 0,
                    origin: wgpu::Origin3d::ZERO,
                    aspect: wgpu::TextureAspect::All,
                },
                bytes,
                wgpu::TexelCopyBufferLayout { offset: 0, bytes_per_row: Some(w * 4), rows_per_image: None },
                wgpu::Extent3d { width: w, height: h, depth_or_array_layers: 1 },
            )
        };
        write(&ind_tex, bytemuck_bytes(indirection.texels()), iw, ih);
        let atlas: Vec<u8> = (0..ah)
            .flat_map(|y| (0..aw).flat_map(move |x| [x as u8, (x >> 8) as u8, y as u8, (y >> 8) as u8]))
            .collect();
        write(&atlas_tex, &atlas, aw, ah);

        // Points at odd multiples of half a mip-0 texel (never on a texel edge at any mip), at
        // every LOD.
        let mut points = Vec::new();
        for k in 0..24u32 {
            for lod in 0..10u32 {
                let u = (k * 21 % 512) as f32 + 0.5;
                let v = (k * 37 % 512) as f32 + 0.5;
                points.push([u / 512.0, v / 512.0, lod as f32, 0.0]);
            }
        }
        let expected: Vec<Option<[u32; 2]>> = points
            .iter()
            .map(|p| {
                let min_lod = indirection.min_lod([p[0], p[1]]);
                let mip = (p[2] as u32).max(min_lod).min(layout.mip_levels() - 1);
                indirection
                    .sample_position([p[0], p[1]], mip)
                    .map(|(pos, _)| [pos[0].floor() as u32, pos[1].floor() as u32])
            })
            .collect();
        // The coarsest mip covers everything, so every point reads; over several data mips.
        assert!(expected.iter().all(Option::is_some));
        let distinct: std::collections::BTreeSet<_> = expected.iter().collect();
        assert!(distinct.len() > 50, "{} distinct atlas texels", distinct.len());

        let source = format!("{}{SAMPLE_VIEW}", wgsl::prelude(ShaderPath::Software, 0, 0));
        let pipeline = compute_pipeline(bridge, "software view", source);
        let sampler = bridge.device().create_sampler(&wgpu::SamplerDescriptor::default());
        let usage = BufferUsage::STORAGE | BufferUsage::COPY_SRC | BufferUsage::COPY_DST;
        let buffer = |name: &str, bytes: u64| {
            let b = device.create_buffer(&residency_vulkan::BufferDesc::new(name, bytes, usage)).unwrap();
            bridge.import_buffer(b, wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_DST).unwrap()
        };
        let bytes = points.len() as u64 * 16;
        let (input, output) = (buffer("points", bytes), buffer("colours", bytes));
        let point_words: Vec<u32> = points.iter().flatten().map(|f| f.to_bits()).collect();
        bridge.write_buffer(input.wgpu(), 0, bytemuck_bytes(&point_words));
        let ind_view = ind_tex.create_view(&Default::default());
        let atlas_view = atlas_tex.create_view(&Default::default());
        let residency_group = bridge.device().create_bind_group(&wgpu::BindGroupDescriptor {
            label: None,
            layout: &pipeline.get_bind_group_layout(0),
            entries: &[
                wgpu::BindGroupEntry {
                    binding: 0,
                    resource: wgpu::BindingResource::TextureView(&atlas_view),
                },
                wgpu::BindGroupEntry { binding: 1, resource: wgpu::BindingResource::Sampler(&sampler) },
                wgpu::BindGroupEntry { binding: 2, resource: wgpu::BindingResource::TextureView(&ind_view) },
            ],
        });
        let io_group = bridge.device().create_bind_group(&wgpu::BindGroupDescriptor {
            label: None,
            layout: &pipeline.get_bind_group_layout(1),
            entries: &[
                wgpu::BindGroupEntry { binding: 0, resource: input.wgpu().as_entire_binding() },
                wgpu::BindGroupEntry { binding: 1, resource: output.wgpu().as_entire_binding() },
            ],
        });
        let encoder = record(bridge, &pipeline, &[&residency_group, &io_group], points.len() as u32);
        let timeline = bridge.create_timeline("software view").unwrap();
        let (_, point) = bridge.submit_signalling([encoder.finish()], &timeline).unwrap();
        for b in [&input, &output] {
            b.residency().used_until(point).unwrap();
        }
        device.wait_until(&point).unwrap();
        let out = device.read_back(output.residency(), 0, bytes).unwrap();
        for (i, (c, want)) in out.chunks(16).zip(&expected).enumerate() {
            let f = |j: usize| f32::from_le_bytes([c[4 * j], c[4 * j + 1], c[4 * j + 2], c[4 * j + 3]]);
            let byte = |j: usize| (f(j) * 255.0).round() as u32;
            let got = (f(0) >= 0.0).then(|| [byte(0) | byte(1) << 8, byte(2) | byte(3) << 8]);
            assert_eq!(got, *want, "point {i}: {:?}", points[i]);
        }
    });
}

#[test]
fn wgsl_hardware_sampling_is_clamped_by_the_min_lod_map() {
    use residency_wgpu::wgsl::{self, ShaderPath};
    with_bridge(desc(), |bridge| {
        // A 64² texture with 7 mips, mip m filled with the value m; a 4 × 4 min-LOD map whose
        // region (x, y) says min-LOD (x + y) (255, nothing resident, where x + y > 5).
        let wgpu_device = bridge.device();
        let usage = wgpu::TextureUsages::TEXTURE_BINDING | wgpu::TextureUsages::COPY_DST;
        let tex = wgpu_device.create_texture(&wgpu::TextureDescriptor {
            label: Some("mips"),
            size: wgpu::Extent3d { width: 64, height: 64, depth_or_array_layers: 1 },
            mip_level_count: 7,
            sample_count: 1,
            dimension: wgpu::TextureDimension::D2,
            format: wgpu::TextureFormat::Rgba8Unorm,
            usage,
            view_formats: &[],
        });
        for mip in 0..7u32 {
            let side = 64 >> mip;
            let texels = vec![mip as u8; (side * side * 4) as usize];
            bridge.write_texture(
                wgpu::TexelCopyTextureInfo {
                    texture: &tex,
                    mip_level: mip,
                    origin: wgpu::Origin3d::ZERO,
                    aspect: wgpu::TextureAspect::All,
                },
                &texels,
                wgpu::TexelCopyBufferLayout {
                    offset: 0,
                    bytes_per_row: Some(side * 4),
                    rows_per_image: None,
                },
                wgpu::Extent3d { width: side, height: side, depth_or_array_layers: 1 },
            );
        }
        let map = wgpu_device.create_texture(&wgpu::TextureDescriptor {
            label: Some("min-LOD map"),
            size: wgpu::Extent3d { width: 4, height: 4, depth_or_array_layers: 1 },
            mip_level_count: 1,
            sample_count: 1,
            dimension: wgpu::TextureDimension::D2,
            format: wgpu::TextureFormat::R32Uint,
            usage,
            view_formats: &[],
        });
        let min_lod = |x: u32, y: u32| if x + y > 5 { 255 } else { x + y };
        let words: Vec<u32> = (0..4).flat_map(|y| (0..4).map(move |x| min_lod(x, y))).collect();
        bridge.write_texture(
            wgpu::TexelCopyTextureInfo {
                texture: &map,
                mip_level: 0,
                origin: wgpu::Origin3d::ZERO,
                aspect: wgpu::TextureAspect::All,
            },
            bytemuck_bytes(&words),
            wgpu::TexelCopyBufferLayout { offset: 0, bytes_per_row: Some(16), rows_per_image: None },
            wgpu::Extent3d { width: 4, height: 4, depth_or_array_layers: 1 },
        );
        let mut points = Vec::new();
        let mut expected = Vec::new();
        for y in 0..4u32 {
            for x in 0..4u32 {
                for lod in 0..7u32 {
                    points.push([(x as f32 + 0.5) / 4.0, (y as f32 + 0.5) / 4.0, lod as f32, 0.0]);
                    let m = min_lod(x, y);
                    expected.push((m != 255).then(|| lod.max(m)));
                }
            }
        }

        let source = format!("{}{SAMPLE_VIEW}", wgsl::prelude(ShaderPath::Hardware, 0, 0));
        let pipeline = compute_pipeline(bridge, "hardware view", source);
        let sampler = wgpu_device.create_sampler(&wgpu::SamplerDescriptor::default());
        let bytes = points.len() as u64 * 16;
        let buffer = |label| {
            wgpu_device.create_buffer(&wgpu::BufferDescriptor {
                label: Some(label),
                size: bytes,
                usage: wgpu::BufferUsages::STORAGE
                    | wgpu::BufferUsages::COPY_DST
                    | wgpu::BufferUsages::COPY_SRC,
                mapped_at_creation: false,
            })
        };
        let (input, output) = (buffer("points"), buffer("colours"));
        let readback = wgpu_device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("readback"),
            size: bytes,
            usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        let point_words: Vec<u32> = points.iter().flatten().map(|f| f.to_bits()).collect();
        bridge.write_buffer(&input, 0, bytemuck_bytes(&point_words));
        let tex_view = tex.create_view(&Default::default());
        let map_view = map.create_view(&Default::default());
        let groups = [
            wgpu_device.create_bind_group(&wgpu::BindGroupDescriptor {
                label: None,
                layout: &pipeline.get_bind_group_layout(0),
                entries: &[
                    wgpu::BindGroupEntry {
                        binding: 0,
                        resource: wgpu::BindingResource::TextureView(&tex_view),
                    },
                    wgpu::BindGroupEntry { binding: 1, resource: wgpu::BindingResource::Sampler(&sampler) },
                    wgpu::BindGroupEntry {
                        binding: 2,
                        resource: wgpu::BindingResource::TextureView(&map_view),
                    },
                ],
            }),
            wgpu_device.create_bind_group(&wgpu::BindGroupDescriptor {
                label: None,
                layout: &pipeline.get_bind_group_layout(1),
                entries: &[
                    wgpu::BindGroupEntry { binding: 0, resource: input.as_entire_binding() },
                    wgpu::BindGroupEntry { binding: 1, resource: output.as_entire_binding() },
                ],
            }),
        ];
        let mut encoder = record(bridge, &pipeline, &[&groups[0], &groups[1]], points.len() as u32);
        encoder.copy_buffer_to_buffer(&output, 0, &readback, 0, bytes);
        bridge.submit([encoder.finish()]).unwrap();
        readback.slice(..).map_async(wgpu::MapMode::Read, |r| r.unwrap());
        wgpu_device.poll(wgpu::PollType::wait_indefinitely()).unwrap();
        let out = readback.slice(..).get_mapped_range().unwrap().to_vec();
        for (i, (c, want)) in out.chunks(16).zip(&expected).enumerate() {
            let r = f32::from_le_bytes([c[0], c[1], c[2], c[3]]);
            let got = (r >= 0.0).then(|| (r * 255.0).round() as u32);
            assert_eq!(got, *want, "point {i}: {:?}", points[i]);
        }
    });
}

#[test]
fn an_image_residency_wrote_is_imported_in_its_layout_and_read_by_wgpu() {
    with_bridge(desc(), |bridge| {
        let device = bridge.residency();
        let image = device
            .create_image(&ImageDesc::new_2d(
                "uploaded tex",
                Format::R8G8B8A8Unorm,
                16,
                16,
                ImageUsage::SAMPLED | ImageUsage::COPY_DST,
            ))
            .unwrap();
        let uploader = Uploader::new(device, "image upload", 1 << 16).unwrap();
        let texels: Vec<u8> = (0..256u32).flat_map(|i| [(i % 7) as u8, 0, 0, 255]).collect();
        device.discard_to_general(&[&image]).unwrap();
        uploader
            .write_image(&residency_vulkan::ImageRegion::new(&image, 0, [0, 0, 0], [16, 16, 1]), &texels)
            .unwrap();
        uploader.flush().unwrap();
        let layout = image.layout(0, 0);
        assert_ne!(layout, Some(ash::vk::ImageLayout::UNDEFINED), "the upload left it in a layout");
        // Imported with that layout as wgpu's starting state; wgpu's work waits for the upload.
        let tex = bridge
            .import_texture(image, wgpu::TextureFormat::Rgba8Unorm, wgpu::TextureUsages::TEXTURE_BINDING)
            .unwrap();
        bridge.wait_for(&device.submitted_work()).unwrap();
        let usage = BufferUsage::STORAGE | BufferUsage::COPY_SRC | BufferUsage::COPY_DST;
        let buffer = |name: &str| {
            let b = device.create_buffer(&residency_vulkan::BufferDesc::new(name, N * 4, usage)).unwrap();
            bridge.import_buffer(b, wgpu::BufferUsages::STORAGE).unwrap()
        };
        let (src, dst) = (buffer("zeros"), buffer("result"));
        uploader.write_buffer(src.residency(), 0, &vec![0u8; (N * 4) as usize]).unwrap();
        uploader.flush().unwrap();
        bridge.wait_for(&device.submitted_work()).unwrap();
        let view = tex.create_view(&Default::default());
        let timeline = bridge.create_timeline("image frame").unwrap();
        let commands = encode(bridge, &pipeline(bridge), &src, &dst, &view);
        let (_, point) = bridge.submit_signalling([commands], &timeline).unwrap();
        dst.residency().used_until(point).unwrap();
        src.residency().used_until(point).unwrap();
        device.wait_until(&point).unwrap();
        let out = device.read_back(dst.residency(), 0, N * 4).unwrap();
        for (i, c) in out.chunks(4).enumerate() {
            let v = u32::from_le_bytes([c[0], c[1], c[2], c[3]]);
            assert_eq!(v, (i as u32 % 256) % 7, "element {i}");
        }
        uploader.destroy().unwrap();
    });
}
