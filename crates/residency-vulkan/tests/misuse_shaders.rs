//! Shaders and programs (issue #15): the safe constructors take only the shipped shaders, whose
//! declared interface is checked here against their SPIR-V; a program description that does not
//! match its shader, and words that are not SPIR-V even on the `unsafe` path, are typed errors
//! that create nothing. The harness fails a test on any validation message or leaked object.

use residency_core::device_mask::DeviceMask;
use residency_vulkan::ash::vk;
use residency_vulkan::compute::{BindingKind, ComputeProgram, ProgramError};
use residency_vulkan::graphics::{GraphicsProgram, VertexAttribute};
use residency_vulkan::multi::work::MultiComputeProgram;
use residency_vulkan::multi::MultiDeviceError;
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
    // Every `.spv` in this crate's shaders/ is shipped, once.
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("shaders");
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
            Some("rgen") => Stage::RayGeneration,
            Some("rmiss") => Stage::Miss,
            Some("rchit") => Stage::ClosestHit,
            other => panic!("{name}: unknown extension {other:?}"),
        };
        assert_eq!(shader.stage(), stage, "{name}: stage");
        assert!(interface.has_entry_point(stage, "main"), "{name}: {:?}", interface.entry_points);
        // Exactly the declared bindings, in binding order, each one descriptor (or the array the
        // kind declares) in set 0 (but for bindings the GLSL declares and never uses, which
        // glslc -O removes).
        let mut found: Vec<_> =
            interface.bindings.iter().map(|b| (b.set, b.binding, b.kind, b.count)).collect();
        found.sort_by_key(|&(set, binding, _, _)| (set, binding));
        let declared: Vec<_> = shader
            .bindings()
            .iter()
            .enumerate()
            .filter(|&(i, _)| !UNUSED.contains(&(name, i as u32)))
            .map(|(i, &k)| {
                let (element, count) = k.shader_declaration();
                (0, i as u32, Some(element), count)
            })
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

/// The committed SPIR-V is what glslc makes of the GLSL next to it (`shaders/build.sh` writes it).
#[test]
fn shaders_are_up_to_date() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("shaders");
    let out_dir = std::env::temp_dir().join(format!("residency-shaders-{}", std::process::id()));
    std::fs::create_dir_all(&out_dir).unwrap();
    let mut checked = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        let ext = path.extension().and_then(|e| e.to_str()).unwrap_or_default();
        if !matches!(ext, "comp" | "vert" | "frag" | "rgen" | "rmiss" | "rchit") {
            continue;
        }
        let out = out_dir.join("check.spv");
        let status = std::process::Command::new("glslc")
            .args(["--target-env=vulkan1.3", "-O", "-I"])
            .arg(dir.join("include"))
            .arg("-o")
            .arg(&out)
            .arg(&path)
            .status()
            .expect("glslc is installed (bash .ci/install-deps)");
        assert!(status.success(), "{} does not compile", path.display());
        let committed = std::fs::read(path.with_extension(format!("{ext}.spv"))).unwrap();
        assert!(
            std::fs::read(&out).unwrap() == committed,
            "{}.spv is stale: run bash crates/residency-vulkan/shaders/build.sh",
            path.display()
        );
        checked += 1;
    }
    std::fs::remove_dir_all(&out_dir).unwrap();
    assert!(checked > 0);
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
// are untouched. On lavapipe (which bounds-checks) the old shaders pass most byte checks too;
// under `RESIDENCY_VALIDATION=gpu` (GPU-assisted validation) the old `fill.comp` fails with
// `VUID-vkCmdDispatch-None-02706` (layer 1.3.239 compares an access with the end of the buffer,
// not of the bound range, so only accesses past the guard are reported), the new shaders raise
// nothing. The SPIR-V check below fails on the old shaders everywhere (the first it names:
// `placed_buffers.comp`).

use residency_core::format::Format;
use residency_core::memory::MemoryIntent;
use residency_core::tiles::{SparseImageDesc, TilePoolDesc};
use residency_core::usage::{BufferUsage, ImageUsage};
use residency_vulkan::compute::{Binding, BindingError};
use residency_vulkan::sparse::{SparseImage, SparseTilePool};
use residency_vulkan::{Buffer, BufferDesc, Filter, ImageDesc, VulkanError};

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

#[test]
fn misuse_cull_indices_with_more_quads_than_its_range_holds_writes_only_the_range() {
    with_gpu(|set| {
        let device = &set.devices()[0];
        let program = ComputeProgram::new(device, "misuse cull past", &shaders::CULL_INDICES, 1).unwrap();
        // Six indices of five quads bound; 64 quads asked for, quad 1 culled.
        let range = 5 * 6 * 4;
        let target = guarded(device, "misuse cull past target", range, BufferUsage::STORAGE);
        dispatch(device, &program, &[middle(&target, range)], &words(&[64, 0b10]), [1, 1, 1]);
        let inside = as_words(&range_after_checking_guards(&target, range));
        let expected: Vec<u32> = (0..5u32)
            .flat_map(|q| {
                let v = q * 4;
                if q == 1 {
                    [0; 6]
                } else {
                    [v, v + 1, v + 2, v + 2, v + 1, v + 3]
                }
            })
            .collect();
        assert_eq!(inside, expected);
    });
}

#[test]
fn misuse_feedback_sampling_with_a_grid_past_its_row_and_range_writes_only_the_range() {
    with_gpu(|set| {
        let device = &set.devices()[0];
        let program =
            ComputeProgram::new(device, "misuse sampling past", &shaders::FEEDBACK_SAMPLING, 1).unwrap();
        // Rows of 8 pixels, 4 rows bound; a 16 × 16 grid dispatched (frame 0, every pixel writes).
        let range = 8 * 4 * 4;
        let out = guarded(device, "misuse sampling past out", range, BufferUsage::STORAGE);
        let b = middle(&out, range);
        dispatch(device, &program, &[b, b, b], &words(&[0, 1, 1, 8]), [2, 2, 1]);
        assert_eq!(as_words(&range_after_checking_guards(&out, range)), [1; 32]);
    });
}

