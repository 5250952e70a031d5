/* Shape and element-type inference (src/infer.c), one family of rules per
 * test, on tiny hand-built graphs; then the scale tests: long chains and
 * shared operands must stay linear and iterative. */
#include <check.h>
#include <time.h>

#include "gbuild.h"
#include "testutil.h"

static double now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + t.tv_nsec * 1e-9;
}

START_TEST(sources)
{
	B b;
	b_new(&b, 17);
	b_in(&b, NULL, "x", FLOAT, "?,3,8");
	b_in(&b, NULL, "noshape", FLOAT16, NULL);
	b_init(&b, NULL, "w", INT64, "3", "4,5,6");
	b_init(&b, NULL, "big", INT64, "100", NULL); /* too many to track values */
	b_const(&b, NULL, "c", "", "7");
	b_node(&b, NULL, "Constant", "", "ci", "value_ints=[1,2]");
	b_node(&b, NULL, "Constant", "", "cf", "value_float=f:1.5");
	b_node(&b, NULL, "Relu", "x", "r", "");
	b_vinfo(&b, NULL, "r", FLOAT, "?,?,8"); /* adds nothing, contradicts nothing */
	b_node(&b, NULL, "Identity", "noshape", "y", "");
	b_out(&b, NULL, "y", FLOAT16, "2,?");     /* a declared output fills what inference lacks */
	b_index(&b);
	ck_ty(&b, "x", "float[?,3,8]");
	ck_ty(&b, "noshape", "float16[...]");
	ck_ty(&b, "w", "int64[3]={4,5,6}");
	ck_ty(&b, "big", "int64[100]");
	ck_ty(&b, "c", "int64[]={7}");
	ck_ty(&b, "ci", "int64[2]={1,2}");
	ck_ty(&b, "cf", "float[]");
	ck_ty(&b, "r", "float[?,3,8]");
	ck_ty(&b, "y", "float16[2,?]");
	ck_assert_ptr_null(g_ty(b.c.g, "nowhere"));
	ck_assert_int_eq(g_ty_rank(b.c.g, "nowhere"), -1);
	ck_assert_int_eq(g_ty_dim(b.c.g, "x", -1), 8);
	ck_assert_int_eq(g_ty_dim(b.c.g, "x", 0), -1);
	ck_assert_int_eq(g_ty_dim(b.c.g, "x", 3), -1);
	ck_assert_int_eq(g_ty_elem(b.c.g, "noshape"), FLOAT16);
	int64_t v;
	ck_assert(g_ty_val(b.c.g, "w", 2, &v) && v == 6);
	ck_assert(!g_ty_val(b.c.g, "w", 3, &v));
	/* Reindexing drops what inference found. */
	g_reindex(&b.c, &b.e);
	ck_assert_ptr_null(g_ty(b.c.g, "x"));
	ck_assert_int_eq(b.c.inferred, 0);
	b_free(&b);
}
END_TEST

START_TEST(declared_disagreement)
{
	B b;
	b_new(&b, 17);
	b_in(&b, NULL, "x", FLOAT, "2,3");
	b_node(&b, NULL, "Relu", "x", "y", "");
	b_node(&b, NULL, "Relu", "x", "z", "");
	b_node(&b, NULL, "Cast", "x", "h", "to=10");
	b_out(&b, NULL, "y", FLOAT, "2,4");   /* one dim wrong: that dim is unknown */
	b_out(&b, NULL, "z", FLOAT, "2,3,1"); /* rank wrong: the rank is unknown */
	b_out(&b, NULL, "h", FLOAT, "2,3");   /* the type computed and the one declared both stay */
	b_index(&b);
	ck_ty(&b, "y", "float[2,?]");
	ck_ty(&b, "z", "float[...]");
	const Ty *t = g_ty(b.c.g, "h");
	ck_assert_int_eq(t->elem, FLOAT16);
	ck_assert_int_eq(t->decl, FLOAT);
	b_free(&b);
}
END_TEST

START_TEST(elementwise_broadcast)
{
	B b;
	b_new(&b, 17);
	b_in(&b, NULL, "x", FLOAT, "2,1,4");
	b_in(&b, NULL, "y", FLOAT, "3,1");
	b_in(&b, NULL, "u", FLOAT, "?,5");
	b_in(&b, NULL, "m", BOOL, "1,4");
	b_in(&b, NULL, "i", INT32, "4");
	b_node(&b, NULL, "Add", "x,y", "add", "");
	b_node(&b, NULL, "Mul", "u,x", "mul", "");        /* ? against 1: unknown; 5 against 4: conflict */
	b_node(&b, NULL, "Less", "x,y", "lt", "");
	b_node(&b, NULL, "Where", "m,x,y", "wh", "");
	b_node(&b, NULL, "Max", "x,y,i", "mx", "");
	b_node(&b, NULL, "Not", "m", "nm", "");
	b_node(&b, NULL, "Pow", "x,i", "pw", "");
	b_node(&b, NULL, "Sigmoid", "x", "sg", "");
	b_node(&b, NULL, "IsNaN", "x", "nan", "");
	b_node(&b, NULL, "Cast", "x", "ci", "to=7");
	b_node(&b, NULL, "CastLike", "x,i", "cl", "");
	b_node(&b, NULL, "Dropout", "x", "do,mask", "");
	b_node(&b, NULL, "Sum", "x", "sum1", "");
	b_index(&b);
	ck_ty(&b, "add", "float[2,3,4]");
	ck_ty(&b, "mul", "float[2,?,?]");
	ck_ty(&b, "lt", "bool[2,3,4]");
	ck_ty(&b, "wh", "float[2,3,4]");
	ck_ty(&b, "mx", "float[2,3,4]");
	ck_ty(&b, "nm", "bool[1,4]");
	ck_ty(&b, "pw", "float[2,1,4]");
	ck_ty(&b, "sg", "float[2,1,4]");
	ck_ty(&b, "nan", "bool[2,1,4]");
	ck_ty(&b, "ci", "int64[2,1,4]");
	ck_ty(&b, "cl", "int32[2,1,4]");
	ck_ty(&b, "do", "float[2,1,4]");
	ck_ty(&b, "mask", "bool[2,1,4]");
	ck_ty(&b, "sum1", "float[2,1,4]");
	b_free(&b);
}
END_TEST

