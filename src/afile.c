#include "afile.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static int write_all(int fd, const unsigned char *p, size_t n)
{
	while (n) {
		ssize_t w = write(fd, p, n);
		if (w < 0) {
			if (errno == EINTR)
				continue;
			return errno;
		}
		p += w;
		n -= (size_t)w;
	}
	return 0;
}

/* Files open now, for afile_drop_all: opened and released on the main
 * thread only. A file past the table is still removed on every error
 * path but a signal's. */
enum { NOPEN = 8 };
static AFile *volatile open_files[NOPEN];

static void track(AFile *f, AFile *was)
{
	for (int i = 0; i < NOPEN; i++)
		if (open_files[i] == was) {
			open_files[i] = f;
			return;
		}
}

void afile_drop_all(void)
{
	for (int i = 0; i < NOPEN; i++) {
		AFile *f = open_files[i];
		if (f && f->tmpname && f->dirfd >= 0) {
			const char *tmp = strrchr(f->tmpname, '/');
			unlinkat(f->dirfd, tmp ? tmp + 1 : f->tmpname, 0);
		}
	}
}

static void release(AFile *f)
{
	track(NULL, f);
	if (f->fd >= 0 && f->fd != STDOUT_FILENO)
		close(f->fd);
	if (f->dirfd >= 0)
		close(f->dirfd);
	free(f->buf);
	free(f->tmpname);
	free(f->base);
	f->fd = f->dirfd = -1;
	f->buf = NULL;
	f->tmpname = f->base = NULL;
}

int afile_open(AFile *f, const char *path, int flags, Err *e)
{
	mode_t mode = 0666;
	*f = (AFile){ .path = path, .fd = -1, .dirfd = -1 };
	f->buf = malloc(AFILE_BUF);
	if (!f->buf)
		return errf(e, "%s: out of memory for the write buffer", path);
	if (!strcmp(path, "-")) {
		f->fd = STDOUT_FILENO;
		return 0;
	}
	size_t len = strlen(path);
	if (!len || path[len - 1] == '/') {
		release(f);
		return errf(e, "%s: is a folder, not a file name", path);
	}
	const char *slash = strrchr(path, '/');
	char *dir = slash ? strndup(path, (size_t)(slash - path) + (slash == path)) : strdup(".");
	f->base = strdup(slash ? slash + 1 : path);
	if (!dir || !f->base) {
		free(dir);
		release(f);
		return errf(e, "%s: out of memory", path);
	}
	f->dirfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (f->dirfd < 0) {
		errf(e, "%s: cannot open folder %s: %s", path, dir, strerror(errno));
		free(dir);
		release(f);
		return -1;
	}
	/* Replacing an existing file keeps its permissions; a device or FIFO
	 * is never replaced (rename over /dev/null as root would be a
	 * disaster): those want -o - and a redirection. */
	struct stat st;
	int keep = 0;
	if (fstatat(f->dirfd, f->base, &st, 0) == 0) {
		if (S_ISDIR(st.st_mode)) {
			free(dir);
			release(f);
			return errf(e, "%s: is a folder, not a file name", path);
		}
		if (!S_ISREG(st.st_mode)) {
			free(dir);
			release(f);
			return errf(e, "%s: exists and is not a regular file; write with -o - and redirect instead", path);
		}
		mode = st.st_mode & 07777;
		keep = 1;
	}
	f->fd = flags & AFILE_NAMED ? -1 : openat(f->dirfd, ".", O_TMPFILE | O_WRONLY | O_CLOEXEC, mode);
	if (f->fd >= 0) {
		f->tmpfile = 1;
	} else if (flags & AFILE_NAMED || errno == EOPNOTSUPP || errno == EISDIR || errno == EINVAL) {
		/* No O_TMPFILE here: a named temporary, removed on every error
		 * path (only SIGKILL can leave it behind). */
		f->tmpname = malloc(strlen(dir) + strlen(f->base) + 16);
		if (!f->tmpname) {
			free(dir);
			release(f);
			return errf(e, "%s: out of memory", path);
		}
		sprintf(f->tmpname, "%s/.%s.XXXXXX", dir, f->base);
		f->fd = mkostemp(f->tmpname, O_CLOEXEC);
		if (f->fd < 0) {
			free(f->tmpname);
			f->tmpname = NULL;
		} else if (!keep) {
			mode_t um = umask(0);
			umask(um);
			mode &= ~um;
		}
		if (f->fd >= 0 && fchmod(f->fd, mode) < 0) {
			errf(e, "%s: cannot set permissions of %s: %s", path, f->tmpname, strerror(errno));
			free(dir);
			afile_abort(f);
			return -1;
		}
	}
	if (f->fd < 0) {
		errf(e, "%s: cannot create a file in %s: %s", path, dir, strerror(errno));
		free(dir);
		release(f);
		return -1;
	}
	if (keep && f->tmpfile && fchmod(f->fd, mode) < 0) {
		errf(e, "%s: cannot set permissions: %s", path, strerror(errno));
		free(dir);
		afile_abort(f);
		return -1;
	}
	/* root replacing a user's file (--in-place) hands it back to them;
	 * for anyone else this fails harmlessly and the file is theirs. */
	if (keep && (st.st_uid != geteuid() || st.st_gid != getegid()))
		(void)!fchown(f->fd, st.st_uid, st.st_gid);
	free(dir);
	track(f, NULL);
	return 0;
}

