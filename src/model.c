#include "model.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "afile.h"
#include "duo.h"
#include "filemap.h"
#include "graph.h"
#include "spawn.h"

/* Deep enough for any real ONNX nesting (each If/Loop level costs three
 * message levels); bounded so a crafted file cannot exhaust the stack in
 * protobuf-c's recursive unpack. */
enum { MAX_DEPTH = 256 };

/* One external data file, validated at load, mapped on first use. */
typedef struct {
	const char *loc;  /* as written in the model */
	const char *path; /* resolved against the model's folder */
	off_t size;
	dev_t dev;
	ino_t ino;
	const unsigned char *base;
	size_t len;
	int mapped;
	int copy;   /* the output's folder lacks it: the save copies its tensors out */
	int copied; /* and has: no tensor references it any more */
} ExtFile;

/* --- wire-format scan ---------------------------------------------------
 * protobuf-c says only "failed"; this walk says where and why, and bounds
 * nesting before protobuf-c recurses. It accepts exactly what unpack does
 * at the wire level (tags, lengths, wire types of known fields). */

typedef struct {
	const uint8_t *p0, *end;
	size_t at;        /* offset of the problem */
	char why[256];
	/* The first string holding a NUL: well-formed protobuf, invalid ONNX.
	 * Said only when the whole wire format holds, for random bytes pass
	 * for a short string often enough (1 file in 100) and a wire break
	 * further on is the truer diagnosis. */
	size_t nul_at;
	char nul[256];
} Scan;

/* Up to 48 bytes of s, printable ASCII as is, the rest as \xNN. */
static void escape(char *out, size_t cap, const uint8_t *s, size_t n)
{
	size_t k = 0;
	for (size_t i = 0; i < n && i < 48 && k + 5 < cap; i++)
		k += (size_t)(s[i] >= 0x20 && s[i] < 0x7f ? snprintf(out + k, cap - k, "%c", s[i])
		                                            : snprintf(out + k, cap - k, "\\x%02x", s[i]));
	if (n > 48 && k + 4 < cap)
		k += (size_t)snprintf(out + k, cap - k, "...");
	out[k] = 0;
}

static int varint_long(Scan *s, const uint8_t **p, const uint8_t *end, uint64_t *v)
{
	uint64_t r = 0;
	const uint8_t *q = *p;
	for (int i = 0; i < 10; i++) {
		if (q >= end) {
			s->at = (size_t)(*p - s->p0);
			snprintf(s->why, sizeof s->why, "truncated varint");
			return -1;
		}
		r |= (uint64_t)(*q & 0x7f) << (7 * i);
		if (!(*q++ & 0x80)) {
			*p = q;
			*v = r;
			return 0;
		}
	}
	s->at = (size_t)(*p - s->p0);
	snprintf(s->why, sizeof s->why, "varint longer than 10 bytes");
	return -1;
}

/* Most varints (tags, the lengths of names) are one byte: inline, the check
 * of a 53 600-node model took 4.1 ms instead of 5.9. */
static inline int varint(Scan *s, const uint8_t **p, const uint8_t *end, uint64_t *v)
{
	if (*p < end && !(**p & 0x80)) {
		*v = *(*p)++;
		return 0;
	}
	return varint_long(s, p, end, v);
}

static int wire_of(ProtobufCType t)
{
	switch (t) {
	case PROTOBUF_C_TYPE_SFIXED64:
	case PROTOBUF_C_TYPE_FIXED64:
	case PROTOBUF_C_TYPE_DOUBLE:
		return 1;
	case PROTOBUF_C_TYPE_SFIXED32:
	case PROTOBUF_C_TYPE_FIXED32:
	case PROTOBUF_C_TYPE_FLOAT:
		return 5;
	case PROTOBUF_C_TYPE_STRING:
	case PROTOBUF_C_TYPE_BYTES:
	case PROTOBUF_C_TYPE_MESSAGE:
		return 2;
	default:
		return 0;
	}
}

static int scan(Scan *s, const ProtobufCMessageDescriptor *d, const uint8_t *p, const uint8_t *end, int depth)
{
	if (depth > MAX_DEPTH) {
		s->at = (size_t)(p - s->p0);
		snprintf(s->why, sizeof s->why, "messages nested deeper than %d levels", MAX_DEPTH);
		return -1;
	}
	while (p < end) {
		const uint8_t *tagp = p;
		uint64_t tag, len;
		if (varint(s, &p, end, &tag) < 0)
			return -1;
		uint64_t num = tag >> 3;
		int wt = (int)(tag & 7);
		s->at = (size_t)(tagp - s->p0);
		if (num == 0 || num > 0x1fffffff) {
			snprintf(s->why, sizeof s->why, "invalid field number %" PRIu64 " in %s", num, d->name);
			return -1;
		}
		const ProtobufCFieldDescriptor *f = protobuf_c_message_descriptor_get_field(d, (unsigned)num);
		if (f) {
			int want = wire_of(f->type);
			int packed = wt == 2 && f->label == PROTOBUF_C_LABEL_REPEATED && want != 2;
			if (wt != want && !packed) {
				snprintf(s->why, sizeof s->why, "field %s.%s has wire type %d, expected %d", d->name, f->name, wt, want);
				return -1;
			}
		}
		switch (wt) {
		case 0:
			if (varint(s, &p, end, &len) < 0)
				return -1;
			break;
		case 1:
		case 5: {
			size_t w = wt == 1 ? 8 : 4;
			if ((size_t)(end - p) < w) {
				snprintf(s->why, sizeof s->why, "%s field %" PRIu64 " truncated", d->name, num);
				return -1;
			}
			p += w;
			break;
		}
		case 2:
			if (varint(s, &p, end, &len) < 0)
				return -1;
			if (len > (uint64_t)(end - p)) {
				snprintf(s->why, sizeof s->why, "%s%s%s (field %" PRIu64 ") claims %" PRIu64 " bytes, only %zu remain",
				         d->name, f ? "." : "", f ? f->name : "", num, len, (size_t)(end - p));
				return -1;
			}
			if (f && f->type == PROTOBUF_C_TYPE_MESSAGE && scan(s, f->descriptor, p, p + len, depth + 1) < 0)
				return -1;
			/* protobuf-c hands strings out NUL-terminated: a NUL inside
			 * would silently cut a name short (and the round trip would
			 * no longer be lossless). Only the wire length shows it. */
			if (f && f->type == PROTOBUF_C_TYPE_STRING && !*s->nul && memchr(p, 0, len)) {
				char esc[224];
				escape(esc, sizeof esc, p, len);
				snprintf(s->nul, sizeof s->nul, "%s.%s '%s' contains a NUL character", d->name, f->name, esc);
				s->nul_at = s->at;
			}
			p += len;
			break;
		default:
			snprintf(s->why, sizeof s->why, "wire type %d (%s) in %s", wt,
			         wt == 3 || wt == 4 ? "groups, unsupported" : "invalid", d->name);
			return -1;
		}
	}
	return 0;
}

static const char *hint(const uint8_t *p, size_t n)
{
	if (n >= 4 && !memcmp(p, "PK\3\4", 4))
		return "; it is a zip archive (a PyTorch checkpoint?)";
	if (n > 8 && p[8] == '{' && !memcmp(p + 5, "\0\0\0", 3))
		return "; it looks like a safetensors file";
	if (n >= 6 && !memcmp(p, "\x93NUMPY", 6))
		return "; it is a NumPy .npy file";
	size_t text = 0, k = n < 256 ? n : 256;
	for (size_t i = 0; i < k; i++)
		text += (p[i] >= 0x20 && p[i] < 0x7f) || p[i] == '\n' || p[i] == '\t' || p[i] == '\r';
	if (text == k)
		return "; it looks like text";
	return "";
}

int model_wire_check(const void *p, size_t n, Err *e)
{
	Scan s = { .p0 = p, .end = (const uint8_t *)p + n };
	if (scan(&s, &onnx__model_proto__descriptor, p, s.end, 0) == 0)
		return *s.nul ? errf(e, "not a valid ONNX model: %s (byte %zu); names and strings cannot contain NUL, rename it",
		                     s.nul, s.nul_at) : 0;
	/* The reason quotes values decoded from the bytes (field numbers,
	 * lengths): of a file recognised as something else (text behind a
	 * symlink, a checkpoint) they are its content, so only where the
	 * parse broke is said. */
	const char *h = hint(p, n);
	if (*h)
		return errf(e, "not an ONNX model (protobuf parse failed at byte %zu of %zu%s)", s.at, n, h);
	return errf(e, "not an ONNX model (protobuf parse failed at byte %zu of %zu: %s)", s.at, n, s.why);
}

/* --- external data -------------------------------------------------------- */

const char *model_ext_get(const Onnx__TensorProto *t, const char *key)
{
	for (size_t i = 0; i < t->n_external_data; i++)
		if (t->external_data[i]->key && !strcmp(t->external_data[i]->key, key))
			return t->external_data[i]->value ? t->external_data[i]->value : "";
	return NULL;
}

