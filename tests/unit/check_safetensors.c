#include <math.h>
#include <stdint.h>

#include "testutil.h"
#include "wsrc.h"

/* Writes a safetensors file: 8-byte length, header, data. hlen_override
 * (when non-zero) is written as the length instead, to make a liar. */
static const char *st_file(const char *name, const char *hdr, const void *data, size_t n, uint64_t hlen_override)
{
	size_t hl = strlen(hdr);
	unsigned char *b = malloc(8 + hl + n + 1);
	uint64_t L = hlen_override ? hlen_override : hl;
	for (int i = 0; i < 8; i++)
		b[i] = (unsigned char)(L >> (8 * i));
	memcpy(b + 8, hdr, hl);
	if (n)
		memcpy(b + 8 + hl, data, n);
	const char *p = tu_write(name, b, 8 + hl + n);
	free(b);
	return p;
}

START_TEST(st_all_dtypes)
{
	unsigned char data[256];
	for (int i = 0; i < 256; i++)
		data[i] = (unsigned char)i;
	float f[6] = { 1, -2, 3.5f, 0, 1e-3f, 65504 };
	memcpy(data, f, sizeof f);
	const char *hdr = "{\"__metadata__\":{\"format\":\"pt\"},"
		"\"w\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,24]},"
		"\"d\":{\"dtype\":\"F64\",\"shape\":[1],\"data_offsets\":[24,32]},"
		"\"h\":{\"dtype\":\"F16\",\"shape\":[2],\"data_offsets\":[32,36]},"
		"\"b\":{\"dtype\":\"BF16\",\"shape\":[],\"data_offsets\":[36,38]},"
		"\"i64\":{\"dtype\":\"I64\",\"shape\":[1],\"data_offsets\":[40,48]},"
		"\"i32\":{\"dtype\":\"I32\",\"shape\":[1],\"data_offsets\":[48,52]},"
		"\"i16\":{\"dtype\":\"I16\",\"shape\":[1],\"data_offsets\":[52,54]},"
		"\"i8\":{\"dtype\":\"I8\",\"shape\":[1],\"data_offsets\":[54,55]},"
		"\"u8\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[55,56]},"
		"\"bool\":{\"dtype\":\"BOOL\",\"shape\":[2],\"data_offsets\":[56,58]},"
		"\"u16\":{\"dtype\":\"U16\",\"shape\":[1],\"data_offsets\":[58,60]},"
		"\"u32\":{\"dtype\":\"U32\",\"shape\":[1],\"data_offsets\":[60,64]},"
		"\"u64\":{\"dtype\":\"U64\",\"shape\":[1],\"data_offsets\":[64,72]},"
		"\"f8a\":{\"dtype\":\"F8_E4M3\",\"shape\":[1],\"data_offsets\":[72,73]},"
		"\"f8b\":{\"dtype\":\"F8_E5M2\",\"shape\":[1],\"data_offsets\":[73,74]},"
		"\"empty\":{\"dtype\":\"F32\",\"shape\":[0,4],\"data_offsets\":[74,74]}}";
	const char *p = st_file("all.safetensors", hdr, data, 80, 0);
	Arena *a = arena_new();
	Err e = { "" };
	WSrc *w = wsrc_open(p, NULL, a, &e);
	ck_assert_msg(w != NULL, "%s", e.msg);
	ck_assert_uint_eq(w->n, 16);
	static const struct { const char *n; int dt; size_t nb; } want[] = {
		{ "w", 1, 24 }, { "d", 11, 8 }, { "h", 10, 4 }, { "b", 16, 2 }, { "i64", 7, 8 }, { "i32", 6, 4 },
		{ "i16", 5, 2 }, { "i8", 3, 1 }, { "u8", 2, 1 }, { "bool", 9, 2 }, { "u16", 4, 2 }, { "u32", 12, 4 },
		{ "u64", 13, 8 }, { "f8a", 17, 1 }, { "f8b", 19, 1 }, { "empty", 1, 0 },
	};
	for (size_t i = 0; i < sizeof want / sizeof *want; i++) {
		const WTensor *t = wsrc_get(w, want[i].n);
		ck_assert_msg(t != NULL, "%s missing", want[i].n);
		ck_assert_int_eq(t->dtype, want[i].dt);
		ck_assert_uint_eq(t->nbytes, want[i].nb);
	}
	const WTensor *t = wsrc_get(w, "w");
	ck_assert_int_eq(t->ndim, 2);
	ck_assert_int_eq(t->dims[0], 2);
	ck_assert_int_eq(t->dims[1], 3);
	ck_assert_int_eq(memcmp(t->data, f, sizeof f), 0);
	ck_assert_int_eq(wsrc_get(w, "b")->ndim, 0);
	ck_assert_ptr_null(wsrc_get(w, "__metadata__"));
	/* Data is in the mapping: 8 + header bytes into it. */
	ck_assert_ptr_eq(t->data, (const char *)w->maps[0].base + 8 + strlen(hdr));
	/* F32 -> F16 -> F32 through wt_convert. */
	WTensor h, back;
	ck_assert_int_eq(wt_convert(t, 10, a, &h, &e), 0);
	ck_assert_int_eq(h.dtype, 10);
	ck_assert_uint_eq(h.nbytes, 12);
	ck_assert_int_eq(wt_convert(&h, 1, a, &back, &e), 0);
	const float *bf = back.data;
	ck_assert_float_eq(bf[0], 1);
	ck_assert_float_eq(bf[2], 3.5f);
	ck_assert_float_eq(bf[5], 65504);
	ck_assert_float_eq_tol(bf[4], 1e-3f, 1e-6f);
	ck_assert_int_eq(wt_convert(wsrc_get(w, "i64"), 1, a, &h, &e), -1);
	ck_assert_str_eq(e.msg, "tensor 'i64' is int64 and cannot become float; only float, float16, bfloat16 and double convert");
	wsrc_close(w);
	arena_free(a);
}
END_TEST

