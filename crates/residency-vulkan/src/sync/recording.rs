//! Recording commands without `unsafe`: a [`Recording`] is a command buffer of a known device in
//! the recording state. Residency's submission entry points
//! ([`CommandContext::submit`](crate::CommandContext::submit), [`Device::submit_once`],
//! [`Device::submit_compute`]) hand one to their closure; the safe recording helpers take it
//! (a global memory barrier, a whole-image read-back copy, timestamps here; dispatches, render
//! passes, tracked barriers and transient pass starts in their modules) and check that what they
//! record belongs to its device.
//!
//! **What a recording keeps alive.** Every residency object a helper records (programs, their
//! descriptor sets and the resources bound there, buffers, images, views, query pools) is held by
//! the recording until its command buffer is submitted: an object dropped inside the closure is
//! destroyed only after the submission completes, like any object dropped after a residency
//! submission (see `device/life.rs`). Commands you record yourself through [`Recording::raw`] are your
//! own `unsafe` code: what they use must outlive the closure (or be declared with `used_until`).
//!
//! **Image layouts.** Every helper that records a command on an [`Image`] notes what it needs and
//! what it leaves: a *requirement* (these subresources must be in layout L when the command buffer
//! starts executing, unless an earlier command of this recording set them) and an *effect* (after
//! this recording they are in L'). [`CommandContext::submit`](crate::CommandContext::submit)
//! checks the requirements against each image's layouts in submission order under the universal
//! queue lock, submits nothing on a mismatch ([`VulkanError::ImageLayout`]), and applies the
//! effects once the submission is made. A conflict inside one recording (a use in a layout an
//! earlier command of it did not leave) fails its submission the same way.

use crate::device::life::{ForeignUse, Garbage, GpuUse, Life};
use crate::device::Device;
use crate::error::VulkanError;
use crate::error::{ErrorClass, ResidencyError};
use crate::format_map::aspect;
use crate::resources::buffer::Buffer;
use crate::resources::image::{Image, Layouts};
use ash::vk;
use residency_core::usage::{BufferUsage, ImageUsage};
use std::collections::{HashMap, HashSet};
use std::ops::Range;
use std::sync::Arc;

/// What a recording needs of one image's layouts and leaves behind, per subresource
/// (`mip * layers + layer`).
#[derive(Debug)]
struct Touched {
    state: Arc<Layouts>,
    /// The layout the subresource must be in when the command buffer starts executing.
    required: Vec<Option<vk::ImageLayout>>,
    /// The layout the recorded commands leave it in so far.
    now: Vec<Option<vk::ImageLayout>>,
}

/// A recording's layout requirements and effects, checked and applied by its submitter under the
/// universal queue lock.
#[derive(Debug, Default)]
pub(crate) struct LayoutPlan {
    /// The first use that contradicted an earlier command of the same recording.
    conflict: Option<VulkanError>,
    touched: Vec<Touched>,
}

impl LayoutPlan {
    /// Whether every requirement holds against the images' layouts now (in submission order).
    /// Call with the universal queue locked.
    pub(crate) fn check(&self) -> Result<(), VulkanError> {
        if let Some(conflict) = &self.conflict {
            return Err(clone_conflict(conflict));
        }
        for t in &self.touched {
            let current = t.state.lock();
            for (i, required) in t.required.iter().enumerate() {
                if let Some(expected) = *required {
                    if current[i] != expected {
                        return Err(layout_error(&t.state, i, expected, current[i]));
                    }
                }
            }
        }
        Ok(())
    }

    /// Advances the images' layouts by the recording's effects. Call under the same queue lock
    /// as [`LayoutPlan::check`], once the submission was made.
    pub(crate) fn apply(&self) {
        for t in &self.touched {
            let mut current = t.state.lock();
            for (i, now) in t.now.iter().enumerate() {
                if let Some(layout) = *now {
                    current[i] = layout;
                }
            }
        }
    }
}

fn layout_error(
    state: &Layouts,
    index: usize,
    expected: vk::ImageLayout,
    actual: vk::ImageLayout,
) -> VulkanError {
    let index = index as u32;
    VulkanError::ImageLayout {
        image: state.name.clone(),
        mip: index / state.layers,
        layer: index % state.layers,
        expected,
        actual,
    }
}

/// A copy of the recorded conflict for each check: a layout conflict or a refusal
/// ([`Recording::refuse_submission`]: the multi-device submitter refuses with `Unsupported`);
/// any other error is carried as its message.
fn clone_conflict(e: &VulkanError) -> VulkanError {
    match e {
        VulkanError::ImageLayout { image, mip, layer, expected, actual } => VulkanError::ImageLayout {
            image: image.clone(),
            mip: *mip,
            layer: *layer,
            expected: *expected,
            actual: *actual,
        },
        VulkanError::Unsupported { device, reason } => {
            VulkanError::Unsupported { device: device.clone(), reason: reason.clone() }
        }
        other => VulkanError::Unsupported { device: String::new(), reason: other.to_string() },
    }
}

/// A command buffer of one device in the recording state, outside any render pass instance.
///
/// Residency makes one for the closure of each of its submissions; the closure gets
/// `&mut Recording<'_>` and cannot keep it, swap it with another recording or use it after the
/// closure returns. A renderer recording into its own command buffer makes one with the `unsafe`
/// [`Recording::from_raw`].
///
/// [`Recording::raw`] and [`Recording::device`] are for your own `unsafe` ash calls. Those calls
/// must leave the command buffer as they found it for the helpers: recording, outside a render
/// pass instance, with no query or conditional rendering left active; and they must leave every
/// subresource of a residency [`Image`] in the layout the helpers' record says (see the module
/// documentation: residency checks its submissions against that record, not against your own
/// barriers).
///
/// A recording cannot outlive its closure, nor trade places with another one (which would leave
/// a helper recording into a command buffer already submitted):
///
/// ```compile_fail
/// # use residency_vulkan::CommandContext;
/// fn swap(a: &CommandContext, b: &CommandContext) {
///     let _ = a.submit(&[], |outer| {
///         let _ = b.submit(&[], |inner| std::mem::swap(outer, inner));
///     });
/// }
/// ```
#[derive(Debug)]
pub struct Recording<'a> {
    device: &'a Device,
    raw: vk::CommandBuffer,
    /// What the recorded commands use, held until the command buffer was submitted.
    kept: Vec<Arc<Life>>,
    /// `kept` by address, so each object is held once.
    seen: HashSet<usize>,
    /// Commands the helpers recorded.
    commands: u64,
    /// Layout requirements and effects per image, by the address of its layout record.
    layouts: HashMap<usize, usize>,
    plan: LayoutPlan,
    /// GPU points the submission must wait for (a streamer's sparse binds, say).
    waits: Vec<GpuUse>,
}

