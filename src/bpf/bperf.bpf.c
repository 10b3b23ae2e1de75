// SPDX-License-Identifier: GPL-2.0
/*
 * Per-cgroup counting on top of one counting perf event per (event, CPU).
 *
 * Every CPU remembers the cgroup its current task belongs to and the last reading of
 * each counter. Whenever that cgroup may change (a task switch, a task moving itself to
 * another cgroup, or a flush asked for by userspace) the program reads the counters,
 * charges the deltas to the remembered cgroup and to each of its monitored ancestors,
 * and then remembers the new cgroup. Time is therefore always charged to the cgroup that
 * really ran it, even when a task moves itself into a cgroup while it is running.
 *
 * Switches that stay inside one cgroup, and switches between cgroups nobody monitors,
 * end before any counter is read.
 */
#include "types.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_tracing.h>
#include "bperf.h"

char LICENSE[] SEC("license") = "GPL";

/* Set by userspace before load. */
const volatile __u32 nr_events = 1;
const volatile __u32 nr_cpus = 1;  /* possible CPUs: stride of the event and count arrays */
const volatile __u32 nr_slots = 1; /* monitored cgroups */
const volatile bool use_v1 = false; /* perf_event controller on a cgroup v1 hierarchy */

/* The counting perf events, at index event * nr_cpus + cpu. */
struct {
	__uint(type, BPF_MAP_TYPE_PERF_EVENT_ARRAY);
	__uint(key_size, sizeof(__u32));
	__uint(value_size, sizeof(__u32));
	__uint(max_entries, 1);
} events SEC(".maps");

/* Monitored cgroups: cgroup id -> slot. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__type(key, __u64);
	__type(value, __u32);
	__uint(max_entries, 1);
} cgrp_slot SEC(".maps");

/* Accumulated deltas at index (cpu * nr_slots + slot) * nr_events + event; mmapped by userspace. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_MMAPABLE);
	__type(key, __u32);
	__type(value, struct bperf_reading);
	__uint(max_entries, 1);
} counts SEC(".maps");

/* What one CPU is charging right now. */
struct cpu_state {
	struct css_set *css;     /* css_set of the task last switched in; 0 before the first look */
	__u64 cgid;              /* id of the cgroup being charged */
	__u32 busy;              /* bperf_on_attach is running (a flush IPI may interrupt it) */
	struct bperf_charge charge; /* its monitored slots (itself and monitored ancestors) */
	struct bperf_reading prev[BPERF_MAX_EVENTS]; /* last reading of each event on this CPU */
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, struct cpu_state);
	__uint(max_entries, 1);
} cpu_state SEC(".maps");

/* The cgroup of a task in the hierarchy that holds the perf_event controller. */
static __always_inline struct cgroup *task_cgroup(struct task_struct *task, struct css_set *css)
{
	if (use_v1) {
		int id = bpf_core_enum_value(enum cgroup_subsys_id, perf_event_cgrp_id);

		if (id < 0 || id >= 14)
			return 0;
		return BPF_CORE_READ(css, subsys[id], cgroup);
	}
	return BPF_CORE_READ(css, dfl_cgrp);
}

static __always_inline __u64 ancestor_id(struct cgroup *cg, int level)
{
	if (bpf_core_field_exists(cg->ancestors))
		return BPF_CORE_READ(cg, ancestors[level], kn, id);
	return BPF_CORE_READ((struct cgroup___old *)cg, ancestor_ids[level]);
}

struct resolve_ctx {
	struct cgroup *cg;
	struct bperf_charge *charge;
};

/* bpf_loop callback: if the ancestor of ctx->cg at @level is monitored, add its slot. */
static long resolve_level(__u32 level, struct resolve_ctx *ctx)
{
	__u64 id = ancestor_id(ctx->cg, level);
	__u32 *slot = bpf_map_lookup_elem(&cgrp_slot, &id);
	__u32 n;

	if (!slot)
		return 0;
	n = ctx->charge->nr;
	if (n >= BPERF_MAX_LEVELS)
		return 1;
	ctx->charge->slot[n] = *slot;
	ctx->charge->nr = n + 1;
	return 0;
}

/* Fill @charge with the slots of @cg and its monitored ancestors, root first. */
static __always_inline void resolve(struct cgroup *cg, struct bperf_charge *charge)
{
	struct resolve_ctx ctx = { .cg = cg, .charge = charge };
	int level = BPF_CORE_READ(cg, level);

	charge->nr = 0;
	if (level < 0)
		return;
	if (level >= BPERF_MAX_LEVELS)
		level = BPERF_MAX_LEVELS - 1;
	bpf_loop(level + 1, resolve_level, &ctx, 0);
}

