//! PRT-Ptex packing: per-face textures with one-texel borders packed into a 2D array of one slice
//! per resolution (the seed's part 3, "multires slices").
//!
//! Ptex gives every face of a mesh its own texture, at a resolution of its own, with no UV layout
//! and no seams: filtering across a face edge reads the neighbouring face through the mesh's
//! adjacency. On a GPU the faces are packed into one texture array:
//!
//! - **One slice per level.** Slice `L` holds a square *slot* of `finest_slot >> L` texels for
//!   every face that has level `L`: a face whose finest level is `F` has a slot in slices
//!   `F..levels` (its finest resolution and its MIPs, which "cannot fit in a standard MIP chain").
//!   Slots are powers of two and slices are square powers of two, so a slot at least a tile wide
//!   covers whole tiles of its own; smaller slots share tiles.
//! - **Borders.** A slot is the face's `slot - 2` interior texels at that level inside a border of
//!   one texel copied from its neighbours' edge texels ([`bordered_slot`]), so a bilinear sample
//!   anywhere in the face, edges included, reads the same values on both sides of an edge.
//! - **Face table.** The shader reads, per face, the finest level that is resident and each
//!   level's slot origin ([`PtexLayout::face_table`], layout in [`PTEX_RECORD_WORDS`]); the
//!   include `shaders/include/ptex.glsl` clamps the level wanted to that finest level (the MIP
//!   fallback) and blends the two slices around it (manual trilinear filtering).
//! - **Resolution management.** [`PtexResidency`] counts the slots over each tile: dropping a
//!   face's finest level releases exactly the tiles no other resident slot covers, and bringing it
//!   back commits them again.
//!
//! # Faces and edges
//!
//! Faces are quads with texel `(0, 0)` at their corner 0, as in Ptex: corners 0..4 are `(0, 0)`,
//! `(1, 0)`, `(1, 1)`, `(0, 1)` in face coordinates, and edge `e` ([`PtexEdge`]) runs from corner
//! `e` to corner `e + 1` (bottom, right, top, left: counter-clockwise). Adjacency is Ptex's: edge
//! `e` of face A names the face B across it and B's edge `e'` there. Neighbouring faces wind the
//! same way, so the shared edge runs in opposite directions in the two faces: A's corner `e` is
//! B's corner `e' + 1`. Adjacency must be symmetric ([`PtexLayoutError::AsymmetricAdjacency`]).
//! [`grid_faces`] makes a quad grid's adjacency and [`quad_mesh_faces`] any quad mesh's from its
//! vertex indices.
//!
//! # Border rules
//!
//! At level `L`, A's border along edge `e` is B's row of interior texels along `e'` (reversed, by
//! the rule above):
//! - at level `L` when B has level `L` (texel for texel: both slots have `slot - 2` texels a side);
//! - otherwise (B's finest level is coarser) B's row at its finest level, resampled to A's count by
//!   the nearest texel (texels are opaque bytes here, so nothing is blended);
//! - on an edge with no neighbour, A's own edge row (clamp to edge).
//!
//! A border corner is the texel diagonally across the vertex when the vertex is regular (four faces
//! around it, found by walking the adjacency: A → B → D → E → A), at D's level as above; at a
//! boundary vertex where only one of A's two edges there has a neighbour, that neighbour's corner
//! texel at the vertex (clamping along the boundary, so the edge between them stays seamless up to
//! the boundary); else (a corner of the mesh, an irregular vertex) A's own corner texel.
//!
//! The layout holds no texels: [`PtexEdges`] keeps each face's edge rows (what borders need), and
//! [`bordered_slot`] builds a slot from a face's interior and its neighbours' edges.

use crate::format::Format;
use crate::profile::DeviceProfile;
use crate::tiles::shape::{SparseDimension, SparseFormatInfo};
use std::collections::HashMap;
use std::fmt;

/// The most levels (array slices) a layout has: the face table has one slot word per level.
pub const PTEX_MAX_LEVELS: u32 = 12;

/// Words of the face table's header and of each face record (16 × 4 bytes).
///
/// The header (words `0..16`): `[face count, levels, finest slot side, slice side, 0, …]`. Face `f`'s
/// record (words `16 * (f + 1)..16 * (f + 2)`): `[finest resident level, finest level, 0, 0, slot
/// word of level 0, …, slot word of level 11]`, a slot word being `x | y << 16` (the slot's origin
/// in texels in its slice) or [`PTEX_NO_SLOT`] for a level the face does not have.
pub const PTEX_RECORD_WORDS: u32 = 16;

/// The slot word of a level a face does not have.
pub const PTEX_NO_SLOT: u32 = u32::MAX;

/// The smallest slot side: two interior texels and the border.
pub const PTEX_MIN_SLOT: u32 = 4;

/// The largest slice side a slot word can address (16 bits per coordinate).
pub const PTEX_MAX_SIDE: u32 = 1 << 16;

