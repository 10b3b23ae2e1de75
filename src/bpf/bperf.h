/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Layout shared by the BPF program (bperf.bpf.c) and userspace (src/counter.rs).
 * Keep the two in step: Rust mirrors these structs with #[repr(C)].
 */
#ifndef BPERF_H
#define BPERF_H

/* Most events one session can count (perf_event_array has one fd per event per CPU). */
#define BPERF_MAX_EVENTS 64
/* Most monitored cgroups one cgroup's time is charged to (itself and its monitored
 * ancestors, at any depth); userspace refuses sets of cgroups that nest deeper. */
#define BPERF_MAX_LEVELS 64

/* One reading of a counting perf event, as bpf_perf_event_read_value gives it. */
struct bperf_reading {
	__u64 counter;
	__u64 enabled;
	__u64 running;
};

/* The monitored slots a cgroup's time is charged to: itself and its monitored ancestors. */
struct bperf_charge {
	__u32 nr;
	__u32 slot[BPERF_MAX_LEVELS];
};

#endif
