//! bperf top on real cgroups: --batch's figures against the kernel's cpu.stat, and the
//! full-screen view driven through tmux (send-keys, capture-pane). Needs root.

use crate::common;

use std::io::{BufRead, BufReader, Read};
use std::process::{Child, Command, Stdio};
use std::time::Instant;

use common::*;

/// A child process killed and reaped when dropped.
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The workload spinning for `ms` in `cg`, once it is there.
fn spinner(cg: &TestCgroup, ms: u32) -> Running {
    let child = Command::new(workload())
        .args(["spin", &ms.to_string(), &cg.procs()])
        .spawn()
        .unwrap();
    assert!(wait_for(10, || !std::fs::read_to_string(cg.procs())
        .unwrap_or_default()
        .trim()
        .is_empty()));
    Running(child)
}

/// One refresh of --batch as the test saw it: the window bperf says it covered, the
/// rows (name, CPUs) and their lines, and, read as its header arrived, each cgroup's cpu.stat usage,
/// what cpu.stat leaves out, and the time.
struct Page {
    window_s: f64,
    rows: Vec<(String, f64)>,
    /// The rows' lines as printed.
    lines: Vec<String>,
    usage: Vec<u64>,
    unaccounted: f64,
    at: Instant,
}

/// The window of a header line `bperf top HH:MM:SS  0.501 s  2 CPUs  3 cgroups`.
fn window_of(header: &str) -> f64 {
    let words: Vec<&str> = header.split_whitespace().collect();
    let at = words.iter().position(|w| *w == "s").expect(header);
    words[at - 1].parse().expect(header)
}

/// --batch -n 3 -d 0.5 with two cgroups spinning and one idle: the busy ones come first,
/// sorted by CPUs, each refresh's CPUs within 5% of what cpu.stat says the cgroup used
/// between the refreshes; the idle one last, at about zero.
#[test]
#[ignore = "needs root (make test runs it)"]
fn batch_rows_follow_cpu_stat_busy_first() {
    batch_against_cpu_stat(&[]);
}

/// The same through the shared counters.
#[test]
#[ignore = "needs root (make test runs it)"]
fn batch_with_shared_counters() {
    batch_against_cpu_stat(&["--bpf-counters"]);
}

fn batch_against_cpu_stat(options: &[&str]) {
    let _s = serial();
    let busy = [TestCgroup::new("top-busy1"), TestCgroup::new("top-busy2")];
    let idle = TestCgroup::new("top-idle");
    let _spin: Vec<Running> = busy.iter().map(|cg| spinner(cg, 30_000)).collect();
    let cgs = [&busy[0], &busy[1], &idle];
    let pattern = format!("bperf-test-{}-top-.*", std::process::id());
    let mut args = vec!["--for-each-cgroup", &pattern];
    args.extend(options);
    let pages = batch_pages(&args, &cgs);
    for (k, page) in pages.iter().enumerate() {
        let names: Vec<&str> = page.rows.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names.len(), 3, "{names:?}");
        assert!(names[..2].contains(&busy[0].name.as_str()), "{names:?}");
        assert!(names[..2].contains(&busy[1].name.as_str()), "{names:?}");
        assert_eq!(names[2], idle.name);
        assert!(
            page.rows[0].1 >= page.rows[1].1,
            "sorted by CPUs: {:?}",
            page.rows
        );
        assert!(page.rows[2].1 < 0.01, "idle: {:?}", page.rows);
        if k > 0 {
            against_cpu_stat(&pages, k, &cgs, &[0, 1]);
        }
    }
}