/* Shape -> Gather -> Unsqueeze -> Concat -> Reshape, and integer
 * arithmetic on the way. */
START_TEST(shape_arithmetic)
{
	B b;
	b_new(&b, 13);
	b_in(&b, NULL, "x", FLOAT, "?,6,4");
	b_const(&b, NULL, "one", "", "1");
	b_const(&b, NULL, "zero", "", "0");
	b_const(&b, NULL, "ax0", "1", "0");
	b_const(&b, NULL, "minus1", "1", "-1");
	b_const(&b, NULL, "two", "", "2");
	b_const(&b, NULL, "five", "", "5");
	b_node(&b, NULL, "Shape", "x", "s", "");
	b_node(&b, NULL, "Gather", "s,one", "c", "axis=0");
	b_node(&b, NULL, "Gather", "s,zero", "n", "axis=0");
	b_node(&b, NULL, "Div", "c,two", "half", "");
	b_node(&b, NULL, "Div", "five,two", "inexact", "");
	b_node(&b, NULL, "Mul", "c,two", "dbl", "");
	b_node(&b, NULL, "Sub", "c,one", "sub", "");
	b_node(&b, NULL, "Unsqueeze", "half,ax0", "uh", "");
	b_node(&b, NULL, "Unsqueeze", "n,ax0", "un", "");
	b_node(&b, NULL, "Concat", "un,uh,minus1", "shp", "axis=0");
	b_node(&b, NULL, "Reshape", "x,shp", "r", "");
	b_node(&b, NULL, "Equal", "c,dbl", "eq", "");
	b_node(&b, NULL, "Cast", "s", "s32", "to=6");
	b_node(&b, NULL, "Cast", "s", "sb", "to=9");
	b_node(&b, NULL, "Cast", "s", "sf", "to=1");
	b_node(&b, NULL, "Where", "eq,c,dbl", "wh", "");
	b_node(&b, NULL, "ConstantOfShape", "uh", "cos", "value=t:7:1:3");
	b_node(&b, NULL, "Range", "zero,c,two", "rg", "");
	b_node(&b, NULL, "Size", "x", "size", "");
	b_node(&b, NULL, "Neg", "c", "neg", "");
	b_index(&b);
	ck_ty(&b, "s", "int64[3]={?,6,4}");
	ck_ty(&b, "c", "int64[]={6}");
	ck_ty(&b, "n", "int64[]={?}");
	ck_ty(&b, "half", "int64[]={3}");
	ck_ty(&b, "inexact", "int64[]={?}"); /* runtimes round integer division differently */
	ck_ty(&b, "dbl", "int64[]={12}");
	ck_ty(&b, "sub", "int64[]={5}");
	ck_ty(&b, "shp", "int64[3]={?,3,-1}");
	ck_ty(&b, "r", "float[?,3,?]");
	ck_ty(&b, "eq", "bool[]={0}");
	ck_ty(&b, "s32", "int32[3]={?,6,4}");
	ck_ty(&b, "sb", "bool[3]={?,1,1}");
	ck_ty(&b, "sf", "float[3]");
	ck_ty(&b, "wh", "int64[]={12}");
	ck_ty(&b, "cos", "int64[3]={3,3,3}");
	ck_ty(&b, "rg", "int64[3]={0,2,4}");
	ck_ty(&b, "size", "int64[]={?}");
	ck_ty(&b, "neg", "int64[]={-6}");
	b_free(&b);
}
END_TEST

START_TEST(shape_start_end_and_slices)
{
	B b;
	b_new(&b, 15);
	b_in(&b, NULL, "x", FLOAT, "2,?,5,7");
	b_const(&b, NULL, "st", "1", "1");
	b_const(&b, NULL, "en", "1", "9223372036854775807");
	b_const(&b, NULL, "ax", "1", "0");
	b_const(&b, NULL, "neg", "1", "-3");
	b_const(&b, NULL, "back", "1", "-1");
	b_const(&b, NULL, "lo", "1", "-100");
	b_node(&b, NULL, "Shape", "x", "tail", "start=-2");
	b_node(&b, NULL, "Shape", "x", "mid", "start=1 end=3");
	b_node(&b, NULL, "Shape", "x", "s", "");
	b_node(&b, NULL, "Slice", "s,st,en", "sl", "");              /* values from 1 to the end */
	b_node(&b, NULL, "Slice", "x,neg,en,ax", "sx", "");           /* axis 0: 2 - 3 clamps to 0 */
	b_node(&b, NULL, "Slice", "s,back,lo,ax,back", "rev", "");    /* reversed */
	b_index(&b);
	ck_ty(&b, "tail", "int64[2]={5,7}");
	ck_ty(&b, "mid", "int64[2]={?,5}");
	ck_ty(&b, "sl", "int64[3]={?,5,7}");
	ck_ty(&b, "sx", "float[2,?,5,7]");
	ck_ty(&b, "rev", "int64[4]={7,5,?,2}");
	b_free(&b);

	/* Opset 1 Slice: attributes. */
	b_new(&b, 9);
	b_in(&b, NULL, "x", FLOAT, "10,20");
	b_node(&b, NULL, "Slice", "x", "y", "starts=[2,-5] ends=[100,-1] axes=[0,1]");
	b_node(&b, NULL, "Slice", "x", "z", "starts=[1] ends=[3]");
	b_index(&b);
	ck_ty(&b, "y", "float[8,4]");
	ck_ty(&b, "z", "float[2,20]");
	b_free(&b);
}
END_TEST

