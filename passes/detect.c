/* Detection: every MoE layer of the model, from data flow alone.
 *
 * A router is a TopK whose indices, after ops that only move values
 * (Reshape, Slice, Cast, ...), are compared with constant expert ids. From
 * each comparison the dispatch of one expert is followed:
 *  - rows form (traced): the match mask (possibly And-ed with a condition
 *    on the weights) goes through NonZero; its batch coordinate gathers the
 *    expert's input rows, batch and slot coordinates gather the routing
 *    weight, and the expert's output times that weight is scattered into
 *    the routed sum (Mixtral's token dispatch compares by a pick of a
 *    transposed one-hot: its NonZero holds slot, then row);
 *  - masksum form (scripted, or traced without a row gather): the expert
 *    runs on the whole input and is weighted by sum_j W[:,j]*(I[:,j]==id),
 *    usually inside an If gated on the match.
 * The expert's nodes are what lies between its input and the value
 * multiplied by the weight. The routed sum is the end of the chain that
 * accumulates exactly the weighted expert outputs (zeros, scatters, Adds,
 * If branches), and nothing else.
 *
 * Each pattern is matched in full, or detection stops saying what it found:
 * a layer half understood would be repaired wrong. Names play no part here;
 * bind.c uses them to tie layers to experts.yaml. */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "flow.h"
#include "infer.h"
#include "moe.h"

/* n bytes of x at b + *at, as far as cap allows; *at counts them all. */
static void put(char *b, size_t cap, size_t *at, const char *x, size_t n)
{
	if (*at < cap)
		memcpy(b + *at, x, n < cap - *at ? n : cap - *at);
	*at += n;
}

/* snprintf's contract, without it: checkpoint keys are built from this
 * for every tensor of every expert, where formatting showed in the
 * profile of a 400-layer repair. */
int expert_path_to(char *b, size_t cap, const SpecLayer *s, int id)
{
	const char *pat = s->expert ? s->expert : "experts.{i}";
	const char *p = strstr(pat, "{i}");
	size_t at = 0, ls = strlen(s->scope);
	put(b, cap, &at, s->scope, ls);
	put(b, cap, &at, ".", ls ? 1 : 0);
	if (!p) {
		put(b, cap, &at, pat, strlen(pat));
	} else {
		/* By hand: snprintf was a third of this, which runs twice for
		 * each new tensor. */
		char num[16];
		int nn = 0;
		unsigned u = id < 0 ? 0u - (unsigned)id : (unsigned)id;
		do
			num[sizeof num - 1 - nn++] = (char)('0' + u % 10);
		while (u /= 10);
		if (id < 0)
			num[sizeof num - 1 - nn++] = '-';
		put(b, cap, &at, pat, (size_t)(p - pat));
		put(b, cap, &at, num + sizeof num - nn, (size_t)nn);
		put(b, cap, &at, p + 3, strlen(p + 3));
	}
	if (cap)
		b[at < cap ? at : cap - 1] = 0;
	return at > INT_MAX ? -1 : (int)at;
}

const char *expert_path(Ctx *c, const SpecLayer *s, int id)
{
	char b[256];
	int n = expert_path_to(b, sizeof b, s, id);
	if (n >= 0 && (size_t)n < sizeof b)
		return arena_strdup(c->a, b);
	char *x = arena_alloc_raw(c->a, (size_t)n + 1);
	expert_path_to(x, (size_t)n + 1, s, id);
	return x;
}

/* ---- small predicates ---- */

static const char *nin(const Node *n, size_t i)
{
	return i < n->n_input ? n->input[i] : "";
}

static Node *def_of(const Graph *g, const char *name)
{
	Val *v = *name ? g_val(g, name) : NULL;
	return v ? v->def : NULL;
}

/* A one-element integer constant (scalar or [1]), possibly behind ops
 * that keep its one element (unfolded exports reshape and cast them). */
static int const_int1(const Graph *g, const char *name, int64_t *v)
{
	for (int d = 0; *name && d < 8; d++) {
		if (g_const_ints(g, name, v, 1) == 1)
			return 1;
		Val *x = g_val(g, name);
		Node *n = x ? x->def : NULL;
		if (!n || !n->n_input || !(g_is(n, "Reshape") || g_is(n, "Cast") || g_is(n, "Squeeze") ||
					   g_is(n, "Unsqueeze") || g_is(n, "Identity") || g_is(n, "Flatten")))
			return 0;
		if (g_is(n, "Cast") && g_attr_i(n, "to", 0) != ONNX__TENSOR_PROTO__DATA_TYPE__INT64 &&
		    g_attr_i(n, "to", 0) != ONNX__TENSOR_PROTO__DATA_TYPE__INT32)
			return 0;
		g = x->g;
		name = n->input[0];
	}
	return 0;
}

/* ScatterElements, or Scatter, its name before opset 11 (the same
 * semantics, no reduction): exports at opsets 9 and 10 scatter with it. */
static int is_scatter_el(const Node *n)
{
	return g_is(n, "ScatterElements") || g_is(n, "Scatter");
}

/* Axis a counted from the front: a negative one plus the rank, when the
 * rank is known; else as written, and a negative axis then matches none. */
static int64_t axis_fwd(int64_t a, int rank)
{
	return a < 0 && rank >= 0 ? a + rank : a;
}

/* The one axis a ReduceSum sums over (attribute before opset 13, input
 * from 13), as written: 1 and *ax, or 0 for none or several. */
static int reduce_axis1(const Graph *g, const Node *red, int64_t *ax)
{
	const Onnx__AttributeProto *a = g_attr(red, "axes");
	if (a) {
		*ax = a->n_ints == 1 ? a->ints[0] : 0;
		return a->n_ints == 1;
	}
	return red->n_input > 1 && g_const_ints(g, red->input[1], ax, 1) == 1;
}

/* Constants and values computed from constants alone (unfolded exports
 * keep Unsqueeze(weight) and the like). Bounded: deeper chains count as
 * not constant, which only makes detection stricter. */
static int is_const(const Graph *g, const char *name, int depth)
{
	if (!*name)
		return 1;
	Val *v = g_val(g, name);
	/* An initializer listed among the graph inputs too
	 * (keep_initializers_as_inputs=True, IR < 4 exports) is a weight
	 * with a default a caller could replace; nobody deploying a model
	 * does, and the repair reads it, as g_const does, as that weight. */
	if (v && v->init)
		return 1;
	if (!v || v->isin)
		return 0;
	Node *n = v->def;
	if (!n || depth > 8)
		return 0;
	if (g_is(n, "Constant"))
		return 1;
	if (g_is(n, "Shape") || g_is(n, "Size") || g_attr(n, "then_branch") || g_attr(n, "body"))
		return 0;
	for (size_t i = 0; i < n->n_input; i++)
		if (!is_const(v->g, n->input[i], depth + 1))
			return 0;
	return 1;
}

/* Ops that only move or reinterpret the values of their data input. */
static int moves(const Node *n, int slot, const Graph *g)
{
	if (slot != 0)
		return g_is(n, "Concat") && n->n_input == 1;
	static const char *ops[] = { "Reshape", "Flatten", "Unsqueeze", "Squeeze", "Slice", "Split", "Transpose",
				     "Cast", "Identity", "Expand", "Concat", NULL };
	for (const char **o = ops; *o; o++)
		if (g_is(n, *o))
			return !g_is(n, "Concat") || n->n_input == 1;
	int64_t k;
	return g_is(n, "Gather") && const_int1(g, nin(n, 1), &k);
}

/* v stripped of ops that keep its elements (casts, reshapes to the same
 * elements): the value a pattern sees through them. */
static const char *strip(const Graph *g, const char *v, Node **last)
{
	for (int d = 0; d < 16; d++) {
		Node *n = def_of(g, v);
		if (!n || !(g_is(n, "Cast") || g_is(n, "Identity") || g_is(n, "Squeeze") || g_is(n, "Unsqueeze") ||
			    g_is(n, "Reshape") || g_is(n, "Flatten") || (g_is(n, "Expand"))))
			break;
		if (last)
			*last = n;
		v = n->input[0];
	}
	return v;
}

/* ---- NonZero coordinates ---- */

/* Whether every output of Split n is one wide: its sizes (the attribute,
 * or input 1 from opset 13) are all 1 and one per output. Without sizes
 * the split is even, one wide when the caller knows the outputs number
 * the axis's length. Sizes that are not a constant are no unit split: the
 * walk would take a cut it cannot read for a column. */
static int unit_split(const Graph *g, const Node *n)
{
	const Onnx__AttributeProto *a = g_attr(n, "split");
	if (a) {
		for (size_t i = 0; i < a->n_ints; i++)
			if (a->ints[i] != 1)
				return 0;
		return a->n_ints == n->n_output;
	}
	if (n->n_input < 2 || !*n->input[1])
		return 1;
	const Tensor *t = g_const(g, n->input[1]);
	size_t nb, w = t && t->data_type == ONNX__TENSOR_PROTO__DATA_TYPE__INT64 ? 8
		       : t && t->data_type == ONNX__TENSOR_PROTO__DATA_TYPE__INT32 ? 4 : 0;
	const unsigned char *p = w ? g_tensor_data(t, &nb) : NULL;
	if (!p || nb != n->n_output * w)
		return 0;
	for (size_t i = 0; i < nb; i += w) {
		int64_t x = 0;
		if (w == 8)
			memcpy(&x, p + i, 8);
		else {
			int32_t y;
			memcpy(&y, p + i, 4);
			x = y;
		}
		if (x != 1)
			return 0;
	}
	return 1;
}

/* Which coordinate of NonZero z the value v holds: z is [r, n]; the
 * exporter takes column c of its transpose (Split along 1, or Gather), or
 * row c of z itself. -1 when v is no such coordinate. */
static int nz_coord(const Graph *g, const char *v, Node **z)
{
	v = strip(g, v, NULL);
	Node *n = def_of(g, v);
	if (!n)
		return -1;
	int64_t j;
	Node *src = NULL;
	int c = -1, transposed = 0;
	if (g_is(n, "Split") && n->n_output >= 1) {
		int64_t axis = g_attr_i(n, "axis", 0);
		for (size_t o = 0; o < n->n_output; o++)
			if (strcmp(n->output[o], v) == 0)
				c = (int)o;
		/* Unit splits only: each output is one column. */
		if (axis != 1 || !unit_split(g, n))
			return -1;
		src = def_of(g, n->input[0]);
		transposed = 1;
	} else if (g_is(n, "Gather") && const_int1(g, nin(n, 1), &j) && j >= 0 && j < 16) {
		c = (int)j;
		src = def_of(g, n->input[0]);
		transposed = g_attr_i(n, "axis", 0) == 1;
		if (!transposed && g_attr_i(n, "axis", 0) != 0)
			return -1;
	} else if (g_is(n, "Slice") && n->n_input >= 4) {
		int64_t s, e, ax;
		if (!const_int1(g, n->input[1], &s) || !const_int1(g, n->input[2], &e) ||
		    !const_int1(g, n->input[3], &ax) || e != s + 1 || s < 0 || s > 16)
			return -1;
		c = (int)s;
		src = def_of(g, n->input[0]);
		transposed = ax == 1;
		if (!transposed && ax != 0)
			return -1;
	} else {
		return -1;
	}
	if (c < 0 || !src)
		return -1;
	if (transposed) {
		if (!g_is(src, "Transpose"))
			return -1;
		const Onnx__AttributeProto *p = g_attr(src, "perm");
		if (p && (p->n_ints != 2 || p->ints[0] != 1 || p->ints[1] != 0))
			return -1;
		src = def_of(g, src->input[0]);
	}
	if (!src || !g_is(src, "NonZero"))
		return -1;
	*z = src;
	return c;
}

