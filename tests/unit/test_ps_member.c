/* test_ps_member.c: ina-ps's side of MLfabric's membership and failures (PROTOCOL.md §15.9):
 * elastic STALE jobs (start < world, late joins, a taken rank refused), voided stamps and the
 * VOIDED answer, fate questions, replays that keep a replica bit-identical, departures, the
 * digest, and every malformed or foreign PS_SYNC and PS_REPLAY dropped with its counter. */
#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "ps/member.h"
#include "ps/ps.h"
#include "check.h"
#include "rng.h"

#define DIM 4
#define NKEYS 16
#define WORLD 4

#include "ps_stale_fixture.h"

static struct sockaddr_in rank_addr[WORLD + 1], sched_addr, stranger;

/* PS_JOIN of rank r of job "el" (world, start, nonce) from from. */
static void join_one(struct ina_ps *ps, int r, int world, int start, int mode, uint64_t nonce,
                     const struct sockaddr_in *from)
{
    send_join(ps, from, "el", r, world, start, mode, mode == INA_PS_MODE_STALE ? 2 : 0,
              INA_OPTIM_SGD, nonce);
}

/* How many replies of kind went to dst (NULL: anyone); the last one's header and body. */
static int replies(struct ina_ps *ps, uint8_t kind, const struct sockaddr_in *dst, struct ina_hdr *h,
                   uint8_t *body, size_t cap)
{
    int n = 0;
    for (unsigned i = 0; i < ps->tx.n; i++) {
        struct ina_hdr x;
        const uint8_t *b = ps->tx.iov[i].iov_base;
        size_t len = ps->tx.iov[i].iov_len;
        if (ina__hdr_decode(b, len, &x) != INA_PARSE_OK || x.kind != kind ||
            (dst && ps->tx.dst[i].sin_port != dst->sin_port))
            continue;
        n++;
        if (h)
            *h = x;
        if (body)
            memcpy(body, b + INA_HDR_LEN, len - INA_HDR_LEN < cap ? len - INA_HDR_LEN : cap);
    }
    return n;
}

