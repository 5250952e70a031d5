/* The checker (src/check.c): each kind of invalid model it must refuse,
 * with a one-line message naming the node or tensor, and the valid forms
 * next to them it must accept. */
#include <check.h>

#include "gbuild.h"
#include "testutil.h"

/* g_check's message on b's model, or "" when it passes. */
static const char *check(B *b)
{
	ck_assert_int_eq(g_init(&b->c, b->m, b->a, &b->e), 0);
	b->indexed = 1;
	if (g_check(&b->c, &b->e) == 0)
		return "";
	ck_assert_ptr_null(strchr(b->e.msg, '\n'));
	return arena_strdup(b->a, b->e.msg);
}

#define ck_ok(b) ck_assert_str_eq(check(b), "")
#define ck_refused(b, want) do { \
		const char *m_ = check(b); \
		ck_assert_msg(strstr(m_, (want)) != NULL, "message '%s' lacks '%s'", m_, (want)); \
	} while (0)

/* x [1,4] float -> Relu -> y, opset 17: the frame every case edits. */
static void base(B *b, int opset)
{
	b_new(b, opset);
	b_in(b, NULL, "x", FLOAT, "1,4");
	b_out(b, NULL, "y", FLOAT, "1,4");
}

/* ---- tensors ---- */

START_TEST(tensor_dims_and_data)
{
	B b;
	/* The case: dims overflow, 4608 bytes of data. */
	base(&b, 17);
	Tensor *t = b_init(&b, NULL, "router.w", FLOAT, "1", NULL);
	static const int64_t big[3] = { 1LL << 31, 1LL << 31, 1LL << 20 };
	t->dims = (int64_t *)big;
	t->n_dims = 3;
	t->raw_data.len = 4608;
	t->raw_data.data = arena_alloc(b.a, 4608);
	b_node(&b, NULL, "Add", "x,router.w", "y", "");
	ck_assert_str_eq(check(&b), "initializer 'router.w': dims [2147483648,2147483648,1048576] overflow: their product exceeds 2^63 elements; fix the tensor's dims");
	b_free(&b);

	/* An element count that fits, a byte count that does not. */
	base(&b, 17);
	t = b_init(&b, NULL, "w", DOUBLE, "1", NULL);
	static const int64_t wide[2] = { 1LL << 31, 1LL << 31 };
	t->dims = (int64_t *)wide;
	t->n_dims = 2;
	b_node(&b, NULL, "Identity", "x", "y", "");
	ck_refused(&b, "initializer 'w': dims [2147483648,2147483648] of double overflow");
	b_free(&b);

	base(&b, 17);
	t = b_init(&b, NULL, "w", FLOAT, "4", NULL);
	t->dims[0] = -4;
	b_node(&b, NULL, "Identity", "x", "y", "");
	ck_refused(&b, "initializer 'w': dims [-4]: dimension 0 is -4; dimensions are non-negative");
	b_free(&b);

	/* raw_data shorter than dims x type. */
	base(&b, 17);
	t = b_init(&b, NULL, "w", FLOAT, "1,4", NULL);
	t->raw_data.len = 12;
	b_node(&b, NULL, "Add", "x,w", "y", "");
	ck_assert_str_eq(check(&b), "initializer 'w': raw_data holds 12 bytes, but dims [1,4] of float need 16; the tensor's data and dims disagree");
	b_free(&b);

	/* Typed fields: the count, and the field the type lives in. */
	base(&b, 17);
	t = b_init(&b, NULL, "w", FLOAT, "1,4", NULL);
	t->has_raw_data = 0;
	static float f3[3] = { 1, 2, 3 };
	t->float_data = f3;
	t->n_float_data = 3;
	b_node(&b, NULL, "Add", "x,w", "y", "");
	ck_assert_str_eq(check(&b), "initializer 'w': float_data holds 3 values, but dims [1,4] of float need 4; the tensor's data and dims disagree");
	b_free(&b);

	base(&b, 17);
	t = b_init(&b, NULL, "w", INT8, "3", NULL);
	t->has_raw_data = 0;
	t->float_data = f3;
	t->n_float_data = 3;
	b_node(&b, NULL, "Identity", "x", "y", "");
	ck_refused(&b, "initializer 'w': int8 values belong in int32_data, but the tensor stores them in float_data");
	b_free(&b);

	base(&b, 17);
	t = b_init(&b, NULL, "w", FLOAT, "3", NULL);
	t->float_data = f3;
	t->n_float_data = 3;
	b_node(&b, NULL, "Identity", "x", "y", "");
	ck_refused(&b, "initializer 'w' holds values in both raw_data and float_data; keep one");
	b_free(&b);

	base(&b, 17);
	t = b_init(&b, NULL, "w", FLOAT, "3", NULL);
	t->has_raw_data = 0;
	t->raw_data.len = 0;
	b_node(&b, NULL, "Identity", "x", "y", "");
	ck_refused(&b, "initializer 'w': dims [3] give 3 elements but the tensor holds no data");
	b_free(&b);

	base(&b, 17);
	t = b_init(&b, NULL, "w", FLOAT, "3", NULL);
	t->data_type = 0;
	b_node(&b, NULL, "Identity", "x", "y", "");
	ck_refused(&b, "initializer 'w': data_type 0 is not an element type");
	b_free(&b);

	/* A Constant's tensor is named by its node. */
	base(&b, 17);
	Node *n = b_node(&b, NULL, "Constant", "", "c", "value=t:7:2:1,2");
	n->name = "the_const";
	n->attribute[0]->t->raw_data.len = 8;
	b_node(&b, NULL, "Identity", "x", "y", "");
	ck_refused(&b, "node 'the_const' (Constant) attribute 'value': raw_data holds 8 bytes, but dims [2] of int64 need 16");
	b_free(&b);
}
END_TEST

