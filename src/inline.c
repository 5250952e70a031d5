/* Model-local functions inlined.
 *
 * torch.onnx.export(export_modules_as_functions=...) keeps a module's
 * nodes in a FunctionProto and calls it from the graph by a node of its
 * own domain. No analysis sees through such a call: a damaged MoE kept as
 * a function was diagnosed "no MoE router found", exit 0. So calls are
 * replaced by the functions' nodes before the model is indexed, as ONNX's
 * own inliner does: every name of the body renamed (formals to the call's
 * actuals, the rest fresh under the caller's module path), attribute
 * references resolved from the call. What cannot be inlined as it means
 * (an opset the model imports at another version, a default attribute
 * this schema cannot read, two functions of one name) stops the run. */
#include "inline.h"

#include <string.h>

#include "map.h"
#include "model.h"

enum { MAX_DEPTH = 64 };

struct InlineLog {
	Onnx__GraphProto *g;
	Onnx__NodeProto **node;
	size_t n_node;
};

typedef struct {
	Onnx__ModelProto *m;
	Arena *a;    /* the model's: what is made goes into it */
	Map names;   /* every value and node name in the model, fresh ones included */
	Inlined *u;
	size_t caplog;
	Err *e;
} In;

/* One call being inlined: formal and internal names to the new ones. */
typedef struct {
	In *s;
	const Onnx__NodeProto *call;
	const Onnx__FunctionProto *f;
	const char *prefix;
	Map ren;
} Call;

static int same_domain(const char *x, const char *y)
{
	return model_default_domain(x) ? model_default_domain(y) : y && strcmp(x, y) == 0;
}

static void note(In *s, const char *name)
{
	if (name && *name)
		map_put(&s->names, name, (void *)name);
}

static void note_graph(In *s, const Onnx__GraphProto *g)
{
	for (size_t i = 0; i < g->n_input; i++)
		note(s, g->input[i]->name);
	for (size_t i = 0; i < g->n_initializer; i++)
		note(s, g->initializer[i]->name);
	for (size_t i = 0; i < g->n_node; i++) {
		const Onnx__NodeProto *n = g->node[i];
		note(s, n->name);
		for (size_t j = 0; j < n->n_output; j++)
			note(s, n->output[j]);
		for (size_t j = 0; j < n->n_attribute; j++) {
			const Onnx__AttributeProto *at = n->attribute[j];
			if (at->g)
				note_graph(s, at->g);
			for (size_t k = 0; k < at->n_graphs; k++)
				note_graph(s, at->graphs[k]);
		}
	}
}

/* prefix + base, or with _1, _2, ... after it, unused in the model. */
static const char *fresh(In *s, const char *prefix, const char *base)
{
	size_t lp = strlen(prefix);
	if (lp && prefix[lp - 1] == '/' && base[0] == '/')
		base++;
	const char *name = arena_printf(s->a, "%s%s", prefix, base);
	for (size_t k = 1; map_get(&s->names, name); k++)
		name = arena_printf(s->a, "%s%s_%zu", prefix, base, k);
	note(s, name);
	return name;
}

static const char *rename_val(Call *k, const char *name)
{
	if (!name || !*name)
		return "";
	void **v = map_ref(&k->ren, name);
	if (!*v)
		*v = (void *)fresh(k->s, k->prefix, name);
	return *v;
}

/* The local function n calls into *f, or NULL: n is an operator. */
static int callee(In *s, const Onnx__NodeProto *n, const Onnx__FunctionProto **f)
{
	*f = NULL;
	for (size_t i = 0; i < s->m->n_functions; i++) {
		const Onnx__FunctionProto *g = s->m->functions[i];
		if (!g->name || strcmp(g->name, n->op_type) || !same_domain(g->domain, n->domain))
			continue;
		if (*f)
			return errf(s->e, "node '%s' calls '%s' of domain '%s', which the model defines twice (overloads this schema cannot tell apart)",
				    n->name ? n->name : "", n->op_type, n->domain ? n->domain : "");
		*f = g;
	}
	return 0;
}

/* f's opsets join the model's: one version a domain, or its nodes,
 * inlined, would mean something else than in the function. */
