/* ctx.c: the public API: context lifetime, argument checks, blocking and asynchronous all-reduce. */
#include <arpa/inet.h>
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/addr.h"
#include "common/busy_poll.h"
#include "lib/ctx.h"
#include "lib/dtype.h"
#include "lib/fixed.h"
#include "lib/lanes.h"
#include "lib/req.h"
#include "lib/session.h"
#include "lib/stream.h"

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

/* @return 0, or -EINVAL with the thread's message naming the field, its
 * value and the rule (ina_last_error(NULL)). */
static int config_check(const ina_config *cfg)
{
#define BAD(...) ina__fail(NULL, -EINVAL, __VA_ARGS__)
    size_t jl = cfg->job ? strlen(cfg->job) : 0;
    if (!cfg->switch_addr)
        return BAD("switch_addr is NULL (want \"HOST\" or \"HOST:PORT\")");
    if (!cfg->job || jl < 1 || jl > INA_JOB_NAME_MAX)
        return BAD("job name %s%s%s is %s (want 1..%d bytes)", cfg->job ? "'" : "",
                   cfg->job ? cfg->job : "NULL", cfg->job ? "'" : "",
                   jl ? "too long" : "empty", INA_JOB_NAME_MAX);
    if (cfg->world_size < 1 || cfg->world_size > INA_MAX_WORKERS)
        return BAD("world_size %d is outside 1..%d", cfg->world_size, INA_MAX_WORKERS);
    if (cfg->rank < 0 || cfg->rank >= cfg->world_size)
        return BAD("rank %d is not in 0..world_size-1 (world_size %d)", cfg->rank,
                   cfg->world_size);
    if (cfg->elems_per_packet < 0 || cfg->elems_per_packet > INA_MAX_ELEMS)
        return BAD("elems_per_packet %d is outside 0..%d (0: the default)",
                   cfg->elems_per_packet, INA_MAX_ELEMS);
    if (cfg->window < 0 || cfg->window > INA_MAX_WINDOW || (cfg->window & (cfg->window - 1)))
        return BAD("window %d is not 0 (the default) or a power of 2 up to %d", cfg->window,
                   INA_MAX_WINDOW);
    if (cfg->timeout_ms < 0 || cfg->join_timeout_ms < 0 || cfg->rto_ms < 0 ||
        cfg->admission_wait_ms < 0)
        return BAD("negative time: timeout_ms %d, join_timeout_ms %d, rto_ms %d, "
                   "admission_wait_ms %d (0 means the default)", cfg->timeout_ms,
                   cfg->join_timeout_ms, cfg->rto_ms, cfg->admission_wait_ms);
    if (cfg->lanes < 0 || cfg->lanes > INA_MAX_LANES)
        return BAD("lanes %d is outside 0..%d", cfg->lanes, INA_MAX_LANES);
    if (cfg->fallback != INA_FALLBACK_HOST && cfg->fallback != INA_FALLBACK_NONE)
        return BAD("fallback %d is not INA_FALLBACK_HOST (0) or INA_FALLBACK_NONE (1)",
                   cfg->fallback);
    if (cfg->float_add != INA_FLOAT_ADD_QUANTIZED && cfg->float_add != INA_FLOAT_ADD_SWITCH)
        return BAD("float_add %d is not INA_FLOAT_ADD_QUANTIZED (0) or INA_FLOAT_ADD_SWITCH (1)",
                   cfg->float_add);
    if (cfg->sparse != INA_SPARSE_OFF && cfg->sparse != INA_SPARSE_ON &&
        cfg->sparse != INA_SPARSE_AUTO)
        return BAD("sparse %d is not INA_SPARSE_OFF (0), INA_SPARSE_ON (1) or INA_SPARSE_AUTO (2)",
                   cfg->sparse);
    if (cfg->sparse_block != 0 &&
        (cfg->sparse_block < INA_SPARSE_MIN_BLOCK || cfg->sparse_block > INA_SPARSE_MAX_BLOCK_CFG))
        return BAD("sparse_block %d is not 0 (the default, %d) or %d..%d elements",
                   cfg->sparse_block, INA_SPARSE_DEFAULT_BLOCK, INA_SPARSE_MIN_BLOCK,
                   INA_SPARSE_MAX_BLOCK_CFG);
    if (!(cfg->sparse_threshold >= 0 && cfg->sparse_threshold < INFINITY))
        return BAD("sparse_threshold %g is not a finite number >= 0 (0: exact)",
                   cfg->sparse_threshold);
    if (!(cfg->sparse_crossover >= 0 && cfg->sparse_crossover <= 256))
        return BAD("sparse_crossover %g is not 0 (the default, %g) or a density in (0, 256]",
                   cfg->sparse_crossover, INA_SPARSE_DEFAULT_CROSSOVER);
    if (cfg->sparse_min_bytes < 0)
        return BAD("sparse_min_bytes %d is negative (0: the default, %d)", cfg->sparse_min_bytes,
                   INA_SPARSE_DEFAULT_MIN_BYTES);
    if ((cfg->busy_poll_us < 0 && cfg->busy_poll_us != INA_BUSY_POLL_AUTO) ||
        cfg->busy_poll_us > INA_BUSY_POLL_MAX_US)
        return BAD("busy_poll_us %d is not INA_BUSY_POLL_AUTO (-1) or 0..%d (INA_BUSY_POLL_US; "
                   "0: never spin)", cfg->busy_poll_us, INA_BUSY_POLL_MAX_US);
    if (cfg->fixed_point_bits < 0 || cfg->fixed_point_bits > INA_FIXED_MAX_BITS)
        return BAD("fixed_point_bits %d is outside 0..%d (INA_FIXED_POINT; 0: off)",
                   cfg->fixed_point_bits, INA_FIXED_MAX_BITS);
    if (cfg->integrity != 0 && cfg->integrity != 1)
        return BAD("integrity %d is not 0 (off) or 1 (INA_INTEGRITY)", cfg->integrity);
    if (cfg->wire_bits != 0 && cfg->wire_bits != 16 && cfg->wire_bits != 32)
        return BAD("wire_bits %d is not 0 (the default), 16 or 32 (INA_WIRE_BITS)",
                   cfg->wire_bits);
    if (cfg->wire_half != INA_WIRE_HALF_BF16 && cfg->wire_half != INA_WIRE_HALF_FP16)
        return BAD("wire_half %d is not INA_WIRE_HALF_BF16 (0) or INA_WIRE_HALF_FP16 (1) "
                   "(INA_WIRE_HALF)", cfg->wire_half);
    if (cfg->fixed_point_bits && cfg->float_add == INA_FLOAT_ADD_SWITCH)
        return BAD("fixed_point_bits %d and float_add INA_FLOAT_ADD_SWITCH both say how float "
                   "sums travel: choose one", cfg->fixed_point_bits);
    return 0;
#undef BAD
}

