#include "flow.h"

#include <string.h>

typedef struct {
	const char *name;
	Graph *g;
	Val *v; /* name's value in g when known, else NULL: looked up */
} Item;

/* Marks name reached: 1 when it was not yet. One probe, not a get and a put. */
static int reach(Map *reached, const char *name)
{
	void **r = map_ref(reached, name);
	if (*r)
		return 0;
	*r = (void *)1;
	return 1;
}

size_t flow_forward(Ctx *c, Graph *g, const char *const *seed, size_t nseed, FlowStep step, void *ud,
		    Map *reached)
{
	Item *q = NULL;
	size_t nq = 0, cap = 0, head = 0, n = 0;
#define PUSH(nm, gr, vl)                                                                     \
	do {                                                                                 \
		if (nq == cap) {                                                             \
			size_t nc = cap ? cap * 2 : 32;                                      \
			q = arena_grow(c->tmp, q, cap * sizeof *q, nc * sizeof *q);           \
			cap = nc;                                                            \
		}                                                                            \
		q[nq++] = (Item){ (nm), (gr), (vl) };                                        \
	} while (0)
	for (size_t i = 0; i < nseed; i++)
		if (*seed[i] && reach(reached, seed[i])) {
			PUSH(seed[i], g, NULL);
			n++;
		}
	while (head < nq) {
		Item it = q[head++];
		Val *v = it.v ? it.v : g_val(it.g, it.name);
		if (!v)
			continue;
		for (size_t u = 0; u < v->nuse; u++) {
			Node *m = v->use[u].n;
			Graph *mg = v->use[u].g;
			NodeInfo *mk = v->use[u].k;
			/* Inputs the index resolved are the value's own string. */
			int slot = -1;
			for (size_t j = 0; j < m->n_input; j++)
				if (m->input[j] == it.name || strcmp(m->input[j], it.name) == 0) {
					slot = (int)j;
					break;
				}
			unsigned out = step(ud, c, m, slot, it.name);
			for (size_t j = 0; j < m->n_output && j < 32; j++) {
				if (!(out >> j & 1) || !*m->output[j] || !reach(reached, m->output[j]))
					continue;
				/* The consumer's own output, as the index keeps it. */
				Val *ov = mk && mk->g == mg && j < mk->nout ? mk->out[j] : NULL;
				PUSH(m->output[j], mg, ov && ov->def == m && ov->g == mg ? ov : NULL);
				n++;
			}
		}
	}
#undef PUSH
	return n;
}

int flow_nodes(Graph *g, int (*fn)(void *ud, Graph *g, Node *n), void *ud)
{
	/* Bodies are visited through the index's sub list: nesting depth is
	 * bounded by the loader (model_load refuses deeper messages). */
	Onnx__GraphProto *gp = g->gp;
	for (size_t i = 0; i < gp->n_node; i++) {
		Node *n = gp->node[i];
		if (fn(ud, g, n))
			return 1;
		for (size_t k = 0; k < g->nsub; k++)
			if (g->sub[k]->owner == n && flow_nodes(g->sub[k], fn, ud))
				return 1;
	}
	return 0;
}
