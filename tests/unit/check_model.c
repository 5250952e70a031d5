#include <check.h>
#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "afile.h"
#include "graph.h"
#include "json.h"
#include "model.h"
#include "report.h"

static char dir[] = "/tmp/check_model.XXXXXX";

static char *at(Arena *a, const char *name)
{
	return arena_printf(a, "%s/%s", dir, name);
}

static void put(const char *path, const void *p, size_t n)
{
	FILE *f = fopen(path, "wb");
	ck_assert_ptr_nonnull(f);
	ck_assert_uint_eq(fwrite(p, 1, n, f), n);
	fclose(f);
}

static unsigned char *get(Arena *a, const char *path, size_t *n)
{
	FILE *f = fopen(path, "rb");
	ck_assert_ptr_nonnull(f);
	fseek(f, 0, SEEK_END);
	*n = (size_t)ftell(f);
	rewind(f);
	unsigned char *p = arena_alloc(a, *n + 1);
	ck_assert_uint_eq(fread(p, 1, *n, f), *n);
	fclose(f);
	return p;
}

/* w.bin in the test folder: n bytes (at most 64) 100, 101, ... */
static const unsigned char *put_wbin(Arena *a, size_t n)
{
	static unsigned char data[64];
	for (size_t i = 0; i < sizeof data; i++)
		data[i] = (unsigned char)(100 + i);
	put(at(a, "w.bin"), data, n);
	return data;
}

/* A model with one initializer, embedded or external, packed by protobuf-c. */
static size_t mkmodel(Arena *a, const char *path, const char *loc, const char *off, uint8_t **bytes)
{
	static uint8_t raw[16] = { 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16 };
	static int64_t dims[1] = { 16 };
	Onnx__TensorProto t = ONNX__TENSOR_PROTO__INIT;
	t.n_dims = 1, t.dims = dims, t.has_data_type = 1, t.data_type = 2, t.name = "w";
	Onnx__StringStringEntryProto kl = ONNX__STRING_STRING_ENTRY_PROTO__INIT, ko = kl;
	Onnx__StringStringEntryProto *kv[2] = { &kl, &ko };
	if (loc) {
		kl.key = "location", kl.value = (char *)loc;
		ko.key = "offset", ko.value = (char *)off;
		t.n_external_data = 2, t.external_data = kv;
		t.has_data_location = 1, t.data_location = ONNX__TENSOR_PROTO__DATA_LOCATION__EXTERNAL;
	} else {
		t.has_raw_data = 1, t.raw_data.len = 16, t.raw_data.data = raw;
	}
	Onnx__TensorProto *tp = &t;
	Onnx__GraphProto g = ONNX__GRAPH_PROTO__INIT;
	g.name = "g", g.n_initializer = 1, g.initializer = &tp;
	Onnx__ModelProto m = ONNX__MODEL_PROTO__INIT;
	m.has_ir_version = 1, m.ir_version = 8, m.graph = &g;
	size_t n = onnx__model_proto__get_packed_size(&m);
	uint8_t *buf = arena_alloc(a, n + 8);
	onnx__model_proto__pack(&m, buf);
	put(path, buf, n);
	if (bytes)
		*bytes = buf;
	return n;
}

/* protobuf-c gives strings NUL-terminated: a NUL in a name would cut it
 * short unseen. The wire scan compares the string with its wire length;
 * bytes fields (raw_data, attribute s) may hold any byte. */
START_TEST(nul_in_a_name)
{
	/* ModelProto.graph { node { output: "y\0evil" } }, and the same with
	 * a NUL in AttributeProto.s (bytes). */
	static const uint8_t nul[] = { 0x3a, 10, 0x0a, 8, 0x12, 6, 'y', 0, 'e', 'v', 'i', 'l' };
	static const uint8_t ok[] = { 0x3a, 10, 0x0a, 8, 0x12, 6, 'y', '1', 'e', 'v', 'i', 'l' };
	static const uint8_t bytes[] = { 0x3a, 12, 0x0a, 10, 0x2a, 8, 0x0a, 1, 'a', 0x22, 3, 'x', 0, 'z' };
	Err e;
	ck_assert_int_eq(model_wire_check(nul, sizeof nul, &e), -1);
	ck_assert_str_eq(e.msg, "not a valid ONNX model: onnx.NodeProto.output 'y\\x00evil' contains a NUL character (byte 4); names and strings cannot contain NUL, rename it");
	ck_assert_int_eq(model_wire_check(ok, sizeof ok, &e), 0);
	ck_assert_int_eq(model_wire_check(bytes, sizeof bytes, &e), 0);
	/* Random bytes: the NUL in a string is chance, the wire break after
	 * it is what the file is. */
	static const uint8_t garbage[] = { 0x3a, 10, 0x0a, 8, 0x12, 6, 'y', 0, 'e', 'v', 'i', 'l', 0x0f };
	ck_assert_int_eq(model_wire_check(garbage, sizeof garbage, &e), -1);
	ck_assert_str_eq(e.msg, "not an ONNX model (protobuf parse failed at byte 12 of 13: field onnx.ModelProto.ir_version has wire type 7, expected 0)");
}
END_TEST

