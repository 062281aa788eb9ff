/* test_sched.c: ina-sched's engine: the delay bound over a simulated server, shortest-finish-first
 * with learned rates, stragglers, copies, expiry, and every bad input counted. */
#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "sched/sched.h"
#include "check.h"
#include "rng.h"

#define MS 1000000ull

static struct sockaddr_in addr_of(int r)
{
    struct sockaddr_in a;
    memset(&a, 0, sizeof(a));
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(0x7f000001);
    a.sin_port = htons((uint16_t)(41000 + r));
    return a;
}

static void new_sched(struct ina_sched *s, unsigned world, unsigned D, unsigned window)
{
    struct ina_sched_params p = {.world = world, .max_delay = D, .window = window,
                                 .grant_timeout_ns = 1000000000ull, .straggler_ratio = 0.6,
                                 .initial_rate = 1e6};
    snprintf(p.job, sizeof(p.job), "mlf");
    CHECK_EQ_INT(ina__sched_init(s, &p), 0);
}

static void req_flags(struct ina_sched *s, int r, uint32_t uid, uint32_t base, uint32_t bytes,
                      uint32_t flags, const char *name, uint64_t now)
{
    uint8_t b[INA_HDR_LEN + INA_SCHED_REQ_LEN];
    struct ina_hdr h;
    ina__hdr_init(&h, INA_K_SCHED_REQ);
    h.rank = (uint16_t)r;
    h.slot = uid;
    h.seq = base;
    ina__hdr_encode(b, &h);
    memset(b + INA_HDR_LEN, 0, INA_SCHED_REQ_LEN);
    ina__put32(b + INA_HDR_LEN, bytes);
    ina__put32(b + INA_HDR_LEN + 4, flags);
    snprintf((char *)b + INA_HDR_LEN + 8, 32, "%s", name);
    struct sockaddr_in a = addr_of(r);
    ina__sched_input(s, b, sizeof(b), &a, now);
}

static void req(struct ina_sched *s, int r, uint32_t uid, uint32_t base, uint32_t bytes,
                const char *name, uint64_t now)
{
    req_flags(s, r, uid, base, bytes, 0, name, now);
}

static void done(struct ina_sched *s, int r, uint32_t uid, uint32_t stamp, int32_t status,
                 uint32_t bytes, uint32_t usec, uint32_t version, uint64_t now)
{
    uint8_t b[INA_HDR_LEN + INA_SCHED_DONE_LEN];
    struct ina_hdr h;
    ina__hdr_init(&h, INA_K_SCHED_DONE);
    h.rank = (uint16_t)r;
    h.slot = uid;
    h.seq = stamp;
    ina__hdr_encode(b, &h);
    ina__put32(b + INA_HDR_LEN, (uint32_t)status);
    ina__put32(b + INA_HDR_LEN + 4, bytes);
    ina__put32(b + INA_HDR_LEN + 8, usec);
    ina__put32(b + INA_HDR_LEN + 12, version);
    struct sockaddr_in a = addr_of(r);
    ina__sched_input(s, b, sizeof(b), &a, now);
}

struct answer {
    int rank;
    uint32_t uid, stamp;
    int32_t status;
    uint32_t group_size, group_index;
};

/* The GRANTs queued, in order, decoded; the queue is emptied. */
static int answers(struct ina_sched *s, struct answer *out, int cap)
{
    int n = 0;
    for (unsigned i = 0; i < s->tx.n && n < cap; i++) {
        struct ina_hdr h = {0};
        CHECK(ina__hdr_decode(s->tx.buf[i], s->tx.len[i], &h) == INA_PARSE_OK &&
              h.kind == INA_K_SCHED_GRANT);
        out[n].rank = ntohs(s->tx.dst[i].sin_port) - 41000;
        out[n].uid = h.slot;
        out[n].status = (int32_t)ina__get32(s->tx.buf[i] + INA_HDR_LEN);
        out[n].stamp = ina__get32(s->tx.buf[i] + INA_HDR_LEN + 4);
        out[n].group_size = ina__get32(s->tx.buf[i] + INA_HDR_LEN + 16);
        out[n].group_index = ina__get32(s->tx.buf[i] + INA_HDR_LEN + 20);
        n++;
    }
    ina__sched_tx_reset(s);
    return n;
}

/*
 * Workers pull a version, compute, ask; granted updates reach a simulated
 * server that applies stamps in order and refuses delay > D, as ina-ps does.
 * No granted update may be refused there, and the scheduler refuses only what
 * the server would.
 */
static void test_bound(unsigned D, unsigned window)
{
    enum { W = 8, STEPS = 4000 };
    static struct ina_sched s;
    new_sched(&s, W, D, window);
    rng_state = 5 + D * 31 + window;
    uint32_t server_v = 0, next_apply = 0, uid[W] = {0}, base[W];
    int state[W] = {0}; /* 0 idle, 1 asked, 2 granted (sending) */
    uint32_t stamp_of[W];
    int refused_at_server = 0, wrong_refusals = 0, applied = 0;
    uint64_t now = 1;
    for (int step = 0; step < STEPS; step++) {
        now += 1000;
        int r = (int)(rng_u64() % W);
        if (state[r] == 0) { /* pull (maybe an old copy), then ask */
            uint32_t lag = (uint32_t)(rng_u64() % (D + 2));
            base[r] = lag > server_v ? 0 : server_v - lag;
            uid[r]++;
            state[r] = 1;
            req(&s, r, uid[r], base[r], 1000 + (uint32_t)(rng_u64() % 9000), "mlf", now);
        } else if (state[r] == 2 && stamp_of[r] == next_apply) { /* its turn at the server */
            int ok = server_v - base[r] <= D;
            refused_at_server += !ok;
            server_v += ok;
            applied += ok;
            next_apply++;
            state[r] = 0;
            done(&s, r, uid[r], stamp_of[r], ok ? 0 : INA_ERR_STALE, 1000,
                 100 + (uint32_t)(rng_u64() % 1000), server_v, now);
        }
        struct answer a[64];
        int n = answers(&s, a, 64);
        for (int i = 0; i < n; i++) {
            int q = a[i].rank;
            CHECK(q >= 0 && q < W && state[q] == 1 && a[i].uid == uid[q]);
            if (a[i].status == 0) {
                state[q] = 2;
                stamp_of[q] = a[i].stamp;
            } else {
                wrong_refusals += server_v - base[q] <= D; /* the server would have taken it */
                state[q] = 0;
            }
        }
    }
    CHECK_EQ_INT(refused_at_server, 0);
    CHECK_EQ_INT(wrong_refusals, 0);
    CHECK_EQ_INT(s.c.bound_violations, 0);
    printf("D %u window %u: %d applied, %llu refused by the scheduler, 0 by the server\n", D,
           window, applied, (unsigned long long)s.c.refused_stale);
    CHECK(applied > STEPS / 20);
    CHECK(s.c.refused_stale > 0);
    CHECK_EQ_INT(s.c.done_applied, (uint64_t)applied);
}

/*
 * Fetch requests (base at grant): workers ask before they pull, pull some time
 * after the grant, then send. The scheduler refuses none, the server refuses
 * none, and at most min(D + 1, window) iterations are in flight at once.
 */
static void test_fetch_bound(unsigned D, unsigned window)
{
    enum { W = 8, STEPS = 4000 };
    static struct ina_sched s;
    new_sched(&s, W, D, window);
    rng_state = 77 + D * 13 + window;
    uint32_t server_v = 0, next_apply = 0, uid[W] = {0}, base[W], stamp_of[W];
    int state[W] = {0}; /* 0 idle, 1 asked, 2 granted (not pulled), 3 pulled (sending) */
    int refused_at_server = 0, applied = 0, in_flight = 0, most = 0;
    uint64_t now = 1;
    for (int step = 0; step < STEPS; step++) {
        now += 1000;
        int r = (int)(rng_u64() % W);
        if (state[r] == 0) {
            uid[r]++;
            state[r] = 1;
            req(&s, r, uid[r], INA_SCHED_BASE_AT_GRANT, 1000 + (uint32_t)(rng_u64() % 9000),
                "mlf", now);
        } else if (state[r] == 2) { /* the pull, some time after the grant */
            base[r] = server_v;
            state[r] = 3;
        } else if (state[r] == 3 && stamp_of[r] == next_apply) {
            int ok = server_v - base[r] <= D;
            refused_at_server += !ok;
            server_v += ok;
            applied += ok;
            next_apply++;
            state[r] = 0;
            in_flight--;
            done(&s, r, uid[r], stamp_of[r], ok ? 0 : INA_ERR_STALE, 1000,
                 100 + (uint32_t)(rng_u64() % 1000), server_v, now);
        }
        struct answer a[64];
        int n = answers(&s, a, 64);
        for (int i = 0; i < n; i++) {
            int q = a[i].rank;
            CHECK(q >= 0 && q < W && state[q] == 1 && a[i].uid == uid[q] && a[i].status == 0);
            state[q] = 2;
            stamp_of[q] = a[i].stamp;
            if (++in_flight > most)
                most = in_flight;
        }
    }
    unsigned cap = D + 1 < window ? D + 1 : window;
    CHECK_EQ_INT(refused_at_server, 0);
    CHECK_EQ_INT(s.c.refused_stale, 0);
    CHECK_EQ_INT(s.c.bound_violations, 0);
    CHECK_EQ_INT(s.c.fetch_requests, s.c.requests);
    CHECK(most >= 1 && (unsigned)most <= cap);
    CHECK(applied > STEPS / 20);
    CHECK_EQ_INT(s.c.done_applied, (uint64_t)applied);
    printf("fetch, D %u window %u: %d applied, at most %d in flight (cap %u), none refused\n", D,
           window, applied, most, cap);
}