/* Elastic STALE jobs: the job starts with `start` ranks, the others join it running. */
static void test_elastic_join(void)
{
    static struct ina_ps ps;
    new_ps(&ps);
    struct ina_hdr h;
    uint8_t body[INA_PS_JOIN_BODY_LEN];
    join_one(&ps, 0, 4, 2, INA_PS_MODE_STALE, 11, &rank_addr[0]);
    CHECK_EQ_INT(ps.tx.n, 0); /* 1 of 2: waiting */
    join_one(&ps, 1, 4, 2, INA_PS_MODE_STALE, 12, &rank_addr[1]);
    CHECK_EQ_INT(replies(&ps, INA_K_PS_JOIN_ACK, NULL, &h, body, sizeof(body)), 2);
    CHECK_EQ_INT(ina__get16(body + 92), 2); /* start echoed */
    ina__ps_tx_reset(&ps);
    CHECK(ps.jobs[0].state == INA_PS_ACTIVE && ps.jobs[0].njoined == 2);
    /* rank 2 joins the running job: answered at once, alone */
    join_one(&ps, 2, 4, 2, INA_PS_MODE_STALE, 13, &rank_addr[2]);
    CHECK_EQ_INT(replies(&ps, INA_K_PS_JOIN_ACK, &rank_addr[2], &h, NULL, 0), 1);
    CHECK_EQ_INT(ps.tx.n, 1);
    CHECK(h.session == ps.jobs[0].session && h.token == ps.jobs[0].token);
    ina__ps_tx_reset(&ps);
    CHECK_EQ_INT(ps.c.ranks_joined_late, 1);
    /* its JOIN again (the ACK lost): the same ACK */
    join_one(&ps, 2, 4, 2, INA_PS_MODE_STALE, 13, &rank_addr[2]);
    CHECK_EQ_INT(replies(&ps, INA_K_PS_JOIN_ACK, &rank_addr[2], NULL, NULL, 0), 1);
    ina__ps_tx_reset(&ps);
    /* rank 2 restarted (same IP, new port and nonce): refused, the job goes on */
    uint32_t session = ps.jobs[0].session;
    struct sockaddr_in again = mkaddr(0x7f000003, 9999);
    join_one(&ps, 2, 4, 2, INA_PS_MODE_STALE, 99, &again);
    CHECK_EQ_INT(replies(&ps, INA_K_PS_JOIN_NAK, &again, NULL, body, sizeof(body)), 1);
    CHECK_EQ_INT((int32_t)ina__get32(body + 8), INA_ERR_REJECTED);
    ina__ps_tx_reset(&ps);
    CHECK(ps.jobs[0].state == INA_PS_ACTIVE && ps.jobs[0].session == session);
    CHECK_EQ_INT(ps.c.ranks_refused, 1);
    /* another start: MISMATCH; start above world: REJECTED; SYNC with start < world: NOTSUP */
    join_one(&ps, 3, 4, 3, INA_PS_MODE_STALE, 14, &rank_addr[3]);
    CHECK_EQ_INT(replies(&ps, INA_K_PS_JOIN_NAK, NULL, NULL, body, sizeof(body)), 1);
    CHECK_EQ_INT((int32_t)ina__get32(body + 8), INA_ERR_MISMATCH);
    ina__ps_tx_reset(&ps);
    struct sockaddr_in other = mkaddr(0x0A000001, 5000);
    join_one(&ps, 0, 4, 5, INA_PS_MODE_STALE, 15, &other);
    CHECK_EQ_INT(replies(&ps, INA_K_PS_JOIN_NAK, NULL, NULL, body, sizeof(body)), 1);
    CHECK_EQ_INT((int32_t)ina__get32(body + 8), INA_ERR_REJECTED);
    ina__ps_tx_reset(&ps);
    join_one(&ps, 0, 4, 2, INA_PS_MODE_SYNC, 16, &other);
    CHECK_EQ_INT(replies(&ps, INA_K_PS_JOIN_NAK, NULL, NULL, body, sizeof(body)), 1);
    CHECK_EQ_INT((int32_t)ina__get32(body + 8), INA_ERR_NOTSUP);
    ina__ps_tx_reset(&ps);
    /* the job ends once every rank that joined has left (3 of 4) */
    for (int r = 0; r < 3; r++) {
        uint8_t b[INA_HDR_LEN + INA_PS_LEAVE_BODY_LEN] = {0};
        struct ina_hdr lh;
        ina__hdr_init(&lh, INA_K_PS_LEAVE);
        lh.job = ps.jobs[0].id;
        lh.session = ps.jobs[0].session;
        lh.token = ps.jobs[0].token;
        lh.rank = (uint16_t)r;
        ina__hdr_encode(b, &lh);
        CHECK(ps.jobs[0].state == INA_PS_ACTIVE);
        ina__ps_input(&ps, b, sizeof(b), &rank_addr[r], 2);
    }
    CHECK(ps.jobs[0].state == INA_PS_FREE);
    CHECK_EQ_INT(ps.c.jobs_ended, 1);
    ina__ps_free(&ps);
}

/* A PS_SYNC from src: action, argument, count; its length may be cut. */
static void sync_from(struct ina_ps *ps, const struct sockaddr_in *src, const char *name,
                      uint32_t action, uint32_t arg, uint32_t n, size_t cut)
{
    uint8_t b[INA_HDR_LEN + INA_PS_SYNC_LEN];
    struct ina_hdr h;
    ina__hdr_init(&h, INA_K_PS_SYNC);
    h.rank = INA_RANK_SWITCH;
    h.slot = 77;
    ina__hdr_encode(b, &h);
    memset(b + INA_HDR_LEN, 0, INA_PS_SYNC_LEN);
    snprintf((char *)b + INA_HDR_LEN, 32, "%s", name);
    ina__put32(b + INA_HDR_LEN + 32, action);
    ina__put32(b + INA_HDR_LEN + 36, arg);
    ina__put32(b + INA_HDR_LEN + 40, n);
    ina__ps_input(ps, b, sizeof(b) - cut, src, 3);
}

