/* Tiny MoE layers as the exporters write them, for the unit tests of the
 * MoE passes (check_detect, check_wmap, check_densify, check_bind), built
 * on gbuild.h; and a checkpoint held in memory (a WSrc filled without a
 * file).
 *
 * A layer: router scores [2,E] -> Softmax -> TopK(K) -> for each present
 * expert, the dispatch of one exporter form -> the routed sum. An expert is
 * Conv 1x1 (C=2 -> 2, with bias) + SiLU (Sigmoid * x) on rows of x
 * [2,2,2,2]. Names follow the exporter: torch >= 1.13 names nodes by
 * module path ("/model.0/experts.1/conv/Conv", values "<node>_output_0");
 * a name-free export (old exporters, renaming tools) names every node
 * "<Op>_<N>" and numbers the values.
 *
 *   MB m; B b;
 *   mb_new(&m, &b, 17);
 *   mb_inputs(&m, 4);                      // x [2,2,2,2], scores [2,4]
 *   Lopt o = { .pfx = "/model.0", .E = 4, .k = 2, .ids = { 0, 3 }, .nid = 2 };
 *   Lres r;
 *   mb_layer(&m, &o, &r);                   // r: the values detection should find
 *   b_out(&b, NULL, r.combined, FLOAT, NULL);
 *   b_index(&b);
 */
#ifndef MOEBUILD_H
#define MOEBUILD_H
#include <stdio.h>

#include "gbuild.h"
#include "moe.h"
#include "wsrc.h"

typedef struct {
	B *b;
	Map used; /* node names handed out */
	int seq;  /* numbers name-free names and suffixes taken names */
} MB;

static inline void mb_new(MB *m, B *b, int opset)
{
	b_new(b, opset);
	m->b = b;
	map_init(&m->used, b->a, 64);
	m->seq = 100;
}

static inline int mb_opset(const MB *m)
{
	return (int)m->b->m->opset_import[0]->version;
}

/* A node in g (NULL: the main graph) under the name prefix pfx (NULL:
 * name-free) with nout outputs: "<pfx>/<Op>" ("_N" added when taken), its
 * outputs "<name>_output_<j>"; name-free "<Op>_<N>", outputs numbered. */
static inline Node *mb_node(MB *m, Onnx__GraphProto *g, const char *pfx, const char *op, const char *ins, int nout,
			    const char *attrs)
{
	Arena *a = m->b->a;
	const char *name;
	if (pfx) {
		name = arena_printf(a, "%s/%s", pfx, op);
		if (map_get(&m->used, name))
			name = arena_printf(a, "%s/%s_%d", pfx, op, m->seq++);
	} else {
		name = arena_printf(a, "%s_%d", op, m->seq++);
	}
	map_put(&m->used, name, (void *)1);
	const char *outs = "";
	for (int j = 0; j < nout; j++) {
		const char *o = pfx ? arena_printf(a, "%s_output_%d", name, j) : arena_printf(a, "%d", m->seq++);
		outs = j ? arena_printf(a, "%s,%s", outs, o) : o;
	}
	Node *n = b_node(m->b, g, op, ins, outs, attrs);
	n->name = (char *)name;
	return n;
}

static inline const char *mb_op(MB *m, Onnx__GraphProto *g, const char *pfx, const char *op, const char *ins,
				const char *attrs)
{
	return mb_node(m, g, pfx, op, ins, 1, attrs)->output[0];
}

/* An int64 Constant (dims "" for a scalar), as the exporter emits them. */
static inline const char *mb_int(MB *m, Onnx__GraphProto *g, const char *pfx, const char *dims, const char *vals)
{
	return mb_op(m, g, pfx, "Constant", "", arena_printf(m->b->a, "value=t:7:%s:%s", dims, vals));
}

#define MB_J(m, ...) mb_join((m)->b->a, (const char *[]){ __VA_ARGS__, NULL })
static inline const char *mb_join(Arena *a, const char **v)
{
	const char *s = v[0];
	for (size_t i = 1; v[i]; i++)
		s = arena_printf(a, "%s,%s", s, v[i]);
	return s;
}

/* Unsqueeze / Squeeze of one axis: an attribute before opset 13, an input
 * from 13. */
