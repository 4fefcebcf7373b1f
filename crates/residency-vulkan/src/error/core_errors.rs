//! The classes of `residency-core`'s public errors (the core has no GPU types, so what an engine
//! does about them is decided here, at the backend's bottom layer). Every `match` is exhaustive:
//! a new core variant does not build until it has a class.
//!
//! The rule: a full allocator, ring, linear pool or tile-pool budget is out of memory; a broken
//! invariant, corrupt data and I/O are unexpected; a device or path that cannot do it is
//! unsupported; everything else the caller gave is refused.

use super::{ErrorClass, Exhausted, ResidencyError};
use residency_core::allocator::{
    AllocError, DefragError, DescError as AllocatorDescError, InvariantError, LinearError,
    LinearInvariantError, RingError, RingInvariantError,
};
use residency_core::desc::DescError;
use residency_core::format::UnknownFormat;
use residency_core::placement::{
    requirements::RequirementsError, ErrorCode, HeapPlacementError, PlacementError, PlacementErrorKind,
    RequestError,
};
use residency_core::profile::ProfileError;
use residency_core::report::ReportError;
use residency_core::streaming::{DuplicateLoad, FeedbackError, SourceError, StreamingError};
use residency_core::sync::{SyncError, TransientError};
use residency_core::tiles::ptex::{PtexLayoutError, PtexResidencyError};
use residency_core::tiles::{
    BindPlanError, CommitError, DistanceFieldError, HardwarePathUnsupported, IndirectionError, LayoutError,
    PageTableError, PoolError, PoolInvariantError, ShapeError,
};
use residency_core::vt_file::VtError;

const REFUSED: ErrorClass = ErrorClass::Refused;
const UNEXPECTED: ErrorClass = ErrorClass::Unexpected;
const CAPACITY: ErrorClass = ErrorClass::OutOfMemory(Exhausted::Capacity);

/// Implements [`ResidencyError`] with one class for every value (errors that are all misuse, or
/// all a broken invariant).
macro_rules! one_class {
    ($class:expr => $($ty:ty),+ $(,)?) => {$(
        impl ResidencyError for $ty {
            fn class(&self) -> ErrorClass {
                $class
            }
        }
    )+};
}

one_class!(REFUSED => AllocatorDescError, DescError, HeapPlacementError, RequestError, ProfileError,
    ReportError, SyncError, BindPlanError, PageTableError, UnknownFormat, DuplicateLoad, DistanceFieldError,
    PtexResidencyError);
one_class!(UNEXPECTED => InvariantError, RingInvariantError, LinearInvariantError, PoolInvariantError);
one_class!(ErrorClass::Unsupported => HardwarePathUnsupported);

impl ResidencyError for AllocError {
    fn class(&self) -> ErrorClass {
        match self {
            AllocError::OutOfSpace { .. } => CAPACITY,
            AllocError::ZeroSize
            | AllocError::AlignmentNotPowerOfTwo { .. }
            | AllocError::RangeUnavailable { .. }
            | AllocError::ForeignAllocation { .. } => REFUSED,
        }
    }
}

impl ResidencyError for RingError {
    fn class(&self) -> ErrorClass {
        match self {
            RingError::Full { .. } | RingError::TooLarge { .. } => CAPACITY,
            RingError::ZeroSize
            | RingError::AlignmentNotPowerOfTwo { .. }
            | RingError::FrameNotFinished { .. } => REFUSED,
        }
    }
}

impl ResidencyError for LinearError {
    fn class(&self) -> ErrorClass {
        match self {
            LinearError::OutOfSpace { .. } | LinearError::StacksWouldOverlap { .. } => CAPACITY,
            LinearError::ZeroSize
            | LinearError::AlignmentNotPowerOfTwo { .. }
            | LinearError::UpperNeedsDoubleStack { .. }
            | LinearError::UnknownAllocation { .. } => REFUSED,
        }
    }
}

impl ResidencyError for DefragError {
    fn class(&self) -> ErrorClass {
        match self {
            DefragError::Granularity { .. } | DefragError::Block { .. } => REFUSED,
            // A plan that breaks a rule is the planner's bug.
            DefragError::Plan(_) => UNEXPECTED,
        }
    }
}

impl ResidencyError for RequirementsError {
    fn class(&self) -> ErrorClass {
        match self {
            RequirementsError::Unsupported { .. } | RequirementsError::NoData { .. } => {
                ErrorClass::Unsupported
            }
        }
    }
}

/// The class of a placement error code (the D3D12-style class the engine already gives it).
fn placement_class(code: ErrorCode) -> ErrorClass {
    match code {
        ErrorCode::InvalidArg | ErrorCode::MalformedRequest => REFUSED,
        ErrorCode::Unsupported => ErrorClass::Unsupported,
        // The requirements source (the driver or a profile) broke its contract.
        ErrorCode::BadRequirements => UNEXPECTED,
    }
}

impl ResidencyError for PlacementErrorKind {
    fn class(&self) -> ErrorClass {
        placement_class(self.code())
    }
}

impl ResidencyError for PlacementError {
    fn class(&self) -> ErrorClass {
        placement_class(self.code())
    }
}

impl ResidencyError for FeedbackError {
    fn class(&self) -> ErrorClass {
        match self {
            FeedbackError::TooManyImages { .. }
            | FeedbackError::TooManyMips { .. }
            | FeedbackError::DuplicateImage(_)
            | FeedbackError::BufferSize { .. } => REFUSED,
            // What the GPU wrote is not a feedback buffer of this layout and frame.
            FeedbackError::BadMagic { .. }
            | FeedbackError::FrameMismatch { .. }
            | FeedbackError::CapacityMismatch { .. }
            | FeedbackError::BadRecord { .. }
            | FeedbackError::Inconsistent { .. } => UNEXPECTED,
        }
    }
}

