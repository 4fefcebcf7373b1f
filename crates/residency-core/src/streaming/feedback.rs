//! The feedback buffer that shaders write and the CPU reads back: request records, the GPU-side
//! de-duplication bitsets, optional per-tile pixel counters, the decoder, the sampling rule and
//! the ring of buffers that keeps the CPU from ever waiting on the GPU.
//!
//! # Buffer layout (one buffer per ring slot; `uint words[]`, std430, little-endian)
//!
//! | words | contents | written by |
//! |-------|----------|------------|
//! | 0 | magic `0x3142_4652` (`"RFB1"`) | CPU at reset |
//! | 1 | low 32 bits of the frame number that writes this slot | CPU at reset |
//! | 2 | record count: `atomicAdd` per appended record; may exceed the capacity | shader |
//! | 3 | record capacity `C` | CPU at reset |
//! | 4 .. 4 + 2C | records, two words each ([`FeedbackRecord`]) | shader |
//! | 4 + 2C .. 4 + 2C + ceil(images / 32) | the *touched* bitset: bit `i % 32` of word `i / 32` is set when image slot `i` asked for anything this frame | shader (`atomicOr`) |
//! | per image `i`, per kind `k` (miss 0, prefetch warning 1, low-water warning 2) | bitset of `ceil(tile_count / 32)` words at `bits_offset + k·bit_words`; bit `t % 32` of word `t / 32` is tile index `t` | shader (`atomicOr`) |
//! | per image `i`, per kind `k`, when counting | `tile_count` counters at `counts_offset + k·tile_count`: pixels that asked for tile `t` | shader (`atomicAdd`) |
//!
//! The CPU resets a slot by filling it with zeros and writing words 0, 1 and 3
//! ([`FeedbackLayout::header_words`]). A shader invocation that wants tile `t` of image slot `i`
//! with kind `k` does, in this order: add 1 to the counter (when counting); `atomicOr` the bit;
//! when the bit was clear before, `atomicOr` the image's touched bit, `atomicAdd` the record count
//! and, when the returned index is below the capacity, write the record there. So each (image,
//! kind, tile) is appended at most once per frame however many pixels ask; when more distinct
//! tiles are asked than the capacity, the decoder falls back to scanning the bitsets and loses
//! nothing.
//!
//! The decoder reads only what the frame wrote: the header, the touched bitset (one bit per
//! image), the records, and the tile bitsets of the touched images alone — never those of the
//! images nobody sampled, so its cost follows what the frame asked for, not how many images are
//! registered ([`DecodedFeedback::images_visited`], [`DecodedFeedback::words_read`]).
//!
//! The per-image parameters the shader needs are in a separate table
//! ([`FeedbackLayout::image_table`], [`IMAGE_ENTRY_WORDS`] words per image).

use super::request::{RequestKind, TileRequest};
use crate::tiles::{ImageId, SparseImageLayout, TileIndex};
use serde::{Deserialize, Serialize};

/// Word 0 of every feedback buffer: `"RFB1"` in little-endian bytes.
pub const FEEDBACK_MAGIC: u32 = 0x3142_4652;
/// Words before the records.
pub const HEADER_WORDS: u32 = 4;
/// Words of one image's entry in the image table.
pub const IMAGE_ENTRY_WORDS: u32 = 16 + 4 * MAX_FEEDBACK_MIPS;
/// Tiled mips an image may have in the feedback table.
pub const MAX_FEEDBACK_MIPS: u32 = 16;
/// Request kinds of a feedback buffer (miss, prefetch warning, low-water warning): each has its
/// own bitset and counters per image.
pub const FEEDBACK_KINDS: u32 = 3;
/// `low_water` in the image table when an image has no low-water mark.
pub const NO_LOW_WATER: u32 = u32::MAX;
/// Images one feedback buffer can address (the record's 16-bit image slot).
pub const MAX_FEEDBACK_IMAGES: usize = 1 << 16;
/// `counts_offset` of an image when pixel counting is off.
pub const NO_COUNTS: u32 = u32::MAX;

/// One request as the shader writes it: two 32-bit words.
///
/// | word | bits | field |
/// |------|------|-------|
/// | 0 | 0..32 | tile index within the image ([`TileIndex`]: layer-major, then mip, z, y, x), so the
/// record names the tile's layer and z ([`FeedbackImage::tile_coord`]) |
/// | 1 | 0..16 | image slot in the [`FeedbackLayout`] |
/// | 1 | 16..21 | mip of the tile (0..31); for a low-water warning, the level that warned |
/// | 1 | 21..23 | kind: 0 miss, 1 prefetch (LOD) warning, 2 low-water warning (3 reserved) |
/// | 1 | 23..32 | reserved, 0 |
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct FeedbackRecord {
    /// The image's slot in the feedback layout.
    pub image_slot: u16,
    /// The tile within the image.
    pub tile: TileIndex,
    /// The tile's mip (redundant with the tile index; checked by the decoder).
    pub mip: u8,
    /// Miss, prefetch warning or low-water warning.
    pub kind: RequestKind,
}

