/* Detection: from a layer's scope to its router, experts and routed sum.
 *
 * Exporters keep module paths in node names, so experts are found by name
 * (see path_match); the dispatch is then found by data flow, which is what
 * differs between traced (NonZero/Gather/ScatterElements), unique().tolist()
 * and scripted (If-gated) exports. */
#include <stdlib.h>
#include <string.h>

#include "moe.h"

const char *expert_path(Ctx *c, const SpecLayer *s, int id)
{
	const char *pat = s->expert ? s->expert : "experts.{i}";
	const char *p = strstr(pat, "{i}");
	if (!p)
		return arena_printf(c->a, "%s.%s", s->scope, pat);
	return arena_printf(c->a, "%s.%.*s%d%s", s->scope, (int)(p - pat), pat, id, p + 3);
}

static int is_elementwise(const Node *n)
{
	static const char *ops[] = { "Add", "Sub", "Mul", "Div", "Cast", "Softmax", "Sigmoid", "Clip",
				     "Pow", "Sqrt", "Exp", "Neg", "Reciprocal", "Identity", "Relu", "Abs",
				     "Max", "Min", "LogSoftmax", NULL };
	for (const char **o = ops; *o; o++)
		if (g_is(n, *o))
			return 1;
	return 0;
}

static int rank_rec(const Graph *g, const char *name, int depth, int *cut);

/* Ranks are memoised by value name across reindexing (passes keep a
 * value's rank when they rewrite it): without the memo each layer's query
 * walks back through every earlier layer's experts, exponentially in the
 * number of layers. A result cut short by the depth bound is not kept,
 * nor an unknown rank, which folding an If can make known. */
int g_rank(const Graph *g, const char *name, int depth)
{
	int cut = 0;
	return rank_rec(g, name, depth, &cut);
}

static int rank_calc(const Graph *g, const char *name, int depth, int *cut);

static int rank_rec(const Graph *g, const char *name, int depth, int *cut)
{
	if (depth > 256) {
		*cut = 1;
		return -1;
	}
	void *m = g->rank ? map_get(g->rank, name) : NULL;
	if (m)
		return (int)(intptr_t)m - 2;
	int sub = 0, r = rank_calc(g, name, depth, &sub);
	if (sub)
		*cut = 1;
	else if (g->rank && r >= 0) /* unknown may become known when a pass folds an If */
		map_put(g->rank, name, (void *)(intptr_t)(r + 2));
	return r;
}

