/* The checker: what a runtime would refuse, refused here with a message
 * naming the node or tensor, on the input before any pass and on the
 * output before it is written. Checks run in this order, each over the
 * whole model: opset_import, structure (definitions, arities, If
 * branches), tensors (dims, data lengths, typed fields, external ranges),
 * then, on the inferred types (src/infer.h), element types through the
 * graph and the attribute ranges of the ops the passes read and emit.
 * Type and shape rules fire only on what is known: an unknown type or
 * dimension never fails a model. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph.h"
#include "infer.h"

/* The newest default-domain opset whose operators this tool has been
 * checked against. The compiled onnx.proto does not bound it: the proto
 * carries no operator, and fields of a newer IR (9-11: metadata, new
 * element types) survive a round trip as unknown fields. What matters is
 * that the ops the passes read, infer and emit mean the same: from opset
 * 19 to 23 (ONNX 1.14-1.18) they gained element types (float8, int4,
 * bfloat16), Cast's saturate, Pad's wrap mode and a new GroupNormalization
 * and GridSample, none of which changes an op this tool relies on. A newer
 * opset is refused, not guessed: its ops may have moved an attribute to an
 * input, as opset 13 and 18 did. Under ultralytics' defaults torch >= 2.4
 * exports at 19 or later, so a ceiling at the proto's 18 refused most of
 * today's exports. */
enum { OPSET_MAX = 23 };

typedef struct {
	Ctx *c;
	Arena *a; /* scratch of one g_check */
	Err *e;
} K;

static const char *nname(const Node *n)
{
	return n->name && *n->name ? n->name : n->op_type;
}

/* ---- opset_import ---- */

static int check_opsets(K *k)
{
	const Onnx__ModelProto *m = k->c->m;
	if (m->n_opset_import == 0)
		return errf(k->e, "the model declares no opset_import");
	for (size_t i = 0; i < m->n_opset_import; i++) {
		const Onnx__OperatorSetIdProto *o = m->opset_import[i];
		if (!model_default_domain(o->domain))
			continue;
		if (o->version < 1)
			return errf(k->e, "opset_import: default-domain version %" PRId64 " is not an opset (they start at 1); fix the model's opset_import",
				    o->version);
		if (o->version > OPSET_MAX)
			return errf(k->e, "opset_import: default-domain opset %" PRId64 " is newer than opset %d, the newest whose operators this tool knows; export the model with opset %d or lower",
				    o->version, (int)OPSET_MAX, (int)OPSET_MAX);
	}
	return 0;
}

/* ---- structure ---- */

static int has_type(const Onnx__ValueInfoProto *vi)
{
	return vi->type && (vi->type->value_case != ONNX__TYPE_PROTO__VALUE__NOT_SET);
}

static int domain_known(const Ctx *c, const char *d)
{
	if (model_default_domain(d))
		d = "";
	for (size_t i = 0; i < c->m->n_opset_import; i++) {
		const char *od = c->m->opset_import[i]->domain;
		if (model_default_domain(od))
			od = "";
		if (strcmp(od, d) == 0)
			return 1;
	}
	for (size_t i = 0; i < c->m->n_functions; i++)
		if (c->m->functions[i]->domain && strcmp(c->m->functions[i]->domain, d) == 0)
			return 1;
	return 0;
}

/* Inputs and outputs of the default-domain ops the passes read, as every
 * opset allows them (counting optional ones, given or ""): the passes then
 * index node->input[] and ->output[] without checking each time. */
typedef struct {
	const char *op;
	unsigned char inmin, inmax, outmin, outmax;
} Arity;

static const Arity ARITY[] = { /* alphabetical; found by g_op_entry */
	{ "Abs", 1, 1, 1, 1 }, { "Add", 2, 2, 1, 1 }, { "Cast", 1, 1, 1, 1 }, { "Clip", 1, 3, 1, 1 },
	{ "Concat", 1, 255, 1, 1 }, { "Constant", 0, 0, 1, 1 }, { "ConstantOfShape", 1, 1, 1, 1 },
	{ "Conv", 2, 3, 1, 1 }, { "Div", 2, 2, 1, 1 }, { "Equal", 2, 2, 1, 1 }, { "Exp", 1, 1, 1, 1 },
	{ "Expand", 2, 2, 1, 1 }, { "Flatten", 1, 1, 1, 1 }, { "Gather", 2, 2, 1, 1 },
	{ "GatherElements", 2, 2, 1, 1 }, { "Identity", 1, 1, 1, 1 }, { "If", 1, 1, 1, 255 },
	{ "LogSoftmax", 1, 1, 1, 1 }, { "MatMul", 2, 2, 1, 1 }, { "Max", 1, 255, 1, 1 },
	{ "Min", 1, 255, 1, 1 }, { "Mul", 2, 2, 1, 1 }, { "Neg", 1, 1, 1, 1 }, { "NonZero", 1, 1, 1, 1 },
	{ "Pow", 2, 2, 1, 1 }, { "Reciprocal", 1, 1, 1, 1 }, { "Relu", 1, 1, 1, 1 },
	{ "Reshape", 1, 2, 1, 1 }, { "ScatterElements", 3, 3, 1, 1 }, { "ScatterND", 3, 3, 1, 1 },
	{ "Shape", 1, 1, 1, 1 }, { "Sigmoid", 1, 1, 1, 1 }, { "Softmax", 1, 1, 1, 1 },
	{ "Sqrt", 1, 1, 1, 1 }, { "Squeeze", 1, 2, 1, 1 }, { "Sub", 2, 2, 1, 1 }, { "TopK", 1, 2, 2, 2 },
	{ "Transpose", 1, 1, 1, 1 }, { "Unsqueeze", 1, 2, 1, 1 }, { "Where", 3, 3, 1, 1 },
};

