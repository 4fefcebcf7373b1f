//! [`RequirementsSource`] for a captured [`DeviceProfile`]: the driver's answers recorded as probes,
//! exact where a probe matches, inferred or estimated elsewhere.
//!
//! Buffers: the query's usage picks the smallest probe class containing it
//! ([`BufferUsage::probe_class`]). A probe of the same size is returned as is. Otherwise the answer is
//! inferred from the class's probes: the alignment (when every probe of the class has the same one),
//! the size rounding (the largest power of two `g ≤ 64 KiB` with `size = align_up(width, g)` for every
//! probe) and the memory types (when all agree). When those rules reproduce every probe the answer is
//! exact (`estimated: false`), since that is how drivers compute buffer requirements; when they do not,
//! the nearest probe at or above the size gives the alignment and memory types, and the size is the
//! width rounded up to that alignment, marked estimated.
//!
//! Images: a probe whose description equals the query (optimal tiling, no storage usage — the probes
//! record neither) is returned as is. Otherwise the answer is estimated from the most similar probe
//! (same format if probed, else a format with the same block size, else any; then same dimensionality,
//! samples and attachment usage; then the closest texel-data size): its alignment and memory types,
//! and a size of the query's texel data scaled by that probe's size / texel-data ratio, at least the
//! texel data, rounded up to the alignment.

use super::requirements::{
    image_texel_bytes, BufferQuery, ImageQuery, ImageTiling, RequirementsError, RequirementsQuery,
    RequirementsSource, SourcedRequirements,
};
use crate::profile::{
    BufferProbe, BufferProbeUsage, DeviceProfile, ImageProbe, ImageProbeDesc, Limits, MemoryRequirements,
};

impl RequirementsSource for DeviceProfile {
    fn limits(&self) -> &Limits {
        &self.limits
    }

    fn requirements(&self, query: &RequirementsQuery) -> Result<SourcedRequirements, RequirementsError> {
        match query {
            RequirementsQuery::Buffer(q) => buffer_requirements(self, q),
            RequirementsQuery::Image(q) => image_requirements(self, q),
        }
    }
}

fn buffer_requirements(
    profile: &DeviceProfile,
    q: &BufferQuery,
) -> Result<SourcedRequirements, RequirementsError> {
    let class = q.usage.probe_class();
    let of = |class: BufferProbeUsage| -> Vec<&BufferProbe> {
        profile.buffer_probes.iter().filter(|p| p.usage == class).collect()
    };
    let (probes, superset) = match of(class) {
        probes if !probes.is_empty() => (probes, false),
        _ if class != BufferProbeUsage::All && !of(BufferProbeUsage::All).is_empty() => {
            (of(BufferProbeUsage::All), true)
        }
        _ => return Err(RequirementsError::NoData { what: format!("buffers with usage {:?}", q.usage) }),
    };
    if let Some(p) = probes.iter().find(|p| p.size == q.size) {
        return Ok(SourcedRequirements { requirements: p.requirements, estimated: superset });
    }
    let first = probes[0].requirements;
    let same_alignment = probes.iter().all(|p| p.requirements.alignment == first.alignment);
    let same_types = probes.iter().all(|p| p.requirements.memory_type_bits == first.memory_type_bits);
    let granularity = (0..=16)
        .rev()
        .map(|shift| 1u64 << shift)
        .find(|&g| probes.iter().all(|p| p.requirements.size == super::align_up(p.size, g)));
    match granularity {
        Some(g) if same_alignment && same_types => Ok(SourcedRequirements {
            requirements: MemoryRequirements {
                size: super::align_up(q.size, g),
                alignment: first.alignment,
                memory_type_bits: first.memory_type_bits,
                prefers_dedicated: false,
            },
            estimated: superset,
        }),
        _ => {
            let nearest = probes
                .iter()
                .filter(|p| p.size >= q.size)
                .min_by_key(|p| p.size)
                .or_else(|| probes.iter().max_by_key(|p| p.size))
                .map(|p| p.requirements)
                .unwrap_or(first);
            let rounding = granularity.unwrap_or(nearest.alignment).max(1);
            Ok(SourcedRequirements::estimate(MemoryRequirements {
                size: super::align_up(q.size, rounding),
                ..nearest
            }))
        }
    }
}

