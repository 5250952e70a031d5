/* Static dimensions of values from initializers, declared shapes and the
 * shape rules of the ops detection-style models use between their input
 * and an MoE layer (convolutions, pooling, elementwise, concatenation,
 * resizing, reshaping). What a rule cannot tell stays unknown (-1): the
 * callers decide with what is known (a static batch, a spatial size for a
 * FLOP count) and fall back where it is not. To be replaced by the shape
 * inference of src/infer.c.
 *
 * Results are memoised by value name in a map the caller keeps: the walk
 * back from a late layer then stops at what earlier layers' queries left,
 * and it is iterative, so a graph's depth does not reach the C stack. */
#include <math.h>
#include <string.h>

#include "moe.h"

typedef struct {
	int rank; /* -1: unknown */
	int64_t d[DIMS_MAX];
} Dims;

static const Dims UNKNOWN = { -1, { 0 } };

/* Sizes past this are taken as unknown, and attributes and constants a rule
 * computes with are bounded likewise: every sum and product below stays far
 * inside int64_t, whatever a hostile model declares. */
#define DLIM ((int64_t)1 << 40)
#define ALIM ((int64_t)1 << 30)

static int64_t known(int64_t d)
{
	return d < 0 || d > DLIM ? -1 : d;
}

/* a * b, -1 when either is unknown or the product passes DLIM. */
static int64_t mul(int64_t a, int64_t b)
{
	if (a < 0 || b < 0)
		return -1;
	return b && a > DLIM / b ? -1 : a * b;
}

static int bounded(const int64_t *v, long n, int64_t lo, int64_t hi)
{
	for (long i = 0; i < n; i++)
		if (v[i] < lo || v[i] > hi)
			return 0;
	return 1;
}

static Dims unknown_rank(int r)
{
	Dims o = { r < 0 || r > DIMS_MAX ? -1 : r, { 0 } };
	for (int i = 0; i < DIMS_MAX; i++)
		o.d[i] = -1;
	return o;
}

static Dims of_tensor(const Tensor *t)
{
	if (t->n_dims > DIMS_MAX)
		return UNKNOWN;
	Dims o = { (int)t->n_dims, { 0 } };
	for (size_t i = 0; i < t->n_dims; i++)
		o.d[i] = known(t->dims[i]);
	return o;
}

static Dims of_shape(const Onnx__TensorShapeProto *s)
{
	if (s->n_dim > DIMS_MAX)
		return UNKNOWN;
	Dims o = unknown_rank((int)s->n_dim);
	for (size_t i = 0; i < s->n_dim; i++)
		if (s->dim[i]->value_case == ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE)
			o.d[i] = known(s->dim[i]->dim_value);
	return o;
}

static const char *in(const Node *n, size_t i)
{
	return i < n->n_input ? n->input[i] : "";
}

static long ints(const Graph *g, const Node *n, size_t slot, const char *attr, int64_t *v, size_t max)
{
	if (attr) {
		const Onnx__AttributeProto *a = g_attr(n, attr);
		if (a) {
			if (a->n_ints > max)
				return -1;
			for (size_t i = 0; i < a->n_ints; i++)
				v[i] = a->ints[i];
			return (long)a->n_ints;
		}
	}
	if (slot < n->n_input && *n->input[slot])
		return g_const_ints(g, n->input[slot], v, max);
	return -2; /* absent */
}

/* A float constant's values (scales of Resize/Upsample). */
static long floats(const Graph *g, const char *name, double *v, size_t max)
{
	const Tensor *t = *name ? g_const(g, name) : NULL;
	size_t nb;
	const unsigned char *p = t ? g_tensor_data(t, &nb) : NULL;
	int64_t n = t ? g_tensor_numel(t) : -1;
	if (!p || n < 0 || (size_t)n > max)
		return -1;
	if (t->data_type == ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT && nb == (size_t)n * 4) {
		for (int64_t i = 0; i < n; i++) {
			float f;
			memcpy(&f, p + 4 * i, 4);
			v[i] = f;
		}
		return (long)n;
	}
	if (t->data_type == ONNX__TENSOR_PROTO__DATA_TYPE__DOUBLE && nb == (size_t)n * 8) {
		memcpy(v, p, nb);
		return (long)n;
	}
	return -1;
}

static int is_op(const Node *n, const char *const *ops)
{
	for (; *ops; ops++)
		if (g_is(n, *ops))
			return 1;
	return 0;
}