/* ---- the index views and the dispatch comparisons ---- */

typedef struct {
	Node **eq;      /* Equal nodes comparing a view with a constant id */
	int64_t *id;
	const char **view;
	int *rowc;      /* the row's NonZero coordinate behind each (Layer.rowc) */
	size_t n, cap;
	int dense;      /* a view indexes GatherElements (or OneHot, before opset 11): the dense form */
	int sparse;     /* a view picks rows of stacked expert weights: the sparse form */
	Arena *a;
} Views;

/* n is a OneHot whose output, cast or not, multiplies something that a
 * ReduceSum then sums over the one-hot axis alone: torch's export of
 * gather before opset 11, the dense form's pick there. Summing over
 * another axis (ES_MOE's per-pixel weight map sums the top-k slots) or
 * only counting expert use is not one. */
static int onehot_gather(const Graph *g, const Node *n)
{
	int64_t ax = axis_fwd(g_attr_i(n, "axis", -1), g_ty_rank(g, n->output[0])), rx;
	const Val *v = g_val(g, n->output[0]);
	if (v && v->nuse == 1 && g_is(v->use[0].n, "Cast"))
		v = g_val(g, v->use[0].n->output[0]);
	if (ax < 0 || !v || v->nuse != 1 || !g_is(v->use[0].n, "Mul"))
		return 0;
	v = g_val(g, v->use[0].n->output[0]);
	const Node *red = v && v->nuse == 1 && g_is(v->use[0].n, "ReduceSum") ? v->use[0].n : NULL;
	if (!red)
		return 0;
	return reduce_axis1(g, red, &rx) && axis_fwd(rx, g_ty_rank(g, red->input[0])) == ax;
}

static void view_add(Views *w, Node *eq, int64_t id, const char *v, int rowc)
{
	if (w->n == w->cap) {
		size_t cap = w->cap ? w->cap * 2 : 16;
		w->eq = arena_grow(w->a, w->eq, w->n * sizeof *w->eq, cap * sizeof *w->eq);
		w->id = arena_grow(w->a, w->id, w->n * sizeof *w->id, cap * sizeof *w->id);
		w->view = arena_grow(w->a, w->view, w->n * sizeof *w->view, cap * sizeof *w->view);
		w->rowc = arena_grow(w->a, w->rowc, w->n * sizeof *w->rowc, cap * sizeof *w->rowc);
		w->cap = cap;
	}
	w->eq[w->n] = eq;
	w->id[w->n] = id;
	w->view[w->n] = v;
	w->rowc[w->n++] = rowc;
}

/* Mixtral's dispatch: mask = one_hot(indices [B,k], E).permute(2, 1, 0),
 * then mask[id] is indices == id as [k,B], the NonZero of which holds
 * (slot, row). OneHot n (reading the view v) must feed only such picks:
 * a Transpose bringing the one-hot axis first, then Gathers of scalar
 * ids below the depth, with values (0, 1). Each pick is a comparison,
 * its rows in coordinate 1 (0 when the permutation keeps [B,k]). */
static int onehot_picks(Views *w, const Graph *g, Node *n, const char *v)
{
	int64_t depth, vals[2];
	if (g_ty_rank(g, n->output[0]) != 3 || axis_fwd(g_attr_i(n, "axis", -1), 3) != 2 || n->n_input != 3 ||
	    !const_int1(g, n->input[1], &depth) || depth < 1 || g_const_ints(g, n->input[2], vals, 2) != 2 ||
	    vals[0] != 0 || vals[1] != 1)
		return 0;
	const Val *oh = g_val(g, n->output[0]);
	if (oh && oh->nuse == 1 && g_is(oh->use[0].n, "Cast"))
		oh = g_val(g, oh->use[0].n->output[0]);
	if (!oh || !oh->nuse)
		return 0;
	size_t n0 = w->n;
	for (size_t i = 0; i < oh->nuse; i++) {
		const Node *t = oh->use[i].n;
		const Onnx__AttributeProto *p = g_attr(t, "perm");
		if (!g_is(t, "Transpose") || !p || p->n_ints != 3 || p->ints[0] != 2)
			goto no;
		int rowc = p->ints[1] == 1 && p->ints[2] == 0 ? 1 : p->ints[1] == 0 && p->ints[2] == 1 ? 0 : -1;
		const Val *tv = g_val(g, t->output[0]);
		if (rowc < 0 || !tv || !tv->nuse)
			goto no;
		for (size_t j = 0; j < tv->nuse; j++) {
			Node *pick = tv->use[j].n;
			int64_t id;
			if (!g_is(pick, "Gather") || strcmp(pick->input[0], t->output[0]) != 0 || g_attr_i(pick, "axis", 0) != 0 ||
			    g_ty_rank(g, nin(pick, 1)) != 0 || !const_int1(g, nin(pick, 1), &id) || id < 0 || id >= depth)
				goto no;
			view_add(w, pick, id, v, rowc);
		}
	}
	return 1;
no:
	w->n = n0;
	return 0;
}

static unsigned view_step(void *ud, Ctx *c, Node *n, int slot, const char *v)
{
	Views *w = ud;
	Graph *g = g_graph_of(c, n);
	if (g_is(n, "Equal") && slot >= 0) {
		int64_t id;
		if (!const_int1(g, nin(n, 1 - slot), &id))
			return 0;
		view_add(w, n, id, v, 0);
		return 0;
	}
	if ((g_is(n, "GatherElements") && slot == 1) || (g_is(n, "OneHot") && slot == 0 && onehot_gather(g, n))) {
		w->dense = 1;
		return 0;
	}
	if (g_is(n, "OneHot") && slot == 0 && onehot_picks(w, g, n, v))
		return 0;
	if (g_is(n, "Gather") && slot == 1 && g_attr_i(n, "axis", 0) == 0) {
		Val *d = g_val(g, n->input[0]);
		if (d && d->init && d->init->n_dims >= 2)
			w->sparse = 1;
		return 0;
	}
	return moves(n, slot, g) ? ~0u : 0;
}

/* ---- one expert's dispatch ---- */

typedef struct {
	Arena *a;
	Node **nz;       /* NonZero nodes reading the mask */
	size_t nnz;
	Node **ifs;      /* If nodes whose condition derives from the mask */
	size_t nifs;
	Node *wsum;      /* Mul(W, Cast(mask)) of the masksum form */
	const char *wsum_w;
	const char *andc; /* the other operand of an And with the mask */
	Node *odd;        /* a use the patterns do not know */
	Map *mask;        /* values derived from the match */
} Mask;

static void push(Arena *a, Node ***v, size_t *n, Node *x)
{
	for (size_t i = 0; i < *n; i++)
		if ((*v)[i] == x)
			return;
	*v = arena_grow(a, *v, *n * sizeof **v, (*n + 1) * sizeof **v);
	(*v)[(*n)++] = x;
}

static unsigned mask_step(void *ud, Ctx *c, Node *n, int slot, const char *v)
{
	Mask *m = ud;
	Graph *g = g_graph_of(c, n);
	(void)v;
	if (slot < 0)
		return 0; /* a body reads it: its own uses inside are walked too */
	if (g_is(n, "And") || g_is(n, "Or")) {
		const char *o = nin(n, 1 - slot);
		if (!map_get(m->mask, o)) {
			if (g_is(n, "Or") || (m->andc && strcmp(m->andc, o) != 0))
				m->odd = n;
			m->andc = o;
		}
		return ~0u;
	}
	if (g_is(n, "NonZero")) {
		push(m->a, &m->nz, &m->nnz, n);
		return 0;
	}
	if (g_is(n, "If")) {
		if (slot == 0)
			push(m->a, &m->ifs, &m->nifs, n);
		return 0;
	}
	if (g_is(n, "Mul") && slot >= 0) {
		/* Bool masks are cast before they meet the weights. */
		const char *o = nin(n, 1 - slot);
		if (!map_get(m->mask, o) && !m->wsum) {
			m->wsum = n;
			m->wsum_w = o;
		} else if (m->wsum != n) {
			m->odd = n;
		}
		return 0;
	}
	if (g_is(n, "ReduceSum") || g_is(n, "ReduceMax") || g_is(n, "ReduceMin") || g_is(n, "ReduceProd") ||
	    g_is(n, "ReduceMean") || g_is(n, "Not"))
		return ~0u; /* "any": only ever gates an If */
	if ((g_is(n, "Greater") || g_is(n, "GreaterOrEqual") || g_is(n, "Less") || g_is(n, "LessOrEqual") ||
	     g_is(n, "Equal")) && slot >= 0 && is_const(g, nin(n, 1 - slot), 0))
		return ~0u;
	if (g_is(n, "Shape") || g_is(n, "Size"))
		return 0;
	if (moves(n, slot, g))
		return ~0u;
	m->odd = n;
	return 0;
}

/* Index values derived from a NonZero, and the gathers and scatters they
 * index. */
typedef struct {
	Arena *a;
	Node **use;   /* Gather / GatherND / ScatterElements / ScatterND reading them as index */
	size_t nuse;
} Coords;

static unsigned coord_step(void *ud, Ctx *c, Node *n, int slot, const char *v)
{
	Coords *k = ud;
	(void)v;
	if (slot < 0 || g_is(n, "Shape") || g_is(n, "Size"))
		return 0;
	if ((g_is(n, "Gather") || g_is(n, "GatherND") || g_is(n, "GatherElements")) && slot == 1) {
		push(k->a, &k->use, &k->nuse, n);
		return 0;
	}
	if ((is_scatter_el(n) || g_is(n, "ScatterND")) && slot == 1) {
		push(k->a, &k->use, &k->nuse, n);
		return 0;
	}
	static const char *ops[] = { "Transpose", "Split", "Squeeze", "Unsqueeze", "Gather", "Slice", "Cast",
				     "Identity", "Reshape", "Add", "Mul", "Expand", "Concat", "Flatten", NULL };
	for (const char **o = ops; *o; o++)
		if (g_is(n, *o))
			return ~0u;
	return 0;
}

/* The [B,k] weights behind a gather of one weight per selected (row, slot):
 * Gather(Flatten(T), row*dim1(T) + slot) or GatherND(T, [row, slot]), the
 * row being NonZero z's coordinate rc. NULL when n is no such gather. */
