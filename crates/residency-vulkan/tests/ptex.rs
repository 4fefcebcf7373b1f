//! PRT-Ptex through the library (`sparse::ptex::PtexTexture`, `shaders/include/ptex.glsl` via
//! `ptex.comp`): GPU samples against a CPU reference of the same manual trilinear filtering on a
//! mesh whose faces are turned every way (Ptex adjacency with edge orientation), the same point
//! on both sides of every inner edge equal (seamless), a face's finest level dropped (its
//! unshared tiles released, the table naming the next level, samples falling back) and brought
//! back, and bad input refused with nothing created or changed. Validation clean, nothing leaked.

use residency_core::format::Format;
use residency_core::memory::MemoryIntent;
use residency_core::tiles::TilePoolDesc;
use residency_core::usage::BufferUsage;
use residency_vulkan::ash::vk;
use residency_vulkan::compute::{Binding, ComputeProgram};
use residency_vulkan::shaders;
use residency_vulkan::sparse::ptex::{
    bordered_slot, PtexDesc, PtexEdge, PtexEdges, PtexError, PtexFace, PtexLayout, PtexLayoutError,
    PtexNeighbour, PtexResidencyError, PtexTexture,
};
use residency_vulkan::sparse::{SparseError, SparseTilePool};
use residency_vulkan::testing::with_gpu;
use residency_vulkan::{BufferDesc, Device, ErrorClass, ResidencyError, Uploader};
use std::sync::Arc;

/// How far the GPU's filtering may be from the CPU's (8-bit filter weights and rounding).
const TOLERANCE: f32 = 3.0 / 255.0;

/// A `w × h` grid whose face f's frame is turned `rot[f]` quarter turns: its local texel (x, y)
/// is (x, y) turned inside the face's square; the adjacency follows.
fn turned_grid(w: u32, h: u32, rot: &[usize], finest: &[u32]) -> Vec<PtexFace> {
    let mut faces = Vec::new();
    for j in 0..h {
        for i in 0..w {
            let f = (j * w + i) as usize;
            let mut neighbours = [None; 4];
            for (g, (di, dj)) in [(0i64, -1i64), (1, 0), (0, 1), (-1, 0)].into_iter().enumerate() {
                let (ni, nj) = (i64::from(i) + di, i64::from(j) + dj);
                if ni < 0 || nj < 0 || ni >= i64::from(w) || nj >= i64::from(h) {
                    continue;
                }
                let nf = (nj * i64::from(w) + ni) as usize;
                let their = ((g + 2) % 4 + 4 - rot[nf]) % 4;
                neighbours[(g + 4 - rot[f]) % 4] =
                    Some(PtexNeighbour { face: nf as u32, edge: PtexEdge::from_index(their) });
            }
            faces.push(PtexFace { finest_level: finest[f], neighbours });
        }
    }
    faces
}

/// Face coordinates (u, v) of a face turned `r` times → coordinates in the face's square.
fn turn_uv(r: usize, u: f32, v: f32) -> (f32, f32) {
    match r % 4 {
        0 => (u, v),
        1 => (1.0 - v, u),
        2 => (1.0 - u, 1.0 - v),
        _ => (v, 1.0 - u),
    }
}

/// The inverse of [`turn_uv`].
fn unturn_uv(r: usize, x: f32, y: f32) -> (f32, f32) {
    turn_uv((4 - r % 4) % 4, x, y)
}

/// A smooth colour over the grid (so neighbouring texels are close and a seam would show).
fn colour(x: f32, y: f32, level: u32) -> [u8; 4] {
    [
        0.5 + 0.45 * (1.7 * x + 0.3 * y).sin(),
        0.5 + 0.45 * (1.1 * y - 0.6 * x).cos(),
        0.5 + 0.45 * (0.9 * (x - y)).sin(),
        level as f32 / 8.0,
    ]
    .map(|c| (c * 255.0).round() as u8)
}

/// Face f's texels (RGBA8) from its finest level to the last, sampled from [`colour`] through its
/// turn.
fn face_texels(layout: &PtexLayout, w: u32, rot: &[usize], f: u32) -> Vec<u8> {
    let (i, j) = ((f % w) as f32, (f / w) as f32);
    (layout.finest_level(f).unwrap()..layout.levels())
        .flat_map(|level| {
            let n = layout.interior(level);
            (0..n * n).flat_map(move |k| {
                let (u, v) = (((k % n) as f32 + 0.5) / n as f32, ((k / n) as f32 + 0.5) / n as f32);
                let (x, y) = turn_uv(rot[f as usize], u, v);
                colour(i + x, j + y, level)
            })
        })
        .collect()
}

