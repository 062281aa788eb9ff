/* gen.h: fuzzed switch traces: jobs that join, stream, retransmit, misbehave and leave, from a seed. */
#ifndef INA_TEST_GEN_H
#define INA_TEST_GEN_H

/*
 * A generator of trace records (src/switch/trace.h) that reach deep into
 * the slot rules rather than bouncing off the first check: up to 3 jobs of
 * 1..5 ranks join with small k and W, then stream rounds slot by slot as
 * ranks do (each round's contributions agree on count, op and tag, and a
 * slot's next round starts once every rank sent the last), with random
 * interleaving across jobs, slots and ranks. Mixed in: duplicates of
 * recent packets (pending, complete, stale), every way a DATA can be wrong
 * (each check of §6.1, each case of §6.2: not ready, future, mismatching
 * count, tag or op), all four ops with payloads and exponents chosen to
 * hit wrap-around, extremes and every op 3 shift case, malformed
 * datagrams, leaves, aborts, restarts, ticks across the join timeout,
 * operator aborts and evictions. It learns each job's id, session, token,
 * k and W from the userspace switch's JOIN_ACKs (gen_observe), as a worker
 * would. Deterministic for a seed.
 */

#include <stdint.h>
#include <string.h>

#include "common/wire.h"
#include "switch/trace.h"

#define GEN_JOBS 3
#define GEN_MAX_WORLD 5
#define GEN_MAX_W 8
#define GEN_RECENT 48
#define GEN_MAX_LEN 1400 /* every datagram fits BPF_PROG_TEST_RUN's frame */

struct gen_job {
    int used, active, dead;
    char name[16];
    int world, k, W;           /* proposed, then granted */
    struct sockaddr_in addr[GEN_MAX_WORLD];
    uint64_t nonce[GEN_MAX_WORLD];
    uint16_t id;
    uint32_t session, token;
    uint32_t seq[GEN_MAX_W];   /* each slot's round */
    uint8_t sent[GEN_MAX_W];   /* ranks that sent it */
    uint16_t count[GEN_MAX_W];
    uint8_t op[GEN_MAX_W], tag[GEN_MAX_W];
    int left;
    int evicted; /* a MIGRATE came: its ranks leave soon */
};

struct gen_pkt {
    struct sockaddr_in src;
    uint16_t len;
    uint8_t b[GEN_MAX_LEN];
};

struct gen {
    uint64_t rng;
    uint64_t t_ns;
    unsigned serial;
    struct gen_job jobs[GEN_JOBS];
    struct gen_pkt recent[GEN_RECENT]; /* DATA sent lately, for duplicates */
    unsigned nrecent;
    struct gen_pkt pending[GEN_MAX_WORLD * 2]; /* JOINs still to send */
    unsigned npending;
    struct gen_pkt cur;                         /* the record's data */
    uint8_t idbuf[2];
};

static inline uint64_t gen_rand(struct gen *g)
{
    uint64_t x = (g->rng += 0x9E3779B97F4A7C15ull);
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}
static inline unsigned gen_below(struct gen *g, unsigned n) { return n ? (unsigned)(gen_rand(g) % n) : 0; }
static inline int gen_pct(struct gen *g, unsigned p) { return gen_below(g, 1000) < p; } /* per mille */

static inline void gen_init(struct gen *g, uint64_t seed)
{
    memset(g, 0, sizeof(*g));
    g->rng = seed * 0x2545F4914F6CDD1Dull + 1;
}

/* An int32 that reaches the interesting places: small, extreme, random. */
static inline int32_t gen_value(struct gen *g)
{
    switch (gen_below(g, 8)) {
    case 0: return INT32_MAX - (int32_t)gen_below(g, 3);
    case 1: return INT32_MIN + (int32_t)gen_below(g, 3);
    case 2: return (int32_t)gen_below(g, 7) - 3;
    case 3: return (int32_t)(gen_rand(g) >> 40) - (1 << 23); /* a quantized value */
    default: return (int32_t)(uint32_t)gen_rand(g);
    }
}

/* An exponent: ordinary ones near each other (op 3 shifts of 0..5), far
 * ones (shifts past 32), and the ZERO and NONFINITE markers. */
static inline int16_t gen_exp(struct gen *g)
{
    switch (gen_below(g, 8)) {
    case 0: return INA_EXP_ZERO;
    case 1: return INA_EXP_NONFINITE;
    case 2: return (int16_t)((int)gen_below(g, 300) - 150);
    default: return (int16_t)gen_below(g, 6);
    }
}