START_TEST(conv_and_pools)
{
	B b;
	b_new(&b, 17);
	b_in(&b, NULL, "x", FLOAT, "1,3,32,31");
	b_in(&b, NULL, "xd", FLOAT, "?,3,?,16");
	b_init(&b, NULL, "w", FLOAT, "8,3,3,3", NULL);
	b_init(&b, NULL, "wg", FLOAT, "6,1,5,5", NULL);
	b_init(&b, NULL, "wt", FLOAT, "3,4,2,2", NULL);
	b_node(&b, NULL, "Conv", "x,w", "c1", "pads=[1,1,1,1] strides=[2,2]");
	b_node(&b, NULL, "Conv", "x,w", "c2", "auto_pad=s:SAME_UPPER strides=[2,2]");
	/* auto_pad other than NOTSET: the pads are not read. */
	b_node(&b, NULL, "Conv", "x,w", "cv", "auto_pad=s:VALID pads=[1,1,1,1]");
	b_node(&b, NULL, "MaxPool", "x", "msl", "auto_pad=s:SAME_LOWER kernel_shape=[2,2] strides=[2,2]");
	b_node(&b, NULL, "ConvTranspose", "x,wt", "ctv", "auto_pad=s:VALID pads=[1,1,1,1] strides=[2,2]");
	b_node(&b, NULL, "ConvTranspose", "x,wt", "cts", "auto_pad=s:SAME_UPPER strides=[3,3]");
	b_node(&b, NULL, "Conv", "x,wg", "c3", "group=3 dilations=[2,1]");
	b_node(&b, NULL, "Conv", "xd,w", "c4", "");
	b_node(&b, NULL, "Conv", "nowhere,w", "c5", "");             /* rank and Cout from the weight */
	b_node(&b, NULL, "ConvTranspose", "x,wt", "ct", "strides=[2,2] group=2");
	b_node(&b, NULL, "ConvTranspose", "x,wt", "ct2", "output_shape=[70,70]");
	b_node(&b, NULL, "MaxPool", "x", "mp,idx", "kernel_shape=[2,2] strides=[2,2]");
	b_node(&b, NULL, "MaxPool", "x", "mpc", "kernel_shape=[2,2] strides=[2,2] ceil_mode=1"); /* 31 is odd */
	b_node(&b, NULL, "AveragePool", "x", "ap", "kernel_shape=[3,3] pads=[1,1,1,1] strides=[1,1]");
	b_node(&b, NULL, "GlobalAveragePool", "xd", "gap", "");
	b_node(&b, NULL, "BatchNormalization", "c1,s,s,s,s", "bn", "");
	b_node(&b, NULL, "InstanceNormalization", "c1,s,s", "in", "");
	b_node(&b, NULL, "LayerNormalization", "x,s,s", "ln,mean,istd", "axis=-2");
	b_index(&b);
	ck_ty(&b, "c1", "float[1,8,16,16]");
	ck_ty(&b, "c2", "float[1,8,16,16]");
	ck_ty(&b, "cv", "float[1,8,30,29]");
	ck_ty(&b, "msl", "float[1,3,16,16]");
	ck_ty(&b, "ctv", "float[1,4,64,62]");
	ck_ty(&b, "cts", "float[1,4,96,93]");
	ck_ty(&b, "c3", "float[1,6,24,27]");
	ck_ty(&b, "c4", "float[?,8,?,14]");
	ck_ty(&b, "c5", "float[?,8,?,?]");
	ck_ty(&b, "ct", "float[1,8,64,62]");
	ck_ty(&b, "ct2", "float[1,4,70,70]");
	ck_ty(&b, "mp", "float[1,3,16,15]");
	ck_ty(&b, "idx", "int64[1,3,16,15]");
	ck_ty(&b, "mpc", "float[1,3,16,?]");
	ck_ty(&b, "ap", "float[1,3,32,31]");
	ck_ty(&b, "gap", "float[?,3,1,1]");
	ck_ty(&b, "bn", "float[1,8,16,16]");
	ck_ty(&b, "in", "float[1,8,16,16]");
	ck_ty(&b, "ln", "float[1,3,32,31]");
	ck_ty(&b, "mean", "?[1,3,1,1]");
	b_free(&b);
}
END_TEST

START_TEST(matmul_gemm)
{
	B b;
	b_new(&b, 17);
	b_in(&b, NULL, "a", FLOAT, "2,1,5,4");
	b_in(&b, NULL, "b", FLOAT, "3,4,6");
	b_in(&b, NULL, "v", FLOAT, "4");
	b_in(&b, NULL, "m", FLOAT, "7,4");
	b_node(&b, NULL, "MatMul", "a,b", "ab", "");
	b_node(&b, NULL, "MatMul", "v,b", "vb", "");
	b_node(&b, NULL, "MatMul", "a,v", "av", "");
	b_node(&b, NULL, "MatMul", "v,v", "vv", "");
	b_node(&b, NULL, "Gemm", "m,m", "g", "transB=1");
	b_node(&b, NULL, "Gemm", "m,m,v", "g2", "transA=1");
	b_index(&b);
	ck_ty(&b, "ab", "float[2,3,5,6]");
	ck_ty(&b, "vb", "float[3,6]");
	ck_ty(&b, "av", "float[2,1,5]");
	ck_ty(&b, "vv", "float[]");
	ck_ty(&b, "g", "float[7,7]");
	ck_ty(&b, "g2", "float[4,4]");
	b_free(&b);
}
END_TEST

