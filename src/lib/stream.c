/* stream.c: the streaming window: send into free slots, take results, retransmit, enforce deadlines. */
#include <arpa/inet.h>
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/kv_wire.h"
#include "common/sparse_wire.h"
#include "common/busy_poll.h"
#include "lib/codec.h"
#include "lib/ctx.h"
#include "lib/dtype.h"
#include "lib/quant.h"
#include "lib/req.h"
#include "lib/session.h"
#include "lib/stream.h"
#include "lib/transport.h"

/* Largest datagram we send or accept: a full DATA/RESULT, or a control body
 * (an ABORT is 48 bytes, more than a RESULT when elems < 4); and a tag (§4.6). */
static size_t max_datagram(const struct ina_ctx *ctx)
{
    size_t data = 4 * (size_t)ctx->elems + INA_HOT_PREFIX_LEN; /* a HOT_RESULT is 8 bytes longer */
    return INA_HDR_LEN + (data > INA_JOIN_BODY_LEN ? data : INA_JOIN_BODY_LEN) + INA_MAC_LEN;
}

int ina__stream_init(struct ina_ctx *ctx)
{
    ctx->slots = calloc(ctx->window, sizeof(*ctx->slots));
    ctx->io = calloc(1, sizeof(*ctx->io));
    ctx->txmem = malloc(INA_BURST * max_datagram(ctx));
    ctx->rxmem = malloc((size_t)(INA_RX_MSGS + 1) * INA_GRO_BUF);
    if (!ctx->slots || !ctx->io || !ctx->txmem || !ctx->rxmem ||
        ina__gso_batch_init(&ctx->io->gso, 2 * INA_BURST, 2 * INA_BURST) != 0) {
        ina__stream_free(ctx);
        return -ENOMEM;
    }
    ctx->ringmem = ctx->rxmem + (size_t)INA_RX_MSGS * INA_GRO_BUF;
    for (unsigned i = 0; i < INA_BURST; i++)
        ctx->io->txiov[i].iov_base = ctx->txmem + i * max_datagram(ctx);
    ina__rx_init_mem(&ctx->io->rx, INA_RX_MSGS, INA_GRO_BUF, ctx->rxmem);
    return 0;
}

void ina__stream_free(struct ina_ctx *ctx)
{
    if (ctx->io)
        ina__gso_batch_free(&ctx->io->gso);
    free(ctx->sp_places);
    ctx->sp_places = NULL;
    free(ctx->slots);
    free(ctx->io);
    free(ctx->txmem);
    free(ctx->rxmem);
    ctx->slots = NULL;
    ctx->io = NULL;
    ctx->txmem = ctx->rxmem = ctx->ringmem = NULL;
}

/* Elements of data block b of req (k, or 2k on the 16-bit wire). */
static inline size_t block_len(const struct ina_ctx *ctx, const struct ina_req *req, uint64_t b)
{
    (void)ctx;
    size_t start = (size_t)b * req->block_elems;
    size_t left = req->count - start;
    return left < req->block_elems ? left : req->block_elems;
}

static inline int has_data(const struct ina_req *req, uint64_t p) { return p >= req->lag; }

/* 8-bit tag of packet p of an operation: its seed mixed with p (see req.c). */
static inline uint8_t packet_tag(const struct ina_req *req, uint64_t p)
{
    uint64_t x = (req->tag_seed + p) * 0xD6E8FEB86659FD93ull;
    return (uint8_t)((x ^ (x >> 32)) >> 24);
}

/* Build the DATA datagram of the packet in flight in ws into buf. @return its length. */
static size_t build_packet(struct ina_ctx *ctx, uint32_t slot, const struct ina_wslot *ws,
                           uint8_t *buf)
{
    const struct ina_req *req = ws->req;
    const struct ina_codec *c = req->codec;
    struct ina_hdr h;
    ina__hdr_session(&h, ctx, c->data_kind);
    uint32_t wire_slot = (slot - (uint32_t)ctx->wire_base) & (ctx->window - 1);
    h.slot = wire_slot | ((ws->seq & 1) ? INA_SLOT_SET_BIT : 0);
    h.seq = ws->seq;
    h.op = req->wire_op;
    h.tag = packet_tag(req, ws->p);
    if (req->sparse) {
        h.count = (uint16_t)ina__sparse_build(ctx, ws, buf + INA_HDR_LEN);
        ina__hdr_encode(buf, &h);
        return INA_HDR_LEN + 4 * (size_t)h.count;
    }
    size_t n = 0, plen = 0;
    if (has_data(req, ws->p)) {
        uint64_t b = ws->p - req->lag;
        n = block_len(ctx, req, b);
        plen = c->encode(ctx, req, (size_t)b * req->block_elems, n, ws->exp_used, buf + INA_HDR_LEN,
                         &h.flags);
    }
    if (c->exps == INA_EXPS_OWN)
        h.exp = ws->exp_used;
    else if (c->exps == INA_EXPS_AHEAD)
        h.exp = ws->p < req->nblocks
                    ? ina__block_exp(req->dtype, req->src + (size_t)ws->p * req->block_elems * req->esize,
                                     block_len(ctx, req, ws->p))
                    : INA_EXP_ZERO;
    h.count = (uint16_t)ina__codec_words(c, n);
    ina__hdr_encode(buf, &h);
    return INA_HDR_LEN + plen;
}