/// `bperf top --batch -n 3 -d 0.5 ARGS`, read page by page: each page's rows are
/// (name, CPUs), the name the first field and CPUs the second, or with --tree the
/// path the last field and CPUs the first. Every window is about the 0.5 s asked for.
fn batch_pages(args: &[&str], cgs: &[&TestCgroup]) -> Vec<Page> {
    let tree = args.contains(&"--tree");
    let mut top = Running(
        bperf()
            .args(["top", "--batch", "-n", "3", "-d", "0.5"])
            .args(args)
            .stdout(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let out = BufReader::new(top.0.stdout.take().unwrap());
    let mut pages: Vec<Page> = Vec::new();
    for line in out.lines() {
        let line = line.unwrap();
        if line.starts_with("bperf top ") {
            pages.push(Page {
                window_s: window_of(&line),
                rows: Vec::new(),
                lines: Vec::new(),
                usage: cgs.iter().map(|c| c.usage_ns()).collect(),
                unaccounted: unaccounted_ns(),
                at: Instant::now(),
            });
        } else if let Some(page) = pages.last_mut() {
            let words: Vec<&str> = line.split_whitespace().collect();
            let (name, cpus) = match tree {
                true => (words.last(), words.first()),
                false => (words.first(), words.get(1)),
            };
            let (Some(name), Some(cpus)) = (name, cpus) else {
                continue;
            };
            if words.len() > 1 && !words.contains(&"CGROUP") {
                page.rows
                    .push((name.to_string(), cpus.parse().expect(&line)));
                page.lines.push(line.clone());
            }
        }
    }
    assert!(top.0.wait().unwrap().success());
    assert_eq!(pages.len(), 3);
    for page in &pages {
        let w = page.window_s;
        assert!((w - 0.5).abs() < 0.1, "window {w}");
    }
    pages
}

/// Refresh `k`'s CPUs of each `cgs[i]` for i in `which` against what cpu.stat says it
/// used between the arrivals of page k and the one before: within 5%, or above it by no
/// more than what cpu.stat left out meanwhile.
fn against_cpu_stat(pages: &[Page], k: usize, cgs: &[&TestCgroup], which: &[usize]) {
    let (page, before) = (&pages[k], &pages[k - 1]);
    let wall = (page.at - before.at).as_secs_f64();
    let unaccounted = page.unaccounted - before.unaccounted + 1e7;
    for &i in which {
        let cg = cgs[i];
        let cpus = page.rows.iter().find(|(n, _)| *n == cg.name).unwrap().1;
        let kernel_ns = (page.usage[i] - before.usage[i]) as f64;
        let ours_ns = cpus * wall * 1e9;
        eprintln!(
            "refresh {k}, {}: {cpus} CPUs, cpu.stat {:.4}",
            cg.name,
            kernel_ns / wall / 1e9
        );
        let ok = ours_ns >= kernel_ns * 0.95 && ours_ns <= kernel_ns * 1.05 + unaccounted;
        assert!(
            ok,
            "refresh {k}, {}: {cpus} CPUs over {wall:.3} s against cpu.stat's {:.3} CPUs",
            cg.name,
            kernel_ns / wall / 1e9
        );
    }
}

/// --batch --tree with a parent cgroup of two spinning children and an idle one: every
/// page puts the parent first and its children right under it (` \_ ` and their whole
/// paths, the busy ones first by CPUs, the idle one last); the parent's CPUs are within
/// 5% of the sum of its children's (bperf charges what a task counts to every counted
/// ancestor of its cgroup) and, as each busy child's, of its cpu.stat over the window.
#[test]
#[ignore = "needs root (make test runs it)"]
fn batch_tree_puts_the_children_under_their_parent() {
    let _s = serial();
    let parent = TestCgroup::new("top-forest");
    let busy = [parent.child("busy1"), parent.child("busy2")];
    let idle = parent.child("idle");
    let _spin: Vec<Running> = busy.iter().map(|cg| spinner(cg, 30_000)).collect();
    let cgs = [&parent, &busy[0], &busy[1], &idle];
    let pattern = format!("{}(/.*)?", parent.name);
    let pages = batch_pages(&["--tree", "--for-each-cgroup", &pattern], &cgs);
    for (k, page) in pages.iter().enumerate() {
        let names: Vec<&str> = page.rows.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names.len(), 4, "{:#?}", page.lines);
        assert_eq!(names[0], parent.name, "{:#?}", page.lines);
        assert!(names[1..3].contains(&busy[0].name.as_str()), "{names:?}");
        assert!(names[1..3].contains(&busy[1].name.as_str()), "{names:?}");
        assert_eq!(names[3], idle.name, "{:#?}", page.lines);
        // The parent's path right after its CPUs; each child's after ` \_ `.
        let top_line = &page.lines[0];
        assert!(
            top_line.ends_with(&format!(" {}", parent.name)),
            "{top_line}"
        );
        assert!(!top_line.contains("\\_"), "{top_line}");
        for (line, name) in page.lines[1..].iter().zip(&names[1..]) {
            assert!(line.ends_with(&format!(" \\_ {name}")), "{:#?}", page.lines);
        }
        let cpus: Vec<f64> = page.rows.iter().map(|r| r.1).collect();
        assert!(cpus[1] >= cpus[2] && cpus[2] > 0.1, "{cpus:?}");
        assert!(cpus[3] < 0.01, "{cpus:?}");
        let children: f64 = cpus[1..].iter().sum();
        eprintln!("refresh {k}: parent {} CPUs, children {children}", cpus[0]);
        assert!(
            (cpus[0] - children).abs() <= children * 0.05,
            "parent {} CPUs, children {cpus:?}",
            cpus[0]
        );
        if k > 0 {
            against_cpu_stat(&pages, k, &cgs, &[0, 1, 2]);
        }
    }
}

/// Without a terminal on stdout, bperf top refuses in one line that says what to use,
/// before it loads anything (so without root).
#[test]
fn refuses_without_a_terminal() {
    let o = bperf().args(["top"]).stdin(Stdio::null()).output().unwrap();
    assert_eq!(o.status.code(), Some(129));
    let err = stderr(&o);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains("--batch") && err.contains("bperf stat"),
        "{err}"
    );
    assert!(o.stdout.is_empty());
}