#[test]
fn misuse_sample_texels_past_its_image_and_range_reads_zero_and_writes_only_the_range() {
    with_gpu(|set| {
        let device = &set.devices()[0];
        let program = ComputeProgram::new(device, "misuse texels past", &shaders::SAMPLE_TEXELS, 1).unwrap();
        let usage = ImageUsage::SAMPLED | ImageUsage::COPY_DST;
        let image = device
            .create_image(&ImageDesc::new_2d("misuse texels image", Format::R8G8B8A8Unorm, 4, 4, usage))
            .unwrap();
        device.discard_to_general(&[&image]).unwrap();
        let view = image.create_view(0..1).unwrap();
        let sampler = device.create_sampler(Filter::Nearest).unwrap();
        let sampled = Binding::sampled(&view, &sampler, vk::ImageLayout::GENERAL);
        // Rows of 16 texels of a 4 × 4 image, 32 results bound, 256 asked for.
        let range = 32 * 16;
        let out = guarded(device, "misuse texels past out", range, BufferUsage::STORAGE);
        dispatch(device, &program, &[sampled, middle(&out, range)], &words(&[256, 16]), [4, 1, 1]);
        let results = as_floats(&range_after_checking_guards(&out, range));
        for i in 0..32usize {
            let (x, y) = (i % 16, i / 16);
            if x >= 4 || y >= 4 {
                assert_eq!(results[4 * i..4 * i + 4], [0.0; 4], "texel ({x}, {y}) is outside the image");
            }
        }
        // A width of 0: every result reads nothing (no division by 0).
        let zero = guarded(device, "misuse texels width 0", range, BufferUsage::STORAGE);
        dispatch(device, &program, &[sampled, middle(&zero, range)], &words(&[32, 0]), [1, 1, 1]);
        assert_eq!(as_floats(&range_after_checking_guards(&zero, range)), [0.0; 128]);
    });
}

#[test]
fn misuse_placed_buffers_with_indices_and_a_count_past_what_is_bound_reads_zero_and_writes_only_the_range() {
    with_gpu(|set| {
        let device = &set.devices()[0];
        let program = ComputeProgram::new(device, "misuse placed past", &shaders::PLACED_BUFFERS, 1).unwrap();
        let storage = BufferUsage::STORAGE;
        let vertices: Vec<f32> = (0..16).map(|v| v as f32).collect();
        let vertices = filled(device, "misuse placed vertices", &floats(&vertices), storage);
        let indices =
            filled(device, "misuse placed indices", &words(&[0, 1, 2, 3, 1000, u32::MAX, 2, 1]), storage);
        // std140 { vec4 scale; vec4 bias; uint count; }: 36 bytes; a count of 1000.
        let mut params = floats(&[2.0; 4]);
        params.extend(floats(&[0.5; 4]));
        params.extend(words(&[1000, 0, 0, 0]));
        let params = filled(device, "misuse placed params", &params, BufferUsage::UNIFORM);
        let range = 6 * 16;
        let out = guarded(device, "misuse placed out", range, storage);
        let bindings = [
            Binding::Buffer(&vertices),
            Binding::Buffer(&indices),
            Binding::Buffer(&params),
            middle(&out, range),
        ];
        dispatch(device, &program, &bindings, &[], [16, 1, 1]);
        let results = as_floats(&range_after_checking_guards(&out, range));
        for (i, index) in [0u32, 1, 2, 3, 1000, u32::MAX].into_iter().enumerate() {
            let vertex: [f32; 4] =
                if index < 4 { std::array::from_fn(|c| (4 * index as usize + c) as f32) } else { [0.0; 4] };
            let want: Vec<f32> = vertex.iter().map(|v| v * 2.0 + 0.5).collect();
            assert_eq!(results[4 * i..4 * i + 4], want[..], "result {i} (index {index})");
        }
        // A uniform range under the block's 36 bytes is refused, naming both numbers.
        let short = Binding::BufferRange { buffer: &params, offset: 0, size: 32 };
        let err = program
            .descriptor_set(&[
                Binding::Buffer(&vertices),
                Binding::Buffer(&indices),
                short,
                middle(&out, range),
            ])
            .unwrap_err();
        assert!(
            matches!(err, BindingError::RangeUnderBlock { binding: 2, bytes: 32, block: 36, .. }),
            "{err}"
        );
    });
}

/// One feedback image table entry (`FeedbackLayout::image_table`): an 8 × 8 image of 1 × 1 tiles,
/// one mip, no tail; bits at `bits`, counters at `counts`.
fn feedback_entry(bits: u32, counts: u32) -> Vec<u32> {
    let mut entry = vec![bits, 2, counts, 64, 64, 1, 0, 0, 1, 1, 8, 8, 1, 1, 1, u32::MAX, 0, 8, 8, 1];
    entry.resize(80, 0);
    entry
}

