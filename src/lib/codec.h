/* codec.h: the payload formats of an operation's blocks: one table entry per format (encode, decode, result check, exponents). */
#ifndef INA_CODEC_H
#define INA_CODEC_H

/*
 * The window code (stream.c, sparse.c) moves blocks without knowing how
 * their elements travel: it asks the request's codec, chosen when the
 * request is planned (plan.c) from its dtype, its op and what the switch
 * offers (PROTOCOL.md §8, §13, §14.3):
 *
 *   ina__codec_dtype  the dtype's own int32 encoding, no exponent: INT32
 *   ina__codec_bfp    block floating point in two rounds: exponents one
 *                     round ahead of the data (§8.1)
 *   ina__codec_bfp1   block floating point in one round: each rank's own
 *                     exponent, the switch aligns (INA_OP_ADD_BFP, §8.7)
 *   ina__codec_f32    binary32 for the switch to add (INA_OP_ADD_F32, §8.8)
 *   ina__codec_order  order keys for float MAX and MIN (§8.9)
 *   ina__codec_fixed  fixed point with the configured scale (§13)
 *   ina__codec_hot    a key-value push's hot vector, HOT_DATA (§14.3)
 *   ina__codec_h16    16-bit elements, two per word, the switch adds them in
 *                     binary32 (ops 10 and 11, §8.10): FLOAT16, BFLOAT16, and
 *                     FLOAT32 when the context asks for a 16-bit wire
 *
 * A new format is one file, codec_NAME.c, defining its entry (and the
 * conversion it needs, or calling dtype.c's), one extern line below, and
 * the rule in plan.c that chooses it. Entries are called once per block
 * (a packet, or a sparse place), never per element.
 */

#include <stddef.h>
#include <stdint.h>

#include "common/wire.h"

struct ina_ctx;
struct ina_req;

/* Where a block's exponent comes from (PROTOCOL.md §8). */
enum ina_exps {
    INA_EXPS_NONE,  /* none travels */
    INA_EXPS_AHEAD, /* two rounds: packet p carries block p's exponent and block p - lag's
                       data, scaled to that block's agreed exponent (packet p - lag's result) */
    INA_EXPS_OWN,   /* one round: its own block's exponent in the DATA, the sum's in the RESULT */
};

struct ina_codec {
    const char *name;
    uint8_t data_kind;   /* the header kind of its DATA: INA_K_DATA or INA_K_HOT_DATA */
    uint8_t result_kind; /* of the RESULT that answers it: INA_K_RESULT or INA_K_HOT_RESULT */
    uint8_t exps;        /* enum ina_exps */
    uint8_t per_word;    /* elements per 32-bit word: 1, or 2 (16-bit elements, §8.10) */
    /* NULL, or the exponent the DATA of elements [first, first + n) carries, chosen by
     * this rank alone (exps OWN; NULL there: the block exponent of §8.1). */
    int16_t (*scale)(const struct ina_ctx *ctx, const struct ina_req *req, size_t first,
                     size_t n);
    /* Elements [first, first + n) of req's input into out, a packet's payload, scaled
     * to exponent e (exps != NONE); may set flags of the DATA's header. @return bytes. */
    size_t (*encode)(const struct ina_ctx *ctx, const struct ina_req *req, size_t first, size_t n,
                     int16_t e, uint8_t *out, uint16_t *flags);
    /* 1 if the RESULT (header h, payload in) answers elements [first, first + n), beyond
     * the header checks every format shares (the stream counts a 0 as stale); NULL: 1. */
    int (*check)(const struct ina_ctx *ctx, const struct ina_req *req, size_t first, size_t n,
                 const struct ina_hdr *h, const uint8_t *in);
    /* The RESULT's n sums at in into elements [first, first + n) of req's output, scaled
     * by exponent e. @return how many came back invalid (written as NaN: fixed point). */
    size_t (*decode)(const struct ina_ctx *ctx, const struct ina_req *req, size_t first, size_t n,
                     int16_t e, const uint8_t *in);
    /* How many of this rank's elements [first, first + n) the block's exponent e loses
     * (flushed to zero beside a larger value, or carried as NaN beside a non-finite one:
     * dtype.h's ina__block_lost), counted before decode overwrites an in-place input;
     * NULL: none (a format without a shared scale). */
    size_t (*lost)(const struct ina_ctx *ctx, const struct ina_req *req, size_t first, size_t n,
                   int16_t e);
};

extern const struct ina_codec ina__codec_dtype;
extern const struct ina_codec ina__codec_bfp;
extern const struct ina_codec ina__codec_bfp1;
extern const struct ina_codec ina__codec_f32;
extern const struct ina_codec ina__codec_order;
extern const struct ina_codec ina__codec_fixed;
extern const struct ina_codec ina__codec_hot;
extern const struct ina_codec ina__codec_h16;

/* The header's count of a DATA or RESULT of n elements in codec c. */
static inline size_t ina__codec_words(const struct ina_codec *c, size_t n)
{
    return c->per_word == 2 ? (n + 1) / 2 : n;
}

#endif
