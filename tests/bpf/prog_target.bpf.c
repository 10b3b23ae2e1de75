// SPDX-License-Identifier: GPL-2.0
/*
 * Targets for bperf stat -b's tests: two tracepoint programs on
 * sched_get_priority_min(2), a system call nothing else here makes. Each runs a loop of
 * its own length when the call's policy argument is the test's magic value, so that what
 * is counted inside them differs by the loops' difference.
 */
#include "../../src/bpf/types.h"
#include <bpf/bpf_helpers.h>

char LICENSE[] SEC("license") = "GPL";

/* The policy argument the tests call sched_get_priority_min with. */
const volatile int magic = -4242;

/* The loops' results, kept so that the compiler keeps the loops. */
__u64 sink_short, sink_long;

/*
 * struct syscall_trace_enter: the common header, the call number, its arguments. The
 * policy is an int: only the low 32 bits of its argument are set.
 */
struct sys_enter_args {
	__u64 common;
	long nr;
	unsigned long args[6];
};

static __always_inline __u64 spin(__u32 n)
{
	__u64 x = 1;

	for (__u32 i = 0; i < n; i++) {
		x = x * 3 + i;
		/* An empty asm keeps each iteration's work as written. */
		asm volatile("" : "+r"(x));
	}
	return x;
}

SEC("tracepoint/syscalls/sys_enter_sched_get_priority_min")
int bperf_target_short(struct sys_enter_args *ctx)
{
	if ((int)ctx->args[0] == magic)
		sink_short += spin(100);
	return 0;
}

SEC("tracepoint/syscalls/sys_enter_sched_get_priority_min")
int bperf_target_long(struct sys_enter_args *ctx)
{
	if ((int)ctx->args[0] == magic)
		sink_long += spin(1100);
	return 0;
}
