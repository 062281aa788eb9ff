/* fuzz_reply.c: libFuzzer target for libina's reply handler (ina__stream_on_datagram). */

/*
 * The context is built by hand as ina_init() would leave it after a join,
 * with fd = -1 and three symbols wrapped at link time (cmake/fuzz.cmake):
 *   ina__now_ns  returns the fuzzer's clock, so every run replays exactly and
 *                retransmission timers and the operation deadline are reachable;
 *   sendmmsg     is the network out: it checks every DATA datagram the stream
 *                sends and keeps the last one per window slot;
 *   recvmmsg     is the network in: it returns the datagrams a record queued
 *                (truncated to the buffer, with MSG_TRUNC, as the kernel does),
 *                else fails with EAGAIN, or ECONNREFUSED (no switch there).
 * A model switch answers from those DATA datagrams as if every rank had sent
 * the same data: the RESULT echoes the header and carries world * payload
 * (for op 4: the payload added to itself world - 1 times in binary32; for a
 * sparse one, ops 7 and 8, the layout and place descriptors unchanged and
 * each block so).
 *
 * Input format:
 *
 *   [4 bytes config] then records [1 byte flags] [1 byte sel] [2 bytes length, big-endian] [bytes]
 *
 * config: b0: window = 1 << (b0 & 3), world = 1 + ((b0 >> 2) & 31), bit 7 the
 * requests are block-sparse (PROTOCOL.md §17: blocks of 2 elements, the
 * JOIN_ACK offers it; requests of packets too small for a place go dense,
 * and every third block of the data is non-zero); b1: elems =
 * 1 + (b1 & 15), bit 4 request A is FLOAT32, bit 5 a second request B exists,
 * bit 6 B is FLOAT32, bit 7 the float data holds Inf and NaN; b2: element
 * count of A; b3: bits 0..6 element count of B, bit 7 the switch adds floats
 * (JOIN_ACK offers INA_OP_ADD_F32 and the context asks for it: FLOAT32 goes
 * as binary32 in one round, PROTOCOL.md §8.8).
 *
 * A record is one datagram for window slot s = sel % window. sel bit 6: deliver
 * it through recvmmsg inside ina__stream_progress() instead of calling the
 * handler directly; sel bit 7: recvmmsg reports ECONNREFUSED (ICMP port
 * unreachable) while it has nothing to return. Flags, in order:
 *   F_CLOCK     first advance the clock by clock_step[(sel >> 3) & 7]
 *   F_MODEL     the datagram is the model switch's RESULT for the DATA last
 *               sent on slot s (the record's bytes are ignored)
 *   otherwise the record's bytes, patched:
 *   F_HDR       magic, version and kind RESULT
 *   F_CREDS     the context's job id, session and token
 *   F_SLOT      slot s, and the seq, set bit, wire op and op tag of the DATA last sent on s
 *   F_COUNT     that DATA's count (the datagram is cut or zero-padded to match)
 *   F_DUP       deliver the datagram twice
 *   F_PROGRESS  then run ina__stream_progress(ctx, 0) (send, retransmit, deadline)
 *
 * Invariants after every step: request bookkeeping agrees with the FIFO and
 * the window (check_ctx), every DATA sent is well-formed and belongs to an
 * in-flight slot. At the end, if no datagram other than the model's was ever
 * accepted, every request that completed must hold the exact sums (int32) or
 * sums within the quantization bound (float32): hostile datagrams that the
 * library rejects must leave no trace in the results.
 */

#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <netinet/udp.h>

#include "common/sparse_wire.h"
#include "lib/codec.h"
#include "lib/internal.h"
#include "lib/transport.h"


#include "lib/quant.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
uint64_t __wrap_ina__now_ns(void);
int __wrap_sendmmsg(int fd, struct mmsghdr *msgs, unsigned int vlen, int flags);
int __wrap_recvmmsg(int fd, struct mmsghdr *msgs, unsigned int vlen, int flags,
                    struct timespec *timeout);

/* The harness's own checks are not what is fuzzed: no coverage feedback from them. */
#define HARNESS __attribute__((no_sanitize("coverage"), noinline))

#define F_CLOCK 0x01u
#define F_HDR 0x02u
#define F_CREDS 0x04u
#define F_SLOT 0x08u
#define F_COUNT 0x10u
#define F_MODEL 0x20u
#define F_DUP 0x40u
#define F_PROGRESS 0x80u

