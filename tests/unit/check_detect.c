/* Detection (passes/detect.c): moe_find on hand-built layers of each
 * dispatch form the exporters write (tests/unit/moebuild.h), asserting
 * every field of the Layer found; the dispatches no known form has are
 * refused, or, lenient, reported as FORM_UNKNOWN with why. */
#include <check.h>

#include "moebuild.h"
#include "testutil.h"

static Layer *find1(B *b, int lenient)
{
	Layer *L = NULL;
	size_t n = 0;
	ck_assert_msg(moe_find(&b->c, NULL, lenient, &L, &n, &b->e) == 0, "moe_find: %s", b->e.msg);
	ck_assert_uint_eq(n, 1);
	return L;
}

/* moe_find must find no layer. */
static void none_found(B *b, int lenient)
{
	Layer *L = NULL;
	size_t n = 1;
	ck_assert_int_eq(moe_find(&b->c, NULL, lenient, &L, &n, &b->e), 0);
	ck_assert_uint_eq(n, 0);
}

/* moe_find must refuse, saying want. */
static void refused(B *b, const char *want)
{
	Layer *L = NULL;
	size_t n = 0;
	ck_assert_int_eq(moe_find(&b->c, NULL, 0, &L, &n, &b->e), -1);
	tu_err_has(b->e.msg, want);
	/* Diagnosis (lenient): the same router is a layer that cannot be repaired. */
	char msg[sizeof b->e.msg];
	memcpy(msg, b->e.msg, sizeof msg);
	L = find1(b, 1);
	ck_assert_int_eq(L->form, FORM_UNKNOWN);
	ck_assert_ptr_nonnull(L->why);
	ck_assert_str_eq(L->why, msg);
	ck_assert_uint_eq(L->nex, 0);
}

/* Builds o's layer (its routed sum a graph output) and indexes it. */
static void build(MB *m, B *b, Lopt *o, Lres *r, int opset)
{
	mb_new(m, b, opset);
	mb_inputs(m, o->E);
	mb_layer(m, o, r);
	b_out(b, NULL, r->combined, FLOAT, NULL);
}

static const Expert *by_id(const Layer *L, int id)
{
	for (size_t k = 0; k < L->nex; k++)
		if (L->ex[k].id == id)
			return &L->ex[k];
	ck_abort_msg("expert %d not detected", id);
	return NULL;
}

/* What every form shares: the router, the values the dispatch reads, and
 * each present expert as the builder made it. */
static void same_layer(const B *b, const Layer *L, const Lopt *o, const Lres *r, int nnode)
{
	ck_assert_ptr_eq(L->topk, r->topk);
	ck_assert_str_eq(L->scope, r->topk->name);
	ck_assert_int_eq(L->topk_k, o->k);
	ck_assert_int_eq(L->width, o->E);
	ck_assert_str_eq(L->indices, r->indices);
	ck_assert_str_eq(L->weights, r->weights);
	ck_assert_str_eq(L->x, r->x);
	ck_assert_str_eq(L->combined, r->combined);
	ck_assert_int_eq(L->rank, 4);
	ck_assert_uint_eq(L->nex, (size_t)o->nid);
	ck_assert_int_eq(L->gen, b->c.gen);
	for (size_t k = 1; k < L->nex; k++)
		ck_assert_int_lt(L->ex[k - 1].id, L->ex[k].id); /* by id */
	for (int i = 0; i < o->nid; i++) {
		const Expert *x = by_id(L, o->ids[i]);
		const Xres *w = &r->ex[i];
		ck_assert_ptr_eq(x->eq, w->eq);
		ck_assert_str_eq(x->in, w->in);
		ck_assert_str_eq(x->out, w->out);
		ck_assert_str_eq(x->prod, w->prod);
		ck_assert_str_eq(x->mul->output[0], w->prod);
		ck_assert_ptr_eq(x->gate, w->gate);
		ck_assert_uint_eq(x->nnode, (size_t)nnode);
		/* The expert's nodes, in graph order: Conv first, its output last. */
		ck_assert_str_eq(x->node[0]->op_type, "Conv");
		ck_assert_str_eq(x->node[0]->input[1], w->w);
		ck_assert_str_eq(x->node[x->nnode - 1]->output[0], w->out);
	}
	ck_assert_int_eq(L->nodes, o->nid * nnode);
	ck_assert_int_eq(L->convs, o->nid);
}

static Lopt traced(void)
{
	return (Lopt){ .pfx = "/model.0", .E = 4, .k = 2, .ids = { 3, 0 }, .nid = 2 };
}

/* torch 1.13's trace of torch.where(mask) + index_add_: Equal -> NonZero
 * -> Transpose -> Split -> Squeeze x2, rows gathered, one weight per (row,
 * slot) from Flatten(W), scattered back (ScatterElements + Add). */
