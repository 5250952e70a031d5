/* Model I/O: load a .onnx through mmap + protobuf-c unpack into the arena,
 * save by streaming pack into a temporary file beside the target, fsync,
 * rename. Lossless: load then save with no pass gives the same bytes. */
#ifndef MODEL_H
#define MODEL_H
#include <stddef.h>
#include "arena.h"
#include "err.h"
#include "onnx.pb-c.h"

typedef struct {
	const char *path; /* as given */
	const char *dir;  /* folder external data is resolved against */
	Arena *a;
	Onnx__ModelProto *m;
	size_t size;      /* bytes of the file loaded */
} Model;

int model_load(Model *md, const char *path, Arena *a, Err *e);

enum {
	SAVE_IN_PLACE = 1 << 0, /* allow out == the input path */
};
/* out "-" writes to standard output. Refuses to write over md->path unless
 * SAVE_IN_PLACE. Nothing is left behind on failure. */
int model_save(const Model *md, const char *out, int flags, Err *e);

#endif
