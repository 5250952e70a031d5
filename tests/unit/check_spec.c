#include <dirent.h>
#include <glob.h>
#include <sys/stat.h>

#include "json.h"
#include "onnx.pb-c.h"
#include "spec.h"
#include "testutil.h"
#include "wsrc.h"

/* Writes experts.yaml (and an empty model.safetensors beside it, since
 * weights files must exist) and loads it. */
static int load_yaml(const char *yaml, Spec *s, Arena *a, Err *e)
{
	tu_write("model.safetensors", "", 0);
	return spec_load(s, tu_write("experts.yaml", yaml, strlen(yaml)), 0, a, e);
}

/* Expects the YAML to be refused with "PATH:want". */
static void refuse(const char *yaml, const char *want)
{
	Arena *a = arena_new();
	Spec s;
	Err e = { "" };
	ck_assert_int_eq(load_yaml(yaml, &s, a, &e), -1);
	char full[1024];
	snprintf(full, sizeof full, "%s:%s", tu_path("experts.yaml"), want);
	ck_assert_str_eq(e.msg, full);
	arena_free(a);
}

START_TEST(spec_full)
{
	tu_write("other.npz", "", 0);
	Arena *a = arena_new();
	Spec s;
	Err e = { "" };
	int rc = load_yaml(
		"# every key\n"
		"version: 1\n"
		"weights: model.safetensors\n"
		"checkpoint_key: ema\n"
		"moe:\n"
		"  - scope: model.6\n"
		"    experts: 4\n"
		"    top_k: 2\n"
		"    expert: blocks.{i}.ffn\n"
		"    weights: other.npz\n"
		"    prefix: \"module.\"\n"
		"    checkpoint_key: model\n"
		"    router:\n"
		"      indices: /model.6/router/TopK_output_1\n"
		"      weights: /model.6/router/Div_output_0\n"
		"    input: /model.5/Relu_output_0\n"
		"    output: /model.6/Add_output_0\n"
		"  - {scope: model.9, experts: 1, top_k: 1}\n",
		&s, a, &e);
	ck_assert_msg(rc == 0, "%s", e.msg);
	ck_assert_uint_eq(s.nlayer, 2);
	ck_assert_str_eq(s.weights, tu_path("model.safetensors"));
	ck_assert_str_eq(s.checkpoint_key, "ema");
	SpecLayer *l = &s.layer[0];
	ck_assert_str_eq(l->scope, "model.6");
	ck_assert_int_eq(l->line, 6);
	ck_assert_int_eq(l->col, 5);
	ck_assert_int_eq(l->experts, 4);
	ck_assert_int_eq(l->top_k, 2);
	ck_assert_str_eq(l->expert, "blocks.{i}.ffn");
	ck_assert_str_eq(l->weights, tu_path("other.npz"));
	ck_assert_str_eq(l->prefix, "module.");
	ck_assert_str_eq(l->checkpoint_key, "model");
	ck_assert_str_eq(l->router_indices, "/model.6/router/TopK_output_1");
	ck_assert_str_eq(l->router_weights, "/model.6/router/Div_output_0");
	ck_assert_str_eq(l->input, "/model.5/Relu_output_0");
	ck_assert_str_eq(l->output, "/model.6/Add_output_0");
	ck_assert_str_eq(spec_expert_path(a, l, 12), "blocks.12.ffn");
	/* Defaults. */
	l = &s.layer[1];
	ck_assert_str_eq(l->expert, "experts.{i}");
	ck_assert_str_eq(l->prefix, "");
	ck_assert_str_eq(l->weights, s.weights);
	ck_assert_str_eq(l->checkpoint_key, "ema");
	ck_assert_ptr_null(l->router_indices);
	ck_assert_ptr_null(l->input);
	ck_assert_str_eq(spec_expert_path(a, l, 3), "experts.3");
	arena_free(a);
}
END_TEST

#define HEAD "weights: model.safetensors\nmoe:\n"