static int merge_opsets(In *s, const Onnx__FunctionProto *f)
{
	Onnx__ModelProto *m = s->m;
	for (size_t j = 0; j < f->n_opset_import; j++) {
		Onnx__OperatorSetIdProto *fo = f->opset_import[j], *mo = NULL;
		for (size_t k = 0; k < m->n_opset_import && !mo; k++)
			if (same_domain(m->opset_import[k]->domain, fo->domain))
				mo = m->opset_import[k];
		if (mo && mo->version != fo->version)
			return errf(s->e, "function '%s' uses opset %lld of domain '%s', the model opset %lld: inlined, its nodes would mean something else",
				    f->name, (long long)fo->version, fo->domain ? fo->domain : "", (long long)mo->version);
		if (mo)
			continue;
		m->opset_import = arena_grow(s->a, m->opset_import, m->n_opset_import * sizeof *m->opset_import,
					     (m->n_opset_import + 1) * sizeof *m->opset_import);
		m->opset_import[m->n_opset_import++] = fo;
	}
	return 0;
}

static Onnx__GraphProto *clone_graph(Call *k, const Onnx__GraphProto *g);

static Onnx__ValueInfoProto **clone_vi(Call *k, Onnx__ValueInfoProto *const *v, size_t n)
{
	Onnx__ValueInfoProto **r = arena_alloc(k->s->a, (n ? n : 1) * sizeof *r);
	for (size_t i = 0; i < n; i++) {
		r[i] = arena_dup(k->s->a, v[i], sizeof *v[i]);
		r[i]->name = (char *)rename_val(k, v[i]->name);
	}
	return r;
}

/* at of a body node, as the call makes it: a reference resolved (NULL when
 * the call leaves it unset: the attribute is absent), a subgraph renamed. */
static int clone_attr(Call *k, const Onnx__AttributeProto *at, Onnx__AttributeProto **out, Err *e)
{
	Arena *a = k->s->a;
	*out = NULL;
	if (at->ref_attr_name && *at->ref_attr_name) {
		for (size_t i = 0; i < k->call->n_attribute; i++) {
			const Onnx__AttributeProto *c = k->call->attribute[i];
			if (!c->name || strcmp(c->name, at->ref_attr_name))
				continue;
			if (at->has_type && c->has_type && at->type != c->type)
				return errf(e, "node '%s' gives attribute '%s' of function '%s' another type than its body reads",
					    k->call->name ? k->call->name : "", c->name, k->f->name);
			*out = arena_dup(a, c, sizeof *c);
			(*out)->name = at->name;
			return 0;
		}
		/* Defaults (FunctionProto.attribute_proto) came after the ONNX
		 * schema this build reads: present, they are unknown fields. */
		if (k->f->base.n_unknown_fields)
			return errf(e, "node '%s' leaves attribute '%s' of function '%s' to its default, which this build's ONNX schema cannot read; set it on the call, or inline the function with onnx's inliner",
				    k->call->name ? k->call->name : "", at->ref_attr_name, k->f->name);
		return 0;
	}
	if (!at->g && !at->n_graphs) {
		*out = (Onnx__AttributeProto *)at;
		return 0;
	}
	*out = arena_dup(a, at, sizeof *at);
	if (at->g && !((*out)->g = clone_graph(k, at->g)))
		return -1;
	if (at->n_graphs) {
		(*out)->graphs = arena_alloc(a, at->n_graphs * sizeof *(*out)->graphs);
		for (size_t i = 0; i < at->n_graphs; i++)
			if (!((*out)->graphs[i] = clone_graph(k, at->graphs[i])))
				return -1;
	}
	return 0;
}

static Onnx__NodeProto *clone_node(Call *k, const Onnx__NodeProto *b)
{
	Arena *a = k->s->a;
	Onnx__NodeProto *n = arena_dup(a, b, sizeof *b);
	n->name = (char *)fresh(k->s, k->prefix, b->name && *b->name ? b->name : b->op_type);
	n->input = arena_alloc(a, (b->n_input ? b->n_input : 1) * sizeof *n->input);
	for (size_t i = 0; i < b->n_input; i++)
		n->input[i] = (char *)rename_val(k, b->input[i]);
	n->output = arena_alloc(a, (b->n_output ? b->n_output : 1) * sizeof *n->output);
	for (size_t i = 0; i < b->n_output; i++)
		n->output[i] = (char *)rename_val(k, b->output[i]);
	n->attribute = arena_alloc(a, (b->n_attribute ? b->n_attribute : 1) * sizeof *n->attribute);
	n->n_attribute = 0;
	for (size_t i = 0; i < b->n_attribute; i++) {
		Onnx__AttributeProto *at;
		if (clone_attr(k, b->attribute[i], &at, k->s->e))
			return NULL;
		if (at)
			n->attribute[n->n_attribute++] = at;
	}
	return n;
}

