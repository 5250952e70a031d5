/* safetensors: an 8-byte little-endian header length, a JSON header
 * {"name": {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__":
 * {...}}, then the data area the offsets index. Tensors point into the
 * mapping. */
#include <stdlib.h>
#include <string.h>

#include "json.h"
#include "wsrc.h"

static const struct {
	const char *name;
	int dtype;
} DTYPES[] = {
	{ "F64", 11 }, { "F32", 1 }, { "F16", 10 }, { "BF16", 16 },
	{ "I64", 7 }, { "I32", 6 }, { "I16", 5 }, { "I8", 3 },
	{ "U64", 13 }, { "U32", 12 }, { "U16", 4 }, { "U8", 2 },
	{ "BOOL", 9 }, { "F8_E4M3", 17 }, { "F8_E5M2", 19 },
};

enum { MAX_HEADER = 32 << 20 };

typedef struct {
	int64_t begin, end;
	const char *name;
} Span;

static int cmpspan(const void *a, const void *b)
{
	const Span *x = a, *y = b;
	return x->begin < y->begin ? -1 : x->begin > y->begin ? 1 : (x->end > y->end) - (x->end < y->end);
}

/* The dtype number of the n bytes at s, 0 for none. */
static int dtype_of(const char *s, size_t n)
{
	for (size_t i = 0; i < sizeof DTYPES / sizeof *DTYPES; i++) {
		const char *d = DTYPES[i].name;
		size_t k = 0;
		while (k < n && d[k] && d[k] == s[k])
			k++;
		if (k == n && !d[k])
			return DTYPES[i].dtype;
	}
	return 0;
}

static int entry(WSrc *w, const char *name, const JVal *v, const unsigned char *data,
	uint64_t dlen, Span *sp, Err *e)
{
	if (v->type != J_OBJ)
		return errf(e, "header: tensor '%s' is %s, expected an object", name, json_type_name(v->type));
	const JVal *dt = NULL, *sh = NULL, *off = NULL;
	for (size_t i = 0; i < v->n; i++) {
		const JVal **slot = !strcmp(v->key[i], "dtype") ? &dt
			: !strcmp(v->key[i], "shape") ? &sh
			: !strcmp(v->key[i], "data_offsets") ? &off : NULL;
		if (!slot)
			return errf(e, "header: tensor '%s' has unknown field '%s'", name, v->key[i]);
		if (*slot)
			return errf(e, "header: tensor '%s' has field '%s' twice", name, v->key[i]);
		*slot = v->v[i];
	}
	if (!dt || !sh || !off)
		return errf(e, "header: tensor '%s' lacks '%s'", name, !dt ? "dtype" : !sh ? "shape" : "data_offsets");
	int64_t dims[WT_MAXDIM];
	WTensor t = { .name = arena_strdup(w->a, name), .dims = dims };
	if (dt->type != J_STR)
		return errf(e, "header: tensor '%s': dtype is %s, expected a string", name, json_type_name(dt->type));
	t.dtype = dtype_of(dt->s, strlen(dt->s));
	if (!t.dtype)
		return errf(e, "header: tensor '%s' has unknown dtype '%s'", name, dt->s);
	if (sh->type != J_ARR)
		return errf(e, "header: tensor '%s': shape is %s, expected an array", name, json_type_name(sh->type));
	if (sh->n > WT_MAXDIM)
		return errf(e, "header: tensor '%s' has %zu dimensions; at most %d are supported", name, sh->n, WT_MAXDIM);
	t.ndim = (int)sh->n;
	for (size_t i = 0; i < sh->n; i++)
		if (json_uint(sh->v[i], &t.dims[i]))
			return errf(e, "header: tensor '%s': shape[%zu] is not a non-negative integer", name, i);
	int64_t b, en;
	if (off->type != J_ARR || off->n != 2 || json_uint(off->v[0], &b) || json_uint(off->v[1], &en))
		return errf(e, "header: tensor '%s': data_offsets must be [begin, end] non-negative integers", name);
	if (b > en || (uint64_t)en > dlen)
		return errf(e, "header: tensor '%s': data_offsets [%lld, %lld] outside the data area (%llu bytes); file truncated?",
			name, (long long)b, (long long)en, (unsigned long long)dlen);
	int64_t nb = wt_nbytes(&t);
	if (nb < 0)
		return errf(e, "header: tensor '%s': shape overflows", name);
	if (nb != en - b)
		return errf(e, "header: tensor '%s': %s with shape of %lld elements needs %lld bytes, data_offsets give %lld",
			name, dt->s, (long long)wt_numel(&t), (long long)nb, (long long)(en - b));
	t.data = data + b;
	t.nbytes = (size_t)nb;
	*sp = (Span){ b, en, t.name };
	return wsrc_add(w, &t, e);
}