/// The kind's bitset and counter index (and its 2-bit code in a record).
pub(crate) fn kind_index(kind: RequestKind) -> u32 {
    match kind {
        RequestKind::Miss => 0,
        RequestKind::LodWarning => 1,
        RequestKind::MinLodWarning => 2,
    }
}

fn kind_of(index: u32) -> Option<RequestKind> {
    match index {
        0 => Some(RequestKind::Miss),
        1 => Some(RequestKind::LodWarning),
        2 => Some(RequestKind::MinLodWarning),
        _ => None,
    }
}

impl FeedbackRecord {
    /// The two words the shader writes.
    pub fn encode(&self) -> [u32; 2] {
        let kind = kind_index(self.kind);
        [self.tile.0, u32::from(self.image_slot) | (u32::from(self.mip & 31) << 16) | (kind << 21)]
    }

    /// The level that raised a low-water warning (`sparseTexelLodWarningFetch`): the record's mip
    /// for [`RequestKind::MinLodWarning`], `None` for the other kinds.
    pub fn warning_level(&self) -> Option<u8> {
        (self.kind == RequestKind::MinLodWarning).then_some(self.mip)
    }

    /// Decodes two words; `None` when a reserved kind or reserved bits are set.
    pub fn decode(words: [u32; 2]) -> Option<Self> {
        let [tile, w] = words;
        if w >> 23 != 0 {
            return None;
        }
        let kind = kind_of((w >> 21) & 3)?;
        Some(Self { image_slot: w as u16, tile: TileIndex(tile), mip: ((w >> 16) & 31) as u8, kind })
    }
}

/// A feedback buffer could not be laid out or decoded.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum FeedbackError {
    /// More images than a record's 16-bit slot can name.
    #[error("{images} images in one feedback layout; at most {MAX_FEEDBACK_IMAGES}")]
    TooManyImages {
        /// Images given.
        images: usize,
    },
    /// An image has more tiled mips than the image table holds.
    #[error("image {} has {mips} tiled mips; the feedback table holds {MAX_FEEDBACK_MIPS}", image.0)]
    TooManyMips {
        /// The image.
        image: ImageId,
        /// Its tiled mips.
        mips: u32,
    },
    /// The same image twice in one layout.
    #[error("image {} is in the feedback layout twice", .0 .0)]
    DuplicateImage(ImageId),
    /// The read-back bytes are not the size of this layout's buffer.
    #[error("feedback buffer is {got} bytes, the layout needs {expected}")]
    BufferSize {
        /// Bytes of the layout.
        expected: u64,
        /// Bytes given.
        got: u64,
    },
    /// Word 0 is not the magic: the slot was never reset, or the wrong buffer was read.
    #[error("feedback buffer has magic {found:#010x}, expected {FEEDBACK_MAGIC:#010x}")]
    BadMagic {
        /// Word 0.
        found: u32,
    },
    /// The slot holds another frame's feedback (the ring is out of step).
    #[error("feedback slot holds frame {found} (low 32 bits), expected frame {expected}")]
    FrameMismatch {
        /// The frame the caller expected.
        expected: u64,
        /// Word 1.
        found: u32,
    },
    /// The capacity word is not this layout's.
    #[error("feedback buffer says capacity {found}, the layout has {expected}")]
    CapacityMismatch {
        /// The layout's capacity.
        expected: u32,
        /// Word 3.
        found: u32,
    },
    /// A record names no image, no tile, the wrong mip, or has reserved bits set.
    #[error("feedback record {index} ({:#010x} {:#010x}) is invalid: {reason}", words[0], words[1])]
    BadRecord {
        /// Its position.
        index: u32,
        /// Its words.
        words: [u32; 2],
        /// What is wrong.
        reason: &'static str,
    },
    /// Records and bitsets disagree (a shader that does not follow the protocol).
    #[error("feedback has {records} records but {bits} de-duplication bits set")]
    Inconsistent {
        /// Records counted.
        records: u32,
        /// Bits set.
        bits: u64,
    },
}

