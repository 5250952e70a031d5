/* Weight mapping (passes/wmap.c): which recipe rebuilds each tensor of the
 * template expert from a checkpoint held in memory, and what moe_build
 * then rebuilds for a missing expert. The layer is a traced one
 * (tests/unit/moebuild.h), experts 0 and 2 of 4 present, each a Conv
 * (weight, bias) + SiLU; the checkpoint holds every expert under
 * "model.0.experts.{i}.". */
#include <check.h>
#include <math.h>
#include <string.h>

#include "moebuild.h"
#include "testutil.h"

typedef struct {
	MB m;
	B b;
	Lopt o;
	Lres r;
	Layer *L;
	SpecLayer sl;
	WSrc *w;
	Mapping map;
	MoeBnMemo bm; /* shared by the fixture's builds, as densify shares one an expert */
} Fx;

/* A layer named like /model.0/experts.N/... (pfx) or name-free (NULL);
 * the test fills f->o's values and f->w, then calls end(). */
static void begin(Fx *f, const char *pfx)
{
	mb_new(&f->m, &f->b, 17);
	mb_inputs(&f->m, 4);
	f->o = (Lopt){ .pfx = pfx, .E = 4, .k = 2, .ids = { 0, 2 }, .nid = 2 };
	f->w = ck_new(f->b.a);
	f->sl = mb_spec("model.0", 4, 2);
	f->bm = (MoeBnMemo){ 0 };
}

static void end(Fx *f)
{
	mb_layer(&f->m, &f->o, &f->r);
	b_out(&f->b, NULL, f->r.combined, FLOAT, NULL);
	ck_assert_int_eq(b_index(&f->b), 0);
	size_t n;
	ck_assert_msg(moe_find(&f->b.c, NULL, 0, &f->L, &n, &f->b.e) == 0, "%s", f->b.e.msg);
	ck_assert_uint_eq(n, 1);
	f->L->spec = &f->sl;
	f->L->scope = f->sl.scope;
}

static int map(Fx *f)
{
	return moe_map(&f->b.c, f->L, &f->L->ex[0], f->w, &f->map, &f->b.e);
}

#define MAP_OK(f) ck_assert_msg(map(f) == 0, "moe_map: %s", (f)->b.e.msg)

/* Recipe for input `input` of the template's Conv (1 weight, 2 bias). */
static const Recipe *recipe(Fx *f, size_t input)
{
	ck_assert_uint_eq(f->map.n, 2);
	for (size_t i = 0; i < f->map.n; i++)
		if (f->map.r[i].node == 0 && f->map.r[i].input == input)
			return &f->map.r[i];
	ck_abort_msg("no recipe for input %zu", input);
	return NULL;
}

/* What moe_build rebuilds for expert id by recipe r, against want: on
 * its own, and with the memo the fixture's earlier builds (other experts,
 * the weight before the bias) left. */
static void built(Fx *f, const Recipe *r, int id, const float *want, size_t n)
{
	const Tensor *t = g_const(f->L->ex[0].g, r->tname);
	ck_assert_ptr_nonnull(t);
	for (int shared = 0; shared < 2; shared++) {
		void *data;
		size_t nb;
		ck_assert_msg(moe_build(&f->b.c, f->L, r, t, id, f->w, shared ? &f->bm : NULL, &data, &nb, &f->b.e) == 0,
			      "moe_build: %s", f->b.e.msg);
		ck_assert_uint_eq(nb, n * sizeof(float));
		for (size_t i = 0; i < n; i++)
			ck_assert_msg(((const float *)data)[i] == want[i], "expert %d, element %zu%s: %.9g, want %.9g", id, i,
				      shared ? " (memo shared)" : "", (double)((const float *)data)[i], (double)want[i]);
	}
}

/* ---- Conv + BatchNorm, folded as the exporter folds them ---- */

typedef struct {
	float w[4], cb[2], g[2], beta[2], mu[2], var[2];
} Bn;

/* Expert id's Conv and BatchNorm (values exact in float16); var scales
 * the running variance, which decides how far apart the eps lie. */
static Bn bn_of(int id, double var)
{
	Bn p;
	for (int j = 0; j < 4; j++)
		p.w[j] = mb_wv(0, id, j);
	for (int o = 0; o < 2; o++) {
		p.cb[o] = (float)(0.25 * (o + 1) - 0.125 * id);
		p.g[o] = (float)(1 + 0.25 * o + 0.125 * id);
		p.beta[o] = (float)(0.5 - 0.25 * o + 0.0625 * id);
		p.mu[o] = (float)(0.125 * (o + 1) + 0.03125 * id);
		p.var[o] = (float)(var * (1 + 0.5 * o + 0.25 * id));
	}
	return p;
}

