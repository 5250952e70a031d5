/* Model-local functions inlined (src/inline.c): formals bound to the
 * call's names, internals renamed apart per call, attribute references
 * resolved from the call, subgraphs renamed with their function, nested
 * calls, and the refusals; then the model as it was, when restored. */
#include <check.h>

#include "gbuild.h"
#include "inline.h"
#include "testutil.h"

/* A local function of domain "custom", opset `opset` of the default
 * domain; its nodes are body's. */
static Onnx__FunctionProto *fn(B *b, const char *name, const char *ins, const char *outs, Onnx__GraphProto *body,
			       int opset)
{
	Onnx__FunctionProto *f = arena_alloc(b->a, sizeof *f);
	onnx__function_proto__init(f);
	f->name = arena_strdup(b->a, name);
	f->domain = "custom";
	char *v[16];
	f->n_input = b_split(b->a, ins, ',', v, 16);
	f->input = arena_dup(b->a, v, (f->n_input + 1) * sizeof *v);
	f->n_output = b_split(b->a, outs, ',', v, 16);
	f->output = arena_dup(b->a, v, (f->n_output + 1) * sizeof *v);
	f->node = body->node;
	f->n_node = body->n_node;
	Onnx__OperatorSetIdProto *o = arena_alloc(b->a, sizeof *o);
	onnx__operator_set_id_proto__init(o);
	o->domain = "";
	o->has_version = 1;
	o->version = opset;
	f->opset_import = arena_alloc(b->a, sizeof *f->opset_import);
	f->opset_import[0] = o;
	f->n_opset_import = 1;
	B_PUSH(b->a, b->m->functions, b->m->n_functions, f);
	return f;
}

/* A call of custom.op named name, with a float attribute `a` unless a < 0. */
static Node *call(B *b, Onnx__GraphProto *g, const char *op, const char *name, const char *ins, const char *outs,
		  double a)
{
	Node *n = b_node(b, g, op, ins, outs, a >= 0 ? arena_printf(b->a, "a=f:%g", a) : "");
	n->domain = "custom";
	n->name = arena_strdup(b->a, name);
	return n;
}

static void custom_opset(B *b)
{
	Onnx__OperatorSetIdProto *o = arena_alloc(b->a, sizeof *o);
	onnx__operator_set_id_proto__init(o);
	o->domain = "custom";
	o->has_version = 1;
	o->version = 1;
	B_PUSH(b->a, b->m->opset_import, b->m->n_opset_import, o);
}

/* X [1,4] -> ... -> Y, opset 17 and the domain "custom": the frame most
 * cases fill. */
static void frame(B *b)
{
	b_new(b, 17);
	custom_opset(b);
	b_in(b, NULL, "X", FLOAT, "1,4");
	b_out(b, NULL, "Y", FLOAT, "1,4");
}

/* F(x) -> (z, x): z = Relu(LeakyRelu(x, alpha = @a)); its second output
 * passes its input through. */
static void leaky(B *b, int opset)
{
	Onnx__GraphProto *body = b_graph(b, "F");
	Node *lr = b_node(b, body, "LeakyRelu", "x", "t", "alpha=f:0.01");
	lr->attribute[0]->ref_attr_name = "a";
	lr->attribute[0]->has_f = 0;
	b_node(b, body, "Relu", "t", "z", "");
	fn(b, "F", "x", "z,x", body, opset);
}

static const Node *find_op(const Onnx__GraphProto *g, const char *op, int nth)
{
	for (size_t i = 0; i < g->n_node; i++)
		if (!strcmp(g->node[i]->op_type, op) && nth-- == 0)
			return g->node[i];
	return NULL;
}

static float attr_f(const Node *n, const char *name)
{
	for (size_t i = 0; i < n->n_attribute; i++)
		if (!strcmp(n->attribute[i]->name, name)) {
			ck_assert(!n->attribute[i]->ref_attr_name || !*n->attribute[i]->ref_attr_name);
			return n->attribute[i]->f;
		}
	return -1;
}