static const char *range(char *buf, size_t n, int lo, int hi)
{
	if (lo == hi)
		snprintf(buf, n, "%d", lo);
	else if (hi == 255)
		snprintf(buf, n, "at least %d", lo);
	else
		snprintf(buf, n, "%d to %d", lo, hi);
	return buf;
}

static OpIndex ARITY_IX = OP_INDEX(ARITY);

static int check_arity(const Node *n, const char *nn, Err *e)
{
	if (!model_default_domain(n->domain))
		return 0;
	const Arity *ar = g_op_entry(&ARITY_IX, n->op_type);
	char r[32];
	if (!ar)
		return 0;
	if (n->n_input < ar->inmin || n->n_input > ar->inmax)
		return errf(e, "node '%s' (%s) has %zu input%s; %s takes %s", nn, n->op_type, n->n_input,
			    n->n_input == 1 ? "" : "s", n->op_type, range(r, sizeof r, ar->inmin, ar->inmax));
	if (n->n_output < ar->outmin || n->n_output > ar->outmax)
		return errf(e, "node '%s' (%s) has %zu output%s; %s gives %s", nn, n->op_type, n->n_output,
			    n->n_output == 1 ? "" : "s", n->op_type, range(r, sizeof r, ar->outmin, ar->outmax));
	return 0;
}

/* An If runs one of two bodies in its place: both must be there and give
 * as many outputs as the If has. */
static int check_if(const Node *n, const char *nn, Err *e)
{
	if (!model_default_domain(n->domain) || strcmp(n->op_type, "If"))
		return 0;
	static const char *const br[2] = { "then_branch", "else_branch" };
	for (int i = 0; i < 2; i++) {
		const Onnx__AttributeProto *a = g_attr(n, br[i]);
		if (!a || !a->g)
			return errf(e, "node '%s' (If) has no %s graph; an If needs both branches", nn, br[i]);
		if (a->g->n_output != n->n_output)
			return errf(e, "node '%s' (If): %s gives %zu output%s, the If has %zu; both branches must give one value per If output",
				    nn, br[i], a->g->n_output, a->g->n_output == 1 ? "" : "s", n->n_output);
	}
	return 0;
}

static void mark_seen(Graph *g, const char *name, unsigned tag)
{
	Val *v = map_get(&g->val, name);
	if (v)
		v->seen = tag;
}

static int check_graph(K *k, Graph *g, int depth)
{
	Ctx *c = k->c;
	Err *e = k->e;
	if (depth > 64)
		return errf(e, "subgraphs nested more than 64 deep; refusing the model");
	Onnx__GraphProto *gp = g->gp;
	const char *gname = gp->name ? gp->name : "";
	if (!g->parent) {
		for (size_t i = 0; i < gp->n_input; i++)
			if (!has_type(gp->input[i]))
				return errf(e, "graph input '%s' has no type", gp->input[i]->name);
		for (size_t i = 0; i < gp->n_output; i++)
			if (!has_type(gp->output[i]))
				return errf(e, "graph output '%s' has no type", gp->output[i]->name);
	}
	/* Values available so far in this scope (inputs, initializers, then
	 * node outputs in order) carry this walk's tag; enclosing scopes'
	 * values are found by the index. */
	unsigned tag = ++c->checks;
	for (size_t i = 0; i < gp->n_input; i++)
		mark_seen(g, gp->input[i]->name, tag);
	for (size_t i = 0; i < gp->n_initializer; i++) {
		Val *v = g_init_at(g, i);
		if (v)
			v->seen = tag;
	}
	for (size_t i = 0; i < gp->n_node; i++) {
		Node *n = gp->node[i];
		g_node_at(c, g, i); /* what follows asks for this node's values */
		const char *nn = nname(n);
		if (!domain_known(c, n->domain))
			return errf(e, "node '%s' (%s) uses domain '%s', which opset_import does not declare",
				    nn, n->op_type, n->domain);
		if (check_arity(n, nn, e) || check_if(n, nn, e))
			return -1;
		for (size_t j = 0; j < n->n_input; j++) {
			const char *in = n->input[j];
			Val *v = g_input(c, n, j);
			if (!*in || (v && (v->g != g || v->seen == tag)))
				continue;
			if (v && v->def)
				return errf(e, "node '%s' reads '%s' before node '%s' produces it (not in topological order)",
					    nn, in, v->def->name ? v->def->name : v->def->op_type);
			return errf(e, "node '%s' reads '%s', which nothing defines%s%s", nn, in,
				    g->parent ? " in subgraph " : "", g->parent ? gname : "");
		}
		size_t s0, ns = g_subs_of(c, g, n, &s0);
		for (size_t s = s0; s < s0 + ns; s++)
			if (check_graph(k, g->sub[s], depth + 1))
				return -1;
		for (size_t j = 0; j < n->n_output; j++) {
			if (!*n->output[j])
				continue;
			Val *v = g_output(c, n, j);
			if (v && v->seen == tag)
				return errf(e, "value '%s' is produced twice (second time by node '%s')",
					    n->output[j], nn);
			if (v)
				v->seen = tag;
		}
	}
	for (size_t i = 0; i < gp->n_output; i++) {
		const char *o = gp->output[i]->name;
		Val *v = map_get(&g->val, o);
		if ((v && v->seen == tag) || (g->parent && g_val(g->parent, o)))
			continue;
		return errf(e, "graph output '%s' is not produced by any node", o);
	}
	return 0;
}

