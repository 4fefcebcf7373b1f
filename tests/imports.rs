//! Examples and the CLI take the backend's types from the backend (issue #30): `residency-vulkan`
//! re-exports every `residency-core` type its public signatures take, once (its crate docs, "The
//! core's types"), so a program that drives the backend names them through `residency::vulkan`.
//! What the backend does not re-export (the placement engine run from a profile, `.rvt` writing,
//! report rendering, tile-math functions) is core-only and still comes from `residency::core`.
//!
//! Checked over the sources. The re-exported set is read from the backend's
//! `pub use residency_core::…` statements (every file of `crates/residency-vulkan/src`), keyed by
//! the core's top-level module and the item's name (the core reaches an item through its module
//! and through its file's submodule, `tiles::TileCoord` and `tiles::layout::TileCoord`). Every
//! `residency::core::…` / `residency_core::…` path in `examples/*.rs` and
//! `crates/residency-cli/src/**/*.rs` (in `use` trees and inline) is then refused when it names a
//! re-exported item, globs a module that holds one, or imports such a module itself (the check
//! does not follow module aliases).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// `text` without `//` comments (line and doc comments; the sources checked have no `//` inside
/// string literals on import lines).
fn code_of(text: &str) -> String {
    text.lines().map(|line| line.find("//").map_or(line, |at| &line[..at])).collect::<Vec<_>>().join("\n")
}

/// Every `.rs` file under `dir`, sorted.
fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push(path);
            }
        }
    }
    out.sort();
    out
}

#[derive(Clone, Debug, PartialEq)]
enum Token {
    Ident(String),
    Sep,
    Open,
    Close,
    Comma,
    Star,
    Other,
}

/// The tokens of a path (or `use` tree) starting at the beginning of `text`, up to the first
/// token that cannot continue one.
fn path_tokens(text: &str) -> Vec<Token> {
    let mut out = Vec::new();
    let mut depth = 0usize;
    let mut chars = text.chars().peekable();
    while let Some(&c) = chars.peek() {
        let token = if c.is_alphanumeric() || c == '_' {
            let mut ident = String::new();
            while let Some(&c) = chars.peek().filter(|c| c.is_alphanumeric() || **c == '_') {
                ident.push(c);
                chars.next();
            }
            out.push(Token::Ident(ident));
            continue;
        } else if c.is_whitespace() {
            chars.next();
            continue;
        } else if c == ':' {
            chars.next();
            if chars.next_if_eq(&':').is_none() {
                break;
            }
            Token::Sep
        } else if c == '{' {
            depth += 1;
            chars.next();
            Token::Open
        } else if c == '}' && depth > 0 {
            depth -= 1;
            chars.next();
            Token::Close
        } else if c == ',' && depth > 0 {
            chars.next();
            Token::Comma
        } else if c == '*' {
            chars.next();
            Token::Star
        } else {
            Token::Other
        };
        if token == Token::Other {
            break;
        }
        out.push(token);
        if depth == 0 && matches!(out.last(), Some(Token::Close | Token::Star)) {
            break;
        }
    }
    out
}

/// The leaf paths of the use tree (or plain path) in `tokens`, each prefixed by `prefix`; a glob
/// ends in `*`. `as` aliases are skipped.
fn leaves(tokens: &[Token], at: &mut usize, prefix: Vec<String>, out: &mut Vec<Vec<String>>) {
    let mut path = prefix;
    loop {
        match tokens.get(*at) {
            Some(Token::Ident(name)) if name == "as" => {
                // `x as y`: the alias is not part of the path.
                *at += 2;
                out.push(path);
                return;
            }
            Some(Token::Ident(name)) => {
                if name != "self" {
                    path.push(name.clone());
                }
                *at += 1;
                if tokens.get(*at) != Some(&Token::Sep) {
                    if matches!(tokens.get(*at), Some(Token::Ident(next)) if next == "as") {
                        continue;
                    }
                    out.push(path);
                    return;
                }
                *at += 1;
            }
            Some(Token::Star) => {
                *at += 1;
                path.push("*".to_owned());
                out.push(path);
                return;
            }
            Some(Token::Open) => {
                *at += 1;
                loop {
                    match tokens.get(*at) {
                        Some(Token::Close) => {
                            *at += 1;
                            return;
                        }
                        Some(Token::Comma) => *at += 1,
                        None => return,
                        Some(_) => leaves(tokens, at, path.clone(), out),
                    }
                }
            }
            _ => {
                out.push(path);
                return;
            }
        }
    }
}

/// Every path into the core named in `code`: the segments after `residency::core::` or
/// `residency_core::` (empty when the core itself is imported).
fn core_paths(code: &str) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    for prefix in ["residency::core", "residency_core"] {
        let mut rest = code;
        while let Some(at) = rest.find(prefix) {
            let before = rest[..at].chars().next_back();
            rest = &rest[at + prefix.len()..];
            if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':') {
                continue;
            }
            if rest.starts_with(|c: char| c.is_alphanumeric() || c == '_') {
                continue;
            }
            let tokens = path_tokens(rest);
            if tokens.first() == Some(&Token::Sep) {
                leaves(&tokens, &mut 1, Vec::new(), &mut out);
            } else {
                out.push(Vec::new());
            }
        }
    }
    out
}