#define FZ_MAX_WINDOW 8
#define FZ_MAX_ELEMS 16
#define FZ_JOB_ID 7
#define FZ_SESSION 0x5E55u
#define FZ_TOKEN 0x70CE4u
#define FZ_TIMEOUT_MS 30000
#define FZ_RTO_MS 100
#define FZ_SPARSE_BLOCK 2

static const uint64_t clock_step[8] = {
    0, 1000, 1000000, 50000000ull, 150000000ull, 1100000000ull, 10000000000ull, 31000000000ull,
};

#define CHECKF(cond)                                                                   \
    do {                                                                               \
        if (!(cond)) {                                                                 \
            fprintf(stderr, "fuzz_reply: invariant failed at %s:%d: %s\n", __FILE__,    \
                    __LINE__, #cond);                                                  \
            abort();                                                                   \
        }                                                                              \
    } while (0)

/* ---- The fake clock and network ------------------------------------------------- */

static uint64_t fake_now;
static struct ina_ctx *cur_ctx;

/* Last DATA datagram sent on each window slot. */
static struct {
    uint8_t buf[INA_HDR_LEN + 4 * FZ_MAX_ELEMS];
    size_t len;
} sent[FZ_MAX_WINDOW];

uint64_t __wrap_ina__now_ns(void) { return fake_now; }

HARNESS int __wrap_sendmmsg(int fd, struct mmsghdr *msgs, unsigned int vlen, int flags)
{
    (void)fd;
    (void)flags;
    const struct ina_ctx *ctx = cur_ctx;
    CHECKF(ctx != NULL && vlen >= 1 && vlen <= 2 * INA_BURST);
    for (unsigned i = 0; i < vlen; i++) {
        /* A message is one datagram, or a UDP GSO train: one datagram per
         * iovec, all of the segment size in the UDP_SEGMENT cmsg except a
         * shorter last one, at most 64 and 65000 bytes (udp_gso.h). */
        const struct msghdr *mh = &msgs[i].msg_hdr;
        size_t iovlen = mh->msg_iovlen, total = 0, seg = mh->msg_iov[0].iov_len;
        CHECKF(iovlen >= 1 && iovlen <= INA_GSO_MAX_SEGS);
        if (iovlen > 1) {
            const struct cmsghdr *c = CMSG_FIRSTHDR((struct msghdr *)mh);
            CHECKF(c != NULL && c->cmsg_level == SOL_UDP && c->cmsg_type == UDP_SEGMENT);
            uint16_t gso;
            memcpy(&gso, CMSG_DATA(c), sizeof(gso));
            CHECKF(gso == seg);
        }
        for (size_t v = 0; v < iovlen; v++) {
            CHECKF(v + 1 == iovlen ? mh->msg_iov[v].iov_len <= seg : mh->msg_iov[v].iov_len == seg);
            total += mh->msg_iov[v].iov_len;
        }
        CHECKF(iovlen == 1 || total <= INA_GSO_MAX_BYTES);
        msgs[i].msg_len = (unsigned)total;
        for (size_t v = 0; v < iovlen; v++) {
        const uint8_t *b = mh->msg_iov[v].iov_base;
        size_t len = mh->msg_iov[v].iov_len;
        struct ina_hdr h;
        CHECKF(ina__hdr_decode(b, len, &h) == INA_PARSE_OK);
        CHECKF(h.kind == INA_K_DATA);
        CHECKF(h.job == ctx->job_id && h.session == ctx->session && h.token == ctx->token);
        CHECKF(h.rank == ctx->rank);
        CHECKF(h.count <= ctx->elems && len <= sizeof(sent[0].buf));
        uint32_t slot = h.slot & INA_SLOT_INDEX_MASK;
        CHECKF(slot < ctx->window);
        CHECKF(((h.slot & INA_SLOT_SET_BIT) != 0) == (h.seq & 1));
        const struct ina_wslot *ws = &ctx->slots[slot];
        CHECKF(ws->inflight && ws->seq == h.seq); /* only in-flight packets go out */
        /* op 4 only for a float op of a context whose switch offered it;
         * ops 7 and 8 only for a sparse op, with a well-formed payload */
        const int f32 = ws->req->codec == &ina__codec_f32;
        if (ws->req->sparse) {
            CHECKF(h.op == (f32 ? INA_OP_SPARSE_F32 : INA_OP_SPARSE_I32));
            CHECKF(ctx->switch_caps & INA_FLAG_CAP_SPARSE);
            CHECKF(ina__sparse_check(b + INA_HDR_LEN, h.count, ctx->elems, ina__op_is_sparse_h16(h.op)) == 0);
        } else {
            CHECKF(h.op == (f32 ? INA_OP_ADD_F32 : INA_OP_ADD_I32));
        }
        CHECKF(!f32 || (ctx->switch_caps & INA_FLAG_CAP_F32));
        memcpy(sent[slot].buf, b, len);
        sent[slot].len = len;
        }
    }
    return (int)vlen;
}

/* Datagrams queued for the next recvmmsg (a record and its duplicate). */
static struct {
    const uint8_t *buf;
    size_t len;
} rxq[2];
static unsigned rxq_n;
static int rx_refused;

HARNESS int __wrap_recvmmsg(int fd, struct mmsghdr *msgs, unsigned int vlen, int flags,
                            struct timespec *timeout)
{
    (void)fd;
    (void)flags;
    (void)timeout;
    if (rxq_n == 0) {
        errno = rx_refused ? ECONNREFUSED : EAGAIN;
        return -1;
    }
    /* Two datagrams of equal size arrive as one GRO train (UDP_GRO cmsg
     * with the segment size), as the kernel delivers them; else one each. */
    if (rxq_n == 2 && rxq[0].len == rxq[1].len && rxq[0].len > 0 &&
        2 * rxq[0].len <= msgs[0].msg_hdr.msg_iov[0].iov_len &&
        msgs[0].msg_hdr.msg_controllen >= CMSG_SPACE(sizeof(int))) {
        uint8_t *p = msgs[0].msg_hdr.msg_iov[0].iov_base;
        memcpy(p, rxq[0].buf, rxq[0].len);
        memcpy(p + rxq[0].len, rxq[1].buf, rxq[1].len);
        struct msghdr *mh = &msgs[0].msg_hdr;
        struct cmsghdr *c = CMSG_FIRSTHDR(mh);
        c->cmsg_level = SOL_UDP;
        c->cmsg_type = UDP_GRO;
        c->cmsg_len = CMSG_LEN(sizeof(int));
        int seg = (int)rxq[0].len;
        memcpy(CMSG_DATA(c), &seg, sizeof(seg));
        mh->msg_controllen = CMSG_SPACE(sizeof(int));
        mh->msg_flags = 0;
        msgs[0].msg_len = (unsigned)(2 * rxq[0].len);
        rxq_n = 0;
        return 1;
    }
    unsigned n = rxq_n < vlen ? rxq_n : vlen;
    for (unsigned i = 0; i < n; i++) {
        struct iovec *iov = &msgs[i].msg_hdr.msg_iov[0];
        size_t len = rxq[i].len < iov->iov_len ? rxq[i].len : iov->iov_len;
        memcpy(iov->iov_base, rxq[i].buf, len);
        msgs[i].msg_len = (unsigned)len;
        msgs[i].msg_hdr.msg_flags = rxq[i].len > iov->iov_len ? MSG_TRUNC : 0;
        msgs[i].msg_hdr.msg_controllen = 0; /* no GRO cmsg: a single datagram */
    }
    rxq_n = 0;
    return (int)n;
}

/* ---- Requests ------------------------------------------------------------------ */

struct fz_op {
    struct ina_req *req;
    void *src, *dst;
};

#define FZ_NOPS 2
static struct fz_op ops[FZ_NOPS];

/* Exact-size heap buffer (ASan sees any access past its end); never NULL. */
static void *xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    CHECKF(p != NULL);
    return p;
}