static int rank_calc(const Graph *g, const char *name, int depth, int *cut)
{
	Val *v = g_val(g, name);
	if (!v)
		return -1;
	if (v->init)
		return (int)v->init->n_dims;
	if (v->shape)
		return (int)v->shape->n_dim;
	Node *n = v->def;
	/* Every rule below but Constant's reads input 0, some input 1: a node
	 * short of inputs (malformed) has no rank to tell. */
	if (!n || (n->n_input == 0 && !g_is(n, "Constant")))
		return -1;
	const Graph *ng = v->g;
	if (g_is(n, "Reshape") || g_is(n, "ConstantOfShape") || g_is(n, "Expand")) {
		/* Target shape: a constant, or Shape(y) of a tensor of known rank. */
		if (!g_is(n, "ConstantOfShape") && n->n_input < 2)
			return -1;
		const char *sh = n->input[g_is(n, "ConstantOfShape") ? 0 : 1];
		const Tensor *t = g_const(ng, sh);
		if (t && t->n_dims == 1)
			return (int)t->dims[0];
		Val *sv = g_val(ng, sh);
		if (sv && sv->def && g_is(sv->def, "Shape") && !g_attr(sv->def, "start") && !g_attr(sv->def, "end"))
			return rank_rec(ng, sv->def->input[0], depth + 1, cut);
		return -1;
	}
	if (g_is(n, "Constant")) {
		const Tensor *t = g_const(ng, n->output[0]);
		return t ? (int)t->n_dims : -1;
	}
	if (g_is(n, "Unsqueeze") || g_is(n, "Squeeze")) {
		int64_t ax[16];
		long k = -1;
		const Onnx__AttributeProto *a = g_attr(n, "axes");
		if (a)
			k = (long)a->n_ints;
		else if (n->n_input > 1)
			k = g_const_ints(ng, n->input[1], ax, 16);
		int r = rank_rec(ng, n->input[0], depth + 1, cut);
		if (r < 0 || k < 0)
			return -1;
		return g_is(n, "Unsqueeze") ? r + (int)k : r - (int)k;
	}
	if (g_is(n, "Shape"))
		return 1;
	if (g_is(n, "NonZero"))
		return 2;
	if (g_is(n, "Flatten"))
		return 2;
	if (g_is(n, "Gather")) {
		if (n->n_input < 2)
			return -1;
		int r = rank_rec(ng, n->input[0], depth + 1, cut), q = rank_rec(ng, n->input[1], depth + 1, cut);
		return r < 0 || q < 0 ? -1 : r + q - 1;
	}
	if (g_is(n, "Transpose") || g_is(n, "Concat") || g_is(n, "Split") || g_is(n, "TopK") ||
	    g_is(n, "Conv") || g_is(n, "ConvTranspose") || g_is(n, "BatchNormalization") ||
	    g_is(n, "InstanceNormalization") || g_is(n, "GroupNormalization") ||
	    g_is(n, "LayerNormalization") || g_is(n, "MaxPool") || g_is(n, "AveragePool") ||
	    g_is(n, "GlobalAveragePool") || g_is(n, "Slice") || g_is(n, "Resize") ||
	    g_is(n, "Pad") || g_is(n, "GatherElements") || g_is(n, "ScatterElements") ||
	    g_is(n, "ScatterND") || g_is(n, "Where") || g_is(n, "Softmax"))
		return n->n_input < (g_is(n, "Where") ? 2u : 1u) ? -1
								 : rank_rec(ng, n->input[g_is(n, "Where") ? 1 : 0], depth + 1, cut);
	if (is_elementwise(n) || g_is(n, "Equal")) {
		int best = -1;
		for (size_t i = 0; i < n->n_input; i++) {
			int r = rank_rec(ng, n->input[i], depth + 1, cut);
			if (r < 0)
				return -1;
			if (r > best)
				best = r;
		}
		return best;
	}
	return -1;
}

/* ---- expert collection ---- */

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

static void collect_named(Graph *g, const char *mod, NodeVec *out)
{
	Onnx__GraphProto *gp = g->gp;
	for (size_t i = 0; i < gp->n_node; i++)
		if (gp->node[i]->name && path_match(gp->node[i]->name, mod))
			nv_push(out, gp->node[i]);
	for (size_t i = 0; i < g->nsub; i++)
		collect_named(g->sub[i], mod, out);
}

static int cmp_pos(const void *a, const void *b, void *ctx)
{
	const Ctx *c = ctx;
	size_t x = g_pos(c, *(Node *const *)a), y = g_pos(c, *(Node *const *)b);
	return x < y ? -1 : x > y;
}

static int in_set(const PMap *set, const Node *n)
{
	return pmap_get(set, n) != NULL;
}

/* Finds expert `id`'s nodes, its one input and its one output. Returns 0
 * when the expert is absent, 1 when found, -1 on error. */
