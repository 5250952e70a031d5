#include "err.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

/* Length of the valid UTF-8 sequence at s that is safe to print (not a
 * C1 control, a bidirectional override or a line separator), else 0. */
static size_t printable_utf8(const unsigned char *s)
{
	uint32_t cp;
	size_t n;
	if (s[0] >= 0xc2 && s[0] <= 0xdf) {
		n = 2;
		cp = s[0] & 0x1fu;
	} else if (s[0] >= 0xe0 && s[0] <= 0xef) {
		n = 3;
		cp = s[0] & 0x0fu;
	} else if (s[0] >= 0xf0 && s[0] <= 0xf4) {
		n = 4;
		cp = s[0] & 0x07u;
	} else {
		return 0;
	}
	for (size_t i = 1; i < n; i++) {
		if ((s[i] & 0xc0) != 0x80)
			return 0;
		cp = cp << 6 | (s[i] & 0x3fu);
	}
	if ((n == 3 && cp < 0x800) || (n == 4 && (cp < 0x10000 || cp > 0x10ffff)) || (cp >= 0xd800 && cp <= 0xdfff))
		return 0; /* overlong, out of range, surrogate */
	if (cp <= 0x9f || (cp >= 0x200b && cp <= 0x200f) || (cp >= 0x2028 && cp <= 0x202e) ||
	    (cp >= 0x2066 && cp <= 0x2069) || cp == 0xfeff)
		return 0;
	return n;
}

/* Messages quote names and strings from input files: control characters,
 * invalid UTF-8 and characters that reorder or break a terminal line are
 * written as \xNN, so the message stays one honest line. Idempotent (a
 * backslash is left alone), so wrapping an escaped message is safe. */
static void escape(char *msg, size_t cap)
{
	char out[sizeof ((Err *)0)->msg];
	size_t k = 0;
	const unsigned char *s = (const unsigned char *)msg;
	if (cap > sizeof out)
		cap = sizeof out;
	while (*s) {
		size_t n = *s >= 0x20 && *s < 0x7f ? 1 : *s >= 0x80 ? printable_utf8(s) : 0;
		if (n) {
			if (k + n >= cap)
				break;
			memcpy(out + k, s, n);
			k += n;
			s += n;
		} else {
			if (k + 4 >= cap)
				break;
			snprintf(out + k, 5, "\\x%02x", *s);
			k += 4;
			s++;
		}
	}
	out[k] = 0;
	memcpy(msg, out, k + 1);
}

int errf(Err *e, const char *fmt, ...)
{
	if (!e)
		return -1;
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(e->msg, sizeof e->msg, fmt, ap);
	va_end(ap);
	escape(e->msg, sizeof e->msg);
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
	escape(e->msg, sizeof e->msg);
	return -1;
}
