use super::*;
use proptest::prelude::*;

/// A `w × h` grid whose face `(i, j)` has its local frame turned by `rot[f]` quarter turns:
/// local texel `(x, y)` of an `n`-texel face is global texel `turn(r, n, x, y)` inside the face's
/// square. The adjacency follows from the turns, so borders can be checked against the global
/// picture independently of the packing's own rules.
fn turned_grid(w: u32, h: u32, rot: &[u8], finest: &[u32]) -> Vec<PtexFace> {
    let index = |i: u32, j: u32| (j * w + i) as usize;
    let mut faces = Vec::new();
    for j in 0..h {
        for i in 0..w {
            let f = index(i, j);
            let r = rot[f] as usize;
            let mut neighbours = [None; 4];
            for (g, (di, dj)) in [(0i64, -1i64), (1, 0), (0, 1), (-1, 0)].into_iter().enumerate() {
                let (ni, nj) = (i64::from(i) + di, i64::from(j) + dj);
                if ni < 0 || nj < 0 || ni >= i64::from(w) || nj >= i64::from(h) {
                    continue;
                }
                let nf = index(ni as u32, nj as u32);
                let opposite = (g + 2) % 4;
                let local = (g + 4 - r) % 4;
                let their = (opposite + 4 - rot[nf] as usize) % 4;
                neighbours[local] =
                    Some(PtexNeighbour { face: nf as u32, edge: PtexEdge::from_index(their) });
            }
            faces.push(PtexFace { finest_level: finest[f], neighbours });
        }
    }
    faces
}

/// Local texel (x, y) (which may be -1 or n: the border) of a face turned `r` times, in the face's
/// global square.
fn turn(r: u8, n: i64, x: i64, y: i64) -> (i64, i64) {
    match r % 4 {
        0 => (x, y),
        1 => (n - 1 - y, x),
        2 => (n - 1 - x, n - 1 - y),
        _ => (y, n - 1 - x),
    }
}

fn unturn(r: u8, n: i64, gx: i64, gy: i64) -> (i64, i64) {
    // The inverse of `turn`: turning back r times is turning 4 - r times.
    turn((4 - r % 4) % 4, n, gx, gy)
}

/// Deterministic texels of face `f` at `level` (4 bytes each, all distinct enough).
fn face_data(layout: &PtexLayout, f: u32, seed: u32) -> Vec<u8> {
    let mut out = Vec::new();
    for level in layout.finest_level(f).unwrap()..layout.levels() {
        let n = layout.interior(level);
        for k in 0..n * n {
            let v =
                (f.wrapping_mul(2_654_435_761) ^ (level << 24) ^ k.wrapping_mul(40_503) ^ seed).to_le_bytes();
            out.extend_from_slice(&v);
        }
    }
    out
}

fn level_of(layout: &PtexLayout, data: &[u8], f: u32, level: u32) -> Vec<u8> {
    let finest = layout.finest_level(f).unwrap();
    let at: u64 = (finest..level).map(|l| u64::from(layout.interior(l)).pow(2) * 4).sum();
    let n = u64::from(layout.interior(level));
    data[at as usize..(at + n * n * 4) as usize].to_vec()
}

fn grid_desc() -> impl Strategy<Value = (u32, u32, u32, u32, Vec<u8>, Vec<u32>, u32)> {
    (1u32..6, 1u32..6, 2u32..6, 1u32..4, any::<u32>()).prop_flat_map(|(w, h, slot_log, levels, seed)| {
        let slot_log = slot_log.max(2);
        let levels = levels.min(slot_log - 1);
        let n = (w * h) as usize;
        (
            Just(w),
            Just(h),
            Just(1u32 << slot_log),
            Just(levels),
            proptest::collection::vec(0u8..4, n),
            proptest::collection::vec(0..levels, n),
            Just(seed),
        )
    })
}

#[test]
fn ptex_grid_faces_are_symmetric_and_pack() {
    let faces = grid_faces(4, 3, |i, j| (i + j) % 3);
    let layout = PtexLayout::new(&PtexDesc { finest_slot: 32, levels: 4, faces }, PtexLimits::NONE).unwrap();
    assert_eq!(layout.face_count(), 12);
    assert_eq!(layout.faces_at(3), 12);
    assert_eq!(diagonal(&layout, 0, 2), Some((5, 0)));
    assert_eq!(diagonal(&layout, 0, 0), None, "a boundary vertex is not regular");
}

