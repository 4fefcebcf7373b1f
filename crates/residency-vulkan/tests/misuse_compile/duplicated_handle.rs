// Duplicating a buffer handle (two owners, two writers, two releases): buffers are not `Clone`.
use residency_vulkan::Buffer;

fn duplicate(buffer: &Buffer) -> Buffer {
    buffer.clone()
}

fn main() {}