/* ---- tensors ---- */

static const char *dims_str(Arena *a, const int64_t *d, size_t n)
{
	char buf[512];
	size_t k = (size_t)snprintf(buf, sizeof buf, "[");
	for (size_t i = 0; i < n && k < sizeof buf - 32; i++)
		k += (size_t)snprintf(buf + k, sizeof buf - k, "%s%" PRId64, i ? "," : "", d[i]);
	snprintf(buf + k, sizeof buf - k, "%s]", k >= sizeof buf - 32 ? ",..." : "");
	return arena_strdup(a, buf);
}

/* Where a tensor sits, formatted only for a message: the checker looks
 * at every tensor, and nearly all pass. */
typedef struct {
	const char *init;  /* an initializer's name, or NULL */
	const Node *n;     /* else the node and attribute holding it */
	const char *attr;
	const char *part;  /* " (values)", " (indices)" of a sparse tensor, or "" */
} Where;

static const char *wstr(K *k, const Where *w)
{
	if (w->init)
		return arena_printf(k->a, "initializer '%s'%s", w->init, w->part);
	if (w->n)
		return arena_printf(k->a, "node '%s' (%s) attribute '%s'%s", nname(w->n), w->n->op_type, w->attr, w->part);
	return arena_printf(k->a, "sparse initializer%s", w->part);
}

static const char *ext_get(const Tensor *t, const char *key)
{
	for (size_t i = 0; i < t->n_external_data; i++)
		if (t->external_data[i]->key && !strcmp(t->external_data[i]->key, key))
			return t->external_data[i]->value ? t->external_data[i]->value : "";
	return NULL;
}

/* A non-negative decimal external_data value; absent: dflt. */
static int ext_num(K *k, const Tensor *t, const Where *wh, const char *key, int64_t dflt, int64_t *v)
{
	const char *s = ext_get(t, key);
	*v = dflt;
	if (!s)
		return 0;
	int64_t x = 0;
	if (!*s)
		goto bad;
	for (const char *p = s; *p; p++)
		if (*p < '0' || *p > '9' || __builtin_mul_overflow(x, 10, &x) || __builtin_add_overflow(x, *p - '0', &x))
			goto bad;
	*v = x;
	return 0;
bad:
	return errf(k->e, "%s: external data %s '%s' is not a non-negative integer; fix the model's external_data entry", wstr(k, wh), key, s);
}

/* Which typed field holds a type's values, and how many per element. */
static const char *typed_field(int dt, int *per)
{
	*per = 1;
	switch (dt) {
	case 1: return "float_data";
	case 14: *per = 2; return "float_data";
	case 2: case 3: case 4: case 5: case 6: case 9: case 10: case 16:
	case 17: case 18: case 19: case 20:
		return "int32_data";
	case 7: return "int64_data";
	case 8: return "string_data";
	case 11: return "double_data";
	case 15: *per = 2; return "double_data";
	case 12: case 13: return "uint64_data";
	}
	return NULL;
}

#define what wstr(k, wh)

static int check_tensor(K *k, const Tensor *t, const Where *wh)
{
	Err *e = k->e;
	int dt = t->has_data_type ? t->data_type : 0;
	if (!elem_valid(dt))
		return errf(e, "%s: data_type %d is not an element type the ONNX schema of this build defines; fix the tensor's data_type", what, dt);
	int64_t n = 1;
	for (size_t i = 0; i < t->n_dims; i++) {
		if (t->dims[i] < 0)
			return errf(e, "%s: dims %s: dimension %zu is %" PRId64 "; dimensions are non-negative, fix the tensor's dims",
				    what, dims_str(k->a, t->dims, t->n_dims), i, t->dims[i]);
		if (__builtin_mul_overflow(n, t->dims[i], &n))
			return errf(e, "%s: dims %s overflow: their product exceeds 2^63 elements; fix the tensor's dims",
				    what, dims_str(k->a, t->dims, t->n_dims));
	}
	size_t es = elem_size(dt);
	int64_t need = -1;
	if (es && __builtin_mul_overflow(n, (int64_t)es, &need))
		return errf(e, "%s: dims %s of %s overflow: %" PRId64 " elements of %zu bytes exceed 2^63 bytes; fix the tensor's dims",
			    what, dims_str(k->a, t->dims, t->n_dims), elem_name(dt), n, es);
	if (t->has_data_location && t->data_location == ONNX__TENSOR_PROTO__DATA_LOCATION__EXTERNAL) {
		const char *loc = ext_get(t, "location");
		if (!loc || !*loc)
			return errf(e, "%s: data_location is EXTERNAL but there is no 'location'; fix the model's external_data entry", what);
		int64_t off, len, end;
		if (ext_num(k, t, wh, "offset", 0, &off) || ext_num(k, t, wh, "length", need, &len))
			return -1;
		if (__builtin_add_overflow(off, len < 0 ? 0 : len, &end))
			return errf(e, "%s: external data offset %" PRId64 " + length %" PRId64 " overflow; fix the model's external_data entry", what, off, len);
		if (need >= 0 && len != need)
			return errf(e, "%s: external data in '%s' holds %" PRId64 " bytes but its dims %s of %s need %" PRId64 "; the model and its data disagree",
				    what, loc, len, dims_str(k->a, t->dims, t->n_dims), elem_name(dt), need);
		return 0;
	}
	/* Exactly one field holds the values (none for an empty tensor). */
	static const char *const fields[] = { "raw_data", "float_data", "int32_data", "string_data",
					      "int64_data", "double_data", "uint64_data" };
	size_t cnt[7] = { t->has_raw_data ? t->raw_data.len : 0, t->n_float_data, t->n_int32_data,
			  t->n_string_data, t->n_int64_data, t->n_double_data, t->n_uint64_data };
	int used = -1;
	for (int i = 0; i < 7; i++) {
		if (!cnt[i])
			continue;
		if (used >= 0)
			return errf(e, "%s holds values in both %s and %s; keep one", what, fields[used], fields[i]);
		used = i;
	}
	if (used < 0) {
		if (n)
			return errf(e, "%s: dims %s give %" PRId64 " element%s but the tensor holds no data; fix the tensor",
				    what, dims_str(k->a, t->dims, t->n_dims), n, n == 1 ? "" : "s");
		return 0;
	}
	if (used == 0) {
		if (!es)
			return errf(e, "%s: %s values cannot be stored in raw_data; use string_data", what, elem_name(dt));
		if ((uint64_t)need != cnt[0])
			return errf(e, "%s: raw_data holds %zu bytes, but dims %s of %s need %" PRId64 "; the tensor's data and dims disagree",
				    what, cnt[0], dims_str(k->a, t->dims, t->n_dims), elem_name(dt), need);
		return 0;
	}
	int per;
	const char *want = typed_field(dt, &per);
	if (!want || strcmp(want, fields[used]))
		return errf(e, "%s: %s values belong in %s, but the tensor stores them in %s; fix the tensor", what, elem_name(dt),
			    want ? want : "raw_data", fields[used]);
	int64_t want_n;
	if (__builtin_mul_overflow(n, (int64_t)per, &want_n) || (uint64_t)want_n != cnt[used])
		return errf(e, "%s: %s holds %zu value%s, but dims %s of %s need %" PRId64 "; the tensor's data and dims disagree",
			    what, fields[used], cnt[used], cnt[used] == 1 ? "" : "s", dims_str(k->a, t->dims, t->n_dims),
			    elem_name(dt), n * per);
	return 0;
}

