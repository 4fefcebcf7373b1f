//! The tour's streaming step: a short fly-over of a virtual texture built from real textures (or,
//! where they are not installed, a synthetic one).

use super::Section;
use crate::stream::{fly, StreamArgs};
use residency::core::report::charts::{bar_chart, line_chart};
use residency::vulkan::DeviceSet;
use serde_json::json;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Extreme Tux Racer's terrain textures (Debian `extremetuxracer-data`, installed by
/// `.ci/install-deps`).
const TERRAINS: &str = "/usr/share/games/etr/terrains";
const FRAMES: u64 = 60;
/// Side of the streamed texture in texels.
const SIZE: u32 = 4096;
/// The synthetic texture's seed, when the terrain textures are absent.
const SYNTHETIC_SEED: u64 = 0;

/// The texture the step streams and what it was made from.
#[derive(Debug)]
struct Texture {
    /// The `.rvt` file.
    path: PathBuf,
    /// For the report: "A 4096² atlas of …".
    source: String,
    /// For the report, when the texture is not what the step would rather stream.
    note: Option<String>,
    /// `"terrains"` or `"synthetic"`, for `tour.json`.
    kind: &'static str,
}

/// Builds the step's `size`² texture in `dir`: an atlas of the images in `terrains`, or, when that
/// folder is missing or holds none, the synthetic texture of [`SYNTHETIC_SEED`].
fn prepare_texture(terrains: &Path, dir: &Path, size: u32) -> anyhow::Result<Texture> {
    // Missing or empty folder: the synthetic texture instead, said in the report.
    let inputs = crate::vt::collect(&[terrains.to_path_buf()]).unwrap_or_default();
    let paths = crate::vt::build_texture_set(&inputs, 1, size, dir)?;
    let path = paths.into_iter().next().ok_or_else(|| anyhow::anyhow!("one texture built"))?;
    Ok(if inputs.is_empty() {
        Texture {
            path,
            source: format!("A {size}² synthetic texture (seed {SYNTHETIC_SEED})"),
            note: Some(format!(
                "Extreme Tux Racer's terrain textures are not in {} (bash .ci/install-deps installs extremetuxracer-data), so the texture is synthetic: value noise in every octave, regions of their own hue and grid lines, with detail at every mip.",
                terrains.display()
            )),
            kind: "synthetic",
        }
    } else {
        Texture {
            path,
            source: format!("A {size}² atlas of {} terrain textures from Extreme Tux Racer", inputs.len()),
            note: None,
            kind: "terrains",
        }
    })
}

/// Step 5: build a 4096² atlas from the terrain textures (a synthetic texture without them), fly
/// over it with streaming on, and compare every frame with the fully resident render.
pub fn streaming(set: &DeviceSet) -> anyhow::Result<Section> {
    let title = "Streaming from shader feedback".to_owned();
    let device = Arc::clone(&set.devices()[0]);
    if !device.features().sparse_residency_image_2d || device.sparse_queue().is_none() {
        return Ok(Section {
            title,
            lines: vec![format!("{} has no sparse residency: nothing to stream into.", device.name())],
            ok: true,
            ..Section::default()
        });
    }
    let dir = std::env::temp_dir().join(format!("residency-tour-vt-{}", std::process::id()));
    let texture = prepare_texture(Path::new(TERRAINS), &dir, SIZE)?;
    let path = texture.path;
    let r = fly(&StreamArgs::tour(vec![path], FRAMES), &device, None)?;
    let _ = std::fs::remove_dir_all(&dir);

    let share = r.resident_bytes_peak as f64 / r.fully_resident_bytes as f64;
    let ok = share <= 0.10 && r.latency_frames_p95 <= 3 && r.converged_frames > 0 && r.psnr_db_min >= 40.0;
    let mib = |b: u64| b as f64 / f64::from(1 << 20);
    let mut lines = vec![
        format!(
            "{} ({:.1} MiB fully resident, {} tiles of 128²) streamed by the library's streamer ({} path): a plane drawn with a fragment shader that samples what is resident, falls back to coarser mips and writes feedback; the streamer loads what was missed on worker threads under a budget of a tenth of the texture.",
            texture.source,
            mib(r.fully_resident_bytes),
            r.fully_resident_bytes / 65536,
            r.path
        ),
        format!(
            "{FRAMES} frames at 256² with a camera cut half-way: peak resident {:.1} MiB ({:.1} % of fully resident), {} tiles streamed, request-to-resident latency p50/p95/p99 {}/{}/{} frames.",
            mib(r.resident_bytes_peak),
            100.0 * share,
            r.tiles_streamed,
            r.latency_frames_p50,
            r.latency_frames_p95,
            r.latency_frames_p99
        ),
        format!(
            "Against the same frames rendered from a fully resident copy: {:.1} dB mean PSNR over the {} frames that needed no fallback (minimum {:.1} dB; 99 = identical); converged {} after the cut.",
            r.psnr_db_mean,
            r.converged_frames,
            r.psnr_db_min,
            r.frames_to_converge_after_cut.map_or("never".to_owned(), |f| format!("{f} frame(s)"))
        ),
    ];
    if let Some(note) = texture.note {
        lines.insert(1, note);
    }
    let mut svgs = vec![
        line_chart(
            "stream-resident",
            "Resident tile memory per frame",
            "frame",
            "MiB",
            &[("resident MiB", r.resident_mib_per_frame.clone())],
        ),
        line_chart(
            "stream-tiles",
            "Tiles made resident per frame",
            "frame",
            "",
            &[("tiles", r.tiles_per_frame.iter().map(|&t| t as f64).collect())],
        ),
    ];
    let labels: Vec<String> = (0..r.latency_histogram_frames.len()).map(|l| format!("{l}")).collect();
    let label_refs: Vec<&str> = labels.iter().map(String::as_str).collect();
    svgs.push(bar_chart(
        "stream-latency",
        "Request-to-resident latency (frames)",
        "",
        &label_refs,
        &["tiles"],
        &[r.latency_histogram_frames.iter().map(|&c| c as f64).collect()],
    ));
    if let Some((streamed, reference)) = &r.last_frame {
        for (name, px) in [("streamed", streamed), ("fully resident", reference)] {
            svgs.push(png_svg(name, r.width, r.height, px)?);
        }
    }
    Ok(Section {
        title,
        lines,
        svgs,
        figures: json!({
            "texture": texture.kind,
            "fully_resident_bytes": r.fully_resident_bytes,
            "resident_bytes_peak": r.resident_bytes_peak,
            "tiles_streamed": r.tiles_streamed,
            "latency_frames_p95": r.latency_frames_p95,
            "converged_frames": r.converged_frames,
            "psnr_db_mean": r.psnr_db_mean,
            "psnr_db_min": r.psnr_db_min,
        }),
        ok,
        ..Section::default()
    })
}