int afile_check(const char *path, Err *e)
{
	AFile f;
	if (afile_open(&f, path, 0, e) < 0)
		return -1;
	afile_abort(&f);
	return 0;
}

/* Starts write-back of what has been written so far, every WB_STEP bytes:
 * the disk then works while we write the rest, and the fsync at commit
 * waits for a tail instead of the whole file. */
enum { WB_STEP = 32 << 20 };

static void writeback(AFile *f)
{
	if (f->fd == STDOUT_FILENO || f->nosync || f->written - f->wbdone < WB_STEP)
		return;
	unsigned long long upto = f->written - f->nbuf;
	sync_file_range(f->fd, (off_t)f->wbdone, (off_t)(upto - f->wbdone), SYNC_FILE_RANGE_WRITE);
	f->wbdone = upto;
}

static void flush(AFile *f)
{
	if (f->err || !f->nbuf)
		return;
	f->err = write_all(f->fd, f->buf, f->nbuf);
	f->nbuf = 0;
	writeback(f);
}

/* ext4's delayed allocation otherwise reserves and maps blocks page by
 * page as writes arrive: 337 MiB in 2 MiB writes took 0.086-0.101 s, and
 * 0.057-0.069 s after one fallocate (six alternating runs each; fsync'ed,
 * the same). The size is kept, so a failed or killed write leaves no
 * zeros past what it wrote. Errors are the writes' to report: a file
 * system without fallocate takes no hint, a full disk fails the writes
 * as before. */
void afile_reserve(AFile *f, unsigned long long n)
{
	if (f->fd >= 0 && f->fd != STDOUT_FILENO && n > f->written)
		(void)fallocate(f->fd, FALLOC_FL_KEEP_SIZE, (off_t)f->written, (off_t)(n - f->written));
}

void afile_write(AFile *f, const void *p, size_t n)
{
	/* An empty tensor's raw_data is (NULL, 0): memcpy from NULL is
	 * undefined even for 0 bytes. */
	if (f->err || !n)
		return;
	f->written += n;
	if (n >= AFILE_BUF - f->nbuf) {
		flush(f);
		if (f->err)
			return;
		if (n >= AFILE_BUF) {
			/* A large tensor goes straight from the arena to the file. */
			f->err = write_all(f->fd, p, n);
			writeback(f);
			return;
		}
	}
	memcpy(f->buf + f->nbuf, p, n);
	f->nbuf += n;
}

