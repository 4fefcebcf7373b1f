//! Several distinct `.rvt` textures from one input set, kept on disk between runs.

use super::{build, collect, rvt_desc, BuildArgs, Subset, TileFormat};
use anyhow::Context;
use residency::core::vt_file::{xxh64, Compression, VtIndex};
use std::path::{Path, PathBuf};
use std::time::UNIX_EPOCH;

/// Part of every cached file's key: change it whenever the texels a subset or seed gives change
/// (the packer, the mip filter, [`Subset::vary`], [`super::synthetic()`]), so old files are rebuilt.
const VERSION: &str = "residency texture set 1";
/// The tile side of the files.
const TILE: u32 = 128;

/// Writes `count` distinct `size × size` `.rvt` textures (RGBA8, full mip chain, 128² LZ4 tiles)
/// into `dir`, creating it, and returns their paths in order: subsets `1/count` … `count/count` of
/// the images in `inputs` (files or folders, as `vt build` takes them; see [`Subset`] for how they
/// differ), or, when `inputs` is empty, the synthetic textures of seeds `0..count`.
///
/// A file's name carries a hash of everything that decides its texels: [`VERSION`], the subset or
/// seed, the size, the tile side, and each selected input's path, length and modification time.
/// A file of that name that is already in `dir` and whose index reads back with the expected
/// description is kept, not rebuilt; files are written under a `.PID.partial` name and renamed when
/// complete, so an interrupted build leaves nothing that would be taken for a finished one.
pub fn build_texture_set(
    inputs: &[PathBuf],
    count: usize,
    size: u32,
    dir: &Path,
) -> anyhow::Result<Vec<PathBuf>> {
    if count == 0 {
        return Ok(Vec::new());
    }
    let count32 = u32::try_from(count).context("too many textures")?;
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let files = if inputs.is_empty() { Vec::new() } else { collect(inputs)? };
    let mut paths = Vec::with_capacity(count);
    for k in 0..count32 {
        let mut key = format!("{VERSION}\n{size}\n{TILE}\n");
        let (name, args) = if files.is_empty() {
            key.push_str(&format!("synthetic {k}\n"));
            let name = format!("synthetic-{k}-{size}-{:016x}.rvt", xxh64(key.as_bytes(), 0));
            (name.clone(), BuildArgs::synthetic(u64::from(k), dir.join(name), size))
        } else {
            let subset = Subset::new(k, count32).context("subset index below count")?;
            key.push_str(&format!("subset {subset}\n"));
            for file in subset.select(&files) {
                let meta = std::fs::metadata(&file).with_context(|| format!("reading {}", file.display()))?;
                let modified = meta.modified().ok().and_then(|t| t.duration_since(UNIX_EPOCH).ok());
                key.push_str(&format!(
                    "{} {} {}\n",
                    file.display(),
                    meta.len(),
                    modified.map_or(0, |d| d.as_nanos())
                ));
            }
            let name = format!("subset-{}-of-{count}-{size}-{:016x}.rvt", k + 1, xxh64(key.as_bytes(), 0));
            (name.clone(), BuildArgs::atlas(files.clone(), subset, dir.join(name), size))
        };
        let path = dir.join(name);
        let expected = rvt_desc(TileFormat::Rgba8, size, size, (TILE, TILE), Compression::Lz4);
        if !is_built(&path, &expected) {
            build(&args)?;
        }
        paths.push(path);
    }
    Ok(paths)
}

/// Whether `path` is a complete `.rvt` file of `desc`.
fn is_built(path: &Path, desc: &residency::vulkan::streaming::VtDesc) -> bool {
    std::fs::File::open(path)
        .ok()
        .and_then(|mut file| VtIndex::read(&mut file).ok())
        .is_some_and(|index| index.desc() == desc)
}

#[cfg(test)]
mod tests {
    use super::super::{synthetic, Rgba};
    use super::*;
    use residency::core::vt_file::VtReader;
    use std::time::SystemTime;