#[test]
fn ptex_bad_descriptions_are_refused() {
    let ok = PtexDesc { finest_slot: 32, levels: 3, faces: grid_faces(2, 2, |_, _| 0) };
    assert!(PtexLayout::new(&ok, PtexLimits::NONE).is_ok());
    let with = |f: &dyn Fn(&mut PtexDesc)| {
        let mut d = ok.clone();
        f(&mut d);
        PtexLayout::new(&d, PtexLimits::NONE).unwrap_err()
    };
    assert_eq!(with(&|d| d.faces.clear()), PtexLayoutError::NoFaces);
    assert!(matches!(with(&|d| d.finest_slot = 48), PtexLayoutError::SlotNotPowerOfTwo { .. }));
    assert!(matches!(with(&|d| d.finest_slot = 2), PtexLayoutError::SlotNotPowerOfTwo { .. }));
    assert!(matches!(with(&|d| d.levels = 0), PtexLayoutError::Levels { .. }));
    assert!(
        PtexLayout::new(&PtexDesc { levels: 4, ..ok.clone() }, PtexLimits::NONE).is_ok(),
        "32 >> 3 = 4 is allowed"
    );
    assert!(matches!(with(&|d| d.levels = 5), PtexLayoutError::Levels { .. }));
    assert!(matches!(with(&|d| d.faces[1].finest_level = 3), PtexLayoutError::FinestLevel { face: 1, .. }));
    assert!(matches!(
        with(&|d| d.faces[0].neighbours[1] = Some(PtexNeighbour { face: 9, edge: PtexEdge::Left })),
        PtexLayoutError::NeighbourOutOfRange { face: 0, neighbour: 9, .. }
    ));
    assert!(matches!(
        with(&|d| d.faces[0].neighbours[1] = Some(PtexNeighbour { face: 0, edge: PtexEdge::Left })),
        PtexLayoutError::SelfAdjacent { face: 0, .. }
    ));
    assert!(matches!(
        with(&|d| d.faces[0].neighbours[1] = Some(PtexNeighbour { face: 1, edge: PtexEdge::Top })),
        PtexLayoutError::AsymmetricAdjacency { face: 0, .. }
    ));
    let small = PtexLimits { max_side: 32, max_layers: 16, min_side: 0 };
    assert!(matches!(
        PtexLayout::new(&ok, small),
        Err(PtexLayoutError::SliceTooLarge { side: 64, max_side: 32 })
    ));
    let few = PtexLimits { max_side: 1024, max_layers: 2, min_side: 0 };
    assert!(matches!(
        PtexLayout::new(&ok, few),
        Err(PtexLayoutError::TooManyLayers { levels: 3, max_layers: 2 })
    ));
}

