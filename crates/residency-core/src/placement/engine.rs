//! Allocation info for one or many descriptions (`GetResourceAllocationInfo`), legacy or tight,
//! placed or committed.

use super::checked_align_up;
use super::desc::{Placement, ResourceDesc, ResourceDimension, ResourceFlag, TextureLayout};
use super::messages::{emit, Message, MessageId, MessageSink};
use super::requirements::{
    BufferQuery, ImageQuery, ImageTiling, RequirementsQuery, RequirementsSource, TightAlignmentTier,
};
use super::small::is_small_resource;
use super::tables::{
    cross_adapter_alignment, legacy_alignment, spec_range, AlignmentMode, AlignmentRange, ResourceClass,
    KIB_4, KIB_64,
};
use super::validation::{validate_structure, PlacementError, PlacementErrorKind};
use crate::profile::{ImageDimension, MemoryRequirements};
use crate::usage::BufferUsage;
use serde::Serialize;

/// The answer for a request: the C++ struct layout of all its elements.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct AllocationInfo {
    /// Bytes of the whole layout (a multiple of `alignment`).
    pub size: u64,
    /// The largest alignment of any element.
    pub alignment: u64,
    /// Per-element offset, size and alignment, in request order.
    pub elements: Vec<ElementInfo>,
    /// The messages this request produced (also sent to the sink and to `tracing`).
    pub messages: Vec<Message>,
    /// Memory types every element can live in (the intersection of their drivers' answers).
    #[serde(skip)]
    pub memory_type_bits: u32,
}

/// One element of an [`AllocationInfo`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct ElementInfo {
    /// Offset from the start of the layout (a multiple of `alignment`).
    pub offset: u64,
    /// Bytes the resource occupies (see [`ElementDetails`] for how it is derived).
    pub size: u64,
    /// The resource's alignment.
    pub alignment: u64,
    /// How the answer was reached.
    #[serde(skip)]
    pub details: ElementDetails,
}

/// How an element's answer was reached.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct ElementDetails {
    /// The table row.
    pub class: ResourceClass,
    /// The table used: `Tight` only with the tight flag and without cross-adapter.
    pub mode: AlignmentMode,
    /// Whether the small-resource rule applies.
    pub small: bool,
    /// The spec's range for this class, placement, mode and smallness (with `ALLOW_CROSS_ADAPTER`, the
    /// forced 64 KiB or 4 MiB as both bounds).
    pub spec_range: AlignmentRange,
    /// The driver's answer.
    pub driver: MemoryRequirements,
    /// Whether the driver's answer was estimated.
    pub estimated: bool,
    /// The alignment the rules require before the app's floor.
    pub required_alignment: u64,
    /// The app's floor (0 for none).
    pub floor: u64,
    /// Whether this is an optimal-tiling image, kept on its own `bufferImageGranularity` pages.
    pub optimal_image: bool,
}

/// The engine: a requirements source with its tight-alignment tier read once.
///
/// ```
/// use residency_core::placement::{FixedRequirements, Placement, PlacementEngine, ResourceDesc};
/// let engine = PlacementEngine::new(FixedRequirements::discrete());
/// let mut messages = Vec::new();
/// let info = engine
///     .allocation_info(Placement::Placed, &[ResourceDesc::buffer(100).tight()], &mut messages)
///     .unwrap();
/// assert_eq!((info.elements[0].size, info.alignment), (100, 64));
/// ```
#[derive(Clone, Debug)]
pub struct PlacementEngine<S> {
    source: S,
    tier: TightAlignmentTier,
}

impl<S: RequirementsSource> PlacementEngine<S> {
    /// An engine over `source` (pass `&source` to borrow it).
    pub fn new(source: S) -> Self {
        let tier = source.tight_alignment_tier();
        PlacementEngine { source, tier }
    }

    /// The requirements source.
    pub fn source(&self) -> &S {
        &self.source
    }

    /// The device's tight-alignment tier.
    pub fn tier(&self) -> TightAlignmentTier {
        self.tier
    }

