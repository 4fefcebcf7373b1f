//! Sliced texture arrays (the seed's "arrays of variable sized textures"): a streamed 2D array
//! whose slice `s` holds a texture of its own size, `array >> bias[s]`, filling the array's levels
//! from `bias[s]` down, with a per-slice LOD-bias buffer the streamer owns and updates
//! (`shaders/include/residency_slices.glsl` adds it to every sample's LOD).
//!
//! The streamer keeps the buffer in step with the slices: a slice given a texture (at
//! [`Streamer::add_sliced_texture`] or [`Streamer::set_slice`]) gets its finest level as its bias,
//! an emptied slice [`SLICE_EMPTY_BIAS`], and [`Streamer::set_slice_bias`] samples a slice coarser.
//! Every update is a staged copy of the streamer's uploader, so it reaches the GPU inside the next
//! recorded frame, before its draws ([`FrameBindings::record`](super::FrameBindings::record)) or
//! in a submission of the uploader's own after the frames before it: never a host write into a
//! buffer a frame in flight reads.

use super::{StreamError, Streamer, Unapplied, VirtualTexture};
use crate::resources::buffer::{Buffer, BufferDesc};
use residency_core::streaming::{
    FrameOutput, RequestKind, SourceDepth, SourceError, StreamUnit, TileKey, TileRequest, TileSource,
};
use residency_core::tiles::ImageId;
use residency_core::usage::BufferUsage;
use residency_core::vt_file::VtDesc;
use std::sync::Arc;

/// The bias buffer's value for a slice that holds no texture (`RESIDENCY_SLICE_EMPTY` in
/// `residency_slices.glsl`): its samples return the caller's default value, not resident.
pub const SLICE_EMPTY_BIAS: f32 = -1.0;

/// A sliced array's slices and their LOD-bias buffer.
pub(super) struct Slices {
    /// Per slice, its texture's source and finest level (`None`: empty).
    pub(super) sources: Vec<Option<(Arc<dyn TileSource>, u32)>>,
    /// Per slice, the bias in the buffer (at or coarser than the finest level; 0 when empty).
    pub(super) bias: Vec<u32>,
    /// One `f32` per slice (std430 `float[]`): the bias, or [`SLICE_EMPTY_BIAS`].
    pub(super) buffer: Buffer,
}

impl Slices {
    /// The buffer's value for slice `s`.
    fn value(&self, s: usize) -> f32 {
        match self.sources[s] {
            Some(_) => self.bias[s] as f32,
            None => SLICE_EMPTY_BIAS,
        }
    }

    /// The finest level of slice `s` (`None`: empty).
    fn finest(&self, s: usize) -> Option<u32> {
        self.sources[s].as_ref().map(|(_, b)| *b)
    }
}

/// What a load of one slice reads: "mip" `m` of the array is mip `m - bias` of the slice's texture;
/// the levels finer than its finest (which the streamer never requests, but a mip tail or, without
/// one, the coarse chain of single-tile mips may hold) and an empty slice read zeros.
struct SliceSource {
    name: String,
    array: VtDesc,
    texture: Option<(Arc<dyn TileSource>, u32)>,
}

impl TileSource for SliceSource {
    fn name(&self) -> &str {
        &self.name
    }

    fn desc(&self) -> VtDesc {
        self.array
    }

    fn read_tile(&self, mip: u32, x: u32, y: u32) -> Result<Vec<u8>, SourceError> {
        match &self.texture {
            Some((source, bias)) if mip >= *bias => source.read_tile(mip - bias, x, y),
            _ => {
                let (w, h) = self.array.tile_extent(mip, x, y).ok_or_else(|| SourceError::Read {
                    source_name: self.name.clone(),
                    reason: format!("no tile ({x}, {y}) of mip {mip}"),
                })?;
                Ok(vec![0; self.array.format.region_bytes(w, h, 1) as usize])
            }
        }
    }
}

