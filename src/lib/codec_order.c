/* codec_order.c: float MAX and MIN as order keys on the switch's int32 max and min (PROTOCOL.md §8.9). */
#include "lib/codec.h"
#include "lib/dtype.h"
#include "lib/req.h"

static size_t order_encode(const struct ina_ctx *ctx, const struct ina_req *req, size_t first,
                           size_t n, int16_t e, uint8_t *out, uint16_t *flags)
{
    (void)ctx;
    (void)e;
    (void)flags;
    ina__block_encode_order(req->dtype, req->op, req->src + first * req->esize, n, out);
    return 4 * n;
}

static size_t order_decode(const struct ina_ctx *ctx, const struct ina_req *req, size_t first,
                           size_t n, int16_t e, const uint8_t *in)
{
    (void)ctx;
    (void)e;
    ina__block_decode_order(req->dtype, in, n, req->dst + first * req->esize);
    return 0;
}

const struct ina_codec ina__codec_order = {
    .name = "order", .data_kind = INA_K_DATA, .result_kind = INA_K_RESULT,
    .exps = INA_EXPS_NONE, .encode = order_encode, .decode = order_decode};
