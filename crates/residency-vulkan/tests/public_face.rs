//! The backend's public face (issue #30): every public module and item of `residency-vulkan` has
//! one public path. Checked over the sources: the module tree is read from the `mod`
//! declarations, starting at `lib.rs`; a `pub use` in a publicly reachable module may re-export
//! only from a module users cannot reach (a layer folder such as `device/`), never from a public
//! module (that would make a second path to the same item), and an item of another crate
//! (`residency_core`, `ash`) is re-exported at most once.

#[path = "common/source.rs"]
mod source;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// A module of the crate: its path from the root (`[]` for the root) and its file.
#[derive(Debug)]
struct Module {
    path: Vec<String>,
    file: PathBuf,
    public: bool,
}

/// `(public, name)` of every file module declared in `code` (`mod x;` / `pub mod x;`).
fn declared_modules(code: &str) -> Vec<(bool, String)> {
    let mut found = Vec::new();
    for line in code.lines().map(str::trim) {
        let (public, rest) = if let Some(rest) = line.strip_prefix("pub mod ") {
            (true, rest)
        } else if let Some(rest) = line.strip_prefix("mod ") {
            (false, rest)
        } else if let Some(rest) = line.strip_prefix("pub(crate) mod ") {
            (false, rest)
        } else {
            continue;
        };
        if let Some(name) = rest.strip_suffix(';') {
            found.push((public, name.trim().to_owned()));
        }
    }
    found
}

fn module_file(dir: &Path, name: &str) -> PathBuf {
    let flat = dir.join(format!("{name}.rs"));
    if flat.exists() {
        flat
    } else {
        dir.join(name).join("mod.rs")
    }
}

/// Every module of the crate, depth first from `lib.rs`.
fn modules(src: &Path) -> Vec<Module> {
    let mut out = Vec::new();
    let mut stack = vec![Module { path: Vec::new(), file: src.join("lib.rs"), public: true }];
    while let Some(module) = stack.pop() {
        let code = source::without_comments(&std::fs::read_to_string(&module.file).unwrap());
        // Children of `x.rs` live in `x/`, of `x/mod.rs` and `lib.rs` beside it.
        let dir = match module.file.file_name().and_then(|n| n.to_str()) {
            Some("lib.rs" | "mod.rs") => module.file.parent().unwrap().to_path_buf(),
            _ => module.file.with_extension(""),
        };
        for (public, name) in declared_modules(&code) {
            let mut path = module.path.clone();
            path.push(name.clone());
            stack.push(Module { path, file: module_file(&dir, &name), public: module.public && public });
        }
        out.push(module);
    }
    out
}

/// The `pub use` statements of `code`, each as (source path segments, item, alias).
fn pub_uses(code: &str) -> Vec<(Vec<String>, String, String)> {
    let mut found = Vec::new();
    let mut rest = code;
    while let Some(at) = rest.find("pub use ") {
        let before = &rest[..at];
        rest = &rest[at + "pub use ".len()..];
        if before.ends_with("(crate) ") || before.chars().next_back().is_some_and(|c| c.is_alphanumeric()) {
            continue;
        }
        let end = rest.find(';').unwrap();
        let statement: String = rest[..end].split_whitespace().collect::<Vec<_>>().join(" ");
        rest = &rest[end..];
        let (prefix, items) = match statement.find('{') {
            Some(open) => {
                let inner = statement[open + 1..statement.rfind('}').unwrap()].to_owned();
                (statement[..open].trim_end_matches("::").to_owned(), inner)
            }
            None => match statement.rfind("::") {
                Some(sep) => (statement[..sep].to_owned(), statement[sep + 2..].to_owned()),
                None => (String::new(), statement.clone()),
            },
        };
        let segments: Vec<String> = prefix.split("::").filter(|s| !s.is_empty()).map(str::to_owned).collect();
        for item in items.split(',').map(str::trim).filter(|i| !i.is_empty()) {
            let (name, alias) = match item.split_once(" as ") {
                Some((name, alias)) => (name.trim().to_owned(), alias.trim().to_owned()),
                None => (item.to_owned(), item.rsplit("::").next().unwrap().to_owned()),
            };
            // `a::b` inside braces: fold its leading segments into the source path.
            let mut source = segments.clone();
            let mut parts: Vec<&str> = name.split("::").collect();
            let last = parts.pop().unwrap().to_owned();
            source.extend(parts.iter().map(|s| s.to_string()));
            found.push((source, last, alias));
        }
    }
    found
}