static int is_external(const Onnx__TensorProto *t)
{
	return t->has_data_location && t->data_location == ONNX__TENSOR_PROTO__DATA_LOCATION__EXTERNAL;
}

/* Decimal, non-negative; absent gives dflt. */
static int ext_num(const Onnx__TensorProto *t, const char *key, int64_t dflt, int64_t *v, Err *e)
{
	const char *s = model_ext_get(t, key);
	if (!s) {
		*v = dflt;
		return 0;
	}
	char *end;
	errno = 0;
	long long x = strtoll(s, &end, 10);
	if (!*s || *end || errno || x < 0 || *s == '-' || *s == '+' || *s == ' ')
		return errf(e, "external data %s '%s' is not a non-negative integer; fix the model's external_data entry", key, s);
	*v = x;
	return 0;
}

static size_t dtype_size(int dt)
{
	switch (dt) {
	case 2: case 3: case 9: case 17: case 18: case 19: case 20: return 1;
	case 4: case 5: case 10: case 16: return 2;
	case 1: case 6: case 12: return 4;
	case 7: case 11: case 13: case 14: return 8;
	case 15: return 16;
	default: return 0; /* strings, 4-bit types, future types: not checked */
	}
}

const char *model_ext_path(Arena *a, const char *dir, const char *loc, struct stat *st, Err *e)
{
	if (!*loc) {
		errf(e, "external data has an empty location; fix the model");
		return NULL;
	}
	if (loc[0] == '/' || loc[0] == '\\' || (loc[0] && loc[1] == ':')) {
		errf(e, "external data location '%s' is absolute; locations must be relative to the model's folder (move the file beside the model and store its name)",
		     loc);
		return NULL;
	}
	for (const char *c = loc; *c;) {
		size_t n = strcspn(c, "/\\");
		if (n == 2 && c[0] == '.' && c[1] == '.') {
			errf(e, "external data location '%s' has a '..' component; data must sit in the model's folder or below it", loc);
			return NULL;
		}
		c += n;
		c += *c != 0;
	}
	/* Walk down component by component so a symlinked folder is caught
	 * too, not only a symlinked file. */
	char *path = arena_printf(a, "%s/%s", dir, loc);
	for (char *c = path + strlen(dir) + 1;;) {
		char *sl = strchr(c, '/');
		if (sl)
			*sl = 0;
		if (lstat(path, st) < 0) {
			errf(e, "external data file '%s' (%s): %s; put it beside the model", loc, path, strerror(errno));
			return NULL;
		}
		if (S_ISLNK(st->st_mode)) {
			errf(e, "external data location '%s' goes through the symlink %s; symlinks are refused, copy the file there instead",
			     loc, path);
			return NULL;
		}
		if (!sl)
			break;
		*sl = '/';
		c = sl + 1;
	}
	if (!S_ISREG(st->st_mode)) {
		errf(e, "external data location '%s' is not a regular file", loc);
		return NULL;
	}
	return path;
}

/* Validates the location once per distinct string (model_ext_path). */
static ExtFile *ext_file(Model *md, const Onnx__TensorProto *t, const char *loc, Err *e)
{
	ExtFile *x = map_get(&md->ext, loc);
	if (x)
		return x;
	struct stat st;
	const char *path = model_ext_path(md->a, md->dir, loc, &st, e);
	if (!path) {
		errwrap(e, "%s: tensor '%s'", md->path, t->name ? t->name : "");
		return NULL;
	}
	x = arena_alloc(md->a, sizeof *x);
	x->loc = arena_strdup(md->a, loc);
	x->path = path;
	x->size = st.st_size;
	x->dev = st.st_dev;
	x->ino = st.st_ino;
	map_put(&md->ext, x->loc, x);
	return x;
}

/* Bytes dims x type need; -1 when the type has no fixed size (strings,
 * 4-bit types, types newer than this table), -2 on invalid dims. */
static int64_t need_bytes(const Onnx__TensorProto *t)
{
	size_t es = t->has_data_type ? dtype_size(t->data_type) : 0;
	if (!es)
		return -1;
	uint64_t n = es;
	for (size_t i = 0; i < t->n_dims; i++) {
		if (t->dims[i] < 0 || (t->dims[i] && n > (uint64_t)INT64_MAX / (uint64_t)t->dims[i]))
			return -2;
		n *= (uint64_t)t->dims[i];
	}
	return (int64_t)n;
}

/* Without a length key, ONNX Runtime reads what dims x type need (the onnx
 * Python package reads to the end of the file); taking the former keeps
 * both readings valid. */
int model_ext_range(const Onnx__TensorProto *t, const char *loc, long long size, int64_t *off, int64_t *len, Err *e)
{
	int64_t need = need_bytes(t);
	if (need == -2)
		return errf(e, "invalid dims");
	if (ext_num(t, "offset", 0, off, e) < 0)
		return -1;
	if (*off > size)
		return errf(e, "external data offset %" PRId64 " is past the end of '%s' (%lld bytes)", *off, loc, size);
	if (ext_num(t, "length", need >= 0 ? need : size - *off, len, e) < 0)
		return -1;
	if (*len > size - *off)
		return errf(e, "external data offset %" PRId64 " + length %" PRId64 " runs past the end of '%s' (%lld bytes); the data file is truncated or not the one this model was saved with",
		            *off, *len, loc, size);
	if (need >= 0 && need != *len)
		return errf(e, "external data in '%s' holds %" PRId64 " bytes but its dims and type need %" PRId64, loc, *len, need);
	return 0;
}

static int ext_range(Model *md, const Onnx__TensorProto *t, const ExtFile *x, int64_t *off, int64_t *len, Err *e)
{
	if (model_ext_range(t, x->loc, (long long)x->size, off, len, e) < 0)
		return errwrap(e, "%s: tensor '%s'", md->path, t->name ? t->name : "");
	return 0;
}

/* Checks the location and range once at load: ONNX Runtime would refuse
 * a bad one later with a vaguer message. */
static int ext_check(Model *md, const Onnx__TensorProto *t, Err *e)
{
	const char *loc = model_ext_get(t, "location");
	if (!loc)
		return errf(e, "%s: tensor '%s': data_location is EXTERNAL but there is no 'location' key; fix the model",
		            md->path, t->name ? t->name : "");
	ExtFile *x = ext_file(md, t, loc, e);
	int64_t off, len;
	if (!x || ext_range(md, t, x, &off, &len, e) < 0)
		return -1;
	md->next++;
	return 0;
}

/* Every TensorProto of the model, wherever it hides (attributes, sparse
 * tensors, subgraphs, functions, training info). */
typedef int (*TensorFn)(Model *, Onnx__TensorProto *, void *ud, Err *);

static int walk_graph(Model *md, const Onnx__GraphProto *g, TensorFn fn, void *ud, Err *e);

static int walk_sparse(Model *md, const Onnx__SparseTensorProto *s, TensorFn fn, void *ud, Err *e)
{
	if (!s)
		return 0;
	if (s->values && fn(md, s->values, ud, e) < 0)
		return -1;
	if (s->indices && fn(md, s->indices, ud, e) < 0)
		return -1;
	return 0;
}

static int walk_nodes(Model *md, Onnx__NodeProto **node, size_t n, TensorFn fn, void *ud, Err *e)
{
	for (size_t i = 0; i < n; i++)
		for (size_t j = 0; j < node[i]->n_attribute; j++) {
			const Onnx__AttributeProto *at = node[i]->attribute[j];
			if (at->t && fn(md, at->t, ud, e) < 0)
				return -1;
			for (size_t k = 0; k < at->n_tensors; k++)
				if (fn(md, at->tensors[k], ud, e) < 0)
					return -1;
			if (walk_sparse(md, at->sparse_tensor, fn, ud, e) < 0)
				return -1;
			for (size_t k = 0; k < at->n_sparse_tensors; k++)
				if (walk_sparse(md, at->sparse_tensors[k], fn, ud, e) < 0)
					return -1;
			if (at->g && walk_graph(md, at->g, fn, ud, e) < 0)
				return -1;
			for (size_t k = 0; k < at->n_graphs; k++)
				if (walk_graph(md, at->graphs[k], fn, ud, e) < 0)
					return -1;
		}
	return 0;
}

static int walk_graph(Model *md, const Onnx__GraphProto *g, TensorFn fn, void *ud, Err *e)
{
	for (size_t i = 0; i < g->n_initializer; i++)
		if (fn(md, g->initializer[i], ud, e) < 0)
			return -1;
	for (size_t i = 0; i < g->n_sparse_initializer; i++)
		if (walk_sparse(md, g->sparse_initializer[i], fn, ud, e) < 0)
			return -1;
	return walk_nodes(md, g->node, g->n_node, fn, ud, e);
}