START_TEST(spec_errors)
{
	refuse(HEAD "  - scope: model.1\n    experts: 4\n    top-k: 2\n",
		"5:5: unknown key 'top-k' in a 'moe' entry; did you mean 'top_k'?");
	refuse(HEAD "  - scope: model.1\n    experts: 4\n    top_k: 2\n    colour: red\n",
		"6:5: unknown key 'colour' in a 'moe' entry; known keys: scope, experts, top_k, expert, weights, prefix, router, input, output, checkpoint_key");
	refuse("weight: model.safetensors\nmoe: []\n",
		"1:1: unknown key 'weight' in the top level; did you mean 'weights'?");
	refuse(HEAD "  - scope: model.1\n    experts: four\n    top_k: 2\n",
		"4:14: 'experts' must be an integer, got 'four'");
	refuse(HEAD "  - scope: model.1\n    experts: 4.5\n    top_k: 2\n",
		"4:14: 'experts' must be an integer, got '4.5'");
	refuse(HEAD "  - scope: [model, 1]\n    experts: 4\n    top_k: 2\n",
		"3:12: 'scope' must be a string, not a list");
	refuse(HEAD "  - scope:\n    experts: 4\n    top_k: 2\n",
		"3:11: 'scope' must be a string, not null");
	refuse(HEAD "  - scope: model.1\n    experts: 4\n",
		"3:5: 'moe' entry lacks required key 'top_k'");
	refuse(HEAD "  - scope: model.1\n    experts: 4\n    top_k: 5\n",
		"5:12: 'top_k' (5) exceeds 'experts' (4)");
	refuse(HEAD "  - scope: model.1\n    experts: 0\n    top_k: 1\n",
		"4:14: 'experts' must be at least 1, got 0");
	refuse(HEAD "  - scope: model.1\n    experts: -3\n    top_k: 1\n",
		"4:14: 'experts' must be at least 1, got -3");
	refuse(HEAD "  - scope: model.1\n    experts: 4\n    top_k: 0\n",
		"5:12: 'top_k' must be at least 1, got 0");
	refuse(HEAD "  - scope: model.1\n    experts: 99999999999\n    top_k: 1\n",
		"4:14: 'experts' is out of range: 99999999999");
	refuse(HEAD "  - {scope: model.1, experts: 4, top_k: 2}\n  - {scope: model.1, experts: 4, top_k: 2}\n",
		"4:5: duplicate scope 'model.1' (first at line 3)");
	refuse(HEAD "  - scope: model.1\n    experts: 4\n    experts: 5\n    top_k: 2\n",
		"5:5: duplicate key 'experts' in a 'moe' entry (first at line 4)");
	refuse(HEAD "  - {scope: model.1, experts: 4, top_k: 2, expert: experts.i}\n",
		"3:52: 'expert' pattern 'experts.i' lacks '{i}' (the expert's index), e.g. experts.{i}");
	char want[1024];
	snprintf(want, sizeof want, "3:53: weights 'absent.npz' not found (%s: No such file or directory); paths are relative to the YAML file's folder",
		tu_path("absent.npz"));
	refuse(HEAD "  - {scope: model.1, experts: 4, top_k: 2, weights: absent.npz}\n", want);
	/* With --weights the YAML's files are never opened: absent ones load,
	 * resolved against the YAML's folder as always. */
	{
		Arena *a = arena_new();
		Spec s;
		Err e = { "" };
		const char *y = "weights: gone.pt\nmoe:\n  - {scope: model.1, experts: 4, top_k: 2, weights: absent.npz}\n";
		ck_assert_int_eq(spec_load(&s, tu_write("experts.yaml", y, strlen(y)), SPEC_WEIGHTS_GIVEN, a, &e), 0);
		ck_assert_str_eq(s.weights, tu_path("gone.pt"));
		ck_assert_str_eq(s.layer[0].weights, tu_path("absent.npz"));
		ck_assert_int_eq(spec_load(&s, tu_path("experts.yaml"), 0, a, &e), -1);
		arena_free(a);
	}
	/* Weights are needed only where experts are missing (or come from
	 * --weights): their absence is the repair's to report. */
	{
		Arena *a = arena_new();
		Spec s;
		Err e = { "" };
		ck_assert_int_eq(load_yaml("moe:\n  - {scope: model.1, experts: 4, top_k: 2}\n", &s, a, &e), 0);
		ck_assert_ptr_null(s.weights);
		ck_assert_ptr_null(s.layer[0].weights);
		arena_free(a);
	}
	refuse("weights: model.safetensors\nmoe:\n\t- scope: model.1\n",
		"3:1: tab character; YAML indentation must use spaces");
	refuse(HEAD "  - {scope: model.1, experts: 4\n",
		"4:1: did not find expected ',' or '}' while parsing a flow mapping (line 3)");
	refuse("", "1:1: empty document; expected a mapping with 'weights' and 'moe' (see schema/experts.yaml)");
	refuse("# only a comment\n", "1:1: empty document; expected a mapping with 'weights' and 'moe' (see schema/experts.yaml)");
	refuse("- a\n- b\n", "1:1: the document must be a mapping with 'weights' and 'moe', not a list");
	refuse("weights: model.safetensors\n", "1:1: missing required key 'moe' (the list of MoE layers)");
	refuse("weights: model.safetensors\nmoe: []\n", "2:6: 'moe' lists no layers; list each MoE layer (scope, experts, top_k), or write them with --weights CHECKPOINT --emit-experts FILE");
	refuse("weights: model.safetensors\nmoe:\n", "2:5: 'moe' lists no layers; list each MoE layer (scope, experts, top_k), or write them with --weights CHECKPOINT --emit-experts FILE");
	refuse("weights: model.safetensors\nmoe: ~\n", "2:6: 'moe' lists no layers; list each MoE layer (scope, experts, top_k), or write them with --weights CHECKPOINT --emit-experts FILE");
	refuse("weights: model.safetensors\nmoe: \"\"\n", "2:6: 'moe' must be a list of layers, not a scalar");
	refuse("weights: model.safetensors\nmoe: {scope: x}\n", "2:6: 'moe' must be a list of layers, not a mapping");
	refuse("version: 2\nweights: model.safetensors\nmoe: []\n",
		"1:10: schema version 2 is not supported; this tool reads version 1");
	refuse(HEAD "  - {scope: model.1, experts: 4, top_k: 2, router: {index: a}}\n",
		"3:53: unknown key 'index' in 'router'; did you mean 'indices'?");
	refuse(HEAD "  - {scope: model.1, experts: 4, top_k: 2}\n---\nmoe: []\n",
		"5:1: a second YAML document; experts.yaml holds exactly one");
	refuse(HEAD "  - model.1\n",
		"3:5: each 'moe' entry must be a mapping (scope, experts, top_k, ...), not a scalar");
}
END_TEST

