//! The shaders residency ships: GLSL in this crate's `shaders/`, compiled by `shaders/build.sh` (glslc) into
//! the committed `.spv` files embedded here. A [`Shader`] can only be one of these constants, so a
//! safe program constructor that takes `&Shader` knows its code came from glslc and that its
//! declared interface was checked against the SPIR-V itself (the test
//! `misuse_every_shipped_shader_declares_its_spirv_interface`, and again when a program is
//! created). A renderer's own SPIR-V goes through the `unsafe` `from_spirv` constructors of
//! [`ComputeProgram`](crate::compute::ComputeProgram),
//! [`GraphicsProgram`](crate::graphics::GraphicsProgram) and
//! [`MultiComputeProgram`](crate::multi::work::MultiComputeProgram).
//!
//! # Bounds: no index is trusted
//!
//! A safe dispatch or draw of a shipped shader accesses nothing outside what is bound, whatever
//! counts, indices, offsets, coordinates or table words the caller gives it — on every device,
//! whether or not it bounds-checks: residency does **not** enable `robustBufferAccess` (a cost on
//! some hardware, and not every device has `robustBufferAccess2`), so the shaders bound themselves:
//!
//! - **Buffers.** Every index into a runtime array is compared with the bound range
//!   (`arrayLength`, GLSL `.length()`) as well as with the count it is given, right before the
//!   access; an element past either is skipped (a write) or reads as zero (a read of caller data,
//!   such as `placed_buffers.comp`'s vertex index). A count past the range therefore writes the
//!   range and nothing after it ([`FILL`] with a count of 1024 into 256 bound bytes writes 64
//!   words). Fixed-size blocks (the uniform blocks of [`PLACED_BUFFERS`] and [`TEXTURE_ARRAY`])
//!   cannot be measured in the shader, so a program refuses a binding whose range is under the
//!   block ([`BindingError::RangeUnderBlock`](crate::compute::BindingError::RangeUnderBlock),
//!   from the SPIR-V's block size: [`DescriptorBinding::block_bytes`](crate::spirv::DescriptorBinding::block_bytes)),
//!   and an index into a fixed array is clamped to its length.
//! - **Images.** Filtered samples take normalized coordinates, which the sampler clamps, and
//!   clamp the LOD and array layer themselves. Every integer texel access — a fetch
//!   (`texelFetch`, `sparseTexelFetchARB`) or a store (`imageStore`) — is first compared with the
//!   image's size (`textureSize`/`imageSize` of that LOD, `textureQueryLevels` for the LOD): a
//!   fetch outside reads nothing and returns the default value (not resident) or zero, a store
//!   outside writes nothing.
//! - **Descriptor arrays.** An index into an array of descriptors is clamped below the array's
//!   length ([`SAMPLE_ARRAY`]'s 4) or, for a bindless array, below the count of views it is
//!   pushed and the array's declared length ([`BINDLESS_SAMPLE`]'s 64); residency writes every
//!   descriptor of a bindless array (the last view repeated past the views given), so an index
//!   below that length always reads a bound view.
//! - **Residency codes.** A texture read with a sparse residency instruction (`OpImageSparse*`:
//!   binding 0 of [`SPARSE_PROBE`], [`MULTI_DEVICE`], [`DISTANCE_FIELD`] and [`TEXTURE_ARRAY`])
//!   must be a sparse image — drivers may crash running these on an image that is not (lavapipe
//!   does) — so a program refuses a plain view there
//!   ([`BindingError::NotSparse`](crate::compute::BindingError::NotSparse), from
//!   [`DescriptorBinding::sparse_residency`](crate::spirv::DescriptorBinding::sparse_residency)).
//! - **Tables.** The feedback image table (`include/feedback.glsl`) and the software path's
//!   indirection texture (`include/residency_software.glsl`) are data a caller can get wrong:
//!   a slot whose 80-word entry is not inside the bound table writes no feedback, a mip past the
//!   entry's 16 is dropped, a layer is clamped to the image's, a tile past the entry's count is
//!   dropped, every feedback word is compared with the buffer's length, and an indirection word
//!   outside the texture reads 0; divisors taken from caller data are at least 1.
//!
//! With the inputs residency's own types produce, none of these bounds changes a result. The
//! test `misuse_every_shipped_shader_bounds_its_runtime_arrays_and_texel_coordinates` checks
//! the SPIR-V of every shader here (each indexed runtime array is measured, each fetched or
//! stored image is size-queried), and one `misuse_*` test per shader that takes a count or an
//! index shows the bytes around a bound range untouched (`tests/misuse_shaders.rs`); run under
//! `RESIDENCY_VALIDATION=gpu` ([`ValidationMode::GpuAssisted`](crate::ValidationMode::GpuAssisted))
//! the layer checks every access of every test as it runs. Vertex fetch is fixed-function, not a
//! shader index: [`Drawing::draw`](crate::graphics::Drawing::draw) checks its vertex count and
//! `draw_indexed` is `unsafe` (the index buffer's contents are the caller's to vouch for).

