/* NumPy .npy arrays, alone in a directory (one file per key) or as the
 * members of an .npz zip (stored or deflated). Stored members and .npy files
 * are used in place; deflated members are inflated into the arena. */
#include <dirent.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "wsrc.h"
#include "zip.h"

static const struct {
	const char *descr;
	int dtype;
} DESCRS[] = {
	{ "<f4", 1 }, { "<f2", 10 }, { "<f8", 11 },
	{ "<i8", 7 }, { "<i4", 6 }, { "<i2", 5 }, { "|i1", 3 }, { "<i1", 3 },
	{ "<u8", 13 }, { "<u4", 12 }, { "<u2", 4 }, { "|u1", 2 }, { "<u1", 2 },
	{ "|b1", 9 }, { "<b1", 9 }, { "<c8", 14 }, { "<c16", 15 },
};

typedef struct {
	const char *p, *end;
} Lit;

static void sp(Lit *l)
{
	while (l->p < l->end && (*l->p == ' ' || *l->p == '\n' || *l->p == '\t'))
		l->p++;
}

static int eat(Lit *l, char c)
{
	sp(l);
	if (l->p < l->end && *l->p == c) {
		l->p++;
		return 1;
	}
	return 0;
}

/* A quoted Python string without escapes (what numpy writes); copied into buf. */
static int pystr(Lit *l, char *buf, size_t cap)
{
	sp(l);
	if (l->p >= l->end || (*l->p != '\'' && *l->p != '"'))
		return -1;
	char q = *l->p++;
	size_t n = 0;
	while (l->p < l->end && *l->p != q) {
		if (*l->p == '\\' || n + 1 >= cap)
			return -1;
		buf[n++] = *l->p++;
	}
	if (l->p >= l->end)
		return -1;
	l->p++;
	buf[n] = 0;
	return 0;
}

static int word(Lit *l, const char *w)
{
	sp(l);
	size_t n = strlen(w);
	if ((size_t)(l->end - l->p) >= n && !memcmp(l->p, w, n)) {
		l->p += n;
		return 1;
	}
	return 0;
}

/* Parses an .npy image of len bytes into t (name already set). */
static int npy(const unsigned char *p, size_t len, WTensor *t, Err *e)
{
	if (len < 10 || memcmp(p, "\x93NUMPY", 6))
		return errf(e, "not an .npy array (bad magic)");
	int major = p[6];
	size_t hl, start;
	if (major == 1)
		hl = (size_t)(p[8] | p[9] << 8), start = 10;
	else if (major == 2 || major == 3) {
		if (len < 12)
			return errf(e, "truncated .npy header");
		hl = (size_t)p[8] | (size_t)p[9] << 8 | (size_t)p[10] << 16 | (size_t)p[11] << 24;
		start = 12;
	} else
		return errf(e, ".npy format version %d.%d is not supported (1.0 to 3.0 are)", major, p[7]);
	if (hl > len - start)
		return errf(e, ".npy header length %zu runs past the end (%zu bytes); truncated?", hl, len);
	Lit l = { (const char *)p + start, (const char *)p + start + hl };
	char key[32], descr[32] = "";
	int have_d = 0, have_f = 0, have_s = 0, fortran = 0;
	if (!eat(&l, '{'))
		return errf(e, ".npy header is not a dict");
	while (!eat(&l, '}')) {
		if (pystr(&l, key, sizeof key) || !eat(&l, ':'))
			return errf(e, ".npy header: malformed dict");
		if (!strcmp(key, "descr")) {
			if (pystr(&l, descr, sizeof descr))
				return errf(e, ".npy header: descr is not a simple dtype string; structured arrays are not supported");
			have_d = 1;
		} else if (!strcmp(key, "fortran_order")) {
			if (word(&l, "True"))
				fortran = 1;
			else if (!word(&l, "False"))
				return errf(e, ".npy header: fortran_order is not True or False");
			have_f = 1;
		} else if (!strcmp(key, "shape")) {
			if (!eat(&l, '('))
				return errf(e, ".npy header: shape is not a tuple");
			t->ndim = 0;
			while (!eat(&l, ')')) {
				sp(&l);
				int64_t d = 0;
				int nd = 0;
				while (l.p < l.end && *l.p >= '0' && *l.p <= '9') {
					if (d > (INT64_MAX - 9) / 10)
						return errf(e, ".npy header: dimension too large");
					d = d * 10 + (*l.p++ - '0');
					nd++;
				}
				/* numpy may write 3L on Python 2 pickles of old. */
				if (l.p < l.end && *l.p == 'L')
					l.p++;
				if (!nd)
					return errf(e, ".npy header: shape is not a tuple of integers");
				if (t->ndim == WT_MAXDIM)
					return errf(e, ".npy header: more than %d dimensions", WT_MAXDIM);
				t->dims[t->ndim++] = d;
				if (!eat(&l, ',')) {
					if (!eat(&l, ')'))
						return errf(e, ".npy header: shape is not a tuple of integers");
					break;
				}
			}
			have_s = 1;
		} else
			return errf(e, ".npy header: unknown key '%s'", key);
		if (!eat(&l, ',')) {
			if (!eat(&l, '}'))
				return errf(e, ".npy header: malformed dict");
			break;
		}
	}
	if (!have_d || !have_f || !have_s)
		return errf(e, ".npy header lacks '%s'", !have_d ? "descr" : !have_f ? "fortran_order" : "shape");
	if (descr[0] == '>')
		return errf(e, "big-endian dtype '%s' is not supported; save with a.astype(a.dtype.newbyteorder('<'))", descr);
	for (size_t i = 0; i < sizeof DESCRS / sizeof *DESCRS; i++)
		if (!strcmp(descr, DESCRS[i].descr))
			t->dtype = DESCRS[i].dtype;
	if (!t->dtype)
		return errf(e, "unsupported dtype '%s'", descr);
	if (fortran && t->ndim > 1)
		return errf(e, "fortran_order arrays are not supported; save np.ascontiguousarray(a) instead");
	int64_t nb = wt_nbytes(t);
	if (nb < 0)
		return errf(e, "shape overflows");
	size_t have = len - start - hl;
	if ((uint64_t)nb != have)
		return errf(e, "%s array of %lld elements needs %lld bytes, the file holds %zu; %s",
			descr, (long long)wt_numel(t), (long long)nb, have,
			(uint64_t)nb > have ? "truncated?" : "trailing bytes");
	t->data = p + start + hl;
	t->nbytes = (size_t)nb;
	return 0;
}

