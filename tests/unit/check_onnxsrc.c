#include <stdint.h>

#include "testutil.h"
#include "wsrc.h"

/* Fixtures: testdata/unit/mkonnx.py (python3-onnx's helper API). */

static const char *fx(const char *name)
{
	static char buf[1024];
	snprintf(buf, sizeof buf, "%s", tu_srcfile(name));
	return buf;
}

START_TEST(onnx_donor)
{
	Arena *a = arena_new();
	Err e = { "" };
	WSrc *w = wsrc_open(fx("testdata/unit/onnx/donor.onnx"), NULL, a, &e);
	ck_assert_msg(w != NULL, "%s", e.msg);
	const WTensor *t = wsrc_get(w, "model.1.experts.0.w");
	ck_assert_ptr_nonnull(t);
	ck_assert_int_eq(t->dtype, 1);
	ck_assert_int_eq(t->ndim, 2);
	ck_assert_int_eq(t->dims[1], 3);
	float f[6];
	ck_assert_int_eq(wt_to_f32(t, f, &e), 0);
	for (int i = 0; i < 6; i++)
		ck_assert_float_eq(f[i], (float)i);
	ck_assert_int_eq(wt_to_f32(wsrc_get(w, "typed.f32"), f, &e), 0);
	ck_assert_float_eq(f[1], 2.5f);
	ck_assert_float_eq(f[2], -4.0f);
	t = wsrc_get(w, "typed.f16");
	ck_assert_int_eq(t->dtype, 10);
	ck_assert_uint_eq(t->nbytes, 4);
	ck_assert_int_eq(wt_to_f32(t, f, &e), 0);
	ck_assert_float_eq(f[0], 1.5f);
	ck_assert_float_eq(f[1], -2.0f);
	int64_t i64[2];
	memcpy(i64, wsrc_get(w, "typed.i64")->data, 16);
	ck_assert_int_eq(i64[0], -3);
	ck_assert_int_eq(i64[1], (int64_t)1 << 40);
	t = wsrc_get(w, "typed.i8");
	ck_assert_uint_eq(t->nbytes, 2);
	ck_assert_int_eq(((const int8_t *)t->data)[0], -1);
	ck_assert_int_eq(((const int8_t *)t->data)[1], 5);
	double d;
	memcpy(&d, wsrc_get(w, "typed.f64")->data, 8);
	ck_assert_double_eq(d, 0.25);
	uint64_t u;
	memcpy(&u, wsrc_get(w, "typed.u64")->data, 8);
	ck_assert_uint_eq(u, (uint64_t)1 << 63);
	/* Constant nodes, by output name, including those inside If branches. */
	t = wsrc_get(w, "c.value");
	ck_assert_int_eq(t->ndim, 2);
	ck_assert_int_eq(wt_to_f32(t, f, &e), 0);
	ck_assert_float_eq(f[1], 2.0f);
	t = wsrc_get(w, "c.floats");
	ck_assert_int_eq(t->dims[0], 2);
	ck_assert_float_eq(((const float *)t->data)[1], 1.5f);
	memcpy(&i64[0], wsrc_get(w, "c.int")->data, 8);
	ck_assert_int_eq(i64[0], -7);
	ck_assert_int_eq(wsrc_get(w, "cond")->dtype, 9);
	memcpy(&i64[0], wsrc_get(w, "sub.c")->data, 8);
	ck_assert_int_eq(i64[0], 9);
	memcpy(&i64[0], wsrc_get(w, "sub.d")->data, 8);
	ck_assert_int_eq(i64[0], 4);
	ck_assert_ptr_null(wsrc_get(w, "x"));
	/* An Identity of the default domain, however spelled, is the tracer's
	 * alias of an equal parameter: the same tensor under its name. */
	ck_assert_ptr_eq(wsrc_get(w, "alias.unset")->data, wsrc_get(w, "model.1.experts.0.w")->data);
	ck_assert_ptr_nonnull(wsrc_get(w, "alias.ai"));
	ck_assert_ptr_eq(wsrc_get(w, "alias.ai")->data, wsrc_get(w, "typed.f32")->data);
	ck_assert_ptr_null(wsrc_get(w, "alias.other"));
	ck_assert_uint_eq(w->n, 15);
	wsrc_close(w);
	arena_free(a);
}
END_TEST

