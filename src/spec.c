/* experts.yaml, read through libyaml's document API so every node keeps its
 * line and column for messages. Scalars are typed here (libyaml leaves
 * plain scalars untyped): integers are plain decimal scalars. */
#include "spec.h"

#include "filemap.h"
#include "map.h"

#include <errno.h>
#include <stdarg.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <yaml.h>

typedef struct {
	const char *path;
	const char *dir; /* the YAML's folder, "" when it is the current one */
	yaml_document_t *doc;
	Arena *a;
	Err *e;
	int flags;
} P;

static int at(P *p, const yaml_node_t *n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

static int at(P *p, const yaml_node_t *n, const char *fmt, ...)
{
	char msg[900];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	return errf(p->e, "%s:%zu:%zu: %s", p->path, n->start_mark.line + 1, n->start_mark.column + 1, msg);
}

static const char *kind(const yaml_node_t *n)
{
	return n->type == YAML_MAPPING_NODE ? "a mapping" : n->type == YAML_SEQUENCE_NODE ? "a list" : "a scalar";
}

static const char *text(const yaml_node_t *n)
{
	return (const char *)n->data.scalar.value;
}

/* Plain (unquoted) null: empty, ~, null. */
static int is_null(const yaml_node_t *n)
{
	if (n->type != YAML_SCALAR_NODE || n->data.scalar.style != YAML_PLAIN_SCALAR_STYLE)
		return 0;
	const char *s = text(n);
	return !*s || !strcmp(s, "~") || !strcmp(s, "null") || !strcmp(s, "Null") || !strcmp(s, "NULL");
}

static int get_str(P *p, const char *key, const yaml_node_t *n, const char **out)
{
	if (n->type != YAML_SCALAR_NODE)
		return at(p, n, "'%s' must be a string, not %s", key, kind(n));
	if (is_null(n))
		return at(p, n, "'%s' must be a string, not null", key);
	*out = arena_strdup(p->a, text(n));
	return 0;
}

static int get_int(P *p, const char *key, const yaml_node_t *n, int *out)
{
	if (n->type != YAML_SCALAR_NODE)
		return at(p, n, "'%s' must be an integer, not %s", key, kind(n));
	const char *s = text(n);
	char *end;
	errno = 0;
	long v = strtol(s, &end, 10);
	if (n->data.scalar.style != YAML_PLAIN_SCALAR_STYLE || !*s || *end || (*s != '-' && *s != '+' && (*s < '0' || *s > '9')))
		return at(p, n, "'%s' must be an integer, got '%s'", key, s);
	if (errno || v < INT_MIN || v > INT_MAX)
		return at(p, n, "'%s' is out of range: %s", key, s);
	*out = (int)v;
	return 0;
}

static size_t lev(const char *a, const char *b)
{
	size_t la = strlen(a), lb = strlen(b), d[64];
	if (lb >= 64)
		return SIZE_MAX;
	for (size_t j = 0; j <= lb; j++)
		d[j] = j;
	for (size_t i = 1; i <= la; i++) {
		size_t prev = d[0];
		d[0] = i;
		for (size_t j = 1; j <= lb; j++) {
			size_t cur = d[j];
			size_t c = prev + (a[i - 1] != b[j - 1]);
			if (d[j] + 1 < c)
				c = d[j] + 1;
			if (d[j - 1] + 1 < c)
				c = d[j - 1] + 1;
			d[j] = c;
			prev = cur;
		}
	}
	return d[lb];
}

/* Matches a mapping's keys against the known ones (in order), refusing
 * unknown and duplicate keys; val[i] gets the value node of known[i]. */
static int keys(P *p, const yaml_node_t *map, const char *what, const char *const *known, size_t nk,
	yaml_node_t **val)
{
	memset(val, 0, nk * sizeof *val);
	for (yaml_node_pair_t *pr = map->data.mapping.pairs.start; pr < map->data.mapping.pairs.top; pr++) {
		yaml_node_t *k = yaml_document_get_node(p->doc, pr->key);
		yaml_node_t *v = yaml_document_get_node(p->doc, pr->value);
		if (k->type != YAML_SCALAR_NODE)
			return at(p, k, "keys of %s must be plain names, not %s", what, kind(k));
		size_t i = 0;
		while (i < nk && strcmp(known[i], text(k)))
			i++;
		if (i == nk) {
			size_t best = SIZE_MAX, bi = 0;
			for (size_t j = 0; j < nk; j++) {
				size_t d = lev(text(k), known[j]);
				if (d < best)
					best = d, bi = j;
			}
			/* Close enough to be a typo: two edits, or under half the longer word. */
			size_t len = strlen(text(k)), kl = strlen(known[bi]);
			if ((best <= 2 && best < len) || 2 * best < (len > kl ? len : kl))
				return at(p, k, "unknown key '%s' in %s; did you mean '%s'?", text(k), what, known[bi]);
			char list[400] = "";
			for (size_t j = 0; j < nk; j++)
				snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", j ? ", " : "", known[j]);
			return at(p, k, "unknown key '%s' in %s; known keys: %s", text(k), what, list);
		}
		if (val[i])
			return at(p, k, "duplicate key '%s' in %s (first at line %zu)", text(k), what,
				val[i]->start_mark.line + 1);
		val[i] = v;
	}
	return 0;
}

/* Resolves a weights path against the YAML's folder and checks it exists
 * (unless --weights replaces it); *where says where the file gives it, for
 * errors from reading it. */
static int weights(P *p, const yaml_node_t *n, const char **out, const char **where)
{
	const char *w;
	if (get_str(p, "weights", n, &w))
		return -1;
	if (!*w)
		return at(p, n, "'weights' is empty; give a file path relative to this YAML file");
	const char *full = w[0] == '/' || !*p->dir ? w : arena_printf(p->a, "%s/%s", p->dir, w);
	struct stat st;
	if (!(p->flags & SPEC_WEIGHTS_GIVEN) && stat(full, &st) < 0)
		return at(p, n, "weights '%s' not found (%s: %s); paths are relative to the YAML file's folder",
			w, full, strerror(errno));
	*out = full;
	*where = arena_printf(p->a, "%s:%zu:%zu", p->path, n->start_mark.line + 1, n->start_mark.column + 1);
	return 0;
}

/* Far above any MoE layer built so far (hundreds of experts); bounds what
 * a stray number can make the passes allocate. */
enum { MAX_EXPERTS = 65536 };

enum { L_SCOPE, L_EXPERTS, L_TOPK, L_EXPERT, L_WEIGHTS, L_PREFIX, L_ROUTER, L_INPUT, L_OUTPUT, L_CKEY, L_N };
static const char *const LKEYS[] = { "scope", "experts", "top_k", "expert", "weights", "prefix",
	"router", "input", "output", "checkpoint_key" };
enum { R_INDICES, R_WEIGHTS, R_N };
static const char *const RKEYS[] = { "indices", "weights" };
enum { T_VERSION, T_WEIGHTS, T_CKEY, T_MOE, T_N };
static const char *const TKEYS[] = { "version", "weights", "checkpoint_key", "moe" };

static int layer(P *p, const yaml_node_t *n, const Spec *s, SpecLayer *l)
{
	if (n->type != YAML_MAPPING_NODE)
		return at(p, n, "each 'moe' entry must be a mapping (scope, experts, top_k, ...), not %s", kind(n));
	yaml_node_t *v[L_N];
	if (keys(p, n, "a 'moe' entry", LKEYS, L_N, v))
		return -1;
	l->line = (int)n->start_mark.line + 1;
	l->col = (int)n->start_mark.column + 1;
	for (int k = L_SCOPE; k <= L_TOPK; k++)
		if (!v[k])
			return at(p, n, "'moe' entry lacks required key '%s'", LKEYS[k]);
	if (get_str(p, "scope", v[L_SCOPE], &l->scope) || get_int(p, "experts", v[L_EXPERTS], &l->experts) ||
		get_int(p, "top_k", v[L_TOPK], &l->top_k))
		return -1;
	/* "" is the root: a MoE module exported alone. */
	if (l->scope[0] == '.' || (*l->scope && l->scope[strlen(l->scope) - 1] == '.'))
		return at(p, v[L_SCOPE], "'scope' '%s' starts or ends with a dot; give the module path as named_modules() shows it, e.g. model.6",
			  l->scope);
	if (l->experts < 1)
		return at(p, v[L_EXPERTS], "'experts' must be at least 1, got %d", l->experts);
	if (l->experts > MAX_EXPERTS) /* the passes allocate and search per expert */
		return at(p, v[L_EXPERTS], "'experts' is %d; at most %d per layer are supported", l->experts, MAX_EXPERTS);
	if (l->top_k < 1)
		return at(p, v[L_TOPK], "'top_k' must be at least 1, got %d", l->top_k);
	if (l->top_k > l->experts)
		return at(p, v[L_TOPK], "'top_k' (%d) exceeds 'experts' (%d)", l->top_k, l->experts);
	l->expert = "experts.{i}";
	l->expert_given = v[L_EXPERT] != NULL;
	if (v[L_EXPERT]) {
		if (get_str(p, "expert", v[L_EXPERT], &l->expert))
			return -1;
		if (!strstr(l->expert, "{i}"))
			return at(p, v[L_EXPERT], "'expert' pattern '%s' lacks '{i}' (the expert's index), e.g. experts.{i}",
				l->expert);
	}
	/* No weights at all is fine until experts are missing (or --weights
	 * gives them): the repair says so then. */
	l->weights = s->weights;
	l->weights_at = s->weights_at;
	if (v[L_WEIGHTS] && weights(p, v[L_WEIGHTS], &l->weights, &l->weights_at))
		return -1;
	l->prefix = "";
	if (v[L_PREFIX] && v[L_PREFIX]->type == YAML_SCALAR_NODE && is_null(v[L_PREFIX]))
		; /* "prefix:" left empty means no prefix */
	else if (v[L_PREFIX] && get_str(p, "prefix", v[L_PREFIX], &l->prefix))
		return -1;
	l->checkpoint_key = s->checkpoint_key;
	if (v[L_CKEY] && get_str(p, "checkpoint_key", v[L_CKEY], &l->checkpoint_key))
		return -1;
	if (v[L_INPUT] && get_str(p, "input", v[L_INPUT], &l->input))
		return -1;
	if (v[L_OUTPUT] && get_str(p, "output", v[L_OUTPUT], &l->output))
		return -1;
	if (v[L_ROUTER]) {
		if (v[L_ROUTER]->type != YAML_MAPPING_NODE)
			return at(p, v[L_ROUTER], "'router' must be a mapping with 'indices' and/or 'weights', not %s",
				kind(v[L_ROUTER]));
		yaml_node_t *r[R_N];
		if (keys(p, v[L_ROUTER], "'router'", RKEYS, R_N, r))
			return -1;
		if (r[R_INDICES] && get_str(p, "indices", r[R_INDICES], &l->router_indices))
			return -1;
		if (r[R_WEIGHTS] && get_str(p, "weights", r[R_WEIGHTS], &l->router_weights))
			return -1;
	}
	return 0;
}

/* libyaml's problem, with its mark; tabs get an explanation since YAML
 * forbids them for indentation and libyaml's wording hides that. */
static int syntax(P *p, const yaml_parser_t *ps, const char *src, size_t len)
{
	const yaml_mark_t *m = &ps->problem_mark;
	const char *prob = ps->problem ? ps->problem : "YAML syntax error";
	if (m->index < len && src[m->index] == '\t')
		return errf(p->e, "%s:%zu:%zu: tab character; YAML indentation must use spaces",
			p->path, m->line + 1, m->column + 1);
	if (ps->context)
		return errf(p->e, "%s:%zu:%zu: %s %s (line %zu)", p->path, m->line + 1, m->column + 1, prob,
			ps->context, ps->context_mark.line + 1);
	return errf(p->e, "%s:%zu:%zu: %s", p->path, m->line + 1, m->column + 1, prob);
}

enum { MAX_NEST = 64 };

/* Tags a value of experts.yaml may carry: none, or YAML's own for what it
 * is. Anything else (!!python/object, !!binary, !custom) would be
 * dropped silently by the document API, so it is refused. */
static int tag_ok(const yaml_char_t *tag, yaml_event_type_t t)
{
	static const char *const scalar[] = { YAML_STR_TAG, YAML_INT_TAG, YAML_FLOAT_TAG, YAML_BOOL_TAG, YAML_NULL_TAG, NULL };
	const char *g = (const char *)tag;
	if (!g)
		return 1;
	if (t == YAML_SEQUENCE_START_EVENT)
		return !strcmp(g, YAML_SEQ_TAG);
	if (t == YAML_MAPPING_START_EVENT)
		return !strcmp(g, YAML_MAP_TAG);
	for (const char *const *k = scalar; *k; k++)
		if (!strcmp(g, *k))
			return 1;
	return 0;
}

/* One pass over libyaml's events before the document is built: nesting
 * past MAX_NEST levels is refused as soon as it is reached (libyaml's
 * scanner slows down quadratically with depth, and nothing here nests
 * deeper than four), and so is any tag that is not a standard one. */
static int prescan(P *p, const char *src, size_t len)
{
	yaml_parser_t ps;
	if (!yaml_parser_initialize(&ps))
		return errf(p->e, "%s: cannot initialise libyaml", p->path);
	yaml_parser_set_input_string(&ps, (const unsigned char *)src, len);
	int depth = 0, rc = -1;
	for (;;) {
		yaml_event_t ev;
		if (!yaml_parser_parse(&ps, &ev)) {
			syntax(p, &ps, src, len);
			break;
		}
		yaml_event_type_t t = ev.type;
		const yaml_mark_t *m = &ev.start_mark;
		const yaml_char_t *tag = t == YAML_SCALAR_EVENT ? ev.data.scalar.tag
			: t == YAML_SEQUENCE_START_EVENT ? ev.data.sequence_start.tag
			: t == YAML_MAPPING_START_EVENT ? ev.data.mapping_start.tag : NULL;
		int bad = 0;
		if (!tag_ok(tag, t)) {
			char shown[256];
			errf(p->e, "%s:%zu:%zu: tag '%s' is not allowed; experts.yaml holds plain strings, numbers, lists and mappings",
				p->path, m->line + 1, m->column + 1, esc_text(shown, sizeof shown, (const char *)tag));
			bad = 1;
		} else if ((t == YAML_SEQUENCE_START_EVENT || t == YAML_MAPPING_START_EVENT) && ++depth > MAX_NEST) {
			errf(p->e, "%s:%zu:%zu: lists and mappings nested deeper than %d levels; experts.yaml nests four",
				p->path, m->line + 1, m->column + 1, MAX_NEST);
			bad = 1;
		} else if (t == YAML_SEQUENCE_END_EVENT || t == YAML_MAPPING_END_EVENT) {
			depth--;
		}
		yaml_event_delete(&ev);
		if (bad)
			break;
		if (t == YAML_STREAM_END_EVENT) {
			rc = 0;
			break;
		}
	}
	yaml_parser_delete(&ps);
	return rc;
}

static int load(P *p, const char *src, size_t len, Spec *s)
{
	yaml_parser_t ps;
	if (!yaml_parser_initialize(&ps))
		return errf(p->e, "%s: cannot initialise libyaml", p->path);
	yaml_parser_set_input_string(&ps, (const unsigned char *)src, len);
	yaml_document_t doc;
	if (!yaml_parser_load(&ps, &doc)) {
		syntax(p, &ps, src, len);
		yaml_parser_delete(&ps);
		return -1;
	}
	p->doc = &doc;
	int rc = -1;
	yaml_node_t *root = yaml_document_get_root_node(&doc);
	if (!root || is_null(root)) {
		errf(p->e, "%s:1:1: empty document; expected a mapping with 'weights' and 'moe' (see schema/experts.yaml)",
			p->path);
		goto out;
	}
	if (root->type != YAML_MAPPING_NODE) {
		at(p, root, "the document must be a mapping with 'weights' and 'moe', not %s", kind(root));
		goto out;
	}
	yaml_node_t *v[T_N];
	if (keys(p, root, "the top level", TKEYS, T_N, v))
		goto out;
	if (v[T_VERSION]) {
		int ver;
		if (get_int(p, "version", v[T_VERSION], &ver))
			goto out;
		if (ver != 1) {
			at(p, v[T_VERSION], "schema version %d is not supported; this tool reads version 1", ver);
			goto out;
		}
	}
	if (v[T_WEIGHTS] && weights(p, v[T_WEIGHTS], &s->weights, &s->weights_at))
		goto out;
	if (v[T_CKEY] && get_str(p, "checkpoint_key", v[T_CKEY], &s->checkpoint_key))
		goto out;
	if (!v[T_MOE]) {
		at(p, root, "missing required key 'moe' (the list of MoE layers)");
		goto out;
	}
	yaml_node_t *moe = v[T_MOE];
	/* `moe:` with nothing under it is an empty list to whoever wrote it. */
	size_t n = moe->type == YAML_SEQUENCE_NODE ? (size_t)(moe->data.sequence.items.top - moe->data.sequence.items.start) : 0;
	if (!n && (moe->type == YAML_SEQUENCE_NODE || is_null(moe))) {
		at(p, moe, "'moe' lists no layers; list each MoE layer (scope, experts, top_k), or write them with --weights CHECKPOINT --emit-experts FILE");
		goto out;
	}
	if (moe->type != YAML_SEQUENCE_NODE) {
		at(p, moe, "'moe' must be a list of layers, not %s", kind(moe));
		goto out;
	}
	s->layer = arena_alloc(p->a, n * sizeof *s->layer);
	Map seen;
	map_init(&seen, p->a, n);
	for (size_t i = 0; i < n; i++) {
		yaml_node_t *ln = yaml_document_get_node(&doc, moe->data.sequence.items.start[i]);
		if (layer(p, ln, s, &s->layer[i]))
			goto out;
		/* Real files list a few layers, but a crafted one of 1 MiB
		 * lists tens of thousands: no quadratic check. */
		SpecLayer *first = map_get(&seen, s->layer[i].scope);
		if (first) {
			at(p, ln, "duplicate scope '%s' (first at line %d)", s->layer[i].scope, first->line);
			goto out;
		}
		map_put(&seen, s->layer[i].scope, &s->layer[i]);
		s->nlayer = i + 1;
	}
	/* A second document would be silently ignored: refuse it instead. */
	yaml_document_t more;
	if (!yaml_parser_load(&ps, &more)) {
		syntax(p, &ps, src, len);
		goto out;
	}
	yaml_node_t *mr = yaml_document_get_root_node(&more);
	if (mr) {
		at(p, mr, "a second YAML document; experts.yaml holds exactly one");
		yaml_document_delete(&more);
		goto out;
	}
	yaml_document_delete(&more);
	rc = 0;
out:
	/* p outlives doc: no later lookup may reach the freed document. */
	p->doc = NULL;
	yaml_document_delete(&doc);
	yaml_parser_delete(&ps);
	return rc;
}

/* Far above any experts.yaml (a few hundred bytes per layer); bounds
 * what libyaml builds from a file. */
enum { MAX_YAML = 1 << 20 };

int spec_load(Spec *s, const char *path, int flags, Arena *a, Err *e)
{
	memset(s, 0, sizeof *s);
	s->path = arena_strdup(a, path);
	struct stat st;
	int fd = file_open_regular(path, &st, "give experts.yaml as a file", e);
	if (fd < 0)
		return -1;
	/* One byte more than the limit tells a file that grew past it. */
	char *buf = malloc(MAX_YAML + 1);
	size_t len = 0;
	int err = 0;
	while (buf && len <= MAX_YAML) {
		ssize_t r = read(fd, buf + len, MAX_YAML + 1 - len);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0) {
			err = r < 0 ? errno : 0;
			break;
		}
		len += (size_t)r;
	}
	close(fd);
	if (!buf)
		return errf(e, "%s: out of memory", path);
	if (err || len > MAX_YAML) {
		free(buf);
		return err ? errf(e, "%s: %s", path, strerror(err))
			   : errf(e, "%s: larger than %d KiB, too large for an expert description (a few hundred bytes per layer)",
				  path, MAX_YAML >> 10);
	}
	const char *slash = strrchr(path, '/');
	P p = { path, slash ? arena_printf(a, "%.*s", (int)(slash - path + (slash == path)), path) : "", NULL, a, e, flags };
	int rc = prescan(&p, buf, len) ? -1 : load(&p, buf, len, s);
	free(buf);
	return rc;
}

