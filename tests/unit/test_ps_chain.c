/* test_ps_chain.c: chain replication between two ina-ps (PROTOCOL.md §15.8): a replica fed only
 * by the primary's forwards, over a link that loses, duplicates and reorders them, is
 * bit-identical to the primary; a worker hears an outcome only once the replica has the stamp;
 * forged forwards and acks are dropped with counters; the deadline; failover to the replica. */
#include <arpa/inet.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ps/chain.h"
#include "common/addr.h"
#include "common/log.h"
#include "ps/ps.h"
#include "check.h"
#include "rng.h"

#define DIM 4
#define NKEYS 16
#define WORLD 4
#define MS 1000000ull

#include "ps_stale_fixture.h"

static struct sockaddr_in rank_addr[WORLD], paddr, raddr;

static void join_all(struct ina_ps *ps, const char *name)
{
    send_joins(ps, rank_addr, name, INA_PS_MODE_STALE, 2, 2, INA_OPTIM_ADAGRAD);
    CHECK(ps->jobs[0].state == INA_PS_ACTIVE);
    ina__ps_tx_reset(ps);
}

/* ---- A simulated network between the primary P, the replica R and the workers ---------- */

static struct ina_ps P, R, witness;
static struct ina_ps_chain pch, rch;
static uint64_t now;
static int p_dead;
static double f_drop, f_dup, f_delay, f_wdrop; /* P<->R faults; P's answers to workers lost */

struct pkt {
    int to_p; /* 1: to P (from R), 0: to R (from P) */
    uint64_t at;
    size_t len;
    uint8_t *buf;
};
#define NET_MAX 4096
static struct pkt net[NET_MAX];
static int nnet;

/* The workers: one update outstanding each, resent until its outcome comes. */
enum { T = 600 };
static struct upd stream[T];
static int32_t outcome[T]; /* status the worker heard for stamp i (INT32_MIN: none yet) */
static uint32_t stamp_of_rank[WORLD], busy[WORLD];
static uint64_t sent_at[WORLD];
static int early_answers, answers, held_answers;
static uint64_t last_retx, last_dups;

static double unif(void) { return (double)(rng_u64() >> 11) / 9007199254740992.0; }

static void net_add(int to_p, const uint8_t *b, size_t len)
{
    if (unif() < f_drop)
        return;
    for (int copy = 0; copy < (unif() < f_dup ? 2 : 1) && nnet < NET_MAX; copy++) {
        struct pkt *k = &net[nnet++];
        k->to_p = to_p;
        k->at = now + MS + (unif() < f_delay ? (rng_u64() % 8) * MS : 0);
        k->len = len;
        k->buf = malloc(len);
        memcpy(k->buf, b, len);
    }
}

/* A worker hears an UPDATE_ACK from server s (P or R). */
static void worker_rx(const struct ina_ps *s, const uint8_t *b, size_t len,
                      const struct sockaddr_in *dst)
{
    struct ina_hdr h;
    if (ina__hdr_decode(b, len, &h) != INA_PARSE_OK || h.kind != INA_K_PS_UPDATE_ACK)
        return;
    CHECK_EQ_INT(len, INA_HDR_LEN + INA_PS_UPDATE_ACK_LEN);
    int r = -1;
    for (int i = 0; i < WORLD; i++)
        if (ina__addr_eq(dst, &rank_addr[i]))
            r = i;
    CHECK(r >= 0);
    int32_t st = (int32_t)ina__get32(b + INA_HDR_LEN);
    uint32_t g = ina__get32(b + INA_HDR_LEN + 12);
    if (st == INA_PS_UPDATE_HELD) {
        held_answers++;
        return;
    }
    /* The chain's promise: the primary tells a worker the outcome only once the replica has
     * taken the stamp (until the chain breaks). */
    if (s == &P && !pch.jobs[0].broken && (int32_t)(R.jobs[0].next_stamp - g) <= 0)
        early_answers++;
    if (s == &P && unif() < f_wdrop)
        return; /* lost: the worker resends, and hears the stored answer */
    if (!busy[r] || g != stamp_of_rank[r] || h.slot != stream[g].uid)
        return; /* an answer to a copy, already heard */
    outcome[g] = st;
    busy[r] = 0;
    answers++;
}

