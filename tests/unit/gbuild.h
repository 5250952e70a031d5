/* Tiny ONNX models built by hand for the unit tests, written like a
 * netlist:
 *
 *   B b; b_new(&b, 17);
 *   b_in(&b, NULL, "x", FLOAT, "?,3,32,32");        // '?' is a dim_param
 *   b_init(&b, NULL, "w", FLOAT, "8,3,3,3", NULL);   // zero data
 *   b_node(&b, NULL, "Conv", "x,w", "y", "pads=[1,1,1,1] strides=[2,2]");
 *   b_index(&b);                                     // g_init + g_infer
 *
 * Attributes: name=3 (int), name=[1,2] (ints), name=f:1.5 (float),
 * name=fs:[1,2] (floats), name=s:TEXT (string), name=t:ELEM:DIMS:V,V
 * (tensor: element type number, dims "2,3" or "" for a scalar, integer or
 * float values). Graph NULL means the main graph. Header-only, like
 * testutil.h. */
#ifndef GBUILD_H
#define GBUILD_H
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "graph.h"
#include "infer.h"

enum { FLOAT = 1, UINT8 = 2, INT8 = 3, INT32 = 6, INT64 = 7, BOOL = 9, FLOAT16 = 10, DOUBLE = 11 };

typedef struct {
	Arena *a;
	Onnx__ModelProto *m;
	Ctx c;
	Err e;
	int indexed;
} B;

/* Splits s on sep into at most max pieces (copies in the arena). */
static inline size_t b_split(Arena *a, const char *s, char sep, char **out, size_t max)
{
	size_t n = 0;
	if (!s || !*s)
		return 0;
	for (;;) {
		const char *e = strchr(s, sep);
		size_t len = e ? (size_t)(e - s) : strlen(s);
		ck_assert_uint_lt(n, max);
		out[n] = arena_alloc(a, len + 1);
		memcpy(out[n], s, len);
		n++;
		if (!e)
			return n;
		s = e + 1;
	}
}

static inline Onnx__GraphProto *b_graph(B *b, const char *name)
{
	Onnx__GraphProto *g = arena_alloc(b->a, sizeof *g);
	onnx__graph_proto__init(g);
	g->name = arena_strdup(b->a, name);
	return g;
}

static inline void b_new(B *b, int opset)
{
	memset(b, 0, sizeof *b);
	b->a = arena_new();
	b->m = arena_alloc(b->a, sizeof *b->m);
	onnx__model_proto__init(b->m);
	b->m->has_ir_version = 1;
	b->m->ir_version = 8;
	b->m->graph = b_graph(b, "main");
	Onnx__OperatorSetIdProto *o = arena_alloc(b->a, sizeof *o);
	onnx__operator_set_id_proto__init(o);
	o->domain = "";
	o->has_version = 1;
	o->version = opset;
	b->m->opset_import = arena_alloc(b->a, sizeof *b->m->opset_import);
	b->m->opset_import[0] = o;
	b->m->n_opset_import = 1;
}

static inline void b_free(B *b)
{
	if (b->indexed)
		g_fini(&b->c);
	arena_free(b->a);
}

/* Appends to a protobuf array, doubling its capacity at powers of two
 * (the capacity is the next power of two of the count). */
#define B_PUSH(a, arr, n, x) do { \
		if (((n) & ((n) - 1)) == 0) \
			(arr) = arena_grow((a), (arr), (n) * sizeof *(arr), ((n) ? 2 * (n) : 1) * sizeof *(arr)); \
		(arr)[(n)++] = (x); \
	} while (0)