START_TEST(reshapes)
{
	B b;
	b_new(&b, 14);
	b_in(&b, NULL, "x", FLOAT, "?,4,6");
	b_in(&b, NULL, "z", FLOAT, "2,0,3");
	b_init(&b, NULL, "s1", INT64, "3", "0,-1,3");
	b_init(&b, NULL, "s2", INT64, "2", "-1,12");
	b_init(&b, NULL, "s3", INT64, "2", "0,3");
	b_init(&b, NULL, "ax", INT64, "2", "1,-1");
	b_init(&b, NULL, "ax1", INT64, "1", "1");
	b_node(&b, NULL, "Reshape", "x,s1", "r1", "");       /* 0 copies the unknown batch; it cancels */
	b_node(&b, NULL, "Reshape", "x,s2", "r2", "");       /* -1 needs the batch */
	b_node(&b, NULL, "Reshape", "z,s3", "r3", "allowzero=1");
	b_node(&b, NULL, "Reshape", "x,unknown", "r4", "");
	b_node(&b, NULL, "Flatten", "x", "f1", "");
	b_node(&b, NULL, "Flatten", "x", "f0", "axis=0");
	b_node(&b, NULL, "Unsqueeze", "x,ax", "u", "");
	b_node(&b, NULL, "Squeeze", "u,ax", "sq", "");
	b_node(&b, NULL, "Squeeze", "z", "sqall", "");
	b_node(&b, NULL, "Transpose", "x", "t", "");
	b_node(&b, NULL, "Transpose", "x", "t2", "perm=[0,2,1]");
	b_node(&b, NULL, "Unsqueeze", "x,ax1", "u1", "");
	b_index(&b);
	ck_ty(&b, "r1", "float[?,8,3]");
	ck_ty(&b, "r2", "float[?,12]");
	ck_ty(&b, "r3", "float[0,3]");
	ck_ty(&b, "r4", "float[...]");
	ck_ty(&b, "f1", "float[?,24]");
	ck_ty(&b, "f0", "float[1,?]");
	ck_ty(&b, "u", "float[?,1,4,6,1]");
	ck_ty(&b, "sq", "float[?,4,6]");
	ck_ty(&b, "sqall", "float[2,0,3]");
	ck_ty(&b, "t", "float[6,4,?]");
	ck_ty(&b, "t2", "float[?,6,4]");
	ck_ty(&b, "u1", "float[?,1,4,6]");
	b_free(&b);

	/* Before opset 13 axes are attributes. */
	b_new(&b, 11);
	b_in(&b, NULL, "x", FLOAT, "3,1,5");
	b_in(&b, NULL, "shp", INT64, "5");
	b_node(&b, NULL, "Squeeze", "x", "s", "axes=[1]");
	b_node(&b, NULL, "Unsqueeze", "s", "u", "axes=[0,-1]");
	b_node(&b, NULL, "Reshape", "x,shp", "r", ""); /* a shape of 5 unknown values */
	b_index(&b);
	ck_ty(&b, "s", "float[3,5]");
	ck_ty(&b, "u", "float[1,3,5,1]");
	ck_ty(&b, "r", "float[?,?,?,?,?]");
	b_free(&b);
}
END_TEST

START_TEST(concat_split_gather)
{
	B b;
	b_new(&b, 18);
	b_in(&b, NULL, "x", FLOAT, "2,5,4");
	b_in(&b, NULL, "y", FLOAT, "2,?,4");
	b_init(&b, NULL, "sp", INT64, "2", "2,3");
	b_init(&b, NULL, "idx", INT64, "3,2", "0,1,1,0,0,0");
	b_init(&b, NULL, "ie", INT64, "2,1,4", NULL);
	b_init(&b, NULL, "ind", INT64, "2,1", "0,1");
	b_init(&b, NULL, "ind2", INT64, "2,2", "0,1,1,0");
	b_node(&b, NULL, "Concat", "x,x", "c", "axis=-2");
	b_node(&b, NULL, "Concat", "x,y", "cy", "axis=1");
	b_node(&b, NULL, "Split", "x,sp", "p1,p2", "axis=1");
	b_node(&b, NULL, "Split", "x", "q1,q2,q3", "axis=1 num_outputs=3");
	b_node(&b, NULL, "Split", "x", "h1,h2", "axis=0");
	b_node(&b, NULL, "Gather", "x,idx", "g", "axis=1");
	b_node(&b, NULL, "GatherElements", "x,ie", "ge", "axis=1");
	b_node(&b, NULL, "GatherND", "x,ind", "gn", "");
	b_node(&b, NULL, "GatherND", "x,ind2", "gn2", "batch_dims=1");
	b_node(&b, NULL, "ScatterElements", "x,ie,ie", "se", "");
	b_index(&b);
	ck_ty(&b, "c", "float[2,10,4]");
	ck_ty(&b, "cy", "float[2,?,4]");
	ck_ty(&b, "p1", "float[2,2,4]");
	ck_ty(&b, "p2", "float[2,3,4]");
	ck_ty(&b, "q1", "float[2,2,4]");
	ck_ty(&b, "q3", "float[2,1,4]");
	ck_ty(&b, "h2", "float[1,5,4]");
	ck_ty(&b, "g", "float[2,3,2,4]");
	ck_ty(&b, "ge", "float[2,1,4]");
	ck_ty(&b, "gn", "float[2,5,4]");
	ck_ty(&b, "gn2", "float[2]");
	ck_ty(&b, "se", "float[2,5,4]");
	b_free(&b);

	/* Split of a 1-D value keeps the pieces' values; opset 11: split attribute. */
	b_new(&b, 11);
	b_in(&b, NULL, "x", FLOAT, "2,3,4,5");
	b_node(&b, NULL, "Shape", "x", "s", "");
	b_node(&b, NULL, "Split", "s", "a,bb", "split=[1,3]");
	b_index(&b);
	ck_ty(&b, "a", "int64[1]={2}");
	ck_ty(&b, "bb", "int64[3]={3,4,5}");
	b_free(&b);
}
END_TEST

