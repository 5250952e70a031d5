#include "pickle.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
	const unsigned char *base, *p, *end;
	const char *where;
	size_t op;     /* offset of the opcode being run */
	const char *opname;
	Arena *a;
	Err *e;
	PkResolve resolve;
	void *ctx;
	PkVal **stk;
	size_t nstk, capstk;
	size_t *mark;
	size_t nmark, capmark;
	PkVal **memo;
	size_t nmemo, capmemo;
	size_t used0, allow; /* arena bytes at the start, and how many more the run may take */
} Pk;

static const char *opname(int c)
{
	switch (c) {
	case '(': return "MARK";
	case '.': return "STOP";
	case '0': return "POP";
	case '1': return "POP_MARK";
	case '2': return "DUP";
	case 'F': return "FLOAT";
	case 'I': return "INT";
	case 'J': return "BININT";
	case 'K': return "BININT1";
	case 'L': return "LONG";
	case 'M': return "BININT2";
	case 'N': return "NONE";
	case 'P': return "PERSID";
	case 'Q': return "BINPERSID";
	case 'R': return "REDUCE";
	case 'S': return "STRING";
	case 'T': return "BINSTRING";
	case 'U': return "SHORT_BINSTRING";
	case 'V': return "UNICODE";
	case 'X': return "BINUNICODE";
	case 'a': return "APPEND";
	case 'b': return "BUILD";
	case 'c': return "GLOBAL";
	case 'd': return "DICT";
	case '}': return "EMPTY_DICT";
	case 'e': return "APPENDS";
	case 'g': return "GET";
	case 'h': return "BINGET";
	case 'i': return "INST";
	case 'j': return "LONG_BINGET";
	case 'l': return "LIST";
	case ']': return "EMPTY_LIST";
	case 'o': return "OBJ";
	case 'p': return "PUT";
	case 'q': return "BINPUT";
	case 'r': return "LONG_BINPUT";
	case 's': return "SETITEM";
	case 't': return "TUPLE";
	case ')': return "EMPTY_TUPLE";
	case 'u': return "SETITEMS";
	case 'G': return "BINFLOAT";
	case 'B': return "BINBYTES";
	case 'C': return "SHORT_BINBYTES";
	case 0x80: return "PROTO";
	case 0x81: return "NEWOBJ";
	case 0x82: return "EXT1";
	case 0x83: return "EXT2";
	case 0x84: return "EXT4";
	case 0x85: return "TUPLE1";
	case 0x86: return "TUPLE2";
	case 0x87: return "TUPLE3";
	case 0x88: return "NEWTRUE";
	case 0x89: return "NEWFALSE";
	case 0x8a: return "LONG1";
	case 0x8b: return "LONG4";
	case 0x8c: return "SHORT_BINUNICODE";
	case 0x8d: return "BINUNICODE8";
	case 0x8e: return "BINBYTES8";
	case 0x8f: return "EMPTY_SET";
	case 0x90: return "ADDITEMS";
	case 0x91: return "FROZENSET";
	case 0x92: return "NEWOBJ_EX";
	case 0x93: return "STACK_GLOBAL";
	case 0x94: return "MEMOIZE";
	case 0x95: return "FRAME";
	case 0x96: return "BYTEARRAY8";
	case 0x97: return "NEXT_BUFFER";
	case 0x98: return "READONLY_BUFFER";
	}
	return NULL;
}

const char *pk_kind_name(PkKind k)
{
	static const char *const n[] = {
		"None", "bool", "int", "big int", "float", "str", "bytes",
		"tuple", "list", "set", "dict", "global", "object",
		"storage", "tensor",
	};
	return (unsigned)k < sizeof n / sizeof *n ? n[k] : "?";
}

__attribute__((format(printf, 2, 3)))
static int fail(Pk *k, const char *fmt, ...)
{
	char msg[768];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	return errf(k->e, "%s: offset %zu (%s): %s", k->where, k->op, k->opname, msg);
}

static PkVal *mk(Pk *k, PkKind kind)
{
	PkVal *v = arena_alloc(k->a, sizeof *v);
	v->kind = kind;
	if (kind == PK_DICT)
		v->u.dict.idx.a = k->a;
	if (kind == PK_OBJ)
		v->u.obj.dict.idx.a = k->a;
	return v;
}

/* Containers record how deep they nest so a stream of a few KB cannot build
 * a structure whose walk would exhaust the C stack. */
static int nest(Pk *k, PkVal *parent, const PkVal *child)
{
	if (child->depth + 1 > parent->depth)
		parent->depth = child->depth + 1;
	if (parent->depth > PK_MAXDEPTH)
		return fail(k, "values nest deeper than %d levels; the pickle is hostile or damaged", PK_MAXDEPTH);
	return 0;
}

static void grow(Pk *k, void **p, size_t *cap, size_t need, size_t elsize)
{
	if (need <= *cap)
		return;
	size_t n = *cap ? *cap * 2 : 8;
	while (n < need)
		n *= 2;
	*p = arena_grow(k->a, *p, *cap * elsize, n * elsize);
	*cap = n;
}

