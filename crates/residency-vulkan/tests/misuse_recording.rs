//! Misuse of recording, programs and timestamps (issue #15): a recording of one device handed to
//! another device's helpers is a typed error that records nothing; programs, timestamps, and the
//! views and samplers a descriptor set binds are released behind the GPU when dropped while their
//! work is pending (on a gate the test opens from the host). Every test runs under
//! synchronization validation; the harness fails a test on any validation message or leaked
//! object.

use ash::vk;
use residency_core::format::Format;
use residency_core::memory::MemoryIntent;
use residency_core::sync::{Region, SyncError, TrackerOptions, Use};
use residency_core::usage::{BufferUsage, ImageUsage};
use residency_vulkan::compute::{Binding, BindingError, ComputeProgram, DispatchError};
use residency_vulkan::graphics::{GraphicsProgram, RenderError, VertexAttribute};
use residency_vulkan::recording::Recording;
use residency_vulkan::recording::{BarrierError, CopyError, MemoryDependency, Timestamps};
use residency_vulkan::shaders::{self};
use residency_vulkan::testing::with_gpu;
use residency_vulkan::tracking::{RecordError, ResourceTracker};
use residency_vulkan::transient::{TransientPool, TransientRequest};
use residency_vulkan::{
    ash, Buffer, BufferDesc, CommandContext, Device, Filter, ImageDesc, Timeline, VulkanError,
};
use std::sync::Arc;

mod common;

const N: u32 = 256;

fn push(count: u32, value: u32) -> Vec<u8> {
    [count, value].iter().flat_map(|v| v.to_le_bytes()).collect()
}

fn live(device: &Device, name: &str) -> bool {
    device.ledger().live_objects().iter().any(|o| &*o.name == name)
}

/// Host-signals `timeline` to `value` (the renderer's frame finishing).
fn signal(device: &Device, timeline: &Timeline, value: u64) {
    let info = vk::SemaphoreSignalInfo::default().semaphore(timeline.raw()).value(value);
    // SAFETY: a timeline semaphore of this device; values only grow in these tests.
    unsafe { device.raw().signal_semaphore(&info) }.unwrap();
}

/// A wait on `gate` reaching 1, for submissions the test holds on the GPU.
fn gate_wait(gate: &Timeline) -> [vk::SemaphoreSubmitInfo<'static>; 1] {
    [vk::SemaphoreSubmitInfo::default()
        .semaphore(gate.raw())
        .value(1)
        .stage_mask(vk::PipelineStageFlags2::ALL_COMMANDS)]
}

fn storage(device: &Device, name: &str) -> Buffer {
    let usage = BufferUsage::STORAGE | BufferUsage::COPY_SRC | BufferUsage::COPY_DST;
    device
        .create_buffer(&BufferDesc::new(name, u64::from(N) * 16, usage).with_intent(MemoryIntent::Readback))
        .unwrap()
}

/// `fill.comp`: `values[i] = value + i` for `i < count`; push constants `{ count, value }`.
fn fill_program(device: &Device, name: &str) -> ComputeProgram {
    ComputeProgram::new(device, name, &shaders::FILL, 4).unwrap()
}

fn read_words(buffer: &Buffer) -> Vec<u32> {
    let mut out = vec![0u8; N as usize * 4];
    buffer.read(0, &mut out).unwrap();
    out.chunks_exact(4).map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect()
}

