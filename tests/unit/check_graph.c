/* The graph core: index, names, dead-node elimination, stable sort, the
 * checker, module-path matching, and rank inference. Graphs are built
 * through the same mutation API the passes use. */
#include <check.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph.h"
#include "infer.h"
#include "moe.h"
#include "testutil.h"

typedef struct {
	Arena *a;
	Ctx c;
	Err e;
} T;

static Onnx__ValueInfoProto *vi(Arena *a, const char *name, int rank)
{
	Onnx__ValueInfoProto *v = arena_alloc(a, sizeof *v);
	onnx__value_info_proto__init(v);
	v->name = arena_strdup(a, name);
	Onnx__TypeProto *t = arena_alloc(a, sizeof *t);
	onnx__type_proto__init(t);
	Onnx__TypeProto__Tensor *tt = arena_alloc(a, sizeof *tt);
	onnx__type_proto__tensor__init(tt);
	tt->has_elem_type = 1;
	tt->elem_type = 1;
	Onnx__TensorShapeProto *s = arena_alloc(a, sizeof *s);
	onnx__tensor_shape_proto__init(s);
	s->n_dim = (size_t)rank;
	s->dim = arena_alloc(a, (size_t)rank * sizeof *s->dim + 1);
	for (int i = 0; i < rank; i++) {
		s->dim[i] = arena_alloc(a, sizeof **s->dim);
		onnx__tensor_shape_proto__dimension__init(s->dim[i]);
		s->dim[i]->value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE;
		s->dim[i]->dim_value = 2;
	}
	tt->shape = s;
	t->value_case = ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE;
	t->tensor_type = tt;
	v->type = t;
	return v;
}

/* A model with input x (rank 4) and output y, opset 17. */
static void mk(T *t)
{
	t->a = arena_new();
	Arena *a = t->a;
	Onnx__ModelProto *m = arena_alloc(a, sizeof *m);
	onnx__model_proto__init(m);
	Onnx__GraphProto *g = arena_alloc(a, sizeof *g);
	onnx__graph_proto__init(g);
	m->graph = g;
	Onnx__OperatorSetIdProto *o = arena_alloc(a, sizeof *o);
	onnx__operator_set_id_proto__init(o);
	o->domain = "";
	o->has_version = 1;
	o->version = 17;
	m->opset_import = arena_alloc(a, sizeof *m->opset_import);
	m->opset_import[0] = o;
	m->n_opset_import = 1;
	g->input = arena_alloc(a, sizeof *g->input);
	g->input[0] = vi(a, "x", 4);
	g->n_input = 1;
	g->output = arena_alloc(a, sizeof *g->output);
	g->output[0] = vi(a, "y", 4);
	g->n_output = 1;
	ck_assert_int_eq(g_init(&t->c, m, a, &t->e), 0);
}

static Node *add(T *t, const char *op, const char *name, const char *in0, const char *in1, const char *out)
{
	const char *in[] = { in0, in1 };
	return g_add_node(&t->c, t->c.g, op, name, in, in1 ? 2 : 1, &out, 1);
}

static const char *names(T *t)
{
	char *s = arena_alloc(t->a, 1024);
	Onnx__GraphProto *g = t->c.m->graph;
	for (size_t i = 0; i < g->n_node; i++)
		strcat(strcat(s, i ? " " : ""), g->node[i]->name);
	return s;
}


START_TEST(fresh_names_are_unique)
{
	T t;
	mk(&t);
	add(&t, "Relu", "r", "x", NULL, "y");
	g_reindex(&t.c, &t.e);
	const char *a = g_fresh(&t.c, "y"), *b = g_fresh(&t.c, "y"), *c = g_fresh(&t.c, "new");
	ck_assert_str_ne(a, "y");
	ck_assert_str_ne(a, b);
	ck_assert_str_eq(c, "new");
	ck_assert_str_ne(g_fresh(&t.c, "r"), "r"); /* node names count too */
	g_fini(&t.c);
	arena_free(t.a);
}
END_TEST