use crate::pipelines::compute::BindingKind;
use crate::pipelines::spirv::Stage;

/// One shipped SPIR-V module: its name, stage, code and the interface it declares (the descriptor
/// bindings `0..bindings().len()` of set 0, in binding order, and the push-constant bytes a
/// program reserves for it). Its entry point is `main`.
#[derive(Debug)]
pub struct Shader {
    name: &'static str,
    stage: Stage,
    words: &'static [u32],
    bindings: &'static [BindingKind],
    push_constant_bytes: u32,
}

impl Shader {
    /// Its name: the source file in `shaders/`.
    pub fn name(&self) -> &'static str {
        self.name
    }

    /// Its stage.
    pub fn stage(&self) -> Stage {
        self.stage
    }

    /// The SPIR-V words.
    pub fn words(&self) -> &'static [u32] {
        self.words
    }

    /// The kind of each binding of set 0, in binding order.
    pub fn bindings(&self) -> &'static [BindingKind] {
        self.bindings
    }

    /// Bytes of push constants a program reserves for it (a multiple of 4, at least its block).
    pub fn push_constant_bytes(&self) -> u32 {
        self.push_constant_bytes
    }
}

/// Little-endian bytes to SPIR-V words, at compile time (so the words are aligned and the host's
/// byte order, with no `unsafe`).
const fn le_words<const N: usize>(bytes: &[u8]) -> [u32; N] {
    assert!(bytes.len() == 4 * N, "a SPIR-V file is a whole number of words");
    let mut words = [0u32; N];
    let mut i = 0;
    while i < N {
        words[i] = u32::from_le_bytes([bytes[4 * i], bytes[4 * i + 1], bytes[4 * i + 2], bytes[4 * i + 3]]);
        i += 1;
    }
    words
}

