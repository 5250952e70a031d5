/* The command line: parse args -> model_load -> spec_load -> pipeline_run
 * -> model_save, per input. Only main prints and picks the exit status. */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "afile.h"
#include "arena.h"
#include "duo.h"
#include "err.h"
#include "filemap.h"
#include "model.h"
#include "pipeline.h"
#include "report.h"
#include "spec.h"

#ifndef PACKAGE_VERSION
#define PACKAGE_VERSION "unknown"
#endif

static const char usage[] =
	"usage: onnx-moe-repair IN.onnx [IN2.onnx ...] [--experts experts.yaml] [--weights CKPT]\n"
	"                       [-o OUT.onnx | -o DIR | -o -] [--check] [--report FILE.json | --report -]\n"
	"                       [--emit-experts FILE] [--external-data FILE] [--dispatch dense|sparse]\n"
	"                       [--no-check] [--no-sync] [--in-place] [--max-memory SIZE]\n"
	"                       [-q] [-v] [--help] [--version]\n"
	"\n"
	"Repairs Mixture-of-Experts ONNX models broken by torch.onnx.export tracing:\n"
	"re-inserts the experts the dummy input did not route to and replaces the\n"
	"dispatch (or scripted If nodes) by a static dense form.\n"
	"\n"
	"  --experts FILE    the expert sets (experts.yaml, see onnx-moe-repair(1))\n"
	"  --weights FILE    the checkpoint: without --experts, every MoE layer is\n"
	"                    inferred from the graph and the checkpoint; with it,\n"
	"                    replaces experts.yaml's weights. Without either, only a\n"
	"                    diagnosis runs and nothing is written\n"
	"  --emit-experts FILE  write the expert sets found or inferred as experts.yaml\n"
	"  -o OUT.onnx       output file (default: IN.repaired.onnx beside the input)\n"
	"  -o DIR            output folder, one file per input under its own name\n"
	"  -o -              write the model to standard output\n"
	"  --check           write nothing; exit 1 when something needs repair (with\n"
	"                    weights, when this checkpoint can repair it: the repair\n"
	"                    runs, unsaved, and its error exits 2)\n"
	"  --report FILE     what was found and done, as one JSON document, one entry\n"
	"                    per input (schema/report.schema.json)\n"
	"  --report -        the same as JSON Lines on standard output: one object per\n"
	"                    input, written as each input finishes\n"
	"  --external-data FILE  write the initializers' inline data (>= 1 KiB: the\n"
	"                    new experts' weights) to FILE, named relative to the\n"
	"                    output's folder, at 4 KiB-aligned offsets; external data\n"
	"                    of the input stays where it is, referenced, where the\n"
	"                    output's folder has it, else is copied there too.\n"
	"                    Automatic (OUT.onnx.data) when the output would pass\n"
	"                    2 GiB or needs a copy of the input's external data\n"
	"  --dispatch FORM   dense (default): every expert runs, the top-k are picked;\n"
	"                    sparse: only the top-k experts run (gathered weights,\n"
	"                    grouped Conv); layers it cannot express stay dense\n"
	"  --no-check        skip the check of the output (the input is always checked)\n"
	"  --no-sync         do not fsync the output: still replaced atomically, but\n"
	"                    a power loss may lose it (for batch jobs that sync once)\n"
	"  --in-place        replace the input (refused otherwise)\n"
	"  --max-memory SIZE refuse an input that needs more memory than SIZE (bytes,\n"
	"                    or with K, M, G, T: KiB ... TiB); default half the\n"
	"                    physical memory, less under a lower ulimit -v\n"
	"  --passthrough     load and write back without any pass (I/O test aid)\n"
	"  -q, --quiet       no summary on stderr\n"
	"  -v, --verbose     more detail: node counts, mapping check, timings\n"
	"  -h, --help        this text\n"
	"  -V, --version     the version\n"
	"\n"
	"Several inputs: each is processed even after one fails, each gets its\n"
	"verdict or error line, and the exit status is the highest.\n"
	"Exit status: 0 success (--check, diagnosis: nothing needs repair),\n"
	"1 (--check, diagnosis only) something needs repair, 2 error.\n";

