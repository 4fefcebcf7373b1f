//! Typed errors of state tracking and transient planning, carrying the numbers.

use super::flags::ImageLayout;
use super::region::SubresourceRange;
use super::uses::Use;
use super::ResourceId;
use crate::device_mask::DeviceIndex;

/// A registration or a declared use was refused. The tracker's state is unchanged.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SyncError {
    /// No resource of that id is registered on that device.
    #[error("{resource} is not registered on {device}")]
    UnknownResource {
        /// The device.
        device: DeviceIndex,
        /// The resource.
        resource: ResourceId,
    },
    /// The id is already registered on that device.
    #[error("{resource} (`{name}`) is already registered on {device}")]
    AlreadyRegistered {
        /// The device.
        device: DeviceIndex,
        /// The resource.
        resource: ResourceId,
        /// Its name.
        name: String,
    },
    /// A buffer, page or image of zero size (bytes, mip levels or array layers).
    #[error("`{name}` ({resource}) has zero size")]
    ZeroSize {
        /// The resource.
        resource: ResourceId,
        /// Its name.
        name: String,
    },
    /// A paged buffer's range does not fit in its page.
    #[error("`{name}` ({resource}) at {offset} + {size} B does not fit in its page of {page_size} B")]
    OutsidePage {
        /// The buffer.
        resource: ResourceId,
        /// Its name.
        name: String,
        /// Offset in the page.
        offset: u64,
        /// Size.
        size: u64,
        /// Size of the page.
        page_size: u64,
    },
    /// The page a paged buffer maps to is not a registered buffer.
    #[error("the page {page} of `{name}` ({resource}) is not a registered page on {device}")]
    NotAPage {
        /// The device.
        device: DeviceIndex,
        /// The buffer.
        resource: ResourceId,
        /// Its name.
        name: String,
        /// The page it names.
        page: ResourceId,
    },
    /// A byte range is empty or goes past the end of the buffer.
    #[error("bytes {offset} + {size} are outside `{name}` ({resource}, {buffer_size} B) or empty")]
    BytesOutOfBounds {
        /// The buffer.
        resource: ResourceId,
        /// Its name.
        name: String,
        /// Offset given.
        offset: u64,
        /// Size given.
        size: u64,
        /// Size of the buffer.
        buffer_size: u64,
    },
    /// A subresource range is empty or goes past the image's mip levels or layers.
    #[error(
        "{range:?} is outside `{name}` ({resource}, {mip_levels} mips x {array_layers} layers) or empty"
    )]
    SubresourcesOutOfBounds {
        /// The image.
        resource: ResourceId,
        /// Its name.
        name: String,
        /// The range given.
        range: SubresourceRange,
        /// Mip levels of the image.
        mip_levels: u32,
        /// Array layers of the image.
        array_layers: u32,
    },
    /// A byte range was given for an image, or a subresource range for a buffer.
    #[error("`{name}` ({resource}) is {kind}; the region given is not")]
    RegionKind {
        /// The resource.
        resource: ResourceId,
        /// Its name.
        name: String,
        /// "a buffer" or "an image".
        kind: &'static str,
    },
    /// A buffer-only use (no layout) was declared on an image.
    #[error("{use_:?} has no image layout and cannot be declared on image `{name}` ({resource})")]
    NotAnImageUse {
        /// The image.
        resource: ResourceId,
        /// Its name.
        name: String,
        /// The use.
        use_: Use,
    },
    /// A use's layout is `UNDEFINED` or `PREINITIALIZED`, which no use may ask for.
    #[error("{use_:?} asks for layout {layout}, which is only an initial layout")]
    InvalidLayout {
        /// The use.
        use_: Use,
        /// The layout.
        layout: ImageLayout,
    },
    /// Two uses in one batch need the same subresources in different layouts.
    #[error("`{name}` ({resource}) is declared in {first} and in {second} in the same batch")]
    ConflictingLayouts {
        /// The image.
        resource: ResourceId,
        /// Its name.
        name: String,
        /// Layout of the earlier declaration.
        first: ImageLayout,
        /// Layout of the later one.
        second: ImageLayout,
    },
    /// An empty list of aliased predecessors was given.
    #[error("no previous resource given to alias `{name}` ({resource}) after")]
    NoPredecessor {
        /// The resource.
        resource: ResourceId,
        /// Its name.
        name: String,
    },
}

/// A transient frame description was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TransientError {
    /// The granularity was not a power of two.
    #[error("bufferImageGranularity {granularity} is not a power of two")]
    GranularityNotPowerOfTwo {
        /// The granularity given.
        granularity: u64,
    },
    /// A resource of zero bytes.
    #[error("transient `{name}` (#{index}) has zero size")]
    ZeroSize {
        /// Index in the frame.
        index: usize,
        /// Its name.
        name: String,
    },
    /// An alignment that is not a power of two.
    #[error("transient `{name}` (#{index}) has alignment {alignment}, not a power of two")]
    AlignmentNotPowerOfTwo {
        /// Index in the frame.
        index: usize,
        /// Its name.
        name: String,
        /// The alignment given.
        alignment: u64,
    },
    /// The interval's first pass is after its last.
    #[error("transient `{name}` (#{index}) is used from pass {first} to pass {last}")]
    EmptyInterval {
        /// Index in the frame.
        index: usize,
        /// Its name.
        name: String,
        /// First pass.
        first: u32,
        /// Last pass.
        last: u32,
    },
    /// A resource larger than the largest heap allowed.
    #[error("transient `{name}` (#{index}) needs {size} B, more than the heap limit of {max_heap_size} B")]
    TooLarge {
        /// Index in the frame.
        index: usize,
        /// Its name.
        name: String,
        /// Size (with alignment padding) needed.
        size: u64,
        /// The planner's heap limit.
        max_heap_size: u64,
    },
    /// A use on an image with no layout, or the first use of a resource does not name a use
    /// the planner can make a barrier for.
    #[error("transient image `{name}` (#{index}) has a first use without an image layout")]
    NotAnImageUse {
        /// Index in the frame.
        index: usize,
        /// Its name.
        name: String,
    },
}