#undef what

static int check_sparse(K *k, const Onnx__SparseTensorProto *s, Where wh)
{
	wh.part = " (values)";
	if (s->values && check_tensor(k, s->values, &wh))
		return -1;
	wh.part = " (indices)";
	if (s->indices && check_tensor(k, s->indices, &wh))
		return -1;
	wh.part = "";
	for (size_t i = 0; i < s->n_dims; i++)
		if (s->dims[i] < 0)
			return errf(k->e, "%s: dims %s: dimension %zu is negative; fix the sparse tensor's dims", wstr(k, &wh),
				    dims_str(k->a, s->dims, s->n_dims), i);
	return 0;
}

static int tensors_in_nodes(K *k, Onnx__NodeProto **node, size_t nn, int depth);

static int tensors_in_graph(K *k, const Onnx__GraphProto *gp, int depth)
{
	if (depth > 64)
		return errf(k->e, "subgraphs nested more than 64 deep; refusing the model");
	for (size_t i = 0; i < gp->n_initializer; i++) {
		Where wh = { gp->initializer[i]->name, NULL, NULL, "" };
		if (check_tensor(k, gp->initializer[i], &wh))
			return -1;
	}
	for (size_t i = 0; i < gp->n_sparse_initializer; i++)
		if (check_sparse(k, gp->sparse_initializer[i], (Where){ NULL, NULL, NULL, "" }))
			return -1;
	return tensors_in_nodes(k, gp->node, gp->n_node, depth);
}

static int tensors_in_nodes(K *k, Onnx__NodeProto **node, size_t nn, int depth)
{
	for (size_t i = 0; i < nn; i++) {
		const Node *n = node[i];
		for (size_t j = 0; j < n->n_attribute; j++) {
			const Onnx__AttributeProto *a = n->attribute[j];
			Where wh = { NULL, n, a->name, "" };
			if (a->t && check_tensor(k, a->t, &wh))
				return -1;
			for (size_t q = 0; q < a->n_tensors; q++)
				if (check_tensor(k, a->tensors[q], &wh))
					return -1;
			if (a->sparse_tensor && check_sparse(k, a->sparse_tensor, wh))
				return -1;
			for (size_t q = 0; q < a->n_sparse_tensors; q++)
				if (check_sparse(k, a->sparse_tensors[q], wh))
					return -1;
			if (a->g && tensors_in_graph(k, a->g, depth + 1))
				return -1;
			for (size_t q = 0; q < a->n_graphs; q++)
				if (tensors_in_graph(k, a->graphs[q], depth + 1))
					return -1;
		}
	}
	return 0;
}

/* ---- element types and attribute ranges ---- */

/* What inference found for input i of n: through the node's index entry,
 * not its name (the checker asks a few times per node). */
static const Ty *in_ty(const K *k, const Node *n, size_t i)
{
	const Val *v = g_input(k->c, n, i);
	return v ? v->ty : NULL;
}

enum { I32 = 6, I64 = 7, BOOL = 9 };

/* What the checker asks of each default-domain op, found once per node. */
enum {
	O_SAME = 1 << 0,     /* every operand of one element type */
	O_LOGIC = 1 << 1,    /* bool operands */
	O_WINDOW = 1 << 2,   /* Conv, ConvTranspose, pools: group, pads, strides, kernel */
	O_AXIS0 = 1 << 3,    /* an 'axis' attribute within the rank */
	O_AXISLAST = 1 << 4, /* the same, defaulting to -1 */
	O_OWN = 1 << 5,      /* rules of its own, below */
};