/* A tensor-typed ValueInfo; shape NULL: none, "": a scalar. */
static inline Onnx__ValueInfoProto *b_vi(B *b, const char *name, int elem, const char *shape)
{
	Onnx__ValueInfoProto *v = arena_alloc(b->a, sizeof *v);
	onnx__value_info_proto__init(v);
	v->name = arena_strdup(b->a, name);
	Onnx__TypeProto *t = arena_alloc(b->a, sizeof *t);
	onnx__type_proto__init(t);
	Onnx__TypeProto__Tensor *tt = arena_alloc(b->a, sizeof *tt);
	onnx__type_proto__tensor__init(tt);
	tt->has_elem_type = elem != 0;
	tt->elem_type = elem;
	if (shape) {
		Onnx__TensorShapeProto *s = arena_alloc(b->a, sizeof *s);
		onnx__tensor_shape_proto__init(s);
		char *d[64];
		s->n_dim = b_split(b->a, shape, ',', d, 64);
		s->dim = arena_alloc(b->a, (s->n_dim + 1) * sizeof *s->dim);
		for (size_t i = 0; i < s->n_dim; i++) {
			s->dim[i] = arena_alloc(b->a, sizeof **s->dim);
			onnx__tensor_shape_proto__dimension__init(s->dim[i]);
			if (d[i][0] == '?') {
				s->dim[i]->value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM;
				s->dim[i]->dim_param = "N";
			} else {
				s->dim[i]->value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE;
				s->dim[i]->dim_value = atoll(d[i]);
			}
		}
		tt->shape = s;
	}
	t->value_case = ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE;
	t->tensor_type = tt;
	v->type = t;
	return v;
}

static inline void b_in(B *b, Onnx__GraphProto *g, const char *name, int elem, const char *shape)
{
	g = g ? g : b->m->graph;
	B_PUSH(b->a, g->input, g->n_input, b_vi(b, name, elem, shape));
}

static inline void b_out(B *b, Onnx__GraphProto *g, const char *name, int elem, const char *shape)
{
	g = g ? g : b->m->graph;
	B_PUSH(b->a, g->output, g->n_output, b_vi(b, name, elem, shape));
}

static inline void b_vinfo(B *b, Onnx__GraphProto *g, const char *name, int elem, const char *shape)
{
	g = g ? g : b->m->graph;
	B_PUSH(b->a, g->value_info, g->n_value_info, b_vi(b, name, elem, shape));
}

/* A tensor with raw little-endian data: the given values (integers, or
 * floats for float types), zeros when vals is NULL. */
static inline Tensor *b_tensor(B *b, const char *name, int elem, const char *dims, const char *vals)
{
	Tensor *t = arena_alloc(b->a, sizeof *t);
	onnx__tensor_proto__init(t);
	t->name = arena_strdup(b->a, name);
	t->has_data_type = 1;
	t->data_type = elem;
	char *d[64], *v[4096];
	t->n_dims = b_split(b->a, dims, ',', d, 64);
	t->dims = arena_alloc(b->a, (t->n_dims + 1) * sizeof *t->dims);
	int64_t n = 1;
	for (size_t i = 0; i < t->n_dims; i++)
		n *= (t->dims[i] = atoll(d[i]));
	size_t es = elem_size(elem);
	ck_assert_uint_gt(es, 0);
	t->has_raw_data = 1;
	t->raw_data.len = (size_t)n * es;
	t->raw_data.data = arena_alloc(b->a, t->raw_data.len + 1);
	size_t nv = b_split(b->a, vals, ',', v, 4096);
	ck_assert(nv == 0 || nv == (size_t)n);
	for (size_t i = 0; i < nv; i++) {
		unsigned char *p = t->raw_data.data + i * es;
		if (elem == FLOAT) {
			float f = strtof(v[i], NULL);
			memcpy(p, &f, 4);
		} else if (elem == DOUBLE) {
			double f = strtod(v[i], NULL);
			memcpy(p, &f, 8);
		} else {
			int64_t x = atoll(v[i]);
			memcpy(p, &x, es); /* little-endian */
		}
	}
	return t;
}

static inline Tensor *b_init(B *b, Onnx__GraphProto *g, const char *name, int elem, const char *dims, const char *vals)
{
	g = g ? g : b->m->graph;
	Tensor *t = b_tensor(b, name, elem, dims, vals);
	B_PUSH(b->a, g->initializer, g->n_initializer, t);
	return t;
}

static inline Onnx__AttributeProto *b_attr(B *b, Node *n, const char *name)
{
	Onnx__AttributeProto *a = arena_alloc(b->a, sizeof *a);
	onnx__attribute_proto__init(a);
	a->name = arena_strdup(b->a, name);
	a->has_type = 1;
	B_PUSH(b->a, n->attribute, n->n_attribute, a);
	return a;
}

static inline void b_attr_g(B *b, Node *n, const char *name, Onnx__GraphProto *g)
{
	Onnx__AttributeProto *a = b_attr(b, n, name);
	a->type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__GRAPH;
	a->g = g;
}

