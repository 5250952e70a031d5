#include "report.h"

#include "err.h"
#include "spec.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

static void ids(FILE *f, const int *v, int n)
{
	for (int i = 0; i < n; i++)
		fprintf(f, "%s%d", i ? "," : "", v[i]);
}

static int has(const int *v, int n, int x)
{
	for (int i = 0; i < n; i++)
		if (v[i] == x)
			return 1;
	return 0;
}

/* "1.25 MFLOP": FLOP counts span kilo to tera. */
static void flops(FILE *f, double x)
{
	static const char *unit[] = { "", "k", "M", "G", "T" };
	int u = 0;
	while (x >= 1000 && u < 4) {
		x /= 1000;
		u++;
	}
	fprintf(f, "%.3g %sFLOP", x, unit[u]);
}

/* The form emitted, and what the experts cost one input against the dense
 * form, which runs all of them. */
static void dispatch(FILE *f, const LayerReport *l)
{
	int sparse = !strcmp(l->dispatch, "sparse");
	fprintf(f, "; %s dispatch", l->dispatch);
	if (l->fallback)
		fprintf(f, " (sparse not possible: %s)", l->fallback);
	if (l->expert_flops < 0 || !l->experts) {
		fprintf(f, ", expert FLOPs per input %d/%d of dense", sparse ? l->top_k : l->experts, l->experts);
		return;
	}
	fputs(", expert FLOPs per input ", f);
	flops(f, l->expert_flops * (sparse ? l->top_k : l->experts));
	if (sparse) {
		fputs(" vs ", f);
		flops(f, l->expert_flops * l->experts);
		fprintf(f, " dense (%.3gx)", (double)l->top_k / l->experts);
	}
}

void report_print(FILE *f, const char *name, const Report *r, RunMode mode, int verbose)
{
	for (size_t i = 0; i < r->nlayer; i++) {
		const LayerReport *l = &r->layer[i];
		/* A diagnosed layer's scope is a node name from the model. */
		char scope[512];
		fprintf(f, "%s: %s:", name, esc_text(scope, sizeof scope, l->scope ? spec_scope_shown(l->scope) : "?"));
		if (l->dense) {
			fprintf(f, " %s dispatch, nothing to repair\n", l->dispatch ? l->dispatch : "dense");
			continue;
		}
		if (l->why) {
			fprintf(f, " data-dependent dispatch that cannot be repaired: %s\n", l->why);
			continue;
		}
		if (l->experts)
			fprintf(f, " %d experts", l->experts);
		if (l->top_k)
			fprintf(f, "%s top-%d", l->experts ? "," : "", l->top_k);
		fprintf(f, "%s present ", l->experts || l->top_k ? ";" : "");
		if (l->npresent)
			ids(f, l->present, l->npresent);
		else
			fputs("none", f);
		if (mode == RUN_REPAIR) {
			fputs(", re-inserted ", f);
			if (l->ninserted)
				ids(f, l->inserted, l->ninserted);
			else
				fputs("none", f);
			fprintf(f, "; If removed %d; experts' Conv %d -> %d", l->repaired ? l->ifs : 0, l->convs_before, l->convs_after);
			if (l->dispatch)
				dispatch(f, l);
		} else {
			if (l->experts > l->npresent) {
				/* What --check promises to say: which experts are gone. */
				fputs(", missing ", f);
				for (int x = 0, first = 1; x < l->experts; x++)
					if (!has(l->present, l->npresent, x)) {
						fprintf(f, "%s%d", first ? "" : ",", x);
						first = 0;
					}
			} else if (l->nonzero && !l->ifs) {
				/* Nothing is gone, so say what is wrong: the runtime
				 * fails on an expert no row picks, deployment runtimes
				 * refuse NonZero. */
				fputs(", missing none; rows dispatched through NonZero", f);
			}
			fprintf(f, "; If gating experts %d; experts' Conv %d", l->ifs, l->convs_before);
		}
		if (verbose) {
			fprintf(f, "; nodes %d", l->nodes_before);
			if (mode == RUN_REPAIR)
				fprintf(f, " -> %d; mapping max diff %.3g", l->nodes_after, l->map_maxdiff);
		}
		fputc('\n', f);
	}
	if (r->inlined)
		fprintf(f, "%s: calls of model-local functions %s: %d\n", name,
		        mode == RUN_REPAIR && r->changed ? "inlined" : "looked into", r->inlined);
	if (r->ifs_folded)
		fprintf(f, "%s: shape-guard If %s outside MoE layers: %d\n", name,
		        mode == RUN_REPAIR ? "folded" : "to fold", r->ifs_folded);
	if (mode == RUN_REPAIR && r->changed)
		fprintf(f, "%s: Conv %d -> %d\n", name, r->convs_before, r->convs_after);
}

