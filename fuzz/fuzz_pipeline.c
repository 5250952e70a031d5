/* The whole repair on mutated models: the last input byte picks one of the
 * testdata cases (its experts.yaml and weights), the mode and the dispatch
 * (bit 5: sparse), the rest is the model. Seeds are the cases' broken and
 * dense exports. */
#include <stdio.h>
#include <stdlib.h>

#include "fuzz.h"
#include "model.h"
#include "pipeline.h"

#ifndef FUZZ_TESTDATA
#error "FUZZ_TESTDATA: the testdata folder, absolute"
#endif

static const char *const cases[8] = {
	"example", "convkinds", "detector_k1", "detector_k2",
	"dynbatch", "scripted_if", "sharedstem", "single_gn",
};

/* Parsed once: the specs are not what this harness fuzzes. */
static Spec spec[8];
static int loaded[8];
static Arena *sa;

static const Spec *spec_of(int i)
{
	if (!loaded[i]) {
		char p[1024];
		Err e;
		snprintf(p, sizeof p, "%s/%s/experts.yaml", FUZZ_TESTDATA, cases[i]);
		if (!sa)
			sa = arena_new();
		if (spec_load(&spec[i], p, 0, sa, &e) < 0) {
			fprintf(stderr, "fuzz_pipeline: %s\n", e.msg);
			abort();
		}
		loaded[i] = 1;
	}
	return &spec[i];
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 2)
		return 0;
	unsigned sel = data[size - 1];
	const Spec *s = sel & 8 ? NULL : spec_of(sel & 7);
	Opts o = { .check_only = (sel & 16) != 0, .dispatch = sel & 32 ? DISPATCH_SPARSE : DISPATCH_DENSE };
	const char *path = fuzz_file("m.onnx", data, size - 1);
	Arena *a = arena_new();
	Model md;
	Report r;
	Err e;
	if (model_load(&md, path, a, &e) == 0) {
		if (pipeline_run(&md, s, &o, &r, &e) == 0)
			protobuf_c_message_get_packed_size(&md.m->base);
		model_close(&md);
	}
	arena_free(a);
	return 0;
}
