/* test_ps_stale.c: ina-ps's bounded-staleness mode (PROTOCOL.md §15.2): the delay bound, refusals,
 * copies, order; a stamped stream keeps a replica bit-identical; failover to it loses nothing. */
#include <arpa/inet.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "ps/ps.h"
#include "check.h"
#include "rng.h"

#define DIM 4
#define NKEYS 16
#define WORLD 4

#include "ps_stale_fixture.h"

static struct sockaddr_in rank_addr[WORLD];

/* The last reply of the given kind in ps->tx, decoded (NULL: none); the queue is emptied. */
static int last_reply(struct ina_ps *ps, uint8_t kind, struct ina_hdr *h, uint8_t *body,
                      size_t cap)
{
    int found = 0;
    for (unsigned i = 0; i < ps->tx.n; i++) {
        struct ina_hdr x;
        const uint8_t *b = ps->tx.iov[i].iov_base;
        size_t len = ps->tx.iov[i].iov_len;
        if (ina__hdr_decode(b, len, &x) == INA_PARSE_OK && x.kind == kind) {
            *h = x;
            if (body)
                memcpy(body, b + INA_HDR_LEN, len - INA_HDR_LEN < cap ? len - INA_HDR_LEN : cap);
            found = 1;
        }
    }
    ina__ps_tx_reset(ps);
    return found;
}

static int join_all(struct ina_ps *ps, int mode, int d, int optim, int nak_expected)
{
    send_joins(ps, rank_addr, "stale", mode, d, nak_expected ? d + 1 : d, optim);
    struct ina_hdr h;
    if (nak_expected)
        return last_reply(ps, INA_K_PS_JOIN_NAK, &h, NULL, 0);
    return last_reply(ps, INA_K_PS_JOIN_ACK, &h, NULL, 0) && h.job == 1;
}

/* Send u; @return 1 and the ack's status/version/delay if answered, 0 if dropped. */
static int send_update(struct ina_ps *ps, const struct upd *u, int32_t *status, uint32_t *version,
                       uint32_t *delay)
{
    uint8_t b[4096];
    size_t n = encode_update(ps, u, b, INA_K_PS_UPDATE);
    ina__ps_input(ps, b, n, &rank_addr[u->rank], 2);
    struct ina_hdr h;
    uint8_t body[INA_PS_UPDATE_ACK_LEN];
    int found = 0;
    for (unsigned i = 0; i < ps->tx.n; i++) { /* its answer (held ones taken after it answer too) */
        const uint8_t *a = ps->tx.iov[i].iov_base;
        if (ina__hdr_decode(a, ps->tx.iov[i].iov_len, &h) == INA_PARSE_OK &&
            h.kind == INA_K_PS_UPDATE_ACK && h.slot == u->uid &&
            ps->tx.dst[i].sin_port == rank_addr[u->rank].sin_port) {
            memcpy(body, a + INA_HDR_LEN, sizeof(body));
            found = 1;
            break;
        }
    }
    ina__ps_tx_reset(ps);
    if (!found)
        return 0;
    *status = (int32_t)ina__get32(body);
    *version = ina__get32(body + 4);
    *delay = ina__get32(body + 8);
    CHECK_EQ_INT(h.seq, *version);
    return 1;
}