    /// Allocation info for `descs` laid out as a C++ struct: each element's offset aligned to its
    /// alignment, each element taking its size rounded up to its alignment, the total rounded up to the
    /// largest alignment. Messages go to `sink`, to `tracing`, and into the answer.
    pub fn allocation_info(
        &self,
        placement: Placement,
        descs: &[ResourceDesc],
        sink: &mut dyn MessageSink,
    ) -> Result<AllocationInfo, PlacementError> {
        if descs.is_empty() {
            return Err(PlacementErrorKind::EmptyRequest.at(0));
        }
        let mut messages = Vec::new();
        let mut elements = Vec::with_capacity(descs.len());
        let mut end = 0u64;
        let mut alignment = 1u64;
        let mut memory_type_bits = u32::MAX;
        for (index, desc) in descs.iter().enumerate() {
            let mut collect = Collect { sink, messages: &mut messages };
            let mut element =
                self.element(placement, index, desc, &mut collect).map_err(|kind| kind.at(index))?;
            let overflow = || PlacementErrorKind::SizeOverflow.at(index);
            element.offset = checked_align_up(end, element.alignment).ok_or_else(overflow)?;
            let padded = checked_align_up(element.size, element.alignment).ok_or_else(overflow)?;
            end = element.offset.checked_add(padded).ok_or_else(overflow)?;
            alignment = alignment.max(element.alignment);
            memory_type_bits &= element.details.driver.memory_type_bits;
            elements.push(element);
        }
        let size =
            checked_align_up(end, alignment).ok_or(PlacementErrorKind::SizeOverflow.at(descs.len() - 1))?;
        Ok(AllocationInfo { size, alignment, elements, messages, memory_type_bits })
    }

    /// Allocation info for one description (its offset is 0).
    pub fn resource_allocation_info(
        &self,
        placement: Placement,
        desc: &ResourceDesc,
        sink: &mut dyn MessageSink,
    ) -> Result<ElementInfo, PlacementError> {
        self.allocation_info(placement, std::slice::from_ref(desc), sink).map(|info| info.elements[0])
    }

    fn element(
        &self,
        placement: Placement,
        index: usize,
        desc: &ResourceDesc,
        sink: &mut dyn MessageSink,
    ) -> Result<ElementInfo, PlacementErrorKind> {
        let limits = self.source.limits();
        validate_structure(desc, limits)?;
        let class = match desc.dimension {
            ResourceDimension::Buffer => ResourceClass::Buffer,
            _ if desc.is_msaa() => ResourceClass::Msaa,
            _ => ResourceClass::Texture,
        };
        let tight = desc.is_tight();
        let cross_adapter = desc.flags.has(ResourceFlag::AllowCrossAdapter);

        // The spec's validation list, in its order.
        if tight && cross_adapter {
            emit(
                sink,
                Message::new(
                    MessageId::TightAlignmentWithCrossAdapter,
                    index,
                    format!(
                        "USE_TIGHT_ALIGNMENT with ALLOW_CROSS_ADAPTER: the alignment must be {} bytes, so the tight flag has no effect",
                        cross_adapter_alignment(class)
                    ),
                ),
            );
        }
        if tight && desc.layout.is_64kb() {
            return Err(PlacementErrorKind::TightAlignmentWith64KbLayout { layout: desc.layout.name() });
        }
        if tight && self.tier == TightAlignmentTier::NotSupported {
            return Err(PlacementErrorKind::TightAlignmentNotSupported);
        }
        let floor = desc.alignment;
        if floor != 0 && !floor.is_power_of_two() {
            return Err(PlacementErrorKind::AlignmentNotPowerOfTwo { alignment: floor });
        }

        // The driver's part.
        let query = requirements_query(desc);
        let answer = self.source.requirements(&query)?;
        let driver = answer.requirements;
        if !driver.alignment.is_power_of_two() {
            return Err(PlacementErrorKind::SourceAlignmentNotPowerOfTwo { alignment: driver.alignment });
        }
        if answer.estimated {
            emit(
                sink,
                Message::new(
                    MessageId::RequirementsEstimated,
                    index,
                    format!(
                        "no exact driver answer recorded for this description; estimated size {} and alignment {}",
                        driver.size, driver.alignment
                    ),
                ),
            );
        }

        // The rules.
        let mode = if tight && !cross_adapter { AlignmentMode::Tight } else { AlignmentMode::Legacy };
        let small = is_small_resource(desc);
        let range = if cross_adapter {
            let forced = cross_adapter_alignment(class);
            AlignmentRange { min: forced, max: forced }
        } else {
            spec_range(mode, placement, class, small)
        };
        let optimal_image = desc.dimension.is_texture() && desc.layout != TextureLayout::RowMajor;
        let granularity = if optimal_image {
            limits.buffer_image_granularity.max(1).checked_next_power_of_two().unwrap_or(1 << 63)
        } else {
            1
        };
        let table = if cross_adapter {
            cross_adapter_alignment(class)
        } else {
            match mode {
                AlignmentMode::Legacy if desc.layout.is_64kb() => legacy_alignment(class, small).max(KIB_64),
                AlignmentMode::Legacy => legacy_alignment(class, small),
                AlignmentMode::Tight => range.min,
            }
        };
        let required = table.max(driver.alignment).max(granularity);
        let maximum = spec_range(mode, placement, class, false).max.max(required);
        if floor > maximum {
            return Err(PlacementErrorKind::AlignmentAboveMaximum { alignment: floor, maximum });
        }
        if floor != 0 && floor < required {
            emit(
                sink,
                Message::new(
                    MessageId::AlignmentOverridden,
                    index,
                    format!("alignment floor {floor} is below the required {required} and was clamped up"),
                ),
            );
        }
        if required > range.max {
            emit(
                sink,
                Message::new(
                    MessageId::DriverAlignmentAboveSpecMaximum,
                    index,
                    format!(
                        "the device requires alignment {required} (driver {}, bufferImageGranularity {}), above the spec's maximum {} for this resource; the device's requirement is used",
                        driver.alignment, limits.buffer_image_granularity, range.max
                    ),
                ),
            );
        }
        let alignment = required.max(floor);

        // Size: the driver's, on whole granularity pages for optimal images, rounded to the alignment
        // in legacy mode (D3D12's legacy sizes are multiples of it), to the implicit heap's 4 KiB
        // granularity when committed.
        let minimum = if desc.dimension == ResourceDimension::Buffer { desc.width } else { 1 };
        let mut size = driver.size.max(minimum);
        size = checked_align_up(size, granularity).ok_or(PlacementErrorKind::SizeOverflow)?;
        if mode == AlignmentMode::Legacy {
            size = checked_align_up(size, alignment).ok_or(PlacementErrorKind::SizeOverflow)?;
        }
        if placement == Placement::Committed {
            size = checked_align_up(size, KIB_4).ok_or(PlacementErrorKind::SizeOverflow)?;
        }
        Ok(ElementInfo {
            offset: 0,
            size,
            alignment,
            details: ElementDetails {
                class,
                mode,
                small,
                spec_range: range,
                driver,
                estimated: answer.estimated,
                required_alignment: required,
                floor,
                optimal_image,
            },
        })
    }
}

