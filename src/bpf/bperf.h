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

/* Most slots of one tracked process or thread (struct bperf_proc). */
#define BPERF_PROC_SLOTS 2
/* Most slots one stretch of time is charged to: the running task's cgroup and its
 * monitored ancestors, then (shared counters only) the slots of its process and thread. */
#define BPERF_MAX_CHARGE (BPERF_MAX_LEVELS + 2 * BPERF_PROC_SLOTS)

/* The slots a stretch of time is charged to. */
struct bperf_charge {
	__u32 nr;
	__u32 slot[BPERF_MAX_CHARGE];
};

/* Shared counters: a tracked process (keyed by tgid) or thread (keyed by tid). */
struct bperf_proc {
	__u32 slot[BPERF_PROC_SLOTS]; /* slot + 1 of each session target it counts for; 0: none */
	__u32 inherit;                /* bit k: children join slot[k] when they are forked */
};

/*
 * Shared counters: what the sessions change while the program runs, in the program's
 * .bss (mapped by every session). In a counter of one session these are read-only data
 * instead (see LIVE in bperf.bpf.c).
 */
struct bperf_live {
	__u32 nr_events;     /* events at index >= nr_events are not read */
	__u32 nr_procs;      /* tracked processes and threads: 0 skips looking tasks up */
	__u64 slots_gen;     /* bumped whenever a slot, or a tracked task's slots, change */
	__u64 always_running;
	__u64 plain_count;
	__u64 cpu_clock;
	__u64 task_clock;
	__u64 rq_switches;
	__u32 event_gen[BPERF_MAX_EVENTS]; /* bumped whenever event i is added or removed */
};

/* bperf record: the stretch of time one CPU charged a monitored cgroup for one task,
 * from when the task (or the cgroup) came to when it went, or to a read (a cut). */
#define BPERF_SLICE_CUT 1 /* ended by a read: the task runs on into the next slice */
struct bperf_slice {
	__u64 start;  /* the CPU's clock (see cpu_clock_now in bperf.bpf.c), ns */
	__u64 length; /* ns */
	__u64 cgid;   /* the cgroup the task ran in, monitored or not */
	__u32 cpu;
	__u32 slot;   /* the innermost monitored cgroup charged; its monitored ancestors were too */
	__u32 pid;    /* process id (tgid) */
	__u32 tid;
	char comm[16];
	__u32 nr_events;
	__u32 flags;  /* BPERF_SLICE_* */
	struct bperf_reading delta[BPERF_MAX_EVENTS]; /* nr_events of them are sent */
};

#endif
