/* sparse.c: the switch's rules for block-sparse rounds (wire ops 7 and 8): check, store, combine, emit. */
#include <string.h>

#include "common/be32.h"
#include "common/h16.h"
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
 *
 * Ops 12 and 13 (§17.11) carry 16-bit blocks, ceil(B / 2) words on the wire;
 * a place's block is still B lanes here (binary32 sums, §8.10.4), and its
 * info exponent is the largest scale of the blocks added there, then, once
 * the round is complete, the RESULT's scale s of that place.
 */

#define DESC(j) (1 + INA_SPARSE_DESC_WORDS * (size_t)(j))

static inline const uint8_t *desc_at(const uint8_t *p, unsigned j) { return p + 4 * DESC(j); }

int ina__sparse_valid(const struct ina_job *job, const struct ina_hdr *h, const uint8_t *payload)
{
    return ina__sparse_check(payload, h->count, job->elems, ina__op_is_sparse_h16(h->op)) == 0;
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

static inline const uint8_t *block_of(struct blocks *it, uint32_t info, unsigned words)
{
    if (!(info & INA_SPARSE_HAS))
        return NULL;
    const uint8_t *b = it->next;
    it->next += 4 * (size_t)words;
    return b;
}

/*
 * B binary32 lanes of a 16-bit block of ceil(B / 2) words (§17.11). The
 * kernels work on whole words (two lanes each); an odd B's last word holds
 * lane B - 1 and the pad, which has no lane here: it goes through a pair of
 * its own, whose pad lane is +0 (the pad's sum, §8.10.2).
 */
static void h16_lanes_load(int32_t *l, const uint8_t *b, unsigned n, int16_t e, enum ina_h16_fmt f)
{
    ina__h16_load(l, b, n / 2, e, f);
    if (n & 1) {
        int32_t pair[2];
        ina__h16_load(pair, b + 4 * (size_t)(n / 2), 1, e, f);
        l[n - 1] = pair[0];
    }
}

static void h16_lanes_add(int32_t *l, const uint8_t *b, unsigned n, int16_t e, enum ina_h16_fmt f)
{
    ina__h16_add(l, b, n / 2, e, f);
    if (n & 1) {
        int32_t pair[2] = {l[n - 1], 0};
        ina__h16_add(pair, b + 4 * (size_t)(n / 2), 1, e, f);
        l[n - 1] = pair[0];
    }
}

static int16_t h16_lanes_exp(const int32_t *l, unsigned n, int16_t e, enum ina_h16_fmt f)
{
    int16_t s = ina__h16_result_exp(l, n / 2, e, f);
    if (n & 1) {
        int32_t pair[2] = {l[n - 1], 0};
        s = ina__h16_result_exp(pair, 1, s, f); /* the larger of both halves' s */
    }
    return s;
}

static void h16_lanes_store(uint8_t *b, const int32_t *l, unsigned n, int16_t s, enum ina_h16_fmt f)
{
    ina__h16_store(b, l, n / 2, s, f);
    if (n & 1) {
        int32_t pair[2] = {l[n - 1], 0};
        ina__h16_store(b + 4 * (size_t)(n / 2), pair, 1, s, f);
    }
}

/* A place's first block: copied (op 7, 8) or loaded into lanes at its scale (12, 13). */
static void place_load(int32_t *sum, const uint8_t *b, unsigned block, uint8_t op, int16_t e)
{
    if (ina__op_is_sparse_h16(op))
        h16_lanes_load(sum, b, block, e, ina__h16_fmt_of_op(op));
    else
        ina__be32_load(sum, b, block);
}

unsigned ina__sparse_first(int32_t *v, const uint8_t *payload, uint8_t op)
{
    uint32_t lay = ina__get32(payload);
    unsigned block = ina__sparse_layout_block(lay), np = ina__sparse_layout_places(lay), n = 0;
    const unsigned words = ina__sparse_block_words(block, ina__op_is_sparse_h16(op));
    struct blocks it = {payload + 4 * DESC(np)};
    v[0] = (int32_t)lay;
    for (unsigned j = 0; j < np; j++) {
        const uint8_t *d = desc_at(payload, j);
        uint32_t info = ina__get32(d + 8);
        v[DESC(j)] = (int32_t)ina__get32(d);
        v[DESC(j) + 1] = (int32_t)ina__get32(d + 4);
        v[DESC(j) + 2] = (int32_t)info;
        const uint8_t *b = block_of(&it, info, words);
        if (b) {
            place_load(v + DESC(np) + (size_t)j * block, b, block, op, ina__sparse_info_exp(info));
            n++;
        }
    }
    return n;
}

unsigned ina__sparse_combine(int32_t *v, const uint8_t *payload, uint8_t op)
{
    unsigned block = ina__sparse_layout_block((uint32_t)v[0]);
    unsigned np = ina__sparse_layout_places((uint32_t)v[0]), n = 0;
    const int h16 = ina__op_is_sparse_h16(op);
    const unsigned words = ina__sparse_block_words(block, h16);
    struct blocks it = {payload + 4 * DESC(np)};
    for (unsigned j = 0; j < np; j++) {
        const uint8_t *d = desc_at(payload, j);
        uint32_t next = ina__get32(d + 4), info = ina__get32(d + 8);
        uint32_t cur_next = (uint32_t)v[DESC(j) + 1], cur = (uint32_t)v[DESC(j) + 2];
        int16_t e = ina__sparse_info_exp(info), ce = ina__sparse_info_exp(cur);
        /* The next round of this column is at the smallest next; its block's
         * exponent is the largest any rank announced for that block (ranks
         * whose next is later have a zero block there, exponent ZERO). Ops
         * 12 and 13: the exponent is the scale of the block carried (below). */
        if (next < cur_next) {
            v[DESC(j) + 1] = (int32_t)next;
            ce = h16 ? ce : e;
        } else if (!h16 && next == cur_next && e > ce) {
            ce = e;
        }
        const uint8_t *b = block_of(&it, info, words);
        int32_t *sum = v + DESC(np) + (size_t)j * block;
        if (b) {
            if (!(cur & INA_SPARSE_HAS)) { /* the first block of this place */
                place_load(sum, b, block, op, e);
                ce = h16 ? e : ce;
            } else if (h16) {
                h16_lanes_add(sum, b, block, e, ina__h16_fmt_of_op(op));
                ce = e > ce ? e : ce;
            } else if (op == INA_OP_SPARSE_F32) {
                ina__be32_fadd(sum, b, block);
            } else {
                ina__be32_add(sum, b, block);
            }
            cur |= INA_SPARSE_HAS;
            n++;
        }
        v[DESC(j) + 2] = (int32_t)((cur & ~0xFFFFu) | (uint16_t)ce);
    }
    return n;
}

void ina__sparse_h16_finish(int32_t *v, uint8_t op)
{
    unsigned block = ina__sparse_layout_block((uint32_t)v[0]);
    unsigned np = ina__sparse_layout_places((uint32_t)v[0]);
    for (unsigned j = 0; j < np; j++) {
        uint32_t info = (uint32_t)v[DESC(j) + 2];
        int16_t s = 0; /* no block: no scale */
        if (info & INA_SPARSE_HAS)
            s = h16_lanes_exp(v + DESC(np) + (size_t)j * block, block, ina__sparse_info_exp(info),
                              ina__h16_fmt_of_op(op));
        v[DESC(j) + 2] = (int32_t)((info & ~0xFFFFu) | (uint16_t)s);
    }
}

size_t ina__sparse_emit(uint8_t *out, const int32_t *v, uint8_t op, unsigned *nblocks)
{
    unsigned block = ina__sparse_layout_block((uint32_t)v[0]);
    unsigned np = ina__sparse_layout_places((uint32_t)v[0]), n = 0;
    const int h16 = ina__op_is_sparse_h16(op);
    const unsigned words = ina__sparse_block_words(block, h16);
    ina__be32_store(out, v, DESC(np)); /* layout and descriptors */
    uint8_t *b = out + 4 * DESC(np);
    for (unsigned j = 0; j < np; j++) {
        uint32_t info = (uint32_t)v[DESC(j) + 2];
        if (!(info & INA_SPARSE_HAS))
            continue;
        const int32_t *sum = v + DESC(np) + (size_t)j * block;
        if (h16) /* at the place's scale s (ina__sparse_h16_finish) */
            h16_lanes_store(b, sum, block, ina__sparse_info_exp(info), ina__h16_fmt_of_op(op));
        else
            ina__be32_store(b, sum, block);
        b += 4 * (size_t)words;
        n++;
    }
    if (nblocks)
        *nblocks = n;
    return ina__sparse_words(words, np, n);
}

unsigned ina__sparse_blocks_in(const uint8_t *payload)
{
    unsigned np = ina__sparse_layout_places(ina__get32(payload)), n = 0;
    for (unsigned j = 0; j < np; j++)
        n += (ina__get32(desc_at(payload, j) + 8) & INA_SPARSE_HAS) != 0;
    return n;
}
