//! A renderer's own frame: its command buffer, recorded through residency's helpers
//! ([`Recording::from_raw`]), submitted once with a signal of the renderer's timeline.
//!
//! [`Recording::submit`] ends the command buffer and submits it on residency's universal queue
//! (the queue the application handed to [`DeviceSet::adopt`](crate::DeviceSet::adopt)), waiting
//! for what the recording needs and signalling `timeline` to `value`; once the submission
//! succeeded it announces the signal, records the images' new layouts, and declares every object
//! the recording holds used until that point. Nothing is declared before: a recording dropped
//! without `submit` (a `?` between recording and submission) declares nothing, and teardown has
//! nothing of it to wait for.
//!
//! For a submission on a queue of the renderer's own, [`Recording::finish`] does the same checks
//! and returns a [`PendingFrame`]: the command buffer (ended), the semaphore waits and the signal
//! the renderer's `vkQueueSubmit2` must include, and the `unsafe` [`PendingFrame::submitted`] to
//! call once that submission succeeded ([`Recording::finish_unended`] where the command buffer's
//! owner ends it, as wgpu does for its encoders). Residency's later submissions and binds then wait for the
//! frame on the GPU. While a `PendingFrame` lives, residency's universal queue stays locked, so
//! that the layouts it checked hold when the frame runs: residency calls that submit on the
//! holding thread are refused ([`VulkanError::Reentrant`]), other threads wait.
//!
//! Every renderer frame submitted this way counts, for deferred destruction, like a residency
//! submission: whatever is released after it waits for it (`device/life.rs`), the streamer's tiles
//! and heaps included, whether or not `end_frame` was reached.

use crate::device::ledger::FaultSite;
use crate::device::life::{GpuUse, Life, Timeline};
use crate::device::{Device, QueueGuard};
use crate::error::{VkResultExt, VulkanError};
use crate::sync::recording::{LayoutPlan, Recording};
use ash::vk;
use std::sync::Arc;

/// A renderer frame checked and ready for a submission of the renderer's own, on a queue other
/// than residency's universal queue ([`Recording::finish`]). Submit
/// [`command_buffer`](Self::command_buffer) in a batch that waits for every
/// [`waits`](Self::waits) entry and signals [`signal`](Self::signal), then call
/// [`submitted`](Self::submitted). Dropped without that, it declares nothing and changes no
/// layout: the command buffer must then never be submitted.
///
/// Residency's universal queue stays locked while it lives.
#[must_use = "a frame neither submitted nor dropped keeps residency's universal queue locked"]
pub struct PendingFrame<'a> {
    // Dropped first: the queue lock goes before the objects held (their release may run
    // residency's maintenance).
    queue: QueueGuard<'a>,
    device: &'a Device,
    cmd: vk::CommandBuffer,
    kept: Vec<Arc<Life>>,
    plan: LayoutPlan,
    waits: Vec<vk::SemaphoreSubmitInfo<'static>>,
    signal: vk::SemaphoreSubmitInfo<'static>,
    timeline: Timeline,
    value: u64,
}

impl std::fmt::Debug for PendingFrame<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PendingFrame")
            .field("timeline", &self.timeline.name())
            .field("value", &self.value)
            .field("waits", &self.waits.len())
            .finish_non_exhaustive()
    }
}

impl<'a> Recording<'a> {
    /// Ends the renderer's command buffer (a recording of [`Recording::from_raw`]) and submits it
    /// on residency's universal queue, signalling `timeline` to `value`: the one call of a frame
    /// that ends and hands its work to the GPU. The submission waits for what the recording
    /// asked for ([`Recording::waits`]: the streamer's binds), for every sparse bind residency
    /// submitted before, and for frames submitted on the renderer's other queues; image layouts
    /// are checked and advanced in queue order. Once it succeeded the signal is announced, and
    /// every object the helpers recorded is declared used until the returned point (pass it to
    /// [`Streamer::end_frame`](crate::streaming::Streamer::end_frame)).
    ///
    /// Refused, with nothing submitted and nothing declared (the command buffer must then not be
    /// submitted): a timeline of another device ([`VulkanError::ForeignToken`]), a `value` not
    /// above the timeline's value and announced signals ([`VulkanError::TimelineValue`]), a
    /// layout mismatch ([`VulkanError::ImageLayout`]), a wait no announced signal reaches, a
    /// failed `vkEndCommandBuffer` or `vkQueueSubmit2`.
    pub fn submit(self, timeline: &Timeline, value: u64) -> Result<GpuUse, VulkanError> {
        let frame = self.finish(timeline, value)?;
        let device = frame.device;
        let buffers = [vk::CommandBufferSubmitInfo::default().command_buffer(frame.cmd)];
        let signals = [frame.signal];
        let submit = vk::SubmitInfo2::default()
            .command_buffer_infos(&buffers)
            .wait_semaphore_infos(&frame.waits)
            .signal_semaphore_infos(&signals);
        let submitted = device.ledger().guard(FaultSite::QueueSubmit, || {
            // SAFETY: the universal queue is locked (`frame.queue`); the command buffer is a
            // primary one of a pool on its family, ended above and not pending (`from_raw`'s
            // contract: submitted only through here or a `PendingFrame`); every image it names is
            // in the layouts its helpers' commands need (checked under the lock); the waits are
            // on timeline semaphores of this device at values published after their submissions
            // or announced (`wait_info`); the signal is a timeline of this device at a value above
            // its current and every announced value, and every signal of it is announced
            // (`import_timeline`'s contract), so above every pending one.
            unsafe { device.raw().queue_submit2(*frame.queue, &[submit], vk::Fence::null()) }
        });
        if let Err(result) = submitted {
            // Dropping the frame declares nothing: the GPU never saw it.
            return Err(VulkanError::from_vk("vkQueueSubmit2", result));
        }
        Ok(frame.commit(false))
    }

