//! `bperf list`: the events this machine offers, grouped as perf groups them, with the
//! ones the kernel refuses here marked.

use std::io::Write;

use anyhow::{Context, Result};

use crate::cli::ListArgs;
use crate::event::{self, Category, Entry, Sources, Tool};
use crate::metrics;
use crate::output::people::{self, Column};
use crate::sys::{perf_event, sysfs::Sysfs};

/// perf list's category words and the kind of event each selects (metric and
/// metricgroup select no event: they select the metrics and their groups).
fn category(word: &str) -> Option<Option<Category>> {
    Some(match word {
        "hw" | "hardware" => Some(Category::Hardware),
        "sw" | "software" => Some(Category::Software),
        "tool" => Some(Category::Tool),
        "cache" | "hwcache" => Some(Category::Cache),
        "tracepoint" => Some(Category::Tracepoint),
        "pmu" => Some(Category::Pmu),
        "metric" | "metricgroup" => None,
        _ => return None,
    })
}

/// Whether `e` is selected by the filter words: a category, or a name or glob; no words
/// select everything. As perf, the software category takes the tool events along.
fn selected(e: &Entry, words: &[String]) -> bool {
    let software =
        |w: &str| e.kind == Category::Tool && category(w) == Some(Some(Category::Software));
    words.is_empty()
        || words.iter().any(|w| match category(w) {
            Some(kind) => kind == Some(e.kind) || software(w),
            None => std::iter::once(&e.name)
                .chain(&e.aliases)
                .any(|n| event::matches(w, n)),
        })
}

pub fn run(a: &ListArgs) -> Result<i32> {
    let sysfs = Sysfs::system();
    let words = &a.filter;
    // Tracepoints run to thousands; like perf, list them, but only ask for them by filter
    // or by name so that the plain listing stays readable.
    let tracepoints = !words.is_empty() || a.tracepoints;
    let entries: Vec<Entry> = event::entries(&sysfs, tracepoints)
        .into_iter()
        .filter(|e| selected(e, words))
        .filter(|e| {
            a.unit
                .as_deref()
                .is_none_or(|u| event::pmu_name(e.attr.type_, &sysfs).as_deref() == Some(u))
        })
        .collect();
    // As perf: by kind, then by name (the tool events in perf's own order).
    let mut entries = entries;
    entries.sort_by(|x, y| {
        let name = |e: &Entry| (e.kind != Category::Tool).then(|| e.name.clone());
        (x.kind, name(x)).cmp(&(y.kind, name(y)))
    });
    let mut out: Box<dyn Write> = match &a.output {
        Some(path) => Box::new(std::io::BufWriter::new(
            std::fs::File::create(path)
                .with_context(|| format!("cannot open output file {}", path.display()))?,
        )),
        None => Box::new(std::io::stdout().lock()),
    };
    if a.raw_dump {
        write!(out, "{}", raw_dump(&a.filter, &sysfs).join(""))?;
        out.flush()?;
        return Ok(0);
    }
    let metrics: Vec<&metrics::Def> = metrics::ALL
        .iter()
        .filter(|m| {
            words.is_empty()
                || words
                    .iter()
                    .any(|w| w == "metric" || event::matches(w, m.name))
        })
        .collect();
    let groups = words.is_empty() || words.iter().any(|w| w == "metricgroup");
    match a.json {
        true => write_json(&mut out, &entries, &metrics)?,
        false => {
            if !entries.is_empty() || metrics.is_empty() && !groups {
                write_table(&mut out, &entries, a, &sysfs)?;
            }
            if a.unit.is_none() {
                write_own(&mut out, words)?;
            }
            write_metrics(&mut out, &metrics, groups)?;
        }
    }
    out.flush()?;
    Ok(0)
}

