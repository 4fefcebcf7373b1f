//! Sliced texture arrays on the streamer (`Streamer::add_sliced_texture`, the seed's "arrays of
//! variable sized textures"), hardware path on lavapipe: a 512² array whose slices hold textures
//! of 512², 256², 128² and 64² (finest levels 0..3) and one empty slice, sampled by
//! `slice_bias.comp` through `residency_slices.glsl` with the GPU's own feedback. Each sample
//! equals a CPU reference of the biased sampling (the level `bias + lod`, nearest, the slice's own
//! texels); the feedback of each slice streams that slice's tiles and no other's (and never a level
//! finer than its texture); a bias changed with `set_slice_bias` changes the level the GPU samples
//! in the next frame; a slice given another texture or emptied with `set_slice` samples the new
//! one (or the default value); bad input is refused with typed errors and changes nothing.
//! Validation clean, nothing leaked.

use residency_core::format::Format;
use residency_core::memory::MemoryIntent;
use residency_core::streaming::{FnSource, TileKey, TileSource};
use residency_core::tiles::{ResidencyPath, TileCoord};
use residency_core::usage::BufferUsage;
use residency_core::vt_file::VtDesc;
use residency_vulkan::ash::vk;
use residency_vulkan::compute::{Binding, ComputeProgram, ViewRef};
use residency_vulkan::recording::MemoryDependency;
use residency_vulkan::shaders;
use residency_vulkan::streaming::{
    StreamError, Streamer, StreamerDesc, TextureViews, VirtualTexture, SLICE_EMPTY_BIAS,
};
use residency_vulkan::testing::with_gpu;
use residency_vulkan::{BufferDesc, CommandContext, Device, Filter, GpuUse, Timeline};
use std::sync::Arc;

const SIDE: u32 = 512;
const TILE: u32 = 128;
const DEFAULT: [f32; 4] = [1.0, 0.0, 1.0, 1.0];
const NO_MARK: u32 = u32::MAX;

/// The texel (x, y) of array level `level` of the texture tagged `tag` (coordinates in that level).
fn texel(tag: u32, level: u32, x: u32, y: u32) -> [u8; 4] {
    [(x % 251) as u8, (y % 241) as u8, (level * 20 + 5) as u8, (tag * 30 + 10) as u8]
}

/// The array's description: 512² RGBA8 in 128² tiles, the full mip chain.
fn array_desc() -> VtDesc {
    VtDesc::new(Format::R8G8B8A8Unorm, SIDE, SIDE, TILE, TILE)
}

/// A texture of `SIDE >> finest` texels (its own full mip chain) tagged `tag`: its mip `m` holds
/// the array level `finest + m`'s texels.
fn slice_texture(tag: u32, finest: u32) -> Arc<dyn TileSource> {
    let side = SIDE >> finest;
    let desc = VtDesc::new(Format::R8G8B8A8Unorm, side, side, TILE, TILE);
    Arc::new(FnSource::new(format!("texture {tag} of {side}²"), desc, move |mip, x, y| {
        let (w, h) = desc.tile_extent(mip, x, y).expect("in the grid");
        Ok((0..h)
            .flat_map(|ty| (0..w).flat_map(move |tx| texel(tag, finest + mip, x * TILE + tx, y * TILE + ty)))
            .collect())
    }))
}

/// A probe: texel (x, y) of the slice's own texture's mip 0 (in `SIDE >> finest` texels), at
/// `lod` of that texture.
#[derive(Clone, Copy, Debug)]
struct Probe {
    slice: u32,
    x: u32,
    y: u32,
    lod: u32,
}

/// What the shader returned: texel × 255 (rounded), then (code, LOD used, bias, min-LOD).
type Sampled = ([u8; 4], [f32; 4]);

/// The GPU side of the test: the program, its sampler and the frames' command context.
struct Gpu {
    device: Arc<Device>,
    program: ComputeProgram,
    nearest: residency_vulkan::Sampler,
    commands: CommandContext,
}

