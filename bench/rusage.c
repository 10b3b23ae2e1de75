/*
 * rusage: runs a command and writes its peak RSS to a file.
 *
 *     rusage OUTFILE CMD [ARGS...]
 *
 * Writes `maxrss_kb=N` (wait4's ru_maxrss of CMD) to OUTFILE and exits with CMD's exit
 * status (128 + signal if it was killed). bench/run starts tools through this small
 * program rather than directly: ru_maxrss survives execve, so a child forked from the
 * Python interpreter would report at least the interpreter's own RSS.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

int main(int argc, char **argv)
{
	struct rusage ru;
	int status;
	pid_t pid;
	FILE *out;

	if (argc < 3) {
		fprintf(stderr, "usage: %s OUTFILE CMD [ARGS...]\n", argv[0]);
		return 2;
	}
	pid = fork();
	if (pid < 0) {
		perror("rusage: fork");
		return 2;
	}
	if (pid == 0) {
		execvp(argv[2], argv + 2);
		fprintf(stderr, "rusage: %s: %s\n", argv[2], strerror(errno));
		_exit(127);
	}
	while (wait4(pid, &status, 0, &ru) < 0)
		if (errno != EINTR) {
			perror("rusage: wait4");
			return 2;
		}
	out = fopen(argv[1], "w");
	if (out) {
		fprintf(out, "maxrss_kb=%ld\n", ru.ru_maxrss);
		fclose(out);
	}
	if (WIFSIGNALED(status))
		return 128 + WTERMSIG(status);
	return WEXITSTATUS(status);
}