impl<'a> Recording<'a> {
    /// A command buffer residency began on `device`.
    pub(crate) fn new(device: &'a Device, raw: vk::CommandBuffer) -> Recording<'a> {
        Recording {
            device,
            raw,
            kept: Vec::new(),
            seen: HashSet::new(),
            commands: 0,
            layouts: HashMap::new(),
            plan: LayoutPlan::default(),
            waits: Vec::new(),
        }
    }

    /// A recording over a command buffer the renderer allocated and began itself, for the safe
    /// helpers to record into. Submit it with [`Recording::submit`] (on residency's universal
    /// queue, signalling the renderer's [`Timeline`](crate::Timeline)) or
    /// [`Recording::finish`] (on a queue of the renderer's own): every object the helpers
    /// recorded is then declared used until the frame's point, in that one call. Dropped
    /// without either, it declares nothing.
    ///
    /// # Safety
    /// - `cmd` is a primary command buffer allocated from a command pool of `device` on the
    ///   universal queue's family, in the recording state outside any render pass instance, and
    ///   nothing else records into it while the recording lives; the commands you record into it
    ///   yourself ([`Recording::raw`]) leave it so, leave every residency [`Image`] in the layouts
    ///   the helpers noted, and use only objects that outlive the frame's GPU work;
    /// - `cmd` is submitted only through [`Recording::submit`], [`Recording::submit_checked`] or a
    ///   [`PendingFrame`](crate::PendingFrame) (never on its own), and is reset or freed only
    ///   once that submission completed (or, never submitted, at any time).
    pub unsafe fn from_raw(device: &'a Device, cmd: vk::CommandBuffer) -> Recording<'a> {
        Recording::new(device, cmd)
    }

    /// Submits a recording of [`Recording::from_raw`] yourself, with residency's layout check
    /// (prefer [`Recording::submit`], which also signals and announces your timeline and
    /// declares the recording's uses; with this one, declare them with
    /// [`Recording::used_until`] at a point your submission signals, and announce it):
    /// under the universal queue lock, checks that every image the helpers recorded a command on
    /// is in the layouts those commands need (in residency's submission order); if so calls
    /// `submit` with the locked universal queue, and once it returns `Ok` advances the images'
    /// layouts by what the commands leave. A mismatch is [`VulkanError::ImageLayout`] and calls
    /// nothing; an error of `submit` is returned and changes no layout.
    ///
    /// `submit` gets the queue and the semaphore waits the submission must include (the
    /// recording's [`Recording::waits`] and the sparse binds residency submitted before), ends
    /// the command buffer and submits it (your own `unsafe` calls); it must not
    /// submit through residency (the queue is locked: that would wait forever). Only a recording
    /// you own can be passed here: residency's submissions lend theirs as `&mut` and check them
    /// themselves.
    pub fn submit_checked(
        self,
        submit: impl FnOnce(vk::Queue, &[vk::SemaphoreSubmitInfo<'static>]) -> Result<(), vk::Result>,
    ) -> Result<(), VulkanError> {
        let mut waits = Vec::with_capacity(self.waits.len() + 1);
        for until in self.waits.iter().chain(self.device.submitted_binds().as_ref()) {
            waits.push(self.device.wait_info(until)?);
        }
        let queue = self.device.universal_queue().lock()?;
        self.plan.check()?;
        submit(*queue, &waits).map_err(|r| VulkanError::from_vk("vkQueueSubmit2", r))?;
        self.plan.apply();
        Ok(())
    }

    /// The `VkCommandBuffer`, for your own `unsafe` ash calls (see the type's documentation for
    /// the state they must leave it in).
    pub fn raw(&self) -> vk::CommandBuffer {
        self.raw
    }

    /// The device the command buffer belongs to.
    pub fn device(&self) -> &'a Device {
        self.device
    }

    /// How many commands residency's helpers have recorded into it (your own are not counted).
    pub fn helper_commands(&self) -> u64 {
        self.commands
    }

    /// Declares that every object the helpers recorded so far is used until `until` (a recording
    /// of [`Recording::from_raw`] whose command buffer you submit yourself; residency's own
    /// submissions need nothing). A use of another device is refused.
    pub fn used_until(&self, until: GpuUse) -> Result<(), ForeignUse> {
        if until.device != self.device.uid() {
            return Err(ForeignUse);
        }
        for life in &self.kept {
            life.used_until(until)?;
        }
        Ok(())
    }

    /// Refuses an object of another device: a helper of `name`, which lives on `owner`, records
    /// nothing into this recording unless `owner` is the recording's device.
    pub(crate) fn accepts(&self, name: &str, owner: &Device) -> Result<(), VulkanError> {
        if owner.is(self.device) {
            return Ok(());
        }
        Err(VulkanError::WrongDevice {
            name: name.to_owned(),
            owner: owner.index(),
            device: self.device.index(),
        })
    }

    /// Holds `life` until the command buffer was submitted.
    pub(crate) fn keep(&mut self, life: &Arc<Life>) {
        if self.seen.insert(Arc::as_ptr(life) as usize) {
            // A recorded use makes it hot (memory pressure: `Buffer::last_used_frame`).
            life.note_used_now();
            // A move under pressure fills its new memory with a copy that later work is not
            // ordered after as a whole: a submission that uses it waits for that copy.
            if let Some(fill) = life.pending_fill() {
                if !self.waits.contains(&fill) {
                    self.waits.push(fill);
                }
            }
            self.kept.push(Arc::clone(life));
        }
    }

    /// Counts a recorded command.
    pub(crate) fn recorded(&mut self) {
        self.commands += 1;
    }

    /// What the recording held (dropped by its submitter once the submission has its place on
    /// the device's universal timeline), its layout plan (checked and applied at submission) and
    /// the points its submission waits for.
    pub(crate) fn into_parts(self) -> (Vec<Arc<Life>>, LayoutPlan, Vec<GpuUse>) {
        (self.kept, self.plan, self.waits)
    }

    /// Makes the submission of this recording wait for `until` (before all its commands): a
    /// residency submission, a sparse bind ([`TileHeaps::bind_after`](crate::sparse::TileHeaps::bind_after))
    /// or a point of a renderer [`Timeline`](crate::Timeline) of the recording's device.
    /// [`CommandContext::submit`](crate::CommandContext::submit) adds these waits itself; a
    /// recording of [`Recording::from_raw`] that you submit yourself must wait for every point of
    /// [`Recording::waits`]. A frame count or another device's work is refused.
    pub fn wait_for(&mut self, until: GpuUse) -> Result<(), VulkanError> {
        self.device.wait_info(&until).map(drop)?;
        if !self.waits.contains(&until) {
            self.waits.push(until);
        }
        Ok(())
    }

    /// The points the submission of this recording must wait for ([`Recording::wait_for`]).
    pub fn waits(&self) -> &[GpuUse] {
        &self.waits
    }

    /// Whether a command that needs subresources `mips` × `layers` in `needed` may follow what
    /// this recording's earlier commands left them in (`UNDEFINED` fits anything). A helper
    /// checks before it records, so a contradiction is refused at once and records nothing (the
    /// submission checks what earlier submissions left).
    pub(crate) fn check_layout(
        &self,
        state: &Arc<Layouts>,
        mips: Range<u32>,
        layers: Range<u32>,
        needed: vk::ImageLayout,
    ) -> Result<(), VulkanError> {
        if needed == vk::ImageLayout::UNDEFINED {
            return Ok(());
        }
        let Some(&index) = self.layouts.get(&(Arc::as_ptr(state) as usize)) else { return Ok(()) };
        let touched = &self.plan.touched[index];
        for mip in mips.start..mips.end.min(state.mips) {
            for layer in layers.start..layers.end.min(state.layers) {
                let i = (mip * state.layers + layer) as usize;
                if let Some(now) = touched.now[i] {
                    if now != needed {
                        return Err(layout_error(state, i, needed, now));
                    }
                }
            }
        }
        Ok(())
    }

    /// The layout subresource (`mip`, `layer`) of the image of `state` is in once this
    /// recording's commands so far have run: what an earlier command of it left, else the
    /// image's record in submission order (which the submission checks again under the queue
    /// lock when a command notes it as a requirement). A helper that transitions an image to
    /// the layout its command needs starts from this.
    pub(crate) fn layout_now(&self, state: &Arc<Layouts>, mip: u32, layer: u32) -> vk::ImageLayout {
        let i = (mip * state.layers + layer) as usize;
        if let Some(&index) = self.layouts.get(&(Arc::as_ptr(state) as usize)) {
            if let Some(now) = self.plan.touched[index].now.get(i).copied().flatten() {
                return now;
            }
        }
        state.lock().get(i).copied().unwrap_or(vk::ImageLayout::UNDEFINED)
    }

    /// Makes the submission of this recording fail with `error` (a command refused while the
    /// caller could not be told at once); the first one counts.
    pub(crate) fn refuse_submission(&mut self, error: VulkanError) {
        self.plan.conflict.get_or_insert(error);
    }

    fn touched(&mut self, state: &Arc<Layouts>) -> &mut Touched {
        let key = Arc::as_ptr(state) as usize;
        let touched = &mut self.plan.touched;
        let index = *self.layouts.entry(key).or_insert_with(|| {
            let n = (state.mips * state.layers) as usize;
            touched.push(Touched { state: Arc::clone(state), required: vec![None; n], now: vec![None; n] });
            touched.len() - 1
        });
        &mut self.plan.touched[index]
    }

    /// Notes a command that needs subresources `mips` × `layers` (clamped to the image) in
    /// `layout` and leaves them there.
    pub(crate) fn use_layout(
        &mut self,
        state: &Arc<Layouts>,
        mips: Range<u32>,
        layers: Range<u32>,
        layout: vk::ImageLayout,
    ) {
        self.transition(state, mips, layers, layout, layout);
    }

    /// Notes a command that takes subresources `mips` × `layers` (clamped to the image) from
    /// `old` to `new`; `old == UNDEFINED` (contents discarded) needs nothing.
    pub(crate) fn transition(
        &mut self,
        state: &Arc<Layouts>,
        mips: Range<u32>,
        layers: Range<u32>,
        old: vk::ImageLayout,
        new: vk::ImageLayout,
    ) {
        let (mip_count, layer_count) = (state.mips, state.layers);
        let mut conflict = None;
        let touched = self.touched(state);
        for mip in mips.start..mips.end.min(mip_count) {
            for layer in layers.start..layers.end.min(layer_count) {
                let i = (mip * layer_count + layer) as usize;
                if old != vk::ImageLayout::UNDEFINED {
                    match touched.now[i] {
                        Some(now) if now != old => {
                            conflict.get_or_insert_with(|| layout_error(&touched.state, i, old, now));
                        }
                        Some(_) => {}
                        None => touched.required[i] = Some(old),
                    }
                }
                touched.now[i] = Some(new);
            }
        }
        if self.plan.conflict.is_none() {
            self.plan.conflict = conflict;
        }
    }
}

/// Every shader stage of the universal queue's pipelines (what "readers" of uploaded data may be).
pub(crate) const SHADER_STAGES: vk::PipelineStageFlags2 = vk::PipelineStageFlags2::from_raw(
    vk::PipelineStageFlags2::VERTEX_SHADER.as_raw()
        | vk::PipelineStageFlags2::TESSELLATION_CONTROL_SHADER.as_raw()
        | vk::PipelineStageFlags2::TESSELLATION_EVALUATION_SHADER.as_raw()
        | vk::PipelineStageFlags2::GEOMETRY_SHADER.as_raw()
        | vk::PipelineStageFlags2::FRAGMENT_SHADER.as_raw()
        | vk::PipelineStageFlags2::COMPUTE_SHADER.as_raw(),
);

/// One global memory dependency: `src` stages and accesses before, `dst` stages and accesses after.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MemoryDependency {
    /// Stages whose work comes first.
    pub src_stages: vk::PipelineStageFlags2,
    /// Their writes made available.
    pub src_access: vk::AccessFlags2,
    /// Stages that wait.
    pub dst_stages: vk::PipelineStageFlags2,
    /// Their accesses that see the writes.
    pub dst_access: vk::AccessFlags2,
}

/// A memory dependency that Vulkan does not allow on residency's universal queue; nothing was
/// recorded.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum BarrierError {
    /// A stage that is not a core stage of a graphics + compute queue, or one whose feature
    /// (geometry, tessellation, extensions) residency does not enable.
    #[error("{stages:?} includes stages residency does not enable on its devices")]
    UnsupportedStages {
        /// The offending stages.
        stages: vk::PipelineStageFlags2,
    },
    /// An access that none of the stages it is paired with performs (the `VkMemoryBarrier2`
    /// access/stage rules), or an access residency does not know.
    #[error("access {access:?} is not performed by any of the stages {stages:?}")]
    AccessWithoutStage {
        /// The access.
        access: vk::AccessFlags2,
        /// The stages it was paired with.
        stages: vk::PipelineStageFlags2,
    },
    /// A queue family ownership transfer names a family the device does not have.
    #[error("queue family {family} does not exist on the device")]
    QueueFamily {
        /// The family.
        family: u32,
    },
}

impl ResidencyError for BarrierError {
    fn class(&self) -> ErrorClass {
        match self {
            BarrierError::UnsupportedStages { .. }
            | BarrierError::AccessWithoutStage { .. }
            | BarrierError::QueueFamily { .. } => ErrorClass::Refused,
        }
    }
}

type Stage = vk::PipelineStageFlags2;
type Access = vk::AccessFlags2;

/// Core stages of a queue with graphics, compute and transfer, without optional features.
const CORE_STAGES: Stage = Stage::from_raw(
    Stage::TOP_OF_PIPE.as_raw()
        | Stage::DRAW_INDIRECT.as_raw()
        | Stage::VERTEX_INPUT.as_raw()
        | Stage::VERTEX_SHADER.as_raw()
        | Stage::FRAGMENT_SHADER.as_raw()
        | Stage::EARLY_FRAGMENT_TESTS.as_raw()
        | Stage::LATE_FRAGMENT_TESTS.as_raw()
        | Stage::COLOR_ATTACHMENT_OUTPUT.as_raw()
        | Stage::COMPUTE_SHADER.as_raw()
        | Stage::ALL_TRANSFER.as_raw()
        | Stage::BOTTOM_OF_PIPE.as_raw()
        | Stage::HOST.as_raw()
        | Stage::ALL_GRAPHICS.as_raw()
        | Stage::ALL_COMMANDS.as_raw()
        | Stage::COPY.as_raw()
        | Stage::RESOLVE.as_raw()
        | Stage::BLIT.as_raw()
        | Stage::CLEAR.as_raw()
        | Stage::INDEX_INPUT.as_raw()
        | Stage::VERTEX_ATTRIBUTE_INPUT.as_raw()
        | Stage::PRE_RASTERIZATION_SHADERS.as_raw(),
);

/// Shader stages residency's devices have (no geometry or tessellation).
const SHADERS: Stage = Stage::from_raw(
    Stage::VERTEX_SHADER.as_raw()
        | Stage::FRAGMENT_SHADER.as_raw()
        | Stage::COMPUTE_SHADER.as_raw()
        | Stage::PRE_RASTERIZATION_SHADERS.as_raw()
        | Stage::ALL_GRAPHICS.as_raw(),
);

/// Each access and the stages that may perform it (`ALL_COMMANDS` performs every access); `extra`
/// are the extension stages the device enabled (the acceleration-structure build stage).
fn access_stages(extra: Stage) -> [(Access, Stage); 22] {
    let graphics = |s: Stage| s | Stage::ALL_GRAPHICS;
    let transfer = Stage::COPY | Stage::BLIT | Stage::RESOLVE | Stage::ALL_TRANSFER;
    let build = extra & Stage::ACCELERATION_STRUCTURE_BUILD_KHR;
    [
        (Access::INDIRECT_COMMAND_READ, graphics(Stage::DRAW_INDIRECT) | build),
        (Access::INDEX_READ, graphics(Stage::VERTEX_INPUT | Stage::INDEX_INPUT)),
        (Access::VERTEX_ATTRIBUTE_READ, graphics(Stage::VERTEX_INPUT | Stage::VERTEX_ATTRIBUTE_INPUT)),
        (Access::UNIFORM_READ, SHADERS),
        (Access::INPUT_ATTACHMENT_READ, graphics(Stage::FRAGMENT_SHADER)),
        // An acceleration-structure build reads its geometry, instances and transforms as shader reads.
        (Access::SHADER_READ, SHADERS | build),
        (Access::SHADER_WRITE, SHADERS),
        (Access::SHADER_SAMPLED_READ, SHADERS),
        (Access::SHADER_STORAGE_READ, SHADERS),
        (Access::SHADER_STORAGE_WRITE, SHADERS),
        (Access::COLOR_ATTACHMENT_READ, graphics(Stage::COLOR_ATTACHMENT_OUTPUT)),
        (Access::COLOR_ATTACHMENT_WRITE, graphics(Stage::COLOR_ATTACHMENT_OUTPUT)),
        (
            Access::DEPTH_STENCIL_ATTACHMENT_READ,
            graphics(Stage::EARLY_FRAGMENT_TESTS | Stage::LATE_FRAGMENT_TESTS),
        ),
        (
            Access::DEPTH_STENCIL_ATTACHMENT_WRITE,
            graphics(Stage::EARLY_FRAGMENT_TESTS | Stage::LATE_FRAGMENT_TESTS),
        ),
        (Access::TRANSFER_READ, transfer | build),
        (Access::TRANSFER_WRITE, transfer | Stage::CLEAR | build),
        (Access::HOST_READ, Stage::HOST),
        (Access::HOST_WRITE, Stage::HOST),
        (Access::MEMORY_READ, CORE_STAGES | extra),
        (Access::MEMORY_WRITE, CORE_STAGES | extra),
        // Without the extension these name no stage of the device: refused.
        (
            Access::ACCELERATION_STRUCTURE_READ_KHR,
            if build.is_empty() { Stage::empty() } else { SHADERS | build },
        ),
        (Access::ACCELERATION_STRUCTURE_WRITE_KHR, build),
    ]
}

/// The extension stages `features` enabled beyond the core ones.
pub(crate) fn extension_stages(features: &crate::device::EnabledFeatures) -> Stage {
    if features.acceleration_structure {
        Stage::ACCELERATION_STRUCTURE_BUILD_KHR
    } else {
        Stage::empty()
    }
}

/// Checks one side of a dependency on a device with `features`: core stages and the extension
/// stages it enabled only, and every access performed by one of them.
pub(crate) fn check_scope(
    features: &crate::device::EnabledFeatures,
    stages: Stage,
    access: Access,
) -> Result<(), BarrierError> {
    let extra = extension_stages(features);
    let unsupported = stages & !(CORE_STAGES | extra);
    if !unsupported.is_empty() {
        return Err(BarrierError::UnsupportedStages { stages: unsupported });
    }
    let table = access_stages(extra);
    if stages.contains(Stage::ALL_COMMANDS) {
        let known = table.iter().filter(|(_, s)| !s.is_empty()).fold(Access::NONE, |all, (a, _)| all | *a);
        let unknown = access & !known;
        return match unknown.is_empty() {
            true => Ok(()),
            false => Err(BarrierError::AccessWithoutStage { access: unknown, stages }),
        };
    }
    let mut covered = Access::NONE;
    for (bit, allowed) in table {
        if access.contains(bit) {
            if !stages.intersects(allowed) {
                return Err(BarrierError::AccessWithoutStage { access: bit, stages });
            }
            covered |= bit;
        }
    }
    let unknown = access & !covered;
    if !unknown.is_empty() {
        return Err(BarrierError::AccessWithoutStage { access: unknown, stages });
    }
    Ok(())
}

/// A copy was refused; nothing was recorded.
#[derive(Debug, thiserror::Error)]
pub enum CopyError {
    /// The buffer is too small for the image's mip 0.
    #[error(transparent)]
    TooSmall(#[from] CopyTooSmall),
    /// The image or the buffer lives on another device than the recording.
    #[error(transparent)]
    WrongDevice(#[from] VulkanError),
    /// An earlier command of the recording left the image in another layout than the copy's
    /// ([`VulkanError::ImageLayout`]).
    #[error("{0}")]
    ImageLayout(VulkanError),
    /// The copy breaks a rule of `vkCmdCopyImageToBuffer` or `vkCmdCopyBuffer` that the helper
    /// checks.
    #[error("copy of `{from}` into `{to}`: {reason}")]
    Invalid {
        /// The source image or buffer.
        from: String,
        /// The destination buffer.
        to: String,
        /// The rule.
        reason: &'static str,
    },
}

impl ResidencyError for CopyError {
    fn class(&self) -> ErrorClass {
        match self {
            CopyError::TooSmall(e) => e.class(),
            CopyError::WrongDevice(e) | CopyError::ImageLayout(e) => e.class(),
            CopyError::Invalid { .. } => ErrorClass::Refused,
        }
    }
}

/// A copy into a buffer too small for the image's mip 0.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("{buffer} holds {size} bytes; mip 0 of {image} needs {needed}")]
pub struct CopyTooSmall {
    /// The image's name.
    pub image: String,
    /// The buffer's name.
    pub buffer: String,
    /// The buffer's size.
    pub size: u64,
    /// Bytes of the image's mip 0.
    pub needed: u64,
}

impl ResidencyError for CopyTooSmall {
    fn class(&self) -> ErrorClass {
        ErrorClass::Refused
    }
}

/// Whether the byte ranges `a..a + a_len` and `b..b + b_len` share a byte (no overflow).
fn ranges_overlap(a: u64, a_len: u64, b: u64, b_len: u64) -> bool {
    a_len > 0 && b_len > 0 && a < b.saturating_add(b_len) && b < a.saturating_add(a_len)
}

/// Whether bytes `offset..offset + len` of `buffer` and bytes `other..other + other_len` of the
/// memory object `memory` are the same bytes of memory (a buffer without memory of its own, a
/// sparse one, shares none this way).
pub(crate) fn buffer_aliases(
    buffer: &Buffer,
    offset: u64,
    len: u64,
    memory: vk::DeviceMemory,
    other: u64,
    other_len: u64,
) -> bool {
    let (own, base) = buffer.memory();
    own != vk::DeviceMemory::null()
        && own == memory
        && ranges_overlap(base.saturating_add(offset), len, other, other_len)
}

/// Checks a copy of `size` bytes from `src` at `src_offset` to `dst` at `dst_offset` (offsets
/// within the buffers): usages, a non-empty range inside both, and no overlap in memory
/// (`VUID-vkCmdCopyBuffer-pRegions-00117`): neither in one `VkBuffer` nor through two buffers
/// bound to the same bytes of one `VkDeviceMemory` (transient buffers that alias, placed
/// buffers over one range). Returns the region in `VkBuffer` offsets. Every buffer-to-buffer
/// copy a safe call records goes through it ([`Recording::copy_buffer`], the multi-device
/// work's copies).
pub(crate) fn check_buffer_copy(
    src: &Buffer,
    src_offset: u64,
    dst: &Buffer,
    dst_offset: u64,
    size: u64,
) -> Result<vk::BufferCopy, &'static str> {
    if !src.usage().contains(BufferUsage::COPY_SRC) || !dst.usage().contains(BufferUsage::COPY_DST) {
        return Err("the source needs COPY_SRC and the destination COPY_DST usage");
    }
    let inside =
        |offset: u64, buffer: &Buffer| offset.checked_add(size).is_some_and(|end| end <= buffer.size());
    if size == 0 || !inside(src_offset, src) || !inside(dst_offset, dst) {
        return Err("the range is empty or outside a buffer");
    }
    let region =
        vk::BufferCopy { src_offset: src.offset() + src_offset, dst_offset: dst.offset() + dst_offset, size };
    if src.raw() == dst.raw() && ranges_overlap(region.src_offset, size, region.dst_offset, size) {
        return Err("the ranges overlap in one buffer");
    }
    let (dst_memory, dst_base) = dst.memory();
    if buffer_aliases(src, src_offset, size, dst_memory, dst_base.saturating_add(dst_offset), size) {
        return Err("the ranges are the same bytes of memory (the buffers alias)");
    }
    Ok(region)
}

/// Checks a copy of mip 0, layer 0 of `image` (in `layout`) into a buffer, tightly packed, and
/// returns the copy's aspect and bytes: `COPY_SRC` usage, one sample, one aspect, a copy-source
/// layout and a format whose texel size residency knows. With `buffer` (a caller's buffer, at
/// its start): its `COPY_DST` usage, an offset that is a multiple of the texel block size and 4,
/// room for the mip, and no byte shared with the image's memory
/// (`VUID-vkCmdCopyImageToBuffer-pRegions-00184`). Both image read-backs use it
/// ([`Recording::copy_image_to_buffer`], [`Device::read_image`]).
pub(crate) fn check_image_to_buffer(
    image: &Image,
    layout: vk::ImageLayout,
    buffer: Option<&Buffer>,
) -> Result<(vk::ImageAspectFlags, u64), CopyError> {
    let d = image.desc();
    let to = buffer.map_or_else(|| "host memory".to_owned(), |b| b.name().to_owned());
    let invalid = |reason| CopyError::Invalid { from: d.name.clone(), to: to.clone(), reason };
    if !d.usage.contains(ImageUsage::COPY_SRC) {
        return Err(invalid("the image lacks COPY_SRC usage"));
    }
    if d.samples != 1 {
        return Err(invalid("a multisampled image cannot be copied to a buffer"));
    }
    let aspect_mask = aspect(d.format);
    if aspect_mask.as_raw().count_ones() != 1 {
        return Err(invalid("a depth-stencil image is copied one aspect at a time"));
    }
    if layout != vk::ImageLayout::TRANSFER_SRC_OPTIMAL && layout != vk::ImageLayout::GENERAL {
        return Err(invalid("the layout must be TRANSFER_SRC_OPTIMAL or GENERAL"));
    }
    let needed = d.format.region_bytes(d.extent[0], d.extent[1], d.extent[2]);
    if needed == 0 {
        return Err(invalid("the image's format has no texel size residency knows"));
    }
    let Some(buffer) = buffer else { return Ok((aspect_mask, needed)) };
    if !buffer.usage().contains(BufferUsage::COPY_DST) {
        return Err(invalid("the buffer lacks COPY_DST usage"));
    }
    if buffer.offset() % u64::from(d.format.block_bytes().max(1)) != 0 || buffer.offset() % 4 != 0 {
        return Err(invalid("the buffer's offset is not a multiple of the texel block size and 4"));
    }
    if buffer.size() < needed {
        return Err(CopyTooSmall { image: d.name.clone(), buffer: to, size: buffer.size(), needed }.into());
    }
    let (memory, base) = image.memory();
    if buffer_aliases(buffer, 0, needed, memory, base, image.size()) {
        return Err(invalid("the buffer and the image are the same bytes of memory (they alias)"));
    }
    Ok((aspect_mask, needed))
}

impl Recording<'_> {
    /// Records a copy of `size` bytes from `src` at `src_offset` to `dst` at `dst_offset`. Both
    /// must live on the recording's device, have `COPY_SRC` and `COPY_DST` usage, hold the range,
    /// and the two ranges must not overlap in memory (in one buffer, or in two buffers bound to
    /// the same bytes, as transient buffers may be); otherwise nothing is recorded. Order it against
    /// other accesses with barriers.
    pub fn copy_buffer(
        &mut self,
        src: &Buffer,
        src_offset: u64,
        dst: &Buffer,
        dst_offset: u64,
        size: u64,
    ) -> Result<(), CopyError> {
        self.accepts(src.name(), src.device())?;
        self.accepts(dst.name(), dst.device())?;
        let region = check_buffer_copy(src, src_offset, dst, dst_offset, size).map_err(|reason| {
            CopyError::Invalid { from: src.name().to_owned(), to: dst.name().to_owned(), reason }
        })?;
        self.keep(src.life());
        self.keep(dst.life());
        // SAFETY: the command buffer is recording on this device outside a render pass (the
        // type's invariant); both buffers are live buffers of this device (checked above), held
        // by the recording until its submission, with the usages, a non-empty range inside both
        // and no overlap in memory (checked above).
        unsafe { self.device.raw().cmd_copy_buffer(self.raw, src.raw(), dst.raw(), &[region]) };
        self.recorded();
        Ok(())
    }

