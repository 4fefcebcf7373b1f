//! The backend's small, closed error type, and the class every public error has.
//!
//! Each operation has its own error enum that carries the numbers (`MemoryError`,
//! `UploadError`, `StreamError`, …). Under them is one small closed [`ErrorClass`]: what an
//! engine can do about a failure (free memory and retry, recreate the device, fix the call, take
//! another path). Every public error of residency (the core's included) implements
//! [`ResidencyError`], whose [`class`](ResidencyError::class) looks through nested errors to the
//! one that failed.

use ash::vk;
use residency_core::device_mask::DeviceIndex;

mod core_errors;

/// How to get a Vulkan driver on a machine without a GPU.
pub const LAVAPIPE_HINT: &str = "install a Vulkan loader and driver: on Debian 12, `apt-get install libvulkan1` and \
     `apt-get install -t bookworm-backports mesa-vulkan-drivers` (lavapipe, a software Vulkan 1.4 device with \
     sparse residency); `bash .ci/install-deps` does both";

/// Errors of the Vulkan backend.
#[derive(Debug, thiserror::Error)]
pub enum VulkanError {
    /// No Vulkan loader (`libvulkan.so.1`) could be loaded.
    #[error("no Vulkan loader found ({reason}); {hint}", hint = LAVAPIPE_HINT)]
    LoaderMissing {
        /// What the dynamic loader said.
        reason: String,
    },
    /// The loader works but reports no physical device.
    #[error("Vulkan found no physical device; {hint}", hint = LAVAPIPE_HINT)]
    NoDevice,
    /// A requested device index does not exist.
    #[error("device {index} does not exist (the device set has {count} devices)")]
    NoSuchDevice {
        /// The index asked for.
        index: u32,
        /// How many devices there are.
        count: u32,
    },
    /// The device cannot do something the library requires.
    #[error("device `{device}` is not supported: {reason}")]
    Unsupported {
        /// The device's name.
        device: String,
        /// What is missing.
        reason: String,
    },
    /// Validation was required but `VK_LAYER_KHRONOS_validation` is not installed.
    #[error(
        "the Khronos validation layer is not installed (Debian: `apt-get install vulkan-validationlayers`)"
    )]
    ValidationLayerMissing,
    /// Device memory is exhausted.
    #[error("out of device memory during {call}")]
    OutOfDeviceMemory {
        /// The Vulkan call that failed.
        call: &'static str,
    },
    /// Host memory is exhausted.
    #[error("out of host memory during {call}")]
    OutOfHostMemory {
        /// The Vulkan call that failed.
        call: &'static str,
    },
    /// The device was lost; every object on it is unusable.
    #[error("device lost during {call}")]
    DeviceLost {
        /// The Vulkan call that failed.
        call: &'static str,
    },
    /// A view asks for an empty or reversed range of mips or layers, or one past the image's
    /// (nothing was created).
    #[error(
        "`{image}`: mips {mips:?} and layers {layers:?} are empty, reversed or outside its \
         {mip_levels} mips and {array_layers} layers"
    )]
    SubresourceRange {
        /// The image.
        image: String,
        /// The mips asked for.
        mips: std::ops::Range<u32>,
        /// The layers asked for.
        layers: std::ops::Range<u32>,
        /// Mip levels of the image.
        mip_levels: u32,
        /// Array layers of the image.
        array_layers: u32,
    },
    /// An object of one device was given to another device (nothing was done).
    #[error("`{name}` lives on {owner}, not on {device}")]
    WrongDevice {
        /// The object.
        name: String,
        /// The device it lives on.
        owner: DeviceIndex,
        /// The device it was given to.
        device: DeviceIndex,
    },
    /// A submission's commands need a subresource of an image in one layout, but when they
    /// would run it is in another: in submission order (after every earlier residency
    /// submission) or after an earlier command of the same recording. Nothing was submitted.
    #[error("`{image}` mip {mip} layer {layer} is in {actual:?} where a command needs {expected:?}")]
    ImageLayout {
        /// The image.
        image: String,
        /// The mip level.
        mip: u32,
        /// The array layer.
        layer: u32,
        /// The layout the command needs.
        expected: vk::ImageLayout,
        /// The layout the subresource is in.
        actual: vk::ImageLayout,
    },
    /// A token (a [`Submission`](crate::Submission)) was given to an object other than the one
    /// that issued it: another command context, or a context of another device. Nothing was
    /// done.
    #[error("a {token} issued by {issuer} was given to {holder}")]
    ForeignToken {
        /// What the token is.
        token: &'static str,
        /// Who issued it.
        issuer: String,
        /// Who it was given to.
        holder: String,
    },
    /// A lock residency needs is already held by the calling thread (a residency call from inside
    /// a closure that runs under it, or while holding [`Queue::lock`](crate::Queue::lock)):
    /// taking it would wait forever. Nothing was done.
    #[error("re-entrant call refused: {what}")]
    Reentrant {
        /// Which lock.
        what: &'static str,
    },
    /// A wait for a value of a renderer [`Timeline`](crate::Timeline) that no signal announced to
    /// residency reaches: nothing could end it. Announce the signals you submit with
    /// [`Timeline::signal_submitted`](crate::Timeline::signal_submitted) (residency's own
    /// `submit_signalling` announces its signals). Nothing was waited for or submitted.
    #[error(
        "timeline `{timeline}` value {value} is waited for, but it is at {current} and no signal \
         announced reaches past {announced}"
    )]
    UnreachableWait {
        /// The timeline's name.
        timeline: String,
        /// The value waited for.
        value: u64,
        /// Its value when the wait was refused.
        current: u64,
        /// The highest value a signal announced to residency reaches.
        announced: u64,
    },
    /// A renderer frame would signal a value of its [`Timeline`](crate::Timeline) that is not
    /// above what the timeline has reached or a signal already announced: Vulkan requires every
    /// signal of a timeline to be greater than its current and pending values. Nothing was
    /// submitted.
    #[error(
        "timeline `{timeline}`: a frame cannot signal {value}, not above its value {current} and \
         the announced signals up to {announced}"
    )]
    TimelineValue {
        /// The timeline's name.
        timeline: String,
        /// The value the frame would signal.
        value: u64,
        /// The timeline's value.
        current: u64,
        /// The highest value a signal announced to residency reaches.
        announced: u64,
    },
    /// A sampler asks for anisotropic filtering the device cannot give (nothing was created):
    /// the feature `samplerAnisotropy` is off (`maximum` 0), or `asked` is 0 or above the
    /// device's `maxSamplerAnisotropy` (`maximum`).
    #[error("anisotropic filtering of {asked} taps asked; the device allows 1 to {maximum} (0: no samplerAnisotropy)")]
    Anisotropy {
        /// The taps asked for.
        asked: u32,
        /// The device's `maxSamplerAnisotropy`; 0 without the feature `samplerAnisotropy`.
        maximum: u32,
    },
    /// Any other Vulkan error result.
    #[error("{call} failed: {result}")]
    Vk {
        /// The Vulkan call that failed.
        call: &'static str,
        /// Its result code.
        result: vk::Result,
    },
}

