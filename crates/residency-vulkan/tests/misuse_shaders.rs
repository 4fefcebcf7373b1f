//! Shaders and programs (issue #15): the safe constructors take only the shipped shaders, whose
//! declared interface is checked here against their SPIR-V; a program description that does not
//! match its shader, and words that are not SPIR-V even on the `unsafe` path, are typed errors
//! that create nothing. The harness fails a test on any validation message or leaked object.

use residency_core::device_mask::DeviceMask;
use residency_vulkan::ash::vk;
use residency_vulkan::compute::{BindingKind, ComputeProgram, ProgramError};
use residency_vulkan::graphics::{GraphicsProgram, VertexAttribute};
use residency_vulkan::multi::MultiDeviceError;
use residency_vulkan::multi_work::MultiComputeProgram;
use residency_vulkan::shaders::{self, Shader};
use residency_vulkan::spirv::{self, SpirvError, Stage};
use residency_vulkan::testing::with_gpu;
use residency_vulkan::Device;

/// What the device's ledger holds, to show nothing was created.
fn live(device: &Device) -> Vec<(String, String)> {
    let mut live: Vec<_> =
        device.ledger().live_objects().into_iter().map(|o| (o.kind.to_owned(), o.name.to_string())).collect();
    live.sort();
    live
}

/// `quads.vert`'s layout: `vec2 position` at location 0, `vec4 color` at location 1.
fn quad_attributes() -> [VertexAttribute; 2] {
    [
        VertexAttribute { location: 0, format: vk::Format::R32G32_SFLOAT, offset: 0 },
        VertexAttribute { location: 1, format: vk::Format::R32G32B32A32_SFLOAT, offset: 8 },
    ]
}

/// The first word of each instruction of a module, with its opcode and word count.
fn instructions(words: &[u32]) -> Vec<(usize, u32, usize)> {
    let mut at = 5;
    let mut out = Vec::new();
    while at < words.len() {
        let count = (words[at] >> 16) as usize;
        out.push((at, words[at] & 0xffff, count));
        at += count;
    }
    out
}

/// Bindings a shipped shader declares in GLSL (marked `// unused`) that glslc -O removes; the
/// program still has them, so callers bind the same resources as the sibling shader.
const UNUSED: [(&str, u32); 2] = [("feedback_sampling.comp", 1), ("feedback_sampling.comp", 2)];

#[test]
fn misuse_every_shipped_shader_declares_its_spirv_interface() {
    // Every `.spv` in shaders/ is shipped, once.
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shaders");
    let mut files: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .filter_map(|e| e.unwrap().file_name().into_string().ok())
        .filter_map(|n| n.strip_suffix(".spv").map(str::to_owned))
        .collect();
    files.sort();
    let mut names: Vec<String> = shaders::ALL.iter().map(|s| s.name().to_owned()).collect();
    names.sort();
    assert_eq!(names, files, "shaders::ALL lists every .spv of shaders/, once");

    for shader in shaders::ALL {
        let name = shader.name();
        let committed = std::fs::read(dir.join(format!("{name}.spv"))).unwrap();
        assert_eq!(
            shader.words(),
            residency_vulkan::compute::spirv_words(&committed),
            "{name}: embedded words"
        );
        let interface = spirv::reflect(shader.words()).unwrap_or_else(|e| panic!("{name}: {e}"));
        let stage = match name.rsplit('.').next() {
            Some("comp") => Stage::Compute,
            Some("vert") => Stage::Vertex,
            Some("frag") => Stage::Fragment,
            other => panic!("{name}: unknown extension {other:?}"),
        };
        assert_eq!(shader.stage(), stage, "{name}: stage");
        assert!(interface.has_entry_point(stage, "main"), "{name}: {:?}", interface.entry_points);
        // Exactly the declared bindings, in binding order, each one descriptor in set 0 (but for
        // bindings the GLSL declares and never uses, which glslc -O removes).
        let mut found: Vec<_> =
            interface.bindings.iter().map(|b| (b.set, b.binding, b.kind, b.count)).collect();
        found.sort_by_key(|&(set, binding, _, _)| (set, binding));
        let declared: Vec<_> = shader
            .bindings()
            .iter()
            .enumerate()
            .filter(|&(i, _)| !UNUSED.contains(&(name, i as u32)))
            .map(|(i, &k)| (0, i as u32, Some(k), 1))
            .collect();
        assert_eq!(found, declared, "{name}: descriptor bindings");
        // The push-constant range covers the block, in whole words, with less than 16 B of slack.
        let (block, reserved) = (interface.push_constant_bytes, shader.push_constant_bytes());
        assert!(
            reserved % 4 == 0 && block <= reserved && reserved < block + 16,
            "{name}: {reserved} B reserved for a {block} B push-constant block"
        );
        if stage == Stage::Vertex {
            let mut inputs: Vec<_> = interface.inputs.iter().map(|i| i.location).collect();
            inputs.sort();
            // `prt_target.vert` makes its triangle from gl_VertexIndex, with no vertex input.
            let expected: &[u32] = if name == "prt_target.vert" { &[] } else { &[0, 1] };
            assert_eq!(inputs, expected, "{name}: quad_attributes() feeds its inputs");
        }
    }
}

