/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Whether a task leaves its CPU still runnable, shared by bperf.bpf.c and runq.bpf.c.
 */
#ifndef BPERF_TASK_STATE_H
#define BPERF_TASK_STATE_H

/* The task's state under its two names: __state from 5.14, state before. */
struct task_struct___new {
	unsigned int __state;
} __attribute__((preserve_access_index));

struct task_struct___old {
	long state;
} __attribute__((preserve_access_index));

/* Whether @prev leaves its CPU still runnable (TASK_RUNNING, 0): what the kernel counts
 * as an involuntary switch, with @preempt. sched_switch passes prev_state only from
 * 5.18; the task's own field is read on every kernel, with a plain load: callers hold
 * BTF pointers. */
static __always_inline bool still_runnable(struct task_struct *prev)
{
	struct task_struct___new *now = (void *)prev;
	struct task_struct___old *before = (void *)prev;

	if (bpf_core_field_exists(now->__state))
		return now->__state == 0;
	return before->state == 0;
}

#endif