static int find_expert(Ctx *c, Layer *L, int id, const NodeVec *scoped, Expert *x, Err *e)
{
	const char *mod = expert_path(c, L->spec, id);
	NodeVec nv = { .a = c->a };
	for (size_t i = 0; i < scoped->n; i++)
		if (path_match(scoped->v[i]->name, mod))
			nv_push(&nv, scoped->v[i]);
	if (!nv.n)
		return 0;
	Graph *g = g_graph_of(c, nv.v[0]);
	for (size_t i = 1; i < nv.n; i++)
		if (g_graph_of(c, nv.v[i]) != g)
			return errf(e, "layer %s: nodes of expert %d ('%s') lie in different subgraphs; set input/output in experts.yaml",
				    L->scope, id, mod);
	PMap set;
	pmap_init(&set, c->a, nv.n * 2);
	for (size_t i = 0; i < nv.n; i++)
		pmap_put(&set, nv.v[i], (void *)1);
	/* Unnamed Constant nodes feeding only this expert belong to it. */
	for (size_t i = 0; i < nv.n; i++) {
		Node *n = nv.v[i];
		for (size_t j = 0; j < n->n_input; j++) {
			Val *v = g_val(g, n->input[j]);
			if (!v || !v->def || in_set(&set, v->def) || !g_is(v->def, "Constant"))
				continue;
			int only = 1;
			for (size_t u = 0; u < v->nuse && only; u++)
				only = in_set(&set, v->use[u].n);
			if (only) {
				pmap_put(&set, v->def, (void *)1);
				nv_push(&nv, v->def);
			}
		}
	}
	qsort_r(nv.v, nv.n, sizeof *nv.v, cmp_pos, c);
	const char *in = NULL, *out = NULL;
	for (size_t i = 0; i < nv.n; i++) {
		Node *n = nv.v[i];
		for (size_t j = 0; j < n->n_input; j++) {
			const char *name = n->input[j];
			Val *v = g_val(g, name);
			if (!*name || !v || (v->def && in_set(&set, v->def)) || g_const(g, name))
				continue;
			if (in && strcmp(in, name) != 0)
				return errf(e, "layer %s: expert %d reads two tensors from outside ('%s' and '%s'); set `input:` in experts.yaml",
					    L->scope, id, in, name);
			in = name;
		}
		for (size_t j = 0; j < n->n_output; j++) {
			Val *v = g_val(g, n->output[j]);
			int outside = v && v->isout;
			for (size_t u = 0; v && u < v->nuse && !outside; u++)
				outside = !in_set(&set, v->use[u].n);
			if (!outside)
				continue;
			if (out && strcmp(out, n->output[j]) != 0)
				return errf(e, "layer %s: expert %d has two outputs ('%s' and '%s'); set `output:` in experts.yaml",
					    L->scope, id, out, n->output[j]);
			out = n->output[j];
		}
	}
	if (!in || !out)
		return errf(e, "layer %s: expert %d ('%s', %zu nodes) has no %s; check the scope and `expert:` pattern",
			    L->scope, id, mod, nv.n, in ? "output" : "input");
	x->id = id;
	x->node = nv.v;
	x->nnode = nv.n;
	x->g = g;
	x->in = in;
	x->out = out;
	for (Graph *h = g; h && h->parent; h = h->parent)
		if (!h->parent->parent)
			x->gate = h->owner;
	return 1;
}

/* ---- router ---- */

int moe_compared_ids(Ctx *c, const Graph *g, const char *indices, int *ids, int maxid)
{
	int n = 0;
	Val *v = g_val(g, indices);
	if (!v)
		return 0;
	for (size_t u = 0; u < v->nuse; u++) {
		Node *m = v->use[u].n;
		if (g_is(m, "Cast") || g_is(m, "Identity")) {
			/* The input graph is checked acyclic before any pass. */
			n += moe_compared_ids(c, v->use[u].g, m->output[0], ids + n, maxid - n);
			continue;
		}
		if (!g_is(m, "Equal") || m->n_input != 2)
			continue;
		const char *other = strcmp(m->input[0], indices) == 0 ? m->input[1] : m->input[0];
		int64_t id;
		if (g_const_ints(v->use[u].g, other, &id, 1) != 1)
			continue;
		if (n < maxid)
			ids[n++] = (int)id;
	}
	return n;
}

static Node **topks_in(Ctx *c, const char *scope, size_t *n)
{
	NodeVec nv = { .a = c->a };
	Onnx__GraphProto *gp = c->g->gp;
	for (size_t i = 0; i < gp->n_node; i++) {
		Node *m = gp->node[i];
		if (g_is(m, "TopK") && (!scope || (m->name && path_match(m->name, scope))))
			nv_push(&nv, m);
	}
	*n = nv.n;
	return nv.v;
}

/* Backward set of values feeding `name` as seen from graph g, bounded. */
static void ancestors(const Graph *g, const char *name, Map *out, int depth)
{
	if (depth > 64 || !*name || map_get(out, name))
		return;
	map_put(out, name, (void *)1);
	Val *v = g_val(g, name);
	if (!v || !v->def)
		return;
	for (size_t i = 0; i < v->def->n_input; i++)
		ancestors(v->g, v->def->input[i], out, depth + 1);
	/* An If reads outer values from its bodies. */
	for (size_t k = 0; k < v->g->nsub; k++)
		if (v->g->sub[k]->owner == v->def)
			for (size_t i = 0; i < v->g->sub[k]->nouter; i++)
				ancestors(v->g, v->g->sub[k]->outer[i], out, depth + 1);
}