/*
 * Hand the built datagrams to the context's sending transport (transport.h),
 * in the order fault injection chose. A datagram it cannot take (no switch,
 * a full buffer or ring) is lost like any other: its timer is running.
 */
static void tx_flush(struct ina_ctx *ctx)
{
    if (ctx->ntx == 0)
        return;
    unsigned order[2 * INA_BURST], n = ctx->ntx;
    if (ina__fault_active(&ctx->fault)) {
        for (unsigned i = 0; i < ctx->ntx; i++) /* after the tag: a change on the way */
            ina__fault_corrupt(&ctx->fault, ctx->io->txiov[i].iov_base, ctx->io->txiov[i].iov_len);
        n = ina__fault_plan(&ctx->fault, ctx->ntx, order);
    } else
        for (unsigned i = 0; i < n; i++)
            order[i] = i;
    ctx->xp.tx->send_burst(ctx, ctx->io->txiov, order, n); /* the socket, or the rings */
    ctx->ntx = 0;
}

static void tx_packet(struct ina_ctx *ctx, uint32_t slot, const struct ina_wslot *ws)
{
    if (ctx->ntx == INA_BURST)
        tx_flush(ctx);
    uint8_t *buf = ctx->io->txiov[ctx->ntx].iov_base;
    size_t len = build_packet(ctx, slot, ws, buf);
    if (ctx->tag_tx) /* per-packet integrity: the session key's tag after the payload (§4.6) */
        len = ina__mac_append(&ctx->mac_key, buf, len);
    ctx->io->txiov[ctx->ntx].iov_len = len;
    ctx->ntx++;
    ctx->stats.packets_sent++;
    ctx->stats.bytes_sent += len;
}

/*
 * Retransmission timeout for a new packet: RFC 6298's srtt + 4 * rttvar, but
 * never below the configured rto_ms. Why adaptive: on a loaded host a worker
 * may not run for tens of milliseconds, and a fixed short timeout then
 * resends whole windows that were never lost, which the switch must drop.
 */
static uint32_t current_rto_ms(const struct ina_ctx *ctx)
{
    int64_t rto_ns = ctx->srtt_ns + 4 * ctx->rttvar_ns;
    uint32_t ms = (uint32_t)((rto_ns + 999999) / 1000000);
    if (ms < (uint32_t)ctx->rto_ms)
        ms = (uint32_t)ctx->rto_ms;
    return ms > INA_MAX_RTO_MS ? INA_MAX_RTO_MS : ms;
}

/*
 * Windowed minimum RTT: the min over the current and the previous window of
 * INA_MIN_RTT_WINDOW samples. A sample measures more than the path: a round
 * completes only when the slowest rank's packet is in, so losses at other
 * ranks and stalled windows inflate samples, and srtt with them. The
 * minimum is what the path itself costs; timers after a proven loss rest on
 * it, so heavy loss cannot stretch the recovery of further losses.
 */
static void min_rtt_sample(struct ina_ctx *ctx, int64_t r)
{
    if (ctx->min_rtt_ns[0] == 0 || r < ctx->min_rtt_ns[0])
        ctx->min_rtt_ns[0] = r;
    if (++ctx->min_rtt_samples == INA_MIN_RTT_WINDOW) {
        ctx->min_rtt_ns[1] = ctx->min_rtt_ns[0];
        ctx->min_rtt_ns[0] = 0;
        ctx->min_rtt_samples = 0;
    }
}

static int64_t min_rtt(const struct ina_ctx *ctx)
{
    int64_t a = ctx->min_rtt_ns[0], b = ctx->min_rtt_ns[1];
    if (a == 0)
        return b;
    return b == 0 || a < b ? a : b;
}

static void rtt_sample(struct ina_ctx *ctx, int64_t r)
{
    min_rtt_sample(ctx, r);
    if (ctx->srtt_ns == 0) {
        ctx->srtt_ns = r;
        ctx->rttvar_ns = r / 2;
        return;
    }
    int64_t err = r - ctx->srtt_ns;
    ctx->rttvar_ns += ((err < 0 ? -err : err) - ctx->rttvar_ns) / 4;
    ctx->srtt_ns += err / 8;
}

static void arm_timer(struct ina_ctx *ctx, struct ina_wslot *ws, uint64_t now)
{
    ws->deadline_ns = now + (uint64_t)ws->rto_ms * 1000000ull;
    if (ctx->next_rto_ns == 0 || ws->deadline_ns < ctx->next_rto_ns)
        ctx->next_rto_ns = ws->deadline_ns;
}

static void req_finish(struct ina_ctx *ctx, struct ina_req *req, int status);

/*
 * Send every packet that may go now, in stream order. Packet g uses slot
 * g mod window and may go when that slot's previous packet has its result;
 * a FLOAT32 data packet also needs the agreed exponent of its block, which
 * came back in the result of packet g - lag.
 */
