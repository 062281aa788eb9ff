/* store.c: ina-ps's parameter store: records of (value, optimizer state, version, step sums), grown by doubling under --max-memory. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "ps/ps.h"

/* Bytes of the record arrays at capacity cap (the index is counted apart). */
static size_t records_bytes(const struct ina_ps_store *s, uint32_t cap)
{
    size_t per = 8 + 4 + 2 * 4 + 4 * (size_t)s->dim * (1 + (s->has_state ? 1 : 0) + 2) + 2 * 4;
    return per * cap;
}

/* Resize every record array to cap (realloc keeps the first n records). */
static int records_resize(struct ina_ps_store *s, uint32_t cap)
{
    size_t d = s->dim;
    void *p;
#define GROW(field, count)                                                  \
    do {                                                                    \
        if (!(p = realloc(s->field, (count) * sizeof(*s->field))))          \
            return -ENOMEM;                                                 \
        s->field = p;                                                       \
    } while (0)
    GROW(keys, (size_t)cap);
    GROW(ver, (size_t)cap);
    GROW(acc_step, 2 * (size_t)cap);
    GROW(vals, (size_t)cap * d);
    if (s->has_state)
        GROW(state, (size_t)cap * d);
    GROW(acc, 2 * (size_t)cap * d);
    GROW(touched[0], (size_t)cap);
    GROW(touched[1], (size_t)cap);
#undef GROW
    s->touched_cap[0] = s->touched_cap[1] = cap;
    s->cap = cap;
    return 0;
}

int ina__ps_charge(struct ina_ps *ps, size_t *owner, size_t n)
{
    if (n > ps->p.max_memory - ps->mem_used) /* mem_used <= max_memory always holds */
        return -1;
    ps->mem_used += n;
    *owner += n;
    return 0;
}

void ina__ps_uncharge(struct ina_ps *ps, size_t *owner, size_t n)
{
    ps->mem_used -= n;
    *owner -= n;
}

/* Bytes of a store with room for cap records: the record arrays and the index. */
static size_t store_bytes(const struct ina_ps_store *s, uint32_t cap)
{
    return records_bytes(s, cap) + ina__kmap_bytes(ina__kmap_cells(cap));
}

int ina__ps_store_init(struct ina_ps *ps, struct ina_ps_store *s, unsigned dim, int has_state)
{
    memset(s, 0, sizeof(*s));
    s->dim = dim;
    s->has_state = has_state;
    uint32_t cap = ps->p.initial_keys ? ps->p.initial_keys : 1024;
    while (cap > 16 && store_bytes(s, cap) > ps->p.max_memory - ps->mem_used)
        cap /= 2; /* a small limit: start smaller, the limit decides later */
    if (ina__ps_charge(ps, &s->bytes, store_bytes(s, cap)) != 0)
        return INA_ERR_PS_FULL;
    if (ina__kmap_init(&s->index, cap) != 0 || records_resize(s, cap) != 0) {
        ina__ps_store_free(ps, s);
        return -ENOMEM;
    }
    return 0;
}

void ina__ps_store_free(struct ina_ps *ps, struct ina_ps_store *s)
{
    ps->mem_used -= s->bytes;
    ina__kmap_free(&s->index);
    free(s->keys);
    free(s->ver);
    free(s->acc_step);
    free(s->vals);
    free(s->state);
    free(s->acc);
    free(s->touched[0]);
    free(s->touched[1]);
    memset(s, 0, sizeof(*s));
}

/*
 * Growth rule (docs/PS.md): when the records are full they double, and the
 * index doubles when it would pass half full, each only if the bytes after
 * the doubling stay within --max-memory (all jobs of the shard together).
 * Otherwise the key is refused: the caller aborts the job with
 * INA_ERR_PS_FULL, so every rank learns that the limit was reached.
 */
static int store_make_room(struct ina_ps *ps, struct ina_ps_store *s)
{
    if (s->n == s->cap) {
        size_t more = records_bytes(s, 2 * s->cap) - records_bytes(s, s->cap);
        if (s->cap >= (1u << 30) || ina__ps_charge(ps, &s->bytes, more) != 0)
            return -1;
        if (records_resize(s, 2 * s->cap) != 0) {
            ina__ps_uncharge(ps, &s->bytes, more);
            return -1;
        }
    }
    if (ina__kmap_full(&s->index)) {
        size_t more = ina__kmap_bytes(s->index.cap); /* the table doubles */
        if (ina__ps_charge(ps, &s->bytes, more) != 0)
            return -1;
        if (ina__kmap_grow(&s->index) != 0) {
            ina__ps_uncharge(ps, &s->bytes, more);
            return -1;
        }
    }
    return 0;
}

uint32_t ina__ps_store_get(struct ina_ps *ps, struct ina_ps_job *job, uint64_t key)
{
    struct ina_ps_store *s = &job->store;
    uint32_t r = ina__kmap_get(&s->index, key);
    if (r != INA_KMAP_NONE)
        return r;
    if (store_make_room(ps, s) != 0) {
        ps->c.memory_refusals++;
        return INA_KMAP_NONE;
    }
    r = s->n++;
    ina__kmap_put(&s->index, key, r);
    s->keys[r] = key;
    s->ver[r] = 0;
    s->acc_step[2 * r] = s->acc_step[2 * r + 1] = 0;
    for (unsigned j = 0; j < s->dim; j++) {
        s->vals[(size_t)r * s->dim + j] =
            ina__param_init(job->p.init, job->p.init_scale, job->p.init_seed, key, j);
        if (s->has_state)
            s->state[(size_t)r * s->dim + j] = job->p.init_acc;
    }
    return r;
}
