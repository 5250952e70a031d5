/* Emission helpers the dispatch rewrites share (densify, sparse): new nodes
 * in the main graph, named under one prefix as the exporter names its own
 * (/model.6/dense/Gather_2 -> ..._output_0), with axes as inputs from opset
 * 13 and as attributes before. */
#include <string.h>

#include "infer.h"
#include "moe.h"

void emit_init(Emit *m, Ctx *c, const char *pfx)
{
	m->c = c;
	m->pfx = pfx;
	m->one = NULL;
	if (c->opset >= 13) {
		int64_t one = 1;
		m->one = g_add_init_i64(c, c->g, arena_cat(c->a, pfx, "axes_1", NULL), &one, 1, 0)->name;
	}
}

const char *emit(Emit *m, const char *op, const char *const *in, size_t nin)
{
	const char *none = "";
	/* Bases in the layer's scratch: g_fresh keeps its own copy. */
	Node *n = g_add_node(m->c, m->c->g, op, arena_cat(m->c->tmp, m->pfx, op, NULL), in, nin, &none, 1);
	g_fresh_output(m->c, n, 0, arena_cat(m->c->tmp, n->name, "_output_0", NULL));
	return n->output[0];
}

Node *emit_last(const Emit *m)
{
	return m->c->g->gp->node[m->c->g->gp->n_node - 1];
}

const char *emit_axes(Emit *m, const char *op, const char *x, const int64_t *axes, size_t n)
{
	if (m->c->opset >= 13) {
		const char *a = n == 1 && axes[0] == 1 && m->one ? m->one : emit_i64(m, "axes", axes, n, 0);
		const char *in[] = { x, a };
		return emit(m, op, in, 2);
	}
	const char *out = emit(m, op, &x, 1);
	g_set_attr_ints(m->c, emit_last(m), "axes", axes, n);
	return out;
}

const char *emit_axis1(Emit *m, const char *op, const char *x)
{
	int64_t one = 1;
	return emit_axes(m, op, x, &one, 1);
}

const char *emit_gather(Emit *m, const char *x, const char *idx, int64_t axis)
{
	const char *in[] = { x, idx };
	const char *out = emit(m, "Gather", in, 2);
	g_set_attr_i(m->c, emit_last(m), "axis", axis);
	return out;
}

/* w times a bool mask as w's type: CastLike from opset 15; before, a Cast
 * to w's inferred type, float when unknown. A half export (fp16 weights)
 * before opset 15 needs the inferred type: a float mask into an fp16 Mul
 * is a type error the runtime refuses. */
const char *emit_masked(Emit *m, const char *w, const char *mask)
{
	const char *cm;
	if (m->c->opset >= 15) {
		const char *in[] = { mask, w };
		cm = emit(m, "CastLike", in, 2);
	} else {
		int to = g_ty_elem(m->c->g, w);
		cm = emit(m, "Cast", &mask, 1);
		g_set_attr_i(m->c, emit_last(m), "to", to ? to : ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT);
	}
	const char *in[] = { w, cm };
	return emit(m, "Mul", in, 2);
}

const char *emit_i64(Emit *m, const char *base, const int64_t *v, size_t n, int scalar)
{
	return g_add_init_i64(m->c, m->c->g, arena_cat(m->c->a, m->pfx, base, NULL), v, n, scalar)->name;
}

const char *emit_reshape(Emit *m, const char *x, const int64_t *shape, size_t n)
{
	const char *in[] = { x, emit_i64(m, "target", shape, n, 0) };
	return emit(m, "Reshape", in, 2);
}

const char *emit_ones_shape(Emit *m, int rank)
{
	int64_t v[16];
	v[0] = -1;
	for (int i = 1; i < rank; i++)
		v[i] = 1;
	return g_add_init_i64(m->c, m->c->g, arena_printf(m->c->a, "%sshape_%d", m->pfx, rank), v, (size_t)rank, 0)
		->name;
}
