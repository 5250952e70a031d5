/* Weight mapping: how each tensor of a present expert derives from the
 * checkpoint, so a missing expert's tensors can be built the same way.
 *
 * Exporters fold BatchNorm into the preceding Conv and name the result
 * `onnx::Conv_209`, so names alone do not tell. Each template tensor gets a
 * recipe (by name, by value, by Conv+BN folding, or shared structure), found
 * on the template expert and then verified on every present expert: a
 * recipe that does not rebuild them all is an error, never a guess. */
#include <float.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <unistd.h>

#include "duo.h"
#include "filemap.h"
#include "moe.h"

static const double EPS[] = { 1e-5, 1e-3, 1e-4, 1e-6, 1e-2, 1e-1 };

/* Tensors in a file mapping (filemap.h) of PAGE bytes or more are read
 * through the file. A pread costs about an eighth of a trapped first
 * touch; tensors much smaller than a page share it with neighbours, whose
 * reads a first touch then serves too (400 layers of experts of a few
 * hundred bytes took a third longer with a pread each). Up to SMALL bytes (a
 * convolution's bias or statistics, not its weight, which samples read a
 * few pages of) they are copied whole when first asked for (key_f32). */
enum { PAGE = 1024, SMALL = 64 << 10 };

/* Whether a tensor of nb bytes is of the size copied whole. */
static int whole_sized(size_t nb)
{
	return nb >= PAGE && nb <= SMALL;
}

/* A copy in a of the nb bytes at p, read through the file, when p is a
 * mapped tensor to copy whole (see PAGE); else NULL: read it in place. */
static float *small_copy(Arena *a, const void *p, size_t nb)
{
	if (!whole_sized(nb) || !filemap_has(p, nb))
		return NULL;
	float *f = arena_alloc_raw(a, nb + 1);
	return filemap_read(f, p, nb) ? f : NULL;
}

static int is_float(int dtype)
{
	return dtype == ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT || dtype == ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT16 ||
	       dtype == ONNX__TENSOR_PROTO__DATA_TYPE__BFLOAT16 || dtype == ONNX__TENSOR_PROTO__DATA_TYPE__DOUBLE;
}

static const char *key_prefix(Ctx *c, const Layer *L, int id)
{
	const char *pre = L->spec->prefix ? L->spec->prefix : "";
	return arena_cat(c->a, pre, expert_path(c, L->spec, id), ".", NULL);
}

/* The same into b when it fits, else in the arena: keys are built for
 * every tensor of every new expert, and the arena keeps what it holds
 * (9 MB of key strings on a 400-layer model). */
static const char *key_prefix_in(Ctx *c, const Layer *L, int id, char *b, size_t cap)
{
	const char *pre = L->spec->prefix ? L->spec->prefix : "";
	size_t lp = strlen(pre);
	if (lp < cap) {
		memcpy(b, pre, lp);
		int n = expert_path_to(b + lp, cap - lp, L->spec, id);
		if (n >= 0 && lp + (size_t)n + 1 < cap) {
			b[lp + (size_t)n] = '.';
			b[lp + (size_t)n + 1] = 0;
			return b;
		}
	}
	return key_prefix(c, L, id);
}

/* x then y, in b when it fits, else in the arena. */
static const char *cat_in(Ctx *c, char *b, size_t cap, const char *x, const char *y)
{
	size_t nx = strlen(x), ny = strlen(y);
	char *k = nx + ny < cap ? b : arena_alloc_raw(c->a, nx + ny + 1);
	memcpy(k, x, nx);
	memcpy(k + nx, y, ny + 1);
	return k;
}

/* Aligned f32 bytes are used in place: the arena never frees, and a
 * copy of every tensor read would double the memory of a large repair. */
static const float *as_f32(const void *p, int dtype)
{
	return dtype == ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT && !((uintptr_t)p % _Alignof(float)) ? p : NULL;
}

/* A model tensor as f32 (in place, or converted into the arena), or NULL
 * when it is not a float tensor. External data is read from its file. */
static const float *tensor_f32(Ctx *c, const Tensor *t, int64_t *n)
{
	size_t nb;
	Err e;
	const void *p = g_tensor_bytes(c, t, &nb, &e);
	*n = g_tensor_numel(t);
	if (!p || *n < 0 || !is_float(t->data_type))
		return NULL;
	int64_t dims[1] = { *n };
	WTensor w = { .name = t->name, .dtype = t->data_type, .data = p, .nbytes = nb, .ndim = 1, .dims = dims };
	if (nb != (size_t)*n * wt_dtype_size(t->data_type))
		return NULL;
	if (as_f32(p, t->data_type)) {
		float *f = small_copy(c->tmp, p, nb); /* a bias in external data */
		return f ? f : p;
	}
	float *f = arena_alloc_raw(c->tmp, (size_t)*n * sizeof *f + 1);
	return wt_to_f32(&w, f, &e) ? NULL : f;
}

typedef struct {
	Ctx *c;     /* NULL when building at save time */
	Arena *ta;  /* where the cache, tmp and long keys go */
	WSrc *w;
	Map cache;  /* key -> f32 copy, for keys not f32 in place */
	float *tmp; /* scratch for rebuilds that are compared, then dropped */
	size_t ntmp;
	int lowp;   /* a half-precision checkpoint tensor was read: compare at its precision */
	int copyin; /* at save time: keys read whole are copied into the output (key_read) */
	/* sample_diff's last samples, raw, of a pair of tensors: every
	 * candidate recipe of a tensor samples the same pair on each expert */
	const float *sa, *sb;
	int64_t sn;
	float *smp;
	float *blk; /* view's two buffers, nblk floats each */
	size_t nblk;
	char kb[4][512]; /* see kbuf */
	int nkb;
	/* get_bn's last answer: its own, or one the caller shares between
	 * the Srcs of one expert's builds (bnm) */
	MoeBnMemo own, *bnm;
} Src;

/* A checkpoint key for a lookup, formatted into one of a few rotating
 * buffers: lookups run per tensor, per candidate recipe and per expert, and
 * an arena string each would make the repair's memory grow with the
 * checkpoint times the recipes tried. Keys kept past the lookup, or too
 * long for a buffer, go to the arena. */
