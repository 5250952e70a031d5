/* The graph core every pass uses: an index over the model (value name ->
 * producer and consumers, hash-based, aware of If/Loop bodies and the outer
 * values they read), and the one API through which passes mutate the model.
 *
 * The protobuf structures stay the source of truth. Mutations edit them
 * directly through the functions below, which keep producers, positions
 * and what inputs read current; g_reindex() rebuilds the whole index (one
 * walk, hash maps), and g_refresh() renews only what goes stale (use lists)
 * after the pipeline's dead-node elimination and sort: on a 400-layer
 * model the rebuild hashed every name again for 8% of the run. */
#ifndef GRAPH_H
#define GRAPH_H
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include "arena.h"
#include "err.h"
#include "map.h"
#include "model.h"
#include "onnx.pb-c.h"

typedef Onnx__NodeProto Node;
typedef Onnx__TensorProto Tensor;
typedef struct Graph Graph;
struct Ty; /* src/infer.h */

/* Where a node is: its graph and its position there. */
typedef struct {
	Graph *g;
	size_t pos;
	int live; /* g_dce's mark, until the next g_refresh or g_reindex */
	unsigned sort; /* g_toposort's visit state, tagged with Ctx.sorts */
	Node *n;
	/* What g_val(g, n->input[j]) gave, j < nin: filled by the index and
	 * on first use, NULL until then, cleared by the mutation API when an
	 * input changes. Every walk reads inputs through it (g_input), so a
	 * node's inputs are looked up by name once per index, not once per
	 * walk. */
	struct Val **in;
	size_t nin;
	/* The same for outputs: the Val of n->output[j] in g. */
	struct Val **out;
	size_t nout;
} NodeInfo;

typedef struct {
	Node *n;   /* consumer */
	Graph *g;  /* graph the consumer lives in (may be a subgraph of the value's) */
	NodeInfo *k; /* the consumer's, so walks along uses need no lookup */
} Use;

typedef struct Val {
	const char *name;
	Node *def;      /* producer, or NULL */
	NodeInfo *dk;   /* the producer's NodeInfo, NULL with def */
	Tensor *init;   /* initializer, or NULL */
	unsigned char isin;  /* graph input */
	unsigned char isout; /* graph output */
	unsigned char live;  /* g_dce's mark, until the next g_refresh or g_reindex */
	unsigned seen;  /* g_check's mark: defined so far, tagged with Ctx.checks */
	const Onnx__TensorShapeProto *shape; /* declared (input, output, value_info), or NULL */
	Graph *g;       /* graph defining it */
	Use *use;
	uint32_t nuse, capuse; /* a value read 4 billion times would not fit in memory */
	const struct Ty *ty; /* what g_infer found (src/infer.h); NULL before it runs */
} Val;

struct Graph {
	Onnx__GraphProto *gp;
	Graph *parent;
	Node *owner;      /* the If/Loop/Scan holding this body, NULL for the main graph */
	Map val;          /* name -> Val*, values defined here */
	const char **outer; /* names read here (or deeper) but defined in an enclosing graph */
	size_t nouter, capouter;
	Map outerset;     /* the same names, for a constant-time "already there?" */
	Graph **sub;      /* bodies of this graph's nodes, each node's together, in node order */
	size_t nsub, capsub;
	size_t capnode, capinit; /* capacities of gp->node / gp->initializer when grown by us */
	/* order[i] is gp->node[i]'s entry, i < norder: kept by the index,
	 * new nodes, the sort and dead-node elimination, checked by every
	 * reader (g_node_at), so an edit of gp->node elsewhere costs lookups,
	 * not wrong answers. */
	NodeInfo **order;
	size_t norder, caporder;
	unsigned sorted; /* Ctx.edits + 1 when g_toposort ran and nothing changed since */
	Val **ival;       /* ival[i] is gp->initializer[i]'s value, i < nival: as order */
	size_t nival, capival;
	uintptr_t zeros;  /* the main graph's: Ctx.zeros, for g_is_zero */
	size_t nzeros;
};

/* An initializer whose values are written when the model is saved: a
 * repair's new weights go from the checkpoint through one reused buffer
 * into the output, not through fresh memory (which the kernel zeroes and
 * the save then copies: a gigabyte each on a large model). fill writes
 * the tensor's raw_data.len bytes to dst; tmp is scratch, emptied after. */
typedef struct Later Later;
struct Later {
	int (*fill)(const Later *l, void *dst, Arena *tmp, Err *e);
	Tensor *t;
	const char *at; /* where its layer is described (experts.yaml:LINE:COL), or NULL */
};

