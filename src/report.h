/* What the passes found and did: filled by passes, printed by main (summary
 * on stderr, JSON with --report). Passes never print. */
#ifndef REPORT_H
#define REPORT_H
#include <stddef.h>

typedef struct {
	const char *scope;    /* spec scope, or the router's TopK node name in diagnosis */
	int experts, top_k;   /* E and k; 0 when unknown (diagnosis without YAML) */
	int *present;         /* expert ids found in the graph */
	int npresent;
	int *inserted;        /* expert ids re-inserted */
	int ninserted;
	int ifs;              /* If nodes gating experts (found, or removed when repaired) */
	int nodes_before, nodes_after;
	int convs_before, convs_after;
	double map_maxdiff;   /* largest relative difference in the mapping check */
	int repaired;         /* 1 when the layer was rewritten */
} LayerReport;

typedef struct {
	LayerReport *layer;
	size_t nlayer;
	int ifs_folded;       /* shape-guard Ifs folded to Squeeze outside MoE layers */
	int damaged;          /* --check / diagnosis: something needs repair */
	int changed;          /* the model was rewritten */
} Report;

#endif