typedef struct {
	const char *experts, *weights, *emit, *out, *report, *extdata, *max_memory;
	int check, no_check, in_place, quiet, verbose, passthrough, no_sync, sparse;
	char **in;
	int nin;
} Args;

static int die(const char *msg)
{
	fprintf(stderr, "onnx-moe-repair: %s\n", msg);
	return 2;
}

/* For the SIGBUS handler: write(2) only, nothing that allocates. */
static void say(const char *s)
{
	size_t n = strlen(s);
	while (n) {
		ssize_t k = write(STDERR_FILENO, s, n);
		if (k <= 0)
			return;
		s += k;
		n -= (size_t)k;
	}
}

/* Inputs are read through mappings. One cut short while we read it (a
 * checkpoint or a model rewritten during the run) raises SIGBUS at the
 * first page past its new end, which would kill us with no word said:
 * instead the one line and exit status of any bad input. The output in
 * progress leaves nothing behind (afile.h); what an earlier input of the
 * same run wrote stays, whole. Async-signal-safe calls only. */
static void on_sigbus(int sig, siginfo_t *si, void *uc)
{
	(void)uc;
	if (si->si_code != BUS_ADRERR) {
		/* Not a file cut short: the default action, on return. */
		signal(sig, SIG_DFL);
		return;
	}
	afile_drop_all();
	size_t off = 0;
	const char *path = filemap_path_at(si->si_addr, &off);
	char num[24], *q = num + sizeof num;
	*--q = 0;
	do
		*--q = (char)('0' + off % 10);
	while ((off /= 10) && q > num);
	say("onnx-moe-repair: ");
	say(path ? path : "an input file");
	say(": shorter than when opened");
	if (path) {
		say(", byte ");
		say(q);
		say(" is gone");
	}
	say(" (rewritten or truncated during the run); the run stops here; rerun once the file is complete\n");
	_exit(2);
}

static const char *base_of(const char *p)
{
	const char *s = strrchr(p, '/');
	return s ? s + 1 : p;
}

static int is_dir(const char *p)
{
	struct stat st;
	size_t n = strlen(p);
	return (n && p[n - 1] == '/') || (stat(p, &st) == 0 && S_ISDIR(st.st_mode));
}

/* IN.onnx -> IN.repaired.onnx beside it; -o DIR -> DIR/basename. */
static char *out_path(Arena *a, const Args *g, const char *in)
{
	if (g->in_place)
		return arena_strdup(a, in);
	if (g->out && is_dir(g->out)) {
		size_t n = strlen(g->out);
		return arena_printf(a, "%s%s%s", g->out, g->out[n - 1] == '/' ? "" : "/", base_of(in));
	}
	if (g->out)
		return arena_strdup(a, g->out);
	size_t n = strlen(in);
	if (n > 5 && !strcmp(in + n - 5, ".onnx"))
		n -= 5;
	return arena_printf(a, "%.*s.repaired.onnx", (int)n, in);
}

/* "512M", "4G", "1073741824": bytes, or KiB ... TiB with a suffix
 * (an "iB" or "B" after it is allowed). 0 when malformed or under 1 MiB,
 * which nothing useful fits in. */
static size_t size_arg(const char *s)
{
	char *end;
	errno = 0;
	unsigned long long v = strtoull(s, &end, 10);
	if (end == s || errno || *s == '-' || *s == '+' || *s == ' ')
		return 0;
	int shift = 0;
	switch (*end) {
	case 'k': case 'K': shift = 10; end++; break;
	case 'm': case 'M': shift = 20; end++; break;
	case 'g': case 'G': shift = 30; end++; break;
	case 't': case 'T': shift = 40; end++; break;
	}
	if (shift && (!strcmp(end, "iB") || !strcmp(end, "B")))
		end += strlen(end);
	if (*end || v > (SIZE_MAX >> shift))
		return 0;
	size_t b = (size_t)v << shift;
	return b < (1u << 20) ? 0 : b;
}