static const char *const SAME[] = { "Relu", "Sigmoid", "Tanh", "Cast", "CastLike", "Identity", "Clip", "LeakyRelu",
				    "HardSigmoid", "HardSwish", "Softmax", "LogSoftmax", "Exp", "Log", "Neg", "Sqrt",
				    "Abs", "Erf", "Elu", "Selu", "Celu", "Softplus", "Softsign", "Mish", "Gelu",
				    "Dropout", "BatchNormalization", "InstanceNormalization", "LpNormalization", "LRN",
				    "GroupNormalization", "LayerNormalization", "Floor", "Ceil", "Round",
				    "Reciprocal", "Not", "Sign", "Sin", "Cos", "ThresholdedRelu", "PRelu",
				    "QuantizeLinear", "DequantizeLinear", "IsNaN", "IsInf", "Hardmax", "Shrink",
				    "ScatterElements", "ScatterND", "Scatter", NULL };
static const char *const BCAST[] = { "Add", "Sub", "Mul", "Div", "Pow", "Max", "Min", "Sum", "Mean", "Where",
				     "Equal", "Greater", "GreaterOrEqual", "Less", "LessOrEqual", "And", "Or",
				     "Xor", "Mod", "BitShift", NULL };

/* Multidirectional broadcasting of the inputs' dims. */
static Dims broadcast(const Dims *const *v, size_t n)
{
	int r = 0;
	for (size_t i = 0; i < n; i++) {
		if (!v[i] || v[i]->rank < 0)
			return UNKNOWN;
		if (v[i]->rank > r)
			r = v[i]->rank;
	}
	Dims o = unknown_rank(r);
	for (int p = 0; p < r; p++) {
		int64_t big = -1;
		int known = 1, zero = 0;
		for (size_t i = 0; i < n; i++) {
			int q = p - (r - v[i]->rank);
			int64_t d = q < 0 ? 1 : v[i]->d[q];
			if (d < 0)
				known = 0;
			else if (d == 0)
				zero = 1;
			else if (d > 1)
				big = d;
		}
		o.d[p] = zero ? 0 : big > 0 ? big : known ? 1 : -1;
	}
	return o;
}

static int64_t norm_axis(int64_t a, int r)
{
	return a < 0 ? a + r : a;
}

/* Output size of a window (Conv, pooling) along one axis. */
static int64_t window(int64_t x, int64_t k, int64_t s, int64_t d, int64_t pb, int64_t pe, const char *autopad,
		      int ceil_mode)
{
	if (x < 0 || k <= 0 || k > ALIM || s <= 0 || s > ALIM || d <= 0 || d > ALIM || pb < 0 || pb > ALIM ||
	    pe < 0 || pe > ALIM)
		return -1;
	if (autopad && (!strcmp(autopad, "SAME_UPPER") || !strcmp(autopad, "SAME_LOWER")))
		return (x + s - 1) / s;
	int64_t ek = (k - 1) * d + 1;
	if (autopad && !strcmp(autopad, "VALID"))
		pb = pe = 0;
	int64_t num = x + pb + pe - ek;
	if (num < 0)
		return -1;
	int64_t o = (ceil_mode ? (num + s - 1) / s : num / s) + 1;
	/* The last window must start inside the input or left padding. */
	if (ceil_mode && (o - 1) * s >= x + pb)
		o--;
	return o;
}

static const char *autopad_of(Ctx *c, const Node *n)
{
	const Onnx__AttributeProto *a = g_attr(n, "auto_pad");
	if (!a || !a->has_s || !a->s.len)
		return NULL;
	return arena_printf(c->a, "%.*s", (int)a->s.len, (const char *)a->s.data);
}

