//! Every crate builds from its own package: each file a crate's Rust sources name at compile time
//! (`include_bytes!`, `include_str!`, `include!`, `#[path]`) lies inside that crate and is in the
//! list `cargo package` packs. CI's package step builds libraries and binaries from their packages;
//! this covers the tests and examples too, which that step does not build.

use std::path::{Component, Path, PathBuf};
use std::process::Command;

/// Where a compile-time include points, relative to its crate's directory.
#[derive(Debug, PartialEq)]
enum Target {
    /// One file.
    File(PathBuf),
    /// Files whose paths start with this (the path is built by a macro from a metavariable).
    Prefix(String),
}

/// The string literals of `args` (a macro's arguments), in order; `None` in place of a token that
/// is not a literal (a macro metavariable such as `$name`), after which nothing is known.
fn literals(args: &str) -> Vec<Option<String>> {
    let mut out = Vec::new();
    let mut chars = args.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '"' => {
                let mut s = String::new();
                while let Some(c) = chars.next() {
                    match c {
                        '\\' => s.extend(chars.next()),
                        '"' => break,
                        c => s.push(c),
                    }
                }
                out.push(Some(s));
            }
            '$' => out.push(None),
            _ => {}
        }
    }
    out
}

/// The byte range inside the parenthesis at `open` of `code` and its match (to its end if none).
fn parenthesised(code: &str, open: usize) -> std::ops::Range<usize> {
    let mut depth = 0;
    for (i, c) in code[open..].char_indices() {
        match c {
            '(' => depth += 1,
            ')' => {
                depth -= 1;
                if depth == 0 {
                    return open + 1..open + i;
                }
            }
            _ => {}
        }
    }
    open + 1..code.len()
}

/// `text` with comments and the contents of string and char literals blanked, at the same byte
/// offsets, so that only code is searched (this file's own test strings are not includes).
fn code_only(text: &str) -> String {
    let b = text.as_bytes();
    let mut out = b.to_vec();
    let blank = |out: &mut Vec<u8>, range: std::ops::Range<usize>| {
        out[range].iter_mut().filter(|x| **x != b'\n').for_each(|x| *x = b' ');
    };
    let find = |from: usize, needle: &str| text[from.min(text.len())..].find(needle).map(|at| from + at);
    let ident = |at: usize| at < b.len() && (b[at].is_ascii_alphanumeric() || b[at] == b'_');
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'/' if b.get(i + 1) == Some(&b'/') => {
                let end = find(i, "\n").unwrap_or(b.len());
                blank(&mut out, i..end);
                i = end;
            }
            b'/' if b.get(i + 1) == Some(&b'*') => {
                let end = find(i + 2, "*/").map_or(b.len(), |e| e + 2);
                blank(&mut out, i..end);
                i = end;
            }
            b'r' if matches!(b.get(i + 1), Some(b'#' | b'"'))
                && !(i > 0 && ident(i - 1) && !(b[i - 1] == b'b' && !(i > 1 && ident(i - 2)))) =>
            {
                let hashes = b[i + 1..].iter().take_while(|&&c| c == b'#').count();
                let open = i + 1 + hashes;
                if b.get(open) != Some(&b'"') {
                    i += 1;
                    continue;
                }
                let close = format!("\"{}", "#".repeat(hashes));
                let end = find(open + 1, &close).unwrap_or(b.len());
                blank(&mut out, open + 1..end);
                i = (end + close.len()).min(b.len());
            }
            b'"' => {
                let mut end = i + 1;
                while end < b.len() && b[end] != b'"' {
                    end += if b[end] == b'\\' { 2 } else { 1 };
                }
                let end = end.min(b.len());
                blank(&mut out, i + 1..end);
                i = end + 1;
            }
            b'\'' => {
                // A char literal ('x', '\n', '\''), or a lifetime, which is left alone.
                let len = text[i + 1..].chars().next().map_or(0, char::len_utf8);
                if b.get(i + 1) == Some(&b'\\') {
                    let end = find(i + 3, "'").unwrap_or(b.len());
                    blank(&mut out, i + 1..end);
                    i = end + 1;
                } else if b.get(i + 1 + len) == Some(&b'\'') {
                    blank(&mut out, i + 1..i + 1 + len);
                    i += 2 + len;
                } else {
                    i += 1;
                }
            }
            _ => i += 1,
        }
    }
    String::from_utf8(out).expect("whole characters are blanked")
}

/// Removes `.` and `..` components without touching the file system; `None` when `..` climbs
/// above the start.
fn normalise(path: &Path) -> Option<PathBuf> {
    let mut out = Vec::new();
    for part in path.components() {
        match part {
            Component::CurDir => {}
            Component::ParentDir => {
                out.pop()?;
            }
            Component::Normal(p) => out.push(p),
            Component::RootDir | Component::Prefix(_) => return None,
        }
    }
    Some(out.iter().collect())
}