int wsrc_read_npz(WSrc *w, Err *e)
{
	const void *base;
	size_t len;
	if (wsrc_mmap(w, w->path, &base, &len, e))
		return -1;
	Zip z;
	if (zip_open(&z, base, len, w->a, e))
		return -1;
	for (size_t i = 0; i < z.n; i++) {
		const ZipMember *m = &z.m[i];
		size_t nl = strlen(m->name);
		if (nl < 4 || strcmp(m->name + nl - 4, ".npy"))
			continue; /* np.savez writes only .npy; tolerate stray members */
		const void *d;
		if (zip_read(&z, m, &d, e))
			return -1;
		int64_t dims[WT_MAXDIM];
		WTensor t = { .name = arena_printf(w->a, "%.*s", (int)(nl - 4), m->name), .dims = dims };
		if (npy(d, (size_t)m->usize, &t, e))
			return errwrap(e, "member '%s'", m->name);
		if (wsrc_add(w, &t, e))
			return -1;
	}
	if (!w->n)
		return errf(e, "no .npy members; is this an np.savez archive?");
	return 0;
}

static int cmpname(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

int wsrc_read_npydir(WSrc *w, Err *e)
{
	DIR *d = opendir(w->path);
	if (!d)
		return errf(e, "%s", strerror(errno));
	/* Sorted, so the index (and any message) does not depend on readdir order. */
	char **names = NULL;
	size_t n = 0, cap = 0;
	for (struct dirent *de; (de = readdir(d));) {
		size_t nl = strlen(de->d_name);
		if (nl <= 4 || strcmp(de->d_name + nl - 4, ".npy"))
			continue;
		if (n == cap) {
			size_t nc = cap ? 2 * cap : 64;
			names = arena_grow(w->a, names, cap * sizeof *names, nc * sizeof *names);
			cap = nc;
		}
		names[n++] = arena_strdup(w->a, de->d_name);
	}
	closedir(d);
	if (!n)
		return errf(e, "directory holds no .npy files; expected one KEY.npy per tensor");
	qsort(names, n, sizeof *names, cmpname);
	for (size_t i = 0; i < n; i++) {
		const char *path = arena_printf(w->a, "%s/%s", w->path, names[i]);
		const void *base;
		size_t len;
		if (wsrc_mmap(w, path, &base, &len, e))
			return -1;
		int64_t dims[WT_MAXDIM];
		WTensor t = { .name = arena_printf(w->a, "%.*s", (int)(strlen(names[i]) - 4), names[i]), .dims = dims };
		if (npy(base, len, &t, e))
			return errwrap(e, "%s", names[i]);
		if (wsrc_add(w, &t, e))
			return -1;
	}
	return 0;
}