typedef struct {
	unsigned char in, from; /* input index; the opset since which it is an input */
	unsigned char i32;      /* int32 allowed besides int64 */
	const char *what;       /* NULL ends the list */
} Idx;

typedef struct {
	const char *op;
	unsigned flags;
	Idx idx[4]; /* index and shape inputs: integers of the kind the op takes */
} OpInfo;

static const OpInfo OPS[] = { /* alphabetical; found by g_op_entry */
	{ "Add", O_SAME, { { 0 } } },
	{ "And", O_LOGIC | O_SAME, { { 0 } } },
	{ "ArgMax", O_AXIS0, { { 0 } } },
	{ "ArgMin", O_AXIS0, { { 0 } } },
	{ "AveragePool", O_WINDOW, { { 0 } } },
	{ "BitShift", O_SAME, { { 0 } } },
	{ "Cast", O_OWN, { { 0 } } },
	{ "Clip", O_OWN, { { 0 } } },
	{ "Concat", O_SAME | O_AXIS0, { { 0 } } },
	{ "ConstantOfShape", 0, { { 0, 9, 0, "shape" } } },
	{ "Conv", O_SAME | O_WINDOW, { { 0 } } },
	{ "ConvTranspose", O_SAME | O_WINDOW, { { 0 } } },
	{ "CumSum", 0, { { 1, 11, 1, "axis" } } },
	{ "Div", O_SAME, { { 0 } } },
	{ "Equal", O_SAME, { { 0 } } },
	{ "Expand", 0, { { 1, 1, 0, "shape" } } },
	{ "Flatten", O_OWN, { { 0 } } },
	{ "Gather", O_AXIS0, { { 1, 1, 1, "indices" } } },
	{ "GatherElements", O_AXIS0, { { 1, 1, 1, "indices" } } },
	{ "GatherND", 0, { { 1, 1, 0, "indices" } } },
	{ "Gemm", O_SAME, { { 0 } } },
	{ "Greater", O_SAME, { { 0 } } },
	{ "GreaterOrEqual", O_SAME, { { 0 } } },
	{ "Hardmax", O_AXISLAST, { { 0 } } },
	{ "If", O_OWN, { { 0 } } },
	{ "InstanceNormalization", O_SAME, { { 0 } } },
	{ "LayerNormalization", O_AXISLAST, { { 0 } } },
	{ "Less", O_SAME, { { 0 } } },
	{ "LessOrEqual", O_SAME, { { 0 } } },
	{ "LogSoftmax", O_AXISLAST, { { 0 } } },
	{ "Loop", O_OWN, { { 0 } } },
	{ "LpPool", O_WINDOW, { { 0 } } },
	{ "MatMul", O_SAME, { { 0 } } },
	{ "Max", O_SAME, { { 0 } } },
	{ "MaxPool", O_WINDOW, { { 0 } } },
	{ "Mean", O_SAME, { { 0 } } },
	{ "Min", O_SAME, { { 0 } } },
	{ "Mod", O_SAME, { { 0 } } },
	{ "Mul", O_SAME, { { 0 } } },
	{ "Not", O_LOGIC, { { 0 } } },
	{ "Or", O_LOGIC | O_SAME, { { 0 } } },
	{ "PRelu", O_SAME, { { 0 } } },
	{ "Pad", 0, { { 1, 11, 0, "pads" } } },
	{ "Range", O_SAME, { { 0 } } },
	{ "ReduceL1", 0, { { 1, 18, 0, "axes" } } },
	{ "ReduceL2", 0, { { 1, 18, 0, "axes" } } },
	{ "ReduceLogSumExp", 0, { { 1, 18, 0, "axes" } } },
	{ "ReduceMax", 0, { { 1, 18, 0, "axes" } } },
	{ "ReduceMean", 0, { { 1, 18, 0, "axes" } } },
	{ "ReduceMin", 0, { { 1, 18, 0, "axes" } } },
	{ "ReduceProd", 0, { { 1, 18, 0, "axes" } } },
	{ "ReduceSum", 0, { { 1, 13, 0, "axes" } } },
	{ "ReduceSumSquare", 0, { { 1, 18, 0, "axes" } } },
	{ "Reshape", O_OWN, { { 1, 5, 0, "shape" } } },
	{ "Resize", 0, { { 3, 11, 0, "sizes" } } },
	{ "Scatter", 0, { { 1, 1, 1, "indices" } } },
	{ "ScatterElements", O_AXIS0, { { 1, 1, 1, "indices" } } },
	{ "ScatterND", 0, { { 1, 1, 0, "indices" } } },
	{ "Slice", O_OWN, { { 1, 10, 1, "starts" }, { 2, 10, 1, "ends" }, { 3, 10, 1, "axes" }, { 4, 10, 1, "steps" } } },
	{ "Softmax", O_AXISLAST, { { 0 } } },
	{ "Split", O_AXIS0, { { 1, 13, 0, "split" } } },
	{ "Squeeze", O_OWN, { { 1, 13, 0, "axes" } } },
	{ "Sub", O_SAME, { { 0 } } },
	{ "Sum", O_SAME, { { 0 } } },
	{ "Tile", 0, { { 1, 6, 0, "repeats" } } },
	{ "TopK", O_OWN | O_AXISLAST, { { 1, 10, 0, "K" } } },
	{ "Transpose", O_OWN, { { 0 } } },
	{ "Unsqueeze", O_OWN, { { 1, 13, 0, "axes" } } },
	{ "Where", O_OWN, { { 0 } } },
	{ "Xor", O_LOGIC | O_SAME, { { 0 } } },
};
static OpIndex OPS_IX = OP_INDEX(OPS);

