// A thread's local range kept after its arena (whose pages it lives in) is dropped: the range
// borrows the arena.
use residency_vulkan::{BufferPool, LocalRange};

fn outlive(pool: &BufferPool) -> LocalRange<'static> {
    let ranges = pool.local_ranges().unwrap();
    ranges.allocate(256, 0).unwrap()
}

fn main() {}
