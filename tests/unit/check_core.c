#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "arena.h"
#include "err.h"
#include "map.h"
#include "testutil.h"

START_TEST(map_many)
{
	Arena *a = arena_new();
	Map m;
	map_init(&m, a, 0);
	for (int i = 0; i < 5000; i++)
		map_put(&m, arena_printf(a, "k%d", i), (void *)(intptr_t)(i + 1));
	ck_assert_uint_eq(m.len, 5000);
	for (int i = 0; i < 5000; i++) {
		char k[16];
		snprintf(k, sizeof k, "k%d", i);
		ck_assert_ptr_eq(map_get(&m, k), (void *)(intptr_t)(i + 1));
	}
	ck_assert_ptr_null(map_get(&m, "absent"));
	ck_assert_ptr_eq(map_put(&m, "k7", NULL), (void *)(intptr_t)8);
	ck_assert_uint_eq(m.len, 5000);
	arena_free(a);
}
END_TEST

START_TEST(arena_big_and_small)
{
	Arena *a = arena_new();
	char *big = arena_alloc(a, 3u << 20);
	ck_assert_int_eq(big[(3u << 20) - 1], 0);
	char *s = arena_printf(a, "%s-%d", "x", 42);
	ck_assert_str_eq(s, "x-42");
	ck_assert_uint_eq((uintptr_t)arena_alloc(a, 3) % 16, 0);
	arena_free(a);
}
END_TEST

START_TEST(err_one_line)
{
	Err e;
	ck_assert_int_eq(errf(&e, "a\nb %d", 1), -1);
	ck_assert_str_eq(e.msg, "a\\x0ab 1");
	errwrap(&e, "file.onnx");
	ck_assert_str_eq(e.msg, "file.onnx: a\\x0ab 1");
}
END_TEST

/* Names from input files are quoted with control characters, invalid
 * UTF-8 and characters that reorder a terminal line escaped; readable
 * non-ASCII names stay readable. */
START_TEST(err_escapes_names)
{
	Err e;
	errf(&e, "node '%s'", "a\tb\x1b[31mred\x7f");
	ck_assert_str_eq(e.msg, "node 'a\\x09b\\x1b[31mred\\x7f'");
	errf(&e, "value '%s'", "bad\xff\xc0\x80utf8");
	ck_assert_str_eq(e.msg, "value 'bad\\xff\\xc0\\x80utf8'");
	errf(&e, "'%s'", "\xe2\x80\xaetxt.onnx"); /* U+202E, right-to-left override */
	ck_assert_str_eq(e.msg, "'\\xe2\\x80\\xaetxt.onnx'");
	errf(&e, "'%s'", "\xc2\x85"); /* U+0085, a C1 control (next line) */
	ck_assert_str_eq(e.msg, "'\\xc2\\x85'");
	errf(&e, "module '%s'", "\xe6\xa8\xa1\xe5\x9e\x8b.conv"); /* valid UTF-8 stays */
	ck_assert_str_eq(e.msg, "module '\xe6\xa8\xa1\xe5\x9e\x8b.conv'");
	/* Escaping again changes nothing; a long message is cut whole. */
	errwrap(&e, "in");
	ck_assert_str_eq(e.msg, "in: module '\xe6\xa8\xa1\xe5\x9e\x8b.conv'");
	char big[2000];
	memset(big, 1, sizeof big - 1);
	big[sizeof big - 1] = 0;
	errf(&e, "%s", big);
	ck_assert_uint_le(strlen(e.msg), sizeof e.msg - 1);
	ck_assert_uint_eq(strlen(e.msg) % 4, 0);
	ck_assert(strncmp(e.msg, "\\x01\\x01", 8) == 0);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("core");
	TCase *tc = tcase_create("core");
	tcase_add_test(tc, map_many);
	tcase_add_test(tc, arena_big_and_small);
	tcase_add_test(tc, err_one_line);
	tcase_add_test(tc, err_escapes_names);
	suite_add_tcase(s, tc);
	return tu_run(s);
}
