/* Shape-guard If folding. With a dynamic batch the exporter cannot see that
 * a dimension is 1 and guards `squeeze(d)` with
 *   If(Equal(Gather(Shape(t), d), 1)) { Squeeze(t, d) } else { Identity(t) }.
 * Deployment runtimes reject If. When the dimension is provably 1 the If is
 * replaced by the Squeeze. The proof is a small abstract interpretation:
 * dimensions of tensors and elements of 1-D shape tensors, each either known
 * or unknown, computed on demand and only as far as the guard needs. */
#include <string.h>

#include "moe.h"

/* DEPTH bounds the recursion, WORK the calls per guard: operands are
 * walked again wherever a value is read twice, which a crafted graph can
 * make exponential. */
enum { UNK = INT64_MIN, DEPTH = 96, WORK = 100000 };

/* Input i, or "" (defined nowhere: unknown) when a malformed node has fewer. */
static const char *in(const Node *n, size_t i)
{
	return i < n->n_input ? n->input[i] : "";
}

static int64_t ival(const Graph *g, const char *v, int64_t i, int depth, long *work);

static int64_t dim_of(const Graph *g, const char *v, int64_t d, int depth, long *work);

static int is_scalar(const Graph *g, const char *v)
{
	return g_rank(g, v, 0) == 0;
}

/* Rank, also of a Reshape whose target shape is computed. */
static int64_t rank_of(const Graph *g, const char *v, int depth, long *work)
{
	if (++*work > WORK)
		return UNK;
	int r = g_rank(g, v, 0);
	if (r >= 0)
		return r;
	Val *x = g_val(g, v);
	if (!x || !x->def || depth > DEPTH)
		return UNK;
	Node *n = x->def;
	if (g_is(n, "Reshape") || g_is(n, "ConstantOfShape") || g_is(n, "Expand"))
		return dim_of(x->g, in(n, g_is(n, "ConstantOfShape") ? 0 : 1), 0, depth + 1, work);
	if (g_is(n, "Where") || g_is(n, "Equal") || g_is(n, "Mul") || g_is(n, "Add") || g_is(n, "Sub") ||
	    g_is(n, "Cast")) {
		int64_t best = 0;
		for (size_t i = 0; i < n->n_input; i++) {
			int64_t q = rank_of(x->g, in(n, i), depth + 1, work);
			if (q == UNK)
				return UNK;
			if (q > best)
				best = q;
		}
		return best;
	}
	return UNK;
}

static int64_t dim_of(const Graph *g, const char *v, int64_t d, int depth, long *work)
{
	if (++*work > WORK)
		return UNK;
	if (depth > DEPTH || d < 0)
		return UNK;
	Val *x = g_val(g, v);
	if (!x)
		return UNK;
	const Tensor *t = g_const(g, v);
	if (t)
		return (size_t)d < t->n_dims ? t->dims[d] : UNK;
	if (x->shape && (size_t)d < x->shape->n_dim &&
	    x->shape->dim[d]->value_case == ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE)
		return x->shape->dim[d]->dim_value;
	Node *n = x->def;
	if (!n)
		return UNK;
	const Graph *ng = x->g;
	if (g_is(n, "GatherElements"))
		return dim_of(ng, in(n, 1), d, depth + 1, work);
	if (g_is(n, "Expand")) {
		int64_t a = dim_of(ng, in(n, 0), d, depth + 1, work), b = ival(ng, in(n, 1), d, depth + 1, work);
		int64_t r = rank_of(ng, in(n, 0), depth, work);
		if (r == UNK || r != dim_of(ng, in(n, 1), 0, depth + 1, work))
			return UNK; /* ranks differ: right-aligned broadcast, not needed so far */
		if (a == 1)
			return b;
		if (b == 1 || b == a)
			return a;
		return UNK;
	}
	if (g_is(n, "Reshape")) {
		int64_t s = ival(ng, in(n, 1), d, depth + 1, work);
		/* Flattening a 1-D tensor: shape tensors often pass Reshape(x, [-1]). */
		if (s == -1 && d == 0 && dim_of(ng, in(n, 1), 0, depth + 1, work) == 1 &&
		    g_rank(ng, in(n, 0), 0) == 1)
			return dim_of(ng, in(n, 0), 0, depth + 1, work);
		if (s == 0 && !g_attr_i(n, "allowzero", 0))
			return dim_of(ng, in(n, 0), d, depth + 1, work);
		return s > 0 ? s : UNK;
	}
	if (g_is(n, "Concat")) {
		int r = g_rank(ng, in(n, 0), 0);
		int64_t ax = g_attr_i(n, "axis", 0);
		if (ax < 0 && r > 0)
			ax += r;
		if (d != ax)
			return dim_of(ng, in(n, 0), d, depth + 1, work);
		int64_t sum = 0;
		for (size_t i = 0; i < n->n_input; i++) {
			int64_t k = dim_of(ng, in(n, i), d, depth + 1, work);
			if (k == UNK || k < 0 || __builtin_add_overflow(sum, k, &sum))
				return UNK;
		}
		return sum;
	}
	if (g_is(n, "Unsqueeze") && d == 0 && is_scalar(ng, in(n, 0)))
		return 1;
	if (g_is(n, "Shape") && d == 0) {
		int r = g_rank(ng, in(n, 0), 0);
		return r >= 0 && !g_attr(n, "start") && !g_attr(n, "end") ? r : UNK;
	}
	if (g_is(n, "Cast") || g_is(n, "Identity"))
		return dim_of(ng, in(n, 0), d, depth + 1, work);
	if (d == 0 && (g_is(n, "Where") || g_is(n, "Equal") || g_is(n, "Mul") || g_is(n, "Add") ||
		       g_is(n, "Sub"))) {
		/* 1-D broadcast: the longest operand; a scalar counts as 1. */
		int64_t best = 1;
		for (size_t i = 0; i < n->n_input; i++) {
			int64_t r = rank_of(ng, in(n, i), depth, work);
			int64_t l = r == 0 ? 1 : r == 1 ? dim_of(ng, in(n, i), 0, depth + 1, work) : UNK;
			if (l == UNK)
				return UNK;
			if (l > best)
				best = l;
		}
		return best;
	}
	if (g_is(n, "ConstantOfShape") && d == 0)
		return ival(ng, in(n, 0), 0, depth + 1, work);
	return UNK;
}

