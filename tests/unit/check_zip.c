#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "arena.h"
#include "err.h"
#include "zip.h"
#include "testutil.h"
#include "zipbuild.h"

/* Fixtures from testdata/unit/mkzip.sh (Info-ZIP and Python's zipfile);
 * malformed archives are those bytes, edited, or built below. */
static unsigned char *slurp(const char *name, size_t *len)
{
	const char *top = getenv("top_srcdir");
	char path[4096];
	snprintf(path, sizeof path, "%s/testdata/unit/%s", top ? top : ".", name);
	FILE *f = fopen(path, "rb");
	ck_assert_msg(f != NULL, "cannot open %s", path);
	fseek(f, 0, SEEK_END);
	long n = ftell(f);
	fseek(f, 0, SEEK_SET);
	unsigned char *b = malloc((size_t)n);
	ck_assert_uint_eq(fread(b, 1, (size_t)n, f), (size_t)n);
	fclose(f);
	*len = (size_t)n;
	return b;
}

static void check_members(const char *file)
{
	size_t len;
	unsigned char *b = slurp(file, &len);
	Arena *a = arena_new();
	Zip z;
	Err e = { "" };
	ck_assert_msg(zip_open(&z, b, len, a, &e) == 0, "%s: %s", file, e.msg);
	ck_assert_uint_ge(z.n, 2);
	const ZipMember *m = zip_find(&z, "a.txt");
	ck_assert_ptr_nonnull(m);
	const void *d;
	ck_assert_msg(zip_read(&z, m, &d, &e) == 0, "%s", e.msg);
	ck_assert_uint_eq(m->usize, 14);
	ck_assert_int_eq(memcmp(d, "hello, stored\n", 14), 0);
	if (m->method == ZIP_STORED)
		ck_assert_ptr_eq(d, b + m->off); /* no copy */
	m = zip_find(&z, "b.txt");
	ck_assert_ptr_nonnull(m);
	ck_assert_msg(zip_read(&z, m, &d, &e) == 0, "%s", e.msg);
	ck_assert_uint_eq(m->usize, 2000);
	for (int i = 0; i < 500; i++)
		ck_assert_int_eq(memcmp((const char *)d + 4 * i, "moe ", 4), 0);
	ck_assert_ptr_null(zip_find(&z, "c.txt"));
	arena_free(a);
	free(b);
}

START_TEST(zip_stored) { check_members("stored.zip"); }
END_TEST
START_TEST(zip_deflated) { check_members("deflated.zip"); }
END_TEST

START_TEST(zip_python_zip64_local)
{
	check_members("zip64.zip");
	size_t len;
	unsigned char *b = slurp("zip64.zip", &len);
	Arena *a = arena_new();
	Zip z;
	Err e;
	ck_assert_int_eq(zip_open(&z, b, len, a, &e), 0);
	const ZipMember *m = zip_find(&z, "c.bin");
	const void *d;
	ck_assert_int_eq(zip_read(&z, m, &d, &e), 0);
	ck_assert_uint_eq(m->usize, 0);
	arena_free(a);
	free(b);
}
END_TEST

static const char *NAMES[] = { "x.npy", "y.npy" };
static const char *DATA[] = { "0123456789", "abc" };

START_TEST(zip_zip64_records)
{
	ZipBuf o = { 0 };
	zb_build(&o, 1, 2, NAMES, DATA, NULL);
	Arena *a = arena_new();
	Zip z;
	Err e = { "" };
	ck_assert_msg(zip_open(&z, o.b, o.n, a, &e) == 0, "%s", e.msg);
	ck_assert_uint_eq(z.n, 2);
	const ZipMember *m = zip_find(&z, "y.npy");
	ck_assert_uint_eq(m->usize, 3);
	const void *d;
	ck_assert_int_eq(zip_read(&z, m, &d, &e), 0);
	ck_assert_int_eq(memcmp(d, "abc", 3), 0);
	arena_free(a);
	free(o.b);
}
END_TEST