static int seq_add(Pk *k, PkVal *parent, PkSeq *s, PkVal *v)
{
	grow(k, (void **)&s->v, &s->cap, s->n + 1, sizeof *s->v);
	s->v[s->n++] = v;
	return nest(k, parent, v);
}

static int dict_set(Pk *k, PkVal *parent, PkDict *d, PkVal *key, PkVal *v)
{
	if (key->kind == PK_STR && strlen(key->u.str.s) == key->u.str.len) {
		size_t at = (size_t)(uintptr_t)map_get(&d->idx, key->u.str.s);
		if (at) {
			d->v[at - 1] = v;
			return nest(k, parent, v);
		}
		map_put(&d->idx, key->u.str.s, (void *)(uintptr_t)(d->n + 1));
	}
	if (d->n == d->cap) {
		size_t cap = d->cap;
		grow(k, (void **)&d->k, &cap, d->n + 1, sizeof *d->k);
		d->v = arena_grow(k->a, d->v, d->cap * sizeof *d->v, cap * sizeof *d->v);
		d->cap = cap;
	}
	d->k[d->n] = key;
	d->v[d->n++] = v;
	if (nest(k, parent, key))
		return -1;
	return nest(k, parent, v);
}

PkVal *pk_dict_get(const PkVal *d, const char *key)
{
	if (!d || d->kind != PK_DICT)
		return NULL;
	size_t at = (size_t)(uintptr_t)map_get(&d->u.dict.idx, key);
	return at ? d->u.dict.v[at - 1] : NULL;
}

const PkVal *pk_state(const PkVal *obj)
{
	const PkVal *s = obj && obj->kind == PK_OBJ ? obj->u.obj.state : NULL;
	if (s && s->kind == PK_TUPLE && s->u.seq.n == 2)
		s = s->u.seq.v[0];
	return s && s->kind == PK_DICT ? s : NULL;
}

PkVal *pk_attr(const PkVal *obj, const char *name)
{
	if (!obj || obj->kind != PK_OBJ || !obj->u.obj.state)
		return NULL;
	const PkVal *s = obj->u.obj.state;
	if (s->kind == PK_DICT)
		return pk_dict_get(s, name);
	if (s->kind == PK_TUPLE && s->u.seq.n == 2) {
		PkVal *v = pk_dict_get(s->u.seq.v[0], name);
		return v ? v : pk_dict_get(s->u.seq.v[1], name);
	}
	return NULL;
}

/* Stream reading. */

static int need(Pk *k, size_t n)
{
	if ((size_t)(k->end - k->p) < n)
		return fail(k, "stream truncated: %zu bytes needed, %zu left; the file is incomplete",
			n, (size_t)(k->end - k->p));
	return 0;
}

static uint64_t le(const unsigned char *p, int n)
{
	uint64_t v = 0;
	for (int i = n - 1; i >= 0; i--)
		v = v << 8 | p[i];
	return v;
}

static int rd(Pk *k, int n, uint64_t *v)
{
	if (need(k, (size_t)n))
		return -1;
	*v = le(k->p, n);
	k->p += n;
	return 0;
}

/* A declared length is checked against what is left before anything is
 * allocated, so "4 GB string" in a 100-byte file fails at once. */
static int rdbytes(Pk *k, uint64_t n, const unsigned char **out)
{
	if (n > (uint64_t)(k->end - k->p))
		return fail(k, "declared length %llu exceeds the %zu bytes left; the file is truncated or hostile",
			(unsigned long long)n, (size_t)(k->end - k->p));
	*out = k->p;
	k->p += n;
	return 0;
}

static int rdline(Pk *k, const char **s)
{
	const unsigned char *nl = memchr(k->p, '\n', (size_t)(k->end - k->p));
	if (!nl)
		return fail(k, "stream truncated inside a text argument; the file is incomplete");
	*s = arena_dup(k->a, k->p, (size_t)(nl - k->p) + 1);
	((char *)*s)[nl - k->p] = 0;
	k->p = nl + 1;
	return 0;
}

static PkVal *mkstr(Pk *k, PkKind kind, const unsigned char *p, size_t n)
{
	PkVal *v = mk(k, kind);
	char *s = arena_alloc_raw(k->a, n + 1);
	memcpy(s, p, n);
	s[n] = 0;
	v->u.str.s = s;
	v->u.str.len = n;
	return v;
}

/* The stack. */

static int push(Pk *k, PkVal *v)
{
	grow(k, (void **)&k->stk, &k->capstk, k->nstk + 1, sizeof *k->stk);
	k->stk[k->nstk++] = v;
	return 0;
}

static size_t floor_(const Pk *k)
{
	return k->nmark ? k->mark[k->nmark - 1] : 0;
}

static PkVal *pop(Pk *k)
{
	if (k->nstk <= floor_(k)) {
		fail(k, "stack underflow; the pickle is damaged");
		return NULL;
	}
	return k->stk[--k->nstk];
}

static PkVal *top(Pk *k)
{
	if (k->nstk <= floor_(k)) {
		fail(k, "stack underflow; the pickle is damaged");
		return NULL;
	}
	return k->stk[k->nstk - 1];
}

