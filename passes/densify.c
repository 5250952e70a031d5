/* Densify: every expert on the full input, GatherElements picks the top-k
 * outputs, weighted sum. The result takes over the routed sum's name, so
 * its consumers (and a graph output of that name) need no rewiring, and
 * the old dispatch dies in dead-node elimination. */
#include <stdlib.h>
#include <string.h>

#include "infer.h"
#include "moe.h"

/* The next place at or after p where `from` (lf bytes) stands as a whole
 * segment of name: after a '/' or '.' (or at the start), before a '/',
 * '.', '_' or the end. */
static const char *segment(const char *name, const char *p, const char *from, size_t lf)
{
	for (; (p = strstr(p, from)); p++) {
		char after = p[lf];
		if ((p == name || p[-1] == '/' || p[-1] == '.') && (after == '/' || after == '.' || after == '_' || !after))
			return p;
	}
	return NULL;
}

/* Every path segment `from` within a name becomes `to`: "experts.1" in
 * /model.11/fused/expert_projections.1/expert_projections.1.0/Conv names
 * the expert at both levels. NULL when the name holds no such segment.
 * In c->tmp: made ahead of the clone that takes it (g_fresh copies). */
static const char *reseg(Ctx *c, const char *name, const char *from, const char *to)
{
	size_t lf = strlen(from), lt = strlen(to), ln = strlen(name), n = 0;
	if (!lf)
		return NULL;
	/* Counted first, so the copy is sized exactly: sized for the worst
	 * case, every cloned name took several times its length. */
	size_t hits = 0;
	for (const char *p = name; (p = segment(name, p, from, lf)); p += lf)
		hits++;
	if (!hits)
		return NULL;
	size_t need = ln - hits * lf + hits * lt + 1;
	char *out = arena_alloc_raw(c->tmp, need);
	const char *p = name;
	for (const char *q; (q = segment(name, p, from, lf)); p = q + lf) {
		memcpy(out + n, p, (size_t)(q - p));
		n += (size_t)(q - p);
		memcpy(out + n, to, lt);
		n += lt;
	}
	strcpy(out + n, p);
	return out;
}

/* What names expert `id` among its siblings in node and value names:
 * "expert_projections.3" of "fused_experts.expert_projections.{i}" (the
 * pattern names show, else experts.yaml's). */
static const char *seg(Ctx *c, const Layer *L, int id)
{
	const char *pat = L->pattern ? L->pattern : L->spec->expert ? L->spec->expert : "experts.{i}";
	const char *p = strstr(pat, "{i}"), *st = p;
	if (!p)
		return pat;
	if (st > pat && st[-1] == '.')
		for (st--; st > pat && st[-1] != '.'; st--)
			;
	return arena_printf(c->tmp, "%.*s%d", (int)(p - st), st, id);
}

/* A cloned node's name: the template's with the expert's segment renamed,
 * or, when the template's name tells nothing (renamed or name-free
 * exports), one of the exporter's form under the layer's module path. */
static const char *clone_name(Ctx *c, const Layer *L, const Node *s, const char *from, const char *to, int id)
{
	const char *r = s->name ? reseg(c, s->name, from, to) : NULL;
	if (r)
		return r;
	const char *full = expert_path(c, L->spec, id), *scope = L->spec->scope;
	size_t n = strlen(scope);
	return arena_cat(c->tmp, "/", scope, n ? "/" : "", full + n + (n ? 1 : 0), "/", s->op_type, NULL);
}