/// One image's place in the feedback buffer and its shader parameters.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FeedbackImage {
    /// The image.
    pub image: ImageId,
    /// Tiles in the image (all layers).
    pub tile_count: u32,
    /// Tiles per layer.
    pub tiles_per_layer: u32,
    /// Word index of the miss bitset; the bitset of kind `k` is `k · bit_words` later.
    pub bits_offset: u32,
    /// Words of one bitset: `ceil(tile_count / 32)`.
    pub bit_words: u32,
    /// Word index of the miss counters (those of kind `k` are `k · tile_count` later), or
    /// [`NO_COUNTS`].
    pub counts_offset: u32,
    /// Tiled mips: `0..first_tail_lod` (the rest are the pinned mip tail).
    pub first_tail_lod: u32,
    /// Mip levels.
    pub mip_levels: u32,
    /// Tile shape in texels (x, y, z).
    pub tile_extent: [u32; 3],
    /// Mip 0 extent in texels (x, y, z; z is 1 for 2D images and arrays).
    pub extent: [u32; 3],
    /// Per tiled mip: first tile index within a layer, tiles along x, y, z.
    pub mips: Vec<[u32; 4]>,
    /// The prefetch warning's gate: a sample at mip `m` may ask to prefetch mip `m − 1` only
    /// when `m <= min_warning_lod`. Default 255 (every mip).
    pub min_warning_lod: u8,
    /// Prefetch when the sample's LOD is within `lead / 256` above an integer mip, i.e. about to
    /// need the next finer one. Default 64 (a quarter of a level).
    pub lead: u8,
    /// The seed's per-texture low-water mark (`GL_MIN_WARNING_LOD_AMD`): a sample whose finest
    /// fetched level (its own mip, or the coarser one it fell back to) is at or below it
    /// (numerically `<=`: as fine or finer) raises a low-water warning naming that level
    /// ([`classify_low_water`](super::classify_low_water)).
    /// `None` (the default): no mark, no such warning.
    #[serde(default)]
    pub low_water: Option<u8>,
}

impl FeedbackImage {
    /// Layers of the image (1 for a 3D image).
    pub fn layers(&self) -> u32 {
        self.tile_count / self.tiles_per_layer.max(1)
    }

    /// The tile of (`layer`, `mip`) that holds normalized texel coordinates `uvw` (each 0..1,
    /// clamped; `w` is the depth of a 3D image and is ignored for 2D images and arrays, whose
    /// layer is `layer`), `None` for tail mips and layers out of range.
    pub fn tile_at(&self, layer: u32, mip: u32, uvw: [f32; 3]) -> Option<TileIndex> {
        let entry = self.mips.get(mip as usize).filter(|_| mip < self.first_tail_lod)?;
        if layer >= self.layers() {
            return None;
        }
        let axis = |a: usize| {
            let extent = (self.extent[a] >> mip).max(1);
            let texel = ((uvw[a].clamp(0.0, 1.0) * extent as f32) as u32).min(extent - 1);
            (texel / self.tile_extent[a].max(1)).min(entry[1 + a].max(1) - 1)
        };
        let local = (axis(2) * entry[2] + axis(1)) * entry[1] + axis(0);
        Some(TileIndex(layer * self.tiles_per_layer + entry[0] + local))
    }

    /// Where `tile` is: its layer, mip and tile coordinates (x, y, z) — what a feedback record's
    /// tile index says. `None` for tiles the image does not have.
    pub fn tile_coord(&self, tile: TileIndex) -> Option<crate::tiles::TileCoord> {
        let mip = self.mip_of(tile)?;
        let m = self.mips[mip as usize];
        let local = tile.0 % self.tiles_per_layer.max(1) - m[0];
        let (tx, ty) = (m[1].max(1), m[2].max(1));
        Some(crate::tiles::TileCoord {
            layer: tile.0 / self.tiles_per_layer.max(1),
            mip,
            x: local % tx,
            y: (local / tx) % ty,
            z: local / (tx * ty),
        })
    }

    /// The tiled mip that `tile` belongs to.
    pub fn mip_of(&self, tile: TileIndex) -> Option<u32> {
        if tile.0 >= self.tile_count {
            return None;
        }
        let local = tile.0 % self.tiles_per_layer.max(1);
        self.mips
            .iter()
            .enumerate()
            .rev()
            .find(|(_, m)| m[0] <= local && m[1] * m[2] * m[3] > 0)
            .map(|(i, _)| i as u32)
    }
}

/// Sizes of a feedback buffer. Defaults: room for 4096 records, pixel counting on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FeedbackDesc {
    /// Records the buffer holds; distinct requests beyond it are recovered from the bitsets.
    pub record_capacity: u32,
    /// Whether the buffer has a pixel counter per tile and kind.
    pub count_pixels: bool,
}

impl FeedbackDesc {
    /// The most records a feedback buffer holds: their `2 × 4` bytes each stay within 32 MiB, a
    /// quarter of the 128 MiB every device lets a shader bind (`maxStorageBufferRange ≥ 2²⁷`),
    /// and the buffer's word count cannot wrap.
    pub const MAX_RECORD_CAPACITY: u32 = 1 << 22;

    /// Checks `record_capacity` against [`MAX_RECORD_CAPACITY`](Self::MAX_RECORD_CAPACITY).
    pub fn validate(&self) -> Result<(), crate::desc::DescError> {
        crate::desc::check_range(
            "FeedbackDesc",
            "",
            "record_capacity",
            self.record_capacity.into(),
            0,
            Self::MAX_RECORD_CAPACITY.into(),
            "the records stay within a quarter of the smallest maxStorageBufferRange",
        )
    }
}

