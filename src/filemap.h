/* Read-only file mappings whose bytes are cheaper to read through the file
 * than through the mapping. Under a paravirtualised MMU the first touch of
 * each mapped page from user space traps to the host: 15-19 us a page on
 * this project's machines, against 2 us for a pread of the same kilobyte
 * and a quarter of the time for a megabyte (the kernel copies from the page
 * cache through its own mapping). The mappings stay what the data pointers
 * point into; this only remembers which file and offset a pointer reads.
 *
 * A registry of a few mappings, process-wide: checkpoints are opened on a
 * helper thread and read on the main one, and the save's builds read them
 * after their owner's functions returned. A mapping not registered (table
 * full, dup refused) is read in place, as before: registering is a hint. */
#ifndef FILEMAP_H
#define FILEMAP_H
#include <stddef.h>
#include <sys/mman.h>
#include <sys/stat.h>

#include "err.h"

/* madvise's "map these pages now" (to read, to write), in one call
 * instead of a trap per page (Linux 5.14+; older kernels refuse it and the
 * pages fault in on first use). Older C libraries lack the names. */
#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22
#endif
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

/* The file at path opened to read, its stat in st; -1 (e set) unless it
 * is a regular file. O_NONBLOCK: a FIFO or a terminal is refused, not
 * waited on. The refusal says what path is instead, then hint ("give
 * experts.yaml as a file"). */
int file_open_regular(const char *path, struct stat *st, const char *hint, Err *e);

/* [base, base + len) maps fd's bytes (the file at path) from offset 0; fd
 * is duplicated, the caller closes its own. */
void filemap_add(const void *base, size_t len, int fd, const char *path);
/* Before the mapping at base goes (munmap). */
void filemap_remove(const void *base);
/* Copies the n bytes at src to dst through the file when src lies in a
 * registered mapping: 1. Else 0 (dst's bytes undefined), and the caller
 * reads src in place: a failed read too, where the mapping shows the
 * same bytes, or the same error, as a fault would. */
int filemap_read(void *dst, const void *src, size_t n);
/* Whether src lies in a registered mapping. */
int filemap_has(const void *src, size_t n);
/* The path of the registered mapping holding p, and p's offset in it;
 * NULL if none. No lock and no allocation: for a SIGBUS handler, whose
 * fault cannot have come from inside this file's locked code. */
const char *filemap_path_at(const void *p, size_t *off);

#endif
