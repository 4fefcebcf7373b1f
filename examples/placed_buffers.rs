//! Placed buffers with their own usage, side by side in one heap.
//!
//! A buffer pool created with *unknown* bind flags holds a vertex buffer, an index buffer, a uniform
//! buffer and a storage buffer on one page: each is its own `VkBuffer` with its own usage, alignment
//! and debug name. They are filled through a staging upload, a compute shader (GLSL compiled to
//! SPIR-V) reads the first three and writes the fourth, the result is read back and checked on the
//! CPU, and everything is freed with no leaks.
//!
//! Run: `RESIDENCY_VALIDATION=sync cargo run --example placed_buffers`

use residency::vulkan::ash::vk;
use residency::vulkan::compute::{Binding, ComputeProgram};
use residency::vulkan::recording::MemoryDependency;
use residency::vulkan::recording::Recording;
use residency::vulkan::shaders;
use residency::vulkan::{
    BufferDesc, BufferInit, BufferPool, BufferPoolDesc, BufferPoolUsage, BufferUsage, Device, DeviceSet,
    DeviceSetDesc, MemoryIntent, Uploader,
};
use std::sync::Arc;

const COUNT: usize = 1000;

/// What the example measured, for the test that runs it.
#[derive(Debug)]
pub struct Outcome {
    /// The memory offset of each buffer in the shared page: vertices, indices, params, results.
    pub offsets: [u64; 4],
    /// Results that matched the CPU's computation.
    pub matched: usize,
}

fn vertex(i: usize) -> [f32; 4] {
    [i as f32, (i * 2) as f32, -(i as f32), 1.0]
}

fn index(i: usize) -> u32 {
    ((i * 7919) % COUNT) as u32
}

fn vec4_bytes(values: &[[f32; 4]]) -> Vec<u8> {
    values.iter().flatten().flat_map(|f| f.to_le_bytes()).collect()
}

/// Runs the example on `device`.
pub fn run(device: &Arc<Device>) -> Result<Outcome, Box<dyn std::error::Error>> {
    let pool = BufferPool::new(
        Arc::clone(device),
        BufferPoolDesc::new("placed example", BufferPoolUsage::Unknown).with_page_size(4 << 20),
    )?;
    let dst = BufferUsage::COPY_DST;
    let vertices = pool.init_buffer(
        &BufferInit::new("vertices", (COUNT * 16) as u64)
            .with_usage(BufferUsage::VERTEX | BufferUsage::STORAGE | dst),
    )?;
    let indices = pool.init_buffer(
        &BufferInit::new("indices", (COUNT * 4) as u64)
            .with_usage(BufferUsage::INDEX | BufferUsage::STORAGE | dst),
    )?;
    let params = pool.init_buffer(
        &BufferInit::new("params", 48).with_usage(BufferUsage::UNIFORM | dst).with_alignment(256),
    )?;
    let results = pool.init_buffer(
        &BufferInit::new("results", (COUNT * 16) as u64)
            .with_usage(BufferUsage::STORAGE | BufferUsage::COPY_SRC),
    )?;
    let placed = [&vertices, &indices, &params, &results];
    let page = vertices.memory().0;
    assert!(placed.iter().all(|b| b.memory().0 == page), "all four buffers share one heap page");
    println!("{:<10} {:>8} {:>8}  usage", "buffer", "offset", "size");
    for b in placed {
        println!("{:<10} {:>8} {:>8}  {:?}", b.name(), b.memory().1, b.size(), b.usage());
    }

    let readback = device.create_buffer(
        &BufferDesc::new("results readback", results.size(), BufferUsage::COPY_DST)
            .with_intent(MemoryIntent::Readback),
    )?;
    let uploader = Uploader::new(device, "example", 1 << 20)?;
    let vertex_data: Vec<[f32; 4]> = (0..COUNT).map(vertex).collect();
    let index_data: Vec<u32> = (0..COUNT).map(index).collect();
    let scale = [2.0f32, 0.5, 1.0, 1.0];
    let bias = [1.0f32, -1.0, 0.0, 0.0];
    let mut param_data = vec4_bytes(&[scale, bias]);
    param_data.extend_from_slice(&(COUNT as u32).to_le_bytes());
    param_data.resize(48, 0);
    uploader.write_buffer(&vertices, 0, &vec4_bytes(&vertex_data))?;
    let index_bytes: Vec<u8> = index_data.iter().flat_map(|i| i.to_le_bytes()).collect();
    uploader.write_buffer(&indices, 0, &index_bytes)?;
    uploader.write_buffer(&params, 0, &param_data)?;
    uploader.flush()?;

    let program = ComputeProgram::new(device, "placed_buffers.comp", &shaders::PLACED_BUFFERS, 1)?;
    let set = program.descriptor_set(&[
        Binding::Buffer(&vertices),
        Binding::Buffer(&indices),
        Binding::Buffer(&params),
        Binding::Buffer(&results),
    ])?;
    let groups = [COUNT.div_ceil(64) as u32, 1, 1];
    program.check_dispatch(&[], groups)?;
    let record = |rec: &mut Recording<'_>| -> Result<(), Box<dyn std::error::Error>> {
        program.dispatch(rec, &set, &[], groups)?;
        rec.memory_barrier(MemoryDependency {
            src_stages: vk::PipelineStageFlags2::COMPUTE_SHADER,
            src_access: vk::AccessFlags2::SHADER_STORAGE_WRITE,
            dst_stages: vk::PipelineStageFlags2::COPY,
            dst_access: vk::AccessFlags2::TRANSFER_READ,
        })?;
        rec.copy_buffer(&results, 0, &readback, 0, results.size())?;
        rec.memory_barrier(MemoryDependency {
            src_stages: vk::PipelineStageFlags2::COPY,
            src_access: vk::AccessFlags2::TRANSFER_WRITE,
            dst_stages: vk::PipelineStageFlags2::HOST,
            dst_access: vk::AccessFlags2::HOST_READ,
        })?;
        Ok(())
    };
    let mut recorded = Ok(());
    device.submit_once("placed example dispatch", |rec| recorded = record(rec))?;
    recorded?;

    let mut out = vec![0u8; results.size() as usize];
    readback.read(0, &mut out)?;
    let floats: Vec<f32> =
        out.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect();
    let matched = (0..COUNT)
        .filter(|&i| {
            let v = vertex(index(i) as usize);
            (0..4).all(|c| floats[i * 4 + c] == v[c] * scale[c] + bias[c])
        })
        .count();
    println!("{matched} of {COUNT} results match the CPU");

    let offsets = [vertices.memory().1, indices.memory().1, params.memory().1, results.memory().1];
    drop(program);
    uploader.destroy()?;
    drop(readback);
    for b in [vertices, indices, params, results] {
        pool.free_buffer(b).map_err(|refused| refused.to_string())?;
    }
    drop(pool);
    Ok(Outcome { offsets, matched })
}

#[allow(dead_code, reason = "the test that runs this example calls `run` and not `main`")]
fn main() -> Result<(), Box<dyn std::error::Error>> {
    tracing_subscriber::fmt().with_env_filter("warn").init();
    let set = DeviceSet::new(&DeviceSetDesc::default())?;
    let outcome = run(&set.devices()[0])?;
    let problems = set.validation_log().problem_count();
    drop(set);
    let leaks = residency::vulkan::LEAKS_AT_TEARDOWN.load(std::sync::atomic::Ordering::SeqCst);
    println!("validation problems: {problems}, objects leaked at teardown: {leaks}");
    if outcome.matched != COUNT || problems != 0 || leaks != 0 {
        return Err("the example failed its checks".into());
    }
    Ok(())
}
