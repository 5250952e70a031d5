#include "graph.h"
#include "infer.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int index_graph(Ctx *c, Graph *g, Err *e);

/* How many nodes ahead the index loads the hash slots of their names:
 * tables of a large graph are megabytes, and each probe a cache miss. */
enum { AHEAD = 8 };

static Graph *graph_new(Ctx *c, Onnx__GraphProto *gp, Graph *parent, Node *owner)
{
	Graph *g = arena_alloc(c->ia, sizeof *g);
	g->gp = gp;
	g->parent = parent;
	g->owner = owner;
	g->capnode = gp->n_node;
	g->capinit = gp->n_initializer;
	if (!parent) {
		g->zeros = c->zeros;
		g->nzeros = c->nzeros;
	}
	/* About one value per node output, initializer and graph input: the
	 * map starts at most half full, and grows if nodes have more. The
	 * main graph gets room for as many again: repairs add their values
	 * there (a 400-layer repair of tiny experts goes from 48 000 to over
	 * 98 000), and a doubling mid-repair hashes every name again. */
	size_t hint = gp->n_node + gp->n_initializer + gp->n_input + gp->n_output;
	map_init(&g->val, c->ia, parent ? hint : 2 * hint);
	return g;
}

/* name's value in g, made when new; h is map_key_hash(name). */
static Val *def_val_h(Ctx *c, Graph *g, const char *name, uint64_t h)
{
	Val **r = (Val **)map_ref_h(&g->val, name, h);
	if (*r)
		return *r;
	Val *v = *r = arena_alloc(c->ia, sizeof *v);
	v->name = name;
	v->g = g;
	if (!c->named)
		*map_ref_h(&c->names, name, h) = (void *)1;
	return v;
}

static Val *def_val(Ctx *c, Graph *g, const char *name)
{
	return def_val_h(c, g, name, map_key_hash(name));
}

struct NodeMemo {
	const Node *n;
	NodeInfo *k;
};

static NodeInfo *info(const Ctx *c, const Node *n)
{
	struct NodeMemo *m = c->memo; /* NULL before the first index */
	if (m && m->n == n)
		return m->k;
	NodeInfo *k = pmap_get(&c->node, n);
	if (k && m)
		*m = (struct NodeMemo){ n, k };
	return k;
}

/* Records where n is, in the index (new nodes included). */
static NodeInfo *place(Ctx *c, Node *n, Graph *g, size_t pos)
{
	NodeInfo **r = (NodeInfo **)pmap_ref(&c->node, n), *k = *r;
	if (!k) {
		/* The memo right behind the entry: walks read both. */
		k = *r = arena_alloc(c->ia, sizeof *k + (n->n_input + n->n_output) * sizeof *k->in);
		k->nin = n->n_input;
		k->nout = n->n_output;
		k->in = (struct Val **)(k + 1);
		k->out = k->in + k->nin;
	} else if (k->g != g) {
		/* Moved: its names are now looked up from another scope. */
		memset(k->in, 0, (k->nin + k->nout) * sizeof *k->in);
	}
	k->g = g;
	k->pos = pos;
	k->n = n;
	return k;
}

/* k's node (placed in k->g) produces its output j from now on; h is
 * map_key_hash of the output's name. */
static void set_def_h(Ctx *c, NodeInfo *k, size_t j, uint64_t h)
{
	Val *v = def_val_h(c, k->g, k->n->output[j], h);
	v->def = k->n;
	v->dk = k;
	if (j < k->nout)
		k->out[j] = v;
}

static void set_def(Ctx *c, NodeInfo *k, size_t j)
{
	set_def_h(c, k, j, map_key_hash(k->n->output[j]));
}

static Val *val_h(const Graph *g, const char *name, uint64_t h)
{
	for (; g; g = g->parent) {
		Val *v = map_get_h(&g->val, name, h);
		if (v)
			return v;
	}
	return NULL;
}

Val *g_val(const Graph *g, const char *name)
{
	return val_h(g, name, map_key_hash(name));
}

/* Input j's value; h: map_key_hash of its name, 0 to compute it here. */
static Val *in_val_h(NodeInfo *k, size_t j, uint64_t h)
{
	/* The memo first: one is made only for a name that is not empty, and
	 * the node's input array and the name's first byte are two cache
	 * misses more per input (walks over a large graph read every one). */
	if (j < k->nin && k->in[j])
		return k->in[j];
	const char *name = k->n->input[j];
	if (!*name)
		return NULL;
	Val *v = val_h(k->g, name, h ? h : map_key_hash(name));
	if (j < k->nin)
		k->in[j] = v;
	/* The name is now the value's own string: later lookups of it find
	 * their slot by pointer, without comparing the characters. */
	if (v)
		k->n->input[j] = (char *)v->name;
	return v;
}

static Val *in_val(NodeInfo *k, size_t j)
{
	return in_val_h(k, j, 0);
}

Val *g_in(NodeInfo *k, size_t j)
{
	return j < k->n->n_input ? in_val(k, j) : NULL;
}

Val *g_input(const Ctx *c, const Node *n, size_t j)
{
	NodeInfo *k = info(c, n);
	return k && j < n->n_input ? in_val(k, j) : NULL;
}

Val *g_output(const Ctx *c, const Node *n, size_t j)
{
	NodeInfo *k = info(c, n);
	if (!k || j >= n->n_output)
		return NULL;
	/* The memo first, as in in_val: it is only made for a name. */
	if (j < k->nout && k->out[j])
		return k->out[j];
	if (!*n->output[j])
		return NULL;
	Val *v = map_get(&k->g->val, n->output[j]);
	if (j < k->nout)
		k->out[j] = v;
	return v;
}

/* An input of n changed: its memo is stale. */
static void forget_input(Ctx *c, const Node *n, size_t j)
{
	NodeInfo *k = info(c, n);
	if (k && j < k->nin)
		k->in[j] = NULL;
}

static void add_use(Ctx *c, Val *v, NodeInfo *k, Graph *g)
{
	if (v->nuse == v->capuse) {
		size_t cap = v->capuse ? (size_t)v->capuse * 2 : 1;
		v->use = arena_grow(c->ia, v->use, v->nuse * sizeof *v->use, cap * sizeof *v->use);
		v->capuse = (uint32_t)cap;
	}
	v->use[v->nuse++] = (Use){ k->n, g, k };
}