/* A subgraph of a body node: its names are the function's too. */
static Onnx__GraphProto *clone_graph(Call *k, const Onnx__GraphProto *g)
{
	Arena *a = k->s->a;
	if (g->n_sparse_initializer) {
		errf(k->s->e, "function '%s' holds a subgraph with sparse initializers, which cannot be inlined here", k->f->name);
		return NULL;
	}
	Onnx__GraphProto *r = arena_dup(a, g, sizeof *g);
	r->input = clone_vi(k, g->input, g->n_input);
	r->output = clone_vi(k, g->output, g->n_output);
	r->value_info = clone_vi(k, g->value_info, g->n_value_info);
	r->n_quantization_annotation = 0;
	r->initializer = arena_alloc(a, (g->n_initializer ? g->n_initializer : 1) * sizeof *r->initializer);
	for (size_t i = 0; i < g->n_initializer; i++) {
		r->initializer[i] = arena_dup(a, g->initializer[i], sizeof *g->initializer[i]);
		r->initializer[i]->name = (char *)rename_val(k, g->initializer[i]->name);
	}
	r->node = arena_alloc(a, (g->n_node ? g->n_node : 1) * sizeof *r->node);
	for (size_t i = 0; i < g->n_node; i++)
		if (!(r->node[i] = clone_node(k, g->node[i])))
			return NULL;
	return r;
}

/* Nodes and their count, grown as calls are replaced. */
typedef struct {
	Onnx__NodeProto **v;
	size_t n, cap;
} Nodes;

static void push(In *s, Nodes *o, Onnx__NodeProto *n)
{
	if (o->n == o->cap) {
		size_t cap = o->cap ? o->cap * 2 : 16;
		o->v = arena_grow(s->a, o->v, o->n * sizeof *o->v, cap * sizeof *o->v);
		o->cap = cap;
	}
	o->v[o->n++] = n;
}

static int inline_nodes(In *s, Onnx__NodeProto *const *v, size_t n, Nodes *o, int depth);

/* Where a call's nodes are named: the module path of the calling node,
 * whose own name ends in its op type, as torch names a traced node
 * ("/model/model.1/MoE" calls MoE). */
static const char *prefix_of(In *s, const Onnx__NodeProto *call)
{
	const char *nm = call->name ? call->name : "";
	size_t ln = strlen(nm), lo = strlen(call->op_type);
	if (ln > lo && nm[ln - lo - 1] == '/' && strcmp(nm + ln - lo, call->op_type) == 0)
		return arena_printf(s->a, "%.*s", (int)(ln - lo), nm);
	return *nm ? arena_printf(s->a, "%s/", nm) : "";
}

static int inline_call(In *s, const Onnx__NodeProto *call, const Onnx__FunctionProto *f, Nodes *o, int depth)
{
	Err *e = s->e;
	const char *cn = call->name ? call->name : "";
	if (depth >= MAX_DEPTH)
		return errf(e, "node '%s': calls of local functions nest more than %d deep (a function that calls itself?)", cn,
			    MAX_DEPTH);
	if (call->n_input > f->n_input || call->n_output > f->n_output)
		return errf(e, "node '%s' calls function '%s' with %zu inputs and %zu outputs, but it has %zu and %zu", cn,
			    f->name, call->n_input, call->n_output, f->n_input, f->n_output);
	if (merge_opsets(s, f))
		return -1;
	Arena *tmp = arena_new();
	Call k = { .s = s, .call = call, .f = f, .prefix = prefix_of(s, call) };
	map_init(&k.ren, tmp, f->n_node * 2 + f->n_input + f->n_output);
	for (size_t i = 0; i < f->n_input; i++)
		map_put(&k.ren, f->input[i], i < call->n_input ? call->input[i] : "");
	/* An output the call leaves unnamed may still feed the body's own
	 * nodes: it gets a fresh name, not "". An output that is an input
	 * (a function passing a value through) is copied by an Identity. */
	Onnx__NodeProto *pass = NULL;
	for (size_t i = 0; i < f->n_output; i++) {
		const char *actual = i < call->n_output && *call->output[i] ? call->output[i] : NULL;
		const char *in = map_get(&k.ren, f->output[i]);
		if (in && actual) {
			pass = arena_alloc(s->a, sizeof *pass);
			onnx__node_proto__init(pass);
			pass->op_type = "Identity";
			pass->name = (char *)fresh(s, k.prefix, "Identity");
			pass->n_input = pass->n_output = 1;
			pass->input = arena_alloc(s->a, sizeof *pass->input);
			pass->output = arena_alloc(s->a, sizeof *pass->output);
			pass->input[0] = (char *)in;
			pass->output[0] = (char *)actual;
			push(s, o, pass);
		} else if (!in) {
			map_put(&k.ren, f->output[i], (void *)(actual ? actual : fresh(s, k.prefix, f->output[i])));
		}
	}
	Onnx__NodeProto **body = arena_alloc(tmp, (f->n_node ? f->n_node : 1) * sizeof *body);
	int rc = 0;
	for (size_t i = 0; i < f->n_node && !rc; i++)
		rc = !(body[i] = clone_node(&k, f->node[i]));
	if (!rc)
		rc = inline_nodes(s, body, f->n_node, o, depth + 1);
	arena_free(tmp);
	if (rc) /* said once, at the outermost call */
		return depth ? -1 : errwrap(e, "inlining function '%s' at node '%s'", f->name, cn);
	s->u->n++;
	return 0;
}