static void send_ready(struct ina_ctx *ctx, uint64_t now)
{
    const uint32_t mask = ctx->window - 1;
    ctx->window_blocked = 0;
    while (ctx->send_req) {
        struct ina_req *req = ctx->send_req;
        if (ctx->send_p == req->npackets) {
            ctx->send_req = req->next;
            ctx->send_p = 0;
            continue;
        }
        if (req->undecided)
            break; /* sparse or dense: its probe's result decides (sparse.c) */
        uint64_t g = ctx->next_g;
        if (ctx->migrate_pending && g >= ctx->migrate_g)
            break; /* the rest goes to the next session (migrate.c) */
        uint32_t slot = (uint32_t)(g & mask);
        struct ina_wslot *ws = &ctx->slots[slot];
        if (ws->inflight) {
            ctx->window_blocked = 1; /* window full: later results will reveal gaps */
            break;
        }
        int16_t exp_used = 0;
        if (req->sparse) {
            /* The slot's previous packet has its result: plan this one from it. */
            if (!ina__sparse_plan(ctx, req, ws, ctx->send_p)) {
                if (req->ndone == req->npackets)
                    req_finish(ctx, req, 0); /* every result was already in */
                continue; /* send_p == npackets now: on to the next op */
            }
        } else if (req->codec->exps == INA_EXPS_OWN) {
            /* Its own block's exponent (the switch aligns the ranks' blocks),
             * or the scale its codec chose (the 16-bit wire, §8.10.3). */
            const size_t first = (size_t)ctx->send_p * req->block_elems;
            const size_t n = block_len(ctx, req, ctx->send_p);
            exp_used = req->codec->scale
                           ? req->codec->scale(ctx, req, first, n)
                           : ina__block_exp(req->dtype, req->src + first * req->esize, n);
        } else if (req->codec->exps == INA_EXPS_AHEAD && has_data(req, ctx->send_p)) {
            uint64_t dep = g - req->lag;
            const struct ina_wslot *wd = &ctx->slots[dep & mask];
            if (wd->done_g != dep + 1)
                break; /* exponent of this block not agreed yet */
            exp_used = wd->exp_agreed;
        }
        if (!req->sparse)
            ws->sp_rebuild = 0; /* a taken-back sparse packet here is another op's now */
        ws->seq = ws->round++;
        ws->inflight = 1;
        ws->tries = 0;
        ws->rto_ms = current_rto_ms(ctx);
        ws->sent_ns = now;
        ws->short_timer = 0;
        ws->exp_used = exp_used;
        ws->g = g;
        ws->p = ctx->send_p;
        ws->req = req;
        if (ctx->send_p == 0) {
            req->g_first = g;
            req->g_sent = 1;
        }
        arm_timer(ctx, ws, now);
        tx_packet(ctx, slot, ws);
        ctx->next_g++;
        ctx->send_p++;
    }
    tx_flush(ctx);
}

static void req_unlink(struct ina_ctx *ctx, struct ina_req *req)
{
    struct ina_req **pp = &ctx->head, *prev = NULL;
    while (*pp && *pp != req) {
        prev = *pp;
        pp = &(*pp)->next;
    }
    if (!*pp)
        return;
    *pp = req->next;
    if (ctx->tail == req)
        ctx->tail = prev;
    if (ctx->send_req == req) {
        ctx->send_req = req->next;
        ctx->send_p = 0;
    }
    req->next = NULL;
}

/*
 * Once per context: an operation lost elements to its blocks' shared scale
 * (ina_stats.flushed_elems counts every one). Quiet with INA_QUIET, as the
 * join's progress lines: the counter stays.
 */
static void warn_lost(struct ina_ctx *ctx, const struct ina_req *req)
{
    ctx->lost_warned = 1;
    if (ctx->quiet)
        return;
    fprintf(stderr,
            "ina: job '%s' rank %d: an all-reduce of %zu elements lost %llu of this rank's "
            "elements to its blocks' shared scale: values below 2^-%d of their block's largest "
            "(on any rank) came back without them, or beside a NaN or Inf as NaN "
            "(ina_stats.flushed_elems counts them; smaller blocks (INA_ELEMS), "
            "INA_FLOAT_ADD=switch or INA_FIXED_POINT keep them; docs/API.md). Warned once.\n",
            ctx->job, ctx->rank, req->count, (unsigned long long)req->lost,
            32 - ina__quant_headroom_bits(ctx->world));
}

static void req_finish(struct ina_ctx *ctx, struct ina_req *req, int status)
{
    req_unlink(ctx, req);
    req->done = 1;
    req->status = status;
    if (req->probe_for) {
        /* An AUTO op's probe: not an operation of its own. Its sum decides
         * how the op goes; a failure fails the op with the rest. */
        if (status == 0)
            ina__sparse_decide(ctx, req->probe_for, req->probe_for->probe_sum);
        return;
    }
    if (status == 0)
        ctx->stats.ops++;
    if (req->lost && !ctx->lost_warned)
        warn_lost(ctx, req);
}

/* The message of a failure of the stream (ina_last_error), unless a more
 * specific one was set where it was found. */