/* What onnx.proto allows: small types in int32_data, two floats per
 * complex64, strings in string_data, an empty tensor with no data. */
START_TEST(tensor_valid_forms)
{
	B b;
	base(&b, 17);
	static int32_t i32[4] = { 1, 0, 1, 255 };
	static float cf[4] = { 1, 2, 3, 4 };
	static ProtobufCBinaryData str[2] = { { 1, (uint8_t *)"a" }, { 0, NULL } };
	const struct {
		int dt;
		const char *dims;
	} typed[] = { { UINT8, "4" }, { BOOL, "2,2" }, { FLOAT16, "4" }, { 16, "4" }, { INT8, "4" } };
	for (size_t i = 0; i < sizeof typed / sizeof *typed; i++) {
		Tensor *t = b_init(&b, NULL, arena_printf(b.a, "t%zu", i), typed[i].dt, typed[i].dims, NULL);
		t->has_raw_data = 0;
		t->int32_data = i32;
		t->n_int32_data = 4;
	}
	Tensor *t = b_init(&b, NULL, "cplx", FLOAT, "2", NULL);
	t->data_type = 14;
	t->has_raw_data = 0;
	t->float_data = cf;
	t->n_float_data = 4;
	t = b_init(&b, NULL, "s", FLOAT, "2", NULL);
	t->data_type = 8;
	t->has_raw_data = 0;
	t->string_data = str;
	t->n_string_data = 2;
	t = b_init(&b, NULL, "empty", FLOAT, "0,3", NULL);
	t->has_raw_data = 0;
	b_node(&b, NULL, "Relu", "x", "y", "");
	ck_ok(&b);
	b_free(&b);
}
END_TEST

START_TEST(tensor_external)
{
	B b;
	base(&b, 17);
	Tensor *t = b_init(&b, NULL, "w", FLOAT, "1,4", NULL);
	t->has_raw_data = 0;
	t->has_data_location = 1;
	t->data_location = ONNX__TENSOR_PROTO__DATA_LOCATION__EXTERNAL;
	Onnx__StringStringEntryProto *kv = arena_alloc(b.a, 3 * sizeof *kv);
	Onnx__StringStringEntryProto **kp = arena_alloc(b.a, 3 * sizeof *kp);
	const char *keys[3] = { "location", "offset", "length" }, *vals[3] = { "w.bin", "4096", "12" };
	for (int i = 0; i < 3; i++) {
		onnx__string_string_entry_proto__init(&kv[i]);
		kv[i].key = (char *)keys[i];
		kv[i].value = (char *)vals[i];
		kp[i] = &kv[i];
	}
	t->external_data = kp;
	t->n_external_data = 3;
	b_node(&b, NULL, "Add", "x,w", "y", "");
	ck_assert_str_eq(check(&b), "initializer 'w': external data in 'w.bin' holds 12 bytes but its dims [1,4] of float need 16; the model and its data disagree");
	g_fini(&b.c);
	kv[2].value = "16";
	ck_ok(&b);
	g_fini(&b.c);
	kv[1].value = "9223372036854775800";
	ck_refused(&b, "initializer 'w': external data offset 9223372036854775800 + length 16 overflow");
	g_fini(&b.c);
	kv[1].value = "-1";
	ck_refused(&b, "initializer 'w': external data offset '-1' is not a non-negative integer");
	g_fini(&b.c);
	kv[0].key = "where";
	ck_refused(&b, "initializer 'w': data_location is EXTERNAL but there is no 'location'");
	b.indexed = 1;
	b_free(&b);
}
END_TEST

