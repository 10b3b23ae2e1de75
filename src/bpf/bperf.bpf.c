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
 * end before any counter is read. A switch the tracepoint did not report is recognised at
 * the next one, and the scheduler's own record of when the outgoing task arrived says how
 * to split the time since the last reading (settle_task_switch).
 *
 * The hot path is the sched_switch hook, so it is a BTF tracepoint (tp_btf): kernel
 * pointers are followed with plain loads, not bpf_probe_read_kernel calls. Which slots a
 * cgroup charges (itself and its monitored ancestors) is worked out once per cgroup and
 * kept in a small per-CPU cache keyed by cgroup id, so a switch between two cgroups seen
 * before costs a few loads and compares before the counters are read.
 *
 * Reading a counter with the read helper takes a call, interrupts masked, an indirect
 * call to pmu->read and, for the clocks, a clock read: more than everything else a
 * switch does. Software events are therefore read with plain loads from their struct
 * perf_event, which the program finds once per CPU behind the perf event array. The run
 * queue clock, which __schedule() updates before the tracepoint, stands in for the clock
 * read (load_count). The same clock times the software events' enabled and running
 * times (cpu_clock_now), where bpf_ktime_get_ns() would be a helper call. Hardware events, whose
 * pmu->read reads the PMU, use the helper. context-switches has no perf event at all
 * where userspace allows it: the run queue's own count of switches is read instead
 * (rq_switches). bench/results/levers.md has the numbers.
 */
#include "types.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_tracing.h>
#include "bperf.h"
#include "runq.h"
#include "runq_maps.h"

char LICENSE[] SEC("license") = "GPL";

/* Set by userspace before load. */
const volatile __u32 nr_events = 1;
const volatile __u32 nr_cpus = 1;  /* possible CPUs: stride of the event and count arrays */
const volatile __u32 nr_slots = 1; /* monitored cgroups */
const volatile bool use_v1 = false; /* perf_event controller on a cgroup v1 hierarchy */
const volatile __u64 always_running = 0; /* bit per event that is never multiplexed */
/* Software events read with plain loads instead of the read helper (see read_event), one
 * bit per event: counts the kernel keeps current as things happen (every software event
 * but the two clocks, tracepoints), cpu-clock, and task-clock. */
const volatile __u64 plain_count = 0;
const volatile __u64 cpu_clock = 0;
const volatile __u64 task_clock = 0;
/* context-switches read from the run queue's own count of switches instead of a perf
 * event, one bit per event (see load_count). */
const volatile __u64 rq_switches = 0;
/* bperf's own events counted here (bperf record), one bit per event (see load_count):
 * bperf/runq-wait/, each CPU's sum of the waits for a CPU that ended on it (ns, from a
 * task's wake-up or preemption to its switch-in, as schedstat's run_delay), charged to
 * the slice and cgroup of the task that waited; and bperf/preemptions/, each CPU's count
 * of tasks switched out still runnable, charged to the slice of the task preempted. */
const volatile __u64 runq_wait = 0;
const volatile __u64 preemptions = 0;
#define COUNTS_RUNQ (runq_wait | preemptions)
/* bperf's own events: a wait is read at the switch-in from the task's own
 * sched_info.last_queued against its run queue's clock (what the scheduler adds to its
 * run_delay right after the tracepoint), not timed from wake-ups in wait_since. */
const volatile bool waits_from_sched_info = false;
/* serve --runq, and stat's and top's run-queue events and culprits: each monitored
 * cgroup's waits and preemptions, all culprits together in runq_totals and by culprit
 * in runq_pairs (runq.h's layout; the maps are the run-queue object's, which
 * src/bpf/runq.rs reads). Waits are read from sched_info as for waits_from_sched_info,
 * which userspace sets with it; see runq_switch_in. */
const volatile bool runq_culprits = false;
/* Time with ktime even where the run queue can be found (see HAVE_RQ). */
const volatile bool use_ktime = false;
/* Tasks taken as untrusted pointers (see untrusted()): where the kernel has bpf_rdonly_cast. */
const volatile bool cast_tasks = false;
/* Shared counters: one instance for every session on the machine. nr_events and
 * nr_slots are then the strides of the arrays; which events are counted, and how each
 * is read, is in `live`, which the sessions change as they come and go. Slot 0 counts
 * everything each CPU counts; tracked processes and threads are charged too. */
const volatile bool shared = false;
/* Cgroups come and go while counting (live cgroups): userspace changes cgrp_slot and
 * bumps live.slots_gen, as the sessions of shared counters do. */
const volatile bool live_slots = false;
/* bperf record: every slice of a monitored cgroup goes out through `slice_ring` (see
 * send_slice), and a switch between two tasks of one cgroup ends a slice too. Each CPU
 * wakes the ring's reader after every ring_wake_every bytes it wrote (see ring_wakeup). */
const volatile bool record_slices = false;
const volatile __u64 ring_wake_every = 0;
/* bperf record of processes or threads (-p, -t, a command): this counter's own
 * instance charges the tasks of proc_tgid and proc_tid, and the children they fork, as
 * the shared instance does for its sessions. */
const volatile bool track_tasks = false;
/* Tasks are looked up in proc_tgid and proc_tid. */
#define TRACKS_TASKS (shared || track_tasks)

struct bperf_live live;
/* bperf record: the phase of the recording, set by userspace. The next flush of each
 * CPU moves it into the phase: slices are sent from the first read a counter takes
 * (its baseline) to its last, and add up to what the counter reads between the two. */
#define RECORD_OPENING 1
#define RECORD_CLOSING 2
__u32 record_phase;

/* How event masks and the number of events are known: fixed at load for one session,
 * changed by the sessions for shared counters. */
#define LIVE(field) (shared ? live.field : field)
#define NR_EVENTS (shared ? live.nr_events : nr_events)

/* The counting perf events, at index event * nr_cpus + cpu. */
struct {
	__uint(type, BPF_MAP_TYPE_PERF_EVENT_ARRAY);
	__uint(key_size, sizeof(__u32));
	__uint(value_size, sizeof(__u32));
	__uint(max_entries, 1);
} events SEC(".maps");

/* bperf record: one BPF ring buffer that every CPU sends its slices to; userspace gives
 * its own (src/bpf/slice_ring.rs). It adds less to a switch than a perf buffer per CPU
 * did, and loses fewer slices in as much memory (bench/results/levers.md). */
struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 4096);
} slice_ring SEC(".maps");

/* bperf record: slices each CPU could not send (its buffer was full). */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, __u64);
	__uint(max_entries, 1);
} slices_lost SEC(".maps");

/* bperf's own events: since when each task (by thread id) waits for a CPU (ktime; 0:
 * it does not). LRU: the entries of tasks that exited go as it fills. Userspace sizes
 * it only when the events are counted. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__type(key, __u32);
	__type(value, __u64);
	__uint(max_entries, 1);
} wait_since SEC(".maps");

/* Monitored cgroups: cgroup id -> slot. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__type(key, __u64);
	__type(value, __u32);
	__uint(max_entries, 1);
} cgrp_slot SEC(".maps");

/* Shared counters and track_tasks: tracked processes (by tgid) and threads (by tid) -> their slots. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__type(key, __u32);
	__type(value, struct bperf_proc);
	__uint(max_entries, 1);
} proc_tgid SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__type(key, __u32);
	__type(value, struct bperf_proc);
	__uint(max_entries, 1);
} proc_tid SEC(".maps");

/* Shared counters and track_tasks: one bit per id that is a key of proc_tgid or proc_tid, so that the
 * many untracked tasks cost one array load, not a hash lookup (bench/results/levers.md). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, __u64);
	__uint(max_entries, 1);
} tracked SEC(".maps");

/* Accumulated deltas at index (cpu * nr_slots + slot) * nr_events + event; mmapped by userspace. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_MMAPABLE);
	__type(key, __u32);
	__type(value, struct bperf_reading);
	__uint(max_entries, 1);
} counts SEC(".maps");

/* A cgroup whose charge list was worked out on this CPU. */
struct charge_entry {
	__u64 cgid;                 /* 0: empty */
	struct bperf_charge charge;
};