#[test]
fn misuse_reflection_reads_the_kinds_glslc_writes() {
    use BindingKind::*;
    let kinds = |shader: &Shader| {
        let mut b = spirv::reflect(shader.words()).unwrap().bindings;
        b.sort_by_key(|b| b.binding);
        b.into_iter().map(|b| b.kind.unwrap()).collect::<Vec<_>>()
    };
    // One shader per descriptor kind, checked against the GLSL by hand.
    assert_eq!(kinds(&shaders::PLACED_BUFFERS), [StorageBuffer, StorageBuffer, UniformBuffer, StorageBuffer]);
    assert_eq!(kinds(&shaders::SPARSE_STORE), [StorageImage]);
    assert_eq!(kinds(&shaders::SAMPLE_TEXELS), [SampledImage, StorageBuffer]);
    // `{ vec4 defaultValue; uint count; }` is 20 bytes; `{ ivec2 origin; ivec2 size; }` 16.
    assert_eq!(spirv::reflect(shaders::SPARSE_PROBE.words()).unwrap().push_constant_bytes, 20);
    assert_eq!(spirv::reflect(shaders::SPARSE_STORE.words()).unwrap().push_constant_bytes, 16);
    assert_eq!(spirv::reflect(shaders::PLACED_BUFFERS.words()).unwrap().push_constant_bytes, 0);
    assert_eq!(spirv::reflect(shaders::FILL.words()).unwrap().local_size, Some([64, 1, 1]));
}

#[test]
fn misuse_a_shipped_shader_of_another_stage_is_refused_and_creates_nothing() {
    with_gpu(|set| {
        let device = &set.devices()[0];
        let before = live(device);
        let err = ComputeProgram::new(device, "misuse vertex", &shaders::QUADS_VERT, 1).unwrap_err();
        assert!(matches!(err, ProgramError::Stage { stage: Stage::Compute, .. }), "{err}");
        let attributes = quad_attributes();
        let format = vk::Format::R8G8B8A8_UNORM;
        // Swapped stages, and a compute shader in a graphics pipeline.
        for (vs, fs) in [
            (&shaders::QUADS_FRAG, &shaders::QUADS_VERT),
            (&shaders::QUADS_VERT, &shaders::QUADS_VERT),
            (&shaders::FILL, &shaders::QUADS_FRAG),
        ] {
            let err = GraphicsProgram::new(device, "misuse stages", vs, fs, 24, &attributes, format, 1)
                .unwrap_err();
            assert!(matches!(err, ProgramError::Stage { .. }), "{} + {}: {err}", vs.name(), fs.name());
        }
        let mask = DeviceMask::first(set.devices().len() as u32);
        match MultiComputeProgram::new(set, mask, "misuse fragment", &shaders::QUADS_FRAG, 1).unwrap_err() {
            MultiDeviceError::Failed { source: ProgramError::Stage { .. }, .. } => {}
            other => panic!("{other}"),
        }
        assert_eq!(live(device), before, "nothing was created");
        // The right stages are accepted.
        let quads = GraphicsProgram::new(
            device,
            "quads",
            &shaders::QUADS_VERT,
            &shaders::QUADS_FRAG,
            24,
            &attributes,
            format,
            1,
        )
        .unwrap();
        assert_eq!(quads.name(), "quads");
        let fill = ComputeProgram::new(device, "fill", &shaders::FILL, 1).unwrap();
        assert_eq!(fill.name(), "fill");
    });
}

