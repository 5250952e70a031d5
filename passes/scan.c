/* Diagnosis without a YAML file: a pre-deploy hook wants to know whether a
 * model is damaged before anyone writes experts.yaml. Every layer detect.c
 * finds with a data-dependent dispatch (rows gathered through NonZero, or
 * experts gated by If) needs repair; a dense layer does not. */
#include <string.h>

#include "moe.h"

int moe_scan(Ctx *c, const Layer *L, size_t nl, Report *r, Err *e)
{
	r->layer = arena_alloc(c->a, (nl ? nl : 1) * sizeof *r->layer);
	for (size_t i = 0; i < nl; i++) {
		const Layer *l = &L[i];
		LayerReport *lr = &r->layer[r->nlayer++];
		memset(lr, 0, sizeof *lr);
		lr->scope = l->module ? (*l->module ? l->module : "(root)") : l->scope;
		lr->experts = l->width > 0 ? (int)l->width : 0;
		lr->top_k = l->topk_k > 0 ? (int)l->topk_k : 0;
		lr->present = arena_alloc(c->a, (l->nex + 1) * sizeof *lr->present);
		for (size_t k = 0; k < l->nex; k++)
			lr->present[lr->npresent++] = l->ex[k].id;
		lr->ifs = l->nif;
		lr->nodes_before = lr->nodes_after = l->nodes;
		lr->convs_before = lr->convs_after = l->convs;
		lr->dense = FORM_STATIC(l->form);
		lr->dispatch = l->form == FORM_SPARSE ? "sparse" : l->form == FORM_DENSE ? "dense" : NULL;
		lr->expert_flops = -1;
		lr->why = l->why;
		lr->nonzero = l->form == FORM_ROWS;
		if (!FORM_STATIC(l->form))
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