/* Per-CPU cache of charge lists: 2-way set-associative, the set picked by a Fibonacci
 * hash of the cgroup id (ids of sibling cgroups are spaced by the kernfs nodes of their
 * files, so their low bits collide). */
#define CACHE_SET_BITS 5
#define CACHE_SETS (1 << CACHE_SET_BITS)
#define CACHE_WAYS 2

/* One reading being taken: what read_event needs to know, and what it read. */
struct read_args {
	__u64 dt;    /* time since this CPU's last reading */
	__u64 now;   /* this CPU's clock (see cpu_clock_now) */
	__u32 rq_clock_fresh; /* now is the run queue clock as __schedule() left it, with
		      * interrupts off, so the clocks can be worked out from it */
	__u64 charged_share; /* the share of what was counted to charge now (see account) */
	struct bperf_reading v;
};

/* runq_culprits: a cell of the culprit matrix this CPU charged lately, and what it
 * added up here since the cell was last added to runq_pairs (see pend_pair). */
#define RUNQ_PENDING 8
struct runq_pending {
	struct runq_pair pair;
	struct runq_wait w;  /* zero: nothing to add */
	__u64 slots_gen;     /* live.slots_gen when it was charged */
};

/* What one CPU is charging right now. */
struct cpu_state {
	__u64 task;              /* the task_struct it runs, as far as the program saw; 0
				  * until a task has been looked at on this CPU */
	__u64 cgid;              /* id of the cgroup being charged */
	__u32 busy;              /* bperf_on_attach or _exec is running (a flush IPI may interrupt it) */
	__u64 last;              /* cpu_clock_now() of the last reading */
	struct bperf_charge charge; /* its monitored slots (itself and monitored ancestors) */
	struct bperf_reading prev[BPERF_MAX_EVENTS]; /* last reading of each event on this CPU */
	__u64 event[BPERF_MAX_EVENTS]; /* this CPU's struct perf_event of each event read by loads, or 0 */
	bool found;              /* event[] has been filled in */
	__u64 switches;          /* the run queue's count of switches, taken as a hook starts */
	__u64 waited;            /* bperf/runq-wait/: ns of the waits that ended here */
	__u64 preempted;         /* bperf/preemptions/: tasks switched out still runnable */
	/* runq_culprits only: */
	struct runq_runs runs;   /* the CPU's last runs, whose cgroups a wait ending here waited behind */
	struct runq_preempted preemptors[RUNQ_PREEMPTED]; /* the last tasks preempted here */
	__u32 next_preempted;    /* where in preemptors the next one goes */
	struct runq_pending pending[RUNQ_PENDING]; /* culprit cells not yet in runq_pairs */
	__u32 next_pending;      /* the one to make room in next */
	struct charge_entry cache[CACHE_SETS][CACHE_WAYS];
	/* Shared counters only: */
	__u32 ptgid, ptid;       /* the tracked process and thread being charged, or 0 */
	__u64 slots_gen;         /* live.slots_gen when the charges were worked out */
	__u32 gen[BPERF_MAX_EVENTS]; /* live.event_gen when event i was last read */
	/* bperf record only: */
	__u64 owner;             /* the task whose slice is open */
	__u32 recording;         /* 0: not yet, RECORD_OPENING: sending, RECORD_CLOSING: done */
	__u64 unwoken;           /* bytes this CPU sent since it last woke the ring's reader */
	__u64 sent;              /* slices this CPU sent or tried to: written, or in slices_lost */
	struct bperf_slice slice; /* the slice being sent: who ran, then what was counted */
	struct read_args args;   /* the reading account() takes */
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, struct cpu_state);
	__uint(max_entries, 1);
} cpu_state SEC(".maps");

static __always_inline struct cpu_state *this_cpu_state(void)
{
	__u32 zero = 0;

	return bpf_map_lookup_elem(&cpu_state, &zero);
}

#include "task_cgroup.h"

struct resolve_ctx {
	struct cgroup *cg;           /* the cgroup to look at next, walking up to the root */
	struct bperf_charge *charge;
};

/* bpf_loop callback: if ctx->cg is monitored, add its slot; then go to its parent. */
static long resolve_level(__u32 i, struct resolve_ctx *ctx)
{
	struct cgroup *cg = ctx->cg;
	struct cgroup_subsys_state *parent;
	__u32 *slot, n;
	__u64 id;

	if (!cg)
		return 1;
	id = cg->kn->id;
	slot = bpf_map_lookup_elem(&cgrp_slot, &id);
	if (slot) {
		n = ctx->charge->nr;
		if (n >= BPERF_MAX_LEVELS)
			return 1;
		ctx->charge->slot[n] = *slot;
		ctx->charge->nr = n + 1;
	}
	parent = cg->self.parent;
	ctx->cg = parent ? parent->cgroup : 0;
	return 0;
}

/* bpf_loop's limit on iterations. */
#define MAX_LOOPS (1 << 23)
/* Levels walked without bpf_loop: a loop the verifier checks iteration by iteration. */
#define BOUNDED_LEVELS 64

/* resolve() without bpf_loop: the first BOUNDED_LEVELS levels from @ctx->cg up. A
 * function of its own, so that the verifier walks the loop once per caller. */
static __noinline void resolve_bounded(struct resolve_ctx *ctx, __u32 levels)
{
	for (__u32 i = 0; i < BOUNDED_LEVELS; i++) {
		if (i >= levels || resolve_level(i, ctx))
			break;
	}
}

/*
 * Fill @charge with the slots of @cg and of its monitored ancestors, at every level up
 * to the root; up to BOUNDED_LEVELS levels if @bounded. Every hook comes in two
 * programs, one with bpf_loop and one @bounded for kernels without it (before 5.17),
 * and userspace loads one of them: a kernel that has no bpf_loop refuses a program that
 * so much as names a callback, even where it cannot run.
 */
static __always_inline void resolve(struct cgroup *cg, struct bperf_charge *charge, bool bounded)
{
	struct resolve_ctx ctx = { .cg = cg, .charge = charge };
	__u32 levels = cg->level + 1;

	charge->nr = 0;
	if (!bounded)
		bpf_loop(levels < MAX_LOOPS ? levels : MAX_LOOPS, resolve_level, &ctx, 0);
	else
		resolve_bounded(&ctx, levels);
}

/* Events read with plain loads, one bit each. The loads go through the bpf_rdonly_cast
 * kfunc; userspace leaves all three masks empty where the kernel's BTF has no such
 * kfunc, and the masks, read-only data the verifier sees, keep the calls dead there. */
