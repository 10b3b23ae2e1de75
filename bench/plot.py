"""Draws bench/run's switch-cost PNG from its JSON: added ns per cross-cgroup context
switch against the number of monitored cgroups (log x), one line per tool, one panel per
number of events.

    /usr/bin/python3 bench/plot.py RESULTS.json OUT.png
"""
import json
import sys

import matplotlib
import matplotlib.ticker

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

STYLE = {
    "bperf": dict(color="tab:blue", marker="o"),
    "perf-cgroup": dict(color="tab:red", marker="s"),
    "perf-bpf": dict(color="tab:orange", marker="^"),
}


def main(src, dst):
    with open(src) as f:
        data = json.load(f)
    cross = data["summary"]["switch"].get("cross", {})
    ncgs = sorted(int(n) for n in cross)
    nevs = sorted({int(e) for n in cross.values() for e in n})
    fig, axes = plt.subplots(1, len(nevs), figsize=(4.2 * len(nevs), 4.2), sharey=True,
                             squeeze=False)
    for ax, nev in zip(axes[0], nevs):
        for tool, style in STYLE.items():
            xs, ys, lo, hi = [], [], [], []
            for n in ncgs:
                c = cross[str(n)].get(str(nev), {}).get(tool)
                if c and c.get("added") is not None:
                    xs.append(n)
                    ys.append(c["added"])
                    lo.append(c["added"] - c["added_p25"])
                    hi.append(c["added_p75"] - c["added"])
            if xs:
                ax.errorbar(xs, ys, yerr=[lo, hi], label=tool, capsize=3, linewidth=1.5,
                            **style)
        ax.set_xscale("log")
        ax.set_xticks(ncgs)
        ax.set_xticklabels([str(n) for n in ncgs])
        ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
        ax.axhline(0, color="grey", linewidth=0.8)
        ax.set_title(f"{nev} event{'s' if nev > 1 else ''}")
        ax.set_xlabel("monitored cgroups")
        ax.grid(True, alpha=0.3)
    axes[0][0].set_ylabel("added ns per cross-cgroup switch")
    axes[0][0].legend()
    m = data["machine"]
    fig.suptitle(f"Cost added to a context switch between cgroups (median against the "
                 f"yardstick; bars: 25th-75th percentile)\n{m['nproc']} CPUs, kernel "
                 f"{m['kernel']}, {m['date']}",
                 fontsize=10)
    fig.tight_layout()
    fig.savefig(dst, dpi=110)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