static int parse(Args *g, int argc, char **argv, Err *e)
{
	enum { O_EXPERTS = 256, O_CHECK, O_REPORT, O_NOCHECK, O_INPLACE, O_PASS, O_EXTDATA, O_NOSYNC, O_WEIGHTS, O_EMIT, O_MAXMEM,
	       O_DISPATCH };
	static const struct option opts[] = {
		{ "experts", required_argument, NULL, O_EXPERTS },
		{ "weights", required_argument, NULL, O_WEIGHTS },
		{ "emit-experts", required_argument, NULL, O_EMIT },
		{ "output", required_argument, NULL, 'o' },
		{ "check", no_argument, NULL, O_CHECK },
		{ "report", required_argument, NULL, O_REPORT },
		{ "no-check", no_argument, NULL, O_NOCHECK },
		{ "in-place", no_argument, NULL, O_INPLACE },
		{ "passthrough", no_argument, NULL, O_PASS },
		{ "external-data", required_argument, NULL, O_EXTDATA },
		{ "no-sync", no_argument, NULL, O_NOSYNC },
		{ "dispatch", required_argument, NULL, O_DISPATCH },
		{ "max-memory", required_argument, NULL, O_MAXMEM },
		{ "quiet", no_argument, NULL, 'q' },
		{ "verbose", no_argument, NULL, 'v' },
		{ "help", no_argument, NULL, 'h' },
		{ "version", no_argument, NULL, 'V' },
		{ 0 },
	};
	opterr = 0; /* our own one-line messages */
	for (int c; (c = getopt_long(argc, argv, ":o:qvhV", opts, NULL)) != -1;) {
		switch (c) {
		case O_EXPERTS: g->experts = optarg; break;
		case O_WEIGHTS: g->weights = optarg; break;
		case O_EMIT: g->emit = optarg; break;
		case 'o': g->out = optarg; break;
		case O_CHECK: g->check = 1; break;
		case O_REPORT: g->report = optarg; break;
		case O_NOCHECK: g->no_check = 1; break;
		case O_INPLACE: g->in_place = 1; break;
		case O_PASS: g->passthrough = 1; break;
		case O_EXTDATA: g->extdata = optarg; break;
		case O_NOSYNC: g->no_sync = 1; break;
		case O_DISPATCH:
			if (strcmp(optarg, "dense") && strcmp(optarg, "sparse"))
				return errf(e, "--dispatch %s: give dense or sparse", optarg);
			g->sparse = !strcmp(optarg, "sparse");
			break;
		case O_MAXMEM: g->max_memory = optarg; break;
		case 'q': g->quiet = 1; break;
		case 'v': g->verbose = 1; break;
		case 'h': fputs(usage, stdout); exit(0);
		case 'V': printf("onnx-moe-repair %s\n", PACKAGE_VERSION); exit(0);
		case ':':
			return errf(e, "%s needs an argument; see --help", argv[optind - 1]);
		default:
			if (optopt)
				return errf(e, "unknown option '-%c'; see --help", optopt);
			return errf(e, "unknown option '%s'; see --help", argv[optind - 1]);
		}
	}
	g->in = argv + optind;
	g->nin = argc - optind;
	if (!g->nin)
		return errf(e, "no input model; usage: onnx-moe-repair IN.onnx [--experts experts.yaml] [-o OUT.onnx]");
	int writes = g->experts || g->weights || g->passthrough;
	if (g->check && (g->out || g->in_place))
		return errf(e, "--check writes nothing; drop %s", g->out ? "-o" : "--in-place");
	if (g->check && g->passthrough)
		return errf(e, "--check and --passthrough exclude each other");
	if (!writes && !g->check && (g->out || g->in_place))
		return errf(e, "%s needs --experts or --weights: without them only a diagnosis runs, which writes nothing", g->out ? "-o" : "--in-place");
	if (g->in_place && g->out)
		return errf(e, "--in-place and -o exclude each other");
	if (g->extdata && !writes)
		return errf(e, "--external-data needs --experts (or --passthrough): nothing is written otherwise");
	if (g->extdata && g->out && !strcmp(g->out, "-"))
		return errf(e, "--external-data: the data file is named relative to the model's folder, and -o - has none; write to a file");
	if (g->extdata) {
		int up = 0;
		for (const char *c = g->extdata; *c;) {
			size_t n = strcspn(c, "/");
			up |= n == 2 && c[0] == '.' && c[1] == '.';
			c += n;
			c += *c != 0;
		}
		if (!*g->extdata || g->extdata[0] == '/' || up)
			return errf(e, "--external-data %s: give a file name relative to the output's folder (no '..', not absolute), as ONNX stores it", g->extdata);
	}
	if (g->extdata && g->nin > 1)
		return errf(e, "--external-data names one file, for one input; repair several models one at a time, or let large outputs get OUT.data automatically");
	if (g->passthrough && (g->experts || g->weights || g->emit))
		return errf(e, "--passthrough runs no pass; drop %s", g->experts ? "--experts" : g->weights ? "--weights" : "--emit-experts");
	if (g->emit && g->nin > 1)
		return errf(e, "--emit-experts names one file, for one input; run once per model");
	if (g->max_memory) {
		size_t b = size_arg(g->max_memory);
		if (!b)
			return errf(e, "--max-memory %s: give a size of at least 1M, in bytes or with K, M, G or T (KiB ... TiB)", g->max_memory);
		arena_set_budget(b);
	}
	if (g->quiet)
		g->verbose = 0;
	for (int i = 0; i < g->nin; i++)
		if (!strcmp(g->in[i], "-"))
			return errf(e, "reading a model from standard input is not supported; pass a file");
	if (g->report && !strcmp(g->report, "-") && g->out && !strcmp(g->out, "-"))
		return errf(e, "--report - and -o - would both write to standard output; send the report to a file (--report FILE.json) or the model to one (-o OUT.onnx)");
	if (g->nin > 1 && g->out && !strcmp(g->out, "-"))
		return errf(e, "-o - takes a single input; use -o DIR for several");
	if (g->nin > 1 && g->out && !is_dir(g->out))
		return errf(e, "%s: several inputs need -o DIR (an existing folder), or no -o to write each beside its input", g->out);
	if (g->nin > 1 && g->out)
		for (int i = 0; i < g->nin; i++)
			for (int j = 0; j < i; j++)
				if (!strcmp(base_of(g->in[i]), base_of(g->in[j])))
					return errf(e, "%s and %s would both be written to %s/%s; process them separately",
					            g->in[j], g->in[i], g->out, base_of(g->in[i]));
	return 0;
}

