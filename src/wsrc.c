#include "wsrc.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "filemap.h"

static int ends_with(const char *s, const char *suf)
{
	size_t n = strlen(s), m = strlen(suf);
	return n >= m && strcasecmp(s + n - m, suf) == 0;
}

enum { W_UNKNOWN, W_DIR, W_SAFETENSORS, W_NPZ, W_ONNX, W_PT };

/* A file whose name says nothing (a Lightning `.ckpt`, a `best` without
 * extension, safetensors named `.weights`): its first bytes do. A zip
 * whose first member is an .npy is numpy's .npz, any other torch.save's;
 * safetensors opens with its header's length and '{'; a pickle is a
 * legacy torch.save (which the reader refuses with its fix); an ONNX
 * model opens with its ir_version, field 1. */
static int sniff(const char *path, off_t size)
{
	unsigned char b[30 + 256];
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return W_UNKNOWN;
	ssize_t n = pread(fd, b, sizeof b, 0);
	close(fd);
	if (n >= 30 && memcmp(b, "PK\3\4", 4) == 0) {
		size_t ln = (size_t)b[26] | (size_t)b[27] << 8;
		return 30 + ln <= (size_t)n && ln >= 4 && memcmp(b + 30 + ln - 4, ".npy", 4) == 0 ? W_NPZ : W_PT;
	}
	if (n >= 9 && b[8] == '{') {
		uint64_t h = 0;
		for (int i = 0; i < 8; i++)
			h |= (uint64_t)b[i] << (8 * i);
		if (h >= 2 && h <= (uint64_t)size - 8)
			return W_SAFETENSORS;
	}
	if (n >= 2 && b[0] == 0x80 && b[1] >= 2 && b[1] <= 5)
		return W_PT;
	if (n >= 2 && b[0] == 0x08)
		return W_ONNX;
	return W_UNKNOWN;
}

static int kind_of(const char *path, const struct stat *st)
{
	if (S_ISDIR(st->st_mode))
		return W_DIR;
	if (ends_with(path, ".safetensors"))
		return W_SAFETENSORS;
	if (ends_with(path, ".npz"))
		return W_NPZ;
	if (ends_with(path, ".onnx"))
		return W_ONNX;
	if (ends_with(path, ".pt") || ends_with(path, ".pth") || ends_with(path, ".bin"))
		return W_PT;
	/* Only a regular file is opened to look: a FIFO would block. */
	return S_ISREG(st->st_mode) ? sniff(path, st->st_size) : W_UNKNOWN;
}

WSrc *wsrc_open(const char *path, const char *key, Arena *a, Err *e)
{
	struct stat st;
	if (stat(path, &st) < 0) {
		errf(e, "%s: %s; check the 'weights' path in experts.yaml", path, strerror(errno));
		return NULL;
	}
	WSrc *w = arena_alloc(a, sizeof *w);
	w->path = arena_strdup(a, path);
	w->a = a;
	map_init(&w->byname, a, 64);
	int rc;
	int kind = kind_of(path, &st);
	if (kind == W_DIR)
		rc = wsrc_read_npydir(w, e);
	else if (kind == W_SAFETENSORS)
		rc = wsrc_read_safetensors(w, e);
	else if (kind == W_NPZ)
		rc = wsrc_read_npz(w, e);
	else if (kind == W_ONNX)
		rc = wsrc_read_onnx(w, e);
	else if (kind == W_PT)
		rc = wsrc_read_pt(w, key, e);
	else {
		errf(e, "%s: unknown weight source type (neither its name nor its first bytes say); use .safetensors, .npz, .onnx, .pt/.pth or a directory of .npy files",
			path);
		return NULL;
	}
	if (rc) {
		/* Readers report without the file name; add it once. */
		size_t n = strlen(path);
		if (strncmp(e->msg, path, n) != 0 || e->msg[n] != ':')
			errwrap(e, "%s", path);
		wsrc_close(w);
		return NULL;
	}
	return w;
}

void wsrc_close(WSrc *w)
{
	if (!w)
		return;
	for (size_t i = 0; i < w->nmaps; i++) {
		filemap_remove(w->maps[i].base);
		munmap(w->maps[i].base, w->maps[i].len);
	}
	w->nmaps = 0;
}

void wsrc_drop(WSrc *w)
{
	for (size_t i = 0; w && i < w->nmaps; i++)
		if (w->maps[i].len)
			madvise(w->maps[i].base, w->maps[i].len, MADV_DONTNEED);
}

