//! Table-driven tests of the tight placed-resource alignment spec: each case is named after the spec
//! line it checks.

use residency_core::format::Format;
use residency_core::placement::floors::spec_floor;
use residency_core::placement::heap::{
    check_heap_placement, committed_heap_size, heap_alignment, is_valid_heap_offset, EXPLICIT_HEAP_ALIGNMENT,
    IMPLICIT_HEAP_GRANULARITY, MSAA_HEAP_ALIGNMENT,
};
use residency_core::placement::small::{estimated_small_size, most_detailed_mip_tiles, TileSize};
use residency_core::placement::tables::{spec_range, KIB_4, KIB_64, MIB_4};
use residency_core::placement::{
    alignment_floor, answer_request, is_small_resource, parse_request, AlignmentMode, BufferUse, ErrorCode,
    ErrorReport, FixedRequirements, HeapDesc, HeapPlacementError, Message, MessageId, Placement,
    PlacementEngine, PlacementError, ResourceClass, ResourceDesc, ResourceDimension, ResourceFlag, Severity,
    TextureLayout, TightAlignmentTier,
};

const MIB_2: u64 = 2 << 20;

/// A device whose driver asks for nothing (alignment 1, no size rounding, granularity 1): every
/// answer is the spec table's own value.
fn minimal() -> FixedRequirements {
    let mut s = FixedRequirements::discrete();
    s.limits.buffer_image_granularity = 1;
    s.buffer_alignment = 1;
    s.uniform_alignment = 1;
    s.texel_alignment = 1;
    s.buffer_size_granularity = 1;
    s.image_alignment = 1;
    s.large_image_alignment = 1;
    s.msaa_alignment = 1;
    s
}

/// (offset, size, alignment) of each element, total size, total alignment, messages.
type Answer = (Vec<(u64, u64, u64)>, u64, u64, Vec<Message>);

fn info(source: &FixedRequirements, placement: Placement, descs: &[ResourceDesc]) -> Answer {
    let mut messages = Vec::new();
    let info = PlacementEngine::new(source)
        .allocation_info(placement, descs, &mut messages)
        .unwrap_or_else(|e| panic!("{descs:?}: {e}"));
    assert_eq!(info.messages, messages, "the answer carries the sink's messages");
    let elements = info.elements.iter().map(|e| (e.offset, e.size, e.alignment)).collect();
    (elements, info.size, info.alignment, messages)
}

fn one(source: &FixedRequirements, placement: Placement, desc: ResourceDesc) -> (u64, u64) {
    let (elements, _, _, _) = info(source, placement, &[desc]);
    (elements[0].2, elements[0].1)
}

fn error(source: &FixedRequirements, placement: Placement, desc: ResourceDesc) -> PlacementError {
    PlacementEngine::new(source)
        .allocation_info(placement, &[desc], &mut Vec::new())
        .expect_err("expected an error")
}

fn rgba8(w: u64, h: u32) -> ResourceDesc {
    ResourceDesc::texture_2d(Format::R8G8B8A8Unorm, w, h).with_mip_levels(1)
}

fn msaa(w: u64, h: u32) -> ResourceDesc {
    rgba8(w, h).with_samples(4)
}

const SMALL_TEX: (u64, u32) = (64, 64);
const LARGE_TEX: (u64, u32) = (1024, 1024);
const SMALL_MSAA: (u64, u32) = (256, 256);
const LARGE_MSAA: (u64, u32) = (2048, 2048);

struct TableCase {
    line: &'static str,
    placement: Placement,
    desc: ResourceDesc,
    alignment: u64,
}

