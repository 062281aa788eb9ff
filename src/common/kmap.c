/* kmap.c: allocation and growth of the exact-match key map (kmap.h). */
#include "common/kmap.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

static int alloc_cells(struct ina_kmap *m, uint32_t cap)
{
    m->keys = malloc((size_t)cap * sizeof(*m->keys));
    m->vals = malloc((size_t)cap * sizeof(*m->vals));
    if (!m->keys || !m->vals) {
        free(m->keys);
        free(m->vals);
        m->keys = NULL;
        m->vals = NULL;
        return -ENOMEM;
    }
    memset(m->vals, 0xFF, (size_t)cap * sizeof(*m->vals));
    m->cap = cap;
    m->n = 0;
    return 0;
}

int ina__kmap_init(struct ina_kmap *m, uint32_t cap_hint)
{
    memset(m, 0, sizeof(*m));
    return alloc_cells(m, ina__kmap_cells(cap_hint));
}

void ina__kmap_free(struct ina_kmap *m)
{
    free(m->keys);
    free(m->vals);
    memset(m, 0, sizeof(*m));
}

void ina__kmap_clear(struct ina_kmap *m)
{
    if (m->cap)
        memset(m->vals, 0xFF, (size_t)m->cap * sizeof(*m->vals));
    m->n = 0;
}

int ina__kmap_grow(struct ina_kmap *m)
{
    if (m->cap >= (1u << 31))
        return -ENOMEM;
    struct ina_kmap old = *m;
    if (alloc_cells(m, old.cap ? old.cap * 2 : 16) != 0) {
        *m = old;
        return -ENOMEM;
    }
    for (uint32_t i = 0; i < old.cap; i++)
        if (old.vals[i] != INA_KMAP_NONE)
            ina__kmap_put(m, old.keys[i], old.vals[i]);
    free(old.keys);
    free(old.vals);
    return 0;
}