/// The finest level of `array` that `source` fills: the `b` with `source` `array >> b` in each
/// side, `mip_count - b` mips, the same format and tiles, no stored border, 2D.
fn finest_level(name: &str, slice: u32, array: &VtDesc, source: &dyn TileSource) -> Result<u32, StreamError> {
    let d = source.desc();
    let refuse = |reason: String| StreamError::UnsupportedSource {
        name: format!("{name} slice {slice} (`{}`)", source.name()),
        reason,
    };
    if source.depth() != SourceDepth::FLAT {
        return Err(refuse("a volume: a slice holds a 2D texture".into()));
    }
    if d.format != array.format || d.tile_width != array.tile_width || d.tile_height != array.tile_height {
        return Err(refuse(format!(
            "{:?} in tiles of {} × {}: the array is {:?} in tiles of {} × {}",
            d.format, d.tile_width, d.tile_height, array.format, array.tile_width, array.tile_height
        )));
    }
    if d.border != array.border {
        return Err(refuse(format!("a stored border of {}: the array's is {}", d.border, array.border)));
    }
    // `array` is the caller's, not validated yet: its mip count may pass 32, where a shift by
    // `b` would overflow (a side halved 32 times or more is 1).
    let side = |s: u32, b: u32| s.checked_shr(b).unwrap_or(0).max(1);
    (0..array.mip_count)
        .find(|&b| {
            d.width == side(array.width, b)
                && d.height == side(array.height, b)
                && d.mip_count == array.mip_count - b
        })
        .ok_or_else(|| {
            refuse(format!(
                "{} × {} with {} mips is not the array's {} × {} ({} mips) at any level (each side \
                 halved per level, one mip fewer per level)",
                d.width, d.height, d.mip_count, array.width, array.height, array.mip_count
            ))
        })
}