START_TEST(dce_keeps_outputs_and_drops_unread_initializers)
{
	T t;
	mk(&t);
	int64_t one = 1;
	g_add_init_i64(&t.c, t.c.g, "dead_init", &one, 1, 0);
	g_add_init_i64(&t.c, t.c.g, "live_init", &one, 1, 0);
	add(&t, "Relu", "a", "x", NULL, "a_out");
	add(&t, "Relu", "dead", "x", NULL, "dead_out");
	add(&t, "Reshape", "b", "a_out", "live_init", "y");
	g_reindex(&t.c, &t.e);
	ck_assert_uint_eq(g_dce(&t.c), 1);
	ck_assert_str_eq(names(&t), "a b");
	ck_assert_uint_eq(t.c.m->graph->n_initializer, 1);
	ck_assert_str_eq(t.c.m->graph->initializer[0]->name, "live_init");
	/* Walks over initializers find their values by position. */
	ck_assert_ptr_eq(g_init_at(t.c.g, 0), g_val(t.c.g, "live_init"));
	ck_assert_uint_eq(t.c.g->nival, 1);
	g_add_init_i64(&t.c, t.c.g, "later_init", &one, 1, 0);
	ck_assert_ptr_eq(g_init_at(t.c.g, 1), g_val(t.c.g, "later_init"));
	t.c.m->graph->initializer[0] = t.c.m->graph->initializer[1]; /* behind the API's back */
	ck_assert_ptr_eq(g_init_at(t.c.g, 0), g_val(t.c.g, "later_init"));
	g_fini(&t.c);
	arena_free(t.a);
}
END_TEST

/* Weights listed as graph inputs too (keep_initializers_as_inputs): one
 * nothing reads goes with its input, or the input would be left without
 * a default; a plain input nothing reads is the model's interface and
 * stays. */
START_TEST(dce_drops_the_input_of_a_dropped_initializer)
{
	T t;
	mk(&t);
	Arena *a = t.a;
	Onnx__GraphProto *gp = t.c.m->graph;
	int64_t one = 1;
	g_add_init_i64(&t.c, t.c.g, "w_dead", &one, 1, 0);
	g_add_init_i64(&t.c, t.c.g, "w_live", &one, 1, 0);
	gp->input = arena_grow(a, gp->input, gp->n_input * sizeof *gp->input, (gp->n_input + 3) * sizeof *gp->input);
	gp->input[gp->n_input++] = vi(a, "w_dead", 1);
	gp->input[gp->n_input++] = vi(a, "w_live", 1);
	gp->input[gp->n_input++] = vi(a, "unused", 4);
	add(&t, "Reshape", "b", "x", "w_live", "y");
	ck_assert_int_eq(g_reindex(&t.c, &t.e), 0);
	g_dce(&t.c);
	ck_assert_uint_eq(gp->n_initializer, 1);
	ck_assert_uint_eq(gp->n_input, 3);
	ck_assert_str_eq(gp->input[0]->name, "x");
	ck_assert_str_eq(gp->input[1]->name, "w_live");
	ck_assert_str_eq(gp->input[2]->name, "unused");
	ck_assert_int_eq(g_refresh(&t.c, &t.e), 0);
	ck_assert_int_eq(g_check(&t.c, &t.e), 0);
	g_fini(&t.c);
	arena_free(t.a);
}
END_TEST

/* Walks read inputs through the index's memo of them (g_input): every
 * mutation that changes an input must show there at once, or dead-node
 * elimination would keep what nothing reads any more. */
START_TEST(inputs_follow_mutations)
{
	T t;
	mk(&t);
	Node *a = add(&t, "Relu", "a", "x", NULL, "a_out");
	Node *b = add(&t, "Relu", "b", "x", NULL, "b_out");
	Node *s = add(&t, "Add", "s", "a_out", "b_out", "y");
	g_reindex(&t.c, &t.e);
	ck_assert_ptr_eq(g_input(&t.c, s, 0)->def, a);
	ck_assert_ptr_eq(g_output(&t.c, s, 0), g_val(t.c.g, "y"));
	g_set_input(&t.c, s, 0, "b_out");
	ck_assert_ptr_eq(g_input(&t.c, s, 0)->def, b);
	ck_assert_uint_eq(g_dce(&t.c), 1);
	ck_assert_str_eq(names(&t), "b s");
	g_reindex(&t.c, &t.e);
	ck_assert_ptr_eq(g_input(&t.c, s, 1)->def, b);
	g_replace_uses(&t.c, "b_out", "x");
	ck_assert(g_input(&t.c, s, 0)->isin && g_input(&t.c, s, 1)->isin);
	ck_assert_uint_eq(g_dce(&t.c), 1);
	ck_assert_str_eq(names(&t), "s");
	/* A renamed output is the new name's, at once. */
	g_rename_output(&t.c, s, 0, "y2");
	ck_assert_ptr_eq(g_output(&t.c, s, 0), g_val(t.c.g, "y2"));
	ck_assert_ptr_eq(g_val(t.c.g, "y2")->def, s);
	ck_assert_ptr_null(g_val(t.c.g, "y")->def);
	g_fini(&t.c);
	arena_free(t.a);
}
END_TEST