/// A shipped shader: `$name` is the source in `shaders/`, whose `$name.spv` is embedded.
macro_rules! shader {
    ($(#[$doc:meta])* $const:ident, $name:literal, $stage:ident, [$($kind:ident $(($n:literal))?),*], $push:literal) => {
        $(#[$doc])*
        pub static $const: Shader = Shader {
            name: $name,
            stage: Stage::$stage,
            words: {
                const BYTES: &[u8] =
                    include_bytes!(concat!(env!("CARGO_MANIFEST_DIR"), "/shaders/", $name, ".spv"));
                const WORDS: [u32; BYTES.len() / 4] = le_words(BYTES);
                &WORDS
            },
            bindings: &[$(BindingKind::$kind $(($n))?),*],
            push_constant_bytes: $push,
        };
    };
}

shader!(
    /// `placed_buffers.comp`: transforms vertices read through indices with a uniform scale and
    /// bias (the tour and the placed-buffers example). No push constants.
    PLACED_BUFFERS,
    "placed_buffers.comp",
    Compute,
    [StorageBuffer, StorageBuffer, UniformBuffer, StorageBuffer],
    0
);
shader!(
    /// `fill.comp`: writes `value` into `count` words; push `{ count, value }`.
    FILL,
    "fill.comp",
    Compute,
    [StorageBuffer],
    8
);
shader!(
    /// `sparse_fallback.comp`: samples a partially resident image with the min-LOD map fallback;
    /// push `{ vec4 defaultValue; uint count; }` (32 bytes reserved).
    SPARSE_FALLBACK,
    "sparse_fallback.comp",
    Compute,
    [SampledImage, SampledImage, StorageBuffer, StorageBuffer],
    32
);
shader!(
    /// `sparse_fallback_software.comp`: the same through a software tile atlas and indirection.
    SPARSE_FALLBACK_SOFTWARE,
    "sparse_fallback_software.comp",
    Compute,
    [SampledImage, SampledImage, StorageBuffer, StorageBuffer],
    32
);
shader!(
    /// `sparse_probe.comp`: reads texels with residency codes; push
    /// `{ vec4 defaultValue; uint count; }` (32 bytes reserved).
    SPARSE_PROBE,
    "sparse_probe.comp",
    Compute,
    [SampledImage, StorageBuffer, StorageBuffer],
    32
);
shader!(
    /// `sparse_store.comp`: writes a pattern into a storage image; push `{ ivec2 origin, size }`.
    SPARSE_STORE,
    "sparse_store.comp",
    Compute,
    [StorageImage],
    16
);
shader!(
    /// `stream_view.comp`: the streaming demo's view (sampling, feedback, reference); 80 bytes of
    /// push constants.
    STREAM_VIEW,
    "stream_view.comp",
    Compute,
    [SampledImage, SampledImage, StorageImage, StorageBuffer, StorageBuffer, SampledImage],
    80
);
shader!(
    /// `stream_view_software.comp`: the streaming view through a software tile atlas.
    STREAM_VIEW_SOFTWARE,
    "stream_view_software.comp",
    Compute,
    [SampledImage, SampledImage, StorageImage, StorageBuffer, StorageBuffer, SampledImage],
    80
);
shader!(
    /// `feedback_view.comp`: records shader feedback for sample points; push `{ count }`.
    FEEDBACK_VIEW,
    "feedback_view.comp",
    Compute,
    [StorageBuffer, StorageBuffer, StorageBuffer],
    4
);
shader!(
    /// `feedback_sampling.comp`: which invocations write feedback in a frame; push
    /// `{ frame, stride, interval, width }`.
    FEEDBACK_SAMPLING,
    "feedback_sampling.comp",
    Compute,
    [StorageBuffer, StorageBuffer, StorageBuffer],
    16
);
shader!(
    /// `cull_indices.comp`: writes a quad index list with culled quads degenerate; push
    /// `{ quads, culled_mask }`.
    CULL_INDICES,
    "cull_indices.comp",
    Compute,
    [StorageBuffer],
    8
);
shader!(
    /// `multi_device.comp`: samples a texture at vertices on every device; push `{ count }`.
    MULTI_DEVICE,
    "multi_device.comp",
    Compute,
    [SampledImage, StorageBuffer, StorageBuffer],
    4
);
shader!(
    /// `sample_texels.comp`: reads texels of a sampled image; push `{ count, width }`.
    SAMPLE_TEXELS,
    "sample_texels.comp",
    Compute,
    [SampledImage, StorageBuffer],
    8
);
shader!(
    /// `quads.vert`: passes `vec2 position` (location 0) and `vec4 color` (location 1) through.
    QUADS_VERT,
    "quads.vert",
    Vertex,
    [],
    0
);
shader!(
    /// `quads.frag`: writes the flat colour.
    QUADS_FRAG,
    "quads.frag",
    Fragment,
    [],
    0
);

shader!(
    /// `vt_quad.vert`: textured geometry for the `vt_quad*.frag` shaders. Vertex input (binding 0,
    /// 20-byte stride): location 0 `vec3 position` (`R32G32B32_SFLOAT`, offset 0, world space),
    /// location 1 `vec2 uv` (`R32G32_SFLOAT`, offset 12); passes uv on. Push constants: bytes
    /// 0..64 `mat4 viewProj` (column-major, world → Vulkan clip space), the start of the fragment
    /// shaders' block. No descriptors.
    VT_QUAD_VERT,
    "vt_quad.vert",
    Vertex,
    [],
    64
);
shader!(
    /// `vt_quad.frag`: samples a partially resident texture on the hardware path (sparse image
    /// with the min-LOD map fallback of `residency.glsl`) at the LOD of its uv derivatives, and
    /// writes shader feedback from the fragment shader (`feedback.glsl`). With [`VT_QUAD_VERT`]:
    ///
    /// - binding 0: `sampler2D` — the [`SparseImage`](crate::sparse::SparseImage) (all mips,
    ///   `GENERAL`), trilinear;
    /// - binding 1: `usampler2D` — its min-LOD map, with a **nearest** sampler (an integer
    ///   texture);
    /// - binding 2: storage buffer — the frame's feedback buffer (atomics);
    /// - binding 3: storage buffer (read-only) — the feedback image table;
    /// - push constants, 96 bytes for both stages: 0..64 `mat4 viewProj` (the vertex shader's),
    ///   64..80 `uvec4` (x: feedback image slot, y: frame, z: feedback pixel stride, w: feedback
    ///   frame interval, as `FeedbackSampling`), 80..96 `uvec4` control (x bit 0: write feedback;
    ///   0 draws the same without it; y, z, w: 0).
    ///
    /// Feedback from a fragment shader needs the device feature `fragmentStoresAndAtomics`
    /// ([`ProgramError::FeatureMissing`](crate::compute::ProgramError::FeatureMissing) without
    /// it); the feedback buffer needs a host-visible intent (`Readback`, or
    /// `DeviceLocalHostVisible` to keep the atomics in the GPU's memory), and a barrier from the fragment
    /// shader's writes to host reads must follow the draws before it is decoded. Pixels with
    /// nothing resident are magenta.
    VT_QUAD_FRAG,
    "vt_quad.frag",
    Fragment,
    [SampledImage, SampledImage, StorageBuffer, StorageBuffer],
    96
);
shader!(
    /// `vt_quad_software.frag`: [`VT_QUAD_FRAG`] on the software path (`residency_software.glsl`),
    /// with the same bindings and push constants: binding 0 the tile-cache atlas (bilinear or
    /// trilinear), binding 1 the indirection texture (a `usampler2D`, **nearest**), binding 2 the
    /// feedback buffer, binding 3 the image table. Needs `fragmentStoresAndAtomics`, no sparse
    /// feature; the same feedback-buffer rules.
    VT_QUAD_SOFTWARE_FRAG,
    "vt_quad_software.frag",
    Fragment,
    [SampledImage, SampledImage, StorageBuffer, StorageBuffer],
    96
);
shader!(
    /// `vt_quad_deferred.frag`: [`VT_QUAD_FRAG`] with deferred feedback: the pixel that writes
    /// feedback stores one 16-byte record (uv, LOD, slot, min LOD: `feedback_deferred.glsl`) into
    /// the frame's record buffer, with no table read or atomic, and the streamer's resolve pass
    /// ([`FEEDBACK_RESOLVE`], recorded by
    /// [`FrameBindings::resolve_feedback`](crate::streaming::FrameBindings::resolve_feedback)) writes the
    /// feedback after the draws. For a streamer made with
    /// [`StreamerDesc::deferred_feedback`](crate::streaming::StreamerDesc::deferred_feedback).
    ///
    /// - binding 0: `sampler2D` — the sparse image (all mips, `GENERAL`), trilinear;
    /// - binding 1: `usampler2D` — its min-LOD map, **nearest**;
    /// - binding 2: storage buffer — the frame's record buffer
    ///   ([`FrameBindings::feedback_records`](crate::streaming::FrameBindings::feedback_records));
    /// - push constants: [`VT_QUAD_FRAG`]'s 96 bytes, with the record cells per row in bits 8..31
    ///   of the control word ([`FrameBindings::feedback_words`](crate::streaming::FrameBindings::feedback_words)
    ///   fills them).
    ///
    /// Needs `fragmentStoresAndAtomics` (the store) and `shaderResourceResidency`.
    VT_QUAD_DEFERRED_FRAG,
    "vt_quad_deferred.frag",
    Fragment,
    [SampledImage, SampledImage, StorageBuffer],
    96
);
shader!(
    /// `vt_quad_software_deferred.frag`: [`VT_QUAD_DEFERRED_FRAG`] on the software path (binding 0
    /// the atlas, binding 1 the indirection, **nearest**, binding 2 the record buffer; the same
    /// push constants). Needs `fragmentStoresAndAtomics`; no sparse feature.
    VT_QUAD_SOFTWARE_DEFERRED_FRAG,
    "vt_quad_software_deferred.frag",
    Fragment,
    [SampledImage, SampledImage, StorageBuffer],
    96
);
shader!(
    /// `vt_feedback.frag`: deferred feedback from a pass of its own at 1/stride of the render's
    /// resolution, hardware path (`include/vt_feedback.glsl`): one fragment per record cell stores
    /// that cell's record (uv, LOD, slot, min LOD), with no texture sample, so the render's own
    /// [`VT_QUAD_DEFERRED_FRAG`] carries no feedback (control bit 0 off). With [`VT_QUAD_VERT`],
    /// drawn into a `ceil(width / stride) × ceil(height / stride)` target with a view-projection
    /// that puts the frame's writing pixels on its pixel centres (`residency stream
    /// --feedback-pass` does this):
    ///
    /// - binding 0: `sampler2D` — the sparse image (its size only);
    /// - binding 1: `usampler2D` — its min-LOD map, **nearest**;
    /// - binding 2: storage buffer — the frame's record buffer
    ///   ([`FrameBindings::feedback_records`](crate::streaming::FrameBindings::feedback_records));
    /// - push constants, 80 bytes for both stages: 0..64 `mat4 viewProj`, 64..80 `uvec4` (x: the
    ///   feedback image slot, y: record cells per row, z: the pixel stride, w: the frame's phase
    ///   `x | y << 16`, `FeedbackSampling::phase`). The LOD is the render's at the pixel it
    ///   stands for (from `uv / w` and `1 / w`, which are affine in screen space), not this
    ///   pass's.
    ///
    /// Needs `fragmentStoresAndAtomics` (the store).
    VT_FEEDBACK_FRAG,
    "vt_feedback.frag",
    Fragment,
    [SampledImage, SampledImage, StorageBuffer],
    80
);
shader!(
    /// `vt_feedback_software.frag`: [`VT_FEEDBACK_FRAG`] on the software path (binding 0 the atlas,
    /// its size used only where the indirection's header has none; binding 1 the indirection,
    /// **nearest**; binding 2 the record buffer; the same push constants). Needs
    /// `fragmentStoresAndAtomics`; no sparse feature.
    VT_FEEDBACK_SOFTWARE_FRAG,
    "vt_feedback_software.frag",
    Fragment,
    [SampledImage, SampledImage, StorageBuffer],
    80
);
shader!(
    /// `feedback_resolve.comp`: folds a frame's deferred feedback records into its feedback
    /// buffer (per written record, `feedback()` of `feedback.glsl`: the table reads, bounds and
    /// atomics), zeroing each record it folds. Binding 0 the record buffer, 1 the feedback buffer,
    /// 2 the image table (read-only); push `uint count` (records visited). The streamer records it
    /// ([`FrameBindings::resolve_feedback`](crate::streaming::FrameBindings::resolve_feedback)).
    FEEDBACK_RESOLVE,
    "feedback_resolve.comp",
    Compute,
    [StorageBuffer, StorageBuffer, StorageBuffer],
    4
);
shader!(
    /// `vt_quad_reference.frag`: the reference for [`VT_QUAD_FRAG`] (PSNR): samples an ordinary
    /// fully resident `sampler2D` at binding 0 (trilinear) at the same uv and derivative LOD. Its
    /// program's push constants are [`VT_QUAD_VERT`]'s 64 bytes only.
    VT_QUAD_REFERENCE_FRAG,
    "vt_quad_reference.frag",
    Fragment,
    [SampledImage],
    0
);
shader!(
    /// `prt_volume.comp`: samples a sparse 3D image at probes `(u, v, w, lod)` with
    /// `residencySampleWarn` (min-LOD fallback, residency code, low-water warning) and writes their
    /// feedback for image slot 0; results `{ vec4 texel; vec4 (code, LOD used, min-LOD, level
    /// that warned) }`; push `{ vec4 defaultValue; uint count; uint lowWater; }` (32 bytes reserved).
    PRT_VOLUME,
    "prt_volume.comp",
    Compute,
    [SampledImage, SampledImage, StorageBuffer, StorageBuffer, StorageBuffer, StorageBuffer],
    32
);
shader!(
    /// `prt_array.comp`: the same for a sparse 2D array, probes `(u, v, layer, lod)`, a per-layer
    /// min-LOD map and per-layer feedback.
    PRT_ARRAY,
    "prt_array.comp",
    Compute,
    [SampledImage, SampledImage, StorageBuffer, StorageBuffer, StorageBuffer, StorageBuffer],
    32
);
shader!(
    /// `sparse_warn.comp`: samples a partially resident 2D image at probes `(u, v, lod)` with
    /// `residencySampleWarn`; results `{ vec4 texel; vec4 (code, LOD used, level that warned, 0) }`;
    /// push `{ vec4 defaultValue; uint count; uint lowWater; }` (32 bytes reserved).
    SPARSE_WARN,
    "sparse_warn.comp",
    Compute,
    [SampledImage, SampledImage, StorageBuffer, StorageBuffer],
    32
);
shader!(
    /// `sparse_warn_software.comp`: the same through a software tile atlas and indirection.
    SPARSE_WARN_SOFTWARE,
    "sparse_warn_software.comp",
    Compute,
    [SampledImage, SampledImage, StorageBuffer, StorageBuffer],
    32
);
shader!(
    /// `sparse_footprint.comp`: the footprint-exact residency helpers of `residency.glsl`
    /// (`residencySampleFallback`, `residencySampleGradFallback`, `residencySampleGradWarn`) over a
    /// partially resident texture (bindings 0, 1: sparse image, min-LOD map) and a fully resident
    /// twin (2, 3), sampled where the first was resident at the LOD it used. Probes (binding 4)
    /// `{ vec4 (u, v, lod, mode); vec4 (dPdx, dPdy) }`, mode 0 explicit LOD, 1 gradients, 2
    /// gradients with the warn code; results (binding 5) `{ vec4 texel; vec4 twin; vec4 (resident,
    /// LOD used, code, twin resident) }`; push `{ vec4 defaultValue; uint count; float
    /// maxAnisotropy; uint lowWater; }` (32 bytes reserved).
    SPARSE_FOOTPRINT,
    "sparse_footprint.comp",
    Compute,
    [SampledImage, SampledImage, SampledImage, SampledImage, StorageBuffer, StorageBuffer],
    32
);
shader!(
    /// `sparse_footprint_software.comp`: [`SPARSE_FOOTPRINT`] on the software path
    /// (`residency_software.glsl`: the atlas at bindings 0 and 2, the two indirections at 1 and 3).
    SPARSE_FOOTPRINT_SOFTWARE,
    "sparse_footprint_software.comp",
    Compute,
    [SampledImage, SampledImage, SampledImage, SampledImage, StorageBuffer, StorageBuffer],
    32
);
shader!(
    /// `sparse_footprint_codes.comp`: [`SPARSE_FOOTPRINT`] compiled with `RESIDENCY_CODES`: the
    /// hardware helpers also require each sample's own residency code.
    SPARSE_FOOTPRINT_CODES,
    "sparse_footprint_codes.comp",
    Compute,
    [SampledImage, SampledImage, SampledImage, SampledImage, StorageBuffer, StorageBuffer],
    32
);
shader!(
    /// `sparse_footprint_clamp.comp`: [`SPARSE_FOOTPRINT_CODES`] with mode 3, the hardware's
    /// minimum-LOD clamp (`residencySampleGradClamp`, `sparseTextureGradClampARB`); needs the
    /// device feature `shaderResourceMinLod`.
    SPARSE_FOOTPRINT_CLAMP,
    "sparse_footprint_clamp.comp",
    Compute,
    [SampledImage, SampledImage, SampledImage, SampledImage, StorageBuffer, StorageBuffer],
    32
);
shader!(
    /// `prt_array_software.comp`: a 2D array on the software path (the atlas and an indirection
    /// with one layer per layer) sampled at probes `(u, v, layer, lod)` with
    /// `residencySampleWarn`; results and push as [`PRT_ARRAY`]'s, without feedback.
    PRT_ARRAY_SOFTWARE,
    "prt_array_software.comp",
    Compute,
    [SampledImage, SampledImage, StorageBuffer, StorageBuffer],
    32
);
shader!(
    /// `prt_target.vert`: one triangle covering the render area from `gl_VertexIndex` (draw 3
    /// vertices, no vertex buffer).
    PRT_TARGET_VERT,
    "prt_target.vert",
    Vertex,
    [],
    0
);
shader!(
    /// `prt_target.frag`: writes `sparse_store.comp`'s pattern by fragment position,
    /// `(x % 256, y % 256, 255, 255)` as unorm (rendering into a partially resident attachment).
    PRT_TARGET_FRAG,
    "prt_target.frag",
    Fragment,
    [],
    0
);
shader!(
    /// `distance_field.comp`: ray-marches a sparse distance-field volume (`sampler3D`, distances
    /// in texels) with `include/raymarch.glsl`'s `residencyMarch`, a non-resident brick reading as
    /// the maximum step (the residency default value); one ray per invocation from a buffer of
    /// two `vec4`s per ray (origin, direction: texel coordinates of mip 0), per ray
    /// `vec4(t, steps, non-resident samples, 1 at a hit else 0)`; push
    /// `{ float maxStep, hitDistance; uint stepLimit, count; }`. Made for
    /// [`DistanceFieldVolume`](crate::sparse::DistanceFieldVolume), whose `march_cpu` takes the
    /// same steps.
    DISTANCE_FIELD,
    "distance_field.comp",
    Compute,
    [SampledImage, StorageBuffer, StorageBuffer],
    16
);
shader!(
    /// `texture_array.comp`: samples a sparse 2D array at probes `(u, v, layer, lod)` at
    /// `lod + bias[layer].x` (a uniform buffer of 256 `vec4`s: per-slice LOD bias) with residency
    /// codes; results `{ vec4 texel; vec4 (resident, LOD sampled, 0, 0) }`; push
    /// `{ vec4 defaultValue; uint count; }` (32 bytes reserved).
    TEXTURE_ARRAY,
    "texture_array.comp",
    Compute,
    [SampledImage, UniformBuffer, StorageBuffer, StorageBuffer],
    32
);
shader!(
    /// `slice_bias.comp`: a sliced texture array
    /// ([`Streamer::add_sliced_texture`](crate::streaming::Streamer::add_sliced_texture)) sampled
    /// through `residency_slices.glsl` at probes `(u, v, slice, lod)`, `lod` that of the slice's
    /// own texture: binding 0 the sparse array (`sampler2DArray`), 1 its min-LOD map
    /// (`usampler2DArray`, nearest), 2 the streamer's per-slice LOD-bias buffer (`float[]`), 3 the
    /// probes, 4 the results `{ vec4 texel; vec4 (code, LOD used, the slice's bias, min-LOD) }`,
    /// 5 the feedback buffer, 6 the image table (`residencySliceFeedback`); push
    /// `{ vec4 defaultValue; uint count; uint lowWater; uint slot; uint writeFeedback; }`.
    SLICE_BIAS,
    "slice_bias.comp",
    Compute,
    [SampledImage, SampledImage, StorageBuffer, StorageBuffer, StorageBuffer, StorageBuffer, StorageBuffer],
    32
);
shader!(
    /// `ptex.comp`: PRT-Ptex probes through `include/ptex.glsl` (per-face textures with borders in
    /// a sparse 2D array of one slice per level, manual trilinear filtering between slices with the
    /// face's finest resident level as fallback); binding 1 the face table of
    /// [`PtexTexture`](crate::sparse::ptex::PtexTexture), probes `(face, u, v, level)`, results
    /// `{ vec4 colour; vec4 (level 0, level 1, blend, 1 for a face with a record) }`; push
    /// `{ uint count; }`.
    PTEX,
    "ptex.comp",
    Compute,
    [SampledImage, StorageBuffer, StorageBuffer, StorageBuffer],
    4
);

shader!(
    /// `busy.comp`: one thread runs `iterations` dependent steps, then writes one word; push
    /// `{ uint iterations, seed; }`. A stand-in for a long frame: dispatched before the work that
    /// samples, behind a barrier, it holds a frame in flight on the GPU (frame-protocol tests).
    BUSY,
    "busy.comp",
    Compute,
    [StorageBuffer],
    8
);

shader!(
    /// `sparse_clamp.frag`: `residencySampleClamp` (implicit LOD clamped by the hardware to the
    /// finest mip whose whole footprint is resident, `sparseTextureClampARB`, residency codes)
    /// with [`VT_QUAD_VERT`]: binding 0 the sparse image, binding 1 its min-LOD map (nearest);
    /// push 64..80 `vec4 defaultValue`, 80..84 `float maxAnisotropy` (96 bytes for both stages).
    /// Needs the device feature `shaderResourceMinLod`.
    SPARSE_CLAMP_FRAG,
    "sparse_clamp.frag",
    Fragment,
    [SampledImage, SampledImage],
    96
);
shader!(
    /// `indirect_clamp.comp`: residency's pass before an indirect dispatch
    /// ([`IndirectDispatchItem`](crate::multi::indirect::IndirectDispatchItem)): copies the
    /// command at word `first` of binding 0 into binding 1, `(0, 0, 0)` when a count is over the
    /// limits pushed; push `{ first, limit_x, limit_y, limit_z }`.
    INDIRECT_CLAMP,
    "indirect_clamp.comp",
    Compute,
    [StorageBuffer, StorageBuffer],
    16
);
shader!(
    /// `indirect_from_count.comp`: the GPU indirect-argument writer
    /// ([`GpuIndirectWriter`](crate::multi::indirect::GpuIndirectWriter)): writes
    /// `(ceil(count / per_group), 1, 1)` from word `count_at` of binding 0 at word `first` of
    /// binding 1, `(0, 1, 1)` over `limit_x`; push `{ count_at, first, per_group, limit_x }`.
    INDIRECT_FROM_COUNT,
    "indirect_from_count.comp",
    Compute,
    [StorageBuffer, StorageBuffer],
    16
);
shader!(
    /// `bindless_sample.comp`: invocation `i` writes the centre texel of texture `i` (clamped
    /// below `textures_bound` and the array's 64) of a bindless array, as RGBA8; push
    /// `{ count, textures_bound }`.
    BINDLESS_SAMPLE,
    "bindless_sample.comp",
    Compute,
    [StorageBuffer, BindlessSampledImages(64)],
    8
);
shader!(
    /// `sample_array.comp`: invocation `i` writes the centre texel of texture `min(i, 3)` of a
    /// fixed array of four, as RGBA8; push `{ count }`.
    SAMPLE_ARRAY,
    "sample_array.comp",
    Compute,
    [StorageBuffer, SampledImageArray(4)],
    4
);

shader!(
    /// `ray_query.comp`: traces a ray per pixel through a top-level acceleration structure with a
    /// ray query (`GL_EXT_ray_query`; needs `EnabledFeatures::ray_query`) and writes
    /// `customIndex * 10 + primitiveIndex + 1` of the hit, 0 on a miss (and for a non-finite ray
    /// origin, which the push constants could make); push
    /// `{ uint width; uint height; float scale; float yBias; }`.
    RAY_QUERY,
    "ray_query.comp",
    Compute,
    [AccelerationStructure, StorageBuffer],
    16
);

shader!(
    /// `trace.rgen`: the ray-tracing twin of [`RAY_QUERY`] (`GL_EXT_ray_tracing`; needs
    /// `EnabledFeatures::ray_tracing_pipeline`): one ray per pixel of the launch, the payload of
    /// [`TRACE_CLOSEST_HIT`] or [`TRACE_MISS`] written; the same bindings and push constants.
    TRACE_RAYGEN,
    "trace.rgen",
    RayGeneration,
    [AccelerationStructure, StorageBuffer],
    16
);
shader!(
    /// `trace.rmiss`: the miss shader of [`TRACE_RAYGEN`] (payload 0).
    TRACE_MISS,
    "trace.rmiss",
    Miss,
    [],
    0
);
shader!(
    /// `trace.rchit`: the closest-hit shader of [`TRACE_RAYGEN`] (payload
    /// `customIndex * 10 + primitiveIndex + 1`).
    TRACE_CLOSEST_HIT,
    "trace.rchit",
    ClosestHit,
    [],
    0
);

shader!(
    /// `compact_copy_r32.comp`: tile compaction's compute copy between two carrier images of
    /// 4-byte texels (`r32ui` views; `sparse/compact_compute.rs`): every texel of slots
    /// `first..count`, each a `tile`-sized block of a grid `cols` blocks a row, copied from
    /// binding 0 to the same texel of binding 1; push `{ uvec2 tile; uint cols; uint count;
    /// uint first; }`.
    COMPACT_COPY_R32,
    "compact_copy_r32.comp",
    Compute,
    [StorageImage, StorageImage],
    20
);
shader!(
    /// `compact_copy_rgba16.comp`: [`COMPACT_COPY_R32`] for 8-byte texels or compressed blocks
    /// (`rgba16ui` views).
    COMPACT_COPY_RGBA16,
    "compact_copy_rgba16.comp",
    Compute,
    [StorageImage, StorageImage],
    20
);
shader!(
    /// `compact_copy_rgba32.comp`: [`COMPACT_COPY_R32`] for 16-byte texels or compressed blocks
    /// (`rgba32ui` views).
    COMPACT_COPY_RGBA32,
    "compact_copy_rgba32.comp",
    Compute,
    [StorageImage, StorageImage],
    20
);

/// Every shipped shader.
pub static ALL: [&Shader; 52] = [
    &PLACED_BUFFERS,
    &FILL,
    &BUSY,
    &SPARSE_FALLBACK,
    &SPARSE_FALLBACK_SOFTWARE,
    &SPARSE_PROBE,
    &SPARSE_STORE,
    &STREAM_VIEW,
    &STREAM_VIEW_SOFTWARE,
    &FEEDBACK_VIEW,
    &FEEDBACK_SAMPLING,
    &CULL_INDICES,
    &MULTI_DEVICE,
    &SAMPLE_TEXELS,
    &QUADS_VERT,
    &QUADS_FRAG,
    &VT_QUAD_VERT,
    &VT_QUAD_FRAG,
    &VT_QUAD_SOFTWARE_FRAG,
    &VT_QUAD_REFERENCE_FRAG,
    &VT_QUAD_DEFERRED_FRAG,
    &VT_QUAD_SOFTWARE_DEFERRED_FRAG,
    &VT_FEEDBACK_FRAG,
    &VT_FEEDBACK_SOFTWARE_FRAG,
    &FEEDBACK_RESOLVE,
    &PRT_VOLUME,
    &PRT_ARRAY,
    &SPARSE_WARN,
    &SPARSE_WARN_SOFTWARE,
    &PRT_ARRAY_SOFTWARE,
    &PRT_TARGET_VERT,
    &PRT_TARGET_FRAG,
    &DISTANCE_FIELD,
    &TEXTURE_ARRAY,
    &SLICE_BIAS,
    &PTEX,
    &SPARSE_FOOTPRINT,
    &SPARSE_FOOTPRINT_SOFTWARE,
    &SPARSE_FOOTPRINT_CODES,
    &SPARSE_FOOTPRINT_CLAMP,
    &SPARSE_CLAMP_FRAG,
    &RAY_QUERY,
    &TRACE_RAYGEN,
    &TRACE_MISS,
    &TRACE_CLOSEST_HIT,
    &INDIRECT_CLAMP,
    &BINDLESS_SAMPLE,
    &SAMPLE_ARRAY,
    &INDIRECT_FROM_COUNT,
    &COMPACT_COPY_R32,
    &COMPACT_COPY_RGBA16,
    &COMPACT_COPY_RGBA32,
];

/// The `vt_quad` fragment shader for a residency path: [`VT_QUAD_SOFTWARE_FRAG`] on the software
/// path, [`VT_QUAD_FRAG`] otherwise (hardware; `Auto` is resolved by the streamer or
/// [`Device::residency_path`](crate::Device::residency_path) first).
pub fn vt_quad_fragment(path: residency_core::tiles::ResidencyPath) -> &'static Shader {
    match path {
        residency_core::tiles::ResidencyPath::Software => &VT_QUAD_SOFTWARE_FRAG,
        _ => &VT_QUAD_FRAG,
    }
}

/// The deferred-feedback `vt_quad` fragment shader for a residency path:
/// [`VT_QUAD_SOFTWARE_DEFERRED_FRAG`] on the software path, [`VT_QUAD_DEFERRED_FRAG`] otherwise.
pub fn vt_quad_deferred_fragment(path: residency_core::tiles::ResidencyPath) -> &'static Shader {
    match path {
        residency_core::tiles::ResidencyPath::Software => &VT_QUAD_SOFTWARE_DEFERRED_FRAG,
        _ => &VT_QUAD_DEFERRED_FRAG,
    }
}

/// The feedback-pass fragment shader for a residency path: [`VT_FEEDBACK_SOFTWARE_FRAG`] on the
/// software path, [`VT_FEEDBACK_FRAG`] otherwise.
pub fn vt_feedback_fragment(path: residency_core::tiles::ResidencyPath) -> &'static Shader {
    match path {
        residency_core::tiles::ResidencyPath::Software => &VT_FEEDBACK_SOFTWARE_FRAG,
        _ => &VT_FEEDBACK_FRAG,
    }
}
