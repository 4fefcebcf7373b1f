//! The Vulkan backend of `residency`.