/* Keep a finalized context's shell (see struct ina_ctx). */
static void ctx_retire(struct ina_ctx *ctx)
{
    memset(ctx, 0, sizeof(*ctx));
    ctx->magic = INA_CTX_CLOSED;
    ctx->fd = -1;
    pthread_mutex_lock(&closed_lock);
    ctx->next_closed = closed_list;
    closed_list = ctx;
    pthread_mutex_unlock(&closed_lock);
}

/* Leave and close parts [0, n): with abort, the switches end those jobs for every rank at once. */
static void parts_close(struct ina_ctx **part, int n, int abort)
{
    for (int i = 0; i < n; i++)
        ina__lane_close(part[i], abort);
}

/*
 * lanes = 0: part 0 joined with this rank's proposal of nshards x lanes
 * parts (its JOIN's nlanes, PROTOCOL.md §5.6) and now holds the job's
 * agreed count. Every rank lists the same switches, so the count is a
 * multiple of them; a switch that says otherwise breaks the protocol.
 * @return 0 and *nlanes the lanes per switch, or INA_ERR_PROTO.
 */
static int adopt_lanes(struct ina_ctx *part0, int nshards, int *nlanes)
{
    part0->lanes_auto = 0; /* agreed: a later JOIN (fallback) keeps the count */
    if (part0->nlanes < nshards || part0->nlanes % nshards != 0)
        return ina__fail(NULL, INA_ERR_PROTO, "the switch agreed %d parts for job '%s', not "
                         "a multiple of its %d switches", part0->nlanes, part0->job, nshards);
    *nlanes = part0->nlanes / nshards;
    return 0;
}

