#include "json.h"

#include <stdint.h>
#include <string.h>

typedef struct {
	const char *p, *end, *start;
	Arena *a;
	Err *e;
	size_t used0, maxmem;
} J;

static int fail(J *j, const char *what)
{
	return errf(j->e, "byte %zu: %s", (size_t)(j->p - j->start), what);
}

static void ws(J *j)
{
	while (j->p < j->end && (*j->p == ' ' || *j->p == '\t' || *j->p == '\n' || *j->p == '\r'))
		j->p++;
}

static int hex4(J *j, unsigned *u)
{
	if (j->end - j->p < 4)
		return fail(j, "truncated \\u escape");
	*u = 0;
	for (int i = 0; i < 4; i++) {
		char c = *j->p++;
		*u <<= 4;
		if (c >= '0' && c <= '9')
			*u |= (unsigned)(c - '0');
		else if (c >= 'a' && c <= 'f')
			*u |= (unsigned)(c - 'a' + 10);
		else if (c >= 'A' && c <= 'F')
			*u |= (unsigned)(c - 'A' + 10);
		else
			return fail(j, "bad hex digit in \\u escape");
	}
	return 0;
}

/* Decodes a string; the output is never longer than the input. */
static int str(J *j, const char **out)
{
	j->p++; /* opening quote */
	const char *q = j->p;
	int plain = 1; /* no escape, no control character: a copy decodes it */
	while (q < j->end && *q != '"') {
		plain &= *q != '\\' && (unsigned char)*q >= 0x20;
		q += *q == '\\' ? 2 : 1;
	}
	if (q >= j->end)
		return fail(j, "unterminated string");
	char *o = arena_alloc_raw(j->a, (size_t)(q - j->p) + 1), *w = o;
	if (plain) {
		memcpy(o, j->p, (size_t)(q - j->p));
		o[q - j->p] = 0;
		j->p = q + 1;
		*out = o;
		return 0;
	}
	while (*j->p != '"') {
		unsigned char c = (unsigned char)*j->p++;
		if (c < 0x20)
			return j->p--, fail(j, "control character in string");
		if (c != '\\') {
			*w++ = (char)c;
			continue;
		}
		c = (unsigned char)*j->p++;
		unsigned u;
		switch (c) {
		case '"': case '\\': case '/': *w++ = (char)c; continue;
		case 'b': *w++ = '\b'; continue;
		case 'f': *w++ = '\f'; continue;
		case 'n': *w++ = '\n'; continue;
		case 'r': *w++ = '\r'; continue;
		case 't': *w++ = '\t'; continue;
		case 'u':
			if (hex4(j, &u))
				return -1;
			if (u >= 0xd800 && u < 0xdc00) {
				unsigned lo;
				if (j->end - j->p < 2 || j->p[0] != '\\' || j->p[1] != 'u')
					return fail(j, "unpaired surrogate in \\u escape");
				j->p += 2;
				if (hex4(j, &lo))
					return -1;
				if (lo < 0xdc00 || lo > 0xdfff)
					return fail(j, "unpaired surrogate in \\u escape");
				u = 0x10000 + ((u - 0xd800) << 10) + (lo - 0xdc00);
			} else if (u >= 0xdc00 && u < 0xe000)
				return fail(j, "unpaired surrogate in \\u escape");
			if (u == 0)
				return fail(j, "\\u0000 in string");
			/* 6 escaped bytes (12 for a pair) always exceed the UTF-8 length. */
			if (u < 0x80)
				*w++ = (char)u;
			else if (u < 0x800)
				*w++ = (char)(0xc0 | u >> 6), *w++ = (char)(0x80 | (u & 63));
			else if (u < 0x10000)
				*w++ = (char)(0xe0 | u >> 12), *w++ = (char)(0x80 | (u >> 6 & 63)),
				*w++ = (char)(0x80 | (u & 63));
			else
				*w++ = (char)(0xf0 | u >> 18), *w++ = (char)(0x80 | (u >> 12 & 63)),
				*w++ = (char)(0x80 | (u >> 6 & 63)), *w++ = (char)(0x80 | (u & 63));
			continue;
		default:
			j->p -= 2;
			return fail(j, "bad escape in string");
		}
	}
	j->p++;
	*w = 0;
	*out = o;
	return 0;
}

