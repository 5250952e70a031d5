/* A restricted pickle interpreter for torch.save checkpoints.
 * It never imports or calls anything: a GLOBAL is only a name. A few names
 * torch.save writes are understood (tensor and parameter rebuilders,
 * OrderedDict, storage types, torch.Size, set); any other class or function
 * applied by REDUCE/NEWOBJ and filled by BUILD becomes an opaque object that
 * keeps its name, arguments and state, so a pickled nn.Module tree can still
 * be walked through `_modules`, `_parameters` and `_buffers`.
 * Every length and index read from the stream is checked before use; memory
 * grows linearly with the stream, and nesting is bounded. */
#ifndef PICKLE_H
#define PICKLE_H
#include <stddef.h>
#include <stdint.h>
#include "arena.h"
#include "err.h"
#include "map.h"

/* PK_MAXREPEAT: the largest dense size of a view that repeats its
 * storage's elements (expand); larger ones are refused. */
enum { PK_MAXDIM = 8, PK_MAXDEPTH = 1000, PK_MAXREPEAT = 1 << 20 };

typedef enum {
	PK_NONE, PK_BOOL, PK_INT, PK_BIGINT, PK_FLOAT, PK_STR, PK_BYTES,
	PK_TUPLE, PK_LIST, PK_SET, PK_DICT, PK_GLOBAL, PK_OBJ,
	PK_STORAGE, PK_TENSOR
} PkKind;

typedef struct PkVal PkVal;

typedef struct {
	PkVal **v;
	size_t n, cap;
} PkSeq;

typedef struct {
	PkVal **k, **v;
	size_t n, cap;
	Map idx;        /* NUL-free string key -> 1 + position, for lookup and replacement */
	PkVal *state;   /* BUILD on a dict (OrderedDict's _metadata), kept, unused */
} PkDict;

typedef struct {
	const char *cls; /* "module.name" of the callable, or "?" when it was not a GLOBAL */
	PkVal *fn, *args, *state; /* fn NULL: a tensor the reader declined (cls says why) */
	PkSeq items;     /* APPENDs on a list subclass */
	PkDict dict;     /* SETITEMs on a dict subclass */
} PkObj;

/* A storage named by a persistent id ('storage', type, key, location, numel).
 * data and nbytes are filled by the resolver given to pk_load. */
typedef struct {
	const char *key, *location;
	int dtype, elsize; /* ONNX TensorProto codes */
	int64_t numel;     /* in elements of dtype */
	const void *data;
	size_t nbytes;
} PkStorage;

typedef struct {
	int dtype, elsize;
	const PkStorage *st;
	int64_t offset;    /* in elements of dtype */
	int ndim;
	int64_t size[PK_MAXDIM], stride[PK_MAXDIM];
	int contiguous;    /* row-major dense from offset */
} PkTensor;

struct PkVal {
	PkKind kind;
	int depth; /* nesting below this value, as built */
	union {
		int64_t i; /* PK_BOOL, PK_INT */
		double f;
		struct {
			const char *s; /* NUL-terminated copy */
			size_t len;
		} str;     /* PK_STR, PK_BYTES, PK_BIGINT (raw little-endian bytes) */
		PkSeq seq; /* PK_TUPLE, PK_LIST, PK_SET */
		PkDict dict;
		struct {
			const char *module, *name;
		} glob;
		PkObj obj;
		PkStorage st;
		PkTensor t;
	} u;
};

/* Called once per persistent id; fills st->data and st->nbytes (at least
 * st->numel * st->elsize bytes) or fails. */
typedef int (*PkResolve)(void *ctx, PkStorage *st, Err *e);

/* Runs the pickle in p[0..n). where names it in messages, which read
 * "where: offset N (OPCODE): what; what to do". */
PkVal *pk_load(const void *p, size_t n, const char *where, PkResolve resolve,
	void *ctx, Arena *a, Err *e);

const char *pk_kind_name(PkKind k);
/* String-keyed dict lookup; NULL when d is not a dict or has no such key. */
PkVal *pk_dict_get(const PkVal *d, const char *key);
/* An opaque object's attribute from its BUILD state (dict, or the
 * (dict, slots) pair of objects with __slots__). */
PkVal *pk_attr(const PkVal *obj, const char *name);
/* That BUILD state's dict (of a (dict, slots) pair, the dict), or NULL. */
const PkVal *pk_state(const PkVal *obj);
/* Byte size of the tensor's elements; -1 on overflow. */
int64_t pk_tensor_nbytes(const PkTensor *t);

#endif
