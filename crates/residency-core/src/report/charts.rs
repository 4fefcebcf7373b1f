//! Small self-contained SVG charts for reports: grouped bars, lines and histograms.
//!
//! Deliberately simple (no dependency, deterministic output): axes with a few ticks, a legend,
//! values as `<title>` tooltips. Every chart is one `<svg>` element with an `id` so tests (and
//! people) can find it.

use std::fmt::Write as _;

const PALETTE: [&str; 6] = ["#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#b07aa1"];
const WIDTH: f64 = 720.0;
const HEIGHT: f64 = 300.0;
const LEFT: f64 = 80.0;
const RIGHT: f64 = 20.0;
const TOP: f64 = 40.0;
const BOTTOM: f64 = 60.0;

fn escape(text: &str) -> String {
    text.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

/// A human number: 1234567 → "1.2M".
pub fn short_number(v: f64) -> String {
    let a = v.abs();
    if a >= 1e9 {
        format!("{:.1}G", v / 1e9)
    } else if a >= 1e6 {
        format!("{:.1}M", v / 1e6)
    } else if a >= 1e3 {
        format!("{:.1}k", v / 1e3)
    } else if a >= 10.0 || v == v.trunc() {
        format!("{v:.0}")
    } else {
        format!("{v:.2}")
    }
}

fn header(out: &mut String, id: &str, title: &str) {
    let _ = write!(
        out,
        r#"<svg id="{id}" class="chart" xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" viewBox="0 0 {WIDTH} {HEIGHT}" font-family="sans-serif" font-size="11"><rect width="{WIDTH}" height="{HEIGHT}" fill="white"/><text x="{LEFT}" y="20" font-size="14" font-weight="bold">{}</text>"#,
        escape(title)
    );
}

fn y_axis(out: &mut String, max: f64, unit: &str) -> impl Fn(f64) -> f64 {
    let plot_h = HEIGHT - TOP - BOTTOM;
    let max = if max > 0.0 { max } else { 1.0 };
    for i in 0..=4 {
        let v = max * f64::from(i) / 4.0;
        let y = TOP + plot_h * (1.0 - f64::from(i) / 4.0);
        let _ = write!(
            out,
            r##"<line x1="{LEFT}" x2="{}" y1="{y:.1}" y2="{y:.1}" stroke="#ddd"/><text x="{}" y="{:.1}" text-anchor="end">{}{}</text>"##,
            WIDTH - RIGHT,
            LEFT - 6.0,
            y + 4.0,
            short_number(v),
            escape(unit)
        );
    }
    move |v: f64| TOP + plot_h * (1.0 - (v / max).clamp(0.0, 1.0))
}

fn legend(out: &mut String, names: &[&str]) {
    for (i, name) in names.iter().enumerate() {
        let x = LEFT + 150.0 * i as f64;
        let y = HEIGHT - 14.0;
        let _ = write!(
            out,
            r#"<rect x="{x}" y="{}" width="10" height="10" fill="{}"/><text x="{}" y="{y}">{}</text>"#,
            y - 9.0,
            PALETTE[i % PALETTE.len()],
            x + 14.0,
            escape(name)
        );
    }
}

/// Grouped bars: one group per category, one bar per series (`values[series][category]`).
pub fn bar_chart(
    id: &str,
    title: &str,
    unit: &str,
    categories: &[&str],
    series: &[&str],
    values: &[Vec<f64>],
) -> String {
    let mut out = String::new();
    header(&mut out, id, title);
    let max = values.iter().flatten().copied().fold(0.0f64, f64::max);
    let y = y_axis(&mut out, max, unit);
    let plot_w = WIDTH - LEFT - RIGHT;
    let group_w = plot_w / categories.len().max(1) as f64;
    let bar_w = (group_w * 0.8) / series.len().max(1) as f64;
    for (c, category) in categories.iter().enumerate() {
        let gx = LEFT + group_w * c as f64 + group_w * 0.1;
        for (s, name) in series.iter().enumerate() {
            let v = values.get(s).and_then(|row| row.get(c)).copied().unwrap_or(0.0);
            let top = y(v);
            let _ = write!(
                out,
                r#"<rect class="bar" x="{:.1}" y="{top:.1}" width="{:.1}" height="{:.1}" fill="{}"><title>{} / {}: {}{}</title></rect>"#,
                gx + bar_w * s as f64,
                bar_w.max(1.0) - 1.0,
                (HEIGHT - BOTTOM - top).max(0.0),
                PALETTE[s % PALETTE.len()],
                escape(category),
                escape(name),
                short_number(v),
                escape(unit)
            );
        }
        let _ = write!(
            out,
            r#"<text x="{:.1}" y="{}" text-anchor="middle">{}</text>"#,
            gx + group_w * 0.4,
            HEIGHT - BOTTOM + 16.0,
            escape(category)
        );
    }
    legend(&mut out, series);
    out.push_str("</svg>");
    out
}

/// Lines over a shared x axis (`series[i]` = (name, y values)).
pub fn line_chart(id: &str, title: &str, x_label: &str, unit: &str, series: &[(&str, Vec<f64>)]) -> String {
    let mut out = String::new();
    header(&mut out, id, title);
    let max = series.iter().flat_map(|(_, v)| v.iter()).copied().fold(0.0f64, f64::max);
    let y = y_axis(&mut out, max, unit);
    let n = series.iter().map(|(_, v)| v.len()).max().unwrap_or(0).max(2);
    let plot_w = WIDTH - LEFT - RIGHT;
    let x = |i: usize| LEFT + plot_w * i as f64 / (n - 1) as f64;
    for (s, (_, values)) in series.iter().enumerate() {
        let points: Vec<String> =
            values.iter().enumerate().map(|(i, &v)| format!("{:.1},{:.1}", x(i), y(v))).collect();
        let _ = write!(
            out,
            r#"<polyline class="line" fill="none" stroke="{}" stroke-width="2" points="{}"/>"#,
            PALETTE[s % PALETTE.len()],
            points.join(" ")
        );
    }
    let _ = write!(
        out,
        r#"<text x="{:.1}" y="{}" text-anchor="middle">{} (0 … {})</text>"#,
        LEFT + plot_w / 2.0,
        HEIGHT - BOTTOM + 18.0,
        escape(x_label),
        n - 1
    );
    let names: Vec<&str> = series.iter().map(|(n, _)| *n).collect();
    legend(&mut out, &names);
    out.push_str("</svg>");
    out
}

/// A histogram of `values` in `bins` equal bins from 0 to the maximum.
pub fn histogram(id: &str, title: &str, x_label: &str, values: &[f64], bins: usize) -> String {
    let bins = bins.max(1);
    let max = values.iter().copied().fold(0.0f64, f64::max).max(1.0);
    let mut counts = vec![0.0; bins];
    for &v in values {
        let b = ((v / max) * bins as f64).floor() as usize;
        counts[b.min(bins - 1)] += 1.0;
    }
    let labels: Vec<String> = (0..bins).map(|b| short_number(max * (b as f64 + 0.5) / bins as f64)).collect();
    let label_refs: Vec<&str> = labels.iter().map(String::as_str).collect();
    bar_chart(id, title, "", &label_refs, &[x_label], &[counts])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn charts_are_single_svg_elements_with_their_id_and_one_bar_per_value() {
        let svg = bar_chart("c", "T <1>", "B", &["a", "b"], &["x", "y"], &[vec![1.0, 2.0], vec![3.0, 4.0]]);
        assert!(svg.starts_with(r#"<svg id="c""#) && svg.ends_with("</svg>"));
        assert_eq!(svg.matches(r#"class="bar""#).count(), 4);
        assert!(svg.contains("T &lt;1&gt;"));
        let line = line_chart("l", "L", "frame", "", &[("a", vec![1.0, 2.0, 3.0])]);
        assert_eq!(line.matches("<polyline").count(), 1);
        let h = histogram("h", "H", "latency", &[1.0, 1.0, 2.0, 9.0], 3);
        assert_eq!(h.matches(r#"class="bar""#).count(), 3);
        assert_eq!(
            bar_chart("c", "T", "", &["a"], &["x"], &[vec![1.0]]),
            bar_chart("c", "T", "", &["a"], &["x"], &[vec![1.0]])
        );
    }

    #[test]
    fn short_numbers() {
        assert_eq!(short_number(1_234_567.0), "1.2M");
        assert_eq!(short_number(2048.0), "2.0k");
        assert_eq!(short_number(12.0), "12");
        assert_eq!(short_number(0.25), "0.25");
    }
}

/// A panel of figures: a title and one `label  value` line per row (e.g. one device's statistics),
/// sized to its rows.
pub fn stat_panel(id: &str, title: &str, rows: &[(&str, String)]) -> String {
    const PANEL_W: f64 = 360.0;
    const LINE: f64 = 18.0;
    let height = 44.0 + LINE * rows.len() as f64;
    let mut out = String::new();
    let _ = write!(
        out,
        r##"<svg id="{id}" class="panel" xmlns="http://www.w3.org/2000/svg" width="{PANEL_W}" height="{height}" viewBox="0 0 {PANEL_W} {height}" font-family="sans-serif" font-size="12"><rect x="0.5" y="0.5" width="{}" height="{}" fill="white" stroke="#4e79a7" rx="6"/><text x="14" y="24" font-size="14" font-weight="bold">{}</text>"##,
        PANEL_W - 1.0,
        height - 1.0,
        escape(title)
    );
    for (i, (label, value)) in rows.iter().enumerate() {
        let y = 48.0 + LINE * i as f64;
        let _ = write!(
            out,
            r##"<text x="14" y="{y}" fill="#555">{}</text><text x="{}" y="{y}" text-anchor="end">{}</text>"##,
            escape(label),
            PANEL_W - 14.0,
            escape(value)
        );
    }
    out.push_str("</svg>");
    out
}

#[cfg(test)]
mod panel_tests {
    use super::*;

    #[test]
    fn a_stat_panel_holds_its_title_and_every_row() {
        let svg = stat_panel(
            "device-panel-1",
            "device 1 <lavapipe>",
            &[("used", "1.0 MiB".into()), ("tiles", "42".into())],
        );
        assert!(svg.starts_with(r#"<svg id="device-panel-1""#) && svg.ends_with("</svg>"));
        assert!(svg.contains("device 1 &lt;lavapipe&gt;"));
        assert!(svg.contains(">used<") && svg.contains(">1.0 MiB<") && svg.contains(">42<"));
        assert_eq!(svg.matches("<text").count(), 1 + 2 * 2);
    }
}
