//! Heap rules: explicit heaps are 64 KiB aligned (4 MiB when they may hold MSAA), resources sit at
//! offsets that are multiples of their own alignment, and committed resources live in implicit heaps
//! of 4 KiB granularity.

use super::engine::ElementInfo;
use super::tables::{ResourceClass, KIB_4, KIB_64, MIB_4};
use serde::{Deserialize, Serialize};

/// Alignment of an explicit heap that holds no MSAA resources.
pub const EXPLICIT_HEAP_ALIGNMENT: u64 = KIB_64;
/// Alignment of an explicit heap that may hold MSAA resources.
pub const MSAA_HEAP_ALIGNMENT: u64 = MIB_4;
/// Allocation granularity of the implicit heap of a committed resource.
pub const IMPLICIT_HEAP_GRANULARITY: u64 = KIB_4;

/// The alignment an explicit heap needs.
pub const fn heap_alignment(may_hold_msaa: bool) -> u64 {
    if may_hold_msaa {
        MSAA_HEAP_ALIGNMENT
    } else {
        EXPLICIT_HEAP_ALIGNMENT
    }
}

/// Bytes of an explicit heap that holds `bytes`: rounded up to the heap alignment (saturating).
pub const fn explicit_heap_size(bytes: u64, may_hold_msaa: bool) -> u64 {
    super::align_up(bytes, heap_alignment(may_hold_msaa))
}

/// Bytes of the implicit heap of a committed resource of `size` bytes (saturating).
pub const fn committed_heap_size(size: u64) -> u64 {
    super::align_up(size, IMPLICIT_HEAP_GRANULARITY)
}

/// Whether `offset` is a valid heap offset for a resource aligned to `alignment`: an integer multiple
/// of it. (`alignment` 0 is treated as 1.)
pub const fn is_valid_heap_offset(offset: u64, alignment: u64) -> bool {
    let alignment = if alignment == 0 { 1 } else { alignment };
    offset % alignment == 0
}

/// An explicit heap, as far as placement is concerned.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct HeapDesc {
    /// Bytes.
    pub size: u64,
    /// Alignment of the heap's start: [`EXPLICIT_HEAP_ALIGNMENT`] or [`MSAA_HEAP_ALIGNMENT`].
    pub alignment: u64,
}

impl HeapDesc {
    /// A heap of at least `bytes`, sized and aligned by the rules.
    pub const fn new(bytes: u64, may_hold_msaa: bool) -> Self {
        HeapDesc { size: explicit_heap_size(bytes, may_hold_msaa), alignment: heap_alignment(may_hold_msaa) }
    }
}

/// Placing a resource in a heap breaks a heap rule.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum HeapPlacementError {
    /// The heap's alignment is neither 64 KiB nor 4 MiB.
    #[error("heap alignment {alignment} must be 65536 or 4194304")]
    HeapAlignment {
        /// The heap's alignment.
        alignment: u64,
    },
    /// An MSAA resource in a heap that is not 4 MiB aligned.
    #[error("an MSAA resource needs a 4 MiB aligned heap (this one is aligned to {alignment})")]
    MsaaNeedsMsaaHeap {
        /// The heap's alignment.
        alignment: u64,
    },
    /// The offset is not a multiple of the resource's alignment.
    #[error("offset {offset} is not a multiple of the resource's alignment {alignment}")]
    MisalignedOffset {
        /// The offset.
        offset: u64,
        /// The resource's alignment.
        alignment: u64,
    },
    /// The resource does not fit.
    #[error("offset {offset} + size {size} exceeds the heap's {heap_size} bytes")]
    OutOfBounds {
        /// The offset.
        offset: u64,
        /// The resource's size.
        size: u64,
        /// The heap's size.
        heap_size: u64,
    },
}

/// Checks that `element` may be placed at `offset` in `heap`.
pub fn check_heap_placement(
    heap: &HeapDesc,
    offset: u64,
    element: &ElementInfo,
) -> Result<(), HeapPlacementError> {
    if heap.alignment != EXPLICIT_HEAP_ALIGNMENT && heap.alignment != MSAA_HEAP_ALIGNMENT {
        return Err(HeapPlacementError::HeapAlignment { alignment: heap.alignment });
    }
    if element.details.class == ResourceClass::Msaa && heap.alignment != MSAA_HEAP_ALIGNMENT {
        return Err(HeapPlacementError::MsaaNeedsMsaaHeap { alignment: heap.alignment });
    }
    if !is_valid_heap_offset(offset, element.alignment) {
        return Err(HeapPlacementError::MisalignedOffset { offset, alignment: element.alignment });
    }
    if offset.checked_add(element.size).is_none_or(|end| end > heap.size) {
        return Err(HeapPlacementError::OutOfBounds { offset, size: element.size, heap_size: heap.size });
    }
    Ok(())
}