/* w * g/sqrt(var+eps), per output channel, in f32 like the exporter. */
static void fold_w(const Bn *p, double eps, float *out)
{
	for (int o = 0; o < 2; o++) {
		float sc = (float)(p->g[o] / sqrt((double)p->var[o] + eps));
		for (int i = 0; i < 2; i++)
			out[2 * o + i] = p->w[2 * o + i] * sc;
	}
}

/* beta + (b - mu) * g/sqrt(var+eps), b the conv bias or 0. */
static void fold_b(const Bn *p, int cb, double eps, float *out)
{
	for (int o = 0; o < 2; o++) {
		double sc = p->g[o] / sqrt((double)p->var[o] + eps);
		out[o] = (float)(p->beta[o] + ((cb ? p->cb[o] : 0.0) - p->mu[o]) * sc);
	}
}

/* The checkpoint: every expert's conv (with bias when cb) and bn. */
static void ck_bn(WSrc *w, int E, double var, int cb, int dtype)
{
	for (int id = 0; id < E; id++) {
		Bn p = bn_of(id, var);
		const char *pre = arena_printf(w->a, "model.0.experts.%d.", id);
		ck_put(w, arena_printf(w->a, "%sconv.weight", pre), dtype, "2,2,1,1", p.w, 4);
		if (cb)
			ck_put(w, arena_printf(w->a, "%sconv.bias", pre), dtype, "2", p.cb, 2);
		ck_put(w, arena_printf(w->a, "%sbn.weight", pre), dtype, "2", p.g, 2);
		ck_put(w, arena_printf(w->a, "%sbn.bias", pre), dtype, "2", p.beta, 2);
		ck_put(w, arena_printf(w->a, "%sbn.running_mean", pre), dtype, "2", p.mu, 2);
		ck_put(w, arena_printf(w->a, "%sbn.running_var", pre), dtype, "2", p.var, 2);
	}
}

/* The present experts as exported: BatchNorm folded with eps. */
static void folded(Fx *f, double var, int cb, double eps)
{
	for (int i = 0; i < f->o.nid; i++) {
		int id = f->o.ids[i];
		Bn p = bn_of(id, var);
		float w[4], b[2];
		fold_w(&p, eps, w);
		fold_b(&p, cb, eps, b);
		f->o.wv[id] = mb_floats(f->b.a, w, 4);
		f->o.bv[id] = mb_floats(f->b.a, b, 2);
	}
}

static double reldiff(const float *a, const float *b, int n)
{
	double d = 0, m = 0;
	for (int i = 0; i < n; i++) {
		d = fmax(d, fabs((double)a[i] - b[i]));
		m = fmax(m, fabs((double)b[i]));
	}
	return d / m;
}

/* ---- by name, by value ---- */

/* The template's own initializer names are checkpoint keys (an unfused
 * export keeps module parameter names) and the values agree: R_NAME. */
START_TEST(by_name)
{
	Fx f;
	begin(&f, "/model.0");
	f.o.wname = "model.0.experts.{i}.conv.weight";
	f.o.bname = "model.0.experts.{i}.conv.bias";
	ck_plain(f.w, "model.0.experts.{i}.", 4, 0);
	end(&f);
	MAP_OK(&f);
	const Recipe *w = recipe(&f, 1), *b = recipe(&f, 2);
	ck_assert_int_eq(w->kind, R_NAME);
	ck_assert_str_eq(w->rest, "conv.weight");
	ck_assert_str_eq(w->tname, "model.0.experts.0.conv.weight");
	ck_assert_int_eq(b->kind, R_NAME);
	ck_assert_str_eq(b->rest, "conv.bias");
	ck_assert(f.map.maxdiff == 0);
	float want[4];
	for (int j = 0; j < 4; j++)
		want[j] = mb_wv(0, 3, j);
	built(&f, w, 3, want, 4);
	b_free(&f.b);
}
END_TEST

/* A fused export keeps the name of the weight it changed (BatchNorm
 * folded into it): the name is no evidence against the values, even with
 * one expert present, where no other expert's values check the template. */