/* Length of a 1-D tensor, 1 for a scalar. */
static int64_t len_of(const Graph *g, const char *v, int depth, long *work)
{
	if (++*work > WORK)
		return UNK;
	int64_t r = rank_of(g, v, depth, work);
	return r == 0 ? 1 : r == 1 ? dim_of(g, v, 0, depth + 1, work) : UNK;
}

/* Element i of a broadcast operand: a length-1 operand repeats. */
static int64_t bval(const Graph *g, const char *v, int64_t i, int depth, long *work)
{
	if (++*work > WORK)
		return UNK;
	return ival(g, v, len_of(g, v, depth, work) == 1 ? 0 : i, depth + 1, work);
}

static int64_t ival(const Graph *g, const char *v, int64_t i, int depth, long *work)
{
	if (++*work > WORK)
		return UNK;
	if (depth > DEPTH || i < 0)
		return UNK;
	int64_t buf[64];
	long k = g_const_ints(g, v, buf, 64);
	if (k >= 0)
		return i < k ? buf[i] : UNK;
	Val *x = g_val(g, v);
	if (!x || !x->def)
		return UNK;
	Node *n = x->def;
	const Graph *ng = x->g;
	if (g_is(n, "Shape") && !g_attr(n, "start") && !g_attr(n, "end"))
		return dim_of(ng, in(n, 0), i, depth + 1, work);
	if (g_is(n, "Gather") && g_attr_i(n, "axis", 0) == 0) {
		int64_t j = bval(ng, in(n, 1), i, depth, work);
		return j == UNK ? UNK : ival(ng, in(n, 0), j, depth + 1, work);
	}
	if (g_is(n, "Concat")) {
		for (size_t q = 0; q < n->n_input; q++) {
			int64_t l = len_of(ng, in(n, q), depth, work);
			if (l == UNK)
				return UNK;
			if (i < l)
				return ival(ng, in(n, q), i, depth + 1, work);
			i -= l;
		}
		return UNK;
	}
	if (g_is(n, "Unsqueeze") || g_is(n, "Squeeze") || g_is(n, "Cast") || g_is(n, "Identity") ||
	    (g_is(n, "Reshape") && len_of(ng, in(n, 0), depth, work) != UNK))
		return ival(ng, in(n, 0), i, depth + 1, work);
	if (g_is(n, "ConstantOfShape")) {
		const Onnx__AttributeProto *a = g_attr(n, "value");
		if (!a)
			return 0;
		size_t nb;
		const void *p = g_tensor_data(a->t, &nb);
		if (p && a->t->data_type == ONNX__TENSOR_PROTO__DATA_TYPE__INT64 && nb == 8) {
			int64_t val;
			memcpy(&val, p, 8);
			return val;
		}
		return UNK;
	}
	if (g_is(n, "Mul") || g_is(n, "Add") || g_is(n, "Sub") || g_is(n, "Equal")) {
		int64_t a = bval(ng, in(n, 0), i, depth, work), b = bval(ng, in(n, 1), i, depth, work);
		int64_t r;
		if (a == UNK || b == UNK)
			return UNK;
		if (g_is(n, "Equal"))
			return a == b;
		/* Crafted constants must not overflow (undefined behaviour). */
		if (g_is(n, "Mul") ? __builtin_mul_overflow(a, b, &r) : g_is(n, "Add") ? __builtin_add_overflow(a, b, &r)
		                                                      : __builtin_sub_overflow(a, b, &r))
			return UNK;
		return r == UNK ? UNK : r;
	}
	if (g_is(n, "Where")) {
		int64_t cnd = bval(ng, in(n, 0), i, depth, work);
		if (cnd == UNK)
			return UNK;
		return bval(ng, in(n, cnd ? 1 : 2), i, depth, work);
	}
	return UNK;
}