START_TEST(rows_traced)
{
	MB m;
	B b;
	Lopt o = traced();
	Lres r;
	build(&m, &b, &o, &r, 17);
	ck_assert_int_eq(b_index(&b), 0);
	Layer *L = find1(&b, 0);
	ck_assert_int_eq(L->form, FORM_ROWS);
	same_layer(&b, L, &o, &r, 3);
	ck_assert_ptr_null(L->wmask);
	ck_assert_int_eq(L->wcast, 0);
	ck_assert_int_eq(L->nif, 0);
	ck_assert_ptr_null(L->why);
	ck_assert_ptr_null(L->spec);
	ck_assert_ptr_eq(L->ex[0].g, b.c.g);
	/* The names: the router's module, the layer's and its experts'. */
	ck_assert_str_eq(L->topmodule, "model.0.router");
	ck_assert_str_eq(L->module, "model.0");
	ck_assert_str_eq(L->pattern, "experts.{i}");
	ck_assert_str_eq(L->named[0], "model.0.experts.0");
	ck_assert_str_eq(L->named[1], "model.0.experts.3");
	b_free(&b);

	/* Opset 11: Split's sizes and Squeeze's axes as attributes. */
	build(&m, &b, &o, &r, 11);
	ck_assert_int_eq(b_index(&b), 0);
	L = find1(&b, 0);
	ck_assert_int_eq(L->form, FORM_ROWS);
	same_layer(&b, L, &o, &r, 3);
	b_free(&b);

	/* The model reshapes the routed sum ([B*T,D] back to [B,T,D] in token
	 * layers): the value the dense sum replaces is the sum before the
	 * reshape, which must stay to give the rest of the model its shape. */
	mb_new(&m, &b, 17);
	mb_inputs(&m, o.E);
	mb_layer(&m, &o, &r);
	const char *rs = mb_op(&m, NULL, "/model.0", "Reshape", MB_J(&m, r.combined, mb_int(&m, NULL, "/model.0", "3", "2,2,-1")), "");
	b_out(&b, NULL, mb_op(&m, NULL, "/model.0", "Unsqueeze", MB_J(&m, rs, mb_int(&m, NULL, "/model.0", "1", "0")), ""), FLOAT, NULL);
	ck_assert_int_eq(b_index(&b), 0);
	ck_assert_str_eq(find1(&b, 0)->combined, r.combined);
	b_free(&b);
}
END_TEST

/* Mixtral's token dispatch: the match is row id of one_hot(indices,
 * E).permute(2, 1, 0), a [k,B] mask, so NonZero holds the slot first and
 * the row second; perm [2,0,1] keeps [B,k] and the usual order. */
START_TEST(rows_onehot)
{
	static const int opsets[] = { 17, 11 };
	for (int form = 1; form <= 2; form++)
		for (int coord = CO_SPLIT; coord <= CO_GATHER; coord++)
			for (size_t k = 0; k < 2; k++) {
				MB m;
				B b;
				Lopt o = traced();
				o.onehot = form;
				o.coord = coord;
				Lres r;
				build(&m, &b, &o, &r, opsets[k]);
				ck_assert_int_eq(b_index(&b), 0);
				Layer *L = find1(&b, 0);
				ck_assert_int_eq(L->form, FORM_ROWS);
				ck_assert_int_eq(L->rowc, form == 1);
				ck_assert_int_eq(L->rowax, 0);
				same_layer(&b, L, &o, &r, 3);
				b_free(&b);
			}
}
END_TEST

/* A one-hot that is no id match: values (1, 0) invert it; a pick of it
 * also summed (transformers' expert_hit) is used otherwise too. */
START_TEST(refuse_onehot_not_match)
{
	for (int summed = 0; summed < 2; summed++) {
		MB m;
		B b;
		Lopt o = traced();
		o.onehot = 1;
		o.onehot_values = summed ? NULL : "1,0";
		Lres r;
		build(&m, &b, &o, &r, 17);
		if (summed)
			b_out(&b, NULL, mb_op(&m, NULL, "/model.0", "ReduceSum", r.ex[0].eq->input[0], "keepdims=0"), INT64, NULL);
		ck_assert_int_eq(b_index(&b), 0);
		refused(&b, "through a dispatch no known form has");
		b_free(&b);
	}
}
END_TEST

/* The coordinates taken by Gather(Transpose(NonZero), j, axis 1) instead
 * of Split. */
START_TEST(rows_gather_coords)
{
	MB m;
	B b;
	Lopt o = traced();
	o.coord = CO_GATHER;
	Lres r;
	build(&m, &b, &o, &r, 17);
	ck_assert_int_eq(b_index(&b), 0);
	Layer *L = find1(&b, 0);
	ck_assert_int_eq(L->form, FORM_ROWS);
	same_layer(&b, L, &o, &r, 3);
	b_free(&b);
}
END_TEST

/* The weight gathered by GatherND(W, Concat(row, slot)). */
START_TEST(rows_gathernd)
{
	MB m;
	B b;
	Lopt o = traced();
	o.wgather = WG_ND;
	Lres r;
	build(&m, &b, &o, &r, 17);
	ck_assert_int_eq(b_index(&b), 0);
	Layer *L = find1(&b, 0);
	ck_assert_int_eq(L->form, FORM_ROWS);
	same_layer(&b, L, &o, &r, 3);
	b_free(&b);
}
END_TEST

/* Cast on both sides of the product (out.to(dtype) * w.to(dtype)): the
 * expert's Cast is part of the expert, the weight's is wcast. */
