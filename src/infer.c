/* Shape and element-type inference (see infer.h). Each rule reads the
 * results of its node's inputs and writes its outputs' into a scratch S;
 * put() merges that with what the model declares and stores it in the
 * index arena. Rules give unknown (elem 0, rank -1, no values) whenever
 * an input they need is unknown or the node is malformed. */
#include "infer.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum {
	DT_FLOAT = 1, DT_UINT8 = 2, DT_INT8 = 3, DT_UINT16 = 4, DT_INT16 = 5, DT_INT32 = 6,
	DT_INT64 = 7, DT_STRING = 8, DT_BOOL = 9, DT_FLOAT16 = 10, DT_DOUBLE = 11,
	DT_UINT32 = 12, DT_UINT64 = 13, DT_COMPLEX64 = 14, DT_COMPLEX128 = 15, DT_BFLOAT16 = 16,
};

/* ---- element types ---- */

const char *elem_name(int dt)
{
	static const char *const names[] = {
		"undefined", "float", "uint8", "int8", "uint16", "int16", "int32", "int64", "string",
		"bool", "float16", "double", "uint32", "uint64", "complex64", "complex128", "bfloat16",
		"float8e4m3fn", "float8e4m3fnuz", "float8e5m2", "float8e5m2fnuz", "uint4", "int4",
	};
	static _Thread_local char buf[32];
	if (dt >= 0 && (size_t)dt < sizeof names / sizeof *names)
		return names[dt];
	snprintf(buf, sizeof buf, "type %d", dt);
	return buf;
}

size_t elem_size(int dt)
{
	switch (dt) {
	case DT_UINT8: case DT_INT8: case DT_BOOL: case 17: case 18: case 19: case 20: return 1;
	case DT_UINT16: case DT_INT16: case DT_FLOAT16: case DT_BFLOAT16: return 2;
	case DT_FLOAT: case DT_INT32: case DT_UINT32: return 4;
	case DT_INT64: case DT_DOUBLE: case DT_UINT64: case DT_COMPLEX64: return 8;
	case DT_COMPLEX128: return 16;
	default: return 0;
	}
}

int elem_valid(int dt)
{
	return dt != 0 && protobuf_c_enum_descriptor_get_value(&onnx__tensor_proto__data_type__descriptor, dt) != NULL;
}

int elem_is_int(int dt)
{
	switch (dt) {
	case DT_UINT8: case DT_INT8: case DT_UINT16: case DT_INT16: case DT_INT32: case DT_INT64:
	case DT_BOOL: case DT_UINT32: case DT_UINT64:
		return 1;
	}
	return 0;
}

int elem_is_float(int dt)
{
	return dt == DT_FLOAT || dt == DT_DOUBLE || dt == DT_FLOAT16 || dt == DT_BFLOAT16;
}

/* Range of an integer type's values, for keeping tracked values exact. */
static void int_range(int dt, int64_t *lo, int64_t *hi)
{
	switch (dt) {
	case DT_BOOL: *lo = 0; *hi = 1; return;
	case DT_UINT8: *lo = 0; *hi = UINT8_MAX; return;
	case DT_INT8: *lo = INT8_MIN; *hi = INT8_MAX; return;
	case DT_UINT16: *lo = 0; *hi = UINT16_MAX; return;
	case DT_INT16: *lo = INT16_MIN; *hi = INT16_MAX; return;
	case DT_INT32: *lo = INT32_MIN; *hi = INT32_MAX; return;
	case DT_UINT32: *lo = 0; *hi = UINT32_MAX; return;
	case DT_UINT64: *lo = 0; *hi = INT64_MAX; return;
	default: *lo = INT64_MIN + 1; *hi = INT64_MAX; return;
	}
}

/* ---- queries ---- */

static const Ty UNKNOWN = { 0, 0, -1, NULL, NULL, 0 };

const Ty *g_ty(const Graph *g, const char *name)
{
	Val *v = name && *name ? g_val(g, name) : NULL;
	return v ? v->ty : NULL;
}

int g_ty_elem(const Graph *g, const char *name)
{
	const Ty *t = g_ty(g, name);
	return t ? t->elem : 0;
}

int ty_rank(const Ty *t)
{
	return t ? t->rank : -1;
}

int64_t ty_dim(const Ty *t, int64_t d)
{
	if (!t || t->rank < 0)
		return -1;
	if (d < 0)
		d += t->rank;
	return d >= 0 && d < t->rank ? t->dim[d] : -1;
}

int ty_val(const Ty *t, size_t i, int64_t *v)
{
	if (!t || !t->val || i >= (size_t)t->nval || t->val[i] == TY_UNK)
		return 0;
	*v = t->val[i];
	return 1;
}

int g_ty_rank(const Graph *g, const char *name)
{
	return ty_rank(g_ty(g, name));
}

int64_t g_ty_dim(const Graph *g, const char *name, int64_t d)
{
	return ty_dim(g_ty(g, name), d);
}

int g_ty_val(const Graph *g, const char *name, size_t i, int64_t *v)
{
	return ty_val(g_ty(g, name), i, v);
}

int64_t g_ty_numel(const Graph *g, const char *name)
{
	const Ty *t = g_ty(g, name);
	return t ? ty_numel(t) : -1;
}

int64_t ty_numel(const Ty *t)
{
	if (t->rank < 0)
		return -1;
	int64_t n = 1;
	for (int i = 0; i < t->rank; i++)
		if (t->dim[i] < 0 || __builtin_mul_overflow(n, t->dim[i], &n))
			return -1;
	return n;
}

const char *ty_str(Arena *a, const Ty *t)
{
	if (!t || (t->rank < 0 && !t->elem))
		return "?";
	char buf[2048];
	size_t k = (size_t)snprintf(buf, sizeof buf, "%s", t->elem ? elem_name(t->elem) : "?");
	if (t->rank < 0) {
		snprintf(buf + k, sizeof buf - k, "[...]");
		return arena_strdup(a, buf);
	}
	k += (size_t)snprintf(buf + k, sizeof buf - k, "[");
	for (int i = 0; i < t->rank && k < sizeof buf - 64; i++) {
		if (t->dim[i] < 0)
			k += (size_t)snprintf(buf + k, sizeof buf - k, "%s?", i ? "," : "");
		else
			k += (size_t)snprintf(buf + k, sizeof buf - k, "%s%lld", i ? "," : "", (long long)t->dim[i]);
	}
	k += (size_t)snprintf(buf + k, sizeof buf - k, "]");
	if (t->val) {
		k += (size_t)snprintf(buf + k, sizeof buf - k, "={");
		for (int i = 0; i < t->nval && k < sizeof buf - 64; i++) {
			if (t->val[i] == TY_UNK)
				k += (size_t)snprintf(buf + k, sizeof buf - k, "%s?", i ? "," : "");
			else
				k += (size_t)snprintf(buf + k, sizeof buf - k, "%s%lld", i ? "," : "", (long long)t->val[i]);
		}
		snprintf(buf + k, sizeof buf - k, "}");
	}
	return arena_strdup(a, buf);
}

/* ---- scratch results ---- */

typedef struct {
	int elem, rank;
	int hv, nval; /* values tracked (hv), and how many */
	int64_t dim[TY_MAXRANK];
	int64_t val[TY_MAXVAL];
} S;

/* The node being inferred: its inputs' results and its outputs' Vals,
 * looked up once (name lookups are most of the walk's cost). */
typedef struct {
	const Ty **in;
	size_t nin;
	Val **out; /* NULL where the output is "" or not this node's */
	size_t nout;
	Graph **subs; /* the node's bodies */
	size_t ns;
} Cur;

typedef struct {
	Ctx *c;
	Arena *tmp; /* the walk's scratch: in-degrees, work lists, types */
	int opset;
	const Cur *cur;
	PMap types; /* content hash (intern) -> the first Ty made with it */
} W;

static void s_unk(S *s)
{
	s->elem = 0;
	s->rank = -1;
	s->hv = s->nval = 0;
}

/* Rank r with every dimension unknown; r out of range: rank unknown. */
static void s_rank(S *s, int64_t r)
{
	s->hv = s->nval = 0;
	if (r < 0 || r > TY_MAXRANK) {
		s->rank = -1;
		return;
	}
	s->rank = (int)r;
	for (int i = 0; i < s->rank; i++)
		s->dim[i] = -1;
}

static void s_of(S *s, const Ty *t)
{
	s->elem = t->elem;
	s->rank = t->rank;
	for (int i = 0; i < t->rank; i++)
		s->dim[i] = t->dim[i];
	s->hv = t->val != NULL;
	s->nval = t->nval;
	if (t->val)
		memcpy(s->val, t->val, (size_t)t->nval * sizeof *s->val);
}

static int64_t s_numel(const S *s)
{
	if (s->rank < 0)
		return -1;
	int64_t n = 1;
	for (int i = 0; i < s->rank; i++)
		if (s->dim[i] < 0 || __builtin_mul_overflow(n, s->dim[i], &n))
			return -1;
	return n;
}

/* Element count when values may be tracked for s, else -1. */
static int64_t s_valn(const S *s)
{
	if (!elem_is_int(s->elem) || s->rank < 0 || s->rank > 1)
		return -1;
	int64_t n = s_numel(s);
	return n >= 0 && n <= TY_MAXVAL ? n : -1;
}

/* Values stay only when they describe s exactly, each within its type. */
static void s_fix(S *s)
{
	if (!s->hv)
		return;
	if (s_valn(s) != s->nval) {
		s->hv = s->nval = 0;
		return;
	}
	int64_t lo, hi;
	int_range(s->elem, &lo, &hi);
	for (int i = 0; i < s->nval; i++)
		if (s->val[i] != TY_UNK && (s->val[i] < lo || s->val[i] > hi))
			s->val[i] = TY_UNK;
}

/* Types are shared: a model's values have a few hundred distinct ones
 * (every expert's output is float[1,C,H,W]), and a Ty per value was 3 MiB
 * of a 400-layer model's index. Results are read-only once made. */
static uint64_t ty_hash(const S *s, int decl)
{
	uint64_t h = 0x9e3779b97f4a7c15ull;
#define MIX(x) (h = (h ^ (uint64_t)(x)) * 0xff51afd7ed558ccdull, h ^= h >> 32)
	MIX(s->elem);
	MIX(decl);
	MIX(s->rank);
	MIX(s->hv ? s->nval : -1);
	for (int i = 0; i < s->rank; i++)
		MIX(s->dim[i]);
	for (int i = 0; s->hv && i < s->nval; i++)
		MIX(s->val[i]);
#undef MIX
	return h;
}

static int ty_is(const Ty *t, const S *s, int decl)
{
	if (t->elem != s->elem || t->decl != decl || t->rank != s->rank || !t->val != !s->hv ||
	    (s->hv && t->nval != s->nval))
		return 0;
	if (s->rank > 0 && memcmp(t->dim, s->dim, (size_t)s->rank * sizeof *s->dim))
		return 0;
	return !s->hv || !s->nval || !memcmp(t->val, s->val, (size_t)s->nval * sizeof *s->val);
}