/* The guard's pieces, when the If has exactly the shape-guard form. */
typedef struct {
	const Node *sq;   /* the Squeeze in the then-branch */
	const char *t;    /* the tensor guarded */
	int64_t d;        /* its dimension tested against 1 */
} Guard;

static const Onnx__GraphProto *branch(const Node *n, const char *name)
{
	const Onnx__AttributeProto *a = g_attr(n, name);
	return a ? a->g : NULL;
}

static int match_guard(const Graph *g, const Node *n, Guard *gd)
{
	if (!g_is(n, "If") || n->n_output != 1 || n->n_input != 1)
		return 0;
	const Onnx__GraphProto *th = branch(n, "then_branch"), *el = branch(n, "else_branch");
	if (!th || !el || th->n_output != 1 || el->n_output != 1 || el->n_node != 1 ||
	    !g_is(el->node[0], "Identity"))
		return 0;
	const Node *sq = NULL;
	if (el->node[0]->n_input < 1 || el->node[0]->n_output != 1)
		return 0;
	for (size_t i = 0; i < th->n_node; i++) {
		if (th->node[i]->n_output != 1) /* folding renames each node's one output */
			return 0;
		if (g_is(th->node[i], "Squeeze") && !sq && th->node[i]->n_input >= 1)
			sq = th->node[i];
		else if (!g_is(th->node[i], "Constant"))
			return 0;
	}
	if (!sq || strcmp(sq->output[0], th->output[0]->name) ||
	    strcmp(sq->input[0], el->node[0]->input[0]) || strcmp(el->node[0]->output[0], el->output[0]->name))
		return 0;
	/* cond = Equal(Gather(Shape(t), d), 1), in either operand order. */
	Val *c = g_val(g, n->input[0]);
	if (!c || !c->def || !g_is(c->def, "Equal") || c->def->n_input != 2)
		return 0;
	const Node *eq = c->def;
	for (int side = 0; side < 2; side++) {
		int64_t one;
		if (g_const_ints(g, eq->input[1 - side], &one, 1) != 1 || one != 1)
			continue;
		Val *gv = g_val(g, eq->input[side]);
		if (!gv || !gv->def || !g_is(gv->def, "Gather") || gv->def->n_input != 2 || g_attr_i(gv->def, "axis", 0) != 0)
			continue;
		int64_t d;
		Val *sv = g_val(g, gv->def->input[0]);
		if (g_const_ints(g, gv->def->input[1], &d, 1) != 1 || !sv || !sv->def || !g_is(sv->def, "Shape") ||
		    sv->def->n_input < 1 ||
		    g_attr(sv->def, "start") || strcmp(sv->def->input[0], sq->input[0]))
			continue;
		gd->sq = sq;
		gd->t = sq->input[0];
		gd->d = d;
		return 1;
	}
	return 0;
}

static int match(Ctx *c, Node *n, void *st)
{
	Guard *gd = st;
	Val *out = n->n_output ? g_val(c->g, n->output[0]) : NULL;
	long work = 0;
	return out && (out->nuse || out->isout) && match_guard(c->g, n, gd) &&
	       dim_of(c->g, gd->t, gd->d, 0, &work) == 1;
}

/* The then-branch's Squeeze, lifted, produces the If's output. */
static int rewrite(Ctx *c, Node *n, void *st, Err *e)
{
	const Guard *gd = st;
	const Onnx__GraphProto *th = branch(n, "then_branch");
	Map ren;
	map_init(&ren, c->a, 8);
	for (size_t j = 0; j < th->n_node; j++) {
		Node *k = g_clone_node(c, c->g, th->node[j]);
		k->name = (char *)g_fresh(c, k->name && *k->name ? k->name : k->op_type);
		for (size_t q = 0; q < k->n_input; q++) {
			const char *r = map_get(&ren, k->input[q]);
			if (r)
				k->input[q] = (char *)r;
		}
		if (th->node[j] == gd->sq) {
			k->output[0] = n->output[0];
		} else {
			k->output[0] = (char *)g_fresh(c, k->output[0]);
			map_put(&ren, th->node[j]->output[0], k->output[0]);
		}
	}
	g_rename_output(c, n, 0, g_fresh(c, arena_printf(c->a, "%s_guarded", n->output[0])));
	(void)e;
	return 0;
}

int fold_shape_ifs(Ctx *c, int dry, Err *e)
{
	static const Pattern p = { "shape-guard If", match, rewrite, sizeof(Guard) };
	return g_rewrite(c, &p, 1, dry, e);
}
