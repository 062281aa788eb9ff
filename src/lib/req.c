/* req.c: an operation's requests: from the caller's arguments, planned (plan.c, sparse.c), tagged, and queued on the stream. */
#include <errno.h>
#include <stdlib.h>

#include "common/kv_wire.h"
#include "lib/codec.h"
#include "lib/ctx.h"
#include "lib/dtype.h"
#include "lib/req.h"
#include "lib/stream.h"

/*
 * The 64-bit seed of an operation's packet tags (wire.h, byte 31): a hash of
 * (operation number, count, dtype, op). Ranks that disagree on an operation almost
 * surely have different seeds, and because each packet's 8-bit tag also mixes
 * in the packet's index (stream.c: packet_tag), every round of a misaligned
 * stream is an independent 1-in-256 check. Empty operations send nothing and
 * take no number. The API op is mixed in, not only the wire op: SUM and AVG
 * share the wire's add but give different results, so ranks mixing them
 * disagree too. (SUM mixes in 0: the seeds of SUM are those of before ops
 * existed.) A dense fixed-point operation (§13) also mixes in its fractional bits,
 * so ranks configured with different scales disagree on every tag; an
 * operation asked sparse mixes in its mode and block length instead (§17).
 */
static uint64_t op_tag_seed(uint64_t opno, size_t count, ina_dtype dtype, ina_op op,
                            uint64_t mix)
{
    uint64_t x = opno * 0x9E3779B97F4A7C15ull ^ (uint64_t)count * 0xC2B2AE3D27D4EB4Full ^
                 (uint64_t)dtype ^ (uint64_t)op << 8 ^ mix << 16;
    x ^= x >> 31;
    x *= 0xBF58476D1CE4E5B9ull;
    x ^= x >> 29;
    return x;
}

void ina__live_link(struct ina_ctx *ctx, struct ina_req *req)
{
    req->live_next = ctx->live;
    if (ctx->live)
        ctx->live->live_prev = req;
    ctx->live = req;
    ctx->nreqs++;
}

void ina__live_unlink(struct ina_ctx *ctx, struct ina_req *req)
{
    if (req->live_prev)
        req->live_prev->live_next = req->live_next;
    else
        ctx->live = req->live_next;
    if (req->live_next)
        req->live_next->live_prev = req->live_prev;
    ctx->nreqs--;
}

struct ina_req *ina__req_new(struct ina_ctx *ctx, const void *sendbuf, void *recvbuf, size_t count,
                             ina_dtype dtype, ina_op op)
{
    struct ina_req *req = ina__req_alloc(ctx);
    if (!req)
        return NULL;
    req->ctx = ctx;
    req->src = sendbuf;
    req->dst = recvbuf;
    req->count = count;
    req->dtype = dtype;
    req->op = op;
    req->esize = ina__dtype_size(dtype);
    req->block_elems = ctx->elems;
    return req;
}

/* The mode a request asked for (INA_SPARSE_DEFAULT: the context's), as it will
 * run here: OFF where sparse cannot run (the switch does not offer it, MAX or
 * MIN, no block fits a packet), and AUTO below the size floor is OFF too.
 * The floor is the whole operation's size, not a part's: an operation the
 * caller sees above it is measured in every part (lanes and shards cut it
 * into parts smaller than the floor). Every rank decides alike: the same
 * count, dtype, op, settings and switch. */
static int sparse_mode_of(const struct ina_ctx *ctx, size_t count, size_t phase, size_t total,
                          ina_dtype dtype, ina_op op, int mode)
{
    if (mode == INA_SPARSE_DEFAULT)
        mode = ctx->sparse_mode;
    if (mode == INA_SPARSE_OFF || !ina__sparse_possible(ctx, count, phase, dtype, op))
        return INA_SPARSE_OFF;
    if (mode == INA_SPARSE_AUTO && total * ina__dtype_size(dtype) < ctx->sparse_min_bytes)
        return INA_SPARSE_OFF;
    return mode;
}

