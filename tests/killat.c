/* LD_PRELOAD shim for the killed-write tests: the process kills itself
 * with SIGKILL (no handler, no cleanup) once it has written KILLAT_BYTES
 * bytes to files whose path starts with KILLAT_DIR. The kill then lands
 * mid-write every time, where a test polling /proc from outside would race
 * a write that can finish between two looks. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static ssize_t (*real_write)(int, const void *, size_t);
static long long limit = -1, done;
static const char *dir;

static int watched(int fd)
{
	char link[64], path[PATH_MAX];
	snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
	ssize_t n = readlink(link, path, sizeof path - 1);
	if (n < 0)
		return 0;
	path[n] = 0;
	return strncmp(path, dir, strlen(dir)) == 0;
}

ssize_t write(int fd, const void *buf, size_t n)
{
	if (!real_write)
		real_write = (ssize_t(*)(int, const void *, size_t))dlsym(RTLD_NEXT, "write");
	if (limit < 0) {
		const char *l = getenv("KILLAT_BYTES");
		dir = getenv("KILLAT_DIR");
		limit = l && dir && *dir ? atoll(l) : 0;
	}
	if (!limit || !watched(fd))
		return real_write(fd, buf, n);
	/* Never past the limit in one call: the kill comes with the file
	 * holding exactly KILLAT_BYTES. */
	if (done + (long long)n > limit)
		n = (size_t)(limit - done);
	ssize_t r = n ? real_write(fd, buf, n) : 0;
	if (r > 0)
		done += r;
	if (done >= limit)
		raise(SIGKILL);
	return r;
}
