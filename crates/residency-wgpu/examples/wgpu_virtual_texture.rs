//! A wgpu renderer drawing four virtual textures that residency's `Streamer` streams from WGSL
//! feedback, on one `VkDevice` (`residency_wgpu::open`).
//!
//! Four planes lie on the ground, each with a procedural virtual texture (2048² or 1024², detail
//! at every mip). A camera glides from high over the four down to a low view across them, where it
//! rests for the second half of the run. The renderer is wgpu's: a render pipeline whose WGSL
//! fragment shader samples each plane's texture with `residency_sample` and writes feedback with
//! `residency_feedback_write` (`residency_wgpu::wgsl`), its own render targets (one per frame in
//! flight) and two frames in flight. The streamer primes each texture's coarse chain before
//! frame 0, reads the feedback, loads the tiles on its workers and binds them; each frame its
//! part (bind waits, feedback reset, staged copies) is recorded into a wgpu command buffer of its
//! own (`Bridge::record_streamer_part`) and submitted with the renderer's
//! (`Bridge::submit_streamer_frame`), whose point ends the frame for the streamer.
//!
//! The streaming code is what lies between the `// streaming: begin` and `// streaming: end`
//! comments. At the end the last frame is compared with the same view drawn from fully resident
//! copies of the textures (wgpu textures with every mip, the same LOD rule).
//!
//! Run: `RESIDENCY_VALIDATION=sync cargo run -p residency-wgpu --example wgpu_virtual_texture [-- hardware|software]`

use residency_vulkan::sparse::ResidencyPath;
use residency_vulkan::streaming::{
    FnSource, SourceError, Streamer, StreamerDesc, TileSource, VirtualTexture, VtDesc,
};
use residency_vulkan::Format;
use residency_wgpu::wgsl::{self, ShaderPath};
use residency_wgpu::{Bridge, BridgeDesc};
use std::sync::Arc;

type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>;

/// Frames drawn by default.
pub const FRAMES: u64 = 24;
const SIDE: u32 = 256;
const IN_FLIGHT: usize = 2;
/// World-space corner of each 1 × 1 plane on the ground and its texture's side.
const PLANES: [([f32; 2], u32); 4] =
    [([0.0, 0.0], 2048), ([1.1, 0.0], 1024), ([0.0, 1.1], 1024), ([1.1, 1.1], 2048)];
/// The fallback colour where nothing is resident.
pub const MAGENTA: [u8; 4] = [255, 0, 255, 255];
/// The clear colour.
const CLEAR: [u8; 4] = [13, 13, 20, 255];
const TARGET_FORMAT: wgpu::TextureFormat = wgpu::TextureFormat::Rgba8Unorm;

/// What a run found.
#[derive(Debug)]
pub struct Outcome {
    /// The path the textures took.
    pub path: ResidencyPath,
    /// Frames drawn.
    pub frames: u64,
    /// Pixels of frame 0 in the fallback colour (priming makes this 0).
    pub magenta_frame0: usize,
    /// Pixels of frame 0 that show a plane (not the clear colour).
    pub textured_frame0: usize,
    /// Tiles streamed after priming, asked for by the WGSL feedback alone.
    pub streamed_tiles: u64,
    /// PSNR of the last frame against the fully resident render.
    pub psnr_last_db: f64,
    /// Validation messages (warnings and errors) over the run.
    pub validation_problems: usize,
    /// The streamer's CPU time per frame (`begin_frame`, the recorded part, `end_frame`): mean,
    /// in ms.
    pub streamer_cpu_ms_mean: f64,
    /// The same, 99th percentile.
    pub streamer_cpu_ms_p99: f64,
    /// Request-to-resident latency in frames, median.
    pub latency_frames_p50: u32,
    /// The same, 95th percentile.
    pub latency_frames_p95: u32,
}