/*
 * An AUTO operation is preceded in the stream by its probe: a one-element
 * INT32 SUM of the ranks' block densities (PROTOCOL.md §17.6), a request of
 * its own that takes no operation number and is not counted as an
 * operation. When it completes, stream.c hands its sum to
 * ina__sparse_decide(), which plans the operation sparse or dense.
 */
static int probe_create(struct ina_ctx *ctx, struct ina_req *req)
{
    struct ina_req *pr = ina__req_new(ctx, &req->probe_val, &req->probe_sum, 1, INA_INT32, INA_SUM);
    if (!pr)
        return -ENOMEM;
    pr->wire_op = INA_OP_ADD_I32;
    pr->codec = &ina__codec_dtype;
    pr->nblocks = pr->npackets = 1;
    pr->tag_seed = req->tag_seed ^ 0x5052424Full; /* "PRBO" */
    pr->probe_for = req;
    req->probe = pr;
    return 0;
}

struct ina_req *ina__req_create(struct ina_ctx *ctx, const void *sendbuf, void *recvbuf,
                                size_t count, ina_dtype dtype, ina_op op, int sparse_mode,
                                size_t offset, size_t total)
{
    struct ina_req *req = ina__req_new(ctx, sendbuf, recvbuf, count, dtype, op);
    if (!req)
        return NULL;
    /* Sparse blocks lie on the whole operation's grid (PROTOCOL.md §17.2). */
    const size_t phase = offset ? offset % (size_t)ctx->sparse_block : 0;
    int mode = sparse_mode_of(ctx, count, phase, total, dtype, op, sparse_mode);
    /* The tag tells sparse ops (and their block length) from dense ones, and
     * a dense fixed-point op's scale (§13) from another's; an op asked sparse
     * keeps its sparse term even if it then goes dense (§17). */
    uint64_t mix = 0;
    if (mode != INA_SPARSE_OFF) {
        mix = (uint64_t)mode | (uint64_t)ctx->sparse_block << 4;
    } else {
        ina__req_plan_dense(ctx, req);
        if (req->codec == &ina__codec_fixed)
            mix = (uint64_t)ctx->fixed_bits;
    }
    req->tag_seed = op_tag_seed(ctx->nops_started + (count != 0), count, dtype, op, mix);
    if (mode != INA_SPARSE_OFF && (ina__sparse_prepare(ctx, req, phase, mode == INA_SPARSE_AUTO) != 0 ||
                                   (mode == INA_SPARSE_AUTO && probe_create(ctx, req) != 0))) {
        ina__req_release(ctx, req);
        return NULL;
    }
    ina__live_link(ctx, req);
    if (count == 0) {
        req->done = 1; /* count 0: nothing to send, every rank agrees */
        ctx->stats.ops++;
    } else {
        ctx->nops_started++;
        if (req->probe)
            ina__stream_enqueue(ctx, req->probe);
        ina__stream_enqueue(ctx, req);
    }
    return req;
}

struct ina_req *ina__req_create_hot(struct ina_ctx *ctx, const float *grad, float *sum, size_t count,
                                    uint32_t epoch, const uint64_t *keys)
{
    struct ina_req *req = ina__req_new(ctx, grad, sum, count, INA_FLOAT32, INA_SUM);
    if (!req)
        return NULL;
    req->codec = &ina__codec_hot;
    req->wire_op = INA_OP_HOT_F32;
    req->hot_epoch = epoch;
    req->hot_keys = keys;
    req->nblocks = (count + ctx->elems - 1) / ctx->elems;
    req->npackets = req->nblocks;
    ina__live_link(ctx, req);
    /* The epoch is mixed into the tags: ranks on different hot sets disagree. */
    req->tag_seed = op_tag_seed(ctx->nops_started + (req->npackets != 0), count, INA_FLOAT32,
                                INA_SUM, 0) ^ (uint64_t)epoch * 0x9E3779B97F4A7C15ull;
    if (req->npackets == 0) {
        req->done = 1;
        ctx->stats.ops++;
    } else {
        ctx->nops_started++;
        ina__stream_enqueue(ctx, req);
    }
    return req;
}