/* ---- opset_import, If ---- */

START_TEST(opset_ceiling)
{
	B b;
	base(&b, 10000);
	b_node(&b, NULL, "Relu", "x", "y", "");
	ck_refused(&b, "opset_import: default-domain opset 10000 is newer than opset 23, the newest whose operators this tool knows; export the model with opset 23 or lower");
	b_free(&b);

	base(&b, 24);
	b_node(&b, NULL, "Relu", "x", "y", "");
	ck_refused(&b, "default-domain opset 24 is newer than opset 23");
	b_free(&b);

	/* What torch >= 2.4 exports at, past libonnx-dev's proto (IR 8, opset
	 * 18): the proto does not bound the opset. */
	for (int v = 19; v <= 23; v++) {
		base(&b, v);
		b_node(&b, NULL, "Relu", "x", "y", "");
		ck_ok(&b);
		b_free(&b);
	}

	base(&b, 0);
	b_node(&b, NULL, "Relu", "x", "y", "");
	ck_refused(&b, "opset_import: default-domain version 0 is not an opset");
	b_free(&b);

	/* Other domains have their own versions. */
	base(&b, 23);
	b_node(&b, NULL, "Relu", "x", "y", "");
	Onnx__OperatorSetIdProto *o = arena_alloc(b.a, sizeof *o);
	onnx__operator_set_id_proto__init(o);
	o->domain = "com.example";
	o->has_version = 1;
	o->version = 10000;
	B_PUSH(b.a, b.m->opset_import, b.m->n_opset_import, o);
	ck_ok(&b);
	b_free(&b);
}
END_TEST

START_TEST(if_branch_arity)
{
	B b;
	base(&b, 17);
	b_in(&b, NULL, "c", BOOL, "");
	Onnx__GraphProto *th = b_graph(&b, "then"), *el = b_graph(&b, "else");
	b_node(&b, th, "Relu", "x", "t", "");
	b_out(&b, th, "t", FLOAT, NULL);
	b_node(&b, el, "Neg", "x", "e1", "");
	b_node(&b, el, "Abs", "x", "e2", "");
	b_out(&b, el, "e1", FLOAT, NULL);
	b_out(&b, el, "e2", FLOAT, NULL);
	Node *n = b_node(&b, NULL, "If", "c", "y", "");
	n->name = "gate";
	b_attr_g(&b, n, "then_branch", th);
	b_attr_g(&b, n, "else_branch", el);
	ck_assert_str_eq(check(&b), "node 'gate' (If): else_branch gives 2 outputs, the If has 1; both branches must give one value per If output");
	b_free(&b);

	base(&b, 17);
	b_in(&b, NULL, "c", BOOL, "");
	th = b_graph(&b, "then");
	b_node(&b, th, "Relu", "x", "t", "");
	b_out(&b, th, "t", FLOAT, NULL);
	n = b_node(&b, NULL, "If", "c", "y", "");
	n->name = "gate";
	b_attr_g(&b, n, "then_branch", th);
	ck_refused(&b, "node 'gate' (If) has no else_branch graph; an If needs both branches");
	b_free(&b);
}
END_TEST

/* ---- element types ---- */

