/* test_join_replay.c: JOINs replayed after their session ended start nothing (with and without the shared secret), and with the secret a JOIN must echo a fresh cookie of the switch's (PROTOCOL.md §4.4, §5.2). No sockets. */
#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "common/log.h"
#include "engine/engine.h"
#include "test_addr.h"

#define NSLOTS 16
static struct ina_switch *sw;
static uint64_t now = 1000000000ull;
static int secret;
static struct ina_hmac_key key; /* the workers' copy of the secret */

static void sw_open(int with_secret, const struct ina_hmac_key *cookie_key)
{
    struct ina_switch_params p;
    memset(&p, 0, sizeof(p));
    p.nslots = NSLOTS;
    p.max_elems = 8;
    p.max_job_slots = NSLOTS; /* one job may hold the whole pool */
    p.min_job_slots = NSLOTS; /* ... and a second one does not fit */
    secret = with_secret;
    if (with_secret) {
        p.has_secret = 1;
        ina__hmac_key_init(&p.secret, "replay secret", 13);
        key = p.secret;
    }
    if (cookie_key) {
        p.cookie_key_set = 1;
        p.cookie_key = *cookie_key;
    }
    sw = calloc(1, sizeof(*sw));
    CHECK(sw && ina__switch_init(sw, &p) == 0);
    if (!sw)
        exit(1);
}

static void sw_close(void)
{
    ina__switch_free(sw);
    free(sw);
}

/* A captured datagram, to send again later. */
struct dg {
    uint8_t b[256];
    size_t len;
};

/* A JOIN of (name, rank, world, window 16) with nonce; with the secret, the
 * cookie (NULL: zeros) and the proof over everything before it. */
static struct dg join_dg(const char *name, int rank, int world, uint64_t nonce,
                         const uint8_t *cookie)
{
    struct dg d;
    memset(&d, 0, sizeof(d));
    struct ina_hdr h;
    ina__hdr_init(&h, INA_K_JOIN);
    h.rank = (uint16_t)rank;
    ina__hdr_encode(d.b, &h);
    struct ina_join j;
    memset(&j, 0, sizeof(j));
    j.nonce = nonce;
    j.world_size = (uint16_t)world;
    j.elems = 8;
    j.window = NSLOTS;
    j.nlanes = 1;
    snprintf(j.name, sizeof(j.name), "%s", name);
    ina__join_encode(d.b + INA_HDR_LEN, &j);
    d.len = INA_HDR_LEN + INA_JOIN_BODY_LEN;
    if (secret) {
        if (cookie)
            memcpy(d.b + d.len, cookie, INA_COOKIE_LEN);
        d.len += INA_COOKIE_LEN;
        ina__hmac_sha256(&key, d.b, d.len, d.b + d.len);
        d.len += INA_AUTH_LEN;
    }
    return d;
}

static void input(const struct dg *d, const struct sockaddr_in *src)
{
    ina__switch_input(sw, d->b, d->len, src, now);
}

/* The kind of the last datagram queued to dst (-1: none); its NAK reason
 * (or 0), and its cookie if it is a JOIN_COOKIE. */
static int last_to(const struct sockaddr_in *dst, int32_t *reason, uint8_t *cookie)
{
    *reason = 0;
    for (int i = (int)sw->txq.nmsg - 1; i >= 0; i--) {
        if (!ina__addr_eq(&sw->txq.addrs[i], dst))
            continue;
        const uint8_t *b = sw->txq.iovs[i].iov_base;
        size_t len = sw->txq.iovs[i].iov_len;
        uint64_t nonce;
        if (b[3] == INA_K_JOIN_NAK)
            ina__nak_decode(b + INA_HDR_LEN, len - INA_HDR_LEN, &nonce, reason);
        if (b[3] == INA_K_JOIN_COOKIE && cookie) {
            CHECK_EQ_INT(len, INA_HDR_LEN + INA_JOIN_COOKIE_BODY_LEN);
            memcpy(cookie, b + INA_HDR_LEN + 8, INA_COOKIE_LEN);
        }
        return b[3];
    }
    return -1;
}

