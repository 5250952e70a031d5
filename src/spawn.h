#ifndef SPAWN_H
#define SPAWN_H
#include <pthread.h>
#include <signal.h>

/* A helper thread, with every signal blocked: they stay with the main
 * thread, whose handlers clean up a half-written output. But for the
 * faults, which go to the thread that made them, and blocked would kill
 * with no handler run: a helper reading a mapped file cut short meets
 * main.c's SIGBUS handler. 1: started. */
static inline int spawn(pthread_t *th, void *(*run)(void *), void *arg)
{
	sigset_t all, old;
	sigfillset(&all);
	sigdelset(&all, SIGBUS);
	sigdelset(&all, SIGSEGV);
	sigdelset(&all, SIGFPE);
	sigdelset(&all, SIGILL);
	pthread_sigmask(SIG_BLOCK, &all, &old);
	int ok = pthread_create(th, NULL, run, arg) == 0;
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	return ok;
}

#endif