START_TEST(types_through_the_graph)
{
	B b;
	/* The case: an fp32 router weight into fp16 expert outputs. */
	b_new(&b, 17);
	b_in(&b, NULL, "x", FLOAT16, "2,8");
	b_init(&b, NULL, "rw", FLOAT, "2,1", NULL);
	b_node(&b, NULL, "Relu", "x", "expert", "");
	Node *n = b_node(&b, NULL, "Mul", "expert,rw", "y", "");
	n->name = "weigh";
	b_out(&b, NULL, "y", FLOAT16, "2,8");
	ck_assert_str_eq(check(&b), "node 'weigh' (Mul): input 'rw' is float but input 'expert' is float16; Mul needs one element type for its operands (insert a Cast)");
	b_free(&b);

	static const struct {
		const char *op, *ins, *attrs, *want;
	} bad[] = {
		{ "Where", "b,xf,xh", "", "Where's two branches need one element type" },
		{ "Where", "xf,xf,xf", "", "condition 'xf' is float; Where needs bool there" },
		{ "Concat", "xf,xh", "axis=0", "Concat needs one element type" },
		{ "Conv", "img,wh", "", "input 'wh' is float16 but input 'img' is float" },
		{ "MatMul", "xf,xh", "", "MatMul needs one element type" },
		{ "Gemm", "xf,xf,xh", "", "Gemm needs one element type" },
		{ "Gather", "xf,xf", "", "indices 'xf' is float; Gather needs int64 or int32 there" },
		{ "GatherElements", "xf,xf", "", "indices 'xf' is float; GatherElements needs int64 or int32" },
		{ "ScatterElements", "xf,xf,xf", "", "indices 'xf' is float; ScatterElements needs int64 or int32" },
		{ "Expand", "xf,i32", "", "shape 'i32' is int32; Expand needs int64 there" },
		{ "Reshape", "xf,i32", "", "shape 'i32' is int32; Reshape needs int64" },
		{ "Unsqueeze", "xf,i32", "", "axes 'i32' is int32; Unsqueeze needs int64" },
		{ "Squeeze", "xf,i32", "", "axes 'i32' is int32; Squeeze needs int64" },
		{ "Slice", "xf,i32,i64", "", "Slice's starts, ends, axes and steps need one element type" },
		{ "Slice", "xf,xf,xf", "", "starts 'xf' is float; Slice needs int64 or int32" },
		{ "TopK", "xf,i32", "", "K 'i32' is int32; TopK needs int64" },
		{ "Cast", "xf", "to=99", "node 'n' (Cast): 'to' is 99, which is not an ONNX element type" },
		{ "Cast", "xf", "", "node 'n' (Cast) has no 'to' attribute" },
		{ "Cast", "xf", "to=10", "node 'n' (Cast) makes 'y' float16, but the model declares it float" },
		{ "And", "b,xf", "", "operand 'xf' is float; And needs bool there" },
		{ "Add", "xf,i64", "", "Add needs one element type" },
	};
	for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
		b_new(&b, 17);
		b_in(&b, NULL, "xf", FLOAT, "2,2");
		b_in(&b, NULL, "xh", FLOAT16, "2,2");
		b_in(&b, NULL, "img", FLOAT, "1,2,4,4");
		b_in(&b, NULL, "b", BOOL, "2,2");
		b_init(&b, NULL, "wh", FLOAT16, "3,2,1,1", NULL);
		b_init(&b, NULL, "i32", INT32, "1", "1");
		b_init(&b, NULL, "i64", INT64, "1", "1");
		n = b_node(&b, NULL, bad[i].op, bad[i].ins, strcmp(bad[i].op, "TopK") ? "y" : "y,yi", bad[i].attrs);
		n->name = "n";
		b_out(&b, NULL, "y", FLOAT, NULL);
		const char *m = check(&b);
		ck_assert_msg(strstr(m, bad[i].want) != NULL, "%s(%s): message '%s' lacks '%s'", bad[i].op, bad[i].ins, m, bad[i].want);
		b_free(&b);
	}

	/* What the operators allow: Pow's exponent of another type, int32
	 * indices, an If condition in bool. */
	b_new(&b, 17);
	b_in(&b, NULL, "x", FLOAT, "2,3");
	b_in(&b, NULL, "c", BOOL, "");
	b_init(&b, NULL, "e", INT64, "", "2");
	b_init(&b, NULL, "ix", INT32, "2", "0,1");
	b_node(&b, NULL, "Pow", "x,e", "p", "");
	b_node(&b, NULL, "Gather", "p,ix", "g", "axis=1");
	Onnx__GraphProto *th = b_graph(&b, "then"), *el = b_graph(&b, "else");
	b_node(&b, th, "Relu", "g", "t", "");
	b_out(&b, th, "t", FLOAT, NULL);
	b_node(&b, el, "Neg", "g", "u", "");
	b_out(&b, el, "u", FLOAT, NULL);
	n = b_node(&b, NULL, "If", "c", "y", "");
	b_attr_g(&b, n, "then_branch", th);
	b_attr_g(&b, n, "else_branch", el);
	b_out(&b, NULL, "y", FLOAT, "2,2");
	ck_ok(&b);
	b_free(&b);

	/* An If condition that is not bool. */
	b_new(&b, 17);
	b_in(&b, NULL, "x", FLOAT, "2,3");
	b_in(&b, NULL, "c", FLOAT, "");
	th = b_graph(&b, "then"), el = b_graph(&b, "else");
	b_node(&b, th, "Relu", "x", "t", "");
	b_out(&b, th, "t", FLOAT, NULL);
	b_node(&b, el, "Neg", "x", "u", "");
	b_out(&b, el, "u", FLOAT, NULL);
	n = b_node(&b, NULL, "If", "c", "y", "");
	n->name = "gate";
	b_attr_g(&b, n, "then_branch", th);
	b_attr_g(&b, n, "else_branch", el);
	b_out(&b, NULL, "y", FLOAT, NULL);
	ck_assert_str_eq(check(&b), "node 'gate' (If): condition 'c' is float; If needs bool there");
	b_free(&b);
}
END_TEST