/// A detached tmux session of 80x24 running a shell with a known prompt; killed when
/// dropped.
struct Tmux {
    name: String,
    /// How many times the shell was seen to have its terminal back.
    restores: std::cell::Cell<u32>,
}

impl Tmux {
    /// None where tmux is not installed (scripts/setup --test installs it).
    fn start(tag: &str) -> Option<Tmux> {
        let name = format!("bperf-top-{}-{tag}", std::process::id());
        let started = Command::new("tmux")
            .args(["new-session", "-d", "-s", &name, "-x", "80", "-y", "24"])
            .args(["env", "PS1=prompt$ ", "sh"])
            .status();
        match started {
            Ok(s) if s.success() => {}
            _ => {
                eprintln!("tmux not installed: skipped (scripts/setup --test installs it)");
                return None;
            }
        }
        let t = Tmux {
            name,
            restores: Default::default(),
        };
        assert!(wait_for(10, || t.pane().contains("prompt$")));
        Some(t)
    }

    fn keys(&self, keys: &[&str]) {
        let ok = Command::new("tmux")
            .args(["send-keys", "-t", &self.name])
            .args(keys)
            .status()
            .unwrap();
        assert!(ok.success());
    }

    /// Types `text` literally.
    fn type_text(&self, text: &str) {
        self.keys(&["-l", text]);
    }

    fn pane(&self) -> String {
        let o = Command::new("tmux")
            .args(["capture-pane", "-p", "-t", &self.name])
            .output()
            .unwrap();
        String::from_utf8_lossy(&o.stdout).into_owned()
    }

    /// Whether the pane shows the alternate screen.
    fn alternate(&self) -> bool {
        let o = Command::new("tmux")
            .args(["display", "-p", "-t", &self.name, "#{alternate_on}"])
            .output()
            .unwrap();
        String::from_utf8_lossy(&o.stdout).trim() == "1"
    }

