#include "map.h"

#include <string.h>

uint64_t map_hash(const char *s)
{
	uint64_t h = 1469598103934665603ull;
	for (; *s; s++)
		h = (h ^ (unsigned char)*s) * 1099511628211ull;
	return h;
}

void map_init(Map *m, Arena *a, size_t hint)
{
	size_t cap = 16;
	while (cap < hint * 2)
		cap <<= 1;
	m->a = a;
	m->cap = cap;
	m->len = 0;
	m->slot = arena_alloc(a, cap * sizeof *m->slot);
}

static MapSlot *find(const Map *m, const char *key)
{
	size_t i = map_hash(key) & (m->cap - 1);
	for (;; i = (i + 1) & (m->cap - 1)) {
		MapSlot *s = &m->slot[i];
		if (!s->key || strcmp(s->key, key) == 0)
			return s;
	}
}

void *map_get(const Map *m, const char *key)
{
	if (!m->cap)
		return NULL;
	MapSlot *s = find(m, key);
	return s->key ? s->val : NULL;
}

void *map_put(Map *m, const char *key, void *val)
{
	if (!m->cap)
		map_init(m, m->a, 8);
	if ((m->len + 1) * 4 > m->cap * 3) {
		MapSlot *old = m->slot;
		size_t oldcap = m->cap;
		m->cap *= 2;
		m->slot = arena_alloc(m->a, m->cap * sizeof *m->slot);
		for (size_t i = 0; i < oldcap; i++)
			if (old[i].key)
				*find(m, old[i].key) = old[i];
	}
	MapSlot *s = find(m, key);
	void *prev = s->key ? s->val : NULL;
	if (!s->key) {
		s->key = key;
		m->len++;
	}
	s->val = val;
	return prev;
}

static size_t phash(const void *p)
{
	uint64_t x = (uintptr_t)p;
	x ^= x >> 33;
	x *= 0xff51afd7ed558ccdull;
	x ^= x >> 33;
	return (size_t)x;
}

void pmap_init(PMap *m, Arena *a, size_t hint)
{
	size_t cap = 16;
	while (cap < hint * 2)
		cap <<= 1;
	m->a = a;
	m->cap = cap;
	m->len = 0;
	m->slot = arena_alloc(a, cap * sizeof *m->slot);
}

static PMapSlot *pfind(const PMap *m, const void *key)
{
	size_t i = phash(key) & (m->cap - 1);
	while (m->slot[i].key && m->slot[i].key != key)
		i = (i + 1) & (m->cap - 1);
	return &m->slot[i];
}

void *pmap_get(const PMap *m, const void *key)
{
	if (!m->cap)
		return NULL;
	PMapSlot *s = pfind(m, key);
	return s->key ? s->val : NULL;
}

void pmap_put(PMap *m, const void *key, void *val)
{
	if ((m->len + 1) * 4 > m->cap * 3) {
		PMapSlot *old = m->slot;
		size_t oldcap = m->cap;
		m->cap *= 2;
		m->slot = arena_alloc(m->a, m->cap * sizeof *m->slot);
		for (size_t i = 0; i < oldcap; i++)
			if (old[i].key)
				*pfind(m, old[i].key) = old[i];
	}
	PMapSlot *s = pfind(m, key);
	if (!s->key) {
		s->key = key;
		m->len++;
	}
	s->val = val;
}