START_TEST(spec_missing_file)
{
	Arena *a = arena_new();
	Spec s;
	Err e;
	ck_assert_int_eq(spec_load(&s, tu_path("nope.yaml"), 0, a, &e), -1);
	tu_err_has(e.msg, "nope.yaml: No such file or directory");
	arena_free(a);
}
END_TEST

/* What the document API would drop or hang on: unknown tags, deep
 * nesting, files that are not regular, oversized files. */
START_TEST(spec_hostile)
{
	refuse("weights: !!python/object/apply:os.system [\"id\"]\nmoe: []\n",
	       "1:10: tag 'tag:yaml.org,2002:python/object/apply:os.system' is not allowed; experts.yaml holds plain strings, numbers, lists and mappings");
	refuse("weights: model.safetensors\nmoe:\n  - !custom {scope: model.0, experts: 4, top_k: 2}\n",
	       "3:5: tag '!custom' is not allowed; experts.yaml holds plain strings, numbers, lists and mappings");
	refuse("weights: model.safetensors\nmoe: !!set {a, b}\n",
	       "2:6: tag 'tag:yaml.org,2002:set' is not allowed; experts.yaml holds plain strings, numbers, lists and mappings");
	/* Standard tags stay accepted. */
	Arena *a = arena_new();
	Spec sp;
	Err e = { "" };
	ck_assert_msg(load_yaml("weights: !!str model.safetensors\nmoe: !!seq\n  - {scope: model.0, experts: !!int 4, top_k: 2}\n",
				&sp, a, &e) == 0, "%s", e.msg);
	arena_free(a);
	char deep[400] = "weights: model.safetensors\nmoe: ";
	for (int i = 0; i < 100; i++)
		strcat(deep, "[");
	refuse(deep, "2:69: lists and mappings nested deeper than 64 levels; experts.yaml nests four");
	/* A FIFO is refused before it is read (a read would block). */
	const char *fifo = tu_path("fifo.yaml");
	ck_assert_int_eq(mkfifo(fifo, 0600), 0);
	a = arena_new();
	ck_assert_int_eq(spec_load(&sp, fifo, 0, a, &e), -1);
	tu_err_has(e.msg, "fifo.yaml: is a FIFO, not a regular file; give experts.yaml as a file");
	ck_assert_int_eq(spec_load(&sp, "/dev/null", 0, a, &e), -1);
	tu_err_has(e.msg, "/dev/null: is a device or socket, not a regular file");
	/* The size the message states is the one enforced: 1 MiB passes the
	 * size check (and fails later), one byte more does not. */
	size_t n = 1 << 20;
	char *big = malloc(n + 1);
	memset(big, '#', n + 1);
	big[n - 1] = '\n';
	ck_assert_int_eq(spec_load(&sp, tu_write("big.yaml", big, n), 0, a, &e), -1);
	tu_err_has(e.msg, "empty document");
	ck_assert_int_eq(spec_load(&sp, tu_write("big.yaml", big, n + 1), 0, a, &e), -1);
	tu_err_has(e.msg, "big.yaml: larger than 1024 KiB, too large for an expert description");
	free(big);
	arena_free(a);
}
END_TEST