struct state {
    uint32_t action, arg, result, run, version, next_stamp, held, flags;
    uint16_t world, start;
    uint64_t digest;
    uint8_t joined[32], left[32];
};

/* The PS_STATE answer to the last PS_SYNC (1), or none (0); the queue is emptied. */
static int state_of(struct ina_ps *ps, struct state *s)
{
    struct ina_hdr h;
    uint8_t b[INA_PS_STATE_LEN];
    int n = replies(ps, INA_K_PS_STATE, &sched_addr, &h, b, sizeof(b));
    ina__ps_tx_reset(ps);
    if (!n)
        return 0;
    CHECK(h.slot == 77 && h.rank == INA_RANK_SWITCH);
    s->action = ina__get32(b + 32);
    s->arg = ina__get32(b + 36);
    s->result = ina__get32(b + 40);
    s->run = ina__get32(b + 44);
    s->version = ina__get32(b + 48);
    s->next_stamp = ina__get32(b + 52);
    s->held = ina__get32(b + 56);
    s->flags = ina__get32(b + 60);
    s->world = ina__get16(b + 64);
    s->start = ina__get16(b + 66);
    s->digest = ina__get64(b + 68);
    memcpy(s->joined, b + 76, 32);
    memcpy(s->left, b + 108, 32);
    return 1;
}

/* Send u (rank u->rank, its id, base and stamp) to ps; @return its answer's status, or 99 if
 * none went to that rank. */
static int32_t update_status(struct ina_ps *ps, const struct upd *u)
{
    uint8_t b[4096], ack[INA_PS_UPDATE_ACK_LEN];
    size_t n = encode_update(ps, u, b, INA_K_PS_UPDATE);
    ina__ps_input(ps, b, n, &rank_addr[u->rank], 2);
    struct ina_hdr h;
    int got = replies(ps, INA_K_PS_UPDATE_ACK, &rank_addr[u->rank], &h, ack, sizeof(ack));
    ina__ps_tx_reset(ps);
    return got ? (int32_t)ina__get32(ack) : 99;
}

static void new_linked_ps(struct ina_ps *ps, struct ina_ps_sched *link)
{
    new_ps(ps);
    CHECK_EQ_INT(ina__ps_sched_init(link, ps, &sched_addr), 0);
    send_joins(ps, rank_addr, "stale", INA_PS_MODE_STALE, 2, 2, INA_OPTIM_SGD);
    ina__ps_tx_reset(ps);
    CHECK(ps->jobs[0].state == INA_PS_ACTIVE);
}

/* Voids: a worker dies holding stamp 1; a later stamp is held until the void; the late update
 * is answered VOIDED, never applied; fate questions; a range of orphans. */