/* Opens the bytes and expects failure with a message containing want. */
static void refuse(const unsigned char *b, size_t len, const char *member, const char *want)
{
	Arena *a = arena_new();
	Zip z;
	Err e = { "" };
	int rc = zip_open(&z, b, len, a, &e);
	if (rc == 0 && member) {
		const void *d;
		rc = zip_read(&z, zip_find(&z, member), &d, &e);
	}
	ck_assert_int_eq(rc, -1);
	ck_assert_msg(strstr(e.msg, want) != NULL, "got '%s', want '%s'", e.msg, want);
	arena_free(a);
}

START_TEST(zip_truncated)
{
	size_t len;
	unsigned char *b = slurp("deflated.zip", &len);
	refuse(b, len - 30, NULL, "not a zip archive (no end-of-central-directory record); file truncated?");
	refuse(b, 10, NULL, "not a zip archive");
	refuse(b, 0, NULL, "not a zip archive");
	free(b);
	/* Cut inside the data but keep a (moved) directory pointing past the end. */
	ZipBuf o = { 0 };
	size_t cd = zb_build(&o, 0, 2, NAMES, DATA, NULL);
	unsigned char t[4096];
	size_t tail = o.n - cd;
	memcpy(t, o.b, 40);
	memcpy(t + 40, o.b + cd, tail);
	refuse(t, 40 + tail, NULL, "central directory (offset");
	free(o.b);
}
END_TEST

START_TEST(zip_lying_sizes)
{
	ZipBuf o = { 0 };
	size_t cd = zb_build(&o, 0, 2, NAMES, DATA, NULL);
	/* The first member's stored size claims 4 GB - 2. */
	unsigned char *cs = o.b + cd + 20;
	cs[0] = cs[1] = cs[2] = 0xff; cs[3] = 0xfe;
	refuse(o.b, o.n, NULL, "member 'x.npy': 4278190079 bytes at offset 35 run past the end of the file");
	zb_build(&o, 0, 2, NAMES, DATA, NULL);
	o.b[cd + 24] = 11; /* usize != csize for a stored member */
	refuse(o.b, o.n, NULL, "member 'x.npy' is stored but declares 10 bytes compressed and 11 uncompressed");
	/* Too many entries for the directory's size: refused before allocating. */
	zb_build(&o, 0, 2, NAMES, DATA, NULL);
	o.b[o.n - 22 + 10] = 0xff;
	o.b[o.n - 22 + 11] = 0x7f;
	refuse(o.b, o.n, NULL, "central directory claims 32767 members but holds at most 2");
	/* A deflated member claiming an impossible expansion ratio. */
	size_t len;
	unsigned char *b = slurp("deflated.zip", &len);
	/* Find b.txt's central entry and set its usize to 0x7fffffff. */
	unsigned char *c = NULL;
	for (size_t i = 0; i + 4 < len; i++)
		if (memcmp(b + i, "PK\1\2", 4) == 0 && memcmp(b + i + 46, "b.txt", 5) == 0)
			c = b + i;
	ck_assert_ptr_nonnull(c);
	/* and its local header, so both records tell the same lie */
	unsigned char *l = NULL;
	for (size_t i = 0; i + 35 < len; i++)
		if (memcmp(b + i, "PK\3\4", 4) == 0 && memcmp(b + i + 30, "b.txt", 5) == 0)
			l = b + i;
	ck_assert_ptr_nonnull(l);
	c[24] = c[25] = c[26] = 0xff; c[27] = 0x7f;
	refuse(b, len, NULL, "member 'b.txt' declares 2147483647 bytes from 20 compressed, beyond what deflate can produce");
	/* Plausible but wrong: 2001 bytes declared, 2000 produced. */
	c[24] = l[22] = 2001 & 255; c[25] = l[23] = 2001 >> 8; c[26] = c[27] = 0;
	refuse(b, len, "b.txt", "member 'b.txt' inflates to 2000 bytes but declares 2001");
	c[24] = l[22] = 1999 & 255; c[25] = l[23] = 1999 >> 8;
	refuse(b, len, "b.txt", "member 'b.txt' inflates past its declared size of 1999 bytes");
	/* Only the central directory lies: a reader trusting the local
	 * header would see another member. */
	c[24] = 2001 & 255; c[25] = 2001 >> 8;
	l[22] = 2000 & 255; l[23] = 2000 >> 8;
	refuse(b, len, NULL, "member 'b.txt': the local header's CRC or sizes differ from the central directory's");
	free(b);
	free(o.b);
}
END_TEST