#[test]
fn spec_table_entries_with_a_driver_that_asks_for_nothing() {
    use Placement::{Committed, Placed};
    let tex_s = rgba8(SMALL_TEX.0, SMALL_TEX.1);
    let tex_l = rgba8(LARGE_TEX.0, LARGE_TEX.1);
    let ms_s = msaa(SMALL_MSAA.0, SMALL_MSAA.1);
    let ms_l = msaa(LARGE_MSAA.0, LARGE_MSAA.1);
    let buf = ResourceDesc::buffer(100);
    let cases = [
        TableCase { line: "legacy placed: buffers 64 KiB", placement: Placed, desc: buf, alignment: KIB_64 },
        TableCase {
            line: "legacy placed: small textures 4 KiB",
            placement: Placed,
            desc: tex_s,
            alignment: KIB_4,
        },
        TableCase {
            line: "legacy placed: textures max 64 KiB",
            placement: Placed,
            desc: tex_l,
            alignment: KIB_64,
        },
        TableCase {
            line: "legacy placed: small MSAA 64 KiB",
            placement: Placed,
            desc: ms_s,
            alignment: KIB_64,
        },
        TableCase { line: "legacy placed: MSAA max 4 MiB", placement: Placed, desc: ms_l, alignment: MIB_4 },
        TableCase {
            line: "legacy committed: buffers 64 KiB",
            placement: Committed,
            desc: buf,
            alignment: KIB_64,
        },
        TableCase {
            line: "legacy committed: MSAA 4 MiB",
            placement: Committed,
            desc: ms_l,
            alignment: MIB_4,
        },
        TableCase {
            line: "tight placed: buffers min 8 B",
            placement: Placed,
            desc: buf.tight(),
            alignment: 8,
        },
        TableCase {
            line: "tight placed: textures min 8 B",
            placement: Placed,
            desc: tex_l.tight(),
            alignment: 8,
        },
        TableCase { line: "tight placed: MSAA min 8 B", placement: Placed, desc: ms_l.tight(), alignment: 8 },
        TableCase {
            line: "tight committed: buffers 4 KiB",
            placement: Committed,
            desc: buf.tight(),
            alignment: KIB_4,
        },
        TableCase {
            line: "tight committed: textures min 4 KiB",
            placement: Committed,
            desc: tex_l.tight(),
            alignment: KIB_4,
        },
        TableCase {
            line: "tight committed: MSAA min 4 KiB",
            placement: Committed,
            desc: ms_l.tight(),
            alignment: KIB_4,
        },
    ];
    let source = minimal();
    for case in cases {
        let (alignment, _) = one(&source, case.placement, case.desc);
        assert_eq!(alignment, case.alignment, "{}", case.line);
    }
}

#[test]
fn spec_table_maxima_hold_for_drivers_at_the_maximum() {
    // "Drivers must return an alignment between the AlignmentRestriction and the max alignment value."
    let mut source = minimal();
    source.buffer_alignment = 256;
    source.uniform_alignment = 256;
    source.texel_alignment = 256;
    source.large_image_alignment = KIB_64;
    source.large_image_threshold = 0;
    source.msaa_alignment = MIB_4;
    let cases = [
        ("tight placed: buffers max 256 B", ResourceDesc::buffer(100).tight(), 256),
        ("tight placed: textures max 64 KiB", rgba8(LARGE_TEX.0, LARGE_TEX.1).tight(), KIB_64),
        ("tight placed: MSAA max 4 MiB", msaa(LARGE_MSAA.0, LARGE_MSAA.1).tight(), MIB_4),
    ];
    for (line, desc, expected) in cases {
        let (elements, _, _, messages) = info(&source, Placement::Placed, &[desc]);
        assert_eq!(elements[0].2, expected, "{line}");
        assert!(messages.is_empty(), "{line}: {messages:?}");
    }
}

#[test]
fn spec_table_cells_as_data() {
    use AlignmentMode::{Legacy, Tight};
    use Placement::{Committed, Placed};
    use ResourceClass::{Buffer, Msaa, Texture};
    let cells = [
        (Legacy, Placed, Buffer, false, KIB_64, KIB_64),
        (Legacy, Placed, Texture, true, KIB_4, KIB_4),
        (Legacy, Placed, Texture, false, KIB_4, KIB_64),
        (Legacy, Placed, Msaa, true, KIB_64, KIB_64),
        (Legacy, Placed, Msaa, false, KIB_64, MIB_4),
        (Tight, Placed, Buffer, false, 8, 256),
        (Tight, Placed, Texture, false, 8, KIB_64),
        (Tight, Placed, Texture, true, 8, KIB_4),
        (Tight, Placed, Msaa, false, 8, MIB_4),
        (Tight, Placed, Msaa, true, 8, KIB_64),
        (Tight, Committed, Buffer, false, KIB_4, KIB_4),
        (Tight, Committed, Texture, false, KIB_4, KIB_64),
        (Tight, Committed, Texture, true, KIB_4, KIB_4),
        (Tight, Committed, Msaa, false, KIB_4, MIB_4),
        (Tight, Committed, Msaa, true, KIB_4, KIB_64),
    ];
    for (mode, placement, class, small, min, max) in cells {
        let r = spec_range(mode, placement, class, small);
        assert_eq!((r.min, r.max), (min, max), "{mode:?} {placement:?} {class:?} small={small}");
    }
}

#[test]
fn legacy_buffers_are_sized_to_the_smallest_multiple_of_64_kib() {
    // FAQ: "it was safe to assume buffers have 64KiB alignment and sized to be the smallest multiple of
    // 64KiB that would fit the specified width."
    assert_eq!(one(&minimal(), Placement::Placed, ResourceDesc::buffer(100)), (KIB_64, KIB_64));
    assert_eq!(one(&minimal(), Placement::Placed, ResourceDesc::buffer(KIB_64 + 1)), (KIB_64, 2 * KIB_64));
}

