//! Perfetto traces read with Perfetto's own protos: tests/scripts/perfetto_summary.py
//! run by the Python of target/tools/perfetto (a virtual environment with the `perfetto`
//! PyPI package, which ships perfetto_trace_pb2; scripts/setup --test makes it).

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value as Json;

/// The Python that has Perfetto's protos.
fn python() -> PathBuf {
    let venv = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/tools/perfetto/bin/python");
    assert!(
        venv.exists(),
        "{} missing: run `make test` (scripts/setup --test installs the perfetto package there)",
        venv.display()
    );
    venv
}

/// What perfetto_summary.py says of the trace in `path` (see its docstring).
pub fn summary(path: &Path) -> Json {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/scripts/perfetto_summary.py");
    let out = Command::new(python())
        .arg(script)
        .arg(path)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "perfetto_summary.py {}: {}",
        path.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("perfetto_summary.py prints JSON")
}

/// The names of the tracks directly under the trace's root track.
pub fn root_children(summary: &Json) -> Vec<String> {
    let tracks = summary["tracks"].as_object().unwrap();
    let root = tracks
        .iter()
        .find(|(_, t)| t["parent"] == 0 && t["name"].as_str().unwrap().starts_with("bperf record"))
        .map(|(uuid, _)| uuid.parse::<u64>().unwrap())
        .expect("a root track named after the recording");
    tracks
        .values()
        .filter(|t| t["parent"] == root)
        .map(|t| t["name"].as_str().unwrap().to_string())
        .collect()
}

/// The names of the counter tracks.
pub fn counter_tracks(summary: &Json) -> Vec<String> {
    let mut names: Vec<String> = summary["tracks"]
        .as_object()
        .unwrap()
        .values()
        .filter(|t| t["counter"] == true)
        .map(|t| t["name"].as_str().unwrap().to_string())
        .collect();
    names.sort();
    names
}