#define LOADED_EVENTS (cast_tasks ? (LIVE(plain_count) | LIVE(cpu_clock) | LIVE(task_clock)) : 0)

/*
 * Find this CPU's struct perf_event behind each event read by loads: the perf event
 * array keeps one bpf_event_entry per index. Run once per CPU, from the flush program.
 */
static __always_inline void find_event(struct cpu_state *st, __u32 i, __u32 cpu)
{
	struct bpf_event_entry *ee = 0;
	struct perf_event *ev = 0;
	struct bpf_array *arr;
	__u64 idx = (__u64)i * nr_cpus + cpu;

	if (i >= BPERF_MAX_EVENTS)
		return;
	st->event[i] = 0;
	if (!(LOADED_EVENTS & (1ULL << i)))
		return;
	arr = bpf_core_cast(&events, struct bpf_array);
	if (bpf_probe_read_kernel(&ee, sizeof(ee), &arr->ptrs[idx]) || !ee)
		return;
	if (bpf_probe_read_kernel(&ev, sizeof(ev), &ee->event))
		return;
	st->event[i] = (__u64)ev;
}

static void find_events(struct cpu_state *st, __u32 cpu)
{
	st->found = true;
	if (!LOADED_EVENTS)
		return;
	for (__u32 i = 0; i < BPERF_MAX_EVENTS; i++) {
		if (i >= nr_events)
			break;
		find_event(st, i, cpu);
	}
}

/*
 * The count of software event @i as the read helper would return it at time @now, by
 * plain loads: the helper's call, interrupt masking and indirect call to pmu->read cost
 * more than the rest of a switch. Returns -1 where the helper has to do it.
 *
 * The kernel keeps count current for most software events; their pmu->read does
 * nothing. The two clocks are brought up to date by pmu->read, which adds the time
 * since hw.prev_count (cpu-clock: sched_clock_cpu; task-clock: the context's time,
 * now + ctx->timeoffset) to count; here the same sum is worked out without writing it
 * back. An event that is not active is not counting: its count is its value.
 *
 * The clocks are worked out only when @rq_clock_fresh, with interrupts off (sched_switch): only
 * this CPU updates count and hw.prev_count, and nothing on it can run between the loads.
 * The context's time can be updated from another CPU (reading an inactive event of the
 * same context), hence timeoffset, one load, rather than time and timestamp, two. The
 * other counts are one load.
 */
static __always_inline __s64 load_count(__u32 i, struct cpu_state *st, __u64 now, bool rq_clock_fresh)
{
	struct perf_event *ev;
	__s64 count, since;

	/* The scheduler counts every switch in rq->nr_switches, just before sched_switch
	 * fires, so a switch is charged to the outgoing task's cgroup, as the task's rusage
	 * counts it. (The context-switches software event counts the same switches, later:
	 * read at the tracepoint, it charges each to the incoming task's cgroup.) For these
	 * events bperf opens no perf event, which the kernel would update at every switch. */
	if (LIVE(rq_switches) & (1ULL << i))
		return st->switches;
	if (runq_wait & (1ULL << i))
		return st->waited;
	if (preemptions & (1ULL << i))
		return st->preempted;
	if (!LOADED_EVENTS || !(LOADED_EVENTS & (1ULL << i)) || !st->event[i])
		return -1;
	ev = bpf_core_cast((void *)st->event[i], struct perf_event);
	count = ev->count.a.a.counter;
	if (LIVE(plain_count) & (1ULL << i))
		return count;
	if (!rq_clock_fresh)
		return -1;
	if (ev->state != PERF_EVENT_STATE_ACTIVE)
		return count;
	if (LIVE(cpu_clock) & (1ULL << i)) {
		since = now - ev->hw.prev_count.a.a.counter;
	} else {
		struct perf_event_context *ctx = ev->ctx;

		if (!bpf_core_field_exists(ctx->timeoffset))
			return -1;
		since = now + ctx->timeoffset - ev->hw.prev_count.a.a.counter;
	}
	/* The run queue clock can be behind a reading the helper made since (when
	 * __schedule() skipped its update). */
	return since > 0 ? count + since : count;
}

/*
 * Read event @i on this CPU into @a->v.
 *
 * A counter that is never multiplexed (software and tracepoint events: bit i of
 * always_running) is read without its times, which are then the time since this CPU's
 * last reading: cheaper, and the same numbers.
 */
static __always_inline int read_event(struct cpu_state *st, __u32 i, struct read_args *a)
{
	__u64 idx = (__u64)i * nr_cpus + bpf_get_smp_processor_id();

	if (!st || !a || i >= BPERF_MAX_EVENTS)
		return -1;
	if (LIVE(always_running) & (1ULL << i)) {
		__s64 c = load_count(i, st, a->now, a->rq_clock_fresh);

		if (c < 0) {
			c = bpf_perf_event_read(&events, idx);
			/* An error comes back as a negative errno in the count. */
			if ((__u64)c >= (__u64)-4095)
				return -1;
		}
		/* A clock worked out from a run queue clock older than the last reading, or
		 * read by the helper after such a reading: nothing more has been counted
		 * since. A count never runs back. */
		if ((__u64)c < st->prev[i].counter)
			c = st->prev[i].counter;
		a->v.counter = c;
		a->v.enabled = st->prev[i].enabled + a->dt;
		a->v.running = st->prev[i].running + a->dt;
		return 0;
	}
	return bpf_perf_event_read_value(&events, idx, (struct bpf_perf_event_value *)&a->v,
					 sizeof(a->v));
}

/* Add @d, what event @i counted on CPU @cpu, to @slot. */
static __always_inline void charge_slot(__u32 slot, __u32 cpu, __u32 i, struct bperf_reading *d)
{
	__u32 key = (cpu * nr_slots + slot) * nr_events + i;
	struct bperf_reading *c = bpf_map_lookup_elem(&counts, &key);

	if (!c)
		return;
	c->counter += d->counter;
	c->enabled += d->enabled;
	c->running += d->running;
}

/* Add @d, what event @i counted on CPU @cpu, to each slot of @charge, and for shared
 * counters to slot 0, which counts everything. */
static __always_inline void charge_slots(struct bperf_charge *charge, __u32 cpu, __u32 i,
					 struct bperf_reading *d)
{
	for (__u32 j = 0; j < BPERF_MAX_CHARGE; j++) {
		if (j >= charge->nr)
			break;
		charge_slot(charge->slot[j], cpu, i, d);
	}
	if (shared)
		charge_slot(0, cpu, i, d);
}

/* Shared counters: event @i was added or removed since this CPU last read it. Its
 * reading now is a baseline, charged to nobody. */
static __always_inline void renew_event(struct cpu_state *st, __u32 i, struct read_args *a)
{
	__u32 cpu = bpf_get_smp_processor_id();

	if (i >= BPERF_MAX_EVENTS)
		return;
	st->gen[i] = live.event_gen[i];
	find_event(st, i, cpu);
	st->prev[i].counter = st->prev[i].enabled = st->prev[i].running = 0;
	if (!read_event(st, i, a))
		st->prev[i] = a->v;
}

/* Fractions in fixed point: ALL is the whole. */
#define SHARE_BITS 20
#define ALL (1ULL << SHARE_BITS)

/* @v * @frac. */
static __always_inline __u64 scaled(__u64 v, __u64 frac)
{
	if (v < (1ULL << (64 - SHARE_BITS - 1)))
		return (v * frac) >> SHARE_BITS;
	return (v >> SHARE_BITS) * frac;
}

