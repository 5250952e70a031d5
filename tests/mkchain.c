/* Writes to stdout an ONNX model whose graph is one chain of N nodes,
 * too large to commit (4 MB) but quick to make; tests/bad.sh runs it.
 *   mkchain ids N   TopK(x, k) -> indices -> N x Identity -> Cast -> y
 *   mkchain relu N  x -> N x Relu -> Identity -> y
 * The protobuf is written by hand from the ONNX schema's field numbers, so
 * the tool's own writer is not what makes its input. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
	unsigned char *b;
	size_t n, cap;
} Buf;

static void put(Buf *o, const void *p, size_t n)
{
	if (o->n + n > o->cap) {
		o->cap = (o->n + n) * 2 + 64;
		o->b = realloc(o->b, o->cap);
		if (!o->b) {
			perror("mkchain");
			exit(1);
		}
	}
	memcpy(o->b + o->n, p, n);
	o->n += n;
}

static void varint(Buf *o, unsigned long long v)
{
	unsigned char c;
	while (v >= 128) {
		c = (unsigned char)(v | 128);
		put(o, &c, 1);
		v >>= 7;
	}
	c = (unsigned char)v;
	put(o, &c, 1);
}

static void tag(Buf *o, unsigned field, unsigned wire)
{
	varint(o, field << 3 | wire);
}

static void bytes(Buf *o, unsigned field, const void *p, size_t n)
{
	tag(o, field, 2);
	varint(o, n);
	put(o, p, n);
}

static void str(Buf *o, unsigned field, const char *s)
{
	bytes(o, field, s, strlen(s));
}

static void sub(Buf *o, unsigned field, Buf *m)
{
	bytes(o, field, m->b, m->n);
	m->n = 0;
}

/* NodeProto: input 1, output 2, name 3, op_type 4, attribute 5. */
static void node(Buf *g, const char *op, const char *in0, const char *in1, const char *out0,
		 const char *out1, const char *name, Buf *attr)
{
	Buf n = { 0 };
	if (in0)
		str(&n, 1, in0);
	if (in1)
		str(&n, 1, in1);
	str(&n, 2, out0);
	if (out1)
		str(&n, 2, out1);
	if (name)
		str(&n, 3, name);
	str(&n, 4, op);
	if (attr && attr->n)
		sub(&n, 5, attr);
	sub(g, 1, &n);
	free(n.b);
}

/* ValueInfoProto of a float tensor, [1, 4] or of unknown shape. */
static void value(Buf *g, unsigned field, const char *name, int shaped)
{
	Buf v = { 0 }, t = { 0 }, tt = { 0 }, sh = { 0 }, d = { 0 };
	str(&v, 1, name);
	tag(&tt, 1, 0);
	varint(&tt, 1); /* elem_type FLOAT */
	if (shaped) {
		for (int i = 0; i < 2; i++) {
			tag(&d, 1, 0);
			varint(&d, i ? 4 : 1);
			sub(&sh, 1, &d);
		}
		sub(&tt, 2, &sh);
	}
	sub(&t, 1, &tt);
	sub(&v, 2, &t);
	sub(g, field, &v);
	free(v.b), free(t.b), free(tt.b), free(sh.b), free(d.b);
}

int main(int argc, char **argv)
{
	long n = argc == 3 ? strtol(argv[2], NULL, 10) : 0;
	int ids = argc == 3 && !strcmp(argv[1], "ids");
	if (n < 1 || (!ids && strcmp(argv[1], "relu"))) {
		fprintf(stderr, "usage: mkchain ids|relu N > model.onnx\n");
		return 2;
	}
	Buf g = { 0 }, m = { 0 }, a = { 0 }, t = { 0 };
	char in[32], out[32];
	str(&g, 2, "g");
	if (ids) {
		node(&g, "TopK", "x", "k", "tv", "a0", "/m/router/TopK", NULL);
	}
	for (long i = 0; i < n; i++) {
		snprintf(in, sizeof in, "a%ld", i);
		snprintf(out, sizeof out, "a%ld", i + 1);
		node(&g, ids ? "Identity" : "Relu", ids || i ? in : "x", NULL, out, NULL, NULL, NULL);
	}
	snprintf(in, sizeof in, "a%ld", n);
	if (ids) {
		str(&a, 1, "to"); /* AttributeProto: name 1, i 3, type 20 (INT = 2) */
		tag(&a, 3, 0);
		varint(&a, 1);
		tag(&a, 20, 0);
		varint(&a, 2);
	}
	node(&g, ids ? "Cast" : "Identity", in, NULL, "y", NULL, NULL, &a);
	if (ids) { /* initializer k = [2] (int64): dims 1, data_type 2, name 8, raw_data 9 */
		const unsigned char two[8] = { 2 };
		tag(&t, 1, 0);
		varint(&t, 1);
		tag(&t, 2, 0);
		varint(&t, 7);
		str(&t, 8, "k");
		bytes(&t, 9, two, 8);
		sub(&g, 5, &t);
	}
	value(&g, 11, "x", 1);
	value(&g, 12, "y", 1);
	tag(&m, 1, 0);
	varint(&m, 8); /* ir_version */
	sub(&m, 7, &g);
	Buf op = { 0 };
	tag(&op, 2, 0);
	varint(&op, 18); /* opset 18 */
	sub(&m, 8, &op);
	int bad = fwrite(m.b, 1, m.n, stdout) != m.n || fflush(stdout) != 0;
	free(g.b), free(m.b), free(a.b), free(t.b), free(op.b);
	if (bad) {
		perror("mkchain");
		return 1;
	}
	return 0;
}