/* Move what ps queued: to the other server through the faulty link, or to the workers. */
static void drain(struct ina_ps *ps)
{
    for (unsigned i = 0; i < ps->tx.n; i++) {
        const uint8_t *b = ps->tx.iov[i].iov_base;
        size_t len = ps->tx.iov[i].iov_len;
        const struct sockaddr_in *d = &ps->tx.dst[i];
        if (ps == &P && ina__addr_eq(d, &raddr))
            net_add(0, b, len);
        else if (ps == &R && ina__addr_eq(d, &paddr))
            net_add(1, b, len);
        else
            worker_rx(ps, b, len, d);
    }
    ina__ps_tx_reset(ps);
}

static void deliver_due(void)
{
    int k = 0;
    for (int i = 0; i < nnet; i++) {
        struct pkt *p = &net[i];
        if (p->at > now) {
            net[k++] = *p;
            continue;
        }
        if (!(p->to_p && p_dead)) {
            struct ina_ps *to = p->to_p ? &P : &R;
            ina__ps_input(to, p->buf, p->len, p->to_p ? &raddr : &paddr, now);
            drain(to);
        }
        free(p->buf);
    }
    nnet = k;
}

static void worker_send(int r)
{
    uint8_t b[4096];
    struct ina_ps *s = p_dead ? &R : &P;
    size_t n = encode_update(s, &stream[stamp_of_rank[r]], b, INA_K_PS_UPDATE);
    ina__ps_input(s, b, n, &rank_addr[r], now);
    drain(s);
    sent_at[r] = now;
}

/*
 * T stamped updates from WORLD workers, one outstanding each, to a primary with chain
 * forwarding over a link with the given faults. fail_at >= 0: the primary dies once that many
 * stamps were issued; the workers resend what is unanswered to the replica and go on there.
 * @return the number of comparisons of P and R at equal stamps (every one must match).
 */