impl Default for FeedbackDesc {
    fn default() -> Self {
        Self { record_capacity: 4096, count_pixels: true }
    }
}

/// Where every image's records, bits and counters are in a feedback buffer.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FeedbackLayout {
    desc: FeedbackDesc,
    images: Vec<FeedbackImage>,
    /// `(image, slot)` sorted by image: [`FeedbackLayout::slot_of`] is a binary search.
    by_image: Vec<(ImageId, u16)>,
    words: u32,
}

impl FeedbackLayout {
    /// Lays out a buffer for `images`, slot `i` being `images[i]`.
    pub fn new(desc: FeedbackDesc, images: &[(ImageId, &SparseImageLayout)]) -> Result<Self, FeedbackError> {
        if images.len() > MAX_FEEDBACK_IMAGES {
            return Err(FeedbackError::TooManyImages { images: images.len() });
        }
        let mut by_image: Vec<(ImageId, u16)> =
            images.iter().enumerate().map(|(slot, &(image, _))| (image, slot as u16)).collect();
        by_image.sort_unstable();
        if let Some(w) = by_image.windows(2).find(|w| w[0].0 == w[1].0) {
            return Err(FeedbackError::DuplicateImage(w[0].0));
        }
        let mut out = Vec::with_capacity(images.len());
        let mut next = Self::touched_offset_for(&desc) + (images.len() as u32).div_ceil(32);
        for &(image, layout) in images {
            let first_tail_lod = layout.first_tail_lod();
            if first_tail_lod > MAX_FEEDBACK_MIPS {
                return Err(FeedbackError::TooManyMips { image, mips: first_tail_lod });
            }
            let tile_count = layout.tile_count();
            let bit_words = tile_count.div_ceil(32);
            let shape = layout.tile_shape();
            let d = layout.desc();
            out.push(FeedbackImage {
                image,
                tile_count,
                tiles_per_layer: layout.tiles_per_layer(),
                bits_offset: next,
                bit_words,
                counts_offset: NO_COUNTS,
                first_tail_lod,
                mip_levels: layout.mip_levels(),
                tile_extent: [shape.width, shape.height, shape.depth],
                extent: [d.width, d.height, d.depth],
                mips: layout.mips()[..first_tail_lod as usize]
                    .iter()
                    .map(|m| [m.first_tile, m.tiles[0], m.tiles[1], m.tiles[2]])
                    .collect(),
                min_warning_lod: u8::MAX,
                lead: 64,
                low_water: None,
            });
            next += FEEDBACK_KINDS * bit_words;
        }
        if desc.count_pixels {
            for image in &mut out {
                image.counts_offset = next;
                next += FEEDBACK_KINDS * image.tile_count;
            }
        }
        Ok(Self { desc, images: out, by_image, words: next })
    }

    fn touched_offset_for(desc: &FeedbackDesc) -> u32 {
        HEADER_WORDS + 2 * desc.record_capacity
    }

    /// Word index of the touched bitset (right after the records): bit `i % 32` of word
    /// `touched_offset + i / 32` is image slot `i`.
    pub fn touched_offset(&self) -> u32 {
        Self::touched_offset_for(&self.desc)
    }

    /// Words of the touched bitset: `ceil(images / 32)`.
    pub fn touched_words(&self) -> u32 {
        (self.images.len() as u32).div_ceil(32)
    }

    /// The sizes this layout was made with.
    pub fn desc(&self) -> &FeedbackDesc {
        &self.desc
    }

    /// The images, by slot.
    pub fn images(&self) -> &[FeedbackImage] {
        &self.images
    }

    /// The slot of `image`.
    pub fn slot_of(&self, image: ImageId) -> Option<u16> {
        let at = self.by_image.binary_search_by_key(&image, |&(i, _)| i).ok()?;
        Some(self.by_image[at].1)
    }

    fn image_mut(&mut self, image: ImageId) -> Option<&mut FeedbackImage> {
        let slot = self.slot_of(image)?;
        self.images.get_mut(usize::from(slot))
    }

    /// Sets an image's LOD-warning parameters (the shader reads them from the image table, so
    /// re-upload it).
    pub fn set_lod_warning(&mut self, image: ImageId, min_warning_lod: u8, lead: u8) -> bool {
        match self.image_mut(image) {
            Some(i) => {
                i.min_warning_lod = min_warning_lod;
                i.lead = lead;
                true
            }
            None => false,
        }
    }

    /// Sets an image's low-water mark (`None`: none); re-upload the image table. Returns whether
    /// the image is in the layout.
    pub fn set_low_water(&mut self, image: ImageId, low_water: Option<u8>) -> bool {
        match self.image_mut(image) {
            Some(i) => {
                i.low_water = low_water;
                true
            }
            None => false,
        }
    }

