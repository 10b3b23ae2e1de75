//! Compiles src/bpf/bperf.bpf.c and generates its Rust skeleton into OUT_DIR.
use std::env;
use std::path::PathBuf;

use libbpf_cargo::SkeletonBuilder;

const SRC: &str = "src/bpf/bperf.bpf.c";

fn main() {
    let out = PathBuf::from(env::var_os("OUT_DIR").expect("OUT_DIR must be set by cargo"))
        .join("bperf.skel.rs");
    SkeletonBuilder::new()
        .source(SRC)
        .clang_args(["-Wall", "-Wno-unused-function"])
        .build_and_generate(&out)
        .expect("failed to build the BPF program (is clang installed?)");
    for f in ["src/bpf/bperf.bpf.c", "src/bpf/bperf.h", "src/bpf/types.h"] {
        println!("cargo:rerun-if-changed={f}");
    }
}