    /// Records `vkCmdFillBuffer`: `size` bytes of `buffer` from `offset` set to the repeated
    /// `word`. The buffer must live on the recording's device and have `COPY_DST` usage, the
    /// offset and size be multiples of 4 and the range non-empty and inside the buffer; otherwise
    /// nothing is recorded. It runs in the transfer stages (`CLEAR`), writing with
    /// `TRANSFER_WRITE`: order it with barriers.
    pub fn fill_buffer(
        &mut self,
        buffer: &Buffer,
        offset: u64,
        size: u64,
        word: u32,
    ) -> Result<(), CopyError> {
        self.check_transfer_write(buffer, offset, size)?;
        self.keep(buffer.life());
        // SAFETY: the command buffer is recording on this device outside a render pass; the
        // buffer is a live buffer of this device with COPY_DST usage, held until the submission,
        // and the range is non-empty, 4-byte aligned and inside it (checked above).
        unsafe {
            self.device.raw().cmd_fill_buffer(self.raw, buffer.raw(), buffer.offset() + offset, size, word)
        };
        self.recorded();
        Ok(())
    }

    /// Records `vkCmdUpdateBuffer`: `data` (at most 65 536 bytes, a multiple of 4) written into
    /// `buffer` at `offset` (a multiple of 4). Checked like [`Recording::fill_buffer`].
    pub fn update_buffer(&mut self, buffer: &Buffer, offset: u64, data: &[u8]) -> Result<(), CopyError> {
        if data.len() > 65536 {
            return Err(CopyError::Invalid {
                from: "host data".to_owned(),
                to: buffer.name().to_owned(),
                reason: "vkCmdUpdateBuffer writes at most 65536 bytes",
            });
        }
        self.check_transfer_write(buffer, offset, data.len() as u64)?;
        self.keep(buffer.life());
        // SAFETY: as for `fill_buffer`; `data` lives for the call (the command copies it).
        unsafe {
            self.device.raw().cmd_update_buffer(self.raw, buffer.raw(), buffer.offset() + offset, data)
        };
        self.recorded();
        Ok(())
    }