/* As ina_allreduce_start(), minus the argument checks. */
static void op_start(struct ina_ctx *ctx, struct fz_op *op, size_t count, int is_float,
                     int nonfinite, int sparse)
{
    op->src = xmalloc(4 * count);
    op->dst = xmalloc(4 * count);
    memset(op->dst, 0xA5, 4 * count);
    for (size_t i = 0; i < count; i++) {
        if (is_float) {
            float f = (float)((double)i * 0.75 - 5.0);
            if (nonfinite && i % 7 == 3)
                f = (i % 2) ? INFINITY : NAN;
            ((float *)op->src)[i] = f;
        } else {
            ((int32_t *)op->src)[i] = (int32_t)(i * 1000003u + 0x7FFFFF00u);
        }
        if (sparse && (i / FZ_SPARSE_BLOCK) % 3)
            ((int32_t *)op->src)[i] = 0; /* +0 as either type: a zero block */
    }
    struct ina_req *req = ina__req_create(ctx, op->src, op->dst, count,
                                          is_float ? INA_FLOAT32 : INA_INT32, INA_SUM,
                                          sparse ? INA_SPARSE_ON : INA_SPARSE_OFF, 0, count);
    CHECKF(req != NULL);
    op->req = req;
    if (!req->done)
        ina__stream_progress(ctx, 0);
}