/// The texel of texture `index` at (u, v) of `mip`: stripes and rings with detail at every mip.
fn texel(index: usize, mip: u32, u: f32, v: f32) -> [u8; 4] {
    let f = (8 << index.min(3)) as f32;
    let wave = |x: f32| (x * std::f32::consts::TAU).sin() * 0.5 + 0.5;
    let ring = wave(((u - 0.5).powi(2) + (v - 0.5).powi(2)).sqrt() * f * 4.0);
    let fine = wave(u * f * 16.0) * wave(v * f * 16.0) / (1.0 + mip as f32);
    let tint = [[1.0, 0.6, 0.2], [0.3, 0.8, 1.0], [0.5, 1.0, 0.4], [1.0, 0.4, 0.6]][index];
    let c = |i: usize| ((0.2 + 0.5 * ring + 0.3 * fine) * tint[i] * 255.0).min(255.0) as u8;
    [c(0), c(1), c(2), 255]
}

/// Texture `index` as a tile source.
pub fn source(index: usize) -> Arc<dyn TileSource> {
    let side = PLANES[index].1;
    let desc = VtDesc::new(Format::R8G8B8A8Unorm, side, side, 128, 128);
    let read = move |mip: u32, x: u32, y: u32| {
        let missing = || SourceError::NoSuchTile { source_name: format!("plane {index}"), mip, x, y };
        let (w, h) = desc.tile_extent(mip, x, y).ok_or_else(missing)?;
        let (mw, mh) = desc.mip_extent(mip);
        let (x0, y0) = (x * desc.tile_width, y * desc.tile_height);
        let pixel = |(i, j): (u32, u32)| {
            texel(index, mip, (i as f32 + 0.5) / mw as f32, (j as f32 + 0.5) / mh as f32)
        };
        Ok((y0..y0 + h).flat_map(|j| (x0..x0 + w).map(move |i| (i, j))).flat_map(pixel).collect())
    };
    Arc::new(FnSource::new(format!("plane {index}"), desc, read))
}

/// The world → clip matrix (column-major, wgpu clip space, 60° vertical field of view) of frame
/// `frame` of `frames`: the eye glides from high over the planes to a low view across them, then
/// rests for the second half.
fn camera(frame: u64, frames: u64) -> [f32; 16] {
    let t = (frame as f32 / (frames as f32 * 0.5).max(1.0)).min(1.0);
    let s = t * t * (3.0 - 2.0 * t);
    let eye = [-0.2 + 0.3 * s, -0.2 + 0.2 * s, 1.6 - 1.3 * s];
    let norm = |a: [f32; 3]| a.map(|c| c / (a[0] * a[0] + a[1] * a[1] + a[2] * a[2]).sqrt());
    let f = norm([1.05 - eye[0], 1.05 - eye[1], -eye[2]]);
    let r = norm([f[1], -f[0], 0.0]);
    let u = [r[1] * f[2] - r[2] * f[1], r[2] * f[0] - r[0] * f[2], r[0] * f[1] - r[1] * f[0]];
    let (g, near, far) = (1.0 / 30f32.to_radians().tan(), 0.02, 20.0);
    let d = far / (far - near);
    // A row of the matrix: axis `v` scaled by `k`, translated by the eye, plus `o`.
    let row = |v: [f32; 3], k: f32, o: f32| {
        let w = v.map(|c| c * k);
        [w[0], w[1], w[2], o - (w[0] * eye[0] + w[1] * eye[1] + w[2] * eye[2])]
    };
    let rows = [row(r, g, 0.0), row(u, g, 0.0), row(f, d, -near * d), row(f, 1.0, 0.0)];
    std::array::from_fn(|i| rows[i % 4][i / 4])
}

/// The renderer's WGSL after the residency prelude: planes drawn by instance, sampled on the
/// residency path (`fs`) or from a fully resident texture (`fs_reference`, the same LOD rule).
const SCENE: &str = r#"
struct Frame { view: mat4x4<f32>, feedback: vec4<u32>, slots: vec4<u32> };
@group(1) @binding(0) var<uniform> frame: Frame;
struct Out { @builtin(position) pos: vec4<f32>, @location(0) uv: vec2<f32>, @location(1) @interpolate(flat) plane: u32 };

@vertex
fn vs(@location(0) p: vec3<f32>, @location(1) uv: vec2<f32>, @builtin(instance_index) plane: u32) -> Out {
    return Out(frame.view * vec4<f32>(p, 1.0), uv, plane);
}