/* Pops back to the last MARK; items are stk[*from .. nstk). */
static int popmark(Pk *k, size_t *from)
{
	if (!k->nmark)
		return fail(k, "no MARK on the stack; the pickle is damaged");
	*from = k->mark[--k->nmark];
	return 0;
}

static PkVal *mkseq(Pk *k, PkKind kind, PkVal **items, size_t n)
{
	PkVal *v = mk(k, kind);
	for (size_t i = 0; i < n; i++)
		if (seq_add(k, v, &v->u.seq, items[i]))
			return NULL;
	return v;
}

/* Memo. Indices come from the stream; a pickler numbers them from 0, so an
 * index beyond the stream's length cannot be honest. */
static int memo_put(Pk *k, uint64_t i)
{
	PkVal *v = top(k);
	if (!v)
		return -1;
	if (i > (uint64_t)(k->end - k->base))
		return fail(k, "memo index %llu out of range; the pickle is damaged", (unsigned long long)i);
	if (i >= k->capmemo) {
		size_t old = k->capmemo;
		grow(k, (void **)&k->memo, &k->capmemo, (size_t)i + 1, sizeof *k->memo);
		memset(k->memo + old, 0, (k->capmemo - old) * sizeof *k->memo);
	}
	k->memo[i] = v;
	if (i >= k->nmemo)
		k->nmemo = (size_t)i + 1;
	return 0;
}

static int memo_get(Pk *k, uint64_t i)
{
	if (i >= k->nmemo)
		return fail(k, "memo index %llu out of range (%zu set); the pickle is damaged",
			(unsigned long long)i, k->nmemo);
	if (!k->memo[i])
		return fail(k, "memo index %llu was never set; the pickle is damaged", (unsigned long long)i);
	return push(k, k->memo[i]);
}

/* Known names. */

typedef struct {
	const char *name;
	int dtype, elsize;
} DType;

static const DType storages[] = {
	{ "FloatStorage", 1, 4 },        { "DoubleStorage", 11, 8 },
	{ "HalfStorage", 10, 2 },        { "BFloat16Storage", 16, 2 },
	{ "LongStorage", 7, 8 },         { "IntStorage", 6, 4 },
	{ "ShortStorage", 5, 2 },        { "CharStorage", 3, 1 },
	{ "ByteStorage", 2, 1 },         { "BoolStorage", 9, 1 },
	{ "ComplexFloatStorage", 14, 8 }, { "ComplexDoubleStorage", 15, 16 },
	{ "UntypedStorage", 2, 1 },
	{ NULL, 0, 0 },
};

static const DType dtypes[] = {
	{ "float32", 1, 4 },  { "float", 1, 4 },    { "float64", 11, 8 }, { "double", 11, 8 },
	{ "float16", 10, 2 }, { "half", 10, 2 },    { "bfloat16", 16, 2 },
	{ "int64", 7, 8 },    { "long", 7, 8 },     { "int32", 6, 4 },    { "int", 6, 4 },
	{ "int16", 5, 2 },    { "short", 5, 2 },    { "int8", 3, 1 },     { "uint8", 2, 1 },
	{ "bool", 9, 1 },     { "complex64", 14, 8 }, { "cfloat", 14, 8 },
	{ "complex128", 15, 16 }, { "cdouble", 15, 16 },
	{ NULL, 0, 0 },
};

static const DType *lookup(const DType *t, const char *name)
{
	for (; t->name; t++)
		if (strcmp(t->name, name) == 0)
			return t;
	return NULL;
}

static int isglobal(const PkVal *v, const char *module, const char *name)
{
	return v && v->kind == PK_GLOBAL && strcmp(v->u.glob.module, module) == 0 &&
		strcmp(v->u.glob.name, name) == 0;
}

static const DType *storage_type(const PkVal *v)
{
	if (!v || v->kind != PK_GLOBAL)
		return NULL;
	if (strcmp(v->u.glob.module, "torch") && strcmp(v->u.glob.module, "torch.storage"))
		return NULL;
	return lookup(storages, v->u.glob.name);
}

static int getint(const PkVal *v, int64_t *out)
{
	if (!v || (v->kind != PK_INT && v->kind != PK_BOOL))
		return -1;
	*out = v->u.i;
	return 0;
}

/* A value standing for a tensor or storage this reader does not take; it
 * stays harmless unless the weights asked for include it. */
static PkVal *declined(Pk *k, PkVal *args, const char *why)
{
	PkVal *v = mk(k, PK_OBJ);
	v->u.obj.args = args;
	v->u.obj.cls = why;
	return nest(k, v, args) ? NULL : v;
}

