/* ctx.c: the public API: context lifetime, argument checks, blocking and asynchronous all-reduce. */
#include <arpa/inet.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "lib/dtype.h"
#include "lib/internal.h"

/* Finalized context shells (see struct ina_ctx). Reachable, so no leak report. */
static struct ina_ctx *closed_list;
static pthread_mutex_t closed_lock = PTHREAD_MUTEX_INITIALIZER;

/* @return 0 if ctx is a live context, else the error every call returns. */
static int ctx_check(const ina_ctx *ctx)
{
    if (!ctx)
        return -EINVAL;
    if (ctx->magic == INA_CTX_CLOSED)
        return INA_ERR_CLOSED;
    return ctx->magic == INA_CTX_LIVE ? 0 : -EINVAL;
}

static int config_valid(const ina_config *cfg)
{
    size_t jl = cfg->job ? strlen(cfg->job) : 0;
    return cfg->switch_addr && jl >= 1 && jl <= INA_JOB_NAME_MAX && cfg->world_size >= 1 &&
           cfg->world_size <= INA_MAX_WORKERS && cfg->rank >= 0 && cfg->rank < cfg->world_size &&
           cfg->elems_per_packet >= 0 && cfg->elems_per_packet <= INA_MAX_ELEMS &&
           cfg->window >= 0 && cfg->window <= INA_MAX_WINDOW &&
           (cfg->window & (cfg->window - 1)) == 0 && cfg->timeout_ms >= 0 &&
           cfg->join_timeout_ms >= 0 && cfg->rto_ms >= 0;
}

static int is_loopback(const struct sockaddr_in *a)
{
    return (ntohl(a->sin_addr.s_addr) >> 24) == 127;
}

int ina_init(ina_ctx **out, const ina_config *cfg)
{
    if (!out)
        return -EINVAL;
    *out = NULL;
    if (!cfg || !config_valid(cfg))
        return -EINVAL;
    struct ina_ctx *ctx = calloc(1, sizeof(*ctx));
    if (!ctx)
        return -ENOMEM;
    ctx->magic = INA_CTX_LIVE;
    ctx->fd = -1;
    ctx->mcast_fd = -1;
    snprintf(ctx->job, sizeof(ctx->job), "%s", cfg->job);
    ctx->rank = cfg->rank;
    ctx->world = cfg->world_size;
    ctx->timeout_ms = cfg->timeout_ms ? cfg->timeout_ms : INA_DEFAULT_TIMEOUT_MS;
    ctx->join_timeout_ms = cfg->join_timeout_ms ? cfg->join_timeout_ms : INA_DEFAULT_JOIN_TIMEOUT_MS;
    ctx->rto_ms = cfg->rto_ms ? cfg->rto_ms : INA_DEFAULT_RTO_MS;

    const char *fault = getenv("INA_FAULT");
    if (fault && *fault && ina_fault_parse(&ctx->fault, fault) != 0) {
        free(ctx);
        return INA_ERR_CONFIG;
    }
    int rc = ina__net_open(ctx, cfg->switch_addr);
    if (rc == 0) {
        int elems = cfg->elems_per_packet;
        if (!elems)
            elems = is_loopback(&ctx->switch_addr) ? INA_DEFAULT_ELEMS_LOOPBACK : INA_DEFAULT_ELEMS_NET;
        rc = ina__session_join(ctx, elems, cfg->window ? cfg->window : INA_DEFAULT_WINDOW);
    }
    if (rc == 0 && ctx->mcast_group)
        rc = ina__net_open_mcast(ctx); /* cannot receive the sums: fail, and end it for all */
    if (rc == 0)
        rc = ina__stream_init(ctx);
    if (rc != 0) {
        ina__session_leave(ctx, ctx->session != 0);
        if (ctx->mcast_fd >= 0)
            close(ctx->mcast_fd);
        if (ctx->fd >= 0)
            close(ctx->fd);
        free(ctx);
        return rc;
    }
    *out = ctx;
    return 0;
}