@fragment
fn fs(in: Out) -> @location(0) vec4<f32> {
    let lambda = residency_lambda(in.uv, residency_size());
    let colour = residency_sample(in.uv, max(lambda, 0.0), vec4<f32>(1.0, 0.0, 1.0, 1.0));
    let f = frame.feedback;
    if (f.w != 0u && residency_feedback_pixel_writes(vec2<u32>(in.pos.xy), f.x, f.y, f.z)) {
        residency_feedback_write(frame.slots[in.plane], 0u, in.uv, lambda, residency_min_lod(in.uv));
    }
    return colour;
}

@fragment
fn fs_reference(in: Out) -> @location(0) vec4<f32> {
    let lambda = residency_lambda(in.uv, vec2<f32>(textureDimensions(residency_tex, 0)));
    return textureSampleLevel(residency_tex, residency_sampler, in.uv, max(lambda, 0.0));
}
"#;

/// The renderer's objects: pipelines, layouts, vertices, targets, read-back buffers.
struct Renderer {
    pipeline: wgpu::RenderPipeline,
    reference: wgpu::RenderPipeline,
    textures: wgpu::BindGroupLayout,
    frame_layout: wgpu::BindGroupLayout,
    sampler: wgpu::Sampler,
    vertices: wgpu::Buffer,
    uniforms: Vec<wgpu::Buffer>,
    targets: Vec<(wgpu::Texture, wgpu::Buffer)>,
}

impl Renderer {
    fn new(bridge: &Bridge, path: ShaderPath) -> Renderer {
        let device = bridge.device();
        let source = format!("{}{SCENE}", wgsl::prelude(path, 0, 0));
        let module = device.create_shader_module(wgpu::ShaderModuleDescriptor {
            label: Some("planes"),
            source: wgpu::ShaderSource::Wgsl(source.into()),
        });
        let stages = wgpu::ShaderStages::FRAGMENT;
        let textures = device.create_bind_group_layout(&wgpu::BindGroupLayoutDescriptor {
            label: Some("residency"),
            entries: &wgsl::layout_entries(0, stages),
        });
        let frame_layout = device.create_bind_group_layout(&wgpu::BindGroupLayoutDescriptor {
            label: Some("frame"),
            entries: &[wgpu::BindGroupLayoutEntry {
                binding: 0,
                visibility: wgpu::ShaderStages::VERTEX_FRAGMENT,
                ty: wgpu::BindingType::Buffer {
                    ty: wgpu::BufferBindingType::Uniform,
                    has_dynamic_offset: false,
                    min_binding_size: None,
                },
                count: None,
            }],
        });
        let layout = device.create_pipeline_layout(&wgpu::PipelineLayoutDescriptor {
            label: Some("planes"),
            bind_group_layouts: &[Some(&textures), Some(&frame_layout)],
            immediate_size: 0,
        });
        let attributes = wgpu::vertex_attr_array![0 => Float32x3, 1 => Float32x2];
        let pipeline = |entry: &str| {
            device.create_render_pipeline(&wgpu::RenderPipelineDescriptor {
                label: Some(entry),
                layout: Some(&layout),
                vertex: wgpu::VertexState {
                    module: &module,
                    entry_point: Some("vs"),
                    compilation_options: Default::default(),
                    buffers: &[Some(wgpu::VertexBufferLayout {
                        array_stride: 20,
                        step_mode: wgpu::VertexStepMode::Vertex,
                        attributes: &attributes,
                    })],
                },
                primitive: wgpu::PrimitiveState::default(),
                depth_stencil: None,
                multisample: wgpu::MultisampleState::default(),
                fragment: Some(wgpu::FragmentState {
                    module: &module,
                    entry_point: Some(entry),
                    compilation_options: Default::default(),
                    targets: &[Some(TARGET_FORMAT.into())],
                }),
                multiview_mask: None,
                cache: None,
            })
        };
        let (pipeline, reference) = (pipeline("fs"), pipeline("fs_reference"));
        let sampler = device.create_sampler(&wgpu::SamplerDescriptor {
            mag_filter: wgpu::FilterMode::Linear,
            min_filter: wgpu::FilterMode::Linear,
            mipmap_filter: wgpu::MipmapFilterMode::Linear,
            ..Default::default()
        });
        let corners = [[0.0f32, 0.0], [1.0, 0.0], [0.0, 1.0], [0.0, 1.0], [1.0, 0.0], [1.0, 1.0]];
        // Vertex `i`: corner `i % 6` of plane `i / 6`, position then uv.
        let vertex = |i: usize| {
            let (([x, y], _), [u, v]) = (PLANES[i / 6], corners[i % 6]);
            [x + u, y + v, 0.0, u, v]
        };
        let bytes: Vec<u8> = (0..PLANES.len() * 6).flat_map(vertex).flat_map(f32::to_le_bytes).collect();
        let vertices = buffer(
            device,
            "planes",
            bytes.len() as u64,
            wgpu::BufferUsages::VERTEX | wgpu::BufferUsages::COPY_DST,
        );
        bridge.write_buffer(&vertices, 0, &bytes);
        let uniform_usage = wgpu::BufferUsages::UNIFORM | wgpu::BufferUsages::COPY_DST;
        let uniforms = (0..=IN_FLIGHT).map(|_| buffer(device, "frame", 96, uniform_usage)).collect();
        let targets = (0..=IN_FLIGHT)
            .map(|_| {
                let texture = device.create_texture(&wgpu::TextureDescriptor {
                    label: Some("target"),
                    size: wgpu::Extent3d { width: SIDE, height: SIDE, depth_or_array_layers: 1 },
                    mip_level_count: 1,
                    sample_count: 1,
                    dimension: wgpu::TextureDimension::D2,
                    format: TARGET_FORMAT,
                    usage: wgpu::TextureUsages::RENDER_ATTACHMENT | wgpu::TextureUsages::COPY_SRC,
                    view_formats: &[],
                });
                let usage = wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST;
                (texture, buffer(device, "read-back", u64::from(SIDE * SIDE * 4), usage))
            })
            .collect();
        Renderer { pipeline, reference, textures, frame_layout, sampler, vertices, uniforms, targets }
    }