START_TEST(rows_cast)
{
	MB m;
	B b;
	Lopt o = traced();
	o.cast = 1;
	Lres r;
	build(&m, &b, &o, &r, 17);
	ck_assert_int_eq(b_index(&b), 0);
	Layer *L = find1(&b, 0);
	same_layer(&b, L, &o, &r, 4);
	ck_assert_int_eq(L->wcast, FLOAT);
	ck_assert_str_eq(L->ex[0].node[3]->op_type, "Cast");
	/* The Cast, named after the layer, does not hide the expert's module. */
	ck_assert_str_eq(L->module, "model.0");
	ck_assert_str_eq(L->pattern, "experts.{i}");
	b_free(&b);
}
END_TEST

/* A mask And(Equal, Greater(W, 0)): the condition is the layer's wmask. */
START_TEST(rows_wmask)
{
	MB m;
	B b;
	Lopt o = traced();
	o.wmask = 1;
	Lres r;
	build(&m, &b, &o, &r, 17);
	ck_assert_int_eq(b_index(&b), 0);
	Layer *L = find1(&b, 0);
	same_layer(&b, L, &o, &r, 3);
	ck_assert_ptr_nonnull(L->wmask);
	ck_assert_str_eq(L->wmask, r.wmask);
	b_free(&b);
}
END_TEST

/* Indices reshaped [B,k,1,1], then Reshape [1,-1], Slice and Cast before
 * the Equal: the indices are the view the dispatch compares. */
START_TEST(rows_index_view)
{
	MB m;
	B b;
	Lopt o = traced();
	o.idxview = 1;
	Lres r;
	build(&m, &b, &o, &r, 17);
	ck_assert_int_eq(b_index(&b), 0);
	Layer *L = find1(&b, 0);
	same_layer(&b, L, &o, &r, 3);
	ck_assert_str_ne(L->indices, r.topk->output[1]);
	ck_assert_str_eq(mb_defop(&b, L->indices), "Cast");
	b_free(&b);
}
END_TEST

/* torch.jit.script of a masksum layer: each expert behind
 * If(Cast(Greater(ReduceSum(Cast(Equal)), 0))), its then-branch
 * Mul(W, Cast(Equal)) -> ReduceSum(axis 1) -> Reshape -> Mul with the
 * expert on the whole input, Add to the previous If's output (zeros
 * first); the else-branch passes the previous on. */
START_TEST(masksum_scripted)
{
	MB m;
	B b;
	Lopt o = traced();
	o.form = F_MASKSUM;
	Lres r;
	for (int opset = 11; opset <= 17; opset += 6) {
		build(&m, &b, &o, &r, opset);
		ck_assert_int_eq(b_index(&b), 0);
		Layer *L = find1(&b, 0);
		ck_assert_int_eq(L->form, FORM_MASKSUM);
		same_layer(&b, L, &o, &r, 3);
		ck_assert_int_eq(L->nif, 2);
		ck_assert_ptr_nonnull(L->ex[0].gate);
		ck_assert_ptr_ne(L->ex[0].g, b.c.g); /* the expert lives in its If's then-branch */
		ck_assert_ptr_eq(L->ex[0].g->owner, L->ex[0].gate);
		ck_assert_str_eq(L->x, "x");
		ck_assert_str_eq(L->module, "model.0");
		ck_assert_str_eq(L->pattern, "experts.{i}");
		b_free(&b);
	}
}
END_TEST

/* Diagnosis says what is wrong with a layer: the experts missing, or,
 * with every one present, the NonZero row dispatch itself (ONNX Runtime
 * fails on an expert no row picks); a scripted layer's Ifs say it. */
static const char *scan_line(Lopt *o)
{
	static char buf[512];
	MB m;
	B b;
	Lres r;
	build(&m, &b, o, &r, 17);
	ck_assert_int_eq(b_index(&b), 0);
	Layer *L = NULL;
	size_t n = 0;
	ck_assert_msg(moe_find(&b.c, NULL, 1, &L, &n, &b.e) == 0, "moe_find: %s", b.e.msg);
	Report rep;
	memset(&rep, 0, sizeof rep);
	ck_assert_int_eq(moe_scan(&b.c, L, n, &rep, &b.e), 0);
	ck_assert(rep.damaged);
	FILE *f = fmemopen(buf, sizeof buf, "w");
	report_print(f, "m.onnx", &rep, RUN_DIAGNOSE, 0);
	fclose(f);
	b_free(&b);
	return buf;
}

START_TEST(scan_says_why)
{
	Lopt o = traced();
	ck_assert_str_eq(scan_line(&o), "m.onnx: model.0: 4 experts, top-2; present 0,3, missing 1,2; If gating experts 0; experts' Conv 2\n");
	o = (Lopt){ .pfx = "/model.0", .E = 4, .k = 2, .ids = { 3, 0, 2, 1 }, .nid = 4 };
	ck_assert_str_eq(scan_line(&o), "m.onnx: model.0: 4 experts, top-2; present 0,1,2,3, missing none; rows dispatched through NonZero; If gating experts 0; experts' Conv 4\n");
	o.form = F_MASKSUM;
	ck_assert_str_eq(scan_line(&o), "m.onnx: model.0: 4 experts, top-2; present 0,1,2,3; If gating experts 4; experts' Conv 4\n");
}
END_TEST