static int by_name(const void *a, const void *b)
{
	return strcmp((*(WTensor *const *)a)->name, (*(WTensor *const *)b)->name);
}

void wsrc_sort(WSrc *w)
{
	if (w->order)
		return;
	w->order = arena_alloc(w->a, (w->n + 1) * sizeof *w->order);
	if (w->n)
		memcpy(w->order, w->t, w->n * sizeof *w->order);
	qsort(w->order, w->n, sizeof *w->order, by_name);
}

void wsrc_range(WSrc *w, const char *prefix, size_t *lo, size_t *hi)
{
	wsrc_sort(w);
	size_t lp = strlen(prefix), a = 0, b = w->n;
	while (a < b) { /* first key >= prefix */
		size_t m = a + (b - a) / 2;
		if (strcmp(w->order[m]->name, prefix) < 0)
			a = m + 1;
		else
			b = m;
	}
	*lo = a;
	while (a < w->n && strncmp(w->order[a]->name, prefix, lp) == 0)
		a++;
	*hi = a;
}

const WTensor *wsrc_sorted(const WSrc *w, size_t i)
{
	return w->order[i];
}

int wsrc_attr(const WSrc *w, const char *name, double *v)
{
	const double *p = w->attr.a ? map_get(&w->attr, name) : NULL;
	if (p)
		*v = *p;
	return p != NULL;
}

const char *wsrc_sig(const WSrc *w, const char *prefix)
{
	return w->sig.a ? map_get(&w->sig, prefix) : NULL;
}

const char **wsrc_sig_under(const WSrc *w, const char *prefix, Arena *a, size_t *n)
{
	size_t lp = strlen(prefix), k = 0;
	*n = 0;
	if (!w->sig.a)
		return NULL;
	for (size_t i = 0; i < w->sig.cap; i++)
		k += w->sig.slot[i].kt && !strncmp(map_slot_key(&w->sig.slot[i]), prefix, lp);
	const char **v = arena_alloc(a, (k + 1) * sizeof *v);
	for (size_t i = 0; i < w->sig.cap; i++)
		if (w->sig.slot[i].kt && !strncmp(map_slot_key(&w->sig.slot[i]), prefix, lp))
			v[(*n)++] = map_slot_key(&w->sig.slot[i]);
	return v;
}

const WTensor *wsrc_get(const WSrc *w, const char *name)
{
	return map_get(&w->byname, name);
}

void wsrc_prefetch(const WSrc *w, const char *name)
{
	map_prefetch(&w->byname, name);
}

void wsrc_restart(WSrc *w, size_t n)
{
	w->n = 0;
	w->t = NULL;
	w->order = NULL;
	map_init(&w->byname, w->a, n);
}

int wsrc_add(WSrc *w, const WTensor *t, Err *e)
{
	WTensor **slot = (WTensor **)map_ref(&w->byname, t->name);
	if (*slot)
		return errf(e, "tensor '%s' appears twice", t->name);
	WTensor *x = *slot = arena_alloc(w->a, sizeof *x + (size_t)t->ndim * sizeof *x->dims);
	*x = *t;
	x->dims = (int64_t *)(x + 1);
	if (t->ndim)
		memcpy(x->dims, t->dims, (size_t)t->ndim * sizeof *x->dims);
	/* Capacity is implicit: 16, then doubled each time n reaches a power of two. */
	if (w->n == 0 || (w->n >= 16 && !(w->n & (w->n - 1))))
		w->t = arena_grow(w->a, w->t, w->n * sizeof *w->t, (w->n ? 2 * w->n : 16) * sizeof *w->t);
	w->t[w->n++] = *slot;
	return 0;
}

int wsrc_mmap(WSrc *w, const char *path, const void **base, size_t *len, Err *e)
{
	struct stat st;
	int fd = file_open_regular(path, &st, "give the checkpoint as a file", e);
	if (fd < 0)
		return -1;
	*len = (size_t)st.st_size;
	if (st.st_size == 0) {
		close(fd);
		*base = "";
		return 0;
	}
	void *p = mmap(NULL, *len, PROT_READ, MAP_PRIVATE, fd, 0);
	int err = errno;
	if (p != MAP_FAILED)
		filemap_add(p, *len, fd, path);
	close(fd);
	if (p == MAP_FAILED)
		return errf(e, "%s: cannot map: %s", path, strerror(err));
	if (w->nmaps == 0 || (w->nmaps >= 4 && !(w->nmaps & (w->nmaps - 1))))
		w->maps = arena_grow(w->a, w->maps, w->nmaps * sizeof *w->maps,
			(w->nmaps ? 2 * w->nmaps : 4) * sizeof *w->maps);
	w->maps[w->nmaps++] = (WMapping){ p, *len };
	*base = p;
	return 0;
}