START_TEST(expand_tile_topk_reduce)
{
	B b;
	b_new(&b, 18);
	b_in(&b, NULL, "x", FLOAT, "3,1");
	b_in(&b, NULL, "v", FLOAT, "?,7,5");
	b_init(&b, NULL, "es", INT64, "3", "2,1,4");
	b_init(&b, NULL, "rep", INT64, "2", "2,3");
	b_init(&b, NULL, "k", INT64, "1", "3");
	b_init(&b, NULL, "ax", INT64, "1", "1");
	b_init(&b, NULL, "noax", INT64, "0", NULL);
	b_node(&b, NULL, "Expand", "x,es", "e", "");
	b_node(&b, NULL, "Tile", "x,rep", "t", "");
	b_node(&b, NULL, "TopK", "v,k", "tv,ti", "axis=-1");
	b_node(&b, NULL, "ReduceMean", "v,ax", "rm", "");
	b_node(&b, NULL, "ReduceSum", "v,ax", "rs", "keepdims=0");
	b_node(&b, NULL, "ReduceMax", "v,noax", "rall", "keepdims=0");
	b_node(&b, NULL, "ReduceMax", "v,noax", "rnoop", "noop_with_empty_axes=1");
	b_node(&b, NULL, "ReduceMin", "v", "rk", "");
	b_node(&b, NULL, "ArgMax", "v", "am", "axis=2 keepdims=0");
	b_node(&b, NULL, "NonZero", "v", "nz", "");
	b_node(&b, NULL, "Softmax", "v", "sm", "axis=1");
	b_index(&b);
	ck_ty(&b, "e", "float[2,3,4]");
	ck_ty(&b, "t", "float[6,3]");
	ck_ty(&b, "tv", "float[?,7,3]");
	ck_ty(&b, "ti", "int64[?,7,3]");
	ck_ty(&b, "rm", "float[?,1,5]");
	ck_ty(&b, "rs", "float[?,5]");
	ck_ty(&b, "rall", "float[]");
	ck_ty(&b, "rnoop", "float[?,7,5]");
	ck_ty(&b, "rk", "float[1,1,1]");
	ck_ty(&b, "am", "int64[?,7]");
	ck_ty(&b, "nz", "int64[3,?]");
	ck_ty(&b, "sm", "float[?,7,5]");
	b_free(&b);

	/* Opset 11: ReduceMean axes attribute, TopK K input. */
	b_new(&b, 11);
	b_in(&b, NULL, "v", FLOAT, "4,7,5");
	b_node(&b, NULL, "ReduceMean", "v", "rm", "axes=[-1] keepdims=0");
	b_index(&b);
	ck_ty(&b, "rm", "float[4,7]");
	b_free(&b);
}
END_TEST

START_TEST(resize_pad_space_misc)
{
	B b;
	b_new(&b, 13);
	b_in(&b, NULL, "x", FLOAT, "1,8,10,12");
	b_init(&b, NULL, "scales", FLOAT, "4", "1,1,2,2");
	b_init(&b, NULL, "odd", FLOAT, "4", "1,1,1.5,0.3");
	b_init(&b, NULL, "sizes", INT64, "4", "1,8,5,6");
	b_init(&b, NULL, "pads", INT64, "8", "0,0,1,2,0,0,3,4");
	b_init(&b, NULL, "ix", INT64, "2,3", NULL);
	b_init(&b, NULL, "depth", INT64, "", "10");
	b_init(&b, NULL, "onoff", FLOAT, "2", NULL);
	b_node(&b, NULL, "Resize", "x,,scales", "rs", "mode=s:nearest");
	b_node(&b, NULL, "Resize", "x,,odd", "ro", "");
	b_node(&b, NULL, "Resize", "x,,,sizes", "rz", "");
	b_node(&b, NULL, "Pad", "x,pads", "p", "");
	b_node(&b, NULL, "DepthToSpace", "x", "d2s", "blocksize=2");
	b_node(&b, NULL, "SpaceToDepth", "x", "s2d", "blocksize=2");
	b_node(&b, NULL, "OneHot", "ix,depth,onoff", "oh", "axis=1");
	b_node(&b, NULL, "CumSum", "x,depth", "cs", "");
	b_node(&b, NULL, "Einsum", "x,x", "es", "equation=s:nchw,nkhw->nckh");
	b_node(&b, NULL, "Einsum", "ix,ix", "ei", "equation=s:ij,ij");
	b_node(&b, NULL, "Upsample", "x,scales", "up", "");
	b_index(&b);
	ck_ty(&b, "rs", "float[1,8,20,24]");
	ck_ty(&b, "ro", "float[1,8,15,?]"); /* 12 x 0.3 is not exact in float */
	ck_ty(&b, "rz", "float[1,8,5,6]");
	ck_ty(&b, "p", "float[1,8,14,18]");
	ck_ty(&b, "d2s", "float[1,2,20,24]");
	ck_ty(&b, "s2d", "float[1,32,5,6]");
	ck_ty(&b, "oh", "float[2,10,3]");
	ck_ty(&b, "cs", "float[1,8,10,12]");
	ck_ty(&b, "es", "float[1,8,8,10]");
	ck_ty(&b, "ei", "int64[]");
	ck_ty(&b, "up", "float[1,8,20,24]");
	b_free(&b);

	/* Pad before opset 11: pads attribute. */
	b_new(&b, 10);
	b_in(&b, NULL, "x", FLOAT, "2,3");
	b_node(&b, NULL, "Pad", "x", "p", "pads=[1,0,1,2]");
	b_index(&b);
	ck_ty(&b, "p", "float[4,5]");
	b_free(&b);
}
END_TEST