#[test]
fn ptex_face_table_names_resident_level_and_slots() {
    let faces = grid_faces(2, 1, |i, _| i);
    let layout = PtexLayout::new(&PtexDesc { finest_slot: 16, levels: 2, faces }, PtexLimits::NONE).unwrap();
    let table = layout.face_table(&[1, 1]);
    assert_eq!(&table[..4], &[2, 2, 16, 16]);
    assert_eq!(&table[16..18], &[1, 0]);
    assert_eq!(table[20], 0, "face 0's level-0 slot at (0, 0)");
    assert_eq!(table[21], 0, "face 0's level-1 slot at (0, 0)");
    assert_eq!(&table[32..34], &[1, 1]);
    assert_eq!(table[36], PTEX_NO_SLOT);
    assert_eq!(table[37], 8, "face 1's level-1 slot at (8, 0)");
    assert_eq!(layout.face_table(&[7, 0])[16], 0, "out of range: the finest level");
    assert_eq!(layout.face_table(&[7, 0])[32], 1, "finer than the finest: the finest level");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn ptex_slots_are_disjoint_inside_their_slice_and_tiles_cover_them(
        finest in proptest::collection::vec(0u32..5, 1..200),
        slot_log in 3u32..9,
        tile_log in 2u32..8,
    ) {
        let levels = 5.min(slot_log - 1);
        let faces: Vec<PtexFace> = finest.iter().map(|&l| PtexFace::new(l % levels)).collect();
        let layout = PtexLayout::new(&PtexDesc { finest_slot: 1 << slot_log, levels, faces }, PtexLimits::NONE).unwrap();
        let side = layout.side();
        prop_assert!(side.is_power_of_two());
        let mut slots: Vec<(u32, PtexSlot)> = layout.slots().collect();
        for (f, s) in &slots {
            prop_assert!(s.origin[0] + s.side <= side && s.origin[1] + s.side <= side, "face {} {:?}", f, s);
            prop_assert!(s.level >= layout.finest_level(*f).unwrap());
            prop_assert_eq!(s.side, layout.slot_side(s.level));
        }
        // Each face has exactly its levels.
        let expected: usize = finest.iter().map(|&l| (levels - l % levels) as usize).sum();
        prop_assert_eq!(slots.len(), expected);
        slots.sort_by_key(|(_, s)| (s.level, s.origin[1], s.origin[0]));
        for (a, (fa, sa)) in slots.iter().enumerate() {
            for (fb, sb) in &slots[a + 1..] {
                let apart = sa.level != sb.level
                    || sa.origin[0] + sa.side <= sb.origin[0]
                    || sb.origin[0] + sb.side <= sa.origin[0]
                    || sa.origin[1] + sa.side <= sb.origin[1]
                    || sb.origin[1] + sb.side <= sa.origin[1];
                prop_assert!(apart, "faces {} and {} overlap: {:?} {:?}", fa, fb, sa, sb);
            }
        }
        // A halved side would not hold some slice (the side is the smallest).
        if side > layout.slot_side(0) {
            let half = side / 2;
            prop_assert!((0..levels).any(|l| u64::from(layout.faces_at(l)) > u64::from(half / layout.slot_side(l)).pow(2)));
        }
        // The residency's tiles are exactly those under slots.
        let tile = [1u32 << tile_log, 1u32 << (tile_log.saturating_sub(1))];
        let residency = PtexResidency::new(&layout, tile);
        let mut under = std::collections::BTreeSet::new();
        for (_, s) in layout.slots() {
            // From the tile of the first texel to the tile of the last, inclusive.
            let last = [s.origin[0] + s.side - 1, s.origin[1] + s.side - 1];
            for y in s.origin[1] / tile[1]..=last[1] / tile[1] {
                for x in s.origin[0] / tile[0]..=last[0] / tile[0] {
                    under.insert((s.level, x, y));
                }
            }
        }
        prop_assert_eq!(residency.tiles(), under.into_iter().collect::<Vec<_>>());
    }

    #[test]
    fn ptex_borders_equal_the_neighbours_edge_texels((w, h, slot, levels, rot, finest, seed) in grid_desc()) {
        let faces = turned_grid(w, h, &rot, &finest);
        let layout = PtexLayout::new(&PtexDesc { finest_slot: slot, levels, faces }, PtexLimits::NONE).unwrap();
        let data: Vec<Vec<u8>> = (0..w * h).map(|f| face_data(&layout, f, seed)).collect();
        let refs: Vec<&[u8]> = data.iter().map(Vec::as_slice).collect();
        let edges = PtexEdges::new(&layout, 4, &refs).unwrap();
        for f in 0..w * h {
            let (i, j) = (i64::from(f % w), i64::from(f / w));
            for level in finest[f as usize]..levels {
                let n = i64::from(layout.interior(level));
                let interior = level_of(&layout, &data[f as usize], f, level);
                let bordered = bordered_slot(&layout, &edges, f, level, &interior).unwrap();
                let side = n + 2;
                let at = |x: i64, y: i64| {
                    let k = ((y + 1) * side + x + 1) as usize * 4;
                    bordered[k..k + 4].to_vec()
                };
                // The interior is the face's own.
                for y in 0..n {
                    for x in 0..n {
                        let k = (y * n + x) as usize * 4;
                        prop_assert_eq!(at(x, y), interior[k..k + 4].to_vec());
                    }
                }
                // Every border texel: the global texel there clamped to the grid (a turned
                // grid's picture clamped to its edge), read from the face that holds it at this
                // level, when that face has this level.
                let border = (-1..=n).flat_map(|y| (-1..=n).map(move |x| (x, y)))
                    .filter(|&(x, y)| x < 0 || y < 0 || x >= n || y >= n);
                for (x, y) in border {
                    let (gx, gy) = turn(rot[f as usize], n, x, y);
                    let (gx, gy) = ((i * n + gx).clamp(0, i64::from(w) * n - 1), (j * n + gy).clamp(0, i64::from(h) * n - 1));
                    let (gi, gj) = (gx.div_euclid(n), gy.div_euclid(n));
                    let g = (gj * i64::from(w) + gi) as u32;
                    if level < finest[g as usize] {
                        continue; // resampled from the neighbour's finest level (its own test)
                    }
                    let (lx, ly) = unturn(rot[g as usize], n, gx.rem_euclid(n), gy.rem_euclid(n));
                    let theirs = level_of(&layout, &data[g as usize], g, level);
                    let k = (ly * n + lx) as usize * 4;
                    prop_assert_eq!(at(x, y), theirs[k..k + 4].to_vec(), "face {} ({}, {}) from face {}", f, x, y, g);
                }
            }
        }
    }

    #[test]
    fn ptex_drop_and_restore_release_and_commit_exactly_the_unshared_tiles(
        finest in proptest::collection::vec(0u32..3, 1..40),
        ops in proptest::collection::vec((any::<u16>(), any::<bool>()), 1..60),
        tile_log in 2u32..6,
    ) {
        let faces: Vec<PtexFace> = finest.iter().map(|&l| PtexFace::new(l)).collect();
        let layout = PtexLayout::new(&PtexDesc { finest_slot: 32, levels: 3, faces }, PtexLimits::NONE).unwrap();
        let tile = [1u32 << tile_log; 2];
        let mut r = PtexResidency::new(&layout, tile);
        let mut committed: std::collections::BTreeSet<PtexTile> = r.tiles().into_iter().collect();
        for (face, drop) in ops {
            let face = u32::from(face) % (layout.face_count() + 1);
            let before = r.clone();
            let result = if drop { r.drop_finest(&layout, face) } else { r.restore_finer(&layout, face) };
            match result {
                Ok((_, tiles)) => {
                    for t in tiles {
                        let changed = if drop { committed.remove(&t) } else { committed.insert(t) };
                        prop_assert!(changed, "tile {:?} changed twice", t);
                    }
                }
                Err(_) => prop_assert_eq!(&r, &before, "a refused change changes nothing"),
            }
            // The committed tiles are exactly those under resident slots.
            let mut under = std::collections::BTreeSet::new();
            for f in 0..layout.face_count() {
                for level in r.finest_resident(f).unwrap()..layout.levels() {
                    under.extend(slot_tiles(layout.slot(f, level).unwrap(), tile));
                }
            }
            prop_assert_eq!(&committed, &under);
            prop_assert_eq!(r.tiles(), under.into_iter().collect::<Vec<_>>());
        }
    }
}

