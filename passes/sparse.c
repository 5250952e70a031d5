/* Sparse dispatch: each input runs only the k experts its router chose,
 * in a static graph (no If, Loop or NonZero).
 *
 * Every constant the template expert reads becomes one initializer
 * stacking all experts' versions ([E, ...]: its own tensor for a present
 * expert, the checkpoint rebuild for a missing one); `Gather` with the
 * router's [B,k] indices picks the chosen experts' rows at run time. The
 * template's nodes are then re-emitted once, on a layout that holds the k
 * chosen experts of every sample side by side:
 *
 *  - static batch B: [1, B*k*C, spatial...]. A Conv becomes one grouped
 *    Conv (group B*k*g) whose weight is the gathered [B*k*Cout, Cin/g, ...]
 *    tensor; the first Conv reads the input once per sample (group B, its
 *    weight [B, k*Cout, Cin, ...]), not k times.
 *  - dynamic batch: a group count cannot depend on the batch, so only 1x1
 *    experts qualify: [B, k, C, H*W], each Conv a batched MatMul of the
 *    gathered [B, k, Cout, Cin] weights.
 *
 * Elementwise ops keep their form (per-channel constants gathered to the
 * layout), the exporter's GroupNorm (Reshape -> InstanceNormalization ->
 * Reshape(Shape)) is re-emitted with B*k*G (or k*G) groups, and the k
 * slots are summed with the routing weights the traced graph used, slot by
 * slot as densify does. What the template holds beyond that makes the
 * layer fall back to densify, with the reason in the report; the decision
 * is taken by a dry walk before anything changes. */
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "infer.h"
#include "moe.h"

/* Ranks past this are not feature maps any layout here handles. */
enum { DIMS_MAX = 8 };

typedef enum { V_X = 1, V_STACK, V_CONST } Kind;

typedef struct {
	Kind kind;
	const char *v; /* its value in the rewritten graph (V_STACK) */
	int64_t ch;    /* channels per expert, -1 unknown */
} SVal;

typedef struct {
	Ctx *c;
	Layer *L;
	const Expert *tpl;
	const Graph *tg; /* the template's graph */
	WSrc *w;
	Mapping m;
	int mapped;
	int E, k, r;
	int64_t B; /* static batch, -1: dynamic (MatMul layout) */
	int64_t N; /* B*k */
	int dry;
	Emit em;
	const char *idx, *xs, *xr, *x4;
	SVal x;
	Map val;  /* template value -> SVal* */
	PMap gn;  /* GroupNorm nodes -> their InstanceNormalization (the unit's end maps to it too) */
	const char *why;
	int convs;
	Err *e;
} S;