/* Arrays of the index grow by doubling: growing by one element copied the
 * whole array each time, quadratic time and arena memory (a model of
 * 20 000 If nodes asked for gigabytes). */
static void *grow_arr(Ctx *c, void *p, size_t n, size_t *cap, size_t elsize)
{
	if (n < *cap)
		return p;
	size_t nc = *cap ? *cap * 2 : 4;
	p = arena_grow(c->ia, p, n * elsize, nc * elsize);
	*cap = nc;
	return p;
}

static void add_outer(Ctx *c, Graph *g, const char *name)
{
	if (!g->outerset.a)
		map_init(&g->outerset, c->ia, 8);
	if (map_get(&g->outerset, name))
		return;
	map_put(&g->outerset, name, (void *)1);
	g->outer = grow_arr(c, g->outer, g->nouter, &g->capouter, sizeof *g->outer);
	g->outer[g->nouter++] = name;
}

/* The hashes of a node's names, taken AHEAD nodes before the index gets
 * to it, where their slots are prefetched, and used there: each name is
 * hashed once. Names past AHEAD_NAMES are hashed where used. */
enum { AHEAD_NAMES = 6 };
typedef struct {
	uint64_t name, h[AHEAD_NAMES];
} Ahead;

static void ahead_outputs(Ctx *c, Graph *g, const Node *f, Ahead *r)
{
	map_prefetch(&c->node, f);
	if (f->name && *f->name && !c->named) {
		r->name = map_key_hash(f->name);
		map_prefetch_h(&c->names, r->name);
	}
	for (size_t j = 0; j < f->n_output && j < AHEAD_NAMES; j++) {
		r->h[j] = map_key_hash(f->output[j]);
		map_prefetch_h(&g->val, r->h[j]);
		if (!c->named)
			map_prefetch_h(&c->names, r->h[j]);
	}
}

/* The same for inputs, whose values may be in an enclosing graph: its
 * map's slot comes when the lookup gets there. */
static void ahead_inputs(const Graph *g, const Node *f, Ahead *r)
{
	for (size_t j = 0; j < f->n_input && j < AHEAD_NAMES; j++) {
		r->h[j] = map_key_hash(f->input[j]);
		map_prefetch_h(&g->val, r->h[j]);
	}
}

/* Defines the values of g (inputs, initializers, node outputs). */
static int define_graph(Ctx *c, Graph *g, Err *e)
{
	Onnx__GraphProto *gp = g->gp;
	for (size_t i = 0; i < gp->n_input; i++)
		def_val(c, g, gp->input[i]->name)->isin = 1;
	g->ival = arena_alloc_raw(c->ia, (gp->n_initializer ? gp->n_initializer : 1) * sizeof *g->ival);
	g->capival = gp->n_initializer;
	for (size_t i = 0; i < gp->n_initializer; i++) {
		Tensor *t = gp->initializer[i];
		Val *v = def_val(c, g, t->name);
		if (v->init)
			return errf(e, "initializer '%s' is defined twice; the model is malformed", t->name);
		v->init = t;
		g->ival[g->nival++] = v;
	}
	g->order = arena_alloc_raw(c->ia, (gp->n_node ? gp->n_node : 1) * sizeof *g->order);
	g->caporder = gp->n_node;
	Ahead ring[AHEAD];
	for (size_t i = 0; i < AHEAD && i < gp->n_node; i++)
		ahead_outputs(c, g, gp->node[i], &ring[i]);
	for (size_t i = 0; i < gp->n_node; i++) {
		Node *n = gp->node[i];
		Ahead *r = &ring[i % AHEAD];
		NodeInfo *k = g->order[g->norder++] = place(c, n, g, i);
		if (n->name && *n->name && !c->named)
			*map_ref_h(&c->names, n->name, r->name) = (void *)1;
		for (size_t j = 0; j < n->n_output; j++) {
			if (!*n->output[j])
				continue;
			Val *v = def_val_h(c, g, n->output[j], j < AHEAD_NAMES ? r->h[j] : map_key_hash(n->output[j]));
			if (v->def || v->init)
				return errf(e, "value '%s' has two producers (node '%s' and %s '%s'); the model is malformed",
					    v->name, n->name ? n->name : "", v->def ? "node" : "initializer",
					    v->def ? (v->def->name ? v->def->name : "") : v->name);
			v->def = n;
			v->dk = k;
			k->out[j] = v;
		}
		if (i + AHEAD < gp->n_node)
			ahead_outputs(c, g, gp->node[i + AHEAD], r);
	}
	for (size_t i = 0; i < gp->n_output; i++) {
		Val *v = def_val(c, g, gp->output[i]->name);
		v->isout = 1;
		gp->output[i]->name = (char *)v->name;
	}
	/* Declared shapes, so rank and dimension queries need no scan. */
	Onnx__ValueInfoProto **lists[] = { gp->input, gp->output, gp->value_info };
	size_t ns[] = { gp->n_input, gp->n_output, gp->n_value_info };
	for (int l = 0; l < 3; l++)
		for (size_t i = 0; i < ns[l]; i++) {
			Onnx__ValueInfoProto *vi = lists[l][i];
			Val *v = map_get(&g->val, vi->name);
			if (v && !v->shape && vi->type && vi->type->value_case == ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE &&
			    vi->type->tensor_type->shape)
				v->shape = vi->type->tensor_type->shape;
		}
	return 0;
}