static int walk_model(Model *md, TensorFn fn, void *ud, Err *e)
{
	const Onnx__ModelProto *m = md->m;
	if (walk_graph(md, m->graph, fn, ud, e) < 0)
		return -1;
	for (size_t i = 0; i < m->n_functions; i++)
		if (walk_nodes(md, m->functions[i]->node, m->functions[i]->n_node, fn, ud, e) < 0)
			return -1;
	for (size_t i = 0; i < m->n_training_info; i++) {
		const Onnx__TrainingInfoProto *ti = m->training_info[i];
		if (ti->initialization && walk_graph(md, ti->initialization, fn, ud, e) < 0)
			return -1;
		if (ti->algorithm && walk_graph(md, ti->algorithm, fn, ud, e) < 0)
			return -1;
	}
	return 0;
}

static int ext_visit(Model *md, Onnx__TensorProto *t, void *ud, Err *e)
{
	(void)ud;
	return is_external(t) ? ext_check(md, t, e) : 0;
}

/* --- required names ---------------------------------------------------------
 * proto2 leaves an absent string NULL. ONNX's checker requires these
 * fields, and the passes index values and nodes by them, so a model missing
 * one is refused here rather than checked at every use. */

static int named_vi(const Model *md, Onnx__ValueInfoProto **v, size_t n, const char *what, const char *gname, Err *e)
{
	for (size_t i = 0; i < n; i++)
		if (!v[i]->name)
			return errf(e, "%s: not a valid ONNX model: %s %zu of graph '%s' has no name", md->path, what, i, gname);
	return 0;
}

static int named_nodes(const Model *md, Onnx__NodeProto *const *node, size_t nn, const char *what, const char *gn,
		       Err *e);

static int named_graph(const Model *md, const Onnx__GraphProto *g, Err *e)
{
	const char *gn = g->name ? g->name : "";
	if (named_vi(md, g->input, g->n_input, "input", gn, e) < 0 ||
	    named_vi(md, g->output, g->n_output, "output", gn, e) < 0 ||
	    named_vi(md, g->value_info, g->n_value_info, "value_info", gn, e) < 0)
		return -1;
	for (size_t i = 0; i < g->n_initializer; i++)
		if (!g->initializer[i]->name)
			return errf(e, "%s: not a valid ONNX model: initializer %zu of graph '%s' has no name", md->path, i, gn);
	return named_nodes(md, g->node, g->n_node, "graph", gn, e);
}

/* The nodes of a graph or a function (what: "graph" or "function"). */
static int named_nodes(const Model *md, Onnx__NodeProto *const *node, size_t nn, const char *what, const char *gn, Err *e)
{
	for (size_t i = 0; i < nn; i++) {
		const Onnx__NodeProto *n = node[i];
		if (!n->op_type)
			return errf(e, "%s: not a valid ONNX model: node %zu ('%s') of %s '%s' has no op_type",
			            md->path, i, n->name ? n->name : "", what, gn);
		for (size_t j = 0; j < n->n_attribute; j++) {
			const Onnx__AttributeProto *at = n->attribute[j];
			if (!at->name)
				return errf(e, "%s: not a valid ONNX model: attribute %zu of node '%s' has no name",
				            md->path, j, n->name ? n->name : n->op_type);
			/* Depth is bounded by the wire scan (MAX_DEPTH). */
			if (at->g && named_graph(md, at->g, e) < 0)
				return -1;
			for (size_t k = 0; k < at->n_graphs; k++)
				if (named_graph(md, at->graphs[k], e) < 0)
					return -1;
		}
	}
	return 0;
}

/* --- zeros cut out before the unpack --------------------------------------
 * A traced export spells torch.zeros(...) as a Constant holding every zero:
 * 1 200 of 64 KiB in the external-data benchmark, 79 of its 87 MB. The
 * unpack copied each into fresh arena memory, which the kernel zeroes
 * first (clear_page_erms was a fifth of that run's perf samples, on the
 * core the weight comparisons share), for passes that read them once to
 * see zeros and a save that writes them back.
 * So the raw_data of a TensorProto that is ZCUT_MIN bytes or more, every
 * byte 0, is cut from a copy of the wire before the unpack and left as a
 * token (a nonce drawn per load, then the length); after the unpack each
 * token found points its tensor at one read-only mapping of zeros, which
 * every 4 KiB page maps to the kernel's single zero page: nothing to
 * populate, and reads stay in cache. Both walks go through the same
 * messages (holds_tensor), so every token the unpack kept is found; a
 * token it dropped was a field a later one replaced, as it would have
 * been. Bytes exactly 0 only (-0.0 is not cut): the save writes back what
 * was read. */

enum { ZCUT_MIN = 4096, TOKEN = 16, PADDED = 5, ZBUF = 256 << 10 };

typedef struct {
	const uint8_t *at; /* the raw_data field's tag */
	size_t len;        /* its zero bytes */
} Cut;

typedef struct {
	Arena *a;
	Cut *v;
	size_t n, cap;
	size_t max;        /* the longest cut */
	unsigned raw_data; /* TensorProto's field number */
	size_t saved;      /* bytes the copy of the wire is shorter, at least */
	uint8_t *buf;      /* zeros_at's */
	Scan s;            /* for varint's bounds; its words unused */
} Cuts;

/* The messages a TensorProto can be reached through (onnx.proto: graphs,
 * nodes, attributes, functions, training, sparse tensors). A message added
 * to the schema later is skipped by both walks alike: its tensors are
 * copied as before. */
static int holds_tensor(const ProtobufCMessageDescriptor *d)
{
	return d == &onnx__tensor_proto__descriptor || d == &onnx__graph_proto__descriptor ||
	       d == &onnx__node_proto__descriptor || d == &onnx__attribute_proto__descriptor ||
	       d == &onnx__model_proto__descriptor || d == &onnx__function_proto__descriptor ||
	       d == &onnx__training_info_proto__descriptor || d == &onnx__sparse_tensor_proto__descriptor;
}

/* All n bytes at p are 0. Read through the file into a buffer that stays
 * in cache (filemap.h): on the external-data model's 79 MB, 31 -> 24 ms
 * against the mapping's pages. */
static int zeros_at(Cuts *c, const uint8_t *p, size_t n)
{
	if (!g_bytes_zero(p, 64, ~(uint64_t)0)) /* most tensors that are not zeros say so at once */
		return 0;
	if (!c->buf)
		c->buf = arena_alloc_raw(c->a, ZBUF);
	for (size_t off = 0; off < n; off += ZBUF) {
		size_t k = n - off < ZBUF ? n - off : ZBUF;
		const uint8_t *q = filemap_read(c->buf, p + off, k) ? c->buf : p + off;
		if (!g_bytes_zero(q, k, ~(uint64_t)0))
			return 0;
	}
	return 1;
}

/* One field of a message from *p: its tag in *t, its bytes from *body
 * (after the length of a length-delimited one) to *p after. -1 where the
 * wire breaks. */
static int next_field(Scan *s, const uint8_t **p, const uint8_t *end, uint64_t *t, const uint8_t **body)
{
	uint64_t len;
	if (varint(s, p, end, t) < 0)
		return -1;
	*body = *p;
	switch (*t & 7) {
	case 0:
		return varint(s, p, end, &len);
	case 1:
	case 5:
		len = (*t & 7) == 1 ? 8 : 4;
		break;
	case 2:
		if (varint(s, p, end, &len) < 0)
			return -1;
		*body = *p;
		break;
	default:
		return -1;
	}
	if (len > (uint64_t)(end - *p))
		return -1;
	*p += len;
	return 0;
}

/* The cuts in [p, end), a message of type d, in wire order; -1 where the
 * wire breaks (it runs beside the wire check, which says where and why). */
static int find_cuts(Cuts *c, const ProtobufCMessageDescriptor *d, const uint8_t *p, const uint8_t *end, int depth)
{
	if (depth > MAX_DEPTH)
		return -1;
	while (p < end) {
		const uint8_t *tag = p, *body;
		uint64_t t;
		if (next_field(&c->s, &p, end, &t, &body) < 0)
			return -1;
		if ((t & 7) != 2)
			continue;
		size_t len = (size_t)(p - body);
		if (d == &onnx__tensor_proto__descriptor) {
			if (t >> 3 == c->raw_data && len >= ZCUT_MIN && zeros_at(c, body, len)) {
				if (c->n == c->cap) {
					size_t cap = c->cap ? 2 * c->cap : 64;
					c->v = arena_grow(c->a, c->v, c->n * sizeof *c->v, cap * sizeof *c->v);
					c->cap = cap;
				}
				c->v[c->n++] = (Cut){ tag, len };
				c->saved += len - TOKEN;
				if (len > c->max)
					c->max = len;
			}
			continue;
		}
		const ProtobufCFieldDescriptor *f = protobuf_c_message_descriptor_get_field(d, (unsigned)(t >> 3));
		size_t had = c->n;
		if (f && f->type == PROTOBUF_C_TYPE_MESSAGE && holds_tensor(f->descriptor) &&
		    find_cuts(c, f->descriptor, body, p, depth + 1) < 0)
			return -1;
		if (c->n > had) /* its length is padded */
			c->saved -= PADDED;
	}
	return 0;
}

typedef struct {
	uint8_t *o;
	const Cut *c, *cend;
	uint8_t nonce[8];
	Scan s; /* the wire is checked: next_field cannot fail */
} Emit;