START_TEST(name_kept_by_fused_export)
{
	Fx f;
	begin(&f, "/model.0");
	f.o.nid = 1;
	f.o.wname = "model.0.experts.{i}.conv.weight";
	ck_bn(f.w, 4, 0.01, 0, FLOAT);
	folded(&f, 0.01, 0, 1e-5);
	end(&f);
	MAP_OK(&f);
	const Recipe *w = recipe(&f, 1);
	ck_assert_int_eq(w->kind, R_FOLD_W);
	ck_assert_str_eq(w->rest, "conv.weight");
	ck_assert_str_eq(w->bn, "bn");
	ck_assert(w->eps == 1e-5);
	Bn p = bn_of(1, 0.01);
	float want[4];
	fold_w(&p, 1e-5, want);
	built(&f, w, 1, want, 4);
	b_free(&f.b);
}
END_TEST

/* Anonymous initializers (onnx::Conv_N) equal to checkpoint keys: R_VALUE. */
START_TEST(by_value)
{
	Fx f;
	begin(&f, "/model.0");
	ck_plain(f.w, "model.0.experts.{i}.", 4, 0);
	end(&f);
	MAP_OK(&f);
	const Recipe *w = recipe(&f, 1), *b = recipe(&f, 2);
	ck_assert_int_eq(w->kind, R_VALUE);
	ck_assert_str_eq(w->rest, "conv.weight");
	ck_assert_str_eq(w->tname, "onnx::Conv_w0");
	ck_assert_int_eq(b->kind, R_VALUE);
	ck_assert_str_eq(b->rest, "conv.bias");
	float want[2];
	for (int j = 0; j < 2; j++)
		want[j] = mb_bv(0, 1, j);
	built(&f, b, 1, want, 2);
	b_free(&f.b);
}
END_TEST

/* One expert present and a tensor no checkpoint key rebuilds: a fill
 * (all elements equal, like the ones and zeros GroupNorm's export feeds
 * InstanceNormalization) is structure, kept for every expert; anything
 * else could be a parameter, and is refused. The checkpoint here has the
 * conv weights only. */
static void weights_only(Fx *f, const char *bias)
{
	begin(f, "/model.0");
	f->o.nid = 1;
	f->o.bv[0] = bias;
	for (int id = 0; id < 4; id++) {
		float wv[4];
		for (int j = 0; j < 4; j++)
			wv[j] = mb_wv(0, id, j);
		ck_put(f->w, arena_printf(f->b.a, "model.0.experts.%d.conv.weight", id), FLOAT, "2,2,1,1", wv, 4);
	}
	end(f);
}

START_TEST(fill_kept_with_one_present)
{
	Fx f;
	weights_only(&f, "0.5,0.5");
	MAP_OK(&f);
	ck_assert_int_eq(recipe(&f, 1)->kind, R_VALUE);
	ck_assert_int_eq(recipe(&f, 2)->kind, R_SHARED);
	b_free(&f.b);

	weights_only(&f, "0.5,0.25");
	ck_assert_int_eq(map(&f), -1);
	tu_err_has(f.b.e.msg, "of expert 0 (input 2 of node");
	tu_err_has(f.b.e.msg, "matches no checkpoint tensor under 'model.0.experts.0.'");
	b_free(&f.b);
}
END_TEST

/* torch's Linear exported as MatMul reads its weight transposed: a 2-D
 * template tensor rebuilt by R_TRANS for a missing expert is its key
 * transposed. (Found by value: the MoT case of testdata/, zero-config.) */
START_TEST(build_transposed)
{
	Fx f;
	begin(&f, "/model.0");
	ck_plain(f.w, "model.0.experts.{i}.", 4, 0);
	float k0[6] = { 1, 2, 3, 4, 5, 6 }, k1[6] = { -1, 0.5f, 7, 8, -9, 10 };
	ck_put(f.w, "model.0.experts.0.lin.weight", FLOAT, "3,2", k0, 6);
	ck_put(f.w, "model.0.experts.1.lin.weight", FLOAT, "3,2", k1, 6);
	end(&f);
	int64_t dims[2] = { 2, 3 };
	Tensor t = ONNX__TENSOR_PROTO__INIT;
	t.name = "onnx::MatMul_7";
	t.data_type = FLOAT;
	t.n_dims = 2;
	t.dims = dims;
	Recipe r = { .tname = t.name, .kind = R_TRANS, .rest = "lin.weight" };
	void *data;
	size_t nb;
	ck_assert_msg(moe_build(&f.b.c, f.L, &r, &t, 1, f.w, NULL, &data, &nb, &f.b.e) == 0, "moe_build: %s", f.b.e.msg);
	float want[6] = { -1, 7, -9, 0.5f, 8, 10 };
	ck_assert_uint_eq(nb, sizeof want);
	ck_assert_mem_eq(data, want, sizeof want);
	/* A key that is not 2-D cannot be read transposed. */
	r.rest = "conv.weight";
	ck_assert_int_eq(moe_build(&f.b.c, f.L, &r, &t, 1, f.w, NULL, &data, &nb, &f.b.e), -1);
	tu_err_has(f.b.e.msg, "no 2-D tensor 'model.0.experts.1.conv.weight' of 6 elements");
	b_free(&f.b);
}
END_TEST

