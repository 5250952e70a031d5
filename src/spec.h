/* The expert-set description (experts.yaml, schema version 1; see
 * schema/experts.yaml). Paths are resolved against the YAML file's folder. */
#ifndef SPEC_H
#define SPEC_H
#include <stddef.h>
#include <stdio.h>
#include "arena.h"
#include "err.h"

typedef struct {
	const char *scope;   /* module path, e.g. "model.6" */
	int line, col;       /* of the entry, for messages */
	int experts;         /* E >= 1 */
	int top_k;           /* 1 <= k <= E */
	const char *expert;  /* pattern with "{i}", default "experts.{i}" */
	int expert_given;    /* the YAML sets `expert:` (else node names may) */
	const char *weights; /* resolved path of this layer's source, or the file-wide one */
	const char *weights_at; /* where experts.yaml gives it, "experts.yaml:LINE:COL"; NULL: not there */
	const char *checkpoint_key; /* for .pt dicts; NULL: default rule */
	const char *prefix;  /* key prefix in the source, default "" */
	const char *router_indices, *router_weights, *input, *output; /* overrides, or NULL */
} SpecLayer;

typedef struct Spec {
	const char *path;    /* the YAML file itself */
	const char *weights; /* resolved, or NULL when every layer has its own */
	const char *weights_at; /* as SpecLayer's */
	const char *checkpoint_key;
	SpecLayer *layer;
	size_t nlayer;
} Spec;

/* The checkpoint comes from --weights: the `weights:` files the YAML names
 * are never opened, so they need not exist (a YAML copied from another
 * machine still serves). */
enum { SPEC_WEIGHTS_GIVEN = 1 };
/* Errors read "experts.yaml:LINE:COL: message". flags: SPEC_WEIGHTS_GIVEN or 0. */
int spec_load(Spec *s, const char *path, int flags, Arena *a, Err *e);
/* Writes s as an experts.yaml that spec_load reads back to the same Spec:
 * weights paths relative to dir (the folder the file goes to), every
 * non-default key, and `why` as comments (one line per layer, NULL: none). */
int spec_write(FILE *f, const Spec *s, const char *dir, const char *const *why, Arena *a, Err *e);
/* Prefixes e's message with where layer l's entry is, "experts.yaml:LINE:COL",
 * when l was read from a file (an inferred layer has no place), so an
 * error about a layer points at the entry to fix. Returns -1. */
int spec_wrap(Err *e, const Spec *s, const SpecLayer *l);
/* The same place as a string in a, or NULL. */
const char *spec_where(Arena *a, const Spec *s, const SpecLayer *l);
/* A scope as messages show it: a module exported alone has the empty
 * scope, which would read "layer : ...". */
static inline const char *spec_scope_shown(const char *scope)
{
	return *scope ? scope : "(root)";
}
/* Expands the layer's expert pattern for expert i: "experts.3". */
const char *spec_expert_path(Arena *a, const SpecLayer *l, int i);

/* The module path behind an exporter's node name, whatever form the
 * exporter used: "/model.6/experts.3/conv/conv.0/Conv",
 * "/model/model.6/experts.3/conv/conv.0/Conv" and (TorchScript)
 * "/model/6/experts.3/conv/0/Conv" all give "model.6.experts.3.conv.0".
 * The last level (the op) is dropped. NULL when the name carries no scope. */
const char *spec_node_module(Arena *a, const char *node);

enum { SPEC_OUTSIDE = -2, SPEC_LAYER = -1 };
/* Where a module path falls for layer l: the index of the expert it belongs
 * to (any index, the caller checks it against E), SPEC_LAYER for the
 * layer's own modules (router, combine), SPEC_OUTSIDE elsewhere. */
int spec_place(const SpecLayer *l, const char *module);

#endif