START_TEST(spec_node_names)
{
	Arena *a = arena_new();
	static const char *const forms[][2] = {
		{ "/model.6/experts.3/conv/conv.0/Conv", "model.6.experts.3.conv.0" },
		{ "/model/model.6/experts.3/conv/conv.0/Conv", "model.6.experts.3.conv.0" },
		{ "/model/6/experts.3/conv/0/Conv", "model.6.experts.3.conv.0" },
		{ "/model/model.0/model.0.0/Conv", "model.0.0" },
		{ "/model/model.1/expert_projections.0/expert_projections.0.0/Conv", "model.1.expert_projections.0.0" },
		{ "/model/1/experts.1/Conv", "model.1.experts.1" },
		{ "/model/model/Add_1", "model.model" },
		{ "/model.6/router/TopK", "model.6.router" },
	};
	for (size_t i = 0; i < sizeof forms / sizeof *forms; i++)
		ck_assert_str_eq(spec_node_module(a, forms[i][0]), forms[i][1]);
	ck_assert_ptr_null(spec_node_module(a, "/Conv"));
	ck_assert_ptr_null(spec_node_module(a, "Constant_11"));
	ck_assert_ptr_null(spec_node_module(a, "onnx::Conv_209"));
	SpecLayer l = { .scope = "model.6", .expert = "experts.{i}" };
	ck_assert_int_eq(spec_place(&l, "model.6.experts.3.conv.0"), 3);
	ck_assert_int_eq(spec_place(&l, "model.6.experts.12"), 12);
	ck_assert_int_eq(spec_place(&l, "model.6.router"), SPEC_LAYER);
	ck_assert_int_eq(spec_place(&l, "model.6"), SPEC_LAYER);
	ck_assert_int_eq(spec_place(&l, "model.6.experts"), SPEC_LAYER);
	ck_assert_int_eq(spec_place(&l, "model.6.experts.03"), SPEC_LAYER);
	ck_assert_int_eq(spec_place(&l, "model.6.experts.3x"), SPEC_LAYER);
	ck_assert_int_eq(spec_place(&l, "model.6.experts.99999999999"), SPEC_LAYER);
	ck_assert_int_eq(spec_place(&l, "model.60.experts.1"), SPEC_OUTSIDE);
	ck_assert_int_eq(spec_place(&l, "model.5"), SPEC_OUTSIDE);
	l.expert = "blocks.{i}.ffn";
	ck_assert_int_eq(spec_place(&l, "model.6.blocks.2.ffn.w1"), 2);
	ck_assert_int_eq(spec_place(&l, "model.6.blocks.2.attn"), SPEC_LAYER);
	arena_free(a);
}
END_TEST