/*
 * A part was refused (NOSPACE) and the refusal named rank 0's host
 * aggregator: the whole job moves there, as if INA_SWITCH named only that
 * aggregator: nlanes parts, one pool of nlanes windows. Rank 0 starts it
 * first (the others retry their JOINs until it answers). With lanes = 0 and
 * no count agreed yet (the refusal was part 0's), part 0 proposes *nlanes
 * there and the aggregator agrees the count, which *nlanes takes.
 */
static int parts_fallback(struct ina_ctx *parent, const ina_config *cfg,
                          const struct sockaddr_in *target, struct ina_ctx **part, int *nlanes,
                          int agreed, int *n)
{
    ina_config fb = *cfg;
    fb.fallback = INA_FALLBACK_NONE; /* the aggregator has room by construction */
    if (agreed)
        fb.lanes = *nlanes;
    int elems = cfg->elems_per_packet ? cfg->elems_per_packet : ina__default_elems(target);
    int window = cfg->window ? cfg->window : INA_DEFAULT_WINDOW;
    /* (Not agreed yet: the count will be at most rank 0's proposal, *nlanes.) */
    int rc = parent->rank == 0 ? ina__fallback_start(parent, elems, window * *nlanes) : 0;
    for (*n = 0; rc == 0 && *n < *nlanes; ++*n) {
        if ((rc = ina__lane_open(&part[*n], &fb, target, *n, *nlanes, NULL)) != 0)
            break;
        part[*n]->path = INA_PATH_HOST;
        if (*n == 0 && fb.lanes == 0 && (rc = adopt_lanes(part[0], 1, nlanes)) != 0) {
            ++*n;
            break;
        }
    }
    return rc;
}

/*
 * Shards that multicast their results (ina-switch --multicast) on one port
 * with one base number their jobs alike, so two parts may get one group:
 * each part's group socket then receives both shards' results and drops
 * the other's by its token (stale_results). Correct, but every result is
 * received twice or more: rank 0 says so once, with the remedy.
 */
static void warn_shared_groups(struct ina_ctx *const *part, int n)
{
    if (part[0]->rank != 0 || part[0]->quiet)
        return;
    for (int a = 0; a < n; a++)
        for (int b = a + 1; b < n; b++) {
            const struct ina_ctx *x = part[a], *y = part[b];
            if (!x->mcast_group || x->mcast_group != y->mcast_group ||
                x->mcast_port != y->mcast_port ||
                (x->switch_addr.sin_addr.s_addr == y->switch_addr.sin_addr.s_addr &&
                 x->switch_addr.sin_port == y->switch_addr.sin_port))
                continue;
            char sx[32], sy[32];
            ina__switch_str(x, sx, sizeof(sx));
            ina__switch_str(y, sy, sizeof(sy));
            fprintf(stderr, "ina: job '%s': shards %s and %s multicast results to one group "
                    "(%u.%u.%u.%u:%u): every worker receives both and drops the other's; give "
                    "each shard its own ina-switch --multicast=BASE (docs/SCALE.md)\n", x->job,
                    sx, sy, x->mcast_group >> 24, (x->mcast_group >> 16) & 255,
                    (x->mcast_group >> 8) & 255, x->mcast_group & 255, (unsigned)x->mcast_port);
            return;
        }
}

