//! The allocators under test, behind one trait so that every workload runs the same code for each.
//!
//! CPU-only offset allocators are here: ours and `offset-allocator`. `gpu-allocator` and VMA
//! (`vk-mem`) need a Vulkan device even for their sub-allocators; they will get implementations of
//! [`SubAllocator`] that own a device and allocate from one memory block, and join [`ALL`].

use residency::core::allocator::{Allocation, ResourceKind, TlsfAllocator, TlsfDesc};

/// An allocator of offsets in one block of `capacity` bytes.
pub trait SubAllocator: Sized {
    /// Name in the report (`"allocator"` in the JSON).
    const NAME: &'static str;
    /// How the allocator handles alignment, for the report's notes.
    const ALIGNMENT_NOTE: &'static str;
    /// What an allocation returns and what free takes back.
    type Handle;

    /// A fresh allocator over `[0, capacity)`.
    fn with_capacity(capacity: u64) -> Self;
    /// Allocates `size` bytes at a multiple of `alignment`, or `None` when out of space.
    fn allocate(&mut self, size: u64, alignment: u64) -> Option<Self::Handle>;
    /// Frees an allocation.
    fn free(&mut self, handle: Self::Handle);
    /// The aligned offset of an allocation.
    fn offset(&self, handle: &Self::Handle) -> u64;
    /// One past the last byte the allocation occupies in the block (its footprint, which can be
    /// larger than the request when the allocator rounds sizes up).
    fn end(&self, handle: &Self::Handle) -> u64;
    /// The largest free range, as the allocator itself reports it.
    fn largest_free(&self) -> u64;
}

/// Blocks preallocated by every allocator (offset-allocator's default `max_allocs`).
const NODE_RESERVE: usize = 128 * 1024;

/// Names of every allocator the `alloc` benchmark runs, in report order.
pub const ALL: [&str; 2] = [Residency::NAME, OffsetAllocator::NAME];

/// Ours: `residency::core::allocator::TlsfAllocator`, granularity 1, every allocation linear.
#[derive(Debug)]
pub struct Residency(TlsfAllocator);

impl SubAllocator for Residency {
    const NAME: &'static str = "residency";
    const ALIGNMENT_NOTE: &'static str =
        "exact alignment: front padding returned to the free lists, end rounded up to min(alignment, 256 B)";
    type Handle = Allocation;

    fn with_capacity(capacity: u64) -> Self {
        let mut tlsf = TlsfAllocator::new(TlsfDesc::new(capacity)).expect("non-zero capacity");
        // offset-allocator preallocates its nodes; do the same so neither grows while timed.
        tlsf.reserve(NODE_RESERVE);
        Self(tlsf)
    }

    #[inline]
    fn allocate(&mut self, size: u64, alignment: u64) -> Option<Allocation> {
        self.0.allocate(size, alignment, ResourceKind::Linear).ok()
    }

    #[inline]
    fn free(&mut self, handle: Allocation) {
        self.0.free(handle).expect("allocation of this allocator");
    }

    fn offset(&self, handle: &Allocation) -> u64 {
        handle.offset()
    }

    fn end(&self, handle: &Allocation) -> u64 {
        handle.range().end
    }

    fn largest_free(&self) -> u64 {
        self.0.largest_free()
    }
}

/// The crates.io `offset-allocator` (a port of Sebastian Aaltonen's OffsetAllocator). It has no
/// alignment parameter, so alignment is emulated as its users must: allocate `size + alignment - 1`
/// and round the returned offset up.
pub struct OffsetAllocator(offset_allocator::Allocator);

impl std::fmt::Debug for OffsetAllocator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("OffsetAllocator")
    }
}

impl SubAllocator for OffsetAllocator {
    const NAME: &'static str = "offset-allocator";
    const ALIGNMENT_NOTE: &'static str =
        "no alignment support: emulated by allocating size + alignment - 1 and rounding the offset up";
    type Handle = (offset_allocator::Allocation, u64);

    fn with_capacity(capacity: u64) -> Self {
        let capacity = u32::try_from(capacity).expect("offset-allocator manages at most 4 GiB");
        Self(offset_allocator::Allocator::with_max_allocs(capacity, NODE_RESERVE as u32))
    }

    #[inline]
    fn allocate(&mut self, size: u64, alignment: u64) -> Option<Self::Handle> {
        let padded = u32::try_from(size + alignment - 1).ok()?;
        let allocation = self.0.allocate(padded)?;
        let aligned = (u64::from(allocation.offset) + alignment - 1) & !(alignment - 1);
        Some((allocation, aligned))
    }

    #[inline]
    fn free(&mut self, handle: Self::Handle) {
        self.0.free(handle.0);
    }

    fn offset(&self, handle: &Self::Handle) -> u64 {
        handle.1
    }

    fn end(&self, handle: &Self::Handle) -> u64 {
        u64::from(handle.0.offset) + u64::from(self.0.allocation_size(handle.0))
    }

    fn largest_free(&self) -> u64 {
        u64::from(self.0.storage_report().largest_free_region)
    }
}
