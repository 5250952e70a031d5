/* Helpers shared by the unit tests: a scratch folder, files written from
 * bytes, and assertions on error messages. Header-only so each test program
 * stays one source file in Makefile.am. */
#ifndef TESTUTIL_H
#define TESTUTIL_H
#include <check.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char tu_dir[256];

static inline int tu_rm(const char *p, const struct stat *sb, int flag, struct FTW *ftw)
{
	(void)sb; (void)flag; (void)ftw;
	return remove(p);
}

static inline void tu_setup(void)
{
	const char *t = getenv("TMPDIR");
	snprintf(tu_dir, sizeof tu_dir, "%s/moe-unit-XXXXXX", t && *t ? t : "/tmp");
	ck_assert_ptr_nonnull(mkdtemp(tu_dir));
}

static inline void tu_teardown(void)
{
	nftw(tu_dir, tu_rm, 16, FTW_DEPTH | FTW_PHYS);
}

/* Path of name inside the scratch folder (static buffer, rotating). */
static inline const char *tu_path(const char *name)
{
	static char buf[4][512];
	static int k;
	k = (k + 1) & 3;
	snprintf(buf[k], sizeof buf[k], "%s/%s", tu_dir, name);
	return buf[k];
}

static inline const char *tu_write(const char *name, const void *data, size_t n)
{
	const char *p = tu_path(name);
	FILE *f = fopen(p, "wb");
	ck_assert_ptr_nonnull(f);
	ck_assert_uint_eq(fwrite(data, 1, n, f), n);
	fclose(f);
	return p;
}

static inline const char *tu_srcfile(const char *rel)
{
	static char buf[4][1024];
	static int k;
	const char *top = getenv("top_srcdir");
	k = (k + 1) & 3;
	snprintf(buf[k], sizeof buf[k], "%s/%s", top ? top : ".", rel);
	return buf[k];
}

/* The message must contain want (messages start with a path that varies). */
#define tu_err_has(msg, want) \
	ck_assert_msg(strstr((msg), (want)) != NULL, "message '%s' lacks '%s'", (msg), (want))

static inline int tu_run(Suite *s)
{
	SRunner *r = srunner_create(s);
	srunner_run_all(r, CK_NORMAL);
	int nf = srunner_ntests_failed(r);
	srunner_free(r);
	return nf ? EXIT_FAILURE : EXIT_SUCCESS;
}

#endif