START_TEST(roundtrip_keeps_unknown_fields)
{
	Arena *a = arena_new();
	uint8_t *b;
	size_t n = mkmodel(a, at(a, "in.onnx"), NULL, NULL, &b);
	/* Field 99 (varint) and field 100 (bytes): unknown to onnx.proto. */
	static const uint8_t unk[] = { 0x98, 0x06, 0x2a, 0xa2, 0x06, 3, 'x', 'y', 'z' };
	memcpy(b + n, unk, sizeof unk);
	put(at(a, "in.onnx"), b, n + sizeof unk);
	Model md;
	Err e;
	ck_assert_int_eq(model_load(&md, at(a, "in.onnx"), a, &e), 0);
	ck_assert_str_eq(md.m->graph->initializer[0]->name, "w");
	ck_assert_int_eq(model_save(&md, at(a, "out.onnx"), 0, &e), 0);
	size_t m;
	uint8_t *o = get(a, at(a, "out.onnx"), &m);
	ck_assert_uint_eq(m, n + sizeof unk);
	ck_assert_mem_eq(o, b, m);
	/* Saving over the input needs SAVE_IN_PLACE. */
	ck_assert_int_eq(model_save(&md, at(a, "in.onnx"), 0, &e), -1);
	ck_assert_ptr_nonnull(strstr(e.msg, "--in-place"));
	ck_assert_int_eq(model_save(&md, at(a, "in.onnx"), SAVE_IN_PLACE, &e), 0);
	model_close(&md);
	unlink(at(a, "in.onnx"));
	unlink(at(a, "out.onnx"));
	arena_free(a);
}
END_TEST

START_TEST(tensor_data_embedded_and_external)
{
	Arena *a = arena_new();
	const unsigned char *data = put_wbin(a, 40);
	mkmodel(a, at(a, "ext.onnx"), "w.bin", "8", NULL);
	mkmodel(a, at(a, "emb.onnx"), NULL, NULL, NULL);
	Model md, me;
	Err e;
	const void *p;
	size_t n;
	ck_assert_int_eq(model_load(&md, at(a, "ext.onnx"), a, &e), 0);
	ck_assert_int_eq(md.next, 1);
	ck_assert_int_eq(model_tensor_data(&md, md.m->graph->initializer[0], &p, &n, &e), 0);
	ck_assert_uint_eq(n, 16);
	ck_assert_mem_eq(p, data + 8, 16);
	model_close(&md);
	ck_assert_int_eq(model_load(&me, at(a, "emb.onnx"), a, &e), 0);
	ck_assert_int_eq(me.next, 0);
	ck_assert_int_eq(model_tensor_data(&me, me.m->graph->initializer[0], &p, &n, &e), 0);
	ck_assert_uint_eq(n, 16);
	ck_assert_int_eq(((const unsigned char *)p)[15], 16);
	model_close(&me);
	/* 8 + 16 > 20 bytes: refused at load. */
	put_wbin(a, 20);
	ck_assert_int_eq(model_load(&md, at(a, "ext.onnx"), a, &e), -1);
	ck_assert_ptr_nonnull(strstr(e.msg, "runs past the end"));
	unlink(at(a, "w.bin"));
	unlink(at(a, "ext.onnx"));
	unlink(at(a, "emb.onnx"));
	arena_free(a);
}
END_TEST

/* Written into a folder without the input's data file, the output gets
 * its own: every external tensor copied there, wherever it sits (here an
 * initializer and a Constant's value), at 4 KiB-aligned offsets. The
 * plain save, which writes no data file, still refuses. */
