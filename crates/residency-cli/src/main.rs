//! The `residency` command-line tool.
fn main() {}
