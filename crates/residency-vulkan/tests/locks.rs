//! Lock poisoning is recovered from in one place per crate, `src/poison.rs` (the backend's and
//! the core's, whose docs say why that is right there): a recovery written inline anywhere else
//! in either crate's sources fails this test. Comments are not code and are not checked.

#[path = "common/source.rs"]
mod source;
use std::path::Path;

/// The one file allowed to take a poisoned lock's guard.
const HELPER: &str = "poison.rs";

/// `text` without its comments and without whitespace, so that a recovery split over lines
/// reads as one.
fn squeezed_code(text: &str) -> String {
    source::without_comments(text).chars().filter(|c| !c.is_whitespace()).collect()
}

/// The poison recoveries in `code` (squeezed): `PoisonError::into_inner` named, a closure
/// `|e| e.into_inner()`, or a match arm `Err(e) => e.into_inner()`, whatever the binding's name.
fn recoveries(code: &str) -> Vec<String> {
    let mut found = Vec::new();
    for (at, _) in code.match_indices(".into_inner()") {
        let before = &code[..at];
        let binding: String = before
            .chars()
            .rev()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect::<Vec<_>>()
            .into_iter()
            .rev()
            .collect();
        if binding.is_empty() {
            continue;
        }
        let head = &before[..before.len() - binding.len()];
        if head.ends_with(&format!("|{binding}|")) || head.ends_with(&format!("Err({binding})=>")) {
            let mut start = head.len().saturating_sub(30);
            while !code.is_char_boundary(start) {
                start -= 1;
            }
            found.push(code[start..at + ".into_inner()".len()].to_owned());
        }
    }
    found.extend(code.match_indices("PoisonError::into_inner").map(|(_, m)| m.to_owned()));
    found
}

#[test]
fn locks_poison_is_recovered_from_only_in_the_helper() {
    // The backend's sources and the core's (each crate has its own `src/poison.rs`; the core's is
    // crate-private too, so the two are twins by design).
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut problems = Vec::new();
    for (krate, src) in [
        ("residency-vulkan", manifest.join("src")),
        ("residency-core", manifest.join("../residency-core/src")),
    ] {
        let files = source::rust_files(&src);
        assert!(files.iter().any(|f| f.ends_with(HELPER)), "{krate}: src/{HELPER} is gone: update this test");
        for file in &files {
            let relative = file.strip_prefix(&src).unwrap().to_string_lossy().replace('\\', "/");
            if relative == HELPER {
                continue;
            }
            let code = squeezed_code(&std::fs::read_to_string(file).unwrap());
            for recovery in recoveries(&code) {
                problems.push(format!("{krate}/src/{relative}: `…{recovery}`"));
            }
        }
    }
    assert!(
        problems.is_empty(),
        "{} inline poison recoveries (use the crate's `poison::PoisonFree`: `locked()`, `value_mut()`, \
         `into_value()`, `PoisonFreeWait::wait_locked`):\n{}",
        problems.len(),
        problems.join("\n")
    );
}

#[test]
fn locks_the_checker_sees_every_spelling_and_skips_comments() {
    let code = squeezed_code(
        "let a = m.lock().unwrap_or_else(|e| e.into_inner());\n\
         let b = m.lock()\n    .unwrap_or_else(|poisoned| poisoned.into_inner());\n\
         let c = cv.wait(g).unwrap_or_else(std::sync::PoisonError::into_inner);\n\
         let d = match m.lock() { Ok(g) => g, Err(p) => p.into_inner() };\n\
         // m.lock().unwrap_or_else(|e| e.into_inner())\n\
         /* Err(e) => e.into_inner() */\n\
         let fine = cell.into_inner(); let also = writer.into_inner().map_err(|e| e.to_string());",
    );
    let found = recoveries(&code);
    assert_eq!(found.len(), 4, "{found:?}");
}
