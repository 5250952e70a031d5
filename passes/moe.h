/* What the MoE passes share: a detected layer and its experts.
 *
 * detect.c finds, per layer, the router's TopK, the top-k weights the
 * dispatch reads, the tensor the experts read, each present expert's nodes
 * and the tensor holding the combined routed sum. wmap.c maps a present
 * expert's tensors to the checkpoint so missing experts can be rebuilt.
 * densify.c rewrites the layer into the static dense form. */
#ifndef MOE_H
#define MOE_H
#include "graph.h"
#include "report.h"
#include "spec.h"
#include "wsrc.h"

typedef struct {
	int id;
	Node **node;      /* the expert's nodes, in graph order */
	size_t nnode;
	Graph *g;         /* graph holding them (an If body for scripted layers) */
	const char *in;   /* value the expert reads: gathered rows, or the full input */
	const char *out;  /* value it produces */
	Node *gate;       /* the If gating it, or NULL */
} Expert;

typedef struct {
	const SpecLayer *spec;
	const char *scope;
	Node *topk;
	const char *indices;  /* [B,k] int64 expert ids */
	const char *weights;  /* [B,k] weights of the chosen experts */
	const char *x;        /* the full tensor every expert reads */
	const char *combined; /* the routed sum the rest of the model reads */
	int rank;             /* rank of one expert's output */
	Expert *ex;           /* present experts, by id */
	size_t nex;
	int nif;              /* If nodes gating experts */
	int sparse;           /* NonZero-style row dispatch found */
	int dense;            /* already dense (GatherElements on all experts): nothing to do */
	int nodes, convs;     /* nodes (and Conv nodes) named in scope, subgraphs included */
	size_t end;           /* one past the last main-graph node named in scope: the
	                       * data-flow sweeps stop there, not at the model's end */
} Layer;

/* A way to rebuild one template tensor for any expert from the checkpoint. */
typedef enum { R_NAME, R_VALUE, R_FOLD_W, R_FOLD_B, R_SHARED } RKind;

typedef struct {
	const char *tname; /* template tensor (initializer) */
	RKind kind;
	const char *rest;  /* key suffix under the expert path: conv weight, or the tensor itself */
	const char *bn;    /* BatchNorm module suffix, for folds */
	const char *bias;  /* conv bias suffix, or NULL (FOLD_B) */
	double eps;
	size_t node, input; /* where the template reads it: node index in the expert, input slot */
} Recipe;

typedef struct {
	Recipe *r;
	size_t n;
	double maxdiff; /* largest relative difference seen verifying present experts */
} Mapping;

int moe_detect(Ctx *c, const SpecLayer *s, Layer *L, Err *e);
/* Without a spec: every TopK whose indices are compared with expert ids or
 * gate If nodes. Fills one LayerReport per router found. */
int moe_scan(Ctx *c, Report *r, Err *e);

int moe_map(Ctx *c, const Layer *L, const Expert *tpl, WSrc *w, Mapping *m, Err *e);
/* Builds expert `id`'s version of template tensor r->tname, in t's dtype. */
int moe_build(Ctx *c, const Layer *L, const Recipe *r, const Tensor *t, int id, WSrc *w,
	      void **data, size_t *nbytes, Err *e);

int moe_densify(Ctx *c, Layer *L, WSrc *w, LayerReport *lr, Err *e);

/* Folds If(Equal(Gather(Shape(t), d), 1)) {Squeeze} {Identity} shape guards
 * whose dimension is provably 1 (dry: only count them). Returns how many,
 * or -1. */
int fold_shape_ifs(Ctx *c, int dry, Err *e);

/* Helpers shared by the MoE passes. */
/* Expert ids the dispatch compares the router indices with (Equal against
 * a constant, possibly after Cast/Identity); returns how many, at most max. */
int moe_compared_ids(Ctx *c, const Graph *g, const char *indices, int *ids, int max);
const char *expert_path(Ctx *c, const SpecLayer *s, int id); /* "model.0.experts.3" */
int g_rank(const Graph *g, const char *name, int depth);     /* -1 unknown */

#endif
