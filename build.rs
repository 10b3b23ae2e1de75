//! Compiles the BPF programs and generates their Rust skeletons into OUT_DIR:
//! src/bpf/bperf.bpf.c (the counters), src/bpf/bpf_prog.bpf.c (counting inside a BPF
//! program, stat -b), src/bpf/runq.bpf.c (run-queue wait by culprit, serve --runq) and
//! tests/bpf/prog_target.bpf.c (stat -b's test targets); and the Rust types of the part
//! of Perfetto's trace format that report writes (proto/perfetto_trace.proto, through
//! protoc: $PROTOC, else protoc on PATH).
use std::env;
use std::path::PathBuf;

use libbpf_cargo::SkeletonBuilder;

/// (source, skeleton file, the files it includes)
const PROGRAMS: [(&str, &str, &[&str]); 4] = [
    (
        "src/bpf/bperf.bpf.c",
        "bperf.skel.rs",
        &[
            "src/bpf/bperf.h",
            "src/bpf/types.h",
            "src/bpf/task_cgroup.h",
        ],
    ),
    (
        "src/bpf/bpf_prog.bpf.c",
        "bpf_prog.skel.rs",
        &["src/bpf/bpf_prog.h", "src/bpf/types.h"],
    ),
    (
        "src/bpf/runq.bpf.c",
        "runq.skel.rs",
        &["src/bpf/runq.h", "src/bpf/types.h", "src/bpf/task_cgroup.h"],
    ),
    (
        "tests/bpf/prog_target.bpf.c",
        "prog_target.skel.rs",
        &["src/bpf/types.h"],
    ),
];
const PERFETTO_PROTO: &str = "proto/perfetto_trace.proto";

fn main() {
    let out = PathBuf::from(env::var_os("OUT_DIR").expect("OUT_DIR must be set by cargo"));
    for (src, skel, includes) in PROGRAMS {
        SkeletonBuilder::new()
            .source(src)
            .clang_args(["-Wall", "-Wno-unused-function"])
            .build_and_generate(out.join(skel))
            .unwrap_or_else(|e| panic!("failed to build {src} (is clang installed?): {e}"));
        for f in std::iter::once(&src).chain(includes) {
            println!("cargo:rerun-if-changed={f}");
        }
    }
    prost_build::Config::new()
        .compile_protos(&[PERFETTO_PROTO], &["proto"])
        .expect("failed to compile proto/perfetto_trace.proto (is protoc installed? scripts/setup installs Debian's protobuf-compiler)");
    println!("cargo:rerun-if-changed={PERFETTO_PROTO}");
}