/* ---- Invariants ---------------------------------------------------------------- */

/* Request bookkeeping, the FIFO and the window agree. */
HARNESS static void check_ctx(const struct ina_ctx *ctx)
{
    uint64_t ndone = 0, inflight = 0;
    for (int k = 0; k < FZ_NOPS; k++) {
        const struct ina_req *req = ops[k].req;
        if (!req)
            continue;
        CHECKF(req->ndone <= req->npackets);
        int in_fifo = 0;
        int steps = 0;
        for (const struct ina_req *q = ctx->head; q; q = q->next) {
            CHECKF(++steps <= FZ_NOPS);
            in_fifo |= q == req;
        }
        if (req->done) {
            CHECKF(!in_fifo);
            CHECKF(req->status != 0 || req->ndone == req->npackets);
            CHECKF(req->status == 0 || ctx->broken != 0); /* only fail_all fails one */
        } else {
            CHECKF(in_fifo);
            CHECKF(req->ndone < req->npackets);
        }
        ndone += req->ndone;
    }
    if (ctx->head) {
        const struct ina_req *last = ctx->head;
        while (last->next)
            last = last->next;
        CHECKF(ctx->tail == last);
    }
    if (ctx->broken)
        CHECKF(ctx->head == NULL && ctx->send_req == NULL);
    for (uint32_t i = 0; i < ctx->window; i++) {
        const struct ina_wslot *ws = &ctx->slots[i];
        if (!ws->inflight)
            continue;
        inflight++;
        CHECKF(!ctx->broken);
        CHECKF(ws->req != NULL && !ws->req->done);
        CHECKF(ws->p < ws->req->npackets);
        CHECKF((ws->g & (ctx->window - 1)) == i);
        CHECKF(ws->g < ctx->next_g);
        CHECKF(ws->seq + 1 == ws->round);
    }
    /* Every packet sent either has its result or is still in flight. */
    if (!ctx->broken)
        CHECKF(ndone + inflight == ctx->next_g);
}

/* A completed request fed only by the model switch holds world * its input. */
HARNESS static void check_sums(const struct ina_ctx *ctx, const struct fz_op *op)
{
    const struct ina_req *req = op->req;
    const int w = ctx->world;
    if (req->codec == &ina__codec_dtype) { /* INT32 */
        for (size_t i = 0; i < req->count; i++) {
            uint32_t want = (uint32_t)((const int32_t *)op->src)[i] * (uint32_t)w;
            CHECKF((uint32_t)((const int32_t *)op->dst)[i] == want);
        }
        return;
    }
    const float *x = op->src, *y = op->dst;
    if (req->codec == &ina__codec_f32) { /* PROTOCOL.md §8.8: per element, IEEE */
        for (size_t i = 0; i < req->count; i++) {
            if (isnan(x[i])) {
                CHECKF(isnan(y[i]));
            } else if (isinf(x[i])) {
                CHECKF(y[i] == x[i]);
            } else {
                double want = (double)w * x[i];
                CHECKF(fabs((double)y[i] - want) <=
                       ina_float_add_error_bound(INA_FLOAT32, w, fabs(want), want));
            }
        }
        return;
    }
    const int l = ina__quant_headroom_bits(w);
    const size_t qb = req->sparse ? FZ_SPARSE_BLOCK : ctx->elems; /* the quantization blocks */
    for (size_t start = 0; start < req->count; start += qb) {
        size_t n = req->count - start < qb ? req->count - start : qb;
        int16_t e = ina__quant_block_exp(x + start, n);
        for (size_t i = start; i < start + n; i++) {
            if (e == INA_EXP_NONFINITE) {
                /* quant.h: a finite element sharing a block with Inf/NaN comes back NaN. */
                if (isinf(x[i]))
                    CHECKF(y[i] == x[i]);
                else
                    CHECKF(isnan(y[i]));
                continue;
            }
            double want = (double)w * x[i];
            double bound = e == INA_EXP_ZERO ? 0.0
                                             : w * ldexp(1.0, e + l - 31) + fabs(want) * 0x1p-24 +
                                                   0x1p-149;
            CHECKF(fabs((double)y[i] - want) <= bound);
        }
    }
}