impl Gpu {
    fn new(device: &Arc<Device>) -> Gpu {
        Gpu {
            device: Arc::clone(device),
            program: ComputeProgram::new(device, "slice bias", &shaders::SLICE_BIAS, 2).unwrap(),
            nearest: device.create_sampler(Filter::Nearest).unwrap(),
            commands: CommandContext::new(device, "slice bias frames").unwrap(),
        }
    }

    /// One streamer frame sampling `probes` of `texture` (finest levels `finest` per slice, for
    /// the probes' coordinates), its feedback written by the shader; waits for it and returns
    /// what it sampled.
    fn frame(
        &self,
        streamer: &mut Streamer,
        texture: &VirtualTexture,
        finest: &[u32],
        probes: &[Probe],
    ) -> Vec<Sampled> {
        self.frame_then(streamer, texture, finest, probes, &[], true)
    }

    /// [`Gpu::frame`], its submission waiting on the GPU for `after`; without `wait`, the frame
    /// stays in flight and nothing is read back.
    fn frame_then(
        &self,
        streamer: &mut Streamer,
        texture: &VirtualTexture,
        finest: &[u32],
        probes: &[Probe],
        after: &[GpuUse],
        wait: bool,
    ) -> Vec<Sampled> {
        use vk::{AccessFlags2 as A, PipelineStageFlags2 as S};
        let device = &self.device;
        let n = probes.len() as u64;
        let mut input = device
            .create_buffer(
                &BufferDesc::new("probes", n * 16, BufferUsage::STORAGE).with_intent(MemoryIntent::Upload),
            )
            .unwrap();
        let coords: Vec<u8> = probes
            .iter()
            .flat_map(|p| {
                let side = (SIDE >> finest[p.slice as usize]) as f32;
                [(p.x as f32 + 0.5) / side, (p.y as f32 + 0.5) / side, p.slice as f32, p.lod as f32]
            })
            .flat_map(f32::to_le_bytes)
            .collect();
        input.write(0, &coords).unwrap();
        let output = device
            .create_buffer(
                &BufferDesc::new("results", n * 32, BufferUsage::STORAGE).with_intent(MemoryIntent::Readback),
            )
            .unwrap();
        let bindings = streamer.begin_frame().unwrap();
        let binding = bindings.texture(texture).expect("the streamer's texture");
        let TextureViews::Hardware { image, min_lod } = binding.views else { panic!("the hardware path") };
        let (image, min_lod): (ViewRef<'_>, ViewRef<'_>) = (image.into(), min_lod.into());
        let general = vk::ImageLayout::GENERAL;
        let set = self
            .program
            .descriptor_set(&[
                Binding::sampled(image, &self.nearest, general),
                Binding::sampled(min_lod, &self.nearest, general),
                Binding::Buffer(binding.slice_bias.expect("a sliced array has a bias buffer")),
                Binding::Buffer(&input),
                Binding::Buffer(&output),
                Binding::Buffer(bindings.feedback.unwrap()),
                Binding::Buffer(bindings.image_table.unwrap()),
            ])
            .unwrap();
        let mut push: Vec<u8> = DEFAULT.iter().flat_map(|f| f.to_le_bytes()).collect();
        for word in [n as u32, NO_MARK, u32::from(binding.feedback_slot), u32::from(bindings.feedback_active)]
        {
            push.extend_from_slice(&word.to_le_bytes());
        }
        let groups = [(n as u32).div_ceil(64), 1, 1];
        let submission = self
            .commands
            .submit(after, |rec| {
                bindings.record(rec, |rec| self.program.dispatch(rec, &set, &push, groups).unwrap()).unwrap();
                rec.memory_barrier(MemoryDependency {
                    src_stages: S::COMPUTE_SHADER,
                    src_access: A::SHADER_WRITE,
                    dst_stages: S::HOST,
                    dst_access: A::HOST_READ,
                })
                .unwrap();
            })
            .unwrap();
        drop(bindings);
        let until = submission.gpu_use();
        streamer.end_frame(until).unwrap();
        if !wait {
            return Vec::new();
        }
        device.wait_until(&until).unwrap();
        let mut out = vec![0u8; (n * 32) as usize];
        output.read(0, &mut out).unwrap();
        drop((set, input, output));
        out.chunks_exact(32)
            .map(|r| {
                let f = |i: usize| f32::from_le_bytes([r[i], r[i + 1], r[i + 2], r[i + 3]]);
                ([f(0), f(4), f(8), f(12)].map(|v| (v * 255.0).round() as u8), [f(16), f(20), f(24), f(28)])
            })
            .collect()
    }
}