/* l's fill, whose errors point at the layer's entry as a pass's do: it
 * runs after the pipeline has left that layer. */
static inline int later_fill(const Later *l, void *dst, Arena *tmp, Err *e)
{
	if (!l->fill(l, dst, tmp, e))
		return 0;
	return l->at ? errwrap(e, "%s", l->at) : -1;
}

typedef struct {
	Arena *a;
	Onnx__ModelProto *m;
	Graph *g;        /* main graph */
	int opset;       /* default-domain opset version */
	Map names;       /* every value and node name the model has had, for g_fresh
	                  * (in c->a: names only accumulate, so it outlives reindexing) */
	int named;       /* names is complete: later names come from g_fresh */
	PMap node;       /* Node* -> NodeInfo* (graph, position) */
	/* The last node found in it: walks ask for one node's inputs one
	 * after another. In the index arena, so a reindex forgets it. */
	struct NodeMemo *memo;
	PMap subidx;     /* Node* -> index + 1 of its first body in its graph's sub[] */
	Map fresh;       /* base name -> last suffix handed out */
	Arena *ia;       /* the index (Graph, Val, maps), replaced by each g_reindex */
	Arena *tmp;      /* scratch of one unit of work (a layer's detection, a layer's
	                  * repair), emptied by its driver before the next: names handed
	                  * to the mutation API are copied, nothing else goes there */
	unsigned gen;    /* counts g_reindex calls: results that hold index objects record it */
	unsigned sorts;  /* g_toposort's calls, two tags each */
	unsigned checks; /* g_check's scope walks, a tag each */
	unsigned edits;  /* mutations that can break a topological order (new or
	                  * moved nodes, changed inputs or outputs), counted */
	int inferred;    /* g_infer has run on the current index (Val.ty is filled) */
	uintptr_t zeros; /* g_zeros' range, copied to each main Graph */
	size_t nzeros;
	/* Reads a tensor kept in external data (the model's mapping of its
	 * file); set after g_init by whoever loaded the model, NULL: unreadable. */
	int (*ext)(void *ud, const Tensor *t, const void **p, size_t *n, Err *e);
	void *ext_ud;
	Later **later;   /* g_add_init_later's, in creation order, for the saver */
	size_t nlater, caplater;
} Ctx;

/* Builds the index; errors on values produced twice in one scope. */
int g_init(Ctx *c, Onnx__ModelProto *m, Arena *a, Err *e);
int g_reindex(Ctx *c, Err *e); /* invalidates every Graph, Val and Use */
/* After g_dce and g_toposort of the main graph: the index current again
 * (use lists renewed, shapes and types to infer again) without a rebuild.
 * Graph, Val and NodeInfo stay valid, but a Val whose producer was removed
 * stays found by name; detection results are stale as after g_reindex
 * (Ctx.gen moves on). A model with subgraphs gets the rebuild. */
int g_refresh(Ctx *c, Err *e);
void g_fini(Ctx *c);              /* frees the index; the model stays */
/* r: c for another thread that only reads c's index while c's reads it
 * too (g_check_rest beside moe_find): the same index with a node memo of
 * its own, which every lookup writes. Valid until c's next reindex or
 * mutation; never g_fini'd. */
void g_reader(const Ctx *c, Ctx *r);
/* The n bytes at p hold zeros, read-only, as long as the model lives (the
 * load's cut zeros, src/model.h): g_is_zero takes a tensor there for zero
 * without reading it (an export's 1200 zero constants were 14 ms, each
 * read whole, all pointing at this one range). */
void g_zeros(Ctx *c, const void *p, size_t n);

/* Value lookup in g, then its enclosing graphs. */
Val *g_val(const Graph *g, const char *name);
/* The value input j of node n reads (g_val from n's graph), NULL for an
 * empty input or an undefined name; n must be in the index. */
Val *g_input(const Ctx *c, const Node *n, size_t j);
/* The same for a node whose index entry is at hand (walks that have it). */
Val *g_in(NodeInfo *k, size_t j);
/* The value of output j's name in n's graph (its producer is n unless the
 * model is malformed), NULL for an empty output. */
Val *g_output(const Ctx *c, const Node *n, size_t j);
Graph *g_graph_of(const Ctx *c, const Node *n);
/* The value of initializer g->gp->initializer[i], found as g_node_at
 * finds nodes (NULL when the index has none). */
Val *g_init_at(const Graph *g, size_t i);
/* The index entry of g->gp->node[i], for walks over a graph's nodes:
 * through g->order, without a lookup, where it is current. */