static int index_graph(Ctx *c, Graph *g, Err *e)
{
	if (define_graph(c, g, e))
		return -1;
	Onnx__GraphProto *gp = g->gp;
	for (size_t i = 0; i < gp->n_node; i++) {
		Node *n = gp->node[i];
		for (size_t j = 0; j < n->n_attribute; j++) {
			Onnx__AttributeProto *at = n->attribute[j];
			Onnx__GraphProto *body[64];
			size_t nb = 0;
			if (at->g)
				body[nb++] = at->g;
			for (size_t k = 0; k < at->n_graphs && nb < 64; k++)
				body[nb++] = at->graphs[k];
			for (size_t k = 0; k < nb; k++) {
				Graph *s = graph_new(c, body[k], g, n);
				if (!pmap_get(&c->subidx, n))
					pmap_put(&c->subidx, n, (void *)(uintptr_t)(g->nsub + 1));
				g->sub = grow_arr(c, g->sub, g->nsub, &g->capsub, sizeof *g->sub);
				g->sub[g->nsub++] = s;
				if (index_graph(c, s, e))
					return -1;
			}
		}
	}
	Ahead ring[AHEAD];
	for (size_t i = 0; i < AHEAD && i < gp->n_node; i++)
		ahead_inputs(g, gp->node[i], &ring[i]);
	for (size_t i = 0; i < gp->n_node; i++) {
		Node *n = gp->node[i];
		Ahead *r = &ring[i % AHEAD];
		NodeInfo *k = g_node_at(c, g, i);
		for (size_t j = 0; j < n->n_input; j++) {
			const char *name = n->input[j];
			Val *v = in_val_h(k, j, j < AHEAD_NAMES ? r->h[j] : 0);
			if (!v)
				continue; /* empty, or undefined: the checker reports it with context */
			add_use(c, v, k, g);
			for (Graph *h = g; h && h != v->g; h = h->parent)
				add_outer(c, h, name);
		}
		if (i + AHEAD < gp->n_node)
			ahead_inputs(g, gp->node[i + AHEAD], r);
	}
	/* Graph outputs of a body may be outer values (If else-branch Identity-free forms). */
	for (size_t i = 0; i < gp->n_output; i++) {
		Val *v = g_val(g, gp->output[i]->name);
		if (v && v->g != g)
			for (Graph *h = g; h && h != v->g; h = h->parent)
				add_outer(c, h, v->name);
	}
	/* Outer values read by a body are uses of the node owning it. */
	for (size_t k = 0; k < g->nsub; k++) {
		Graph *s = g->sub[k];
		for (size_t i = 0; i < s->nouter; i++) {
			Val *v = g_val(g, s->outer[i]);
			if (v && v->g == g)
				add_use(c, v, info(c, s->owner), g);
		}
	}
	return 0;
}

int g_reindex(Ctx *c, Err *e)
{
	Onnx__GraphProto *gp = c->m->graph;
	size_t capnode = c->g ? c->g->capnode : gp->n_node;
	size_t capinit = c->g ? c->g->capinit : gp->n_initializer;
	/* The old index goes at once: reindexing after each layer would
	 * otherwise keep one dead index per layer, quadratic memory. */
	if (c->ia)
		arena_reset(c->ia);
	else
		c->ia = arena_new();
	c->gen++;
	c->inferred = 0;
	/* The names map outlives the index (they only accumulate): built by
	 * the first indexing, then kept current by def_val and g_fresh. */
	if (!c->names.a) {
		/* Sized for the top graph's names at half load (a new map
		 * doubles past three quarters): the repair's new names mostly
		 * fit, subgraphs' grow it. n_node * 3 left a 400-layer model's
		 * map at a quarter load, 6 MiB of it never used. */
		size_t n = gp->n_node + gp->n_initializer + gp->n_input;
		for (size_t i = 0; i < gp->n_node; i++)
			n += gp->node[i]->n_output;
		map_init(&c->names, c->a, n);
	}
	pmap_init(&c->node, c->ia, gp->n_node);
	c->memo = arena_alloc(c->ia, sizeof *c->memo);
	pmap_init(&c->subidx, c->ia, 16);
	c->g = graph_new(c, gp, NULL, NULL);
	c->g->capnode = capnode;
	c->g->capinit = capinit;
	if (index_graph(c, c->g, e))
		return -1;
	/* From here on every new name comes through g_fresh. */
	c->named = 1;
	return 0;
}

void g_fini(Ctx *c)
{
	arena_free(c->ia);
	arena_free(c->tmp);
	c->ia = c->tmp = NULL;
	c->g = NULL;
}

int g_init(Ctx *c, Onnx__ModelProto *m, Arena *a, Err *e)
{
	memset(c, 0, sizeof *c);
	c->a = a;
	c->m = m;
	c->opset = 1;
	c->tmp = arena_new();
	if (!m->graph)
		return errf(e, "the model has no graph");
	for (size_t i = 0; i < m->n_opset_import; i++) {
		Onnx__OperatorSetIdProto *o = m->opset_import[i];
		if (model_default_domain(o->domain))
			c->opset = (int)o->version;
	}
	return g_reindex(c, e);
}

NodeInfo *g_info(const Ctx *c, const Node *n)
{
	return info(c, n);
}

Val *g_init_at(const Graph *g, size_t i)
{
	Tensor *t = g->gp->initializer[i];
	return i < g->nival && g->ival[i]->init == t ? g->ival[i] : map_get(&g->val, t->name);
}

void g_zeros(Ctx *c, const void *p, size_t n)
{
	c->zeros = (uintptr_t)p;
	c->nzeros = p ? n : 0;
	if (c->g) {
		c->g->zeros = c->zeros;
		c->g->nzeros = c->nzeros;
	}
}

void g_reader(const Ctx *c, Ctx *r)
{
	*r = *c;
	r->memo = arena_alloc(c->ia, sizeof *r->memo);
}

NodeInfo *g_node_at(const Ctx *c, const Graph *g, size_t i)
{
	Node *n = g->gp->node[i];
	if (i >= g->norder || g->order[i]->n != n)
		return info(c, n);
	/* The node's own queries (g_input, g_output) come next. */
	if (c->memo)
		*c->memo = (struct NodeMemo){ n, g->order[i] };
	return g->order[i];
}

Graph *g_graph_of(const Ctx *c, const Node *n)
{
	NodeInfo *k = info(c, n);
	return k ? k->g : NULL;
}

size_t g_subs_of(const Ctx *c, const Graph *g, const Node *n, size_t *first)
{
	size_t i = g->nsub ? (size_t)(uintptr_t)pmap_get(&c->subidx, n) : 0;
	*first = i ? i - 1 : 0;
	if (!i)
		return 0;
	size_t k = i - 1;
	while (k < g->nsub && g->sub[k]->owner == n)
		k++;
	return k - (i - 1);
}

size_t g_pos(const Ctx *c, const Node *n)
{
	NodeInfo *k = info(c, n);
	return k ? k->pos : (size_t)-1;
}