    fn temp_dir(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("residency-texture-set-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    fn write_png(path: &Path, image: &Rgba) {
        let mut bytes = Vec::new();
        {
            let mut encoder = png::Encoder::new(&mut bytes, image.width, image.height);
            encoder.set_color(png::ColorType::Rgba);
            encoder.write_header().unwrap().write_image_data(&image.pixels).unwrap();
        }
        std::fs::write(path, bytes).unwrap();
    }

    /// Three 128² images (synthetic ones, so the test needs no image data) in `dir/inputs`.
    fn inputs(dir: &Path) -> PathBuf {
        let inputs = dir.join("inputs");
        std::fs::create_dir_all(&inputs).unwrap();
        for seed in 0..3 {
            write_png(&inputs.join(format!("input-{seed}.png")), &synthetic(100 + seed, 128));
        }
        inputs
    }

    /// XXH64 of every tile's texels, in tile order.
    fn texel_hash(path: &Path) -> u64 {
        let mut reader = VtReader::open(std::fs::File::open(path).unwrap()).unwrap();
        let desc = *reader.desc();
        let mut all = Vec::new();
        for mip in 0..desc.mip_count {
            let (gx, gy) = desc.tile_grid(mip);
            for y in 0..gy {
                for x in 0..gx {
                    all.extend(reader.read_tile(mip, x, y).unwrap());
                }
            }
        }
        xxh64(&all, 0)
    }

    fn modified(paths: &[PathBuf]) -> Vec<SystemTime> {
        paths.iter().map(|p| std::fs::metadata(p).unwrap().modified().unwrap()).collect()
    }

    fn assert_distinct(hashes: &[u64]) {
        for a in 0..hashes.len() {
            for b in a + 1..hashes.len() {
                assert_ne!(hashes[a], hashes[b], "textures {a} and {b} have the same texels");
            }
        }
    }

    #[test]
    fn eight_textures_from_three_images_differ_and_are_built_once() {
        let dir = temp_dir("eight");
        let inputs = vec![inputs(&dir)];
        let out = dir.join("set");
        let paths = build_texture_set(&inputs, 8, 512, &out).unwrap();
        assert_eq!(paths.len(), 8);
        let hashes: Vec<u64> = paths.iter().map(|p| texel_hash(p)).collect();
        assert_distinct(&hashes);
        for path in &paths {
            assert_eq!(
                VtIndex::read(&mut std::fs::File::open(path).unwrap()).unwrap().desc().mip_extent(0),
                (512, 512)
            );
        }
        // Nothing half-written is left behind.
        assert_eq!(std::fs::read_dir(&out).unwrap().count(), 8);

        // Asked again with the same parameters: the same files, untouched.
        let before = modified(&paths);
        assert_eq!(build_texture_set(&inputs, 8, 512, &out).unwrap(), paths);
        assert_eq!(modified(&paths), before);

        // A file cut short is rebuilt, to the same texels.
        let file = std::fs::OpenOptions::new().write(true).open(&paths[5]).unwrap();
        file.set_len(1000).unwrap();
        drop(file);
        assert_eq!(build_texture_set(&inputs, 8, 512, &out).unwrap(), paths);
        assert_eq!(texel_hash(&paths[5]), hashes[5]);

        // Other parameters are other files; the same parameters elsewhere are the same texels.
        let smaller = build_texture_set(&inputs, 8, 256, &out).unwrap();
        assert!(smaller.iter().all(|p| !paths.contains(p)));
        let elsewhere = build_texture_set(&inputs, 2, 512, &dir.join("again")).unwrap();
        assert_ne!(elsewhere[1].file_name(), paths[1].file_name(), "subset 2/2 is not subset 2/8");
        let again = build_texture_set(&inputs, 8, 512, &dir.join("again")).unwrap();
        assert_eq!(again.iter().map(|p| texel_hash(p)).collect::<Vec<_>>(), hashes);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn without_inputs_the_set_is_synthetic_textures_of_seeds_0_up() {
        let dir = temp_dir("synthetic");
        let paths = build_texture_set(&[], 3, 256, &dir).unwrap();
        let names: Vec<String> =
            paths.iter().map(|p| p.file_name().unwrap().to_string_lossy().into_owned()).collect();
        for (seed, name) in names.iter().enumerate() {
            assert!(name.starts_with(&format!("synthetic-{seed}-256-")), "{name}");
        }
        assert_distinct(&paths.iter().map(|p| texel_hash(p)).collect::<Vec<_>>());
        assert!(build_texture_set(&[], 0, 256, &dir).unwrap().is_empty());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