static inline const char *mb_axis(MB *m, Onnx__GraphProto *g, const char *pfx, const char *op, const char *x, int axis)
{
	if (mb_opset(m) >= 13)
		return mb_op(m, g, pfx, op, MB_J(m, x, mb_int(m, g, pfx, "1", arena_printf(m->b->a, "%d", axis))), "");
	return mb_op(m, g, pfx, op, x, arena_printf(m->b->a, "axes=[%d]", axis));
}

/* pat with every "{i}" replaced by id. */
static inline const char *mb_subst(Arena *a, const char *pat, int id)
{
	const char *s = "", *p;
	while ((p = strstr(pat, "{i}"))) {
		s = arena_printf(a, "%s%.*s%d", s, (int)(p - pat), pat, id);
		pat = p + 3;
	}
	return arena_printf(a, "%s%s", s, pat);
}

/* The layer input x [2,2,2,2], the router scores [2,E] and the zeros the
 * traced dispatch scatters into. */
static inline void mb_inputs(MB *m, int E)
{
	b_in(m->b, NULL, "x", FLOAT, "2,2,2,2");
	b_in(m->b, NULL, "scores", FLOAT, arena_printf(m->b->a, "2,%d", E));
	b_init(m->b, NULL, "zeros", FLOAT, "2,2,2,2", NULL);
}

/* Dispatch forms and their variants. */
enum { F_ROWS, F_ROWS_IF, F_MASKSUM };
enum { CO_SPLIT, CO_GATHER };        /* NonZero's coordinates: Split + Squeeze, or Gather(.., j, axis 1) */
enum { WG_FLAT, WG_ND, WG_ROWONLY }; /* the weight gather: Flatten + Gather(slot + row*k), GatherND, or rows only */

typedef struct {
	const char *pfx;   /* node-name prefix of the layer ("/model.0"); NULL: name-free */
	const char *topk;  /* the router TopK's name; default "<pfx>/router/TopK" */
	const char *esub;  /* an expert's path under pfx, "{i}" its id; default "/experts.{i}" */
	int form, coord, wgather;
	int E, k;
	int ids[8], nid;   /* experts present, in dispatch order */
	int cast;          /* Cast on both sides of the weighted product */
	int wmask;         /* the match And-ed with Greater(W, 0) */
	int idxview;       /* indices reshaped [2,k,1,1], Reshape [1,-1], Slice, Cast before the Equal */
	int onehot;        /* the match a Gather(Transpose(OneHot(indices, E)), id) instead of an Equal
	                    * (Mixtral): 1, perm [2,1,0] ([k,B] masks: NonZero gives slot, row);
	                    * 2, perm [2,0,1] ([B,k]); onehot_values: its (off, on), default "0,1" */
	const char *onehot_values;
	const char *x, *scores, *zeros; /* default "x", "scores", "zeros" (mb_inputs) */
	const char *wname, *bname;      /* the experts' Conv weight and bias initializers, "{i}" the id;
	                                 * default "onnx::Conv_w{i}", "onnx::Conv_b{i}" (a fused export) */
	const char *wv[8], *bv[8];      /* their values by id; default mb_wval / mb_bval */
	double seed;                    /* for the default values */
} Lopt;

typedef struct {
	Node *eq, *gate;
	const char *in, *out, *prod, *row, *slot, *w, *bias;
} Xres;

typedef struct {
	Node *topk;
	const char *indices, *weights, *wmask, *x, *combined;
	Xres ex[8];
} Lres;

/* Default expert weights, exact in float and float16: the values a
 * checkpoint built with the same seed holds (ck_plain). */
static inline float mb_wv(double seed, int id, int j)
{
	return (float)(seed + 0.5 * (id + 1) + 0.125 * j);
}

static inline float mb_bv(double seed, int id, int j)
{
	return (float)(seed - 0.25 * (id + 1) + 0.0625 * j);
}

static inline const char *mb_floats(Arena *a, const float *v, size_t n)
{
	const char *s = "";
	for (size_t i = 0; i < n; i++)
		s = arena_printf(a, "%s%s%.9g", s, i ? "," : "", v[i]);
	return s;
}