/* What cannot be told stays unknown: no guesses. */
START_TEST(unknown_stays_unknown)
{
	B b;
	b_new(&b, 17);
	b_in(&b, NULL, "x", FLOAT, "2,3");
	b_node(&b, NULL, "FancyOp", "x", "f", "");
	Node *n = b_node(&b, NULL, "Relu", "x", "d", "");
	n->domain = "com.example";
	b_node(&b, NULL, "Relu", "f", "after", "");
	b_node(&b, NULL, "Add", "x", "short", "");    /* malformed: one input */
	b_node(&b, NULL, "Transpose", "x", "badperm", "perm=[0,0]");
	b_node(&b, NULL, "Concat", "x,x", "badaxis", "axis=5");
	/* Empty ints attributes as protobuf-c unpacks them: no array at all
	 * (memcpy from NULL is undefined even for 0 bytes; the sanitizer run
	 * of this test catches it). */
	Node *e1 = b_node(&b, NULL, "Transpose", "x", "noperm", "perm=[0,1]");
	e1->attribute[0]->n_ints = 0;
	e1->attribute[0]->ints = NULL;
	Node *e2 = b_node(&b, NULL, "Constant", "", "noints", "value_ints=[1]");
	e2->attribute[0]->n_ints = 0;
	e2->attribute[0]->ints = NULL;
	b_index(&b);
	ck_ty(&b, "noperm", "float[...]");
	ck_ty(&b, "noints", "int64[0]={}");
	ck_ty(&b, "f", "?");
	ck_ty(&b, "d", "?");
	ck_ty(&b, "after", "?");
	ck_ty(&b, "short", "?");
	ck_ty(&b, "badperm", "float[...]");
	ck_ty(&b, "badaxis", "float[?,?]");
	b_free(&b);
}
END_TEST

/* GroupNorm as exported: Reshape [0, G, -1] -> InstanceNormalization ->
 * Reshape(Shape(conv)), with a dynamic batch. */
START_TEST(groupnorm_export)
{
	B b;
	b_new(&b, 17);
	b_in(&b, NULL, "x", FLOAT, "?,16,8,8");
	b_init(&b, NULL, "w", FLOAT, "32,16,1,1", NULL);
	b_init(&b, NULL, "g", INT64, "3", "0,4,-1");
	b_init(&b, NULL, "sc", FLOAT, "4", NULL);
	b_init(&b, NULL, "gamma", FLOAT, "32,1,1", NULL);
	b_node(&b, NULL, "Conv", "x,w", "conv", "");
	b_node(&b, NULL, "Reshape", "conv,g", "grouped", "");
	b_node(&b, NULL, "InstanceNormalization", "grouped,sc,sc", "normed", "");
	b_node(&b, NULL, "Shape", "conv", "cs", "");
	b_node(&b, NULL, "Reshape", "normed,cs", "back", "");
	b_node(&b, NULL, "Mul", "back,gamma", "scaled", "");
	b_index(&b);
	ck_ty(&b, "grouped", "float[?,4,512]");
	ck_ty(&b, "normed", "float[?,4,512]");
	ck_ty(&b, "back", "float[?,32,8,8]");
	ck_ty(&b, "scaled", "float[?,32,8,8]");
	b_free(&b);
}
END_TEST

/* A Conv whose input comes through Gemm, Tanh and GatherND. */
START_TEST(conv_behind_gemm_tanh_gathernd)
{
	B b;
	b_new(&b, 17);
	b_in(&b, NULL, "x", FLOAT, "6,10");
	b_init(&b, NULL, "wg", FLOAT, "48,10", NULL);
	b_init(&b, NULL, "ind", INT64, "2,1", "0,3");
	b_init(&b, NULL, "shape", INT64, "4", "2,3,4,4");
	b_init(&b, NULL, "wc", FLOAT, "5,3,3,3", NULL);
	b_node(&b, NULL, "Gemm", "x,wg", "gm", "transB=1");
	b_node(&b, NULL, "Tanh", "gm", "th", "");
	b_node(&b, NULL, "GatherND", "th,ind", "rows", "");
	b_node(&b, NULL, "Reshape", "rows,shape", "img", "");
	b_node(&b, NULL, "Conv", "img,wc", "y", "pads=[1,1,1,1]");
	b_index(&b);
	ck_ty(&b, "gm", "float[6,48]");
	ck_ty(&b, "rows", "float[2,48]");
	ck_ty(&b, "img", "float[2,3,4,4]");
	ck_ty(&b, "y", "float[2,5,4,4]");
	b_free(&b);
}
END_TEST

