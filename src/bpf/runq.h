/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Layout shared by runq.bpf.c and its loader (src/bpf/runq.rs): run-queue wait and
 * preemptions per monitored cgroup, and by the cgroup that ran instead (the culprit).
 */
#ifndef RUNQ_H
#define RUNQ_H

/* What one monitored cgroup's tasks waited, or what they waited behind one culprit. */
struct runq_wait {
	__u64 wait_ns;     /* runnable, not running: from wake-up or preemption to running */
	__u64 preemptions; /* switched out while still runnable */
};

/* A cell of the culprit matrix: the waiting cgroup's slot, the culprit's. */
struct runq_pair {
	__u32 waiter;
	__u32 culprit;
};

/* A task's wait for a CPU: since when (0: it does not wait), the cgroup it was in
 * then, and for a preempted task the slot of the cgroup that took its CPU, the culprit
 * of what of the wait lies before the CPU's last runs. */
struct runq_waiting {
	__u64 since; /* bpf_ktime_get_ns() */
	__u64 cgid;
	__u32 culprit;   /* preempted: the preemptor's slot (or NO_SLOT) */
	__u32 preempted; /* 0: woken; that part goes to the oldest of the runs */
};

/* The last runs on a CPU, newest at (next - 1) % RUNQ_RUNS: when each began and the
 * slot of the cgroup that ran (NO_SLOT: idle, or no monitored cgroup). A wait ending on
 * the CPU is split among the runs it overlaps. */
#define RUNQ_RUNS 4
struct runq_runs {
	__u64 start[RUNQ_RUNS];
	__u32 slot[RUNQ_RUNS];
	__u32 next;
};

/* The slot of no monitored cgroup: the culprit was unmonitored, or the CPU was idle. */
#define RUNQ_NO_SLOT 0xffffffffU

/* A task switched out still runnable on a CPU, and the slot of the cgroup that took
 * the CPU from it: the culprit of what of its wait lies before the CPU's last runs.
 * Each CPU keeps its last RUNQ_PREEMPTED (bperf.bpf.c). */
#define RUNQ_PREEMPTED 8
struct runq_preempted {
	__u32 tid; /* 0: none */
	__u32 culprit;
};

/* Most monitored cgroups one wait is charged to: the cgroup and its monitored ancestors. */
#define RUNQ_MAX_LEVELS 64

#endif