/* Conv, ConvTranspose and the pools: spatial axes from the attributes. */
static Dims windowed(Ctx *c, const Graph *g, const Node *n, const Dims *x, const Dims *w)
{
	if (!x || x->rank < 3)
		return UNKNOWN;
	int sp = x->rank - 2;
	Dims o = unknown_rank(x->rank);
	o.d[0] = x->d[0];
	int64_t k[DIMS_MAX], s[DIMS_MAX], dl[DIMS_MAX], p[2 * DIMS_MAX];
	long nk = ints(g, n, 99, "kernel_shape", k, DIMS_MAX);
	if (g_is(n, "Conv") || g_is(n, "ConvTranspose")) {
		if (!w || w->rank != x->rank)
			return o;
		int64_t grp = g_attr_i(n, "group", 1);
		o.d[1] = g_is(n, "Conv") ? w->d[0] : mul(w->d[1], grp);
		if (nk < 0)
			for (int i = 0; i < sp; i++)
				k[i] = w->d[2 + i];
		nk = sp;
	} else if (g_is(n, "GlobalAveragePool") || g_is(n, "GlobalMaxPool") || g_is(n, "GlobalLpPool")) {
		o.d[1] = x->d[1];
		for (int i = 0; i < sp; i++)
			o.d[2 + i] = 1;
		return o;
	} else {
		o.d[1] = x->d[1];
	}
	if (nk != sp)
		return o;
	long ns = ints(g, n, 99, "strides", s, DIMS_MAX), nd = ints(g, n, 99, "dilations", dl, DIMS_MAX);
	long np = ints(g, n, 99, "pads", p, 2 * DIMS_MAX);
	for (int i = 0; i < sp; i++) {
		if (ns < 0)
			s[i] = 1;
		if (nd < 0)
			dl[i] = 1;
	}
	if (np < 0)
		for (int i = 0; i < 2 * sp; i++)
			p[i] = 0;
	if ((ns >= 0 && ns != sp) || (nd >= 0 && nd != sp) || (np >= 0 && np != 2 * sp) || !bounded(k, sp, 1, ALIM) ||
	    !bounded(s, sp, 1, ALIM) || !bounded(dl, sp, 1, ALIM) || !bounded(p, 2 * sp, 0, ALIM))
		return o;
	const char *ap = autopad_of(c, n);
	int ceil_mode = (int)g_attr_i(n, "ceil_mode", 0);
	for (int i = 0; i < sp; i++) {
		int64_t xi = x->d[2 + i];
		if (g_is(n, "ConvTranspose")) {
			int64_t op[DIMS_MAX];
			long no = ints(g, n, 99, "output_padding", op, DIMS_MAX);
			if (g_attr(n, "output_shape") || (ap && strcmp(ap, "NOTSET")) || xi < 1 ||
			    (no == sp && !bounded(op, sp, 0, ALIM)))
				continue;
			o.d[2 + i] = s[i] * (xi - 1) + (no == sp ? op[i] : 0) + (k[i] - 1) * dl[i] + 1 - p[i] - p[sp + i];
		} else {
			o.d[2 + i] = window(xi, k[i], s[i], dl[i], p[i], p[sp + i], ap, ceil_mode);
		}
	}
	return o;
}

static Dims slice(const Graph *g, const Node *n, const Dims *x, int opset)
{
	if (!x || x->rank < 0)
		return UNKNOWN;
	Dims o = *x;
	int64_t st[DIMS_MAX], en[DIMS_MAX], ax[DIMS_MAX], sp[DIMS_MAX];
	long ns, ne, na, nst;
	if (opset >= 10) {
		ns = ints(g, n, 1, NULL, st, DIMS_MAX);
		ne = ints(g, n, 2, NULL, en, DIMS_MAX);
		na = ints(g, n, 3, NULL, ax, DIMS_MAX);
		nst = ints(g, n, 4, NULL, sp, DIMS_MAX);
	} else {
		ns = ints(g, n, 99, "starts", st, DIMS_MAX);
		ne = ints(g, n, 99, "ends", en, DIMS_MAX);
		na = ints(g, n, 99, "axes", ax, DIMS_MAX);
		nst = -2;
	}
	if (ns < 0 || ne != ns || (na != -2 && na != ns) || (nst != -2 && nst != ns)) {
		/* Which axes change is unknown: all of them may. */
		return unknown_rank(x->rank);
	}
	for (long i = 0; i < ns; i++) {
		int64_t a = na == -2 ? i : norm_axis(ax[i], x->rank), step = nst == -2 ? 1 : sp[i];
		if (a < 0 || a >= x->rank || step == 0 || step > DLIM || step < -DLIM)
			return unknown_rank(x->rank);
		int64_t d = x->d[a];
		if (d < 0) {
			o.d[a] = -1;
			continue;
		}
		int64_t b = st[i] < 0 ? st[i] + d : st[i], e = en[i] < 0 ? en[i] + d : en[i];
		if (step > 0) {
			b = b < 0 ? 0 : b > d ? d : b;
			e = e < 0 ? 0 : e > d ? d : e;
			o.d[a] = e > b ? (e - b + step - 1) / step : 0;
		} else {
			b = b < 0 ? -1 : b > d - 1 ? d - 1 : b;
			e = e < -1 ? -1 : e > d - 1 ? d - 1 : e;
			o.d[a] = b > e ? (b - e - step - 1) / -step : 0;
		}
	}
	return o;
}