START_TEST(st_missing_lists_keys)
{
	float z[4] = { 0 };
	const char *p = st_file("m.safetensors",
		"{\"model.0.experts.2.conv.1.weight\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
		"\"model.0.experts.2.conv.0.bias\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]},"
		"\"model.0.experts.20.conv.0.weight\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,12]}}",
		z, sizeof z, 0);
	Arena *a = arena_new();
	Err e;
	WSrc *w = wsrc_open(p, NULL, a, &e);
	ck_assert_ptr_nonnull(w);
	ck_assert_int_eq(wsrc_missing(w, "model.0.experts.2.conv.0.weight", "model.0.experts.2.", &e), -1);
	char want[512];
	snprintf(want, sizeof want, "%s: no tensor 'model.0.experts.2.conv.0.weight'; keys under 'model.0.experts.2.': conv.0.bias, conv.1.weight", p);
	ck_assert_str_eq(e.msg, want);
	wsrc_missing(w, "model.9.experts.0.w", "model.9.experts.0.", &e);
	tu_err_has(e.msg, "no tensor 'model.9.experts.0.w' and no key starts with 'model.9.experts.0.' (3 tensors in the file); check scope, expert and prefix in experts.yaml");
	wsrc_close(w);
	arena_free(a);
}
END_TEST

/* Opens a file expected to be refused, with a message ending in want. */
static void st_refuse(const char *p, const char *want)
{
	Arena *a = arena_new();
	Err e = { "" };
	ck_assert_ptr_null(wsrc_open(p, NULL, a, &e));
	char full[1024];
	snprintf(full, sizeof full, "%s: %s", p, want);
	ck_assert_str_eq(e.msg, full);
	arena_free(a);
}

static const char ONE[] = "{\"t\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}";