/* The bound, refusals, copies, out-of-order ids, bad bases, the mode's kinds. */
static void test_rules(void)
{
    static struct ina_ps ps;
    new_ps(&ps);
    CHECK(join_all(&ps, INA_PS_MODE_STALE, 1, INA_OPTIM_SGD, 0));
    rng_state = 1;
    struct upd u = {.rank = 0, .uid = 1, .base = 0, .stamp = INA_STAMP_NONE};
    random_update(&u);
    int32_t st;
    uint32_t v, d;
    CHECK(send_update(&ps, &u, &st, &v, &d) && st == 0 && v == 1 && d == 0);
    u.rank = 1; /* computed on version 0 too: lags 1 <= D */
    CHECK(send_update(&ps, &u, &st, &v, &d) && st == 0 && v == 2 && d == 1);
    u.rank = 2; /* lags 2 > D: refused, the model is unchanged */
    float before[DIM];
    memcpy(before, ps.jobs[0].store.vals, sizeof(before));
    CHECK(send_update(&ps, &u, &st, &v, &d) && st == INA_ERR_STALE && v == 2 && d == 2);
    CHECK(memcmp(before, ps.jobs[0].store.vals, sizeof(before)) == 0);
    u.rank = 1; /* a copy of rank 1's update 1: the same answer, not applied again */
    CHECK(send_update(&ps, &u, &st, &v, &d) && st == 0 && v == 2 && d == 1);
    CHECK_EQ_INT(ps.c.update_dups, 1);
    u.uid = 3; /* update 2 skipped: dropped */
    CHECK(!send_update(&ps, &u, &st, &v, &d));
    u.uid = 2;
    u.base = 3; /* a version the server has not reached */
    CHECK(!send_update(&ps, &u, &st, &v, &d));
    CHECK_EQ_INT(ps.c.drops[INA_PS_DROP_ORDER], 2);
    u.base = 2;
    CHECK(send_update(&ps, &u, &st, &v, &d) && st == 0 && v == 3 && d == 0);
    uint8_t b[4096]; /* PUSH in a STALE job; UPDATE with a length that disagrees */
    size_t n = encode_update(&ps, &u, b, INA_K_PS_PUSH);
    ina__ps_input(&ps, b, n, &rank_addr[1], 3);
    CHECK_EQ_INT(ps.c.drops[INA_PS_DROP_MODE], 1);
    u.uid = 3;
    n = encode_update(&ps, &u, b, INA_K_PS_UPDATE);
    ina__ps_input(&ps, b, n - 1, &rank_addr[1], 3);
    CHECK_EQ_INT(ps.c.drops[INA_PS_DROP_LENGTH], 1);
    CHECK_EQ_INT(ps.c.updates_applied, 3);
    CHECK_EQ_INT(ps.c.updates_stale, 1);
    CHECK_EQ_INT(ps.c.delay_violations, 0);
    /* a PULL answers with the version its values are of */
    struct ina_hdr h;
    ina__hdr_init(&h, INA_K_PS_PULL);
    h.job = 1;
    h.session = ps.jobs[0].session;
    h.token = ps.jobs[0].token;
    h.slot = 9;
    h.count = 1;
    ina__hdr_encode(b, &h);
    ina__put64(b + INA_HDR_LEN, 1000);
    ina__ps_input(&ps, b, INA_HDR_LEN + 8, &rank_addr[0], 4);
    CHECK(last_reply(&ps, INA_K_PS_PULL_RESP, &h, NULL, 0) && h.seq == 3 && h.slot == 9);
    ina__ps_free(&ps);
    /* ranks that disagree on D are refused */
    new_ps(&ps);
    CHECK(join_all(&ps, INA_PS_MODE_STALE, 2, INA_OPTIM_SGD, 1));
    ina__ps_free(&ps);
}

/* Random bases over many updates: applied iff delay <= D, exactly the oracle's model. */
static void test_bound_oracle(int D)
{
    static struct ina_ps ps;
    new_ps(&ps);
    CHECK(join_all(&ps, INA_PS_MODE_STALE, D, INA_OPTIM_SGD, 0));
    rng_state = 10 + (uint64_t)D;
    uint32_t uid[WORLD] = {0}, version = 0, applied = 0, refused = 0;
    int bad = 0;
    for (int i = 0; i < 3000; i++) {
        struct upd u = {.rank = (int)(rng_u64() % WORLD), .stamp = INA_STAMP_NONE};
        uint32_t lag = (uint32_t)(rng_u64() % (uint32_t)(D + 3));
        u.base = lag > version ? 0 : version - lag;
        u.uid = ++uid[u.rank];
        random_update(&u);
        int32_t st;
        uint32_t v, d;
        if (!send_update(&ps, &u, &st, &v, &d)) {
            bad++;
            continue;
        }
        uint32_t want_delay = version - u.base;
        if (d != want_delay || (want_delay <= (uint32_t)D) != (st == 0))
            bad++;
        if (st == 0) {
            version++;
            applied++;
        } else {
            refused++;
        }
        if (v != version)
            bad++;
    }
    CHECK_EQ_INT(bad, 0);
    CHECK(refused > 0 && applied > 0);
    CHECK_EQ_INT(ps.c.updates_applied, applied);
    CHECK_EQ_INT(ps.c.delay_violations, 0);
    CHECK_LE_DBL(ps.c.delay_max, D);
    ina__ps_free(&ps);
}

/* D = 255 is no bound (INA_PS_DELAY_UNBOUNDED, §15.1): an update 300 versions behind is
 * applied; D = 254 still refuses a delay of 255. */