impl VulkanError {
    /// Classifies a failed Vulkan call.
    pub fn from_vk(call: &'static str, result: vk::Result) -> Self {
        match result {
            vk::Result::ERROR_OUT_OF_DEVICE_MEMORY => VulkanError::OutOfDeviceMemory { call },
            vk::Result::ERROR_OUT_OF_HOST_MEMORY => VulkanError::OutOfHostMemory { call },
            vk::Result::ERROR_DEVICE_LOST => VulkanError::DeviceLost { call },
            result => VulkanError::Vk { call, result },
        }
    }
}

/// Result of backend calls: the crate's one `Result` alias (the error defaults to
/// [`VulkanError`]; per-operation errors are named, `Result<Buffer, MemoryError>`).
pub type Result<T, E = VulkanError> = std::result::Result<T, E>;

/// What an engine can do about a failed call: the class of every public error of residency
/// ([`ResidencyError::class`]). Closed: a `match` on it needs no wildcard.
///
/// A refused call changes nothing; a call that fails (out of memory, a lost device) undoes what
/// it had done (no object half made, no memory kept). After [`DeviceLost`](Self::DeviceLost)
/// every object of the device is unusable.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ErrorClass {
    /// Memory ran out ([`Exhausted`] says which). Free or evict something (a streamer: lower its
    /// budget; a pool: free buffers, retire finished frames) and retry, or ask for less.
    OutOfMemory(Exhausted),
    /// The device was lost (`VK_ERROR_DEVICE_LOST`, or one injected through
    /// [`Ledger::inject_fault`](crate::Ledger::inject_fault)): every object on it is unusable, and
    /// every later call that reaches the GPU fails the same way. Drop the device's objects and
    /// open the device again.
    DeviceLost,
    /// The call breaks a rule (an argument out of range, an object of another device or owner,
    /// a call out of order); the error says which, with the numbers. Fix the call: retried
    /// unchanged it fails the same way.
    Refused,
    /// The machine, driver or device cannot do what was asked (no Vulkan loader or device, no
    /// sparse residency for a format, a missing feature, a limit of the device). Take another
    /// path: the software residency path, another format, another device.
    Unsupported,
    /// Anything else: a Vulkan result residency does not expect, an I/O error or corrupt data
    /// from a tile source or file, or a broken internal invariant (a residency bug; please report
    /// it). Log it; retrying may or may not help.
    Unexpected,
}