impl Streamer {
    /// Adds a sliced texture array (the seed's "arrays of variable sized textures"): a 2D array
    /// of `slices.len()` slices (at least 2) of `desc`'s size, format, mips and tiles, where slice
    /// `s` holds the texture `slices[s]` of its own size — `desc >> b` texels with `desc.mip_count -
    /// b` mips fills the array's levels from `b` down, its *finest level* — or nothing (`None`).
    /// The streamer owns a per-slice LOD-bias buffer ([`TextureBinding::slice_bias`](super::TextureBinding::slice_bias):
    /// one `float` per slice, the slice's finest level, or [`SLICE_EMPTY_BIAS`] for an empty one),
    /// which `residency_slices.glsl` adds to every sample's LOD, so that LOD 0 samples each
    /// slice's own finest level. Feedback names a tile of one slice (`residencySliceFeedback`, or
    /// `feedback(slot, slice, uv, lod + bias, …)`): the manager loads it from that slice's texture
    /// at mip `mip - b`; requests finer than a slice's finest level, or of an empty slice, are
    /// dropped (nothing there to load). Primed as [`add_texture`](Self::add_texture) does: every
    /// slice's coarse chain (an empty slice's, and the levels finer than a slice's finest that a
    /// mip tail or the coarse chain holds, read zeros, and are never sampled through the include).
    ///
    /// Hardware path only, as array textures are ([`add_array_texture`](Self::add_array_texture)):
    /// the software path, fewer than 2 slices, a `desc` whose mip count is 0 or past the full
    /// chain of its size, or a slice's texture that is not the array's at some level (format,
    /// tiles, border, size, mips) are refused with
    /// [`StreamError::UnsupportedSource`], adding nothing. Must be called between frames.
    pub fn add_sliced_texture(
        &mut self,
        name: &str,
        desc: VtDesc,
        slices: &[Option<Arc<dyn TileSource>>],
    ) -> Result<VirtualTexture, StreamError> {
        let refuse =
            |reason: &str| StreamError::UnsupportedSource { name: name.to_owned(), reason: reason.into() };
        if self.in_frame {
            return Err(StreamError::FrameOrder("add_sliced_texture between begin_frame and end_frame"));
        }
        if self.heaps.is_none() {
            return Err(refuse(
                "sliced arrays stream on the hardware path only (the software path streams no arrays)",
            ));
        }
        if slices.len() < 2 {
            return Err(refuse("a sliced array needs at least two slices (one slice is a texture)"));
        }
        let u32_slices = u32::try_from(slices.len()).map_err(|_| refuse("more slices than a u32 counts"))?;
        // The array's description is checked before the slices are matched against it level by
        // level (a mip count past the full chain would walk up to `u32::MAX` levels).
        let full_chain = 32 - desc.width.max(desc.height).leading_zeros();
        if desc.mip_count == 0 || desc.mip_count > full_chain {
            return Err(refuse(&format!(
                "{} × {} with {} mips: a sliced array has 1 to {full_chain} mips",
                desc.width, desc.height, desc.mip_count
            )));
        }
        let mut textures = Vec::with_capacity(slices.len());
        for (s, source) in slices.iter().enumerate() {
            textures.push(match source {
                Some(source) => Some((Arc::clone(source), finest_level(name, s as u32, &desc, &**source)?)),
                None => None,
            });
        }
        let buffer = self.device.create_buffer(&BufferDesc::new(
            format!("{name} slice LOD bias"),
            u64::from(u32_slices) * 4,
            BufferUsage::STORAGE | BufferUsage::COPY_DST,
        ))?;
        let sources = textures.iter().enumerate().map(|(s, t)| slice_source(name, s, &desc, t)).collect();
        let handle = self.add_layers(name, sources)?;
        let slices = Slices {
            bias: textures.iter().map(|t| t.as_ref().map_or(0, |(_, b)| *b)).collect(),
            sources: textures,
            buffer,
        };
        let bytes: Vec<u8> = (0..slices.sources.len()).flat_map(|s| slices.value(s).to_le_bytes()).collect();
        // A new buffer no frame reads yet: written by the uploader's own submission now.
        let written =
            self.uploader.write_buffer(&slices.buffer, 0, &bytes).and_then(|()| self.uploader.flush());
        if let Some(t) = self.textures.get_mut(&handle.id) {
            t.slices = Some(slices);
        }
        if let Err(e) = written {
            let _ = self.remove_texture(handle);
            return Err(e.into());
        }
        Ok(handle)
    }