static void say_why(struct ina_ctx *ctx, int err)
{
    char sw[32];
    ina__switch_str(ctx, sw, sizeof(sw));
    const char *what = ctx->path == INA_PATH_HOST ? "rank 0's host aggregator" : "the switch";
    switch (err) {
    case INA_ERR_TIMEOUT:
        ina__fail_once(ctx, err, "no result from %s at %s for %d ms (timeout_ms): a rank stopped "
                       "calling libina or died, or %s is unreachable", what, sw,
                       ctx->timeout_ms, what);
        break;
    case INA_ERR_ABORTED:
        ina__fail_once(ctx, err, "%s at %s ended the session: another rank failed, left with "
                       "operations in flight or restarted, or an operator aborted the job",
                       what, sw);
        break;
    case INA_ERR_SHUTDOWN:
        ina__fail_once(ctx, err, "%s at %s is shutting down (SIGTERM): it let running "
                       "operations finish, then ended the job; join another aggregator",
                       what, sw);
        break;
    case INA_ERR_MISMATCH:
        ina__fail_once(ctx, err, "the ranks ran different operations (count, dtype or op) at "
                       "the same place of their streams: every rank must start the same "
                       "all-reduces in the same order");
        break;
    case -ECONNREFUSED:
        ina__fail_once(ctx, err, "%s at %s is gone: port unreachable for %d ms", what, sw,
                       INA_REFUSED_FAIL_MS);
        break;
    case INA_ERR_PROTO:
        ina__fail_once(ctx, err, "%s at %s broke the protocol (a corrupt shared-memory ring, "
                       "or an impossible notice)", what, sw);
        break;
    case INA_ERR_NOSPACE:
        ina__fail_once(ctx, err, "the job was evicted from the switch at %s and may not fall "
                       "back to a host aggregator (INA_FALLBACK=none)", sw);
        break;
    default: break;
    }
}

/* An ABORT that says its cause (PROTOCOL.md §4.2): the message names the rank and the
 * address, which the generic one of say_why cannot. */
static void say_abort_cause(struct ina_ctx *ctx, int err, const uint8_t *body, size_t blen)
{
    if (blen < INA_ABORT_CAUSE_LEN || !ina__abort_cause_name(body[INA_ABORT_CAUSE]))
        return;
    char sw[32], at[INET_ADDRSTRLEN] = "?";
    ina__switch_str(ctx, sw, sizeof(sw));
    inet_ntop(AF_INET, body + INA_ABORT_ADDR, at, sizeof(at));
    const unsigned rank = ina__get16(body + INA_ABORT_RANK), port = ina__get16(body + INA_ABORT_PORT);
    const unsigned cause = body[INA_ABORT_CAUSE];
    if (cause == INA_ABORT_RANK_TAKEN)
        ina__fail(ctx, err, "the switch at %s ended the session: another process joined job '%s' "
                  "as rank %u, from %s:%u (two jobs started with one name, INA_JOB? or rank %u "
                  "restarted) (reason=rank_taken)", sw, ctx->job, rank, at, port, rank);
    else
        ina__fail(ctx, err, "the switch at %s ended the session: rank %u of job '%s' stopped "
                  "responding: its process at %s:%u is gone (killed or crashed; its port is "
                  "closed) (reason=rank_dead)", sw, rank, ctx->job, at, port);
}

void ina__stream_fail_all(struct ina_ctx *ctx, int err)
{
    /* A failure seen here first (deadline, disagreement, switch gone) breaks
     * the collective for every rank: tell the switch to end the session so
     * the others learn it now, not at their own deadline. */
    if (ctx->head && !ctx->broken && err != INA_ERR_CLOSED && err != INA_ERR_ABORTED)
        ina__session_leave(ctx, 1);
    if (!ctx->broken)
        say_why(ctx, err);
    int reported = ctx->head != NULL; /* some operation returns err */
    while (ctx->head)
        req_finish(ctx, ctx->head, err);
    ctx->send_req = NULL;
    for (uint32_t i = 0; ctx->slots && i < ctx->window; i++)
        ctx->slots[i].inflight = 0;
    if (!ctx->broken) {
        ctx->broken = err;
        /* Broken between operations (an ABORT that arrived with the last
         * result): the next call says why, once, rather than only CLOSED. */
        if (!reported && err != INA_ERR_CLOSED)
            ctx->broken_unreported = err;
    }
}

void ina__stream_enqueue(struct ina_ctx *ctx, struct ina_req *req)
{
    if (!ctx->head)
        ctx->last_progress_ns = ina__now_ns(); /* idle time is not lack of progress */
    req->next = NULL;
    if (ctx->tail)
        ctx->tail->next = req;
    else
        ctx->head = req;
    ctx->tail = req;
    if (!ctx->send_req) {
        ctx->send_req = req;
        ctx->send_p = 0;
    }
}

/* The result of the packet in flight in ws was taken: free the slot, sample the RTT. */
static void result_accepted(struct ina_ctx *ctx, struct ina_wslot *ws, uint64_t now)
{
    struct ina_req *req = ws->req;
    if (ws->tries == 0)
        rtt_sample(ctx, (int64_t)(now - ws->sent_ns));
    ws->inflight = 0;
    ws->done_g = ws->g + 1;
    if (ws->done_g > ctx->max_done_g)
        ctx->max_done_g = ws->done_g;
    ctx->refused_since_ns = 0;
    ctx->stats.packets_received++;
    ctx->last_progress_ns = now;
    if (++req->ndone == req->npackets)
        req_finish(ctx, req, req->range_err ? INA_ERR_RANGE : 0);
}

