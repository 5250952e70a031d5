/* The ONNX loader and the structural checker: model_load on the bytes as
 * a file, then the graph index and g_check, as the CLI does before any
 * pass; a model that loads must also pack again. */
#include <stdlib.h>

#include "fuzz.h"
#include "graph.h"
#include "model.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const char *path = fuzz_file("m.onnx", data, size);
	Arena *a = arena_new();
	Model md;
	Err e;
	if (model_load(&md, path, a, &e) == 0) {
		Ctx c;
		if (g_init(&c, md.m, a, &e) == 0)
			g_check(&c, &e);
		g_fini(&c);
		protobuf_c_message_get_packed_size(&md.m->base);
		model_close(&md);
	}
	arena_free(a);
	return 0;
}