/* Expert id: Conv + SiLU on xin, in g. */
static inline const char *mb_expert(MB *m, Onnx__GraphProto *g, const Lopt *o, int id, const char *xin, Xres *x)
{
	Arena *a = m->b->a;
	const char *es = o->pfx ? arena_printf(a, "%s%s", o->pfx, mb_subst(a, o->esub ? o->esub : "/experts.{i}", id)) : NULL;
	float wv[4], bv[2];
	for (int j = 0; j < 4; j++)
		wv[j] = mb_wv(o->seed, id, j);
	for (int j = 0; j < 2; j++)
		bv[j] = mb_bv(o->seed, id, j);
	x->w = mb_subst(a, o->wname ? o->wname : "onnx::Conv_w{i}", id);
	x->bias = mb_subst(a, o->bname ? o->bname : "onnx::Conv_b{i}", id);
	b_init(m->b, NULL, x->w, FLOAT, "2,2,1,1", o->wv[id] ? o->wv[id] : mb_floats(a, wv, 4));
	b_init(m->b, NULL, x->bias, FLOAT, "2", o->bv[id] ? o->bv[id] : mb_floats(a, bv, 2));
	const char *conv = mb_op(m, g, es ? arena_printf(a, "%s/conv", es) : NULL, "Conv", MB_J(m, xin, x->w, x->bias), "");
	const char *act = es ? arena_printf(a, "%s/act", es) : NULL;
	const char *sg = mb_op(m, g, act, "Sigmoid", conv, "");
	return mb_op(m, g, act, "Mul", MB_J(m, conv, sg), "");
}

/* The traced dispatch of expert o->ids[i] in g, as torch.where(mask) +
 * index_add_ trace (torch 1.13): NonZero of the match, its coordinates
 * (row, slot), the expert on the gathered rows, one weight per (row,
 * slot), the weighted rows scattered into zeros and added to acc.
 * Returns the new partial sum. */
static inline const char *mb_rows(MB *m, Onnx__GraphProto *g, const Lopt *o, Lres *r, int i, const char *mask,
				  const char *acc)
{
	const char *p = o->pfx;
	Xres *x = &r->ex[i];
	const char *nz = mb_op(m, g, p, "NonZero", mask, "");
	const char *tr = mb_op(m, g, p, "Transpose", nz, "perm=[1,0]");
	int rc = o->onehot == 1; /* the row's coordinate */
	if (o->coord == CO_GATHER) {
		x->row = mb_op(m, g, p, "Gather", MB_J(m, tr, mb_int(m, g, p, "", rc ? "1" : "0")), "axis=1");
		x->slot = mb_op(m, g, p, "Gather", MB_J(m, tr, mb_int(m, g, p, "", rc ? "0" : "1")), "axis=1");
	} else {
		Node *s = mb_opset(m) >= 13 ? mb_node(m, g, p, "Split", MB_J(m, tr, mb_int(m, g, p, "2", "1,1")), 2, "axis=1")
					    : mb_node(m, g, p, "Split", tr, 2, "axis=1 split=[1,1]");
		x->row = mb_axis(m, g, p, "Squeeze", s->output[rc], 1);
		x->slot = mb_axis(m, g, p, "Squeeze", s->output[1 - rc], 1);
	}
	x->in = mb_op(m, g, p, "Gather", MB_J(m, o->x, x->row), "axis=0");
	const char *y = mb_expert(m, g, o, o->ids[i], x->in, x);
	const char *wg;
	if (o->wgather == WG_ND) {
		const char *ur = mb_axis(m, g, p, "Unsqueeze", x->row, 1), *us = mb_axis(m, g, p, "Unsqueeze", x->slot, 1);
		wg = mb_op(m, g, p, "GatherND", MB_J(m, r->weights, mb_op(m, g, p, "Concat", MB_J(m, ur, us), "axis=1")), "");
	} else {
		const char *sh = mb_op(m, g, p, "Shape", r->weights, "");
		const char *d1 = mb_op(m, g, p, "Gather", MB_J(m, sh, mb_int(m, g, p, "", "1")), "axis=0");
		const char *fl = mb_op(m, g, p, "Flatten", r->weights, "axis=2");
		const char *mu = mb_op(m, g, p, "Mul", MB_J(m, x->row, d1), "");
		const char *ix = o->wgather == WG_ROWONLY ? mu : mb_op(m, g, p, "Add", MB_J(m, x->slot, mu), "");
		wg = mb_op(m, g, p, "Gather", MB_J(m, fl, ix), "axis=0");
	}
	const char *wr = mb_op(m, g, p, "Reshape", MB_J(m, wg, mb_int(m, g, p, "4", "-1,1,1,1")), "");
	if (o->cast) {
		y = mb_op(m, g, p, "Cast", y, "to=1");
		wr = mb_op(m, g, p, "Cast", wr, "to=1");
	}
	x->out = y;
	x->prod = mb_op(m, g, p, "Mul", MB_J(m, y, wr), "");
	const char *ex = mb_op(m, g, p, "Expand", MB_J(m, x->prod, mb_int(m, g, p, "4", "1,1,1,1")), "");
	const char *u = mb_axis(m, g, p, "Unsqueeze", mb_axis(m, g, p, "Unsqueeze", mb_axis(m, g, p, "Unsqueeze", x->row, 1), 2), 3);
	const char *ie = mb_op(m, g, p, "Expand", MB_J(m, u, mb_op(m, g, p, "Shape", ex, "")), "");
	const char *sc = mb_op(m, g, p, "ScatterElements", MB_J(m, o->zeros ? o->zeros : "zeros", ie, ex), "axis=0");
	return mb_op(m, g, p, "Add", MB_J(m, acc, sc), "");
}