/// `--raw-dump`: the names perf's scripts enumerate, as perf 6.12 prints them: each
/// followed by a space, all on one line without a newline. Each word selects a section
/// (tracepoint, hw, sw, cache, pmu, sdt, metric, metricgroup), a glob of tracepoints and
/// metrics when it has a colon, or else the events and metrics whose name holds it;
/// no word, every section with the raw syntaxes between. An event is named by its
/// alias when it has one (`cs`), and hardware, software and cache events this machine
/// cannot count are left out, as perf leaves them out; perf's tool events (duration_time,
/// user_time, system_time) follow the software events. bperf has no SDT events, nor
/// perf's mem: breakpoints.
fn raw_dump(words: &[String], sysfs: &Sysfs) -> Vec<String> {
    let entries = event::entries(sysfs, true);
    let section = |kind: Category, glob: Option<&str>| -> Vec<String> {
        let mut names: Vec<&Entry> = entries
            .iter()
            .filter(|e| e.kind == kind)
            .filter(|e| glob.is_none_or(|g| raw_names(e).any(|n| glob_matches(g, n))))
            .filter(|e| {
                kind >= Category::Pmu || kind == Category::Tool || perf_event::probe(&e.attr)
            })
            .collect();
        // Tracepoints by system, then name (`fib` before `fib6`).
        names.sort_by(|x, y| x.name.split(':').cmp(y.name.split(':')));
        names
            .into_iter()
            .map(|e| e.aliases.first().unwrap_or(&e.name).clone())
            .collect()
    };
    let mut out: Vec<String> = Vec::new();
    if words.is_empty() {
        for kind in [
            Category::Hardware,
            Category::Software,
            Category::Tool,
            Category::Cache,
            Category::Pmu,
        ] {
            out.extend(section(kind, None));
        }
        out.push("rNNN".into());
        out.extend(raw_pmu_syntaxes(sysfs));
        out.extend(section(Category::Tracepoint, None));
        out.extend(raw_metrics(None, true, true));
    }
    for word in words {
        match word.as_str() {
            "tracepoint" => out.extend(section(Category::Tracepoint, None)),
            "hw" | "hardware" => out.extend(section(Category::Hardware, None)),
            "sw" | "software" => {
                out.extend(section(Category::Software, None));
                out.extend(section(Category::Tool, None));
            }
            "tool" => out.extend(section(Category::Tool, None)),
            "cache" | "hwcache" => out.extend(section(Category::Cache, None)),
            "pmu" => out.extend(section(Category::Pmu, None)),
            "sdt" => {}
            "metric" | "metrics" => out.extend(raw_metrics(None, true, false)),
            "metricgroup" | "metricgroups" => out.extend(raw_metrics(None, false, true)),
            glob if glob.contains(':') => {
                out.extend(section(Category::Tracepoint, Some(glob)));
                out.extend(raw_metrics(Some(glob), true, true));
            }
            word => {
                let glob = format!("*{word}*");
                for kind in [
                    Category::Hardware,
                    Category::Software,
                    Category::Tool,
                    Category::Cache,
                    Category::Pmu,
                    Category::Tracepoint,
                ] {
                    out.extend(section(kind, Some(&glob)));
                }
                out.extend(raw_metrics(Some(&glob), true, true));
            }
        }
    }
    out.into_iter().map(|n| n + " ").collect()
}

/// Whether `name` matches perf's glob: wildcards as globs, a word without them whole.
fn glob_matches(glob: &str, name: &str) -> bool {
    match glob.contains(['*', '?']) {
        true => event::matches(glob, name),
        false => glob == name,
    }
}

/// An event's names a glob is matched against: its name and aliases.
fn raw_names(e: &Entry) -> impl Iterator<Item = &str> {
    std::iter::once(e.name.as_str()).chain(e.aliases.iter().map(String::as_str))
}

/// The metrics' names, and (`groups`) each group's name before its metrics, group by
/// group in perf's order; each metric once. A glob selects metrics by name and groups
/// by name.
fn raw_metrics(glob: Option<&str>, metrics: bool, groups: bool) -> Vec<String> {
    let mut defs: Vec<&metrics::Def> = metrics::ALL.iter().collect();
    defs.sort_by_key(|m| (m.group, m.name));
    let mut out = Vec::new();
    let mut last_group = None;
    for m in defs {
        let name_matches = metrics && glob.is_none_or(|g| glob_matches(g, m.name));
        let group_matches = groups && glob.is_none_or(|g| glob_matches(g, m.group));
        if !name_matches && !group_matches {
            continue;
        }
        if groups && last_group != Some(m.group) {
            out.push(m.group.to_string());
            last_group = Some(m.group);
        }
        if metrics && !out.iter().any(|n| n == m.name) {
            out.push(m.name.to_string());
        }
    }
    out
}

