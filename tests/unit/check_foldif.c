/* Shape-guard If folding (passes/foldif.c) on hand-built guards, as the
 * exporter writes them for a dynamic batch:
 *   If(Equal(Gather(Shape(t), d), 1)) { Squeeze(t, [d]) } else { Identity(t) } */
#include <check.h>

#include "gbuild.h"
#include "moe.h"
#include "testutil.h"

/* A guard squeezing dimension d of t into out; k keeps names apart. */
static void guard(B *b, const char *t, int d, const char *out, int k)
{
	const char *s = arena_printf(b->a, "shape%d", k), *g = arena_printf(b->a, "dim%d", k);
	const char *eq = arena_printf(b->a, "eq%d", k), *di = arena_printf(b->a, "d%d", k);
	const char *one = arena_printf(b->a, "one%d", k), *ax = arena_printf(b->a, "axes%d", k);
	b_const(b, NULL, di, "", arena_printf(b->a, "%d", d));
	b_const(b, NULL, one, "", "1");
	b_node(b, NULL, "Shape", t, s, "");
	b_node(b, NULL, "Gather", arena_printf(b->a, "%s,%s", s, di), g, "axis=0");
	b_node(b, NULL, "Equal", arena_printf(b->a, "%s,%s", g, one), eq, "");
	Onnx__GraphProto *th = b_graph(b, "then"), *el = b_graph(b, "else");
	b_const(b, th, ax, "1", arena_printf(b->a, "%d", d));
	const char *sq = arena_printf(b->a, "sq%d", k), *id = arena_printf(b->a, "id%d", k);
	b_node(b, th, "Squeeze", arena_printf(b->a, "%s,%s", t, ax), sq, "");
	b_out(b, th, sq, FLOAT, NULL);
	b_node(b, el, "Identity", t, id, "");
	b_out(b, el, id, FLOAT, NULL);
	Node *n = b_node(b, NULL, "If", eq, out, "");
	b_attr_g(b, n, "then_branch", th);
	b_attr_g(b, n, "else_branch", el);
}

static int count_op(const B *b, const char *op)
{
	int n = 0;
	for (size_t i = 0; i < b->m->graph->n_node; i++)
		n += strcmp(b->m->graph->node[i]->op_type, op) == 0;
	return n;
}

/* One guard on x of the given shape, read by a Relu into y. */
static void one_guard(B *b, const char *shape, int d)
{
	b_new(b, 17);
	b_in(b, NULL, "x", FLOAT, shape);
	guard(b, "x", d, "g", 0);
	b_node(b, NULL, "Relu", "g", "y", "");
	b_out(b, NULL, "y", FLOAT, NULL);
	ck_assert_int_eq(b_index(b), 0);
}

static void tidy(B *b)
{
	ck_assert_int_eq(g_reindex(&b->c, &b->e), 0);
	g_dce(&b->c);
	ck_assert_int_eq(g_reindex(&b->c, &b->e), 0);
	ck_assert_int_eq(g_toposort(&b->c, b->c.g, &b->e), 0);
	ck_assert_int_eq(g_reindex(&b->c, &b->e), 0);
	ck_assert_int_eq(g_infer(&b->c, &b->e), 0);
}

START_TEST(folded_when_the_dim_is_1)
{
	B b;
	one_guard(&b, "?,1,4", 1);
	ck_assert_int_eq(fold_shape_ifs(&b.c, 0, &b.e), 1);
	/* g_rewrite reindexed after the fold and inferred again: the new
	 * Squeeze's output has its type without another g_infer. */
	ck_assert_int_eq(b.c.inferred, 1);
	ck_ty(&b, "g", "float[?,4]");
	tidy(&b);
	ck_assert_int_eq(count_op(&b, "If"), 0);
	ck_assert_int_eq(count_op(&b, "Squeeze"), 1);
	/* The Squeeze produces what the If did; the graph checks. */
	Val *v = g_val(b.c.g, "g");
	ck_assert_ptr_nonnull(v);
	ck_assert_str_eq(v->def->op_type, "Squeeze");
	ck_assert_int_eq(g_check(&b.c, &b.e), 0);
	ck_ty(&b, "y", "float[?,4]");
	b_free(&b);

	/* A negative index counts from the end, as Gather's does. */
	one_guard(&b, "?,4,1", -1);
	ck_assert_int_eq(fold_shape_ifs(&b.c, 0, &b.e), 1);
	b_free(&b);
}
END_TEST

