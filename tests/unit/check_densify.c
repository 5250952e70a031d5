/* Densify (passes/densify.c): moe_densify on a detected traced layer
 * (tests/unit/moebuild.h; experts 0 and 2 of 4 present, top-2, the
 * checkpoint in memory), asserting the static dense form it emits per
 * opset: every expert on the full input, a Concat stack, one
 * GatherElements of the stack at the k slots' expert ids times their
 * weights, summed over the slots, the sum taking over the routed sum's
 * name; missing experts
 * cloned under their module paths; the old dispatch dead after DCE. */
#include <check.h>

#include "moebuild.h"
#include "testutil.h"

#define DENSE "/model.0/dense/"

typedef struct {
	MB m;
	B b;
	Lopt o;
	Lres r;
	Layer *L;
	SpecLayer sl;
	WSrc *w;
	LayerReport lr;
} Dx;

/* A layer of E experts, 0 and 2 present, top-2, its routed sum read by
 * a Relu whose output is the model's; the test adjusts f->o before end(). */
static void begin(Dx *f, int opset, const char *pfx, int E)
{
	mb_new(&f->m, &f->b, opset);
	mb_inputs(&f->m, E);
	f->o = (Lopt){ .pfx = pfx, .E = E, .k = 2, .ids = { 0, 2 }, .nid = 2 };
	f->w = ck_new(f->b.a);
	f->sl = mb_spec("model.0", E, 2);
}

static void end(Dx *f)
{
	mb_layer(&f->m, &f->o, &f->r);
	b_node(&f->b, NULL, "Relu", f->r.combined, "y", "");
	b_out(&f->b, NULL, "y", FLOAT, NULL);
	ck_assert_int_eq(b_index(&f->b), 0);
	size_t n;
	ck_assert_msg(moe_find(&f->b.c, NULL, 0, &f->L, &n, &f->b.e) == 0, "%s", f->b.e.msg);
	ck_assert_uint_eq(n, 1);
	f->L->spec = &f->sl;
	f->L->scope = f->sl.scope;
	memset(&f->lr, 0, sizeof f->lr);
	f->lr.inserted = arena_alloc(f->b.a, 8 * sizeof *f->lr.inserted);
}

static void densify(Dx *f)
{
	ck_assert_msg(moe_densify(&f->b.c, f->L, f->w, &f->lr, &f->b.e) == 0, "moe_densify: %s", f->b.e.msg);
}

/* The index is stale after a rewrite: these read the node list. */
static Node *def(const B *b, const char *v)
{
	for (size_t i = 0; i < b->m->graph->n_node; i++)
		for (size_t j = 0; j < b->m->graph->node[i]->n_output; j++)
			if (strcmp(b->m->graph->node[i]->output[j], v) == 0)
				return b->m->graph->node[i];
	ck_abort_msg("no producer of '%s'", v);
	return NULL;
}

static Node *use(const B *b, const char *v, const char *op)
{
	for (size_t i = 0; i < b->m->graph->n_node; i++) {
		Node *n = b->m->graph->node[i];
		for (size_t j = 0; j < n->n_input; j++)
			if (strcmp(n->input[j], v) == 0 && strcmp(n->op_type, op) == 0)
				return n;
	}
	ck_abort_msg("no %s reads '%s'", op, v);
	return NULL;
}

static Node *named(const B *b, const char *name)
{
	for (size_t i = 0; i < b->m->graph->n_node; i++)
		if (b->m->graph->node[i]->name && strcmp(b->m->graph->node[i]->name, name) == 0)
			return b->m->graph->node[i];
	ck_abort_msg("no node '%s'", name);
	return NULL;
}

/* The i-th emitted node of op, in emission order. */
static Node *nth(const B *b, const char *op, int i)
{
	for (size_t k = 0; k < b->m->graph->n_node; k++) {
		Node *n = b->m->graph->node[k];
		if (n->name && strncmp(n->name, DENSE, strlen(DENSE)) == 0 && strcmp(n->op_type, op) == 0 && i-- == 0)
			return n;
	}
	ck_abort_msg("no %s #%d", op, i);
	return NULL;
}

