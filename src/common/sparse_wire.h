/* sparse_wire.h: the payload of block-sparse DATA and RESULT (wire ops 7 and 8), shared by libina and ina-switch. */
#ifndef INA_SPARSE_WIRE_H
#define INA_SPARSE_WIRE_H


/*
 * docs/PROTOCOL.md §17 is the specification; this file must agree with it.
 *
 * A sparse packet is an ordinary DATA or RESULT (header unchanged, count =
 * payload words, exactly 32 + 4 * count bytes) whose op is INA_OP_SPARSE_I32
 * or INA_OP_SPARSE_F32 (wire.h) and whose payload is, in big-endian 32-bit
 * words:
 *
 *   word 0                layout: bits 31..16 B (block length in elements,
 *                         1..INA_SPARSE_MAX_BLOCK), bits 15..8 np (places,
 *                         0..255), bits 7..0 reserved, 0
 *   words 1 .. 3*np       np place descriptors of 3 words:
 *                           pos   the block (index within the operation) this
 *                                 place carries in this round
 *                           next  DATA: the sender's next non-zero block of the
 *                                 place's column, or INA_SPARSE_END;
 *                                 RESULT: the minimum over the ranks
 *                           info  bit 31 HAS: a block of B words follows for
 *                                 this place (DATA: the sender's; RESULT: the
 *                                 sum, present iff some rank sent one);
 *                                 bit 30 FIRST: the column's first round (no
 *                                 block; next >= pos instead of next > pos);
 *                                 bits 29..16 reserved, 0; bits 15..0 int16:
 *                                 DATA: the sender's exponent of its block at
 *                                 next (quantized floats; 0 otherwise);
 *                                 RESULT: the maximum over the ranks whose
 *                                 next is the minimum
 *   then                  B words per place with HAS, in place order
 *
 * count = 1 + 3 * np + B * (places with HAS). Ops 12 and 13 (§17.11) carry
 * ceil(B / 2) words of 16-bit elements per block instead, and the info
 * exponent is the scale of the block the place carries.
 */

#include <stddef.h>
#include <stdint.h>

#include "common/wire.h"

#define INA_SPARSE_END 0xFFFFFFFFu       /* next: no non-zero block left in the column */
#define INA_SPARSE_HAS 0x80000000u       /* info: a block follows */
#define INA_SPARSE_FIRST 0x40000000u     /* info: the column's first round */
#define INA_SPARSE_INFO_RESERVED 0x3FFF0000u
#define INA_SPARSE_MAX_BLOCK 4096        /* largest B the layout word may carry */
#define INA_SPARSE_MAX_PLACES 255
#define INA_SPARSE_DESC_WORDS 3

static inline int ina__op_is_sparse(uint8_t op)
{
    return op == INA_OP_SPARSE_I32 || op == INA_OP_SPARSE_F32 || op == INA_OP_SPARSE_F16 ||
           op == INA_OP_SPARSE_BF16;
}

/* Ops 12 and 13 (PROTOCOL.md §17.11): blocks of 16-bit elements, two per word. */
static inline int ina__op_is_sparse_h16(uint8_t op)
{
    return op == INA_OP_SPARSE_F16 || op == INA_OP_SPARSE_BF16;
}

/* Words of a block of B elements on the wire: B, or ceil(B / 2) for 16-bit blocks. */
static inline unsigned ina__sparse_block_words(unsigned block, int h16)
{
    return h16 ? (block + 1) / 2 : block;
}

static inline uint32_t ina__sparse_layout(unsigned block, unsigned nplaces)
{
    return (uint32_t)block << 16 | (uint32_t)nplaces << 8;
}
static inline unsigned ina__sparse_layout_block(uint32_t w) { return w >> 16; }
static inline unsigned ina__sparse_layout_places(uint32_t w) { return (w >> 8) & 0xFFu; }

static inline uint32_t ina__sparse_info(int has, int first, int16_t exp)
{
    return (has ? INA_SPARSE_HAS : 0) | (first ? INA_SPARSE_FIRST : 0) | (uint16_t)exp;
}
static inline int16_t ina__sparse_info_exp(uint32_t info) { return (int16_t)(uint16_t)info; }

/* Payload words of a packet with np places of which nhas carry a block of B words. */
static inline size_t ina__sparse_words(unsigned block, unsigned np, unsigned nhas)
{
    return 1 + (size_t)INA_SPARSE_DESC_WORDS * np + (size_t)block * nhas;
}

/* The largest such packet: every place carries a block. */
static inline size_t ina__sparse_words_max(unsigned block, unsigned np)
{
    return ina__sparse_words(block, np, np);
}

/* Places per packet for a block of `block` words (B, or ceil(B / 2) on ops 12
 * and 13) and k words per packet (0: none fit). */
static inline unsigned ina__sparse_places(unsigned block, unsigned k)
{
    if (block == 0 || k < 1 + INA_SPARSE_DESC_WORDS + block)
        return 0;
    size_t c = (k - 1) / (INA_SPARSE_DESC_WORDS + block);
    return c > INA_SPARSE_MAX_PLACES ? INA_SPARSE_MAX_PLACES : (unsigned)c;
}

/*
 * The structural checks of one sparse payload (PROTOCOL.md §17.3), the same
 * for the switch (DATA) and the worker (RESULT): the layout is well formed,
 * every place of it could carry a block within max_words, count matches the
 * HAS bits, reserved bits are 0, FIRST places carry no block and next is not
 * behind pos; h16: blocks of 16-bit elements (ops 12, 13). @return 0 if valid,
 * else -1. Reads count words at p.
 */
static inline int ina__sparse_check(const uint8_t *p, size_t count, size_t max_words, int h16)
{
    if (count < 1)
        return -1;
    uint32_t lay = ina__get32(p);
    unsigned elems = ina__sparse_layout_block(lay), np = ina__sparse_layout_places(lay);
    unsigned block = ina__sparse_block_words(elems, h16);
    if ((lay & 0xFFu) || elems < 1 || elems > INA_SPARSE_MAX_BLOCK ||
        ina__sparse_words_max(block, np) > max_words || ina__sparse_words(block, np, 0) > count)
        return -1;
    unsigned nhas = 0;
    for (unsigned j = 0; j < np; j++) {
        const uint8_t *d = p + 4 * (1 + (size_t)INA_SPARSE_DESC_WORDS * j);
        uint32_t pos = ina__get32(d), next = ina__get32(d + 4), info = ina__get32(d + 8);
        int first = (info & INA_SPARSE_FIRST) != 0, has = (info & INA_SPARSE_HAS) != 0;
        if ((info & INA_SPARSE_INFO_RESERVED) || pos == INA_SPARSE_END || (first && has))
            return -1;
        if (next != INA_SPARSE_END && (first ? next < pos : next <= pos))
            return -1;
        nhas += (unsigned)has;
    }
    return ina__sparse_words(block, np, nhas) == count ? 0 : -1;
}

#endif
