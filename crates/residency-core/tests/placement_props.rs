//! Property tests modelled on the spec's HLK list, over random descriptions and random devices.

use proptest::prelude::*;
use residency_core::format::Format;
use residency_core::placement::tables::{KIB_64, MIB_4};
use residency_core::placement::{
    usage_alignment_floor, AlignmentMode, AllocationInfo, DiscardMessages, FixedRequirements, MessageId,
    Placement, PlacementEngine, PlacementError, RequirementsSource, ResourceClass, ResourceDesc,
    ResourceDimension, ResourceFlag, ResourceFlags, TextureLayout, TightAlignmentTier,
};
use residency_core::profile::{
    BufferProbe, BufferProbeUsage, CaptureInfo, DeviceIdentity, DeviceProfile, DeviceType, Extensions,
    FormatCaps, ImageDimension, ImageProbe, ImageProbeDesc, MemoryProperties, MemoryRequirements, SparseCaps,
    BUFFER_PROBE_SIZES, PROFILE_SCHEMA,
};
use residency_core::usage::BufferUsage;

fn pow2(max_shift: u32) -> impl Strategy<Value = u64> {
    (0..=max_shift).prop_map(|s| 1u64 << s)
}

/// Random devices within what real drivers answer (alignments powers of two; buffers up to 512 B so
/// that some devices are `NotSupported`).
fn fixed_source() -> impl Strategy<Value = FixedRequirements> {
    (pow2(9), pow2(8), pow2(8), pow2(8), pow2(16), pow2(16), pow2(22), pow2(16), any::<bool>()).prop_map(
        |(buffer, uniform, texel, rounding, image, large, msaa, granularity, claims)| {
            let mut s = FixedRequirements::discrete();
            s.buffer_alignment = buffer;
            s.uniform_alignment = uniform;
            s.texel_alignment = texel;
            s.buffer_size_granularity = rounding;
            s.image_alignment = image;
            s.large_image_alignment = large;
            s.msaa_alignment = msaa;
            s.limits.buffer_image_granularity = granularity;
            if !claims {
                s.tier_override = Some(TightAlignmentTier::NotSupported);
            }
            s
        },
    )
}

fn dimension() -> impl Strategy<Value = ResourceDimension> {
    prop_oneof![
        Just(ResourceDimension::Buffer),
        Just(ResourceDimension::Texture1d),
        Just(ResourceDimension::Texture2d),
        Just(ResourceDimension::Texture3d),
    ]
}

fn layout() -> impl Strategy<Value = TextureLayout> {
    prop_oneof![
        4 => Just(TextureLayout::Unknown),
        2 => Just(TextureLayout::RowMajor),
        1 => Just(TextureLayout::Undefined64KbSwizzle),
        1 => Just(TextureLayout::Standard64KbSwizzle),
    ]
}

fn alignment() -> impl Strategy<Value = u64> {
    prop_oneof![4 => Just(0u64), 4 => pow2(23), 1 => any::<u64>()]
}

/// Any description, valid or not: the engine must answer every one without panicking.
fn any_desc() -> impl Strategy<Value = ResourceDesc> {
    (
        dimension(),
        prop_oneof![3 => 0u64..70_000, 1 => any::<u64>()],
        prop_oneof![3 => 0u32..600, 1 => any::<u32>()],
        prop_oneof![3 => 0u32..20, 1 => any::<u32>()],
        prop_oneof![3 => 0u32..12, 1 => any::<u32>()],
        prop::sample::select(Format::ALL),
        prop::sample::select(&[0u32, 1, 1, 1, 2, 3, 4, 8, 16, 32, 64, 128][..]),
        layout(),
        any::<[bool; 5]>(),
        alignment(),
    )
        .prop_map(|(dimension, width, height, depth, mips, format, samples, layout, bits, alignment)| {
            let flags: ResourceFlags =
                ResourceFlag::ALL.into_iter().zip(bits).filter(|(_, on)| *on).map(|(f, _)| f).collect();
            ResourceDesc {
                dimension,
                width,
                height,
                depth_or_array_size: depth,
                mip_levels: mips,
                format,
                sample_count: samples,
                layout,
                flags,
                alignment,
            }
        })
}

