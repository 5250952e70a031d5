/* Shape and element-type inference, the one every pass and the checker
 * read: element type, rank, dimensions and, for small integer tensors
 * (shape arithmetic), element values, of every value of the model, main
 * graph and bodies alike.
 *
 * One forward walk: each graph's nodes in dependency order (node order for
 * a sorted graph; a pass that appended nodes gets them after what they
 * read), a body when its If/Loop/Scan is reached, with the outer values
 * visible. Each node is visited once and reads only its inputs' results,
 * so the cost is linear in the model and nothing recurses along value
 * chains (only along body nesting, which the loader bounds).
 *
 * Sources are what the model declares (graph inputs, outputs, value_info;
 * a dim_param is unknown), initializers and Constant nodes; rules cover the
 * default-domain ops exported vision models hold, each in its opset's
 * form. What a rule cannot tell stays unknown: an unknown op, another
 * domain, a malformed node give unknown outputs, never a guess. Where a
 * declaration and the inference disagree, the dimension (or rank) is
 * unknown, and both element types stay visible (elem, decl) for the
 * checker. */
#ifndef INFER_H
#define INFER_H
#include <stddef.h>
#include <stdint.h>

#include "graph.h"

enum {
	TY_MAXRANK = 64, /* a deeper rank is kept as unknown: ranks this deep are hostile, not models */
	TY_MAXVAL = 64,  /* element values are tracked for at most this many elements */
};
#define TY_UNK INT64_MIN /* an element whose value is not known */

struct Ty {
	int elem;           /* TensorProto.DataType as computed (declared when not), 0 unknown */
	int decl;           /* the element type a ValueInfoProto declares, 0 none */
	int rank;           /* -1 unknown */
	const int64_t *dim; /* rank entries, -1 unknown (or symbolic) */
	const int64_t *val; /* element values in row-major order, TY_UNK where unknown;
	                     * NULL when not tracked (only integer and bool tensors
	                     * of rank <= 1 and at most TY_MAXVAL elements are) */
	int nval;           /* entries of val: the element count (0 for an empty tensor) */
};
typedef struct Ty Ty;

/* Infers every value of c's model into the index (Val.ty, in c->ia). Run
 * after g_reindex, which drops the results; g_rewrite keeps them current
 * between its rounds once they exist. Fails only on a malformed index. */
int g_infer(Ctx *c, Err *e);

/* What is known of name as seen from g (enclosing graphs included); NULL
 * when nothing is (not inferred, or no such value). */
const Ty *g_ty(const Graph *g, const char *name);
int g_ty_elem(const Graph *g, const char *name);                /* 0 unknown */
int g_ty_rank(const Graph *g, const char *name);                /* -1 unknown */
int64_t g_ty_dim(const Graph *g, const char *name, int64_t d);  /* d < 0 counts from the end; -1 unknown */
/* Element i of a tracked value: 1 and *v when known, else 0. */
int g_ty_val(const Graph *g, const char *name, size_t i, int64_t *v);
int64_t g_ty_numel(const Graph *g, const char *name); /* -1 unknown */
int64_t ty_numel(const Ty *t); /* -1 unknown or past INT64_MAX */
/* The same queries on a Ty in hand (NULL: nothing known), for walks that
 * have a node's inputs already: no name to look up again. */
int ty_rank(const Ty *t);                 /* -1 unknown */
int64_t ty_dim(const Ty *t, int64_t d);   /* d < 0 counts from the end; -1 unknown */
int ty_val(const Ty *t, size_t i, int64_t *v);

/* "float16[1,3,?,?]", "int64[2]={1,?}", "?": for messages and tests. */
const char *ty_str(Arena *a, const Ty *t);
/* Element types: ONNX's name ("float16", "int64"; "type N" for others),
 * the byte size (0 for strings and types without a fixed size), and
 * whether the compiled schema defines the value (UNDEFINED does not). */
const char *elem_name(int dt);
size_t elem_size(int dt);
int elem_valid(int dt);
int elem_is_int(int dt);   /* integer types and bool: the ones whose values are tracked */
int elem_is_float(int dt); /* float, double, float16, bfloat16 */

#endif