static int isdig(J *j)
{
	return j->p < j->end && *j->p >= '0' && *j->p <= '9';
}

static int num(J *j, JVal *v)
{
	const char *s = j->p;
	if (*j->p == '-')
		j->p++;
	if (!isdig(j))
		return fail(j, "bad number");
	if (*j->p == '0')
		j->p++;
	else
		while (isdig(j))
			j->p++;
	if (j->p < j->end && *j->p == '.') {
		j->p++;
		if (!isdig(j))
			return fail(j, "bad number: digits expected after '.'");
		while (isdig(j))
			j->p++;
	}
	if (j->p < j->end && (*j->p == 'e' || *j->p == 'E')) {
		j->p++;
		if (j->p < j->end && (*j->p == '+' || *j->p == '-'))
			j->p++;
		if (!isdig(j))
			return fail(j, "bad number: digits expected in exponent");
		while (isdig(j))
			j->p++;
	}
	char *t = arena_alloc(j->a, (size_t)(j->p - s) + 1);
	memcpy(t, s, (size_t)(j->p - s));
	v->type = J_NUM;
	v->s = t;
	return 0;
}

static JVal *value(J *j, int depth);

/* What becomes of each parsed member or element: put's nonzero return
 * stops the parse. */
typedef int (*Put)(J *j, void *ctx, const char *key, JVal *x);

/* The members (obj) or elements of the object or array at j->p. */
static int items_each(J *j, int depth, int obj, Put put, void *ctx)
{
	char close = obj ? '}' : ']';
	j->p++;
	ws(j);
	if (j->p < j->end && *j->p == close) {
		j->p++;
		return 0;
	}
	for (;;) {
		const char *k = NULL;
		ws(j);
		if (obj) {
			if (j->p >= j->end || *j->p != '"')
				return fail(j, "expected a string key");
			if (str(j, &k))
				return -1;
			ws(j);
			if (j->p >= j->end || *j->p != ':')
				return fail(j, "expected ':' after key");
			j->p++;
		}
		JVal *x = value(j, depth + 1);
		if (!x || put(j, ctx, k, x))
			return -1;
		ws(j);
		if (j->p < j->end && *j->p == ',') {
			j->p++;
			continue;
		}
		if (j->p < j->end && *j->p == close) {
			j->p++;
			return 0;
		}
		return fail(j, obj ? "expected ',' or '}'" : "expected ',' or ']'");
	}
}

/* Into the tree: capacity is implicit, 4, then doubled at each power of two. */
static int append(J *j, void *ctx, const char *key, JVal *x)
{
	JVal *v = ctx;
	if (v->n == 0 || (v->n >= 4 && !(v->n & (v->n - 1)))) {
		size_t cap = v->n, nc = cap ? cap * 2 : 4;
		v->v = arena_grow(j->a, v->v, cap * sizeof *v->v, nc * sizeof *v->v);
		if (key)
			v->key = arena_grow(j->a, v->key, cap * sizeof *v->key, nc * sizeof *v->key);
	}
	if (key)
		v->key[v->n] = key;
	v->v[v->n++] = x;
	return 0;
}

static int items(J *j, JVal *v, int depth, int obj)
{
	return items_each(j, depth, obj, append, v);
}

