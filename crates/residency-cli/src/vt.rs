//! `residency vt build INPUT... -o FILE.rvt`: a tiled virtual texture from PNG/JPEG/KTX2 images.
//!
//! One large image is used as it is; several (files, or folders searched for `.png`/`.jpg`/`.ktx2`) are
//! packed into a square megatexture atlas with a shelf packer, cycling through the inputs until the
//! atlas is full (`--no-fill` packs each once). The full mip chain is made with a 2×2 box filter in
//! linear light (sRGB decoded, averaged, encoded), and every mip is cut into tiles written to the
//! `.rvt` file (LZ4 by default) with a progress bar, as RGBA8 or block-compressed (`--format
//! bc1|bc3|bc7`, see [`TileFormat`]; each mip is filtered from the RGBA8 mip above and encoded
//! tile by tile).
//!
//! `--subset K/N` builds the K-th of N textures that differ from one input set (see [`Subset`]);
//! `--synthetic SEED` needs no inputs at all (see [`synthetic()`]); [`build_texture_set`] writes
//! and caches several distinct textures for `residency stream --textures N`.

mod bc;
mod subset;
mod synthetic;
mod texture_set;

pub use bc::{encode, TileFormat};
pub use subset::Subset;
pub use synthetic::synthetic;
pub use texture_set::build_texture_set;

use anyhow::{bail, Context};
use indicatif::{ProgressBar, ProgressStyle};
use residency::core::vt_file::{Compression, VtWriter};
use residency::vulkan::streaming::VtDesc;
use std::borrow::Cow;
use std::io::BufWriter;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

#[derive(Debug, clap::Subcommand)]
pub enum VtCommand {
    /// Build a `.rvt` tiled virtual texture from PNG/JPEG/KTX2 images (files or folders), or a
    /// synthetic one (`--synthetic SEED`).
    Build(BuildArgs),
}

#[derive(Debug, clap::Args)]
pub struct BuildArgs {
    /// Images, or folders to search for `.png`/`.jpg`/`.ktx2` (sorted by path).
    #[arg(required_unless_present = "synthetic")]
    inputs: Vec<PathBuf>,
    /// The output file.
    #[arg(short, long)]
    output: PathBuf,
    /// Side of the atlas in texels (several inputs: default 16384; `--synthetic`: default 4096).
    /// One input keeps its size.
    #[arg(long)]
    size: Option<u32>,
    /// Build the K-th (1..=N) of N distinct textures from the inputs: with at least N inputs, every
    /// N-th one starting at the K-th (disjoint subsets); with fewer, all of them, rotated to start at
    /// the K-th. Each image is then turned (mirror/rotation number (K−1) mod 8) and tinted (tint
    /// K−1) so that no two subsets share texels; `1/1` is the plain build.
    #[arg(long, value_name = "K/N", conflicts_with = "synthetic")]
    subset: Option<Subset>,
    /// No inputs: a procedural texture made from SEED alone (layered value noise, regions of their
    /// own hue, grid lines), with detail at every mip.
    #[arg(long, value_name = "SEED", conflicts_with = "inputs")]
    synthetic: Option<u64>,
    /// Texel format of the tiles: rgba8, or block-compressed bc1 (RGB, 0.5 B a texel), bc3
    /// (RGBA, 1 B) or bc7 (RGBA, 1 B, best quality).
    #[arg(long, value_enum, default_value_t = TileFormat::Rgba8)]
    format: TileFormat,
    /// Square tiles of this side in texels (default: the format's 64 KiB sparse tile, which the
    /// hardware streaming path needs: RGBA8 128 × 128, BC3/BC7 256 × 256, BC1 512 × 256).
    #[arg(long)]
    tile: Option<u32>,
    /// Store tiles uncompressed instead of LZ4.
    #[arg(long)]
    no_compression: bool,
    /// Pack each input once instead of cycling through them until the atlas is full.
    #[arg(long)]
    no_fill: bool,
    /// No progress bar or summary line (the tour builds its texture this way).
    #[arg(skip)]
    quiet: bool,
}

impl BuildArgs {
    /// A quiet LZ4 atlas of `size`² from `subset` of `inputs`, written to `output`.
    pub fn atlas(inputs: Vec<PathBuf>, subset: Subset, output: PathBuf, size: u32) -> Self {
        Self {
            inputs,
            output,
            size: Some(size),
            format: TileFormat::Rgba8,
            tile: None,
            subset: Some(subset),
            synthetic: None,
            no_compression: false,
            no_fill: false,
            quiet: true,
        }
    }

    /// A quiet LZ4 synthetic texture of `size`² from `seed`, written to `output`.
    pub fn synthetic(seed: u64, output: PathBuf, size: u32) -> Self {
        Self {
            inputs: Vec::new(),
            output,
            size: Some(size),
            format: TileFormat::Rgba8,
            tile: None,
            subset: None,
            synthetic: Some(seed),
            no_compression: false,
            no_fill: false,
            quiet: true,
        }
    }
}