/// The compile-time includes of the Rust file `file` (relative to its crate's directory), with
/// `text` its contents: `Ok` with the target inside the crate, `Err` with the directive's arguments
/// when it points outside the crate. Comments and strings are not searched; a directive may span
/// lines.
fn includes(file: &Path, text: &str) -> Vec<Result<Target, String>> {
    let dir = file.parent().unwrap_or(Path::new(""));
    let code = code_only(text);
    // (index of the opening parenthesis or of what follows `#[path`, is a `#[path]`)
    let mut starts: Vec<(usize, bool)> = Vec::new();
    for name in ["include_bytes", "include_str", "include"] {
        let call = format!("{name}!(");
        for (at, _) in code.match_indices(call.as_str()) {
            // A whole word: not the tail of another macro's name.
            if !code[..at].ends_with(|c: char| c.is_alphanumeric() || c == '_') {
                starts.push((at + call.len() - 1, false));
            }
        }
    }
    let path_attr = concat!("#[", "path");
    starts.extend(code.match_indices(path_attr).map(|(at, _)| (at + path_attr.len(), true)));
    starts.sort();
    let mut found = Vec::new();
    for (at, is_path_attr) in starts {
        let args = if is_path_attr {
            &text[at..code[at..].find(']').map_or(text.len(), |end| at + end)]
        } else {
            &text[parenthesised(&code, at)]
        };
        let from_manifest = args.contains("CARGO_MANIFEST_DIR");
        let mut parts = literals(args).into_iter();
        if from_manifest {
            parts.next(); // "CARGO_MANIFEST_DIR" itself
        }
        let mut path = String::new();
        let mut whole = true;
        for part in parts {
            match part {
                Some(s) => path.push_str(&s),
                None => {
                    whole = false;
                    break;
                }
            }
        }
        // From `CARGO_MANIFEST_DIR`, relative to the crate; otherwise to the including file.
        let relative = if from_manifest {
            path.trim_start_matches('/').to_owned()
        } else {
            format!("{}/{path}", dir.display())
        };
        let Some(normal) = normalise(Path::new(&relative)) else {
            found.push(Err(args.trim().to_owned()));
            continue;
        };
        found.push(Ok(if whole {
            Target::File(normal)
        } else {
            // A prefix ending in `/` names a folder: keep the slash.
            let mut prefix = normal.to_string_lossy().into_owned();
            if relative.ends_with('/') {
                prefix.push('/');
            }
            Target::Prefix(prefix)
        }));
    }
    found
}

fn cargo() -> Command {
    Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
}

#[test]
fn every_file_a_crate_includes_at_compile_time_is_in_its_package() {
    let root = env!("CARGO_MANIFEST_DIR");
    let out = cargo()
        .args(["metadata", "--no-deps", "--offline", "--format-version", "1", "--manifest-path"])
        .arg(format!("{root}/Cargo.toml"))
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let meta: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let mut problems = Vec::new();
    let mut checked = 0;
    for package in meta["packages"].as_array().unwrap() {
        let name = package["name"].as_str().unwrap();
        let dir = Path::new(package["manifest_path"].as_str().unwrap()).parent().unwrap();
        let out = cargo()
            .args(["package", "--list", "--allow-dirty", "--offline", "-p", name, "--manifest-path"])
            .arg(format!("{root}/Cargo.toml"))
            .output()
            .unwrap();
        assert!(out.status.success(), "{name}: {}", String::from_utf8_lossy(&out.stderr));
        let listed: Vec<String> = String::from_utf8(out.stdout).unwrap().lines().map(str::to_owned).collect();
        for file in listed.iter().filter(|f| f.ends_with(".rs")) {
            let text = std::fs::read_to_string(dir.join(file)).unwrap();
            for include in includes(Path::new(file), &text) {
                checked += 1;
                let packed = match &include {
                    Ok(Target::File(path)) => listed.iter().any(|l| Path::new(l) == path),
                    Ok(Target::Prefix(prefix)) => listed.iter().any(|l| l.starts_with(prefix.as_str())),
                    Err(args) => {
                        problems.push(format!("{name}: {file} reaches outside its crate: ({args})"));
                        continue;
                    }
                };
                if !packed {
                    problems
                        .push(format!("{name}: {file} names {include:?}, which its package does not pack"));
                }
            }
        }
    }
    assert!(problems.is_empty(), "every crate must build from its own package (move the file into the crate, or add it to `include`):\n{}", problems.join("\n"));
    // The shaders, the captured profiles and the READMEs at least.
    assert!(checked >= 5, "only {checked} includes found: is the scan still reading the sources?");
}

#[test]
fn an_include_that_climbs_out_of_its_crate_is_caught() {
    let shader = r#"include_bytes!(concat!(env!("CARGO_MANIFEST_DIR"), "/../../shaders/", $name, ".spv"));"#;
    let profile = r#"const H200: &str = include_str!("../../../profiles/nvidia-h200.json");"#;
    let module = concat!("#[", r#"path = "../../examples/ptex.rs"]"#);
    for text in [shader, profile, module] {
        assert!(matches!(includes(Path::new("src/b.rs"), text)[..], [Err(_)]), "{text}");
    }
}

#[test]
fn includes_inside_the_crate_resolve_to_its_files() {
    let file = Path::new("src/pipelines/shaders.rs");
    let shader = r#"include_bytes!(concat!(env!("CARGO_MANIFEST_DIR"), "/shaders/", $name, ".spv"));"#;
    assert_eq!(includes(file, shader), [Ok(Target::Prefix("shaders/".into()))]);
    let readme = r#"#![doc = include_str!("../README.md")]"#;
    assert_eq!(includes(Path::new("src/lib.rs"), readme), [Ok(Target::File("README.md".into()))]);
    let profile = r#"pub const X: &str = include_str!("../../profiles/lavapipe.json");"#;
    assert_eq!(
        includes(Path::new("src/profile/captured.rs"), profile),
        [Ok(Target::File("profiles/lavapipe.json".into()))]
    );
    let module = concat!("#[", r#"path = "common/watchdog.rs"]"#);
    assert_eq!(
        includes(Path::new("tests/a.rs"), module),
        [Ok(Target::File("tests/common/watchdog.rs".into()))]
    );
    let wrapped = "include_bytes!(\n    concat!(env!(\"CARGO_MANIFEST_DIR\"), \"/shaders/x.spv\"),\n)";
    assert_eq!(includes(file, wrapped), [Ok(Target::File("shaders/x.spv".into()))]);
    assert_eq!(includes(file, "// include_bytes!(\"../../x\")"), []);
}