/* The file a path names once written: realpath of its folder + its name,
 * so "a/../b/x" and "b/x" compare equal and a symlinked file compares
 * equal to its target. NULL when the folder does not exist. */
static char *target(Arena *a, const char *p)
{
	char *r = realpath(p, NULL);
	if (!r) {
		const char *s = strrchr(p, '/');
		char *d = s ? arena_dup(a, p, (size_t)(s - p) + 1) : ".";
		if (s)
			d[s - p] = 0;
		char *rd = realpath(*d ? d : "/", NULL);
		if (!rd)
			return NULL;
		r = (char *)arena_printf(a, "%s/%s", rd, s ? s + 1 : p);
		free(rd);
		return r;
	}
	char *q = arena_strdup(a, r);
	free(r);
	return q;
}

/* Writes that would destroy an input before it is read, or a report over
 * a model: refused before anything runs. (model_save refuses writing over
 * its own input by itself.) */
static int clashes(const Args *g, Arena *a, Err *e)
{
	int writes = (g->experts || g->passthrough) && !g->check;
	char **in = arena_alloc(a, (size_t)g->nin * sizeof *in);
	for (int i = 0; i < g->nin; i++)
		in[i] = target(a, g->in[i]);
	const char *rep = g->report && strcmp(g->report, "-") ? target(a, g->report) : NULL;
	for (int i = 0; i < g->nin; i++) {
		if (rep && in[i] && !strcmp(rep, in[i]))
			return errf(e, "--report %s is the input model %s; choose another report file", g->report, g->in[i]);
		if (!writes)
			continue;
		const char *o = out_path(a, g, g->in[i]);
		const char *ot = strcmp(o, "-") ? target(a, o) : NULL;
		if (rep && ot && !strcmp(rep, ot))
			return errf(e, "--report %s is also the output model; choose another report file", g->report);
		for (int j = 0; j < g->nin && ot; j++)
			if (j != i && in[j] && !strcmp(ot, in[j]))
				return errf(e, "%s: the output for %s would overwrite the input %s; choose another -o", o, g->in[i], g->in[j]);
	}
	return 0;
}

/* file is path, by name or (when path exists: *sp) by inode. */
static int is_file(const char *path, const struct stat *sp, const char *file)
{
	struct stat sf;
	return !strcmp(path, file) ||
	       (sp && stat(file, &sf) == 0 && sf.st_dev == sp->st_dev && sf.st_ino == sp->st_ino);
}