static void test_void(void)
{
    static struct ina_ps ps;
    static struct ina_ps_sched link;
    new_linked_ps(&ps, &link);
    struct state st;
    rng_state = 3;
    struct upd u0 = {.rank = 0, .uid = 1, .base = 0, .stamp = 0};
    random_update(&u0);
    CHECK_EQ_INT(update_status(&ps, &u0), 0);
    struct upd u2 = {.rank = 2, .uid = 1, .base = 1, .stamp = 2}; /* stamp 1: rank 1, dead */
    random_update(&u2);
    CHECK_EQ_INT(update_status(&ps, &u2), INA_PS_UPDATE_HELD);
    sync_from(&ps, &sched_addr, "stale", INA_PS_SYNC_STATE, 2, 0, 0);
    CHECK(state_of(&ps, &st) && st.result == INA_PS_FATE_HELD && st.next_stamp == 1 &&
          st.version == 1 && st.held == (1u << 1) && st.world == WORLD && st.start == WORLD &&
          st.joined[0] == 0x0F && st.left[0] == 0);
    sync_from(&ps, &sched_addr, "stale", INA_PS_SYNC_STATE, 1, 0, 0);
    CHECK(state_of(&ps, &st) && st.result == INA_PS_FATE_WAITING);
    sync_from(&ps, &sched_addr, "stale", INA_PS_SYNC_VOID, 2, 1, 0); /* not its turn: nothing */
    CHECK(state_of(&ps, &st) && st.result == INA_PS_FATE_HELD && st.next_stamp == 1);
    /* VOID 1: voided, and the held stamp 2 taken at once, its outcome sent to rank 2 */
    sync_from(&ps, &sched_addr, "stale", INA_PS_SYNC_VOID, 1, 1, 0);
    struct ina_hdr h;
    uint8_t ack[INA_PS_UPDATE_ACK_LEN];
    CHECK_EQ_INT(replies(&ps, INA_K_PS_UPDATE_ACK, &rank_addr[2], &h, ack, sizeof(ack)), 1);
    CHECK(ina__get32(ack) == 0 && ina__get32(ack + 4) == 2 && ina__get32(ack + 8) == 0);
    CHECK(state_of(&ps, &st) && st.result == INA_PS_FATE_VOIDED && st.run == 1 &&
          st.next_stamp == 3 && st.version == 2);
    CHECK_EQ_INT(ps.c.stamps_voided, 1);
    /* the same VOID again (its answer lost): the same fate, nothing else */
    sync_from(&ps, &sched_addr, "stale", INA_PS_SYNC_VOID, 1, 1, 0);
    CHECK(state_of(&ps, &st) && st.result == INA_PS_FATE_VOIDED && st.next_stamp == 3);
    sync_from(&ps, &sched_addr, "stale", INA_PS_SYNC_STATE, 0, 0, 0);
    CHECK(state_of(&ps, &st) && st.result == INA_PS_FATE_TAKEN);
    /* rank 1 was only slow: its update with stamp 1 is answered VOIDED, never applied */
    float before[DIM];
    memcpy(before, ps.jobs[0].store.vals, sizeof(before));
    struct upd u1 = {.rank = 1, .uid = 1, .base = 0, .stamp = 1};
    random_update(&u1);
    CHECK_EQ_INT(update_status(&ps, &u1), INA_PS_UPDATE_VOIDED);
    CHECK_EQ_INT(update_status(&ps, &u1), INA_PS_UPDATE_VOIDED); /* a copy: the same */
    CHECK(memcmp(before, ps.jobs[0].store.vals, sizeof(before)) == 0);
    CHECK(ps.c.updates_voided == 1 && ps.c.update_dups == 1 && ps.c.updates_applied == 2);
    u1.uid = 2; /* its next update goes on as usual */
    u1.stamp = 3;
    u1.base = 2;
    CHECK_EQ_INT(update_status(&ps, &u1), 0);
    /* a restart's orphans: stamps 4..67 voided at once, except the one here (5, held) */
    struct upd u3 = {.rank = 3, .uid = 1, .base = 3, .stamp = 5};
    random_update(&u3);
    CHECK_EQ_INT(update_status(&ps, &u3), INA_PS_UPDATE_HELD);
    sync_from(&ps, &sched_addr, "stale", INA_PS_SYNC_VOID, 4, INA_PS_VOID_MAX, 0);
    CHECK_EQ_INT(replies(&ps, INA_K_PS_UPDATE_ACK, &rank_addr[3], NULL, ack, sizeof(ack)), 1);
    CHECK(ina__get32(ack) == 0);
    CHECK(state_of(&ps, &st) && st.result == INA_PS_FATE_VOIDED && st.run == 1 &&
          st.next_stamp == 4 + INA_PS_VOID_MAX);
    sync_from(&ps, &sched_addr, "stale", INA_PS_SYNC_STATE, 6, 0, 0);
    CHECK(state_of(&ps, &st) && st.result == INA_PS_FATE_VOIDED &&
          st.run == 4 + INA_PS_VOID_MAX - 6);
    sync_from(&ps, &sched_addr, "stale", INA_PS_SYNC_STATE, 5, 0, 0);
    CHECK(state_of(&ps, &st) && st.result == INA_PS_FATE_TAKEN);
    CHECK_EQ_INT(ps.c.stamps_voided, 1 + INA_PS_VOID_MAX - 1);
    CHECK_EQ_INT(ps.c.delay_violations, 0);
    ina__ps_sched_free(&ps);
    ina__ps_free(&ps);
}

