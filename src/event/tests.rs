use super::*;

fn fixture(kind: &str) -> impl Sources {
    crate::test_fixtures::sysfs_at(format!(
        "{}/tests/fixtures/sysfs/{kind}/devices",
        env!("CARGO_MANIFEST_DIR")
    ))
}

fn one(s: &str, sysfs: &dyn Sources) -> Attr {
    let ev = parse_events(s, sysfs).unwrap_or_else(|e| panic!("{s}: {e}"));
    assert_eq!(ev.len(), 1, "{s}");
    ev[0].attr
}

/// The attr fields perf prints, in the table's notation: `type config config1 config2
/// [flags]`, flags from u k h I H G D e and pN.
fn summary(a: &Attr) -> String {
    let mut flags = vec![];
    for (on, f) in [
        (a.exclude_user, "u"),
        (a.exclude_kernel, "k"),
        (a.exclude_hv, "h"),
        (a.exclude_idle, "I"),
        (a.exclude_host, "H"),
        (a.exclude_guest, "G"),
        (a.pinned, "D"),
        (a.exclusive, "e"),
    ] {
        if on {
            flags.push(f.to_string());
        }
    }
    if a.precise_ip > 0 {
        flags.push(format!("p{}", a.precise_ip));
    }
    format!(
        "{} {:#x} {:#x} {:#x} [{}]",
        a.type_,
        a.config,
        a.config1,
        a.config2,
        flags.join(" ")
    )
}

/// Attributes recorded from `perf stat -vv -e EVENT true` (Debian's perf 6.1) for
/// events whose encoding does not depend on the machine's PMUs. The integration test
/// `events::table_matches_perf` re-checks the whole table, PMU events included,
/// against the perf on the machine.
#[test]
fn builtin_events_match_perf_table() {
    let table = include_str!("../../tests/fixtures/perf-attrs.tsv");
    let sysfs = fixture("intel");
    let mut checked = 0;
    for line in table.lines() {
        let (ev, want) = line.split_once('\t').unwrap();
        let builtin = want
            .split(" | ")
            .all(|a| matches!(a.split(' ').next(), Some("0" | "1" | "3" | "4")));
        if !builtin {
            continue;
        }
        let got: Vec<String> = parse_events(ev, &sysfs)
            .unwrap_or_else(|e| panic!("{ev}: {e}"))
            .iter()
            .map(|e| summary(&e.attr))
            .collect();
        assert_eq!(got.join(" | "), want, "event '{ev}'");
        checked += 1;
    }
    assert!(checked > 100, "only {checked} table rows checked");
}

#[test]
fn intel_fixture_pmu_events() {
    let s = fixture("intel");
    assert_eq!(summary(&one("cpu/event=0x3c/", &s)), "4 0x3c 0x0 0x0 [G]");
    assert_eq!(
        summary(&one("cpu/event=0xc0,umask=0x1/u", &s)),
        "4 0x1c0 0x0 0x0 [k h G]"
    );
    assert_eq!(
        summary(&one("cpu/event=0xd0,umask=0x81,cmask=2,inv,edge/", &s)),
        "4 0x28481d0 0x0 0x0 [G]"
    );
    assert_eq!(summary(&one("cpu/cpu-cycles/", &s)), "4 0x3c 0x0 0x0 [G]");
    assert_eq!(
        summary(&one("cpu/mem-loads,ldlat=30/", &s)),
        "4 0x1cd 0x1e 0x0 [G]"
    );
    assert_eq!(
        summary(&one("cpu/offcore_rsp=0x10001,event=0xb7,umask=1/", &s)),
        "4 0x1b7 0x10001 0x0 [G]"
    );
    assert_eq!(
        summary(&one("cpu/in_tx,event=0x3c/", &s)),
        "4 0x10000003c 0x0 0x0 [G]"
    );
    assert_eq!(
        summary(&one("cpu/config=0x1234,config1=5,config2=0x9/k", &s)),
        "4 0x1234 0x5 0x9 [u h]"
    );
    assert_eq!(
        summary(&one("uncore_imc_0/cas_count_read/", &s)),
        "17 0x304 0x0 0x0 [G]"
    );
    assert_eq!(summary(&one("msr/tsc/", &s)), "9 0x0 0x0 0x0 [G]");
    assert_eq!(summary(&one("aperf", &s)), "9 0x1 0x0 0x0 [G]");
    assert_eq!(summary(&one("mem-loads:pp", &s)), "4 0x1cd 0x3 0x0 [G p2]");
    assert_eq!(
        summary(&one("sched:sched_switch", &s)),
        "2 0x13c 0x0 0x0 [G]"
    );
    assert_eq!(
        summary(&one("sched:sched_switch:k", &s)),
        "2 0x13c 0x0 0x0 [u h]"
    );
    let named = parse_events("cpu/event=0x3c,name=my_cycles/", &s).unwrap();
    assert_eq!(named[0].name, "my_cycles");
}

