#include "map.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Eight bytes a step: value names run to tens of bytes and the graph
 * core hashes millions of them per repair, so a byte-at-a-time hash shows
 * in the profile. Each step's multiply spreads a word over the state; the
 * length goes in so a NUL-padded tail cannot collide with a longer name. */
uint64_t map_hash(const char *s)
{
	size_t n = strlen(s);
	uint64_t h = 0x9e3779b97f4a7c15ull ^ n;
	for (; n >= 8; n -= 8, s += 8) {
		uint64_t w;
		memcpy(&w, s, 8);
		h = (h ^ w) * 0xff51afd7ed558ccdull;
		h ^= h >> 32;
	}
	if (n) {
		uint64_t w = 0;
		memcpy(&w, s, n);
		h = (h ^ w) * 0xc4ceb9fe1a85ec53ull;
		h ^= h >> 29;
	}
	return h;
}

/* Slots are picked by the low bits: mix the high ones into them. */
static uint64_t fmix(uint64_t x)
{
	x ^= x >> 33;
	x *= 0xff51afd7ed558ccdull;
	return x ^ (x >> 33);
}

static uint64_t hash(const Map *m, const void *key)
{
	return fmix(m->byptr ? (uintptr_t)key : map_hash(key));
}

uint64_t map_key_hash(const char *key)
{
	return fmix(map_hash(key));
}

static void init(Map *m, Arena *a, size_t hint, int byptr)
{
	size_t cap = 16;
	while (cap < hint * 2)
		cap <<= 1;
	m->a = a;
	m->cap = cap;
	m->len = 0;
	m->byptr = byptr;
	m->slot = arena_alloc(a, cap * sizeof *m->slot);
}

static uintptr_t tag(uint64_t h)
{
	return (uintptr_t)h & ~MAP_KEY_MASK;
}

static MapSlot *find_h(const Map *m, const void *key, uint64_t h)
{
	size_t i = h & (m->cap - 1);
	/* The tag compared on its own: a string looked up from an address
	 * past the mask (none is stored there) still finds its equal. */
	uintptr_t t = tag(h), kt = (uintptr_t)key | t;
	for (;; i = (i + 1) & (m->cap - 1)) {
		MapSlot *s = &m->slot[i];
		if (!s->kt || s->kt == kt || (!m->byptr && (s->kt & ~MAP_KEY_MASK) == t && strcmp(map_slot_key(s), key) == 0))
			return s;
	}
}

void map_prefetch_h(const Map *m, uint64_t h)
{
	if (m->cap)
		__builtin_prefetch(&m->slot[h & (m->cap - 1)]);
}

void map_prefetch(const Map *m, const void *key)
{
	if (m->cap)
		map_prefetch_h(m, hash(m, key));
}

static void *get_h(const Map *m, const void *key, uint64_t h)
{
	if (!m->cap)
		return NULL;
	MapSlot *s = find_h(m, key, h);
	return s->kt ? s->val : NULL;
}

static void *get(const Map *m, const void *key)
{
	return m->cap ? get_h(m, key, hash(m, key)) : NULL;
}

/* The slot of key (hash h), claimed for it when absent (value NULL). */
static MapSlot *claim_h(Map *m, const void *key, uint64_t h)
{
	if (!m->cap) /* zero-initialised with only .a set: start small */
		init(m, m->a, 8, m->byptr);
	if ((m->len + 1) * 4 > m->cap * 3) {
		MapSlot *old = m->slot;
		size_t oldcap = m->cap;
		m->cap *= 2;
		m->slot = arena_alloc(m->a, m->cap * sizeof *m->slot);
		/* Only 16 bits of each hash are kept: the rest is taken again,
		 * string keys loaded a few slots ahead (each is a cache miss). */
		for (size_t i = 0; i < oldcap; i++) {
			if (!m->byptr && i + 16 < oldcap && old[i + 16].kt)
				__builtin_prefetch(map_slot_key(&old[i + 16]));
			if (old[i].kt)
				*find_h(m, map_slot_key(&old[i]), hash(m, map_slot_key(&old[i]))) = old[i];
		}
		arena_release(m->a, old, oldcap * sizeof *old);
	}
	MapSlot *s = find_h(m, key, h);
	if (!s->kt) {
		if ((uintptr_t)key & ~MAP_KEY_MASK) {
			fprintf(stderr, "onnx-moe-repair: internal error: a map key past 48 bits (%p); please report this machine\n", key);
			abort();
		}
		s->kt = (uintptr_t)key | tag(h);
		s->val = NULL;
		m->len++;
	}
	return s;
}

static MapSlot *claim(Map *m, const void *key)
{
	return claim_h(m, key, hash(m, key));
}

static void *put(Map *m, const void *key, void *val)
{
	MapSlot *s = claim(m, key);
	void *prev = s->val;
	s->val = val;
	return prev;
}

const char *map_add(Map *m, Arena *a, const char *key, uint64_t h, int *added)
{
	size_t len = m->len;
	MapSlot *s = claim_h(m, key, h);
	*added = m->len != len;
	if (*added) {
		char *k = arena_strdup(a, key); /* equal, so its slot stays right */
		s->kt = (uintptr_t)k | tag(h);
		s->val = k;
	}
	return map_slot_key(s);
}

void map_init(Map *m, Arena *a, size_t hint) { init(m, a, hint, 0); }
void *map_get(const Map *m, const char *key) { return get(m, key); }
void *map_put(Map *m, const char *key, void *val) { return put(m, key, val); }
void **map_ref(Map *m, const char *key) { return &claim(m, key)->val; }
void *map_get_h(const Map *m, const char *key, uint64_t h) { return get_h(m, key, h); }
void **map_ref_h(Map *m, const char *key, uint64_t h) { return &claim_h(m, key, h)->val; }
void pmap_init(PMap *m, Arena *a, size_t hint) { init(m, a, hint, 1); }
void *pmap_get(const PMap *m, const void *key) { return get(m, key); }
void pmap_put(PMap *m, const void *key, void *val)
{
	if (!m->cap)
		m->byptr = 1;
	put(m, key, val);
}

void **pmap_ref(PMap *m, const void *key)
{
	if (!m->cap)
		m->byptr = 1;
	return &claim(m, key)->val;
}