START_TEST(save_elsewhere_copies_every_tensor)
{
	Arena *a = arena_new();
	const unsigned char *data = put_wbin(a, 40);
	static int64_t dims[1] = { 16 };
	Onnx__StringStringEntryProto kl = ONNX__STRING_STRING_ENTRY_PROTO__INIT, ko = kl, cl = kl, co = kl;
	kl.key = cl.key = "location", kl.value = cl.value = "w.bin";
	ko.key = co.key = "offset", ko.value = "8", co.value = "24";
	Onnx__StringStringEntryProto *kv[2] = { &kl, &ko }, *cv[2] = { &cl, &co };
	Onnx__TensorProto t = ONNX__TENSOR_PROTO__INIT, ct;
	t.n_dims = 1, t.dims = dims, t.has_data_type = 1, t.data_type = 2;
	t.has_data_location = 1, t.data_location = ONNX__TENSOR_PROTO__DATA_LOCATION__EXTERNAL;
	ct = t;
	t.name = "w", t.n_external_data = 2, t.external_data = kv;
	ct.name = "c", ct.n_external_data = 2, ct.external_data = cv;
	Onnx__AttributeProto at_ = ONNX__ATTRIBUTE_PROTO__INIT, *atp = &at_;
	at_.name = "value", at_.has_type = 1, at_.type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__TENSOR, at_.t = &ct;
	char *outs[1] = { "y" };
	Onnx__NodeProto nd = ONNX__NODE_PROTO__INIT, *ndp = &nd;
	nd.op_type = "Constant", nd.name = "k", nd.n_output = 1, nd.output = outs, nd.n_attribute = 1, nd.attribute = &atp;
	Onnx__TensorProto *tp = &t;
	Onnx__GraphProto g = ONNX__GRAPH_PROTO__INIT;
	g.name = "g", g.n_initializer = 1, g.initializer = &tp, g.n_node = 1, g.node = &ndp;
	Onnx__ModelProto m = ONNX__MODEL_PROTO__INIT;
	m.has_ir_version = 1, m.ir_version = 8, m.graph = &g;
	size_t n = onnx__model_proto__get_packed_size(&m);
	uint8_t *buf = arena_alloc(a, n);
	onnx__model_proto__pack(&m, buf);
	put(at(a, "in.onnx"), buf, n);
	ck_assert_int_eq(mkdir(at(a, "sub"), 0777), 0);

	Model md, mo;
	Err e;
	ck_assert_int_eq(model_load(&md, at(a, "in.onnx"), a, &e), 0);
	ck_assert_int_eq(model_save(&md, at(a, "sub/o.onnx"), 0, &e), -1);
	ck_assert_ptr_nonnull(strstr(e.msg, "does not exist"));
	ck_assert_int_eq(model_save_check(&md, at(a, "sub/o.onnx"), NULL, 0, &e), 0);
	ck_assert_msg(model_save_as(&md, at(a, "sub/o.onnx"), NULL, 0, &e) == 0, "%s", e.msg);
	model_close(&md);
	unlink(at(a, "w.bin")); /* the output reads its own copy */
	ck_assert_msg(model_load(&mo, at(a, "sub/o.onnx"), a, &e) == 0, "%s", e.msg);
	const Onnx__TensorProto *ts[2] = { mo.m->graph->initializer[0], mo.m->graph->node[0]->attribute[0]->t };
	const char *offs[2] = { "0", "4096" };
	for (int i = 0; i < 2; i++) {
		const void *p;
		size_t nb;
		ck_assert_int_eq(model_tensor_data(&mo, ts[i], &p, &nb, &e), 0);
		ck_assert_uint_eq(nb, 16);
		ck_assert_mem_eq(p, data + (i ? 24 : 8), 16);
		for (size_t k = 0; k < ts[i]->n_external_data; k++) {
			const Onnx__StringStringEntryProto *x = ts[i]->external_data[k];
			if (!strcmp(x->key, "location"))
				ck_assert_str_eq(x->value, "o.onnx.data");
			if (!strcmp(x->key, "offset"))
				ck_assert_str_eq(x->value, offs[i]);
		}
	}
	model_close(&mo);
	unlink(at(a, "in.onnx"));
	unlink(at(a, "sub/o.onnx"));
	unlink(at(a, "sub/o.onnx.data"));
	rmdir(at(a, "sub"));
	arena_free(a);
}
END_TEST

START_TEST(refuses_over_2gib)
{
	/* The size is known before a byte is written: a tensor claiming 2 GiB
	 * (its data never touched) is refused with the way out. */
	Arena *a = arena_new();
	mkmodel(a, at(a, "small.onnx"), NULL, NULL, NULL);
	Model md;
	Err e;
	ck_assert_int_eq(model_load(&md, at(a, "small.onnx"), a, &e), 0);
	md.m->graph->initializer[0]->raw_data.len = (size_t)1 << 31;
	ck_assert_int_eq(model_save(&md, at(a, "huge.onnx"), 0, &e), -1);
	ck_assert_ptr_nonnull(strstr(e.msg, "exceeds the 2 GiB protobuf limit; use --external-data FILE"));
	ck_assert_int_eq(access(at(a, "huge.onnx"), F_OK), -1);
	unlink(at(a, "small.onnx"));
	arena_free(a);
}
END_TEST

/* A tensor filled at save time (graph.h's Later): byte i is i * 7 + 1,
 * or the fill fails. */
typedef struct {
	Later l;
	int fail, calls;
} Pat;

static int pat_fill(const Later *l, void *dst, Arena *tmp, Err *e)
{
	Pat *p = (Pat *)l;
	p->calls++;
	arena_alloc(tmp, 64); /* scratch is allowed, and emptied after */
	if (p->fail)
		return errf(e, "layer x: fill failed");
	unsigned char *b = dst;
	for (size_t i = 0; i < l->t->raw_data.len; i++)
		b[i] = (unsigned char)(i * 7 + 1);
	return 0;
}

static int drops;
static void count_drop(void *ud)
{
	(void)ud;
	drops++;
}

static int is_pat(const unsigned char *b, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (b[i] != (unsigned char)(i * 7 + 1))
			return 0;
	return 1;
}

/* Loads emb.onnx, indexes it into c (the caller's to g_fini) and adds a
 * later tensor "new" of n bytes, handed to the model. */
static Tensor *with_later(Arena *a, Model *md, Ctx *c, Pat *p, size_t n)
{
	Err e;
	mkmodel(a, at(a, "emb.onnx"), NULL, NULL, NULL);
	ck_assert_int_eq(model_load(md, at(a, "emb.onnx"), a, &e), 0);
	ck_assert_int_eq(g_init(c, md->m, a, &e), 0);
	int64_t dims[1] = { (int64_t)n / 4 };
	*p = (Pat){ .l.fill = pat_fill };
	Tensor *t = g_add_init_later(c, c->g, "new", ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, dims, 1, n, &p->l);
	ck_assert(g_is_later(t));
	size_t nb;
	ck_assert_ptr_null(g_tensor_data(t, &nb)); /* unknown until filled */
	md->later = c->later;
	md->nlater = c->nlater;
	md->drop = count_drop;
	return t;
}