/* ('storage', storage_type, key, location, numel), as torch.save writes it. */
static PkVal *persid(Pk *k, PkVal *pid)
{
	PkVal **a = pid->u.seq.v;
	if (pid->kind != PK_TUPLE || pid->u.seq.n != 5 || a[0]->kind != PK_STR ||
	    strcmp(a[0]->u.str.s, "storage") != 0) {
		fail(k, "unsupported persistent id (a %s); only torch.save's ('storage', type, key, location, numel) is understood",
			pk_kind_name(pid->kind));
		return NULL;
	}
	const DType *dt = storage_type(a[1]);
	if (!dt && a[1]->kind == PK_GLOBAL) /* quantized and the like: fail only if asked for */
		return declined(k, pid, arena_printf(k->a, "%s.%s (unsupported storage type)",
			a[1]->u.glob.module, a[1]->u.glob.name));
	if (!dt) {
		fail(k, "storage type is a %s, not a class name; the pickle is damaged", pk_kind_name(a[1]->kind));
		return NULL;
	}
	int64_t numel;
	if (a[2]->kind != PK_STR || a[3]->kind != PK_STR || getint(a[4], &numel) || numel < 0) {
		fail(k, "malformed storage persistent id: expected (str key, str location, int numel >= 0)");
		return NULL;
	}
	if (numel > INT64_MAX / dt->elsize || (uint64_t)numel * (uint64_t)dt->elsize > SIZE_MAX) {
		fail(k, "storage '%s' declares %lld elements, more bytes than can be addressed; the file is hostile or damaged",
			a[2]->u.str.s, (long long)numel);
		return NULL;
	}
	PkVal *v = mk(k, PK_STORAGE);
	v->u.st.key = a[2]->u.str.s;
	v->u.st.location = a[3]->u.str.s;
	v->u.st.dtype = dt->dtype;
	v->u.st.elsize = dt->elsize;
	v->u.st.numel = numel;
	if (!k->resolve) {
		fail(k, "persistent id for storage '%s' but no storage resolver", v->u.st.key);
		return NULL;
	}
	if (k->resolve(k->ctx, &v->u.st, k->e)) {
		errwrap(k->e, "%s: offset %zu (%s)", k->where, k->op, k->opname);
		return NULL;
	}
	if (v->u.st.nbytes < (size_t)numel * (size_t)dt->elsize) {
		fail(k, "storage '%s' holds %zu bytes, %lld elements of %d bytes declared; the file is truncated",
			v->u.st.key, v->u.st.nbytes, (long long)numel, dt->elsize);
		return NULL;
	}
	return v;
}

int64_t pk_tensor_nbytes(const PkTensor *t)
{
	int64_t n = t->elsize;
	for (int i = 0; i < t->ndim; i++) {
		if (t->size[i] && n > INT64_MAX / t->size[i])
			return -1;
		n *= t->size[i];
	}
	return n;
}

/* (storage, offset, size, stride, ...) with the dtype of the storage or an
 * explicit one (v3). Bounds are checked here, where the opcode offset is
 * known, so no reader later trusts size or stride. */
static PkVal *rebuild_tensor(Pk *k, const char *fn, PkVal *args, const DType *dt)
{
	PkVal **a = args->u.seq.v;
	int64_t off;
	if (args->u.seq.n >= 1 && a[0]->kind == PK_OBJ && !a[0]->u.obj.fn)
		return declined(k, args, arena_printf(k->a, "torch._utils.%s of %s", fn, a[0]->u.obj.cls));
	if (args->u.seq.n < 4 || a[0]->kind != PK_STORAGE || getint(a[1], &off) ||
	    (a[2]->kind != PK_TUPLE && a[2]->kind != PK_LIST) ||
	    (a[3]->kind != PK_TUPLE && a[3]->kind != PK_LIST) || off < 0) {
		fail(k, "%s expects (storage, offset >= 0, size, stride, ...); the pickle is damaged", fn);
		return NULL;
	}
	const PkStorage *st = &a[0]->u.st;
	PkVal *v = mk(k, PK_TENSOR);
	PkTensor *t = &v->u.t;
	t->st = st;
	t->dtype = dt ? dt->dtype : st->dtype;
	t->elsize = dt ? dt->elsize : st->elsize;
	t->offset = off;
	size_t nd = a[2]->u.seq.n;
	if (nd != a[3]->u.seq.n) {
		fail(k, "%s: size has %zu dims, stride %zu", fn, nd, a[3]->u.seq.n);
		return NULL;
	}
	if (nd > PK_MAXDIM) /* an optimizer's odd tensor must not make the file unreadable */
		return declined(k, args, arena_printf(k->a, "torch._utils.%s with %zu dims, at most %d supported",
			fn, nd, PK_MAXDIM));
	t->ndim = (int)nd;
	int64_t numel = 1, last = off, want = 1;
	t->contiguous = 1;
	for (int i = t->ndim - 1; i >= 0; i--) {
		if (getint(a[2]->u.seq.v[i], &t->size[i]) || getint(a[3]->u.seq.v[i], &t->stride[i]) ||
		    t->size[i] < 0 || t->stride[i] < 0) {
			fail(k, "%s: size and stride must be non-negative ints", fn);
			return NULL;
		}
		int64_t s = t->size[i];
		if (s && numel > INT64_MAX / s) {
			fail(k, "%s: element count overflows; the pickle is hostile or damaged", fn);
			return NULL;
		}
		numel *= s;
		if (s > 1 && t->stride[i] != want)
			t->contiguous = 0;
		if (s && want <= INT64_MAX / s)
			want *= s;
		if (s > 1) {
			if (t->stride[i] > (INT64_MAX - last) / (s - 1)) {
				fail(k, "%s: stride overflows; the pickle is hostile or damaged", fn);
				return NULL;
			}
			last += (s - 1) * t->stride[i];
		}
	}
	if (pk_tensor_nbytes(t) < 0) {
		fail(k, "%s: byte size overflows; the pickle is hostile or damaged", fn);
		return NULL;
	}
	/* The last element read must lie inside the storage. */
	if (numel > 0) {
		uint64_t endb = ((uint64_t)last + 1) * (uint64_t)t->elsize;
		if ((uint64_t)last + 1 > UINT64_MAX / (uint64_t)t->elsize ||
		    endb > (uint64_t)st->numel * (uint64_t)st->elsize) {
			fail(k, "tensor reaches element %lld of storage '%s', which holds %lld bytes; the file is damaged",
				(long long)last, st->key, (long long)st->numel * st->elsize);
			return NULL;
		}
		/* A view lies inside its storage. One that repeats elements
		 * (a zero stride: expand) holds more bytes than its storage
		 * once copied out dense; a small broadcast is taken, but a
		 * stride-0 view of a few bytes must not ask for terabytes. */
		if ((uint64_t)pk_tensor_nbytes(t) > (uint64_t)st->numel * (uint64_t)st->elsize &&
		    pk_tensor_nbytes(t) > PK_MAXREPEAT) {
			fail(k, "%s: a view of %lld elements over storage '%s' of %lld bytes repeats elements (a zero or overlapping stride); save the tensor with .contiguous(), or the file is hostile",
				fn, (long long)numel, st->key, (long long)st->numel * st->elsize);
			return NULL;
		}
	}
	return v;
}

