/* codec_hot.c: a key-value push's hot vector through the switch's hot table: HOT_DATA and HOT_RESULT (PROTOCOL.md §14.3). */
#include "common/kv_wire.h"
#include "lib/codec.h"
#include "lib/req.h"

/*
 * HOT_DATA payload of elements [first, first + n) (float32): epoch and first
 * position, then the block dense, or, when fewer than a third of its values
 * are nonzero, as (key, value) pairs, which is shorter. Both give the
 * switch the same sums (untouched positions add +0).
 */
static size_t hot_encode(const struct ina_ctx *ctx, const struct ina_req *req, size_t first,
                         size_t n, int16_t e, uint8_t *out, uint16_t *flags)
{
    (void)ctx;
    (void)e;
    const float *g = (const float *)req->src + first;
    ina_put32(out, req->hot_epoch);
    ina_put32(out + 4, (uint32_t)first);
    size_t nnz = 0;
    for (size_t i = 0; i < n; i++)
        nnz += g[i] != 0.0f;
    uint8_t *p = out + INA_HOT_PREFIX_LEN;
    if (INA_HOT_KEYED_LEN * nnz >= 4 * n) {
        for (size_t i = 0; i < n; i++)
            ina_putf(p + 4 * i, g[i]);
        return INA_HOT_PREFIX_LEN + 4 * n;
    }
    *flags |= INA_FLAG_HOT_KEYED;
    for (size_t i = 0; i < n; i++)
        if (g[i] != 0.0f) {
            ina_put64(p, req->hot_keys[first + i]);
            ina_putf(p + 8, g[i]);
            p += INA_HOT_KEYED_LEN;
        }
    return (size_t)(p - out);
}

/* A HOT_RESULT answers the block only with the count, epoch and first position we sent. */
static int hot_check(const struct ina_ctx *ctx, const struct ina_req *req, size_t first, size_t n,
                     const struct ina_hdr *h, const uint8_t *in)
{
    (void)ctx;
    return h->count == n && ina_get32(in) == req->hot_epoch && ina_get32(in + 4) == first;
}

static size_t hot_decode(const struct ina_ctx *ctx, const struct ina_req *req, size_t first,
                         size_t n, int16_t e, const uint8_t *in)
{
    (void)ctx;
    (void)e;
    float *dst = (float *)req->dst + first;
    for (size_t i = 0; i < n; i++)
        dst[i] = ina_getf(in + INA_HOT_PREFIX_LEN + 4 * i);
    return 0;
}

const struct ina_codec ina__codec_hot = {
    .name = "hot", .data_kind = INA_K_HOT_DATA, .result_kind = INA_K_HOT_RESULT,
    .exps = INA_EXPS_NONE, .encode = hot_encode, .check = hot_check, .decode = hot_decode};