/// The CPU reference of a probe of a slice with bias `bias` (`None`: empty) holding the texture
/// tagged `tag`: the level `bias + lod`, nearest, resident (code 1), that LOD used; an empty slice
/// the default value, code 0, LOD -1, bias -1.
fn reference(p: &Probe, finest: u32, bias: Option<u32>, tag: u32) -> ([u8; 4], [f32; 3]) {
    match bias {
        None => (DEFAULT.map(|v| (v * 255.0).round() as u8), [0.0, -1.0, SLICE_EMPTY_BIAS]),
        Some(bias) => {
            let level = bias + p.lod;
            // The probe's texel centre in the slice's own mip 0, at array level `level`.
            let shift = level - finest;
            (texel(tag, level, p.x >> shift, p.y >> shift), [1.0, level as f32, bias as f32])
        }
    }
}

/// Runs frames until every probe of a non-empty slice samples at its bias (at most 24); returns
/// the last frame's samples.
fn converge(
    gpu: &Gpu,
    streamer: &mut Streamer,
    texture: &VirtualTexture,
    finest: &[u32],
    probes: &[Probe],
) -> Vec<Sampled> {
    let mut last = Vec::new();
    for _ in 0..24 {
        last = gpu.frame(streamer, texture, finest, probes);
        let done = probes.iter().zip(&last).all(|(p, (_, info))| {
            match streamer.slice_bias(texture, p.slice).unwrap() {
                Some(bias) => info[1] == (bias + p.lod) as f32,
                None => true,
            }
        });
        if done {
            return last;
        }
        streamer.wait_for_loads();
    }
    last
}

/// Checks every sample against the CPU reference.
fn check(streamer: &Streamer, texture: &VirtualTexture, tags: &[u32], probes: &[Probe], got: &[Sampled]) {
    for (p, (rgba, info)) in probes.iter().zip(got) {
        let finest = streamer.slice_finest_level(texture, p.slice).unwrap().unwrap_or(0);
        let bias = streamer.slice_bias(texture, p.slice).unwrap();
        let (want, want_info) = reference(p, finest, bias, tags[p.slice as usize]);
        assert_eq!(*rgba, want, "{p:?}: the texel of the biased level");
        assert_eq!([info[0], info[1], info[2]], want_info, "{p:?}: (code, LOD used, bias)");
        if bias.is_some() {
            assert!(info[3] <= info[1], "{p:?}: the min-LOD map allows the level sampled: {info:?}");
        }
    }
}

fn streamer(device: &Arc<Device>, path: ResidencyPath) -> Streamer {
    Streamer::new(
        device,
        StreamerDesc::default()
            .with_name("slice streamer")
            .with_path(path)
            .with_frames_in_flight(2)
            .with_budget_tiles(256)
            .with_workers(2),
    )
    .unwrap()
}

/// Slices 0..3 hold textures of 512², 256², 128², 64² (tags 1..4); slice 4 is empty.
const FINEST: [u32; 5] = [0, 1, 2, 3, 0];