#[test]
fn misuse_feedback_with_a_table_slot_capacity_or_offsets_past_its_buffers_writes_only_the_range() {
    with_gpu(|set| {
        let device = &set.devices()[0];
        let program =
            ComputeProgram::new(device, "misuse feedback past", &shaders::FEEDBACK_VIEW, 1).unwrap();
        let storage = BufferUsage::STORAGE;
        // 64 samples, one per tile, at LOD 0 with nothing resident (min-LOD 255): 64 misses.
        let samples: Vec<f32> = (0..64)
            .flat_map(|t| [(t % 8) as f32 / 8.0 + 1.0 / 16.0, (t / 8) as f32 / 8.0 + 1.0 / 16.0, 0.0, 255.0])
            .collect();
        let samples = filled(device, "misuse feedback samples", &floats(&samples), storage);
        // 24 words of feedback buffer bound: the header (capacity 1000, far past its room for
        // 10 records), the bits at words 20..22.
        let range = 24 * 4;
        let run = |name: &str, table: &[u32], count: u32| {
            let mut fb = guarded(device, name, range, storage);
            let mut header = words(&[0x3142_4652, 0, 0, 1000]);
            header.resize(range as usize, 0);
            fb.write(GUARD, &header).unwrap();
            let table = filled(device, &format!("{name} table"), &words(table), storage);
            let bindings = [middle(&fb, range), Binding::Buffer(&table), Binding::Buffer(&samples)];
            dispatch(device, &program, &bindings, &words(&[count]), [count.div_ceil(64).min(4), 1, 1]);
            as_words(&range_after_checking_guards(&fb, range))
        };
        // Capacity past the buffer: 64 records asked, only those that fit are written.
        let fb = run("misuse feedback capacity", &feedback_entry(20, u32::MAX), 64);
        assert_eq!(fb[2], 64, "every miss counted");
        // Bits and counters past the buffer: nothing is written (no bit, so no record either).
        let fb = run("misuse feedback offsets", &feedback_entry(1 << 20, 1 << 21), 64);
        assert_eq!(fb[2], 0);
        // A table too short for slot 0's 80 words: the slot has no entry, nothing is written.
        let fb = run("misuse feedback short table", &feedback_entry(20, u32::MAX)[..40], 64);
        assert_eq!(fb[2], 0);
        // A count past the samples bound: only the 64 samples there are read.
        let fb = run("misuse feedback count", &feedback_entry(20, u32::MAX), 256);
        assert_eq!(fb[2], 64);
    });
}

#[test]
fn misuse_sparse_store_past_its_image_writes_only_the_image() {
    with_gpu(|set| {
        let device = &set.devices()[0];
        let program = ComputeProgram::new(device, "misuse store past", &shaders::SPARSE_STORE, 1).unwrap();
        let usage = ImageUsage::STORAGE | ImageUsage::COPY_SRC;
        let image = device
            .create_image(&ImageDesc::new_2d("misuse store image", Format::R8G8B8A8Unorm, 8, 8, usage))
            .unwrap();
        device.discard_to_general(&[&image]).unwrap();
        let view = image.create_view(0..1).unwrap();
        let storage = Binding::storage(&view, vk::ImageLayout::GENERAL);
        // The pattern depends only on the texel written, so every run leaves the same image;
        // regions reaching past every edge write only the texels inside.
        for (origin, size) in
            [([0i32, 0], [8i32, 8]), ([4, 4], [64, 64]), ([-4, -4], [64, 64]), ([i32::MIN, 0], [8, 8])]
        {
            let push: Vec<u8> = origin.iter().chain(&size).flat_map(|v| v.to_le_bytes()).collect();
            let groups = [(size[0] as u32).div_ceil(8), (size[1] as u32).div_ceil(8), 1];
            dispatch(device, &program, &[storage], &push, groups);
        }
        let texels = device.read_image(&image, vk::ImageLayout::GENERAL).unwrap();
        let expected: Vec<u8> = (0..8u8).flat_map(|y| (0..8u8).flat_map(move |x| [x, y, 255, 255])).collect();
        assert_eq!(texels, expected);
    });
}

#[test]
fn misuse_ptex_with_a_face_or_level_past_its_faces_reads_only_its_records() {
    with_gpu(|set| {
        let device = &set.devices()[0];
        let program = ComputeProgram::new(device, "misuse ptex past", &shaders::PTEX, 1).unwrap();
        let usage = ImageUsage::SAMPLED | ImageUsage::COPY_DST;
        let image = device
            .create_image(
                &ImageDesc::new_2d("misuse ptex slices", Format::R8G8B8A8Unorm, 16, 16, usage)
                    .with_array_layers(2),
            )
            .unwrap();
        device.discard_to_general(&[&image]).unwrap();
        let view = image.create_view_range(0..1, 0..2).unwrap();
        let sampler = device.create_sampler(Filter::Trilinear).unwrap();
        let storage = BufferUsage::STORAGE;
        // A table whose header claims 5 faces and 100 levels but holds one record (finest level
        // 0, slot words 0); probes of face 0, face 3 (no record) and a face of 2^32 - 1 (no
        // record), each at level 9.
        let mut table = vec![0u32; 32];
        table[..4].copy_from_slice(&[5, 100, 8, 16]);
        let faces = filled(device, "misuse ptex faces", &words(&table), storage);
        let probes = floats(&[0.0, 0.5, 0.5, 9.0, 3.0, 0.5, 0.5, 9.0, 4.0e9, 0.5, 0.5, 9.0]);
        let probes = filled(device, "misuse ptex probes", &probes, storage);
        let range = 3 * 2 * 16;
        let out = guarded(device, "misuse ptex out", range, storage);
        let bindings = [
            Binding::sampled(&view, &sampler, vk::ImageLayout::GENERAL),
            Binding::Buffer(&faces),
            Binding::Buffer(&probes),
            middle(&out, range),
        ];
        // 64 probes asked of 3; 100 levels claimed, a record's 12 read.
        dispatch(device, &program, &bindings, &words(&[64]), [1, 1, 1]);
        let results = as_floats(&range_after_checking_guards(&out, range));
        assert_eq!(results[4..8], [9.0, 10.0, 0.0, 1.0], "face 0: level 9 of the 12 a record has");
        // Past the last level: clamped to the record's last.
        let probes = floats(&[0.0, 0.5, 0.5, 50.0]);
        let probes = filled(device, "misuse ptex probes past", &probes, storage);
        let out = guarded(device, "misuse ptex out past", 32, storage);
        let bindings = [
            Binding::sampled(&view, &sampler, vk::ImageLayout::GENERAL),
            Binding::Buffer(&faces),
            Binding::Buffer(&probes),
            middle(&out, 32),
        ];
        dispatch(device, &program, &bindings, &words(&[64]), [1, 1, 1]);
        let past = as_floats(&range_after_checking_guards(&out, 32));
        assert_eq!(past[4..8], [11.0, 11.0, 0.0, 1.0], "face 0: clamped to the record's last level");
        assert_eq!(results[8..24], [0.0; 16], "faces without a record read nothing");
    });
}