/*
 * Opportunistic aggregation (§15.7): fetch requests that wait together are
 * granted as groups of at most K members sharing one stamp. Each group is
 * one update at the simulated server, applied at its members' smallest base.
 * No group is refused there, at most min(D + 1, window) groups are in flight
 * (a group counts once), the members' DONEs change neither O nor A, and a
 * group whose sum failed (its leader sends alone) changes nothing either.
 */
static void test_groups(unsigned D, unsigned window, unsigned K)
{
    enum { W = 8, STEPS = 6000 };
    static struct ina_sched s;
    new_sched(&s, W, D, window);
    s.p.aggregate = K;
    rng_state = 991 + D * 7 + K;
    uint32_t server_v = 0, next_apply = 0, uid[W] = {0}, base[W], stamp_of[W], size_of[W],
             index_of[W];
    int state[W] = {0}; /* 0 idle, 1 asked, 2 granted, 3 pulled and computed */
    int refused_at_server = 0, applied = 0, groups = 0, most = 0, biggest = 0, failed = 0;
    uint64_t now = 1;
    for (int step = 0; step < STEPS; step++) {
        now += 1000;
        int r = (int)(rng_u64() % W);
        if (state[r] == 0) {
            uid[r]++;
            state[r] = 1;
            req_flags(&s, r, uid[r], INA_SCHED_BASE_AT_GRANT, 5000, INA_SCHED_REQ_AGGREGATE,
                      "mlf", now);
        } else if (state[r] == 2) {
            base[r] = server_v;
            state[r] = 3;
        } else if (state[r] == 3 && stamp_of[r] == next_apply) {
            /* The group's turn once every member has computed: the switch sums, the leader
             * sends the sum with the smallest base (or, 1 time in 10, alone: the sum failed). */
            int members[W], n = 0, ready = 1;
            uint32_t min_base = base[r];
            for (int q = 0; q < W; q++) {
                if (state[q] < 2 || stamp_of[q] != stamp_of[r])
                    continue;
                members[n++] = q;
                ready &= state[q] == 3;
                if (base[q] < min_base)
                    min_base = base[q];
            }
            if (!ready)
                continue;
            CHECK_EQ_INT((uint32_t)n, size_of[r]);
            int fail = rng_u64() % 10 == 0, leader = -1;
            for (int i = 0; i < n; i++)
                if (index_of[members[i]] == 0)
                    leader = members[i];
            CHECK(leader >= 0);
            if (leader < 0)
                break;
            uint32_t b = fail ? base[leader] : min_base;
            int ok = server_v - b <= D;
            refused_at_server += !ok;
            server_v += ok;
            applied += ok;
            next_apply++;
            groups += n > 1;
            failed += fail && n > 1;
            for (int i = 0; i < n; i++) {
                int q = members[i];
                state[q] = 0;
                if (q == leader)
                    done(&s, q, uid[q], stamp_of[q], ok ? 0 : INA_ERR_STALE, 5000, 500, server_v,
                         now);
                else
                    done(&s, q, uid[q], stamp_of[q], fail ? INA_ERR_TIMEOUT : INA_SCHED_DONE_MEMBER,
                         5000, 500, server_v, now);
            }
        }
        struct answer a[64];
        int n = answers(&s, a, 64);
        for (int i = 0; i < n; i++) {
            int q = a[i].rank;
            CHECK(q >= 0 && q < W && state[q] == 1 && a[i].uid == uid[q] && a[i].status == 0);
            CHECK(a[i].group_size >= 1 && a[i].group_size <= K &&
                  a[i].group_index < a[i].group_size);
            /* The members of a group come together, with one stamp and indexes 0..n-1. */
            CHECK(a[i].stamp == a[i - a[i].group_index].stamp || i < (int)a[i].group_index);
            state[q] = 2;
            stamp_of[q] = a[i].stamp;
            size_of[q] = a[i].group_size;
            index_of[q] = a[i].group_index;
            if ((int)a[i].group_size > biggest)
                biggest = (int)a[i].group_size;
        }
        int in_flight = 0;
        for (int q = 0; q < W; q++)
            in_flight += state[q] >= 2 && index_of[q] == 0;
        if (in_flight > most)
            most = in_flight;
    }
    unsigned cap = D + 1 < window ? D + 1 : window;
    CHECK_EQ_INT(refused_at_server, 0);
    CHECK_EQ_INT(s.c.refused_stale, 0);
    CHECK_EQ_INT(s.c.bound_violations, 0);
    CHECK(most >= 1 && (unsigned)most <= cap);
    CHECK(groups > 0 && biggest > 1 && (unsigned)biggest <= K);
    CHECK_EQ_INT(s.c.done_applied, (uint64_t)applied);
    uint64_t members_open = 0; /* members of the groups still in flight at the end */
    for (int q = 0; q < W; q++)
        members_open += state[q] >= 2 && index_of[q] > 0;
    CHECK_EQ_INT(s.c.member_dones + members_open, s.c.group_members - s.c.groups);
    CHECK(s.c.member_failed > 0 && failed > 0);
    CHECK(s.outstanding <= cap);
    printf("groups, D %u window %u K %u: %d versions, %d groups (largest %d, %llu members), "
           "at most %d in flight (cap %u), none refused\n",
           D, window, K, applied, groups, biggest, (unsigned long long)s.c.group_members, most,
           cap);
}

/*
 * Holding a group for one more member (--agg-hold-ms): every rank's rate learned as
 * 5000 B in 4 ms (P = 4 ms). Rank 1 is granted alone at t0; rank 0 asks at t0 + 3 ms, when
 * rank 1 is predicted to ask again within 1 ms: 1 ms x 1 member < 4 ms, so rank 0 is held
 * (through rank 1's DONE: its REQ follows), and granted with rank 1 when it asks (a group of
 * 2, the hold measured: 1 ms, predicted 1 ms). A request that asks when the next is predicted 3.5 ms away with 2 members waiting
 * is not held (7 ms > 4 ms); a hold ends at the limit (10 ms) with the group as it is; a
 * request that has waited max_wait is never held.
 */