    /// Words of the buffer.
    pub fn buffer_words(&self) -> u32 {
        self.words
    }

    /// Bytes of the buffer.
    pub fn buffer_bytes(&self) -> u64 {
        u64::from(self.words) * 4
    }

    /// Words 0..4 after a reset for `frame` (everything else is zero).
    pub fn header_words(&self, frame: u64) -> [u32; 4] {
        [FEEDBACK_MAGIC, frame as u32, 0, self.desc.record_capacity]
    }

    /// The image table the shader reads, [`IMAGE_ENTRY_WORDS`] words per slot:
    ///
    /// | word | field |
    /// |------|-------|
    /// | 0 | `bits_offset` |
    /// | 1 | `bit_words` |
    /// | 2 | `counts_offset` ([`NO_COUNTS`] when counting is off) |
    /// | 3 | `tile_count` |
    /// | 4 | `tiles_per_layer` |
    /// | 5 | `first_tail_lod` |
    /// | 6 | `min_warning_lod` |
    /// | 7 | `lead` (1/256 LOD) |
    /// | 8, 9 | tile width, height in texels |
    /// | 10, 11 | mip 0 width, height in texels |
    /// | 12 | mip levels |
    /// | 13 | tile depth in texels (1 for 2D) |
    /// | 14 | mip 0 depth in texels (1 for 2D) |
    /// | 15 | low-water mark ([`NO_LOW_WATER`] when none) |
    /// | 16 + 4m .. 20 + 4m | mip `m` < 16: first tile within a layer, tiles x, y, z |
    pub fn image_table(&self) -> Vec<u32> {
        let mut t = Vec::with_capacity(self.images.len() * IMAGE_ENTRY_WORDS as usize);
        for i in &self.images {
            let start = t.len();
            t.extend_from_slice(&[
                i.bits_offset,
                i.bit_words,
                i.counts_offset,
                i.tile_count,
                i.tiles_per_layer,
                i.first_tail_lod,
                u32::from(i.min_warning_lod),
                u32::from(i.lead),
                i.tile_extent[0],
                i.tile_extent[1],
                i.extent[0],
                i.extent[1],
                i.mip_levels,
                i.tile_extent[2],
                i.extent[2],
                i.low_water.map_or(NO_LOW_WATER, u32::from),
            ]);
            for m in &i.mips {
                t.extend_from_slice(m);
            }
            t.resize(start + IMAGE_ENTRY_WORDS as usize, 0);
        }
        t
    }

    /// Decodes the read-back bytes of the slot that frame `frame` wrote into de-duplicated
    /// requests, sorted by image, kind and tile. `pixels` is the counter when counting is on,
    /// else 1.
    pub fn decode(&self, bytes: &[u8], frame: u64) -> Result<DecodedFeedback, FeedbackError> {
        if bytes.len() as u64 != self.buffer_bytes() {
            return Err(FeedbackError::BufferSize { expected: self.buffer_bytes(), got: bytes.len() as u64 });
        }
        self.decode_with(frame, |start, out| {
            for (k, w) in out.iter_mut().enumerate() {
                let i = (start as usize + k) * 4;
                *w = u32::from_le_bytes([bytes[i], bytes[i + 1], bytes[i + 2], bytes[i + 3]]);
            }
        })
    }