const Onnx__AttributeProto *g_attr(const Node *n, const char *name)
{
	for (size_t i = 0; i < n->n_attribute; i++) {
		const char *a = n->attribute[i]->name;
		if (a[0] == name[0] && strcmp(a, name) == 0)
			return n->attribute[i];
	}
	return NULL;
}

int64_t g_attr_i(const Node *n, const char *name, int64_t dflt)
{
	const Onnx__AttributeProto *a = g_attr(n, name);
	return a && a->has_i ? a->i : dflt;
}

static uint32_t op_hash(const char *s)
{
	uint32_t h = 2166136261u; /* FNV-1a */
	for (; *s; s++)
		h = (h ^ (unsigned char)*s) * 16777619u;
	return h;
}

static const char *op_name(const OpIndex *x, size_t i)
{
	return *(const char *const *)((const char *)x->base + i * x->size);
}

const void *g_op_entry(OpIndex *x, const char *op)
{
	enum { MASK = sizeof x->slot / sizeof *x->slot - 1 };
	if (!__atomic_load_n(&x->ready, __ATOMIC_ACQUIRE)) {
		static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
		pthread_mutex_lock(&mu);
		if (x->n > sizeof x->slot / sizeof *x->slot / 2) {
			fprintf(stderr, "onnx-moe-repair: an op table of %zu entries; OpIndex takes 256\n", x->n);
			abort();
		}
		for (size_t i = 0; !x->ready && i < x->n; i++) {
			uint32_t k = op_hash(op_name(x, i)) & MASK;
			while (x->slot[k])
				k = (k + 1) & MASK;
			x->slot[k] = (uint16_t)(i + 1);
		}
		__atomic_store_n(&x->ready, 1, __ATOMIC_RELEASE);
		pthread_mutex_unlock(&mu);
	}
	for (uint32_t k = op_hash(op) & MASK; x->slot[k]; k = (k + 1) & MASK)
		if (strcmp(op_name(x, x->slot[k] - 1u), op) == 0)
			return (const char *)x->base + (x->slot[k] - 1u) * x->size;
	return NULL;
}

const Tensor *g_const(const Graph *g, const char *name)
{
	/* Identity of a constant is that constant: exporters deduplicating
	 * equal initializers leave Identity(onnx::Mul_262) where a tensor was. */
	for (int d = 0; d < 16; d++) {
		Val *v = g_val(g, name);
		if (!v)
			return NULL;
		if (v->init)
			return v->init;
		if (v->def && g_is(v->def, "Constant")) {
			const Onnx__AttributeProto *a = g_attr(v->def, "value");
			return a ? a->t : NULL;
		}
		if (!v->def || !g_is(v->def, "Identity") || v->def->n_input != 1)
			return NULL;
		g = v->g;
		name = v->def->input[0];
	}
	return NULL;
}

int64_t g_tensor_numel(const Tensor *t)
{
	int64_t n = 1;
	for (size_t i = 0; i < t->n_dims; i++) {
		if (t->dims[i] < 0 || (t->dims[i] && n > INT64_MAX / t->dims[i]))
			return -1;
		n *= t->dims[i];
	}
	return n;
}

const void *g_tensor_data(const Tensor *t, size_t *nbytes)
{
	if (t->has_data_location && t->data_location == ONNX__TENSOR_PROTO__DATA_LOCATION__EXTERNAL)
		return NULL;
	if (t->has_raw_data) {
		*nbytes = t->raw_data.len;
		return g_is_later(t) ? NULL : t->raw_data.data;
	}
	/* Typed fields of the types whose wire form is their memory form. */
	switch (t->data_type) {
	case ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT:
		*nbytes = t->n_float_data * 4;
		return t->float_data;
	case ONNX__TENSOR_PROTO__DATA_TYPE__INT64:
		*nbytes = t->n_int64_data * 8;
		return t->int64_data;
	case ONNX__TENSOR_PROTO__DATA_TYPE__DOUBLE:
		*nbytes = t->n_double_data * 8;
		return t->double_data;
	case ONNX__TENSOR_PROTO__DATA_TYPE__INT32:
		*nbytes = t->n_int32_data * 4;
		return t->int32_data;
	case ONNX__TENSOR_PROTO__DATA_TYPE__UINT64:
		*nbytes = t->n_uint64_data * 8;
		return t->uint64_data;
	}
	return NULL;
}

/* A pass reading a tensor another layer's repair made: rare, so found by
 * a scan. */
static const void *fill_now(Ctx *c, const Tensor *t, size_t *nbytes, Err *e)
{
	for (size_t i = 0; i < c->nlater; i++) {
		Later *l = c->later[i];
		if (l->t != t)
			continue;
		void *p = arena_bulk(c->a, t->raw_data.len);
		if (l->fill(l, p, c->tmp, e))
			return NULL;
		l->t->raw_data.data = p;
		*nbytes = t->raw_data.len;
		return p;
	}
	errf(e, "tensor '%s' has no values yet and nothing to fill it; please report this model", t->name ? t->name : "");
	return NULL;
}

const void *g_tensor_bytes(Ctx *c, const Tensor *t, size_t *nbytes, Err *e)
{
	if (g_is_later(t))
		return fill_now(c, t, nbytes, e);
	const void *p = g_tensor_data(t, nbytes);
	if (p || !(t->has_data_location && t->data_location == ONNX__TENSOR_PROTO__DATA_LOCATION__EXTERNAL))
		return p;
	if (!c->ext) {
		errf(e, "tensor '%s' is in external data, which this run cannot read", t->name ? t->name : "");
		return NULL;
	}
	return c->ext(c->ext_ud, t, &p, nbytes, e) < 0 ? NULL : p;
}

long g_const_ints(const Graph *g, const char *name, int64_t *out, size_t max)
{
	const Tensor *t = g_const(g, name);
	if (!t)
		return -1;
	size_t nb;
	const unsigned char *p = g_tensor_data(t, &nb);
	int64_t n = g_tensor_numel(t);
	if (!p || n < 0 || (size_t)n > max)
		return -1;
	if (t->data_type == ONNX__TENSOR_PROTO__DATA_TYPE__INT64 && nb == (size_t)n * 8) {
		memcpy(out, p, nb);
		return (long)n;
	}
	if (t->data_type == ONNX__TENSOR_PROTO__DATA_TYPE__INT32 && nb == (size_t)n * 4) {
		for (int64_t i = 0; i < n; i++) {
			int32_t x;
			memcpy(&x, p + 4 * i, 4);
			out[i] = x;
		}
		return (long)n;
	}
	return -1;
}

