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
        CHECK(ina__hdr_decode(s->tx.buf[i], sizeof(s->tx.buf[i]), &h) == INA_PARSE_OK &&
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
    test_max_wait(0.6);
    test_max_wait(0);
    test_groups(2, 3, 3);
    test_groups(0, 1, 4);
    test_groups(4, 8, 8);
    test_group_members();
    test_hostile();
    return check_report("test_sched");
}
