/* The pipeline, visible in one place: build index -> passes -> check.
 * Parsing happens before (model_load, spec_load), serializing after
 * (model_save); both belong to main. */
#ifndef PIPELINE_H
#define PIPELINE_H
#include "arena.h"
#include "err.h"
#include "model.h"
#include "progress.h"
#include "report.h"
#include "spec.h"

typedef enum { DISPATCH_DENSE, DISPATCH_SPARSE } Dispatch;

typedef struct {
	int check_only; /* --check: find damage, rewrite nothing */
	Dispatch dispatch; /* --dispatch: the form repaired layers get */
	int no_check;   /* --no-check: skip the structural checker */
	int verbose;
	const char *weights; /* --weights: the checkpoint for every layer (replaces experts.yaml's) */
	int layout;          /* no spec: infer one (with `weights`, or from names alone) */
	Progress *progress;  /* or NULL */
	/* The check of the repaired model runs on a second thread while the
	 * caller writes it: md->verify gives the verdict, which model_save_as
	 * asks for before committing (model_close waits for it otherwise).
	 * Only for a caller that saves with model_save_as or model_save. */
	int check_async;
	/* The first checkpoint, opening since before the model's load
	 * (pipeline_prefetch), or NULL: pipeline_run opens it on a second
	 * thread itself. */
	struct Prefetch *prefetch;
} Opts;

typedef struct Prefetch Prefetch;

/* Starts opening, on a second thread, the checkpoint a pipeline_run with
 * spec and o will read first; NULL when it reads none. The caller passes
 * it in o->prefetch and ends it with pipeline_prefetch_end after the run
 * (or instead of it): a result the run did not take is closed. */
Prefetch *pipeline_prefetch(Arena *a, const Spec *spec, const Opts *o);
void pipeline_prefetch_end(Prefetch *f);

/* spec NULL and no o->layout: diagnosis only (find MoE routers, report
 * damage). With o->layout the spec is inferred from the graph and the
 * checkpoint (zero-config use) and r->spec returns it. Returns 0 or -1
 * with e set; r is filled either way as far as it got. */
int pipeline_run(Model *md, const Spec *spec, const Opts *o, Report *r, Err *e);

#endif
