//! The tour's report: one self-contained HTML file (inline SVG, no script, no external files).

use super::Tour;
use std::fmt::Write as _;

fn escape(text: &str) -> String {
    text.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}

/// The HTML of the report.
pub fn render(tour: &Tour) -> String {
    let mut h = String::new();
    h.push_str(
        r#"<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>residency tour</title>
<style>
body { font-family: sans-serif; margin: 2em auto; max-width: 1240px; color: #222; }
h1 { font-size: 1.6em; } h2 { font-size: 1.25em; margin-top: 2em; border-bottom: 1px solid #ccc; }
.ok { color: #2a7d2a; } .fail { color: #b00020; font-weight: bold; }
pre, .lines { font-family: monospace; white-space: pre-wrap; font-size: 0.85em; }
.figure { margin: 1em 0; overflow-x: auto; }
.figure.panel { display: inline-block; vertical-align: top; margin-right: 1em; }
details pre { max-height: 30em; overflow: auto; background: #f6f6f6; padding: 0.5em; }
</style></head><body>
<h1>residency tour</h1>
"#,
    );
    let _ = writeln!(
        h,
        "<p>Validation: {} &mdash; problems: {}. Every figure below was produced on this machine's devices.</p>",
        escape(&tour.validation),
        tour.validation_problems
    );
    for (i, s) in tour.sections.iter().enumerate() {
        let _ = writeln!(
            h,
            r#"<section id="step-{}"><h2>{}. {} <span class="{}">{}</span></h2>"#,
            i + 1,
            i + 1,
            escape(&s.title),
            if s.ok { "ok" } else { "fail" },
            if s.ok { "✓" } else { "✗ check failed" }
        );
        let _ = writeln!(
            h,
            r#"<div class="lines">{}</div>"#,
            s.lines.iter().map(|l| escape(l)).collect::<Vec<_>>().join("\n")
        );
        for svg in &s.svgs {
            // Panels (one per device) sit side by side.
            let class = if svg.contains(r#"class="panel""#) { "figure panel" } else { "figure" };
            let _ = writeln!(h, r#"<div class="{class}">{svg}</div>"#);
        }
        let _ = writeln!(h, "<p><small>{:.2} s</small></p></section>", s.seconds);
    }
    h.push_str("<h2>Device profiles</h2>\n");
    for (i, p) in tour.profiles.iter().enumerate() {
        let _ = writeln!(
            h,
            "<details><summary>device {i} profile (JSON)</summary><pre>{}</pre></details>",
            escape(p)
        );
    }
    h.push_str("</body></html>\n");
    h
}