/*
 * A worker's join as libina does it: JOIN; with the secret the switch
 * answers JOIN_COOKIE and the JOIN goes again with the cookie. @return the
 * datagram that the switch took (a capture of it can be replayed).
 */
static struct dg join(const char *name, int rank, int world, uint64_t nonce,
                      const struct sockaddr_in *src)
{
    struct dg d = join_dg(name, rank, world, nonce, NULL);
    ina__txq_reset(&sw->txq);
    input(&d, src);
    if (!secret)
        return d;
    uint8_t cookie[INA_COOKIE_LEN];
    int32_t reason;
    CHECK_EQ_INT(last_to(src, &reason, cookie), INA_K_JOIN_COOKIE);
    d = join_dg(name, rank, world, nonce, cookie);
    input(&d, src);
    return d;
}

static void leave(const struct ina_job *job, int rank, const struct sockaddr_in *src)
{
    uint8_t b[INA_HDR_LEN];
    struct ina_hdr h;
    ina__hdr_init(&h, INA_K_LEAVE);
    h.job = job->id;
    h.rank = (uint16_t)rank;
    h.session = job->session;
    h.token = job->token;
    ina__hdr_encode(b, &h);
    ina__switch_input(sw, b, sizeof(b), src, now);
}

static struct ina_job *job_named(const char *name)
{
    for (int i = 0; i < INA_SW_MAX_JOBS; i++)
        if (sw->jobs[i].state != INA_JOB_FREE && strcmp(sw->jobs[i].name, name) == 0)
            return &sw->jobs[i];
    return NULL;
}

static uint32_t slots_held(void)
{
    uint32_t n = 0;
    for (uint32_t i = 0; i < NSLOTS; i++)
        n += sw->slot_owner[i] != 0;
    return n;
}

/*
 * Issue 30, item 4: a job of two ranks runs and ends; every JOIN its ranks
 * sent, replayed from their own addresses (the worst an attacker who
 * captured them and can spoof can do), is refused: no job, no slot held, and
 * a later job gets the whole pool. With the secret, the replay of the
 * JOINs' cookies within their few seconds meets the same refusal, and
 * later only a challenge.
 */
