/* The torch.save reader: every tensor of each fixture in testdata/pt/
 * (written by tests/gen/make_pt_fixtures.py with python3-torch) against the
 * reference bytes saved next to it; malformed pickles and archives; and the
 * corpus' model.pt against its model.safetensors. */
#include <check.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "arena.h"
#include "err.h"
#include "pickle.h"
#include "wsrc.h"
#include "testutil.h"

static const char *srcdir(void)
{
	const char *s = getenv("top_srcdir");
	return s ? s : ".";
}

static char *slurp(Arena *a, const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	ck_assert_msg(f, "cannot open %s", path);
	fseek(f, 0, SEEK_END);
	long n = ftell(f);
	fseek(f, 0, SEEK_SET);
	char *p = arena_alloc(a, (size_t)n + 1);
	ck_assert_uint_eq(fread(p, 1, (size_t)n, f), (size_t)n);
	fclose(f);
	*len = (size_t)n;
	return p;
}

static int inmap(const WSrc *w, const void *p)
{
	for (size_t i = 0; i < w->nmaps; i++)
		if ((const char *)p >= (const char *)w->maps[i].base &&
		    (const char *)p < (const char *)w->maps[i].base + w->maps[i].len)
			return 1;
	return 0;
}

/* Reads FILE.pt with key and checks it holds exactly the tensors of REF.ref
 * / REF.bin, in that order, bit for bit. Returns the source for more checks. */
static WSrc *check_against(Arena *a, const char *file, const char *key, const char *ref)
{
	char path[4096];
	size_t mlen, blen;
	snprintf(path, sizeof path, "%s/testdata/pt/%s.ref", srcdir(), ref);
	char *man = slurp(a, path, &mlen);
	snprintf(path, sizeof path, "%s/testdata/pt/%s.bin", srcdir(), ref);
	const unsigned char *bin = (const unsigned char *)slurp(a, path, &blen);
	snprintf(path, sizeof path, "%s/testdata/pt/%s.pt", srcdir(), file);
	Err e = { "" };
	WSrc *w = wsrc_open(arena_strdup(a, path), key, a, &e);
	ck_assert_msg(w, "%s: %s", file, e.msg);
	size_t i = 0;
	for (char *line = strtok(man, "\n"); line; line = strtok(NULL, "\n"), i++) {
		char name[256];
		int dtype, ndim, used;
		ck_assert_int_eq(sscanf(line, "%255s %d %d%n", name, &dtype, &ndim, &used), 3);
		char *p = line + used;
		int64_t dims[WT_MAXDIM];
		for (int d = 0; d < ndim; d++)
			dims[d] = strtoll(p, &p, 10);
		size_t off = strtoull(p, &p, 10), nb = strtoull(p, &p, 10);
		ck_assert_uint_le(off + nb, blen);
		ck_assert_msg(i < w->n, "%s: %zu tensors read, reference has more (%s)", file, w->n, name);
		const WTensor *t = w->t[i];
		ck_assert_msg(strcmp(t->name, name) == 0, "%s: tensor %zu is '%s', expected '%s'",
			file, i, t->name, name);
		ck_assert_ptr_eq(wsrc_get(w, name), t);
		ck_assert_int_eq(t->dtype, dtype);
		ck_assert_int_eq(t->ndim, ndim);
		for (int d = 0; d < ndim; d++)
			ck_assert_int_eq(t->dims[d], dims[d]);
		ck_assert_uint_eq(t->nbytes, nb);
		ck_assert_msg(nb == 0 || memcmp(t->data, bin + off, nb) == 0,
			"%s: '%s' differs from the reference", file, name);
	}
	ck_assert_uint_eq(w->n, i);
	return w;
}

START_TEST(fp32_state_dict)
{
	Arena *a = arena_new();
	WSrc *w = check_against(a, "sd_fp32", NULL, "sd_fp32");
	/* contiguous tensors are read in place */
	for (size_t i = 0; i < w->n; i++)
		ck_assert_msg(inmap(w, w->t[i]->data), "'%s' was copied", w->t[i]->name);
	wsrc_close(w);
	arena_free(a);
}
END_TEST

START_TEST(fp16_state_dict)
{
	Arena *a = arena_new();
	WSrc *w = check_against(a, "sd_fp16", NULL, "sd_fp16");
	ck_assert_int_eq(wsrc_get(w, "model.2.weight")->dtype, 10);
	wsrc_close(w);
	arena_free(a);
}
END_TEST

