//! `MultiImagePool`: a pool over a device mask, with a memory budget per device, from which
//! [`MultiImage`]s are created on the devices of a mask (O3DE's `MultiDeviceImagePool`).
//!
//! Each device's part ([`DeviceImagePool`]) places its images through that device's normal path
//! ([`Device::create_image`]: placed in a shared heap, or committed) and charges their bytes (the
//! driver's size, [`Image::size`](crate::Image::size)) to its budget. It keeps a handle to each
//! image's life (its `retire::Life`), so it knows when the last other handle is gone and what GPU
//! work the image then still waits for; an image's bytes count against the budget until its
//! memory is released (see [`MultiImagePool`] for exactly when). The pool's `MultiImage`s hold
//! their devices' parts and tell them when they are dropped.
use super::{
    device_count, fan_out, multi_device, resolve_mask, MultiDevice, MultiDeviceError, MultiImage, PerDevice,
};
use crate::device::blocks::MemoryError;
use crate::device::life::{GpuUse, Life};
use crate::device::set::DeviceSet;
use crate::device::Device;
use crate::error::{ErrorClass, Exhausted, ResidencyError};
use crate::error::{ForeignReason, ForeignResource};
use crate::poison::PoisonFree;
use crate::resources::image::ImageDesc;
use residency_core::device_mask::{DeviceIndex, DeviceMask};
use residency_core::memory::MemoryIntent;
use residency_core::report::DeviceSetReport;
use std::sync::{Arc, Mutex, MutexGuard};

/// How to create a [`MultiImagePool`].
#[derive(Clone, Debug)]
pub struct MultiImagePoolDesc {
    /// Its name (in errors and refusals).
    pub name: String,
    /// The memory intent of every image it creates (default [`MemoryIntent::DeviceLocal`]).
    pub intent: MemoryIntent,
    /// Bytes of images it may hold on each device (`None`, the default: no limit beyond the
    /// device's own).
    pub budget: Option<u64>,
}

impl MultiImagePoolDesc {
    /// A device-local pool without a budget.
    pub fn new(name: impl Into<String>) -> Self {
        MultiImagePoolDesc { name: name.into(), intent: MemoryIntent::DeviceLocal, budget: None }
    }

    /// Sets the memory intent of its images.
    pub fn with_intent(mut self, intent: MemoryIntent) -> Self {
        self.intent = intent;
        self
    }

    /// Sets the budget per device, in bytes.
    pub fn with_budget(mut self, bytes: u64) -> Self {
        self.budget = Some(bytes);
        self
    }
}

/// What a [`MultiImagePool`] holds on one device (or, summed, on all).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ImagePoolStats {
    /// Images with a handle left (the [`MultiImage`], a view of it, a descriptor set or a recording).
    pub images: u64,
    /// Their bytes.
    pub bytes: u64,
    /// Images whose last handle is gone but whose GPU work had not completed when the pool last
    /// looked: their memory is not released yet, so they still count against the budget.
    pub retiring_images: u64,
    /// Their bytes.
    pub retiring_bytes: u64,
}

impl ImagePoolStats {
    /// The bytes charged to the budget: live and retiring images.
    pub fn charged_bytes(&self) -> u64 {
        self.bytes + self.retiring_bytes
    }

    fn add(self, other: ImagePoolStats) -> ImagePoolStats {
        ImagePoolStats {
            images: self.images + other.images,
            bytes: self.bytes + other.bytes,
            retiring_images: self.retiring_images + other.retiring_images,
            retiring_bytes: self.retiring_bytes + other.retiring_bytes,
        }
    }
}