START_TEST(toposort_is_stable)
{
	T t;
	mk(&t);
	add(&t, "Relu", "p", "x", NULL, "p_out");
	add(&t, "Add", "sum", "p_out", "late_out", "y"); /* reads a value produced later */
	add(&t, "Relu", "q", "x", NULL, "q_out");
	add(&t, "Relu", "late", "q_out", NULL, "late_out");
	g_reindex(&t.c, &t.e);
	ck_assert_int_ne(g_check(&t.c, &t.e), 0);
	ck_assert(strstr(t.e.msg, "before node 'late' produces it"));
	ck_assert_int_eq(g_toposort(&t.c, t.c.g, &t.e), 0);
	ck_assert_str_eq(names(&t), "p q late sum");
	g_reindex(&t.c, &t.e);
	ck_assert_int_eq(g_check(&t.c, &t.e), 0);
	/* Already sorted: unchanged. */
	ck_assert_int_eq(g_toposort(&t.c, t.c.g, &t.e), 0);
	ck_assert_str_eq(names(&t), "p q late sum");
	/* Inference walks a sorted graph in its order: any edit that could
	 * break the order says so. */
	ck_assert(g_is_sorted(&t.c, t.c.g));
	Node *r = add(&t, "Relu", "r", "x", NULL, "r_out");
	ck_assert(!g_is_sorted(&t.c, t.c.g));
	ck_assert_int_eq(g_toposort(&t.c, t.c.g, &t.e), 0);
	ck_assert(g_is_sorted(&t.c, t.c.g));
	g_set_input(&t.c, r, 0, "p_out");
	ck_assert(!g_is_sorted(&t.c, t.c.g));
	ck_assert_int_eq(g_toposort(&t.c, t.c.g, &t.e), 0);
	g_rename_output(&t.c, r, 0, "r2");
	ck_assert(!g_is_sorted(&t.c, t.c.g));
	g_reindex(&t.c, &t.e); /* a new index knows no order */
	ck_assert(!g_is_sorted(&t.c, t.c.g));
	g_fini(&t.c);
	arena_free(t.a);
}
END_TEST

START_TEST(cycle_is_reported)
{
	T t;
	mk(&t);
	add(&t, "Add", "a", "x", "b_out", "a_out");
	add(&t, "Relu", "b", "a_out", NULL, "b_out");
	add(&t, "Relu", "c", "b_out", NULL, "y");
	g_reindex(&t.c, &t.e);
	ck_assert_int_ne(g_toposort(&t.c, t.c.g, &t.e), 0);
	ck_assert(strstr(t.e.msg, "cycle"));
	g_fini(&t.c);
	arena_free(t.a);
}
END_TEST

START_TEST(two_producers_and_undefined_inputs)
{
	T t;
	mk(&t);
	add(&t, "Relu", "a", "x", NULL, "y");
	add(&t, "Relu", "b", "x", NULL, "y");
	ck_assert_int_ne(g_reindex(&t.c, &t.e), 0);
	ck_assert(strstr(t.e.msg, "two producers"));
	g_fini(&t.c);
	arena_free(t.a);

	mk(&t);
	add(&t, "Add", "a", "x", "nowhere", "y");
	g_reindex(&t.c, &t.e);
	ck_assert_int_ne(g_check(&t.c, &t.e), 0);
	ck_assert_str_eq(t.e.msg, "node 'a' reads 'nowhere', which nothing defines");
	g_fini(&t.c);
	arena_free(t.a);
}
END_TEST

START_TEST(undeclared_domain)
{
	T t;
	mk(&t);
	Node *n = add(&t, "Relu", "a", "x", NULL, "y");
	n->domain = "com.example";
	g_reindex(&t.c, &t.e);
	ck_assert_int_ne(g_check(&t.c, &t.e), 0);
	ck_assert(strstr(t.e.msg, "domain 'com.example'"));
	g_fini(&t.c);
	arena_free(t.a);
}
END_TEST