/// Which memory ran out ([`ErrorClass::OutOfMemory`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Exhausted {
    /// Device memory: the driver said `VK_ERROR_OUT_OF_DEVICE_MEMORY`, or the request is larger
    /// than its memory heap or `maxMemoryAllocationSize` (refused before the driver sees it, as
    /// the driver would refuse it).
    Device,
    /// Host memory: the driver said `VK_ERROR_OUT_OF_HOST_MEMORY`.
    Host,
    /// A budget would be exceeded: a memory heap's (`VK_EXT_memory_budget`, or residency's
    /// estimate) or one the application set (a tile pool's, an image pool's). Evict, lower other
    /// budgets, or allow over budget where the call offers it.
    Budget,
    /// A fixed-size structure of residency is full or smaller than the request: an allocator's
    /// heap, a linear pool, a ring or staging ring, a software tile pool's images, the device's
    /// `maxMemoryAllocationCount`, a descriptor pool. Free from it or retire finished frames, or
    /// make a bigger one.
    Capacity,
}

impl ErrorClass {
    /// Whether memory ran out, whichever memory.
    pub const fn is_out_of_memory(self) -> bool {
        matches!(self, ErrorClass::OutOfMemory(_))
    }

    /// Whether the device was lost.
    pub const fn is_device_lost(self) -> bool {
        matches!(self, ErrorClass::DeviceLost)
    }

    /// The class of a Vulkan result code (a failing one; `SUCCESS` and other non-errors are
    /// [`Unexpected`](Self::Unexpected) here, where only failures are classified).
    pub fn of_vk(result: vk::Result) -> ErrorClass {
        use vk::Result as R;
        match result {
            R::ERROR_OUT_OF_DEVICE_MEMORY => ErrorClass::OutOfMemory(Exhausted::Device),
            R::ERROR_OUT_OF_HOST_MEMORY => ErrorClass::OutOfMemory(Exhausted::Host),
            R::ERROR_OUT_OF_POOL_MEMORY
            | R::ERROR_FRAGMENTED_POOL
            | R::ERROR_FRAGMENTATION
            | R::ERROR_TOO_MANY_OBJECTS => ErrorClass::OutOfMemory(Exhausted::Capacity),
            R::ERROR_DEVICE_LOST => ErrorClass::DeviceLost,
            R::ERROR_LAYER_NOT_PRESENT
            | R::ERROR_EXTENSION_NOT_PRESENT
            | R::ERROR_FEATURE_NOT_PRESENT
            | R::ERROR_INCOMPATIBLE_DRIVER
            | R::ERROR_FORMAT_NOT_SUPPORTED => ErrorClass::Unsupported,
            _ => ErrorClass::Unexpected,
        }
    }
}

/// The class every public error of residency has: implemented by every public error type of
/// this crate and of `residency-core`. An error that wraps another (a `StreamError::Sparse`, a
/// `MemoryError::Vulkan`) has the class of the one inside, so an out-of-memory is
/// [`is_out_of_memory`](Self::is_out_of_memory) whatever shape it reaches the caller in.
///
/// ```no_run
/// # fn f(streamer: &mut residency_vulkan::streaming::Streamer) -> Result<(), Box<dyn std::error::Error>> {
/// use residency_vulkan::{ErrorClass, Exhausted, ResidencyError};
/// match streamer.begin_frame() {
///     Ok(_bindings) => { /* the frame */ }
///     Err(e) => match e.class() {
///         ErrorClass::OutOfMemory(Exhausted::Budget | Exhausted::Device) => {
///             let budget = streamer.budget_tiles();
///             streamer.set_budget_tiles(budget * 3 / 4); // evicts over the next frames
///         }
///         ErrorClass::DeviceLost => return Err(e.into()), // drop the device's objects, open it again
///         _ => return Err(e.into()),
///     },
/// }
/// # Ok(()) }
/// ```
pub trait ResidencyError: std::error::Error {
    /// What an engine can do about it.
    fn class(&self) -> ErrorClass;