fn slices() -> Vec<Option<Arc<dyn TileSource>>> {
    (0..5u32).map(|s| (s < 4).then(|| slice_texture(s + 1, FINEST[s as usize]))).collect()
}

/// Whether tile (x, y) of `mip` of slice `layer` is resident.
fn resident(streamer: &Streamer, texture: &VirtualTexture, layer: u32, mip: u32, x: u32, y: u32) -> bool {
    let layout = streamer.manager().residency(texture.id()).unwrap().layout();
    let tile = layout.tile_index(TileCoord { layer, mip, x, y, z: 0 }).unwrap();
    streamer.manager().is_resident(TileKey::tile(texture.id(), tile))
}

#[test]
fn sliced_array_samples_each_slice_at_its_bias_like_the_cpu_and_streams_each_slices_own_tiles() {
    with_gpu(|set| {
        let device = Arc::clone(&set.devices()[0]);
        let gpu = Gpu::new(&device);
        let mut streamer = streamer(&device, ResidencyPath::Hardware);
        let texture = streamer.add_sliced_texture("sliced array", array_desc(), &slices()).unwrap();
        let id = texture.id();
        let tags = [1, 2, 3, 4, 0];
        for s in 0..5 {
            let want = (s < 4).then_some(FINEST[s as usize]);
            assert_eq!(
                streamer.slice_bias(&texture, s).unwrap(),
                want,
                "slice {s}'s bias is its finest level"
            );
        }
        // Priming: every slice's coarse chain, the levels of its own texture with its texels.
        assert!(streamer.coarse_chain(&texture).iter().all(|&k| streamer.manager().is_resident(k)));
        let layout = streamer.manager().residency(id).unwrap().layout().clone();
        let coarse = layout.mip_levels() - 1;
        let image = streamer.sparse_image(&texture).unwrap();
        for s in 0..4u32 {
            let got = image
                .read_region(
                    s,
                    coarse,
                    residency_core::tiles::TexelRegion { offset: [0; 3], extent: [1, 1, 1] },
                    1 << 20,
                )
                .unwrap();
            assert_eq!(got, texel(tags[s as usize], coarse, 0, 0), "slice {s}'s coarsest level");
        }

        // Probes at LOD 0 of each slice's own texture, in tiles the other slices leave alone.
        let probes = [
            Probe { slice: 0, x: 400, y: 40, lod: 0 }, // level 0, tile (3, 0); its parent (1, 0)
            Probe { slice: 1, x: 20, y: 200, lod: 0 }, // level 1, tile (0, 1)
            Probe { slice: 2, x: 100, y: 27, lod: 0 }, // level 2 (the coarse chain)
            Probe { slice: 3, x: 63, y: 5, lod: 0 },   // level 3
            Probe { slice: 3, x: 10, y: 50, lod: 2 },  // level 5
            Probe { slice: 4, x: 200, y: 200, lod: 0 }, // empty
        ];
        let finest = FINEST;
        let got = converge(&gpu, &mut streamer, &texture, &finest, &probes);
        check(&streamer, &texture, &tags, &probes, &got);
        let misses: u64 = streamer.take_feedback_frames().iter().map(|f| f.misses).sum();
        assert!(misses > 0, "the GPU's feedback asked for the tiles");

        // Each slice's feedback streamed that slice's tiles: slice 0's level-0 tile and its
        // parent, slice 1's level-1 tile; not the same tiles of the other slices, and never a
        // level finer than a slice's texture (slice 1's LOD warnings ask for level 0: dropped).
        assert!(
            resident(&streamer, &texture, 0, 0, 3, 0) && resident(&streamer, &texture, 0, 1, 1, 0),
            "slice 0's tile and its parent"
        );
        assert!(resident(&streamer, &texture, 1, 1, 0, 1), "slice 1's tile");
        assert!(
            !resident(&streamer, &texture, 1, 0, 3, 0) && !resident(&streamer, &texture, 1, 1, 1, 0),
            "slice 0's tiles, not slice 1's"
        );
        assert!(!resident(&streamer, &texture, 0, 1, 0, 1), "slice 1's tile, not slice 0's");
        for layer in 1..5 {
            for (x, y) in (0..4).flat_map(|y| (0..4).map(move |x| (x, y))) {
                assert!(
                    !resident(&streamer, &texture, layer, 0, x, y),
                    "level 0 of slice {layer} ({x}, {y}): finer than its texture"
                );
            }
        }
        for (x, y) in [(0, 0), (1, 0), (0, 1), (1, 1)] {
            assert!(
                !resident(&streamer, &texture, 4, 1, x, y)
                    && !resident(&streamer, &texture, 3, 1, x, y)
                    && !resident(&streamer, &texture, 2, 1, x, y)
            );
        }

        // A coarser bias changes the level the GPU samples from the next frame on (the buffer's
        // update is ordered with the frame): slice 0 at level 1, slice 1 at level 3.
        streamer.set_slice_bias(&texture, 0, 1).unwrap();
        streamer.set_slice_bias(&texture, 1, 3).unwrap();
        let got = gpu.frame(&mut streamer, &texture, &finest, &probes);
        assert_eq!(got[0].1[2], 1.0, "slice 0's bias in the frame right after the change");
        assert_eq!(got[1].1[2], 3.0, "slice 1's bias in the frame right after the change");
        let got = converge(&gpu, &mut streamer, &texture, &finest, &probes);
        check(&streamer, &texture, &tags, &probes, &got);
        assert_eq!((got[0].1[1], got[1].1[1]), (1.0, 3.0), "the levels sampled changed with the biases");
        assert_ne!(got[0].0, texel(1, 0, 400, 40), "not level 0's texel any more");
        // Back to the finest level.
        streamer.set_slice_bias(&texture, 0, 0).unwrap();
        streamer.set_slice_bias(&texture, 1, 1).unwrap();
        let got = converge(&gpu, &mut streamer, &texture, &finest, &probes);
        check(&streamer, &texture, &tags, &probes, &got);

        // Slice 1 gets another texture, of 128² (finest level 2, tag 7): its old tiles go at
        // once, its bias becomes 2, its coarse chain is the new texture's before `set_slice`
        // returns, and the samples read the new texels. Slice 4 gets a 512² texture (tag 8) and
        // slice 2 is emptied (the default value). The other slices keep their tiles.
        let before_0 = resident(&streamer, &texture, 0, 0, 3, 0);
        streamer.set_slice(&texture, 1, Some(slice_texture(7, 2))).unwrap();
        streamer.set_slice(&texture, 4, Some(slice_texture(8, 0))).unwrap();
        streamer.set_slice(&texture, 2, None).unwrap();
        assert!(!resident(&streamer, &texture, 1, 1, 0, 1), "slice 1's old tile went with its texture");
        assert_eq!(resident(&streamer, &texture, 0, 0, 3, 0), before_0, "slice 0 kept its tile");
        assert_eq!(streamer.slice_bias(&texture, 1).unwrap(), Some(2));
        assert_eq!(streamer.slice_bias(&texture, 4).unwrap(), Some(0));
        assert_eq!(streamer.slice_bias(&texture, 2).unwrap(), None);
        assert!(streamer.coarse_chain(&texture).iter().all(|&k| streamer.manager().is_resident(k)));
        let image = streamer.sparse_image(&texture).unwrap();
        let got = image
            .read_region(
                1,
                coarse,
                residency_core::tiles::TexelRegion { offset: [0; 3], extent: [1, 1, 1] },
                1 << 20,
            )
            .unwrap();
        assert_eq!(got, texel(7, coarse, 0, 0), "slice 1's coarse chain is the new texture's");
        let tags = [1, 7, 0, 4, 8];
        let finest = [0, 2, 0, 3, 0];
        let probes = [
            Probe { slice: 0, x: 400, y: 40, lod: 0 },
            Probe { slice: 1, x: 100, y: 27, lod: 0 },
            Probe { slice: 2, x: 100, y: 27, lod: 0 },
            Probe { slice: 4, x: 300, y: 450, lod: 0 },
            Probe { slice: 4, x: 30, y: 450, lod: 1 },
        ];
        let got = converge(&gpu, &mut streamer, &texture, &finest, &probes);
        check(&streamer, &texture, &tags, &probes, &got);
        assert!(
            resident(&streamer, &texture, 4, 0, 2, 3),
            "slice 4's new texture streamed from its feedback"
        );
        assert!(!resident(&streamer, &texture, 2, 0, 0, 0), "an empty slice streams nothing");

        let stats = streamer.manager_stats().clone();
        assert_eq!(stats.loads_failed, 0, "{stats:?}");
        assert!(streamer.take_load_failures().is_empty());
        streamer.remove_texture(texture).unwrap();
        assert_eq!(streamer.manager().pool().used_tiles(), 0, "every tile back in the pool");
        drop(streamer);
        drop(gpu);
    });
}

