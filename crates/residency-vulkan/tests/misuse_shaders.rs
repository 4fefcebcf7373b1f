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

// ---- Shipped shaders bound every index (issue #29, cause 4) -------------------------------------
//
// Every shipped shader compares each buffer index with the bound range (`arrayLength`) or the
// counts it is given, and each texel coordinate of a fetch or store with the image's size, so a
// count, index or offset past what is bound reads and writes nothing outside it — on any device,
// with or without `robustBufferAccess` (which residency does not enable). The tests below give
// each shader that takes a count, index or offset from its caller one past what is bound, inside
// a larger buffer whose bytes outside the bound range hold a sentinel, and check those bytes
// are untouched. On lavapipe (which bounds-checks) the old shaders pass the byte checks too; run
// under `RESIDENCY_VALIDATION=gpu` (GPU-assisted validation), the old ones fail each test with
// `VUID-vkCmdDispatch-None-02706` and the new ones raise nothing. The SPIR-V check below fails
// on the old shaders everywhere.

use residency_core::format::Format;
use residency_core::memory::MemoryIntent;
use residency_core::usage::{BufferUsage, ImageUsage};
use residency_vulkan::compute::{Binding, BindingError};
use residency_vulkan::{Buffer, BufferDesc, Filter, ImageDesc};

/// What the bytes outside a bound range hold.
const SENTINEL: u8 = 0xA5;
/// Where the bound range starts in a guarded buffer: a multiple of every device's storage and
/// uniform offset alignment (at most 256 B by the specification).
const GUARD: u64 = 256;

/// Little-endian bytes of words.
fn words(values: &[u32]) -> Vec<u8> {
    values.iter().flat_map(|v| v.to_le_bytes()).collect()
}

fn floats(values: &[f32]) -> Vec<u8> {
    values.iter().flat_map(|v| v.to_le_bytes()).collect()
}

/// A host-visible buffer of `GUARD + range + GUARD` bytes, every byte `SENTINEL`, with `usage`.
fn guarded(device: &Device, name: &str, range: u64, usage: BufferUsage) -> Buffer {
    let size = GUARD + range + GUARD;
    let mut buffer = device
        .create_buffer(&BufferDesc::new(name, size, usage).with_intent(MemoryIntent::Readback))
        .unwrap();
    buffer.write(0, &vec![SENTINEL; size as usize]).unwrap();
    buffer
}

/// The guarded buffer's middle `range` bytes as a binding.
fn middle(buffer: &Buffer, range: u64) -> Binding<'_> {
    Binding::BufferRange { buffer, offset: GUARD, size: range }
}

/// A host-visible buffer holding `data`.
fn filled(device: &Device, name: &str, data: &[u8], usage: BufferUsage) -> Buffer {
    let mut buffer = device
        .create_buffer(&BufferDesc::new(name, data.len() as u64, usage).with_intent(MemoryIntent::Upload))
        .unwrap();
    buffer.write(0, data).unwrap();
    buffer
}

/// The bound range's bytes, after checking every byte around it is still `SENTINEL`.
fn range_after_checking_guards(buffer: &Buffer, range: u64) -> Vec<u8> {
    let mut bytes = vec![0u8; buffer.size() as usize];
    buffer.read(0, &mut bytes).unwrap();
    let (start, end) = (GUARD as usize, (GUARD + range) as usize);
    let outside: Vec<usize> = (0..start).chain(end..bytes.len()).filter(|&i| bytes[i] != SENTINEL).collect();
    assert!(
        outside.is_empty(),
        "`{}`: {} bytes outside the bound range {start}..{end} were written (first at {:?})",
        buffer.name(),
        outside.len(),
        outside.first()
    );
    bytes[start..end].to_vec()
}

fn as_words(bytes: &[u8]) -> Vec<u32> {
    bytes.chunks_exact(4).map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect()
}

fn as_floats(bytes: &[u8]) -> Vec<f32> {
    bytes.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect()
}