    fn check_transfer_write(&self, buffer: &Buffer, offset: u64, size: u64) -> Result<(), CopyError> {
        self.accepts(buffer.name(), buffer.device())?;
        let invalid = |reason| CopyError::Invalid {
            from: "host data".to_owned(),
            to: buffer.name().to_owned(),
            reason,
        };
        if !buffer.usage().contains(BufferUsage::COPY_DST) {
            return Err(invalid("the buffer lacks COPY_DST usage"));
        }
        // The range first: once it lies in the buffer, its offset in the `VkBuffer` (a page
        // buffer's range starts at `buffer.offset()`) cannot overflow.
        if size == 0 || offset.checked_add(size).is_none_or(|end| end > buffer.size()) {
            return Err(invalid("the range is empty or outside the buffer"));
        }
        if offset % 4 != 0 || size % 4 != 0 || (buffer.offset() + offset) % 4 != 0 {
            return Err(invalid("the offset and size must be multiples of 4"));
        }
        Ok(())
    }

    /// Records one global memory barrier. Stages must be core stages residency's devices enable,
    /// and each access one that a stage of its side performs ([`BarrierError`]; nothing is
    /// recorded then).
    pub fn memory_barrier(&mut self, dependency: MemoryDependency) -> Result<(), BarrierError> {
        let features = self.device.features();
        check_scope(&features, dependency.src_stages, dependency.src_access)?;
        check_scope(&features, dependency.dst_stages, dependency.dst_access)?;
        let barrier = [vk::MemoryBarrier2::default()
            .src_stage_mask(dependency.src_stages)
            .src_access_mask(dependency.src_access)
            .dst_stage_mask(dependency.dst_stages)
            .dst_access_mask(dependency.dst_access)];
        // SAFETY: the command buffer is recording on this device outside a render pass (the
        // type's invariant); the stages are core stages of the universal queue and every access
        // is performed by a stage of its side (checked above); the barrier lives for the call.
        unsafe {
            self.device
                .raw()
                .cmd_pipeline_barrier2(self.raw, &vk::DependencyInfo::default().memory_barriers(&barrier))
        };
        self.recorded();
        Ok(())
    }