START_TEST(st_malformed)
{
	float z[4] = { 0 };
	st_refuse(tu_write("short.safetensors", "\x10\0\0", 3), "truncated: 3 bytes, shorter than the 8-byte header length");
	st_refuse(st_file("lie.safetensors", ONE, z, 8, 1000),
		"header length 1000 runs past the end of the file (70 bytes); truncated, or not a safetensors file");
	st_refuse(st_file("huge.safetensors", ONE, z, 8, UINT64_MAX),
		"header of 18446744073709551615 bytes; at most 32 MiB (some 300 000 tensors) are read: split the checkpoint into shards, one 'weights' per layer");
	/* Data area cut short: the tensor's end lies past it. */
	st_refuse(st_file("cut.safetensors", ONE, z, 6, 0),
		"header: tensor 't': data_offsets [0, 8] outside the data area (6 bytes); file truncated?");
	st_refuse(st_file("dtype.safetensors", "{\"t\":{\"dtype\":\"F12\",\"shape\":[2],\"data_offsets\":[0,8]}}", z, 8, 0),
		"header: tensor 't' has unknown dtype 'F12'");
	st_refuse(st_file("shape.safetensors", "{\"t\":{\"dtype\":\"F16\",\"shape\":[2],\"data_offsets\":[0,8]}}", z, 8, 0),
		"header: tensor 't': F16 with shape of 2 elements needs 4 bytes, data_offsets give 8");
	st_refuse(st_file("neg.safetensors", "{\"t\":{\"dtype\":\"F32\",\"shape\":[-2],\"data_offsets\":[0,8]}}", z, 8, 0),
		"header: tensor 't': shape[0] is not a non-negative integer");
	st_refuse(st_file("ovf.safetensors",
			  "{\"t\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296],\"data_offsets\":[0,8]}}", z, 8, 0),
		"header: tensor 't': shape overflows");
	st_refuse(st_file("rev.safetensors", "{\"t\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[8,0]}}", z, 8, 0),
		"header: tensor 't': data_offsets [8, 0] outside the data area (8 bytes); file truncated?");
	st_refuse(st_file("overlap.safetensors",
			  "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
			  "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}", z, 12, 0),
		"header: tensors 'a' and 'b' overlap in the data area");
	/* Listed out of the order of their data: sorted before the check. */
	st_refuse(st_file("overlap2.safetensors",
			  "{\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]},"
			  "\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", z, 12, 0),
		"header: tensors 'a' and 'b' overlap in the data area");
	st_refuse(st_file("dup.safetensors",
			  "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
			  "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", z, 8, 0),
		"tensor 'a' appears twice");
	st_refuse(st_file("field.safetensors", "{\"t\":{\"dtype\":\"F32\",\"shape\":[2],\"offsets\":[0,8]}}", z, 8, 0),
		"header: tensor 't' has unknown field 'offsets'");
	st_refuse(st_file("lack.safetensors", "{\"t\":{\"dtype\":\"F32\",\"shape\":[2]}}", z, 8, 0),
		"header: tensor 't' lacks 'data_offsets'");
	st_refuse(st_file("json.safetensors", "{\"t\":{\"dtype\":\"F32\",\"shape\":[2,],\"data_offsets\":[0,8]}}", z, 8, 0),
		"header: byte 31: unexpected character");
	st_refuse(st_file("trail.safetensors", "{} x", z, 8, 0),
		"header: byte 3: trailing characters after the JSON value");
	st_refuse(st_file("arr.safetensors", "[1]", z, 8, 0), "not a safetensors file (no JSON header after the 8-byte header length)");
	/* Another file's first 8 bytes are not echoed as a header length. */
	st_refuse(tu_write("passwd.safetensors", "root:x:0:0:root:/root:/bin/sh\n", 30),
		"not a safetensors file (no JSON header after the 8-byte header length)");
	/* Header sizes past 32 MiB are refused before anything is read. */
	st_refuse(st_file("big.safetensors", ONE, z, 8, (uint64_t)64 << 20),
		"header of 67108864 bytes; at most 32 MiB (some 300 000 tensors) are read: split the checkpoint into shards, one 'weights' per layer");
	st_refuse(st_file("meta.safetensors", "{\"__metadata__\":{\"v\":1}}", z, 8, 0),
		"header: __metadata__ 'v' is a number, expected a string");
	st_refuse(st_file("float.safetensors", "{\"t\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8.0]}}", z, 8, 0),
		"header: tensor 't': data_offsets must be [begin, end] non-negative integers");
	/* A header of 200 000 tiny values would take 40 times its length to
	 * hold: refused once the parse passes 16 times. */
	size_t nv = 100000;
	char *many = malloc(2 * nv + 16);
	strcpy(many, "{\"a\":[");
	for (size_t i = 0; i < nv; i++)
		strcat(many + 5 + 2 * i, i ? ",0" : "0");
	strcat(many, "]}");
	st_refuse(st_file("many.safetensors", many, z, 8, 0),
		"header: byte 114296: the text needs more memory to parse than its length allows; it is hostile or damaged");
	free(many);
	/* Deep nesting is cut off, not recursed into. */
	char deep[200] = "{\"a\":";
	for (int i = 0; i < 40; i++)
		strcat(deep, "[");
	st_refuse(st_file("deep.safetensors", deep, z, 0, 0), "header: byte 37: nesting too deep");
}
END_TEST