static const char *weight_source(const Graph *g, Node *n, Node *z, int rc)
{
	Node *zz = NULL;
	if (g_is(n, "GatherND")) {
		if (g_attr_i(n, "batch_dims", 0) != 0)
			return NULL;
		Node *cat = def_of(g, n->input[1]);
		if (!cat || !g_is(cat, "Concat") || cat->n_input != 2)
			return NULL;
		if (nz_coord(g, cat->input[0], &zz) != rc || zz != z || nz_coord(g, cat->input[1], &zz) != 1 - rc || zz != z)
			return NULL;
		return n->input[0];
	}
	if (!g_is(n, "Gather") || g_attr_i(n, "axis", 0) != 0)
		return NULL;
	Node *f = def_of(g, n->input[0]);
	if (!f || !(g_is(f, "Flatten") || g_is(f, "Reshape")))
		return NULL;
	if (g_is(f, "Flatten") && g_attr_i(f, "axis", 1) != 2)
		return NULL;
	if (g_is(f, "Reshape")) {
		int64_t s[2];
		long k = g_const_ints(g, nin(f, 1), s, 2);
		if (!(k == 1 && s[0] == -1) && !(k == 2 && s[0] == -1 && s[1] == 1))
			return NULL;
	}
	const char *t = f->input[0];
	/* index = slot + row * dim1(T), either operand order */
	Node *add = def_of(g, strip(g, n->input[1], NULL));
	if (!add || !g_is(add, "Add"))
		return NULL;
	for (int s = 0; s < 2; s++) {
		if (nz_coord(g, add->input[s], &zz) != 1 - rc || zz != z)
			continue;
		Node *mul = def_of(g, strip(g, add->input[1 - s], NULL));
		if (!mul || !g_is(mul, "Mul"))
			return NULL;
		for (int r = 0; r < 2; r++) {
			if (nz_coord(g, mul->input[r], &zz) != rc || zz != z)
				continue;
			const char *d = strip(g, mul->input[1 - r], NULL);
			Node *gd = def_of(g, d);
			int64_t one, k;
			if (gd && g_is(gd, "Gather") && const_int1(g, nin(gd, 1), &one) && one == 1) {
				Node *sh = def_of(g, gd->input[0]);
				if (sh && g_is(sh, "Shape") && strcmp(sh->input[0], t) == 0 && !g_attr(sh, "start"))
					return t;
			}
			/* A static shape folded by a simplifier: the constant must be
			 * T's dimension 1, as the inference knows it. Folded halfway
			 * (Gather of a folded Shape), it is a value of constants
			 * alone, which the inference computed. */
			int known = const_int1(g, d, &k) ||
				    (is_const(g, d, 0) && g_ty_numel(g, d) == 1 && g_ty_val(g, d, 0, &k));
			if (known && k > 0 && g_ty_dim(g, t, 1) == k)
				return t;
			return NULL;
		}
	}
	return NULL;
}

/* v through casts and identities only: values with the same layout. */
const char *moe_uncast(const Graph *g, const char *v)
{
	for (int d = 0; d < 16; d++) {
		Node *n = def_of(g, v);
		if (!n || !(g_is(n, "Cast") || g_is(n, "Identity")))
			break;
		v = n->input[0];
	}
	return v;
}

/* Per-position routing (MoT's per-pixel top-k): the weight of expert id is
 * channel id of a [B,E,S...] map that the router scattered its per-slot
 * weights into, at the very indices the dispatch compares; gathered at the
 * selected rows. The per-slot weights behind the map, or NULL. The dense
 * sum over slots of weight x the expert the slot picks computes the same
 * map product, so the layer takes the common dense form. */
static const char *map_weights(const Graph *g, Node *n, Node *z, const char *indices, int64_t id)
{
	Node *zz = NULL;
	int64_t st, en, ax, step = 1;
	if (!g_is(n, "Gather") || g_attr_i(n, "axis", 0) != 0 || nz_coord(g, n->input[1], &zz) != 0 || zz != z)
		return NULL;
	Node *s = def_of(g, n->input[0]);
	if (!s || !g_is(s, "Slice") || s->n_input < 4 || !const_int1(g, s->input[1], &st) ||
	    !const_int1(g, s->input[2], &en) || !const_int1(g, s->input[3], &ax) ||
	    (s->n_input > 4 && *s->input[4] && !const_int1(g, s->input[4], &step)))
		return NULL;
	if (ax != 1 || st != id || en != id + 1 || step != 1)
		return NULL;
	Node *sc = def_of(g, moe_uncast(g, s->input[0]));
	if (!sc || !is_scatter_el(sc) || g_attr_i(sc, "axis", 0) != 1 || g_attr(sc, "reduction") ||
	    !g_is_zero(g, sc->input[0]) || strcmp(moe_uncast(g, sc->input[1]), moe_uncast(g, indices)) != 0)
		return NULL;
	return sc->input[2];
}

/* Whether NonZero z selects the rows where any position of the match
 * holds: z reads Greater(ReduceSum|ReduceMax(match as [B,-1]), 0). Per-
 * position routing selects whole rows so; a threshold other than 0 would
 * drop rows the dense form keeps. */
static int any_rows(const Graph *g, const Node *z, const char *match)
{
	Node *gt = def_of(g, moe_uncast(g, z->input[0]));
	int64_t zero;
	if (!gt || !g_is(gt, "Greater") || !const_int1(g, nin(gt, 1), &zero) || zero != 0)
		return 0;
	Node *r = def_of(g, moe_uncast(g, gt->input[0]));
	if (!r || !(g_is(r, "ReduceSum") || g_is(r, "ReduceMax")) || g_attr_i(r, "keepdims", 1) != 0)
		return 0;
	int64_t axes;
	const Onnx__AttributeProto *a = g_attr(r, "axes");
	if (a ? a->n_ints != 1 || a->ints[0] != 1 : !(r->n_input > 1 && const_int1(g, r->input[1], &axes) && axes == 1))
		return 0;
	Node *f = def_of(g, moe_uncast(g, r->input[0]));
	if (!f || !(g_is(f, "Reshape") || g_is(f, "Flatten")))
		return 0;
	if (g_is(f, "Flatten") && g_attr_i(f, "axis", 1) != 1)
		return 0;
	if (g_is(f, "Reshape")) {
		int64_t sh[2];
		if (g_const_ints(g, nin(f, 1), sh, 2) != 2 || sh[1] != -1 || sh[0] < -1)
			return 0;
	}
	return strcmp(moe_uncast(g, f->input[0]), match) == 0;
}

/* The axis Gather n picks rows along: 0, or 1 where it reads
 * Unsqueeze(x, 0) (x[None, rows], which keeps a leading 1); -1 else. */
static int rows_axis(const Graph *g, const Node *n)
{
	if (!g_is(n, "Gather"))
		return -1;
	int64_t ax = g_attr_i(n, "axis", 0), u;
	if (ax == 0)
		return 0;
	Node *un = def_of(g, n->input[0]);
	if (ax != 1 || !un || !g_is(un, "Unsqueeze"))
		return -1;
	const Onnx__AttributeProto *a = g_attr(un, "axes");
	int zero = a ? a->n_ints == 1 && a->ints[0] == 0 : const_int1(g, nin(un, 1), &u) && u == 0;
	return zero ? 1 : -1;
}

/* Rows of a tensor read back to be added to and written in place
 * (out[b] = out[b] + y, a ScatterND into the tensor read): part of the
 * routed sum, which checks it. */
static int rmw_read(const Graph *g, const Node *n)
{
	Val *v = g_val(g, n->output[0]);
	if (!v || v->nuse != 1 || !g_is(v->use[0].n, "Add"))
		return 0;
	const char *o = v->use[0].n->output[0];
	for (int d = 0; d < 4; d++) {
		Val *a = g_val(g, o);
		if (!a || a->nuse != 1)
			return 0;
		Node *u = a->use[0].n;
		if (g_is(u, "ScatterND") && u->n_input == 3 && strcmp(u->input[2], o) == 0)
			return strcmp(u->input[0], n->input[0]) == 0 && strcmp(u->input[1], o) != 0;
		if (!(g_is(u, "Reshape") || g_is(u, "Cast") || g_is(u, "Identity")) || strcmp(u->input[0], o) != 0)
			return 0;
		o = u->output[0];
	}
	return 0;
}

/* ---- the expert's nodes ---- */

typedef struct {
	Node **v;
	size_t n, cap;
	Arena *a;
} NodeVec;

static void nv_push(NodeVec *nv, Node *n)
{
	if (nv->n == nv->cap) {
		size_t cap = nv->cap ? nv->cap * 2 : 16;
		nv->v = arena_grow(nv->a, nv->v, nv->n * sizeof *nv->v, cap * sizeof *nv->v);
		nv->cap = cap;
	}
	nv->v[nv->n++] = n;
}

/* A graph input with no initializer that a node reads as a weight (a
 * Conv's, a Gemm's or MatMul's second input): what torch.onnx.export
 * makes of every parameter with export_params=False. */
static int weightless(Graph *g, const char *name)
{
	Val *v = g_val(g, name);
	if (!v || !v->isin || v->init || v->g != g)
		return 0;
	for (uint32_t i = 0; i < v->nuse; i++) {
		const Node *n = v->use[i].n;
		if ((g_is(n, "Conv") || g_is(n, "ConvTranspose") || g_is(n, "Gemm") || g_is(n, "MatMul")) &&
		    n->n_input > 1 && strcmp(n->input[1], name) == 0)
			return 1;
	}
	return 0;
}

/* The i-th value node n reads in g: its inputs, then what its bodies read
 * from g, in the order collect() walks them; NULL past the last. */
static const char *nth_read(const Graph *g, const Node *n, size_t i)
{
	if (i < n->n_input)
		return n->input[i];
	i -= n->n_input;
	for (size_t k = 0; k < g->nsub; k++)
		if (g->sub[k]->owner == n) {
			if (i < g->sub[k]->nouter)
				return g->sub[k]->outer[i];
			i -= g->sub[k]->nouter;
		}
	return NULL;
}

/* The n nodes of set (marked 1) in an order their data flow alone fixes:
 * depth first from out, each node after the producers it reads, in slot
 * order. Experts built alike so list matching nodes at matching places
 * whatever order the graph holds them in (any topological order is a
 * valid model, and a tool's sort interleaves an expert's branches as it
 * likes): the structure check and every slot-by-slot pairing of experts
 * read them by index. */
static size_t flow_order(Ctx *c, const Graph *g, const char *out, PMap *set, Node **dst, size_t n)
{
	struct Frame {
		Node *n;
		size_t next;
	} *st = arena_alloc(c->tmp, (n + 1) * sizeof *st);
	size_t sp = 0, k = 0;
	Val *ov = g_val(g, out);
	if (!ov || !ov->def || pmap_get(set, ov->def) != (void *)1)
		return 0;
	pmap_put(set, ov->def, (void *)2);
	st[sp++] = (struct Frame){ ov->def, 0 };
	while (sp) {
		struct Frame *f = &st[sp - 1];
		const char *v = nth_read(g, f->n, f->next++);
		if (!v) {
			dst[k++] = f->n;
			sp--;
			continue;
		}
		Val *vv = *v ? g_val(g, v) : NULL;
		if (vv && vv->def && vv->g == g && pmap_get(set, vv->def) == (void *)1) {
			pmap_put(set, vv->def, (void *)2);
			st[sp++] = (struct Frame){ vv->def, 0 };
		}
	}
	return k;
}

/* One value the expert reads from outside: constants and the gathered rows
 * are expected; anything else is its input, of which there is one. */