START_TEST(whole_module)
{
	Arena *a = arena_new();
	WSrc *w = check_against(a, "module", NULL, "module");
	/* a non-persistent buffer is not a weight */
	ck_assert_ptr_null(wsrc_get(w, "model.1.scratch"));
	wsrc_close(w);
	w = check_against(a, "module_p4", NULL, "module_p4");
	wsrc_close(w);
	arena_free(a);
}
END_TEST

START_TEST(detector_dict)
{
	Arena *a = arena_new();
	wsrc_close(check_against(a, "det_noema", NULL, "det_noema"));
	wsrc_close(check_against(a, "det_ema", NULL, "det_ema"));
	wsrc_close(check_against(a, "det_ema", "ema", "det_ema"));
	wsrc_close(check_against(a, "det_ema", "model", "det_ema_model"));
	arena_free(a);
}
END_TEST

START_TEST(strided_views)
{
	Arena *a = arena_new();
	WSrc *w = check_against(a, "noncontig", NULL, "noncontig");
	ck_assert(inmap(w, wsrc_get(w, "base")->data));
	ck_assert(inmap(w, wsrc_get(w, "rows")->data)); /* a contiguous slice: in place */
	ck_assert(!inmap(w, wsrc_get(w, "t")->data));
	ck_assert(!inmap(w, wsrc_get(w, "expand")->data));
	wsrc_close(w);
	arena_free(a);
}
END_TEST

START_TEST(bf16)
{
	Arena *a = arena_new();
	WSrc *w = check_against(a, "bf16", NULL, "bf16");
	ck_assert_int_eq(wsrc_get(w, "w")->dtype, 16);
	wsrc_close(w);
	/* a tensor the reader cannot take, outside the selected entry, is no obstacle */
	wsrc_close(check_against(a, "dims9", NULL, "dims9"));
	/* an explicit little-endian byteorder member is accepted */
	wsrc_close(check_against(a, "little", NULL, "sd_fp32"));
	arena_free(a);
}
END_TEST

static void expect_open_error(const char *file, const char *key, const char *want)
{
	Arena *a = arena_new();
	char path[4096];
	snprintf(path, sizeof path, "%s/testdata/pt/%s.pt", srcdir(), file);
	Err e = { "" };
	WSrc *w = wsrc_open(path, key, a, &e);
	ck_assert_msg(!w, "%s opened", file);
	ck_assert_msg(strstr(e.msg, path) && strstr(e.msg, want), "%s: got \"%s\", expected \"%s\"",
		file, e.msg, want);
	ck_assert_ptr_null(strchr(e.msg, '\n'));
	arena_free(a);
}

START_TEST(bad_archives)
{
	expect_open_error("bad_short_storage", NULL,
		"sd_fp32/data.pkl: offset 158 (BINPERSID): storage '0' holds 216 bytes, 108 elements of 4 bytes declared; the file is truncated");
	expect_open_error("bad_bigendian", NULL, "big-endian checkpoint");
	expect_open_error("bad_nopickle", NULL, "zip without <archive>/data.pkl; not a torch.save checkpoint");
	expect_open_error("bad_torchscript", NULL, "a TorchScript archive (torch.jit.save), not a torch.save checkpoint");
	expect_open_error("bad_dims9", NULL, "big is a torch._utils._rebuild_tensor_v2 with 9 dims, at most 8 supported; this reader handles dense tensors only");
	expect_open_error("bad_qint", NULL, "q is a torch._utils._rebuild_qtensor; this reader handles dense tensors only");
	expect_open_error("bad_legacy", NULL, "legacy torch.save format");
	expect_open_error("det_ema", "opt", "checkpoint_key 'opt' not found; entries: 'model', 'ema', 'epoch', 'optimizer', 'train_args'");
	expect_open_error("det_noema", "ema", "checkpoint entry 'ema' is None");
	expect_open_error("det_ema", "epoch", "no tensors in entry 'epoch' (a int)");
	expect_open_error("bad_cyclic", NULL, "module path 'again.again.again.again.again.again.agai...' longer than 4096 bytes; the module tree is cyclic");
	expect_open_error("bad_wide", NULL, "module tree with more than 65536 module paths");
	expect_open_error("sd_fp32", "model", "checkpoint_key 'model' given but the file is itself a state_dict");
	expect_open_error("module", "model", "checkpoint_key 'model' not found; the file holds a ptmods.Net, not a dict; drop checkpoint_key");
}
END_TEST

