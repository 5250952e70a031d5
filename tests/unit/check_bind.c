/* Binding (passes/bind.c) and zero-config layout (passes/layout.c) on
 * detected traced layers (tests/unit/moebuild.h; 4 experts, top-2,
 * experts 0 and 3 present) with a checkpoint held in memory: experts.yaml
 * layers bind by module path when names carry them, by value when they do
 * not; the file and the graph must agree; without experts.yaml the layout
 * is inferred from names or values. */
#include <check.h>

#include "moebuild.h"
#include "testutil.h"

typedef struct {
	MB m;
	B b;
	Lres r[2];
	Layer *L;
	size_t nl;
	WSrc *w;
	SpecLayer sl[2];
	Spec s;
	Layer *bound[2];
	int opened; /* how often bind asked for the weights */
} Bx;

static WSrc *src(void *ud, const SpecLayer *s, Err *e)
{
	Bx *f = ud;
	(void)s;
	(void)e;
	f->opened++;
	return f->w;
}

static void begin(Bx *f)
{
	memset(f, 0, sizeof *f);
	mb_new(&f->m, &f->b, 17);
	mb_inputs(&f->m, 4);
	f->w = ck_new(f->b.a);
}

/* Layer i (0 or 1) of the model, its expert values from seed. */
static void layer(Bx *f, int i, const char *pfx, const char *topk, double seed)
{
	Lopt o = { .pfx = pfx, .topk = topk, .E = 4, .k = 2, .ids = { 0, 3 }, .nid = 2, .seed = seed,
		   .wname = i ? "onnx::Conv_2w{i}" : NULL, .bname = i ? "onnx::Conv_2b{i}" : NULL };
	mb_layer(&f->m, &o, &f->r[i]);
	b_out(&f->b, NULL, f->r[i].combined, FLOAT, NULL);
}

static void find(Bx *f, size_t n)
{
	ck_assert_int_eq(b_index(&f->b), 0);
	ck_assert_msg(moe_find(&f->b.c, NULL, 0, &f->L, &f->nl, &f->b.e) == 0, "%s", f->b.e.msg);
	ck_assert_uint_eq(f->nl, n);
}

/* experts.yaml with layers at scopes a (and b). */
static void spec(Bx *f, const char *a, const char *b)
{
	f->sl[0] = mb_spec(a, 4, 2);
	f->sl[1] = mb_spec(b ? b : "", 4, 2);
	f->s = (Spec){ .path = "experts.yaml", .weights = "mem.safetensors", .layer = f->sl, .nlayer = b ? 2 : 1 };
}

static int bind(Bx *f)
{
	return moe_bind(&f->b.c, &f->s, f->L, f->nl, f->bound, src, f, &f->b.e);
}

#define BIND_OK(f) ck_assert_msg(bind(f) == 0, "moe_bind: %s", (f)->b.e.msg)

/* Spec layer i bound to the layer built as r[j], which now carries it and
 * its scope as messages show it (the empty one as "(root)"). */
static void bound_to(Bx *f, int i, int j)
{
	ck_assert_ptr_nonnull(f->bound[i]);
	ck_assert_ptr_eq(f->bound[i]->topk, f->r[j].topk);
	ck_assert_ptr_eq(f->bound[i]->spec, &f->sl[i]);
	ck_assert_str_eq(f->bound[i]->scope, *f->sl[i].scope ? f->sl[i].scope : "(root)");
}

/* ---- by names ---- */

/* Expert nodes at /model.N/experts.K/...: each layer binds to its scope,
 * whatever the order of experts.yaml, and the weights are not needed;
 * also when a tool renamed the routers, by the experts' paths alone. */
START_TEST(by_module_paths)
{
	for (int renamed = 0; renamed < 2; renamed++) {
		Bx f;
		begin(&f);
		layer(&f, 0, "/model.0", renamed ? "router_a" : NULL, 0);
		layer(&f, 1, "/model.2", renamed ? "router_b" : NULL, 10);
		find(&f, 2);
		ck_assert(renamed ? !f.L[0].topmodule : !!f.L[0].topmodule);
		spec(&f, "model.2", "model.0");
		BIND_OK(&f);
		bound_to(&f, 0, 1);
		bound_to(&f, 1, 0);
		ck_assert_int_eq(f.opened, 0);
		b_free(&f.b);
	}
}
END_TEST