static const Ty *intern(W *w, const S *s, int decl)
{
	/* Keyed by the hash as a pointer (never NULL, the map's empty key; in
	 * 48 bits, as a map's keys are); a different type with the same hash,
	 * which 48 bits make all but impossible, just gets a record of its
	 * own. */
	const void *h = (const void *)(uintptr_t)((ty_hash(s, decl) & MAP_KEY_MASK) | 1);
	const Ty **slot = (const Ty **)pmap_ref(&w->types, h);
	if (*slot && ty_is(*slot, s, decl))
		return *slot;
	Arena *a = w->c->ia;
	Ty *t = arena_alloc(a, sizeof *t);
	t->elem = s->elem;
	t->decl = decl;
	t->rank = s->rank;
	if (s->rank > 0)
		t->dim = arena_dup(a, s->dim, (size_t)s->rank * sizeof *s->dim);
	if (s->hv) {
		t->nval = s->nval;
		static const int64_t empty[1];
		t->val = s->nval ? arena_dup(a, s->val, (size_t)s->nval * sizeof *s->val) : empty;
	}
	if (!*slot)
		*slot = t;
	return t;
}

/* Stores s for v, merged with what the model declares for it. */
static void put_val(W *w, Val *v, S *s)
{
	if (!v)
		return;
	const Ty *d = v->ty;
	int decl = 0;
	if (d) {
		decl = d->decl;
		if (!s->elem)
			s->elem = d->elem;
		if (s->rank < 0 && d->rank >= 0) {
			s->rank = d->rank;
			for (int i = 0; i < d->rank; i++)
				s->dim[i] = d->dim[i];
			s->hv = s->nval = 0;
		} else if (s->rank >= 0 && d->rank >= 0 && s->rank != d->rank) {
			s_rank(s, -1); /* one of them is wrong: say nothing */
		} else if (s->rank >= 0 && d->rank >= 0) {
			for (int i = 0; i < s->rank; i++) {
				if (s->dim[i] < 0)
					s->dim[i] = d->dim[i];
				else if (d->dim[i] >= 0 && d->dim[i] != s->dim[i])
					s->dim[i] = -1;
			}
		}
	}
	s_fix(s);
	v->ty = intern(w, s, decl);
}

static void put_name(W *w, Graph *g, const char *name, S *s)
{
	put_val(w, name && *name ? map_get(&g->val, name) : NULL, s);
}

/* Output i of the current node. */
static void put(W *w, size_t i, S *s)
{
	if (i < w->cur->nout)
		put_val(w, w->cur->out[i], s);
}

/* ---- reading the model ---- */

/* Input i of the current node. */
static const Ty *ty_in(const W *w, size_t i)
{
	return i < w->cur->nin ? w->cur->in[i] : &UNKNOWN;
}

static int has_in(const Node *n, size_t i)
{
	return i < n->n_input && *n->input[i];
}

/* An ints attribute: its count (values in out), or -1 when absent or
 * longer than max. */
static int attr_ints(const Node *n, const char *name, int64_t *out, int max)
{
	const Onnx__AttributeProto *a = g_attr(n, name);
	if (!a || a->n_ints > (size_t)max)
		return -1;
	if (a->n_ints) /* an empty list may have no array at all */
		memcpy(out, a->ints, a->n_ints * sizeof *out);
	return (int)a->n_ints;
}

/* A window op's auto_pad, read once per node (per axis, its lookups were
 * half the Conv rule's time). NOTSET and unknown values: the pads. */
enum { PAD_EXPLICIT, PAD_SAME, PAD_VALID };

static int auto_pad(const Node *n)
{
	const Onnx__AttributeProto *a = g_attr(n, "auto_pad");
	if (!a || !a->has_s)
		return PAD_EXPLICIT;
	const char *v = (const char *)a->s.data;
	if (a->s.len == 10 && (memcmp(v, "SAME_UPPER", 10) == 0 || memcmp(v, "SAME_LOWER", 10) == 0))
		return PAD_SAME;
	return a->s.len == 5 && memcmp(v, "VALID", 5) == 0 ? PAD_VALID : PAD_EXPLICIT;
}

/* The values of t: their count, or -1 unless every one is known. */
static int vals(const Ty *t, int64_t *out, int max)
{
	if (!t->val || t->nval > max)
		return -1;
	for (int i = 0; i < t->nval; i++) {
		if (t->val[i] == TY_UNK)
			return -1;
		out[i] = t->val[i];
	}
	return t->nval;
}

/* Length of a 1-D input (a shape, axes), or -1. */
static int64_t len1(const Ty *t)
{
	return t->rank == 1 ? t->dim[0] : t->rank == 0 ? 1 : -1;
}

static int norm_axis(int64_t a, int r)
{
	if (a < 0)
		a += r;
	return a >= 0 && a < r ? (int)a : -1;
}

/* Integer elements of a tensor's data: 0 and out filled, or -1 (external,
 * wrong length, another type). */
static int tensor_ints(const Tensor *t, int64_t *out, int64_t n)
{
	int dt = t->has_data_type ? t->data_type : 0;
	if (!elem_is_int(dt) || g_is_later(t) ||
	    (t->has_data_location && t->data_location == ONNX__TENSOR_PROTO__DATA_LOCATION__EXTERNAL))
		return -1;
	size_t es = elem_size(dt);
	if (t->has_raw_data) {
		if (t->raw_data.len != (size_t)n * es)
			return -1;
		const uint8_t *p = t->raw_data.data;
		for (int64_t i = 0; i < n; i++, p += es) {
			uint64_t u = 0;
			for (size_t b = 0; b < es; b++)
				u |= (uint64_t)p[b] << (8 * b);
			switch (dt) {
			case DT_INT8: out[i] = (int8_t)u; break;
			case DT_INT16: out[i] = (int16_t)u; break;
			case DT_INT32: out[i] = (int32_t)u; break;
			case DT_INT64: out[i] = (int64_t)u; break;
			case DT_UINT64:
				if (u > INT64_MAX)
					return -1;
				out[i] = (int64_t)u;
				break;
			default: out[i] = (int64_t)u; break;
			}
		}
		return 0;
	}
	if (dt == DT_INT64) {
		if (t->n_int64_data != (size_t)n)
			return -1;
		if (n)
			memcpy(out, t->int64_data, (size_t)n * sizeof *out);
		return 0;
	}
	if (dt == DT_UINT32 || dt == DT_UINT64) {
		if (t->n_uint64_data != (size_t)n)
			return -1;
		for (int64_t i = 0; i < n; i++) {
			if (t->uint64_data[i] > INT64_MAX)
				return -1;
			out[i] = (int64_t)t->uint64_data[i];
		}
		return 0;
	}
	if (t->n_int32_data != (size_t)n)
		return -1;
	for (int64_t i = 0; i < n; i++)
		out[i] = t->int32_data[i];
	return 0;
}

/* What a tensor says of itself; its values unless novals. */
static void s_tensor(S *s, const Tensor *t, int novals)
{
	s_unk(s);
	s->elem = t->has_data_type ? t->data_type : 0;
	if (t->n_dims > TY_MAXRANK)
		return;
	s->rank = (int)t->n_dims;
	for (size_t i = 0; i < t->n_dims; i++)
		s->dim[i] = t->dims[i] >= 0 ? t->dims[i] : -1;
	int64_t n = s_valn(s);
	for (size_t i = 0; i < t->n_dims; i++)
		if (t->dims[i] < 0)
			n = -1;
	if (!novals && n >= 0 && tensor_ints(t, s->val, n) == 0) {
		s->hv = 1;
		s->nval = (int)n;
	}
}

/* Float elements of a constant (Resize scales): count, or -1. */
static int const_floats(const Graph *g, const char *name, double *out, int max)
{
	const Tensor *t = name && *name ? g_const(g, name) : NULL;
	if (!t)
		return -1;
	int64_t n = g_tensor_numel(t);
	if (n < 0 || n > max)
		return -1;
	if (t->data_type == DT_FLOAT) {
		size_t nb;
		const uint8_t *p = g_tensor_data(t, &nb);
		if (!p || nb != (size_t)n * 4)
			return -1;
		for (int64_t i = 0; i < n; i++) {
			float f;
			memcpy(&f, p + 4 * i, 4);
			out[i] = f;
		}
		return (int)n;
	}
	if (t->data_type == DT_DOUBLE) {
		size_t nb;
		const uint8_t *p = g_tensor_data(t, &nb);
		if (!p || nb != (size_t)n * 8)
			return -1;
		memcpy(out, p, nb);
		return (int)n;
	}
	return -1;
}

/* ---- shared rule pieces ---- */

/* Multidirectional broadcasting of the inputs' shapes into o. */
static void bcast(S *o, const Ty *const *in, int nin)
{
	int r = 0;
	for (int i = 0; i < nin; i++) {
		if (in[i]->rank < 0) {
			s_rank(o, -1);
			return;
		}
		if (in[i]->rank > r)
			r = in[i]->rank;
	}
	s_rank(o, r);
	for (int j = 0; j < r; j++) {
		int64_t d = 1;
		int unk = 0, bad = 0;
		for (int i = 0; i < nin; i++) {
			int k = j - (r - in[i]->rank);
			if (k < 0)
				continue;
			int64_t x = in[i]->dim[k];
			if (x < 0)
				unk = 1;
			else if (x != 1 && d == 1)
				d = x;
			else if (x != 1 && x != d)
				bad = 1;
		}
		/* A known dimension other than 1 decides: the unknown ones are 1
		 * or equal to it. All 1 but one unknown: that one decides. */
		o->dim[j] = bad || (d == 1 && unk) ? -1 : d;
	}
}

typedef int (*Fn)(const int64_t *x, int64_t *r, const void *ctx);

/* Elementwise values of an op over broadcast operands: o's shape must be
 * known and small; a length-1 operand repeats. */
static void eval(S *o, const Ty *const *in, int nin, Fn f, const void *ctx)
{
	o->hv = 0;
	int64_t n = o->rank >= 0 && o->rank <= 1 ? s_numel(o) : -1;
	if (n < 0 || n > TY_MAXVAL)
		return;
	for (int i = 0; i < nin; i++)
		if (!in[i]->val || in[i]->rank > 1 || (in[i]->nval != 1 && in[i]->nval != n))
			return;
	for (int64_t k = 0; k < n; k++) {
		int64_t x[8], r;
		int unk = 0;
		for (int i = 0; i < nin && i < 8; i++) {
			x[i] = in[i]->val[in[i]->nval == 1 ? 0 : k];
			unk |= x[i] == TY_UNK;
		}
		o->val[k] = unk || f(x, &r, ctx) ? TY_UNK : r;
	}
	o->hv = 1;
	o->nval = (int)n;
}

static int first_elem(const Ty *const *in, int nin)
{
	for (int i = 0; i < nin; i++)
		if (in[i]->elem)
			return in[i]->elem;
	return 0;
}

/* Merge of two possibilities (If branches, a Loop's initial and carried
 * values): what both agree on. */
static void s_join(S *o, const Ty *a, const Ty *b)
{
	s_unk(o);
	o->elem = a->elem == b->elem ? a->elem : 0;
	if (a->rank < 0 || a->rank != b->rank)
		return;
	o->rank = a->rank;
	for (int i = 0; i < a->rank; i++)
		o->dim[i] = a->dim[i] == b->dim[i] ? a->dim[i] : -1;
	if (a->val && b->val && a->nval == b->nval) {
		o->hv = 1;
		o->nval = a->nval;
		for (int i = 0; i < a->nval; i++)
			o->val[i] = a->val[i] == b->val[i] ? a->val[i] : TY_UNK;
	}
}

/* ---- rules ---- */

typedef int (*Rule)(W *w, Graph *g, Node *n, S *o); /* 0: o is output 0; 1: outputs stored */

#define IN(i) ty_in(w, (i))

/* Reshape, Unsqueeze and Squeeze move no element: a shape vector's known
 * values (a Shape's output on its way to a Reshape or Expand) stay known
 * while the result is still a vector or scalar. */
