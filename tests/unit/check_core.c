#include <check.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "arena.h"
#include "duo.h"
#include "err.h"
#include "filemap.h"
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

/* A set of names: the caller's string is copied once, when added, and
 * the copy is what later adds of an equal string get back. */
START_TEST(map_add_copies_once)
{
	Arena *a = arena_new();
	Map m;
	map_init(&m, a, 0);
	char k[16];
	int added;
	const char *first = NULL;
	for (int i = 0; i < 3000; i++) { /* grows the table past a few rehashes */
		snprintf(k, sizeof k, "n%d", i);
		const char *s = map_add(&m, a, k, map_key_hash(k), &added);
		ck_assert(added);
		ck_assert_ptr_ne(s, k);
		ck_assert_str_eq(s, k);
		ck_assert_ptr_eq(map_get(&m, k), s);
		if (!i)
			first = s;
	}
	strcpy(k, "n0");
	ck_assert_ptr_eq(map_add(&m, a, k, map_key_hash(k), &added), first);
	ck_assert(!added);
	ck_assert_uint_eq(m.len, 3000);
	arena_free(a);
}
END_TEST

/* The calls given a hash find what the plain calls put, and the reverse,
 * across the rehashes of a growing table. */
START_TEST(map_hash_given_agrees)
{
	Arena *a = arena_new();
	Map m;
	map_init(&m, a, 0);
	char k[3000][16];
	for (int i = 0; i < 3000; i++) {
		snprintf(k[i], sizeof k[i], "v/%d", i);
		if (i % 2)
			map_put(&m, k[i], k[i]);
		else
			*map_ref_h(&m, k[i], map_key_hash(k[i])) = k[i];
	}
	for (int i = 0; i < 3000; i++) {
		char q[16];
		strcpy(q, k[i]); /* equal, not the same pointer */
		ck_assert_ptr_eq(map_get_h(&m, q, map_key_hash(q)), k[i]);
		ck_assert_ptr_eq(map_get(&m, q), k[i]);
	}
	ck_assert_ptr_null(map_get_h(&m, "v/3000", map_key_hash("v/3000")));
	ck_assert_uint_eq(m.len, 3000);
	arena_free(a);
}
END_TEST

/* A slot keeps 16 bits of its key's hash: two keys whose kept bits agree
 * and whose probes start at the same slot of a small map are still told
 * apart by their strings, and keep doing so across rehashes. The pair is
 * searched for among 4096 names (about eight such pairs expected); the
 * test checks it found one, or it would test nothing. */
static int by_sig(const void *x, const void *y)
{
	uint64_t a = *(const uint64_t *)x, b = *(const uint64_t *)y;
	return (a > b) - (a < b);
}

START_TEST(map_tags_collide_safely)
{
	if (MAP_KEY_MASK == UINTPTR_MAX)
		return; /* 32-bit pointers: no bits kept */
	static char k[4096][16];
	static uint64_t sig[4096]; /* tag, home slot in 16, index */
	for (int i = 0; i < 4096; i++) {
		snprintf(k[i], sizeof k[i], "t/%d", i);
		uint64_t h = map_key_hash(k[i]);
		sig[i] = (h >> 48 << 4 | (h & 15)) << 12 | (uint64_t)i;
	}
	qsort(sig, 4096, sizeof *sig, by_sig);
	int x = -1, y = -1;
	for (int i = 1; i < 4096 && x < 0; i++)
		if (sig[i] >> 12 == sig[i - 1] >> 12) {
			x = (int)(sig[i - 1] & 4095);
			y = (int)(sig[i] & 4095);
		}
	ck_assert_int_ge(x, 0);
	Arena *a = arena_new();
	Map m;
	map_init(&m, a, 0);
	ck_assert_uint_eq(m.cap, 16);
	map_put(&m, k[x], k[x]);
	map_put(&m, k[y], k[y]);
	ck_assert_uint_eq(m.len, 2);
	ck_assert_ptr_eq(map_get(&m, k[x]), k[x]);
	ck_assert_ptr_eq(map_get(&m, k[y]), k[y]);
	for (int i = 0; i < 4096; i++) /* rehashes, with the pair in */
		map_put(&m, k[i], k[i]);
	ck_assert_uint_eq(m.len, 4096);
	size_t seen = 0;
	for (size_t i = 0; i < m.cap; i++)
		if (m.slot[i].kt) {
			ck_assert_ptr_eq(map_slot_key(&m.slot[i]), m.slot[i].val);
			seen++;
		}
	ck_assert_uint_eq(seen, 4096);
	arena_free(a);
}
END_TEST