    /// The bind group of one plane: its texture and map, the sampler, feedback and table.
    fn group(
        &self,
        device: &wgpu::Device,
        tex: &wgpu::Texture,
        map: &wgpu::Texture,
        buffers: &[wgpu::Buffer; 2],
    ) -> wgpu::BindGroup {
        let view = |t: &wgpu::Texture| t.create_view(&Default::default());
        let (tex, map) = (view(tex), view(map));
        device.create_bind_group(&wgpu::BindGroupDescriptor {
            label: Some("plane"),
            layout: &self.textures,
            entries: &[
                wgpu::BindGroupEntry { binding: 0, resource: wgpu::BindingResource::TextureView(&tex) },
                wgpu::BindGroupEntry { binding: 1, resource: wgpu::BindingResource::Sampler(&self.sampler) },
                wgpu::BindGroupEntry { binding: 2, resource: wgpu::BindingResource::TextureView(&map) },
                wgpu::BindGroupEntry { binding: 3, resource: buffers[0].as_entire_binding() },
                wgpu::BindGroupEntry { binding: 4, resource: buffers[1].as_entire_binding() },
            ],
        })
    }

    /// Draws the planes with `groups` into target `slot` (view and feedback words in its uniform
    /// buffer) and copies the target to its read-back buffer.
    fn draw(
        &self,
        bridge: &Bridge,
        slot: usize,
        uniform: &[u32],
        groups: &[wgpu::BindGroup],
        reference: bool,
    ) -> wgpu::CommandBuffer {
        let device = bridge.device();
        let bytes: Vec<u8> = uniform.iter().flat_map(|w| w.to_le_bytes()).collect();
        bridge.write_buffer(&self.uniforms[slot], 0, &bytes);
        let frame = device.create_bind_group(&wgpu::BindGroupDescriptor {
            label: Some("frame"),
            layout: &self.frame_layout,
            entries: &[wgpu::BindGroupEntry {
                binding: 0,
                resource: self.uniforms[slot].as_entire_binding(),
            }],
        });
        let (target, pixels) = &self.targets[slot];
        let view = target.create_view(&Default::default());
        let c = |i: usize| f64::from(CLEAR[i]) / 255.0;
        let clear = wgpu::Color { r: c(0), g: c(1), b: c(2), a: 1.0 };
        let mut encoder = device.create_command_encoder(&Default::default());
        {
            let mut pass = encoder.begin_render_pass(&wgpu::RenderPassDescriptor {
                label: Some("planes"),
                color_attachments: &[Some(wgpu::RenderPassColorAttachment {
                    view: &view,
                    depth_slice: None,
                    resolve_target: None,
                    ops: wgpu::Operations { load: wgpu::LoadOp::Clear(clear), store: wgpu::StoreOp::Store },
                })],
                ..Default::default()
            });
            pass.set_pipeline(if reference { &self.reference } else { &self.pipeline });
            pass.set_vertex_buffer(0, self.vertices.slice(..));
            pass.set_bind_group(1, &frame, &[]);
            for (plane, group) in groups.iter().enumerate() {
                pass.set_bind_group(0, group, &[]);
                let (first, plane) = (plane as u32 * 6, plane as u32);
                pass.draw(first..first + 6, plane..plane + 1);
            }
        }
        encoder.copy_texture_to_buffer(
            target.as_image_copy(),
            wgpu::TexelCopyBufferInfo {
                buffer: pixels,
                layout: wgpu::TexelCopyBufferLayout {
                    offset: 0,
                    bytes_per_row: Some(SIDE * 4),
                    rows_per_image: None,
                },
            },
            wgpu::Extent3d { width: SIDE, height: SIDE, depth_or_array_layers: 1 },
        );
        encoder.finish()
    }