static void keep_vals(S *o, const Ty *x)
{
	if (x->val && o->rank <= 1) {
		o->hv = 1;
		o->nval = x->nval;
		memcpy(o->val, x->val, (size_t)x->nval * sizeof *o->val);
	}
}

static int r_same(W *w, Graph *g, Node *n, S *o)
{
	s_of(o, IN(0));
	o->hv = 0;
	return 0;
}

static int r_identity(W *w, Graph *g, Node *n, S *o)
{
	s_of(o, IN(0));
	return 0;
}

static int r_bool_same(W *w, Graph *g, Node *n, S *o)
{
	s_of(o, IN(0));
	o->hv = 0;
	o->elem = DT_BOOL;
	return 0;
}

static int f_add(const int64_t *x, int64_t *r, const void *c) { return __builtin_add_overflow(x[0], x[1], r); }
static int f_sub(const int64_t *x, int64_t *r, const void *c) { return __builtin_sub_overflow(x[0], x[1], r); }
static int f_mul(const int64_t *x, int64_t *r, const void *c) { return __builtin_mul_overflow(x[0], x[1], r); }
/* Integer division rounds differently across runtimes (truncation or
 * floor): only exact quotients are known. */
static int f_div(const int64_t *x, int64_t *r, const void *c)
{
	if (!x[1] || (x[0] == INT64_MIN + 1 && x[1] == -1) || x[0] % x[1])
		return 1;
	*r = x[0] / x[1];
	return 0;
}
static int f_mod(const int64_t *x, int64_t *r, const void *c)
{
	if (!x[1])
		return 1;
	int64_t m = x[0] % x[1];
	if (*(const int *)c) /* fmod: the sign of the dividend */
		*r = m;
	else /* the sign of the divisor */
		*r = m && ((m < 0) != (x[1] < 0)) ? m + x[1] : m;
	return 0;
}
static int f_max(const int64_t *x, int64_t *r, const void *c) { *r = x[0] > x[1] ? x[0] : x[1]; return 0; }
static int f_min(const int64_t *x, int64_t *r, const void *c) { *r = x[0] < x[1] ? x[0] : x[1]; return 0; }
static int f_eq(const int64_t *x, int64_t *r, const void *c) { *r = x[0] == x[1]; return 0; }
static int f_lt(const int64_t *x, int64_t *r, const void *c) { *r = x[0] < x[1]; return 0; }
static int f_gt(const int64_t *x, int64_t *r, const void *c) { *r = x[0] > x[1]; return 0; }
static int f_le(const int64_t *x, int64_t *r, const void *c) { *r = x[0] <= x[1]; return 0; }
static int f_ge(const int64_t *x, int64_t *r, const void *c) { *r = x[0] >= x[1]; return 0; }
static int f_and(const int64_t *x, int64_t *r, const void *c) { *r = x[0] && x[1]; return 0; }
static int f_or(const int64_t *x, int64_t *r, const void *c) { *r = x[0] || x[1]; return 0; }
static int f_xor(const int64_t *x, int64_t *r, const void *c) { *r = !x[0] != !x[1]; return 0; }
static int f_not(const int64_t *x, int64_t *r, const void *c) { *r = !x[0]; return 0; }
static int f_neg(const int64_t *x, int64_t *r, const void *c) { return __builtin_sub_overflow((int64_t)0, x[0], r); }
static int f_abs(const int64_t *x, int64_t *r, const void *c) { *r = x[0] < 0 ? -x[0] : x[0]; return 0; }
static int f_where(const int64_t *x, int64_t *r, const void *c) { *r = x[0] ? x[1] : x[2]; return 0; }

static const struct {
	const char *op;
	Fn f;
	int cmp;   /* output is bool */
} BIN[] = {
	{ "Add", f_add, 0 }, { "Sub", f_sub, 0 }, { "Mul", f_mul, 0 }, { "Div", f_div, 0 },
	{ "Mod", f_mod, 0 }, { "Equal", f_eq, 1 }, { "Less", f_lt, 1 }, { "Greater", f_gt, 1 },
	{ "LessOrEqual", f_le, 1 }, { "GreaterOrEqual", f_ge, 1 }, { "And", f_and, 1 },
	{ "Or", f_or, 1 }, { "Xor", f_xor, 1 }, { "Pow", NULL, 0 }, { "BitShift", NULL, 0 },
	{ "PRelu", NULL, 0 },
};

static int r_binary(W *w, Graph *g, Node *n, S *o)
{
	const Ty *in[2] = { IN(0), IN(1) };
	if (n->n_input != 2)
		return 0;
	bcast(o, in, 2);
	for (size_t i = 0; i < sizeof BIN / sizeof *BIN; i++) {
		if (strcmp(n->op_type, BIN[i].op))
			continue;
		/* Pow's exponent may have another type: the base's decides. */
		o->elem = BIN[i].cmp ? DT_BOOL : g_is(n, "Pow") || g_is(n, "PRelu") ? in[0]->elem : first_elem(in, 2);
		int fmod = (int)g_attr_i(n, "fmod", 0);
		if (BIN[i].f && elem_is_int(in[0]->elem) && elem_is_int(in[1]->elem))
			eval(o, in, 2, BIN[i].f, &fmod);
		if (g_is(n, "PRelu")) { /* the slope broadcasts to X, not both ways */
			s_of(o, in[0]);
			o->hv = 0;
		}
	}
	return 0;
}

/* Max Min Sum Mean: variadic, broadcast. */
static int r_variadic(W *w, Graph *g, Node *n, S *o)
{
	const Ty *in[64] = { 0 };
	int k = 0;
	if (!n->n_input || n->n_input > 64)
		return 0;
	for (size_t i = 0; i < n->n_input; i++)
		in[k++] = IN(i);
	bcast(o, in, k);
	o->elem = first_elem(in, k);
	Fn f = g_is(n, "Max") ? f_max : g_is(n, "Min") ? f_min : g_is(n, "Sum") ? f_add : NULL;
	if (!f || !elem_is_int(o->elem))
		return 0;
	/* Fold pairwise over the broadcast shape. */
	S acc;
	s_of(&acc, in[0]);
	Ty at = { 0 };
	for (int i = 1; i < k; i++) {
		at = (Ty){ acc.elem, 0, acc.rank, acc.dim, acc.hv ? acc.val : NULL, acc.nval };
		const Ty *p[2] = { &at, in[i] };
		S next;
		bcast(&next, p, 2);
		next.elem = o->elem;
		eval(&next, p, 2, f, NULL);
		acc = next;
	}
	if (acc.hv && acc.rank == o->rank) {
		o->hv = 1;
		o->nval = acc.nval;
		memcpy(o->val, acc.val, (size_t)acc.nval * sizeof *o->val);
	}
	return 0;
}

static int r_unary_val(W *w, Graph *g, Node *n, S *o)
{
	const Ty *x = IN(0);
	s_of(o, x);
	o->hv = 0;
	if (g_is(n, "Not")) {
		o->elem = DT_BOOL;
		eval(o, &x, 1, f_not, NULL);
	} else if (elem_is_int(x->elem)) {
		eval(o, &x, 1, g_is(n, "Neg") ? f_neg : f_abs, NULL);
	}
	return 0;
}

static int r_where(W *w, Graph *g, Node *n, S *o)
{
	const Ty *in[3] = { IN(0), IN(1), IN(2) };
	if (n->n_input != 3)
		return 0;
	bcast(o, in, 3);
	o->elem = in[1]->elem ? in[1]->elem : in[2]->elem;
	if (elem_is_int(o->elem))
		eval(o, in, 3, f_where, NULL);
	return 0;
}

static int r_cast(W *w, Graph *g, Node *n, S *o)
{
	const Ty *x = IN(0);
	s_of(o, x);
	o->elem = g_is(n, "CastLike") ? IN(1)->elem : (int)g_attr_i(n, "to", 0);
	if (!elem_valid(o->elem))
		o->elem = 0;
	/* Integer to integer keeps the values (s_fix drops any out of the
	 * target's range); bool is nonzero. */
	if (!elem_is_int(x->elem) || !elem_is_int(o->elem))
		o->hv = 0;
	else if (o->elem == DT_BOOL)
		for (int i = 0; i < o->nval; i++)
			if (o->val[i] != TY_UNK)
				o->val[i] = o->val[i] != 0;
	return 0;
}

static int r_constant(W *w, Graph *g, Node *n, S *o)
{
	const Onnx__AttributeProto *a;
	s_unk(o);
	if ((a = g_attr(n, "value")) && a->t) {
		s_tensor(o, a->t, 0);
	} else if ((a = g_attr(n, "sparse_value")) && a->sparse_tensor) {
		const Onnx__SparseTensorProto *sp = a->sparse_tensor;
		o->elem = sp->values && sp->values->has_data_type ? sp->values->data_type : 0;
		s_rank(o, (int64_t)sp->n_dims);
		for (int i = 0; i < o->rank; i++)
			o->dim[i] = sp->dims[i] >= 0 ? sp->dims[i] : -1;
	} else if ((a = g_attr(n, "value_int")) && a->has_i) {
		o->elem = DT_INT64;
		o->rank = 0;
		o->hv = o->nval = 1;
		o->val[0] = a->i;
	} else if ((a = g_attr(n, "value_ints"))) {
		o->elem = DT_INT64;
		s_rank(o, 1);
		o->dim[0] = (int64_t)a->n_ints;
		if (a->n_ints <= TY_MAXVAL) {
			o->hv = 1;
			o->nval = (int)a->n_ints;
			if (a->n_ints)
				memcpy(o->val, a->ints, a->n_ints * sizeof *o->val);
		}
	} else if ((a = g_attr(n, "value_float"))) {
		o->elem = DT_FLOAT;
		o->rank = 0;
	} else if ((a = g_attr(n, "value_floats"))) {
		o->elem = DT_FLOAT;
		s_rank(o, 1);
		o->dim[0] = (int64_t)a->n_floats;
	} else if ((a = g_attr(n, "value_string"))) {
		o->elem = DT_STRING;
		o->rank = 0;
	} else if ((a = g_attr(n, "value_strings"))) {
		o->elem = DT_STRING;
		s_rank(o, 1);
		o->dim[0] = (int64_t)a->n_strings;
	}
	return 0;
}

static int r_shape(W *w, Graph *g, Node *n, S *o)
{
	const Ty *x = IN(0);
	s_rank(o, 1);
	o->elem = DT_INT64;
	if (x->rank < 0)
		return 0;
	int64_t r = x->rank, start = 0, end = r;
	if (w->opset >= 15) {
		start = g_attr_i(n, "start", 0);
		end = g_attr_i(n, "end", r);
	}
	if (start < 0)
		start += r;
	if (end < 0)
		end += r;
	start = start < 0 ? 0 : start > r ? r : start;
	end = end < 0 ? 0 : end > r ? r : end;
	o->dim[0] = end > start ? end - start : 0;
	o->hv = 1;
	o->nval = (int)o->dim[0];
	for (int64_t i = start; i < end; i++)
		o->val[i - start] = x->dim[i] >= 0 ? x->dim[i] : TY_UNK;
	return 0;
}

static int r_size(W *w, Graph *g, Node *n, S *o)
{
	int64_t k = ty_numel(IN(0));
	o->elem = DT_INT64;
	o->rank = 0;
	o->hv = o->nval = 1;
	o->val[0] = k >= 0 ? k : TY_UNK;
	return 0;
}