/* The traced dispatch inside the scripted If bodies (NonZero, gathers and
 * scatter in the then-branch, the Equal outside). */
START_TEST(rows_in_if_bodies)
{
	MB m;
	B b;
	Lopt o = traced();
	o.form = F_ROWS_IF;
	Lres r;
	build(&m, &b, &o, &r, 17);
	ck_assert_int_eq(b_index(&b), 0);
	Layer *L = find1(&b, 0);
	ck_assert_int_eq(L->form, FORM_ROWS);
	same_layer(&b, L, &o, &r, 3);
	ck_assert_int_eq(L->nif, 2);
	ck_assert_ptr_eq(L->ex[1].g->owner, L->ex[1].gate);
	b_free(&b);
}
END_TEST

/* A dense export: the indices pick the experts' outputs by GatherElements. */
START_TEST(dense_form)
{
	MB m;
	B b;
	mb_new(&m, &b, 17);
	mb_inputs(&m, 4);
	b_in(&b, NULL, "stack", FLOAT, "2,4,2,2,2");
	const char *sm = mb_op(&m, NULL, "/model.0/router", "Softmax", "scores", "axis=1");
	Node *t = mb_node(&m, NULL, "/model.0/router", "TopK", MB_J(&m, sm, mb_int(&m, NULL, NULL, "1", "2")), 2, "axis=1");
	const char *ij = mb_op(&m, NULL, "/model.0", "Gather", MB_J(&m, t->output[1], mb_int(&m, NULL, NULL, "", "0")), "axis=1");
	const char *ir = mb_op(&m, NULL, "/model.0", "Reshape", MB_J(&m, ij, mb_int(&m, NULL, NULL, "5", "-1,1,1,1,1")), "");
	const char *ie = mb_op(&m, NULL, "/model.0", "Expand", MB_J(&m, ir, mb_int(&m, NULL, NULL, "5", "2,1,2,2,2")), "");
	const char *ge = mb_op(&m, NULL, "/model.0", "GatherElements", MB_J(&m, "stack", ie), "axis=1");
	b_out(&b, NULL, ge, FLOAT, NULL);
	ck_assert_int_eq(b_index(&b), 0);
	Layer *L = find1(&b, 0);
	ck_assert_int_eq(L->form, FORM_DENSE);
	ck_assert_ptr_eq(L->topk, t);
	ck_assert_str_eq(L->indices, t->output[1]);
	ck_assert_uint_eq(L->nex, 0);
	ck_assert_int_eq(L->topk_k, 2);
	b_free(&b);
}
END_TEST

/* A dense layer whose router is its own node (/moe0/TopK) is named by
 * the router's parent, the root, as a MoE exported alone is; two such
 * layers in one model are two layers, each named by its own module. */
START_TEST(names_dense_own_router)
{
	for (int nl = 1; nl <= 2; nl++) {
		MB m;
		B b;
		mb_new(&m, &b, 17);
		mb_inputs(&m, 4);
		for (int i = 0; i < nl; i++) {
			const char *scope = i ? "/moe1" : "/moe0", *stack = i ? "stack1" : "stack0";
			b_in(&b, NULL, stack, FLOAT, "2,4,2,2,2");
			const char *sm = mb_op(&m, NULL, scope, "Softmax", "scores", "axis=1");
			Node *t = mb_node(&m, NULL, scope, "TopK", MB_J(&m, sm, mb_int(&m, NULL, NULL, "1", "2")), 2, "axis=1");
			const char *ij = mb_op(&m, NULL, scope, "Gather", MB_J(&m, t->output[1], mb_int(&m, NULL, NULL, "", "0")), "axis=1");
			const char *ir = mb_op(&m, NULL, scope, "Reshape", MB_J(&m, ij, mb_int(&m, NULL, NULL, "5", "-1,1,1,1,1")), "");
			const char *ie = mb_op(&m, NULL, scope, "Expand", MB_J(&m, ir, mb_int(&m, NULL, NULL, "5", "2,1,2,2,2")), "");
			b_out(&b, NULL, mb_op(&m, NULL, scope, "GatherElements", MB_J(&m, stack, ie), "axis=1"), FLOAT, NULL);
		}
		ck_assert_int_eq(b_index(&b), 0);
		Layer *L = NULL;
		size_t n = 0;
		ck_assert_msg(moe_find(&b.c, NULL, 0, &L, &n, &b.e) == 0, "moe_find: %s", b.e.msg);
		ck_assert_uint_eq(n, (size_t)nl);
		for (int i = 0; i < nl; i++) {
			ck_assert_int_eq(L[i].form, FORM_DENSE);
			ck_assert_str_eq(L[i].topmodule, i ? "moe1" : "moe0");
			ck_assert_str_eq(L[i].module, nl == 1 ? "" : L[i].topmodule);
		}
		b_free(&b);
	}
}
END_TEST

/* A gated fusion after the routed sum (YOLO-Master's cross gate): the
 * fused value adds a static path to the routed sum; only the accumulation
 * of exactly the weighted expert outputs is the routed sum. */