START_TEST(not_folded_when_unknown_or_not_1)
{
	B b;
	one_guard(&b, "?,?,4", 1); /* the dimension is not known */
	ck_assert_int_eq(fold_shape_ifs(&b.c, 0, &b.e), 0);
	ck_assert_int_eq(count_op(&b, "If"), 1);
	b_free(&b);

	one_guard(&b, "?,2,4", 1); /* known, and not 1 */
	ck_assert_int_eq(fold_shape_ifs(&b.c, 0, &b.e), 0);
	ck_assert_int_eq(count_op(&b, "If"), 1);
	b_free(&b);

	one_guard(&b, "1,3,4", 1); /* the guard tests another dimension than the one that is 1 */
	ck_assert_int_eq(fold_shape_ifs(&b.c, 0, &b.e), 0);
	b_free(&b);

	/* Not the guard form: the else branch computes something. */
	b_new(&b, 17);
	b_in(&b, NULL, "x", FLOAT, "?,1,4");
	guard(&b, "x", 1, "g", 0);
	Onnx__GraphProto *el = g_attr(b.m->graph->node[b.m->graph->n_node - 1], "else_branch")->g;
	el->node[0]->op_type = "Relu";
	b_out(&b, NULL, "g", FLOAT, NULL);
	b_index(&b);
	ck_assert_int_eq(fold_shape_ifs(&b.c, 0, &b.e), 0);
	b_free(&b);
}
END_TEST

START_TEST(dry_run_counts_and_changes_nothing)
{
	B b;
	b_new(&b, 17);
	b_in(&b, NULL, "x", FLOAT, "?,1,4");
	b_in(&b, NULL, "z", FLOAT, "?,3,4");
	guard(&b, "x", 1, "g0", 0);
	guard(&b, "x", 1, "g1", 1);
	guard(&b, "z", 1, "g2", 2); /* not foldable */
	b_node(&b, NULL, "Add", "g0,g1", "s", "");
	b_node(&b, NULL, "Relu", "g2", "r", "");
	b_out(&b, NULL, "s", FLOAT, NULL);
	b_out(&b, NULL, "r", FLOAT, NULL);
	b_index(&b);
	size_t n = b.m->graph->n_node;
	ck_assert_int_eq(fold_shape_ifs(&b.c, 1, &b.e), 2);
	ck_assert_uint_eq(b.m->graph->n_node, n);
	ck_assert_int_eq(count_op(&b, "If"), 3);
	ck_assert_int_eq(fold_shape_ifs(&b.c, 0, &b.e), 2);
	tidy(&b);
	ck_assert_int_eq(count_op(&b, "If"), 1);
	b_free(&b);
}
END_TEST

/* A guard on the output of another guard: inference picks the branch of
 * a provable guard, so the second one's shape is known before the first
 * is folded, and a dry run counts both. */
START_TEST(guard_behind_guard)
{
	B b;
	b_new(&b, 17);
	b_in(&b, NULL, "x", FLOAT, "?,1,1,4");
	guard(&b, "x", 1, "g0", 0); /* then [?,1,4], else [?,1,1,4] */
	guard(&b, "g0", 1, "g1", 1);
	b_node(&b, NULL, "Relu", "g1", "y", "");
	b_out(&b, NULL, "y", FLOAT, NULL);
	b_index(&b);
	ck_ty(&b, "g0", "float[?,1,4]");
	ck_assert_int_eq(fold_shape_ifs(&b.c, 1, &b.e), 2);
	ck_assert_int_eq(fold_shape_ifs(&b.c, 0, &b.e), 2);
	tidy(&b);
	ck_assert_int_eq(count_op(&b, "If"), 0);
	ck_assert_int_eq(g_check(&b.c, &b.e), 0);
	ck_ty(&b, "y", "float[?,4]");
	b_free(&b);

	/* Unprovable first guard: neither folds. */
	b_new(&b, 17);
	b_in(&b, NULL, "x", FLOAT, "?,?,1,4");
	guard(&b, "x", 1, "g0", 0);
	guard(&b, "g0", 1, "g1", 1);
	b_out(&b, NULL, "g1", FLOAT, NULL);
	b_index(&b);
	ck_ty(&b, "g0", "float[...]");
	ck_assert_int_eq(fold_shape_ifs(&b.c, 0, &b.e), 0);
	b_free(&b);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("foldif");
	TCase *tc = tcase_create("foldif");
	tcase_add_test(tc, folded_when_the_dim_is_1);
	tcase_add_test(tc, not_folded_when_unknown_or_not_1);
	tcase_add_test(tc, dry_run_counts_and_changes_nothing);
	tcase_add_test(tc, guard_behind_guard);
	suite_add_tcase(s, tc);
	return tu_run(s);
}