pub fn run(command: &VtCommand) -> anyhow::Result<ExitCode> {
    match command {
        VtCommand::Build(args) => build(args),
    }
}

/// An RGBA8 image.
#[derive(Clone)]
pub struct Rgba {
    /// Width in texels.
    pub width: u32,
    /// Height in texels.
    pub height: u32,
    /// Rows of RGBA texels.
    pub pixels: Vec<u8>,
}

/// The images among `inputs` and, recursively, in the folders among them, sorted by path.
pub fn collect(inputs: &[PathBuf]) -> anyhow::Result<Vec<PathBuf>> {
    let mut files = Vec::new();
    for input in inputs {
        if input.is_dir() {
            let mut stack = vec![input.clone()];
            while let Some(dir) = stack.pop() {
                for entry in std::fs::read_dir(&dir).with_context(|| format!("reading {}", dir.display()))? {
                    let path = entry?.path();
                    if path.is_dir() {
                        stack.push(path);
                    } else if is_image(&path) {
                        files.push(path);
                    }
                }
            }
        } else if input.is_file() {
            files.push(input.clone());
        } else {
            bail!("{} is neither a file nor a folder", input.display());
        }
    }
    files.sort();
    files.dedup();
    if files.is_empty() {
        bail!("no .png, .jpg or .ktx2 images found in the inputs");
    }
    Ok(files)
}

fn is_image(path: &Path) -> bool {
    matches!(
        path.extension().and_then(|e| e.to_str()).map(str::to_ascii_lowercase).as_deref(),
        Some("png" | "jpg" | "jpeg" | "ktx2")
    )
}

/// Decodes a PNG, JPEG or (uncompressed 8-bit) KTX2 file to RGBA8.
pub fn decode(path: &Path) -> anyhow::Result<Rgba> {
    let bytes = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    let name = path.display();
    if bytes.starts_with(&crate::ktx2::IDENTIFIER) {
        let level = crate::ktx2::read_level0(&bytes, &name.to_string())?;
        let pixels = to_rgba(&level.data, level.samples, &name.to_string())?;
        Ok(Rgba { width: level.width, height: level.height, pixels })
    } else if bytes.starts_with(b"\x89PNG") {
        let mut decoder = png::Decoder::new(std::io::Cursor::new(&bytes));
        decoder.set_transformations(png::Transformations::EXPAND | png::Transformations::STRIP_16);
        let mut reader = decoder.read_info().with_context(|| format!("{name}: not a PNG"))?;
        let mut buf = vec![0; reader.output_buffer_size()];
        let info = reader.next_frame(&mut buf).with_context(|| format!("{name}: broken PNG"))?;
        let pixels = to_rgba(&buf[..info.buffer_size()], info.color_type.samples(), &name.to_string())?;
        Ok(Rgba { width: info.width, height: info.height, pixels })
    } else {
        let mut decoder = jpeg_decoder::Decoder::new(std::io::Cursor::new(&bytes));
        let data = decoder.decode().with_context(|| format!("{name}: not a PNG or JPEG"))?;
        let info = decoder.info().context("JPEG without a header")?;
        let samples = match info.pixel_format {
            jpeg_decoder::PixelFormat::L8 => 1,
            jpeg_decoder::PixelFormat::RGB24 => 3,
            other => bail!("{name}: JPEG pixel format {other:?} is not supported"),
        };
        let pixels = to_rgba(&data, samples, &name.to_string())?;
        Ok(Rgba { width: u32::from(info.width), height: u32::from(info.height), pixels })
    }
}

fn to_rgba(data: &[u8], samples: usize, name: &str) -> anyhow::Result<Vec<u8>> {
    Ok(match samples {
        1 => data.iter().flat_map(|&g| [g, g, g, 255]).collect(),
        2 => data.chunks_exact(2).flat_map(|c| [c[0], c[0], c[0], c[1]]).collect(),
        3 => data.chunks_exact(3).flat_map(|c| [c[0], c[1], c[2], 255]).collect(),
        4 => data.to_vec(),
        n => bail!("{name}: {n} samples per pixel"),
    })
}

