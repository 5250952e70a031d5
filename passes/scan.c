/* Diagnosis without a YAML file: a pre-deploy hook wants to know whether a
 * model is damaged before anyone writes experts.yaml. A router is a TopK
 * whose indices are compared with constant expert ids (traced dispatch) or
 * gate If nodes (scripted); each such TopK is one damaged layer. */
#include <stdlib.h>
#include <string.h>

#include "moe.h"

static int cmp_int(const void *a, const void *b)
{
	int x = *(const int *)a, y = *(const int *)b;
	return x < y ? -1 : x > y;
}

/* If nodes whose condition derives from an Equal on the indices. */
static int gated_ifs(Ctx *c, const char *indices)
{
	Map reach;
	map_init(&reach, c->a, 64);
	map_put(&reach, indices, (void *)1);
	int n = 0;
	Onnx__GraphProto *gp = c->g->gp;
	for (size_t i = 0; i < gp->n_node; i++) {
		Node *m = gp->node[i];
		int hit = 0;
		for (size_t j = 0; j < m->n_input && !hit; j++)
			hit = map_get(&reach, m->input[j]) != NULL;
		if (!hit || g_is(m, "Shape"))
			continue;
		if (g_is(m, "If"))
			n++;
		else
			for (size_t j = 0; j < m->n_output; j++)
				map_put(&reach, m->output[j], (void *)1);
	}
	return n;
}

/* The layer a router belongs to, from the TopK's name: "/model/model.1/router/TopK"
 * -> "/model/model.1", so counts under it cover the experts too. */
static const char *layer_of(Ctx *c, const Node *t)
{
	const char *name = t->name && *t->name ? t->name : t->output[1];
	const char *end = strrchr(name, '/');
	if (!end || end == name)
		return name;
	size_t n = (size_t)(end - name);
	static const char *routers[] = { "/router", "/gate", "/gating", NULL };
	for (const char **r = routers; *r; r++) {
		size_t k = strlen(*r);
		if (n > k && strncmp(name + n - k, *r, k) == 0) {
			n -= k;
			break;
		}
	}
	return arena_printf(c->a, "%.*s", (int)n, name);
}

int moe_scan(Ctx *c, Report *r, Err *e)
{
	Onnx__GraphProto *gp = c->g->gp;
	for (size_t i = 0; i < gp->n_node; i++) {
		Node *t = gp->node[i];
		if (!g_is(t, "TopK") || t->n_output < 2)
			continue;
		int ids[1024], n = moe_compared_ids(c, c->g, t->output[1], ids, 1024);
		if (!n)
			continue;
		qsort(ids, (size_t)n, sizeof *ids, cmp_int);
		int k = 0;
		for (int j = 0; j < n; j++)
			if (!k || ids[j] != ids[k - 1])
				ids[k++] = ids[j];
		r->layer = arena_grow(c->a, r->layer, r->nlayer * sizeof *r->layer,
				      (r->nlayer + 1) * sizeof *r->layer);
		LayerReport *lr = &r->layer[r->nlayer++];
		memset(lr, 0, sizeof *lr);
		lr->scope = layer_of(c, t);
		lr->top_k = 0;
		lr->present = arena_dup(c->a, ids, (size_t)k * sizeof *ids);
		lr->npresent = k;
		lr->ifs = gated_ifs(c, t->output[1]);
		lr->nodes_before = lr->nodes_after = g_count(c, NULL, lr->scope);
		lr->convs_before = lr->convs_after = g_count(c, "Conv", lr->scope);
		r->damaged = 1;
	}
	int f = fold_shape_ifs(c, 1, e);
	if (f < 0)
		return -1;
	r->ifs_folded = f;
	if (f)
		r->damaged = 1;
	return 0;
}
