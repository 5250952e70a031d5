/* Weight sources: where the experts' checkpoint tensors come from.
 * One interface over .safetensors, .npz, a directory of .npy, an .onnx donor
 * and a torch.save checkpoint (.pt/.pth). A source is opened once, indexed by
 * key, and read without copying where the format allows (mmap). */
#ifndef WSRC_H
#define WSRC_H
#include <stddef.h>
#include <stdint.h>
#include "arena.h"
#include "err.h"
#include "map.h"

enum { WT_MAXDIM = 8 };

/* dtype codes are ONNX TensorProto.DataType values (1 float, 10 float16,
 * 16 bfloat16, 11 double, 7 int64, ...), so a tensor can go straight into an
 * initializer. */
typedef struct {
	const char *name;
	int dtype;
	int ndim;
	int64_t *dims;    /* ndim entries: a reader's own array until wsrc_add copies them,
	                   * so an index of 80 000 tensors keeps no unused 8-slot arrays */
	const void *data; /* little-endian, contiguous row-major; in a mapping or the arena;
	                   * not necessarily aligned (safetensors offsets are arbitrary): memcpy */
	size_t nbytes;
} WTensor;

typedef struct {
	void *base;
	size_t len;
} WMapping;

typedef struct {
	const char *path;
	/* Each tensor allocated on its own: a checkpoint of 80 000 small
	 * tensors grew one array of them by doubling, copies and all. */
	WTensor **t;
	size_t n;
	Map byname;      /* name -> WTensor * */
	Map attr;       /* "module.eps" -> double *: scalar attributes of pickled modules */
	Map sig;        /* "module." -> const char *: a pickled module's class and shape attributes */
	WTensor **order; /* t by name, for wsrc_range; NULL until asked */
	WMapping *maps; /* unmapped by wsrc_close */
	size_t nmaps;
	Arena *a;
} WSrc;

/* Opens by extension (.safetensors, .npz, .npy directory, .onnx, .pt/.pth/.bin
 * zip checkpoints). key selects an entry of a checkpoint dict (NULL: the
 * detector convention, 'ema' when present and not None, else 'model', else
 * the file itself). Errors name the file and what is wrong. */
WSrc *wsrc_open(const char *path, const char *key, Arena *a, Err *e);
void wsrc_close(WSrc *w);
/* Drops the pages of the mappings read so far from the process (they stay
 * in the page cache; the mappings are read-only, so reading again just
 * faults them back): a multi-GB checkpoint read layer by layer then costs
 * one layer of resident memory. Data pointers stay valid. */
void wsrc_drop(WSrc *w);
const WTensor *wsrc_get(const WSrc *w, const char *name);
/* Starts loading name's entry into the cache: for lookups made together. */
void wsrc_prefetch(const WSrc *w, const char *name);
/* The keys starting with prefix: indices lo..hi-1 of wsrc_sorted, the
 * keys in byte order (sorted once, on first use). */
void wsrc_range(WSrc *w, const char *prefix, size_t *lo, size_t *hi);
const WTensor *wsrc_sorted(const WSrc *w, size_t i);
/* Sorts the keys now (wsrc_range would on first use): for a thread that
 * opens a source ahead of the one that will read it. */
void wsrc_sort(WSrc *w);
/* A number a checkpoint of pickled modules records beside the tensors
 * (BatchNorm's eps: "model.3.bn.eps"). Returns 1 and fills *v when known. */
int wsrc_attr(const WSrc *w, const char *name, double *v);
/* What a checkpoint of pickled modules records of the module at prefix
 * ("model.3.conv."): its class and the attributes that shape its output
 * (kernel, stride, padding, dilation, groups...), in words; NULL when the
 * checkpoint holds tensors only. Two experts' modules alike say the same. */
const char *wsrc_sig(const WSrc *w, const char *prefix);
/* The modules wsrc_sig knows under prefix (their paths, prefix included),
 * tensors or none: *n of them, in no particular order. */
const char **wsrc_sig_under(const WSrc *w, const char *prefix, Arena *a, size_t *n);
/* The error for a key that is not there: names the file and lists the keys
 * found under `under` (the expert's path), or says none start with it.
 * Returns -1. */
int wsrc_missing(const WSrc *w, const char *key, const char *under, Err *e);

/* Helpers shared by the readers. */
int wsrc_add(WSrc *w, const WTensor *t, Err *e); /* duplicate names are an error */
/* Takes back every tensor added (a reader that must read the file another
 * way) and sizes the name table for n tensors. */
void wsrc_restart(WSrc *w, size_t n);
int wsrc_mmap(WSrc *w, const char *path, const void **base, size_t *len, Err *e);
size_t wt_dtype_size(int dtype);            /* 0 for unknown */
const char *wt_dtype_name(int dtype);
int64_t wt_numel(const WTensor *t);         /* -1 on overflow or a negative dim */
int64_t wt_nbytes(const WTensor *t);        /* numel * dtype size; -1 on overflow or unknown dtype */
/* Converts between float, float16, bfloat16 and double (round to nearest
 * even); same dtype: *out = *t, no copy. Other pairs are an error. */
int wt_convert(const WTensor *t, int dtype, Arena *a, WTensor *out, Err *e);
/* Converts any float type (f16, bf16, f32, f64) to f32; -1 for other types. */
int wt_to_f32(const WTensor *t, float *out, Err *e);
float wt_f16_to_f32(uint16_t h);
float wt_bf16_to_f32(uint16_t h);
uint16_t wt_f32_to_f16(float f);
uint16_t wt_f32_to_bf16(float f);

/* Per-format openers, called by wsrc_open with w->path, w->a and an empty
 * index. Their messages need not name the file: wsrc_open prefixes
 * "PATH: " unless the message already starts with it. */
int wsrc_read_safetensors(WSrc *w, Err *e);
int wsrc_read_npz(WSrc *w, Err *e);
int wsrc_read_npydir(WSrc *w, Err *e);
int wsrc_read_onnx(WSrc *w, Err *e);
int wsrc_read_pt(WSrc *w, const char *key, Err *e);

#endif