#[test]
fn misuse_texture_array_with_a_layer_past_its_bias_block_reads_inside_it() {
    with_gpu(|set| {
        let device = &set.devices()[0];
        let program = ComputeProgram::new(device, "misuse array past", &shaders::TEXTURE_ARRAY, 1).unwrap();
        // A sparse array (the shader reads it with `sparseTextureLodARB`, which takes only a
        // sparse image); nothing resident, the LOD sampled is what is checked.
        let pool = SparseTilePool::new(
            std::sync::Arc::clone(device),
            TilePoolDesc::default().with_tiles_per_heap(4),
        )
        .unwrap();
        let view = SparseImage::new(
            &pool,
            "misuse array slices",
            &SparseImageDesc::new_2d(Format::R8G8B8A8Unorm, 16, 16).with_array_layers(4),
            false,
        )
        .unwrap();
        let sampler = device.create_sampler(Filter::Trilinear).unwrap();
        // bias[k].x = k for the 256 entries of the block.
        let bias: Vec<f32> = (0..256).flat_map(|k| [k as f32, 0.0, 0.0, 0.0]).collect();
        let bias = filled(device, "misuse array bias", &floats(&bias), BufferUsage::UNIFORM);
        let storage = BufferUsage::STORAGE;
        let probes = floats(&[0.5, 0.5, 1000.0, 0.0, 0.5, 0.5, -7.0, 0.0, 0.5, 0.5, 2.0, 0.0]);
        let probes = filled(device, "misuse array probes", &probes, storage);
        let range = 3 * 2 * 16;
        let out = guarded(device, "misuse array out", range, storage);
        let sampled = Binding::sampled(&view, &sampler, vk::ImageLayout::GENERAL);
        let mut push = floats(&[0.0; 4]);
        push.extend(words(&[64]));
        dispatch(
            device,
            &program,
            &[sampled, Binding::Buffer(&bias), Binding::Buffer(&probes), middle(&out, range)],
            &push,
            [1, 1, 1],
        );
        let results = as_floats(&range_after_checking_guards(&out, range));
        let lods: Vec<f32> = (0..3).map(|p| results[8 * p + 5]).collect();
        assert_eq!(lods, [3.0, 0.0, 2.0], "layers 1000 and -7 take the last and the first layer's bias");
        // A uniform range under the block's 4096 bytes is refused.
        let short = Binding::BufferRange { buffer: &bias, offset: 0, size: 256 };
        let err = program
            .descriptor_set(&[sampled, short, Binding::Buffer(&probes), middle(&out, range)])
            .unwrap_err();
        assert!(
            matches!(err, BindingError::RangeUnderBlock { binding: 1, bytes: 256, block: 4096, .. }),
            "{err}"
        );
    });
}

/// `slice_bias.comp` with a bias buffer shorter than the array's layers, slices past both, a count
/// past its results, a feedback slot past its table: it reads inside the bias buffer (a slice past
/// its entries is the last entry's, a negative one the first's), writes only the bound results and
/// no feedback word outside the bound range.
#[test]
fn misuse_slice_bias_with_slices_counts_and_slots_past_its_buffers_stays_inside_them() {
    with_gpu(|set| {
        let device = &set.devices()[0];
        let program = ComputeProgram::new(device, "misuse slices past", &shaders::SLICE_BIAS, 1).unwrap();
        let pool = SparseTilePool::new(
            std::sync::Arc::clone(device),
            TilePoolDesc::default().with_tiles_per_heap(4),
        )
        .unwrap();
        let mut image = SparseImage::new(
            &pool,
            "misuse slices",
            &SparseImageDesc::new_2d(Format::R8G8B8A8Unorm, 16, 16).with_array_layers(4),
            false,
        )
        .unwrap();
        let mut map = residency_vulkan::sparse::MinLodMap::new(&image).unwrap();
        let uploader = residency_vulkan::Uploader::new(device, "misuse slices map", 1 << 20).unwrap();
        map.update(&uploader, &mut image).unwrap();
        uploader.wait_idle().unwrap();
        let (linear, nearest) = (
            device.create_sampler(Filter::Trilinear).unwrap(),
            device.create_sampler(Filter::Nearest).unwrap(),
        );
        let storage = BufferUsage::STORAGE;
        // Two entries for four layers: slice 0 biased by 3, slice 1 empty.
        let bias = filled(device, "misuse slices bias", &floats(&[3.0, -1.0]), storage);
        let probes = floats(&[0.5, 0.5, 1000.0, 0.0, 0.5, 0.5, -7.0, 0.0, 0.5, 0.5, 1.0, 2.0]);
        let probes = filled(device, "misuse slices probes", &probes, storage);
        let range = 3 * 2 * 16;
        let out = guarded(device, "misuse slices out", range, storage);
        // A feedback buffer of 16 words and a table shorter than one image entry.
        let feedback = guarded(device, "misuse slices feedback", 64, storage);
        let table = filled(device, "misuse slices table", &words(&[7; 20]), storage);
        let general = vk::ImageLayout::GENERAL;
        let bindings = [
            Binding::sampled(&image, &linear, general),
            Binding::sampled(map.view(), &nearest, general),
            Binding::Buffer(&bias),
            Binding::Buffer(&probes),
            middle(&out, range),
            middle(&feedback, 64),
            Binding::Buffer(&table),
        ];
        let mut push = floats(&[0.0; 4]);
        push.extend(words(&[64, u32::MAX, 9, 1]));
        dispatch(device, &program, &bindings, &push, [1, 1, 1]);
        let results = as_floats(&range_after_checking_guards(&out, range));
        let info = |p: usize| results[8 * p + 4..8 * p + 8].to_vec();
        // Layer 1000: slice 1 (the last entry), empty: code 0, LOD -1, bias -1.
        assert_eq!(info(0)[..3], [0.0, -1.0, -1.0], "a slice past the entries is the last entry's");
        // Layer -7: slice 0, bias 3; nothing resident, so not resident either.
        assert_eq!(info(1)[2], 3.0, "a negative layer is slice 0");
        assert_eq!(info(2)[..3], [0.0, -1.0, -1.0]);
        let fb = range_after_checking_guards(&feedback, 64);
        assert_eq!(fb, vec![SENTINEL; 64], "a slot past the table writes no feedback");
        drop(map);
        uploader.destroy().unwrap();
        image.release_all(&pool).unwrap();
    });
}

