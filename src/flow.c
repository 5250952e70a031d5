#include "flow.h"

#include <string.h>

typedef struct {
	const char *name;
	Graph *g;
} Item;

size_t flow_forward(Ctx *c, Graph *g, const char *const *seed, size_t nseed, FlowStep step, void *ud,
		    Map *reached)
{
	Item *q = NULL;
	size_t nq = 0, cap = 0, head = 0, n = 0;
#define PUSH(nm, gr)                                                                         \
	do {                                                                                 \
		if (nq == cap) {                                                             \
			size_t nc = cap ? cap * 2 : 32;                                      \
			q = arena_grow(c->tmp, q, cap * sizeof *q, nc * sizeof *q);           \
			cap = nc;                                                            \
		}                                                                            \
		q[nq++] = (Item){ (nm), (gr) };                                              \
	} while (0)
	for (size_t i = 0; i < nseed; i++)
		if (*seed[i] && !map_get(reached, seed[i])) {
			map_put(reached, seed[i], (void *)1);
			PUSH(seed[i], g);
			n++;
		}
	while (head < nq) {
		Item it = q[head++];
		Val *v = g_val(it.g, it.name);
		if (!v)
			continue;
		for (size_t u = 0; u < v->nuse; u++) {
			Node *m = v->use[u].n;
			Graph *mg = v->use[u].g;
			int slot = -1;
			for (size_t j = 0; j < m->n_input; j++)
				if (strcmp(m->input[j], it.name) == 0) {
					slot = (int)j;
					break;
				}
			unsigned out = step(ud, c, m, slot, it.name);
			for (size_t j = 0; j < m->n_output && j < 32; j++) {
				if (!(out >> j & 1) || !*m->output[j] || map_get(reached, m->output[j]))
					continue;
				map_put(reached, m->output[j], (void *)1);
				PUSH(m->output[j], mg);
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