static PkVal *call(Pk *k, PkVal *fn, PkVal *args, int depth);

static PkVal *opaque(Pk *k, PkVal *fn, PkVal *args)
{
	PkVal *v = mk(k, PK_OBJ);
	v->u.obj.fn = fn;
	v->u.obj.args = args;
	/* copyreg's helpers construct their first argument: name that class */
	PkVal *cls = fn;
	if (fn->kind == PK_GLOBAL && strcmp(fn->u.glob.module, "copyreg") == 0 &&
	    args->kind == PK_TUPLE && args->u.seq.n > 0 && args->u.seq.v[0]->kind == PK_GLOBAL &&
	    (strcmp(fn->u.glob.name, "_reconstructor") == 0 || strcmp(fn->u.glob.name, "__newobj__") == 0 ||
	     strcmp(fn->u.glob.name, "__newobj_ex__") == 0))
		cls = args->u.seq.v[0];
	v->u.obj.cls = cls->kind == PK_GLOBAL ?
		arena_printf(k->a, "%s.%s", cls->u.glob.module, cls->u.glob.name) : "?";
	if (nest(k, v, args))
		return NULL;
	return v;
}

static PkVal *call(Pk *k, PkVal *fn, PkVal *args, int depth)
{
	if (args->kind != PK_TUPLE) {
		fail(k, "arguments are a %s, not a tuple; the pickle is damaged", pk_kind_name(args->kind));
		return NULL;
	}
	PkVal **a = args->u.seq.v;
	size_t n = args->u.seq.n;
	if (fn->kind != PK_GLOBAL)
		return opaque(k, fn, args);
	const char *m = fn->u.glob.module, *f = fn->u.glob.name;
	if (strcmp(m, "torch._utils") == 0) {
		if (strcmp(f, "_rebuild_tensor_v2") == 0 || strcmp(f, "_rebuild_tensor") == 0)
			return rebuild_tensor(k, f, args, NULL);
		if (strcmp(f, "_rebuild_tensor_v3") == 0) {
			const DType *dt = n >= 7 && a[6]->kind == PK_GLOBAL &&
				strcmp(a[6]->u.glob.module, "torch") == 0 ?
				lookup(dtypes, a[6]->u.glob.name) : NULL;
			if (!dt) {
				fail(k, "_rebuild_tensor_v3: unsupported or missing dtype argument");
				return NULL;
			}
			return rebuild_tensor(k, f, args, dt);
		}
		if (strcmp(f, "_rebuild_parameter") == 0 ||
		    strcmp(f, "_rebuild_parameter_with_state") == 0) {
			if (n >= 1 && a[0]->kind == PK_OBJ && !a[0]->u.obj.fn)
				return a[0]; /* declined data stays declined */
			if (n < 1 || a[0]->kind != PK_TENSOR) {
				fail(k, "%s expects a tensor first; the pickle is damaged", f);
				return NULL;
			}
			return a[0];
		}
	}
	if (strcmp(m, "torch._tensor") == 0 &&
	    (strcmp(f, "_rebuild_from_type_v2") == 0 || strcmp(f, "_rebuild_from_type") == 0)) {
		/* (func, type, args, state): a tensor subclass; the data is func(*args). */
		if (n < 3 || depth > 0) {
			fail(k, "%s expects (func, type, args, state); the pickle is damaged", f);
			return NULL;
		}
		return call(k, a[0], a[2], depth + 1);
	}
	if (strcmp(m, "collections") == 0 && strcmp(f, "OrderedDict") == 0) {
		PkVal *d = mk(k, PK_DICT);
		if (n == 0)
			return d;
		if (n == 1 && (a[0]->kind == PK_LIST || a[0]->kind == PK_TUPLE)) {
			for (size_t i = 0; i < a[0]->u.seq.n; i++) {
				PkVal *p = a[0]->u.seq.v[i];
				if (p->kind != PK_TUPLE || p->u.seq.n != 2) {
					fail(k, "OrderedDict expects (key, value) pairs");
					return NULL;
				}
				if (dict_set(k, d, &d->u.dict, p->u.seq.v[0], p->u.seq.v[1]))
					return NULL;
			}
			return d;
		}
		return opaque(k, fn, args);
	}
	if (strcmp(m, "torch") == 0 && strcmp(f, "Size") == 0 && n == 1 &&
	    a[0]->kind == PK_TUPLE)
		return a[0];
	if ((strcmp(m, "builtins") == 0 || strcmp(m, "__builtin__") == 0) &&
	    (strcmp(f, "set") == 0 || strcmp(f, "frozenset") == 0)) {
		if (n == 0)
			return mk(k, PK_SET);
		if (n == 1 && (a[0]->kind == PK_LIST || a[0]->kind == PK_TUPLE))
			return mkseq(k, PK_SET, a[0]->u.seq.v, a[0]->u.seq.n);
	}
	return opaque(k, fn, args);
}