/* ---- Conv + BatchNorm folds ---- */

/* Without a conv bias: the bias is beta - mu * g/sqrt(var+eps). */
START_TEST(fold_without_conv_bias)
{
	Fx f;
	begin(&f, "/model.0");
	ck_bn(f.w, 4, 0.01, 0, FLOAT);
	folded(&f, 0.01, 0, 1e-5);
	end(&f);
	MAP_OK(&f);
	const Recipe *w = recipe(&f, 1), *b = recipe(&f, 2);
	ck_assert_int_eq(w->kind, R_FOLD_W);
	ck_assert_str_eq(w->rest, "conv.weight");
	ck_assert_str_eq(w->bn, "bn");
	ck_assert_int_eq(b->kind, R_FOLD_B);
	ck_assert_str_eq(b->bn, "bn");
	ck_assert_ptr_null(b->bias);
	ck_assert(b->eps == 1e-5);
	Bn p = bn_of(3, 0.01);
	float want[2];
	fold_b(&p, 0, 1e-5, want);
	built(&f, b, 3, want, 2);
	b_free(&f.b);
}
END_TEST

/* With a conv bias: beta + (b - mu) * g/sqrt(var+eps). */
START_TEST(fold_with_conv_bias)
{
	Fx f;
	begin(&f, "/model.0");
	ck_bn(f.w, 4, 0.01, 1, FLOAT);
	folded(&f, 0.01, 1, 1e-5);
	end(&f);
	MAP_OK(&f);
	const Recipe *b = recipe(&f, 2);
	ck_assert_int_eq(b->kind, R_FOLD_B);
	ck_assert_str_eq(b->bn, "bn");
	ck_assert_ptr_nonnull(b->bias);
	ck_assert_str_eq(b->bias, "conv.bias");
	Bn p = bn_of(1, 0.01);
	float want[2];
	fold_b(&p, 1, 1e-5, want);
	built(&f, b, 1, want, 2);
	b_free(&f.b);
}
END_TEST

/* Experts folded with each eps in turn, at running variance var: the
 * mapping must find that very eps for the weight and the bias, exactly. */
static void ck_fold_eps(const double *eps, size_t n, double var)
{
	for (size_t q = 0; q < n; q++) {
		Fx f;
		begin(&f, "/model.0");
		ck_bn(f.w, 4, var, 0, FLOAT);
		folded(&f, var, 0, eps[q]);
		end(&f);
		MAP_OK(&f);
		ck_assert_msg(recipe(&f, 1)->eps == eps[q], "var %g weight: eps %g, want %g", var, recipe(&f, 1)->eps, eps[q]);
		ck_assert_msg(recipe(&f, 2)->eps == eps[q], "var %g bias: eps %g, want %g", var, recipe(&f, 2)->eps, eps[q]);
		ck_assert(f.map.maxdiff == 0);
		b_free(&f.b);
	}
}

/* The eps is whichever usual value fits best, not the first that fits. */
START_TEST(fold_eps_best_fit)
{
	static const double eps[] = { 1e-3, 1e-4, 1e-6, 1e-2, 1e-1 };
	ck_fold_eps(eps, sizeof eps / sizeof *eps, 0.01);
}
END_TEST

/* A large running variance brings the usual eps within tolerance of each
 * other (1e-6, 1e-5 and 1e-4 all pass the sample at var 10): the weight
 * is then compared for all of them in one pass, and the exact one must
 * still win. */
START_TEST(fold_eps_best_fit_among_close)
{
	static const double eps[] = { 1e-6, 1e-5, 1e-4 };
	ck_fold_eps(eps, sizeof eps / sizeof *eps, 10);
}
END_TEST

/* An fp16 checkpoint (a half-precision trainer's) is compared at half
 * precision's tolerance, 1e-3: a present expert exported at fp32 from
 * the upcast weights may differ by fp16's rounding, and a fold with eps
 * 1e-5 passes too where 1e-3 is exact: the best fit must win. */