#[test]
fn misuse_vertex_input_that_does_not_feed_the_shipped_vertex_shader_is_refused() {
    with_gpu(|set| {
        let device = &set.devices()[0];
        let before = live(device);
        let [position, color] = quad_attributes();
        let format = vk::Format::R8G8B8A8_UNORM;
        let uint_position = VertexAttribute { format: vk::Format::R32G32_UINT, ..position };
        let twice = VertexAttribute { offset: 4, ..position };
        let far = VertexAttribute { location: device.limits().max_vertex_input_attributes, ..color };
        let cases: [(&str, Vec<VertexAttribute>, vk::Format); 5] = [
            ("location 1 not fed", vec![position], format),
            ("uint attribute for a vec2", vec![uint_position, color], format),
            ("location 0 twice", vec![position, twice, color], format),
            ("location past the limit", vec![position, color, far], format),
            ("a compressed colour format", vec![position, color], vk::Format::BC1_RGB_UNORM_BLOCK),
        ];
        for (case, attributes, format) in cases {
            let err = GraphicsProgram::new(
                device,
                "misuse vertex input",
                &shaders::QUADS_VERT,
                &shaders::QUADS_FRAG,
                24,
                &attributes,
                format,
                1,
            )
            .unwrap_err();
            assert!(matches!(err, ProgramError::Graphics { .. }), "{case}: {err}");
        }
        assert_eq!(live(device), before, "nothing was created");
    });
}

#[test]
fn misuse_from_spirv_with_a_description_that_does_not_match_is_refused() {
    with_gpu(|set| {
        let device = &set.devices()[0];
        let before = live(device);
        let fill = shaders::FILL.words();
        let storage = [BindingKind::StorageBuffer];
        let refuse = |kinds: &[BindingKind], push: u32| {
            // SAFETY: fill.comp is glslc's valid SPIR-V with a compute `main`; the description
            // breaks the contract in a way the reflection sees, so it is refused before any
            // Vulkan call (what this test checks), which `from_spirv` documents as sound.
            unsafe { ComputeProgram::from_spirv(device, "misuse fill", fill, kinds, push, 1) }.unwrap_err()
        };
        let err = refuse(&[BindingKind::UniformBuffer], 8);
        assert!(
            matches!(
                err,
                ProgramError::Binding {
                    set: 0,
                    binding: 0,
                    declared: Some(BindingKind::UniformBuffer),
                    found: Some(BindingKind::StorageBuffer),
                    count: 1,
                    ..
                }
            ),
            "{err}"
        );
        let err = refuse(&[], 8);
        assert!(matches!(err, ProgramError::Binding { binding: 0, declared: None, .. }), "{err}");
        let err = refuse(&storage, 4);
        assert!(matches!(err, ProgramError::PushConstants { declared: 4, block: 8, .. }), "{err}");
        let err = refuse(&storage, 10);
        assert!(matches!(err, ProgramError::PushConstants { declared: 10, .. }), "{err}");
        let limit = device.limits().max_push_constants_size;
        let err = refuse(&storage, limit + 4);
        assert!(matches!(err, ProgramError::PushConstants { .. }), "{err}");

        // The same module with its workgroup one past the device's limit on x: glslc writes
        // `OpExecutionModeId %main LocalSizeId %x %y %z`; change the constant `%x`.
        let mut wide = fill.to_vec();
        let found = instructions(&wide);
        let (at, _, _) = found
            .iter()
            .copied()
            .find(|&(at, op, count)| op == 331 && count == 6 && wide[at + 2] == 38)
            .expect("OpExecutionModeId LocalSizeId");
        let x = wide[at + 3];
        let (constant, _, _) =
            found.iter().copied().find(|&(c, op, _)| op == 43 && wide[c + 2] == x).expect("OpConstant %x");
        wide[constant + 3] = device.limits().max_compute_work_group_size[0] + 1;
        // SAFETY: fill.comp with only its workgroup constant changed: valid SPIR-V, which the
        // reflection refuses for the workgroup size before any Vulkan call.
        let err =
            unsafe { ComputeProgram::from_spirv(device, "misuse wide", &wide, &storage, 8, 1) }.unwrap_err();
        assert!(matches!(err, ProgramError::WorkgroupSize { .. }), "{err}");

        // A fragment "shader" that is a compute shader is refused for its stage, before its
        // descriptors (which the empty set 0 described here does not have) are looked at.
        // SAFETY: glslc's modules; refused by the reflection before any Vulkan call.
        let err = unsafe {
            GraphicsProgram::from_spirv(
                device,
                "misuse graphics",
                shaders::QUADS_VERT.words(),
                shaders::FILL.words(),
                &[],
                0,
                24,
                &quad_attributes(),
                vk::Format::R8G8B8A8_UNORM,
                1,
            )
        }
        .unwrap_err();
        assert!(matches!(err, ProgramError::Stage { stage: Stage::Fragment, .. }), "{err}");

        let mask = DeviceMask::first(set.devices().len() as u32);
        // SAFETY: as `refuse` above, on every device.
        let err = unsafe { MultiComputeProgram::from_spirv(set, mask, "misuse multi", fill, &[], 8, 1) }
            .unwrap_err();
        assert!(
            matches!(err, MultiDeviceError::Failed { source: ProgramError::Binding { .. }, .. }),
            "{err}"
        );
        assert_eq!(live(device), before, "nothing was created");
    });
}