    /// [`FeedbackLayout::decode`] through `read(first_word, words)`, which fills `words` with the
    /// buffer's words from `first_word` on (a read of mapped memory, say). It reads only what the
    /// frame wrote: the header, the touched bitset, the records the shader appended, the three
    /// tile bitsets of each touched image (never an untouched image's), and one pixel counter per
    /// request. [`DecodedFeedback::images_visited`] and [`DecodedFeedback::words_read`] count it.
    /// `read` is never asked for a word at or past [`buffer_words`](Self::buffer_words).
    pub fn decode_with(
        &self,
        frame: u64,
        mut read: impl FnMut(u32, &mut [u32]),
    ) -> Result<DecodedFeedback, FeedbackError> {
        let mut words_read = 0u64;
        let mut fetch = |start: u32, len: u32| {
            let mut out = vec![0u32; len as usize];
            read(start, &mut out);
            words_read += u64::from(len);
            out
        };
        let header = fetch(0, HEADER_WORDS);
        if header[0] != FEEDBACK_MAGIC {
            return Err(FeedbackError::BadMagic { found: header[0] });
        }
        if header[1] != frame as u32 {
            return Err(FeedbackError::FrameMismatch { expected: frame, found: header[1] });
        }
        if header[3] != self.desc.record_capacity {
            return Err(FeedbackError::CapacityMismatch {
                expected: self.desc.record_capacity,
                found: header[3],
            });
        }
        let count = header[2];
        let overflowed = count > self.desc.record_capacity;
        let mut touched = fetch(self.touched_offset(), self.touched_words());
        let slots = self.images.len() as u32;
        if let Some(last) = touched.last_mut() {
            if slots % 32 != 0 {
                *last &= (1u32 << (slots % 32)) - 1;
            }
        }
        // The tile bitsets of the touched images, by slot.
        let mut bits: Vec<(u16, Vec<u32>)> = Vec::new();
        let mut bits_set = 0u64;
        for (w, &word) in touched.iter().enumerate() {
            let mut v = word;
            while v != 0 {
                let slot = w as u32 * 32 + v.trailing_zeros();
                v &= v - 1;
                let img = &self.images[slot as usize];
                let mut set = fetch(img.bits_offset, FEEDBACK_KINDS * img.bit_words);
                if img.tile_count % 32 != 0 {
                    for kind in 0..FEEDBACK_KINDS {
                        set[((kind + 1) * img.bit_words - 1) as usize] &= (1u32 << (img.tile_count % 32)) - 1;
                    }
                }
                bits_set += set.iter().map(|b| u64::from(b.count_ones())).sum::<u64>();
                bits.push((slot as u16, set));
            }
        }
        let images_visited = bits.len() as u32;
        let bit = |slot: u16, img: &FeedbackImage, kind: u32, t: u32| {
            bits.binary_search_by_key(&slot, |(s, _)| *s)
                .is_ok_and(|at| bits[at].1[(kind * img.bit_words + t / 32) as usize] & (1 << (t % 32)) != 0)
        };
        let mut found: Vec<(u16, u32, TileIndex, RequestKind)> = Vec::new();
        if overflowed {
            for (slot, set) in &bits {
                let img = &self.images[usize::from(*slot)];
                for kind in 0..FEEDBACK_KINDS {
                    for w in 0..img.bit_words {
                        let mut v = set[(kind * img.bit_words + w) as usize];
                        while v != 0 {
                            let t = w * 32 + v.trailing_zeros();
                            v &= v - 1;
                            found.push((
                                *slot,
                                img.mip_of(TileIndex(t)).expect("tile in range"),
                                TileIndex(t),
                                kind_of(kind).expect("a feedback kind"),
                            ));
                        }
                    }
                }
            }
        } else {
            if u64::from(count) != bits_set {
                return Err(FeedbackError::Inconsistent { records: count, bits: bits_set });
            }
            let records = fetch(HEADER_WORDS, 2 * count);
            for index in 0..count {
                let words = [records[2 * index as usize], records[2 * index as usize + 1]];
                let bad = |reason| FeedbackError::BadRecord { index, words, reason };
                let rec = FeedbackRecord::decode(words).ok_or(bad("reserved bits or kind set"))?;
                let img = self.images.get(usize::from(rec.image_slot)).ok_or(bad("no such image slot"))?;
                let mip = img.mip_of(rec.tile).ok_or(bad("tile index out of range"))?;
                if mip != u32::from(rec.mip) {
                    return Err(bad("mip does not match the tile index"));
                }
                if !bit(rec.image_slot, img, kind_index(rec.kind), rec.tile.0) {
                    return Err(bad("record without its de-duplication bit (or its image's touched bit)"));
                }
                found.push((rec.image_slot, mip, rec.tile, rec.kind));
            }
        }
        let mut requests: Vec<TileRequest> = found
            .into_iter()
            .map(|(slot, mip, tile, kind)| {
                let img = &self.images[usize::from(slot)];
                let pixels = if img.counts_offset == NO_COUNTS {
                    1
                } else {
                    fetch(img.counts_offset + kind_index(kind) * img.tile_count + tile.0, 1)[0]
                };
                TileRequest { image: img.image, tile, mip, kind, pixels }
            })
            .collect();
        requests.sort_unstable_by_key(|r| (r.image, r.kind, r.tile));
        if !overflowed
            && requests
                .windows(2)
                .any(|w| (w[0].image, w[0].kind, w[0].tile) == (w[1].image, w[1].kind, w[1].tile))
        {
            return Err(FeedbackError::Inconsistent { records: count, bits: bits_set });
        }
        Ok(DecodedFeedback { frame, requests, records: count, overflowed, images_visited, words_read })
    }
}

/// The requests of one frame's feedback.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DecodedFeedback {
    /// The frame that wrote them.
    pub frame: u64,
    /// De-duplicated requests, sorted by image, kind, tile.
    pub requests: Vec<TileRequest>,
    /// The record count the shader reached (distinct requests).
    pub records: u32,
    /// Whether more requests came than the record capacity (they were recovered from the bitsets).
    pub overflowed: bool,
    /// Images whose tile bitsets were read: those whose touched bit the frame set (the others
    /// are never visited).
    pub images_visited: u32,
    /// Words of the buffer read to decode it (header, touched bitset, records, the touched
    /// images' bitsets, one pixel counter per request).
    pub words_read: u64,
}

