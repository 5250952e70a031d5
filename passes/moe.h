/* What the MoE passes share: a detected layer and its experts.
 *
 * detect.c finds every MoE layer by data flow alone: a router TopK whose
 * indices the dispatch compares with expert ids, each present expert's
 * nodes (between the row gather of the layer input and the product with
 * its routing weight), the [B,k] indices and weights the dispatch reads,
 * and the routed sum. bind.c then ties each experts.yaml layer to one
 * detected layer (by node names when they carry module paths, else by
 * checkpoint values). wmap.c maps a present expert's tensors to the
 * checkpoint so missing experts can be rebuilt; densify.c rewrites the
 * layer into the static dense form.
 *
 * Layers hold nodes and value names (model arena), never index objects:
 * they stay valid across g_reindex. `gen` records the index they were
 * detected on; the passes that also hold Graph pointers check it. */
#ifndef MOE_H
#define MOE_H
#include "graph.h"
#include "report.h"
#include "spec.h"
#include "wsrc.h"

typedef struct {
	int id;           /* the expert id the dispatch compares the indices with */
	Node *eq;         /* that Equal (or the Gather picking its row of a transposed one-hot) */
	Node **node;      /* the expert's nodes, in graph order */
	size_t nnode;
	Graph *g;         /* graph holding them (an If body for scripted layers); see Layer.gen */
	const char *in;   /* value the expert reads: gathered rows, or the full input */
	const char *out;  /* value multiplied by its routing weight */
	const char *prod; /* that product: the expert's weighted contribution */
	Node *mul;        /* the node computing it (in the expert's graph) */
	Node *gate;       /* the main-graph If gating it, or NULL */
} Expert;

/* FORM_DENSE and FORM_SPARSE are static dispatches: nothing to repair.
 * FORM_UNKNOWN: a data-dependent dispatch detection could not express
 * (diagnosis only; Layer.why says what disagreed). */
typedef enum { FORM_ROWS, FORM_MASKSUM, FORM_DENSE, FORM_SPARSE, FORM_UNKNOWN } Form;
#define FORM_STATIC(f) ((f) == FORM_DENSE || (f) == FORM_SPARSE)

typedef struct {
	const SpecLayer *spec; /* bound experts.yaml layer; NULL in diagnosis */
	const char *scope;     /* spec scope, else the module path names suggest, else the TopK's name */
	const char *module;    /* module path from node names ("" for a bare module), NULL without names */
	const char *pattern;   /* expert module path under `module` with {i}, from names; NULL unknown */
	const char **named;    /* per present expert: its module path as names show it (with pattern) */
	const char *topmodule; /* the router TopK's module path, NULL without names */
	Node *topk;
	int64_t topk_k;       /* the TopK's K when constant, else -1 */
	int64_t width;        /* router width (the TopK axis' size) when known, else -1 */
	const char *indices;  /* [B,k,...] expert ids as the dispatch compares them */
	const char *weights;  /* [B,k,...] weights as the dispatch multiplies them */
	const char *wmask;    /* [B,k] condition the dispatch adds to the id match, or NULL */
	int64_t wcast;        /* element type the weights are cast to before the product, 0: none */
	int permap;           /* routing per position (MoT): indices and weights are [B,k,S...] for
	                       * expert outputs [B,C,S...]; each expert weighs its rows by its channel
	                       * of the [B,E,S...] map the weights were scattered into */
	const char *x;        /* the full tensor the experts read */
	int rowc;             /* the NonZero coordinate that is the row: 0, or 1 where the mask is
	                       * [k,B] (one_hot(indices).permute(2, 1, 0)[id], Mixtral's dispatch) */
	int rowax;            /* the axis of x the rows are gathered along: 0, or 1 where x is
	                       * Unsqueeze(h, 0) (h[None, rows]) */
	const char *combined; /* the routed sum the rest of the model reads */
	int rank;             /* rank of one expert's output */
	Expert *ex;           /* present experts, by id */
	size_t nex;
	Form form;
	const char *why;      /* FORM_UNKNOWN: why the layer cannot be repaired */
	int nif;              /* If nodes gating experts */
	int nodes, convs;     /* nodes (and Conv nodes) of the present experts */
	unsigned gen;         /* c->gen at detection */
} Layer;

