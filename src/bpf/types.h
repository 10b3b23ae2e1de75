/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The handful of kernel types bperf's BPF program needs, declared by hand instead of a
 * multi-megabyte vmlinux.h. preserve_access_index makes every field access a CO-RE
 * relocation, resolved against the running kernel's BTF at load time, so only the
 * fields used here need to exist and their offsets never matter.
 */
#ifndef BPERF_TYPES_H
#define BPERF_TYPES_H

typedef unsigned char __u8;
typedef unsigned short __u16;
typedef unsigned int __u32;
typedef unsigned long long __u64;
typedef signed char __s8;
typedef signed short __s16;
typedef signed int __s32;
typedef signed long long __s64;
typedef __u16 __be16;
typedef __u32 __be32;
typedef __u32 __wsum;
typedef _Bool bool;
#define true 1
#define false 0

/* uapi constants (include/uapi/linux/bpf.h) */
enum {
	BPF_MAP_TYPE_HASH = 1,
	BPF_MAP_TYPE_ARRAY = 2,
	BPF_MAP_TYPE_PERF_EVENT_ARRAY = 4,
	BPF_MAP_TYPE_PERCPU_ARRAY = 6,
	BPF_MAP_TYPE_LRU_HASH = 9,
	BPF_MAP_TYPE_RINGBUF = 27,
};
/* bpf_ringbuf_output's flags */
#define BPF_RB_NO_WAKEUP (1ULL << 0)
#define BPF_RB_FORCE_WAKEUP (1ULL << 1)
#define BPF_F_MMAPABLE (1U << 10)
#define BPF_F_CURRENT_CPU 0xffffffffULL
#define BPF_ANY 0
#define BPF_NOEXIST 1
#define BPF_F_NO_PREALLOC (1U << 0)

struct bpf_perf_event_value {
	__u64 counter;
	__u64 enabled;
	__u64 running;
};

#ifndef BPF_NO_PRESERVE_ACCESS_INDEX
#pragma clang attribute push(__attribute__((preserve_access_index)), apply_to = record)
#endif

struct kernfs_node {
	__u64 id;
};

struct cgroup_subsys_state {
	struct cgroup *cgroup;
	struct cgroup_subsys_state *parent;
};

struct cgroup {
	struct cgroup_subsys_state self;
	struct kernfs_node *kn;
	int level; /* the root is 0 */
};

struct css_set {
	struct cgroup_subsys_state *subsys[14];
	struct cgroup *dfl_cgrp;
};

/* The run queue: its count of context switches, and its clock: sched_clock_cpu(), the
 * clock perf's software clocks use, as of the run queue's last update (see cpu_clock_now
 * in bperf.bpf.c). */
struct rq {
	__u64 nr_switches;
	__u64 clock;
};

struct cfs_rq {
	struct rq *rq; /* CONFIG_FAIR_GROUP_SCHED */
};

struct sched_entity {
	struct cfs_rq *cfs_rq;
};

/* CONFIG_SCHED_INFO, in run queue clock: last_arrival is when the task last started
 * running on a CPU, last_queued when it last became runnable on a run queue while not
 * running (0 once it runs). */
struct sched_info {
	__u64 last_arrival;
	__u64 last_queued;
};

struct task_struct {
	int pid;
	int tgid;
	struct css_set *cgroups;
	struct sched_entity se;
	struct sched_info sched_info;
	char comm[16];
};

/* A perf event array: one bpf_event_entry per index, holding the counting perf event. */
struct bpf_array {
	void *ptrs[0];
};

struct bpf_event_entry {
	struct perf_event *event;
};

/* local64_t on 64-bit kernels: { local_t a { atomic_long_t a { counter } } } */
struct bperf_local64 {
	struct {
		struct {
			__s64 counter;
		} a;
	} a;
};

struct hw_perf_event {
	struct bperf_local64 prev_count;
};

struct perf_event_context {
	__u64 timeoffset; /* time - timestamp: the context's time is now + timeoffset */
};

enum perf_event_state {
	PERF_EVENT_STATE_ACTIVE = 1,
};

struct perf_event {
	enum perf_event_state state;
	struct bperf_local64 count;
	struct hw_perf_event hw;
	struct perf_event_context *ctx;
};

#ifndef BPF_NO_PRESERVE_ACCESS_INDEX
#pragma clang attribute pop
#endif

enum cgroup_subsys_id {
	perf_event_cgrp_id = 0,
};

#endif