/*
 * Several parts: shards (a list of switch addresses) times lanes (threads).
 * Part p = shard i x lanes + lane j streams to shard i as its own job (the
 * job's name, lane p of nshards x lanes): each a correct single-lane stream
 * (lanes.c cuts every operation alike on every rank, part p holding the p-th
 * contiguous range). Parts join one after the other, in the same order on
 * every rank, so each part's job completes and no rank waits on a part
 * another has not reached.
 *
 * Admission is all or nothing (PROTOCOL.md §12): a switch refuses a part
 * with NOSPACE to every rank at once, after every rank has joined the parts
 * before it, so every rank stops at the same part. Each leaves the parts
 * admitted so far with the abort flag (their slots are freed at once), and
 * then every rank runs the whole job on rank 0's host aggregator, or every
 * rank returns INA_ERR_NOSPACE (INA_FALLBACK_NONE, or no aggregator named).
 *
 * Lanes agreed at join (cfg->lanes = 0): nlanes is this rank's proposal,
 * part 0's JOIN proposes nshards x nlanes parts, and every later part uses
 * the agreed count. One part agreed (one switch, one lane): that part is
 * the context, as with lanes = 1.
 */
static int init_parts(struct ina_ctx **out, const ina_config *cfg, const struct sockaddr_in *addrs,
                      int nshards, int nlanes)
{
    struct ina_ctx *parent = ina__ctx_new(cfg, 0, nlanes);
    struct ina_ctx *part[INA_MAX_PARTS];
    if (!parent)
        return -ENOMEM;
    parent->lanes_auto = 0;
    parent->nshards = nshards;
    int agreed = cfg->lanes != 0; /* else part 0's JOIN agrees the count */
    struct ina_refusal refusal;
    memset(&refusal, 0, sizeof(refusal));
    int rc = 0, n = 0;
    for (; n < nshards * nlanes; n++) {
        if ((rc = ina__lane_open(&part[n], cfg, &addrs[n / nlanes], n, nshards * nlanes,
                                 &refusal)) != 0)
            break;
        if (n == 0 && !agreed) {
            agreed = 1;
            if ((rc = adopt_lanes(part[0], nshards, &nlanes)) != 0) {
                n = 1;
                break;
            }
        }
    }
    if (rc == INA_ERR_NOSPACE) {
        parts_close(part, n, 1);
        n = 0;
        if (cfg->fallback == INA_FALLBACK_HOST && refusal.target.sin_port) {
            parent->fallback = refusal.fallback; /* rank 0's: it serves the whole job */
            refusal.fallback = NULL;
            parent->nshards = 1;
            rc = parts_fallback(parent, cfg, &refusal.target, part, &nlanes, agreed, &n);
        }
    }
    ina__fallback_free(refusal.fallback);
    parent->nlanes = nlanes;
    if (rc == 0 && n == 1) {
        /* lanes = 0 agreed one part: no lane thread. If the job fell back,
         * rank 0's aggregator now belongs to the part (opened without one of
         * its own); else the part keeps the aggregator rank 0 prepared, for
         * an eviction (§5.8). */
        if (parent->fallback)
            part[0]->fallback = parent->fallback;
        free(parent);
        *out = part[0];
        return 0;
    }
    if (rc == 0)
        warn_shared_groups(part, n);
    if (rc == 0)
        rc = ina__req_pool_init(parent);
    if (rc == 0)
        rc = ina__lanes_start(parent, part, n, nlanes);
    if (rc != 0) {
        /* Joined parts: end them for every rank, whose later parts fail too. */
        parts_close(part, n, 1);
        ina__fallback_close(parent);
        ina__req_pool_free(parent);
        free(parent);
        return rc;
    }
    *out = parent;
    return 0;
}

/*
 * lanes = 0 (auto, the default): part 0 joins with this rank's proposal
 * (auto.c), the switch agrees one count for every rank (PROTOCOL.md §5.6),
 * and the parts code opens the others.
 */
