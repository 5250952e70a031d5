#include "zip.h"

#include <limits.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "filemap.h"

enum {
	EOCD_SIG = 0x06054b50,
	EOCD_LEN = 22,
	LOC64_SIG = 0x07064b50,
	LOC64_LEN = 20,
	EOCD64_SIG = 0x06064b50,
	EOCD64_LEN = 56,
	CEN_SIG = 0x02014b50,
	CEN_LEN = 46,
	LOC_SIG = 0x04034b50,
	LOC_LEN = 30,
	DD_SIG = 0x08074b50,
	/* Deflate cannot expand more than about 1032:1; a member declaring more
	 * lies, and we refuse it before allocating its output. */
	MAX_RATIO = 1032,
};

static uint16_t rd16(const unsigned char *p)
{
	return (uint16_t)(p[0] | p[1] << 8);
}

static uint32_t rd32(const unsigned char *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint64_t rd64(const unsigned char *p)
{
	return (uint64_t)rd32(p) | (uint64_t)rd32(p + 4) << 32;
}

/* True when [off, off+n) lies inside a file of len bytes, without overflow. */
static int inside(uint64_t off, uint64_t n, size_t len)
{
	return off <= len && n <= len - off;
}

static long find_eocd(const unsigned char *b, size_t len)
{
	if (len < EOCD_LEN)
		return -1;
	/* The record ends the file, followed only by a comment of <= 65535 bytes. */
	size_t lo = len - EOCD_LEN > 65535 ? len - EOCD_LEN - 65535 : 0;
	for (size_t i = len - EOCD_LEN + 1; i-- > lo;)
		if (rd32(b + i) == EOCD_SIG && i + EOCD_LEN + rd16(b + i + 20) == len)
			return (long)i;
	return -1;
}

/* Applies the zip64 extended-information extra field (id 1): it holds the
 * 64-bit values of exactly those fields that are saturated in the record. */
static int zip64_extra(const unsigned char *x, size_t xlen, ZipMember *m,
	uint64_t *lhoff, int need_u, int need_c, int need_o, Err *e)
{
	while (xlen >= 4) {
		uint16_t id = rd16(x), n = rd16(x + 2);
		if ((size_t)n > xlen - 4)
			return errf(e, "member '%s': extra field runs past its record", m->name);
		if (id == 1) {
			const unsigned char *p = x + 4;
			size_t left = n;
			uint64_t *want[3] = { need_u ? &m->usize : NULL, need_c ? &m->csize : NULL,
				need_o ? lhoff : NULL };
			for (int k = 0; k < 3; k++) {
				if (!want[k])
					continue;
				if (left < 8)
					return errf(e, "member '%s': zip64 extra field too short", m->name);
				*want[k] = rd64(p);
				p += 8;
				left -= 8;
			}
			return 0;
		}
		x += 4 + n;
		xlen -= 4 + (size_t)n;
	}
	if (need_u || need_c || need_o)
		return errf(e, "member '%s': 32-bit size or offset saturated but no zip64 extra field", m->name);
	return 0;
}

/* The zip64 sizes of a local header's extra field (id 1): both sizes,
 * uncompressed first, whenever either 32-bit field is saturated. */
static int local_zip64(const unsigned char *x, size_t xlen, uint64_t *usize, uint64_t *csize)
{
	while (xlen >= 4) {
		uint16_t id = rd16(x), n = rd16(x + 2);
		if ((size_t)n > xlen - 4)
			return -1;
		if (id == 1) {
			if (n < 16)
				return -1;
			*usize = rd64(x + 4);
			*csize = rd64(x + 12);
			return 0;
		}
		x += 4 + n;
		xlen -= 4 + (size_t)n;
	}
	return -1;
}

/* A reader that trusts the local header must see the member the central
 * directory describes: same name, method, flags that matter, CRC and
 * sizes (those of the data descriptor when bit 3 defers them). Returns
 * the bytes the member's record ends with past its data (the data
 * descriptor), or -1. */
static long local_agrees(const Zip *z, const ZipMember *m, uint64_t lh, uint16_t cflags, size_t nlen, Err *e)
{
	const unsigned char *b = z->base, *l = b + lh;
	size_t len = z->len;
	uint16_t lflags = rd16(l + 6), lnlen = rd16(l + 26), lxlen = rd16(l + 28);
	if (!inside(lh + LOC_LEN, (uint64_t)lnlen + lxlen, len))
		return errf(e, "member '%s': its local header runs past the end of the file; file truncated?", m->name);
	if (lnlen != nlen || memcmp(l + LOC_LEN, m->name, nlen))
		return errf(e, "member '%s': the local header names another file than the central directory; the archive is forged or damaged",
			m->name);
	if (rd16(l + 8) != m->method || ((lflags ^ cflags) & 9))
		return errf(e, "member '%s': the local header's compression method or flags differ from the central directory's; the archive is forged or damaged",
			m->name);
	uint32_t crc = rd32(l + 14);
	uint64_t cs = rd32(l + 18), us = rd32(l + 22);
	if ((cs == 0xffffffff || us == 0xffffffff) &&
	    local_zip64(l + LOC_LEN + lnlen, lxlen, &us, &cs) < 0)
		return errf(e, "member '%s': the local header's sizes are saturated but it has no zip64 extra field", m->name);
	if (!(cflags & 8)) {
		if (crc != m->crc || cs != m->csize || us != m->usize)
			return errf(e, "member '%s': the local header's CRC or sizes differ from the central directory's; the archive is forged or damaged",
				m->name);
		return 0;
	}
	/* Sizes and CRC deferred to a data descriptor after the data (what
	 * torch.save writes): each zero in the local header, or the same
	 * (torch's writer fills the CRC of its first member and leaves the
	 * sizes zero). */
	if ((crc && crc != m->crc) || (cs && cs != m->csize) || (us && us != m->usize))
		return errf(e, "member '%s': the local header's CRC or sizes differ from the central directory's; the archive is forged or damaged",
			m->name);
	uint64_t at = m->off + m->csize;
	long sig = inside(at, 4, len) && rd32(b + at) == DD_SIG ? 4 : 0;
	for (int w = 4; w <= 8; w += 4) {
		uint64_t n = (uint64_t)sig + 4 + 2 * (uint64_t)w;
		if (!inside(at, n, len))
			break;
		const unsigned char *d = b + at + sig;
		uint64_t dc = w == 4 ? rd32(d + 4) : rd64(d + 4), du = w == 4 ? rd32(d + 8) : rd64(d + 12);
		/* The descriptor's CRC is not compared: real torch.save files
		 * carry a stale one (ultralytics' best.pt: data and central
		 * directory agree, the descriptor does not); the sizes say where
		 * the record ends, which is what a streaming reader needs. */
		if (dc == m->csize && du == m->usize)
			return (long)n;
	}
	return errf(e, "member '%s': its data descriptor is missing or differs from the central directory; the archive is forged or damaged",
		m->name);
}

typedef struct {
	uint64_t begin, end;
	const char *name;
} Span;

static int cmpspan(const void *x, const void *y)
{
	const Span *a = x, *b = y;
	return a->begin < b->begin ? -1 : a->begin > b->begin;
}

int zip_open(Zip *z, const void *base, size_t len, Arena *a, Err *e)
{
	const unsigned char *b = base;
	memset(z, 0, sizeof *z);
	z->base = b;
	z->len = len;
	z->a = a;
	long eo = find_eocd(b, len);
	if (eo < 0)
		return errf(e, "not a zip archive (no end-of-central-directory record); file truncated?");
	const unsigned char *r = b + eo;
	if (rd16(r + 4) != 0 || rd16(r + 6) != 0)
		return errf(e, "multi-disk zip archives are not supported");
	uint64_t nent = rd16(r + 10), cdsize = rd32(r + 12), cdoff = rd32(r + 16);
	if (nent == 0xffff || cdsize == 0xffffffff || cdoff == 0xffffffff) {
		if (eo < LOC64_LEN || rd32(r - LOC64_LEN) != LOC64_SIG)
			return errf(e, "saturated end-of-central-directory record without a zip64 locator");
		uint64_t o64 = rd64(r - LOC64_LEN + 8);
		if (!inside(o64, EOCD64_LEN, (size_t)eo - LOC64_LEN) || rd32(b + o64) != EOCD64_SIG)
			return errf(e, "zip64 end-of-central-directory record missing or out of range");
		const unsigned char *r64 = b + o64;
		nent = rd64(r64 + 32);
		cdsize = rd64(r64 + 40);
		cdoff = rd64(r64 + 48);
	}
	if (!inside(cdoff, cdsize, len))
		return errf(e, "central directory (offset %llu, %llu bytes) lies past the end of the file (%zu bytes); file truncated?",
			(unsigned long long)cdoff, (unsigned long long)cdsize, len);
	if (nent > cdsize / CEN_LEN)
		return errf(e, "central directory claims %llu members but holds at most %llu",
			(unsigned long long)nent, (unsigned long long)(cdsize / CEN_LEN));
	z->m = arena_alloc(a, (nent ? nent : 1) * sizeof *z->m);
	/* Where each member's record lies, to refuse archives whose members
	 * share bytes: overlapping members multiply what a small file
	 * inflates to, and no writer makes them. */
	Span *sp = arena_alloc(a, (nent ? nent : 1) * sizeof *sp);
	map_init(&z->byname, a, nent);
	const unsigned char *p = b + cdoff, *end = p + cdsize;
	for (uint64_t i = 0; i < nent; i++) {
		if ((size_t)(end - p) < CEN_LEN || rd32(p) != CEN_SIG)
			return errf(e, "central directory entry %llu is damaged", (unsigned long long)i);
		uint16_t flags = rd16(p + 8), nlen = rd16(p + 28), xlen = rd16(p + 30), clen = rd16(p + 32);
		if ((size_t)(end - p) - CEN_LEN < (size_t)nlen + xlen + clen)
			return errf(e, "central directory entry %llu runs past the directory", (unsigned long long)i);
		ZipMember *m = &z->m[i];
		if (memchr(p + CEN_LEN, 0, nlen))
			return errf(e, "central directory entry %llu has a NUL byte in its name", (unsigned long long)i);
		char *name = arena_alloc(a, (size_t)nlen + 1);
		memcpy(name, p + CEN_LEN, nlen);
		m->name = name;
		m->method = rd16(p + 10);
		m->crc = rd32(p + 16);
		m->csize = rd32(p + 20);
		m->usize = rd32(p + 24);
		uint64_t lh = rd32(p + 42);
		if (zip64_extra(p + CEN_LEN + nlen, xlen, m, &lh, m->usize == 0xffffffff,
				m->csize == 0xffffffff, lh == 0xffffffff, e))
			return -1;
		p += CEN_LEN + nlen + xlen + clen;
		if (flags & 1)
			return errf(e, "member '%s' is encrypted; decrypt the archive first", name);
		if (m->method != ZIP_STORED && m->method != ZIP_DEFLATED)
			return errf(e, "member '%s' uses compression method %d; only stored (0) and deflated (8) are supported",
				name, m->method);
		if (!inside(lh, LOC_LEN, len) || rd32(b + lh) != LOC_SIG)
			return errf(e, "member '%s': local header offset %llu is outside the file or damaged; file truncated?",
				name, (unsigned long long)lh);
		/* The local header's own name/extra lengths may differ from the
		 * central copy (writers add zip64 extras there); data follows them. */
		m->off = lh + LOC_LEN + rd16(b + lh + 26) + rd16(b + lh + 28);
		if (!inside(m->off, m->csize, len))
			return errf(e, "member '%s': %llu bytes at offset %llu run past the end of the file (%zu bytes); file truncated?",
				name, (unsigned long long)m->csize, (unsigned long long)m->off, len);
		if (m->method == ZIP_STORED && m->csize != m->usize)
			return errf(e, "member '%s' is stored but declares %llu bytes compressed and %llu uncompressed",
				name, (unsigned long long)m->csize, (unsigned long long)m->usize);
		if (m->method == ZIP_DEFLATED && m->usize / MAX_RATIO > m->csize)
			return errf(e, "member '%s' declares %llu bytes from %llu compressed, beyond what deflate can produce",
				name, (unsigned long long)m->usize, (unsigned long long)m->csize);
		if (map_put(&z->byname, name, m))
			return errf(e, "member '%s' appears twice", name);
		long tail = local_agrees(z, m, lh, flags, nlen, e);
		if (tail < 0)
			return -1;
		sp[i] = (Span){ lh, m->off + m->csize + (uint64_t)tail, name };
	}
	qsort(sp, nent, sizeof *sp, cmpspan);
	for (uint64_t i = 0; i < nent; i++) {
		if (i + 1 < nent && sp[i].end > sp[i + 1].begin)
			return errf(e, "members '%s' and '%s' overlap in the file; the archive is forged or damaged",
				sp[i].name, sp[i + 1].name);
		if (sp[i].end > cdoff)
			return errf(e, "member '%s' runs into the central directory; the archive is forged or damaged", sp[i].name);
	}
	z->n = nent;
	return 0;
}

const ZipMember *zip_find(const Zip *z, const char *name)
{
	return map_get(&z->byname, name);
}

/* zlib's crc32 takes a uInt length; feed large members in chunks. A
 * member of a registered file mapping (filemap.h) is read through the
 * file: its pages stay out of the process, which checks a checkpoint
 * while it loads the model (YOLO-Master-L: peak RSS 490 -> 421 MB). */
static uint32_t crc_of(const unsigned char *p, uint64_t n)
{
	enum { CHUNK = 64 << 10 };
	unsigned char buf[CHUNK];
	uLong c = crc32(0, Z_NULL, 0);
	int viafile = n >= CHUNK && filemap_has(p, (size_t)n);
	while (n) {
		uInt cap = viafile ? CHUNK : UINT_MAX, k = n > cap ? cap : (uInt)n;
		/* A failed read is read in place, and so is the rest. */
		viafile = viafile && filemap_read(buf, p, k);
		c = crc32(c, viafile ? buf : p, k);
		p += k;
		n -= k;
	}
	return (uint32_t)c;
}

static int inflate_all(const unsigned char *in, uint64_t nin, unsigned char *out, uint64_t nout,
	const char *name, Err *e)
{
	z_stream s;
	memset(&s, 0, sizeof s);
	if (inflateInit2(&s, -MAX_WBITS) != Z_OK)
		return errf(e, "member '%s': cannot initialise zlib", name);
	int rc = Z_OK;
	uint64_t in_left = nin, out_left = nout;
	s.next_in = (Bytef *)in;
	s.next_out = out;
	while (rc == Z_OK) {
		if (s.avail_in == 0 && in_left) {
			s.avail_in = in_left > UINT_MAX ? UINT_MAX : (uInt)in_left;
			in_left -= s.avail_in;
		}
		if (s.avail_out == 0 && out_left) {
			s.avail_out = out_left > UINT_MAX ? UINT_MAX : (uInt)out_left;
			out_left -= s.avail_out;
		}
		uInt ai = s.avail_in, ao = s.avail_out;
		rc = inflate(&s, Z_NO_FLUSH);
		/* Out of room with more to produce means the declared size lies;
		 * out of input before the end means the stream is cut. */
		if (rc == Z_BUF_ERROR || (rc == Z_OK && ai == s.avail_in && ao == s.avail_out)) {
			int over = s.avail_out == 0 && out_left == 0;
			inflateEnd(&s);
			return over ? errf(e, "member '%s' inflates past its declared size of %llu bytes",
					name, (unsigned long long)nout)
				    : errf(e, "member '%s': compressed data ends early; file truncated?", name);
		}
	}
	uint64_t got = nout - out_left - s.avail_out;
	const char *why = s.msg ? s.msg : "zlib error";
	inflateEnd(&s);
	if (rc != Z_STREAM_END)
		return errf(e, "member '%s': corrupt deflate data (%s)", name, why);
	if (got != nout)
		return errf(e, "member '%s' inflates to %llu bytes but declares %llu",
			name, (unsigned long long)got, (unsigned long long)nout);
	return 0;
}

int zip_read(const Zip *z, const ZipMember *m, const void **data, Err *e)
{
	const unsigned char *src = z->base + m->off;
	const unsigned char *out = src;
	if (m->method == ZIP_DEFLATED) {
		/* The declared size is bounded by the ratio cap (zip_open) and
		 * checked against the memory budget before anything is inflated. */
		unsigned char *buf = m->usize > SIZE_MAX ? NULL : arena_try(z->a, (size_t)m->usize, e);
		if (!buf)
			return m->usize > SIZE_MAX ? errf(e, "member '%s' declares %llu bytes, more than this machine can address",
						      m->name, (unsigned long long)m->usize)
						   : errwrap(e, "member '%s' (deflated, %llu bytes)", m->name, (unsigned long long)m->usize);
		if (inflate_all(src, m->csize, buf, m->usize, m->name, e))
			return -1;
		out = buf;
	}
	if (crc_of(out, m->usize) != m->crc)
		return errf(e, "member '%s' fails its CRC-32 check; the archive is corrupt", m->name);
	*data = out;
	return 0;
}