    /// Gives slice `slice` of the sliced array `texture` another texture (`Some`: of its own size,
    /// as [`add_sliced_texture`](Self::add_sliced_texture) takes them) or none (`None`: the slice
    /// is emptied). What the slice held goes: its resident tiles and mip tail go back to the
    /// budget (unbound after the frames in flight that may sample them), its loads in flight are
    /// cancelled, its bias becomes the new texture's finest level (or [`SLICE_EMPTY_BIAS`]), and
    /// its coarse chain is loaded again from the new texture before this returns (priming, as
    /// `add_texture` does; the other slices keep what they hold). The bias and min-LOD map updates
    /// are staged copies, submitted after the frames before them.
    ///
    /// Refused with nothing changed: between `begin_frame` and `end_frame`
    /// ([`StreamError::FrameOrder`]), a texture of another streamer
    /// ([`StreamError::ForeignTexture`]) or not a sliced array ([`StreamError::NotSliced`]), a
    /// slice past the array's ([`StreamError::SliceOutOfRange`]), a texture that is not the array's
    /// at some level ([`StreamError::UnsupportedSource`]). A failure of the GPU work after the
    /// checks (the unbind, staging) is returned and the unbind retried at the next call, as a
    /// frame's would be; a [`StreamError::Priming`] failure leaves the new texture in the slice,
    /// its coarse chain loading at later frames.
    pub fn set_slice(
        &mut self,
        texture: &VirtualTexture,
        slice: u32,
        source: Option<Arc<dyn TileSource>>,
    ) -> Result<(), StreamError> {
        if self.in_frame {
            return Err(StreamError::FrameOrder("set_slice between begin_frame and end_frame"));
        }
        let id = texture.id;
        let s = self.check_slice(texture, slice)?;
        let t = &self.textures[&id];
        let new = match source {
            Some(source) => Some((Arc::clone(&source), finest_level(&t.name, slice, &t.desc, &*source)?)),
            None => None,
        };
        // The GPU catches up with the manager first (a tick whose bind failed).
        self.apply_unapplied()?;
        let changes = self.manager.reset_layer(id, slice)?;
        // The slice's loads in flight are forgotten by the manager; the workers drop them.
        let layout = self.textures[&id].layout.clone();
        let in_slice = |key: &TileKey| match key.unit {
            StreamUnit::Tile(t) => layout.tile_coord(t).is_some_and(|c| c.layer == slice),
            StreamUnit::Tail(t) => layout.tail_of_layer(slice) == Some(t),
        };
        let keys: Vec<TileKey> =
            self.pending.keys().filter(|k| k.image == id && in_slice(k)).copied().collect();
        for key in keys {
            self.loader.cancel(&key);
            self.pending.remove(&key);
            self.cancelled.push(key);
        }
        let t = self.textures.get_mut(&id).expect("checked above");
        let Some(slices) = t.slices.as_mut() else {
            return Err(StreamError::Internal("a sliced texture without slices".into()));
        };
        slices.bias[s] = new.as_ref().map_or(0, |(_, b)| *b);
        slices.sources[s] = new;
        let sources = (0..slices.sources.len())
            .map(|i| slice_source(&t.name, i, &t.desc, &slices.sources[i]))
            .collect();
        let value = slices.value(s);
        t.set_layer_sources(sources);
        // Unbind the slice's tiles (after the frames in flight) and update its min-LOD map: a
        // tick of its own, retried first at the next call when it fails.
        let out = FrameOutput { changes: vec![changes], ..FrameOutput::default() };
        let mut tick = Unapplied { out, staged: Default::default(), bound: false, unbinds: true };
        // Staged whatever the unbind does (a copy into the next recorded frame).
        let staged = self.write_bias(id, slice, value);
        if let Err(e) = self.apply(&mut tick) {
            self.unapplied = Some(tick);
            return Err(e);
        }
        staged?;
        self.prime(id)
    }

    /// Samples slice `slice` of the sliced array `texture` with LOD bias `bias` from the next
    /// recorded frame on: at or coarser than the slice's finest level, and within the array's mips
    /// (`finest ≤ bias < mip_count`), e.g. to show a slice's texture at a lower resolution. Its
    /// feedback then asks for the levels it samples; the finer levels it streamed stay until
    /// evicted as unused. The update is a staged copy (ordered with the frame).
    ///
    /// Refused with nothing changed: between `begin_frame` and `end_frame`, a texture of another
    /// streamer or not a sliced array, a slice past the array's
    /// ([`StreamError::SliceOutOfRange`]), an empty slice ([`StreamError::EmptySlice`]), a bias
    /// outside `finest..mip_count` ([`StreamError::SliceBiasOutOfRange`]).
    pub fn set_slice_bias(
        &mut self,
        texture: &VirtualTexture,
        slice: u32,
        bias: u32,
    ) -> Result<(), StreamError> {
        if self.in_frame {
            return Err(StreamError::FrameOrder("set_slice_bias between begin_frame and end_frame"));
        }
        let s = self.check_slice(texture, slice)?;
        let t = &self.textures[&texture.id];
        let mips = t.desc.mip_count;
        let slices = t.slices.as_ref().ok_or(StreamError::NotSliced(texture.id))?;
        let Some(finest) = slices.finest(s) else {
            return Err(StreamError::EmptySlice { texture: texture.id, slice });
        };
        if bias < finest || bias >= mips {
            return Err(StreamError::SliceBiasOutOfRange { texture: texture.id, slice, bias, finest, mips });
        }
        self.write_bias(texture.id, slice, bias as f32)?;
        if let Some(slices) = self.textures.get_mut(&texture.id).and_then(|t| t.slices.as_mut()) {
            slices.bias[s] = bias;
        }
        Ok(())
    }

