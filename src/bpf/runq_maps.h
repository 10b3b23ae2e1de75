/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The run-queue counts' maps and how one slot is charged, shared by runq.bpf.c and
 * bperf.bpf.c (whose switch program charges the run-queue object's maps by these
 * names where it counts them itself). Include after runq.h and the BPF helpers.
 */
#ifndef RUNQ_MAPS_H
#define RUNQ_MAPS_H

/* Per monitored cgroup (slot), per CPU: what its tasks waited, all culprits together. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, struct runq_wait);
	__uint(max_entries, 1);
} runq_totals SEC(".maps");

/* Per (waiting slot, culprit slot): the culprit matrix, one value for all CPUs (added
 * to atomically) so that its size does not grow with them. Bounded: a pair that finds
 * it full is left out, and userspace counts what the totals have beyond the pairs as
 * "other" (with the culprits nobody monitors). */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__type(key, struct runq_pair);
	__type(value, struct runq_wait);
	__uint(max_entries, 1);
} runq_pairs SEC(".maps");

static __always_inline void runq_add(struct runq_wait *w, __u64 wait_ns, __u64 preemptions)
{
	w->wait_ns += wait_ns;
	w->preemptions += preemptions;
}

/* Charge slot @waiter's cell of the culprit matrix for @culprit (not RUNQ_NO_SLOT). */
static __always_inline void runq_charge_pair(__u32 waiter, __u32 culprit, __u64 wait_ns, __u64 preemptions)
{
	struct runq_pair key = { .waiter = waiter, .culprit = culprit };
	struct runq_wait *w, zero = {};

	w = bpf_map_lookup_elem(&runq_pairs, &key);
	if (!w) {
		bpf_map_update_elem(&runq_pairs, &key, &zero, BPF_NOEXIST);
		w = bpf_map_lookup_elem(&runq_pairs, &key);
	}
	/* Atomic adds of what is not zero only: clang turns an atomic add of 0 into an
	 * atomic or, which needs Linux 5.12. */
	if (w && wait_ns)
		__sync_fetch_and_add(&w->wait_ns, wait_ns);
	if (w && preemptions)
		__sync_fetch_and_add(&w->preemptions, preemptions);
}

/* Charge slot @slot's totals (this CPU's) with a wait or a preemption. */
static __always_inline void runq_charge_total(__u32 slot, __u64 wait_ns, __u64 preemptions)
{
	struct runq_wait *w = bpf_map_lookup_elem(&runq_totals, &slot);

	if (w)
		runq_add(w, wait_ns, preemptions);
}

/* Charge one waiting slot with a wait or a preemption behind @culprit. */
static __always_inline void runq_charge_slot(__u32 slot, __u32 culprit, __u64 wait_ns, __u64 preemptions)
{
	runq_charge_total(slot, wait_ns, preemptions);
	if (culprit != RUNQ_NO_SLOT)
		runq_charge_pair(slot, culprit, wait_ns, preemptions);
}

#endif