static int in_elem(K *k, const Node *n, size_t i)
{
	const Val *v = g_input(k->c, n, i);
	return v && v->ty ? v->ty->elem : 0;
}

/* Inputs lo..hi (those given) must share one element type; why NULL:
 * "OP needs one element type for its operands". */
static int same_type(K *k, const Graph *g, const Node *n, size_t lo, size_t hi, const char *why)
{
	int t0 = 0;
	size_t i0 = 0;
	for (size_t i = lo; i <= hi && i < n->n_input; i++) {
		int t = in_elem(k, n, i);
		if (!t)
			continue;
		if (!t0) {
			t0 = t;
			i0 = i;
		} else if (t != t0) {
			return errf(k->e, "node '%s' (%s): input '%s' is %s but input '%s' is %s; %s (insert a Cast)",
				    nname(n), n->op_type, n->input[i], elem_name(t), n->input[i0], elem_name(t0),
				    why ? why : arena_printf(k->a, "%s needs one element type for its operands", n->op_type));
		}
	}
	return 0;
}

static int want_type(K *k, const Graph *g, const Node *n, size_t i, int a, int b, const char *what)
{
	if (i >= n->n_input || !*n->input[i])
		return 0;
	int t = in_elem(k, n, i);
	if (!t || t == a || t == b)
		return 0;
	return errf(k->e, "node '%s' (%s): %s '%s' is %s; %s needs %s%s%s there", nname(n), n->op_type, what,
		    n->input[i], elem_name(t), n->op_type, elem_name(a), b ? " or " : "", b ? elem_name(b) : "");
}

static int check_types(K *k, const Graph *g, const Node *n, const OpInfo *oi, int opset)
{
	if (oi->flags & O_LOGIC)
		for (size_t i = 0; i < n->n_input; i++)
			if (want_type(k, g, n, i, BOOL, 0, "operand"))
				return -1;
	if ((oi->flags & O_SAME) && same_type(k, g, n, 0, SIZE_MAX, NULL))
		return -1;
	for (const Idx *x = oi->idx; x < oi->idx + 4 && x->what; x++)
		if (opset >= x->from && want_type(k, g, n, x->in, I64, x->i32 ? I32 : 0, x->what))
			return -1;
	if (!(oi->flags & O_OWN))
		return 0;
	if (g_is(n, "Where") && (want_type(k, g, n, 0, BOOL, 0, "condition") ||
				 same_type(k, g, n, 1, 2, "Where's two branches need one element type")))
		return -1;
	if (g_is(n, "Clip") && opset >= 11 && same_type(k, g, n, 0, 2, "Clip's bounds need the input's element type"))
		return -1;
	if (g_is(n, "If") && want_type(k, g, n, 0, BOOL, 0, "condition"))
		return -1;
	if (g_is(n, "Loop") && (want_type(k, g, n, 0, I64, 0, "trip count") || want_type(k, g, n, 1, BOOL, 0, "condition")))
		return -1;
	if (g_is(n, "Slice") && opset >= 10 && same_type(k, g, n, 1, 4, "Slice's starts, ends, axes and steps need one element type"))
		return -1;
	if (g_is(n, "Cast")) {
		const Onnx__AttributeProto *a = g_attr(n, "to");
		if (!a || !a->has_i)
			return errf(k->e, "node '%s' (Cast) has no 'to' attribute; Cast needs its target element type", nname(n));
		if (a->i < INT32_MIN || a->i > INT32_MAX || !elem_valid((int)a->i))
			return errf(k->e, "node '%s' (Cast): 'to' is %" PRId64 ", which is not an ONNX element type; fix the Cast", nname(n), a->i);
	}
	return 0;
}

/* A value declared with one element type and computed with another: only
 * declared values can disagree, so only they are looked at. */
static int check_declared(K *k, Graph *g)
{
	Onnx__ValueInfoProto **lists[] = { g->gp->output, g->gp->value_info };
	size_t ns[] = { g->gp->n_output, g->gp->n_value_info };
	for (int l = 0; l < 2; l++)
		for (size_t i = 0; i < ns[l]; i++) {
			Val *v = map_get(&g->val, lists[l][i]->name);
			const Ty *t = v ? v->ty : NULL;
			if (t && v->def && t->decl && t->elem && t->decl != t->elem)
				return errf(k->e, "node '%s' (%s) makes '%s' %s, but the model declares it %s; fix the declaration or insert a Cast",
					    nname(v->def), v->def->op_type, v->name, elem_name(t->elem), elem_name(t->decl));
		}
	return 0;
}

/* An axis attribute within [-r, r-1] (or [-r, r] when end is allowed). */
static int axis_ok(K *k, const Node *n, const char *attr, int r, int end)
{
	const Onnx__AttributeProto *a = g_attr(n, attr);
	if (r < 0 || !a || !a->has_i)
		return 0;
	int64_t x = a->i, hi = end ? r : r - 1;
	if (x < -(int64_t)r || x > hi)
		return errf(k->e, "node '%s' (%s): %s %" PRId64 " is outside [%d, %" PRId64 "] for a rank-%d input; fix the attribute",
			    nname(n), n->op_type, attr, x, -r, hi, r);
	return 0;
}