static int run_chain(double drop, double dup, double delay, double wdrop, int fail_at)
{
    new_ps(&P);
    new_ps(&R);
    new_ps(&witness);
    join_all(&P, "chain");
    join_all(&R, "chain");
    join_all(&witness, "chain");
    CHECK_EQ_INT(ina__ps_chain_init(&pch, &P, &raddr, NULL, 5000 * MS), 0);
    CHECK_EQ_INT(ina__ps_chain_init(&rch, &R, NULL, &paddr, 5000 * MS), 0);
    f_drop = drop, f_dup = dup, f_delay = delay, f_wdrop = wdrop;
    p_dead = 0;
    nnet = 0;
    now = 1000 * MS;
    early_answers = answers = held_answers = 0;
    memset(busy, 0, sizeof(busy));
    uint32_t uid[WORLD] = {0};
    int issued = 0, compared = 0, mismatches = 0;
    for (int i = 0; i < T; i++)
        outcome[i] = INT32_MIN;
    for (int round = 0; round < 200000 && answers < T; round++) {
        now += MS;
        if (!p_dead) {
            ina__ps_chain_tick(&P, now);
            drain(&P);
        }
        deliver_due();
        if (fail_at >= 0 && issued >= fail_at && !p_dead) {
            p_dead = 1; /* from now on the workers talk to the replica alone */
            for (int r = 0; r < WORLD; r++)
                sent_at[r] = 0;
        }
        for (int r = 0; r < WORLD; r++) {
            if (busy[r]) {
                if (now - sent_at[r] >= 20 * MS)
                    worker_send(r); /* a copy: HELD or the stored answer */
                continue;
            }
            if (issued == T || rng_u64() % 3)
                continue;
            struct upd *u = &stream[issued];
            u->rank = r;
            u->uid = ++uid[r];
            u->stamp = (uint32_t)issued;
            uint32_t v = (p_dead ? &R : &P)->jobs[0].applied, lag = (uint32_t)(rng_u64() % 4);
            u->base = lag > v ? 0 : v - lag;
            random_update(u);
            stamp_of_rank[r] = (uint32_t)issued++;
            busy[r] = 1;
            worker_send(r);
        }
        if (!p_dead && P.jobs[0].next_stamp == R.jobs[0].next_stamp) {
            compared++;
            mismatches += !same_model(&P, &R);
        }
    }
    CHECK_EQ_INT(answers, T);
    CHECK_EQ_INT(mismatches, 0);
    CHECK_EQ_INT(early_answers, 0);
    /* The witness takes the whole stream in order without a failure: what every server
     * that took these stamps must hold, and the outcomes the workers heard. */
    int wrong = 0;
    for (int i = 0; i < T; i++) {
        uint8_t b[4096];
        size_t n = encode_update(&witness, &stream[i], b, INA_K_PS_UPDATE);
        ina__ps_input(&witness, b, n, &rank_addr[stream[i].rank], now);
        wrong += witness.jobs[0].last[stream[i].rank].status != outcome[i];
        ina__ps_tx_reset(&witness);
    }
    CHECK_EQ_INT(wrong, 0);
    CHECK(same_model(&R, &witness));
    if (fail_at < 0)
        CHECK(same_model(&P, &R));
    CHECK(witness.c.updates_stale > 0 && witness.c.updates_applied > 0);
    CHECK_EQ_INT(R.c.updates_applied, witness.c.updates_applied);
    CHECK(memcmp(R.c.delay_hist, witness.c.delay_hist, sizeof(R.c.delay_hist)) == 0);
    CHECK_EQ_INT(P.c.chain_mismatch + R.c.chain_mismatch, 0);
    CHECK_EQ_INT(P.c.chain_broken, 0);
    CHECK_EQ_INT(R.c.delay_violations + P.c.delay_violations, 0);
    if (fail_at < 0) {
        CHECK_EQ_INT(P.c.chain_forwarded, T);
        CHECK_EQ_INT(P.c.chain_released, T);
        CHECK(R.c.chain_fwd_received >= T); /* copies, resends: answered, not taken again */
        CHECK(held_answers >= T); /* every first answer was HELD */
    }
    last_retx = P.c.chain_fwd_retransmits;
    last_dups = R.c.update_dups;
    for (int i = 0; i < nnet; i++)
        free(net[i].buf);
    nnet = 0;
    ina__ps_chain_free(&P);
    ina__ps_chain_free(&R);
    ina__ps_free(&P);
    ina__ps_free(&R);
    ina__ps_free(&witness);
    return compared;
}

/* ---- Forgeries --------------------------------------------------------------------------- */

static size_t forward_of(const struct upd *u, const struct ina_ps_job *pj, const char *name,
                         uint8_t *b)
{
    uint8_t ub[4096];
    size_t n = encode_update(&P, u, ub, INA_K_PS_CHAIN_FWD);
    memcpy(b, ub, INA_HDR_LEN);
    (void)pj;
    memset(b + INA_HDR_LEN, 0, INA_PS_CHAIN_FWD_PREFIX);
    memcpy(b + INA_HDR_LEN, name, strlen(name));
    memcpy(b + INA_HDR_LEN + INA_PS_CHAIN_FWD_PREFIX, ub + INA_HDR_LEN, n - INA_HDR_LEN);
    return n + INA_PS_CHAIN_FWD_PREFIX;
}