/* If: outputs merge both branches; a known condition picks one. */
START_TEST(if_merging)
{
	B b;
	b_new(&b, 17);
	b_in(&b, NULL, "x", FLOAT, "2,3,4");
	b_in(&b, NULL, "c", BOOL, "");
	b_const(&b, NULL, "ax", "1", "0");
	b_node(&b, NULL, "Shape", "x", "s", "");
	b_const(&b, NULL, "two", "", "2");
	b_const(&b, NULL, "zero", "", "0");
	b_node(&b, NULL, "Gather", "s,zero", "d0", "");
	b_node(&b, NULL, "Equal", "d0,two", "known", "");
	for (int k = 0; k < 3; k++) {
		const char *cond = k == 2 ? "known" : "c";
		Onnx__GraphProto *th = b_graph(&b, "then"), *el = b_graph(&b, "else");
		/* then: [2,3,4] -> Relu (same) and Unsqueeze (rank 4); else:
		 * x[:, :1] (other dim) and Identity (rank 3). */
		b_node(&b, th, "Relu", "x", arena_printf(b.a, "t%d", k), "");
		b_node(&b, th, "Unsqueeze", "x,ax", arena_printf(b.a, "tu%d", k), "");
		b_out(&b, th, arena_printf(b.a, "t%d", k), 0, NULL);
		b_out(&b, th, arena_printf(b.a, "tu%d", k), 0, NULL);
		b_const(&b, el, arena_printf(b.a, "one%d", k), "1", "1");
		b_node(&b, el, "Slice", arena_printf(b.a, "x,ax,one%d", k), arena_printf(b.a, "e%d", k), "");
		b_out(&b, el, arena_printf(b.a, "e%d", k), 0, NULL);
		b_out(&b, el, "x", 0, NULL); /* an outer value as a body output */
		Node *n = b_node(&b, NULL, "If", cond, arena_printf(b.a, "y%d,z%d", k, k), "");
		if (k == 1) { /* branches swapped */
			b_attr_g(&b, n, "then_branch", el);
			b_attr_g(&b, n, "else_branch", th);
		} else {
			b_attr_g(&b, n, "then_branch", th);
			b_attr_g(&b, n, "else_branch", el);
		}
	}
	b_index(&b);
	ck_ty(&b, "known", "bool[]={1}");
	ck_ty(&b, "y0", "float[?,3,4]");   /* dims equal where both know them */
	ck_ty(&b, "z0", "float[...]");     /* ranks differ: unknown */
	ck_ty(&b, "y1", "float[?,3,4]");
	ck_ty(&b, "y2", "float[2,3,4]");   /* the condition is known: the then branch */
	ck_ty(&b, "z2", "float[1,2,3,4]");
	/* Values inside bodies are inferred, outer values visible. */
	Graph *body = b.c.g->sub[0];
	ck_assert_str_eq(ty_str(b.a, g_ty(body, "tu0")), "float[1,2,3,4]");
	ck_assert_str_eq(ty_str(b.a, g_ty(b.c.g->sub[1], "e0")), "float[1,3,4]");
	b_free(&b);
}
END_TEST

START_TEST(loop_and_scan)
{
	B b;
	b_new(&b, 17);
	b_in(&b, NULL, "x", FLOAT, "2,3");
	b_const(&b, NULL, "m", "", "4");
	b_in(&b, NULL, "cond", BOOL, "");
	Onnx__GraphProto *body = b_graph(&b, "body");
	b_in(&b, body, "i", 0, NULL);
	b_in(&b, body, "c_in", 0, NULL);
	b_in(&b, body, "v_in", 0, NULL);
	b_node(&b, body, "Identity", "c_in", "c_out", "");
	b_node(&b, body, "Relu", "v_in", "v_out", "");
	b_node(&b, body, "Cast", "i", "scan_out", "to=1");
	b_out(&b, body, "c_out", 0, NULL);
	b_out(&b, body, "v_out", 0, NULL);
	b_out(&b, body, "scan_out", 0, NULL);
	Node *n = b_node(&b, NULL, "Loop", "m,cond,x", "v_final,scanned", "");
	b_attr_g(&b, n, "body", body);
	b_index(&b);
	Graph *bg = b.c.g->sub[0];
	ck_assert_str_eq(ty_str(b.a, g_ty(bg, "i")), "int64[]");
	ck_assert_str_eq(ty_str(b.a, g_ty(bg, "c_out")), "bool[]");
	ck_assert_str_eq(ty_str(b.a, g_ty(bg, "v_out")), "float[...]");
	ck_ty(&b, "v_final", "float[...]"); /* the carried value's shape may change */
	ck_ty(&b, "scanned", "float[?]");
	b_free(&b);

	/* Scan: one state, one scanned input; the body's inputs get their
	 * element types, the stacked output one more axis than the body's. */
	b_new(&b, 17);
	b_in(&b, NULL, "s0", FLOAT, "2,3");
	b_in(&b, NULL, "seq", INT64, "5,3");
	body = b_graph(&b, "body");
	b_in(&b, body, "s_in", 0, NULL);
	b_in(&b, body, "e_in", 0, NULL);
	b_node(&b, body, "Relu", "s_in", "s_out", "");
	b_node(&b, body, "Shape", "e_in", "e_shape", "");
	b_out(&b, body, "s_out", 0, NULL);
	b_out(&b, body, "e_shape", 0, NULL);
	n = b_node(&b, NULL, "Scan", "s0,seq", "s_final,stacked", "num_scan_inputs=1");
	b_attr_g(&b, n, "body", body);
	b_index(&b);
	bg = b.c.g->sub[0];
	ck_assert_str_eq(ty_str(b.a, g_ty(bg, "s_in")), "float[...]");
	ck_assert_str_eq(ty_str(b.a, g_ty(bg, "e_in")), "int64[...]");
	ck_ty(&b, "s_final", "float[...]");
	ck_ty(&b, "stacked", "int64[?,?]");
	b_free(&b);
}
END_TEST

/* A pass appends nodes at the end: consumers placed before their producer
 * still get types. */
START_TEST(unsorted_graph)
{
	B b;
	b_new(&b, 17);
	b_in(&b, NULL, "x", FLOAT, "2,3");
	b_node(&b, NULL, "Relu", "late", "y", "");
	b_node(&b, NULL, "Add", "y,late", "z", "");
	b_node(&b, NULL, "Transpose", "x", "late", "");
	b_index(&b);
	ck_ty(&b, "late", "float[3,2]");
	ck_ty(&b, "y", "float[3,2]");
	ck_ty(&b, "z", "float[3,2]");
	b_free(&b);
}
END_TEST

