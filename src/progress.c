#include "progress.h"

#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static double seconds(clockid_t id)
{
	struct timespec t;
	clock_gettime(id, &t);
	return (double)t.tv_sec + t.tv_nsec * 1e-9;
}

double progress_now(void)
{
	return seconds(CLOCK_MONOTONIC);
}

double progress_cpu(void)
{
	return seconds(CLOCK_PROCESS_CPUTIME_ID);
}

void progress_init(Progress *p, int enabled)
{
	*p = (Progress){ .on = enabled && isatty(STDERR_FILENO), .t0 = progress_now() };
}

void progress_step(Progress *p, const char *what, unsigned long long done, unsigned long long total,
		   const char *unit)
{
	if (!p->on)
		return;
	double t = progress_now();
	if (t - p->t0 < 1.0 || (p->shown && t - p->last < 0.1))
		return;
	p->last = t;
	p->shown = 1;
	if (unit && !strcmp(unit, "MiB"))
		fprintf(stderr, "\r\033[Konnx-moe-repair: %s %llu/%llu MiB", what, done >> 20, total >> 20);
	else
		fprintf(stderr, "\r\033[Konnx-moe-repair: %s %llu/%llu%s%s", what, done, total, unit ? " " : "",
			unit ? unit : "");
	fflush(stderr);
}

void progress_done(Progress *p)
{
	if (p->on && p->shown) {
		fputs("\r\033[K", stderr);
		fflush(stderr);
	}
	p->shown = 0;
}