int spec_wrap(Err *e, const Spec *s, const SpecLayer *l)
{
	if (s && s->path && l && l->line > 0)
		errwrap(e, "%s:%d:%d", s->path, l->line, l->col);
	return -1;
}

const char *spec_where(Arena *a, const Spec *s, const SpecLayer *l)
{
	return s && s->path && l && l->line > 0 ? arena_printf(a, "%s:%d:%d", s->path, l->line, l->col) : NULL;
}

const char *spec_expert_path(Arena *a, const SpecLayer *l, int i)
{
	const char *pat = l->expert ? l->expert : "experts.{i}";
	char num[16];
	snprintf(num, sizeof num, "%d", i);
	size_t n = 0;
	for (const char *q = pat; *q;)
		if (!strncmp(q, "{i}", 3))
			n += strlen(num), q += 3;
		else
			n++, q++;
	char *o = arena_alloc(a, n + 1), *w = o;
	for (const char *q = pat; *q;)
		if (!strncmp(q, "{i}", 3)) {
			memcpy(w, num, strlen(num));
			w += strlen(num);
			q += 3;
		} else
			*w++ = *q++;
	*w = 0;
	return o;
}

/* Exporters name a level either by its attribute ("experts.3", "0") or by
 * a dotted path repeating some of its ancestors ("model.6" under "model",
 * "conv.0" under "conv", "model.0.0" under "model.0"). Each level is
 * therefore joined at the longest overlap between the path so far and the
 * level's leading parts; a level always adds at least its last part, so a
 * child really named like its parent ("/model/model/") is kept. */