/* The dims a shape tensor holds: a constant, or Shape(v) of a value whose
 * dims are memoised. */
static int shape_value(const Graph *g, const char *name, Map *memo, Dims *o)
{
	int64_t v[DIMS_MAX];
	long k = *name ? g_const_ints(g, name, v, DIMS_MAX) : -1;
	if (k >= 0) {
		o->rank = (int)k;
		for (long i = 0; i < k; i++)
			o->d[i] = v[i];
		return 0;
	}
	Val *sv = *name ? g_val(g, name) : NULL;
	if (sv && sv->def && g_is(sv->def, "Shape") && !g_attr(sv->def, "start") && !g_attr(sv->def, "end")) {
		const Dims *d = map_get(memo, sv->def->input[0]);
		if (d && d->rank >= 0) {
			*o = *d;
			return 0;
		}
	}
	return -1;
}

static Dims compute(Ctx *c, const Graph *g, const Node *n, size_t out, Map *memo)
{
	const Dims *x = n->n_input ? map_get(memo, in(n, 0)) : NULL;
	const Dims *y = n->n_input > 1 && *n->input[1] ? map_get(memo, in(n, 1)) : NULL;
	int r = x ? x->rank : -1;
	if (is_op(n, SAME))
		return out == 0 || g_is(n, "Dropout") ? (x ? *x : UNKNOWN) : UNKNOWN;
	if (out != 0 && !g_is(n, "Split") && !g_is(n, "TopK"))
		return UNKNOWN;
	if (is_op(n, BCAST)) {
		const Dims *v[16];
		if (n->n_input > 16)
			return UNKNOWN;
		for (size_t i = 0; i < n->n_input; i++)
			v[i] = map_get(memo, n->input[i]);
		return broadcast(v, n->n_input);
	}
	if (g_is(n, "Conv") || g_is(n, "ConvTranspose") || g_is(n, "MaxPool") || g_is(n, "AveragePool") ||
	    g_is(n, "LpPool") || g_is(n, "GlobalAveragePool") || g_is(n, "GlobalMaxPool") || g_is(n, "GlobalLpPool"))
		return windowed(c, g, n, x, y);
	if (g_is(n, "Reshape")) {
		Dims s;
		if (shape_value(g, in(n, 1), memo, &s)) {
			/* Only the target's length is known: the rank. */
			return y && y->rank == 1 && y->d[0] >= 0 ? unknown_rank((int)y->d[0]) : UNKNOWN;
		}
		if (s.rank > DIMS_MAX)
			return UNKNOWN;
		Dims o = s;
		int64_t total = r < 0 ? -1 : 1, part = 1, neg = -1;
		for (int i = 0; i < r; i++)
			total = mul(total, x->d[i]);
		int allowzero = (int)g_attr_i(n, "allowzero", 0);
		for (int i = 0; i < s.rank; i++)
			if (s.d[i] < -1)
				return unknown_rank(s.rank);
		for (int i = 0; i < s.rank; i++) {
			if (s.d[i] != -1)
				s.d[i] = known(s.d[i]), o.d[i] = s.d[i];
			if (s.d[i] == 0 && !allowzero)
				o.d[i] = i < r ? x->d[i] : -1;
			if (s.d[i] == -1)
				neg = i;
			else
				part = mul(part, o.d[i]);
		}
		if (neg >= 0)
			o.d[neg] = total >= 0 && part > 0 ? total / part : -1;
		return o;
	}
	if (g_is(n, "Concat")) {
		Dims o = UNKNOWN;
		int64_t sum = 0;
		for (size_t i = 0; i < n->n_input; i++) {
			const Dims *v = map_get(memo, n->input[i]);
			if (!v || v->rank < 0)
				return UNKNOWN;
			if (o.rank < 0)
				o = *v;
			int64_t a = norm_axis(g_attr_i(n, "axis", 0), v->rank);
			if (a < 0 || a >= v->rank)
				return UNKNOWN;
			sum = sum < 0 || v->d[a] < 0 ? -1 : known(sum + v->d[a]);
			for (int q = 0; q < v->rank; q++)
				if (q != a && o.d[q] < 0)
					o.d[q] = v->d[q];
		}
		if (o.rank > 0)
			o.d[norm_axis(g_attr_i(n, "axis", 0), o.rank)] = sum;
		return o;
	}
	if (r < 0 && !g_is(n, "ConstantOfShape"))
		return UNKNOWN;
	if (g_is(n, "Split")) {
		int64_t a = norm_axis(g_attr_i(n, "axis", 0), r), sp[64];
		if (a < 0 || a >= r)
			return UNKNOWN;
		Dims o = *x;
		long k = ints(g, n, 1, c->opset >= 13 ? NULL : "split", sp, 64);
		if (k >= 0 && (size_t)k == n->n_output)
			o.d[a] = sp[out];
		else if (k == -2 && x->d[a] >= 0 && n->n_output && !g_attr(n, "num_outputs") && x->d[a] % (int64_t)n->n_output == 0)
			o.d[a] = x->d[a] / (int64_t)n->n_output;
		else
			o.d[a] = -1;
		return o;
	}
	if (g_is(n, "Slice"))
		return slice(g, n, x, c->opset);
	if (g_is(n, "Resize") || g_is(n, "Upsample")) {
		Dims o = unknown_rank(r);
		o.d[0] = x->d[0];
		o.d[1] = x->d[1];
		int64_t sz[DIMS_MAX];
		double sc[DIMS_MAX];
		const char *scales = g_is(n, "Upsample") ? in(n, 1) : c->opset >= 11 ? in(n, 2) : in(n, 1);
		long ks = -1, kz = g_is(n, "Resize") && c->opset >= 11 ? ints(g, n, 3, NULL, sz, DIMS_MAX) : -2;
		if (kz == r) {
			for (int i = 0; i < r; i++)
				o.d[i] = sz[i];
			return o;
		}
		const Onnx__AttributeProto *sa = g_attr(n, "scales");
		if (sa && sa->n_floats <= DIMS_MAX) {
			ks = (long)sa->n_floats;
			for (long i = 0; i < ks; i++)
				sc[i] = sa->floats[i];
		} else {
			ks = floats(g, scales, sc, DIMS_MAX);
		}
		if (ks == r)
			for (int i = 0; i < r; i++)
				o.d[i] = x->d[i] < 0 || !(sc[i] >= 0 && sc[i] <= (double)ALIM) ? -1
					 : known((int64_t)floor((double)x->d[i] * sc[i]));
		return o;
	}
	if (g_is(n, "Pad")) {
		int64_t p[2 * DIMS_MAX];
		long k = c->opset >= 11 ? ints(g, n, 1, NULL, p, 2 * DIMS_MAX) : ints(g, n, 99, "pads", p, 2 * DIMS_MAX);
		if (k != 2 * r || (n->n_input > 3 && *n->input[3]) || !bounded(p, k, -DLIM, DLIM))
			return unknown_rank(r);
		Dims o = *x;
		for (int i = 0; i < r; i++)
			o.d[i] = x->d[i] < 0 ? -1 : known(x->d[i] + p[i] + p[r + i]);
		return o;
	}
	if (g_is(n, "Flatten")) {
		int64_t a = norm_axis(g_attr_i(n, "axis", 1), r), p0 = 1, p1 = 1;
		if (a < 0 || a > r)
			return UNKNOWN;
		for (int i = 0; i < r; i++) {
			int64_t *p = i < a ? &p0 : &p1;
			*p = mul(*p, x->d[i]);
		}
		Dims o = { 2, { p0, p1 } };
		return o;
	}
	if (g_is(n, "Transpose")) {
		int64_t p[DIMS_MAX];
		long k = ints(g, n, 99, "perm", p, DIMS_MAX);
		Dims o = unknown_rank(r);
		for (int i = 0; i < r; i++) {
			int64_t s = k == r ? p[i] : r - 1 - i;
			if (s < 0 || s >= r)
				return unknown_rank(r);
			o.d[i] = x->d[s];
		}
		return o;
	}
	if (g_is(n, "Unsqueeze") || g_is(n, "Squeeze")) {
		int64_t ax[DIMS_MAX];
		long k = ints(g, n, 1, "axes", ax, DIMS_MAX);
		int un = g_is(n, "Unsqueeze");
		if (k == -2 && !un) { /* every dimension of size 1 */
			Dims o = { 0, { 0 } };
			for (int i = 0; i < r; i++) {
				if (x->d[i] < 0)
					return UNKNOWN;
				if (x->d[i] != 1)
					o.d[o.rank++] = x->d[i];
			}
			return o;
		}
		int orank = un ? r + (int)k : r - (int)k;
		if (k < 0 || orank < 0 || orank > DIMS_MAX)
			return UNKNOWN;
		int mark[DIMS_MAX] = { 0 };
		for (long i = 0; i < k; i++) {
			int64_t a = norm_axis(ax[i], un ? orank : r);
			if (a < 0 || a >= (un ? orank : r))
				return UNKNOWN;
			mark[a] = 1;
		}
		Dims o = { orank, { 0 } };
		if (un)
			for (int i = 0, j = 0; i < orank; i++)
				o.d[i] = mark[i] ? 1 : x->d[j++];
		else
			for (int j = 0, i = 0; j < r; j++)
				if (!mark[j])
					o.d[i++] = x->d[j];
		return o;
	}
	if (g_is(n, "Gemm") && y && y->rank == 2 && r == 2) {
		int ta = (int)g_attr_i(n, "transA", 0), tb = (int)g_attr_i(n, "transB", 0);
		Dims o = { 2, { x->d[ta ? 1 : 0], y->d[tb ? 0 : 1] } };
		return o;
	}
	if (g_is(n, "MatMul") && y && r >= 2 && y->rank >= 2) {
		Dims a = *x, b = *y;
		a.d[r - 1] = 1, a.d[r - 2] = 1;
		b.d[y->rank - 1] = 1, b.d[y->rank - 2] = 1;
		const Dims *v[] = { &a, &b };
		Dims o = broadcast(v, 2);
		o.d[o.rank - 2] = x->d[r - 2];
		o.d[o.rank - 1] = y->d[y->rank - 1];
		return o;
	}
	if (!strncmp(n->op_type, "Reduce", 6) || g_is(n, "ArgMax") || g_is(n, "ArgMin")) {
		int64_t ax[DIMS_MAX];
		int arg = g_is(n, "ArgMax") || g_is(n, "ArgMin");
		long k;
		if (arg) {
			ax[0] = g_attr_i(n, "axis", 0);
			k = 1;
		} else {
			k = ints(g, n, 1, "axes", ax, DIMS_MAX);
		}
		int keep = (int)g_attr_i(n, "keepdims", 1), mark[DIMS_MAX] = { 0 };
		if (k == -2 && g_attr_i(n, "noop_with_empty_axes", 0))
			return *x;
		for (int i = 0; i < r; i++)
			mark[i] = k == -2;
		if (k == -1)
			return keep ? unknown_rank(r) : UNKNOWN;
		for (long i = 0; i < k; i++) {
			int64_t a = norm_axis(ax[i], r);
			if (a < 0 || a >= r)
				return UNKNOWN;
			mark[a] = 1;
		}
		Dims o = { 0, { 0 } };
		for (int i = 0; i < r; i++)
			if (!mark[i])
				o.d[o.rank++] = x->d[i];
			else if (keep)
				o.d[o.rank++] = 1;
		return o;
	}
	if (g_is(n, "ConstantOfShape")) {
		Dims s;
		return shape_value(g, in(n, 0), memo, &s) ? UNKNOWN : s;
	}
	if (g_is(n, "Expand")) {
		Dims s;
		if (shape_value(g, in(n, 1), memo, &s))
			return UNKNOWN;
		const Dims *v[] = { x, &s };
		return broadcast(v, 2);
	}
	if (g_is(n, "Shape")) {
		Dims o = { 1, { r } };
		return g_attr(n, "start") || g_attr(n, "end") ? unknown_rank(1) : o;
	}
	if (g_is(n, "Size"))
		return (Dims){ 0, { 0 } };
	if (g_is(n, "Gather") && y && y->rank >= 0) {
		int64_t a = norm_axis(g_attr_i(n, "axis", 0), r);
		if (a < 0 || a >= r || r - 1 + y->rank > DIMS_MAX)
			return UNKNOWN;
		Dims o = { 0, { 0 } };
		for (int i = 0; i < a; i++)
			o.d[o.rank++] = x->d[i];
		for (int i = 0; i < y->rank; i++)
			o.d[o.rank++] = y->d[i];
		for (int i = (int)a + 1; i < r; i++)
			o.d[o.rank++] = x->d[i];
		return o;
	}
	if (g_is(n, "GatherElements"))
		return y ? *y : UNKNOWN;
	if (g_is(n, "Tile")) {
		int64_t rep[DIMS_MAX];
		if (ints(g, n, 1, NULL, rep, DIMS_MAX) != r)
			return unknown_rank(r);
		Dims o = *x;
		for (int i = 0; i < r; i++)
			o.d[i] = mul(x->d[i], rep[i]);
		return o;
	}
	if (g_is(n, "TopK")) {
		int64_t k;
		long nk = c->opset >= 10 ? ints(g, n, 1, NULL, &k, 1) : (k = g_attr_i(n, "k", -1), 1);
		int64_t a = norm_axis(g_attr_i(n, "axis", -1), r);
		if (a < 0 || a >= r)
			return UNKNOWN;
		Dims o = *x;
		o.d[a] = nk == 1 ? k : -1;
		return o;
	}
	if (g_is(n, "NonZero"))
		return (Dims){ 2, { r, -1 } };
	return UNKNOWN;
}

