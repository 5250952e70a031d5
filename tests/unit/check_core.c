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
	ck_assert_str_eq(e.msg, "a b 1");
	errwrap(&e, "file.onnx");
	ck_assert_str_eq(e.msg, "file.onnx: a b 1");
}
END_TEST

int main(void)
{
	Suite *s = suite_create("core");
	TCase *tc = tcase_create("core");
	tcase_add_test(tc, map_many);
	tcase_add_test(tc, arena_big_and_small);
	tcase_add_test(tc, err_one_line);
	suite_add_tcase(s, tc);
	return tu_run(s);
}