static int r_reshape(W *w, Graph *g, Node *n, S *o)
{
	const Ty *x = IN(0);
	int64_t shp[TY_MAXRANK];
	int64_t k;
	o->elem = x->elem;
	if (w->opset < 5) {
		k = attr_ints(n, "shape", shp, TY_MAXRANK);
	} else {
		const Ty *s = IN(1);
		k = s->rank == 1 ? s->dim[0] : -1;
		if (k > TY_MAXRANK)
			k = -1;
		for (int64_t i = 0; i < k; i++)
			shp[i] = s->val ? s->val[i] : TY_UNK;
	}
	if (k < 0)
		return 0;
	s_rank(o, k);
	int allowzero = w->opset >= 14 && g_attr_i(n, "allowzero", 0);
	int minus = -1, known = 1;
	int copied[TY_MAXRANK] = { 0 };
	for (int i = 0; i < o->rank; i++) {
		int64_t v = shp[i];
		if (v == TY_UNK) {
			known = 0;
		} else if (v > 0) {
			o->dim[i] = v;
		} else if (v == 0 && allowzero) {
			o->dim[i] = 0;
		} else if (v == 0) {
			copied[i] = 1;
			o->dim[i] = i < x->rank ? x->dim[i] : -1;
			if (x->rank >= 0 && i >= x->rank)
				known = 0;
		} else if (v == -1 && minus < 0) {
			minus = i;
		} else {
			return 0; /* malformed: say nothing */
		}
	}
	/* The -1 takes what is left; dimensions copied by a 0 cancel out, so
	 * an unknown batch copied through still leaves the rest known. */
	if (minus >= 0 && known && x->rank >= 0) {
		int64_t num = 1, den = 1;
		int ok = 1;
		for (int j = 0; j < x->rank && ok; j++)
			if (!(j < o->rank && copied[j]))
				ok = x->dim[j] >= 0 && !__builtin_mul_overflow(num, x->dim[j], &num);
		for (int i = 0; i < o->rank && ok; i++)
			if (i != minus && !copied[i])
				ok = !__builtin_mul_overflow(den, o->dim[i], &den);
		if (ok && den > 0 && num % den == 0)
			o->dim[minus] = num / den;
	}
	keep_vals(o, x);
	return 0;
}

static int r_flatten(W *w, Graph *g, Node *n, S *o)
{
	const Ty *x = IN(0);
	s_rank(o, 2);
	o->elem = x->elem;
	if (x->rank < 0)
		return 0;
	int64_t a = g_attr_i(n, "axis", 1);
	if (a < 0)
		a += x->rank;
	if (a < 0 || a > x->rank)
		return 0;
	int64_t p[2] = { 1, 1 };
	int ok[2] = { 1, 1 };
	for (int i = 0; i < x->rank; i++) {
		int s = i >= a;
		ok[s] = ok[s] && x->dim[i] >= 0 && !__builtin_mul_overflow(p[s], x->dim[i], &p[s]);
	}
	o->dim[0] = ok[0] ? p[0] : -1;
	o->dim[1] = ok[1] ? p[1] : -1;
	return 0;
}

/* Axes of Squeeze/Unsqueeze/Reduce*: from the attribute before opset
 * `from`, else input 1. Returns the count (values in ax, or unknown when
 * *kn is 0), -1 when the count is unknown, -2 when absent. */
static int axes_of(W *w, Graph *g, Node *n, int from, size_t idx, int64_t *ax, int *kn)
{
	*kn = 1;
	if (w->opset < from) {
		int k = attr_ints(n, "axes", ax, TY_MAXRANK);
		return k < 0 ? (g_attr(n, "axes") ? -1 : -2) : k;
	}
	if (!has_in(n, idx))
		return -2;
	const Ty *t = IN(idx);
	int k = vals(t, ax, TY_MAXRANK);
	if (k >= 0)
		return k;
	*kn = 0;
	int64_t l = len1(t);
	return l >= 0 && l <= TY_MAXRANK ? (int)l : -1;
}

static int r_unsqueeze(W *w, Graph *g, Node *n, S *o)
{
	const Ty *x = IN(0);
	int64_t ax[TY_MAXRANK];
	int kn, k = axes_of(w, g, n, 13, 1, ax, &kn);
	o->elem = x->elem;
	if (k < 0 || x->rank < 0)
		return 0;
	s_rank(o, x->rank + k);
	if (o->rank < 0 || !kn)
		return 0;
	int mark[TY_MAXRANK] = { 0 };
	for (int i = 0; i < k; i++) {
		int a = norm_axis(ax[i], o->rank);
		if (a < 0 || mark[a]) {
			s_rank(o, o->rank); /* malformed axes: the rank holds, dims do not */
			return 0;
		}
		mark[a] = 1;
	}
	for (int j = 0, q = 0; j < o->rank; j++)
		o->dim[j] = mark[j] ? 1 : x->dim[q++];
	keep_vals(o, x);
	return 0;
}

static int r_squeeze(W *w, Graph *g, Node *n, S *o)
{
	const Ty *x = IN(0);
	int64_t ax[TY_MAXRANK];
	int kn, k = axes_of(w, g, n, 13, 1, ax, &kn);
	o->elem = x->elem;
	if (x->rank < 0 || k == -1)
		return 0;
	int mark[TY_MAXRANK] = { 0 };
	if (k == -2) { /* every dimension of size 1: all must be known */
		for (int i = 0; i < x->rank; i++) {
			if (x->dim[i] < 0)
				return 0;
			mark[i] = x->dim[i] == 1;
		}
	} else if (!kn) {
		s_rank(o, x->rank - k);
		return 0;
	} else {
		for (int i = 0; i < k; i++) {
			int a = norm_axis(ax[i], x->rank);
			if (a < 0 || mark[a])
				return 0;
			mark[a] = 1;
		}
	}
	int r = 0;
	for (int i = 0; i < x->rank; i++)
		if (!mark[i])
			o->dim[r++] = x->dim[i];
	o->rank = r;
	keep_vals(o, x);
	return 0;
}

static int r_transpose(W *w, Graph *g, Node *n, S *o)
{
	const Ty *x = IN(0);
	o->elem = x->elem;
	if (x->rank < 0)
		return 0;
	int64_t p[TY_MAXRANK];
	int k = attr_ints(n, "perm", p, TY_MAXRANK);
	if (k < 0)
		for (k = 0; k < x->rank; k++)
			p[k] = x->rank - 1 - k;
	if (k != x->rank)
		return 0;
	int seen[TY_MAXRANK] = { 0 };
	for (int i = 0; i < k; i++) {
		if (p[i] < 0 || p[i] >= k || seen[p[i]])
			return 0;
		seen[p[i]] = 1;
	}
	s_rank(o, k);
	for (int i = 0; i < k; i++)
		o->dim[i] = x->dim[p[i]];
	return 0;
}

static int r_concat(W *w, Graph *g, Node *n, S *o)
{
	int r = -1;
	if (!n->n_input)
		return 0;
	for (size_t i = 0; i < n->n_input; i++)
		if (!o->elem)
			o->elem = IN(i)->elem;
	for (size_t i = 0; i < n->n_input && r < 0; i++)
		r = IN(i)->rank;
	if (r < 0)
		return 0;
	int a = norm_axis(g_attr_i(n, "axis", 0), r);
	s_rank(o, r);
	if (a < 0)
		return 0;
	int64_t sum = 0;
	int vk = r == 1;
	for (size_t i = 0; i < n->n_input; i++) {
		const Ty *t = IN(i);
		if (t->rank >= 0 && t->rank != r) {
			s_rank(o, -1);
			return 0;
		}
		for (int j = 0; j < r; j++) {
			int64_t d = t->rank < 0 ? -1 : t->dim[j];
			if (j == a)
				sum = sum < 0 || d < 0 || __builtin_add_overflow(sum, d, &sum) ? -1 : sum;
			else if (o->dim[j] < 0)
				o->dim[j] = d;
			else if (d >= 0 && d != o->dim[j])
				o->dim[j] = -1;
		}
		vk = vk && t->val;
	}
	o->dim[a] = sum;
	if (vk && sum >= 0 && sum <= TY_MAXVAL) {
		int q = 0;
		for (size_t i = 0; i < n->n_input; i++) {
			const Ty *t = IN(i);
			memcpy(o->val + q, t->val, (size_t)t->nval * sizeof *o->val);
			q += t->nval;
		}
		o->hv = q == sum;
		o->nval = q;
	}
	return 0;
}

static int r_split(W *w, Graph *g, Node *n, S *o)
{
	const Ty *x = IN(0);
	size_t no = n->n_output;
	int a = x->rank >= 0 ? norm_axis(g_attr_i(n, "axis", 0), x->rank) : -1;
	int64_t sp[TY_MAXVAL];
	int k = -1, given;
	if (w->opset < 13) {
		given = g_attr(n, "split") != NULL;
		k = attr_ints(n, "split", sp, TY_MAXVAL);
	} else {
		given = has_in(n, 1);
		if (given)
			k = vals(IN(1), sp, TY_MAXVAL);
	}
	int64_t d = a >= 0 ? x->dim[a] : -1, off = 0;
	for (size_t i = 0; i < no; i++) {
		S out;
		s_of(&out, x);
		out.hv = 0;
		if (a < 0) {
			s_rank(&out, x->rank);
		} else if (given) {
			out.dim[a] = k == (int)no && sp[i] >= 0 ? sp[i] : -1;
		} else if (d < 0) {
			out.dim[a] = -1;
		} else if (w->opset >= 18 && g_attr(n, "num_outputs")) {
			/* ceil(d / n) each, the last one what remains */
			int64_t chunk = d / (int64_t)no + (d % (int64_t)no != 0), used;
			int64_t left = __builtin_mul_overflow(chunk, (int64_t)i, &used) ? 0 : d - used;
			out.dim[a] = left < 0 ? 0 : left < chunk ? left : chunk;
		} else {
			out.dim[a] = d % (int64_t)no == 0 ? d / (int64_t)no : -1;
		}
		/* The pieces of a 1-D value, in order. */
		if (x->val && a == 0 && off >= 0 && out.dim[0] >= 0 && off + out.dim[0] <= x->nval) {
			out.hv = 1;
			out.nval = (int)out.dim[0];
			memcpy(out.val, x->val + off, (size_t)out.nval * sizeof *out.val);
		}
		off = off >= 0 && a >= 0 && out.dim[a] >= 0 ? off + out.dim[a] : -1;
		put(w, i, &out);
	}
	return 1;
}

/* Slice bounds of one axis (ONNX's clamping); -1 when unknown. */
static int64_t slice_len(int64_t d, int64_t st, int64_t en, int64_t step, int64_t *first)
{
	if (d < 0 || !step || st == TY_UNK || en == TY_UNK || step == TY_UNK)
		return -1;
	if (st < 0)
		st += d;
	if (en < 0)
		en += d;
	/* ceil(span / |step|), written so a huge step cannot overflow */
	if (step > 0) {
		st = st < 0 ? 0 : st > d ? d : st;
		en = en < 0 ? 0 : en > d ? d : en;
		*first = st;
		return en > st ? (en - st) / step + ((en - st) % step != 0) : 0;
	}
	st = st < 0 ? 0 : st > d - 1 ? d - 1 : st;
	en = en < -1 ? -1 : en > d - 1 ? d - 1 : en;
	*first = st;
	return st > en ? (st - en) / -step + ((st - en) % -step != 0) : 0;
}

