//! The alignment tables of the tight placed-resource alignment spec, legacy and tight, placed and
//! committed, as data.

use super::desc::Placement;
use serde::{Deserialize, Serialize};

/// 4 KiB: the small-texture alignment and the implicit-heap (VidMM) granularity.
pub const KIB_4: u64 = 4 << 10;
/// 64 KiB: the default alignment of buffers and textures.
pub const KIB_64: u64 = 64 << 10;
/// 4 MiB: the default alignment of MSAA textures.
pub const MIB_4: u64 = 4 << 20;
/// The smallest alignment tight placement ever returns (safety of 64-bit atomics).
pub const TIGHT_MIN_PLACED_ALIGNMENT: u64 = 8;
/// The largest alignment of a tight placed buffer.
pub const TIGHT_MAX_PLACED_BUFFER_ALIGNMENT: u64 = 256;

/// The three rows of every table: the spec keys alignment on these.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ResourceClass {
    /// Buffers.
    Buffer,
    /// Single-sample textures.
    Texture,
    /// Multisampled textures.
    Msaa,
}

/// Which table: the original one, or the one that applies with `USE_TIGHT_ALIGNMENT`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AlignmentMode {
    /// Without the tight flag (or with cross-adapter, which forces it).
    Legacy,
    /// With the tight flag.
    Tight,
}

/// One cell of a table: the alignment the runtime may return lies in `min..=max`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct AlignmentRange {
    /// Smallest alignment allowed.
    pub min: u64,
    /// Largest alignment allowed (the small-resource maximum when the resource is small).
    pub max: u64,
}

impl AlignmentRange {
    /// Whether `alignment` lies in the range.
    pub const fn contains(&self, alignment: u64) -> bool {
        self.min <= alignment && alignment <= self.max
    }
}

/// The spec's table cell for a resource class, placement and mode; `small` selects the
/// small-resource maximum where the table has one (textures and MSAA).
///
/// | mode   | placement | class   | min    | max (small)       |
/// |--------|-----------|---------|--------|-------------------|
/// | legacy | either    | buffer  | 64 KiB | 64 KiB            |
/// | legacy | either    | texture | 4 KiB  | 64 KiB (4 KiB)    |
/// | legacy | either    | MSAA    | 64 KiB | 4 MiB (64 KiB)    |
/// | tight  | placed    | buffer  | 8 B    | 256 B             |
/// | tight  | placed    | texture | 8 B    | 64 KiB (4 KiB)    |
/// | tight  | placed    | MSAA    | 8 B    | 4 MiB (64 KiB)    |
/// | tight  | committed | buffer  | 4 KiB  | 4 KiB             |
/// | tight  | committed | texture | 4 KiB  | 64 KiB (4 KiB)    |
/// | tight  | committed | MSAA    | 4 KiB  | 4 MiB (64 KiB)    |
///
/// Legacy has one table for both placements: before tight alignment, committed resources were
/// aligned as placed ones. Legacy textures and MSAA use their small minimum only when small; the
/// minimum column is the small value.
pub const fn spec_range(
    mode: AlignmentMode,
    placement: Placement,
    class: ResourceClass,
    small: bool,
) -> AlignmentRange {
    let (min, max, small_max) = match (mode, placement, class) {
        (AlignmentMode::Legacy, _, ResourceClass::Buffer) => (KIB_64, KIB_64, KIB_64),
        (AlignmentMode::Legacy, _, ResourceClass::Texture) => (KIB_4, KIB_64, KIB_4),
        (AlignmentMode::Legacy, _, ResourceClass::Msaa) => (KIB_64, MIB_4, KIB_64),
        (AlignmentMode::Tight, Placement::Placed, ResourceClass::Buffer) => {
            (TIGHT_MIN_PLACED_ALIGNMENT, TIGHT_MAX_PLACED_BUFFER_ALIGNMENT, TIGHT_MAX_PLACED_BUFFER_ALIGNMENT)
        }
        (AlignmentMode::Tight, Placement::Placed, ResourceClass::Texture) => {
            (TIGHT_MIN_PLACED_ALIGNMENT, KIB_64, KIB_4)
        }
        (AlignmentMode::Tight, Placement::Placed, ResourceClass::Msaa) => {
            (TIGHT_MIN_PLACED_ALIGNMENT, MIB_4, KIB_64)
        }
        (AlignmentMode::Tight, Placement::Committed, ResourceClass::Buffer) => (KIB_4, KIB_4, KIB_4),
        (AlignmentMode::Tight, Placement::Committed, ResourceClass::Texture) => (KIB_4, KIB_64, KIB_4),
        (AlignmentMode::Tight, Placement::Committed, ResourceClass::Msaa) => (KIB_4, MIB_4, KIB_64),
    };
    AlignmentRange { min, max: if small { small_max } else { max } }
}

/// The alignment the legacy rules give a resource of `class` before the driver's requirement and any
/// floor: 64 KiB for buffers, 4 KiB / 64 KiB for small / other textures, 64 KiB / 4 MiB for small /
/// other MSAA. This is D3D12's answer when the app asks for the small alignment wherever the resource
/// qualifies (as D3D12MA does), i.e. the best legacy answer.
pub const fn legacy_alignment(class: ResourceClass, small: bool) -> u64 {
    spec_range(AlignmentMode::Legacy, Placement::Placed, class, small).max
}

/// The alignment forced by `ALLOW_CROSS_ADAPTER`: 64 KiB, or 4 MiB for MSAA.
pub const fn cross_adapter_alignment(class: ResourceClass) -> u64 {
    match class {
        ResourceClass::Msaa => MIB_4,
        ResourceClass::Buffer | ResourceClass::Texture => KIB_64,
    }
}