/* Types are checked inside bodies too, with outer values visible. */
START_TEST(types_in_bodies)
{
	B b;
	b_new(&b, 17);
	b_in(&b, NULL, "x", FLOAT, "2,3");
	b_in(&b, NULL, "h", FLOAT16, "2,3");
	b_in(&b, NULL, "c", BOOL, "");
	Onnx__GraphProto *th = b_graph(&b, "then"), *el = b_graph(&b, "else");
	Node *n = b_node(&b, th, "Add", "x,h", "t", "");
	n->name = "inner_add";
	b_out(&b, th, "t", FLOAT, NULL);
	b_node(&b, el, "Neg", "x", "u", "");
	b_out(&b, el, "u", FLOAT, NULL);
	n = b_node(&b, NULL, "If", "c", "y", "");
	b_attr_g(&b, n, "then_branch", th);
	b_attr_g(&b, n, "else_branch", el);
	b_out(&b, NULL, "y", FLOAT, NULL);
	ck_refused(&b, "node 'inner_add' (Add): input 'h' is float16 but input 'x' is float");
	b_free(&b);
}
END_TEST

/* ---- attribute ranges ---- */

START_TEST(conv_attributes)
{
	static const struct {
		const char *w, *attrs, *want;
	} cases[] = {
		{ "8,4,3,3", "group=0", "node 'conv' (Conv): group is 0; it must be at least 1" },
		{ "8,4,3,3", "group=-2", "group is -2; it must be at least 1" },
		{ "9,1,3,3", "group=3", "the input has 4 channels, but group 3 with a weight of 1 input channels per group" },
		{ "8,2,3,3", "group=1", "the input has 4 channels, but group 1 with a weight of 2 input channels per group" },
		{ "6,1,3,3", "group=4", "group 4 does not divide the weight's 6 output channels" },
		{ "8,4,3,3", "pads=[1,-1,1,1]", "node 'conv' (Conv): pads[1] is -1; pads must be non-negative" },
		{ "8,4,3,3", "strides=[0,1]", "strides[0] is 0; strides must be at least 1" },
		{ "8,4,3,3", "dilations=[1,0]", "dilations[1] is 0; dilations must be at least 1" },
		{ "8,4,3,3", "strides=[1,1,1]", "strides has 3 values; a rank-4 input needs 2" },
		{ "8,4,3,3", "pads=[1,1]", "pads has 2 values; a rank-4 input needs 4" },
		{ "8,4,7,3", "", "the kernel spans 7 along spatial axis 0, the padded input only 5" },
		{ "8,4,3,3", "dilations=[3,1]", "the kernel spans 7 along spatial axis 0" },
		{ "8,4,3,3", "kernel_shape=[0,3]", "kernel_shape[0] is 0; kernel_shape must be at least 1" },
	};
	for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
		B b;
		b_new(&b, 17);
		b_in(&b, NULL, "x", FLOAT, "1,4,5,5");
		b_init(&b, NULL, "w", FLOAT, cases[i].w, NULL);
		Node *n = b_node(&b, NULL, "Conv", "x,w", "y", cases[i].attrs);
		n->name = "conv";
		b_out(&b, NULL, "y", FLOAT, NULL);
		const char *m = check(&b);
		ck_assert_msg(strstr(m, cases[i].want) != NULL, "%s: message '%s' lacks '%s'", cases[i].attrs, m, cases[i].want);
		b_free(&b);
	}
	/* Valid: depthwise, padded kernels as large as the padded input, SAME. */
	B b;
	b_new(&b, 17);
	b_in(&b, NULL, "x", FLOAT, "1,4,5,5");
	b_init(&b, NULL, "dw", FLOAT, "4,1,3,3", NULL);
	b_init(&b, NULL, "big", FLOAT, "8,4,7,7", NULL);
	b_node(&b, NULL, "Conv", "x,dw", "a", "group=4");
	b_node(&b, NULL, "Conv", "x,big", "c", "pads=[1,1,1,1]");
	b_node(&b, NULL, "Conv", "x,big", "d", "auto_pad=s:SAME_UPPER");
	b_node(&b, NULL, "MaxPool", "x", "e", "kernel_shape=[5,5]");
	b_node(&b, NULL, "ConvTranspose", "x,dw", "f", "group=4 strides=[2,2]");
	b_out(&b, NULL, "a", FLOAT, NULL);
	b_out(&b, NULL, "c", FLOAT, NULL);
	b_out(&b, NULL, "d", FLOAT, NULL);
	b_out(&b, NULL, "e", FLOAT, NULL);
	b_out(&b, NULL, "f", FLOAT, NULL);
	ck_ok(&b);
	b_free(&b);

	b_new(&b, 17);
	b_in(&b, NULL, "x", FLOAT, "1,4,5,5");
	b_node(&b, NULL, "MaxPool", "x", "y", "strides=[2,2]");
	b_out(&b, NULL, "y", FLOAT, NULL);
	ck_refused(&b, "(MaxPool) has no kernel_shape");
	b_free(&b);
}
END_TEST