/// A CPU model of a feedback buffer that does exactly what the shader does; tests and the CPU
/// reference renderer write through it, and [`bytes`](Self::bytes) is what a read-back gives.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FeedbackBuffer {
    words: Vec<u32>,
}

impl FeedbackBuffer {
    /// A buffer reset for `frame`.
    pub fn new(layout: &FeedbackLayout, frame: u64) -> Self {
        let mut words = vec![0; layout.buffer_words() as usize];
        words[..4].copy_from_slice(&layout.header_words(frame));
        Self { words }
    }

    /// One shader invocation asking for `tile` of image slot `slot` (the shader protocol in the
    /// module docs). Returns whether it appended a record.
    pub fn record(&mut self, layout: &FeedbackLayout, slot: u16, tile: TileIndex, kind: RequestKind) -> bool {
        let Some(img) = layout.images.get(usize::from(slot)) else { return false };
        let Some(mip) = img.mip_of(tile) else { return false };
        let k = kind_index(kind);
        if img.counts_offset != NO_COUNTS {
            self.words[(img.counts_offset + k * img.tile_count + tile.0) as usize] += 1;
        }
        let w = (img.bits_offset + k * img.bit_words + tile.0 / 32) as usize;
        let mask = 1 << (tile.0 % 32);
        let old = self.words[w];
        self.words[w] |= mask;
        if old & mask != 0 {
            return false;
        }
        self.words[(layout.touched_offset() + u32::from(slot) / 32) as usize] |= 1 << (slot % 32);
        let index = self.words[2];
        self.words[2] += 1;
        if index < layout.desc.record_capacity {
            let rec = FeedbackRecord { image_slot: slot, tile, mip: mip as u8, kind };
            let at = (HEADER_WORDS + 2 * index) as usize;
            self.words[at..at + 2].copy_from_slice(&rec.encode());
        }
        true
    }

    /// The words.
    pub fn words(&self) -> &[u32] {
        &self.words
    }

    /// The bytes a read-back of this buffer gives.
    pub fn bytes(&self) -> Vec<u8> {
        self.words.iter().flat_map(|w| w.to_le_bytes()).collect()
    }
}

/// How often pixels write feedback. Defaults: every pixel, every frame.
///
/// Pixels are grouped in squares of `block × block` that write together (`block` 1: each pixel on
/// its own). A pixel `(x, y)` writes in frame `f` when `f % frame_interval == 0` and, with
/// `(bx, by) = (x / block, y / block)`, `j = (f / frame_interval) % (s·s)` for `s = pixel_stride`,
/// `bx % s == j % s` and `by % s == j / s`: one square of every `s × s` squares per feedback
/// frame, taken in turn so that every pixel is sampled every `s²` feedback frames. Either way a
/// `1 / s²` share of the pixels writes; grouping them in squares keeps the writing pixels in few
/// GPU waves (a wave with one writing lane costs as much as one with all of them writing), which
/// cuts the cost of fragment-shader feedback several times over (docs/benchmarks.md).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FeedbackSampling {
    /// Side of the pixel block of which one pixel writes. Default 1.
    pub pixel_stride: u32,
    /// Feedback every this many frames. Default 1.
    pub frame_interval: u32,
    /// Side of the squares of pixels that write together. Default 1.
    #[serde(default = "one")]
    pub block: u32,
}

fn one() -> u32 {
    1
}

impl Default for FeedbackSampling {
    fn default() -> Self {
        Self { pixel_stride: 1, frame_interval: 1, block: 1 }
    }
}

impl FeedbackSampling {
    /// The largest `pixel_stride` [`FeedbackSampling::new`] keeps (2¹⁵): `pixel_stride²` fits a
    /// 32-bit word, so the shaders' `uint` arithmetic on it cannot wrap either.
    pub const MAX_PIXEL_STRIDE: u32 = 1 << 15;

    /// Checks the fields, which [`FeedbackSampling::new`] clamps but a struct literal does not: a
    /// stride, frame interval and block of at least 1 (the sampling divides by each) and a stride
    /// of at most [`MAX_PIXEL_STRIDE`](Self::MAX_PIXEL_STRIDE). A streamer refuses a sampling that
    /// does not pass, before anything is created.
    pub fn validate(&self) -> Result<(), crate::desc::DescError> {
        use crate::desc::check_range;
        const DESC: &str = "FeedbackSampling";
        check_range(
            DESC,
            "",
            "pixel_stride",
            self.pixel_stride.into(),
            1,
            Self::MAX_PIXEL_STRIDE.into(),
            "pixel_stride² must fit in 32 bits",
        )?;
        check_range(DESC, "", "frame_interval", self.frame_interval.into(), 1, u32::MAX.into(), "")?;
        check_range(DESC, "", "block", self.block.into(), 1, u32::MAX.into(), "")
    }