/// A 256 × 256 RGBA8 sparse image with every mip and nothing resident, and its tile pool.
/// (Plain images are no substitute: lavapipe crashes on `sparseTexelFetchARB` of an image that
/// is not sparse, whatever the coordinates.)
fn empty_sparse(device: &std::sync::Arc<Device>, name: &str) -> (SparseTilePool, SparseImage) {
    let pool =
        SparseTilePool::new(std::sync::Arc::clone(device), TilePoolDesc::default().with_tiles_per_heap(4))
            .unwrap();
    let image =
        SparseImage::new(&pool, name, &SparseImageDesc::new_2d(Format::R8G8B8A8Unorm, 256, 256), false)
            .unwrap();
    (pool, image)
}

#[test]
fn misuse_multi_device_with_a_count_past_its_buffers_writes_only_the_range() {
    with_gpu(|set| {
        let device = &set.devices()[0];
        let program = ComputeProgram::new(device, "misuse multi past", &shaders::MULTI_DEVICE, 1).unwrap();
        let (_pool, image) = empty_sparse(device, "misuse multi texture");
        let sampler = device.create_sampler(Filter::Nearest).unwrap();
        let storage = BufferUsage::STORAGE;
        let vertices = filled(device, "misuse multi vertices", &floats(&[0.0; 4 * 32]), storage);
        // 16 results bound, 32 vertices, a count of 4096.
        let range = 16 * 16;
        let out = guarded(device, "misuse multi out", range, storage);
        let bindings = [
            Binding::sampled(&image, &sampler, vk::ImageLayout::GENERAL),
            Binding::Buffer(&vertices),
            middle(&out, range),
        ];
        dispatch(device, &program, &bindings, &words(&[4096]), [64, 1, 1]);
        // Nothing is resident: every result is the vertex (0) plus the default texel (-1).
        assert_eq!(as_floats(&range_after_checking_guards(&out, range)), [-1.0; 64]);
    });
}

#[test]
fn misuse_sparse_probe_outside_the_image_or_past_its_buffers_reads_nothing() {
    with_gpu(|set| {
        let device = &set.devices()[0];
        let program = ComputeProgram::new(device, "misuse probe past", &shaders::SPARSE_PROBE, 1).unwrap();
        let (_pool, image) = empty_sparse(device, "misuse probe image");
        let sampler = device.create_sampler(Filter::Nearest).unwrap();
        // (x, y, lod): inside, x past mip 0, x negative, y past mip 1 (128 × 128), LOD 40 and -1.
        let probes: [[i32; 4]; 6] =
            [[1, 1, 0, 0], [256, 0, 0, 0], [-1, 0, 0, 0], [0, 128, 1, 0], [0, 0, 40, 0], [0, 0, -1, 0]];
        let probes: Vec<u8> = probes.iter().flatten().flat_map(|v| v.to_le_bytes()).collect();
        let probes = filled(device, "misuse probe probes", &probes, BufferUsage::STORAGE);
        // 8 results bound, 6 probes, a count of 64.
        let range = 8 * 32;
        let out = guarded(device, "misuse probe out", range, BufferUsage::STORAGE);
        let mut push = floats(&[0.25, 0.5, 0.75, 1.0]);
        push.extend(words(&[64]));
        let bindings = [
            Binding::sampled(&image, &sampler, vk::ImageLayout::GENERAL),
            Binding::Buffer(&probes),
            middle(&out, range),
        ];
        dispatch(device, &program, &bindings, &push, [1, 1, 1]);
        let bytes = range_after_checking_guards(&out, range);
        for i in 0..6 {
            let texel = as_floats(&bytes[32 * i..32 * i + 16]);
            let resident = as_words(&bytes[32 * i + 16..32 * i + 20])[0];
            assert_eq!((texel, resident), (vec![0.25, 0.5, 0.75, 1.0], 0), "probe {i}: the default value");
        }
        assert_eq!(bytes[6 * 32..], [SENTINEL; 64], "results past the 6 probes are not written");
    });
}

