/* Progress on standard error for work that takes more than a second, and
 * only when standard error is a terminal: nothing in logs and pipes, and
 * nothing for quick runs. One line, redrawn at most ten times a second,
 * erased when done. */
#ifndef PROGRESS_H
#define PROGRESS_H

typedef struct {
	int on;          /* 0: every call is a no-op */
	double t0, last; /* start of the run; last redraw */
	int shown;       /* a line is on the terminal */
} Progress;

/* enabled: the caller's wish (not --quiet); the terminal test is here. */
void progress_init(Progress *p, int enabled);
/* "what: done/total unit" (unit "MiB" scales byte counts). */
void progress_step(Progress *p, const char *what, unsigned long long done, unsigned long long total,
		   const char *unit);
/* Erases the line, if any. */
void progress_done(Progress *p);

/* Seconds on the monotonic clock, and of CPU time the process's threads
 * have used so far (-v's timings). */
double progress_now(void);
double progress_cpu(void);

#endif
