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

/* A task waiting to run: since when, and the cgroup it was in then. */
struct runq_waiting {
	__u64 since; /* bpf_ktime_get_ns() */
	__u64 cgid;
};

/* Most monitored cgroups one wait is charged to: the cgroup and its monitored ancestors. */
#define RUNQ_MAX_LEVELS 64

#endif