START_TEST(fold_eps_fp16_checkpoint)
{
	/* The premises: with var ~1, the bias folded with 1e-5 lies within
	 * fp16's tolerance of the one folded with 1e-3, not within fp32's,
	 * and farther than the rounding put on expert 2 below. */
	const double noise = 1.0 / (1 << 14);
	Bn p = bn_of(0, 1.0);
	float b3[2], b5[2];
	fold_b(&p, 0, 1e-3, b3);
	fold_b(&p, 0, 1e-5, b5);
	double d = reldiff(b5, b3, 2);
	ck_assert_msg(d > 1e-5 && d < 1e-3 && d > 3 * noise, "premise: %g", d);

	Fx f;
	begin(&f, "/model.0");
	ck_bn(f.w, 4, 1.0, 0, FLOAT16);
	folded(&f, 1.0, 0, 1e-3);
	Bn p2 = bn_of(2, 1.0);
	float w[4], b[2];
	fold_w(&p2, 1e-3, w);
	fold_b(&p2, 0, 1e-3, b);
	for (int j = 0; j < 4; j++)
		w[j] *= (float)(1 + noise);
	for (int j = 0; j < 2; j++)
		b[j] *= (float)(1 + noise);
	f.o.wv[2] = mb_floats(f.b.a, w, 4);
	f.o.bv[2] = mb_floats(f.b.a, b, 2);
	end(&f);
	MAP_OK(&f);
	ck_assert_msg(recipe(&f, 1)->eps == 1e-3, "weight: eps %g", recipe(&f, 1)->eps);
	ck_assert_msg(recipe(&f, 2)->eps == 1e-3, "bias: eps %g", recipe(&f, 2)->eps);
	ck_assert_msg(f.map.maxdiff > 1e-5 && f.map.maxdiff < 2 * noise, "maxdiff %g", f.map.maxdiff);
	b_free(&f.b);
}
END_TEST

/* A pickled BatchNorm records its eps (WSrc.attr): that one is used, and
 * alone, however unusual. */
START_TEST(fold_eps_recorded)
{
	Fx f;
	begin(&f, "/model.0");
	ck_bn(f.w, 4, 0.01, 0, FLOAT);
	for (int id = 0; id < 4; id++)
		ck_attr(f.w, arena_printf(f.b.a, "model.0.experts.%d.bn.eps", id), 0.05);
	folded(&f, 0.01, 0, 0.05);
	end(&f);
	MAP_OK(&f);
	ck_assert(recipe(&f, 1)->eps == 0.05);
	ck_assert(recipe(&f, 2)->eps == 0.05);
	b_free(&f.b);

	/* Folded with a usual eps the record contradicts: no recipe. */
	begin(&f, "/model.0");
	ck_bn(f.w, 4, 0.01, 0, FLOAT);
	for (int id = 0; id < 4; id++)
		ck_attr(f.w, arena_printf(f.b.a, "model.0.experts.%d.bn.eps", id), 1e-4);
	folded(&f, 0.01, 0, 1e-3);
	end(&f);
	ck_assert_int_eq(map(&f), -1);
	tu_err_has(f.b.e.msg, "tensor 'onnx::Conv_w0' of expert 0");
	tu_err_has(f.b.e.msg, "matches no checkpoint tensor under 'model.0.experts.0.'");
	b_free(&f.b);
}
END_TEST

/* ---- ties ---- */

/* A template bias of zeros: the present experts' BatchNorm still at
 * beta = 0, mean = 0, so every zero key of its size matches it; the
 * missing experts' keys differ (their mean too when mean). The weights
 * are folded with eps. */
static void zero_bias(Fx *f, int mean, double eps)
{
	begin(f, "/model.0");
	for (int id = 0; id < 4; id++) {
		Bn p = bn_of(id, 0.01);
		int present = id == 0 || id == 2;
		for (int o = 0; o < 2; o++) {
			p.beta[o] = present ? 0 : p.beta[o];
			p.mu[o] = present || !mean ? 0 : p.mu[o];
		}
		const char *pre = arena_printf(f->b.a, "model.0.experts.%d.", id);
		ck_put(f->w, arena_printf(f->b.a, "%sconv.weight", pre), FLOAT, "2,2,1,1", p.w, 4);
		ck_put(f->w, arena_printf(f->b.a, "%sbn.weight", pre), FLOAT, "2", p.g, 2);
		ck_put(f->w, arena_printf(f->b.a, "%sbn.bias", pre), FLOAT, "2", p.beta, 2);
		ck_put(f->w, arena_printf(f->b.a, "%sbn.running_mean", pre), FLOAT, "2", p.mu, 2);
		ck_put(f->w, arena_printf(f->b.a, "%sbn.running_var", pre), FLOAT, "2", p.var, 2);
		if (present) {
			float w[4];
			fold_w(&p, eps, w);
			f->o.wv[id] = mb_floats(f->b.a, w, 4);
			f->o.bv[id] = "0,0";
		}
	}
	end(f);
}