/// Why a device's part of [`MultiImagePool::init_image`] failed.
#[derive(Debug, thiserror::Error)]
pub enum ImagePoolError {
    /// The device refused the image or its memory (a description it does not support, out of
    /// device memory, a Vulkan failure).
    #[error(transparent)]
    Memory(#[from] MemoryError),
    /// The image does not fit in what is left of the device's budget.
    #[error("image pool `{pool}`: `{name}` needs {requested} bytes; {charged} of its budget of {budget} are charged")]
    OverBudget {
        /// The pool.
        pool: String,
        /// The image.
        name: String,
        /// Its bytes on this device.
        requested: u64,
        /// Bytes already charged there (live and retiring images).
        charged: u64,
        /// The budget.
        budget: u64,
    },
}

impl ResidencyError for ImagePoolError {
    fn class(&self) -> ErrorClass {
        match self {
            ImagePoolError::Memory(e) => e.class(),
            ImagePoolError::OverBudget { .. } => ErrorClass::OutOfMemory(Exhausted::Budget),
        }
    }
}

/// A live image's charge: the pool's handle to its life and its bytes.
#[derive(Debug)]
struct Charge {
    life: Arc<Life>,
    bytes: u64,
}

/// A released image whose memory waits for these GPU uses.
#[derive(Debug)]
struct Retiring {
    until: Vec<GpuUse>,
    bytes: u64,
}

/// What one device's part charged: its live and retiring images.
#[derive(Debug, Default)]
struct ChargeList {
    live: Vec<Charge>,
    retiring: Vec<Retiring>,
}

impl ChargeList {
    fn stats(&self) -> ImagePoolStats {
        ImagePoolStats {
            images: self.live.len() as u64,
            bytes: self.live.iter().map(|c| c.bytes).sum(),
            retiring_images: self.retiring.len() as u64,
            retiring_bytes: self.retiring.iter().map(|r| r.bytes).sum(),
        }
    }
}

/// One device's budget and charges, shared by its [`DeviceImagePool`] and the [`MultiImage`]s it
/// charged (which tell it when they are dropped).
#[derive(Debug)]
pub(crate) struct Charges {
    device: Arc<Device>,
    budget: Option<u64>,
    list: Mutex<ChargeList>,
}

impl Charges {
    fn lock(&self) -> MutexGuard<'_, ChargeList> {
        self.list.locked()
    }

    /// [`Charges::sweep_locked`] under the lock.
    pub(crate) fn sweep(&self) {
        self.sweep_locked(&mut self.lock());
    }

    /// Lets go of the images nothing else holds any more (their lives retire now, behind the GPU
    /// work residency submitted so far and the uses declared on them), then of the retiring
    /// images whose GPU work has completed, after [`Device::maintain`] has released their memory.
    fn sweep_locked(&self, list: &mut ChargeList) {
        let device = &self.device;
        let mut i = 0;
        while i < list.live.len() {
            // Only the pool holds it: no handle is left to clone it again.
            if Arc::strong_count(&list.live[i].life) > 1 {
                i += 1;
                continue;
            }
            let Charge { life, bytes } = list.live.swap_remove(i);
            let declared = life.declared_uses();
            // Retires the image: destroyed now if its work is done, else queued behind it.
            drop(life);
            // What the retire queue waits for: the declared uses and residency's work submitted
            // before the drop (what was submitted by now covers it).
            let mut until: Vec<GpuUse> =
                declared.points().iter().map(|&point| GpuUse { device: device.uid(), point }).collect();
            until.push(device.submitted_work());
            until.extend(device.submitted_binds());
            list.retiring.push(Retiring { until, bytes });
        }
        let done = |r: &Retiring| r.until.iter().all(|u| device.has_completed(u));
        if list.retiring.iter().any(done) {
            device.maintain();
            list.retiring.retain(|r| !done(r));
        }
    }
}

/// One device's part of a [`MultiImagePool`]: its budget and the images it charged.
#[derive(Debug)]
pub struct DeviceImagePool {
    charges: Arc<Charges>,
}

impl DeviceImagePool {
    /// Its device.
    pub fn device(&self) -> &Arc<Device> {
        &self.charges.device
    }

    /// Its budget in bytes (`None`: none).
    pub fn budget(&self) -> Option<u64> {
        self.charges.budget
    }

    /// What it holds now (released images whose GPU work has completed are let go first).
    pub fn stats(&self) -> ImagePoolStats {
        let mut list = self.charges.lock();
        self.charges.sweep_locked(&mut list);
        list.stats()
    }
}

