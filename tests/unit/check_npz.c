#include <stdint.h>

#include "testutil.h"
#include "zipbuild.h"
#include "wsrc.h"

/* Fixtures: testdata/unit/mknpz.py (numpy's own np.savez, savez_compressed,
 * np.save). Malformed arrays are written here as raw bytes. */

static void check_arrays(const WSrc *w, int all)
{
	const WTensor *t = wsrc_get(w, "model.1.experts.0.conv.0.weight");
	ck_assert_ptr_nonnull(t);
	ck_assert_int_eq(t->dtype, 1);
	ck_assert_int_eq(t->ndim, 3);
	ck_assert_int_eq(t->dims[0], 2);
	ck_assert_int_eq(t->dims[1], 3);
	ck_assert_int_eq(t->dims[2], 4);
	ck_assert_uint_eq(t->nbytes, 96);
	for (int i = 0; i < 24; i++) {
		float f;
		memcpy(&f, (const char *)t->data + 4 * i, 4);
		ck_assert_float_eq(f, i / 8.0f);
	}
	t = wsrc_get(w, "model.1.experts.0.conv.0.bias");
	ck_assert_int_eq(t->dtype, 10);
	float f[2];
	ck_assert_int_eq(wt_to_f32(t, f, NULL), 0);
	ck_assert_float_eq(f[0], 1.5f);
	ck_assert_float_eq(f[1], -2.25f);
	t = wsrc_get(w, "steps");
	ck_assert_int_eq(t->dtype, 7);
	ck_assert_int_eq(t->ndim, 0);
	int64_t s;
	memcpy(&s, t->data, 8);
	ck_assert_int_eq(s, 7);
	if (!all)
		return;
	ck_assert_uint_eq(w->n, 8);
	t = wsrc_get(w, "mask");
	ck_assert_int_eq(t->dtype, 9);
	ck_assert_int_eq(memcmp(t->data, "\1\0\1", 3), 0);
	ck_assert_int_eq(wsrc_get(w, "bytes")->dtype, 2);
	ck_assert_int_eq(wsrc_get(w, "i32")->dtype, 6);
	ck_assert_int_eq(wsrc_get(w, "i32")->dims[1], 2);
	ck_assert_int_eq(wsrc_get(w, "f64")->dtype, 11);
	t = wsrc_get(w, "empty");
	ck_assert_int_eq(t->dims[0], 0);
	ck_assert_uint_eq(t->nbytes, 0);
}

static WSrc *open_ok(const char *path, Arena *a)
{
	Err e = { "" };
	WSrc *w = wsrc_open(path, NULL, a, &e);
	ck_assert_msg(w != NULL, "%s", e.msg);
	return w;
}

START_TEST(npz_stored)
{
	Arena *a = arena_new();
	WSrc *w = open_ok(tu_srcfile("testdata/unit/npz/plain.npz"), a);
	check_arrays(w, 1);
	/* Stored members are used in place, inside the mapping. */
	const char *d = wsrc_get(w, "steps")->data, *b = w->maps[0].base;
	ck_assert(d > b && d < b + w->maps[0].len);
	wsrc_close(w);
	arena_free(a);
}
END_TEST

START_TEST(npz_deflated)
{
	Arena *a = arena_new();
	WSrc *w = open_ok(tu_srcfile("testdata/unit/npz/compressed.npz"), a);
	check_arrays(w, 1);
	wsrc_close(w);
	arena_free(a);
}
END_TEST

START_TEST(npy_directory)
{
	Arena *a = arena_new();
	WSrc *w = open_ok(tu_srcfile("testdata/unit/npz/dir"), a);
	ck_assert_uint_eq(w->n, 3);
	check_arrays(w, 0);
	wsrc_close(w);
	w = open_ok(tu_srcfile("testdata/unit/npz/v2"), a);
	const WTensor *t = wsrc_get(w, "u16");
	ck_assert_int_eq(t->dtype, 4);
	ck_assert_int_eq(memcmp(t->data, "\3\0\4\0", 4), 0);
	wsrc_close(w);
	arena_free(a);
}
END_TEST

/* An .npy image: version 1 header padded to 64 bytes, then data. */
static size_t npy_bytes(unsigned char *out, const char *dict, const void *data, size_t n)
{
	size_t dl = strlen(dict), hl = (10 + dl + 1 + 63) / 64 * 64 - 10;
	memcpy(out, "\x93NUMPY\1\0", 8);
	out[8] = (unsigned char)hl;
	out[9] = (unsigned char)(hl >> 8);
	memcpy(out + 10, dict, dl);
	memset(out + 10 + dl, ' ', hl - dl - 1);
	out[10 + hl - 1] = '\n';
	memcpy(out + 10 + hl, data, n);
	return 10 + hl + n;
}