static void on_result(struct ina_ctx *ctx, const struct ina_hdr *h, const uint8_t *payload,
                      uint64_t now)
{
    uint32_t slot = h->slot & INA_SLOT_INDEX_MASK;
    if (h->job != ctx->job_id || h->session != ctx->session || h->token != ctx->token ||
        slot >= ctx->window || ((h->slot & INA_SLOT_SET_BIT) != 0) != (h->seq & 1)) {
        ctx->stats.stale_results++;
        return;
    }
    slot = (slot + (uint32_t)ctx->wire_base) & (ctx->window - 1); /* wire slot -> ours */
    struct ina_wslot *ws = &ctx->slots[slot];
    if (!ws->inflight || h->seq != ws->seq) {
        ctx->stats.stale_results++; /* duplicate, or an answer to an earlier round */
        return;
    }
    struct ina_req *req = ws->req;
    const struct ina_codec *c = req->codec;
    if (h->tag != packet_tag(req, ws->p) || h->op != req->wire_op || h->kind != c->result_kind) {
        ctx->stats.stale_results++; /* not the operation we sent: never use it */
        return;
    }
    size_t n = has_data(req, ws->p) ? block_len(ctx, req, ws->p - req->lag) : 0;
    const size_t first = has_data(req, ws->p) ? (size_t)(ws->p - req->lag) * req->block_elems : 0;
    if (c->check && !c->check(ctx, req, first, n, h, payload)) {
        ctx->stats.stale_results++; /* a hot vector's other epoch or position */
        return;
    }
    if (req->sparse) {
        int rc = ina__sparse_on_result(ctx, ws, payload, h->count);
        if (rc) {
            ina__stream_fail_all(ctx, rc); /* never produced by a conforming switch and ranks */
            return;
        }
        n = 0; /* written */
    } else if (h->count != ina__codec_words(c, n)) {
        /* A conforming switch completes a round only with our contribution,
         * whose count it checked against the others': this cannot happen.
         * Defensive: never write a result of the wrong size. */
        ina__stream_fail_all(ctx, INA_ERR_MISMATCH);
        return;
    }
    if (n) {
        /* Two rounds: the data was scaled with the agreed exponent. One round:
         * the switch scaled the sum to the largest of the ranks' exponents. */
        int16_t e = c->exps == INA_EXPS_OWN ? h->exp : ws->exp_used;
        if (c->lost) { /* before decode: an in-place input is overwritten */
            size_t lost = c->lost(ctx, req, first, n, e);
            req->lost += lost;
            ctx->stats.flushed_elems += lost;
        }
        size_t bad = c->decode(ctx, req, first, n, e, payload);
        if (bad) { /* fixed point: NaN there on every rank, and the op says so (INA_ERR_RANGE) */
            ctx->stats.fixed_invalid += bad;
            req->range_err = 1;
        }
        if (c->exps != INA_EXPS_NONE && e == INA_EXP_NONFINITE)
            ctx->stats.nonfinite_blocks++;
    }
    if (c->exps != INA_EXPS_NONE)
        ws->exp_agreed = h->exp;
    result_accepted(ctx, ws, now);
}

/* What the switch tags in a session with tags (§4.6): everything of the
 * session that a forger could use, from any path. */
static int tagged_kind(uint8_t kind)
{
    return kind == INA_K_RESULT || kind == INA_K_HOT_RESULT || kind == INA_K_ABORT ||
           kind == INA_K_MIGRATE;
}

void ina__stream_on_datagram(struct ina_ctx *ctx, const uint8_t *buf, size_t len, uint64_t now)
{
    struct ina_hdr h;
    if (ctx->tag_rx && len >= INA_HDR_LEN && ina__get16(buf) == INA_WIRE_MAGIC &&
        buf[2] == INA_WIRE_VERSION && tagged_kind(buf[3])) {
        /* Only the switch knows the session key besides the ranks: a datagram
         * without its tag was forged, or changed on the way. */
        size_t n = len >= INA_HDR_LEN + INA_MAC_LEN ? ina__mac_strip(&ctx->mac_key, buf, len) : 0;
        if (n == 0) {
            ctx->stats.mac_rejected++;
            return;
        }
        len = n;
    }
    if (ina__hdr_decode(buf, len, &h) != INA_PARSE_OK) {
        ctx->stats.stale_results++;
        return;
    }
    if (h.kind == INA_K_RESULT) {
        on_result(ctx, &h, buf + INA_HDR_LEN, now);
    } else if (h.kind == INA_K_HOT_RESULT) {
        if (len != INA_HDR_LEN + INA_HOT_PREFIX_LEN + 4 * (size_t)h.count) {
            ctx->stats.stale_results++;
            return;
        }
        on_result(ctx, &h, buf + INA_HDR_LEN, now);
    } else if (h.kind == INA_K_MIGRATE && h.job == ctx->job_id && h.session == ctx->session &&
               h.token == ctx->token) {
        int rc = ina__migrate_on_notice(ctx, buf + INA_HDR_LEN, len - INA_HDR_LEN);
        if (rc)
            ina__stream_fail_all(ctx, rc);
    } else if (h.kind == INA_K_DOORBELL) {
        /* only a wake-up: the ring is read after every receive */
    } else if (h.kind == INA_K_ABORT && h.session == ctx->session && h.token == ctx->token) {
        uint64_t nonce;
        int32_t reason = INA_ERR_ABORTED;
        ina__nak_decode(buf + INA_HDR_LEN, len - INA_HDR_LEN, &nonce, &reason);
        if (reason != INA_ERR_MISMATCH && reason != INA_ERR_TIMEOUT && reason != INA_ERR_SHUTDOWN)
            reason = INA_ERR_ABORTED;
        if (!ctx->broken)
            say_abort_cause(ctx, reason, buf + INA_HDR_LEN, len - INA_HDR_LEN);
        ina__stream_fail_all(ctx, reason);
    } else {
        ctx->stats.stale_results++;
    }
}