#[test]
fn misuse_a_recording_of_device_0_given_to_device_1_helpers_is_refused_and_records_nothing() {
    with_gpu(|set| {
        let (d0, d1) = (&set.devices()[0], &set.devices()[1]);
        // Everything here lives on device 1.
        let target = storage(d1, "misuse device 1 target");
        let program = fill_program(d1, "misuse device 1 fill");
        let ds = program.descriptor_set(&[Binding::Buffer(&target)]).unwrap();
        let timestamps = Timestamps::new(d1, "misuse device 1 timestamps", 2).unwrap();
        let mut tracker = ResourceTracker::new(TrackerOptions::default());
        let id = tracker.track_buffer(&target).unwrap();
        let family = d1.universal_queue().family();
        let mut batch = tracker.batch(d1.index(), family);
        batch.declare(id, Region::Whole, Use::ComputeStorageWrite).unwrap();
        let _ = batch.flush();
        let mut batch = tracker.batch(d1.index(), family);
        batch.declare(id, Region::Whole, Use::TransferSrc).unwrap();
        let barriers = batch.flush().barriers;
        assert_eq!(barriers.buffers.len(), 1, "{barriers:?}");
        let mut transient = TransientPool::new(Arc::clone(d1), "misuse device 1 transients").unwrap();
        let frame = transient
            .begin_frame(&[TransientRequest::Buffer {
                name: "misuse device 1 transient".into(),
                size: 4096,
                usage: BufferUsage::STORAGE,
                passes: 0..=0,
                uses: (Use::ComputeStorageWrite, Use::ComputeStorageWrite),
            }])
            .unwrap();
        let quads = GraphicsProgram::new(
            d1,
            "misuse device 1 quads",
            &shaders::QUADS_VERT,
            &shaders::QUADS_FRAG,
            24,
            &[
                VertexAttribute { location: 0, format: vk::Format::R32G32_SFLOAT, offset: 0 },
                VertexAttribute { location: 1, format: vk::Format::R32G32B32A32_SFLOAT, offset: 8 },
            ],
            vk::Format::R8G8B8A8_UNORM,
            1,
        )
        .unwrap();
        let color = d1
            .create_image(&ImageDesc::new_2d(
                "misuse device 1 colour",
                Format::R8G8B8A8Unorm,
                16,
                16,
                ImageUsage::COLOR_ATTACHMENT | ImageUsage::COPY_SRC,
            ))
            .unwrap();
        let color_view = color.create_view(0..1).unwrap();
        let own = storage(d0, "misuse device 0 buffer");

        let mut drew = false;
        d0.submit_once("misuse device 0 recording", |rec| {
            assert!(matches!(
                program.dispatch(rec, &ds, &push(N, 1), [N / 64, 1, 1]),
                Err(DispatchError::WrongDevice { .. })
            ));
            assert!(matches!(
                tracker.record(rec, &barriers),
                Err(RecordError::Sync(SyncError::UnknownResource { resource, .. })) if resource == id
            ));
            assert!(matches!(
                transient.record_pass_start(rec, &frame, 0),
                Err(VulkanError::WrongDevice { .. })
            ));
            assert!(matches!(timestamps.cmd_write(rec, 0), Err(VulkanError::WrongDevice { .. })));
            assert!(matches!(timestamps.cmd_reset(rec, 0..2), Err(VulkanError::WrongDevice { .. })));
            let rendered = quads.render(rec, &color_view, [16, 16], [0.0; 4], |_| drew = true);
            assert!(matches!(rendered, Err(RenderError::WrongDevice(VulkanError::WrongDevice { .. }))));
            assert!(matches!(
                rec.copy_image_to_buffer(&color, vk::ImageLayout::GENERAL, &own),
                Err(CopyError::WrongDevice(VulkanError::WrongDevice { .. }))
            ));
            assert!(matches!(
                rec.copy_buffer(&target, 0, &own, 0, 64),
                Err(CopyError::WrongDevice(VulkanError::WrongDevice { .. }))
            ));
            assert_eq!(rec.helper_commands(), 0, "nothing was recorded");
        })
        .unwrap();
        assert!(!drew, "a refused render pass never calls its draw closure");

        // Device 0's program refuses device 1's buffer in a descriptor set, and device 1's program
        // refuses a set made by another program.
        let program0 = fill_program(d0, "misuse device 0 fill");
        assert!(matches!(
            program0.descriptor_set(&[Binding::Buffer(&target)]),
            Err(BindingError::WrongDevice { binding: 0, .. })
        ));
        let other = fill_program(d1, "misuse device 1 other fill");
        let other_set = other.descriptor_set(&[Binding::Buffer(&target)]).unwrap();
        d1.submit_once("misuse foreign set", |rec| {
            assert!(matches!(
                program.dispatch(rec, &other_set, &push(N, 1), [N / 64, 1, 1]),
                Err(DispatchError::ForeignSet { .. })
            ));
            assert_eq!(rec.helper_commands(), 0);
        })
        .unwrap();

        // On their own device the same helpers record.
        d1.submit_once("misuse device 1 recording", |rec| {
            timestamps.cmd_write(rec, 0).unwrap();
            program.dispatch(rec, &ds, &push(N, 5), [N / 64, 1, 1]).unwrap();
            timestamps.cmd_write(rec, 1).unwrap();
            assert_eq!(rec.helper_commands(), 3);
        })
        .unwrap();
        assert_eq!(read_words(&target), (0..N).map(|i| 5 + i).collect::<Vec<_>>());
        tracker.untrack(d1.index(), id).unwrap();
        transient.end_frame(frame);
    });
}