/* Blocks made ahead by the helper thread serve arenas as fresh ones do:
 * zeroed, counted against the budget once taken, and the one left
 * waiting goes when the helper stops. */
START_TEST(arena_prefill_serves_blocks)
{
	size_t before = arena_held();
	arena_prefill(1);
	arena_prefill(1); /* already on: nothing more */
	Arena *a = arena_new();
	int dirty = -1;
	for (int i = 0; i < 6000; i++) { /* ~6 MB: several standard blocks */
		unsigned char *p = arena_alloc(a, 1000);
		for (int j = 0; j < 1000 && dirty < 0; j++)
			if (p[j])
				dirty = i;
		memset(p, 0xab, 1000);
	}
	ck_assert_msg(dirty < 0, "allocation %d was not zeroed", dirty);
	ck_assert_uint_ge(arena_held(), before + (6u << 20));
	arena_prefill(0);
	arena_prefill(0);
	arena_free(a);
	ck_assert_uint_eq(arena_held(), before);
}
END_TEST

START_TEST(arena_big_and_small)
{
	Arena *a = arena_new();
	char *big = arena_alloc(a, 3u << 20);
	ck_assert_int_eq(big[(3u << 20) - 1], 0);
	char *s = arena_printf(a, "%s-%d", "x", 42);
	ck_assert_str_eq(s, "x-42");
	ck_assert_str_eq(arena_cat(a, "/model.0/", "", "Gather", "_output_0", NULL), "/model.0/Gather_output_0");
	ck_assert_str_eq(arena_cat(a, "", NULL), "");
	ck_assert_uint_eq((uintptr_t)arena_alloc(a, 3) % 8, 0);
	arena_free(a);
}
END_TEST

/* Sizes from a file are checked before allocating; small allocations
 * past the budget are served, and arena_check reports the overrun. */
START_TEST(arena_budget_checks)
{
	size_t was = arena_budget();
	Arena *a = arena_new();
	arena_set_budget(arena_held() + (4u << 20));
	Err e = { "" };
	ck_assert_ptr_null(arena_try(a, (size_t)1 << 40, &e));
	ck_assert_msg(strstr(e.msg, "needs 1099511627776 bytes of memory, more than the memory budget allows") != NULL, "%s", e.msg);
	ck_assert_int_eq(arena_check(a, &e), 0); /* a refused try is not an overrun */
	ck_assert_ptr_nonnull(arena_try(a, 2u << 20, &e));
	for (int i = 0; i < 24; i++) /* past the budget, standard blocks: served */
		ck_assert_ptr_nonnull(arena_alloc(a, 200000));
	ck_assert_int_eq(arena_check(a, &e), -1);
	/* The overrun named is the first standard block past the budget (2 MiB
	 * with its header), not the refused try. */
	size_t need = 0;
	ck_assert_msg(sscanf(e.msg, "needs %zu bytes of memory", &need) == 1, "%s", e.msg);
	ck_assert_msg(need > (1u << 20) && need < (2u << 20), "%s", e.msg);
	size_t held = arena_held();
	arena_free(a);
	ck_assert_uint_lt(arena_held(), held); /* freed blocks leave the budget */
	arena_set_budget(was);
}
END_TEST

