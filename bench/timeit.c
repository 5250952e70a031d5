/* timeit CMD...: runs CMD, writes "wall_s peak_rss_kib" to file
 * descriptor 3, and exits with CMD's status.
 *
 * GNU time's %e has two decimals, 12% of a 0.04 s run, and timing it from
 * the shell (date before and after) added 23 ms of process start-up on the
 * benchmark machine. Here the clock is read just around fork and wait4,
 * and the peak RSS is wait4's, as time's %M is. */
#define _GNU_SOURCE
#include <stdio.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

int main(int argc, char **argv)
{
	if (argc < 2) {
		fprintf(stderr, "usage: timeit CMD [ARG...] 3>TIMES\n");
		return 2;
	}
	FILE *out = fdopen(3, "w");
	if (!out) {
		perror("timeit: file descriptor 3");
		return 2;
	}
	struct timespec t0, t1;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	pid_t pid = fork();
	if (pid < 0) {
		perror("timeit: fork");
		return 2;
	}
	if (pid == 0) {
		fclose(out);
		execvp(argv[1], argv + 1);
		perror(argv[1]);
		_exit(127);
	}
	int st;
	struct rusage ru;
	if (wait4(pid, &st, 0, &ru) < 0) {
		perror("timeit: wait4");
		return 2;
	}
	clock_gettime(CLOCK_MONOTONIC, &t1);
	fprintf(out, "%.3f %ld\n", (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec),
		ru.ru_maxrss);
	if (fclose(out) != 0) {
		perror("timeit: writing the times");
		return 2;
	}
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}