/* A burst from every transport (transport.h), in order, until one breaks the stream.
 * @return the most messages one of them took. */
static int rx_burst(struct ina_ctx *ctx, uint64_t now)
{
    int n = 0;
    for (unsigned i = 0; i < ctx->xp.n && (i == 0 || !ctx->broken); i++) {
        int m = ctx->xp.rx[i]->rx_burst(ctx, now);
        n = m > n ? m : n;
    }
    return n;
}

/* Only the transports read from memory (the rings: those with `readable`), no system
 * call: what a spin does when a ring has input (the socket has its own turns). */
static int rx_memory(struct ina_ctx *ctx, uint64_t now)
{
    int n = 0;
    for (unsigned i = 0; i < ctx->xp.n && !ctx->broken; i++) {
        if (!ctx->xp.rx[i]->readable)
            continue;
        int m = ctx->xp.rx[i]->rx_burst(ctx, now);
        n = m > n ? m : n;
    }
    return n;
}

/*
 * Fast retransmit. All ranks send the stream in the same order and the
 * switch completes rounds in arrival order, so results come back in stream
 * order unless something was lost. A result INA_FAST_RTX_GAP packets past an
 * outstanding one means that one (or its result) was lost, at this rank or
 * another: resend it now instead of waiting for its timer. Every rank sees
 * the same gap; the rank whose packet was lost completes the round, the
 * others' copies are duplicates the switch drops (or answers, if complete).
 * Each packet is fast-retransmitted at most once; its timer covers the rest.
 */
static uint32_t short_rto_ms(const struct ina_ctx *ctx);

static void fast_retransmit(struct ina_ctx *ctx, uint64_t now)
{
    const uint32_t mask = ctx->window - 1;
    if (ctx->fast_scan_g + ctx->window < ctx->next_g)
        ctx->fast_scan_g = ctx->next_g - ctx->window; /* older ones are all done */
    while (ctx->fast_scan_g + INA_FAST_RTX_GAP < ctx->max_done_g) {
        uint64_t g = ctx->fast_scan_g++;
        uint32_t slot = (uint32_t)(g & mask);
        struct ina_wslot *ws = &ctx->slots[slot];
        if (ws->inflight && ws->g == g && ws->tries == 0) {
            ws->tries++;
            ctx->stats.retransmits++;
            ctx->stats.rtx_fast++;
            tx_packet(ctx, slot, ws);
            /* A loss is proven, so the straggler argument for a long timer
             * no longer holds: if this copy is lost too, resend after about
             * two round trips (doubling from there), not after the floor. */
            ws->rto_ms = short_rto_ms(ctx);
            ws->short_timer = 1; /* on the short timer from now on */
            arm_timer(ctx, ws, now);
        }
    }
    tx_flush(ctx);
}

/* Timeout after a proven or likely loss: four minimum round trips (see
 * min_rtt_sample), at least INA_FAST_RTX_MIN_MS, at most the normal timeout. */
static uint32_t short_rto_ms(const struct ina_ctx *ctx)
{
    int64_t m = min_rtt(ctx);
    if (m == 0) /* no sample yet (or ever, if every op is tail-probed) */
        return INA_FAST_RTX_NOSAMPLE_MS < current_rto_ms(ctx) ? INA_FAST_RTX_NOSAMPLE_MS
                                                              : current_rto_ms(ctx);
    int64_t ms = (4 * m + 999999) / 1000000;
    if (ms < INA_FAST_RTX_MIN_MS)
        ms = INA_FAST_RTX_MIN_MS;
    return ms < (int64_t)current_rto_ms(ctx) ? (uint32_t)ms : current_rto_ms(ctx);
}

/*
 * Tail probe. The last INA_FAST_RTX_GAP packets sent have no later results
 * to reveal their loss, and a small operation is nothing but tail. When the
 * stream cannot send more for a reason other than a full window (nothing
 * left to send, or waiting for an agreed exponent), no later packet will
 * follow them: give them the short timeout. With a full window, the results
 * that free it reveal gaps instead. If a peer is merely late, the cost is a
 * few duplicates (doubling timers), which the switch drops.
 */