/* An arena filled by another thread (the checkpoint prefetch) is usable
 * from this one, and every thread's blocks are counted in the budget
 * exactly once. */
static void *fill(void *p)
{
	Arena *a = p;
	for (int i = 0; i < 200; i++)
		arena_alloc(a, 100000);
	char *big = arena_alloc(a, 9u << 20); /* a mapping of its own */
	return big[(9u << 20) - 1] == 0 ? a : NULL;
}

START_TEST(arena_across_threads)
{
	size_t base = arena_held();
	Arena *parent = arena_new(), *kid = arena_new();
	pthread_t th;
	ck_assert_int_eq(pthread_create(&th, NULL, fill, kid), 0);
	for (int i = 0; i < 200; i++)
		arena_alloc(parent, 100000);
	void *r;
	ck_assert_int_eq(pthread_join(th, &r), 0);
	ck_assert_ptr_eq(r, kid);
	char *s = arena_printf(kid, "%s", "still usable");
	ck_assert_str_eq(s, "still usable");
	ck_assert_uint_gt(arena_held(), base + (9u << 20) + 2 * 200 * 100000);
	arena_free(kid);
	arena_free(parent);
	ck_assert_uint_eq(arena_held(), base);
}
END_TEST

/* A large array replaced by a bigger copy leaves the budget at once; a
 * small allocation, sharing its block, stays until the arena goes. */
START_TEST(arena_release_gives_back)
{
	Arena *a = arena_new();
	size_t n = 1u << 20;
	char *small = arena_alloc(a, 100);
	char *g = arena_alloc(a, n); /* past a quarter block: a block of its own */
	memset(g, 7, n);
	size_t with = arena_held();
	arena_release(a, small, 100);
	ck_assert_uint_eq(arena_held(), with);
	g = arena_grow(a, g, n, 2 * n);
	ck_assert_int_eq(g[n - 1], 7);
	ck_assert_int_eq(g[2 * n - 1], 0);
	ck_assert_uint_eq(arena_held(), with + n); /* 2 MiB in, the old 1 MiB out */
	arena_release(a, g, 2 * n);
	ck_assert_uint_lt(arena_held(), with - n); /* and its block header */
	ck_assert_uint_eq(arena_used(a), 104); /* the small one, rounded to 8 */
	arena_free(a);
}
END_TEST

/* arena_reset keeps the standard blocks and gives back the rest: a
 * private block kept as a spare would serve only small requests while
 * the next big one made another. */
START_TEST(arena_reset_gives_back_private)
{
	Arena *a = arena_new();
	size_t h0 = arena_held();
	for (int i = 0; i < 4; i++) {
		char *p = arena_alloc_raw(a, 1u << 20);
		p[(1u << 20) - 1] = 1;
		ck_assert_uint_ge(arena_held(), h0 + (1u << 20));
		arena_reset(a);
		ck_assert_uint_eq(arena_held(), h0);
	}
	arena_free(a);
}
END_TEST

/* Bulk memory: aligned, disjoint, counted as it is populated, never
 * released one allocation at a time, given back by arena_reset. */
START_TEST(arena_bulk_packs)
{
	Arena *a = arena_new();
	size_t h0 = arena_held(), n = (1u << 20) + 1;
	char *p[8];
	for (int i = 0; i < 8; i++) {
		p[i] = arena_bulk(a, n);
		ck_assert_uint_eq((uintptr_t)p[i] % 8, 0);
		memset(p[i], i + 1, n);
	}
	for (int i = 0; i < 8; i++)
		ck_assert_msg(p[i][0] == i + 1 && p[i][n - 1] == i + 1, "bulk allocation %d overwritten", i);
	size_t held = arena_held();
	ck_assert_uint_ge(held, h0 + 8 * n);
	ck_assert_uint_lt(held, h0 + 8 * n + (4u << 20)); /* populated as it fills, not the whole block */
	arena_release(a, p[0], n);
	ck_assert_uint_eq(arena_held(), held);
	char *big = arena_bulk(a, 8u << 20); /* past bulk's limit: a block of its own */
	big[(8u << 20) - 1] = 1;
	ck_assert_uint_ge(arena_held(), held + (8u << 20));
	arena_reset(a);
	ck_assert_uint_eq(arena_held(), h0);
	arena_free(a);
}
END_TEST