    /// Whether memory ran out (any [`ErrorClass::OutOfMemory`]).
    fn is_out_of_memory(&self) -> bool {
        self.class().is_out_of_memory()
    }

    /// Whether the device was lost ([`ErrorClass::DeviceLost`]).
    fn is_device_lost(&self) -> bool {
        self.class().is_device_lost()
    }
}

impl ResidencyError for VulkanError {
    fn class(&self) -> ErrorClass {
        match self {
            VulkanError::LoaderMissing { .. }
            | VulkanError::NoDevice
            | VulkanError::Unsupported { .. }
            | VulkanError::ValidationLayerMissing => ErrorClass::Unsupported,
            VulkanError::Anisotropy { asked: 0, .. } => ErrorClass::Refused,
            VulkanError::Anisotropy { .. } => ErrorClass::Unsupported,
            VulkanError::OutOfDeviceMemory { .. } => ErrorClass::OutOfMemory(Exhausted::Device),
            VulkanError::OutOfHostMemory { .. } => ErrorClass::OutOfMemory(Exhausted::Host),
            VulkanError::DeviceLost { .. } => ErrorClass::DeviceLost,
            VulkanError::NoSuchDevice { .. }
            | VulkanError::SubresourceRange { .. }
            | VulkanError::WrongDevice { .. }
            | VulkanError::ImageLayout { .. }
            | VulkanError::ForeignToken { .. }
            | VulkanError::Reentrant { .. }
            | VulkanError::UnreachableWait { .. }
            | VulkanError::TimelineValue { .. } => ErrorClass::Refused,
            VulkanError::Vk { result, .. } => ErrorClass::of_vk(*result),
        }
    }
}

/// Adds the call name to a raw `VkResult`.
pub(crate) trait VkResultExt<T> {
    fn during(self, call: &'static str) -> Result<T>;
}

impl<T> VkResultExt<T> for ash::prelude::VkResult<T> {
    fn during(self, call: &'static str) -> Result<T> {
        self.map_err(|result| VulkanError::from_vk(call, result))
    }
}

/// Why a resource was refused by the owner it was handed to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ForeignReason {
    /// It lives on another device.
    OtherDevice {
        /// Its device.
        owner: DeviceIndex,
        /// The device it was handed to.
        target: DeviceIndex,
    },
    /// It was made by a pool (or outside any pool) other than the one it was handed to.
    OtherPool {
        /// The pool that made it (`None`: the device's general allocator).
        owner: Option<String>,
        /// The owner it was handed to (`None`: the device's general allocator).
        target: Option<String>,
    },
    /// A multi-device resource has an instance on a device its multi-device owner is not on.
    OutsideMask {
        /// The device of the instance.
        device: DeviceIndex,
        /// The devices of the owner it was handed to.
        mask: residency_core::device_mask::DeviceMask,
    },
}

impl std::fmt::Display for ForeignReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let pool = |p: &Option<String>| {
            p.as_ref().map_or("the device's allocator".to_owned(), |p| format!("pool `{p}`"))
        };
        match self {
            ForeignReason::OtherDevice { owner, target } => {
                write!(f, "it lives on device {owner}, not device {target}")
            }
            ForeignReason::OtherPool { owner, target } => {
                write!(f, "it was made by {}, not {}", pool(owner), pool(target))
            }
            ForeignReason::OutsideMask { device, mask } => {
                write!(f, "it has an instance on device {device}, outside {mask:?}")
            }
        }
    }
}

/// A resource handed to an owner that did not make it. Nothing changed: the resource comes back
/// alive in `resource`.
#[derive(Debug, thiserror::Error)]
#[error("`{name}` was refused: {reason}")]
pub struct ForeignResource<T: std::fmt::Debug> {
    /// The resource, unchanged.
    pub resource: Box<T>,
    /// Its name.
    pub name: String,
    /// Why.
    pub reason: ForeignReason,
}

impl<T: std::fmt::Debug> ResidencyError for ForeignResource<T> {
    fn class(&self) -> ErrorClass {
        ErrorClass::Refused
    }
}
