/* lane.c: one lane's context: a socket, a session at its switch (or rank 0's host aggregator), a stream; opened and closed. */
#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "lib/ctx.h"
#include "lib/lanes.h"
#include "lib/req.h"
#include "lib/session.h"
#include "lib/stream.h"
#include "lib/transport.h"

static int is_loopback(const struct sockaddr_in *a)
{
    return (ntohl(a->sin_addr.s_addr) >> 24) == 127;
}

struct ina_ctx *ina__ctx_new(const ina_config *cfg, int lane, int nlanes)
{
    struct ina_ctx *ctx = calloc(1, sizeof(*ctx));
    if (!ctx)
        return NULL;
    ctx->magic = INA_CTX_LIVE;
    ctx->fd = -1;
    ctx->mcast_fd = -1;
    ctx->guard_fd = -1;
    ctx->wake_fd = -1;
    snprintf(ctx->job, sizeof(ctx->job), "%s", cfg->job);
    ctx->rank = cfg->rank;
    ctx->world = cfg->world_size;
    ctx->lane = lane;
    ctx->nlanes = nlanes;
    ctx->lanes_auto = cfg->lanes == 0 && lane == 0; /* ina_init: nlanes is its proposal */
    ctx->timeout_ms = cfg->timeout_ms ? cfg->timeout_ms : INA_DEFAULT_TIMEOUT_MS;
    ctx->join_timeout_ms = cfg->join_timeout_ms ? cfg->join_timeout_ms : INA_DEFAULT_JOIN_TIMEOUT_MS;
    ctx->rto_ms = cfg->rto_ms ? cfg->rto_ms : INA_DEFAULT_RTO_MS;
    ctx->admission_wait_ms = cfg->admission_wait_ms;
    const char *one = getenv("INA_ONE_ROUND");
    ctx->one_round_off = one && strcmp(one, "0") == 0;
    ctx->fallback_mode = cfg->fallback;
    ctx->float_add = cfg->float_add;
    ctx->sparse_mode = cfg->sparse;
    ctx->sparse_block = cfg->sparse_block ? cfg->sparse_block : INA_SPARSE_DEFAULT_BLOCK;
    ctx->sparse_threshold = cfg->sparse_threshold;
    ctx->sparse_crossover = cfg->sparse_crossover > 0 ? cfg->sparse_crossover
                                                      : INA_SPARSE_DEFAULT_CROSSOVER;
    ctx->sparse_min_bytes = cfg->sparse_min_bytes ? (size_t)cfg->sparse_min_bytes
                                                  : INA_SPARSE_DEFAULT_MIN_BYTES;
    ctx->busy_auto = cfg->busy_poll_us == INA_BUSY_POLL_AUTO;
    ctx->busy_poll_ns = (uint64_t)(ctx->busy_auto ? ina__busy_poll_auto(cfg, NULL, NULL)
                                                  : cfg->busy_poll_us) * 1000u;
    ctx->fixed_bits = cfg->fixed_point_bits;
    ctx->wire_bits = cfg->wire_bits;
    ctx->wire_half = cfg->wire_half;
    ctx->integrity = cfg->integrity;
    ctx->addr_is_default = cfg->switch_addr == ina__default_switch_addr;
    const char *quiet = getenv("INA_QUIET");
    ctx->quiet = quiet && *quiet && strcmp(quiet, "0") != 0;
    return ctx;
}

int ina__default_elems(const struct sockaddr_in *addr)
{
    return is_loopback(addr) ? INA_DEFAULT_ELEMS_LOOPBACK : INA_DEFAULT_ELEMS_NET;
}

