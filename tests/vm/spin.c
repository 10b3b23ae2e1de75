/* The arm64 guest's workload: `spin CGROUP_PROCS N` moves itself into a cgroup, then
 * retires exactly 2*N user-mode instructions in a two-instruction loop, and exits.
 * No libc: its own few instructions before and after the loop stay far below 0.1% of
 * any N the tests use, so 2*N is an exact oracle for instructions:u of that cgroup. */

static long syscall3(long nr, long a, long b, long c)
{
	register long x8 __asm__("x8") = nr;
	register long x0 __asm__("x0") = a;
	register long x1 __asm__("x1") = b;
	register long x2 __asm__("x2") = c;
	__asm__ volatile("svc 0" : "+r"(x0) : "r"(x8), "r"(x1), "r"(x2) : "memory");
	return x0;
}

enum { SYS_openat = 56, SYS_close = 57, SYS_write = 64, SYS_exit = 93, AT_FDCWD = -100, O_WRONLY = 1 };

static void die(const char *why, long len)
{
	syscall3(SYS_write, 2, (long)why, len);
	syscall3(SYS_exit, 1, 0, 0);
}

void spin_main(long *sp)
{
	long argc = sp[0];
	char **argv = (char **)(sp + 1);
	unsigned long n = 0;

	if (argc != 3)
		die("usage: spin CGROUP_PROCS N\n", 27);
	for (const char *p = argv[2]; *p; p++) {
		if (*p < '0' || *p > '9')
			die("spin: N must be a number\n", 25);
		n = n * 10 + (unsigned long)(*p - '0');
	}
	long fd = syscall3(SYS_openat, AT_FDCWD, (long)argv[1], O_WRONLY);
	if (fd < 0 || syscall3(SYS_write, fd, (long)"0\n", 2) != 2)
		die("spin: cannot join the cgroup\n", 29);
	syscall3(SYS_close, fd, 0, 0);
	if (n)
		__asm__ volatile("1: subs %0, %0, #1\n\tb.ne 1b" : "+r"(n) : : "cc");
	syscall3(SYS_exit, 0, 0, 0);
}

__asm__(".global _start\n_start:\n\tmov x0, sp\n\tbl spin_main\n");