/// Each PMU's raw syntax as perf's raw dump writes it: its name (without the number of
/// an instance: `uncore_imc_0` and `uncore_imc_1` are `uncore_imc`, once), its first
/// three format terms with their ranges, `...` when there are more, and `/modifier`.
/// The terms are in the order of their names (perf's are in directory order).
fn raw_pmu_syntaxes(sysfs: &Sysfs) -> Vec<String> {
    let mut out: Vec<String> = sysfs
        .pmus()
        .iter()
        .map(|p| {
            let terms: Vec<String> = p
                .formats
                .iter()
                .map(|f| match f.width() {
                    0 | 1 => f.name.clone(),
                    w if w > 8 => format!("{}=0..{:#x}", f.name, u64::MAX >> (64 - w)),
                    w => format!("{}=0..{}", f.name, u64::MAX >> (64 - w)),
                })
                .collect();
            let more = if terms.len() > 3 { ",..." } else { "" };
            let shown = terms.iter().take(3).cloned().collect::<Vec<_>>().join(",");
            format!("{}/{shown}{more}/modifier", without_instance(&p.name))
        })
        .collect();
    out.dedup();
    out
}

/// A PMU's name without the `_N` of one of its instances (perf: a decimal number, or
/// more than two hex digits).
fn without_instance(name: &str) -> &str {
    let digits = name.trim_end_matches(|c: char| c.is_ascii_hexdigit());
    let suffix = &name[digits.len()..];
    let hex = suffix.chars().any(|c| !c.is_ascii_digit());
    match digits.strip_suffix('_') {
        Some(base) if !suffix.is_empty() && (!hex || suffix.len() > 2) => base,
        _ => name,
    }
}

/// perf list's metrics, each with its description, then the names of their groups.
fn write_metrics(out: &mut dyn Write, metrics: &[&metrics::Def], groups: bool) -> Result<()> {
    if !metrics.is_empty() {
        writeln!(out, "\nMetrics:\n")?;
        for m in metrics {
            writeln!(out, "  {}\n       [{}]", m.name, m.description)?;
        }
    }
    if groups {
        writeln!(out, "\nMetric Groups:\n")?;
        let mut names: Vec<&str> = metrics::ALL.iter().map(|m| m.group).collect();
        names.dedup();
        for g in names {
            writeln!(out, "{g}")?;
        }
    }
    Ok(())
}

/// perf list's JSON: an array of objects with EventName, EventAlias (the first) and
/// EventType, and with --details or for tracepoints the Encoding.
fn write_json(out: &mut dyn Write, entries: &[Entry], metrics: &[&metrics::Def]) -> Result<()> {
    let q = |s: &str| serde_json::Value::String(s.to_string()).to_string();
    writeln!(out, "[")?;
    let total = entries.len() + metrics.len();
    for (i, e) in entries.iter().enumerate() {
        let mut fields = Vec::new();
        if e.kind == Category::Tool {
            fields.push("\t\"Topic\": \"tool\"".to_string());
        }
        fields.push(format!("\t\"EventName\": {}", q(&e.name)));
        if let Some(alias) = e.aliases.first() {
            fields.push(format!("\t\"EventAlias\": {}", q(alias)));
        }
        fields.push(format!("\t\"EventType\": {}", q(e.kind.label())));
        if e.kind == Category::Tracepoint {
            fields.push(format!(
                "\t\"Encoding\": {}",
                q(&format!("tracepoint/config={:#x}/", e.attr.config))
            ));
        }
        let comma = if i + 1 < total { "," } else { "" };
        writeln!(out, "{{\n{}\n}}{comma}", fields.join(",\n"))?;
    }
    for (i, m) in metrics.iter().enumerate() {
        let mut fields = vec![
            format!("\t\"MetricGroup\": {}", q(m.group)),
            format!("\t\"MetricName\": {}", q(m.name)),
        ];
        if let Some(unit) = m.scale_unit() {
            fields.push(format!("\t\"ScaleUnit\": {}", q(&unit)));
        }
        fields.push(format!("\t\"BriefDescription\": {}", q(m.description)));
        let comma = if entries.len() + i + 1 < total {
            ","
        } else {
            ""
        };
        writeln!(out, "{{\n{}\n}}{comma}", fields.join(",\n"))?;
    }
    writeln!(out, "]")?;
    Ok(())
}