/// Allocation info for `descs` from `source` (see [`PlacementEngine::allocation_info`]). Reads the tier
/// on every call; keep a [`PlacementEngine`] to read it once.
pub fn allocation_info<S: RequirementsSource + ?Sized>(
    source: &S,
    placement: Placement,
    descs: &[ResourceDesc],
    sink: &mut dyn MessageSink,
) -> Result<AllocationInfo, PlacementError> {
    PlacementEngine::new(source).allocation_info(placement, descs, sink)
}

/// The buffer usage a placed D3D12 buffer may be put to: everything but storage-texel writes, which need
/// `ALLOW_UNORDERED_ACCESS`. (A D3D12 buffer's SRVs become storage or texel buffers on Vulkan, its CBVs
/// uniform buffers, and it may always be a vertex, index, indirect or copy buffer.)
pub fn buffer_usages(desc: &ResourceDesc) -> BufferUsage {
    let read = BufferUsage::TRANSFER
        | BufferUsage::UNIFORM
        | BufferUsage::STORAGE
        | BufferUsage::UNIFORM_TEXEL
        | BufferUsage::VERTEX
        | BufferUsage::INDEX
        | BufferUsage::INDIRECT;
    if desc.flags.has(ResourceFlag::AllowUnorderedAccess) {
        read | BufferUsage::STORAGE_TEXEL
    } else {
        read
    }
}

/// The query a description becomes. The description must have passed
/// [`validate_structure`] (texture sides fit in `u32`).
pub fn requirements_query(desc: &ResourceDesc) -> RequirementsQuery {
    match desc.dimension {
        ResourceDimension::Buffer => {
            RequirementsQuery::Buffer(BufferQuery { size: desc.width, usage: buffer_usages(desc) })
        }
        dimension => RequirementsQuery::Image(ImageQuery {
            dimension: match dimension {
                ResourceDimension::Texture1d => ImageDimension::D1,
                ResourceDimension::Texture3d => ImageDimension::D3,
                _ => ImageDimension::D2,
            },
            width: u32::try_from(desc.width).unwrap_or(u32::MAX),
            height: desc.height,
            depth: desc.depth(),
            array_layers: desc.array_layers(),
            mip_levels: desc.resolved_mip_levels(),
            format: desc.format,
            samples: desc.sample_count,
            tiling: if desc.layout == TextureLayout::RowMajor {
                ImageTiling::Linear
            } else {
                ImageTiling::Optimal
            },
            attachment: desc.flags.has(ResourceFlag::AllowRenderTarget)
                || desc.flags.has(ResourceFlag::AllowDepthStencil),
            storage: desc.flags.has(ResourceFlag::AllowUnorderedAccess),
        }),
    }
}

/// Forwards to the caller's sink and keeps a copy for the answer.
struct Collect<'a> {
    sink: &'a mut dyn MessageSink,
    messages: &'a mut Vec<Message>,
}

impl MessageSink for Collect<'_> {
    fn push(&mut self, message: Message) {
        self.messages.push(message.clone());
        self.sink.push(message);
    }
}