START_TEST(rank_inference)
{
	T t;
	mk(&t);
	int64_t ax = 1, shp[3] = { -1, 1, 1 };
	const char *axes = g_add_init_i64(&t.c, t.c.g, "axes", &ax, 1, 0)->name;
	const char *shape = g_add_init_i64(&t.c, t.c.g, "shape", shp, 3, 0)->name;
	add(&t, "Unsqueeze", "u", "x", axes, "u_out");
	add(&t, "Reshape", "r", "x", shape, "r_out");
	add(&t, "Shape", "s", "x", NULL, "s_out");
	add(&t, "Reshape", "r2", "r_out", "s_out", "r2_out");
	add(&t, "Mul", "m", "x", "x", "y");
	ck_assert_int_eq(g_reindex(&t.c, &t.e), 0);
	ck_assert_int_eq(g_infer(&t.c, &t.e), 0);
	ck_assert_int_eq(g_ty_rank(t.c.g, "x"), 4);
	ck_assert_int_eq(g_ty_rank(t.c.g, "u_out"), 5);
	ck_assert_int_eq(g_ty_rank(t.c.g, "r_out"), 3);
	ck_assert_int_eq(g_ty_rank(t.c.g, "r2_out"), 4); /* Reshape to Shape(x) */
	ck_assert_int_eq(g_ty_rank(t.c.g, "y"), 4);      /* declared output */
	ck_assert_int_eq(g_ty_rank(t.c.g, "nowhere"), -1);
	g_fini(&t.c);
	arena_free(t.a);
}
END_TEST

START_TEST(put_attr_leaves_the_source)
{
	T t;
	mk(&t);
	Node *a = add(&t, "Conv", "a", "x", "x", "a_out");
	g_set_attr_i(&t.c, a, "group", 1);
	Node *b = g_clone_node(&t.c, t.c.g, a);
	g_put_attr_i(&t.c, b, "group", 4);
	g_put_attr_i(&t.c, b, "axis", 2);
	ck_assert_int_eq(g_attr_i(a, "group", 0), 1);
	ck_assert_int_eq(g_attr_i(b, "group", 0), 4);
	ck_assert_int_eq(a->n_attribute, 1);
	ck_assert_int_eq(b->n_attribute, 2);
	ck_assert_int_eq(g_attr_i(b, "axis", 0), 2);
	g_fini(&t.c);
	arena_free(t.a);
}
END_TEST

/* What passes read of the index: each node's inputs (value and its
 * producer) and every value's uses, in order. */
static const char *index_sig(T *t)
{
	char *s = arena_alloc(t->a, 4096);
	Onnx__GraphProto *g = t->c.m->graph;
	for (size_t i = 0; i < g->n_node; i++) {
		Node *n = g->node[i];
		strcat(strcat(s, n->name), "(");
		for (size_t j = 0; j < n->n_input; j++) {
			Val *v = g_input(&t->c, n, j);
			strcat(strcat(strcat(s, v->name), "<"), v->def ? v->def->name : "-");
			strcat(s, " uses:");
			for (uint32_t u = 0; u < v->nuse; u++)
				strcat(strcat(s, " "), v->use[u].n->name);
			strcat(s, ";");
		}
		strcat(s, ") ");
	}
	return s;
}

/* After dead-node elimination and the sort, the refreshed index reads as a
 * rebuilt one would, and the next elimination starts from no marks. */
START_TEST(refresh_reads_as_reindex)
{
	T t;
	mk(&t);
	Node *a = add(&t, "Relu", "a", "x", NULL, "a_out");
	add(&t, "Relu", "dead", "a_out", NULL, "dead_out");
	Node *s = add(&t, "Add", "s", "a_out", "x", "y");
	g_reindex(&t.c, &t.e);
	/* A new producer, appended after its reader, and an input moved to it. */
	add(&t, "Relu", "late", "a_out", NULL, "late_out");
	g_set_input(&t.c, s, 1, "late_out");
	ck_assert_uint_eq(g_dce(&t.c), 1);
	ck_assert_int_eq(g_toposort(&t.c, t.c.g, &t.e), 0);
	unsigned gen = t.c.gen;
	ck_assert_int_eq(g_refresh(&t.c, &t.e), 0);
	ck_assert_uint_gt(t.c.gen, gen);
	ck_assert_str_eq(names(&t), "a late s");
	ck_assert_int_eq(g_check(&t.c, &t.e), 0);
	/* As g_reindex gives it (compared with one on the second round). */
	ck_assert_str_eq(index_sig(&t), "a(x<- uses: a;) late(a_out<a uses: late s;) s(a_out<a uses: late s;late_out<late uses: s;) ");

	/* Again with no rebuild between: the node made dead now goes. */
	g_set_input(&t.c, s, 1, "x");
	ck_assert_uint_eq(g_dce(&t.c), 1);
	ck_assert_int_eq(g_toposort(&t.c, t.c.g, &t.e), 0);
	ck_assert_int_eq(g_refresh(&t.c, &t.e), 0);
	const char *got = index_sig(&t);
	ck_assert_str_eq(names(&t), "a s");
	g_reindex(&t.c, &t.e);
	ck_assert_str_eq(got, index_sig(&t));
	ck_assert_ptr_eq(g_input(&t.c, s, 0)->def, a);
	g_fini(&t.c);
	arena_free(t.a);
}
END_TEST