    /// Records a copy of mip 0, layer 0 of `image` (in `layout`: `TRANSFER_SRC_OPTIMAL` or
    /// `GENERAL`) into the start of `buffer`, tightly packed. Order it against the image's writes
    /// and the host's read with barriers. Both must live on the recording's device, the image be
    /// single-sampled with one aspect and `COPY_SRC` usage, the buffer have `COPY_DST` usage, an
    /// offset that is a multiple of the texel block size, room for the whole mip, and no byte of
    /// memory in common with the image (a transient buffer and image that alias); otherwise
    /// nothing is recorded.
    pub fn copy_image_to_buffer(
        &mut self,
        image: &Image,
        layout: vk::ImageLayout,
        buffer: &Buffer,
    ) -> Result<(), CopyError> {
        self.accepts(image.name(), image.device())?;
        self.accepts(buffer.name(), buffer.device())?;
        let d = image.desc();
        let (aspect_mask, _) = check_image_to_buffer(image, layout, Some(buffer))?;
        let copy = vk::BufferImageCopy {
            buffer_offset: buffer.offset(),
            buffer_row_length: 0,
            buffer_image_height: 0,
            image_subresource: vk::ImageSubresourceLayers {
                aspect_mask,
                mip_level: 0,
                base_array_layer: 0,
                layer_count: 1,
            },
            image_offset: vk::Offset3D::default(),
            image_extent: vk::Extent3D { width: d.extent[0], height: d.extent[1], depth: d.extent[2] },
        };
        self.check_layout(image.layouts(), 0..1, 0..1, layout).map_err(CopyError::ImageLayout)?;
        self.keep(image.life());
        self.keep(buffer.life());
        self.use_layout(image.layouts(), 0..1, 0..1, layout);
        // SAFETY: the command buffer is recording on this device outside a render pass (the
        // type's invariant); the image and buffer are live objects of this device (checked above),
        // held by the recording until its submission, with the usages, sample count, aspect,
        // layout value, offset alignment and size the copy needs, sharing no byte of memory
        // (`check_image_to_buffer`). The image is in
        // `layout` when the copy runs: noted as a requirement above, which the submitter checks
        // against the image's layouts in submission order before submitting anything (a
        // `from_raw` recording's `# Safety` asks the renderer for the same check).
        unsafe {
            self.device.raw().cmd_copy_image_to_buffer(self.raw, image.raw(), layout, buffer.raw(), &[copy])
        };
        self.recorded();
        Ok(())
    }
}

/// A pool of GPU timestamps: write pairs around work in a recording, read the elapsed time once
/// the work has completed. It holds its device and is released when dropped, after the GPU work
/// that may write it.
#[derive(Debug)]
pub struct Timestamps {
    life: Arc<Life>,
    pool: vk::QueryPool,
    name: String,
    count: u32,
    period_ns: f64,
    /// Mask of the valid bits of a timestamp on the universal queue (0: no timestamps there).
    valid_mask: u64,
}

impl Timestamps {
    /// The most timestamps one pool holds (65 536): Vulkan sets no limit on `queryCount`, and a
    /// driver allocates a pool's results up front, so a count from a caller is bounded here.
    pub const MAX_COUNT: u32 = 1 << 16;