START_TEST(other_attributes)
{
	static const struct {
		const char *op, *ins, *outs, *attrs, *want;
	} cases[] = {
		{ "TopK", "x,k40", "v,i", "", "node 'n' (TopK): K is 1099511627776 but axis -1 has 4 elements; K must not exceed it" },
		{ "TopK", "x,kneg", "v,i", "", "node 'n' (TopK): K is -1; it must be non-negative" },
		{ "TopK", "x,k2", "v,i", "axis=2", "node 'n' (TopK): axis 2 is outside [-2, 1] for a rank-2 input" },
		{ "Gather", "x,k2", "v", "axis=-3", "node 'n' (Gather): axis -3 is outside [-2, 1]" },
		{ "Concat", "x,x", "v", "axis=2", "node 'n' (Concat): axis 2 is outside [-2, 1]" },
		{ "Softmax", "x", "v", "axis=5", "node 'n' (Softmax): axis 5 is outside" },
		{ "Flatten", "x", "v", "axis=3", "node 'n' (Flatten): axis 3 is outside [-2, 2]" },
		{ "Transpose", "x", "v", "perm=[0,0]", "node 'n' (Transpose): perm is not a permutation of the input's 2 axes" },
		{ "Transpose", "x", "v", "perm=[1,0,2]", "perm is not a permutation" },
		{ "Unsqueeze", "x,ax3", "v", "", "node 'n' (Unsqueeze): axis 3 is outside the 3 axes of the output or repeated" },
		{ "Unsqueeze", "x,ax00", "v", "", "axis 0 is outside the 4 axes of the output or repeated" },
		{ "Squeeze", "x,ax3", "v", "", "node 'n' (Squeeze): axis 3 is outside the 2 axes of the input" },
		{ "Reshape", "x,twominus", "v", "", "node 'n' (Reshape): shape has more than one -1" },
		{ "Reshape", "x,minus2", "v", "", "node 'n' (Reshape): shape[0] is -2" },
	};
	for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
		B b;
		b_new(&b, 17);
		b_in(&b, NULL, "x", FLOAT, "1,4");
		b_init(&b, NULL, "k40", INT64, "1", "1099511627776");
		b_init(&b, NULL, "kneg", INT64, "1", "-1");
		b_init(&b, NULL, "k2", INT64, "1", "2");
		b_init(&b, NULL, "ax3", INT64, "1", "3");
		b_init(&b, NULL, "ax00", INT64, "2", "0,0");
		b_init(&b, NULL, "twominus", INT64, "2", "-1,-1");
		b_init(&b, NULL, "minus2", INT64, "2", "-2,2");
		Node *n = b_node(&b, NULL, cases[i].op, cases[i].ins, cases[i].outs, cases[i].attrs);
		n->name = "n";
		b_out(&b, NULL, "v", FLOAT, NULL);
		const char *m = check(&b);
		ck_assert_msg(strstr(m, cases[i].want) != NULL, "%s: message '%s' lacks '%s'", cases[i].op, m, cases[i].want);
		b_free(&b);
	}
	/* Valid neighbours. */
	B b;
	b_new(&b, 17);
	b_in(&b, NULL, "x", FLOAT, "1,4");
	b_init(&b, NULL, "k4", INT64, "1", "4");
	b_init(&b, NULL, "ax", INT64, "2", "-1,0");
	b_init(&b, NULL, "shape", INT64, "3", "0,-1,2");
	b_node(&b, NULL, "TopK", "x,k4", "v,i", "axis=-1");
	b_node(&b, NULL, "Unsqueeze", "x,ax", "u", "");
	b_node(&b, NULL, "Reshape", "x,shape", "r", "");
	b_node(&b, NULL, "Flatten", "x", "f", "axis=2");
	b_out(&b, NULL, "v", FLOAT, NULL);
	b_out(&b, NULL, "u", FLOAT, NULL);
	b_out(&b, NULL, "r", FLOAT, NULL);
	b_out(&b, NULL, "f", FLOAT, NULL);
	ck_ok(&b);
	b_free(&b);
}
END_TEST