/* The model saved at path has "new" holding the pattern's n bytes. */
static void saved_pat(Arena *a, const char *path, size_t n)
{
	Model mo;
	Err e;
	const void *d;
	size_t nb;
	ck_assert_int_eq(model_load(&mo, path, a, &e), 0);
	const Onnx__TensorProto *t = mo.m->graph->initializer[1];
	ck_assert_str_eq(t->name, "new");
	ck_assert_int_eq(model_tensor_data(&mo, t, &d, &nb, &e), 0);
	ck_assert(nb == n && is_pat(d, nb));
	model_close(&mo);
}

/* _i: 0 saved inline, 1 with --external-data, 2 and 3 the same with a
 * fill that fails: nothing is written. 9 MiB: the sources drop what they
 * read once on the way. */
START_TEST(later_filled_at_save)
{
	Arena *a = arena_new();
	Model md;
	Pat p;
	Err e;
	Ctx c;
	size_t n = 9 << 20;
	int ext = _i & 1, fail = _i >= 2;
	with_later(a, &md, &c, &p, n);
	g_fini(&c);
	p.fail = fail;
	drops = 0;
	const char *out = at(a, "later.onnx");
	int rc = ext ? model_save_as(&md, out, "later.bin", 0, &e) : model_save(&md, out, 0, &e);
	/* A fill's error names the input first, as a pass's does. */
	const char *want = arena_printf(a, "%s: layer x: fill failed", md.path);
	model_close(&md);
	if (fail) {
		ck_assert_int_eq(rc, -1);
		ck_assert_str_eq(e.msg, want);
		ck_assert_int_eq(access(out, F_OK), -1);
		ck_assert_int_eq(access(at(a, "later.bin"), F_OK), -1);
	} else {
		ck_assert_msg(rc == 0, "%s", e.msg);
		ck_assert_int_eq(p.calls, 1);
		ck_assert_int_eq(drops, 1);
		saved_pat(a, out, n);
	}
	unlink(out);
	unlink(at(a, "later.bin"));
	unlink(at(a, "emb.onnx"));
	arena_free(a);
}
END_TEST

/* A pass that reads a later tensor gets it filled then, and the save
 * writes those bytes without filling again. */
START_TEST(later_read_early)
{
	Arena *a = arena_new();
	Model md;
	Pat p;
	Err e;
	Ctx c;
	Tensor *t = with_later(a, &md, &c, &p, 4096);
	size_t nb;
	const void *d = g_tensor_bytes(&c, t, &nb, &e);
	ck_assert_ptr_nonnull(d);
	ck_assert_uint_eq(nb, 4096);
	ck_assert(is_pat(d, nb));
	ck_assert(!g_is_later(t));
	ck_assert_ptr_eq(g_tensor_data(t, &nb), d);
	g_fini(&c);
	ck_assert_int_eq(model_save(&md, at(a, "later.onnx"), 0, &e), 0);
	model_close(&md);
	ck_assert_int_eq(p.calls, 1);
	saved_pat(a, at(a, "later.onnx"), 4096);
	unlink(at(a, "later.onnx"));
	unlink(at(a, "emb.onnx"));
	arena_free(a);
}
END_TEST

static int entries(void)
{
	int n = 0;
	DIR *d = opendir(dir);
	for (struct dirent *de; (de = readdir(d));)
		n += strcmp(de->d_name, ".") && strcmp(de->d_name, "..");
	closedir(d);
	return n;
}

/* Both ways of making the temporary: O_TMPFILE, and the named mkstemp
 * fallback (which must clean up after itself on abort and on commit). */
START_TEST(afile_abort_and_mode)
{
	int flags = _i ? AFILE_NAMED : 0;
	Arena *a = arena_new();
	AFile f;
	Err e;
	put(at(a, "t.txt"), "old", 3);
	chmod(at(a, "t.txt"), 0604);
	ck_assert_int_eq(afile_open(&f, at(a, "t.txt"), flags, &e), 0);
	ck_assert_int_eq(entries(), _i ? 2 : 1); /* the named temporary shows */
	afile_write(&f, "new!", 4);
	afile_abort(&f);
	ck_assert_int_eq(entries(), 1);
	size_t n;
	ck_assert_mem_eq(get(a, at(a, "t.txt"), &n), "old", 3);
	ck_assert_int_eq(afile_open(&f, at(a, "t.txt"), flags, &e), 0);
	/* Bigger than the buffer: goes straight to the file. */
	size_t big = AFILE_BUF + 123;
	char *p = arena_alloc(a, big);
	memset(p, 'x', big);
	afile_write(&f, "new!", 4);
	afile_write(&f, p, big);
	ck_assert_int_eq(afile_commit(&f, &e), 0);
	unsigned char *q = get(a, at(a, "t.txt"), &n);
	ck_assert_uint_eq(n, big + 4);
	ck_assert_mem_eq(q, "new!xxx", 7);
	struct stat st;
	ck_assert_int_eq(stat(at(a, "t.txt"), &st), 0);
	ck_assert_int_eq(st.st_mode & 0777, 0604);
	ck_assert_int_eq(entries(), 1);
	unlink(at(a, "t.txt"));
	/* A new file: 0666 minus the umask, like any created file. */
	mode_t um = umask(022);
	ck_assert_int_eq(afile_open(&f, at(a, "n.txt"), flags, &e), 0);
	afile_write(&f, "n", 1);
	ck_assert_int_eq(afile_commit(&f, &e), 0);
	umask(um);
	ck_assert_int_eq(stat(at(a, "n.txt"), &st), 0);
	ck_assert_int_eq(st.st_mode & 0777, 0644);
	unlink(at(a, "n.txt"));
	ck_assert_int_eq(afile_open(&f, dir, 0, &e), -1); /* a folder */
	arena_free(a);
}
END_TEST

