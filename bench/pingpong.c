/*
 * pingpong: the cost of one context switch, measured by two processes pinned to one CPU
 * that bounce one byte over two pipes.
 *
 *     pingpong ROUNDS CPU PROCS_A PROCS_B
 *
 * Side A (the parent) writes "0" to PROCS_A, side B (the child) to PROCS_B: each moves
 * itself into a cgroup (pass the same path twice for a same-cgroup run, "-" to stay
 * put). Once both are in place, they bounce the byte for a short warm-up, then for
 * ROUNDS timed rounds. Every round is two switches on CPU (A -> B, B -> A), so
 *
 *     ns_per_switch = elapsed_ns / (2 * ROUNDS)
 *
 * Output, one key=value per line, on stdout:
 *     ns_per_switch=  rounds=  elapsed_ns=  pid_a=  pid_b=  csw_a=  csw_b=
 * csw_a and csw_b are each side's context switches over its whole life (getrusage:
 * voluntary + involuntary), a cross-check for a tool's context-switches count.
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

static long long now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

int main(int argc, char **argv)
{
	long long rounds, warmup, i, t0, t1;
	int cpu, ab[2], ba[2], status;
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

	if (pipe(ab) || pipe(ba))
		die("pipe");
	child = fork();
	if (child < 0)
		die("fork");
	if (child == 0) {
		/* side B: move, say ready, then answer every byte */
		close(ab[1]);
		close(ba[0]);
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
	for (i = 0; i < rounds; i++) {
		xwrite(ab[1]);
		xread(ba[0]);
	}
	t1 = now_ns();

	if (wait4(child, &status, 0, &ru_b) != child)
		die("wait4");
	if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
		fprintf(stderr, "pingpong: side B failed\n");
		return 1;
	}
	getrusage(RUSAGE_SELF, &ru_a);
	printf("ns_per_switch=%.1f\n", (double)(t1 - t0) / (2.0 * rounds));
	printf("rounds=%lld\nelapsed_ns=%lld\n", rounds, t1 - t0);
	printf("pid_a=%d\npid_b=%d\n", (int)getpid(), (int)child);
	printf("csw_a=%ld\ncsw_b=%ld\n", ru_a.ru_nvcsw + ru_a.ru_nivcsw,
	       ru_b.ru_nvcsw + ru_b.ru_nivcsw);
	return 0;
}
