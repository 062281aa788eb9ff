/* plan.c: how a request travels: its codec (payload format), wire op, rounds, lag and packets, from its dtype, op and what the switch offers. */
#include "lib/codec.h"
#include "lib/ctx.h"
#include "lib/dtype.h"
#include "lib/req.h"
#include "lib/wire16.h"

int ina__float_add_in_use(const struct ina_ctx *ctx)
{
    return ctx->float_add == INA_FLOAT_ADD_SWITCH && (ctx->switch_caps & INA_FLAG_CAP_F32);
}

int ina__fixed_in_use(const struct ina_ctx *ctx)
{
    return (ctx->switch_caps & INA_FLAG_CAP_FIX) ? ctx->fixed_bits : 0;
}

int ina__wire16_fmt(const struct ina_ctx *ctx, ina_dtype dtype)
{
    if (!(ctx->switch_caps & INA_FLAG_CAP_H16) || ctx->wire_bits == 32 ||
        (dtype == INA_FLOAT32 && ctx->wire_bits != 16))
        return -1;
    return ina__w16_fmt(dtype, ctx->wire_half == INA_WIRE_HALF_FP16 ? INA_H16_F16 : INA_H16_BF16);
}

/*
 * A dense request. Every rank decides alike: the same count, dtype, op,
 * settings and switch. The float dtypes go as block floating point
 * (exponents agreed one round ahead, lag = min(window, nblocks)), unless
 * one of the rules below sends them otherwise; INT32 goes as is.
 */
void ina__req_plan_dense(struct ina_ctx *ctx, struct ina_req *req)
{
    ina_op op = req->op;
    ina_dtype dtype = req->dtype;
    req->wire_op = ina__wire_op(op);
    req->codec = ina__dtype_quantized(dtype) ? &ina__codec_bfp : &ina__codec_dtype;
    req->nblocks = (req->count + ctx->elems - 1) / ctx->elems;
    /*
     * A float sum of at most one window of blocks goes in one round per
     * block (INA_OP_ADD_BFP), if the switch can: the two-round schedule
     * would send each of its blocks twice (its lag is the whole op) and
     * costs a second round trip. Only with two ranks: the switch aligns
     * contributions by rounding shifts as they arrive, and with three or
     * more the rounding of a partial sum depends on the arrival order, so a
     * rerun could differ in the last bits; with two there is one shift of
     * one operand whichever comes first (PROTOCOL.md §8.7). Larger ops keep
     * two rounds: their lag is a window among many blocks. Every rank
     * decides alike: same count, world, window and switch.
     */
    if (req->codec == &ina__codec_bfp && (op == INA_SUM || op == INA_AVG) &&
        (ctx->switch_caps & INA_FLAG_CAP_BFP) && !ctx->one_round_off && ctx->world <= 2 &&
        req->nblocks <= ctx->window) {
        req->codec = &ina__codec_bfp1;
        req->wire_op = INA_OP_ADD_BFP;
    }
    /* Asked for, and the switch adds floats: no quantization at all, one
     * round at any size (FLOAT64 stays quantized: binary32 adds would lose
     * its precision). */
    if (ina__float_add_in_use(ctx) && ina__dtype_float_wire(dtype) &&
        (op == INA_SUM || op == INA_AVG)) {
        req->codec = &ina__codec_f32;
        req->wire_op = INA_OP_ADD_F32;
    }
    /* The 16-bit wire (§8.10): FLOAT16 and BFLOAT16 at their own 16 bits
     * (FLOAT32 too when asked for), half the bytes of every 32-bit path;
     * one round at any size, 2k elements per packet. */
    int f16 = op == INA_SUM || op == INA_AVG ? ina__wire16_fmt(ctx, dtype) : -1;
    if (f16 >= 0) {
        req->codec = &ina__codec_h16;
        req->wire_op = ina__w16_op((enum ina_h16_fmt)f16);
    }
    /* Fixed point (P4SGD's Q8.23, §13): every rank scales by the 2^f it was
     * configured with, so nothing is agreed per operation: one round at any
     * size, and the switch's sum is exact (config_check keeps float_add off). */
    if (ina__fixed_in_use(ctx) && req->codec->exps != INA_EXPS_NONE &&
        (op == INA_SUM || op == INA_AVG)) {
        req->codec = &ina__codec_fixed;
        req->wire_op = INA_OP_ADD_FIX;
    }
    /* Float max and min: exact, on the switch's int32 max and min (§8.9). */
    if (ina__dtype_float_wire(dtype) && (op == INA_MAX || op == INA_MIN)) {
        req->codec = &ina__codec_order;
        req->wire_op = ina__wire_op(op);
    }
    req->block_elems = (size_t)ctx->elems * (req->codec->per_word == 2 ? 2 : 1);
    req->nblocks = (req->count + req->block_elems - 1) / req->block_elems;
    req->lag = req->codec->exps == INA_EXPS_AHEAD
                   ? (req->nblocks < ctx->window ? req->nblocks : ctx->window)
                   : 0;
    req->npackets = req->nblocks + req->lag;
}

/*
 * A block-sparse request (sparse.c, PROTOCOL.md §17): its blocks go as
 * 16-bit elements where a dense one would (ops 12, 13, §17.11), as binary32
 * if the switch adds floats (as dense ones would), else in their dtype's
 * encoding, each place with its own exponent (no lag); the number of
 * packets is known when its schedule ends.
 */
void ina__req_plan_sparse(struct ina_ctx *ctx, struct ina_req *req)
{
    req->sparse = 1;
    req->undecided = 0;
    req->lag = 0;
    req->npackets = UINT64_MAX;
    int f16 = ina__wire16_fmt(ctx, req->dtype);
    if (f16 >= 0) {
        req->codec = &ina__codec_h16;
        req->wire_op = f16 == INA_H16_F16 ? INA_OP_SPARSE_F16 : INA_OP_SPARSE_BF16;
    } else if (ina__float_add_in_use(ctx) && ina__dtype_float_wire(req->dtype)) {
        req->codec = &ina__codec_f32;
        req->wire_op = INA_OP_SPARSE_F32;
    } else {
        req->codec = ina__dtype_quantized(req->dtype) ? &ina__codec_bfp : &ina__codec_dtype;
        req->wire_op = INA_OP_SPARSE_I32;
    }
}
