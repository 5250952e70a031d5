/* A donor .onnx model: its initializers, and the tensors of its Constant
 * nodes under their output names (exporters fold weights either way), in
 * the main graph and in subgraphs (If/Loop bodies of scripted exports).
 * A tensor the exporter left unnamed as a parameter ("onnx::Mul_3540", a
 * Constant's "/m/Constant_output_0") is also found under the module of
 * each node reading it (see alias). */
#include <stdio.h>
#include <string.h>

#include "model.h"
#include "onnx.pb-c.h"
#include "wsrc.h"

/* One read of a donor: its folder, and its external data files mapped
 * (location -> Ext), each once. */
typedef struct {
	WSrc *w;
	const char *dir;
	Map files;
} Rd;

typedef struct {
	const unsigned char *base;
	size_t len;
} Ext;

/* An external tensor's bytes, in its file's mapping. Locations and ranges
 * are held to the rules of the model's own (model_ext_path, model_ext_range). */
static const void *external(Rd *r, const Onnx__TensorProto *tp, const char *name, Err *e)
{
	const char *loc = model_ext_get(tp, "location");
	if (!loc) {
		errf(e, "tensor '%s': data_location is EXTERNAL but there is no 'location' key", name);
		return NULL;
	}
	Ext *x = map_get(&r->files, loc);
	if (!x) {
		struct stat st;
		const char *path = model_ext_path(r->w->a, r->dir, loc, &st, e);
		const void *base;
		size_t len;
		if (!path || wsrc_mmap(r->w, path, &base, &len, e)) {
			errwrap(e, "tensor '%s'", name);
			return NULL;
		}
		x = arena_alloc(r->w->a, sizeof *x);
		x->base = base;
		x->len = len;
		map_put(&r->files, arena_strdup(r->w->a, loc), x);
	}
	int64_t off, len;
	if (model_ext_range(tp, loc, (long long)x->len, &off, &len, e) < 0) {
		errwrap(e, "tensor '%s'", name);
		return NULL;
	}
	return x->base + off;
}

/* Typed fields hold one element per entry (int32_data also carries the
 * 8- and 16-bit types and float16/bfloat16 bit patterns). */
static int typed(WSrc *w, const Onnx__TensorProto *tp, WTensor *t, int64_t n, Err *e)
{
	size_t es = wt_dtype_size(t->dtype), have;
	int comp = t->dtype == 14 || t->dtype == 15;
	switch (t->dtype) {
	case 1: case 14: have = tp->n_float_data; break;
	case 11: case 15: have = tp->n_double_data; break;
	case 7: have = tp->n_int64_data; break;
	case 12: case 13: have = tp->n_uint64_data; break;
	default: have = tp->n_int32_data; break;
	}
	if ((uint64_t)have != (uint64_t)n * (comp ? 2 : 1))
		return errf(e, "tensor '%s': %zu values in its typed field, shape needs %lld",
			t->name, have, (long long)n * (comp ? 2 : 1));
	unsigned char *o = arena_try(w->a, (size_t)n * es + 1, e);
	if (!o)
		return errwrap(e, "tensor '%s'", t->name);
	for (int64_t i = 0; i < n; i++) {
		unsigned char *d = o + (size_t)i * es;
		switch (t->dtype) {
		case 1: case 11: case 7: case 14: case 15:
			memcpy(d, t->dtype == 7 ? (const void *)(tp->int64_data + i)
				: t->dtype == 11 || t->dtype == 15 ? (const void *)(tp->double_data + i * (comp ? 2 : 1))
				: (const void *)(tp->float_data + i * (comp ? 2 : 1)), es);
			break;
		case 12: { uint32_t v = (uint32_t)tp->uint64_data[i]; memcpy(d, &v, 4); break; }
		case 13: memcpy(d, &tp->uint64_data[i], 8); break;
		case 6: memcpy(d, &tp->int32_data[i], 4); break;
		case 4: case 5: case 10: case 16: { uint16_t v = (uint16_t)tp->int32_data[i]; memcpy(d, &v, 2); break; }
		default: *d = (unsigned char)tp->int32_data[i]; break;
		}
	}
	t->data = o;
	return 0;
}