/* Malformed pickles, run directly: each error names the stream and the
 * opcode's offset. The resolver hands out a 64-byte storage. */
static int fake_resolve(void *ctx, PkStorage *st, Err *e)
{
	st->data = ctx;
	st->nbytes = 64;
	return 0;
}

static void expect_pickle(const char *p, size_t n, const char *want)
{
	Arena *a = arena_new();
	static unsigned char store[64];
	Err e = { "" };
	PkVal *v = pk_load(p, n, "t.pkl", fake_resolve, store, a, &e);
	ck_assert_msg(!v, "pickle accepted, expected \"%s\"", want);
	ck_assert_msg(strncmp(e.msg, want, strlen(want)) == 0, "got \"%s\", expected \"%s\"", e.msg, want);
	arena_free(a);
}

#define PK(s, want) expect_pickle(s, sizeof s - 1, want)

/* ('storage', torch.FloatStorage, '0', 'cpu', NUMEL) BINPERSID */
#define STORAGE(numel) "(X\x07\x00\x00\x00storagec" "torch\nFloatStorage\nX\x01\x00\x00\x00" "0X\x03\x00\x00\x00" "cpu" numel "tQ"
#define REBUILD "ctorch._utils\n_rebuild_tensor_v2\n("

START_TEST(bad_pickles)
{
	PK("\x80\x02\xff", "t.pkl: offset 2 (0xff): unknown opcode");
	PK("\x80\x02X\x10\x00\x00\x00" "ab", "t.pkl: offset 2 (BINUNICODE): declared length 16 exceeds the 2 bytes left");
	PK("\x80\x02\x8d\x00\x00\x00\x00\x00\x00\x00\x10", "t.pkl: offset 2 (BINUNICODE8): declared length 1152921504606846976 exceeds");
	PK("\x80\x02J\x01", "t.pkl: offset 2 (BININT): stream truncated: 4 bytes needed, 1 left");
	PK("\x80\x02N", "t.pkl: offset 3 (end of stream): stream truncated before STOP");
	PK("\x80\x02.", "t.pkl: offset 2 (STOP): stack underflow");
	PK("\x80\x02N(R", "t.pkl: offset 4 (REDUCE): stack underflow");
	PK("\x80\x02Nt", "t.pkl: offset 3 (TUPLE): no MARK on the stack");
	PK("\x80\x06N.", "t.pkl: offset 0 (PROTO): pickle protocol 6 unsupported");
	PK("\x80\x02h\x05", "t.pkl: offset 2 (BINGET): memo index 5 out of range (0 set)");
	PK("\x80\x02Nr\xff\xff\xff\x7f", "t.pkl: offset 3 (LONG_BINPUT): memo index 2147483647 out of range");
	PK("\x80\x02Nq\x03h\x02", "t.pkl: offset 5 (BINGET): memo index 2 was never set");
	PK("\x80\x02Nq\x03h\x04", "t.pkl: offset 5 (BINGET): memo index 4 out of range (4 set)");
	PK("\x80\x02K\x01N\x81", "t.pkl: offset 5 (NEWOBJ): arguments are a None, not a tuple");
	PK("\x80\x02K\x01}b", "t.pkl: offset 5 (BUILD): BUILD on a int");
	PK("\x80\x02NK\x01K\x02s", "t.pkl: offset 7 (SETITEM): SETITEM on a None");
	PK("\x80\x02NQ", "t.pkl: offset 3 (BINPERSID): unsupported persistent id (a None)");
	PK("\x80\x02" "(X\x07\x00\x00\x00storageNX\x01\x00\x00\x00" "0X\x03\x00\x00\x00" "cpu" "K\x01tQ",
		"t.pkl: offset 33 (BINPERSID): storage type is a None, not a class name");
	PK("\x80\x02" "P0\n", "t.pkl: offset 2 (PERSID): opcode not supported");
	/* storage past the end of its member: 100 floats in 64 bytes */
	PK("\x80\x02" STORAGE("Kd"), "t.pkl: offset 52 (BINPERSID): storage '0' holds 64 bytes, 100 elements of 4 bytes declared");
	/* numel * elsize overflow */
	PK("\x80\x02" STORAGE("\x8a\x08\x00\x00\x00\x00\x00\x00\x00\x40"),
		"t.pkl: offset 60 (BINPERSID): storage '0' declares 4611686018427387904 elements, more bytes than can be addressed");
	/* a tensor reaching past its 16-element storage, and one whose size overflows */
	PK("\x80\x02" REBUILD STORAGE("K\x10") "K\x00K\x11\x85K\x01\x85\x89NtR.",
		"t.pkl: offset 98 (REDUCE): tensor reaches element 16 of storage '0', which holds 64 bytes");
	PK("\x80\x02" REBUILD STORAGE("K\x10") "K\x00\x8a\x05\x00\x00\x00\x00\x01\x8a\x05\x00\x00\x00\x00\x01\x86K\x01K\x01\x86\x89NtR.",
		"t.pkl: offset 112 (REDUCE): _rebuild_tensor_v2: element count overflows");
	PK("\x80\x02" REBUILD STORAGE("K\x10") "K\x00K\x02K\x02\x86K\x01\x85\x89NtR.",
		"t.pkl: offset 100 (REDUCE): _rebuild_tensor_v2: size has 2 dims, stride 1");
	PK("\x80\x02" REBUILD "NK\x00)NtR.",
		"t.pkl: offset 42 (REDUCE): _rebuild_tensor_v2 expects (storage, offset >= 0, size, stride, ...)");

	/* deep nesting: open MARKs, and tuples of tuples */
	char deep[1100];
	memcpy(deep, "\x80\x02", 2);
	memset(deep + 2, '(', 1001);
	expect_pickle(deep, 1003, "t.pkl: offset 1002 (MARK): more than 1000 open MARKs");
	memcpy(deep, "\x80\x02N", 3);
	memset(deep + 3, 0x85, 1001);
	expect_pickle(deep, 1004, "t.pkl: offset 1003 (TUPLE1): values nest deeper than 1000 levels");
}
END_TEST

