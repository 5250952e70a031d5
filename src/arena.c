#include "arena.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include "filemap.h"
#include "spawn.h"

/* Under AddressSanitizer what arena_reset empties stays poisoned until it
 * is handed out again: a pointer kept past its arena's reset (into
 * Ctx.tmp after its layer, into the index after a reindex) faults in the
 * sanitizer build instead of reading what the next unit put there. */
#if defined(__SANITIZE_ADDRESS__)
#define ARENA_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define ARENA_ASAN 1
#endif
#endif
#ifdef ARENA_ASAN
#include <sanitizer/asan_interface.h>
#define POISON(p, n) ASAN_POISON_MEMORY_REGION((p), (n))
#define UNPOISON(p, n) ASAN_UNPOISON_MEMORY_REGION((p), (n))
#else
#define POISON(p, n) ((void)(p), (void)(n))
#define UNPOISON(p, n) ((void)(p), (void)(n))
#endif

/* Blocks are chained; big requests get a block of their own so a 1 GB
 * initializer does not waste a tail of the current block. FIRST is no
 * private block's size (those are past BLOCK / 4). ALIGN is what the
 * widest type stored here needs (pointers, int64, double; no long double
 * or vector types): half a million small protobuf-c objects and names on
 * a 400-layer model wasted 6 MiB of peak RSS rounding up to 16. */
enum { ALIGN = 8, HUGE = 2 << 20, FIRST = 256 << 10 };

typedef struct Block Block;
struct Block {
	Block *next;
	size_t cap, used;
	int dirty; /* bytes past `used` may be non-zero (a block reused by arena_reset) */
	int mapped; /* our own mapping (munmap), else from the C allocator (free) */
	size_t pop; /* a bulk block: bytes from its start populated and held; else 0 */
	_Alignas(16) unsigned char data[];
};

/* A standard block with its header fills one transparent huge page. Under
 * a paravirtualised MMU (PVM) the first touch of each 4 KiB page of a
 * block traps to the host even when the kernel populated it (6 us a page,
 * a fifth of a 400-layer repair); a huge page populated by the kernel
 * does not. An arena's first block is small, in 4 KiB pages: most arenas
 * (a YAML file, a checker's run) never need a second. */
#define BLOCK ((size_t)HUGE - sizeof(Block))

struct Arena {
	Block *head;
	Block *bulk; /* the block arena_bulk carves from, NULL: none yet */
	Block *spare; /* standard blocks an arena_reset emptied, served before new ones */
	size_t total;
	size_t over; /* first request past the budget or refused by malloc, 0: none */
};

/* The budget (0: not chosen yet; set before any second thread runs) and
 * the bytes all arenas hold, counted atomically: the pipeline opens a
 * checkpoint in a thread of its own (each thread has its own arenas). */
static size_t limit, held;
/* Given back to malloc when it first fails, so an unchecked allocation
 * can still be served until the caller's next arena_check. */
static void *reserve;

static size_t held_now(void)
{
	return __atomic_load_n(&held, __ATOMIC_RELAXED);
}
enum { RESERVE = 32 << 20 };

static size_t default_budget(void)
{
	long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
	size_t b = pages > 0 && psz > 0 ? (size_t)pages / 2 * (size_t)psz : (size_t)1 << 32;
	/* Under an address-space or data limit (ulimit -v, prlimit --as,
	 * a batch scheduler's cap) the mappings of the inputs and the
	 * program need room too: a quarter of the limit is left for them. */
	const int res[] = { RLIMIT_AS, RLIMIT_DATA };
	for (int i = 0; i < 2; i++) {
		struct rlimit r;
		if (getrlimit(res[i], &r) == 0 && r.rlim_cur != RLIM_INFINITY && r.rlim_cur / 4 * 3 < b)
			b = (size_t)(r.rlim_cur / 4 * 3);
	}
	return b;
}

size_t arena_budget(void)
{
	if (!limit)
		limit = default_budget();
	return limit;
}

void arena_set_budget(size_t bytes)
{
	limit = bytes;
}

size_t arena_held(void)
{
	return held_now();
}

int arena_budget_err(Err *e, size_t n)
{
	return errf(e, "needs %zu bytes of memory, more than the memory budget allows (%zu MiB of %zu MiB in use); the input is hostile or damaged, or raise --max-memory",
		    n, held_now() >> 20, arena_budget() >> 20);
}

static int fits(size_t n)
{
	size_t b = arena_budget();
	size_t h = held_now();
	return n <= b && h <= b - n;
}