static int cmpstr(const void *a, const void *b)
{
	return strcmp(*(const char *const *)a, *(const char *const *)b);
}

int wsrc_missing(const WSrc *w, const char *key, const char *under, Err *e)
{
	size_t ul = strlen(under), k = 0;
	const char **found = malloc((w->n ? w->n : 1) * sizeof *found);
	if (!found)
		return errf(e, "%s: no tensor '%s'", w->path, key);
	for (size_t i = 0; i < w->n; i++)
		if (strncmp(w->t[i]->name, under, ul) == 0)
			found[k++] = w->t[i]->name + ul;
	qsort(found, k, sizeof *found, cmpstr);
	char list[600];
	size_t n = 0;
	list[0] = 0;
	for (size_t i = 0; i < k && n < sizeof list; i++) {
		int r = snprintf(list + n, sizeof list - n, "%s%s", i ? ", " : "", found[i]);
		if (r < 0 || (size_t)r >= sizeof list - n) {
			snprintf(list + n, sizeof list - n, ", ... (%zu in all)", k);
			break;
		}
		n += (size_t)r;
	}
	free(found);
	if (k)
		return errf(e, "%s: no tensor '%s'; keys under '%s': %s", w->path, key, under, list);
	return errf(e, "%s: no tensor '%s' and no key starts with '%s' (%zu tensors in the file); check scope, expert and prefix in experts.yaml",
		w->path, key, under, w->n);
}

size_t wt_dtype_size(int dtype)
{
	switch (dtype) {
	case 1: case 6: case 12: return 4;            /* float int32 uint32 */
	case 2: case 3: case 9: return 1;             /* uint8 int8 bool */
	case 17: case 18: case 19: case 20: return 1; /* float8 variants */
	case 4: case 5: case 10: case 16: return 2;   /* uint16 int16 float16 bfloat16 */
	case 7: case 11: case 13: case 14: return 8;  /* int64 double uint64 complex64 */
	case 15: return 16;                           /* complex128 */
	default: return 0;                            /* undefined, string, unknown */
	}
}

const char *wt_dtype_name(int dtype)
{
	static const char *n[] = { "undefined", "float", "uint8", "int8", "uint16", "int16", "int32",
		"int64", "string", "bool", "float16", "double", "uint32", "uint64", "complex64",
		"complex128", "bfloat16", "float8e4m3fn", "float8e4m3fnuz", "float8e5m2", "float8e5m2fnuz" };
	return dtype >= 0 && dtype < (int)(sizeof n / sizeof *n) ? n[dtype] : "unknown";
}

int64_t wt_numel(const WTensor *t)
{
	if (t->ndim < 0 || t->ndim > WT_MAXDIM)
		return -1;
	int64_t n = 1;
	for (int i = 0; i < t->ndim; i++) {
		int64_t d = t->dims[i];
		if (d < 0 || (d && n > INT64_MAX / d))
			return -1;
		n *= d;
	}
	return n;
}

int64_t wt_nbytes(const WTensor *t)
{
	int64_t n = wt_numel(t);
	int64_t s = (int64_t)wt_dtype_size(t->dtype);
	if (n < 0 || !s || n > INT64_MAX / s)
		return -1;
	return n * s;
}

float wt_f16_to_f32(uint16_t h)
{
	uint32_t s = (uint32_t)(h & 0x8000) << 16, ex = h >> 10 & 0x1f, m = h & 0x3ff, x;
	if (ex == 0) {
		float v = ldexpf((float)m, -24); /* zero or subnormal: exact */
		return s ? -v : v;
	}
	if (ex == 31)
		x = s | 0x7f800000 | m << 13;
	else
		x = s | (ex + 112) << 23 | m << 13;
	float f;
	memcpy(&f, &x, 4);
	return f;
}

float wt_bf16_to_f32(uint16_t h)
{
	uint32_t x = (uint32_t)h << 16;
	float f;
	memcpy(&f, &x, 4);
	return f;
}

/* Round to nearest even, as the hardware conversions do (after F. Giesen's
 * float_to_half_fast3_rtne): overflow goes to inf, tiny values to
 * subnormals or signed zero, NaN stays a quiet NaN. */