/* A replica that missed a taken update (its worker died before sending it there) gets it
 * replayed from the primary through ina-sched, and is bit-identical again. */
static void test_replay(void)
{
    static struct ina_ps p, r;
    static struct ina_ps_sched pl, rl;
    new_linked_ps(&p, &pl);
    new_linked_ps(&r, &rl);
    rng_state = 9;
    uint32_t uid[WORLD] = {0};
    for (uint32_t g = 0; g < 40; g++) { /* stamps 0..39 to both, the last one to the primary */
        struct upd u = {.rank = (int)(g % WORLD), .uid = ++uid[g % WORLD], .base = g, .stamp = g};
        random_update(&u);
        CHECK_EQ_INT(update_status(&p, &u), 0);
        if (g < 39)
            CHECK_EQ_INT(update_status(&r, &u), 0);
    }
    CHECK(!same_model(&p, &r));
    struct state st;
    sync_from(&r, &sched_addr, "stale", INA_PS_SYNC_STATE, 0, 0, 0);
    CHECK(state_of(&r, &st) && st.next_stamp == 39);
    sync_from(&p, &sched_addr, "stale", INA_PS_SYNC_STATE, 39, 0, 0);
    CHECK(state_of(&p, &st) && st.result == INA_PS_FATE_TAKEN);
    /* REPLAY 39: the PS_REPLAY goes to ina-sched, before the PS_STATE */
    sync_from(&p, &sched_addr, "stale", INA_PS_SYNC_REPLAY, 39, 0, 0);
    CHECK(p.tx.n == 2);
    struct ina_hdr h;
    CHECK(ina__hdr_decode(p.tx.iov[0].iov_base, p.tx.iov[0].iov_len, &h) == INA_PARSE_OK &&
          h.kind == INA_K_PS_REPLAY && h.rank == 39 % WORLD && h.slot == uid[39 % WORLD] &&
          p.tx.dst[0].sin_port == sched_addr.sin_port);
    static uint8_t replay[4096];
    size_t rlen = p.tx.iov[0].iov_len;
    memcpy(replay, p.tx.iov[0].iov_base, rlen);
    CHECK(state_of(&p, &st) && st.result == INA_PS_FATE_TAKEN && st.run == 1);
    CHECK_EQ_INT(p.c.replays_sent, 1);
    /* forged or broken replays change nothing */
    ina__ps_input(&r, replay, rlen, &stranger, 4);
    CHECK_EQ_INT(r.c.drops[INA_PS_DROP_SCHED_SOURCE], 1);
    ina__ps_input(&r, replay, rlen - 1, &sched_addr, 4);
    CHECK_EQ_INT(r.c.drops[INA_PS_DROP_SCHED_LENGTH], 1);
    replay[INA_HDR_LEN] ^= 1; /* another job's name */
    ina__ps_input(&r, replay, rlen, &sched_addr, 4);
    CHECK_EQ_INT(r.c.drops[INA_PS_DROP_SCHED_JOB], 1);
    replay[INA_HDR_LEN] ^= 1;
    CHECK_EQ_INT(r.jobs[0].next_stamp, 39);
    ina__ps_tx_reset(&r);
    /* the replay from ina-sched: taken as rank 3's update, answered to rank 3 */
    ina__ps_input(&r, replay, rlen, &sched_addr, 4);
    uint8_t ack[INA_PS_UPDATE_ACK_LEN];
    CHECK_EQ_INT(replies(&r, INA_K_PS_UPDATE_ACK, &rank_addr[39 % WORLD], NULL, ack, sizeof(ack)), 1);
    CHECK(ina__get32(ack) == 0 && ina__get32(ack + 4) == 40);
    ina__ps_tx_reset(&r);
    CHECK(same_model(&p, &r) && ina__ps_job_digest(&p.jobs[0]) == ina__ps_job_digest(&r.jobs[0]));
    CHECK_EQ_INT(r.c.replays_taken, 1);
    ina__ps_input(&r, replay, rlen, &sched_addr, 4); /* twice: a copy, not applied again */
    ina__ps_tx_reset(&r);
    CHECK(r.c.update_dups == 1 && same_model(&p, &r));
    /* the worker was alive after all: its copy is a copy too */
    struct upd late = {.rank = 39 % WORLD, .uid = uid[39 % WORLD], .base = 39, .stamp = 39};
    rng_state = 9; /* not the same gradient: a copy is answered by its id, not its bytes */
    random_update(&late);
    CHECK_EQ_INT(update_status(&r, &late), 0);
    CHECK(r.c.update_dups == 2 && same_model(&p, &r));
    /* a stamp whose rank has sent a later update is not kept: no replay */
    sync_from(&p, &sched_addr, "stale", INA_PS_SYNC_REPLAY, 35, 0, 0);
    CHECK(p.tx.n == 1 && state_of(&p, &st) && st.result == INA_PS_FATE_TAKEN && st.run == 0);
    CHECK_EQ_INT(p.c.replays_sent, 1);
    /* the digest: equal models, equal digests; one more update, another */
    CHECK_EQ_INT(r.c.drops[INA_PS_DROP_ORDER], 0);
    struct upd more = {.rank = 0, .uid = uid[0] + 1, .base = 40, .stamp = 40};
    random_update(&more);
    CHECK_EQ_INT(update_status(&p, &more), 0);
    CHECK(ina__ps_job_digest(&p.jobs[0]) != ina__ps_job_digest(&r.jobs[0]));
    ina__ps_sched_free(&p);
    ina__ps_sched_free(&r);
    ina__ps_free(&p);
    ina__ps_free(&r);
}

