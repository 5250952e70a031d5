/* Errors travel as values: a pass or reader fills an Err and returns -1;
 * only main prints and chooses the exit status. The message is one line,
 * "where: what happened; what to do", where "where" is file[:line:col] or a
 * node/tensor name. */
#ifndef ERR_H
#define ERR_H
#include <stddef.h>

typedef struct {
	char msg[1024];
} Err;

/* Sets e->msg (when e is not NULL) and returns -1, so callers can
 * `return errf(e, ...)`. Names and strings quoted from input files go
 * in as they are: the finished message is passed through esc_text, so
 * no file can put a control character or a terminal escape on the
 * user's screen through an error, whatever the format string. */
int errf(Err *e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Prefixes an existing message: "prefix: old message". Returns -1. */
int errwrap(Err *e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Copies s into out (cap bytes, always NUL-terminated) with everything
 * that is not printable text written as an escape: C0 controls and DEL
 * as \n, \t, \r or \xNN, bytes that are not valid UTF-8 as \xNN, and the
 * code points terminals or layout act on (C1 controls, U+2028/U+2029,
 * bidirectional and zero-width format characters) as \u{NNNN}. Escapes
 * are never cut in half. Idempotent: escaped text is printable ASCII.
 * Returns out. */
char *esc_text(char *out, size_t cap, const char *s);

#endif