/// An edge of a quad face, Ptex's numbering: edge `e` runs from corner `e` to corner `e + 1`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum PtexEdge {
    /// `v = 0`, from `(0, 0)` to `(1, 0)`.
    Bottom = 0,
    /// `u = 1`, from `(1, 0)` to `(1, 1)`.
    Right = 1,
    /// `v = 1`, from `(1, 1)` to `(0, 1)`.
    Top = 2,
    /// `u = 0`, from `(0, 1)` to `(0, 0)`.
    Left = 3,
}

impl PtexEdge {
    /// The four edges in order.
    pub const ALL: [PtexEdge; 4] = [PtexEdge::Bottom, PtexEdge::Right, PtexEdge::Top, PtexEdge::Left];

    /// Its index, 0..4.
    pub fn index(self) -> usize {
        self as usize
    }

    /// The edge `index % 4`.
    pub fn from_index(index: usize) -> PtexEdge {
        Self::ALL[index % 4]
    }
}

/// The face across an edge and that face's edge there.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct PtexNeighbour {
    /// The neighbouring face's index.
    pub face: u32,
    /// Its edge that this edge meets.
    pub edge: PtexEdge,
}

/// One face: its finest level and its neighbours.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct PtexFace {
    /// The face's finest level: its texels are `(finest_slot >> finest_level) - 2` a side there, and
    /// it has every coarser level down to the layout's last.
    pub finest_level: u32,
    /// The neighbour across each edge ([`PtexEdge`] order), `None` on a boundary.
    pub neighbours: [Option<PtexNeighbour>; 4],
}

impl PtexFace {
    /// A face without neighbours.
    pub fn new(finest_level: u32) -> PtexFace {
        PtexFace { finest_level, neighbours: [None; 4] }
    }
}

/// The faces of a `width × height` grid of quads (face `(i, j)` is `j * width + i`, its `u` along
/// `i` and `v` along `j`), each with its finest level from `finest_level(i, j)`, and the grid's
/// adjacency: the quad-grid adjacency of a plane or a height field, the common case.
pub fn grid_faces(width: u32, height: u32, finest_level: impl Fn(u32, u32) -> u32) -> Vec<PtexFace> {
    let index = |i: u32, j: u32| j * width + i;
    let mut faces = Vec::with_capacity(width as usize * height as usize);
    for j in 0..height {
        for i in 0..width {
            let neighbour = |face: u32, edge: PtexEdge| Some(PtexNeighbour { face, edge });
            faces.push(PtexFace {
                finest_level: finest_level(i, j),
                neighbours: [
                    if j > 0 { neighbour(index(i, j - 1), PtexEdge::Top) } else { None },
                    if i + 1 < width { neighbour(index(i + 1, j), PtexEdge::Left) } else { None },
                    if j + 1 < height { neighbour(index(i, j + 1), PtexEdge::Bottom) } else { None },
                    if i > 0 { neighbour(index(i - 1, j), PtexEdge::Right) } else { None },
                ],
            });
        }
    }
    faces
}

/// The faces of a quad mesh given by its vertex indices, each quad's corners in Ptex order
/// (counter-clockwise: corner 0 at `(0, 0)`, then `(1, 0)`, `(1, 1)`, `(0, 1)`), with their
/// adjacency derived from shared edges: edge `e` of a quad runs from its vertex `e` to its vertex
/// `e + 1`, and the quad whose edge runs from `e + 1` back to `e` is its neighbour there (a cube,
/// a closed surface, any orientable manifold). Every face gets `finest_level(face)`.
///
/// Refused: an edge that two quads run the same way (the winding is inconsistent, or three
/// quads share it) ([`PtexLayoutError::NonManifoldEdge`]); a quad with a repeated vertex
/// ([`PtexLayoutError::DegenerateQuad`]).
pub fn quad_mesh_faces(
    quads: &[[u32; 4]],
    finest_level: impl Fn(u32) -> u32,
) -> Result<Vec<PtexFace>, PtexLayoutError> {
    let mut directed: HashMap<(u32, u32), (u32, PtexEdge)> = HashMap::with_capacity(quads.len() * 4);
    for (f, quad) in quads.iter().enumerate() {
        let f = u32::try_from(f).map_err(|_| PtexLayoutError::TooManyFaces { faces: quads.len() })?;
        for e in 0..4 {
            if (e + 1..4).any(|k| quad[k] == quad[e]) {
                return Err(PtexLayoutError::DegenerateQuad { face: f });
            }
            let edge = PtexEdge::from_index(e);
            if let Some(&(other, other_edge)) = directed.get(&(quad[e], quad[(e + 1) % 4])) {
                return Err(PtexLayoutError::NonManifoldEdge { face: f, edge, other, other_edge });
            }
            directed.insert((quad[e], quad[(e + 1) % 4]), (f, edge));
        }
    }
    Ok(quads
        .iter()
        .enumerate()
        .map(|(f, quad)| PtexFace {
            finest_level: finest_level(f as u32),
            neighbours: std::array::from_fn(|e| {
                directed.get(&(quad[(e + 1) % 4], quad[e])).map(|&(face, edge)| PtexNeighbour { face, edge })
            }),
        })
        .collect())
}