/* Every MoE layer of the model, in graph order of their routers. A router
 * whose indices reach an expert-id comparison but whose dispatch cannot be
 * expressed is an error saying why. s (or NULL) lends its explicit values
 * (input, output) to the layers its names or router.indices point at;
 * Layer.spec is that hint until moe_bind sets the binding. lenient (for
 * diagnosis): a router whose dispatch cannot be expressed is a layer of
 * FORM_UNKNOWN, not an error. */
int moe_find(Ctx *c, const Spec *s, int lenient, Layer **out, size_t *n, Err *e);
/* Whether two experts' subgraphs have the same ops in the same order, with
 * the same attributes but values (a Constant's, a tensor's): a missing
 * expert is a clone of a present one, so a layer whose present experts
 * differ (MoT's three transformer kinds; convs dilated per expert) cannot
 * be rebuilt. */
int moe_same_structure(const Expert *a, const Expert *b);
/* v through Cast and Identity nodes to the value they start from. */
const char *moe_uncast(const Graph *g, const char *v);
/* How expert y differs from x in structure, in words, or NULL. */
const char *moe_structure_diff(Arena *a, const Expert *x, const Expert *y);

/* Ties experts.yaml layers to detected layers (by names, then by checkpoint
 * values for what names do not settle, reading weights through src) and checks that the two agree
 * (top_k, expert count, ids). bound[i] is the detected layer of spec layer
 * i. Every damaged detected layer must be bound. */
typedef WSrc *(*BindSrc)(void *ud, const SpecLayer *s, Err *e); /* the layer's open weight source */
int moe_bind(Ctx *c, const Spec *s, Layer *L, size_t nl, Layer **bound, BindSrc src, void *ud, Err *e);

/* Zero-config: the Spec the detected layers and the checkpoint w (NULL:
 * names only) imply, one SpecLayer per damaged layer, weights named by
 * `weights`. Errors name the experts.yaml key that would settle what
 * could not be told. */
int moe_layout(Ctx *c, Layer *L, size_t nl, WSrc *w, const char *weights, Spec *out, Err *e);

/* Diagnosis without a spec: one LayerReport per detected layer. */
int moe_scan(Ctx *c, const Layer *L, size_t nl, Report *r, Err *e);

/* A way to rebuild one template tensor for any expert from the checkpoint. */
/* R_TRANS: a 2-D key transposed (torch's Linear exported as MatMul reads
 * its weight transposed). */
typedef enum { R_NAME, R_VALUE, R_FOLD_W, R_FOLD_B, R_SHARED, R_TRANS } RKind;

typedef struct {
	const char *tname; /* template tensor (initializer) */
	RKind kind;
	const char *rest;  /* key suffix under the expert path: conv weight, or the tensor itself */
	const char *bn;    /* BatchNorm module suffix, for folds */
	const char *bias;  /* conv bias suffix, or NULL (FOLD_B) */
	double eps;
	size_t node, input; /* where the template reads it: node index in the expert, input slot */
} Recipe;

/* The key suffix (under the expert path) naming what recipe r rebuilds:
 * the key itself, or marked as folded (:bnfold) or transposed (:T). */
const char *moe_recipe_key(Arena *a, const Recipe *r);
/* Raises *d to the largest |a[i] * sc - b[i]| of n, and *m (when not
 * NULL) to the largest |b[i]|; 1 when a difference is NaN. The kernel of
 * every whole comparison of weights (see wmap.c). */
int moe_diff_max(const float *a, float sc, const float *b, int64_t n, float *d, float *m);

typedef struct {
	Recipe *r;
	size_t n;
	double maxdiff; /* largest relative difference seen verifying present experts */
} Mapping;

int moe_map(Ctx *c, const Layer *L, const Expert *tpl, WSrc *w, Mapping *m, Err *e);
/* What the builds of one expert's tensors share: a BatchNorm folded into
 * a Conv serves its weight and then its bias, and finding its statistics
 * is four checkpoint lookups. Zeroed by the caller, used while the weight
 * source is open and c->tmp not reset; NULL: nothing shared. */
