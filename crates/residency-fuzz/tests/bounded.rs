//! Every fuzz target, bounded, in the normal test suite (CI has stable Rust and no cargo-fuzz).
//!
//! Per target: every file of `fuzz/regressions/<target>/` (each one a past finding; they must all
//! pass), every seed of `fuzz/corpus/<target>/` (plus generated seeds where a target needs real
//! files), then inputs mutated from those seeds by a seeded generator (bit flips, interesting
//! bytes, truncations, splices, insertions, random bytes): a fixed number per target
//! ([`mutations`]), never a time budget, so every machine runs the same inputs. A failing input is written to the temporary directory and named in the panic
//! message, so it can be replayed and, once fixed, kept in `fuzz/regressions/<target>/`.

use residency_core::format::Format;
use residency_core::vt_file::{Compression, VtDesc, VtWriter};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::time::Instant;

/// Mutated inputs per target: 3000, or 1000 for the two streaming targets (about a second each
/// in a debug build; the others take well under one). A count, not a time budget: what CI tests
/// does not depend on the machine's speed.
fn mutations(name: &str) -> usize {
    match name {
        "streamer_frames" | "streaming_manager" => 1000,
        _ => 3000,
    }
}

fn fuzz_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz")
}

/// The files of `dir` (not dot files), sorted by name; none when it does not exist.
fn files(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let Ok(entries) = std::fs::read_dir(dir) else { return Vec::new() };
    let mut out: Vec<(String, Vec<u8>)> = entries
        .filter_map(Result::ok)
        .filter(|e| e.file_type().is_ok_and(|t| t.is_file()))
        .filter(|e| !e.file_name().to_string_lossy().starts_with('.'))
        .map(|e| (e.path().display().to_string(), std::fs::read(e.path()).expect("readable corpus file")))
        .collect();
    out.sort();
    out
}

/// A small SplitMix64: deterministic, so a failure reproduces.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

/// One mutation of `seeds[i]`, sometimes spliced with another seed.
fn mutate(rng: &mut Rng, seeds: &[Vec<u8>]) -> Vec<u8> {
    let mut data = seeds[rng.below(seeds.len())].clone();
    for _ in 0..1 + rng.below(4) {
        match rng.below(8) {
            0 | 1 if !data.is_empty() => {
                let i = rng.below(data.len());
                data[i] ^= 1 << rng.below(8);
            }
            2 if !data.is_empty() => {
                let i = rng.below(data.len());
                data[i] = [0, 1, 0x7f, 0x80, 0xff][rng.below(5)];
            }
            3 if !data.is_empty() => data.truncate(rng.below(data.len())),
            4 => {
                let other = &seeds[rng.below(seeds.len())];
                let cut = rng.below(data.len() + 1);
                let from = rng.below(other.len() + 1);
                data.truncate(cut);
                data.extend_from_slice(&other[from..]);
            }
            5 => {
                let at = rng.below(data.len() + 1);
                let bytes: Vec<u8> = (0..1 + rng.below(16)).map(|_| rng.next() as u8).collect();
                data.splice(at..at, bytes);
            }
            6 if data.len() >= 8 => {
                // An interesting 64-bit value over 8 bytes (sizes, offsets, counts in headers).
                let i = rng.below(data.len() - 7);
                let v = [0u64, 1, u64::from(u32::MAX), u64::MAX, 1 << 32, 1 << 63][rng.below(6)];
                data[i..i + 8].copy_from_slice(&v.to_le_bytes());
            }
            _ => data = (0..rng.below(256)).map(|_| rng.next() as u8).collect(),
        }
    }
    data
}

/// Runs `target` on `data`; on a panic, saves the input and fails naming the file.
fn run_one(name: &str, target: fn(&[u8]), label: &str, data: &[u8]) {
    // An abort (a huge allocation, a stack overflow) cannot be caught: with this set, the input
    // about to run is on disk first.
    if std::env::var_os("RESIDENCY_FUZZ_SAVE_EACH").is_some() {
        let path = std::env::temp_dir().join(format!("residency-fuzz-{name}-current.bin"));
        std::fs::write(path, data).expect("writing the current input");
    }
    if catch_unwind(AssertUnwindSafe(|| target(data))).is_err() {
        let path = std::env::temp_dir().join(format!("residency-fuzz-{name}-{:016x}.bin", fnv(data)));
        std::fs::write(&path, data).expect("writing the failing input");
        panic!("fuzz target {name} failed on {label}; input saved to {}", path.display());
    }
}

fn fnv(data: &[u8]) -> u64 {
    data.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3))
}

/// A real `.rvt` file made by the core's writer: `width × height` RGBA8 in 16 × 16 tiles with a
/// 1-texel border, all mips.
fn sample_rvt(width: u32, height: u32, compression: Compression) -> Vec<u8> {
    sample_rvt_of(Format::R8G8B8A8Unorm, 1, width, height, compression)
}

/// The same in `format` with a border of `border` texels (a block-compressed format: whole blocks
/// in 16 × 16-texel tiles, the last tile and the small mips partial blocks' worth).
fn sample_rvt_of(format: Format, border: u32, width: u32, height: u32, compression: Compression) -> Vec<u8> {
    let desc = VtDesc::new(format, width, height, 16, 16).with_border(border).with_compression(compression);
    let mut writer = VtWriter::new(Vec::new(), desc).expect("valid desc");
    for mip in 0..desc.mip_count {
        let (tx, ty) = desc.tile_grid(mip);
        for y in 0..ty {
            for x in 0..tx {
                let n = desc.tile_bytes(mip, x, y).expect("tile") as usize;
                // Compressible but not constant, so LZ4 tiles are really compressed.
                let data: Vec<u8> = (0..n).map(|i| ((i / 64) as u32 + mip * 7 + x + y) as u8).collect();
                writer.write_tile(mip, x, y, &data).expect("tile written");
            }
        }
    }
    writer.finish().expect("file finished")
}