struct account_ctx {
	struct cpu_state *st;
	__u32 cpu;
};

/* bpf_loop callback: read event @i on this CPU and charge its delta to every charged slot. */
static long account_event(__u32 i, struct account_ctx *ctx)
{
	struct cpu_state *st = ctx->st;
	struct bpf_perf_event_value v;
	struct bperf_reading d;
	__u64 idx;

	if (i >= BPERF_MAX_EVENTS)
		return 1;
	idx = (__u64)i * nr_cpus + ctx->cpu;
	/* An event the machine cannot count has no fd in the array: skip it. */
	if (bpf_perf_event_read_value(&events, idx, &v, sizeof(v)))
		return 0;
	d.counter = v.counter - st->prev[i].counter;
	d.enabled = v.enabled - st->prev[i].enabled;
	d.running = v.running - st->prev[i].running;
	st->prev[i].counter = v.counter;
	st->prev[i].enabled = v.enabled;
	st->prev[i].running = v.running;

	for (__u32 j = 0; j < BPERF_MAX_LEVELS; j++) {
		struct bperf_reading *c;
		__u32 key;

		if (j >= st->charge.nr)
			break;
		key = (ctx->cpu * nr_slots + st->charge.slot[j]) * nr_events + i;
		c = bpf_map_lookup_elem(&counts, &key);
		if (!c)
			continue;
		c->counter += d.counter;
		c->enabled += d.enabled;
		c->running += d.running;
	}
	return 0;
}

/* Read every event on this CPU and charge what it counted since the last reading. */
static __always_inline void account(struct cpu_state *st, __u32 cpu)
{
	struct account_ctx ctx = { .st = st, .cpu = cpu };

	bpf_loop(nr_events, account_event, &ctx, 0);
}

/* @task is now running on this CPU: settle what the old cgroup ran, then charge @task's. */
static __always_inline void switch_to(struct cpu_state *st, struct task_struct *task)
{
	struct css_set *css = BPF_CORE_READ(task, cgroups);
	struct bperf_charge next;
	struct cgroup *cg;
	__u64 id;

	if (css == st->css)
		return;
	st->css = css;
	cg = task_cgroup(task, css);
	if (!cg)
		return;
	id = BPF_CORE_READ(cg, kn, id);
	if (id == st->cgid)
		return;
	resolve(cg, &next);
	st->cgid = id;
	/* Between two unmonitored cgroups there is nothing to charge and no baseline to keep. */
	if (st->charge.nr == 0 && next.nr == 0)
		return;
	account(st, bpf_get_smp_processor_id());
	__builtin_memcpy(&st->charge, &next, sizeof(next));
}

static __always_inline struct cpu_state *this_cpu_state(void)
{
	__u32 zero = 0;

	return bpf_map_lookup_elem(&cpu_state, &zero);
}

SEC("raw_tp/sched_switch")
int BPF_PROG(bperf_on_switch, bool preempt, struct task_struct *prev, struct task_struct *next)
{
	struct cpu_state *st = this_cpu_state();

	if (st)
		switch_to(st, next);
	return 0;
}

/*
 * Fires in the context of the task that wrote to cgroup.procs, after the move. When it
 * moved itself, its time up to now belongs to the old cgroup and from now to the new one.
 */
SEC("raw_tp/cgroup_attach_task")
int BPF_PROG(bperf_on_attach)
{
	struct cpu_state *st = this_cpu_state();

	if (!st)
		return 0;
	st->busy = 1;
	asm volatile("" ::: "memory");
	switch_to(st, (struct task_struct *)bpf_get_current_task());
	asm volatile("" ::: "memory");
	st->busy = 0;
	return 0;
}

/* Run by userspace on each CPU (BPF_PROG_TEST_RUN with BPF_F_TEST_RUN_ON_CPU) before a read. */
SEC("raw_tp")
int bperf_flush(void *ctx)
{
	struct cpu_state *st = this_cpu_state();

	/* Interrupted this CPU in the middle of bperf_on_attach: the next flush will do. */
	if (!st || st->busy)
		return 0;
	if (!st->css) {
		/* First look at this CPU: nothing before now is anybody's. */
		switch_to(st, (struct task_struct *)bpf_get_current_task());
		account(st, bpf_get_smp_processor_id());
		return 0;
	}
	account(st, bpf_get_smp_processor_id());
	return 0;
}