/* ---- Records ------------------------------------------------------------------- */

/* INA_FUZZ_VERBOSE=1: print the stream's state after each input (seed checks). */
static int verbose(void)
{
    static int v = -1;
    if (v < 0)
        v = getenv("INA_FUZZ_VERBOSE") != NULL;
    return v;
}

/* The model switch's RESULT for the DATA last sent on slot s: every rank sent the same. */
static uint8_t *model_result(const struct ina_ctx *ctx, uint32_t s, size_t *len)
{
    *len = sent[s].len;
    if (!*len)
        return NULL;
    uint8_t *b = xmalloc(*len);
    memcpy(b, sent[s].buf, *len);
    b[3] = INA_K_RESULT;
    ina__put16(b + 6, INA_RANK_SWITCH);
    size_t first = INA_HDR_LEN;
    if (ina__op_is_sparse(b[30])) /* the descriptors stand: every rank sent the same */
        first += 4 * ina__sparse_words(0, ina__sparse_layout_places(ina__get32(b + first)), 0);
    for (size_t off = first; off + 4 <= *len; off += 4) {
        uint32_t v = ina__get32(b + off);
        if (b[30] == INA_OP_ADD_F32 || b[30] == INA_OP_SPARSE_F32) {
            float x, acc;
            memcpy(&x, &v, 4);
            acc = x;
            for (int r = 1; r < ctx->world; r++)
                acc += x;
            memcpy(&v, &acc, 4);
        } else {
            v *= (uint32_t)ctx->world;
        }
        ina__put32(b + off, v);
    }
    return b;
}