/* @n / @d as a fraction, @n <= @d; ALL when @d is 0. */
static __always_inline __u64 fraction(__u64 n, __u64 d)
{
	if (!d)
		return ALL;
	if (d >> (64 - SHARE_BITS - 1)) {
		n >>= SHARE_BITS;
		d >>= SHARE_BITS;
	}
	return (n << SHARE_BITS) / d;
}

/*
 * Read event @i and charge what it counted since the last reading (the share
 * charged_share of it, in this CPU's st->args) to the slots being charged. Returns 1 if
 * it counted anything. A global function, so that the verifier checks it once for any
 * event rather than every event's branches and charge loop separately in every program;
 * its arguments are numbers, as Linux before 5.12 requires of a global function's.
 */
__noinline int account_event(__u32 i)
{
	struct cpu_state *st = this_cpu_state();
	struct read_args *a;
	struct bperf_reading d;

	if (!st || i >= BPERF_MAX_EVENTS)
		return 0;
	a = &st->args;
	/* Bounded for the verifier on every copy clang makes of it: an and clang cannot
	 * drop, though it knows the bound. */
	asm volatile("%[i] &= %[max]" : [i] "+r"(i) : [max] "i"(BPERF_MAX_EVENTS - 1));
	if (shared && st->gen[i] != live.event_gen[i]) {
		renew_event(st, i, a);
		return 0;
	}
	/* An event the machine cannot count has no fd in the array: skip it. */
	if (read_event(st, i, a)) {
		if (record_slices)
			st->slice.delta[i] = (struct bperf_reading){};
		return 0;
	}
	d.counter = a->v.counter - st->prev[i].counter;
	d.enabled = a->v.enabled - st->prev[i].enabled;
	d.running = a->v.running - st->prev[i].running;
	if (a->charged_share != ALL) {
		d.counter = scaled(d.counter, a->charged_share);
		d.enabled = scaled(d.enabled, a->charged_share);
		d.running = scaled(d.running, a->charged_share);
	}
	st->prev[i].counter += d.counter;
	st->prev[i].enabled += d.enabled;
	st->prev[i].running += d.running;
	charge_slots(&st->charge, bpf_get_smp_processor_id(), i, &d);
	if (record_slices)
		st->slice.delta[i] = d;
	return d.counter != 0;
}

/*
 * Read every event on this CPU and charge what it counted since the last reading to the
 * slots being charged. @now, @rq_clock_fresh: see struct read_args. Returns true when
 * that was a slice to send (bperf record): st->slice then holds it. A slice that took no
 * time but counted something is one: the run queue clock does not always move between
 * two switches (when a wakeup had __schedule() skip its update), and a switch counted in
 * no slice would be missing from the recording's sums.
 *
 * With @tail_ns, only the part of that window up to @tail_ns before @now: the last
 * @tail_ns were run by a task of another cgroup, after a switch that was not seen (see
 * settle_task_switch), and the caller charges them next. Each event's counts are split in
 * proportion to time: the readings, and the time of the last one, advance by the share
 * charged. Exact for the clocks; an estimate for the rest. A CPU's first reading is a
 * baseline, charged to nobody, and never split.
 */
__noinline int account(__u64 now, __u32 rq_clock_fresh, __u64 tail_ns)
{
	struct cpu_state *st = this_cpu_state();
	struct read_args *a;
	__u64 charged;
	int counted = 0;

	if (!st)
		return 0;
	a = &st->args;
	*a = (struct read_args){ .now = now, .rq_clock_fresh = rq_clock_fresh, .charged_share = ALL };
	/* A stale run queue clock can be behind the last reading: time never runs back. */
	if (now > st->last)
		a->dt = now - st->last;
	if (tail_ns && st->last)
		a->charged_share = fraction(tail_ns < a->dt ? a->dt - tail_ns : 0, a->dt);
	charged = a->charged_share == ALL ? a->dt : scaled(a->dt, a->charged_share);
	if (record_slices) {
		st->slice.start = st->last;
		st->slice.length = charged;
	}
	st->last += charged;
	for (__u32 i = 0; i < BPERF_MAX_EVENTS; i++) {
		if (i >= NR_EVENTS)
			break;
		counted |= account_event(i);
	}
	return record_slices && st->charge.nr && (charged || counted) &&
	       st->recording == RECORD_OPENING;
}

/*
 * bperf record: the ring buffer's flags for a record of @size bytes (its header
 * included). A slice does not wake the reader (a wakeup is an interrupt and the reader
 * scheduled in, more than the slice costs); every ring_wake_every bytes from this CPU
 * do. Userspace makes that a quarter of this CPU's share of the ring, as each CPU's
 * perf buffer woke its reader at a quarter of it: no call to look at the ring.
 */
static __always_inline __u64 ring_wakeup(struct cpu_state *st, __u64 size)
{
	st->unwoken += size;
	if (st->unwoken < ring_wake_every)
		return BPF_RB_NO_WAKEUP;
	st->unwoken = 0;
	return BPF_RB_FORCE_WAKEUP;
}

/* bperf record: send the slice account() left in st->slice, @flags its BPERF_SLICE_*.
 * A slice that finds no room is counted in slices_lost. */
static __always_inline void send_slice(struct cpu_state *st, __u32 flags)
{
	__u32 n = NR_EVENTS, zero = 0;
	__u64 size, *lost;

	if (n > BPERF_MAX_EVENTS)
		n = BPERF_MAX_EVENTS;
	st->slice.cpu = bpf_get_smp_processor_id();
	st->slice.nr_events = n;
	st->slice.flags = flags;
	size = sizeof(st->slice) - sizeof(st->slice.delta) + n * sizeof(st->slice.delta[0]);
	if (size > sizeof(st->slice))
		return;
	st->sent++;
	if (!bpf_ringbuf_output(&slice_ring, &st->slice, size, ring_wakeup(st, size + 8)))
		return;
	lost = bpf_map_lookup_elem(&slices_lost, &zero);
	if (lost)
		*lost += 1;
}

/* bperf record: @task's slice in cgroup @cgid begins: who runs where, for send_slice. */
static __always_inline void open_slice(struct cpu_state *st, struct task_struct *task, __u64 cgid)
{
	if (!record_slices)
		return;
	st->owner = (__u64)task;
	st->slice.cgid = cgid;
	st->slice.slot = st->charge.nr ? st->charge.slot[0] : 0;
	st->slice.pid = task->tgid;
	st->slice.tid = task->pid;
	/* Two loads, where bpf_probe_read_kernel would be a helper call. */
	__builtin_memcpy(st->slice.comm, task->comm, sizeof(st->slice.comm));
}

/* The charge list of cgroup @cg (id @id): from this CPU's cache, or worked out and cached. */
static __always_inline struct bperf_charge *charge_of(struct cpu_state *st, struct cgroup *cg, __u64 id,
						     bool bounded)
{
	__u32 set = (id * 0x9E3779B97F4A7C15ULL) >> (64 - CACHE_SET_BITS);
	struct charge_entry *e;

	if (set >= CACHE_SETS)
		return 0;
	e = &st->cache[set][0];
	if (e->cgid == id)
		return &e->charge;
	if (st->cache[set][1].cgid == id)
		return &st->cache[set][1].charge;
	/* A miss evicts the other way than the cgroup being charged now: two cgroups that
	 * take turns on a CPU never evict each other. */
	if (e->cgid == st->cgid)
		e = &st->cache[set][1];
	resolve(cg, &e->charge, bounded);
	e->cgid = id;
	return &e->charge;
}

