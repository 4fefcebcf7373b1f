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

fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("residency-vt-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn vt_build(args: &[&str], output: &Path) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_residency"))
        .args(["vt", "build"])
        .args(args)
        .arg("-o")
        .arg(output)
        .output()
        .unwrap()
}

/// Every mip's tiles, decoded, one `Vec` per mip (rows of tiles, not of texels).
fn mips(path: &Path) -> Vec<Vec<u8>> {
    let mut reader = VtReader::open(std::fs::File::open(path).unwrap()).unwrap();
    let desc = *reader.desc();
    (0..desc.mip_count)
        .map(|mip| {
            let (gx, gy) = desc.tile_grid(mip);
            (0..gy)
                .flat_map(|y| (0..gx).map(move |x| (x, y)))
                .flat_map(|(x, y)| reader.read_tile(mip, x, y).unwrap())
                .collect()
        })
        .collect()
}

fn texel_hash(path: &Path) -> u64 {
    residency::core::vt_file::xxh64(&mips(path).concat(), 0)
}

/// Three small PNGs, made here so the test needs no image data: a ramp, stripes and a checkerboard.
fn small_pngs(dir: &Path) -> Vec<PathBuf> {
    let patterns: [fn(u32, u32) -> [u8; 4]; 3] = [
        |x, y| [(x * 2) as u8, (y * 2) as u8, 128, 255],
        |x, _| if x / 8 % 2 == 0 { [230, 200, 40, 255] } else { [20, 60, 160, 255] },
        |x, y| if (x / 16 + y / 16) % 2 == 0 { [250, 250, 250, 255] } else { [90, 30, 30, 255] },
    ];
    patterns
        .iter()
        .enumerate()
        .map(|(i, pattern)| {
            let texels: Vec<u8> = (0..128 * 128).flat_map(|t| pattern(t % 128, t / 128)).collect();
            let path = dir.join(format!("input-{i}.png"));
            let mut bytes = Vec::new();
            {
                let mut encoder = png::Encoder::new(&mut bytes, 128, 128);
                encoder.set_color(png::ColorType::Rgba);
                encoder.write_header().unwrap().write_image_data(&texels).unwrap();
            }
            std::fs::write(&path, bytes).unwrap();
            path
        })
        .collect()
}

#[test]
fn subsets_of_three_images_give_eight_different_textures_the_same_each_time() {
    let dir = temp_dir("subset");
    let inputs = small_pngs(&dir);
    let inputs: Vec<&str> = inputs.iter().map(|p| p.to_str().unwrap()).collect();
    let hashes: Vec<u64> = (1..=8)
        .map(|k| {
            let out = dir.join(format!("subset-{k}.rvt"));
            let subset = format!("{k}/8");
            let status = vt_build(&[&["--size", "512", "--subset", &subset][..], &inputs].concat(), &out);
            assert!(status.status.success(), "{}", String::from_utf8_lossy(&status.stderr));
            assert!(String::from_utf8_lossy(&status.stdout).contains(&format!("subset {k}/8")));
            texel_hash(&out)
        })
        .collect();
    for a in 0..8 {
        for b in a + 1..8 {
            assert_ne!(hashes[a], hashes[b], "subsets {}/8 and {}/8 share their texels", a + 1, b + 1);
        }
    }
    // Deterministic: built again, subset 3/8 has the same texels.
    let again = dir.join("again.rvt");
    assert!(vt_build(&[&["--size", "512", "--subset", "3/8"][..], &inputs].concat(), &again)
        .status
        .success());
    assert_eq!(texel_hash(&again), hashes[2]);
    // 1/1 is the plain build.
    let plain = dir.join("plain.rvt");
    let whole = dir.join("whole.rvt");
    assert!(vt_build(&[&["--size", "512"][..], &inputs].concat(), &plain).status.success());
    assert!(vt_build(&[&["--size", "512", "--subset", "1/1"][..], &inputs].concat(), &whole)
        .status
        .success());
    assert_eq!(texel_hash(&plain), texel_hash(&whole));
    // K outside 1..=N is refused by the parser, naming the value.
    let bad = vt_build(&[&["--subset", "9/8"][..], &inputs].concat(), &dir.join("bad.rvt"));
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("9/8"), "{}", String::from_utf8_lossy(&bad.stderr));
    assert!(!dir.join("bad.rvt").exists());
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_synthetic_texture_needs_no_inputs_has_detail_at_every_mip_and_is_the_same_per_seed() {
    let dir = temp_dir("synthetic");
    let (a, b, c) = (dir.join("a.rvt"), dir.join("b.rvt"), dir.join("c.rvt"));
    for (seed, out) in [("5", &a), ("5", &b), ("6", &c)] {
        let status = vt_build(&["--synthetic", seed, "--size", "512"], out);
        assert!(status.status.success(), "{}", String::from_utf8_lossy(&status.stderr));
    }
    assert_eq!(std::fs::read(&a).unwrap(), std::fs::read(&b).unwrap(), "seed 5 twice");
    assert_ne!(texel_hash(&a), texel_hash(&c), "seeds 5 and 6");
    let levels = mips(&a);
    assert_eq!(levels.len(), 10);
    for (mip, texels) in levels.iter().enumerate().take(levels.len() - 1) {
        let luma: Vec<f64> = texels
            .chunks_exact(4)
            .map(|p| 0.2126 * f64::from(p[0]) + 0.7152 * f64::from(p[1]) + 0.0722 * f64::from(p[2]))
            .collect();
        let mean = luma.iter().sum::<f64>() / luma.len() as f64;
        let variance = luma.iter().map(|l| (l - mean).powi(2)).sum::<f64>() / luma.len() as f64;
        assert!(variance > 16.0, "mip {mip}: luma variance {variance:.1}");
    }
    // Inputs and a seed at once is a usage error.
    let both = vt_build(&["--synthetic", "1", "some.png"], &dir.join("both.rvt"));
    assert!(!both.status.success());
    assert!(String::from_utf8_lossy(&both.stderr).contains("cannot be used with"));
    std::fs::remove_dir_all(&dir).unwrap();
}

