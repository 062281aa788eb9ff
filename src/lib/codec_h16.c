/* codec_h16.c: float blocks as 16-bit elements, two per word, that the switch adds in binary32 (ops 10 and 11, PROTOCOL.md §8.10). */
#include "lib/codec.h"
#include "lib/ctx.h"
#include "lib/req.h"
#include "lib/wire16.h"

/*
 * The format is the wire op's (plan.c chose it): binary16 on op 10, bfloat16
 * on op 11. FLOAT16 and BFLOAT16 go as their own bits (exp 0); FLOAT32 is
 * rounded to bfloat16, or scaled per block into binary16 with its own exp
 * (each rank's own: the switch scales every packet by its exp). The RESULT
 * carries the sums' scale s in its exp (exps OWN), and the elements with it.
 */
static enum ina_h16_fmt fmt_of(const struct ina_req *req) { return ina__h16_fmt_of_op(req->wire_op); }

static int16_t h16_scale(const struct ina_ctx *ctx, const struct ina_req *req, size_t first,
                         size_t n)
{
    (void)ctx;
    return ina__w16_scale(req->dtype, fmt_of(req), req->src + first * req->esize, n);
}

static size_t h16_encode(const struct ina_ctx *ctx, const struct ina_req *req, size_t first,
                         size_t n, int16_t e, uint8_t *out, uint16_t *flags)
{
    (void)ctx;
    (void)flags;
    ina__w16_encode_at(req->dtype, fmt_of(req), req->src + first * req->esize, n, e, out);
    return 4 * ina__h16_words(n);
}

static size_t h16_decode(const struct ina_ctx *ctx, const struct ina_req *req, size_t first,
                         size_t n, int16_t e, const uint8_t *in)
{
    ina__w16_decode(req->dtype, fmt_of(req), req->op, in, n, e, ctx->world,
                    req->dst + first * req->esize);
    return 0;
}

const struct ina_codec ina__codec_h16 = {
    .name = "h16", .data_kind = INA_K_DATA, .result_kind = INA_K_RESULT,
    .exps = INA_EXPS_OWN, .per_word = 2, .scale = h16_scale, .encode = h16_encode,
    .decode = h16_decode};