/* The run queue of the CPU @task is on (current, or about to be): through its
 * sched_entity, which needs CONFIG_FAIR_GROUP_SCHED (decided at load time); else 0. */
static __always_inline struct rq *task_rq(struct task_struct *task)
{
	struct cfs_rq *cfs;

	if (!bpf_core_field_exists(((struct cfs_rq *)0)->rq))
		return 0;
	cfs = task->se.cfs_rq;
	return cfs ? cfs->rq : 0;
}

/* Can the run queue time the readings? Not under BPERF_READ_HELPER=1 (use_ktime). */
#define HAVE_RQ (!use_ktime && bpf_core_field_exists(((struct cfs_rq *)0)->rq))

/*
 * The clock of the CPU whose run queue is @rq: its run queue clock,
 * sched_clock_cpu() as of the run queue's last update, the clock perf's software clocks
 * use. Reading it is one load where bpf_ktime_get_ns() is a helper call. __schedule() updates it before the sched_switch tracepoint, unless a wakeup
 * just updated it and asked to skip that (the scheduler then charges time with the same
 * clock, so cpu.stat agrees). Elsewhere it is at most a tick old while the CPU runs a
 * task, and older on an idle CPU under NOHZ, which delays the enabled and running times
 * of software events, never a count (a flush reads the clocks with the helper). Without
 * a way to the run queue, ktime. 0 if the task had no run queue (which should not
 * happen): no time passes.
 */
static __always_inline __u64 cpu_clock_now(struct rq *rq)
{
	if (!HAVE_RQ)
		return bpf_ktime_get_ns();
	return rq ? rq->clock : 0;
}

/* Take the run queue's count of switches, for rq_switches, before a hook reads
 * anything: every reading, the first (a baseline) included, sees it current. Only this
 * CPU writes it, under the run queue lock, and no switch can happen while a hook runs. */
static __always_inline void take_switches(struct cpu_state *st, struct rq *rq)
{
	if (LIVE(rq_switches) && rq)
		st->switches = rq->nr_switches;
}

/* *@to = *@from, as far as @from has slots. */
static __always_inline void copy_charge(struct bperf_charge *to, struct bperf_charge *from)
{
	for (__u32 j = 0; j < BPERF_MAX_CHARGE; j++) {
		if (j >= from->nr)
			break;
		to->slot[j] = from->slot[j];
	}
	to->nr = from->nr;
}

/* Shared counters: is @id a key of proc_tgid or proc_tid? */
static __always_inline bool is_tracked(__u32 id)
{
	__u32 word = id >> 6;
	__u64 *w = bpf_map_lookup_elem(&tracked, &word);

	return w && (*w & (1ULL << (id & 63)));
}

/* Shared counters and track_tasks: *@tgid and *@tid are @task's process and thread ids where they may
 * be tracked, else 0. */
static __always_inline void tracked_ids(struct task_struct *task, __u32 *tgid, __u32 *tid)
{
	*tgid = *tid = 0;
	if (!TRACKS_TASKS || !live.nr_procs)
		return;
	if (is_tracked(task->tgid))
		*tgid = task->tgid;
	if (is_tracked(task->pid))
		*tid = task->pid;
}

/* Append to @c the slots @map keeps for @id, if any. */
static __always_inline void append_proc(struct bperf_charge *c, void *map, __u32 id)
{
	struct bperf_proc *p;

	if (!id)
		return;
	p = bpf_map_lookup_elem(map, &id);
	if (!p)
		return;
	for (__u32 k = 0; k < BPERF_PROC_SLOTS; k++) {
		__u32 n = c->nr;

		if (!p->slot[k])
			continue;
		if (n >= BPERF_MAX_CHARGE)
			return;
		c->slot[n] = p->slot[k] - 1;
		c->nr = n + 1;
	}
}

/* Forget every charge list worked out (slots came or went). */
static __always_inline void forget_charges(struct cpu_state *st)
{
	for (__u32 s = 0; s < CACHE_SETS; s++) {
		st->cache[s][0].cgid = 0;
		st->cache[s][1].cgid = 0;
	}
	st->slots_gen = live.slots_gen;
}

/* Charge @task's cgroup (and, for shared counters, its tracked process and thread) from
 * @now on, after charging what was counted since the last reading to the slots charged
 * so far, or the share of its last @tail_ns to @task's. @now, @rq_clock_fresh: see
 * struct read_args. */
static __always_inline void charge_task(struct cpu_state *st, struct task_struct *task,
					__u64 now, bool rq_clock_fresh, __u64 tail_ns, bool bounded)
{
	struct bperf_charge *charge;
	struct cgroup *cg;
	__u32 tgid, tid;
	bool stale, old_procs;
	__u64 id;

	/* By cgroup id, never reused, not by css_set or cgroup pointer: those are freed and
	 * reallocated as cgroups come and go, and a new one at an old address would look like
	 * no change. */
	cg = task_cgroup(task->cgroups);
	if (!cg)
		return;
	id = cg->kn->id;
	tracked_ids(task, &tgid, &tid);
	stale = (shared || live_slots) && st->slots_gen != live.slots_gen;
	if (id == st->cgid && tgid == st->ptgid && tid == st->ptid && !stale &&
	    (!record_slices || (__u64)task == st->owner))
		return;
	if (stale)
		forget_charges(st);
	charge = charge_of(st, cg, id, bounded);
	if (!charge)
		return;
	old_procs = st->ptgid || st->ptid;
	st->cgid = id;
	st->ptgid = tgid;
	st->ptid = tid;
	/* Between two stretches that charge no slot there is nothing to charge and no
	 * baseline to keep (slot 0 takes both at the next reading). */
	if (st->charge.nr == 0 && charge->nr == 0 && !tgid && !tid)
		return;
	/* A tracked task's time is what its own task-clock says: from the clock as it is
	 * when the switch happens. The run queue clock can be a wakeup's, older by the time
	 * an idle CPU took to wake up, which the scheduler (and cpu.stat) charge to the task
	 * woken, but its task-clock does not: the clocks are then read by the helper. */
	if (old_procs || tgid || tid)
		rq_clock_fresh = false;
	if (account(now, rq_clock_fresh, tail_ns))
		send_slice(st, 0);
	copy_charge(&st->charge, charge);
	append_proc(&st->charge, &proc_tgid, tgid);
	append_proc(&st->charge, &proc_tid, tid);
	open_slice(st, task, id);
	if (tail_ns && account(now, rq_clock_fresh, 0))
		send_slice(st, 0);
}

/*
 * How long @ran, found running on this CPU (run queue @rq), has been running: the
 * scheduler's sched_info.last_arrival is the run queue clock when it last started.
 * All of the time (~0) without CONFIG_SCHED_INFO or a way to the run queue, and for the
 * idle task, which the scheduler never stamps: idle time, usually the longer part, then
 * goes to the root cgroup, where it belongs, rather than to the task before it.
 */
static __always_inline __u64 running_for(struct task_struct *ran, struct rq *rq)
{
	__u64 since;

	if (!bpf_core_field_exists(ran->sched_info) || !rq)
		return ~0ULL;
	since = ran->sched_info.last_arrival;
	return rq->clock > since ? rq->clock - since : 0;
}