/* A directory holding one KEY.npy made of the bytes; expects the message. */
static void npy_refuse(const unsigned char *b, size_t n, const char *want)
{
	static int k;
	char dir[64];
	snprintf(dir, sizeof dir, "d%d", k++);
	const char *dp = tu_path(dir);
	ck_assert_int_eq(mkdir(dp, 0700), 0);
	char dpath[512];
	snprintf(dpath, sizeof dpath, "%s", dp);
	char name[128];
	snprintf(name, sizeof name, "%s/w.npy", dir);
	tu_write(name, b, n);
	Arena *a = arena_new();
	Err e = { "" };
	ck_assert_ptr_null(wsrc_open(dpath, NULL, a, &e));
	char full[1024];
	snprintf(full, sizeof full, "%s: w.npy: %s", dpath, want);
	ck_assert_str_eq(e.msg, full);
	arena_free(a);
}

START_TEST(npy_malformed)
{
	unsigned char b[512];
	float z[4] = { 1, 2, 3, 4 };
	size_t n = npy_bytes(b, "{'descr': '<f4', 'fortran_order': False, 'shape': (4,), }", z, 16);
	npy_refuse(b, n - 1, "<f4 array of 4 elements needs 16 bytes, the file holds 15; truncated?");
	n = npy_bytes(b, "{'descr': '<f4', 'fortran_order': False, 'shape': (3,), }", z, 16);
	npy_refuse(b, n, "<f4 array of 3 elements needs 12 bytes, the file holds 16; trailing bytes");
	n = npy_bytes(b, "{'descr': '<f4', 'fortran_order': False, 'shape': (4,), }", z, 16);
	b[0] = 'X';
	npy_refuse(b, n, "not an .npy array (bad magic)");
	npy_refuse(b, 5, "not an .npy array (bad magic)");
	b[0] = 0x93;
	b[8] = 0xff;
	b[9] = 0x7f;
	npy_refuse(b, n, ".npy header length 32767 runs past the end (144 bytes); truncated?");
	b[6] = 4;
	npy_refuse(b, n, ".npy format version 4.0 is not supported (1.0 to 3.0 are)");
	n = npy_bytes(b, "{'descr': '>f4', 'fortran_order': False, 'shape': (4,), }", z, 16);
	npy_refuse(b, n, "big-endian dtype '>f4' is not supported; save with a.astype(a.dtype.newbyteorder('<'))");
	n = npy_bytes(b, "{'descr': '<f4', 'fortran_order': True, 'shape': (2, 2), }", z, 16);
	npy_refuse(b, n, "fortran_order arrays are not supported; save np.ascontiguousarray(a) instead");
	n = npy_bytes(b, "{'descr': '|O', 'fortran_order': False, 'shape': (2,), }", z, 16);
	npy_refuse(b, n, "unsupported dtype '|O'");
	n = npy_bytes(b, "{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (4,), }", z, 16);
	npy_refuse(b, n, ".npy header: descr is not a simple dtype string; structured arrays are not supported");
	n = npy_bytes(b, "{'descr': '<f4', 'fortran_order': False, }", z, 16);
	npy_refuse(b, n, ".npy header lacks 'shape'");
	n = npy_bytes(b, "{'descr': '<f4', 'fortran_order': False, 'shape': (4, x), }", z, 16);
	npy_refuse(b, n, ".npy header: shape is not a tuple of integers");
	n = npy_bytes(b, "{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999, 99999999999), }", z, 16);
	npy_refuse(b, n, "shape overflows");
	/* A 1-D fortran array is the same as a C one: accepted. */
	n = npy_bytes(b, "{'descr': '<f4', 'fortran_order': True, 'shape': (4,), }", z, 16);
	tu_write("f.npy", b, n);
	Arena *a = arena_new();
	Err e;
	WSrc *w = wsrc_open(tu_path(""), NULL, a, &e);
	ck_assert_msg(w != NULL, "%s", e.msg);
	ck_assert_int_eq(wsrc_get(w, "f")->dims[0], 4);
	wsrc_close(w);
	arena_free(a);
}
END_TEST

/* Bytes of a fixture, edited and written to the scratch folder. */
static const char *edited(const char *fixture, const char *out, long cut, long flip)
{
	FILE *f = fopen(tu_srcfile(fixture), "rb");
	ck_assert_ptr_nonnull(f);
	static unsigned char b[8192];
	size_t n = fread(b, 1, sizeof b, f);
	fclose(f);
	if (flip >= 0)
		b[flip] ^= 0x55;
	return tu_write(out, b, cut >= 0 ? (size_t)cut : n);
}

