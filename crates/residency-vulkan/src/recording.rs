//! Small command-recording helpers for callers that keep their own command buffers (a frame ring)
//! and want no `unsafe` of their own: a global memory barrier and a whole-image read-back copy.

use crate::buffer::Buffer;
use crate::device::Device;
use crate::format_map::aspect;
use crate::image::Image;
use crate::upload::ImageRegion;
use ash::vk;

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

impl Device {
    /// Records one global memory barrier into `cmd`, a command buffer of this device that is
    /// recording.
    pub fn cmd_memory_barrier(&self, cmd: vk::CommandBuffer, dependency: MemoryDependency) {
        let barrier = [vk::MemoryBarrier2::default()
            .src_stage_mask(dependency.src_stages)
            .src_access_mask(dependency.src_access)
            .dst_stage_mask(dependency.dst_stages)
            .dst_access_mask(dependency.dst_access)];
        // SAFETY: `cmd` is recording on this device (the caller's contract, as for every `cmd_*`
        // helper of this crate); the barrier lives until the call returns.
        unsafe {
            self.raw().cmd_pipeline_barrier2(cmd, &vk::DependencyInfo::default().memory_barriers(&barrier))
        };
    }

    /// Records a copy of mip 0, layer 0 of `image` (in `layout`) into the start of `buffer`,
    /// tightly packed; `cmd` is a recording command buffer of this device. The caller orders it
    /// against the image's writes and the host's read with barriers.
    pub fn cmd_copy_image_to_buffer(
        &self,
        cmd: vk::CommandBuffer,
        image: &Image,
        layout: vk::ImageLayout,
        buffer: &Buffer,
    ) -> Result<(), CopyTooSmall> {
        let d = image.desc();
        let needed = d.format.region_bytes(d.extent[0], d.extent[1], d.extent[2]);
        if buffer.size() < needed {
            return Err(CopyTooSmall {
                image: d.name.clone(),
                buffer: buffer.name().to_owned(),
                size: buffer.size(),
                needed,
            });
        }
        let copy = ImageRegion {
            image,
            layout,
            aspect: aspect(d.format),
            mip: 0,
            layer: 0,
            offset: [0; 3],
            extent: d.extent,
        }
        .buffer_image_copy(buffer.offset());
        // SAFETY: `cmd` is recording on this device; the image and buffer are live objects of this
        // device (borrowed for the call; the caller keeps them alive until the work completes) and
        // the buffer holds the whole mip (checked above).
        unsafe { self.raw().cmd_copy_image_to_buffer(cmd, image.raw(), layout, buffer.raw(), &[copy]) };
        Ok(())
    }
}

/// A pool of GPU timestamps: write pairs around work in a command buffer, read the elapsed time
/// once the work has completed.
#[derive(Debug)]
pub struct Timestamps {
    pool: vk::QueryPool,
    count: u32,
    period_ns: f64,
    /// Mask of the valid bits of a timestamp on the universal queue (0: no timestamps there).
    valid_mask: u64,
}

impl Timestamps {
    /// A pool of `count` timestamps.
    pub fn new(device: &Device, name: &str, count: u32) -> crate::Result<Timestamps> {
        use crate::error::VkResultExt;
        let info =
            vk::QueryPoolCreateInfo::default().query_type(vk::QueryType::TIMESTAMP).query_count(count.max(1));
        // SAFETY: valid device and create info.
        let pool = unsafe { device.raw().create_query_pool(&info, None) }.during("vkCreateQueryPool")?;
        device.set_name(pool, name);
        // SAFETY: a pure query on this device's physical device.
        let families =
            unsafe { device.instance().get_physical_device_queue_family_properties(device.physical()) };
        let bits =
            families.get(device.universal_queue().family() as usize).map_or(0, |f| f.timestamp_valid_bits);
        let valid_mask = if bits >= 64 { u64::MAX } else { (1u64 << bits) - 1 };
        Ok(Timestamps {
            pool,
            count: count.max(1),
            period_ns: f64::from(device.limits().timestamp_period),
            valid_mask,
        })
    }

    /// Records resetting timestamps `range` (before writing them again).
    pub fn cmd_reset(&self, device: &Device, cmd: vk::CommandBuffer, range: std::ops::Range<u32>) {
        let end = range.end.min(self.count);
        let start = range.start.min(end);
        // SAFETY: `cmd` is recording on this device, outside a render pass; the range is in the pool.
        unsafe { device.raw().cmd_reset_query_pool(cmd, self.pool, start, end - start) };
    }

    /// Whether the universal queue has timestamps at all (`timestampValidBits` > 0); without them
    /// writes record nothing and every elapsed time is `None`.
    pub fn supported(&self) -> bool {
        self.valid_mask != 0
    }

    /// Records writing timestamp `index` once all earlier commands have finished.
    pub fn cmd_write(&self, device: &Device, cmd: vk::CommandBuffer, index: u32) {
        if index < self.count && self.supported() {
            // SAFETY: `cmd` is recording on this device; the query was reset earlier in submission order.
            unsafe {
                device.raw().cmd_write_timestamp2(
                    cmd,
                    vk::PipelineStageFlags2::ALL_COMMANDS,
                    self.pool,
                    index,
                )
            };
        }
    }

    /// Milliseconds between timestamps `start` and `end`, once the work that wrote them has
    /// completed (`None` when the results are not available).
    pub fn elapsed_ms(&self, device: &Device, start: u32, end: u32) -> Option<f64> {
        if start >= self.count || end >= self.count || !self.supported() {
            return None;
        }
        let mut a = [0u64; 1];
        let mut b = [0u64; 1];
        // SAFETY: valid pool and indices; 64-bit results into slices of one.
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

    /// Destroys the pool; the caller has waited for every use.
    pub fn destroy(self, device: &Device) {
        // SAFETY: the pool belongs to this device and no pending work uses it (caller's contract).
        unsafe { device.raw().destroy_query_pool(self.pool, None) };
    }
}