START_TEST(gated_fusion)
{
	MB m;
	B b;
	Lopt o = traced();
	Lres r;
	mb_new(&m, &b, 17);
	mb_inputs(&m, 4);
	mb_layer(&m, &o, &r);
	b_init(&b, NULL, "ws", FLOAT, "2,2,1,1", "1,0,0,1");
	const char *st = mb_op(&m, NULL, "/model.0/static", "Conv", "x,ws", "");
	const char *gate = mb_op(&m, NULL, "/model.0/gate", "Sigmoid", mb_op(&m, NULL, "/model.0/gate", "Add", MB_J(&m, st, r.combined), ""), "");
	const char *gs = mb_op(&m, NULL, "/model.0/gate", "Mul", MB_J(&m, st, gate), "");
	const char *fused = mb_op(&m, NULL, "/model.0/gate", "Add", MB_J(&m, r.combined, gs), "");
	b_out(&b, NULL, fused, FLOAT, NULL);
	ck_assert_int_eq(b_index(&b), 0);
	Layer *L = find1(&b, 0);
	ck_assert_str_eq(L->combined, r.combined);
	b_free(&b);
}
END_TEST

/* ES_MOE: the indices scatter a per-pixel routing map, whose columns
 * (Gather of a constant) go through NonZero; no Equal with an expert id. */
static void build_esmoe(MB *m, B *b, const char *router, const char *layer)
{
	mb_new(m, b, 17);
	mb_inputs(m, 4);
	b_init(b, NULL, "map0", FLOAT, "2,4", NULL);
	b_init(b, NULL, "ones", FLOAT, "2,2", "1,1,1,1");
	const char *sm = mb_op(m, NULL, router, "Softmax", "scores", "axis=1");
	Node *t = mb_node(m, NULL, router, "TopK", MB_J(m, sm, mb_int(m, NULL, NULL, "1", "2")), 2, "axis=1");
	const char *sc = mb_op(m, NULL, router, "ScatterElements", MB_J(m, "map0", t->output[1], "ones"), "axis=1");
	const char *col = mb_op(m, NULL, layer, "Gather", MB_J(m, sc, mb_int(m, NULL, NULL, "", "0")), "axis=1");
	b_out(b, NULL, mb_op(m, NULL, layer, "NonZero", col, ""), INT64, NULL);
	ck_assert_int_eq(b_index(b), 0);
}

START_TEST(refuse_no_expert_id)
{
	MB m;
	B b;
	build_esmoe(&m, &b, "/routing", "");
	refused(&b, "its indices reach NonZero '/NonZero' through a dispatch no known form has");
	tu_err_has(b.e.msg, "router '/routing/TopK'");
	b_free(&b);
}
END_TEST

/* DeepSeek's moe_infer: the indices sorted (argsort, a TopK of all of
 * them) to group the rows by expert, the runs cut by lengths the trace
 * baked in. No id comparison, and not healthy either. */
START_TEST(refuse_sorted_indices)
{
	MB m;
	B b;
	mb_new(&m, &b, 17);
	mb_inputs(&m, 4);
	const char *sm = mb_op(&m, NULL, "/mlp", "Softmax", "scores", "axis=1");
	Node *t = mb_node(&m, NULL, "/mlp", "TopK", MB_J(&m, sm, mb_int(&m, NULL, NULL, "1", "2")), 2, "axis=1");
	const char *flat = mb_op(&m, NULL, "/mlp", "Reshape", MB_J(&m, t->output[1], mb_int(&m, NULL, NULL, "1", "-1")), "");
	Node *sort = mb_node(&m, NULL, "/mlp", "TopK", MB_J(&m, flat, mb_int(&m, NULL, NULL, "1", "4")), 2, "axis=-1 largest=0");
	const char *rows = mb_op(&m, NULL, "/mlp", "Gather", MB_J(&m, "x", sort->output[1]), "axis=0");
	b_out(&b, NULL, rows, FLOAT, NULL);
	ck_assert_int_eq(b_index(&b), 0);
	refused(&b, "its indices reach TopK '/mlp/TopK");
	b_free(&b);
}
END_TEST

/* Top-1 by ArgMax (Switch style): its id compared with an expert's and
 * dispatched through NonZero to rows a weight computes with is refused; a
 * class filter whose kept rows meet no weight (after an NMS) is no MoE. */
START_TEST(refuse_argmax_router)
{
	for (int weighted = 0; weighted < 2; weighted++) {
		MB m;
		B b;
		mb_new(&m, &b, 17);
		mb_inputs(&m, 4);
		b_init(&b, NULL, "w2", FLOAT, "2,2", "1,0,0,1");
		const char *am = mb_op(&m, NULL, "/mlp", "ArgMax", "scores", "axis=1 keepdims=0");
		const char *eq = mb_op(&m, NULL, "/mlp", "Equal", MB_J(&m, am, mb_int(&m, NULL, NULL, "", "1")), "");
		const char *nz = mb_op(&m, NULL, "/mlp", "NonZero", eq, "");
		const char *rows = mb_op(&m, NULL, "/mlp", "Squeeze", MB_J(&m, nz, mb_int(&m, NULL, NULL, "1", "0")), "");
		const char *x2 = mb_op(&m, NULL, "/mlp", "Reshape", MB_J(&m, "x", mb_int(&m, NULL, NULL, "2", "2,-1")), "");
		const char *g = mb_op(&m, NULL, "/mlp", "Gather", MB_J(&m, x2, rows), "axis=0");
		const char *y = weighted ? mb_op(&m, NULL, "/mlp/experts.1", "MatMul", MB_J(&m, mb_op(&m, NULL, "/mlp", "Slice",
			MB_J(&m, g, mb_int(&m, NULL, NULL, "1", "0"), mb_int(&m, NULL, NULL, "1", "2"), mb_int(&m, NULL, NULL, "1", "1")), ""), "w2"), "") : g;
		b_out(&b, NULL, y, FLOAT, NULL);
		ck_assert_int_eq(b_index(&b), 0);
		if (weighted) {
			refused(&b, "router '/mlp/ArgMax': top-1 routing by ArgMax, its ids compared with expert 1 and dispatched through NonZero");
		} else {
			none_found(&b, 0);
		}
		b_free(&b);
	}
}
END_TEST