/* Remember @next as the task this CPU charges from now on. True if @ran, the task that
 * has been running, is not the one it was charging: a switch was not seen (settle_task_switch). */
static __always_inline bool track_task(struct cpu_state *st, struct task_struct *ran,
				       struct task_struct *next)
{
	bool unseen = st->task && (__u64)ran != st->task;

	st->task = (__u64)next;
	return unseen;
}

/*
 * A task switch on this CPU, from @prev to @next at @now (run queue @rq): settle what
 * the old cgroup ran, then charge @next's. @rq_clock_fresh: see struct read_args.
 *
 * If @prev is not the task this CPU was charging, a switch was not seen. Some
 * threads fire no tracepoints in task context (on some VMs, the hypervisor agent's), so
 * sched_switch never fires when one of them leaves a CPU, and the next task would run
 * charged to the agent's cgroup until its own switch. The time since @prev arrived is
 * then @prev's, the time before stays with the cgroup being charged.
 */
static __always_inline void settle_task_switch(struct cpu_state *st, struct task_struct *prev,
				      struct task_struct *next, struct rq *rq, __u64 now, bool rq_clock_fresh,
				      bool bounded)
{
	if (track_task(st, prev, next))
		charge_task(st, prev, now, rq_clock_fresh, running_for(prev, rq), bounded);
	charge_task(st, next, now, rq_clock_fresh, 0, bounded);
}

/* @task, current on this CPU (run queue @rq), has been running and goes on: settle and
 * charge its cgroup from @now on (after it moved itself, or before a read). If the
 * switch to it was not seen, its time since it arrived is its own (see settle_task_switch). */
static __always_inline void settle_current_task(struct cpu_state *st, struct task_struct *task,
						struct rq *rq, __u64 now, bool bounded)
{
	charge_task(st, task, now, false, track_task(st, task, task) ? running_for(task, rq) : 0,
		    bounded);
}

/*
 * @t, a task the kernel hands a program (the tracepoint's, the current task), as a
 * pointer the verifier does not trust. At every pointer loaded through a trusted one,
 * the verifier looks the field up in its lists of fields that keep their parent's trust:
 * up to four scans of all of vmlinux's BTF types by name, on every path it checks, a
 * large part of start-up. The programs pass these pointers to nothing that needs trust.
 * The cast is the bpf_rdonly_cast kfunc, which the verifier turns into a move;
 * userspace sets cast_tasks where the kernel has it, as it does the masks of
 * LOADED_EVENTS.
 */
static __always_inline struct task_struct *untrusted(struct task_struct *t)
{
	return cast_tasks ? bpf_core_cast(t, struct task_struct) : t;
}

/* The task running on this CPU, outside sched_switch. */
static __always_inline struct task_struct *this_task(void)
{
	return untrusted(bpf_get_current_task_btf());
}

#include "task_state.h"

/* bperf's own events: task @tid waits for a CPU from @now (ktime). */
static __always_inline void wait_from(__u32 tid, __u64 now)
{
	__u64 *since = bpf_map_lookup_elem(&wait_since, &tid);

	/* In place when the task has an entry: an LRU map's update allocates anew. */
	if (since)
		*since = now;
	else
		bpf_map_update_elem(&wait_since, &tid, &now, BPF_ANY);
}

/* bperf's own events, as @prev leaves this CPU @preempted (see preempted_out): a
 * preemption, counted before the switch is settled, so that it goes to @prev's slice;
 * and its wait starts. */
static __always_inline void take_preemption(struct cpu_state *st, bool preempted, struct task_struct *prev)
{
	if (!COUNTS_RUNQ || !preempted)
		return;
	st->preempted++;
	if (!waits_from_sched_info)
		wait_from(prev->pid, bpf_ktime_get_ns());
}

/* bperf's own events, as @next gets this CPU (run queue @rq): the wait the scheduler is
 * about to add to its run_delay. */
static __always_inline void end_queued_wait(struct cpu_state *st, struct task_struct *next,
					    struct rq *rq)
{
	__u64 since;

	if (!bpf_core_field_exists(next->sched_info.last_queued) || !rq)
		return;
	since = next->sched_info.last_queued;
	if (since && rq->clock > since)
		st->waited += rq->clock - since;
}

/* bperf's own events, as @next gets this CPU: its wait ends, counted after the switch is
 * settled, so that it goes to @next's slice. */
static __always_inline void end_wait(struct cpu_state *st, struct task_struct *next, struct rq *rq)
{
	__u32 tid = next->pid;
	__u64 *since, now;

	if (!COUNTS_RUNQ || !tid)
		return;
	if (waits_from_sched_info) {
		end_queued_wait(st, next, rq);
		return;
	}
	since = bpf_map_lookup_elem(&wait_since, &tid);
	if (!since || !*since)
		return;
	now = bpf_ktime_get_ns();
	if (now > *since)
		st->waited += now - *since;
	*since = 0;
}

/* Whether @prev leaves its CPU still runnable (the kernel's involuntary switch), where
 * anything counts it. */
static __always_inline bool preempted_out(bool preempt, struct task_struct *prev)
{
	if (!(COUNTS_RUNQ || runq_culprits) || !prev->pid)
		return false;
	return preempt || still_runnable(prev);
}

/* runq_culprits: adds a pending cell to runq_pairs, and empties it. A cell charged
 * before the slots last changed is left out: its slots may have been given to other
 * cgroups since. Userspace flushes every CPU just before it changes the slots, so that
 * is what was charged in between. */
static __always_inline void add_pending(struct runq_pending *p)
{
	if ((p->w.wait_ns || p->w.preemptions) && (!live_slots || p->slots_gen == live.slots_gen))
		runq_charge_pair(p->pair.waiter, p->pair.culprit, p->w.wait_ns, p->w.preemptions);
	p->w.wait_ns = 0;
	p->w.preemptions = 0;
}

/* runq_culprits: before a read, adds what this CPU's pending cells hold to runq_pairs. */
static __always_inline void add_all_pending(struct cpu_state *st)
{
	if (!runq_culprits)
		return;
	for (__u32 k = 0; k < RUNQ_PENDING; k++)
		add_pending(&st->pending[k]);
}

/* runq_culprits: charges cell (@waiter, @culprit) of the culprit matrix in this CPU's
 * pending cells, which runq_pairs gets at the next read or when the cell makes room for
 * another: a hash lookup and atomic adds per cell and read, not per wait. */
static __always_inline void pend_pair(struct cpu_state *st, __u32 waiter, __u32 culprit,
				      __u64 wait_ns, __u64 preemptions)
{
	__u64 gen = live_slots ? live.slots_gen : 0;
	struct runq_pending *p;

	for (__u32 k = 0; k < RUNQ_PENDING; k++) {
		p = &st->pending[k];
		if (p->pair.waiter == waiter && p->pair.culprit == culprit && p->slots_gen == gen) {
			runq_add(&p->w, wait_ns, preemptions);
			return;
		}
	}
	p = &st->pending[st->next_pending++ & (RUNQ_PENDING - 1)];
	add_pending(p);
	p->pair.waiter = waiter;
	p->pair.culprit = culprit;
	p->slots_gen = gen;
	runq_add(&p->w, wait_ns, preemptions);
}

