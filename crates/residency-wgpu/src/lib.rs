#![doc = include_str!("../README.md")]

mod open;
mod resources;
mod streaming;
mod sync;
pub mod wgsl;

pub use open::{
    open, open_sharing_queue, Bridge, BridgeDesc, PathSupport, QueueSharing, SparseLack, DEVICES_LEFT_ALIVE,
};
pub use resources::{ImportError, ImportReason, SharedBuffer};
pub use streaming::StreamerPart;
pub use sync::FrameTimeline;

/// What [`open`] reports.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OpenError {
    /// wgpu-hal could not create the Vulkan instance (no loader, no driver).
    #[error("wgpu-hal: {0}")]
    Instance(String),
    /// wgpu found no Vulkan adapter of that index.
    #[error("no Vulkan adapter {index} (wgpu found {count})")]
    NoAdapter {
        /// The index asked for.
        index: usize,
        /// How many wgpu found.
        count: usize,
    },
    /// The adapter is not on wgpu's Vulkan backend.
    #[error("the adapter is not a Vulkan adapter")]
    NotVulkan,
    /// The adapter lacks wgpu features that were asked for.
    #[error("the adapter lacks the wgpu features {0:?}")]
    Features(wgpu::Features),
    /// The adapter lacks what residency needs on every path (named: Vulkan version, features,
    /// queue family).
    #[error("the adapter lacks {}", .0.join(", "))]
    Lacks(Vec<&'static str>),
    /// The universal queue family has one queue, so residency would share wgpu's: use
    /// [`open_sharing_queue`].
    #[error("the queue family has one queue: residency would share wgpu's (open_sharing_queue)")]
    OneQueue,
    /// Validation was required and the Khronos layer is not installed.
    #[error(
        "the validation layer VK_LAYER_KHRONOS_validation (with VK_EXT_debug_utils) is required and missing"
    )]
    NoValidationLayer,
    /// A Vulkan call failed.
    #[error("{1} failed: {0}")]
    Vulkan(ash::vk::Result, &'static str),
    /// wgpu-hal refused the device.
    #[error("wgpu-hal: {0}")]
    Hal(wgpu::hal::DeviceError),
    /// wgpu refused the device.
    #[error("wgpu: {0}")]
    Device(String),
    /// The timeline belongs to another bridge's device.
    #[error("the timeline belongs to another device")]
    ForeignTimeline,
    /// Residency refused to adopt the device, or a residency call failed.
    #[error(transparent)]
    Residency(#[from] residency_vulkan::VulkanError),
    /// The streamer refused to record its part of a frame.
    #[error(transparent)]
    Stream(#[from] residency_vulkan::streaming::StreamError),
}

impl residency_vulkan::ResidencyError for OpenError {
    fn class(&self) -> residency_vulkan::ErrorClass {
        use residency_vulkan::ErrorClass;
        match self {
            OpenError::Instance(_)
            | OpenError::NoAdapter { .. }
            | OpenError::NotVulkan
            | OpenError::Features(_)
            | OpenError::Lacks(_)
            | OpenError::OneQueue
            | OpenError::NoValidationLayer => ErrorClass::Unsupported,
            OpenError::ForeignTimeline => ErrorClass::Refused,
            OpenError::Vulkan(result, _) => match *result {
                ash::vk::Result::ERROR_OUT_OF_DEVICE_MEMORY => {
                    ErrorClass::OutOfMemory(residency_vulkan::Exhausted::Device)
                }
                ash::vk::Result::ERROR_OUT_OF_HOST_MEMORY => {
                    ErrorClass::OutOfMemory(residency_vulkan::Exhausted::Host)
                }
                ash::vk::Result::ERROR_DEVICE_LOST => ErrorClass::DeviceLost,
                _ => ErrorClass::Unexpected,
            },
            OpenError::Hal(_) | OpenError::Device(_) => ErrorClass::Unexpected,
            OpenError::Residency(e) => e.class(),
            OpenError::Stream(e) => e.class(),
        }
    }
}

/// The crate's result.
pub type Result<T, E = OpenError> = std::result::Result<T, E>;

/// Runs a future wgpu resolves at once on native backends (adapter enumeration) to completion.
fn block_on<F: std::future::Future>(future: F) -> F::Output {
    let mut future = std::pin::pin!(future);
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    loop {
        if let std::task::Poll::Ready(out) = future.as_mut().poll(&mut cx) {
            return out;
        }
        std::thread::yield_now();
    }
}