    /// The pixels of target `slot` (its last frame has completed).
    fn read(&self, bridge: &Bridge, slot: usize) -> Result<Vec<u8>> {
        let pixels = &self.targets[slot].1;
        pixels.slice(..).map_async(wgpu::MapMode::Read, |_| {});
        bridge.device().poll(wgpu::PollType::wait_indefinitely())?;
        let out = pixels.slice(..).get_mapped_range()?.to_vec();
        pixels.unmap();
        Ok(out)
    }
}

fn buffer(device: &wgpu::Device, label: &str, size: u64, usage: wgpu::BufferUsages) -> wgpu::Buffer {
    device.create_buffer(&wgpu::BufferDescriptor {
        label: Some(label),
        size,
        usage,
        mapped_at_creation: false,
    })
}

/// The uniform words of a frame: the view, the feedback words and each plane's feedback slot.
fn uniform(view: &[f32; 16], feedback: [u32; 4], slots: [u32; 4]) -> Vec<u32> {
    view.iter().map(|f| f.to_bits()).chain(feedback).chain(slots).collect()
}

/// A fully resident wgpu copy of `source` (every mip) and a 1 × 1 map of 0 (resident at mip 0).
fn resident_copy(bridge: &Bridge, source: &dyn TileSource) -> Result<[wgpu::Texture; 2]> {
    let desc = source.desc();
    let texture = |label, format, size: [u32; 2], mips| {
        bridge.device().create_texture(&wgpu::TextureDescriptor {
            label: Some(label),
            size: wgpu::Extent3d { width: size[0], height: size[1], depth_or_array_layers: 1 },
            mip_level_count: mips,
            sample_count: 1,
            dimension: wgpu::TextureDimension::D2,
            format,
            usage: wgpu::TextureUsages::TEXTURE_BINDING | wgpu::TextureUsages::COPY_DST,
            view_formats: &[],
        })
    };
    let full =
        texture("reference", wgpu::TextureFormat::Rgba8Unorm, [desc.width, desc.height], desc.mip_count);
    for mip in 0..desc.mip_count {
        let (columns, rows) = desc.tile_grid(mip);
        for (x, y) in (0..rows).flat_map(|y| (0..columns).map(move |x| (x, y))) {
            let (w, h) = desc.tile_extent(mip, x, y).ok_or("outside the tile grid")?;
            let origin = wgpu::Origin3d { x: x * desc.tile_width, y: y * desc.tile_height, z: 0 };
            bridge.write_texture(
                wgpu::TexelCopyTextureInfo {
                    texture: &full,
                    mip_level: mip,
                    origin,
                    aspect: wgpu::TextureAspect::All,
                },
                &source.read_tile(mip, x, y)?,
                wgpu::TexelCopyBufferLayout {
                    offset: 0,
                    bytes_per_row: Some(w * 4),
                    rows_per_image: Some(h),
                },
                wgpu::Extent3d { width: w, height: h, depth_or_array_layers: 1 },
            );
        }
    }
    Ok([full, texture("reference map", wgpu::TextureFormat::R8Uint, [1, 1], 1)])
}