/// Seeds that are generated rather than checked in: real `.rvt` files, the full device profiles.
fn generated_seeds(name: &str) -> Vec<(String, Vec<u8>)> {
    match name {
        "rvt_reader" => vec![
            ("generated lz4 40x24".into(), sample_rvt(40, 24, Compression::Lz4)),
            ("generated raw 20x20".into(), sample_rvt(20, 20, Compression::None)),
            ("generated bc7 lz4 40x24".into(), sample_rvt_of(Format::Bc7Unorm, 4, 40, 24, Compression::Lz4)),
            ("generated bc1 raw 36x20".into(), sample_rvt_of(Format::Bc1Unorm, 0, 36, 20, Compression::None)),
        ],
        "profile_json" => residency_core::profile::captured::ALL
            .iter()
            .map(|(file, text)| (format!("residency-core {file}"), text.as_bytes().to_vec()))
            .collect(),
        _ => Vec::new(),
    }
}

fn bounded(name: &str) {
    let target = residency_fuzz::TARGETS.iter().find(|(n, _)| *n == name).expect("a target of that name").1;
    for (label, data) in files(&fuzz_dir().join("regressions").join(name)) {
        run_one(name, target, &label, &data);
    }
    let mut seeds = files(&fuzz_dir().join("corpus").join(name));
    assert!(!seeds.is_empty(), "fuzz/corpus/{name}/ has no seeds");
    seeds.extend(generated_seeds(name));
    for (label, data) in &seeds {
        run_one(name, target, label, data);
    }
    let seeds: Vec<Vec<u8>> = seeds.into_iter().map(|(_, d)| d).collect();
    let mut rng = Rng(fnv(name.as_bytes()));
    let start = Instant::now();
    let mut ran = 0;
    while ran < mutations(name) {
        let data = mutate(&mut rng, &seeds);
        run_one(name, target, &format!("mutation {ran}"), &data);
        ran += 1;
    }
    eprintln!("{name}: {} seeds, {ran} mutations in {:.2?}", seeds.len(), start.elapsed());
}

#[test]
fn every_target_has_a_fuzz_binary_and_folders() {
    for (name, _) in residency_fuzz::TARGETS {
        let source = std::fs::read_to_string(fuzz_dir().join("fuzz_targets").join(format!("{name}.rs")))
            .unwrap_or_else(|e| panic!("fuzz/fuzz_targets/{name}.rs: {e}"));
        assert!(source.contains(&format!("residency_fuzz::{name}(data)")), "{name}.rs calls its target");
        assert!(fuzz_dir().join("regressions").join(name).is_dir(), "fuzz/regressions/{name}/ exists");
    }
}

#[test]
fn allocator_bounded() {
    bounded("allocator");
}

#[test]
fn placement_bounded() {
    bounded("placement");
}

#[test]
fn tile_math_bounded() {
    bounded("tile_math");
}

#[test]
fn rvt_reader_bounded() {
    bounded("rvt_reader");
}

#[test]
fn profile_json_bounded() {
    bounded("profile_json");
}

#[test]
fn streaming_manager_bounded() {
    bounded("streaming_manager");
}

/// Replays one input: `RESIDENCY_FUZZ_REPLAY=<target>:<file> cargo test -p residency-fuzz --test
/// bounded -- --ignored replay` (with `RUST_BACKTRACE=1` for where it fails).
#[test]
#[ignore = "replays the input named by RESIDENCY_FUZZ_REPLAY"]
fn replay() {
    let spec = std::env::var("RESIDENCY_FUZZ_REPLAY").expect("RESIDENCY_FUZZ_REPLAY=<target>:<file>");
    let (name, path) = spec.split_once(':').expect("<target>:<file>");
    let target = residency_fuzz::TARGETS.iter().find(|(n, _)| *n == name).expect("a target of that name").1;
    target(&std::fs::read(path).expect("readable input"));
}

/// Writes the generated `.rvt` seeds into `fuzz/corpus/rvt_reader/` (run once by hand:
/// `cargo test -p residency-fuzz --test bounded -- --ignored write_rvt_seeds`).
#[test]
#[ignore = "writes the checked-in seed corpus"]
fn write_rvt_seeds() {
    let dir = fuzz_dir().join("corpus/rvt_reader");
    std::fs::create_dir_all(&dir).expect("corpus folder");
    std::fs::write(dir.join("lz4-40x24.rvt"), sample_rvt(40, 24, Compression::Lz4)).expect("seed");
    std::fs::write(dir.join("raw-20x20.rvt"), sample_rvt(20, 20, Compression::None)).expect("seed");
    std::fs::write(dir.join("raw-1x1.rvt"), sample_rvt(1, 1, Compression::None)).expect("seed");
    std::fs::write(
        dir.join("bc7-lz4-40x24.rvt"),
        sample_rvt_of(Format::Bc7Unorm, 4, 40, 24, Compression::Lz4),
    )
    .expect("seed");
    std::fs::write(
        dir.join("bc1-raw-36x20.rvt"),
        sample_rvt_of(Format::Bc1Unorm, 0, 36, 20, Compression::None),
    )
    .expect("seed");
}

#[test]
fn retire_queue_bounded() {
    bounded("retire_queue");
}

#[test]
fn defrag_plan_bounded() {
    bounded("defrag_plan");
}

#[test]
fn linear_allocator_bounded() {
    bounded("linear_allocator");
}

#[test]
fn streamer_frames_bounded() {
    bounded("streamer_frames");
}

#[test]
fn placement_path_bounded() {
    bounded("placement_path");
}