static int r_slice(W *w, Graph *g, Node *n, S *o)
{
	const Ty *x = IN(0);
	s_of(o, x);
	o->hv = 0;
	if (x->rank < 0)
		return 0;
	int64_t st[TY_MAXRANK], en[TY_MAXRANK], ax[TY_MAXRANK], sp[TY_MAXRANK];
	int k;
	if (w->opset < 10) {
		k = attr_ints(n, "starts", st, TY_MAXRANK);
		if (k < 0 || attr_ints(n, "ends", en, TY_MAXRANK) != k)
			goto unknown;
		int ka = attr_ints(n, "axes", ax, TY_MAXRANK);
		if (ka >= 0 && ka != k)
			goto unknown;
		for (int i = 0; i < k; i++) {
			if (ka < 0)
				ax[i] = i;
			sp[i] = 1;
		}
	} else {
		const Ty *ts = IN(1), *te = IN(2);
		int64_t l = len1(ts);
		if (l < 0 || l > TY_MAXRANK || len1(te) != l)
			goto unknown;
		k = (int)l;
		for (int i = 0; i < k; i++) {
			st[i] = ts->val && ts->nval == k ? ts->val[i] : TY_UNK;
			en[i] = te->val && te->nval == k ? te->val[i] : TY_UNK;
			ax[i] = i;
			sp[i] = 1;
		}
		if (has_in(n, 3) && vals(IN(3), ax, TY_MAXRANK) != k)
			goto unknown;
		if (has_in(n, 4)) {
			const Ty *tp = IN(4);
			if (len1(tp) != k)
				goto unknown;
			for (int i = 0; i < k; i++)
				sp[i] = tp->val && tp->nval == k ? tp->val[i] : TY_UNK;
		}
	}
	int64_t first[TY_MAXRANK] = { 0 };
	int done[TY_MAXRANK] = { 0 };
	for (int i = 0; i < k; i++) {
		int a = norm_axis(ax[i], x->rank);
		if (a < 0 || done[a])
			goto unknown;
		done[a] = 1;
		o->dim[a] = slice_len(x->dim[a], st[i], en[i], sp[i], &first[a]);
		if (x->val && x->rank == 1 && o->dim[a] >= 0) {
			o->hv = 1;
			o->nval = (int)o->dim[a];
			for (int j = 0; j < o->nval; j++)
				o->val[j] = x->val[first[a] + j * sp[i]];
		}
	}
	return 0;
unknown:
	s_rank(o, x->rank);
	return 0;
}

static int r_gather(W *w, Graph *g, Node *n, S *o)
{
	const Ty *x = IN(0), *ix = IN(1);
	o->elem = x->elem;
	if (x->rank < 0 || ix->rank < 0)
		return 0;
	int a = norm_axis(g_attr_i(n, "axis", 0), x->rank);
	if (a < 0)
		return 0;
	s_rank(o, x->rank + ix->rank - 1);
	if (o->rank < 0)
		return 0;
	int q = 0;
	for (int i = 0; i < a; i++)
		o->dim[q++] = x->dim[i];
	for (int i = 0; i < ix->rank; i++)
		o->dim[q++] = ix->dim[i];
	for (int i = a + 1; i < x->rank; i++)
		o->dim[q++] = x->dim[i];
	if (x->val && x->rank == 1 && ix->val && o->rank <= 1) {
		o->hv = 1;
		o->nval = ix->nval;
		for (int i = 0; i < ix->nval; i++) {
			int64_t j = ix->val[i];
			if (j != TY_UNK && j < 0)
				j += x->nval;
			o->val[i] = j == TY_UNK || j < 0 || j >= x->nval ? TY_UNK : x->val[j];
		}
	}
	return 0;
}

static int r_gather_elements(W *w, Graph *g, Node *n, S *o)
{
	s_of(o, IN(1));
	o->hv = 0;
	o->elem = IN(0)->elem;
	return 0;
}

static int r_gather_nd(W *w, Graph *g, Node *n, S *o)
{
	const Ty *x = IN(0), *ix = IN(1);
	o->elem = x->elem;
	int64_t b = g_attr_i(n, "batch_dims", 0);
	if (x->rank < 0 || ix->rank < 1 || b < 0)
		return 0;
	int64_t last = ix->dim[ix->rank - 1];
	if (last < 0 || b > x->rank || last > x->rank - b)
		return 0;
	s_rank(o, ix->rank - 1 + x->rank - last - b);
	if (o->rank < 0)
		return 0;
	int q = 0;
	for (int i = 0; i < ix->rank - 1; i++)
		o->dim[q++] = ix->dim[i];
	for (int64_t i = b + last; i < x->rank; i++)
		o->dim[q++] = x->dim[i];
	return 0;
}

/* Expand: bidirectional broadcast of the input with the shape's values. */
static int r_expand(W *w, Graph *g, Node *n, S *o)
{
	const Ty *x = IN(0), *s = IN(1);
	o->elem = x->elem;
	int64_t k = len1(s);
	if (k < 0 || k > TY_MAXRANK || x->rank < 0 || s->rank != 1)
		return 0;
	int r = x->rank > k ? x->rank : (int)k;
	s_rank(o, r);
	for (int j = 0; j < r; j++) {
		int xi = j - (r - x->rank), si = j - (r - (int)k);
		int64_t xd = xi >= 0 ? x->dim[xi] : 1;
		int64_t sv = si >= 0 ? (s->val ? s->val[si] : TY_UNK) : 1;
		if (sv == TY_UNK)
			o->dim[j] = xd > 1 ? xd : -1;
		else if (xd < 0)
			o->dim[j] = sv > 1 ? sv : -1;
		else if (xd == 1)
			o->dim[j] = sv;
		else if (sv == 1 || sv == xd)
			o->dim[j] = xd;
		else
			o->dim[j] = -1;
	}
	if (x->val && r <= 1 && (x->nval == 1 || x->nval == s_numel(o)) && s_numel(o) >= 0 &&
	    s_numel(o) <= TY_MAXVAL) {
		o->hv = 1;
		o->nval = (int)s_numel(o);
		for (int i = 0; i < o->nval; i++)
			o->val[i] = x->val[x->nval == 1 ? 0 : i];
	}
	return 0;
}

static int r_tile(W *w, Graph *g, Node *n, S *o)
{
	const Ty *x = IN(0);
	s_of(o, x);
	o->hv = 0;
	if (x->rank < 0)
		return 0;
	int64_t rep[TY_MAXRANK];
	if (vals(IN(1), rep, TY_MAXRANK) != x->rank) {
		s_rank(o, x->rank);
		return 0;
	}
	for (int i = 0; i < x->rank; i++)
		if (o->dim[i] >= 0 && (rep[i] < 0 || __builtin_mul_overflow(o->dim[i], rep[i], &o->dim[i])))
			o->dim[i] = -1;
	return 0;
}

static int r_constant_of_shape(W *w, Graph *g, Node *n, S *o)
{
	const Ty *s = IN(0);
	const Onnx__AttributeProto *a = g_attr(n, "value");
	S fill;
	s_unk(&fill);
	if (a && a->t)
		s_tensor(&fill, a->t, 0);
	o->elem = a && a->t ? fill.elem : DT_FLOAT;
	int64_t k = len1(s);
	if (k < 0 || s->rank != 1)
		return 0;
	s_rank(o, k);
	if (o->rank < 0)
		return 0;
	for (int i = 0; i < o->rank; i++)
		o->dim[i] = s->val && s->val[i] >= 0 ? s->val[i] : -1;
	int64_t m = s_valn(o);
	if (m >= 0 && (!a || (fill.hv && fill.nval == 1))) {
		o->hv = 1;
		o->nval = (int)m;
		for (int64_t i = 0; i < m; i++)
			o->val[i] = a ? fill.val[0] : 0;
	}
	return 0;
}

static int r_range(W *w, Graph *g, Node *n, S *o)
{
	const Ty *in[3] = { IN(0), IN(1), IN(2) };
	o->elem = first_elem(in, 3);
	s_rank(o, 1);
	int64_t v[3];
	for (int i = 0; i < 3; i++)
		if (vals(in[i], &v[i], 1) != 1)
			return 0;
	if (!v[2])
		return 0;
	/* ceil((limit - start) / delta), at least 0 */
	int64_t span;
	if (__builtin_sub_overflow(v[1], v[0], &span))
		return 0;
	if (span == INT64_MIN)
		return 0;
	int64_t q = span / v[2], cnt = q + (span % v[2] != 0 && (span < 0) == (v[2] < 0));
	o->dim[0] = cnt > 0 ? cnt : 0;
	if (o->dim[0] <= TY_MAXVAL) {
		o->hv = 1;
		o->nval = (int)o->dim[0];
		for (int i = 0; i < o->nval; i++) {
			int64_t x;
			o->val[i] = __builtin_mul_overflow(v[2], (int64_t)i, &x) || __builtin_add_overflow(v[0], x, &x) ? TY_UNK : x;
		}
	}
	return 0;
}

static int r_nonzero(W *w, Graph *g, Node *n, S *o)
{
	s_rank(o, 2);
	o->elem = DT_INT64;
	o->dim[0] = IN(0)->rank;
	return 0;
}

static int r_topk(W *w, Graph *g, Node *n, S *o)
{
	const Ty *x = IN(0);
	S s;
	s_of(&s, x);
	s.hv = 0;
	int64_t k = TY_UNK;
	if (w->opset < 10) {
		const Onnx__AttributeProto *a = g_attr(n, "k");
		if (a && a->has_i)
			k = a->i;
	} else if (vals(IN(1), &k, 1) != 1) {
		k = TY_UNK;
	}
	int a = x->rank >= 0 ? norm_axis(g_attr_i(n, "axis", -1), x->rank) : -1;
	if (a < 0)
		s_rank(&s, x->rank);
	else
		s.dim[a] = k >= 0 ? k : -1;
	put(w, 0, &s);
	if (n->n_output > 1) {
		s.elem = DT_INT64;
		put(w, 1, &s);
	}
	return 1;
}

static int reduce_axes_from(const Node *n)
{
	return g_is(n, "ReduceSum") ? 13 : 18;
}

static int r_reduce(W *w, Graph *g, Node *n, S *o)
{
	const Ty *x = IN(0);
	o->elem = x->elem;
	int arg = g_is(n, "ArgMax") || g_is(n, "ArgMin");
	if (arg)
		o->elem = DT_INT64;
	if (x->rank < 0)
		return 0;
	int keep = (int)g_attr_i(n, "keepdims", 1) != 0;
	int64_t ax[TY_MAXRANK];
	int kn = 1, k;
	if (arg) {
		ax[0] = g_attr_i(n, "axis", 0);
		k = 1;
	} else {
		k = axes_of(w, g, n, reduce_axes_from(n), 1, ax, &kn);
	}
	int noop = w->opset >= reduce_axes_from(n) && g_attr_i(n, "noop_with_empty_axes", 0);
	if (k == -1 || (!kn && !keep)) {
		if (k >= 0 && !keep)
			s_rank(o, x->rank - k);
		else if (keep)
			s_rank(o, x->rank);
		return 0;
	}
	if (!kn) { /* kept rank; a dimension of 1 stays 1 */
		s_rank(o, x->rank);
		for (int i = 0; i < x->rank; i++)
			o->dim[i] = x->dim[i] == 1 ? 1 : -1;
		return 0;
	}
	int mark[TY_MAXRANK] = { 0 };
	if (k <= 0) {
		if (noop) {
			s_of(o, x);
			o->hv = 0;
			return 0;
		}
		for (int i = 0; i < x->rank; i++)
			mark[i] = 1;
	} else {
		for (int i = 0; i < k; i++) {
			int a = norm_axis(ax[i], x->rank);
			if (a < 0)
				return 0;
			mark[a] = 1;
		}
	}
	int r = 0;
	for (int i = 0; i < x->rank; i++)
		if (!mark[i])
			o->dim[r++] = x->dim[i];
		else if (keep)
			o->dim[r++] = 1;
	o->rank = r;
	return 0;
}