/* What no output may replace: experts.yaml and the weights it names (the
 * inputs and outputs are clashes()'s and model_save's). NULL: none. The
 * path is looked at once, and a weights file once however many layers
 * name it (a stat per layer was 400 of them on a 400-layer model). */
static const char *precious(const char *path, const Args *g, const Spec *spec)
{
	struct stat st;
	const struct stat *sp = stat(path, &st) == 0 ? &st : NULL;
	if (g->experts && is_file(path, sp, g->experts))
		return "the experts file";
	const char *seen = spec ? spec->weights : NULL;
	if (seen && is_file(path, sp, seen))
		return "the weights file";
	for (size_t i = 0; spec && i < spec->nlayer; i++) {
		const char *w = spec->layer[i].weights;
		if (!w || (seen && !strcmp(w, seen)))
			continue;
		if (is_file(path, sp, w))
			return "a weights file";
		seen = w;
	}
	return NULL;
}

/* The report is written last: it must not replace what the run read. */
static int check_report(const Args *g, const Spec *spec, Err *e)
{
	const char *what = precious(g->report, g, spec);
	if (what)
		return errf(e, "--report %s is %s; choose another file for the report", g->report, what);
	return 0;
}

/* --emit-experts: the spec the run used, paths relative to where it goes. */
static int write_spec(const char *path, const Spec *s, Arena *a, Err *e)
{
	if (!s)
		return errf(e, "%s: no MoE layer needs an experts.yaml; nothing to write", path);
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);
	if (!f)
		return errf(e, "%s: out of memory", path);
	const char *slash = strrchr(path, '/');
	const char *dir = slash ? arena_printf(a, "%.*s", (int)(slash - path + (slash == path)), path) : ".";
	int rc = spec_write(f, s, dir, NULL, a, e);
	fclose(f);
	AFile af;
	if (!rc && afile_open(&af, path, 0, e) == 0) {
		afile_write(&af, buf, len);
		rc = afile_commit(&af, e);
	} else if (!rc) {
		rc = -1;
	}
	free(buf);
	return rc;
}

/* One input's report entry: what main knows (input, output, status, the
 * error, external data the save copied: md NULL or md->copied_to NULL,
 * none) around the Report's members. oneline: a JSON Lines record. */
static void entry(FILE *js, int oneline, const char *in, const char *out, const char *status, const char *err,
                  const Model *md, const Report *r)
{
	fputs(oneline ? "{\"input\": " : "  {\"input\": ", js);
	json_str(js, in);
	fputs(", \"output\": ", js);
	json_str(js, out);
	fprintf(js, ", \"status\": \"%s\", ", status);
	if (err) {
		fputs("\"error\": ", js);
		json_str(js, err);
		fputs(", ", js);
	}
	if (md && md->copied_to) {
		/* A pipeline moving outputs on must move this file with them. */
		fprintf(js, "\"external_data_copied\": {\"tensors\": %zu, \"bytes\": %llu, \"into\": ", md->ncopied,
		        md->copied);
		json_str(js, md->copied_to);
		fputs("}, ", js);
	}
	if (oneline)
		report_json_line(js, r);
	else
		report_json(js, r);
	fputs(oneline ? "}\n" : "}", js);
}

/* Every damaged MoE layer has all its experts (their count known), and the
 * damage is only the dispatch: the repair then reads no checkpoint. */
static int nothing_missing(const Report *r)
{
	size_t n = 0;
	for (size_t i = 0; i < r->nlayer; i++) {
		const LayerReport *l = &r->layer[i];
		if (l->dense)
			continue;
		if (l->why || l->experts <= 0 || l->npresent < l->experts)
			return 0;
		n++;
	}
	return n > 0;
}

/* One input, start to end. Returns its exit status (0, 1 damaged, 2). The
 * JSON entry goes to js (when not NULL) while the Report's arena is alive. */
