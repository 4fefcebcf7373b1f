// Keeping a reference to an image past its release: the release takes the image by value.
use residency_vulkan::{Device, Image};

fn dangling(device: &Device, image: Image) -> &'static Image {
    let _ = device.destroy_image(image);
    &image
}

fn main() {}