/* Unknown dims and types never fail a model. */
START_TEST(unknown_never_fails)
{
	B b;
	b_new(&b, 17);
	b_in(&b, NULL, "x", FLOAT, "?,?,?,?");
	b_in(&b, NULL, "k", INT64, "1");
	b_in(&b, NULL, "w", FLOAT, NULL);
	Node *n = b_node(&b, NULL, "Custom", "x", "z", "");
	n->domain = "com.example";
	Onnx__OperatorSetIdProto *o = arena_alloc(b.a, sizeof *o);
	onnx__operator_set_id_proto__init(o);
	o->domain = "com.example";
	o->has_version = 1;
	o->version = 1;
	B_PUSH(b.a, b.m->opset_import, b.m->n_opset_import, o);
	b_node(&b, NULL, "Add", "z,x", "s", "");
	b_node(&b, NULL, "TopK", "s,k", "v,i", "");
	b_node(&b, NULL, "Conv", "x,w", "c", "group=3");
	b_out(&b, NULL, "v", FLOAT, NULL);
	b_out(&b, NULL, "c", FLOAT, NULL);
	ck_ok(&b);
	b_free(&b);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("check");
	TCase *tc = tcase_create("check");
	tcase_add_test(tc, tensor_dims_and_data);
	tcase_add_test(tc, tensor_valid_forms);
	tcase_add_test(tc, tensor_external);
	tcase_add_test(tc, opset_ceiling);
	tcase_add_test(tc, if_branch_arity);
	tcase_add_test(tc, types_through_the_graph);
	tcase_add_test(tc, types_in_bodies);
	tcase_add_test(tc, conv_attributes);
	tcase_add_test(tc, other_attributes);
	tcase_add_test(tc, unknown_never_fails);
	suite_add_tcase(s, tc);
	return tu_run(s);
}