static void test_hold(void)
{
    static struct ina_sched s;
    new_sched(&s, 4, 2, 3);
    s.p.aggregate = 3;
    s.p.agg_hold_ns = 10 * MS;
    s.p.max_wait_ns = 100 * MS;
    for (int r = 0; r < 4; r++) {
        s.ranks[r].rate = 5000 / 0.004;
        s.ranks[r].samples = 2;
    }
    struct answer a[8];
    const uint32_t F = INA_SCHED_REQ_AGGREGATE, B = INA_SCHED_BASE_AT_GRANT;
    uint64_t t0 = 1000 * MS;
    req_flags(&s, 1, 1, B, 5000, F, "mlf", t0); /* nobody granted to wait for: granted */
    CHECK(answers(&s, a, 8) == 1 && a[0].rank == 1 && a[0].group_size == 1);
    uint32_t g1 = a[0].stamp;
    req_flags(&s, 0, 1, B, 5000, F, "mlf", t0 + 3 * MS); /* rank 1 due in 1 ms: held */
    CHECK_EQ_INT(answers(&s, a, 8), 0);
    CHECK_EQ_INT(s.c.holds, 1);
    ina__sched_tick(&s, t0 + 3 * MS + 500000); /* still held */
    CHECK_EQ_INT(answers(&s, a, 8), 0);
    done(&s, 1, 1, g1, 0, 5000, 4000, 1, t0 + 4 * MS);
    req_flags(&s, 1, 2, B, 5000, F, "mlf", t0 + 4 * MS);
    int n = answers(&s, a, 8);
    CHECK(n == 2 && a[0].rank == 0 && a[1].rank == 1 && a[0].group_size == 2 &&
          a[0].stamp == a[1].stamp);
    CHECK(s.c.holds_joined == 1 && s.c.hold_us == 1000 && s.c.hold_predicted_us == 1000);
    uint32_t g2 = a[0].stamp;
    /* ranks 2 and 3 ask while the group of 2 is due in 3.5 ms: 2 x 3.5 ms > 4 ms, granted */
    req_flags(&s, 2, 1, B, 5000, F, "mlf", t0 + 4 * MS + 250000);
    n = answers(&s, a, 8);
    CHECK_EQ_INT(s.c.holds, 2); /* rank 2 alone: 3.75 ms x 1 < 4 ms, held */
    CHECK_EQ_INT(n, 0);
    req_flags(&s, 3, 1, B, 5000, F, "mlf", t0 + 4 * MS + 500000);
    n = answers(&s, a, 8);
    CHECK(n == 2 && a[0].group_size == 2 && a[0].stamp == a[1].stamp && s.c.holds == 2);
    CHECK(s.c.holds_joined == 2 && s.c.hold_us == 1250);
    uint32_t g3 = a[0].stamp;
    /* the first group ends; rank 0 asks again alone and the second group is due at once:
     * held, but nobody comes (the second group's ranks are slow): granted alone at the limit */
    done(&s, 1, 2, g2, INA_SCHED_DONE_MEMBER, 5000, 4000, 2, t0 + 8 * MS);
    done(&s, 0, 1, g2, 0, 5000, 4000, 2, t0 + 8 * MS);
    req_flags(&s, 0, 2, B, 5000, F, "mlf", t0 + 8 * MS);
    CHECK_EQ_INT(answers(&s, a, 8), 0);
    CHECK_EQ_INT(s.c.holds, 3);
    ina__sched_tick(&s, t0 + 17 * MS);
    CHECK_EQ_INT(answers(&s, a, 8), 0);
    ina__sched_tick(&s, t0 + 18 * MS); /* 10 ms held: granted alone */
    CHECK(answers(&s, a, 8) == 1 && a[0].rank == 0 && a[0].group_size == 1);
    CHECK(s.c.holds_joined == 2 && s.c.hold_us == 1250 + 10000);
    uint32_t g4 = a[0].stamp;
    /* a request that has waited max_wait is not held */
    done(&s, 2, 1, g3, 0, 5000, 4000, 3, t0 + 19 * MS);
    done(&s, 3, 1, g3, INA_SCHED_DONE_MEMBER, 5000, 4000, 3, t0 + 19 * MS);
    s.p.max_wait_ns = 1 * MS;
    req_flags(&s, 2, 2, B, 5000, F, "mlf", t0 + 19 * MS);
    CHECK_EQ_INT(answers(&s, a, 8), 0); /* rank 0 is due in 3 ms: held */
    ina__sched_tick(&s, t0 + 20 * MS + 1);
    CHECK(answers(&s, a, 8) == 1 && a[0].rank == 2); /* aged: granted */
    (void)g4;
    CHECK_EQ_INT(s.c.bound_violations, 0);
}

/* Who is never grouped: a rank without the REQ flag, a straggler, a request that is not a
 * fetch request; and aggregate above world is refused. */
static void test_group_members(void)
{
    static struct ina_sched s;
    new_sched(&s, 4, 2, 1); /* one grant at a time: the others wait and can be grouped */
    s.p.aggregate = 4;
    struct answer a[8];
    uint64_t now = 1;
    req_flags(&s, 0, 1, INA_SCHED_BASE_AT_GRANT, 100, INA_SCHED_REQ_AGGREGATE, "mlf", now);
    CHECK(answers(&s, a, 8) == 1 && a[0].rank == 0 && a[0].group_size == 1);
    req_flags(&s, 1, 1, INA_SCHED_BASE_AT_GRANT, 100, INA_SCHED_REQ_AGGREGATE, "mlf", now);
    req_flags(&s, 2, 1, INA_SCHED_BASE_AT_GRANT, 100, 0, "mlf", now); /* cannot aggregate */
    req_flags(&s, 3, 1, 0, 100, INA_SCHED_REQ_AGGREGATE, "mlf", now); /* an update request */
    req_flags(&s, 3, 2, INA_SCHED_BASE_AT_GRANT, 100, INA_SCHED_REQ_AGGREGATE, "mlf", now);
    CHECK_EQ_INT(answers(&s, a, 8), 0);
    done(&s, 0, 1, 0, 0, 100, 100, 1, now);
    /* Ranks 1 and 3 wait with the flag: one group; rank 2 waits alone. */
    int n = answers(&s, a, 8);
    CHECK(n == 2 && a[0].stamp == 1 && a[1].stamp == 1 && a[0].group_size == 2 &&
          a[1].group_size == 2 && a[0].group_index == 0 && a[1].group_index == 1);
    CHECK((a[0].rank == 1 && a[1].rank == 3) || (a[0].rank == 3 && a[1].rank == 1));
    CHECK_EQ_INT(s.outstanding, 1);
    /* The member's DONE ends its request only; the leader's ends the group. */
    int member = a[1].rank, leader = a[0].rank;
    done(&s, member, member == 3 ? 2 : 1, 1, INA_SCHED_DONE_MEMBER, 100, 100, 1, now);
    CHECK_EQ_INT(s.outstanding, 1);
    CHECK_EQ_INT(answers(&s, a, 8), 0);
    done(&s, leader, leader == 3 ? 2 : 1, 1, 0, 100, 100, 2, now);
    CHECK_EQ_INT(s.outstanding, 1);
    CHECK(answers(&s, a, 8) == 1 && a[0].rank == 2 && a[0].group_size == 1);
    CHECK_EQ_INT(s.c.groups, 1);
    CHECK_EQ_INT(s.c.member_dones, 1);
    CHECK_EQ_INT(s.c.member_failed, 0);
    /* A straggler's request is never grouped. */
    s.ranks[1].straggler = 1;
    req_flags(&s, 1, 2, INA_SCHED_BASE_AT_GRANT, 100, INA_SCHED_REQ_AGGREGATE, "mlf", now);
    req_flags(&s, 3, 3, INA_SCHED_BASE_AT_GRANT, 100, INA_SCHED_REQ_AGGREGATE, "mlf", now);
    done(&s, 2, 1, 2, 0, 100, 100, 3, now);
    n = answers(&s, a, 8);
    CHECK(n == 1 && a[0].rank == 3 && a[0].group_size == 1);
    /* A member's grant that expires, and a member's next REQ, leave O alone. */
    struct ina_sched_params p = s.p;
    p.aggregate = 5;
    CHECK_EQ_INT(ina__sched_init(&s, &p), -EINVAL);
    p.aggregate = 4;
    CHECK_EQ_INT(ina__sched_init(&s, &p), 0);
    s.p.window = 2;
    req_flags(&s, 0, 1, INA_SCHED_BASE_AT_GRANT, 100, INA_SCHED_REQ_AGGREGATE, "mlf", now);
    req_flags(&s, 1, 1, INA_SCHED_BASE_AT_GRANT, 100, INA_SCHED_REQ_AGGREGATE, "mlf", now);
    req_flags(&s, 2, 1, INA_SCHED_BASE_AT_GRANT, 100, INA_SCHED_REQ_AGGREGATE, "mlf", now);
    CHECK_EQ_INT(answers(&s, a, 8), 2); /* 0 alone, then 1 alone: the window is full */
    CHECK_EQ_INT(s.outstanding, 2);
    /* Rank 0 asks again (its grant ends implicitly): it and rank 2 wait together. */
    req_flags(&s, 0, 2, INA_SCHED_BASE_AT_GRANT, 100, INA_SCHED_REQ_AGGREGATE, "mlf", now);
    n = answers(&s, a, 8);
    CHECK(n == 2 && a[0].group_size == 2 && a[0].stamp == a[1].stamp && a[1].group_index == 1);
    CHECK_EQ_INT(s.outstanding, 2);
    int m = a[1].rank;
    req_flags(&s, m, m == 0 ? 3 : 2, INA_SCHED_BASE_AT_GRANT, 100, INA_SCHED_REQ_AGGREGATE,
              "mlf", now);
    CHECK_EQ_INT(s.outstanding, 2); /* the member's implicit end is not the group's */
    CHECK_EQ_INT(s.c.implicit_dones, 2);
    CHECK_EQ_INT(answers(&s, a, 8), 0);
    ina__sched_tick(&s, now + 2000000000ull); /* rank 1's grant and the group's expire */
    CHECK_EQ_INT(s.c.grants_expired, 2);
    CHECK(answers(&s, a, 8) == 1 && a[0].rank == m); /* then the member's new request */
    CHECK_EQ_INT(s.outstanding, 1);
    CHECK_EQ_INT(s.c.bound_violations, 0);
}

