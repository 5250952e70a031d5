#include "err.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

/* Length of the valid UTF-8 sequence at p (NUL-terminated), 0 when
 * invalid: overlong forms, surrogates and code points past U+10FFFF
 * included. */
static int utf8_seq(const unsigned char *p, uint32_t *cp)
{
	unsigned c = p[0];
	int n;
	uint32_t v;
	if (c < 0x80) {
		*cp = c;
		return 1;
	}
	if (c >= 0xc2 && c <= 0xdf)
		n = 2, v = c & 0x1f;
	else if (c >= 0xe0 && c <= 0xef)
		n = 3, v = c & 0x0f;
	else if (c >= 0xf0 && c <= 0xf4)
		n = 4, v = c & 0x07;
	else
		return 0;
	for (int i = 1; i < n; i++) {
		if ((p[i] & 0xc0) != 0x80)
			return 0;
		v = v << 6 | (p[i] & 0x3f);
	}
	if ((n == 3 && v < 0x800) || (n == 4 && (v < 0x10000 || v > 0x10ffff)) || (v >= 0xd800 && v <= 0xdfff))
		return 0;
	*cp = v;
	return n;
}

/* Code points a terminal or text layout acts on rather than shows. */
static int invisible(uint32_t cp)
{
	return (cp >= 0x80 && cp <= 0x9f) ||     /* C1 controls: CSI, OSC, ... */
	       cp == 0xad ||                       /* soft hyphen */
	       (cp >= 0x200b && cp <= 0x200f) ||   /* zero-width, LRM, RLM */
	       (cp >= 0x2028 && cp <= 0x202e) ||   /* line/paragraph separators, bidi embeddings */
	       (cp >= 0x2060 && cp <= 0x206f) ||   /* word joiner, bidi isolates, invisible operators */
	       cp == 0xfeff ||                     /* zero-width no-break space */
	       (cp >= 0xfff9 && cp <= 0xfffb);     /* interlinear annotation */
}

char *esc_text(char *out, size_t cap, const char *s)
{
	size_t n = 0;
	if (!cap)
		return out;
	for (const unsigned char *p = (const unsigned char *)s; *p;) {
		char buf[16];
		uint32_t cp = 0;
		int len = utf8_seq(p, &cp);
		size_t k;
		if (!len) {
			k = (size_t)snprintf(buf, sizeof buf, "\\x%02x", *p);
			len = 1;
		} else if (cp == '\n') {
			k = (size_t)snprintf(buf, sizeof buf, "\\n");
		} else if (cp == '\t') {
			k = (size_t)snprintf(buf, sizeof buf, "\\t");
		} else if (cp == '\r') {
			k = (size_t)snprintf(buf, sizeof buf, "\\r");
		} else if (cp < 0x20 || cp == 0x7f) {
			k = (size_t)snprintf(buf, sizeof buf, "\\x%02x", (unsigned)cp);
		} else if (invisible(cp)) {
			k = (size_t)snprintf(buf, sizeof buf, "\\u{%04x}", (unsigned)cp);
		} else {
			k = (size_t)len;
			memcpy(buf, p, k);
		}
		if (n + k >= cap)
			break;
		memcpy(out + n, buf, k);
		n += k;
		p += len;
	}
	out[n] = 0;
	return out;
}

int errf(Err *e, const char *fmt, ...)
{
	if (!e)
		return -1;
	char raw[sizeof e->msg];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(raw, sizeof raw, fmt, ap);
	va_end(ap);
	esc_text(e->msg, sizeof e->msg, raw);
	return -1;
}

int errwrap(Err *e, const char *fmt, ...)
{
	if (!e)
		return -1;
	char old[sizeof e->msg], pre[sizeof e->msg], raw[sizeof e->msg];
	memcpy(old, e->msg, sizeof old);
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(raw, sizeof raw, fmt, ap);
	va_end(ap);
	esc_text(pre, sizeof pre, raw);
	/* Keep the start of both when the whole does not fit. */
	size_t cap = sizeof e->msg - 1, n = strlen(pre), m = strlen(old);
	if (n > cap - 2)
		n = cap - 2;
	memcpy(e->msg, pre, n);
	memcpy(e->msg + n, ": ", 2);
	n += 2;
	if (m > cap - n)
		m = cap - n;
	memcpy(raw, e->msg, n);
	memcpy(raw + n, old, m);
	raw[n + m] = 0;
	/* A cut may split a UTF-8 sequence: escape the joint text again. */
	esc_text(e->msg, sizeof e->msg, raw);
	return -1;
}
