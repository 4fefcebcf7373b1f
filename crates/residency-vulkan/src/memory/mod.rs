//! Placement: where a resource's memory comes from (the device's general heaps, memory of its
//! own, or a pool's sub-allocator), by the core's placement engine and policy, and the public
//! raw allocations (`Allocation`). The memory blocks themselves and the owner-neutral record of
//! where a resource's memory returns (`ResourceMemory`) live one layer down, in `device/blocks.rs`,
//! because the device's retire queue frees them.

pub(crate) mod placement;