/// Packs `images` into a `size × size` atlas with a shelf packer (largest first), cycling through
/// them until no more fit when `fill`.
pub fn pack(images: &[Rgba], size: u32, fill: bool) -> Rgba {
    let mut atlas = Rgba { width: size, height: size, pixels: vec![0; size as usize * size as usize * 4] };
    let mut order: Vec<usize> = (0..images.len()).collect();
    order.sort_by_key(|&i| std::cmp::Reverse((images[i].height, images[i].width)));
    let (mut x, mut y, mut shelf) = (0u32, 0u32, 0u32);
    let mut placed_any = true;
    'rounds: while placed_any {
        placed_any = false;
        for &i in &order {
            let img = &images[i];
            if img.width > size || img.height > size {
                continue;
            }
            if x + img.width > size {
                x = 0;
                y += shelf;
                shelf = 0;
            }
            if y + img.height > size {
                break 'rounds;
            }
            for row in 0..img.height {
                let src = (row * img.width * 4) as usize;
                let dst = (((y + row) * size + x) * 4) as usize;
                atlas.pixels[dst..dst + img.width as usize * 4]
                    .copy_from_slice(&img.pixels[src..src + img.width as usize * 4]);
            }
            x += img.width;
            shelf = shelf.max(img.height);
            placed_any = true;
        }
        if !fill {
            break;
        }
    }
    atlas
}

fn srgb_to_linear_table() -> [f32; 256] {
    std::array::from_fn(|i| {
        let c = i as f32 / 255.0;
        if c <= 0.04045 {
            c / 12.92
        } else {
            ((c + 0.055) / 1.055).powf(2.4)
        }
    })
}

fn linear_to_srgb(l: f32) -> u8 {
    let c = if l <= 0.003_130_8 { l * 12.92 } else { 1.055 * l.powf(1.0 / 2.4) - 0.055 };
    (c.clamp(0.0, 1.0) * 255.0).round() as u8
}

/// The next mip: each texel the linear-light average of a 2×2 block (edges clamp for odd sides;
/// alpha averaged linearly).
pub fn downsample(img: &Rgba, table: &[f32; 256]) -> Rgba {
    let (w, h) = ((img.width / 2).max(1), (img.height / 2).max(1));
    let mut pixels = vec![0u8; (w * h * 4) as usize];
    for y in 0..h {
        for x in 0..w {
            let mut acc = [0.0f32; 4];
            for (dx, dy) in [(0, 0), (1, 0), (0, 1), (1, 1)] {
                let sx = (x * 2 + dx).min(img.width - 1);
                let sy = (y * 2 + dy).min(img.height - 1);
                let p = ((sy * img.width + sx) * 4) as usize;
                for c in 0..3 {
                    acc[c] += table[img.pixels[p + c] as usize];
                }
                acc[3] += f32::from(img.pixels[p + 3]);
            }
            let o = ((y * w + x) * 4) as usize;
            for c in 0..3 {
                pixels[o + c] = linear_to_srgb(acc[c] / 4.0);
            }
            pixels[o + 3] = (acc[3] / 4.0).round() as u8;
        }
    }
    Rgba { width: w, height: h, pixels }
}

/// `size` checked against `tile`: a power of two of at least the tile's longer side.
fn checked_size(size: u32, tile: (u32, u32)) -> anyhow::Result<u32> {
    let side = tile.0.max(tile.1);
    if !size.is_power_of_two() || size < side {
        bail!("--size must be a power of two of at least the tile size ({size} with tiles of {side})");
    }
    Ok(size)
}

pub fn build(args: &BuildArgs) -> anyhow::Result<ExitCode> {
    let tile = match args.tile {
        Some(side) if side == 0 || side > 4096 => bail!("--tile must be 1..=4096"),
        Some(side) if args.format != TileFormat::Rgba8 && side % 4 != 0 => {
            bail!("--tile must be a multiple of 4 (the 4 × 4 blocks) for --format {}", args.format.name())
        }
        Some(side) => (side, side),
        None => args.format.standard_tile(),
    };
    let (base, source) = if let Some(seed) = args.synthetic {
        let size = checked_size(args.size.unwrap_or(4096), tile)?;
        (synthetic(seed, size), format!("synthetic seed {seed}"))
    } else {
        let subset = args.subset.unwrap_or(Subset::WHOLE);
        let files = subset.select(&collect(&args.inputs)?);
        let images: Vec<Rgba> =
            files.iter().map(|f| decode(f).map(|img| subset.vary(img))).collect::<anyhow::Result<_>>()?;
        let base = if images.len() == 1 && args.size.is_none() {
            images.into_iter().next().context("one image")?
        } else {
            pack(&images, checked_size(args.size.unwrap_or(16384), tile)?, !args.no_fill)
        };
        let of = if subset == Subset::WHOLE { String::new() } else { format!(", subset {subset}") };
        (base, format!("{} image(s){of}", files.len()))
    };
    let compression = if args.no_compression { Compression::None } else { Compression::Lz4 };
    let written = write_rvt(&base, &args.output, args.format, tile, compression, !args.quiet)?;
    if args.quiet {
        return Ok(ExitCode::SUCCESS);
    }
    let desc = written.desc;
    let raw: u64 = (0..desc.mip_count)
        .map(|m| {
            let (w, h) = desc.mip_extent(m);
            u64::from(w) * u64::from(h) * 4
        })
        .sum();
    println!(
        "{}: {}×{} {} from {source}, {} mips, {} tiles of {}×{}, {} ({:.2}× smaller than raw RGBA8)",
        args.output.display(),
        desc.mip_extent(0).0,
        desc.mip_extent(0).1,
        args.format.name().to_ascii_uppercase(),
        desc.mip_count,
        desc.tile_count(),
        tile.0,
        tile.1,
        residency::core::report::format_bytes(written.bytes),
        raw as f64 / written.bytes as f64
    );
    Ok(ExitCode::SUCCESS)
}