/// Marks public the modules a public module re-exports (`pub use device::{requirements}` makes
/// `device::requirements` public at `requirements`), and what they declare `pub mod`, until
/// nothing changes.
fn publish_re_exported_modules(all: &mut [Module]) {
    loop {
        let known: BTreeMap<Vec<String>, bool> = all.iter().map(|m| (m.path.clone(), m.public)).collect();
        let mut newly = BTreeSet::new();
        for module in all.iter().filter(|m| m.public) {
            let code = source::without_comments(&std::fs::read_to_string(&module.file).unwrap());
            for (source, item, _) in pub_uses(&code) {
                let mut path: Vec<String> = source.iter().filter(|s| *s != "crate").cloned().collect();
                if source.first().map(String::as_str) != Some("crate") {
                    path = [module.path.clone(), path].concat();
                }
                path.push(item);
                if known.get(&path) == Some(&false) {
                    newly.insert(path);
                }
            }
        }
        // A re-exported module's own `pub mod` children are public too.
        for module in all.iter() {
            let parent = &module.path[..module.path.len().saturating_sub(1)];
            if !module.public && (newly.contains(parent) || known.get(parent) == Some(&true)) {
                let code = source::without_comments(
                    &std::fs::read_to_string(&all.iter().find(|m| m.path == parent).unwrap().file).unwrap(),
                );
                let name = module.path.last().unwrap();
                if declared_modules(&code).contains(&(true, name.clone())) && !parent.is_empty() {
                    newly.insert(module.path.clone());
                }
            }
        }
        if newly.is_empty() {
            return;
        }
        for module in all.iter_mut().filter(|m| newly.contains(&m.path)) {
            module.public = true;
        }
    }
}

#[test]
fn public_face_every_item_has_one_public_path() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut all = modules(&src);
    publish_re_exported_modules(&mut all);
    let public: BTreeMap<Vec<String>, bool> = all.iter().map(|m| (m.path.clone(), m.public)).collect();
    let mut problems = Vec::new();
    let mut external: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for module in all.iter().filter(|m| m.public) {
        let code = source::without_comments(&std::fs::read_to_string(&module.file).unwrap());
        let here = if module.path.is_empty() { "crate".to_owned() } else { module.path.join("::") };
        for (source, item, alias) in pub_uses(&code) {
            // Resolve the source module from this module.
            let mut resolved: Vec<String> = Vec::new();
            let mut segments = source.iter().peekable();
            match segments.peek().map(|s| s.as_str()) {
                Some("crate") => {
                    segments.next();
                }
                Some("self") => {
                    segments.next();
                    resolved = module.path.clone();
                }
                Some("super") => {
                    resolved = module.path.clone();
                    while segments.peek().map(|s| s.as_str()) == Some("super") {
                        segments.next();
                        resolved.pop();
                    }
                }
                Some(first)
                    if public.contains_key(&[module.path.clone(), vec![first.to_owned()]].concat()) =>
                {
                    resolved = module.path.clone();
                }
                Some(first) if !public.contains_key(&vec![first.to_owned()]) => {
                    // Another crate (`ash`, `residency_core`).
                    let full = format!("{}::{item}", source.join("::"));
                    external.entry(full).or_default().push(format!("{here}::{alias}"));
                    continue;
                }
                None => {
                    // `pub use ash;` and the like: a crate re-exported whole.
                    external.entry(item.clone()).or_default().push(format!("{here}::{alias}"));
                    continue;
                }
                _ => {}
            }
            resolved.extend(segments.cloned());
            let Some(&source_public) = public.get(&resolved) else {
                problems.push(format!(
                    "{here}: `pub use {}::{item}`: no module `{}`",
                    source.join("::"),
                    resolved.join("::")
                ));
                continue;
            };
            // (Re-exporting a module or item that is not `pub` is the compiler's error already.)
            if source_public {
                problems.push(format!(
                    "{here}::{alias} re-exports `{}::{item}`, which users already reach at that path",
                    resolved.join("::")
                ));
            }
        }
    }
    for (item, paths) in &external {
        if paths.len() > 1 {
            problems.push(format!("`{item}` is re-exported at {} paths: {paths:?}", paths.len()));
        }
    }
    assert!(problems.is_empty(), "{} public-face problems:\n{}", problems.len(), problems.join("\n"));
}

#[test]
fn public_face_the_reader_sees_the_crates_modules() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let all = modules(&src);
    let paths: BTreeSet<String> = all.iter().map(|m| m.path.join("::")).collect();
    for expected in ["device", "device::life", "sparse::software", "multi::work", "pools::transient"] {
        assert!(paths.contains(expected), "{expected} not found among {paths:?}");
    }
    for module in &all {
        assert!(module.file.exists(), "{:?}", module.file);
    }
}