/*
 * A straggler (ratio 0.6), or a slow rank that shortest-first passes over
 * (ratio 0: no stragglers), yields to the others' requests, but only for
 * max_wait_ns: with the others always asking, its request still goes first
 * after the wait.
 */
static void test_max_wait(double ratio)
{
    static struct ina_sched s;
    struct ina_sched_params p = {.world = 3, .max_delay = 0, .window = 1,
                                 .grant_timeout_ns = 1000000000ull, .straggler_ratio = ratio,
                                 .max_wait_ns = 10000000ull, .initial_rate = 1e6};
    snprintf(p.job, sizeof(p.job), "mlf");
    CHECK_EQ_INT(ina__sched_init(&s, &p), 0);
    struct answer a[8];
    uint64_t now = 1;
    uint32_t uid[3] = {0, 0, 0}, v = 0;
    static const uint32_t usec[3] = {100, 110, 400}; /* rank 2: a straggler */
    for (int round = 0; round < 2; round++)
        for (int r = 0; r < 3; r++) {
            req(&s, r, ++uid[r], INA_SCHED_BASE_AT_GRANT, 10000, "mlf", now);
            CHECK(answers(&s, a, 8) == 1 && a[0].rank == r);
            done(&s, r, uid[r], a[0].stamp, 0, 10000, usec[r], ++v, now);
        }
    CHECK(s.ranks[2].straggler == (ratio > 0) && !s.ranks[0].straggler && !s.ranks[1].straggler);
    /* Rank 0 holds the window; rank 1 and the straggler ask. Every millisecond the holder
     * finishes and asks again at once, so a non-straggler always waits beside rank 2. */
    req(&s, 0, ++uid[0], INA_SCHED_BASE_AT_GRANT, 10000, "mlf", now);
    CHECK(answers(&s, a, 8) == 1 && a[0].rank == 0);
    int holder = 0;
    uint32_t stamp = a[0].stamp;
    uint64_t asked = now;
    req(&s, 2, ++uid[2], INA_SCHED_BASE_AT_GRANT, 10000, "mlf", now);
    req(&s, 1, ++uid[1], INA_SCHED_BASE_AT_GRANT, 10000, "mlf", now);
    CHECK_EQ_INT(answers(&s, a, 8), 0);
    uint64_t granted_after = 0;
    for (int k = 0; k < 40 && !granted_after; k++) {
        now += 1000000;
        done(&s, holder, uid[holder], stamp, 0, 10000, usec[holder], ++v, now);
        CHECK_EQ_INT(answers(&s, a, 8), 1);
        if (a[0].rank == 2) {
            granted_after = now - asked;
            break;
        }
        int next = a[0].rank;
        req(&s, holder, ++uid[holder], INA_SCHED_BASE_AT_GRANT, 10000, "mlf", now);
        CHECK_EQ_INT(answers(&s, a, 8), 0);
        holder = next;
        stamp = s.ranks[next].stamp;
    }
    CHECK(granted_after >= 10000000ull && granted_after <= 11000000ull);
    CHECK_EQ_INT(s.c.aged_grants, 1);
    CHECK(ratio > 0 ? s.c.straggler_waits >= 9 : s.c.straggler_waits == 0);
    printf("%s granted after %.0f ms of others' requests (wait limit 10 ms)\n",
           ratio > 0 ? "straggler" : "slowest rank", (double)granted_after / 1e6);
}

/* Rates learned from DONEs order the grants; the slow rank is a straggler and yields. */
static void test_sff_stragglers(void)
{
    static struct ina_sched s;
    new_sched(&s, 4, 4, 1);
    struct answer a[8];
    uint64_t now = 1;
    static const uint32_t usec[4] = {100, 120, 110, 400}; /* rank 3: a quarter of the rate */
    uint32_t uid = 0, v = 0;
    for (int round = 0; round < 3; round++) {
        uid++;
        for (int r = 0; r < 4; r++) {
            req(&s, r, uid, v, 10000, "mlf", now);
            CHECK_EQ_INT(answers(&s, a, 8), 1);
            CHECK(a[0].rank == r && a[0].status == 0);
            v++;
            done(&s, r, uid, a[0].stamp, 0, 10000, usec[r], v, now);
        }
    }
    CHECK(s.ranks[3].straggler && !s.ranks[0].straggler && !s.ranks[1].straggler);
    /* Window 1: hold it with rank 0's grant, then everyone asks for the same bytes. */
    uid++;
    req(&s, 0, uid, v, 10000, "mlf", now);
    CHECK_EQ_INT(answers(&s, a, 8), 1);
    uint32_t held = a[0].stamp;
    for (int r = 3; r >= 1; r--)
        req(&s, r, uid, v, r == 2 ? 20000 : r == 3 ? 2000 : 10000, "mlf", now);
    CHECK_EQ_INT(answers(&s, a, 8), 0);
    int order[3], n = 0;
    uint32_t last = held;
    int ranks_done[4] = {1, 0, 0, 0};
    for (int k = 0; k < 3; k++) {
        int prev = k == 0 ? 0 : order[k - 1];
        v++;
        done(&s, prev, uid, last, 0, 10000, usec[prev], v, now);
        if (answers(&s, a, 8) != 1)
            break;
        order[n++] = a[0].rank;
        last = a[0].stamp;
        ranks_done[a[0].rank] = 1;
    }
    CHECK_EQ_INT(n, 3);
    /* rank 1 (10000 B at 83 MB/s: 120 us), rank 2 (20000 B at 91 MB/s: 220 us); rank 3 would
     * be first (2000 B at 25 MB/s: 80 us) but is a straggler: last */
    CHECK_EQ_INT(order[0], 1);
    CHECK_EQ_INT(order[1], 2);
    CHECK_EQ_INT(order[2], 3);
    CHECK(s.c.straggler_waits > 0);
    CHECK(ranks_done[1] && ranks_done[2] && ranks_done[3]);
}

/*
 * A dynamic cluster (issue 33): 8 ranks of fetch requests, window 3, each transfer taking
 * bytes / its link's rate. Rank 1's link drops to a quarter at T1 and recovers at T2. The
 * scheduler must mark it a straggler within a few of its transfers after T1, and take the
 * mark off with its first transfer after T2: by then it is granted only when its request
 * has waited max_wait (100 ms), so a rate learned per sample (weight 0.3) would keep it a
 * straggler for another grant or more; weighted by the time since its last sample (the
 * half-life), one sample suffices. A single slow sample of a rank heard from often does not
 * make it a straggler (of one heard from rarely it may: then one sample is all there is). @return the samples of rank 1 after T2 until its mark came off.
 */