static size_t ack_of(const struct ina_ps_job *pj, uint32_t uid, int32_t status, uint32_t version,
                     uint32_t stamp, uint32_t next, uint8_t *b)
{
    struct ina_hdr h;
    ina__hdr_init(&h, INA_K_PS_CHAIN_ACK);
    h.job = pj->id;
    h.session = pj->session;
    h.token = pj->token;
    h.rank = INA_RANK_SWITCH;
    h.slot = uid;
    h.seq = version;
    ina__hdr_encode(b, &h);
    ina__put32(b + INA_HDR_LEN, (uint32_t)status);
    ina__put32(b + INA_HDR_LEN + 4, version);
    ina__put32(b + INA_HDR_LEN + 8, 0);
    ina__put32(b + INA_HDR_LEN + 12, stamp);
    ina__put32(b + INA_HDR_LEN + 16, next);
    return INA_HDR_LEN + INA_PS_CHAIN_ACK_LEN;
}

static void test_forgeries(void)
{
    new_ps(&P);
    new_ps(&R);
    new_ps(&witness);
    join_all(&P, "chain");
    join_all(&R, "chain");
    join_all(&witness, "chain"); /* no chain: kinds 55, 56 are unknown there */
    CHECK_EQ_INT(ina__ps_chain_init(&pch, &P, &raddr, NULL, 500 * MS), 0);
    CHECK_EQ_INT(ina__ps_chain_init(&rch, &R, NULL, &paddr, 500 * MS), 0);
    now = 1000 * MS;
    rng_state = 5;
    struct upd u = {.rank = 1, .uid = 1, .base = 0, .stamp = 0};
    random_update(&u);
    const struct ina_ps_job *pj = &P.jobs[0];
    uint8_t b[4096];
    size_t n = forward_of(&u, pj, "chain", b);
    struct sockaddr_in wrong_port = mkaddr(0x0A000001, 5001), stranger = mkaddr(0x0A000009, 5000);
    ina__ps_input(&R, b, n, &wrong_port, now);
    ina__ps_input(&R, b, n, &stranger, now);
    ina__ps_input(&R, b, n, &rank_addr[1], now);
    CHECK_EQ_INT(R.c.drops[INA_PS_DROP_CHAIN_SOURCE], 3);
    size_t m = forward_of(&u, pj, "nojob", b);
    ina__ps_input(&R, b, m, &paddr, now);
    CHECK_EQ_INT(R.c.drops[INA_PS_DROP_CHAIN_JOB], 1);
    n = forward_of(&u, pj, "chain", b);
    b[INA_HDR_LEN + 31] = 'x'; /* the name without its NUL */
    memset(b + INA_HDR_LEN, 'x', INA_PS_CHAIN_FWD_PREFIX);
    ina__ps_input(&R, b, n, &paddr, now);
    CHECK_EQ_INT(R.c.drops[INA_PS_DROP_CHAIN_JOB], 2);
    n = forward_of(&u, pj, "chain", b);
    ina__put16(b + 6, WORLD); /* a rank outside the job */
    ina__ps_input(&R, b, n, &paddr, now);
    CHECK_EQ_INT(R.c.drops[INA_PS_DROP_CHAIN_JOB], 3);
    n = forward_of(&u, pj, "chain", b);
    ina__ps_input(&R, b, n - 1, &paddr, now); /* one byte short */
    ina__ps_input(&R, b, INA_HDR_LEN + INA_PS_CHAIN_FWD_PREFIX + 4, &paddr, now);
    ina__put16(b + 24, NKEYS / 2 + 1); /* count disagrees */
    ina__ps_input(&R, b, n, &paddr, now);
    CHECK_EQ_INT(R.c.drops[INA_PS_DROP_CHAIN_LENGTH], 3);
    CHECK_EQ_INT(R.jobs[0].applied + R.jobs[0].next_stamp + R.c.chain_fwd_received, 0);
    CHECK(same_model(&R, &witness));
    /* A well-formed forward is taken (and pins the primary's session); one of another
     * primary session is then dropped. */
    n = forward_of(&u, pj, "chain", b);
    ina__ps_input(&R, b, n, &paddr, now);
    CHECK_EQ_INT(R.c.chain_fwd_received, 1);
    CHECK_EQ_INT(R.jobs[0].next_stamp, 1);
    CHECK_EQ_INT(R.c.chain_acks_sent, 1);
    CHECK(R.tx.n == 1 && ina__addr_eq(&R.tx.dst[0], &paddr)); /* the CHAIN_ACK, no UPDATE_ACK */
    ina__ps_tx_reset(&R);
    struct upd u2 = u;
    u2.rank = 2;
    u2.stamp = 1;
    n = forward_of(&u2, pj, "chain", b);
    ina__put32(b + 8, pj->session + 1);
    ina__ps_input(&R, b, n, &paddr, now);
    CHECK_EQ_INT(R.c.drops[INA_PS_DROP_CHAIN_JOB], 4);
    CHECK_EQ_INT(R.jobs[0].next_stamp, 1);
    /* Kinds 55 and 56 at an ina-ps without chain replication: KIND. */
    ina__ps_input(&witness, b, n, &paddr, now);
    CHECK_EQ_INT(witness.c.drops[INA_PS_DROP_KIND], 1);
    /* At the primary: one real update, forwarded and waiting; forged acks change nothing. */
    n = encode_update(&P, &u, b, INA_K_PS_UPDATE);
    ina__ps_input(&P, b, n, &rank_addr[1], now);
    CHECK_EQ_INT(P.c.chain_forwarded, 1);
    CHECK_EQ_INT(P.c.chain_held_answers, 1);
    ina__ps_tx_reset(&P);
    int32_t st = P.jobs[0].last[1].status;
    uint32_t v = P.jobs[0].last[1].version;
    n = ack_of(pj, 1, st, v, 0, 1, b);
    ina__ps_input(&P, b, n, &paddr, now); /* from the primary's own address */
    ina__ps_input(&P, b, n, &wrong_port, now);
    CHECK_EQ_INT(P.c.drops[INA_PS_DROP_CHAIN_SOURCE], 2);
    ina__ps_input(&P, b, n - 1, &raddr, now);
    CHECK_EQ_INT(P.c.drops[INA_PS_DROP_CHAIN_LENGTH], 1);
    ina__put32(b + 12, pj->token ^ 1); /* a wrong token */
    ina__ps_input(&P, b, n, &raddr, now);
    n = ack_of(pj, 1, st, v, 5, 6, b); /* a stamp never forwarded */
    ina__ps_input(&P, b, n, &raddr, now);
    n = ack_of(pj, 1, st, v, 0, 0, b); /* next stamp not past the stamp */
    ina__ps_input(&P, b, n, &raddr, now);
    n = ack_of(pj, 7, st, v, 0, 1, b); /* another update id */
    ina__ps_input(&P, b, n, &raddr, now);
    CHECK_EQ_INT(P.c.drops[INA_PS_DROP_CHAIN_ACK], 4);
    CHECK_EQ_INT(P.c.chain_released + P.c.chain_acks, 0);
    CHECK_EQ_INT(P.tx.n, 0);
    /* A copy of the worker's update while the forward waits: HELD again. */
    n = encode_update(&P, &u, b, INA_K_PS_UPDATE);
    ina__ps_input(&P, b, n, &rank_addr[1], now);
    CHECK_EQ_INT(P.c.chain_held_answers, 2);
    ina__ps_tx_reset(&P);
    /* The true ack releases the worker's answer; its copy is a duplicate. */
    n = ack_of(pj, 1, st, v, 0, 1, b);
    ina__ps_input(&P, b, n, &raddr, now);
    CHECK_EQ_INT(P.c.chain_acks, 1);
    CHECK_EQ_INT(P.c.chain_released, 1);
    CHECK(P.tx.n == 1 && ina__addr_eq(&P.tx.dst[0], &rank_addr[1]) &&
          (int32_t)ina__get32((const uint8_t *)P.tx.iov[0].iov_base + INA_HDR_LEN) == st);
    ina__ps_tx_reset(&P);
    ina__ps_input(&P, b, n, &raddr, now);
    CHECK_EQ_INT(P.c.chain_ack_dups, 1);
    CHECK_EQ_INT(P.tx.n, 0);
    CHECK(same_model(&P, &R));
    ina__ps_chain_free(&P);
    ina__ps_chain_free(&R);
    ina__ps_free(&P);
    ina__ps_free(&R);
    ina__ps_free(&witness);
}