/// Descriptions that are mostly valid (so the properties about answers get exercised).
fn plausible_desc() -> impl Strategy<Value = ResourceDesc> {
    let buffer = (1u64..300_000, any::<bool>(), any::<bool>(), prop_oneof![3 => Just(0u64), 1 => pow2(8)])
        .prop_map(|(width, uav, cross, alignment)| {
            let mut d = ResourceDesc::buffer(width).with_alignment(alignment);
            if uav {
                d = d.with_flag(ResourceFlag::AllowUnorderedAccess);
            }
            if cross {
                d = d.with_flag(ResourceFlag::AllowCrossAdapter);
            }
            d
        });
    let color = prop::sample::select(
        Format::ALL
            .iter()
            .copied()
            .filter(|f| *f != Format::Unknown && !f.is_depth_stencil())
            .collect::<Vec<_>>(),
    );
    let texture = (
        prop_oneof![
            Just(ResourceDimension::Texture1d),
            Just(ResourceDimension::Texture2d),
            Just(ResourceDimension::Texture3d)
        ],
        color,
        1u64..2048,
        1u32..2048,
        1u32..8,
        prop_oneof![Just(0u32), Just(1u32)],
        any::<bool>(),
        prop_oneof![3 => Just(0u64), 1 => pow2(16)],
    )
        .prop_map(|(dimension, format, width, height, depth, mips, cross, alignment)| {
            let height = if dimension == ResourceDimension::Texture1d { 1 } else { height };
            let mut d = ResourceDesc {
                height,
                depth_or_array_size: depth,
                mip_levels: mips,
                alignment,
                ..ResourceDesc::texture_2d(format, width, height)
            };
            d.dimension = dimension;
            if cross {
                d = d.with_flag(ResourceFlag::AllowCrossAdapter);
            }
            d
        });
    let msaa =
        (1u64..4096, 1u32..4096, prop::sample::select(&[2u32, 4, 8, 16][..]), any::<bool>(), any::<bool>())
            .prop_map(|(w, h, samples, rt, cross)| {
                let mut d = ResourceDesc::texture_2d(Format::R8G8B8A8Unorm, w, h)
                    .with_mip_levels(1)
                    .with_samples(samples);
                if rt {
                    d = d.with_flag(ResourceFlag::AllowRenderTarget);
                }
                if cross {
                    d = d.with_flag(ResourceFlag::AllowCrossAdapter);
                }
                d
            });
    prop_oneof![3 => buffer, 2 => texture, 1 => msaa]
}

fn placement() -> impl Strategy<Value = Placement> {
    prop_oneof![Just(Placement::Placed), Just(Placement::Committed)]
}

/// A profile with H200-like probes (buffers 16 B, uniform 64 B, sizes rounded to 4 B; one image probe).
fn profile() -> DeviceProfile {
    let mut buffer_probes = Vec::new();
    for &usage in BufferProbeUsage::ALL {
        let alignment =
            if matches!(usage, BufferProbeUsage::Uniform | BufferProbeUsage::All) { 64 } else { 16 };
        for &size in BUFFER_PROBE_SIZES {
            let requirements = MemoryRequirements {
                size: size.div_ceil(4) * 4,
                alignment,
                memory_type_bits: 0b11,
                prefers_dedicated: false,
            };
            buffer_probes.push(BufferProbe { usage, size, requirements });
        }
    }
    let desc = ImageProbeDesc {
        dimension: ImageDimension::D2,
        width: 256,
        height: 256,
        depth: 1,
        array_layers: 1,
        mip_levels: 1,
        samples: 1,
        attachment: false,
    };
    let requirements = MemoryRequirements {
        size: 256 * 256 * 4,
        alignment: 1024,
        memory_type_bits: 1,
        prefers_dedicated: false,
    };
    DeviceProfile {
        schema: PROFILE_SCHEMA,
        capture: CaptureInfo {
            tool: "test".into(),
            captured_at: String::new(),
            instance_version: String::new(),
        },
        identity: DeviceIdentity {
            name: "test".into(),
            vendor_id: 0,
            device_id: 0,
            device_type: DeviceType::Other,
            api_version: "1.3.0".into(),
            driver_name: "test".into(),
            driver_info: String::new(),
            device_uuid: String::new(),
        },
        memory: MemoryProperties { heaps: vec![], types: vec![] },
        limits: FixedRequirements::typical_limits(),
        sparse: SparseCaps::default(),
        extensions: Extensions::default(),
        formats: vec![FormatCaps {
            format: Format::R8G8B8A8Unorm,
            sampled: true,
            storage: true,
            attachment: true,
            sparse_2d: None,
            sparse_3d: None,
            sparse_2d_probe: None,
            sparse_3d_probe: None,
            image_probes: vec![ImageProbe { desc, requirements }],
        }],
        buffer_probes,
    }
}