static int rate_episode(uint64_t halflife_ns)
{
    enum { W = 8, SLOW = 1, OUTLIER = 0 }; /* OUTLIER: granted most often (ties: the lowest) */
    static struct ina_sched s;
    struct ina_sched_params p = {.world = W, .max_delay = 2, .window = 3,
                                 .grant_timeout_ns = 1000000000ull, .straggler_ratio = 0.6,
                                 .max_wait_ns = 100000000ull, .initial_rate = 10e6,
                                 .rate_halflife_ns = halflife_ns};
    snprintf(p.job, sizeof(p.job), "mlf");
    CHECK_EQ_INT(ina__sched_init(&s, &p), 0);
    const uint64_t T1 = 500 * MS, T2 = 1500 * MS, END = 2500 * MS;
    const uint32_t BYTES = 31744; /* an lsq update of 120 keys: 3.2 ms at 10 MB/s */
    uint32_t uid[W] = {0}, stamp[W] = {0}, v = 0;
    uint64_t start[W] = {0}, finish[W] = {0};
    int granted[W] = {0}, outlier_done = 0, outlier_marked = 0;
    int n1 = 0, n2 = 0, mark_n1 = -1, clear_n2 = -1; /* SLOW's samples after T1, T2 */
    unsigned grants_slow = 0, grants_others = 0;   /* in the episode, once marked */
    uint64_t now = 1;
    struct answer a[16];
    for (int r = 0; r < W; r++)
        req(&s, r, ++uid[r], INA_SCHED_BASE_AT_GRANT, BYTES, "mlf", now);
    for (;;) {
        int na = answers(&s, a, 16);
        for (int i = 0; i < na; i++) {
            int r = a[i].rank;
            CHECK(a[i].status == 0);
            granted[r] = 1;
            stamp[r] = a[i].stamp;
            start[r] = now;
            double rate = 10e6 / (r == SLOW && now >= T1 && now < T2 ? 4 : 1);
            if (r == OUTLIER && now >= T2 + 200 * MS && !outlier_done++)
                rate /= 4; /* one slow transfer */
            finish[r] = now + (uint64_t)(BYTES / rate * 1e9);
            if (mark_n1 >= 0 && now < T2)
                *(r == SLOW ? &grants_slow : &grants_others) += 1;
        }
        int next = -1;
        for (int r = 0; r < W; r++)
            if (granted[r] && (next < 0 || finish[r] < finish[next]))
                next = r;
        CHECK(next >= 0);
        if (next < 0 || finish[next] > END)
            break;
        now = finish[next];
        granted[next] = 0;
        done(&s, next, uid[next], stamp[next], 0, BYTES, (uint32_t)((now - start[next]) / 1000),
             ++v, now);
        if (next == SLOW && start[next] >= T2) {
            n2++;
            if (clear_n2 < 0 && !s.ranks[SLOW].straggler)
                clear_n2 = n2;
        } else if (next == SLOW && start[next] >= T1) {
            n1++;
            if (mark_n1 < 0 && s.ranks[SLOW].straggler)
                mark_n1 = n1;
        }
        outlier_marked |= s.ranks[OUTLIER].straggler;
        req(&s, next, ++uid[next], INA_SCHED_BASE_AT_GRANT, BYTES, "mlf", now);
    }
    /* marked within 4 of its transfers at a quarter rate; then it yielded to the others */
    CHECK(mark_n1 >= 1 && mark_n1 <= 4);
    CHECK(grants_slow > 0 && grants_slow * 4 < grants_others / (W - 1));
    CHECK(outlier_done > 0 && !outlier_marked);
    CHECK(clear_n2 >= 1 && !s.ranks[SLOW].straggler);
    CHECK_EQ_INT(s.c.bound_violations, 0);
    printf("rate half-life %.0f ms: rank %d a straggler after %d quarter-rate transfers, then "
           "%u grants (others %u each) until it recovered; its mark came off with its "
           "transfer %d after\n",
           (double)halflife_ns / 1e6, SLOW, mark_n1, grants_slow, grants_others / (W - 1),
           clear_n2);
    return clear_n2;
}

static void test_rate_episode(void)
{
    CHECK_EQ_INT(rate_episode(50 * MS), 1);
}

/* Copies, lost DONEs, expiry, and every malformed or foreign datagram: counted, no grant. */
static void test_hostile(void)
{
    static struct ina_sched s;
    new_sched(&s, 2, 1, 1);
    struct answer a[8];
    req(&s, 0, 1, 0, 100, "mlf", 1);
    CHECK(answers(&s, a, 8) == 1 && a[0].status == 0 && a[0].stamp == 0);
    req(&s, 0, 1, 0, 100, "mlf", 2); /* the GRANT was lost: the same answer again */
    CHECK(answers(&s, a, 8) == 1 && a[0].status == 0 && a[0].stamp == 0);
    CHECK_EQ_INT(s.c.request_dups, 1);
    req(&s, 1, 1, 0, 100, "mlf", 3); /* window full: waits */
    CHECK_EQ_INT(answers(&s, a, 8), 0);
    ina__sched_tick(&s, 2000000000ull); /* rank 0's grant expires: rank 1 is granted */
    CHECK_EQ_INT(s.c.grants_expired, 1);
    CHECK(answers(&s, a, 8) == 1 && a[0].rank == 1 && a[0].stamp == 1);
    req(&s, 1, 2, 1, 100, "mlf", 2000000001ull); /* its DONE lost: the next REQ ends it */
    CHECK_EQ_INT(s.c.implicit_dones, 1);
    CHECK(answers(&s, a, 8) == 1 && a[0].status == 0 && a[0].stamp == 2);
    req(&s, 0, 2, 0, 100, "mlf", 2000000002ull); /* base 0, A = 2 > D: refused at once */
    CHECK(answers(&s, a, 8) == 1 && a[0].status == INA_ERR_STALE);
    uint64_t before = s.c.grants;
    uint8_t b[INA_HDR_LEN + INA_SCHED_REQ_LEN];
    struct sockaddr_in other = addr_of(7), r0 = addr_of(0);
    ina__sched_input(&s, b, 10, &r0, 5);
    CHECK_EQ_INT(s.c.drops[INA_SCHED_DROP_SHORT], 1);
    memset(b, 0, sizeof(b));
    ina__sched_input(&s, b, sizeof(b), &r0, 5);
    CHECK_EQ_INT(s.c.drops[INA_SCHED_DROP_MAGIC], 1);
    struct ina_hdr h;
    ina__hdr_init(&h, INA_K_PS_PUSH);
    ina__hdr_encode(b, &h);
    ina__sched_input(&s, b, sizeof(b), &r0, 5);
    CHECK_EQ_INT(s.c.drops[INA_SCHED_DROP_KIND], 1);
    ina__hdr_init(&h, INA_K_SCHED_REQ);
    ina__hdr_encode(b, &h);
    ina__sched_input(&s, b, sizeof(b) - 1, &r0, 5);
    CHECK_EQ_INT(s.c.drops[INA_SCHED_DROP_LENGTH], 1);
    req(&s, 0, 9, 2, 100, "other-job", 5);
    CHECK_EQ_INT(s.c.drops[INA_SCHED_DROP_NAME], 1);
    req(&s, 5, 1, 0, 100, "mlf", 5); /* rank 5 of a world of 2 */
    CHECK_EQ_INT(s.c.drops[INA_SCHED_DROP_RANK], 1);
    ina__hdr_init(&h, INA_K_SCHED_REQ);
    h.rank = 0;
    h.slot = 10;
    ina__hdr_encode(b, &h);
    memset(b + INA_HDR_LEN, 0, INA_SCHED_REQ_LEN);
    snprintf((char *)b + INA_HDR_LEN + 8, 32, "mlf");
    ina__sched_input(&s, b, sizeof(b), &other, 5); /* rank 0 from another port */
    CHECK_EQ_INT(s.c.drops[INA_SCHED_DROP_SOURCE], 1);
    done(&s, 0, 1, 0, 0, 100, 10, 1, 5); /* DONE for an expired grant */
    req(&s, 0, 1, 0, 100, "mlf", 5);      /* an id older than the current one */
    CHECK_EQ_INT(s.c.drops[INA_SCHED_DROP_ORDER], 2);
    CHECK_EQ_INT(s.c.grants, before);
    CHECK_EQ_INT(answers(&s, a, 8), 0);
    CHECK_EQ_INT(s.c.bound_violations, 0);
    struct ina_sched_params bad = s.p;
    bad.window = 0;
    CHECK_EQ_INT(ina__sched_init(&s, &bad), -EINVAL);
}

/* ---- Membership and failures (§15.9): the job's servers played by the test -------------- */

static struct sockaddr_in server_addr(int i) { return addr_of(2000 + i); } /* ports 43000, 43001 */

static void new_sched_servers(struct ina_sched *s, unsigned world, unsigned D, unsigned window)
{
    struct ina_sched_params p = {.world = world, .max_delay = D, .window = window,
                                 .grant_timeout_ns = 1000000000ull, .straggler_ratio = 0.6,
                                 .initial_rate = 1e6, .nservers = 2,
                                 .failover_ns = 500000000ull};
    p.server[0] = server_addr(0);
    p.server[1] = server_addr(1);
    snprintf(p.job, sizeof(p.job), "mlf");
    CHECK_EQ_INT(ina__sched_init(s, &p), 0);
}

struct srv_state {
    uint32_t action, arg, result, run, version, next_stamp, held, flags;
    uint64_t digest;
    uint8_t joined, left; /* ranks 0..7 */
};

/* A PS_STATE from server i (or from src if not NULL); cut bytes off its length. */
static void state_from(struct ina_sched *s, int i, const struct srv_state *st, const char *name,
                       size_t cut, const struct sockaddr_in *src, uint64_t now)
{
    uint8_t b[INA_HDR_LEN + INA_PS_STATE_LEN];
    struct ina_hdr h;
    ina__hdr_init(&h, INA_K_PS_STATE);
    h.rank = INA_RANK_SWITCH;
    h.seq = st->version;
    ina__hdr_encode(b, &h);
    uint8_t *p = b + INA_HDR_LEN;
    memset(p, 0, INA_PS_STATE_LEN);
    snprintf((char *)p, 32, "%s", name);
    ina__put32(p + 32, st->action);
    ina__put32(p + 36, st->arg);
    ina__put32(p + 40, st->result);
    ina__put32(p + 44, st->run);
    ina__put32(p + 48, st->version);
    ina__put32(p + 52, st->next_stamp);
    ina__put32(p + 56, st->held);
    ina__put32(p + 60, st->flags);
    ina__put16(p + 64, 8);
    ina__put16(p + 66, 8);
    ina__put64(p + 68, st->digest);
    p[76] = st->joined;
    p[108] = st->left;
    struct sockaddr_in a = src ? *src : server_addr(i);
    ina__sched_input(s, b, sizeof(b) - cut, &a, now);
}

