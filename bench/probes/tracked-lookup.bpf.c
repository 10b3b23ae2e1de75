// SPDX-License-Identifier: GPL-2.0
/*
 * How much does asking "is this task's process tracked?" cost a sched_switch program?
 * Four programs, each asking it of prev and next (all misses, as for most tasks): none
 * (the hook and the statistics alone), a hash map keyed by tgid, task local storage, and
 * a bitmap of tgids in an array map (one word load and a bit test). examples/probe_switch.rs
 * attaches each in turn and reads the kernel's BPF statistics; bench/results/levers.md
 * has the numbers and the build command.
 */
typedef unsigned char __u8; typedef unsigned short __u16; typedef unsigned int __u32; typedef unsigned long long __u64;
typedef int __s32; typedef long long __s64; typedef _Bool bool; typedef __u16 __be16; typedef __u32 __be32; typedef __u32 __wsum; typedef __u16 __sum16; typedef __u64 __be64;
enum bpf_func_id { BPF_FUNC_unspec };
#define BPF_MAP_TYPE_HASH 1
#define BPF_MAP_TYPE_TASK_STORAGE 29
#define BPF_F_NO_PREALLOC 1
struct task_struct { int tgid; } __attribute__((preserve_access_index));
#include <bpf_helpers.h>
#include <bpf_tracing.h>
#include <bpf_core_read.h>
char LICENSE[] SEC("license") = "GPL";

struct { __uint(type, BPF_MAP_TYPE_HASH); __type(key, __u32); __type(value, __u32); __uint(max_entries, 1024); } tracked SEC(".maps");
struct { __uint(type, BPF_MAP_TYPE_TASK_STORAGE); __uint(map_flags, BPF_F_NO_PREALLOC); __type(key, int); __type(value, __u32); } tstore SEC(".maps");
struct { __uint(type, 2 /* ARRAY */); __type(key, __u32); __type(value, __u64); __uint(max_entries, 65536); } bitmap SEC(".maps");
volatile __u64 hits;

static __always_inline bool tracked_bit(__u32 tgid)
{
	__u32 word = (tgid >> 6) & 65535;
	__u64 *w = bpf_map_lookup_elem(&bitmap, &word);
	return w && (*w & (1ULL << (tgid & 63)));
}

SEC("tp_btf/sched_switch")
int BPF_PROG(probe_bitmap, bool preempt, struct task_struct *prev, struct task_struct *next)
{
	if (tracked_bit(prev->tgid)) hits++;
	if (tracked_bit(next->tgid)) hits++;
	return 0;
}

SEC("tp_btf/sched_switch")
int BPF_PROG(probe_empty, bool preempt, struct task_struct *prev, struct task_struct *next) { return 0; }

SEC("tp_btf/sched_switch")
int BPF_PROG(probe_hash, bool preempt, struct task_struct *prev, struct task_struct *next)
{
	__u32 tgid = prev->tgid;
	__u32 *s = bpf_map_lookup_elem(&tracked, &tgid);
	if (s) hits++;
	tgid = next->tgid;
	s = bpf_map_lookup_elem(&tracked, &tgid);
	if (s) hits++;
	return 0;
}

SEC("tp_btf/sched_switch")
int BPF_PROG(probe_tstore, bool preempt, struct task_struct *prev, struct task_struct *next)
{
	__u32 *s = bpf_task_storage_get(&tstore, prev, 0, 0);
	if (s) hits++;
	s = bpf_task_storage_get(&tstore, next, 0, 0);
	if (s) hits++;
	return 0;
}