/* Every spelling of one header reads alike: the writer's own (read
 * without the JSON tree), and ones that depart from it (space, another key
 * order, an escaped name, metadata, padding), which go through the parser. */
START_TEST(st_spellings)
{
	static const char *hdr[] = {
		"{\"__metadata__\":{\"format\":\"pt\"},\"a.w\":{\"dtype\":\"F32\",\"shape\":[2,1],\"data_offsets\":[0,8]},"
		"\"b\":{\"dtype\":\"I64\",\"shape\":[],\"data_offsets\":[8,16]}}    ",
		"{ \"a.w\" : {\"dtype\":\"F32\",\"shape\":[2,1],\"data_offsets\":[0,8]},"
		"\"b\":{\"dtype\":\"I64\",\"shape\":[],\"data_offsets\":[8,16]}}",
		"{\"a.w\":{\"shape\":[2,1],\"dtype\":\"F32\",\"data_offsets\":[0,8]},"
		"\"b\":{\"dtype\":\"I64\",\"shape\":[],\"data_offsets\":[8,16]}}",
		"{\"a\\u002ew\":{\"dtype\":\"F32\",\"shape\":[2,1],\"data_offsets\":[0,8]},"
		"\"b\":{\"dtype\":\"I64\",\"shape\":[],\"data_offsets\":[8,16]},\"__metadata__\":{}}\n",
		/* The writer's spelling, then not: what the first read added
		 * is taken back before the parser adds it again. */
		"{\"a.w\":{\"dtype\":\"F32\",\"shape\":[2,1],\"data_offsets\":[0,8]},"
		"\"b\":{\"shape\":[],\"dtype\":\"I64\",\"data_offsets\":[8,16]}}",
	};
	int64_t d[4] = { 1, 2, 3, 4 };
	for (size_t i = 0; i < sizeof hdr / sizeof *hdr; i++) {
		char name[32];
		snprintf(name, sizeof name, "sp%zu.safetensors", i);
		Arena *a = arena_new();
		Err e = { "" };
		WSrc *w = wsrc_open(st_file(name, hdr[i], d, sizeof d, 0), NULL, a, &e);
		ck_assert_msg(w != NULL, "%s: %s", name, e.msg);
		ck_assert_uint_eq(w->n, 2);
		const WTensor *t = wsrc_get(w, "a.w"), *b = wsrc_get(w, "b");
		ck_assert_msg(t && b, "%s", name);
		ck_assert_int_eq(t->dtype, 1);
		ck_assert_int_eq(t->ndim, 2);
		ck_assert_int_eq(t->dims[0], 2);
		ck_assert_int_eq(t->dims[1], 1);
		ck_assert_uint_eq(t->nbytes, 8);
		ck_assert_int_eq(memcmp(t->data, d, 8), 0);
		ck_assert_int_eq(b->dtype, 7);
		ck_assert_int_eq(b->ndim, 0);
		ck_assert_int_eq(memcmp(b->data, d + 1, 8), 0);
		wsrc_close(w);
		arena_free(a);
	}
	/* A leading zero, a 19-digit number: the parser's word on them. */
	st_refuse(st_file("lead0.safetensors", "{\"t\":{\"dtype\":\"F32\",\"shape\":[02],\"data_offsets\":[0,8]}}", d, 8, 0),
		"header: byte 30: expected ',' or ']'");
	st_refuse(st_file("long.safetensors",
			  "{\"t\":{\"dtype\":\"F32\",\"shape\":[1000000000000000000],\"data_offsets\":[0,8]}}", d, 8, 0),
		"header: tensor 't': F32 with shape of 1000000000000000000 elements needs 4000000000000000000 bytes, data_offsets give 8");
}
END_TEST