/* Values of the main graph computed from L->indices, by one forward sweep
 * over the layer's span: the per-value backward walk (ancestors) goes
 * through every earlier layer, once per node asked about. */
static Map *index_descendants(Ctx *c, const Layer *L)
{
	Map *d = arena_alloc(c->ia, sizeof *d);
	map_init(d, c->ia, 64);
	map_put(d, L->indices, (void *)1);
	Onnx__GraphProto *gp = c->g->gp;
	size_t from = L->topk && g_graph_of(c, L->topk) == c->g ? g_pos(c, L->topk) : 0;
	for (size_t i = from; i < L->end && i < gp->n_node; i++) {
		Node *n = gp->node[i];
		int hit = 0;
		for (size_t j = 0; j < n->n_input && !hit; j++)
			hit = map_get(d, n->input[j]) != NULL;
		for (size_t k = 0; k < c->g->nsub && !hit && n->n_attribute; k++)
			if (c->g->sub[k]->owner == n)
				for (size_t j = 0; j < c->g->sub[k]->nouter && !hit; j++)
					hit = map_get(d, c->g->sub[k]->outer[j]) != NULL;
		if (hit)
			for (size_t j = 0; j < n->n_output; j++)
				if (*n->output[j])
					map_put(d, n->output[j], (void *)1);
	}
	return d;
}

static int derives_from(Ctx *c, const Graph *g, const char *name, const char *root)
{
	Map anc;
	map_init(&anc, c->a, 64);
	ancestors(g, name, &anc, 0);
	return map_get(&anc, root) != NULL;
}

/* The [B,k] weights the dispatch multiplies expert outputs by: the latest
 * value reached from the TopK values (or a gather of the probabilities by
 * the TopK indices) through elementwise ops, which the dispatch reads. */
static const char *find_weights(Ctx *c, Layer *L, const Graph *g, const char *wop, Map *desc)
{
	Map anc;
	map_init(&anc, c->a, 128);
	ancestors(g, wop, &anc, 0);
	const char *best = NULL;
	size_t bestpos = 0;
	Map closure;
	map_init(&closure, c->a, 32);
	const char *seed[8];
	size_t ns = 0;
	seed[ns++] = L->topk->output[0];
	Val *iv = g_val(c->g, L->indices);
	for (size_t u = 0; iv && u < iv->nuse && ns < 8; u++)
		if (g_is(iv->use[u].n, "GatherElements") && strcmp(iv->use[u].n->input[1], L->indices) == 0)
			seed[ns++] = iv->use[u].n->output[0];
	/* Values in graph order: one forward sweep computes the closure. */
	for (size_t s = 0; s < ns; s++)
		map_put(&closure, seed[s], (void *)1);
	Onnx__GraphProto *gp = c->g->gp;
	/* Nothing before the TopK derives from it: each layer's sweep starts
	 * there, not at the top of the model. */
	size_t from = g_graph_of(c, L->topk) == c->g ? g_pos(c, L->topk) : 0;
	for (size_t i = from; i < L->end; i++) {
		Node *n = gp->node[i];
		int inc = 0, bad = 0;
		for (size_t j = 0; j < n->n_input; j++) {
			if (map_get(&closure, n->input[j]))
				inc = 1;
		}
		if (inc && is_elementwise(n)) {
			for (size_t j = 0; j < n->n_input; j++)
				if (!map_get(&closure, n->input[j]) && map_get(desc, n->input[j]))
					bad = 1;
			if (!bad)
				map_put(&closure, n->output[0], (void *)1);
		}
	}
	for (size_t s = 0; s < ns; s++)
		if (map_get(&anc, seed[s]) && !best)
			best = seed[s];
	for (size_t i = from; i < L->end; i++) {
		Node *n = gp->node[i];
		if (n->n_output && map_get(&closure, n->output[0]) && map_get(&anc, n->output[0]) &&
		    g_pos(c, n) + 1 > bestpos) {
			best = n->output[0];
			bestpos = g_pos(c, n) + 1;
		}
	}
	return best;
}