/* A reservation is a hint: the file ends where the writes did (a write
 * that falls short of the plan leaves no zeros past it). */
START_TEST(afile_reserve_keeps_size)
{
	Arena *a = arena_new();
	AFile f;
	Err e;
	ck_assert_int_eq(afile_open(&f, at(a, "r.bin"), 0, &e), 0);
	afile_write(&f, "ab", 2);
	afile_reserve(&f, 8 << 20);
	size_t big = AFILE_BUF + 5, n;
	char *p = arena_alloc(a, big);
	memset(p, 'r', big);
	afile_write(&f, p, big);
	ck_assert_int_eq(afile_commit(&f, &e), 0);
	unsigned char *q = get(a, at(a, "r.bin"), &n);
	ck_assert_uint_eq(n, big + 2);
	ck_assert_mem_eq(q, "abrr", 4);
	ck_assert_int_eq(q[n - 1], 'r');
	unlink(at(a, "r.bin"));
	arena_free(a);
}
END_TEST

/* afile_copy appends a file's range after what was written, through the
 * kernel (_i 0) or read and written (_i 1, as across file systems), in
 * more than one buffer's worth; a range past the source's end is -1. */
START_TEST(afile_copy_appends_a_range)
{
	Arena *a = arena_new();
	size_t big = 2 * AFILE_BUF + 77, n;
	unsigned char *src = arena_alloc(a, big);
	for (size_t i = 0; i < big; i++)
		src[i] = (unsigned char)(i * 7 + i / 4096);
	put(at(a, "src.bin"), src, big);
	int fd = open(at(a, "src.bin"), O_RDONLY);
	ck_assert_int_ge(fd, 0);
	AFile f;
	Err e;
	ck_assert_int_eq(afile_open(&f, at(a, "c.bin"), 0, &e), 0);
	f.readcopy = _i;
	afile_write(&f, "hd", 2);
	ck_assert_int_eq(afile_copy(&f, fd, 5, big - 10), 0);
	afile_write(&f, "tl", 2);
	ck_assert_uint_eq(f.written, big - 6);
	ck_assert_int_eq(afile_commit(&f, &e), 0);
	unsigned char *q = get(a, at(a, "c.bin"), &n);
	ck_assert_uint_eq(n, big - 6);
	ck_assert_mem_eq(q, "hd", 2);
	ck_assert_mem_eq(q + 2, src + 5, big - 10);
	ck_assert_mem_eq(q + n - 2, "tl", 2);
	ck_assert_int_eq(afile_open(&f, at(a, "c.bin"), 0, &e), 0);
	f.readcopy = _i;
	ck_assert_int_eq(afile_copy(&f, fd, big - 3, 10), -1);
	afile_abort(&f);
	close(fd);
	unlink(at(a, "src.bin"));
	unlink(at(a, "c.bin"));
	arena_free(a);
}
END_TEST

/* What the SIGBUS handler removes (afile_drop_all): the named temporary
 * of a file still open, not a file committed before, nor its target. */
START_TEST(afile_drop_all_removes_temporaries)
{
	Arena *a = arena_new();
	AFile f, g;
	Err e;
	put(at(a, "d1.txt"), "old", 3);
	ck_assert_int_eq(afile_open(&g, at(a, "d2.txt"), AFILE_NAMED, &e), 0);
	afile_write(&g, "g", 1);
	ck_assert_int_eq(afile_commit(&g, &e), 0);
	ck_assert_int_eq(afile_open(&f, at(a, "d1.txt"), AFILE_NAMED, &e), 0);
	afile_write(&f, "new", 3);
	ck_assert_int_eq(entries(), 3);
	afile_drop_all();
	ck_assert_int_eq(entries(), 2);
	size_t n;
	ck_assert_mem_eq(get(a, at(a, "d1.txt"), &n), "old", 3);
	ck_assert_mem_eq(get(a, at(a, "d2.txt"), &n), "g", 1);
	afile_abort(&f);
	ck_assert_int_eq(entries(), 2);
	unlink(at(a, "d1.txt"));
	unlink(at(a, "d2.txt"));
	arena_free(a);
}
END_TEST

static char *json(const char *s)
{
	static char buf[256];
	FILE *f = fmemopen(buf, sizeof buf, "w");
	json_str(f, s);
	fclose(f);
	return buf;
}

START_TEST(json_escapes)
{
	ck_assert_str_eq(json("a\"b\\c"), "\"a\\\"b\\\\c\"");
	ck_assert_str_eq(json("t\tn\n\x01"), "\"t\\tn\\n\\u0001\"");
	ck_assert_str_eq(json("caf\xc3\xa9"), "\"caf\xc3\xa9\"");
	ck_assert_str_eq(json("bad\xff\xc3"), "\"bad\\ufffd\\ufffd\"");
	ck_assert_str_eq(json("\xed\xa0\x80"), "\"\\ufffd\\ufffd\\ufffd\""); /* surrogate */
	ck_assert_str_eq(json(NULL), "null");
}
END_TEST