/* The commented reference schema/experts.yaml stays a valid file, with
 * every key present: it is loaded beside an (empty) model.safetensors. */
START_TEST(spec_reference)
{
	FILE *f = fopen(tu_srcfile("schema/experts.yaml"), "rb");
	ck_assert_ptr_nonnull(f);
	static char buf[16384];
	size_t n = fread(buf, 1, sizeof buf - 1, f);
	fclose(f);
	buf[n] = 0;
	Arena *a = arena_new();
	Spec s;
	Err e = { "" };
	ck_assert_msg(load_yaml(buf, &s, a, &e) == 0, "%s", e.msg);
	ck_assert_uint_eq(s.nlayer, 2);
	const SpecLayer *l = &s.layer[0];
	ck_assert_ptr_nonnull(l->router_indices);
	ck_assert_ptr_nonnull(l->router_weights);
	ck_assert_ptr_nonnull(l->input);
	ck_assert_ptr_nonnull(l->output);
	ck_assert_ptr_nonnull(l->checkpoint_key);
	ck_assert_int_eq(s.layer[1].experts, 8);
	arena_free(a);
}
END_TEST

static unsigned char *slurp(const char *path, size_t *n)
{
	FILE *f = fopen(path, "rb");
	if (!f)
		return NULL;
	fseek(f, 0, SEEK_END);
	*n = (size_t)ftell(f);
	rewind(f);
	unsigned char *b = malloc(*n + 1);
	ck_assert_uint_eq(fread(b, 1, *n, f), *n);
	fclose(f);
	return b;
}

/* Marks seen[l][i] for every node (subgraphs included) placed in expert i
 * of layer l. */
static void place_nodes(const Onnx__GraphProto *g, const Spec *s, Arena *a, unsigned char seen[][64])
{
	for (size_t i = 0; i < g->n_node; i++) {
		const Onnx__NodeProto *n = g->node[i];
		for (size_t k = 0; k < n->n_attribute; k++)
			if (n->attribute[k]->g)
				place_nodes(n->attribute[k]->g, s, a, seen);
		const char *mod = spec_node_module(a, n->name);
		for (size_t l = 0; mod && l < s->nlayer; l++) {
			int x = spec_place(&s->layer[l], mod);
			if (x >= 0) {
				ck_assert_msg(x < s->layer[l].experts, "%s: expert %d beyond E", n->name, x);
				seen[l][x] = 1;
			}
		}
	}
}

/* Broken exports hold the experts meta.json says the dummy kept (all of
 * them for scripted ones, inside If), dense ones hold all E. */