#[test]
fn misuse_distance_field_with_a_count_and_step_limit_past_what_is_bound_marches_only_its_rays() {
    with_gpu(|set| {
        let device = &set.devices()[0];
        let program = ComputeProgram::new(device, "misuse march past", &shaders::DISTANCE_FIELD, 1).unwrap();
        // A 64 × 64 × 32 sparse volume with nothing resident: every sample is the maximum step.
        let pool = SparseTilePool::new(
            std::sync::Arc::clone(device),
            TilePoolDesc::default().with_tiles_per_heap(4),
        )
        .unwrap();
        let desc = SparseImageDesc::new_3d(Format::R32Float, 64, 64, 32).with_mip_levels(1);
        let image = SparseImage::new(&pool, "misuse march volume", &desc, false).unwrap();
        let sampler = device.create_sampler(Filter::Nearest).unwrap();
        // (origin, direction): inside along +x; outside; a NaN origin; standing still.
        let rays = floats(&[
            1.0,
            1.0,
            1.0,
            0.0,
            1.0,
            0.0,
            0.0,
            0.0, //
            -1.0,
            1.0,
            1.0,
            0.0,
            1.0,
            0.0,
            0.0,
            0.0, //
            f32::NAN,
            1.0,
            1.0,
            0.0,
            1.0,
            0.0,
            0.0,
            0.0, //
            1.0,
            1.0,
            1.0,
            0.0,
            0.0,
            0.0,
            0.0,
            0.0,
        ]);
        let rays = filled(device, "misuse march rays", &rays, BufferUsage::STORAGE);
        // 5 results bound, 4 rays, a count of 4096 and a step limit of 2^32 - 1.
        let range = 5 * 16;
        let out = guarded(device, "misuse march out", range, BufferUsage::STORAGE);
        let mut push = floats(&[8.0, 0.5]);
        push.extend(words(&[u32::MAX, 4096]));
        let bindings = [
            Binding::sampled(&image, &sampler, vk::ImageLayout::GENERAL),
            Binding::Buffer(&rays),
            middle(&out, range),
        ];
        dispatch(device, &program, &bindings, &push, [64, 1, 1]);
        let bytes = range_after_checking_guards(&out, range);
        let results = as_floats(&bytes[..64]);
        assert_eq!(
            results[0..4],
            [64.0, 8.0, 8.0, 0.0],
            "steps of the maximum step until it leaves at x = 65"
        );
        assert_eq!(results[4..8], [0.0; 4], "an origin outside the volume samples nothing");
        assert_eq!(results[8..12], [0.0; 4], "a NaN origin samples nothing");
        assert_eq!(
            results[12..16],
            [8192.0, 1024.0, 1024.0, 0.0],
            "a ray standing still stops at the step cap"
        );
        assert_eq!(bytes[64..], [SENTINEL; 16], "no result past the 4 rays bound");
    });
}

#[test]
fn misuse_fallback_and_warn_shaders_with_a_count_past_their_buffers_write_only_the_range() {
    with_gpu(|set| {
        let device = &set.devices()[0];
        let (_pool, sparse) = empty_sparse(device, "misuse fallback sparse");
        let usage = ImageUsage::SAMPLED | ImageUsage::COPY_DST;
        let plain = |name: &str, format: Format, side: u32| {
            let image = device.create_image(&ImageDesc::new_2d(name, format, side, side, usage)).unwrap();
            device.discard_to_general(&[&image]).unwrap();
            let view = image.create_view(0..1).unwrap();
            (image, view)
        };
        // The software path's atlas and an indirection texture whose header is whatever the
        // discarded image holds (tile side, columns and mips of 0 included): its reads and
        // divisions are bounded too.
        let (_atlas, atlas) = plain("misuse fallback atlas", Format::R8G8B8A8Unorm, 64);
        let (_map, map) = plain("misuse fallback map", Format::R8Uint, 2);
        let (_indirection, indirection) = plain("misuse fallback indirection", Format::R32Uint, 4);
        let (trilinear, nearest) = (
            device.create_sampler(Filter::Trilinear).unwrap(),
            device.create_sampler(Filter::Nearest).unwrap(),
        );
        let general = vk::ImageLayout::GENERAL;
        // 4 probes (u, v, lod, unused), some far outside; 8 results bound; a count of 64.
        let probes =
            floats(&[0.5, 0.5, 0.0, 0.0, 7.0, -3.0, 40.0, 0.0, -1.0, 2.0, -5.0, 0.0, 0.1, 0.9, 1.5, 0.0]);
        let probes = filled(device, "misuse fallback probes", &probes, BufferUsage::STORAGE);
        let mut push = floats(&[0.25, 0.5, 0.75, 1.0]);
        push.extend(words(&[64, 0]));
        let range = 8 * 32;
        for (shader, software) in [
            (&shaders::SPARSE_FALLBACK, false),
            (&shaders::SPARSE_WARN, false),
            (&shaders::SPARSE_FALLBACK_SOFTWARE, true),
            (&shaders::SPARSE_WARN_SOFTWARE, true),
        ] {
            let program = ComputeProgram::new(device, shader.name(), shader, 1).unwrap();
            let out = guarded(device, &format!("{} out", shader.name()), range, BufferUsage::STORAGE);
            let (texture, lods) = if software {
                (
                    Binding::sampled(&atlas, &trilinear, general),
                    Binding::sampled(&indirection, &nearest, general),
                )
            } else {
                (Binding::sampled(&sparse, &trilinear, general), Binding::sampled(&map, &nearest, general))
            };
            dispatch(
                device,
                &program,
                &[texture, lods, Binding::Buffer(&probes), middle(&out, range)],
                &push,
                [1, 1, 1],
            );
            let bytes = range_after_checking_guards(&out, range);
            assert_eq!(bytes[4 * 32..], [SENTINEL; 128], "{}: results past the 4 probes", shader.name());
        }
    });
}

