/* Binding: which detected MoE layer each experts.yaml layer describes.
 *
 * Names are hints: where node names carry module paths, an experts.yaml
 * layer binds to the detected layer whose expert nodes sit at the paths
 * it names (expert id for expert id), or whose router lies under its
 * scope. What names do not settle (renamed or name-free exports) is bound
 * by value: the layer whose present experts' tensors rebuild from the
 * checkpoint under the YAML layer's keys. Then the two must agree: top_k
 * with the TopK, the expert count with the router and the ids dispatched. */
#include <string.h>

#include "moe.h"

/* Whether module m (dotted path) is scope or lies under it. */
static int under(const char *m, const char *scope)
{
	size_t n = strlen(scope);
	return !n || (strncmp(m, scope, n) == 0 && (m[n] == '.' || !m[n]));
}

/* A node of the main graph named under scope: the layer is in the graph,
 * only no router of it is. */
static const Node *node_under(Ctx *c, const char *scope)
{
	const Onnx__GraphProto *gp = c->g->gp;
	for (size_t i = 0; i < gp->n_node; i++) {
		const Node *n = gp->node[i];
		const char *m = n->name && *n->name ? spec_node_module(c->tmp, n->name) : NULL;
		if (m && *m && under(m, scope))
			return n;
	}
	return NULL;
}

/* Whether a (la chars) ends with "." and then b (lb chars). */
static int dot_tail(const char *a, size_t la, const char *b, size_t lb)
{
	return la > lb && a[la - lb - 1] == '.' && !strncmp(a + la - lb, b, lb);
}

/* The module path an unbound experts.yaml scope most likely meant: the
 * one module, at or above an unbound router, that scope names in another
 * spelling (ONNX's "/model.5"), with a suffix of it ("5"), or with more
 * before it (named_modules() of a wrapper: "model.model.5"). NULL when
 * none or several fit: a hint is only given when it cannot mislead. */
static const char *scope_hint(Ctx *c, const char *scope, const Layer *L, size_t nl, const int *taken)
{
	char *u = arena_strdup(c->tmp, scope + strspn(scope, "/."));
	for (char *p = u; *p; p++)
		if (*p == '/')
			*p = '.';
	for (size_t n = strlen(u); n && u[n - 1] == '.'; n--)
		u[n - 1] = 0;
	size_t lu = strlen(u);
	const char *hit = NULL;
	for (size_t j = 0; j < nl && lu; j++) {
		const char *m = L[j].module && *L[j].module ? L[j].module : L[j].topmodule;
		if (taken[j] || !m)
			continue;
		/* Each module at or above m: a prefix ending at a dot or m's end. */
		for (size_t n = 1, lm = strlen(m); n <= lm; n++) {
			if (m[n] != '.' && m[n])
				continue;
			if (!(n == lu && !strncmp(m, u, n)) && !dot_tail(m, n, u, lu) && !dot_tail(u, lu, m, n))
				continue;
			if (hit && (strlen(hit) != n || strncmp(hit, m, n)))
				return NULL;
			hit = arena_printf(c->tmp, "%.*s", (int)n, m);
			break;
		}
	}
	return hit && strcmp(hit, scope) ? hit : NULL;
}

/* How strongly names tie spec layer s to detected layer L: experts whose
 * nodes sit at s's path for their own id count 2 each, a router under the
 * scope 1. From the module and pattern detection read off the names, so
 * binding costs a string compare per (spec layer, layer) pair. */
static int name_score(Ctx *c, const SpecLayer *s, const Layer *L)
{
	int score = 0;
	if (L->module && L->pattern && strcmp(L->module, s->scope) == 0)
		for (size_t k = 0; k < L->nex; k++)
			if (strcmp(L->named[k], expert_path(c, s, L->ex[k].id)) == 0)
				score += 2;
	if (L->topmodule && under(L->topmodule, s->scope))
		score += 1;
	return score;
}

