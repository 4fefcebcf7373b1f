// Destroying a buffer twice: release takes the buffer by value.
use residency_vulkan::{Buffer, Device};

fn free_twice(device: &Device, buffer: Buffer) {
    let _ = device.destroy_buffer(buffer);
    let _ = device.destroy_buffer(buffer);
}

fn main() {}