/*
 * runq_culprits: charge the slots this CPU charges (st->charge, a cgroup's slots only:
 * runq_culprits goes with neither shared counters nor tracked tasks) with @wait_ns of
 * waiting and @preemptions behind the cgroup of slot @culprit (RUNQ_NO_SLOT: none
 * monitored). A global function, verified once however many places call it.
 */
__noinline int runq_charge(__u32 culprit, __u64 wait_ns, __u32 preemptions)
{
	struct cpu_state *st;

	/* Known at load time: where nothing charges the run-queue maps, the verifier, which
	 * checks a global function on its own, walks none of what follows. */
	if (!runq_culprits)
		return 0;
	st = this_cpu_state();
	if (!st)
		return 0;
	for (__u32 j = 0; j < BPERF_MAX_LEVELS; j++) {
		if (j >= st->charge.nr)
			break;
		runq_charge_total(st->charge.slot[j], wait_ns, preemptions);
		if (culprit != RUNQ_NO_SLOT)
			pend_pair(st, st->charge.slot[j], culprit, wait_ns, preemptions);
	}
	return 0;
}

/* runq_culprits: the slot of @task's innermost monitored cgroup, as a culprit;
 * RUNQ_NO_SLOT for the idle task, a cgroup none monitored, or slots that changed since
 * this CPU worked its charge lists out. */
static __always_inline __u32 culprit_slot(struct cpu_state *st, struct task_struct *task, bool bounded)
{
	struct bperf_charge *charge;
	struct cgroup *cg;

	if (!task->pid || (live_slots && st->slots_gen != live.slots_gen))
		return RUNQ_NO_SLOT;
	cg = task_cgroup(task->cgroups);
	if (!cg)
		return RUNQ_NO_SLOT;
	charge = charge_of(st, cg, cg->kn->id, bounded);
	return charge && charge->nr ? charge->slot[0] : RUNQ_NO_SLOT;
}

/* runq_culprits, before the switch is settled (st->charge is still @prev's): @prev
 * leaves this CPU still runnable, preempted by @next. */
static __always_inline void runq_preemption(struct cpu_state *st, struct task_struct *prev,
					    struct task_struct *next, bool bounded)
{
	__u32 culprit = culprit_slot(st, next, bounded);
	__u32 k = st->next_preempted++ & (RUNQ_PREEMPTED - 1);

	runq_charge(culprit, 0, 1);
	st->preemptors[k].tid = prev->pid;
	st->preemptors[k].culprit = culprit;
}

/* runq_culprits: the slot of whoever preempted task @tid on this CPU, if this CPU
 * remembers (then forgotten: the task runs); else RUNQ_NO_SLOT, and *@known false. */
static __always_inline __u32 preemptor_of(struct cpu_state *st, __u32 tid, bool *known)
{
	for (__u32 k = 0; k < RUNQ_PREEMPTED; k++) {
		if (st->preemptors[k].tid != tid)
			continue;
		st->preemptors[k].tid = 0;
		*known = true;
		return st->preemptors[k].culprit;
	}
	*known = false;
	return RUNQ_NO_SLOT;
}

/*
 * runq_culprits, after the switch is settled (st->charge is @next's): @next's wait
 * ends, as the scheduler will add it to its run_delay (rq->clock less
 * sched_info.last_queued), split among the CPU's last runs, newest first. What lies
 * before them goes to whoever preempted it here, or else to the oldest of the runs.
 * Then @next's run begins, as a culprit of the waits to come.
 */
static __always_inline void runq_switch_in(struct cpu_state *st, struct task_struct *next,
					   struct rq *rq, __u32 next_slot)
{
	struct runq_runs *runs = &st->runs;
	__u64 since, end;
	__u32 rest_to;
	bool known;

	if (!rq)
		return;
	end = rq->clock;
	since = next->pid ? next->sched_info.last_queued : 0;
	if (since && end > since) {
		rest_to = preemptor_of(st, next->pid, &known);
		for (__u32 i = 1; i <= RUNQ_RUNS && end > since; i++) {
			__u32 k = (runs->next - i) & (RUNQ_RUNS - 1);
			__u64 start = runs->start[k];

			if (!start)
				break;
			if (!known)
				rest_to = runs->slot[k];
			if (st->charge.nr)
				runq_charge(runs->slot[k], end - (start > since ? start : since), 0);
			end = start;
		}
		if (end > since && st->charge.nr)
			runq_charge(rest_to, end - since, 0);
	}
	runs->start[runs->next & (RUNQ_RUNS - 1)] = rq->clock;
	runs->slot[runs->next & (RUNQ_RUNS - 1)] = next_slot;
	runs->next++;
}

static __always_inline int on_switch(bool preempt, struct task_struct *prev_task,
				     struct task_struct *next_task, bool bounded)
{
	struct task_struct *prev = untrusted(prev_task), *next = untrusted(next_task);
	struct cpu_state *st = this_cpu_state();
	struct rq *rq = task_rq(next);
	__u64 now = cpu_clock_now(rq);
	bool preempted = preempted_out(preempt, prev);

	if (!st)
		return 0;
	take_switches(st, rq);
	take_preemption(st, preempted, prev);
	if (runq_culprits && preempted)
		runq_preemption(st, prev, next, bounded);
	settle_task_switch(st, prev, next, rq, now, HAVE_RQ && now, bounded);
	end_wait(st, next, rq);
	/* st->charge is @next's now: its innermost slot is @next's as a culprit. */
	if (runq_culprits)
		runq_switch_in(st, next, rq,
			       next->pid && st->charge.nr ? st->charge.slot[0] : RUNQ_NO_SLOT);
	return 0;
}

/*
 * Each hook comes in two or three programs, of which userspace loads one: NAME, with
 * bpf_loop; NAME_bounded, without it (before Linux 5.17, see resolve); NAME_old, without
 * it and without bpf_get_current_task_btf either (before 5.11): there the current task
 * is known only as a tracepoint's argument.
 */
SEC("tp_btf/sched_switch")
int BPF_PROG(bperf_on_switch, bool preempt, struct task_struct *prev, struct task_struct *next)
{
	return on_switch(preempt, prev, next, false);
}

SEC("tp_btf/sched_switch")
int BPF_PROG(bperf_on_switch_bounded, bool preempt, struct task_struct *prev,
	     struct task_struct *next)
{
	return on_switch(preempt, prev, next, true);
}

/* bperf's own events: a woken task waits for a CPU from now. */
SEC("tp_btf/sched_wakeup")
int BPF_PROG(bperf_on_wakeup, struct task_struct *task)
{
	wait_from(untrusted(task)->pid, bpf_ktime_get_ns());
	return 0;
}

SEC("tp_btf/sched_wakeup_new")
int BPF_PROG(bperf_on_wakeup_new, struct task_struct *task)
{
	wait_from(untrusted(task)->pid, bpf_ktime_get_ns());
	return 0;
}

/*
 * Outside a switch, in @task's context: marks this CPU busy (a flush that interrupts it
 * leaves it alone) and charges what @task ran up to @now. The caller clears st->busy
 * once it has done the rest of its work.
 */
static __always_inline void settle_busy(struct cpu_state *st, struct task_struct *task,
					struct rq *rq, __u64 now, bool bounded)
{
	st->busy = 1;
	asm volatile("" ::: "memory");
	take_switches(st, rq);
	settle_current_task(st, task, rq, now, bounded);
	asm volatile("" ::: "memory");
}

