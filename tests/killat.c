/* LD_PRELOAD shim for the killed-write tests: the process kills itself
 * with SIGKILL (no handler, no cleanup) once it has written KILLAT_BYTES
 * bytes to files whose path starts with KILLAT_DIR. The kill then lands
 * mid-write every time, where a test polling /proc from outside would race
 * a write that can finish between two looks.
 * With KILLAT_TRUNCATE=FILE it truncates FILE to nothing there instead and
 * lets the run go on, or, without KILLAT_BYTES, right after the tool maps
 * FILE (its KILLAT_NTH-th mapping, default the first): an input rewritten
 * while the tool reads it. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

static ssize_t (*real_write)(int, const void *, size_t);
static long long limit = -1, done;
static const char *dir, *cut;
static long nth;

static void setup(void)
{
	const char *l = getenv("KILLAT_BYTES");
	dir = getenv("KILLAT_DIR");
	cut = getenv("KILLAT_TRUNCATE");
	nth = getenv("KILLAT_NTH") ? atol(getenv("KILLAT_NTH")) : 1;
	limit = l && dir && *dir ? atoll(l) : 0;
}

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
	if (limit < 0)
		setup();
	if (!limit || !watched(fd))
		return real_write(fd, buf, n);
	/* Never past the limit in one call: the kill comes with the file
	 * holding exactly KILLAT_BYTES. */
	if (done + (long long)n > limit)
		n = (size_t)(limit - done);
	ssize_t r = n ? real_write(fd, buf, n) : 0;
	if (r > 0)
		done += r;
	if (done >= limit && cut) {
		if (truncate(cut, 0) < 0)
			_exit(99);
		limit = 0;
	} else if (done >= limit) {
		raise(SIGKILL);
	}
	return r;
}

void *mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off)
{
	static void *(*real_mmap)(void *, size_t, int, int, int, off_t);
	if (!real_mmap)
		real_mmap = (void *(*)(void *, size_t, int, int, int, off_t))dlsym(RTLD_NEXT, "mmap");
	void *p = real_mmap(addr, len, prot, flags, fd, off);
	/* Not before a file's mapping: a sanitizer's runtime maps memory
	 * before the C library has the environment. */
	if (p == MAP_FAILED || fd < 0)
		return p;
	if (limit < 0)
		setup();
	struct stat a, b;
	if (cut && !limit && !fstat(fd, &a) && !stat(cut, &b) && a.st_dev == b.st_dev && a.st_ino == b.st_ino &&
	    --nth == 0) {
		if (truncate(cut, 0) < 0)
			_exit(99);
		cut = NULL;
	}
	return p;
}