/* The scripted form's then-branch (torch.jit.script of a masksum MoE):
 * the expert on the whole input weighted by sum_j W[:,j]*(I[:,j]==id). */
static inline const char *mb_masksum(MB *m, Onnx__GraphProto *g, const Lopt *o, Lres *r, int i, const char *match,
				     const char *acc)
{
	const char *p = o->pfx;
	Xres *x = &r->ex[i];
	const char *mw = mb_op(m, g, p, "Mul", MB_J(m, r->weights, match), "");
	const char *rs = mb_opset(m) >= 13 ? mb_op(m, g, p, "ReduceSum", MB_J(m, mw, mb_int(m, g, p, "1", "1")), "keepdims=0")
					   : mb_op(m, g, p, "ReduceSum", mw, "axes=[1] keepdims=0");
	x->in = o->x;
	x->out = mb_expert(m, g, o, o->ids[i], o->x, x);
	const char *rr = mb_op(m, g, p, "Reshape", MB_J(m, rs, mb_int(m, g, p, "4", "-1,1,1,1")), "");
	x->prod = mb_op(m, g, p, "Mul", MB_J(m, x->out, rr), "");
	return mb_op(m, g, p, "Add", MB_J(m, acc, x->prod), "");
}

/* If(Cast(Greater(ReduceSum(Cast(match)), 0))) { dispatch } else
 * { Identity(acc) }, as scripted exports gate each expert: the then-branch
 * is the masksum form, or the traced rows form (o->form). */
static inline const char *mb_gate(MB *m, const Lopt *o, Lres *r, int i, const char *eq, int cast_to)
{
	const char *p = o->pfx;
	const char *c = mb_op(m, NULL, p, "Cast", eq, arena_printf(m->b->a, "to=%d", cast_to));
	const char *rs = mb_op(m, NULL, p, "ReduceSum", c, "keepdims=0");
	const char *zero = cast_to == FLOAT ? mb_op(m, NULL, p, "Constant", "", "value=t:1::0") : mb_int(m, NULL, p, "", "0");
	const char *gt = mb_op(m, NULL, p, "Greater", MB_J(m, rs, zero), "");
	const char *cb = mb_op(m, NULL, p, "Cast", gt, "to=9");
	const char *acc = i ? r->combined : o->zeros ? o->zeros : "zeros";
	Onnx__GraphProto *th = b_graph(m->b, "then"), *el = b_graph(m->b, "else");
	const char *sum = o->form == F_MASKSUM ? mb_masksum(m, th, o, r, i, c, acc) : mb_rows(m, th, o, r, i, eq, acc);
	b_out(m->b, th, sum, FLOAT, NULL);
	b_out(m->b, el, mb_op(m, el, p, "Identity", acc, ""), FLOAT, NULL);
	Node *f = mb_node(m, NULL, p, "If", cb, 1, "");
	b_attr_g(m->b, f, "then_branch", th);
	b_attr_g(m->b, f, "else_branch", el);
	r->ex[i].gate = f;
	return f->output[0];
}