/// What to pack.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PtexDesc {
    /// The slot side at level 0 (interior `finest_slot - 2` texels and the border): a power of two
    /// of at least [`PTEX_MIN_SLOT`].
    pub finest_slot: u32,
    /// Levels, one array slice each: 1..=[`PTEX_MAX_LEVELS`], and the last level's slot
    /// (`finest_slot >> (levels - 1)`) at least [`PTEX_MIN_SLOT`].
    pub levels: u32,
    /// The faces (at least one).
    pub faces: Vec<PtexFace>,
}

/// The device's limits a layout must fit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PtexLimits {
    /// The widest 2D image (`maxImageDimension2D`).
    pub max_side: u32,
    /// The most array layers (`maxImageArrayLayers`).
    pub max_layers: u32,
    /// The narrowest slice: the format's sparse tile side (the larger of its width and height).
    /// A slice narrower than a tile is a mip below the tile shape, which a device may place in
    /// its mip tail (the H200 does, one tail per layer): a tail is one pinned unit, so a level's
    /// tiles could be neither released nor bound on their own. With every slice a whole number
    /// of tiles, the single mip is tiled on every device.
    pub min_side: u32,
}

impl PtexLimits {
    /// No limit past the layout's own.
    pub const NONE: PtexLimits =
        PtexLimits { max_side: PTEX_MAX_SIDE, max_layers: PTEX_MAX_LEVELS, min_side: 0 };

    /// A captured device's limits for slices of `format`: its `maxImageDimension2D` and
    /// `maxImageArrayLayers`, and its 2D sparse tile side for `format` as the narrowest slice
    /// (0 where the device has no 2D sparse tile for it: creating the image refuses it then).
    pub fn for_device(profile: &DeviceProfile, format: Format) -> PtexLimits {
        let min_side = SparseFormatInfo::from_profile(profile, format, SparseDimension::D2)
            .map_or(0, |info| info.tile.width.max(info.tile.height));
        PtexLimits {
            max_side: profile.limits.max_image_dimension_2d,
            max_layers: profile.limits.max_image_array_layers,
            min_side,
        }
    }
}

/// Why a description cannot be packed.
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
pub enum PtexLayoutError {
    /// No faces.
    #[error("a Ptex layout needs at least one face")]
    NoFaces,
    /// More faces than a face table can index (`u32` words).
    #[error("{faces} faces are more than a face table can index")]
    TooManyFaces {
        /// Faces given.
        faces: usize,
    },
    /// The finest slot is not a power of two of at least [`PTEX_MIN_SLOT`].
    #[error("the finest slot side {finest_slot} is not a power of two of at least {PTEX_MIN_SLOT}")]
    SlotNotPowerOfTwo {
        /// The side given.
        finest_slot: u32,
    },
    /// No levels, more than [`PTEX_MAX_LEVELS`], or a last level whose slot is under [`PTEX_MIN_SLOT`].
    #[error(
        "{levels} levels of a {finest_slot}-texel finest slot: 1..={PTEX_MAX_LEVELS} levels whose last slot is at least {PTEX_MIN_SLOT}"
    )]
    Levels {
        /// Levels given.
        levels: u32,
        /// The finest slot side.
        finest_slot: u32,
    },
    /// A face's finest level is not one of the layout's levels.
    #[error("face {face}'s finest level {finest_level} is not below the layout's {levels} levels")]
    FinestLevel {
        /// The face.
        face: u32,
        /// Its finest level.
        finest_level: u32,
        /// The layout's levels.
        levels: u32,
    },
    /// A neighbour index past the faces.
    #[error("face {face}'s edge {edge:?} names face {neighbour}, past the {faces} faces")]
    NeighbourOutOfRange {
        /// The face.
        face: u32,
        /// Its edge.
        edge: PtexEdge,
        /// The face named.
        neighbour: u32,
        /// Faces.
        faces: u32,
    },
    /// A face edge that is its own neighbour.
    #[error("face {face}'s edge {edge:?} names itself")]
    SelfAdjacent {
        /// The face.
        face: u32,
        /// Its edge.
        edge: PtexEdge,
    },
    /// Face A's edge names (B, e') but B's edge e' does not name (A, e).
    #[error("face {face}'s edge {edge:?} names face {neighbour}'s edge {neighbour_edge:?}, which does not name it back")]
    AsymmetricAdjacency {
        /// The face.
        face: u32,
        /// Its edge.
        edge: PtexEdge,
        /// The face named.
        neighbour: u32,
        /// The edge named.
        neighbour_edge: PtexEdge,
    },
    /// The slices would be wider than the device's 2D images (or than a slot word addresses).
    #[error("the slices would be {side} texels a side, past the limit of {max_side}")]
    SliceTooLarge {
        /// The side the packing needs.
        side: u64,
        /// The limit.
        max_side: u32,
    },
    /// A quad mesh edge that two quads run the same way ([`quad_mesh_faces`]).
    #[error("face {face}'s edge {edge:?} runs the same way as face {other}'s edge {other_edge:?}: inconsistent winding or a non-manifold edge")]
    NonManifoldEdge {
        /// The face.
        face: u32,
        /// Its edge.
        edge: PtexEdge,
        /// The face that has the edge already.
        other: u32,
        /// Its edge.
        other_edge: PtexEdge,
    },
    /// A quad with a vertex twice ([`quad_mesh_faces`]).
    #[error("face {face} names a vertex twice")]
    DegenerateQuad {
        /// The face.
        face: u32,
    },
    /// More levels than the device's array layers.
    #[error("{levels} levels need as many array layers, past the device's {max_layers}")]
    TooManyLayers {
        /// Levels.
        levels: u32,
        /// The device's array layers.
        max_layers: u32,
    },
}