static int64_t const1(B *b, const char *v)
{
	const Tensor *t = NULL;
	for (size_t i = 0; i < b->m->graph->n_initializer; i++)
		if (strcmp(b->m->graph->initializer[i]->name, v) == 0)
			t = b->m->graph->initializer[i];
	ck_assert_ptr_nonnull(t);
	ck_assert_int_eq(g_tensor_numel(t), 1);
	size_t nb;
	const void *p = g_tensor_data(t, &nb);
	int64_t x;
	ck_assert_uint_eq(nb, 8);
	memcpy(&x, p, 8);
	return x;
}

/* Unsqueeze / Squeeze of axis 1: the axes an input from opset 13, an
 * attribute before. */
static void axis1(Dx *f, const Node *n)
{
	if (f->b.c.opset >= 13) {
		ck_assert_uint_eq(n->n_input, 2);
		ck_assert_int_eq(const1(&f->b, n->input[1]), 1);
		ck_assert_ptr_null(g_attr(n, "axes"));
	} else {
		ck_assert_uint_eq(n->n_input, 1);
		const Onnx__AttributeProto *a = g_attr(n, "axes");
		ck_assert_ptr_nonnull(a);
		ck_assert_uint_eq(a->n_ints, 1);
		ck_assert_int_eq(a->ints[0], 1);
	}
}

static const char *old_out(const Dx *f, int id)
{
	for (int i = 0; i < f->o.nid; i++)
		if (f->o.ids[i] == id)
			return f->r.ex[i].out;
	return NULL;
}

/* The int64 initializer v, n values. */
static void consts(B *b, const char *v, const int64_t *want, size_t n)
{
	const Tensor *t = NULL;
	for (size_t i = 0; i < b->m->graph->n_initializer; i++)
		if (strcmp(b->m->graph->initializer[i]->name, v) == 0)
			t = b->m->graph->initializer[i];
	ck_assert_ptr_nonnull(t);
	size_t nb;
	const void *p = g_tensor_data(t, &nb);
	ck_assert_uint_eq(nb, 8 * n);
	ck_assert_int_eq(memcmp(p, want, nb), 0);
}

/* The emitted dense form, the k slots in one pick; weights: the [B,k]
 * weights they read (L->weights, or its wmask product). */
