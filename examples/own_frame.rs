//! A renderer's own frame with residency's streamer.
//!
//! The renderer has its own Vulkan instance (validation with synchronization validation, its own
//! messenger), device, queue, command pool, command buffers and timeline semaphore, as an engine
//! does; it hands the device to residency with `DeviceSet::adopt` and imports its timeline with
//! `Device::import_timeline`. Four virtual textures stream through one `Streamer`; each frame the
//! renderer records into its own command buffer (`Recording::from_raw`): the streamer's part
//! (`FrameBindings::record`: waits for binds, feedback reset, staged copies, barriers), then its
//! draws of four planes with the `vt_quad` shaders, whose fragment shaders sample the textures and
//! write feedback. `Recording::submit` ends and submits the command buffer on the renderer's queue
//! signalling its timeline; the point it returns ends the frame for the streamer (`end_frame`) and
//! for every object the frame used. The scene itself (patterns, planes, camera, pipeline, render
//! target) is `virtual_texture.rs`'s.
//!
//! Any `?` may return early: residency then destroys what it made once the work it knows of is
//! done (its own submissions, the frames submitted through it), drains its queue, and the
//! renderer destroys its own objects and device right after, without waiting for the device to
//! go idle. `--return-early-at SITE` (or `RESIDENCY_RETURN_EARLY=SITE`) does that at one of
//! `ReturnEarly::SITES`.
//!
//! The streaming code is what lies between the `// streaming: begin` and `// streaming: end`
//! comments.
//!
//! Run: `cargo run --example own_frame [-- --return-early-at before-submit]`

#[allow(dead_code, reason = "the scene is virtual_texture.rs's; this example uses a part of it")]
#[allow(
    clippy::duplicate_mod,
    reason = "the examples' test loads virtual_texture.rs as an example of its own too"
)]
#[path = "virtual_texture.rs"]
mod scene;

use residency::vulkan::ash::{self, vk};
use residency::vulkan::graphics::Drawing;
use residency::vulkan::recording::Recording;
use residency::vulkan::sparse::ResidencyPath;
use residency::vulkan::streaming::{Streamer, StreamerDesc};
use residency::vulkan::{shaders, DeviceSet, EnabledFeatures, ExternalDevice, Filter};
use std::ffi::c_void;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>;

/// Frames drawn by default.
pub const FRAMES: u64 = 16;
const IN_FLIGHT: usize = 2;

/// Validation messages (warnings and errors) the renderer's messenger heard, over the process.
pub static PROBLEMS: AtomicU64 = AtomicU64::new(0);

/// Where the test mode returns `Err` through `?`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReturnEarly {
    /// Right after `DeviceSet::adopt`.
    AfterAdopt,
    /// After the streamer primed its textures, before the first frame.
    AfterPriming,
    /// In frame 3, after the frame was recorded and before it is submitted.
    BeforeSubmit,
    /// In frame 3, after its submission and before `end_frame`.
    AfterSubmit,
    /// In frame 3, after `end_frame`, with frames still running on the GPU.
    AfterEndFrame,
}