START_TEST(st_open_dispatch)
{
	st_refuse(tu_write("x.weights", "abc", 3),
		"unknown weight source type (neither its name nor its first bytes say); use .safetensors, .npz, .onnx, .pt/.pth or a directory of .npy files");
	Arena *a = arena_new();
	Err e;
	ck_assert_ptr_null(wsrc_open(tu_path("absent.safetensors"), NULL, a, &e));
	tu_err_has(e.msg, "absent.safetensors: No such file or directory; check the 'weights' path in experts.yaml");
	arena_free(a);
}
END_TEST

/* f16: every value round-trips, and every midpoint between neighbours
 * rounds to the even one (ties-to-even), just above/below go up/down. */
START_TEST(dtype_f16)
{
	for (uint32_t h = 0; h < 0x10000; h++) {
		float f = wt_f16_to_f32((uint16_t)h);
		if ((h & 0x7c00) == 0x7c00 && (h & 0x3ff)) {
			ck_assert(isnan(f));
			ck_assert(wt_f32_to_f16(f) & 0x200); /* quiet */
			continue;
		}
		ck_assert_uint_eq(wt_f32_to_f16(f), h);
		if ((h & 0x7fff) >= 0x7bff)
			continue; /* max finite and inf have no finite upper neighbour */
		float g = wt_f16_to_f32((uint16_t)(h + 1));
		float mid = (float)(((double)f + (double)g) / 2);
		uint16_t even = (h & 1) ? (uint16_t)(h + 1) : (uint16_t)h;
		if (h == 0x8000)
			continue; /* -0 and the next is negative: order reversed, skip */
		ck_assert_uint_eq(wt_f32_to_f16(mid), even);
		ck_assert_uint_eq(wt_f32_to_f16(nextafterf(mid, g)), h + 1);
		ck_assert_uint_eq(wt_f32_to_f16(nextafterf(mid, f)), h);
	}
	ck_assert_uint_eq(wt_f32_to_f16(65519.0f), 0x7bff);
	ck_assert_uint_eq(wt_f32_to_f16(65520.0f), 0x7c00);
	ck_assert_uint_eq(wt_f32_to_f16(1e10f), 0x7c00);
	ck_assert_uint_eq(wt_f32_to_f16(-INFINITY), 0xfc00);
	ck_assert_uint_eq(wt_f32_to_f16(1e-10f), 0);
	ck_assert_uint_eq(wt_f32_to_f16(-1e-10f), 0x8000);
	ck_assert_uint_eq(wt_f32_to_f16(ldexpf(1, -24)), 1); /* smallest subnormal */
	ck_assert_uint_eq(wt_f32_to_f16(ldexpf(1, -25)), 0); /* tie to even: 0 */
	ck_assert_uint_eq(wt_f32_to_f16(ldexpf(1.5f, -25)), 1);
	ck_assert_float_eq(wt_f16_to_f32(0x3c00), 1.0f);
	ck_assert_float_eq(wt_f16_to_f32(0xc000), -2.0f);
	ck_assert_float_eq(wt_f16_to_f32(0x0001), ldexpf(1, -24));
}
END_TEST