static int no(S *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static int no(S *s, const char *fmt, ...)
{
	char buf[512];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(buf, sizeof buf, fmt, ap);
	va_end(ap);
	s->why = arena_strdup(s->c->a, buf);
	return 0;
}

static const char *nname(const Node *n)
{
	return n->name && *n->name ? n->name : n->output[0];
}

static const char *UNARY[] = { "Relu", "Sigmoid", "Tanh", "LeakyRelu", "Elu", "Selu", "Celu", "HardSigmoid",
			       "HardSwish", "Softplus", "Softsign", "Mish", "Gelu", "Erf", "Exp", "Log", "Abs",
			       "Neg", "Sqrt", "Reciprocal", "Floor", "Ceil", "Round", "Sign", "Sin", "Cos",
			       "ThresholdedRelu", "Clip", "Cast", NULL };
static const char *BINARY[] = { "Add", "Sub", "Mul", "Div", "Pow", "Max", "Min", "PRelu", NULL };
/* Per-channel windows: right on [1, N*C, spatial...], not on the dynamic
 * layout's flattened positions. */
static const char *POOL[] = { "MaxPool", "AveragePool", "LpPool", "GlobalAveragePool", "GlobalMaxPool",
			      "GlobalLpPool", NULL };

static int is_op(const Node *n, const char **ops)
{
	for (; *ops; ops++)
		if (g_is(n, *ops))
			return 1;
	return 0;
}

/* Ops a constant passes through with its elements in order. */
static int keeps_elements(const Node *n)
{
	return g_is(n, "Identity") || g_is(n, "Unsqueeze") || g_is(n, "Squeeze") || g_is(n, "Reshape") ||
	       g_is(n, "Flatten");
}

static size_t node_index(const Expert *x, const Node *n)
{
	for (size_t i = 0; i < x->nnode; i++)
		if (x->node[i] == n)
			return i;
	return SIZE_MAX;
}

/* The tensor behind constant operand v of expert x (an initializer or a
 * Constant node's value), followed through ops that keep its elements (an
 * exporter's Unsqueeze of a per-channel scale). *ni, *si: the expert node
 * and input slot reading the tensor (SIZE_MAX when that node is not the
 * expert's). NULL when v is no such constant. */
static const char *tensor_of(const Graph *g, const Expert *x, const char *v, size_t *ni, size_t *si)
{
	for (int d = 0; d < 16 && *v; d++) {
		if (g_const(g, v))
			return v;
		Val *vv = g_val(g, v);
		Node *n = vv ? vv->def : NULL;
		if (!n || !keeps_elements(n) || strcmp(n->output[0], v))
			return NULL;
		for (size_t j = 1; j < n->n_input; j++)
			if (*n->input[j] && !g_const(g, n->input[j]))
				return NULL;
		*ni = node_index(x, n);
		*si = 0;
		v = n->input[0];
	}
	return NULL;
}

static const Expert *present(const S *s, int id)
{
	for (size_t i = 0; i < s->L->nex; i++)
		if (s->L->ex[i].id == id)
			return &s->L->ex[i];
	return NULL;
}

static const Recipe *recipe_at(const S *s, size_t ni, size_t si)
{
	for (size_t i = 0; s->mapped && i < s->m.n; i++)
		if (s->m.r[i].node == ni && s->m.r[i].input == si)
			return &s->m.r[i];
	return NULL;
}

/* The template's tensor for its node i, input j, and where it is read. */
static const Tensor *tpl_tensor(const S *s, size_t i, size_t j, size_t *ni, size_t *si)
{
	*ni = i;
	*si = j;
	const char *t = tensor_of(s->tg, s->tpl, s->tpl->node[i]->input[j], ni, si);
	return t ? g_const(s->tg, t) : NULL;
}

/* A name for the template's constant at node i, input j: a Constant
 * node's tensor has none of its own. */
static const char *const_name(const S *s, size_t i, size_t j)
{
	size_t ni, si;
	const Tensor *tt = tpl_tensor(s, i, j, &ni, &si);
	return tt->name && *tt->name ? tt->name : s->tpl->node[i]->input[j];
}

/* Checks (dry) that every present expert has a tensor like the template's
 * at node i, input j. */
static int check_const(S *s, size_t i, size_t j, const Tensor *tt)
{
	for (size_t q = 0; q < s->L->nex; q++) {
		const Expert *x = &s->L->ex[q];
		size_t a = i, b = j;
		const char *t = x->nnode == s->tpl->nnode ? tensor_of(x->g, x, x->node[i]->input[j], &a, &b) : NULL;
		const Tensor *u = t ? g_const(x->g, t) : NULL;
		if (!u || u->data_type != tt->data_type || g_tensor_numel(u) != g_tensor_numel(tt))
			return no(s, "expert %d has no constant like the template's '%s' (input %zu of node '%s')", x->id,
				  tt->name, j, nname(s->tpl->node[i]));
	}
	return 1;
}

/* Where expert id's version of the constant the template reads at node
 * i, input j comes from, widened to `per` elements (a single value
 * repeated per channel): *rb, a recipe that rebuilds a missing expert's
 * straight into its row, as densify would clone it; else *p, nb bytes (a
 * present expert's own, a missing one's rebuilt single value, or the
 * template's) to repeat over the row. */
static int const_src(S *s, size_t i, size_t j, int id, int64_t per, const Recipe **rb, const void **p, size_t *nb)
{
	size_t ni, si;
	const Tensor *tt = tpl_tensor(s, i, j, &ni, &si);
	const Expert *q = present(s, id);
	size_t es = wt_dtype_size(tt->data_type);
	int64_t n = g_tensor_numel(tt);
	const Recipe *r = !q && ni != SIZE_MAX ? recipe_at(s, ni, si) : NULL;
	*rb = NULL;
	*nb = 0;
	if (r && r->kind != R_SHARED && n == per) {
		*rb = r;
		return 0;
	}
	if (r && r->kind != R_SHARED) {
		void *d;
		if (moe_build(s->c, s->L, r, g_const(s->tg, r->tname), id, s->w, NULL, &d, nb, s->e))
			return -1;
		*p = d;
	} else if (q) {
		size_t a = i, b = j;
		*p = g_tensor_bytes(s->c, g_const(q->g, tensor_of(q->g, q, q->node[i]->input[j], &a, &b)), nb, s->e);
	} else {
		*p = g_tensor_bytes(s->c, tt, nb, s->e);
	}
	if (!*p)
		return -1;
	if (!es || *nb != (size_t)n * es || (n != per && n != 1))
		return errf(s->e, "layer %s: expert %d's version of tensor '%s' has %zu bytes, not %lld elements of %zu; the tensor's data cannot be read",
			    s->L->scope, id, const_name(s, i, j), *nb, (long long)n, es);
	return 0;
}

/* nb bytes at p repeated over row bytes at dst. */
static void repeat(unsigned char *dst, size_t row, const void *p, size_t nb)
{
	for (size_t o = 0; o < row; o += nb)
		memcpy(dst + o, p, nb);
}

/* Expert id's row of a stack, written now. */
static int const_into(S *s, size_t i, size_t j, int id, unsigned char *dst, int64_t per, size_t row)
{
	const Recipe *r;
	const void *p;
	size_t nb;
	if (const_src(s, i, j, id, per, &r, &p, &nb))
		return -1;
	if (r)
		return moe_build_into(s->c, s->L, r, g_const(s->tg, r->tname), id, s->w, NULL, dst, s->e);
	repeat(dst, row, p, nb);
	return 0;
}

/* A stack built when the model is written (graph.h's Later): each row a
 * missing expert's rebuild, or bytes found at repair time, which stay
 * where they are until then (the model's arena, its external data's
 * mapping). */
typedef struct {
	const Later *b; /* the row's rebuild, or NULL */
	const void *p;  /* else these nb bytes, repeated */
	size_t nb;
} Row;

typedef struct {
	Later l;
	Row *row;
	int E;
	size_t len; /* bytes a row */
} Stack;

static int stack_fill(const Later *l, void *dst, Arena *tmp, Err *e)
{
	const Stack *st = (const Stack *)l;
	unsigned char *d = dst;
	for (int id = 0; id < st->E; id++, d += st->len) {
		const Row *r = &st->row[id];
		if (!r->b)
			repeat(d, st->len, r->p, r->nb);
		else if (r->b->fill(r->b, d, tmp, e))
			return -1;
	}
	return 0;
}

static Later *stack_later(S *s, size_t i, size_t j, int64_t per, size_t len)
{
	Stack *st = arena_alloc(s->c->a, sizeof *st);
	*st = (Stack){ .l.fill = stack_fill, .row = arena_alloc(s->c->a, (size_t)s->E * sizeof *st->row), .E = s->E,
		       .len = len };
	for (int id = 0; id < s->E; id++) {
		Row *w = &st->row[id];
		const Recipe *r;
		if (const_src(s, i, j, id, per, &r, &w->p, &w->nb))
			return NULL;
		if (r && !(w->b = moe_build_later(s->c, s->L, r, g_const(s->tg, r->tname), id, s->w, NULL, s->e)))
			return NULL;
	}
	return &st->l;
}

/* Whether every expert has the template's value at node i, input j
 * (dry-checked: present experts compared, missing ones rebuilt only by a
 * shared recipe). */
static int shared_const(S *s, size_t i, size_t j)
{
	size_t ni, si, na, nb;
	const Tensor *tt = tpl_tensor(s, i, j, &ni, &si);
	const Recipe *r = ni != SIZE_MAX ? recipe_at(s, ni, si) : NULL;
	if ((int)s->L->nex < s->E && r && r->kind != R_SHARED)
		return 0;
	Err e;
	const void *a = g_tensor_bytes(s->c, tt, &na, &e);
	for (size_t q = 0; a && q < s->L->nex; q++) {
		const Expert *x = &s->L->ex[q];
		size_t p = i, t = j;
		const Tensor *u = g_const(x->g, tensor_of(x->g, x, x->node[i]->input[j], &p, &t));
		const void *b = u ? g_tensor_bytes(s->c, u, &nb, &e) : NULL;
		if (!b || na != nb || memcmp(a, b, na))
			return 0;
	}
	return a != NULL;
}

/* Initializer name for a stack of the template's tensor at node i, input j:
 * the checkpoint key it is rebuilt from with the expert id as "stacked"
 * ("model.0.experts.stacked.conv.0.weight:bnfold"), else the template
 * tensor's name. */
static const char *stack_name(S *s, size_t i, size_t j)
{
	size_t ni, si;
	tpl_tensor(s, i, j, &ni, &si);
	const Recipe *r = ni != SIZE_MAX ? recipe_at(s, ni, si) : NULL;
	const SpecLayer *sp = s->L->spec;
	const char *pat = sp->expert ? sp->expert : "experts.{i}", *p = strstr(pat, "{i}");
	if (r && r->kind != R_SHARED && p) {
		const char *key = moe_recipe_key(s->c->a, r);
		return arena_printf(s->c->a, "%s%s%s%.*sstacked%s.%s", sp->prefix ? sp->prefix : "", sp->scope,
				    *sp->scope ? "." : "", (int)(p - pat), pat, p + 3, key);
	}
	return arena_printf(s->c->a, "%s:stacked", const_name(s, i, j));
}

/* One initializer [E, dims...] holding every expert's version of the
 * constant at node i, input j, each widened to `per` elements (a per-expert
 * scalar repeated per channel). */
static const char *stack(S *s, size_t i, size_t j, const int64_t *dims, int nd, int64_t per)
{
	size_t ni, si;
	const Tensor *tt = tpl_tensor(s, i, j, &ni, &si);
	size_t es = wt_dtype_size(tt->data_type), row = (size_t)per * es, nb = (size_t)s->E * row;
	int64_t d[DIMS_MAX + 1];
	d[0] = s->E;
	for (int q = 0; q < nd; q++)
		d[q + 1] = dims[q];
	if (nb >= LATER_MIN) {
		Later *l = stack_later(s, i, j, per, row);
		return l ? g_add_init_later(s->c, s->c->g, stack_name(s, i, j), tt->data_type, d, (size_t)nd + 1, nb, l)->name
			 : NULL;
	}
	unsigned char *buf = arena_bulk(s->c->a, nb + 1);
	for (int id = 0; id < s->E; id++)
		if (const_into(s, i, j, id, buf + (size_t)id * row, per, row))
			return NULL;
	return g_add_init(s->c, s->c->g, stack_name(s, i, j), tt->data_type, d, (size_t)nd + 1, buf, nb)->name;
}

/* A copy of the template's constant at node i, input j in the main graph
 * (the template may sit in an If body). */
static const char *copy_const(S *s, size_t i, size_t j)
{
	size_t ni, si, nb;
	const Tensor *tt = tpl_tensor(s, i, j, &ni, &si);
	const void *p = g_tensor_bytes(s->c, tt, &nb, s->e);
	if (!p)
		return NULL;
	int64_t scalar = 1;
	return g_add_init(s->c, s->c->g, arena_printf(s->c->a, "%s%s", s->em.pfx, const_name(s, i, j)), tt->data_type,
			  tt->n_dims ? tt->dims : &scalar, tt->n_dims, arena_dup(s->c->a, p, nb), nb)
		->name;
}

static const char *pick(S *s, const char *stacked)
{
	return emit_gather(&s->em, stacked, s->idx, 0);
}

/* ---- the layer input in the layouts ---- */

/* x for a Conv reading it once per sample (static layout, group B). */
static const char *x_once(S *s)
{
	if (!s->xs) {
		int64_t sh[DIMS_MAX] = { 1, -1 };
		s->xs = s->B == 1 ? s->L->x : emit_reshape(&s->em, s->L->x, sh, (size_t)s->r);
	}
	return s->xs;
}

/* x as [B, 1, C, P] (dynamic layout): broadcasts over the k slots. */
static const char *x_bcast(S *s)
{
	if (!s->x4) {
		int64_t one = 1, sh[] = { 0, 0, 0, -1 };
		s->x4 = emit_reshape(&s->em, emit_axes(&s->em, "Unsqueeze", s->L->x, &one, 1), sh, 4);
	}
	return s->x4;
}

/* x repeated for each of the k slots, in the stacked layout. */
static const char *x_rep(S *s)
{
	if (s->xr)
		return s->xr;
	if (s->B < 0) {
		int64_t rep[] = { 1, s->k, 1, 1 };
		const char *in[] = { x_bcast(s), emit_i64(&s->em, "repeats", rep, 4, 0) };
		s->xr = emit(&s->em, "Expand", in, 2);
		return s->xr;
	}
	int64_t rep[DIMS_MAX], sh[DIMS_MAX] = { 1, -1 };
	for (int i = 0; i < s->r; i++)
		rep[i] = i == 1 ? s->k : 1;
	const char *in[] = { s->L->x, emit_i64(&s->em, "repeats", rep, (size_t)s->r, 0) };
	s->xr = emit(&s->em, "Tile", in, 2);
	if (s->B > 1)
		s->xr = emit_reshape(&s->em, s->xr, sh, (size_t)s->r);
	return s->xr;
}

static const char *stacked(S *s, const SVal *v)
{
	return v->kind == V_X ? x_rep(s) : v->v;
}

/* ---- the walk ---- */

static SVal CONST_V = { V_CONST, NULL, -1 };

static SVal *lookup(S *s, const char *v)
{
	if (!strcmp(v, s->tpl->in))
		return &s->x;
	SVal *p = map_get(&s->val, v);
	if (p)
		return p;
	size_t a = 0, b = 0;
	return tensor_of(s->tg, s->tpl, v, &a, &b) ? &CONST_V : NULL;
}

static SVal *put(S *s, const char *tv, Kind kind, const char *v, int64_t ch)
{
	SVal *p = arena_alloc(s->c->a, sizeof *p);
	*p = (SVal){ kind, v, ch };
	map_put(&s->val, tv, p);
	return p;
}

/* Re-emits template node n with new inputs: its attributes, a fresh name
 * under the layer's prefix. */
static const char *reemit(S *s, const Node *n, const char *const *in, size_t nin)
{
	Node *m = g_clone_node(s->c, s->c->g, n);
	g_set_name(s->c, m, arena_printf(s->c->a, "%s%s", s->em.pfx, n->op_type));
	/* The template's input count may differ (a Slice given its axes). */
	m->input = arena_alloc(s->c->a, nin * sizeof *m->input);
	m->n_input = nin;
	for (size_t i = 0; i < nin; i++)
		g_set_input(s->c, m, i, in[i]);
	m->n_output = 1;
	g_fresh_output(s->c, m, 0, arena_printf(s->c->a, "%s_output_0", m->name));
	return m->output[0];
}

/* Sizes the rewrite computes with; -1 when unknown or past any real
 * tensor (a hostile model's dims must not overflow a product). */
#define SLIM ((int64_t)1 << 40)

static int64_t mul(int64_t a, int64_t b)
{
	if (a < 0 || b < 0)
		return -1;
	return b && a > SLIM / b ? -1 : a * b;
}

static int64_t numel(const int64_t *d, int n)
{
	int64_t p = 1;
	for (int i = 0; i < n; i++)
		p = mul(p, d[i]);
	return p;
}

/* A value's dims as the shape inference has them: the rank, -1 when
 * unknown; d[i] = -1 where a size is unknown (or past any real tensor). */
static int dims_of(const Graph *g, const char *name, int64_t *d)
{
	const Ty *t = g_ty(g, name);
	if (!t || t->rank < 0 || t->rank > DIMS_MAX)
		return -1;
	for (int i = 0; i < t->rank; i++)
		d[i] = t->dim[i] < 0 || t->dim[i] > SLIM ? -1 : t->dim[i];
	return t->rank;
}

static int conv(S *s, size_t i)
{
	const Node *n = s->tpl->node[i];
	SVal *a = lookup(s, n->input[0]);
	size_t ni, si;
	const Tensor *wt = n->n_input > 1 ? tpl_tensor(s, i, 1, &ni, &si) : NULL;
	if (!a || a->kind == V_CONST || !wt)
		return no(s, "Conv '%s' does not read a value and a constant weight", nname(n));
	int64_t wd[DIMS_MAX], grp = g_attr_i(n, "group", 1);
	int wr = dims_of(s->tg, n->input[1], wd);
	if (wr != s->r || numel(wd, wr) != g_tensor_numel(wt) || grp < 1)
		return no(s, "Conv '%s' has a weight of rank %d (its data has rank %d) or a group of %lld", nname(n), wr,
			  s->r, (long long)grp);
	if (s->B >= 0 && (mul(s->N, wd[0]) < 0 || mul(s->N, grp) < 0))
		return no(s, "Conv '%s' would need %lld x %lld output channels", nname(n), (long long)s->N,
			  (long long)wd[0]);
	int hasb = n->n_input > 2 && *n->input[2];
	const Tensor *bt = hasb ? tpl_tensor(s, i, 2, &ni, &si) : NULL;
	if (hasb && (!bt || g_tensor_numel(bt) != wd[0]))
		return no(s, "Conv '%s' has a bias that is not a constant of %lld values", nname(n), (long long)wd[0]);
	if (!check_const(s, i, 1, wt) || (hasb && !check_const(s, i, 2, bt)))
		return 0;
	if (s->B < 0) {
		const Onnx__AttributeProto *st = g_attr(n, "strides"), *pd = g_attr(n, "pads");
		int one = grp == 1 && numel(wd + 2, s->r - 2) == 1;
		for (size_t q = 0; st && q < st->n_ints; q++)
			one &= st->ints[q] == 1;
		for (size_t q = 0; pd && q < pd->n_ints; q++)
			one &= pd->ints[q] == 0;
		if (!one)
			return no(s, "the batch is dynamic and Conv '%s' is not a 1x1, stride 1, ungrouped Conv; a grouped Conv would need the batch as its group count",
				  nname(n));
	}
	s->convs++;
	if (s->dry) {
		put(s, n->output[0], V_STACK, NULL, wd[0]);
		return 1;
	}
	const char *y;
	if (s->B < 0) {
		int64_t d[] = { wd[0], wd[1] };
		const char *wst = stack(s, i, 1, d, 2, numel(wd, wr));
		if (!wst)
			return -1;
		const char *in[] = { pick(s, wst), a->kind == V_X ? x_bcast(s) : a->v };
		y = emit(&s->em, "MatMul", in, 2);
		if (hasb) {
			const char *bst = stack(s, i, 2, wd, 1, wd[0]);
			if (!bst)
				return -1;
			int64_t three = 3;
			const char *b[] = { y, emit_axes(&s->em, "Unsqueeze", pick(s, bst), &three, 1) };
			y = emit(&s->em, "Add", b, 2);
		}
	} else {
		int once = a->kind == V_X && grp == 1;
		const char *wst = stack(s, i, 1, wd, wr, numel(wd, wr));
		if (!wst)
			return -1;
		int64_t sh[DIMS_MAX];
		sh[0] = s->N * wd[0];
		for (int q = 1; q < wr; q++)
			sh[q] = wd[q];
		const char *in[3] = { once ? x_once(s) : stacked(s, a), emit_reshape(&s->em, pick(s, wst), sh, (size_t)wr),
				      "" };
		if (hasb) {
			const char *bst = stack(s, i, 2, wd, 1, wd[0]);
			if (!bst)
				return -1;
			int64_t nb = s->N * wd[0];
			in[2] = emit_reshape(&s->em, pick(s, bst), &nb, 1);
		}
		y = reemit(s, n, in, hasb ? 3 : 2);
		g_put_attr_i(s->c, emit_last(&s->em), "group", once ? s->B : s->N * grp);
	}
	put(s, n->output[0], V_STACK, y, wd[0]);
	return 1;
}

static int unary(S *s, size_t i)
{
	const Node *n = s->tpl->node[i];
	SVal *a = lookup(s, n->input[0]);
	if (!a || a->kind == V_CONST)
		return no(s, "%s '%s' reads no value of the expert", n->op_type, nname(n));
	if (is_op(n, POOL) && (s->B < 0 || n->n_output != 1))
		return no(s, "the batch is dynamic and %s '%s' needs the spatial axes the 1x1 layout flattens",
			  n->op_type, nname(n));
	const char *in[8] = { NULL };
	if (n->n_input > 8)
		return no(s, "%s '%s' has %zu inputs", n->op_type, nname(n), n->n_input);
	for (size_t j = 1; j < n->n_input; j++) {
		if (!*n->input[j]) {
			in[j] = "";
			continue;
		}
		SVal *b = lookup(s, n->input[j]);
		size_t ni, si;
		if (!b || b->kind != V_CONST || !tpl_tensor(s, i, j, &ni, &si) || !shared_const(s, i, j))
			return no(s, "%s '%s' reads input %zu that is not one constant all experts share", n->op_type,
				  nname(n), j);
		if (!s->dry && !(in[j] = copy_const(s, i, j)))
			return -1;
	}
	if (s->dry) {
		put(s, n->output[0], V_STACK, NULL, a->ch);
		return 1;
	}
	in[0] = stacked(s, a);
	put(s, n->output[0], V_STACK, reemit(s, n, in, n->n_input), a->ch);
	return 1;
}

/* Channel concatenation and slicing act per slot: on [N, C, spatial...]
 * (a free reshape of the static layout), and on axis 2 of the dynamic one. */
static const char *per_slot(S *s, const char *v)
{
	int64_t sh[DIMS_MAX] = { s->N, -1 };
	return emit_reshape(&s->em, v, sh, (size_t)s->r);
}

static const char *flat(S *s, const char *v)
{
	int64_t sh[DIMS_MAX] = { 1, -1 };
	return emit_reshape(&s->em, v, sh, (size_t)s->r);
}

static int concat(S *s, size_t i)
{
	const Node *n = s->tpl->node[i];
	int64_t axis = g_attr_i(n, "axis", 0);
	if (axis < 0)
		axis += s->r;
	if (axis != 1)
		return no(s, "Concat '%s' joins axis %lld, not channels", nname(n), (long long)axis);
	int64_t ch = 0;
	for (size_t j = 0; j < n->n_input; j++) {
		SVal *v = lookup(s, n->input[j]);
		if (!v || v->kind == V_CONST)
			return no(s, "Concat '%s' joins a constant to the expert's values", nname(n));
		ch = ch < 0 || v->ch < 0 ? -1 : ch + v->ch;
	}
	if (s->dry) {
		put(s, n->output[0], V_STACK, NULL, ch);
		return 1;
	}
	const char **in = arena_alloc(s->c->a, n->n_input * sizeof *in);
	for (size_t j = 0; j < n->n_input; j++) {
		in[j] = stacked(s, lookup(s, n->input[j]));
		if (s->B >= 0)
			in[j] = per_slot(s, in[j]);
	}
	const char *y = emit(&s->em, "Concat", in, n->n_input);
	g_set_attr_i(s->c, emit_last(&s->em), "axis", s->B < 0 ? 2 : 1);
	put(s, n->output[0], V_STACK, s->B < 0 ? y : flat(s, y), ch);
	return 1;
}

/* Slice with constant bounds: of channels per slot, or of spatial axes,
 * which keep their place in the static layout. */
static int slice(S *s, size_t i)
{
	const Node *n = s->tpl->node[i];
	SVal *a = lookup(s, n->input[0]);
	int64_t ax[DIMS_MAX], st[DIMS_MAX], d[DIMS_MAX];
	long na = n->n_input > 3 && *n->input[3] ? g_const_ints(s->tg, n->input[3], ax, DIMS_MAX) : -2;
	long ns = n->n_input > 1 ? g_const_ints(s->tg, n->input[1], st, DIMS_MAX) : -1;
	if (!a || a->kind == V_CONST || n->n_input < 3 || ns < 1 || na == -1)
		return no(s, "Slice '%s' does not cut the expert's value by constant bounds", nname(n));
	for (size_t j = 1; j < n->n_input; j++)
		if (*n->input[j] && (!lookup(s, n->input[j]) || lookup(s, n->input[j])->kind != V_CONST))
			return no(s, "Slice '%s' has bounds computed at run time", nname(n));
	int chan = 0;
	for (long q = 0; q < ns; q++) {
		int64_t x = na == -2 ? q : ax[q] < 0 ? ax[q] + s->r : ax[q];
		ax[q] = x;
		if (x == 0 || x >= s->r)
			return no(s, "Slice '%s' cuts axis %lld, which is not a channel or spatial axis", nname(n),
				  (long long)x);
		chan |= x == 1;
		if (x > 1 && s->B < 0)
			return no(s, "the batch is dynamic and Slice '%s' cuts a spatial axis the 1x1 layout flattens",
				  nname(n));
	}
	int orank = dims_of(s->tg, n->output[0], d);
	int64_t ch = !chan ? a->ch : orank == s->r ? d[1] : -1;
	if (s->dry) {
		put(s, n->output[0], V_STACK, NULL, ch);
		return 1;
	}
	const char *in[5] = { stacked(s, a) };
	for (size_t j = 1; j < n->n_input && j < 5; j++)
		if (*n->input[j] && !(in[j] = copy_const(s, i, j)))
			return -1;
	size_t nin = n->n_input;
	if (s->B < 0) {
		for (long q = 0; q < ns; q++)
			ax[q] = 2; /* the channel axis: no other passed the dry walk */
		in[3] = emit_i64(&s->em, "axes", ax, (size_t)ns, 0);
		nin = nin < 4 ? 4 : nin;
	} else if (chan) {
		in[0] = per_slot(s, in[0]);
	}
	const char *y = reemit(s, n, in, nin);
	put(s, n->output[0], V_STACK, s->B >= 0 && chan ? flat(s, y) : y, ch);
	return 1;
}

/* Inference BatchNormalization left unfolded: its four per-channel
 * constants gathered like a Conv bias. */
static int batchnorm(S *s, size_t i)
{
	const Node *n = s->tpl->node[i];
	SVal *a = lookup(s, n->input[0]);
	if (!a || a->kind == V_CONST || n->n_input != 5)
		return no(s, "BatchNormalization '%s' does not read a value and four constants", nname(n));
	if (s->B < 0)
		return no(s, "the batch is dynamic and BatchNormalization '%s' normalises axis 1, which holds the slots in the 1x1 layout",
			  nname(n));
	int64_t C = -1;
	size_t ni, si;
	for (size_t j = 1; j < 5; j++) {
		const Tensor *t = tpl_tensor(s, i, j, &ni, &si);
		if (!t || (C >= 0 && g_tensor_numel(t) != C) || !check_const(s, i, j, t))
			return no(s, "BatchNormalization '%s' has an input %zu that is not a constant of one value per channel",
				  nname(n), j);
		C = g_tensor_numel(t);
	}
	if (s->dry) {
		put(s, n->output[0], V_STACK, NULL, C);
		return 1;
	}
	const char *in[5] = { stacked(s, a) };
	for (size_t j = 1; j < 5; j++) {
		const char *st = stack(s, i, j, &C, 1, C);
		int64_t flat = -1;
		if (!st)
			return -1;
		in[j] = emit_reshape(&s->em, pick(s, st), &flat, 1);
	}
	put(s, n->output[0], V_STACK, reemit(s, n, in, 5), C);
	return 1;
}

/* A constant operand of an elementwise op, in the layout: one constant all
 * experts share when it is a single value, else the chosen experts' rows
 * of a per-channel stack. */
static int operand(S *s, size_t i, size_t j, int64_t ch, const char **out, int64_t *outch)
{
	const Node *n = s->tpl->node[i];
	size_t ni, si;
	const Tensor *tt = tpl_tensor(s, i, j, &ni, &si);
	int64_t d[DIMS_MAX];
	int cr = dims_of(s->tg, n->input[j], d);
	if (!tt || cr < 0 || cr > s->r || numel(d, cr) != g_tensor_numel(tt))
		return no(s, "%s '%s' reads a constant of unknown shape", n->op_type, nname(n));
	if (!check_const(s, i, j, tt))
		return 0;
	int64_t per = 1;
	for (int q = 0; q < cr; q++) {
		int pos = q + s->r - cr;
		if (pos == 1)
			per = d[q];
		else if (d[q] != 1)
			return no(s, "%s '%s' reads a constant of shape that is not per channel (dimension %d is %lld)",
				  n->op_type, nname(n), pos, (long long)d[q]);
	}
	*outch = per > 1 ? per : -1;
	if (per == 1 && shared_const(s, i, j)) {
		if (!s->dry && !(*out = copy_const(s, i, j)))
			return -1;
		return 1;
	}
	if (per > 1 && ch > 0 && per != ch)
		return no(s, "%s '%s' reads %lld values per expert for %lld channels", n->op_type, nname(n),
			  (long long)per, (long long)ch);
	/* Per-expert single values: one per channel in the static layout,
	 * where channels of all slots share one axis. */
	int64_t wide = per;
	if (per == 1 && s->B >= 0) {
		if (ch < 1 || ch > (1 << 24))
			return no(s, "%s '%s' reads one value per expert for a tensor of unknown channel count",
				  n->op_type, nname(n));
		wide = ch;
	}
	if (s->dry)
		return 1;
	const char *st = stack(s, i, j, &wide, 1, wide);
	if (!st)
		return -1;
	if (s->B < 0) {
		int64_t three = 3;
		*out = emit_axes(&s->em, "Unsqueeze", pick(s, st), &three, 1);
	} else {
		int64_t sh[DIMS_MAX];
		sh[0] = -1;
		for (int q = 1; q < s->r - 1; q++)
			sh[q] = 1;
		*out = emit_reshape(&s->em, pick(s, st), sh, (size_t)s->r - 1);
	}
	return 1;
}

static int binary(S *s, size_t i)
{
	const Node *n = s->tpl->node[i];
	if (n->n_input != 2)
		return no(s, "%s '%s' has %zu inputs", n->op_type, nname(n), n->n_input);
	SVal *v[2] = { lookup(s, n->input[0]), lookup(s, n->input[1]) };
	if (!v[0] || !v[1])
		return no(s, "%s '%s' reads a value that is neither the expert's nor a constant", n->op_type, nname(n));
	int64_t ch = -1;
	for (int j = 0; j < 2; j++)
		if (v[j]->kind != V_CONST && v[j]->ch > 0)
			ch = v[j]->ch;
	const char *in[2] = { NULL, NULL };
	int nx = (v[0]->kind == V_X) + (v[1]->kind == V_X), nc = (v[0]->kind == V_CONST) + (v[1]->kind == V_CONST);
	for (int j = 0; j < 2; j++) {
		if (v[j]->kind == V_CONST) {
			int64_t cch = -1;
			int r = operand(s, i, (size_t)j, ch, &in[j], &cch);
			if (r <= 0)
				return r;
			if (cch > 0)
				ch = cch;
		} else if (!s->dry) {
			/* x broadcasts over the slots in the dynamic layout, when
			 * the other operand is per slot. */
			in[j] = v[j]->kind == V_X && s->B < 0 && nx == 1 && nc == 0 ? x_bcast(s) : stacked(s, v[j]);
		}
	}
	put(s, n->output[0], V_STACK, s->dry ? NULL : reemit(s, n, in, 2), ch);
	return 1;
}

/* The exporter's GroupNorm: Reshape(a, [0, G, -1]) -> InstanceNormalization
 * (scale, bias of G) -> Reshape(., Shape(a)), then the affine Mul/Add (plain
 * per-channel ops). Found from the InstanceNormalization; its four nodes
 * are marked, and the final Reshape emits the unit. */
static void find_gn(S *s)
{
	const Expert *t = s->tpl;
	for (size_t i = 0; i < t->nnode; i++) {
		Node *in = t->node[i];
		if (!g_is(in, "InstanceNormalization") || in->n_input != 3)
			continue;
		Val *rv = g_val(s->tg, in->input[0]), *ov = g_val(s->tg, in->output[0]);
		Node *r1 = rv ? rv->def : NULL;
		if (!r1 || !g_is(r1, "Reshape") || node_index(t, r1) == SIZE_MAX || rv->nuse != 1 || !ov || ov->nuse != 1)
			continue;
		Node *r2 = ov->use[0].n;
		if (!g_is(r2, "Reshape") || node_index(t, r2) == SIZE_MAX || strcmp(r2->input[0], in->output[0]))
			continue;
		Val *sv = g_val(s->tg, r2->input[1]);
		Node *sh = sv ? sv->def : NULL;
		if (!sh || !g_is(sh, "Shape") || sv->nuse != 1 || node_index(t, sh) == SIZE_MAX ||
		    strcmp(sh->input[0], r1->input[0]) || g_attr(sh, "start") || g_attr(sh, "end"))
			continue;
		pmap_put(&s->gn, r1, in);
		pmap_put(&s->gn, in, in);
		pmap_put(&s->gn, sh, in);
		pmap_put(&s->gn, r2, in);
	}
}

static int groupnorm(S *s, size_t iend, Node *in)
{
	const Node *r1 = g_val(s->tg, in->input[0])->def, *r2 = s->tpl->node[iend];
	size_t i = node_index(s->tpl, in), ni, si;
	SVal *a = lookup(s, r1->input[0]);
	int64_t sh[4];
	long k = g_const_ints(s->tg, r1->input[1], sh, 4);
	if (!a || a->kind == V_CONST || k != 3 || sh[0] != 0 || sh[1] < 1 || sh[2] != -1 ||
	    mul(s->B < 0 ? s->k : s->N, sh[1]) < 0)
		return no(s, "GroupNorm '%s' reshapes to a shape other than [0, G, -1]", nname(in));
	int64_t G = sh[1];
	for (size_t j = 1; j < 3; j++) {
		const Tensor *t = tpl_tensor(s, i, j, &ni, &si);
		if (!t || g_tensor_numel(t) != G || !check_const(s, i, j, t))
			return no(s, "GroupNorm '%s' has a scale or bias that is not a constant of %lld values",
				  nname(in), (long long)G);
		if (s->B < 0 && !shared_const(s, i, j))
			return no(s, "GroupNorm '%s' normalises with per-expert scales, and the batch is dynamic",
				  nname(in));
	}
	if (s->dry) {
		put(s, r2->output[0], V_STACK, NULL, a->ch);
		return 1;
	}
	const char *x = stacked(s, a), *ss[2];
	for (size_t j = 1; j < 3; j++) {
		if (s->B >= 0) {
			const char *st = stack(s, i, j, &G, 1, G);
			int64_t flat = -1;
			if (!st)
				return -1;
			ss[j - 1] = emit_reshape(&s->em, pick(s, st), &flat, 1);
		} else {
			/* Shared by every expert (checked dry): the k slots of a
			 * sample repeat it. */
			const Tensor *t = tpl_tensor(s, i, j, &ni, &si);
			size_t nb;
			const unsigned char *p = g_tensor_bytes(s->c, t, &nb, s->e);
			if (!p)
				return -1;
			unsigned char *buf = arena_bulk(s->c->a, nb * (size_t)s->k + 1);
			for (int q = 0; q < s->k; q++)
				memcpy(buf + (size_t)q * nb, p, nb);
			int64_t d = G * s->k;
			ss[j - 1] = g_add_init(s->c, s->c->g, arena_printf(s->c->a, "%s%s:tiled", s->em.pfx, const_name(s, i, j)),
					       t->data_type, &d, 1, buf, nb * (size_t)s->k)->name;
		}
	}
	int64_t to[3] = { s->B < 0 ? 0 : 1, (s->B < 0 ? s->k : s->N) * G, -1 };
	const char *in3[] = { emit_reshape(&s->em, x, to, 3), ss[0], ss[1] };
	const char *y = reemit(s, in, in3, 3);
	const char *shp = emit(&s->em, "Shape", &x, 1);
	const char *r[] = { y, shp };
	put(s, r2->output[0], V_STACK, emit(&s->em, "Reshape", r, 2), a->ch);
	return 1;
}

/* 1: every template node has a stacked form (emitted unless dry), 0: not
 * (s->why says which), -1: error. */
static int walk(S *s)
{
	const Expert *t = s->tpl;
	map_init(&s->val, s->c->a, t->nnode * 2 + 4);
	s->xs = s->xr = s->x4 = NULL;
	s->convs = 0;
	for (size_t i = 0; i < t->nnode; i++) {
		Node *n = t->node[i];
		Node *gn = pmap_get(&s->gn, n);
		int r;
		if (gn) {
			if (g_is(n, "Reshape") && strcmp(n->input[0], gn->output[0]) == 0) {
				if ((r = groupnorm(s, i, gn)) <= 0)
					return r;
			}
			continue;
		}
		int allconst = n->n_input > 0 || g_is(n, "Constant");
		for (size_t j = 0; j < n->n_input && allconst; j++) {
			SVal *v = *n->input[j] ? lookup(s, n->input[j]) : &CONST_V;
			allconst = v && v->kind == V_CONST;
		}
		if (allconst) {
			for (size_t j = 0; j < n->n_output; j++)
				put(s, n->output[j], V_CONST, NULL, -1);
			continue;
		}
		if (g_is(n, "Identity") || (g_is(n, "Dropout") && n->n_output == 1)) {
			SVal *v = lookup(s, n->input[0]);
			if (!v)
				return no(s, "Identity '%s' reads a value outside the expert", nname(n));
			map_put(&s->val, n->output[0], v);
			continue;
		}
		if (n->n_output != 1)
			return no(s, "expert node '%s' (%s) has %zu outputs", nname(n), n->op_type, n->n_output);
		if (g_is(n, "Conv"))
			r = conv(s, i);
		else if (is_op(n, UNARY) || is_op(n, POOL))
			r = unary(s, i);
		else if (g_is(n, "Concat"))
			r = concat(s, i);
		else if (g_is(n, "Slice") && s->c->opset >= 10)
			r = slice(s, i);
		else if (g_is(n, "BatchNormalization"))
			r = batchnorm(s, i);
		else if (is_op(n, BINARY))
			r = binary(s, i);
		else
			return no(s, "expert node '%s' (%s) has no stacked form", nname(n), n->op_type);
		if (r <= 0)
			return r;
	}
	SVal *o = lookup(s, t->out);
	if (!o || o->kind != V_STACK)
		return no(s, "the expert's output '%s' is not computed from its input", t->out);
	return 1;
}

/* ---- the weighted sum of the k slots ---- */

static const char *sum_slots(S *s)
{
	Emit *m = &s->em;
	Ctx *c = s->c;
	Layer *L = s->L;
	const char *y = lookup(s, s->tpl->out)->v, *weights = L->weights;
	if (L->wmask)
		weights = emit_masked(m, weights, L->wmask);
	/* Static: [N, C, spatial...], slot j's rows are j, k+j, ...; dynamic:
	 * [B, k, C, P], slot j on axis 1. */
	if (s->B >= 0) {
		int64_t sh[DIMS_MAX] = { s->N, -1 };
		y = emit_reshape(m, y, sh, (size_t)s->r);
	}
	const char *w_shape = emit_ones_shape(m, s->B < 0 ? 3 : s->r), *sum = NULL;
	for (int j = 0; j < s->k; j++) {
		int64_t jj = j;
		const char *slot = emit_i64(m, arena_printf(c->a, "slot_%d", j), &jj, 1, 1), *yj;
		if (s->B >= 0) {
			int64_t *rows = arena_alloc(c->a, (size_t)s->B * sizeof *rows);
			for (int64_t b = 0; b < s->B; b++)
				rows[b] = b * s->k + j;
			yj = emit_gather(m, y, emit_i64(m, arena_printf(c->a, "rows_%d", j), rows, (size_t)s->B, 0), 0);
		} else {
			yj = emit_gather(m, y, slot, 1);
		}
		const char *r2[] = { emit_gather(m, weights, slot, 1), w_shape };
		const char *wr = emit(m, "Reshape", r2, 2);
		if (L->wcast) {
			wr = emit(m, "Cast", &wr, 1);
			g_set_attr_i(c, emit_last(m), "to", L->wcast);
		}
		const char *m1[] = { yj, wr };
		const char *p = emit(m, "Mul", m1, 2);
		if (sum) {
			const char *a1[] = { sum, p };
			sum = emit(m, "Add", a1, 2);
		} else {
			sum = p;
		}
	}
	if (s->B < 0) {
		/* [B, C, P] back to [B, C, spatial...] of the input (1x1 Convs). */
		int64_t z = 0, two = 2, big = INT64_MAX;
		const char *ssum = emit(m, "Shape", &sum, 1), *sx = emit(m, "Shape", &L->x, 1);
		const char *a[] = { ssum, emit_i64(m, "start_0", &z, 1, 0), emit_i64(m, "end_2", &two, 1, 0) };
		const char *b[] = { sx, emit_i64(m, "start_2", &two, 1, 0), emit_i64(m, "end_max", &big, 1, 0) };
		const char *cat[] = { emit(m, "Slice", a, 3), emit(m, "Slice", b, 3) };
		const char *to = emit(m, "Concat", cat, 2);
		g_set_attr_i(c, emit_last(m), "axis", 0);
		const char *r[] = { sum, to };
		sum = emit(m, "Reshape", r, 2);
	}
	return sum;
}

double moe_expert_flops(const Layer *L)
{
	const Expert *t = &L->ex[0];
	double f = 0;
	for (size_t i = 0; i < t->nnode; i++) {
		const Node *n = t->node[i];
		int conv = g_is(n, "Conv");
		/* A Linear (MatMul or Gemm of a 2-D weight) per row, times the
		 * positions between its output's row and feature axes. */
		if ((!conv && !g_is(n, "MatMul") && !g_is(n, "Gemm")) || n->n_input < 2 ||
		    (!conv && !g_const(t->g, n->input[1])))
			continue;
		int64_t w[DIMS_MAX], o[DIMS_MAX];
		int wr = dims_of(t->g, n->input[1], w), orank = dims_of(t->g, n->output[0], o);
		int64_t a = wr > 0 ? numel(w, wr) : -1;
		int64_t b = conv ? (orank > 2 ? numel(o + 2, orank - 2) : -1) : orank >= 2 && wr == 2 ? numel(o + 1, orank - 2) : -1;
		if (a < 0 || b < 0)
			return -1;
		f += 2.0 * (double)a * (double)b;
	}
	return f;
}

size_t moe_expert_bytes(const Ctx *c, const Layer *L)
{
	const Expert *t = &L->ex[0];
	size_t b = 0;
	for (size_t i = 0; i < t->nnode; i++)
		for (size_t j = 0; j < t->node[i]->n_input; j++) {
			const Val *v = g_input(c, t->node[i], j);
			int64_t n = v && v->init ? g_tensor_numel(v->init) : -1;
			size_t es = n > 0 ? wt_dtype_size(v->init->data_type) : 0;
			if (n > 0) /* and a page boundary it may cross */
				b += (size_t)n * (es ? es : 8) + 4096;
		}
	return b;
}

/* Whether the router's indices hold k ids per sample (not per position). */
static int per_sample(S *s)
{
	int64_t d[DIMS_MAX];
	int r = dims_of(s->c->g, s->L->indices, d);
	if (r < 0)
		return s->L->form == FORM_ROWS; /* the row gather dispatches whole samples */
	if (r < 2 || (d[1] >= 0 && d[1] != s->k) || (s->B > 0 && d[0] >= 0 && d[0] != s->B))
		return 0;
	for (int i = 2; i < r; i++)
		if (d[i] != 1)
			return 0;
	return 1;
}

int moe_sparse(Ctx *c, Layer *L, WSrc *w, LayerReport *lr, Err *e)
{
	S s = { .c = c, .L = L, .tpl = &L->ex[0], .tg = L->ex[0].g, .w = w, .e = e };
	s.E = L->spec->experts;
	s.k = L->spec->top_k;
	s.r = L->rank;
	s.x = (SVal){ V_X, L->x, -1 };
	if (L->gen != c->gen)
		return errf(e, "layer %s: internal error: detected on an index since rebuilt; please report this model",
			    L->scope);
	lr->dispatch = "dense";
	if (L->permap) { /* each position picks its experts: no row runs only k of them */
		lr->fallback = "the routing is per position, not per input";
		return 0;
	}
	if (c->opset < 11) {
		lr->fallback = arena_printf(c->a, "opset %d is older than 11", c->opset);
		return 0;
	}
	if (L->rowax) { /* the stacked weights fold the batch into axis 0 */
		lr->fallback = "the rows are gathered along axis 1 (x[None, rows])";
		return 0;
	}
	/* The new nodes go to the main graph: what they read must live there. */
	const char *reads[] = { L->x, L->indices, L->weights, L->wmask ? L->wmask : L->x };
	for (size_t i = 0; i < 4; i++) {
		Val *v = g_val(c->g, reads[i]);
		if (!v || v->g != c->g) {
			lr->fallback = arena_printf(c->a, "'%s' is computed inside an If body", reads[i]);
			return 0;
		}
	}
	int64_t xd[DIMS_MAX];
	int xr = dims_of(c->g, L->x, xd);
	if (s.r < 3 || s.r > DIMS_MAX)
		no(&s, "expert outputs of rank %d are not feature maps", s.r);
	else if (xr != s.r)
		no(&s, "the rank of the layer input '%s' is unknown", L->x);
	s.B = s.why || xd[0] < 1 ? -1 : xd[0];
	if (s.B > (1 << 20))
		no(&s, "a static batch of %lld is too large to fold into channels", (long long)s.B);
	s.N = s.B * s.k;
	s.x.ch = s.why ? -1 : xd[1];
	if (!s.why && !per_sample(&s))
		no(&s, "the router's indices '%s' are not k expert ids per sample", L->indices);
	if (s.why) {
		lr->fallback = s.why;
		return 0;
	}
	pmap_init(&s.gn, c->a, 16);
	find_gn(&s);
	s.dry = 1;
	int r = walk(&s);
	if (r <= 0) {
		lr->fallback = s.why;
		return r;
	}
	if ((int)L->nex < s.E) {
		if (!w)
			return errf(e, "layer %s: %d of %d experts are missing and no weights are given; set `weights:` in experts.yaml",
				    L->scope, s.E - (int)L->nex, s.E);
		if (moe_map(c, L, &L->ex[0], w, &s.m, e))
			return -1;
		s.mapped = 1;
		lr->map_maxdiff = s.m.maxdiff;
	}
	/* The walk is the same with the recipes known: a per-channel constant
	 * rebuilt per expert is no longer "shared". */
	if ((r = walk(&s)) <= 0) {
		lr->fallback = s.why;
		return r;
	}
	size_t before = c->g->gp->n_node;
	emit_init(&s.em, c, arena_printf(c->a, "/%s%ssparse/", L->spec->scope, *L->spec->scope ? "/" : ""));
	int64_t ish[2] = { s.B < 0 ? -1 : s.B, s.k };
	s.idx = emit_reshape(&s.em, L->indices, ish, 2);
	s.dry = 0;
	if ((r = walk(&s)) <= 0)
		return r < 0 ? -1 : errf(e, "layer %s: internal error: the sparse rewrite changed its mind (%s); please report this model",
					  L->scope, s.why);
	sum_slots(&s);
	Val *old = g_val(c->g, L->combined);
	if (!old || !old->def)
		return errf(e, "layer %s: the routed sum '%s' has no producer to replace", L->scope, L->combined);
	Node *od = old->def; /* renaming makes the new node the producer */
	for (size_t i = 0; i < od->n_output; i++)
		if (strcmp(od->output[i], L->combined) == 0)
			g_fresh_output(c, od, i, arena_printf(c->a, "%s_routed", L->combined));
	g_rename_output(c, emit_last(&s.em), 0, L->combined);
	for (int id = 0, k = 0; id < s.E; id++) {
		if (k < lr->npresent && lr->present[k] == id)
			k++;
		else
			lr->inserted[lr->ninserted++] = id;
	}
	lr->convs_after = s.convs;
	lr->nodes_after = (int)(c->g->gp->n_node - before);
	lr->ifs = L->nif;
	lr->repaired = 1;
	lr->dispatch = "sparse";
	return 1;
}
