/* Hash maps (open addressing), arena-backed, in two flavours sharing one
 * implementation: Map is keyed by string, PMap by pointer, for side
 * tables over protobuf objects (node -> info). Keys are not copied: they
 * must outlive the map (they live in the arena or in the mapped model).
 * Removal is not supported; passes mark values dead instead. */
#ifndef MAP_H
#define MAP_H
#include <stddef.h>
#include <stdint.h>
#include "arena.h"

/* A slot is 16 bytes: the key's address with the top 16 bits of its
 * hash above it (user addresses fit in 48 bits; where pointers are 32
 * bits no bits are kept). Probes compare those bits before the strings;
 * four slots share a cache line, not two and two thirds, and the tables a
 * 400-layer repair probes shrink by a third (peak RSS 109.5 -> 104.7 MB).
 * Read a slot's key with map_slot_key. Keys (pointer keys too) must fit
 * in MAP_KEY_MASK; one that does not stops the program. */
typedef struct {
	uintptr_t kt;
	void *val;
} MapSlot;

#if UINTPTR_MAX > 0xffffffffu
#define MAP_KEY_MASK (((uintptr_t)1 << 48) - 1)
#else
#define MAP_KEY_MASK UINTPTR_MAX
#endif

static inline const void *map_slot_key(const MapSlot *s)
{
	return (const void *)(s->kt & MAP_KEY_MASK);
}

typedef struct {
	Arena *a;
	MapSlot *slot;
	size_t cap, len; /* cap is a power of two */
	int byptr;       /* keys compared as pointers, not strings */
} Map;

typedef Map PMap;

void map_init(Map *m, Arena *a, size_t hint);
void *map_get(const Map *m, const char *key);
/* Inserts or replaces; returns the previous value (NULL when new). */
void *map_put(Map *m, const char *key, void *val);
/* The value slot of key, inserted holding NULL when absent: a get and a
 * put in one probe. The slot is valid until the next insertion. */
void **map_ref(Map *m, const char *key);
/* A set of names: the map's own copy of key (hash h, map_key_hash's),
 * made in a and added (its value the copy, *added 1) when key was absent.
 * One probe. */
const char *map_add(Map *m, Arena *a, const char *key, uint64_t h, int *added);
uint64_t map_hash(const char *s);
/* Starts loading key's first slot into the cache (pointer keys too):
 * for loops over many keys, a few ahead of the one probed, where each
 * probe of a large table would otherwise wait for memory. */
void map_prefetch(const Map *m, const void *key);
/* The hash every string map takes of key: a name put in or looked up in
 * several maps is hashed once (the index hashed each node output four
 * times, for its prefetches and its two maps), and the _h calls take it. */
uint64_t map_key_hash(const char *key);
void map_prefetch_h(const Map *m, uint64_t h);
void *map_get_h(const Map *m, const char *key, uint64_t h);
void **map_ref_h(Map *m, const char *key, uint64_t h);

void pmap_init(PMap *m, Arena *a, size_t hint);
void *pmap_get(const PMap *m, const void *key);
void pmap_put(PMap *m, const void *key, void *val);
void **pmap_ref(PMap *m, const void *key);

/* Iterate: for (size_t i = 0; i < m.cap; i++) if (m.slot[i].kt) ... map_slot_key(&m.slot[i]) */

#endif
