// SPDX-License-Identifier: GPL-2.0
/*
 * Run-queue wait and preemptions per monitored cgroup, split by the cgroup that ran on
 * the CPU instead (the culprit). Loaded only when asked for (bperf's runq events,
 * serve --runq): without it nothing here runs.
 *
 * A task starts waiting when it is woken (sched_wakeup, sched_wakeup_new) or switched
 * out while still runnable (a preemption: sched_switch with preempt set or prev_state
 * TASK_RUNNING, as the kernel counts nr_involuntary_switches), and stops when it is
 * switched in: schedstat's run_delay, timed with bpf_ktime_get_ns(). The wait is charged
 * to the cgroup the task was in when it started waiting, and to its monitored
 * ancestors, and all of it to one culprit: the cgroup of the task that ran on the CPU
 * just before the waiting task got it (prev of the switch-in). A preemption's culprit
 * is the cgroup of the task that takes the CPU (next of the switch-out).
 */
#include "types.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_tracing.h>
#include "runq.h"

/* uapi constants (include/uapi/linux/bpf.h) that types.h, shared with bperf.bpf.c,
 * leaves out. */
#define RUNQ_MAP_PERCPU_HASH 5
#define RUNQ_MAP_LRU_HASH 9
#define RUNQ_NOEXIST 1

char LICENSE[] SEC("license") = "GPL";

/* Set by userspace before load. */
const volatile __u32 nr_slots = 1;  /* monitored cgroups */
const volatile bool use_v1 = false; /* perf_event controller on a cgroup v1 hierarchy */

/* Monitored cgroups: cgroup id -> slot. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__type(key, __u64);
	__type(value, __u32);
	__uint(max_entries, 1);
} cgrp_slot SEC(".maps");

/* Per monitored cgroup (slot), per CPU: what its tasks waited, all culprits together. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, struct runq_wait);
	__uint(max_entries, 1);
} totals SEC(".maps");

/* Per (waiting slot, culprit slot), per CPU: the culprit matrix. Bounded: a pair that
 * finds it full is left out, and userspace counts what the totals have beyond the
 * pairs as "other" (with the culprits nobody monitors). */
struct {
	__uint(type, RUNQ_MAP_PERCPU_HASH);
	__type(key, struct runq_pair);
	__type(value, struct runq_wait);
	__uint(max_entries, 1);
} pairs SEC(".maps");

/* Waiting tasks, by thread id. LRU: a task that exits while waiting is forgotten. */
struct {
	__uint(type, RUNQ_MAP_LRU_HASH);
	__type(key, __u32);
	__type(value, struct runq_waiting);
	__uint(max_entries, 65536);
} waiting SEC(".maps");

/* The slot of no monitored cgroup: the culprit was unmonitored, or the CPU was idle. */
#define NO_SLOT 0xffffffffU

/* The cgroup of a task (its css_set @css) in the hierarchy that holds the perf_event
 * controller, as bperf.bpf.c finds it. */
static __always_inline struct cgroup *task_cgroup(struct css_set *css)
{
	if (use_v1) {
		int id = bpf_core_enum_value(enum cgroup_subsys_id, perf_event_cgrp_id);
		struct cgroup_subsys_state *ss;

		if (id < 0 || id >= 14)
			return 0;
		ss = css->subsys[id];
		return ss ? ss->cgroup : 0;
	}
	return css->dfl_cgrp;
}

static __always_inline __u64 cgroup_id(struct task_struct *task)
{
	struct cgroup *cg = task_cgroup(task->cgroups);

	return cg ? cg->kn->id : 0;
}

/* The slot of @cg or of its nearest monitored ancestor; NO_SLOT if none is monitored. */
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
	return NO_SLOT;
}

static __always_inline void add(struct runq_wait *w, __u64 wait_ns, __u64 preemptions)
{
	w->wait_ns += wait_ns;
	w->preemptions += preemptions;
}

/* Charge one waiting slot with a wait or a preemption behind @culprit. */
static __always_inline void charge_slot(__u32 slot, __u32 culprit, __u64 wait_ns, __u64 preemptions)
{
	struct runq_pair key = { .waiter = slot, .culprit = culprit };
	struct runq_wait *w, zero = {};

	w = bpf_map_lookup_elem(&totals, &slot);
	if (w)
		add(w, wait_ns, preemptions);
	if (culprit == NO_SLOT)
		return;
	w = bpf_map_lookup_elem(&pairs, &key);
	if (!w) {
		bpf_map_update_elem(&pairs, &key, &zero, RUNQ_NOEXIST);
		w = bpf_map_lookup_elem(&pairs, &key);
	}
	if (w)
		add(w, wait_ns, preemptions);
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
			charge_slot(*slot, culprit, wait_ns, preemptions);
		parent = cg->self.parent;
		cg = parent ? parent->cgroup : 0;
	}
}

/* @task starts waiting for a CPU now. */
static __always_inline void start_waiting(struct task_struct *task, __u64 now)
{
	struct runq_waiting w = { .since = now, .cgid = cgroup_id(task) };
	__u32 tid = task->pid;

	bpf_map_update_elem(&waiting, &tid, &w, BPF_ANY);
}

SEC("tp_btf/sched_wakeup")
int BPF_PROG(runq_on_wakeup, struct task_struct *task)
{
	start_waiting(task, bpf_ktime_get_ns());
	return 0;
}

SEC("tp_btf/sched_wakeup_new")
int BPF_PROG(runq_on_wakeup_new, struct task_struct *task)
{
	start_waiting(task, bpf_ktime_get_ns());
	return 0;
}

/* @next got the CPU from @prev at @now: its wait, if it was waiting, ends, charged to
 * the cgroup it started waiting in, behind @prev's. */
static __always_inline void stop_waiting(struct task_struct *prev, struct task_struct *next, __u64 now)
{
	struct cgroup *cg = task_cgroup(next->cgroups);
	__u32 tid = next->pid, culprit = NO_SLOT;
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
		__u32 *slot = bpf_map_lookup_elem(&cgrp_slot, &old);

		cg = 0;
		if (slot && prev->pid)
			culprit = innermost_slot(task_cgroup(prev->cgroups));
		if (slot && now > since)
			charge_slot(*slot, culprit, now - since, 0);
	}
	bpf_map_delete_elem(&waiting, &tid);
	if (!cg || now <= since)
		return;
	if (prev->pid)
		culprit = innermost_slot(task_cgroup(prev->cgroups));
	charge(cg, culprit, now - since, 0);
}

SEC("tp_btf/sched_switch")
int BPF_PROG(runq_on_switch, bool preempt, struct task_struct *prev, struct task_struct *next,
	     unsigned int prev_state)
{
	__u64 now = bpf_ktime_get_ns();
	__u32 tid = prev->pid;

	if (tid && (preempt || prev_state == 0)) {
		struct cgroup *cg = task_cgroup(prev->cgroups);
		__u32 culprit = next->pid ? innermost_slot(task_cgroup(next->cgroups)) : NO_SLOT;

		start_waiting(prev, now);
		if (cg)
			charge(cg, culprit, 0, 1);
	} else if (tid) {
		bpf_map_delete_elem(&waiting, &tid);
	}
	if (next->pid)
		stop_waiting(prev, next, now);
	return 0;
}
