/* The experts.yaml parser; layer patterns are expanded as the passes do. */
#include "fuzz.h"
#include "spec.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const char *path = fuzz_file("experts.yaml", data, size);
	Arena *a = arena_new();
	Spec s;
	Err e;
	if (spec_load(&s, path, 0, a, &e) == 0)
		for (size_t i = 0; i < s.nlayer; i++)
			for (int k = 0; k < s.layer[i].experts && k < 4; k++)
				spec_expert_path(a, &s.layer[i], k);
	arena_free(a);
	return 0;
}