struct sync_msg {
    int server;
    uint32_t action, arg, n;
};

/* The queue, split: GRANTs into a (count *na), PS_SYNCs into m; the queue is emptied. */
static int drain(struct ina_sched *s, struct answer *a, int *na, struct sync_msg *m, int cap)
{
    int n = 0, g = 0;
    for (unsigned i = 0; i < s->tx.n; i++) {
        struct ina_hdr h = {0};
        CHECK(ina__hdr_decode(s->tx.buf[i], s->tx.len[i], &h) == INA_PARSE_OK);
        const uint8_t *p = s->tx.buf[i] + INA_HDR_LEN;
        if (h.kind == INA_K_SCHED_GRANT && a && g < cap) {
            a[g].rank = ntohs(s->tx.dst[i].sin_port) - 41000;
            a[g].uid = h.slot;
            a[g].status = (int32_t)ina__get32(p);
            a[g].stamp = ina__get32(p + 4);
            a[g].group_size = ina__get32(p + 16);
            a[g++].group_index = ina__get32(p + 20);
        } else if (h.kind == INA_K_PS_SYNC && n < cap) {
            CHECK(s->tx.len[i] == INA_HDR_LEN + INA_PS_SYNC_LEN && strcmp((const char *)p, "mlf") == 0);
            m[n].server = ntohs(s->tx.dst[i].sin_port) - 43000;
            m[n].action = ina__get32(p + 32);
            m[n].arg = ina__get32(p + 36);
            m[n++].n = ina__get32(p + 40);
        } else {
            CHECK(h.kind == INA_K_SCHED_GRANT || h.kind == INA_K_PS_SYNC);
        }
    }
    if (na)
        *na = g;
    ina__sched_tx_reset(s);
    return n;
}

/* Is there a PS_SYNC action(arg) to server i among m? */
static int has_sync(const struct sync_msg *m, int n, int server, uint32_t action, uint32_t arg)
{
    for (int k = 0; k < n; k++)
        if (m[k].server == server && m[k].action == action && m[k].arg == arg)
            return 1;
    return 0;
}


/* A scheduler started on a running job waits for the authority's state and for its live
 * ranks, then grants from the servers' next stamp; a fresh job starts at once. */
static void test_recovery(void)
{
    static struct ina_sched s;
    struct answer a[16];
    struct sync_msg m[32];
    int na;
    /* a fresh job: NO_JOB from the primary */
    new_sched_servers(&s, 4, 2, 3);
    req(&s, 0, 1, INA_SCHED_BASE_AT_GRANT, 100, "mlf", 1 * MS);
    ina__sched_tick(&s, 2 * MS);
    int n = drain(&s, a, &na, m, 32);
    CHECK(na == 0 && has_sync(m, n, 0, INA_PS_SYNC_STATE, 0) && has_sync(m, n, 1, INA_PS_SYNC_STATE, 0));
    struct srv_state st = {.result = INA_PS_FATE_NO_JOB};
    state_from(&s, 0, &st, "mlf", 0, NULL, 3 * MS);
    ina__sched_tick(&s, 4 * MS);
    drain(&s, a, &na, m, 32);
    CHECK(na == 1 && a[0].rank == 0 && a[0].stamp == 0 && s.recovering == INA_SCHED_RUNNING);
    CHECK_EQ_INT(s.c.recoveries, 0);
    /* a running job (V 10, next stamp 12, ranks 0..3): every live rank asks, then grants */
    new_sched_servers(&s, 4, 2, 3);
    for (int r = 0; r < 3; r++)
        req(&s, r, 7, INA_SCHED_BASE_AT_GRANT, 100, "mlf", 1 * MS);
    ina__sched_tick(&s, 2 * MS);
    st = (struct srv_state){.version = 10, .next_stamp = 12, .joined = 0x0F};
    state_from(&s, 0, &st, "mlf", 0, NULL, 3 * MS);
    ina__sched_tick(&s, 4 * MS);
    drain(&s, a, &na, m, 32);
    CHECK(na == 0 && s.recovering == INA_SCHED_RECOVER_RANKS);
    req(&s, 3, 5, INA_SCHED_BASE_AT_GRANT, 100, "mlf", 5 * MS);
    ina__sched_tick(&s, 6 * MS);
    drain(&s, a, &na, m, 32);
    CHECK(na == 3 && s.recovering == INA_SCHED_RUNNING && s.c.recoveries == 1);
    for (int k = 0; k < na; k++)
        CHECK(a[k].status == 0 && a[k].stamp == 12 + (uint32_t)k);
    CHECK_EQ_INT(ina__sched_known_applied(&s), 10);
    /* rank 3 dead (joined, never asks): after a lease, the old grants' stamps are voided */
    new_sched_servers(&s, 4, 2, 3);
    for (int r = 0; r < 3; r++)
        req(&s, r, 7, INA_SCHED_BASE_AT_GRANT, 100, "mlf", 1 * MS);
    ina__sched_tick(&s, 2 * MS);
    st = (struct srv_state){.version = 10, .next_stamp = 12, .joined = 0x0F, .held = 1u << 2};
    state_from(&s, 0, &st, "mlf", 0, NULL, 3 * MS);
    ina__sched_tick(&s, 500 * MS);
    drain(&s, a, &na, m, 32);
    CHECK(na == 0);
    ina__sched_tick(&s, 1100 * MS);
    n = drain(&s, a, &na, m, 32);
    CHECK(na == 0 && s.recovering == INA_SCHED_RECOVER_VOID &&
          has_sync(m, n, 0, INA_PS_SYNC_VOID, 12));
    for (int k = 0; k < n; k++)
        if (m[k].action == INA_PS_SYNC_VOID)
            CHECK(m[k].n == INA_PS_VOID_MAX);
    st = (struct srv_state){.action = INA_PS_SYNC_VOID, .arg = 12, .result = INA_PS_FATE_VOIDED,
                            .run = 2, .version = 11, .next_stamp = 12 + INA_PS_VOID_MAX,
                            .joined = 0x0F};
    state_from(&s, 0, &st, "mlf", 0, NULL, 1101 * MS);
    ina__sched_tick(&s, 1102 * MS);
    drain(&s, a, &na, m, 32);
    CHECK(na == 3 && a[0].stamp == 12 + INA_PS_VOID_MAX && s.c.recoveries == 1);
    CHECK_EQ_INT(s.c.bound_violations, 0);
    /* no server answers at all: it starts without their state */
    new_sched_servers(&s, 4, 2, 3);
    req(&s, 0, 1, INA_SCHED_BASE_AT_GRANT, 100, "mlf", 1 * MS);
    ina__sched_tick(&s, 400 * MS);
    drain(&s, a, &na, m, 32);
    CHECK(na == 0);
    ina__sched_tick(&s, 600 * MS);
    drain(&s, a, &na, m, 32);
    CHECK(na == 1 && a[0].stamp == 0 && s.recovering == INA_SCHED_RUNNING);
}

/* A fresh scheduler with both servers answering: running, job at version 0. */
static void running(struct ina_sched *s, unsigned world, unsigned D, unsigned window, uint64_t now)
{
    new_sched_servers(s, world, D, window);
    ina__sched_tick(s, now);
    struct srv_state st = {.result = INA_PS_FATE_NO_JOB};
    state_from(s, 0, &st, "mlf", 0, NULL, now); /* the job starts after this scheduler */
    ina__sched_tick(s, now);
    st = (struct srv_state){.joined = (uint8_t)((1u << world) - 1)};
    state_from(s, 0, &st, "mlf", 0, NULL, now);
    state_from(s, 1, &st, "mlf", 0, NULL, now);
    ina__sched_tx_reset(s);
    CHECK(s->recovering == INA_SCHED_RUNNING);
}

/* Leases: a worker dies holding stamp 0; the stamp stays in O until the authority voids it,
 * the void is repeated at the replica, the rank departs there and here; a grant held behind
 * it outlives its lease but is taken, not voided. */