/* Whether the n bytes at p are zero once mask clears each element's sign
 * bit, so that -0.0 counts as zero. 64 bytes a step, which vectorises:
 * detection asks this of every zeros tensor per node, and a traced
 * dispatch's zeros are as large as its activations. Little-endian, as
 * raw_data is. */
int g_bytes_zero(const void *p, size_t n, uint64_t mask)
{
	const unsigned char *b = p;
	size_t i = 0;
	for (; i + 64 <= n; i += 64) {
		uint64_t w[8], acc = 0;
		memcpy(w, b + i, sizeof w);
		for (int k = 0; k < 8; k++)
			acc |= w[k] & mask;
		if (acc)
			return 0;
	}
	for (; i < n; i += 8) {
		uint64_t w = 0;
		memcpy(&w, b + i, n - i < 8 ? n - i : 8);
		if (w & mask)
			return 0;
	}
	return 1;
}

int g_is_zero(const Graph *g, const char *name)
{
	const Tensor *t = g_const(g, name);
	Val *v = g_val(g, name);
	if (!t && v && v->def && g_is(v->def, "ConstantOfShape")) {
		const Onnx__AttributeProto *a = g_attr(v->def, "value");
		if (!a)
			return 1; /* the default fill is 0 */
		t = a->t;
	}
	if (!t)
		return 0;
	size_t nb;
	const void *p = g_tensor_data(t, &nb);
	const Graph *m = g;
	while (m->parent)
		m = m->parent;
	uintptr_t at = (uintptr_t)p;
	if (p && m->zeros && at >= m->zeros && nb <= m->nzeros && at - m->zeros <= m->nzeros - nb)
		return 1;
	uint64_t mask;
	switch (t->data_type) {
	case ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT:
		mask = 0x7fffffff7fffffffu;
		break;
	case ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT16:
	case ONNX__TENSOR_PROTO__DATA_TYPE__BFLOAT16:
		mask = 0x7fff7fff7fff7fffu;
		break;
	case ONNX__TENSOR_PROTO__DATA_TYPE__DOUBLE:
		mask = 0x7fffffffffffffffu;
		break;
	default:
		mask = ~(uint64_t)0;
	}
	return p && g_bytes_zero(p, nb, mask);
}

/* g_fresh, and *h the new name's map_key_hash: callers defining a value
 * of that name look it up with it. */
static const char *fresh_h(Ctx *c, const char *base, uint64_t *h)
{
	int added;
	*h = map_key_hash(base);
	const char *b = map_add(&c->names, c->a, base, *h, &added);
	if (added)
		return b;
	/* base_1, base_2, ...: a counter per base keeps names short and the
	 * search short when one base is asked for many times. Keyed by the
	 * names map's own copy of base, which outlives the caller's. */
	if (!c->fresh.a)
		map_init(&c->fresh, c->a, 64);
	void **k = map_ref(&c->fresh, b);
	for (;;) {
		*k = (void *)((uintptr_t)*k + 1);
		const char *s = arena_printf(c->a, "%s_%zu", base, (size_t)(uintptr_t)*k);
		*h = map_key_hash(s);
		void **r = map_ref_h(&c->names, s, *h);
		if (!*r) {
			*r = (void *)s;
			return s;
		}
	}
}

const char *g_fresh(Ctx *c, const char *base)
{
	uint64_t h;
	return fresh_h(c, base, &h);
}

void g_prefetch_name(const Ctx *c, const Graph *g, const char *name)
{
	uint64_t h = map_key_hash(name);
	map_prefetch_h(&c->names, h);
	map_prefetch_h(&g->val, h);
}

/* Input j of n (index entry k, or NULL) reads v, the value's own string
 * (no copy) with its memo filled, or `name` where no value has it. */
static void set_in(Ctx *c, NodeInfo *k, Node *n, size_t j, Val *v, const char *name)
{
	c->edits++;
	n->input[j] = v ? (char *)v->name : arena_strdup(c->a, name);
	if (k && j < k->nin)
		k->in[j] = v;
}

/* Input j of n reads `name`, looked up now, while the values a pass just
 * made are in cache. */
static void resolve_input(Ctx *c, NodeInfo *k, Node *n, size_t j, const char *name)
{
	set_in(c, k, n, j, k && *name ? g_val(k->g, name) : NULL, name);
}

static NodeInfo *push_node(Ctx *c, Graph *g, Node *n)
{
	Onnx__GraphProto *gp = g->gp;
	if (gp->n_node == g->capnode) {
		size_t cap = g->capnode ? g->capnode * 2 : 16;
		gp->node = arena_grow(c->a, gp->node, gp->n_node * sizeof *gp->node, cap * sizeof *gp->node);
		g->capnode = cap;
	}
	gp->node[gp->n_node++] = n;
	c->edits++;
	NodeInfo *k = place(c, n, g, gp->n_node - 1);
	if (g->norder == gp->n_node - 1) {
		g->order = grow_arr(c, g->order, g->norder, &g->caporder, sizeof *g->order);
		g->order[g->norder++] = k;
	}
	return k;
}

static char **dup_strv(Ctx *c, const char *const *v, size_t n)
{
	char **r = arena_alloc(c->a, (n ? n : 1) * sizeof *r);
	for (size_t i = 0; i < n; i++)
		r[i] = arena_strdup(c->a, v[i]);
	return r;
}

Node *g_add_node(Ctx *c, Graph *g, const char *op, const char *name,
		 const char *const *in, size_t nin, const char *const *out, size_t nout)
{
	Node *n = arena_alloc(c->a, sizeof *n);
	onnx__node_proto__init(n);
	n->op_type = arena_strdup(c->a, op);
	n->name = (char *)g_fresh(c, name);
	n->n_input = nin;
	n->output = dup_strv(c, out, nout);
	n->n_output = nout;
	n->input = arena_alloc(c->a, (nin ? nin : 1) * sizeof *n->input);
	NodeInfo *k = push_node(c, g, n);
	for (size_t j = 0; j < nin; j++)
		resolve_input(c, k, n, j, in[j]);
	for (size_t j = 0; j < nout; j++)
		if (*n->output[j])
			set_def(c, k, j);
	return n;
}