static void ints(FILE *f, const int *v, int n)
{
	fputc('[', f);
	for (int i = 0; i < n; i++)
		fprintf(f, "%s%d", i ? ", " : "", v[i]);
	fputc(']', f);
}

static void num(FILE *f, double x)
{
	if (isfinite(x))
		fprintf(f, "%.9g", x);
	else
		fputs("null", f); /* JSON has no NaN */
}

static void members(FILE *f, const Report *r, int oneline)
{
	fprintf(f, "\"damaged\": %s, \"changed\": %s, \"ifs_folded\": %d, \"layers\": [",
	        r->damaged ? "true" : "false", r->changed ? "true" : "false", r->ifs_folded);
	for (size_t i = 0; i < r->nlayer; i++) {
		const LayerReport *l = &r->layer[i];
		fputs(oneline ? (i ? ", {" : "{") : (i ? ",\n    {" : "\n    {"), f);
		fputs("\"scope\": ", f);
		json_str(f, l->scope);
		fprintf(f, ", \"experts\": %d, \"top_k\": %d, \"present\": ", l->experts, l->top_k);
		ints(f, l->present, l->npresent);
		fputs(", \"inserted\": ", f);
		ints(f, l->inserted, l->ninserted);
		fprintf(f, ", \"ifs\": %d, \"nodes_before\": %d, \"nodes_after\": %d, \"convs_before\": %d, \"convs_after\": %d, \"map_maxdiff\": ",
		        l->ifs, l->nodes_before, l->nodes_after, l->convs_before, l->convs_after);
		num(f, l->map_maxdiff);
		fprintf(f, ", \"dense\": %s, \"repaired\": %s, \"unrepairable\": ", l->dense ? "true" : "false",
		        l->repaired ? "true" : "false");
		json_str(f, l->why);
		fputs(", \"dispatch\": ", f);
		json_str(f, l->dispatch);
		fputs(", \"sparse_fallback\": ", f);
		json_str(f, l->fallback);
		fputs(", \"expert_flops\": ", f);
		num(f, l->expert_flops >= 0 ? l->expert_flops : NAN);
		fputs(", \"dispatch_flops\": ", f);
		num(f, l->dispatch && l->expert_flops >= 0
			       ? l->expert_flops * (strcmp(l->dispatch, "sparse") ? l->experts : l->top_k) : NAN);
		fputs(", \"dense_flops\": ", f);
		num(f, l->dispatch && l->expert_flops >= 0 ? l->expert_flops * l->experts : NAN);
		fputc('}', f);
	}
	fputs(r->nlayer && !oneline ? "\n  ]" : "]", f);
	fprintf(f, ", \"convs_before\": %d, \"convs_after\": %d", r->convs_before, r->convs_after);
}

void report_json(FILE *f, const Report *r)
{
	members(f, r, 0);
}

void report_json_line(FILE *f, const Report *r)
{
	members(f, r, 1);
}

/* Length of the valid UTF-8 sequence at p, 0 when invalid (overlongs,
 * surrogates and code points past U+10FFFF included). */
static int utf8_len(const unsigned char *p)
{
	unsigned c = p[0];
	int n;
	uint32_t cp;
	if (c < 0x80)
		return 1;
	if (c >= 0xc2 && c <= 0xdf)
		n = 2, cp = c & 0x1f;
	else if (c >= 0xe0 && c <= 0xef)
		n = 3, cp = c & 0x0f;
	else if (c >= 0xf0 && c <= 0xf4)
		n = 4, cp = c & 0x07;
	else
		return 0;
	for (int i = 1; i < n; i++) {
		if ((p[i] & 0xc0) != 0x80)
			return 0;
		cp = cp << 6 | (p[i] & 0x3f);
	}
	if ((n == 3 && cp < 0x800) || (n == 4 && (cp < 0x10000 || cp > 0x10ffff)) || (cp >= 0xd800 && cp <= 0xdfff))
		return 0;
	return n;
}

void json_str(FILE *f, const char *s)
{
	if (!s) {
		fputs("null", f);
		return;
	}
	fputc('"', f);
	for (const unsigned char *p = (const unsigned char *)s; *p;) {
		int n = utf8_len(p);
		if (!n) {
			fputs("\\ufffd", f);
			p++;
			continue;
		}
		unsigned c = *p;
		if (c == '"' || c == '\\')
			fprintf(f, "\\%c", c);
		else if (c == '\n')
			fputs("\\n", f);
		else if (c == '\t')
			fputs("\\t", f);
		else if (c == '\r')
			fputs("\\r", f);
		else if (c < 0x20 || c == 0x7f)
			fprintf(f, "\\u%04x", c);
		else
			fwrite(p, 1, (size_t)n, f);
		p += n;
	}
	fputc('"', f);
}