fn probe_desc(q: &ImageQuery) -> ImageProbeDesc {
    ImageProbeDesc {
        dimension: q.dimension,
        width: q.width,
        height: q.height,
        depth: q.depth,
        array_layers: q.array_layers,
        mip_levels: q.mip_levels,
        samples: q.samples,
        attachment: q.attachment,
    }
}

fn probe_query(probe: &ImageProbe, format: crate::format::Format) -> ImageQuery {
    let d = probe.desc;
    ImageQuery {
        dimension: d.dimension,
        width: d.width,
        height: d.height,
        depth: d.depth,
        array_layers: d.array_layers,
        mip_levels: d.mip_levels,
        format,
        samples: d.samples,
        tiling: ImageTiling::Optimal,
        attachment: d.attachment,
        storage: false,
    }
}

fn image_requirements(
    profile: &DeviceProfile,
    q: &ImageQuery,
) -> Result<SourcedRequirements, RequirementsError> {
    let caps = profile.format(q.format);
    if let Some(caps) = caps {
        if q.attachment && !caps.attachment {
            return Err(RequirementsError::Unsupported { what: format!("{} as an attachment", q.format) });
        }
        if q.storage && !caps.storage {
            return Err(RequirementsError::Unsupported { what: format!("{} as a storage image", q.format) });
        }
        if q.tiling == ImageTiling::Optimal && !q.storage {
            let wanted = probe_desc(q);
            if let Some(p) = caps.image_probes.iter().find(|p| p.desc == wanted) {
                return Ok(SourcedRequirements::exact(p.requirements));
            }
        }
    }
    // Candidates: this format's probes, else those of formats with the same block, else any.
    let same_block = |f: crate::format::Format| {
        f.block_bytes() == q.format.block_bytes() && f.block_extent() == q.format.block_extent()
    };
    let pools: [Vec<(crate::format::Format, &ImageProbe)>; 3] = [
        caps.map(|c| c.image_probes.iter().map(|p| (c.format, p)).collect()).unwrap_or_default(),
        profile
            .formats
            .iter()
            .filter(|c| same_block(c.format))
            .flat_map(|c| c.image_probes.iter().map(move |p| (c.format, p)))
            .collect(),
        profile.formats.iter().flat_map(|c| c.image_probes.iter().map(move |p| (c.format, p))).collect(),
    ];
    let Some(candidates) = pools.into_iter().find(|pool| !pool.is_empty()) else {
        return Err(RequirementsError::NoData { what: format!("images of {}", q.format) });
    };
    let raw = image_texel_bytes(q).max(1);
    let distance = |probe_raw: u64| {
        let (a, b) = (raw.max(probe_raw.max(1)), raw.min(probe_raw.max(1)));
        // Integer log2 of the ratio, enough to order candidates.
        (a / b).max(1).ilog2()
    };
    let best = candidates
        .iter()
        .map(|&(format, p)| (format, p, image_texel_bytes(&probe_query(p, format))))
        .min_by_key(|&(_, p, probe_raw)| {
            (
                p.desc.dimension != q.dimension,
                p.desc.samples != q.samples,
                p.desc.attachment != q.attachment,
                distance(probe_raw),
            )
        });
    let Some((_, reference, reference_raw)) = best else {
        return Err(RequirementsError::NoData { what: format!("images of {}", q.format) });
    };
    let r = reference.requirements;
    let alignment = r.alignment.max(1);
    let scaled = u128::from(raw) * u128::from(r.size.max(1)) / u128::from(reference_raw.max(1));
    let scaled = u64::try_from(scaled).unwrap_or(u64::MAX).max(raw);
    Ok(SourcedRequirements::estimate(MemoryRequirements {
        size: super::align_up(scaled, alignment),
        alignment,
        memory_type_bits: r.memory_type_bits,
        prefers_dedicated: r.prefers_dedicated,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::Format;
    use crate::profile::{
        BufferProbe, CaptureInfo, DeviceIdentity, DeviceType, Extensions, FormatCaps, ImageDimension,
        MemoryProperties, SparseCaps, BUFFER_PROBE_SIZES, PROFILE_SCHEMA,
    };
    use crate::usage::BufferUsage;

    /// A profile whose probes follow an H200-like rule: buffers 16 B (uniform 64 B), sizes to 4 B.
    fn test_profile() -> DeviceProfile {
        let mut buffer_probes = Vec::new();
        for &usage in BufferProbeUsage::ALL {
            let alignment = match usage {
                BufferProbeUsage::Uniform | BufferProbeUsage::All => 64,
                _ => 16,
            };
            for &size in BUFFER_PROBE_SIZES {
                buffer_probes.push(BufferProbe {
                    usage,
                    size,
                    requirements: MemoryRequirements {
                        size: size.div_ceil(4) * 4,
                        alignment,
                        memory_type_bits: 0b11,
                        prefers_dedicated: false,
                    },
                });
            }
        }
        let probe = ImageProbe {
            desc: ImageProbeDesc {
                dimension: ImageDimension::D2,
                width: 256,
                height: 256,
                depth: 1,
                array_layers: 1,
                mip_levels: 1,
                samples: 1,
                attachment: false,
            },
            requirements: MemoryRequirements {
                size: 256 * 256 * 4,
                alignment: 1024,
                memory_type_bits: 0b1,
                prefers_dedicated: false,
            },
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
            limits: super::super::FixedRequirements::typical_limits(),
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
                image_probes: vec![probe],
            }],
            buffer_probes,
        }
    }

    fn buffer(profile: &DeviceProfile, size: u64, usage: BufferUsage) -> SourcedRequirements {
        profile.requirements(&RequirementsQuery::Buffer(BufferQuery { size, usage })).unwrap()
    }

    #[test]
    fn buffers_are_exact_at_probes_and_inferred_between() {
        let p = test_profile();
        let at_probe = buffer(&p, 100, BufferUsage::STORAGE);
        assert_eq!(
            (at_probe.requirements.size, at_probe.requirements.alignment, at_probe.estimated),
            (100, 16, false)
        );
        let between = buffer(&p, 1001, BufferUsage::STORAGE | BufferUsage::TRANSFER);
        assert_eq!(
            (between.requirements.size, between.requirements.alignment, between.estimated),
            (1004, 16, false)
        );
        let all = buffer(&p, 77, BufferUsage::ALL);
        assert_eq!((all.requirements.size, all.requirements.alignment), (80, 64));
    }

    #[test]
    fn images_are_exact_at_probes_and_estimated_elsewhere() {
        let p = test_profile();
        let mut q = ImageQuery {
            dimension: ImageDimension::D2,
            width: 256,
            height: 256,
            depth: 1,
            array_layers: 1,
            mip_levels: 1,
            format: Format::R8G8B8A8Unorm,
            samples: 1,
            tiling: ImageTiling::Optimal,
            attachment: false,
            storage: false,
        };
        let exact = p.requirements(&RequirementsQuery::Image(q)).unwrap();
        assert!(!exact.estimated);
        q.width = 512;
        let est = p.requirements(&RequirementsQuery::Image(q)).unwrap();
        assert!(est.estimated);
        assert_eq!(est.requirements.size, 512 * 256 * 4);
        assert_eq!(est.requirements.alignment, 1024);
        q.format = Format::Bc7Unorm;
        assert!(p.requirements(&RequirementsQuery::Image(q)).unwrap().estimated);
    }

    #[test]
    fn profile_tier_and_tight_buffers_follow_the_probes() {
        use crate::placement::{Placement, PlacementEngine, ResourceDesc, TightAlignmentTier};
        let p = test_profile();
        let engine = PlacementEngine::new(&p);
        assert_eq!(engine.tier(), TightAlignmentTier::Tier1);
        let e = engine
            .resource_allocation_info(Placement::Placed, &ResourceDesc::buffer(10).tight(), &mut Vec::new())
            .unwrap();
        assert_eq!((e.size, e.alignment, e.details.estimated), (12, 64, false));
        let mut coarse = p.clone();
        coarse.buffer_probes.iter_mut().for_each(|b| b.requirements.alignment = 65_536);
        assert_eq!(PlacementEngine::new(&coarse).tier(), TightAlignmentTier::NotSupported);
        coarse.buffer_probes.clear();
        assert_eq!(PlacementEngine::new(&coarse).tier(), TightAlignmentTier::NotSupported);
    }
}