    /// Sampling of one pixel per `pixel_stride²` block every `frame_interval` frames (both at
    /// least 1, the stride at most [`FeedbackSampling::MAX_PIXEL_STRIDE`]; clamped and logged).
    pub fn new(pixel_stride: u32, frame_interval: u32) -> Self {
        let stride = pixel_stride.clamp(1, Self::MAX_PIXEL_STRIDE);
        if stride != pixel_stride || frame_interval == 0 {
            tracing::debug!(
                pixel_stride,
                frame_interval,
                max_pixel_stride = Self::MAX_PIXEL_STRIDE,
                "FeedbackSampling: stride clamped to [1, max], a zero interval raised to 1"
            );
        }
        Self { pixel_stride: stride, frame_interval: frame_interval.max(1), block: 1 }
    }

    /// Groups the pixels in squares of `block × block` that write together (at least 1).
    pub fn with_block(mut self, block: u32) -> Self {
        self.block = block.max(1);
        self
    }

    /// The stride, interval and square side as the rules use them: a zero (possible only by
    /// writing the public fields directly) counts as 1, so no rule divides by zero.
    fn sides(&self) -> (u64, u64, u32) {
        (u64::from(self.pixel_stride.max(1)), u64::from(self.frame_interval.max(1)), self.block.max(1))
    }

    /// Whether frame `frame` writes feedback at all.
    pub fn frame_active(&self, frame: u64) -> bool {
        let (_, interval, _) = self.sides();
        frame % interval == 0
    }

    /// The square of every `s × s` (`s = pixel_stride`) that writes in feedback frame `frame`:
    /// `(j % s, j / s)` for `j = (frame / frame_interval) % s²`, computed in 64 bits (`s²` of any
    /// `u32` stride fits), so it never wraps. The CPU rule ([`FeedbackSampling::pixel_writes`])
    /// and the phase the shaders are given both come from here.
    pub fn phase(&self, frame: u64) -> [u32; 2] {
        let (s, interval, _) = self.sides();
        let j = (frame / interval) % (s * s);
        // Both are below `s`, a `u32`.
        [(j % s) as u32, (j / s) as u32]
    }

    /// Whether pixel (`x`, `y`) writes feedback in frame `frame`.
    pub fn pixel_writes(&self, x: u32, y: u32, frame: u64) -> bool {
        if !self.frame_active(frame) {
            return false;
        }
        let (s, _, block) = self.sides();
        let [px, py] = self.phase(frame);
        let (bx, by) = (u64::from(x / block), u64::from(y / block));
        bx % s == u64::from(px) && by % s == u64::from(py)
    }

    /// Pixels each sampled pixel stands for (`pixel_stride²`, in 64 bits: it does not wrap).
    pub fn pixel_weight(&self) -> u64 {
        let (s, _, _) = self.sides();
        s * s
    }
}

/// The ring of feedback buffers: `frames_in_flight` slots; frame `f` writes slot
/// `f % frames_in_flight` when that slot is free, and a slot is read back once the GPU has
/// finished the frame that wrote it. The CPU never waits: a frame whose slot still holds unread
/// feedback of an unfinished frame simply writes none.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FeedbackRing {
    slots: Vec<Option<u64>>,
}

/// What to do with the feedback ring at the start of a frame.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RingStep {
    /// Slots to read back now, with the frame each holds, oldest first. Decode them, then they
    /// are free.
    pub read: Vec<(usize, u64)>,
    /// The slot this frame writes (reset it first), or `None`: no feedback this frame.
    pub write: Option<usize>,
}

impl FeedbackRing {
    /// A ring of `frames_in_flight` slots (at least 1).
    pub fn new(frames_in_flight: u32) -> Self {
        Self { slots: vec![None; frames_in_flight.max(1) as usize] }
    }

    /// Slots in the ring.
    pub fn len(&self) -> usize {
        self.slots.len()
    }

    /// Always false: a ring has at least one slot.
    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    /// The frame whose feedback slot `slot` holds, unread.
    pub fn pending(&self, slot: usize) -> Option<u64> {
        self.slots.get(slot).copied().flatten()
    }

    /// Starts frame `frame`, given the last frame the GPU has finished (`None`: none yet) and
    /// whether this frame writes feedback (see [`FeedbackSampling::frame_active`]).
    pub fn begin_frame(&mut self, frame: u64, gpu_completed: Option<u64>, write_feedback: bool) -> RingStep {
        let mut step = RingStep::default();
        for (slot, held) in self.slots.iter_mut().enumerate() {
            if let Some(f) = *held {
                if gpu_completed.is_some_and(|done| f <= done) {
                    step.read.push((slot, f));
                    *held = None;
                }
            }
        }
        step.read.sort_unstable_by_key(|&(_, f)| f);
        let slot = (frame % self.slots.len() as u64) as usize;
        if write_feedback && self.slots[slot].is_none() {
            self.slots[slot] = Some(frame);
            step.write = Some(slot);
        }
        step
    }
}