/* Walks find each node's entry by position; a list edited behind the
 * API's back (here two nodes swapped) gives lookups, not wrong entries. */
START_TEST(node_at_follows_the_list)
{
	T t;
	mk(&t);
	Node *a = add(&t, "Relu", "a", "x", NULL, "a_out");
	Node *b = add(&t, "Relu", "b", "x", NULL, "y");
	g_reindex(&t.c, &t.e);
	Node *c = add(&t, "Relu", "c", "x", NULL, "c_out"); /* appended after the index */
	ck_assert_ptr_eq(g_node_at(&t.c, t.c.g, 0)->n, a);
	ck_assert_ptr_eq(g_node_at(&t.c, t.c.g, 2)->n, c);
	Onnx__GraphProto *gp = t.c.m->graph;
	gp->node[0] = b;
	gp->node[1] = a;
	ck_assert_ptr_eq(g_node_at(&t.c, t.c.g, 0)->n, b);
	ck_assert_ptr_eq(g_node_at(&t.c, t.c.g, 1)->n, a);
	ck_assert_ptr_eq(g_node_at(&t.c, t.c.g, 1), g_info(&t.c, a));
	/* Elimination drops c and puts the list back in step. */
	ck_assert_uint_eq(g_dce(&t.c), 2);
	ck_assert_ptr_eq(g_node_at(&t.c, t.c.g, 0)->n, b);
	ck_assert_uint_eq(t.c.g->norder, 1);
	g_fini(&t.c);
	arena_free(t.a);
}
END_TEST

/* Zeros as accumulators start from: -0.0 counts in every float type, at
 * any position; a sign bit is no zero in an integer; a value past the
 * vectorised steps, or in the tail, is found. */
START_TEST(is_zero_by_type)
{
	T t;
	mk(&t);
	int64_t d[1] = { 37 };
	float f[37] = { 0 };
	f[36] = -0.0f;
	f[5] = -0.0f;
	g_add_init(&t.c, t.c.g, "f", ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, d, 1, f, sizeof f);
	float g[37] = { 0 };
	g[36] = 1e-30f; /* in the tail, past 128 bytes */
	g_add_init(&t.c, t.c.g, "g", ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, d, 1, g, sizeof g);
	float h[37] = { 0 };
	h[17] = 2.0f; /* in the second 64-byte step */
	g_add_init(&t.c, t.c.g, "h", ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, d, 1, h, sizeof h);
	uint16_t hf[37] = { 0 };
	hf[0] = hf[3] = hf[36] = 0x8000; /* -0.0 in half precision, low and high halves */
	g_add_init(&t.c, t.c.g, "hf", ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT16, d, 1, hf, sizeof hf);
	int64_t d2[1] = { 2 };
	int64_t iv[2] = { 0, INT64_C(0x80000000) };
	g_add_init(&t.c, t.c.g, "i", ONNX__TENSOR_PROTO__DATA_TYPE__INT64, d2, 1, iv, sizeof iv);
	double dv[2] = { -0.0, 0.0 };
	g_add_init(&t.c, t.c.g, "d", ONNX__TENSOR_PROTO__DATA_TYPE__DOUBLE, d2, 1, dv, sizeof dv);
	add(&t, "Relu", "r", "x", NULL, "y");
	ck_assert_int_eq(g_reindex(&t.c, &t.e), 0);
	ck_assert_int_eq(g_is_zero(t.c.g, "f"), 1);
	ck_assert_int_eq(g_is_zero(t.c.g, "g"), 0);
	ck_assert_int_eq(g_is_zero(t.c.g, "h"), 0);
	ck_assert_int_eq(g_is_zero(t.c.g, "hf"), 1);
	ck_assert_int_eq(g_is_zero(t.c.g, "i"), 0);
	ck_assert_int_eq(g_is_zero(t.c.g, "d"), 1);
	ck_assert_int_eq(g_is_zero(t.c.g, "x"), 0); /* not a constant */
	g_fini(&t.c);
	arena_free(t.a);
}
END_TEST