/// A slot: where one face's level lives in its slice.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct PtexSlot {
    /// The level, which is the array slice.
    pub level: u32,
    /// The slot's first texel in the slice.
    pub origin: [u32; 2],
    /// Its side in texels (border included).
    pub side: u32,
}

impl PtexSlot {
    /// The face's texels a side at this level (the interior).
    pub fn interior(&self) -> u32 {
        self.side - 2
    }

    /// The tiles of `shape` (width × height texels) the slot touches, as `[x0, y0, x1, y1)` in tile
    /// coordinates of its slice.
    pub fn tiles(&self, tile: [u32; 2]) -> [u32; 4] {
        let [w, h] = [tile[0].max(1), tile[1].max(1)];
        [
            self.origin[0] / w,
            self.origin[1] / h,
            (self.origin[0] + self.side).div_ceil(w),
            (self.origin[1] + self.side).div_ceil(h),
        ]
    }
}

/// The packed layout: each face's slot at each level it has, in slices of one side.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PtexLayout {
    desc: PtexDesc,
    side: u32,
    /// Per face, per level: the slot's index in its slice (`u32::MAX` where the face has none).
    slots: Vec<[u32; PTEX_MAX_LEVELS as usize]>,
    /// Faces per level.
    counts: [u32; PTEX_MAX_LEVELS as usize],
}

impl PtexLayout {
    /// Packs `desc` into slices that fit `limits`, or says why not. Slot `k` of slice `L` (faces in
    /// index order among those that have level `L`) is at `(k % per_row, k / per_row) * slot`, with
    /// `per_row = side / slot`; the side is the smallest power of two (at least the finest slot and
    /// `limits.min_side`) that holds every slice's slots.
    pub fn new(desc: &PtexDesc, limits: PtexLimits) -> Result<PtexLayout, PtexLayoutError> {
        if desc.faces.is_empty() {
            return Err(PtexLayoutError::NoFaces);
        }
        let Ok(face_count) = u32::try_from(desc.faces.len()) else {
            return Err(PtexLayoutError::TooManyFaces { faces: desc.faces.len() });
        };
        if (u64::from(face_count) + 1) * u64::from(PTEX_RECORD_WORDS) > u64::from(u32::MAX) {
            return Err(PtexLayoutError::TooManyFaces { faces: desc.faces.len() });
        }
        if !desc.finest_slot.is_power_of_two() || desc.finest_slot < PTEX_MIN_SLOT {
            return Err(PtexLayoutError::SlotNotPowerOfTwo { finest_slot: desc.finest_slot });
        }
        if desc.levels == 0
            || desc.levels > PTEX_MAX_LEVELS
            || desc.finest_slot >> (desc.levels - 1) < PTEX_MIN_SLOT
        {
            return Err(PtexLayoutError::Levels { levels: desc.levels, finest_slot: desc.finest_slot });
        }
        if desc.levels > limits.max_layers {
            return Err(PtexLayoutError::TooManyLayers {
                levels: desc.levels,
                max_layers: limits.max_layers,
            });
        }
        for (f, face) in desc.faces.iter().enumerate() {
            let f = f as u32;
            if face.finest_level >= desc.levels {
                return Err(PtexLayoutError::FinestLevel {
                    face: f,
                    finest_level: face.finest_level,
                    levels: desc.levels,
                });
            }
            for (e, neighbour) in face.neighbours.iter().enumerate() {
                let Some(n) = neighbour else { continue };
                let edge = PtexEdge::from_index(e);
                if n.face >= face_count {
                    return Err(PtexLayoutError::NeighbourOutOfRange {
                        face: f,
                        edge,
                        neighbour: n.face,
                        faces: face_count,
                    });
                }
                if n.face == f {
                    return Err(PtexLayoutError::SelfAdjacent { face: f, edge });
                }
                let back = desc.faces[n.face as usize].neighbours[n.edge.index()];
                if back != Some(PtexNeighbour { face: f, edge }) {
                    return Err(PtexLayoutError::AsymmetricAdjacency {
                        face: f,
                        edge,
                        neighbour: n.face,
                        neighbour_edge: n.edge,
                    });
                }
            }
        }
        let mut counts = [0u32; PTEX_MAX_LEVELS as usize];
        let mut slots = Vec::with_capacity(desc.faces.len());
        for face in &desc.faces {
            let mut s = [u32::MAX; PTEX_MAX_LEVELS as usize];
            for level in face.finest_level..desc.levels {
                s[level as usize] = counts[level as usize];
                counts[level as usize] += 1;
            }
            slots.push(s);
        }
        // The smallest power-of-two side at least the finest slot and the narrowest slice where
        // every slice fits.
        let max_side = limits.max_side.min(PTEX_MAX_SIDE);
        let mut side = u64::from(desc.finest_slot).max(u64::from(limits.min_side).next_power_of_two());
        loop {
            let fits = (0..desc.levels).all(|l| {
                let per_row = side / u64::from(desc.finest_slot >> l);
                u64::from(counts[l as usize]) <= per_row * per_row
            });
            if fits {
                break;
            }
            side *= 2;
            if side > u64::from(max_side) {
                return Err(PtexLayoutError::SliceTooLarge { side, max_side });
            }
        }
        if side > u64::from(max_side) {
            return Err(PtexLayoutError::SliceTooLarge { side, max_side });
        }
        Ok(PtexLayout { desc: desc.clone(), side: side as u32, slots, counts })
    }

