/* The pipeline in one place: index -> per-layer detect and densify ->
 * shape-guard folding -> dead-node elimination, sort -> check. */
#include "pipeline.h"

#include <string.h>

#include "graph.h"
#include "moe.h"

/* Weight sources are opened on first need and shared by layers naming the
 * same file. */
typedef struct {
	const char *path;
	WSrc *w;
} Open;

static WSrc *source(Open *o, size_t *no, const SpecLayer *s, Arena *a, Err *e)
{
	if (!s->weights)
		return NULL;
	for (size_t i = 0; i < *no; i++)
		if (strcmp(o[i].path, s->weights) == 0)
			return o[i].w;
	WSrc *w = wsrc_open(s->weights, s->checkpoint_key, a, e);
	if (w)
		o[(*no)++] = (Open){ s->weights, w };
	return w;
}

static int ext_data(void *md, const Tensor *t, const void **p, size_t *n, Err *e)
{
	return model_tensor_data(md, t, p, n, e);
}

/* Node and Conv counts of a layer after the repair, in one walk. */
static void count_walk(const Onnx__GraphProto *gp, const char *scope, int *nodes, int *convs)
{
	for (size_t i = 0; i < gp->n_node; i++) {
		const Node *n = gp->node[i];
		if (n->name && path_match(n->name, scope)) {
			(*nodes)++;
			*convs += g_is(n, "Conv");
		}
		for (size_t j = 0; j < n->n_attribute; j++) {
			if (n->attribute[j]->g)
				count_walk(n->attribute[j]->g, scope, nodes, convs);
			for (size_t k = 0; k < n->attribute[j]->n_graphs; k++)
				count_walk(n->attribute[j]->graphs[k], scope, nodes, convs);
		}
	}
}

static void counts_after(Ctx *c, LayerReport *lr)
{
	lr->nodes_after = lr->convs_after = 0;
	count_walk(c->m->graph, lr->scope, &lr->nodes_after, &lr->convs_after);
}

static int tidy(Ctx *c, Err *e)
{
	if (g_reindex(c, e))
		return -1;
	g_dce(c);
	if (g_reindex(c, e) || g_toposort(c, c->g, e))
		return -1;
	return g_reindex(c, e);
}

/* Sorts every graph (an unsorted but acyclic input is fixed, a cycle is
 * refused). Nesting depth is bounded by model_load's wire scan. */
static int sort_all(Ctx *c, Graph *g, Err *e)
{
	if (g_toposort(c, g, e))
		return -1;
	for (size_t i = 0; i < g->nsub; i++)
		if (sort_all(c, g->sub[i], e))
			return -1;
	return 0;
}

int pipeline_run(Model *md, const Spec *spec, const Opts *o, Report *r, Err *e)
{
	Ctx c;
	memset(r, 0, sizeof *r);
	/* The passes walk producers and consumers assuming a well-formed graph:
	 * cycles, values defined twice or never are refused before any runs. */
	if (g_init(&c, md->m, md->a, e) || sort_all(&c, c.g, e) || g_check(&c, e)) {
		g_fini(&c);
		return -1; /* main prefixes the file name */
	}
	c.ext = ext_data;
	c.ext_ud = md;
	if (!spec) {
		int rc = moe_scan(&c, r, e);
		g_fini(&c);
		return rc;
	}

	Open *open = arena_alloc(md->a, (spec->nlayer + 1) * sizeof *open);
	size_t nopen = 0;
	int ret = -1;
	r->layer = arena_alloc(md->a, (spec->nlayer ? spec->nlayer : 1) * sizeof *r->layer);
	/* Every layer is detected on the model as exported, then every layer
	 * repaired, then the model tidied and reindexed once: the index stays
	 * valid through the repairs (they keep the names other layers read,
	 * and no layer's detection depends on another's repair), and a
	 * reindex or sweep per layer would make the repair quadratic in
	 * layers. */
	Layer *Ls = arena_alloc(md->a, (spec->nlayer ? spec->nlayer : 1) * sizeof *Ls);
	int *fix = arena_alloc(md->a, (spec->nlayer ? spec->nlayer : 1) * sizeof *fix);
	for (size_t i = 0; i < spec->nlayer; i++) {
		const SpecLayer *s = &spec->layer[i];
		LayerReport *lr = &r->layer[r->nlayer++];
		lr->scope = s->scope;
		lr->experts = s->experts;
		lr->top_k = s->top_k;
		if (o->progress)
			progress_step(o->progress, "finding experts, layer", i + 1, spec->nlayer, NULL);
		Layer *L = &Ls[i];
		if (moe_detect(&c, s, L, e))
			goto out;
		/* What detection collected: a count of its own would walk the
		 * whole model once more per layer. */
		lr->nodes_before = L->nodes;
		lr->convs_before = L->convs;
		lr->present = arena_alloc(md->a, (L->nex + 1) * sizeof *lr->present);
		for (size_t k = 0; k < L->nex; k++)
			lr->present[lr->npresent++] = L->ex[k].id;
		lr->ifs = L->nif;
		if (L->dense) {
			lr->nodes_after = lr->nodes_before;
			lr->convs_after = lr->convs_before;
			continue;
		}
		r->damaged = 1;
		if (o->check_only) {
			/* What a repair would insert. */
			lr->inserted = arena_alloc(md->a, (size_t)s->experts * sizeof *lr->inserted);
			for (int id = 0, k = 0; id < s->experts; id++) {
				if (k < lr->npresent && lr->present[k] == id)
					k++;
				else
					lr->inserted[lr->ninserted++] = id;
			}
			continue;
		}
		fix[i] = 1;
	}
	for (size_t i = 0; i < spec->nlayer; i++) {
		if (!fix[i])
			continue;
		const SpecLayer *s = &spec->layer[i];
		if (o->progress)
			progress_step(o->progress, "rebuilding experts, layer", i + 1, spec->nlayer, NULL);
		WSrc *w = NULL;
		if ((int)Ls[i].nex < s->experts && !(w = source(open, &nopen, s, md->a, e)) && s->weights)
			goto out;
		if (moe_densify(&c, &Ls[i], w, &r->layer[i], e))
			goto out;
		/* Checkpoint and external data pages read for this layer leave
		 * the process: resident memory stays about the output's size. */
		wsrc_drop(w);
		model_drop(md);
		r->changed = 1;
	}
	if (r->changed && tidy(&c, e))
		goto out;
	int f = fold_shape_ifs(&c, o->check_only, e);
	if (f < 0)
		goto out;
	r->ifs_folded = f;
	if (f) {
		r->damaged = 1;
		if (!o->check_only) {
			r->changed = 1;
			if (tidy(&c, e))
				goto out;
		}
	}
	if (r->changed) {
		for (size_t i = 0; i < r->nlayer; i++)
			counts_after(&c, &r->layer[i]);
		if (!o->no_check && g_check(&c, e))
			goto out;
	}
	ret = 0;
out:
	for (size_t i = 0; i < nopen; i++)
		wsrc_close(open[i].w);
	g_fini(&c);
	return ret;
}