static Onnx__AttributeProto *new_attr(Ctx *c, Node *n, const char *name)
{
	Onnx__AttributeProto *a = arena_alloc(c->a, sizeof *a);
	onnx__attribute_proto__init(a);
	a->name = arena_strdup(c->a, name);
	a->has_type = 1;
	n->attribute = arena_grow(c->a, n->attribute, n->n_attribute * sizeof *n->attribute,
				  (n->n_attribute + 1) * sizeof *n->attribute);
	n->attribute[n->n_attribute++] = a;
	return a;
}

void g_set_attr_i(Ctx *c, Node *n, const char *name, int64_t v)
{
	Onnx__AttributeProto *a = new_attr(c, n, name);
	a->type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT;
	a->has_i = 1;
	a->i = v;
}

void g_set_attr_ints(Ctx *c, Node *n, const char *name, const int64_t *v, size_t k)
{
	Onnx__AttributeProto *a = new_attr(c, n, name);
	a->type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INTS;
	a->ints = arena_dup(c->a, v, k * sizeof *v);
	a->n_ints = k;
}

void g_put_attr_i(Ctx *c, Node *n, const char *name, int64_t v)
{
	size_t k = n->n_attribute;
	for (size_t i = 0; i < k; i++) {
		if (strcmp(n->attribute[i]->name, name))
			continue;
		Onnx__AttributeProto *a = arena_alloc(c->a, sizeof *a);
		onnx__attribute_proto__init(a);
		a->name = arena_strdup(c->a, name);
		a->has_type = 1;
		a->type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT;
		a->has_i = 1;
		a->i = v;
		n->attribute = arena_dup(c->a, n->attribute, k * sizeof *n->attribute);
		n->attribute[i] = a;
		return;
	}
	g_set_attr_i(c, n, name, v);
}

Node *g_clone_node(Ctx *c, Graph *g, const Node *src)
{
	Node *n = arena_dup(c->a, src, sizeof *n);
	n->input = arena_dup(c->a, src->input, src->n_input * sizeof *n->input);
	n->output = arena_dup(c->a, src->output, src->n_output * sizeof *n->output);
	NodeInfo *sk = info(c, src), *k = push_node(c, g, n);
	/* Same names in the same scope: the same values. */
	if (sk && sk->g == g && sk->nin == k->nin)
		memcpy(k->in, sk->in, k->nin * sizeof *k->in);
	return n;
}

Tensor *g_add_init(Ctx *c, Graph *g, const char *name, int dtype,
		   const int64_t *dims, size_t ndims, const void *data, size_t nbytes)
{
	Tensor *t = arena_alloc(c->a, sizeof *t);
	onnx__tensor_proto__init(t);
	uint64_t h;
	t->name = (char *)fresh_h(c, name, &h);
	t->has_data_type = 1;
	t->data_type = dtype;
	t->dims = arena_dup(c->a, dims, (ndims ? ndims : 1) * sizeof *dims);
	t->n_dims = ndims;
	t->has_raw_data = 1;
	t->raw_data.data = (uint8_t *)data;
	t->raw_data.len = nbytes;
	Onnx__GraphProto *gp = g->gp;
	if (gp->n_initializer == g->capinit) {
		size_t cap = g->capinit ? g->capinit * 2 : 16;
		gp->initializer = arena_grow(c->a, gp->initializer, gp->n_initializer * sizeof *gp->initializer,
					     cap * sizeof *gp->initializer);
		g->capinit = cap;
	}
	gp->initializer[gp->n_initializer++] = t;
	Val *v = def_val_h(c, g, t->name, h);
	v->init = t;
	if (g->nival == gp->n_initializer - 1) {
		g->ival = grow_arr(c, g->ival, g->nival, &g->capival, sizeof *g->ival);
		g->ival[g->nival++] = v;
	}
	return t;
}

Tensor *g_add_init_later(Ctx *c, Graph *g, const char *name, int dtype, const int64_t *dims, size_t ndims,
			 size_t nbytes, Later *l)
{
	Tensor *t = g_add_init(c, g, name, dtype, dims, ndims, NULL, nbytes);
	l->t = t;
	if (c->nlater == c->caplater) {
		size_t cap = c->caplater ? c->caplater * 2 : 64;
		c->later = arena_grow(c->a, c->later, c->nlater * sizeof *c->later, cap * sizeof *c->later);
		c->caplater = cap;
	}
	c->later[c->nlater++] = l;
	return t;
}

Tensor *g_add_init_i64(Ctx *c, Graph *g, const char *base, const int64_t *v, size_t n, int scalar)
{
	int64_t dim = (int64_t)n;
	return g_add_init(c, g, base, ONNX__TENSOR_PROTO__DATA_TYPE__INT64, &dim, scalar ? 0 : 1,
			  arena_dup(c->a, v, n * sizeof *v), n * sizeof *v);
}

static void replace_in(Ctx *c, Onnx__GraphProto *gp, const char *from, char *to)
{
	for (size_t i = 0; i < gp->n_node; i++) {
		Node *n = gp->node[i];
		for (size_t j = 0; j < n->n_input; j++)
			if (strcmp(n->input[j], from) == 0) {
				n->input[j] = to;
				forget_input(c, n, j);
			}
		for (size_t j = 0; j < n->n_attribute; j++) {
			Onnx__AttributeProto *a = n->attribute[j];
			if (a->g)
				replace_in(c, a->g, from, to);
			for (size_t k = 0; k < a->n_graphs; k++)
				replace_in(c, a->graphs[k], from, to);
		}
	}
}

void g_replace_uses(Ctx *c, const char *from, const char *to)
{
	c->edits++;
	/* A walk over every node: replacements are a handful per repaired layer,
	 * and the index is rebuilt afterwards anyway. */
	char *t = arena_strdup(c->a, to);
	const char *f = arena_strdup(c->a, from);
	replace_in(c, c->m->graph, f, t);
}

void g_set_input(Ctx *c, Node *n, size_t i, const char *name)
{
	resolve_input(c, info(c, n), n, i, name);
}

void g_set_input_val(Ctx *c, Node *n, size_t i, Val *v)
{
	set_in(c, info(c, n), n, i, v, NULL);
}

