// SPDX-License-Identifier: GPL-2.0
/*
 * Run-queue wait and preemptions per monitored cgroup, split by the cgroup that ran on
 * the CPU instead (the culprit). Loaded only when asked for (serve --runq): without it
 * nothing here runs.
 *
 * A task starts waiting when it is woken (sched_wakeup, sched_wakeup_new) or switched
 * out while still runnable (a preemption: sched_switch with preempt set or the task still
 * TASK_RUNNING, as the kernel counts nr_involuntary_switches), and stops when it is
 * switched in: schedstat's run_delay, timed with bpf_ktime_get_ns(). The wait is charged
 * to the cgroup the task was in when it started waiting, and to its monitored
 * ancestors, and split among the culprits: the cgroups whose tasks ran on the CPU
 * while it waited, as far back as the CPU's last RUNQ_RUNS runs go. What lies before
 * them goes to the cgroup of the task that preempted it (next of the switch-out), or
 * for a woken task to the oldest of those runs. A preemption's culprit is the
 * preemptor's cgroup.
 */
#include "types.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_tracing.h>
#include "runq.h"
#include "runq_maps.h"

char LICENSE[] SEC("license") = "GPL";

/* Set by userspace before load: the perf_event controller is on a cgroup v1 hierarchy. */
const volatile bool use_v1 = false;

/* Monitored cgroups: cgroup id -> slot. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__type(key, __u64);
	__type(value, __u32);
	__uint(max_entries, 1);
} cgrp_slot SEC(".maps");

/* Per CPU: its last runs. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, struct runq_runs);
	__uint(max_entries, 1);
} cpu_runs SEC(".maps");

/* Tasks by thread id: since when each waits (0: it does not). LRU: the entries of
 * tasks that exited go as the map fills. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__type(key, __u32);
	__type(value, struct runq_waiting);
	__uint(max_entries, 65536);
} waiting SEC(".maps");

#include "task_state.h"

#include "task_cgroup.h"

static __always_inline __u64 cgroup_id(struct task_struct *task)
{
	struct cgroup *cg = task_cgroup(task->cgroups);

	return cg ? cg->kn->id : 0;
}

/* The slot of @cg or of its nearest monitored ancestor; RUNQ_NO_SLOT if none is monitored. */
static __always_inline __u32 innermost_slot(struct cgroup *cg)
{
	for (int i = 0; i < RUNQ_MAX_LEVELS && cg; i++) {
		__u64 id = cg->kn->id;
		__u32 *slot = bpf_map_lookup_elem(&cgrp_slot, &id);
		struct cgroup_subsys_state *parent;

		if (slot)
			return *slot;
		parent = cg->self.parent;
		cg = parent ? parent->cgroup : 0;
	}
	return RUNQ_NO_SLOT;
}

/* Charge cgroup @cg and each of its monitored ancestors with a wait or a preemption
 * behind @culprit. */
static __always_inline void charge(struct cgroup *cg, __u32 culprit, __u64 wait_ns, __u64 preemptions)
{
	for (int i = 0; i < RUNQ_MAX_LEVELS && cg; i++) {
		__u64 id = cg->kn->id;
		__u32 *slot = bpf_map_lookup_elem(&cgrp_slot, &id);
		struct cgroup_subsys_state *parent;

		if (slot)
			runq_charge_slot(*slot, culprit, wait_ns, preemptions);
		parent = cg->self.parent;
		cg = parent ? parent->cgroup : 0;
	}
}

/* @task starts waiting for a CPU now: woken, or preempted by a task of slot @culprit. */
static __always_inline void start_waiting(struct task_struct *task, __u64 now, bool preempted,
					  __u32 culprit)
{
	struct runq_waiting w = {
		.since = now,
		.cgid = cgroup_id(task),
		.culprit = culprit,
		.preempted = preempted,
	};
	__u32 tid = task->pid;
	struct runq_waiting *known = bpf_map_lookup_elem(&waiting, &tid);

	/* In place when the task has an entry: an LRU map's update allocates anew. */
	if (known)
		*known = w;
	else
		bpf_map_update_elem(&waiting, &tid, &w, BPF_ANY);
}