static void test_finished_job_stays_dead(int with_secret)
{
    sw_open(with_secret, NULL);
    const struct sockaddr_in a0 = mkaddr(0x7F000001, 4000), a1 = mkaddr(0x7F000001, 4001);
    struct dg j0 = join("done", 0, 2, 0xD0, &a0), j1 = join("done", 1, 2, 0xD1, &a1);
    struct ina_job *job = job_named("done");
    CHECK(job && job->state == INA_JOB_ACTIVE);
    if (!job)
        return;
    CHECK_EQ_INT(slots_held(), NSLOTS);
    leave(job, 0, &a0);
    leave(job, 1, &a1);
    CHECK(job_named("done") == NULL);
    CHECK_EQ_INT(slots_held(), 0);
    CHECK_EQ_INT(sw->c.jobs_ended, 1);

    /* The replay, at once (with the secret: the cookies are still fresh). */
    for (int k = 0; k < 3; k++) {
        ina__txq_reset(&sw->txq);
        input(&j0, &a0);
        input(&j1, &a1);
        int32_t reason;
        CHECK_EQ_INT(last_to(&a0, &reason, NULL), INA_K_JOIN_NAK);
        CHECK_EQ_INT(reason, INA_ERR_REJECTED);
        CHECK_EQ_INT(last_to(&a1, &reason, NULL), INA_K_JOIN_NAK);
        CHECK(job_named("done") == NULL);
    }
    CHECK_EQ_INT(sw->c.joins_replayed, 6);
    CHECK_EQ_INT(sw->c.jobs_started, 1);
    CHECK_EQ_INT(slots_held(), 0);

    /* Later, from other ports of the host too: still nothing. */
    now += INA_SW_COOKIE_NS + 1;
    const struct sockaddr_in b0 = mkaddr(0x7F000001, 4100);
    ina__txq_reset(&sw->txq);
    input(&j0, &a0);
    input(&j1, &b0);
    CHECK(job_named("done") == NULL);
    int32_t reason;
    uint8_t cookie[INA_COOKIE_LEN];
    if (with_secret) {
        /* Its cookie is stale: challenged (the replayer cannot prove a new one). */
        CHECK_EQ_INT(last_to(&a0, &reason, cookie), INA_K_JOIN_COOKIE);
        CHECK_EQ_INT(sw->c.joins_replayed, 6);
    } else {
        CHECK_EQ_INT(last_to(&a0, &reason, NULL), INA_K_JOIN_NAK);
        CHECK_EQ_INT(reason, INA_ERR_REJECTED);
        CHECK_EQ_INT(sw->c.joins_replayed, 8);
    }

    /* The pool is free: a later job of the same name starts with all of it. */
    const struct sockaddr_in c0 = mkaddr(0x7F000001, 5000), c1 = mkaddr(0x7F000001, 5001);
    join("done", 0, 2, 0xE0, &c0);
    join("done", 1, 2, 0xE1, &c1);
    job = job_named("done");
    CHECK(job && job->state == INA_JOB_ACTIVE && job->window == NSLOTS);
    /* A replay of the old session's JOIN does not end the new one either
     * (a new nonce from the same host would: a restarted rank, §5.2 5″). */
    input(&j0, &a0);
    CHECK(job_named("done") == job && job->state == INA_JOB_ACTIVE);
    CHECK_EQ_INT(sw->c.jobs_aborted, 0);
    sw_close();
}

/* A job refused NOSPACE is not started later by its JOINs replayed (after
 * the 5 s in which a lost NAK is repeated, §5.2 step 3″). */
static void test_refused_job_stays_refused(void)
{
    sw_open(0, NULL);
    const struct sockaddr_in h = mkaddr(0x7F000001, 3000);
    join("hog", 0, 1, 0x40, &h); /* holds the whole pool */
    CHECK_EQ_INT(slots_held(), NSLOTS);
    const struct sockaddr_in a0 = mkaddr(0x7F000001, 4000), a1 = mkaddr(0x7F000001, 4001);
    struct dg j0 = join("late", 0, 2, 0x50, &a0), j1 = join("late", 1, 2, 0x51, &a1);
    CHECK_EQ_INT(sw->c.jobs_refused, 1);
    struct ina_job *hog = job_named("hog");
    if (hog)
        leave(hog, 0, &h);
    CHECK_EQ_INT(slots_held(), 0);
    now += INA_SW_REFUSED_NS + 1;
    input(&j0, &a0);
    input(&j1, &a1);
    CHECK(job_named("late") == NULL);
    CHECK_EQ_INT(sw->c.jobs_started, 1);
    CHECK_EQ_INT(sw->c.joins_replayed, 2);
    sw_close();
}

/* A rank that joins again with its nonce from a new port of its host ends
 * the session (§5.2 step 5″) and joins on: its nonce is not refused then. */
static void test_same_nonce_new_port(void)
{
    sw_open(0, NULL);
    const struct sockaddr_in a0 = mkaddr(0x7F000001, 4000), a1 = mkaddr(0x7F000001, 4001),
                             a0b = mkaddr(0x7F000001, 4002);
    join("moved", 0, 2, 0x70, &a0);
    join("moved", 1, 2, 0x71, &a1);
    CHECK_EQ_INT(sw->c.jobs_started, 1);
    join("moved", 0, 2, 0x70, &a0b);
    CHECK_EQ_INT(sw->c.jobs_aborted, 1);
    struct ina_job *job = job_named("moved");
    CHECK(job && job->state == INA_JOB_JOINING && job->njoined == 1);
    join("moved", 0, 2, 0x70, &a0b); /* its next JOIN: still registered, not refused */
    CHECK_EQ_INT(sw->c.joins_replayed, 0);
    join("moved", 1, 2, 0x72, &a1);
    CHECK(job && job->state == INA_JOB_ACTIVE);
    sw_close();
}