/// PSNR in dB of the RGB channels of two RGBA images (99 when identical).
fn psnr(a: &[u8], b: &[u8]) -> f64 {
    let pixels = a.chunks_exact(4).zip(b.chunks_exact(4));
    let squares = pixels.flat_map(|(p, q)| (0..3).map(move |i| (f64::from(p[i]) - f64::from(q[i])).powi(2)));
    let mse = squares.sum::<f64>() / (a.len() / 4 * 3).max(1) as f64;
    if mse == 0.0 {
        99.0
    } else {
        10.0 * (255.0f64 * 255.0 / mse).log10()
    }
}

/// Runs `frames` frames on `path` through an open bridge.
pub fn run(bridge: &Bridge, path: ResidencyPath, frames: u64) -> Result<Outcome> {
    let device = bridge.residency();
    let frames = frames.max(1);
    // streaming: begin
    let desc = StreamerDesc::default()
        .with_name("wgpu virtual textures")
        .with_path(path)
        .with_budget_tiles(128)
        .with_frames_in_flight(IN_FLIGHT as u32);
    let mut streamer = Streamer::new(device, desc)?;
    let sources: Vec<_> = (0..PLANES.len()).map(source).collect();
    let mut textures: Vec<VirtualTexture> = Vec::new();
    for (index, source) in sources.iter().enumerate() {
        textures.push(streamer.add_texture(&format!("plane {index}"), Arc::clone(source))?);
    }
    let primed = streamer.manager_stats().tiles_streamed;
    let shader_path = match streamer.path() {
        ResidencyPath::Software => ShaderPath::Software,
        _ => ShaderPath::Hardware,
    };
    let timeline = bridge.create_timeline("wgpu frames")?;
    // streaming: end
    let renderer = Renderer::new(bridge, shader_path);
    let mut first = Vec::new();
    // streaming: begin
    // Per ring slot: the generation its bind groups were made for, and the wgpu objects over
    // the streamer's images and buffers that they hold (remade when the generation changes).
    type Groups = (u64, Vec<wgpu::BindGroup>, Vec<[wgpu::Texture; 2]>, [wgpu::Buffer; 2]);
    let mut groups: Vec<Option<Groups>> = (0..IN_FLIGHT).map(|_| None).collect();
    let mut cpu = Vec::new();
    for frame in 0..frames {
        if frame >= IN_FLIGHT as u64 {
            device.wait_until(&timeline.timeline().at(frame + 1 - IN_FLIGHT as u64))?;
        }
        let start = std::time::Instant::now();
        let bindings = streamer.begin_frame()?;
        let mut spent = start.elapsed();
        let slot = bindings.slot;
        if groups[slot].as_ref().is_none_or(|g| g.0 != bindings.generation) {
            groups[slot] = None;
            // SAFETY: these wgpu objects are used only in this slot's frames of this generation,
            // submitted through `submit_streamer_frame`, and dropped before the streamer (below).
            let buffers = unsafe { bridge.streamer_buffers(&bindings) }?.ok_or("no texture")?;
            let mut images = Vec::new();
            for texture in &textures {
                let binding = bindings.texture(texture).ok_or("a texture not bound")?;
                // SAFETY: as above.
                images.push(unsafe { bridge.streamer_textures(&binding) }?);
            }
            let made = images.iter().map(|[t, m]| renderer.group(bridge.device(), t, m, &buffers)).collect();
            groups[slot] = Some((bindings.generation, made, images, buffers));
        }
        let planes = &groups[slot].as_ref().ok_or("made above")?.1;
        let mut slots = [0; 4];
        let mut words = [0; 8];
        for (plane, texture) in textures.iter().enumerate() {
            let binding = bindings.texture(texture).ok_or("a texture not bound")?;
            words = bindings.feedback_words(&binding, true);
            slots[plane] = words[0];
        }
        let start = std::time::Instant::now();
        let part = bridge.record_streamer_part(&bindings)?;
        spent += start.elapsed();
        let feedback = [words[1], words[2], words[3], words[4]];
        let draw =
            renderer.draw(bridge, slot, &uniform(&camera(frame, frames), feedback, slots), planes, false);
        drop(bindings);
        let (_, done) = bridge.submit_streamer_frame(part, [draw], &timeline)?;
        let start = std::time::Instant::now();
        streamer.end_frame(done)?;
        cpu.push((spent + start.elapsed()).as_secs_f64() * 1e3);
        // Frame-exact: each frame's loads finish before the next begins (a renderer lets them
        // overlap frames; the protocol is the same).
        streamer.wait_for_loads();
        if frame == 0 {
            device.wait_until(&done)?;
            first = renderer.read(bridge, slot)?;
        }
    }
    device.wait_until(&timeline.timeline().at(frames))?;
    let streamed_tiles = streamer.manager_stats().tiles_streamed - primed;
    let last_slot = ((frames - 1) % IN_FLIGHT as u64) as usize;
    drop(groups);
    // streaming: end
    let last = renderer.read(bridge, last_slot)?;
    // The reference: the last view drawn from fully resident copies.
    let copies = sources.iter().map(|s| resident_copy(bridge, &**s)).collect::<Result<Vec<_>>>()?;
    let buffer_usage = wgpu::BufferUsages::STORAGE;
    let dummy = [
        buffer(bridge.device(), "unused feedback", 64, buffer_usage),
        buffer(bridge.device(), "unused table", 64, buffer_usage),
    ];
    let reference_groups: Vec<_> =
        copies.iter().map(|[t, m]| renderer.group(bridge.device(), t, m, &dummy)).collect();
    let view = uniform(&camera(frames - 1, frames), [0; 4], [0; 4]);
    bridge.submit([renderer.draw(bridge, IN_FLIGHT, &view, &reference_groups, true)])?;
    bridge.device().poll(wgpu::PollType::wait_indefinitely())?;
    let reference = renderer.read(bridge, IN_FLIGHT)?;
    let path = streamer.path();
    let latency = streamer.manager_stats().latency.summary();
    drop((streamer, textures));
    cpu.sort_by(f64::total_cmp);
    let textured_frame0 = first.chunks_exact(4).filter(|p| *p != CLEAR).count();
    Ok(Outcome {
        path,
        frames,
        magenta_frame0: first.chunks_exact(4).filter(|p| *p == MAGENTA).count(),
        textured_frame0,
        streamed_tiles,
        psnr_last_db: psnr(&last, &reference),
        validation_problems: bridge.validation_log().problems_since(0).len(),
        streamer_cpu_ms_mean: cpu.iter().sum::<f64>() / cpu.len() as f64,
        streamer_cpu_ms_p99: cpu[(cpu.len() * 99 / 100).min(cpu.len() - 1)],
        latency_frames_p50: latency.p50,
        latency_frames_p95: latency.p95,
    })
}

