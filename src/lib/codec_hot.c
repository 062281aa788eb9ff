/* codec_hot.c: a key-value push's hot vector through the switch's hot table: HOT_DATA and HOT_RESULT (PROTOCOL.md §14.3). */
#include <string.h>

#include "common/kv_wire.h"
#include "lib/codec.h"
#include "lib/req.h"

/*
 * HOT_DATA payload of elements [first, first + n) (float32): epoch and first
 * position, then the block in the shortest of three encodings
 * (ina__hot_block_len): dense; a bitmap of its nonzero positions and their
 * values (no key bytes); or (key, value) pairs of its nonzero values. All
 * give the switch the same sums (untouched positions add +0).
 */
static size_t hot_encode(const struct ina_ctx *ctx, const struct ina_req *req, size_t first,
                         size_t n, int16_t e, uint8_t *out, uint16_t *flags)
{
    (void)ctx;
    (void)e;
    const float *g = (const float *)req->src + first;
    ina__put32(out, req->hot_epoch);
    ina__put32(out + 4, (uint32_t)first);
    size_t nnz = 0;
    for (size_t i = 0; i < n; i++)
        nnz += g[i] != 0.0f;
    uint8_t *p = out + INA_HOT_PREFIX_LEN;
    uint16_t f;
    size_t len = ina__hot_block_len(n, nnz, &f);
    *flags |= f;
    if (f == 0) {
        for (size_t i = 0; i < n; i++)
            ina__putf(p + 4 * i, g[i]);
    } else if (f == INA_FLAG_HOT_BITMAP) {
        uint8_t *val = p + (n + 7) / 8;
        memset(p, 0, (n + 7) / 8);
        for (size_t i = 0; i < n; i++)
            if (g[i] != 0.0f) {
                p[i / 8] |= (uint8_t)(1u << (i % 8));
                ina__putf(val, g[i]);
                val += 4;
            }
    } else {
        for (size_t i = 0; i < n; i++)
            if (g[i] != 0.0f) {
                ina__put64(p, req->hot_keys[first + i]);
                ina__putf(p + 8, g[i]);
                p += INA_HOT_KEYED_LEN;
            }
    }
    return INA_HOT_PREFIX_LEN + len;
}

/* A HOT_RESULT answers the block only with the count, epoch and first position we sent. */
static int hot_check(const struct ina_ctx *ctx, const struct ina_req *req, size_t first, size_t n,
                     const struct ina_hdr *h, const uint8_t *in)
{
    (void)ctx;
    return h->count == n && ina__get32(in) == req->hot_epoch && ina__get32(in + 4) == first;
}

static size_t hot_decode(const struct ina_ctx *ctx, const struct ina_req *req, size_t first,
                         size_t n, int16_t e, const uint8_t *in)
{
    (void)ctx;
    (void)e;
    float *dst = (float *)req->dst + first;
    for (size_t i = 0; i < n; i++)
        dst[i] = ina__getf(in + INA_HOT_PREFIX_LEN + 4 * i);
    return 0;
}

const struct ina_codec ina__codec_hot = {
    .name = "hot", .data_kind = INA_K_HOT_DATA, .result_kind = INA_K_HOT_RESULT,
    .exps = INA_EXPS_NONE, .encode = hot_encode, .check = hot_check, .decode = hot_decode};