/* "[1,2]" -> its numbers, as strings. */
static inline size_t b_list(B *b, const char *s, char **out)
{
	size_t n = strlen(s);
	ck_assert(n >= 2 && s[0] == '[' && s[n - 1] == ']');
	char *in = arena_alloc(b->a, n);
	memcpy(in, s + 1, n - 2);
	return b_split(b->a, in, ',', out, 256);
}

static inline Node *b_node(B *b, Onnx__GraphProto *g, const char *op, const char *ins, const char *outs, const char *attrs)
{
	g = g ? g : b->m->graph;
	Node *n = arena_alloc(b->a, sizeof *n);
	onnx__node_proto__init(n);
	n->op_type = arena_strdup(b->a, op);
	char *v[256];
	/* "" between commas: an omitted optional input */
	n->n_input = b_split(b->a, ins, ',', v, 256);
	n->input = arena_dup(b->a, v, (n->n_input + 1) * sizeof *v);
	n->n_output = b_split(b->a, outs, ',', v, 256);
	n->output = arena_dup(b->a, v, (n->n_output + 1) * sizeof *v);
	n->name = arena_printf(b->a, "%s_%s", op, n->n_output ? n->output[0] : "");
	char *at[64];
	size_t na = b_split(b->a, attrs, ' ', at, 64);
	for (size_t i = 0; i < na; i++) {
		char *eq = strchr(at[i], '=');
		ck_assert_ptr_nonnull(eq);
		*eq = 0;
		const char *val = eq + 1;
		Onnx__AttributeProto *a = b_attr(b, n, at[i]);
		char *l[256];
		if (!strncmp(val, "s:", 2)) {
			a->type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRING;
			a->has_s = 1;
			a->s.data = (uint8_t *)arena_strdup(b->a, val + 2);
			a->s.len = strlen(val + 2);
		} else if (!strncmp(val, "f:", 2)) {
			a->type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOAT;
			a->has_f = 1;
			a->f = strtof(val + 2, NULL);
		} else if (!strncmp(val, "fs:", 3)) {
			a->type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOATS;
			a->n_floats = b_list(b, val + 3, l);
			a->floats = arena_alloc(b->a, (a->n_floats + 1) * sizeof *a->floats);
			for (size_t k = 0; k < a->n_floats; k++)
				a->floats[k] = strtof(l[k], NULL);
		} else if (!strncmp(val, "t:", 2)) {
			char *p[3];
			/* t:ELEM:DIMS:VALUES, DIMS and VALUES possibly empty */
			char *s = arena_strdup(b->a, val + 2), *c1 = strchr(s, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
			ck_assert(c1 && c2);
			*c1 = *c2 = 0;
			p[0] = s, p[1] = c1 + 1, p[2] = c2 + 1;
			a->type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__TENSOR;
			a->t = b_tensor(b, "", atoi(p[0]), p[1], p[2]);
		} else if (val[0] == '[') {
			a->type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INTS;
			a->n_ints = b_list(b, val, l);
			a->ints = arena_alloc(b->a, (a->n_ints + 1) * sizeof *a->ints);
			for (size_t k = 0; k < a->n_ints; k++)
				a->ints[k] = atoll(l[k]);
		} else {
			a->type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT;
			a->has_i = 1;
			a->i = atoll(val);
		}
	}
	B_PUSH(b->a, g->node, g->n_node, n);
	return n;
}

/* An int64 Constant node: b_const(b, g, "name", "2", "3,4") or a scalar
 * with dims "". */
static inline Node *b_const(B *b, Onnx__GraphProto *g, const char *out, const char *dims, const char *vals)
{
	return b_node(b, g, "Constant", "", out, arena_printf(b->a, "value=t:7:%s:%s", dims, vals));
}

/* Index (g_init) and infer; returns g_init's status. */
static inline int b_index(B *b)
{
	int rc = g_init(&b->c, b->m, b->a, &b->e);
	b->indexed = 1;
	if (rc == 0)
		ck_assert_int_eq(g_infer(&b->c, &b->e), 0);
	return rc;
}

/* The inferred type of a main-graph value, as text ("float[1,3,?]={...}"). */
static inline const char *b_ty(B *b, const char *name)
{
	return ty_str(b->a, g_ty(b->c.g, name));
}

#define ck_ty(b, name, want) ck_assert_str_eq(b_ty((b), (name)), (want))

#endif
