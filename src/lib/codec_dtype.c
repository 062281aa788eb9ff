/* codec_dtype.c: blocks in their dtype's own int32 encoding (dtype.h): INT32 as is, the float dtypes as block floating point in two rounds or in one. */
#include "lib/codec.h"
#include "lib/ctx.h"
#include "lib/dtype.h"
#include "lib/req.h"

static size_t dtype_encode(const struct ina_ctx *ctx, const struct ina_req *req, size_t first,
                           size_t n, int16_t e, uint8_t *out, uint16_t *flags)
{
    (void)flags;
    ina__block_encode(req->dtype, req->src + first * req->esize, n, e, ctx->world, out);
    return 4 * n;
}

static size_t dtype_decode(const struct ina_ctx *ctx, const struct ina_req *req, size_t first,
                           size_t n, int16_t e, const uint8_t *in)
{
    ina__block_decode(req->dtype, req->op, in, n, e, ctx->world, req->dst + first * req->esize);
    return 0;
}

static size_t bfp_lost(const struct ina_ctx *ctx, const struct ina_req *req, size_t first,
                       size_t n, int16_t e)
{
    return ina__block_lost(req->dtype, req->src + first * req->esize, n, e, ctx->world);
}

const struct ina_codec ina__codec_dtype = {
    .name = "dtype", .data_kind = INA_K_DATA, .result_kind = INA_K_RESULT,
    .exps = INA_EXPS_NONE, .encode = dtype_encode, .decode = dtype_decode};

const struct ina_codec ina__codec_bfp = {
    .name = "bfp", .data_kind = INA_K_DATA, .result_kind = INA_K_RESULT,
    .exps = INA_EXPS_AHEAD, .encode = dtype_encode, .decode = dtype_decode, .lost = bfp_lost};

const struct ina_codec ina__codec_bfp1 = {
    .name = "bfp1", .data_kind = INA_K_DATA, .result_kind = INA_K_RESULT,
    .exps = INA_EXPS_OWN, .encode = dtype_encode, .decode = dtype_decode, .lost = bfp_lost};