static int entries(WSrc *w, const unsigned char *p, uint64_t hl, size_t len, Arena *ta, Err *e);

int wsrc_read_safetensors(WSrc *w, Err *e)
{
	const void *base;
	size_t len;
	if (wsrc_mmap(w, w->path, &base, &len, e))
		return -1;
	const unsigned char *p = base;
	if (len < 8)
		return errf(e, "truncated: %zu bytes, shorter than the 8-byte header length", len);
	uint64_t hl = 0;
	for (int i = 7; i >= 0; i--)
		hl = hl << 8 | p[i];
	/* The first 8 bytes are a number only in a safetensors file: of
	 * anything else (a path that is a symlink to another file) they are
	 * that file's content, which a message must not print. */
	if (len < 9 || p[8] != '{')
		return errf(e, "not a safetensors file (no JSON header after the 8-byte header length)");
	/* Headers hold about 100 bytes per tensor: 32 MiB is some 300 000
	 * tensors. The parse may take 16 bytes per header byte (a real one
	 * takes under 10), so a hostile header costs at most 512 MiB before
	 * it is refused. */
	if (hl > MAX_HEADER)
		return errf(e, "header of %llu bytes; at most %d MiB (some 300 000 tensors) are read: split the checkpoint into shards, one 'weights' per layer",
			(unsigned long long)hl, MAX_HEADER >> 20);
	if (hl > len - 8)
		return errf(e, "header length %llu runs past the end of the file (%zu bytes); truncated, or not a safetensors file",
			(unsigned long long)hl, len);
	/* The parsed header is some ten times its text (checkpoints of many
	 * small tensors have a header as large as their data): it lives in an
	 * arena of its own, gone once the tensors are indexed. */
	Arena *ta = arena_new();
	int rc = entries(w, p, hl, len, ta, e);
	arena_free(ta);
	return rc;
}

typedef struct {
	WSrc *w;
	const unsigned char *data;
	uint64_t dlen;
	Span *sp;
	size_t ns, cap;
	int ours; /* the failure is in an entry, not in the JSON */
} Hdr;

static int member(void *ud, const char *key, const JVal *v, Err *e)
{
	Hdr *h = ud;
	h->ours = 1;
	if (!strcmp(key, "__metadata__")) {
		if (v->type != J_OBJ)
			return errf(e, "header: __metadata__ is %s, expected an object", json_type_name(v->type));
		for (size_t k = 0; k < v->n; k++)
			if (v->v[k]->type != J_STR)
				return errf(e, "header: __metadata__ '%s' is %s, expected a string",
					v->key[k], json_type_name(v->v[k]->type));
		h->ours = 0;
		return 0;
	}
	if (h->ns == h->cap) {
		size_t nc = h->cap ? 2 * h->cap : 1024;
		Span *n = realloc(h->sp, nc * sizeof *n);
		if (!n)
			return errf(e, "out of memory indexing the header");
		h->sp = n;
		h->cap = nc;
	}
	if (entry(h->w, key, v, h->data, h->dlen, &h->sp[h->ns], e))
		return -1;
	h->ns++;
	h->ours = 0;
	return 0;
}

/* ---- the common spelling, read without the JSON tree ----
 * safetensors' writer spells every header alike: no space but the padding
 * after it, each tensor {"dtype":"..","shape":[..],"data_offsets":[b,e]}
 * in that order, names without escapes. Such a header is read here
 * directly: the prefetch of a 400-layer checkpoint (81 600 tensors), on
 * the core the model's load shares, took 124 ms through the parser, 67
 * this way (perf, 8 runs each, the sort for prefixes included). A header
 * that departs from that spelling anywhere, or has an entry entry() would
 * refuse, is read through the parser instead, whose messages say what is
 * wrong. */