/* DEPART, and every malformed or foreign PS_SYNC dropped with its counter. */
static void test_depart_and_drops(void)
{
    static struct ina_ps ps, closed;
    static struct ina_ps_sched link;
    new_linked_ps(&ps, &link);
    struct state st;
    sync_from(&ps, &sched_addr, "stale", INA_PS_SYNC_DEPART, 3, 0, 0);
    CHECK(state_of(&ps, &st) && st.left[0] == 0x08 && st.joined[0] == 0x0F);
    CHECK_EQ_INT(ps.c.ranks_departed, 1);
    sync_from(&ps, &sched_addr, "stale", INA_PS_SYNC_DEPART, 3, 0, 0); /* again: nothing */
    CHECK(state_of(&ps, &st) && st.left[0] == 0x08);
    sync_from(&ps, &sched_addr, "stale", INA_PS_SYNC_DEPART, 200, 0, 0); /* no such rank */
    CHECK(state_of(&ps, &st) && st.left[0] == 0x08);
    CHECK_EQ_INT(ps.c.ranks_departed, 1);
    sync_from(&ps, &stranger, "stale", INA_PS_SYNC_STATE, 0, 0, 0);
    CHECK(!state_of(&ps, &st) && ps.c.drops[INA_PS_DROP_SCHED_SOURCE] == 1);
    sync_from(&ps, &sched_addr, "stale", INA_PS_SYNC_STATE, 0, 0, 1);
    sync_from(&ps, &sched_addr, "stale", 4, 0, 0, 0);
    sync_from(&ps, &sched_addr, "stale", INA_PS_SYNC_VOID, 0, 0, 0);
    sync_from(&ps, &sched_addr, "stale", INA_PS_SYNC_VOID, 0, INA_PS_VOID_MAX + 1, 0);
    CHECK(!state_of(&ps, &st) && ps.c.drops[INA_PS_DROP_SCHED_LENGTH] == 4);
    sync_from(&ps, &sched_addr, "nosuch", INA_PS_SYNC_VOID, 0, 1, 0);
    CHECK(state_of(&ps, &st) && st.result == INA_PS_FATE_NO_JOB && st.next_stamp == 0);
    CHECK_EQ_INT(ps.jobs[0].next_stamp, 0);
    CHECK_EQ_INT(ps.c.sched_syncs, 4);
    /* every rank gone: the job ends, and the answer says so */
    for (uint32_t r = 0; r < 3; r++)
        sync_from(&ps, &sched_addr, "stale", INA_PS_SYNC_DEPART, r, 0, 0);
    CHECK(state_of(&ps, &st) && st.result == INA_PS_FATE_NO_JOB);
    CHECK(ps.jobs[0].state == INA_PS_FREE && ps.c.jobs_ended == 1);
    ina__ps_sched_free(&ps);
    ina__ps_free(&ps);
    /* without --sched, the kinds are dropped */
    new_ps(&closed);
    sync_from(&closed, &sched_addr, "stale", INA_PS_SYNC_STATE, 0, 0, 0);
    CHECK(closed.tx.n == 0 && closed.c.drops[INA_PS_DROP_SCHED_SOURCE] == 1);
    ina__ps_free(&closed);
}