/// The listing: one line per event as perf prints it, grouped by kind, with the ones
/// this kernel refuses marked; without a filter, the PMUs' format terms after.
fn write_table(out: &mut dyn Write, entries: &[Entry], a: &ListArgs, sysfs: &Sysfs) -> Result<()> {
    match a.details {
        true => write_details(out, entries)?,
        false => write_lines(out, entries)?,
    }
    if a.filter.is_empty() && a.unit.is_none() {
        write_formats(out, sysfs)?;
        writeln!(out)?;
    }
    Ok(())
}

/// The events as perf lists them, a line each.
fn write_lines(out: &mut dyn Write, entries: &[Entry]) -> Result<()> {
    let mut last = None;
    for e in entries {
        // Kinds apart by a blank line; the tool events under perf's heading, which
        // nothing follows apart.
        let new_kind = last != Some(e.kind);
        if new_kind && e.kind == Category::Tool {
            writeln!(out, "\ntool:")?;
        } else if new_kind && last.is_some() && last != Some(Category::Tool) {
            writeln!(out)?;
        }
        last = Some(e.kind);
        writeln!(out, "{}", line(e, refused(e)))?;
    }
    Ok(())
}

/// bperf's own events (no perf has them) that the filter `words` selects: all of them
/// with no words or the word `bperf`, else those whose name a word (not a category)
/// matches.
fn own_selected(words: &[String]) -> Vec<Tool> {
    let picks = |t: &Tool| {
        words.is_empty()
            || words
                .iter()
                .any(|w| w == "bperf" || category(w).is_none() && event::matches(w, t.name()))
    };
    Tool::BPERFS.into_iter().filter(picks).collect()
}

/// The section of bperf's own events the filter `words` selects, after perf's: none
/// when it selects none (so that `bperf list sw` stays perf's).
fn write_own(out: &mut dyn Write, words: &[String]) -> Result<()> {
    let own = own_selected(words);
    if own.is_empty() {
        return Ok(());
    }
    writeln!(
        out,
        "\nbperf's own (bperf stat, top and record count them; perf has none):"
    )?;
    for t in own {
        let what = match t {
            Tool::RunqWait => "run-queue wait, ns",
            _ => "preemptions",
        };
        writeln!(out, "  {:<50} [{what}]", t.name())?;
    }
    Ok(())
}

/// Whether this kernel refuses to open the event. Tracepoints are not opened just to
/// list them (there are thousands); tool events are not the kernel's.
fn refused(e: &Entry) -> bool {
    !matches!(e.kind, Category::Tracepoint | Category::Tool) && !perf_event::probe(&e.attr)
}

/// `--details`: a table for people, one row per event with its encoding (bperf's own:
/// perf prints no such table).
fn write_details(out: &mut dyn Write, entries: &[Entry]) -> Result<()> {
    let columns = ["event", "aliases", "kind", "encoding", "support"].map(Column::text);
    let rows: Vec<Vec<String>> = entries.iter().map(|e| detail_row(e, refused(e))).collect();
    write!(out, "{}", people::draw(&columns, &rows))?;
    Ok(())
}

/// One event's row of `--details`.
fn detail_row(e: &Entry, refused: bool) -> Vec<String> {
    vec![
        e.name.clone(),
        e.aliases.join(","),
        e.kind.label().to_string(),
        encoding(e),
        if refused { "<not supported>" } else { "" }.to_string(),
    ]
}

/// The event's perf_event_attr identity, as --details shows it.
fn encoding(e: &Entry) -> String {
    let a = &e.attr;
    let mut s = format!("type={},config={:#x}", a.type_, a.config);
    if a.config1 != 0 {
        s.push_str(&format!(",config1={:#x}", a.config1));
    }
    if a.config2 != 0 {
        s.push_str(&format!(",config2={:#x}", a.config2));
    }
    s
}

/// The PMUs' format terms, and how raw and tracepoint events are written.
fn write_formats(out: &mut dyn Write, sysfs: &Sysfs) -> Result<()> {
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
    writeln!(
        out,
        "\n  rNNN                                               [Raw hardware event descriptor]"
    )?;
    writeln!(
        out,
        "  pmu/config=N,config1=N,config2=N,<format>=N/       [Raw PMU event]"
    )?;
    writeln!(out, "  sys:name                                           [Tracepoint event; 'bperf list --tracepoints']")?;
    Ok(())
}