typedef struct {
	const char *p, *end;
} Rd;

static int lit(Rd *r, const char *s, size_t n)
{
	if ((size_t)(r->end - r->p) < n)
		return 0;
	for (size_t i = 0; i < n; i++)
		if (r->p[i] != s[i])
			return 0;
	r->p += n;
	return 1;
}
#define LIT(r, s) lit(r, s, sizeof s - 1)

/* A string without escapes or control characters: its bytes. */
static int plain_str(Rd *r, const char **s, size_t *n)
{
	const char *q = r->p;
	if (q >= r->end || *q != '"')
		return 0;
	const char *b = ++q;
	while (q < r->end && *q != '"') {
		if (*q == '\\' || (unsigned char)*q < 0x20)
			return 0;
		q++;
	}
	if (q >= r->end)
		return 0;
	*s = b;
	*n = (size_t)(q - b);
	r->p = q + 1;
	return 1;
}

/* A non-negative integer as JSON spells it (no leading zero, no
 * fraction or exponent), of at most 18 digits. */
static int plain_uint(Rd *r, int64_t *v)
{
	const char *q = r->p;
	int64_t x = 0;
	int k = 0;
	if (q < r->end && *q == '0')
		q++, k = 1;
	else
		for (; q < r->end && *q >= '0' && *q <= '9'; q++) {
			if (++k > 18)
				return 0;
			x = x * 10 + (*q - '0');
		}
	if (!k || (q < r->end && ((*q >= '0' && *q <= '9') || *q == '.' || *q == 'e' || *q == 'E')))
		return 0;
	*v = x;
	r->p = q;
	return 1;
}

/* The member at r in the common spelling, checked as entry() checks it:
 * 1 (*name NULL for __metadata__, else its bytes, t all but its name, *sp
 * its span), 0 where it is not. */
static int plain_member(Rd *r, const unsigned char *data, uint64_t dlen, WTensor *t, const char **name, size_t *nlen,
	Span *sp)
{
	const char *s;
	size_t n;
	if (!plain_str(r, name, nlen) || !LIT(r, ":"))
		return 0;
	if (*nlen == 12 && !memcmp(*name, "__metadata__", 12)) {
		*name = NULL;
		if (!LIT(r, "{"))
			return 0;
		if (LIT(r, "}"))
			return 1;
		do
			if (!plain_str(r, &s, &n) || !LIT(r, ":") || !plain_str(r, &s, &n))
				return 0;
		while (LIT(r, ","));
		return LIT(r, "}");
	}
	if (!LIT(r, "{\"dtype\":") || !plain_str(r, &s, &n))
		return 0;
	t->dtype = dtype_of(s, n);
	if (!t->dtype || !LIT(r, ",\"shape\":["))
		return 0;
	t->ndim = 0;
	if (!LIT(r, "]")) {
		do
			if (t->ndim == WT_MAXDIM || !plain_uint(r, &t->dims[t->ndim++]))
				return 0;
		while (LIT(r, ","));
		if (!LIT(r, "]"))
			return 0;
	}
	int64_t b, en;
	if (!LIT(r, ",\"data_offsets\":[") || !plain_uint(r, &b) || !LIT(r, ",") || !plain_uint(r, &en) ||
	    !LIT(r, "]}"))
		return 0;
	int64_t nb = wt_nbytes(t);
	if (b > en || (uint64_t)en > dlen || nb < 0 || nb != en - b)
		return 0;
	t->data = data + b;
	t->nbytes = (size_t)nb;
	*sp = (Span){ b, en, NULL };
	return 1;
}

/* The header's members in the common spelling, each added to w as it is
 * read (its name copied), its span in sp (room for most): how many
 * tensors, or -1 where the header departs from that spelling. A tensor
 * wsrc_add refuses (a name twice) sets *bad, e saying why, and the rest
 * is only read: a header that departs further on is for the parser, which
 * would have met that first. */