/* Experts whose names hold no expert path (a functional expert's nodes
 * named after the layer, /model.N/conv/Conv_K): the router's module path
 * binds the layer. */
START_TEST(by_router_path)
{
	Bx f;
	begin(&f);
	Lopt o = { .pfx = "/model.0", .esub = "", .E = 4, .k = 2, .ids = { 0, 3 }, .nid = 2 };
	mb_layer(&f.m, &o, &f.r[0]);
	b_out(&f.b, NULL, f.r[0].combined, FLOAT, NULL);
	o = (Lopt){ .pfx = "/model.2", .esub = "", .E = 4, .k = 2, .ids = { 0, 3 }, .nid = 2, .wname = "onnx::Conv_2w{i}",
		    .bname = "onnx::Conv_2b{i}" };
	mb_layer(&f.m, &o, &f.r[1]);
	b_out(&f.b, NULL, f.r[1].combined, FLOAT, NULL);
	find(&f, 2);
	ck_assert_ptr_null(f.L[0].pattern);
	spec(&f, "model.2", "model.0");
	BIND_OK(&f);
	bound_to(&f, 0, 1);
	bound_to(&f, 1, 0);
	b_free(&f.b);
}
END_TEST

/* Nested scopes (/model.4/m.0/m.0.0/mlp/...) bind to their module path. */
START_TEST(by_nested_scope)
{
	Bx f;
	begin(&f);
	layer(&f, 0, "/model.4/m.0/m.0.0/mlp", NULL, 0);
	layer(&f, 1, "/model.4/m.0/m.0.1/mlp", NULL, 10);
	find(&f, 2);
	spec(&f, "model.4.m.0.1.mlp", "model.4.m.0.0.mlp");
	BIND_OK(&f);
	bound_to(&f, 0, 1);
	bound_to(&f, 1, 0);
	ck_assert_int_eq(f.opened, 0);
	b_free(&f.b);
}
END_TEST

/* A MoE exported alone (/TopK, /experts.K/...): scope "". */
START_TEST(by_root_scope)
{
	Bx f;
	begin(&f);
	layer(&f, 0, "", "/TopK", 0);
	find(&f, 1);
	spec(&f, "", NULL);
	BIND_OK(&f);
	bound_to(&f, 0, 0);
	ck_assert_int_eq(f.opened, 0);
	b_free(&f.b);
}
END_TEST

/* ---- by value ---- */

/* A name-free export: each layer binds to the one whose present experts
 * rebuild from the checkpoint under its keys. */
START_TEST(by_value)
{
	Bx f;
	begin(&f);
	layer(&f, 0, NULL, NULL, 0);
	layer(&f, 1, NULL, NULL, 10);
	ck_plain(f.w, "model.0.experts.{i}.", 4, 0);
	ck_plain(f.w, "model.2.experts.{i}.", 4, 10);
	find(&f, 2);
	spec(&f, "model.2", "model.0");
	BIND_OK(&f);
	bound_to(&f, 0, 1);
	bound_to(&f, 1, 0);
	ck_assert_int_gt(f.opened, 0);
	b_free(&f.b);

	/* No layer's experts under a scope's keys: refused, saying why. */
	begin(&f);
	layer(&f, 0, NULL, NULL, 0);
	ck_plain(f.w, "model.0.experts.{i}.", 4, 5);
	find(&f, 1);
	spec(&f, "model.0", NULL);
	ck_assert_int_eq(bind(&f), -1);
	tu_err_has(f.b.e.msg, "layer model.0: no node name lies under this scope, and no router's experts match the checkpoint under it by value");
	b_free(&f.b);
}
END_TEST

/* A pool of experts shared by two layers (SharedExpertMoE): the
 * checkpoint repeats it under each scope, both routers' experts match
 * both, and either binding rebuilds the same tensors. */
