//! Transient resources: a frame's buffers and images placed by the core's `TransientPlanner` in
//! heaps that persist across frames, so resources whose pass intervals do not overlap alias the same
//! memory (scratch for acceleration structures one frame, terrain data the next).
//!
//! `begin_frame` creates each resource unbound, reads its requirements, plans, grows heaps that are
//! too small and binds every resource at its planned offset. Before each pass, `record_pass_start`
//! records the aliasing barriers of the resources first used in that pass (the previous occupants'
//! last uses finish first; images transition from `UNDEFINED`, their contents discarded).
//!
//! **Frames in flight.** A frame's resources keep the heaps they are bound to alive, and are
//! released when the frame is dropped or ended, deferred until the GPU work that used them has
//! completed. A heap that grows is replaced: the old one retires after the frames placed in it.
//! The next frame may be placed in the same bytes while the previous one still runs; its first
//! uses then wait, on the GPU, for everything before them (a barrier from all earlier commands
//! on the queue), so frame N+1 writes a byte only after frame N is done with it. Submit a pool's
//! frames to one queue, in order.
//!
//! **One frame open at a time.** A frame is open from `begin_frame` until it is ended or dropped;
//! the next `begin_frame` is refused while it is ([`MemoryError::Unsatisfiable`]): its resources
//! would be placed over the bytes of the open frame's, which the renderer can still record, and
//! each frame would silently overwrite the other's contents. It is refused the same way while a
//! resource of the previous frame is still held after the frame ended — a copy into it queued in
//! an [`Uploader`](crate::Uploader) and not yet submitted, a view of its image: such a holder can
//! still make the GPU write those bytes *after* the next frame's work (a queued copy is submitted
//! later), which no barrier of the next frame orders. Flush the uploader (or drop the view) first.

use crate::device::blocks::ResourceMemory;
use crate::device::blocks::{MemoryBlock, MemoryError, RawMemoryDesc};
use crate::device::life::{Garbage, Holder, Life, Parent, PendingUses};
use crate::device::Device;
use crate::error::VulkanError;
use crate::format_map::aspect;
use crate::memory::placement::PlacedWith;
use crate::resources::buffer::{create_raw_buffer, Buffer, BufferMemory, BufferObject, BufferParts};
use crate::resources::image::{Image, ImageDesc, ImageParts};
use crate::sync::recording::{check_scope, Recording};
use ash::vk;
use residency_core::allocator::ResourceKind;
use residency_core::memory::{memory_type_candidates, MemoryIntent};
use residency_core::sync::LastUses;
use residency_core::sync::{TransientDesc, TransientPlanner, TransientPlannerDesc, Use};
// The core's transient plan this module's frames return (crate docs: "The core's types").
pub use residency_core::sync::{FramePlan, TransientReport};
use residency_core::usage::BufferUsage;
use std::ops::RangeInclusive;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};

/// A transient resource a frame asks for.
#[derive(Clone, Debug)]
pub enum TransientRequest {
    /// A buffer.
    Buffer {
        /// Name.
        name: String,
        /// Size in bytes.
        size: u64,
        /// Usage.
        usage: BufferUsage,
        /// Passes that use it.
        passes: RangeInclusive<u32>,
        /// Its first and last uses.
        uses: (Use, Use),
    },
    /// An image (optimal tiling, or linear with [`ImageDesc::linear`]: then placed as a linear
    /// resource, off optimal images' `bufferImageGranularity` pages).
    Image {
        /// Its description (the memory fields are ignored).
        desc: ImageDesc,
        /// Passes that use it.
        passes: RangeInclusive<u32>,
        /// Its first and last uses.
        uses: (Use, Use),
    },
}

/// A frame's transient resources, alive until the frame is dropped (or given to
/// [`TransientPool::end_frame`]). Its pool begins no other frame until then.
#[derive(Debug)]
pub struct TransientFrame {
    buffers: Vec<Option<Buffer>>,
    images: Vec<Option<Image>>,
    plan: FramePlan,
    requests: Vec<TransientRequest>,
    /// Per resource: its bytes may have been used by an earlier frame still on the GPU.
    reused: Vec<bool>,
    /// The device its pool placed it on.
    device: Arc<Device>,
    /// Its pool's "a frame is open" flag, lowered when the frame is dropped.
    open: Arc<AtomicBool>,
}