    /// A pool of `count` timestamps (at least one), all reset on the GPU before this returns (so
    /// reading one never meets an uninitialised query). More than [`Timestamps::MAX_COUNT`] is
    /// [`VulkanError::Unsupported`], with nothing created.
    pub fn new(device: &Device, name: &str, count: u32) -> crate::error::Result<Timestamps> {
        use crate::error::VkResultExt;
        if count > Self::MAX_COUNT {
            return Err(VulkanError::Unsupported {
                device: device.name().to_owned(),
                reason: format!("timestamp pool `{name}`: {count} timestamps, more than {}", Self::MAX_COUNT),
            });
        }
        let count = count.max(1);
        let info = vk::QueryPoolCreateInfo::default().query_type(vk::QueryType::TIMESTAMP).query_count(count);
        // SAFETY: valid device and create info.
        let pool = unsafe { device.raw().create_query_pool(&info, None) }.during("vkCreateQueryPool")?;
        device.set_name(pool, name);
        let id = device.ledger().track("query pool", name);
        let life = Life::new(device.arc(), Garbage::QueryPool { raw: pool, id }, None);
        // SAFETY: a pure query on this device's physical device.
        let families =
            unsafe { device.instance().get_physical_device_queue_family_properties(device.physical()) };
        let bits =
            families.get(device.universal_queue().family() as usize).map_or(0, |f| f.timestamp_valid_bits);
        let valid_mask = if bits >= 64 { u64::MAX } else { (1u64 << bits) - 1 };
        device.submit_once(name, |rec| {
            // SAFETY: `rec` is recording on this device outside a render pass; the range is the
            // whole pool, which lives (its life is held by this function) until the wait returns.
            unsafe { device.raw().cmd_reset_query_pool(rec.raw(), pool, 0, count) };
        })?;
        Ok(Timestamps {
            life,
            pool,
            name: name.to_owned(),
            count,
            period_ns: f64::from(device.limits().timestamp_period),
            valid_mask,
        })
    }