START_TEST(two_calls_renamed_apart)
{
	B b;
	b_new(&b, 17);
	custom_opset(&b);
	b_in(&b, NULL, "X", FLOAT, "1,4");
	b_out(&b, NULL, "Y1", FLOAT, "1,4");
	b_out(&b, NULL, "P1", FLOAT, "1,4");
	b_out(&b, NULL, "Y2", FLOAT, "1,4");
	leaky(&b, 17);
	call(&b, NULL, "F", "/m/m.1/F", "X", "Y1,P1", 0.3);
	call(&b, NULL, "F", "/m/m.2/F", "X", "Y2", 0.1); /* the pass-through output unused */
	Inlined u;
	ck_assert_int_eq(model_inline(b.m, b.a, &u, &b.e), 0);
	ck_assert_uint_eq(u.n, 2);
	Onnx__GraphProto *g = b.m->graph;
	ck_assert_uint_eq(b.m->n_functions, 0);
	ck_assert_uint_eq(b.m->n_opset_import, 1); /* "custom" was the calls' alone */
	ck_assert_uint_eq(g->n_node, 5);
	const Node *id = find_op(g, "Identity", 0), *l1 = find_op(g, "LeakyRelu", 0), *l2 = find_op(g, "LeakyRelu", 1),
		   *r1 = find_op(g, "Relu", 0), *r2 = find_op(g, "Relu", 1);
	ck_assert(id && l1 && l2 && r1 && r2 && !find_op(g, "Identity", 1));
	ck_assert_str_eq(id->input[0], "X");
	ck_assert_str_eq(id->output[0], "P1");
	ck_assert_float_eq(attr_f(l1, "alpha"), 0.3f);
	ck_assert_float_eq(attr_f(l2, "alpha"), 0.1f);
	ck_assert_str_eq(l1->input[0], "X");
	ck_assert_str_eq(l1->output[0], "/m/m.1/t");
	ck_assert_str_eq(l2->output[0], "/m/m.2/t");
	ck_assert_str_eq(r1->input[0], l1->output[0]);
	ck_assert_str_eq(r1->output[0], "Y1");
	ck_assert_str_eq(r2->output[0], "Y2");
	ck_assert_str_eq(l1->name, "/m/m.1/LeakyRelu_t");
	/* the result indexes and checks as any model */
	ck_assert_int_eq(b_index(&b), 0);
	ck_assert_int_eq(g_check(&b.c, &b.e), 0);
	g_fini(&b.c);
	b.indexed = 0;
	model_uninline(b.m, &u);
	ck_assert_uint_eq(b.m->n_functions, 1);
	ck_assert_uint_eq(b.m->n_opset_import, 2);
	ck_assert_uint_eq(g->n_node, 2);
	ck_assert_str_eq(g->node[0]->op_type, "F");
	b_free(&b);
}
END_TEST

/* Calls under one module name get unique names; an attribute the call
 * does not set is left out; a subgraph reads the renamed values. */
START_TEST(subgraph_and_unset_attribute)
{
	B b;
	b_new(&b, 17);
	custom_opset(&b);
	b_in(&b, NULL, "X", FLOAT, "1,4");
	b_in(&b, NULL, "C", BOOL, "");
	b_out(&b, NULL, "Y", FLOAT, "1,4");
	b_out(&b, NULL, "Z", FLOAT, "1,4");
	Onnx__GraphProto *body = b_graph(&b, "G"), *then = b_graph(&b, "then"), *els = b_graph(&b, "else");
	b_node(&b, body, "Relu", "x", "t", "");
	b_node(&b, then, "Identity", "t", "o", "");
	b_out(&b, then, "o", FLOAT, "1,4");
	b_node(&b, els, "Neg", "t", "o2", "");
	b_out(&b, els, "o2", FLOAT, "1,4");
	Node *n = b_node(&b, body, "If", "c", "y", "");
	b_attr_g(&b, n, "then_branch", then);
	b_attr_g(&b, n, "else_branch", els);
	Node *lr = b_node(&b, body, "LeakyRelu", "y", "w", "alpha=f:0.01");
	lr->attribute[0]->ref_attr_name = "a";
	fn(&b, "G", "x,c", "w", body, 17);
	call(&b, NULL, "G", "/m/G", "X,C", "Y", -1);
	call(&b, NULL, "G", "/m/G", "Y,C", "Z", -1);
	Inlined u;
	ck_assert_int_eq(model_inline(b.m, b.a, &u, &b.e), 0);
	Onnx__GraphProto *g = b.m->graph;
	ck_assert_uint_eq(g->n_node, 6);
	const Node *r1 = find_op(g, "Relu", 0), *r2 = find_op(g, "Relu", 1), *if1 = find_op(g, "If", 0),
		   *if2 = find_op(g, "If", 1), *l1 = find_op(g, "LeakyRelu", 0);
	ck_assert_str_eq(r1->output[0], "/m/t");
	ck_assert_str_eq(r2->output[0], "/m/t_1");
	ck_assert_str_ne(r1->name, r2->name);
	ck_assert_str_eq(if1->attribute[0]->g->node[0]->input[0], "/m/t");
	ck_assert_str_eq(if2->attribute[0]->g->node[0]->input[0], "/m/t_1");
	ck_assert_str_eq(if2->attribute[1]->g->node[0]->input[0], "/m/t_1");
	ck_assert_str_ne(if1->attribute[0]->g->output[0]->name, if2->attribute[0]->g->output[0]->name);
	ck_assert_str_eq(if1->input[0], "C");
	ck_assert_uint_eq(l1->n_attribute, 0);
	ck_assert_int_eq(b_index(&b), 0);
	ck_assert_int_eq(g_check(&b.c, &b.e), 0);
	b_free(&b);
}
END_TEST