static int outside(Graph *g, Layer *L, Expert *x, const char *stop, const char *hint_in, const char *v,
		   const char **input, Err *e)
{
	if ((stop && strcmp(v, stop) == 0) || is_const(g, v, 0))
		return 0;
	if (!*input || strcmp(*input, v) == 0)
		*input = v;
	else if (hint_in && (strcmp(v, hint_in) == 0 || strcmp(*input, hint_in) == 0))
		*input = hint_in;
	else if (weightless(g, *input) || weightless(g, v))
		return errf(e, "layer %s: expert %d reads its weight '%s' from a graph input with no initializer: an export without its weights (export_params=False) has nothing to verify the checkpoint against; export the model with its parameters",
			    L->scope, x->id, weightless(g, v) ? v : *input);
	else
		return errf(e, "layer %s: expert %d reads two tensors from outside ('%s' and '%s'); set `input:` in experts.yaml",
			    L->scope, x->id, *input, v);
	return 0;
}

/* A Shape or Size node reads a value's shape, never its elements: the
 * exporter's `o.view(o.shape[0], ...)` of the weights reads the expert's
 * output so, and shapes are all experts' alike. */
static int reads_shape(const Node *n)
{
	return g_is(n, "Shape") || g_is(n, "Size");
}

/* The uses of n's outputs that read their elements, and one more for a
 * graph output: what must all lie in an expert for n to be its own. */
static size_t uses_of(const Ctx *c, Node *n)
{
	size_t u = 0;
	for (size_t j = 0; j < n->n_output; j++) {
		const Val *v = g_output(c, n, j);
		for (uint32_t k = 0; v && k < v->nuse; k++)
			u += !reads_shape(v->use[k].n);
		u += v && v->isout;
	}
	return u;
}

/* The nodes between the expert's input and `out`, walked back from out.
 * The walk stops at `stop` (the gathered rows), at values defined outside
 * out's graph, and at constants' inputs: a constant computed from the
 * expert's own tensors (its GroupNorm weight through Unsqueeze) is part of
 * it wherever it sits, as is a Constant node (a simplifier's sort puts
 * such chains at the top of the graph; a clone that read the template's
 * would be silently wrong). An expert that runs on the layer's whole input
 * in the main graph (the traced masksum form) has nothing upstream to
 * stop at, and no position tells where it starts: any topological order
 * may put its first nodes above the dispatch (the graph's order bounds
 * the other main-graph forms, and a lone expert's). There it is its output's
 * exclusive cone: a node belongs to it once every use of its outputs does,
 * so the walk stops where a value is read elsewhere too (by the router,
 * the residual, another expert) or at the `input:` experts.yaml names.
 * What it reads from outside besides constants is its input; more than one
 * such value is an error. The nodes are listed in flow_order's order. */
static int collect(Ctx *c, Layer *L, Expert *x, const char *stop, size_t low, int alone, const char *hint_in,
		   Err *e)
{
	/* out may live in a body: look it up where the product is. */
	Val *ov = g_val(g_graph_of(c, x->mul), x->out);
	Graph *g = NULL;
	if (!ov || !ov->def)
		return errf(e, "layer %s: expert %d's output '%s' has no producer", L->scope, x->id, x->out);
	g = ov->g;
	int excl = g == c->g && !stop && g_graph_of(c, x->mul) == g;
	/* An expert alone in its layer has no sibling to show which nodes
	 * are its own and which a stem shared by all: there the exporter's
	 * order tells, which emits a stem before the dispatch, unless
	 * experts.yaml names the input. A sort that moved the expert's first
	 * nodes up leaves a template reading its own weights outside its
	 * path, which the mapping refuses; one that moved all of it, this. */
	int bypos = excl && alone && !hint_in;
	if (bypos && g_pos(c, ov->def) < low)
		return errf(e, "layer %s: expert %d, the only one the export kept, is computed before its dispatch in the graph's order, which then cannot tell its nodes from a stem all experts share; set `input:` in experts.yaml to the tensor the experts read",
			    L->scope, x->id);
	PMap seen, left;
	pmap_init(&seen, c->tmp, 64);
	pmap_init(&left, c->tmp, 16); /* node -> 1 + its uses not yet in the expert */
	NodeVec nv = { .a = c->a };
	/* Values to visit, each with whether its reader reads its elements
	 * (a Shape node does not: uses_of leaves it out too). */
	struct Read {
		const char *v;
		int elems;
	} *todo = NULL;
	size_t nt = 0, ct = 0;
	const char *input = NULL;
#define TODO(s, el)                                                                             \
	do {                                                                                    \
		if (nt == ct) {                                                                 \
			size_t nc = ct ? ct * 2 : 32;                                           \
			todo = arena_grow(c->tmp, todo, ct * sizeof *todo, nc * sizeof *todo);   \
			ct = nc;                                                                \
		}                                                                               \
		todo[nt++] = (struct Read){ (s), (el) };                                        \
	} while (0)
	/* The weighting's read of out: one of out's uses, none of the expert's. */
	TODO(x->out, 1);
	while (nt) {
		const char *v = todo[--nt].v;
		int elems = todo[nt].elems;
		if (!*v)
			continue;
		Val *vv = g_val(g, v);
		/* An Identity of a weight is that weight (g_const): an exporter
		 * merging equal initializers (the norms of experts no gradient
		 * reached) leaves one at the top of the graph for every expert
		 * but the first, which would then differ in structure. */
		int alias = vv && vv->def && g_is(vv->def, "Identity") && g_const(g, v);
		/* Elsewhere in the main graph the walk ends before the dispatch
		 * comparison (at `low`): with the gathered rows to stop at, what
		 * it meets there can only be a second input, an error. */
		int before = g == c->g && (!excl || bypos) && vv && vv->def && g_pos(c, vv->def) < low && !is_const(g, v, 0);
		int leaf = !vv || !vv->def || vv->g != g || (stop && strcmp(v, stop) == 0) || before || alias ||
			   (excl && hint_in && strcmp(v, hint_in) == 0);
		if (!leaf && pmap_get(&seen, vv->def))
			continue;
		if (!leaf && excl && !is_const(g, v, 0)) {
			if (!elems)
				continue; /* its own once another read brings it in */
			void **r = pmap_ref(&left, vv->def);
			if (!*r)
				*r = (void *)(uintptr_t)(uses_of(c, vv->def) + 1);
			*r = (void *)((uintptr_t)*r - 1);
			if ((uintptr_t)*r > 1)
				continue; /* read from outside, unless its last use comes */
		}
		if (leaf) {
			if (outside(g, L, x, stop, hint_in, v, &input, e))
				return -1;
			continue;
		}
		Node *n = vv->def;
		pmap_put(&seen, n, (void *)1);
		nv_push(&nv, n);
		for (size_t j = 0; j < n->n_input; j++)
			TODO(n->input[j], !reads_shape(n));
		for (size_t k = 0; k < g->nsub; k++)
			if (g->sub[k]->owner == n)
				for (size_t j = 0; j < g->sub[k]->nouter; j++)
					TODO(g->sub[k]->outer[j], 1);
	}
#undef TODO
	/* What the exclusive cone reads of nodes left out is read from outside;
	 * out itself, when something besides the weighting reads it too. */
	if (excl && !pmap_get(&seen, ov->def) && outside(g, L, x, stop, hint_in, x->out, &input, e))
		return -1;
	for (size_t i = 0; excl && i < nv.n; i++) {
		const char *v;
		for (size_t j = 0; (v = nth_read(g, nv.v[i], j)); j++) {
			Val *vv = *v ? g_val(g, v) : NULL;
			if (vv && vv->def && vv->g == g && !pmap_get(&seen, vv->def) &&
			    outside(g, L, x, stop, hint_in, v, &input, e))
				return -1;
		}
	}
	if (stop && input)
		return errf(e, "layer %s: expert %d reads '%s' besides its gathered rows '%s'; set `input:` in experts.yaml",
			    L->scope, x->id, input, stop);
	if (!stop && !input)
		return errf(e, "layer %s: expert %d reads no tensor but constants; cannot tell its input", L->scope, x->id);
	/* an expert that is its input has no node, and nv.v is NULL */
	if (nv.n > 1 && flow_order(c, g, x->out, &seen, nv.v, nv.n) != nv.n)
		return errf(e, "layer %s: internal error: expert %d's nodes do not all lead to its output; please report this model",
			    L->scope, x->id);
	x->node = nv.v;
	x->nnode = nv.n;
	x->g = g;
	x->in = stop ? stop : input;
	for (Graph *h = g; h && h->parent; h = h->parent)
		if (!h->parent->parent)
			x->gate = h->owner;
	return 0;
}

/* ---- the routed sum ---- */

/* Classes of values in the accumulation: partial sums carry the set of
 * experts whose contributions they hold. */
typedef struct {
	uint64_t *bits; /* per value: which experts (index into L->ex) */
	int contrib;    /* a view of one contribution, not yet summed */
	/* A contribution added to rows of base read at the rows the expert
	 * ran on: a ScatterND writing it back into base adds it. */
	const char *base;
	Node *z;
} Acc;

typedef struct {
	Ctx *c;
	Layer *L;
	Map acc;        /* value -> Acc* */
	size_t words;
	Map pend;       /* node -> pending re-evaluation */
} AccWalk;

static Acc *acc_new(AccWalk *w)
{
	Acc *a = arena_alloc(w->c->tmp, sizeof *a);
	a->bits = arena_alloc(w->c->tmp, w->words * 8);
	return a;
}

static Acc *acc_of(AccWalk *w, const char *v)
{
	return *v ? map_get(&w->acc, v) : NULL;
}

/* Zero, or a partial sum: what an accumulation step may add to. */
static int acc_or_zero(AccWalk *w, const Graph *g, const char *v, const uint64_t **bits)
{
	Acc *a = acc_of(w, v);
	if (a && !a->contrib) {
		*bits = a->bits;
		return 1;
	}
	*bits = NULL;
	return g_is_zero(g, v);
}

static int disjoint_or(AccWalk *w, uint64_t *dst, const uint64_t *src)
{
	if (!src)
		return 1;
	for (size_t i = 0; i < w->words; i++) {
		if (dst[i] & src[i])
			return 0;
		dst[i] |= src[i];
	}
	return 1;
}