/// Dispatches `program` once with `bindings` and `push`, and waits for it.
fn dispatch(
    device: &Device,
    program: &ComputeProgram,
    bindings: &[Binding<'_>],
    push: &[u8],
    groups: [u32; 3],
) {
    let set = program.descriptor_set(bindings).unwrap();
    device
        .submit_compute(program.name(), |rec| {
            program.dispatch(rec, &set, push, groups).unwrap();
        })
        .unwrap();
    device.wait_submitted().unwrap();
}

#[test]
fn misuse_every_shipped_shader_bounds_its_runtime_arrays_and_texel_coordinates() {
    const OP_VARIABLE: u32 = 59;
    const OP_LOAD: u32 = 61;
    const OP_ACCESS_CHAIN: u32 = 65;
    const OP_IN_BOUNDS_ACCESS_CHAIN: u32 = 66;
    const OP_ARRAY_LENGTH: u32 = 68;
    const OP_IMAGE_FETCH: u32 = 95;
    const OP_IMAGE_READ: u32 = 98;
    const OP_IMAGE_WRITE: u32 = 99;
    const OP_IMAGE: u32 = 100;
    const OP_IMAGE_QUERY_SIZE_LOD: u32 = 103;
    const OP_IMAGE_QUERY_SIZE: u32 = 104;
    const OP_IMAGE_SPARSE_FETCH: u32 = 313;
    const OP_TYPE_RUNTIME_ARRAY: u32 = 29;
    const OP_TYPE_STRUCT: u32 = 30;
    const OP_TYPE_POINTER: u32 = 32;
    const STORAGE_UNIFORM: u32 = 2;
    const STORAGE_STORAGE_BUFFER: u32 = 12;
    for shader in shaders::ALL {
        let name = shader.name();
        let code = shader.words();
        let found = instructions(code);
        let op = |at: usize, i: usize| code[at + 1 + i];
        // Variables of buffer blocks whose last member is a runtime array.
        let runtime: std::collections::HashSet<u32> = found
            .iter()
            .filter(|&&(_, o, _)| o == OP_TYPE_RUNTIME_ARRAY)
            .map(|&(at, _, _)| op(at, 0))
            .collect();
        let unsized_structs: std::collections::HashSet<u32> = found
            .iter()
            .filter(|&&(at, o, n)| o == OP_TYPE_STRUCT && n > 2 && runtime.contains(&code[at + n - 1]))
            .map(|&(at, _, _)| op(at, 0))
            .collect();
        let pointers: std::collections::HashSet<u32> = found
            .iter()
            .filter(|&&(at, o, _)| o == OP_TYPE_POINTER && unsized_structs.contains(&op(at, 2)))
            .map(|&(at, _, _)| op(at, 0))
            .collect();
        let arrays: Vec<u32> = found
            .iter()
            .filter(|&&(at, o, _)| {
                o == OP_VARIABLE
                    && pointers.contains(&op(at, 0))
                    && [STORAGE_UNIFORM, STORAGE_STORAGE_BUFFER].contains(&op(at, 2))
            })
            .map(|&(at, _, _)| op(at, 1))
            .collect();
        let indexed = |var: u32| {
            found.iter().any(|&(at, o, _)| {
                [OP_ACCESS_CHAIN, OP_IN_BOUNDS_ACCESS_CHAIN].contains(&o) && op(at, 2) == var
            })
        };
        let measured = |var: u32| found.iter().any(|&(at, o, _)| o == OP_ARRAY_LENGTH && op(at, 2) == var);
        for var in arrays.into_iter().filter(|&v| indexed(v)) {
            assert!(
                measured(var),
                "{name}: runtime array %{var} is indexed but never measured (arrayLength)"
            );
        }
        // Images: each variable a fetch, read or write uses is also size-queried. An image
        // operand is a load of the variable, or OpImage of such a load.
        let mut source: std::collections::HashMap<u32, u32> = std::collections::HashMap::new();
        for &(at, o, _) in &found {
            match o {
                OP_LOAD => {
                    source.insert(op(at, 1), op(at, 2));
                }
                OP_IMAGE => {
                    let from = source.get(&op(at, 2)).copied().unwrap_or(op(at, 2));
                    source.insert(op(at, 1), from);
                }
                _ => {}
            }
        }
        let variable = |id: u32| source.get(&id).copied().unwrap_or(id);
        let queried: std::collections::HashSet<u32> = found
            .iter()
            .filter(|&&(_, o, _)| [OP_IMAGE_QUERY_SIZE_LOD, OP_IMAGE_QUERY_SIZE].contains(&o))
            .map(|&(at, _, _)| variable(op(at, 2)))
            .collect();
        for &(at, o, _) in &found {
            let image = match o {
                OP_IMAGE_FETCH | OP_IMAGE_SPARSE_FETCH | OP_IMAGE_READ => op(at, 2),
                OP_IMAGE_WRITE => op(at, 0),
                _ => continue,
            };
            let var = variable(image);
            assert!(
                queried.contains(&var),
                "{name}: image %{var} is fetched or stored but its size never queried"
            );
        }
    }
}

#[test]
fn misuse_fill_with_a_count_past_its_range_writes_only_the_range() {
    with_gpu(|set| {
        let device = &set.devices()[0];
        let program = ComputeProgram::new(device, "misuse fill past", &shaders::FILL, 1).unwrap();
        // 64 words bound in the middle of a larger buffer; a count of 256 dispatched.
        let range = 256;
        let target = guarded(device, "misuse fill past target", range, BufferUsage::STORAGE);
        dispatch(device, &program, &[middle(&target, range)], &words(&[256, 1000]), [4, 1, 1]);
        let inside = as_words(&range_after_checking_guards(&target, range));
        assert_eq!(inside, (0..64).map(|i| 1000 + i).collect::<Vec<u32>>(), "the range itself is filled");
        // A range of 2 bytes holds no whole word: nothing is written.
        let tiny = guarded(device, "misuse fill tiny", 2, BufferUsage::STORAGE);
        dispatch(device, &program, &[middle(&tiny, 2)], &words(&[64, 7]), [1, 1, 1]);
        assert_eq!(range_after_checking_guards(&tiny, 2), [SENTINEL; 2]);
    });
}