#[test]
fn drivers_should_size_tight_buffers_by_width() {
    // DDI: "Drivers should size buffers appropriately (desc.width) rather than assume 64KiB size."
    let source = FixedRequirements::discrete(); // sizes rounded to 4 B by the driver
    assert_eq!(one(&source, Placement::Placed, ResourceDesc::buffer(100).tight()).1, 100);
    assert_eq!(one(&source, Placement::Placed, ResourceDesc::buffer(101).tight()).1, 104);
}

#[test]
fn committed_resources_use_the_4_kib_implicit_heap_granularity() {
    let (alignment, size) = one(&minimal(), Placement::Committed, ResourceDesc::buffer(100).tight());
    assert_eq!((alignment, size), (KIB_4, KIB_4));
    assert_eq!(committed_heap_size(KIB_4 + 1), 2 * KIB_4);
    assert_eq!(IMPLICIT_HEAP_GRANULARITY, KIB_4);
}

struct SmallCase {
    line: &'static str,
    desc: ResourceDesc,
    small: bool,
}

#[test]
fn small_resource_rule() {
    let t2 = |f, w, h| ResourceDesc::texture_2d(f, w, h).with_mip_levels(1);
    let cases = [
        SmallCase {
            line: "8 bpp: 64×64 tiles, 256×256 is 16 tiles",
            desc: t2(Format::R8Unorm, 256, 256),
            small: true,
        },
        SmallCase { line: "8 bpp: 257×256 is 20 tiles", desc: t2(Format::R8Unorm, 257, 256), small: false },
        SmallCase {
            line: "16 bpp: 64×32 tiles, 256×128 is 16",
            desc: t2(Format::R16Float, 256, 128),
            small: true,
        },
        SmallCase { line: "16 bpp: 256×129 is 20", desc: t2(Format::R16Float, 256, 129), small: false },
        SmallCase {
            line: "32 bpp: 32×32 tiles, 128×128 is 16",
            desc: t2(Format::R32Float, 128, 128),
            small: true,
        },
        SmallCase { line: "32 bpp: 129×128 is 20", desc: t2(Format::R32Float, 129, 128), small: false },
        SmallCase {
            line: "64 bpp: 32×16 tiles, 128×64 is 16",
            desc: t2(Format::R16G16B16A16Float, 128, 64),
            small: true,
        },
        SmallCase {
            line: "64 bpp: 128×65 is 20",
            desc: t2(Format::R16G16B16A16Float, 128, 65),
            small: false,
        },
        SmallCase {
            line: "128 bpp: 16×16 tiles, 64×64 is 16",
            desc: t2(Format::R32G32B32A32Float, 64, 64),
            small: true,
        },
        SmallCase {
            line: "128 bpp: 65×64 is 20", desc: t2(Format::R32G32B32A32Float, 65, 64), small: false
        },
        SmallCase {
            line: "BC7 counts 16-byte blocks: 256×256 texels",
            desc: t2(Format::Bc7Unorm, 256, 256),
            small: true,
        },
        SmallCase { line: "BC7: 260×256 texels", desc: t2(Format::Bc7Unorm, 260, 256), small: false },
        SmallCase {
            line: "BC1 counts 8-byte blocks: 512×256 texels",
            desc: t2(Format::Bc1Unorm, 512, 256),
            small: true,
        },
        SmallCase { line: "BC1: 516×256 texels", desc: t2(Format::Bc1Unorm, 516, 256), small: false },
        SmallCase {
            line: "1D: 4096 bytes per tile, 16384 r32",
            desc: ResourceDesc::texture_1d(Format::R32Float, 16_384).with_mip_levels(1),
            small: true,
        },
        SmallCase {
            line: "1D: 16385 r32",
            desc: ResourceDesc::texture_1d(Format::R32Float, 16_385).with_mip_levels(1),
            small: false,
        },
        SmallCase {
            line: "3D: 8 bpp 16×16×16 tiles, 64×64×16",
            desc: ResourceDesc::texture_3d(Format::R8Unorm, 64, 64, 16).with_mip_levels(1),
            small: true,
        },
        SmallCase {
            line: "3D: 64×64×17",
            desc: ResourceDesc::texture_3d(Format::R8Unorm, 64, 64, 17).with_mip_levels(1),
            small: false,
        },
        SmallCase {
            line: "arrays count every layer of the most detailed mip: 4 × 64×64 r32",
            desc: t2(Format::R32Float, 64, 64).with_depth_or_array_size(4),
            small: true,
        },
        SmallCase {
            line: "arrays: 5 × 64×64 r32",
            desc: t2(Format::R32Float, 64, 64).with_depth_or_array_size(5),
            small: false,
        },
        SmallCase {
            line: "only the most detailed mip counts",
            desc: ResourceDesc::texture_2d(Format::R32Float, 128, 128),
            small: true,
        },
        SmallCase {
            line: "MSAA: 64 KiB tiles, <= 4 MiB: 512×512 4x rgba8",
            desc: msaa(512, 512),
            small: true,
        },
        SmallCase { line: "MSAA: 513×512 4x rgba8", desc: msaa(513, 512), small: false },
        SmallCase {
            line: "render targets are never small",
            desc: t2(Format::R8Unorm, 8, 8).with_flag(ResourceFlag::AllowRenderTarget),
            small: false,
        },
        SmallCase {
            line: "depth-stencil is never small",
            desc: t2(Format::D32Float, 8, 8).with_flag(ResourceFlag::AllowDepthStencil),
            small: false,
        },
        SmallCase {
            line: "small resources must have UNKNOWN layout",
            desc: t2(Format::R8Unorm, 8, 8).with_layout(TextureLayout::RowMajor),
            small: false,
        },
        SmallCase { line: "buffers are not small resources", desc: ResourceDesc::buffer(8), small: false },
    ];
    for case in cases {
        assert_eq!(is_small_resource(&case.desc), case.small, "{}", case.line);
    }
    assert_eq!(most_detailed_mip_tiles(&t2(Format::R8Unorm, 256, 256), TileSize::Kib4), Some(16));
    assert_eq!(estimated_small_size(&msaa(512, 512)), Some(MIB_4));
}