int ina_init_env(ina_ctx **out)
{
    if (out)
        *out = NULL;
    ina_config cfg;
    int rc = ina_config_from_env(&cfg);
    return rc ? rc : ina_init(out, &cfg);
}

int ina_finalize(ina_ctx *ctx)
{
    if (!ctx)
        return 0;
    int rc = ctx_check(ctx);
    if (rc)
        return rc; /* finalized twice: INA_ERR_CLOSED */
    /* Leaving with work in flight breaks the collective for the other ranks:
     * end the session for them at once rather than let them time out. */
    int abort = ctx->head != NULL;
    ina__stream_fail_all(ctx, INA_ERR_CLOSED);
    while (ctx->live) {
        struct ina_req *r = ctx->live;
        ctx->live = r->live_next;
        free(r);
    }
    ina__session_leave(ctx, abort);
    ina__stream_free(ctx);
    if (ctx->fd >= 0)
        close(ctx->fd);
    if (ctx->mcast_group && ctx->mcast_fd >= 0)
        close(ctx->mcast_fd);
    memset(ctx, 0, sizeof(*ctx));
    ctx->magic = INA_CTX_CLOSED;
    ctx->fd = -1;
    pthread_mutex_lock(&closed_lock);
    ctx->next_closed = closed_list;
    closed_list = ctx;
    pthread_mutex_unlock(&closed_lock);
    return 0;
}

static int check_args(const ina_ctx *ctx, const void *sendbuf, void *recvbuf, size_t count,
                      ina_dtype dtype, ina_op op)
{
    int rc = ctx_check(ctx);
    if (rc)
        return rc;
    if ((unsigned)dtype > 15 || (unsigned)op > 15)
        return -EINVAL;
    const size_t esize = ina__dtype_size(dtype);
    if (esize == 0 || (unsigned)op > INA_AVG)
        return INA_ERR_NOTSUP; /* reserved values */
    /* Max and min of block-floating-point values would need the non-finite
     * class counts (which add) to compare instead, and would return a
     * quantized value rather than one of the inputs: integers only. */
    if ((op == INA_MAX || op == INA_MIN) && dtype != INA_INT32)
        return INA_ERR_NOTSUP;
    if (count > SIZE_MAX / esize)
        return -EOVERFLOW;
    if (count > 0 && (!sendbuf || !recvbuf))
        return -EINVAL;
    /* Elements are read and written through their C type: they must be
     * aligned to their size. */
    if (((uintptr_t)sendbuf | (uintptr_t)recvbuf) & (esize - 1))
        return -EINVAL;
    if (ctx->broken)
        return INA_ERR_CLOSED;
    return 0;
}

/*
 * The 64-bit seed of an operation's packet tags (wire.h, byte 31): a hash of
 * (operation number, count, dtype, op). Ranks that disagree on an operation almost
 * surely have different seeds, and because each packet's 8-bit tag also mixes
 * in the packet's index (stream.c: packet_tag), every round of a misaligned
 * stream is an independent 1-in-256 check. Empty operations send nothing and
 * take no number. The API op is mixed in, not only the wire op: SUM and AVG
 * share the wire's add but give different results, so ranks mixing them
 * disagree too. (SUM mixes in 0: the seeds of SUM are those of before ops
 * existed.)
 */
static uint64_t op_tag_seed(uint64_t opno, size_t count, ina_dtype dtype, ina_op op)
{
    uint64_t x = opno * 0x9E3779B97F4A7C15ull ^ (uint64_t)count * 0xC2B2AE3D27D4EB4Full ^
                 (uint64_t)dtype ^ (uint64_t)op << 8;
    x ^= x >> 31;
    x *= 0xBF58476D1CE4E5B9ull;
    x ^= x >> 29;
    return x;
}