START_TEST(nested_calls)
{
	B b;
	frame(&b);
	leaky(&b, 17);
	Onnx__GraphProto *body = b_graph(&b, "H");
	call(&b, body, "F", "/h/F", "x", "y", 0.2);
	b_node(&b, body, "Neg", "y", "z", "");
	fn(&b, "H", "x", "z", body, 17);
	call(&b, NULL, "H", "/m/H", "X", "Y", -1);
	Inlined u;
	ck_assert_int_eq(model_inline(b.m, b.a, &u, &b.e), 0);
	ck_assert_uint_eq(u.n, 2);
	Onnx__GraphProto *g = b.m->graph;
	ck_assert_uint_eq(g->n_node, 3);
	ck_assert_str_eq(g->node[0]->op_type, "LeakyRelu");
	ck_assert_float_eq(attr_f(g->node[0], "alpha"), 0.2f);
	ck_assert_str_eq(g->node[0]->input[0], "X");
	ck_assert_str_eq(g->node[2]->output[0], "Y");
	ck_assert_int_eq(b_index(&b), 0);
	ck_assert_int_eq(g_check(&b.c, &b.e), 0);
	b_free(&b);
}
END_TEST

START_TEST(refused)
{
	B b;
	/* another version of the default opset than the model's */
	frame(&b);
	leaky(&b, 13);
	call(&b, NULL, "F", "/m/F", "X", "Y", 0.3);
	Inlined u;
	ck_assert_int_eq(model_inline(b.m, b.a, &u, &b.e), -1);
	tu_err_has(b.e.msg, "function 'F' uses opset 13 of domain '', the model opset 17");
	ck_assert_uint_eq(b.m->n_functions, 1); /* left as it was */
	ck_assert_uint_eq(b.m->graph->n_node, 1);
	b_free(&b);

	/* a function that calls itself */
	frame(&b);
	Onnx__GraphProto *body = b_graph(&b, "R");
	call(&b, body, "R", "/r/R", "x", "y", -1);
	fn(&b, "R", "x", "y", body, 17);
	call(&b, NULL, "R", "/m/R", "X", "Y", -1);
	ck_assert_int_eq(model_inline(b.m, b.a, &u, &b.e), -1);
	tu_err_has(b.e.msg, "nest more than 64 deep");
	b_free(&b);

	/* more inputs than the function takes */
	frame(&b);
	leaky(&b, 17);
	call(&b, NULL, "F", "/m/F", "X,X", "Y", 0.3);
	ck_assert_int_eq(model_inline(b.m, b.a, &u, &b.e), -1);
	tu_err_has(b.e.msg, "node '/m/F' calls function 'F' with 2 inputs and 1 outputs, but it has 1 and 2");
	b_free(&b);
}
END_TEST

/* A model without calls, or without functions, is not touched. */
START_TEST(untouched)
{
	B b;
	b_new(&b, 17);
	b_in(&b, NULL, "X", FLOAT, "1,4");
	b_out(&b, NULL, "Y", FLOAT, "1,4");
	b_node(&b, NULL, "Relu", "X", "Y", "");
	Node **before = b.m->graph->node;
	Inlined u;
	ck_assert_int_eq(model_inline(b.m, b.a, &u, &b.e), 0);
	ck_assert_uint_eq(u.n, 0);
	leaky(&b, 17);
	ck_assert_int_eq(model_inline(b.m, b.a, &u, &b.e), 0);
	ck_assert_uint_eq(u.n, 0);
	ck_assert_ptr_eq(b.m->graph->node, before);
	ck_assert_uint_eq(b.m->n_functions, 1);
	b_free(&b);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("inline");
	TCase *tc = tcase_create("inline");
	tcase_add_test(tc, two_calls_renamed_apart);
	tcase_add_test(tc, subgraph_and_unset_attribute);
	tcase_add_test(tc, nested_calls);
	tcase_add_test(tc, refused);
	tcase_add_test(tc, untouched);
	suite_add_tcase(s, tc);
	return tu_run(s);
}