/// An image pool on every device of a mask, with a budget per device. Images come from
/// [`MultiImagePool::init_image`] as [`MultiImage`]s on the devices of a mask within the pool's.
///
/// **When the budget comes back.** An image's bytes on a device stay charged until its memory
/// is released, which is when both
/// 1. its last handle on that device is gone: the [`MultiImage`] (dropped or given to
///    [`MultiImagePool::free_image`]), every view of it handed out by [`MultiImage::view`], the
///    descriptor sets binding those views and every recording that used the image (until its
///    submission has its timeline value) — it counts as live ([`ImagePoolStats::images`]) until
///    then, and
/// 2. the GPU work that may use it has completed: every residency submission and sparse bind to
///    that device made before (1), and every use declared with `used_until` (renderer timeline
///    points, frames) — it counts as retiring ([`ImagePoolStats::retiring_images`]) until then.
///
/// The device's part looks when one of its images is dropped (or freed) and at each of its own
/// calls ([`MultiImagePool::init_image`], the statistics): it lets go of its handle to every
/// image nothing else holds (which retires the image as any dropped resource retires, behind that
/// work), and runs [`Device::maintain`] before it lets the bytes of a retiring image go, so the
/// memory is back in the device's heaps when the budget is. So an image freed with no view left
/// and no work pending has its budget back when `free_image` returns; a handed-out view that
/// outlives its image keeps the image (its objects and its charge) until the pool next looks
/// after the view is gone; a declared use keeps it retiring until the pool looks after the use
/// ended. Dropping the pool lets go of nothing its images still hold: each device's part lives on
/// in its images until the last is dropped.
#[derive(Debug)]
pub struct MultiImagePool {
    name: String,
    intent: MemoryIntent,
    /// How many device indices the set has (mask bits beyond it are ignored).
    device_count: u32,
    pools: PerDevice<DeviceImagePool>,
}

impl MultiImagePool {
    /// The pool on every open device of `mask` ([`DeviceMask::ALL`]: every open device); a mask
    /// naming no open device is [`MultiDeviceError::EmptyMask`].
    pub fn new(
        set: &DeviceSet,
        mask: DeviceMask,
        desc: &MultiImagePoolDesc,
    ) -> Result<Self, MultiDeviceError<ImagePoolError>> {
        let pools = super::fan_out_on(set, mask, |d| {
            let charges = Charges { device: Arc::clone(d), budget: desc.budget, list: Mutex::default() };
            Ok::<_, ImagePoolError>(DeviceImagePool { charges: Arc::new(charges) })
        })?;
        Ok(MultiImagePool {
            name: desc.name.clone(),
            intent: desc.intent,
            device_count: device_count(set),
            pools,
        })
    }

    /// Its name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The memory intent of its images.
    pub fn intent(&self) -> MemoryIntent {
        self.intent
    }