    /// The description packed.
    pub fn desc(&self) -> &PtexDesc {
        &self.desc
    }

    /// Faces.
    pub fn face_count(&self) -> u32 {
        self.desc.faces.len() as u32
    }

    /// Levels (array slices).
    pub fn levels(&self) -> u32 {
        self.desc.levels
    }

    /// The slices' width and height in texels.
    pub fn side(&self) -> u32 {
        self.side
    }

    /// The slot side at `level`.
    pub fn slot_side(&self, level: u32) -> u32 {
        self.desc.finest_slot >> level.min(PTEX_MAX_LEVELS - 1)
    }

    /// A face's texels a side at `level` (the interior of its slot).
    pub fn interior(&self, level: u32) -> u32 {
        self.slot_side(level) - 2
    }

    /// Faces with a slot at `level`.
    pub fn faces_at(&self, level: u32) -> u32 {
        self.counts.get(level as usize).copied().unwrap_or(0)
    }

    /// Face `face`'s finest level (`None` for a face past the layout's).
    pub fn finest_level(&self, face: u32) -> Option<u32> {
        self.desc.faces.get(face as usize).map(|f| f.finest_level)
    }

    /// Face `face`'s slot at `level`, `None` where the face does not have that level.
    pub fn slot(&self, face: u32, level: u32) -> Option<PtexSlot> {
        let index = *self.slots.get(face as usize)?.get(level as usize)?;
        if index == u32::MAX || level >= self.desc.levels {
            return None;
        }
        let side = self.slot_side(level);
        let per_row = self.side / side;
        Some(PtexSlot { level, origin: [index % per_row * side, index / per_row * side], side })
    }

    /// Every slot, face by face, finest level first.
    pub fn slots(&self) -> impl Iterator<Item = (u32, PtexSlot)> + '_ {
        (0..self.face_count())
            .flat_map(move |f| (0..self.desc.levels).filter_map(move |l| Some((f, self.slot(f, l)?))))
    }

    /// Bytes of a face's interior texels from `level` to the last, `texel_bytes` each: what
    /// [`PtexEdges::new`] and the backend take per face.
    pub fn face_bytes(&self, face: u32, texel_bytes: u32) -> Option<u64> {
        let finest = self.finest_level(face)?;
        Some(
            (finest..self.desc.levels)
                .map(|l| u64::from(self.interior(l)).pow(2) * u64::from(texel_bytes))
                .sum(),
        )
    }

    /// The face table for faces whose finest resident level is `resident[f]` (layout in
    /// [`PTEX_RECORD_WORDS`]). A missing or out-of-range entry is written as the face's finest
    /// level.
    pub fn face_table(&self, resident: &[u32]) -> Vec<u32> {
        let words = PTEX_RECORD_WORDS as usize;
        let mut table = vec![0u32; words * (self.desc.faces.len() + 1)];
        table[..4].copy_from_slice(&[self.face_count(), self.desc.levels, self.desc.finest_slot, self.side]);
        for (f, face) in self.desc.faces.iter().enumerate() {
            let record = &mut table[words * (f + 1)..words * (f + 2)];
            let finest = face.finest_level;
            let r =
                resident.get(f).copied().filter(|&r| r >= finest && r < self.desc.levels).unwrap_or(finest);
            record[0] = r;
            record[1] = finest;
            for level in 0..PTEX_MAX_LEVELS {
                record[4 + level as usize] = match self.slot(f as u32, level) {
                    Some(s) => s.origin[0] | s.origin[1] << 16,
                    None => PTEX_NO_SLOT,
                };
            }
        }
        table
    }
}

/// Each face's edge rows at each level it has: what the borders of its neighbours are built from.
///
/// Row `e` of a face's level is its interior texels along edge `e`, in the edge's direction (from
/// corner `e` to corner `e + 1`), `texel_bytes` each.
#[derive(Clone, PartialEq, Eq)]
pub struct PtexEdges {
    texel_bytes: usize,
    /// Per face, per level from the face's finest: its four rows.
    rows: Vec<Vec<[Vec<u8>; 4]>>,
}