static uint8_t *put_varint_to(uint8_t *o, uint64_t v)
{
	for (; v >= 0x80; v >>= 7)
		*o++ = (uint8_t)(v | 0x80);
	*o++ = (uint8_t)v;
	return o;
}

/* Copies [p, end), a message of type d, to w->o with the cuts in it made:
 * verbatim runs between the fields that hold a cut; a message on the way
 * to one gets a length padded to PADDED bytes (a varint may carry extra
 * zero groups), written once its new contents are. */
static void emit_cut(Emit *w, const ProtobufCMessageDescriptor *d, const uint8_t *p, const uint8_t *end)
{
	const uint8_t *run = p;
	while (p < end && w->c < w->cend && w->c->at < end) {
		const uint8_t *tag = p, *body;
		uint64_t t;
		next_field(&w->s, &p, end, &t, &body);
		if (p <= w->c->at)
			continue; /* ends before the next cut: stays in the run */
		memcpy(w->o, run, (size_t)(tag - run));
		w->o += tag - run;
		w->o = put_varint_to(w->o, t);
		if (tag == w->c->at) {
			uint64_t n = w->c->len;
			*w->o++ = TOKEN;
			memcpy(w->o, w->nonce, 8);
			memcpy(w->o + 8, &n, 8);
			w->o += TOKEN;
			w->c++;
		} else {
			uint8_t *hdr = w->o;
			w->o += PADDED;
			emit_cut(w, protobuf_c_message_descriptor_get_field(d, (unsigned)(t >> 3))->descriptor, body, p);
			uint64_t n = (uint64_t)(w->o - hdr - PADDED);
			for (int i = 0; i < PADDED; i++, n >>= 7)
				hdr[i] = (uint8_t)((n & 0x7f) | (i < PADDED - 1 ? 0x80 : 0));
		}
		run = p;
	}
	memcpy(w->o, run, (size_t)(end - run));
	w->o += end - run;
}

/* Points each tensor holding a token at md's zeros. */
static void restore_cuts(const Model *md, const uint8_t nonce[8], const ProtobufCMessageDescriptor *d, ProtobufCMessage *m)
{
	if (d == &onnx__tensor_proto__descriptor) {
		Onnx__TensorProto *t = (Onnx__TensorProto *)m;
		if (!t->has_raw_data || t->raw_data.len != TOKEN || memcmp(t->raw_data.data, nonce, 8))
			return;
		uint64_t n;
		memcpy(&n, t->raw_data.data + 8, 8);
		t->raw_data.data = md->zeros;
		t->raw_data.len = (size_t)n;
		return;
	}
	for (unsigned i = 0; i < d->n_fields; i++) {
		const ProtobufCFieldDescriptor *f = &d->fields[i];
		if (f->type != PROTOBUF_C_TYPE_MESSAGE || !holds_tensor(f->descriptor))
			continue;
		char *at = (char *)m + f->offset;
		if ((f->flags & PROTOBUF_C_FIELD_FLAG_ONEOF) && *(uint32_t *)((char *)m + f->quantifier_offset) != f->id)
			continue;
		if (f->label == PROTOBUF_C_LABEL_REPEATED) {
			size_t n = *(size_t *)((char *)m + f->quantifier_offset);
			ProtobufCMessage **v = *(ProtobufCMessage ***)at;
			for (size_t j = 0; j < n; j++)
				restore_cuts(md, nonce, f->descriptor, v[j]);
		} else if (*(ProtobufCMessage **)at) {
			restore_cuts(md, nonce, f->descriptor, *(ProtobufCMessage **)at);
		}
	}
}

static void draw_nonce(uint8_t nonce[8])
{
	if (getrandom(nonce, 8, 0) == 8)
		return;
	/* No entropy source: distinct per run still (the file cannot know it). */
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	uint64_t v = ((uint64_t)ts.tv_nsec << 20) ^ (uint64_t)ts.tv_sec ^ ((uint64_t)getpid() << 40) ^ (uint64_t)(uintptr_t)nonce;
	memcpy(nonce, &v, 8);
}

/* The wire check (half 0) and the search for cuts (half 1) read the same
 * bytes: the check's first touch of the mapping's pages and the search's
 * reads of the zeros through the file take about as long each (26 and
 * 24 ms on the external-data model), so they run on both cores. */
typedef struct {
	const uint8_t *p;
	size_t n;
	Arena *a, *ha; /* the model's; the helper's (duo_arena, NULL without one) */
	int rc, found;
	Err *e;
	Cuts c;
} Wire;

static void wire_half(void *arg, int half)
{
	Wire *w = arg;
	if (half == 0) {
		w->rc = model_wire_check(w->p, w->n, w->e);
		return;
	}
	w->c.a = w->ha ? w->ha : w->a;
	w->c.s.p0 = w->p;
	w->c.raw_data = protobuf_c_message_descriptor_get_field_by_name(&onnx__tensor_proto__descriptor, "raw_data")->id;
	w->found = find_cuts(&w->c, &onnx__model_proto__descriptor, w->p, w->p + w->n, 0) == 0;
}

/* A range the load is done with: its pages go now, the range at
 * model_close. An munmap waits for the address space's write lock, which
 * the prefill thread's population of the next arena block holds for
 * reading (3-4 ms at a time in D state, three times in one 400-layer
 * run's sched trace); dropping the pages takes it for reading, and
 * model_close runs after the prefill has stopped. */
static void let_go(Model *md, void *p, size_t n)
{
	madvise(p, n, MADV_DONTNEED);
	for (size_t i = 0; i < sizeof md->gone / sizeof *md->gone; i++)
		if (!md->gone[i].p) {
			md->gone[i].p = p;
			md->gone[i].n = n;
			return;
		}
	munmap(p, n);
}

/* md->m unpacked from the n bytes at p, with the cuts c made (above);
 * NULL as protobuf-c's unpack. */
