/* What the passes found and did: filled by passes, printed by main (summary
 * on stderr, JSON with --report). Passes never print. */
#ifndef REPORT_H
#define REPORT_H
#include <stddef.h>
#include <stdio.h>

typedef struct {
	const char *scope;    /* spec scope, or the router's TopK node name in diagnosis */
	int experts, top_k;   /* E and k; 0 when unknown (diagnosis without YAML) */
	int *present;         /* expert ids found in the graph */
	int npresent;
	int *inserted;        /* expert ids re-inserted */
	int ninserted;
	int ifs;              /* If nodes gating experts (found, or removed when repaired) */
	int nodes_before, nodes_after; /* nodes of the layer's experts */
	int convs_before, convs_after; /* Conv nodes of the layer's experts */
	double map_maxdiff;   /* largest relative difference in the mapping check */
	int repaired;         /* 1 when the layer was rewritten */
	const char *dispatch; /* form the repair emitted: "dense" or "sparse"; NULL when not repaired */
	const char *fallback; /* why a sparse dispatch was asked for and not emitted, or NULL */
	double expert_flops;  /* one expert's Conv FLOPs per input, < 0 unknown */
	int dense;            /* already in the dense form: nothing to repair */
	const char *why;      /* a dispatch that cannot be repaired: why (diagnosis) */
	int nonzero;          /* rows dispatched through NonZero (diagnosis) */
} LayerReport;

typedef struct {
	LayerReport *layer;
	size_t nlayer;
	int ifs_folded;       /* shape-guard Ifs folded to Squeeze outside MoE layers */
	int inlined;          /* calls of model-local functions inlined before the analyses */
	int damaged;          /* --check / diagnosis: something needs repair */
	int changed;          /* the model was rewritten */
	int convs_before, convs_after; /* Conv nodes of the whole model */
	const struct Spec *spec;       /* the expert sets used (inferred in zero-config use), or NULL */
	const char **why;              /* per spec layer: where its values came from, or NULL */
	/* When every layer was bound to its expert set, before the first read
	 * of a checkpoint tensor (progress_now, progress_cpu; 0: not reached):
	 * what a repair must do before it knows what to read, which -v shows. */
	double bound_at, bound_cpu;
} Report;

/* How the run was asked: the same Report reads differently in each. */
typedef enum { RUN_DIAGNOSE, RUN_CHECK, RUN_REPAIR } RunMode;

/* The per-layer summary, one line each, "name: ..." (main adds the verdict
 * line, which knows the output path). verbose adds node counts and the
 * mapping check's difference. */
void report_print(FILE *f, const char *name, const Report *r, RunMode mode, int verbose);
/* The Report as JSON object members ("damaged": ..., "layers": [...]),
 * without the braces, so main can add input/output/status around it. One
 * layer a line, for a report document read by people. */
void report_json(FILE *f, const Report *r);
/* The same on one line: a JSON Lines record (--report -) holds no newline. */
void report_json_line(FILE *f, const Report *r);
/* A JSON string literal: escapes quotes, backslashes and control bytes,
 * replaces invalid UTF-8 by U+FFFD (names come from untrusted models).
 * NULL prints null. */
void json_str(FILE *f, const char *s);

#endif