static const char *kbuf(Src *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static const char *kbuf(Src *s, const char *fmt, ...)
{
	char *b = s->kb[s->nkb++ & 3];
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(b, sizeof s->kb[0], fmt, ap);
	va_end(ap);
	if (n >= 0 && (size_t)n < sizeof s->kb[0])
		return b;
	va_start(ap, fmt);
	char *x = arena_alloc(s->ta, (size_t)n + 1);
	vsnprintf(x, (size_t)n + 1, fmt, ap);
	va_end(ap);
	return x;
}

/* a, b and c (NULL: none) one after another, in kbuf's buffers: most
 * keys are a prefix and a rest, looked up by the hundred thousand on a
 * large graph, where vsnprintf was a twentieth of the mapping. */
static const char *kcat(Src *s, const char *a, const char *b, const char *c)
{
	size_t na = strlen(a), nb = strlen(b), nc = c ? strlen(c) : 0, n = na + nb + nc;
	char *k = n < sizeof s->kb[0] ? s->kb[s->nkb++ & 3] : arena_alloc(s->ta, n + 1);
	memcpy(k, a, na);
	memcpy(k + na, b, nb);
	memcpy(k + na + nb, c ? c : "", nc + 1);
	return k;
}

/* Maps a large checkpoint tensor's pages in one call (where the kernel
 * can, 5.14+): faulting a gigabyte in 4 KiB steps shows in the profile.
 * A hint: failure just leaves the faults to happen. */
static void prefault(const void *p, size_t n)
{
	if (n < (256 << 10) || filemap_has(p, n)) /* read through the file: see view */
		return;
	uintptr_t a = (uintptr_t)p & ~(uintptr_t)4095, b = (uintptr_t)p + n;
	madvise((void *)a, b - a, MADV_POPULATE_READ);
}

static const float *key_f32(Src *s, const char *key, int64_t *n);

/* A tensor about to be read whole. */
static const float *key_whole(Src *s, const char *key, int64_t *n)
{
	const float *f = key_f32(s, key, n);
	if (f)
		prefault(f, (size_t)*n * sizeof *f);
	return f;
}

static float *scratch(Src *s, int64_t n)
{
	if ((size_t)n > s->ntmp) {
		s->ntmp = (size_t)n;
		s->tmp = arena_alloc_raw(s->ta, s->ntmp * sizeof *s->tmp + 1);
	}
	return s->tmp;
}

/* Relative 1e-5 for fp32, 1e-3 when either side is half precision. */
static double tolerance(const Src *s, int dtype)
{
	return s->lowp || dtype == ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT16 ||
		       dtype == ONNX__TENSOR_PROTO__DATA_TYPE__BFLOAT16 ? 1e-3 : 1e-5;
}

/* Not prefaulted: a sample reads 256 values of it. Small tensors of a
 * registered mapping (BatchNorm statistics, biases) are read whole, by
 * whatever touches them first: copied through the file, a pread each
 * instead of a trapped first touch of each of their pages. */
/* An f32 checkpoint tensor read in place: its floats, else NULL. */
static const float *in_place(const WTensor *t)
{
	const float *d = as_f32(t->data, t->dtype);
	int64_t n = wt_numel(t);
	return d && n >= 0 && t->nbytes == (size_t)n * sizeof *d ? d : NULL;
}

/* Whether key_f32 copies t whole (through the file, when mapped). */
static int copied_whole(const WTensor *t)
{
	return in_place(t) && whole_sized(t->nbytes);
}

static const float *key_f32(Src *s, const char *key, int64_t *n)
{
	const WTensor *t = wsrc_get(s->w, key);
	if (!t)
		return NULL;
	*n = wt_numel(t);
	/* Before the cache, so that whether a read saw half precision does
	 * not depend on whether this Src read the key before (map_layer
	 * replays the verdicts of two Srcs in one order). */
	if (*n >= 0 && (t->dtype == ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT16 || t->dtype == ONNX__TENSOR_PROTO__DATA_TYPE__BFLOAT16))
		s->lowp = 1;
	const float *d = in_place(t);
	if (d && !whole_sized(t->nbytes)) /* not copied_whole: in_place asked once */
		return d;
	float *f = map_get(&s->cache, key);
	if (f)
		return f;
	if (d) {
		if (!(f = small_copy(s->ta, d, t->nbytes)))
			return d;
		map_put(&s->cache, t->name, f);
		return f;
	}
	if (*n < 0 || !is_float(t->dtype))
		return NULL;
	f = arena_alloc_raw(s->ta, (size_t)*n * sizeof *f + 1);
	Err e;
	if (wt_to_f32(t, f, &e))
		return NULL;
	map_put(&s->cache, t->name, f);
	return f;
}

/* Four floats as one value (GCC's and Clang's vector extension: a SIMD
 * register where the target has one, else plain code). */
typedef float V4 __attribute__((vector_size(16)));
typedef int32_t I4 __attribute__((vector_size(16)));

static inline V4 v4_load(const float *p)
{
	V4 v;
	memcpy(&v, p, sizeof v);
	return v;
}

/* Lanewise x > y ? x : y, as the scalar form below. */
static inline V4 v4_max(V4 x, V4 y)
{
	I4 gt = x > y;
	return (V4)(((I4)x & gt) | ((I4)y & ~gt));
}

static inline V4 v4_abs(V4 x)
{
	return (V4)((I4)x & ((I4){ 0 } + 0x7fffffff));
}

/* Raises *d to the largest |a[i] * sc - b[i]| and, when m, *m to the
 * largest |b[i]| of n elements; 1 when a difference is NaN or infinite
 * (an infinite b would make the relative difference inf / inf, a NaN
 * that no tolerance test refuses). These loops
 * read every weight the repair verifies whole. Eight lanes at a time, in
 * two registers: GCC does not vectorise a float max without -ffast-math,
 * and one scalar max chain ran at an element per few cycles. Lanes give
 * the same maxima as one chain: x > d ? x : d skips NaN, and the order of
 * a max of the rest does not matter (sc = 1 gives a - b exactly). */
int moe_diff_max(const float *a, float sc, const float *b, int64_t n, float *d, float *m)
{
	V4 d0 = { 0 }, d1 = { 0 }, m0 = { 0 }, m1 = { 0 }, s = (V4){ 0 } + sc, big = (V4){ 0 } + FLT_MAX;
	I4 nan = { 0 };
	int64_t i = 0;
	for (; i + 8 <= n; i += 8) {
		V4 b0 = v4_load(b + i), b1 = v4_load(b + i + 4);
		V4 x0 = v4_abs(v4_load(a + i) * s - b0), x1 = v4_abs(v4_load(a + i + 4) * s - b1);
		nan |= ~(x0 <= big) | ~(x1 <= big);
		d0 = v4_max(x0, d0);
		d1 = v4_max(x1, d1);
		m0 = v4_max(v4_abs(b0), m0);
		m1 = v4_max(v4_abs(b1), m1);
	}
	d0 = v4_max(d0, d1);
	m0 = v4_max(m0, m1);
	float dd = *d, mm = m ? *m : 0;
	int bad = 0;
	for (int l = 0; l < 4; l++) {
		bad |= nan[l];
		dd = d0[l] > dd ? d0[l] : dd;
		mm = m0[l] > mm ? m0[l] : mm;
	}
	for (; i < n; i++) {
		float x = fabsf(a[i] * sc - b[i]), y = fabsf(b[i]);
		bad |= !(x <= FLT_MAX);
		dd = x > dd ? x : dd;
		mm = y > mm ? y : mm;
	}
	*d = dd;
	if (m)
		*m = mm;
	return bad != 0;
}

/* out[i] = w[i] * sc for n elements, w and out the same array or apart.
 * Eight at a time: GCC 12 at -O2 keeps the scalar loop (an unknown count,
 * and out may overlap w), where a save's fold of its new weights spent
 * most of its time. Each product is the scalar one, so the bytes are. */
static void scale(float *out, const float *w, int64_t n, float sc)
{
	V4 s = (V4){ 0 } + sc;
	int64_t i = 0;
	for (; i + 8 <= n; i += 8) {
		V4 a = v4_load(w + i) * s, b = v4_load(w + i + 4) * s;
		memcpy(out + i, &a, sizeof a);
		memcpy(out + i + 4, &b, sizeof b);
	}
	for (; i < n; i++)
		out[i] = w[i] * sc;
}

/* Of arrays in memory (samples, rebuilds). */
static double reldiff(const float *a, const float *b, int64_t n)
{
	float d = 0, m = 0;
	if (moe_diff_max(a, 1.0f, b, n, &d, &m))
		return INFINITY;
	return d / (m > 1e-12f ? (double)m : 1e-12);
}

/* Two buffers of at least n floats for view. */
static float *blocks(Src *s, int64_t n)
{
	if ((size_t)n > s->nblk) {
		s->nblk = (size_t)n;
		s->blk = arena_alloc_raw(s->ta, 2 * s->nblk * sizeof *s->blk);
	}
	return s->blk;
}

/* Floats [i, i + k) of p (a tensor of n), for reading: through the file
 * into buf when p is in a registered mapping and PAGE bytes or more (a
 * megabyte so read took a quarter of the time the mapping's first touches
 * did), else in place. Whole tensors are compared BLOCK floats at a time,
 * each block still in cache when compared. */
enum { BLOCK = 16 << 10 };

static const float *view(const float *p, int64_t i, int64_t k, int64_t n, float *buf)
{
	return (size_t)n * sizeof *p >= PAGE && filemap_read(buf, p + i, (size_t)k * sizeof *p) ? buf : p + i;
}

/* reldiff of whole tensors, either of them in a mapping. */
static double reldiff_whole(Src *s, const float *a, const float *b, int64_t n)
{
	if ((size_t)n * sizeof *a < PAGE)
		return reldiff(a, b, n);
	float d = 0, m = 0, *ba = blocks(s, BLOCK), *bb = ba + s->nblk;
	int bad = 0;
	for (int64_t i = 0; i < n; i += BLOCK) {
		int64_t k = n - i < BLOCK ? n - i : BLOCK;
		bad |= moe_diff_max(view(a, i, k, n, ba), 1.0f, view(b, i, k, n, bb), k, &d, &m);
	}
	return bad ? INFINITY : d / (m > 1e-12f ? (double)m : 1e-12);
}

/* BatchNorm statistics of module `pre bn` ("model.0.experts.1." "conv.1"). */
typedef struct {
	const float *g, *b, *mu, *var;
	int64_t n;
	double eps; /* what the checkpoint records for this BatchNorm, else -1 */
} BN;

/* The eps a fold of this BatchNorm divides by: the module's own where a
 * pickled checkpoint records it (a missing expert built with another
 * expert's eps would be quietly off), else the recipe's, which the
 * template's values chose. */
static double fold_eps(const BN *bn, const Recipe *r)
{
	return bn->eps >= 0 ? bn->eps : r->eps;
}

/* A BatchNorm's statistics lie side by side in a checkpoint (a module's
 * tensors are saved together). Kept in a file, they are read in one call,
 * not one each: of wide experts, they were a quarter of a repair's reads. A
 * hint: anything else (a missing key, another type, far apart, already
 * read) and key_f32 reads each as before. */
static void read_together(Src *s, const char *const k[4])
{
	const char *lo = NULL, *hi = NULL;
	const WTensor *t[4];
	size_t sum = 0;
	for (int i = 0; i < 4; i++) {
		t[i] = wsrc_get(s->w, k[i]);
		if (!t[i] && i >= 2) /* weight and bias: not with affine=False */
			continue;
		if (!t[i] || !copied_whole(t[i]) || map_get(&s->cache, t[i]->name))
			return;
		const char *p = t[i]->data;
		lo = !lo || p < lo ? p : lo;
		hi = !hi || p + t[i]->nbytes > hi ? p + t[i]->nbytes : hi;
		sum += t[i]->nbytes;
	}
	size_t span = (size_t)(hi - lo);
	if (span > 2 * sum || !filemap_has(lo, span))
		return;
	char *f = arena_alloc_raw(s->ta, span + 1);
	if (!filemap_read(f, lo, span))
		return;
	for (int i = 0; i < 4; i++)
		if (t[i])
			map_put(&s->cache, t[i]->name, f + ((const char *)t[i]->data - lo));
}

static int get_bn(Src *s, const char *pre, const char *bn, BN *o)
{
	/* A Conv's weight and bias fold the same statistics one after the
	 * other, and each ask is four keys formatted and looked up. */
	MoeBnMemo *m = s->bnm ? s->bnm : &s->own;
	if (m->var && strcmp(m->bn, bn) == 0 && strcmp(m->pre, pre) == 0) {
		*o = (BN){ m->g, m->b, m->mu, m->var, m->n, m->eps };
		return 0;
	}
	int64_t n1 = 0, n2 = 0, n3 = 0, n4 = 0;
	/* Four lookups in a table of every checkpoint key, each a cache
	 * miss: started together, they wait for memory once. kcat's four
	 * buffers hold the four keys. */
	const char *k[4] = { kcat(s, pre, bn, ".running_var"), kcat(s, pre, bn, ".running_mean"),
			     kcat(s, pre, bn, ".weight"), kcat(s, pre, bn, ".bias") };
	for (int i = 0; i < 4; i++)
		wsrc_prefetch(s->w, k[i]);
	read_together(s, k);
	o->var = key_f32(s, k[0], &n1);
	o->mu = key_f32(s, k[1], &n2);
	o->g = key_f32(s, k[2], &n3);
	o->b = key_f32(s, k[3], &n4);
	if (!o->var || !o->mu || n1 != n2 || (o->g && n3 != n1) || (o->b && n4 != n1))
		return -1;
	o->n = n1;
	if (!wsrc_attr(s->w, kcat(s, pre, bn, ".eps"), &o->eps) || !(o->eps >= 0))
		o->eps = -1;
	m->var = NULL;
	if (strlen(pre) < sizeof m->pre && strlen(bn) < sizeof m->bn) {
		strcpy(m->pre, pre);
		strcpy(m->bn, bn);
		m->g = o->g;
		m->b = o->b;
		m->mu = o->mu;
		m->var = o->var;
		m->n = o->n;
		m->eps = o->eps;
	}
	return 0;
}

/* A key rebuild reads whole (want floats of it).
 * - Dry, it is only looked up: any non-NULL pointer says it is there, a
 *   float tensor of *n elements. A tensor built at save time is so
 *   checked at repair time without reading its weights.
 * - At save time (s->copyin) and with a place into (want floats), it goes
 *   there by a copy the kernel makes (a pread of the checkpoint's file,
 *   see filemap.h; else process_vm_readv, from our own mapping of it),
 *   not through loads from the mapping: under
 *   a paravirtualised MMU the first touch of each mapped page from user
 *   space traps to the host, and a gigabyte read so took twice as long.
 * - Anything else (not an f32 key of want elements, a kernel or sandbox
 *   refusing the call) is read through the mapping, in place. */
static const float *key_read(Src *s, const char *key, int64_t *n, int dry, float *into, int64_t want)
{
	static const float there[1];
	const WTensor *t = dry || (into && s->copyin) ? wsrc_get(s->w, key) : NULL;
	if (dry)
		return t && is_float(t->dtype) && (*n = wt_numel(t)) >= 0 ? there : NULL;
	size_t nb = (size_t)want * sizeof *into;
	if (!t || t->dtype != ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT || t->nbytes != nb || wt_numel(t) != want)
		return key_whole(s, key, n);
	if (filemap_read(into, t->data, nb)) {
		*n = want;
		return into;
	}
	for (size_t done = 0; done < nb;) {
		struct iovec to = { (char *)into + done, nb - done }, from = { (char *)t->data + done, nb - done };
		ssize_t k = process_vm_readv(getpid(), &to, 1, &from, 1, 0);
		if (k <= 0) {
			s->copyin = 0;
			return key_whole(s, key, n);
		}
		done += (size_t)k;
	}
	*n = want;
	return into;
}

/* Rebuilds a recipe's tensor for the expert whose keys start with pre:
 * folds are written to out (want floats), a tensor taken as it is comes
 * back in place. out NULL: a dry run, which says whether it would
 * succeed (non-NULL) but reads only the small BatchNorm statistics. */
static const float *rebuild(Src *s, const Recipe *r, const char *pre, int64_t want, float *out, Err *e)
{
	int64_t n = 0;
	int dry = !out;
	if (r->kind == R_NAME || r->kind == R_VALUE) {
		const char *k = kcat(s, pre, r->rest, NULL);
		const float *f = key_read(s, k, &n, dry, out, want);
		if (!f) {
			errf(e, "no tensor '%s' in %s", k, s->w->path);
			return NULL;
		}
		if (n != want) {
			errf(e, "'%s' in %s has %lld elements, the expert template needs %lld", k, s->w->path,
			     (long long)n, (long long)want);
			return NULL;
		}
		return f;
	}
	if (r->kind == R_TRANS) {
		const char *k = kcat(s, pre, r->rest, NULL);
		const WTensor *kt = wsrc_get(s->w, k);
		const float *f = kt && kt->ndim == 2 ? key_read(s, k, &n, dry, NULL, want) : NULL;
		if (!f || n != want) {
			errf(e, "no 2-D tensor '%s' of %lld elements in %s", k, (long long)want, s->w->path);
			return NULL;
		}
		if (dry)
			return f;
		int64_t rows = kt->dims[0], cols = kt->dims[1]; /* the key [rows,cols] is the template [cols,rows] */
		for (int64_t i = 0; i < cols; i++)
			for (int64_t j = 0; j < rows; j++)
				out[i * rows + j] = f[j * cols + i];
		return out;
	}
	BN bn;
	if (get_bn(s, pre, r->bn, &bn)) {
		errf(e, "no BatchNorm statistics '%s%s.running_var/running_mean' in %s", pre, r->bn, s->w->path);
		return NULL;
	}
	if (r->kind == R_FOLD_W) {
		const char *k = kcat(s, pre, r->rest, NULL);
		/* In place when copied into out: each weight is read once. */
		const float *w = key_read(s, k, &n, dry, out, want);
		if (!w || n != want || bn.n <= 0 || want % bn.n) {
			errf(e, "no Conv weight '%s' of %lld elements in %s", k, (long long)want, s->w->path);
			return NULL;
		}
		if (dry)
			return w;
		int64_t per = want / bn.n;
		for (int64_t o = 0; o < bn.n; o++) /* f32 like the exporter's own fold */
			scale(out + o * per, w + o * per, per,
			      (float)((bn.g ? bn.g[o] : 1.0) / sqrt((double)bn.var[o] + fold_eps(&bn, r))));
		return out;
	}
	/* R_FOLD_B */
	const float *b = NULL;
	if (r->bias) {
		const char *k = kcat(s, pre, r->bias, NULL);
		b = key_f32(s, k, &n);
		if (!b || n != bn.n) {
			errf(e, "no Conv bias '%s' in %s", k, s->w->path);
			return NULL;
		}
	}
	if (bn.n != want) {
		errf(e, "BatchNorm '%s%s' has %lld channels, the template bias %lld", pre, r->bn, (long long)bn.n,
		     (long long)want);
		return NULL;
	}
	if (dry)
		return bn.var;
	for (int64_t o = 0; o < bn.n; o++) {
		double sc = (bn.g ? bn.g[o] : 1.0) / sqrt((double)bn.var[o] + fold_eps(&bn, r));
		out[o] = (float)((bn.b ? bn.b[o] : 0.0) + ((b ? b[o] : 0.0) - bn.mu[o]) * sc);
	}
	return out;
}

/* Present experts are compared whole, except tensors kept in external
 * data, which are checked on a sample (the template always whole): a
 * wrong checkpoint, eps or set of statistics shows in every sample, while
 * reading them whole would make the repair's cost grow with the gigabytes
 * of weights it leaves untouched. What a sample costs is the pages it
 * reads on both sides (mapped files, each read once), so it is RUNS runs
 * of RUN neighbours, the first at the head, the last at the tail (a short
 * or shifted tensor shows there), the others between. 64 runs read 16
 * pages a side on a 1 MiB tensor and made half of the external-data
 * repair's time. */
enum { RUNS = 4, RUN = 64, SAMPLES = RUNS * RUN };

/* The sample's m-th index, m < nsamples(n): increasing, all of a small
 * tensor. */
static int64_t nsamples(int64_t n)
{
	return n < SAMPLES ? n : SAMPLES;
}

static int64_t sample_at(int64_t n, int64_t m)
{
	return n <= SAMPLES ? m : m / RUN * (n - RUN) / (RUNS - 1) + m % RUN;
}

/* k floats at src, of a tensor of n, into dst: through the file when src
 * is in a registered mapping (filemap.h: 2 us a run against a trapped
 * first touch of its page) and the tensor is PAGE bytes or more, else
 * loaded. */
static void fetch(float *dst, const float *src, int64_t k, int64_t n)
{
	if ((size_t)n * sizeof *src < PAGE || !filemap_read(dst, src, (size_t)k * sizeof *src))
		memcpy(dst, src, (size_t)k * sizeof *src);
}

/* The samples of a and b (n elements each) into x and y (nsamples(n)
 * each): RUNS runs of RUN a side, or all of a small tensor. */
static void gather(const float *a, const float *b, int64_t n, float *x, float *y)
{
	if (n <= SAMPLES) {
		fetch(x, a, n, n);
		fetch(y, b, n, n);
		return;
	}
	for (int k = 0; k < RUNS; k++) {
		int64_t i = sample_at(n, (int64_t)k * RUN);
		fetch(x + k * RUN, a + i, RUN, n);
		fetch(y + k * RUN, b + i, RUN, n);
	}
}

static int sample_diff(Src *s, const Recipe *r, const char *pre, int64_t n, const float *f, double *d, Err *e)
{
	if (r->kind == R_FOLD_B || r->kind == R_TRANS) { /* small, or no stride to sample by */
		const float *x = rebuild(s, r, pre, n, scratch(s, n), e);
		if (!x)
			return -1;
		*d = reldiff_whole(s, x, f, n);
		return 0;
	}
	int64_t kn = 0;
	const char *k = kcat(s, pre, r->rest, NULL);
	const float *src = key_f32(s, k, &kn);
	if (!src || kn != n)
		return errf(e, "no tensor '%s' of %lld elements in %s", k, (long long)n, s->w->path);
	BN bn = { 0 };
	if (r->kind == R_FOLD_W && (get_bn(s, pre, r->bn, &bn) || bn.n <= 0 || n % bn.n))
		return errf(e, "no BatchNorm statistics '%s%s' for %lld weights in %s", pre, r->bn, (long long)n,
			    s->w->path);
	int64_t per = r->kind == R_FOLD_W ? n / bn.n : 1, ns = nsamples(n);
	if (!s->smp)
		s->smp = arena_alloc_raw(s->ta, 3 * SAMPLES * sizeof *s->smp);
	float *x = s->smp + 2 * SAMPLES, *y = s->smp + SAMPLES;
	if (src != s->sa || f != s->sb || n != s->sn) {
		gather(src, f, n, s->smp, y);
		s->sa = src;
		s->sb = f;
		s->sn = n;
	}
	memcpy(x, s->smp, (size_t)ns * sizeof *x);
	for (int64_t m = 0; m < ns && r->kind == R_FOLD_W; m++) {
		int64_t o = sample_at(n, m) / per;
		x[m] *= (float)((bn.g ? bn.g[o] : 1.0) / sqrt((double)bn.var[o] + fold_eps(&bn, r)));
	}
	*d = reldiff(x, y, ns);
	return 0;
}

/* A sample of a against b within tol (relative to b's sample). */
static int sample_close(const float *a, const float *b, int64_t n, double tol)
{
	float x[SAMPLES], y[SAMPLES];
	gather(a, b, n, x, y);
	return reldiff(x, y, nsamples(n)) <= tol;
}

static int ends_with(const char *s, const char *suf)
{
	size_t n = strlen(s), m = strlen(suf);
	return n >= m && strcmp(s + n - m, suf) == 0;
}

/* Candidate recipes for one template tensor, each with how closely it
 * rebuilds the template (relative difference). */
typedef struct {
	Recipe r;
	double d;
} Cand;

typedef struct {
	Cand *v;
	size_t n;
} Cands;

static void cand_add(Src *s, Cands *cs, const Recipe *r, double d)
{
	cs->v = arena_grow(s->c->a, cs->v, cs->n * sizeof *cs->v, (cs->n + 1) * sizeof *cs->v);
	cs->v[cs->n++] = (Cand){ *r, d };
}

enum { MAXEPS = sizeof EPS / sizeof *EPS };

/* A weight fold's comparison for full_diff, its blocks of whole channels
 * dealt to the two halves of a duo_run by turns; each half keeps its own
 * maxima, merged after: a max is exact in any order. */
typedef struct {
	const Recipe *r;
	int k;
	const float *w, *f;
	const BN *bn;
	int64_t n, per, cb;
	float *buf[2]; /* half h's view buffers, cb * per floats for w then f; NULL: read in place */
	float dm[2][MAXEPS], m[2];
	int nan[2][MAXEPS];
} Fold;

static void fold_half(void *arg, int h)
{
	Fold *x = arg;
	const BN *bn = x->bn;
	int64_t per = x->per, cb = x->cb;
	float *bw = x->buf[h], *bf = bw ? bw + cb * per : NULL;
	for (int64_t o0 = h * cb; o0 < bn->n; o0 += 2 * cb) {
		int64_t kc = bn->n - o0 < cb ? bn->n - o0 : cb;
		const float *wv = view(x->w, o0 * per, kc * per, x->n, bw), *fv = view(x->f, o0 * per, kc * per, x->n, bf);
		for (int64_t o = o0; o < o0 + kc; o++)
			for (int j = 0; j < x->k; j++) {
				float sc = (float)((bn->g ? bn->g[o] : 1.0) / sqrt((double)bn->var[o] + fold_eps(bn, &x->r[j])));
				x->nan[h][j] |= moe_diff_max(wv + (o - o0) * per, sc, fv + (o - o0) * per, per, &x->dm[h][j],
							     j ? NULL : &x->m[h]);
			}
	}
}

/* reldiff(rebuild(r[j]), f) for k <= MAXEPS recipes alike but for a fold's
 * eps, into d[j]. A weight fold is compared in one pass for all k, with
 * no rebuild stored: this loop reads the template's weights for each eps
 * their sample let through, and every present expert kept inline, most of
 * a repair's reading, split over the two cores. The arithmetic is
 * rebuild's and reldiff's. */
static int full_diff(Src *s, const Recipe *r, int k, const char *pre, int64_t n, const float *f, double *d, Err *e)
{
	if (r->kind != R_FOLD_W) {
		for (int j = 0; j < k; j++) {
			const float *x = rebuild(s, &r[j], pre, n, scratch(s, n), e);
			if (!x)
				return -1;
			d[j] = reldiff_whole(s, x, f, n);
		}
		return 0;
	}
	int64_t kn = 0;
	BN bn;
	if (get_bn(s, pre, r->bn, &bn))
		return errf(e, "no BatchNorm statistics '%s%s.running_var/running_mean' in %s", pre, r->bn, s->w->path);
	const char *key = kcat(s, pre, r->rest, NULL); /* after get_bn's, which rotate the buffers */
	const float *w = key_whole(s, key, &kn);
	if (!w || kn != n || bn.n <= 0 || n % bn.n)
		return errf(e, "no Conv weight '%s' of %lld elements in %s", key, (long long)n, s->w->path);
	/* Whole channels a block; buffers only for what view may read into. */
	Fold x = { .r = r, .k = k, .w = w, .f = f, .bn = &bn, .n = n, .per = n / bn.n };
	x.cb = x.per >= BLOCK ? 1 : BLOCK / x.per;
	if ((size_t)n * sizeof *f >= PAGE) {
		int64_t cp = x.cb * x.per;
		float *b = blocks(s, 2 * cp); /* two runs of nblk >= 2 cp floats, one a half */
		x.buf[0] = b;
		x.buf[1] = b + s->nblk;
	}
	duo_run(fold_half, &x, 2 * (size_t)n * sizeof *f);
	float m = x.m[0] > x.m[1] ? x.m[0] : x.m[1];
	for (int j = 0; j < k; j++) {
		float dm = x.dm[0][j] > x.dm[1][j] ? x.dm[0][j] : x.dm[1][j];
		d[j] = x.nan[0][j] | x.nan[1][j] ? INFINITY : dm / (m > 1e-12f ? (double)m : 1e-12);
	}
	return 0;
}

/* A fold recipe with every eps worth trying (the one the checkpoint
 * records for the BatchNorm, else the usual values), each that rebuilds f
 * (n elements) for the expert at pre within tol a candidate. A sample
 * first: most (other convs, other eps) fail on it. */
static void try_fold(Src *s, Cands *cs, Recipe *r, const char *pre, int64_t n, const float *f, double tol)
{
	double eps, sd, d[MAXEPS];
	Recipe ok[MAXEPS];
	int k = 0, own = wsrc_attr(s->w, kcat(s, pre, r->bn, ".eps"), &eps);
	Err e;
	for (int q = 0; q < (own ? 1 : MAXEPS); q++) {
		r->eps = own ? eps : EPS[q];
		if (sample_diff(s, r, pre, n, f, &sd, &e) == 0 && sd <= tol)
			ok[k++] = *r;
	}
	if (k && full_diff(s, ok, k, pre, n, f, d, &e) == 0)
		for (int j = 0; j < k; j++)
			if (d[j] <= tol)
				cand_add(s, cs, &ok[j], d[j]);
}

/* Every recipe that rebuilds template tensor t (values f, n elements) of
 * the expert whose keys start with pre, within tolerance: by name, by
 * value, by Conv+BatchNorm folding. A name alone proves nothing (fused
 * exports keep the names of weights they changed): every candidate is
 * compared. */
static Cands candidates(Src *s, const Tensor *t, const float *f, int64_t n, const char *pre)
{
	Cands cs = { 0 };
	Arena *a = s->c->a;
	WSrc *w = s->w;
	size_t lp = strlen(pre), lo, hi;
	int64_t kn;
	double tol = tolerance(s, t->data_type);
	wsrc_range(w, pre, &lo, &hi);
	for (size_t i = lo; i < hi; i++) {
		const WTensor *k = wsrc_sorted(w, i);
		if (wt_numel(k) != n)
			continue;
		const float *kf = key_f32(s, k->name, &kn);
		if (!kf || !sample_close(kf, f, n, tol))
			continue;
		double d = reldiff_whole(s, kf, f, n);
		if (d <= tol)
			cand_add(s, &cs, &(Recipe){ .tname = t->name, .kind = strcmp(k->name, t->name) ? R_VALUE : R_NAME,
						    .rest = k->name + lp }, d);
	}
	/* A Linear's weight, read transposed by MatMul: a 2-D key of the
	 * transposed shape. */
	for (size_t i = lo; i < hi && t->n_dims == 2; i++) {
		const WTensor *k = wsrc_sorted(w, i);
		if (k->ndim != 2 || k->dims[0] != t->dims[1] || k->dims[1] != t->dims[0])
			continue;
		Recipe r = { .tname = t->name, .kind = R_TRANS, .rest = k->name + lp };
		Err e;
		const float *x = rebuild(s, &r, pre, n, scratch(s, n), &e);
		double d = x ? reldiff_whole(s, x, f, n) : INFINITY;
		if (d <= tol)
			cand_add(s, &cs, &r, d);
	}
	/* Conv + BatchNorm folds: every BN group under the expert against every
	 * Conv weight (or bias) of matching size. Experts hold a few of each. */
	for (size_t i = lo; i < hi; i++) {
		const WTensor *v = wsrc_sorted(w, i);
		if (!ends_with(v->name, ".running_var"))
			continue;
		const char *bn = arena_printf(a, "%.*s", (int)(strlen(v->name) - lp - strlen(".running_var")),
					      v->name + lp);
		BN st;
		if (get_bn(s, pre, bn, &st))
			continue;
		if (t->n_dims >= 2 && t->dims[0] == st.n) {
			for (size_t j = lo; j < hi; j++) {
				const WTensor *cw = wsrc_sorted(w, j);
				if (!ends_with(cw->name, ".weight") || wt_numel(cw) != n || cw->ndim < 2 || cw->dims[0] != st.n)
					continue;
				Recipe r = { .tname = t->name, .kind = R_FOLD_W, .rest = cw->name + lp, .bn = bn };
				try_fold(s, &cs, &r, pre, n, f, tol);
			}
		}
		if (n == st.n) {
			/* No conv bias, then each bias of st.n elements outside the BN. */
			Recipe r = { .tname = t->name, .kind = R_FOLD_B, .bn = bn };
			try_fold(s, &cs, &r, pre, n, f, tol);
			for (size_t j = lo; j < hi; j++) {
				const WTensor *cb = wsrc_sorted(w, j);
				if (!ends_with(cb->name, ".bias") || wt_numel(cb) != n ||
				    strcmp(cb->name + lp, arena_printf(a, "%s.bias", bn)) == 0)
					continue;
				r = (Recipe){ .tname = t->name, .kind = R_FOLD_B, .bn = bn, .bias = cb->name + lp };
				try_fold(s, &cs, &r, pre, n, f, tol);
			}
		}
	}
	return cs;
}

/* The index of the first of f's n floats that is NaN or infinite, else
 * -1. This reads every new weight once more, just after it was written:
 * x * 0 is 0 for a finite x and NaN otherwise, so a sum of them, eight
 * lanes at a time with no branch, says whether to look closer (0.02 s
 * over the 1 GB of new weights of the inline benchmark). */
static int64_t first_nonfinite(const float *f, int64_t n)
{
	V4 z0 = { 0 }, z1 = { 0 };
	int64_t i = 0;
	for (; i + 8 <= n; i += 8) {
		z0 += v4_load(f + i) * 0.0f;
		z1 += v4_load(f + i + 4) * 0.0f;
	}
	z0 += z1;
	if (z0[0] == 0 && z0[1] == 0 && z0[2] == 0 && z0[3] == 0)
		i = n - n % 8;
	else
		i = 0;
	for (; i < n; i++)
		if (!isfinite(f[i]))
			return i;
	return -1;
}

/* A tensor that matches nothing because NaN or inf stands where a weight
 * should says so, with the key or tensor and the element, not only which
 * keys were tried: the model's own tensor t (values f, n of them; an
 * export damaged already, which no checkpoint value rebuilds), else a
 * checkpoint key under pre. */
static int note_damage(Src *s, const Tensor *t, const float *f, int64_t n, const char *pre, Err *e)
{
	const char *name = NULL, *where = NULL;
	int64_t bad = f ? first_nonfinite(f, n) : -1;
	if (bad >= 0) {
		name = t->name;
		where = "the model";
	}
	size_t lo, hi;
	wsrc_range(s->w, pre, &lo, &hi);
	for (size_t i = lo; i < hi && !name; i++) {
		const WTensor *k = wsrc_sorted(s->w, i);
		f = is_float(k->dtype) ? key_f32(s, k->name, &n) : NULL;
		if (f && (bad = first_nonfinite(f, n)) >= 0) {
			name = k->name;
			where = s->w->path;
		}
	}
	if (!name)
		return 0;
	size_t len = strlen(e->msg);
	snprintf(e->msg + len, sizeof e->msg - len, "; '%s' in %s holds %s at element %lld of %lld: is %s damaged?", name,
		 where, isnan(f[bad]) ? "NaN" : "an infinite value", (long long)bad, (long long)n,
		 where == s->w->path ? "the checkpoint" : "the export");
	return 1;
}

static const char *keys_under(Ctx *c, WSrc *w, const char *pre)
{
	size_t lp = strlen(pre), len = 0, shown = 0;
	char *buf = arena_alloc(c->a, 512);
	for (size_t i = 0; i < w->n && len < 400; i++)
		if (strncmp(w->t[i]->name, pre, lp) == 0) {
			len += (size_t)snprintf(buf + len, 512 - len, "%s%s", shown++ ? ", " : "", w->t[i]->name + lp);
		}
	if (!shown)
		return "none";
	return buf;
}

/* Every one of the n values is the first (bit for bit), n >= 1. */
static int is_fill(const float *f, int64_t n)
{
	for (int64_t i = 1; i < n; i++)
		if (memcmp(&f[i], &f[0], sizeof *f))
			return 0;
	return n >= 1;
}

/* The ops a quantized export reads integer weights through. */
static int is_quant_op(const char *op)
{
	static const char *const q[] = { "DequantizeLinear", "QLinearConv", "QLinearMatMul", "ConvInteger", "MatMulInteger" };
	for (size_t i = 0; i < sizeof q / sizeof *q; i++)
		if (strcmp(op, q[i]) == 0)
			return 1;
	return 0;
}

/* Expert id's module path as node names show it. */
static const char *named_path(Ctx *c, const Layer *L, int id)
{
	const char *p = strstr(L->pattern, "{i}");
	if (!p)
		return NULL;
	return arena_printf(c->a, "%s%s%.*s%d%s", L->module, *L->module ? "." : "", (int)(p - L->pattern), L->pattern, id,
			    p + 3);
}

/* The tensors an expert's nodes read that are constants: initializers, or
 * Constant nodes of the expert. Slots are (node index, input index). */
typedef struct {
	size_t node, input;
	const char *name;
} Slot;

static Slot *const_slots(Ctx *c, const Expert *x, size_t *ns)
{
	Slot *s = NULL;
	size_t n = 0;
	for (size_t i = 0; i < x->nnode; i++) {
		Node *nd = x->node[i];
		for (size_t j = 0; j < nd->n_input; j++) {
			/* Initializers, also behind the Identity an exporter leaves
			 * where it merged equal ones; Constant nodes are structure. */
			const Tensor *t = g_const(x->g, nd->input[j]);
			Val *v = g_val(x->g, nd->input[j]);
			if (!t || !v || (!v->init && !(v->def && g_is(v->def, "Identity"))))
				continue;
			s = arena_grow(c->a, s, n * sizeof *s, (n + 1) * sizeof *s);
			s[n++] = (Slot){ i, j, nd->input[j] };
		}
	}
	*ns = n;
	return s;
}

/* A present expert's tensor at one template slot, looked up on the main
 * thread: the halves of check_half read no index. */
typedef struct {
	const Expert *q;
	const char *qn;  /* the tensor's name */
	const float *f;  /* its values in f32, NULL: not a float constant */
	int64_t n;
	const char *pre; /* the expert's key prefix */
	int external;
} Present;

static Present present(Ctx *c, const Layer *L, const Expert *q, const Slot *sl)
{
	Present p = { .q = q, .qn = q->node[sl->node]->input[sl->input] };
	const Tensor *u = g_const(q->g, p.qn);
	p.f = u ? tensor_f32(c, u, &p.n) : NULL;
	p.pre = key_prefix(c, L, q->id);
	p.external = u && u->has_data_location && u->data_location == ONNX__TENSOR_PROTO__DATA_LOCATION__EXTERNAL;
	return p;
}

/* How closely recipe r rebuilds present expert p's tensor (never the
 * template's, which candidates compared): whole, except tensors kept in
 * external data (a sample, see SAMPLES). -1 on error (e set). */
static int verify(Src *s, const Layer *L, const Expert *tpl, const Present *p, const Recipe *r, double *d, Err *e)
{
	if (!p->f)
		return errf(e, "layer %s: expert %d's tensor '%s' is not a float constant like expert %d's '%s'",
			    L->scope, p->q->id, p->qn, tpl->id, r->tname);
	if (!p->external) {
		if (full_diff(s, r, 1, p->pre, p->n, p->f, d, e))
			return errwrap(e, "layer %s: expert %d's tensor '%s'", L->scope, p->q->id, p->qn);
		return 0;
	}
	if (sample_diff(s, r, p->pre, p->n, p->f, d, e) < 0)
		return errwrap(e, "layer %s: expert %d's tensor '%s'", L->scope, p->q->id, p->qn);
	return 0;
}

/* verify's answer for one present expert and one candidate. */
typedef struct {
	int state; /* 0 not asked, 1 d set, -1 e set */
	int lowp;  /* it read a half-precision key (see tolerance) */
	double d;
	Err e;
} Verdict;

/* The present experts' verdicts on a slot's candidates, the experts dealt
 * to the two halves of a duo_run by turns, each half with a Src of its
 * own. A half asks what map_layer's loop would ask of its experts, in
 * that loop's order: it skips a candidate once one of its own experts
 * put it past tol (the loop skips it from the first expert that did), and
 * stops at an error (the loop stops there). What it asks beyond (a
 * candidate the other half's earlier expert ruled out) is not read. */
typedef struct {
	Src *s[2];
	const Layer *L;
	const Expert *tpl;
	const Cands *cs;
	const Present *p;
	size_t np;
	double tol;
	Verdict *v;           /* np x cs->n */
	unsigned char *out[2]; /* per half: candidates it saw fail */
} Check;

static void check_half(void *arg, int h)
{
	Check *x = arg;
	Src *s = x->s[h];
	for (size_t i = (size_t)h; i < x->np; i += 2)
		for (size_t j = 0; j < x->cs->n; j++) {
			if (x->cs->v[j].d > x->tol || x->out[h][j])
				continue;
			Verdict *v = &x->v[i * x->cs->n + j];
			int was = s->lowp;
			s->lowp = 0;
			int rc = verify(s, x->L, x->tpl, &x->p[i], &x->cs->v[j].r, &v->d, &v->e);
			v->lowp = s->lowp;
			s->lowp |= was;
			if (rc) {
				v->state = -1;
				return;
			}
			v->state = 1;
			x->out[h][j] = !(v->d <= x->tol);
		}
}

/* Whether recipes a and b give the same tensor (n elements) for every
 * expert id of the layer that is not present: then either may be used. */
static int same_for_missing(Src *s, const Layer *L, const Recipe *a, const Recipe *b, int64_t n)
{
	Err e;
	float *x = arena_alloc_raw(s->ta, (size_t)n * sizeof *x + 1);
	for (int id = 0; id < L->spec->experts; id++) {
		int present = 0;
		for (size_t k = 0; k < L->nex; k++)
			present |= L->ex[k].id == id;
		if (present)
			continue;
		const char *pre = key_prefix(s->c, L, id);
		const float *p = rebuild(s, a, pre, n, x, &e);
		const float *q = p ? rebuild(s, b, pre, n, scratch(s, n), &e) : NULL;
		if (!p || !q || memcmp(p, q, (size_t)n * sizeof *p) != 0)
			return 0;
	}
	return 1;
}

/* Names as a tie-breaker: the candidate whose checkpoint module is the one
 * the template's consumer node is named after ("conv.1" for the node
 * /model.5/experts.1/conv/conv.1/Mul). */
static int named_like(Ctx *c, const Layer *L, const Expert *tpl, const Slot *sl, const Recipe *r)
{
	const Node *n = tpl->node[sl->node];
	const char *m = n->name ? spec_node_module(c->a, n->name) : NULL;
	const char *ep = L->module && L->pattern ? named_path(c, L, tpl->id) : NULL;
	const char *key = r->kind == R_FOLD_B ? r->bn : r->rest;
	if (!m || !ep || !key || strncmp(m, ep, strlen(ep)) != 0 || m[strlen(ep)] != '.')
		return 0;
	m += strlen(ep) + 1;
	return strncmp(key, m, strlen(m)) == 0 && key[strlen(m)] == '.';
}

const char *moe_recipe_key(Arena *a, const Recipe *r)
{
	switch (r->kind) {
	case R_FOLD_W: return arena_cat(a, r->rest, ":bnfold", NULL);
	case R_FOLD_B: return arena_cat(a, r->bn, ".bias:bnfold", NULL);
	case R_TRANS: return arena_cat(a, r->rest, ":T", NULL);
	default: return r->rest;
	}
}

/* A recipe in words, for messages. */
static const char *describe(Ctx *c, const char *pre, const Recipe *r)
{
	switch (r->kind) {
	case R_NAME:
	case R_VALUE:
		return arena_printf(c->a, "'%s%s'", pre, r->rest);
	case R_TRANS:
		return arena_printf(c->a, "'%s%s' transposed", pre, r->rest);
	case R_FOLD_W:
		return arena_printf(c->a, "'%s%s' folded with BatchNorm '%s%s' (eps %g)", pre, r->rest, pre, r->bn, r->eps);
	case R_FOLD_B:
		return arena_printf(c->a, "BatchNorm '%s%s' folded (eps %g) with %s%s%s", pre, r->bn, r->eps,
				    r->bias ? "conv bias '" : "no conv bias", r->bias ? arena_printf(c->a, "%s%s", pre, r->bias) : "",
				    r->bias ? "'" : "");
	default:
		return "the template's own tensor";
	}
}

/* Whether BatchNorm module bn comes right after the conv whose weight is
 * key in the module tree, as a BatchNorm an exporter folds into a conv
 * does: its next sibling in a Sequential (conv.0.weight, conv.1), or a
 * sibling under one parent (cv1.conv.weight, cv1.bn). */
static int bn_follows(const char *key, const char *bn)
{
	size_t kl = strlen(key);
	if (kl < 7 || strcmp(key + kl - 7, ".weight") != 0)
		return 0;
	kl -= 7;
	const char *kd = NULL, *bd = strrchr(bn, '.');
	for (size_t i = 0; i < kl; i++)
		if (key[i] == '.')
			kd = key + i;
	size_t kp = kd ? (size_t)(kd - key) : 0, bp = bd ? (size_t)(bd - bn) : 0;
	if (kp != bp || strncmp(key, bn, kp) != 0)
		return 0;
	const char *kleaf = kd ? kd + 1 : key, *bleaf = bd ? bd + 1 : bn;
	char *end1, *end2;
	long ki = strtol(kleaf, &end1, 10), bi = strtol(bleaf, &end2, 10);
	int knum = end1 != kleaf && end1 == key + kl, bnum = end2 != bleaf && !*end2;
	return knum && bnum ? bi == ki + 1 : !knum && !bnum;
}

/* How much besides the values speaks for recipe r at slot sl, for
 * candidates the values cannot tell apart (a template tensor of zeros
 * matches every zero key): the tensor's own name; a conv bias folded with
 * the BatchNorm, eps and conv bias its weight's fold used; the module the
 * consumer node is named after; a weight folded with the BatchNorm that
 * follows its conv in the module tree; for a Conv, that exporters fold
 * BatchNorm into it. */
static int evidence(Ctx *c, const Layer *L, const Expert *tpl, const Mapping *m, const Slot *sl, const Recipe *r,
		    WSrc *ws, const char *pre)
{
	int ev = 0;
	const Node *n = tpl->node[sl->node];
	if (r->kind == R_NAME)
		ev += 8;
	if (r->kind == R_FOLD_B && g_is(n, "Conv"))
		for (size_t i = 0; i < m->n; i++) {
			const Recipe *w = &m->r[i];
			/* One BatchNorm, one eps: the bias is folded with the eps the
			 * weight was, which its non-zero values decided. */
			if (w->node != sl->node || w->input != 1 || w->kind != R_FOLD_W || strcmp(w->bn, r->bn) != 0 ||
			    w->eps != r->eps)
				continue;
			const char *cb = arena_printf(c->a, "%.*s.bias", (int)(strlen(w->rest) - strlen(".weight")), w->rest);
			int has = wsrc_get(ws, arena_printf(c->a, "%s%s", pre, cb)) != NULL;
			if (has ? r->bias && strcmp(r->bias, cb) == 0 : !r->bias)
				ev += 4;
		}
	if (named_like(c, L, tpl, sl, r))
		ev += 2;
	if (r->kind == R_FOLD_W && bn_follows(r->rest, r->bn))
		ev += 2;
	if (g_is(n, "Conv") && (r->kind == R_FOLD_W || r->kind == R_FOLD_B))
		ev += 1;
	return ev;
}

/* Keys under the layer that belong to expert `id` without lying under its
 * expert path: a component equal to the id where the same key with another
 * id exists too (DiversifiedExpertGroup's dw_layers.{i} beside
 * expert_projections.{i}). Returns how many, filling out (module prefixes
 * ending in "."). */
static size_t sibling_families(Src *s, const Layer *L, int id, const char ***out)
{
	Ctx *c = s->c;
	const SpecLayer *sl = L->spec;
	const char *base = arena_printf(c->a, "%s%s%s", sl->prefix ? sl->prefix : "", sl->scope, *sl->scope ? "." : "");
	const char *own = key_prefix(c, L, id);
	char idc[16];
	snprintf(idc, sizeof idc, "%d", id);
	size_t lo, hi, n = 0;
	wsrc_range(s->w, base, &lo, &hi);
	const char **v = NULL;
	for (size_t i = lo; i < hi; i++) {
		const char *k = wsrc_sorted(s->w, i)->name;
		/* Other experts' own tensors are the family already known. */
		if (sl->experts < 2 || strncmp(k, own, strlen(own)) == 0 ||
		    spec_place(sl, kcat(s, sl->scope, k + strlen(base) - (*sl->scope ? 1 : 0), NULL)) >= 0)
			continue;
		/* each component equal to the id, after the layer's base */
		for (const char *p = k + strlen(base); (p = strstr(p, idc)); p++) {
			size_t li = strlen(idc);
			if ((p > k && p[-1] != '.') || (p[li] != '.' && p[li]))
				continue;
			const char *mod = arena_printf(c->a, "%.*s", (int)(p - k + li) + (p[li] == '.'), k);
			/* A family has a member of the same shape for every expert id
			 * (numbered siblings of other kinds, conv.0 beside norm.1, do not). */
			const WTensor *me = wsrc_sorted(s->w, i);
			int all = 1;
			for (int j = 0; j < sl->experts && all; j++) {
				const WTensor *x = wsrc_get(s->w, kbuf(s, "%.*s%d%s", (int)(p - k), k, j, p + li));
				all = x && x->ndim == me->ndim && !memcmp(x->dims, me->dims, (size_t)me->ndim * sizeof *me->dims);
			}
			if (!all)
				continue;
			int seen = 0;
			for (size_t j = 0; j < n && !seen; j++)
				seen = strcmp(v[j], mod) == 0;
			if (!seen) {
				v = arena_grow(c->a, v, n * sizeof *v, (n + 1) * sizeof *v);
				v[n++] = mod;
			}
		}
	}
	*out = v;
	return n;
}

/* The main-graph nodes v is computed by, depth first, in the order first
 * reached, within max steps: marked in seen, listed in *out when out is
 * given. Constants and nodes marked in stop end the walk; reaching until
 * ends it at once, returning SIZE_MAX. */
static size_t cone(Ctx *c, const char *v, const PMap *stop, int max, PMap *seen, Node ***out, const Node *until)
{
	size_t nt = 0, ct = 64, nn = 0;
	const char **todo = arena_alloc(c->tmp, ct * sizeof *todo);
	Node **list = out ? arena_alloc(c->tmp, (size_t)max * sizeof *list) : NULL;
	todo[nt++] = v;
	for (int steps = 0; nt && steps < max; steps++) {
		Val *vv = g_val(c->g, todo[--nt]);
		Node *n = vv ? vv->def : NULL;
		if (n && n == until)
			return SIZE_MAX;
		if (!n || pmap_get(seen, n) || g_graph_of(c, n) != c->g || (stop && pmap_get(stop, n)))
			continue;
		pmap_put(seen, n, (void *)1);
		if (list)
			list[nn++] = n;
		for (size_t j = 0; j < n->n_input; j++) {
			if (!*n->input[j] || g_const(c->g, n->input[j]))
				continue;
			if (nt == ct) {
				todo = arena_grow(c->tmp, todo, ct * sizeof *todo, 2 * ct * sizeof *todo);
				ct *= 2;
			}
			todo[nt++] = n->input[j];
		}
	}
	if (out)
		*out = list;
	return nn;
}

/* The experts' shared input must not be computed by per-expert weights: an
 * expert that starts before its row gather (a per-expert depthwise layer
 * on the shared stem) would be rebuilt without that start, silently wrong
 * when one expert present cannot show the difference. The nodes computing
 * the input, back to what the router reads, are checked against the
 * template's per-expert tensors outside its expert path. The router's side
 * is told by data flow, not by position: a tool's topological sort may put
 * the input's computation above the router. */
static int shared_input(Src *s, const Layer *L, const Expert *tpl, Err *e)
{
	Ctx *c = s->c;
	const char **fam;
	size_t nf = sibling_families(s, L, tpl->id, &fam);
	/* The template's own tensors too: an input experts.yaml names inside
	 * the expert (its first conv's output) leaves that conv out of every
	 * clone. A fill (ones, zeros) is anyone's and tells nothing. */
	const char *own = key_prefix(c, L, tpl->id);
	PMap seen, router;
	pmap_init(&seen, c->tmp, 64);
	pmap_init(&router, c->tmp, 64);
	/* When the router reads what computes the input, all of the input's
	 * cone lies above the router and nothing is left to check: the walk
	 * stops there, a few nodes in, where it went 256 nodes up into the
	 * layers before (9% of a 400-layer repair's main thread). */
	const Val *xv = g_val(c->g, L->x);
	const Node *xdef = xv ? xv->def : NULL;
	if (!xdef || (L->topk && cone(c, L->topk->input[0], NULL, 256, &router, NULL, xdef) == SIZE_MAX))
		return 0;
	Node **ns;
	size_t nn = cone(c, L->x, &router, 256, &seen, &ns, NULL);
	for (size_t i = 0; i < nn; i++) {
		const Node *n = ns[i];
		for (size_t j = 0; j < n->n_input; j++) {
			const Tensor *t = g_const(c->g, n->input[j]);
			int64_t cnt;
			const float *f = t && t->n_dims ? tensor_f32(c, t, &cnt) : NULL;
			for (size_t k = 0; f && cnt > 1 && k <= nf; k++) {
				const char *pre = k < nf ? fam[k] : own;
				if (k == nf && is_fill(f, cnt))
					continue;
				Cands cs = candidates(s, t, f, cnt, pre);
				if (cs.n && k == nf)
					return errf(e, "layer %s: node '%s', which computes the experts' input '%s', reads '%s' = %s, a tensor of expert %d itself: the input lies inside the expert; name the tensor the experts read in `input:`",
						    L->scope, n->name ? n->name : n->op_type, L->x, t->name, describe(c, pre, &cs.v[0].r),
						    tpl->id);
				if (cs.n)
					return errf(e, "layer %s: node '%s', which computes the experts' input '%s', reads '%s' = %s, a tensor of expert %d outside '%s' (the checkpoint has one per expert under '%s'): experts that span more than their expert path cannot be rebuilt",
						    L->scope, n->name ? n->name : n->op_type, L->x, t->name,
						    describe(c, pre, &cs.v[0].r), tpl->id, expert_path(c, L->spec, tpl->id), pre);
			}
		}
	}
	return 0;
}

static const char *shape_str(Ctx *c, const WTensor *t);

/* A checkpoint of pickled modules records how each module computes
 * (wsrc_sig): expert id's modules, tensors or none (an activation), must
 * be the template's (mods, under tp), or its clone computes otherwise
 * with weights that fit (a conv dilated per expert). */
static int same_modules(Src *s, const Layer *L, const Expert *tpl, const char *tp, const char **mods, size_t nmods,
			int id, const char *p, Err *e)
{
	size_t ltp = strlen(tp);
	for (size_t i = 0; i < nmods; i++) {
		const char *om = kcat(s, p, mods[i] + ltp, NULL), *a = wsrc_sig(s->w, mods[i]), *b = wsrc_sig(s->w, om);
		if (b && strcmp(a, b))
			return errf(e, "layer %s: in %s, module '%.*s' of expert %d is '%s' where expert %d's '%.*s' is '%s': experts built differently cannot be rebuilt from one template",
				    L->scope, s->w->path, (int)strlen(om) - 1, om, id, b, tpl->id, (int)strlen(mods[i]) - 1,
				    mods[i], a);
	}
	return 0;
}

/* Every expert of the layer must hold, in the checkpoint, the tensors the
 * template holds, of the same shapes: missing experts are clones of the
 * template, so a layer of differently built experts (DyMoE's four expert
 * kinds) cannot be rebuilt, and says so before any tensor is. */
static int same_structure(Src *s, const Layer *L, const Expert *tpl, Err *e)
{
	Ctx *c = s->c;
	const char *tp = key_prefix(c, L, tpl->id);
	size_t tlo, thi, nmods;
	wsrc_range(s->w, tp, &tlo, &thi);
	const char **mods = wsrc_sig_under(s->w, tp, s->ta, &nmods);
	for (int id = 0; id < L->spec->experts; id++) {
		if (id == tpl->id)
			continue;
		const char *p = key_prefix(c, L, id);
		size_t lo, hi;
		wsrc_range(s->w, p, &lo, &hi);
		/* Each range is sorted by what follows its prefix, so experts
		 * built alike pair up key by key: checked in one sweep, and the
		 * search below only finds what differs. */
		size_t ltp = strlen(tp), lp = strlen(p), same = hi - lo == thi - tlo;
		for (size_t i = 0; same && i < thi - tlo; i++) {
			const WTensor *a = wsrc_sorted(s->w, tlo + i), *b = wsrc_sorted(s->w, lo + i);
			same = !strcmp(a->name + ltp, b->name + lp) && a->ndim == b->ndim &&
			       !memcmp(a->dims, b->dims, (size_t)a->ndim * sizeof *a->dims);
		}
		if (same && same_modules(s, L, tpl, tp, mods, nmods, id, p, e))
			return -1;
		if (same)
			continue;
		const char *odd = NULL;
		for (size_t i = tlo; i < thi && !odd; i++) {
			const WTensor *a = wsrc_sorted(s->w, i);
			const char *k = kcat(s, p, a->name + strlen(tp), NULL);
			const WTensor *b = wsrc_get(s->w, k);
			if (!b && lo == hi)
				return errf(e, "layer %s: %s has no '%s' for expert %d (expert %d has '%s'); is it this model's checkpoint?",
					    L->scope, s->w->path, k, id, tpl->id, a->name);
			else if (!b) /* the expert has keys, not this one */
				return errf(e, "layer %s: %s has no '%s' for expert %d (expert %d has '%s'): a damaged or another model's checkpoint, or experts built differently, which no one template rebuilds",
					    L->scope, s->w->path, k, id, tpl->id, a->name);
			else if (b->ndim != a->ndim || memcmp(b->dims, a->dims, (size_t)a->ndim * sizeof *a->dims))
				odd = arena_printf(c->a, "has '%s' of shape %s where expert %d has %s", k, shape_str(c, b), tpl->id,
						   shape_str(c, a));
		}
		if (!odd && hi - lo != thi - tlo)
			odd = arena_printf(c->a, "has %zu tensors under '%s', expert %d has %zu", hi - lo, p, tpl->id, thi - tlo);
		if (!odd)
			continue;
		if (lo == hi)
			return errf(e, "layer %s: %s holds no tensor of expert %d under '%s'; is it this model's checkpoint, with these experts?",
				    L->scope, s->w->path, id, p);
		return errf(e, "layer %s: in %s, expert %d %s: experts built differently cannot be rebuilt from one template",
			    L->scope, s->w->path, id, odd);
	}
	return 0;
}

static int map_layer(Ctx *c, const Layer *L, const Expert *tpl, WSrc *w, Mapping *m, int clones, Err *e);

int moe_map(Ctx *c, const Layer *L, const Expert *tpl, WSrc *w, Mapping *m, Err *e)
{
	if (L->gen != c->gen)
		return errf(e, "layer %s: internal error: mapped on an index since rebuilt; please report this model", L->scope);
	size_t odd = L->nex;
	for (size_t k = 0; k < L->nex && odd == L->nex; k++)
		if (!moe_same_structure(tpl, &L->ex[k]))
			odd = k;
	/* An expert that is its input has no weights to tell whether the
	 * missing ones are such too (an identity expert) or not. */
	if (odd == L->nex && !tpl->nnode && L->spec && (int)L->nex < L->spec->experts)
		return errf(e, "layer %s: expert %d is its input '%s' (no node computes it), which shows nothing of what the missing experts compute; the layer cannot be repaired safely",
			    L->scope, tpl->id, tpl->in);
	if (odd == L->nex)
		return map_layer(c, L, tpl, w, m, 1, e);
	if (!L->spec || (int)L->nex < L->spec->experts)
		return errf(e, "layer %s: expert %d differs from expert %d in structure (its %s); experts of one layer must share a structure to be rebuilt",
			    L->scope, L->ex[odd].id, tpl->id, moe_structure_diff(c->tmp, tpl, &L->ex[odd]));
	/* Experts built differently, all present (MoT's transformer kinds):
	 * nothing is cloned, so each only has to rebuild from its own keys. */
	double maxdiff = 0;
	for (size_t k = 0; k < L->nex; k++) {
		Layer one = *L;
		one.ex = &L->ex[k];
		one.nex = 1;
		if (map_layer(c, &one, one.ex, w, m, 0, e))
			return -1;
		if (m->maxdiff > maxdiff)
			maxdiff = m->maxdiff;
	}
	m->maxdiff = maxdiff;
	return 0;
}

/* Whether the module at suffix mod (under the expert path, with its
 * trailing dot) is a BatchNorm the mapping folds into weights. */
static int folded_bn(const Mapping *m, const char *mod)
{
	size_t n = strlen(mod) - 1;
	for (size_t i = 0; i < m->n; i++)
		if ((m->r[i].kind == R_FOLD_W || m->r[i].kind == R_FOLD_B) && strlen(m->r[i].bn) == n &&
		    !strncmp(m->r[i].bn, mod, n))
			return 1;
	return 0;
}

/* A norm the exporter keeps as a node (GroupNorm, LayerNorm, a BatchNorm
 * after no conv) holds its eps as the node's attribute, which a missing
 * expert's clone copies from the template; only a BatchNorm folded into
 * weights divides by each expert's own (see fold_eps). Where a pickled
 * checkpoint records another eps for another expert's such norm, the
 * clone would compute otherwise, and the graph cannot show it when only
 * missing experts differ. */
static int same_eps(Src *s, const Layer *L, const Expert *tpl, const Mapping *m, Err *e)
{
	const char *tp = key_prefix(s->c, L, tpl->id);
	size_t nmods, ltp = strlen(tp);
	const char **mods = wsrc_sig_under(s->w, tp, s->ta, &nmods);
	for (int id = 0; nmods && id < L->spec->experts; id++) {
		char buf[256];
		const char *p = key_prefix_in(s->c, L, id, buf, sizeof buf);
		for (size_t i = 0; i < nmods && id != tpl->id; i++) {
			double a, b;
			if (!wsrc_attr(s->w, kcat(s, mods[i], "eps", NULL), &a) || folded_bn(m, mods[i] + ltp))
				continue;
			const char *om = kcat(s, p, mods[i] + ltp, NULL);
			if (wsrc_attr(s->w, kcat(s, om, "eps", NULL), &b) && b != a)
				return errf(e, "layer %s: in %s, module '%.*s' of expert %d has eps %g where expert %d's '%.*s' has %g, which a clone of expert %d's nodes would keep: experts built differently cannot be rebuilt from one template",
					    L->scope, s->w->path, (int)strlen(om) - 1, om, id, b, tpl->id,
					    (int)strlen(mods[i]) - 1, mods[i], a, tpl->id);
		}
	}
	return 0;
}

static int map_slots(Ctx *c, const Layer *L, const Expert *tpl, WSrc *w, Mapping *m, int clones, Src *s, Src *hs,
		     Err *e);

/* clones: missing experts will be built from tpl, so every expert id must
 * hold tpl's tensors in the checkpoint. */
static int map_layer(Ctx *c, const Layer *L, const Expert *tpl, WSrc *w, Mapping *m, int clones, Err *e)
{
	Src s = { .c = c, .ta = c->tmp, .w = w };
	map_init(&s.cache, c->tmp, 64);
	/* The second half's, in the helper's arena when it runs there. */
	Arena *ha = duo_arena();
	Src hs = { .c = c, .ta = ha ? ha : c->tmp, .w = w };
	map_init(&hs.cache, hs.ta, 64);
	int rc = map_slots(c, L, tpl, w, m, clones, &s, &hs, e);
	if (ha)
		arena_reset(ha);
	return rc;
}

static int map_slots(Ctx *c, const Layer *L, const Expert *tpl, WSrc *w, Mapping *m, int clones, Src *s, Src *hs, Err *e)
{
	if (clones && same_structure(s, L, tpl, e))
		return -1;
	size_t ns;
	Slot *sl = const_slots(c, tpl, &ns);
	const char *pre = key_prefix(c, L, tpl->id);
	m->r = arena_alloc(c->a, (ns ? ns : 1) * sizeof *m->r);
	m->n = 0;
	m->maxdiff = 0;
	for (size_t i = 0; i < ns; i++) {
		const Tensor *t = g_const(tpl->g, sl[i].name);
		Recipe *r = &m->r[m->n++];
		int64_t n;
		const float *f = tensor_f32(c, t, &n);
		Cands cs = f ? candidates(s, t, f, n, pre) : (Cands){ 0 };
		/* Best fit over every present expert: a loose tolerance (half
		 * precision) lets near misses through on the template (eps 1e-5
		 * for 1e-3), never past the exact recipe. */
		double best = INFINITY, worst = 0, tol = tolerance(s, t->data_type);
		const char *worstname = t->name;
		const Expert *worstx = tpl;
		size_t pick = cs.n;
		double *maxd = arena_alloc(c->a, (cs.n + 1) * sizeof *maxd);
		for (size_t j = 0; j < cs.n; j++) {
			maxd[j] = cs.v[j].d;
			cs.v[j].r.node = sl[i].node;
			cs.v[j].r.input = sl[i].input;
		}
		/* The present experts' verdicts, on both cores (check_half),
		 * then read expert by expert, so that the candidates sample each
		 * expert's tensor in turn (sample_diff keeps the last sample); a
		 * candidate stops at its first expert past tol. */
		Check ck = { .s = { s, hs }, .L = L, .tpl = tpl, .cs = &cs, .tol = tol };
		if (cs.n) {
			Present *pr = arena_alloc(c->tmp, L->nex * sizeof *pr);
			for (size_t k = 0; k < L->nex; k++)
				if (&L->ex[k] != tpl)
					pr[ck.np++] = present(c, L, &L->ex[k], &sl[i]);
			ck.p = pr;
			/* A sample's eight reads cost what reading 64 KiB does. */
			size_t work = 0;
			for (size_t k = 0; k < ck.np; k++)
				work += pr[k].external ? 64 << 10 : 2 * (size_t)pr[k].n * sizeof *pr[k].f;
			ck.v = arena_alloc(c->tmp, (ck.np * cs.n + 1) * sizeof *ck.v);
			ck.out[0] = arena_alloc(c->tmp, 2 * cs.n);
			ck.out[1] = ck.out[0] + cs.n;
			int lowp = s->lowp;
			duo_run(check_half, &ck, ck.np > 1 ? work * cs.n : 0);
			s->lowp = lowp;
		}
		for (size_t k = 0, q = 0; k < L->nex; k++) {
			if (&L->ex[k] == tpl)
				continue;
			for (size_t j = 0; j < cs.n; j++) {
				if (maxd[j] > tol)
					continue;
				const Verdict *v = &ck.v[q * cs.n + j];
				if (v->state == 0)
					return errf(e, "layer %s: internal error: expert %d's tensor was not compared; please report this model",
						    L->scope, L->ex[k].id);
				if (v->state < 0) {
					*e = v->e;
					return -1;
				}
				s->lowp |= v->lowp;
				double d = v->d;
				if (d != d) /* no test passes NaN; none should fail to refuse it */
					d = INFINITY;
				if (d > maxd[j])
					maxd[j] = d;
				if (d > worst) {
					worst = d;
					worstname = ck.p[q].qn;
					worstx = &L->ex[k];
				}
			}
			q++;
		}
		for (size_t j = 0; j < cs.n; j++)
			if (maxd[j] <= tol && maxd[j] < best) {
				best = maxd[j];
				pick = j;
			}
		/* Candidates that fit exactly as well must rebuild the missing
		 * experts alike; where they do not, the one with more evidence
		 * wins (see evidence), or the repair stops. The best-supported
		 * candidate is picked first, whatever the candidates' order, so
		 * evidence for one that rebuilds the missing experts like the
		 * first found counts too; then every candidate that rebuilds
		 * them otherwise must have less. */
		int *ev = arena_alloc(c->a, (cs.n + 1) * sizeof *ev);
		for (size_t j = 0; pick < cs.n && j < cs.n; j++)
			ev[j] = maxd[j] == best ? evidence(c, L, tpl, m, &sl[i], &cs.v[j].r, w, pre) : -1;
		for (size_t j = 0; pick < cs.n && j < cs.n; j++)
			if (ev[j] > ev[pick])
				pick = j;
		for (size_t j = 0; pick < cs.n && j < cs.n; j++)
			if (j != pick && ev[j] >= ev[pick] && !same_for_missing(s, L, &cs.v[pick].r, &cs.v[j].r, n))
				return errf(e, "layer %s: tensor '%s' of expert %d is rebuilt equally well as %s and as %s, which differ for the missing experts; the checkpoint cannot tell them apart",
					    L->scope, t->name, tpl->id, describe(c, pre, &cs.v[pick].r), describe(c, pre, &cs.v[j].r));
		if (pick < cs.n) {
			*r = cs.v[pick].r;
			if (best > m->maxdiff)
				m->maxdiff = best;
			continue;
		}
		if (cs.n) {
			errf(e, "layer %s: expert %d's tensor '%s' differs from its checkpoint rebuild (relative difference %.3g)",
			     L->scope, worstx->id, worstname, worst);
			const Tensor *wt = g_const(worstx->g, worstname);
			int64_t wn = 0;
			const float *wf = wt ? tensor_f32(c, wt, &wn) : NULL;
			if (!note_damage(s, wt, wf, wn, key_prefix(c, L, worstx->id), e)) {
				size_t len = strlen(e->msg);
				snprintf(e->msg + len, sizeof e->msg - len, "; is %s the checkpoint of this model?", w->path);
			}
			return -1;
		}
		/* Not from the checkpoint: structure (shapes, shared constants) is
		 * kept when every present expert agrees on it, or, with one
		 * present, when it is a fill: the constants an exporter makes
		 * for a module (GroupNorm's ones and zeros before its affine
		 * Mul and Add, GELU's 0.5) are Constant nodes in a traced export,
		 * but initializers once a simplifier (onnxslim, which the
		 * ultralytics exporter runs by default) has folded them. A
		 * parameter is in the checkpoint: by name, value or folding. */
		*r = (Recipe){ .tname = t->name, .kind = R_SHARED, .node = sl[i].node, .input = sl[i].input };
		int agree = L->nex > 1 || !f || is_fill(f, n);
		for (size_t k = 0; k < L->nex && agree; k++) {
			const Expert *q = &L->ex[k];
			if (q == tpl)
				continue;
			const Tensor *u = g_const(q->g, q->node[sl[i].node]->input[sl[i].input]);
			size_t na, nb;
			const void *pa = g_tensor_bytes(c, t, &na, e), *pb = u ? g_tensor_bytes(c, u, &nb, e) : NULL;
			agree = pa && pb && na == nb && memcmp(pa, pb, na) == 0;
		}
		if (!agree) {
			errf(e, "layer %s: tensor '%s' of expert %d (input %zu of node '%s') matches no checkpoint tensor under '%s' by name, value or Conv+BatchNorm folding (keys there: %s)",
			     L->scope, t->name, tpl->id, sl[i].input, tpl->node[sl[i].node]->name, pre, keys_under(c, w, pre));
			note_damage(s, t, f, n, pre, e);
			/* A quantized export (int8 weights behind DequantizeLinear)
			 * has no checkpoint tensor to find: the scales of the missing
			 * experts were never calibrated. */
			const char *op = tpl->node[sl[i].node]->op_type;
			if (is_quant_op(op)) {
				size_t len = strlen(e->msg);
				snprintf(e->msg + len, sizeof e->msg - len, "; it feeds %s: a quantized export, whose missing experts have no quantization scales; repair the float export, then quantize it",
					 op);
				return -1;
			}
			/* Names are hints, but a wrong `expert:` is the usual cause. */
			const char *seen = L->module && L->pattern ? named_path(c, L, tpl->id) : NULL;
			if (seen && strcmp(seen, expert_path(c, L->spec, tpl->id)) != 0) {
				size_t len = strlen(e->msg);
				snprintf(e->msg + len, sizeof e->msg - len, "; node names put expert %d at '%s': check `expert:` and `scope:`",
					 tpl->id, seen);
			}
			return -1;
		}
	}
	if (clones && same_eps(s, L, tpl, m, e))
		return -1;
	return shared_input(s, L, tpl, e);
}

static const char *shape_str(Ctx *c, const WTensor *t)
{
	char buf[200];
	size_t n = 0;
	buf[n++] = '[';
	for (int i = 0; i < t->ndim && n < sizeof buf - 24; i++)
		n += (size_t)snprintf(buf + n, sizeof buf - n, "%s%lld", i ? "," : "", (long long)t->dims[i]);
	snprintf(buf + n, sizeof buf - n, "]");
	return arena_strdup(c->a, buf);
}

/* The tensors a recipe reads must have the type and shape of the template
 * expert's (L->ex[0], see moe_densify): equal element counts alone would let
 * a [8,4,1,1] weight stand in for a [4,8,1,1] one. */
static int fits_template(Ctx *c, const Layer *L, const Recipe *r, const char *pre, WSrc *w, Err *e)
{
	const char *rest[2] = { r->rest, r->bias };
	char tb[256], kb[256], yb[256];
	const char *tpre = key_prefix_in(c, L, L->ex[0].id, tb, sizeof tb);
	for (int i = 0; i < 2; i++) {
		if (!rest[i])
			continue;
		const char *k = cat_in(c, kb, sizeof kb, pre, rest[i]);
		const WTensor *x = wsrc_get(w, k), *y = wsrc_get(w, cat_in(c, yb, sizeof yb, tpre, rest[i]));
		if (!x || !y)
			continue; /* rebuild says what is missing */
		if (!is_float(x->dtype))
			return errf(e, "'%s' in %s is %s; the expert template needs a floating-point tensor like expert %d's",
			            k, w->path, wt_dtype_name(x->dtype), L->ex[0].id);
		int same = x->ndim == y->ndim;
		for (int d = 0; same && d < x->ndim; d++)
			same = x->dims[d] == y->dims[d];
		if (!same)
			return errf(e, "'%s' in %s has shape %s, but expert %d (the template) has %s; the checkpoint does not fit this model",
			            k, w->path, shape_str(c, x), L->ex[0].id, shape_str(c, y));
	}
	return 0;
}

/* A new weight that is NaN or infinite is refused: no trained expert holds
 * one, the present experts (verified) hold none, and written it would make
 * every input routed to this expert NaN. A checkpoint damaged where only
 * missing experts are read, or a fold past float16's range, shows here. */
static int nonfinite(const Recipe *r, const char *pre, const WSrc *w, int64_t i, int64_t n, float v, int dtype, Err *e)
{
	const char *key = r->rest ? r->rest : r->bn;
	if (isfinite(v)) /* finite in f32, past the model's half precision */
		errf(e, "'%s%s' in %s rebuilds to %g at element %lld of %lld, past %s's range: written so, it would be infinite",
		     pre, key, w->path, (double)v, (long long)i, (long long)n, wt_dtype_name(dtype));
	else
		errf(e, "'%s%s' in %s rebuilds to %s at element %lld of %lld; no trained weight is one: is the checkpoint damaged?",
		     pre, key, w->path, isnan(v) ? "NaN" : "an infinite value", (long long)i, (long long)n);
	return -2;
}

/* The same for the BatchNorm statistics a fold reads: an infinite
 * running_var folds to a finite zero, which the scan of the result
 * cannot see, and the statistic, not the result, is what to name. */
static int bn_nonfinite(Src *s, const Recipe *r, const char *pre, Err *e)
{
	BN bn;
	if ((r->kind != R_FOLD_W && r->kind != R_FOLD_B) || get_bn(s, pre, r->bn, &bn))
		return 0;
	const float *v[] = { bn.var, bn.mu, bn.g, bn.b };
	static const char *const leaf[] = { "running_var", "running_mean", "weight", "bias" };
	for (int i = 0; i < 4; i++) {
		int64_t bad = v[i] ? first_nonfinite(v[i], bn.n) : -1;
		if (bad >= 0) {
			errf(e, "'%s%s.%s' in %s holds %s at element %lld of %lld; no trained BatchNorm has one: is the checkpoint damaged?",
			     pre, r->bn, leaf[i], s->w->path, isnan(v[i][bad]) ? "NaN" : "an infinite value", (long long)bad,
			     (long long)bn.n);
			return -2;
		}
	}
	for (int64_t i = 0; i < bn.n; i++) {
		if (bn.var[i] + fold_eps(&bn, r) >= 0)
			continue;
		errf(e, "'%s%s.running_var' in %s holds %g at element %lld of %lld, a negative variance: is the checkpoint damaged?",
		     pre, r->bn, s->w->path, (double)bn.var[i], (long long)i, (long long)bn.n);
		return -2;
	}
	return 0;
}

/* The n elements recipe r rebuilds for the expert at pre, in dtype, to
 * out: -1 when it cannot, -2 when the values are not finite (e says). */
static int produce(Src *s, const Recipe *r, const char *pre, int64_t n, int dtype, unsigned char *out, Err *e)
{
	/* f32 models: folds go straight into the new tensor. */
	int direct = dtype == ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT;
	const float *f = rebuild(s, r, pre, n, direct ? (float *)out : scratch(s, n), e);
	if (!f)
		return -1;
	if (bn_nonfinite(s, r, pre, e))
		return -2;
	int64_t bad = first_nonfinite(f, n);
	if (bad >= 0)
		return nonfinite(r, pre, s->w, bad, n, f[bad], dtype, e);
	if (direct) {
		if (f != (const float *)out)
			memcpy(out, f, (size_t)n * 4);
		return 0;
	}
	for (int64_t i = 0; i < n; i++) {
		switch (dtype) {
		case ONNX__TENSOR_PROTO__DATA_TYPE__DOUBLE: {
			double d = f[i];
			memcpy(out + 8 * i, &d, 8);
			break;
		}
		case ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT16: {
			uint16_t h = wt_f32_to_f16(f[i]);
			if ((h & 0x7c00) == 0x7c00)
				return nonfinite(r, pre, s->w, i, n, f[i], dtype, e);
			memcpy(out + 2 * i, &h, 2);
			break;
		}
		case ONNX__TENSOR_PROTO__DATA_TYPE__BFLOAT16: {
			uint16_t h = wt_f32_to_bf16(f[i]);
			if ((h & 0x7f80) == 0x7f80)
				return nonfinite(r, pre, s->w, i, n, f[i], dtype, e);
			memcpy(out + 2 * i, &h, 2);
			break;
		}
		}
	}
	return 0;
}

/* Everything rebuilding expert id's tensor t can find wrong before
 * reading its weights; *pre its key prefix (in pb when it fits). */
static int build_check(Ctx *c, const Layer *L, const Recipe *r, const Tensor *t, int id, WSrc *w, char *pb,
		       size_t cap, const char **pre, Err *e)
{
	*pre = key_prefix_in(c, L, id, pb, cap);
	/* The checkpoint's values go to a float template in its own type. */
	if (!is_float(t->data_type))
		return errf(e, "layer %s: template tensor '%s' has type %s, which cannot be rebuilt from a checkpoint",
			    L->scope, t->name, wt_dtype_name(t->data_type));
	if (fits_template(c, L, r, *pre, w, e))
		return errwrap(e, "layer %s: expert %d", L->scope, id);
	return 0;
}

/* A failed rebuild says what is there: the usual cause is a wrong prefix
 * or pattern. */
static int build_failed(Ctx *c, const Layer *L, int id, WSrc *w, const char *pre, Err *e)
{
	errwrap(e, "layer %s: expert %d", L->scope, id);
	size_t len = strlen(e->msg);
	snprintf(e->msg + len, sizeof e->msg - len, " (keys under '%s': %s)", pre, keys_under(c, w, pre));
	return -1;
}

int moe_build(Ctx *c, const Layer *L, const Recipe *r, const Tensor *t, int id, WSrc *w, MoeBnMemo *bm,
	      void **data, size_t *nbytes, Err *e)
{
	int64_t n = g_tensor_numel(t);
	size_t es = wt_dtype_size(t->data_type);
	void *out = arena_bulk(c->a, (size_t)n * es + 1);
	if (moe_build_into(c, L, r, t, id, w, bm, out, e))
		return -1;
	*data = out;
	*nbytes = (size_t)n * es;
	return 0;
}

int moe_build_into(Ctx *c, const Layer *L, const Recipe *r, const Tensor *t, int id, WSrc *w, MoeBnMemo *bm,
		   void *dst, Err *e)
{
	/* The cache starts empty and unallocated: f32 checkpoints never
	 * use it, and this runs once per new tensor. */
	Src s = { .c = c, .ta = c->tmp, .w = w, .cache = { .a = c->tmp }, .bnm = bm };
	char pb[256];
	const char *pre;
	if (build_check(c, L, r, t, id, w, pb, sizeof pb, &pre, e))
		return -1;
	int rc = produce(&s, r, pre, g_tensor_numel(t), t->data_type, dst, e);
	if (rc == -2)
		return errwrap(e, "layer %s: expert %d", L->scope, id);
	if (rc)
		return build_failed(c, L, id, w, pre, e);
	return 0;
}

/* A tensor moe_build_later checked, built when the model is written. */
typedef struct {
	Later l;
	Recipe r;
	WSrc *w; /* open until then: the pipeline hands it to the model */
	const char *pre, *scope;
	int64_t n;
	int dtype, id;
} Build;

static int build_fill(const Later *l, void *dst, Arena *tmp, Err *e)
{
	const Build *b = (const Build *)l;
	Src s = { .ta = tmp, .w = b->w, .cache = { .a = tmp }, .copyin = 1 };
	if (produce(&s, &b->r, b->pre, b->n, b->dtype, dst, e))
		return errwrap(e, "layer %s: expert %d", b->scope, b->id);
	return 0;
}

Later *moe_build_later(Ctx *c, const Layer *L, const Recipe *r, const Tensor *t, int id, WSrc *w, MoeBnMemo *bm,
		       Err *e)
{
	Src s = { .c = c, .ta = c->tmp, .w = w, .cache = { .a = c->tmp }, .bnm = bm };
	char pb[256];
	const char *pre;
	int64_t n = g_tensor_numel(t);
	if (build_check(c, L, r, t, id, w, pb, sizeof pb, &pre, e))
		return NULL;
	if (!rebuild(&s, r, pre, n, NULL, e)) {
		build_failed(c, L, id, w, pre, e);
		return NULL;
	}
	Build *b = arena_alloc(c->a, sizeof *b);
	*b = (Build){ .l.fill = build_fill, .r = *r, .w = w, .pre = pre == pb ? arena_strdup(c->a, pb) : pre,
		      .scope = L->scope, .n = n, .dtype = t->data_type, .id = id };
	return &b->l;
}
