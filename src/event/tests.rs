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
/// event alphabet must give Ok or Err, never a panic, on a machine with one core PMU
/// and on a hybrid one. The seed corpus is in
/// tests/fixtures/event-corpus.txt.
#[test]
fn fuzz_never_panics() {
    let fixtures = [fixture("intel"), fixture("hybrid-intel")];
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
    for round in 0..20_000 {
        let sysfs = &fixtures[round % 2];
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
        let r = std::panic::catch_unwind(|| parse_events(&input, sysfs));
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
        let Parsed { events, regrouped } = parse(list, &s).unwrap();
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
/// Each parsed event as `name <tab> attr summary <tab> CPUs` (`-` for any), leaders
/// as `@N` after the name.
fn hybrid_view(list: &str, sysfs: &dyn Sources) -> Vec<String> {
    parse_events(list, sysfs)
        .unwrap_or_else(|e| panic!("{list}: {e}"))
        .iter()
        .map(|e| {
            let cpus = e
                .hybrid
                .as_ref()
                .map(|h| {
                    h.cpus
                        .as_deref()
                        .map_or("any".into(), crate::cpus::format_list)
                })
                .unwrap_or_else(|| "-".into());
            let leader = e.leader.map(|l| format!(" @{l}")).unwrap_or_default();
            format!("{}{leader}\t{}\t{cpus}", e.name, summary(&e.attr))
        })
        .collect()
}

/// perf 6.12 on an Alder Lake (tests/fixtures/sysfs/hybrid-intel): legacy hardware and
/// cache events are one event per core PMU, cpu_atom first, the PMU's type in the
/// config's upper half; each on its PMU's CPUs and named with the PMU. The attributes
/// are those perf 6.12 opened on this fixture (tests/it/hybrid.rs checks them live).
#[test]
fn hybrid_intel_events_per_core_pmu() {
    let s = fixture("hybrid-intel");
    let v = |list| hybrid_view(list, &s);
    assert_eq!(
        v("cycles"),
        [
            "cpu_atom/cycles/\t0 0xa00000000 0x0 0x0 [G]\t16-23",
            "cpu_core/cycles/\t0 0x400000000 0x0 0x0 [G]\t0-15",
        ]
    );
    assert_eq!(
        v("instructions:u"),
        [
            "cpu_atom/instructions:u/\t0 0xa00000001 0x0 0x0 [k h G]\t16-23",
            "cpu_core/instructions:u/\t0 0x400000001 0x0 0x0 [k h G]\t0-15",
        ]
    );
    assert_eq!(
        v("L1-dcache-load-misses"),
        [
            "cpu_atom/L1-dcache-load-misses/\t3 0xa00010000 0x0 0x0 [G]\t16-23",
            "cpu_core/L1-dcache-load-misses/\t3 0x400010000 0x0 0x0 [G]\t0-15",
        ]
    );
    // One core PMU's events: its own type, or a legacy event with its type.
    assert_eq!(
        v("cpu_core/cycles/"),
        ["cpu_core/cycles/\t0 0x400000000 0x0 0x0 [G]\t0-15"]
    );
    assert_eq!(
        v("cpu_atom/cpu-cycles/k"),
        ["cpu_atom/cpu-cycles/k\t10 0x3c 0x0 0x0 [u h]\t16-23"]
    );
    assert_eq!(
        v("cpu_atom/L1-icache-loads/"),
        ["cpu_atom/L1-icache-loads/\t3 0xa00000001 0x0 0x0 [G]\t16-23"]
    );
    assert_eq!(
        v("cpu_core/event=0xc0,name=core_insns/"),
        ["core_insns\t4 0xc0 0x0 0x0 [G]\t0-15"]
    );
    // A raw event is cpu_core's, whose type is PERF_TYPE_RAW.
    assert_eq!(v("r1a"), ["cpu_core/r1a/\t4 0x1a 0x0 0x0 [G]\t0-15"]);
    // A bare alias: every core PMU that has it, each with its own encoding.
    assert_eq!(
        v("mem-loads"),
        [
            "cpu_atom/mem-loads/\t10 0x5d0 0x3 0x0 [G]\t16-23",
            "cpu_core/mem-loads/\t4 0x1cd 0x3 0x0 [G]\t0-15",
        ]
    );
    // Not a core PMU's: as on any machine.
    assert_eq!(v("cs"), ["cs\t1 0x3 0x0 0x0 [G]\t-"]);
    assert_eq!(v("msr/tsc/"), ["msr/tsc/\t11 0x0 0x0 0x0 [G]\t-"]);
}

/// perf 6.12's regrouping: groups cannot span core PMUs.
#[test]
fn hybrid_groups_split_by_core_pmu() {
    let s = fixture("hybrid-intel");
    let names = |list| -> (Vec<String>, bool) {
        let p = parse(list, &s).unwrap();
        let names = p
            .events
            .iter()
            .map(|e| {
                format!(
                    "{}@{}",
                    e.name,
                    e.leader.map_or("-".into(), |l| l.to_string())
                )
            })
            .collect();
        (names, p.regrouped)
    };
    assert_eq!(
        names("cs,{cycles,instructions}"),
        (
            vec![
                "cs@-".to_string(),
                "cpu_atom/cycles/@1".into(),
                "cpu_atom/instructions/@1".into(),
                "cpu_core/cycles/@3".into(),
                "cpu_core/instructions/@3".into(),
            ],
            true
        )
    );
    // A software event goes with its leader's PMU, or the first member's; a group left
    // with one member is no group (perf reads it alone).
    assert_eq!(
        names("{cs,cycles}").0,
        ["cs@0", "cpu_atom/cycles/@0", "cpu_core/cycles/@-"]
    );
    assert_eq!(
        names("{cpu_core/cycles/,cs,cpu_core/instructions/}"),
        (
            vec![
                "cpu_core/cycles/@0".to_string(),
                "cs@0".into(),
                "cpu_core/instructions/@0".into()
            ],
            false
        )
    );
    // Only the first event of a group is pinned, as perf pins its leader.
    let ev = parse_events("{cycles,instructions}:D", &s).unwrap();
    let pinned: Vec<bool> = ev.iter().map(|e| e.attr.pinned).collect();
    assert_eq!(pinned, [true, false, false, false]);
}

/// perf 6.12 on a Rockchip RK3588 (tests/fixtures/sysfs/hybrid-arm): two armv8 PMUs of
/// dynamic types, each with its own CPUs.
#[test]
fn hybrid_arm_events_per_core_pmu() {
    let s = fixture("hybrid-arm");
    let v = |list| hybrid_view(list, &s);
    assert_eq!(
        v("cycles,instructions"),
        [
            "armv8_cortex_a55/cycles/\t0 0x800000000 0x0 0x0 [G]\t0-3",
            "armv8_cortex_a76/cycles/\t0 0x900000000 0x0 0x0 [G]\t4-7",
            "armv8_cortex_a55/instructions/\t0 0x800000001 0x0 0x0 [G]\t0-3",
            "armv8_cortex_a76/instructions/\t0 0x900000001 0x0 0x0 [G]\t4-7",
        ]
    );
    assert_eq!(
        v("inst_retired:u"),
        [
            "armv8_cortex_a55/inst_retired:u/\t8 0x8 0x0 0x0 [k h G]\t0-3",
            "armv8_cortex_a76/inst_retired:u/\t9 0x8 0x0 0x0 [k h G]\t4-7",
        ]
    );
    assert_eq!(
        v("armv8_cortex_a76/cpu_cycles/"),
        ["armv8_cortex_a76/cpu_cycles/\t9 0x11 0x0 0x0 [G]\t4-7"]
    );
    assert_eq!(
        v("armv8_cortex_a55/cycles/"),
        ["armv8_cortex_a55/cycles/\t0 0x800000000 0x0 0x0 [G]\t0-3"]
    );
    // No PMU has PERF_TYPE_RAW: the kernel finds the CPU's own.
    assert_eq!(v("r11"), ["r11\t4 0x11 0x0 0x0 [G]\t-"]);
}

/// A kernel before Linux 6.6 cannot name the armv8 PMU in a hardware event: perf then
/// opens one `cycles` for every CPU (the kernel picks each CPU's PMU), but still one
/// cache event per PMU, both without the extended type.
#[test]
fn hybrid_arm_without_extended_type() {
    let s = crate::test_fixtures::sysfs_at(format!(
        "{}/tests/fixtures/sysfs/hybrid-arm/devices",
        env!("CARGO_MANIFEST_DIR")
    ))
    .without_extended_type();
    let v = |list| hybrid_view(list, &s);
    assert_eq!(v("cycles"), ["cycles\t0 0x0 0x0 0x0 [G]\t-"]);
    assert_eq!(
        v("L1-dcache-load-misses"),
        [
            "armv8_cortex_a55/L1-dcache-load-misses/\t3 0x10000 0x0 0x0 [G]\t0-3",
            "armv8_cortex_a76/L1-dcache-load-misses/\t3 0x10000 0x0 0x0 [G]\t4-7",
        ]
    );
    assert_eq!(
        v("armv8_cortex_a55/cycles/"),
        ["armv8_cortex_a55/cycles/\t0 0x0 0x0 0x0 [G]\t0-3"]
    );
}

/// The names perf gives a hybrid event it had to open for user space only: the `u`
/// added before the PMU's name is.
#[test]
fn hybrid_user_only_names() {
    let s = fixture("hybrid-intel");
    let names = |list| -> Vec<String> {
        parse_events(list, &s)
            .unwrap()
            .iter()
            .map(|e| e.user_only_name())
            .collect()
    };
    assert_eq!(
        names("cycles"),
        ["cpu_atom/cycles:u/", "cpu_core/cycles:u/"]
    );
    assert_eq!(
        names("cycles:k"),
        ["cpu_atom/cycles:ku/", "cpu_core/cycles:ku/"]
    );
    assert_eq!(names("cpu_core/cycles/"), ["cpu_core/cycles/u"]);
}

/// Counting CPUs: a hybrid event counts on its PMU's CPUs among them; perf warns about
/// CPUs asked for that a PMU lacks, and breaks up groups whose members are counted on
/// other CPUs than their leader.
#[test]
fn hybrid_events_fit_the_cpus_counted() {
    let s = fixture("hybrid-intel");
    let mut ev = parse_events("cycles,cs", &s).unwrap();
    let w = hybrid::fit_to_cpus(&mut ev, &[0, 1], Some("0-1"));
    assert_eq!(
        w,
        ["WARNING: A requested CPU in '0-1' is not supported by PMU 'cpu_atom' (CPUs 16-23) for event 'cycles'"]
    );
    assert!(!ev[0].counts_on_any(&[0, 1]) && ev[1].counts_on_any(&[0, 1]));
    assert!(ev[2].counts_on_any(&[0, 1]));

    let all: Vec<u32> = (0..24).collect();
    let mut ev = parse_events("{cs,cycles},{cpu_core/cycles/,cpu_core/instructions/}", &s).unwrap();
    let w = hybrid::fit_to_cpus(&mut ev, &all, None);
    assert_eq!(
        w,
        [
            "WARNING: grouped events cpus do not match.",
            "Events with CPUs not matching the leader will be removed from the group.",
            "  anon group { cs, cycles }",
        ]
    );
    let leaders: Vec<Option<usize>> = ev.iter().map(|e| e.leader).collect();
    assert_eq!(leaders, [None, None, None, Some(3), Some(3)]);

    // Counted only on P-cores, a software event and a cpu_core event count on the
    // same CPUs: their group stays.
    let mut ev = parse_events("{cpu_core/cycles/,cs}", &s).unwrap();
    assert!(hybrid::fit_to_cpus(&mut ev, &[0, 1, 2], Some("0-2")).is_empty());
    assert_eq!(ev[1].leader, Some(0));
}

/// A machine with one core PMU is no hybrid: nothing changes (arm64 servers have one
/// armv8 PMU with a `cpus` file).
#[test]
fn one_core_pmu_is_not_hybrid() {
    let s = fixture("intel");
    for e in parse_events("cycles,L1-dcache-loads,r1a,cpu/cpu-cycles/,mem-loads", &s).unwrap() {
        assert!(e.hybrid.is_none(), "{}", e.name);
    }
    // A legacy event's name in a core PMU's terms is that legacy event, unless the PMU
    // has an event of that name (perf 6.12 opens these, tests/it/hybrid.rs checks).
    assert_eq!(summary(&one("cpu/cycles/", &s)), "0 0x0 0x0 0x0 [G]");
    assert_eq!(summary(&one("cpu/branches/", &s)), "0 0x4 0x0 0x0 [G]");
    assert_eq!(
        summary(&one("cpu/L1-dcache-loads/", &s)),
        "3 0x0 0x0 0x0 [G]"
    );
    assert_eq!(
        summary(&one("cpu/instructions/u", &s)),
        "4 0xc0 0x0 0x0 [k h G]"
    );
    // Not on other PMUs.
    assert!(parse_events("msr/cycles/", &s).is_err());
}

/// -M on a hybrid machine: a metric of hardware events is one per core PMU, each from
/// that PMU's events (and the clock, counted everywhere).
#[test]
fn hybrid_metrics_pick_each_pmus_operands() {
    let s = fixture("hybrid-intel");
    let operands: Vec<Vec<Event>> = ["instructions", "cpu-clock"]
        .iter()
        .map(|n| parse_events(n, &s).unwrap())
        .collect();
    let pmus = hybrid::metric_pmus(&operands);
    assert_eq!(pmus, [Some("cpu_atom".into()), Some("cpu_core".into())]);
    let names: Vec<Vec<&str>> = pmus
        .iter()
        .map(|p| {
            operands
                .iter()
                .map(|o| hybrid::on_pmu(o, p.as_deref()).unwrap().name.as_str())
                .collect()
        })
        .collect();
    assert_eq!(
        names,
        [
            ["cpu_atom/instructions/", "cpu-clock"],
            ["cpu_core/instructions/", "cpu-clock"]
        ]
    );
    let plain: Vec<Vec<Event>> = vec![parse_events("cycles", &fixture("intel")).unwrap()];
    assert_eq!(hybrid::metric_pmus(&plain), [None]);
}

#[test]
fn lists_parsed_apart_join_as_parsed_together() {
    let sysfs = fixture("intel");
    let lists = [
        "task-clock,{cycles,instructions}",
        "{cs,faults}:u,cycles",
        "{branches}",
    ];
    let apart: Vec<Vec<Event>> = lists
        .iter()
        .map(|l| parse_events(l, &sysfs).unwrap())
        .collect();
    let together = parse_events(&lists.join(","), &sysfs).unwrap();
    assert_eq!(joined(&apart), together);
    assert!(together.iter().any(|e| e.leader.is_some_and(|l| l >= 3)));
}

#[test]
fn bperfs_own_events_parse_as_written_and_nothing_else_does() {
    let sysfs = fixture("intel");
    let events = parse_events("bperf/runq-wait/,task-clock,bperf/preemptions/", &sysfs).unwrap();
    let tools: Vec<Option<Tool>> = events.iter().map(|e| e.tool).collect();
    assert_eq!(tools, [Some(Tool::RunqWait), None, Some(Tool::Preemptions)]);
    assert_eq!(events[0].name, "bperf/runq-wait/");
    assert_eq!((events[0].attr.type_, events[0].attr.config), (1, DUMMY));
    // perf 7.2 names it as written, not as a tool event.
    assert_eq!(
        events[0].name_with_pmu_72(Some("bperf")),
        "bperf/runq-wait/"
    );
    for bad in [
        "bperf/runq-wait/u",
        "bperf/wait/",
        "runq-wait",
        "bperf/runq-wait/:u",
    ] {
        let e = parse_events(bad, &sysfs).unwrap_err().to_string();
        assert!(!e.contains('\n'), "{bad}: {e}");
    }
}
