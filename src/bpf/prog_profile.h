/* SPDX-License-Identifier: GPL-2.0 */
/* What prog_profile.bpf.c shares with its loader, prog_profile.rs. */
#ifndef PROG_PROFILE_H
#define PROG_PROFILE_H

/* Most events counted inside one target program. */
#define PROFILE_MAX_EVENTS 16

struct profile_readings {
	struct bpf_perf_event_value v[PROFILE_MAX_EVENTS];
};

#endif
