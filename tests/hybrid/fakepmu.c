/*
 * LD_PRELOAD shim for tests/it/hybrid.rs: makes the kernel seem to have the core PMUs of a
 * sysfs fixture, for perf and bperf alike.
 *
 * Every perf_event_open(2) made through libc's syscall() is logged to $FAKEPMU_LOG as
 * `type config config1 config2 [flags] pid PID cpu CPU: opened` (or `refused`), the
 * flags those of tests/fixtures/perf-attrs.tsv. An event of a fixture PMU is opened as
 * a software dummy event on the same task and CPU instead: it opens, counts 0, and has
 * real enabled and running times. The fixture PMUs are the types listed in
 * $FAKEPMU_TYPES, and the hardware and cache events whose extended type (config >> 32)
 * is listed there; 1000 and 1003 list the plain hardware and cache events. Anything
 * else goes to the kernel as it is.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <linux/perf_event.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>

typedef long (*syscall_fn)(long, ...);

static int listed(unsigned long long type)
{
	const char *s = getenv("FAKEPMU_TYPES");
	char *end;

	while (s && *s) {
		unsigned long long t = strtoull(s, &end, 10);

		if (end == s)
			return 0;
		if (t == type)
			return 1;
		s = *end == ',' ? end + 1 : end;
	}
	return 0;
}

static int fake(const struct perf_event_attr *a)
{
	if (a->type == PERF_TYPE_HARDWARE || a->type == PERF_TYPE_HW_CACHE)
		return (a->config >> 32) ? listed(a->config >> 32) : listed(a->type + 1000);
	return listed(a->type);
}

long syscall(long nr, ...)
{
	static syscall_fn real;
	long arg[6];
	va_list ap;

	va_start(ap, nr);
	for (int i = 0; i < 6; i++)
		arg[i] = va_arg(ap, long);
	va_end(ap);
	if (!real)
		real = (syscall_fn)dlsym(RTLD_NEXT, "syscall");
	if (nr == SYS_perf_event_open) {
		struct perf_event_attr *a = (struct perf_event_attr *)arg[0];
		struct perf_event_attr dummy;
		const char *log = getenv("FAKEPMU_LOG");
		FILE *f = log ? fopen(log, "a") : NULL;
		long fd;
		int err;

		if (fake(a)) {
			memset(&dummy, 0, sizeof(dummy));
			memcpy(&dummy, a, a->size && a->size < sizeof(dummy) ? a->size : sizeof(dummy));
			dummy.size = sizeof(dummy);
			dummy.type = PERF_TYPE_SOFTWARE;
			dummy.config = PERF_COUNT_SW_DUMMY;
			dummy.config1 = dummy.config2 = 0;
			dummy.precise_ip = 0;
			fd = real(nr, (long)&dummy, arg[1], arg[2], arg[3], arg[4], arg[5]);
		} else {
			fd = real(nr, arg[0], arg[1], arg[2], arg[3], arg[4], arg[5]);
		}
		err = errno;
		if (f) {
			fprintf(f, "%u %#llx %#llx %#llx [%s%s%s%s%s%s%s%s] pid %d cpu %d: %s\n",
				a->type, (unsigned long long)a->config,
				(unsigned long long)a->config1, (unsigned long long)a->config2,
				a->exclude_user ? "u" : "", a->exclude_kernel ? "k" : "",
				a->exclude_hv ? "h" : "", a->exclude_idle ? "I" : "",
				a->exclude_host ? "H" : "", a->exclude_guest ? "G" : "",
				a->pinned ? "D" : "", a->exclusive ? "e" : "", (int)arg[1],
				(int)arg[2], fd < 0 ? "refused" : "opened");
			fclose(f);
		}
		errno = err;
		return fd;
	}
	return real(nr, arg[0], arg[1], arg[2], arg[3], arg[4], arg[5]);
}
