//! Recording and submitting command buffers on a device's universal queue.
//!
//! [`CommandContext`] owns a command pool and a small set of (command buffer, fence) slots that are
//! reused once their fence has signalled. [`Device::submit_once`] is the simple form: record, submit,
//! wait.

use crate::device::blocks::MemoryError;
use crate::device::ledger::FaultSite;
use crate::device::life::GpuUse;
use crate::device::lock::Lock;
use crate::device::Device;
use crate::error::{ErrorClass, ResidencyError};
use crate::error::{Result, VkResultExt, VulkanError};
use crate::resources::buffer::{AccessError, Buffer, BufferDesc};
use crate::sync::recording::Recording;
use ash::vk;
use residency_core::memory::MemoryIntent;
use residency_core::usage::BufferUsage;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Reading a buffer back failed.
#[derive(Debug, thiserror::Error)]
pub enum ReadBackError {
    /// The range is outside the buffer (or empty).
    #[error("read back of `{name}`: bytes {offset}..{end} are not inside its {size} B")]
    OutOfBounds {
        /// The buffer.
        name: String,
        /// Start of the range.
        offset: u64,
        /// End of the range.
        end: u64,
        /// The buffer's size.
        size: u64,
    },
    /// The buffer lives on another device, or lacks the copy-source usage a read-back needs.
    #[error("read back of `{name}`: {reason}")]
    Refused {
        /// The buffer.
        name: String,
        /// Why.
        reason: String,
    },
    /// The temporary readback buffer could not be made.
    #[error(transparent)]
    Memory(#[from] MemoryError),
    /// Reading the mapped bytes failed.
    #[error(transparent)]
    Access(#[from] AccessError),
    /// The buffer or image cannot be the source of the read-back's copy.
    #[error("`{name}` cannot be read back: {reason}")]
    Invalid {
        /// The resource.
        name: String,
        /// Why.
        reason: &'static str,
    },
    /// A Vulkan call failed.
    #[error(transparent)]
    Vulkan(#[from] VulkanError),
}

impl ResidencyError for ReadBackError {
    fn class(&self) -> ErrorClass {
        match self {
            ReadBackError::Memory(e) => e.class(),
            ReadBackError::Access(e) => e.class(),
            ReadBackError::Vulkan(e) => e.class(),
            ReadBackError::OutOfBounds { .. }
            | ReadBackError::Refused { .. }
            | ReadBackError::Invalid { .. } => ErrorClass::Refused,
        }
    }
}

/// A submitted batch; wait for it with [`CommandContext::wait`] of the context that made it.
///
/// A submission is bound to its issuer: the context that made it (and so its device). Another
/// context refuses it with [`VulkanError::ForeignToken`] and looks at nothing of it.
#[derive(Debug, PartialEq, Eq)]
#[must_use = "a submission should be waited for before its resources are reused"]
pub struct Submission {
    slot: usize,
    serial: u64,
    /// The value of its lane's timeline (the device's universal timeline, or its moves timeline)
    /// this submission signals.
    point: u64,
    lane: Lane,
    device: u64,
    /// The [`CommandContext`] that made it (unique in the process).
    context: u64,
}

impl Submission {
    /// The moment this submission's work ends, for `used_until` on resources it used (residency
    /// already waits for its own submissions before destroying anything, so this is for work the
    /// renderer recorded itself into it and wants tied to it explicitly).
    pub fn gpu_use(&self) -> GpuUse {
        GpuUse {
            device: self.device,
            point: residency_core::sync::GpuPoint::new(self.lane.clock(), self.point),
        }
    }
}

#[derive(Debug)]
struct Slot {
    command_buffer: vk::CommandBuffer,
    fence: vk::Fence,
    /// The serial of the submission using this slot, 0 when free.
    serial: u64,
    /// The universal timeline value of that submission.
    point: u64,
}

#[derive(Debug)]
struct ContextState {
    pool: vk::CommandPool,
    slots: Vec<Slot>,
    next_serial: u64,
}

/// Which of residency's queues and timelines a [`CommandContext`] submits to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Lane {
    /// The universal queue and timeline: every public context.
    Universal,
    /// The moves queue ([`Device::moves_queue`]) and its timeline: the copies of moves under
    /// memory pressure (buffers only: no image layouts are checked there). Each submission waits
    /// on the GPU for every universal submission made before it.
    Moves,
}

impl Lane {
    fn clock(self) -> residency_core::sync::ClockId {
        match self {
            Lane::Universal => crate::device::life::UNIVERSAL,
            Lane::Moves => crate::device::life::MOVES,
        }
    }

    fn queue(self, device: &Device) -> &Arc<crate::device::Queue> {
        match self {
            Lane::Universal => device.universal_queue(),
            Lane::Moves => device.moves_queue(),
        }
    }
}

/// A command pool on the universal queue's family with reusable command buffers and fences.
/// Dropping it waits for its submissions (bounded on a lost device) and destroys them.
///
/// A submission holds the context from before its recording closure until it is made, waiting
/// for the queue's lock on the way: on a thread that holds that lock ([`Queue::lock`](crate::Queue::lock),
/// a [`PendingFrame`](crate::PendingFrame), `submit_checked`'s closure), `submit`, `wait`,
/// `wait_for` and `is_complete` are refused with [`VulkanError::Reentrant`] instead of waiting
/// for a thread that waits for this one.
#[derive(Debug)]
pub struct CommandContext {
    device: Arc<Device>,
    name: String,
    lane: Lane,
    /// Unique in the process: the issuer of this context's [`Submission`]s.
    id: u64,
    state: Lock<ContextState>,
}

/// The next [`CommandContext`]'s id.
static NEXT_CONTEXT: AtomicU64 = AtomicU64::new(1);

const REENTRANT_SUBMIT: &str =
    "a command context's submit, wait or query from inside its own submit's recording closure";

/// What a context's submit, wait or query answers on a thread holding the lock of the context's
/// queue: another thread may hold the context's state while it waits for that lock to submit.
const REENTRANT_QUEUE: &str =
    "a command context's submit, wait or query on a thread that holds the lock of its \
     queue (`Queue::lock`, a `PendingFrame`, `submit_checked`'s closure): another thread may hold \
     the context while it waits for that lock to submit";

impl CommandContext {
    /// Creates an empty context; command buffers are created as needed.
    pub fn new(device: &Device, name: &str) -> Result<CommandContext> {
        CommandContext::on_lane(device, name, Lane::Universal)
    }

    /// A context of `lane` (its queue is of the universal queue's family).
    pub(crate) fn on_lane(device: &Device, name: &str, lane: Lane) -> Result<CommandContext> {
        let info = vk::CommandPoolCreateInfo::default()
            .queue_family_index(lane.queue(device).family())
            .flags(vk::CommandPoolCreateFlags::RESET_COMMAND_BUFFER);
        // SAFETY: valid device and queue family.
        let pool = unsafe { device.raw().create_command_pool(&info, None) }.during("vkCreateCommandPool")?;
        device.set_name(pool, name);
        Ok(CommandContext {
            device: device.arc(),
            name: name.to_owned(),
            lane,
            id: NEXT_CONTEXT.fetch_add(1, Ordering::Relaxed),
            state: Lock::new(ContextState { pool, slots: Vec::new(), next_serial: 1 }),
        })
    }

    /// The device it submits to.
    pub fn device(&self) -> &Arc<Device> {
        &self.device
    }

    fn free_slot(&self, state: &mut ContextState) -> Result<usize> {
        let device = &*self.device;
        for (i, slot) in state.slots.iter_mut().enumerate() {
            if slot.serial == 0 {
                return Ok(i);
            }
            let signalled = device.ledger().guard(FaultSite::Wait, || {
                // SAFETY: the fence belongs to this device.
                unsafe { device.raw().get_fence_status(slot.fence) }
            });
            if signalled.during("vkGetFenceStatus")? {
                slot.serial = 0;
                self.note_completed(slot.point);
                return Ok(i);
            }
        }
        let info = vk::CommandBufferAllocateInfo::default()
            .command_pool(state.pool)
            .level(vk::CommandBufferLevel::PRIMARY)
            .command_buffer_count(1);
        // SAFETY: the pool belongs to this device and is only used under the state lock.
        let command_buffer =
            unsafe { device.raw().allocate_command_buffers(&info) }.during("vkAllocateCommandBuffers")?[0];
        // SAFETY: valid device.
        let fence = unsafe { device.raw().create_fence(&vk::FenceCreateInfo::default(), None) }
            .during("vkCreateFence")?;
        let n = state.slots.len();
        device.set_name(command_buffer, &format!("{} cmd {n}", self.name));
        device.set_name(fence, &format!("{} fence {n}", self.name));
        state.slots.push(Slot { command_buffer, fence, serial: 0, point: 0 });
        Ok(n)
    }

    /// Records commands with `record` and submits them to the universal queue, waiting on and
    /// signalling the given semaphores.
    ///
    /// `record` gets the command buffer as a [`Recording`] of this context's device: the safe
    /// helpers record into it, and everything they record is held until the submission has its
    /// place on the device's universal timeline, so an object dropped inside `record` is destroyed
    /// only after this submission completes.
    pub fn submit(&self, waits: &[GpuUse], record: impl FnOnce(&mut Recording<'_>)) -> Result<Submission> {
        let waits = waits.iter().map(|w| self.device.wait_info(w)).collect::<Result<Vec<_>>>()?;
        self.submit_raw(&waits, &[], record)
    }

    /// [`CommandContext::submit`] that also waits on and signals semaphores of the renderer's
    /// own (raw handles, for integrating with a frame graph's synchronisation).
    ///
    /// # Safety
    /// - every semaphore in `waits` and `signals` is a live semaphore of this context's device,
    ///   not destroyed before the submission completes;
    /// - each binary semaphore waited on has a signal pending or done and no other wait pending;
    ///   each binary semaphore signalled is unsignalled with no signal pending;
    /// - each timeline value signalled is greater than the semaphore's current value and than
    ///   every signal of it pending or submitted before (by anyone, residency's `Timeline`s
    ///   included), and within `maxTimelineSemaphoreValueDifference`;
    /// - the stage masks are valid for the universal queue.
    pub unsafe fn submit_signalling(
        &self,
        waits: &[vk::SemaphoreSubmitInfo<'_>],
        signals: &[vk::SemaphoreSubmitInfo<'_>],
        record: impl FnOnce(&mut Recording<'_>),
    ) -> Result<Submission> {
        self.submit_raw(waits, signals, record)
    }

    /// The submission itself. `waits` and `signals` satisfy `submit_signalling`'s contract: the
    /// safe path passes only waits built from residency's own timelines of this device.
    fn submit_raw(
        &self,
        waits: &[vk::SemaphoreSubmitInfo<'_>],
        signals: &[vk::SemaphoreSubmitInfo<'_>],
        record: impl FnOnce(&mut Recording<'_>),
    ) -> Result<Submission> {
        let device = &*self.device;
        // The fault hook (and a lost device) answer before anything is recorded.
        if let Some(result) = device.ledger().fault_at(FaultSite::QueueSubmit) {
            return Err(VulkanError::from_vk("vkQueueSubmit2", result));
        }
        // `record` runs under this lock (the pool and its command buffers are externally
        // synchronised): a submit of this context from inside it is refused, not a deadlock.
        let mut state = self.lock_state()?;
        let index = self.free_slot(&mut state)?;
        let (command_buffer, fence) = (state.slots[index].command_buffer, state.slots[index].fence);
        let begin = vk::CommandBufferBeginInfo::default().flags(vk::CommandBufferUsageFlags::ONE_TIME_SUBMIT);
        // SAFETY: the slot is free (its fence signalled or never used), so the command buffer is not
        // pending; the pool is externally synchronised by the state lock.
        unsafe {
            device.raw().reset_fences(&[fence]).during("vkResetFences")?;
            device
                .raw()
                .reset_command_buffer(command_buffer, vk::CommandBufferResetFlags::empty())
                .during("vkResetCommandBuffer")?;
            device.raw().begin_command_buffer(command_buffer, &begin).during("vkBeginCommandBuffer")?;
        }
        let mut recording = Recording::new(device, command_buffer);
        record(&mut recording);
        // Held until the submission has taken its universal timeline value (or failed): an
        // object the closure dropped retires after this submission.
        let (kept, layouts, recorded_waits) = recording.into_parts();
        let mut waits = waits.to_vec();
        // After every sparse bind residency submitted before: nothing this submission does may
        // race a bind or unbind of memory it touches.
        // And after the renderer frames submitted on its other queues (layouts, memory).
        let frames = device.external_frame_waits();
        // On the moves queue: after every universal submission made before (the copy's opening
        // barrier orders it only after the work of its own queue).
        let universal = (self.lane == Lane::Moves).then(|| device.submitted_universal()).flatten();
        for until in
            recorded_waits.iter().chain(device.submitted_binds().as_ref()).chain(&frames).chain(&universal)
        {
            waits.push(device.wait_info(until)?);
        }
        let waits = &waits[..];
        // SAFETY: recording began above; the closure could not end it (a `Recording` exposes only
        // helpers that leave it recording, and your own commands must too).
        unsafe { device.raw().end_command_buffer(command_buffer) }.during("vkEndCommandBuffer")?;
        let buffers = [vk::CommandBufferSubmitInfo::default().command_buffer(command_buffer)];
        let point = {
            let queue = self.lane.queue(device).lock()?;
            // The device's universal timeline: values are taken under the queue lock, so they grow
            // in submission order.
            // Every image must be in the layouts the recorded commands need, in submission order
            // (checked under the queue lock, so no other submission comes between the check,
            // the submission and the new layouts); a mismatch submits nothing.
            layouts.check()?;
            let point = match self.lane {
                Lane::Universal => device.retirement().next_universal(),
                Lane::Moves => device.retirement().next_moves(),
            };
            let timeline = match self.lane {
                Lane::Universal => device.retirement().universal,
                Lane::Moves => device.retirement().moves,
            };
            let mut all_signals = Vec::with_capacity(signals.len() + 1);
            all_signals.extend_from_slice(signals);
            all_signals.push(
                vk::SemaphoreSubmitInfo::default()
                    .semaphore(timeline)
                    .value(point)
                    .stage_mask(vk::PipelineStageFlags2::ALL_COMMANDS),
            );
            let submit = vk::SubmitInfo2::default()
                .command_buffer_infos(&buffers)
                .wait_semaphore_infos(waits)
                .signal_semaphore_infos(&all_signals);
            // SAFETY: the queue is locked; the command buffer is executable, and every image it
            // names is in the layouts its commands need when they run (checked above); the fence is
            // unsignalled; the universal timeline value is greater than any signalled or pending
            // before (taken under the queue lock, and only residency signals that semaphore); the
            // other waits and signals meet `submit_signalling`'s contract (the safe `submit`
            // passes waits on residency's own timeline semaphores only: a timeline wait may come
            // before its signal).
            let submitted = unsafe { device.raw().queue_submit2(*queue, &[submit], fence) };
            if let Err(result) = submitted {
                device.ledger().note_result(result);
                return Err(VulkanError::from_vk("vkQueueSubmit2", result));
            }
            match self.lane {
                Lane::Universal => device.retirement().published(point),
                Lane::Moves => device.retirement().published_moves(point),
            }
            device.announce_signals(signals);
            layouts.apply();
            point
        };
        let serial = state.next_serial;
        state.next_serial += 1;
        state.slots[index].serial = serial;
        state.slots[index].point = point;
        drop(state);
        drop(kept);
        device.maintain();
        Ok(Submission { slot: index, serial, point, lane: self.lane, device: device.uid(), context: self.id })
    }

    /// A fence of this context signalled for the submission of `point` on its lane's timeline.
    fn note_completed(&self, point: u64) {
        match self.lane {
            Lane::Universal => self.device.retirement().note_completed(point),
            Lane::Moves => self.device.retirement().note_moves_completed(point),
        }
    }

    /// The context's state. Refused on a thread that holds the lock of the context's queue: a
    /// submission holds the state while it waits for that lock (after its recording closure), so
    /// waiting here for a state another thread holds would wait for that thread, which waits for
    /// this one.
    fn lock_state(&self) -> Result<crate::device::lock::LockGuard<'_, ContextState>> {
        if self.lane.queue(&self.device).locked_here() {
            return Err(VulkanError::Reentrant { what: REENTRANT_QUEUE });
        }
        self.state.lock().map_err(|_| VulkanError::Reentrant { what: REENTRANT_SUBMIT })
    }

    /// Refuses a submission this context did not make: its slot and serial mean nothing here,
    /// and trusting them would mark this device's work complete on another context's fence.
    fn check_issuer(&self, submission: &Submission) -> Result<()> {
        if submission.context == self.id && submission.device == self.device.uid() {
            return Ok(());
        }
        Err(VulkanError::ForeignToken {
            token: "submission",
            issuer: if submission.device == self.device.uid() {
                "another command context of this device".to_owned()
            } else {
                "a command context of another device".to_owned()
            },
            holder: format!("command context `{}` of device {}", self.name, self.device.index()),
        })
    }

    /// Whether `submission` has finished executing; never waits. A submission of another
    /// context is [`VulkanError::ForeignToken`].
    pub fn is_complete(&self, submission: &Submission) -> Result<bool> {
        self.check_issuer(submission)?;
        let device = &*self.device;
        let state = self.lock_state()?;
        let slot = &state.slots[submission.slot];
        if slot.serial != submission.serial {
            return Ok(true); // already observed complete and reused
        }
        let done = device
            .ledger()
            .guard(FaultSite::Wait, || {
                // SAFETY: the fence belongs to this device.
                unsafe { device.raw().get_fence_status(slot.fence) }
            })
            .during("vkGetFenceStatus")?;
        if done {
            self.note_completed(submission.point);
        }
        Ok(done)
    }

    /// Waits until `submission` has finished executing. A submission of another context is
    /// [`VulkanError::ForeignToken`] (nothing is waited for).
    pub fn wait(&self, submission: Submission) -> Result<()> {
        self.wait_for(&submission)
    }

    /// Waits until `submission` has finished executing, keeping the handle (a frame ring keeps it
    /// until the frame has been read back). A submission of another context is
    /// [`VulkanError::ForeignToken`].
    pub fn wait_for(&self, submission: &Submission) -> Result<()> {
        self.check_issuer(submission)?;
        let device = &*self.device;
        let fence = {
            let state = self.lock_state()?;
            let slot = &state.slots[submission.slot];
            if slot.serial != submission.serial {
                // Already observed complete (its fence) and reused: only the timeline may lag.
                drop(state);
                return device.wait_until(&submission.gpu_use());
            }
            slot.fence
        };
        device
            .ledger()
            .guard(FaultSite::Wait, || {
                // SAFETY: the fence belongs to this device.
                unsafe { device.raw().wait_for_fences(&[fence], true, u64::MAX) }
            })
            .during("vkWaitForFences")?;
        self.note_completed(submission.point);
        Ok(())
    }

    /// Waits for `submission` as teardown does, past the fault hook: unbounded unless the driver
    /// reported the device lost (then at most 5 s, as teardown).
    /// Returns whether it is known complete; for a caller that must not go on (free or hand back
    /// what the work reads) before it is, after [`CommandContext::wait_for`] failed.
    pub(crate) fn settle(&self, submission: &Submission) -> bool {
        if self.check_issuer(submission).is_err() {
            return false;
        }
        let device = &*self.device;
        let fence = match self.lock_state() {
            Ok(state) => {
                let slot = &state.slots[submission.slot];
                if slot.serial != submission.serial {
                    return true; // already observed complete and reused
                }
                slot.fence
            }
            // Held by this thread, or this thread holds the queue a holder may wait for:
            // nothing can be waited for here.
            Err(_) => return false,
        };
        // SAFETY: the fence belongs to this device and was submitted with `submission`.
        let result = unsafe { device.raw().wait_for_fences(&[fence], true, device.teardown_timeout()) };
        match result {
            Ok(()) => {
                self.note_completed(submission.point);
                true
            }
            Err(result) => {
                device.ledger().note_result(result);
                tracing::warn!(device = %device.index(), ?result, "waiting for a submission failed");
                false
            }
        }
    }

    /// Waits for every submission, then destroys the pool, its command buffers and fences (as
    /// dropping it does).
    pub fn destroy(self) {
        drop(self);
    }
}

impl Drop for CommandContext {
    fn drop(&mut self) {
        let device = &*self.device;
        let state = self.state.get_mut();
        let fences: Vec<_> = state.slots.iter().filter(|s| s.serial != 0).map(|s| s.fence).collect();
        // Bounded on a lost device: teardown never waits forever.
        device.settle_fences(&fences);
        // SAFETY: all objects belong to this device; the wait above means none is in use (or the
        // device is lost).
        unsafe {
            for slot in &state.slots {
                device.raw().destroy_fence(slot.fence, None);
            }
            device.raw().destroy_command_pool(state.pool, None);
        }
    }
}

impl Device {
    /// Copies `len` bytes of `buffer` from `offset` into host memory through a temporary readback
    /// buffer, waiting for the GPU. For buffers whose memory the CPU cannot map, and for checks.
    pub fn read_back(&self, buffer: &Buffer, offset: u64, len: u64) -> Result<Vec<u8>, ReadBackError> {
        let refused = |reason: String| ReadBackError::Refused { name: buffer.name().to_owned(), reason };
        if !buffer.device().is(self) {
            return Err(refused(format!(
                "it lives on device {}, not {}",
                buffer.device_index(),
                self.index()
            )));
        }
        if !buffer.usage().contains(residency_core::usage::BufferUsage::COPY_SRC) {
            return Err(refused("it lacks the copy_src usage".into()));
        }
        let end = offset.saturating_add(len);
        if end > buffer.size() || len == 0 {
            return Err(ReadBackError::OutOfBounds {
                name: buffer.name().to_owned(),
                offset,
                end,
                size: buffer.size(),
            });
        }
        let region = vk::BufferCopy { src_offset: buffer.offset() + offset, dst_offset: 0, size: len };
        if !buffer.device().is(self) {
            return Err(ReadBackError::Vulkan(VulkanError::WrongDevice {
                name: buffer.name().to_owned(),
                owner: buffer.device_index(),
                device: self.index(),
            }));
        }
        if !buffer.usage().contains(BufferUsage::COPY_SRC) {
            return Err(ReadBackError::Invalid {
                name: buffer.name().to_owned(),
                reason: "it lacks COPY_SRC usage",
            });
        }
        self.copy_to_host(buffer.name(), len, |rec, staging| {
            // Through the recording: a buffer a move under pressure is still filling on the moves
            // queue makes the read-back wait for that copy (no barrier of this queue orders it).
            rec.keep(buffer.life());
            // SAFETY: `rec` is recording on this device; both buffers are live buffers of it
            // (checked above; `buffer` is borrowed until the wait returns) and the region lies in
            // both.
            unsafe { self.raw().cmd_copy_buffer(rec.raw(), buffer.raw(), staging, &[region]) };
        })
    }

    /// Records `copy` into a temporary readback buffer of `len` bytes, between a barrier that waits
    /// for every earlier write and one that makes the copy visible to the host; waits and returns
    /// the bytes. The readback paths of buffers and sparse images share it.
    pub(crate) fn copy_to_host(
        &self,
        name: &str,
        len: u64,
        copy: impl FnOnce(&mut Recording<'_>, vk::Buffer),
    ) -> Result<Vec<u8>, ReadBackError> {
        let desc = BufferDesc::new(format!("{name} readback"), len, BufferUsage::COPY_DST)
            .with_intent(MemoryIntent::Readback);
        let staging = self.create_buffer(&desc)?;
        let before = [vk::MemoryBarrier2::default()
            .src_stage_mask(vk::PipelineStageFlags2::ALL_COMMANDS)
            .src_access_mask(vk::AccessFlags2::MEMORY_WRITE)
            .dst_stage_mask(vk::PipelineStageFlags2::COPY)
            .dst_access_mask(vk::AccessFlags2::TRANSFER_READ)];
        let after = [vk::MemoryBarrier2::default()
            .src_stage_mask(vk::PipelineStageFlags2::COPY)
            .src_access_mask(vk::AccessFlags2::TRANSFER_WRITE)
            .dst_stage_mask(vk::PipelineStageFlags2::HOST)
            .dst_access_mask(vk::AccessFlags2::HOST_READ)];
        let staging = staging;
        let copied = self.submit_once("read back", |rec| {
            let cmd = rec.raw();
            // SAFETY: `cmd` is recording on this device outside a render pass.
            unsafe {
                self.raw().cmd_pipeline_barrier2(cmd, &vk::DependencyInfo::default().memory_barriers(&before))
            };
            copy(rec, staging.raw());
            // SAFETY: as above.
            unsafe {
                self.raw().cmd_pipeline_barrier2(cmd, &vk::DependencyInfo::default().memory_barriers(&after))
            };
        });
        let mut out = vec![0; len as usize];
        let read = copied
            .map_err(ReadBackError::from)
            .and_then(|()| staging.read(0, &mut out).map_err(ReadBackError::from));
        read.map(|()| out)
    }

    /// Submits compute work that reads what the host and earlier submissions wrote and whose results
    /// the host reads afterwards: a barrier from every earlier write to compute reads and writes,
    /// `record`, a barrier from compute writes to host reads; then waits.
    pub fn submit_compute(&self, name: &str, record: impl FnOnce(&mut Recording<'_>)) -> Result<()> {
        let before = [vk::MemoryBarrier2::default()
            .src_stage_mask(vk::PipelineStageFlags2::ALL_COMMANDS | vk::PipelineStageFlags2::HOST)
            .src_access_mask(vk::AccessFlags2::MEMORY_WRITE | vk::AccessFlags2::HOST_WRITE)
            .dst_stage_mask(vk::PipelineStageFlags2::COMPUTE_SHADER)
            .dst_access_mask(vk::AccessFlags2::SHADER_READ | vk::AccessFlags2::SHADER_WRITE)];
        let after = [vk::MemoryBarrier2::default()
            .src_stage_mask(vk::PipelineStageFlags2::COMPUTE_SHADER)
            .src_access_mask(vk::AccessFlags2::SHADER_WRITE)
            .dst_stage_mask(vk::PipelineStageFlags2::HOST)
            .dst_access_mask(vk::AccessFlags2::HOST_READ)];
        self.submit_once(name, |rec| {
            // SAFETY: `rec` is recording on this device outside a render pass; the barrier lives for
            // the call.
            unsafe {
                self.raw()
                    .cmd_pipeline_barrier2(rec.raw(), &vk::DependencyInfo::default().memory_barriers(&before))
            };
            record(rec);
            // SAFETY: as above (`record`'s own commands leave it recording outside a render pass).
            unsafe {
                self.raw()
                    .cmd_pipeline_barrier2(rec.raw(), &vk::DependencyInfo::default().memory_barriers(&after))
            };
        })
    }

    /// Records commands with `record`, submits them to the universal queue and waits for them.
    /// Convenient for set-up, tests and examples; hot paths keep a [`CommandContext`].
    pub fn submit_once(&self, name: &str, record: impl FnOnce(&mut Recording<'_>)) -> Result<()> {
        let context = CommandContext::new(self, name)?;
        context.submit(&[], record).and_then(|s| context.wait(s))
    }
}