static inline void gen_hdr(struct gen_pkt *p, const struct ina_hdr *h, size_t bodylen)
{
    ina__hdr_encode(p->b, h);
    p->len = (uint16_t)(INA_HDR_LEN + bodylen);
}

static inline void gen_join(struct gen *g, struct gen_job *j, int r, struct gen_pkt *p)
{
    struct ina_hdr h;
    ina__hdr_init(&h, INA_K_JOIN);
    h.rank = (uint16_t)r;
    struct ina_join jb;
    memset(&jb, 0, sizeof(jb));
    jb.nonce = j->nonce[r];
    jb.world_size = (uint16_t)j->world;
    jb.elems = (uint16_t)j->k;
    jb.window = (uint32_t)j->W;
    jb.nlanes = 1;
    memcpy(jb.name, j->name, sizeof(j->name));
    gen_hdr(p, &h, INA_JOIN_BODY_LEN);
    ina__join_encode(p->b + INA_HDR_LEN, &jb);
    p->src = j->addr[r];
    (void)g;
}

/* A new job: its JOINs, one per rank in a random order, go out next. */
static inline void gen_new_job(struct gen *g, struct gen_job *j)
{
    memset(j, 0, sizeof(*j));
    j->used = 1;
    j->world = 1 + (int)gen_below(g, GEN_MAX_WORLD);
    j->k = gen_pct(g, 100) ? 300 + (int)gen_below(g, 40) : 1 + (int)gen_below(g, 48);
    j->W = 1 << gen_below(g, 4);
    snprintf(j->name, sizeof(j->name), "fz%u", g->serial++ % 7);
    unsigned host = 1 + gen_below(g, 3); /* ranks may share a host, on other ports */
    for (int r = 0; r < j->world; r++) {
        j->addr[r].sin_family = AF_INET;
        j->addr[r].sin_addr.s_addr = htonl(0x7F000000u | (host + (unsigned)r % 2) << 8 | 1);
        j->addr[r].sin_port = htons((uint16_t)(20000 + gen_below(g, 30000)));
        j->nonce[r] = gen_rand(g) | 1;
    }
    int order[GEN_MAX_WORLD];
    for (int r = 0; r < j->world; r++)
        order[r] = r;
    for (int r = j->world - 1; r > 0; r--) {
        int x = (int)gen_below(g, (unsigned)r + 1), t = order[r];
        order[r] = order[x];
        order[x] = t;
    }
    for (int r = 0; r < j->world && g->npending < GEN_MAX_WORLD * 2; r++)
        gen_join(g, j, order[r], &g->pending[g->npending++]);
}

/* Rank r's DATA for slot s's current round of job j (round parameters
 * drawn when the round opens). */
static inline void gen_data(struct gen *g, struct gen_job *j, int s, int r, struct gen_pkt *p)
{
    if (j->sent[s] == 0) { /* the round opens */
        j->count[s] = (uint16_t)gen_below(g, (unsigned)j->k + 1);
        j->op[s] = gen_pct(g, 15) ? 4 : (uint8_t)gen_below(g, 4);
        j->tag[s] = (uint8_t)gen_rand(g);
    }
    struct ina_hdr h;
    ina__hdr_init(&h, INA_K_DATA);
    h.job = j->id;
    h.rank = (uint16_t)r;
    h.session = j->session;
    h.token = j->token;
    h.seq = j->seq[s];
    h.slot = (uint32_t)s | (h.seq & 1 ? INA_SLOT_SET_BIT : 0);
    h.count = j->count[s];
    h.exp = gen_exp(g);
    h.flags = gen_pct(g, 30) ? (uint16_t)gen_rand(g) : 0; /* ignored, and 0 in the RESULT */
    h.op = j->op[s];
    h.tag = j->tag[s];
    gen_hdr(p, &h, 4u * h.count);
    for (unsigned i = 0; i < h.count; i++)
        ina__put32(p->b + INA_HDR_LEN + 4 * i, (uint32_t)gen_value(g));
    p->src = j->addr[r];
}