/// The mesh, its data, the texture and what the CPU needs for the reference.
struct Mesh {
    w: u32,
    rot: Vec<usize>,
    data: Vec<Vec<u8>>,
    desc: PtexDesc,
}

impl Mesh {
    fn new(w: u32, h: u32, finest_slot: u32, levels: u32, finest: impl Fn(u32) -> u32) -> Mesh {
        let n = (w * h) as usize;
        let rot: Vec<usize> = (0..n).map(|f| (f * 7 + f / 3) % 4).collect();
        let finest: Vec<u32> = (0..n as u32).map(finest).collect();
        let desc = PtexDesc { finest_slot, levels, faces: turned_grid(w, h, &rot, &finest) };
        let layout = PtexLayout::new(&desc, residency_vulkan::sparse::ptex::PtexLimits::NONE).unwrap();
        let data = (0..n as u32).map(|f| face_texels(&layout, w, &rot, f)).collect();
        Mesh { w, rot, data, desc }
    }

    fn refs(&self) -> Vec<&[u8]> {
        self.data.iter().map(Vec::as_slice).collect()
    }

    fn level(&self, layout: &PtexLayout, f: u32, level: u32) -> &[u8] {
        let finest = layout.finest_level(f).unwrap();
        let at: usize = (finest..level).map(|l| (layout.interior(l) as usize).pow(2) * 4).sum();
        let n = layout.interior(level) as usize;
        &self.data[f as usize][at..at + n * n * 4]
    }

    /// The CPU's manual trilinear filtering of face f at (u, v) and the level wanted, for the face's
    /// finest resident level `resident`: (colour, l0, l1, blend).
    fn reference(
        &self,
        layout: &PtexLayout,
        resident: u32,
        f: u32,
        u: f32,
        v: f32,
        wanted: f32,
    ) -> ([f32; 4], u32, u32, f32) {
        let last = layout.levels() - 1;
        let level = wanted.clamp(resident as f32, last as f32);
        let l0 = level.floor() as u32;
        let l1 = (l0 + 1).min(last);
        let blend = level - l0 as f32;
        let edges = PtexEdges::new(layout, 4, &self.refs()).unwrap();
        let sample = |l: u32| {
            let slot = layout.slot_side(l) as usize;
            let texels = bordered_slot(layout, &edges, f, l, self.level(layout, f, l)).unwrap();
            let n = (slot - 2) as f32;
            let (tx, ty) = (1.0 + u * n - 0.5, 1.0 + v * n - 0.5);
            let (x0, y0) = (tx.floor().clamp(0.0, n), ty.floor().clamp(0.0, n));
            let (fx, fy) = (tx - x0, ty - y0);
            let at = |x: f32, y: f32| -> [f32; 4] {
                let k = (y as usize * slot + x as usize) * 4;
                std::array::from_fn(|c| f32::from(texels[k + c]) / 255.0)
            };
            let (a, b, c, d) = (at(x0, y0), at(x0 + 1.0, y0), at(x0, y0 + 1.0), at(x0 + 1.0, y0 + 1.0));
            std::array::from_fn::<f32, 4, _>(|k| {
                let top = a[k] + (b[k] - a[k]) * fx;
                top + (c[k] + (d[k] - c[k]) * fx - top) * fy
            })
        };
        let (a, b) = (sample(l0), sample(l1));
        (std::array::from_fn(|k| a[k] + (b[k] - a[k]) * blend), l0, l1, blend)
    }
}

