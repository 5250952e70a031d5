/* torch.save checkpoints (.pt/.pth): a zip holding <archive>/data.pkl and
 * one member per storage, <archive>/data/<key>. The pickle is run by the
 * restricted interpreter; storages are members of the mapped file, so
 * contiguous tensors are read in place and only strided views are copied. */
#include "wsrc.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "pickle.h"
#include "zip.h"

_Static_assert((int)PK_MAXDIM <= (int)WT_MAXDIM, "a tensor the pickle accepts must fit a WTensor");

typedef struct {
	WSrc *w;
	Zip z;
	const char *archive; /* "name/" */
	Map data;            /* member name -> WMapping of its bytes (in place, or inflated) */
	size_t visits;       /* modules walked: shared submodules multiply paths */
	size_t pathbytes;    /* bytes of the module paths made so far */
	size_t copied, maxcopy; /* bytes of strided views copied out dense, and the cap */
} Pt;

/* A module shared under two names is walked twice, as state_dict() does;
 * these bounds stop a hostile pickle from doubling that at every level or
 * growing names without end. 2^20 visits of long paths took a 2 KB file
 * 4 s and 270 MB: the walk is capped at 2^16 modules (a large LLM has a
 * few thousand) and 32 MB of path names. */
enum { MAXVISITS = 1 << 16, MAXNAME = 4096, MAXPATHBYTES = 1 << 25 };

static int resolve(void *ctx, PkStorage *st, Err *e)
{
	Pt *c = ctx;
	const char *name = arena_printf(c->w->a, "%sdata/%s", c->archive, st->key);
	WMapping *m = map_get(&c->data, name);
	if (!m) {
		const ZipMember *zm = zip_find(&c->z, name);
		if (!zm)
			return errf(e, "storage '%s': member %s is missing; the checkpoint is incomplete",
				st->key, name);
		const void *p;
		if (zip_read(&c->z, zm, &p, e)) /* its messages name the member */
			return -1;
		m = arena_alloc(c->w->a, sizeof *m);
		m->base = (void *)p;
		m->len = (size_t)zm->usize;
		map_put(&c->data, name, m);
	}
	st->data = m->base;
	st->nbytes = m->len;
	return 0;
}

/* Copies a strided view into a dense row-major buffer, one innermost run
 * at a time when that run is contiguous. */
static void gather(const PkTensor *t, const unsigned char *src, unsigned char *dst)
{
	int nd = t->ndim;
	int64_t idx[PK_MAXDIM] = { 0 };
	size_t es = (size_t)t->elsize;
	int64_t inner = nd ? t->size[nd - 1] : 1, istride = nd ? t->stride[nd - 1] : 1;
	int outer = nd ? nd - 1 : 0;
	for (;;) {
		int64_t off = 0;
		for (int i = 0; i < outer; i++)
			off += idx[i] * t->stride[i];
		const unsigned char *s = src + (size_t)off * es;
		if (istride == 1) {
			memcpy(dst, s, (size_t)inner * es);
			dst += (size_t)inner * es;
		} else {
			for (int64_t j = 0; j < inner; j++, dst += es)
				memcpy(dst, s + (size_t)(j * istride) * es, es);
		}
		int i = outer - 1;
		for (; i >= 0; i--) {
			if (++idx[i] < t->size[i])
				break;
			idx[i] = 0;
		}
		if (i < 0)
			return;
	}
}

static int add(Pt *c, const char *name, const PkTensor *t, Err *e)
{
	int64_t dims[WT_MAXDIM];
	WTensor wt = { .name = name, .dtype = t->dtype, .ndim = t->ndim, .dims = dims };
	memcpy(wt.dims, t->size, (size_t)t->ndim * sizeof *t->size);
	wt.nbytes = (size_t)pk_tensor_nbytes(t);
	const unsigned char *base = t->st->data;
	if (wt.nbytes == 0)
		wt.data = base;
	else if (t->contiguous)
		wt.data = base + (size_t)t->offset * (size_t)t->elsize;
	else {
		/* The copy is no larger than its storage (pickle.c), but many
		 * views of one storage add up: checked against the budget. */
		if (wt.nbytes > c->maxcopy - c->copied)
			return errf(e, "%s: strided views copied out dense would take more than %zu bytes (twice the file, plus 64 MiB); many views share one storage, the checkpoint is hostile or damaged",
				c->w->path, c->maxcopy);
		c->copied += wt.nbytes;
		unsigned char *dst = arena_try(c->w->a, wt.nbytes, e);
		if (!dst)
			return errwrap(e, "tensor '%s' (a strided view copied out dense)", name);
		gather(t, base + (size_t)t->offset * (size_t)t->elsize, dst);
		wt.data = dst;
	}
	return wsrc_add(c->w, &wt, e);
}