impl Drop for TransientFrame {
    fn drop(&mut self) {
        self.open.store(false, Ordering::Release);
    }
}

impl TransientFrame {
    /// The buffer of request `index` (None if that request is an image).
    pub fn buffer(&self, index: usize) -> Option<&Buffer> {
        self.buffers.get(index).and_then(Option::as_ref)
    }

    /// The image of request `index` (None if that request is a buffer).
    pub fn image(&self, index: usize) -> Option<&Image> {
        self.images.get(index).and_then(Option::as_ref)
    }

    /// Peak bytes vs sum of sizes and the lower bound.
    pub fn report(&self) -> TransientReport {
        self.plan.report
    }

    /// The plan (placements, aliasing barriers, heap growth).
    pub fn plan(&self) -> &FramePlan {
        &self.plan
    }
}

/// Heaps for transient resources on one device, reused frame after frame.
///
/// # Algorithm
///
/// [`begin_frame`](Self::begin_frame) creates the frame's buffers and images unbound, reads
/// their requirements, and lets the core's [`TransientPlanner`] place them (`# Algorithm`
/// there: largest first, lowest offset that overlaps nothing live in the same passes, heaps that
/// persist and grow); a heap that grew is replaced by a new `VkDeviceMemory` (the old one
/// retires after the frames placed in it), then every resource is bound at its offset. Nothing
/// is freed one by one: the frame's resources are released together when it ends, after the GPU
/// work that used them, and the next frame is planned over the same heaps.
///
/// # Efficiency
///
/// - Time per frame: the planner's O(h · n² log n) for n resources in h heaps (568 µs for 150 resources over 50
///   passes, `docs/benchmarks.md`, "`sync`"), plus one create, one requirements query and one
///   bind per resource; a heap allocation only when a frame outgrows the heaps.
/// - Memory: the heaps reach the largest lower bound of the frames (the most bytes live in one
///   pass): 1.000× of it after 32 frames in that benchmark, 17 % of the unaliased sum on average;
///   per resource, its `Buffer` or `Image`.
/// - Locking: no lock of its own: `begin_frame` takes `&mut self`, one frame open at a time.
#[derive(Debug)]
pub struct TransientPool {
    device: Arc<Device>,
    name: String,
    planner: TransientPlanner,
    heaps: Vec<Option<Arc<TransientHeap>>>,
    type_index: Option<u32>,
    /// Whether a frame of this pool is open (begun, not yet ended or dropped).
    open: Arc<AtomicBool>,
    /// The lives of the last frame's resources: while one is still held after the frame ended
    /// (an uploader's queued copy, a view), its bytes are not placed again.
    previous: Vec<Weak<Life>>,
}

/// `VkBuffer`s and `VkImage`s of a frame being created, not yet handed to a resource: destroyed
/// when the guard drops (every error path of `begin_frame`).
struct Unbound<'a> {
    device: &'a Device,
    buffers: Vec<Option<(vk::Buffer, String, u64, BufferUsage)>>,
    images: Vec<Option<vk::Image>>,
}

impl Drop for Unbound<'_> {
    fn drop(&mut self) {
        // SAFETY: what is left was created by `begin_frame` on this device and never used by the
        // GPU (it was not handed to a frame); bound ones are bound to heaps that outlive them.
        unsafe {
            for (raw, ..) in self.buffers.iter().flatten() {
                self.device.raw().destroy_buffer(*raw, None);
            }
            for raw in self.images.iter().flatten() {
                self.device.raw().destroy_image(*raw, None);
            }
        }
    }
}

/// One heap of a transient pool: kept alive by the pool and by the frame resources bound in it.
#[derive(Debug)]
pub(crate) struct TransientHeap {
    device: Arc<Device>,
    block: Option<MemoryBlock>,
    pending: PendingUses,
    name: String,
}

impl Parent for TransientHeap {
    fn note_pending(&self, uses: &LastUses) {
        self.pending.note(uses);
    }