static int check_agree(const SpecLayer *s, const Layer *L, Err *e)
{
	if (L->topk_k >= 0 && L->topk_k != s->top_k)
		return errf(e, "layer %s: experts.yaml says top_k: %d, but the router's TopK '%s' takes %lld; fix top_k",
			    spec_scope_shown(s->scope), s->top_k, L->topk->name ? L->topk->name : "", (long long)L->topk_k);
	for (size_t k = 0; k < L->nex; k++)
		if (L->ex[k].id >= s->experts)
			return errf(e, "layer %s: the dispatch compares the router indices with expert id %d, but experts: %d; fix experts",
				    spec_scope_shown(s->scope), L->ex[k].id, s->experts);
	if (L->width >= 0 && L->width != s->experts)
		return errf(e, "layer %s: experts.yaml says experts: %d, but the router scores %lld experts; fix experts",
			    spec_scope_shown(s->scope), s->experts, (long long)L->width);
	return 0;
}

/* Whether every tensor of L's first expert has a key of its size under
 * spec layer s's path for that expert: most wrong pairings fail here,
 * before a full mapping is tried. */
static int sizes_fit(Ctx *c, const SpecLayer *s, const Layer *L, WSrc *w)
{
	const Expert *x = &L->ex[0];
	const char *pre = arena_printf(c->a, "%s%s.", s->prefix ? s->prefix : "", expert_path(c, s, x->id));
	size_t lo, hi;
	wsrc_range(w, pre, &lo, &hi);
	if (lo == hi)
		return 0;
	for (size_t j = 0; j < x->nnode; j++) {
		const Node *n = x->node[j];
		if (!g_is(n, "Conv") || n->n_input < 2)
			continue;
		const Tensor *t = g_const(x->g, n->input[1]);
		int64_t want = t ? g_tensor_numel(t) : -1, found = 0;
		for (size_t i = lo; i < hi && want > 0 && !found; i++)
			found = wt_numel(wsrc_sorted(w, i)) == want;
		if (want > 0 && !found)
			return 0;
	}
	return 1;
}

/* Whether spec layers a and b hold the same experts in w, tensor for
 * tensor and byte for byte: a pool of experts shared by several layers
 * (SharedExpertMoE), which the checkpoint repeats under each scope. */
static int same_pool(Ctx *c, const SpecLayer *a, const SpecLayer *b, WSrc *w)
{
	if (a->experts != b->experts || a->top_k != b->top_k)
		return 0;
	for (int id = 0; id < a->experts; id++) {
		const char *pa = arena_printf(c->a, "%s%s.", a->prefix ? a->prefix : "", expert_path(c, a, id));
		const char *pb = arena_printf(c->a, "%s%s.", b->prefix ? b->prefix : "", expert_path(c, b, id));
		size_t alo, ahi, blo, bhi;
		wsrc_range(w, pa, &alo, &ahi);
		wsrc_range(w, pb, &blo, &bhi);
		if (ahi - alo != bhi - blo || alo == ahi)
			return 0;
		for (size_t i = alo; i < ahi; i++) {
			const WTensor *x = wsrc_sorted(w, i);
			const WTensor *y = wsrc_get(w, arena_printf(c->a, "%s%s", pb, x->name + strlen(pa)));
			if (!y || y->dtype != x->dtype || y->nbytes != x->nbytes || memcmp(y->data, x->data, x->nbytes))
				return 0;
		}
	}
	return 1;
}

/* Layers names did not bind (name-free or renamed exports): a detected
 * layer is spec layer s's when its present experts' tensors rebuild from
 * the checkpoint under s's keys, and no other layer's do. */
