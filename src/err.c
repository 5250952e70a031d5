#include "err.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

int errf(Err *e, const char *fmt, ...)
{
	if (!e)
		return -1;
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(e->msg, sizeof e->msg, fmt, ap);
	va_end(ap);
	/* One line, always: a message quoting user data must not break a log. */
	for (char *p = e->msg; *p; p++)
		if (*p == '\n' || *p == '\r')
			*p = ' ';
	return -1;
}

int errwrap(Err *e, const char *fmt, ...)
{
	if (!e)
		return -1;
	char old[sizeof e->msg], pre[sizeof e->msg];
	memcpy(old, e->msg, sizeof old);
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(pre, sizeof pre, fmt, ap);
	va_end(ap);
	/* Keep the start of both when the whole does not fit. */
	size_t cap = sizeof e->msg - 1, n = strlen(pre), m = strlen(old);
	if (n > cap - 2)
		n = cap - 2;
	memcpy(e->msg, pre, n);
	memcpy(e->msg + n, ": ", 2);
	n += 2;
	if (m > cap - n)
		m = cap - n;
	memcpy(e->msg + n, old, m);
	e->msg[n + m] = 0;
	return -1;
}