/* One way a DATA datagram can be wrong, applied to p (a valid one). */
static inline void gen_break(struct gen *g, struct gen_job *j, struct gen_pkt *p)
{
    uint8_t *b = p->b;
    switch (gen_below(g, 16)) {
    case 0: ina__put32(b + 8, ina__get32(b + 8) ^ 1); break;                  /* SESSION */
    case 1: ina__put32(b + 12, ina__get32(b + 12) + 1); break;                /* TOKEN */
    case 2: ina__put16(b + 6, (uint16_t)(j->world + gen_below(g, 300))); break; /* RANK */
    case 3: p->src.sin_port = htons((uint16_t)(ntohs(p->src.sin_port) + 1)); break; /* SOURCE */
    case 4: ina__put32(b + 16, (ina__get32(b + 16) & INA_SLOT_SET_BIT) | (uint32_t)(j->W + gen_below(g, 5))); break;
    case 5: b[30] = (uint8_t)(4 + gen_below(g, 252)); break;                 /* OP */
    case 6: ina__put32(b + 16, ina__get32(b + 16) ^ INA_SLOT_SET_BIT); break;  /* SET */
    case 7: ina__put32(b + 20, ina__get32(b + 20) + 2); break;                 /* NOT_READY or DUP */
    case 8: ina__put32(b + 20, ina__get32(b + 20) + 4 + 2 * gen_below(g, 1000)); break; /* FUTURE */
    case 9: ina__put32(b + 20, ina__get32(b + 20) - 2 - 2 * gen_below(g, 3)); break; /* STALE */
    case 10: b[31] ^= (uint8_t)(1 + gen_below(g, 255)); break;              /* MISMATCH (tag) */
    case 11: b[30] = (uint8_t)((b[30] + 1 + gen_below(g, 3)) % 4); break;    /* MISMATCH (op) */
    case 12: {                                                               /* count: MISMATCH or COUNT */
        unsigned c = gen_below(g, (unsigned)j->k + 20);
        if ((INA_HDR_LEN + 4 * c) > GEN_MAX_LEN)
            c = 0;
        ina__put16(b + 24, (uint16_t)c);
        p->len = (uint16_t)(INA_HDR_LEN + 4 * c);
        break;
    }
    case 13: /* LENGTH */
        p->len = (uint16_t)(p->len > INA_HDR_LEN ? p->len - 1u - gen_below(g, 3) : p->len + 4u);
        break;
    case 14: ina__put16(b + 4, (uint16_t)gen_below(g, 80)); break;            /* NO_JOB, or another job's */
    default: p->len = (uint16_t)gen_below(g, INA_HDR_LEN); break;            /* SHORT */
    }
}

static inline struct gen_job *gen_pick_active(struct gen *g)
{
    int n = 0, idx[GEN_JOBS];
    for (int i = 0; i < GEN_JOBS; i++)
        if (g->jobs[i].used && g->jobs[i].active && !g->jobs[i].dead)
            idx[n++] = i;
    return n ? &g->jobs[idx[gen_below(g, (unsigned)n)]] : NULL;
}

static inline void gen_remember(struct gen *g, const struct gen_pkt *p)
{
    g->recent[g->nrecent++ % GEN_RECENT] = *p;
}

