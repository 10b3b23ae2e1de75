/* SPDX-License-Identifier: GPL-2.0 */
/* What bpf_prog.bpf.c shares with its loader, bpf_prog.rs. */
#ifndef BPF_PROG_H
#define BPF_PROG_H

/* Most events counted inside one target program. */
#define PROFILE_MAX_EVENTS 16

struct profile_readings {
	struct bpf_perf_event_value v[PROFILE_MAX_EVENTS];
};

#endif