/// PSNR (dB, RGB) of the BC `blocks` of a `w × h` tile against its RGBA8 texels.
fn bc_psnr(format: residency::core::format::Format, w: u32, h: u32, blocks: &[u8], rgba: &[u8]) -> f64 {
    use residency::core::format::Format;
    let bx = w.div_ceil(4) as usize;
    let block_bytes = format.block_bytes() as usize;
    let (mut sum, mut n) = (0.0f64, 0u64);
    let mut texels = [0u8; 64];
    for (i, block) in blocks.chunks_exact(block_bytes).enumerate() {
        match format {
            Format::Bc1Unorm => bcdec_rs::bc1(block, &mut texels, 16),
            Format::Bc3Unorm => bcdec_rs::bc3(block, &mut texels, 16),
            Format::Bc7Unorm => bcdec_rs::bc7(block, &mut texels, 16),
            other => panic!("{other:?}"),
        }
        for k in 0..16usize {
            let (x, y) = ((i % bx) * 4 + k % 4, (i / bx) * 4 + k / 4);
            if x < w as usize && y < h as usize {
                for c in 0..3 {
                    let d = f64::from(texels[k * 4 + c]) - f64::from(rgba[(y * w as usize + x) * 4 + c]);
                    sum += d * d;
                    n += 1;
                }
            }
        }
    }
    10.0 * (255.0f64 * 255.0 * n as f64 / sum.max(1e-9)).log10()
}

#[test]
fn builds_block_compressed_files_in_their_64_kib_tiles_down_to_one_texel() {
    use residency::core::format::Format;
    let dir = temp_dir("bc");
    let rgba8 = dir.join("rgba8.rvt");
    let out = vt_build(&["--synthetic", "3", "--size", "512"], &rgba8);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let mut reference = VtReader::open(std::fs::File::open(&rgba8).unwrap()).unwrap();
    for (name, format, tile, floor) in [
        ("bc7", Format::Bc7Unorm, (256, 256), (32.0, 21.0)),
        ("bc3", Format::Bc3Unorm, (256, 256), (25.0, 18.0)),
        ("bc1", Format::Bc1Unorm, (512, 256), (25.0, 18.0)),
    ] {
        let path = dir.join(format!("{name}.rvt"));
        let out = vt_build(&["--synthetic", "3", "--size", "512", "--format", name], &path);
        assert!(out.status.success(), "{name}: {}", String::from_utf8_lossy(&out.stderr));
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(stdout.contains(&name.to_ascii_uppercase()), "{stdout}");
        let mut reader = VtReader::open(std::fs::File::open(&path).unwrap()).unwrap();
        let desc = *reader.desc();
        assert_eq!(desc.format, format);
        assert_eq!((desc.tile_width, desc.tile_height), tile, "{name}: the format's 64 KiB tile");
        assert_eq!(desc.max_tile_bytes(), 64 << 10);
        assert_eq!(desc.mip_count, 10);
        assert_eq!(desc.mip_extent(9), (1, 1));
        // Every tile of every mip (the 2 × 2 and 1 × 1 mips are one block each) decodes close to
        // the RGBA8 build's texels of the same tile region.
        for mip in 0..desc.mip_count {
            let (w, h) = desc.mip_extent(mip);
            let (gx, gy) = desc.tile_grid(mip);
            // The RGBA8 file's 128² tiles of this mip, assembled into rows.
            let mut texels = vec![0u8; (w * h * 4) as usize];
            let (rgx, rgy) = reference.desc().tile_grid(mip);
            for ry in 0..rgy {
                for rx in 0..rgx {
                    let (tw, th) = reference.desc().tile_extent(mip, rx, ry).unwrap();
                    let t = reference.read_tile(mip, rx, ry).unwrap();
                    for row in 0..th {
                        let d = (((ry * 128 + row) * w + rx * 128) * 4) as usize;
                        texels[d..d + (tw * 4) as usize]
                            .copy_from_slice(&t[(row * tw * 4) as usize..((row + 1) * tw * 4) as usize]);
                    }
                }
            }
            for y in 0..gy {
                for x in 0..gx {
                    let (tw, th) = desc.tile_extent(mip, x, y).unwrap();
                    let blocks = reader.read_tile(mip, x, y).unwrap();
                    assert_eq!(blocks.len() as u64, format.region_bytes(tw, th, 1));
                    let mut region = Vec::new();
                    for row in 0..th {
                        let s = (((y * tile.1 + row) * w + x * tile.0) * 4) as usize;
                        region.extend_from_slice(&texels[s..s + (tw * 4) as usize]);
                    }
                    let db = bc_psnr(format, tw, th, &blocks, &region);
                    // The coarse mips of this texture are dense noise (8 × 8: 20.6 dB in BC1,
                    // 23.6 in BC7); a broken encoding scores under 15 everywhere.
                    let floor = if mip <= 3 { floor.0 } else { floor.1 };
                    assert!(db >= floor, "{name} mip {mip} tile ({x}, {y}): {db:.1} dB");
                }
            }
        }
    }
    // A tile side that is not whole blocks is refused by name.
    let out = vt_build(
        &["--synthetic", "3", "--size", "512", "--format", "bc7", "--tile", "130"],
        &dir.join("x.rvt"),
    );
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("multiple of 4") && !err.contains("panicked"), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}
