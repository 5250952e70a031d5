/* Rank of a value from declared shapes and a few op rules, memoised by
 * value name across reindexing. To be replaced by the shape inference
 * of src/infer.c. */
#include <stdint.h>
#include <string.h>

#include "moe.h"

static int is_elementwise(const Node *n)
{
	static const char *ops[] = { "Add", "Sub", "Mul", "Div", "Cast", "Softmax", "Sigmoid", "Clip",
				     "Pow", "Sqrt", "Exp", "Neg", "Reciprocal", "Identity", "Relu", "Abs",
				     "Max", "Min", "LogSoftmax", "Tanh", "HardSigmoid", "HardSwish", "LeakyRelu",
				     "Erf", "Floor", "Ceil", "Round", "Elu", "Softplus", "Mish", "MatMul", NULL };
	for (const char **o = ops; *o; o++)
		if (g_is(n, *o))
			return 1;
	return 0;
}

static int rank_rec(const Graph *g, const char *name, int depth, int *cut);

/* Ranks are memoised by value name across reindexing (passes keep a
 * value's rank when they rewrite it): without the memo each layer's query
 * walks back through every earlier layer's experts, exponentially in the
 * number of layers. A result cut short by the depth bound is not kept,
 * nor an unknown rank, which folding an If can make known. */
int g_rank(const Graph *g, const char *name, int depth)
{
	int cut = 0;
	return rank_rec(g, name, depth, &cut);
}

static int rank_calc(const Graph *g, const char *name, int depth, int *cut);

static int rank_rec(const Graph *g, const char *name, int depth, int *cut)
{
	if (depth > 256) {
		*cut = 1;
		return -1;
	}
	void *m = g->rank ? map_get(g->rank, name) : NULL;
	if (m)
		return (int)(intptr_t)m - 2;
	int sub = 0, r = rank_calc(g, name, depth, &sub);
	if (sub)
		*cut = 1;
	else if (g->rank && r >= 0) /* unknown may become known when a pass folds an If */
		map_put(g->rank, name, (void *)(intptr_t)(r + 2));
	return r;
}

static int rank_calc(const Graph *g, const char *name, int depth, int *cut)
{
	Val *v = g_val(g, name);
	if (!v)
		return -1;
	if (v->init)
		return (int)v->init->n_dims;
	if (v->shape)
		return (int)v->shape->n_dim;
	Node *n = v->def;
	/* Every rule below but Constant's reads input 0, some input 1: a node
	 * short of inputs (malformed) has no rank to tell. */
	if (!n || (n->n_input == 0 && !g_is(n, "Constant")))
		return -1;
	const Graph *ng = v->g;
	if (g_is(n, "Reshape") || g_is(n, "ConstantOfShape") || g_is(n, "Expand")) {
		/* Target shape: a constant, or Shape(y) of a tensor of known rank. */
		if (!g_is(n, "ConstantOfShape") && n->n_input < 2)
			return -1;
		const char *sh = n->input[g_is(n, "ConstantOfShape") ? 0 : 1];
		const Tensor *t = g_const(ng, sh);
		if (t && t->n_dims == 1)
			return (int)t->dims[0];
		Val *sv = g_val(ng, sh);
		if (sv && sv->def && g_is(sv->def, "Shape") && !g_attr(sv->def, "start") && !g_attr(sv->def, "end"))
			return rank_rec(ng, sv->def->input[0], depth + 1, cut);
		return -1;
	}
	if (g_is(n, "Constant")) {
		const Tensor *t = g_const(ng, n->output[0]);
		return t ? (int)t->n_dims : -1;
	}
	if (g_is(n, "Unsqueeze") || g_is(n, "Squeeze")) {
		int64_t ax[16];
		long k = -1;
		const Onnx__AttributeProto *a = g_attr(n, "axes");
		if (a)
			k = (long)a->n_ints;
		else if (n->n_input > 1)
			k = g_const_ints(ng, n->input[1], ax, 16);
		int r = rank_rec(ng, n->input[0], depth + 1, cut);
		if (r < 0 || k < 0)
			return -1;
		return g_is(n, "Unsqueeze") ? r + (int)k : r - (int)k;
	}
	if (g_is(n, "Shape"))
		return 1;
	if (g_is(n, "NonZero"))
		return 2;
	if (g_is(n, "Flatten") || g_is(n, "Gemm"))
		return 2;
	if (strncmp(n->op_type, "Reduce", 6) == 0 && (!n->domain || !*n->domain)) {
		int r = rank_rec(ng, n->input[0], depth + 1, cut);
		if (r < 0 || g_attr_i(n, "keepdims", 1))
			return r;
		const Onnx__AttributeProto *a = g_attr(n, "axes");
		int64_t ax[16];
		long k = a ? (long)a->n_ints : n->n_input > 1 && *n->input[1] ? g_const_ints(ng, n->input[1], ax, 16) : r;
		return k < 0 ? -1 : r - (int)k;
	}
	if (g_is(n, "Gather")) {
		if (n->n_input < 2)
			return -1;
		int r = rank_rec(ng, n->input[0], depth + 1, cut), q = rank_rec(ng, n->input[1], depth + 1, cut);
		return r < 0 || q < 0 ? -1 : r + q - 1;
	}
	if (g_is(n, "Transpose") || g_is(n, "Concat") || g_is(n, "Split") || g_is(n, "TopK") ||
	    g_is(n, "Conv") || g_is(n, "ConvTranspose") || g_is(n, "BatchNormalization") ||
	    g_is(n, "InstanceNormalization") || g_is(n, "GroupNormalization") ||
	    g_is(n, "LayerNormalization") || g_is(n, "MaxPool") || g_is(n, "AveragePool") ||
	    g_is(n, "GlobalAveragePool") || g_is(n, "Slice") || g_is(n, "Resize") ||
	    g_is(n, "Pad") || g_is(n, "GatherElements") || g_is(n, "ScatterElements") ||
	    g_is(n, "ScatterND") || g_is(n, "Where") || g_is(n, "Softmax"))
		return n->n_input < (g_is(n, "Where") ? 2u : 1u) ? -1
								 : rank_rec(ng, n->input[g_is(n, "Where") ? 1 : 0], depth + 1, cut);
	if (is_elementwise(n) || g_is(n, "Equal")) {
		int best = -1;
		for (size_t i = 0; i < n->n_input; i++) {
			int r = rank_rec(ng, n->input[i], depth + 1, cut);
			if (r < 0)
				return -1;
			if (r > best)
				best = r;
		}
		return best;
	}
	return -1;
}