#[test]
fn ptex_borders_from_a_coarser_neighbour_take_its_nearest_finest_texels() {
    // Face 0 at level 0 (6 texels a side), face 1 only from level 1 (2 texels a side).
    let faces = grid_faces(2, 1, |i, _| i);
    let layout = PtexLayout::new(&PtexDesc { finest_slot: 8, levels: 2, faces }, PtexLimits::NONE).unwrap();
    let data: Vec<Vec<u8>> = (0..2).map(|f| face_data(&layout, f, 7)).collect();
    let refs: Vec<&[u8]> = data.iter().map(Vec::as_slice).collect();
    let edges = PtexEdges::new(&layout, 4, &refs).unwrap();
    let interior = level_of(&layout, &data[0], 0, 0);
    let slot = bordered_slot(&layout, &edges, 0, 0, &interior).unwrap();
    let theirs = level_of(&layout, &data[1], 1, 1); // 2 × 2
    for k in 0..6usize {
        // Face 0's right border at row k: face 1's left column at row k * 2 / 6.
        let at = ((1 + k) * 8 + 7) * 4;
        let row = k * 2 / 6;
        assert_eq!(&slot[at..at + 4], &theirs[row * 2 * 4..row * 2 * 4 + 4], "row {k}");
    }
    // Wrong lengths are refused.
    assert!(bordered_slot(&layout, &edges, 0, 0, &interior[4..]).is_none());
    assert!(PtexEdges::new(&layout, 4, &refs[..1]).is_none());
    assert!(PtexEdges::new(&layout, 4, &[&data[0][1..], data[1].as_slice()]).is_none());
}