/* ES_MOE's export-time dense forward: the indices scatter a routing map
 * whose channels (cut by cut(), 4 experts) each multiply an expert's
 * output; the routed sum is their accumulation. */
static void build_wmap(MB *m, B *b, const char *(*cut)(MB *, const char *))
{
	mb_new(m, b, 17);
	mb_inputs(m, 4);
	b_init(b, NULL, "map0", FLOAT, "2,4", NULL);
	b_init(b, NULL, "ones", FLOAT, "2,2", "1,1,1,1");
	const char *sm = mb_op(m, NULL, "/model.3/router", "Softmax", "scores", "axis=1");
	Node *t = mb_node(m, NULL, "/model.3/router", "TopK", MB_J(m, sm, mb_int(m, NULL, NULL, "1", "2")), 2, "axis=1");
	const char *wm = mb_op(m, NULL, "/model.3/router", "ScatterElements", MB_J(m, "map0", t->output[1], "ones"), "axis=1");
	b_out(b, NULL, cut(m, wm), FLOAT, NULL);
	ck_assert_int_eq(b_index(b), 0);
}

/* Channel c of map [2,4] times expert c's output (a Conv of x). */
static const char *weigh(MB *m, const char *ch, int c)
{
	const char *w = arena_printf(m->b->a, "w%d", c);
	b_init(m->b, NULL, w, FLOAT, "2,2,1,1", NULL);
	const char *y = mb_op(m, NULL, arena_printf(m->b->a, "/model.3/experts.%d", c), "Conv", MB_J(m, "x", w), "");
	const char *r = mb_op(m, NULL, "/model.3", "Reshape", MB_J(m, ch, mb_int(m, NULL, NULL, "4", "2,1,1,1")), "");
	return mb_op(m, NULL, "/model.3", "Mul", MB_J(m, y, r), "");
}

/* sizes NULL: read at run time, from an input. */
static const char *sum_split(MB *m, const char *map, const char *sizes, int nout)
{
	if (!sizes)
		b_in(m->b, NULL, "sizes", INT64, "4");
	const char *sz = sizes ? mb_int(m, NULL, NULL, "4", sizes) : "sizes";
	Node *sp = mb_node(m, NULL, "/model.3", "Split", MB_J(m, map, sz), nout, "axis=1");
	const char *acc = NULL;
	for (int i = 0; i < nout; i++) {
		const char *p = weigh(m, sp->output[i], i);
		acc = acc ? mb_op(m, NULL, "/model.3", "Add", MB_J(m, acc, p), "") : p;
	}
	return acc;
}

static const char *unit_split4(MB *m, const char *map) { return sum_split(m, map, "1,1,1,1", 4); }
static const char *wide_split4(MB *m, const char *map) { return sum_split(m, map, "1,1,2,0", 4); }
static const char *input_split4(MB *m, const char *map) { return sum_split(m, map, NULL, 4); }

/* Channels 1 and 3 alone, by Gather (3 as -1): the tracer kept the
 * dummy's choice. */
static const char *two_channels(MB *m, const char *map)
{
	const char *g1 = mb_op(m, NULL, "/model.3", "Gather", MB_J(m, map, mb_int(m, NULL, NULL, "1", "1")), "axis=1");
	const char *g3 = mb_op(m, NULL, "/model.3", "Gather", MB_J(m, map, mb_int(m, NULL, NULL, "1", "-1")), "axis=1");
	return mb_op(m, NULL, "/model.3", "Add", MB_J(m, weigh(m, g1, 1), weigh(m, g3, 3)), "");
}

START_TEST(weight_map_whole)
{
	MB m;
	B b;
	build_wmap(&m, &b, unit_split4);
	Layer *L = find1(&b, 0);
	ck_assert_int_eq(L->form, FORM_DENSE);
	ck_assert_int_eq(L->width, 4);
	ck_assert_int_eq(L->topk_k, 2);
	b_free(&b);
}
END_TEST

/* A Split whose parts are not one channel each, or whose sizes are known
 * only at run time, cuts no expert's channel: the map covers no expert,
 * and the TopK is no router found. */
START_TEST(weight_map_wide_split)
{
	const char *(*cut[])(MB *, const char *) = { wide_split4, input_split4 };
	for (size_t i = 0; i < 2; i++) {
		MB m;
		B b;
		build_wmap(&m, &b, cut[i]);
		none_found(&b, 1);
		b_free(&b);
	}
}
END_TEST

