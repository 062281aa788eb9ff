/* sparse.c: the switch's rules for block-sparse rounds (wire ops 7 and 8): check, store, combine, emit. */
#include <string.h>

#include "common/be32.h"
#include "common/sparse_wire.h"
#include "engine/internal.h"

/*
 * A sparse round lives in the values of its slot set like any other round,
 * in host order, at fixed offsets (PROTOCOL.md §17.4):
 *
 *   v[0]                 the layout word (B, np)
 *   v[1 + 3j .. 3 + 3j]  place j: pos, the minimum next so far, info (HAS:
 *                        some rank sent a block; FIRST; the largest exponent
 *                        announced for that minimum)
 *   v[1 + 3np + jB ..]   place j's sum, valid iff its HAS bit is set
 *
 * Every place has room for a block whether or not one arrives, so the first
 * block of a place is a copy (no clearing pass, no identity value) and
 * later ones are added, as dense rounds do for the whole payload. The
 * RESULT packs the blocks that exist (ina__sparse_emit).
 */

#define DESC(j) (1 + INA_SPARSE_DESC_WORDS * (size_t)(j))

static inline const uint8_t *desc_at(const uint8_t *p, unsigned j) { return p + 4 * DESC(j); }

int ina__sparse_valid(const struct ina_job *job, const struct ina_hdr *h, const uint8_t *payload)
{
    return ina__sparse_check(payload, h->count, job->elems) == 0;
}

int ina__sparse_same(const int32_t *v, const uint8_t *payload)
{
    uint32_t lay = ina__get32(payload);
    if ((uint32_t)v[0] != lay)
        return 0;
    unsigned np = ina__sparse_layout_places(lay);
    for (unsigned j = 0; j < np; j++) {
        const uint8_t *d = desc_at(payload, j);
        uint32_t info = ina__get32(d + 8);
        if ((uint32_t)v[DESC(j)] != ina__get32(d) ||
            (((uint32_t)v[DESC(j) + 2] ^ info) & INA_SPARSE_FIRST))
            return 0;
    }
    return 1;
}

/* Walk the blocks of a checked payload: the block of place j, or NULL if it has none. */
struct blocks {
    const uint8_t *next;
};

static inline const uint8_t *block_of(struct blocks *it, uint32_t info, unsigned block)
{
    if (!(info & INA_SPARSE_HAS))
        return NULL;
    const uint8_t *b = it->next;
    it->next += 4 * (size_t)block;
    return b;
}

unsigned ina__sparse_first(int32_t *v, const uint8_t *payload)
{
    uint32_t lay = ina__get32(payload);
    unsigned block = ina__sparse_layout_block(lay), np = ina__sparse_layout_places(lay), n = 0;
    struct blocks it = {payload + 4 * DESC(np)};
    v[0] = (int32_t)lay;
    for (unsigned j = 0; j < np; j++) {
        const uint8_t *d = desc_at(payload, j);
        uint32_t info = ina__get32(d + 8);
        v[DESC(j)] = (int32_t)ina__get32(d);
        v[DESC(j) + 1] = (int32_t)ina__get32(d + 4);
        v[DESC(j) + 2] = (int32_t)info;
        const uint8_t *b = block_of(&it, info, block);
        if (b) {
            ina__be32_load(v + DESC(np) + (size_t)j * block, b, block);
            n++;
        }
    }
    return n;
}

unsigned ina__sparse_combine(int32_t *v, const uint8_t *payload, uint8_t op)
{
    unsigned block = ina__sparse_layout_block((uint32_t)v[0]);
    unsigned np = ina__sparse_layout_places((uint32_t)v[0]), n = 0;
    struct blocks it = {payload + 4 * DESC(np)};
    for (unsigned j = 0; j < np; j++) {
        const uint8_t *d = desc_at(payload, j);
        uint32_t next = ina__get32(d + 4), info = ina__get32(d + 8);
        uint32_t cur_next = (uint32_t)v[DESC(j) + 1], cur = (uint32_t)v[DESC(j) + 2];
        int16_t e = ina__sparse_info_exp(info), ce = ina__sparse_info_exp(cur);
        /* The next round of this column is at the smallest next; its block's
         * exponent is the largest any rank announced for that block (ranks
         * whose next is later have a zero block there, exponent ZERO). */
        if (next < cur_next) {
            v[DESC(j) + 1] = (int32_t)next;
            ce = e;
        } else if (next == cur_next && e > ce) {
            ce = e;
        }
        const uint8_t *b = block_of(&it, info, block);
        int32_t *sum = v + DESC(np) + (size_t)j * block;
        if (b) {
            if (!(cur & INA_SPARSE_HAS))
                ina__be32_load(sum, b, block); /* the first block of this place */
            else if (op == INA_OP_SPARSE_F32)
                ina__be32_fadd(sum, b, block);
            else
                ina__be32_add(sum, b, block);
            cur |= INA_SPARSE_HAS;
            n++;
        }
        v[DESC(j) + 2] = (int32_t)((cur & ~0xFFFFu) | (uint16_t)ce);
    }
    return n;
}

size_t ina__sparse_emit(uint8_t *out, const int32_t *v, unsigned *nblocks)
{
    unsigned block = ina__sparse_layout_block((uint32_t)v[0]);
    unsigned np = ina__sparse_layout_places((uint32_t)v[0]), n = 0;
    ina__be32_store(out, v, DESC(np)); /* layout and descriptors */
    uint8_t *b = out + 4 * DESC(np);
    for (unsigned j = 0; j < np; j++) {
        if (!((uint32_t)v[DESC(j) + 2] & INA_SPARSE_HAS))
            continue;
        ina__be32_store(b, v + DESC(np) + (size_t)j * block, block);
        b += 4 * (size_t)block;
        n++;
    }
    if (nblocks)
        *nblocks = n;
    return ina__sparse_words(block, np, n);
}

unsigned ina__sparse_blocks_in(const uint8_t *payload)
{
    unsigned np = ina__sparse_layout_places(ina__get32(payload)), n = 0;
    for (unsigned j = 0; j < np; j++)
        n += (ina__get32(desc_at(payload, j) + 8) & INA_SPARSE_HAS) != 0;
    return n;
}