impl ReturnEarly {
    /// Every site.
    pub const SITES: [ReturnEarly; 5] = [
        ReturnEarly::AfterAdopt,
        ReturnEarly::AfterPriming,
        ReturnEarly::BeforeSubmit,
        ReturnEarly::AfterSubmit,
        ReturnEarly::AfterEndFrame,
    ];
    const NAMES: [&'static str; 5] =
        ["after-adopt", "after-priming", "before-submit", "after-submit", "after-end-frame"];

    fn parse(name: &str) -> Result<ReturnEarly> {
        let index = Self::NAMES.iter().position(|n| *n == name);
        index.map(|i| Self::SITES[i]).ok_or_else(|| format!("no site `{name}`: {:?}", Self::NAMES).into())
    }

    /// Returns `Err` at `self` when the run asked for it.
    fn check(self, asked: Option<ReturnEarly>, frame: u64) -> Result<()> {
        let in_frame = !matches!(self, ReturnEarly::AfterAdopt | ReturnEarly::AfterPriming);
        match asked == Some(self) && (!in_frame || frame == 3) {
            true => Err(format!("returned early at {self:?}").into()),
            false => Ok(()),
        }
    }
}

/// What a run found.
#[derive(Debug)]
pub struct Outcome {
    /// The path the textures took.
    pub path: ResidencyPath,
    /// Frames drawn.
    pub frames: u64,
    /// Pixels of frame 0 in the nothing-resident colour (priming makes this 0).
    pub magenta_frame0: usize,
    /// Tiles streamed after priming, from the fragment shaders' feedback.
    pub streamed_tiles: u64,
}

unsafe extern "system" fn count_problems(
    severity: vk::DebugUtilsMessageSeverityFlagsEXT,
    _: vk::DebugUtilsMessageTypeFlagsEXT,
    data: *const vk::DebugUtilsMessengerCallbackDataEXT<'_>,
    _: *mut c_void,
) -> vk::Bool32 {
    // SAFETY: the layer passes a valid callback data pointer whose message lives for the call.
    let message = unsafe { data.as_ref().and_then(|d| d.message_as_c_str()) };
    eprintln!("validation: {}", message.map(|m| m.to_string_lossy()).unwrap_or_default());
    if severity.intersects(
        vk::DebugUtilsMessageSeverityFlagsEXT::WARNING | vk::DebugUtilsMessageSeverityFlagsEXT::ERROR,
    ) {
        PROBLEMS.fetch_add(1, Ordering::SeqCst);
    }
    vk::FALSE
}

/// The renderer's own Vulkan objects. Declared before residency's, it is dropped after them: it
/// destroys its objects and device without waiting for anything (residency's teardown drained
/// the queue).
struct Renderer {
    entry: ash::Entry,
    instance: ash::Instance,
    messenger: (ash::ext::debug_utils::Instance, vk::DebugUtilsMessengerEXT),
    physical: vk::PhysicalDevice,
    device: ash::Device,
    family: u32,
    features: EnabledFeatures,
    pool: vk::CommandPool,
    cmds: [vk::CommandBuffer; IN_FLIGHT],
    timeline: vk::Semaphore,
}

impl Renderer {
    fn new() -> Result<Renderer> {
        // SAFETY: loading the system's Vulkan loader, as every Vulkan application does.
        let entry = unsafe { ash::Entry::load() }?;
        let layers = [c"VK_LAYER_KHRONOS_validation".as_ptr()];
        let extensions = [ash::ext::debug_utils::NAME.as_ptr(), ash::ext::validation_features::NAME.as_ptr()];
        let app =
            vk::ApplicationInfo::default().application_name(c"own frame").api_version(vk::API_VERSION_1_3);
        let sync = [vk::ValidationFeatureEnableEXT::SYNCHRONIZATION_VALIDATION];
        let mut validation = vk::ValidationFeaturesEXT::default().enabled_validation_features(&sync);
        let info = vk::InstanceCreateInfo::default()
            .application_info(&app)
            .enabled_layer_names(&layers)
            .enabled_extension_names(&extensions)
            .push_next(&mut validation);
        // SAFETY: the create info and everything it points at live for the call.
        let instance = unsafe { entry.create_instance(&info, None) }?;
        let debug = ash::ext::debug_utils::Instance::new(&entry, &instance);
        let severities =
            vk::DebugUtilsMessageSeverityFlagsEXT::WARNING | vk::DebugUtilsMessageSeverityFlagsEXT::ERROR;
        let types = vk::DebugUtilsMessageTypeFlagsEXT::VALIDATION;
        let messenger_info = vk::DebugUtilsMessengerCreateInfoEXT::default()
            .message_severity(severities)
            .message_type(types | vk::DebugUtilsMessageTypeFlagsEXT::GENERAL)
            .pfn_user_callback(Some(count_problems));
        // SAFETY: a valid instance with debug utils enabled; the callback is a plain function.
        let messenger = unsafe { debug.create_debug_utils_messenger(&messenger_info, None) }?;
        // SAFETY: valid instance.
        let physical = unsafe { instance.enumerate_physical_devices() }?[0];
        // SAFETY: valid physical device of this instance.
        let families = unsafe { instance.get_physical_device_queue_family_properties(physical) };
        let wanted = vk::QueueFlags::GRAPHICS | vk::QueueFlags::COMPUTE | vk::QueueFlags::TRANSFER;
        let family =
            families.iter().position(|f| f.queue_flags.contains(wanted)).ok_or("no graphics queue")?;
        let sparse_queue = families[family].queue_flags.contains(vk::QueueFlags::SPARSE_BINDING);
        // SAFETY: valid physical device.
        let s = unsafe { instance.get_physical_device_features(physical) };
        let on = |f: vk::Bool32| f == vk::TRUE;
        let sparse = sparse_queue && on(s.sparse_binding) && on(s.sparse_residency_image2_d);
        let features = EnabledFeatures {
            sparse_binding: sparse,
            sparse_residency_image_2d: sparse,
            shader_resource_residency: sparse && on(s.shader_resource_residency),
            shader_resource_min_lod: on(s.shader_resource_min_lod),
            fragment_stores_and_atomics: on(s.fragment_stores_and_atomics),
            timeline_semaphore: true,
            ..EnabledFeatures::default()
        };
        let enable = vk::PhysicalDeviceFeatures::default()
            .sparse_binding(features.sparse_binding)
            .sparse_residency_image2_d(features.sparse_residency_image_2d)
            .shader_resource_residency(features.shader_resource_residency)
            .shader_resource_min_lod(features.shader_resource_min_lod)
            .fragment_stores_and_atomics(features.fragment_stores_and_atomics);
        let mut f12 = vk::PhysicalDeviceVulkan12Features::default().timeline_semaphore(true);
        let mut f13 = vk::PhysicalDeviceVulkan13Features::default()
            .synchronization2(true)
            .maintenance4(true)
            .dynamic_rendering(true);
        let mut f2 =
            vk::PhysicalDeviceFeatures2::default().features(enable).push_next(&mut f12).push_next(&mut f13);
        let priorities = [1.0f32];
        let queues = [vk::DeviceQueueCreateInfo::default()
            .queue_family_index(family as u32)
            .queue_priorities(&priorities)];
        let info = vk::DeviceCreateInfo::default().queue_create_infos(&queues).push_next(&mut f2);
        // SAFETY: the create info lives for the call; every feature enabled is supported.
        let device = unsafe { instance.create_device(physical, &info, None) }?;
        let pool_info = vk::CommandPoolCreateInfo::default()
            .queue_family_index(family as u32)
            .flags(vk::CommandPoolCreateFlags::RESET_COMMAND_BUFFER);
        // SAFETY: valid device and family.
        let pool = unsafe { device.create_command_pool(&pool_info, None) }?;
        let alloc = vk::CommandBufferAllocateInfo::default().command_pool(pool).command_buffer_count(2);
        // SAFETY: a pool of this device.
        let cmds = unsafe { device.allocate_command_buffers(&alloc) }?;
        let mut ty = vk::SemaphoreTypeCreateInfo::default().semaphore_type(vk::SemaphoreType::TIMELINE);
        // SAFETY: valid device with timeline semaphores enabled.
        let timeline =
            unsafe { device.create_semaphore(&vk::SemaphoreCreateInfo::default().push_next(&mut ty), None) }?;
        let cmds = [cmds[0], cmds[1]];
        let messenger = (debug, messenger);
        let family = family as u32;
        Ok(Renderer { entry, instance, messenger, physical, device, family, features, pool, cmds, timeline })
    }