static void dense_form(Dx *f, const char *weights)
{
	B *b = &f->b;
	int E = 4;
	static const int64_t bk1[] = { 0, -1, 1, 1, 1 }; /* [B,k] -> [B,k,1,1,1] */
	ck_assert_int_eq(mb_count(b, DENSE, "Unsqueeze"), E);
	ck_assert_int_eq(mb_count(b, DENSE, "Concat"), 1);
	ck_assert_int_eq(mb_count(b, DENSE, "GatherElements"), 1);
	ck_assert_int_eq(mb_count(b, DENSE, "ReduceSum"), 0);
	ck_assert_int_eq(mb_count(b, DENSE, "Squeeze"), 0);
	ck_assert_int_eq(mb_count(b, DENSE, "Gather"), 2 * f->o.k);
	ck_assert_int_eq(mb_count(b, DENSE, "Mul"), f->o.k + (f->o.wmask ? 1 : 0));
	ck_assert_int_eq(mb_count(b, DENSE, "Add"), f->o.k - 1);
	ck_assert_int_eq(mb_count(b, DENSE, "Reshape"), 2);
	ck_assert_int_eq(mb_count(b, DENSE, "Cast"), f->o.cast ? 1 : f->o.wmask && b->c.opset < 15);
	/* The stack: expert id's output, unsqueezed at 1, is input id. */
	Node *cat = nth(b, "Concat", 0);
	ck_assert_int_eq(g_attr_i(cat, "axis", -1), 1);
	ck_assert_uint_eq(cat->n_input, (size_t)E);
	for (int id = 0; id < E; id++) {
		Node *u = def(b, cat->input[id]);
		ck_assert_str_eq(u->op_type, "Unsqueeze");
		axis1(f, u);
		const char *y = u->input[0], *o = old_out(f, id);
		if (o) {
			ck_assert_str_eq(y, o); /* a present expert's own output */
		} else {
			/* a clone's, under the expert's module path (the SiLU's Mul,
			 * or the Cast after it, named after the layer in the
			 * template, put under the expert) */
			Node *last = def(b, y);
			const char *want = f->o.cast ? "/model.0/experts.%d/Cast" : "/model.0/experts.%d/act/Mul";
			ck_assert_str_eq(last->name, arena_printf(b->a, want, id));
		}
	}
	/* GatherElements(stack, Expand(Reshape(indices, [0,-1,1,1,1]), Shape(one
	 * expert's [B,1,C,H,W]))): the k chosen outputs, [B,k,C,H,W]. */
	Node *ge = nth(b, "GatherElements", 0);
	ck_assert_int_eq(g_attr_i(ge, "axis", -1), 1);
	ck_assert_str_eq(ge->input[0], cat->output[0]);
	Node *ex = def(b, ge->input[1]);
	ck_assert_str_eq(ex->op_type, "Expand");
	ck_assert_str_eq(def(b, ex->input[1])->op_type, "Shape");
	Node *rs = def(b, ex->input[0]);
	ck_assert_str_eq(rs->op_type, "Reshape");
	ck_assert_str_eq(rs->input[0], f->L->indices);
	consts(b, rs->input[1], bk1, 5);
	/* Slot j: Gather(picks, j) times Gather(Reshape(weights, [0,-1,1,1,1]), j)
	 * (cast when the dispatch did), along axis 1. */
	Node *mul = NULL, *w = NULL;
	for (int j = 0; j < f->o.k; j++) {
		Node *gp = def(b, arena_printf(b->a, DENSE "Gather%s_output_0", j ? arena_printf(b->a, "_%d", 2 * j) : ""));
		ck_assert_str_eq(gp->input[0], ge->output[0]);
		ck_assert_int_eq(g_attr_i(gp, "axis", -1), 1);
		consts(b, gp->input[1], (int64_t[]){ j }, 1);
		mul = use(b, gp->output[0], "Mul");
		Node *gw = def(b, mul->input[1]);
		ck_assert_str_eq(gw->op_type, "Gather");
		ck_assert_int_eq(g_attr_i(gw, "axis", -1), 1);
		ck_assert_str_eq(gw->input[1], gp->input[1]);
		ck_assert_ptr_nonnull(w = def(b, gw->input[0]));
	}
	if (f->o.cast) {
		ck_assert_str_eq(w->op_type, "Cast");
		ck_assert_int_eq(g_attr_i(w, "to", 0), FLOAT);
		w = def(b, w->input[0]);
	}
	ck_assert_str_eq(w->op_type, "Reshape");
	ck_assert_str_eq(w->input[0], weights);
	consts(b, w->input[1], bk1, 5);
	/* The products added (the last slot's last) take over the routed
	 * sum's name; the old producer keeps computing under another, until
	 * DCE. */
	Node *sum = def(b, f->r.combined);
	ck_assert_str_eq(sum->op_type, "Add");
	ck_assert_str_eq(sum->input[1], mul->output[0]);
	ck_assert_str_eq(def(b, sum->input[0])->op_type, "Mul");
	ck_assert_ptr_eq(sum, b->m->graph->node[b->m->graph->n_node - 1]);
	ck_assert_ptr_eq(use(b, f->r.combined, "Relu"), named(b, "Relu_y"));
	ck_assert_str_eq(def(b, arena_printf(b->a, "%s_sparse", f->r.combined))->op_type, "Add");
	/* Present experts now read the full input, not their gathered rows. */
	for (size_t i = 0; i < f->L->nex; i++)
		ck_assert_str_eq(f->L->ex[i].node[0]->input[0], "x");
	ck_assert_int_eq(f->lr.ninserted, 2);
	ck_assert_int_eq(f->lr.inserted[0], 1);
	ck_assert_int_eq(f->lr.inserted[1], 3);
	ck_assert_int_eq(f->lr.repaired, 1);
}

