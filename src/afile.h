/* Atomic file output: the bytes go to an unnamed temporary file in the
 * target's folder (O_TMPFILE; mkstemp where the file system lacks it),
 * are fsync'ed, then renamed over the target and the folder fsync'ed.
 * A reader sees the old file or the whole new one, never a prefix; a
 * process killed mid-write leaves nothing behind (with O_TMPFILE even on
 * SIGKILL, since the inode has no name until commit). */
#ifndef AFILE_H
#define AFILE_H
#include <stddef.h>
#include <sys/types.h>
#include "err.h"

enum { AFILE_BUF = 1 << 20 };

typedef struct {
	const char *path;  /* target, as given; "-" is standard output */
	int fd, dirfd;
	int tmpfile;       /* 1: O_TMPFILE, still unnamed */
	char *tmpname;     /* mkstemp fallback: name inside the folder, malloc'ed */
	char *base;        /* target's name inside the folder, malloc'ed */
	unsigned char *buf;
	size_t nbuf;
	int err;           /* first errno of a failed write; sticky */
	unsigned long long written;
	unsigned long long wbdone; /* bytes handed to write-back (sync_file_range) */
	int nosync;        /* set after open: no fsync at commit (the rename stays atomic) */
	int readcopy;      /* afile_copy reads and writes: the kernel would not copy */
} AFile;

enum {
	AFILE_NAMED = 1 << 0, /* use the mkstemp fallback even where O_TMPFILE works (tests) */
};
/* A new file gets 0666 minus the umask; an existing target keeps its mode
 * and owner. "-" writes straight to standard output (nothing atomic about
 * a pipe). */
int afile_open(AFile *f, const char *path, int flags, Err *e);
/* Whether afile_open would succeed on path, by opening and aborting: a
 * run checks its outputs before the work, not after. */
int afile_check(const char *path, Err *e);
/* The size the file will have, as a hint: blocks are allocated up front
 * where the file system can (fallocate, size kept), else nothing. */
void afile_reserve(AFile *f, unsigned long long n);
/* Buffered; on failure remembers errno and drops further writes, so a
 * caller streaming through callbacks checks once, at commit. */
void afile_write(AFile *f, const void *p, size_t n);
/* n bytes of the file fd from offset off, appended. -1 when fd ends
 * before them (changed under us); a failed write is sticky in f->err, as
 * afile_write's, and reported by afile_commit. */
int afile_copy(AFile *f, int fd, off_t off, size_t n);
/* Flush, fsync, name, rename, fsync the folder. On error the temporary is
 * removed and the target untouched. Closes f either way. */
int afile_commit(AFile *f, Err *e);
/* Drops everything written; the target is untouched. */
void afile_abort(AFile *f);
/* Removes every open file's named temporary, if any, and nothing else:
 * for a fatal signal's handler (async-signal-safe), which then exits. */
void afile_drop_all(void);

#endif