START_TEST(shared_pool)
{
	Bx f;
	begin(&f);
	layer(&f, 0, NULL, NULL, 0);
	layer(&f, 1, NULL, NULL, 0);
	ck_plain(f.w, "model.0.experts.{i}.", 4, 0);
	ck_plain(f.w, "model.2.experts.{i}.", 4, 0);
	find(&f, 2);
	spec(&f, "model.0", "model.2");
	BIND_OK(&f);
	ck_assert_ptr_nonnull(f.bound[0]);
	ck_assert_ptr_nonnull(f.bound[1]);
	ck_assert_ptr_ne(f.bound[0], f.bound[1]);
	b_free(&f.b);

	/* Not a pool: the two scopes differ for a missing expert, so which
	 * router is whose matters and values cannot tell. */
	begin(&f);
	layer(&f, 0, NULL, NULL, 0);
	layer(&f, 1, NULL, NULL, 0);
	ck_plain(f.w, "model.0.experts.{i}.", 4, 0);
	for (int id = 0; id < 4; id++)
		ck_expert(f.w, "model.2.experts.{i}.", id, id == 1 ? 5 : 0);
	find(&f, 2);
	spec(&f, "model.0", "model.2");
	ck_assert_int_eq(bind(&f), -1);
	tu_err_has(f.b.e.msg, "layer model.0: the experts of two routers");
	tu_err_has(f.b.e.msg, "match the checkpoint under 'model.0.experts.0'; set router.indices in experts.yaml");
	b_free(&f.b);
}
END_TEST

/* ---- disagreements ---- */

static void one_named(Bx *f)
{
	begin(f);
	layer(f, 0, "/model.0", NULL, 0);
	find(f, 1);
	spec(f, "model.0", NULL);
}

START_TEST(refuse_disagreements)
{
	Bx f;
	one_named(&f);
	f.sl[0].top_k = 1;
	ck_assert_int_eq(bind(&f), -1);
	tu_err_has(f.b.e.msg, "layer model.0: experts.yaml says top_k: 1, but the router's TopK '/model.0/router/TopK' takes 2; fix top_k");
	b_free(&f.b);

	one_named(&f);
	f.sl[0].experts = 8;
	ck_assert_int_eq(bind(&f), -1);
	tu_err_has(f.b.e.msg, "layer model.0: experts.yaml says experts: 8, but the router scores 4 experts; fix experts");
	b_free(&f.b);

	one_named(&f);
	f.sl[0].experts = 3;
	ck_assert_int_eq(bind(&f), -1);
	tu_err_has(f.b.e.msg, "layer model.0: the dispatch compares the router indices with expert id 3, but experts: 3; fix experts");
	b_free(&f.b);
}
END_TEST

/* A damaged router experts.yaml does not list would stay broken. */
START_TEST(refuse_unlisted_router)
{
	Bx f;
	begin(&f);
	layer(&f, 0, "/model.0", NULL, 0);
	layer(&f, 1, "/model.2", NULL, 10);
	find(&f, 2);
	spec(&f, "model.0", NULL);
	ck_assert_int_eq(bind(&f), -1);
	tu_err_has(f.b.e.msg, "the model has an MoE router '/model.2/router/TopK' (experts present: 2) that experts.yaml does not list; add a layer for it");
	b_free(&f.b);
}
END_TEST

/* ---- zero-config layout ---- */

static void layout_ok(Bx *f, WSrc *w)
{
	ck_assert_msg(moe_layout(&f->b.c, f->L, f->nl, w, "mem.safetensors", &f->s, &f->b.e) == 0, "moe_layout: %s",
		      f->b.e.msg);
	ck_assert_uint_eq(f->s.nlayer, 1);
	ck_assert_str_eq(f->s.weights, "mem.safetensors");
	ck_assert_int_eq(f->s.layer[0].experts, 4);
	ck_assert_int_eq(f->s.layer[0].top_k, 2);
}

/* Names give the scope and the expert pattern; the checkpoint, the prefix
 * its keys put before them (a trainer's "ema."), checked by value. */