static void tail_probe(struct ina_ctx *ctx)
{
    if (ctx->window_blocked)
        return;
    const uint32_t mask = ctx->window - 1;
    uint64_t first = ctx->next_g > INA_FAST_RTX_GAP ? ctx->next_g - INA_FAST_RTX_GAP : 0;
    for (uint64_t g = first; g < ctx->next_g; g++) {
        struct ina_wslot *ws = &ctx->slots[g & mask];
        if (!ws->inflight || ws->g != g || ws->tries != 0 || ws->short_timer)
            continue;
        ws->short_timer = 1;
        ws->rto_ms = short_rto_ms(ctx);
        arm_timer(ctx, ws, ws->sent_ns);
    }
}

/* Resend every packet whose timer expired, doubling its timeout (to a cap). */
static void retransmit_expired(struct ina_ctx *ctx, uint64_t now)
{
    if (ctx->next_rto_ns == 0 || now < ctx->next_rto_ns)
        return;
    ctx->next_rto_ns = 0;
    int resent = 0;
    for (uint32_t i = 0; i < ctx->window; i++) {
        struct ina_wslot *ws = &ctx->slots[i];
        if (!ws->inflight)
            continue;
        /* A tail packet (never sent twice) is probed only after a silence:
         * while results still arrive, the packets ahead of it are draining
         * from a queue (a slow link), and it is not late, let alone lost. */
        if (ws->deadline_ns <= now && ws->short_timer && ws->tries == 0 &&
            now - ctx->last_progress_ns < (uint64_t)ws->rto_ms * 1000000ull) {
            ws->deadline_ns = ctx->last_progress_ns + (uint64_t)ws->rto_ms * 1000000ull;
            if (ctx->next_rto_ns == 0 || ws->deadline_ns < ctx->next_rto_ns)
                ctx->next_rto_ns = ws->deadline_ns;
            continue;
        }
        if (ws->deadline_ns <= now) {
            /* Short timers (tail probe, after a fast retransmit) vs the RTO. */
            if (ws->short_timer)
                ctx->stats.rtx_probe++;
            else
                ctx->stats.rtx_timeout++;
            ws->tries++;
            ws->rto_ms = ws->rto_ms * 2 > INA_MAX_RTO_MS ? INA_MAX_RTO_MS : ws->rto_ms * 2;
            ctx->stats.retransmits++;
            tx_packet(ctx, i, ws);
            resent = 1;
        }
        arm_timer(ctx, ws, ws->deadline_ns <= now ? now : ws->deadline_ns - (uint64_t)ws->rto_ms * 1000000ull);
    }
    tx_flush(ctx);
    if (resent && ctx->xp.tx->probe)
        ctx->xp.tx->probe(ctx); /* on rings: is the switch still there? */
}

/*
 * Busy polling (ina_config.busy_poll_us, INA_BUSY_POLL_US): before sleeping
 * in poll(), look for input for up to busy_poll_ns. A sleeping worker is
 * woken by the kernel when its result arrives, which on a VM costs an
 * interrupt to another CPU and an exit to the hypervisor; a spinning one
 * takes the result as soon as it lands. It pays most when the spinner has
 * a core of its own (docs/GLM.md, "Busy polling"); it yields the CPU every
 * INA_BUSY_POLL_YIELD_NS, in case the switch or a peer waits for it on this
 * one (busy_poll.h). Bounded, so a worker whose peers are slow still goes
 * to sleep. With rings (§5.9) the
 * spin reads the down ring's memory and looks at the socket only every
 * INA_BUSY_POLL_SOCKET_EVERY turns (an ABORT or MIGRATE comes by UDP).
 * @return what the last receive returned (0: nothing came; sleep).
 */
#define INA_BUSY_POLL_SOCKET_EVERY 32
static int busy_poll(struct ina_ctx *ctx, uint64_t *now)
{
    uint64_t until = *now + ctx->busy_poll_ns, yielded = *now;
    if (ctx->next_rto_ns && ctx->next_rto_ns < until)
        until = ctx->next_rto_ns; /* a timer is due: stop spinning and handle it */
    for (unsigned turn = 1; !ctx->broken; turn++) {
        /* Only sockets: every turn. With rings: the rings alone when they have input (a
         * result is not kept waiting behind a system call on an empty socket), and the
         * socket too now and then. */
        const int ring = ina__transport_readable(ctx);
        if (ring != 0 || turn % INA_BUSY_POLL_SOCKET_EVERY == 0) {
            int got = ring > 0 && turn % INA_BUSY_POLL_SOCKET_EVERY ? rx_memory(ctx, *now)
                                                                     : rx_burst(ctx, *now);
            if (got) {
                ctx->stats.busy_poll_hits++;
                return got;
            }
        }
        if (!ina__spin_turn(now, &yielded, until))
            break;
    }
    ctx->stats.busy_poll_sleeps++;
    return 0;
}

int ina__spin_turn(uint64_t *now, uint64_t *yielded, uint64_t until)
{
    ina__cpu_relax();
    *now = ina__now_ns();
    if (*now >= until)
        return 0;
    static _Thread_local unsigned every = INA_BUSY_POLL_YIELD_NS; /* this thread's last yield */
    if (*now - *yielded >= every) {
        ina__busy_yield(); /* the switch, or a lane thread, may be queued on this CPU */
        *yielded = ina__now_ns();
        every = ina__busy_yield_every(*yielded - *now); /* crowded: yield every turn */
        *now = *yielded;
    }
    return 1;
}