/// Samples `probes` (face, u, v, level wanted) through `ptex.comp`: (colour, levels and blend, has a record).
fn sample(device: &Arc<Device>, texture: &PtexTexture, probes: &[[f32; 4]]) -> Vec<[f32; 8]> {
    let program = ComputeProgram::new(device, "ptex test", &shaders::PTEX, 1).unwrap();
    let n = probes.len() as u64;
    let mut input = device
        .create_buffer(
            &BufferDesc::new("ptex test probes", n * 16, BufferUsage::STORAGE)
                .with_intent(MemoryIntent::Upload),
        )
        .unwrap();
    let bytes: Vec<u8> = probes.iter().flatten().flat_map(|v| v.to_le_bytes()).collect();
    input.write(0, &bytes).unwrap();
    let output = device
        .create_buffer(
            &BufferDesc::new("ptex test results", n * 32, BufferUsage::STORAGE)
                .with_intent(MemoryIntent::Readback),
        )
        .unwrap();
    let set = program
        .descriptor_set(&[
            Binding::sampled(texture.image(), texture.sampler(), vk::ImageLayout::GENERAL),
            Binding::Buffer(texture.table()),
            Binding::Buffer(&input),
            Binding::Buffer(&output),
        ])
        .unwrap();
    let push = (n as u32).to_le_bytes();
    let groups = [(n as u32).div_ceil(64), 1, 1];
    program.check_dispatch(&push, groups).unwrap();
    device
        .submit_compute("ptex test samples", |rec| program.dispatch(rec, &set, &push, groups).unwrap())
        .unwrap();
    let mut out = vec![0u8; (n * 32) as usize];
    output.read(0, &mut out).unwrap();
    out.chunks_exact(32)
        .map(|r| {
            std::array::from_fn(|k| f32::from_le_bytes([r[4 * k], r[4 * k + 1], r[4 * k + 2], r[4 * k + 3]]))
        })
        .collect()
}

/// Probes of every face: corners, edges and inside, at levels from below the finest to past the last.
fn probes_of(faces: u32) -> Vec<[f32; 4]> {
    let mut probes = Vec::new();
    for f in 0..faces {
        for (u, v) in [(0.0, 0.0), (1.0, 0.3), (0.37, 0.0), (0.61, 1.0), (0.43, 0.58), (0.0, 0.9), (1.0, 1.0)]
        {
            for wanted in [-1.0, 0.0, 0.6, 1.0, 1.5, 2.25, 3.0, 9.0] {
                probes.push([f as f32, u, v, wanted]);
            }
        }
    }
    probes
}

/// The number of probes whose GPU sample matches the CPU's reference (colour, levels, blend).
fn matching(mesh: &Mesh, texture: &PtexTexture, probes: &[[f32; 4]], got: &[[f32; 8]]) -> usize {
    let layout = texture.layout();
    let mut matched = 0;
    for (p, g) in probes.iter().zip(got) {
        let f = p[0] as u32;
        let resident = texture.residency().finest_resident(f).unwrap();
        let (want, l0, l1, blend) = mesh.reference(layout, resident, f, p[1], p[2], p[3]);
        let close = g[..4].iter().zip(&want).all(|(a, b)| (a - b).abs() <= TOLERANCE);
        if close && g[4] == l0 as f32 && g[5] == l1 as f32 && (g[6] - blend).abs() < 1e-6 && g[7] == 1.0 {
            matched += 1;
        } else {
            eprintln!("probe {p:?}: got {g:?}, want {want:?} levels {l0} {l1} {blend}");
        }
    }
    matched
}

fn pool(device: &Arc<Device>) -> SparseTilePool {
    SparseTilePool::new(
        Arc::clone(device),
        TilePoolDesc::default().with_name("ptex test").with_tiles_per_heap(64),
    )
    .unwrap()
}