START_TEST(report_json_shape)
{
	int present[] = { 0, 1 }, inserted[] = { 2, 3 };
	LayerReport l = { .scope = "model.2", .experts = 4, .top_k = 2, .present = present, .npresent = 2,
	                  .inserted = inserted, .ninserted = 2, .convs_before = 7, .convs_after = 11,
	                  .map_maxdiff = 0.0 / 0.0, .repaired = 1 };
	Report r = { .layer = &l, .nlayer = 1, .damaged = 1, .changed = 1, .convs_before = 9, .convs_after = 13 };
	char buf[1024];
	FILE *f = fmemopen(buf, sizeof buf, "w");
	report_json(f, &r);
	fclose(f);
	ck_assert_ptr_nonnull(strstr(buf, "\"present\": [0, 1], \"inserted\": [2, 3]"));
	ck_assert_ptr_nonnull(strstr(buf, "\"map_maxdiff\": null")); /* NaN is not JSON */
	ck_assert_ptr_nonnull(strstr(buf, "\"damaged\": true"));
	f = fmemopen(buf, sizeof buf, "w");
	report_print(f, "m.onnx", &r, RUN_REPAIR, 0);
	fclose(f);
	ck_assert_str_eq(buf, "m.onnx: model.2: 4 experts, top-2; present 0,1, re-inserted 2,3; If removed 0; experts' Conv 7 -> 11\nm.onnx: Conv 9 -> 13\n");
	f = fmemopen(buf, sizeof buf, "w");
	report_print(f, "m.onnx", &r, RUN_CHECK, 0);
	fclose(f);
	ck_assert_str_eq(buf, "m.onnx: model.2: 4 experts, top-2; present 0,1, missing 2,3; If gating experts 0; experts' Conv 7\n");
}
END_TEST

/* What json_str writes, the strict parser reads back: every ASCII byte
 * intact, invalid UTF-8 as U+FFFD; and report_json is a valid object body. */
START_TEST(json_parses_back)
{
	Arena *a = arena_new();
	char in[160], buf[2048];
	for (int i = 1; i < 128; i++)
		in[i - 1] = (char)i;
	strcpy(in + 127, "\xc3\xa9\xff");
	FILE *f = fmemopen(buf, sizeof buf, "w");
	json_str(f, in);
	fclose(f);
	Err e;
	JVal *v = json_parse(buf, strlen(buf), a, &e);
	ck_assert_ptr_nonnull(v);
	ck_assert_int_eq(v->type, J_STR);
	ck_assert_mem_eq(v->s, in, 129);
	ck_assert_str_eq(v->s + 129, "\xef\xbf\xbd");

	int present[] = { 1 };
	LayerReport l[2] = { { .scope = "a\"b", .present = present, .npresent = 1 }, { .scope = NULL } };
	Report r = { .layer = l, .nlayer = 2 };
	f = fmemopen(buf, sizeof buf, "w");
	fputc('{', f);
	report_json(f, &r);
	fputc('}', f);
	fclose(f);
	v = json_parse(buf, strlen(buf), a, &e);
	ck_assert_msg(v != NULL, "%s: %s", e.msg, buf);
	ck_assert_int_eq(v->type, J_OBJ);
	ck_assert_str_eq(v->key[3], "layers");
	ck_assert_uint_eq(v->v[3]->n, 2);
	ck_assert_str_eq(v->v[3]->v[0]->v[0]->s, "a\"b");
	ck_assert_int_eq(v->v[3]->v[1]->v[0]->type, J_NULL);
	arena_free(a);
}
END_TEST

/* md->verify, a check running while the model is written: asked once,
 * before the commit, and a failure leaves nothing behind and is the error
 * the save reports, whatever else failed. */
static int verdicts;

static int check_fails(void *ud, Err *e)
{
	(void)ud;
	verdicts++;
	return errf(e, "in.onnx: node 'x' reads 'y', which nothing defines");
}

static int check_passes(void *ud, Err *e)
{
	(void)ud;
	(void)e;
	verdicts++;
	return 0;
}

static int files_in(const char *path)
{
	DIR *d = opendir(path);
	ck_assert_ptr_nonnull(d);
	int n = 0;
	for (struct dirent *x; (x = readdir(d));)
		n += x->d_name[0] != '.';
	closedir(d);
	return n;
}

START_TEST(verify_gates_the_commit)
{
	Arena *a = arena_new();
	mkmodel(a, at(a, "in.onnx"), NULL, NULL, NULL);
	Model md;
	Err e;
	struct stat st;
	ck_assert_int_eq(model_load(&md, at(a, "in.onnx"), a, &e), 0);
	verdicts = 0;
	md.verify = check_fails;
	ck_assert_int_eq(model_save(&md, at(a, "out.onnx"), 0, &e), -1);
	ck_assert_str_eq(e.msg, "in.onnx: node 'x' reads 'y', which nothing defines");
	ck_assert_int_eq(stat(at(a, "out.onnx"), &st), -1);
	ck_assert_int_eq(files_in(dir), 1);
	ck_assert_int_eq(verdicts, 1);
	/* Asked once: the next save has no check to wait for. */
	ck_assert_int_eq(model_save(&md, at(a, "out.onnx"), 0, &e), 0);
	ck_assert_int_eq(verdicts, 1);
	/* A save failing for its own reason gives way to the check. */
	md.verify = check_fails;
	ck_assert_int_eq(model_save(&md, at(a, "in.onnx"), 0, &e), -1);
	ck_assert_str_eq(e.msg, "in.onnx: node 'x' reads 'y', which nothing defines");
	/* Before the data file: nothing of it either. */
	md.verify = check_fails;
	ck_assert_int_eq(model_save_as(&md, at(a, "out2.onnx"), "out2.data", 0, &e), -1);
	ck_assert_str_eq(e.msg, "in.onnx: node 'x' reads 'y', which nothing defines");
	ck_assert_int_eq(files_in(dir), 2);
	md.verify = check_passes;
	ck_assert_int_eq(model_save_as(&md, at(a, "out2.onnx"), "out2.data", 0, &e), 0);
	ck_assert_int_eq(files_in(dir), 4);
	/* No save asked: model_close waits for the check. */
	md.verify = check_passes;
	model_close(&md);
	ck_assert_int_eq(verdicts, 5);
	unlink(at(a, "in.onnx"));
	unlink(at(a, "out.onnx"));
	unlink(at(a, "out2.onnx"));
	unlink(at(a, "out2.data"));
	arena_free(a);
}
END_TEST