#[test]
fn misuse_dropping_a_compute_program_while_its_dispatch_is_pending_defers_its_destruction() {
    with_gpu(|set| {
        let device = Arc::clone(&set.devices()[0]);
        let gate = device.create_timeline("misuse program gate").unwrap();
        // SAFETY: the test opens the gate with a host signal, waiting for nothing that waits for it.
        unsafe { gate.signal_submitted(1) };
        let context = CommandContext::new(&device, "misuse pending program").unwrap();
        let target = storage(&device, "misuse pending program target");
        let program = fill_program(&device, "misuse pending program");
        let ds = program.descriptor_set(&[Binding::Buffer(&target)]).unwrap();
        let submission = context
            .submit(&[gate.at(1)], |rec| {
                program.dispatch(rec, &ds, &push(N, 9), [N / 64, 1, 1]).unwrap();
            })
            .unwrap();
        drop(ds);
        drop(program);
        for name in
            ["misuse pending program", "misuse pending program layout", "misuse pending program descriptors"]
        {
            assert!(live(&device, name), "{name} waits for the dispatch");
        }
        assert!(device.pending_destruction() > 0);
        signal(&device, &gate, 1);
        context.wait(submission).unwrap();
        // The universal timeline (what destruction waits for) may trail the fence a moment.
        device.wait_submitted().unwrap();
        assert!(!live(&device, "misuse pending program"), "gone once the dispatch completed");
        assert!(!live(&device, "misuse pending program descriptors"));
        assert_eq!(read_words(&target), (0..N).map(|i| 9 + i).collect::<Vec<_>>(), "the dispatch ran");
    });
}

#[test]
fn misuse_a_program_dropped_inside_its_recording_lives_until_the_submission_completes() {
    with_gpu(|set| {
        let device = Arc::clone(&set.devices()[0]);
        let gate = device.create_timeline("misuse closure gate").unwrap();
        // SAFETY: the test opens the gate with a host signal, waiting for nothing that waits for it.
        unsafe { gate.signal_submitted(1) };
        let context = CommandContext::new(&device, "misuse closure").unwrap();
        let target = storage(&device, "misuse closure target");
        let program = fill_program(&device, "misuse closure program");
        let ds = program.descriptor_set(&[Binding::Buffer(&target)]).unwrap();
        // The closure owns the program and its set and drops them right after recording: the
        // recording holds them until the submission, which then holds them until it completes.
        let submission = context
            .submit(&[gate.at(1)], move |rec| {
                program.dispatch(rec, &ds, &push(N, 3), [N / 64, 1, 1]).unwrap();
                drop(ds);
                drop(program);
            })
            .unwrap();
        assert!(live(&device, "misuse closure program"), "held behind the gated submission");
        signal(&device, &gate, 1);
        context.wait(submission).unwrap();
        // The universal timeline (what destruction waits for) may trail the fence a moment.
        device.wait_submitted().unwrap();
        assert!(!live(&device, "misuse closure program"));
        assert_eq!(read_words(&target), (0..N).map(|i| 3 + i).collect::<Vec<_>>());
    });
}