static const char *join(Pt *c, const char *prefix, const PkVal *k)
{
	return arena_printf(c->w->a, "%s%s", prefix, k->u.str.s);
}

/* Names usable as keys: str without NUL bytes. */
static int strkey(const PkVal *k)
{
	return k->kind == PK_STR && strlen(k->u.str.s) == k->u.str.len;
}

static int add_entries(Pt *c, const char *prefix, const PkVal *d, const char *what,
	const Map *skip, Err *e)
{
	if (!d || d->kind == PK_NONE)
		return 0;
	if (d->kind != PK_DICT)
		return errf(e, "%s: %s%s is a %s, not a dict; the checkpoint is not a torch module",
			c->w->path, prefix, what, pk_kind_name(d->kind));
	for (size_t i = 0; i < d->u.dict.n; i++) {
		const PkVal *k = d->u.dict.k[i], *v = d->u.dict.v[i];
		if (!strkey(k) || v->kind == PK_NONE || (skip && map_get(skip, k->u.str.s)))
			continue;
		if (v->kind != PK_TENSOR)
			return errf(e, "%s: %s%s is a %s (%s), not a tensor; this reader handles dense tensors only",
				c->w->path, prefix, k->u.str.s, pk_kind_name(v->kind),
				v->kind == PK_OBJ ? v->u.obj.cls : what);
		if (add(c, join(c, prefix, k), &v->u.t, e))
			return -1;
	}
	return 0;
}

static int ismodule(const PkVal *v)
{
	return v->kind == PK_OBJ && (pk_attr(v, "_parameters") || pk_attr(v, "_modules"));
}

/* Appends to b (cap bytes, *n used); past cap, counts only: the caller
 * drops a signature that did not fit. */