/* sz bytes at a 2 MiB boundary (huge pages need it), the first pop of
 * them populated, NULL on failure. */
static Block *huge_block(size_t sz, size_t pop)
{
	size_t span = sz + HUGE;
	if (span < sz)
		return NULL;
	unsigned char *p = mmap(NULL, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED)
		return NULL;
	unsigned char *q = (unsigned char *)(((uintptr_t)p + HUGE - 1) & ~(uintptr_t)(HUGE - 1));
	if (q > p)
		munmap(p, (size_t)(q - p));
	size_t pg = (size_t)sysconf(_SC_PAGESIZE), end = (sz + pg - 1) / pg * pg;
	if (p + span > q + end)
		munmap(q + end, (size_t)(p + span - (q + end)));
	madvise(q, sz, MADV_HUGEPAGE);
	/* A hint (Linux 5.14+): where refused, pages fault in on first use. */
	madvise(q, pop, MADV_POPULATE_WRITE);
	Block *b = (Block *)q;
	b->mapped = 1;
	return b;
}

/* Standard blocks made ahead by a helper thread (arena_prefill): the
 * kernel's population of a block is usually 0.25 ms, but right after
 * another process freed memory it took 17x-21x as long on this virtual
 * machine (0.19-0.23 s against 0.011 s over a 400-layer repair, summed
 * with strace -T; most likely the host backing pages again that the
 * balloon's free page reporting gave it). Made on the idle core while the
 * repair fills the block before, it costs the repair nothing.
 * One block ahead is too few in bursts (the unpack, the index): there the
 * main thread still populated 13-17% of its samples' worth, right after
 * Python's run. So the helper keeps `want` blocks ready, one more each
 * time the main thread found none, one fewer each time it found the
 * helper fully ahead, at most READY_MAX: a 400-layer repair right after
 * Python's load + save, four sets of 10-14 runs each, median 3-10% faster
 * (0.398 -> 0.370 s in one), peak RSS unchanged in three sets, +0.8 MiB
 * in one.
 * A block joins the budget when an arena takes it, so budget errors are
 * where they were; the few blocks waiting are outside it. */
enum { READY_MAX = 3 };
static struct {
	pthread_mutex_t mu;
	pthread_cond_t cv, got; /* cv: the helper has work; got: a block is ready or none is coming */
	pthread_t th;
	Block *ready[READY_MAX];
	int nready, want;
	int busy; /* the helper is populating a block */
	int on, stop;
} pf = { .mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER, .got = PTHREAD_COND_INITIALIZER };

static void *prefill_run(void *u)
{
	(void)u;
	const size_t sz = sizeof(Block) + BLOCK;
	pthread_mutex_lock(&pf.mu);
	while (!pf.stop) {
		if (pf.nready >= pf.want || !fits(sz)) {
			pthread_cond_wait(&pf.cv, &pf.mu);
			continue;
		}
		pf.busy = 1;
		pthread_mutex_unlock(&pf.mu);
		Block *b = huge_block(sz, sz);
		pthread_mutex_lock(&pf.mu);
		if (b)
			pf.ready[pf.nready++] = b;
		pf.busy = 0;
		pthread_cond_broadcast(&pf.got);
		if (!b)
			break; /* out of address space: blocks are made where needed */
	}
	pthread_mutex_unlock(&pf.mu);
	return NULL;
}

void arena_prefill(int on)
{
	if (on && !pf.on) {
		pf.stop = 0;
		pf.want = 1;
		__atomic_store_n(&pf.on, spawn(&pf.th, prefill_run, NULL), __ATOMIC_RELEASE);
	} else if (!on && pf.on) {
		pthread_mutex_lock(&pf.mu);
		pf.stop = 1;
		pthread_cond_signal(&pf.cv);
		pthread_mutex_unlock(&pf.mu);
		pthread_join(pf.th, NULL);
		pthread_mutex_lock(&pf.mu);
		__atomic_store_n(&pf.on, 0, __ATOMIC_RELEASE);
		while (pf.nready)
			munmap(pf.ready[--pf.nready], sizeof(Block) + BLOCK);
		pthread_mutex_unlock(&pf.mu);
	}
}