#[test]
fn misuse_from_spirv_with_words_that_are_not_spirv_is_a_typed_error() {
    let fill = shaders::FILL.words();
    // Byte-swapped (a big-endian reading), no header, a word count of zero, and cut in the middle
    // of an instruction.
    let swapped: Vec<u32> = fill.iter().map(|w| w.swap_bytes()).collect();
    let mut zero = fill.to_vec();
    zero[5] &= 0xffff;
    let (at, _, _) = instructions(fill).into_iter().find(|&(_, _, count)| count >= 3).unwrap();
    let cut = &fill[..at + 2];
    assert_eq!(spirv::reflect(&swapped), Err(SpirvError::BadMagic { found: 0x0302_2307 }));
    assert_eq!(spirv::reflect(&fill[..3]), Err(SpirvError::NoHeader { words: 3 }));
    assert_eq!(spirv::reflect(&[]), Err(SpirvError::NoHeader { words: 0 }));
    assert_eq!(spirv::reflect(&zero), Err(SpirvError::Truncated { at: 5 }));
    assert_eq!(spirv::reflect(cut), Err(SpirvError::Truncated { at }));
    let garbage: Vec<u32> = (0..64u32).map(|i| 0x0723_0203 ^ i.wrapping_mul(0x9e37_79b9)).collect();

    with_gpu(|set| {
        let device = &set.devices()[0];
        let before = live(device);
        let storage = [BindingKind::StorageBuffer];
        let not_spirv: [&[u32]; 6] = [&swapped, &fill[..3], &[], &zero, cut, &garbage];
        for words in not_spirv {
            // SAFETY: the words are not SPIR-V; the reflection refuses them before any Vulkan
            // call (what this test checks), which `from_spirv` documents as sound.
            let err = unsafe { ComputeProgram::from_spirv(device, "misuse words", words, &storage, 8, 1) }
                .unwrap_err();
            assert!(matches!(err, ProgramError::NotSpirv { .. }), "{err}");
            // SAFETY: as above, for either stage of a graphics pipeline.
            let err = unsafe {
                GraphicsProgram::from_spirv(
                    device,
                    "misuse words",
                    shaders::QUADS_VERT.words(),
                    words,
                    &[],
                    0,
                    24,
                    &quad_attributes(),
                    vk::Format::R8G8B8A8_UNORM,
                    1,
                )
            }
            .unwrap_err();
            assert!(matches!(err, ProgramError::NotSpirv { .. }), "{err}");
        }
        assert_eq!(live(device), before, "nothing was created");
    });
}

#[test]
fn more_descriptor_sets_than_a_pool_holds_come_from_new_pools_and_are_released_with_them() {
    use residency_core::memory::MemoryIntent;
    use residency_core::usage::BufferUsage;
    use residency_vulkan::compute::{Binding, ComputeProgram};
    use residency_vulkan::{shaders, BufferDesc};
    with_gpu(|set| {
        let device = &set.devices()[0];
        let objects = device.ledger().live_objects().len();
        {
            // One set per pool: every set after the first needs a pool of its own (NVIDIA refuses
            // a pool's max_sets + 1-th set; lavapipe does not count).
            let program = ComputeProgram::new(device, "pool growth", &shaders::FILL, 1).unwrap();
            let buffer = device
                .create_buffer(
                    &BufferDesc::new("pool growth out", 4096, BufferUsage::STORAGE)
                        .with_intent(MemoryIntent::Readback),
                )
                .unwrap();
            let sets: Vec<_> =
                (0..5).map(|_| program.descriptor_set(&[Binding::Buffer(&buffer)]).unwrap()).collect();
            let pools = device.ledger().live_objects().iter().filter(|o| o.kind == "descriptor pool").count();
            assert!(pools >= 5, "five pools of one set: {pools}");
            // Each set works: a dispatch with the last one.
            let push: Vec<u8> = [16u32, 7].iter().flat_map(|v| v.to_le_bytes()).collect();
            device
                .submit_compute("pool growth", |rec| {
                    program.dispatch(rec, &sets[4], &push, [1, 1, 1]).unwrap();
                })
                .unwrap();
            drop(sets);
        }
        device.wait_submitted().unwrap();
        let live = device.ledger().live_objects();
        assert!(
            !live.iter().any(|o| o.name.starts_with("pool growth")),
            "the program, its pools and the buffer are gone: {live:?}"
        );
        assert!(live.len() <= objects + 1, "{live:?}");
    });
}