/// One line as perf prints it: `  name OR alias   [Category]` (a tool event's name alone),
/// and ours: `<not supported>` when this kernel refuses to open it.
fn line(e: &Entry, refused: bool) -> String {
    if e.kind == Category::Tool {
        return format!("  {}", e.name);
    }
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

    #[test]
    fn own_events_are_listed_unless_the_filter_leaves_them_out() {
        let words = |w: &[&str]| w.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(own_selected(&[]), Tool::BPERFS);
        assert_eq!(own_selected(&words(&["bperf"])), Tool::BPERFS);
        assert_eq!(own_selected(&words(&["runq"])), [Tool::RunqWait]);
        assert_eq!(own_selected(&words(&["*preempt*"])), [Tool::Preemptions]);
        assert!(own_selected(&words(&["sw"])).is_empty());
        assert!(own_selected(&words(&["tool"])).is_empty());
        assert!(own_selected(&words(&["cycles"])).is_empty());
    }
    use crate::event::Attr;

    #[test]
    fn details_are_a_table_of_encodings() {
        let cs = Entry {
            name: "context-switches".into(),
            aliases: vec!["cs".into()],
            kind: Category::Software,
            attr: Attr {
                type_: 1,
                config: 3,
                ..Attr::default()
            },
        };
        assert_eq!(
            detail_row(&cs, false),
            [
                "context-switches",
                "cs",
                "Software event",
                "type=1,config=0x3",
                ""
            ]
        );
        let cache = Entry {
            name: "L1-dcache-load-misses".into(),
            aliases: vec![],
            kind: Category::Cache,
            attr: Attr {
                type_: 3,
                config: 0x10000,
                config1: 2,
                ..Attr::default()
            },
        };
        let row = detail_row(&cache, true);
        assert_eq!(row[3], "type=3,config=0x10000,config1=0x2");
        assert_eq!(row[4], "<not supported>");
    }

    #[test]
    fn lines_look_like_perf_list() {
        let e = Entry {
            name: "context-switches".into(),
            aliases: vec!["cs".into()],
            kind: Category::Software,
            attr: Attr::default(),
        };
        assert_eq!(
            line(&e, false),
            "  context-switches OR cs                             [Software event]"
        );
        assert!(line(&e, true).ends_with("[Software event]  <not supported>"));
    }

    #[test]
    fn raw_syntaxes_are_perfs() {
        let root = format!(
            "{}/tests/fixtures/sysfs/intel/devices",
            env!("CARGO_MANIFEST_DIR")
        );
        let syntaxes = raw_pmu_syntaxes(&Sysfs::at(root));
        // As perf 6.12 prints msr's and software's; cpu has more than three terms; the
        // memory controller's instances are one.
        assert_eq!(
            syntaxes,
            [
                "cpu/any,cmask=0..255,edge,.../modifier",
                "msr/event=0..0xffffffffffffffff/modifier",
                "software//modifier",
                "uncore_imc/event=0..255,umask=0..255/modifier",
            ]
        );
    }

    #[test]
    fn instance_numbers_as_perf_drops_them() {
        assert_eq!(without_instance("uncore_imc_0"), "uncore_imc");
        assert_eq!(without_instance("uncore_cha_12"), "uncore_cha");
        assert_eq!(without_instance("hisi_sccl1_ddrc_abc"), "hisi_sccl1_ddrc");
        // Two hex digits are part of the name (s390's cpum_cf).
        assert_eq!(without_instance("cpum_cf"), "cpum_cf");
        assert_eq!(without_instance("msr"), "msr");
        assert_eq!(without_instance("armv8_pmuv3_0"), "armv8_pmuv3");
    }

    #[test]
    fn raw_metrics_are_grouped_as_perf_groups_them() {
        let all = raw_metrics(None, true, true);
        assert_eq!(all.first().map(String::as_str), Some("Default"));
        assert_eq!(all.iter().filter(|n| *n == "CPUs_utilized").count(), 1);
        let groups = raw_metrics(None, false, true);
        assert!(groups
            .iter()
            .all(|g| metrics::ALL.iter().any(|m| m.group == g)));
        let cs = raw_metrics(Some("*cs_per*"), true, true);
        assert_eq!(cs, ["Default", "cs_per_second"]);
    }
}