static Onnx__ModelProto *unpack_cut(Model *md, const Cuts *c, const uint8_t *p, size_t n)
{
	ProtobufCAllocator pa = arena_pb(md->a);
	if (!c->n)
		return onnx__model_proto__unpack(&pa, n, p);
	/* A cut's length varint shrinks or stays, a message around one gets
	 * a header of PADDED bytes (one or more before): at most n - saved
	 * bytes, populated in one call, in huge pages where the kernel has
	 * them (a fault per 4 KiB page made the copy 25 ms instead of 6). */
	size_t cap = n - c->saved;
	uint8_t *buf = mmap(NULL, cap, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (buf != MAP_FAILED) {
		madvise(buf, cap, MADV_HUGEPAGE);
		madvise(buf, cap, MADV_POPULATE_WRITE);
	}
	void *z = mmap(NULL, c->max, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (buf == MAP_FAILED || z == MAP_FAILED) { /* the copying unpack needs no more */
		if (buf != MAP_FAILED)
			munmap(buf, cap);
		if (z != MAP_FAILED)
			munmap(z, c->max);
		return onnx__model_proto__unpack(&pa, n, p);
	}
	madvise(z, c->max, MADV_POPULATE_READ);
	md->zeros = z;
	md->nzeros = c->max;
	Emit w = { .o = buf, .c = c->v, .cend = c->v + c->n, .s.p0 = p };
	draw_nonce(w.nonce);
	emit_cut(&w, &onnx__model_proto__descriptor, p, p + n);
	Onnx__ModelProto *m = onnx__model_proto__unpack(&pa, (size_t)(w.o - buf), buf);
	let_go(md, buf, cap);
	if (m)
		restore_cuts(md, w.nonce, &onnx__model_proto__descriptor, &m->base);
	return m;
}

/* --- load ----------------------------------------------------------------- */

const char *model_dir_of(Arena *a, const char *path)
{
	const char *sl = strrchr(path, '/');
	if (!sl)
		return ".";
	if (sl == path)
		return "/";
	char *d = arena_dup(a, path, (size_t)(sl - path) + 1);
	d[sl - path] = 0;
	return d;
}

static int load(Model *md, const char *path, Arena *a, Err *e)
{
	*md = (Model){ .path = path, .a = a, .dir = model_dir_of(a, path) };
	map_init(&md->ext, a, 0);
	struct stat st;
	int fd = file_open_regular(path, &st, "give the model as a file", e);
	if (fd < 0)
		return -1;
	if (st.st_size == 0) {
		close(fd);
		return errf(e, "%s: empty file, not an ONNX model", path);
	}
	size_t n = (size_t)st.st_size;
	const uint8_t *p = mmap(NULL, n, PROT_READ, MAP_PRIVATE, fd, 0);
	int merr = errno;
	if (p != MAP_FAILED) /* named, should it shrink while read (SIGBUS) */
		filemap_add(p, n, fd, path);
	close(fd);
	if (p == MAP_FAILED)
		return errf(e, "%s: cannot map: %s", path, strerror(merr));
	/* unpack reads every byte, the wire check every field: mapped in
	 * one call, not by a trapped first touch of each page (see
	 * filemap.h). 87 MB of graph: load 0.088-0.123 -> 0.079-0.082 s. */
	madvise((void *)p, n, MADV_SEQUENTIAL);
	madvise((void *)p, n, MADV_POPULATE_READ);
	Wire w = { .p = p, .n = n, .a = a, .ha = duo_arena(), .e = e };
	duo_run(wire_half, &w, n);
	if (w.rc < 0) {
		filemap_remove(p);
		munmap((void *)p, n);
		return errwrap(e, "%s", path);
	}
	/* The copy of the rest costs about what the unpack's copies of the
	 * zeros would: worth it where zeros are most of the file. The
	 * benchmark's inline model (143 MB, 6 MB of it zeros) went 0.38 ->
	 * 0.47 s when copied for its zeros. !found cannot be where the check
	 * passed. */
	if (!w.found || w.c.saved < n - w.c.saved)
		w.c.n = 0;
	/* protobuf-c copies bytes and strings into the arena, so the mapping's
	 * pages go right after: peak memory stays about one model. */
	md->m = unpack_cut(md, &w.c, p, n);
	filemap_remove(p);
	let_go(md, (void *)p, n);
	if (!md->m && arena_check(a, e) < 0)
		return errwrap(e, "%s", path);
	if (!md->m)
		return errf(e, "%s: not an ONNX model (protobuf-c rejected it although its wire format is well formed)", path);
	if (!md->m->graph)
		return errf(e, "%s: not an ONNX model (no graph, field 7 of ModelProto)%s", path,
		            md->m->has_ir_version ? "" : "; it has no ir_version either");
	md->size = n;
	if (named_graph(md, md->m->graph, e) < 0)
		return -1;
	for (size_t i = 0; i < md->m->n_functions; i++) {
		const Onnx__FunctionProto *f = md->m->functions[i];
		if (!f->name)
			return errf(e, "%s: not a valid ONNX model: function %zu has no name", path, i);
		if (named_nodes(md, f->node, f->n_node, "function", f->name, e) < 0)
			return -1;
	}
	return walk_model(md, ext_visit, NULL, e);
}

int model_load(Model *md, const char *path, Arena *a, Err *e)
{
	if (load(md, path, a, e) == 0)
		return 0;
	model_close(md); /* what the load mapped: callers close only a loaded model */
	return -1;
}

void model_drop(Model *md)
{
	for (size_t i = 0; i < md->ext.cap; i++) {
		ExtFile *x = md->ext.slot[i].kt ? md->ext.slot[i].val : NULL;
		if (x && x->mapped && x->len)
			madvise((void *)x->base, x->len, MADV_DONTNEED);
	}
}

/* md->verify's verdict, asked once. */
static int verified(Model *md, Err *e)
{
	int (*f)(void *, Err *) = md->verify;
	md->verify = NULL;
	return f ? f(md->verify_ud, e) : 0;
}

void model_close(Model *md)
{
	Err ignored;
	verified(md, &ignored); /* a save failed before asking: the check's thread ends here */
	if (md->lbase)
		munmap(md->lbase, md->llen);
	md->lbase = NULL;
	if (md->zeros)
		munmap(md->zeros, md->nzeros);
	md->zeros = NULL;
	for (size_t i = 0; i < sizeof md->gone / sizeof *md->gone; i++)
		if (md->gone[i].p)
			munmap(md->gone[i].p, md->gone[i].n);
	memset(md->gone, 0, sizeof md->gone);
	if (md->done)
		md->done(md->done_ud);
	md->done = NULL;
	for (size_t i = 0; i < md->ext.cap; i++) {
		ExtFile *x = md->ext.slot[i].kt ? md->ext.slot[i].val : NULL;
		if (x && x->mapped && x->len) {
			filemap_remove(x->base);
			munmap((void *)x->base, x->len);
		}
		if (x)
			x->mapped = 0;
	}
}

int model_tensor_data(Model *md, const Onnx__TensorProto *t, const void **p, size_t *n, Err *e)
{
	const char *name = t->name ? t->name : "";
	if (!is_external(t)) {
		if (t->has_raw_data) {
			*p = t->raw_data.data;
			*n = t->raw_data.len;
			return 0;
		}
		if (!t->n_float_data && !t->n_int32_data && !t->n_string_data && !t->n_int64_data &&
		    !t->n_double_data && !t->n_uint64_data) {
			*p = "";
			*n = 0;
			return 0;
		}
		return errf(e, "%s: tensor '%s' keeps its values in typed fields, not raw_data", md->path, name);
	}
	const char *loc = model_ext_get(t, "location");
	ExtFile *x = loc ? map_get(&md->ext, loc) : NULL;
	if (!x) /* a tensor a pass made EXTERNAL after load: validate it now */
		if (ext_check(md, t, e) < 0 || !(x = map_get(&md->ext, loc)))
			return -1;
	if (!x->mapped) {
		/* O_NONBLOCK: validated as a regular file at load, but it may
		 * have been replaced by a FIFO since, and open would block. */
		int fd = open(x->path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY);
		struct stat st;
		if (fd < 0)
			return errf(e, "%s: tensor '%s': cannot open external data '%s': %s", md->path, name, x->loc, strerror(errno));
		if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_dev != x->dev || st.st_ino != x->ino || st.st_size != x->size) {
			close(fd);
			return errf(e, "%s: tensor '%s': external data '%s' changed since the model was loaded", md->path, name, x->loc);
		}
		x->len = (size_t)st.st_size;
		x->base = (const unsigned char *)"";
		if (x->len) {
			void *b = mmap(NULL, x->len, PROT_READ, MAP_PRIVATE, fd, 0);
			if (b == MAP_FAILED) {
				int err = errno;
				close(fd);
				return errf(e, "%s: tensor '%s': cannot map external data '%s': %s", md->path, name, x->loc, strerror(err));
			}
			x->base = b;
			filemap_add(b, x->len, fd, x->path);
		}
		close(fd);
		x->mapped = 1;
	}
	int64_t off, len;
	if (ext_range(md, t, x, &off, &len, e) < 0)
		return -1;
	*p = x->base + off;
	*n = (size_t)len;
	return 0;
}

/* --- save ----------------------------------------------------------------- */

/* A buffer later tensors are filled into: reused (it stays in cache, and
 * no fresh page is zeroed per tensor), with scratch emptied after each. */
typedef struct {
	Arena *a, *tmp;
	unsigned char *buf;
	size_t cap;
	size_t k; /* the md->placed index it holds, NONE when none */
	int rc;   /* its fill's result, e its error */
	Err e;
} Fill;

#define NONE SIZE_MAX

typedef struct {
	ProtobufCBuffer base;
	const Model *md;
	AFile *f;
	Progress *pg;
	const char *what;
	unsigned long long total;
	/* The fill of a tensor (a checkpoint read and a fold) took as long as
	 * its write: while the main thread writes one, a helper on the other
	 * core fills the next in placement order, the order the save asks for
	 * them. job: the index the helper fills into fill[jf], NONE when idle;
	 * only the helper touches that Fill meanwhile. */
	Fill fill[2];
	pthread_t th;
	int tried, ahead, stop, jf;
	size_t job;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	size_t filled; /* bytes since the last md->drop */
	Err *e;
	int failed;
} Sink;

/* Each later tensor (graph.h) still to be filled gets a distinct address
 * in a reserved range nothing can read: the packer hands that address to
 * the sink, which fills the tensor there; a reader that does not know
 * faults instead of writing garbage. Once per model: a second save finds
 * them placed. */
static int place_later(Model *md, Err *e)
{
	size_t total = 0, n = 0;
	for (size_t i = 0; i < md->nlater; i++)
		if (g_is_later(md->later[i]->t)) {
			total += md->later[i]->t->raw_data.len;
			n++;
		}
	if (!n)
		return 0;
	void *b = mmap(NULL, total, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (b == MAP_FAILED)
		return errf(e, "%s: cannot reserve %zu bytes of address space for the new weights: %s", md->path, total,
			    strerror(errno));
	md->lbase = b;
	md->llen = total;
	md->placed = arena_alloc(md->a, n * sizeof *md->placed);
	size_t off = 0;
	for (size_t i = 0; i < md->nlater; i++) {
		Tensor *t = md->later[i]->t;
		if (!g_is_later(t))
			continue;
		t->raw_data.data = md->lbase + off;
		off += t->raw_data.len;
		md->placed[md->nplaced++] = md->later[i];
	}
	return 0;
}

/* The md->placed index of the tensor placed at p: 1, else 0. */
static int placed_at(const Model *md, const uint8_t *p, size_t *k)
{
	size_t lo = 0, hi = md->nplaced;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		const uint8_t *q = md->placed[mid]->t->raw_data.data;
		if (q == p) {
			*k = mid;
			return 1;
		}
		if (q < p)
			lo = mid + 1;
		else
			hi = mid;
	}
	return 0;
}

enum { FILL_DROP = 8 << 20 };

/* Fills md->placed[k] into f. */
static void fill_one(const Model *md, Fill *f, size_t k)
{
	const Later *l = md->placed[k];
	size_t n = l->t->raw_data.len;
	f->k = k;
	if (n > f->cap) {
		/* The smaller buffer goes (a block of its own past 512 KiB). */
		arena_release(f->a, f->buf, f->cap);
		f->cap = 0;
		if (!(f->buf = arena_try(f->a, n, &f->e))) {
			f->rc = errwrap(&f->e, "%s: writing tensor '%s'", md->path, l->t->name);
			return;
		}
		f->cap = n;
	}
	f->rc = later_fill(l, f->buf, f->tmp, &f->e);
	if (f->rc) /* as a pass's error: the input, then the layer and expert */
		errwrap(&f->e, "%s", md->path);
	else
		f->rc = arena_check(f->tmp, &f->e);
	arena_reset(f->tmp);
}

static void *ahead_run(void *u)
{
	Sink *s = u;
	pthread_mutex_lock(&s->mu);
	for (;;) {
		while (s->job == NONE && !s->stop)
			pthread_cond_wait(&s->cv, &s->mu);
		if (s->job == NONE)
			break;
		Fill *f = &s->fill[s->jf];
		size_t k = s->job;
		pthread_mutex_unlock(&s->mu);
		fill_one(s->md, f, k);
		pthread_mutex_lock(&s->mu);
		s->job = NONE;
		pthread_cond_broadcast(&s->cv);
	}
	pthread_mutex_unlock(&s->mu);
	return NULL;
}

/* The helper, at the first placeholder: a save with none (the model
 * after its data file took the new weights) starts no thread. */
static void ahead_start(Sink *s)
{
	s->tried = 1;
	if (s->md->nplaced < 2)
		return;
	pthread_mutex_init(&s->mu, NULL);
	pthread_cond_init(&s->cv, NULL);
	if (!(s->ahead = spawn(&s->th, ahead_run, s))) {
		pthread_cond_destroy(&s->cv);
		pthread_mutex_destroy(&s->mu);
	}
}

/* md->placed[k], filled: by the helper if it was filling it, else now. */
static Fill *filled(Sink *s, size_t k)
{
	if (s->ahead) {
		pthread_mutex_lock(&s->mu);
		while (s->job != NONE)
			pthread_cond_wait(&s->cv, &s->mu);
		pthread_mutex_unlock(&s->mu);
	}
	for (int i = 0; i < 2; i++)
		if (s->fill[i].k == k)
			return &s->fill[i];
	fill_one(s->md, &s->fill[0], k);
	return &s->fill[0];
}

/* n bytes at p to the file; a placeholder is filled first. */
static void put(Sink *s, const uint8_t *p, size_t n)
{
	const Model *md = s->md;
	if (n && md->lbase && p >= md->lbase && p < md->lbase + md->llen) {
		if (s->failed)
			return;
		size_t k;
		if (!placed_at(md, p, &k) || md->placed[k]->t->raw_data.len != n) {
			s->failed = errf(s->e, "%s: internal error: new weights without their tensor; please report this model",
					 md->path);
			return;
		}
		if (!s->tried)
			ahead_start(s);
		Fill *f = filled(s, k), *o = &s->fill[f == s->fill];
		o->k = NONE;
		if (s->ahead && k + 1 < md->nplaced) {
			pthread_mutex_lock(&s->mu);
			s->jf = (int)(o - s->fill);
			s->job = k + 1;
			pthread_cond_signal(&s->cv);
			pthread_mutex_unlock(&s->mu);
		}
		f->k = NONE;
		if (f->rc) {
			*s->e = f->e;
			s->failed = -1;
			return;
		}
		p = f->buf;
		if (md->drop && (s->filled += n) >= FILL_DROP) {
			md->drop(md->done_ud);
			s->filled = 0;
		}
	}
	afile_write(s->f, p, n);
}

static void sink_append(ProtobufCBuffer *b, size_t n, const uint8_t *p)
{
	Sink *s = (Sink *)b;
	put(s, p, n);
	if (s->pg)
		progress_step(s->pg, s->what, s->f->written, s->total, "MiB");
}

/* A sink for f; sink_end frees what it made. */
static int sink_start(Sink *s, const Model *md, AFile *f, Err *e)
{
	*s = (Sink){ .base.append = sink_append, .md = md, .f = f, .pg = md->progress, .e = e, .job = NONE };
	if (!md->nplaced)
		return 0;
	for (int i = 0; i < 2; i++) {
		s->fill[i].k = NONE;
		if (!(s->fill[i].a = arena_new()) || !(s->fill[i].tmp = arena_new())) {
			for (int j = 0; j <= i; j++) {
				arena_free(s->fill[j].a);
				arena_free(s->fill[j].tmp);
			}
			return errf(e, "%s: out of memory", md->path);
		}
	}
	return 0;
}

static void sink_end(Sink *s)
{
	if (s->ahead) {
		pthread_mutex_lock(&s->mu);
		s->stop = 1;
		pthread_cond_signal(&s->cv);
		pthread_mutex_unlock(&s->mu);
		pthread_join(s->th, NULL);
		pthread_cond_destroy(&s->cv);
		pthread_mutex_destroy(&s->mu);
	}
	for (int i = 0; i < 2; i++) {
		arena_free(s->fill[i].a);
		arena_free(s->fill[i].tmp);
	}
}

/* The new weights placed, then path opened and s streaming into it. */
static int sink_open(Model *md, const char *path, int flags, AFile *f, Sink *s, Err *e)
{
	if (place_later(md, e) || afile_open(f, path, 0, e) < 0)
		return -1;
	f->nosync = !!(flags & SAVE_NO_SYNC);
	if (sink_start(s, md, f, e)) {
		afile_abort(f);
		return -1;
	}
	return 0;
}

static int same_file(const struct stat *a, const struct stat *b)
{
	return a->st_dev == b->st_dev && a->st_ino == b->st_ino;
}

/* A copy counts as the data only if every byte agrees: a stale copy would
 * silently change the model's weights. */
static int same_bytes(const char *p1, const char *p2)
{
	/* O_NONBLOCK: either may be a FIFO by now, which only a regular
	 * file check after open can refuse without blocking. */
	int ok = 0, f1 = open(p1, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY),
	    f2 = open(p2, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY);
	struct stat s1, s2;
	if (f1 >= 0 && f2 >= 0 && !fstat(f1, &s1) && !fstat(f2, &s2) && S_ISREG(s1.st_mode) && S_ISREG(s2.st_mode) &&
	    s1.st_size == s2.st_size) {
		size_t n = (size_t)s1.st_size;
		if (!n) {
			ok = 1;
		} else {
			void *a = mmap(NULL, n, PROT_READ, MAP_PRIVATE, f1, 0);
			void *b = mmap(NULL, n, PROT_READ, MAP_PRIVATE, f2, 0);
			ok = a != MAP_FAILED && b != MAP_FAILED && !memcmp(a, b, n);
			if (a != MAP_FAILED)
				munmap(a, n);
			if (b != MAP_FAILED)
				munmap(b, n);
		}
	}
	if (f1 >= 0)
		close(f1);
	if (f2 >= 0)
		close(f2);
	return ok;
}

/* Untouched external tensors keep their relative location where out's
 * folder shows the same bytes under it: the input's own folder, a hard
 * link, a byte-identical copy (compared when bytes is set; else being
 * there is enough, and the save compares). A file already copied out
 * (x->copied) is not asked about again. Else, with copy set, the file is
 * marked for the save to copy its tensors into the output's data file;
 * without, that is refused, saying what to do. How many files are marked,
 * or -1. */
static int ext_kept(Model *md, const char *out, int bytes, int copy, Err *e)
{
	const char *od = model_dir_of(md->a, out);
	struct stat si, so;
	int same = stat(md->dir, &si) == 0 && stat(od, &so) == 0 && same_file(&si, &so);
	int n = 0;
	for (size_t i = 0; i < md->ext.cap && n >= 0; i++) {
		ExtFile *x = md->ext.slot[i].kt ? md->ext.slot[i].val : NULL;
		if (!x || same || x->copied)
			continue;
		x->copy = 0;
		const char *p = arena_printf(md->a, "%s/%s", od, x->loc);
		struct stat st;
		const char *why = NULL;
		if (lstat(p, &st) < 0)
			why = "missing";
		else if (S_ISLNK(st.st_mode))
			why = "symlink";
		else if (bytes && !(st.st_dev == x->dev && st.st_ino == x->ino) && !same_bytes(x->path, p))
			why = "differs";
		if (!why)
			continue;
		if (copy)
			n += x->copy = 1;
		else if (*why == 'm')
			n = errf(e, "%s: the model keeps tensor data in '%s' beside the input, and %s does not exist; write the output into %s, or copy %s to %s first",
			         out, x->loc, p, md->dir, x->path, p);
		else if (*why == 's')
			n = errf(e, "%s: %s is a symlink, which loading the output would refuse; copy the data file there instead", out, p);
		else
			n = errf(e, "%s: %s differs from the input's external data %s; write the output into %s, or replace %s with a copy",
			         out, p, x->path, md->dir, p);
	}
	return n;
}

/* The model and graph levels are packed here, each node sized once:
 * protobuf-c sizes a submessage for its length prefix and again inside
 * its parent's pack, so a node was sized once per level above it and once
 * more for the 2 GiB check, four times, and its attributes five (a tenth
 * of a graph-heavy repair). Fields go out in field-number order, as
 * protobuf-c and every protobuf writer put them: the bytes are the same. */
typedef struct {
	Onnx__ModelProto head, tail; /* the model's fields before and after graph (7) */
	Onnx__GraphProto rest;       /* the graph's fields after node (1) */
	size_t *node;                /* each node's packed size */
	size_t graph, total;
} Plan;

static size_t varint_len(size_t v)
{
	size_t n = 1;
	for (; v >= 0x80; v >>= 7)
		n++;
	return n;
}

static void put_varint(ProtobufCBuffer *b, size_t v)
{
	uint8_t buf[10];
	b->append(b, (size_t)(put_varint_to(buf, v) - buf), buf);
}

static void plan(const Model *md, Plan *p)
{
	const Onnx__ModelProto *m = md->m;
	const Onnx__GraphProto *g = m->graph;
	p->head = p->tail = *m;
	p->head.graph = NULL;
	p->head.n_opset_import = p->head.n_metadata_props = p->head.n_training_info = p->head.n_functions = 0;
	p->head.base.n_unknown_fields = 0; /* packed after every known field: the tail's */
	p->tail.has_ir_version = p->tail.has_model_version = 0;
	p->tail.producer_name = p->tail.producer_version = p->tail.domain = p->tail.doc_string = NULL;
	p->tail.graph = NULL;
	p->total = protobuf_c_message_get_packed_size(&p->head.base) + protobuf_c_message_get_packed_size(&p->tail.base);
	if (!g)
		return;
	p->rest = *g;
	p->rest.n_node = 0;
	p->node = arena_alloc(md->a, (g->n_node + 1) * sizeof *p->node);
	p->graph = protobuf_c_message_get_packed_size(&p->rest.base);
	for (size_t i = 0; i < g->n_node; i++) {
		p->node[i] = protobuf_c_message_get_packed_size(&g->node[i]->base);
		p->graph += 1 + varint_len(p->node[i]) + p->node[i];
	}
	p->total += 1 + varint_len(p->graph) + p->graph;
}

static int has_body(const Onnx__NodeProto *n)
{
	for (size_t j = 0; j < n->n_attribute; j++)
		if (n->attribute[j]->g || n->attribute[j]->n_graphs)
			return 1;
	return 0;
}

static void pack(const Model *md, const Plan *p, ProtobufCBuffer *b)
{
	const Onnx__GraphProto *g = md->m->graph;
	protobuf_c_message_pack_to_buffer(&p->head.base, b);
	if (g) {
		static const uint8_t graph_tag = 7 << 3 | 2, node_tag = 1 << 3 | 2;
		b->append(b, 1, &graph_tag);
		put_varint(b, p->graph);
		/* A node packed in memory, then appended whole: pack_to_buffer
		 * appends each field, name and tag on its own, and a graph of
		 * small nodes is mostly those calls. Bodies (If, Loop) go field
		 * by field: only the sink knows tensors it fills when written. */
		uint8_t buf[4096];
		for (size_t i = 0; i < g->n_node; i++) {
			const Onnx__NodeProto *n = g->node[i];
			size_t k = 1, sz = p->node[i];
			buf[0] = node_tag;
			for (size_t v = sz; v >= 0x80; v >>= 7)
				buf[k++] = (uint8_t)(v | 0x80);
			buf[k] = (uint8_t)(sz >> 7 * (k - 1));
			k++;
			if (sz <= sizeof buf - k && !has_body(n)) {
				protobuf_c_message_pack(&n->base, buf + k);
				b->append(b, k + sz, buf);
				continue;
			}
			b->append(b, k, buf);
			protobuf_c_message_pack_to_buffer(&n->base, b);
		}
		protobuf_c_message_pack_to_buffer(&p->rest.base, b);
	}
	protobuf_c_message_pack_to_buffer(&p->tail.base, b);
}

static int save_planned(Model *md, const Plan *p, const char *out, int flags, Err *e);
/* The caller has settled which external data files the output keeps
 * referencing (ext_kept, bytes compared): the save asks no more. */
enum { SAVE_EXT_KEPT = 1 << 8 };

/* What out may not be: a terminal, the input (unless in place), one of
 * its external data files. */
static int clashes(const Model *md, const char *out, int flags, Err *e)
{
	if (!strcmp(out, "-"))
		return isatty(STDOUT_FILENO) ? errf(e, "-: standard output is a terminal; redirect it to a file or a pipe") : 0;
	struct stat so, si;
	if (stat(out, &so) < 0)
		return 0;
	if (stat(md->path, &si) == 0 && same_file(&so, &si) && !(flags & SAVE_IN_PLACE))
		return errf(e, "%s: is the input model; pass --in-place to replace it, or choose another -o", out);
	for (size_t i = 0; i < md->ext.cap; i++) {
		const ExtFile *x = md->ext.slot[i].kt ? md->ext.slot[i].val : NULL;
		if (x && so.st_dev == x->dev && so.st_ino == x->ino)
			return errf(e, "%s: is the model's external data file '%s'; choose another -o", out, x->loc);
	}
	return 0;
}

/* save_planned, whose failure gives way to a failed check's: the check
 * would have stopped the run first had it not run alongside. */
static int save_gated(Model *md, const Plan *p, const char *out, int flags, Err *e)
{
	Err ce;
	int rc = save_planned(md, p, out, flags, e);
	if (rc && verified(md, &ce))
		*e = ce;
	return rc;
}

int model_save(Model *md, const char *out, int flags, Err *e)
{
	Plan p;
	plan(md, &p);
	return save_gated(md, &p, out, flags, e);
}

static int save_planned(Model *md, const Plan *p, const char *out, int flags, Err *e)
{
	size_t n = p->total;
	if (n > INT32_MAX)
		return errf(e, "%s: the model packs to %zu bytes, which exceeds the 2 GiB protobuf limit; use --external-data FILE",
		            out, n);
	if (clashes(md, out, flags, e) || (strcmp(out, "-") && md->ext.len && !(flags & SAVE_EXT_KEPT) && ext_kept(md, out, 1, 0, e) < 0))
		return -1;
	/* A pipe keeps what it is given: the verdict first. */
	if (!strcmp(out, "-") && verified(md, e))
		return -1;
	AFile f;
	Sink s;
	if (sink_open(md, out, flags, &f, &s, e))
		return -1;
	s.what = arena_printf(md->a, "writing %s", out);
	s.total = n;
	afile_reserve(&f, n);
	pack(md, p, &s.base);
	sink_end(&s);
	if (s.failed) {
		afile_abort(&f);
		return -1;
	}
	if (!f.err && f.written != n) {
		afile_abort(&f);
		return errf(e, "%s: packed %llu bytes, expected %zu; nothing written", out, f.written, n);
	}
	if (verified(md, e)) {
		afile_abort(&f);
		return -1;
	}
	return afile_commit(&f, e);
}

/* --- external data output ------------------------------------------------- */

enum { EXT_ALIGN = 4096, EXT_MIN = 1024 };

/* Where the next tensor of the data file starts, written bytes in. */
static unsigned long long ext_aligned(unsigned long long written)
{
	return (written + EXT_ALIGN - 1) / EXT_ALIGN * EXT_ALIGN;
}

static const char *base_name(const char *p)
{
	const char *s = strrchr(p, '/');
	return s ? s + 1 : p;
}

static int moves_out(const Onnx__TensorProto *t)
{
	return !is_external(t) && t->has_raw_data && t->raw_data.len >= EXT_MIN;
}

static void set_entry(Arena *a, Onnx__StringStringEntryProto **slot, const char *k, const char *v)
{
	Onnx__StringStringEntryProto *kv = arena_alloc(a, sizeof *kv);
	onnx__string_string_entry_proto__init(kv);
	kv->key = arena_strdup(a, k);
	kv->value = arena_strdup(a, v);
	*slot = kv;
}

/* Two runs writing the same OUT with a data file (--external-data, or
 * automatic past 2 GiB) each rename their data file, then their model,
 * into place; interleaved, one run's model could end up over the other's
 * data. An exclusive flock on the data file's folder, held from the data
 * file's write to the model's, keeps each pair whole: the pair that lands
 * last is one run's. Taken here, where the save knows it writes a data
 * file (deciding that before the save sized the whole model once more).
 * Returns the descriptor holding the lock, -1 when none is held. Advisory
 * only: where the folder cannot be opened (the save will say why) or the
 * file system has no flock, the save goes ahead unlocked. */
static int lock_folder_of(Arena *a, const char *path)
{
	int fd = open(model_dir_of(a, path), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	while (fd >= 0 && flock(fd, LOCK_EX) < 0 && errno == EINTR)
		;
	return fd;
}

static int save_with_data(Model *md, const char *out, const char *data, const char *path, int flags, Err *e);

/* The data file --external-data names: relative to out's folder, as ONNX
 * stores it. NULL with e set. */
static const char *data_path(Model *md, const char *out, const char *data, Err *e)
{
	if (!strcmp(out, "-")) {
		errf(e, "--external-data: the data file is located relative to the model's folder, which standard output has none of; write to a file");
		return NULL;
	}
	int up = 0;
	for (const char *c = data; *c;) {
		size_t n = strcspn(c, "/");
		up |= n == 2 && c[0] == '.' && c[1] == '.';
		c += n;
		c += *c != 0;
	}
	if (!*data || data[0] == '/' || up || data[strlen(data) - 1] == '/') {
		errf(e, "--external-data %s: give a file name relative to the output's folder (no '..', not absolute), as ONNX stores it", data);
		return NULL;
	}
	return arena_printf(md->a, "%s/%s", model_dir_of(md->a, out), data);
}

/* What the data file may not be: one of the input's data files, or a
 * copy of one beside the output, which the output still references, or
 * the input. */
static int data_clashes(Model *md, const char *out, const char *path, Err *e)
{
	struct stat st, si;
	if (stat(path, &st) < 0)
		return 0;
	const char *od = model_dir_of(md->a, out);
	int rc = 0;
	for (size_t i = 0; i < md->ext.cap && !rc; i++) {
		const ExtFile *x = md->ext.slot[i].kt ? md->ext.slot[i].val : NULL;
		if (!x || x->copy)
			continue;
		struct stat sk;
		if ((st.st_dev == x->dev && st.st_ino == x->ino) ||
		    (stat(arena_printf(md->a, "%s/%s", od, x->loc), &sk) == 0 && same_file(&st, &sk)))
			rc = errf(e, "%s: is the input's external data '%s', which the output still references; choose another --external-data name", path, x->loc);
	}
	if (!rc && stat(md->path, &si) == 0 && same_file(&st, &si))
		rc = errf(e, "%s: is the input model; choose another --external-data name", path);
	return rc;
}

/* OUT.data beside out (OUT being out's file name). */
static const char *default_data(Model *md, const char *out)
{
	return arena_printf(md->a, "%s.data", base_name(out));
}

int model_save_check(Model *md, const char *out, const char *data, int flags, Err *e)
{
	const char *path = data ? data_path(md, out, data, e) : NULL;
	if ((data && !path) || clashes(md, out, flags, e))
		return -1;
	if (!strcmp(out, "-"))
		return 0;
	/* Whether the data files beside the input are there, not yet
	 * their bytes: the save compares those. */
	int copies = md->ext.len ? ext_kept(md, out, 0, 1, e) : 0;
	if (copies < 0 || afile_check(out, e) < 0)
		return -1;
	if (copies && !path && !(path = data_path(md, out, default_data(md, out), e)))
		return -1;
	return path && (data_clashes(md, out, path, e) || afile_check(path, e) < 0) ? -1 : 0;
}

int model_save_as(Model *md, const char *out, const char *data, int flags, Err *e)
{
	/* The data files out's folder lacks are copied into out's own. */
	int copies = strcmp(out, "-") && md->ext.len ? ext_kept(md, out, 1, 1, e) : 0;
	if (copies < 0)
		return -1;
	flags |= SAVE_EXT_KEPT;
	if (!data && !copies) {
		Plan p;
		plan(md, &p);
		if (p.total <= INT32_MAX)
			return save_gated(md, &p, out, flags, e);
		if (!strcmp(out, "-"))
			return errf(e, "-: the model packs past the 2 GiB protobuf limit, so its weights need an external data file, which standard output cannot have; write to a file");
	}
	if (!data)
		data = default_data(md, out);
	/* The move to the data file changes the tensors the check reads. */
	if (verified(md, e))
		return -1;
	const char *path = data_path(md, out, data, e);
	if (!path)
		return -1;
	int lk = lock_folder_of(md->a, path);
	int rc = save_with_data(md, out, data, path, flags, e);
	if (lk >= 0)
		close(lk);
	return rc;
}

/* Copying the tensors of the data files out's folder lacks into the
 * output's data file: a walk sizes the copies first (to reserve the
 * file's size), then copies. */
typedef struct {
	AFile *f;
	const char *data;
	unsigned long long end; /* the sizing walk: the data file's end so far */
	size_t n, total;        /* tensors copied, to copy */
	const ExtFile *open;
	int fd;
} Copy;

/* The tensor's entries: its bytes at off in data. */
static void set_location(Model *md, Onnx__TensorProto *t, const char *data, unsigned long long off, size_t len)
{
	Onnx__StringStringEntryProto **kv = arena_alloc(md->a, 3 * sizeof *kv);
	set_entry(md->a, &kv[0], "location", data);
	set_entry(md->a, &kv[1], "offset", arena_printf(md->a, "%llu", off));
	set_entry(md->a, &kv[2], "length", arena_printf(md->a, "%zu", len));
	t->external_data = kv;
	t->n_external_data = 3;
	t->has_data_location = 1;
	t->data_location = ONNX__TENSOR_PROTO__DATA_LOCATION__EXTERNAL;
}

static int copy_visit(Model *md, Onnx__TensorProto *t, void *ud, Err *e)
{
	static const unsigned char zero[EXT_ALIGN];
	Copy *c = ud;
	const char *loc = is_external(t) ? model_ext_get(t, "location") : NULL;
	const ExtFile *x = loc ? map_get(&md->ext, loc) : NULL;
	if (!x || !x->copy)
		return 0;
	int64_t off, len;
	if (ext_range(md, t, x, &off, &len, e) < 0)
		return -1;
	if (!c->f) {
		c->end = ext_aligned(c->end) + (unsigned long long)len;
		c->total++;
		return 0;
	}
	if (c->open != x) {
		if (c->fd >= 0)
			close(c->fd);
		struct stat st;
		c->open = x;
		c->fd = open(x->path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY);
		if (c->fd < 0 || fstat(c->fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_dev != x->dev ||
		    st.st_ino != x->ino || st.st_size != x->size)
			return errf(e, "%s: external data '%s' changed since the model was loaded; nothing written", md->path, x->loc);
	}
	unsigned long long at = ext_aligned(c->f->written);
	afile_write(c->f, zero, (size_t)(at - c->f->written));
	if (afile_copy(c->f, c->fd, (off_t)off, (size_t)len) < 0)
		return errf(e, "%s: external data '%s' changed since the model was loaded; nothing written", md->path, x->loc);
	md->copied += (unsigned long long)len;
	if (md->progress)
		progress_step(md->progress, "copying external data, tensor", ++c->n, c->total, NULL);
	set_location(md, t, c->data, at, (size_t)len);
	return 0;
}

static int save_with_data(Model *md, const char *out, const char *data, const char *path, int flags, Err *e)
{
	Onnx__GraphProto *g = md->m->graph;
	struct stat st;
	int existed = stat(path, &st) == 0;
	if (data_clashes(md, out, path, e))
		return -1;
	AFile f;
	Sink s;
	if (sink_open(md, path, flags, &f, &s, e))
		return -1;
	static const unsigned char zero[EXT_ALIGN];
	size_t nmoved = 0;
	Copy c = { .data = data, .fd = -1 };
	int rc = walk_model(md, copy_visit, &c, e);
	unsigned long long end = c.end;
	for (size_t i = 0; i < g->n_initializer; i++)
		if (moves_out(g->initializer[i]))
			end = ext_aligned(end) + g->initializer[i]->raw_data.len;
	afile_reserve(&f, end);
	/* The copies first: the tensors moved next name the data file too. */
	c.f = &f;
	if (!rc && c.total)
		rc = walk_model(md, copy_visit, &c, e);
	if (c.fd >= 0)
		close(c.fd);
	for (size_t i = 0; !rc && i < md->ext.cap; i++) {
		ExtFile *x = md->ext.slot[i].kt ? md->ext.slot[i].val : NULL;
		if (x && x->copy)
			x->copied = 1;
	}
	md->ncopied = c.n;
	md->copied_to = c.n ? path : NULL;
	for (size_t i = 0; !rc && i < g->n_initializer; i++) {
		Onnx__TensorProto *t = g->initializer[i];
		if (!moves_out(t))
			continue;
		unsigned long long off = ext_aligned(f.written);
		afile_write(&f, zero, (size_t)(off - f.written));
		put(&s, t->raw_data.data, t->raw_data.len);
		if (s.failed)
			break;
		if (md->progress)
			progress_step(md->progress, "writing external data, tensor", nmoved + 1, g->n_initializer, NULL);
		set_location(md, t, data, off, t->raw_data.len);
		t->has_raw_data = 0;
		t->raw_data.len = 0;
		t->raw_data.data = NULL;
		nmoved++;
	}
	sink_end(&s);
	if (rc || s.failed) {
		afile_abort(&f);
		return -1;
	}
	if (afile_commit(&f, e) < 0)
		return -1;
	if (model_save(md, out, flags, e) < 0) {
		if (!existed)
			unlink(path);
		return -1;
	}
	return 0;
}