/* Dead-node elimination leaves the dense form only, and a valid model. */
static void tidy(Dx *f)
{
	B *b = &f->b;
	ck_assert_int_eq(g_reindex(&b->c, &b->e), 0);
	g_dce(&b->c);
	ck_assert_int_eq(g_reindex(&b->c, &b->e), 0);
	ck_assert_int_eq(g_toposort(&b->c, b->c.g, &b->e), 0);
	ck_assert_int_eq(g_reindex(&b->c, &b->e), 0);
	ck_assert_int_eq(g_infer(&b->c, &b->e), 0);
	ck_assert_int_eq(mb_count(b, NULL, "NonZero"), 0);
	ck_assert_int_eq(mb_count(b, NULL, "ScatterElements"), 0);
	ck_assert_int_eq(mb_count(b, NULL, "If"), 0);
	ck_assert_int_eq(mb_count(b, NULL, "Conv"), 4);
	ck_assert_msg(g_check(&b->c, &b->e) == 0, "g_check: %s", b->e.msg);
	ck_ty(b, "y", "float[2,2,2,2]");
}

/* Opset 11: Unsqueeze and Squeeze axes as attributes; 13 and later as
 * inputs. */
START_TEST(dense_per_opset)
{
	static const int opsets[] = { 11, 13, 17 };
	for (size_t q = 0; q < 3; q++) {
		Dx f;
		begin(&f, opsets[q], "/model.0", 4);
		ck_plain(f.w, "model.0.experts.{i}.", 4, 0);
		end(&f);
		densify(&f);
		dense_form(&f, f.r.weights);
		ck_assert_int_eq(mb_count(&f.b, DENSE, "CastLike"), 0);
		/* The clones' tensors, rebuilt from the checkpoint, named by key. */
		Node *conv = named(&f.b, "/model.0/experts.3/conv/Conv");
		ck_assert_str_eq(conv->input[0], "x");
		ck_assert_str_eq(conv->input[1], "model.0.experts.3.conv.weight");
		ck_assert_str_eq(conv->input[2], "model.0.experts.3.conv.bias");
		tidy(&f);
		b_free(&f.b);
	}
}
END_TEST

/* The dispatch cast the weights (Cast on both sides of the product): so
 * does the dense sum. */
START_TEST(dense_weight_cast)
{
	Dx f;
	begin(&f, 17, "/model.0", 4);
	f.o.cast = 1;
	ck_plain(f.w, "model.0.experts.{i}.", 4, 0);
	end(&f);
	ck_assert_int_eq(f.L->wcast, FLOAT);
	densify(&f);
	dense_form(&f, f.r.weights);
	tidy(&f);
	b_free(&f.b);
}
END_TEST

/* The dispatch dropped slots whose weight fails a condition (And with
 * Greater(W, 0)): the dense sum zeroes their weight, by CastLike from
 * opset 15, by Cast before. */
START_TEST(dense_wmask)
{
	for (int opset = 13; opset <= 15; opset += 2) {
		Dx f;
		begin(&f, opset, "/model.0", 4);
		f.o.wmask = 1;
		ck_plain(f.w, "model.0.experts.{i}.", 4, 0);
		end(&f);
		densify(&f);
		Node *cm = opset >= 15 ? nth(&f.b, "CastLike", 0) : nth(&f.b, "Cast", 0);
		ck_assert_int_eq(mb_count(&f.b, DENSE, "CastLike"), opset >= 15);
		ck_assert_str_eq(cm->input[0], f.r.wmask);
		if (opset >= 15)
			ck_assert_str_eq(cm->input[1], f.r.weights);
		else
			ck_assert_int_eq(g_attr_i(cm, "to", 0), FLOAT);
		Node *mw = use(&f.b, cm->output[0], "Mul");
		ck_assert_str_eq(mw->input[0], f.r.weights);
		dense_form(&f, mw->output[0]);
		tidy(&f);
		b_free(&f.b);
	}
}
END_TEST

