/* The pipeline in one place: inline local functions -> index, shapes ->
 * detect -> bind -> per-layer densify -> tidy -> shape-guard folding ->
 * tidy -> check. Every rebuild or
 * refresh of the index is written out here (the shape inference too, but
 * where a pass or the check infers an index not yet inferred):
 * detection results hold no index objects, and the passes that take a Layer
 * check it was detected on the current index. */
#include "pipeline.h"

#include <pthread.h>
#include <string.h>

#include "duo.h"
#include "graph.h"
#include "infer.h"
#include "inline.h"
#include "moe.h"
#include "spawn.h"

/* Weight sources are opened on first need and shared by layers naming the
 * same file. Each has an arena of its own: a checkpoint's index (14 MiB
 * for 81 600 small tensors) goes when the source is closed. */
typedef struct {
	const char *path;
	WSrc *w;
	Arena *a;
} Open;

/* The checkpoint the repair will most likely read first, opened in a
 * second thread while this one loads, indexes, infers, checks and detects
 * (a 400-layer checkpoint's header takes as long as detection; a torch.save
 * checkpoint's CRC-32 check as long as the load). Its result is taken only
 * by the source() call that would have opened the same file with the same
 * key, so errors and results are those of opening it then. */
struct Prefetch {
	pthread_t th;
	int running;
	const char *path, *key;
	Arena *a;
	WSrc *w;
	Err e;
};

static void *prefetch_run(void *p)
{
	Prefetch *f = p;
	f->w = wsrc_open(f->path, f->key, f->a, &f->e);
	/* The mapping asks for keys by prefix: 80 000 of them sorted here
	 * were 3% of a 400-layer repair's main thread. */
	if (f->w)
		wsrc_sort(f->w);
	return NULL;
}

/* What the first source() call will most likely open, and with which
 * key; nothing for a diagnosis, or a check, which reads weights only for a
 * damaged layer (the healthy models a pre-commit hook checks read none). */
static const char *likely(const Spec *spec, const Opts *o, const char **key)
{
	const SpecLayer *first = spec && spec->nlayer ? &spec->layer[0] : NULL;
	*key = first ? first->checkpoint_key : NULL;
	if (o->check_only || (!spec && !o->layout))
		return NULL;
	return o->weights ? o->weights : first ? first->weights : NULL;
}

static void prefetch_start(Prefetch *f, const char *path, const char *key)
{
	memset(f, 0, sizeof *f);
	if (!path || !(f->a = arena_new()))
		return;
	f->path = path;
	f->key = key;
	f->running = spawn(&f->th, prefetch_run, f);
	if (!f->running) {
		arena_free(f->a);
		f->a = NULL;
	}
}

/* Waits for the thread: its result is ready. */
static void prefetch_join(Prefetch *f)
{
	pthread_join(f->th, NULL);
	f->running = 0;
}

/* At the end: a result no source() call took is closed. */
static void prefetch_end(Prefetch *f)
{
	if (!f->running)
		return;
	prefetch_join(f);
	wsrc_close(f->w);
	arena_free(f->a);
}

Prefetch *pipeline_prefetch(Arena *a, const Spec *spec, const Opts *o)
{
	const char *key, *path = likely(spec, o, &key);
	if (!path)
		return NULL;
	Prefetch *f = arena_alloc(a, sizeof *f);
	prefetch_start(f, path, key);
	return f;
}

void pipeline_prefetch_end(Prefetch *f)
{
	if (f)
		prefetch_end(f);
}

enum { DROP_EVERY = 8 << 20 };

/* The weight sources a run opened: closed after the last layer's repair,
 * or by model_close after the save when later tensors read them then. */
typedef struct {
	Open *o;
	size_t n;
} Opened;

static void close_opened(void *p)
{
	Opened *op = p;
	for (size_t i = 0; i < op->n; i++) {
		wsrc_close(op->o[i].w);
		arena_free(op->o[i].a);
	}
	op->n = 0;
}

/* Their pages read so far leave the process (see wsrc_drop). */
static void drop_opened(void *p)
{
	Opened *op = p;
	for (size_t i = 0; i < op->n; i++)
		wsrc_drop(op->o[i].w);
}

typedef struct {
	Opened *op;
	Prefetch *pf;
} Sources;

static int same_key(const char *a, const char *b)
{
	return a == b || (a && b && strcmp(a, b) == 0);
}