/// What [`write_rvt`] wrote.
#[derive(Debug, Clone, Copy)]
pub struct Written {
    /// The file's description.
    pub desc: VtDesc,
    /// Its length in bytes.
    pub bytes: u64,
}

/// Removes a half-written file unless [`Partial::keep`] was called.
struct Partial<'a>(Option<&'a Path>);

impl Partial<'_> {
    fn keep(mut self) {
        self.0 = None;
    }
}

impl Drop for Partial<'_> {
    fn drop(&mut self) {
        if let Some(path) = self.0 {
            let _ = std::fs::remove_file(path);
        }
    }
}

/// The description of a `.rvt` of `format`, `width × height`, with a full mip chain (down to
/// 1 × 1) in tiles of `tile` texels.
pub fn rvt_desc(
    format: TileFormat,
    width: u32,
    height: u32,
    tile: (u32, u32),
    compression: Compression,
) -> VtDesc {
    VtDesc::new(format.format(), width, height, tile.0, tile.1)
        .with_mip_count(32 - width.max(height).leading_zeros())
        .with_compression(compression)
}

/// Writes `base` and its full mip chain (2×2 box filter in linear light, always from the RGBA8 mip
/// above) to `output` as `.rvt` tiles of `tile` texels in `format` (each tile block-compressed on
/// its own, see [`encode`]), with a progress bar when `progress`. The file is written next to `output`
/// under a `.PID.partial` name and renamed when complete, so `output` is never a half-written file
/// (not even with two processes building it at once).
pub fn write_rvt(
    base: &Rgba,
    output: &Path,
    format: TileFormat,
    tile: (u32, u32),
    compression: Compression,
    progress: bool,
) -> anyhow::Result<Written> {
    let desc = rvt_desc(format, base.width, base.height, tile, compression);
    let mips = desc.mip_count;
    desc.validate().map_err(|e| anyhow::anyhow!("{e}"))?;
    let mut partial_name = output.as_os_str().to_owned();
    partial_name.push(format!(".{}.partial", std::process::id()));
    let partial_path = PathBuf::from(partial_name);
    let file = std::fs::File::create(&partial_path)
        .with_context(|| format!("creating {}", partial_path.display()))?;
    let partial = Partial(Some(&partial_path));
    let mut writer = VtWriter::new(BufWriter::new(file), desc).map_err(|e| anyhow::anyhow!("{e}"))?;
    let bar = ProgressBar::new(desc.tile_count());
    bar.set_style(
        ProgressStyle::with_template("{msg:>10} [{bar:40}] {pos}/{len} tiles {eta}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    if !progress {
        bar.set_draw_target(indicatif::ProgressDrawTarget::hidden());
    }
    let table = srgb_to_linear_table();
    let mut level = Cow::Borrowed(base);
    for mip in 0..mips {
        bar.set_message(format!("mip {mip}"));
        let (gx, gy) = desc.tile_grid(mip);
        for ty in 0..gy {
            for tx in 0..gx {
                let (w, h) = desc.tile_extent(mip, tx, ty).context("tile inside the mip")?;
                let (x0, y0) = (tx * tile.0, ty * tile.1);
                let mut texels = Vec::with_capacity((w * h * 4) as usize);
                for row in 0..h {
                    let start = (((y0 + row) * level.width + x0) * 4) as usize;
                    texels.extend_from_slice(&level.pixels[start..start + (w * 4) as usize]);
                }
                let payload = encode(format, w, h, &texels);
                writer.write_tile(mip, tx, ty, &payload).map_err(|e| anyhow::anyhow!("{e}"))?;
                bar.inc(1);
            }
        }
        if mip + 1 < mips {
            level = Cow::Owned(downsample(&level, &table));
        }
    }
    bar.finish_and_clear();
    let file = writer.finish().map_err(|e| anyhow::anyhow!("{e}"))?;
    let file = file.into_inner().map_err(|e| anyhow::anyhow!("{e}"))?;
    let bytes = file.metadata()?.len();
    drop(file);
    std::fs::rename(&partial_path, output)
        .with_context(|| format!("renaming {} to {}", partial_path.display(), output.display()))?;
    partial.keep();
    Ok(Written { desc, bytes })
}