/* The next record. Its data stays valid until the next call. */
static inline void gen_next(struct gen *g, struct ina_trace_rec *rec)
{
    memset(rec, 0, sizeof(*rec));
    g->t_ns += 1000 + gen_below(g, 20000);
    rec->t_ns = g->t_ns;
    rec->type = INA_TRACE_DATAGRAM;
    struct gen_pkt *p = &g->cur;
    memset(p, 0, sizeof(*p));
    struct gen_job *j = gen_pick_active(g);
    if (j && j->evicted && gen_pct(g, 40))
        j->dead = 1; /* gone to its host aggregator */
    unsigned roll = gen_below(g, 1000);
    if (g->npending && roll < 700) {
        *p = g->pending[0];
        memmove(g->pending, g->pending + 1, --g->npending * sizeof(g->pending[0]));
    } else if (roll < 15) {
        rec->type = INA_TRACE_TICK;
        if (gen_pct(g, 100))
            g->t_ns += 2500000000ull; /* past the join timeout: a joining job is dropped */
        rec->t_ns = g->t_ns;
        return;
    } else if (roll < 60 || !j) {
        for (int i = 0; i < GEN_JOBS; i++) {
            struct gen_job *n = &g->jobs[i];
            if (!n->used || n->dead) {
                if (g->npending == 0)
                    gen_new_job(g, n);
                break;
            }
        }
        if (g->npending) {
            *p = g->pending[0];
            memmove(g->pending, g->pending + 1, --g->npending * sizeof(g->pending[0]));
        } else {
            rec->type = INA_TRACE_TICK;
            return;
        }
    } else if (roll < 75) { /* LEAVE, rarely with the abort flag; or a restart */
        int r = (int)gen_below(g, (unsigned)j->world);
        if (gen_pct(g, 150)) {
            j->nonce[r] = gen_rand(g) | 1; /* a new incarnation: the job is aborted */
            gen_join(g, j, r, p);
            j->dead = 1;
        } else {
            struct ina_hdr h;
            ina__hdr_init(&h, INA_K_LEAVE);
            h.job = j->id;
            h.rank = (uint16_t)r;
            h.session = j->session;
            h.token = j->token;
            h.flags = gen_pct(g, 100) ? INA_FLAG_ABORT : 0;
            gen_hdr(p, &h, 0);
            p->src = j->addr[r];
            if (h.flags)
                j->dead = 1;
            else if ((j->left |= 1 << r) == (1 << j->world) - 1)
                j->dead = 1;
        }
    } else if (roll < 80) { /* operator */
        rec->type = gen_pct(g, 600) ? INA_TRACE_EVICT : INA_TRACE_ABORT;
        ina__put16(g->idbuf, gen_pct(g, 900) ? j->id : (uint16_t)gen_below(g, 70));
        rec->len = 2;
        rec->data = g->idbuf;
        if (rec->type == INA_TRACE_ABORT)
            j->dead = 1;
        return;
    } else if (roll < 170 && g->nrecent) { /* a duplicate of something recent */
        *p = g->recent[gen_below(g, g->nrecent < GEN_RECENT ? g->nrecent : GEN_RECENT)];
    } else if (roll < 200) { /* junk */
        p->len = (uint16_t)gen_below(g, 100);
        for (unsigned i = 0; i < p->len; i++)
            p->b[i] = (uint8_t)gen_rand(g);
        if (p->len >= 4 && gen_pct(g, 700)) {
            p->b[0] = 0x49;
            p->b[1] = 0x4E;
            p->b[2] = gen_pct(g, 800) ? 1 : 2;
            p->b[3] = gen_pct(g, 700) ? INA_K_DATA : (uint8_t)gen_rand(g);
        }
        p->src = j->addr[0];
    } else { /* the streams, a few of them broken */
        int s = (int)gen_below(g, (unsigned)j->W);
        if (j->sent[s] == (1u << j->world) - 1) { /* the round is complete: the next one */
            j->seq[s]++;
            j->sent[s] = 0;
        }
        int r;
        do
            r = (int)gen_below(g, (unsigned)j->world);
        while (j->sent[s] & (1u << r));
        gen_data(g, j, s, r, p);
        if (gen_pct(g, 60)) {
            gen_break(g, j, p);
        } else {
            j->sent[s] |= (uint8_t)(1u << r);
            gen_remember(g, p);
        }
    }
    rec->src = p->src;
    rec->len = p->len;
    rec->data = p->b;
}

/* What the reference switch sent for the last record: JOIN_ACKs make jobs
 * active (their id, session, token, k, W), ABORT and NAKs end them. */
static inline void gen_observe(struct gen *g, const uint8_t *b, size_t len)
{
    struct ina_hdr h;
    if (ina__hdr_decode(b, len, &h) != INA_PARSE_OK)
        return;
    if (h.kind == INA_K_JOIN_ACK && len >= INA_HDR_LEN + INA_JOIN_BODY_LEN) {
        struct ina_join jb;
        if (ina__join_decode(b + INA_HDR_LEN, len - INA_HDR_LEN, &jb) != 0)
            return;
        for (int i = 0; i < GEN_JOBS; i++) {
            struct gen_job *j = &g->jobs[i];
            for (int r = 0; j->used && !j->dead && r < j->world; r++)
                if (j->nonce[r] == jb.nonce && !j->active) {
                    j->active = 1;
                    j->id = h.job;
                    j->session = h.session;
                    j->token = h.token;
                    j->k = jb.elems;
                    j->W = (int)(jb.window < GEN_MAX_W ? jb.window : GEN_MAX_W);
                    for (int s = 0; s < GEN_MAX_W; s++) {
                        j->seq[s] = 0;
                        j->sent[s] = 0;
                    }
                }
        }
    } else if (h.kind == INA_K_ABORT || h.kind == INA_K_JOIN_NAK) {
        for (int i = 0; i < GEN_JOBS; i++) {
            struct gen_job *j = &g->jobs[i];
            if (j->used && (h.kind == INA_K_JOIN_NAK ? !j->active
                                                     : j->active && j->session == h.session))
                j->dead = 1;
        }
    }
    /* A MIGRATE (an evicted job): its ranks go on sending for a while, as
     * ranks that have not heard yet, and are refused past the bound
     * (EVICTED), until they move on (gen_next). */
    if (h.kind == INA_K_MIGRATE)
        for (int i = 0; i < GEN_JOBS; i++)
            if (g->jobs[i].used && g->jobs[i].active && g->jobs[i].session == h.session)
                g->jobs[i].evicted = 1;
}

#endif