    /// Creates an image on every device of `mask` (within the pool's; [`DeviceMask::ALL`]: the
    /// pool's), each placed through its device's [`Device::create_image`] with the pool's memory
    /// intent (`desc.intent` is replaced by it). All or nothing:
    /// - the description is checked on every device before anything is created (a device that
    ///   does not support it is [`ImagePoolError::Memory`] naming it);
    /// - then device by device, lowest first, the driver's size for the description
    ///   (`vkGetDeviceImageMemoryRequirements`, nothing created) is checked against what is left
    ///   of that device's budget, the image is created, and its own size checked again: an image
    ///   that does not fit is [`ImagePoolError::OverBudget`] (before anything is allocated on that
    ///   device, unless only the created image's size is over), and a device that fails to create
    ///   or place it returns its [`ImagePoolError::Memory`]. Either way the images made on this
    ///   call on earlier devices are dropped (never used, so released at once unless residency's
    ///   earlier work on that device is still running), nothing is charged anywhere, and the
    ///   error names the device.
    pub fn init_image(
        &self,
        desc: &ImageDesc,
        mask: DeviceMask,
    ) -> Result<MultiImage, MultiDeviceError<ImagePoolError>> {
        let mask = resolve_mask(mask, self.mask(), self.device_count)?;
        let mut desc = desc.clone();
        desc.intent = self.intent;
        let targets: Vec<&Arc<Charges>> =
            self.pools.iter().filter(|(i, _)| mask.contains(*i)).map(|(_, p)| &p.charges).collect();
        for pool in &targets {
            pool.device.check_image(&desc).map_err(|source| MultiDeviceError::Failed {
                device: pool.device.index(),
                source: source.into(),
            })?;
        }
        // Lowest device first, as every call locks them: no two calls wait on each other.
        let mut lists: Vec<MutexGuard<'_, ChargeList>> = targets.iter().map(|p| p.lock()).collect();
        for (pool, list) in targets.iter().zip(lists.iter_mut()) {
            pool.sweep_locked(list);
        }
        let devices: Vec<&Arc<Device>> = targets.iter().map(|p| &p.device).collect();
        let images = fan_out(&devices, |device| {
            let at = targets.iter().position(|p| p.device.is(device)).expect("a target's device");
            let charged = lists[at].stats().charged_bytes();
            let over = |requested: u64| match targets[at].budget {
                Some(budget) if charged.saturating_add(requested) > budget => {
                    Some(ImagePoolError::OverBudget {
                        pool: self.name.clone(),
                        name: desc.name.clone(),
                        requested,
                        charged,
                        budget,
                    })
                }
                _ => None,
            };
            // The driver's size asked without creating anything (the description was checked
            // against this device above), so a refusal allocates nothing.
            let expected =
                crate::device::profile_capture::requirements_of_image(device, &desc.create_info()).size;
            if let Some(refused) = over(expected) {
                return Err(refused);
            }
            let image = device.create_image(&desc)?;
            // The created image's own size is what is charged (a format list may change it).
            match over(image.size()) {
                Some(refused) => Err(refused),
                None => Ok(image),
            }
        })?;
        for (index, image) in images.iter() {
            let at = targets.iter().position(|p| p.device.index() == index).expect("a target's image");
            lists[at].live.push(Charge { life: Arc::clone(image.life()), bytes: image.size() });
        }
        let charged_by = targets.iter().map(|p| Arc::clone(p)).collect();
        Ok(MultiImage { images, views: Mutex::new(Vec::new()), charged_by })
    }

    /// Releases an image of this pool on every device it exists on (as dropping it does: the
    /// budget comes back as [`MultiImagePool`] says, at once when nothing else holds the image and
    /// its devices' work is done). An image with an instance this pool did
    /// not create — [`MultiImage::create`]'s, another pool's, or on a device the pool is not on —
    /// is refused and handed back unchanged, with the reason of its first such instance.
    pub fn free_image(&self, image: MultiImage) -> Result<(), ForeignResource<MultiImage>> {
        let foreign = image.images.iter().find_map(|(index, instance)| match self.pools.get(index) {
            None => Some(ForeignReason::OutsideMask { device: index, mask: self.mask() }),
            Some(pool) => {
                let ours = pool.charges.lock().live.iter().any(|c| Arc::ptr_eq(&c.life, instance.life()));
                (!ours).then(|| ForeignReason::OtherPool { owner: None, target: Some(self.name.clone()) })
            }
        });
        if let Some(reason) = foreign {
            let name = image.images.iter().next().map(|(_, i)| i.name().to_owned()).unwrap_or_default();
            return Err(ForeignResource { name, resource: Box::new(image), reason });
        }
        // Its drop tells this pool's devices, which let go of what nothing else holds.
        drop(image);
        Ok(())
    }

    /// Statistics per device.
    pub fn stats(&self) -> Vec<(DeviceIndex, ImagePoolStats)> {
        self.pools.iter().map(|(i, p)| (i, p.stats())).collect()
    }

    /// Statistics summed over devices.
    pub fn total_stats(&self) -> ImagePoolStats {
        self.pools.iter().map(|(_, p)| p.stats()).fold(ImagePoolStats::default(), ImagePoolStats::add)
    }

    /// A report of every device of `set` ([`DeviceSet::memory_report_with`]) with the instances of
    /// `images` naming their allocations (each device takes its own instances).
    pub fn report_with(&self, set: &DeviceSet, images: &[&MultiImage]) -> DeviceSetReport {
        let sources = crate::pools::report::ReportSources::new()
            .with_images(images.iter().flat_map(|m| m.images.iter().map(|(_, image)| image)));
        set.memory_report_with(&sources)
    }
}

multi_device!(MultiImagePool, pools: DeviceImagePool, pool);
