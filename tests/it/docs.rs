//! The documentation's relative links resolve: every `[text](path)` and
//! `[text](path#anchor)` in README.md, ARCHITECTURE.md, bench/README.md and docs/*.md
//! names a file or directory of the repository, and an anchor into a Markdown file names
//! one of its headings (as GitHub makes a heading's anchor). No root needed.

use std::collections::HashSet;
use std::fs;
use std::path::{Path, PathBuf};

/// The repository's top directory.
fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The documents whose links are checked, relative to the top directory.
fn documents() -> Vec<PathBuf> {
    let mut docs: Vec<PathBuf> = ["README.md", "ARCHITECTURE.md", "bench/README.md"]
        .iter()
        .map(PathBuf::from)
        .collect();
    let mut more: Vec<PathBuf> = fs::read_dir(root().join("docs"))
        .expect("docs/ is there")
        .map(|e| e.expect("docs/ lists").path())
        .filter(|p| p.extension().is_some_and(|x| x == "md"))
        .map(|p| p.strip_prefix(root()).unwrap().to_path_buf())
        .collect();
    more.sort();
    docs.extend(more);
    docs
}

/// The lines of `text` outside code: fenced blocks and indented blocks are left out.
fn prose(text: &str) -> impl Iterator<Item = &str> {
    let mut fenced = false;
    text.lines().filter(move |l| {
        if l.trim_start().starts_with("```") {
            fenced = !fenced;
            return false;
        }
        !fenced && !l.starts_with("    ") && !l.starts_with('\t')
    })
}

/// A heading's anchor as GitHub makes it: lower case, spaces to `-`, and everything but
/// letters, digits, `-` and `_` dropped.
fn anchor_of(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

/// The anchors of a Markdown text's headings (a repeated one gets `-1`, `-2`, ...).
fn anchors(text: &str) -> HashSet<String> {
    let mut seen = HashSet::new();
    for line in prose(text) {
        let Some(heading) = line.strip_prefix('#') else {
            continue;
        };
        let heading = heading.trim_start_matches('#');
        if !heading.starts_with(' ') {
            continue;
        }
        let base = anchor_of(heading);
        let mut anchor = base.clone();
        let mut n = 0;
        while !seen.insert(anchor.clone()) {
            n += 1;
            anchor = format!("{base}-{n}");
        }
    }
    seen
}

/// The link targets of a Markdown text: what follows `](` up to `)`, in prose lines.
fn links(text: &str) -> Vec<String> {
    let mut found = Vec::new();
    for line in prose(text) {
        let mut rest = line;
        while let Some(at) = rest.find("](") {
            rest = &rest[at + 2..];
            let end = rest.find(')').unwrap_or(rest.len());
            found.push(rest[..end].trim().to_string());
            rest = &rest[end..];
        }
    }
    found
}

/// The broken relative links of `text`, the document at `doc` (relative to `root`), each
/// said as `doc: target (why)`.
fn broken_links(root: &Path, doc: &Path, text: &str) -> Vec<String> {
    let dir = doc.parent().unwrap_or(Path::new(""));
    let mut broken = Vec::new();
    for target in links(text) {
        if target.contains("://") || target.starts_with("mailto:") {
            continue;
        }
        let (path, anchor) = match target.split_once('#') {
            Some((p, a)) => (p, Some(a)),
            None => (target.as_str(), None),
        };
        let file = if path.is_empty() {
            doc.to_path_buf()
        } else {
            dir.join(path)
        };
        let full = root.join(&file);
        let say = |why: &str| format!("{}: {target} ({why})", doc.display());
        if !path.is_empty() && !full.exists() {
            broken.push(say("no such file"));
            continue;
        }
        let Some(anchor) = anchor else { continue };
        if full.extension().is_none_or(|x| x != "md") {
            continue;
        }
        let other = if path.is_empty() {
            text.to_string()
        } else {
            fs::read_to_string(&full).unwrap_or_default()
        };
        if !anchors(&other).contains(anchor) {
            broken.push(say("no such heading"));
        }
    }
    broken
}

#[test]
fn every_relative_link_resolves() {
    let root = root();
    let mut broken = Vec::new();
    for doc in documents() {
        let text = fs::read_to_string(root.join(&doc))
            .unwrap_or_else(|e| panic!("{}: {e}", doc.display()));
        broken.extend(broken_links(&root, &doc, &text));
    }
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

/// The check finds a missing file, a missing heading in another file and in its own, and
/// takes what exists.
#[test]
fn broken_links_are_found() {
    let text = "# Top\n\n## A `b`: c\n\nSee [x](nope.md), [y](usage.md#no-such-heading),\n\
                [z](#nowhere), [ok](usage.md), [ok](#a-b-c), [ok](../README.md#bperf),\n\
                [web](https://example.org/x).\n\n    [code](skipped.md)\n";
    let broken = broken_links(&root(), Path::new("docs/fake.md"), text);
    assert_eq!(
        broken,
        [
            "docs/fake.md: nope.md (no such file)",
            "docs/fake.md: usage.md#no-such-heading (no such heading)",
            "docs/fake.md: #nowhere (no such heading)",
        ]
    );
}

#[test]
fn anchors_are_githubs() {
    assert_eq!(
        anchor_of(" Shared counters: `--bpf-counters` and `:b`"),
        "shared-counters---bpf-counters-and-b"
    );
    assert_eq!(
        anchor_of(" Where the suite's time goes"),
        "where-the-suites-time-goes"
    );
    assert!(anchors("# A\n## A\n").contains("a-1"));
}