/* cls.__new__(cls, *args): an OrderedDict, or an opaque instance. */
static PkVal *newobj(Pk *k, PkVal *cls, PkVal *args)
{
	if (isglobal(cls, "collections", "OrderedDict"))
		return mk(k, PK_DICT);
	if (args->kind != PK_TUPLE) {
		fail(k, "arguments are a %s, not a tuple; the pickle is damaged", pk_kind_name(args->kind));
		return NULL;
	}
	return opaque(k, cls, args);
}

static int build(Pk *k)
{
	PkVal *state = pop(k), *o = state ? top(k) : NULL;
	if (!o)
		return -1;
	switch (o->kind) {
	case PK_OBJ:
		o->u.obj.state = state;
		return nest(k, o, state);
	case PK_DICT:
		o->u.dict.state = state;
		return nest(k, o, state);
	case PK_TENSOR: /* a Parameter's or subclass's Python attributes */
		return 0;
	default:
		return fail(k, "BUILD on a %s; the pickle is damaged", pk_kind_name(o->kind));
	}
}

static int setitems(Pk *k, size_t from)
{
	if (from == 0 || (k->nstk - from) % 2)
		return fail(k, "SETITEMS needs a dict and key/value pairs; the pickle is damaged");
	PkVal *d = k->stk[from - 1];
	PkDict *dd = d->kind == PK_DICT ? &d->u.dict : d->kind == PK_OBJ ? &d->u.obj.dict : NULL;
	if (!dd)
		return fail(k, "SETITEM on a %s; the pickle is damaged", pk_kind_name(d->kind));
	for (size_t i = from; i < k->nstk; i += 2)
		if (dict_set(k, d, dd, k->stk[i], k->stk[i + 1]))
			return -1;
	k->nstk = from;
	return 0;
}

static int appends(Pk *k, size_t from, int set)
{
	if (from == 0)
		return fail(k, "nothing to append to; the pickle is damaged");
	PkVal *l = k->stk[from - 1];
	PkSeq *s = NULL;
	if (set ? l->kind == PK_SET : l->kind == PK_LIST)
		s = &l->u.seq;
	else if (!set && l->kind == PK_OBJ)
		s = &l->u.obj.items;
	if (!s)
		return fail(k, "cannot add items to a %s; the pickle is damaged", pk_kind_name(l->kind));
	for (size_t i = from; i < k->nstk; i++)
		if (seq_add(k, l, s, k->stk[i]))
			return -1;
	k->nstk = from;
	return 0;
}

/* The floor is the current mark, so opcodes that need N items and pop them
 * use this. */
static int have(Pk *k, size_t n)
{
	if (k->nstk - floor_(k) < n)
		return fail(k, "stack underflow; the pickle is damaged");
	return 0;
}