uint16_t wt_f32_to_f16(float f)
{
	uint32_t x;
	memcpy(&x, &f, 4);
	uint32_t sign = x & 0x80000000u;
	x ^= sign;
	uint16_t o;
	if (x >= (127u + 16) << 23)
		o = x > 0x7f800000u ? 0x7e00 | (x >> 13 & 0x1ff) : 0x7c00;
	else if (x < 113u << 23) {
		/* Adding 0.5 aligns the 10 mantissa bits at the bottom of the
		 * float; the FPU rounds the rest away to nearest even. */
		uint32_t magic = ((127u - 15) + (23 - 10) + 1) << 23;
		float fm, fx;
		memcpy(&fm, &magic, 4);
		memcpy(&fx, &x, 4);
		fx += fm;
		memcpy(&x, &fx, 4);
		o = (uint16_t)(x - magic);
	} else {
		uint32_t odd = x >> 13 & 1;
		x += ((uint32_t)(15 - 127) << 23) + 0xfff + odd;
		o = (uint16_t)(x >> 13);
	}
	return (uint16_t)(o | sign >> 16);
}

uint16_t wt_f32_to_bf16(float f)
{
	uint32_t x;
	memcpy(&x, &f, 4);
	if ((x & 0x7fffffff) > 0x7f800000)
		return (uint16_t)(x >> 16 | 0x40); /* keep NaN a (quiet) NaN */
	x += 0x7fff + (x >> 16 & 1);
	return (uint16_t)(x >> 16);
}

static int is_float(int dt)
{
	return dt == 1 || dt == 10 || dt == 16 || dt == 11;
}

int wt_to_f32(const WTensor *t, float *out, Err *e)
{
	int64_t n = wt_numel(t);
	if (n < 0)
		return errf(e, "tensor '%s': element count overflows", t->name);
	const unsigned char *p = t->data;
	switch (t->dtype) {
	case 1:
		memcpy(out, p, (size_t)n * 4);
		return 0;
	case 10: case 16:
		for (int64_t i = 0; i < n; i++) {
			uint16_t h;
			memcpy(&h, p + 2 * i, 2);
			out[i] = t->dtype == 10 ? wt_f16_to_f32(h) : wt_bf16_to_f32(h);
		}
		return 0;
	case 11:
		for (int64_t i = 0; i < n; i++) {
			double d;
			memcpy(&d, p + 8 * i, 8);
			out[i] = (float)d;
		}
		return 0;
	default:
		return errf(e, "tensor '%s' is %s, not a floating-point type", t->name, wt_dtype_name(t->dtype));
	}
}

int wt_convert(const WTensor *t, int dtype, Arena *a, WTensor *out, Err *e)
{
	*out = *t;
	if (t->dtype == dtype)
		return 0;
	if (!is_float(t->dtype) || !is_float(dtype))
		return errf(e, "tensor '%s' is %s and cannot become %s; only float, float16, bfloat16 and double convert",
			t->name, wt_dtype_name(t->dtype), wt_dtype_name(dtype));
	int64_t n = wt_numel(t);
	if (n < 0 || (uint64_t)n > SIZE_MAX / 8)
		return errf(e, "tensor '%s': element count overflows", t->name);
	/* Sizes from the file's dims (checked against its bytes by the
	 * reader), and against the memory budget here. */
	float *f = t->dtype == 1 ? NULL : arena_try(a, (size_t)n * 4 + 1, e);
	if (t->dtype != 1 && !f)
		return errwrap(e, "tensor '%s'", t->name);
	if (f && wt_to_f32(t, f, e))
		return -1;
	const float *src = f ? f : NULL;
	unsigned char *o = arena_try(a, (size_t)n * wt_dtype_size(dtype) + 1, e);
	if (!o)
		return errwrap(e, "tensor '%s'", t->name);
	for (int64_t i = 0; i < n; i++) {
		float v;
		if (src)
			v = src[i];
		else
			memcpy(&v, (const unsigned char *)t->data + 4 * i, 4);
		if (dtype == 1)
			memcpy(o + 4 * i, &v, 4);
		else if (dtype == 11) {
			double d = v;
			memcpy(o + 8 * i, &d, 8);
		} else {
			uint16_t h = dtype == 10 ? wt_f32_to_f16(v) : wt_f32_to_bf16(v);
			memcpy(o + 2 * i, &h, 2);
		}
	}
	/* double -> f16/bf16 goes through f32: a double rounding, harmless for
	 * weights (error below half an ulp of the target in all but ties). */
	out->dtype = dtype;
	out->data = o;
	out->nbytes = (size_t)n * wt_dtype_size(dtype);
	return 0;
}