    /// The names of the table's rows, top down: the test's own cgroups by what follows
    /// `mark` (the view cuts long names at the start), others as shown.
    fn rows(&self, mark: &str) -> Vec<String> {
        self.pane()
            .lines()
            .skip_while(|l| !l.starts_with("CGROUP"))
            .skip(1)
            .take_while(|l| !l.starts_with(' ') && !l.is_empty())
            .filter_map(|l| l.split_whitespace().next())
            .map(|n| match n.split_once(mark) {
                Some((_, ours)) => ours.to_string(),
                None => n.to_string(),
            })
            .collect()
    }

    /// Waits until the table's rows are `want`, in order.
    fn wait_rows(&self, mark: &str, want: &[&str]) {
        let ok = wait_for(10, || self.rows(mark) == want);
        assert!(ok, "want {want:?}, pane:\n{}", self.pane());
    }

    /// Waits for the shell to have its terminal back: out of the alternate screen, the
    /// prompt shown, and a line typed read as a line (the terminal is not raw).
    fn wait_restored(&self) {
        assert!(wait_for(10, || !self.alternate()), "{}", self.pane());
        // Keys typed before bperf is gone could still go to its input thread.
        assert!(wait_for(10, || self.child_of_shell().is_none()));
        // A number of the shell's making, new each time.
        let n = self.restores.get() + 1;
        self.restores.set(n);
        self.type_text(&format!("echo restored-$(({n}+1000))"));
        self.keys(&["Enter"]);
        let said = format!("\nrestored-{}\n", n + 1000);
        assert!(
            wait_for(10, || self.pane().contains(&said)),
            "the shell did not read a line:\n{}",
            self.pane()
        );
        assert!(
            self.pane().lines().any(|l| l.trim() == "prompt$"),
            "{}",
            self.pane()
        );
    }

    /// The pid of what the pane's shell runs.
    fn child_of_shell(&self) -> Option<i32> {
        let o = Command::new("tmux")
            .args(["display", "-p", "-t", &self.name, "#{pane_pid}"])
            .output()
            .unwrap();
        let shell = String::from_utf8_lossy(&o.stdout).trim().to_string();
        let children =
            std::fs::read_to_string(format!("/proc/{shell}/task/{shell}/children")).ok()?;
        children.split_whitespace().next()?.parse().ok()
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = Command::new("tmux")
            .args(["kill-session", "-t", &self.name])
            .status();
    }
}