static int run(const Args *g, const Spec *spec, const char *in, FILE *js, int oneline, Err *e)
{
	int given = spec || g->weights;
	RunMode mode = g->check || (!given && !g->passthrough) ? (given ? RUN_CHECK : RUN_DIAGNOSE) : RUN_REPAIR;
	Arena *a = arena_new();
	Model md;
	Report r = { 0 };
	const char *out = mode == RUN_REPAIR ? out_path(a, g, in) : NULL;
	int rc = 0, loaded = 0;
	Prefetch *pf = NULL;
	/* The CPU clock is the process's: in a batch, earlier inputs' too. */
	double t0 = progress_now(), t1 = t0, t2 = t0, t3 = t0, cpu0 = progress_cpu(), cpu = cpu0;
	Progress pg;
	progress_init(&pg, !g->quiet);
	const char *what = out ? precious(out, g, spec) : NULL;
	if (what) {
		errf(e, "%s: is %s; choose another -o", out, what);
		rc = 2;
		goto done;
	}
	/* The unpack makes a third of a graph-heavy run's memory: the helper
	 * populates blocks ahead from the start (pipeline_run would start it
	 * only after the load). 400 layers, each run after another process
	 * touched and freed 3 GiB: median 0.485 -> 0.425 s (six runs each)
	 * and 0.34 -> 0.32 s (eight), peak RSS unchanged. The budget is set
	 * already: arena_new asked for it. */
	arena_prefill(1);
	/* The load checks the wire on one core and looks for zeros to cut
	 * on the other (model.c); pipeline_run keeps it and stops it. */
	duo_start();
	Opts o = { .check_only = mode != RUN_REPAIR, .no_check = g->no_check, .verbose = g->verbose,
		   .weights = g->weights, .layout = !spec && (g->weights || g->emit), .progress = &pg,
		   .dispatch = g->sparse ? DISPATCH_SPARSE : DISPATCH_DENSE,
		   /* A repair is saved with model_save_as below (or the
		    * run fails and model_close waits for the check). */
		   .check_async = mode == RUN_REPAIR };
	/* The checkpoint opens on the second core while this one loads the
	 * model: a torch.save checkpoint's CRC-32 check took as long as the
	 * load (117 MB against 193 MB of model, YOLO-Master-L). */
	if (!g->passthrough)
		o.prefetch = pf = pipeline_prefetch(a, spec, &o);
	if (model_load(&md, in, a, e) < 0) {
		rc = 2;
		goto done;
	}
	loaded = 1;
	md.progress = &pg;
	if (out && model_save_check(&md, out, g->extdata, g->in_place ? SAVE_IN_PLACE : 0, e) < 0) {
		rc = 2;
		goto done;
	}
	t1 = progress_now();
	if (!g->passthrough) {
		int prc = pipeline_run(&md, spec, &o, &r, e);
		pipeline_prefetch_end(pf);
		pf = NULL;
		if (prc < 0) {
			/* Pass errors name a layer or node, not the file. */
			errwrap(e, "%s", in);
			rc = 2;
			goto done;
		}
	}
	/* The passes allocate without a check each; an overrun of the
	 * budget they made is refused here, before anything is written. */
	if (arena_check(a, e) < 0) {
		errwrap(e, "%s", in);
		rc = 2;
		goto done;
	}
	t2 = progress_now();
	if (g->emit && !g->passthrough && write_spec(g->emit, r.spec, a, e) < 0) {
		rc = 2;
		goto done;
	}
	if (mode == RUN_REPAIR) {
		if (model_save_as(&md, out, g->extdata, (g->in_place ? SAVE_IN_PLACE : 0) | (g->no_sync ? SAVE_NO_SYNC : 0), e) < 0) {
			rc = 2;
			goto done;
		}
	} else if (r.damaged) {
		rc = 1;
	}
	t3 = progress_now();
	cpu = progress_cpu();
done:
	/* A failed load or save check leaves the checkpoint opening. */
	pipeline_prefetch_end(pf);
	duo_stop(); /* a failed load leaves it running */
	arena_prefill(0);
	progress_done(&pg);
	/* In a batch every error line names its input (a save error names
	 * the output, a pass error the layer). */
	size_t nin = strlen(in);
	if (rc == 2 && g->nin > 1 && !(strncmp(e->msg, in, nin) == 0 && e->msg[nin] == ':'))
		errwrap(e, "%s", in);
	if (!g->quiet) {
		/* After an error the Report is half filled ("Conv 7 -> 0"):
		 * only -v shows how far it got. */
		if (rc != 2 || g->verbose)
			report_print(stderr, in, &r, mode, g->verbose);
		if (rc == 2)
			; /* main prints the error */
		else if (mode == RUN_REPAIR && g->passthrough)
			fprintf(stderr, "%s: copied without passes -> %s\n", in, out);
		else if (mode == RUN_REPAIR)
			fprintf(stderr, "%s: %s -> %s\n", in, r.changed ? "repaired" : "nothing to repair, copy written", out);
		else if (r.damaged)
		{
			int lost = 0;
			for (size_t i = 0; i < r.nlayer; i++)
				lost += r.layer[i].why != NULL;
			if (lost)
				fprintf(stderr, "%s: needs repair; %d layer%s cannot be repaired by this tool (see above)\n", in, lost,
					lost == 1 ? "" : "s");
			else
				fprintf(stderr, "%s: needs repair%s\n", in,
					spec || g->weights ? "" :
					nothing_missing(&r) ? "; no expert is missing, so experts.yaml needs no weights: run with --experts experts.yaml (or --weights CHECKPOINT)" :
					"; run with --weights CHECKPOINT (or --experts experts.yaml)");
		}
		else
			fprintf(stderr, "%s: nothing needs repair%s\n", in,
			        spec || r.nlayer ? "" : " (no MoE router found)");
		if (rc != 2 && mode == RUN_REPAIR && md.copied_to)
			fprintf(stderr, "%s: %zu external tensors (%.1f MiB) copied into %s: the output's folder lacks the input's data files\n",
			        in, md.ncopied, md.copied / 1048576.0, md.copied_to);
		if (g->verbose && rc != 2)
			fprintf(stderr, "%s: %zu bytes, %d external tensors; load %.3f s, passes %.3f s, save %.3f s; arena %.1f MiB\n",
			        in, md.size, md.next, t1 - t0, t2 - t1, t3 - t2, arena_used(a) / 1048576.0);
		/* The part of the run no second core can shorten: until the
		 * layers are bound, nothing tells which checkpoint tensors to
		 * read (the process's CPU clock counts every thread). */
		if (g->verbose && rc != 2 && r.bound_at > 0)
			fprintf(stderr, "%s: layers bound %.3f s from the start, CPU %.3f s by then and %.3f s by the end of the save\n",
			        in, r.bound_at - t0, r.bound_cpu - cpu0, cpu - cpu0);
	}
	if (js)
		entry(js, oneline, in, rc == 2 ? NULL : out,
		      rc == 2 ? "error" : mode == RUN_REPAIR ? (r.changed ? "repaired" : "written") : r.damaged ? "damaged" : "intact",
		      rc == 2 ? e->msg : NULL, rc != 2 && mode == RUN_REPAIR ? &md : NULL, &r);
	if (loaded)
		model_close(&md);
	arena_free(a);
	return rc;
}