/* A leaf: what the value itself declares, without its producer. */
static int leaf(const Val *v, Dims *o)
{
	if (v->init) {
		*o = of_tensor(v->init);
		return 1;
	}
	if (v->def && g_is(v->def, "Constant")) {
		const Onnx__AttributeProto *a = g_attr(v->def, "value");
		*o = a && a->t ? of_tensor(a->t) : UNKNOWN;
		return 1;
	}
	if (!v->def) {
		*o = v->shape ? of_shape(v->shape) : UNKNOWN;
		return 1;
	}
	return 0;
}

typedef struct {
	const Graph *g;
	const char *name;
} Item;

int g_dims(Ctx *c, const Graph *g, const char *name, Map *memo, int64_t *dims)
{
	Item *st = NULL;
	size_t n = 0, cap = 0;
#define PUSH(gr, nm)                                                                         \
	do {                                                                                 \
		if (n == cap) {                                                              \
			size_t nc = cap ? cap * 2 : 64;                                      \
			st = arena_grow(c->ia, st, cap * sizeof *st, nc * sizeof *st);      \
			cap = nc;                                                            \
		}                                                                            \
		st[n++] = (Item){ (gr), (nm) };                                              \
	} while (0)
	if (*name && !map_get(memo, name))
		PUSH(g, name);
	while (n) {
		Item it = st[n - 1];
		if (map_get(memo, it.name)) {
			n--;
			continue;
		}
		Val *v = g_val(it.g, it.name);
		Dims *d = arena_alloc(c->a, sizeof *d);
		if (!v) {
			*d = UNKNOWN;
		} else if (!leaf(v, d)) {
			const Node *nd = v->def;
			const Graph *ng = v->g;
			int pending = 0;
			for (size_t i = 0; i < nd->n_input; i++)
				if (*nd->input[i] && !map_get(memo, nd->input[i])) {
					PUSH(ng, nd->input[i]);
					pending = 1;
				}
			if (pending)
				continue;
			size_t o = 0;
			while (o < nd->n_output && strcmp(nd->output[o], it.name))
				o++;
			*d = compute(c, ng, nd, o, memo);
			/* A declared shape fills what the rules leave open. */
			if (v->shape) {
				Dims s = of_shape(v->shape);
				if (d->rank < 0)
					*d = s;
				else if (s.rank == d->rank)
					for (int i = 0; i < d->rank; i++)
						if (d->d[i] < 0)
							d->d[i] = s.d[i];
			}
		}
		for (int i = 0; i < d->rank; i++)
			d->d[i] = known(d->d[i]);
		map_put(memo, it.name, d);
		n--;
	}
#undef PUSH
	const Dims *d = *name ? map_get(memo, name) : NULL;
	if (!d || d->rank < 0)
		return -1;
	for (int i = 0; i < d->rank; i++)
		dims[i] = d->d[i];
	return d->rank;
}

void g_dims_put(Ctx *c, Map *memo, const char *name, const int64_t *dims, int rank)
{
	Dims *d = arena_alloc(c->a, sizeof *d);
	*d = unknown_rank(rank);
	for (int i = 0; i < d->rank; i++)
		d->d[i] = dims[i];
	map_put(memo, name, d);
}