struct ina_req *ina__req_create(struct ina_ctx *ctx, const void *sendbuf, void *recvbuf,
                                size_t count, ina_dtype dtype, ina_op op)
{
    struct ina_req *req = calloc(1, sizeof(*req));
    if (!req)
        return NULL;
    req->ctx = ctx;
    req->src = sendbuf;
    req->dst = recvbuf;
    req->count = count;
    req->dtype = dtype;
    req->op = op;
    req->esize = ina__dtype_size(dtype);
    req->wire_op = ina__wire_op(op);
    req->quantized = ina__dtype_quantized(dtype);
    req->nblocks = (count + ctx->elems - 1) / ctx->elems;
    req->lag = req->quantized ? (req->nblocks < ctx->window ? req->nblocks : ctx->window) : 0;
    req->npackets = req->nblocks + req->lag;
    req->live_next = ctx->live;
    if (ctx->live)
        ctx->live->live_prev = req;
    ctx->live = req;
    ctx->nreqs++;
    req->tag_seed = op_tag_seed(ctx->nops_started + (req->npackets != 0), count, dtype, op);
    if (req->npackets == 0) {
        req->done = 1; /* count 0: nothing to send, every rank agrees */
        ctx->stats.ops++;
    } else {
        ctx->nops_started++;
        ina__stream_enqueue(ctx, req);
    }
    return req;
}

int ina_allreduce_start(ina_ctx *ctx, const void *sendbuf, void *recvbuf, size_t count,
                        ina_dtype dtype, ina_op op, ina_req **out)
{
    if (!out)
        return -EINVAL;
    *out = NULL;
    int rc = check_args(ctx, sendbuf, recvbuf, count, dtype, op);
    if (rc)
        return rc;
    if (ctx->nreqs >= INA_MAX_REQS)
        return INA_ERR_BUSY;
    ina_req *req = ina__req_create(ctx, sendbuf, recvbuf, count, dtype, op);
    if (!req)
        return -ENOMEM;
    if (!req->done)
        ina__stream_progress(ctx, 0);
    *out = req;
    return 0;
}

int ina_test(ina_req *req, int *done)
{
    if (!req || !done)
        return -EINVAL;
    if (!req->done)
        ina__stream_progress(req->ctx, 0);
    *done = req->done;
    return req->done ? req->status : 0;
}

int ina_wait(ina_req *req)
{
    if (!req)
        return 0;
    struct ina_ctx *ctx = req->ctx;
    /* Bounded: progress fails every request once timeout_ms pass without a
     * result, so this loop ends. */
    while (!req->done)
        ina__stream_progress(ctx, 100);
    int status = req->status;
    if (req->live_prev)
        req->live_prev->live_next = req->live_next;
    else
        ctx->live = req->live_next;
    if (req->live_next)
        req->live_next->live_prev = req->live_prev;
    ctx->nreqs--;
    free(req);
    return status;
}

int ina_allreduce(ina_ctx *ctx, const void *sendbuf, void *recvbuf, size_t count,
                  ina_dtype dtype, ina_op op)
{
    ina_req *req;
    int rc = ina_allreduce_start(ctx, sendbuf, recvbuf, count, dtype, op, &req);
    return rc ? rc : ina_wait(req);
}

int ina_get_stats(const ina_ctx *ctx, ina_stats *st)
{
    if (!st)
        return -EINVAL;
    int rc = ctx_check(ctx);
    if (rc)
        return rc;
    *st = ctx->stats;
    return 0;
}

int ina_get_info(const ina_ctx *ctx, ina_info *info)
{
    if (!info)
        return -EINVAL;
    int rc = ctx_check(ctx);
    if (rc)
        return rc;
    memset(info, 0, sizeof(*info));
    info->rank = ctx->rank;
    info->world_size = ctx->world;
    info->elems_per_packet = (int)ctx->elems;
    info->window = (int)ctx->window;
    info->job_id = ctx->job_id;
    info->session_id = ctx->session;
    return 0;
}