static int inline_graph(In *s, Onnx__GraphProto *g, int depth)
{
	Nodes o = { 0 };
	if (inline_nodes(s, g->node, g->n_node, &o, depth))
		return -1;
	Inlined *u = s->u;
	if (u->nlog == s->caplog) {
		size_t cap = s->caplog ? s->caplog * 2 : 8;
		u->log = arena_grow(s->a, u->log, u->nlog * sizeof *u->log, cap * sizeof *u->log);
		s->caplog = cap;
	}
	u->log[u->nlog++] = (struct InlineLog){ g, g->node, g->n_node };
	g->node = o.v;
	g->n_node = o.n;
	return 0;
}

static int inline_nodes(In *s, Onnx__NodeProto *const *v, size_t n, Nodes *o, int depth)
{
	for (size_t i = 0; i < n; i++) {
		Onnx__NodeProto *x = v[i];
		const Onnx__FunctionProto *f;
		if (callee(s, x, &f))
			return -1;
		if (f) {
			if (inline_call(s, x, f, o, depth))
				return -1;
			continue;
		}
		for (size_t j = 0; j < x->n_attribute; j++) {
			Onnx__AttributeProto *at = x->attribute[j];
			if (at->g && inline_graph(s, at->g, depth))
				return -1;
			for (size_t k = 0; k < at->n_graphs; k++)
				if (inline_graph(s, at->graphs[k], depth))
					return -1;
		}
		push(s, o, x);
	}
	return 0;
}

static int uses_domain(const Onnx__GraphProto *g, const char *d)
{
	for (size_t i = 0; i < g->n_node; i++) {
		const Onnx__NodeProto *n = g->node[i];
		if (same_domain(n->domain, d))
			return 1;
		for (size_t j = 0; j < n->n_attribute; j++) {
			const Onnx__AttributeProto *at = n->attribute[j];
			if (at->g && uses_domain(at->g, d))
				return 1;
			for (size_t k = 0; k < at->n_graphs; k++)
				if (uses_domain(at->graphs[k], d))
					return 1;
		}
	}
	return 0;
}

int model_inline(Onnx__ModelProto *m, Arena *a, Inlined *u, Err *e)
{
	*u = (Inlined){ .opset_import = m->opset_import, .n_opset_import = m->n_opset_import,
			.functions = m->functions, .n_functions = m->n_functions };
	if (!m->n_functions || !m->graph)
		return 0;
	In s = { .m = m, .a = a, .u = u, .e = e };
	Arena *tmp = arena_new();
	map_init(&s.names, tmp, m->graph->n_node * 2 + m->graph->n_initializer + m->graph->n_input);
	note_graph(&s, m->graph);
	/* The model's opsets are grown into a copy: the original is kept. */
	m->opset_import = arena_dup(a, m->opset_import, (m->n_opset_import + 1) * sizeof *m->opset_import);
	int rc = inline_graph(&s, m->graph, 0);
	arena_free(tmp);
	if (rc || !u->n) {
		model_uninline(m, u);
		u->n = 0;
		return rc ? -1 : 0;
	}
	/* Every call is gone: the functions, and the domains only their
	 * calls used, go too. */
	size_t keep = 0;
	for (size_t i = 0; i < m->n_opset_import; i++) {
		const char *d = m->opset_import[i]->domain;
		int fdom = 0;
		for (size_t j = 0; j < m->n_functions && !fdom; j++)
			fdom = !model_default_domain(d) && same_domain(m->functions[j]->domain, d);
		if (!fdom || uses_domain(m->graph, d))
			m->opset_import[keep++] = m->opset_import[i];
	}
	m->n_opset_import = keep;
	m->functions = NULL;
	m->n_functions = 0;
	return 0;
}

void model_uninline(Onnx__ModelProto *m, const Inlined *u)
{
	for (size_t i = u->nlog; i-- > 0;) {
		u->log[i].g->node = u->log[i].node;
		u->log[i].g->n_node = u->log[i].n_node;
	}
	m->opset_import = u->opset_import;
	m->n_opset_import = u->n_opset_import;
	m->functions = u->functions;
	m->n_functions = u->n_functions;
}