/* The output class of n, or NULL when n is no accumulation step. */
static Acc *acc_eval(AccWalk *w, Node *n)
{
	Ctx *c = w->c;
	Graph *g = g_graph_of(c, n);
	const uint64_t *b0, *b1;
	if (g_is(n, "Cast") || g_is(n, "Identity") || g_is(n, "Expand") || g_is(n, "Reshape") ||
	    g_is(n, "Unsqueeze") || g_is(n, "Squeeze")) {
		Acc *a = acc_of(w, n->input[0]);
		return a; /* same class, same bits */
	}
	if (g_is(n, "Add") && n->n_input == 2) {
		/* out[b] + y: rows of a tensor plus a contribution on those rows */
		for (int s = 0; s < 2; s++) {
			Acc *a = acc_of(w, n->input[1 - s]);
			Node *rd = def_of(g, n->input[s]), *z = NULL;
			if (!a || !a->contrib || a->base || !rd || !g_is(rd, "Gather") || g_attr_i(rd, "axis", 0) != 0 ||
			    nz_coord(g, rd->input[1], &z) != w->L->rowc)
				continue;
			Acc *r = acc_new(w);
			disjoint_or(w, r->bits, a->bits);
			r->contrib = 1;
			r->base = rd->input[0];
			r->z = z;
			return r;
		}
	}
	if (g_is(n, "Add") || g_is(n, "Sum")) {
		Acc *r = acc_new(w);
		int any = 0;
		for (size_t i = 0; i < n->n_input; i++) {
			Acc *a = acc_of(w, n->input[i]);
			if (a) {
				if (!disjoint_or(w, r->bits, a->bits))
					return NULL;
				any = 1;
			} else if (!g_is_zero(g, n->input[i])) {
				return NULL;
			}
		}
		return any ? r : NULL;
	}
	if (is_scatter_el(n) || g_is(n, "ScatterND")) {
		Acc *u = acc_of(w, n->input[2]);
		if (!u || !u->contrib || !acc_or_zero(w, g, n->input[0], &b0))
			return NULL;
		const Onnx__AttributeProto *red = g_attr(n, "reduction");
		int add = red && red->has_s && red->s.len == 3 && memcmp(red->s.data, "add", 3) == 0;
		Node *z = NULL;
		/* The rows written are the rows the expert read. */
		if (nz_coord(g, n->input[1], &z) != w->L->rowc)
			return NULL;
		/* Rows read from the target, added to, written back: an add,
		 * when they are the same rows (NonZero's are distinct). */
		if (u->base) {
			if (add || strcmp(u->base, n->input[0]) != 0 || z != u->z || !g_is(n, "ScatterND"))
				return NULL;
			add = 1;
		}
		/* Writing over a partial sum replaces rows: only into zeros, or with add. */
		if (b0 && !add)
			return NULL;
		Acc *r = acc_new(w);
		disjoint_or(w, r->bits, b0);
		if (!disjoint_or(w, r->bits, u->bits))
			return NULL;
		return r;
	}
	if (g_is(n, "If")) {
		/* Both branches end in an accumulation of the value before: the
		 * expert the condition gates is added only when chosen, which the
		 * dense sum does by its weights. */
		Acc *r = acc_new(w);
		for (size_t k = 0; k < g->nsub; k++) {
			Graph *s = g->sub[k];
			if (s->owner != n)
				continue;
			if (s->gp->n_output != 1)
				return NULL;
			const char *o = s->gp->output[0]->name;
			Acc *a = acc_of(w, o);
			b1 = NULL;
			if (a && !a->contrib) {
				for (size_t i = 0; i < w->words; i++)
					r->bits[i] |= a->bits[i];
			} else if (!g_is_zero(s, o) && !acc_or_zero(w, s, strip(s, o, NULL), &b1)) {
				return NULL;
			} else if (b1) {
				for (size_t i = 0; i < w->words; i++)
					r->bits[i] |= b1[i];
			}
		}
		return r;
	}
	return NULL;
}

static unsigned acc_step(void *ud, Ctx *c, Node *n, int slot, const char *v)
{
	AccWalk *w = ud;
	(void)c;
	(void)v;
	(void)slot;
	if (n->n_output < 1 || !*n->output[0])
		return 0;
	Acc *a = acc_eval(w, n);
	if (!a)
		return 0;
	Acc *old = acc_of(w, n->output[0]);
	if (old && memcmp(old->bits, a->bits, w->words * 8) == 0)
		return 0;
	map_put(&w->acc, n->output[0], a);
	/* If bodies: the If's output is reached through the body's output. */
	return 1;
}

static int bits_all(const AccWalk *w, const uint64_t *b)
{
	for (size_t k = 0; k < w->L->nex; k++)
		if (!(b[k / 64] >> (k % 64) & 1))
			return 0;
	return 1;
}

/* The dense sum takes the shape of the experts' outputs: where the model
 * reshapes the full sum (Mixtral's [B*T,D] back to [B,T,D]), the value
 * replaced is the sum before, and the reshape stays to read it. */
static const char *before_views(AccWalk *w, const Graph *g, const char *v)
{
	for (int d = 0; d < 16; d++) {
		Node *n = def_of(g, v);
		if (!n || !(g_is(n, "Reshape") || g_is(n, "Unsqueeze") || g_is(n, "Squeeze") || g_is(n, "Expand")))
			break;
		Acc *a = acc_of(w, n->input[0]);
		if (!a || a->contrib || !bits_all(w, a->bits))
			break;
		v = n->input[0];
	}
	return v;
}

static int find_combined(Ctx *c, Layer *L, const char *want, Err *e)
{
	AccWalk w = { .c = c, .L = L, .words = L->nex / 64 + 1 };
	map_init(&w.acc, c->tmp, 64);
	const char **seed = arena_alloc(c->tmp, L->nex * sizeof *seed);
	for (size_t k = 0; k < L->nex; k++) {
		Acc *a = acc_new(&w);
		a->bits[k / 64] |= 1ull << (k % 64);
		a->contrib = 1;
		map_put(&w.acc, L->ex[k].prod, a);
		seed[k] = L->ex[k].prod;
	}
	/* Values reached are re-walked whenever their class grows: a node
	 * reading two partial sums is settled by the later one. The bits only
	 * grow, so this ends. */
	for (size_t round = 0; round < L->nex + 2; round++) {
		Map reached;
		map_init(&reached, c->tmp, 64);
		for (size_t k = 0; k < L->nex; k++)
			flow_forward(c, g_graph_of(c, L->ex[k].mul), &seed[k], 1, acc_step, &w, &reached);
		/* Body outputs reached: the owning If is evaluated from its
		 * branches, and the walk continues after it. */
		int grew = 0;
		for (size_t k = 0; k < L->nex; k++) {
			if (!L->ex[k].gate)
				continue;
			Node *f = L->ex[k].gate;
			Acc *a = acc_eval(&w, f);
			Acc *old = acc_of(&w, f->output[0]);
			if (a && (!old || memcmp(old->bits, a->bits, w.words * 8) != 0)) {
				map_put(&w.acc, f->output[0], a);
				const char *o = f->output[0];
				Map r2;
				map_init(&r2, c->tmp, 16);
				flow_forward(c, g_graph_of(c, f), &o, 1, acc_step, &w, &r2);
				grew = 1;
			}
		}
		if (!grew)
			break;
	}
	/* The routed sum: a full partial sum no accumulation step reads. */
	const char *found = NULL, *other = NULL;
	int nfound = 0, wanted = 0;
	for (size_t i = 0; i < w.acc.cap; i++) {
		const char *v = map_slot_key(&w.acc.slot[i]);
		Acc *a = w.acc.slot[i].val;
		if (!v || a->contrib || !bits_all(&w, a->bits))
			continue;
		Val *vv = g_val(c->g, v);
		if (!vv || vv->g != c->g)
			continue;
		int last = 1;
		for (size_t u = 0; u < vv->nuse && last; u++) {
			Node *m = vv->use[u].n;
			Acc *b = m->n_output ? acc_of(&w, m->output[0]) : NULL;
			last = !(b && !b->contrib);
		}
		if (!last)
			continue;
		wanted |= want && strcmp(v, want) == 0;
		if (!found || g_pos(c, vv->def) < g_pos(c, def_of(c->g, found))) {
			other = found;
			found = v;
		} else {
			other = v;
		}
		nfound++;
	}
	/* experts.yaml's `output:` picks among the candidates, and only there:
	 * a value that is not one would be replaced by a sum it is not. */
	if (want && !wanted)
		return errf(e, "layer %s: experts.yaml gives output '%s', which is not the routed sum of the experts' outputs (%s%s%s%s%s)",
			    L->scope, want, nfound ? "that is " : "no value sums exactly them", found ? found : "",
			    other ? ", or " : "", other ? other : "", nfound > 2 ? ", ..." : "");
	if (want) {
		L->combined = before_views(&w, c->g, want);
		return 0;
	}
	if (nfound != 1)
		return errf(e, "layer %s: %s the routed sum of the experts' outputs (%d candidates%s%s%s%s)%s",
			    L->scope, nfound ? "cannot tell which value is" : "cannot find", nfound,
			    found ? ": " : "", found ? found : "", other ? ", " : "", other ? other : "",
			    nfound ? "; set `output:` in experts.yaml" : "; the layer cannot be repaired safely");
	L->combined = before_views(&w, c->g, found);
	return 0;
}

/* ---- one router ---- */

static const char *topk_name(const Node *t)
{
	return t->name && *t->name ? t->name : t->output[0];
}

/* The Mul weighting the expert: reached from the weight value through ops
 * that keep its elements. Fills the expert side and, for a Cast on the
 * weight side, its type. */
typedef struct {
	Node *mul;
	int slot;   /* operand the weight arrives at */
	int nmul;
	int64_t cast;
	Node *odd;
} WUse;

static unsigned wuse_step(void *ud, Ctx *c, Node *n, int slot, const char *v)
{
	WUse *u = ud;
	(void)c;
	(void)v;
	if (slot < 0 || g_is(n, "Shape") || g_is(n, "Size"))
		return 0;
	if (g_is(n, "Mul")) {
		if (!u->mul || u->mul != n)
			u->nmul++;
		u->mul = n;
		u->slot = slot;
		return 0;
	}
	if (slot == 0 && (g_is(n, "Reshape") || g_is(n, "Unsqueeze") || g_is(n, "Squeeze") || g_is(n, "Flatten") ||
			  g_is(n, "Expand") || g_is(n, "Identity"))) 
		return ~0u;
	if (slot == 0 && g_is(n, "Cast")) {
		u->cast = g_attr_i(n, "to", 0);
		return ~0u;
	}
	u->odd = n;
	return 0;
}

/* Same value for every expert, or an error naming the two. */
static int agree(Layer *L, const char **dst, const char *v, const char *what, int id, Err *e)
{
	if (!*dst || strcmp(*dst, v) == 0) {
		*dst = v;
		return 0;
	}
	if (!strcmp(what, "inputs")) /* DiversifiedExpertGroup: a depthwise layer per expert before the dispatch */
		return errf(e, "layer %s: experts read different inputs ('%s'; expert %d: '%s'), each computed before the dispatch by a layer of its own (as DiversifiedExpertGroup's depthwise layers); the layer cannot be repaired safely",
			    L->scope, *dst, id, v);
	return errf(e, "layer %s: experts read different %s ('%s'; expert %d: '%s'); set it in experts.yaml",
		    L->scope, what, *dst, id, v);
}