typedef struct {
	char pre[256], bn[64];
	const float *g, *b, *mu, *var;
	int64_t n;
	double eps;
} MoeBnMemo;
/* Builds expert `id`'s version of template tensor r->tname, in t's dtype. */
int moe_build(Ctx *c, const Layer *L, const Recipe *r, const Tensor *t, int id, WSrc *w, MoeBnMemo *bm,
	      void **data, size_t *nbytes, Err *e);
/* The same into dst (numel x element size bytes): a stack of every
 * expert's tensor is written in place. */
int moe_build_into(Ctx *c, const Layer *L, const Recipe *r, const Tensor *t, int id, WSrc *w, MoeBnMemo *bm,
		   void *dst, Err *e);
/* The same checked now and built when the model is written (Later, see
 * graph.h): for g_add_init_later. w must stay open until then. */
Later *moe_build_later(Ctx *c, const Layer *L, const Recipe *r, const Tensor *t, int id, WSrc *w, MoeBnMemo *bm,
		       Err *e);
/* New tensors from this size on are built when the model is written
 * (moe_build_later): below it, a record per tensor costs more than the
 * data, and a graph of tiny experts has tens of thousands of them. */
enum { LATER_MIN = 16 << 10 };

int moe_densify(Ctx *c, Layer *L, WSrc *w, LayerReport *lr, Err *e);
/* The sparse dispatch (sparse.c): 1 rewritten, 0 the layer has a form the
 * sparse dispatch cannot express (lr->fallback says why; nothing changed),
 * -1 error. Sizes come from the shape inference of the model as loaded:
 * run after g_infer. */
int moe_sparse(Ctx *c, Layer *L, WSrc *w, LayerReport *lr, Err *e);
/* FLOPs of one expert's Convs and Linears (MatMul, Gemm of a constant
 * weight) for one input row, -1 when a size is unknown. */
double moe_expert_flops(const Layer *L);
/* Bytes of one expert's weights, a page more per tensor (the template's
 * initializers; an unknown element size counts 8): a bound of what
 * reading one expert, from the model or a checkpoint, touches. */
size_t moe_expert_bytes(const Ctx *c, const Layer *L);

/* Folds If(Equal(Gather(Shape(t), d), 1)) {Squeeze} {Identity} shape guards
 * whose dimension is provably 1 (dry: only count them). Returns how many,
 * or -1. */
int fold_shape_ifs(Ctx *c, int dry, Err *e);

/* Emission of new main-graph nodes for the dispatch rewrites (emit.c):
 * names under pfx as the exporter forms them, axes as inputs from opset 13
 * and as attributes before. `one` is an int64 [1] holding 1 (opset >= 13). */
typedef struct {
	Ctx *c;
	const char *pfx;
	const char *one;
} Emit;
void emit_init(Emit *m, Ctx *c, const char *pfx);
const char *emit(Emit *m, const char *op, const char *const *in, size_t nin); /* its first output */
Node *emit_last(const Emit *m); /* the node emit just added */
const char *emit_axes(Emit *m, const char *op, const char *x, const int64_t *axes, size_t n);
const char *emit_axis1(Emit *m, const char *op, const char *x);
const char *emit_gather(Emit *m, const char *x, const char *idx, int64_t axis);
const char *emit_i64(Emit *m, const char *base, const int64_t *v, size_t n, int scalar); /* an initializer */
const char *emit_reshape(Emit *m, const char *x, const int64_t *shape, size_t n);
const char *emit_ones_shape(Emit *m, int rank); /* [-1, 1, ..., 1] */
const char *emit_masked(Emit *m, const char *w, const char *mask); /* w * mask, the bool mask as w's type */

/* Helpers shared by the MoE passes. */
const char *expert_path(Ctx *c, const SpecLayer *s, int id); /* "model.0.experts.3" */
/* The same into b (snprintf's contract: the length it needs). */
int expert_path_to(char *b, size_t cap, const SpecLayer *s, int id);

#endif