    /// Begins command buffer `slot` (the frame that used it last has completed).
    fn begin(&self, slot: usize) -> Result<vk::CommandBuffer> {
        let begin = vk::CommandBufferBeginInfo::default().flags(vk::CommandBufferUsageFlags::ONE_TIME_SUBMIT);
        // SAFETY: the command buffer's last submission completed (the caller waited for it).
        unsafe {
            self.device.reset_command_buffer(self.cmds[slot], vk::CommandBufferResetFlags::empty())?;
            self.device.begin_command_buffer(self.cmds[slot], &begin)?;
        }
        Ok(self.cmds[slot])
    }
}

impl Drop for Renderer {
    fn drop(&mut self) {
        // SAFETY: residency's device set is gone (declared after this, dropped before) and its
        // teardown drained the queue, so none of these objects is in use.
        unsafe {
            self.device.destroy_command_pool(self.pool, None);
            self.device.destroy_semaphore(self.timeline, None);
            self.device.destroy_device(None);
            self.messenger.0.destroy_debug_utils_messenger(self.messenger.1, None);
            self.instance.destroy_instance(None);
        }
    }
}

/// Runs `frames` frames, returning `Err` at `early` if asked.
pub fn run(frames: u64, early: Option<ReturnEarly>) -> Result<Outcome> {
    let renderer = Renderer::new()?;
    let external = ExternalDevice {
        physical: renderer.physical,
        device: renderer.device.clone(),
        universal_queue: (renderer.family, 0),
        sparse_queue: renderer.features.sparse_binding.then_some((renderer.family, 0)),
        features: renderer.features,
    };
    let (entry, instance) = (renderer.entry.clone(), renderer.instance.clone());
    // SAFETY: the instance and device were made as `adopt` requires and outlive the set (the
    // renderer is dropped after it); the renderer submits only through `Recording::submit`.
    let set = unsafe { DeviceSet::adopt(entry, instance, true, &[external]) }?;
    let device = Arc::clone(&set.devices()[0]);
    ReturnEarly::AfterAdopt.check(early, 0)?;
    let max_sets = (IN_FLIGHT * scene::PLANES.len()) as u32;
    let samplers = [device.create_sampler(Filter::Trilinear)?, device.create_sampler(Filter::Nearest)?];
    let vertices = scene::plane_vertices(&device)?;
    let mut targets =
        vec![scene::Target::new(&device, "target 0")?, scene::Target::new(&device, "target 1")?];
    // streaming: begin
    // SAFETY: the renderer's timeline semaphore, of this device, destroyed after the set; its
    // only signals are the frames `Recording::submit` makes.
    let timeline = unsafe { device.import_timeline(renderer.timeline, "renderer frames") }?;
    let desc = StreamerDesc::default().with_name("own frame").with_budget_tiles(128).with_frames_in_flight(2);
    let mut streamer = Streamer::new(&device, desc)?;
    let mut textures = Vec::new();
    for index in 0..scene::PLANES.len() {
        textures.push(streamer.add_texture(&format!("plane {index}"), scene::source(index))?);
    }
    let primed = streamer.manager_stats().tiles_streamed;
    let program = scene::program(&device, "planes", shaders::vt_quad_fragment(streamer.path()), max_sets)?;
    // streaming: end
    ReturnEarly::AfterPriming.check(early, 0)?;
    let mut sets: Vec<Option<(u64, scene::PlaneSets)>> = vec![None; IN_FLIGHT];
    let mut first = Vec::new();
    for frame in 0..frames {
        let slot = frame as usize % IN_FLIGHT;
        if frame >= IN_FLIGHT as u64 {
            device.wait_until(&timeline.at(frame + 1 - IN_FLIGHT as u64))?;
            if frame == IN_FLIGHT as u64 {
                first = targets[0].read()?;
            }
        }
        let view = scene::matrix_bytes(&scene::camera(frame, frames));
        let cmd = renderer.begin(slot)?;
        // streaming: begin
        let bindings = streamer.begin_frame()?;
        if sets[slot].as_ref().is_none_or(|(generation, _)| *generation != bindings.generation) {
            let made = scene::plane_sets(&program, &samplers, &bindings, &textures)?;
            sets[slot] = Some((bindings.generation, made));
        }
        let planes = &sets[slot].as_ref().ok_or("made above")?.1;
        let draws = |draw: &mut Drawing<'_, '_>| -> Result<()> {
            for (plane, (set, feedback_slot)) in planes.iter().enumerate() {
                let push = scene::plane_push(&view, *feedback_slot, &bindings);
                scene::draw_plane(draw, &vertices, plane, set, &push)?;
            }
            Ok(())
        };
        // SAFETY: `cmd` is the renderer's primary command buffer of the universal family, just
        // begun; only this recording records into it, and it is submitted only by `submit`.
        let mut rec = unsafe { Recording::from_raw(&device, cmd) };
        bindings.record(&mut rec, |rec| targets[slot].render(rec, &program, draws))??;
        drop(bindings);
        ReturnEarly::BeforeSubmit.check(early, frame)?;
        let done = rec.submit(&timeline, frame + 1)?;
        ReturnEarly::AfterSubmit.check(early, frame)?;
        streamer.end_frame(done)?;
        // streaming: end
        ReturnEarly::AfterEndFrame.check(early, frame)?;
    }
    device.wait_until(&timeline.at(frames))?;
    let streamed_tiles = streamer.manager_stats().tiles_streamed - primed;
    let path = streamer.path();
    drop((streamer, textures, sets, program, targets, samplers, vertices, device));
    set.close()?;
    let magenta_frame0 = first.chunks_exact(4).filter(|p| *p == scene::MAGENTA).count();
    Ok(Outcome { path, frames, magenta_frame0, streamed_tiles })
}

#[allow(dead_code, reason = "the test that runs this example calls `run` and not `main`")]
fn main() -> Result<()> {
    let mut args = std::env::args().skip(1);
    let site = match (args.next().as_deref(), args.next()) {
        (Some("--return-early-at"), Some(site)) => Some(site),
        _ => std::env::var("RESIDENCY_RETURN_EARLY").ok(),
    };
    let early = site.as_deref().map(ReturnEarly::parse).transpose()?;
    let outcome = run(FRAMES, early);
    let leaks = residency::vulkan::LEAKS_AT_TEARDOWN.load(Ordering::SeqCst);
    let problems = PROBLEMS.load(Ordering::SeqCst);
    println!("{outcome:?}; validation problems: {problems}; leaked at teardown: {leaks}");
    if problems != 0 || leaks != 0 || (early.is_none() && outcome.is_err()) {
        return Err("the example failed its checks".into());
    }
    Ok(())
}