static int init_auto(struct ina_ctx **out, const ina_config *cfg, const struct sockaddr_in *addrs,
                     int nshards)
{
    int proposed = ina__lanes_auto(cfg, NULL, NULL);
    if (nshards * proposed > INA_MAX_PARTS)
        proposed = INA_MAX_PARTS / nshards;
    int rc = init_parts(out, cfg, addrs, nshards, proposed);
    if (rc == 0)
        (*out)->lanes_proposed = proposed;
    return rc;
}

/*
 * The shards in the order every rank uses, whatever order its list has: by
 * IPv4 address, then port, ascending; entries that resolve alike (one
 * switch named twice) keep their list order. Part p goes to shard p / L and
 * parts join in order (PROTOCOL.md §12.1), so ranks that listed the same
 * switches in different orders would each wait at a different first switch
 * until the join deadline, and no switch could tell them apart (each sees
 * an ordinary job that lacks ranks). Sorted, they meet and the job runs.
 */
static uint64_t shard_key(const struct sockaddr_in *a)
{
    return (uint64_t)ntohl(a->sin_addr.s_addr) << 16 | ntohs(a->sin_port);
}

static void shards_sort(struct sockaddr_in *a, int n)
{
    for (int i = 1; i < n; i++) { /* insertion sort: stable, and n <= 64 */
        struct sockaddr_in x = a[i];
        int j = i;
        for (; j > 0 && shard_key(&a[j - 1]) > shard_key(&x); j--)
            a[j] = a[j - 1];
        a[j] = x;
    }
}

int ina_init(ina_ctx **out, const ina_config *cfg)
{
    ina__fail_clear(NULL);
    if (!out)
        return ina__fail(NULL, -EINVAL, "ina_init: out is NULL");
    *out = NULL;
    if (!cfg)
        return ina__fail(NULL, -EINVAL, "ina_init: cfg is NULL (fill one with ina_config_init)");
    int rc = config_check(cfg);
    if (rc)
        return rc;
    struct sockaddr_in addrs[INA_MAX_PARTS];
    char why[300];
    int nshards = ina__parse_hostport_list(cfg->switch_addr, 0, addrs, INA_MAX_PARTS, why,
                                          sizeof(why));
    if (nshards < 1)
        return ina__fail(NULL, INA_ERR_CONFIG, "switch address: %s (set by "
                         "ina_config.switch_addr, INA_SWITCH, ina-bench --switch)", why);
    shards_sort(addrs, nshards);
    if (cfg->lanes == 0)
        return init_auto(out, cfg, addrs, nshards);
    int nlanes = cfg->lanes;
    if (nshards * nlanes > INA_MAX_PARTS)
        return ina__fail(NULL, INA_ERR_CONFIG, "%d switches x %d lanes is more than %d parts",
                         nshards, nlanes, INA_MAX_PARTS);
    if (nshards * nlanes > 1)
        return init_parts(out, cfg, addrs, nshards, nlanes);
    return ina__lane_open(out, cfg, &addrs[0], 0, 1, NULL);
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
    if (ctx->lanes) {
        ina__lanes_close(ctx); /* stops the threads, closes every lane */
        ina__fallback_close(ctx); /* after the lanes' LEAVEs: it lingers until every rank left */
        while (ctx->live) {
            struct ina_req *r = ctx->live;
            ctx->live = r->live_next;
            ina__req_release(ctx, r);
        }
        ina__req_pool_free(ctx); /* every request, waited or not */
    } else {
        ina__lane_release(ctx, 0);
    }
    ctx_retire(ctx);
    return 0;
}