SEC("tp_btf/sched_wakeup")
int BPF_PROG(runq_on_wakeup, struct task_struct *task)
{
	start_waiting(task, bpf_ktime_get_ns(), false, RUNQ_NO_SLOT);
	return 0;
}

SEC("tp_btf/sched_wakeup_new")
int BPF_PROG(runq_on_wakeup_new, struct task_struct *task)
{
	start_waiting(task, bpf_ktime_get_ns(), false, RUNQ_NO_SLOT);
	return 0;
}

/* Charges @ns of a wait behind @culprit: to @cg and its monitored ancestors, or when
 * @cg is 0 (the task changed cgroups while it waited) to the slot @moved_from alone. */
static __always_inline void charge_wait(struct cgroup *cg, __u32 *moved_from, __u32 culprit, __u64 ns)
{
	if (!ns)
		return;
	if (cg)
		charge(cg, culprit, ns, 0);
	else if (moved_from)
		runq_charge_slot(*moved_from, culprit, ns, 0);
}

/* Splits the wait [@since, @now) among the CPU's last runs, newest first; what they do
 * not cover goes to @w's preemptor, or for a woken task to the oldest run seen. */
static __always_inline void split_wait(struct runq_runs *runs, struct runq_waiting *w, __u64 since,
				       __u64 now, struct cgroup *cg, __u32 *moved_from)
{
	__u32 rest_to = w->preempted ? w->culprit : RUNQ_NO_SLOT;
	__u64 end = now;

	for (int i = 1; i <= RUNQ_RUNS && end > since; i++) {
		__u32 k = (runs->next - i) & (RUNQ_RUNS - 1);
		__u64 start = runs->start[k];

		if (!start)
			break;
		if (!w->preempted)
			rest_to = runs->slot[k];
		charge_wait(cg, moved_from, runs->slot[k], end - (start > since ? start : since));
		end = start;
	}
	if (end > since)
		charge_wait(cg, moved_from, rest_to, end - since);
}

/* @next gets the CPU at @now: its wait, if it was waiting, ends, charged to the cgroup
 * it started waiting in and split among the runs it waited behind. */
static __always_inline void stop_waiting(struct task_struct *next, struct runq_runs *runs, __u64 now)
{
	struct cgroup *cg = task_cgroup(next->cgroups);
	__u32 tid = next->pid, *moved_from = 0;
	struct runq_waiting *w;
	__u64 since;

	w = bpf_map_lookup_elem(&waiting, &tid);
	if (!w)
		return;
	since = w->since;
	/* A task moved to another cgroup while it waited: its wait stays its old
	 * cgroup's; only the innermost monitored one is known by id alone. */
	if (cg && w->cgid != cg->kn->id) {
		__u64 old = w->cgid;

		moved_from = bpf_map_lookup_elem(&cgrp_slot, &old);
		cg = 0;
	}
	if (since && now > since && (cg || moved_from))
		split_wait(runs, w, since, now, cg, moved_from);
	/* Not waiting; the entry stays for the task's next wait. */
	w->since = 0;
}

/* The slot of the cgroup of @task; RUNQ_NO_SLOT for the idle task or none monitored. */
static __always_inline __u32 slot_of(struct task_struct *task)
{
	return task->pid ? innermost_slot(task_cgroup(task->cgroups)) : RUNQ_NO_SLOT;
}

SEC("tp_btf/sched_switch")
int BPF_PROG(runq_on_switch, bool preempt, struct task_struct *prev, struct task_struct *next)
{
	__u64 now = bpf_ktime_get_ns();
	__u32 tid = prev->pid, zero = 0, next_slot = slot_of(next);
	struct runq_runs *runs = bpf_map_lookup_elem(&cpu_runs, &zero);

	if (!runs)
		return 0;
	if (tid && (preempt || still_runnable(prev))) {
		struct cgroup *cg = task_cgroup(prev->cgroups);

		start_waiting(prev, now, true, next_slot);
		if (cg)
			charge(cg, next_slot, 0, 1);
	}
	/* A task that blocks needs nothing: its wake-up starts its next wait. */
	if (next->pid)
		stop_waiting(next, runs, now);
	runs->start[runs->next & (RUNQ_RUNS - 1)] = now;
	runs->slot[runs->next & (RUNQ_RUNS - 1)] = next_slot;
	runs->next++;
	return 0;
}
