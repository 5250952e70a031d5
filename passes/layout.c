/* Zero-config use: the experts.yaml the graph and the checkpoint imply.
 *
 * Per detected layer: the expert count is the router's width (the size of
 * the TopK's axis), confirmed by the checkpoint's key family; top_k is the
 * TopK's K; the checkpoint keys of each expert (scope, expert pattern,
 * prefix) come from node names when they carry module paths, and are found
 * by value otherwise: the present experts' tensors must rebuild from the
 * keys chosen (moe_map), whichever way they were found. Anything that
 * cannot be told is an error naming the experts.yaml key to set. */
#include <stdio.h>
#include <string.h>

#include "moe.h"

/* Whether the checkpoint rebuilds L's present experts under sl's keys. */
static int fits(Ctx *c, const Layer *L, const SpecLayer *sl, WSrc *w, Err *why)
{
	Layer t = *L;
	t.spec = sl;
	t.scope = sl->scope;
	Mapping m;
	return moe_map(c, &t, &t.ex[0], w, &m, why) == 0;
}

/* Key layouts the names suggest: the module path and pattern of the
 * experts, under every prefix some checkpoint key puts before them. */
static int by_names(Ctx *c, const Layer *L, SpecLayer *sl, WSrc *w, Err *why)
{
	if (!L->module || !L->pattern)
		return 0;
	sl->scope = L->module;
	sl->expert = L->pattern;
	const char *path = expert_path(c, sl, L->ex[0].id);
	const char *want = arena_printf(c->a, "%s.", path);
	size_t lw = strlen(want);
	const char **tried = arena_alloc(c->a, (w->n + 1) * sizeof *tried);
	size_t nt = 0;
	for (size_t i = 0; i < w->n; i++) {
		const char *k = w->t[i]->name, *p = k;
		/* want at the start of k, or after a dot */
		for (; (p = strstr(p, want)); p++)
			if (p == k || p[-1] == '.')
				break;
		if (!p)
			continue;
		const char *pre = arena_printf(c->a, "%.*s", (int)(p - k), k);
		int seen = 0;
		for (size_t j = 0; j < nt && !seen; j++)
			seen = strcmp(tried[j], pre) == 0;
		if (seen)
			continue;
		tried[nt++] = pre;
		sl->prefix = pre;
		if (fits(c, L, sl, w, why))
			return 1;
	}
	(void)lw;
	return 0;
}

/* Key layouts found by value: a checkpoint key of the size of the first
 * expert's largest tensor, under a module path ending in the expert's id,
 * is a guess at the expert's path; the mapping decides. Every guess that
 * fits must name the same path. */
static int by_values(Ctx *c, const Layer *L, SpecLayer *sl, WSrc *w, Err *why, Err *e)
{
	const Expert *x = &L->ex[0];
	int64_t best = 0;
	for (size_t j = 0; j < x->nnode; j++)
		for (size_t q = 0; q < x->node[j]->n_input; q++) {
			const Tensor *t = g_const(x->g, x->node[j]->input[q]);
			int64_t n = t && t->n_dims ? g_tensor_numel(t) : 0;
			if (n > best)
				best = n;
		}
	if (best <= 1)
		return 0;
	char id[16];
	snprintf(id, sizeof id, ".%d.", x->id);
	const char *found = NULL;
	for (size_t i = 0; i < w->n; i++) {
		const WTensor *k = w->t[i];
		if (wt_numel(k) != best)
			continue;
		/* each ".<id>." in the key: the expert path ends before its dot */
		for (const char *p = strstr(k->name, id); p; p = strstr(p + 1, id)) {
			const char *epath = arena_printf(c->a, "%.*s", (int)(p - k->name) + (int)strlen(id) - 1, k->name);
			if (found && strcmp(found, epath) == 0)
				continue;
			/* scope.container.{i}: the container is the last level before the id */
			const char *dot = p - 1;
			while (dot > k->name && *dot != '.')
				dot--;
			SpecLayer t = *sl;
			t.prefix = "";
			t.scope = dot > k->name ? arena_printf(c->a, "%.*s", (int)(dot - k->name), k->name) : "";
			t.expert = arena_printf(c->a, "%.*s.{i}", (int)(p - dot - (dot > k->name)), dot + (dot > k->name));
			if (!fits(c, L, &t, w, why))
				continue;
			if (found)
				return errf(e, "layer %s: the experts match the checkpoint under '%s' and under '%s'; write experts.yaml with the layer's scope and expert pattern",
					    L->scope, found, epath);
			found = epath;
			*sl = t;
		}
	}
	return found != NULL;
}