#[test]
fn ptex_gpu_samples_match_the_cpu_filtering_and_are_seamless_across_turned_faces() {
    with_gpu(|set| {
        let device = &set.devices()[0];
        // 4 × 3 faces turned every way, finest levels 0..3 mixed; slots 32, 16, 8, 4.
        let mesh = Mesh::new(4, 3, 32, 4, |f| (f * 5) % 3);
        let pool = pool(device);
        let uploader = Uploader::new(device, "ptex test", 1 << 20).unwrap();
        let texture =
            PtexTexture::new(&pool, &uploader, "ptex test", Format::R8G8B8A8Unorm, &mesh.desc, &mesh.refs())
                .unwrap();
        assert_eq!(texture.table_words().len(), 16 * 13);
        // Slices of at least one sparse tile: the single mip is tiled on every device (the H200
        // would put 64² RGBA8 slices wholly in per-layer mip tails).
        let shape = texture.image().layout().tile_shape();
        assert!(texture.layout().side() >= shape.width.max(shape.height));
        assert!(texture.image().layout().mip_tail().is_none());
        let probes = probes_of(texture.layout().face_count());
        let got = sample(device, &texture, &probes);
        assert_eq!(matching(&mesh, &texture, &probes, &got), probes.len());

        // Seams: one point of every inner edge sampled from both faces (turned into each face's
        // own coordinates), at levels both faces have (2 and 2.5: slots of 8 and 4 texels).
        let (w, h) = (mesh.w, 3);
        let mut pairs = Vec::new();
        for j in 0..h {
            for i in 0..w {
                let f = j * w + i;
                for (other, along) in
                    [(i + 1 < w).then(|| f + 1), (j + 1 < h).then(|| f + w)].into_iter().zip([true, false])
                {
                    let Some(g) = other else { continue };
                    for t in [0.15f32, 0.4, 0.77] {
                        for wanted in [2.0f32, 2.5] {
                            // The point in f's square, then in g's square.
                            let (fx, fy) = if along { (1.0, t) } else { (t, 1.0) };
                            let (gx, gy) = if along { (0.0, t) } else { (t, 0.0) };
                            let (fu, fv) = unturn_uv(mesh.rot[f as usize], fx, fy);
                            let (gu, gv) = unturn_uv(mesh.rot[g as usize], gx, gy);
                            pairs.push([f as f32, fu, fv, wanted]);
                            pairs.push([g as f32, gu, gv, wanted]);
                        }
                    }
                }
            }
        }
        let got = sample(device, &texture, &pairs);
        let seam = got
            .chunks_exact(2)
            .map(|p| (0..4).map(|k| (p[0][k] - p[1][k]).abs()).fold(0.0f32, f32::max))
            .fold(0.0f32, f32::max);
        assert!(pairs.len() >= 2 * 17 * 6);
        assert!(seam <= TOLERANCE, "a seam of {seam} at a face edge");
        // Without borders (clamping at the slot's own edge) the same pairs differ by much more:
        // the check above can see a seam.
        let step = (0..pairs.len() / 2)
            .map(|k| {
                let (a, b) = (pairs[2 * k], pairs[2 * k + 1]);
                let own = |p: [f32; 4]| {
                    let n = texture.layout().interior(2) as f32;
                    let (u, v) = (p[1].clamp(0.5 / n, 1.0 - 0.5 / n), p[2].clamp(0.5 / n, 1.0 - 0.5 / n));
                    mesh.reference(texture.layout(), 0, p[0] as u32, u, v, 2.0).0
                };
                (0..3).map(|c| (own(a)[c] - own(b)[c]).abs()).fold(0.0f32, f32::max)
            })
            .fold(0.0f32, f32::max);
        assert!(step > 4.0 * TOLERANCE, "the unbordered step {step} is visible");
        drop(texture);
        uploader.destroy().unwrap();
        device.wait_idle().unwrap();
        assert_eq!(pool.used_tiles(), 0, "the texture's tiles went back to its pool");
    });
}