static int by_value(Ctx *c, const Spec *s, Layer *L, size_t nl, Layer **bound, int *taken, BindSrc src, void *ud,
		    Err *e)
{
	for (size_t i = 0; i < s->nlayer; i++) {
		const SpecLayer *sl = &s->layer[i];
		if (bound[i])
			continue;
		size_t nfit = 0, first = 0;
		Err why = { { 0 } };
		for (size_t j = 0; j < nl; j++) {
			if (taken[j] || !L[j].nex)
				continue;
			WSrc *w = src(ud, sl, e);
			if (!w)
				return -1; /* the weights file's error names the file */
			if (!sizes_fit(c, sl, &L[j], w))
				continue;
			Layer t = L[j];
			t.spec = sl;
			t.scope = sl->scope;
			Mapping m;
			if (moe_map(c, &t, &t.ex[0], w, &m, &why))
				continue;
			if (nfit++ == 0) {
				first = j;
				continue;
			}
			/* Two routers fit: harmless when another layer of experts.yaml
			 * holds the very same experts (a shared pool), which then gets
			 * the other router; either way the same tensors are rebuilt. */
			int shared = 0;
			for (size_t i2 = 0; i2 < s->nlayer && !shared; i2++)
				shared = i2 != i && !bound[i2] && same_pool(c, sl, &s->layer[i2], w);
			if (!shared) {
				errf(e, "layer %s: the experts of two routers ('%s', '%s') match the checkpoint under '%s'; set router.indices in experts.yaml",
				     spec_scope_shown(sl->scope), L[first].scope, L[j].scope, expert_path(c, sl, L[j].ex[0].id));
				return spec_wrap(e, s, sl);
			}
		}
		if (nfit) {
			bound[i] = &L[first];
			taken[first] = 1;
		} else if (why.msg[0]) {
			errf(e, "layer %s: no node name lies under this scope, and no router's experts match the checkpoint under it by value (closest: %s)",
			     spec_scope_shown(sl->scope), why.msg);
			return spec_wrap(e, s, sl);
		}
	}
	return 0;
}

/* What experts.yaml names explicitly helps detection where the graph alone
 * is ambiguous, and must then be what detection found: a value named
 * wrongly (a stem's pre-activation as the input, the raw TopK values as
 * the weights, a partial sum as the output) would otherwise be wired in as
 * given and the model written wrong. An input may name the experts' own
 * up to casts (a float16 copy's graph input): the repair keeps reading
 * what the experts read. */
static int overrides(Ctx *c, const SpecLayer *s, Layer *L, Err *e)
{
	const char *const *v[] = { &s->router_weights, &s->input, &s->output };
	const char **dst[] = { &L->weights, &L->x, &L->combined };
	const char *key[] = { "router.weights", "input", "output" };
	const char *what[] = { "the dispatch weights the experts' outputs by", "the experts read", "the routed sum of the experts' outputs is" };
	for (int i = 0; i < 3; i++) {
		if (!*v[i])
			continue;
		if (!g_val(c->g, *v[i]))
			return errf(e, "layer %s: %s '%s' is not a value of the model", spec_scope_shown(s->scope), key[i], *v[i]);
		if (!*dst[i] || strcmp(*dst[i], *v[i]) == 0 ||
		    (dst[i] == &L->x && strcmp(moe_uncast(c->g, *dst[i]), moe_uncast(c->g, *v[i])) == 0))
			continue;
		return errf(e, "layer %s: experts.yaml gives %s '%s', but %s '%s'; remove `%s:` or name that value",
			    spec_scope_shown(s->scope), key[i], *v[i], what[i], *dst[i], key[i]);
	}
	return 0;
}