/* Output size of a sliding window along one axis; -1 unknown (also when
 * hostile attributes would overflow). */
static int64_t window(int64_t in, int64_t k, int64_t s, int64_t d, int64_t pb, int64_t pe, int pad, int ceil_mode)
{
	int64_t ek, span;
	if (in < 0 || k < 1 || s < 1 || d < 1 || pb < 0 || pe < 0 || __builtin_mul_overflow(k - 1, d, &ek) || ek == INT64_MAX)
		return -1;
	ek++;
	if (pad == PAD_SAME)
		return in / s + (in % s != 0);
	if (pad == PAD_VALID)
		return in >= ek ? (in - ek) / s + 1 : -1;
	if (__builtin_add_overflow(in, pb, &span) || __builtin_add_overflow(span, pe, &span))
		return -1;
	span -= ek;
	if (span < 0)
		return -1;
	/* ceil_mode differs between runtimes when the last window starts
	 * in the padding: known only when floor and ceil agree. */
	if (ceil_mode && span % s)
		return -1;
	return span / s + 1;
}

/* Conv, ConvTranspose and the pools: [N, C, spatial...]. */
static int r_window(W *w, Graph *g, Node *n, S *o)
{
	const Ty *x = IN(0), *wt = IN(1);
	int conv = g_is(n, "Conv") || g_is(n, "ConvTranspose");
	int tr = g_is(n, "ConvTranspose");
	o->elem = x->elem ? x->elem : conv ? wt->elem : 0;
	int r = x->rank >= 0 ? x->rank : conv ? wt->rank : -1;
	if (r < 2)
		return 0;
	s_rank(o, r);
	int sp = r - 2;
	o->dim[0] = x->rank >= 0 ? x->dim[0] : -1;
	/* Channels out: the input's for pools, the weight's for Conv
	 * ([M, C/group, k...]) and ConvTranspose ([C, M/group, k...]). */
	int64_t grp = g_attr_i(n, "group", 1), cout = -1;
	if (!conv)
		cout = x->rank >= 0 ? x->dim[1] : -1;
	else if (wt->rank == r && !tr)
		cout = wt->dim[0];
	else if (wt->rank == r && wt->dim[1] >= 0 && grp >= 1 && __builtin_mul_overflow(wt->dim[1], grp, &cout))
		cout = -1;
	o->dim[1] = cout;
	if (g_is(n, "GlobalAveragePool") || g_is(n, "GlobalMaxPool") || g_is(n, "GlobalLpPool")) {
		for (int i = 0; i < sp; i++)
			o->dim[2 + i] = 1;
		return 0;
	}
	int64_t ks[TY_MAXRANK], st[TY_MAXRANK], dl[TY_MAXRANK], pd[2 * TY_MAXRANK], op[TY_MAXRANK], os[TY_MAXRANK];
	if (attr_ints(n, "kernel_shape", ks, TY_MAXRANK) != sp) {
		if (!conv || wt->rank != r)
			return 0;
		for (int i = 0; i < sp; i++)
			ks[i] = wt->dim[2 + i];
	}
	int kst = attr_ints(n, "strides", st, TY_MAXRANK), kdl = attr_ints(n, "dilations", dl, TY_MAXRANK);
	int kpd = attr_ints(n, "pads", pd, 2 * TY_MAXRANK), kop = attr_ints(n, "output_padding", op, TY_MAXRANK);
	if ((kst >= 0 && kst != sp) || (kdl >= 0 && kdl != sp) || (kpd >= 0 && kpd != 2 * sp) || (kop >= 0 && kop != sp))
		return 0;
	int ceil_mode = (int)g_attr_i(n, "ceil_mode", 0);
	if (tr && attr_ints(n, "output_shape", os, TY_MAXRANK) == sp) {
		for (int i = 0; i < sp; i++)
			o->dim[2 + i] = os[i];
		return 0;
	}
	if (x->rank < 0)
		return 0;
	int pad = auto_pad(n);
	for (int i = 0; i < sp; i++) {
		int64_t in = x->dim[2 + i], s = kst >= 0 ? st[i] : 1, d = kdl >= 0 ? dl[i] : 1;
		int64_t pb = kpd >= 0 ? pd[i] : 0, pe = kpd >= 0 ? pd[sp + i] : 0;
		if (!tr) {
			o->dim[2 + i] = window(in, ks[i], s, d, pb, pe, pad, ceil_mode);
			continue;
		}
		int64_t opad = kop >= 0 ? op[i] : 0;
		if (in < 0 || ks[i] < 1 || s < 1 || d < 1 || opad < 0) {
			o->dim[2 + i] = -1;
		} else if (pad == PAD_SAME) {
			o->dim[2 + i] = __builtin_mul_overflow(in, s, &o->dim[2 + i]) ? -1 : o->dim[2 + i];
		} else {
			if (pad == PAD_VALID)
				pb = pe = 0;
			/* s * (in - 1) + output_padding + (k - 1) * d + 1 - pads */
			int64_t v, ek;
			int bad = in < 1 || pb < 0 || pe < 0 || __builtin_mul_overflow(s, in - 1, &v) ||
				  __builtin_mul_overflow(ks[i] - 1, d, &ek) || __builtin_add_overflow(v, ek, &v) ||
				  __builtin_add_overflow(v, opad + 1, &v);
			v = bad ? -1 : v - pb - pe;
			o->dim[2 + i] = v >= 0 ? v : -1;
		}
	}
	return 0;
}

static int r_pool(W *w, Graph *g, Node *n, S *o)
{
	r_window(w, g, n, o);
	put(w, 0, o);
	if (n->n_output > 1 && g_is(n, "MaxPool")) {
		S idx = *o;
		idx.elem = DT_INT64;
		put(w, 1, &idx);
	}
	return 1;
}

/* Broadcast of two dim lists, right-aligned (MatMul batch dims). */
static int bdims(int64_t *out, const int64_t *a, int ra, const int64_t *b, int rb)
{
	Ty ta = { 0, 0, ra, a, NULL, 0 }, tb = { 0, 0, rb, b, NULL, 0 };
	const Ty *p[2] = { &ta, &tb };
	S s;
	bcast(&s, p, 2);
	memcpy(out, s.dim, (size_t)s.rank * sizeof *out);
	return s.rank;
}

static int r_matmul(W *w, Graph *g, Node *n, S *o)
{
	const Ty *a = IN(0), *b = IN(1);
	o->elem = a->elem ? a->elem : b->elem;
	if (a->rank < 1 || b->rank < 1)
		return 0;
	if (a->rank == 1 && b->rank == 1) {
		s_rank(o, 0);
		return 0;
	}
	if (a->rank == 1) {
		s_rank(o, b->rank - 1);
		for (int i = 0; i < b->rank - 2; i++)
			o->dim[i] = b->dim[i];
		o->dim[b->rank - 2] = b->dim[b->rank - 1];
		return 0;
	}
	if (b->rank == 1) {
		s_rank(o, a->rank - 1);
		for (int i = 0; i < a->rank - 1; i++)
			o->dim[i] = a->dim[i];
		return 0;
	}
	int64_t bd[TY_MAXRANK];
	int r = bdims(bd, a->dim, a->rank - 2, b->dim, b->rank - 2);
	s_rank(o, r + 2);
	if (o->rank < 0)
		return 0;
	memcpy(o->dim, bd, (size_t)r * sizeof *bd);
	o->dim[r] = a->dim[a->rank - 2];
	o->dim[r + 1] = b->dim[b->rank - 1];
	return 0;
}

static int r_gemm(W *w, Graph *g, Node *n, S *o)
{
	const Ty *a = IN(0), *b = IN(1);
	o->elem = a->elem ? a->elem : b->elem;
	s_rank(o, 2);
	int ta = g_attr_i(n, "transA", 0) != 0, tb = g_attr_i(n, "transB", 0) != 0;
	if (a->rank == 2)
		o->dim[0] = a->dim[ta ? 1 : 0];
	if (b->rank == 2)
		o->dim[1] = b->dim[tb ? 0 : 1];
	return 0;
}

static int r_norm(W *w, Graph *g, Node *n, S *o)
{
	const Ty *x = IN(0);
	s_of(o, x);
	o->hv = 0;
	put(w, 0, o);
	/* LayerNormalization's Mean and InvStdDev: reduced from axis on. */
	if (g_is(n, "LayerNormalization") && x->rank >= 0) {
		int a = norm_axis(g_attr_i(n, "axis", -1), x->rank);
		S m;
		s_of(&m, x);
		m.hv = 0;
		m.elem = 0; /* stash_type's: not the input's in general */
		for (int i = a < 0 ? 0 : a; i < x->rank; i++)
			m.dim[i] = a < 0 ? -1 : 1;
		for (size_t i = 1; i < n->n_output && i < 3; i++)
			put(w, i, &m);
	}
	if (g_is(n, "Dropout") && n->n_output > 1 && w->opset >= 10) {
		S m = *o;
		m.elem = DT_BOOL;
		put(w, 1, &m);
	}
	return 1;
}

static int r_resize(W *w, Graph *g, Node *n, S *o)
{
	const Ty *x = IN(0);
	o->elem = x->elem;
	if (x->rank < 0)
		return 0;
	s_rank(o, x->rank);
	int64_t ax[TY_MAXRANK];
	int na = w->opset >= 18 ? attr_ints(n, "axes", ax, TY_MAXRANK) : -1;
	if (na < 0)
		for (na = 0; na < x->rank; na++)
			ax[na] = na;
	for (int i = 0; i < na; i++)
		if (norm_axis(ax[i], x->rank) < 0)
			return 0;
	int64_t sz[TY_MAXRANK];
	double sc[TY_MAXRANK];
	size_t si = 1;
	int ks = -1;
	if (g_is(n, "Upsample")) {
		const Onnx__AttributeProto *a = g_attr(n, "scales");
		if (a && a->n_floats <= TY_MAXRANK) {
			ks = (int)a->n_floats;
			for (int i = 0; i < ks; i++)
				sc[i] = a->floats[i];
		} else if (has_in(n, 1)) {
			ks = const_floats(g, n->input[1], sc, TY_MAXRANK);
		}
	} else {
		if (w->opset >= 11 && has_in(n, 3) && vals(IN(3), sz, TY_MAXRANK) == na) {
			for (int i = 0; i < na; i++)
				o->dim[norm_axis(ax[i], x->rank)] = sz[i];
			for (int i = 0; i < x->rank; i++) {
				int touched = 0;
				for (int j = 0; j < na; j++)
					touched |= norm_axis(ax[j], x->rank) == i;
				if (!touched)
					o->dim[i] = x->dim[i];
			}
			return 0;
		}
		si = w->opset >= 11 ? 2 : 1;
		if (has_in(n, si))
			ks = const_floats(g, n->input[si], sc, TY_MAXRANK);
	}
	if (ks != na)
		return 0;
	for (int i = 0; i < x->rank; i++)
		o->dim[i] = x->dim[i];
	/* floor(in * scale), known when the product is exact in any precision. */
	for (int i = 0; i < na; i++) {
		int a = norm_axis(ax[i], x->rank);
		double p = (double)x->dim[a] * sc[i];
		o->dim[a] = x->dim[a] >= 0 && x->dim[a] < (1 << 24) && p >= 0 && p < 9e15 && p == floor(p) ? (int64_t)p : -1;
	}
	return 0;
}