impl fmt::Debug for PtexEdges {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PtexEdges")
            .field("texel_bytes", &self.texel_bytes)
            .field("faces", &self.rows.len())
            .finish()
    }
}

/// The interior texel of an `n × n` face at `(x, y)`.
fn texel(interior: &[u8], n: usize, texel_bytes: usize, x: usize, y: usize) -> &[u8] {
    let at = (y * n + x) * texel_bytes;
    &interior[at..at + texel_bytes]
}

/// The row of an `n × n` interior along `edge`, in the edge's direction.
pub fn edge_row(interior: &[u8], n: u32, texel_bytes: u32, edge: PtexEdge) -> Vec<u8> {
    let (n, b) = (n as usize, texel_bytes as usize);
    (0..n)
        .flat_map(|k| {
            let (x, y) = match edge {
                PtexEdge::Bottom => (k, 0),
                PtexEdge::Right => (n - 1, k),
                PtexEdge::Top => (n - 1 - k, n - 1),
                PtexEdge::Left => (0, n - 1 - k),
            };
            texel(interior, n, b, x, y).iter().copied()
        })
        .collect()
}

impl PtexEdges {
    /// The edge rows of every face from `faces[f]`: face `f`'s interior texels from its finest level
    /// to the last, level after level, rows packed ([`PtexLayout::face_bytes`] bytes). `None` when
    /// the number of faces or a face's byte count differs (the caller checks first and says which).
    pub fn new(layout: &PtexLayout, texel_bytes: u32, faces: &[&[u8]]) -> Option<PtexEdges> {
        if faces.len() != layout.face_count() as usize || texel_bytes == 0 {
            return None;
        }
        let mut rows = Vec::with_capacity(faces.len());
        for (f, data) in faces.iter().enumerate() {
            if layout.face_bytes(f as u32, texel_bytes) != Some(data.len() as u64) {
                return None;
            }
            let finest = layout.desc.faces[f].finest_level;
            let mut at = 0usize;
            let mut levels = Vec::new();
            for level in finest..layout.levels() {
                let n = layout.interior(level);
                let bytes = n as usize * n as usize * texel_bytes as usize;
                let interior = &data[at..at + bytes];
                at += bytes;
                levels.push(PtexEdge::ALL.map(|e| edge_row(interior, n, texel_bytes, e)));
            }
            rows.push(levels);
        }
        Some(PtexEdges { texel_bytes: texel_bytes as usize, rows })
    }

    /// Bytes per texel.
    pub fn texel_bytes(&self) -> u32 {
        self.texel_bytes as u32
    }

    /// Face `face`'s row along `edge` at `level`, or at its finest level when it does not have
    /// `level` (`None` for a face past the layout's).
    pub fn row(&self, layout: &PtexLayout, face: u32, level: u32, edge: PtexEdge) -> Option<&[u8]> {
        let finest = layout.finest_level(face)?;
        let levels = self.rows.get(face as usize)?;
        let at = level.max(finest).min(layout.levels() - 1) - finest;
        Some(&levels.get(at as usize)?[edge.index()])
    }

    /// Replaces face `face`'s rows at `level` with those of `interior` (that level's texels);
    /// `false` (nothing changed) when the face does not have the level or the length differs.
    pub fn set_level(&mut self, layout: &PtexLayout, face: u32, level: u32, interior: &[u8]) -> bool {
        let Some(finest) = layout.finest_level(face) else { return false };
        if level < finest || level >= layout.levels() {
            return false;
        }
        let n = layout.interior(level);
        if interior.len() != n as usize * n as usize * self.texel_bytes {
            return false;
        }
        let rows = PtexEdge::ALL.map(|e| edge_row(interior, n, self.texel_bytes as u32, e));
        self.rows[face as usize][(level - finest) as usize] = rows;
        true
    }

    /// Whether `interior` (face `face`'s texels at `level`) has the edge rows kept for it.
    pub fn matches(&self, layout: &PtexLayout, face: u32, level: u32, interior: &[u8]) -> bool {
        let Some(finest) = layout.finest_level(face) else { return false };
        if level < finest || level >= layout.levels() {
            return false;
        }
        let n = layout.interior(level);
        if interior.len() != n as usize * n as usize * self.texel_bytes {
            return false;
        }
        let kept = &self.rows[face as usize][(level - finest) as usize];
        PtexEdge::ALL.iter().all(|&e| edge_row(interior, n, self.texel_bytes as u32, e) == kept[e.index()])
    }
}

/// Texel `k` of `count` along a row read at the other face, whose row of `row.len() / b` texels
/// runs the opposite way: the nearest texel.
fn opposite_texel(row: &[u8], b: usize, k: usize, count: usize) -> &[u8] {
    let m = row.len() / b;
    // Position of texel k's centre along A's edge, measured from B's start: 1 - (k + 0.5) / count.
    let index = if m == count { m - 1 - k } else { ((2 * (count - k) - 1) * m / (2 * count)).min(m - 1) };
    &row[index * b..(index + 1) * b]
}

