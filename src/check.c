/* The structural checker, run on the input before any pass and on the
 * output before it is written. */
#include <stdio.h>
#include <string.h>

#include "graph.h"

static int has_type(const Onnx__ValueInfoProto *vi)
{
	return vi->type && (vi->type->value_case != ONNX__TYPE_PROTO__VALUE__NOT_SET);
}

static int domain_known(const Ctx *c, const char *d)
{
	if (!d || !*d || strcmp(d, "ai.onnx") == 0)
		d = "";
	for (size_t i = 0; i < c->m->n_opset_import; i++) {
		const char *od = c->m->opset_import[i]->domain;
		if (!od || strcmp(od, "ai.onnx") == 0)
			od = "";
		if (strcmp(od, d) == 0)
			return 1;
	}
	for (size_t i = 0; i < c->m->n_functions; i++)
		if (c->m->functions[i]->domain && strcmp(c->m->functions[i]->domain, d) == 0)
			return 1;
	return 0;
}

/* Inputs and outputs of the default-domain ops the passes read, as every
 * opset allows them (counting optional ones, given or ""): the passes then
 * index node->input[] and ->output[] without checking each time. */
static const struct {
	const char *op;
	unsigned char inmin, inmax, outmin, outmax;
} ARITY[] = {
	{ "Add", 2, 2, 1, 1 }, { "Sub", 2, 2, 1, 1 }, { "Mul", 2, 2, 1, 1 }, { "Div", 2, 2, 1, 1 },
	{ "Pow", 2, 2, 1, 1 }, { "Equal", 2, 2, 1, 1 }, { "MatMul", 2, 2, 1, 1 },
	{ "Cast", 1, 1, 1, 1 }, { "Identity", 1, 1, 1, 1 }, { "Relu", 1, 1, 1, 1 },
	{ "Sigmoid", 1, 1, 1, 1 }, { "Softmax", 1, 1, 1, 1 }, { "LogSoftmax", 1, 1, 1, 1 },
	{ "Sqrt", 1, 1, 1, 1 }, { "Exp", 1, 1, 1, 1 }, { "Neg", 1, 1, 1, 1 }, { "Abs", 1, 1, 1, 1 },
	{ "Reciprocal", 1, 1, 1, 1 }, { "Clip", 1, 3, 1, 1 }, { "Max", 1, 255, 1, 1 },
	{ "Min", 1, 255, 1, 1 }, { "Where", 3, 3, 1, 1 }, { "Gather", 2, 2, 1, 1 },
	{ "GatherElements", 2, 2, 1, 1 }, { "ScatterElements", 3, 3, 1, 1 },
	{ "ScatterND", 3, 3, 1, 1 }, { "TopK", 1, 2, 2, 2 }, { "Reshape", 1, 2, 1, 1 },
	{ "Expand", 2, 2, 1, 1 }, { "Shape", 1, 1, 1, 1 }, { "Constant", 0, 0, 1, 1 },
	{ "ConstantOfShape", 1, 1, 1, 1 }, { "Unsqueeze", 1, 2, 1, 1 }, { "Squeeze", 1, 2, 1, 1 },
	{ "Concat", 1, 255, 1, 1 }, { "NonZero", 1, 1, 1, 1 }, { "Transpose", 1, 1, 1, 1 },
	{ "Flatten", 1, 1, 1, 1 }, { "If", 1, 1, 1, 255 }, { "Conv", 2, 3, 1, 1 },
};

static const char *range(char *buf, size_t n, int lo, int hi)
{
	if (lo == hi)
		snprintf(buf, n, "%d", lo);
	else if (hi == 255)
		snprintf(buf, n, "at least %d", lo);
	else
		snprintf(buf, n, "%d to %d", lo, hi);
	return buf;
}