    fn name(&self) -> String {
        self.name.clone()
    }
}

impl Drop for TransientHeap {
    fn drop(&mut self) {
        if let Some(block) = self.block.take() {
            // Retires after the work submitted so far and every deferred resource bound in it.
            let uses = self.pending.take();
            self.device.retire(Garbage::Memory(Box::new(block)), uses);
        }
    }
}

impl TransientHeap {
    fn block(&self) -> &MemoryBlock {
        self.block.as_ref().expect("a heap has its block until it drops")
    }
}

fn failed(name: &str, reason: impl Into<String>) -> MemoryError {
    MemoryError::Unsatisfiable { name: name.to_owned(), reason: reason.into() }
}

impl TransientPool {
    /// A pool with no heaps yet.
    pub fn new(device: Arc<Device>, name: &str) -> Result<TransientPool, MemoryError> {
        let desc = TransientPlannerDesc {
            granularity: device.limits().buffer_image_granularity,
            ..TransientPlannerDesc::default()
        };
        let planner = TransientPlanner::new(desc).map_err(|e| failed(name, e.to_string()))?;
        Ok(TransientPool {
            device,
            name: name.to_owned(),
            planner,
            heaps: Vec::new(),
            type_index: None,
            open: Arc::new(AtomicBool::new(false)),
            previous: Vec::new(),
        })
    }

    /// Bytes of every heap.
    pub fn heap_bytes(&self) -> u64 {
        self.heaps.iter().flatten().map(|h| h.block().size).sum()
    }

