/* Shape-guard If folding. With a dynamic batch the exporter cannot see that
 * a dimension is 1 and guards `squeeze(d)` with
 *   If(Equal(Gather(Shape(t), d), 1)) { Squeeze(t, d) } else { Identity(t) }.
 * Deployment runtimes reject If. When the inferred shape of t (src/infer.h)
 * says the dimension is 1, the If is replaced by the Squeeze. */
#include <string.h>

#include "infer.h"
#include "moe.h"

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
		int64_t one, d;
		if (g_ty_numel(g, eq->input[1 - side]) != 1 || !g_ty_val(g, eq->input[1 - side], 0, &one) || one != 1)
			continue;
		Val *gv = g_val(g, eq->input[side]);
		if (!gv || !gv->def || !g_is(gv->def, "Gather") || gv->def->n_input != 2 || g_attr_i(gv->def, "axis", 0) != 0)
			continue;
		Val *sv = g_val(g, gv->def->input[0]);
		if (g_ty_numel(g, gv->def->input[1]) != 1 || !g_ty_val(g, gv->def->input[1], 0, &d) || !sv || !sv->def ||
		    !g_is(sv->def, "Shape") || sv->def->n_input < 1 || g_attr(sv->def, "start") ||
		    strcmp(sv->def->input[0], sq->input[0]))
			continue;
		gd->sq = sq;
		gd->t = sq->input[0];
		gd->d = d;
		return 1;
	}
	return 0;
}

/* The proof is the inference's: the guarded dimension of t is 1 (a
 * negative d counts from the end, as Gather's index does). */
static int match(Ctx *c, Node *n, void *st)
{
	Guard *gd = st;
	Val *out = n->n_output ? g_output(c, n, 0) : NULL;
	return out && (out->nuse || out->isout) && match_guard(c->g, n, gd) && g_ty_dim(c->g, gd->t, gd->d) == 1;
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
		g_set_name(c, k, k->name && *k->name ? k->name : k->op_type);
		for (size_t q = 0; q < k->n_input; q++) {
			const char *r = map_get(&ren, k->input[q]);
			if (r)
				g_set_input(c, k, q, r);
		}
		if (th->node[j] == gd->sq) {
			g_rename_output(c, k, 0, n->output[0]);
		} else {
			g_fresh_output(c, k, 0, k->output[0]);
			map_put(&ren, th->node[j]->output[0], k->output[0]);
		}
	}
	g_fresh_output(c, n, 0, arena_printf(c->a, "%s_guarded", n->output[0]));
	(void)e;
	return 0;
}

int fold_shape_ifs(Ctx *c, int dry, Err *e)
{
	static const Pattern p = { "shape-guard If", "If", match, rewrite, sizeof(Guard) };
	/* An If has bodies: without any, there is nothing to fold and no
	 * shape to infer. */
	if (!c->g->nsub)
		return 0;
	/* g_rewrite keeps the inference current from round to round: a fold
	 * can make the shape behind another guard known. */
	if (!c->inferred && g_infer(c, e))
		return -1;
	return g_rewrite(c, &p, 1, dry, e);
}