const char *spec_node_module(Arena *a, const char *node)
{
	if (!node || node[0] != '/')
		return NULL;
	const char *last = strrchr(node, '/');
	if (last == node)
		return NULL; /* "/Conv": a node of the root module */
	size_t n = (size_t)(last - node);
	/* Parts are pointers into one copy; '/' and '.' become NULs. */
	char *buf = arena_alloc(a, n + 1);
	memcpy(buf, node + 1, n - 1);
	const char **comp = arena_alloc(a, (n + 1) * sizeof *comp);
	const char **q = arena_alloc(a, (n + 1) * sizeof *q);
	size_t nc = 0;
	for (char *seg = buf; seg;) {
		char *end = strchr(seg, '/');
		if (end)
			*end = 0;
		size_t m = 0;
		for (char *part = seg;;) {
			char *dot = strchr(part, '.');
			if (dot)
				*dot = 0;
			q[m++] = part;
			if (!dot)
				break;
			part = dot + 1;
		}
		size_t j = m - 1 < nc ? m - 1 : nc;
		for (; j > 0; j--) {
			size_t k = 0;
			while (k < j && !strcmp(comp[nc - j + k], q[k]))
				k++;
			if (k == j)
				break;
		}
		for (size_t k = j; k < m; k++)
			comp[nc++] = q[k];
		seg = end ? end + 1 : NULL;
	}
	size_t len = 0;
	for (size_t i = 0; i < nc; i++)
		len += strlen(comp[i]) + 1;
	char *out = arena_alloc(a, len + 1), *w = out;
	for (size_t i = 0; i < nc; i++) {
		if (i)
			*w++ = '.';
		size_t l = strlen(comp[i]);
		memcpy(w, comp[i], l);
		w += l;
	}
	*w = 0;
	return out;
}