#if defined(__SANITIZE_ADDRESS__)
#define TEST_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define TEST_ASAN 1
#endif
#endif
#ifdef TEST_ASAN
#include <sanitizer/asan_interface.h>
/* The sanitizer build faults on memory read past its arena's reset (a
 * layer's scratch kept after the layer). */
START_TEST(arena_reset_poisons)
{
	Arena *a = arena_new();
	char *p = arena_alloc(a, 64);
	ck_assert(!__asan_address_is_poisoned(p));
	arena_reset(a);
	ck_assert(__asan_address_is_poisoned(p));
	char *q = arena_alloc(a, 64);
	ck_assert(!__asan_address_is_poisoned(q));
	q = arena_grow(a, q, 64, 128); /* grown in place: the tail is usable */
	ck_assert(!__asan_address_is_poisoned(q + 127));
	arena_free(a);
}
END_TEST
#endif

START_TEST(err_one_line)
{
	Err e;
	ck_assert_int_eq(errf(&e, "a\nb %d", 1), -1);
	ck_assert_str_eq(e.msg, "a\\nb 1");
	errwrap(&e, "file.onnx");
	ck_assert_str_eq(e.msg, "file.onnx: a\\nb 1");
}
END_TEST

/* A tensor name holding terminal controls: clear screen, window title
 * (OSC ... BEL), a C1 CSI, U+2028, a right-to-left override and a byte
 * that is not UTF-8 all come out as escapes; ordinary UTF-8 stays. */
START_TEST(err_escapes_hostile_names)
{
	Err e;
	errf(&e, "tensor '%s': bad", "w\x1b[2J\x1b]0;owned\x07\xc2\x9b" "1m\xe2\x80\xa8x\xe2\x80\xaey\xff\u00e9");
	ck_assert_str_eq(e.msg, "tensor 'w\\x1b[2J\\x1b]0;owned\\x07\\u{009b}1m\\u{2028}x\\u{202e}y\\xff\u00e9': bad");
	for (const char *p = e.msg; *p; p++)
		ck_assert((unsigned char)*p >= 0x20 && *p != 0x7f);
	/* Escaping twice changes nothing, and errwrap escapes its prefix. */
	char again[sizeof e.msg];
	ck_assert_str_eq(esc_text(again, sizeof again, e.msg), e.msg);
	errwrap(&e, "%s", "in\x1b.onnx");
	ck_assert_str_eq(e.msg, "in\\x1b.onnx: tensor 'w\\x1b[2J\\x1b]0;owned\\x07\\u{009b}1m\\u{2028}x\\u{202e}y\\xff\u00e9': bad");
	/* An escape that does not fit is left out whole, not cut. */
	char small[6];
	ck_assert_str_eq(esc_text(small, sizeof small, "ab\x1b"), "ab");
}
END_TEST

/* A temporary file of n bytes, byte i = (i * mul) & 0xff. */
static int pattern_file(size_t n, unsigned mul)
{
	char path[] = "/tmp/check_core_XXXXXX";
	int fd = mkstemp(path);
	ck_assert_int_ge(fd, 0);
	unlink(path);
	unsigned char *b = malloc(n);
	for (size_t i = 0; i < n; i++)
		b[i] = (unsigned char)(i * mul);
	ck_assert_int_eq(write(fd, b, n), (ssize_t)n);
	free(b);
	return fd;
}

/* A registered mapping is read through the descriptor given, at the
 * pointer's offset, only inside its bounds, and not once removed. The
 * mapping here shows one file and is registered with another, so which
 * bytes come back says where they were read. */