static int ints_attr(const Node *n, const char *name, const int64_t **v)
{
	const Onnx__AttributeProto *a = g_attr(n, name);
	if (!a)
		return -1;
	*v = a->ints;
	return (int)a->n_ints;
}

/* Conv, ConvTranspose, pools: group, pads, strides, dilations, kernel. */
static int check_window(K *k, const Node *n)
{
	int conv = g_is(n, "Conv") || g_is(n, "ConvTranspose");
	const Ty *x = in_ty(k, n, 0), *w = in_ty(k, n, 1);
	int r = ty_rank(x);
	if (r < 0 && conv)
		r = ty_rank(w);
	int sp = r >= 2 ? r - 2 : -1;
	int64_t grp = g_attr_i(n, "group", 1);
	if (conv && grp < 1)
		return errf(k->e, "node '%s' (%s): group is %" PRId64 "; it must be at least 1", nname(n), n->op_type, grp);
	static const struct {
		const char *name;
		int64_t min;
		int twice;
	} A[] = { { "pads", 0, 1 }, { "strides", 1, 0 }, { "dilations", 1, 0 }, { "kernel_shape", 1, 0 } };
	const int64_t *v[4] = { NULL };
	int cnt[4];
	for (int i = 0; i < 4; i++) {
		cnt[i] = ints_attr(n, A[i].name, &v[i]);
		for (int j = 0; j < cnt[i]; j++)
			if (v[i][j] < A[i].min)
				return errf(k->e, "node '%s' (%s): %s[%d] is %" PRId64 "; %s must be %s", nname(n), n->op_type,
					    A[i].name, j, v[i][j], A[i].name, A[i].min ? "at least 1" : "non-negative");
		if (cnt[i] >= 0 && sp >= 0 && cnt[i] != (A[i].twice ? 2 : 1) * sp)
			return errf(k->e, "node '%s' (%s): %s has %d values; a rank-%d input needs %d", nname(n), n->op_type,
				    A[i].name, cnt[i], r, (A[i].twice ? 2 : 1) * sp);
	}
	if (!conv && cnt[3] < 0 && !strstr(n->op_type, "Global"))
		return errf(k->e, "node '%s' (%s) has no kernel_shape; %s needs one", nname(n), n->op_type, n->op_type);
	if (conv) {
		int64_t c = ty_dim(x, 1), w0 = ty_dim(w, 0), w1 = ty_dim(w, 1);
		int tr = g_is(n, "ConvTranspose");
		if (!tr && c >= 0 && w1 >= 0 && (c % grp || c / grp != w1))
			return errf(k->e, "node '%s' (Conv): the input has %" PRId64 " channels, but group %" PRId64 " with a weight of %" PRId64 " input channels per group reads a multiple of %" PRId64 "; group must divide the channels and match the weight",
				    nname(n), c, grp, w1, w1);
		if (!tr && w0 >= 0 && w0 % grp)
			return errf(k->e, "node '%s' (Conv): group %" PRId64 " does not divide the weight's %" PRId64 " output channels; fix group or the weight",
				    nname(n), grp, w0);
		if (tr && c >= 0 && (c % grp || (w0 >= 0 && w0 != c)))
			return errf(k->e, "node '%s' (ConvTranspose): the input has %" PRId64 " channels, group %" PRId64 ", weight's first dimension %" PRId64 "; group must divide the channels and the weight have one row per channel",
				    nname(n), c, grp, w0);
	}
	/* The (dilated) kernel must fit the padded input. */
	if (sp <= 0 || ty_rank(x) != r)
		return 0;
	int same = 0;
	const Onnx__AttributeProto *ap = g_attr(n, "auto_pad");
	if (ap && ap->has_s)
		same = ap->s.len >= 4 && !memcmp(ap->s.data, "SAME", 4);
	int valid = ap && ap->has_s && ap->s.len == 5 && !memcmp(ap->s.data, "VALID", 5);
	if (same || g_is(n, "ConvTranspose"))
		return 0;
	for (int i = 0; i < sp; i++) {
		int64_t in = ty_dim(x, 2 + i);
		int64_t ks = cnt[3] == sp ? v[3][i] : conv ? ty_dim(w, 2 + i) : -1;
		int64_t d = cnt[2] == sp ? v[2][i] : 1;
		int64_t pad = 0, ek, avail;
		if ((!valid && cnt[0] == 2 * sp && __builtin_add_overflow(v[0][i], v[0][sp + i], &pad)) || in < 0 || ks < 1 ||
		    __builtin_mul_overflow(ks - 1, d, &ek) || __builtin_add_overflow(ek, 1, &ek) ||
		    __builtin_add_overflow(in, pad, &avail))
			continue;
		if (ek > avail)
			return errf(k->e, "node '%s' (%s): the kernel spans %" PRId64 " along spatial axis %d, the padded input only %" PRId64 "; fix kernel_shape, dilations or pads",
				    nname(n), n->op_type, ek, i, avail);
	}
	return 0;
}