static long plain_header(WSrc *w, const char *hdr, size_t hl, const unsigned char *data, uint64_t dlen, Span *sp,
	size_t most, int *bad, Err *e)
{
	Rd r = { hdr, hdr + hl };
	long nt = 0;
	if (!LIT(&r, "{"))
		return -1;
	if (!LIT(&r, "}")) {
		do {
			int64_t dims[WT_MAXDIM];
			WTensor t = { .dims = dims };
			const char *name;
			size_t nlen;
			Span s;
			if (!plain_member(&r, data, dlen, &t, &name, &nlen, &s) || (name && (size_t)nt == most))
				return -1;
			if (!name)
				continue;
			if (!*bad) {
				char *nm = arena_alloc_raw(w->a, nlen + 1);
				memcpy(nm, name, nlen);
				nm[nlen] = 0;
				t.name = s.name = nm;
				sp[nt] = s;
				*bad = wsrc_add(w, &t, e) != 0;
			}
			nt++;
		} while (LIT(&r, ","));
		if (!LIT(&r, "}"))
			return -1;
	}
	while (r.p < r.end && *r.p == ' ')
		r.p++;
	return r.p == r.end ? nt : -1;
}

/* The tensors a header in the common spelling holds: each has one
 * data_offsets, and no string there holds a quote unescaped. */
static size_t plain_count(const char *hdr, size_t hl)
{
	static const char key[] = "\"data_offsets\":[";
	const size_t kl = sizeof key - 1;
	size_t n = 0;
	for (const char *p = hdr, *end = hdr + hl; (p = memchr(p, '[', (size_t)(end - p))); p++)
		n += (size_t)(p - hdr) >= kl - 1 && !memcmp(p - (kl - 1), key, kl);
	return n;
}

static int entries(WSrc *w, const unsigned char *p, uint64_t hl, size_t len, Arena *ta, Err *e)
{
	Hdr h = { w, p + 8 + hl, len - 8 - hl, NULL, 0, 0, 0 };
	const char *hdr = (const char *)p + 8;
	/* Read once, counted first: the count sizes the spans and the name
	 * table, which grew by doubling. Reading the header twice, to check
	 * its spelling and then add, was a third of the prefetch of a
	 * 400-layer checkpoint (81 600 tensors). */
	size_t most = plain_count(hdr, (size_t)hl);
	h.sp = malloc((most + 1) * sizeof *h.sp);
	if (!h.sp)
		return errf(e, "out of memory indexing the header");
	wsrc_restart(w, most);
	int bad = 0;
	long nt = plain_header(w, hdr, (size_t)hl, h.data, h.dlen, h.sp, most, &bad, e);
	if (nt >= 0 && bad) {
		free(h.sp);
		return -1;
	}
	if (nt >= 0) {
		h.ns = (size_t)nt;
	} else {
		wsrc_restart(w, 64);
		free(h.sp);
		h.sp = NULL;
		if (json_members(hdr, (size_t)hl, 16 * (size_t)hl + ((size_t)1 << 20), ta, member, &h, e)) {
			/* Member by member: the tree of a whole header of small
			 * tensors is some ten times its text, all of it fresh pages
			 * to fault in. */
			free(h.sp);
			return h.ours ? -1 : errwrap(e, "header");
		}
	}
	Span *sp = h.sp;
	size_t ns = h.ns;
	/* safetensors' writer lists the tensors in the order of their data:
	 * sorting spans already in order took 41 M instructions of the
	 * prefetch of 81 600 tensors. */
	size_t in_order = 1;
	while (in_order < ns && cmpspan(&sp[in_order - 1], &sp[in_order]) <= 0)
		in_order++;
	if (in_order < ns)
		qsort(sp, ns, sizeof *sp, cmpspan);
	/* Zero-length tensors own no bytes and cannot overlap anything. */
	int64_t end = 0;
	const char *last = NULL;
	int rc = 0;
	for (size_t i = 0; i < ns && !rc; i++) {
		if (sp[i].begin == sp[i].end)
			continue;
		if (sp[i].begin < end)
			rc = errf(e, "header: tensors '%s' and '%s' overlap in the data area", last, sp[i].name);
		end = sp[i].end;
		last = sp[i].name;
	}
	free(sp);
	return rc;
}