START_TEST(filemap_reads_through_the_file)
{
	enum { N = 3 * 4096 + 100 };
	int shown = pattern_file(N, 1), file = pattern_file(N, 7);
	const unsigned char *p = mmap(NULL, N, PROT_READ, MAP_PRIVATE, shown, 0);
	ck_assert_ptr_ne(p, MAP_FAILED);
	unsigned char buf[N], local[16] = { 0 };
	ck_assert_int_eq(filemap_read(buf, p, 16), 0);
	filemap_add(p, N, file, "the/file");
	close(file); /* the registry holds its own descriptor */
	ck_assert(filemap_has(p + 10, 100));
	/* What a SIGBUS handler names: the file, and the offset of the page
	 * that failed; nothing outside. */
	size_t off = 0;
	ck_assert_str_eq(filemap_path_at(p + 5000, &off), "the/file");
	ck_assert_uint_eq(off, 5000);
	ck_assert_ptr_null(filemap_path_at(p + N, &off));
	ck_assert_ptr_null(filemap_path_at(local, &off));
	ck_assert_int_eq(filemap_read(buf, p + 5000, 3000), 1);
	for (size_t i = 0; i < 3000; i++)
		ck_assert_uint_eq(buf[i], (unsigned char)((5000 + i) * 7));
	ck_assert_int_eq(filemap_read(buf, p, N), 1);
	ck_assert_uint_eq(buf[N - 1], (unsigned char)((N - 1) * 7));
	/* Past the end, outside, or a pointer the registry never saw. */
	ck_assert_int_eq(filemap_read(buf, p + N - 10, 20), 0);
	ck_assert(!filemap_has(p + N, 1));
	ck_assert_int_eq(filemap_read(buf, local, sizeof local), 0);
	filemap_remove(p);
	ck_assert(!filemap_has(p, 1));
	ck_assert_ptr_null(filemap_path_at(p, &off));
	ck_assert_int_eq(filemap_read(buf, p, 16), 0);
	munmap((void *)p, N);
	close(shown);
}
END_TEST

/* The table is bounded: past it, mappings are not registered (read in
 * place by their users) and hold no descriptor; removing frees places. */
START_TEST(filemap_is_bounded)
{
	int fd = pattern_file(64, 1);
	enum { MANY = 200 };
	static char fake[MANY][64];
	for (int i = 0; i < MANY; i++)
		filemap_add(fake[i], sizeof fake[i], fd, "fake");
	int held = 0;
	for (int i = 0; i < MANY; i++)
		held += filemap_has(fake[i], 1);
	ck_assert_int_gt(held, 0);
	ck_assert_int_lt(held, MANY);
	for (int i = 0; i < MANY; i++)
		filemap_remove(fake[i]);
	for (int i = 0; i < MANY; i++)
		ck_assert(!filemap_has(fake[i], 1));
	filemap_add(fake[MANY - 1], sizeof fake[0], fd, "fake");
	ck_assert(filemap_has(fake[MANY - 1], 1));
	filemap_remove(fake[MANY - 1]);
	close(fd);
}
END_TEST

/* duo_run's contract: half 1 on another thread only when the helper runs,
 * the job is large enough and the caller is not itself in a half; each
 * half exactly once; the helper's arena offered to the caller's half-1
 * work only outside a half. */
typedef struct {
	pthread_t th[2];
	int runs[2];
	int nested_same[2]; /* a duo_run from inside this half ran both of its halves here */
	Arena *inner_arena[2];
	int nest;
} DuoJob;

typedef struct {
	pthread_t th[2];
} DuoInner;

static void duo_inner(void *arg, int h)
{
	((DuoInner *)arg)->th[h] = pthread_self();
}