/*
 * The auto spin (INA_BUSY_POLL_US=auto) backs off: spinning pays when the
 * results come within it, and only costs a core when they do not (a long
 * operation, peers that are slow or not there yet). An operation with more
 * than a window of packets still to come does not spin at all: its results
 * stream in, a wake-up is paid once per burst of them, and on a crowded
 * host the spinners' CPU is what the switch lacks (64 MiB at N = 4 on the
 * 2-core VM was up to a third slower with every worker spinning). After
 * INA_AUTO_SPIN_MISSES spins in a row that ended with nothing, a context
 * sleeps at once; a sleep that ends with input within the spin's length
 * (it would have paid) lets it spin again, and so does a spin that pays,
 * tried once every INA_AUTO_SPIN_PROBE waits (a sleeper's wake-up on a
 * loaded host may take longer than the spin, which would otherwise keep it
 * asleep when spinning would pay). A spin set by number
 * (INA_BUSY_POLL_US=US) always spins.
 */
#define INA_AUTO_SPIN_MISSES 4
#define INA_AUTO_SPIN_PROBE 8
int ina__spin_now(const struct ina_ctx *ctx)
{
    if (!ctx->busy_poll_ns)
        return 0;
    if (!ctx->busy_auto)
        return 1;
    const struct ina_req *r = ctx->head;
    if (r && r->npackets - r->ndone > (uint64_t)ctx->window)
        return 0; /* a long operation (or a sparse one, npackets unknown) */
    return ctx->spin_misses < INA_AUTO_SPIN_MISSES || ctx->spin_skips >= INA_AUTO_SPIN_PROBE;
}

void ina__spin_learn(struct ina_ctx *ctx, int spun, int got, uint64_t waited_ns)
{
    if (!ctx->busy_auto)
        return;
    if (spun)
        ctx->spin_skips = 0;
    else if (ctx->spin_skips < INA_AUTO_SPIN_PROBE)
        ctx->spin_skips++;
    if (got && (spun || waited_ns < ctx->busy_poll_ns))
        ctx->spin_misses = 0;
    else if (spun && ctx->spin_misses < INA_AUTO_SPIN_MISSES)
        ctx->spin_misses++;
}

void ina__stream_progress(struct ina_ctx *ctx, int timeout_ms)
{
    if (ctx->broken || !ctx->head)
        return;
    uint64_t now = ina__now_ns();
    send_ready(ctx, now);
    int got = rx_burst(ctx, now);
    const int spun = !got && timeout_ms > 0 && ina__spin_now(ctx) && !ctx->broken;
    if (spun) {
        got = busy_poll(ctx, &now);
        ina__spin_learn(ctx, 1, got, 0);
    }
    if (!got && timeout_ms > 0 && !ctx->broken && ina__transport_may_sleep(ctx)) {
        const uint64_t slept = now;
        uint64_t wake = now + (uint64_t)timeout_ms * 1000000ull;
        if (ctx->next_rto_ns && ctx->next_rto_ns < wake)
            wake = ctx->next_rto_ns;
        int ms = wake > now ? (int)((wake - now + 999999) / 1000000) : 0;
        /* The transports' descriptors, then wake_fd if there is one. */
        struct pollfd pfd[INA_XP_MAX + 1];
        int n = ina__transport_pollfds(ctx, pfd), wake_at = n;
        if (ctx->wake_fd >= 0)
            pfd[n++] = (struct pollfd){.fd = ctx->wake_fd, .events = POLLIN};
        poll(pfd, (nfds_t)n, ms);
        ina__transport_awake(ctx);
        if (ctx->wake_fd >= 0 && (pfd[wake_at].revents & POLLIN)) {
            uint64_t v;
            if (read(ctx->wake_fd, &v, sizeof(v)) < 0) {
                /* nothing to do: the eventfd is non-blocking and was only a wake-up */
            }
        }
        now = ina__now_ns();
        got = rx_burst(ctx, now);
        if (!spun)
            ina__spin_learn(ctx, 0, got, now - slept);
    }
    /* Drain what else is queued: results arrive in bursts of a window. */
    while (got == INA_RX_MSGS && !ctx->broken)
        got = rx_burst(ctx, now);
    if (ctx->migrate_pending && !ctx->broken) {
        int rc = ina__migrate_step(ctx); /* may block in a join, bounded by join_timeout_ms */
        if (rc)
            ina__stream_fail_all(ctx, rc);
        now = ina__now_ns();
    }
    if (ctx->broken)
        return;
    fast_retransmit(ctx, now);
    tail_probe(ctx);
    retransmit_expired(ctx, now);
    send_ready(ctx, now);
    if (ctx->head && now - ctx->last_progress_ns > (uint64_t)ctx->timeout_ms * 1000000ull)
        ina__stream_fail_all(ctx, INA_ERR_TIMEOUT);
    else if (ctx->head && ctx->refused_since_ns &&
             now - ctx->refused_since_ns > INA_REFUSED_FAIL_MS * 1000000ull &&
             now - ctx->last_progress_ns > INA_REFUSED_FAIL_MS * 1000000ull)
        ina__stream_fail_all(ctx, -ECONNREFUSED);
}