    /// Creates, plans and binds a frame's resources.
    ///
    /// Refused while the previous frame is open (not yet given to [`TransientPool::end_frame`]
    /// or dropped), with [`MemoryError::Unsatisfiable`] and nothing created: the new frame would
    /// be placed over the bytes the open frame's resources still own. Refused the same way while
    /// a resource of the previous frame is still held after it ended (a copy into it queued in
    /// an [`Uploader`](crate::Uploader), not yet submitted; a view of its image): that holder
    /// could make the GPU write those bytes after this frame's work. Flush the uploader, or drop
    /// the holder, first.
    ///
    /// Every request's first and last use must be one the device allows in a barrier (core
    /// stages, each access performed by one of them: see
    /// [`BarrierError`](crate::recording::BarrierError)); otherwise nothing is created.
    pub fn begin_frame(&mut self, requests: &[TransientRequest]) -> Result<TransientFrame, MemoryError> {
        if self.open.load(Ordering::Acquire) {
            return Err(failed(
                &self.name,
                "a frame of this pool is still open: end (or drop) it before beginning the next",
            ));
        }
        if let Some(held) = self.previous.iter().position(|life| life.strong_count() > 0) {
            return Err(failed(
                &self.name,
                format!(
                    "resource {held} of the previous frame is still held after the frame ended (a \
                     copy into it queued in an uploader, a view of its image): its bytes are not \
                     placed again until it is released — flush the uploader or drop the holder first"
                ),
            ));
        }
        for request in requests {
            let (name, uses) = match request {
                TransientRequest::Buffer { name, uses, .. } => (name, uses),
                TransientRequest::Image { desc, uses, .. } => (&desc.name, uses),
            };
            for u in [uses.0, uses.1] {
                let info = u.info();
                check_scope(
                    &self.device.features(),
                    vk::PipelineStageFlags2::from_raw(info.stages.bits()),
                    vk::AccessFlags2::from_raw(info.access.bits()),
                )
                .map_err(|e| failed(name, format!("{u:?}: {e}")))?;
            }
        }
        let device = Arc::clone(&self.device);
        // What is created but not yet handed to a resource; destroyed on every early return.
        let mut unbound = Unbound { device: &device, buffers: Vec::new(), images: Vec::new() };
        let mut descs = Vec::new();
        let mut bits = !0u32;
        for request in requests {
            let made = match request {
                TransientRequest::Buffer { name, size, usage, passes, uses } => {
                    create_raw_buffer(&device, name, *size, *usage).map(|(raw, req)| {
                        bits &= req.memory_type_bits;
                        // The usage's offset floors (descriptors, acceleration structures, build
                        // scratch, shader tables) on top of the driver's alignment.
                        let alignment = req.alignment.max(device.usage_floor(*usage)).max(1);
                        descs.push(
                            TransientDesc::buffer(name.clone(), req.size, alignment, passes.clone())
                                .with_uses(uses.0, uses.1),
                        );
                        unbound.buffers.push(Some((raw, name.clone(), *size, *usage)));
                        unbound.images.push(None);
                    })
                }
                TransientRequest::Image { desc, passes, uses } => {
                    let created = device.check_image(desc).and_then(|()| {
                        // SAFETY: the description was checked against the device's format
                        // properties and limits just above (`check_image`).
                        unsafe { device.raw().create_image(&desc.create_info(), None) }
                            .map_err(|r| VulkanError::from_vk("vkCreateImage", r).into())
                    });
                    match created {
                        Ok(raw) => {
                            device.set_name(raw, &desc.name);
                            // SAFETY: raw was just created.
                            let req = unsafe { device.raw().get_image_memory_requirements(raw) };
                            bits &= req.memory_type_bits;
                            // A linear-tiling image is a linear resource for
                            // `bufferImageGranularity`: kept off optimal images' pages.
                            let kind = if desc.linear { ResourceKind::Linear } else { ResourceKind::Optimal };
                            descs.push(
                                TransientDesc {
                                    kind,
                                    ..TransientDesc::image(
                                        desc.name.clone(),
                                        req.size,
                                        req.alignment,
                                        passes.clone(),
                                    )
                                }
                                .with_uses(uses.0, uses.1),
                            );
                            unbound.images.push(Some(raw));
                            unbound.buffers.push(None);
                            Ok(())
                        }
                        Err(e) => Err(e),
                    }
                }
            };
            made?;
        }
        let type_index = match self.type_index {
            Some(t) if bits & (1 << t) != 0 => t,
            Some(t) => {
                return Err(failed(
                    &self.name,
                    format!("the frame's resources cannot share the pool's memory type {t}"),
                ));
            }
            None => match memory_type_candidates(
                &device.memory_properties().types,
                bits,
                MemoryIntent::DeviceLocal,
            )
            .first()
            {
                Some(&t) => t,
                None => {
                    return Err(MemoryError::NoSuitableMemoryType {
                        name: self.name.clone(),
                        allowed_bits: bits,
                        intent: MemoryIntent::DeviceLocal,
                    });
                }
            },
        };
        // Planning grows the planner's heaps; on a failure below, the planner and the heaps go
        // back to how they were, so the next frame plans against the heaps that exist.
        let before = self.planner.clone();
        let plan = self.planner.plan(&descs).map_err(|e| failed(&self.name, e.to_string()))?;
        let mut new_heaps = Vec::with_capacity(plan.growth.len());
        for growth in &plan.growth {
            let name = format!("{} heap {}", self.name, growth.heap);
            let desc = RawMemoryDesc {
                name: &name,
                size: growth.new_size,
                type_index,
                allow_over_budget: false,
                dedicated: None,
                priority: crate::device::blocks::DEFAULT_PRIORITY,
            };
            match MemoryBlock::new(&device, desc, 1) {
                Ok(block) => new_heaps.push((
                    growth.heap,
                    Arc::new(TransientHeap {
                        device: Arc::clone(&device),
                        block: Some(block),
                        pending: PendingUses::default(),
                        name,
                    }),
                )),
                Err(e) => {
                    self.planner = before;
                    // The blocks made so far go with `new_heaps` (never used by the GPU).
                    return Err(e);
                }
            }
        }
        let mut grown =
            vec![false; self.heaps.len().max(plan.growth.iter().map(|g| g.heap + 1).max().unwrap_or(0))];
        for (heap, new) in new_heaps {
            if self.heaps.len() <= heap {
                self.heaps.resize_with(heap + 1, || None);
            }
            // The old heap retires after the frames still placed in it (they hold it).
            self.heaps[heap] = Some(new);
            grown[heap] = true;
        }
        self.type_index = Some(type_index);
        let mut out_buffers = Vec::with_capacity(requests.len());
        let mut out_images = Vec::with_capacity(requests.len());
        let mut reused = Vec::with_capacity(requests.len());
        let mut bind_error = None;
        for (i, placement) in plan.placements.iter().enumerate() {
            let heap = self.heaps[placement.heap].as_ref().expect("planned heaps exist");
            let block = heap.block();
            reused.push(!grown.get(placement.heap).copied().unwrap_or(false));
            let parent: Arc<dyn Parent> = Arc::clone(heap) as Arc<dyn Parent>;
            let (memory, offset) = (block.memory, placement.offset);
            if let Some((raw, name, size, usage)) = unbound.buffers[i].take() {
                let buffer = Buffer::new(BufferParts {
                    holder: Holder::Device(device.arc(), Some(parent)),
                    name: Arc::from(name.as_str()),
                    size,
                    usage,
                    object: BufferObject::Placed(raw),
                    owner: ResourceMemory::Transient,
                    memory: BufferMemory { memory, offset, memory_size: block.size, mapped: None },
                    coherent: false,
                    pool: None,
                    movable: true,
                    placed_with: PlacedWith::driver(descs[i].size, descs[i].alignment),
                });
                // SAFETY: raw is unbound; the planner placed it at an offset aligned for it inside the heap.
                if let Err(r) = unsafe { device.raw().bind_buffer_memory(raw, memory, offset) } {
                    bind_error.get_or_insert(VulkanError::from_vk("vkBindBufferMemory", r));
                }
                out_buffers.push(Some(buffer));
                out_images.push(None);
            } else if let Some(raw) = unbound.images[i].take() {
                // SAFETY: as above, for the image.
                if let Err(r) = unsafe { device.raw().bind_image_memory(raw, memory, offset) } {
                    bind_error.get_or_insert(VulkanError::from_vk("vkBindImageMemory", r));
                }
                let TransientRequest::Image { desc, .. } = &requests[i] else {
                    unreachable!("an image request")
                };
                // The bytes it occupies in the heap, as for any placed image (copies check that a
                // buffer they write shares none of them).
                // SAFETY: `raw` is a live image of this device; a pure query.
                let size = unsafe { device.raw().get_image_memory_requirements(raw) }.size;
                out_images.push(Some(Image::new(ImageParts {
                    device: device.arc(),
                    raw,
                    desc: desc.clone(),
                    owner: ResourceMemory::Transient,
                    parent: Some(parent),
                    memory,
                    memory_offset: offset,
                    size,
                    committed: false,
                    placed_with: PlacedWith::driver(descs[i].size, descs[i].alignment),
                })));
                out_buffers.push(None);
            }
        }
        self.previous = out_buffers
            .iter()
            .flatten()
            .map(|b: &Buffer| Arc::downgrade(b.life()))
            .chain(out_images.iter().flatten().map(|i: &Image| Arc::downgrade(i.life())))
            .collect();
        let frame = TransientFrame {
            buffers: out_buffers,
            images: out_images,
            plan,
            requests: requests.to_vec(),
            reused,
            device: Arc::clone(&device),
            open: Arc::clone(&self.open),
        };
        self.open.store(true, Ordering::Release);
        if let Some(e) = bind_error {
            self.end_frame(frame);
            return Err(e.into());
        }
        Ok(frame)
    }