static void duo_half(void *arg, int h)
{
	DuoJob *j = arg;
	j->th[h] = pthread_self();
	j->runs[h]++;
	j->inner_arena[h] = duo_arena();
	if (j->nest) {
		DuoInner in;
		duo_run(duo_inner, &in, (size_t)DUO_MIN * 4);
		j->nested_same[h] = pthread_equal(in.th[0], pthread_self()) && pthread_equal(in.th[1], pthread_self());
	}
}

START_TEST(duo_splits_large_jobs_only)
{
	DuoJob j = { 0 };
	/* Not started: both halves in the caller. */
	duo_run(duo_half, &j, (size_t)DUO_MIN * 4);
	ck_assert_int_eq(j.runs[0], 1);
	ck_assert_int_eq(j.runs[1], 1);
	ck_assert(pthread_equal(j.th[1], pthread_self()));
	ck_assert_ptr_null(duo_arena());

	ck_assert_int_eq(duo_start(), 1);
	ck_assert_ptr_nonnull(duo_arena());
	for (int round = 0; round < 200; round++) {
		memset(&j, 0, sizeof j);
		duo_run(duo_half, &j, (size_t)DUO_MIN);
		ck_assert_int_eq(j.runs[0], 1);
		ck_assert_int_eq(j.runs[1], 1);
		ck_assert(pthread_equal(j.th[0], pthread_self()));
		ck_assert(!pthread_equal(j.th[1], pthread_self()));
		ck_assert_ptr_null(j.inner_arena[0]);
		ck_assert_ptr_null(j.inner_arena[1]);
	}
	/* Small: the caller runs both, and may hand its own nested job on. */
	memset(&j, 0, sizeof j);
	duo_run(duo_half, &j, (size_t)DUO_MIN - 1);
	ck_assert(pthread_equal(j.th[1], pthread_self()));
	ck_assert_ptr_nonnull(j.inner_arena[1]);
	/* Nested inside a split job: serial in whichever thread runs the half. */
	memset(&j, 0, sizeof j);
	j.nest = 1;
	duo_run(duo_half, &j, (size_t)DUO_MIN * 4);
	ck_assert(j.nested_same[0] && j.nested_same[1]);
	duo_stop();
	duo_stop();
	ck_assert_ptr_null(duo_arena());
	memset(&j, 0, sizeof j);
	duo_run(duo_half, &j, (size_t)DUO_MIN * 4);
	ck_assert(pthread_equal(j.th[1], pthread_self()));
	/* Started again after a stop. */
	ck_assert_int_eq(duo_start(), 1);
	memset(&j, 0, sizeof j);
	duo_run(duo_half, &j, (size_t)DUO_MIN * 4);
	ck_assert(!pthread_equal(j.th[1], pthread_self()));
	duo_stop();
}
END_TEST

int main(void)
{
	Suite *s = suite_create("core");
	TCase *tc = tcase_create("core");
	tcase_add_test(tc, map_many);
	tcase_add_test(tc, map_add_copies_once);
	tcase_add_test(tc, map_hash_given_agrees);
	tcase_add_test(tc, map_tags_collide_safely);
	tcase_add_test(tc, arena_prefill_serves_blocks);
	tcase_add_test(tc, arena_big_and_small);
	tcase_add_test(tc, arena_budget_checks);
	tcase_add_test(tc, arena_across_threads);
	tcase_add_test(tc, arena_release_gives_back);
	tcase_add_test(tc, arena_reset_gives_back_private);
	tcase_add_test(tc, arena_bulk_packs);
#ifdef TEST_ASAN
	tcase_add_test(tc, arena_reset_poisons);
#endif
	tcase_add_test(tc, err_one_line);
	tcase_add_test(tc, err_escapes_hostile_names);
	tcase_add_test(tc, filemap_reads_through_the_file);
	tcase_add_test(tc, filemap_is_bounded);
	tcase_add_test(tc, duo_splits_large_jobs_only);
	suite_add_tcase(s, tc);
	return tu_run(s);
}