#[test]
fn sliced_array_input_is_checked_and_a_refusal_changes_nothing() {
    with_gpu(|set| {
        let device = Arc::clone(&set.devices()[0]);
        let unsupported = |r: Result<_, StreamError>| {
            assert!(matches!(r, Err(StreamError::UnsupportedSource { .. })), "{:?}", r.map(|_| ()))
        };
        // The software path streams no arrays.
        let mut software = streamer(&device, ResidencyPath::Software);
        unsupported(software.add_sliced_texture("software", array_desc(), &slices()));
        assert_eq!(software.texture_count(), 0);
        drop(software);

        let mut streamer = streamer(&device, ResidencyPath::Hardware);
        unsupported(streamer.add_sliced_texture("one slice", array_desc(), &[Some(slice_texture(1, 0))]));
        unsupported(streamer.add_sliced_texture("no slices", array_desc(), &[]));
        // Not the array at any level: 300², a 512² texture with fewer mips, another format.
        let odd = VtDesc::new(Format::R8G8B8A8Unorm, 300, 300, TILE, TILE);
        let odd: Arc<dyn TileSource> = Arc::new(FnSource::new("300²", odd, |_, _, _| Ok(Vec::new())));
        unsupported(streamer.add_sliced_texture("odd", array_desc(), &[None, Some(odd)]));
        let short = array_desc().with_mip_count(4);
        let short: Arc<dyn TileSource> = Arc::new(FnSource::new("short", short, |_, _, _| Ok(Vec::new())));
        unsupported(streamer.add_sliced_texture("short", array_desc(), &[Some(Arc::clone(&short)), None]));
        let r8 = VtDesc::new(Format::R8Unorm, SIDE, SIDE, 256, 256);
        let r8: Arc<dyn TileSource> = Arc::new(FnSource::new("r8", r8, |_, _, _| Ok(Vec::new())));
        unsupported(streamer.add_sliced_texture("r8", array_desc(), &[None, Some(r8)]));
        assert_eq!(streamer.texture_count(), 0, "nothing was added");
        assert_eq!(streamer.manager().pool().used_tiles(), 0);

        let texture = streamer.add_sliced_texture("sliced array", array_desc(), &slices()).unwrap();
        let id = texture.id();
        device.wait_idle().unwrap();
        let resident_before = streamer.texture_stats(&texture).unwrap().resident_tiles;
        let used_before = streamer.manager().pool().used_tiles();
        let staged_before = streamer.staging_in_use();
        let bias_before: Vec<_> = (0..5).map(|s| streamer.slice_bias(&texture, s).unwrap()).collect();
        let unchanged = |streamer: &Streamer| {
            let bias: Vec<_> = (0..5).map(|s| streamer.slice_bias(&texture, s).unwrap()).collect();
            assert_eq!(bias, bias_before, "the biases");
            assert_eq!(streamer.texture_stats(&texture).unwrap().resident_tiles, resident_before);
            assert_eq!(streamer.manager().pool().used_tiles(), used_before);
            assert_eq!(streamer.staging_in_use(), staged_before, "nothing staged");
        };
        let is = |r: Result<(), StreamError>, what: &str, ok: fn(&StreamError) -> bool| match r {
            Err(e) if ok(&e) => {}
            other => panic!("{what}: {other:?}"),
        };
        is(streamer.set_slice_bias(&texture, 5, 1), "a slice past the array", |e| {
            matches!(e, StreamError::SliceOutOfRange { slice: 5, slices: 5, .. })
        });
        is(streamer.set_slice_bias(&texture, 2, 1), "finer than the slice's texture", |e| {
            matches!(e, StreamError::SliceBiasOutOfRange { slice: 2, bias: 1, finest: 2, mips: 10, .. })
        });
        is(streamer.set_slice_bias(&texture, 0, 10), "past the mips", |e| {
            matches!(e, StreamError::SliceBiasOutOfRange { bias: 10, mips: 10, .. })
        });
        is(streamer.set_slice_bias(&texture, 4, 2), "an empty slice", |e| {
            matches!(e, StreamError::EmptySlice { slice: 4, .. })
        });
        is(streamer.set_slice(&texture, 9, None), "set_slice past the array", |e| {
            matches!(e, StreamError::SliceOutOfRange { slice: 9, .. })
        });
        is(
            streamer.set_slice(&texture, 1, Some(Arc::clone(&short))),
            "a texture that is not the array's",
            |e| matches!(e, StreamError::UnsupportedSource { .. }),
        );
        assert!(matches!(streamer.slice_bias(&texture, 7), Err(StreamError::SliceOutOfRange { .. })));
        unchanged(&streamer);

        // A texture that is not a sliced array, and a handle of another streamer.
        let plain = streamer.add_texture("plain", slice_texture(9, 0)).unwrap();
        is(streamer.set_slice_bias(&plain, 0, 1), "not sliced", |e| matches!(e, StreamError::NotSliced(_)));
        is(streamer.set_slice(&plain, 0, None), "not sliced", |e| matches!(e, StreamError::NotSliced(_)));
        let mut other = self::streamer(&device, ResidencyPath::Hardware);
        let foreign = other.add_sliced_texture("foreign", array_desc(), &slices()).unwrap();
        is(streamer.set_slice_bias(&foreign, 0, 1), "another streamer's texture", |e| {
            matches!(e, StreamError::ForeignTexture(_))
        });
        other.remove_texture(foreign).unwrap();
        drop(other);
        streamer.remove_texture(plain).unwrap();

        // Inside a frame: refused, the frame goes on.
        let commands = CommandContext::new(&device, "refusal frames").unwrap();
        let bindings = streamer.begin_frame().unwrap();
        drop(bindings);
        is(streamer.set_slice_bias(&texture, 0, 1), "inside a frame", |e| {
            matches!(e, StreamError::FrameOrder(_))
        });
        is(streamer.set_slice(&texture, 0, None), "inside a frame", |e| {
            matches!(e, StreamError::FrameOrder(_))
        });
        let bindings = streamer.frame_bindings().unwrap();
        let submission = commands.submit(&[], |rec| bindings.record(rec, |_| ()).unwrap()).unwrap();
        drop(bindings);
        streamer.end_frame(submission.gpu_use()).unwrap();
        device.wait_until(&submission.gpu_use()).unwrap();
        assert_eq!(streamer.slice_bias(&texture, 0).unwrap(), Some(0));
        assert!(streamer.manager().images().any(|i| i == id));
        streamer.remove_texture(texture).unwrap();
        drop(streamer);
        drop(commands);
    });
}

