/* One weight reader: the bytes become FILE inside the private folder
 * (WSRC_OPEN names what wsrc_open gets: the file, or the folder of .npy),
 * every tensor found is read whole and converted to f32 when it is a float
 * type, as the passes do. */
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "wsrc.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const char *path = fuzz_file(WSRC_FILE, data, size);
	char open[512];
	strcpy(open, path);
	if (WSRC_DIR)
		*strrchr(open, '/') = 0;
	Arena *a = arena_new();
	Err e;
	WSrc *w = wsrc_open(open, NULL, a, &e);
	if (w) {
		for (size_t i = 0; i < w->n; i++) {
			const WTensor *t = w->t[i];
			if (wsrc_get(w, t->name) != t)
				abort(); /* the index must point at the tensor */
			int64_t nb = wt_nbytes(t);
			if (nb >= 0 && (uint64_t)nb != t->nbytes)
				abort(); /* a reader accepted a size its shape disagrees with */
			volatile unsigned char sum = 0;
			for (size_t k = 0; k < t->nbytes; k++)
				sum += ((const unsigned char *)t->data)[k];
			int64_t n = wt_numel(t);
			if (n >= 0 && n < (1 << 20)) {
				float *f = malloc((size_t)(n ? n : 1) * sizeof *f);
				wt_to_f32(t, f, &e);
				free(f);
			}
		}
		wsrc_missing(w, "model.0.experts.1.conv.weight", "model.0.experts.1", &e);
		wsrc_close(w);
	}
	arena_free(a);
	return 0;
}