fn run<S: RequirementsSource>(
    engine: &PlacementEngine<S>,
    placement: Placement,
    descs: &[ResourceDesc],
) -> Result<AllocationInfo, PlacementError> {
    engine.allocation_info(placement, descs, &mut Vec::new())
}

fn with_tight(desc: ResourceDesc, tight: bool) -> ResourceDesc {
    let flags = if tight {
        desc.flags.with(ResourceFlag::UseTightAlignment)
    } else {
        desc.flags.without(ResourceFlag::UseTightAlignment)
    };
    ResourceDesc { flags, ..desc }
}

/// The invariants every answer keeps.
fn check_invariants(info: &AllocationInfo) -> Result<(), TestCaseError> {
    prop_assert!(info.alignment.is_power_of_two());
    prop_assert_eq!(info.size % info.alignment, 0);
    let mut end = 0;
    for e in &info.elements {
        prop_assert!(e.alignment.is_power_of_two() && e.alignment >= 8, "alignment >= 8: {:?}", e);
        prop_assert_eq!(e.offset % e.alignment, 0);
        prop_assert!(e.offset >= end, "elements overlap");
        end = e.offset + e.size;
        prop_assert!(e.alignment >= e.details.spec_range.min, "below the spec minimum: {:?}", e);
        prop_assert!(
            e.alignment <= e.details.spec_range.max.max(e.details.required_alignment).max(e.details.floor),
            "above the spec maximum without cause: {:?}",
            e
        );
        prop_assert!(e.alignment >= e.details.driver.alignment && e.size >= e.details.driver.size);
    }
    prop_assert!(info.size >= end);
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn no_panic_on_any_input(
        source in fixed_source(),
        placement in placement(),
        descs in prop::collection::vec(prop_oneof![any_desc(), plausible_desc()], 0..4),
    ) {
        let engine = PlacementEngine::new(&source);
        if let Ok(info) = run(&engine, placement, &descs) {
            check_invariants(&info)?;
        }
        let profile = profile();
        let engine = PlacementEngine::new(&profile);
        if let Ok(info) = run(&engine, placement, &descs) {
            check_invariants(&info)?;
        }
    }

    #[test]
    fn no_panic_on_any_request_text(text in ".{0,200}") {
        let engine = PlacementEngine::new(FixedRequirements::discrete());
        let _ = residency_core::placement::answer_request(&engine, &text, &mut Vec::new());
    }

    #[test]
    fn tight_is_never_worse_than_legacy(
        source in fixed_source(),
        placement in placement(),
        descs in prop::collection::vec(plausible_desc(), 1..4),
    ) {
        for engine_source in [&source as &dyn RequirementsSource, &profile()] {
            let engine = PlacementEngine::new(engine_source);
            let tight: Vec<_> = descs.iter().map(|d| with_tight(*d, true)).collect();
            let legacy: Vec<_> = descs.iter().map(|d| with_tight(*d, false)).collect();
            if let (Ok(t), Ok(l)) = (run(&engine, placement, &tight), run(&engine, placement, &legacy)) {
                check_invariants(&t)?;
                check_invariants(&l)?;
                prop_assert!(t.alignment <= l.alignment);
                prop_assert!(t.size <= l.size, "tight {} > legacy {}", t.size, l.size);
                for (te, le) in t.elements.iter().zip(&l.elements) {
                    prop_assert!(te.alignment <= le.alignment && te.size <= le.size, "{:?} vs {:?}", te, le);
                }
            }
        }
    }

    #[test]
    fn tight_buffers_align_to_at_most_256_b_and_size_to_width_up_to_driver_rounding(
        source in fixed_source(),
        width in 1u64..1_000_000,
        floor in prop_oneof![Just(0u64), pow2(8)],
        uav in any::<bool>(),
    ) {
        let engine = PlacementEngine::new(&source);
        let mut desc = ResourceDesc::buffer(width).tight().with_alignment(floor);
        if uav {
            desc = desc.with_flag(ResourceFlag::AllowUnorderedAccess);
        }
        match run(&engine, Placement::Placed, &[desc]) {
            Ok(info) => {
                prop_assert_eq!(engine.tier(), TightAlignmentTier::Tier1);
                let e = info.elements[0];
                prop_assert!((8..=256).contains(&e.alignment));
                // The size is the driver's: the width rounded up to the driver's size granularity.
                prop_assert_eq!(e.size, width.div_ceil(source.buffer_size_granularity) * source.buffer_size_granularity);
                prop_assert!(e.size - width < 256);
                // The whole answer for one buffer adds at most the padding to its alignment.
                prop_assert!(info.size - width < 512);
            }
            Err(e) => prop_assert_eq!(e.id(), "TIGHT_ALIGNMENT_NOT_SUPPORTED"),
        }
    }

    #[test]
    fn allocation_info_is_idempotent(
        source in fixed_source(),
        placement in placement(),
        desc in plausible_desc(),
        tight in any::<bool>(),
    ) {
        let engine = PlacementEngine::new(&source);
        let desc = with_tight(desc, tight);
        if let Ok(first) = run(&engine, placement, &[desc]) {
            let again = run(&engine, placement, &[desc]).expect("same input, same answer");
            prop_assert_eq!(&first, &again);
            let read_back = desc.with_alignment(first.elements[0].alignment);
            let round = run(&engine, placement, &[read_back]).expect("a read-back description is accepted");
            prop_assert_eq!(round.elements[0].alignment, first.elements[0].alignment);
            prop_assert_eq!(round.elements[0].size, first.elements[0].size);
            prop_assert!(round.messages.iter().all(|m| m.id != MessageId::AlignmentOverridden));
        }
    }

    #[test]
    fn cross_adapter_forces_64_kib_or_4_mib_for_msaa(
        source in fixed_source(),
        placement in placement(),
        desc in plausible_desc(),
    ) {
        let engine = PlacementEngine::new(&source);
        let desc = desc.tight().with_flag(ResourceFlag::AllowCrossAdapter);
        if let Ok(info) = run(&engine, placement, &[desc]) {
            let e = info.elements[0];
            let forced = if e.details.class == ResourceClass::Msaa { MIB_4 } else { KIB_64 };
            // The drivers here never need more than the forced value, so it is exact.
            prop_assert_eq!(e.alignment, forced);
            prop_assert_eq!(e.details.mode, AlignmentMode::Legacy);
            prop_assert!(info.messages.iter().any(|m| m.id == MessageId::TightAlignmentWithCrossAdapter));
        }
    }

    /// Issue #31: the live path applies a buffer's usage floor (`usage_alignment_floor`, the
    /// maximum of every use) on top of the engine's answer; the core's answer passes it to the
    /// engine as the description's floor. For every usage set, device, size, rules and placement
    /// the two are the same size and alignment, and the floor covers each single use.
    #[test]
    fn usage_floor_on_top_of_the_engine_is_the_engines_answer_with_the_floor(
        mut source in fixed_source(),
        bits in any::<u32>(),
        limits in (pow2(8), pow2(8), pow2(8)),
        width in 1u64..(1 << 22),
        tight in any::<bool>(),
        placement in placement(),
    ) {
        (
            source.limits.min_uniform_buffer_offset_alignment,
            source.limits.min_storage_buffer_offset_alignment,
            source.limits.min_texel_buffer_offset_alignment,
        ) = limits;
        let usage = BufferUsage::NAMED
            .iter()
            .enumerate()
            .filter(|(i, _)| bits & (1 << i) != 0)
            .fold(BufferUsage::NONE, |all, (_, &(u, _))| all.union(u));
        let floor = usage_alignment_floor(usage, &source.limits);
        for &(single, _) in BufferUsage::NAMED.iter().filter(|(u, _)| usage.contains(*u)) {
            prop_assert!(floor >= usage_alignment_floor(single, &source.limits));
        }
        let engine = PlacementEngine::new(&source);
        let desc = with_tight(ResourceDesc::buffer(width), tight);
        let live = engine.resource_allocation_info(placement, &desc, &mut DiscardMessages);
        let core = engine.resource_allocation_info(placement, &desc.with_alignment(floor), &mut DiscardMessages);
        match (live, core) {
            (Ok(live), Ok(core)) => {
                prop_assert_eq!(live.alignment.max(floor), core.alignment);
                prop_assert_eq!(live.size, core.size);
            }
            (Err(live), Err(core)) => prop_assert_eq!(live.id(), core.id()),
            (live, core) => prop_assert!(false, "live {:?} core {:?}", live, core),
        }
    }
}