/// The full-screen view at 80x24 in tmux: the busy cgroups on top (after the root, which
/// holds everything, idle time included), sorted by CPUs; `r` and `<` change the order;
/// `/` and a name filter the rows; a cgroup made while it runs appears; `q` gives the
/// shell its terminal back.
#[test]
#[ignore = "needs root (make test runs it)"]
fn full_screen_in_tmux() {
    let _s = serial();
    let Some(tmux) = Tmux::start("view") else {
        return;
    };
    let busy = [TestCgroup::new("top-busy1"), TestCgroup::new("top-busy2")];
    let _idle = TestCgroup::new("top-idle");
    let _spin: Vec<Running> = busy.iter().map(|cg| spinner(cg, 60_000)).collect();
    let prefix = format!("bperf-test-{}-top-", std::process::id());
    let mark = format!("{}-top-", std::process::id());
    let bin = common::BPERF_EXE;
    tmux.type_text(&format!("{bin} top -d 0.5"));
    tmux.keys(&["Enter"]);
    // Unfiltered: the root first (it holds everything, idle time included), then the
    // busy ones.
    let on_top = wait_for(15, || {
        let rows = tmux.rows(&mark);
        rows.len() > 3
            && rows[0] == "/"
            && rows[1..3].contains(&"busy1".to_string())
            && rows[1..3].contains(&"busy2".to_string())
    });
    let pane = tmux.pane();
    assert!(on_top, "{pane}");
    assert!(tmux.alternate());
    assert!(pane.lines().next().unwrap().contains(" 2 CPUs "), "{pane}");
    assert!(pane.contains("IPC") && pane.contains("cs/s"), "{pane}");
    // Resized, the view fills the new size: the keys on the last line.
    for (x, y) in [("100", "30"), ("80", "24")] {
        let resize = Command::new("tmux")
            .args(["resize-window", "-t", &tmux.name, "-x", x, "-y", y])
            .status()
            .unwrap();
        assert!(resize.success());
        let lines: usize = y.parse().unwrap();
        let filled = wait_for(10, || {
            let pane = tmux.pane();
            let last = pane.lines().nth(lines - 1).unwrap_or("");
            last.starts_with("j/k move") && pane.lines().count() == lines
        });
        assert!(filled, "{x}x{y}:\n{}", tmux.pane());
    }
    // The filter: only the test's cgroups, the busy ones first.
    tmux.type_text("/");
    tmux.type_text(&prefix);
    tmux.keys(&["Enter"]);
    let filtered = wait_for(10, || {
        let rows = tmux.rows(&mark);
        rows.len() == 3 && rows[2] == "idle"
    });
    assert!(filtered, "{}", tmux.pane());
    // Reversed: the idle one first.
    tmux.keys(&["r"]);
    let reversed = wait_for(10, || tmux.rows(&mark).first().is_some_and(|r| r == "idle"));
    assert!(reversed, "{}", tmux.pane());
    // By name, largest first.
    tmux.keys(&["r", "<"]);
    tmux.wait_rows(&mark, &["idle", "busy2", "busy1"]);
    // A cgroup made now appears.
    let _new = TestCgroup::new("top-new");
    tmux.wait_rows(&mark, &["new", "idle", "busy2", "busy1"]);
    tmux.keys(&["q"]);
    tmux.wait_restored();
}

/// SIGTERM and Ctrl-C also give the shell its terminal back (a panic's restore is
/// tested in src/top/screen.rs, on a pty).
#[test]
#[ignore = "needs root (make test runs it)"]
fn sigterm_and_ctrl_c_restore_the_terminal() {
    let _s = serial();
    let Some(tmux) = Tmux::start("exits") else {
        return;
    };
    let bin = common::BPERF_EXE;
    tmux.type_text(&format!("{bin} top -d 0.2"));
    tmux.keys(&["Enter"]);
    assert!(
        wait_for(15, || tmux.pane().contains("CGROUP")),
        "{}",
        tmux.pane()
    );
    let pid = tmux.child_of_shell().expect("bperf top's pid");
    // SAFETY: plain kill(2) of the process this test started in the pane.
    unsafe { libc::kill(pid, libc::SIGTERM) };
    tmux.wait_restored();
    // Ctrl-C: a key in raw mode.
    tmux.type_text(&format!("{bin} top -d 0.2"));
    tmux.keys(&["Enter"]);
    assert!(wait_for(15, || tmux.alternate() && tmux.pane().contains("CGROUP")));
    tmux.keys(&["C-c"]);
    tmux.wait_restored();
}

/// The state letter of process `pid` in /proc (R, S, T...).
fn state_of(pid: i32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit_once(") ")?.1.chars().next()
}