/* Clones are named by their module path: where the template's names say
 * it, every level naming the expert is renamed (a fused module's
 * expert_projections.1/expert_projections.1.0); a name-free template's
 * clones get the exporter's form under the layer's scope. */
START_TEST(clone_names)
{
	Dx f;
	begin(&f, 17, "/model.11", 8);
	f.o.ids[0] = 1;
	f.o.nid = 1;
	f.o.esub = "/fused/expert_projections.{i}/expert_projections.{i}.0";
	f.sl = mb_spec("model.11", 8, 2);
	f.sl.expert = "fused.expert_projections.{i}";
	ck_plain(f.w, "model.11.fused.expert_projections.{i}.", 8, 0);
	end(&f);
	ck_assert_str_eq(f.L->pattern, "fused.expert_projections.{i}");
	densify(&f);
	const char *p = "/model.11/fused/expert_projections.5/expert_projections.5.0";
	Node *conv = named(&f.b, arena_printf(f.b.a, "%s/conv/Conv", p));
	ck_assert_str_eq(conv->output[0], arena_printf(f.b.a, "%s/conv/Conv_output_0", p));
	ck_assert_str_eq(conv->input[1], "model.11.fused.expert_projections.5.conv.weight");
	named(&f.b, arena_printf(f.b.a, "%s/act/Sigmoid", p));
	ck_assert_int_eq(mb_count(&f.b, "/model.11/fused/expert_projections.", "Conv"), 8);
	ck_assert_int_eq(f.lr.ninserted, 7);
	b_free(&f.b);

	begin(&f, 17, NULL, 4);
	ck_plain(f.w, "model.0.experts.{i}.", 4, 0);
	end(&f);
	ck_assert_ptr_null(f.L->pattern);
	densify(&f);
	for (int id = 1; id < 4; id += 2) {
		Node *n = named(&f.b, arena_printf(f.b.a, "/model.0/experts.%d/Conv", id));
		ck_assert_str_eq(n->output[0], arena_printf(f.b.a, "/model.0/experts.%d/Conv_output_0", id));
		named(&f.b, arena_printf(f.b.a, "/model.0/experts.%d/Sigmoid", id));
		named(&f.b, arena_printf(f.b.a, "/model.0/experts.%d/Mul", id));
	}
	tidy(&f);
	b_free(&f.b);
}
END_TEST

/* A Layer detected on an index since rebuilt holds nodes the index no
 * longer knows: refused, not rewritten. */
START_TEST(refuse_stale_layer)
{
	Dx f;
	begin(&f, 17, "/model.0", 4);
	ck_plain(f.w, "model.0.experts.{i}.", 4, 0);
	end(&f);
	size_t n = f.b.m->graph->n_node;
	ck_assert_int_eq(g_reindex(&f.b.c, &f.b.e), 0);
	ck_assert_int_eq(moe_densify(&f.b.c, f.L, f.w, &f.lr, &f.b.e), -1);
	tu_err_has(f.b.e.msg, "layer model.0: internal error: detected on an index since rebuilt");
	ck_assert_uint_eq(f.b.m->graph->n_node, n);
	b_free(&f.b);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("densify");
	TCase *tc = tcase_create("densify");
	tcase_add_test(tc, dense_per_opset);
	tcase_add_test(tc, dense_weight_cast);
	tcase_add_test(tc, dense_wmask);
	tcase_add_test(tc, clone_names);
	tcase_add_test(tc, refuse_stale_layer);
	suite_add_tcase(s, tc);
	return tu_run(s);
}