#[test]
fn misuse_dropping_timestamps_while_their_writes_are_pending_defers_the_query_pool() {
    with_gpu(|set| {
        let device = Arc::clone(&set.devices()[0]);
        let gate = device.create_timeline("misuse timestamps gate").unwrap();
        // SAFETY: the test opens the gate with a host signal, waiting for nothing that waits for it.
        unsafe { gate.signal_submitted(1) };
        let context = CommandContext::new(&device, "misuse timestamps").unwrap();
        let timestamps = Timestamps::new(&device, "misuse pending timestamps", 2).unwrap();
        // A fresh pool reads as not available, never as an uninitialised query.
        assert_eq!(timestamps.elapsed_ms(0, 1), None);
        let submission = context
            .submit(&[gate.at(1)], |rec| {
                timestamps.cmd_write(rec, 0).unwrap();
                timestamps.cmd_write(rec, 1).unwrap();
                // Outside the pool: nothing recorded, no error.
                timestamps.cmd_write(rec, 7).unwrap();
            })
            .unwrap();
        drop(timestamps);
        assert!(live(&device, "misuse pending timestamps"), "the query pool waits for its writes");
        assert!(device.pending_destruction() > 0);
        signal(&device, &gate, 1);
        context.wait(submission).unwrap();
        // The universal timeline (what destruction waits for) may trail the fence a moment.
        device.wait_submitted().unwrap();
        assert!(!live(&device, "misuse pending timestamps"));
    });
}

#[test]
fn misuse_dropping_a_sets_view_and_sampler_while_the_set_is_in_use_is_safe() {
    with_gpu(|set| {
        let device = Arc::clone(&set.devices()[0]);
        let gate = device.create_timeline("misuse view gate").unwrap();
        // SAFETY: the test opens the gate with a host signal, waiting for nothing that waits for it.
        unsafe { gate.signal_submitted(1) };
        let context = CommandContext::new(&device, "misuse view").unwrap();
        let image = device
            .create_image(&ImageDesc::new_2d(
                "misuse sampled",
                Format::R8G8B8A8Unorm,
                256,
                256,
                ImageUsage::SAMPLED | ImageUsage::COPY_DST,
            ))
            .unwrap();
        device.discard_to_general(&[&image]).unwrap();
        let view = image.create_view(0..1).unwrap();
        let sampler = device.create_sampler(Filter::Nearest).unwrap();
        let results = storage(&device, "misuse view results");
        // `sample_texels.comp`: `results[i] = texel (i % width, i / width)`; push `{ count, width }`.
        let program =
            ComputeProgram::new(&device, "misuse view program", &shaders::SAMPLE_TEXELS, 1).unwrap();
        let ds = program
            .descriptor_set(&[
                Binding::sampled(&view, &sampler, vk::ImageLayout::GENERAL),
                Binding::Buffer(&results),
            ])
            .unwrap();
        // The set holds the view (and its image) and the sampler: dropping the handles while the
        // set lives destroys nothing, and the set still dispatches.
        drop(view);
        drop(sampler);
        drop(image);
        assert!(live(&device, "misuse sampled view") && live(&device, "misuse sampled"));
        let submission = context
            .submit(&[gate.at(1)], |rec| {
                program.dispatch(rec, &ds, &push(N, 16), [N / 64, 1, 1]).unwrap();
            })
            .unwrap();
        // The set goes while its dispatch is held on the GPU: what it bound waits for it.
        drop(ds);
        drop(program);
        assert!(live(&device, "misuse sampled view"), "the view waits for the dispatch that samples it");
        assert!(live(&device, "Nearest sampler") && live(&device, "misuse sampled"));
        signal(&device, &gate, 1);
        context.wait(submission).unwrap();
        // The universal timeline (what destruction waits for) may trail the fence a moment.
        device.wait_submitted().unwrap();
        assert!(!live(&device, "misuse sampled view") && !live(&device, "misuse sampled"));
        assert!(!live(&device, "misuse view program"));
    });
}

