//! `residency vt build` on real textures (Extreme Tux Racer's terrain set, from Debian's
//! `extremetuxracer-data`, installed by `.ci/install-deps`).

use residency::core::vt_file::VtReader;
use std::path::{Path, PathBuf};
use std::process::Command;

const TERRAINS: &str = "/usr/share/games/etr/terrains";

fn terrains() -> Option<Vec<PathBuf>> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(TERRAINS)
        .ok()?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "png"))
        .collect();
    files.sort();
    (files.len() >= 3).then_some(files)
}

fn decode(path: &Path) -> (u32, u32, Vec<u8>) {
    let mut decoder = png::Decoder::new(std::fs::File::open(path).unwrap());
    decoder.set_transformations(png::Transformations::EXPAND | png::Transformations::STRIP_16);
    let mut reader = decoder.read_info().unwrap();
    let mut buf = vec![0; reader.output_buffer_size()];
    let info = reader.next_frame(&mut buf).unwrap();
    let rgba = match info.color_type.samples() {
        3 => buf[..info.buffer_size()].chunks_exact(3).flat_map(|c| [c[0], c[1], c[2], 255]).collect(),
        4 => buf[..info.buffer_size()].to_vec(),
        n => panic!("{n} samples"),
    };
    (info.width, info.height, rgba)
}

#[test]
fn builds_a_tiled_virtual_texture_from_real_textures() {
    let Some(files) = terrains() else {
        assert!(
            std::env::var("RESIDENCY_REQUIRE_GPU").as_deref() != Ok("1"),
            "{TERRAINS} is missing: bash .ci/install-deps installs extremetuxracer-data"
        );
        eprintln!("\n**** SKIPPED: no {TERRAINS} ****\n");
        return;
    };
    let dir = std::env::temp_dir().join(format!("residency-vt-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let out = dir.join("terrain.rvt");
    let inputs: Vec<&PathBuf> = files.iter().take(3).collect();
    let status = Command::new(env!("CARGO_BIN_EXE_residency"))
        .args(["vt", "build", "--size", "1024", "-o"])
        .arg(&out)
        .args(&inputs)
        .output()
        .unwrap();
    assert!(status.status.success(), "{}", String::from_utf8_lossy(&status.stderr));
    let mut reader = VtReader::open(std::fs::File::open(&out).unwrap()).unwrap();
    let desc = *reader.desc();
    assert_eq!(desc.mip_extent(0), (1024, 1024));
    assert_eq!(desc.mip_extent(10), (1, 1));

    // The first (sorted) texture sits at the atlas origin: tile (0,0) of mip 0 is its corner.
    let (w, _, first) = decode(inputs[0]);
    let tile = reader.read_tile(0, 0, 0).unwrap();
    for row in 0..128usize {
        let expected = &first[row * w as usize * 4..row * w as usize * 4 + 128 * 4];
        assert_eq!(&tile[row * 128 * 4..(row + 1) * 128 * 4], expected, "row {row} of tile (0,0)");
    }
    // Mip 1 is the linear-light average of 2×2 texels of mip 0.
    let mip1 = reader.read_tile(1, 0, 0).unwrap();
    let lin = |c: u8| {
        let c = f32::from(c) / 255.0;
        if c <= 0.04045 {
            c / 12.92
        } else {
            ((c + 0.055) / 1.055).powf(2.4)
        }
    };
    for c in 0..3 {
        let avg =
            [0usize, 4, w as usize * 4, w as usize * 4 + 4].iter().map(|&o| lin(first[o + c])).sum::<f32>()
                / 4.0;
        let srgb = if avg <= 0.003_130_8 { avg * 12.92 } else { 1.055 * avg.powf(1.0 / 2.4) - 0.055 };
        assert!(
            (f32::from(mip1[c]) - srgb * 255.0).abs() <= 1.0,
            "channel {c}: {} vs {}",
            mip1[c],
            srgb * 255.0
        );
    }
    // The whole file reads back and every tile checks out.
    for mip in 0..desc.mip_count {
        let (gx, gy) = desc.tile_grid(mip);
        for y in 0..gy {
            for x in 0..gx {
                reader.read_tile(mip, x, y).unwrap();
            }
        }
    }

    let bogus = dir.join("not-an-image.png");
    std::fs::write(&bogus, b"hello").unwrap();
    let bad = Command::new(env!("CARGO_BIN_EXE_residency"))
        .args(["vt", "build", "-o"])
        .arg(dir.join("x.rvt"))
        .arg(&bogus)
        .output()
        .unwrap();
    assert!(!bad.status.success());
    let err = String::from_utf8_lossy(&bad.stderr);
    assert!(err.contains("not-an-image.png") && !err.contains("panicked"), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// An uncompressed R8G8B8A8_SRGB KTX2 file (header and level index; no DFD, which `vt build` does
/// not need) holding `rgba`.
fn ktx2(width: u32, height: u32, rgba: &[u8]) -> Vec<u8> {
    let mut f = vec![0xAB, b'K', b'T', b'X', b' ', b'2', b'0', 0xBB, b'\r', b'\n', 0x1A, b'\n'];
    for v in [43u32, 1, width, height, 0, 0, 1, 1, 0] {
        f.extend_from_slice(&v.to_le_bytes());
    }
    f.extend_from_slice(&[0u8; 32]);
    let offset = (f.len() + 24) as u64;
    for v in [offset, rgba.len() as u64, rgba.len() as u64] {
        f.extend_from_slice(&v.to_le_bytes());
    }
    f.extend_from_slice(rgba);
    f
}

#[test]
fn builds_from_a_ktx2_texture_the_same_texels_as_from_its_png() {
    let Some(files) = terrains() else {
        assert!(std::env::var("RESIDENCY_REQUIRE_GPU").as_deref() != Ok("1"), "{TERRAINS} is missing");
        return;
    };
    let dir = std::env::temp_dir().join(format!("residency-vt-ktx2-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (w, h, rgba) = decode(&files[0]);
    let input = dir.join("terrain.ktx2");
    std::fs::write(&input, ktx2(w, h, &rgba)).unwrap();
    let out = dir.join("terrain.rvt");
    let status = Command::new(env!("CARGO_BIN_EXE_residency"))
        .args(["vt", "build", "-o"])
        .arg(&out)
        .arg(&input)
        .output()
        .unwrap();
    assert!(status.status.success(), "{}", String::from_utf8_lossy(&status.stderr));
    let mut reader = VtReader::open(std::fs::File::open(&out).unwrap()).unwrap();
    assert_eq!(reader.desc().mip_extent(0), (w, h));
    let tile = reader.read_tile(0, 0, 0).unwrap();
    for row in 0..128usize.min(h as usize) {
        let expected = &rgba[row * w as usize * 4..row * w as usize * 4 + 128 * 4];
        assert_eq!(&tile[row * 128 * 4..(row + 1) * 128 * 4], expected, "row {row}");
    }
    // A supercompressed file is refused by name.
    let mut zstd = ktx2(w, h, &rgba);
    zstd[44..48].copy_from_slice(&2u32.to_le_bytes());
    std::fs::write(&input, zstd).unwrap();
    let status = Command::new(env!("CARGO_BIN_EXE_residency"))
        .args(["vt", "build", "-o"])
        .arg(&out)
        .arg(&input)
        .output()
        .unwrap();
    assert!(!status.status.success());
    assert!(String::from_utf8_lossy(&status.stderr).contains("supercompressed"));
    std::fs::remove_dir_all(&dir).unwrap();
}