static int check_arity(const Node *n, const char *nn, Err *e)
{
	if (n->domain && *n->domain && strcmp(n->domain, "ai.onnx"))
		return 0;
	char r[32];
	for (size_t i = 0; i < sizeof ARITY / sizeof *ARITY; i++) {
		if (strcmp(n->op_type, ARITY[i].op))
			continue;
		if (n->n_input < ARITY[i].inmin || n->n_input > ARITY[i].inmax)
			return errf(e, "node '%s' (%s) has %zu input%s; %s takes %s", nn, n->op_type, n->n_input,
				    n->n_input == 1 ? "" : "s", n->op_type, range(r, sizeof r, ARITY[i].inmin, ARITY[i].inmax));
		if (n->n_output < ARITY[i].outmin || n->n_output > ARITY[i].outmax)
			return errf(e, "node '%s' (%s) has %zu output%s; %s gives %s", nn, n->op_type, n->n_output,
				    n->n_output == 1 ? "" : "s", n->op_type, range(r, sizeof r, ARITY[i].outmin, ARITY[i].outmax));
		return 0;
	}
	return 0;
}

static int check_graph(Ctx *c, Graph *g, int depth, Err *e)
{
	if (depth > 64)
		return errf(e, "subgraphs nested more than 64 deep; refusing the model");
	Onnx__GraphProto *gp = g->gp;
	const char *gname = gp->name ? gp->name : "";
	if (!g->parent) {
		for (size_t i = 0; i < gp->n_input; i++)
			if (!has_type(gp->input[i]))
				return errf(e, "graph input '%s' has no type", gp->input[i]->name);
		for (size_t i = 0; i < gp->n_output; i++)
			if (!has_type(gp->output[i]))
				return errf(e, "graph output '%s' has no type", gp->output[i]->name);
	}
	/* Values available so far in this scope: inputs, initializers, then
	 * node outputs in order; enclosing scopes are looked up through g. */
	Map here;
	map_init(&here, c->a, gp->n_node * 2 + gp->n_initializer + gp->n_input);
	for (size_t i = 0; i < gp->n_input; i++)
		map_put(&here, gp->input[i]->name, (void *)1);
	for (size_t i = 0; i < gp->n_initializer; i++)
		map_put(&here, gp->initializer[i]->name, (void *)1);
	for (size_t i = 0; i < gp->n_node; i++) {
		Node *n = gp->node[i];
		const char *nn = n->name && *n->name ? n->name : n->op_type;
		if (!domain_known(c, n->domain))
			return errf(e, "node '%s' (%s) uses domain '%s', which opset_import does not declare",
				    nn, n->op_type, n->domain);
		if (check_arity(n, nn, e))
			return -1;
		for (size_t j = 0; j < n->n_input; j++) {
			const char *in = n->input[j];
			if (!*in || map_get(&here, in))
				continue;
			int outer = 0;
			for (Graph *h = g->parent; h && !outer; h = h->parent)
				outer = map_get(&h->val, in) != NULL;
			if (outer)
				continue;
			Val *v = map_get(&g->val, in);
			if (v && v->def)
				return errf(e, "node '%s' reads '%s' before node '%s' produces it (not in topological order)",
					    nn, in, v->def->name ? v->def->name : v->def->op_type);
			return errf(e, "node '%s' reads '%s', which nothing defines%s%s", nn, in,
				    g->parent ? " in subgraph " : "", g->parent ? gname : "");
		}
		for (size_t k = 0; k < g->nsub; k++)
			if (g->sub[k]->owner == n && check_graph(c, g->sub[k], depth + 1, e))
				return -1;
		for (size_t j = 0; j < n->n_output; j++) {
			if (!*n->output[j])
				continue;
			if (map_get(&here, n->output[j]))
				return errf(e, "value '%s' is produced twice (second time by node '%s')",
					    n->output[j], nn);
			map_put(&here, n->output[j], (void *)1);
		}
	}
	for (size_t i = 0; i < gp->n_output; i++) {
		const char *o = gp->output[i]->name;
		if (map_get(&here, o) || (g->parent && g_val(g->parent, o)))
			continue;
		return errf(e, "graph output '%s' is not produced by any node", o);
	}
	return 0;
}

int g_check(Ctx *c, Err *e)
{
	if (c->m->n_opset_import == 0)
		return errf(e, "the model declares no opset_import");
	return check_graph(c, c->g, 0, e);
}