    /// Records the barriers needed before `pass`: for every resource first used there, the
    /// aliasing barrier from the previous occupants of its bytes, and for images the transition
    /// from `UNDEFINED` to their first use's layout. Returns how many barriers were recorded.
    ///
    /// A recording or a frame of another device than the pool's is
    /// [`VulkanError::WrongDevice`] and records nothing. The recording holds the frame's resources
    /// it names until its submission.
    pub fn record_pass_start(
        &self,
        rec: &mut Recording<'_>,
        frame: &TransientFrame,
        pass: u32,
    ) -> Result<usize, VulkanError> {
        rec.accepts(&self.name, &self.device)?;
        rec.accepts(&self.name, &frame.device)?;
        let device = &*self.device;
        let stages = |s: residency_core::sync::PipelineStages| vk::PipelineStageFlags2::from_raw(s.bits());
        let access = |a: residency_core::sync::AccessFlags| vk::AccessFlags2::from_raw(a.bits());
        let mut buffer_barriers = Vec::new();
        let mut image_barriers = Vec::new();
        let mut lives = Vec::new();
        let mut transitions = Vec::new();
        for (i, request) in frame.requests.iter().enumerate() {
            let (passes, uses) = match request {
                TransientRequest::Buffer { passes, uses, .. }
                | TransientRequest::Image { passes, uses, .. } => (passes, uses),
            };
            if *passes.start() != pass {
                continue;
            }
            let aliasing = frame.plan.aliasing.iter().find(|a| a.resource == i);
            let first = uses.0.info();
            // Bytes an earlier frame may still use: wait for all earlier work on the queue.
            let after_previous_frame = frame.reused.get(i).copied().unwrap_or(false);
            let (src_stages, src_access) = match aliasing {
                Some(a) => (stages(a.src.stages), access(a.src.access)),
                None if after_previous_frame => {
                    (vk::PipelineStageFlags2::ALL_COMMANDS, vk::AccessFlags2::MEMORY_WRITE)
                }
                None => (vk::PipelineStageFlags2::NONE, vk::AccessFlags2::NONE),
            };
            let (dst_stages, dst_access) = (stages(first.stages), access(first.access));
            if let Some(buffer) = frame.buffer(i) {
                if aliasing.is_some() || after_previous_frame {
                    lives.push(buffer.life());
                    buffer_barriers.push(
                        vk::BufferMemoryBarrier2::default()
                            .src_stage_mask(src_stages)
                            .src_access_mask(src_access)
                            .dst_stage_mask(dst_stages)
                            .dst_access_mask(dst_access)
                            .buffer(buffer.raw())
                            .offset(0)
                            .size(vk::WHOLE_SIZE),
                    );
                }
            } else if let Some(image) = frame.image(i) {
                let layout =
                    first.layout.map_or(vk::ImageLayout::GENERAL, |l| vk::ImageLayout::from_raw(l.as_raw()));
                lives.push(image.life());
                transitions.push((image.layouts(), image.full_range(), layout));
                image_barriers.push(
                    vk::ImageMemoryBarrier2::default()
                        .src_stage_mask(src_stages)
                        .src_access_mask(src_access)
                        .dst_stage_mask(dst_stages)
                        .dst_access_mask(dst_access)
                        .old_layout(vk::ImageLayout::UNDEFINED)
                        .new_layout(layout)
                        .image(image.raw())
                        .subresource_range(vk::ImageSubresourceRange {
                            aspect_mask: aspect(image.desc().format),
                            ..image.full_range()
                        }),
                );
            }
        }
        if buffer_barriers.is_empty() && image_barriers.is_empty() {
            return Ok(0);
        }
        for life in lives {
            rec.keep(life);
        }
        for (layouts, range, layout) in transitions {
            rec.transition(
                layouts,
                0..range.level_count,
                0..range.layer_count,
                vk::ImageLayout::UNDEFINED,
                layout,
            );
        }
        let info = vk::DependencyInfo::default()
            .buffer_memory_barriers(&buffer_barriers)
            .image_memory_barriers(&image_barriers);
        // SAFETY: `rec` is recording on this pool's device (checked above) outside a render pass
        // (the `Recording` invariant); every handle is a live transient resource of the frame,
        // which is on this device (checked above) and borrowed, and the recording now holds them
        // until its submission. The stages and accesses are the core's named uses and aliasing
        // scopes (or ALL_COMMANDS / MEMORY_WRITE); images go from UNDEFINED over their whole range
        // (any layout satisfies it), and the recording notes their first use's layout as what
        // the submission leaves them in.
        unsafe { device.raw().cmd_pipeline_barrier2(rec.raw(), &info) };
        rec.recorded();
        Ok(buffer_barriers.len() + image_barriers.len())
    }

    /// Releases the frame's resources (as dropping the frame does): each is destroyed once the GPU
    /// work that may use it has completed. The heaps stay for the next frame.
    pub fn end_frame(&mut self, frame: TransientFrame) {
        drop(frame);
    }
}