    /// [`Recording::submit`]'s checks without the submission, for a submission on a queue of
    /// the renderer's own: ends the command buffer, locks residency's universal queue, checks
    /// `value` and the image layouts, and returns the [`PendingFrame`] to submit. Refused as
    /// `submit` is, with nothing changed.
    pub fn finish(self, timeline: &Timeline, value: u64) -> Result<PendingFrame<'a>, VulkanError> {
        self.finish_inner(timeline, value, true)
    }

    /// [`Recording::finish`] for a command buffer that its owner ends itself (a wgpu command
    /// encoder's, which wgpu ends when the encoder is finished): the same checks and the same
    /// [`PendingFrame`], without `vkEndCommandBuffer`. The owner ends the command buffer before
    /// submitting it.
    pub fn finish_unended(self, timeline: &Timeline, value: u64) -> Result<PendingFrame<'a>, VulkanError> {
        self.finish_inner(timeline, value, false)
    }

    fn finish_inner(
        self,
        timeline: &Timeline,
        value: u64,
        end: bool,
    ) -> Result<PendingFrame<'a>, VulkanError> {
        let device = self.device();
        if let Some(result) = device.ledger().fault_at(FaultSite::QueueSubmit) {
            return Err(VulkanError::from_vk("vkQueueSubmit2", result));
        }
        let Some((semaphore, _)) = device.timeline_state(timeline) else {
            return Err(VulkanError::ForeignToken {
                token: "timeline",
                issuer: "another device".to_owned(),
                holder: format!("a frame of device {}", device.index()),
            });
        };
        let cmd = self.raw();
        let (kept, plan, recorded_waits) = self.into_parts();
        // After the sparse binds residency submitted (memory the frame samples), residency's own
        // submissions so far (layouts it left, for a frame on another queue) and frames on the
        // renderer's other queues.
        let mut after = recorded_waits;
        after.extend(device.submitted_binds());
        let work = device.submitted_work();
        if work.point.value > 0 {
            after.push(work);
        }
        after.extend(device.external_frame_waits());
        let waits = after.iter().map(|u| device.wait_info(u)).collect::<Result<Vec<_>, _>>()?;
        if end {
            // SAFETY: `from_raw`'s contract: the command buffer is recording, outside a render
            // pass, and nothing else records into it.
            unsafe { device.raw().end_command_buffer(cmd) }.during("vkEndCommandBuffer")?;
        }
        let queue = device.universal_queue().lock()?;
        // Under the lock: every signal residency makes or announces is too.
        let (_, announced) = device.timeline_state(timeline).unwrap_or((semaphore, u64::MAX));
        // SAFETY: a timeline semaphore of this device (created here, or imported under that
        // promise), not destroyed before the set closes.
        let current = unsafe { device.raw().get_semaphore_counter_value(semaphore) }
            .during("vkGetSemaphoreCounterValue")?;
        if value <= current || value <= announced {
            return Err(VulkanError::TimelineValue {
                timeline: timeline.name().to_owned(),
                value,
                current,
                announced,
            });
        }
        plan.check()?;
        let signal = vk::SemaphoreSubmitInfo::default()
            .semaphore(semaphore)
            .value(value)
            .stage_mask(vk::PipelineStageFlags2::ALL_COMMANDS);
        Ok(PendingFrame { queue, device, cmd, kept, plan, waits, signal, timeline: timeline.clone(), value })
    }
}

impl PendingFrame<'_> {
    /// The command buffer to submit (ended; by its owner after [`Recording::finish_unended`]).
    pub fn command_buffer(&self) -> vk::CommandBuffer {
        self.cmd
    }

    /// The semaphore waits the submission must include (timeline semaphores of the device, at
    /// all commands): the recording's waits, residency's sparse binds and submissions so far,
    /// and frames on other queues.
    pub fn waits(&self) -> &[vk::SemaphoreSubmitInfo<'static>] {
        &self.waits
    }

    /// The signal the submission must include: the timeline at the frame's value.
    pub fn signal(&self) -> vk::SemaphoreSubmitInfo<'static> {
        self.signal
    }

    /// The point the frame's work ends at (its timeline at its value).
    pub fn gpu_use(&self) -> GpuUse {
        self.timeline.at(self.value)
    }

    /// The submission was made: announces the signal, advances the images' layouts, declares
    /// every object the recording holds used until the frame's point, and makes residency's
    /// later submissions and binds wait for it. Returns that point.
    ///
    /// # Safety
    /// [`command_buffer`](Self::command_buffer) was submitted to a queue of this device, and the
    /// submission succeeded, in a batch that waits for every entry of [`waits`](Self::waits) and
    /// signals [`signal`](Self::signal) (nothing submitted after it on that queue signals the
    /// timeline lower).
    pub unsafe fn submitted(self) -> GpuUse {
        self.commit(true)
    }

    /// Publishes the submitted frame (under the universal queue lock, still held).
    fn commit(self, external: bool) -> GpuUse {
        let until = self.timeline.at(self.value);
        self.timeline.announce(self.value);
        self.device.note_frame(until.point, external);
        self.plan.apply();
        for life in &self.kept {
            // Same device: the recording accepted only objects of its own device.
            let _ = life.used_until(until);
        }
        let device = self.device;
        drop(self);
        device.maintain();
        until
    }
}