#[test]
fn small_resource_rule_selects_the_smaller_alignment() {
    let source = minimal();
    assert_eq!(one(&source, Placement::Placed, rgba8(128, 128)).0, KIB_4);
    assert_eq!(one(&source, Placement::Placed, rgba8(129, 128)).0, KIB_64);
    assert_eq!(one(&source, Placement::Placed, msaa(512, 512)).0, KIB_64);
    assert_eq!(one(&source, Placement::Placed, msaa(513, 512)).0, MIB_4);
}

#[test]
fn validation_warning_tight_with_cross_adapter_forces_64_kib_or_4_mib_for_msaa() {
    let source = FixedRequirements::discrete();
    for (desc, expected) in [
        (ResourceDesc::buffer(100), KIB_64),
        (rgba8(SMALL_TEX.0, SMALL_TEX.1), KIB_64),
        (msaa(SMALL_MSAA.0, SMALL_MSAA.1), MIB_4),
    ] {
        let desc = desc.tight().with_flag(ResourceFlag::AllowCrossAdapter);
        let (elements, _, _, messages) = info(&source, Placement::Placed, &[desc]);
        assert_eq!(elements[0].2, expected, "{desc:?}");
        assert_eq!(messages.len(), 1);
        assert_eq!(
            (messages[0].severity, messages[0].id),
            (Severity::Warning, MessageId::TightAlignmentWithCrossAdapter)
        );
    }
}

#[test]
fn validation_invalid_arg_list() {
    let source = FixedRequirements::discrete();
    let unsupported = FixedRequirements::without_tight_support();
    let cases: [(&str, &FixedRequirements, Placement, ResourceDesc, &str); 9] = [
        (
            "tight with 64KB_UNDEFINED_SWIZZLE (reserved resources)",
            &source,
            Placement::Placed,
            rgba8(256, 256).with_layout(TextureLayout::Undefined64KbSwizzle).tight(),
            "TIGHT_ALIGNMENT_WITH_64KB_LAYOUT",
        ),
        (
            "tight with 64KB_STANDARD_SWIZZLE",
            &source,
            Placement::Placed,
            rgba8(256, 256).with_layout(TextureLayout::Standard64KbSwizzle).tight(),
            "TIGHT_ALIGNMENT_WITH_64KB_LAYOUT",
        ),
        (
            "tight when the tier is NOT_SUPPORTED",
            &unsupported,
            Placement::Placed,
            ResourceDesc::buffer(100).tight(),
            "TIGHT_ALIGNMENT_NOT_SUPPORTED",
        ),
        (
            "alignment non-zero and not a power of two",
            &source,
            Placement::Placed,
            ResourceDesc::buffer(100).tight().with_alignment(48),
            "ALIGNMENT_NOT_POWER_OF_TWO",
        ),
        (
            "alignment above the placed tight buffer maximum (256 B)",
            &source,
            Placement::Placed,
            ResourceDesc::buffer(100).tight().with_alignment(512),
            "ALIGNMENT_ABOVE_MAXIMUM",
        ),
        (
            "alignment above the committed tight buffer maximum (4 KiB)",
            &source,
            Placement::Committed,
            ResourceDesc::buffer(100).tight().with_alignment(8 << 10),
            "ALIGNMENT_ABOVE_MAXIMUM",
        ),
        (
            "alignment above the texture maximum (64 KiB)",
            &source,
            Placement::Placed,
            rgba8(64, 64).tight().with_alignment(128 << 10),
            "ALIGNMENT_ABOVE_MAXIMUM",
        ),
        (
            "alignment above the MSAA maximum (4 MiB)",
            &source,
            Placement::Placed,
            msaa(64, 64).tight().with_alignment(8 << 20),
            "ALIGNMENT_ABOVE_MAXIMUM",
        ),
        (
            "alignment above the legacy buffer maximum (64 KiB)",
            &source,
            Placement::Placed,
            ResourceDesc::buffer(100).with_alignment(128 << 10),
            "ALIGNMENT_ABOVE_MAXIMUM",
        ),
    ];
    for (line, source, placement, desc, id) in cases {
        let e = error(source, placement, desc);
        assert_eq!((e.code(), e.id()), (ErrorCode::InvalidArg, id), "{line}: {e}");
    }
    assert_eq!(PlacementEngine::new(&unsupported).tier(), TightAlignmentTier::NotSupported);
}