/// An SVG showing an RGBA8 frame (a PNG inside, as a data URI) with a caption.
fn png_svg(caption: &str, width: u32, height: u32, rgba: &[u8]) -> anyhow::Result<String> {
    let mut bytes = Vec::new();
    {
        let mut encoder = png::Encoder::new(&mut bytes, width, height);
        encoder.set_color(png::ColorType::Rgba);
        encoder.set_depth(png::BitDepth::Eight);
        encoder.write_header()?.write_image_data(rgba)?;
    }
    Ok(format!(
        r#"<svg xmlns="http://www.w3.org/2000/svg" class="frame" width="{width}" height="{h}" viewBox="0 0 {width} {h}"><image width="{width}" height="{height}" href="data:image/png;base64,{}"/><text x="4" y="{t}">{caption}</text></svg>"#,
        base64(&bytes),
        h = height + 20,
        t = height + 15,
    ))
}

/// Standard base64 with padding.
fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let n = chunk.iter().enumerate().fold(0u32, |n, (i, &b)| n | u32::from(b) << (16 - 8 * i));
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(ALPHABET[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::prepare_texture;

    fn temp_dir(name: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("residency-tour-prep-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        dir
    }

    fn desc_of(path: &std::path::Path) -> residency::vulkan::streaming::VtDesc {
        *residency::core::vt_file::VtIndex::read(&mut std::fs::File::open(path).unwrap()).unwrap().desc()
    }

    #[test]
    fn without_the_terrain_folder_the_step_streams_a_synthetic_texture_and_says_so() {
        let dir = temp_dir("missing");
        let texture = prepare_texture(&dir.join("no-terrains-here"), &dir.join("out"), 512).unwrap();
        assert_eq!(texture.kind, "synthetic");
        assert!(texture.source.contains("synthetic texture (seed 0)"), "{}", texture.source);
        let note = texture.note.unwrap();
        assert!(note.contains("no-terrains-here") && note.contains("extremetuxracer-data"), "{note}");
        assert_eq!(desc_of(&texture.path).mip_extent(0), (512, 512));
        // An empty folder is no better than a missing one.
        std::fs::create_dir_all(dir.join("empty")).unwrap();
        assert_eq!(prepare_texture(&dir.join("empty"), &dir.join("out"), 512).unwrap().kind, "synthetic");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn with_terrain_images_the_step_streams_their_atlas() {
        let dir = temp_dir("present");
        let terrains = dir.join("terrains");
        std::fs::create_dir_all(&terrains).unwrap();
        for (i, name) in ["grass.png", "snow.png"].iter().enumerate() {
            let texels: Vec<u8> =
                (0..64 * 64).flat_map(|t| [(t % 256) as u8, (i * 100) as u8, 50, 255]).collect();
            let mut bytes = Vec::new();
            {
                let mut encoder = png::Encoder::new(&mut bytes, 64, 64);
                encoder.set_color(png::ColorType::Rgba);
                encoder.write_header().unwrap().write_image_data(&texels).unwrap();
            }
            std::fs::write(terrains.join(name), bytes).unwrap();
        }
        let texture = prepare_texture(&terrains, &dir.join("out"), 512).unwrap();
        assert_eq!(texture.kind, "terrains");
        assert!(texture.source.contains("atlas of 2 terrain textures"), "{}", texture.source);
        assert!(texture.note.is_none());
        let mut reader =
            residency::core::vt_file::VtReader::open(std::fs::File::open(&texture.path).unwrap()).unwrap();
        assert_eq!(reader.desc().mip_extent(0), (512, 512));
        // The first image, untouched, at the atlas origin (the plain build: subset 1/1).
        let tile = reader.read_tile(0, 0, 0).unwrap();
        assert_eq!(&tile[..4], &[0, 0, 50, 255]);
        assert_eq!(&tile[4..8], &[1, 0, 50, 255]);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn base64_matches_rfc_4648() {
        for (input, expected) in
            [("", ""), ("f", "Zg=="), ("fo", "Zm8="), ("foo", "Zm9v"), ("foobar", "Zm9vYmFy")]
        {
            assert_eq!(super::base64(input.as_bytes()), expected);
        }
    }
}