static int write_report(const char *path, const char *text, size_t n, Err *e)
{
	AFile f;
	if (afile_open(&f, path, 0, e) < 0)
		return -1;
	afile_write(&f, text, n);
	return afile_commit(&f, e);
}

/* One JSON Lines record to standard output, under a POSIX record lock on
 * the descriptor: parallel runs sharing one pipe or file (xargs -P) take
 * it in turn, so their records never interleave, even past PIPE_BUF. A
 * record lock, not flock: processes that inherited one descriptor share
 * its flock, but each holds its own record lock. Where the descriptor
 * takes no lock (a terminal), the record is written unlocked. */
static int emit_line(const char *s, size_t n, Err *e)
{
	struct flock l = { .l_type = F_WRLCK, .l_whence = SEEK_SET };
	int locked;
	while (!(locked = fcntl(STDOUT_FILENO, F_SETLKW, &l) == 0) && errno == EINTR)
		;
	int err = 0;
	while (n && !err) {
		ssize_t w = write(STDOUT_FILENO, s, n);
		if (w < 0) {
			if (errno != EINTR)
				err = errno;
			continue;
		}
		s += w;
		n -= (size_t)w;
	}
	if (locked) {
		l.l_type = F_UNLCK;
		fcntl(STDOUT_FILENO, F_SETLK, &l);
	}
	if (err)
		return errf(e, "--report -: cannot write to standard output: %s; check what reads it", strerror(err));
	return 0;
}