/* Valid streams: opaque objects keep name, arguments and state; known
 * names become plain values. */
START_TEST(pickle_values)
{
	Arena *a = arena_new();
	Err e = { "" };
	/* mod.Cls.__new__(mod.Cls, 7) with state {'x': -2, 'f': 0.5}, as protocol 4 writes it */
	static const char obj[] = "\x80\x04\x95\x00\x00\x00\x00\x00\x00\x00\x00"
		"\x8c\x03mod\x94\x8c\x03" "Cls\x94\x93\x94K\x07\x85\x94\x81\x94}\x94(\x8c\x01x\x8a\x01\xfe"
		"\x8c\x01" "fG?\xe0\x00\x00\x00\x00\x00\x00ub.";
	PkVal *v = pk_load(obj, sizeof obj - 1, "o.pkl", NULL, NULL, a, &e);
	ck_assert_msg(v, "%s", e.msg);
	ck_assert_int_eq(v->kind, PK_OBJ);
	ck_assert_str_eq(v->u.obj.cls, "mod.Cls");
	ck_assert_int_eq(v->u.obj.args->u.seq.n, 1);
	ck_assert_int_eq(v->u.obj.args->u.seq.v[0]->u.i, 7);
	ck_assert_int_eq(pk_attr(v, "x")->u.i, -2);
	ck_assert(pk_attr(v, "f")->u.f == 0.5);
	ck_assert_ptr_null(pk_attr(v, "y"));

	/* protocol 1 style: copyreg._reconstructor(mod.Old, object, None), then BUILD */
	static const char old[] = "\x80\x02" "ccopyreg\n_reconstructor\n(cmod\nOld\ncbuiltins\nobject\nNtR"
		"}X\x01\x00\x00\x00" "aK\x09sb.";
	v = pk_load(old, sizeof old - 1, "r.pkl", NULL, NULL, a, &e);
	ck_assert_msg(v, "%s", e.msg);
	ck_assert_str_eq(v->u.obj.cls, "mod.Old");
	ck_assert_int_eq(pk_attr(v, "a")->u.i, 9);

	/* a tensor on a storage type the reader does not take loads as a declined value */
	static const char q[] = "\x80\x02" REBUILD "(X\x07\x00\x00\x00storagec" "torch\nQInt8Storage\n"
		"X\x01\x00\x00\x00" "0X\x03\x00\x00\x00" "cpu" "K\x01tQK\x00K\x01\x85K\x01\x85\x89NtR.";
	v = pk_load(q, sizeof q - 1, "q.pkl", NULL, NULL, a, &e);
	ck_assert_msg(v, "%s", e.msg);
	ck_assert_int_eq(v->kind, PK_OBJ);
	ck_assert_str_eq(v->u.obj.cls, "torch._utils._rebuild_tensor_v2 of torch.QInt8Storage (unsupported storage type)");

	/* OrderedDict with a repeated key (the later value wins, in place), a set, DUP/POP, memo */
	static const char od[] = "\x80\x02" "ccollections\nOrderedDict\n)R(X\x01\x00\x00\x00" "aK\x01"
		"X\x01\x00\x00\x00" "bc__builtin__\nset\n]K\x05" "aK\x06" "a\x85R"
		"X\x01\x00\x00\x00" "aK\x03uq\x00" "20h\x00.";
	v = pk_load(od, sizeof od - 1, "d.pkl", NULL, NULL, a, &e);
	ck_assert_msg(v, "%s", e.msg);
	ck_assert_int_eq(v->kind, PK_DICT);
	ck_assert_uint_eq(v->u.dict.n, 2);
	ck_assert_str_eq(v->u.dict.k[0]->u.str.s, "a");
	ck_assert_int_eq(pk_dict_get(v, "a")->u.i, 3);
	PkVal *s = pk_dict_get(v, "b");
	ck_assert_int_eq(s->kind, PK_SET);
	ck_assert_uint_eq(s->u.seq.n, 2);
	arena_free(a);
}
END_TEST

