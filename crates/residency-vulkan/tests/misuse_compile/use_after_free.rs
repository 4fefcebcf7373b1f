// Using a buffer after handing it back to its pool.
use residency_vulkan::{Buffer, BufferPool};

fn use_after_free(pool: &BufferPool, buffer: Buffer) -> u64 {
    let _ = pool.free_buffer(buffer);
    buffer.size()
}

fn main() {}
