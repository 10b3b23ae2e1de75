//! `bperf list`: the events this machine offers, grouped as perf groups them, with the
//! ones the kernel refuses here marked.

use std::io::Write;

use anyhow::Result;

use crate::cli::ListArgs;
use crate::event::{self, Entry, Kind, Sources};
use crate::sys::{perf_event, sysfs::Sysfs};

pub fn run(a: &ListArgs) -> Result<i32> {
    let sysfs = Sysfs::system();
    let filter = a.filter.as_deref();
    // Tracepoints run to thousands; like perf, list them, but only ask for them by filter
    // or by name so that the plain listing stays readable.
    let tracepoints = filter.is_some() || a.tracepoints;
    let entries: Vec<Entry> = event::entries(&sysfs, tracepoints)
        .into_iter()
        .filter(|e| {
            filter.is_none_or(|f| {
                std::iter::once(&e.name)
                    .chain(&e.aliases)
                    .any(|n| event::matches(f, n))
            })
        })
        .collect();
    let mut out = std::io::stdout().lock();
    writeln!(out, "\nList of pre-defined events (to be used in -e):\n")?;
    let mut last = None;
    for e in &entries {
        if last.is_some() && last != Some(e.kind) {
            writeln!(out)?;
        }
        last = Some(e.kind);
        // Tracepoints are not opened just to list them (there are thousands).
        let refused = e.kind != Kind::Tracepoint && !perf_event::probe(&e.attr);
        writeln!(out, "{}", line(e, refused))?;
    }
    if filter.is_none() {
        let pmus: Vec<_> = sysfs
            .pmus()
            .into_iter()
            .filter(|p| !p.formats.is_empty())
            .collect();
        if !pmus.is_empty() {
            writeln!(out, "\nPMU format terms (pmu/term=value,.../):\n")?;
            for p in pmus {
                let terms: Vec<String> = p
                    .formats
                    .iter()
                    .map(|f| format!("{}={}", f.name, f.describe()))
                    .collect();
                writeln!(out, "  {:<16} {}", p.name, terms.join(" "))?;
            }
        }
        writeln!(out, "\n  rNNN                                               [Raw hardware event descriptor]")?;
        writeln!(
            out,
            "  pmu/config=N,config1=N,config2=N,<format>=N/       [Raw PMU event]"
        )?;
        writeln!(out, "  sys:name                                           [Tracepoint event; 'bperf list --tracepoints']")?;
    }
    writeln!(out)?;
    Ok(0)
}

/// One line as perf prints it: `  name OR alias   [Kind]`, and ours: `<not supported>`
/// when this kernel refuses to open it.
fn line(e: &Entry, refused: bool) -> String {
    let names = std::iter::once(e.name.as_str())
        .chain(e.aliases.iter().map(String::as_str))
        .collect::<Vec<_>>()
        .join(" OR ");
    let mark = if refused { "  <not supported>" } else { "" };
    format!("  {names:<50} [{}]{mark}", e.kind.label())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::Attr;

    #[test]
    fn lines_look_like_perf_list() {
        let e = Entry {
            name: "context-switches".into(),
            aliases: vec!["cs".into()],
            kind: Kind::Software,
            attr: Attr::default(),
        };
        assert_eq!(
            line(&e, false),
            "  context-switches OR cs                             [Software event]"
        );
        assert!(line(&e, true).ends_with("[Software event]  <not supported>"));
    }
}