    /// Its name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The device it lives on.
    pub fn device(&self) -> &Arc<Device> {
        self.life.device()
    }

    /// How many timestamps it holds.
    pub fn count(&self) -> u32 {
        self.count
    }

    /// Declares a use of the renderer's own work that ends at `until` (a recording it submits
    /// itself; residency's submissions need nothing).
    pub fn used_until(&self, until: GpuUse) -> Result<(), ForeignUse> {
        self.life.used_until(until)
    }

    /// Records resetting timestamps `range` (clamped to the pool). A recording of another device
    /// is [`VulkanError::WrongDevice`] and records nothing.
    pub fn cmd_reset(&self, rec: &mut Recording<'_>, range: std::ops::Range<u32>) -> Result<(), VulkanError> {
        rec.accepts(&self.name, self.device())?;
        let end = range.end.min(self.count);
        let start = range.start.min(end);
        if start == end {
            return Ok(());
        }
        rec.keep(&self.life);
        // SAFETY: `rec` is recording on this pool's device (checked above) outside a render pass
        // (the type's invariant); the range lies in the pool, which the recording holds.
        unsafe { rec.device().raw().cmd_reset_query_pool(rec.raw(), self.pool, start, end - start) };
        rec.recorded();
        Ok(())
    }

    /// Whether the universal queue has timestamps at all (`timestampValidBits` > 0); without them
    /// writes record nothing and every elapsed time is `None`.
    pub fn supported(&self) -> bool {
        self.valid_mask != 0
    }

