/* kmap.h: an exact-match hash map from 64-bit keys to 32-bit indices (open addressing). */
#ifndef INA_KMAP_H
#define INA_KMAP_H


/*
 * Shared by ina-ps (key -> record), ina-switch (hot key -> slot position)
 * and libina (hot key -> replica position, key dedup). Linear probing over
 * a power-of-two table kept at most half full, so a lookup touches one or
 * two cache lines. Memory grows only through ina__kmap_grow(), never inside
 * a lookup or an insert: callers that enforce a memory limit (ina-ps) ask
 * ina__kmap_full() and check the bytes of the next size first.
 * Every 64-bit value is a valid key; the value INA_KMAP_NONE marks an empty
 * cell, so it cannot be stored.
 */
#include <stddef.h>
#include <stdint.h>

#define INA_KMAP_NONE UINT32_MAX

struct ina_kmap {
    uint64_t *keys;
    uint32_t *vals; /* INA_KMAP_NONE = empty cell */
    uint32_t cap;   /* cells, a power of 2 (0 = not allocated) */
    uint32_t n;     /* keys stored */
};

/* The mixer of keys (splitmix64's finalizer): also the hash that places a
 * key on a parameter-server shard (PROTOCOL.md §14). */
static inline uint64_t ina__key_mix(uint64_t x)
{
    x ^= x >> 30;
    x *= 0xBF58476D1CE4E5B9ull;
    x ^= x >> 27;
    x *= 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

/* Cells of a table made for cap_hint keys: the smallest power of two >= max(16, 2 cap_hint)
 * (at most 2^31). */
static inline uint32_t ina__kmap_cells(uint32_t cap_hint)
{
    uint32_t cap = 16;
    while (cap < 2u * (uint64_t)cap_hint && cap < (1u << 31))
        cap *= 2;
    return cap;
}
/* @return 0 or -ENOMEM. cap_hint: keys expected (0: a small table); ina__kmap_cells(cap_hint)
 * cells, ina__kmap_bytes() of them. */
int ina__kmap_init(struct ina_kmap *m, uint32_t cap_hint);
void ina__kmap_free(struct ina_kmap *m);
/* Forget every key, keep the memory. */
void ina__kmap_clear(struct ina_kmap *m);
/* Bytes a table of cap cells takes. */
static inline size_t ina__kmap_bytes(uint32_t cap) { return (size_t)cap * 12; }
/* 1 if the next insert of a new key needs ina__kmap_grow() first. */
static inline int ina__kmap_full(const struct ina_kmap *m) { return 2 * (m->n + 1) > m->cap; }
/* Double the table. @return 0 or -ENOMEM (the map is unchanged). */
int ina__kmap_grow(struct ina_kmap *m);

static inline uint32_t ina__kmap_cell(const struct ina_kmap *m, uint64_t key)
{
    uint32_t mask = m->cap - 1, i = (uint32_t)ina__key_mix(key ^ 0x6A09E667F3BCC909ull) & mask;
    while (m->vals[i] != INA_KMAP_NONE && m->keys[i] != key)
        i = (i + 1) & mask;
    return i;
}

/* @return the value of key, or INA_KMAP_NONE. */
static inline uint32_t ina__kmap_get(const struct ina_kmap *m, uint64_t key)
{
    return m->cap ? m->vals[ina__kmap_cell(m, key)] : INA_KMAP_NONE;
}

/*
 * Insert key -> val, or find it. The caller grew the table if
 * ina__kmap_full(). @return the value now stored for key: val if the key
 * was new, else the old value (unchanged).
 */
static inline uint32_t ina__kmap_put(struct ina_kmap *m, uint64_t key, uint32_t val)
{
    uint32_t i = ina__kmap_cell(m, key);
    if (m->vals[i] != INA_KMAP_NONE)
        return m->vals[i];
    m->keys[i] = key;
    m->vals[i] = val;
    m->n++;
    return val;
}

#endif
