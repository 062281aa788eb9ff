/* codec_fixed.c: float sums in fixed point with the configured scale (INA_OP_ADD_FIX, PROTOCOL.md §13, fixed.h). */
#include "lib/codec.h"
#include "lib/ctx.h"
#include "lib/fixed.h"
#include "lib/req.h"

static size_t fixed_encode(const struct ina_ctx *ctx, const struct ina_req *req, size_t first,
                           size_t n, int16_t e, uint8_t *out, uint16_t *flags)
{
    (void)e;
    (void)flags;
    /* An invalid input element goes as INA_FIX_INVALID: its sum comes back invalid. */
    ina__fixed_encode(req->dtype, req->src + first * req->esize, n, ctx->fixed_bits, out);
    return 4 * n;
}

static size_t fixed_decode(const struct ina_ctx *ctx, const struct ina_req *req, size_t first,
                           size_t n, int16_t e, const uint8_t *in)
{
    (void)e;
    return ina__fixed_decode(req->dtype, req->op, in, n, ctx->fixed_bits, ctx->world,
                             req->dst + first * req->esize);
}

const struct ina_codec ina__codec_fixed = {
    .name = "fixed", .data_kind = INA_K_DATA, .result_kind = INA_K_RESULT,
    .exps = INA_EXPS_NONE, .encode = fixed_encode, .decode = fixed_decode};