/* The operand an expert output is multiplied by: the first Mul reached
 * from the output (possibly inside the gating If's body). */
static const char *weight_operand(Ctx *c, const Expert *x, const char **mulout)
{
	Val *v = g_val(x->g, x->out);
	for (size_t u = 0; v && u < v->nuse; u++) {
		Node *m = v->use[u].n;
		if (g_is(m, "Mul") && m->n_input == 2) {
			*mulout = m->output[0];
			return strcmp(m->input[0], x->out) == 0 ? m->input[1] : m->input[0];
		}
	}
	return NULL;
}

/* ---- the routed sum ---- */

static int accumulates(Ctx *c, Node *n, Map *dep, const Layer *L)
{
	Graph *g = c->g;
#define LIVE(name) (g_is_zero(g, name) || map_get(dep, name))
	if (g_is(n, "Add") || g_is(n, "Sum")) {
		for (size_t i = 0; i < n->n_input; i++)
			if (!LIVE(n->input[i]))
				return 0;
		return 1;
	}
	if (g_is(n, "ScatterElements") || g_is(n, "ScatterND"))
		return n->n_input == 3 && LIVE(n->input[0]) && map_get(dep, n->input[2]);
	if (g_is(n, "Where"))
		return n->n_input == 3 && LIVE(n->input[1]) && LIVE(n->input[2]);
	if (g_is(n, "If"))
		for (size_t k = 0; k < L->nex; k++)
			if (L->ex[k].gate == n)
				return 1;
	return 0;
#undef LIVE
}

static size_t words(const Layer *L)
{
	return L->nex / 64 + 1;
}

static uint64_t *bits_or(Ctx *c, const Layer *L, uint64_t *a, const uint64_t *b)
{
	if (!b)
		return a;
	if (!a)
		a = arena_alloc(c->ia, words(L) * 8);
	for (size_t i = 0; i < words(L); i++)
		a[i] |= b[i];
	return a;
}

static int bits_full(const Layer *L, const uint64_t *a)
{
	for (size_t k = 0; k < L->nex; k++)
		if (!(a[k / 64] >> (k % 64) & 1))
			return 0;
	return 1;
}

static int find_combined(Ctx *c, Layer *L, Err *e)
{
	/* Per-layer scratch over the whole model: in the index's arena, freed
	 * at the next reindex. */
	Map dep; /* value -> bitset over L->ex: which experts' outputs flow into it */
	map_init(&dep, c->ia, 256);
	for (size_t k = 0; k < L->nex; k++) {
		if (L->ex[k].gate)
			continue;
		uint64_t *b = arena_alloc(c->ia, words(L) * 8);
		b[k / 64] |= 1ull << (k % 64);
		map_put(&dep, L->ex[k].out, b);
	}
	PMap acc;
	pmap_init(&acc, c->ia, 64);
	Onnx__GraphProto *gp = c->g->gp;
	/* Nodes before the layer's first expert (or its gating If) cannot
	 * depend on the experts: start there. */
	size_t from = gp->n_node;
	for (size_t k = 0; k < L->nex; k++) {
		Node *n = L->ex[k].gate ? L->ex[k].gate : L->ex[k].nnode ? L->ex[k].node[0] : NULL;
		if (n && g_graph_of(c, n) == c->g && g_pos(c, n) < from)
			from = g_pos(c, n);
	}
	if (from == gp->n_node)
		from = 0;
	for (size_t i = from; i < L->end; i++) {
		Node *n = gp->node[i];
		if (g_is(n, "Shape") || g_is(n, "Size"))
			continue; /* metadata, not data */
		uint64_t *b = NULL;
		for (size_t j = 0; j < n->n_input; j++)
			b = bits_or(c, L, b, map_get(&dep, n->input[j]));
		for (size_t s = 0; s < c->g->nsub; s++)
			if (c->g->sub[s]->owner == n)
				for (size_t j = 0; j < c->g->sub[s]->nouter; j++)
					b = bits_or(c, L, b, map_get(&dep, c->g->sub[s]->outer[j]));
		for (size_t k = 0; k < L->nex; k++)
			if (L->ex[k].gate == n) {
				uint64_t one[words(L)];
				memset(one, 0, sizeof one);
				one[k / 64] |= 1ull << (k % 64);
				b = bits_or(c, L, b, one);
			}
		if (!b)
			continue;
		for (size_t j = 0; j < n->n_output; j++)
			if (*n->output[j] && !map_get(&dep, n->output[j]))
				map_put(&dep, n->output[j], b);
		if (accumulates(c, n, &dep, L))
			pmap_put(&acc, n, (void *)1);
	}
	const char *found = NULL;
	int nfound = 0;
	for (size_t i = from; i < L->end; i++) {
		Node *n = gp->node[i];
		/* Later layers' sums carry this layer's experts too: stay in scope. */
		if (!pmap_get(&acc, n) || !bits_full(L, map_get(&dep, n->output[0])) ||
		    !n->name || !path_match(n->name, L->scope))
			continue;
		Val *v = g_val(c->g, n->output[0]);
		int last = 1;
		for (size_t u = 0; v && u < v->nuse && last; u++)
			last = !pmap_get(&acc, v->use[u].n);
		if (!last)
			continue;
		if (!found)
			found = n->output[0];
		nfound++;
	}
	if (nfound != 1)
		return errf(e, "layer %s: %s the routed sum of experts' outputs (%d candidates%s%s); set `output:` in experts.yaml",
			    L->scope, nfound ? "cannot tell which value is" : "cannot find", nfound,
			    found ? ", first " : "", found ? found : "");
	L->combined = found;
	return 0;
}

