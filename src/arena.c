#include "arena.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

/* Blocks are chained; big requests get a block of their own so a 1 GB
 * initializer does not waste a tail of the current block. */
enum { BLOCK = 1 << 20, ALIGN = 16 };

typedef struct Block Block;
struct Block {
	Block *next;
	size_t cap, used;
	_Alignas(16) unsigned char data[];
};

struct Arena {
	Block *head;
	size_t total;
};

static Block *block_new(size_t cap)
{
	/* Big blocks (new weights) in transparent huge pages where the kernel
	 * offers them: one fault per 2 MiB instead of 512 shows in a 1 GB repair. */
	enum { HUGE = 2 << 20 };
	Block *b = NULL;
	if (cap >= 2 * HUGE) {
		if (posix_memalign((void **)&b, HUGE, sizeof *b + cap))
			b = NULL;
		else
			madvise(b, sizeof *b + cap, MADV_HUGEPAGE);
	} else {
		b = malloc(sizeof *b + cap);
	}
	if (!b) {
		fprintf(stderr, "onnx-moe-repair: out of memory (%zu bytes)\n", cap);
		abort();
	}
	b->next = NULL;
	b->cap = cap;
	b->used = 0;
	return b;
}

Arena *arena_new(void)
{
	Arena *a = calloc(1, sizeof *a);
	if (!a)
		abort();
	a->head = block_new(BLOCK);
	return a;
}

void arena_free(Arena *a)
{
	if (!a)
		return;
	for (Block *b = a->head, *n; b; b = n) {
		n = b->next;
		free(b);
	}
	free(a);
}

void *arena_alloc_raw(Arena *a, size_t n)
{
	size_t need = (n + ALIGN - 1) & ~(size_t)(ALIGN - 1);
	if (need < n)
		abort();
	Block *b = a->head;
	if (b->cap - b->used < need) {
		if (need > BLOCK / 4) {
			/* Private block, linked behind the head so the head keeps serving small requests. */
			Block *big = block_new(need);
			big->used = need;
			big->next = b->next;
			b->next = big;
			a->total += need;
			return big->data;
		}
		b = block_new(BLOCK);
		b->next = a->head;
		a->head = b;
	}
	void *p = b->data + b->used;
	b->used += need;
	a->total += need;
	return p;
}

void *arena_alloc(Arena *a, size_t n)
{
	void *p = arena_alloc_raw(a, n);
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

char *arena_printf(Arena *a, const char *fmt, ...)
{
	va_list ap, aq;
	va_start(ap, fmt);
	va_copy(aq, ap);
	int n = vsnprintf(NULL, 0, fmt, ap);
	va_end(ap);
	char *s = arena_alloc(a, (size_t)n + 1);
	vsnprintf(s, (size_t)n + 1, fmt, aq);
	va_end(aq);
	return s;
}

void *arena_grow(Arena *a, void *p, size_t old, size_t new)
{
	void *q = arena_alloc(a, new);
	if (p && old)
		memcpy(q, p, old < new ? old : new);
	return q;
}

size_t arena_used(const Arena *a)
{
	return a->total;
}

static void *pb_alloc(void *ud, size_t n)
{
	/* protobuf-c initialises what it allocates; zeroing 1 GB of weights twice
	 * would show in the benchmark. */
	return arena_alloc_raw(ud, n);
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