#[test]
fn misuse_a_renderers_own_command_buffer_through_from_raw_keeps_what_it_recorded_until_its_use() {
    with_gpu(|set| {
        let device = Arc::clone(&set.devices()[0]);
        let gate = device.create_timeline("misuse own gate").unwrap();
        // SAFETY: the test opens the gate with a host signal, waiting for nothing that waits for it.
        unsafe { gate.signal_submitted(1) };
        let done = device.create_timeline("misuse own frame").unwrap();
        let target = storage(&device, "misuse own target");
        let program = fill_program(&device, "misuse own program");
        let ds = program.descriptor_set(&[Binding::Buffer(&target)]).unwrap();
        // The renderer's own pool and command buffer.
        let (pool, cmd) = common::own_command_buffer(&device);
        let begin = vk::CommandBufferBeginInfo::default().flags(vk::CommandBufferUsageFlags::ONE_TIME_SUBMIT);
        // SAFETY: a fresh command buffer of this device.
        unsafe { device.raw().begin_command_buffer(cmd, &begin) }.unwrap();
        {
            // SAFETY: `cmd` is a primary command buffer of this device's universal family, recording
            // and outside a render pass while `rec` lives; nothing else records into it; the uses
            // are declared below (`used_until` the frame's timeline value this test submits).
            let mut rec = unsafe { Recording::from_raw(&device, cmd) };
            program.dispatch(&mut rec, &ds, &push(N, 11), [N / 64, 1, 1]).unwrap();
            assert!(rec.used_until(set.devices()[1].frames_from_now(1)).is_err(), "another device's use");
            rec.used_until(done.at(1)).unwrap();
        }
        // SAFETY: recording began above.
        unsafe { device.raw().end_command_buffer(cmd) }.unwrap();
        drop(ds);
        drop(program);
        assert!(live(&device, "misuse own program"), "held for the declared use");
        let buffers = [vk::CommandBufferSubmitInfo::default().command_buffer(cmd)];
        let signals = [vk::SemaphoreSubmitInfo::default()
            .semaphore(done.raw())
            .value(1)
            .stage_mask(vk::PipelineStageFlags2::ALL_COMMANDS)];
        let waits = gate_wait(&gate);
        let submit = vk::SubmitInfo2::default()
            .wait_semaphore_infos(&waits)
            .command_buffer_infos(&buffers)
            .signal_semaphore_infos(&signals);
        {
            let queue = device.universal_queue().lock().unwrap();
            // SAFETY: the queue is locked; the command buffer is executable; the timeline values grow.
            unsafe { device.raw().queue_submit2(*queue, &[submit], vk::Fence::null()) }.unwrap();
        }
        device.maintain();
        assert!(live(&device, "misuse own program"), "the frame has not run yet");
        signal(&device, &gate, 1);
        let semaphores = [done.raw()];
        let values = [1];
        let wait = vk::SemaphoreWaitInfo::default().semaphores(&semaphores).values(&values);
        // SAFETY: a timeline semaphore of this device with value 1 submitted above.
        unsafe { device.raw().wait_semaphores(&wait, u64::MAX) }.unwrap();
        device.maintain();
        assert!(!live(&device, "misuse own program"), "gone once the renderer's frame completed");
        assert_eq!(read_words(&target), (0..N).map(|i| 11 + i).collect::<Vec<_>>());
        // SAFETY: the only submission of the pool's command buffer has completed.
        unsafe { device.raw().destroy_command_pool(pool, None) };
    });
}

#[test]
fn misuse_barriers_with_disabled_stages_or_unperformed_accesses_are_refused() {
    with_gpu(|set| {
        let device = &set.devices()[0];
        use vk::{AccessFlags2 as A, PipelineStageFlags2 as S};
        device
            .submit_once("misuse barriers", |rec| {
                let geometry = MemoryDependency {
                    src_stages: S::GEOMETRY_SHADER,
                    src_access: A::SHADER_WRITE,
                    dst_stages: S::COMPUTE_SHADER,
                    dst_access: A::SHADER_READ,
                };
                assert_eq!(
                    rec.memory_barrier(geometry),
                    Err(BarrierError::UnsupportedStages { stages: S::GEOMETRY_SHADER })
                );
                let copy_writes_shader = MemoryDependency {
                    src_stages: S::COPY,
                    src_access: A::SHADER_WRITE,
                    dst_stages: S::COMPUTE_SHADER,
                    dst_access: A::SHADER_READ,
                };
                assert_eq!(
                    rec.memory_barrier(copy_writes_shader),
                    Err(BarrierError::AccessWithoutStage { access: A::SHADER_WRITE, stages: S::COPY })
                );
                assert_eq!(rec.helper_commands(), 0);
                let fine = MemoryDependency {
                    src_stages: S::COPY,
                    src_access: A::TRANSFER_WRITE,
                    dst_stages: S::COMPUTE_SHADER,
                    dst_access: A::SHADER_READ,
                };
                assert_eq!(rec.memory_barrier(fine), Ok(()));
                assert_eq!(rec.helper_commands(), 1);
            })
            .unwrap();
    });
}