/* The conv weight's fold decides the bias recipe: that BatchNorm folded,
 * without a conv bias as the checkpoint has none; the keys that are zero
 * too (bn.bias, equal to that fold for every expert since the mean is 0,
 * and bn.running_mean, which is not) have no such evidence. */
START_TEST(tie_settled_by_the_weight_fold)
{
	Fx f;
	zero_bias(&f, 0, 1e-5);
	MAP_OK(&f);
	const Recipe *b = recipe(&f, 2);
	ck_assert_int_eq(b->kind, R_FOLD_B);
	ck_assert_str_eq(b->bn, "bn");
	ck_assert_ptr_null(b->bias);
	Bn p = bn_of(1, 0.01);
	built(&f, b, 1, p.beta, 2); /* mean 0: the fold is beta */
	b_free(&f.b);
}
END_TEST

/* The same with the missing experts' mean not 0: the fold's eps matters
 * for them, and it is the weight's (one BatchNorm, one eps). */
START_TEST(tie_eps_of_the_weight_fold)
{
	Fx f;
	zero_bias(&f, 1, 1e-3);
	MAP_OK(&f);
	ck_assert(recipe(&f, 1)->eps == 1e-3);
	const Recipe *b = recipe(&f, 2);
	ck_assert_int_eq(b->kind, R_FOLD_B);
	ck_assert_str_eq(b->bn, "bn");
	ck_assert_ptr_null(b->bias);
	ck_assert_msg(b->eps == 1e-3, "eps %g", b->eps);
	Bn p = bn_of(3, 0.01);
	float want[2];
	fold_b(&p, 0, 1e-3, want);
	built(&f, b, 3, want, 2);
	b_free(&f.b);
}
END_TEST

/* Two zero keys that differ for the missing experts, nothing besides the
 * values to tell them apart (a name-free export): refused, naming both;
 * with names, the key of the module the Conv is named after wins. */
static void two_zero_keys(Fx *f, const char *pfx)
{
	begin(f, pfx);
	for (int id = 0; id < 4; id++) {
		int present = id == 0 || id == 2;
		float w[4], b1[2] = { present ? 0 : 1.5f, present ? 0 : 2.5f }, b2[2] = { present ? 0 : -1, present ? 0 : 3 };
		for (int j = 0; j < 4; j++)
			w[j] = mb_wv(0, id, j);
		const char *pre = arena_printf(f->b.a, "model.0.experts.%d.", id);
		ck_put(f->w, arena_printf(f->b.a, "%sconv.weight", pre), FLOAT, "2,2,1,1", w, 4);
		ck_put(f->w, arena_printf(f->b.a, "%sconv.bias", pre), FLOAT, "2", b1, 2);
		ck_put(f->w, arena_printf(f->b.a, "%sgate.bias", pre), FLOAT, "2", b2, 2);
		if (present)
			f->o.bv[id] = "0,0";
	}
	end(f);
}

START_TEST(tie_refused_or_named)
{
	Fx f;
	two_zero_keys(&f, NULL);
	ck_assert_int_eq(map(&f), -1);
	tu_err_has(f.b.e.msg, "is rebuilt equally well as");
	tu_err_has(f.b.e.msg, "'model.0.experts.0.conv.bias'");
	tu_err_has(f.b.e.msg, "'model.0.experts.0.gate.bias'");
	tu_err_has(f.b.e.msg, "which differ for the missing experts");
	b_free(&f.b);

	two_zero_keys(&f, "/model.0");
	MAP_OK(&f);
	ck_assert_int_eq(recipe(&f, 2)->kind, R_VALUE);
	ck_assert_str_eq(recipe(&f, 2)->rest, "conv.bias");
	b_free(&f.b);
}
END_TEST

/* Candidates that agree for every expert (an exporter's Identity-merged
 * copies, a checkpoint holding a tensor twice) are no tie. */
START_TEST(tie_of_identical_candidates)
{
	Fx f;
	begin(&f, NULL);
	ck_plain(f.w, "model.0.experts.{i}.", 4, 0);
	for (int id = 0; id < 4; id++) {
		float b[2] = { mb_bv(0, id, 0), mb_bv(0, id, 1) };
		ck_put(f.w, arena_printf(f.b.a, "model.0.experts.%d.copy.bias", id), FLOAT, "2", b, 2);
	}
	end(&f);
	MAP_OK(&f);
	const Recipe *b = recipe(&f, 2);
	ck_assert_int_eq(b->kind, R_VALUE);
	ck_assert_msg(!strcmp(b->rest, "conv.bias") || !strcmp(b->rest, "copy.bias"), "%s", b->rest);
	b_free(&f.b);
}
END_TEST