#[test]
fn ptex_edges_match_and_update_by_level() {
    let faces = grid_faces(2, 1, |_, _| 0);
    let layout = PtexLayout::new(&PtexDesc { finest_slot: 8, levels: 2, faces }, PtexLimits::NONE).unwrap();
    let data: Vec<Vec<u8>> = (0..2).map(|f| face_data(&layout, f, 3)).collect();
    let refs: Vec<&[u8]> = data.iter().map(Vec::as_slice).collect();
    let mut edges = PtexEdges::new(&layout, 4, &refs).unwrap();
    let level0 = level_of(&layout, &data[0], 0, 0);
    assert!(edges.matches(&layout, 0, 0, &level0));
    let mut other = level0.clone();
    other[0] ^= 1;
    assert!(!edges.matches(&layout, 0, 0, &other));
    assert!(edges.set_level(&layout, 0, 0, &other));
    assert!(edges.matches(&layout, 0, 0, &other));
    assert!(!edges.set_level(&layout, 0, 2, &other));
    assert!(!edges.set_level(&layout, 5, 0, &other));
}

/// A cube's six quads (vertex `x + 2y + 4z`), counter-clockwise seen from outside.
const CUBE: [[u32; 4]; 6] =
    [[0, 2, 3, 1], [4, 5, 7, 6], [0, 1, 5, 4], [2, 6, 7, 3], [0, 4, 6, 2], [1, 3, 7, 5]];

#[test]
fn ptex_quad_mesh_adjacency_matches_the_grid_and_closes_a_cube() {
    let (w, h) = (4u32, 3u32);
    let v = |i: u32, j: u32| j * (w + 1) + i;
    let quads: Vec<[u32; 4]> = (0..h)
        .flat_map(|j| (0..w).map(move |i| [v(i, j), v(i + 1, j), v(i + 1, j + 1), v(i, j + 1)]))
        .collect();
    assert_eq!(quad_mesh_faces(&quads, |f| f % 2).unwrap(), grid_faces(w, h, |i, j| (j * w + i) % 2));

    let faces = quad_mesh_faces(&CUBE, |f| f % 3).unwrap();
    assert!(faces.iter().all(|f| f.neighbours.iter().all(Option::is_some)), "a cube is closed");
    let layout = PtexLayout::new(&PtexDesc { finest_slot: 16, levels: 3, faces }, PtexLimits::NONE).unwrap();
    let data: Vec<Vec<u8>> = (0..6).map(|f| face_data(&layout, f, 11)).collect();
    let refs: Vec<&[u8]> = data.iter().map(Vec::as_slice).collect();
    let edges = PtexEdges::new(&layout, 4, &refs).unwrap();
    for f in 0..6u32 {
        for corner in 0..4 {
            assert_eq!(diagonal(&layout, f, corner), None, "three faces meet at a cube's corners");
        }
        for level in layout.finest_level(f).unwrap()..3 {
            let n = layout.interior(level) as usize;
            let interior = level_of(&layout, &data[f as usize], f, level);
            let slot = bordered_slot(&layout, &edges, f, level, &interior).unwrap();
            let side = n + 2;
            let at = |x: usize, y: usize| slot[(y * side + x) * 4..(y * side + x) * 4 + 4].to_vec();
            for edge in PtexEdge::ALL {
                let nb = layout.desc().faces[f as usize].neighbours[edge.index()].unwrap();
                if level < layout.finest_level(nb.face).unwrap() {
                    continue;
                }
                let theirs = edge_row(
                    level_of(&layout, &data[nb.face as usize], nb.face, level).as_slice(),
                    n as u32,
                    4,
                    nb.edge,
                );
                for k in 0..n {
                    let (x, y) = match edge {
                        PtexEdge::Bottom => (1 + k, 0),
                        PtexEdge::Right => (n + 1, 1 + k),
                        PtexEdge::Top => (n - k, n + 1),
                        PtexEdge::Left => (0, n - k),
                    };
                    let want = &theirs[(n - 1 - k) * 4..(n - k) * 4];
                    assert_eq!(at(x, y), want, "face {f} edge {edge:?} texel {k} at level {level}");
                }
            }
            // Corners at valence-3 vertices: the face's own corner texels.
            for (corner, (x, y)) in [(0, 0), (n + 1, 0), (n + 1, n + 1), (0, n + 1)].into_iter().enumerate() {
                let own = [(0, 0), (n - 1, 0), (n - 1, n - 1), (0, n - 1)][corner];
                assert_eq!(at(x, y), interior[(own.1 * n + own.0) * 4..(own.1 * n + own.0) * 4 + 4].to_vec());
            }
        }
    }

    let mut flipped = CUBE;
    flipped[3].reverse();
    assert!(matches!(quad_mesh_faces(&flipped, |_| 0), Err(PtexLayoutError::NonManifoldEdge { .. })));
    let mut degenerate = CUBE;
    degenerate[2][3] = degenerate[2][0];
    assert_eq!(quad_mesh_faces(&degenerate, |_| 0), Err(PtexLayoutError::DegenerateQuad { face: 2 }));
}

