/* Arena memory: everything a run allocates lives until arena_free.
 * The loaded model, every new node and tensor, and the weight sources share
 * one arena, so no pass frees anything and no ownership is tracked. */
#ifndef ARENA_H
#define ARENA_H
#include <stddef.h>
#include <protobuf-c/protobuf-c.h>

typedef struct Arena Arena;

Arena *arena_new(void);
void arena_free(Arena *a);
/* Zeroed, 16-byte aligned; aborts on out-of-memory (nothing sane to unwind). */
void *arena_alloc(Arena *a, size_t n);
/* Same, not zeroed: for buffers about to be filled whole. */
void *arena_alloc_raw(Arena *a, size_t n);
void *arena_dup(Arena *a, const void *p, size_t n);
char *arena_strdup(Arena *a, const char *s);
char *arena_printf(Arena *a, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
/* Grow an array allocated from the arena (old block is abandoned). */
void *arena_grow(Arena *a, void *p, size_t old, size_t new);
/* Bytes handed out so far, for reports and benchmarks. */
size_t arena_used(const Arena *a);
/* A protobuf-c allocator drawing from the arena; free is a no-op. */
ProtobufCAllocator arena_pb(Arena *a);

#endif
