/* A small strict JSON parser (RFC 8259) for the headers of weight files:
 * bounded nesting, no duplicate-key folding (callers decide), numbers kept
 * as text so 64-bit offsets stay exact. Everything lives in the arena. */
#ifndef JSON_H
#define JSON_H
#include <stddef.h>
#include <stdint.h>
#include "arena.h"
#include "err.h"

enum { J_NULL, J_FALSE, J_TRUE, J_NUM, J_STR, J_ARR, J_OBJ };
enum { JSON_MAXDEPTH = 32 };

typedef struct JVal JVal;
struct JVal {
	int type;
	size_t off;        /* byte offset in the text, for messages */
	const char *s;     /* J_STR: decoded UTF-8 (NUL-free); J_NUM: the literal */
	size_t n;          /* J_ARR, J_OBJ: element count */
	const char **key;  /* J_OBJ: keys in document order */
	JVal **v;          /* J_ARR, J_OBJ: elements */
};

/* Errors read "byte N: what". */
JVal *json_parse(const char *text, size_t len, Arena *a, Err *e);
/* The same, failing once the parse has allocated more than maxmem bytes
 * (a text of small values takes ~40 bytes of tree per byte) or the
 * memory budget is passed. */
JVal *json_parse_limited(const char *text, size_t len, size_t maxmem, Arena *a, Err *e);
/* Parses text that must be one object member by member, for headers of
 * many members: fn gets each key and value, both in tmp, which is reset
 * before the next member, so the parse needs the memory of one member
 * (maxmem bounds each) and not of the tree. Stops at fn's nonzero return,
 * whose error it keeps; errors of the text read as json_parse's. */
int json_members(const char *text, size_t len, size_t maxmem, Arena *tmp,
	int (*fn)(void *ud, const char *key, const JVal *v, Err *e), void *ud, Err *e);
/* A non-negative integer literal (no sign, fraction or exponent) that fits
 * in int64; -1 when v is anything else. */
int json_uint(const JVal *v, int64_t *out);
const char *json_type_name(int type);

#endif