int afile_copy(AFile *f, int fd, off_t off, size_t n)
{
	if (f->err || !n)
		return 0;
	flush(f);
	if (f->err)
		return 0;
	f->written += n;
	/* The kernel copies page cache to page cache (or shares the extents,
	 * a reflink, where the file system can): no pass through user space,
	 * where each first touch of a mapped page traps to the host here. */
	while (n) {
		ssize_t r;
		if (!f->readcopy) {
			r = copy_file_range(fd, &off, f->fd, NULL, n, 0);
			if (r < 0 && (errno == EXDEV || errno == ENOSYS || errno == EINVAL || errno == EOPNOTSUPP)) {
				f->readcopy = 1; /* across file systems, or no such call */
				continue;
			}
		} else {
			r = pread(fd, f->buf, n < AFILE_BUF ? n : AFILE_BUF, off);
			if (r > 0 && (f->err = write_all(f->fd, f->buf, (size_t)r)))
				return 0;
			off += r > 0 ? r : 0;
		}
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0) {
			f->err = errno;
			return 0;
		}
		if (r == 0)
			return -1;
		n -= (size_t)r;
	}
	writeback(f);
	return 0;
}

/* Gives the unnamed inode a temporary name in the folder; rename then
 * replaces the target atomically (linkat cannot replace). */
static int name_tmpfile(AFile *f, Err *e)
{
	char proc[64];
	snprintf(proc, sizeof proc, "/proc/self/fd/%d", f->fd);
	size_t cap = strlen(f->base) + 32;
	f->tmpname = malloc(cap);
	if (!f->tmpname)
		return errf(e, "%s: out of memory", f->path);
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	unsigned long seed = (unsigned long)ts.tv_nsec ^ ((unsigned long)getpid() << 16);
	for (int i = 0; i < 100; i++) {
		seed = seed * 6364136223846793005UL + 1442695040888963407UL;
		snprintf(f->tmpname, cap, ".%s.%06lx", f->base, (seed >> 33) & 0xffffff);
		int rc = linkat(f->fd, "", f->dirfd, f->tmpname, AT_EMPTY_PATH);
		if (rc < 0 && errno != EEXIST)
			rc = linkat(AT_FDCWD, proc, f->dirfd, f->tmpname, AT_SYMLINK_FOLLOW);
		if (rc == 0) {
			f->tmpfile = 0;
			return 0;
		}
		if (errno != EEXIST)
			break;
	}
	errf(e, "%s: cannot name the finished file: %s", f->path, strerror(errno));
	free(f->tmpname);
	f->tmpname = NULL;
	return -1;
}

int afile_commit(AFile *f, Err *e)
{
	flush(f);
	if (f->err) {
		errf(e, "%s: write failed: %s", f->path, strerror(f->err));
		afile_abort(f);
		return -1;
	}
	if (f->fd == STDOUT_FILENO) {
		release(f);
		return 0;
	}
	if (!f->nosync && fsync(f->fd) < 0) {
		errf(e, "%s: fsync failed: %s", f->path, strerror(errno));
		afile_abort(f);
		return -1;
	}
	if (f->tmpfile && name_tmpfile(f, e) < 0) {
		afile_abort(f);
		return -1;
	}
	/* close reports deferred write errors on some file systems (NFS). */
	int rc = close(f->fd);
	f->fd = -1;
	if (rc < 0) {
		errf(e, "%s: write failed: %s", f->path, strerror(errno));
		afile_abort(f);
		return -1;
	}
	const char *tmp = strrchr(f->tmpname, '/');
	tmp = tmp ? tmp + 1 : f->tmpname;
	if (renameat(f->dirfd, tmp, f->dirfd, f->base) < 0) {
		errf(e, "%s: cannot rename the finished file into place: %s", f->path, strerror(errno));
		afile_abort(f);
		return -1;
	}
	free(f->tmpname);
	f->tmpname = NULL;
	/* The rename is durable only once the folder is. */
	if (!f->nosync && fsync(f->dirfd) < 0 && errno != EINVAL) {
		errf(e, "%s: fsync of the folder failed: %s", f->path, strerror(errno));
		release(f);
		return -1;
	}
	release(f);
	return 0;
}

void afile_abort(AFile *f)
{
	if (f->tmpname) {
		const char *tmp = strrchr(f->tmpname, '/');
		unlinkat(f->dirfd, tmp ? tmp + 1 : f->tmpname, 0);
	}
	release(f);
}