/* Wire helpers for the zeros test: field tag, length-delimited field. */
static uint8_t *wire_varint(uint8_t *o, uint64_t v)
{
	for (; v >= 0x80; v >>= 7)
		*o++ = (uint8_t)(v | 0x80);
	*o++ = (uint8_t)v;
	return o;
}

static uint8_t *wire_field(uint8_t *o, unsigned num, const void *p, size_t n)
{
	o = wire_varint(o, (uint64_t)num << 3 | 2);
	o = wire_varint(o, n);
	memcpy(o, p, n);
	return o + n;
}

static size_t packed_tensor(Onnx__TensorProto *t, uint8_t *o)
{
	return onnx__tensor_proto__pack(t, o);
}

static void tensor(Onnx__TensorProto *t, const char *name, const uint8_t *raw, size_t n)
{
	static int64_t dims[1];
	onnx__tensor_proto__init(t);
	t->name = (char *)name, t->has_data_type = 1, t->data_type = 2;
	t->n_dims = 1, t->dims = dims, dims[0] = 0;
	t->has_raw_data = 1, t->raw_data.data = (uint8_t *)raw, t->raw_data.len = n;
}

static int in_zeros(const Model *md, const Onnx__TensorProto *t)
{
	return md->zeros && t->raw_data.data >= md->zeros && t->raw_data.data < md->zeros + md->nzeros;
}

/* Tensors of zeros (most of the file) are cut out of the wire before the
 * unpack and pointed at shared zeros: the model read is the one protobuf-c
 * reads from the file, byte for byte once packed, wherever the tensor sits
 * (initializer, Constant, a branch's Constant) and however the wire spells
 * it (a raw_data given twice, a tensor given in two parts that merge). */