static void test_lease(void)
{
    static struct ina_sched s;
    struct answer a[16];
    struct sync_msg m[32];
    int na, n;
    running(&s, 4, 2, 2, 1 * MS);
    req(&s, 0, 1, INA_SCHED_BASE_AT_GRANT, 100, "mlf", 2 * MS);
    req(&s, 1, 1, INA_SCHED_BASE_AT_GRANT, 100, "mlf", 2 * MS);
    req(&s, 2, 1, INA_SCHED_BASE_AT_GRANT, 100, "mlf", 2 * MS);
    drain(&s, a, &na, m, 32);
    CHECK(na == 2 && s.outstanding == 2); /* window 2: rank 2 waits */
    int dead = a[0].stamp == 0 ? a[0].rank : a[1].rank, slow = a[0].stamp == 0 ? a[1].rank : a[0].rank;
    ina__sched_tick(&s, 1100 * MS); /* both leases run out: voids asked, O unchanged */
    n = drain(&s, a, &na, m, 32);
    CHECK(na == 0 && s.outstanding == 2 && s.c.grants_expired == 2);
    CHECK(has_sync(m, n, 0, INA_PS_SYNC_VOID, 0) && has_sync(m, n, 0, INA_PS_SYNC_VOID, 1));
    CHECK(!s.ranks[dead].departed && !s.ranks[slow].departed);
    /* stamp 1 is held there (its worker sent it): asked again, not voided */
    struct srv_state st = {.action = INA_PS_SYNC_VOID, .arg = 1, .result = INA_PS_FATE_HELD,
                           .next_stamp = 0, .held = 2, .joined = 0x0F};
    state_from(&s, 0, &st, "mlf", 0, NULL, 1101 * MS);
    st = (struct srv_state){.joined = 0x0F}; /* the replica answers its probes */
    state_from(&s, 1, &st, "mlf", 0, NULL, 1101 * MS);
    CHECK_EQ_INT(s.outstanding, 2);
    /* stamp 0 voided (the held 1 taken at once): O 1, rank `dead` departs, world 3 */
    st = (struct srv_state){.action = INA_PS_SYNC_VOID, .arg = 0, .result = INA_PS_FATE_VOIDED,
                            .run = 1, .version = 1, .next_stamp = 2, .joined = 0x0F};
    state_from(&s, 0, &st, "mlf", 0, NULL, 1102 * MS);
    CHECK(s.outstanding == 2 && s.c.stamps_voided == 1 && s.ranks[dead].departed &&
          ina__sched_live_ranks(&s) == 2); /* ranks 0..2 were bound; rank 2 granted in its place */
    n = drain(&s, a, &na, m, 32);
    CHECK(na == 1 && a[0].rank == 2 && a[0].stamp == 2); /* O below the window again */
    ina__sched_tick(&s, 1130 * MS); /* resends: VOID 1 to the authority, VOID 0 at the replica */
    n = drain(&s, a, &na, m, 32);
    CHECK(has_sync(m, n, 0, INA_PS_SYNC_VOID, 1) && has_sync(m, n, 1, INA_PS_SYNC_VOID, 0) &&
          !has_sync(m, n, 0, INA_PS_SYNC_VOID, 0));
    st = (struct srv_state){.action = INA_PS_SYNC_VOID, .arg = 1, .result = INA_PS_FATE_TAKEN,
                            .version = 2, .next_stamp = 2, .joined = 0x0F};
    state_from(&s, 0, &st, "mlf", 0, NULL, 1131 * MS);
    CHECK(s.outstanding == 1 && s.c.voids_late == 1 && !s.ranks[slow].departed);
    st = (struct srv_state){.action = INA_PS_SYNC_VOID, .arg = 0, .result = INA_PS_FATE_VOIDED,
                            .run = 1, .version = 2, .next_stamp = 2, .joined = 0x0F};
    state_from(&s, 1, &st, "mlf", 0, NULL, 1132 * MS);
    CHECK_EQ_INT(s.c.void_relays, 1);
    /* the next probes tell both servers `dead` departed, until their state shows it left */
    ina__sched_tick(&s, 1300 * MS);
    n = drain(&s, a, &na, m, 32);
    CHECK(has_sync(m, n, 0, INA_PS_SYNC_DEPART, (uint32_t)dead) &&
          has_sync(m, n, 1, INA_PS_SYNC_DEPART, (uint32_t)dead));
    st = (struct srv_state){.version = 3, .next_stamp = 3, .joined = 0x0F,
                            .left = (uint8_t)(1u << dead)};
    state_from(&s, 0, &st, "mlf", 0, NULL, 1301 * MS);
    state_from(&s, 1, &st, "mlf", 0, NULL, 1301 * MS);
    ina__sched_tick(&s, 1500 * MS);
    n = drain(&s, a, &na, m, 32);
    CHECK(!has_sync(m, n, 0, INA_PS_SYNC_DEPART, (uint32_t)dead) &&
          !has_sync(m, n, 1, INA_PS_SYNC_DEPART, (uint32_t)dead));
    /* the slow rank's DONE for its expired grant: dropped; its next REQ: scheduled */
    done(&s, slow, 1, 1, 0, 100, 10, 2, 1501 * MS);
    CHECK_EQ_INT(s.c.drops[INA_SCHED_DROP_ORDER], 1);
    req(&s, slow, 2, INA_SCHED_BASE_AT_GRANT, 100, "mlf", 1502 * MS);
    drain(&s, a, &na, m, 32);
    CHECK(na == 1 && a[0].rank == slow && a[0].stamp == 3);
    /* the dead rank comes back after all: in the world again */
    req(&s, dead, 2, INA_SCHED_BASE_AT_GRANT, 100, "mlf", 1503 * MS);
    CHECK(!s.ranks[dead].departed && s.c.ranks_returned == 1 && ina__sched_live_ranks(&s) == 3);
    /* a rank leaves: no answer, out of the world; the copy of its LEAVE: no answer either */
    req_flags(&s, 3, 1, INA_SCHED_BASE_AT_GRANT, 0, INA_SCHED_REQ_LEAVE, "mlf", 1504 * MS);
    req_flags(&s, 3, 1, INA_SCHED_BASE_AT_GRANT, 0, INA_SCHED_REQ_LEAVE, "mlf", 1505 * MS);
    drain(&s, a, &na, m, 32);
    CHECK(s.c.leaves == 1 && s.ranks[3].departed);
    for (int k = 0; k < na; k++)
        CHECK(a[k].rank != 3);
    CHECK_EQ_INT(s.c.bound_violations, 0);
}

/* The primary silent: the replica becomes the authority; a replica that lags on a stamp is
 * repaired (voided there too, or replayed); digests compared; forged answers dropped. */
