// Two threads writing one buffer: writes need `&mut Buffer`, so a shared buffer cannot be written.
use residency_vulkan::Buffer;

fn share(buffer: &Buffer) {
    std::thread::scope(|s| {
        s.spawn(|| buffer.write(0, &[1]));
        s.spawn(|| buffer.write(0, &[2]));
    });
}

fn main() {}
