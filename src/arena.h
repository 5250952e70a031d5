/* Arena memory: everything a run allocates lives until arena_free.
 * The loaded model, every new node and tensor, and the weight sources share
 * one arena, so no pass frees anything and no ownership is tracked.
 *
 * The memory budget. Every arena block counts against one process-wide
 * budget (--max-memory; by default half the physical memory, less when
 * an address-space or data rlimit is lower). Two kinds of allocation:
 *
 * - Sizes that come from an input file (a zip member's inflated size, a
 *   tensor's bytes, a strided copy, a converted buffer, protobuf-c's
 *   unpack) go through arena_try, which checks the budget *before*
 *   allocating and returns NULL with an error ("needs N bytes, more than
 *   ...") when it would be passed or malloc fails. Those are the
 *   allocations a hostile file can make large, so those are checked.
 * - Everything else (nodes, names, index entries: each small, their
 *   number bounded by the input's size) uses arena_alloc and never gets
 *   NULL, so the passes need no check per allocation. Past the budget the
 *   arena still serves them but records the overrun; loops whose
 *   allocations grow with their input (the pickle interpreter, the JSON
 *   parser, the model load) call arena_check at their steps and stop with
 *   the same error. If malloc itself fails there, a reserve set aside at
 *   start-up is given back so the run can reach its next check; only when
 *   even that is gone does the process abort, as it did before.
 */
#ifndef ARENA_H
#define ARENA_H
#include <stddef.h>
#include <protobuf-c/protobuf-c.h>

#include "err.h"

typedef struct Arena Arena;

Arena *arena_new(void);
void arena_free(Arena *a);
/* Empties the arena for reuse, keeping its standard blocks: what it handed
 * out is gone, as after arena_free, without new pages to fault in. */
void arena_reset(Arena *a);
/* Zeroed, 8-byte aligned (any type but long double and vectors); never NULL (see above: past the budget the
 * overrun is recorded for arena_check; aborts only when malloc fails
 * after the reserve is spent). */
void *arena_alloc(Arena *a, size_t n);
/* Same, not zeroed: for buffers about to be filled whole. */
void *arena_alloc_raw(Arena *a, size_t n);
/* Same, for new weights: packed one after another into blocks of huge
 * pages populated as they fill, where a 1 MiB tensor would otherwise get
 * a block of its own in 4 KiB pages (slow to write, and to write out,
 * under a paravirtualised MMU). Never given back by arena_release. */
void *arena_bulk(Arena *a, size_t n);
void *arena_dup(Arena *a, const void *p, size_t n);
char *arena_strdup(Arena *a, const char *s);
char *arena_printf(Arena *a, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
/* The strings up to a NULL, joined: the names the passes make per node
 * (prefix + op, name + "_output_0"), where vsnprintf was 4% of a
 * graph-heavy repair's instructions. */
char *arena_cat(Arena *a, const char *s, ...) __attribute__((sentinel));
/* Grow an array allocated from the arena: p is invalid afterwards (a
 * large one is released, a small one abandoned). */
void *arena_grow(Arena *a, void *p, size_t old, size_t new);
/* Gives the n bytes at p back to the system now when they are a block of
 * their own (a request past a quarter of a standard block); anything
 * smaller stays until arena_free or arena_reset. For large arrays and
 * tables replaced by bigger ones: the old copy would be dead memory. */
void arena_release(Arena *a, void *p, size_t n);
/* Bytes handed out so far, for reports and benchmarks. */
size_t arena_used(const Arena *a);
/* A protobuf-c allocator drawing from the arena; free is a no-op. It
 * returns NULL past the budget (protobuf-c then fails the unpack) and
 * records it, so arena_check tells why. */
ProtobufCAllocator arena_pb(Arena *a);

/* n bytes, not zeroed, for a size an input file decided: NULL with e set
 * ("needs N bytes, more than the memory budget ...") when the budget
 * would be passed or malloc fails. Callers prefix where. */
void *arena_try(Arena *a, size_t n, Err *e);
/* 0, or -1 with the budget error when an allocation of this arena went
 * past the budget (or failed) since it was made. */
int arena_check(const Arena *a, Err *e);
/* The budget in bytes; 0 selects the default. */
void arena_set_budget(size_t bytes);
size_t arena_budget(void);
/* 1: a helper thread keeps one standard block populated ahead, which the
 * next arena to need one takes (see arena.c); 0: it stops and its block
 * goes. For a stretch of work on one thread that fills many blocks. */
void arena_prefill(int on);
/* Bytes of all arenas' blocks now held against the budget. */
size_t arena_held(void);
/* Fills e with the budget error for a request of n bytes; returns -1. */
int arena_budget_err(Err *e, size_t n);

#endif