/// The face diagonally across face `face`'s corner `corner` when the vertex there is regular
/// (four faces around it), with that face's corner at the vertex.
pub fn diagonal(layout: &PtexLayout, face: u32, corner: usize) -> Option<(u32, usize)> {
    let faces = &layout.desc.faces;
    let step = |f: u32, c: usize| -> Option<(u32, usize)> {
        // Across the edge starting at corner c; the vertex is the other face's corner e' + 1.
        let n = faces.get(f as usize)?.neighbours[c % 4]?;
        Some((n.face, (n.edge.index() + 1) % 4))
    };
    let (b, cb) = step(face, corner)?;
    let (d, cd) = step(b, cb)?;
    let (e, ce) = step(d, cd)?;
    let (back, cback) = step(e, ce)?;
    (back == face && cback == corner % 4 && d != face).then_some((d, cd))
}

/// Face `face`'s slot at `level` (`slot × slot` texels, rows packed): `interior` (its
/// `slot - 2` texels a side at that level) inside the border the module's rules build from
/// `edges`. `None` when the face does not have the level, or `interior`'s length differs.
pub fn bordered_slot(
    layout: &PtexLayout,
    edges: &PtexEdges,
    face: u32,
    level: u32,
    interior: &[u8],
) -> Option<Vec<u8>> {
    let slot = layout.slot(face, level)?;
    let b = edges.texel_bytes;
    let n = slot.interior() as usize;
    if interior.len() != n * n * b {
        return None;
    }
    let side = slot.side as usize;
    let mut out = vec![0u8; side * side * b];
    let put = |out: &mut Vec<u8>, x: usize, y: usize, value: &[u8]| {
        let at = (y * side + x) * b;
        out[at..at + b].copy_from_slice(value);
    };
    for y in 0..n {
        let from = y * n * b;
        let at = ((y + 1) * side + 1) * b;
        out[at..at + n * b].copy_from_slice(&interior[from..from + n * b]);
    }
    let record = &layout.desc.faces[face as usize];
    for edge in PtexEdge::ALL {
        let own = edge_row(interior, n as u32, b as u32, edge);
        for k in 0..n {
            let value = match record.neighbours[edge.index()] {
                Some(nb) => {
                    let row = edges.row(layout, nb.face, level, nb.edge)?;
                    opposite_texel(row, b, k, n).to_vec()
                }
                None => own[k * b..(k + 1) * b].to_vec(),
            };
            let (x, y) = match edge {
                PtexEdge::Bottom => (1 + k, 0),
                PtexEdge::Right => (n + 1, 1 + k),
                PtexEdge::Top => (n - k, n + 1),
                PtexEdge::Left => (0, n - k),
            };
            put(&mut out, x, y, &value);
        }
    }
    for corner in 0..4 {
        // A face's corner c texel is the first of its edge c row.
        let across = |edge: usize| record.neighbours[edge % 4];
        let value = match (diagonal(layout, face, corner), across(corner), across(corner + 3)) {
            (Some((d, cd)), _, _) => edges.row(layout, d, level, PtexEdge::from_index(cd))?[..b].to_vec(),
            // A boundary vertex: the one neighbour's corner texel there (the edge `corner` starts
            // at the vertex, where that neighbour's edge ends: its next edge's first texel; the
            // edge `corner - 1` ends there, where the neighbour's edge starts).
            (None, Some(nb), None) => {
                edges.row(layout, nb.face, level, PtexEdge::from_index(nb.edge.index() + 1))?[..b].to_vec()
            }
            (None, None, Some(nb)) => edges.row(layout, nb.face, level, nb.edge)?[..b].to_vec(),
            _ => edge_row(interior, n as u32, b as u32, PtexEdge::from_index(corner))[..b].to_vec(),
        };
        let (x, y) = [(0, 0), (n + 1, 0), (n + 1, n + 1), (0, n + 1)][corner];
        put(&mut out, x, y, &value);
    }
    Some(out)
}

/// A tile of a slice: `(level, tile x, tile y)`.
pub type PtexTile = (u32, u32, u32);

/// Why a residency change was refused (nothing changed).
#[derive(Debug, thiserror::Error, Clone, Copy, PartialEq, Eq)]
pub enum PtexResidencyError {
    /// A face past the layout's.
    #[error("face {face} is past the layout's {faces} faces")]
    FaceOutOfRange {
        /// The face.
        face: u32,
        /// Faces.
        faces: u32,
    },
    /// The face's finest resident level is already the last: a face keeps one level.
    #[error("face {face} has only its last level {level} resident; a face keeps one level")]
    LastLevel {
        /// The face.
        face: u32,
        /// Its only resident level.
        level: u32,
    },
    /// The face's finest level is resident already: nothing to bring back.
    #[error("face {face}'s finest level {level} is resident already")]
    AllResident {
        /// The face.
        face: u32,
        /// Its finest level.
        level: u32,
    },
}