static const char *clone_expert(Ctx *c, const Layer *L, const Expert *tpl, const Mapping *m, int id,
				WSrc *w, Err *e)
{
	const char *from = seg(c, L, tpl->id), *to = seg(c, L, id);
	const char *pre = arena_printf(c->tmp, "%s%s.", L->spec->prefix ? L->spec->prefix : "",
				       expert_path(c, L->spec, id));
	/* New tensors by template slot, and the clones' values by template
	 * name: the inputs are set from values in hand, not looked up. */
	Val ***over = arena_alloc(c->tmp, tpl->nnode * sizeof *over);
	for (size_t i = 0; i < tpl->nnode; i++)
		over[i] = arena_alloc(c->tmp, (tpl->node[i]->n_input + 1) * sizeof **over);
	/* The clones' names first, their hash slots prefetched: the
	 * weights are built meanwhile, and the names map and the value map
	 * are tables of megabytes where each new name was a cache miss or
	 * two (a 400-layer repair makes 92 400 names). */
	const char **nname = arena_alloc(c->tmp, tpl->nnode * sizeof *nname);
	const char ***oname = arena_alloc(c->tmp, tpl->nnode * sizeof *oname);
	for (size_t i = 0; i < tpl->nnode; i++) {
		const Node *s = tpl->node[i];
		nname[i] = clone_name(c, L, s, from, to, id);
		g_prefetch_name(c, c->g, nname[i]);
		oname[i] = arena_alloc(c->tmp, (s->n_output + 1) * sizeof **oname);
		for (size_t j = 0; j < s->n_output; j++)
			if (*s->output[j] && (oname[i][j] = reseg(c, s->output[j], from, to)))
				g_prefetch_name(c, c->g, oname[i][j]);
	}
	const char **iname = arena_alloc(c->tmp, (m->n + 1) * sizeof *iname);
	for (size_t i = 0; i < m->n; i++)
		if (m->r[i].kind != R_SHARED) {
			iname[i] = arena_cat(c->tmp, pre, moe_recipe_key(c->tmp, &m->r[i]), NULL);
			g_prefetch_name(c, c->g, iname[i]);
		}
	MoeBnMemo bm = { 0 };
	for (size_t i = 0; i < m->n; i++) {
		const Recipe *r = &m->r[i];
		if (r->kind == R_SHARED)
			continue;
		const Tensor *t = g_const(tpl->g, r->tname);
		const char *name = iname[i];
		size_t nb = (size_t)g_tensor_numel(t) * wt_dtype_size(t->data_type);
		if (nb >= LATER_MIN) {
			Later *l = moe_build_later(c, L, r, t, id, w, &bm, e);
			if (!l)
				return NULL;
			g_add_init_later(c, c->g, name, t->data_type, t->dims, t->n_dims, nb, l);
		} else {
			void *data;
			if (moe_build(c, L, r, t, id, w, &bm, &data, &nb, e))
				return NULL;
			g_add_init(c, c->g, name, t->data_type, t->dims, t->n_dims, data, nb);
		}
		over[r->node][r->input] = g_init_at(c->g, c->g->gp->n_initializer - 1);
	}
	Map ren;
	map_init(&ren, c->tmp, tpl->nnode * 2);
	for (size_t i = 0; i < tpl->nnode; i++) {
		const Node *s = tpl->node[i];
		Node *n = g_clone_node(c, c->g, s);
		g_set_name(c, n, nname[i]);
		for (size_t j = 0; j < n->n_input; j++) {
			Val *r = over[i][j] ? over[i][j] : map_get(&ren, s->input[j]);
			if (r)
				g_set_input_val(c, n, j, r);
			else if (strcmp(s->input[j], tpl->in) == 0)
				g_set_input(c, n, j, L->x);
		}
		for (size_t j = 0; j < n->n_output; j++) {
			if (!*s->output[j])
				continue;
			const char *o = oname[i][j];
			g_fresh_output(c, n, j, o ? o : arena_printf(c->tmp, "%s_output_%zu", n->name, j));
			map_put(&ren, s->output[j], g_output(c, n, j));
		}
	}
	const Val *ov = map_get(&ren, tpl->out);
	const char *out = ov ? ov->name : NULL;
	if (!out)
		errf(e, "layer %s: internal error: expert %d's clone does not compute its output '%s'; please report this model",
		     L->scope, id, tpl->out);
	return out;
}