/* A layer of o's form; r gets the values and nodes detection should find. */
static inline void mb_layer(MB *m, Lopt *o, Lres *r)
{
	Arena *a = m->b->a;
	memset(r, 0, sizeof *r);
	if (!o->x)
		o->x = "x";
	r->x = o->x;
	const char *p = o->pfx, *rp = p ? arena_printf(a, "%s/router", p) : NULL;
	const char *sm = mb_op(m, NULL, rp, "Softmax", o->scores ? o->scores : "scores", "axis=1");
	r->topk = mb_node(m, NULL, rp, "TopK", MB_J(m, sm, mb_int(m, NULL, rp, "1", arena_printf(a, "%d", o->k))), 2,
			  "axis=1 largest=1 sorted=1");
	if (o->topk)
		r->topk->name = (char *)o->topk;
	r->weights = r->topk->output[0];
	r->indices = r->topk->output[1];
	if (o->idxview) {
		const char *v4 = mb_op(m, NULL, p, "Reshape",
				       MB_J(m, r->indices, mb_int(m, NULL, p, "4", arena_printf(a, "2,%d,1,1", o->k))), "");
		const char *vf = mb_op(m, NULL, p, "Reshape", MB_J(m, v4, mb_int(m, NULL, p, "2", "1,-1")), "");
		const char *sl = mb_op(m, NULL, p, "Slice",
				       MB_J(m, vf, mb_int(m, NULL, p, "1", "0"), mb_int(m, NULL, p, "1", arena_printf(a, "%d", 2 * o->k)),
					    mb_int(m, NULL, p, "1", "1")), "");
		r->indices = mb_op(m, NULL, p, "Cast", sl, "to=7");
	}
	if (o->wmask)
		r->wmask = mb_op(m, NULL, p, "Greater", MB_J(m, r->weights, mb_op(m, NULL, p, "Constant", "", "value=t:1::0")), "");
	const char *acc = o->zeros ? o->zeros : "zeros", *picks = NULL;
	if (o->onehot) {
		const char *vals = mb_op(m, NULL, p, "Constant", "",
					 arena_printf(a, "value=t:7:2:%s", o->onehot_values ? o->onehot_values : "0,1"));
		const char *oh = mb_op(m, NULL, p, "OneHot",
				       MB_J(m, r->indices, mb_int(m, NULL, p, "", arena_printf(a, "%d", o->E)), vals), "axis=-1");
		picks = mb_op(m, NULL, p, "Transpose", oh, o->onehot == 1 ? "perm=[2,1,0]" : "perm=[2,0,1]");
	}
	for (int i = 0; i < o->nid; i++) {
		const char *id = mb_int(m, NULL, p, "", arena_printf(a, "%d", o->ids[i]));
		Node *eqn = picks ? mb_node(m, NULL, p, "Gather", MB_J(m, picks, id), 1, "axis=0")
				  : mb_node(m, NULL, p, "Equal", MB_J(m, r->indices, id), 1, "");
		const char *eq = eqn->output[0];
		r->ex[i].eq = eqn;
		if (o->form == F_ROWS)
			acc = mb_rows(m, NULL, o, r, i, o->wmask ? mb_op(m, NULL, p, "And", MB_J(m, eq, r->wmask), "") : eq, acc);
		else
			acc = r->combined = mb_gate(m, o, r, i, eq, o->form == F_MASKSUM ? FLOAT : INT64);
	}
	r->combined = acc;
}

/* Renames every node of g and its bodies "<Op>_<N>", as a name-free export
 * names them (values keep their names: only node names carry modules). */
static inline void mb_strip(MB *m, Onnx__GraphProto *g)
{
	for (size_t i = 0; i < g->n_node; i++) {
		Node *n = g->node[i];
		n->name = arena_printf(m->b->a, "%s_%d", n->op_type, m->seq++);
		for (size_t j = 0; j < n->n_attribute; j++)
			if (n->attribute[j]->g)
				mb_strip(m, n->attribute[j]->g);
	}
}