#[test]
fn amd_fixture_split_event_field() {
    let s = fixture("amd");
    // AMD's event field is config:0-7,32-35: the high nibble lands at bit 32.
    assert_eq!(
        summary(&one("cpu/event=0x1c0/", &s)),
        "4 0x1000000c0 0x0 0x0 [G]"
    );
    assert_eq!(
        summary(&one("cpu/event=0xfff,umask=0xff/", &s)),
        "4 0xf0000ffff 0x0 0x0 [G]"
    );
    assert_eq!(summary(&one("cpu/cpu-cycles/", &s)), "4 0x76 0x0 0x0 [G]");
    assert_eq!(summary(&one("power/energy-pkg/", &s)), "12 0x2 0x0 0x0 [G]");
    assert_eq!(
        summary(&one("ibs_op/cnt_ctl=1/", &s)),
        "11 0x80000 0x0 0x0 [G]"
    );
    let err = parse_events("cpu/event=0x1000/", &s)
        .unwrap_err()
        .to_string();
    assert!(err.contains("too big") && err.contains("0xfff"), "{err}");
}

#[test]
fn groups_have_leaders() {
    let s = fixture("intel");
    let ev = parse_events(
        "cs,{task-clock,page-faults}:u,msr/tsc/,{cycles,msr/tsc/,instructions}",
        &s,
    )
    .unwrap();
    let leaders: Vec<Option<usize>> = ev.iter().map(|e| e.leader).collect();
    assert_eq!(
        leaders,
        [None, Some(1), Some(1), None, Some(4), Some(4), Some(4)]
    );
    let names: Vec<&str> = ev.iter().map(|e| e.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "cs",
            "task-clock",
            "page-faults",
            "msr/tsc/",
            "cycles",
            "msr/tsc/",
            "instructions"
        ]
    );
}

#[test]
fn bad_strings_give_one_clear_line() {
    let s = fixture("intel");
    for (input, want) in [
        ("cyclez", "unknown event 'cyclez' (did you mean 'cycles'"),
        ("task-clok", "did you mean 'task-clock'"),
        (
            "L1-dcache-lod-misses",
            "did you mean 'L1-dcache-load-misses'",
        ),
        ("cycles:x", "unknown modifier 'x'"),
        ("cycles:pppp", "precise level 4"),
        ("cpu/event=zz/", "'zz' is not a number"),
        ("cpu/bogus=1/", "unknown term 'bogus' for PMU 'cpu'"),
        ("cpu/event=0x100/", "too big for format field 'event'"),
        ("nopmu/event=1/", "unknown PMU 'nopmu'"),
        ("cpu/event=1", "missing '/'"),
        ("cycles,,cs", "empty event"),
        ("", "empty event"),
        ("{cycles,{cs}}", "cannot nest"),
        ("{cycles,cs", "without '}'"),
        ("cycles}", "without '{'"),
        ("{cycles}x", "unexpected 'x' after group"),
        ("{cycles}:z", "unknown modifier 'z'"),
        ("r", "unknown event 'r'"),
        ("rxyz", "unknown event 'rxyz'"),
        ("r12345678901234567", "unknown event"),
    ] {
        let err = parse_events(input, &s).map(|_| ()).unwrap_err().to_string();
        assert!(err.contains(want), "{input:?}: got {err:?}, want {want:?}");
        assert!(!err.contains('\n'), "{input:?}: {err:?}");
    }
}

#[test]
fn default_events_parse() {
    let ev = parse_events(DEFAULT_EVENTS, &fixture("amd")).unwrap();
    assert_eq!(ev.len(), 8);
}