int spec_place(const SpecLayer *l, const char *module)
{
	size_t sl = strlen(l->scope);
	if (strncmp(module, l->scope, sl) || (sl && module[sl] && module[sl] != '.'))
		return SPEC_OUTSIDE;
	if (!module[sl])
		return SPEC_LAYER;
	const char *m = module + sl + (sl ? 1 : 0), *p = l->expert ? l->expert : "experts.{i}";
	int idx = -1;
	while (*p) {
		if (!strncmp(p, "{i}", 3)) {
			/* Module indices are canonical decimals: no sign, no leading zero. */
			if (*m < '0' || *m > '9' || (m[0] == '0' && m[1] >= '0' && m[1] <= '9'))
				return SPEC_LAYER;
			long v = 0;
			for (; *m >= '0' && *m <= '9'; m++)
				if ((v = v * 10 + (*m - '0')) > INT_MAX)
					return SPEC_LAYER;
			if (idx >= 0 && idx != (int)v)
				return SPEC_LAYER; /* "{i}" twice must name one index */
			idx = (int)v;
			p += 3;
		} else if (*p++ != *m++)
			return SPEC_LAYER;
	}
	return *m == 0 || *m == '.' ? idx : SPEC_LAYER;
}

/* path relative to the folder dir (both made absolute): "../w/best.pt". */
static const char *relative(Arena *a, const char *path, const char *dir)
{
	char *rp = realpath(path, NULL), *rd = realpath(*dir ? dir : ".", NULL);
	const char *out = path;
	if (rp && rd) {
		size_t i = 0, cut = 0;
		while (rp[i] && rp[i] == rd[i]) {
			if (rp[i] == '/')
				cut = i + 1;
			i++;
		}
		/* path inside dir: nothing of dir is left to climb out of (cut
		 * is then one past dir's end, so it cannot index rd). */
		const char *up = rd + cut;
		if (!rd[i] && rp[i] == '/') {
			cut = i + 1;
			up = rd + i;
		}
		out = "";
		for (const char *q = up; *q;) {
			out = arena_printf(a, "%s../", out);
			q += strcspn(q, "/");
			q += *q == '/';
		}
		out = arena_printf(a, "%s%s", out, rp + cut);
	}
	free(rp);
	free(rd);
	return out;
}