/* ---- refusals ---- */

/* Missing experts are clones of the template: one built differently (a
 * kernel of another size, a tensor missing) cannot be rebuilt. */
START_TEST(refuse_other_structure)
{
	Fx f;
	begin(&f, "/model.0");
	ck_plain(f.w, "model.0.experts.{i}.", 3, 0);
	float big[36] = { 0 }, b[2] = { 0 };
	ck_put(f.w, "model.0.experts.3.conv.weight", FLOAT, "2,2,3,3", big, 36);
	ck_put(f.w, "model.0.experts.3.conv.bias", FLOAT, "2", b, 2);
	end(&f);
	ck_assert_int_eq(map(&f), -1);
	tu_err_has(f.b.e.msg, "expert 3 has 'model.0.experts.3.conv.weight' of shape [2,2,3,3] where expert 0 has [2,2,1,1]");
	tu_err_has(f.b.e.msg, "experts built differently cannot be rebuilt from one template");
	b_free(&f.b);

	begin(&f, "/model.0");
	for (int id = 0; id < 4; id++) {
		float w[4] = { mb_wv(0, id, 0), mb_wv(0, id, 1), mb_wv(0, id, 2), mb_wv(0, id, 3) };
		float bb[2] = { mb_bv(0, id, 0), mb_bv(0, id, 1) };
		ck_put(f.w, arena_printf(f.b.a, "model.0.experts.%d.conv.weight", id), FLOAT, "2,2,1,1", w, 4);
		if (id != 1)
			ck_put(f.w, arena_printf(f.b.a, "model.0.experts.%d.conv.bias", id), FLOAT, "2", bb, 2);
	}
	end(&f);
	ck_assert_int_eq(map(&f), -1);
	tu_err_has(f.b.e.msg, "has no 'model.0.experts.1.conv.bias' for expert 1 (expert 0 has 'model.0.experts.0.conv.bias'): a damaged or another model's checkpoint, or experts built differently");
	b_free(&f.b);
}
END_TEST

/* DiversifiedExpertGroup: the experts' input comes from a per-expert
 * layer (dw.{i}) on the shared stem, before the row gather; a clone of
 * the template would read expert 0's. */
START_TEST(refuse_input_from_an_expert_family)
{
	Fx f;
	begin(&f, "/model.0");
	ck_plain(f.w, "model.0.experts.{i}.", 4, 0);
	for (int id = 0; id < 4; id++) {
		float dw[4] = { 1 + id, 0.5f, 0.25f, 2 };
		ck_put(f.w, arena_printf(f.b.a, "model.0.dw.%d.weight", id), FLOAT, "2,2,1,1", dw, 4);
	}
	b_init(&f.b, NULL, "onnx::Conv_dw", FLOAT, "2,2,1,1", "1,0.5,0.25,2");
	Node *dw = mb_node(&f.m, NULL, "/model.0/dw.0", "Conv", "x,onnx::Conv_dw", 1, "");
	f.o.x = dw->output[0];
	end(&f);
	/* The exporter emits it after the router, as the module computes it. */
	Onnx__GraphProto *gp = f.b.m->graph;
	size_t at = 0, t = 0;
	for (size_t i = 0; i < gp->n_node; i++) {
		at = gp->node[i] == dw ? i : at;
		t = gp->node[i] == f.r.topk ? i : t;
	}
	memmove(&gp->node[at], &gp->node[at + 1], (t - at) * sizeof *gp->node);
	gp->node[t] = dw;
	ck_assert_int_eq(g_reindex(&f.b.c, &f.b.e), 0);
	ck_assert_int_eq(g_infer(&f.b.c, &f.b.e), 0);
	size_t n;
	ck_assert_int_eq(moe_find(&f.b.c, NULL, 0, &f.L, &n, &f.b.e), 0);
	f.L->spec = &f.sl;
	f.L->scope = f.sl.scope;
	ck_assert_int_eq(map(&f), -1);
	tu_err_has(f.b.e.msg, "node '/model.0/dw.0/Conv', which computes the experts' input");
	tu_err_has(f.b.e.msg, "'model.0.dw.0.weight', a tensor of expert 0 outside 'model.0.experts.0'");
	tu_err_has(f.b.e.msg, "experts that span more than their expert path cannot be rebuilt");
	b_free(&f.b);
}
END_TEST