static void test_unbounded(void)
{
    for (int D = 254; D <= INA_PS_DELAY_UNBOUNDED; D++) {
        static struct ina_ps ps;
        new_ps(&ps);
        CHECK(join_all(&ps, INA_PS_MODE_STALE, D, INA_OPTIM_SGD, 0));
        rng_state = 77;
        struct upd u = {.rank = 0, .stamp = INA_STAMP_NONE};
        random_update(&u);
        int32_t st = -1;
        uint32_t v = 0, d = 0;
        for (uint32_t i = 0; i < 300; i++) { /* rank 0 alone: each on the newest version */
            u.uid = i + 1;
            u.base = i;
            CHECK(send_update(&ps, &u, &st, &v, &d) && st == 0 && d == 0);
        }
        struct upd late = u;
        late.rank = 1; /* computed on version 0: 300 versions behind */
        late.uid = 1;
        late.base = 0;
        CHECK(send_update(&ps, &late, &st, &v, &d) && d == 300);
        if (D == INA_PS_DELAY_UNBOUNDED) {
            CHECK(st == 0 && v == 301);
            CHECK_EQ_INT(ps.c.delay_max, 300);
        } else {
            CHECK(st == INA_ERR_STALE && v == 300);
        }
        late.uid = 2; /* a delay of exactly 255 */
        late.base = v - 255;
        CHECK(send_update(&ps, &late, &st, &v, &d) && d == 255 &&
              (st == 0) == (D == INA_PS_DELAY_UNBOUNDED));
        CHECK_EQ_INT(ps.c.delay_violations, 0);
        ina__ps_free(&ps);
    }
}

/*
 * Replication: the same stamped stream to a primary (in order) and a replica
 * (reordered and duplicated: an early stamp is held until its turn, its resend
 * later is a copy).
 * The replica equals the primary bit for bit whenever both have taken the
 * same stamps. Then the primary dies at stamp T/2: the rest goes to the
 * replica only, and its final model equals a third server's that took the
 * whole stream without a failure.
 */
static void test_replica_failover(void)
{
    enum { T = 400 };
    static struct ina_ps primary, replica, witness;
    new_ps(&primary);
    new_ps(&replica);
    new_ps(&witness);
    CHECK(join_all(&primary, INA_PS_MODE_STALE, 3, INA_OPTIM_ADAGRAD, 0));
    CHECK(join_all(&replica, INA_PS_MODE_STALE, 3, INA_OPTIM_ADAGRAD, 0));
    CHECK(join_all(&witness, INA_PS_MODE_STALE, 3, INA_OPTIM_ADAGRAD, 0));
    /* the servers' sessions differ; each update is encoded per server */
    static struct upd stream[T];
    rng_state = 99;
    uint32_t uid[WORLD] = {0}, version = 0;
    for (int i = 0; i < T; i++) {
        struct upd *u = &stream[i];
        u->rank = (int)(rng_u64() % WORLD);
        u->uid = ++uid[u->rank];
        u->stamp = (uint32_t)i;
        uint32_t lag = (uint32_t)(rng_u64() % 5);
        u->base = lag > version ? 0 : version - lag;
        random_update(u);
        int32_t st;
        uint32_t v, d;
        CHECK(send_update(&primary, u, &st, &v, &d));
        CHECK(send_update(&witness, u, &st, &v, &d));
        version = v;
    }
    CHECK(same_model(&primary, &witness));
    /* The replica gets stamps in pairs swapped (the later one first: held, answered HELD,
     * and a copy of it answered HELD again) and every third update twice; it is compared
     * with a fresh primary replay as it goes. */
    static struct ina_ps primary2;
    new_ps(&primary2);
    CHECK(join_all(&primary2, INA_PS_MODE_STALE, 3, INA_OPTIM_ADAGRAD, 0));
    int mismatches = 0, dropped_ok = 0, compared = 0, held_copies = 0;
    for (int i = 0; i < T; i++) {
        int32_t st;
        uint32_t v, d;
        if (i % 2 == 0 && i + 1 < T && stream[i + 1].rank != stream[i].rank) {
            uint32_t before = replica.jobs[0].applied;
            int got = send_update(&replica, &stream[i + 1], &st, &v, &d);
            dropped_ok += got && st == INA_PS_UPDATE_HELD && v == before && d == 0;
            if (i % 4 == 0) /* its copy: HELD again, still not applied */
                held_copies += send_update(&replica, &stream[i + 1], &st, &v, &d) &&
                               st == INA_PS_UPDATE_HELD && v == before;
        }
        if (i == T / 2)
            break; /* the primary dies here: primary2 stops */
        CHECK(send_update(&replica, &stream[i], &st, &v, &d));
        if (i % 3 == 0)
            CHECK(send_update(&replica, &stream[i], &st, &v, &d));
        CHECK(send_update(&primary2, &stream[i], &st, &v, &d));
        if (replica.jobs[0].next_stamp != primary2.jobs[0].next_stamp)
            continue; /* the replica took a held stamp more: compare at the next one */
        compared++;
        if (!same_model(&replica, &primary2))
            mismatches++;
    }
    CHECK_EQ_INT(mismatches, 0);
    CHECK(compared > T / 4);
    CHECK(dropped_ok > 0 && held_copies > 0);
    CHECK_EQ_INT(replica.c.updates_held, (uint64_t)dropped_ok);
    CHECK_EQ_INT(replica.c.drops[INA_PS_DROP_ORDER], 0);
    /* Failover: the workers send the rest to the replica alone (an update the dead primary
     * may or may not have acked is resent: the replica applies it once). */
    for (int i = T / 2; i < T; i++) {
        int32_t st;
        uint32_t v, d;
        CHECK(send_update(&replica, &stream[i], &st, &v, &d));
    }
    CHECK(same_model(&replica, &witness));
    CHECK_EQ_INT(replica.c.updates_applied, witness.c.updates_applied);
    CHECK_EQ_INT(replica.c.delay_violations + witness.c.delay_violations, 0);
    ina__ps_free(&primary);
    ina__ps_free(&primary2);
    ina__ps_free(&replica);
    ina__ps_free(&witness);
}

