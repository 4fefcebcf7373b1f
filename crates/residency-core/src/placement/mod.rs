//! The tight placed-resource alignment engine: Direct3D 12's placement rules (legacy and
//! `USE_TIGHT_ALIGNMENT`, placed and committed) on Vulkan, with the driver's part of each answer taken
//! from a [`RequirementsSource`] (a live device, a device profile, or fixed rules).
//!
//! - [`desc`]: [`ResourceDesc`] (modelled on `D3D12_RESOURCE_DESC`) and [`Placement`].
//! - [`tables`]: the spec's alignment tables.
//! - [`small`]: the small-resource rule and the standard tile shapes it estimates with.
//! - [`requirements`]: the [`RequirementsSource`] trait, its queries and the tier rule;
//!   [`FixedRequirements`]. `DeviceProfile` implements the trait in `profile_source`.
//! - [`engine`]: [`PlacementEngine`], allocation info for one or an array of descriptions.
//! - [`validation`]: the typed errors and structural checks.
//! - [`messages`]: info and warning messages and their sinks.
//! - [`floors`]: alignment floors for buffer use cases.
//! - [`heap`]: heap alignment, heap offsets and implicit-heap granularity.
//! - [`request`]: the JSON request and error forms of `residency alloc-info`.
//!
//! The rules as implemented are written down in `docs/placement.md`.

pub mod desc;
pub mod engine;
pub mod floors;
pub mod heap;
pub mod messages;
mod profile_source;
pub mod request;
pub mod requirements;
pub mod small;
pub mod tables;
pub mod validation;

pub use desc::{Placement, ResourceDesc, ResourceDimension, ResourceFlag, ResourceFlags, TextureLayout};
pub use engine::{allocation_info, AllocationInfo, ElementDetails, ElementInfo, PlacementEngine};
pub use floors::{alignment_floor, usage_alignment_floor, BufferUse};
pub use heap::{HeapDesc, HeapPlacementError};
pub use messages::{DiscardMessages, Message, MessageId, MessageSink, Severity};
pub use request::{answer_request, parse_request, AllocInfoRequest, ErrorReport, RequestError};
pub use requirements::{
    derive_tight_alignment_tier, BufferQuery, FixedRequirements, ImageQuery, ImageTiling, ObjectRequirements,
    RequirementsError, RequirementsQuery, RequirementsSource, SourcedRequirements, TightAlignmentTier,
};
pub use small::is_small_resource;
pub use tables::{AlignmentMode, AlignmentRange, ResourceClass};
pub use validation::{validate_structure, ErrorCode, PlacementError, PlacementErrorKind};

/// `value` rounded up to a multiple of `alignment` (a power of two; 0 is treated as 1), saturating
/// at the largest multiple that fits.
pub const fn align_up(value: u64, alignment: u64) -> u64 {
    let alignment = if alignment == 0 { 1 } else { alignment };
    match checked_align_up(value, alignment) {
        Some(v) => v,
        None => u64::MAX - (u64::MAX % alignment),
    }
}

/// `value` rounded up to a multiple of `alignment` (0 is treated as 1), or `None` on overflow.
pub const fn checked_align_up(value: u64, alignment: u64) -> Option<u64> {
    let alignment = if alignment == 0 { 1 } else { alignment };
    let rem = value % alignment;
    if rem == 0 {
        Some(value)
    } else {
        value.checked_add(alignment - rem)
    }
}
