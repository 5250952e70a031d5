#include "duo.h"

#include <pthread.h>
#include <time.h>

#include "spawn.h"

/* A handoff through a mutex and condition variable cost 26 us here (a
 * futex wake under a paravirtualised MMU): more than small jobs take.
 * So jobs below DUO_MIN run in the caller, and each side spins a while
 * before it sleeps: a layer's jobs come a few hundred microseconds apart,
 * and a spinning side takes a job or its end at once. */
enum { SPIN_NS = 100000 };

static struct {
	pthread_mutex_t mu;
	pthread_cond_t go, done;
	pthread_t th;
	void (*f)(void *, int);
	void *arg;
	/* Jobs handed to the helper and the last it finished; who sleeps.
	 * Sequentially consistent: a side stores its sleeping flag, then
	 * reads the other's counter; the other stores the counter, then
	 * reads the flag, and wakes the sleeper under the mutex. */
	unsigned posted, finished;
	int helper_sleeps, caller_sleeps, stop;
	int on;
	Arena *a;
} d = { .mu = PTHREAD_MUTEX_INITIALIZER, .go = PTHREAD_COND_INITIALIZER, .done = PTHREAD_COND_INITIALIZER };

/* Set in a thread running a half: a duo_run from there runs serially. */
static _Thread_local int inhalf;

#define LOAD(x) __atomic_load_n(&(x), __ATOMIC_SEQ_CST)
#define STORE(x, v) __atomic_store_n(&(x), (v), __ATOMIC_SEQ_CST)

static void relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#endif
}

static long long ns(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec * 1000000000LL + t.tv_nsec;
}

/* Waits until *word differs from (neq) or equals (!neq) v, or stop. */
static void wait_for(unsigned *word, unsigned v, int neq, int *sleeps, pthread_cond_t *cv)
{
	long long end = ns() + SPIN_NS;
	for (unsigned i = 1;; i++) {
		if ((LOAD(*word) != v) == neq || LOAD(d.stop))
			return;
		relax();
		if (!(i % 64) && ns() > end)
			break;
	}
	pthread_mutex_lock(&d.mu);
	STORE(*sleeps, 1);
	while ((LOAD(*word) != v) != neq && !LOAD(d.stop))
		pthread_cond_wait(cv, &d.mu);
	STORE(*sleeps, 0);
	pthread_mutex_unlock(&d.mu);
}

static void wake(int *sleeps, pthread_cond_t *cv)
{
	if (!LOAD(*sleeps))
		return;
	pthread_mutex_lock(&d.mu);
	pthread_cond_signal(cv);
	pthread_mutex_unlock(&d.mu);
}

static void *helper(void *u)
{
	(void)u;
	inhalf = 1;
	for (unsigned seen = 0;;) {
		wait_for(&d.posted, seen, 1, &d.helper_sleeps, &d.go);
		if (LOAD(d.stop))
			break;
		seen = LOAD(d.posted);
		d.f(d.arg, 1);
		STORE(d.finished, seen);
		wake(&d.caller_sleeps, &d.done);
	}
	return NULL;
}

int duo_start(void)
{
	if (d.on)
		return 1;
	d.stop = 0;
	d.posted = d.finished = 0;
	d.a = arena_new();
	d.on = spawn(&d.th, helper, NULL);
	if (!d.on) {
		arena_free(d.a);
		d.a = NULL;
	}
	return d.on;
}

void duo_stop(void)
{
	if (!d.on)
		return;
	pthread_mutex_lock(&d.mu);
	STORE(d.stop, 1);
	pthread_cond_signal(&d.go);
	pthread_mutex_unlock(&d.mu);
	pthread_join(d.th, NULL);
	d.on = 0;
	arena_free(d.a);
	d.a = NULL;
}

Arena *duo_arena(void)
{
	return d.on && !inhalf ? d.a : NULL;
}

void duo_run(void (*f)(void *, int), void *arg, size_t work)
{
	if (!d.on || inhalf || work < DUO_MIN) {
		f(arg, 0);
		f(arg, 1);
		return;
	}
	d.f = f;
	d.arg = arg;
	unsigned me = d.posted + 1;
	STORE(d.posted, me);
	wake(&d.helper_sleeps, &d.go);
	inhalf = 1;
	f(arg, 0);
	inhalf = 0;
	wait_for(&d.finished, me, 0, &d.caller_sleeps, &d.done);
}