/* A present expert whose tensor is not its checkpoint's rebuild: the
 * checkpoint is not this model's. */
START_TEST(refuse_present_expert_differs)
{
	Fx f;
	begin(&f, "/model.0");
	ck_plain(f.w, "model.0.experts.{i}.", 4, 0);
	f.o.wv[2] = "9,9,9,9";
	end(&f);
	ck_assert_int_eq(map(&f), -1);
	tu_err_has(f.b.e.msg, "expert 2's tensor 'onnx::Conv_w2' differs from its checkpoint rebuild");
	tu_err_has(f.b.e.msg, "is mem.safetensors the checkpoint of this model?");
	b_free(&f.b);
}
END_TEST

/* The comparison kernel against its scalar definition, on every length
 * around its eight-lane blocks and with the largest difference at every
 * position: the same maxima, and a NaN anywhere (in a block or in the
 * tail) reported. */
static void diff_max_case(const float *a, const float *b, int n, float sc)
{
	float d = 0.125f, m = 0.25f, wd = d, wm = m, d2 = d;
	for (int i = 0; i < n; i++) {
		float x = fabsf(a[i] * sc - b[i]), y = fabsf(b[i]);
		wd = x > wd ? x : wd;
		wm = y > wm ? y : wm;
	}
	ck_assert_int_eq(moe_diff_max(a, sc, b, n, &d, &m), 0);
	ck_assert_msg(d == wd && m == wm, "n %d sc %g: %g %g, want %g %g", n, sc, d, m, wd, wm);
	ck_assert_int_eq(moe_diff_max(a, sc, b, n, &d2, NULL), 0);
	ck_assert(d2 == wd);
}

START_TEST(diff_max_as_scalar)
{
	float a[40], b[40];
	for (int i = 0; i < 40; i++) {
		a[i] = (float)sin(1.7 * i) * 3;
		b[i] = (float)cos(0.9 * i);
	}
	for (int n = 0; n <= 40; n++)
		for (int p = 0; p <= n; p++) {
			float c[40];
			memcpy(c, b, sizeof c);
			if (p < n)
				c[p] = -50 - p;
			diff_max_case(a, c, n, 1.0f);
			diff_max_case(a, c, n, 0.7f);
		}
	for (int at = 0; at < 21; at++) {
		float c[21], d = 0, m = 0;
		memcpy(c, a, sizeof c);
		c[at] = NAN;
		ck_assert_msg(moe_diff_max(c, 1.0f, b, 21, &d, &m) == 1, "NaN at %d not reported", at);
		ck_assert_msg(moe_diff_max(b, 1.0f, c, 21, &d, &m) == 1, "NaN at %d (b) not reported", at);
		/* inf in b: the relative difference would be inf / inf */
		c[at] = INFINITY;
		ck_assert_msg(moe_diff_max(b, 1.0f, c, 21, &d, &m) == 1, "inf at %d (b) not reported", at);
		c[at] = -INFINITY;
		ck_assert_msg(moe_diff_max(c, 0.5f, b, 21, &d, &m) == 1, "-inf at %d (a) not reported", at);
	}
}
END_TEST

int main(void)
{
	Suite *s = suite_create("wmap");
	TCase *tc = tcase_create("recipes");
	tcase_add_test(tc, by_name);
	tcase_add_test(tc, name_kept_by_fused_export);
	tcase_add_test(tc, by_value);
	tcase_add_test(tc, fill_kept_with_one_present);
	tcase_add_test(tc, build_transposed);
	tcase_add_test(tc, fold_without_conv_bias);
	tcase_add_test(tc, fold_with_conv_bias);
	tcase_add_test(tc, fold_eps_best_fit);
	tcase_add_test(tc, fold_eps_best_fit_among_close);
	tcase_add_test(tc, fold_eps_fp16_checkpoint);
	tcase_add_test(tc, fold_eps_recorded);
	suite_add_tcase(s, tc);
	tc = tcase_create("ties");
	tcase_add_test(tc, tie_settled_by_the_weight_fold);
	tcase_add_test(tc, tie_eps_of_the_weight_fold);
	tcase_add_test(tc, tie_refused_or_named);
	tcase_add_test(tc, tie_of_identical_candidates);
	suite_add_tcase(s, tc);
	tc = tcase_create("refusals");
	tcase_add_test(tc, refuse_other_structure);
	tcase_add_test(tc, refuse_input_from_an_expert_family);
	tcase_add_test(tc, refuse_present_expert_differs);
	tcase_add_test(tc, diff_max_as_scalar);
	suite_add_tcase(s, tc);
	return tu_run(s);
}