/// Which levels of each face are resident, and the tiles that holds: a face's levels from its
/// finest resident level to the last are resident, each tile is committed while a resident slot
/// covers it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PtexResidency {
    tile: [u32; 2],
    resident: Vec<u32>,
    refs: HashMap<PtexTile, u32>,
}

impl PtexResidency {
    /// Every level of every face resident, for tiles of `tile` (width, height) texels.
    pub fn new(layout: &PtexLayout, tile: [u32; 2]) -> PtexResidency {
        let mut refs = HashMap::new();
        for (_, slot) in layout.slots() {
            for t in slot_tiles(slot, tile) {
                *refs.entry(t).or_insert(0) += 1;
            }
        }
        let resident = layout.desc.faces.iter().map(|f| f.finest_level).collect();
        PtexResidency { tile, resident, refs }
    }

    /// Face `face`'s finest resident level.
    pub fn finest_resident(&self, face: u32) -> Option<u32> {
        self.resident.get(face as usize).copied()
    }

    /// The finest resident level of every face (what [`PtexLayout::face_table`] takes).
    pub fn resident_levels(&self) -> &[u32] {
        &self.resident
    }

    /// The committed tiles, sorted.
    pub fn tiles(&self) -> Vec<PtexTile> {
        let mut tiles: Vec<PtexTile> = self.refs.keys().copied().collect();
        tiles.sort_unstable();
        tiles
    }

    /// What dropping face `face`'s finest resident level would do: the level and the tiles it
    /// releases (those no other resident slot covers), sorted. Changes nothing.
    pub fn plan_drop(
        &self,
        layout: &PtexLayout,
        face: u32,
    ) -> Result<(u32, Vec<PtexTile>), PtexResidencyError> {
        let level = self.check_face(layout, face)?;
        if level + 1 >= layout.levels() {
            return Err(PtexResidencyError::LastLevel { face, level });
        }
        let slot = layout.slot(face, level).expect("a resident level has a slot");
        let mut freed: Vec<PtexTile> =
            slot_tiles(slot, self.tile).filter(|t| self.refs.get(t).copied() == Some(1)).collect();
        freed.sort_unstable();
        Ok((level, freed))
    }

    /// Drops face `face`'s finest resident level ([`PtexResidency::plan_drop`]'s answer, applied).
    pub fn drop_finest(
        &mut self,
        layout: &PtexLayout,
        face: u32,
    ) -> Result<(u32, Vec<PtexTile>), PtexResidencyError> {
        let (level, freed) = self.plan_drop(layout, face)?;
        let slot = layout.slot(face, level).expect("a resident level has a slot");
        for t in slot_tiles(slot, self.tile) {
            if let Some(r) = self.refs.get_mut(&t) {
                *r -= 1;
                if *r == 0 {
                    self.refs.remove(&t);
                }
            }
        }
        self.resident[face as usize] = level + 1;
        Ok((level, freed))
    }

    /// What bringing back the level finer than face `face`'s finest resident one would do: the
    /// level and the tiles it commits (those no resident slot covers yet), sorted.
    pub fn plan_restore(
        &self,
        layout: &PtexLayout,
        face: u32,
    ) -> Result<(u32, Vec<PtexTile>), PtexResidencyError> {
        let resident = self.check_face(layout, face)?;
        let finest = layout.desc.faces[face as usize].finest_level;
        if resident == finest {
            return Err(PtexResidencyError::AllResident { face, level: finest });
        }
        let level = resident - 1;
        let slot = layout.slot(face, level).expect("a level of the face has a slot");
        let mut added: Vec<PtexTile> =
            slot_tiles(slot, self.tile).filter(|t| !self.refs.contains_key(t)).collect();
        added.sort_unstable();
        Ok((level, added))
    }

    /// Brings back the level finer than face `face`'s finest resident one.
    pub fn restore_finer(
        &mut self,
        layout: &PtexLayout,
        face: u32,
    ) -> Result<(u32, Vec<PtexTile>), PtexResidencyError> {
        let (level, added) = self.plan_restore(layout, face)?;
        let slot = layout.slot(face, level).expect("a level of the face has a slot");
        for t in slot_tiles(slot, self.tile) {
            *self.refs.entry(t).or_insert(0) += 1;
        }
        self.resident[face as usize] = level;
        Ok((level, added))
    }

    fn check_face(&self, layout: &PtexLayout, face: u32) -> Result<u32, PtexResidencyError> {
        self.resident
            .get(face as usize)
            .copied()
            .ok_or(PtexResidencyError::FaceOutOfRange { face, faces: layout.face_count() })
    }
}

/// The tiles under a slot.
fn slot_tiles(slot: PtexSlot, tile: [u32; 2]) -> impl Iterator<Item = PtexTile> {
    let [x0, y0, x1, y1] = slot.tiles(tile);
    (y0..y1).flat_map(move |y| (x0..x1).map(move |x| (slot.level, x, y)))
}

#[cfg(test)]
#[path = "ptex_tests.rs"]
mod tests;
