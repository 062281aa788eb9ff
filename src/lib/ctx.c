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
#include "lib/codec.h"
#include "lib/dtype.h"
#include "lib/fixed.h"
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
    if (cfg->busy_poll_us < 0 || cfg->busy_poll_us > INA_BUSY_POLL_MAX_US)
        return BAD("busy_poll_us %d is outside 0..%d (INA_BUSY_POLL_US; 0: never spin)",
                   cfg->busy_poll_us, INA_BUSY_POLL_MAX_US);
    if (cfg->fixed_point_bits < 0 || cfg->fixed_point_bits > INA_FIXED_MAX_BITS)
        return BAD("fixed_point_bits %d is outside 0..%d (INA_FIXED_POINT; 0: off)",
                   cfg->fixed_point_bits, INA_FIXED_MAX_BITS);
    if (cfg->integrity != 0 && cfg->integrity != 1)
        return BAD("integrity %d is not 0 (off) or 1 (INA_INTEGRITY)", cfg->integrity);
    if (cfg->fixed_point_bits && cfg->float_add == INA_FLOAT_ADD_SWITCH)
        return BAD("fixed_point_bits %d and float_add INA_FLOAT_ADD_SWITCH both say how float "
                   "sums travel: choose one", cfg->fixed_point_bits);
    return 0;
#undef BAD
}

static int is_loopback(const struct sockaddr_in *a)
{
    return (ntohl(a->sin_addr.s_addr) >> 24) == 127;
}

/* The fields every context has, a lane's or a multi-lane parent's. */
static struct ina_ctx *ctx_new(const ina_config *cfg, int lane, int nlanes)
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
    ctx->busy_poll_ns = (uint64_t)cfg->busy_poll_us * 1000u;
    ctx->fixed_bits = cfg->fixed_point_bits;
    ctx->integrity = cfg->integrity;
    ctx->addr_is_default = cfg->switch_addr == ina__default_switch_addr;
    const char *quiet = getenv("INA_QUIET");
    ctx->quiet = quiet && *quiet && strcmp(quiet, "0") != 0;
    return ctx;
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
    struct ina_ctx *parent = ctx_new(cfg, 0, nlanes);
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
    int nshards = ina_parse_hostport_list(cfg->switch_addr, 0, addrs, INA_MAX_PARTS, why,
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

int ina__default_elems(const struct sockaddr_in *addr)
{
    return is_loopback(addr) ? INA_DEFAULT_ELEMS_LOOPBACK : INA_DEFAULT_ELEMS_NET;
}

int ina__lane_open(struct ina_ctx **out, const ina_config *cfg, const struct sockaddr_in *addr,
                   int lane, int nlanes, struct ina_refusal *refusal)
{
    struct ina_ctx *ctx = ctx_new(cfg, lane, nlanes);
    if (!ctx)
        return -ENOMEM;

    const char *fault = getenv("INA_FAULT");
    if (fault && *fault && ina_fault_parse(&ctx->fault, fault) != 0) {
        free(ctx);
        return ina__fail(NULL, INA_ERR_CONFIG, "INA_FAULT='%s' is not a fault spec such as "
                         "drop=0.01,dup=0.01,reorder=0.05,seed=7", fault);
    }
    if (cfg->secret_file) {
        if (ina_hmac_key_from_file(&ctx->secret, cfg->secret_file) != 0) {
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
    if (rc == 0)
        rc = ina__stream_init(ctx);
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

int ina_init_env(ina_ctx **out)
{
    if (out)
        *out = NULL;
    ina_config cfg;
    int rc = ina_config_from_env(&cfg);
    return rc ? rc : ina_init(out, &cfg);
}

static void lane_release(struct ina_ctx *ctx, int abort);

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
        lane_release(ctx, 0);
    }
    ctx_retire(ctx);
    return 0;
}

/* Fail what is in flight, leave (with abort if asked, or if something was in
 * flight), free the stream and sockets; keep the struct. */
static void lane_release(struct ina_ctx *ctx, int abort)
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
    lane_release(ctx, abort);
    free(ctx);
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

/* Link a request into ctx's list of requests not yet waited. */
static void live_link(struct ina_ctx *ctx, struct ina_req *req)
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

/* A request with the caller's arguments; what the stream needs is set by the caller. */
static struct ina_req *req_new(struct ina_ctx *ctx, const void *sendbuf, void *recvbuf,
                               size_t count, ina_dtype dtype, ina_op op)
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
    struct ina_req *pr = req_new(ctx, &req->probe_val, &req->probe_sum, 1, INA_INT32, INA_SUM);
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
    struct ina_req *req = req_new(ctx, sendbuf, recvbuf, count, dtype, op);
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
    live_link(ctx, req);
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
    struct ina_req *req = req_new(ctx, grad, sum, count, INA_FLOAT32, INA_SUM);
    if (!req)
        return NULL;
    req->codec = &ina__codec_hot;
    req->wire_op = INA_OP_HOT_F32;
    req->hot_epoch = epoch;
    req->hot_keys = keys;
    req->nblocks = (count + ctx->elems - 1) / ctx->elems;
    req->npackets = req->nblocks;
    live_link(ctx, req);
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

/* A multi-lane context: a parent request, split over the lanes (lanes.c). */
static int lanes_start_op(struct ina_ctx *ctx, const void *sendbuf, void *recvbuf, size_t count,
                          ina_dtype dtype, ina_op op, int sparse_mode, ina_req **out)
{
    struct ina_req *req = req_new(ctx, sendbuf, recvbuf, count, dtype, op);
    if (!req)
        return -ENOMEM;
    req->sparse_mode = sparse_mode; /* a parent: the mode its parts ask for (lanes.c) */
    int rc = ina__lanes_submit(ctx, req);
    if (rc != 0) {
        ina__req_release(ctx, req);
        return rc;
    }
    live_link(ctx, req);
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
    info->shards = ctx->lanes ? ctx->nshards : 1;
    /* Over the parts (or the context itself): the host path if any part
     * took it, rings only if every part has them. */
    const int np = ctx->lanes ? ina__lanes_nparts(ctx) : 1;
    info->path = INA_PATH_SWITCH;
    info->shm = 1;
    info->sparse = 1; /* only if every part's switch offers it (else those parts go dense) */
    info->integrity = 1; /* every part agreed it (a part cannot join without) */
    for (int i = 0; i < np; i++) {
        const struct ina_ctx *l = ctx->lanes ? ina__lanes_ctx(ctx, i) : ctx;
        if (l->path == INA_PATH_HOST)
            info->path = INA_PATH_HOST;
        info->shm &= l->shm != NULL;
        info->sparse &= (l->switch_caps & INA_FLAG_CAP_SPARSE) != 0;
        info->integrity &= l->integrity_on;
    }
    if (ctx->lanes)
        ctx = ina__lanes_ctx(ctx, 0); /* part 0's parameters (each part has its own job) */
    info->levels = 1 + (int)ina_flag_levels(ctx->switch_caps);
    info->float_add = ina__float_add_in_use(ctx) ? INA_FLOAT_ADD_SWITCH : INA_FLOAT_ADD_QUANTIZED;
    info->fixed_point_bits = ina__fixed_in_use(ctx);
    info->rank = ctx->rank;
    info->world_size = ctx->world;
    info->elems_per_packet = (int)ctx->elems;
    info->window = (int)ctx->window;
    info->job_id = ctx->job_id;
    info->session_id = ctx->session;
    return 0;
}