static void refuse(const char *path, const char *want);

/* A donor's external tensor ([2,3] float at weights.bin, no offset) is
 * read from its file beside the donor; a file too short is refused. */
START_TEST(onnx_external_data)
{
	FILE *f = fopen(fx("testdata/unit/onnx/external.onnx"), "rb");
	unsigned char b[1024];
	size_t n = fread(b, 1, sizeof b, f);
	fclose(f);
	const char *donor = tu_write("external.onnx", b, n);
	float v[6] = { 0.5f, -1.0f, 2.0f, 3.25f, -4.0f, 8.0f };
	tu_write("weights.bin", v, sizeof v);
	Arena *a = arena_new();
	Err e = { "" };
	WSrc *w = wsrc_open(donor, NULL, a, &e);
	ck_assert_msg(w != NULL, "%s", e.msg);
	const WTensor *t = wsrc_get(w, "ext.w");
	ck_assert_ptr_nonnull(t);
	ck_assert_uint_eq(t->nbytes, sizeof v);
	ck_assert_mem_eq(t->data, v, sizeof v);
	wsrc_close(w);
	arena_free(a);
	tu_write("weights.bin", v, sizeof v - 4);
	refuse(donor, "tensor 'ext.w': external data offset 0 + length 24 runs past the end of 'weights.bin' (20 bytes); the data file is truncated or not the one this model was saved with");
}
END_TEST

static void refuse(const char *path, const char *want)
{
	Arena *a = arena_new();
	Err e = { "" };
	ck_assert_ptr_null(wsrc_open(path, NULL, a, &e));
	char full[1024];
	snprintf(full, sizeof full, "%s: %s", path, want);
	ck_assert_str_eq(e.msg, full);
	arena_free(a);
}

START_TEST(onnx_malformed)
{
	/* External data is looked for beside the donor, under the model's
	 * rules (see onnx_external_data). */
	char want[1024];
	snprintf(want, sizeof want, "tensor 'ext.w': external data file 'weights.bin' (%s): No such file or directory; put it beside the model",
		 fx("testdata/unit/onnx/weights.bin"));
	refuse(fx("testdata/unit/onnx/external.onnx"), want);
	refuse(fx("testdata/unit/onnx/badraw.onnx"), "tensor 'bad.raw': raw_data holds 12 bytes, float of this shape needs 16");
	refuse(fx("testdata/unit/onnx/badcount.onnx"), "tensor 'bad.count': 2 values in its typed field, shape needs 4");
	refuse(fx("testdata/unit/onnx/string.onnx"), "tensor 's' has data type 8 (string), which holds no fixed-size numbers");
	/* Truncated: protobuf-c refuses a field cut in the middle. */
	FILE *f = fopen(fx("testdata/unit/onnx/donor.onnx"), "rb");
	unsigned char b[1024];
	size_t n = fread(b, 1, sizeof b, f);
	fclose(f);
	ck_assert_uint_gt(n, 100);
	refuse(tu_write("cut.onnx", b, n - 40),
		"not an ONNX model (protobuf parse failed at byte 2 of 754: onnx.ModelProto.graph (field 7) claims 783 bytes, only 749 remain)");
	refuse(tu_write("junk.onnx", "\xff\xff\xff\xff", 4),
		"not an ONNX model (protobuf parse failed at byte 0 of 4: truncated varint)");
}
END_TEST

int main(void)
{
	Suite *s = suite_create("onnxsrc");
	TCase *tc = tcase_create("onnxsrc");
	tcase_add_checked_fixture(tc, tu_setup, tu_teardown);
	tcase_add_test(tc, onnx_donor);
	tcase_add_test(tc, onnx_malformed);
	tcase_add_test(tc, onnx_external_data);
	suite_add_tcase(s, tc);
	return tu_run(s);
}
