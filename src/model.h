/* Model I/O: load a .onnx through mmap + protobuf-c unpack into the arena,
 * save by streaming pack into a temporary file beside the target, fsync,
 * rename. Lossless: load then save with no pass gives the same bytes. */
#ifndef MODEL_H
#define MODEL_H
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/stat.h>
#include "arena.h"
#include "err.h"
#include "map.h"
#include "onnx.pb-c.h"
#include "progress.h"

/* The default ONNX operator set: a node or opset_import whose domain is
 * unset, empty or "ai.onnx". */
static inline int model_default_domain(const char *d)
{
	return !d || !*d || strcmp(d, "ai.onnx") == 0;
}

typedef struct {
	const char *path; /* as given */
	const char *dir;  /* folder external data is resolved against */
	Arena *a;
	Onnx__ModelProto *m;
	size_t size;      /* bytes of the file loaded */
	Map ext;          /* external data: location -> its mapping (ExtFile), made on demand */
	int next;         /* tensors with data_location EXTERNAL */
	/* model_save_as wrote into a folder lacking the input's data files:
	 * how many external tensors it copied, their bytes, and where. */
	size_t ncopied;
	unsigned long long copied;
	const char *copied_to;
	Progress *progress; /* model_save reports bytes written to it; NULL: none */
	/* Tensors whose values the save writes (graph.h's Later), set by whoever
	 * made them; done(done_ud) runs at model_close, after the last save:
	 * what the fills read stays open until then. drop(done_ud), when set,
	 * runs after every few MiB filled: the fills' sources let go of the
	 * pages read so far, so resident memory stays small. */
	struct Later **later;
	size_t nlater;
	void (*done)(void *ud);
	void (*drop)(void *ud);
	void *done_ud;
	/* A check of the model running while it is written (pipeline_run's
	 * final check, Opts.check_async): called once, before the output is
	 * committed or a byte goes to a pipe, and before the tensors are moved
	 * to an external data file; nonzero (e set) fails the save, which
	 * then leaves nothing behind. model_close calls it if no save did. */
	int (*verify)(void *ud, Err *e);
	void *verify_ud;
	unsigned char *lbase; /* their placeholders' reserved range (model.c) */
	size_t llen;
	/* Read-only zeros the all-zero tensors the load cut out point at
	 * (model.c), unmapped by model_close; NULL: none cut. */
	uint8_t *zeros;
	size_t nzeros;
	/* Ranges the load is done with, their pages let go, unmapped by
	 * model_close (model.c, let_go): the input's mapping, the unpack's
	 * copy. */
	struct {
		void *p;
		size_t n;
	} gone[2];
	struct Later **placed; /* by placeholder address */
	size_t nplaced;
} Model;

/* Refuses what is not a ModelProto with a graph (with the byte offset where
 * the wire format breaks), and external data whose location is absolute,
 * has a ".." component, is or passes through a symlink, is missing, or is
 * shorter than offset+length. */
int model_load(Model *md, const char *path, Arena *a, Err *e);
/* The wire-format walk model_load runs before protobuf-c's recursive
 * unpack: well-formed tags, lengths and wire types, nesting bounded so a
 * crafted file cannot exhaust the stack. For any reader unpacking a
 * ModelProto; the message says where it breaks (no file name). */
int model_wire_check(const void *p, size_t n, Err *e);
/* Unmaps the external data mappings model_tensor_data made and runs done.
 * The arena (and so the protobuf) is the caller's. */
void model_close(Model *md);

enum {
	SAVE_IN_PLACE = 1 << 0, /* allow out == the input path */
	SAVE_NO_SYNC = 1 << 1,  /* no fsync: still atomic for readers, not durable across a power loss */
};
/* out "-" writes to standard output. Refuses to write over md->path unless
 * SAVE_IN_PLACE, and over an external data file always. Refuses a model
 * over 2 GiB - 1 packed (protobuf's limit). External tensors keep their
 * relative location: writing to another folder is refused unless each
 * data file there is the same file as, or a byte-identical copy of, the
 * one beside the input. Nothing is left behind on failure. */
int model_save(Model *md, const char *out, int flags, Err *e);
/* model_save, with the inline data (>= 1 KiB) of the main graph's
 * initializers moved to the external file `data`, a location relative to
 * out's folder, at 4 KiB-aligned offsets; tensors already external keep
 * their references where out's folder shows their files as model_save
 * asks, and are copied to `data` otherwise. data NULL: only when the model
 * would pass the 2 GiB protobuf limit or needs such a copy, then to
 * OUT.data beside it (OUT being out's file name). Changes md's tensors. */
int model_save_as(Model *md, const char *out, const char *data, int flags, Err *e);
/* model_save_as's checks of its outputs that need no work done: run
 * before the work, so a wrong -o or --external-data stops the run before
 * it, not after. The save checks again. */
int model_save_check(Model *md, const char *out, const char *data, int flags, Err *e);
/* Drops the pages of external data read so far from the process (they
 * stay cached; reading again faults them back). */
void model_drop(Model *md);

/* The value of an external tensor's entry (location, offset, length); an
 * entry without value reads as ""; NULL when absent. */
const char *model_ext_get(const Onnx__TensorProto *t, const char *key);
/* The folder of a file's path: "." for a bare name, "/" at the root. */
const char *model_dir_of(Arena *a, const char *path);
/* Offset and length of an external tensor's bytes in its file (size
 * bytes, named loc in messages), from its entries; -1 (e set) when they
 * are not numbers, pass the file's end, or disagree with dims x type. */
int model_ext_range(const Onnx__TensorProto *t, const char *loc, long long size, int64_t *off, int64_t *len, Err *e);
/* Where an external data location of a model in folder dir points: its
 * path, the file's stat in st; NULL (e set, saying why and what to do)
 * unless it is relative, without a '..' component, with no symlink on the
 * way, and a regular file. For donor models too. */
const char *model_ext_path(Arena *a, const char *dir, const char *loc, struct stat *st, Err *e);

/* A tensor's bytes: raw_data when embedded, else the slice of its external
 * file, mapped read-only until model_close. Values kept in typed fields
 * (float_data, int64_data, ...) are an error: callers convert those. */
int model_tensor_data(Model *md, const Onnx__TensorProto *t, const void **p, size_t *n, Err *e);

#endif
