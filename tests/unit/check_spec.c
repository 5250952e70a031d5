#include <dirent.h>
#include <glob.h>

#include "spec.h"
#include "testutil.h"
#include "wsrc.h"

/* Writes experts.yaml (and an empty model.safetensors beside it, since
 * weights files must exist) and loads it. */
static int load_yaml(const char *yaml, Spec *s, Arena *a, Err *e)
{
	tu_write("model.safetensors", "", 0);
	return spec_load(s, tu_write("experts.yaml", yaml, strlen(yaml)), a, e);
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
	refuse("moe:\n  - {scope: model.1, experts: 4, top_k: 2}\n",
		"2:5: layer 'model.1' has no 'weights' and there is no top-level 'weights'");
	refuse("weights: model.safetensors\nmoe:\n\t- scope: model.1\n",
		"3:1: tab character; YAML indentation must use spaces");
	refuse(HEAD "  - {scope: model.1, experts: 4\n",
		"4:1: did not find expected ',' or '}' while parsing a flow mapping (line 3)");
	refuse("", "1:1: empty document; expected a mapping with 'weights' and 'moe' (see schema/experts.yaml)");
	refuse("# only a comment\n", "1:1: empty document; expected a mapping with 'weights' and 'moe' (see schema/experts.yaml)");
	refuse("- a\n- b\n", "1:1: the document must be a mapping with 'weights' and 'moe', not a list");
	refuse("weights: model.safetensors\n", "1:1: missing required key 'moe' (the list of MoE layers)");
	refuse("weights: model.safetensors\nmoe: []\n", "2:6: 'moe' lists no layers");
	refuse("weights: model.safetensors\nmoe: {scope: x}\n", "2:6: 'moe' must be a list of layers, not a mapping");
	refuse("version: 2\nweights: model.safetensors\nmoe: []\n",
		"1:10: schema version 2 is not supported; this tool reads version 1");
	refuse(HEAD "  - {scope: model.1, experts: 4, top_k: 2, router: {index: a}}\n",
		"3:53: unknown key 'index' in 'router'; did you mean 'indices'?");
	refuse(HEAD "  - model.1\n",
		"3:5: each 'moe' entry must be a mapping (scope, experts, top_k, ...), not a scalar");
}
END_TEST

START_TEST(spec_missing_file)
{
	Arena *a = arena_new();
	Spec s;
	Err e;
	ck_assert_int_eq(spec_load(&s, tu_path("nope.yaml"), a, &e), -1);
	tu_err_has(e.msg, "nope.yaml: No such file or directory");
	arena_free(a);
}
END_TEST

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
		ck_assert_msg(spec_load(&s, g.gl_pathv[c], a, &e) == 0, "%s", e.msg);
		ck_assert_uint_gt(s.nlayer, 0);
		for (size_t li = 0; li < s.nlayer; li++) {
			const SpecLayer *l = &s.layer[li];
			WSrc *w = wsrc_open(l->weights, l->checkpoint_key, a, &e);
			ck_assert_msg(w != NULL, "%s", e.msg);
			for (int i = 0; i <= l->experts; i++) {
				const char *under = arena_printf(a, "%s%s.%s.", l->prefix, l->scope, spec_expert_path(a, l, i));
				size_t n = 0;
				for (size_t k = 0; k < w->n; k++)
					n += strncmp(w->t[k].name, under, strlen(under)) == 0;
				if (i < l->experts)
					ck_assert_msg(n > 0, "%s: no key under %s", g.gl_pathv[c], under);
				else
					ck_assert_msg(n == 0, "%s: keys under %s: more experts than declared", g.gl_pathv[c], under);
			}
			wsrc_close(w);
		}
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
	tcase_add_test(tc, spec_corpus);
	suite_add_tcase(s, tc);
	return tu_run(s);
}