START_TEST(zip_offsets_past_end)
{
	ZipBuf o = { 0 };
	size_t cd = zb_build(&o, 0, 2, NAMES, DATA, NULL);
	unsigned char *lh = o.b + cd + 46 + 42 + 5; /* second entry's local header offset */
	lh[0] = 0x00; lh[1] = 0x10; lh[2] = 0; lh[3] = 0;
	refuse(o.b, o.n, NULL, "member 'y.npy': local header offset 4096 is outside the file or damaged");
	zb_build(&o, 0, 2, NAMES, DATA, NULL);
	o.b[o.n - 22 + 16] = 0xf0; /* directory offset */
	refuse(o.b, o.n, NULL, "lies past the end of the file");
	zb_build(&o, 1, 2, NAMES, DATA, NULL);
	o.b[o.n - 22 - 20 + 8] = 0xf0; /* zip64 end record offset */
	refuse(o.b, o.n, NULL, "zip64 end-of-central-directory record missing or out of range");
	free(o.b);
}
END_TEST

START_TEST(zip_corrupt_data)
{
	ZipBuf o = { 0 };
	zb_build(&o, 0, 2, NAMES, DATA, NULL);
	o.b[30 + 5] ^= 1; /* first byte of x.npy's data */
	refuse(o.b, o.n, "x.npy", "member 'x.npy' fails its CRC-32 check; the archive is corrupt");
	size_t cd = zb_build(&o, 0, 2, NAMES, DATA, NULL);
	o.b[cd + 8] = 1; /* encryption flag */
	refuse(o.b, o.n, NULL, "member 'x.npy' is encrypted");
	zb_build(&o, 0, 2, NAMES, DATA, NULL);
	o.b[cd + 10] = 12;
	refuse(o.b, o.n, NULL, "member 'x.npy' uses compression method 12; only stored (0) and deflated (8) are supported");
	const char *dup[] = { "x.npy", "x.npy" };
	zb_build(&o, 0, 2, dup, DATA, NULL);
	refuse(o.b, o.n, NULL, "member 'x.npy' appears twice");
	/* Deflate stream damaged in the middle. */
	size_t len;
	unsigned char *b = slurp("deflated.zip", &len);
	Arena *a = arena_new();
	Zip z;
	Err e;
	ck_assert_int_eq(zip_open(&z, b, len, a, &e), 0);
	size_t off = (size_t)zip_find(&z, "b.txt")->off;
	arena_free(a);
	b[off] = 0xff; /* invalid block type */
	refuse(b, len, "b.txt", "member 'b.txt': corrupt deflate data");
	free(b);
	free(o.b);
}
END_TEST

/* The local header names another file, or another method. */
START_TEST(zip_local_header_disagrees)
{
	ZipBuf o = { 0 };
	zb_build(&o, 0, 2, NAMES, DATA, NULL);
	o.b[30] = 'z'; /* x.npy -> z.npy in the local header only */
	refuse(o.b, o.n, NULL, "member 'x.npy': the local header names another file than the central directory");
	zb_build(&o, 0, 2, NAMES, DATA, NULL);
	o.b[8] = 8; /* local method deflated, central stored */
	refuse(o.b, o.n, NULL, "member 'x.npy': the local header's compression method or flags differ");
	zb_build(&o, 0, 2, NAMES, DATA, NULL);
	o.b[14] ^= 1; /* local CRC */
	refuse(o.b, o.n, NULL, "member 'x.npy': the local header's CRC or sizes differ from the central directory's");
	/* A valid archive where both entries point at one local header: a
	 * member read twice (here, the same name is also refused). */
	const char *same[] = { "x.npy", "x.npy" };
	const char *dd[] = { "0123456789", "0123456789" };
	size_t cd = zb_build(&o, 0, 2, same, dd, NULL);
	unsigned char *e2 = o.b + cd + 46 + 5; /* second central entry */
	memcpy(e2 + 46, "w.npy", 5);
	e2[42] = e2[43] = e2[44] = e2[45] = 0; /* local header offset 0 */
	refuse(o.b, o.n, NULL, "member 'w.npy': the local header names another file");
	free(o.b);
}
END_TEST