impl ResidencyError for StreamingError {
    fn class(&self) -> ErrorClass {
        match self {
            StreamingError::Commit { source, .. } => source.class(),
            StreamingError::DuplicateImage(_)
            | StreamingError::UnknownImage(_)
            | StreamingError::FrameOrder { .. }
            | StreamingError::UnexpectedCompletion { .. }
            | StreamingError::TileOutOfRange { .. }
            | StreamingError::LayerOutOfRange { .. } => REFUSED,
            // The pinned tiles need more slots than the software atlas has: a larger budget.
            StreamingError::PinnedOverCapacity { .. } => CAPACITY,
        }
    }
}

impl ResidencyError for SourceError {
    fn class(&self) -> ErrorClass {
        match self {
            // A tile inside the source's own description that it cannot give, a failed read, a
            // panic: the application's data or I/O, nothing residency or the caller's call did.
            SourceError::NoSuchTile { .. }
            | SourceError::NoSuchVolumeTile { .. }
            | SourceError::Read { .. }
            | SourceError::Panicked { .. } => UNEXPECTED,
        }
    }
}

impl ResidencyError for TransientError {
    fn class(&self) -> ErrorClass {
        match self {
            TransientError::TooLarge { .. } => CAPACITY,
            TransientError::GranularityNotPowerOfTwo { .. }
            | TransientError::ZeroSize { .. }
            | TransientError::AlignmentNotPowerOfTwo { .. }
            | TransientError::EmptyInterval { .. }
            | TransientError::NotAnImageUse { .. } => REFUSED,
        }
    }
}

impl ResidencyError for IndirectionError {
    fn class(&self) -> ErrorClass {
        match self {
            IndirectionError::NotPlain2d { .. }
            | IndirectionError::HasMipTail
            | IndirectionError::AtlasTooLarge { .. } => ErrorClass::Unsupported,
            IndirectionError::OtherLayout { .. } | IndirectionError::SlotOutOfRange { .. } => REFUSED,
        }
    }
}

impl ResidencyError for LayoutError {
    fn class(&self) -> ErrorClass {
        match self {
            LayoutError::Shape(e) => e.class(),
            LayoutError::FormatMismatch { .. }
            | LayoutError::ZeroExtent { .. }
            | LayoutError::BadShape { .. }
            | LayoutError::TooManyMips { .. } => REFUSED,
            // Limits of the device: one this large cannot be made on it.
            LayoutError::DimensionTooLarge { .. }
            | LayoutError::TooManyTiles { .. }
            | LayoutError::AddressSpaceExceeded { .. } => ErrorClass::Unsupported,
        }
    }
}

impl ResidencyError for ShapeError {
    fn class(&self) -> ErrorClass {
        match self {
            ShapeError::NoStandardShape { .. }
            | ShapeError::ResidencyUnsupported { .. }
            | ShapeError::FormatUnsupported { .. }
            | ShapeError::NotInProfile { .. } => ErrorClass::Unsupported,
            // The driver reported an empty tile shape.
            ShapeError::EmptyShape { .. } => UNEXPECTED,
        }
    }
}

impl ResidencyError for PoolError {
    fn class(&self) -> ErrorClass {
        match self {
            PoolError::PoolExhausted { .. } => ErrorClass::OutOfMemory(Exhausted::Budget),
            PoolError::UnknownHeap(_)
            | PoolError::OutOfBounds { .. }
            | PoolError::NotAllocated { .. }
            | PoolError::TileTaken { .. }
            | PoolError::ReservedOwner(_) => REFUSED,
        }
    }
}

impl ResidencyError for CommitError {
    fn class(&self) -> ErrorClass {
        match self {
            CommitError::Pool(e) => e.class(),
            CommitError::PageTable(e) => e.class(),
            CommitError::WrongPool { .. }
            | CommitError::NoSuchSubresource { .. }
            | CommitError::RegionOutOfRange { .. } => REFUSED,
        }
    }
}

impl ResidencyError for VtError {
    fn class(&self) -> ErrorClass {
        match self {
            VtError::UnsupportedVersion { .. } | VtError::UnsupportedFormat(_) => ErrorClass::Unsupported,
            // Writing: a tile of the wrong size, twice, or never.
            VtError::NoSuchTile { .. }
            | VtError::WrongTileSize { .. }
            | VtError::DuplicateTile { .. }
            | VtError::MissingTiles { .. } => REFUSED,
            // I/O, or a file that is not (or no longer) what it says.
            VtError::Io(_)
            | VtError::Truncated { .. }
            | VtError::BadMagic
            | VtError::BadTrailer
            | VtError::Checksum { .. }
            | VtError::BadHeader { .. }
            | VtError::UnknownFormat(_)
            | VtError::BadRecord { .. }
            | VtError::Decompress { .. } => UNEXPECTED,
        }
    }
}

impl ResidencyError for PtexLayoutError {
    fn class(&self) -> ErrorClass {
        match self {
            PtexLayoutError::SliceTooLarge { .. } | PtexLayoutError::TooManyLayers { .. } => {
                ErrorClass::Unsupported
            }
            PtexLayoutError::NoFaces
            | PtexLayoutError::TooManyFaces { .. }
            | PtexLayoutError::SlotNotPowerOfTwo { .. }
            | PtexLayoutError::Levels { .. }
            | PtexLayoutError::FinestLevel { .. }
            | PtexLayoutError::NeighbourOutOfRange { .. }
            | PtexLayoutError::SelfAdjacent { .. }
            | PtexLayoutError::AsymmetricAdjacency { .. }
            | PtexLayoutError::NonManifoldEdge { .. }
            | PtexLayoutError::DegenerateQuad { .. } => REFUSED,
        }
    }
}
