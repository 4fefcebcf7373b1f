//! Ordering wgpu's submissions with residency's on the GPU, with timeline semaphores instead of
//! host waits.
//!
//! - wgpu after residency: [`Bridge::wait_for`] makes the next wgpu submission wait for a residency
//!   point (`Device::submitted_work()` after uploads, `submitted_binds()` after sparse binds):
//!   wgpu-hal's `Queue::add_wait_semaphore` on residency's own timeline.
//! - residency after wgpu: [`Bridge::submit_signalling`] submits wgpu command buffers that signal
//!   a [`FrameTimeline`] at its next value, announced to residency, and returns the point as a
//!   `GpuUse`: what residency's `used_until`, the streamer's `end_frame` and its waits take.

use crate::open::{Bridge, QueueSharing};
use crate::{OpenError, Result};
use ash::vk;
use residency_vulkan::{GpuUse, Timeline};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use wgpu::hal::api::Vulkan;

/// A residency timeline that wgpu submissions made through [`Bridge::submit_signalling`] signal,
/// one value each, in order.
#[derive(Debug)]
pub struct FrameTimeline {
    timeline: Timeline,
    device: Arc<residency_vulkan::Device>,
    /// The last value a submission was given.
    last: AtomicU64,
}

impl FrameTimeline {
    /// The residency timeline (its points are `GpuUse`s of the bridge's device).
    pub fn timeline(&self) -> &Timeline {
        &self.timeline
    }

    /// The value the last submission signals (0: none yet).
    pub fn last(&self) -> u64 {
        self.last.load(Ordering::Acquire)
    }

    /// The residency device the timeline belongs to.
    pub(crate) fn device(&self) -> &Arc<residency_vulkan::Device> {
        &self.device
    }

    /// Records that a submission signals `value` (made under the bridge's submit lock).
    pub(crate) fn set_last(&self, value: u64) {
        self.last.store(value, Ordering::Release);
    }
}

impl Bridge {
    /// Creates a timeline for wgpu submissions (destroyed with residency's device).
    pub fn create_timeline(&self, name: &str) -> Result<FrameTimeline> {
        Ok(FrameTimeline {
            timeline: self.residency().create_timeline(name)?,
            device: Arc::clone(self.residency()),
            last: AtomicU64::new(0),
        })
    }

    /// Makes the next wgpu submission wait, on the GPU, for `until`: a point of residency's own
    /// timelines (`submitted_work()`, `submitted_binds()`) or of a renderer timeline of the device
    /// that an announced signal reaches. Refused as `Device::semaphore_point` refuses, adding
    /// nothing.
    pub fn wait_for(&self, until: &GpuUse) -> Result<()> {
        let (semaphore, value) = self.residency().semaphore_point(until)?;
        // SAFETY: the hal queue is only used to stage a wait; the semaphore is a timeline of this
        // device that lives as long as residency's device, which outlives the submission (the
        // keeper destroys the device only after wgpu's).
        let queue = unsafe { self.queue_ref().as_hal::<Vulkan>() }.ok_or(OpenError::NotVulkan)?;
        queue.add_wait_semaphore(semaphore, Some(value), vk::PipelineStageFlags::ALL_COMMANDS);
        Ok(())
    }

    /// Submits wgpu command buffers (as [`Bridge::submit`]) that also signal `timeline` at its
    /// next value, announces that value to residency, and returns its point: the use that ends
    /// when this submission completes.
    pub fn submit_signalling<I: IntoIterator<Item = wgpu::CommandBuffer>>(
        &self,
        buffers: I,
        timeline: &FrameTimeline,
    ) -> Result<(wgpu::SubmissionIndex, GpuUse)> {
        if !Arc::ptr_eq(&timeline.device, self.residency()) {
            return Err(OpenError::ForeignTimeline);
        }
        let _guard = self.submit_guard()?;
        let _queue_guard = match self.queue_sharing() {
            QueueSharing::Shared => Some(self.residency().universal_queue().lock()?),
            QueueSharing::Separate => None,
        };
        let value = timeline.last.load(Ordering::Acquire) + 1;
        let semaphore = timeline.timeline.raw();
        // SAFETY: as in `wait_for`; the value is above every value signalled or staged before
        // (values are given out in order under the submit lock, and a signal wgpu did not
        // consume is taken back below, also when its submission panics).
        let queue = unsafe { self.queue_ref().as_hal::<Vulkan>() }.ok_or(OpenError::NotVulkan)?;
        queue.add_signal_semaphore(semaphore, Some(value));
        drop(queue);
        let staged = Staged { queue: self.queue_ref(), semaphore };
        let index = self.queue_ref().submit(buffers);
        if staged.take_back() {
            // wgpu made no hal submission (nothing consumed the signal): announce nothing.
            return Err(OpenError::Device("wgpu submitted nothing to signal the timeline".into()));
        }
        timeline.last.store(value, Ordering::Release);
        // SAFETY: the submission that signals `value` was just made (wgpu consumed the staged
        // signal in its queue submission).
        unsafe { timeline.timeline.signal_submitted(value) };
        Ok((index, timeline.timeline.at(value)))
    }
}

/// A signal staged in wgpu-hal's queue for the next submission, taken back if that submission
/// did not consume it (or panicked).
pub(crate) struct Staged<'a> {
    queue: &'a wgpu::Queue,
    semaphore: vk::Semaphore,
}

impl<'a> Staged<'a> {
    /// A signal of `semaphore` staged in `queue`.
    pub(crate) fn new(queue: &'a wgpu::Queue, semaphore: vk::Semaphore) -> Staged<'a> {
        Staged { queue, semaphore }
    }

    /// Takes the signal back if it is still staged; whether it was.
    pub(crate) fn take_back(&self) -> bool {
        // SAFETY: the hal queue is only used to remove a staged signal.
        unsafe { self.queue.as_hal::<Vulkan>() }.is_some_and(|q| q.remove_signal_semaphore(self.semaphore))
    }
}

impl Drop for Staged<'_> {
    fn drop(&mut self) {
        self.take_back();
    }
}