/* The memory of ended registrations is bounded: the oldest go first. */
static void test_memory_bounded(void)
{
    sw_open(0, NULL);
    const struct sockaddr_in a = mkaddr(0x7F000001, 4000);
    struct dg first = join("one", 0, 1, 1, &a);
    for (uint64_t n = 1; n <= INA_SW_ENDED_KEEP; n++) {
        struct ina_job *job = job_named("one");
        CHECK(job != NULL);
        if (!job)
            break;
        leave(job, 0, &a);
        if (n < INA_SW_ENDED_KEEP)
            join("one", 0, 1, n + 1, &a);
    }
    CHECK_EQ_INT(sw->nended, INA_SW_ENDED_KEEP);
    input(&first, &a); /* still remembered: the last of 4096 */
    CHECK(job_named("one") == NULL);
    CHECK_EQ_INT(sw->c.joins_replayed, 1);
    join("one", 0, 1, 1u << 20, &a);
    leave(job_named("one"), 0, &a); /* one more ends: the first is forgotten */
    input(&first, &a);
    CHECK(job_named("one") != NULL);
    sw_close();
}

/* With the secret, the cookie: bound to the JOIN's source, nonce, rank and
 * name, fresh for INA_SW_COOKIE_NS, and made under the switch's own key. */
static void test_cookie(void)
{
    sw_open(1, NULL);
    const struct sockaddr_in a = mkaddr(0x7F000001, 4000), b = mkaddr(0x7F000001, 4001);
    int32_t reason;
    uint8_t cookie[INA_COOKIE_LEN], c2[INA_COOKIE_LEN];
    /* The first JOIN: challenged; no registration yet. */
    struct dg d = join_dg("ck", 0, 2, 0xC0, NULL);
    input(&d, &a);
    CHECK_EQ_INT(last_to(&a, &reason, cookie), INA_K_JOIN_COOKIE);
    CHECK_EQ_INT(sw->txq.nmsg, 1);
    const uint8_t *body = (const uint8_t *)sw->txq.iovs[0].iov_base + INA_HDR_LEN;
    CHECK_EQ_INT(ina__get32(body + 4), 0xC0); /* the JOIN's nonce */
    CHECK(job_named("ck") == NULL);
    CHECK_EQ_INT(sw->c.join_challenges, 1);
    /* Its cookie from another port, or under another nonce or rank: challenged again. */
    ina__txq_reset(&sw->txq);
    d = join_dg("ck", 0, 2, 0xC0, cookie);
    input(&d, &b);
    CHECK_EQ_INT(last_to(&b, &reason, c2), INA_K_JOIN_COOKIE);
    d = join_dg("ck", 0, 2, 0xC9, cookie);
    input(&d, &a);
    d = join_dg("ck", 1, 2, 0xC0, cookie);
    input(&d, &a);
    d = join_dg("ck2", 0, 2, 0xC0, cookie);
    input(&d, &a);
    CHECK(job_named("ck") == NULL && job_named("ck2") == NULL);
    CHECK_EQ_INT(sw->c.join_challenges, 5);
    /* A cookie changed by one bit: challenged (the proof is right, the cookie not ours). */
    cookie[20] ^= 1;
    d = join_dg("ck", 0, 2, 0xC0, cookie);
    input(&d, &a);
    CHECK(job_named("ck") == NULL);
    cookie[20] ^= 1;
    /* The right one: registered (JOIN_WAIT). */
    ina__txq_reset(&sw->txq);
    d = join_dg("ck", 0, 2, 0xC0, cookie);
    input(&d, &a);
    CHECK_EQ_INT(last_to(&a, &reason, NULL), INA_K_JOIN_WAIT);
    CHECK(job_named("ck") && job_named("ck")->njoined == 1);
    CHECK_EQ_INT(sw->c.join_challenges, 6);
    /* A cookie changed after the proof was made: AUTH, as any altered JOIN. */
    struct dg bad = d;
    bad.b[INA_HDR_LEN + INA_JOIN_BODY_LEN + 3] ^= 1;
    input(&bad, &a);
    CHECK_EQ_INT(last_to(&a, &reason, NULL), INA_K_JOIN_NAK);
    CHECK_EQ_INT(reason, INA_ERR_REJECTED);
    CHECK_EQ_INT(sw->c.drops[INA_DROP_AUTH], 1);
    /* The earlier layout (the proof right after the body, no cookie): AUTH. */
    struct ina_hmac_key k = key;
    struct dg old = join_dg("ck", 0, 2, 0xC0, NULL);
    old.len = INA_HDR_LEN + INA_JOIN_BODY_LEN;
    ina__hmac_sha256(&k, old.b, old.len, old.b + old.len);
    old.len += INA_AUTH_LEN;
    input(&old, &a);
    CHECK_EQ_INT(sw->c.drops[INA_DROP_AUTH], 2);
    /* Within its validity the cookie refreshes the registration; past it, the
     * JOIN is challenged and refreshes nothing: the worker joins again with
     * the new cookie at once, so its registration lives on. */
    now += INA_SW_COOKIE_NS / 2;
    input(&d, &a);
    CHECK_EQ_INT(job_named("ck")->members[0].join_seen_ns, now);
    now += INA_SW_COOKIE_NS / 2 + 1;
    ina__txq_reset(&sw->txq);
    input(&d, &a);
    CHECK_EQ_INT(last_to(&a, &reason, cookie), INA_K_JOIN_COOKIE);
    CHECK(job_named("ck")->members[0].join_seen_ns < now);
    d = join_dg("ck", 0, 2, 0xC0, cookie);
    input(&d, &a);
    CHECK_EQ_INT(job_named("ck")->members[0].join_seen_ns, now);
    sw_close();
}