START_TEST(zeros_cut_before_unpack)
{
	Arena *a = arena_new();
	enum { Z = 64 << 10 };
	uint8_t *zero = arena_alloc(a, Z), *one = arena_alloc(a, 4 * Z), *negz = arena_alloc(a, 8192);
	one[8191] = 1;
	for (size_t i = 3; i < 8192; i += 4)
		negz[i] = 0x80; /* -0.0f: zero as a float, not as bytes */
	Onnx__TensorProto tz, tone, tneg, tsmall, tc, tb, tr1, tr2;
	tensor(&tz, "z", zero, Z);
	tensor(&tone, "one", one, 8192);
	tensor(&tneg, "negz", negz, 8192);
	tensor(&tsmall, "small", zero, 1024);
	tensor(&tc, "c", zero, 32 << 10);
	tensor(&tb, "b", zero, 16 << 10);
	Onnx__TensorProto *inits[] = { &tz, &tone, &tneg, &tsmall };
	/* node Constant(value = c); node If(then_branch = { Constant(value = b) }) */
	Onnx__AttributeProto ac = ONNX__ATTRIBUTE_PROTO__INIT, ab = ac, ag = ac;
	ac.name = "value", ac.t = &tc, ac.has_type = 1, ac.type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__TENSOR;
	ab = ac, ab.t = &tb;
	Onnx__AttributeProto *pac = &ac, *pab = &ab, *pag = &ag;
	Onnx__NodeProto nc = ONNX__NODE_PROTO__INIT, nb = nc, ni = nc;
	char *oc[] = { "c_out" }, *ob[] = { "b_out" }, *ii[] = { "cond" }, *oi[] = { "i_out" };
	nc.op_type = "Constant", nc.n_output = 1, nc.output = oc, nc.n_attribute = 1, nc.attribute = &pac;
	nb = nc, nb.output = ob, nb.attribute = &pab;
	Onnx__NodeProto *pnb = &nb;
	Onnx__GraphProto branch = ONNX__GRAPH_PROTO__INIT;
	branch.name = "then", branch.n_node = 1, branch.node = &pnb;
	ag.name = "then_branch", ag.g = &branch, ag.has_type = 1, ag.type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__GRAPH;
	ni.op_type = "If", ni.n_input = 1, ni.input = ii, ni.n_output = 1, ni.output = oi, ni.n_attribute = 1, ni.attribute = &pag;
	Onnx__NodeProto *nodes[] = { &nc, &ni };
	Onnx__GraphProto g = ONNX__GRAPH_PROTO__INIT;
	g.name = "g", g.n_initializer = 4, g.initializer = inits, g.n_node = 2, g.node = nodes;
	size_t cap = 2 * Z + (256 << 10);
	uint8_t *gw = arena_alloc(a, cap), *o = gw + onnx__graph_proto__pack(&g, gw);
	/* Two more initializers, each one field given twice: "r1" first zeros
	 * then {1,2,3,4} (the last raw_data wins), "r2" the other way round,
	 * as two TensorProto parts that protobuf merges. */
	uint8_t *tw = arena_alloc(a, cap), four[4] = { 1, 2, 3, 4 };
	tensor(&tr1, "r1", zero, 8192);
	size_t k = packed_tensor(&tr1, tw);
	uint8_t *q = wire_field(tw + k, 9, four, 4);
	o = wire_field(o, 5, tw, (size_t)(q - tw));
	tensor(&tr2, "r2", four, 4);
	k = packed_tensor(&tr2, tw);
	tensor(&tr2, "r2", zero, 8192);
	k += packed_tensor(&tr2, tw + k);
	o = wire_field(o, 5, tw, k);
	uint8_t *mw = arena_alloc(a, cap + 16), *m = mw;
	*m++ = 0x08, *m++ = 8; /* ir_version 8 */
	m = wire_field(m, 7, gw, (size_t)(o - gw));
	size_t n = (size_t)(m - mw);
	put(at(a, "z.onnx"), mw, n);

	Model md;
	Err e;
	ck_assert_int_eq(model_load(&md, at(a, "z.onnx"), a, &e), 0);
	Onnx__GraphProto *lg = md.m->graph;
	ck_assert_uint_eq(lg->n_initializer, 6);
	ck_assert(in_zeros(&md, lg->initializer[0]));
	ck_assert_uint_eq(lg->initializer[0]->raw_data.len, Z);
	ck_assert(!in_zeros(&md, lg->initializer[1]) && !in_zeros(&md, lg->initializer[2]) && !in_zeros(&md, lg->initializer[3]));
	ck_assert(in_zeros(&md, lg->node[0]->attribute[0]->t));
	ck_assert(in_zeros(&md, lg->node[1]->attribute[0]->g->node[0]->attribute[0]->t));
	ck_assert_uint_eq(lg->initializer[4]->raw_data.len, 4);
	ck_assert(in_zeros(&md, lg->initializer[5]));
	/* Packed again, what protobuf-c reads from the file itself. */
	Onnx__ModelProto *ref = onnx__model_proto__unpack(NULL, n, mw);
	ck_assert_ptr_nonnull(ref);
	size_t nr = onnx__model_proto__get_packed_size(ref);
	ck_assert_uint_eq(onnx__model_proto__get_packed_size(md.m), nr);
	uint8_t *pr = arena_alloc(a, nr), *pm = arena_alloc(a, nr);
	onnx__model_proto__pack(ref, pr);
	onnx__model_proto__pack(md.m, pm);
	ck_assert_mem_eq(pr, pm, nr);
	onnx__model_proto__free_unpacked(ref, NULL);
	model_close(&md);
	ck_assert_ptr_null(md.zeros);

	/* Zeros not most of the file: nothing cut, the wire not copied. */
	tensor(&tone, "one", one, 4 * Z);
	g.n_node = 0;
	n = onnx__graph_proto__pack(&g, gw);
	m = mw;
	*m++ = 0x08, *m++ = 8;
	m = wire_field(m, 7, gw, n);
	put(at(a, "nz.onnx"), mw, (size_t)(m - mw));
	ck_assert_int_eq(model_load(&md, at(a, "nz.onnx"), a, &e), 0);
	ck_assert_ptr_null(md.zeros);
	ck_assert_uint_eq(md.m->graph->initializer[0]->raw_data.len, Z);
	model_close(&md);
	unlink(at(a, "z.onnx"));
	unlink(at(a, "nz.onnx"));
	arena_free(a);
}
END_TEST

int main(void)
{
	if (!mkdtemp(dir))
		return 99;
	Suite *s = suite_create("model");
	TCase *tc = tcase_create("model");
	tcase_add_test(tc, nul_in_a_name);
	tcase_add_test(tc, roundtrip_keeps_unknown_fields);
	tcase_add_test(tc, zeros_cut_before_unpack);
	tcase_add_test(tc, verify_gates_the_commit);
	tcase_add_test(tc, tensor_data_embedded_and_external);
	tcase_add_test(tc, save_elsewhere_copies_every_tensor);
	tcase_add_test(tc, refuses_over_2gib);
	tcase_add_loop_test(tc, later_filled_at_save, 0, 4);
	tcase_add_test(tc, later_read_early);
	tcase_add_loop_test(tc, afile_abort_and_mode, 0, 2);
	tcase_add_test(tc, afile_reserve_keeps_size);
	tcase_add_loop_test(tc, afile_copy_appends_a_range, 0, 2);
	tcase_add_test(tc, afile_drop_all_removes_temporaries);
	tcase_add_test(tc, json_escapes);
	tcase_add_test(tc, report_json_shape);
	tcase_add_test(tc, json_parses_back);
	suite_add_tcase(s, tc);
	SRunner *r = srunner_create(s);
	srunner_run_all(r, CK_NORMAL);
	int nf = srunner_ntests_failed(r);
	srunner_free(r);
	rmdir(dir);
	return nf ? EXIT_FAILURE : EXIT_SUCCESS;
}