int main(int argc, char **argv)
{
	/* With a file-size limit, a failing write() (EFBIG) lets us remove the
	 * temporary; the default SIGXFSZ action would kill us mid-file. */
	signal(SIGXFSZ, SIG_IGN);
	struct sigaction bus = { .sa_sigaction = on_sigbus, .sa_flags = SA_SIGINFO };
	sigemptyset(&bus.sa_mask);
	sigaction(SIGBUS, &bus, NULL);
	Args g = { 0 };
	Err e = { { 0 } };
	if (parse(&g, argc, argv, &e) < 0)
		return die(e.msg);

	/* --report FILE: one document, built in memory and written at the
	 * end, atomically. --report -: one record per input on stdout. */
	int lines = g.report && !strcmp(g.report, "-");
	char *jbuf = NULL;
	size_t jlen = 0;
	FILE *js = NULL;
	if (g.report && !lines) {
		js = open_memstream(&jbuf, &jlen);
		if (!js)
			return die("out of memory for the report");
		const char *m = g.check || (!g.experts && !g.passthrough) ? (g.experts ? "check" : "diagnose") : "repair";
		fprintf(js, "{\"tool\": \"onnx-moe-repair\", \"version\": \"%s\", \"mode\": \"%s\",\n\"models\": [\n", PACKAGE_VERSION, m);
	}

	Arena *sa = arena_new();
	if (clashes(&g, sa, &e) < 0) {
		arena_free(sa);
		if (js) { /* the report stream opened above */
			fclose(js);
			free(jbuf);
		}
		return die(e.msg);
	}
	Spec spec, *sp = NULL;
	int status = 0;
	Err fe; /* what stops every input: e is reused per input */
	const char *fatal = NULL;
	if (g.experts) {
		if (spec_load(&spec, g.experts, g.weights ? SPEC_WEIGHTS_GIVEN : 0, sa, &fe) < 0) {
			fatal = fe.msg;
			fprintf(stderr, "onnx-moe-repair: %s\n", fe.msg);
			status = 2;
		} else {
			sp = &spec;
		}
	}
	int report_ok = 1;
	if (!fatal && js && check_report(&g, sp, &fe) < 0) {
		fatal = fe.msg;
		fprintf(stderr, "onnx-moe-repair: %s\n", fe.msg);
		status = 2;
		report_ok = 0;
	}
	for (int i = 0; i < g.nin; i++) {
		/* Each input's entry in its own buffer: a record is written
		 * whole, as the input finishes. */
		char *ebuf = NULL;
		size_t elen = 0;
		FILE *es = g.report && report_ok ? open_memstream(&ebuf, &elen) : NULL;
		if (g.report && report_ok && !es) {
			fprintf(stderr, "onnx-moe-repair: %s: out of memory for the report\n", g.in[i]);
			status = 2;
			report_ok = 0;
		}
		int rc = 2;
		if (fatal) {
			/* Every input gets its entry, failed with the run. */
			Report none = { 0 };
			if (es)
				entry(es, lines, g.in[i], NULL, "error", fatal, NULL, &none);
		} else {
			rc = run(&g, sp, g.in[i], es, lines, &e);
			if (rc == 2)
				fprintf(stderr, "onnx-moe-repair: %s\n", e.msg);
		}
		if (rc > status)
			status = rc;
		if (es) {
			fclose(es);
			if (lines) {
				Err we;
				if (emit_line(ebuf, elen, &we) < 0) {
					fprintf(stderr, "onnx-moe-repair: %s\n", we.msg);
					status = 2;
					report_ok = 0;
				}
			} else {
				fputs(i ? ",\n" : "", js);
				fwrite(ebuf, 1, elen, js);
			}
			free(ebuf);
		}
	}
	if (js) {
		fprintf(js, "\n],\n\"error\": ");
		json_str(js, fatal);
		fprintf(js, ", \"exit_status\": %d}\n", status);
		fclose(js);
		Err re;
		if (report_ok && write_report(g.report, jbuf, jlen, &re) < 0) {
			fprintf(stderr, "onnx-moe-repair: %s\n", re.msg);
			status = 2;
		}
		free(jbuf);
	}
	arena_free(sa);
	return status;
}