/* A tensor inside g_zeros' range is zero unread, through reindexes (its
 * bytes here are not zeros, so only the range can say so); one reaching
 * past either end is read. */
START_TEST(is_zero_trusts_the_zeros_range)
{
	T t;
	mk(&t);
	int64_t d[1] = { 8 };
	float v[8] = { 1, 2, 3, 4, 5, 6, 7, 8 };
	g_add_init(&t.c, t.c.g, "v", ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, d, 1, v, sizeof v);
	add(&t, "Relu", "r", "x", NULL, "y");
	ck_assert_int_eq(g_reindex(&t.c, &t.e), 0);
	const Tensor *tv = g_const(t.c.g, "v");
	ck_assert_ptr_nonnull(tv);
	const unsigned char *p = tv->raw_data.data;
	ck_assert_uint_eq(tv->raw_data.len, sizeof v);
	ck_assert_int_eq(g_is_zero(t.c.g, "v"), 0);
	g_zeros(&t.c, p - 4, sizeof v + 8);
	ck_assert_int_eq(g_is_zero(t.c.g, "v"), 1);
	ck_assert_int_eq(g_reindex(&t.c, &t.e), 0);
	ck_assert_int_eq(g_is_zero(t.c.g, "v"), 1);
	g_zeros(&t.c, p + 1, sizeof v);
	ck_assert_int_eq(g_is_zero(t.c.g, "v"), 0);
	g_zeros(&t.c, p, sizeof v - 1);
	ck_assert_int_eq(g_is_zero(t.c.g, "v"), 0);
	g_zeros(&t.c, NULL, 0);
	ck_assert_int_eq(g_is_zero(t.c.g, "v"), 0);
	g_fini(&t.c);
	arena_free(t.a);
}
END_TEST

/* Every entry of a full table is found by its name, in any order, and
 * names that are not in it, prefixes and extensions of those that are
 * included, are not. */
START_TEST(op_entry_finds_every_entry)
{
	enum { N = 256 };
	static struct {
		const char *op;
		int k;
	} tab[N];
	static char names[N][8];
	for (int i = 0; i < N; i++) {
		snprintf(names[i], sizeof names[i], "Op%d", (i * 37) % N); /* not in order */
		tab[i].op = names[i];
		tab[i].k = i;
	}
	static OpIndex ix = OP_INDEX(tab);
	for (int i = 0; i < N; i++) {
		const void *p = g_op_entry(&ix, names[i]);
		ck_assert_ptr_eq(p, &tab[i]);
	}
	ck_assert_ptr_null(g_op_entry(&ix, "Op256"));
	ck_assert_ptr_null(g_op_entry(&ix, "Op"));
	ck_assert_ptr_null(g_op_entry(&ix, "Op10x"));
	ck_assert_ptr_null(g_op_entry(&ix, ""));
}
END_TEST

int main(void)
{
	Suite *s = suite_create("graph");
	TCase *tc = tcase_create("graph");
	tcase_add_test(tc, fresh_names_are_unique);
	tcase_add_test(tc, dce_keeps_outputs_and_drops_unread_initializers);
	tcase_add_test(tc, dce_drops_the_input_of_a_dropped_initializer);
	tcase_add_test(tc, inputs_follow_mutations);
	tcase_add_test(tc, toposort_is_stable);
	tcase_add_test(tc, cycle_is_reported);
	tcase_add_test(tc, two_producers_and_undefined_inputs);
	tcase_add_test(tc, undeclared_domain);
	tcase_add_test(tc, rank_inference);
	tcase_add_test(tc, put_attr_leaves_the_source);
	tcase_add_test(tc, refresh_reads_as_reindex);
	tcase_add_test(tc, node_at_follows_the_list);
	tcase_add_test(tc, is_zero_by_type);
	tcase_add_test(tc, is_zero_trusts_the_zeros_range);
	tcase_add_test(tc, op_entry_finds_every_entry);
	suite_add_tcase(s, tc);
	return tu_run(s);
}