/* ---- the layer ---- */

int moe_detect(Ctx *c, const SpecLayer *s, Layer *L, Err *e)
{
	memset(L, 0, sizeof *L);
	L->spec = s;
	L->scope = s->scope;
	/* An expert's path extends the scope, so its nodes lie among the
	 * scope's: one pass over the model, not one per expert. */
	NodeVec scoped = { .a = c->a };
	collect_named(c->g, s->scope, &scoped);
	if (scoped.n == 0 && !s->router_indices)
		return errf(e, "layer %s: no node name lies under this scope; check `scope:` (names look like '%s')",
			    s->scope, c->g->gp->n_node ? c->g->gp->node[0]->name : "");

	/* Router. */
	if (s->router_indices) {
		Val *v = g_val(c->g, s->router_indices);
		if (!v)
			return errf(e, "layer %s: router.indices '%s' is not a value of the model", s->scope,
				    s->router_indices);
		L->indices = v->name;
		if (v->def && g_is(v->def, "TopK"))
			L->topk = v->def;
	} else {
		size_t nt;
		Node **tk = topks_in(c, s->scope, &nt);
		/* The router's TopK is the one whose indices the dispatch compares
		 * with expert ids; a lone TopK is the router of a dense layer. */
		Node *pick = nt == 1 ? tk[0] : NULL;
		int npick = nt == 1;
		for (size_t i = 0; i < nt && nt > 1; i++) {
			int ids[4];
			if (tk[i]->n_output > 1 && moe_compared_ids(c, c->g, tk[i]->output[1], ids, 4) > 0) {
				if (!pick)
					pick = tk[i];
				npick++;
			}
		}
		if (!pick)
			return errf(e, "layer %s: %s TopK under this scope; set router.indices in experts.yaml", s->scope,
				    nt ? "cannot tell the router's" : "no");
		if (npick > 1)
			return errf(e, "layer %s: %d TopK nodes under this scope compare their indices with expert ids (first '%s'); set router.indices in experts.yaml",
				    s->scope, npick, pick->name);
		if (pick->n_output < 2)
			return errf(e, "layer %s: TopK '%s' has no indices output", s->scope, pick->name);
		L->topk = pick;
		L->indices = pick->output[1];
	}

	/* Experts. */
	L->nodes = (int)scoped.n;
	for (size_t i = 0; i < scoped.n; i++) {
		L->convs += g_is(scoped.v[i], "Conv");
		if (g_graph_of(c, scoped.v[i]) == c->g && g_pos(c, scoped.v[i]) + 1 > L->end)
			L->end = g_pos(c, scoped.v[i]) + 1;
	}
	L->ex = arena_alloc(c->a, (size_t)s->experts * sizeof *L->ex);
	for (int i = 0; i < s->experts; i++) {
		int r = find_expert(c, L, i, &scoped, &L->ex[L->nex], e);
		if (r < 0)
			return -1;
		if (r)
			L->nex++;
	}
	if (!L->nex)
		return errf(e, "layer %s: no node matches any expert path ('%s'); check `expert:`",
			    s->scope, expert_path(c, s, 0));
	int ids[1024];
	int nids = moe_compared_ids(c, c->g, L->indices, ids, 1024);
	for (int i = 0; i < nids; i++) {
		if (ids[i] < 0 || ids[i] >= s->experts)
			return errf(e, "layer %s: the dispatch compares the router indices with %d, but experts: %d",
				    s->scope, ids[i], s->experts);
		int named = 0;
		for (size_t k = 0; k < L->nex; k++)
			named |= L->ex[k].id == ids[i];
		if (!named)
			return errf(e, "layer %s: expert %d is dispatched but no node carries its path '%s'; check `expert:`",
				    s->scope, ids[i], expert_path(c, s, ids[i]));
	}
	for (size_t k = 0; k < L->nex; k++) {
		int seen = 0;
		for (size_t j = 0; j < k; j++)
			seen |= L->ex[j].gate == L->ex[k].gate;
		if (L->ex[k].gate && !seen)
			L->nif++;
	}

	Map *desc = index_descendants(c, L);
	/* What the experts read. */
	for (size_t k = 0; k < L->nex; k++) {
		Expert *x = &L->ex[k];
		const char *full = x->in;
		Val *v = g_val(x->g, x->in);
		if (v && v->def && g_is(v->def, "Gather") && g_attr_i(v->def, "axis", 0) == 0 &&
		    (x->g == c->g ? map_get(desc, v->def->input[1]) != NULL
				  : derives_from(c, x->g, v->def->input[1], L->indices))) {
			full = v->def->input[0];
			L->sparse = 1;
		}
		if (s->input)
			full = s->input;
		if (!L->x)
			L->x = full;
		else if (strcmp(L->x, full) != 0)
			return errf(e, "layer %s: experts read different tensors ('%s', '%s'); set `input:` in experts.yaml",
				    s->scope, L->x, full);
	}

	if (!L->sparse && !L->nif && nids == 0) {
		if ((int)L->nex != s->experts)
			return errf(e, "layer %s: %zu of %d experts present, and no dispatch found to repair; set router/input/output in experts.yaml",
				    s->scope, L->nex, s->experts);
		L->dense = 1;
		return 0;
	}

	/* Weights and rank, from the first expert's weighting Mul. */
	const char *mulout = NULL, *wop = weight_operand(c, &L->ex[0], &mulout);
	if (s->router_weights) {
		if (!g_val(c->g, s->router_weights))
			return errf(e, "layer %s: router.weights '%s' is not a value of the model", s->scope,
				    s->router_weights);
		L->weights = s->router_weights;
	} else {
		if (!wop || !L->topk)
			return errf(e, "layer %s: cannot find where expert %d's output is weighted; set router.weights in experts.yaml",
				    s->scope, L->ex[0].id);
		L->weights = find_weights(c, L, L->ex[0].g, wop, desc);
		if (!L->weights)
			return errf(e, "layer %s: cannot trace the weights multiplying expert %d's output back to the router; set router.weights",
				    s->scope, L->ex[0].id);
	}
	L->rank = g_rank(L->ex[0].g, L->ex[0].out, 0);
	if (L->rank < 0 && mulout)
		L->rank = g_rank(L->ex[0].g, mulout, 0);
	if (L->rank < 1)
		return errf(e, "layer %s: cannot tell the rank of expert %d's output '%s'; add value_info for it",
			    s->scope, L->ex[0].id, L->ex[0].out);

	if (s->output) {
		if (!g_val(c->g, s->output))
			return errf(e, "layer %s: output '%s' is not a value of the model", s->scope, s->output);
		L->combined = s->output;
		return 0;
	}
	return find_combined(c, L, e);
}