static int r_pad(W *w, Graph *g, Node *n, S *o)
{
	const Ty *x = IN(0);
	s_of(o, x);
	o->hv = 0;
	if (x->rank < 0)
		return 0;
	int64_t pd[2 * TY_MAXRANK], ax[TY_MAXRANK];
	int k = w->opset < 11 ? attr_ints(n, w->opset < 2 ? "paddings" : "pads", pd, 2 * TY_MAXRANK)
	                      : vals(IN(1), pd, 2 * TY_MAXRANK);
	int na = x->rank;
	for (int i = 0; i < na; i++)
		ax[i] = i;
	if (w->opset >= 18 && has_in(n, 3))
		na = vals(IN(3), ax, TY_MAXRANK);
	if (k < 0 || na < 0 || k != 2 * na) {
		s_rank(o, x->rank);
		return 0;
	}
	for (int i = 0; i < na; i++) {
		int a = norm_axis(ax[i], x->rank);
		if (a < 0) {
			s_rank(o, x->rank);
			return 0;
		}
		int64_t v;
		if (o->dim[a] >= 0 && !__builtin_add_overflow(o->dim[a], pd[i], &v) &&
		    !__builtin_add_overflow(v, pd[na + i], &v) && v >= 0)
			o->dim[a] = v;
		else
			o->dim[a] = -1;
	}
	return 0;
}

static int r_space(W *w, Graph *g, Node *n, S *o)
{
	const Ty *x = IN(0);
	o->elem = x->elem;
	if (x->rank != 4)
		return 0;
	s_of(o, x);
	o->hv = 0;
	int64_t b = g_attr_i(n, "blocksize", 0), bb;
	if (b < 1 || __builtin_mul_overflow(b, b, &bb)) {
		s_rank(o, 4);
		return 0;
	}
	int d2s = g_is(n, "DepthToSpace");
	for (int i = 1; i < 4; i++) {
		int64_t d = x->dim[i], m = i == 1 ? bb : b;
		if (d < 0)
			continue;
		if ((i == 1) == d2s)
			o->dim[i] = d % m == 0 ? d / m : -1;
		else
			o->dim[i] = __builtin_mul_overflow(d, m, &o->dim[i]) ? -1 : o->dim[i];
	}
	return 0;
}

static int r_onehot(W *w, Graph *g, Node *n, S *o)
{
	const Ty *ix = IN(0);
	o->elem = IN(2)->elem;
	if (ix->rank < 0)
		return 0;
	s_rank(o, ix->rank + 1);
	if (o->rank < 0)
		return 0;
	int64_t a = g_attr_i(n, "axis", -1);
	if (a < 0)
		a += o->rank;
	if (a < 0 || a >= o->rank)
		return 0;
	int64_t depth;
	for (int j = 0, q = 0; j < o->rank; j++)
		o->dim[j] = j == a ? (vals(IN(1), &depth, 1) == 1 && depth >= 0 ? depth : -1) : ix->dim[q++];
	return 0;
}