/*
 * A group's sum (members >= 2, §15.7) is one update like any other: one version, its
 * delay from the base it carries, counted in updates_aggregated and aggregated_members
 * only when applied; members above 256 is a malformed body (drop LENGTH).
 */
static void test_members(void)
{
    static struct ina_ps ps;
    new_ps(&ps);
    CHECK(join_all(&ps, INA_PS_MODE_STALE, 1, INA_OPTIM_SGD, 0));
    rng_state = 3;
    struct upd u = {.rank = 0, .uid = 1, .base = 0, .stamp = INA_STAMP_NONE};
    random_update(&u);
    uint8_t b[4096];
    size_t n = encode_update(&ps, &u, b, INA_K_PS_UPDATE);
    ina__put32(b + INA_HDR_LEN + 4, INA_PS_UPDATE_MAX_MEMBERS + 1);
    ina__ps_input(&ps, b, n, &rank_addr[0], 2);
    CHECK_EQ_INT(ps.c.drops[INA_PS_DROP_LENGTH], 1);
    CHECK_EQ_INT(ps.jobs[0].applied, 0);
    ina__ps_tx_reset(&ps);
    ina__put32(b + INA_HDR_LEN + 4, 3); /* the sum of 3 members' updates, sent by rank 0 */
    ina__ps_input(&ps, b, n, &rank_addr[0], 2);
    CHECK_EQ_INT(ps.jobs[0].applied, 1);
    CHECK_EQ_INT(ps.c.updates_aggregated, 1);
    CHECK_EQ_INT(ps.c.aggregated_members, 3);
    ina__ps_input(&ps, b, n, &rank_addr[0], 2); /* its copy: answered, not counted again */
    CHECK_EQ_INT(ps.c.update_dups, 1);
    CHECK_EQ_INT(ps.c.aggregated_members, 3);
    ina__ps_tx_reset(&ps);
    u.rank = 1; /* base 0 at version 1, then version 2: a group refused STALE is not counted */
    u.uid = 1;
    CHECK_EQ_INT(encode_update(&ps, &u, b, INA_K_PS_UPDATE), n);
    ina__put32(b + INA_HDR_LEN + 4, 2);
    ina__ps_input(&ps, b, n, &rank_addr[1], 2);
    u.rank = 2;
    CHECK_EQ_INT(encode_update(&ps, &u, b, INA_K_PS_UPDATE), n);
    ina__put32(b + INA_HDR_LEN + 4, 2);
    ina__ps_input(&ps, b, n, &rank_addr[2], 2);
    CHECK_EQ_INT(ps.jobs[0].applied, 2);
    CHECK_EQ_INT(ps.c.updates_stale, 1);
    CHECK_EQ_INT(ps.c.updates_aggregated, 2);
    CHECK_EQ_INT(ps.c.aggregated_members, 5);
    CHECK_EQ_INT(ps.c.delay_violations, 0);
    ina__ps_free(&ps);
}

int main(void)
{
    for (int r = 0; r < WORLD; r++)
        rank_addr[r] = mkaddr(0x7f000001, (uint16_t)(40000 + r));
    ina__log_setup(INA_LOG_ERROR, INA_LOG_TEXT);
    test_rules();
    test_bound_oracle(0);
    test_bound_oracle(2);
    test_unbounded();
    test_replica_failover();
    test_members();
    return check_report("test_ps_stale");
}