static int expert_of(Ctx *c, Layer *L, Node *eq, int64_t id, Expert *x, const char **wview, int alone,
		     Err *e)
{
	Graph *g = c->g;
	x->id = (int)id;
	x->eq = eq;
	Mask m = { .a = c->tmp };
	Map mask;
	map_init(&mask, c->tmp, 32);
	m.mask = &mask;
	flow_forward(c, g, (const char *[]){ eq->output[0] }, 1, mask_step, &m, &mask);
	if (m.odd)
		return errf(e, "layer %s: expert %d's dispatch mask reaches node '%s' (%s), which no known dispatch form has; the layer cannot be repaired safely",
			    L->scope, x->id, m.odd->name ? m.odd->name : "", m.odd->op_type);
	if (m.andc) {
		if (is_const(g, m.andc, 0))
			return errf(e, "layer %s: expert %d's dispatch mask is And-ed with a constant '%s'; the layer cannot be repaired safely",
				    L->scope, x->id, m.andc);
		if (agree(L, &L->wmask, m.andc, "conditions besides the expert id", x->id, e))
			return -1;
	} else if (L->wmask) {
		return errf(e, "layer %s: expert %d's dispatch lacks the condition '%s' the other experts have",
			    L->scope, x->id, L->wmask);
	}
	size_t low = g_pos(c, eq);
	const char *wsrc = NULL, *stop = NULL;
	WUse wu = { 0 };
	if (m.nnz) {
		if (m.nnz > 1)
			return errf(e, "layer %s: expert %d's mask goes through %zu NonZero nodes; the layer cannot be repaired safely",
				    L->scope, x->id, m.nnz);
		Node *z = m.nz[0];
		/* A scripted layer gathers inside the If body it gates. */
		Graph *zg = g_graph_of(c, z);
		Coords k = { .a = c->tmp };
		Map rk;
		map_init(&rk, c->tmp, 32);
		flow_forward(c, zg, (const char *[]){ z->output[0] }, 1, coord_step, &k, &rk);
		Node *row = NULL, *wg = NULL;
		for (size_t i = 0; i < k.nuse; i++) {
			Node *n = k.use[i];
			Node *zz = NULL;
			if (is_scatter_el(n) || g_is(n, "ScatterND"))
				continue; /* checked with the routed sum */
			Graph *ng = g_graph_of(c, n);
			if (g_is(n, "Gather") && g_attr_i(n, "axis", 0) == 0 && nz_coord(ng, n->input[1], &zz) == L->rowc &&
			    zz == z && rmw_read(ng, n))
				continue; /* checked with the routed sum */
			const char *mw = L->rowc ? NULL : map_weights(ng, n, z, L->indices, id);
			int ax = mw ? -1 : rows_axis(ng, n);
			if (ax >= 0 && nz_coord(ng, n->input[1], &zz) == L->rowc && zz == z && !map_get(&rk, n->input[0])) {
				if (row && strcmp(row->input[0], n->input[0]) != 0)
					return errf(e, "layer %s: expert %d gathers rows of two tensors ('%s', '%s'); the layer cannot be repaired safely",
						    L->scope, x->id, row->input[0], n->input[0]);
				if (row)
					return errf(e, "layer %s: expert %d gathers its rows twice ('%s', '%s'); the layer cannot be repaired safely",
						    L->scope, x->id, row->name ? row->name : "", n->name ? n->name : "");
				row = n;
				L->rowax = ax;
				continue;
			}
			int pm = mw != NULL;
			const char *t = pm ? mw : weight_source(ng, n, z, L->rowc);
			if (t && !wg) {
				if (pm && !any_rows(ng, z, eq->output[0]))
					return errf(e, "layer %s: expert %d's rows are not those where any position chose it; the layer cannot be repaired safely",
						    L->scope, x->id);
				if (x != L->ex && pm != L->permap)
					return errf(e, "layer %s: expert %d is weighted %s, expert %d %s; the layer cannot be repaired safely",
						    L->scope, x->id, pm ? "per position" : "per row", L->ex[0].id,
						    pm ? "per row" : "per position");
				L->permap = pm;
				wg = n;
				wsrc = t;
				continue;
			}
			return errf(e, "layer %s: expert %d's dispatch indexes node '%s' (%s) in a way no known dispatch form does; the layer cannot be repaired safely",
				    L->scope, x->id, n->name ? n->name : "", n->op_type);
		}
		if (!row)
			return errf(e, "layer %s: expert %d's NonZero dispatch gathers no rows; the layer cannot be repaired safely",
				    L->scope, x->id);
		if (!wg)
			return errf(e, "layer %s: cannot find where expert %d's output is weighted (no gather of one weight per selected row and slot); set router.weights in experts.yaml",
				    L->scope, x->id);
		stop = row->output[0];
		if (agree(L, &L->x, row->input[0], "inputs", x->id, e))
			return -1;
		Map r2;
		map_init(&r2, c->tmp, 16);
		flow_forward(c, g_graph_of(c, wg), (const char *[]){ wg->output[0] }, 1, wuse_step, &wu, &r2);
		L->form = FORM_ROWS;
	} else if (m.wsum) {
		/* sum over slots of W * match, then (reshaped) times the expert. */
		Node *s = m.wsum;
		Graph *sg = g_graph_of(c, s);
		Val *sv = g_val(sg, s->output[0]);
		Node *red = sv && sv->nuse == 1 ? sv->use[0].n : NULL;
		int64_t ax = 0;
		int one = red && g_is(red, "ReduceSum") && reduce_axis1(g_graph_of(c, red), red, &ax);
		/* The slot axis is 1; exporters of axis=-1 routers write -1. */
		if (!one || axis_fwd(ax, g_ty_rank(sg, m.wsum_w)) != 1)
			return errf(e, "layer %s: expert %d's weight W*(match) is not summed over the slot axis; the layer cannot be repaired safely",
				    L->scope, x->id);
		wsrc = m.wsum_w;
		Map r2;
		map_init(&r2, c->tmp, 16);
		flow_forward(c, g_graph_of(c, red), (const char *[]){ red->output[0] }, 1, wuse_step, &wu, &r2);
		L->form = FORM_MASKSUM;
	} else {
		return errf(e, "layer %s: expert %d's dispatch mask reaches neither a NonZero nor a weighting; the layer cannot be repaired safely",
			    L->scope, x->id);
	}
	if (wu.odd || wu.nmul != 1)
		return errf(e, "layer %s: expert %d's routing weight %s; the layer cannot be repaired safely", L->scope,
			    x->id, wu.odd ? arena_printf(c->a, "reaches node '%s' (%s) before any product", wu.odd->name ? wu.odd->name : "", wu.odd->op_type)
				    : wu.nmul ? "multiplies two values" : "multiplies nothing");
	if (x != L->ex && wu.cast != L->wcast)
		return errf(e, "layer %s: expert %d's routing weight is cast differently from expert %d's; the layer cannot be repaired safely",
			    L->scope, x->id, L->ex[0].id);
	L->wcast = wu.cast;
	x->prod = wu.mul->output[0];
	x->mul = wu.mul;
	x->out = wu.mul->input[1 - wu.slot];
	if (agree(L, wview, wsrc, "routing weights", x->id, e))
		return -1;
	return collect(c, L, x, stop, low, alone, L->spec ? L->spec->input : NULL, e);
}

/* Attributes that are values, not structure: a Constant's value and a
 * tensor attribute are weights, which the mapping checks; a subgraph is
 * walked as nodes of its own. */
static int value_attr(const Onnx__AttributeProto *x)
{
	switch (x->type) {
	case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOAT:
	case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT:
	case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRING:
	case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOATS:
	case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INTS:
	case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRINGS:
		return 0;
	default:
		return 1;
	}
}

static int attr_equal(const Onnx__AttributeProto *x, const Onnx__AttributeProto *y)
{
	if (x->type != y->type || x->f != y->f || x->i != y->i || x->s.len != y->s.len ||
	    (x->s.len && memcmp(x->s.data, y->s.data, x->s.len)) || x->n_floats != y->n_floats ||
	    x->n_ints != y->n_ints || x->n_strings != y->n_strings)
		return 0;
	if ((x->n_floats && memcmp(x->floats, y->floats, x->n_floats * sizeof *x->floats)) ||
	    (x->n_ints && memcmp(x->ints, y->ints, x->n_ints * sizeof *x->ints)))
		return 0;
	for (size_t k = 0; k < x->n_strings; k++)
		if (x->strings[k].len != y->strings[k].len ||
		    (x->strings[k].len && memcmp(x->strings[k].data, y->strings[k].data, x->strings[k].len)))
			return 0;
	return 1;
}

/* The first structural attribute (kernel, dilations, pads, group, eps...)
 * that one of nodes a and b has and the other lacks or sets otherwise. */
static const char *attr_differs(const Node *a, const Node *b)
{
	if (g_is(a, "Constant"))
		return NULL;
	for (int pass = 0; pass < 2; pass++) {
		const Node *p = pass ? b : a, *q = pass ? a : b;
		for (size_t i = 0; i < p->n_attribute; i++) {
			const Onnx__AttributeProto *x = p->attribute[i], *y = g_attr(q, x->name);
			if (!value_attr(x) && (!y || !attr_equal(x, y)))
				return x->name;
		}
	}
	return NULL;
}

/* The first node (of experts with as many) where y differs from x: in op
 * or input count, or, *attr set, in that attribute; nnode if none. */
static size_t first_diff(const Expert *x, const Expert *y, const char **attr)
{
	*attr = NULL;
	for (size_t i = 0; i < x->nnode; i++) {
		const Node *p = x->node[i], *q = y->node[i];
		if (strcmp(p->op_type, q->op_type) != 0 || p->n_input != q->n_input || (*attr = attr_differs(p, q)))
			return i;
	}
	return x->nnode;
}

const char *moe_structure_diff(Arena *a, const Expert *x, const Expert *y)
{
	if (x->nnode != y->nnode)
		return arena_printf(a, "%zu nodes where expert %d has %zu", y->nnode, x->id, x->nnode);
	const char *at;
	size_t i = first_diff(x, y, &at);
	if (i == x->nnode)
		return NULL;
	const Node *p = x->node[i], *q = y->node[i];
	if (at)
		return arena_printf(a, "node '%s' (%s) sets attribute '%s' otherwise than expert %d's '%s'",
				    q->name ? q->name : "", q->op_type, at, x->id, p->name ? p->name : "");
	return arena_printf(a, "node '%s' is a %s of %zu inputs where expert %d's '%s' is a %s of %zu",
			    q->name ? q->name : "", q->op_type, q->n_input, x->id, p->name ? p->name : "", p->op_type,
			    p->n_input);
}

int moe_same_structure(const Expert *a, const Expert *b)
{
	const char *at;
	return a->nnode == b->nnode && first_diff(a, b, &at) == a->nnode;
}

static int cmp_id(const void *a, const void *b)
{
	const Expert *x = a, *y = b;
	return (x->id > y->id) - (x->id < y->id);
}

static const SpecLayer *hint_for(Ctx *c, const Spec *s, const Node *t);

/* A router's indices that reach a NonZero or an If condition through
 * integer and boolean ops (masks scattered from them, slices of those
 * masks, comparisons) drive a data-dependent dispatch, whatever its form:
 * diagnosis must not call such a model healthy. So do indices that are
 * sorted (argsort exports as TopK): tokens grouped by expert, as
 * DeepSeek's moe_infer groups them, then cut into per-expert runs whose
 * lengths a trace bakes in. */
typedef struct {
	Node *hit;
} Unknown;

static unsigned unknown_step(void *ud, Ctx *c, Node *n, int slot, const char *v)
{
	Unknown *u = ud;
	Graph *g = g_graph_of(c, n);
	(void)v;
	if (u->hit || slot < 0)
		return 0;
	if (g_is(n, "NonZero") || ((g_is(n, "If") || g_is(n, "TopK")) && slot == 0)) {
		u->hit = n;
		return 0;
	}
	if ((is_scatter_el(n) || g_is(n, "ScatterND")) && slot == 1)
		return is_const(g, nin(n, 0), 0) ? ~0u : 0;
	if (g_is(n, "OneHot") && slot == 0)
		return ~0u;
	static const char *ops[] = { "Equal", "Greater", "GreaterOrEqual", "Less", "LessOrEqual", "And", "Or",
				     "Not", "Xor", "ReduceMax", "ReduceMin", "ReduceSum", NULL };
	for (const char **o = ops; *o; o++)
		if (g_is(n, *o))
			return ~0u;
	if (g_is(n, "Cast")) {
		int64_t to = g_attr_i(n, "to", 0);
		return to == ONNX__TENSOR_PROTO__DATA_TYPE__BOOL || to == ONNX__TENSOR_PROTO__DATA_TYPE__INT64 ||
				       to == ONNX__TENSOR_PROTO__DATA_TYPE__INT32
			       ? ~0u
			       : 0;
	}
	return moves(n, slot, g) ? ~0u : 0;
}

