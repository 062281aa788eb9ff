/* codec_f32.c: float blocks as binary32 for the switch to add (INA_OP_ADD_F32, PROTOCOL.md §8.8). */
#include "lib/codec.h"
#include "lib/ctx.h"
#include "lib/dtype.h"
#include "lib/req.h"

static size_t f32_encode(const struct ina_ctx *ctx, const struct ina_req *req, size_t first,
                         size_t n, int16_t e, uint8_t *out, uint16_t *flags)
{
    (void)ctx;
    (void)e;
    (void)flags;
    ina__block_encode_f32wire(req->dtype, req->src + first * req->esize, n, out);
    return 4 * n;
}

static size_t f32_decode(const struct ina_ctx *ctx, const struct ina_req *req, size_t first,
                         size_t n, int16_t e, const uint8_t *in)
{
    (void)e;
    ina__block_decode_f32wire(req->dtype, req->op, in, n, ctx->world,
                              req->dst + first * req->esize);
    return 0;
}

const struct ina_codec ina__codec_f32 = {
    .name = "f32", .data_kind = INA_K_DATA, .result_kind = INA_K_RESULT,
    .exps = INA_EXPS_NONE, .encode = f32_encode, .decode = f32_decode};