static void check_corpus_nodes(const char *yaml, const Spec *s, Arena *a)
{
	char dir[1024];
	snprintf(dir, sizeof dir, "%s", yaml);
	*strrchr(dir, '/') = 0;
	size_t n;
	unsigned char *mj = slurp(arena_printf(a, "%s/meta.json", dir), &n);
	ck_assert_ptr_nonnull(mj);
	Err e = { "" };
	JVal *meta = json_parse((const char *)mj, n, a, &e);
	ck_assert_msg(meta != NULL, "%s", e.msg);
	free(mj);
	const JVal *kept = NULL;
	int scripted = 0;
	for (size_t i = 0; i < meta->n; i++) {
		if (!strcmp(meta->key[i], "kept_by_dummy"))
			kept = meta->v[i];
		if (!strcmp(meta->key[i], "scripted"))
			scripted = meta->v[i]->type == J_TRUE;
	}
	ck_assert_ptr_nonnull(kept);
	static const char *const files[] = { "broken.onnx", "dense.onnx" };
	for (int f = 0; f < 2; f++) {
		unsigned char *b = slurp(arena_printf(a, "%s/%s", dir, files[f]), &n);
		if (!b)
			continue; /* scripted_if has no dense.onnx */
		ProtobufCAllocator pa = arena_pb(a);
		Onnx__ModelProto *m = onnx__model_proto__unpack(&pa, n, b);
		free(b);
		ck_assert_ptr_nonnull(m);
		unsigned char (*seen)[64] = arena_alloc(a, s->nlayer * sizeof *seen);
		place_nodes(m->graph, s, a, seen);
		for (size_t l = 0; l < s->nlayer; l++) {
			const SpecLayer *L = &s->layer[l];
			unsigned char want[64] = { 0 };
			if (f == 1 || scripted)
				memset(want, 1, (size_t)L->experts);
			else
				for (size_t k = 0; k < kept->n; k++)
					if (!strcmp(kept->key[k], L->scope))
						for (size_t j = 0; j < kept->v[k]->n; j++) {
							int64_t x;
							ck_assert_int_eq(json_uint(kept->v[k]->v[j], &x), 0);
							want[x] = 1;
						}
			for (int i = 0; i < L->experts && i < 64; i++)
				ck_assert_msg(seen[l][i] == want[i], "%s/%s: layer %s expert %d %s", dir, files[f],
					L->scope, i, want[i] ? "has no node" : "has nodes but the dummy did not keep it");
		}
	}
}

/* Every experts.yaml of the shared corpus parses, and for each layer and
 * each expert i some key starts with <prefix><scope>.<expert(i)>. in its
 * weights, and none for i = E (so E is not too small either). */
START_TEST(spec_corpus)
{
	const char *pat = tu_srcfile("../shared/corpus/*/*/experts.yaml");
	glob_t g;
	if (glob(pat, 0, NULL, &g) != 0) {
		fprintf(stderr, "spec_corpus: no corpus at %s, skipped\n", pat);
		return;
	}
	for (size_t c = 0; c < g.gl_pathc; c++) {
		Arena *a = arena_new();
		Spec s;
		Err e = { "" };
		ck_assert_msg(spec_load(&s, g.gl_pathv[c], 0, a, &e) == 0, "%s", e.msg);
		ck_assert_uint_gt(s.nlayer, 0);
		for (size_t li = 0; li < s.nlayer; li++) {
			const SpecLayer *l = &s.layer[li];
			WSrc *w = wsrc_open(l->weights, l->checkpoint_key, a, &e);
			ck_assert_msg(w != NULL, "%s", e.msg);
			for (int i = 0; i <= l->experts; i++) {
				const char *under = arena_printf(a, "%s%s.%s.", l->prefix, l->scope, spec_expert_path(a, l, i));
				size_t n = 0;
				for (size_t k = 0; k < w->n; k++)
					n += strncmp(w->t[k]->name, under, strlen(under)) == 0;
				if (i < l->experts)
					ck_assert_msg(n > 0, "%s: no key under %s", g.gl_pathv[c], under);
				else
					ck_assert_msg(n == 0, "%s: keys under %s: more experts than declared", g.gl_pathv[c], under);
			}
			wsrc_close(w);
		}
		check_corpus_nodes(g.gl_pathv[c], &s, a);
		arena_free(a);
	}
	fprintf(stderr, "spec_corpus: %zu experts.yaml checked\n", g.gl_pathc);
	globfree(&g);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("spec");
	TCase *tc = tcase_create("spec");
	tcase_add_checked_fixture(tc, tu_setup, tu_teardown);
	tcase_add_test(tc, spec_full);
	tcase_add_test(tc, spec_errors);
	tcase_add_test(tc, spec_missing_file);
	tcase_add_test(tc, spec_hostile);
	tcase_add_test(tc, spec_node_names);
	tcase_add_test(tc, spec_reference);
	tcase_add_test(tc, spec_corpus);
	suite_add_tcase(s, tc);
	return tu_run(s);
}