/// Host-signals `gate` to `value`: the frame held behind it may run.
fn open(device: &Device, gate: &Timeline, value: u64) {
    let info = vk::SemaphoreSignalInfo::default().semaphore(gate.raw()).value(value);
    // SAFETY: a timeline semaphore of this device (`create_timeline`), signalled only here, with
    // values that only grow.
    unsafe { device.raw().signal_semaphore(&info) }.unwrap();
}

/// Slice changes while frames are in flight (nothing waited for on the host between frames): a
/// bias update, a slice given another texture and a slice emptied are ordered after the frames that
/// read the bias buffer, the min-LOD map and the slice's tiles (synchronization validation stays
/// silent), and the frames after them sample the new state as the CPU reference says.
///
/// The last frame before each change is held on the GPU (its submission waits for a timeline the
/// test signals on the host once the change was made), so it is in flight when the slice changes
/// on every device, however fast its GPU (a fast one has run the frames before it already, and
/// an unbind rightly waits for no finished frame). The unbind of the slice's old tiles (at least its
/// coarse chain, which priming bound: the mip tail of the slice on a device with one, its
/// single-tile mips on one without) then waits for the held frame: counted in
/// `unbinds_after_frames`, and no bind has run while the frame is held.
#[test]
fn slice_changes_between_frames_in_flight_are_ordered_with_the_frames() {
    with_gpu(|set| {
        let device = Arc::clone(&set.devices()[0]);
        let gpu = Gpu::new(&device);
        let mut streamer = streamer(&device, ResidencyPath::Hardware);
        let texture = streamer.add_sliced_texture("sliced array", array_desc(), &slices()).unwrap();
        let probes = [
            Probe { slice: 0, x: 400, y: 40, lod: 0 },
            Probe { slice: 1, x: 20, y: 200, lod: 0 },
            Probe { slice: 3, x: 63, y: 5, lod: 0 },
        ];
        let gate = device.create_timeline("slice change gate").unwrap();
        let mut finest = FINEST;
        for round in 0..4u32 {
            for _ in 0..2 {
                gpu.frame_then(&mut streamer, &texture, &finest, &probes, &[], false);
            }
            let held = u64::from(round) + 1;
            // SAFETY: the test signals the gate to `held` on the host below, after the change,
            // and waits for nothing that waits for it before (the change waits on the GPU only).
            unsafe { gate.signal_submitted(held) };
            gpu.frame_then(&mut streamer, &texture, &finest, &probes, &[gate.at(held)], false);
            let unbinds_before = streamer.stats().unbinds_after_frames;
            match round {
                0 => streamer.set_slice_bias(&texture, 0, 2).unwrap(),
                1 => {
                    streamer.set_slice(&texture, 1, Some(slice_texture(6, 1))).unwrap();
                    streamer.set_slice_bias(&texture, 0, 0).unwrap();
                }
                2 => {
                    streamer.set_slice(&texture, 3, None).unwrap();
                    finest[3] = 0;
                }
                _ => streamer.set_slice(&texture, 3, Some(slice_texture(9, 3))).unwrap(),
            }
            if round > 0 {
                assert!(
                    streamer.stats().unbinds_after_frames > unbinds_before,
                    "round {round}: the slice's unbind waited for the held frame: {:?}",
                    streamer.stats()
                );
                let binds = device.submitted_binds().expect("set_slice bound and unbound tiles");
                assert!(
                    !device.has_completed(&binds),
                    "round {round}: no bind ran while the frame that samples the old tiles is held"
                );
            }
            open(&device, &gate, held);
        }
        finest[3] = 3;
        let got = converge(&gpu, &mut streamer, &texture, &finest, &probes);
        check(&streamer, &texture, &[1, 6, 3, 9, 0], &probes, &got);
        streamer.remove_texture(texture).unwrap();
        drop(streamer);
        drop(gpu);
    });
}