/// A small deterministic fuzzer: mutations of valid strings and random bytes from the
/// event alphabet must give Ok or Err, never a panic. The seed corpus is in
/// tests/fixtures/event-corpus.txt.
#[test]
fn fuzz_never_panics() {
    let sysfs = fixture("intel");
    let corpus = include_str!("../../tests/fixtures/event-corpus.txt");
    let seeds: Vec<&str> = corpus.lines().filter(|l| !l.is_empty()).collect();
    let alphabet = b"abcdeklmpruxyzGHDIPSWe0123456789/=,:{}-_.x ";
    let mut rng = 0x2545_f491_4f6c_dd1du64;
    let mut next = move || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    for _ in 0..20_000 {
        let mut s: Vec<u8> = seeds[next() as usize % seeds.len()].as_bytes().to_vec();
        for _ in 0..1 + next() % 4 {
            let pos = if s.is_empty() {
                0
            } else {
                next() as usize % (s.len() + 1)
            };
            let c = alphabet[next() as usize % alphabet.len()];
            match next() % 3 {
                0 => s.insert(pos, c),
                1 if pos < s.len() => s[pos] = c,
                _ if pos < s.len() => {
                    s.remove(pos);
                }
                _ => s.push(c),
            }
        }
        let input = String::from_utf8_lossy(&s).into_owned();
        let r = std::panic::catch_unwind(|| parse_events(&input, &sysfs));
        match r {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => assert!(!e.to_string().contains('\n'), "{input:?}"),
            Err(_) => panic!("parser panicked on {input:?}"),
        }
    }
}

/// perf 6.12's names with -A: the PMU added unless the name starts with it.
#[test]
fn names_with_their_pmu() {
    let s = fixture("intel");
    let name = |e: &str| {
        let ev = &parse_events(e, &s).unwrap()[0];
        ev.name_with_pmu(pmu_name(ev.attr.type_, &s).as_deref())
    };
    assert_eq!(name("cs"), "cs [software]");
    assert_eq!(name("cycles"), "cycles [cpu]");
    assert_eq!(name("msr/tsc/"), "msr/tsc/");
    assert_eq!(name("tsc"), "tsc [msr]");
    assert_eq!(
        name("sched:sched_switch"),
        "sched:sched_switch [tracepoint]"
    );
    let amd = fixture("amd");
    let ev = &parse_events("ibs_op/cnt_ctl=1/", &amd).unwrap()[0];
    assert_eq!(ev.name_with_pmu(Some("ibs_op")), "ibs_op/cnt_ctl=1/");
}

/// perf's names for the events it adds itself: the modifiers their attrs say, as perf
/// 6.12 prints them (`task-clock:uhH` with --all-user); never their PMU.
#[test]
fn builtin_names_carry_their_modifiers() {
    let s = fixture("intel");
    let name = |e: &str, user: Option<bool>| {
        let mut ev = parse_events(e, &s).unwrap().remove(0);
        ev.naming = Naming::Builtin;
        if let Some(user) = user {
            (ev.attr.exclude_kernel, ev.attr.exclude_user) = (user, !user);
        }
        Event::builtin_name(&ev.name, &ev.attr)
    };
    assert_eq!(name("task-clock", None), "task-clock");
    assert_eq!(name("task-clock", Some(true)), "task-clock:uhH");
    assert_eq!(name("L1-dcache-loads", Some(false)), "L1-dcache-loads:khH");
    let mut precise = one("cycles", &s);
    precise.precise_ip = 1;
    assert_eq!(Event::builtin_name("cycles", &precise), "cycles:pH");
    let mut ev = parse_events("cs", &s).unwrap().remove(0);
    ev.naming = Naming::Builtin;
    assert_eq!(ev.name_with_pmu(Some("software")), "cs");
}

/// perf 6.12's regrouping: a group's members sorted by the PMU they are counted on
/// (msr counts as a software PMU, so its event leaves a software group and goes first),
/// split where it changes; a group of one is a lone event.
#[test]
fn groups_are_regrouped_by_pmu() {
    let s = fixture("intel");
    let order = |list: &str| {
        let (events, regrouped) = parse_and_regroup(list, &s).unwrap();
        let names: Vec<String> = events
            .iter()
            .map(|e| {
                format!(
                    "{}{}",
                    e.name,
                    e.leader.map_or(String::new(), |l| format!("@{l}"))
                )
            })
            .collect();
        (names.join(" "), regrouped)
    };
    assert_eq!(order("{cs,faults}"), ("cs@0 faults@0".into(), false));
    assert_eq!(
        order("{cs,msr/tsc/,faults}"),
        ("msr/tsc/ cs@1 faults@1".into(), true)
    );
    assert_eq!(order("{msr/tsc/,cs}"), ("msr/tsc/ cs".into(), true));
    // A hardware member takes its software siblings into its group.
    assert_eq!(
        order("task-clock,{cs,cycles,faults}"),
        ("task-clock cs@1 cycles@1 faults@1".into(), false)
    );
}
