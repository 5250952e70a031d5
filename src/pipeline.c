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

static void counts(Ctx *c, LayerReport *lr, int after)
{
	int *nodes = after ? &lr->nodes_after : &lr->nodes_before;
	int *convs = after ? &lr->convs_after : &lr->convs_before;
	*nodes = g_count(c, NULL, lr->scope);
	*convs = g_count(c, "Conv", lr->scope);
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
	if (g_init(&c, md->m, md->a, e) || sort_all(&c, c.g, e) || g_check(&c, e))
		return errwrap(e, "%s", md->path);
	if (!spec)
		return moe_scan(&c, r, e);

	Open *open = arena_alloc(md->a, (spec->nlayer + 1) * sizeof *open);
	size_t nopen = 0;
	int ret = -1;
	r->layer = arena_alloc(md->a, (spec->nlayer ? spec->nlayer : 1) * sizeof *r->layer);
	for (size_t i = 0; i < spec->nlayer; i++) {
		const SpecLayer *s = &spec->layer[i];
		LayerReport *lr = &r->layer[r->nlayer++];
		lr->scope = s->scope;
		lr->experts = s->experts;
		lr->top_k = s->top_k;
		counts(&c, lr, 0);
		Layer L;
		if (moe_detect(&c, s, &L, e))
			goto out;
		lr->present = arena_alloc(md->a, (L.nex + 1) * sizeof *lr->present);
		for (size_t k = 0; k < L.nex; k++)
			lr->present[lr->npresent++] = L.ex[k].id;
		lr->ifs = L.nif;
		if (L.dense) {
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
		WSrc *w = NULL;
		if ((int)L.nex < s->experts && !(w = source(open, &nopen, s, md->a, e)) && s->weights)
			goto out;
		if (moe_densify(&c, &L, w, lr, e) || tidy(&c, e))
			goto out;
		r->changed = 1;
		counts(&c, lr, 1);
	}
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
			counts(&c, &r->layer[i], 1);
		if (!o->no_check && g_check(&c, e))
			goto out;
	}
	ret = 0;
out:
	for (size_t i = 0; i < nopen; i++)
		wsrc_close(open[i].w);
	return ret;
}