START_TEST(layout_from_names)
{
	Bx f;
	begin(&f);
	layer(&f, 0, "/model.4/m.0/m.0.0/mlp", NULL, 0);
	ck_plain(f.w, "ema.model.4.m.0.0.mlp.experts.{i}.", 4, 0);
	find(&f, 1);
	layout_ok(&f, f.w);
	ck_assert_str_eq(f.s.layer[0].scope, "model.4.m.0.0.mlp");
	ck_assert_str_eq(f.s.layer[0].expert, "experts.{i}");
	ck_assert_str_eq(f.s.layer[0].prefix, "ema.");
	b_free(&f.b);

	/* Names alone: the expert count is the router's width. */
	begin(&f);
	layer(&f, 0, "/model.4/m.0/m.0.0/mlp", NULL, 0);
	find(&f, 1);
	layout_ok(&f, NULL);
	ck_assert_str_eq(f.s.layer[0].scope, "model.4.m.0.0.mlp");
	ck_assert_str_eq(f.s.layer[0].expert, "experts.{i}");
	ck_assert_str_eq(f.s.layer[0].prefix, "");
	b_free(&f.b);
}
END_TEST

/* A name-free export: the keys whose values the present experts have. */
START_TEST(layout_from_values)
{
	Bx f;
	begin(&f);
	layer(&f, 0, NULL, NULL, 0);
	ck_plain(f.w, "model.3.block.experts.{i}.", 4, 0);
	ck_plain(f.w, "model.5.experts.{i}.", 4, 7);
	find(&f, 1);
	layout_ok(&f, f.w);
	ck_assert_str_eq(f.s.layer[0].scope, "model.3.block");
	ck_assert_str_eq(f.s.layer[0].expert, "experts.{i}");
	ck_assert_str_eq(f.s.layer[0].prefix, "");
	b_free(&f.b);
}
END_TEST

/* What cannot be told is an error naming what to give. */
START_TEST(layout_refusals)
{
	Bx f;
	begin(&f);
	layer(&f, 0, NULL, NULL, 0);
	find(&f, 1);
	ck_assert_int_eq(moe_layout(&f.b.c, f.L, f.nl, NULL, NULL, &f.s, &f.b.e), -1);
	tu_err_has(f.b.e.msg, "node names carry no module path, and no checkpoint was given to find the layer by value; give --weights");
	b_free(&f.b);

	/* The checkpoint holds 6 experts where the router scores 4. */
	begin(&f);
	layer(&f, 0, "/model.0", NULL, 0);
	ck_plain(f.w, "model.0.experts.{i}.", 6, 0);
	find(&f, 1);
	ck_assert_int_eq(moe_layout(&f.b.c, f.L, f.nl, f.w, "mem.safetensors", &f.s, &f.b.e), -1);
	tu_err_has(f.b.e.msg, "layer model.0: the router scores 4 experts, but mem.safetensors holds 6 under 'model.0.experts.0'; write experts.yaml with experts");
	b_free(&f.b);

	/* Name-free, and no key holds the present experts' values. */
	begin(&f);
	layer(&f, 0, NULL, NULL, 0);
	ck_plain(f.w, "model.0.experts.{i}.", 4, 3);
	find(&f, 1);
	ck_assert_int_eq(moe_layout(&f.b.c, f.L, f.nl, f.w, "mem.safetensors", &f.s, &f.b.e), -1);
	tu_err_has(f.b.e.msg, "cannot find its experts' keys in mem.safetensors");
	b_free(&f.b);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("bind");
	TCase *tc = tcase_create("bind");
	tcase_add_test(tc, by_module_paths);
	tcase_add_test(tc, by_router_path);
	tcase_add_test(tc, by_nested_scope);
	tcase_add_test(tc, by_root_scope);
	tcase_add_test(tc, by_value);
	tcase_add_test(tc, shared_pool);
	tcase_add_test(tc, refuse_disagreements);
	tcase_add_test(tc, refuse_unlisted_router);
	suite_add_tcase(s, tc);
	tc = tcase_create("layout");
	tcase_add_test(tc, layout_from_names);
	tcase_add_test(tc, layout_from_values);
	tcase_add_test(tc, layout_refusals);
	suite_add_tcase(s, tc);
	return tu_run(s);
}
