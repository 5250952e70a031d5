/* A tiny writer of stored zip archives, optionally in zip64 form (saturated
 * 32-bit fields, zip64 extra fields, zip64 end records), to cover what the
 * Python and Info-ZIP fixtures do not: the zip tests edit its bytes into
 * malformed archives, the npz tests write members larger than a fixture.
 * Header-only, like testutil.h.
 *
 *   ZipBuf o = { 0 };
 *   size_t cd = zb_build(&o, 0, 2, names, data, NULL);  // strlen(data[i])
 *   ... o.b[cd + 8] = 1; ...                             // edit, then open
 *   free(o.b);
 */
#ifndef ZIPBUILD_H
#define ZIPBUILD_H
#include <check.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

typedef struct {
	unsigned char *b;
	size_t n, cap;
} ZipBuf;

static inline void zb_put(ZipBuf *o, const void *p, size_t n)
{
	if (o->n + n > o->cap) {
		o->cap = 2 * (o->n + n) + 4096;
		o->b = realloc(o->b, o->cap);
		ck_assert_ptr_nonnull(o->b);
	}
	memcpy(o->b + o->n, p, n);
	o->n += n;
}
static inline void zb_16(ZipBuf *o, unsigned v) { unsigned char x[2] = { v & 255, v >> 8 & 255 }; zb_put(o, x, 2); }
static inline void zb_32(ZipBuf *o, uint32_t v) { zb_16(o, v & 0xffff); zb_16(o, v >> 16); }
static inline void zb_64(ZipBuf *o, uint64_t v) { zb_32(o, (uint32_t)v); zb_32(o, (uint32_t)(v >> 32)); }

/* An archive of n (<= 8) stored members into o, replacing what it held:
 * names[i] holding len[i] bytes at data[i] (len NULL: strlen). The first
 * local header is at 0, member i's data right after its name; returns the
 * central directory's offset. */
static inline size_t zb_build(ZipBuf *o, int zip64, int n, const char *const *names, const char *const *data,
			      const size_t *len)
{
	size_t lh[8], dl[8];
	uint32_t crc[8];
	ck_assert_int_le(n, 8);
	o->n = 0;
	for (int i = 0; i < n; i++) {
		dl[i] = len ? len[i] : strlen(data[i]);
		lh[i] = o->n;
		crc[i] = (uint32_t)crc32(0, (const Bytef *)data[i], (uInt)dl[i]);
		zb_32(o, 0x04034b50); zb_16(o, 20); zb_16(o, 0); zb_16(o, 0); zb_16(o, 0); zb_16(o, 0);
		zb_32(o, crc[i]);
		zb_32(o, (uint32_t)dl[i]); zb_32(o, (uint32_t)dl[i]);
		zb_16(o, (unsigned)strlen(names[i])); zb_16(o, 0);
		zb_put(o, names[i], strlen(names[i]));
		zb_put(o, data[i], dl[i]);
	}
	size_t cd = o->n;
	for (int i = 0; i < n; i++) {
		zb_32(o, 0x02014b50); zb_16(o, 45); zb_16(o, 45); zb_16(o, 0); zb_16(o, 0); zb_16(o, 0); zb_16(o, 0);
		zb_32(o, crc[i]);
		zb_32(o, zip64 ? 0xffffffff : (uint32_t)dl[i]); zb_32(o, zip64 ? 0xffffffff : (uint32_t)dl[i]);
		zb_16(o, (unsigned)strlen(names[i])); zb_16(o, zip64 ? 28 : 0); zb_16(o, 0);
		zb_16(o, 0); zb_16(o, 0); zb_32(o, 0);
		zb_32(o, zip64 ? 0xffffffff : (uint32_t)lh[i]);
		zb_put(o, names[i], strlen(names[i]));
		if (zip64) {
			zb_16(o, 1); zb_16(o, 24); zb_64(o, dl[i]); zb_64(o, dl[i]); zb_64(o, lh[i]);
		}
	}
	size_t cdlen = o->n - cd;
	if (zip64) {
		size_t e64 = o->n;
		zb_32(o, 0x06064b50); zb_64(o, 44); zb_16(o, 45); zb_16(o, 45); zb_32(o, 0); zb_32(o, 0);
		zb_64(o, (uint64_t)n); zb_64(o, (uint64_t)n); zb_64(o, cdlen); zb_64(o, cd);
		zb_32(o, 0x07064b50); zb_32(o, 0); zb_64(o, e64); zb_32(o, 1);
	}
	zb_32(o, 0x06054b50); zb_16(o, 0); zb_16(o, 0);
	zb_16(o, zip64 ? 0xffff : (unsigned)n); zb_16(o, zip64 ? 0xffff : (unsigned)n);
	zb_32(o, zip64 ? 0xffffffff : (uint32_t)cdlen); zb_32(o, zip64 ? 0xffffffff : (uint32_t)cd);
	zb_16(o, 0);
	return cd;
}

#endif