/* A replica that never answers: after the deadline the primary answers alone. */
static void test_deadline(void)
{
    new_ps(&P);
    join_all(&P, "chain");
    CHECK_EQ_INT(ina__ps_chain_init(&pch, &P, &raddr, NULL, 300 * MS), 0);
    now = 1000 * MS;
    ina__ps_chain_tick(&P, now);
    rng_state = 6;
    struct upd u = {.rank = 0, .uid = 1, .base = 0, .stamp = 0};
    random_update(&u);
    uint8_t b[4096];
    size_t n = encode_update(&P, &u, b, INA_K_PS_UPDATE);
    ina__ps_input(&P, b, n, &rank_addr[0], now);
    ina__ps_tx_reset(&P);
    int resent = 0;
    for (int i = 0; i < 290; i++) { /* resends, backing off; no answer to the worker yet */
        now += MS;
        ina__ps_chain_tick(&P, now);
        for (unsigned k = 0; k < P.tx.n; k++)
            resent += ina__addr_eq(&P.tx.dst[k], &raddr);
        CHECK_EQ_INT(P.c.chain_released, 0);
        ina__ps_tx_reset(&P);
    }
    CHECK(resent >= 1 && resent <= 6);
    CHECK_EQ_INT(P.c.chain_fwd_retransmits, (uint64_t)resent);
    now += 20 * MS;
    ina__ps_chain_tick(&P, now);
    CHECK_EQ_INT(P.c.chain_broken, 1);
    CHECK_EQ_INT(P.c.chain_released, 1);
    CHECK(P.tx.n == 1 && ina__addr_eq(&P.tx.dst[0], &rank_addr[0]));
    ina__ps_tx_reset(&P);
    u.uid = 2;
    u.stamp = 1;
    u.base = 1;
    n = encode_update(&P, &u, b, INA_K_PS_UPDATE);
    ina__ps_input(&P, b, n, &rank_addr[0], now); /* answered at once, not forwarded */
    CHECK_EQ_INT(P.c.chain_unforwarded, 1);
    CHECK(P.tx.n == 1 && (int32_t)ina__get32((const uint8_t *)P.tx.iov[0].iov_base +
                                            INA_HDR_LEN) == 0);
    ina__ps_tx_reset(&P);
    ina__ps_chain_free(&P);
    ina__ps_free(&P);
}

int main(void)
{
    for (int r = 0; r < WORLD; r++)
        rank_addr[r] = mkaddr(0x7f000001, (uint16_t)(40000 + r));
    paddr = mkaddr(0x0A000001, 5000);
    raddr = mkaddr(0x0A000002, 5000);
    ina__log_setup(INA_LOG_ERROR, INA_LOG_TEXT);
    rng_state = 42;
    CHECK(run_chain(0, 0, 0, 0, -1) > T / 4); /* a clean link */
    CHECK_EQ_INT(last_retx, 0);
    rng_state = 43;
    CHECK(run_chain(0.2, 0.1, 0.3, 0.1, -1) > 50); /* lost, duplicated, reordered */
    CHECK(last_retx > 0 && last_dups > 0); /* resent, and copies reached the replica */
    rng_state = 44;
    run_chain(0.1, 0.1, 0.3, 0.05, T / 2); /* the primary dies halfway */
    test_forgeries();
    test_deadline();
    return check_report("test_ps_chain");
}