START_TEST(dtype_bf16)
{
	/* Every bf16 round-trips; midpoints tie to even. */
	for (uint32_t h = 0; h < 0x10000; h++) {
		float f = wt_bf16_to_f32((uint16_t)h);
		uint32_t x = h << 16;
		if (isnan(f)) {
			ck_assert(isnan(wt_bf16_to_f32(wt_f32_to_bf16(f))));
			continue;
		}
		ck_assert_uint_eq(wt_f32_to_bf16(f), h);
		if ((h & 0x7fff) >= 0x7f7f)
			continue;
		uint32_t mid = x | 0x8000;
		float m;
		memcpy(&m, &mid, 4);
		ck_assert_uint_eq(wt_f32_to_bf16(m), (h & 1) ? h + 1 : h);
		mid++;
		memcpy(&m, &mid, 4);
		ck_assert_uint_eq(wt_f32_to_bf16(m), h + 1);
	}
	ck_assert_uint_eq(wt_f32_to_bf16(3.4e38f), 0x7f80); /* rounds past max to inf */
	uint32_t snan = 0x7f800001;
	float sn;
	memcpy(&sn, &snan, 4);
	ck_assert(isnan(wt_bf16_to_f32(wt_f32_to_bf16(sn)))); /* payload in the low bits only */
}
END_TEST

START_TEST(dtype_numel)
{
	int64_t dims[3] = { 2, 3, 4 };
	WTensor t = { .name = "t", .dtype = 1, .ndim = 3, .dims = dims };
	ck_assert_int_eq(wt_numel(&t), 24);
	ck_assert_int_eq(wt_nbytes(&t), 96);
	t.dims[1] = 0;
	ck_assert_int_eq(wt_numel(&t), 0);
	t.dims[1] = INT64_MAX;
	ck_assert_int_eq(wt_numel(&t), -1); /* 2 * INT64_MAX overflows */
	t.ndim = 1;
	t.dims[0] = INT64_MAX / 2;
	ck_assert_int_eq(wt_numel(&t), INT64_MAX / 2);
	ck_assert_int_eq(wt_nbytes(&t), -1);
	t.dims[0] = -1;
	ck_assert_int_eq(wt_numel(&t), -1);
	t.ndim = 0;
	ck_assert_int_eq(wt_numel(&t), 1);
	ck_assert_uint_eq(wt_dtype_size(16), 2);
	ck_assert_uint_eq(wt_dtype_size(8), 0);
	ck_assert_str_eq(wt_dtype_name(16), "bfloat16");
	ck_assert_str_eq(wt_dtype_name(99), "unknown");
}
END_TEST

int main(void)
{
	Suite *s = suite_create("safetensors");
	TCase *tc = tcase_create("reader");
	tcase_add_checked_fixture(tc, tu_setup, tu_teardown);
	tcase_add_test(tc, st_all_dtypes);
	tcase_add_test(tc, st_missing_lists_keys);
	tcase_add_test(tc, st_malformed);
	tcase_add_test(tc, st_spellings);
	tcase_add_test(tc, st_open_dispatch);
	suite_add_tcase(s, tc);
	TCase *td = tcase_create("dtype");
	tcase_add_test(td, dtype_f16);
	tcase_add_test(td, dtype_bf16);
	tcase_add_test(td, dtype_numel);
	suite_add_tcase(s, td);
	return tu_run(s);
}
