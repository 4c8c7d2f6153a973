//! Puts memory.x (embedded/'s, the same board) and device.x (the dispatcher interrupts'
//! default handlers, which cortex-m-rt's `device` feature includes) where the linker finds
//! them; with the `defmt` feature, links defmt's sections too.
use std::{env, fs, path::PathBuf};

fn main() {
    let out = PathBuf::from(env::var_os("OUT_DIR").expect("OUT_DIR"));
    fs::copy("../memory.x", out.join("memory.x")).expect("copy memory.x");
    fs::write(
        out.join("device.x"),
        "PROVIDE(IRQ30 = DefaultHandler);\nPROVIDE(IRQ31 = DefaultHandler);\n",
    )
    .expect("write device.x");
    println!("cargo:rustc-link-search={}", out.display());
    if env::var_os("CARGO_FEATURE_DEFMT").is_some() {
        println!("cargo:rustc-link-arg=-Tdefmt.x");
    }
    println!("cargo:rerun-if-changed=../memory.x");
    println!("cargo:rerun-if-changed=build.rs");
}