static WSrc *source(Sources *ss, const SpecLayer *s, Err *e)
{
	if (!s->weights)
		return NULL;
	Opened *op = ss->op;
	for (size_t i = 0; i < op->n; i++)
		if (strcmp(op->o[i].path, s->weights) == 0)
			return op->o[i].w;
	Prefetch *f = ss->pf;
	WSrc *w;
	Arena *a;
	if (f->running && strcmp(f->path, s->weights) == 0 && same_key(f->key, s->checkpoint_key)) {
		prefetch_join(f);
		w = f->w;
		if (!w)
			*e = f->e;
		a = f->a; /* as if opened here */
		f->a = NULL;
	} else {
		a = arena_new();
		w = wsrc_open(s->weights, s->checkpoint_key, a, e);
	}
	if (w)
		op->o[op->n++] = (Open){ s->weights, w, a };
	else
		arena_free(a);
	/* The file is refused: the line naming it is where to fix that. */
	if (!w && s->weights_at)
		errwrap(e, "%s", s->weights_at);
	return w;
}

static WSrc *bind_source(void *ud, const SpecLayer *s, Err *e)
{
	Sources *ss = ud;
	WSrc *w = source(ss, s, e);
	if (!w && !s->weights)
		errf(e, "layer %s: node names do not tell which router it is, and it has no weights to tell by value; set `weights:` (or --weights) or router.indices",
		     spec_scope_shown(s->scope));
	return w;
}

static int ext_data(void *md, const Tensor *t, const void **p, size_t *n, Err *e)
{
	return model_tensor_data(md, t, p, n, e);
}

/* Over the index's tree of graphs, current after g_init and tidy: walking
 * every node's attributes for bodies touched each of a graph-heavy
 * model's 37 600 attribute structs, twice a repair. */
static int count_convs(const Graph *g)
{
	int n = 0;
	size_t nn = g->gp->n_node;
	Node **nd = g->gp->node;
	for (size_t i = 0; i < nn; i++) {
		/* Each node and its op_type are a cache miss: loaded ahead, two
		 * counts took 2 ms of a 400-layer repair, not 4. */
		if (i + 16 < nn)
			__builtin_prefetch(nd[i + 16]);
		if (i + 8 < nn)
			__builtin_prefetch(nd[i + 8]->op_type);
		n += g_is(nd[i], "Conv");
	}
	for (size_t k = 0; k < g->nsub; k++)
		n += count_convs(g->sub[k]);
	return n;
}

/* A check on a thread of its own: the input's rest (rest_start), or the
 * final check, with the index moved to it: that one infers the shapes it
 * reads there (g_check infers an index not yet inferred), reads the graph
 * the save only reads (the save's placeholders for new weights set a
 * pointer the checker never looks at), and writes only the index. The
 * save asks for its verdict before committing. */
typedef struct {
	Ctx c;
	int (*run)(Ctx *, Err *); /* g_check, or g_check_rest */
	pthread_t th;
	int rc, on; /* on: th runs the input's rest */
	Err e;
	const char *in;
} Verify;

static void *verify_run(void *u)
{
	Verify *v = u;
	v->rc = v->run(&v->c, &v->e);
	return NULL;
}

static int verify_join(void *u, Err *e)
{
	Verify *v = u;
	pthread_join(v->th, NULL);
	g_fini(&v->c);
	if (!v->rc)
		return 0;
	*e = v->e;
	/* As a pass error reads when the check runs before the save. */
	return errwrap(e, "%s", v->in);
}

/* The input's check past its flow (g_check_rest: tensors, element
 * types, attribute ranges) on the second core while this one finds the
 * MoE layers, on a g_reader of c: both only read the index, and neither
 * needs the other's result (on a 400-layer model the whole check was 27
 * ms of the main thread, its flow 11, the second core idle there).
 * Without a thread it runs here, first. */
static void rest_start(Verify *v, const Ctx *c)
{
	g_reader(c, &v->c);
	v->run = g_check_rest;
	if ((v->on = spawn(&v->th, verify_run, v)))
		return;
	v->rc = g_check_rest(&v->c, &v->e);
}

/* The rest's verdict; its error is the one a check run before the pass
 * would have given, so it is kept over the pass's (found: its return). */
static int rest_join(Verify *v, int found, Err *e)
{
	if (v->on)
		pthread_join(v->th, NULL);
	if (!v->rc)
		return found;
	*e = v->e;
	return -1;
}

/* Starts the check of c's model, which it takes over (c is left empty):
 * 1, or 0 when no thread could be made (c untouched). */