/* @return 1 if the record's datagram (not the model's) was accepted as a result. */
static int one_record(struct ina_ctx *ctx, uint8_t flags, uint8_t sel, const uint8_t *bytes,
                      size_t len)
{
    if (flags & F_CLOCK)
        fake_now += clock_step[(sel >> 3) & 7];
    uint32_t s = sel & (ctx->window - 1);
    const uint8_t *last = sent[s].buf;
    size_t want = len;
    uint8_t *b;
    if (flags & F_MODEL) {
        b = model_result(ctx, s, &want);
    } else {
        if ((flags & F_COUNT) && sent[s].len)
            want = sent[s].len;
        /* Exact-size heap copy: a read past the datagram is an ASan error. */
        b = xmalloc(want);
        memset(b, 0, want);
        memcpy(b, bytes, len < want ? len : want);
        if (want >= INA_HDR_LEN) {
            if (flags & F_HDR) {
                ina__put16(b, INA_WIRE_MAGIC);
                b[2] = INA_WIRE_VERSION;
                b[3] = INA_K_RESULT;
            }
            if (flags & F_CREDS) {
                ina__put16(b + 4, ctx->job_id);
                ina__put32(b + 8, ctx->session);
                ina__put32(b + 12, ctx->token);
            }
            if (flags & F_SLOT) {
                ina__put32(b + 16, s | ((ina__get32(last + 20) & 1) ? INA_SLOT_SET_BIT : 0));
                memcpy(b + 20, last + 20, 4); /* seq */
                b[30] = last[30];             /* wire op */
                b[31] = last[31];             /* op tag */
            }
            if ((flags & F_COUNT) && sent[s].len)
                memcpy(b + 24, last + 24, 2);
        }
    }
    uint64_t accepted = ctx->stats.packets_received;
    rx_refused = (sel >> 7) & 1;
    if (b && ((sel >> 6) & 1)) {
        rxq[0].buf = rxq[1].buf = b;
        rxq[0].len = rxq[1].len = want;
        rxq_n = (flags & F_DUP) ? 2 : 1;
        ina__stream_progress(ctx, 0); /* may return at once: context broken or idle */
        rxq_n = 0;
        check_ctx(ctx);
    } else if (b) {
        ina__stream_on_datagram(ctx, b, want, fake_now);
        check_ctx(ctx);
        if (flags & F_DUP) {
            ina__stream_on_datagram(ctx, b, want, fake_now);
            check_ctx(ctx);
        }
    }
    free(b);
    int forged = !(flags & F_MODEL) && ctx->stats.packets_received != accepted;
    if (flags & F_PROGRESS) {
        ina__stream_progress(ctx, 0);
        check_ctx(ctx);
    }
    return forged;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 4)
        return 0;
    fake_now = 1000000000ull;
    memset(ops, 0, sizeof(ops));
    memset(sent, 0, sizeof(sent));

    struct ina_ctx *ctx = calloc(1, sizeof(*ctx));
    CHECKF(ctx != NULL);
    cur_ctx = ctx;
    ctx->magic = INA_CTX_LIVE;
    ctx->fd = -1;
    snprintf(ctx->job, sizeof(ctx->job), "fuzz");
    ctx->window = 1u << (data[0] & 3);
    ctx->world = 1 + ((data[0] >> 2) & 31);
    ctx->rank = 0;
    ctx->elems = 1 + (data[1] & 15);
    ctx->timeout_ms = FZ_TIMEOUT_MS;
    ctx->join_timeout_ms = FZ_TIMEOUT_MS;
    ctx->rto_ms = FZ_RTO_MS;
    ctx->job_id = FZ_JOB_ID;
    ctx->session = FZ_SESSION;
    ctx->token = FZ_TOKEN;
    ctx->nonce = 1;
    if (data[3] & 0x80) {
        ctx->switch_caps = INA_FLAG_CAP_F32;
        ctx->float_add = INA_FLOAT_ADD_SWITCH;
    }
    int sparse = data[0] >> 7;
    if (sparse) {
        ctx->switch_caps |= INA_FLAG_CAP_SPARSE;
        ctx->sparse_block = FZ_SPARSE_BLOCK;
    }
    CHECKF(ina__stream_init(ctx) == 0);
    ina__udp_start(ctx); /* the socket's transport (transport.h): sendmmsg, recvmmsg */

    int nonfinite = (data[1] >> 7) & 1;
    op_start(ctx, &ops[0], data[2], (data[1] >> 4) & 1, nonfinite, sparse);
    if ((data[1] >> 5) & 1)
        op_start(ctx, &ops[1], data[3] & 0x7F, (data[1] >> 6) & 1, nonfinite, sparse);
    check_ctx(ctx);
    data += 4;
    size -= 4;

    int forged = 0;
    while (size >= 4) {
        uint8_t flags = data[0], sel = data[1];
        size_t len = (size_t)data[2] << 8 | data[3];
        data += 4;
        size -= 4;
        if (len > size)
            len = size;
        forged |= one_record(ctx, flags, sel, data, len);
        data += len;
        size -= len;
    }

    if (verbose()) {
        fprintf(stderr, "sent %llu received %llu stale %llu retransmits %llu broken %d forged %d\n",
                (unsigned long long)ctx->stats.packets_sent,
                (unsigned long long)ctx->stats.packets_received,
                (unsigned long long)ctx->stats.stale_results,
                (unsigned long long)ctx->stats.retransmits, ctx->broken, forged);
        for (int k = 0; k < FZ_NOPS; k++)
            if (ops[k].req)
                fprintf(stderr, "  op %d: %llu/%llu packets done %d status %d\n", k,
                        (unsigned long long)ops[k].req->ndone,
                        (unsigned long long)ops[k].req->npackets, ops[k].req->done,
                        ops[k].req->status);
    }
    for (int k = 0; k < FZ_NOPS; k++)
        if (!forged && ops[k].req && ops[k].req->done && ops[k].req->status == 0)
            check_sums(ctx, &ops[k]);

    /* As ina_finalize(): fail what is left, then every request is done. */
    ina__stream_fail_all(ctx, INA_ERR_CLOSED);
    check_ctx(ctx);
    for (int k = 0; k < FZ_NOPS; k++) {
        if (!ops[k].req)
            continue;
        CHECKF(ops[k].req->done);
        ina__req_release(ctx, ops[k].req); /* and what it owns (a sparse op's state) */
        free(ops[k].src);
        free(ops[k].dst);
    }
    ina__req_pool_free(ctx); /* the requests came from the context's pool (reqpool.c) */
    ina__stream_free(ctx);
    free(ctx);
    cur_ctx = NULL;
    return 0;
}
