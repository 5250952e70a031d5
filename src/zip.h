/* A zip reader over a mapped file, for .npz archives and torch.save
 * checkpoints. Only what those writers produce: one disk, stored or
 * deflated members, zip64 sizes and offsets. Every size and offset read from
 * the file is checked against its length before it is used, so a hostile
 * archive cannot make us allocate or read out of bounds. */
#ifndef ZIP_H
#define ZIP_H
#include <stddef.h>
#include <stdint.h>
#include "arena.h"
#include "err.h"
#include "map.h"

enum { ZIP_STORED = 0, ZIP_DEFLATED = 8 };

typedef struct {
	const char *name;  /* NUL-terminated copy in the arena */
	int method;        /* ZIP_STORED or ZIP_DEFLATED */
	uint32_t crc;
	uint64_t csize;    /* bytes in the file */
	uint64_t usize;    /* bytes once inflated */
	uint64_t off;      /* offset of the data, past the local header */
} ZipMember;

typedef struct {
	const unsigned char *base;
	size_t len;
	Arena *a;
	ZipMember *m;      /* in central-directory order */
	size_t n;
	Map byname;        /* name -> ZipMember * */
} Zip;

/* Indexes the archive. Errors do not name the file; callers wrap them. */
int zip_open(Zip *z, const void *base, size_t len, Arena *a, Err *e);
const ZipMember *zip_find(const Zip *z, const char *name);
/* A stored member is returned in place (a pointer into the mapping); a
 * deflated one is inflated into the arena. Both are checked against the
 * member's CRC-32. */
int zip_read(const Zip *z, const ZipMember *m, const void **data, Err *e);

#endif