/// Opens a bridge (sharing wgpu's queue where the family has one).
pub fn open(desc: &BridgeDesc) -> Result<Bridge> {
    match residency_wgpu::open(desc) {
        Err(residency_wgpu::OpenError::OneQueue) => {
            // SAFETY: this program submits wgpu work only from this thread, between residency
            // calls (`Bridge::submit`, `Bridge::submit_streamer_frame`).
            Ok(unsafe { residency_wgpu::open_sharing_queue(desc) }?)
        }
        other => Ok(other?),
    }
}

#[allow(dead_code, reason = "the test that runs this example calls `run` and not `main`")]
fn main() -> Result<()> {
    let path = match std::env::args().nth(1).as_deref() {
        None | Some("auto") => ResidencyPath::Auto,
        Some("hardware") => ResidencyPath::Hardware,
        Some("software") => ResidencyPath::Software,
        Some(other) => return Err(format!("unknown path `{other}`: auto, hardware or software").into()),
    };
    let bridge = open(&BridgeDesc::default())?;
    let leaks = residency_vulkan::LEAKS_AT_TEARDOWN.load(std::sync::atomic::Ordering::SeqCst);
    let outcome = run(&bridge, path, FRAMES)?;
    println!("{outcome:?}");
    for problem in bridge.validation_log().problems_since(0).iter().take(5) {
        println!("validation: {problem:?}");
    }
    drop(bridge);
    let leaked = residency_vulkan::LEAKS_AT_TEARDOWN.load(std::sync::atomic::Ordering::SeqCst) - leaks;
    println!("leaks at teardown: {leaked}");
    if leaked > 0 || outcome.validation_problems > 0 {
        return Err("validation messages or leaks (above)".into());
    }
    Ok(())
}
