/* Model-local functions (FunctionProto), inlined into the graphs that call
 * them, before the model is indexed. */
#ifndef INLINE_H
#define INLINE_H
#include "arena.h"
#include "err.h"
#include "onnx.pb-c.h"

/* What model_inline replaced, for model_uninline. */
typedef struct {
	struct InlineLog *log;
	size_t nlog;
	Onnx__OperatorSetIdProto **opset_import;
	size_t n_opset_import;
	Onnx__FunctionProto **functions;
	size_t n_functions;
	size_t n; /* calls inlined; 0: m is untouched */
} Inlined;

/* Replaces every call of one of m's local functions, in the main graph and
 * its subgraphs, by the function's nodes, until none is left; the
 * functions are then dropped. New nodes and values are named under the
 * calling node's module path, unique in the model. -1 when a call cannot
 * be inlined as it means (e says which and why). */
int model_inline(Onnx__ModelProto *m, Arena *a, Inlined *u, Err *e);
/* m as it was before model_inline, when nothing else has changed it: a
 * model with nothing to repair is written as it came. */
void model_uninline(Onnx__ModelProto *m, const Inlined *u);

#endif
