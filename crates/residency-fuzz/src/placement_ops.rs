//! The `placement` target: random resource descriptions (valid or not) on random devices into the
//! placement engine. Every answer is within the spec's bounds (the invariants the property tests
//! assert) or a typed error, tight is never worse than legacy, and the same question gets the
//! same answer.

use crate::input::Input;
use crate::profiles;
use residency_core::format::Format;
use residency_core::placement::{
    AllocationInfo, FixedRequirements, Message, Placement, PlacementEngine, RequirementsSource, ResourceDesc,
    ResourceDimension, ResourceFlag, ResourceFlags, TextureLayout, TightAlignmentTier,
};

const DIMENSIONS: [ResourceDimension; 4] = [
    ResourceDimension::Buffer,
    ResourceDimension::Texture1d,
    ResourceDimension::Texture2d,
    ResourceDimension::Texture3d,
];

const LAYOUTS: [TextureLayout; 4] = [
    TextureLayout::Unknown,
    TextureLayout::RowMajor,
    TextureLayout::Undefined64KbSwizzle,
    TextureLayout::Standard64KbSwizzle,
];

pub(crate) fn run(data: &[u8]) {
    let mut input = Input::new(data);
    let placement = if input.bool() { Placement::Placed } else { Placement::Committed };
    let count = input.below(5) as usize;
    let descs: Vec<ResourceDesc> = (0..count).map(|_| desc(&mut input)).collect();
    match input.u8() % 3 {
        0 => check_source(&fixed_source(&mut input), placement, &descs),
        n => check_source(&profiles::all()[usize::from(n) - 1], placement, &descs),
    }
}

/// A random device within what drivers answer (alignments powers of two), sometimes without tight
/// alignment support.
fn fixed_source(input: &mut Input<'_>) -> FixedRequirements {
    let mut s = FixedRequirements::discrete();
    let mut pow2 = |max: u64| 1u64 << input.below(max + 1);
    s.buffer_alignment = pow2(9);
    s.uniform_alignment = pow2(8);
    s.texel_alignment = pow2(8);
    s.buffer_size_granularity = pow2(8);
    s.image_alignment = pow2(16);
    s.large_image_alignment = pow2(16);
    s.msaa_alignment = pow2(22);
    s.limits.buffer_image_granularity = pow2(16);
    if input.u8() % 4 == 0 {
        s.tier_override = Some(TightAlignmentTier::NotSupported);
    }
    s
}

fn desc(input: &mut Input<'_>) -> ResourceDesc {
    let dimension = input.pick(&DIMENSIONS);
    let small = input.u8() % 4 != 0;
    let (width, height, depth, mips) = if small {
        (
            input.range(0, 70_000),
            input.range(0, 600) as u32,
            input.range(0, 20) as u32,
            input.range(0, 12) as u32,
        )
    } else {
        (input.size(), input.u32(), input.u32(), input.u32())
    };
    let format = input.pick(Format::ALL);
    let sample_count = input.pick(&[0u32, 1, 1, 1, 2, 3, 4, 8, 16, 32, 64, 128]);
    let layout = input.pick(&LAYOUTS);
    let bits = input.u8();
    let flags: ResourceFlags = ResourceFlag::ALL
        .into_iter()
        .enumerate()
        .filter(|(i, _)| bits & (1 << i) != 0)
        .map(|(_, f)| f)
        .collect();
    let alignment = match input.u8() % 3 {
        0 => 0,
        1 => 1 << input.below(24),
        _ => input.alignment(63),
    };
    ResourceDesc {
        dimension,
        width,
        height,
        depth_or_array_size: depth,
        mip_levels: mips,
        format,
        sample_count,
        layout,
        flags,
        alignment,
    }
}

fn with_tight(desc: ResourceDesc, tight: bool) -> ResourceDesc {
    let flags = if tight {
        desc.flags.with(ResourceFlag::UseTightAlignment)
    } else {
        desc.flags.without(ResourceFlag::UseTightAlignment)
    };
    ResourceDesc { flags, ..desc }
}

fn check_source<S: RequirementsSource>(source: &S, placement: Placement, descs: &[ResourceDesc]) {
    let engine = PlacementEngine::new(source);
    let mut messages: Vec<Message> = Vec::new();
    let first = engine.allocation_info(placement, descs, &mut messages);
    match &first {
        Ok(info) => check_answer(info, descs.len()),
        Err(e) => {
            assert!(e.element < descs.len().max(1), "error names element {} of {}", e.element, descs.len());
            // The error's text and id are what the CLI prints; building them must not panic.
            let _ = (e.to_string(), e.id(), e.code());
        }
    }
    // Same question, same answer.
    let again = engine.allocation_info(placement, descs, &mut Vec::new());
    assert_eq!(first, again, "answers differ for the same input");
    if let Ok(info) = &first {
        // The CLI prints the answer as JSON.
        serde_json::to_string(info).expect("allocation info serialises");
    }

    // Tight is never worse than legacy, element by element.
    let tight: Vec<_> = descs.iter().map(|d| with_tight(*d, true)).collect();
    let legacy: Vec<_> = descs.iter().map(|d| with_tight(*d, false)).collect();
    let t = engine.allocation_info(placement, &tight, &mut Vec::new());
    let l = engine.allocation_info(placement, &legacy, &mut Vec::new());
    if let (Ok(t), Ok(l)) = (&t, &l) {
        check_answer(t, descs.len());
        check_answer(l, descs.len());
        assert!(t.alignment <= l.alignment, "tight alignment {} > legacy {}", t.alignment, l.alignment);
        assert!(t.size <= l.size, "tight size {} > legacy {}", t.size, l.size);
        for (te, le) in t.elements.iter().zip(&l.elements) {
            assert!(te.alignment <= le.alignment && te.size <= le.size, "{te:?} vs {le:?}");
        }
    }
}

/// The bounds every answer keeps (those of `placement_props.rs`).
pub(crate) fn check_answer(info: &AllocationInfo, count: usize) {
    assert_eq!(info.elements.len(), count);
    assert!(info.alignment.is_power_of_two(), "{info:?}");
    assert_eq!(info.size % info.alignment, 0, "{info:?}");
    let mut end = 0;
    for e in &info.elements {
        assert!(e.alignment.is_power_of_two() && e.alignment >= 8, "alignment >= 8: {e:?}");
        assert_eq!(e.offset % e.alignment, 0, "{e:?}");
        assert!(e.offset >= end, "elements overlap: {e:?}");
        assert!(info.alignment >= e.alignment, "{info:?}");
        end = e.offset.checked_add(e.size).expect("element end overflows");
        assert!(e.alignment >= e.details.spec_range.min, "below the spec minimum: {e:?}");
        assert!(
            e.alignment <= e.details.spec_range.max.max(e.details.required_alignment).max(e.details.floor),
            "above the spec maximum without cause: {e:?}"
        );
        assert!(e.alignment >= e.details.driver.alignment && e.size >= e.details.driver.size, "{e:?}");
    }
    assert!(info.size >= end, "{info:?}");
}
