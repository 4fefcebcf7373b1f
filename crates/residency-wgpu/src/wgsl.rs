//! The WGSL that residency ships for wgpu renderers: shader feedback and sampling on both
//! residency paths, and the bind-group layout that goes with them.
//!
//! WGSL has no includes: a shader is the concatenation of [`declarations`], [`FEEDBACK`] and the
//! path's sampling code ([`HARDWARE`] or [`SOFTWARE`]) followed by the renderer's own code, which
//! [`prelude`] puts together. Both paths define the same functions, so one renderer shader serves
//! both:
//!
//! - `residency_sample(uv, lod, fallback) -> vec4<f32>`: a sample at `lod` clamped to the finest
//!   resident coarser mip (`fallback` where nothing is resident);
//! - `residency_min_lod(uv) -> u32`, `residency_size() -> vec2<f32>` (mip 0's extent);
//! - `residency_lambda(uv, size) -> f32`: the unclamped LOD from derivatives (fragment stage,
//!   uniform control flow);
//! - `residency_feedback_write(slot, layer, uv, lambda, min_lod)` and
//!   `residency_feedback_pixel_writes(pixel, frame, stride, interval)`: residency's feedback
//!   format, decoded by the `Streamer`.
//!
//! The tests parse and validate every combination with naga (`tests/wgsl.rs`).

/// Shader feedback (the twin of residency-vulkan's `feedback.glsl`) and `residency_lambda`.
pub const FEEDBACK: &str = include_str!("../shaders/feedback.wgsl");
/// The hardware path: the sparse image sampled at a LOD clamped by the min-LOD map.
pub const HARDWARE: &str = include_str!("../shaders/hardware.wgsl");
/// The software path: the tile-cache atlas through the indirection texture.
pub const SOFTWARE: &str = include_str!("../shaders/software.wgsl");

/// Which residency path a shader samples.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ShaderPath {
    /// A sparse image and its min-LOD map.
    Hardware,
    /// An atlas and its indirection texture.
    Software,
}

/// The bindings of the residency resources, in order from the first binding given to
/// [`declarations`] and [`layout_entries`].
pub const BINDINGS: [&str; 5] =
    ["residency_tex", "residency_sampler", "residency_map", "residency_feedback", "residency_table"];

/// The WGSL declarations of the residency resources in bind group `group`, bindings `first`..`first + 5`:
/// the texture (sparse image or atlas), its sampler, the min-LOD map or indirection (`u32`), the
/// feedback buffer (read-write, atomics) and the feedback image table (read-only).
pub fn declarations(group: u32, first: u32) -> String {
    let b = |i: u32| first + i;
    format!(
        "@group({group}) @binding({}) var residency_tex: texture_2d<f32>;\n\
         @group({group}) @binding({}) var residency_sampler: sampler;\n\
         @group({group}) @binding({}) var residency_map: texture_2d<u32>;\n\
         @group({group}) @binding({}) var<storage, read_write> residency_feedback: array<atomic<u32>>;\n\
         @group({group}) @binding({}) var<storage, read> residency_table: array<u32>;\n",
        b(0),
        b(1),
        b(2),
        b(3),
        b(4)
    )
}

/// The declarations, the feedback code and the path's sampling code: what a renderer's shader
/// source starts with.
pub fn prelude(path: ShaderPath, group: u32, first: u32) -> String {
    let sampling = match path {
        ShaderPath::Hardware => HARDWARE,
        ShaderPath::Software => SOFTWARE,
    };
    format!("{}\n{FEEDBACK}\n{sampling}\n", declarations(group, first))
}

/// The bind-group layout entries of [`declarations`] (visible to `visibility`; feedback written
/// from a fragment shader needs `fragmentStoresAndAtomics`, which the bridge enables where the
/// adapter has it).
pub fn layout_entries(first: u32, visibility: wgpu::ShaderStages) -> [wgpu::BindGroupLayoutEntry; 5] {
    let entry = |i: u32, ty| wgpu::BindGroupLayoutEntry { binding: first + i, visibility, ty, count: None };
    let texture = |sample_type| wgpu::BindingType::Texture {
        sample_type,
        view_dimension: wgpu::TextureViewDimension::D2,
        multisampled: false,
    };
    let storage = |read_only| wgpu::BindingType::Buffer {
        ty: wgpu::BufferBindingType::Storage { read_only },
        has_dynamic_offset: false,
        min_binding_size: None,
    };
    [
        entry(0, texture(wgpu::TextureSampleType::Float { filterable: true })),
        entry(1, wgpu::BindingType::Sampler(wgpu::SamplerBindingType::Filtering)),
        entry(2, texture(wgpu::TextureSampleType::Uint)),
        entry(3, storage(false)),
        entry(4, storage(true)),
    ]
}