#[test]
fn non_zero_alignment_is_a_target_floor_clamped_up_with_alignment_overridden() {
    let source = FixedRequirements::discrete(); // all-usage buffers: driver alignment 64
    let (elements, _, _, messages) =
        info(&source, Placement::Placed, &[ResourceDesc::buffer(100).tight().with_alignment(16)]);
    assert_eq!(elements[0].2, 64);
    assert_eq!(messages.len(), 1);
    assert_eq!((messages[0].severity, messages[0].id), (Severity::Info, MessageId::AlignmentOverridden));
    assert_eq!(serde_json::to_value(messages[0].id).unwrap(), "ALIGNMENT_OVERRIDDEN");

    let (elements, _, _, messages) =
        info(&source, Placement::Placed, &[ResourceDesc::buffer(100).tight().with_alignment(256)]);
    assert_eq!(elements[0].2, 256, "a valid floor above the minimum is honoured");
    assert!(messages.is_empty());
}

#[test]
fn a_desc_read_back_can_be_passed_back_unchanged() {
    let source = FixedRequirements::discrete();
    for desc in [
        ResourceDesc::buffer(100).tight(),
        ResourceDesc::buffer(100),
        rgba8(64, 64).tight(),
        msaa(600, 600).tight(),
        ResourceDesc::buffer(100).tight().with_flag(ResourceFlag::AllowCrossAdapter),
    ] {
        for placement in [Placement::Placed, Placement::Committed] {
            let (alignment, size) = one(&source, placement, desc);
            let read_back = desc.with_alignment(alignment);
            let (elements, _, _, messages) = info(&source, placement, &[read_back]);
            assert_eq!((elements[0].2, elements[0].1), (alignment, size), "{desc:?} {placement:?}");
            assert!(messages.iter().all(|m| m.id != MessageId::AlignmentOverridden));
        }
    }
}

#[test]
fn floor_rules_per_use_case() {
    let cases = [
        ("Raw UAV / SRV: 16 B", BufferUse::RawUavSrv, 16),
        ("acceleration-structure build inputs: 16 B", BufferUse::AccelerationStructureInputs, 16),
        ("DispatchRays shader tables: 64 B", BufferUse::ShaderTable, 64),
        ("CLAS / opacity micromaps: 128 B", BufferUse::ClusterOrMicromap, 128),
        ("constant buffer view target: 256 B", BufferUse::ConstantBuffer, 256),
        ("video decode bitstream / histogram: 256 B", BufferUse::VideoDecode, 256),
    ];
    for (line, use_case, floor) in cases {
        assert_eq!(use_case.spec_floor(), floor, "{line}");
        assert_eq!(spec_floor(&[use_case]), floor, "{line}");
    }
    let floors: Vec<u64> = BufferUse::ALL.iter().map(|u| u.spec_floor()).collect();
    assert!(floors.windows(2).all(|w| w[0] <= w[1]), "listed in ascending order of floor");
}

#[test]
fn floor_rules_a_buffer_with_several_uses_takes_the_max() {
    assert_eq!(spec_floor(&[BufferUse::RawUavSrv, BufferUse::ShaderTable]), 64);
    assert_eq!(
        spec_floor(&[BufferUse::ClusterOrMicromap, BufferUse::RawUavSrv, BufferUse::ConstantBuffer]),
        256
    );
    assert_eq!(spec_floor(&[]), 0);
}

