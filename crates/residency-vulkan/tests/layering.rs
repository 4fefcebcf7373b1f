//! The backend's layering (issue #30), checked over its sources: `src/`'s folders are layers,
//! bottom to top in [`LAYERS`] (the one place the order is written down; docs/ARCHITECTURE.md
//! refers here), and code in one layer names only its own layer and those below it.
//!
//! Internal code names items by their folder path (`crate::device::life::Life`): a `crate::Name`
//! path through the crate root's public re-exports, or a `pub(crate) use` alias in `lib.rs`,
//! would hide which layer it reaches, and is refused. Comments and doc links are not imports and
//! are not checked.

#[path = "common/source.rs"]
mod source;
use std::collections::BTreeSet;
use std::path::Path;

/// The layers of `crates/residency-vulkan/src`, bottom to top: a top-level module (folder or
/// file) per entry, and modules sharing an entry are one layer.
const LAYERS: &[&[&str]] = &[
    &["error", "validation", "instance", "format_map", "poison"],
    &["device"],
    &["memory"],
    &["resources"],
    &["sync"],
    &["pools"],
    &["sparse"],
    &["pipelines"],
    &["streaming"],
    &["multi"],
    &["testing"],
];

fn layer_of(module: &str) -> Option<usize> {
    LAYERS.iter().position(|layer| layer.contains(&module))
}

/// Every first path segment after `crate::` in `code`, with the segments of a grouped
/// `crate::{a::b, c}` import.
fn crate_paths(code: &str) -> Vec<String> {
    let mut found = Vec::new();
    let mut rest = code;
    while let Some(at) = rest.find("crate::") {
        let before = rest[..at].chars().next_back();
        rest = &rest[at + "crate::".len()..];
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':') {
            continue; // `$crate::`, `my_crate::`, `super::crate` never occur; skip any such.
        }
        if let Some(group) = rest.strip_prefix('{') {
            let mut depth = 1usize;
            let mut item = String::new();
            let mut items = Vec::new();
            for c in group.chars() {
                match c {
                    '{' => depth += 1,
                    '}' => depth -= 1,
                    ',' if depth == 1 => items.push(std::mem::take(&mut item)),
                    _ if depth == 1 => item.push(c),
                    _ => {}
                }
                if depth == 0 {
                    items.push(std::mem::take(&mut item));
                    break;
                }
            }
            found.extend(items.iter().filter_map(|i| first_segment(i.trim())));
        } else if let Some(segment) = first_segment(rest) {
            found.push(segment);
        }
    }
    found
}

fn first_segment(path: &str) -> Option<String> {
    let segment: String = path.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
    (!segment.is_empty()).then_some(segment)
}

#[test]
fn layering_no_module_imports_from_a_layer_above_it() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let files = source::rust_files(&src);
    let mut upward = BTreeSet::new();
    let mut problems = Vec::new();
    for file in &files {
        let relative = file.strip_prefix(&src).unwrap().to_string_lossy().replace('\\', "/");
        if relative == "lib.rs" {
            continue;
        }
        let own = relative.split('/').next().unwrap().trim_end_matches(".rs").to_owned();
        let Some(own_layer) = layer_of(&own) else {
            problems.push(format!("src/{relative}: module `{own}` is in no layer of LAYERS"));
            continue;
        };
        let code = source::without_comments(&std::fs::read_to_string(file).unwrap());
        for segment in crate_paths(&code) {
            match layer_of(&segment) {
                None => problems.push(format!(
                    "src/{relative}: `crate::{segment}` names the crate root's re-export or alias, \
                     not a module: name it by its folder path"
                )),
                Some(layer) if layer > own_layer => {
                    upward.insert((relative.clone(), segment));
                }
                Some(_) => {}
            }
        }
    }
    for (file, module) in &upward {
        problems.push(format!("src/{file} imports `crate::{module}`, a layer above its own"));
    }
    assert!(problems.is_empty(), "{} layering problems:\n{}", problems.len(), problems.join("\n"));
}

#[test]
fn layering_lib_rs_is_only_the_public_face() {
    let lib = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("src/lib.rs")).unwrap();
    let code = source::without_comments(&lib);
    let aliases: Vec<&str> = code.lines().filter(|l| l.trim_start().starts_with("pub(crate) use")).collect();
    assert!(aliases.is_empty(), "lib.rs routes internal paths: {aliases:?}");
    for module in LAYERS.iter().flat_map(|layer| layer.iter()) {
        assert!(
            code.contains(&format!("mod {module};")),
            "LAYERS names `{module}`, which lib.rs does not declare"
        );
    }
}

#[test]
fn layering_the_checker_sees_grouped_and_plain_paths_and_skips_comments() {
    let code = source::without_comments(
        "use crate::{a::B, c}; // crate::d\n/* crate::e /* crate::f */ */ let x = crate::g::h();",
    );
    assert_eq!(crate_paths(&code), ["a", "c", "g"]);
}
