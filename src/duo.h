/* The second core for work that splits in two: the weights a repair
 * compares (each layer's template whole, its present experts on a sample)
 * are half of a large model's repair, and the other core sat idle through
 * them; the load's wire check runs beside its search for zeros to cut
 * (model.c).
 *
 * duo_run(f, arg) runs f(arg, 1) on a helper thread while the caller runs
 * f(arg, 0), and returns once both are done. Without the helper (not
 * started, its thread refused, a call from inside a half, a small job) the caller
 * runs f(arg, 0) then f(arg, 1): so a job's result must not depend on
 * which thread ran which half, nor on their order. A half reads what the
 * caller prepared and writes only its own results and arena: no index,
 * graph or shared arena is touched from the helper. */
#ifndef DUO_H
#define DUO_H
#include "arena.h"

/* Bytes a job should read (or the like in work) to be split: below, the
 * handoff would cost more than the half it saves. */
enum { DUO_MIN = 256 << 10 };

/* Starts the helper (1), or leaves duo_run serial (0). */
int duo_start(void);
/* Joins the helper and frees its arena; harmless when not started. */
void duo_stop(void);
/* What half 1 of the next duo_run may allocate from, asked by the caller
 * before the run (inside a half it is NULL): the helper's own arena when
 * the helper runs, else NULL (the caller's arenas then serve, the halves
 * running one after the other). Emptied by duo_stop, or by the caller
 * with arena_reset between runs. */
Arena *duo_arena(void);
/* work: about how many bytes the job reads; under DUO_MIN the caller
 * runs both halves. */
void duo_run(void (*f)(void *arg, int half), void *arg, size_t work);

#endif
