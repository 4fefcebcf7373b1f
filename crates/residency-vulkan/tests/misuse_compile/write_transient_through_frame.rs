// Writing a transient frame's buffer through the frame's shared accessor.
use residency_vulkan::transient::TransientFrame;

fn write(frame: &TransientFrame) {
    frame.buffer(0).unwrap().write(0, &[0]).unwrap();
}

fn main() {}
