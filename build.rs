//! Compiles src/bpf/bperf.bpf.c and generates its Rust skeleton into OUT_DIR, and the
//! Rust types of the part of Perfetto's trace format that report writes
//! (proto/perfetto_trace.proto, through protoc: $PROTOC, else protoc on PATH).
use std::env;
use std::path::PathBuf;

use libbpf_cargo::SkeletonBuilder;

const SRC: &str = "src/bpf/bperf.bpf.c";
const PERFETTO_PROTO: &str = "proto/perfetto_trace.proto";

fn main() {
    let out_dir = PathBuf::from(env::var_os("OUT_DIR").expect("OUT_DIR must be set by cargo"));
    SkeletonBuilder::new()
        .source(SRC)
        .clang_args(["-Wall", "-Wno-unused-function"])
        .build_and_generate(out_dir.join("bperf.skel.rs"))
        .expect("failed to build the BPF program (is clang installed?)");
    for f in ["src/bpf/bperf.bpf.c", "src/bpf/bperf.h", "src/bpf/types.h"] {
        println!("cargo:rerun-if-changed={f}");
    }
    prost_build::Config::new()
        .compile_protos(&[PERFETTO_PROTO], &["proto"])
        .expect("failed to compile proto/perfetto_trace.proto (is protoc installed? scripts/setup installs Debian's protobuf-compiler)");
    println!("cargo:rerun-if-changed={PERFETTO_PROTO}");
}