/// Ctrl-Z stops top as procps top stops: the shell has its terminal back (out of the
/// alternate screen, its prompt read as a line) and bperf is stopped (T); `fg`
/// continues it and the whole screen is back. SIGTSTP from elsewhere does the same. A
/// note from the library while the screen is held (cgroups left out with --max-cgroups
/// 2, on a machine with more) is on the status line, the last, and nowhere else.
#[test]
#[ignore = "needs root (make test runs it)"]
fn ctrl_z_stops_top_and_fg_continues_it() {
    let _s = serial();
    let Some(tmux) = Tmux::start("stop") else {
        return;
    };
    let _more = [TestCgroup::new("top-stop1"), TestCgroup::new("top-stop2")];
    let bin = common::BPERF_EXE;
    tmux.type_text(&format!("{bin} top -d 0.5 --max-cgroups 2"));
    tmux.keys(&["Enter"]);
    let held = || {
        tmux.alternate()
            && tmux
                .pane()
                .lines()
                .nth(1)
                .is_some_and(|l| l.starts_with("CGROUP"))
    };
    assert!(wait_for(15, held), "{}", tmux.pane());
    let pid = tmux.child_of_shell().expect("bperf top's pid");
    let noted = wait_for(5, || {
        let pane = tmux.pane();
        let last = pane.lines().last().unwrap_or("");
        last.contains("cgroups are not counted: all 2 places are taken")
    });
    let pane = tmux.pane();
    assert!(noted, "no note on the status line:\n{pane}");
    let lines: Vec<&str> = pane.lines().collect();
    assert!(lines[0].starts_with("bperf top "), "{pane}");
    assert_eq!(pane.matches("not counted").count(), 1, "{pane}");
    for stop in ["Ctrl-Z", "SIGTSTP"] {
        match stop {
            "Ctrl-Z" => tmux.keys(&["C-z"]),
            // SAFETY: plain kill(2) of the process this test started in the pane.
            _ => assert_eq!(unsafe { libc::kill(pid, libc::SIGTSTP) }, 0),
        }
        let stopped = wait_for(10, || {
            !tmux.alternate()
                && state_of(pid) == Some('T')
                && tmux.pane().lines().any(|l| l.trim() == "prompt$")
        });
        assert!(stopped, "{stop}: {:?}\n{}", state_of(pid), tmux.pane());
        tmux.type_text("fg");
        tmux.keys(&["Enter"]);
        let back = wait_for(10, || held() && state_of(pid).is_some_and(|s| s != 'T'));
        assert!(back, "{stop}, fg: {:?}\n{}", state_of(pid), tmux.pane());
        // The whole screen: the header on top, the keys at the bottom.
        let full = wait_for(10, || {
            let pane = tmux.pane();
            let lines: Vec<&str> = pane.lines().collect();
            lines.len() == 24
                && lines[0].starts_with("bperf top ")
                && (lines[23].contains(" quit") || lines[23].contains("not counted"))
        });
        assert!(full, "{stop}, fg:\n{}", tmux.pane());
    }
    tmux.keys(&["q"]);
    tmux.wait_restored();
}

/// The lines of the table's rows, top down (the tree view indents them).
fn table_lines(pane: &str) -> Vec<String> {
    pane.lines()
        .skip_while(|l| !l.starts_with("CGROUP"))
        .skip(1)
        .take_while(|l| !l.trim().is_empty())
        .map(str::to_string)
        .collect()
}

/// A table line's name (and tree mark) and CPUs, the first figure.
fn name_and_cpus(line: &str) -> (String, f64) {
    let words: Vec<&str> = line.split_whitespace().collect();
    let first_figure = words
        .iter()
        .position(|w| w.parse::<f64>().is_ok())
        .expect(line);
    (
        words[..first_figure].join(" "),
        words[first_figure].parse().unwrap(),
    )
}