int ina__lane_open(struct ina_ctx **out, const ina_config *cfg, const struct sockaddr_in *addr,
                   int lane, int nlanes, struct ina_refusal *refusal)
{
    struct ina_ctx *ctx = ina__ctx_new(cfg, lane, nlanes);
    if (!ctx)
        return -ENOMEM;

    const char *fault = getenv("INA_FAULT");
    if (fault && *fault && ina__fault_parse(&ctx->fault, fault) != 0) {
        free(ctx);
        return ina__fail(NULL, INA_ERR_CONFIG, "INA_FAULT='%s' is not a fault spec such as "
                         "drop=0.01,dup=0.01,reorder=0.05,seed=7", fault);
    }
    if (cfg->secret_file) {
        if (ina__hmac_key_from_file(&ctx->secret, cfg->secret_file) != 0) {
            free(ctx);
            return ina__fail(NULL, INA_ERR_CONFIG, "cannot read a shared secret from '%s' "
                             "(secret_file, INA_SECRET_FILE): missing, unreadable, empty or "
                             "over 4096 bytes", cfg->secret_file);
        }
        ctx->has_secret = 1;
    }
    if (ctx->integrity && !ctx->has_secret) {
        free(ctx);
        return ina__fail(NULL, INA_ERR_CONFIG, "integrity (INA_INTEGRITY=1) needs secret_file "
                         "(INA_SECRET_FILE): the tags' key is derived from the shared secret");
    }
    int rc = ina__net_open(ctx, addr);
    if (rc == 0 && ctx->rank == 0 && ctx->fallback_mode == INA_FALLBACK_HOST)
        rc = ina__fallback_prepare(ctx);
    if (rc == 0) {
        int elems = cfg->elems_per_packet ? cfg->elems_per_packet : ina__default_elems(addr);
        int window = cfg->window ? cfg->window : INA_DEFAULT_WINDOW;
        rc = ina__session_join(ctx, elems, window);
        if (rc == INA_ERR_NOSPACE && refusal) {
            /* One part of several: the caller decides for the whole job. */
            refusal->target = ctx->fallback_target;
            refusal->fallback = ctx->fallback;
            ctx->fallback = NULL;
        } else if (rc == INA_ERR_NOSPACE && ctx->fallback_mode == INA_FALLBACK_HOST &&
                   ctx->fallback_target.sin_port) {
            rc = ina__session_join_host(ctx, elems, window);
        }
    }
    if (rc == 0 && ctx->mcast_group)
        rc = ina__net_open_mcast(ctx); /* cannot receive the sums: fail, and end it for all */
    if (rc == 0 && (rc = ina__stream_init(ctx)) == 0)
        ina__udp_start(ctx); /* the socket (and the group) carry the stream */
    if (rc == 0)
        rc = ina__req_pool_init(ctx);
    if (rc == 0)
        ina__shm_attach(ctx); /* best effort: else the context stays on UDP */
    if (rc != 0) {
        ina__fail_once(ctx, rc, "ina_init (rank %d of job '%s'): %s", ctx->rank, ctx->job,
                       ina_strerror(rc));
        ina__fail_to_thread(ctx); /* ctx is freed: the thread keeps the message */
        ina__session_leave(ctx, ctx->session != 0);
        ina__fallback_close(ctx);
        ina__stream_free(ctx);
        ina__req_pool_free(ctx);
        if (ctx->mcast_fd >= 0)
            close(ctx->mcast_fd);
        if (ctx->guard_fd >= 0)
            close(ctx->guard_fd);
        if (ctx->fd >= 0)
            close(ctx->fd);
        free(ctx);
        return rc;
    }
    *out = ctx;
    return 0;
}

void ina__lane_release(struct ina_ctx *ctx, int abort)
{
    abort |= ctx->head != NULL;
    ina__stream_fail_all(ctx, INA_ERR_CLOSED);
    while (ctx->live) {
        struct ina_req *r = ctx->live;
        ctx->live = r->live_next;
        ina__req_release(ctx, r); /* frees what it owns (its sparse state, its probe) */
    }
    ina__req_pool_free(ctx); /* every request, waited or not */
    ina__session_leave(ctx, abort);
    ina__shm_detach(ctx);
    ina__fallback_close(ctx); /* after our LEAVE: it lingers until every rank left */
    ina__stream_free(ctx);
    if (ctx->fd >= 0)
        close(ctx->fd);
    if (ctx->mcast_fd >= 0) /* also after a move to the fallback, which has no group */
        close(ctx->mcast_fd);
    if (ctx->guard_fd >= 0)
        close(ctx->guard_fd);
    ctx->fd = ctx->mcast_fd = ctx->guard_fd = -1;
}

void ina__lane_close(struct ina_ctx *ctx, int abort)
{
    ina__lane_release(ctx, abort);
    free(ctx);
}