#[test]
fn floor_rules_combine_with_vulkan_offset_alignment_limits() {
    let mut limits = FixedRequirements::typical_limits();
    limits.min_storage_buffer_offset_alignment = 64;
    limits.min_texel_buffer_offset_alignment = 32;
    limits.min_uniform_buffer_offset_alignment = 256;
    assert_eq!(alignment_floor(&[BufferUse::RawUavSrv], &limits), 64, "storage limit above the spec's 16");
    assert_eq!(alignment_floor(&[BufferUse::ConstantBuffer], &limits), 256);
    assert_eq!(alignment_floor(&[BufferUse::ShaderTable], &limits), 64, "no Vulkan limit in Limits");
    limits.min_storage_buffer_offset_alignment = 4;
    limits.min_texel_buffer_offset_alignment = 4;
    assert_eq!(alignment_floor(&[BufferUse::RawUavSrv], &limits), 16, "spec floor above the device's");
    assert_eq!(alignment_floor(&[], &limits), 0);
}

#[test]
fn floor_rules_the_floor_is_honoured_and_round_trips() {
    let source = FixedRequirements::discrete();
    let floor = alignment_floor(&[BufferUse::ConstantBuffer], &source.limits);
    let desc = ResourceDesc::buffer(1000).tight().with_alignment(floor);
    let (alignment, size) = one(&source, Placement::Placed, desc);
    assert_eq!(alignment, 256);
    assert_eq!(one(&source, Placement::Placed, desc.with_alignment(alignment)), (alignment, size));
}

fn tiny_256(source: &FixedRequirements) -> ResourceDesc {
    let d = ResourceDesc::buffer(256).tight().with_alignment(256);
    assert_eq!(one(source, Placement::Placed, d).0, 256);
    d
}

fn tiny_2mib(source: &FixedRequirements) -> ResourceDesc {
    let d = msaa(64, 64).tight().with_alignment(MIB_2);
    assert_eq!(one(source, Placement::Placed, d).0, MIB_2);
    d
}

#[test]
fn array_rule_ordering_example_2_mib_in_the_middle_is_6_mib_otherwise_4_mib() {
    let source = FixedRequirements::discrete();
    let (a, m) = (tiny_256(&source), tiny_2mib(&source));
    for (line, descs, size) in [
        ("2 MiB-aligned resource first: 4 MiB", [m, a, a], 4 << 20),
        ("2 MiB-aligned resource in the middle: 6 MiB", [a, m, a], 6 << 20),
        ("2 MiB-aligned resource last: 4 MiB", [a, a, m], 4 << 20),
    ] {
        let (elements, total, alignment, _) = info(&source, Placement::Placed, &descs);
        assert_eq!(total, size, "{line}");
        assert_eq!(alignment, MIB_2, "{line}: the alignment is always the largest");
        for (offset, _, align) in elements {
            assert_eq!(offset % align, 0, "{line}");
        }
    }
}

#[test]
fn array_rule_8192_buffers_of_256_b_then_the_2_mib_resource_waste_nothing() {
    let source = FixedRequirements::discrete();
    let mut descs = vec![tiny_256(&source); 8192];
    descs.push(tiny_2mib(&source));
    let (elements, total, alignment, _) = info(&source, Placement::Placed, &descs);
    assert_eq!(elements[8191].0, 8191 * 256);
    assert_eq!(elements[8192].0, MIB_2, "no padding before the 2 MiB resource");
    assert_eq!((total, alignment), (4 << 20, MIB_2));
}

#[test]
fn array_rule_is_cpp_struct_layout() {
    // struct { alignas(8) u8 a[3]; alignas(64) u8 b[1]; alignas(8) u8 c[5]; }: sizeof(b) is 64, so the
    // offsets are 0, 64, 128 and the size 192.
    let source = minimal();
    let b = |w, a| ResourceDesc::buffer(w).tight().with_alignment(a);
    let (elements, total, alignment, _) = info(&source, Placement::Placed, &[b(3, 8), b(1, 64), b(5, 8)]);
    let offsets: Vec<u64> = elements.iter().map(|e| e.0).collect();
    assert_eq!(offsets, [0, 64, 128]);
    assert_eq!((total, alignment), (192, 64));
}

#[test]
fn heap_rules() {
    assert_eq!(heap_alignment(false), EXPLICIT_HEAP_ALIGNMENT);
    assert_eq!(heap_alignment(true), MSAA_HEAP_ALIGNMENT);
    assert_eq!((EXPLICIT_HEAP_ALIGNMENT, MSAA_HEAP_ALIGNMENT), (KIB_64, MIB_4));
    assert!(is_valid_heap_offset(768, 256));
    assert!(!is_valid_heap_offset(770, 256));

    let source = FixedRequirements::discrete();
    let engine = PlacementEngine::new(&source);
    let buffer = engine
        .resource_allocation_info(Placement::Placed, &ResourceDesc::buffer(100).tight(), &mut Vec::new())
        .unwrap();
    let heap = HeapDesc::new(1000, false);
    assert_eq!((heap.size, heap.alignment), (KIB_64, KIB_64));
    assert_eq!(check_heap_placement(&heap, 64, &buffer), Ok(()), "offsets may be as small as the alignment");
    assert!(matches!(
        check_heap_placement(&heap, 32, &buffer),
        Err(HeapPlacementError::MisalignedOffset { .. })
    ));
    assert!(matches!(
        check_heap_placement(&heap, KIB_64 - 64, &buffer),
        Err(HeapPlacementError::OutOfBounds { .. })
    ));
    let ms =
        engine.resource_allocation_info(Placement::Placed, &msaa(64, 64).tight(), &mut Vec::new()).unwrap();
    assert!(matches!(check_heap_placement(&heap, 0, &ms), Err(HeapPlacementError::MsaaNeedsMsaaHeap { .. })));
    assert_eq!(check_heap_placement(&HeapDesc::new(1 << 20, true), 0, &ms), Ok(()));
}

