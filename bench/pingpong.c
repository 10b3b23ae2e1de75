/*
 * pingpong: the cost of one context switch, measured by two processes pinned to one CPU
 * that bounce one byte over two pipes.
 *
 *     pingpong ROUNDS CPU PROCS_A PROCS_B
 *
 * Side A (the parent) writes "0" to PROCS_A, side B (the child) to PROCS_B: each moves
 * itself into a cgroup (pass the same path twice for a same-cgroup run, "-" to stay
 * put). Once both are in place, they bounce the byte for a short warm-up, then for
 * ROUNDS timed rounds (rounded up to whole chunks of CHUNK). Every round is two switches
 * on CPU (A -> B, B -> A), so
 *
 *     ns_per_switch = time of the timed rounds / (2 * ROUNDS)
 *
 * A yardstick for the host: on the VMs this was written on, the same ping-pong runs
 * 10-15% faster or slower from one second to the next, for reasons outside the guest
 * (plain computation keeps its speed; system calls do not). After every chunk of
 * rounds, side A times REF_PAIRS writes and reads of one byte through a pipe to itself:
 * system calls like the ping-pong's, but no context switch, so no tool that hooks
 * switches adds to them. Each chunk's ns per switch over the ns per pair just after it
 * follows the host far less than either does; the median over the chunks is per_ref.
 * bench/run turns it back into ns at a yardstick common to the whole run.
 *
 * Output, one key=value per line, on stdout:
 *     ns_per_switch=  ref_ns=  per_ref=  rounds=  elapsed_ns=  pid_a=  pid_b=  csw_a=  csw_b=
 * ref_ns is the mean ns per yardstick pair. elapsed_ns is the whole timed phase,
 * yardstick included. csw_a and csw_b are each side's context switches over its whole
 * life (getrusage: voluntary + involuntary), a cross-check for a tool's context-switches
 * count.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static void die(const char *what)
{
	fprintf(stderr, "pingpong: %s: %s\n", what, strerror(errno));
	exit(1);
}

static void pin(int cpu)
{
	cpu_set_t set;

	CPU_ZERO(&set);
	CPU_SET(cpu, &set);
	if (sched_setaffinity(0, sizeof(set), &set))
		die("sched_setaffinity");
}

static void enter_cgroup(const char *procs)
{
	int fd;

	if (strcmp(procs, "-") == 0)
		return;
	fd = open(procs, O_WRONLY | O_CLOEXEC);
	if (fd < 0)
		die(procs);
	if (write(fd, "0", 1) != 1)
		die(procs);
	close(fd);
}

static void xwrite(int fd)
{
	char c = 'x';

	while (write(fd, &c, 1) != 1)
		if (errno != EINTR)
			die("write");
}

static void xread(int fd)
{
	char c;
	ssize_t n;

	for (;;) {
		n = read(fd, &c, 1);
		if (n == 1)
			return;
		if (n == 0) {
			fprintf(stderr, "pingpong: the other side went away\n");
			exit(1);
		}
		if (errno != EINTR)
			die("read");
	}
}

#define CHUNK 1000     /* timed rounds between two looks at the yardstick */
#define REF_PAIRS 500  /* write+read pairs through a pipe to itself per look */

static long long now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static int by_value(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

/* REF_PAIRS one-byte writes and reads through the pipe @self; returns the ns taken. */
static long long yardstick(int self[2])
{
	long long t = now_ns();

	for (int k = 0; k < REF_PAIRS; k++) {
		xwrite(self[1]);
		xread(self[0]);
	}
	return now_ns() - t;
}

int main(int argc, char **argv)
{
	long long rounds, warmup, i, t0, t1, t, switch_ns = 0, ref_ns = 0;
	long long chunks, c;
	int cpu, ab[2], ba[2], self[2], status;
	double *per_ref;
	struct rusage ru_a, ru_b;
	pid_t child;

	if (argc != 5) {
		fprintf(stderr, "usage: %s ROUNDS CPU PROCS_A PROCS_B\n", argv[0]);
		return 2;
	}
	rounds = atoll(argv[1]);
	cpu = atoi(argv[2]);
	if (rounds <= 0 || cpu < 0) {
		fprintf(stderr, "pingpong: bad ROUNDS or CPU\n");
		return 2;
	}
	warmup = rounds / 20 > 1000 ? rounds / 20 : 1000;
	chunks = (rounds + CHUNK - 1) / CHUNK;
	rounds = chunks * CHUNK;
	per_ref = calloc(chunks, sizeof(*per_ref));
	if (!per_ref)
		die("calloc");

	if (pipe(ab) || pipe(ba) || pipe(self))
		die("pipe");
	child = fork();
	if (child < 0)
		die("fork");
	if (child == 0) {
		/* side B: move, say ready, then answer every byte */
		close(ab[1]);
		close(ba[0]);
		close(self[0]);
		close(self[1]);
		pin(cpu);
		enter_cgroup(argv[4]);
		xwrite(ba[1]);
		for (i = 0; i < warmup + rounds; i++) {
			xread(ab[0]);
			xwrite(ba[1]);
		}
		_exit(0);
	}

	/* side A */
	close(ab[0]);
	close(ba[1]);
	pin(cpu);
	enter_cgroup(argv[3]);
	xread(ba[0]); /* B is in place */
	for (i = 0; i < warmup; i++) {
		xwrite(ab[1]);
		xread(ba[0]);
	}
	t0 = now_ns();
	for (c = 0; c < chunks; c++) {
		long long sw, ref;

		t = now_ns();
		for (i = 0; i < CHUNK; i++) {
			xwrite(ab[1]);
			xread(ba[0]);
		}
		sw = now_ns() - t;
		ref = yardstick(self);
		switch_ns += sw;
		ref_ns += ref;
		per_ref[c] = ((double)sw / (2.0 * CHUNK)) / ((double)ref / REF_PAIRS);
	}
	t1 = now_ns();
	qsort(per_ref, chunks, sizeof(*per_ref), by_value);

	if (wait4(child, &status, 0, &ru_b) != child)
		die("wait4");
	if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
		fprintf(stderr, "pingpong: side B failed\n");
		return 1;
	}
	getrusage(RUSAGE_SELF, &ru_a);
	printf("ns_per_switch=%.1f\n", (double)switch_ns / (2.0 * rounds));
	printf("ref_ns=%.1f\n", (double)ref_ns / ((double)REF_PAIRS * chunks));
	printf("per_ref=%.5f\n", chunks % 2 ? per_ref[chunks / 2]
					      : (per_ref[chunks / 2 - 1] + per_ref[chunks / 2]) / 2);
	printf("rounds=%lld\nelapsed_ns=%lld\n", rounds, t1 - t0);
	printf("pid_a=%d\npid_b=%d\n", (int)getpid(), (int)child);
	printf("csw_a=%ld\ncsw_b=%ld\n", ru_a.ru_nvcsw + ru_a.ru_nivcsw,
	       ru_b.ru_nvcsw + ru_b.ru_nivcsw);
	return 0;
}