int moe_bind(Ctx *c, const Spec *s, Layer *L, size_t nl, Layer **bound, BindSrc src, void *ud, Err *e)
{
	int *taken = arena_alloc(c->a, (nl ? nl : 1) * sizeof *taken);
	for (size_t j = 0; j < nl; j++)
		L[j].spec = NULL; /* detection's hints; the binding follows */
	for (size_t i = 0; i < s->nlayer; i++) {
		const SpecLayer *sl = &s->layer[i];
		bound[i] = NULL;
		if (sl->router_indices) {
			if (!g_val(c->g, sl->router_indices)) {
				errf(e, "layer %s: router.indices '%s' is not a value of the model", spec_scope_shown(sl->scope), sl->router_indices);
				return spec_wrap(e, s, sl);
			}
			for (size_t j = 0; j < nl; j++)
				if (strcmp(L[j].topk->output[1], sl->router_indices) == 0 ||
				    (L[j].indices && strcmp(L[j].indices, sl->router_indices) == 0))
					bound[i] = &L[j];
			if (!bound[i]) {
				errf(e, "layer %s: router.indices '%s' is not the indices of any router the dispatch compares with expert ids",
				     spec_scope_shown(sl->scope), sl->router_indices);
				return spec_wrap(e, s, sl);
			}
			continue;
		}
		int best = 0, nbest = 0;
		for (size_t j = 0; j < nl; j++) {
			int sc = name_score(c, sl, &L[j]);
			if (sc > best) {
				best = sc;
				nbest = 1;
				bound[i] = &L[j];
			} else if (sc == best && sc > 0) {
				nbest++;
			}
		}
		if (nbest > 1) {
			errf(e, "layer %s: %d routers sit under this scope; set router.indices in experts.yaml", spec_scope_shown(sl->scope), nbest);
			return spec_wrap(e, s, sl);
		}
	}
	for (size_t i = 0; i < s->nlayer; i++) {
		if (!bound[i])
			continue;
		size_t j = (size_t)(bound[i] - L);
		if (taken[j]) {
			errf(e, "layer %s: its router '%s' is also another experts.yaml layer's; give each layer its own scope",
			     spec_scope_shown(s->layer[i].scope), L[j].topk->name ? L[j].topk->name : "");
			return spec_wrap(e, s, &s->layer[i]);
		}
		taken[j] = 1;
	}
	if (by_value(c, s, L, nl, bound, taken, src, ud, e))
		return -1;
	/* A static layer of a name-free export has no present experts to
	 * match by value, and nothing of it is rewritten: a layer names and
	 * values left unbound takes the next such router, in graph order, whose
	 * width and K agree with it. A damaged router stays unbound and is an
	 * error below; a named one never binds so (its scope must say). */
	for (size_t i = 0; i < s->nlayer; i++)
		for (size_t j = 0; j < nl && !bound[i]; j++)
			if (!taken[j] && FORM_STATIC(L[j].form) && !L[j].topmodule && L[j].width == s->layer[i].experts &&
			    (L[j].topk_k < 0 || L[j].topk_k == s->layer[i].top_k)) {
				bound[i] = &L[j];
				taken[j] = 1;
			}
	for (size_t i = 0; i < s->nlayer; i++) {
		const Node *in = bound[i] || !*s->layer[i].scope ? NULL : node_under(c, s->layer[i].scope);
		if (!bound[i] && in)
			errf(e, "layer %s: node '%s' lies under this scope, but no MoE router does (%s)%s", spec_scope_shown(s->layer[i].scope),
			     in->name, nl ? arena_printf(c->tmp, "%zu found elsewhere, first %s", nl, L[0].scope) : "none in the model",
			     s->layer[i].top_k >= s->layer[i].experts
				     ? ": with top_k equal to experts the module runs every expert and has nothing to repair; remove the layer from experts.yaml"
				     : "; check `scope:`");
		else if (!bound[i]) {
			const char *hint = scope_hint(c, s->layer[i].scope, L, nl, taken);
			errf(e, "layer %s: no MoE router of the model is under this scope (%zu found%s%s); %s%s%s",
			     spec_scope_shown(s->layer[i].scope), nl, nl ? ", first " : "", nl ? L[0].scope : "",
			     hint ? "did you mean `scope: " : "check `scope:`", hint ? hint : "", hint ? "`?" : "");
		}
		if (!bound[i] || check_agree(&s->layer[i], bound[i], e) || overrides(c, &s->layer[i], bound[i], e))
			return spec_wrap(e, s, &s->layer[i]);
		bound[i]->spec = &s->layer[i];
		bound[i]->scope = spec_scope_shown(s->layer[i].scope); /* for messages */
	}
	for (size_t j = 0; j < nl; j++)
		if (!taken[j] && !FORM_STATIC(L[j].form))
			return errf(e, "the model has an MoE router '%s' (experts present: %zu) that experts.yaml does not list; add a layer for it",
				    L[j].topk->name ? L[j].topk->name : L[j].topk->output[0], L[j].nex);
	return 0;
}