/// The tree view (started with --tree): a parent cgroup with a spinning child and an
/// idle one nested under it, the busy child first; the parent's CPUs hold its children's
/// (bperf charges a cgroup's counts to every counted ancestor, as cpu.stat does); Left
/// folds the selected parent (`▸`, its children hidden, its own figures the same), Right
/// unfolds it; `t` gives the flat list, and `t` again the tree.
#[test]
#[ignore = "needs root (make test runs it)"]
fn tree_view_folds_a_parent() {
    let _s = serial();
    let Some(tmux) = Tmux::start("tree") else {
        return;
    };
    let parent = TestCgroup::new("top-tree");
    let busy = parent.child("busy");
    let _idle = parent.child("idle");
    let _spin = spinner(&busy, 60_000);
    let bin = common::BPERF_EXE;
    tmux.type_text(&format!(
        "{bin} top -d 0.5 --tree --for-each-cgroup '{}(/.*)?'",
        parent.name
    ));
    tmux.keys(&["Enter"]);
    let nested = |lines: &[String]| {
        lines.len() == 3
            && lines[0].starts_with("▾ ")
            && lines[0].contains("top-tree")
            && lines[1].starts_with("    busy ")
            && lines[2].starts_with("    idle ")
    };
    assert!(
        wait_for(15, || nested(&table_lines(&tmux.pane()))),
        "{}",
        tmux.pane()
    );
    // Refreshes later, the parent's CPUs at least its busy child's.
    std::thread::sleep(std::time::Duration::from_millis(1200));
    let lines = table_lines(&tmux.pane());
    assert!(nested(&lines), "{lines:?}");
    let (parent_cpus, busy_cpus) = (name_and_cpus(&lines[0]).1, name_and_cpus(&lines[1]).1);
    assert!(busy_cpus > 0.5, "{lines:?}");
    assert!(parent_cpus >= busy_cpus * 0.98, "{lines:?}");
    assert!(name_and_cpus(&lines[2]).1 < 0.01, "{lines:?}");
    // Folded: the parent alone, marked, its figure still about its busy child's.
    tmux.keys(&["Home", "Left"]);
    let folded = wait_for(10, || {
        let lines = table_lines(&tmux.pane());
        lines.len() == 1 && lines[0].starts_with("▸ ") && lines[0].contains("top-tree")
    });
    assert!(folded, "{}", tmux.pane());
    std::thread::sleep(std::time::Duration::from_millis(1200));
    let cpus = name_and_cpus(&table_lines(&tmux.pane())[0]).1;
    assert!(cpus > 0.5, "{}", tmux.pane());
    tmux.keys(&["Right"]);
    assert!(
        wait_for(10, || nested(&table_lines(&tmux.pane()))),
        "{}",
        tmux.pane()
    );
    // Flat again: whole paths, no marks.
    tmux.keys(&["t"]);
    let flat = wait_for(10, || {
        let lines = table_lines(&tmux.pane());
        lines.len() == 3
            && lines
                .iter()
                .all(|l| !l.starts_with(' ') && !l.contains('▾'))
    });
    assert!(flat, "{}", tmux.pane());
    tmux.keys(&["t"]);
    assert!(
        wait_for(10, || nested(&table_lines(&tmux.pane()))),
        "{}",
        tmux.pane()
    );
    tmux.keys(&["q"]);
    tmux.wait_restored();
}