/* A stored archive with one member 'w.npy' of n float32s (value i at i),
 * byte flip of its array data XOR-ed once its CRC is taken (-1: none).
 * Members of 64 KiB and more are checked through the file (zip.c). */
static const char *big_npz(const char *name, uint32_t n, long flip)
{
	char hdr[128];
	int hl = snprintf(hdr, sizeof hdr, "{'descr': '<f4', 'fortran_order': False, 'shape': (%u,), }", n);
	while ((10 + hl + 1) % 64)
		hdr[hl++] = ' ';
	hdr[hl++] = '\n';
	size_t dl = 10 + (size_t)hl + 4 * (size_t)n;
	char *d = malloc(dl);
	memcpy(d, "\x93NUMPY\1\0", 8);
	d[8] = (char)hl;
	d[9] = 0;
	memcpy(d + 10, hdr, (size_t)hl);
	for (uint32_t i = 0; i < n; i++) {
		float f = (float)i;
		memcpy(d + 10 + hl + 4 * (size_t)i, &f, 4);
	}
	ZipBuf o = { 0 };
	zb_build(&o, 0, 1, (const char *[]){ "w.npy" }, (const char *[]){ d }, &dl);
	if (flip >= 0)
		o.b[30 + 5 + flip] ^= 0x55; /* past the local header and the name */
	const char *p = tu_write(name, o.b, o.n);
	free(o.b);
	free(d);
	return p;
}

/* A large member is checked in chunks read through the file: a flipped
 * byte past the first chunk is caught, an intact member opens in place. */
START_TEST(npz_large_member_crc)
{
	Arena *a = arena_new();
	Err e;
	const char *p = big_npz("big.npz", 100000, -1);
	WSrc *w = open_ok(p, a);
	const WTensor *t = wsrc_get(w, "w");
	ck_assert_ptr_nonnull(t);
	ck_assert_uint_eq(t->nbytes, 400000);
	float f;
	memcpy(&f, (const char *)t->data + 4 * 99999, 4);
	ck_assert_float_eq(f, 99999.0f);
	wsrc_close(w);
	p = big_npz("bigflip.npz", 100000, 300000);
	ck_assert_ptr_null(wsrc_open(p, NULL, a, &e));
	char want[1024];
	snprintf(want, sizeof want, "%s: member 'w.npy' fails its CRC-32 check; the archive is corrupt", p);
	ck_assert_str_eq(e.msg, want);
	arena_free(a);
}
END_TEST

START_TEST(npz_malformed)
{
	Arena *a = arena_new();
	Err e;
	const char *p = edited("testdata/unit/npz/plain.npz", "cut.npz", 1000, -1);
	ck_assert_ptr_null(wsrc_open(p, NULL, a, &e));
	char want[1024];
	snprintf(want, sizeof want, "%s: not a zip archive (no end-of-central-directory record); file truncated?", p);
	ck_assert_str_eq(e.msg, want);
	/* Byte 100 lies in the first member's array data: CRC catches it. */
	p = edited("testdata/unit/npz/plain.npz", "crc.npz", -1, 150);
	ck_assert_ptr_null(wsrc_open(p, NULL, a, &e));
	snprintf(want, sizeof want, "%s: member 'model.1.experts.0.conv.0.weight.npy' fails its CRC-32 check; the archive is corrupt", p);
	ck_assert_str_eq(e.msg, want);
	p = tu_write("empty.npz", "PK\5\6\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0", 22);
	ck_assert_ptr_null(wsrc_open(p, NULL, a, &e));
	snprintf(want, sizeof want, "%s: no .npy members; is this an np.savez archive?", p);
	ck_assert_str_eq(e.msg, want);
	ck_assert_int_eq(mkdir(tu_path("none"), 0700), 0);
	ck_assert_ptr_null(wsrc_open(tu_path("none"), NULL, a, &e));
	tu_err_has(e.msg, "none: directory holds no .npy files; expected one KEY.npy per tensor");
	arena_free(a);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("npz");
	TCase *tc = tcase_create("npz");
	tcase_add_checked_fixture(tc, tu_setup, tu_teardown);
	tcase_add_test(tc, npz_stored);
	tcase_add_test(tc, npz_deflated);
	tcase_add_test(tc, npy_directory);
	tcase_add_test(tc, npy_malformed);
	tcase_add_test(tc, npz_malformed);
	tcase_add_test(tc, npz_large_member_crc);
	suite_add_tcase(s, tc);
	return tu_run(s);
}