/* 150 000 nodes in a chain: no recursion along it, and fast. */
START_TEST(long_chain)
{
	B b;
	b_new(&b, 17);
	b_in(&b, NULL, "x", FLOAT, "2,3");
	enum { N = 150000 };
	Onnx__GraphProto *g = b.m->graph;
	g->node = arena_alloc(b.a, N * sizeof *g->node);
	const char *prev = "x";
	for (int i = 0; i < N; i++) {
		Node *n = arena_alloc(b.a, sizeof *n);
		onnx__node_proto__init(n);
		n->op_type = i % 2 ? "Relu" : "Sigmoid";
		n->n_input = 1;
		n->input = arena_alloc(b.a, sizeof *n->input);
		n->input[0] = (char *)prev;
		n->n_output = 1;
		n->output = arena_alloc(b.a, sizeof *n->output);
		n->output[0] = arena_printf(b.a, "v%d", i);
		prev = n->output[0];
		g->node[g->n_node++] = n;
	}
	ck_assert_int_eq(g_init(&b.c, b.m, b.a, &b.e), 0);
	b.indexed = 1;
	double t0 = now();
	ck_assert_int_eq(g_infer(&b.c, &b.e), 0);
	double dt = now() - t0;
	ck_ty(&b, prev, "float[2,3]");
	/* Linear work is well under a second even in sanitizer builds. */
	ck_assert_msg(dt < 3.0, "inference of a %d-node chain took %.2f s", N, dt);
	b_free(&b);
}
END_TEST

/* Each node reads the previous one twice: a recursive walk without a memo
 * doubles its work per node; one forward walk stays linear. Values too. */
/* Equal results are one shared Ty; any difference (dims, tracked values,
 * element type, a declaration) keeps them apart. */
START_TEST(types_shared)
{
	B b;
	b_new(&b, 17);
	b_in(&b, NULL, "x", FLOAT, "?,3,8");
	b_node(&b, NULL, "Relu", "x", "r1", "");
	b_node(&b, NULL, "Relu", "x", "r2", "");
	b_node(&b, NULL, "Relu", "x", "r3", "");
	b_vinfo(&b, NULL, "r3", FLOAT, "?,3,8");
	b_node(&b, NULL, "Transpose", "x", "t", "perm=[0,2,1]");
	b_node(&b, NULL, "Cast", "x", "h", "to=10");
	b_const(&b, NULL, "a", "2", "1,2");
	b_const(&b, NULL, "a2", "2", "1,2");
	b_const(&b, NULL, "b", "2", "1,3");
	b_const(&b, NULL, "c", "3", "1,2,3");
	b_index(&b);
	const Graph *g = b.c.g;
	ck_assert_ptr_eq(g_ty(g, "r1"), g_ty(g, "r2"));
	ck_assert_ptr_eq(g_ty(g, "a"), g_ty(g, "a2"));
	const char *differ[] = { "r1", "r3", "t", "h", "a", "b", "c" };
	for (size_t i = 0; i < sizeof differ / sizeof *differ; i++)
		for (size_t j = i + 1; j < sizeof differ / sizeof *differ; j++)
			ck_assert_msg(g_ty(g, differ[i]) != g_ty(g, differ[j]), "%s and %s share a type", differ[i], differ[j]);
	ck_ty(&b, "r3", "float[?,3,8]");
	ck_ty(&b, "b", "int64[2]={1,3}");
	b_free(&b);
}
END_TEST

START_TEST(shared_operands)
{
	B b;
	b_new(&b, 17);
	b_in(&b, NULL, "x", FLOAT, "2,3");
	enum { N = 100000 };
	const char *prev = "x", *sprev = "s0";
	b_node(&b, NULL, "Shape", "x", "s0", "");
	for (int i = 0; i < N; i++) {
		const char *o = arena_printf(b.a, "v%d", i), *so = arena_printf(b.a, "s%d", i + 1);
		b_node(&b, NULL, "Add", arena_printf(b.a, "%s,%s", prev, prev), o, "");
		b_node(&b, NULL, "Max", arena_printf(b.a, "%s,%s", sprev, sprev), so, "");
		prev = o;
		sprev = so;
	}
	ck_assert_int_eq(g_init(&b.c, b.m, b.a, &b.e), 0);
	b.indexed = 1;
	double t0 = now();
	ck_assert_int_eq(g_infer(&b.c, &b.e), 0);
	double dt = now() - t0;
	ck_ty(&b, prev, "float[2,3]");
	ck_ty(&b, sprev, "int64[2]={2,3}");
	ck_assert_msg(dt < 3.0, "inference of %d shared-operand nodes took %.2f s", 2 * N, dt);
	b_free(&b);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("infer");
	TCase *tc = tcase_create("rules");
	tcase_add_test(tc, sources);
	tcase_add_test(tc, declared_disagreement);
	tcase_add_test(tc, elementwise_broadcast);
	tcase_add_test(tc, shape_arithmetic);
	tcase_add_test(tc, shape_start_end_and_slices);
	tcase_add_test(tc, conv_and_pools);
	tcase_add_test(tc, matmul_gemm);
	tcase_add_test(tc, reshapes);
	tcase_add_test(tc, concat_split_gather);
	tcase_add_test(tc, expand_tile_topk_reduce);
	tcase_add_test(tc, resize_pad_space_misc);
	tcase_add_test(tc, unknown_stays_unknown);
	tcase_add_test(tc, groupnorm_export);
	tcase_add_test(tc, conv_behind_gemm_tanh_gathernd);
	tcase_add_test(tc, if_merging);
	tcase_add_test(tc, loop_and_scan);
	tcase_add_test(tc, unsorted_graph);
	tcase_add_test(tc, types_shared);
	suite_add_tcase(s, tc);
	TCase *big = tcase_create("scale");
	tcase_set_timeout(big, 60);
	tcase_add_test(big, long_chain);
	tcase_add_test(big, shared_operands);
	suite_add_tcase(s, big);
	return tu_run(s);
}