/* A block made ahead, if there is one; the helper starts the next. */
static Block *prefilled(void)
{
	if (!__atomic_load_n(&pf.on, __ATOMIC_ACQUIRE))
		return NULL;
	pthread_mutex_lock(&pf.mu);
	Block *b = NULL;
	if (!pf.nready) {
		if (pf.want < READY_MAX)
			pf.want++;
		/* One on its way is taken: a block mapped here instead waits
		 * as long, for the address-space lock the helper's population
		 * holds (3-9 ms a time in D state on a 400-layer repair),
		 * and is then populated all over. */
		while (pf.busy && !pf.nready)
			pthread_cond_wait(&pf.got, &pf.mu);
	} else if (pf.nready == pf.want && pf.want > 1) {
		pf.want--;
	}
	if (pf.nready)
		b = pf.ready[--pf.nready];
	pthread_cond_signal(&pf.cv);
	pthread_mutex_unlock(&pf.mu);
	return b;
}

/* checked: NULL when the block would pass the budget or malloc fails.
 * Unchecked: past the budget the arena records the overrun and the block
 * is allocated all the same; a failing malloc spends the reserve once. */
static Block *block_new(Arena *a, size_t cap, int checked)
{
	if (cap > SIZE_MAX - sizeof(Block)) {
		if (checked)
			return NULL;
		fprintf(stderr, "onnx-moe-repair: out of memory (%zu bytes)\n", cap);
		abort();
	}
	size_t sz = sizeof(Block) + cap;
	if (!fits(sz)) {
		if (checked)
			return NULL;
		if (a && !a->over)
			a->over = cap;
	}
	Block *b = NULL;
	for (int tries = 0; !b && tries < 2; tries++) {
		/* Zeroed memory, so arena_alloc need not zero it again: fresh
		 * pages come zeroed from the kernel. */
		if (cap == BLOCK || cap >= HUGE) {
			/* Standard and big blocks (new weights, the index's hash
			 * tables) in transparent huge pages where the kernel offers
			 * them, one fault per 2 MiB instead of 512, and faulted in
			 * by the kernel: a memset to fault them in wrote every byte
			 * of a 1 GB repair's weights once more. A table's probes
			 * land anywhere in it: tables of 2-4 MiB there (their first
			 * 2 MiB in one huge page) took a 400-layer repair from 0.47
			 * to 0.44 s (medians of 11 interleaved runs). */
			if (cap == BLOCK)
				b = prefilled();
			if (!b)
				b = huge_block(sz, sz);
		} else {
			/* Faulted in by the kernel in one call: a block is filled
			 * front to back anyway, and a fault per 4 KiB page is an
			 * exception each (40 000 of them on a 400-layer repair). */
			b = mmap(NULL, sz, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
			if (b == MAP_FAILED)
				b = NULL;
			else
				b->mapped = 1;
		}
		void *r;
		if (b || checked || !(r = __atomic_exchange_n(&reserve, NULL, __ATOMIC_ACQ_REL)))
			break;
		free(r);
		if (a && !a->over)
			a->over = cap;
	}
	if (!b) {
		if (checked)
			return NULL;
		fprintf(stderr, "onnx-moe-repair: out of memory (%zu bytes)\n", cap);
		abort();
	}
	__atomic_add_fetch(&held, sz, __ATOMIC_RELAXED);
	b->next = NULL;
	b->cap = cap;
	b->used = 0;
	b->dirty = 0;
	b->pop = 0;
	return b;
}

static void block_free(Block *b)
{
	UNPOISON(b->data, b->cap);
	__atomic_sub_fetch(&held, b->pop ? b->pop : sizeof *b + b->cap, __ATOMIC_RELAXED);
	if (b->mapped)
		munmap(b, sizeof *b + b->cap);
	else
		free(b);
}

Arena *arena_new(void)
{
	if (!__atomic_load_n(&reserve, __ATOMIC_ACQUIRE)) {
		void *r = malloc(RESERVE), *none = NULL;
		if (r && !__atomic_compare_exchange_n(&reserve, &none, r, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
			free(r);
	}
	Arena *a = calloc(1, sizeof *a);
	if (!a)
		abort();
	a->head = block_new(a, FIRST, 0);
	return a;
}

void arena_reset(Arena *a)
{
	/* Standard blocks are kept for what comes next (no new pages to
	 * fault in) and the first one serves it first. Private and bulk
	 * blocks go: kept as spares they would only serve small requests,
	 * and a new one would be made for the next big one (one 1 MiB
	 * scratch per layer held 80 MiB on the external-data benchmark). */
	Block *first = NULL;
	for (Block *b = a->head, *n; b; b = n) {
		n = b->next;
		if (b->cap != BLOCK && b->cap != FIRST) {
			block_free(b);
			continue;
		}
		b->dirty = b->dirty || b->used;
		b->used = 0;
		POISON(b->data, b->cap);
		if (b->cap == FIRST) {
			first = b;
			continue;
		}
		b->next = a->spare;
		a->spare = b;
	}
	if (!first) { /* the first block is never freed: cannot happen, but stay whole */
		first = a->spare ? a->spare : block_new(a, BLOCK, 0);
		if (first == a->spare)
			a->spare = first->next;
	}
	a->head = first;
	a->head->next = NULL;
	a->bulk = NULL;
	a->total = 0;
	a->over = 0;
}

void arena_free(Arena *a)
{
	if (!a)
		return;
	for (int l = 0; l < 2; l++)
		for (Block *b = l ? a->spare : a->head, *n; b; b = n) {
			n = b->next;
			block_free(b);
		}
	free(a);
}

/* need bytes (aligned already) from the free space of b. */
static void *carve(Arena *a, Block *b, size_t need)
{
	void *p = b->data + b->used;
	UNPOISON(p, need);
	b->used += need;
	a->total += need;
	return p;
}

static void *alloc(Arena *a, size_t n, int checked)
{
	size_t need = (n + ALIGN - 1) & ~(size_t)(ALIGN - 1);
	if (need < n) {
		if (checked)
			return NULL;
		abort();
	}
	Block *b = a->head;
	if (b->cap - b->used < need) {
		if (need > BLOCK / 4) {
			/* Private block, linked behind the head so the head keeps serving small requests. */
			Block *big = block_new(a, need, checked);
			if (!big)
				return NULL;
			big->next = b->next;
			b->next = big;
			return carve(a, big, need);
		}
		if (a->spare) {
			b = a->spare;
			a->spare = b->next;
		} else if (!(b = block_new(a, BLOCK, checked))) {
			return NULL;
		}
		b->next = a->head;
		a->head = b;
	}
	return carve(a, b, need);
}

void *arena_alloc_raw(Arena *a, size_t n)
{
	return alloc(a, n, 0);
}

/* Address space of a bulk block, populated 2 MiB at a time as it fills,
 * and the largest request it serves: past that, a block of its own (in
 * huge pages too) wastes less than a bulk block's abandoned tail. */
enum { BULK = 64 << 20, BULK_MAX = 2 * HUGE };

void *arena_bulk(Arena *a, size_t n)
{
	size_t need = (n + ALIGN - 1) & ~(size_t)(ALIGN - 1);
	if (need < n || need > BULK_MAX)
		return alloc(a, n, 0);
	Block *b = a->bulk;
	if (!b || b->cap - b->used < need) {
		if (!fits(HUGE) && !a->over)
			a->over = need;
		b = huge_block(BULK, HUGE);
		if (!b) /* the private block's way: the reserve, else abort */
			return alloc(a, n, 0);
		__atomic_add_fetch(&held, HUGE, __ATOMIC_RELAXED);
		b->cap = BULK - sizeof *b;
		b->used = 0;
		b->dirty = 0;
		b->pop = HUGE;
		/* Behind the head, like a private block: the head keeps serving small requests. */
		b->next = a->head->next;
		a->head->next = b;
		a->bulk = b;
	}
	size_t end = sizeof *b + b->used + need, pop = (end + HUGE - 1) & ~(size_t)(HUGE - 1);
	if (pop > b->pop) {
		size_t more = pop - b->pop;
		if (!fits(more) && !a->over)
			a->over = need;
		madvise((unsigned char *)b + b->pop, more, MADV_POPULATE_WRITE);
		__atomic_add_fetch(&held, more, __ATOMIC_RELAXED);
		b->pop = pop;
	}
	return carve(a, b, need);
}

void *arena_try(Arena *a, size_t n, Err *e)
{
	void *p = alloc(a, n ? n : 1, 1);
	if (!p)
		arena_budget_err(e, n);
	return p;
}

int arena_check(const Arena *a, Err *e)
{
	return a->over ? arena_budget_err(e, a->over) : 0;
}

void *arena_alloc(Arena *a, size_t n)
{
	void *p = arena_alloc_raw(a, n);
	/* Fresh blocks are zeroed already; only reused ones need it. */
	Block *h = a->head;
	int fresh = (unsigned char *)p >= h->data && (unsigned char *)p < h->data + h->cap ? !h->dirty
		    : h->next && (unsigned char *)p >= h->next->data && (unsigned char *)p < h->next->data + h->next->cap
			    ? !h->next->dirty
			    : 0;
	if (!fresh)
		memset(p, 0, n);
	return p;
}

void *arena_dup(Arena *a, const void *p, size_t n)
{
	void *q = arena_alloc_raw(a, n ? n : 1);
	if (n)
		memcpy(q, p, n);
	return q;
}

char *arena_strdup(Arena *a, const char *s)
{
	return arena_dup(a, s, strlen(s) + 1);
}

char *arena_cat(Arena *a, const char *s, ...)
{
	va_list ap;
	size_t n = 0;
	va_start(ap, s);
	for (const char *p = s; p; p = va_arg(ap, const char *))
		n += strlen(p);
	va_end(ap);
	char *r = arena_alloc_raw(a, n + 1), *q = r;
	va_start(ap, s);
	for (const char *p = s; p; p = va_arg(ap, const char *)) {
		size_t k = strlen(p);
		memcpy(q, p, k);
		q += k;
	}
	va_end(ap);
	*q = 0;
	return r;
}

char *arena_printf(Arena *a, const char *fmt, ...)
{
	/* Names are short: formatted once on the stack, then copied; only a
	 * longer result is formatted a second time. */
	char buf[256];
	va_list ap, aq;
	va_start(ap, fmt);
	va_copy(aq, ap);
	int n = vsnprintf(buf, sizeof buf, fmt, ap);
	va_end(ap);
	if (n < 0)
		n = 0, buf[0] = 0;
	char *s = arena_alloc_raw(a, (size_t)n + 1);
	if ((size_t)n < sizeof buf)
		memcpy(s, buf, (size_t)n + 1);
	else
		vsnprintf(s, (size_t)n + 1, fmt, aq);
	va_end(aq);
	return s;
}

void arena_release(Arena *a, void *p, size_t n)
{
	size_t need = (n + ALIGN - 1) & ~(size_t)(ALIGN - 1);
	if (!p || need <= BLOCK / 4)
		return;
	/* Only a block that holds p alone, and not the head, which serves
	 * what comes next. */
	for (Block **l = &a->head->next, *b; (b = *l); l = &b->next)
		if (b->data == p) {
			if (b->used != need || b->pop)
				return;
			*l = b->next;
			a->total -= need;
			block_free(b);
			return;
		}
}

void *arena_grow(Arena *a, void *p, size_t old, size_t new)
{
	/* The last allocation of the head block grows in place: arrays
	 * grown one element at a time then cost no copies and leave no
	 * abandoned prefixes behind. */
	Block *b = a->head;
	size_t o = (old + ALIGN - 1) & ~(size_t)(ALIGN - 1), nw = (new + ALIGN - 1) & ~(size_t)(ALIGN - 1);
	if (p && old && new > old && nw >= new && (unsigned char *)p + o == b->data + b->used &&
	    nw - o <= b->cap - b->used) {
		UNPOISON((unsigned char *)p + o, nw - o);
		if (b->dirty) /* a fresh block's tail is zero already */
			memset((unsigned char *)p + old, 0, nw - old);
		b->used += nw - o;
		a->total += nw - o;
		return p;
	}
	void *q = arena_alloc(a, new);
	if (p && old) {
		memcpy(q, p, old < new ? old : new);
		arena_release(a, p, old);
	}
	return q;
}

size_t arena_used(const Arena *a)
{
	return a->total;
}

static void *pb_alloc(void *ud, size_t n)
{
	/* protobuf-c initialises what it allocates; zeroing 1 GB of weights twice
	 * would show in the benchmark. It also handles NULL (the unpack
	 * fails), so the budget is checked here for every allocation. */
	Arena *a = ud;
	/* A tensor's bytes (past a quarter block, up to bulk's limit) go to
	 * bulk blocks, in huge pages: the unpack's copy into them, the
	 * checks' reads and the save's write() of 4 KiB pages were slow. */
	void *p = n > BLOCK / 4 && n <= BULK_MAX ? (fits(n) ? arena_bulk(a, n) : NULL) : alloc(a, n, 1);
	if (!p && !a->over)
		a->over = n;
	return p;
}

static void pb_free(void *ud, void *p)
{
	(void)ud;
	(void)p;
}

ProtobufCAllocator arena_pb(Arena *a)
{
	return (ProtobufCAllocator){ .alloc = pb_alloc, .free = pb_free, .allocator_data = a };
}
