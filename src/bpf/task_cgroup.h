/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The cgroup of a task, shared by bperf.bpf.c and runq.bpf.c. The including program
 * declares `const volatile bool use_v1` (set by its loader: the perf_event controller
 * sits on a cgroup v1 hierarchy) before including this.
 */
#ifndef BPERF_TASK_CGROUP_H
#define BPERF_TASK_CGROUP_H

/* The cgroup of a task (its css_set @css) in the hierarchy that holds the perf_event
 * controller. Plain loads: callers hold BTF pointers. */
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

#endif