#[test]
fn buffer_image_granularity_keeps_optimal_images_on_their_own_pages() {
    let source = FixedRequirements::discrete(); // G = 1 KiB, images 1 KiB aligned
    let mut small_image = source.clone();
    small_image.image_alignment = 16;
    let descs = [ResourceDesc::buffer(100).tight(), rgba8(4, 4).tight(), ResourceDesc::buffer(100).tight()];
    let (elements, _, _, _) = info(&small_image, Placement::Placed, &descs);
    assert_eq!(elements[1].2, 1024, "image alignment raised to bufferImageGranularity");
    assert_eq!(elements[1].1 % 1024, 0, "image size rounded to bufferImageGranularity");
    assert_eq!(elements[2].0, 2048, "the next buffer starts on a new page");
}

struct NonsenseCase {
    line: &'static str,
    desc: ResourceDesc,
    id: &'static str,
}

#[test]
fn nonsense_input_is_a_typed_error() {
    let t = rgba8(64, 64);
    let cases = [
        NonsenseCase { line: "zero width", desc: ResourceDesc::buffer(0), id: "ZERO_WIDTH" },
        NonsenseCase { line: "zero height", desc: rgba8(64, 0), id: "ZERO_HEIGHT" },
        NonsenseCase {
            line: "zero depth or array size",
            desc: t.with_depth_or_array_size(0),
            id: "ZERO_DEPTH_OR_ARRAY_SIZE",
        },
        NonsenseCase {
            line: "mips beyond the chain",
            desc: t.with_mip_levels(8),
            id: "MIP_LEVELS_BEYOND_CHAIN",
        },
        NonsenseCase { line: "sample count 0", desc: t.with_samples(0), id: "INVALID_SAMPLE_COUNT" },
        NonsenseCase { line: "sample count 3", desc: t.with_samples(3), id: "INVALID_SAMPLE_COUNT" },
        NonsenseCase {
            line: "MSAA with mips",
            desc: t.with_mip_levels(2).with_samples(4),
            id: "MSAA_NOT_SINGLE_MIP_2D",
        },
        NonsenseCase {
            line: "MSAA 3D",
            desc: ResourceDesc::texture_3d(Format::R8Unorm, 4, 4, 4).with_mip_levels(1).with_samples(4),
            id: "MSAA_NOT_SINGLE_MIP_2D",
        },
        NonsenseCase {
            line: "buffer with mips",
            desc: ResourceDesc::buffer(8).with_mip_levels(2),
            id: "BUFFER_FIELD_NOT_ONE",
        },
        NonsenseCase {
            line: "buffer with a format",
            desc: ResourceDesc { format: Format::R8Unorm, ..ResourceDesc::buffer(8) },
            id: "BUFFER_WITH_FORMAT",
        },
        NonsenseCase {
            line: "buffer with a swizzled layout",
            desc: ResourceDesc::buffer(8).with_layout(TextureLayout::Unknown),
            id: "BUFFER_LAYOUT_NOT_ROW_MAJOR",
        },
        NonsenseCase {
            line: "buffer as render target",
            desc: ResourceDesc::buffer(8).with_flag(ResourceFlag::AllowRenderTarget),
            id: "BUFFER_AS_ATTACHMENT",
        },
        NonsenseCase {
            line: "texture without format",
            desc: ResourceDesc::texture_2d(Format::Unknown, 4, 4),
            id: "TEXTURE_WITHOUT_FORMAT",
        },
        NonsenseCase {
            line: "1D texture with height",
            desc: ResourceDesc { height: 2, ..ResourceDesc::texture_1d(Format::R8Unorm, 4) },
            id: "TEXTURE1D_HEIGHT",
        },
        NonsenseCase {
            line: "texture wider than the device allows",
            desc: rgba8(1 << 40, 1),
            id: "ABOVE_DEVICE_LIMIT",
        },
        NonsenseCase {
            line: "render target and depth-stencil",
            desc: t.with_flag(ResourceFlag::AllowRenderTarget).with_flag(ResourceFlag::AllowDepthStencil),
            id: "RENDER_TARGET_AND_DEPTH_STENCIL",
        },
        NonsenseCase {
            line: "depth-stencil with a colour format",
            desc: t.with_flag(ResourceFlag::AllowDepthStencil),
            id: "FLAG_NOT_ALLOWED",
        },
        NonsenseCase {
            line: "row-major texture with layers",
            desc: t.with_layout(TextureLayout::RowMajor).with_depth_or_array_size(2),
            id: "ROW_MAJOR_TEXTURE_SHAPE",
        },
    ];
    let source = FixedRequirements::discrete();
    for case in cases {
        let e = error(&source, Placement::Placed, case.desc);
        assert_eq!((e.code(), e.id()), (ErrorCode::InvalidArg, case.id), "{}: {e}", case.line);
    }
    let e =
        PlacementEngine::new(&source).allocation_info(Placement::Placed, &[], &mut Vec::new()).unwrap_err();
    assert_eq!(e.id(), "EMPTY_REQUEST");
}