static JVal *value(J *j, int depth)
{
	if (depth > JSON_MAXDEPTH) {
		fail(j, "nesting too deep");
		return NULL;
	}
	if (arena_used(j->a) - j->used0 > j->maxmem) {
		fail(j, "the text needs more memory to parse than its length allows; it is hostile or damaged");
		return NULL;
	}
	if (arena_check(j->a, j->e)) {
		errwrap(j->e, "byte %zu", (size_t)(j->p - j->start));
		return NULL;
	}
	ws(j);
	JVal *v = arena_alloc(j->a, sizeof *v);
	v->off = (size_t)(j->p - j->start);
	if (j->p >= j->end) {
		fail(j, "unexpected end of text");
		return NULL;
	}
	int rc = 0;
	switch (*j->p) {
	case '{': v->type = J_OBJ; rc = items(j, v, depth, 1); break;
	case '[': v->type = J_ARR; rc = items(j, v, depth, 0); break;
	case '"': v->type = J_STR; rc = str(j, &v->s); break;
	case 't': case 'f': case 'n': {
		static const char *lit[] = { "true", "false", "null" };
		static const int typ[] = { J_TRUE, J_FALSE, J_NULL };
		int k = *j->p == 't' ? 0 : *j->p == 'f' ? 1 : 2;
		size_t l = strlen(lit[k]);
		if ((size_t)(j->end - j->p) < l || memcmp(j->p, lit[k], l))
			rc = fail(j, "unexpected character");
		else
			j->p += l, v->type = typ[k];
		break;
	}
	default:
		if (*j->p == '-' || (*j->p >= '0' && *j->p <= '9'))
			rc = num(j, v);
		else
			rc = fail(j, "unexpected character");
	}
	return rc ? NULL : v;
}

JVal *json_parse(const char *text, size_t len, Arena *a, Err *e)
{
	return json_parse_limited(text, len, SIZE_MAX, a, e);
}

JVal *json_parse_limited(const char *text, size_t len, size_t maxmem, Arena *a, Err *e)
{
	J j = { text, text + len, text, a, e, arena_used(a), maxmem };
	JVal *v = value(&j, 0);
	if (!v)
		return NULL;
	ws(&j);
	if (j.p != j.end) {
		fail(&j, "trailing characters after the JSON value");
		return NULL;
	}
	return v;
}

typedef struct {
	int (*fn)(void *ud, const char *key, const JVal *v, Err *e);
	void *ud;
} Each;

/* Hands the member out, then frees it: the next one reuses the memory. */
static int each(J *j, void *ctx, const char *key, JVal *x)
{
	Each *m = ctx;
	if (m->fn(m->ud, key, x, j->e))
		return -1;
	arena_reset(j->a);
	j->used0 = arena_used(j->a);
	return 0;
}

int json_members(const char *text, size_t len, size_t maxmem, Arena *tmp,
	int (*fn)(void *ud, const char *key, const JVal *v, Err *e), void *ud, Err *e)
{
	arena_reset(tmp);
	J j = { text, text + len, text, tmp, e, arena_used(tmp), maxmem };
	Each m = { fn, ud };
	ws(&j);
	if (j.p >= j.end || *j.p != '{')
		return j.p >= j.end ? fail(&j, "unexpected end of text") : fail(&j, "expected an object");
	if (items_each(&j, 0, 1, each, &m))
		return -1;
	ws(&j);
	if (j.p != j.end)
		return fail(&j, "trailing characters after the JSON value");
	return 0;
}

int json_uint(const JVal *v, int64_t *out)
{
	if (v->type != J_NUM || !*v->s)
		return -1;
	int64_t x = 0;
	for (const char *p = v->s; *p; p++) {
		if (*p < '0' || *p > '9')
			return -1;
		if (x > (INT64_MAX - (*p - '0')) / 10)
			return -1;
		x = x * 10 + (*p - '0');
	}
	*out = x;
	return 0;
}

const char *json_type_name(int type)
{
	static const char *n[] = { "null", "false", "true", "a number", "a string", "an array", "an object" };
	return type >= 0 && type <= J_OBJ ? n[type] : "?";
}