// Before the binding check, a plain image's view at a binding read with `sparseTexelFetchARB`
// (SPIR-V `OpImageSparseFetch`) was accepted, and dispatching it segfaulted lavapipe (Mesa
// 25.0.7). Now the binding takes only a sparse image, on every device.
#[test]
fn misuse_a_plain_image_where_a_shader_reads_with_sparse_residency_is_refused_and_creates_nothing() {
    with_gpu(|set| {
        let device = &set.devices()[0];
        let usage = ImageUsage::SAMPLED | ImageUsage::COPY_DST;
        let image = device
            .create_image(&ImageDesc::new_2d("misuse sparse plain", Format::R8G8B8A8Unorm, 256, 256, usage))
            .unwrap();
        device.discard_to_general(&[&image]).unwrap();
        let view = image.create_view(0..1).unwrap();
        let sampler = device.create_sampler(Filter::Nearest).unwrap();
        let (_pool, sparse) = empty_sparse(device, "misuse sparse texture");
        let storage = BufferUsage::STORAGE;
        let probes = filled(device, "misuse sparse probes", &words(&[0; 4 * 4]), storage);
        let uniform = filled(device, "misuse sparse bias", &[0; 256 * 16], BufferUsage::UNIFORM);
        let out = guarded(device, "misuse sparse out", 4 * 32, storage);
        let general = vk::ImageLayout::GENERAL;
        for shader in [
            &shaders::SPARSE_PROBE,
            &shaders::MULTI_DEVICE,
            &shaders::DISTANCE_FIELD,
            &shaders::TEXTURE_ARRAY,
        ] {
            let program = ComputeProgram::new(device, shader.name(), shader, 4).unwrap();
            // The other bindings are valid, so the texture is all that is refused.
            let rest: Vec<Binding<'_>> = shader.bindings()[1..]
                .iter()
                .enumerate()
                .map(|(i, kind)| match kind {
                    BindingKind::UniformBuffer => Binding::Buffer(&uniform),
                    _ if i + 2 == shader.bindings().len() => middle(&out, 4 * 32),
                    _ => Binding::Buffer(&probes),
                })
                .collect();
            let before = live(device);
            let plain: Vec<_> =
                [Binding::sampled(&view, &sampler, general)].into_iter().chain(rest.clone()).collect();
            match program.descriptor_set(&plain) {
                Err(BindingError::NotSparse { binding: 0, resource, .. }) => {
                    assert_eq!(resource, "misuse sparse plain view", "{}", shader.name())
                }
                other => {
                    panic!("{}: a plain image's view was not refused as NotSparse: {other:?}", shader.name())
                }
            }
            assert_eq!(live(device), before, "{}: the refused set created nothing", shader.name());
            let with_sparse: Vec<_> =
                [Binding::sampled(&sparse, &sampler, general)].into_iter().chain(rest.clone()).collect();
            if [&shaders::SPARSE_PROBE, &shaders::MULTI_DEVICE].iter().any(|s| std::ptr::eq(*s, shader)) {
                // A sparse image's view works as before: nothing resident, every texel the default.
                let push = if std::ptr::eq(shader, &shaders::SPARSE_PROBE) {
                    [floats(&[0.25, 0.5, 0.75, 1.0]), words(&[4])].concat()
                } else {
                    words(&[4])
                };
                dispatch(device, &program, &with_sparse, &push, [1, 1, 1]);
                let bytes = range_after_checking_guards(&out, 4 * 32);
                let default = if std::ptr::eq(shader, &shaders::SPARSE_PROBE) { 0.25 } else { -1.0 };
                assert_eq!(as_floats(&bytes[..4])[0], default, "{}: the default value", shader.name());
            } else {
                // A 2D sparse image at a `sampler2DArray` or `sampler3D`: refused for its shape
                // (misuse_a_view_whose_shape_the_shader_does_not_declare_is_refused_and_creates_nothing).
                let refused = program.descriptor_set(&with_sparse);
                assert!(
                    matches!(refused, Err(BindingError::ViewShape { .. })),
                    "{}: {refused:?}",
                    shader.name()
                );
            }
        }
    });
}

// Before the shape check, a view whose type, sample count or numeric format differs from the
// shader's `OpTypeImage` was written into the set, and a dispatch of it broke
// `VUID-vkCmdDispatch-viewType-07752` (or `-format-07753`) from safe code. Now the binding
// refuses it, for sampled and storage images alike, and creates nothing.
/// A view of both aspects of a depth/stencil image (what `create_view` gives by default) bound
/// where a shader samples or stores is refused (`VUID-VkDescriptorImageInfo-imageView-01976`); a
/// view of one aspect is taken (depth reads as float, stencil as unsigned integers), and an aspect
/// the format does not have makes no view.
#[test]
fn misuse_a_depth_and_stencil_view_bound_for_a_shader_is_refused_and_creates_nothing() {
    use residency_vulkan::ImageViewDesc;
    with_gpu(|set| {
        let device = &set.devices()[0];
        let general = vk::ImageLayout::GENERAL;
        let sampler = device.create_sampler(Filter::Nearest).unwrap();
        let out = guarded(device, "misuse aspects out", 64, BufferUsage::STORAGE);
        let texels =
            ComputeProgram::new(device, "misuse aspects texels", &shaders::SAMPLE_TEXELS, 2).unwrap();
        let usage = ImageUsage::SAMPLED | ImageUsage::DEPTH_STENCIL_ATTACHMENT;
        let depth_stencil = device
            .create_image(&ImageDesc::new_2d("misuse aspects ds", Format::D24UnormS8Uint, 4, 4, usage))
            .unwrap();
        device.discard_to_general(&[&depth_stencil]).unwrap();
        let both = depth_stencil.create_view(0..1).unwrap();
        assert_eq!(both.aspect(), vk::ImageAspectFlags::DEPTH | vk::ImageAspectFlags::STENCIL);
        let stencil = depth_stencil
            .create_view_as(&ImageViewDesc::of(&depth_stencil).with_aspect(vk::ImageAspectFlags::STENCIL))
            .unwrap();
        for (view, says) in [(&both, "both the depth and the stencil"), (&stencil, "Uint")] {
            let before = live(device);
            match texels.descriptor_set(&[Binding::sampled(view, &sampler, general), middle(&out, 64)]) {
                Err(BindingError::ViewShape { binding: 0, resource, reason, .. }) => {
                    assert_eq!(resource, view.name());
                    assert!(reason.contains(says), "{resource}: {reason}");
                }
                other => panic!("{says}: not refused as ViewShape: {other:?}"),
            }
            assert_eq!(live(device), before, "{says}: the refused set created nothing");
        }
        let before = live(device);
        let colour = ImageViewDesc::of(&depth_stencil).with_aspect(vk::ImageAspectFlags::COLOR);
        match depth_stencil.create_view_as(&colour) {
            Err(VulkanError::Unsupported { reason, .. }) => assert!(reason.contains("aspects"), "{reason}"),
            other => panic!("a COLOR view of a depth/stencil image was not refused: {other:?}"),
        }
        assert_eq!(live(device), before, "the refused view created nothing");
        // One aspect, read as the shader declares it: taken, and the dispatch reads it.
        let depth = depth_stencil
            .create_view_as(&ImageViewDesc::of(&depth_stencil).with_aspect(vk::ImageAspectFlags::DEPTH))
            .unwrap();
        dispatch(
            device,
            &texels,
            &[Binding::sampled(&depth, &sampler, general), middle(&out, 64)],
            &words(&[4, 4]),
            [1, 1, 1],
        );
        range_after_checking_guards(&out, 64);
    });
}