static int check_args(ina_ctx *ctx, const void *sendbuf, void *recvbuf, size_t count,
                      ina_dtype dtype, ina_op op)
{
    int rc = ctx_check(ctx);
    if (rc)
        return ctx ? rc : ina__fail(NULL, rc, "the context is NULL");
    if ((unsigned)dtype > 15 || (unsigned)op > 15)
        return ina__fail(ctx, -EINVAL, "dtype %d or op %d is not an ina_dtype/ina_op value",
                         (int)dtype, (int)op);
    const size_t esize = ina__dtype_size(dtype);
    if (esize == 0 || (unsigned)op > INA_AVG)
        return ina__fail(ctx, INA_ERR_NOTSUP, "dtype %d / op %d: reserved for a later version",
                         (int)dtype, (int)op);
    /* Float max and min go as order keys in 32-bit lanes (dtype.h): a
     * double's key would need 64 bits. */
    if ((op == INA_MAX || op == INA_MIN) && dtype != INA_INT32 && !ina__dtype_float_wire(dtype))
        return ina__fail(ctx, INA_ERR_NOTSUP, "MAX and MIN are not implemented for FLOAT64 "
                         "(its order keys would need 64-bit lanes)");
    if (count > SIZE_MAX / esize)
        return ina__fail(ctx, -EOVERFLOW, "count %zu elements of %zu bytes overflow size_t",
                         count, esize);
    if (count > 0 && (!sendbuf || !recvbuf))
        return ina__fail(ctx, -EINVAL, "%s is NULL with count %zu", sendbuf ? "recvbuf" : "sendbuf",
                         count);
    /* Elements are read and written through their C type: they must be
     * aligned to their size. */
    if (((uintptr_t)sendbuf | (uintptr_t)recvbuf) & (esize - 1))
        return ina__fail(ctx, -EINVAL, "%s is not aligned to its element size (%zu bytes)",
                         ((uintptr_t)sendbuf & (esize - 1)) ? "sendbuf" : "recvbuf", esize);
    if (ctx->broken) {
        int e = ctx->broken_unreported ? ctx->broken_unreported : INA_ERR_CLOSED;
        ctx->broken_unreported = 0;
        if (e == INA_ERR_CLOSED)
            ina__fail(ctx, e, "an earlier failure broke this context (%s); finalize it and "
                      "init a new one", ina_err_name(ctx->broken));
        return e;
    }
    return 0;
}

/* A multi-lane context: a parent request, split over the lanes (lanes.c). */
static int lanes_start_op(struct ina_ctx *ctx, const void *sendbuf, void *recvbuf, size_t count,
                          ina_dtype dtype, ina_op op, int sparse_mode, ina_req **out)
{
    struct ina_req *req = ina__req_new(ctx, sendbuf, recvbuf, count, dtype, op);
    if (!req)
        return -ENOMEM;
    req->sparse_mode = sparse_mode; /* a parent: the mode its parts ask for (lanes.c) */
    int rc = ina__lanes_submit(ctx, req);
    if (rc != 0) {
        ina__req_release(ctx, req);
        return rc;
    }
    ina__live_link(ctx, req);
    *out = req;
    return 0;
}

static int start_op(ina_ctx *ctx, const void *sendbuf, void *recvbuf, size_t count,
                    ina_dtype dtype, ina_op op, int sparse_mode, ina_req **out)
{
    if (!out)
        return -EINVAL;
    *out = NULL;
    int rc = check_args(ctx, sendbuf, recvbuf, count, dtype, op);
    if (rc)
        return rc;
    if (sparse_mode != INA_SPARSE_DEFAULT && sparse_mode != INA_SPARSE_OFF &&
        sparse_mode != INA_SPARSE_ON && sparse_mode != INA_SPARSE_AUTO)
        return ina__fail(ctx, -EINVAL, "sparse mode %d is not INA_SPARSE_DEFAULT (-1), _OFF (0), "
                         "_ON (1) or _AUTO (2)", sparse_mode);
    if (ctx->nreqs >= INA_MAX_REQS)
        return INA_ERR_BUSY;
    if (ctx->lanes)
        return lanes_start_op(ctx, sendbuf, recvbuf, count, dtype, op, sparse_mode, out);
    ina_req *req = ina__req_create(ctx, sendbuf, recvbuf, count, dtype, op, sparse_mode, 0, count);
    if (!req)
        return -ENOMEM;
    if (!req->done)
        ina__stream_progress(ctx, 0);
    *out = req;
    return 0;
}