static int verify_start(Model *md, Ctx *c)
{
	Verify *v = arena_alloc(md->a, sizeof *v);
	v->c = *c;
	v->run = g_check;
	v->in = md->path;
	if (!spawn(&v->th, verify_run, v))
		return 0;
	memset(c, 0, sizeof *c);
	md->verify = verify_join;
	md->verify_ud = v;
	return 1;
}

/* Dead nodes out, then a stable topological sort; each step needs the
 * index of the graph as the previous step left it. The shapes and types
 * of the result are inferred by whatever reads them next (the If folding,
 * the check): the check infers on the second core, while the model is
 * written, and a run without If nodes or without a check infers nothing
 * more (the inference of 65 000 nodes was 6% of a 400-layer repair's
 * main thread). */
static int tidy(Ctx *c, Err *e)
{
	/* Dead-node elimination and the sort read producers and positions,
	 * which the mutation API keeps current; after them only the use
	 * lists are stale, and a refresh renews those (a model with bodies
	 * is rebuilt). */
	g_dce(c);
	if (g_toposort(c, c->g, e))
		return -1;
	return g_refresh(c, e);
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

static void report_layer(Arena *a, const Layer *L, LayerReport *lr)
{
	lr->scope = L->spec->scope; /* the JSON report's is experts.yaml's */
	lr->experts = L->spec->experts;
	lr->top_k = L->spec->top_k;
	lr->present = arena_alloc(a, (L->nex + 1) * sizeof *lr->present);
	for (size_t k = 0; k < L->nex; k++)
		lr->present[lr->npresent++] = L->ex[k].id;
	lr->ifs = L->nif;
	lr->nodes_before = lr->nodes_after = L->nodes;
	lr->convs_before = lr->convs_after = L->convs;
	lr->dense = FORM_STATIC(L->form);
	lr->dispatch = L->form == FORM_SPARSE ? "sparse" : L->form == FORM_DENSE ? "dense" : NULL;
	lr->expert_flops = -1;
	lr->inserted = arena_alloc(a, ((size_t)L->spec->experts + 1) * sizeof *lr->inserted);
}

/* An experts.yaml layer without `expert:` whose checkpoint has nothing
 * under the default experts.{i} takes the expert pattern node names show
 * under its own scope ("fused_experts.expert_projections.{i}"): torch
 * names nodes by module path, the checkpoint's key path, and every key
 * the pattern yields is verified by value when the weights are mapped.
 * The YAML's spec may serve other inputs, so a changed layer goes into a
 * copy, which the report and --emit-experts show. NULL on error. */
static const Spec *named_patterns(Ctx *c, Sources *ss, Arena *a, const Spec *spec, Layer **bound, Err *e)
{
	Spec *s2 = NULL;
	for (size_t i = 0; i < spec->nlayer; i++) {
		const SpecLayer *sl = &spec->layer[i];
		const Layer *l = bound[i];
		if (sl->expert_given || FORM_STATIC(l->form) || (int)l->nex >= sl->experts || !l->nex || !l->module ||
		    !l->pattern || strcmp(l->module, sl->scope) != 0 || strcmp(l->pattern, sl->expert) == 0)
			continue;
		WSrc *w = source(ss, sl, e);
		if (!w) {
			if (sl->weights)
				return NULL;
			continue;
		}
		size_t lo, hi;
		wsrc_range(w, arena_printf(c->a, "%s%s.", sl->prefix ? sl->prefix : "", expert_path(c, sl, l->ex[0].id)), &lo, &hi);
		if (lo != hi)
			continue;
		if (!s2) {
			s2 = arena_dup(a, spec, sizeof *spec);
			s2->layer = arena_dup(a, spec->layer, (spec->nlayer + 1) * sizeof *spec->layer);
			for (size_t j = 0; j < spec->nlayer; j++)
				if (bound[j])
					bound[j]->spec = &s2->layer[j];
		}
		s2->layer[i].expert = l->pattern;
	}
	return s2 ? s2 : spec;
}

int pipeline_run(Model *md, const Spec *spec, const Opts *o, Report *r, Err *e)
{
	Ctx c;
	Layer *L = NULL;
	size_t nl = 0;
	Opened *op = arena_alloc(md->a, sizeof *op);
	int ret = -1, dry = 0; /* dry: a check is running the repair */
	memset(r, 0, sizeof *r);
	/* The caller's prefetch, started before the model's load, else one
	 * from here on. */
	Prefetch own = { 0 }, *pf = o->prefetch;
	if (!pf) {
		const char *key, *path = likely(spec, o, &key);
		prefetch_start(pf = &own, path, key);
	}
	/* The second core, idle once the checkpoint is open: it populates
	 * the next arena block while this one fills the last. */
	arena_prefill(1);
	/* A model-local function hides its nodes from every analysis (a MoE
	 * kept as one was "no MoE router found"): calls are inlined first,
	 * and written so when the model is repaired. */
	Inlined inl;
	if (model_inline(md->m, md->a, &inl, e))
		goto out;
	r->inlined = (int)inl.n;
	/* The passes walk producers and consumers assuming a well-formed graph:
	 * cycles, values defined twice or never are refused before any runs. */
	if (g_init(&c, md->m, md->a, e) || sort_all(&c, c.g, e) || g_infer(&c, e) || g_check_flow(&c, e))
		goto out;
	c.ext = ext_data;
	c.ext_ud = md;
	g_zeros(&c, md->zeros, md->nzeros);
	Verify rest;
	rest_start(&rest, &c);
	r->convs_before = r->convs_after = count_convs(c.g);

	if (o->progress)
		progress_step(o->progress, "finding MoE layers", 1, 1, NULL);
	if (rest_join(&rest, moe_find(&c, spec, !spec && !o->layout, &L, &nl, e), e))
		goto out;
	op->o = arena_alloc(md->a, ((spec ? spec->nlayer : nl) + 2) * sizeof *op->o);
	Sources ss = { op, pf };
	if (!spec && !o->layout) {
		ret = moe_scan(&c, L, nl, r, e);
		goto out;
	}
	if (!spec) {
		/* Zero-config: the spec the graph and the checkpoint imply. */
		Spec *inferred = arena_alloc(md->a, sizeof *inferred);
		SpecLayer any = { .weights = o->weights };
		WSrc *w = o->weights ? source(&ss, &any, e) : NULL;
		if (o->weights && !w)
			goto out;
		if (moe_layout(&c, L, nl, w, o->weights, inferred, e))
			goto out;
		spec = inferred;
	} else if (o->weights) {
		/* --weights replaces experts.yaml's weights, layer by layer. */
		Spec *s2 = arena_dup(md->a, spec, sizeof *spec);
		s2->weights = o->weights;
		s2->weights_at = NULL;
		s2->layer = arena_dup(md->a, spec->layer, (spec->nlayer + 1) * sizeof *spec->layer);
		for (size_t i = 0; i < s2->nlayer; i++) {
			s2->layer[i].weights = o->weights;
			s2->layer[i].weights_at = NULL;
		}
		spec = s2;
	}

	Layer **bound = arena_alloc(md->a, (spec->nlayer + 1) * sizeof *bound);
	if (moe_bind(&c, spec, L, nl, bound, bind_source, &ss, e))
		goto out;
	if (!(spec = named_patterns(&c, &ss, md->a, spec, bound, e)))
		goto out;
	r->spec = spec;
	r->bound_at = progress_now();
	r->bound_cpu = progress_cpu();
	r->layer = arena_alloc(md->a, (spec->nlayer + 1) * sizeof *r->layer);
	/* Every layer is repaired on the index of the model as exported: the
	 * repairs keep the names other layers read, and no layer's detection
	 * depends on another's repair, so one reindex after all of them
	 * suffices (one per layer would make the repair quadratic in layers). */
	/* The first layer drops what opening and binding read too: the
	 * header of a checkpoint of small tensors is as large as its data. */
	size_t read = DROP_EVERY;
	/* The weights each layer compares are split over both cores (duo.h). */
	duo_start();
	/* The helper keeps populating through the layers, which make most of
	 * the new memory: the block it holds ready adds 2 MiB to the peak,
	 * the layers' own population stalls cost more (a 400-layer repair,
	 * ten runs each, turns about after Python's: median 0.385 -> 0.335 s,
	 * peak RSS 106 -> 108 MiB). */
	for (size_t i = 0; i < spec->nlayer; i++) {
		Layer *l = bound[i];
		LayerReport *lr = &r->layer[r->nlayer++];
		report_layer(md->a, l, lr);
		if (FORM_STATIC(l->form))
			continue;
		r->damaged = 1;
		LayerReport dryr;
		if (o->check_only) {
			/* What a repair would insert. */
			for (int id = 0, k = 0; id < l->spec->experts; id++) {
				if (k < lr->npresent && lr->present[k] == id)
					k++;
				else
					lr->inserted[lr->ninserted++] = id;
			}
			/* With the weights it needs, the check runs the repair,
			 * unsaved and kept out of the report: "needs repair" then
			 * says this checkpoint can do it, and one that cannot
			 * stops the check with the repair's line. */
			if (!l->spec->weights && (int)l->nex < l->spec->experts)
				continue;
			dry = 1;
			dryr = *lr;
			dryr.ninserted = 0;
			dryr.inserted = arena_alloc(c.tmp, ((size_t)l->spec->experts + 1) * sizeof *dryr.inserted);
			lr = &dryr;
		}
		if (o->progress)
			progress_step(o->progress, "rebuilding experts, layer", i + 1, spec->nlayer, NULL);
		WSrc *w = NULL;
		if ((int)l->nex < l->spec->experts && !(w = source(&ss, l->spec, e)) && l->spec->weights)
			goto out;
		lr->expert_flops = moe_expert_flops(l);
		size_t expert_bytes = moe_expert_bytes(&c, l);
		int sparse = 0;
		size_t later0 = c.nlater;
		if ((o->dispatch == DISPATCH_SPARSE && (sparse = moe_sparse(&c, l, w, lr, e)) < 0) ||
		    (!sparse && moe_densify(&c, l, w, lr, e))) {
			spec_wrap(e, spec, l->spec);
			goto out;
		}
		const char *at = spec_where(md->a, spec, l->spec);
		for (size_t k = later0; k < c.nlater; k++)
			c.later[k]->at = at;
		if (!sparse)
			lr->dispatch = "dense";
		/* The layer's mappings, converted checkpoint tensors and
		 * renaming maps go with it. */
		arena_reset(c.tmp);
		/* Checkpoint and external data pages read so far leave the
		 * process once the layers since the last drop may have read
		 * DROP_EVERY bytes: resident memory stays about the output's
		 * size. A layer reads each expert at most once from the
		 * checkpoint and each present one once from the model. A drop
		 * walks every mapping and, once the prefetch thread has run on
		 * the other core, sends it a TLB shootdown: after every layer of
		 * 400 of tiny experts that was 8% of the passes. */
		read += (l->spec->experts + l->nex) * expert_bytes;
		if (read >= DROP_EVERY) {
			drop_opened(op);
			model_drop(md);
			read = 0;
		}
		r->changed = 1;
	}
	duo_stop();
	/* A check runs the repair unsaved: the new weights the save would
	 * build are built too, and dropped, so that one the save would refuse
	 * (a NaN in a missing expert) stops the check as it would the repair. */
	if (o->check_only && c.nlater) {
		size_t most = 0;
		for (size_t i = 0; i < c.nlater; i++)
			most = c.later[i]->t->raw_data.len > most ? c.later[i]->t->raw_data.len : most;
		/* One buffer for all: a new one each would be fresh pages each. */
		void *buf = arena_try(md->a, most, e);
		if (!buf)
			goto out;
		for (size_t i = 0; i < c.nlater; i++) {
			if (later_fill(c.later[i], buf, c.tmp, e))
				goto out;
			arena_reset(c.tmp);
		}
	}
	/* Nothing reads the checkpoints after the repairs but the save's
	 * builds of new weights: without those, their indexes and mappings go
	 * now, before the index is refreshed and inferred again. */
	if (!c.nlater)
		close_opened(op);
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
	int check = r->changed && !o->no_check;
	if (r->changed && !o->check_only)
		r->convs_after = count_convs(c.g);
	/* On the second core the check infers first. After tidy's refresh
	 * every node input is resolved, so the inference, like the check,
	 * only reads the model: no external data, and no value of a new weight
	 * the save places (those are 16 KiB or more, and the inference reads
	 * the values of tensors of at most 64 elements). */
	if (check && !o->check_async) {
		if (g_check(&c, e))
			goto out;
		check = 0;
	}
	if (o->check_only)
		r->changed = 0; /* the dry repairs: nothing is written */
	if (!r->changed)
		model_uninline(md->m, &inl);
	ret = 0;
	if (c.nlater) {
		/* The new weights are read when the model is written. */
		md->later = c.later;
		md->nlater = c.nlater;
		md->done = close_opened;
		md->drop = drop_opened;
		md->done_ud = op;
		op = NULL;
	}
	if (check && !verify_start(md, &c) && g_check(&c, e))
		ret = -1;
out:
	if (ret < 0 && dry)
		errwrap(e, "needs repair, and the repair would stop");
	duo_stop();
	prefetch_end(&own);
	arena_prefill(0);
	if (op)
		close_opened(op);
	g_fini(&c);
	return ret;
}
