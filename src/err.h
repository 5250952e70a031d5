/* Errors travel as values: a pass or reader fills an Err and returns -1;
 * only main prints and chooses the exit status. The message is one line,
 * "where: what happened; what to do", where "where" is file[:line:col] or a
 * node/tensor name. */
#ifndef ERR_H
#define ERR_H

typedef struct {
	char msg[1024];
} Err;

/* Sets e->msg (when e is not NULL) and returns -1, so callers can
 * `return errf(e, ...)`. */
int errf(Err *e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Prefixes an existing message: "prefix: old message". Returns -1. */
int errwrap(Err *e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