int ina_allreduce_start(ina_ctx *ctx, const void *sendbuf, void *recvbuf, size_t count,
                        ina_dtype dtype, ina_op op, ina_req **out)
{
    return start_op(ctx, sendbuf, recvbuf, count, dtype, op, INA_SPARSE_DEFAULT, out);
}

int ina_allreduce_sparse_start(ina_ctx *ctx, const void *sendbuf, void *recvbuf, size_t count,
                               ina_dtype dtype, ina_op op, int mode, ina_req **out)
{
    return start_op(ctx, sendbuf, recvbuf, count, dtype, op, mode, out);
}

int ina_allreduce_sparse(ina_ctx *ctx, const void *sendbuf, void *recvbuf, size_t count,
                         ina_dtype dtype, ina_op op, int mode)
{
    ina_req *req;
    int rc = ina_allreduce_sparse_start(ctx, sendbuf, recvbuf, count, dtype, op, mode, &req);
    return rc ? rc : ina_wait(req);
}

int ina_test(ina_req *req, int *done)
{
    if (!req || !done || !req->ctx)
        return -EINVAL;
    if (req->ctx->lanes)
        return ina__lanes_test(req, done);
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
    if (!ctx)
        return -EINVAL; /* released (reqpool.c): a stale handle */
    int status;
    if (ctx->lanes) {
        status = ina__lanes_wait(req); /* bounded by the lanes' own deadlines */
    } else {
        /* Bounded: progress fails every request once timeout_ms pass without
         * a result, so this loop ends. */
        while (!req->done)
            ina__stream_progress(ctx, 100);
        status = req->status;
    }
    ina__live_unlink(ctx, req);
    ina__req_release(ctx, req);
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
    if (ctx->lanes)
        ina__lanes_stats(ctx, st);
    else
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
    info->lanes = ctx->lanes ? ctx->nlanes : 1;
    info->lanes_proposed = ctx->lanes_proposed;
    info->busy_poll_us = (int)(ctx->busy_poll_ns / 1000u);
    info->shards = ctx->lanes ? ctx->nshards : 1;
    /* Over the parts (or the context itself): the host path if any part
     * took it, rings only if every part has them. */
    const int np = ctx->lanes ? ina__lanes_nparts(ctx) : 1;
    info->path = INA_PATH_SWITCH;
    info->shm = 1;
    info->sparse = 1; /* only if every part's switch offers it (else those parts go dense) */
    info->integrity = 1; /* every part agreed it (a part cannot join without) */
    int wire16 = 1;      /* only if every part's switch offers it, and it is not turned off */
    for (int i = 0; i < np; i++) {
        const struct ina_ctx *l = ctx->lanes ? ina__lanes_ctx(ctx, i) : ctx;
        if (l->path == INA_PATH_HOST)
            info->path = INA_PATH_HOST;
        info->shm &= l->shm != NULL;
        info->sparse &= (l->switch_caps & INA_FLAG_CAP_SPARSE) != 0;
        info->integrity &= l->integrity_on;
        wire16 &= ina__wire16_fmt(l, INA_FLOAT16) >= 0;
    }
    if (ctx->lanes)
        ctx = ina__lanes_ctx(ctx, 0); /* part 0's parameters (each part has its own job) */
    info->levels = 1 + (int)ina__flag_levels(ctx->switch_caps);
    info->float_add = ina__float_add_in_use(ctx) ? INA_FLOAT_ADD_SWITCH : INA_FLOAT_ADD_QUANTIZED;
    info->fixed_point_bits = ina__fixed_in_use(ctx);
    info->wire_bits = wire16 ? 16 : 32;
    info->rank = ctx->rank;
    info->world_size = ctx->world;
    info->elems_per_packet = (int)ctx->elems;
    info->window = (int)ctx->window;
    info->job_id = ctx->job_id;
    info->session_id = ctx->session;
    return 0;
}
