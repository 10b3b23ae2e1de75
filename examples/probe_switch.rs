//! Loads a BPF object and attaches each of its programs in turn, to time what one
//! sched_switch program costs per run (kernel BPF stats) while something switches.
//! Usage: probe_switch OBJECT SECONDS
fn stats(name: &str) -> (u64, u64) {
    libbpf_rs::query::ProgInfoIter::default()
        .find(|i| i.name.to_string_lossy() == name)
        .map(|i| (i.run_time_ns, i.run_cnt))
        .unwrap_or((0, 0))
}

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let secs: u64 = args[2].parse()?;
    let stats_file = "/proc/sys/kernel/bpf_stats_enabled";
    let was = std::fs::read_to_string(stats_file)?;
    std::fs::write(stats_file, "1")?;
    let open = libbpf_rs::ObjectBuilder::default().open_file(&args[1])?;
    let obj = open.load()?;
    for prog in obj.progs_mut() {
        let name = prog.name().to_string_lossy().into_owned();
        let link = prog.attach()?;
        let (t0, c0) = stats(&name);
        std::thread::sleep(std::time::Duration::from_secs(secs));
        let (t1, c1) = stats(&name);
        drop(link);
        let n = (c1 - c0).max(1);
        println!(
            "{name}: {:.1} ns per run over {n} runs",
            (t1 - t0) as f64 / n as f64
        );
    }
    std::fs::write(stats_file, was.trim())?;
    Ok(())
}
