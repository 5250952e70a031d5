/* Data-flow walks over the index. Every analysis that follows values to
 * their consumers goes through flow_forward, so how a body's reads of outer
 * values count as uses, and what a walk costs, are decided in one place. */
#ifndef FLOW_H
#define FLOW_H
#include "graph.h"

/* Asked once per (consumer, reached input): n reads the reached value v in
 * input slot `slot` (-1: one of n's bodies reads v). Returns a bit mask of
 * n's outputs the walk reaches through n (bit j: output j; ~0u: all). */
typedef unsigned (*FlowStep)(void *ud, Ctx *c, Node *n, int slot, const char *v);

/* Walks forward from the seed values, defined in (or visible from) g.
 * `reached` (initialised by the caller, so walks can share one) receives
 * every value reached, seeds included, mapped to (void *)1. Work is
 * proportional to the uses of the values reached, never the graph's size.
 * Its work queue is scratch in c->tmp. Returns the number of values
 * reached. */
size_t flow_forward(Ctx *c, Graph *g, const char *const *seed, size_t nseed, FlowStep step, void *ud,
		    Map *reached);

/* Every node of g and of the bodies nested in it, in graph order, a body's
 * nodes right after the node owning it. fn returns nonzero to stop. */
int flow_nodes(Graph *g, int (*fn)(void *ud, Graph *g, Node *n), void *ud);

#endif