/* Two central entries of different names over one local record: the
 * overlap, not the name, is what gives them away. */
START_TEST(zip_overlapping_members)
{
	ZipBuf o = { 0 };
	const char *names[] = { "x.npy", "x.npy" };
	const char *data[] = { "0123456789", "0123456789" };
	size_t cd = zb_build(&o, 0, 2, names, data, NULL);
	/* Second member's local header and name: make it a copy of the first
	 * record but named y.npy, then point both central entries at it... */
	o.b[cd + 46 + 5 + 46 + 0] = 'y';
	o.b[35 + 10 + 30] = 'y';
	Arena *a = arena_new();
	Zip z;
	Err e = { "" };
	ck_assert_msg(zip_open(&z, o.b, o.n, a, &e) == 0, "%s", e.msg);
	arena_free(a);
	/* ...now the first entry reads from inside the second's record:
	 * its local header at 45 is y.npy's, so name it y.npy too. */
	unsigned char *c1 = o.b + cd;
	c1[42] = 45;
	refuse(o.b, o.n, NULL, "the local header names another file");
	/* Same record, consistent names: a stored member whose data holds
	 * another member's whole record. */
	ZipBuf p = { 0 };
	const char *outer[] = { "a.npy", "b.npy" };
	const char *body[] = { "0123456789012345678901234567890123456789012345", "0123456789" };
	cd = zb_build(&p, 0, 2, outer, body, NULL);
	/* b.npy's record (30 + 5 + 10 bytes) sits inside a.npy's data. */
	memcpy(p.b + 35, p.b + 35 + 46, 45);
	p.b[cd + 46 + 5 + 42] = 35; /* b.npy's local header offset */
	refuse(p.b, p.n, NULL, "members 'a.npy' and 'b.npy' overlap in the file");
	free(o.b);
	free(p.b);
}
END_TEST

/* The inflated size is checked against the memory budget before the
 * buffer is allocated. */
START_TEST(zip_inflate_over_budget)
{
	size_t len;
	unsigned char *b = slurp("deflated.zip", &len);
	Arena *a = arena_new();
	Zip z;
	Err e;
	ck_assert_int_eq(zip_open(&z, b, len, a, &e), 0);
	size_t was = arena_budget();
	arena_set_budget(arena_held() + 1000);
	while (arena_try(a, 1024, &e)) /* fills the current block: another would pass the budget */
		;
	const void *d;
	ck_assert_int_eq(zip_read(&z, zip_find(&z, "b.txt"), &d, &e), -1);
	arena_set_budget(was);
	ck_assert_msg(strstr(e.msg, "member 'b.txt' (deflated, 2000 bytes): needs 2000 bytes of memory, more than the memory budget allows") != NULL,
		      "%s", e.msg);
	arena_free(a);
	free(b);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("zip");
	TCase *tc = tcase_create("zip");
	tcase_add_test(tc, zip_stored);
	tcase_add_test(tc, zip_deflated);
	tcase_add_test(tc, zip_python_zip64_local);
	tcase_add_test(tc, zip_zip64_records);
	tcase_add_test(tc, zip_truncated);
	tcase_add_test(tc, zip_lying_sizes);
	tcase_add_test(tc, zip_offsets_past_end);
	tcase_add_test(tc, zip_corrupt_data);
	tcase_add_test(tc, zip_local_header_disagrees);
	tcase_add_test(tc, zip_overlapping_members);
	tcase_add_test(tc, zip_inflate_over_budget);
	suite_add_tcase(s, tc);
	return tu_run(s);
}