#[test]
fn errors_name_the_offending_element() {
    let source = FixedRequirements::discrete();
    let descs = [ResourceDesc::buffer(8).tight(), ResourceDesc::buffer(8).tight().with_alignment(3)];
    let e = PlacementEngine::new(&source)
        .allocation_info(Placement::Placed, &descs, &mut Vec::new())
        .unwrap_err();
    assert_eq!(e.element, 1);
    assert!(e.to_string().starts_with("descs[1]: "), "{e}");
}

#[test]
fn cli_json_answer_and_error_forms() {
    let engine = PlacementEngine::new(FixedRequirements::discrete());
    let request = r#"{"placement":"placed","descs":[
        {"dimension":"buffer","width":100,"flags":["use_tight_alignment"],"alignment":16},
        {"dimension":"texture2d","width":64,"height":64,"format":"r8g8b8a8_unorm","mip_levels":1}]}"#;
    let answer = answer_request(&engine, request, &mut Vec::new()).unwrap();
    let text = serde_json::to_string(&answer).unwrap();
    assert!(text.starts_with(r#"{"size":"#), "{text}");
    let json = serde_json::to_value(&answer).unwrap();
    let mut keys: Vec<&str> = json.as_object().unwrap().keys().map(String::as_str).collect();
    keys.sort_unstable();
    assert_eq!(keys, ["alignment", "elements", "messages", "size"]);
    assert_eq!(json["elements"][0], serde_json::json!({"offset": 0, "size": 100, "alignment": 64}));
    assert_eq!(json["elements"][1]["offset"], KIB_4);
    assert_eq!(json["messages"][0]["severity"], "info");
    assert_eq!(json["messages"][0]["id"], "ALIGNMENT_OVERRIDDEN");

    let bad = r#"{"placement":"placed","descs":[{"dimension":"buffer","width":100,"flags":["use_tight_alignment"],"alignment":3}]}"#;
    let err = answer_request(&engine, bad, &mut Vec::new()).unwrap_err();
    let json = serde_json::to_value(&err).unwrap();
    assert_eq!(json["error"]["code"], "INVALID_ARG");
    assert_eq!(json["error"]["id"], "ALIGNMENT_NOT_POWER_OF_TWO");
    assert!(json["error"]["message"].as_str().unwrap().contains("power of two"));
}

#[test]
fn malformed_json_is_a_clear_error() {
    for (text, id) in [
        ("{", "MALFORMED_JSON"),
        ("not json", "MALFORMED_JSON"),
        (r#"{"descs":[{"width":1}]}"#, "INVALID_REQUEST"),
        (r#"{"descs":[{"dimension":"buffer","width":-1}]}"#, "INVALID_REQUEST"),
        (r#"{"descs":[{"dimension":"texture2d","width":4,"format":"rgba8"}]}"#, "INVALID_REQUEST"),
        (r#"{"placement":"somewhere","descs":[]}"#, "INVALID_REQUEST"),
        (r#"{"descs":[],"extra":1}"#, "INVALID_REQUEST"),
    ] {
        let e = parse_request(text).unwrap_err();
        assert_eq!(e.id(), id, "{text}: {e}");
        let report = ErrorReport::from(&e);
        assert_eq!(report.error.code, ErrorCode::MalformedRequest);
        assert!(report.error.message.contains("line"), "{}", report.error.message);
    }
    let ok = parse_request(r#"{"descs":[{"dimension":"buffer","width":1}]}"#).unwrap();
    assert_eq!(ok.placement, Placement::Placed);
    assert_eq!(ok.descs[0].dimension, ResourceDimension::Buffer);
}