void g_set_name(Ctx *c, Node *n, const char *base)
{
	n->name = (char *)g_fresh(c, base);
}

/* Output idx of n reads `to` (a string the model keeps, hash h) from now on. */
static void rename_output(Ctx *c, Node *n, size_t idx, char *to, uint64_t h)
{
	c->edits++;
	NodeInfo *k = info(c, n);
	/* The value n defines there is in its memo: define_graph and set_def,
	 * the only places a node becomes a producer, both record it (a
	 * clone's memo is empty: its output names are its source's values). */
	Val *old = !k || !*n->output[idx] ? NULL : idx < k->nout ? k->out[idx] : map_get(&k->g->val, n->output[idx]);
	if (old && old->def == n) {
		old->def = NULL;
		old->dk = NULL;
	}
	n->output[idx] = to;
	if (k && idx < k->nout)
		k->out[idx] = NULL;
	if (k && *to)
		set_def_h(c, k, idx, h);
}

void g_rename_output(Ctx *c, Node *n, size_t idx, const char *to)
{
	/* g_fresh's names (the usual ones) are the model's already. */
	uint64_t h = map_key_hash(to);
	rename_output(c, n, idx, map_get_h(&c->names, to, h) == to ? (char *)to : arena_strdup(c->a, to), h);
}

const char *g_fresh_output(Ctx *c, Node *n, size_t idx, const char *base)
{
	uint64_t h;
	char *to = (char *)fresh_h(c, base, &h);
	rename_output(c, n, idx, to, h);
	return to;
}

void g_move_node(Ctx *c, Node *n, Graph *to)
{
	Graph *from = g_graph_of(c, n);
	if (from) {
		Onnx__GraphProto *gp = from->gp;
		size_t k = 0;
		for (size_t i = 0; i < gp->n_node; i++)
			if (gp->node[i] != n)
				gp->node[k++] = gp->node[i];
		gp->n_node = k;
		from->norder = 0;
	}
	NodeInfo *k = push_node(c, to, n);
	for (size_t j = 0; j < n->n_output; j++)
		if (*n->output[j])
			set_def(c, k, j);
}

/* ---- pattern rewriting ---- */

int g_rewrite(Ctx *c, const Pattern *p, size_t np, int dry, Err *e)
{
	int total = 0;
	unsigned char st[512];
	/* A rewrite exposes new matches only through the nodes it adds, so a
	 * few rounds reach the fixed point; the bound stops a pattern that
	 * keeps matching its own output. */
	for (int round = 0; round < 64; round++) {
		int done = 0;
		size_t n = c->g->gp->n_node;
		for (size_t i = 0; i < n; i++) {
			Node *nd = c->g->gp->node[i];
			for (size_t k = 0; k < np; k++) {
				if (p[k].stsize > sizeof st)
					return errf(e, "pattern %s: state too large", p[k].name);
				if (p[k].op && !g_is(nd, p[k].op))
					continue;
				memset(st, 0, p[k].stsize);
				if (!p[k].match(c, nd, st))
					continue;
				done++;
				if (!dry && p[k].rewrite(c, nd, st, e))
					return -1;
				break;
			}
		}
		total += done;
		if (dry || !done)
			return total;
		/* Patterns that match on inferred types see the rewritten graph. */
		int inferred = c->inferred;
		if (g_reindex(c, e) || (inferred && g_infer(c, e)))
			return -1;
	}
	return errf(e, "rewriting did not settle after 64 rounds; please report this model");
}

/* ---- dead-node elimination ---- */

/* Marks in the index itself (Val.live, NodeInfo.live): the index is fresh
 * (g_reindex) or kept current by the mutation API, whose producers are
 * what the walk follows. */
static void mark_live(Ctx *c, Graph *g);

static void want(Ctx *c, Val *v, NodeInfo ***stack, size_t *ns, size_t *cap)
{
	if (!v || v->live)
		return;
	v->live = 1;
	NodeInfo *k = v->dk;
	if (!k || k->live)
		return;
	k->live = 1;
	if (*ns == *cap) {
		size_t nc = *cap ? *cap * 2 : 64;
		*stack = arena_grow(c->ia, *stack, *ns * sizeof **stack, nc * sizeof **stack);
		*cap = nc;
	}
	(*stack)[(*ns)++] = k;
}

static void mark_live(Ctx *c, Graph *g)
{
	NodeInfo **stack = NULL;
	size_t ns = 0, cap = 0;
	for (size_t i = 0; i < g->gp->n_output; i++) {
		const char *name = g->gp->output[i]->name;
		want(c, *name ? g_val(g, name) : NULL, &stack, &ns, &cap);
	}
	while (ns) {
		NodeInfo *nk = stack[--ns];
		Node *n = nk->n;
		Graph *ng = nk->g;
		for (size_t j = 0; j < n->n_input; j++)
			want(c, in_val(nk, j), &stack, &ns, &cap);
		size_t k0, nb = g_subs_of(c, ng, n, &k0);
		for (size_t k = k0; k < k0 + nb; k++) {
			Graph *s = ng->sub[k];
			/* Everything a live body reads is live, and the body itself is
			 * pruned against its own outputs. */
			mark_live(c, s);
			for (size_t i = 0; i < s->nouter; i++)
				want(c, g_val(ng, s->outer[i]), &stack, &ns, &cap);
		}
	}
}

static size_t sweep(Ctx *c, Graph *g)
{
	size_t removed = 0, k = 0;
	Onnx__GraphProto *gp = g->gp;
	int ordered = g->norder == gp->n_node; /* then order is rebuilt as nodes go */
	for (size_t i = 0; i < gp->n_node; i++) {
		NodeInfo *x = g_node_at(c, g, i);
		if (x && x->live) {
			if (ordered)
				g->order[k] = x;
			gp->node[k++] = gp->node[i];
		} else {
			removed++;
		}
	}
	gp->n_node = k;
	g->norder = ordered ? k : 0;
	k = 0;
	ordered = g->nival == gp->n_initializer;
	for (size_t i = 0; i < gp->n_initializer; i++) {
		Val *v = g_init_at(g, i);
		if (v && v->live) {
			if (ordered)
				g->ival[k] = v;
			gp->initializer[k++] = gp->initializer[i];
		}
	}
	gp->n_initializer = k;
	g->nival = ordered ? k : 0;
	/* A main-graph input whose initializer went (weights listed as
	 * inputs too: keep_initializers_as_inputs) would be left an input
	 * without a default, which every caller then has to feed. */
	k = 0;
	for (size_t i = 0; i < gp->n_input; i++) {
		Val *v = g->parent ? NULL : map_get(&g->val, gp->input[i]->name);
		if (!v || !v->init || v->live)
			gp->input[k++] = gp->input[i];
	}
	gp->n_input = k;
	for (size_t i = 0; i < g->nsub; i++) {
		NodeInfo *x = info(c, g->sub[i]->owner);
		if (x && x->live)
			removed += sweep(c, g->sub[i]);
	}
	return removed;
}

