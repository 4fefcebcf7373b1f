//! `intel_tex_2`'s prebuilt kernels include C++ objects that reference `__gxx_personality_v0`;
//! Rust's default linker on x86_64 Linux (rust-lld, with `--gc-sections`) does not pull in the C++
//! runtime for them (rust-lang/rust#135257), so link it explicitly.
fn main() {
    if std::env::var("CARGO_CFG_TARGET_OS").as_deref() == Ok("linux") {
        println!("cargo:rustc-link-lib=dylib=stdc++");
    }
}