/* The corpus' model.pt (torch 2.x: byteorder member, aligned storages)
 * against its model.safetensors, tensor for tensor. */
START_TEST(corpus_matches_safetensors)
{
	char dir[4096];
	snprintf(dir, sizeof dir, "%s/../shared/corpus/torch2-opset18", srcdir());
	DIR *d = opendir(dir);
	if (!d) {
		fprintf(stderr, "check_pt: %s absent, corpus comparison skipped\n", dir);
		return;
	}
	int cases = 0;
	for (struct dirent *de; (de = readdir(d));) {
		if (de->d_name[0] == '.')
			continue;
		char pt[8192], st[8192];
		snprintf(pt, sizeof pt, "%s/%s/model.pt", dir, de->d_name);
		snprintf(st, sizeof st, "%s/%s/model.safetensors", dir, de->d_name);
		struct stat sb;
		if (stat(pt, &sb) || stat(st, &sb))
			continue;
		Arena *a = arena_new();
		Err e = { "" };
		WSrc *wp = wsrc_open(pt, NULL, a, &e);
		ck_assert_msg(wp, "%s", e.msg);
		WSrc *ws = wsrc_open(st, NULL, a, &e);
		ck_assert_msg(ws, "%s", e.msg);
		ck_assert_uint_eq(wp->n, ws->n);
		for (size_t i = 0; i < ws->n; i++) {
			const WTensor *s = ws->t[i], *p = wsrc_get(wp, s->name);
			ck_assert_msg(p, "%s: '%s' missing", pt, s->name);
			ck_assert_int_eq(p->dtype, s->dtype);
			ck_assert_int_eq(p->ndim, s->ndim);
			for (int k = 0; k < s->ndim; k++)
				ck_assert_int_eq(p->dims[k], s->dims[k]);
			ck_assert_uint_eq(p->nbytes, s->nbytes);
			ck_assert_msg(memcmp(p->data, s->data, s->nbytes) == 0, "%s: '%s' differs", pt, s->name);
		}
		wsrc_close(wp);
		wsrc_close(ws);
		arena_free(a);
		cases++;
	}
	closedir(d);
	ck_assert_int_gt(cases, 0);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("pt");
	TCase *tc = tcase_create("pt");
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, fp32_state_dict);
	tcase_add_test(tc, fp16_state_dict);
	tcase_add_test(tc, whole_module);
	tcase_add_test(tc, detector_dict);
	tcase_add_test(tc, strided_views);
	tcase_add_test(tc, bf16);
	tcase_add_test(tc, bad_archives);
	tcase_add_test(tc, bad_pickles);
	tcase_add_test(tc, pickle_values);
	tcase_add_test(tc, corpus_matches_safetensors);
	suite_add_tcase(s, tc);
	return tu_run(s);
}