static int tensor(Rd *r, const Onnx__TensorProto *tp, const char *name, Err *e)
{
	WSrc *w = r->w;
	int64_t dims[WT_MAXDIM];
	WTensor t = { .name = name, .dims = dims };
	if (!name || !*name)
		return 0; /* unnamed initializers cannot be asked for */
	if (tp->segment)
		return errf(e, "tensor '%s' is segmented; segmented tensors are not supported", name);
	t.dtype = tp->data_type;
	if (!wt_dtype_size(t.dtype))
		return errf(e, "tensor '%s' has data type %d (%s), which holds no fixed-size numbers",
			name, t.dtype, wt_dtype_name(t.dtype));
	if (tp->n_dims > WT_MAXDIM)
		return errf(e, "tensor '%s' has %zu dimensions; at most %d are supported", name, tp->n_dims, WT_MAXDIM);
	t.ndim = (int)tp->n_dims;
	if (tp->n_dims)
		memcpy(t.dims, tp->dims, tp->n_dims * sizeof *tp->dims);
	int64_t nb = wt_nbytes(&t);
	if (nb < 0)
		return errf(e, "tensor '%s': shape overflows or has a negative dimension", name);
	if (tp->data_location == ONNX__TENSOR_PROTO__DATA_LOCATION__EXTERNAL) {
		if (!(t.data = external(r, tp, name, e)))
			return -1;
	} else if (tp->has_raw_data) {
		if ((uint64_t)tp->raw_data.len != (uint64_t)nb)
			return errf(e, "tensor '%s': raw_data holds %zu bytes, %s of this shape needs %lld",
				name, tp->raw_data.len, wt_dtype_name(t.dtype), (long long)nb);
		t.data = tp->raw_data.data ? tp->raw_data.data : (const void *)"";
	} else if (typed(w, tp, &t, wt_numel(&t), e))
		return -1;
	t.nbytes = (size_t)nb;
	return wsrc_add(w, &t, e);
}

static int graph(Rd *r, const Onnx__GraphProto *g, int depth, Err *e);

static int node(Rd *r, const Onnx__NodeProto *n, int depth, Err *e)
{
	WSrc *w = r->w;
	for (size_t i = 0; i < n->n_attribute; i++) {
		const Onnx__AttributeProto *at = n->attribute[i];
		if (at->g && graph(r, at->g, depth + 1, e))
			return -1;
		for (size_t k = 0; k < at->n_graphs; k++)
			if (graph(r, at->graphs[k], depth + 1, e))
				return -1;
	}
	if (!n->op_type || strcmp(n->op_type, "Constant") || !model_default_domain(n->domain) ||
		n->n_output < 1)
		return 0;
	for (size_t i = 0; i < n->n_attribute; i++) {
		const Onnx__AttributeProto *at = n->attribute[i];
		const char *out = n->output[0];
		int64_t dims[1];
		WTensor t = { .name = out, .dims = dims };
		if (!at->name || !out || !*out)
			continue; /* proto2 leaves absent strings NULL */
		if (!strcmp(at->name, "value") && at->t)
			return tensor(r, at->t, out, e);
		if (!strcmp(at->name, "value_float")) {
			t.dtype = 1;
			t.data = arena_dup(w->a, &at->f, 4);
			t.nbytes = 4;
		} else if (!strcmp(at->name, "value_floats")) {
			t.dtype = 1, t.ndim = 1, t.dims[0] = (int64_t)at->n_floats;
			t.data = arena_dup(w->a, at->floats, at->n_floats * 4);
			t.nbytes = at->n_floats * 4;
		} else if (!strcmp(at->name, "value_int")) {
			t.dtype = 7;
			t.data = arena_dup(w->a, &at->i, 8);
			t.nbytes = 8;
		} else if (!strcmp(at->name, "value_ints")) {
			t.dtype = 7, t.ndim = 1, t.dims[0] = (int64_t)at->n_ints;
			t.data = arena_dup(w->a, at->ints, at->n_ints * 8);
			t.nbytes = at->n_ints * 8;
		} else
			continue; /* string or sparse constants are never weights */
		return wsrc_add(w, &t, e);
	}
	return 0;
}

/* Where a node reads a tensor whose name is no checkpoint key, the key
 * it gets as well: its module's path, as torch's keys spell it, then the
 * node's own name and the input: '/model.11/fx/proj.1/proj.1.1/Mul' reading
 * 'onnx::Mul_3540' as input 1 gives 'model.11.fx.proj.1.1.Mul:1'. The
 * scope's components are its modules; one that repeats the one before as
 * its prefix ("proj.1", then "proj.1.1": a Sequential's child) adds what
 * follows. So an expert's unnamed tensors lie under the expert's prefix,
 * each expert's under the same relative key, as named parameters do, and
 * the mapping finds and verifies them by value like any key. */