static void test_servers(void)
{
    static struct ina_sched s;
    struct answer a[16];
    struct sync_msg m[32];
    int na, n;
    running(&s, 4, 2, 3, 1 * MS);
    /* the replica checks: equal stamps, equal digests; then a mismatch */
    struct srv_state p = {.version = 5, .next_stamp = 5, .digest = 77, .joined = 0x0F};
    state_from(&s, 0, &p, "mlf", 0, NULL, 2 * MS);
    /* the authority took stamps this scheduler never granted: ours move past them */
    CHECK(s.next_stamp == 5 && s.c.stamps_resynced == 1);
    state_from(&s, 1, &p, "mlf", 0, NULL, 2 * MS);
    CHECK(s.c.replica_checks >= 1 && s.c.replica_mismatch == 0);
    p.next_stamp = p.version = 6;
    state_from(&s, 0, &p, "mlf", 0, NULL, 3 * MS);
    p.digest = 78;
    state_from(&s, 1, &p, "mlf", 0, NULL, 3 * MS);
    CHECK_EQ_INT(s.c.replica_mismatch, 1);
    /* the replica stuck at 6 while the primary is at 9: across a probe, the fate of 6 is
     * asked; voided there: voided at the replica too */
    p = (struct srv_state){.version = 9, .next_stamp = 9, .joined = 0x0F};
    struct srv_state r = {.version = 6, .next_stamp = 6, .joined = 0x0F};
    state_from(&s, 0, &p, "mlf", 0, NULL, 100 * MS);
    state_from(&s, 1, &r, "mlf", 0, NULL, 100 * MS);
    ina__sched_tick(&s, 101 * MS);
    n = drain(&s, a, &na, m, 32);
    CHECK(!has_sync(m, n, 0, INA_PS_SYNC_STATE, 6));
    ina__sched_tick(&s, 205 * MS);
    n = drain(&s, a, &na, m, 32);
    CHECK(has_sync(m, n, 0, INA_PS_SYNC_STATE, 6));
    struct srv_state f = p;
    f.action = INA_PS_SYNC_STATE;
    f.arg = 6;
    f.result = INA_PS_FATE_VOIDED;
    f.run = 2;
    state_from(&s, 0, &f, "mlf", 0, NULL, 206 * MS);
    ina__sched_tick(&s, 207 * MS);
    n = drain(&s, a, &na, m, 32);
    CHECK(has_sync(m, n, 1, INA_PS_SYNC_VOID, 6));
    for (int k = 0; k < n; k++)
        if (m[k].action == INA_PS_SYNC_VOID)
            CHECK(m[k].n == 2 && m[k].server == 1);
    r.action = INA_PS_SYNC_VOID;
    r.arg = 6;
    r.result = INA_PS_FATE_VOIDED;
    r.next_stamp = 8;
    state_from(&s, 1, &r, "mlf", 0, NULL, 208 * MS);
    CHECK_EQ_INT(s.c.void_relays, 1);
    /* stuck at 8, taken at the primary: asked again until the repair delay, then replayed */
    r = (struct srv_state){.version = 8, .next_stamp = 8, .joined = 0x0F};
    state_from(&s, 1, &r, "mlf", 0, NULL, 300 * MS);
    f.arg = 8;
    f.result = INA_PS_FATE_TAKEN;
    uint64_t t = 300 * MS;
    int replay_asked = 0;
    while (t < 900 * MS && !replay_asked) {
        t += 10 * MS;
        ina__sched_tick(&s, t);
        n = drain(&s, a, &na, m, 32);
        if (has_sync(m, n, 0, INA_PS_SYNC_STATE, 8))
            state_from(&s, 0, &f, "mlf", 0, NULL, t);
        n = drain(&s, a, &na, m, 32);
        replay_asked = has_sync(m, n, 0, INA_PS_SYNC_REPLAY, 8);
        state_from(&s, 0, &p, "mlf", 0, NULL, t); /* both alive meanwhile */
        state_from(&s, 1, &r, "mlf", 0, NULL, t);
    }
    CHECK(replay_asked && t - 300 * MS >= INA_SCHED_REPAIR_NS);
    /* the PS_REPLAY: from the replica (not the authority) dropped; from the primary relayed */
    uint8_t rp[INA_HDR_LEN + 32 + INA_PS_UPDATE_PREFIX + 12];
    struct ina_hdr h;
    ina__hdr_init(&h, INA_K_PS_REPLAY);
    h.rank = 2;
    h.slot = 4;
    h.count = 1;
    ina__hdr_encode(rp, &h);
    memset(rp + INA_HDR_LEN, 0, sizeof(rp) - INA_HDR_LEN);
    snprintf((char *)rp + INA_HDR_LEN, 32, "mlf");
    ina__put32(rp + INA_HDR_LEN + 32, 8);
    struct sockaddr_in s0 = server_addr(0), s1 = server_addr(1), stranger = addr_of(3000);
    ina__sched_input(&s, rp, sizeof(rp), &s1, t + 1);
    CHECK(s.c.drops[INA_SCHED_DROP_SERVER] == 1 && !s.tx.relay);
    ina__sched_input(&s, rp, sizeof(rp), &s0, t + 1);
    CHECK(s.tx.relay == rp && s.tx.relay_len == sizeof(rp) &&
          s.tx.relay_dst.sin_port == s1.sin_port && s.c.replays_relayed == 1);
    ina__sched_tx_reset(&s);
    ina__sched_input(&s, rp, sizeof(rp), &s0, t + 2); /* not asked for again: dropped */
    CHECK(s.c.drops[INA_SCHED_DROP_ORDER] == 1 && !s.tx.relay);
    /* forged or broken PS_STATEs */
    state_from(&s, 0, &p, "mlf", 0, &stranger, t + 3);
    CHECK_EQ_INT(s.c.drops[INA_SCHED_DROP_SERVER], 2);
    state_from(&s, 0, &p, "mlf", 1, NULL, t + 3);
    CHECK_EQ_INT(s.c.drops[INA_SCHED_DROP_LENGTH], 1);
    state_from(&s, 0, &p, "other", 0, NULL, t + 3);
    CHECK_EQ_INT(s.c.drops[INA_SCHED_DROP_NAME], 1);
    /* the authority's next stamp ahead of ours (stamps we never granted): ours moves */
    p.next_stamp = 40;
    state_from(&s, 0, &p, "mlf", 0, NULL, t + 4);
    CHECK_EQ_INT(s.next_stamp, 40);
    /* the primary goes silent: past the failover time the replica is the authority, and a
     * lease that runs out is voided there */
    req(&s, 0, 1, INA_SCHED_BASE_AT_GRANT, 100, "mlf", t + 5);
    drain(&s, a, &na, m, 32);
    CHECK(na == 1 && a[0].stamp == 40);
    uint64_t u = t + 5;
    while (u < t + 1200 * MS) {
        u += 50 * MS;
        r.next_stamp = 40;
        r.version = p.version;
        state_from(&s, 1, &r, "mlf", 0, NULL, u);
        ina__sched_tick(&s, u);
        drain(&s, a, &na, m, 32);
    }
    CHECK(s.auth == 1 && s.c.server_failovers == 1 && s.c.grants_expired == 1);
    ina__sched_tick(&s, u + 30 * MS);
    n = drain(&s, a, &na, m, 32);
    CHECK(has_sync(m, n, 1, INA_PS_SYNC_VOID, 40) && !has_sync(m, n, 0, INA_PS_SYNC_VOID, 40));
    CHECK_EQ_INT(s.c.bound_violations, 0);
    struct ina_sched_params bad = s.p;
    bad.failover_ns = 0;
    CHECK_EQ_INT(ina__sched_init(&s, &bad), -EINVAL);
    bad = s.p;
    bad.server[1].sin_port = 0;
    CHECK_EQ_INT(ina__sched_init(&s, &bad), -EINVAL);
}

/* Right after the authority voided a stamp, a replica lagging on it is asked about at once
 * (no probe's wait): the workers stop sending it copies it cannot hold if it lags long. */
static void test_eager_repair(void)
{
    static struct ina_sched s;
    struct answer a[16];
    struct sync_msg m[32];
    int na, n;
    running(&s, 4, 2, 3, 1 * MS);
    req(&s, 0, 1, INA_SCHED_BASE_AT_GRANT, 100, "mlf", 2 * MS);
    done(&s, 0, 1, 0, 0, 100, 100, 1, 3 * MS); /* stamp 0 applied at both */
    req(&s, 1, 1, INA_SCHED_BASE_AT_GRANT, 100, "mlf", 4 * MS); /* stamp 1: its worker dies */
    drain(&s, a, &na, m, 32);
    CHECK(na == 2 && a[1].stamp == 1);
    struct srv_state p = {.version = 1, .next_stamp = 1, .joined = 0x0F}, r = p;
    uint64_t t = 4 * MS;
    while (t < 1200 * MS) { /* the lease runs out: VOID 1 asked of the authority */
        t += 20 * MS;
        state_from(&s, 0, &p, "mlf", 0, NULL, t);
        state_from(&s, 1, &r, "mlf", 0, NULL, t);
        ina__sched_tick(&s, t);
        n = drain(&s, a, &na, m, 32);
        if (has_sync(m, n, 0, INA_PS_SYNC_VOID, 1))
            break;
    }
    struct srv_state v = {.action = INA_PS_SYNC_VOID, .arg = 1, .result = INA_PS_FATE_VOIDED,
                          .run = 1, .version = 1, .next_stamp = 2, .joined = 0x0F};
    state_from(&s, 0, &v, "mlf", 0, NULL, t + 1 * MS);
    state_from(&s, 1, &r, "mlf", 0, NULL, t + 2 * MS); /* the replica still at 1 */
    ina__sched_tick(&s, t + 7 * MS);
    n = drain(&s, a, &na, m, 32);
    CHECK(has_sync(m, n, 0, INA_PS_SYNC_STATE, 1)); /* its fate asked at once, no probe's wait */
    CHECK(s.repair_eager_ns > t);
}

int main(void)
{
    ina__log_setup(INA_LOG_ERROR, INA_LOG_TEXT);
    test_bound(0, 1);
    test_bound(2, 3);
    test_bound(4, 8);
    test_fetch_bound(0, 1);
    test_fetch_bound(2, 8);
    test_fetch_bound(4, 3);
    test_sff_stragglers();
    test_rate_episode();
    test_max_wait(0.6);
    test_max_wait(0);
    test_groups(2, 3, 3);
    test_groups(0, 1, 4);
    test_groups(4, 8, 8);
    test_group_members();
    test_hold();
    test_hostile();
    test_recovery();
    test_lease();
    test_servers();
    test_eager_repair();
    return check_report("test_sched");
}