#[test]
fn misuse_descriptor_bindings_that_do_not_fit_are_refused_before_anything_is_allocated() {
    with_gpu(|set| {
        let device = &set.devices()[0];
        let program = ComputeProgram::new(device, "misuse bindings", &shaders::SAMPLE_TEXELS, 1).unwrap();
        let storage_only = device
            .create_image(&ImageDesc::new_2d(
                "misuse storage only",
                Format::R8G8B8A8Unorm,
                16,
                16,
                ImageUsage::STORAGE,
            ))
            .unwrap();
        let integer = device
            .create_image(&ImageDesc::new_2d("misuse integer", Format::R8Uint, 16, 16, ImageUsage::SAMPLED))
            .unwrap();
        let float = device
            .create_image(&ImageDesc::new_2d(
                "misuse float",
                Format::R8G8B8A8Unorm,
                16,
                16,
                ImageUsage::SAMPLED,
            ))
            .unwrap();
        let (storage_view, integer_view, float_view) = (
            storage_only.create_view(0..1).unwrap(),
            integer.create_view(0..1).unwrap(),
            float.create_view(0..1).unwrap(),
        );
        let (nearest, trilinear) = (
            device.create_sampler(Filter::Nearest).unwrap(),
            device.create_sampler(Filter::Trilinear).unwrap(),
        );
        let buffer = storage(device, "misuse bindings buffer");
        let uniform_only =
            device.create_buffer(&BufferDesc::new("misuse uniform only", 256, BufferUsage::UNIFORM)).unwrap();
        let general = vk::ImageLayout::GENERAL;
        let invalid = |bindings: &[Binding<'_>]| match program.descriptor_set(bindings) {
            Err(BindingError::Invalid { binding, reason, .. }) => (binding, reason),
            other => panic!("expected an invalid binding, got {other:?}"),
        };
        // Kind, usage, layout and filtering, each named by its binding.
        let (binding, reason) = invalid(&[Binding::Buffer(&buffer), Binding::Buffer(&buffer)]);
        assert_eq!(binding, 0, "{reason}");
        let (binding, reason) =
            invalid(&[Binding::sampled(&storage_view, &nearest, general), Binding::Buffer(&buffer)]);
        assert!(binding == 0 && reason.contains("SAMPLED"), "{reason}");
        // An integer format at the shader's float `sampler2D` is the wrong shape; at a
        // `usampler2D` (sparse_fallback.comp's binding 1) it cannot be filtered linearly.
        assert!(matches!(
            program.descriptor_set(&[
                Binding::sampled(&integer_view, &nearest, general),
                Binding::Buffer(&buffer)
            ]),
            Err(BindingError::ViewShape { binding: 0, .. })
        ));
        let fallback =
            ComputeProgram::new(device, "misuse bindings uint", &shaders::SPARSE_FALLBACK, 1).unwrap();
        match fallback.descriptor_set(&[
            Binding::sampled(&float_view, &nearest, general),
            Binding::sampled(&integer_view, &trilinear, general),
            Binding::Buffer(&buffer),
            Binding::Buffer(&buffer),
        ]) {
            Err(BindingError::Invalid { binding: 1, reason, .. }) => {
                assert!(reason.contains("linearly"), "{reason}")
            }
            other => panic!("expected a filtering refusal, got {other:?}"),
        }
        let (binding, reason) = invalid(&[
            Binding::sampled(&float_view, &nearest, vk::ImageLayout::TRANSFER_DST_OPTIMAL),
            Binding::Buffer(&buffer),
        ]);
        assert!(binding == 0 && reason.contains("sampled"), "{reason}");
        let (binding, reason) =
            invalid(&[Binding::sampled(&float_view, &nearest, general), Binding::Buffer(&uniform_only)]);
        assert!(binding == 1 && reason.contains("usage"), "{reason}");
        assert!(matches!(
            program.descriptor_set(&[Binding::Buffer(&buffer)]),
            Err(BindingError::Count { expected: 2, given: 1, .. })
        ));
        // The fitting set is made (the pool had room for only this one: nothing was allocated
        // by the refusals).
        program
            .descriptor_set(&[Binding::sampled(&float_view, &nearest, general), Binding::Buffer(&buffer)])
            .unwrap();
    });
}