int moe_densify(Ctx *c, Layer *L, WSrc *w, LayerReport *lr, Err *e)
{
	int E = L->spec->experts, k = L->spec->top_k;
	if (L->gen != c->gen)
		return errf(e, "layer %s: internal error: detected on an index since rebuilt; please report this model",
			    L->scope);
	if (L->rank + 1 > 16)
		return errf(e, "layer %s: expert outputs of rank %d are not supported", L->scope, L->rank);
	const char **y = arena_alloc(c->tmp, (size_t)E * sizeof *y);
	for (size_t i = 0; i < L->nex; i++)
		y[L->ex[i].id] = L->ex[i].out;

	/* Missing experts, cloned from the first present one. */
	int tplconvs = 0;
	for (size_t j = 0; j < L->ex[0].nnode; j++)
		tplconvs += g_is(L->ex[0].node[j], "Conv");
	if ((int)L->nex < E) {
		if (!w)
			return errf(e, "layer %s: %d of %d experts are missing and no weights are given; set `weights:` in experts.yaml or give --weights",
				    L->scope, E - (int)L->nex, E);
		Mapping m;
		if (moe_map(c, L, &L->ex[0], w, &m, e))
			return -1;
		lr->map_maxdiff = m.maxdiff;
		for (int id = 0; id < E; id++) {
			if (y[id])
				continue;
			if (!(y[id] = clone_expert(c, L, &L->ex[0], &m, id, w, e)))
				return -1;
			lr->inserted[lr->ninserted++] = id;
			lr->convs_after += tplconvs;
			lr->nodes_after += (int)L->ex[0].nnode;
		}
	}

	/* Present experts run on the full input, outside any If. */
	for (size_t i = 0; i < L->nex; i++) {
		Expert *x = &L->ex[i];
		for (size_t j = 0; j < x->nnode; j++) {
			Node *n = x->node[j];
			if (x->g != c->g && g_graph_of(c, n) != c->g)
				g_move_node(c, n, c->g);
			for (size_t q = 0; q < n->n_input; q++)
				if (strcmp(n->input[q], x->in) == 0)
					g_set_input(c, n, q, L->x);
		}
	}

	/* [B,E,...] stack, then the k slots' GatherElements, weights, sum. */
	Emit m;
	emit_init(&m, c, arena_printf(c->a, "/%s%sdense/", L->spec->scope, *L->spec->scope ? "/" : ""));
	const char **u = arena_alloc(c->tmp, (size_t)E * sizeof *u);
	for (int id = 0; id < E; id++)
		u[id] = emit_axis1(&m, "Unsqueeze", y[id]);
	const char *stack = emit(&m, "Concat", u, (size_t)E);
	g_set_attr_i(c, emit_last(&m), "axis", 1);
	/* Before opset 11 (exports at 9 and 10) there is no GatherElements:
	 * a slot's expert is picked as torch's own export of gather picks it
	 * there, OneHot of the index over the expert axis, times the stack,
	 * summed over that axis (E products where GatherElements reads one;
	 * the dense dispatch runs every expert anyway). Detection knows the
	 * form, so the repaired model checks healthy. */
	int onehot = c->opset < 11, to = 0, icast = 0;
	const char *depth = NULL, *onoff = NULL, *shape = NULL;
	if (onehot) {
		int64_t e1 = E, v01[2] = { 0, 1 };
		depth = g_add_init_i64(c, c->g, arena_cat(c->a, m.pfx, "depth", NULL), &e1, 1, 0)->name;
		onoff = g_add_init_i64(c, c->g, arena_cat(c->a, m.pfx, "onehot_values", NULL), v01, 2, 0)->name;
		to = g_ty_elem(c->g, L->ex[0].out);
		/* ONNX Runtime's OneHot takes int32 indices only with float depth */
		icast = g_ty_elem(c->g, L->indices) != ONNX__TENSOR_PROTO__DATA_TYPE__INT64;
	} else {
		shape = emit(&m, "Shape", &u[0], 1);
	}
	/* Slot by slot (below opset 11, or routing per position) only. */
	int per_slot = onehot || L->permap;
	const char *idx_shape = per_slot && !onehot ? emit_ones_shape(&m, L->rank + 1) : NULL;
	const char *w_shape = per_slot ? emit_ones_shape(&m, L->rank) : NULL;
	/* A condition the dispatch added to the id match (a weight threshold)
	 * drops the slot it fails: the dense sum zeroes its weight. */
	const char *weights = L->weights;
	if (L->wmask)
		weights = emit_masked(&m, weights, L->wmask);
	const char *sum = NULL;
	if (!per_slot) {
		/* All k slots in one pick: [B,k,1...] ids expanded over the
		 * expert output, one GatherElements from the stack, times the
		 * [B,k,1...] weights, summed over the slots. Per slot it was
		 * seven nodes and an Add each, which ONNX Runtime pays for by
		 * node on small layers. */
		int64_t sh[17] = { 0, -1 };
		for (int d = 2; d <= L->rank; d++)
			sh[d] = 1;
		const char *bk = emit_i64(&m, "slots_shape", sh, (size_t)L->rank + 1, 0);
		const char *r1[] = { L->indices, bk }, *r2[] = { weights, bk };
		const char *x1[] = { emit(&m, "Reshape", r1, 2), shape };
		const char *g1[] = { stack, emit(&m, "Expand", x1, 2) };
		const char *ge = emit(&m, "GatherElements", g1, 2);
		g_set_attr_i(c, emit_last(&m), "axis", 1);
		const char *wr = emit(&m, "Reshape", r2, 2);
		if (L->wcast) {
			wr = emit(&m, "Cast", &wr, 1);
			g_set_attr_i(c, emit_last(&m), "to", L->wcast);
		}
		/* The slots summed. An image layer's ([B,k,C,H,W]) by a Gather
		 * of each slot, times its weight, added: a ReduceSum over axis 1
		 * there took the corpus' repaired sharedstem, single_bn and
		 * detector3 from 0.98-0.99x to 1.07-1.10x the dense export's
		 * latency in ONNX Runtime, and a Split + Sum, as fast, rounded a
		 * float16 model's products to float16 where ONNX Runtime keeps a
		 * Mul and Add chain in float (testdata/inits_as_inputs 4.5e-3
		 * off the references instead of 3.6e-3). A token layer's
		 * ([N,k,D]) by the ReduceSum, which is fast there (the Gathers
		 * took token_onehot from 1.00x to 1.04x). One slot: a Squeeze. */
		if (k > 1 && L->rank >= 4) {
			for (int j = 0; j < k; j++) {
				int64_t jj = j;
				const char *slot = emit_i64(&m, arena_printf(c->a, "slot_%d", j), &jj, 1, 1);
				const char *m1[] = { emit_gather(&m, ge, slot, 1), emit_gather(&m, wr, slot, 1) };
				const char *t = emit(&m, "Mul", m1, 2);
				const char *a1[] = { sum, t };
				sum = sum ? emit(&m, "Add", a1, 2) : t;
			}
		} else {
			const char *m1[] = { ge, wr };
			sum = emit_axis1(&m, k == 1 ? "Squeeze" : "ReduceSum", emit(&m, "Mul", m1, 2));
			if (k > 1)
				g_set_attr_i(c, emit_last(&m), "keepdims", 0);
		}
		k = 0;
	}
	for (int j = 0; j < k; j++) {
		int64_t jj = j;
		const char *slot = emit_i64(&m, arena_printf(c->a, "slot_%d", j), &jj, 1, 1);
		const char *ij = emit_gather(&m, L->indices, slot, 1), *ir, *sq;
		if (onehot) {
			/* [B] -> [B,1...] or [B,S...] -> [B,1,S...]; OneHot then
			 * inserts the expert axis at 1, the stack's. */
			if (L->permap) {
				ir = emit_axis1(&m, "Unsqueeze", ij);
			} else {
				const char *r1[] = { ij, w_shape };
				ir = emit(&m, "Reshape", r1, 2);
			}
			if (icast) {
				ir = emit(&m, "Cast", &ir, 1);
				g_set_attr_i(c, emit_last(&m), "to", ONNX__TENSOR_PROTO__DATA_TYPE__INT64);
			}
			const char *o1[] = { ir, depth, onoff };
			const char *oh = emit(&m, "OneHot", o1, 3);
			g_set_attr_i(c, emit_last(&m), "axis", 1);
			oh = emit(&m, "Cast", &oh, 1);
			g_set_attr_i(c, emit_last(&m), "to", to ? to : ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT);
			const char *p1[] = { stack, oh };
			sq = emit_axis1(&m, "ReduceSum", emit(&m, "Mul", p1, 2));
			g_set_attr_i(c, emit_last(&m), "keepdims", 0);
		} else {
			if (L->permap) { /* [B,S...] -> [B,1,1,S...]: one expert per position */
				ir = emit_axis1(&m, "Unsqueeze", emit_axis1(&m, "Unsqueeze", ij));
			} else {
				const char *r1[] = { ij, idx_shape };
				ir = emit(&m, "Reshape", r1, 2);
			}
			const char *x1[] = { ir, shape };
			const char *ie = emit(&m, "Expand", x1, 2);
			const char *g1[] = { stack, ie };
			const char *ge = emit(&m, "GatherElements", g1, 2);
			g_set_attr_i(c, emit_last(&m), "axis", 1);
			sq = emit_axis1(&m, "Squeeze", ge);
		}
		const char *wj = emit_gather(&m, weights, slot, 1), *wr;
		if (L->permap) {
			wr = emit_axis1(&m, "Unsqueeze", wj);
		} else {
			const char *r2[] = { wj, w_shape };
			wr = emit(&m, "Reshape", r2, 2);
		}
		if (L->wcast) {
			wr = emit(&m, "Cast", &wr, 1);
			g_set_attr_i(c, emit_last(&m), "to", L->wcast);
		}
		const char *m1[] = { sq, wr };
		const char *p = emit(&m, "Mul", m1, 2);
		if (sum) {
			const char *a1[] = { sum, p };
			sum = emit(&m, "Add", a1, 2);
		} else {
			sum = p;
		}
	}

	/* The dense sum takes over the routed sum's name. */
	Val *old = g_val(c->g, L->combined);
	if (!old || !old->def)
		return errf(e, "layer %s: the routed sum '%s' has no producer to replace", L->scope, L->combined);
	Node *od = old->def;
	for (size_t i = 0; i < od->n_output; i++)
		if (strcmp(od->output[i], L->combined) == 0)
			g_fresh_output(c, od, i, arena_printf(c->a, "%s_sparse", L->combined));
	g_rename_output(c, emit_last(&m), 0, L->combined);
	lr->ifs = L->nif;
	lr->repaired = 1;
	return 0;
}