static void cat(char *b, size_t cap, size_t *n, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static void cat(char *b, size_t cap, size_t *n, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	int k = vsnprintf(*n < cap ? b + *n : NULL, *n < cap ? cap - *n : 0, fmt, ap);
	va_end(ap);
	*n += k > 0 ? (size_t)k : 0;
}

/* A value of a module's shape attributes in words: an int, a string, a
 * bool, a float, None or a tuple of ints; anything else is not structure. */
static int sig_val(const PkVal *x, char *b, size_t cap, size_t *n)
{
	switch (x->kind) {
	case PK_INT:
	case PK_BOOL:
		cat(b, cap, n, "%lld", (long long)x->u.i);
		return 0;
	case PK_FLOAT:
		cat(b, cap, n, "%.17g", x->u.f);
		return 0;
	case PK_STR:
		cat(b, cap, n, "%.40s", x->u.str.s);
		return 0;
	case PK_NONE:
		cat(b, cap, n, "None");
		return 0;
	case PK_TUPLE:
	case PK_LIST:
		if (x->u.seq.n > 8)
			return -1;
		for (size_t i = 0; i < x->u.seq.n; i++)
			if (x->u.seq.v[i]->kind != PK_INT)
				return -1;
		cat(b, cap, n, "(");
		for (size_t i = 0; i < x->u.seq.n; i++)
			cat(b, cap, n, "%s%lld", i ? "," : "", (long long)x->u.seq.v[i]->u.i);
		cat(b, cap, n, ")");
		return 0;
	default:
		return -1;
	}
}

static const char *const shape[] = { "kernel_size", "stride", "padding", "dilation", "groups",
				     "padding_mode", "output_padding", "transposed", "num_groups",
				     "negative_slope", "scale_factor", "mode", "align_corners", "dim",
				     "approximate", "upscale_factor", "output_size" };

/* Whether a module's own attribute belongs in the signature after the
 * shape list: every public bool is a switch of its forward (a
 * Bottleneck's `add`, a pool's `ceil_mode`), every public float a
 * constant of it (an ELU's alpha, a gain kept as a Python float), and in
 * torch's own layers every public attribute is configuration (a
 * Softplus's int beta); but not those an export does not compute with:
 * `training`, `inplace`, a dropout's `p`, `drop_prob` or `dropout`, a
 * norm's `momentum`; a norm's `eps` is read per expert elsewhere
 * (wmap.c). Ints of other modules are left out, as a module may keep its
 * index or a count (seven real YOLO-Master checkpoints differ in none of
 * them between experts, nor in any bool or float). */
static int state_attr(const char *name, PkKind kind, int torch_own)
{
	static const char *const inert[] = { "training", "inplace", "p", "drop_prob", "dropout", "momentum", "eps" };
	if (name[0] == '_' || (kind != PK_BOOL && kind != PK_FLOAT && !torch_own))
		return 0;
	for (size_t i = 0; i < sizeof inert / sizeof *inert; i++)
		if (!strcmp(name, inert[i]))
			return 0;
	for (size_t i = 0; i < sizeof shape / sizeof *shape; i++)
		if (!strcmp(name, shape[i]))
			return 0; /* listed already */
	return 1;
}

/* " name=value" onto b, or nothing for a value sig_val cannot print. */
static void sig_attr(char *b, size_t cap, size_t *n, const char *name, const PkVal *x)
{
	size_t at = *n;
	cat(b, cap, n, " %.40s=", name);
	if (sig_val(x, b, cap, n) < 0 && at < cap) {
		*n = at;
		b[at] = 0;
	}
}

/* The module's class and the attributes torch's layers keep that change
 * what they compute for weights of one shape: a missing expert rebuilt
 * from a present one's graph must agree on them (a conv dilated per
 * expert fits the template's weights and computes otherwise), and on
 * its own switches and constants (state_attr). Values, eps included,
 * are read elsewhere, per expert. */
static void record_sig(Pt *c, const char *prefix, const PkVal *v)
{
	char b[512];
	size_t n = 0;
	cat(b, sizeof b, &n, "%.80s", v->u.obj.cls);
	for (size_t i = 0; i < sizeof shape / sizeof *shape; i++) {
		const PkVal *x = pk_attr(v, shape[i]);
		if (x)
			sig_attr(b, sizeof b, &n, shape[i], x);
	}
	int torch_own = strncmp(v->u.obj.cls, "torch.nn.modules.", 17) == 0;
	const PkVal *st = pk_state(v);
	for (size_t i = 0; st && i < st->u.dict.n; i++) {
		const PkVal *k = st->u.dict.k[i], *x = st->u.dict.v[i];
		if (k->kind == PK_STR && state_attr(k->u.str.s, x->kind, torch_own))
			sig_attr(b, sizeof b, &n, k->u.str.s, x);
	}
	if (n >= sizeof b)
		return; /* a hostile length: no signature rather than a cut one */
	if (!c->w->sig.a)
		map_init(&c->w->sig, c->w->a, 64);
	map_put(&c->w->sig, prefix, arena_strdup(c->w->a, b));
}

/* state_dict order: own parameters, persistent buffers, then children. */
static int walk(Pt *c, const char *prefix, const PkVal *v, int depth, Err *e)
{
	if (depth > PK_MAXDEPTH)
		return errf(e, "%s: module tree deeper than %d levels or cyclic; the checkpoint is damaged",
			c->w->path, PK_MAXDEPTH);
	if (strlen(prefix) > MAXNAME)
		return errf(e, "%s: module path '%.40s...' longer than %d bytes; the module tree is cyclic or the checkpoint hostile",
			c->w->path, prefix, MAXNAME);
	if ((c->pathbytes += strlen(prefix)) > MAXPATHBYTES)
		return errf(e, "%s: module paths longer than %d bytes in all (shared submodules under long names); the checkpoint is hostile or damaged",
			c->w->path, MAXPATHBYTES);
	if (++c->visits > MAXVISITS)
		return errf(e, "%s: module tree with more than %d module paths (shared submodules at every level); the checkpoint is hostile or damaged",
			c->w->path, MAXVISITS);
	/* A state_dict: tensors by key; other entries are not weights, except
	 * tensors this reader cannot take (quantized, sparse, meta, > 8 dims),
	 * which must not vanish silently. */
	if (v->kind == PK_DICT)
		for (size_t i = 0; i < v->u.dict.n; i++) {
			const PkVal *k = v->u.dict.k[i], *x = v->u.dict.v[i];
			if (!strkey(k))
				continue;
			if (x->kind == PK_OBJ && strncmp(x->u.obj.cls, "torch._utils._rebuild", 21) == 0)
				return errf(e, "%s: %s%s is a %s; this reader handles dense tensors only",
					c->w->path, prefix, k->u.str.s, x->u.obj.cls);
			if (x->kind == PK_TENSOR && add(c, join(c, prefix, k), &x->u.t, e))
				return -1;
		}
	if (!ismodule(v))
		return 0;
	if (*prefix)
		record_sig(c, prefix, v);
	if (add_entries(c, prefix, pk_attr(v, "_parameters"), "_parameters", NULL, e))
		return -1;
	Map skip = { .a = c->w->a };
	const PkVal *np = pk_attr(v, "_non_persistent_buffers_set");
	if (np && np->kind == PK_SET)
		for (size_t i = 0; i < np->u.seq.n; i++)
			if (strkey(np->u.seq.v[i]))
				map_put(&skip, np->u.seq.v[i]->u.str.s, (void *)1);
	if (add_entries(c, prefix, pk_attr(v, "_buffers"), "_buffers", &skip, e))
		return -1;
	/* Normalisation layers keep their epsilon as a plain attribute: folding
	 * them needs it, and guessing it from values is loose at fp16. */
	const PkVal *eps = pk_attr(v, "eps");
	if (eps && eps->kind == PK_FLOAT && *prefix) {
		if (!c->w->attr.a)
			map_init(&c->w->attr, c->w->a, 16);
		double *d = arena_alloc(c->w->a, sizeof *d);
		*d = eps->u.f;
		map_put(&c->w->attr, arena_printf(c->w->a, "%seps", prefix), d);
	}
	const PkVal *mods = pk_attr(v, "_modules");
	if (!mods || mods->kind == PK_NONE)
		return 0;
	if (mods->kind != PK_DICT)
		return errf(e, "%s: %s_modules is a %s, not a dict; the checkpoint is not a torch module",
			c->w->path, prefix, pk_kind_name(mods->kind));
	for (size_t i = 0; i < mods->u.dict.n; i++) {
		const PkVal *k = mods->u.dict.k[i], *m = mods->u.dict.v[i];
		if (!strkey(k) || m->kind == PK_NONE)
			continue;
		if (!ismodule(m))
			return errf(e, "%s: submodule %s%s is a %s (%s), not a module",
				c->w->path, prefix, k->u.str.s, pk_kind_name(m->kind),
				m->kind == PK_OBJ ? m->u.obj.cls : "-");
		if (walk(c, arena_printf(c->w->a, "%s%s.", prefix, k->u.str.s), m, depth + 1, e))
			return -1;
	}
	return 0;
}

/* The dict's string keys, for messages. */
static const char *keys(Pt *c, const PkVal *d)
{
	const char *s = "";
	size_t n = 0;
	for (size_t i = 0; i < d->u.dict.n; i++) {
		if (!strkey(d->u.dict.k[i]))
			continue;
		if (n++ == 12)
			return arena_printf(c->w->a, "%s, ...", s);
		s = arena_printf(c->w->a, "%s%s'%s'", s, n > 1 ? ", " : "", d->u.dict.k[i]->u.str.s);
	}
	return n ? s : "none";
}

/* A dict holding tensors by name (not a checkpoint dict of entries). */
static int statedict(const PkVal *d)
{
	if (d->kind != PK_DICT)
		return 0;
	for (size_t i = 0; i < d->u.dict.n; i++)
		if (d->u.dict.v[i]->kind == PK_TENSOR)
			return 1;
	return 0;
}

/* Which object holds the weights: the named entry, else the detector
 * convention (ema when set, else model), else the file itself. */
static const PkVal *select_(Pt *c, const PkVal *top, const char *key, const char **what, Err *e)
{
	*what = "the checkpoint";
	if (key) {
		const PkVal *v = pk_dict_get(top, key);
		if (!v && statedict(top)) {
			errf(e, "%s: checkpoint_key '%s' given but the file is itself a state_dict (tensors by name); drop checkpoint_key",
				c->w->path, key);
			return NULL;
		}
		if (!v) {
			errf(e, "%s: checkpoint_key '%s' not found; %s", c->w->path, key,
				top->kind == PK_DICT ? arena_printf(c->w->a, "entries: %s", keys(c, top)) :
				arena_printf(c->w->a, "the file holds a %s, not a dict; drop checkpoint_key",
					top->kind == PK_OBJ ? top->u.obj.cls : pk_kind_name(top->kind)));
			return NULL;
		}
		if (v->kind == PK_NONE) {
			errf(e, "%s: checkpoint entry '%s' is None; choose another checkpoint_key (entries: %s)",
				c->w->path, key, keys(c, top));
			return NULL;
		}
		*what = arena_printf(c->w->a, "entry '%s'", key);
		return v;
	}
	if (top->kind != PK_DICT)
		return top;
	static const char *const pref[] = { "ema", "model" };
	for (int i = 0; i < 2; i++) {
		const PkVal *v = pk_dict_get(top, pref[i]);
		if (v && v->kind != PK_NONE) {
			*what = arena_printf(c->w->a, "entry '%s'", pref[i]);
			return v;
		}
	}
	return top;
}

/* torch.save writes <archive>/data.pkl; torch.jit.save writes one too,
 * beside constants.pkl and code/, with a different object layout. */
static int archive(Pt *c, const ZipMember **pkl, Err *e)
{
	for (size_t i = 0; i < c->z.n; i++) {
		const char *n = c->z.m[i].name, *sl = strchr(n, '/');
		if (sl && strcmp(sl, "/constants.pkl") == 0)
			return errf(e, "%s: a TorchScript archive (torch.jit.save), not a torch.save checkpoint; save the model's state_dict with torch.save",
				c->w->path);
		if (sl && strcmp(sl, "/data.pkl") == 0 && !*pkl) {
			c->archive = arena_printf(c->w->a, "%.*s/", (int)(sl - n), n);
			*pkl = &c->z.m[i];
		}
	}
	if (!*pkl)
		return errf(e, "%s: zip without <archive>/data.pkl; not a torch.save checkpoint", c->w->path);
	return 0;
}

static int byteorder(Pt *c, Err *e)
{
	const char *name = arena_printf(c->w->a, "%sbyteorder", c->archive);
	const ZipMember *m = zip_find(&c->z, name);
	if (!m) /* before torch 2.0 no byteorder was written: little-endian */
		return 0;
	const void *p;
	if (zip_read(&c->z, m, &p, e))
		return errwrap(e, "%s: member %s", c->w->path, name);
	if (m->usize == 6 && memcmp(p, "little", 6) == 0)
		return 0;
	if (m->usize == 3 && memcmp(p, "big", 3) == 0)
		return errf(e, "%s: big-endian checkpoint; load and re-save it with torch.save on a little-endian machine",
			c->w->path);
	return errf(e, "%s: member %s holds neither 'little' nor 'big'; the checkpoint is damaged",
		c->w->path, name);
}

int wsrc_read_pt(WSrc *w, const char *key, Err *e)
{
	const void *base;
	size_t len;
	if (wsrc_mmap(w, w->path, &base, &len, e))
		return -1;
	const unsigned char *b = base;
	if (len >= 2 && b[0] == 0x80 && b[1] >= 2 && b[1] <= 5)
		return errf(e, "%s: legacy torch.save format (torch < 1.6); load and re-save it with a newer torch, or save it as safetensors",
			w->path);
	/* Each view is inside its storage, so honest copies add up to no
	 * more than the storages, which the file holds. */
	Pt c = { .w = w, .data = { .a = w->a }, .maxcopy = (len < SIZE_MAX / 4 ? 2 * len : SIZE_MAX / 2) + ((size_t)64 << 20) };
	if (zip_open(&c.z, base, len, w->a, e))
		return errwrap(e, "%s", w->path);
	const ZipMember *pkl = NULL;
	if (archive(&c, &pkl, e) || byteorder(&c, e))
		return -1;
	const void *p;
	if (zip_read(&c.z, pkl, &p, e))
		return errwrap(e, "%s: member %s", w->path, pkl->name);
	const char *where = arena_printf(w->a, "%s:%s", w->path, pkl->name);
	PkVal *top = pk_load(p, (size_t)pkl->usize, where, resolve, &c, w->a, e);
	if (!top)
		return -1;
	const char *what;
	const PkVal *sel = select_(&c, top, key, &what, e);
	if (!sel)
		return -1;
	if (sel->kind == PK_TENSOR)
		return errf(e, "%s: %s is a single tensor, not a state_dict or module", w->path, what);
	size_t n0 = w->n;
	if (walk(&c, "", sel, 0, e))
		return -1;
	if (w->n == n0)
		return errf(e, "%s: no tensors in %s (a %s)%s%s", w->path, what,
			sel->kind == PK_OBJ ? sel->u.obj.cls : pk_kind_name(sel->kind),
			top->kind == PK_DICT ? "; choose the entry holding the weights with checkpoint_key, entries: " : "",
			top->kind == PK_DICT ? keys(&c, top) : "");
	return 0;
}