    /// The LOD bias of slice `slice` of the sliced array `texture` (`None`: the slice is empty).
    /// Refused as [`set_slice_bias`](Self::set_slice_bias) refuses a texture or slice.
    pub fn slice_bias(&self, texture: &VirtualTexture, slice: u32) -> Result<Option<u32>, StreamError> {
        let s = self.check_slice(texture, slice)?;
        let slices = self.textures[&texture.id].slices.as_ref().ok_or(StreamError::NotSliced(texture.id))?;
        Ok(slices.finest(s).map(|_| slices.bias[s]))
    }

    /// The finest level of slice `slice`'s texture (`None`: empty), refused as
    /// [`slice_bias`](Self::slice_bias) is.
    pub fn slice_finest_level(
        &self,
        texture: &VirtualTexture,
        slice: u32,
    ) -> Result<Option<u32>, StreamError> {
        let s = self.check_slice(texture, slice)?;
        let slices = self.textures[&texture.id].slices.as_ref().ok_or(StreamError::NotSliced(texture.id))?;
        Ok(slices.finest(s))
    }

    /// The index of `slice` in `texture`, a sliced array of this streamer.
    fn check_slice(&self, texture: &VirtualTexture, slice: u32) -> Result<usize, StreamError> {
        self.check_owner(texture)?;
        let t = self.textures.get(&texture.id).ok_or(StreamError::NotSliced(texture.id))?;
        let slices = t.slices.as_ref().ok_or(StreamError::NotSliced(texture.id))?;
        let n = slices.sources.len() as u32;
        if slice >= n {
            return Err(StreamError::SliceOutOfRange { texture: texture.id, slice, slices: n });
        }
        Ok(slice as usize)
    }

    /// Stages slice `slice`'s bias `value` into the texture's buffer (recorded into the next frame).
    fn write_bias(&mut self, id: ImageId, slice: u32, value: f32) -> Result<(), StreamError> {
        let t = self.textures.get(&id).ok_or(StreamError::NotSliced(id))?;
        let slices = t.slices.as_ref().ok_or(StreamError::NotSliced(id))?;
        self.uploader.write_buffer(&slices.buffer, u64::from(slice) * 4, &value.to_le_bytes())?;
        Ok(())
    }

    /// Drops the requests for tiles a sliced array's slice does not have (finer than its finest
    /// level, or of an empty slice); a low-water warning at a slice's finest level (which asks for
    /// the finer level) keeps only the warned tile wanted. A lookup per request, only for sliced
    /// textures' requests.
    pub(super) fn filter_slice_requests(&self, requests: &mut Vec<TileRequest>) {
        requests.retain_mut(|r| {
            let Some(t) = self.textures.get(&r.image) else { return true };
            let Some(slices) = &t.slices else { return true };
            let Some(c) = t.layout.tile_coord(r.tile) else { return true };
            match slices.sources.get(c.layer as usize).and_then(|x| x.as_ref()).map(|(_, b)| *b) {
                None => false,
                Some(finest) if c.mip < finest => false,
                Some(finest) => {
                    if c.mip == finest && r.kind == RequestKind::MinLodWarning {
                        r.kind = RequestKind::LodWarning;
                    }
                    true
                }
            }
        });
    }
}

/// The load source of slice `s` of the sliced array `name` of `array`.
fn slice_source(
    name: &str,
    s: usize,
    array: &VtDesc,
    texture: &Option<(Arc<dyn TileSource>, u32)>,
) -> Arc<dyn TileSource> {
    Arc::new(SliceSource { name: format!("{name} slice {s}"), array: *array, texture: texture.clone() })
}