#[test]
fn ptex_dropping_and_restoring_a_level_releases_and_commits_its_tiles() {
    with_gpu(|set| {
        let device = &set.devices()[0];
        // 2 × 2 faces, slots 256, 128, 64 in 512² slices: a level-0 slot covers four 128² tiles of its
        // own (RGBA8), level-1 slots one each, level-2 slots two to a tile.
        let mesh = Mesh::new(2, 2, 256, 3, |f| if f == 3 { 1 } else { 0 });
        let pool = pool(device);
        // A 256 KiB staging ring: a level-0 slot (256 KiB) goes up in two bands of 128 rows.
        let uploader = Uploader::new(device, "ptex test", 256 << 10).unwrap();
        let mut texture =
            PtexTexture::new(&pool, &uploader, "ptex test", Format::R8G8B8A8Unorm, &mesh.desc, &mesh.refs())
                .unwrap();
        let layout = texture.layout().clone();
        let tiles = pool.used_tiles();
        assert_eq!(tiles, 3 * 4 + 4 + 2, "exactly the tiles under slots: {:?}", texture.residency().tiles());
        let probes = probes_of(4);

        assert_eq!(texture.drop_finest_level(&pool, 0).unwrap(), 0);
        assert_eq!(pool.used_tiles(), tiles - 4);
        assert_eq!(texture.residency().finest_resident(0), Some(1));
        assert_eq!(texture.table_words()[16], 1, "face 0's record names level 1");
        let got = sample(device, &texture, &probes);
        assert_eq!(matching(&mesh, &texture, &probes, &got), probes.len());
        assert!(got[..56].iter().all(|g| g[4] >= 1.0), "face 0 samples fall back to level 1");

        // Level 1 too: its slot's tile goes; level 2's tile is shared and stays.
        assert_eq!(texture.drop_finest_level(&pool, 0).unwrap(), 1);
        assert_eq!(pool.used_tiles(), tiles - 5);
        // Refused with nothing changed: the last level, a face past the layout's, a restore of a
        // face with every level resident, wrong bytes, other edge texels.
        let words = texture.table_words();
        let refused = [
            texture.drop_finest_level(&pool, 0).unwrap_err(),
            texture.drop_finest_level(&pool, 4).unwrap_err(),
            texture.restore_finer_level(&pool, &uploader, 1, mesh.level(&layout, 1, 0)).unwrap_err(),
            texture.restore_finer_level(&pool, &uploader, 0, &[0; 12]).unwrap_err(),
            texture.restore_finer_level(&pool, &uploader, 0, &vec![7; (126 * 126 * 4) as usize]).unwrap_err(),
        ];
        assert!(matches!(
            refused[0],
            PtexError::Residency(PtexResidencyError::LastLevel { face: 0, level: 2 })
        ));
        assert!(matches!(
            refused[1],
            PtexError::Residency(PtexResidencyError::FaceOutOfRange { face: 4, .. })
        ));
        assert!(matches!(refused[2], PtexError::Residency(PtexResidencyError::AllResident { face: 1, .. })));
        assert!(matches!(refused[3], PtexError::FaceBytes { face: 0, level: 1, given: 12, .. }));
        assert!(matches!(refused[4], PtexError::EdgesDiffer { face: 0, level: 1 }));
        assert!(refused.iter().all(|e| e.class() == ErrorClass::Refused), "{refused:?}");
        assert_eq!(texture.table_words(), words);
        assert_eq!(pool.used_tiles(), tiles - 5);
        // Another pool's tiles are refused too.
        let other = self::pool(device);
        let e = texture.restore_finer_level(&other, &uploader, 0, mesh.level(&layout, 0, 1)).unwrap_err();
        assert!(matches!(e, PtexError::Sparse(SparseError::Commit(_))), "{e:?}");
        assert_eq!((texture.table_words(), pool.used_tiles(), other.used_tiles()), (words, tiles - 5, 0));

        // Back, level by level.
        assert_eq!(texture.restore_finer_level(&pool, &uploader, 0, mesh.level(&layout, 0, 1)).unwrap(), 1);
        assert_eq!(texture.restore_finer_level(&pool, &uploader, 0, mesh.level(&layout, 0, 0)).unwrap(), 0);
        assert_eq!(pool.used_tiles(), tiles);
        assert_eq!(texture.residency().finest_resident(0), Some(0));
        let got = sample(device, &texture, &probes);
        assert_eq!(matching(&mesh, &texture, &probes, &got), probes.len());
        assert!(got[..56].iter().any(|g| g[4] == 0.0), "face 0 samples level 0 again");
        drop(texture);
        uploader.destroy().unwrap();
        device.wait_idle().unwrap();
        assert_eq!(pool.used_tiles(), 0);
    });
}