/*
 * Fires in the context of the task that wrote to cgroup.procs, after the move. When it
 * moved itself, its time up to now belongs to the old cgroup and from now to the new one.
 * (If the switch to it was not seen, all of its time since it arrived goes to the new
 * one: the move is already done.)
 */
static __always_inline int on_attach(struct task_struct *task, bool bounded)
{
	struct cpu_state *st = this_cpu_state();
	struct rq *rq = task_rq(task);

	if (!st)
		return 0;
	settle_busy(st, task, rq, cpu_clock_now(rq), bounded);
	st->busy = 0;
	return 0;
}

SEC("tp_btf/cgroup_attach_task")
int BPF_PROG(bperf_on_attach)
{
	return on_attach(this_task(), false);
}

SEC("tp_btf/cgroup_attach_task")
int BPF_PROG(bperf_on_attach_bounded)
{
	return on_attach(this_task(), true);
}

/* The task moved, if it moved itself (as @task_arg): a task moved by another is
 * charged to its old cgroup until it is switched out. */
SEC("tp_btf/cgroup_attach_task")
int BPF_PROG(bperf_on_attach_old, struct cgroup *dst, const char *path, struct task_struct *task_arg)
{
	struct task_struct *task = untrusted(task_arg);

	if ((__u64)task != bpf_get_current_task())
		return 0;
	return on_attach(task, true);
}

/*
 * bperf record: a task of this CPU's slice ran exec, which changes its command name
 * without a switch. The slice is cut there, so that what ran before the exec keeps the
 * old name and what runs after it has the new one. Fires in the task's context, after
 * the exec.
 */
static __always_inline int on_exec(struct task_struct *task, bool bounded)
{
	struct cpu_state *st = this_cpu_state();
	struct rq *rq = task_rq(task);
	__u64 now = cpu_clock_now(rq);

	if (!st)
		return 0;
	settle_busy(st, task, rq, now, bounded);
	if (account(now, false, 0))
		send_slice(st, BPERF_SLICE_CUT);
	if (st->owner == (__u64)task)
		open_slice(st, task, st->cgid);
	asm volatile("" ::: "memory");
	st->busy = 0;
	return 0;
}

SEC("tp_btf/sched_process_exec")
int BPF_PROG(bperf_on_exec)
{
	return on_exec(this_task(), false);
}

SEC("tp_btf/sched_process_exec")
int BPF_PROG(bperf_on_exec_bounded)
{
	return on_exec(this_task(), true);
}

/* The task that ran exec is the tracepoint's first argument. */
SEC("tp_btf/sched_process_exec")
int BPF_PROG(bperf_on_exec_old, struct task_struct *task)
{
	return on_exec(untrusted(task), true);
}

/* Bring this CPU's counts up to now; @task is current. */
static __always_inline int flush(struct task_struct *task, bool bounded)
{
	struct cpu_state *st = this_cpu_state();
	struct rq *rq = task_rq(task);
	__u64 now = cpu_clock_now(rq);

	/* Interrupted this CPU in the middle of bperf_on_attach or bperf_on_exec: the next
	 * flush will do. */
	if (!st || st->busy)
		return 0;
	if (!shared && !st->found)
		find_events(st, bpf_get_smp_processor_id());
	take_switches(st, rq);
	/* On a first look at this CPU, nothing before now is anybody's. */
	settle_current_task(st, task, rq, now, bounded);
	if (account(now, false, 0))
		send_slice(st, BPERF_SLICE_CUT);
	add_all_pending(st);
	if (record_slices && record_phase > st->recording)
		st->recording = record_phase;
	return 0;
}

/* Run by userspace on each CPU (BPF_PROG_TEST_RUN with BPF_F_TEST_RUN_ON_CPU) before a read. */
SEC("raw_tp")
int bperf_flush(void *ctx)
{
	return flush(this_task(), false);
}

SEC("raw_tp")
int bperf_flush_bounded(void *ctx)
{
	return flush(this_task(), true);
}

/*
 * bperf_flush without the current task: charges what was counted since the last reading
 * to what this CPU charges, with times from ktime (userspace sets use_ktime). A task
 * the CPU has not seen switched in is charged from its first switch on: userspace has
 * each CPU switch to one of its threads first (see visit_cpus in src/bpf/mod.rs).
 */
SEC("raw_tp")
int bperf_flush_old(void *ctx)
{
	struct cpu_state *st = this_cpu_state();
	__u64 now = cpu_clock_now(0);

	if (!st || st->busy)
		return 0;
	if (account(now, false, 0))
		send_slice(st, BPERF_SLICE_CUT);
	add_all_pending(st);
	if (record_slices && record_phase > st->recording)
		st->recording = record_phase;
	return 0;
}

/* Shared counters and track_tasks: a child of a tracked process or thread joins the slots it inherits
 * into (a new process by its tgid; any new task by its tid). */
static __always_inline void inherit(void *map, __u32 parent, __u32 child)
{
	struct bperf_proc *p, c = {};
	__u32 word = child >> 6;
	__u64 *w;

	if (!is_tracked(parent))
		return;
	p = bpf_map_lookup_elem(map, &parent);
	if (!p || !p->inherit)
		return;
	for (__u32 k = 0; k < BPERF_PROC_SLOTS; k++)
		if (p->inherit & (1U << k))
			c.slot[k] = p->slot[k];
	c.inherit = p->inherit;
	if (bpf_map_update_elem(map, &child, &c, BPF_ANY))
		return;
	/* Only this task's fork and free change its bit: adding it when clear sets it. An
	 * atomic add, where an atomic or needs Linux 5.12. */
	w = bpf_map_lookup_elem(&tracked, &word);
	if (w && !(*w & (1ULL << (child & 63))))
		__sync_fetch_and_add(w, 1ULL << (child & 63));
}

SEC("tp_btf/sched_process_fork")
int BPF_PROG(bperf_on_fork, struct task_struct *parent_task, struct task_struct *child_task)
{
	struct task_struct *parent = untrusted(parent_task), *child = untrusted(child_task);

	if (!TRACKS_TASKS || !live.nr_procs)
		return 0;
	if (child->tgid != parent->tgid)
		inherit(&proc_tgid, parent->tgid, child->tgid);
	inherit(&proc_tid, parent->pid, child->pid);
	return 0;
}

/* Shared counters and track_tasks: a task is gone for good (its last switch is long past). Its thread,
 * and with the group leader its process, stop being tracked: their ids can be reused.
 * What they counted stays in their slots. */
SEC("tp_btf/sched_process_free")
int BPF_PROG(bperf_on_free, struct task_struct *task_ptr)
{
	struct task_struct *task = untrusted(task_ptr);
	__u32 pid = task->pid, word = pid >> 6;
	__u64 *w;

	if (!TRACKS_TASKS || !live.nr_procs || !is_tracked(pid))
		return 0;
	bpf_map_delete_elem(&proc_tid, &pid);
	if (pid == task->tgid)
		bpf_map_delete_elem(&proc_tgid, &pid);
	if (bpf_map_lookup_elem(&proc_tid, &pid) || bpf_map_lookup_elem(&proc_tgid, &pid))
		return 0;
	/* Cleared by subtracting it when set (see inherit). */
	w = bpf_map_lookup_elem(&tracked, &word);
	if (w && (*w & (1ULL << (pid & 63))))
		__sync_fetch_and_add(w, -(1ULL << (pid & 63)));
	return 0;
}