/* The NonZero, If or sort that the values derived from v reach first. */
static Node *unknown_dispatch(Ctx *c, const char *v)
{
	Unknown u = { 0 };
	Map r;
	map_init(&r, c->tmp, 32);
	flow_forward(c, c->g, &v, 1, unknown_step, &u, &r);
	return u.hit;
}

/* Whether something downstream computes with weights: a Conv, MatMul or
 * Gemm reading a constant. Bounded; a walk cut short says no. */
typedef struct {
	int found;
	size_t left;
} Weighted;

static unsigned weighted_step(void *ud, Ctx *c, Node *n, int slot, const char *v)
{
	Weighted *w = ud;
	(void)v;
	if (w->found || !w->left)
		return 0;
	w->left--;
	Graph *g = g_graph_of(c, n);
	if ((g_is(n, "Conv") || g_is(n, "ConvTranspose") || g_is(n, "MatMul") || g_is(n, "Gemm")) && n->n_input > 1 &&
	    slot == 0 && is_const(g, n->input[1], 0)) {
		w->found = 1;
		return 0;
	}
	return ~0u;
}

/* Top-1 routing by ArgMax (w, i = p.max(-1), Switch style) has no TopK and
 * no form the repair knows. Its ids compared with an expert's, one at a
 * time, and dispatched through NonZero or If to rows that weights then
 * compute with, are the dispatch a trace cuts experts from: an error
 * naming the ArgMax, or 0 when a is no such router. A class filter after
 * an NMS (its kept rows compute with no weights) is not one. */
static int argmax_router(Ctx *c, Node *a, Err *e)
{
	Views w = { .a = c->tmp };
	Map reached;
	map_init(&reached, c->tmp, 32);
	flow_forward(c, c->g, (const char *[]){ a->output[0] }, 1, view_step, &w, &reached);
	for (size_t i = 0; i < w.n; i++) {
		if (!g_is(w.eq[i], "Equal"))
			continue;
		Node *hit = unknown_dispatch(c, w.eq[i]->output[0]);
		if (!hit)
			continue;
		Weighted wt = { .left = 4096 };
		Map r;
		map_init(&r, c->tmp, 64);
		flow_forward(c, g_graph_of(c, hit), (const char *[]){ hit->output[0] }, 1, weighted_step, &wt, &r);
		if (wt.found)
			return errf(e, "router '%s': top-1 routing by ArgMax, its ids compared with expert %lld and dispatched through %s '%s'; only TopK routers are repaired, so the layer cannot be repaired safely",
				    topk_name(a), (long long)w.id[i], hit->op_type, hit->name ? hit->name : "");
	}
	return 0;
}

/* The weight-map form (ES_MOE's dense forward, which its exports take):
 * the indices only mask a [B,E,...] map of routing weights, and each
 * expert's output is multiplied by its own channel map[:, i:i+1]. Nothing
 * is dispatched, so the graph is static, and it is whole when the channels
 * multiplied cover every expert id. A tracer that baked the dummy's choice
 * into the graph (early ES_MOE's .item() loop) leaves only its channels. */
typedef struct {
	int64_t width;
	const char *map;     /* the one map the channels are cut from */
	unsigned char *seen; /* [width] */
	int64_t nseen;
	int other;           /* a cut of a second map */
} Cover;

/* n cuts channel *ch (-1: all, as unit splits) of its input 0 along axis 1;
 * 0 when n is no one-channel cut. */
static int channel_cut(const Graph *g, const Node *n, int64_t width, int64_t *ch)
{
	int64_t s, e, ax = 0, st = 1;
	if (g_is(n, "Gather")) {
		if (g_attr_i(n, "axis", 0) != 1 || !const_int1(g, nin(n, 1), ch))
			return 0;
		*ch += *ch < 0 ? width : 0; /* -1 is the last channel, not all */
		return *ch >= 0 && *ch < width;
	}
	if (g_is(n, "Split")) {
		if (g_attr_i(n, "axis", 0) != 1 || (int64_t)n->n_output != width || !unit_split(g, n))
			return 0;
		*ch = -1;
		return 1;
	}
	if (!g_is(n, "Slice"))
		return 0;
	const Onnx__AttributeProto *as = g_attr(n, "starts"), *ae = g_attr(n, "ends"), *aa = g_attr(n, "axes");
	if (as || ae) { /* opset < 10 */
		if (!as || !ae || !aa || as->n_ints != 1 || ae->n_ints != 1 || aa->n_ints != 1)
			return 0;
		s = as->ints[0], e = ae->ints[0], ax = aa->ints[0];
	} else if (n->n_input < 4 || !const_int1(g, n->input[1], &s) || !const_int1(g, n->input[2], &e) ||
		   !const_int1(g, n->input[3], &ax) || (n->n_input > 4 && *n->input[4] && !const_int1(g, n->input[4], &st))) {
		return 0;
	}
	if (s < 0)
		s += width;
	if (axis_fwd(ax, g_ty_rank(g, n->input[0])) != 1 || st != 1 || e != s + 1)
		return 0;
	*ch = s;
	return 1;
}

/* Whether value v multiplies something, itself or through ops that only
 * move it: a channel that weighs an expert's output. */
static int weighs(const Graph *g, const char *v, int depth)
{
	Val *x = g_val(g, v);
	for (uint32_t i = 0; x && i < x->nuse; i++) {
		Node *u = x->use[i].n;
		if (g_is(u, "Mul"))
			return 1;
		if (depth < 4 && moves(u, 0, g) && u->n_input && strcmp(u->input[0], v) == 0 && u->n_output &&
		    weighs(x->use[i].g, u->output[0], depth + 1))
			return 1;
	}
	return 0;
}

static unsigned cover_step(void *ud, Ctx *c, Node *n, int slot, const char *v)
{
	Cover *cv = ud;
	Graph *g = g_graph_of(c, n);
	int64_t ch;
	if (slot < 0)
		return 0;
	/* The map's own computation does no convolution: past one, the walk
	 * would be in the rest of the model. */
	if (g_is(n, "Conv") || g_is(n, "ConvTranspose") || g_is(n, "MatMul") || g_is(n, "Gemm"))
		return 0;
	if (slot == 0 && (g_is(n, "Slice") || g_is(n, "Gather") || g_is(n, "Split"))) {
		if (g_ty_dim(g, v, 1) != cv->width || !channel_cut(g, n, cv->width, &ch) ||
		    !weighs(g, n->output[0], 0))
			return moves(n, slot, g) ? ~0u : 0;
		if (cv->map && strcmp(cv->map, v) != 0) {
			cv->other = 1;
			return 0;
		}
		cv->map = v;
		for (int64_t i = ch < 0 ? 0 : ch; i < (ch < 0 ? cv->width : ch + 1); i++)
			if (i >= 0 && i < cv->width && !cv->seen[i]) {
				cv->seen[i] = 1;
				cv->nseen++;
			}
		return 0;
	}
	return ~0u;
}

/* 1: the weight-map form with every expert's channel; 0: not that form;
 * -1: the form with channels missing (an error saying which). */
static int map_cover(Ctx *c, Node *t, const char *scope, int64_t width, Err *e)
{
	if (width < 2 || width > 65536)
		return 0;
	Cover cv = { .width = width, .seen = arena_alloc(c->tmp, (size_t)width) };
	memset(cv.seen, 0, (size_t)width);
	Map r;
	map_init(&r, c->tmp, 32);
	flow_forward(c, c->g, (const char *[]){ t->output[1] }, 1, cover_step, &cv, &r);
	if (!cv.map || cv.other)
		return 0;
	if (cv.nseen == width)
		return 1;
	int64_t miss = 0;
	while (cv.seen[miss])
		miss++;
	return errf(e, "router '%s': only %lld of its %lld experts are weighted in the graph (channels of '%s'; expert %lld has none): the export fixed the dummy input's choice; the layer cannot be repaired safely",
		    scope, (long long)cv.nseen, (long long)width, cv.map, (long long)miss);
}

/* ---- what the names say (for reports and zero-config use only) ---- */

typedef struct {
	const char **v;
	size_t n;
} Comps;

/* "model.4.m.0" -> {model, 4, m, 0}; NULL -> none. */
static Comps comps(Arena *a, const char *m)
{
	Comps r = { 0 };
	if (!m)
		return r;
	char *buf = arena_strdup(a, m);
	r.v = arena_alloc(a, (strlen(m) / 2 + 2) * sizeof *r.v);
	for (char *p = buf; *p;) {
		r.v[r.n++] = p;
		char *d = strchr(p, '.');
		if (!d)
			break;
		*d = 0;
		p = d + 1;
	}
	return r;
}

static size_t common(Comps a, Comps b)
{
	size_t i = 0;
	while (i < a.n && i < b.n && strcmp(a.v[i], b.v[i]) == 0)
		i++;
	return i;
}

static const char *join(Arena *a, Comps c, size_t from, size_t to, size_t idpos)
{
	size_t len = 1;
	for (size_t i = from; i < to; i++)
		len += strlen(c.v[i]) + 4;
	char *o = arena_alloc(a, len), *w = o;
	for (size_t i = from; i < to; i++) {
		if (i > from)
			*w++ = '.';
		const char *p = i == idpos ? "{i}" : c.v[i];
		memcpy(w, p, strlen(p));
		w += strlen(p);
	}
	*w = 0;
	return o;
}

/* The module every node of expert x shares (NULL without names). */
static Comps expert_module(Ctx *c, const Expert *x)
{
	Comps cm = { 0 };
	int first = 1;
	for (size_t j = 0; j < x->nnode; j++) {
		const Node *n = x->node[j];
		/* Exporters name hoisted constants anywhere, and the cast of the
		 * output (out.to(dtype)) after the layer, not the expert. */
		if (g_is(n, "Constant") || g_is(n, "Cast") || g_is(n, "Identity"))
			continue;
		/* Nor is the reshape of the gathered rows (Mixtral's
		 * h[None, rows].reshape(-1, D)) the expert's: the layer's. */
		if (n->n_input && x->in && strcmp(n->input[0], x->in) == 0 &&
		    (g_is(n, "Reshape") || g_is(n, "Flatten") || g_is(n, "Squeeze") || g_is(n, "Unsqueeze")))
			continue;
		Comps m = comps(c->tmp, n->name ? spec_node_module(c->tmp, n->name) : NULL);
		if (!m.n)
			return (Comps){ 0 };
		if (first)
			cm = m;
		else
			cm.n = common(cm, m);
		first = 0;
	}
	return cm;
}

/* L->module and L->pattern from node names: the expert's module is where
 * its id appears first after the part it shares with the router, and the
 * same position must hold every other expert's id. */