/* ---- a checkpoint in memory ---- */

static inline WSrc *ck_new(Arena *a)
{
	WSrc *w = arena_alloc(a, sizeof *w);
	w->path = "mem.safetensors";
	w->a = a;
	map_init(&w->byname, a, 64);
	return w;
}

/* Adds a tensor of n floats, stored as dtype (FLOAT or FLOAT16). Keys are
 * sorted on the first wsrc_range: add them all before. */
static inline void ck_put(WSrc *w, const char *name, int dtype, const char *dims, const float *v, size_t n)
{
	ck_assert_ptr_null(w->order);
	int64_t tdims[WT_MAXDIM];
	WTensor t = { .name = arena_strdup(w->a, name), .dtype = dtype, .dims = tdims };
	char *d[WT_MAXDIM];
	t.ndim = (int)b_split(w->a, dims, ',', d, WT_MAXDIM);
	int64_t numel = 1;
	for (int i = 0; i < t.ndim; i++)
		numel *= (t.dims[i] = atoll(d[i]));
	ck_assert_int_eq(numel, (int64_t)n);
	size_t es = wt_dtype_size(dtype);
	unsigned char *p = arena_alloc(w->a, n * es + 1);
	for (size_t i = 0; i < n; i++) {
		if (dtype == FLOAT16) {
			uint16_t h = wt_f32_to_f16(v[i]);
			memcpy(p + 2 * i, &h, 2);
		} else {
			ck_assert_int_eq(dtype, FLOAT);
			memcpy(p + 4 * i, &v[i], 4);
		}
	}
	t.data = p;
	t.nbytes = n * es;
	Err e;
	ck_assert_int_eq(wsrc_add(w, &t, &e), 0);
}

/* The eps a pickled BatchNorm records ("model.0.experts.1.bn.eps"). */
static inline void ck_attr(WSrc *w, const char *name, double v)
{
	if (!w->attr.a)
		map_init(&w->attr, w->a, 16);
	double *d = arena_alloc(w->a, sizeof *d);
	*d = v;
	map_put(&w->attr, arena_strdup(w->a, name), d);
}

/* Expert id's tensors in a plain checkpoint, with mb_layer's default
 * values for `seed`: "<epath>conv.weight" and "<epath>conv.bias", epath
 * the expert's key prefix with "{i}" for its id ("model.0.experts.{i}."). */
static inline void ck_expert(WSrc *w, const char *epath, int id, double seed)
{
	float wv[4], bv[2];
	for (int j = 0; j < 4; j++)
		wv[j] = mb_wv(seed, id, j);
	for (int j = 0; j < 2; j++)
		bv[j] = mb_bv(seed, id, j);
	const char *pre = mb_subst(w->a, epath, id);
	ck_put(w, arena_printf(w->a, "%sconv.weight", pre), FLOAT, "2,2,1,1", wv, 4);
	ck_put(w, arena_printf(w->a, "%sconv.bias", pre), FLOAT, "2", bv, 2);
}

/* A layer of E experts, as mb_layer built them with `seed`. */
static inline void ck_plain(WSrc *w, const char *epath, int E, double seed)
{
	for (int id = 0; id < E; id++)
		ck_expert(w, epath, id, seed);
}

/* A SpecLayer as experts.yaml would give it. */
static inline SpecLayer mb_spec(const char *scope, int E, int k)
{
	return (SpecLayer){ .scope = scope, .experts = E, .top_k = k, .weights = "mem.safetensors", .prefix = "" };
}

/* The op producing main-graph value v ("" for none). */
static inline const char *mb_defop(B *b, const char *v)
{
	Val *x = g_val(b->c.g, v);
	return x && x->def ? x->def->op_type : "";
}

/* Nodes of the main graph whose name starts with pfx and whose op is op. */
static inline int mb_count(const B *b, const char *pfx, const char *op)
{
	int n = 0;
	for (size_t i = 0; i < b->m->graph->n_node; i++) {
		const Node *x = b->m->graph->node[i];
		n += (!pfx || (x->name && strncmp(x->name, pfx, strlen(pfx)) == 0)) && (!op || strcmp(x->op_type, op) == 0);
	}
	return n;
}

#endif