/* Dataplane threads share the cookie key (ina-switch main.c): a worker that
 * one REDIRECTs to another keeps its cookie there; a switch with another
 * key does not take it. */
static void test_cookie_key_shared(void)
{
    sw_open(1, NULL);
    struct ina_hmac_key k0 = sw->cookie_key;
    const struct sockaddr_in a = mkaddr(0x7F000001, 4000);
    uint8_t cookie[INA_COOKIE_LEN];
    int32_t reason;
    struct dg d = join_dg("shared", 0, 2, 0x90, NULL);
    input(&d, &a);
    CHECK_EQ_INT(last_to(&a, &reason, cookie), INA_K_JOIN_COOKIE);
    sw_close();
    sw_open(1, &k0); /* "another thread", same key */
    d = join_dg("shared", 0, 2, 0x90, cookie);
    input(&d, &a);
    CHECK_EQ_INT(last_to(&a, &reason, NULL), INA_K_JOIN_WAIT);
    CHECK_EQ_INT(sw->c.join_challenges, 0);
    sw_close();
    sw_open(1, NULL); /* another switch: its own random key */
    input(&d, &a);
    CHECK_EQ_INT(last_to(&a, &reason, NULL), INA_K_JOIN_COOKIE);
    sw_close();
}

int main(void)
{
    ina__log_setup(INA_LOG_ERROR, INA_LOG_TEXT); /* refusals are expected here */
    test_finished_job_stays_dead(0);
    test_finished_job_stays_dead(1);
    test_refused_job_stays_refused();
    test_same_nonce_new_port();
    test_memory_bounded();
    test_cookie();
    test_cookie_key_shared();
    return check_report("test_join_replay");
}