static void name_layer(Ctx *c, Layer *L)
{
	Arena *a = c->tmp;
	const char *tn = L->topk->name;
	/* "/TopK": a node of the root module (a MoE exported alone) */
	L->topmodule = !tn ? NULL : tn[0] == '/' && !strchr(tn + 1, '/') ? "" : spec_node_module(c->a, tn);
	Comps tm = comps(a, L->topmodule);
	if (!L->nex) {
		/* The router's parent (model.5 for /model.5/router/TopK), unless
		 * the router is the layer's own node (ES_MOE's /model.3/TopK):
		 * an index names a module in a list, never the router inside it. */
		if (tm.n) {
			const char *last = tm.v[tm.n - 1];
			size_t keep = *last && strspn(last, "0123456789") == strlen(last) ? tm.n : tm.n - 1;
			L->module = arena_strdup(c->a, join(a, tm, 0, keep, (size_t)-1));
		}
		return;
	}
	Comps *em = arena_alloc(a, L->nex * sizeof *em);
	for (size_t k = 0; k < L->nex; k++)
		if (!(em[k] = expert_module(c, &L->ex[k])).n)
			return;
	size_t pre = tm.n ? common(tm, em[0]) : 0;
	char id0[16];
	snprintf(id0, sizeof id0, "%d", L->ex[0].id);
	for (size_t p = pre; p < em[0].n; p++) {
		if (strcmp(em[0].v[p], id0) != 0 || p == 0)
			continue;
		int ok = 1;
		for (size_t k = 1; k < L->nex && ok; k++) {
			char idk[16];
			snprintf(idk, sizeof idk, "%d", L->ex[k].id);
			ok = em[k].n > p && strcmp(em[k].v[p], idk) == 0;
			for (size_t i = 0; i < p && ok; i++)
				ok = strcmp(em[k].v[i], em[0].v[i]) == 0;
		}
		if (!ok)
			continue;
		/* The layer: what the router and the experts share, short of the
		 * container holding the experts. */
		size_t lm = pre < p ? pre : p - 1;
		if (!tm.n)
			lm = p - 1;
		L->module = arena_strdup(c->a, join(a, em[0], 0, lm, (size_t)-1));
		L->pattern = arena_strdup(c->a, join(a, em[0], lm, p + 1, p));
		L->named = arena_alloc(c->a, L->nex * sizeof *L->named);
		for (size_t k = 0; k < L->nex; k++)
			L->named[k] = arena_strdup(c->a, join(a, em[k], 0, p + 1, (size_t)-1));
		return;
	}
}

/* 1: an MoE layer, 0: a TopK that routes nothing, -1: error. */
static int analyse(Ctx *c, Node *t, const SpecLayer *hint, Layer *L, Err *e)
{
	memset(L, 0, sizeof *L);
	L->spec = hint;
	L->topk = t;
	L->scope = topk_name(t);
	L->gen = c->gen;
	L->topk_k = -1;
	L->width = -1;
	int64_t k;
	if (t->n_input > 1 && (const_int1(c->g, t->input[1], &k) || g_ty_val(c->g, t->input[1], 0, &k)))
		L->topk_k = k;
	else if (t->n_input == 1)
		L->topk_k = g_attr_i(t, "k", -1);
	/* The router's width: the size of the axis TopK picks from. */
	if (t->n_input > 0)
		L->width = g_ty_dim(c->g, t->input[0], g_attr_i(t, "axis", -1));
	Views w = { .a = c->tmp };
	Map reached;
	map_init(&reached, c->tmp, 32);
	flow_forward(c, c->g, (const char *[]){ t->output[1] }, 1, view_step, &w, &reached);
	if (!w.n) {
		if (!w.dense && !w.sparse) {
			Node *hit = unknown_dispatch(c, t->output[1]);
			if (hit)
				return errf(e, "router '%s': its indices reach %s '%s' through a dispatch no known form has (no comparison with expert ids; e.g. ES_MOE's per-pixel routing map); the layer cannot be repaired safely",
					    L->scope, hit->op_type, hit->name ? hit->name : "");
			int whole = map_cover(c, t, L->scope, L->width, e);
			if (whole <= 0)
				return whole;
			w.dense = 1;
		}
		L->form = w.dense ? FORM_DENSE : FORM_SPARSE;
		L->indices = t->output[1];
		name_layer(c, L);
		return 1;
	}
	L->ex = arena_alloc(c->a, w.n * sizeof *L->ex);
	L->rowc = w.rowc[0];
	for (size_t i = 0; i < w.n; i++) {
		if (w.rowc[i] != L->rowc)
			return errf(e, "layer %s: experts %lld and %lld are dispatched by masks of different layouts ([B,k] and [k,B]); the layer cannot be repaired safely",
				    L->scope, (long long)w.id[0], (long long)w.id[i]);
		if (w.id[i] < 0 || w.id[i] > 65535)
			return errf(e, "layer %s: the dispatch compares the router indices with %lld, which is no expert id",
				    L->scope, (long long)w.id[i]);
		for (size_t j = 0; j < L->nex; j++)
			if (L->ex[j].id == w.id[i])
				return errf(e, "layer %s: expert %lld is dispatched twice ('%s', '%s'); the layer cannot be repaired safely",
					    L->scope, (long long)w.id[i], L->ex[j].eq->name ? L->ex[j].eq->name : "",
					    w.eq[i]->name ? w.eq[i]->name : "");
		if (agree(L, &L->indices, w.view[i], "router indices", (int)w.id[i], e))
			return -1;
		Expert *x = &L->ex[L->nex++];
		if (expert_of(c, L, w.eq[i], w.id[i], x, &L->weights, w.n == 1, e))
			return -1;
	}
	qsort(L->ex, L->nex, sizeof *L->ex, cmp_id);
	for (size_t i = 0; i < L->nex; i++) {
		if (L->ex[i].gate) {
			int seen = 0;
			for (size_t j = 0; j < i; j++)
				seen |= L->ex[j].gate == L->ex[i].gate;
			L->nif += !seen;
		}
		if (i && (L->ex[i].in != L->ex[0].in && strcmp(L->ex[i].in, L->ex[0].in)) && L->form == FORM_MASKSUM &&
		    agree(L, &L->x, L->ex[i].in, "inputs", L->ex[i].id, e))
			return -1;
		for (size_t j = 0; j < L->ex[i].nnode; j++)
			L->convs += g_is(L->ex[i].node[j], "Conv");
		L->nodes += (int)L->ex[i].nnode;
	}
	if (L->form == FORM_MASKSUM)
		L->x = L->ex[0].in;
	L->rank = g_ty_rank(L->ex[0].g, L->ex[0].out);
	if (L->rank < 0)
		L->rank = g_ty_rank(g_graph_of(c, L->ex[0].mul), L->ex[0].prod);
	if (L->rank < 1)
		return errf(e, "layer %s: cannot tell the rank of expert %d's output '%s'; add value_info for it",
			    L->scope, L->ex[0].id, L->ex[0].out);
	name_layer(c, L);
	/* Experts missing beside present ones built differently: no clone
	 * can stand for them. Said here, so diagnosis calls it unrepairable. */
	for (size_t i = 1; i < L->nex && L->width > (int64_t)L->nex; i++)
		if (!moe_same_structure(&L->ex[0], &L->ex[i]))
			return errf(e, "layer %s: expert %d differs from expert %d in structure (its %s) and %lld of %lld experts are missing, which neither can stand for; experts of one layer must share a structure to be rebuilt",
				    L->scope, L->ex[i].id, L->ex[0].id, moe_structure_diff(c->tmp, &L->ex[0], &L->ex[i]),
				    (long long)(L->width - (int64_t)L->nex), (long long)L->width);
	/* Per-position weights must line up with the expert output's
	 * positions: [B,k,S...] for [B,C,S...]. */
	if (L->permap && (g_ty_rank(c->g, L->indices) != L->rank || g_ty_rank(c->g, L->weights) != L->rank))
		return errf(e, "layer %s: per-position routing with indices of rank %d and weights of rank %d for expert outputs of rank %d; the layer cannot be repaired safely",
			    L->scope, g_ty_rank(c->g, L->indices), g_ty_rank(c->g, L->weights), L->rank);
	if (L->spec && L->spec->output && !g_val(c->g, L->spec->output))
		return errf(e, "layer %s: output '%s' is not a value of the model", spec_scope_shown(L->spec->scope), L->spec->output);
	return find_combined(c, L, L->spec ? L->spec->output : NULL, e) ? -1 : 1;
}

/* The experts.yaml layer that will describe router t, as far as names or
 * router.indices tell before detection: its explicit values help detection
 * where the graph alone is ambiguous. */
static const SpecLayer *hint_for(Ctx *c, const Spec *s, const Node *t)
{
	const SpecLayer *best = NULL;
	size_t bestlen = 0;
	const char *m = t->name ? spec_node_module(c->tmp, t->name) : NULL;
	for (size_t i = 0; s && i < s->nlayer; i++) {
		const SpecLayer *l = &s->layer[i];
		if (l->router_indices)
			if (strcmp(l->router_indices, t->output[1]) == 0)
				return l;
		size_t n = strlen(l->scope);
		if (m && (!n || (strncmp(m, l->scope, n) == 0 && (m[n] == '.' || !m[n]))) && (!best || n > bestlen)) {
			best = l;
			bestlen = n;
		}
	}
	return best;
}

int moe_find(Ctx *c, const Spec *s, int lenient, Layer **out, size_t *n, Err *e)
{
	Onnx__GraphProto *gp = c->g->gp;
	Layer *L = NULL;
	size_t nl = 0, cap = 0;
	for (size_t i = 0; i < gp->n_node; i++) {
		Node *t = gp->node[i];
		int argmax = g_is(t, "ArgMax") && t->n_output == 1;
		if (!argmax && (!g_is(t, "TopK") || t->n_output < 2))
			continue;
		/* Doubling: grown by one, 400 layers copied 16 MB of Layers. */
		if (nl == cap) {
			cap = cap ? 2 * cap : 8;
			L = arena_grow(c->a, L, nl * sizeof *L, cap * sizeof *L);
		}
		const SpecLayer *h = hint_for(c, s, t);
		int r = argmax ? argmax_router(c, t, e) : analyse(c, t, h, &L[nl], e);
		/* A refused router under an experts.yaml entry: the line
		 * points at the entry (by name; a name-free one has none). */
		if (r < 0 && !lenient)
			return h ? spec_wrap(e, s, h) : -1;
		if (r < 0) {
			Layer *l = &L[nl];
			memset(l, 0, sizeof *l);
			l->topk = t;
			l->scope = topk_name(t);
			l->form = FORM_UNKNOWN;
			l->why = arena_strdup(c->a, e->msg);
			l->topk_k = l->width = -1;
			l->gen = c->gen;
			name_layer(c, l);
			r = 1;
		}
		nl += (size_t)r;
		arena_reset(c->tmp);
	}
	/* A layer named without experts is its router's parent, unless the
	 * router is the layer's own node; names cannot tell which when that
	 * parent is the root (/moe0/TopK). Two layers named the root are two
	 * layers, not the model: each is then its router's module. */
	size_t roots = 0;
	for (size_t i = 0; i < nl; i++)
		roots += L[i].module && !*L[i].module;
	for (size_t i = 0; i < nl && roots > 1; i++)
		if (L[i].module && !*L[i].module && !L[i].nex && L[i].topmodule && *L[i].topmodule)
			L[i].module = L[i].topmodule;
	*out = L;
	*n = nl;
	return 0;
}