#[test]
fn misuse_a_view_whose_shape_the_shader_does_not_declare_is_refused_and_creates_nothing() {
    use residency_vulkan::ImageViewDesc;
    with_gpu(|set| {
        let device = &set.devices()[0];
        let general = vk::ImageLayout::GENERAL;
        let sampled = ImageUsage::SAMPLED | ImageUsage::COPY_DST;
        let sampler = device.create_sampler(Filter::Nearest).unwrap();
        let out = guarded(device, "misuse shape out", 64, BufferUsage::STORAGE);
        let texels = ComputeProgram::new(device, "misuse shape texels", &shaders::SAMPLE_TEXELS, 2).unwrap();
        let layered = device
            .create_image(
                &ImageDesc::new_2d("misuse shape layers", Format::R8G8B8A8Unorm, 4, 4, sampled)
                    .with_array_layers(6),
            )
            .unwrap();
        let cube = device
            .create_image(
                &ImageDesc::new_2d("misuse shape cube", Format::R8G8B8A8Unorm, 4, 4, sampled).cube(1),
            )
            .unwrap();
        let uint = device
            .create_image(&ImageDesc::new_2d("misuse shape uint", Format::R32Uint, 4, 4, sampled))
            .unwrap();
        let plain = device
            .create_image(&ImageDesc::new_2d("misuse shape plain", Format::R8G8B8A8Unorm, 4, 4, sampled))
            .unwrap();
        // A format the core does not name (a signed-integer one): its numeric type counts too.
        let sint = device
            .create_image(
                &ImageDesc::new_2d("misuse shape sint", Format::R8G8B8A8Unorm, 4, 4, sampled)
                    .with_vk_format(vk::Format::R8G8B8A8_SINT),
            )
            .unwrap();
        device.discard_to_general(&[&layered, &cube, &uint, &plain, &sint]).unwrap();
        let array_view = layered.create_view_range(0..1, 0..2).unwrap();
        let cube_view =
            cube.create_view_as(&ImageViewDesc::of(&cube).with_type(vk::ImageViewType::CUBE)).unwrap();
        let uint_view = uint.create_view(0..1).unwrap();
        let plain_view = plain.create_view(0..1).unwrap();
        let sint_view = sint.create_view(0..1).unwrap();
        for (view, says) in
            [(&array_view, "TYPE_2D_ARRAY"), (&cube_view, "CUBE"), (&uint_view, "Uint"), (&sint_view, "Sint")]
        {
            let before = live(device);
            let bindings = [Binding::sampled(view, &sampler, general), middle(&out, 64)];
            match texels.descriptor_set(&bindings) {
                Err(BindingError::ViewShape { binding: 0, resource, reason, .. }) => {
                    assert_eq!(resource, view.name());
                    assert!(reason.contains(says), "{resource}: {reason}");
                }
                other => panic!("{}: not refused as ViewShape: {other:?}", view.name()),
            }
            assert_eq!(live(device), before, "{}: the refused set created nothing", view.name());
        }
        // The view the shader declares is taken, and the dispatch reads it.
        dispatch(
            device,
            &texels,
            &[Binding::sampled(&plain_view, &sampler, general), middle(&out, 64)],
            &words(&[4, 4]),
            [1, 1, 1],
        );
        range_after_checking_guards(&out, 64);

        // The storage twin: `sparse_store.comp` declares an `image2D`.
        let storage = ImageUsage::STORAGE | ImageUsage::COPY_DST;
        let store = ComputeProgram::new(device, "misuse shape store", &shaders::SPARSE_STORE, 1).unwrap();
        let target = device
            .create_image(
                &ImageDesc::new_2d("misuse shape target", Format::R8G8B8A8Unorm, 8, 8, storage)
                    .with_array_layers(2),
            )
            .unwrap();
        device.discard_to_general(&[&target]).unwrap();
        let target_view = target.create_view_range(0..1, 0..2).unwrap();
        let before = live(device);
        match store.descriptor_set(&[Binding::storage(&target_view, general)]) {
            Err(BindingError::ViewShape { binding: 0, .. }) => {}
            other => panic!("a 2D-array storage view at an image2D binding was not refused: {other:?}"),
        }
        assert_eq!(live(device), before, "the refused storage set created nothing");
        let single = ImageViewDesc { layers: 1..2, ..ImageViewDesc::of(&target) }
            .with_type(vk::ImageViewType::TYPE_2D);
        let single = target.create_view_as(&single).unwrap();
        store.descriptor_set(&[Binding::storage(&single, general)]).unwrap();

        // A sparse image's view too: `texture_array.comp` declares a `sampler2DArray`.
        let (_pool, flat) = empty_sparse(device, "misuse shape flat sparse");
        let array = ComputeProgram::new(device, "misuse shape array", &shaders::TEXTURE_ARRAY, 4).unwrap();
        let uniform = filled(device, "misuse shape bias", &[0; 256 * 16], BufferUsage::UNIFORM);
        let probes = filled(device, "misuse shape probes", &words(&[0; 16]), BufferUsage::STORAGE);
        let bindings = [
            Binding::sampled(&flat, &sampler, general),
            Binding::Buffer(&uniform),
            Binding::Buffer(&probes),
            middle(&out, 64),
        ];
        match array.descriptor_set(&bindings) {
            Err(BindingError::ViewShape { binding: 0, reason, .. }) => {
                assert!(reason.contains("TYPE_2D_ARRAY"), "{reason}")
            }
            other => panic!("a 2D sparse image at a sampler2DArray binding was not refused: {other:?}"),
        }
    });
}