NodeInfo *g_node_at(const Ctx *c, const Graph *g, size_t i);
/* n's index entry, NULL when n is not in the index. */
NodeInfo *g_info(const Ctx *c, const Node *n);
/* The bodies of node n (an If's two, a Loop's one), which lives in g:
 * *first is their index in g->sub; returns how many. Constant time, so
 * walks over every node need not scan every body of the graph. */
size_t g_subs_of(const Ctx *c, const Graph *g, const Node *n, size_t *first);
size_t g_pos(const Ctx *c, const Node *n); /* position in its graph's node list */

/* Node helpers. */
const Onnx__AttributeProto *g_attr(const Node *n, const char *name);
int64_t g_attr_i(const Node *n, const char *name, int64_t dflt);
/* Default domain and op_type. Asked a million times on a 400-layer
 * repair, mostly of another op: the first letter tells most apart. */
static inline int g_is(const Node *n, const char *op)
{
	return n->op_type[0] == op[0] && strcmp(n->op_type, op) == 0 && model_default_domain(n->domain);
}

/* A static table of ops, in any order, each entry's first member its name
 * (const char *), found by a hash of the name instead of a binary search:
 * the check looked each node up in three such tables, about 20 string
 * compares a node. Built on first use, by whichever thread asks first; at
 * most 256 entries (half the slots). */
typedef struct {
	const void *base;
	size_t n, size;
	int ready;
	uint16_t slot[512]; /* entry index + 1; 0: empty */
} OpIndex;
#define OP_INDEX(t) { (t), sizeof(t) / sizeof *(t), sizeof *(t), 0, { 0 } }
/* The entry named op, or NULL. */
const void *g_op_entry(OpIndex *x, const char *op);

/* Constant values: an initializer or a Constant node's `value`. NULL when
 * the value is not a compile-time constant tensor. */
const Tensor *g_const(const Graph *g, const char *name);
/* Reads an integer constant tensor (int64/int32) into out; returns the
 * element count or -1. */
long g_const_ints(const Graph *g, const char *name, int64_t *out, size_t max);
/* Every bit of the n bytes at p that mask selects (per 8-byte word) is 0:
 * ~0 for bytes all 0, a float's sign bits cleared for +-0. */
int g_bytes_zero(const void *p, size_t n, uint64_t mask);
/* 1 when every element of a constant (or ConstantOfShape fill) is zero. */
int g_is_zero(const Graph *g, const char *name);
/* Bytes of a tensor's data in raw little-endian form (raw_data or the typed
 * field); NULL for external data and for a tensor filled at save time
 * (g_add_init_later), whose values are unknown to a reader that cannot
 * wait for them. */
const void *g_tensor_data(const Tensor *t, size_t *nbytes);
int64_t g_tensor_numel(const Tensor *t);
/* g_tensor_data, external data through c->ext, and a tensor filled at
 * save time filled now (into c->a, for good). NULL (e filled) when
 * unreadable. */
const void *g_tensor_bytes(Ctx *c, const Tensor *t, size_t *nbytes, Err *e);

/* Mutation API. Names handed in are copied into the arena. The index
 * stays current for producers, positions and what inputs read
 * (g_val(...)->def, g_graph_of, g_pos, g_input of every node, new ones
 * included), which is what g_dce and g_toposort read; use lists and
 * shapes are stale until the next g_reindex and g_infer. Inputs and
 * outputs change only through these functions: a direct write to
 * n->input would leave g_input reading the old name. */
const char *g_fresh(Ctx *c, const char *base); /* unique among values and nodes */
/* Starts loading the slots a new name `name` in g will take (the names
 * map's, g's values'): a pass making many names issues this for a batch
 * before it makes them, and the tables' cache misses overlap. */
void g_prefetch_name(const Ctx *c, const Graph *g, const char *name);
Node *g_add_node(Ctx *c, Graph *g, const char *op, const char *name,
		 const char *const *in, size_t nin, const char *const *out, size_t nout);
void g_set_attr_i(Ctx *c, Node *n, const char *name, int64_t v);
void g_set_attr_ints(Ctx *c, Node *n, const char *name, const int64_t *v, size_t k);
/* Sets an int attribute, replacing one of that name: a clone's attribute
 * list is its source's, so the list is copied first and the source keeps
 * its own value. */
void g_put_attr_i(Ctx *c, Node *n, const char *name, int64_t v);
/* Shallow copy (same strings): give its outputs their own names with
 * g_rename_output before anything reads them. */