#[test]
fn ptex_bad_input_is_refused_with_nothing_created() {
    with_gpu(|set| {
        let device = &set.devices()[0];
        let mesh = Mesh::new(2, 2, 32, 3, |_| 0);
        let pool = pool(device);
        let uploader = Uploader::new(device, "ptex test", 1 << 20).unwrap();
        let live = device.ledger().live_objects().len();
        let make = |format: Format, desc: &PtexDesc, faces: &[&[u8]]| {
            PtexTexture::new(&pool, &uploader, "ptex bad", format, desc, faces).unwrap_err()
        };
        let refs = mesh.refs();
        let e = make(Format::Bc7Unorm, &mesh.desc, &refs);
        assert!(matches!(e, PtexError::Format { .. }) && e.class() == ErrorClass::Unsupported, "{e:?}");
        let e = make(Format::R8G8B8A8Unorm, &mesh.desc, &refs[..3]);
        assert!(matches!(e, PtexError::FaceCount { given: 3, expected: 4 }), "{e:?}");
        let short = [refs[0], refs[1], &refs[2][4..], refs[3]];
        let e = make(Format::R8G8B8A8Unorm, &mesh.desc, &short);
        assert!(matches!(e, PtexError::FaceBytes { face: 2, level: 0, .. }), "{e:?}");
        let mut desc = mesh.desc.clone();
        desc.faces[0].neighbours[0] = Some(PtexNeighbour { face: 17, edge: PtexEdge::Top });
        let e = make(Format::R8G8B8A8Unorm, &desc, &refs);
        assert!(matches!(
            e,
            PtexError::Layout(PtexLayoutError::NeighbourOutOfRange { face: 0, neighbour: 17, .. })
        ));
        let mut desc = mesh.desc.clone();
        desc.faces[1].neighbours = [None; 4];
        let e = make(Format::R8G8B8A8Unorm, &desc, &refs);
        assert!(matches!(e, PtexError::Layout(PtexLayoutError::AsymmetricAdjacency { .. })), "{e:?}");
        let mut desc = mesh.desc.clone();
        desc.faces[3].finest_level = 3;
        let e = make(Format::R8G8B8A8Unorm, &desc, &refs);
        assert!(matches!(e, PtexError::Layout(PtexLayoutError::FinestLevel { face: 3, .. })), "{e:?}");
        // Past the device's 2D images: five faces at a slot of the device's widest image need
        // slices of twice that.
        let widest = device.limits().max_image_dimension2_d;
        let wide = PtexDesc { finest_slot: widest, levels: 1, faces: vec![PtexFace::new(0); 5] };
        let e = make(Format::R8G8B8A8Unorm, &wide, &[]);
        assert!(matches!(e, PtexError::Layout(PtexLayoutError::SliceTooLarge { .. })), "{e:?}");
        assert_eq!(e.class(), ErrorClass::Unsupported);
        assert!(matches!(
            make(Format::R8G8B8A8Unorm, &PtexDesc { faces: Vec::new(), ..mesh.desc.clone() }, &[]),
            PtexError::Layout(PtexLayoutError::NoFaces)
        ));
        assert_eq!(device.ledger().live_objects().len(), live, "nothing was created");
        assert_eq!(pool.used_tiles(), 0);
        uploader.destroy().unwrap();
    });
}