static int check_attrs(K *k, const Node *n, const OpInfo *oi, int opset)
{
	if ((oi->flags & O_WINDOW) && check_window(k, n))
		return -1;
	if (!(oi->flags & (O_AXIS0 | O_AXISLAST | O_OWN)))
		return 0;
	const Ty *x = in_ty(k, n, 0);
	int r = ty_rank(x);
	if (((oi->flags & (O_AXIS0 | O_AXISLAST)) && axis_ok(k, n, "axis", r, 0)) ||
	    (g_is(n, "Flatten") && axis_ok(k, n, "axis", r, 1)))
		return -1;
	if (g_is(n, "TopK")) {
		int64_t kk = TY_UNK, v;
		const Onnx__AttributeProto *a = g_attr(n, "k");
		if (opset < 10 && a && a->has_i)
			kk = a->i;
		else if (opset >= 10 && ty_val(in_ty(k, n, 1), 0, &v))
			kk = v;
		if (kk != TY_UNK && kk < 0)
			return errf(k->e, "node '%s' (TopK): K is %" PRId64 "; it must be non-negative", nname(n), kk);
		int64_t ax = g_attr_i(n, "axis", -1), d = r >= 0 ? ty_dim(x, ax) : -1;
		if (kk != TY_UNK && d >= 0 && kk > d)
			return errf(k->e, "node '%s' (TopK): K is %" PRId64 " but axis %" PRId64 " has %" PRId64 " element%s; K must not exceed it",
				    nname(n), kk, ax, d, d == 1 ? "" : "s");
	}
	if (g_is(n, "Transpose") && r >= 0) {
		const int64_t *p;
		int np = ints_attr(n, "perm", &p);
		if (np >= 0) {
			unsigned char seen[TY_MAXRANK] = { 0 };
			int ok = np == r;
			for (int i = 0; ok && i < np; i++) {
				ok = p[i] >= 0 && p[i] < r && !seen[p[i]];
				if (ok)
					seen[p[i]] = 1;
			}
			if (!ok)
				return errf(k->e, "node '%s' (Transpose): perm is not a permutation of the input's %d axes; fix perm", nname(n), r);
		}
	}
	if ((g_is(n, "Unsqueeze") || g_is(n, "Squeeze")) && r >= 0) {
		int64_t ax[TY_MAXRANK];
		int na = -1;
		if (opset < 13) {
			const int64_t *p;
			na = ints_attr(n, "axes", &p);
			if (na > TY_MAXRANK)
				na = -1;
			for (int i = 0; i < na; i++)
				ax[i] = p[i];
		} else if (n->n_input > 1 && *n->input[1]) {
			const Ty *t = in_ty(k, n, 1);
			na = t && t->val && t->nval <= TY_MAXRANK ? t->nval : -1;
			for (int i = 0; i < na; i++)
				if ((ax[i] = t->val[i]) == TY_UNK)
					na = -1;
		}
		int out = g_is(n, "Unsqueeze") ? r + na : r;
		unsigned char seen[2 * TY_MAXRANK + 1] = { 0 };
		for (int i = 0; i < na; i++) {
			int64_t a = ax[i] < 0 ? ax[i] + out : ax[i];
			if (a < 0 || a >= out || seen[a])
				return errf(k->e, "node '%s' (%s): axis %" PRId64 " is outside the %d axes of %s or repeated; fix axes",
					    nname(n), n->op_type, ax[i], out, g_is(n, "Unsqueeze") ? "the output" : "the input");
			seen[a] = 1;
		}
	}
	if (g_is(n, "Reshape") && opset >= 5) {
		const Ty *t = in_ty(k, n, 1);
		int minus = 0;
		for (int i = 0; t && t->val && i < t->nval; i++) {
			if (t->val[i] != TY_UNK && t->val[i] < -1)
				return errf(k->e, "node '%s' (Reshape): shape[%d] is %" PRId64 "; entries are -1, 0 or sizes", nname(n), i, t->val[i]);
			if (t->val[i] == -1 && minus++)
				return errf(k->e, "node '%s' (Reshape): shape has more than one -1; at most one dimension can be inferred", nname(n));
		}
	}
	return 0;
}

static int check_nodes(K *k, Graph *g, int opset)
{
	Onnx__GraphProto *gp = g->gp;
	for (size_t i = 0; i < gp->n_node; i++) {
		Node *n = gp->node[i];
		g_node_at(k->c, g, i); /* its input types are asked next */
		const OpInfo *oi = model_default_domain(n->domain) ? g_op_entry(&OPS_IX, n->op_type) : NULL;
		if (oi && (check_types(k, g, n, oi, opset) || check_attrs(k, n, oi, opset)))
			return -1;
	}
	/* After the nodes: a mismatch there is the cause of one here. */
	if (check_declared(k, g))
		return -1;
	for (size_t i = 0; i < g->nsub; i++)
		if (check_nodes(k, g->sub[i], opset))
			return -1;
	return 0;
}

int g_check_flow(Ctx *c, Err *e)
{
	K k = { .c = c, .a = arena_new(), .e = e };
	int rc = check_opsets(&k) || check_graph(&k, c->g, 0);
	arena_free(k.a);
	return rc ? -1 : 0;
}

int g_check_rest(Ctx *c, Err *e)
{
	K k = { .c = c, .a = arena_new(), .e = e };
	int rc = tensors_in_graph(&k, c->m->graph, 0);
	for (size_t i = 0; !rc && i < c->m->n_functions; i++)
		rc = tensors_in_nodes(&k, c->m->functions[i]->node, c->m->functions[i]->n_node, 0);
	if (!rc && !c->inferred)
		rc = g_infer(c, e) != 0;
	if (!rc)
		rc = check_nodes(&k, c->g, c->opset) != 0;
	arena_free(k.a);
	return rc ? -1 : 0;
}

int g_check(Ctx *c, Err *e)
{
	return g_check_flow(c, e) || g_check_rest(c, e) ? -1 : 0;
}
