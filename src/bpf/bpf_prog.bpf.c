// SPDX-License-Identifier: GPL-2.0
/*
 * Counting events inside one BPF program (bperf stat -b): an fentry and an fexit
 * program on the target program read every event's counter on this CPU when the target
 * starts and when it returns, and add the difference to this CPU's totals.
 *
 * Userspace points both programs at their target (bpf_program__set_attach_target)
 * before load, fills `events` with one counting perf event per (event, CPU) at
 * event * nr_cpus + cpu, and sums `totals` over the CPUs.
 */
#include "types.h"
#include <bpf/bpf_helpers.h>
#include "bpf_prog.h"

char LICENSE[] SEC("license") = "GPL";

const volatile __u32 nr_events = 1;
const volatile __u32 nr_cpus = 1;

struct {
	__uint(type, BPF_MAP_TYPE_PERF_EVENT_ARRAY);
	__uint(key_size, sizeof(__u32));
	__uint(value_size, sizeof(__u32));
} events SEC(".maps");

/* This CPU's readings when the target started, one per event. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct profile_readings);
} at_entry SEC(".maps");

/* This CPU's totals over the target's runs, one per event. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct profile_readings);
} totals SEC(".maps");

/* Reads every event on this CPU into `out`; a reading that failed is left zero. */
static __always_inline void read_all(struct profile_readings *out)
{
	__u32 cpu = bpf_get_smp_processor_id();

	for (__u32 i = 0; i < PROFILE_MAX_EVENTS; i++) {
		__u32 e = i;
		if (e >= nr_events)
			break;
		__u32 key = e * nr_cpus + cpu;
		if (bpf_perf_event_read_value(&events, key, &out->v[e], sizeof(out->v[e])))
			out->v[e] = (struct bpf_perf_event_value){};
	}
}

SEC("fentry/target")
int bpf_prog_entry(void *ctx)
{
	__u32 zero = 0;
	struct profile_readings *before = bpf_map_lookup_elem(&at_entry, &zero);

	if (before)
		read_all(before);
	return 0;
}

SEC("fexit/target")
int bpf_prog_exit(void *ctx)
{
	struct profile_readings after = {};
	__u32 zero = 0;

	/* Read first: what follows is not the target's. */
	read_all(&after);
	struct profile_readings *before = bpf_map_lookup_elem(&at_entry, &zero);
	struct profile_readings *sum = bpf_map_lookup_elem(&totals, &zero);
	if (!before || !sum)
		return 0;
	for (__u32 i = 0; i < PROFILE_MAX_EVENTS; i++) {
		__u32 e = i;
		if (e >= nr_events)
			break;
		/* An event read at exit but not at entry (enabled in between) adds nothing. */
		if (!before->v[e].enabled || !after.v[e].enabled)
			continue;
		sum->v[e].counter += after.v[e].counter - before->v[e].counter;
		sum->v[e].enabled += after.v[e].enabled - before->v[e].enabled;
		sum->v[e].running += after.v[e].running - before->v[e].running;
	}
	return 0;
}