static int run(Pk *k, PkVal **out)
{
	for (;;) {
		/* Memory grows with the stream, but a few opcodes copy what they
		 * are given (a list into an OrderedDict or a set, two strings
		 * into a class name), and a stream can hand them the same large
		 * value again and again: the run's allocations are held to a
		 * multiple of its length, and to the memory budget. */
		if (arena_used(k->a) - k->used0 > k->allow)
			return fail(k, "the pickle builds more than %zu bytes of objects from %zu bytes; it is hostile or damaged",
				k->allow, (size_t)(k->end - k->base));
		if (arena_check(k->a, k->e))
			return errwrap(k->e, "%s: offset %zu (%s)", k->where, k->op, k->opname);
		k->op = (size_t)(k->p - k->base);
		k->opname = "end of stream";
		if (k->p >= k->end)
			return fail(k, "stream truncated before STOP; the file is incomplete");
		int c = *k->p++;
		k->opname = opname(c);
		if (!k->opname) {
			static const char hex[] = "0123456789abcdef";
			char *nm = arena_alloc(k->a, 8);
			memcpy(nm, "0x", 2);
			nm[2] = hex[c >> 4];
			nm[3] = hex[c & 15];
			k->opname = nm;
			return fail(k, "unknown opcode; the file is not a pickle or is damaged");
		}
		uint64_t u;
		const unsigned char *b = NULL;
		PkVal *v, *x, *y;
		size_t from = 0;
		switch (c) {
		case 0x80: /* PROTO */
			if (rd(k, 1, &u))
				return -1;
			if (u < 2 || u > 5)
				return fail(k, "pickle protocol %llu unsupported; expected 2 to 5", (unsigned long long)u);
			break;
		case 0x95: /* FRAME: a hint for buffered readers */
			if (rd(k, 8, &u))
				return -1;
			if (u > (uint64_t)(k->end - k->p))
				return fail(k, "frame of %llu bytes exceeds the %zu left; the file is truncated",
					(unsigned long long)u, (size_t)(k->end - k->p));
			break;
		case '.':
			v = pop(k);
			if (!v)
				return -1;
			*out = v;
			return 0;
		case '(':
			if (k->nmark >= PK_MAXDEPTH)
				return fail(k, "more than %d open MARKs; the pickle is hostile or damaged", PK_MAXDEPTH);
			grow(k, (void **)&k->mark, &k->capmark, k->nmark + 1, sizeof *k->mark);
			k->mark[k->nmark++] = k->nstk;
			break;
		case '0': /* POP: an item, or the mark when none is above it */
			if (k->nstk > floor_(k))
				k->nstk--;
			else if (k->nmark)
				k->nmark--;
			else
				return fail(k, "stack underflow; the pickle is damaged");
			break;
		case '1':
			if (popmark(k, &from))
				return -1;
			k->nstk = from;
			break;
		case '2':
			if (!(v = top(k)) || push(k, v))
				return -1;
			break;
		case 'N':
			push(k, mk(k, PK_NONE));
			break;
		case 0x88:
		case 0x89:
			v = mk(k, PK_BOOL);
			v->u.i = c == 0x88;
			push(k, v);
			break;
		case 'J':
			if (rd(k, 4, &u))
				return -1;
			v = mk(k, PK_INT);
			v->u.i = (int32_t)(uint32_t)u;
			push(k, v);
			break;
		case 'K':
		case 'M':
			if (rd(k, c == 'K' ? 1 : 2, &u))
				return -1;
			v = mk(k, PK_INT);
			v->u.i = (int64_t)u;
			push(k, v);
			break;
		case 0x8a:
		case 0x8b:
			if (rd(k, c == 0x8a ? 1 : 4, &u) || rdbytes(k, u, &b))
				return -1;
			if (u <= 8) {
				v = mk(k, PK_INT);
				uint64_t raw = u ? le(b, (int)u) : 0;
				if (u && u < 8 && (b[u - 1] & 0x80))
					raw |= ~(uint64_t)0 << (8 * u); /* sign-extend */
				v->u.i = (int64_t)raw;
			} else {
				v = mkstr(k, PK_BIGINT, b, (size_t)u);
			}
			push(k, v);
			break;
		case 'I': { /* text int; protocol 0 writes bools as I00/I01 */
			const char *s;
			if (rdline(k, &s))
				return -1;
			char *e;
			long long i = strtoll(s, &e, 10);
			if (e == s || *e)
				return fail(k, "malformed INT argument");
			v = mk(k, strcmp(s, "00") == 0 || strcmp(s, "01") == 0 ? PK_BOOL : PK_INT);
			v->u.i = i;
			push(k, v);
			break;
		}
		case 'G': {
			if (rd(k, 8, &u))
				return -1;
			uint64_t be = 0;
			for (int i = 0; i < 8; i++)
				be = be << 8 | ((u >> (8 * i)) & 0xff);
			v = mk(k, PK_FLOAT);
			memcpy(&v->u.f, &be, sizeof be);
			push(k, v);
			break;
		}
		case 'X':
		case 0x8c:
		case 0x8d:
		case 'T':
		case 'U':
			if (rd(k, c == 0x8c || c == 'U' ? 1 : c == 0x8d ? 8 : 4, &u) || rdbytes(k, u, &b))
				return -1;
			push(k, mkstr(k, PK_STR, b, (size_t)u));
			break;
		case 'B':
		case 'C':
		case 0x8e:
		case 0x96:
			if (rd(k, c == 'C' ? 1 : c == 'B' ? 4 : 8, &u) || rdbytes(k, u, &b))
				return -1;
			push(k, mkstr(k, PK_BYTES, b, (size_t)u));
			break;
		case ')':
			push(k, mk(k, PK_TUPLE));
			break;
		case ']':
			push(k, mk(k, PK_LIST));
			break;
		case '}':
			push(k, mk(k, PK_DICT));
			break;
		case 0x8f:
			push(k, mk(k, PK_SET));
			break;
		case 0x85:
		case 0x86:
		case 0x87: {
			size_t n = (size_t)(c - 0x84);
			if (have(k, n) || !(v = mkseq(k, PK_TUPLE, k->stk + k->nstk - n, n)))
				return -1;
			k->nstk -= n;
			push(k, v);
			break;
		}
		case 't':
		case 'l':
		case 0x91:
			if (popmark(k, &from) ||
			    !(v = mkseq(k, c == 't' ? PK_TUPLE : c == 'l' ? PK_LIST : PK_SET,
					k->stk + from, k->nstk - from)))
				return -1;
			k->nstk = from;
			push(k, v);
			break;
		case 'd':
			if (popmark(k, &from))
				return -1;
			if ((k->nstk - from) % 2)
				return fail(k, "DICT needs key/value pairs; the pickle is damaged");
			v = mk(k, PK_DICT);
			for (size_t i = from; i < k->nstk; i += 2)
				if (dict_set(k, v, &v->u.dict, k->stk[i], k->stk[i + 1]))
					return -1;
			k->nstk = from;
			push(k, v);
			break;
		case 's':
			if (have(k, 3))
				return -1;
			if (setitems(k, k->nstk - 2))
				return -1;
			break;
		case 'u':
			if (popmark(k, &from) || setitems(k, from))
				return -1;
			break;
		case 'a':
			if (have(k, 2) || appends(k, k->nstk - 1, 0))
				return -1;
			break;
		case 'e':
			if (popmark(k, &from) || appends(k, from, 0))
				return -1;
			break;
		case 0x90:
			if (popmark(k, &from) || appends(k, from, 1))
				return -1;
			break;
		case 'q':
		case 'r':
			if (rd(k, c == 'q' ? 1 : 4, &u) || memo_put(k, u))
				return -1;
			break;
		case 0x94:
			if (memo_put(k, k->nmemo))
				return -1;
			break;
		case 'h':
		case 'j':
			if (rd(k, c == 'h' ? 1 : 4, &u) || memo_get(k, u))
				return -1;
			break;
		case 'p':
		case 'g': {
			const char *s;
			char *e;
			if (rdline(k, &s))
				return -1;
			unsigned long long i = strtoull(s, &e, 10);
			if (e == s || *e)
				return fail(k, "malformed memo index");
			if (c == 'p' ? memo_put(k, i) : memo_get(k, i))
				return -1;
			break;
		}
		case 'c': {
			const char *mod, *name;
			if (rdline(k, &mod) || rdline(k, &name))
				return -1;
			v = mk(k, PK_GLOBAL);
			v->u.glob.module = mod;
			v->u.glob.name = name;
			push(k, v);
			break;
		}
		case 0x93:
			if (have(k, 2))
				return -1;
			y = pop(k);
			x = pop(k);
			if (x->kind != PK_STR || y->kind != PK_STR)
				return fail(k, "STACK_GLOBAL needs two strings; the pickle is damaged");
			v = mk(k, PK_GLOBAL);
			v->u.glob.module = x->u.str.s;
			v->u.glob.name = y->u.str.s;
			push(k, v);
			break;
		case 'R':
			if (have(k, 2))
				return -1;
			y = pop(k);
			x = pop(k);
			if (!(v = call(k, x, y, 0)))
				return -1;
			push(k, v);
			break;
		case 0x81:
			if (have(k, 2))
				return -1;
			y = pop(k);
			x = pop(k);
			if (!(v = newobj(k, x, y)))
				return -1;
			push(k, v);
			break;
		case 0x92: /* NEWOBJ_EX: cls, args, kwargs; kwargs are kept nowhere */
			if (have(k, 3))
				return -1;
			k->nstk--;
			y = pop(k);
			x = pop(k);
			if (!(v = newobj(k, x, y)))
				return -1;
			push(k, v);
			break;
		case 'b':
			if (have(k, 2) || build(k))
				return -1;
			break;
		case 'Q':
			if (!(x = pop(k)) || !(v = persid(k, x)))
				return -1;
			push(k, v);
			break;
		default:
			return fail(k, "opcode not supported by this reader (it never imports, calls or reads text-protocol data); re-save the checkpoint with torch.save");
		}
	}
}

PkVal *pk_load(const void *p, size_t n, const char *where, PkResolve resolve,
	void *ctx, Arena *a, Err *e)
{
	Pk k = {
		.base = p, .p = p, .end = (const unsigned char *)p + n,
		.where = where, .opname = "start", .a = a, .e = e,
		.resolve = resolve, .ctx = ctx,
		.used0 = arena_used(a),
		/* A torch.save pickle takes about 30 bytes of objects per byte
		 * (one value of ~150 bytes per opcode of a few bytes). */
		.allow = (n < SIZE_MAX / 256 ? 256 * n : SIZE_MAX / 2) + ((size_t)64 << 20),
	};
	PkVal *v = NULL;
	if (run(&k, &v))
		return NULL;
	return v;
}