/* A held update whose turn comes while the reply queue is full stays held (a worker told HELD
 * may already have sent its copy to the replica), and is taken at the next tick. */
static void test_held_kept(void)
{
    static struct ina_ps ps;
    new_ps(&ps);
    send_joins(&ps, rank_addr, "stale", INA_PS_MODE_STALE, 2, 2, INA_OPTIM_SGD);
    ina__ps_tx_reset(&ps);
    rng_state = 5;
    struct upd a = {.rank = 1, .uid = 1, .base = 0, .stamp = 1}, b = {.rank = 0, .uid = 1, .stamp = 0};
    random_update(&a);
    random_update(&b);
    CHECK_EQ_INT(update_status(&ps, &a), INA_PS_UPDATE_HELD);
    ps.tx.n = INA_PS_TX_MSGS - INA_PS_TX_RESERVE_MSGS; /* full once one more answer is queued */
    uint8_t buf[4096];
    size_t n = encode_update(&ps, &b, buf, INA_K_PS_UPDATE);
    ina__ps_input(&ps, buf, n, &rank_addr[0], 2);
    CHECK(ps.jobs[0].next_stamp == 1 && ps.jobs[0].held[1].used);
    ina__ps_tx_reset(&ps);
    ps.tx.n = 0;
    ina__ps_tick(&ps, 3);
    CHECK(ps.jobs[0].next_stamp == 2 && !ps.jobs[0].held[1].used && ps.c.updates_applied == 2);
    CHECK_EQ_INT(replies(&ps, INA_K_PS_UPDATE_ACK, &rank_addr[1], NULL, NULL, 0), 1);
    ina__ps_tx_reset(&ps);
    ina__ps_free(&ps);
}

int main(void)
{
    for (int r = 0; r <= WORLD; r++)
        rank_addr[r] = mkaddr(0x7f000001 + (uint32_t)r, (uint16_t)(40000 + r));
    sched_addr = mkaddr(0x7f000009, 41999);
    stranger = mkaddr(0x7f000009, 42000);
    ina__log_setup(INA_LOG_ERROR, INA_LOG_TEXT);
    test_elastic_join();
    test_void();
    test_replay();
    test_depart_and_drops();
    test_held_kept();
    return check_report("test_ps_member");
}