START_TEST(weight_map_missing_channels)
{
	MB m;
	B b;
	build_wmap(&m, &b, two_channels);
	refused(&b, "only 2 of its 4 experts are weighted in the graph");
	tu_err_has(b.e.msg, "expert 0 has none");
	b_free(&b);
}
END_TEST

/* A layer that cannot be repaired is still named, for the diagnosis, by
 * the module holding its router: the router's parent, unless the router
 * is a node of the layer's own module, as ES_MOE's /model.3/TopK is (the
 * label was "model", the list holding every layer). */
START_TEST(names_unknown_form)
{
	static const struct {
		const char *router, *layer, *module;
	} cs[] = {
		{ "/model.3", "/model.3", "model.3" },
		{ "/model.5/routing", "/model.5", "model.5" },
		{ "/model.4/m.0/gate", "/model.4/m.0", "model.4.m.0" },
	};
	for (size_t i = 0; i < sizeof cs / sizeof *cs; i++) {
		MB m;
		B b;
		build_esmoe(&m, &b, cs[i].router, cs[i].layer);
		Layer *L = find1(&b, 1);
		ck_assert_int_eq(L->form, FORM_UNKNOWN);
		ck_assert_ptr_nonnull(L->module);
		ck_assert_str_eq(L->module, cs[i].module);
		b_free(&b);
	}
}
END_TEST

/* The match read by an op no dispatch form has (a Where). */
START_TEST(refuse_mask_unknown_op)
{
	MB m;
	B b;
	Lopt o = traced();
	Lres r;
	build(&m, &b, &o, &r, 17);
	b_init(&b, NULL, "one", FLOAT, "1", "1");
	b_out(&b, NULL, mb_op(&m, NULL, "/model.0", "Where", MB_J(&m, r.ex[1].eq->output[0], "one", "one"), ""), FLOAT, NULL);
	ck_assert_int_eq(b_index(&b), 0);
	refused(&b, "expert 0's dispatch mask reaches node '/model.0/Where' (Where), which no known dispatch form has");
	b_free(&b);
}
END_TEST

/* The NonZero's rows gather two different tensors: which one the expert
 * reads cannot be told. */
START_TEST(refuse_two_row_gathers)
{
	MB m;
	B b;
	Lopt o = traced();
	Lres r;
	build(&m, &b, &o, &r, 17);
	b_in(&b, NULL, "x2", FLOAT, "2,2,2,2");
	b_out(&b, NULL, mb_op(&m, NULL, "/model.0", "Gather", MB_J(&m, "x2", r.ex[0].row), "axis=0"), FLOAT, NULL);
	ck_assert_int_eq(b_index(&b), 0);
	refused(&b, "expert 3 gathers rows of two tensors");
	tu_err_has(b.e.msg, "'x'");
	tu_err_has(b.e.msg, "'x2'");
	b_free(&b);
}
END_TEST

/* A weight gathered by the row alone (row*k, no slot): not one weight per
 * chosen slot. */
START_TEST(refuse_weight_by_rows_only)
{
	MB m;
	B b;
	Lopt o = traced();
	o.wgather = WG_ROWONLY;
	Lres r;
	build(&m, &b, &o, &r, 17);
	ck_assert_int_eq(b_index(&b), 0);
	refused(&b, "(Gather) in a way no known dispatch form does");
	b_free(&b);
}
END_TEST

/* A name-free export (every node "<Op>_<N>", values numbered): the same
 * layer, and no module or pattern. */
START_TEST(name_free)
{
	MB m;
	B b;
	for (int form = F_ROWS; form <= F_MASKSUM; form++) {
		Lopt o = traced();
		o.pfx = NULL;
		o.form = form;
		Lres r;
		build(&m, &b, &o, &r, 17);
		ck_assert_int_eq(b_index(&b), 0);
		Layer *L = find1(&b, 0);
		ck_assert_int_eq(L->form, form == F_MASKSUM ? FORM_MASKSUM : FORM_ROWS);
		same_layer(&b, L, &o, &r, 3);
		ck_assert_str_eq(L->scope, r.topk->name);
		ck_assert_msg(strncmp(L->scope, "TopK_", 5) == 0, "%s", L->scope);
		ck_assert_ptr_null(L->module);
		ck_assert_ptr_null(L->pattern);
		ck_assert_ptr_null(L->named);
		ck_assert_ptr_null(L->topmodule);
		b_free(&b);
	}
	/* A named export stripped of its names detects alike. */
	Lopt o = traced();
	Lres r;
	build(&m, &b, &o, &r, 17);
	mb_strip(&m, b.m->graph);
	ck_assert_int_eq(b_index(&b), 0);
	Layer *L = find1(&b, 0);
	same_layer(&b, L, &o, &r, 3);
	ck_assert_ptr_null(L->module);
	ck_assert_ptr_null(L->pattern);
	b_free(&b);
}
END_TEST

/* Nested scopes, as torch names a layer deep in a model
 * (/model.4/m.0/m.0.0/mlp/experts.1/...): the repeated levels read once. */