/// A failure at any Vulkan call `PtexTexture::new` or a restore makes (memory, objects, binds;
/// injected) is a typed error, leaves nothing behind (no tile, no object) and, for a
/// restore, changes nothing.
#[test]
fn ptex_failures_at_every_call_leave_nothing_behind() {
    use residency_vulkan::{FaultSite, InjectedFault};
    with_gpu(|set| {
        let device = &set.devices()[0];
        // Face 0 alone at level 0: its level-0 slot has a tile of its own.
        let mesh = Mesh::new(2, 2, 32, 2, |f| u32::from(f != 0));
        let pool = pool(device);
        let ledger = device.ledger();
        // Not `QueueSubmit`: after an injected submission failure the retire queue may hold an
        // image's garbage until a later submission (seen with a plain `SparseImage` and
        // `Uploader` too), so "nothing left after `wait_idle`" is not deterministic there.
        let sites = [FaultSite::AllocateMemory, FaultSite::CreateResource, FaultSite::BindSparse];
        let mut failures = 0;
        for site in sites {
            // Count the calls one creation makes at this site, then fail each in turn.
            let uploader = Uploader::new(device, "ptex faults", 1 << 20).unwrap();
            let before = ledger.site_calls(site);
            let texture = PtexTexture::new(
                &pool,
                &uploader,
                "ptex faults",
                Format::R8G8B8A8Unorm,
                &mesh.desc,
                &mesh.refs(),
            )
            .unwrap();
            let calls = ledger.site_calls(site) - before;
            drop(texture);
            uploader.destroy().unwrap();
            device.wait_idle().unwrap();
            let live = ledger.live_objects().len();
            for skip in 0..calls {
                let uploader = Uploader::new(device, "ptex faults", 1 << 20).unwrap();
                ledger.inject_fault(site, skip, InjectedFault::OutOfDeviceMemory);
                let made = PtexTexture::new(
                    &pool,
                    &uploader,
                    "ptex faults",
                    Format::R8G8B8A8Unorm,
                    &mesh.desc,
                    &mesh.refs(),
                );
                ledger.clear_faults();
                if let Err(e) = &made {
                    failures += 1;
                    assert!(e.is_out_of_memory(), "{site:?} call {skip}: {e:?}");
                }
                drop(made);
                uploader.destroy().unwrap();
                device.wait_idle().unwrap();
                assert_eq!(pool.used_tiles(), 0, "{site:?} call {skip}: tiles left");
                assert_eq!(ledger.live_objects().len(), live, "{site:?} call {skip}: objects left");
            }
        }
        assert!(failures >= 3, "faults reached creation {failures} times");

        // A restore failing at its binds changes nothing.
        let uploader = Uploader::new(device, "ptex faults", 1 << 20).unwrap();
        let mut texture = PtexTexture::new(
            &pool,
            &uploader,
            "ptex faults",
            Format::R8G8B8A8Unorm,
            &mesh.desc,
            &mesh.refs(),
        )
        .unwrap();
        let layout = texture.layout().clone();
        texture.drop_finest_level(&pool, 0).unwrap();
        let (words, tiles) = (texture.table_words(), pool.used_tiles());
        // Whether the restore binds follows from the layout, not the device: slices are whole
        // tiles (no mip tail on any device), and face 0's level-0 slot has a tile of its own, which
        // the drop released and the restore binds.
        assert!(texture.image().layout().mip_tail().is_none(), "the slices are tiled, not a mip tail");
        let (_, added) = texture.residency().plan_restore(&layout, 0).unwrap();
        assert_eq!(added.len(), 1, "the restore commits (and binds) face 0's own tile");
        ledger.inject_fault(FaultSite::BindSparse, 0, InjectedFault::OutOfDeviceMemory);
        let e = texture.restore_finer_level(&pool, &uploader, 0, mesh.level(&layout, 0, 0)).unwrap_err();
        ledger.clear_faults();
        assert!(e.is_out_of_memory(), "{e:?}");
        assert_eq!((texture.table_words(), texture.residency().finest_resident(0)), (words, Some(1)));
        device.wait_idle().unwrap();
        assert_eq!(pool.used_tiles(), tiles);
        // And it comes back once the binds go through.
        assert_eq!(texture.restore_finer_level(&pool, &uploader, 0, mesh.level(&layout, 0, 0)).unwrap(), 0);
        assert_eq!(pool.used_tiles(), tiles + added.len() as u64);
        drop(texture);
        let _ = uploader.destroy();
        device.wait_idle().unwrap();
        assert_eq!(pool.used_tiles(), 0);
    });
}

/// A diagnostic for the lead's device runs, not part of the suite: the sparse arrays `PtexTexture`
/// made before its slices had a tile floor (64² and 32² RGBA8, one mip), as the driver lays them
/// out (their mip tail: first LOD, size, offset, stride, tails) and whether binding every layer's
/// tail goes through. Run with `--ignored --nocapture`; it asserts only that nothing is left.
#[test]
#[ignore = "a diagnostic of the driver's mip tails for slices under a tile; run by hand"]
fn ptex_diagnostic_sub_tile_slices_and_their_mip_tails() {
    use residency_core::tiles::SparseImageDesc;
    use residency_vulkan::sparse::SparseImage;
    with_gpu(|set| {
        let device = &set.devices()[0];
        let pool = pool(device);
        for (side, layers) in [(64, 4), (32, 2), (128, 4)] {
            let desc = SparseImageDesc::new_2d(Format::R8G8B8A8Unorm, side, side)
                .with_mip_levels(1)
                .with_array_layers(layers);
            let mut image = SparseImage::new(&pool, "ptex diagnostic", &desc, false).unwrap();
            let tail = image.layout().mip_tail().copied();
            eprintln!("{} {side}² × {layers}: mip tail {tail:?}", device.name());
            let Some(tail) = tail else { continue };
            let committed = (0..tail.count).try_for_each(|t| image.commit_tail(&pool, t));
            let flushed = committed.and_then(|()| pool.flush_binds(&mut [&mut image]));
            eprintln!("  binding its {} tails: {flushed:?}", tail.count);
            device.wait_idle().unwrap();
            let _ = image.release_all(&pool);
            let _ = pool.flush_binds(&mut [&mut image]);
            drop(image);
            device.wait_idle().unwrap();
        }
        assert_eq!(pool.used_tiles(), 0);
    });
}