/* A YAML double-quoted scalar. */
static void quoted(FILE *f, const char *s)
{
	fputc('"', f);
	for (; *s; s++) {
		if (*s == '"' || *s == '\\')
			fprintf(f, "\\%c", *s);
		else if ((unsigned char)*s < 0x20)
			fprintf(f, "\\x%02x", (unsigned char)*s);
		else
			fputc(*s, f);
	}
	fputc('"', f);
}

int spec_write(FILE *f, const Spec *s, const char *dir, const char *const *why, Arena *a, Err *e)
{
	fputs("# experts.yaml (schema version 1; see schema/experts.yaml)\n", f);
	if (s->weights) {
		fputs("weights: ", f);
		quoted(f, relative(a, s->weights, dir));
		fputs("\n", f);
	} else {
		fputs("# weights: the checkpoint the missing experts are rebuilt from (or --weights)\n", f);
	}
	if (s->checkpoint_key) {
		fputs("checkpoint_key: ", f);
		quoted(f, s->checkpoint_key);
		fputs("\n", f);
	}
	fputs("moe:\n", f);
	for (size_t i = 0; i < s->nlayer; i++) {
		const SpecLayer *l = &s->layer[i];
		if (why && why[i])
			fprintf(f, "  # %s\n", why[i]);
		fputs("  - scope: ", f);
		quoted(f, l->scope);
		fprintf(f, "\n    experts: %d\n    top_k: %d\n", l->experts, l->top_k);
		if (l->expert && strcmp(l->expert, "experts.{i}") != 0) {
			fputs("    expert: ", f);
			quoted(f, l->expert);
			fputs("\n", f);
		}
		if (l->prefix && *l->prefix) {
			fputs("    prefix: ", f);
			quoted(f, l->prefix);
			fputs("\n", f);
		}
		if (l->weights && (!s->weights || strcmp(l->weights, s->weights) != 0)) {
			fputs("    weights: ", f);
			quoted(f, relative(a, l->weights, dir));
			fputs("\n", f);
		}
	}
	if (ferror(f))
		return errf(e, "writing the experts.yaml failed");
	return 0;
}