START_TEST(names_nested_scope)
{
	MB m;
	B b;
	Lopt o = traced();
	o.pfx = "/model.4/m.0/m.0.0/mlp";
	Lres r;
	build(&m, &b, &o, &r, 17);
	ck_assert_int_eq(b_index(&b), 0);
	Layer *L = find1(&b, 0);
	same_layer(&b, L, &o, &r, 3);
	ck_assert_str_eq(L->module, "model.4.m.0.0.mlp");
	ck_assert_str_eq(L->pattern, "experts.{i}");
	ck_assert_str_eq(L->named[1], "model.4.m.0.0.mlp.experts.3");
	ck_assert_str_eq(L->topmodule, "model.4.m.0.0.mlp.router");
	b_free(&b);
}
END_TEST

/* A MoE exported alone: the router is /TopK, the experts /experts.N/...:
 * the layer is the root module, "". */
START_TEST(names_root_module)
{
	MB m;
	B b;
	Lopt o = traced();
	o.pfx = "";
	o.topk = "/TopK";
	Lres r;
	build(&m, &b, &o, &r, 17);
	ck_assert_int_eq(b_index(&b), 0);
	Layer *L = find1(&b, 0);
	same_layer(&b, L, &o, &r, 3);
	ck_assert_str_eq(L->scope, "/TopK");
	ck_assert_str_eq(L->topmodule, "");
	ck_assert_str_eq(L->module, "");
	ck_assert_str_eq(L->pattern, "experts.{i}");
	ck_assert_str_eq(L->named[0], "experts.0");
	b_free(&b);
}
END_TEST

/* snprintf's contract: the whole length back, what fits written, ended. */
START_TEST(expert_path_lengths)
{
	char b[64];
	SpecLayer l = { .scope = "model.8" };
	ck_assert_int_eq(expert_path_to(b, sizeof b, &l, 12), 18);
	ck_assert_str_eq(b, "model.8.experts.12");
	ck_assert_int_eq(expert_path_to(b, sizeof b, &l, 3), 17);
	ck_assert_str_eq(b, "model.8.experts.3");
	ck_assert_int_eq(expert_path_to(b, sizeof b, &l, 0), 17);
	ck_assert_str_eq(b, "model.8.experts.0");
	ck_assert_int_eq(expert_path_to(b, sizeof b, &l, 10), 18);
	ck_assert_str_eq(b, "model.8.experts.10");
	ck_assert_int_eq(expert_path_to(b, sizeof b, &l, 2147483647), 26);
	ck_assert_str_eq(b, "model.8.experts.2147483647");
	ck_assert_int_eq(expert_path_to(b, 6, &l, 12), 18);
	ck_assert_str_eq(b, "model");
	ck_assert_int_eq(expert_path_to(b, 17, &l, 12), 18);
	ck_assert_str_eq(b, "model.8.experts.");
	b[0] = 'x';
	ck_assert_int_eq(expert_path_to(b, 0, &l, 12), 18);
	ck_assert_int_eq(b[0], 'x');
	l = (SpecLayer){ .scope = "", .expert = "fused.{i}.proj" };
	ck_assert_int_eq(expert_path_to(b, sizeof b, &l, 105), 14);
	ck_assert_str_eq(b, "fused.105.proj");
	l = (SpecLayer){ .scope = "m", .expert = "shared" };
	ck_assert_int_eq(expert_path_to(b, sizeof b, &l, 7), 8);
	ck_assert_str_eq(b, "m.shared");
}
END_TEST

int main(void)
{
	Suite *s = suite_create("detect");
	TCase *tc = tcase_create("forms");
	tcase_add_test(tc, rows_traced);
	tcase_add_test(tc, rows_gather_coords);
	tcase_add_test(tc, rows_onehot);
	tcase_add_test(tc, refuse_onehot_not_match);
	tcase_add_test(tc, rows_gathernd);
	tcase_add_test(tc, rows_cast);
	tcase_add_test(tc, rows_wmask);
	tcase_add_test(tc, rows_index_view);
	tcase_add_test(tc, masksum_scripted);
	tcase_add_test(tc, rows_in_if_bodies);
	tcase_add_test(tc, dense_form);
	tcase_add_test(tc, names_dense_own_router);
	tcase_add_test(tc, gated_fusion);
	suite_add_tcase(s, tc);
	tc = tcase_create("refusals");
	tcase_add_test(tc, refuse_no_expert_id);
	tcase_add_test(tc, refuse_sorted_indices);
	tcase_add_test(tc, refuse_argmax_router);
	tcase_add_test(tc, weight_map_whole);
	tcase_add_test(tc, weight_map_wide_split);
	tcase_add_test(tc, weight_map_missing_channels);
	tcase_add_test(tc, refuse_mask_unknown_op);
	tcase_add_test(tc, refuse_two_row_gathers);
	tcase_add_test(tc, refuse_weight_by_rows_only);
	suite_add_tcase(s, tc);
	tc = tcase_create("names");
	tcase_add_test(tc, name_free);
	tcase_add_test(tc, names_nested_scope);
	tcase_add_test(tc, names_root_module);
	tcase_add_test(tc, names_unknown_form);
	tcase_add_test(tc, scan_says_why);
	tcase_add_test(tc, expert_path_lengths);
	suite_add_tcase(s, tc);
	return tu_run(s);
}
