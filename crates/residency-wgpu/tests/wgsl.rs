//! The shipped WGSL parses and validates with naga on both paths, with a renderer's fragment
//! shader that samples and writes feedback, at any group and first binding.

use residency_wgpu::wgsl::{self, ShaderPath};
use wgpu::naga;

/// A renderer's fragment shader over the prelude, the way `examples/wgpu_virtual_texture.rs` uses it.
const FRAGMENT: &str = r#"
@fragment
fn fs_main(@builtin(position) pos: vec4<f32>, @location(0) uv: vec2<f32>) -> @location(0) vec4<f32> {
    let lambda = residency_lambda(uv, residency_size());
    let colour = residency_sample(uv, max(lambda, 0.0), vec4<f32>(1.0, 0.0, 1.0, 1.0));
    if (residency_feedback_pixel_writes(vec2<u32>(pos.xy), 0u, 4u, 1u)) {
        residency_feedback_write(0u, 0u, uv, lambda, residency_min_lod(uv));
    }
    return colour;
}
"#;

fn validate(source: &str) -> Result<(), String> {
    let module = naga::front::wgsl::parse_str(source).map_err(|e| e.emit_to_string(source))?;
    naga::valid::Validator::new(naga::valid::ValidationFlags::all(), naga::valid::Capabilities::empty())
        .validate(&module)
        .map_err(|e| e.emit_to_string(source))?;
    Ok(())
}

#[test]
fn the_shipped_wgsl_validates_with_naga_on_both_paths() {
    for path in [ShaderPath::Hardware, ShaderPath::Software] {
        for (group, first) in [(0, 0), (1, 3)] {
            let source = format!("{}{FRAGMENT}", wgsl::prelude(path, group, first));
            if let Err(e) = validate(&source) {
                panic!("{path:?} at group {group}, binding {first}:\n{e}");
            }
        }
    }
}

#[test]
fn the_declarations_name_every_binding_in_order() {
    let text = wgsl::declarations(2, 5);
    for (i, name) in wgsl::BINDINGS.iter().enumerate() {
        let line = text.lines().nth(i).unwrap();
        assert!(line.starts_with(&format!("@group(2) @binding({})", 5 + i)), "{line}");
        assert!(line.contains(&format!(" {name}:")), "{line}");
    }
    let entries = wgsl::layout_entries(5, wgpu::ShaderStages::FRAGMENT);
    assert_eq!(entries.map(|e| e.binding), [5, 6, 7, 8, 9]);
}