/// Every slice is a whole number of the format's sparse tiles on every captured device, so the one
/// mip of a Ptex array is tiled there, never in a mip tail. Without the tile floor the H200 puts a
/// slice of 64 or 32 texels (RGBA8 tiles are 128²) wholly in a per-layer mip tail: a pinned unit
/// that `PtexTexture` bound through four per-layer tail binds at creation (the H200's
/// `vkQueueBindSparse` answered out of memory) and that no drop released, so no restore bound.
#[test]
fn ptex_slices_are_whole_tiles_on_every_captured_device() {
    use crate::format::Format;
    use crate::profile::{captured, DeviceProfile};
    use crate::tiles::{SparseImageDesc, SparseImageLayout};
    // The meshes of the backend's tests: 4 × 3 faces of slot 32 at finest levels 0..2, 2 × 2 of
    // slot 32 with one face at level 0, 2 × 2 of slot 256.
    let grid = |w: u32, h: u32, finest_slot: u32, levels: u32, finest: &dyn Fn(u32) -> u32| {
        let n = (w * h) as usize;
        let finest: Vec<u32> = (0..n as u32).map(finest).collect();
        PtexDesc { finest_slot, levels, faces: turned_grid(w, h, &vec![0; n], &finest) }
    };
    let descs = [
        grid(4, 3, 32, 4, &|f| (f * 5) % 3),
        grid(2, 2, 32, 2, &|f| u32::from(f != 0)),
        grid(2, 2, 256, 3, &|f| u32::from(f == 3)),
    ];
    for (file, text) in captured::ALL {
        let profile = DeviceProfile::from_json(text).unwrap();
        for format in
            [Format::R8Unorm, Format::R8G8B8A8Unorm, Format::R16G16B16A16Float, Format::R32G32B32A32Float]
        {
            let limits = PtexLimits::for_device(&profile, format);
            for desc in &descs {
                let layout = PtexLayout::new(desc, limits).unwrap();
                let image = SparseImageDesc::new_2d(format, layout.side(), layout.side())
                    .with_mip_levels(1)
                    .with_array_layers(layout.levels());
                let sparse = SparseImageLayout::for_device(&image, &profile).unwrap();
                assert!(
                    sparse.mip_tail().is_none(),
                    "{file} {format:?}: side {} in a mip tail",
                    layout.side()
                );
                let shape = sparse.tile_shape();
                assert_eq!(layout.side() % shape.width, 0, "{file} {format:?}");
                assert_eq!(layout.side() % shape.height, 0, "{file} {format:?}");
                assert!(layout.side() >= limits.min_side && layout.side().is_power_of_two());
            }
        }
    }
    // What the H200 did before: a 64-texel RGBA8 slice is all mip tail, one per layer.
    let nvidia = DeviceProfile::from_json(captured::NVIDIA_H200_JSON).unwrap();
    let old = PtexLayout::new(&descs[0], PtexLimits::NONE).unwrap();
    assert_eq!(old.side(), 64);
    let image =
        SparseImageDesc::new_2d(Format::R8G8B8A8Unorm, 64, 64).with_mip_levels(1).with_array_layers(4);
    let tail = *SparseImageLayout::for_device(&image, &nvidia).unwrap().mip_tail().unwrap();
    assert_eq!((tail.first_lod, tail.count), (0, 4));
    // The floor only raises the side: a layout past it keeps its side, one under it is refused
    // where the floor passes the widest side.
    let limits = PtexLimits::for_device(&nvidia, Format::R8G8B8A8Unorm);
    assert_eq!(limits.min_side, 128);
    assert_eq!(PtexLayout::new(&descs[2], limits).unwrap().side(), 512);
    assert!(matches!(
        PtexLayout::new(&descs[0], PtexLimits { max_side: 64, ..limits }),
        Err(PtexLayoutError::SliceTooLarge { side: 128, max_side: 64 })
    ));
}