/* Einsum, explicit or implicit, without ellipsis. */
static int r_einsum(W *w, Graph *g, Node *n, S *o)
{
	const Onnx__AttributeProto *a = g_attr(n, "equation");
	o->elem = IN(0)->elem;
	if (!a || !a->has_s || a->s.len > 256 || memchr(a->s.data, '.', a->s.len))
		return 0;
	char eq[257];
	size_t m = 0;
	for (size_t i = 0; i < a->s.len; i++)
		if (a->s.data[i] != ' ')
			eq[m++] = (char)a->s.data[i];
	eq[m] = 0;
	int64_t dim[128];
	int cnt[128] = { 0 };
	for (int i = 0; i < 128; i++)
		dim[i] = -1;
	char *arrow = strstr(eq, "->");
	size_t lhs = arrow ? (size_t)(arrow - eq) : m;
	size_t op = 0;
	int pos = 0;
	for (size_t i = 0; i <= lhs; i++) {
		if (i == lhs || eq[i] == ',') {
			const Ty *t = IN(op);
			if (op >= n->n_input || (t->rank >= 0 && t->rank != pos))
				return 0;
			op++;
			pos = 0;
			continue;
		}
		unsigned char c = (unsigned char)eq[i];
		if (c >= 128 || !((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')))
			return 0;
		const Ty *t = IN(op);
		cnt[c]++;
		if (t->rank > pos && t->dim[pos] >= 0 && t->dim[pos] != 1)
			dim[c] = t->dim[pos];
		else if (t->rank > pos && t->dim[pos] == 1 && dim[c] < 0)
			dim[c] = 1;
		pos++;
	}
	if (op != n->n_input)
		return 0;
	int r = 0;
	if (arrow) {
		for (const char *p = arrow + 2; *p; p++) {
			unsigned char c = (unsigned char)*p;
			if (c >= 128 || !cnt[c])
				return 0;
			o->dim[r++] = dim[c];
		}
	} else {
		for (int c = 'A'; c <= 'z'; c++)
			if (cnt[c] == 1)
				o->dim[r++] = dim[c];
	}
	o->rank = r;
	return 0;
}

/* ---- control flow ---- */

static void walk(W *w, Graph *g);
static void seed(W *w, Graph *g);
static void run(W *w, Graph *g);

/* The Ty of a body's output i (seed() resolved outputs naming outer
 * values). */
static const Ty *body_out(const Graph *b, size_t i)
{
	Val *v = i < b->gp->n_output ? map_get(&b->val, b->gp->output[i]->name) : NULL;
	return v && v->ty ? v->ty : &UNKNOWN;
}

static Graph *body(Graph **subs, size_t ns, const Node *n, const char *attr)
{
	const Onnx__AttributeProto *a = g_attr(n, attr);
	for (size_t i = 0; a && a->g && i < ns; i++)
		if (subs[i]->gp == a->g)
			return subs[i];
	return NULL;
}

/* If, Loop, Scan: rules that store their outputs (1), bodies from w->cur. */
static int r_if(W *w, Graph *g, Node *n, S *o)
{
	(void)o;
	Graph **subs = w->cur->subs;
	size_t ns = w->cur->ns;
	Graph *th = body(subs, ns, n, "then_branch"), *el = body(subs, ns, n, "else_branch");
	for (size_t i = 0; i < ns; i++)
		walk(w, subs[i]);
	int64_t c;
	int known = g_ty_val(g, n->n_input ? n->input[0] : "", 0, &c);
	for (size_t i = 0; i < n->n_output; i++) {
		S s;
		s_unk(&s);
		if (th && el) {
			const Ty *a = body_out(th, i), *b = body_out(el, i);
			/* A known condition picks its branch. */
			if (known)
				s_of(&s, c ? a : b);
			else
				s_join(&s, a, b);
		}
		put(w, i, &s);
	}
	return 1;
}

/* Loop: inputs (M, cond, v...), body inputs (iter, cond, v...), body
 * outputs (cond, v..., scan...), node outputs (v..., scan...). */
static int r_loop(W *w, Graph *g, Node *n, S *o)
{
	(void)o;
	Graph **subs = w->cur->subs;
	size_t ns = w->cur->ns;
	Graph *b = body(subs, ns, n, "body");
	for (size_t i = 0; i < ns; i++) {
		if (subs[i] != b) {
			walk(w, subs[i]);
			continue;
		}
		seed(w, b);
		Onnx__GraphProto *bp = b->gp;
		for (size_t k = 0; k < bp->n_input; k++) {
			S s;
			s_unk(&s);
			if (k == 0) {
				s.elem = DT_INT64;
				s.rank = 0;
			} else if (k == 1) {
				s.elem = DT_BOOL;
				s.rank = 0;
			} else {
				/* A carried value's shape may change between iterations. */
				s.elem = IN(k)->elem;
			}
			put_name(w, b, bp->input[k]->name, &s);
		}
		run(w, b);
	}
	size_t nc = n->n_input >= 2 ? n->n_input - 2 : 0;
	for (size_t i = 0; i < n->n_output; i++) {
		S s;
		s_unk(&s);
		if (b && i < nc) {
			s_join(&s, IN(2 + i), body_out(b, 1 + i));
		} else if (b) {
			const Ty *t = body_out(b, 1 + i);
			s.elem = t->elem;
			if (t->rank >= 0) {
				s_rank(&s, t->rank + 1);
				for (int k = 0; k < t->rank && s.rank > 0; k++)
					s.dim[k + 1] = t->dim[k];
			}
		}
		put(w, i, &s);
	}
	return 1;
}

/* Scan (opset 9+): inputs (state..., scan...), body inputs (state...,
 * slices...), outputs (state..., stacked...). */
static int r_scan(W *w, Graph *g, Node *n, S *o)
{
	(void)o;
	Graph **subs = w->cur->subs;
	size_t ns = w->cur->ns;
	Graph *b = body(subs, ns, n, "body");
	int64_t m = g_attr_i(n, "num_scan_inputs", -1);
	int ok = w->opset >= 9 && b && m >= 0 && (size_t)m <= n->n_input;
	size_t nst = ok ? n->n_input - (size_t)m : 0;
	for (size_t i = 0; i < ns; i++) {
		if (subs[i] != b || !ok) {
			walk(w, subs[i]);
			continue;
		}
		seed(w, b);
		Onnx__GraphProto *bp = b->gp;
		for (size_t k = 0; k < bp->n_input && k < n->n_input; k++) {
			S s;
			s_unk(&s);
			s.elem = IN(k)->elem;
			put_name(w, b, bp->input[k]->name, &s);
		}
		run(w, b);
	}
	for (size_t i = 0; i < n->n_output; i++) {
		S s;
		s_unk(&s);
		if (ok && i < nst) {
			s_join(&s, IN(i), body_out(b, i));
		} else if (ok) {
			const Ty *t = body_out(b, i);
			s.elem = t->elem;
			s_rank(&s, t->rank >= 0 ? t->rank + 1 : -1);
		}
		put(w, i, &s);
	}
	return 1;
}

/* ---- dispatch ---- */

typedef struct {
	const char *op;
	Rule r;
} RuleEnt;

static const RuleEnt RULES[] = {
	{ "Abs", r_unary_val }, { "Acos", r_same }, { "Acosh", r_same }, { "Add", r_binary },
	{ "And", r_binary }, { "ArgMax", r_reduce }, { "ArgMin", r_reduce }, { "Asin", r_same },
	{ "Asinh", r_same }, { "Atan", r_same }, { "Atanh", r_same }, { "AveragePool", r_window },
	{ "BatchNormalization", r_norm }, { "BitShift", r_binary }, { "Cast", r_cast },
	{ "CastLike", r_cast }, { "Ceil", r_same }, { "Celu", r_same }, { "Clip", r_same },
	{ "Concat", r_concat }, { "Constant", r_constant }, { "ConstantOfShape", r_constant_of_shape },
	{ "Conv", r_window }, { "ConvTranspose", r_window }, { "Cos", r_same }, { "Cosh", r_same },
	{ "CumSum", r_same }, { "DepthToSpace", r_space }, { "Div", r_binary }, { "Dropout", r_norm },
	{ "Einsum", r_einsum }, { "Elu", r_same }, { "Equal", r_binary }, { "Erf", r_same },
	{ "Exp", r_same }, { "Expand", r_expand }, { "Flatten", r_flatten }, { "Floor", r_same },
	{ "Gather", r_gather }, { "GatherElements", r_gather_elements }, { "GatherND", r_gather_nd },
	{ "Gelu", r_same }, { "Gemm", r_gemm }, { "GlobalAveragePool", r_window },
	{ "GlobalLpPool", r_window }, { "GlobalMaxPool", r_window }, { "Greater", r_binary },
	{ "GreaterOrEqual", r_binary }, { "GroupNormalization", r_norm }, { "HardSigmoid", r_same },
	{ "HardSwish", r_same }, { "Hardmax", r_same }, { "Identity", r_identity },
	{ "InstanceNormalization", r_norm }, { "IsInf", r_bool_same }, { "IsNaN", r_bool_same },
	{ "LRN", r_same }, { "LayerNormalization", r_norm }, { "LeakyRelu", r_same },
	{ "Less", r_binary }, { "LessOrEqual", r_binary }, { "Log", r_same }, { "LogSoftmax", r_same },
	{ "LpNormalization", r_same }, { "LpPool", r_window }, { "MatMul", r_matmul },
	{ "Max", r_variadic }, { "MaxPool", r_pool }, { "Mean", r_variadic },
	{ "MeanVarianceNormalization", r_same }, { "Min", r_variadic }, { "Mish", r_same },
	{ "Mod", r_binary }, { "Mul", r_binary }, { "Neg", r_unary_val }, { "NonZero", r_nonzero },
	{ "Not", r_unary_val }, { "OneHot", r_onehot }, { "Or", r_binary }, { "PRelu", r_binary },
	{ "Pad", r_pad }, { "Pow", r_binary }, { "Range", r_range }, { "Reciprocal", r_same },
	{ "ReduceL1", r_reduce }, { "ReduceL2", r_reduce }, { "ReduceLogSum", r_reduce },
	{ "ReduceLogSumExp", r_reduce }, { "ReduceMax", r_reduce }, { "ReduceMean", r_reduce },
	{ "ReduceMin", r_reduce }, { "ReduceProd", r_reduce }, { "ReduceSum", r_reduce },
	{ "ReduceSumSquare", r_reduce }, { "Relu", r_same }, { "Reshape", r_reshape },
	{ "Resize", r_resize }, { "Round", r_same }, { "Scatter", r_same }, { "ScatterElements", r_same },
	{ "ScatterND", r_same }, { "Selu", r_same }, { "Shape", r_shape }, { "Shrink", r_same },
	{ "Sigmoid", r_same }, { "Sign", r_same }, { "Sin", r_same }, { "Sinh", r_same },
	{ "Size", r_size }, { "Slice", r_slice }, { "Softmax", r_same }, { "Softplus", r_same },
	{ "Softsign", r_same }, { "SpaceToDepth", r_space }, { "Split", r_split }, { "Sqrt", r_same },
	{ "Squeeze", r_squeeze }, { "Sub", r_binary }, { "Sum", r_variadic }, { "Tan", r_same },
	{ "Tanh", r_same }, { "ThresholdedRelu", r_same }, { "Tile", r_tile }, { "TopK", r_topk },
	{ "Transpose", r_transpose }, { "Trilu", r_same }, { "Unsqueeze", r_unsqueeze },
	{ "Upsample", r_resize }, { "Where", r_where }, { "Xor", r_binary },
	{ "If", r_if }, { "Loop", r_loop }, { "Scan", r_scan },
};

static OpIndex RULE_IX = OP_INDEX(RULES);

static Rule rule_of(const Node *n)
{
	if (!model_default_domain(n->domain))
		return NULL;
	const RuleEnt *p = g_op_entry(&RULE_IX, n->op_type);
	return p ? p->r : NULL;
}

/* k: n's index entry (NULL: looked up). */
static void infer_node(W *w, Graph *g, Node *n, NodeInfo *k, Val **out, Graph **subs, size_t ns)
{
	const Ty *fixed[8], **in = n->n_input <= 8 ? fixed : arena_alloc(w->tmp, n->n_input * sizeof *in);
	for (size_t i = 0; i < n->n_input; i++) {
		const Val *v = k ? g_in(k, i) : g_input(w->c, n, i);
		in[i] = v && v->ty ? v->ty : &UNKNOWN;
	}
	Cur cur = { in, n->n_input, out, n->n_output, subs, ns };
	/* Bodies walked by the rules set their nodes' own; this one is back
	 * in place when they return. */
	const Cur *saved = w->cur;
	w->cur = &cur;
	/* Control flow walks its bodies itself, seeded from the node's
	 * inputs; other ops' bodies are walked first, on their own values. */
	Rule r = rule_of(n);
	int flow = r == r_if || r == r_loop || r == r_scan;
	for (size_t i = 0; !flow && i < ns; i++)
		walk(w, subs[i]);
	if (r && (flow || n->n_output)) {
		S o;
		s_unk(&o);
		if (!r(w, g, n, &o))
			put(w, 0, &o);
	}
	w->cur = saved;
}

/* ---- the walk ---- */

static void seed_vi(W *w, Graph *g, const Onnx__ValueInfoProto *vi)
{
	Val *v = map_get(&g->val, vi->name);
	if (!v || v->ty || !vi->type || vi->type->value_case != ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE)
		return;
	const Onnx__TypeProto__Tensor *tt = vi->type->tensor_type;
	S s;
	s_unk(&s);
	s.elem = tt->has_elem_type && tt->elem_type > 0 ? tt->elem_type : 0;
	if (tt->shape) {
		s_rank(&s, (int64_t)tt->shape->n_dim);
		for (int i = 0; i < s.rank; i++) {
			const Onnx__TensorShapeProto__Dimension *d = tt->shape->dim[i];
			if (d->value_case == ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE && d->dim_value >= 0)
				s.dim[i] = d->dim_value;
		}
	}
	v->ty = intern(w, &s, s.elem);
}

/* What the graph declares, and its initializers. */
static void seed(W *w, Graph *g)
{
	Onnx__GraphProto *gp = g->gp;
	for (size_t i = 0; i < gp->n_input; i++)
		seed_vi(w, g, gp->input[i]);
	for (size_t i = 0; i < gp->n_output; i++)
		seed_vi(w, g, gp->output[i]);
	for (size_t i = 0; i < gp->n_value_info; i++)
		seed_vi(w, g, gp->value_info[i]);
	/* A body output naming an outer value has a Val of its own in the
	 * body (the index makes one per output), which hides the outer one
	 * from the body's nodes: it carries the outer value's type. */
	for (size_t i = 0; g->parent && i < gp->n_output; i++) {
		Val *v = map_get(&g->val, gp->output[i]->name);
		const Ty *o = v && !v->def && !v->init && !v->isin ? g_ty(g->parent, v->name) : NULL;
		if (o) {
			S s;
			s_of(&s, o);
			put_val(w, v, &s);
		}
	}
	for (size_t i = 0; i < gp->n_initializer; i++) {
		Tensor *t = gp->initializer[i];
		Val *v = g_init_at(g, i);
		if (!v || v->init != t)
			continue;
		S s;
		/* A main-graph initializer that is also an input is a default
		 * the caller may replace: its values are not known. */
		s_tensor(&s, t, v->isin && !g->parent);
		put_val(w, v, &s);
	}
}

/* The nodes in dependency order: node order, except that a node waits
 * for producers placed after it (a pass appends new nodes at the end). */
static void run(W *w, Graph *g)
{
	Onnx__GraphProto *gp = g->gp;
	size_t n = gp->n_node;
	if (n) {
		/* Each node's index entry, its position made current (uses and
		 * bodies then give positions without a lookup), and its output
		 * Vals, looked up once: ov[off[i] ...]. */
		NodeInfo **ks = arena_alloc(w->tmp, n * sizeof *ks);
		size_t *off = arena_alloc(w->tmp, (n + 1) * sizeof *off);
		for (size_t i = 0; i < n; i++) {
			if ((ks[i] = g_node_at(w->c, g, i)))
				ks[i]->pos = i;
			off[i + 1] = off[i] + gp->node[i]->n_output;
		}
		/* Position + 1 of a node of this graph, 0 for any other. */
#define POS(k) ((k) && (k)->g == g && (k)->pos < n && ks[(k)->pos] == (k) ? (k)->pos + 1 : 0)
		Val **ov = arena_alloc(w->tmp, (off[n] + 1) * sizeof *ov);
		for (size_t i = 0; i < n; i++) {
			Node *nd = gp->node[i];
			for (size_t j = 0; j < nd->n_output; j++) {
				Val *v = ks[i] && j < ks[i]->nout && ks[i]->out[j] ? ks[i]->out[j] : g_output(w->c, nd, j);
				ov[off[i] + j] = v && v->def == nd && v->g == g ? v : NULL;
			}
		}
		size_t *first = arena_alloc(w->tmp, n * sizeof *first);
		for (size_t i = 0; i < n; i++)
			first[i] = SIZE_MAX;
		for (size_t k = g->nsub; k-- > 0;) {
			NodeInfo *ok = g_info(w->c, g->sub[k]->owner);
			size_t p = POS(ok);
			if (p)
				first[p - 1] = k;
		}
		/* A sorted graph's order is a dependency order already: no edges
		 * to count (a walk of every use list, a third of inference). */
		int sorted = g_is_sorted(w->c, g);
		uint32_t *deg = sorted ? NULL : arena_alloc(w->tmp, n * sizeof *deg);
		size_t *stack = arena_alloc(w->tmp, n * sizeof *stack);
		unsigned char *done = arena_alloc(w->tmp, n);
		/* Edges: each use, within this graph, of a value a node here makes
		 * (uses by bodies count as uses by their owner). */
		for (size_t q = 0; !sorted && q < off[n]; q++) {
			Val *v = ov[q];
			for (size_t u = 0; v && u < v->nuse; u++) {
				size_t p = v->use[u].g == g ? POS(v->use[u].k) : 0;
				if (p)
					deg[p - 1]++;
			}
		}
		size_t sp = 0;
		for (size_t i = 0; i < n; i++) {
			if (done[i] || (!sorted && deg[i]))
				continue;
			stack[sp++] = i;
			while (sp) {
				size_t k = stack[--sp];
				if (done[k])
					continue;
				done[k] = 1;
				Node *nd = gp->node[k];
				size_t s0 = first[k], s1 = s0;
				if (s0 != SIZE_MAX)
					while (s1 < g->nsub && g->sub[s1]->owner == nd)
						s1++;
				infer_node(w, g, nd, ks[k], ov + off[k], s0 != SIZE_MAX ? g->sub + s0 : NULL, s0 != SIZE_MAX ? s1 - s0 : 0);
				for (size_t q = off[k]; !sorted && q < off[k + 1]; q++) {
					Val *v = ov[q];
					for (size_t u = 0; v && u < v->nuse; u++) {
						size_t p = v->use[u].g == g ? POS(v->use[u].k) : 0;
						/* Later nodes are reached by the outer loop. */
						if (p && --deg[p - 1] == 0 && p - 1 < i)
							stack[sp++] = p - 1;
					}
				}
			}
		}
#undef POS
	}
}

static void walk(W *w, Graph *g)
{
	seed(w, g);
	run(w, g);
}

int g_infer(Ctx *c, Err *e)
{
	if (!c->g || !c->ia)
		return errf(e, "inference: the model has no index; call g_reindex first");
	W w = { .c = c, .tmp = arena_new(), .opset = c->opset };
	pmap_init(&w.types, w.tmp, 256);
	walk(&w, c->g);
	arena_free(w.tmp);
	c->inferred = 1;
	return 0;
}