    /// Records writing timestamp `index` once all earlier commands have finished; the query is
    /// reset just before, so a write never meets a query that still holds a result. An index
    /// outside the pool records nothing; a recording of another device is
    /// [`VulkanError::WrongDevice`] and records nothing.
    pub fn cmd_write(&self, rec: &mut Recording<'_>, index: u32) -> Result<(), VulkanError> {
        rec.accepts(&self.name, self.device())?;
        if index >= self.count || !self.supported() {
            return Ok(());
        }
        rec.keep(&self.life);
        // SAFETY: `rec` is recording on this pool's device (checked above) outside a render pass
        // (the type's invariant), on the universal queue, whose timestamps are valid (checked
        // above); the query is in the pool (checked above), which the recording holds, and is
        // reset right before the write in submission order, so it is unavailable when written.
        unsafe {
            let raw = rec.device().raw();
            raw.cmd_reset_query_pool(rec.raw(), self.pool, index, 1);
            raw.cmd_write_timestamp2(rec.raw(), vk::PipelineStageFlags2::ALL_COMMANDS, self.pool, index);
        }
        rec.recorded();
        Ok(())
    }

    /// Timestamp `index` in milliseconds of the device's timestamp clock (its raw ticks masked to
    /// the valid bits, times the period), once the work that wrote it has completed (`None` when
    /// not available). Timestamps of one queue share the clock, so two of them (of any pools)
    /// give the time between: request-to-resident latency, say.
    pub fn at_ms(&self, index: u32) -> Option<f64> {
        if index >= self.count || !self.supported() {
            return None;
        }
        let mut t = [0u64; 1];
        // SAFETY: a live pool of this device; the index inside it, every query reset at least
        // once (at creation); a 64-bit result into a slice of one, without waiting.
        let ok = unsafe {
            self.device().raw().get_query_pool_results(
                self.pool,
                index,
                &mut t,
                vk::QueryResultFlags::TYPE_64,
            )
        }
        .is_ok();
        ok.then(|| (t[0] & self.valid_mask) as f64 * self.period_ns / 1e6)
    }

    /// Milliseconds between timestamps `start` and `end`, once the work that wrote them has
    /// completed (`None` when the results are not available).
    pub fn elapsed_ms(&self, start: u32, end: u32) -> Option<f64> {
        if start >= self.count || end >= self.count || !self.supported() {
            return None;
        }
        let device = self.device();
        let mut a = [0u64; 1];
        let mut b = [0u64; 1];
        // SAFETY: a live pool of this device; indices inside it, every query reset at least once
        // (at creation); 64-bit results into slices of one, without waiting.
        let ok = unsafe {
            device
                .raw()
                .get_query_pool_results(self.pool, start, &mut a, vk::QueryResultFlags::TYPE_64)
                .is_ok()
                && device
                    .raw()
                    .get_query_pool_results(self.pool, end, &mut b, vk::QueryResultFlags::TYPE_64)
                    .is_ok()
        };
        // Counters wrap at their valid bits.
        ok.then(|| (b[0].wrapping_sub(a[0]) & self.valid_mask) as f64 * self.period_ns / 1e6)
    }
}