size_t g_dce(Ctx *c)
{
	mark_live(c, c->g);
	return sweep(c, c->g);
}

int g_refresh(Ctx *c, Err *e)
{
	Graph *g = c->g;
	Onnx__GraphProto *gp = g->gp;
	if (g->nsub) /* outer reads and bodies: not kept current */
		return g_reindex(c, e);
	size_t n = gp->n_node;
	/* Every value a kept node or the graph's boundary touches starts
	 * with no uses, and g_dce's marks go (they are on the kept nodes and
	 * the values they and the graph outputs read): the others are dead,
	 * and nothing live reaches them. */
	for (size_t i = 0; i < n; i++) {
		NodeInfo *k = g_node_at(c, g, i);
		if (!k || k->g != g)
			return g_reindex(c, e);
		Node *nd = k->n;
		for (size_t j = 0; j < nd->n_attribute; j++)
			if (nd->attribute[j]->g || nd->attribute[j]->n_graphs) /* a body came with a clone */
				return g_reindex(c, e);
		k->live = 0;
		for (size_t j = 0; j < nd->n_input; j++) {
			Val *v = in_val(k, j);
			if (v)
				v->nuse = 0, v->live = 0;
		}
		for (size_t j = 0; j < nd->n_output; j++) {
			Val *v = g_output(c, nd, j);
			if (v)
				v->nuse = 0, v->live = 0;
		}
	}
	Onnx__ValueInfoProto **ends[] = { gp->input, gp->output };
	size_t nends[] = { gp->n_input, gp->n_output };
	for (int l = 0; l < 2; l++)
		for (size_t i = 0; i < nends[l]; i++) {
			Val *v = map_get(&g->val, ends[l][i]->name);
			if (v)
				v->nuse = 0, v->live = 0;
		}
	/* In node and input order, as index_graph adds them. */
	for (size_t i = 0; i < n; i++) {
		NodeInfo *k = g_node_at(c, g, i);
		for (size_t j = 0; j < k->n->n_input; j++) {
			Val *v = in_val(k, j);
			if (v)
				add_use(c, v, k, g);
		}
	}
	c->gen++;
	c->inferred = 0;
	return 0;
}

/* ---- topological sort ---- */

int g_toposort(Ctx *c, Graph *g, Err *e)
{
	Onnx__GraphProto *gp = g->gp;
	size_t n = gp->n_node;
	/* The visit state lives in each node's NodeInfo, tagged with this
	 * sort's number, so no state is cleared and no map is built per sort. */
	unsigned onstack = c->sorts += 2, done = onstack + 1;
	/* The DFS stack and its output live for the sort alone: in the index
	 * arena they stayed until the next rebuild (1.5 MiB a sort on a
	 * 400-layer model, through the whole repair). */
	Arena *sa = arena_new();
	NodeInfo **out = arena_alloc_raw(sa, (n ? n : 1) * sizeof *out);
	size_t nout = 0;
	int rc = 0;
	/* Iterative DFS emitting a node after its producers, visiting in the
	 * current order: already-ordered graphs come out unchanged. */
	typedef struct {
		Node *n;
		NodeInfo *k;
		size_t next; /* next input to look at; n_input.. walks body outer refs */
	} Frame;
	Frame *st = arena_alloc_raw(sa, (n + 1) * sizeof *st);
	for (size_t i = 0; i < n; i++) {
		Node *root = gp->node[i];
		NodeInfo *rk = g_node_at(c, g, i);
		if (!rk) {
			place(c, root, g, i);
			rk = info(c, root);
		}
		if (rk->sort == onstack || rk->sort == done)
			continue;
		size_t sp = 0;
		st[sp++] = (Frame){ root, rk, 0 };
		rk->sort = onstack;
		while (sp) {
			Frame *f = &st[sp - 1];
			const char *dep = NULL;
			Val *v = NULL;
			/* Inputs first, then the outer values read by the node's bodies. */
			size_t nin = f->n->n_input, k = f->next++;
			if (k < nin) {
				dep = f->n->input[k];
				v = in_val(f->k, k);
			} else {
				size_t off = k - nin, seen = 0, s0, ns = g_subs_of(c, g, f->n, &s0);
				for (size_t s = s0; s < s0 + ns && !dep; s++) {
					if (off < seen + g->sub[s]->nouter)
						dep = g->sub[s]->outer[off - seen];
					seen += g->sub[s]->nouter;
				}
				if (!dep) {
					f->k->sort = done;
					out[nout++] = f->k;
					sp--;
					continue;
				}
				v = *dep ? map_get(&g->val, dep) : NULL;
			}
			NodeInfo *dk = v ? v->dk : NULL;
			if (!dk || dk->g != g || dk->sort == done)
				continue;
			if (dk->sort == onstack) {
				rc = errf(e, "graph has a cycle through node '%s' (value '%s'); the model is malformed",
					  v->def->name ? v->def->name : "", dep);
				goto end;
			}
			dk->sort = onstack;
			st[sp++] = (Frame){ v->def, dk, 0 };
		}
	}
	for (size_t i = 0; i < n; i++) {
		gp->node[i] = out[i]->n;
		out[i]->pos = i;
	}
	if (g->caporder < n) {
		g->order = arena_alloc_raw(c->ia, n * sizeof *g->order);
		g->caporder = n;
	}
	if (n)
		memcpy(g->order, out, n * sizeof *out);
	g->norder = n;
	g->sorted = c->edits + 1;
end:
	arena_free(sa);
	return rc;
}

int g_is_sorted(const Ctx *c, const Graph *g)
{
	return g->sorted == c->edits + 1;
}
