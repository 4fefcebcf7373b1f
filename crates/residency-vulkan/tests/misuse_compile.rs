//! Misuse that must not compile: the ownership rules the type system enforces (one writer per
//! buffer, release by value, no duplicated handles). Each file in `tests/misuse_compile/` is a
//! program that rustc must reject with the error recorded next to it (`.stderr`).

#[test]
fn misuse_that_must_not_compile() {
    let cases = trybuild::TestCases::new();
    cases.compile_fail("tests/misuse_compile/*.rs");
}