/// The backend's re-exports of core items: `(core module, item)` → the files that re-export it.
fn re_exported(backend_src: &Path) -> BTreeMap<(String, String), Vec<String>> {
    let mut found: BTreeMap<(String, String), Vec<String>> = BTreeMap::new();
    for file in rust_files(backend_src) {
        let code = code_of(&std::fs::read_to_string(&file).unwrap());
        let shown = file.strip_prefix(backend_src).unwrap().display().to_string();
        let mut rest = code.as_str();
        while let Some(at) = rest.find("pub use residency_core::") {
            let before = rest[..at].chars().next_back();
            rest = &rest[at + "pub use residency_core".len()..];
            if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ')') {
                continue;
            }
            let tokens = path_tokens(rest);
            let (mut at, mut paths) = (1, Vec::new());
            leaves(&tokens, &mut at, Vec::new(), &mut paths);
            for path in paths {
                assert!(path.len() >= 2, "{shown}: re-exports a whole core module: {path:?}");
                let key = (path[0].clone(), path.last().unwrap().clone());
                found.entry(key).or_default().push(shown.clone());
            }
        }
    }
    found
}

/// Why `path` (segments after the core's name) names something the backend re-exports, if it does.
fn refusal(path: &[String], items: &BTreeSet<(String, String)>) -> Option<String> {
    let Some(module) = path.first() else {
        return Some("imports the core crate itself, whose re-exported types the check cannot follow".into());
    };
    let holds = |module: &str| items.iter().any(|(m, _)| m == module);
    if path.len() == 1 && holds(module) {
        return Some(format!("imports the core module `{module}`, which holds re-exported types"));
    }
    if path.last().is_some_and(|s| s == "*") && holds(module) {
        return Some(format!("globs `{}`, which holds re-exported types", path.join("::")));
    }
    path[1..]
        .iter()
        .find(|segment| items.contains(&(module.clone(), (*segment).clone())))
        .map(|item| format!("names `{module}::{item}`, which residency-vulkan re-exports"))
}

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

#[test]
fn imports_examples_and_cli_take_the_backends_types_from_the_backend() {
    let items: BTreeSet<_> = re_exported(&root().join("crates/residency-vulkan/src")).into_keys().collect();
    assert!(items.len() > 50, "the backend's re-exports were not found: {items:?}");
    let mut files: Vec<PathBuf> = std::fs::read_dir(root().join("examples"))
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|e| e == "rs"))
        .collect();
    files.sort();
    assert!(files.len() >= 10, "{files:?}");
    files.extend(rust_files(&root().join("crates/residency-cli/src")));
    let mut problems = Vec::new();
    for file in &files {
        let code = code_of(&std::fs::read_to_string(file).unwrap());
        for path in core_paths(&code) {
            if let Some(why) = refusal(&path, &items) {
                let shown = file.strip_prefix(root()).unwrap().display();
                problems.push(format!("{shown}: `core::{}` {why}", path.join("::")));
            }
        }
    }
    assert!(
        problems.is_empty(),
        "{} core paths to types the backend re-exports (take them from residency::vulkan):\n{}",
        problems.len(),
        problems.join("\n")
    );
}

/// The backend re-exports each core item once, wherever it is (the public-face test reads only the
/// modules declared `pub mod`; `tracking`, `transient`, `requirements` and `profile_capture` are
/// files of private folders that the root re-exports).
#[test]
fn imports_each_core_item_is_re_exported_once() {
    let found = re_exported(&root().join("crates/residency-vulkan/src"));
    let twice: Vec<String> = found
        .iter()
        .filter(|(_, files)| files.len() > 1)
        .map(|((module, item), files)| format!("{module}::{item} in {files:?}"))
        .collect();
    assert!(twice.is_empty(), "core items re-exported more than once:\n{}", twice.join("\n"));
}

#[test]
fn imports_the_checker_sees_groups_aliases_globs_and_inline_paths() {
    let code = code_of(
        "use residency::core::tiles::{layout::TileCoord, standard_tile_shape as shape};\n\
         use residency::core::sync::{self, measure::SplitMix64};\n\
         use residency_core::streaming::*;\n\
         // use residency::core::format::Format;\n\
         let x = residency::core::vt_file::VtIndex::read(&mut f);\n\
         use residency::core;\n",
    );
    let paths: Vec<String> = core_paths(&code).iter().map(|p| p.join("::")).collect();
    assert_eq!(
        paths,
        [
            "tiles::layout::TileCoord",
            "tiles::standard_tile_shape",
            "sync",
            "sync::measure::SplitMix64",
            "vt_file::VtIndex::read",
            "",
            "streaming::*",
        ]
    );
    let items: BTreeSet<(String, String)> =
        [("tiles", "TileCoord"), ("sync", "Use"), ("streaming", "TileSource"), ("vt_file", "VtDesc")]
            .into_iter()
            .map(|(m, i)| (m.to_owned(), i.to_owned()))
            .collect();
    let refused: Vec<bool> = core_paths(&code).iter().map(|p| refusal(p, &items).is_some()).collect();
    assert_eq!(refused, [true, false, true, false, false, true, true]);
}