/* How many experts the checkpoint holds under sl's pattern: ids 0, 1, ...
 * as long as keys exist. */
static int ckpt_experts(Ctx *c, const SpecLayer *sl, WSrc *w)
{
	int n = 0;
	for (; n < 65536; n++) {
		size_t lo, hi;
		wsrc_range(w, arena_printf(c->a, "%s%s.", sl->prefix, expert_path(c, sl, n)), &lo, &hi);
		if (lo == hi)
			break;
	}
	return n;
}

int moe_layout(Ctx *c, Layer *L, size_t nl, WSrc *w, const char *weights, Spec *out, Err *e)
{
	memset(out, 0, sizeof *out);
	out->weights = weights;
	out->layer = arena_alloc(c->a, (nl + 1) * sizeof *out->layer);
	for (size_t i = 0; i < nl; i++) {
		Layer *l = &L[i];
		if (FORM_STATIC(l->form))
			continue;
		SpecLayer *sl = &out->layer[out->nlayer];
		memset(sl, 0, sizeof *sl);
		sl->weights = weights;
		sl->prefix = "";
		sl->expert = "experts.{i}";
		sl->scope = l->module ? l->module : l->scope;
		if (l->topk_k < 1)
			return errf(e, "router '%s': cannot tell its top_k (K is computed at run time); write experts.yaml with top_k",
				    l->scope);
		sl->top_k = (int)l->topk_k;
		if (w) {
			Err byname = { { 0 } }, byval = { { 0 } };
			int got = by_names(c, l, sl, w, &byname);
			if (!got && (got = by_values(c, l, sl, w, &byval, e)) < 0)
				return -1;
			/* Where node names lead is the likelier layout: what failed
			 * there (a damaged tensor, another model's checkpoint) or
			 * that nothing is there says more than the last guess by
			 * value. */
			if (!got && byname.msg[0])
				return errf(e, "router '%s': the keys in %s that its node names lead to do not rebuild its present experts (%s)",
					    l->scope, w->path, byname.msg);
			if (!got && l->module && l->pattern)
				return errf(e, "router '%s': node names put expert %d at '%s', but %s holds no key under it, nor any that rebuilds it by value; is it the checkpoint of this model? If so, write experts.yaml with the layer's scope and expert pattern",
					    l->scope, l->ex[0].id, expert_path(c, sl, l->ex[0].id), w->path);
			if (!got)
				return errf(e, "router '%s': cannot find its experts' keys in %s (%s); write experts.yaml with the layer's scope and expert pattern",
					    l->scope, w->path, byval.msg[0] ? byval.msg : "no key matches the present experts by name or value");
		} else if (l->module && l->pattern) {
			sl->scope = l->module;
			sl->expert = l->pattern;
		} else {
			return errf(e, "router '%s': node names carry no module path, and no checkpoint was given to find the layer by value; give --weights",
				    l->scope);
		}
		int ck = w ? ckpt_experts(c, sl, w) : 0;
		if (l->width > 0) {
			if (ck && ck != l->width)
				return errf(e, "layer %s: the router scores %lld experts, but %s holds %d under '%s%s'; write experts.yaml with experts",
					    spec_scope_shown(sl->scope), (long long)l->width, w->path, ck, sl->prefix, expert_path(c, sl, 0));
			sl->experts = (int)l->width;
		} else if (ck) {
			sl->experts = ck;
		} else {
			return errf(e, "layer %s: cannot tell its number of experts (the router's width is not known, and no checkpoint tells); write experts.yaml with experts",
				    spec_scope_shown(sl->scope));
		}
		for (size_t k = 0; k < l->nex; k++)
			if (l->ex[k].id >= sl->experts)
				return errf(e, "layer %s: the dispatch compares with expert id %d, but the router scores %d experts; write experts.yaml",
					    spec_scope_shown(sl->scope), l->ex[k].id, sl->experts);
		if (sl->top_k > sl->experts)
			return errf(e, "layer %s: top-%d of %d experts; write experts.yaml", spec_scope_shown(sl->scope), sl->top_k, sl->experts);
		for (size_t j = 0; j < out->nlayer; j++)
			if (strcmp(out->layer[j].scope, sl->scope) == 0)
				return errf(e, "layers '%s' and '%s' get the same scope '%s'; write experts.yaml",
					    L[j].scope, l->scope, spec_scope_shown(sl->scope));
		out->nlayer++;
	}
	return 0;
}