Node *g_clone_node(Ctx *c, Graph *g, const Node *src);
Tensor *g_add_init(Ctx *c, Graph *g, const char *name, int dtype,
		   const int64_t *dims, size_t ndims, const void *data, size_t nbytes);
/* An initializer of nbytes of raw data that l->fill writes at save time
 * (l->t is set here); the saver finds it in c->later. Until then its
 * raw_data is (NULL, nbytes). */
Tensor *g_add_init_later(Ctx *c, Graph *g, const char *name, int dtype,
			 const int64_t *dims, size_t ndims, size_t nbytes, Later *l);
/* A tensor g_add_init_later made whose values are not there yet. */
static inline int g_is_later(const Tensor *t)
{
	return t->has_raw_data && !t->raw_data.data && t->raw_data.len;
}
Tensor *g_add_init_i64(Ctx *c, Graph *g, const char *base, const int64_t *v,
		       size_t n, int scalar);
/* Makes every consumer (in any graph) of `from` read `to`. Graph outputs
 * keep their names: callers that must keep an output name rename the
 * producer instead (g_rename_output). */
void g_replace_uses(Ctx *c, const char *from, const char *to);
/* Makes input i of n read value `name` (the node's use lists are stale
 * until g_reindex). */
void g_set_input(Ctx *c, Node *n, size_t i, const char *name);
/* The same with the value in hand (one n's graph sees): no lookup. */
void g_set_input_val(Ctx *c, Node *n, size_t i, Val *v);
/* Names n `base`, or base_N when taken. */
void g_set_name(Ctx *c, Node *n, const char *base);
/* Renames a node output in place (producer side only); the new name's
 * producer is n from now on. */
void g_rename_output(Ctx *c, Node *n, size_t idx, const char *to);
/* The same to a fresh name made from base (g_fresh), which it returns:
 * g_rename_output(c, n, idx, g_fresh(c, base)) without looking the new
 * name up again. */
const char *g_fresh_output(Ctx *c, Node *n, size_t idx, const char *base);
/* Moves a node into graph g (appended); used to lift nodes out of If bodies. */
void g_move_node(Ctx *c, Node *n, Graph *to);

/* Match/rewrite pairs driven to a fixed point over the main graph. match
 * looks at one node and fills st (stsize bytes) when the pattern applies;
 * rewrite changes the model through this API and must leave the matched
 * node unmatchable (typically by renaming away its output, which DCE then
 * removes). The index is rebuilt between rounds. */
typedef struct {
	const char *name;
	/* The op a match starts from (g_is), or NULL: every node. A round
	 * offers every node to every pattern, so the test comes first. */
	const char *op;
	int (*match)(Ctx *c, Node *n, void *st);
	int (*rewrite)(Ctx *c, Node *n, void *st, Err *e);
	size_t stsize;
} Pattern;

/* Returns the number of rewrites (dry: of matches, nothing changed), or -1.
 * When inference had run before, each round's new index is inferred again,
 * so matches read types of the graph as rewritten. */
int g_rewrite(Ctx *c, const Pattern *p, size_t np, int dry, Err *e);

/* Dead-node elimination from the graph outputs, into subgraphs; drops
 * initializers nothing reads. Returns the number of nodes removed. */
size_t g_dce(Ctx *c);
/* Stable topological sort: keeps the current order where it is valid. */
int g_toposort(Ctx *c, Graph *g, Err *e);
/* g's node order is topological (g_toposort's, nothing changed since). */
int g_is_sorted(const Ctx *c, const Graph *g);
/* The checker (src/check.c), run on the input before any pass and on the
 * output: structure (one producer per value, every input defined before
 * use or in an enclosing scope, domains declared, default-domain opset
 * within what the compiled schema defines, arities, If branches), every
 * tensor (dims, data length against dims and type, typed-field rules,
 * external ranges), element types through the graph (inferred where not
 * declared; runs g_infer when the index has none yet), and the attribute
 * ranges of the ops the passes read and emit. */
int g_check(Ctx *c, Err *e);
/* g_check in its two halves, whose errors come in the same order. The
 * flow (opsets, domains, arities, If branches, one producer per value,
 * each defined before its reads) is what every pass and analysis assumes:
 * it runs first, and writes Val.seen. The rest (tensors, element types,
 * attribute ranges) writes nothing in the index once the flow and g_infer
 * have run, so it can run on a g_reader's copy on another thread beside a
 * pass that only reads. */
int g_check_flow(Ctx *c, Err *e);
int g_check_rest(Ctx *c, Err *e);

#endif