/// --batch, its run-queue columns on by default, with two spinners on one CPU, started after the first refresh and
/// done before the last: each cgroup's wait column, times each refresh's window, adds
/// up to its task's run_delay, and its preemptions to its involuntary switches.
#[test]
#[ignore = "needs root (make test runs it)"]
fn batch_runq_columns_add_up_to_the_tasks_run_delay() {
    let _g = serial();
    let cgs = [TestCgroup::new("top-rq-a"), TestCgroup::new("top-rq-b")];
    let each = format!("{},{}", cgs[0].name, cgs[1].name);
    let mut top = bperf()
        .args(["top", "--batch", "-e", "task-clock", "-d", "1", "-n", "4"])
        .args(["--for-each-cgroup", &each])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(top.stdout.take().unwrap());
    let mut first = String::new();
    while !first.starts_with("bperf top") {
        first.clear();
        assert!(
            out.read_line(&mut first).unwrap() > 0,
            "top printed nothing"
        );
    }
    let spinners = [
        pinned(&cgs[0], 1, &["spin", "1200"]),
        pinned(&cgs[1], 1, &["spin", "1200"]),
    ];
    let reports: Vec<String> = spinners
        .into_iter()
        .map(|s| stderr(&s.wait_with_output().unwrap()))
        .collect();
    let mut rest = String::new();
    out.read_to_string(&mut rest).unwrap();
    assert!(top.wait().unwrap().success());
    let (mut window, mut waited, mut preempted) = (0.0, [0.0; 2], [0.0; 2]);
    let mut columns: Vec<String> = Vec::new();
    for line in rest.lines() {
        let words: Vec<&str> = line.split_whitespace().collect();
        match words.first() {
            Some(&"bperf") => window = window_of(line),
            Some(&"CGROUP") => columns = words.iter().map(|w| w.to_string()).collect(),
            Some(name) => {
                let Some(i) = cgs.iter().position(|c| c.name == *name) else {
                    continue;
                };
                let at = |col: &str| columns.iter().position(|c| c == col).expect(col);
                waited[i] += words[at("wait")].parse::<f64>().unwrap() * window * 1e9;
                preempted[i] += words[at("preempt/s")].parse::<f64>().unwrap() * window;
            }
            None => {}
        }
    }
    for i in 0..2 {
        let delay = report_field(&reports[i], "run_delay_ns");
        let ivcs = report_field(&reports[i], "ivcs");
        eprintln!(
            "{i}: waited {} ms (run_delay {} ms), preempted {} (ivcs {ivcs})",
            waited[i] / 1e6,
            delay / 1e6,
            preempted[i]
        );
        // Each window's figure has three decimals: 0.5 ms of each second.
        let rounding = 100.0 * 4.0 * 0.5e6 / delay;
        let tolerance = runq_tolerance() + rounding;
        assert!(
            within(waited[i], delay, tolerance),
            "{}\n{rest}",
            reports[i]
        );
        assert!(
            within(preempted[i], ivcs, tolerance + 2.0),
            "{}\n{rest}",
            reports[i]
        );
    }
}

/// --runq in the full-screen view: two spinners on one CPU; under the selected row's
/// sparkline, whom it waited behind: the other spinner's cgroup, its share the row's
/// own wait column (the one culprit of the refresh).
#[test]
#[ignore = "needs root (make test runs it)"]
fn runq_view_names_the_selected_rows_culprit() {
    let _s = serial();
    let Some(tmux) = Tmux::start("runq") else {
        return;
    };
    let cgs = [TestCgroup::new("top-rq-x"), TestCgroup::new("top-rq-y")];
    let _spin: Vec<Running> = cgs
        .iter()
        .map(|cg| Running(pinned(cg, 1, &["spin", "60000"])))
        .collect();
    let bin = common::BPERF_EXE;
    let each = format!("{},{}", cgs[0].name, cgs[1].name);
    tmux.type_text(&format!(
        "{bin} top -d 0.5 --runq -e task-clock --for-each-cgroup {each}"
    ));
    tmux.keys(&["Enter"]);
    // The selected row (the first), its wait column and the line of its culprits.
    let seen = || -> Option<(String, f64, String, f64)> {
        let pane = tmux.pane();
        let first = table_lines(&pane).first()?.clone();
        let words: Vec<&str> = first.split_whitespace().collect();
        let wait: f64 = words.get(2)?.parse().ok()?;
        let line = pane.lines().find(|l| l.contains("waited behind:"))?;
        let after = line.split("waited behind:").nth(1)?;
        let parts: Vec<&str> = after.split_whitespace().collect();
        let share: f64 = parts.get(1)?.parse().ok()?;
        Some((words[0].to_string(), wait, parts[0].to_string(), share))
    };
    let settled = wait_for(20, || seen().is_some_and(|(_, wait, _, _)| wait > 0.0));
    let pane = tmux.pane();
    assert!(settled, "{pane}");
    let (row, wait, culprit, share) = seen().expect(&pane);
    let other = match cgs
        .iter()
        .position(|c| row.ends_with(&c.name[c.name.len() - 4..]))
    {
        Some(i) => &cgs[1 - i].name,
        None => panic!("row {row} is neither spinner: {pane}"),
    };
    assert_eq!(&culprit, other, "{pane}");
    assert!((share - wait).abs() <= 0.02 * wait + 0.002, "{pane}");
    tmux.keys(&["q"]);
    tmux.wait_restored();
}
