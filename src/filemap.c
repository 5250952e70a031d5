#include "filemap.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <stdint.h>
#include <unistd.h>

/* A model has a few external data files, a repair a few checkpoints; a
 * model of one file per tensor fills the table and the rest are read in
 * place (and no more descriptors are held open). */
enum { MAXMAP = 64 };

typedef struct {
	const char *base;
	size_t len;
	int fd;
	char *path;
} Entry;

int file_open_regular(const char *path, struct stat *st, const char *hint, Err *e)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
	if (fd < 0)
		return errf(e, "%s: %s", path, strerror(errno));
	if (fstat(fd, st) < 0) {
		int err = errno;
		close(fd);
		return errf(e, "%s: %s", path, strerror(err));
	}
	if (S_ISREG(st->st_mode))
		return fd;
	close(fd);
	return errf(e, "%s: %s, not a regular file; %s", path,
		    S_ISDIR(st->st_mode) ? "is a folder" : S_ISFIFO(st->st_mode) ? "is a FIFO" : "is a device or socket",
		    hint);
}

static Entry tab[MAXMAP];
static size_t ntab;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

void filemap_add(const void *base, size_t len, int fd, const char *path)
{
	if (!base || !len)
		return;
	char *name = strdup(path);
	if (!name)
		return;
	pthread_mutex_lock(&lock);
	int d = ntab < MAXMAP ? fcntl(fd, F_DUPFD_CLOEXEC, 0) : -1;
	if (d >= 0) {
		tab[ntab] = (Entry){ base, len, d, name };
		/* Whole before it counts, for filemap_path_at. */
		__atomic_store_n(&ntab, ntab + 1, __ATOMIC_RELEASE);
	}
	pthread_mutex_unlock(&lock);
	if (d < 0)
		free(name);
}

void filemap_remove(const void *base)
{
	pthread_mutex_lock(&lock);
	for (size_t i = 0; i < ntab; i++)
		if (tab[i].base == base) {
			close(tab[i].fd);
			free(tab[i].path);
			tab[i] = tab[--ntab];
			break;
		}
	pthread_mutex_unlock(&lock);
}

/* The descriptor and offset of [src, src + n), or -1. */
static int find(const void *src, size_t n, off_t *off)
{
	uintptr_t p = (uintptr_t)src;
	int fd = -1;
	pthread_mutex_lock(&lock);
	for (size_t i = 0; i < ntab && fd < 0; i++) {
		uintptr_t b = (uintptr_t)tab[i].base;
		if (p >= b && p - b <= tab[i].len && n <= tab[i].len - (p - b)) {
			fd = tab[i].fd;
			*off = (off_t)(p - b);
		}
	}
	pthread_mutex_unlock(&lock);
	return fd;
}

int filemap_has(const void *src, size_t n)
{
	off_t off;
	return find(src, n, &off) >= 0;
}

int filemap_read(void *dst, const void *src, size_t n)
{
	off_t off;
	int fd = find(src, n, &off);
	if (fd < 0)
		return 0;
	/* The descriptor stays open while we read: a mapping is removed only
	 * by its owner, after its last reader. */
	for (size_t done = 0; done < n;) {
		ssize_t k = pread(fd, (char *)dst + done, n - done, off + (off_t)done);
		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0)
			return 0;
		done += (size_t)k;
	}
	return 1;
}

const char *filemap_path_at(const void *p, size_t *off)
{
	uintptr_t a = (uintptr_t)p;
	size_t n = __atomic_load_n(&ntab, __ATOMIC_ACQUIRE);
	for (size_t i = 0; i < n && i < MAXMAP; i++) {
		uintptr_t b = (uintptr_t)tab[i].base;
		if (a >= b && a - b < tab[i].len) {
			*off = (size_t)(a - b);
			return tab[i].path;
		}
	}
	return NULL;
}