static int alias(WSrc *w, const Onnx__NodeProto *n, Err *e)
{
	const char *nm = n->name;
	if (!nm || nm[0] != '/')
		return 0;
	const char *last = strrchr(nm, '/');
	char mod[512];
	size_t at = 0, plen = 0;
	const char *pc = NULL; /* the component before, whole */
	for (const char *c = nm + 1; c < last;) {
		const char *end = memchr(c, '/', (size_t)(last - c));
		if (!end)
			end = last;
		size_t len = (size_t)(end - c);
		const char *add = c;
		if (pc && len > plen + 1 && !memcmp(c, pc, plen) && c[plen] == '.')
			add = c + plen + 1;
		size_t alen = (size_t)(end - add);
		if (at + alen + 2 >= sizeof mod)
			return 0; /* no module path that long is a checkpoint key */
		if (at)
			mod[at++] = '.';
		memcpy(mod + at, add, alen);
		at += alen;
		pc = c;
		plen = len;
		c = end + 1;
	}
	if (!at)
		return 0;
	mod[at] = 0;
	for (size_t j = 0; j < n->n_input; j++) {
		const char *in = n->input[j];
		const WTensor *t = in && *in && (strstr(in, "::") || in[0] == '/') ? wsrc_get(w, in) : NULL;
		if (!t)
			continue;
		char key[600];
		if ((size_t)snprintf(key, sizeof key, "%s.%s:%zu", mod, last + 1, j) >= sizeof key || wsrc_get(w, key))
			continue;
		WTensor a = *t;
		a.name = arena_strdup(w->a, key);
		if (wsrc_add(w, &a, e))
			return -1;
	}
	return 0;
}

static int graph(Rd *r, const Onnx__GraphProto *g, int depth, Err *e)
{
	WSrc *w = r->w;
	if (depth > 64)
		return errf(e, "subgraphs nested deeper than 64 levels");
	for (size_t i = 0; i < g->n_initializer; i++)
		if (tensor(r, g->initializer[i], g->initializer[i]->name, e))
			return -1;
	for (size_t i = 0; i < g->n_node; i++)
		if (node(r, g->node[i], depth, e))
			return -1;
	/* The tracer exports equal parameters once, the others as Identity
	 * nodes of it ("onnx::Mul_386" = Identity("onnx::Mul_374")): those
	 * outputs are the same tensor (nodes come sorted, so chains too). */
	for (size_t i = 0; i < g->n_node; i++) {
		const Onnx__NodeProto *n = g->node[i];
		const WTensor *t;
		if (n->op_type && !strcmp(n->op_type, "Identity") && model_default_domain(n->domain) && n->n_input == 1 &&
		    n->n_output == 1 && n->output[0] && *n->output[0] && !wsrc_get(w, n->output[0]) &&
		    (t = wsrc_get(w, n->input[0]))) {
			WTensor a = *t;
			a.name = n->output[0];
			if (wsrc_add(w, &a, e))
				return -1;
		}
	}
	for (size_t i = 0; i < g->n_node; i++)
		if (alias(w, g->node[i], e))
			return -1;
	return 0;
}

int wsrc_read_onnx(WSrc *w, Err *e)
{
	const void *base;
	size_t len;
	if (wsrc_mmap(w, w->path, &base, &len, e))
		return -1;
	if (model_wire_check(base, len, e))
		return -1;
	ProtobufCAllocator pa = arena_pb(w->a);
	Onnx__ModelProto *m = onnx__model_proto__unpack(&pa, len, base);
	if (!m && arena_check(w->a, e))
		return -1;
	if (!m)
		return errf(e, "not a valid ONNX model (protobuf decoding failed); file truncated or not .onnx?");
	if (!m->graph)
		return errf(e, "ONNX model has no graph");
	/* Tensors now live in the arena, or in their external data files'
	 * mappings, located from the donor's folder. */
	Rd r = { .w = w, .dir = model_dir_of(w->a, w->path) };
	map_init(&r.files, w->a, 4);
	return graph(&r, m->graph, 0, e);
}
